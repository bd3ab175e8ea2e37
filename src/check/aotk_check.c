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

/* The library's threshold (src/attn/aotk_attn.c): a word is kept when >= floor(p * 2^32). */
static uint32_t dropout_threshold(float dropout_p) {
  double t = (double)dropout_p * 4294967296.0;
  return t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

/* The four words that decide keys 4 * group .. 4 * group + 3 of one row. */
static void dropout_words(int64_t seed, int64_t offset, uint32_t stream, int64_t row, int64_t group, uint32_t words[4]) {
  uint64_t key = (uint64_t)seed ^ ((uint64_t)offset & 0xffffffff00000000ull);
  const uint32_t key_words[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
  words[0] = (uint32_t)group;
  words[1] = (uint32_t)row;
  words[2] = stream;
  words[3] = (uint32_t)(uint64_t)offset;
  aotk__check_philox4x32(words, key_words, 7);
}

bool aotk__check_dropout_keep(int64_t seed, int64_t offset, float dropout_p, uint32_t stream, int64_t row,
                              int64_t key) {
  uint32_t words[4];
  dropout_words(seed, offset, stream, row, key / 4, words);
  return words[key % 4] >= dropout_threshold(dropout_p);
}

/* --- tensors placed in memory ----------------------------------------------------------------- */

/* A 4-d tensor [batch, seqlen, heads, dim] placed in host and device storage per the layout. The
 * varlen layout places its packed tensors as one batch entry of `total` rows. */
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

/* The tensor as the API takes it: 4-d, or for the varlen layout 3-d [total, heads, dim] (the
 * placement's batch dimension, of size 1, dropped). */
static aotk_tensor as_aotk_tensor(const placed_tensor *t, CUdeviceptr base, aotk_dtype dtype, int element_bytes,
                                  bool varlen) {
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

/* The sizes of one case, dense or varlen, in one form: `seqs` batch entries or sequences, each with
 * its own lengths; the dense layout is the varlen one with every length equal and no packing. */
typedef struct check_shape {
  bool varlen;
  int64_t seqs;
  int64_t len_q[AOTK__CHECK_MAX_SEQS], len_k[AOTK__CHECK_MAX_SEQS];
  int64_t start_q[AOTK__CHECK_MAX_SEQS], start_k[AOTK__CHECK_MAX_SEQS]; /* varlen: packed first row; dense: 0 */
  /* Per-row statistics of a case are kept as one array, sequence after sequence, each [heads_q][len_q]:
   * sequence b's start there, and likewise b's first (kv head, key) item for dk/dv. */
  int64_t stats_offset[AOTK__CHECK_MAX_SEQS + 1];
  int64_t key_offset[AOTK__CHECK_MAX_SEQS + 1];
  int64_t max_q, max_k;   /* dense: seqlen_q, seqlen_k; varlen: max_seqlen_q, max_seqlen_k as passed */
  int64_t rows_q, rows_k; /* the tensors' sequence dimension: dense the lengths, varlen total_q, total_k */
  int64_t heads_q, heads_kv, dim_qk, dim_v;
  int64_t lse_row, lse_elements;     /* lse: rows of lse_row floats (> the row's length when padded) */
  int64_t mask_row, mask_elements;   /* dropout mask [seqs, heads_q, max_q, mask_row] */
  int64_t alibi_row;                 /* 2-d slopes: row stride */
} check_shape;

static aotk_status resolve_shape(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q, int64_t heads_kv,
                                 int64_t head_dim, aotk__check_layout layout, const aotk__check_features *f,
                                 check_shape *s) {
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
static int64_t seq_element(const placed_tensor *t, const check_shape *s, bool q_side, int64_t b, int64_t row, int64_t h,
                           int64_t d) {
  if (!s->varlen) return element_index(t, b, row, h, d);
  return element_index(t, 0, (q_side ? s->start_q[b] : s->start_k[b]) + row, h, d);
}

static int64_t lse_index(const check_shape *s, int64_t b, int64_t h, int64_t row) {
  return s->varlen ? h * s->lse_row + s->start_q[b] + row : (b * s->heads_q + h) * s->lse_row + row;
}

static int64_t mask_index(const check_shape *s, int64_t b, int64_t h, int64_t row, int64_t key) {
  return ((b * s->heads_q + h) * s->max_q + row) * s->mask_row + key;
}

/* The sequence whose statistics hold item `item` (stats_offset or key_offset as `offsets`): the one
 * with offsets[b] <= item < offsets[b + 1] (so never an empty one). */
static int64_t sequence_of(const int64_t *offsets, int64_t seqs, int64_t item) {
  int64_t lo = 0, hi = seqs - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= item) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

/* The reference problem of sequence b (batch entry b when dense): batch 0 of a problem pointed at the
 * sequence's rows, with its own lengths, its row of ALiBi slopes and its slice of the dropout mask. */
typedef struct host_inputs {
  const float *q, *k, *v, *dout;
  const placed_tensor *tq, *tk, *tv, *tdout;
  const float *alibi, *sinks;
  const uint8_t *mask;
} host_inputs;

static void reference_problem(aotk__attn_reference_problem *p, const check_shape *s, int64_t b, int causal,
                              double softmax_scale, const aotk__check_features *f, const host_inputs *in) {
  memset(p, 0, sizeof *p);
  p->seqlen_q = s->len_q[b];
  p->seqlen_k = s->len_k[b];
  p->heads_q = s->heads_q;
  p->heads_kv = s->heads_kv;
  p->head_dim = s->dim_qk;
  p->head_dim_v = s->dim_v;
  p->q = in->q + seq_element(in->tq, s, true, b, 0, 0, 0);
  p->k = in->k + seq_element(in->tk, s, false, b, 0, 0, 0);
  p->v = in->v + seq_element(in->tv, s, false, b, 0, 0, 0);
  const placed_tensor *const placed[3] = {in->tq, in->tk, in->tv};
  int64_t *const strides[3] = {p->q_strides, p->k_strides, p->v_strides};
  for (int t = 0; t < 3; t++) {
    strides[t][0] = 0;
    strides[t][1] = placed[t]->strides[1];
    strides[t][2] = placed[t]->strides[2];
  }
  if (in->dout != NULL) {
    p->dout = in->dout + seq_element(in->tdout, s, true, b, 0, 0, 0);
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
    p->dropout_p = f->dropout_p;
    p->keep = in->mask + mask_index(s, b, 0, 0, 0);
    p->keep_strides[0] = 0;
    p->keep_strides[1] = s->max_q * s->mask_row;
    p->keep_strides[2] = s->mask_row;
  }
}

static double resolved_scale(float softmax_scale, int64_t head_dim_qk) {
  return softmax_scale != 0.0f ? (double)softmax_scale : 1.0 / sqrt((double)head_dim_qk);
}

/* Fills host storage with N(0, 1) values representable in dtype (padding too: it must not matter). */
static void fill_random(float *values, uint16_t *bits, int64_t count, aotk_dtype dtype, uint64_t *state) {
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
static aotk_status settle(const aotk__driver *driver) {
  AOTK__CU_TRY(driver, driver->cuCtxSynchronize(), "cuCtxSynchronize");
  return AOTK_OK;
}

static aotk_status synchronize(const aotk__driver *driver, aotk_stream stream, const char *after) {
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
static int64_t choose_rows(int64_t length, int64_t rows_per_head, int64_t *rows, uint64_t *state) {
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

typedef struct feature_buffers {
  float *alibi;  /* host copies; NULL when the feature is off */
  float *sinks;
  uint8_t *mask; /* the forward's dropout mask, downloaded */
  CUdeviceptr alibi_device, sinks_device, cu_seqlens_q, cu_seqlens_k, rng_state, mask_device;
} feature_buffers;

static void free_features(const aotk__driver *driver, feature_buffers *fb) {
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

static aotk_status set_rng_state(const aotk__driver *driver, const feature_buffers *fb, int64_t seed, int64_t offset) {
  const int64_t state[2] = {seed, offset};
  AOTK__CU_TRY(driver, driver->cuMemcpyHtoD(fb->rng_state, state, sizeof state), "cuMemcpyHtoD");
  return AOTK_OK;
}

/* Draws the features' inputs, uploads them and fills their fields of *params: cu_seqlens and the
 * max_seqlens, the window and alignment, softcap, ALiBi slopes (2^-8u, u uniform in (0, 1]: ALiBi's
 * own range), sinks (1 + 1.5 N(0, 1): from well below the rows' lse to above it), the dropout
 * probability and RNG state, and the dropout mask (poisoned with 0xaa, which is neither 0 nor 1). */
static aotk_status setup_features(const aotk__driver *driver, const check_shape *s, const aotk__check_features *f,
                                  uint64_t *state, feature_buffers *fb, aotk_attn_params *params) {
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
    if ((status = set_rng_state(driver, fb, f->rng_seed, f->rng_offset)) != AOTK_OK) return status;
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

/* What a downloaded dropout mask says against the host's model under {seed, offset}. */
typedef struct mask_comparison {
  int64_t elements, kept, mismatches, clobbered;
} mask_comparison;

/* Every (sequence, head, row, key) of the sequences' pairs must be 0 or 1 as the model says (the
 * poison left there counts as a mismatch); every other element must still hold the poison. */
static void compare_mask(const check_shape *s, const uint8_t *mask, int64_t seed, int64_t offset, float dropout_p,
                         mask_comparison *m) {
  memset(m, 0, sizeof *m);
  for (int64_t b = 0; b < s->seqs; b++)
    for (int64_t h = 0; h < s->heads_q; h++) {
      const uint32_t stream = (uint32_t)(b * s->heads_q + h);
      for (int64_t i = 0; i < s->max_q; i++) {
        const uint8_t *row = mask + mask_index(s, b, h, i, 0);
        const int64_t inside = i < s->len_q[b] ? s->len_k[b] : 0;
        for (int64_t j = 0; j < inside; j += 4) {
          uint32_t words[4];
          dropout_words(seed, offset, stream, i, j / 4, words);
          const uint32_t threshold = dropout_threshold(dropout_p);
          for (int64_t t = 0; t < 4 && j + t < inside; t++) {
            uint8_t expected = words[t] >= threshold ? 1 : 0;
            m->elements++;
            m->kept += row[j + t] == 1;
            m->mismatches += row[j + t] != expected;
          }
        }
        for (int64_t j = inside; j < s->mask_row; j++) m->clobbered += row[j] != 0xaa;
      }
    }
}

/* Elements of a 16-bit tensor a call should have written (every row of every sequence) still holding
 * the poison, and elements it should have left alone (padding, unused rows) no longer holding it. */
static aotk_status count_coverage(const placed_tensor *t, const check_shape *s, bool q_side, const uint16_t *bits,
                                  aotk_dtype dtype, int64_t *unwritten, int64_t *clobbered) {
  unsigned char *covered = calloc((size_t)t->storage_elements, 1);
  if (covered == NULL) return aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
  for (int64_t b = 0; b < s->seqs; b++)
    for (int64_t row = 0; row < (q_side ? s->len_q[b] : s->len_k[b]); row++)
      for (int64_t h = 0; h < t->shape[2]; h++)
        for (int64_t d = 0; d < t->shape[3]; d++) {
          int64_t i = seq_element(t, s, q_side, b, row, h, d);
          covered[i] = 1;
          if (isnan(aotk__dtype_value(bits[i], dtype))) (*unwritten)++;
        }
  for (int64_t i = 0; i < t->storage_elements; i++) {
    if (!covered[i] && bits[i] != 0xffff) (*clobbered)++;
  }
  free(covered);
  return AOTK_OK;
}

/* The same for lse (float32, poison 0xffffffff): every row's value written (a NaN counts as not),
 * everything else left alone. */
static aotk_status count_lse_coverage(const check_shape *s, const float *lse, int64_t *unwritten, int64_t *clobbered) {
  unsigned char *covered = calloc((size_t)s->lse_elements, 1);
  if (covered == NULL) return aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
  for (int64_t b = 0; b < s->seqs; b++)
    for (int64_t h = 0; h < s->heads_q; h++)
      for (int64_t row = 0; row < s->len_q[b]; row++) {
        int64_t i = lse_index(s, b, h, row);
        covered[i] = 1;
        if (isnan(lse[i])) (*unwritten)++;
      }
  for (int64_t i = 0; i < s->lse_elements; i++) {
    uint32_t word;
    memcpy(&word, &lse[i], sizeof word);
    if (!covered[i] && word != 0xffffffffu) (*clobbered)++;
  }
  free(covered);
  return AOTK_OK;
}

static aotk_tensor lse_tensor(const check_shape *s, CUdeviceptr data) {
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

static void copy_info(const aotk_kernel_info *info, char *kernel_name, size_t name_bytes, int *from_ptx,
                      int32_t *head_dim_qk, int32_t *head_dim_v, uint32_t *features, int32_t *launches) {
  snprintf(kernel_name, name_bytes, "%s", info->kernel_name);
  *from_ptx = info->from_ptx;
  *head_dim_qk = info->head_dim_qk;
  *head_dim_v = info->head_dim_v;
  *features = info->features;
  *launches = info->launches;
}

/* --- the forward ------------------------------------------------------------------------------- */

enum { FWD_Q, FWD_K, FWD_V, FWD_OUT, FWD_LSE, FWD_BUFFERS };

aotk_status aotk__check_attn_fwd(const aotk__driver *driver, const aotk__fwd_check_case *c,
                                 aotk__fwd_check_result *r) {
  memset(r, 0, sizeof *r);
  uint64_t state = c->seed;
  const aotk__check_features *f = &c->features;
  check_shape s;
  aotk_status status = resolve_shape(c->batch, c->seqlen_q, c->seqlen_k, c->heads_q, c->heads_kv, c->head_dim,
                                     c->layout, f, &s);
  if (status != AOTK_OK) return status;
  const int64_t HQ = s.heads_q, HKV = s.heads_kv, DQK = s.dim_qk, DV = s.dim_v;
  const int64_t placed_batch = s.varlen ? 1 : s.seqs;
  const bool dropout = f->dropout_p > 0.0f;
  placed_tensor tq = place(c->layout, placed_batch, s.rows_q, HQ, DQK), tk = place(c->layout, placed_batch, s.rows_k, HKV, DQK);
  placed_tensor tv = place(c->layout, placed_batch, s.rows_k, HKV, DV), to = place(c->layout, placed_batch, s.rows_q, HQ, DV);

  float *hq = malloc(sizeof(float) * (size_t)tq.storage_elements);
  float *hk = malloc(sizeof(float) * (size_t)tk.storage_elements);
  float *hv = malloc(sizeof(float) * (size_t)tv.storage_elements);
  int64_t max_bits = tq.storage_elements > tk.storage_elements ? tq.storage_elements : tk.storage_elements;
  if (tv.storage_elements > max_bits) max_bits = tv.storage_elements;
  uint16_t *bits = malloc(sizeof(uint16_t) * (size_t)max_bits);
  uint16_t *out_bits = malloc(sizeof(uint16_t) * (size_t)to.storage_elements);
  float *lse_host = malloc(sizeof(float) * (size_t)s.lse_elements);
  /* The second run's outputs, for dropout's same-state-same-bits check. */
  uint16_t *out_again = dropout ? malloc(sizeof(uint16_t) * (size_t)to.storage_elements) : NULL;
  float *lse_again = dropout ? malloc(sizeof(float) * (size_t)s.lse_elements) : NULL;
  uint8_t *mask_again = dropout ? malloc((size_t)s.mask_elements) : NULL;
  const int64_t rows_per_head = c->rows_per_head < 2 ? 2 : c->rows_per_head;
  int64_t *rows = malloc(sizeof(int64_t) * (size_t)rows_per_head);
  double *ref = malloc(sizeof(double) * (size_t)DV);
  float *lowp = malloc(sizeof(float) * (size_t)DV);
  CUdeviceptr dev[FWD_BUFFERS] = {0};
  feature_buffers fb;
  memset(&fb, 0, sizeof fb);
  if (!hq || !hk || !hv || !bits || !out_bits || !lse_host || !rows || !ref || !lowp ||
      (dropout && (!out_again || !lse_again || !mask_again))) {
    status = aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
    goto done;
  }

  fill_random(hq, bits, tq.storage_elements, c->dtype, &state);
  if ((status = aotk__check_upload(driver, &dev[FWD_Q], bits, 2 * (size_t)tq.storage_elements)) != AOTK_OK) goto done;
  fill_random(hk, bits, tk.storage_elements, c->dtype, &state);
  if ((status = aotk__check_upload(driver, &dev[FWD_K], bits, 2 * (size_t)tk.storage_elements)) != AOTK_OK) goto done;
  fill_random(hv, bits, tv.storage_elements, c->dtype, &state);
  if ((status = aotk__check_upload(driver, &dev[FWD_V], bits, 2 * (size_t)tv.storage_elements)) != AOTK_OK) goto done;
  /* Poison: 0xffff is a NaN in both fp16 and bf16, 0xffffffff in fp32. */
  if ((status = aotk__check_alloc_poisoned(driver, &dev[FWD_OUT], 2 * (size_t)to.storage_elements, 0xff)) != AOTK_OK) goto done;
  if (c->with_lse &&
      (status = aotk__check_alloc_poisoned(driver, &dev[FWD_LSE], 4 * (size_t)s.lse_elements, 0xff)) != AOTK_OK) {
    goto done;
  }

  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = as_aotk_tensor(&tq, dev[FWD_Q], c->dtype, 2, s.varlen);
  params.k = as_aotk_tensor(&tk, dev[FWD_K], c->dtype, 2, s.varlen);
  params.v = as_aotk_tensor(&tv, dev[FWD_V], c->dtype, 2, s.varlen);
  params.out = as_aotk_tensor(&to, dev[FWD_OUT], c->dtype, 2, s.varlen);
  if (c->with_lse) params.lse = lse_tensor(&s, dev[FWD_LSE]);
  params.softmax_scale = c->softmax_scale;
  params.causal = c->causal;
  if ((status = setup_features(driver, &s, f, &state, &fb, &params)) != AOTK_OK) goto done;

  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  if ((status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info)) != AOTK_OK) goto done;
  copy_info(&info, r->kernel_name, sizeof r->kernel_name, &r->from_ptx, &r->kernel_head_dim_qk, &r->kernel_head_dim_v,
            &r->features, &r->launches);
  if ((status = settle(driver)) != AOTK_OK) goto done;
  if ((status = aotk_attn_fwd(&params, c->stream)) != AOTK_OK) goto done;
  if ((status = synchronize(driver, c->stream, "aotk_attn_fwd")) != AOTK_OK) goto done;
  AOTK__CHECK_CU(driver->cuMemcpyDtoH(out_bits, dev[FWD_OUT], 2 * (size_t)to.storage_elements), "cuMemcpyDtoH");
  if (c->with_lse) AOTK__CHECK_CU(driver->cuMemcpyDtoH(lse_host, dev[FWD_LSE], 4 * (size_t)s.lse_elements), "cuMemcpyDtoH");

  if (dropout) {
    AOTK__CHECK_CU(driver->cuMemcpyDtoH(fb.mask, fb.mask_device, (size_t)s.mask_elements), "cuMemcpyDtoH");
    mask_comparison m;
    compare_mask(&s, fb.mask, f->rng_seed, f->rng_offset, f->dropout_p, &m);
    r->mask_elements = m.elements;
    r->mask_kept = m.kept;
    r->mask_mismatches = m.mismatches;
    r->mask_clobbered = m.clobbered;
    /* Bernoulli(keep probability) per element; the probability is the threshold's, exactly. */
    const double keep = 1.0 - (double)dropout_threshold(f->dropout_p) / 4294967296.0;
    const double n = (double)m.elements;
    r->mask_keep_z = n > 0 ? ((double)m.kept - n * keep) / sqrt(n * keep * (1.0 - keep)) : 0.0;

    /* The same state again, on re-poisoned outputs: the same bits. */
    AOTK__CHECK_CU(driver->cuMemsetD8(dev[FWD_OUT], 0xff, 2 * (size_t)to.storage_elements), "cuMemsetD8");
    if (c->with_lse) AOTK__CHECK_CU(driver->cuMemsetD8(dev[FWD_LSE], 0xff, 4 * (size_t)s.lse_elements), "cuMemsetD8");
    AOTK__CHECK_CU(driver->cuMemsetD8(fb.mask_device, 0xaa, (size_t)s.mask_elements), "cuMemsetD8");
    if ((status = settle(driver)) != AOTK_OK) goto done;
    if ((status = aotk_attn_fwd(&params, c->stream)) != AOTK_OK) goto done;
    if ((status = synchronize(driver, c->stream, "aotk_attn_fwd")) != AOTK_OK) goto done;
    AOTK__CHECK_CU(driver->cuMemcpyDtoH(out_again, dev[FWD_OUT], 2 * (size_t)to.storage_elements), "cuMemcpyDtoH");
    if (c->with_lse) AOTK__CHECK_CU(driver->cuMemcpyDtoH(lse_again, dev[FWD_LSE], 4 * (size_t)s.lse_elements), "cuMemcpyDtoH");
    AOTK__CHECK_CU(driver->cuMemcpyDtoH(mask_again, fb.mask_device, (size_t)s.mask_elements), "cuMemcpyDtoH");
    r->rerun_differs = memcmp(out_again, out_bits, 2 * (size_t)to.storage_elements) != 0 ||
                       (c->with_lse && memcmp(lse_again, lse_host, 4 * (size_t)s.lse_elements) != 0) ||
                       memcmp(mask_again, fb.mask, (size_t)s.mask_elements) != 0;

    /* The next offset: another mask, still the model's. */
    if ((status = set_rng_state(driver, &fb, f->rng_seed, f->rng_offset + 1)) != AOTK_OK) goto done;
    AOTK__CHECK_CU(driver->cuMemsetD8(fb.mask_device, 0xaa, (size_t)s.mask_elements), "cuMemsetD8");
    if ((status = settle(driver)) != AOTK_OK) goto done;
    if ((status = aotk_attn_fwd(&params, c->stream)) != AOTK_OK) goto done;
    if ((status = synchronize(driver, c->stream, "aotk_attn_fwd")) != AOTK_OK) goto done;
    AOTK__CHECK_CU(driver->cuMemcpyDtoH(mask_again, fb.mask_device, (size_t)s.mask_elements), "cuMemcpyDtoH");
    mask_comparison next;
    compare_mask(&s, mask_again, f->rng_seed, f->rng_offset + 1, f->dropout_p, &next);
    r->mask_mismatches += next.mismatches;
    r->mask_clobbered += next.clobbered;
    r->new_offset_same_mask = m.elements >= 256 && memcmp(mask_again, fb.mask, (size_t)s.mask_elements) == 0;
  }

  /* Every output element written; every padding element and unused row left alone. */
  if ((status = count_coverage(&to, &s, true, out_bits, c->dtype, &r->unwritten, &r->clobbered)) != AOTK_OK) goto done;
  if (c->with_lse && (status = count_lse_coverage(&s, lse_host, &r->unwritten, &r->clobbered)) != AOTK_OK) goto done;

  const double scale = resolved_scale(c->softmax_scale, DQK);
  const host_inputs inputs = {hq, hk, hv, NULL, &tq, &tk, &tv, NULL, fb.alibi, fb.sinks, dropout ? fb.mask : NULL};
  for (int64_t b = 0; b < s.seqs; b++) {
    aotk__attn_reference_problem problem;
    reference_problem(&problem, &s, b, c->causal, scale, f, &inputs);
    for (int64_t h = 0; h < HQ; h++) {
      int64_t count = choose_rows(s.len_q[b], rows_per_head, rows, &state);
      for (int64_t i = 0; i < count; i++) {
        int64_t row = rows[i];
        double ref_lse;
        aotk__attn_reference_row_f64(&problem, 0, h, row, ref, &ref_lse);
        aotk__attn_reference_row_lowp(&problem, c->dtype, 0, h, row, lowp);
        bool empty = isinf(ref_lse) && ref_lse < 0;
        for (int64_t d = 0; d < DV; d++) {
          double got = aotk__dtype_value(out_bits[seq_element(&to, &s, true, b, row, h, d)], c->dtype);
          double error = fabs(got - ref[d]);
          if (!(error <= r->max_error)) r->max_error = isnan(error) ? INFINITY : error;
          double lowp_error = fabs((double)lowp[d] - ref[d]);
          if (lowp_error > r->lowp_max_error) r->lowp_max_error = lowp_error;
          if (empty && got != 0.0) r->bad_empty_rows++;
        }
        if (c->with_lse) {
          double got_lse = lse_host[lse_index(&s, b, h, row)];
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
  /* lse_max_error is kept in units of its tolerance. */
  const double bound = 2.0 * r->lowp_max_error + AOTK__CHECK_ERROR_FLOOR;
  bool numbers_ok = r->max_error <= bound;
  bool lse_ok = r->lse_max_error <= 1.0;
  bool dropout_ok = !dropout ||
                    (r->mask_mismatches == 0 && r->mask_clobbered == 0 && !r->rerun_differs &&
                     !r->new_offset_same_mask &&
                     (r->mask_elements < AOTK__CHECK_KEEP_RATE_MIN_ELEMENTS ||
                      fabs(r->mask_keep_z) <= AOTK__CHECK_KEEP_RATE_SIGMAS));
  r->passed = numbers_ok && lse_ok && dropout_ok && r->unwritten == 0 && r->clobbered == 0 && r->bad_empty_rows == 0;
  int used = snprintf(r->detail, sizeof r->detail,
                      "err %.3g (bound %.3g = 2 x same-precision %.3g + %.0e), lse err %.3g of tolerance, rows %lld, "
                      "unwritten %lld, clobbered %lld, bad empty rows %lld",
                      r->max_error, bound, r->lowp_max_error, AOTK__CHECK_ERROR_FLOOR, r->lse_max_error,
                      (long long)r->rows_checked, (long long)r->unwritten, (long long)r->clobbered,
                      (long long)r->bad_empty_rows);
  if (dropout && used > 0 && (size_t)used < sizeof r->detail) {
    snprintf(r->detail + used, sizeof r->detail - (size_t)used,
             "; mask: %lld elements, keep %.5f (z %.2f), mismatches %lld, clobbered %lld%s%s", (long long)r->mask_elements,
             r->mask_elements > 0 ? (double)r->mask_kept / (double)r->mask_elements : 0.0, r->mask_keep_z,
             (long long)r->mask_mismatches, (long long)r->mask_clobbered,
             r->rerun_differs ? ", the same rng_state gave other bits" : "",
             r->new_offset_same_mask ? ", offset + 1 gave the same mask" : "");
  }

done:
  for (int i = 0; i < FWD_BUFFERS; i++) {
    if (dev[i]) driver->cuMemFree(dev[i]);
  }
  free_features(driver, &fb);
  free(hq);
  free(hk);
  free(hv);
  free(bits);
  free(out_bits);
  free(lse_host);
  free(out_again);
  free(lse_again);
  free(mask_again);
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

/* Maxima of one comparison (per gradient tensor), kept per worker thread and merged. */
typedef struct bwd_comparison {
  double max_error[AOTK__CHECK_GRADIENTS];
  double lowp_max_error[AOTK__CHECK_GRADIENTS];
  double max_magnitude[AOTK__CHECK_GRADIENTS];
  int64_t elements_checked;
  int64_t bad_empty_rows;
  int out_of_memory;
} bwd_comparison;

/* One row of dq ((sequence, query head, row)) or key row of dk and dv ((sequence, kv head, key)). */
typedef struct bwd_item {
  int32_t seq, head;
  int64_t row;
} bwd_item;

/* The host reference of one case, shared by its worker threads. Phase 0 computes each (sequence,
 * head_q, row)'s statistics, item i being the statistics' own index; phase 1 computes the dq rows of
 * dq_items, then the dk/dv key rows of kv_items, both references, and compares them with the GPU's
 * bits. Items are handed out one at a time through next_item. */
typedef struct bwd_reference_job {
  const aotk__attn_reference_problem *problems; /* [seqs] */
  const check_shape *shape;
  aotk_dtype dtype;
  const placed_tensor *placed;  /* [BWD_TENSORS] */
  const uint16_t *gradient_bits[3];
  double *lse_f64, *delta_f64;  /* at check_shape.stats_offset[seq] + head * len_q[seq] + row */
  float *lse_lowp, *delta_lowp;
  const bwd_item *dq_items, *kv_items;
  int64_t dq_count, kv_count;
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
  const check_shape *s = job->shape;
  const int64_t DQK = s->dim_qk, DV = s->dim_v;
  double *exact = malloc(sizeof(double) * (size_t)(DQK + DV));
  float *lowp = malloc(sizeof(float) * (size_t)(DQK + DV));
  if (exact == NULL || lowp == NULL) {
    c->out_of_memory = 1;
    free(exact);
    free(lowp);
    return NULL;
  }
  for (;;) {
    int64_t item = atomic_fetch_add(&job->next_item, 1);
    if (item >= job->item_count) break;
    if (job->phase == 0) {
      const int64_t b = sequence_of(s->stats_offset, s->seqs, item);
      const int64_t local = item - s->stats_offset[b];
      const int64_t h = local / s->len_q[b], row = local % s->len_q[b];
      const aotk__attn_reference_problem *p = &job->problems[b];
      aotk__attn_reference_bwd_row_stats_f64(p, 0, h, row, exact, &job->lse_f64[item], &job->delta_f64[item]);
      aotk__attn_reference_bwd_row_stats_lowp(p, (int)job->dtype, 0, h, row, lowp, &job->lse_lowp[item],
                                              &job->delta_lowp[item]);
    } else if (item < job->dq_count) {
      const bwd_item *it = &job->dq_items[item];
      const int64_t b = it->seq, h = it->head, row = it->row;
      const int64_t stat = s->stats_offset[b] + h * s->len_q[b] + row;
      const aotk__attn_reference_problem *p = &job->problems[b];
      aotk__attn_reference_bwd_dq_row_f64(p, 0, h, row, job->lse_f64[stat], job->delta_f64[stat], exact);
      aotk__attn_reference_bwd_dq_row_lowp(p, (int)job->dtype, 0, h, row, job->lse_lowp[stat], job->delta_lowp[stat],
                                           lowp);
      bool empty = isinf(job->lse_f64[stat]) && job->lse_f64[stat] < 0;
      bool nonzero = false;
      for (int64_t d = 0; d < DQK; d++) {
        double got = aotk__dtype_value(job->gradient_bits[0][seq_element(&job->placed[BWD_DQ], s, true, b, row, h, d)],
                               job->dtype);
        record(c, AOTK__CHECK_DQ, got, exact[d], lowp[d]);
        if (got != 0.0) nonzero = true;
      }
      if (empty && nonzero) c->bad_empty_rows++;
    } else {
      const bwd_item *it = &job->kv_items[item - job->dq_count];
      const int64_t b = it->seq, h = it->head, j = it->row;
      const int64_t stats = s->stats_offset[b];
      const aotk__attn_reference_problem *p = &job->problems[b];
      aotk__attn_reference_bwd_dkdv_row_f64(p, 0, h, j, job->lse_f64 + stats, job->delta_f64 + stats, exact,
                                            exact + DQK);
      aotk__attn_reference_bwd_dkdv_row_lowp(p, (int)job->dtype, 0, h, j, job->lse_lowp + stats,
                                             job->delta_lowp + stats, lowp, lowp + DQK);
      for (int64_t d = 0; d < DQK; d++) {
        double got = aotk__dtype_value(job->gradient_bits[1][seq_element(&job->placed[BWD_DK], s, false, b, j, h, d)],
                               job->dtype);
        record(c, AOTK__CHECK_DK, got, exact[d], lowp[d]);
      }
      for (int64_t d = 0; d < DV; d++) {
        double got = aotk__dtype_value(job->gradient_bits[2][seq_element(&job->placed[BWD_DV], s, false, b, j, h, d)],
                               job->dtype);
        record(c, AOTK__CHECK_DV, got, exact[DQK + d], lowp[DQK + d]);
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

/* The rows compared: for each sequence and head (query heads for dq, kv heads for dk/dv), every row
 * or rows_per_head sampled ones. *items has room for every row. */
static int64_t choose_items(const check_shape *s, bool q_side, int64_t rows_per_head, int64_t *scratch,
                            uint64_t *state, bwd_item *items) {
  int64_t count = 0;
  const int64_t heads = q_side ? s->heads_q : s->heads_kv;
  for (int64_t b = 0; b < s->seqs; b++) {
    const int64_t length = q_side ? s->len_q[b] : s->len_k[b];
    for (int64_t h = 0; h < heads; h++) {
      /* At least 2 when sampling: the first row and the last. */
      const int64_t per_head = rows_per_head <= 0 ? length : rows_per_head < 2 ? 2 : rows_per_head;
      int64_t chosen = choose_rows(length, per_head, scratch, state);
      for (int64_t i = 0; i < chosen; i++) {
        items[count].seq = (int32_t)b;
        items[count].head = (int32_t)h;
        items[count].row = scratch[i];
        count++;
      }
    }
  }
  return count;
}

aotk_status aotk__check_attn_bwd(const aotk__driver *driver, const aotk__bwd_check_case *c,
                                 aotk__bwd_check_result *r) {
  memset(r, 0, sizeof *r);
  uint64_t state = c->seed;
  const aotk__check_features *f = &c->features;
  check_shape s;
  aotk_status status = resolve_shape(c->batch, c->seqlen_q, c->seqlen_k, c->heads_q, c->heads_kv, c->head_dim,
                                     c->layout, f, &s);
  if (status != AOTK_OK) return status;
  const int64_t HQ = s.heads_q, DQK = s.dim_qk;
  const int64_t placed_batch = s.varlen ? 1 : s.seqs;
  const bool dropout = f->dropout_p > 0.0f;
  placed_tensor placed[BWD_TENSORS];
  for (int t = 0; t < BWD_TENSORS; t++) {
    aotk__check_layout layout = c->mix_layouts && t % 2 == 1 ? partner_layout(c->layout) : c->layout;
    bool q_shaped = t == BWD_Q || t == BWD_OUT || t == BWD_DOUT || t == BWD_DQ;
    bool qk_dim = t == BWD_Q || t == BWD_K || t == BWD_DQ || t == BWD_DK;
    placed[t] = place(layout, placed_batch, q_shaped ? s.rows_q : s.rows_k, q_shaped ? HQ : s.heads_kv,
                      qk_dim ? DQK : s.dim_v);
  }
  static const int inputs[] = {BWD_Q, BWD_K, BWD_V, BWD_DOUT};
  static const int gradients[] = {BWD_DQ, BWD_DK, BWD_DV};
  static const char *const gradient_names[AOTK__CHECK_GRADIENTS] = {"dq", "dk", "dv", "dsinks"};

  float *host[BWD_TENSORS] = {NULL};
  uint16_t *first_bits[3] = {NULL}, *repeat_bits = NULL, *bits = NULL;
  float *dsinks_first = NULL, *dsinks_repeat = NULL;
  double *lse_f64 = NULL, *delta_f64 = NULL;
  float *lse_lowp = NULL, *delta_lowp = NULL;
  bwd_item *dq_items = NULL, *kv_items = NULL;
  int64_t *scratch = NULL;
  aotk__attn_reference_problem *problems = NULL;
  bwd_comparison *per_worker = NULL;
  bwd_worker *workers = NULL;
  pthread_t *handles = NULL;
  CUdeviceptr dev[BWD_TENSORS] = {0}, dev_lse = 0, dev_workspace = 0, dev_dsinks = 0;
  feature_buffers fb;
  memset(&fb, 0, sizeof fb);

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
  dsinks_first = malloc(sizeof(float) * (size_t)HQ);
  dsinks_repeat = malloc(sizeof(float) * (size_t)HQ);
  const int64_t stats_count = s.stats_offset[s.seqs], kv_rows = s.key_offset[s.seqs];
  /* At least one element each, so that a case with no rows at all still allocates. */
  lse_f64 = malloc(sizeof(double) * (size_t)(stats_count + 1));
  delta_f64 = malloc(sizeof(double) * (size_t)(stats_count + 1));
  lse_lowp = malloc(sizeof(float) * (size_t)(stats_count + 1));
  delta_lowp = malloc(sizeof(float) * (size_t)(stats_count + 1));
  dq_items = malloc(sizeof(bwd_item) * (size_t)(stats_count + 1));
  kv_items = malloc(sizeof(bwd_item) * (size_t)(kv_rows + 1));
  scratch = malloc(sizeof(int64_t) * (size_t)((s.max_q > s.max_k ? s.max_q : s.max_k) + 2));
  problems = calloc((size_t)s.seqs, sizeof *problems);
  const int threads = reference_threads();
  per_worker = calloc((size_t)threads, sizeof *per_worker);
  workers = calloc((size_t)threads, sizeof *workers);
  handles = calloc((size_t)threads, sizeof *handles);
  if (!allocated || !bits || !repeat_bits || !dsinks_first || !dsinks_repeat || !lse_f64 || !delta_f64 || !lse_lowp ||
      !delta_lowp || !dq_items || !kv_items || !scratch || !problems || !per_worker || !workers || !handles) {
    status = aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
    goto done;
  }

  for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
    const placed_tensor *t = &placed[inputs[i]];
    fill_random(host[inputs[i]], bits, t->storage_elements, c->dtype, &state);
    if ((status = aotk__check_upload(driver, &dev[inputs[i]], bits, 2 * (size_t)t->storage_elements)) != AOTK_OK) goto done;
  }
  /* Poison: 0xffff is a NaN in both fp16 and bf16, 0xffffffff in fp32. */
  static const int outputs[] = {BWD_OUT, BWD_DQ, BWD_DK, BWD_DV};
  for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) {
    size_t bytes = 2 * (size_t)placed[outputs[i]].storage_elements;
    if ((status = aotk__check_alloc_poisoned(driver, &dev[outputs[i]], bytes, 0xff)) != AOTK_OK) goto done;
  }
  if ((status = aotk__check_alloc_poisoned(driver, &dev_lse, 4 * (size_t)s.lse_elements, 0xff)) != AOTK_OK) goto done;

  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = as_aotk_tensor(&placed[BWD_Q], dev[BWD_Q], c->dtype, 2, s.varlen);
  params.k = as_aotk_tensor(&placed[BWD_K], dev[BWD_K], c->dtype, 2, s.varlen);
  params.v = as_aotk_tensor(&placed[BWD_V], dev[BWD_V], c->dtype, 2, s.varlen);
  params.out = as_aotk_tensor(&placed[BWD_OUT], dev[BWD_OUT], c->dtype, 2, s.varlen);
  params.lse = lse_tensor(&s, dev_lse);
  params.softmax_scale = c->softmax_scale;
  params.causal = c->causal;
  params.dout = as_aotk_tensor(&placed[BWD_DOUT], dev[BWD_DOUT], c->dtype, 2, s.varlen);
  params.dq = as_aotk_tensor(&placed[BWD_DQ], dev[BWD_DQ], c->dtype, 2, s.varlen);
  params.dk = as_aotk_tensor(&placed[BWD_DK], dev[BWD_DK], c->dtype, 2, s.varlen);
  params.dv = as_aotk_tensor(&placed[BWD_DV], dev[BWD_DV], c->dtype, 2, s.varlen);
  params.deterministic = c->deterministic;
  if ((status = setup_features(driver, &s, f, &state, &fb, &params)) != AOTK_OK) goto done;
  if (f->sinks) {
    if ((status = aotk__check_alloc_poisoned(driver, &dev_dsinks, 4 * (size_t)HQ, 0xff)) != AOTK_OK) goto done;
    params.dsinks = aotk_tensor_1d((void *)(uintptr_t)dev_dsinks, AOTK_DTYPE_FLOAT32, HQ);
  }

  /* The forward (with its dropout mask: the reference's), then the backward, which takes no mask. */
  if ((status = settle(driver)) != AOTK_OK) goto done;
  if ((status = aotk_attn_fwd(&params, c->stream)) != AOTK_OK) goto done;
  if ((status = synchronize(driver, c->stream, "aotk_attn_fwd")) != AOTK_OK) goto done;
  if (dropout) {
    AOTK__CHECK_CU(driver->cuMemcpyDtoH(fb.mask, fb.mask_device, (size_t)s.mask_elements), "cuMemcpyDtoH");
    mask_comparison m;
    compare_mask(&s, fb.mask, f->rng_seed, f->rng_offset, f->dropout_p, &m);
    r->mask_mismatches = m.mismatches + m.clobbered;
    memset(&params.dropout_mask, 0, sizeof params.dropout_mask);
  }
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  if ((status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info)) != AOTK_OK) goto done;
  copy_info(&info, r->kernel_name, sizeof r->kernel_name, &r->from_ptx, &r->kernel_head_dim_qk, &r->kernel_head_dim_v,
            &r->features, &r->launches);
  r->workspace_bytes = info.workspace_bytes;
  /* Exactly the reported size (cuMemAlloc aligns to 256 bytes); at least one byte to allocate. */
  const size_t workspace_alloc = info.workspace_bytes > 0 ? info.workspace_bytes : 1;
  AOTK__CHECK_CU(driver->cuMemAlloc(&dev_workspace, workspace_alloc), "cuMemAlloc");

  for (int run = 0; run <= (c->repeats > 0 ? c->repeats : 0); run++) {
    if (run > 0) {
      /* Re-poisoned, so that a run that skips an element cannot pass on the previous run's value. */
      for (int g = 0; g < 3; g++) {
        AOTK__CHECK_CU(driver->cuMemsetD8(dev[gradients[g]], 0xff, 2 * (size_t)placed[gradients[g]].storage_elements),
                 "cuMemsetD8");
      }
      if (dev_dsinks) AOTK__CHECK_CU(driver->cuMemsetD8(dev_dsinks, 0xff, 4 * (size_t)HQ), "cuMemsetD8");
    }
    /* The workspace is documented as not read before it is written: poison it every time. */
    AOTK__CHECK_CU(driver->cuMemsetD8(dev_workspace, 0xff, workspace_alloc), "cuMemsetD8");
    if ((status = settle(driver)) != AOTK_OK) goto done;
    if ((status = aotk_attn_bwd(&params, (void *)(uintptr_t)dev_workspace, info.workspace_bytes, c->stream)) !=
        AOTK_OK) {
      goto done;
    }
    if ((status = synchronize(driver, c->stream, "aotk_attn_bwd")) != AOTK_OK) goto done;
    bool same = true;
    for (int g = 0; g < 3; g++) {
      size_t bytes = 2 * (size_t)placed[gradients[g]].storage_elements;
      uint16_t *into = run == 0 ? first_bits[g] : repeat_bits;
      AOTK__CHECK_CU(driver->cuMemcpyDtoH(into, dev[gradients[g]], bytes), "cuMemcpyDtoH");
      if (run > 0 && memcmp(into, first_bits[g], bytes) != 0) same = false;
    }
    if (dev_dsinks) {
      float *into = run == 0 ? dsinks_first : dsinks_repeat;
      AOTK__CHECK_CU(driver->cuMemcpyDtoH(into, dev_dsinks, 4 * (size_t)HQ), "cuMemcpyDtoH");
      if (run > 0 && memcmp(into, dsinks_first, 4 * (size_t)HQ) != 0) same = false;
    }
    if (!same) r->nondeterministic++;
  }

  for (int g = 0; g < 3; g++) {
    bool q_side = gradients[g] == BWD_DQ;
    if ((status = count_coverage(&placed[gradients[g]], &s, q_side, first_bits[g], c->dtype, &r->unwritten,
                                 &r->clobbered)) != AOTK_OK) {
      goto done;
    }
  }

  const double scale = resolved_scale(c->softmax_scale, DQK);
  const host_inputs in = {host[BWD_Q], host[BWD_K], host[BWD_V], host[BWD_DOUT], &placed[BWD_Q], &placed[BWD_K],
                          &placed[BWD_V], &placed[BWD_DOUT], fb.alibi, fb.sinks, dropout ? fb.mask : NULL};
  for (int64_t b = 0; b < s.seqs; b++) reference_problem(&problems[b], &s, b, c->causal, scale, f, &in);
  const int64_t dq_count = choose_items(&s, true, c->rows_per_head, scratch, &state, dq_items);
  const int64_t kv_count = choose_items(&s, false, c->rows_per_head, scratch, &state, kv_items);
  bwd_reference_job job = {problems, &s, c->dtype, placed, {first_bits[0], first_bits[1], first_bits[2]},
                           lse_f64, delta_f64, lse_lowp, delta_lowp, dq_items, kv_items, dq_count, kv_count,
                           0, 0, 0, per_worker};
  run_bwd_reference_phase(&job, 0, stats_count, threads, workers, handles);
  run_bwd_reference_phase(&job, 1, dq_count + kv_count, threads, workers, handles);

  for (int w = 0; w < threads; w++) {
    const bwd_comparison *pw = &per_worker[w];
    if (pw->out_of_memory) {
      status = aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
      goto done;
    }
    for (int g = 0; g < AOTK__CHECK_GRADIENTS; g++) {
      if (!(pw->max_error[g] <= r->max_error[g])) r->max_error[g] = pw->max_error[g];
      if (!(pw->lowp_max_error[g] <= r->lowp_max_error[g])) r->lowp_max_error[g] = pw->lowp_max_error[g];
      if (pw->max_magnitude[g] > r->max_magnitude[g]) r->max_magnitude[g] = pw->max_magnitude[g];
    }
    r->elements_checked += pw->elements_checked;
    r->bad_empty_rows += pw->bad_empty_rows;
  }
  /* dsinks: each head's sum over every sequence of its rows' shares, from phase 0's statistics, with
   * its own bound (see AOTK__CHECK_DSINK_SIGMAS); the head nearest its bound is reported. */
  double dsink_fraction = 0.0;
  if (f->sinks) {
    for (int64_t h = 0; h < HQ; h++) {
      double exact = 0.0, spread = 0.0;
      float lowp = 0.0f;
      for (int64_t b = 0; b < s.seqs; b++) {
        const int64_t at = s.stats_offset[b] + h * s.len_q[b];
        exact += aotk__attn_reference_bwd_dsink_f64(&problems[b], h, lse_f64 + at, delta_f64 + at);
        lowp += aotk__attn_reference_bwd_dsink_lowp(&problems[b], h, lse_lowp + at, delta_lowp + at);
        for (int64_t row = 0; row < s.len_q[b]; row++) {
          if (isinf(lse_f64[at + row])) continue;
          double term = exp((double)fb.sinks[h] - lse_f64[at + row]) * ((double)delta_lowp[at + row] - delta_f64[at + row]);
          spread += term * term;
        }
      }
      const double got = (double)dsinks_first[h];
      /* A NaN (the poison) is an unwritten element, and an infinite error. */
      if (isnan(got)) r->unwritten++;
      double error = isnan(got) ? INFINITY : fabs(got - exact), lowp_error = fabs((double)lowp - exact);
      double bound = 2.0 * lowp_error + AOTK__CHECK_DSINK_SIGMAS * sqrt(spread) +
                     AOTK__CHECK_BWD_ERROR_FLOOR * (fabs(exact) > 1.0 ? fabs(exact) : 1.0);
      double fraction = error / bound;
      if (h == 0 || !(fraction <= dsink_fraction)) {
        dsink_fraction = fraction;
        r->max_error[AOTK__CHECK_DSINKS] = error;
        r->lowp_max_error[AOTK__CHECK_DSINKS] = lowp_error;
        r->bound[AOTK__CHECK_DSINKS] = bound;
      }
      if (fabs(exact) > r->max_magnitude[AOTK__CHECK_DSINKS]) r->max_magnitude[AOTK__CHECK_DSINKS] = fabs(exact);
      r->elements_checked++;
    }
  }
  bool numbers_ok = true;
  const int compared = f->sinks ? AOTK__CHECK_GRADIENTS : AOTK__CHECK_DSINKS;
  for (int g = 0; g < compared; g++) {
    double fraction;
    if (g == AOTK__CHECK_DSINKS) {
      fraction = dsink_fraction;
    } else {
      double magnitude_scale = r->max_magnitude[g] > 1.0 ? r->max_magnitude[g] : 1.0;
      r->bound[g] = 2.0 * r->lowp_max_error[g] + AOTK__CHECK_BWD_ERROR_FLOOR * magnitude_scale;
      fraction = r->max_error[g] / r->bound[g];
    }
    if (!(fraction <= r->worst_fraction)) r->worst_fraction = isnan(fraction) ? INFINITY : fraction;
    if (!(fraction <= 1.0)) numbers_ok = false;
  }
  r->passed = numbers_ok && r->unwritten == 0 && r->clobbered == 0 && r->bad_empty_rows == 0 &&
              r->nondeterministic == 0 && r->mask_mismatches == 0;
  int used = snprintf(r->detail, sizeof r->detail, "err/bound");
  for (int g = 0; g < compared && used > 0 && (size_t)used < sizeof r->detail; g++) {
    used += snprintf(r->detail + used, sizeof r->detail - (size_t)used, " %s %.3g/%.3g", gradient_names[g],
                     r->max_error[g], r->bound[g]);
  }
  for (int g = 0; g < compared && used > 0 && (size_t)used < sizeof r->detail; g++) {
    used += snprintf(r->detail + used, sizeof r->detail - (size_t)used, "%s%.3g", g == 0 ? " (same-precision " : " ",
                     r->lowp_max_error[g]);
  }
  for (int g = 0; g < compared && used > 0 && (size_t)used < sizeof r->detail; g++) {
    used += snprintf(r->detail + used, sizeof r->detail - (size_t)used, "%s%.3g", g == 0 ? ", max |ref| " : " ",
                     r->max_magnitude[g]);
  }
  if (used > 0 && (size_t)used < sizeof r->detail) {
    snprintf(r->detail + used, sizeof r->detail - (size_t)used,
             "; bound = 2 x same-precision + %.0e x max(1, max |ref|), dsinks + its spread), elements %lld, unwritten %lld, clobbered %lld, "
             "bad empty rows %lld, nondeterministic runs %lld of %d, mask mismatches %lld",
             AOTK__CHECK_BWD_ERROR_FLOOR, (long long)r->elements_checked, (long long)r->unwritten,
             (long long)r->clobbered, (long long)r->bad_empty_rows, (long long)r->nondeterministic,
             c->repeats > 0 ? c->repeats : 0, (long long)r->mask_mismatches);
  }

done:
  for (int t = 0; t < BWD_TENSORS; t++) {
    if (dev[t]) driver->cuMemFree(dev[t]);
    free(host[t]);
  }
  if (dev_lse) driver->cuMemFree(dev_lse);
  if (dev_workspace) driver->cuMemFree(dev_workspace);
  if (dev_dsinks) driver->cuMemFree(dev_dsinks);
  free_features(driver, &fb);
  for (int g = 0; g < 3; g++) free(first_bits[g]);
  free(bits);
  free(repeat_bits);
  free(dsinks_first);
  free(dsinks_repeat);
  free(lse_f64);
  free(delta_f64);
  free(lse_lowp);
  free(delta_lowp);
  free(dq_items);
  free(kv_items);
  free(scratch);
  free(problems);
  free(per_worker);
  free(workers);
  free(handles);
  return status;
}
