/* One GPU correctness case of decoding or of the merge of partial attentions: see aotk_decode_check.h. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotk_check.h"
#include "aotk_decode_check.h"
#include "aotk_decode_reference.h"
#include "aotk_error.h"
#include "aotk_half.h"
#include "aotk_random.h"

/* Poisoned bytes allocated after out and after lse, which a call must leave alone. */
#define CHECK_TAIL_BYTES 256

/* At least one element, so that an empty array still allocates (and NULL means out of memory). */

static size_t dtype_bytes(aotk_dtype dtype) { return dtype == AOTK_DTYPE_FLOAT32 ? 4 : 2; }

/* Element `index` of an array of `dtype` (fp16, bf16 or fp32) elements, as a float, and the other way. */
static float value_at(const void *data, aotk_dtype dtype, int64_t index) {
  if (dtype == AOTK_DTYPE_FLOAT32) return ((const float *)data)[index];
  return aotk__dtype_value(((const uint16_t *)data)[index], dtype);
}

static void store_at(void *data, aotk_dtype dtype, int64_t index, float x) {
  if (dtype == AOTK_DTYPE_FLOAT32) {
    ((float *)data)[index] = x;
  } else {
    ((uint16_t *)data)[index] = aotk__dtype_bits(x, dtype);
  }
}

/* Whether element `index` (of element_bytes bytes) still holds the poison, 0xff bytes. */
static bool poisoned_at(const void *data, size_t element_bytes, int64_t index) {
  const uint8_t *bytes = (const uint8_t *)data + (size_t)index * element_bytes;
  for (size_t i = 0; i < element_bytes; i++) {
    if (bytes[i] != 0xff) return false;
  }
  return true;
}

/* Bytes [from, from + CHECK_TAIL_BYTES) that no longer hold the poison. */
static int64_t tail_clobbered(const void *data, size_t from) {
  const uint8_t *bytes = (const uint8_t *)data + from;
  int64_t clobbered = 0;
  for (size_t i = 0; i < CHECK_TAIL_BYTES; i++) clobbered += bytes[i] != 0xff;
  return clobbered;
}


/* One row's out (dim elements of out_bits from `at`) and lse against the reference, into r: the error,
 * the poison left, and for a row with no key (keys 0) out exactly 0. lse (NULL: not written) must be
 * -inf exactly where the reference is, and within its tolerance elsewhere. */
static void compare_row(aotk__decode_check_result *r, const void *out_bits, aotk_dtype out_dtype, int64_t at,
                        int64_t dim, const double *exact, const float *lse, int64_t lse_index, double exact_lse,
                        int64_t keys) {
  bool zero = true;
  for (int64_t d = 0; d < dim; d++) {
    if (poisoned_at(out_bits, dtype_bytes(out_dtype), at + d)) r->unwritten++;
    const float got = value_at(out_bits, out_dtype, at + d);
    zero = zero && got == 0.0f;
    double error = fabs((double)got - exact[d]);
    if (!(error <= r->max_error)) r->max_error = isnan(error) ? INFINITY : error;
  }
  r->rows++;
  bool lse_ok = true;
  if (lse != NULL) {
    const float got = lse[lse_index];
    if (poisoned_at(lse, sizeof(float), lse_index)) r->unwritten++;
    if (isinf(exact_lse)) {
      lse_ok = isinf(got) && got < 0;
      r->bad_lse += !lse_ok;
    } else if (isinf(got) || isnan(got)) {
      r->bad_lse++;
      lse_ok = false;
    } else {
      const double error = fabs((double)got - exact_lse) / aotk__check_lse_tolerance(exact_lse);
      if (!(error <= r->lse_max_error)) r->lse_max_error = error;
    }
  }
  if (keys == 0) {
    r->empty_rows++;
    r->bad_empty_rows += !zero || !lse_ok;
  }
}

/* The same-precision emulation's error on one row (dim elements from `at`); rows that see no key are
 * checked exactly and left out. */
static void note_lowp_row(aotk__decode_check_result *r, const float *lowp, const double *exact, int64_t at,
                          int64_t dim) {
  for (int64_t d = 0; d < dim; d++) {
    double error = fabs((double)lowp[at + d] - exact[at + d]);
    if (!(error <= r->lowp_max_error)) r->lowp_max_error = isnan(error) ? INFINITY : error;
  }
}

