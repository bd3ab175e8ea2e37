/* One GPU correctness case for the forward or the backward: see aotk_check.h. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* lse [batch, heads_q, seqlen_q] fp32 with rows of `row_elements` (>= seqlen_q: padded layouts). */
static aotk_tensor lse_tensor(CUdeviceptr data, int64_t batch, int64_t heads_q, int64_t seqlen_q,
                              int64_t row_elements) {
  aotk_tensor t;
  memset(&t, 0, sizeof t);
  t.data = (void *)(uintptr_t)data;
  t.dtype = AOTK_DTYPE_FLOAT32;
  t.rank = 3;
  t.shape[0] = batch;
  t.shape[1] = heads_q;
  t.shape[2] = seqlen_q;
  t.strides[0] = heads_q * row_elements;
  t.strides[1] = row_elements;
  t.strides[2] = 1;
  return t;
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

/* Inside the check functions: a failed driver call sets the status and releases everything. */
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
  if (c->with_lse) params.lse = lse_tensor(dev.lse, B, HQ, SQ, lse_row);
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
      c->softmax_scale != 0.0f ? (double)c->softmax_scale : 1.0 / sqrt((double)D), c->causal, NULL, {0, 0, 0}};
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

/* --- the backward ------------------------------------------------------------------------------ */

enum { BWD_Q, BWD_K, BWD_V, BWD_OUT, BWD_DOUT, BWD_DQ, BWD_DK, BWD_DV, BWD_TENSORS };

/* The backward's references cost 12 dot products of head_dim per (query row, visible key, query
 * head), both together: ~1 us at head_dim 128, so one 1000 x 1000 case with 8 query heads takes ~8 s
 * on one core. They are spread over the machine's cores, up to this many threads. */
#define AOTK__CHECK_MAX_THREADS 64

/* The layout of the same alignment class with other strides: see aotk__bwd_check_case.mix_layouts. */
static aotk__check_layout partner_layout(aotk__check_layout layout) {
  switch (layout) {
    case AOTK__LAYOUT_CONTIGUOUS:
      return AOTK__LAYOUT_PERMUTED;
    case AOTK__LAYOUT_PERMUTED:
      return AOTK__LAYOUT_CONTIGUOUS;
    case AOTK__LAYOUT_PADDED:
      return AOTK__LAYOUT_OFFSET;
    case AOTK__LAYOUT_OFFSET:
    default:
      return AOTK__LAYOUT_PADDED;
  }
}

/* Maxima of one comparison (per gradient tensor: dq, dk, dv), kept per worker thread and merged. */
typedef struct bwd_comparison {
  double max_error[3];
  double lowp_max_error[3];
  double max_magnitude[3];
  int64_t elements_checked;
  int64_t bad_empty_rows;
  int out_of_memory;
} bwd_comparison;

/* The host reference of one case, shared by its worker threads. Phase 0 computes each (batch,
 * head_q, row)'s statistics; phase 1 computes each dq row and each dk/dv key row, both references,
 * and compares them with the GPU's bits. Items are handed out one at a time through next_item. */
typedef struct bwd_reference_job {
  const aotk__attn_reference_problem *problem;
  aotk_dtype dtype;
  int64_t batch;
  const placed_tensor *placed;  /* [BWD_TENSORS] */
  const uint16_t *gradient_bits[3];
  double *lse_f64, *delta_f64;  /* [batch][heads_q][seqlen_q] */
  float *lse_lowp, *delta_lowp;
  int phase;
  int64_t item_count;
  _Atomic int64_t next_item;
  bwd_comparison *per_worker;
} bwd_reference_job;

typedef struct bwd_worker {
  bwd_reference_job *job;
  int index;
} bwd_worker;

static void record(bwd_comparison *c, int tensor, double got, double exact, float lowp) {
  double error = fabs(got - exact);
  if (!(error <= c->max_error[tensor])) c->max_error[tensor] = isnan(error) ? INFINITY : error;
  double lowp_error = fabs((double)lowp - exact);
  if (!(lowp_error <= c->lowp_max_error[tensor])) c->lowp_max_error[tensor] = isnan(lowp_error) ? INFINITY : lowp_error;
  if (fabs(exact) > c->max_magnitude[tensor]) c->max_magnitude[tensor] = fabs(exact);
  c->elements_checked++;
}

