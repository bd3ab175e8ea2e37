/* One GPU correctness case for the forward: see aotk_check.h. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotk_check.h"
#include "aotk_error.h"
#include "aotk_half.h"
#include "aotk_reference.h"

const char *aotk__check_layout_name(aotk__check_layout layout) {
  static const char *const names[] = {"contiguous", "permuted", "padded", "offset"};
  return layout >= 0 && layout < AOTK__LAYOUT_COUNT ? names[layout] : "unknown";
}

/* splitmix64: a small, good generator; each case draws from its own seed. */
static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform01(uint64_t *state) { return ((next_random(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static float normal(uint64_t *state) {
  double u = uniform01(state), v = uniform01(state);
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* A 4-d tensor [batch, seqlen, heads, dim] placed in host and device storage per the layout. */
typedef struct placed_tensor {
  int64_t shape[4];
  int64_t strides[4];
  int64_t offset;         /* elements from the storage start to element 0 */
  int64_t storage_elements;
} placed_tensor;

static placed_tensor place(aotk__check_layout layout, int64_t b, int64_t s, int64_t h, int64_t d) {
  placed_tensor t = {{b, s, h, d}, {0, 0, 0, 1}, 0, 0};
  switch (layout) {
    case AOTK__LAYOUT_PERMUTED:
      t.strides[0] = h * s * d;
      t.strides[1] = d;
      t.strides[2] = s * d;
      t.storage_elements = b * h * s * d;
      break;
    case AOTK__LAYOUT_PADDED: {
      int64_t row = d + 3;
      t.strides[0] = s * h * row;
      t.strides[1] = h * row;
      t.strides[2] = row;
      t.storage_elements = b * s * h * row;
      break;
    }
    case AOTK__LAYOUT_OFFSET:
    case AOTK__LAYOUT_CONTIGUOUS:
    default:
      t.strides[0] = s * h * d;
      t.strides[1] = h * d;
      t.strides[2] = d;
      t.offset = layout == AOTK__LAYOUT_OFFSET ? 1 : 0;
      t.storage_elements = b * s * h * d + t.offset;
      break;
  }
  return t;
}

static int64_t element_index(const placed_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return t->offset + i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2] + i3 * t->strides[3];
}

static aotk_tensor as_aotk_tensor(const placed_tensor *t, CUdeviceptr base, aotk_dtype dtype, int element_bytes) {
  aotk_tensor out;
  memset(&out, 0, sizeof out);
  out.data = (void *)(uintptr_t)(base + (CUdeviceptr)(t->offset * element_bytes));
  out.dtype = dtype;
  out.rank = 4;
  for (int i = 0; i < 4; i++) {
    out.shape[i] = t->shape[i];
    out.strides[i] = t->strides[i];
  }
  return out;
}

typedef struct device_buffers {
  CUdeviceptr q, k, v, out, lse;
} device_buffers;

static void free_buffers(const aotk__driver *driver, device_buffers *buffers) {
  CUdeviceptr *all[] = {&buffers->q, &buffers->k, &buffers->v, &buffers->out, &buffers->lse};
  for (int i = 0; i < 5; i++) {
    if (*all[i]) driver->cuMemFree(*all[i]);
    *all[i] = 0;
  }
}

static uint16_t to_bits(float x, aotk_dtype dtype) {
  return dtype == AOTK_DTYPE_BFLOAT16 ? aotk__float_to_bf16(x) : aotk__float_to_fp16(x);
}

static float from_bits(uint16_t bits, aotk_dtype dtype) {
  return dtype == AOTK_DTYPE_BFLOAT16 ? aotk__bf16_to_float(bits) : aotk__fp16_to_float(bits);
}

/* Fills host storage with N(0, 1) values representable in dtype (padding too: it must not matter). */
static void fill_random(float *values, uint16_t *bits, int64_t count, aotk_dtype dtype, uint64_t *state) {
  for (int64_t i = 0; i < count; i++) {
    bits[i] = to_bits(normal(state), dtype);
    values[i] = from_bits(bits[i], dtype);
  }
}

/* Inside aotk__check_attn_fwd: a failed driver call sets the status and releases everything. */
#define CHECK_CU(call, what)                                  \
  do {                                                        \
    CUresult check_result = (call);                           \
    if (check_result != CUDA_SUCCESS) {                       \
      status = aotk__cuda_failure(driver, check_result, what); \
      goto done;                                              \
    }                                                         \
  } while (0)

static aotk_status upload(const aotk__driver *driver, CUdeviceptr *device, const void *host, size_t bytes) {
  AOTK__CU_TRY(driver, driver->cuMemAlloc(device, bytes), "cuMemAlloc");
  AOTK__CU_TRY(driver, driver->cuMemcpyHtoD(*device, host, bytes), "cuMemcpyHtoD");
  return AOTK_OK;
}

/* The query rows compared for one (batch, head): all, or a random subset including the first and
 * the last (where the masks and the tail block are). */
static int64_t choose_rows(int64_t seqlen_q, int64_t rows_per_head, int64_t *rows, uint64_t *state) {
  if (seqlen_q <= rows_per_head) {
    for (int64_t i = 0; i < seqlen_q; i++) rows[i] = i;
    return seqlen_q;
  }
  rows[0] = 0;
  rows[1] = seqlen_q - 1;
  for (int64_t i = 2; i < rows_per_head; i++) rows[i] = (int64_t)(next_random(state) % (uint64_t)seqlen_q);
  return rows_per_head;
}

aotk_status aotk__check_attn_fwd(const aotk__driver *driver, const aotk__fwd_check_case *c,
                                 aotk__fwd_check_result *r) {
  memset(r, 0, sizeof *r);
  uint64_t state = c->seed;
  const int64_t B = c->batch, SQ = c->seqlen_q, SK = c->seqlen_k, HQ = c->heads_q, HKV = c->heads_kv, D = c->head_dim;
  placed_tensor tq = place(c->layout, B, SQ, HQ, D), tk = place(c->layout, B, SK, HKV, D);
  placed_tensor tv = place(c->layout, B, SK, HKV, D), to = place(c->layout, B, SQ, HQ, D);
  /* lse [batch, heads_q, seqlen_q]: padded rows for the padded layout, packed otherwise. */
  int64_t lse_row = c->layout == AOTK__LAYOUT_PADDED ? SQ + 5 : SQ;
  int64_t lse_elements = B * HQ * lse_row;

  float *hq = malloc(sizeof(float) * (size_t)tq.storage_elements);
  float *hk = malloc(sizeof(float) * (size_t)tk.storage_elements);
  float *hv = malloc(sizeof(float) * (size_t)tv.storage_elements);
  int64_t max_bits = tq.storage_elements > tk.storage_elements ? tq.storage_elements : tk.storage_elements;
  if (to.storage_elements > max_bits) max_bits = to.storage_elements;
  uint16_t *bits = malloc(sizeof(uint16_t) * (size_t)max_bits);
  float *lse_host = malloc(sizeof(float) * (size_t)lse_elements);
  const int64_t rows_per_head = c->rows_per_head < 2 ? 2 : c->rows_per_head;
  int64_t *rows = malloc(sizeof(int64_t) * (size_t)(SQ < rows_per_head ? SQ : rows_per_head));
  double *ref = malloc(sizeof(double) * (size_t)D);
  float *lowp = malloc(sizeof(float) * (size_t)D);
  device_buffers dev = {0, 0, 0, 0, 0};
  aotk_status status = AOTK_OK;
  if (!hq || !hk || !hv || !bits || !lse_host || !rows || !ref || !lowp) {
    status = aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
    goto done;
  }

  fill_random(hq, bits, tq.storage_elements, c->dtype, &state);
  if ((status = upload(driver, &dev.q, bits, 2 * (size_t)tq.storage_elements)) != AOTK_OK) goto done;
  fill_random(hk, bits, tk.storage_elements, c->dtype, &state);
  if ((status = upload(driver, &dev.k, bits, 2 * (size_t)tk.storage_elements)) != AOTK_OK) goto done;
  fill_random(hv, bits, tv.storage_elements, c->dtype, &state);
  if ((status = upload(driver, &dev.v, bits, 2 * (size_t)tv.storage_elements)) != AOTK_OK) goto done;
  /* Poison: 0xffff is a NaN in both fp16 and bf16, 0xffffffff in fp32. */
  CHECK_CU(driver->cuMemAlloc(&dev.out, 2 * (size_t)to.storage_elements), "cuMemAlloc");
  CHECK_CU(driver->cuMemsetD8(dev.out, 0xff, 2 * (size_t)to.storage_elements), "cuMemsetD8");
  if (c->with_lse) {
    CHECK_CU(driver->cuMemAlloc(&dev.lse, 4 * (size_t)lse_elements), "cuMemAlloc");
    CHECK_CU(driver->cuMemsetD8(dev.lse, 0xff, 4 * (size_t)lse_elements), "cuMemsetD8");
  }

  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = as_aotk_tensor(&tq, dev.q, c->dtype, 2);
  params.k = as_aotk_tensor(&tk, dev.k, c->dtype, 2);
  params.v = as_aotk_tensor(&tv, dev.v, c->dtype, 2);
  params.out = as_aotk_tensor(&to, dev.out, c->dtype, 2);
  if (c->with_lse) {
    params.lse.data = (void *)(uintptr_t)dev.lse;
    params.lse.dtype = AOTK_DTYPE_FLOAT32;
    params.lse.rank = 3;
    params.lse.shape[0] = B;
    params.lse.shape[1] = HQ;
    params.lse.shape[2] = SQ;
    params.lse.strides[0] = HQ * lse_row;
    params.lse.strides[1] = lse_row;
    params.lse.strides[2] = 1;
  }
  params.softmax_scale = c->softmax_scale;
  params.causal = c->causal;

  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  if ((status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info)) != AOTK_OK) goto done;
  snprintf(r->kernel_name, sizeof r->kernel_name, "%s", info.kernel_name);
  r->from_ptx = info.from_ptx;
  if ((status = aotk_attn_fwd(&params, c->stream)) != AOTK_OK) goto done;
  CUresult sync = driver->cuStreamSynchronize((CUstream)c->stream);
  if (sync != CUDA_SUCCESS) {
    status = aotk__cuda_failure(driver, sync, "cuStreamSynchronize after aotk_attn_fwd");
    goto done;
  }
  CHECK_CU(driver->cuMemcpyDtoH(bits, dev.out, 2 * (size_t)to.storage_elements), "cuMemcpyDtoH");
  if (c->with_lse) {
    CHECK_CU(driver->cuMemcpyDtoH(lse_host, dev.lse, 4 * (size_t)lse_elements), "cuMemcpyDtoH");
  }

  /* Every output element written; every padding element left alone. */
  {
    unsigned char *covered = calloc((size_t)to.storage_elements, 1);
    if (covered == NULL) {
      status = aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
      goto done;
    }
    for (int64_t b = 0; b < B; b++)
      for (int64_t s = 0; s < SQ; s++)
        for (int64_t h = 0; h < HQ; h++)
          for (int64_t d = 0; d < D; d++) {
            int64_t i = element_index(&to, b, s, h, d);
            covered[i] = 1;
            if (isnan(from_bits(bits[i], c->dtype))) r->unwritten++;
          }
    for (int64_t i = 0; i < to.storage_elements; i++) {
      if (!covered[i] && bits[i] != 0xffff) r->clobbered++;
    }
    free(covered);
  }

  aotk__attn_reference_problem problem = {
      SQ, SK, HQ, HKV, D, hq + tq.offset, hk + tk.offset, hv + tv.offset,
      {tq.strides[0], tq.strides[1], tq.strides[2]}, {tk.strides[0], tk.strides[1], tk.strides[2]},
      {tv.strides[0], tv.strides[1], tv.strides[2]},
      c->softmax_scale != 0.0f ? (double)c->softmax_scale : 1.0 / sqrt((double)D), c->causal};
  for (int64_t b = 0; b < B; b++) {
    for (int64_t h = 0; h < HQ; h++) {
      int64_t count = choose_rows(SQ, rows_per_head, rows, &state);
      for (int64_t i = 0; i < count; i++) {
        int64_t s = rows[i];
        double ref_lse;
        aotk__attn_reference_row_f64(&problem, b, h, s, ref, &ref_lse);
        aotk__attn_reference_row_lowp(&problem, c->dtype, b, h, s, lowp);
        bool empty = isinf(ref_lse) && ref_lse < 0;
        for (int64_t d = 0; d < D; d++) {
          double got = from_bits(bits[element_index(&to, b, s, h, d)], c->dtype);
          double error = fabs(got - ref[d]);
          if (!(error <= r->max_error)) r->max_error = isnan(error) ? INFINITY : error;
          double lowp_error = fabs((double)lowp[d] - ref[d]);
          if (lowp_error > r->lowp_max_error) r->lowp_max_error = lowp_error;
          if (empty && got != 0.0) r->bad_empty_rows++;
        }
        if (c->with_lse) {
          double got_lse = lse_host[b * HQ * lse_row + h * lse_row + s];
          if (empty) {
            if (!(isinf(got_lse) && got_lse < 0)) r->bad_empty_rows++;
          } else {
            double error = fabs(got_lse - ref_lse) / (AOTK__CHECK_LSE_ABS + AOTK__CHECK_LSE_REL * fabs(ref_lse));
            if (!(error <= r->lse_max_error)) r->lse_max_error = isnan(error) ? INFINITY : error;
          }
        }
        r->rows_checked++;
      }
    }
  }
  /* lse_max_error is kept in units of its tolerance; convert back to an absolute figure for reports
   * only where it failed, via the detail line. */
  bool numbers_ok = r->max_error <= 2.0 * r->lowp_max_error + AOTK__CHECK_ERROR_FLOOR;
  bool lse_ok = r->lse_max_error <= 1.0;
  r->passed = numbers_ok && lse_ok && r->unwritten == 0 && r->clobbered == 0 && r->bad_empty_rows == 0;
  snprintf(r->detail, sizeof r->detail,
           "err %.3g (bound %.3g = 2 x same-precision %.3g + %.0e), lse err %.3g of tolerance, rows %lld, "
           "unwritten %lld, clobbered %lld, bad empty rows %lld",
           r->max_error, 2.0 * r->lowp_max_error + AOTK__CHECK_ERROR_FLOOR, r->lowp_max_error,
           AOTK__CHECK_ERROR_FLOOR, r->lse_max_error, (long long)r->rows_checked, (long long)r->unwritten,
           (long long)r->clobbered, (long long)r->bad_empty_rows);

done:
  free_buffers(driver, &dev);
  free(hq);
  free(hk);
  free(hv);
  free(bits);
  free(lse_host);
  free(rows);
  free(ref);
  free(lowp);
  return status;
}
