/* One dense-attention GPU case's setup and comparisons, shared by the forward's checker
 * (aotk_check_fwd.c) and the backward's (aotk_check_bwd.c): see aotk_check_case.h. Also the helpers every
 * checker uses (aotk_check.h: upload, poisoned allocation) and the host's model of the dropout RNG. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotk_check.h"
#include "aotk_check_case.h"
#include "aotk_error.h"
#include "aotk_half.h"
#include "aotk_random.h"
#include "aotk_reference.h"

const char *aotk__check_layout_name(aotk__check_layout layout) {
  static const char *const names[] = {"contiguous", "permuted", "padded", "offset"};
  return layout >= 0 && layout < AOTK__LAYOUT_COUNT ? names[layout] : "unknown";
}

/* --- the dropout RNG's host model ------------------------------------------------------------- */

void aotk__check_philox4x32(uint32_t counter[4], const uint32_t key[2], int rounds) {
  uint32_t key0 = key[0], key1 = key[1];
  for (int round = 0; round < rounds; round++) {
    uint64_t product0 = (uint64_t)0xD2511F53u * counter[0];
    uint64_t product2 = (uint64_t)0xCD9E8D57u * counter[2];
    uint32_t next0 = (uint32_t)(product2 >> 32) ^ counter[1] ^ key0;
    uint32_t next2 = (uint32_t)(product0 >> 32) ^ counter[3] ^ key1;
    counter[0] = next0;
    counter[1] = (uint32_t)product2;
    counter[2] = next2;
    counter[3] = (uint32_t)product0;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
}

/* The library's threshold (src/attn/aotk_attn.c): a byte is kept when >= round(256 p), at most 255. */
uint32_t aotk__check_dropout_threshold(float dropout_p) {
  double t = floor((double)dropout_p * 256.0 + 0.5);
  return t >= 255.0 ? 255u : (uint32_t)t;
}

double aotk__check_dropout_effective_p(float dropout_p) {
  return dropout_p > 0.0f ? (double)aotk__check_dropout_threshold(dropout_p) / 256.0 : 0.0;
}

/* The four words of counter (4 J + q, 4 I + p, stream, offset's low word) for row = 16 I + 8 a + 2 p + e and
 * key = 16 J + 8 b + 2 q + c: they decide that row's keys 16 J + 2 q + {0, 1, 8, 9} (and those of the rows
 * with the other a and e). */
static void dropout_words(int64_t seed, int64_t offset, uint32_t stream, int64_t row, int64_t key, uint32_t words[4]) {
  uint64_t k = (uint64_t)seed ^ ((uint64_t)offset & 0xffffffff00000000ull);
  const uint32_t key_words[2] = {(uint32_t)k, (uint32_t)(k >> 32)};
  words[0] = (uint32_t)(4 * (key >> 4) + ((key >> 1) & 3));
  words[1] = (uint32_t)(4 * (row >> 4) + ((row >> 1) & 3));
  words[2] = stream;
  words[3] = (uint32_t)(uint64_t)offset;
  aotk__check_philox4x32(words, key_words, 7);
}

/* Element (row, key)'s byte of its counter's words: byte 2 a + b of word 2 e + c. */
static uint32_t dropout_byte(const uint32_t words[4], int64_t row, int64_t key) {
  const uint32_t word = words[2 * (row & 1) + (key & 1)];
  return (word >> (8 * (2 * ((row >> 3) & 1) + ((key >> 3) & 1)))) & 255u;
}

bool aotk__check_dropout_keep(int64_t seed, int64_t offset, float dropout_p, uint32_t stream, int64_t row,
                              int64_t key) {
  uint32_t words[4];
  dropout_words(seed, offset, stream, row, key, words);
  return dropout_byte(words, row, key) >= aotk__check_dropout_threshold(dropout_p);
}

/* --- tensors placed in memory ----------------------------------------------------------------- */


aotk__placed_tensor aotk__check_place(aotk__check_layout layout, int64_t b, int64_t s, int64_t h, int64_t d) {
  aotk__placed_tensor t = {{b, s, h, d}, {0, 0, 0, 1}, 0, 0};
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

static int64_t element_index(const aotk__placed_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return t->offset + i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2] + i3 * t->strides[3];
}

/* The tensor as the API takes it: 4-d, or for the varlen layout 3-d [total, heads, dim] (the
 * placement's batch dimension, of size 1, dropped). */
aotk_tensor aotk__check_as_aotk_tensor(const aotk__placed_tensor *t, CUdeviceptr base, aotk_dtype dtype,
                                       int element_bytes, bool varlen) {
  aotk_tensor out;
  memset(&out, 0, sizeof out);
  out.data = (void *)(uintptr_t)(base + (CUdeviceptr)(t->offset * element_bytes));
  out.dtype = dtype;
  const int first = varlen ? 1 : 0;
  out.rank = 4 - first;
  for (int i = first; i < 4; i++) {
    out.shape[i - first] = t->shape[i];
    out.strides[i - first] = t->strides[i];
  }
  return out;
}

/* --- a case's sequences ----------------------------------------------------------------------- */


aotk_status aotk__check_resolve_shape(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q,
                                      int64_t heads_kv, int64_t head_dim, aotk__check_layout layout,
                                      const aotk__check_features *f, aotk__check_shape *s) {
  memset(s, 0, sizeof *s);
  const bool padded = layout == AOTK__LAYOUT_PADDED;
  s->varlen = f->num_seqs > 0;
  s->seqs = s->varlen ? f->num_seqs : batch;
  s->heads_q = heads_q;
  s->heads_kv = heads_kv;
  s->dim_qk = head_dim;
  s->dim_v = f->head_dim_v > 0 ? f->head_dim_v : head_dim;
  if (s->seqs < 1 || s->seqs > AOTK__CHECK_MAX_SEQS || heads_q < 1 || heads_kv < 1 || heads_q % heads_kv != 0 ||
      head_dim < 1 || f->head_dim_v < 0 || f->max_seqlen_slack < 0 || (!s->varlen && (seqlen_q < 1 || seqlen_k < 1))) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE,
                      "check: a case the runner cannot describe (batch or num_seqs %lld, at most %d; heads %lld/%lld; "
                      "head dims %lld/%lld; seqlens %lld/%lld)",
                      (long long)s->seqs, AOTK__CHECK_MAX_SEQS, (long long)heads_q, (long long)heads_kv,
                      (long long)head_dim, (long long)f->head_dim_v, (long long)seqlen_q, (long long)seqlen_k);
  }
  int64_t total_q = 0, total_k = 0, longest_q = 0, longest_k = 0;
  for (int64_t b = 0; b < s->seqs; b++) {
    s->len_q[b] = s->varlen ? f->seqlens_q[b] : seqlen_q;
    s->len_k[b] = s->varlen ? f->seqlens_k[b] : seqlen_k;
    if (s->len_q[b] < 0 || s->len_k[b] < 0) {
      return aotk__fail(AOTK_ERROR_INVALID_VALUE, "check: sequence %lld has lengths %lld/%lld", (long long)b,
                        (long long)s->len_q[b], (long long)s->len_k[b]);
    }
    s->start_q[b] = s->varlen ? total_q : 0;
    s->start_k[b] = s->varlen ? total_k : 0;
    s->stats_offset[b + 1] = s->stats_offset[b] + heads_q * s->len_q[b];
    s->key_offset[b + 1] = s->key_offset[b] + heads_kv * s->len_k[b];
    total_q += s->len_q[b];
    total_k += s->len_k[b];
    if (s->len_q[b] > longest_q) longest_q = s->len_q[b];
    if (s->len_k[b] > longest_k) longest_k = s->len_k[b];
  }
  if (s->varlen) {
    s->max_q = (longest_q > 1 ? longest_q : 1) + f->max_seqlen_slack;
    s->max_k = (longest_k > 1 ? longest_k : 1) + f->max_seqlen_slack;
    s->rows_q = total_q + AOTK__CHECK_VARLEN_TAIL_ROWS;
    s->rows_k = total_k + AOTK__CHECK_VARLEN_TAIL_ROWS;
    /* lse [heads_q, total_q]. */
    s->lse_row = s->rows_q + (padded ? 5 : 0);
    s->lse_elements = heads_q * s->lse_row;
  } else {
    s->max_q = s->rows_q = seqlen_q;
    s->max_k = s->rows_k = seqlen_k;
    /* lse [batch, heads_q, seqlen_q]. */
    s->lse_row = seqlen_q + (padded ? 5 : 0);
    s->lse_elements = s->seqs * heads_q * s->lse_row;
  }
  s->mask_row = s->max_k + (padded ? 5 : 0);
  s->mask_elements = s->seqs * heads_q * s->max_q * s->mask_row;
  s->alibi_row = heads_q + (padded ? 3 : 0);
  return AOTK_OK;
}