static void *bwd_reference_worker(void *argument) {
  const bwd_worker *worker = argument;
  bwd_reference_job *job = worker->job;
  bwd_comparison *c = &job->per_worker[worker->index];
  const aotk__attn_reference_problem *p = job->problem;
  const int64_t D = p->head_dim, SQ = p->seqlen_q, SK = p->seqlen_k, HQ = p->heads_q, HKV = p->heads_kv;
  double *exact = malloc(sizeof(double) * (size_t)(2 * D));
  float *lowp = malloc(sizeof(float) * (size_t)(2 * D));
  if (exact == NULL || lowp == NULL) {
    c->out_of_memory = 1;
    free(exact);
    free(lowp);
    return NULL;
  }
  const int64_t dq_items = job->batch * HQ * SQ;
  for (;;) {
    int64_t item = atomic_fetch_add(&job->next_item, 1);
    if (item >= job->item_count) break;
    if (job->phase == 0) {
      /* item = (b * HQ + h) * SQ + s: the statistics' own index. */
      int64_t s = item % SQ, h = item / SQ % HQ, b = item / SQ / HQ;
      aotk__attn_reference_bwd_row_stats_f64(p, b, h, s, exact, &job->lse_f64[item], &job->delta_f64[item]);
      aotk__attn_reference_bwd_row_stats_lowp(p, (int)job->dtype, b, h, s, lowp, &job->lse_lowp[item],
                                              &job->delta_lowp[item]);
    } else if (item < dq_items) {
      int64_t s = item % SQ, h = item / SQ % HQ, b = item / SQ / HQ;
      aotk__attn_reference_bwd_dq_row_f64(p, b, h, s, job->lse_f64[item], job->delta_f64[item], exact);
      aotk__attn_reference_bwd_dq_row_lowp(p, (int)job->dtype, b, h, s, job->lse_lowp[item], job->delta_lowp[item],
                                           lowp);
      bool empty = isinf(job->lse_f64[item]);
      bool nonzero = false;
      for (int64_t d = 0; d < D; d++) {
        double got = from_bits(job->gradient_bits[0][element_index(&job->placed[BWD_DQ], b, s, h, d)], job->dtype);
        record(c, 0, got, exact[d], lowp[d]);
        if (got != 0.0) nonzero = true;
      }
      if (empty && nonzero) c->bad_empty_rows++;
    } else {
      int64_t kv_item = item - dq_items;
      int64_t j = kv_item % SK, h = kv_item / SK % HKV, b = kv_item / SK / HKV;
      const int64_t stats = b * HQ * SQ;
      aotk__attn_reference_bwd_dkdv_row_f64(p, b, h, j, job->lse_f64 + stats, job->delta_f64 + stats, exact,
                                            exact + D);
      aotk__attn_reference_bwd_dkdv_row_lowp(p, (int)job->dtype, b, h, j, job->lse_lowp + stats,
                                             job->delta_lowp + stats, lowp, lowp + D);
      for (int64_t d = 0; d < D; d++) {
        double got_dk = from_bits(job->gradient_bits[1][element_index(&job->placed[BWD_DK], b, j, h, d)], job->dtype);
        double got_dv = from_bits(job->gradient_bits[2][element_index(&job->placed[BWD_DV], b, j, h, d)], job->dtype);
        record(c, 1, got_dk, exact[d], lowp[d]);
        record(c, 2, got_dv, exact[D + d], lowp[D + d]);
      }
    }
  }
  free(exact);
  free(lowp);
  return NULL;
}

/* Runs one phase on up to `threads` threads, the calling thread among them. A thread that cannot be
 * started leaves its share to the others. */
static void run_bwd_reference_phase(bwd_reference_job *job, int phase, int64_t item_count, int threads,
                                    bwd_worker *workers, pthread_t *handles) {
  job->phase = phase;
  job->item_count = item_count;
  atomic_store(&job->next_item, 0);
  bool started[AOTK__CHECK_MAX_THREADS] = {false};
  for (int i = 1; i < threads; i++) {
    workers[i].job = job;
    workers[i].index = i;
    started[i] = pthread_create(&handles[i], NULL, bwd_reference_worker, &workers[i]) == 0;
  }
  workers[0].job = job;
  workers[0].index = 0;
  bwd_reference_worker(&workers[0]);
  for (int i = 1; i < threads; i++) {
    if (started[i]) pthread_join(handles[i], NULL);
  }
}

static int reference_threads(void) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online < 1) return 1;
  return online > AOTK__CHECK_MAX_THREADS ? AOTK__CHECK_MAX_THREADS : (int)online;
}

