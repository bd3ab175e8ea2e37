/* One GPU correctness case of selection attention: see aotk_sel_check.h. */
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
#include "aotk_sel_check.h"
#include "aotk_sel_reference.h"

/* The reference costs ~2 us per (token, query head, selected key) at head dim 128, forward and
 * backward, both precisions: ~1.5 s on one core for 300 tokens x 16 heads x ~150 keys. Spread over the
 * machine's cores, up to this many threads. */
#define SEL_CHECK_MAX_THREADS 64

/* At least one element, so that an empty array still allocates (and NULL means out of memory). */

/* --- the case's shape ------------------------------------------------------------------------- */

enum { T_Q, T_K, T_V, T_DOUT, T_OUT, T_DQ, T_DK, T_DV, TENSORS };
static const char *const result_names[AOTK__SEL_CHECK_TENSORS] = {"out", "dq", "dk", "dv"};

typedef struct sel_shape {
  bool varlen;
  int64_t num_seqs; /* the reference's: 1 for a single sequence */
  int64_t cu_q[AOTK__SEL_CHECK_MAX_SEQS + 1], cu_k[AOTK__SEL_CHECK_MAX_SEQS + 1];
  int64_t total_q, total_k, rows_q, rows_k; /* rows: the tensors' first dimension (total + unused rows) */
  int64_t longest_q, longest_k, most_blocks;
  int64_t heads_q, heads_kv, slots;
  int64_t rows[TENSORS], heads[TENSORS], dims[TENSORS], used_rows[TENSORS];
} sel_shape;

static aotk_status resolve_shape(const aotk__sel_check_case *c, sel_shape *s) {
  memset(s, 0, sizeof *s);
  const bool dtype_ok = c->dtype == AOTK_DTYPE_BFLOAT16 || c->dtype == AOTK_DTYPE_FLOAT16;
  if (!dtype_ok || c->head_dim_qk < 1 || c->head_dim_v < 1 || c->block_size < 1 || c->heads_kv < 1 || c->group < 1 ||
      c->slots < 1 || c->num_seqs < 0 || c->num_seqs > AOTK__SEL_CHECK_MAX_SEQS) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE,
                      "selection check: a case the runner cannot describe (dtype %d, head dims %lld/%lld, block size "
                      "%lld, heads %lld x %lld, %lld slots, %d sequences, at most %d)",
                      (int)c->dtype, (long long)c->head_dim_qk, (long long)c->head_dim_v, (long long)c->block_size,
                      (long long)c->heads_kv, (long long)c->group, (long long)c->slots, c->num_seqs,
                      AOTK__SEL_CHECK_MAX_SEQS);
  }
  s->varlen = c->num_seqs > 0;
  s->num_seqs = s->varlen ? c->num_seqs : 1;
  for (int64_t n = 0; n < s->num_seqs; n++) {
    const int64_t len_q = c->seqlens_q[n], len_k = c->seqlens_k[n];
    if (len_q < 0 || len_k < 0 || (!s->varlen && (len_q < 1 || len_k < 1))) {
      return aotk__fail(AOTK_ERROR_INVALID_VALUE, "selection check: sequence %lld has lengths %lld/%lld", (long long)n,
                        (long long)len_q, (long long)len_k);
    }
    s->cu_q[n + 1] = s->cu_q[n] + len_q;
    s->cu_k[n + 1] = s->cu_k[n] + len_k;
    if (len_q > s->longest_q) s->longest_q = len_q;
    if (len_k > s->longest_k) s->longest_k = len_k;
  }
  s->total_q = s->cu_q[s->num_seqs];
  s->total_k = s->cu_k[s->num_seqs];
  if (s->total_q < 1 || s->total_k < 1) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "selection check: %lld query rows and %lld keys in all",
                      (long long)s->total_q, (long long)s->total_k);
  }
  s->most_blocks = (s->longest_k + c->block_size - 1) / c->block_size;
  if (c->every_block && c->slots < s->most_blocks) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE,
                      "selection check: every block of %lld needs at least as many slots, not %lld",
                      (long long)s->most_blocks, (long long)c->slots);
  }
  const int64_t tail = s->varlen ? AOTK__CHECK_VARLEN_TAIL_ROWS : 0;
  s->rows_q = s->total_q + tail;
  s->rows_k = s->total_k + tail;
  s->heads_kv = c->heads_kv;
  s->heads_q = c->heads_kv * c->group;
  s->slots = c->slots;
  for (int t = 0; t < TENSORS; t++) {
    const bool q_side = t == T_Q || t == T_DOUT || t == T_OUT || t == T_DQ;
    const bool qk_dim = t == T_Q || t == T_K || t == T_DQ || t == T_DK;
    s->rows[t] = q_side ? s->rows_q : s->rows_k;
    s->used_rows[t] = q_side ? s->total_q : s->total_k;
    s->heads[t] = q_side ? s->heads_q : s->heads_kv;
    s->dims[t] = qk_dim ? c->head_dim_qk : c->head_dim_v;
  }
  return AOTK_OK;
}