/* The error bound from the emulation's largest error, and the verdict. */
static void conclude(aotk__decode_check_result *r) {
  r->bound = 2.0 * r->lowp_max_error + AOTK__CHECK_ERROR_FLOOR;
  r->passed = r->max_error <= r->bound && r->lse_max_error <= 1.0 && r->bad_lse == 0 && r->bad_empty_rows == 0 &&
              r->unwritten == 0 && r->clobbered == 0 && r->cache_mismatches == 0 && !r->wrong_kernel;
}

static void *device_data(CUdeviceptr pointer) { return (void *)(uintptr_t)pointer; }

/* --- decoding ------------------------------------------------------------------------------------ */

enum { D_Q, D_K, D_V, D_K_NEW, D_V_NEW, D_TABLE, D_SEQLENS, D_LEFTPAD, D_ALIBI, D_SINKS, D_OUT, D_LSE, D_WORKSPACE,
       D_BUFFERS };

aotk_status aotk__check_decode(const aotk__driver *driver, const aotk__decode_check_case *c, aotk__decode_check_result *r) {
  memset(r, 0, sizeof *r);
  const bool dtype_ok = c->dtype == AOTK_DTYPE_BFLOAT16 || c->dtype == AOTK_DTYPE_FLOAT16;
  if (!dtype_ok || c->batch < 1 || c->batch > AOTK__DECODE_CHECK_MAX_BATCH || c->heads_kv < 1 || c->group < 1 ||
      c->seqlen_q < 1 || c->head_dim_qk < 1 || c->head_dim_v < 1 || c->capacity < 1 || c->page_size < 0 ||
      c->seqlen_new < 0) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE,
                      "decoding check: a case the runner cannot describe (dtype %d, batch %lld of at most %d, heads "
                      "%lld x %lld, %lld tokens, head dims %lld/%lld, capacity %lld, page size %lld, %lld new)",
                      (int)c->dtype, (long long)c->batch, AOTK__DECODE_CHECK_MAX_BATCH, (long long)c->heads_kv,
                      (long long)c->group, (long long)c->seqlen_q, (long long)c->head_dim_qk,
                      (long long)c->head_dim_v, (long long)c->capacity, (long long)c->page_size,
                      (long long)c->seqlen_new);
  }
  const aotk_dtype dtype = c->dtype;
  const int64_t B = c->batch, S = c->seqlen_q, HKV = c->heads_kv, HQ = c->heads_kv * c->group;
  const int64_t DQK = c->head_dim_qk, DV = c->head_dim_v, N = c->seqlen_new;
  const bool paged = c->page_size > 0;
  const int64_t pages_per_seq = paged ? (c->capacity + c->page_size - 1) / c->page_size : 0;
  const int64_t capacity = paged ? pages_per_seq * c->page_size : c->capacity;
  const int64_t blocks = paged ? B * pages_per_seq : B, block_rows = paged ? c->page_size : capacity;
  const int64_t rows = B * HQ * S, q_elements = B * S * HQ * DQK, out_elements = B * S * HQ * DV;
  const int64_t k_elements = blocks * block_rows * HKV * DQK, v_elements = blocks * block_rows * HKV * DV;
  const int64_t k_new_elements = B * N * HKV * DQK, v_new_elements = B * N * HKV * DV;
  const int64_t alibi_count = c->alibi == 2 ? B * HQ : HQ;
  const size_t out_bytes = 2 * (size_t)out_elements, lse_bytes = 4 * (size_t)rows;
  uint64_t state = c->seed;

  uint16_t *q_bits = NULL, *k_bits = NULL, *v_bits = NULL, *k_new_bits = NULL, *v_new_bits = NULL;
  uint16_t *k_expected = NULL, *v_expected = NULL, *k_after = NULL, *v_after = NULL;
  float *q_values = NULL, *k_values = NULL, *v_values = NULL, *alibi = NULL, *sinks = NULL, *lowp = NULL;
  int32_t *table = NULL;
  uint8_t *out_host = NULL, *lse_host = NULL;
  double *exact = NULL, *exact_lse = NULL;
  int64_t *keys = NULL;
  void *scratch = NULL;
  CUdeviceptr dev[D_BUFFERS] = {0};
  aotk_status status = AOTK_OK;

  aotk__decode_reference_problem problem;
  memset(&problem, 0, sizeof problem);
  problem.batch = B;
  problem.seqlen_q = S;
  problem.heads_q = HQ;
  problem.heads_kv = HKV;
  problem.head_dim_qk = DQK;
  problem.head_dim_v = DV;
  problem.q_strides[0] = S * HQ * DQK;
  problem.q_strides[1] = HQ * DQK;
  problem.q_strides[2] = DQK;
  problem.k_strides[0] = block_rows * HKV * DQK;
  problem.k_strides[1] = HKV * DQK;
  problem.k_strides[2] = DQK;
  problem.v_strides[0] = block_rows * HKV * DV;
  problem.v_strides[1] = HKV * DV;
  problem.v_strides[2] = DV;
  problem.block_table_stride = pages_per_seq;
  problem.page_size = c->page_size;
  problem.capacity = capacity;
  problem.seqlen_new = N;
  problem.softmax_scale = 1.0f / sqrtf((float)DQK); /* the library's default, in float32 */
  problem.causal = c->causal;
  problem.window_left = c->window ? c->window_left : -1;
  problem.window_right = c->window ? c->window_right : -1;
  problem.softcap = c->softcap;
  problem.alibi_batch_stride = c->alibi == 2 ? HQ : 0;
  problem.dtype = (int)dtype;

  q_bits = aotk__check_host_array(q_elements, 2);
  k_bits = aotk__check_host_array(k_elements, 2);
  v_bits = aotk__check_host_array(v_elements, 2);
  k_new_bits = aotk__check_host_array(k_new_elements, 2);
  v_new_bits = aotk__check_host_array(v_new_elements, 2);
  k_expected = aotk__check_host_array(k_elements, 2);
  v_expected = aotk__check_host_array(v_elements, 2);
  k_after = aotk__check_host_array(k_elements, 2);
  v_after = aotk__check_host_array(v_elements, 2);
  q_values = aotk__check_host_array(q_elements, sizeof(float));
  k_values = aotk__check_host_array(k_elements, sizeof(float));
  v_values = aotk__check_host_array(v_elements, sizeof(float));
  alibi = aotk__check_host_array(alibi_count, sizeof(float));
  sinks = aotk__check_host_array(HQ, sizeof(float));
  table = aotk__check_host_array(B * pages_per_seq, sizeof(int32_t));
  out_host = aotk__check_host_array((int64_t)out_bytes + CHECK_TAIL_BYTES, 1);
  lse_host = aotk__check_host_array((int64_t)lse_bytes + CHECK_TAIL_BYTES, 1);
  exact = aotk__check_host_array(out_elements, sizeof(double));
  lowp = aotk__check_host_array(out_elements, sizeof(float));
  exact_lse = aotk__check_host_array(rows, sizeof(double));
  keys = aotk__check_host_array(rows, sizeof(int64_t));
  scratch = malloc(aotk__decode_reference_scratch_bytes(&problem));
  if (!q_bits || !k_bits || !v_bits || !k_new_bits || !v_new_bits || !k_expected || !v_expected || !k_after ||
      !v_after || !q_values || !k_values || !v_values || !alibi || !sinks || !table || !out_host || !lse_host ||
      !exact || !lowp || !exact_lse || !keys || !scratch) {
    status = aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "decoding check: host allocation failed");
    goto done;
  }

  /* Lengths, pages in shuffled order, and the inputs: N(0, 1) in the dtype; NaN in every cache row at or
   * past a request's length (the rows the append writes among them). */
  int32_t seqlens[AOTK__DECODE_CHECK_MAX_BATCH];
  for (int64_t b = 0; b < B; b++) {
    const int64_t room = capacity - N > 1 ? capacity - N : 1;
    seqlens[b] = c->cache_seqlens[b] == AOTK__DECODE_CHECK_RANDOM_LENGTH ? (int32_t)aotk__random_int(&state, 1, room)
                                                                          : c->cache_seqlens[b];
  }
  if (paged) {
    for (int64_t i = 0; i < B * pages_per_seq; i++) table[i] = (int32_t)i;
    aotk__random_shuffle_int32(table, B * pages_per_seq, &state);
    problem.block_table = table;
  }
  for (int64_t e = 0; e < q_elements; e++) q_bits[e] = aotk__dtype_bits(aotk__random_normal(&state), dtype);
  const uint16_t nan_bits = aotk__dtype_bits(NAN, dtype);
  for (int64_t e = 0; e < k_elements; e++) k_bits[e] = nan_bits;
  for (int64_t e = 0; e < v_elements; e++) v_bits[e] = nan_bits;
  for (int64_t b = 0; b < B; b++) {
    const int64_t filled = aotk__decode_reference_length(seqlens[b], 0, capacity);
    /* A contiguous cache's left padding is never read: NaN there too. */
    const int64_t first_key = c->leftpad && !paged && c->cache_leftpad[b] > 0 ? c->cache_leftpad[b] : 0;
    for (int64_t key = first_key; key < filled; key++) {
      for (int64_t h = 0; h < HKV; h++) {
        const int64_t k_row = aotk__decode_reference_cache_row(&problem, problem.k_strides, b, key, h);
        const int64_t v_row = aotk__decode_reference_cache_row(&problem, problem.v_strides, b, key, h);
        for (int64_t d = 0; d < DQK; d++) k_bits[k_row + d] = aotk__dtype_bits(aotk__random_normal(&state), dtype);
        for (int64_t d = 0; d < DV; d++) v_bits[v_row + d] = aotk__dtype_bits(aotk__random_normal(&state), dtype);
      }
    }
  }
  for (int64_t e = 0; e < k_new_elements; e++) k_new_bits[e] = aotk__dtype_bits(aotk__random_normal(&state), dtype);
  for (int64_t e = 0; e < v_new_elements; e++) v_new_bits[e] = aotk__dtype_bits(aotk__random_normal(&state), dtype);
  for (int64_t i = 0; i < alibi_count; i++) alibi[i] = (float)(0.25 * aotk__random_uniform(&state));
  for (int64_t h = 0; h < HQ; h++) sinks[h] = 1.5f * aotk__random_normal(&state);
  sinks[0] = 4.0f; /* one sink that outweighs most rows' keys */

  /* The caches as the call must leave them: new token i of request b at position max(cache_seqlens[b],
   * 0) + i where that is below the capacity. The reference reads those. */
  memcpy(k_expected, k_bits, 2 * (size_t)k_elements);
  memcpy(v_expected, v_bits, 2 * (size_t)v_elements);
  for (int64_t b = 0; b < B; b++) {
    for (int64_t i = 0; i < N; i++) {
      const int64_t position = aotk__decode_reference_append_start(seqlens[b]) + i;
      if (position >= capacity) break;
      for (int64_t h = 0; h < HKV; h++) {
        const int64_t new_row = (b * N + i) * HKV + h;
        memcpy(k_expected + aotk__decode_reference_cache_row(&problem, problem.k_strides, b, position, h),
               k_new_bits + new_row * DQK, 2 * (size_t)DQK);
        memcpy(v_expected + aotk__decode_reference_cache_row(&problem, problem.v_strides, b, position, h),
               v_new_bits + new_row * DV, 2 * (size_t)DV);
      }
    }
  }
  for (int64_t e = 0; e < q_elements; e++) q_values[e] = aotk__dtype_value(q_bits[e], dtype);
  for (int64_t e = 0; e < k_elements; e++) k_values[e] = aotk__dtype_value(k_expected[e], dtype);
  for (int64_t e = 0; e < v_elements; e++) v_values[e] = aotk__dtype_value(v_expected[e], dtype);
  problem.q = q_values;
  problem.k_cache = k_values;
  problem.v_cache = v_values;
  problem.cache_seqlens = seqlens;
  if (c->leftpad) problem.cache_leftpad = c->cache_leftpad;
  if (c->alibi) problem.alibi_slopes = alibi;
  if (c->sinks) problem.sinks = sinks;

  if ((status = aotk__check_upload(driver, &dev[D_Q], q_bits, 2 * (size_t)q_elements)) != AOTK_OK) goto done;
  if ((status = aotk__check_upload(driver, &dev[D_K], k_bits, 2 * (size_t)k_elements)) != AOTK_OK) goto done;
  if ((status = aotk__check_upload(driver, &dev[D_V], v_bits, 2 * (size_t)v_elements)) != AOTK_OK) goto done;
  if ((status = aotk__check_upload(driver, &dev[D_SEQLENS], seqlens, 4 * (size_t)B)) != AOTK_OK) goto done;
  if (c->leftpad &&
      (status = aotk__check_upload(driver, &dev[D_LEFTPAD], c->cache_leftpad, 4 * (size_t)B)) != AOTK_OK) {
    goto done;
  }
  if (N > 0) {
    if ((status = aotk__check_upload(driver, &dev[D_K_NEW], k_new_bits, 2 * (size_t)k_new_elements)) != AOTK_OK) goto done;
    if ((status = aotk__check_upload(driver, &dev[D_V_NEW], v_new_bits, 2 * (size_t)v_new_elements)) != AOTK_OK) goto done;
  }
  if (paged && (status = aotk__check_upload(driver, &dev[D_TABLE], table, 4 * (size_t)(B * pages_per_seq))) != AOTK_OK) goto done;
  if (c->alibi && (status = aotk__check_upload(driver, &dev[D_ALIBI], alibi, 4 * (size_t)alibi_count)) != AOTK_OK) goto done;
  if (c->sinks && (status = aotk__check_upload(driver, &dev[D_SINKS], sinks, 4 * (size_t)HQ)) != AOTK_OK) goto done;
  if ((status = aotk__check_alloc_poisoned(driver, &dev[D_OUT], out_bytes + CHECK_TAIL_BYTES, 0xff)) != AOTK_OK) goto done;
  if ((status = aotk__check_alloc_poisoned(driver, &dev[D_LSE], lse_bytes + CHECK_TAIL_BYTES, 0xff)) != AOTK_OK) goto done;

  aotk_decode_params params = AOTK_DECODE_PARAMS_INIT;
  params.q = aotk_tensor_4d(device_data(dev[D_Q]), dtype, B, S, HQ, DQK);
  params.k_cache = aotk_tensor_4d(device_data(dev[D_K]), dtype, blocks, block_rows, HKV, DQK);
  params.v_cache = aotk_tensor_4d(device_data(dev[D_V]), dtype, blocks, block_rows, HKV, DV);
  if (paged) params.block_table = aotk_tensor_2d(device_data(dev[D_TABLE]), AOTK_DTYPE_INT32, B, pages_per_seq);
  params.cache_seqlens = aotk_tensor_1d(device_data(dev[D_SEQLENS]), AOTK_DTYPE_INT32, B);
  if (c->leftpad) params.cache_leftpad = aotk_tensor_1d(device_data(dev[D_LEFTPAD]), AOTK_DTYPE_INT32, B);
  params.out = aotk_tensor_4d(device_data(dev[D_OUT]), dtype, B, S, HQ, DV);
  params.lse = aotk_tensor_3d(device_data(dev[D_LSE]), AOTK_DTYPE_FLOAT32, B, HQ, S);
  params.causal = c->causal;
  params.window_left = problem.window_left;
  params.window_right = problem.window_right;
  params.softcap = c->softcap;
  if (c->alibi == 1) params.alibi_slopes = aotk_tensor_1d(device_data(dev[D_ALIBI]), AOTK_DTYPE_FLOAT32, HQ);
  if (c->alibi == 2) params.alibi_slopes = aotk_tensor_2d(device_data(dev[D_ALIBI]), AOTK_DTYPE_FLOAT32, B, HQ);
  if (c->sinks) params.sinks = aotk_tensor_1d(device_data(dev[D_SINKS]), AOTK_DTYPE_FLOAT32, HQ);
  params.num_splits = c->num_splits;
  if (N > 0) {
    params.k_new = aotk_tensor_4d(device_data(dev[D_K_NEW]), dtype, B, N, HKV, DQK);
    params.v_new = aotk_tensor_4d(device_data(dev[D_V_NEW]), dtype, B, N, HKV, DV);
  }

  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  if ((status = aotk_decode_query(AOTK_OP_DECODE, &params, &info)) != AOTK_OK) goto done;
  snprintf(r->kernel_name, sizeof r->kernel_name, "%s", info.kernel_name);
  r->num_splits = info.num_splits;
  r->launches = info.launches;
  r->workspace_bytes = info.workspace_bytes;
  r->features = info.features;
  /* The family follows the cache (src/decode/aotk_decode.c): contiguous, paged with a lookup per key row, or
   * paged with pages of whole key blocks (one lookup per block). */
  char prefix[48];
  const char *family = !paged                                                   ? "attn_decode"
                       : info.block_n > 0 && c->page_size % info.block_n == 0 ? "attn_decode_paged_blocks"
                                                                               : "attn_decode_paged";
  snprintf(prefix, sizeof prefix, "%s_%s_", family, dtype == AOTK_DTYPE_BFLOAT16 ? "bf16" : "fp16");
  r->wrong_kernel = strncmp(info.kernel_name, prefix, strlen(prefix)) != 0 || (c->expect_split && info.num_splits < 2);
  /* Exactly the reported size, poisoned: it is documented as not read before it is written. */
  if (info.workspace_bytes > 0 &&
      (status = aotk__check_alloc_poisoned(driver, &dev[D_WORKSPACE], info.workspace_bytes, 0xff)) != AOTK_OK) {
    goto done;
  }

  /* cuMemsetD8 and cuMemcpyHtoD run on the legacy stream, which a non-blocking stream does not wait for. */
  AOTK__CHECK_CU(driver->cuCtxSynchronize(), "cuCtxSynchronize");
  if ((status = aotk_attn_decode(&params, device_data(dev[D_WORKSPACE]), info.workspace_bytes, c->stream)) != AOTK_OK) {
    goto done;
  }
  AOTK__CHECK_CU(driver->cuStreamSynchronize((CUstream)c->stream), "cuStreamSynchronize after aotk_attn_decode");
  AOTK__CHECK_CU(driver->cuMemcpyDtoH(out_host, dev[D_OUT], out_bytes + CHECK_TAIL_BYTES), "cuMemcpyDtoH");
  AOTK__CHECK_CU(driver->cuMemcpyDtoH(lse_host, dev[D_LSE], lse_bytes + CHECK_TAIL_BYTES), "cuMemcpyDtoH");
  AOTK__CHECK_CU(driver->cuMemcpyDtoH(k_after, dev[D_K], 2 * (size_t)k_elements), "cuMemcpyDtoH");
  AOTK__CHECK_CU(driver->cuMemcpyDtoH(v_after, dev[D_V], 2 * (size_t)v_elements), "cuMemcpyDtoH");

  aotk__decode_reference(&problem, scratch, exact, lowp, exact_lse, keys);
  for (int64_t row = 0; row < rows; row++) { /* row = (b, h, token) in lse's order */
    const int64_t b = row / (HQ * S), h = row / S % HQ, token = row % S;
    const int64_t at = ((b * S + token) * HQ + h) * DV;
    compare_row(r, out_host, dtype, at, DV, exact + at, (const float *)lse_host, row, exact_lse[row], keys[row]);
    if (keys[row] > 0) note_lowp_row(r, lowp, exact, at, DV);
  }
  r->clobbered = tail_clobbered(out_host, out_bytes) + tail_clobbered(lse_host, lse_bytes);
  for (int64_t e = 0; e < k_elements; e++) r->cache_mismatches += k_after[e] != k_expected[e];
  for (int64_t e = 0; e < v_elements; e++) r->cache_mismatches += v_after[e] != v_expected[e];
  conclude(r);

  snprintf(r->detail, sizeof r->detail,
           "err/bound out %.3g/%.3g, lse %.3g of tolerance (bad %lld); splits %d, launches %d, workspace %zu%s; "
           "rows %lld, empty %lld (bad %lld), unwritten %lld, clobbered %lld, cache elements wrong %lld",
           r->max_error, r->bound, r->lse_max_error, (long long)r->bad_lse, (int)r->num_splits, (int)r->launches,
           r->workspace_bytes, r->wrong_kernel ? ", UNEXPECTED KERNEL OR SPLIT" : "", (long long)r->rows,
           (long long)r->empty_rows, (long long)r->bad_empty_rows, (long long)r->unwritten, (long long)r->clobbered,
           (long long)r->cache_mismatches);

