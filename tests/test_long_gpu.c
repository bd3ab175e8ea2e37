/* Dense attention over tensors that span more than 2^31 elements (issue 14), on the GPU against the
 * float64 reference on sampled rows.
 *
 * One sequence of SEQ = 262,400 tokens stored with a token stride of 8,192 elements (64 heads of 128:
 * the layout of a model with 64 heads, of which the problem reads 2 query heads and 1 kv head) spans
 * 2.15e9 elements: rows from 262,144 on start past 2^31. With the stride 8,200 (not a multiple of 8) the
 * same problem runs the pointer kernels instead of the sm_90 TMA ones. Cases:
 *   - the forward, causal, over the whole sequence (rows compared: the first, middle ones, the last
 *     below 2^31 and several past it, the last);
 *   - the forward and the backward with a causal window of 256 keys (so that the float64 reference of
 *     dk and dv, which needs the statistics of every row that sees a key, stays cheap): deterministic 0
 *     and 1;
 *   - the same in the varlen layout, two sequences [0, 1000) and [1000, SEQ) packed;
 *   - decoding one token over the k and v storage as a cache of SEQ keys (contiguous, appending a token
 *     at SEQ - 1, and 1025 shuffled pages of 256 keys), split and merged;
 *   - selection attention (NSA's selected branch) over the sequence, forward and backward.
 * Each output's storage is poisoned before the call and downloaded whole after it: every element of
 * the problem's heads written and finite, every other element (the other 62 heads, the padding) left
 * alone. Errors are bounded as the other GPU suites bound them: 2 x the same-precision reference's error
 * plus a floor. The buffers need about 35 GB of device memory and 5 GB of host memory; a device with
 * less skips. */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotk_test_harness.h"

#include "aotk_gpu_test.h"
#include "aotk_random.h"
#include "aotk_decode_reference.h"
#include "aotk_reference.h"
#include "aotk_sel_reference.h"

enum { SEQ = 262400, HEAD_DIM = 128, HEADS_Q = 2, HEADS_KV = 1, VARLEN_SPLIT = 1000, WINDOW = 256 };
#define SOFTMAX_SCALE 0.5f /* peaked rows: each output is a mix of a few keys' values, not their mean */
#define DTYPE AOTK_DTYPE_BFLOAT16
#define ERROR_FLOOR 1e-4
#define LSE_ABS 1e-4
#define LSE_REL 1e-5

/* The inputs, compact on the host ([SEQ][heads][HEAD_DIM], as floats and as bf16 bits), and their
 * strided copies on the device. */
static float *q_f, *k_f, *v_f, *do_f;
static uint16_t *q_b, *k_b, *v_b, *do_b;
static uint16_t *staging; /* one tensor's device storage, SEQ * token_stride elements */

typedef struct storage {
  CUdeviceptr q, k, v, out, dout, dq, dk, dv, lse;
  int64_t token_stride;
} storage;
static storage dev;

static size_t storage_elements(int64_t token_stride) { return (size_t)SEQ * (size_t)token_stride; }

static aotk_tensor view(CUdeviceptr base, int64_t heads, int64_t token_stride, bool varlen) {
  aotk_tensor t;
  memset(&t, 0, sizeof t);
  t.data = (void *)(uintptr_t)base;
  t.dtype = DTYPE;
  if (varlen) {
    t.rank = 3;
    t.shape[0] = SEQ, t.shape[1] = heads, t.shape[2] = HEAD_DIM;
    t.strides[0] = token_stride, t.strides[1] = HEAD_DIM, t.strides[2] = 1;
  } else {
    t.rank = 4;
    t.shape[0] = 1, t.shape[1] = SEQ, t.shape[2] = heads, t.shape[3] = HEAD_DIM;
    t.strides[0] = SEQ * token_stride, t.strides[1] = token_stride, t.strides[2] = HEAD_DIM, t.strides[3] = 1;
  }
  return t;
}

/* Allocates a tensor's storage; false (and a skip) when the device has too little memory. */
static bool alloc_storage(CUdeviceptr *pointer, int64_t token_stride) {
  CUresult result = driver->cuMemAlloc(pointer, storage_elements(token_stride) * 2);
  if (result != CUDA_SUCCESS) *pointer = 0;
  return result == CUDA_SUCCESS;
}

static bool upload_input(CUdeviceptr pointer, const uint16_t *bits, int64_t heads, int64_t token_stride) {
  memset(staging, 0, storage_elements(token_stride) * 2);
  for (int64_t s = 0; s < SEQ; s++) memcpy(staging + s * token_stride, bits + s * heads * HEAD_DIM, 2 * heads * HEAD_DIM);
  CUresult result = driver->cuMemcpyHtoD(pointer, staging, storage_elements(token_stride) * 2);
  CHECK_MSG(result == CUDA_SUCCESS, "cuMemcpyHtoD = %d", (int)result);
  return result == CUDA_SUCCESS;
}

static void free_storage(void) {
  CUdeviceptr *all[] = {&dev.q, &dev.k, &dev.v, &dev.out, &dev.dout, &dev.dq, &dev.dk, &dev.dv, &dev.lse};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) aotk_gpu_test_free(all[i]);
}

/* Every tensor of one token stride, the inputs uploaded; false: skipped (too little memory). */
static bool setup_storage(int64_t token_stride) {
  free_storage();
  dev.token_stride = token_stride;
  CUdeviceptr *big[] = {&dev.q, &dev.k, &dev.v, &dev.out, &dev.dout, &dev.dq, &dev.dk, &dev.dv};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
    if (!alloc_storage(big[i], token_stride)) {
      free_storage();
      return false;
    }
  }
  if (!aotk_gpu_test_alloc(&dev.lse, sizeof(float) * HEADS_Q * SEQ)) return false;
  return upload_input(dev.q, q_b, HEADS_Q, token_stride) && upload_input(dev.k, k_b, HEADS_KV, token_stride) &&
         upload_input(dev.v, v_b, HEADS_KV, token_stride) && upload_input(dev.dout, do_b, HEADS_Q, token_stride);
}

/* Downloads an output's storage into `staging` and counts its problem elements that are not finite
 * (or still poison) and the elements outside the problem that are no longer poison. */