static int64_t tensor_elements(const sel_shape *s, int t) { return s->rows[t] * s->heads[t] * s->dims[t]; }
static int64_t used_elements(const sel_shape *s, int t) { return s->used_rows[t] * s->heads[t] * s->dims[t]; }

/* --- the selection ---------------------------------------------------------------------------- */

/* An id the contract ignores: -1 mostly, other negative ids, ids at or past the last block, or a
 * block after the diagonal (*next_future hands those out, distinct, from the first future block). */
static int32_t ignored_id(uint64_t *state, int64_t num_blocks, int64_t *next_future) {
  switch (aotk__random_int(state, 0, 9)) {
    case 0:
      return -2;
    case 1:
      return INT32_MIN;
    case 2:
      return INT32_MAX;
    case 3:
      return (int32_t)num_blocks;
    case 4:
    case 5:
      if (*next_future < num_blocks) return (int32_t)(*next_future)++;
      return -1;
    default:
      return -1;
  }
}

/* For the slots past a row's count: ids that would count if they were read. */
static int32_t unread_id(uint64_t *state, int64_t available, int64_t num_blocks) {
  if (available > 0) return (int32_t)aotk__random_int(state, 0, available - 1);
  return num_blocks > 0 ? (int32_t)aotk__random_int(state, 0, num_blocks - 1) : 0;
}

/* Fills idx [rows_q, heads_kv, slots] and cnt [rows_q, heads_kv] (NULL: no block_cnt) as the header
 * describes. `pool` has room for most_blocks + 1 ids. */
static void fill_selection(const aotk__sel_check_case *c, const sel_shape *s, const aotk__sel_reference_problem *p,
                           int32_t *idx, int32_t *cnt, int32_t *pool, uint64_t *state) {
  const int64_t H = s->heads_kv, S = s->slots, BS = c->block_size;
  for (int64_t token = 0; token < s->rows_q; token++) {
    if (token >= s->total_q) { /* unused rows: never read */
      for (int64_t h = 0; h < H; h++) {
        for (int64_t slot = 0; slot < S; slot++) idx[(token * H + h) * S + slot] = (int32_t)aotk__random_int(state, -3, 50);
        if (cnt != NULL) cnt[token * H + h] = (int32_t)aotk__random_int(state, -2, S + 2);
      }
      continue;
    }
    const aotk__sel_reference_token where = aotk__sel_reference_locate(p, token);
    const int64_t available = where.position >= 0 ? where.position / BS + 1 : 0;
    for (int64_t h = 0; h < H; h++) {
      int32_t *row = idx + (token * H + h) * S;
      if (c->every_block) {
        for (int64_t slot = 0; slot < S; slot++) row[slot] = slot < available ? (int32_t)slot : -1;
        aotk__random_shuffle_int32(row, available, state);
        continue;
      }
      int64_t count = S, next_future = available;
      if (cnt != NULL) count = aotk__random_int(state, 0, 3) == 0 ? aotk__random_int(state, 0, S) : S - aotk__random_int(state, 0, S / 4);
      const int64_t most = available < count ? available : count;
      /* One row in eight selects nothing (its counted slots hold ignored ids only). */
      const int64_t chosen = most > 0 && aotk__random_int(state, 0, 7) != 0 ? aotk__random_int(state, (most + 1) / 2, most) : 0;
      for (int64_t b = 0; b < available; b++) pool[b] = (int32_t)b;
      for (int64_t slot = 0; slot < chosen; slot++) { /* a partial shuffle: `chosen` distinct blocks */
        int64_t j = aotk__random_int(state, slot, available - 1);
        int32_t swap = pool[slot];
        pool[slot] = pool[j];
        pool[j] = swap;
        row[slot] = pool[slot];
      }
      for (int64_t slot = chosen; slot < count; slot++) row[slot] = ignored_id(state, where.num_blocks, &next_future);
      aotk__random_shuffle_int32(row, count, state);
      for (int64_t slot = count; slot < S; slot++) row[slot] = unread_id(state, available, where.num_blocks);
      if (cnt != NULL) {
        int32_t stored = (int32_t)count; /* counts outside [0, slots] clamp */
        if (count == 0 && aotk__random_int(state, 0, 1)) stored = -3;
        if (count == S && aotk__random_int(state, 0, 1)) stored = (int32_t)(S + 5);
        cnt[token * H + h] = stored;
      }
    }
  }
}

/* --- the reference, on every core ------------------------------------------------------------- */