/* Element (sequence b, row, head, d) of a placed tensor: dense [b, row, head, d]; varlen the packed
 * row start + row of the single batch entry. q_side: the tensor has query rows (q, out, dout, dq). */
int64_t aotk__check_seq_element(const aotk__placed_tensor *t, const aotk__check_shape *s, bool q_side, int64_t b,
                                int64_t row, int64_t h, int64_t d) {
  if (!s->varlen) return element_index(t, b, row, h, d);
  return element_index(t, 0, (q_side ? s->start_q[b] : s->start_k[b]) + row, h, d);
}

int64_t aotk__check_lse_index(const aotk__check_shape *s, int64_t b, int64_t h, int64_t row) {
  return s->varlen ? h * s->lse_row + s->start_q[b] + row : (b * s->heads_q + h) * s->lse_row + row;
}

static int64_t mask_index(const aotk__check_shape *s, int64_t b, int64_t h, int64_t row, int64_t key) {
  return ((b * s->heads_q + h) * s->max_q + row) * s->mask_row + key;
}


/* The reference problem of sequence b (batch entry b when dense): batch 0 of a problem pointed at the
 * sequence's rows, with its own lengths, its row of ALiBi slopes and its slice of the dropout mask. */
void aotk__check_reference_problem(aotk__attn_reference_problem *p, const aotk__check_shape *s, int64_t b,
                                   int causal, double softmax_scale, const aotk__check_features *f,
                                   const aotk__check_host_inputs *in) {
  memset(p, 0, sizeof *p);
  p->seqlen_q = s->len_q[b];
  p->seqlen_k = s->len_k[b];
  p->heads_q = s->heads_q;
  p->heads_kv = s->heads_kv;
  p->head_dim = s->dim_qk;
  p->head_dim_v = s->dim_v;
  p->q = in->q + aotk__check_seq_element(in->tq, s, true, b, 0, 0, 0);
  p->k = in->k + aotk__check_seq_element(in->tk, s, false, b, 0, 0, 0);
  p->v = in->v + aotk__check_seq_element(in->tv, s, false, b, 0, 0, 0);
  const aotk__placed_tensor *const placed[3] = {in->tq, in->tk, in->tv};
  int64_t *const strides[3] = {p->q_strides, p->k_strides, p->v_strides};
  for (int t = 0; t < 3; t++) {
    strides[t][0] = 0;
    strides[t][1] = placed[t]->strides[1];
    strides[t][2] = placed[t]->strides[2];
  }
  if (in->dout != NULL) {
    p->dout = in->dout + aotk__check_seq_element(in->tdout, s, true, b, 0, 0, 0);
    p->dout_strides[0] = 0;
    p->dout_strides[1] = in->tdout->strides[1];
    p->dout_strides[2] = in->tdout->strides[2];
  }
  p->softmax_scale = softmax_scale;
  p->causal = causal;
  p->top_left = f->top_left;
  p->has_window = f->window;
  p->window_left = f->window_left;
  p->window_right = f->window_right;
  p->softcap = f->softcap;
  p->alibi_slopes = in->alibi == NULL ? NULL : in->alibi + (f->alibi == 2 ? b * s->alibi_row : 0);
  p->sinks = in->sinks;
  if (in->mask != NULL) {
    p->dropout_p = aotk__check_dropout_effective_p(f->dropout_p);
    p->keep = in->mask + mask_index(s, b, 0, 0, 0);
    p->keep_strides[0] = 0;
    p->keep_strides[1] = s->max_q * s->mask_row;
    p->keep_strides[2] = s->mask_row;
  }
}