static bool download_output(CUdeviceptr pointer, int64_t heads, int64_t *unwritten, int64_t *clobbered) {
  const int64_t stride = dev.token_stride;
  if (!aotk_gpu_test_download(staging, pointer, storage_elements(stride) * 2)) return false;
  *unwritten = *clobbered = 0;
  for (int64_t s = 0; s < SEQ; s++) {
    const uint16_t *row = staging + s * stride;
    for (int64_t i = 0; i < heads * HEAD_DIM; i++) {
      if (!isfinite(aotk__dtype_value(row[i], DTYPE))) (*unwritten)++;
    }
    for (int64_t i = heads * HEAD_DIM; i < stride; i++) {
      if (row[i] != 0xffff) (*clobbered)++;
    }
  }
  return true;
}

/* The largest error against the float64 reference over the elements compared, the same-precision
 * emulation's (for the bound) and the reference's magnitude. */
typedef struct tally {
  double error, lowp_error, magnitude;
} tally;

static void tally_add(tally *t, double got, double exact, double lowp) {
  const double error = fabs(got - exact), lowp_error = fabs(lowp - exact);
  if (!(error <= t->error)) t->error = isnan(error) ? INFINITY : error; /* NaN counts as infinite */
  if (lowp_error > t->lowp_error) t->lowp_error = lowp_error;
  if (fabs(exact) > t->magnitude) t->magnitude = fabs(exact);
}

/* The GPU suites' bound: 2 x the same-precision error plus a floor, which the gradients' scale with the
 * reference's magnitude. */
static double tally_bound(const tally *t, bool floor_scaled) {
  return 2.0 * t->lowp_error + ERROR_FLOOR * (floor_scaled && t->magnitude > 1.0 ? t->magnitude : 1.0);
}

/* lse's error, in units of its tolerance, into the largest seen. */
static void lse_add(double *worst, double got, double exact) {
  const double error = fabs(got - exact) / (LSE_ABS + LSE_REL * fabs(exact));
  if (!(error <= *worst)) *worst = isnan(error) ? INFINITY : error;
}

static float staged(int64_t token, int64_t head, int64_t d) {
  return aotk__dtype_value(staging[token * dev.token_stride + head * HEAD_DIM + d], DTYPE);
}

typedef struct long_case {
  const char *name;
  int64_t token_stride; /* 8192: the sm_90 TMA kernels; 8200: the pointer kernels */
  int windowed;         /* a causal window of WINDOW keys (else causal over the whole sequence) */
  int varlen;
  int backward;
  int deterministic;
  const char *fwd_kernel, *bwd_kernel; /* the prefix aotk_query's kernel name must have */
} long_case;

/* The sequences of a case: one, or two packed. */
static int sequences(const long_case *c, int64_t start[2], int64_t length[2]) {
  if (!c->varlen) {
    start[0] = 0, length[0] = SEQ;
    return 1;
  }
  start[0] = 0, length[0] = VARLEN_SPLIT;
  start[1] = VARLEN_SPLIT, length[1] = SEQ - VARLEN_SPLIT;
  return 2;
}

static void reference_problem(aotk__attn_reference_problem *p, const long_case *c, int64_t start, int64_t length) {
  memset(p, 0, sizeof *p);
  p->seqlen_q = p->seqlen_k = length;
  p->heads_q = HEADS_Q, p->heads_kv = HEADS_KV, p->head_dim = HEAD_DIM;
  p->q = q_f + start * HEADS_Q * HEAD_DIM, p->dout = do_f + start * HEADS_Q * HEAD_DIM;
  p->k = k_f + start * HEADS_KV * HEAD_DIM, p->v = v_f + start * HEADS_KV * HEAD_DIM;
  const int64_t q_strides[3] = {0, HEADS_Q * HEAD_DIM, HEAD_DIM}, kv_strides[3] = {0, HEADS_KV * HEAD_DIM, HEAD_DIM};
  memcpy(p->q_strides, q_strides, sizeof q_strides), memcpy(p->dout_strides, q_strides, sizeof q_strides);
  memcpy(p->k_strides, kv_strides, sizeof kv_strides), memcpy(p->v_strides, kv_strides, sizeof kv_strides);
  p->softmax_scale = SOFTMAX_SCALE;
  p->causal = 1;
  p->has_window = c->windowed;
  p->window_left = c->windowed ? WINDOW : -1;
  p->window_right = -1;
}

/* The global rows (tokens) compared: the first, a middle one, the last whose offset is under 2^31 at
 * the stride 8192, the first past it, three random ones past it, the last. */
static int sampled_tokens(int64_t *tokens, uint64_t *state) {
  int n = 0;
  tokens[n++] = 0;
  tokens[n++] = VARLEN_SPLIT; /* the second sequence's first row, varlen */
  tokens[n++] = 131072;
  tokens[n++] = 262143;
  tokens[n++] = 262144;
  for (int i = 0; i < 3; i++) tokens[n++] = aotk__random_int(state, 262145, SEQ - 2);
  tokens[n++] = SEQ - 1;
  return n;
}