/* Counts gradient elements still poisoned and padding elements no longer poisoned. */
static void count_unwritten_and_clobbered(const placed_tensor *t, const uint16_t *bits, aotk_dtype dtype,
                                          unsigned char *covered, aotk__bwd_check_result *r) {
  memset(covered, 0, (size_t)t->storage_elements);
  for (int64_t b = 0; b < t->shape[0]; b++)
    for (int64_t s = 0; s < t->shape[1]; s++)
      for (int64_t h = 0; h < t->shape[2]; h++)
        for (int64_t d = 0; d < t->shape[3]; d++) {
          int64_t i = element_index(t, b, s, h, d);
          covered[i] = 1;
          if (isnan(from_bits(bits[i], dtype))) r->unwritten++;
        }
  for (int64_t i = 0; i < t->storage_elements; i++) {
    if (!covered[i] && bits[i] != 0xffff) r->clobbered++;
  }
}

aotk_status aotk__check_attn_bwd(const aotk__driver *driver, const aotk__bwd_check_case *c,
                                 aotk__bwd_check_result *r) {
  memset(r, 0, sizeof *r);
  uint64_t state = c->seed;
  const int64_t B = c->batch, SQ = c->seqlen_q, SK = c->seqlen_k, HQ = c->heads_q, HKV = c->heads_kv, D = c->head_dim;
  placed_tensor placed[BWD_TENSORS];
  for (int t = 0; t < BWD_TENSORS; t++) {
    aotk__check_layout layout = c->mix_layouts && t % 2 == 1 ? partner_layout(c->layout) : c->layout;
    bool q_shaped = t == BWD_Q || t == BWD_OUT || t == BWD_DOUT || t == BWD_DQ;
    placed[t] = place(layout, B, q_shaped ? SQ : SK, q_shaped ? HQ : HKV, D);
  }
  /* lse [batch, heads_q, seqlen_q]: padded rows for the padded layout, packed otherwise. */
  const int64_t lse_row = c->layout == AOTK__LAYOUT_PADDED ? SQ + 5 : SQ;
  const int64_t lse_elements = B * HQ * lse_row;
  static const int inputs[] = {BWD_Q, BWD_K, BWD_V, BWD_DOUT};
  static const int gradients[] = {BWD_DQ, BWD_DK, BWD_DV};

  float *host[BWD_TENSORS] = {NULL};
  uint16_t *first_bits[3] = {NULL}, *repeat_bits = NULL, *bits = NULL;
  unsigned char *covered = NULL;
  double *lse_f64 = NULL, *delta_f64 = NULL;
  float *lse_lowp = NULL, *delta_lowp = NULL;
  bwd_comparison *per_worker = NULL;
  bwd_worker *workers = NULL;
  pthread_t *handles = NULL;
  CUdeviceptr dev[BWD_TENSORS] = {0}, dev_lse = 0, dev_workspace = 0;
  aotk_status status = AOTK_OK;

  int64_t max_storage = 0;
  for (int t = 0; t < BWD_TENSORS; t++) {
    if (placed[t].storage_elements > max_storage) max_storage = placed[t].storage_elements;
  }
  bool allocated = true;
  for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
    host[inputs[i]] = malloc(sizeof(float) * (size_t)placed[inputs[i]].storage_elements);
    allocated = allocated && host[inputs[i]] != NULL;
  }
  for (int g = 0; g < 3; g++) {
    first_bits[g] = malloc(sizeof(uint16_t) * (size_t)placed[gradients[g]].storage_elements);
    allocated = allocated && first_bits[g] != NULL;
  }
  bits = malloc(sizeof(uint16_t) * (size_t)max_storage);
  repeat_bits = malloc(sizeof(uint16_t) * (size_t)max_storage);
  covered = malloc((size_t)max_storage);
  const int64_t stats_count = B * HQ * SQ;
  lse_f64 = malloc(sizeof(double) * (size_t)stats_count);
  delta_f64 = malloc(sizeof(double) * (size_t)stats_count);
  lse_lowp = malloc(sizeof(float) * (size_t)stats_count);
  delta_lowp = malloc(sizeof(float) * (size_t)stats_count);
  const int threads = reference_threads();
  per_worker = calloc((size_t)threads, sizeof *per_worker);
  workers = calloc((size_t)threads, sizeof *workers);
  handles = calloc((size_t)threads, sizeof *handles);
  if (!allocated || !bits || !repeat_bits || !covered || !lse_f64 || !delta_f64 || !lse_lowp || !delta_lowp ||
      !per_worker || !workers || !handles) {
    status = aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
    goto done;
  }

  for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
    const placed_tensor *t = &placed[inputs[i]];
    fill_random(host[inputs[i]], bits, t->storage_elements, c->dtype, &state);
    if ((status = upload(driver, &dev[inputs[i]], bits, 2 * (size_t)t->storage_elements)) != AOTK_OK) goto done;
  }
  /* Poison: 0xffff is a NaN in both fp16 and bf16, 0xffffffff in fp32. */
  static const int outputs[] = {BWD_OUT, BWD_DQ, BWD_DK, BWD_DV};
  for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) {
    size_t bytes = 2 * (size_t)placed[outputs[i]].storage_elements;
    CHECK_CU(driver->cuMemAlloc(&dev[outputs[i]], bytes), "cuMemAlloc");
    CHECK_CU(driver->cuMemsetD8(dev[outputs[i]], 0xff, bytes), "cuMemsetD8");
  }
  CHECK_CU(driver->cuMemAlloc(&dev_lse, 4 * (size_t)lse_elements), "cuMemAlloc");
  CHECK_CU(driver->cuMemsetD8(dev_lse, 0xff, 4 * (size_t)lse_elements), "cuMemsetD8");

  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = as_aotk_tensor(&placed[BWD_Q], dev[BWD_Q], c->dtype, 2);
  params.k = as_aotk_tensor(&placed[BWD_K], dev[BWD_K], c->dtype, 2);
  params.v = as_aotk_tensor(&placed[BWD_V], dev[BWD_V], c->dtype, 2);
  params.out = as_aotk_tensor(&placed[BWD_OUT], dev[BWD_OUT], c->dtype, 2);
  params.lse = lse_tensor(dev_lse, B, HQ, SQ, lse_row);
  params.softmax_scale = c->softmax_scale;
  params.causal = c->causal;
  params.dout = as_aotk_tensor(&placed[BWD_DOUT], dev[BWD_DOUT], c->dtype, 2);
  params.dq = as_aotk_tensor(&placed[BWD_DQ], dev[BWD_DQ], c->dtype, 2);
  params.dk = as_aotk_tensor(&placed[BWD_DK], dev[BWD_DK], c->dtype, 2);
  params.dv = as_aotk_tensor(&placed[BWD_DV], dev[BWD_DV], c->dtype, 2);
  params.deterministic = c->deterministic;

  if ((status = aotk_attn_fwd(&params, c->stream)) != AOTK_OK) goto done;
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  if ((status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info)) != AOTK_OK) goto done;
  snprintf(r->kernel_name, sizeof r->kernel_name, "%s", info.kernel_name);
  r->from_ptx = info.from_ptx;
  r->workspace_bytes = info.workspace_bytes;
  /* Exactly the reported size (cuMemAlloc aligns to 256 bytes); at least one byte to allocate. */
  const size_t workspace_alloc = info.workspace_bytes > 0 ? info.workspace_bytes : 1;
  CHECK_CU(driver->cuMemAlloc(&dev_workspace, workspace_alloc), "cuMemAlloc");

  for (int run = 0; run <= (c->repeats > 0 ? c->repeats : 0); run++) {
    if (run > 0) {
      /* Re-poisoned, so that a run that skips an element cannot pass on the previous run's value. */
      for (int g = 0; g < 3; g++) {
        CHECK_CU(driver->cuMemsetD8(dev[gradients[g]], 0xff, 2 * (size_t)placed[gradients[g]].storage_elements),
                 "cuMemsetD8");
      }
    }
    /* The workspace is documented as not read before it is written: poison it every time. */
    CHECK_CU(driver->cuMemsetD8(dev_workspace, 0xff, workspace_alloc), "cuMemsetD8");
    if ((status = aotk_attn_bwd(&params, (void *)(uintptr_t)dev_workspace, info.workspace_bytes, c->stream)) !=
        AOTK_OK) {
      goto done;
    }
    CUresult sync = driver->cuStreamSynchronize((CUstream)c->stream);
    if (sync != CUDA_SUCCESS) {
      status = aotk__cuda_failure(driver, sync, "cuStreamSynchronize after aotk_attn_bwd");
      goto done;
    }
    bool same = true;
    for (int g = 0; g < 3; g++) {
      size_t bytes = 2 * (size_t)placed[gradients[g]].storage_elements;
      uint16_t *into = run == 0 ? first_bits[g] : repeat_bits;
      CHECK_CU(driver->cuMemcpyDtoH(into, dev[gradients[g]], bytes), "cuMemcpyDtoH");
      if (run > 0 && memcmp(into, first_bits[g], bytes) != 0) same = false;
    }
    if (!same) r->nondeterministic++;
  }

  for (int g = 0; g < 3; g++) {
    count_unwritten_and_clobbered(&placed[gradients[g]], first_bits[g], c->dtype, covered, r);
  }

  aotk__attn_reference_problem problem = {
      SQ, SK, HQ, HKV, D,
      host[BWD_Q] + placed[BWD_Q].offset, host[BWD_K] + placed[BWD_K].offset, host[BWD_V] + placed[BWD_V].offset,
      {placed[BWD_Q].strides[0], placed[BWD_Q].strides[1], placed[BWD_Q].strides[2]},
      {placed[BWD_K].strides[0], placed[BWD_K].strides[1], placed[BWD_K].strides[2]},
      {placed[BWD_V].strides[0], placed[BWD_V].strides[1], placed[BWD_V].strides[2]},
      c->softmax_scale != 0.0f ? (double)c->softmax_scale : 1.0 / sqrt((double)D), c->causal,
      host[BWD_DOUT] + placed[BWD_DOUT].offset,
      {placed[BWD_DOUT].strides[0], placed[BWD_DOUT].strides[1], placed[BWD_DOUT].strides[2]}};
  bwd_reference_job job = {&problem, c->dtype, B, placed, {first_bits[0], first_bits[1], first_bits[2]},
                           lse_f64, delta_f64, lse_lowp, delta_lowp, 0, 0, 0, per_worker};
  run_bwd_reference_phase(&job, 0, stats_count, threads, workers, handles);
  run_bwd_reference_phase(&job, 1, stats_count + B * HKV * SK, threads, workers, handles);

  for (int w = 0; w < threads; w++) {
    const bwd_comparison *pw = &per_worker[w];
    if (pw->out_of_memory) {
      status = aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
      goto done;
    }
    for (int g = 0; g < 3; g++) {
      if (!(pw->max_error[g] <= r->max_error[g])) r->max_error[g] = pw->max_error[g];
      if (!(pw->lowp_max_error[g] <= r->lowp_max_error[g])) r->lowp_max_error[g] = pw->lowp_max_error[g];
      if (pw->max_magnitude[g] > r->max_magnitude[g]) r->max_magnitude[g] = pw->max_magnitude[g];
    }
    r->elements_checked += pw->elements_checked;
    r->bad_empty_rows += pw->bad_empty_rows;
  }
  bool numbers_ok = true;
  for (int g = 0; g < 3; g++) {
    double scale = r->max_magnitude[g] > 1.0 ? r->max_magnitude[g] : 1.0;
    r->bound[g] = 2.0 * r->lowp_max_error[g] + AOTK__CHECK_BWD_ERROR_FLOOR * scale;
    double fraction = r->max_error[g] / r->bound[g];
    if (!(fraction <= r->worst_fraction)) r->worst_fraction = isnan(fraction) ? INFINITY : fraction;
    if (!(r->max_error[g] <= r->bound[g])) numbers_ok = false;
  }
  r->passed = numbers_ok && r->unwritten == 0 && r->clobbered == 0 && r->bad_empty_rows == 0 &&
              r->nondeterministic == 0;
  snprintf(r->detail, sizeof r->detail,
           "err/bound dq %.3g/%.3g dk %.3g/%.3g dv %.3g/%.3g (bound = 2 x same-precision + %.0e x max(1, max |ref|): "
           "same-precision %.3g %.3g %.3g, max |ref| %.3g %.3g %.3g), elements %lld, unwritten %lld, clobbered %lld, "
           "bad empty rows %lld, nondeterministic runs %lld of %d",
           r->max_error[0], r->bound[0], r->max_error[1], r->bound[1], r->max_error[2], r->bound[2],
           AOTK__CHECK_BWD_ERROR_FLOOR, r->lowp_max_error[0], r->lowp_max_error[1], r->lowp_max_error[2],
           r->max_magnitude[0], r->max_magnitude[1], r->max_magnitude[2], (long long)r->elements_checked,
           (long long)r->unwritten, (long long)r->clobbered, (long long)r->bad_empty_rows,
           (long long)r->nondeterministic, c->repeats > 0 ? c->repeats : 0);

done:
  for (int t = 0; t < BWD_TENSORS; t++) {
    if (dev[t]) driver->cuMemFree(dev[t]);
    free(host[t]);
  }
  if (dev_lse) driver->cuMemFree(dev_lse);
  if (dev_workspace) driver->cuMemFree(dev_workspace);
  for (int g = 0; g < 3; g++) free(first_bits[g]);
  free(bits);
  free(repeat_bits);
  free(covered);
  free(lse_f64);
  free(delta_f64);
  free(lse_lowp);
  free(delta_lowp);
  free(per_worker);
  free(workers);
  free(handles);
  return status;
}