double aotk__check_resolved_scale(float softmax_scale, int64_t head_dim_qk) {
  return softmax_scale != 0.0f ? (double)softmax_scale : 1.0 / sqrt((double)head_dim_qk);
}

/* Fills host storage with N(0, 1) values representable in dtype (padding too: it must not matter). */
void aotk__check_fill_random(float *values, uint16_t *bits, int64_t count, aotk_dtype dtype, uint64_t *state) {
  for (int64_t i = 0; i < count; i++) {
    bits[i] = aotk__dtype_bits(aotk__random_normal(state), dtype);
    values[i] = aotk__dtype_value(bits[i], dtype);
  }
}

aotk_status aotk__check_upload(const aotk__driver *driver, CUdeviceptr *device, const void *host, size_t bytes) {
  AOTK__CU_TRY(driver, driver->cuMemAlloc(device, bytes > 0 ? bytes : 1), "cuMemAlloc");
  if (bytes > 0) AOTK__CU_TRY(driver, driver->cuMemcpyHtoD(*device, host, bytes), "cuMemcpyHtoD");
  return AOTK_OK;
}

aotk_status aotk__check_alloc_poisoned(const aotk__driver *driver, CUdeviceptr *device, size_t bytes,
                                       unsigned char poison) {
  AOTK__CU_TRY(driver, driver->cuMemAlloc(device, bytes > 0 ? bytes : 1), "cuMemAlloc");
  AOTK__CU_TRY(driver, driver->cuMemsetD8(*device, poison, bytes > 0 ? bytes : 1), "cuMemsetD8");
  return AOTK_OK;
}