static void run_long_case(const void *argument) {
  const long_case *c = argument;
  if (dev.token_stride != c->token_stride && !setup_storage(c->token_stride)) {
    TEST_SKIP("the device has too little memory for %zu-byte tensors", storage_elements(c->token_stride) * 2);
    return;
  }
  uint64_t state = seed ^ (uint64_t)c->token_stride;
  int64_t start[2], length[2];
  const int seqs = sequences(c, start, length);
  CUdeviceptr cu = 0;
  const int32_t cu_host[3] = {0, VARLEN_SPLIT, SEQ};
  if (c->varlen && !aotk_gpu_test_upload(&cu, cu_host, sizeof cu_host)) return;

  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = view(dev.q, HEADS_Q, c->token_stride, c->varlen);
  params.k = view(dev.k, HEADS_KV, c->token_stride, c->varlen);
  params.v = view(dev.v, HEADS_KV, c->token_stride, c->varlen);
  params.out = view(dev.out, HEADS_Q, c->token_stride, c->varlen);
  aotk_tensor lse = {(void *)(uintptr_t)dev.lse, AOTK_DTYPE_FLOAT32, 3, {1, HEADS_Q, SEQ}, {HEADS_Q * SEQ, SEQ, 1}};
  if (c->varlen) {
    aotk_tensor packed = {(void *)(uintptr_t)dev.lse, AOTK_DTYPE_FLOAT32, 2, {HEADS_Q, SEQ}, {SEQ, 1}};
    lse = packed;
    aotk_tensor cu_tensor = {(void *)(uintptr_t)cu, AOTK_DTYPE_INT32, 1, {3}, {1}};
    params.cu_seqlens_q = params.cu_seqlens_k = cu_tensor;
    params.max_seqlen_q = params.max_seqlen_k = SEQ - VARLEN_SPLIT;
  }
  params.lse = lse;
  params.softmax_scale = SOFTMAX_SCALE;
  params.causal = 1;
  params.window_left = c->windowed ? WINDOW : -1;

  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
  CHECK_MSG(status == AOTK_OK, "aotk_query: %s (%s)", aotk_status_name(status), aotk_last_error());
  CHECK_MSG(strncmp(info.kernel_name, c->fwd_kernel, strlen(c->fwd_kernel)) == 0, "the forward ran %s, not %s*",
            info.kernel_name, c->fwd_kernel);
  if (!aotk_gpu_test_poison(dev.out, storage_elements(c->token_stride) * 2) ||
      !aotk_gpu_test_poison(dev.lse, sizeof(float) * HEADS_Q * SEQ) || !aotk_gpu_test_settle()) {
    goto done;
  }
  status = aotk_attn_fwd(&params, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_OK, "aotk_attn_fwd: %s (%s)", aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK || !aotk_gpu_test_synchronize("the forward")) goto done;

  float *lse_host = malloc(sizeof(float) * HEADS_Q * SEQ);
  double ref[HEAD_DIM];
  float lowp[2 * HEAD_DIM];
  int64_t tokens[16];
  const int count = sampled_tokens(tokens, &state);
  if (lse_host == NULL || !aotk_gpu_test_download(lse_host, dev.lse, sizeof(float) * HEADS_Q * SEQ)) {
    free(lse_host);
    goto done;
  }
  int64_t lse_unwritten = 0;
  for (int64_t i = 0; i < (int64_t)HEADS_Q * SEQ; i++) lse_unwritten += isnan(lse_host[i]) ? 1 : 0;
  CHECK_MSG(lse_unwritten == 0, "lse: %lld rows unwritten", (long long)lse_unwritten);
  int64_t unwritten, clobbered;
  if (!download_output(dev.out, HEADS_Q, &unwritten, &clobbered)) {
    free(lse_host);
    goto done;
  }
  CHECK_MSG(unwritten == 0 && clobbered == 0, "out: %lld elements unwritten or not finite, %lld clobbered",
            (long long)unwritten, (long long)clobbered);
  tally out_errors = {0, 0, 0};
  double lse_max_error = 0.0;
  int rows = 0;
  for (int b = 0; b < seqs; b++) {
    aotk__attn_reference_problem p;
    reference_problem(&p, c, start[b], length[b]);
    for (int i = 0; i < count; i++) {
      const int64_t row = tokens[i] - start[b];
      if (row < 0 || row >= length[b]) continue;
      for (int64_t h = 0; h < HEADS_Q; h++) {
        double ref_lse;
        aotk__attn_reference_row_f64(&p, 0, h, row, ref, &ref_lse);
        aotk__attn_reference_row_lowp(&p, DTYPE, 0, h, row, lowp);
        for (int64_t d = 0; d < HEAD_DIM; d++) tally_add(&out_errors, staged(tokens[i], h, d), ref[d], lowp[d]);
        lse_add(&lse_max_error, lse_host[h * SEQ + tokens[i]], ref_lse);
        rows++;
      }
    }
  }
  const double bound = tally_bound(&out_errors, false);
  CHECK_MSG(out_errors.error <= bound && lse_max_error <= 1.0,
            "forward: err %.3g (bound %.3g), lse err %.3g of its tolerance, %d rows", out_errors.error, bound,
            lse_max_error, rows);
  printf("    forward %s: %d rows, err %.3g of bound %.3g, lse %.3g of tolerance\n", info.kernel_name, rows,
         out_errors.error, bound, lse_max_error);

  if (c->backward) {
    params.dout = view(dev.dout, HEADS_Q, c->token_stride, c->varlen);
    params.dq = view(dev.dq, HEADS_Q, c->token_stride, c->varlen);
    params.dk = view(dev.dk, HEADS_KV, c->token_stride, c->varlen);
    params.dv = view(dev.dv, HEADS_KV, c->token_stride, c->varlen);
    params.deterministic = c->deterministic;
    aotk_kernel_info bwd_info = AOTK_KERNEL_INFO_INIT;
    status = aotk_query(AOTK_OP_ATTN_BWD, &params, &bwd_info);
    CHECK_MSG(status == AOTK_OK, "aotk_query(bwd): %s (%s)", aotk_status_name(status), aotk_last_error());
    CHECK_MSG(strncmp(bwd_info.kernel_name, c->bwd_kernel, strlen(c->bwd_kernel)) == 0,
              "the backward ran %s, not %s*", bwd_info.kernel_name, c->bwd_kernel);
    CUdeviceptr workspace = 0;
    bool ready = aotk_gpu_test_alloc(&workspace, bwd_info.workspace_bytes);
    CUdeviceptr grads[3] = {dev.dq, dev.dk, dev.dv};
    for (int g = 0; g < 3 && ready; g++) ready = aotk_gpu_test_poison(grads[g], storage_elements(c->token_stride) * 2);
    if (ready && aotk_gpu_test_settle()) {
      status = aotk_attn_bwd(&params, (void *)(uintptr_t)workspace, bwd_info.workspace_bytes, (aotk_stream)stream);
      CHECK_MSG(status == AOTK_OK, "aotk_attn_bwd: %s (%s)", aotk_status_name(status), aotk_last_error());
      if (status == AOTK_OK && aotk_gpu_test_synchronize("the backward")) {
        /* The statistics of every row a compared key or row needs: float64 and same-precision. */
        double *lse64 = malloc(sizeof(double) * HEADS_Q * SEQ), *delta64 = malloc(sizeof(double) * HEADS_Q * SEQ);
        float *lse32 = malloc(sizeof(float) * HEADS_Q * SEQ), *delta32 = malloc(sizeof(float) * HEADS_Q * SEQ);
        tally errors[3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
        int64_t bad[3] = {0, 0, 0}, untouched[3] = {0, 0, 0};
        static const char *const names[3] = {"dq", "dk", "dv"};
        if (lse64 && delta64 && lse32 && delta32) {
          for (int b = 0; b < seqs; b++) {
            aotk__attn_reference_problem p;
            reference_problem(&p, c, start[b], length[b]);
            const int64_t base = start[b]; /* the statistics are kept per token: token = base + row */
            for (int i = 0; i < count; i++) {
              const int64_t row = tokens[i] - base;
              if (row < 0 || row >= length[b]) continue;
              /* Rows that see key `row` (window: up to WINDOW after it) and row `row` itself. */
              const int64_t last = row + WINDOW < length[b] ? row + WINDOW : length[b] - 1;
              for (int64_t r = row; r <= last; r++) {
                for (int64_t h = 0; h < HEADS_Q; h++) {
                  double out_row[HEAD_DIM];
                  float out_lowp[HEAD_DIM];
                  const int64_t at = h * length[b] + r;
                  aotk__attn_reference_bwd_row_stats_f64(&p, 0, h, r, out_row, &lse64[base * HEADS_Q + at],
                                                         &delta64[base * HEADS_Q + at]);
                  aotk__attn_reference_bwd_row_stats_lowp(&p, DTYPE, 0, h, r, out_lowp, &lse32[base * HEADS_Q + at],
                                                          &delta32[base * HEADS_Q + at]);
                }
              }
            }
          }
          for (int g = 0; g < 3; g++) {
            const int64_t heads = g == 0 ? HEADS_Q : HEADS_KV;
            if (!download_output(grads[g], heads, &bad[g], &untouched[g])) break;
            for (int b = 0; b < seqs; b++) {
              aotk__attn_reference_problem p;
              reference_problem(&p, c, start[b], length[b]);
              const double *l64 = lse64 + start[b] * HEADS_Q, *d64 = delta64 + start[b] * HEADS_Q;
              const float *l32 = lse32 + start[b] * HEADS_Q, *d32 = delta32 + start[b] * HEADS_Q;
              for (int i = 0; i < count; i++) {
                const int64_t row = tokens[i] - start[b];
                if (row < 0 || row >= length[b]) continue;
                for (int64_t h = 0; h < heads; h++) {
                  double exact[2 * HEAD_DIM];
                  if (g == 0) {
                    const int64_t at = h * length[b] + row;
                    aotk__attn_reference_bwd_dq_row_f64(&p, 0, h, row, l64[at], d64[at], exact);
                    aotk__attn_reference_bwd_dq_row_lowp(&p, DTYPE, 0, h, row, l32[at], d32[at], lowp);
                  } else {
                    aotk__attn_reference_bwd_dkdv_row_f64(&p, 0, h, row, l64, d64, exact, exact + HEAD_DIM);
                    aotk__attn_reference_bwd_dkdv_row_lowp(&p, DTYPE, 0, h, row, l32, d32, lowp, lowp + HEAD_DIM);
                  }
                  const int64_t offset = g == 2 ? HEAD_DIM : 0;
                  for (int64_t d = 0; d < HEAD_DIM; d++) {
                    tally_add(&errors[g], staged(tokens[i], h, d), exact[offset + d], lowp[offset + d]);
                  }
                }
              }
            }
          }
          for (int g = 0; g < 3; g++) {
            const double bound_g = tally_bound(&errors[g], true);
            CHECK_MSG(bad[g] == 0 && untouched[g] == 0, "%s: %lld elements unwritten or not finite, %lld clobbered",
                      names[g], (long long)bad[g], (long long)untouched[g]);
            CHECK_MSG(errors[g].error <= bound_g, "%s: err %.3g (bound %.3g)", names[g], errors[g].error, bound_g);
            printf("    backward %s %s: err %.3g of bound %.3g\n", bwd_info.kernel_name, names[g], errors[g].error,
                   bound_g);
          }
        } else {
          CHECK_MSG(false, "out of host memory for the statistics");
        }
        free(lse64), free(delta64), free(lse32), free(delta32);
      }
    }
    aotk_gpu_test_free(&workspace);
  }
  free(lse_host);
done:
  aotk_gpu_test_free(&cu);
}

/* --- decoding over a cache of 262,400 keys ------------------------------------------------------ */

/* One query token of 2 heads over the k and v storage as the cache of one request (contiguous, capacity
 * SEQ), or as 1025 pages of 256 keys in shuffled order; aotk chooses the splits (batch 1 over 1 kv head:
 * many, so the merge runs too). The contiguous case appends one token at position SEQ - 1, whose rows lie
 * past 2^31 elements: the cache rows are compared with what was appended, and the reference reads them. */
typedef struct decode_case {
  const char *name;
  int paged;
} decode_case;

enum { PAGE = 256, PAGES = SEQ / PAGE };

static void run_decode_case(const void *argument) {
  const decode_case *c = argument;
  if (dev.token_stride != 8192 && !setup_storage(8192)) {
    TEST_SKIP("the device has too little memory for %zu-byte tensors", storage_elements(8192) * 2);
    return;
  }
  uint64_t state = seed ^ 0xdec0deULL;
  float q_host[HEADS_Q * HEAD_DIM], new_f[2][HEAD_DIM];
  uint16_t q_bits[HEADS_Q * HEAD_DIM], new_b[2][HEAD_DIM];
  for (int i = 0; i < HEADS_Q * HEAD_DIM; i++) {
    q_bits[i] = aotk__dtype_bits(aotk__random_normal(&state), DTYPE);
    q_host[i] = aotk__dtype_value(q_bits[i], DTYPE);
  }
  for (int t = 0; t < 2; t++) {
    for (int d = 0; d < HEAD_DIM; d++) {
      new_b[t][d] = aotk__dtype_bits(aotk__random_normal(&state), DTYPE);
      new_f[t][d] = aotk__dtype_value(new_b[t][d], DTYPE);
    }
  }
  int32_t *table = malloc(sizeof(int32_t) * PAGES);
  if (table == NULL) {
    CHECK_MSG(false, "out of host memory");
    return;
  }
  for (int32_t i = 0; i < PAGES; i++) table[i] = i;
  aotk__random_shuffle_int32(table, PAGES, &state);
  const bool append = !c->paged;
  const int32_t cache_seqlen = append ? SEQ - 1 : SEQ;
  CUdeviceptr q = 0, out = 0, lse = 0, seqlens = 0, block_table = 0, k_new = 0, v_new = 0, workspace = 0;
  bool ready = aotk_gpu_test_upload(&q, q_bits, sizeof q_bits) && aotk_gpu_test_alloc(&out, 2 * HEADS_Q * HEAD_DIM) &&
               aotk_gpu_test_alloc(&lse, 4 * HEADS_Q) && aotk_gpu_test_upload(&seqlens, &cache_seqlen, 4) &&
               (!c->paged || aotk_gpu_test_upload(&block_table, table, sizeof(int32_t) * PAGES)) &&
               (!append || (aotk_gpu_test_upload(&k_new, new_b[0], 2 * HEAD_DIM) &&
                            aotk_gpu_test_upload(&v_new, new_b[1], 2 * HEAD_DIM)));
  if (!ready) goto done;
  aotk_decode_params params = AOTK_DECODE_PARAMS_INIT;
  aotk_tensor qt = {(void *)(uintptr_t)q, DTYPE, 4, {1, 1, HEADS_Q, HEAD_DIM}, {HEADS_Q * HEAD_DIM, HEADS_Q * HEAD_DIM, HEAD_DIM, 1}};
  aotk_tensor ot = qt;
  ot.data = (void *)(uintptr_t)out;
  aotk_tensor lt = {(void *)(uintptr_t)lse, AOTK_DTYPE_FLOAT32, 3, {1, HEADS_Q, 1}, {HEADS_Q, 1, 1}};
  aotk_tensor st = {(void *)(uintptr_t)seqlens, AOTK_DTYPE_INT32, 1, {1}, {1}};
  params.q = qt, params.out = ot, params.lse = lt, params.cache_seqlens = st;
  params.causal = 1;
  params.softmax_scale = SOFTMAX_SCALE;
  const int64_t ts = dev.token_stride;
  if (c->paged) {
    aotk_tensor kc = {(void *)(uintptr_t)dev.k, DTYPE, 4, {PAGES, PAGE, HEADS_KV, HEAD_DIM}, {PAGE * ts, ts, HEAD_DIM, 1}};
    aotk_tensor bt = {(void *)(uintptr_t)block_table, AOTK_DTYPE_INT32, 2, {1, PAGES}, {PAGES, 1}};
    params.k_cache = kc, params.block_table = bt;
  } else {
    aotk_tensor kc = {(void *)(uintptr_t)dev.k, DTYPE, 4, {1, SEQ, HEADS_KV, HEAD_DIM}, {SEQ * ts, ts, HEAD_DIM, 1}};
    aotk_tensor kn = {(void *)(uintptr_t)k_new, DTYPE, 4, {1, 1, HEADS_KV, HEAD_DIM}, {HEAD_DIM, HEAD_DIM, HEAD_DIM, 1}};
    params.k_cache = kc;
    params.k_new = kn;
    params.v_new = kn;
    params.v_new.data = (void *)(uintptr_t)v_new;
  }
  params.v_cache = params.k_cache;
  params.v_cache.data = (void *)(uintptr_t)dev.v;
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
  CHECK_MSG(status == AOTK_OK, "aotk_decode_query: %s (%s)", aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK || !aotk_gpu_test_alloc(&workspace, info.workspace_bytes) ||
      !aotk_gpu_test_poison(out, 2 * HEADS_Q * HEAD_DIM) || !aotk_gpu_test_poison(lse, 4 * HEADS_Q) ||
      !aotk_gpu_test_settle()) {
    goto done;
  }
  status = aotk_attn_decode(&params, (void *)(uintptr_t)workspace, info.workspace_bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_OK, "aotk_attn_decode: %s (%s)", aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK || !aotk_gpu_test_synchronize("the decode")) goto done;
  uint16_t out_bits[HEADS_Q * HEAD_DIM];
  float lse_host[HEADS_Q];
  if (!aotk_gpu_test_download(out_bits, out, sizeof out_bits) || !aotk_gpu_test_download(lse_host, lse, sizeof lse_host)) {
    goto done;
  }
  if (append) {
    /* The appended rows, at element (SEQ - 1) * 8192 of each cache, and the host copies the reference
     * (and the later cases' uploads) read. */
    uint16_t row[2][HEAD_DIM];
    const size_t at = (size_t)(SEQ - 1) * (size_t)ts * 2;
    if (!aotk_gpu_test_download(row[0], dev.k + at, sizeof row[0]) ||
        !aotk_gpu_test_download(row[1], dev.v + at, sizeof row[1])) {
      goto done;
    }
    CHECK_MSG(memcmp(row, new_b, sizeof row) == 0, "the appended token is not in the caches' row %d", SEQ - 1);
    for (int d = 0; d < HEAD_DIM; d++) {
      k_b[(int64_t)(SEQ - 1) * HEAD_DIM + d] = new_b[0][d], k_f[(int64_t)(SEQ - 1) * HEAD_DIM + d] = new_f[0][d];
      v_b[(int64_t)(SEQ - 1) * HEAD_DIM + d] = new_b[1][d], v_f[(int64_t)(SEQ - 1) * HEAD_DIM + d] = new_f[1][d];
    }
  }
  aotk__decode_reference_problem p;
  memset(&p, 0, sizeof p);
  p.batch = 1, p.seqlen_q = 1, p.heads_q = HEADS_Q, p.heads_kv = HEADS_KV, p.head_dim_qk = p.head_dim_v = HEAD_DIM;
  p.q = q_host;
  p.q_strides[0] = p.q_strides[1] = HEADS_Q * HEAD_DIM, p.q_strides[2] = HEAD_DIM;
  p.k_cache = k_f, p.v_cache = v_f;
  const int64_t block_rows = c->paged ? PAGE : SEQ;
  p.k_strides[0] = p.v_strides[0] = block_rows * HEADS_KV * HEAD_DIM;
  p.k_strides[1] = p.v_strides[1] = HEADS_KV * HEAD_DIM;
  p.k_strides[2] = p.v_strides[2] = HEAD_DIM;
  if (c->paged) p.block_table = table, p.block_table_stride = PAGES, p.page_size = PAGE;
  p.capacity = SEQ;
  p.cache_seqlens = &cache_seqlen;
  p.seqlen_new = append ? 1 : 0;
  p.softmax_scale = SOFTMAX_SCALE;
  p.causal = 1;
  p.window_left = p.window_right = -1;
  p.dtype = DTYPE;
  void *scratch = malloc(aotk__decode_reference_scratch_bytes(&p));
  double ref[HEADS_Q * HEAD_DIM], ref_lse[HEADS_Q];
  float lowp[HEADS_Q * HEAD_DIM];
  int64_t keys[HEADS_Q];
  if (scratch == NULL) {
    CHECK_MSG(false, "out of host memory");
    goto done;
  }
  aotk__decode_reference(&p, scratch, ref, lowp, ref_lse, keys);
  free(scratch);
  tally errors = {0, 0, 0};
  double lse_max_error = 0.0;
  for (int i = 0; i < HEADS_Q * HEAD_DIM; i++) tally_add(&errors, aotk__dtype_value(out_bits[i], DTYPE), ref[i], lowp[i]);
  for (int h = 0; h < HEADS_Q; h++) {
    lse_add(&lse_max_error, lse_host[h], ref_lse[h]);
    CHECK_MSG(keys[h] == SEQ, "head %d saw %lld keys", h, (long long)keys[h]);
  }
  const double bound = tally_bound(&errors, false);
  CHECK_MSG(errors.error <= bound && lse_max_error <= 1.0, "decode: err %.3g (bound %.3g), lse err %.3g of its tolerance",
            errors.error, bound, lse_max_error);
  printf("    %s (%d launches): err %.3g of bound %.3g, lse %.3g of tolerance\n", info.kernel_name, (int)info.launches,
         errors.error, bound, lse_max_error);
done:
  free(table);
  CUdeviceptr *all[] = {&q, &out, &lse, &seqlens, &block_table, &k_new, &v_new, &workspace};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) aotk_gpu_test_free(all[i]);
}