typedef struct sel_reference_job {
  const aotk__sel_reference_problem *p;
  int dtype;
  double *ref[AOTK__SEL_CHECK_TENSORS], *ref_lse;
  float *lowp[AOTK__SEL_CHECK_TENSORS], *lowp_lse;
  int64_t *hits;
  const int64_t (*blocks)[3]; /* phase 1's items: (sequence, kv head, block) */
  int phase;                  /* 0: out, lse, dq of (token, query head) items; 1: dk, dv of blocks */
  int64_t item_count;
  _Atomic int64_t next_item;
} sel_reference_job;

static void *sel_reference_worker(void *argument) {
  sel_reference_job *job = argument;
  const aotk__sel_reference_problem *p = job->p;
  for (;;) {
    const int64_t item = atomic_fetch_add(&job->next_item, 1);
    if (item >= job->item_count) break;
    if (job->phase == 0) {
      const int64_t token = item / p->heads_q, head = item % p->heads_q;
      aotk__sel_reference_fwd_row_f64(p, token, head, job->ref[AOTK__SEL_CHECK_OUT] + item * p->head_dim_v,
                                      &job->ref_lse[item]);
      aotk__sel_reference_fwd_row_lowp(p, job->dtype, token, head,
                                       job->lowp[AOTK__SEL_CHECK_OUT] + item * p->head_dim_v, &job->lowp_lse[item]);
      /* dq of this row reads out and lse of this row only: just written. */
      aotk__sel_reference_dq_row_f64(p, token, head, job->ref[AOTK__SEL_CHECK_OUT], job->ref_lse,
                                     job->ref[AOTK__SEL_CHECK_DQ] + item * p->head_dim_qk);
      aotk__sel_reference_dq_row_lowp(p, job->dtype, token, head, job->lowp[AOTK__SEL_CHECK_OUT], job->lowp_lse,
                                      job->lowp[AOTK__SEL_CHECK_DQ] + item * p->head_dim_qk);
    } else {
      const int64_t *b = job->blocks[item];
      aotk__sel_reference_dkdv_block_f64(p, b[0], b[1], b[2], job->ref[AOTK__SEL_CHECK_OUT], job->ref_lse,
                                         job->ref[AOTK__SEL_CHECK_DK], job->ref[AOTK__SEL_CHECK_DV], job->hits);
      aotk__sel_reference_dkdv_block_lowp(p, job->dtype, b[0], b[1], b[2], job->lowp[AOTK__SEL_CHECK_OUT],
                                          job->lowp_lse, job->lowp[AOTK__SEL_CHECK_DK], job->lowp[AOTK__SEL_CHECK_DV]);
    }
  }
  return NULL;
}

/* Runs one phase on up to SEL_CHECK_MAX_THREADS threads, the calling thread among them. A thread that
 * cannot be started leaves its share to the others. */
static void run_reference_phase(sel_reference_job *job, int phase, int64_t item_count) {
  job->phase = phase;
  job->item_count = item_count;
  atomic_store(&job->next_item, 0);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int threads = online < 1 ? 1 : online > SEL_CHECK_MAX_THREADS ? SEL_CHECK_MAX_THREADS : (int)online;
  pthread_t handles[SEL_CHECK_MAX_THREADS];
  bool started[SEL_CHECK_MAX_THREADS] = {false};
  for (int i = 1; i < threads; i++) started[i] = pthread_create(&handles[i], NULL, sel_reference_worker, job) == 0;
  sel_reference_worker(job);
  for (int i = 1; i < threads; i++) {
    if (started[i]) pthread_join(handles[i], NULL);
  }
}

/* --- comparing -------------------------------------------------------------------------------- */


/* The largest error of one output tensor (used elements only; poison is an infinite error) and its
 * poison left. */
static double max_error_of(const uint16_t *bits, const double *exact, int64_t count, aotk_dtype dtype,
                           int64_t *unwritten) {
  double max_error = 0.0;
  for (int64_t e = 0; e < count; e++) {
    if (bits[e] == 0xffff) ++*unwritten;
    double error = fabs(aotk__dtype_value(bits[e], dtype) - exact[e]);
    if (!(error <= max_error)) max_error = isnan(error) ? INFINITY : error;
  }
  return max_error;
}

/* The largest |lse - reference| in units of its tolerance over the rows with keys; rows without keys
 * must hold -inf exactly (else *bad grows), and the poison counts as unwritten. lse(token, head) is at
 * lse[token * token_stride + head * head_stride]. */
static double lse_error_of(const float *lse, int64_t token_stride, int64_t head_stride, const double *exact,
                           int64_t total_q, int64_t heads_q, int64_t *unwritten, int64_t *bad) {
  double max_error = 0.0;
  for (int64_t token = 0; token < total_q; token++) {
    for (int64_t h = 0; h < heads_q; h++) {
      const float got = lse[token * token_stride + h * head_stride];
      const double reference = exact[token * heads_q + h];
      uint32_t got_bits;
      memcpy(&got_bits, &got, sizeof got_bits);
      if (got_bits == 0xffffffffu) ++*unwritten;
      if (isinf(reference)) {
        if (!(isinf(got) && got < 0)) ++*bad;
        continue;
      }
      double error = fabs((double)got - reference) / aotk__check_lse_tolerance(reference);
      if (!(error <= max_error)) max_error = isnan(error) ? INFINITY : error;
    }
  }
  return max_error;
}