void *aotk__check_host_array(int64_t count, size_t size) { return calloc((size_t)(count > 0 ? count : 1), size); }

double aotk__check_lse_tolerance(double reference) { return AOTK__CHECK_LSE_ABS + AOTK__CHECK_LSE_REL * fabs(reference); }

/* cuMemsetD8 and cuMemcpyHtoD run on the legacy default stream, which a non-blocking stream does not
 * wait for (and a pageable copy may return before its DMA lands): wait for them before launching on
 * the case's stream, so that a poison cannot land after the kernel wrote its output. */
aotk_status aotk__check_settle(const aotk__driver *driver) {
  AOTK__CU_TRY(driver, driver->cuCtxSynchronize(), "cuCtxSynchronize");
  return AOTK_OK;
}

aotk_status aotk__check_synchronize(const aotk__driver *driver, aotk_stream stream, const char *after) {
  CUresult result = driver->cuStreamSynchronize((CUstream)stream);
  if (result != CUDA_SUCCESS) {
    char what[96];
    snprintf(what, sizeof what, "cuStreamSynchronize after %s", after);
    return aotk__cuda_failure(driver, result, what);
  }
  return AOTK_OK;
}

/* The query rows (or keys) compared for one (sequence, head): all, or a random subset including the
 * first and the last (where the masks and the tail block are). */
int64_t aotk__check_choose_rows(int64_t length, int64_t rows_per_head, int64_t *rows, uint64_t *state) {
  if (length <= rows_per_head) {
    for (int64_t i = 0; i < length; i++) rows[i] = i;
    return length;
  }
  rows[0] = 0;
  rows[1] = length - 1;
  for (int64_t i = 2; i < rows_per_head; i++) rows[i] = (int64_t)(aotk__random_next(state) % (uint64_t)length);
  return rows_per_head;
}

/* --- the features' buffers, shared by the forward and the backward ------------------------------ */

void aotk__check_free_features(const aotk__driver *driver, aotk__check_feature_buffers *fb) {
  CUdeviceptr *all[] = {&fb->alibi_device, &fb->sinks_device, &fb->cu_seqlens_q, &fb->cu_seqlens_k, &fb->rng_state,
                        &fb->mask_device};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (*all[i]) driver->cuMemFree(*all[i]);
    *all[i] = 0;
  }
  free(fb->alibi);
  free(fb->sinks);
  free(fb->mask);
  fb->alibi = fb->sinks = NULL;
  fb->mask = NULL;
}

aotk_status aotk__check_set_rng_state(const aotk__driver *driver, const aotk__check_feature_buffers *fb, int64_t seed,
                                      int64_t offset) {
  const int64_t state[2] = {seed, offset};
  AOTK__CU_TRY(driver, driver->cuMemcpyHtoD(fb->rng_state, state, sizeof state), "cuMemcpyHtoD");
  return AOTK_OK;
}

/* Draws the features' inputs, uploads them and fills their fields of *params: cu_seqlens and the
 * max_seqlens, the window and alignment, softcap, ALiBi slopes (2^-8u, u uniform in (0, 1]: ALiBi's
 * own range), sinks (1 + 1.5 N(0, 1): from well below the rows' lse to above it), the dropout
 * probability and RNG state, and the dropout mask (poisoned with 0xaa, which is neither 0 nor 1). */