/* --- selection attention over the same sequence -------------------------------------------------- */

/* NSA's selected branch over the 262,400 tokens as one sequence: blocks of 64 keys, 16 slots, each token
 * selecting its own block, the first one and 14 random earlier ones (distinct). Forward and backward;
 * compared: the sampled tokens' out, lse and dq, and dk, dv of four blocks, three of them past 2^31
 * elements (the last blocks: few tokens select them, so the reference stays cheap). Every row of dk and
 * dv is written (zero where unselected), nothing else. */
enum { SEL_BLOCK = 64, SEL_SLOTS = 16, SEL_BLOCKS = (SEQ + SEL_BLOCK - 1) / SEL_BLOCK };

static double *to_double(const float *values, int64_t count) {
  double *out = malloc(sizeof(double) * (size_t)count);
  for (int64_t i = 0; out != NULL && i < count; i++) out[i] = values[i];
  return out;
}

static void run_sel_case(void) {
  if (dev.token_stride != 8192 && !setup_storage(8192)) {
    TEST_SKIP("the device has too little memory for %zu-byte tensors", storage_elements(8192) * 2);
    return;
  }
  uint64_t state = seed ^ 0x5e1ULL;
  const int64_t ts = dev.token_stride, q_items = (int64_t)SEQ * HEADS_Q * HEAD_DIM, kv_items = (int64_t)SEQ * HEADS_KV * HEAD_DIM;
  int32_t *idx = malloc(sizeof(int32_t) * SEQ * SEL_SLOTS);
  double *qd = to_double(q_f, q_items), *kd = to_double(k_f, kv_items), *vd = to_double(v_f, kv_items);
  double *dod = to_double(do_f, q_items);
  double *out64 = calloc((size_t)q_items, sizeof(double)), *lse64 = calloc((size_t)SEQ * HEADS_Q, sizeof(double));
  float *out32 = calloc((size_t)q_items, sizeof(float)), *lse32 = calloc((size_t)SEQ * HEADS_Q, sizeof(float));
  double *dk64 = calloc((size_t)kv_items, sizeof(double)), *dv64 = calloc((size_t)kv_items, sizeof(double));
  float *dk32 = calloc((size_t)kv_items, sizeof(float)), *dv32 = calloc((size_t)kv_items, sizeof(float));
  unsigned char *needed = calloc(SEQ, 1);
  CUdeviceptr index = 0, workspace = 0;
  if (!idx || !qd || !kd || !vd || !dod || !out64 || !lse64 || !out32 || !lse32 || !dk64 || !dv64 || !dk32 || !dv32 ||
      !needed) {
    TEST_SKIP("too little host memory for the selection reference");
    goto done;
  }
  for (int64_t t = 0; t < SEQ; t++) {
    int32_t *row = idx + t * SEL_SLOTS;
    const int32_t own = (int32_t)(t / SEL_BLOCK);
    for (int s = 0; s < SEL_SLOTS; s++) row[s] = -1;
    row[0] = own;
    if (own > 0) row[1] = 0;
    int filled = own > 0 ? 2 : 1;
    for (int tries = 0; filled < SEL_SLOTS && own > 1 && tries < 64; tries++) {
      const int32_t b = (int32_t)aotk__random_int(&state, 1, own - 1);
      bool seen = false;
      for (int s = 0; s < filled; s++) seen = seen || row[s] == b;
      if (!seen) row[filled++] = b;
    }
  }
  if (!aotk_gpu_test_upload(&index, idx, sizeof(int32_t) * SEQ * SEL_SLOTS)) goto done;
  aotk_sel_params params = AOTK_SEL_PARAMS_INIT;
  params.q = view(dev.q, HEADS_Q, ts, true);
  params.k = view(dev.k, HEADS_KV, ts, true);
  params.v = view(dev.v, HEADS_KV, ts, true);
  params.out = view(dev.out, HEADS_Q, ts, true);
  aotk_tensor lt = {(void *)(uintptr_t)dev.lse, AOTK_DTYPE_FLOAT32, 2, {SEQ, HEADS_Q}, {HEADS_Q, 1}};
  aotk_tensor it = {(void *)(uintptr_t)index, AOTK_DTYPE_INT32, 3, {SEQ, HEADS_KV, SEL_SLOTS}, {HEADS_KV * SEL_SLOTS, SEL_SLOTS, 1}};
  params.lse = lt, params.block_idx = it;
  params.block_size = SEL_BLOCK;
  params.softmax_scale = SOFTMAX_SCALE;
  params.dout = view(dev.dout, HEADS_Q, ts, true);
  params.dq = view(dev.dq, HEADS_Q, ts, true);
  params.dk = view(dev.dk, HEADS_KV, ts, true);
  params.dv = view(dev.dv, HEADS_KV, ts, true);
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_sel_query(AOTK_OP_SEL_BWD, &params, &info);
  CHECK_MSG(status == AOTK_OK, "aotk_sel_query: %s (%s)", aotk_status_name(status), aotk_last_error());
  CUdeviceptr outputs[4] = {dev.out, dev.dq, dev.dk, dev.dv};
  bool ready = status == AOTK_OK && aotk_gpu_test_alloc(&workspace, info.workspace_bytes);
  for (int i = 0; i < 4 && ready; i++) ready = aotk_gpu_test_poison(outputs[i], storage_elements(ts) * 2);
  if (!ready || !aotk_gpu_test_poison(dev.lse, sizeof(float) * HEADS_Q * SEQ) || !aotk_gpu_test_settle()) goto done;
  status = aotk_sel_fwd(&params, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_OK, "aotk_sel_fwd: %s (%s)", aotk_status_name(status), aotk_last_error());
  if (status == AOTK_OK) {
    status = aotk_sel_bwd(&params, (void *)(uintptr_t)workspace, info.workspace_bytes, (aotk_stream)stream);
    CHECK_MSG(status == AOTK_OK, "aotk_sel_bwd: %s (%s)", aotk_status_name(status), aotk_last_error());
  }
  if (status != AOTK_OK || !aotk_gpu_test_synchronize("the selection forward and backward")) goto done;

  aotk__sel_reference_problem p;
  memset(&p, 0, sizeof p);
  const int64_t cu[2] = {0, SEQ};
  p.num_seqs = 1, p.cu_seqlens_q = cu, p.cu_seqlens_k = cu;
  p.heads_q = HEADS_Q, p.heads_kv = HEADS_KV, p.head_dim_qk = p.head_dim_v = HEAD_DIM;
  p.block_size = SEL_BLOCK, p.slots = SEL_SLOTS, p.softmax_scale = SOFTMAX_SCALE;
  p.q = qd, p.k = kd, p.v = vd, p.dout = dod;
  p.q_strides[0] = p.dout_strides[0] = HEADS_Q * HEAD_DIM, p.q_strides[1] = p.dout_strides[1] = HEAD_DIM;
  p.k_strides[0] = p.v_strides[0] = HEADS_KV * HEAD_DIM, p.k_strides[1] = p.v_strides[1] = HEAD_DIM;
  p.block_idx = idx;
  /* The rows whose out and lse the comparisons need: the sampled tokens, and every token that selected
   * one of the compared blocks. */
  int64_t tokens[16];
  const int count = sampled_tokens(tokens, &state);
  const int64_t blocks[4] = {SEL_BLOCKS / 2, 262144 / SEL_BLOCK, 262144 / SEL_BLOCK + 1, SEL_BLOCKS - 1};
  for (int i = 0; i < count; i++) needed[tokens[i]] = 1;
  for (int64_t t = 0; t < SEQ; t++) {
    for (int s = 0; s < SEL_SLOTS; s++) {
      for (int b = 0; b < 4; b++) needed[t] |= idx[t * SEL_SLOTS + s] == blocks[b];
    }
  }
  int64_t needed_rows = 0;
  for (int64_t t = 0; t < SEQ; t++) {
    if (!needed[t]) continue;
    needed_rows++;
    for (int64_t h = 0; h < HEADS_Q; h++) {
      const int64_t at = (t * HEADS_Q + h) * HEAD_DIM;
      aotk__sel_reference_fwd_row_f64(&p, t, h, out64 + at, lse64 + t * HEADS_Q + h);
      aotk__sel_reference_fwd_row_lowp(&p, DTYPE, t, h, out32 + at, lse32 + t * HEADS_Q + h);
    }
  }
  /* out and lse of the sampled tokens. */
  float *lse_host = malloc(sizeof(float) * HEADS_Q * SEQ);
  int64_t unwritten = 0, clobbered = 0;
  if (lse_host == NULL || !aotk_gpu_test_download(lse_host, dev.lse, sizeof(float) * HEADS_Q * SEQ) ||
      !download_output(dev.out, HEADS_Q, &unwritten, &clobbered)) {
    free(lse_host);
    goto done;
  }
  CHECK_MSG(unwritten == 0 && clobbered == 0, "out: %lld elements unwritten or not finite, %lld clobbered",
            (long long)unwritten, (long long)clobbered);
  tally errors[4] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}}; /* out, dq, dk, dv */
  double lse_max_error = 0.0;
  for (int i = 0; i < count; i++) {
    for (int64_t h = 0; h < HEADS_Q; h++) {
      const int64_t at = (tokens[i] * HEADS_Q + h) * HEAD_DIM;
      for (int64_t d = 0; d < HEAD_DIM; d++) tally_add(&errors[0], staged(tokens[i], h, d), out64[at + d], out32[at + d]);
      lse_add(&lse_max_error, lse_host[tokens[i] * HEADS_Q + h], lse64[tokens[i] * HEADS_Q + h]);
    }
  }
  free(lse_host);
  /* dq of the sampled tokens. */
  if (!download_output(dev.dq, HEADS_Q, &unwritten, &clobbered)) goto done;
  CHECK_MSG(unwritten == 0 && clobbered == 0, "dq: %lld elements unwritten or not finite, %lld clobbered",
            (long long)unwritten, (long long)clobbered);
  for (int i = 0; i < count; i++) {
    for (int64_t h = 0; h < HEADS_Q; h++) {
      double exact[HEAD_DIM];
      float lowp[HEAD_DIM];
      aotk__sel_reference_dq_row_f64(&p, tokens[i], h, out64, lse64, exact);
      aotk__sel_reference_dq_row_lowp(&p, DTYPE, tokens[i], h, out32, lse32, lowp);
      for (int64_t d = 0; d < HEAD_DIM; d++) tally_add(&errors[1], staged(tokens[i], h, d), exact[d], lowp[d]);
    }
  }
  /* dk and dv of the compared blocks. */
  for (int b = 0; b < 4; b++) {
    aotk__sel_reference_dkdv_block_f64(&p, 0, 0, blocks[b], out64, lse64, dk64, dv64, NULL);
    aotk__sel_reference_dkdv_block_lowp(&p, DTYPE, 0, 0, blocks[b], out32, lse32, dk32, dv32);
  }
  for (int g = 2; g < 4; g++) {
    if (!download_output(g == 2 ? dev.dk : dev.dv, HEADS_KV, &unwritten, &clobbered)) goto done;
    CHECK_MSG(unwritten == 0 && clobbered == 0, "%s: %lld elements unwritten or not finite, %lld clobbered",
              g == 2 ? "dk" : "dv", (long long)unwritten, (long long)clobbered);
    const double *exact = g == 2 ? dk64 : dv64;
    const float *lowp = g == 2 ? dk32 : dv32;
    for (int b = 0; b < 4; b++) {
      for (int64_t key = blocks[b] * SEL_BLOCK; key < (blocks[b] + 1) * SEL_BLOCK && key < SEQ; key++) {
        for (int64_t d = 0; d < HEAD_DIM; d++) {
          tally_add(&errors[g], staged(key, 0, d), exact[key * HEAD_DIM + d], lowp[key * HEAD_DIM + d]);
        }
      }
    }
  }
  static const char *const names[4] = {"out", "dq", "dk", "dv"};
  for (int g = 0; g < 4; g++) {
    const double bound = tally_bound(&errors[g], g > 0); /* the gradients' floor scales, as above */
    CHECK_MSG(errors[g].error <= bound, "selection %s: err %.3g (bound %.3g)", names[g], errors[g].error, bound);
    printf("    selection %s: err %.3g of bound %.3g\n", names[g], errors[g].error, bound);
  }
  CHECK_MSG(lse_max_error <= 1.0, "selection lse: err %.3g of its tolerance", lse_max_error);
  printf("    selection: %s, %lld reference rows, lse %.3g of tolerance\n", info.kernel_name, (long long)needed_rows,
         lse_max_error);