/* Rows that see no key (reference lse -inf): out and dq exactly 0. */
static int64_t bad_empty_rows_of(const uint16_t *out_bits, const uint16_t *dq_bits, const double *ref_lse, int64_t rows,
                                 int64_t dim_v, int64_t dim_qk, aotk_dtype dtype, int64_t *empty_rows) {
  int64_t bad = 0;
  for (int64_t e = 0; e < rows; e++) {
    if (!isinf(ref_lse[e])) continue;
    if (empty_rows != NULL) ++*empty_rows;
    bool zero = true;
    for (int64_t d = 0; d < dim_v; d++) zero = zero && aotk__dtype_value(out_bits[e * dim_v + d], dtype) == 0.0;
    for (int64_t d = 0; d < dim_qk; d++) zero = zero && aotk__dtype_value(dq_bits[e * dim_qk + d], dtype) == 0.0;
    bad += !zero;
  }
  return bad;
}

/* Elements past the used rows (the varlen layout's unused rows) that no longer hold the poison. */
static int64_t clobbered_of(const uint16_t *bits, int64_t used, int64_t count) {
  int64_t clobbered = 0;
  for (int64_t e = used; e < count; e++) clobbered += bits[e] != 0xffff;
  return clobbered;
}

/* --- the case --------------------------------------------------------------------------------- */

enum { DENSE_OUT, DENSE_DQ, DENSE_DK, DENSE_DV, DENSE_TENSORS };