aotk_status aotk__check_setup_features(const aotk__driver *driver, const aotk__check_shape *s,
                                       const aotk__check_features *f, uint64_t *state,
                                       aotk__check_feature_buffers *fb, aotk_attn_params *params) {
  aotk_status status;
  memset(fb, 0, sizeof *fb);
  if (s->varlen) {
    int32_t cu_q[AOTK__CHECK_MAX_SEQS + 1], cu_k[AOTK__CHECK_MAX_SEQS + 1];
    for (int64_t b = 0; b < s->seqs; b++) {
      cu_q[b] = (int32_t)s->start_q[b];
      cu_k[b] = (int32_t)s->start_k[b];
    }
    cu_q[s->seqs] = (int32_t)(s->start_q[s->seqs - 1] + s->len_q[s->seqs - 1]);
    cu_k[s->seqs] = (int32_t)(s->start_k[s->seqs - 1] + s->len_k[s->seqs - 1]);
    const size_t bytes = sizeof(int32_t) * (size_t)(s->seqs + 1);
    if ((status = aotk__check_upload(driver, &fb->cu_seqlens_q, cu_q, bytes)) != AOTK_OK) return status;
    if ((status = aotk__check_upload(driver, &fb->cu_seqlens_k, cu_k, bytes)) != AOTK_OK) return status;
    params->cu_seqlens_q = aotk_tensor_1d((void *)(uintptr_t)fb->cu_seqlens_q, AOTK_DTYPE_INT32, s->seqs + 1);
    params->cu_seqlens_k = aotk_tensor_1d((void *)(uintptr_t)fb->cu_seqlens_k, AOTK_DTYPE_INT32, s->seqs + 1);
    params->max_seqlen_q = (int32_t)s->max_q;
    params->max_seqlen_k = (int32_t)s->max_k;
  }
  if (f->window) {
    params->window_left = f->window_left;
    params->window_right = f->window_right;
  }
  params->causal_align = f->top_left ? AOTK_ALIGN_TOP_LEFT : AOTK_ALIGN_BOTTOM_RIGHT;
  params->softcap = f->softcap;
  if (f->alibi) {
    const int64_t rows = f->alibi == 2 ? s->seqs : 1;
    const int64_t count = f->alibi == 2 ? (rows - 1) * s->alibi_row + s->heads_q : s->heads_q;
    fb->alibi = malloc(sizeof(float) * (size_t)count);
    if (fb->alibi == NULL) return aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
    for (int64_t i = 0; i < count; i++) fb->alibi[i] = (float)exp2(-8.0 * aotk__random_uniform(state));
    if ((status = aotk__check_upload(driver, &fb->alibi_device, fb->alibi, sizeof(float) * (size_t)count)) != AOTK_OK) return status;
    void *data = (void *)(uintptr_t)fb->alibi_device;
    if (f->alibi == 2) {
      params->alibi_slopes = aotk_tensor_2d(data, AOTK_DTYPE_FLOAT32, rows, s->heads_q);
      params->alibi_slopes.strides[0] = s->alibi_row;
    } else {
      params->alibi_slopes = aotk_tensor_1d(data, AOTK_DTYPE_FLOAT32, s->heads_q);
    }
  }
  if (f->sinks) {
    fb->sinks = malloc(sizeof(float) * (size_t)s->heads_q);
    if (fb->sinks == NULL) return aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
    for (int64_t h = 0; h < s->heads_q; h++) fb->sinks[h] = 1.0f + 1.5f * aotk__random_normal(state);
    if ((status = aotk__check_upload(driver, &fb->sinks_device, fb->sinks, sizeof(float) * (size_t)s->heads_q)) != AOTK_OK) {
      return status;
    }
    params->sinks = aotk_tensor_1d((void *)(uintptr_t)fb->sinks_device, AOTK_DTYPE_FLOAT32, s->heads_q);
  }
  if (f->dropout_p > 0.0f) {
    params->dropout_p = f->dropout_p;
    AOTK__CU_TRY(driver, driver->cuMemAlloc(&fb->rng_state, 2 * sizeof(int64_t)), "cuMemAlloc");
    if ((status = aotk__check_set_rng_state(driver, fb, f->rng_seed, f->rng_offset)) != AOTK_OK) return status;
    params->rng_state = aotk_tensor_1d((void *)(uintptr_t)fb->rng_state, AOTK_DTYPE_INT64, 2);
    fb->mask = malloc((size_t)s->mask_elements);
    if (fb->mask == NULL) return aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
    if ((status = aotk__check_alloc_poisoned(driver, &fb->mask_device, (size_t)s->mask_elements, 0xaa)) != AOTK_OK) return status;
    aotk_tensor mask = aotk_tensor_4d((void *)(uintptr_t)fb->mask_device, AOTK_DTYPE_UINT8, s->seqs, s->heads_q,
                                      s->max_q, s->max_k);
    mask.strides[2] = s->mask_row;
    mask.strides[1] = s->max_q * s->mask_row;
    mask.strides[0] = s->heads_q * s->max_q * s->mask_row;
    params->dropout_mask = mask;
  }
  return AOTK_OK;
}