done:
  free(idx), free(qd), free(kd), free(vd), free(dod), free(out64), free(lse64), free(out32), free(lse32);
  free(dk64), free(dv64), free(dk32), free(dv32), free(needed);
  aotk_gpu_test_free(&index);
  aotk_gpu_test_free(&workspace);
}

static void fill(float **values, uint16_t **bits, int64_t count, uint64_t *state) {
  *values = malloc(sizeof(float) * (size_t)count);
  *bits = malloc(sizeof(uint16_t) * (size_t)count);
  if (*values == NULL || *bits == NULL) return;
  for (int64_t i = 0; i < count; i++) {
    (*bits)[i] = aotk__dtype_bits(aotk__random_normal(state), DTYPE);
    (*values)[i] = aotk__dtype_value((*bits)[i], DTYPE);
  }
}

static void no_host_memory(void) { TEST_SKIP("too little host memory for the staging buffer"); }

int main(void) {
  if (!aotk_gpu_test_setup()) return aotk_gpu_test_skip_all();
  uint64_t state = seed;
  fill(&q_f, &q_b, (int64_t)SEQ * HEADS_Q * HEAD_DIM, &state);
  fill(&k_f, &k_b, (int64_t)SEQ * HEADS_KV * HEAD_DIM, &state);
  fill(&v_f, &v_b, (int64_t)SEQ * HEADS_KV * HEAD_DIM, &state);
  fill(&do_f, &do_b, (int64_t)SEQ * HEADS_Q * HEAD_DIM, &state);
  staging = malloc(storage_elements(8200) * 2);
  if (!q_f || !q_b || !k_f || !k_b || !v_f || !v_b || !do_f || !do_b || !staging) {
    RUN_TEST(no_host_memory);
    return aotk_test_finish();
  }
  const bool hopper = compute_capability == 90;
  /* The kernels each case must run: on sm_90 the Gluon ones for the stride 8192 (TMA-readable). */
  const char *fwd_aligned = hopper ? "attn_fwd_hopper_" : "attn_fwd_bf16_d128_aligned";
  const char *bwd_fused = hopper ? "attn_bwd_fused_hopper_" : "attn_bwd_dkdv_bf16_d128_aligned";
  const char *bwd_det = hopper ? "attn_bwd_dkdv_hopper_" : "attn_bwd_dkdv_bf16_d128_aligned";
  const long_case cases[] = {
      {"causal, TMA-readable", 8192, 0, 0, 0, 0, fwd_aligned, NULL},
      {"window, TMA-readable, backward", 8192, 1, 0, 1, 0, fwd_aligned, bwd_fused},
      {"window, TMA-readable, deterministic backward", 8192, 1, 0, 1, 1, fwd_aligned, bwd_det},
      {"window, varlen, TMA-readable, backward", 8192, 1, 1, 1, 1, fwd_aligned, bwd_det},
      {"causal, pointer kernels", 8200, 0, 0, 0, 0, "attn_fwd_bf16_d128_", NULL},
      {"window, pointer kernels, backward", 8200, 1, 0, 1, 1, "attn_fwd_bf16_d128_", "attn_bwd_dkdv_bf16_d128_"},
      {"window, varlen, pointer kernels, backward", 8200, 1, 1, 1, 0, "attn_fwd_bf16_d128_",
       "attn_bwd_dkdv_bf16_d128_"},
  };
  /* The cases of the stride 8192, decoding over the same storage, then the stride 8200. */
  for (size_t i = 0; i < 4; i++) aotk_test_run_with(cases[i].name, run_long_case, &cases[i]);
  static const decode_case decode_cases[] = {{"decode: a contiguous cache of 262,400 keys, appending", 0},
                                             {"decode: 1025 shuffled pages of 256 keys", 1}};
  for (size_t i = 0; i < 2; i++) aotk_test_run_with(decode_cases[i].name, run_decode_case, &decode_cases[i]);
  aotk_test_run("selection: 262,400 tokens, 64-key blocks, 16 slots, forward and backward", run_sel_case);
  for (size_t i = 4; i < sizeof cases / sizeof cases[0]; i++) aotk_test_run_with(cases[i].name, run_long_case, &cases[i]);
  free_storage();
  driver->cuStreamDestroy(stream);
  return aotk_test_finish();
}