aotk_status aotk__check_sel(const aotk__driver *driver, const aotk__sel_check_case *c, aotk__sel_check_result *r) {
  memset(r, 0, sizeof *r);
  sel_shape s;
  aotk_status status = resolve_shape(c, &s);
  if (status != AOTK_OK) return status;
  uint64_t state = c->seed;
  const aotk_dtype dtype = c->dtype;
  const int64_t HQ = s.heads_q, HKV = s.heads_kv, S = s.slots, DQK = c->head_dim_qk, DV = c->head_dim_v;

  uint16_t *bits[TENSORS] = {NULL}, *dense_bits[DENSE_TENSORS] = {NULL};
  double *values[T_OUT] = {NULL}, *ref[AOTK__SEL_CHECK_TENSORS] = {NULL}, *ref_lse = NULL;
  float *lowp[AOTK__SEL_CHECK_TENSORS] = {NULL}, *lowp_lse = NULL, *lse_host = NULL, *dense_lse_host = NULL;
  int32_t *idx = NULL, *cnt = NULL, *pool = NULL;
  int64_t *hits = NULL, (*blocks)[3] = NULL;
  CUdeviceptr dev[TENSORS] = {0}, dense_dev[DENSE_TENSORS] = {0};
  CUdeviceptr dev_lse = 0, dev_idx = 0, dev_cnt = 0, dev_cu_q = 0, dev_cu_k = 0, dev_workspace = 0;
  CUdeviceptr dense_lse = 0, dense_workspace = 0;

  int64_t block_items = 0;
  for (int64_t n = 0; n < s.num_seqs; n++) {
    block_items += HKV * ((s.cu_k[n + 1] - s.cu_k[n] + c->block_size - 1) / c->block_size);
  }
  bool allocated = true;
  for (int t = 0; t < TENSORS; t++) {
    bits[t] = aotk__check_host_array(tensor_elements(&s, t), sizeof(uint16_t));
    allocated = allocated && bits[t] != NULL;
    if (t < T_OUT) {
      values[t] = aotk__check_host_array(tensor_elements(&s, t), sizeof(double));
      allocated = allocated && values[t] != NULL;
    } else {
      ref[t - T_OUT] = aotk__check_host_array(used_elements(&s, t), sizeof(double));
      lowp[t - T_OUT] = aotk__check_host_array(used_elements(&s, t), sizeof(float));
      allocated = allocated && ref[t - T_OUT] != NULL && lowp[t - T_OUT] != NULL;
    }
  }
  if (c->every_block) {
    for (int t = 0; t < DENSE_TENSORS; t++) {
      dense_bits[t] = aotk__check_host_array(tensor_elements(&s, T_OUT + t), sizeof(uint16_t));
      allocated = allocated && dense_bits[t] != NULL;
    }
    dense_lse_host = aotk__check_host_array(HQ * s.rows_q, sizeof(float));
    allocated = allocated && dense_lse_host != NULL;
  }
  ref_lse = aotk__check_host_array(s.total_q * HQ, sizeof(double));
  lowp_lse = aotk__check_host_array(s.total_q * HQ, sizeof(float));
  lse_host = aotk__check_host_array(s.rows_q * HQ, sizeof(float));
  idx = aotk__check_host_array(s.rows_q * HKV * S, sizeof(int32_t));
  if (c->with_count && !c->every_block) cnt = aotk__check_host_array(s.rows_q * HKV, sizeof(int32_t));
  pool = aotk__check_host_array(s.most_blocks + 1, sizeof(int32_t));
  hits = aotk__check_host_array(s.total_k * HKV, sizeof(int64_t));
  blocks = aotk__check_host_array(block_items, sizeof *blocks);
  if (!allocated || !ref_lse || !lowp_lse || !lse_host || !idx || (c->with_count && !c->every_block && !cnt) || !pool ||
      !hits || !blocks) {
    status = aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "selection check: host allocation failed");
    goto done;
  }

  /* Inputs: every element random, the unused rows too (they must not matter). */
  for (int t = T_Q; t < T_OUT; t++) {
    for (int64_t e = 0; e < tensor_elements(&s, t); e++) {
      bits[t][e] = aotk__dtype_bits(aotk__random_normal(&state), dtype);
      values[t][e] = aotk__dtype_value(bits[t][e], dtype);
    }
    if ((status = aotk__check_upload(driver, &dev[t], bits[t], 2 * (size_t)tensor_elements(&s, t))) != AOTK_OK) goto done;
  }
  for (int t = T_OUT; t < TENSORS; t++) {
    if ((status = aotk__check_alloc_poisoned(driver, &dev[t], 2 * (size_t)tensor_elements(&s, t), 0xff)) != AOTK_OK) goto done;
  }
  if ((status = aotk__check_alloc_poisoned(driver, &dev_lse, 4 * (size_t)(s.rows_q * HQ), 0xff)) != AOTK_OK) goto done;

  /* The reference problem: contiguous float64 copies, block_idx and block_cnt the host arrays (their
   * first total_q rows). */
  aotk__sel_reference_problem problem;
  memset(&problem, 0, sizeof problem);
  problem.num_seqs = s.num_seqs;
  problem.cu_seqlens_q = s.cu_q;
  problem.cu_seqlens_k = s.cu_k;
  problem.heads_q = HQ;
  problem.heads_kv = HKV;
  problem.head_dim_qk = DQK;
  problem.head_dim_v = DV;
  problem.block_size = c->block_size;
  problem.slots = S;
  problem.softmax_scale = c->softmax_scale != 0.0f ? (double)c->softmax_scale : 1.0 / sqrt((double)DQK);
  problem.q = values[T_Q];
  problem.k = values[T_K];
  problem.v = values[T_V];
  problem.dout = values[T_DOUT];
  int64_t *const strides[T_OUT] = {problem.q_strides, problem.k_strides, problem.v_strides, problem.dout_strides};
  for (int t = T_Q; t < T_OUT; t++) {
    strides[t][0] = s.heads[t] * s.dims[t];
    strides[t][1] = s.dims[t];
  }
  problem.block_idx = idx;
  problem.block_cnt = cnt;
  fill_selection(c, &s, &problem, idx, cnt, pool, &state);

  if ((status = aotk__check_upload(driver, &dev_idx, idx, 4 * (size_t)(s.rows_q * HKV * S))) != AOTK_OK) goto done;
  if (cnt != NULL && (status = aotk__check_upload(driver, &dev_cnt, cnt, 4 * (size_t)(s.rows_q * HKV))) != AOTK_OK) goto done;
  /* cu_seqlens always go to the device: the dense attention of the every-block case takes the varlen
   * layout even for one sequence. */
  int32_t cu32[2][AOTK__SEL_CHECK_MAX_SEQS + 1];
  for (int64_t n = 0; n <= s.num_seqs; n++) {
    cu32[0][n] = (int32_t)s.cu_q[n];
    cu32[1][n] = (int32_t)s.cu_k[n];
  }
  const size_t cu_bytes = 4 * (size_t)(s.num_seqs + 1);
  if ((status = aotk__check_upload(driver, &dev_cu_q, cu32[0], cu_bytes)) != AOTK_OK) goto done;
  if ((status = aotk__check_upload(driver, &dev_cu_k, cu32[1], cu_bytes)) != AOTK_OK) goto done;

  aotk_sel_params params = AOTK_SEL_PARAMS_INIT;
  aotk_tensor *const tensors[TENSORS] = {&params.q,   &params.k,  &params.v,  &params.dout,
                                         &params.out, &params.dq, &params.dk, &params.dv};
  for (int t = 0; t < TENSORS; t++) {
    *tensors[t] = aotk_tensor_3d((void *)(uintptr_t)dev[t], dtype, s.rows[t], s.heads[t], s.dims[t]);
  }
  params.lse = aotk_tensor_2d((void *)(uintptr_t)dev_lse, AOTK_DTYPE_FLOAT32, s.rows_q, HQ);
  if (s.varlen) {
    params.cu_seqlens_q = aotk_tensor_1d((void *)(uintptr_t)dev_cu_q, AOTK_DTYPE_INT32, s.num_seqs + 1);
    params.cu_seqlens_k = aotk_tensor_1d((void *)(uintptr_t)dev_cu_k, AOTK_DTYPE_INT32, s.num_seqs + 1);
    params.max_seqlen_k = (int32_t)(s.longest_k > 1 ? s.longest_k : 1);
  }
  params.block_size = (int32_t)c->block_size;
  params.block_idx = aotk_tensor_3d((void *)(uintptr_t)dev_idx, AOTK_DTYPE_INT32, s.rows_q, HKV, S);
  if (cnt != NULL) params.block_cnt = aotk_tensor_2d((void *)(uintptr_t)dev_cnt, AOTK_DTYPE_INT32, s.rows_q, HKV);
  params.softmax_scale = c->softmax_scale;

  aotk_kernel_info fwd_info = AOTK_KERNEL_INFO_INIT, bwd_info = AOTK_KERNEL_INFO_INIT;
  if ((status = aotk_sel_query(AOTK_OP_SEL_FWD, &params, &fwd_info)) != AOTK_OK) goto done;
  if ((status = aotk_sel_query(AOTK_OP_SEL_BWD, &params, &bwd_info)) != AOTK_OK) goto done;
  snprintf(r->kernel_name, sizeof r->kernel_name, "%s + %s", fwd_info.kernel_name, bwd_info.kernel_name);
  r->workspace_bytes = bwd_info.workspace_bytes;
  /* Exactly the reported size (cuMemAlloc aligns to 256 bytes), poisoned: it is documented as not read
   * before it is written. */
  if ((status = aotk__check_alloc_poisoned(driver, &dev_workspace, bwd_info.workspace_bytes, 0xff)) != AOTK_OK) goto done;

  /* cuMemsetD8 and cuMemcpyHtoD run on the legacy stream, which a non-blocking stream does not wait for. */
  AOTK__CHECK_CU(driver->cuCtxSynchronize(), "cuCtxSynchronize");
  if ((status = aotk_sel_fwd(&params, c->stream)) != AOTK_OK) goto done;
  if ((status = aotk_sel_bwd(&params, (void *)(uintptr_t)dev_workspace, bwd_info.workspace_bytes, c->stream)) !=
      AOTK_OK) {
    goto done;
  }
  AOTK__CHECK_CU(driver->cuStreamSynchronize((CUstream)c->stream), "cuStreamSynchronize after aotk_sel_bwd");
  for (int t = T_OUT; t < TENSORS; t++) {
    AOTK__CHECK_CU(driver->cuMemcpyDtoH(bits[t], dev[t], 2 * (size_t)tensor_elements(&s, t)), "cuMemcpyDtoH");
  }
  AOTK__CHECK_CU(driver->cuMemcpyDtoH(lse_host, dev_lse, 4 * (size_t)(s.rows_q * HQ)), "cuMemcpyDtoH");

  /* The dense causal attention of the every-block case, on the same inputs and cu_seqlens. */
  if (c->every_block) {
    for (int t = 0; t < DENSE_TENSORS; t++) {
      if ((status = aotk__check_alloc_poisoned(driver, &dense_dev[t], 2 * (size_t)tensor_elements(&s, T_OUT + t), 0xff)) != AOTK_OK) {
        goto done;
      }
    }
    if ((status = aotk__check_alloc_poisoned(driver, &dense_lse, 4 * (size_t)(HQ * s.rows_q), 0xff)) != AOTK_OK) goto done;
    aotk_attn_params dense = AOTK_ATTN_PARAMS_INIT;
    dense.q = params.q;
    dense.k = params.k;
    dense.v = params.v;
    dense.dout = params.dout;
    aotk_tensor *const outputs[DENSE_TENSORS] = {&dense.out, &dense.dq, &dense.dk, &dense.dv};
    for (int t = 0; t < DENSE_TENSORS; t++) {
      *outputs[t] = aotk_tensor_3d((void *)(uintptr_t)dense_dev[t], dtype, s.rows[T_OUT + t], s.heads[T_OUT + t],
                                   s.dims[T_OUT + t]);
    }
    dense.lse = aotk_tensor_2d((void *)(uintptr_t)dense_lse, AOTK_DTYPE_FLOAT32, HQ, s.rows_q);
    dense.cu_seqlens_q = aotk_tensor_1d((void *)(uintptr_t)dev_cu_q, AOTK_DTYPE_INT32, s.num_seqs + 1);
    dense.cu_seqlens_k = aotk_tensor_1d((void *)(uintptr_t)dev_cu_k, AOTK_DTYPE_INT32, s.num_seqs + 1);
    dense.max_seqlen_q = (int32_t)(s.longest_q > 1 ? s.longest_q : 1);
    dense.max_seqlen_k = (int32_t)(s.longest_k > 1 ? s.longest_k : 1);
    dense.causal = 1;
    dense.causal_align = AOTK_ALIGN_BOTTOM_RIGHT;
    dense.deterministic = 1;
    dense.softmax_scale = c->softmax_scale;
    aotk_kernel_info dense_info = AOTK_KERNEL_INFO_INIT;
    if ((status = aotk_query(AOTK_OP_ATTN_BWD, &dense, &dense_info)) != AOTK_OK) goto done;
    if ((status = aotk__check_alloc_poisoned(driver, &dense_workspace, dense_info.workspace_bytes, 0xff)) != AOTK_OK) goto done;
    AOTK__CHECK_CU(driver->cuCtxSynchronize(), "cuCtxSynchronize");
    if ((status = aotk_attn_fwd(&dense, c->stream)) != AOTK_OK) goto done;
    if ((status = aotk_attn_bwd(&dense, (void *)(uintptr_t)dense_workspace, dense_info.workspace_bytes, c->stream)) !=
        AOTK_OK) {
      goto done;
    }
    AOTK__CHECK_CU(driver->cuStreamSynchronize((CUstream)c->stream), "cuStreamSynchronize after aotk_attn_bwd");
    for (int t = 0; t < DENSE_TENSORS; t++) {
      AOTK__CHECK_CU(driver->cuMemcpyDtoH(dense_bits[t], dense_dev[t], 2 * (size_t)tensor_elements(&s, T_OUT + t)),
               "cuMemcpyDtoH");
    }
    AOTK__CHECK_CU(driver->cuMemcpyDtoH(dense_lse_host, dense_lse, 4 * (size_t)(HQ * s.rows_q)), "cuMemcpyDtoH");
  }

  /* The reference: rows first (out, lse, dq), then blocks (dk, dv, and which keys were selected). */
  int64_t item = 0;
  for (int64_t n = 0; n < s.num_seqs; n++) {
    const int64_t num_blocks = aotk__sel_reference_sequence(&problem, n).num_blocks;
    for (int64_t h = 0; h < HKV; h++) {
      for (int64_t b = 0; b < num_blocks; b++) {
        blocks[item][0] = n;
        blocks[item][1] = h;
        blocks[item][2] = b;
        item++;
      }
    }
  }
  sel_reference_job job;
  memset(&job, 0, sizeof job);
  job.p = &problem;
  job.dtype = (int)dtype;
  for (int i = 0; i < AOTK__SEL_CHECK_TENSORS; i++) {
    job.ref[i] = ref[i];
    job.lowp[i] = lowp[i];
  }
  job.ref_lse = ref_lse;
  job.lowp_lse = lowp_lse;
  job.hits = hits;
  job.blocks = (const int64_t(*)[3])blocks;
  run_reference_phase(&job, 0, s.total_q * HQ);
  run_reference_phase(&job, 1, block_items);

  /* Every element of every output against the reference; the poison left; the unused rows untouched. */
  for (int i = 0; i < AOTK__SEL_CHECK_TENSORS; i++) {
    const int t = T_OUT + i;
    const int64_t used = used_elements(&s, t);
    r->max_error[i] = max_error_of(bits[t], ref[i], used, dtype, &r->unwritten);
    for (int64_t e = 0; e < used; e++) {
      double lowp_error = fabs((double)lowp[i][e] - ref[i][e]);
      if (!(lowp_error <= r->lowp_max_error[i])) r->lowp_max_error[i] = isnan(lowp_error) ? INFINITY : lowp_error;
      if (fabs(ref[i][e]) > r->max_magnitude[i]) r->max_magnitude[i] = fabs(ref[i][e]);
    }
    r->clobbered += clobbered_of(bits[t], used, tensor_elements(&s, t));
    const double floor = i == AOTK__SEL_CHECK_OUT
                             ? AOTK__CHECK_ERROR_FLOOR
                             : AOTK__CHECK_BWD_ERROR_FLOOR * (r->max_magnitude[i] > 1.0 ? r->max_magnitude[i] : 1.0);
    r->bound[i] = 2.0 * r->lowp_max_error[i] + floor;
    const double fraction = r->max_error[i] / r->bound[i];
    if (!(fraction <= r->worst_fraction)) r->worst_fraction = isnan(fraction) ? INFINITY : fraction;
  }
  r->lse_max_error = lse_error_of(lse_host, HQ, 1, ref_lse, s.total_q, HQ, &r->unwritten, &r->bad_empty_rows);
  for (int64_t e = s.total_q * HQ; e < s.rows_q * HQ; e++) {
    uint32_t lse_bits;
    memcpy(&lse_bits, &lse_host[e], sizeof lse_bits);
    r->clobbered += lse_bits != 0xffffffffu;
  }
  r->bad_empty_rows +=
      bad_empty_rows_of(bits[T_OUT], bits[T_DQ], ref_lse, s.total_q * HQ, DV, DQK, dtype, &r->empty_rows);
  for (int64_t e = 0; e < s.total_k * HKV; e++) {
    r->selected_keys += hits[e];
    if (hits[e] > 0) continue;
    r->unselected_keys++;
    bool zero = true;
    for (int64_t d = 0; d < DQK; d++) zero = zero && aotk__dtype_value(bits[T_DK][e * DQK + d], dtype) == 0.0;
    for (int64_t d = 0; d < DV; d++) zero = zero && aotk__dtype_value(bits[T_DV][e * DV + d], dtype) == 0.0;
    r->bad_unselected += !zero;
  }
  bool passed = r->worst_fraction <= 1.0 && r->lse_max_error <= 1.0 && r->bad_empty_rows == 0 &&
                r->bad_unselected == 0 && r->unwritten == 0 && r->clobbered == 0;

  /* The dense attention against the same reference and bounds (lse [heads_q, total_q]). */
  if (c->every_block) {
    r->dense_compared = 1;
    for (int i = 0; i < DENSE_TENSORS; i++) {
      r->dense_max_error[i] = max_error_of(dense_bits[i], ref[i], used_elements(&s, T_OUT + i), dtype, &r->dense_bad);
      const double fraction = r->dense_max_error[i] / r->bound[i];
      if (!(fraction <= r->dense_worst_fraction)) r->dense_worst_fraction = isnan(fraction) ? INFINITY : fraction;
    }
    r->dense_lse_max_error =
        lse_error_of(dense_lse_host, 1, s.rows_q, ref_lse, s.total_q, HQ, &r->dense_bad, &r->dense_bad);
    r->dense_bad +=
        bad_empty_rows_of(dense_bits[DENSE_OUT], dense_bits[DENSE_DQ], ref_lse, s.total_q * HQ, DV, DQK, dtype, NULL);
    passed = passed && r->dense_worst_fraction <= 1.0 && r->dense_lse_max_error <= 1.0 && r->dense_bad == 0;
  }
  r->passed = passed;

  int used = snprintf(r->detail, sizeof r->detail, "err/bound");
  for (int i = 0; i < AOTK__SEL_CHECK_TENSORS && used > 0 && (size_t)used < sizeof r->detail; i++) {
    used += snprintf(r->detail + used, sizeof r->detail - (size_t)used, " %s %.3g/%.3g", result_names[i],
                     r->max_error[i], r->bound[i]);
  }
  if (used > 0 && (size_t)used < sizeof r->detail) {
    used += snprintf(r->detail + used, sizeof r->detail - (size_t)used,
                     ", lse %.3g of tolerance; keys %lld, empty rows %lld (bad %lld), unselected keys %lld (bad %lld), "
                     "workspace %zu, unwritten %lld, clobbered %lld",
                     r->lse_max_error, (long long)r->selected_keys, (long long)r->empty_rows,
                     (long long)r->bad_empty_rows, (long long)r->unselected_keys, (long long)r->bad_unselected,
                     r->workspace_bytes, (long long)r->unwritten, (long long)r->clobbered);
  }
  if (c->every_block && used > 0 && (size_t)used < sizeof r->detail) {
    used += snprintf(r->detail + used, sizeof r->detail - (size_t)used, "; dense (same bounds): err");
    for (int i = 0; i < DENSE_TENSORS && used > 0 && (size_t)used < sizeof r->detail; i++) {
      used += snprintf(r->detail + used, sizeof r->detail - (size_t)used, " %s %.3g", result_names[i],
                       r->dense_max_error[i]);
    }
    if (used > 0 && (size_t)used < sizeof r->detail) {
      snprintf(r->detail + used, sizeof r->detail - (size_t)used, ", lse %.3g of tolerance, bad %lld",
               r->dense_lse_max_error, (long long)r->dense_bad);
    }
  }

done:
  for (int t = 0; t < TENSORS; t++) {
    if (dev[t]) driver->cuMemFree(dev[t]);
    free(bits[t]);
  }
  for (int t = 0; t < DENSE_TENSORS; t++) {
    if (dense_dev[t]) driver->cuMemFree(dense_dev[t]);
    free(dense_bits[t]);
  }
  const CUdeviceptr others[] = {dev_lse,  dev_idx,       dev_cnt,   dev_cu_q,
                                dev_cu_k, dev_workspace, dense_lse, dense_workspace};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    if (others[i]) driver->cuMemFree(others[i]);
  }
  for (int t = 0; t < T_OUT; t++) free(values[t]);
  for (int i = 0; i < AOTK__SEL_CHECK_TENSORS; i++) {
    free(ref[i]);
    free(lowp[i]);
  }
  free(ref_lse);
  free(lowp_lse);
  free(lse_host);
  free(dense_lse_host);
  free(idx);
  free(cnt);
  free(pool);
  free(hits);
  free(blocks);
  return status;
}