done:
  for (int i = 0; i < D_BUFFERS; i++) {
    if (dev[i]) driver->cuMemFree(dev[i]);
  }
  free(q_bits);
  free(k_bits);
  free(v_bits);
  free(k_new_bits);
  free(v_new_bits);
  free(k_expected);
  free(v_expected);
  free(k_after);
  free(v_after);
  free(q_values);
  free(k_values);
  free(v_values);
  free(alibi);
  free(sinks);
  free(table);
  free(out_host);
  free(lse_host);
  free(exact);
  free(lowp);
  free(exact_lse);
  free(keys);
  free(scratch);
  return status;
}

/* --- merging ------------------------------------------------------------------------------------- */

enum { M_PARTIALS, M_LSE_PARTIALS, M_OUT, M_LSE, M_BUFFERS };

aotk_status aotk__check_merge(const aotk__driver *driver, const aotk__merge_check_case *c, aotk__decode_check_result *r) {
  memset(r, 0, sizeof *r);
  const bool dtypes_ok = (c->partial_dtype == AOTK_DTYPE_FLOAT32 || c->partial_dtype == AOTK_DTYPE_FLOAT16 ||
                          c->partial_dtype == AOTK_DTYPE_BFLOAT16) &&
                         (c->out_dtype == AOTK_DTYPE_FLOAT32 || c->out_dtype == AOTK_DTYPE_FLOAT16 ||
                          c->out_dtype == AOTK_DTYPE_BFLOAT16);
  if (!dtypes_ok || c->num_partials < 1 || c->num_partials > AOTK__MERGE_CHECK_MAX_PARTIALS || c->batch < 1 ||
      c->seqlen_q < 1 || c->heads < 1 || c->head_dim < 1 || c->keys < 0) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE,
                      "merge check: a case the runner cannot describe (dtypes %d -> %d, %lld partials of at most %d, "
                      "batch %lld, %lld tokens, %lld heads, head dim %lld, %lld keys)",
                      (int)c->partial_dtype, (int)c->out_dtype, (long long)c->num_partials,
                      AOTK__MERGE_CHECK_MAX_PARTIALS, (long long)c->batch, (long long)c->seqlen_q, (long long)c->heads,
                      (long long)c->head_dim, (long long)c->keys);
  }
  const int64_t P = c->num_partials, B = c->batch, S = c->seqlen_q, H = c->heads, D = c->head_dim;
  const int64_t rows = B * S * H; /* (b, token, head), head fastest: out's order */
  const size_t partial_size = dtype_bytes(c->partial_dtype), out_size = dtype_bytes(c->out_dtype);
  const size_t partials_bytes = partial_size * (size_t)(P * rows * D), lse_partials_bytes = 4 * (size_t)(P * rows);
  const size_t out_bytes = out_size * (size_t)(rows * D), lse_bytes = 4 * (size_t)rows;
  uint64_t state = c->seed;

  void *partials = NULL;
  float *lse_partials = NULL, *lowp = NULL, *stored = NULL;
  uint8_t *out_host = NULL, *lse_host = NULL;
  double *scores = NULL, *values = NULL, *partial = NULL, *exact = NULL, *exact_lse = NULL;
  int32_t *dealt = NULL;
  int64_t *keys = NULL;
  CUdeviceptr dev[M_BUFFERS] = {0};
  aotk_status status = AOTK_OK;

  partials = aotk__check_host_array(P * rows * D, partial_size);
  lse_partials = aotk__check_host_array(P * rows, sizeof(float));
  lowp = aotk__check_host_array(rows * D, sizeof(float));
  stored = aotk__check_host_array(P * D, sizeof(float));
  out_host = aotk__check_host_array((int64_t)out_bytes + CHECK_TAIL_BYTES, 1);
  lse_host = aotk__check_host_array((int64_t)lse_bytes + CHECK_TAIL_BYTES, 1);
  scores = aotk__check_host_array(c->keys, sizeof(double));
  values = aotk__check_host_array(c->keys * D, sizeof(double));
  partial = aotk__check_host_array(D, sizeof(double));
  exact = aotk__check_host_array(rows * D, sizeof(double));
  exact_lse = aotk__check_host_array(rows, sizeof(double));
  dealt = aotk__check_host_array(c->keys, sizeof(int32_t));
  keys = aotk__check_host_array(rows, sizeof(int64_t));
  if (!partials || !lse_partials || !lowp || !stored || !out_host || !lse_host || !scores || !values || !partial ||
      !exact || !exact_lse || !dealt || !keys) {
    status = aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "merge check: host allocation failed");
    goto done;
  }

  /* Each row: its keys dealt among the partials (one partial left without a key in some rows, none with
   * a key in others), each partial's attention stored in its dtype (NaN where it got no key), and the
   * references. */
  for (int64_t row = 0; row < rows; row++) {
    const int64_t b = row / (S * H), token = row / H % S, h = row % H;
    const int64_t lse_row = (b * H + h) * S + token; /* lse [batch, heads, seqlen_q] */
    const bool all_empty = row % 7 == 3;
    const int64_t emptied = row % 5 == 2 && P > 1 ? aotk__random_int(&state, 0, P - 1) : -1;
    keys[row] = all_empty ? 0 : c->keys;
    for (int64_t j = 0; j < keys[row]; j++) {
      scores[j] = 2.0 * aotk__random_normal(&state);
      int64_t p = aotk__random_int(&state, 0, P - 1);
      if (p == emptied) p = (p + 1) % P;
      dealt[j] = (int32_t)p;
      for (int64_t d = 0; d < D; d++) values[j * D + d] = aotk__random_normal(&state);
    }
    float lse_row_partials[AOTK__MERGE_CHECK_MAX_PARTIALS];
    for (int64_t p = 0; p < P; p++) {
      const double partial_lse =
          aotk__merge_reference_partial_f64(scores, values, dealt, keys[row], (int32_t)p, D, partial);
      const bool empty = partial_lse == -(double)INFINITY;
      lse_row_partials[p] = empty ? -INFINITY : (float)partial_lse;
      lse_partials[p * rows + lse_row] = lse_row_partials[p];
      for (int64_t d = 0; d < D; d++) {
        store_at(partials, c->partial_dtype, (p * rows + row) * D + d, empty ? NAN : (float)partial[d]);
        stored[p * D + d] = value_at(partials, c->partial_dtype, (p * rows + row) * D + d);
      }
    }
    exact_lse[row] = aotk__merge_reference_attention_f64(scores, values, keys[row], D, -INFINITY, exact + row * D);
    aotk__merge_reference_lowp(lse_row_partials, stored, P, D, -INFINITY, (int)c->out_dtype, lowp + row * D);
  }

  if ((status = aotk__check_upload(driver, &dev[M_PARTIALS], partials, partials_bytes)) != AOTK_OK) goto done;
  if ((status = aotk__check_upload(driver, &dev[M_LSE_PARTIALS], lse_partials, lse_partials_bytes)) != AOTK_OK) goto done;
  if ((status = aotk__check_alloc_poisoned(driver, &dev[M_OUT], out_bytes + CHECK_TAIL_BYTES, 0xff)) != AOTK_OK) goto done;
  if ((status = aotk__check_alloc_poisoned(driver, &dev[M_LSE], lse_bytes + CHECK_TAIL_BYTES, 0xff)) != AOTK_OK) goto done;

  aotk_merge_params params = AOTK_MERGE_PARAMS_INIT;
  const int64_t shape[5] = {P, B, S, H, D};
  aotk_tensor *const parts = &params.out_partials;
  parts->data = device_data(dev[M_PARTIALS]);
  parts->dtype = c->partial_dtype;
  parts->rank = 5;
  for (int i = 4; i >= 0; i--) {
    parts->shape[i] = shape[i];
    parts->strides[i] = i == 4 ? 1 : parts->strides[i + 1] * shape[i + 1];
  }
  params.lse_partials = aotk_tensor_4d(device_data(dev[M_LSE_PARTIALS]), AOTK_DTYPE_FLOAT32, P, B, H, S);
  params.out = aotk_tensor_4d(device_data(dev[M_OUT]), c->out_dtype, B, S, H, D);
  if (c->with_lse) params.lse = aotk_tensor_3d(device_data(dev[M_LSE]), AOTK_DTYPE_FLOAT32, B, H, S);

  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  if ((status = aotk_merge_query(AOTK_OP_MERGE, &params, &info)) != AOTK_OK) goto done;
  snprintf(r->kernel_name, sizeof r->kernel_name, "%s", info.kernel_name);
  r->num_splits = info.num_splits;
  r->launches = info.launches;
  r->features = info.features;
  AOTK__CHECK_CU(driver->cuCtxSynchronize(), "cuCtxSynchronize");
  if ((status = aotk_attn_merge(&params, c->stream)) != AOTK_OK) goto done;
  AOTK__CHECK_CU(driver->cuStreamSynchronize((CUstream)c->stream), "cuStreamSynchronize after aotk_attn_merge");
  AOTK__CHECK_CU(driver->cuMemcpyDtoH(out_host, dev[M_OUT], out_bytes + CHECK_TAIL_BYTES), "cuMemcpyDtoH");
  AOTK__CHECK_CU(driver->cuMemcpyDtoH(lse_host, dev[M_LSE], lse_bytes + CHECK_TAIL_BYTES), "cuMemcpyDtoH");

  for (int64_t row = 0; row < rows; row++) {
    const int64_t b = row / (S * H), token = row / H % S, h = row % H;
    compare_row(r, out_host, c->out_dtype, row * D, D, exact + row * D, c->with_lse ? (const float *)lse_host : NULL,
                (b * H + h) * S + token, exact_lse[row], keys[row]);
    if (keys[row] > 0) note_lowp_row(r, lowp, exact, row * D, D);
  }
  /* Without lse, its memory must keep the poison entirely. */
  r->clobbered = tail_clobbered(out_host, out_bytes) + tail_clobbered(lse_host, lse_bytes);
  for (int64_t e = 0; !c->with_lse && e < rows; e++) r->clobbered += !poisoned_at(lse_host, sizeof(float), e);
  conclude(r);

  snprintf(r->detail, sizeof r->detail,
           "err/bound out %.3g/%.3g, lse %.3g of tolerance (bad %lld); %d partials; rows %lld, without a key %lld "
           "(bad %lld), unwritten %lld, clobbered %lld",
           r->max_error, r->bound, r->lse_max_error, (long long)r->bad_lse, (int)r->num_splits, (long long)r->rows,
           (long long)r->empty_rows, (long long)r->bad_empty_rows, (long long)r->unwritten, (long long)r->clobbered);

done:
  for (int i = 0; i < M_BUFFERS; i++) {
    if (dev[i]) driver->cuMemFree(dev[i]);
  }
  free(partials);
  free(lse_partials);
  free(lowp);
  free(stored);
  free(out_host);
  free(lse_host);
  free(scores);
  free(values);
  free(partial);
  free(exact);
  free(exact_lse);
  free(dealt);
  free(keys);
  return status;
}