/* Every (sequence, head, row, key) of the sequences' pairs must be 0 or 1 as the model says (the
 * poison left there counts as a mismatch); every other element must still hold the poison. */
void aotk__check_compare_mask(const aotk__check_shape *s, const uint8_t *mask, int64_t seed, int64_t offset,
                              float dropout_p, aotk__check_mask_comparison *m) {
  memset(m, 0, sizeof *m);
  const uint32_t threshold = aotk__check_dropout_threshold(dropout_p);
  for (int64_t b = 0; b < s->seqs; b++)
    for (int64_t h = 0; h < s->heads_q; h++) {
      const uint32_t stream = (uint32_t)(b * s->heads_q + h);
      for (int64_t i = 0; i < s->max_q; i++) {
        const uint8_t *row = mask + mask_index(s, b, h, i, 0);
        const int64_t inside = i < s->len_q[b] ? s->len_k[b] : 0;
        /* One counter per (16-key group, q): its four keys 16 J + 2 q + {0, 1, 8, 9} of this row. */
        for (int64_t j0 = 0; j0 < inside; j0 += 16)
          for (int64_t q = 0; q < 4; q++) {
            uint32_t words[4];
            dropout_words(seed, offset, stream, i, j0 + 2 * q, words);
            for (int64_t t = 0; t < 4; t++) {
              const int64_t j = j0 + 2 * q + (t & 1) + 8 * (t >> 1);
              if (j >= inside) continue;
              const uint8_t expected = dropout_byte(words, i, j) >= threshold ? 1 : 0;
              m->elements++;
              m->kept += row[j] == 1;
              m->mismatches += row[j] != expected;
            }
          }
        for (int64_t j = inside; j < s->mask_row; j++) m->clobbered += row[j] != 0xaa;
      }
    }
}

/* Elements of a 16-bit tensor a call should have written (every row of every sequence) still holding
 * the poison, and elements it should have left alone (padding, unused rows) no longer holding it. */
aotk_status aotk__check_count_coverage(const aotk__placed_tensor *t, const aotk__check_shape *s, bool q_side,
                                       const uint16_t *bits, aotk_dtype dtype, int64_t *unwritten,
                                       int64_t *clobbered) {
  unsigned char *covered = calloc((size_t)t->storage_elements, 1);
  if (covered == NULL) return aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
  for (int64_t b = 0; b < s->seqs; b++)
    for (int64_t row = 0; row < (q_side ? s->len_q[b] : s->len_k[b]); row++)
      for (int64_t h = 0; h < t->shape[2]; h++)
        for (int64_t d = 0; d < t->shape[3]; d++) {
          int64_t i = aotk__check_seq_element(t, s, q_side, b, row, h, d);
          covered[i] = 1;
          if (isnan(aotk__dtype_value(bits[i], dtype))) (*unwritten)++;
        }
  for (int64_t i = 0; i < t->storage_elements; i++) {
    if (!covered[i] && bits[i] != 0xffff) (*clobbered)++;
  }
  free(covered);
  return AOTK_OK;
}

aotk_tensor aotk__check_lse_tensor(const aotk__check_shape *s, CUdeviceptr data) {
  aotk_tensor t;
  if (s->varlen) {
    t = aotk_tensor_2d((void *)(uintptr_t)data, AOTK_DTYPE_FLOAT32, s->heads_q, s->rows_q);
    t.strides[0] = s->lse_row;
  } else {
    t = aotk_tensor_3d((void *)(uintptr_t)data, AOTK_DTYPE_FLOAT32, s->seqs, s->heads_q, s->max_q);
    t.strides[1] = s->lse_row;
    t.strides[0] = s->heads_q * s->lse_row;
  }
  return t;
}

void aotk__check_copy_info(const aotk_kernel_info *info, char *kernel_name, size_t name_bytes, int *from_ptx,
                           int32_t *head_dim_qk, int32_t *head_dim_v, uint32_t *features, int32_t *launches) {
  snprintf(kernel_name, name_bytes, "%s", info->kernel_name);
  *from_ptx = info->from_ptx;
  *head_dim_qk = info->head_dim_qk;
  *head_dim_v = info->head_dim_v;
  *features = info->features;
  *launches = info->launches;
}
