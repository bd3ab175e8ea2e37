/*
 * What the selection-attention GPU tests (tests/test_sel_gpu.c, tests/test_sel_calls_gpu.c) share: a case
 * (sel_case), its tensors on the device in one of three layouts (own buffers, padded strides, q/k/v as
 * slices of one packed buffer), poisoned; the block selection it draws (random distinct blocks mixed
 * with ignored ids, NSA's fixed picks, hot blocks, sparse rows); and the calls: forward and backward
 * on poisoned outputs, with what each wrote checked. Static functions, for the one file of a binary.
 */
#ifndef SEL_GPU_CASES_H
#define SEL_GPU_CASES_H

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aotk.h"
#include "aotk_check.h"
#include "aotk_driver.h"
#include "aotk_half.h"
#include "aotk_random.h"
#include "aotk_test_harness.h"
#include "aotk_gpu_test.h"
#include "aotk_sel_reference.h"

enum { MAX_SEQS = 8, MAX_THREADS = 64 };
#define TAIL_ROWS AOTK__CHECK_VARLEN_TAIL_ROWS

/* ---- cases ------------------------------------------------------------------------------------- */

typedef enum selection_kind {
  SELECT_RANDOM,      /* distinct blocks <= p / block_size mixed with ignored ids, shuffled */
  SELECT_EVERY_BLOCK, /* every block 0 .. p / block_size, shuffled: dense causal attention */
  SELECT_DUPLICATES,  /* SELECT_RANDOM with some blocks listed twice (counted twice: the header's math) */
  SELECT_NOTHING,     /* no row selects anything */
  SELECT_HOT,         /* NSA's fixed picks: block 0 and the two local blocks in every row, then distinct random
                         causal blocks: block 0's token list is every token (the dK/dV split) */
  SELECT_SPARSE,      /* each slot a distinct causal block with probability 1/4, else an ignored id: rows
                         mostly empty (the forward and dQ loop over the valid slots only) */
} selection_kind;

typedef enum layout_kind {
  LAYOUT_CONTIGUOUS, /* each tensor packed in its own buffer */
  LAYOUT_PADDED,     /* head rows padded by 16 elements, token rows by 16 more, 16 elements before */
  LAYOUT_QKV,        /* q, k, v slices of one [total, heads_q*dqk + heads_kv*(dqk + dv)] buffer, dq, dk,
                        dv of another; out and dout padded (needs every len_q == len_k) */
} layout_kind;

static const char *const layout_names[] = {"contiguous", "padded", "qkv-packed"};
static const char *const selection_names[] = {"random", "every-block", "duplicates", "nothing", "hot", "sparse"};

typedef struct sel_case {
  aotk_dtype dtype;
  int64_t head_dim_qk, head_dim_v, block_size, slots, heads_kv, group;
  int varlen; /* 0: one sequence, no cu_seqlens */
  int num_seqs;
  int64_t len_q[MAX_SEQS], len_k[MAX_SEQS];
  int with_count;
  selection_kind selection;
  int empty_percent; /* (row, kv head) pairs made empty on purpose, in percent */
  layout_kind layout;
  float softmax_scale;
  int64_t max_seqlen_slack;
  uint64_t seed;
  char name[320];
} sel_case;

/* ---- one case's buffers ------------------------------------------------------------------------ */

enum { T_Q, T_K, T_V, T_DOUT, T_OUT, T_DQ, T_DK, T_DV, TENSORS };
static const char *const tensor_names[TENSORS] = {"q", "k", "v", "dout", "out", "dq", "dk", "dv"};
/* The compared outputs, in this order in a results struct. */
enum { R_OUT, R_DQ, R_DK, R_DV, RESULTS };
static const int result_tensor[RESULTS] = {T_OUT, T_DQ, T_DK, T_DV};

/* A [rows, heads, dim] tensor inside a storage. */
typedef struct view {
  int storage;
  int64_t offset, token_stride, head_stride;
  int64_t rows, heads, dim;
} view;

typedef struct storage {
  int64_t elements;
  uint16_t *host;
  CUdeviceptr device;
  int is_output;
} storage;

/* One run's outputs, unpacked to contiguous [total, heads, dim] float64 (the reference's layout), and
 * lse [total_q, heads_q]. */
typedef struct results {
  double *values[RESULTS];
  double *lse;
} results;

enum { RUN_FWD = 1, RUN_BWD = 2 };

typedef struct sel_run {
  const sel_case *c;
  int64_t num_seqs;
  int64_t cu_q[MAX_SEQS + 1], cu_k[MAX_SEQS + 1];
  int64_t total_q, total_k, rows_q, rows_k;
  int64_t heads_q, heads_kv, dqk, dv, slots;
  int64_t max_seqlen_q, max_seqlen_k;
  view views[TENSORS];
  storage storages[TENSORS];
  int storage_count;
  double *inputs[4]; /* q, k, v, dout values, contiguous [total, heads, dim] */
  int32_t *idx, *cnt; /* host [rows_q, heads_kv, slots] and [rows_q, heads_kv] (cnt NULL when absent) */
  CUdeviceptr idx_device, cnt_device, cu_q_device, cu_k_device, lse_device, workspace;
  size_t workspace_bytes;
  float *lse_host;
  aotk_sel_params params;
  char fwd_kernel[96], bwd_kernel[96];
  int bwd_launches; /* 8: long token lists may be split across dK/dV programs (aotk.h) */
  aotk__sel_reference_problem problem;
  /* the reference */
  double *ref[RESULTS], *ref_lse;
  float *lowp[RESULTS], *lowp_lse;
  int64_t *hits;
  double bound[RESULTS];
  uint64_t state;
} sel_run;

static void *host_alloc(int64_t count, size_t size) {
  void *pointer = calloc((size_t)(count > 0 ? count : 1), size);
  CHECK_MSG(pointer != NULL, "out of host memory (%lld x %zu bytes)", (long long)count, size);
  return pointer;
}

static int64_t element_index(const view *v, int64_t row, int64_t head, int64_t d) {
  return v->offset + row * v->token_stride + head * v->head_stride + d;
}

static aotk_tensor view_tensor(const sel_run *x, int t) {
  const view *v = &x->views[t];
  aotk_tensor tensor;
  memset(&tensor, 0, sizeof tensor);
  tensor.data = (void *)(uintptr_t)(x->storages[v->storage].device + (CUdeviceptr)(2 * v->offset));
  tensor.dtype = x->c->dtype;
  tensor.rank = 3;
  tensor.shape[0] = v->rows;
  tensor.shape[1] = v->heads;
  tensor.shape[2] = v->dim;
  tensor.strides[0] = v->token_stride;
  tensor.strides[1] = v->head_stride;
  tensor.strides[2] = 1;
  return tensor;
}

static int64_t result_rows(const sel_run *x, int r) { return r == R_OUT || r == R_DQ ? x->total_q : x->total_k; }
static int64_t result_heads(const sel_run *x, int r) { return r == R_OUT || r == R_DQ ? x->heads_q : x->heads_kv; }
static int64_t result_dim(const sel_run *x, int r) { return r == R_DQ || r == R_DK ? x->dqk : x->dv; }
static int64_t result_count(const sel_run *x, int r) {
  return result_rows(x, r) * result_heads(x, r) * result_dim(x, r);
}

static bool results_create(const sel_run *x, results *r) {
  memset(r, 0, sizeof *r);
  bool ok = true;
  for (int i = 0; i < RESULTS; i++) ok &= (r->values[i] = host_alloc(result_count(x, i), sizeof(double))) != NULL;
  ok &= (r->lse = host_alloc(x->total_q * x->heads_q, sizeof(double))) != NULL;
  return ok;
}

static void results_copy(const sel_run *x, results *to, const results *from) {
  for (int i = 0; i < RESULTS; i++) memcpy(to->values[i], from->values[i], (size_t)result_count(x, i) * sizeof(double));
  memcpy(to->lse, from->lse, (size_t)(x->total_q * x->heads_q) * sizeof(double));
}

static void results_destroy(results *r) {
  for (int i = 0; i < RESULTS; i++) free(r->values[i]);
  free(r->lse);
  memset(r, 0, sizeof *r);
}

/* ---- layout ------------------------------------------------------------------------------------- */

static int add_storage(sel_run *x, int64_t elements, int is_output) {
  storage *s = &x->storages[x->storage_count];
  s->elements = elements;
  s->is_output = is_output;
  return x->storage_count++;
}

static void place_own(sel_run *x, int t, int64_t rows, int64_t heads, int64_t dim, bool padded) {
  view *v = &x->views[t];
  v->rows = rows;
  v->heads = heads;
  v->dim = dim;
  v->offset = padded ? 16 : 0;
  v->head_stride = padded ? dim + 16 : dim;
  v->token_stride = padded ? heads * (dim + 16) + 16 : heads * dim;
  v->storage = add_storage(x, v->offset + rows * v->token_stride, t >= T_OUT);
}

/* q, k, v (or dq, dk, dv) as slices of one buffer of rows [heads_q*dqk | heads_kv*dqk | heads_kv*dv]. */
static void place_packed(sel_run *x, const int tensors[3], int is_output) {
  const int64_t width = x->heads_q * x->dqk + x->heads_kv * x->dqk + x->heads_kv * x->dv;
  const int64_t heads[3] = {x->heads_q, x->heads_kv, x->heads_kv}, dims[3] = {x->dqk, x->dqk, x->dv};
  int s = add_storage(x, x->rows_q * width, is_output);
  int64_t offset = 0;
  for (int i = 0; i < 3; i++) {
    view *v = &x->views[tensors[i]];
    v->storage = s;
    v->offset = offset;
    v->token_stride = width;
    v->head_stride = dims[i];
    v->rows = x->rows_q;
    v->heads = heads[i];
    v->dim = dims[i];
    offset += heads[i] * dims[i];
  }
}

static void place_tensors(sel_run *x) {
  const layout_kind layout = x->c->layout;
  if (layout == LAYOUT_QKV) {
    static const int inputs[3] = {T_Q, T_K, T_V}, gradients[3] = {T_DQ, T_DK, T_DV};
    place_packed(x, inputs, 0);
    place_packed(x, gradients, 1);
    place_own(x, T_DOUT, x->rows_q, x->heads_q, x->dv, true);
    place_own(x, T_OUT, x->rows_q, x->heads_q, x->dv, true);
    return;
  }
  const bool padded = layout == LAYOUT_PADDED;
  place_own(x, T_Q, x->rows_q, x->heads_q, x->dqk, padded);
  place_own(x, T_K, x->rows_k, x->heads_kv, x->dqk, padded);
  place_own(x, T_V, x->rows_k, x->heads_kv, x->dv, padded);
  place_own(x, T_DOUT, x->rows_q, x->heads_q, x->dv, padded);
  place_own(x, T_OUT, x->rows_q, x->heads_q, x->dv, padded);
  place_own(x, T_DQ, x->rows_q, x->heads_q, x->dqk, padded);
  place_own(x, T_DK, x->rows_k, x->heads_kv, x->dqk, padded);
  place_own(x, T_DV, x->rows_k, x->heads_kv, x->dv, padded);
}

/* ---- the selection ------------------------------------------------------------------------------ */

/* An id the contract ignores: -1 (mostly), another negative id, an id at or past the last block, or
 * a block after the diagonal (*next_future hands them out, distinct, from the first future block). */
static int32_t ignored_id(uint64_t *state, int64_t num_blocks, int64_t *next_future) {
  switch (aotk__random_int(state, 0, 9)) {
    case 0:
      return -2;
    case 1:
      return INT32_MIN;
    case 2:
      return (int32_t)num_blocks;
    case 3:
      return (int32_t)(num_blocks + aotk__random_int(state, 1, 1000));
    case 4:
      return INT32_MAX;
    case 5:
    case 6:
      if (*next_future < num_blocks) return (int32_t)(*next_future)++;
      return -1;
    default:
      return -1;
  }
}

/* Slots a row does not count hold ids that would count if they were read. */
static int32_t unread_id(uint64_t *state, int64_t available, int64_t num_blocks) {
  if (available > 0) return (int32_t)aotk__random_int(state, 0, available - 1);
  return num_blocks > 0 ? (int32_t)aotk__random_int(state, 0, num_blocks - 1) : 0;
}

static void fill_selection(sel_run *x) {
  const sel_case *c = x->c;
  const int64_t S = x->slots, H = x->heads_kv, BS = c->block_size;
  uint64_t *state = &x->state;
  int64_t longest_k = 1;
  for (int64_t n = 0; n < x->num_seqs; n++) longest_k = x->cu_k[n + 1] - x->cu_k[n] > longest_k ? x->cu_k[n + 1] - x->cu_k[n] : longest_k;
  int32_t *pool = host_alloc((longest_k + BS - 1) / BS + 1, sizeof(int32_t));
  if (pool == NULL) return;
  for (int64_t token = 0; token < x->rows_q; token++) {
    if (token >= x->total_q) {
      /* unused rows: never read */
      for (int64_t h = 0; h < H; h++) {
        for (int64_t s = 0; s < S; s++) x->idx[(token * H + h) * S + s] = (int32_t)aotk__random_int(state, -3, 50);
        if (x->cnt) x->cnt[token * H + h] = (int32_t)aotk__random_int(state, -2, S + 2);
      }
      continue;
    }
    const aotk__sel_reference_token where = aotk__sel_reference_locate(&x->problem, token);
    const int64_t available = where.position >= 0 ? where.position / BS + 1 : 0;
    for (int64_t h = 0; h < H; h++) {
      int32_t *row = x->idx + (token * H + h) * S;
      int64_t count = S, next_future = available;
      int32_t stored = (int32_t)S;
      const bool empty = c->selection == SELECT_NOTHING ||
                         (c->empty_percent > 0 && aotk__random_int(state, 0, 99) < c->empty_percent);
      if (empty) {
        int mode = (int)aotk__random_int(state, 0, 2);
        if (mode == 1 && x->cnt == NULL) mode = 2;
        for (int64_t s = 0; s < S; s++) {
          row[s] = mode == 0 ? -1 : mode == 1 ? unread_id(state, available, where.num_blocks)
                                              : ignored_id(state, where.num_blocks, &next_future);
        }
        if (mode == 1) stored = aotk__random_int(state, 0, 1) ? 0 : -7;
      } else if (c->selection == SELECT_EVERY_BLOCK) {
        CHECK_MSG(available <= S, "the case has %lld slots; a row has %lld blocks to select", (long long)S,
                  (long long)available);
        if (available > S) break;
        for (int64_t s = 0; s < available; s++) row[s] = (int32_t)s;
        aotk__random_shuffle_int32(row, available, state);
        count = x->cnt ? available : S;
        for (int64_t s = available; s < S; s++) row[s] = x->cnt ? unread_id(state, available, where.num_blocks) : -1;
        stored = (int32_t)count;
      } else if (c->selection == SELECT_HOT || c->selection == SELECT_SPARSE) {
        for (int64_t b = 0; b < available; b++) pool[b] = (int32_t)b;
        int64_t taken = 0; /* pool[0 .. taken-1]: the blocks used so far */
        if (c->selection == SELECT_HOT) {
          const int64_t fixed[3] = {0, available - 1, available - 2};
          for (int f = 0; f < 3; f++) {
            if (fixed[f] < 0 || taken >= S) continue;
            int64_t j = taken;
            while (j < available && pool[j] != fixed[f]) j++;
            if (j == available) continue; /* already taken (fewer than three blocks) */
            pool[j] = pool[taken];
            pool[taken] = (int32_t)fixed[f];
            row[taken] = pool[taken];
            taken++;
          }
        }
        for (int64_t s = taken; s < S; s++) {
          const bool pick = taken < available && (c->selection == SELECT_HOT || aotk__random_int(state, 0, 3) == 0);
          if (pick) {
            int64_t j = aotk__random_int(state, taken, available - 1);
            int32_t swap = pool[taken];
            pool[taken] = pool[j];
            pool[j] = swap;
            row[s] = pool[taken++];
          } else {
            row[s] = ignored_id(state, where.num_blocks, &next_future);
          }
        }
        aotk__random_shuffle_int32(row, S, state);
        stored = (int32_t)S;
      } else {
        if (x->cnt) count = aotk__random_int(state, 0, 3) == 0 ? aotk__random_int(state, 0, S) : S - aotk__random_int(state, 0, S / 4);
        const int64_t most = available < count ? available : count;
        const int64_t chosen = most > 0 && aotk__random_int(state, 0, 7) != 0 ? aotk__random_int(state, (most + 1) / 2, most) : 0;
        for (int64_t b = 0; b < available; b++) pool[b] = (int32_t)b;
        for (int64_t s = 0; s < chosen; s++) { /* a partial shuffle: chosen distinct blocks */
          int64_t j = aotk__random_int(state, s, available - 1);
          int32_t swap = pool[s];
          pool[s] = pool[j];
          pool[j] = swap;
          row[s] = pool[s];
        }
        for (int64_t s = chosen; s < count; s++) {
          if (c->selection == SELECT_DUPLICATES && chosen > 0 && aotk__random_int(state, 0, 2) == 0) {
            row[s] = row[aotk__random_int(state, 0, chosen - 1)];
          } else {
            row[s] = ignored_id(state, where.num_blocks, &next_future);
          }
        }
        aotk__random_shuffle_int32(row, count, state);
        for (int64_t s = count; s < S; s++) row[s] = unread_id(state, available, where.num_blocks);
        stored = (int32_t)count;
        /* counts outside [0, slots] clamp */
        if (count == 0 && aotk__random_int(state, 0, 1)) stored = -3;
        if (count == S && aotk__random_int(state, 0, 1)) stored = (int32_t)(S + 5);
      }
      if (x->cnt) x->cnt[token * H + h] = stored;
    }
  }
  free(pool);
}

/* ---- setup ------------------------------------------------------------------------------------ */

static void sel_run_destroy(sel_run *x) {
  for (int s = 0; s < x->storage_count; s++) {
    free(x->storages[s].host);
    aotk_gpu_test_free(&x->storages[s].device);
  }
  for (int i = 0; i < 4; i++) free(x->inputs[i]);
  free(x->idx);
  free(x->cnt);
  free(x->lse_host);
  CUdeviceptr *devices[] = {&x->idx_device, &x->cnt_device, &x->cu_q_device, &x->cu_k_device, &x->lse_device,
                            &x->workspace};
  for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) aotk_gpu_test_free(devices[i]);
  for (int i = 0; i < RESULTS; i++) {
    free(x->ref[i]);
    free(x->lowp[i]);
  }
  free(x->ref_lse);
  free(x->lowp_lse);
  free(x->hits);
}

static bool sel_run_create(sel_run *x, const sel_case *c) {
  memset(x, 0, sizeof *x);
  x->c = c;
  x->state = c->seed;
  x->num_seqs = c->varlen ? c->num_seqs : 1;
  int64_t longest_q = 1, longest_k = 1;
  for (int64_t n = 0; n < x->num_seqs; n++) {
    x->cu_q[n + 1] = x->cu_q[n] + c->len_q[n];
    x->cu_k[n + 1] = x->cu_k[n] + c->len_k[n];
    longest_q = c->len_q[n] > longest_q ? c->len_q[n] : longest_q;
    longest_k = c->len_k[n] > longest_k ? c->len_k[n] : longest_k;
  }
  x->total_q = x->cu_q[x->num_seqs];
  x->total_k = x->cu_k[x->num_seqs];
  x->rows_q = x->total_q + (c->varlen ? TAIL_ROWS : 0);
  x->rows_k = x->total_k + (c->varlen ? TAIL_ROWS : 0);
  x->heads_kv = c->heads_kv;
  x->heads_q = c->heads_kv * c->group;
  x->dqk = c->head_dim_qk;
  x->dv = c->head_dim_v;
  x->slots = c->slots;
  x->max_seqlen_q = longest_q;
  x->max_seqlen_k = longest_k + c->max_seqlen_slack;
  const aotk_dtype dtype = c->dtype;
  place_tensors(x);

  /* Inputs: every storage element random (padding too: it must not matter), N(0, 1) in the dtype. */
  for (int s = 0; s < x->storage_count; s++) {
    storage *st = &x->storages[s];
    st->host = host_alloc(st->elements, sizeof(uint16_t));
    if (st->host == NULL) return false;
    if (st->is_output) {
      if (!aotk_gpu_test_alloc(&st->device, (size_t)st->elements * 2)) return false;
      continue;
    }
    for (int64_t e = 0; e < st->elements; e++) st->host[e] = aotk__dtype_bits(aotk__random_normal(&x->state), dtype);
    if (!aotk_gpu_test_upload(&st->device, st->host, (size_t)st->elements * 2)) return false;
  }
  for (int t = T_Q; t <= T_DOUT; t++) {
    const view *v = &x->views[t];
    const int64_t rows = t == T_K || t == T_V ? x->total_k : x->total_q;
    x->inputs[t] = host_alloc(rows * v->heads * v->dim, sizeof(double));
    if (x->inputs[t] == NULL) return false;
    for (int64_t row = 0; row < rows; row++)
      for (int64_t h = 0; h < v->heads; h++)
        for (int64_t d = 0; d < v->dim; d++) {
          x->inputs[t][(row * v->heads + h) * v->dim + d] =
              aotk__dtype_value(x->storages[v->storage].host[element_index(v, row, h, d)], dtype);
        }
  }

  /* The reference problem (its block_idx and block_cnt are the host arrays' first total_q rows). */
  aotk__sel_reference_problem *p = &x->problem;
  p->num_seqs = x->num_seqs;
  p->cu_seqlens_q = x->cu_q;
  p->cu_seqlens_k = x->cu_k;
  p->heads_q = x->heads_q;
  p->heads_kv = x->heads_kv;
  p->head_dim_qk = x->dqk;
  p->head_dim_v = x->dv;
  p->block_size = c->block_size;
  p->slots = x->slots;
  p->softmax_scale = c->softmax_scale != 0.0f ? (double)c->softmax_scale : 1.0 / sqrt((double)x->dqk);
  const double *const *inputs = (const double *const *)x->inputs;
  p->q = inputs[T_Q];
  p->k = inputs[T_K];
  p->v = inputs[T_V];
  p->dout = inputs[T_DOUT];
  p->q_strides[0] = x->heads_q * x->dqk;
  p->q_strides[1] = x->dqk;
  p->k_strides[0] = x->heads_kv * x->dqk;
  p->k_strides[1] = x->dqk;
  p->v_strides[0] = x->heads_kv * x->dv;
  p->v_strides[1] = x->dv;
  p->dout_strides[0] = x->heads_q * x->dv;
  p->dout_strides[1] = x->dv;
  x->idx = host_alloc(x->rows_q * x->heads_kv * x->slots, sizeof(int32_t));
  if (c->with_count) x->cnt = host_alloc(x->rows_q * x->heads_kv, sizeof(int32_t));
  if (x->idx == NULL || (c->with_count && x->cnt == NULL)) return false;
  p->block_idx = x->idx;
  p->block_cnt = x->cnt;
  fill_selection(x);

  if (!aotk_gpu_test_upload(&x->idx_device, x->idx, (size_t)(x->rows_q * x->heads_kv * x->slots) * 4)) return false;
  if (x->cnt && !aotk_gpu_test_upload(&x->cnt_device, x->cnt, (size_t)(x->rows_q * x->heads_kv) * 4)) return false;
  int32_t cu32[2][MAX_SEQS + 1];
  for (int64_t n = 0; n <= x->num_seqs; n++) {
    cu32[0][n] = (int32_t)x->cu_q[n];
    cu32[1][n] = (int32_t)x->cu_k[n];
  }
  /* Always on the device: the dense attention of the every-block identity takes the varlen layout. */
  if (!aotk_gpu_test_upload(&x->cu_q_device, cu32[0], (size_t)(x->num_seqs + 1) * 4) ||
      !aotk_gpu_test_upload(&x->cu_k_device, cu32[1], (size_t)(x->num_seqs + 1) * 4)) {
    return false;
  }
  if (!aotk_gpu_test_alloc(&x->lse_device, (size_t)(x->rows_q * x->heads_q) * 4)) return false;
  x->lse_host = host_alloc(x->rows_q * x->heads_q, sizeof(float));
  if (x->lse_host == NULL) return false;

  aotk_sel_params params = AOTK_SEL_PARAMS_INIT;
  params.q = view_tensor(x, T_Q);
  params.k = view_tensor(x, T_K);
  params.v = view_tensor(x, T_V);
  params.out = view_tensor(x, T_OUT);
  params.dout = view_tensor(x, T_DOUT);
  params.dq = view_tensor(x, T_DQ);
  params.dk = view_tensor(x, T_DK);
  params.dv = view_tensor(x, T_DV);
  params.lse = aotk_tensor_2d((void *)(uintptr_t)x->lse_device, AOTK_DTYPE_FLOAT32, x->rows_q, x->heads_q);
  if (c->varlen) {
    params.cu_seqlens_q = aotk_tensor_1d((void *)(uintptr_t)x->cu_q_device, AOTK_DTYPE_INT32, x->num_seqs + 1);
    params.cu_seqlens_k = aotk_tensor_1d((void *)(uintptr_t)x->cu_k_device, AOTK_DTYPE_INT32, x->num_seqs + 1);
    params.max_seqlen_k = (int32_t)x->max_seqlen_k;
  }
  params.block_size = (int32_t)c->block_size;
  params.block_idx = aotk_tensor_3d((void *)(uintptr_t)x->idx_device, AOTK_DTYPE_INT32, x->rows_q, x->heads_kv, x->slots);
  if (x->cnt) params.block_cnt = aotk_tensor_2d((void *)(uintptr_t)x->cnt_device, AOTK_DTYPE_INT32, x->rows_q, x->heads_kv);
  params.softmax_scale = c->softmax_scale;
  x->params = params;

  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_sel_query(AOTK_OP_SEL_FWD, &x->params, &info);
  CHECK_MSG(status == AOTK_OK, "forward query: %s: %s", aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return false;
  snprintf(x->fwd_kernel, sizeof x->fwd_kernel, "%s", info.kernel_name);
  CHECK_MSG(info.launches == 1 && info.workspace_bytes == 0, "forward query: %d launches, workspace %zu",
            (int)info.launches, info.workspace_bytes);
  info = (aotk_kernel_info)AOTK_KERNEL_INFO_INIT;
  status = aotk_sel_query(AOTK_OP_SEL_BWD, &x->params, &info);
  CHECK_MSG(status == AOTK_OK, "backward query: %s: %s", aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return false;
  snprintf(x->bwd_kernel, sizeof x->bwd_kernel, "%s", info.kernel_name);
  CHECK_MSG(info.launches == 7 || info.launches == 8, "backward query: %d launches, the header says 7 or 8",
            (int)info.launches);
  x->bwd_launches = info.launches;
  x->workspace_bytes = info.workspace_bytes;
  return aotk_gpu_test_alloc(&x->workspace, x->workspace_bytes);
}

/* ---- running ---------------------------------------------------------------------------------- */

static bool is_result_tensor_of(int t, unsigned what) {
  return (t == T_OUT && (what & RUN_FWD)) || ((t == T_DQ || t == T_DK || t == T_DV) && (what & RUN_BWD));
}

/* Every element of the tensors the run wrote is written; nothing else in their storages is. */
static void check_coverage(const sel_run *x, unsigned what, bool lse_written, const char *label) {
  for (int s = 0; s < x->storage_count; s++) {
    const storage *st = &x->storages[s];
    if (!st->is_output) continue;
    bool poisoned = false;
    for (int t = T_OUT; t < TENSORS; t++) poisoned |= x->views[t].storage == s && is_result_tensor_of(t, what);
    if (!poisoned) continue;
    uint8_t *expected = host_alloc(st->elements, 1);
    if (expected == NULL) return;
    for (int t = T_OUT; t < TENSORS; t++) {
      const view *v = &x->views[t];
      if (v->storage != s || !is_result_tensor_of(t, what)) continue;
      const int64_t rows = t == T_DK || t == T_DV ? x->total_k : x->total_q;
      for (int64_t row = 0; row < rows; row++)
        for (int64_t h = 0; h < v->heads; h++)
          for (int64_t d = 0; d < v->dim; d++) expected[element_index(v, row, h, d)] = 1;
    }
    int64_t unwritten = 0, clobbered = 0;
    for (int64_t e = 0; e < st->elements; e++) {
      const bool poison_left = st->host[e] == 0xffff;
      unwritten += expected[e] && poison_left;
      clobbered += !expected[e] && !poison_left;
    }
    free(expected);
    char names[32] = "";
    for (int t = T_OUT; t < TENSORS; t++) {
      if (x->views[t].storage != s) continue;
      size_t used = strlen(names);
      snprintf(names + used, sizeof names - used, "%s%s", used ? "/" : "", tensor_names[t]);
    }
    CHECK_MSG(unwritten == 0 && clobbered == 0, "%s: the buffer of %s: %lld elements unwritten, %lld outside the "
              "tensors written", label, names, (long long)unwritten, (long long)clobbered);
  }
  if (what & RUN_FWD) {
    int64_t unwritten = 0, clobbered = 0;
    uint32_t bits;
    for (int64_t e = 0; e < x->rows_q * x->heads_q; e++) {
      memcpy(&bits, &x->lse_host[e], 4);
      const bool expected = lse_written && e < x->total_q * x->heads_q;
      unwritten += expected && bits == 0xffffffffu;
      clobbered += !expected && bits != 0xffffffffu;
    }
    CHECK_MSG(unwritten == 0 && clobbered == 0, "%s: lse: %lld elements unwritten, %lld written that should not be",
              label, (long long)unwritten, (long long)clobbered);
  }
}

static void unpack(const sel_run *x, results *r) {
  for (int i = 0; i < RESULTS; i++) {
    const view *v = &x->views[result_tensor[i]];
    const uint16_t *host = x->storages[v->storage].host;
    const int64_t rows = result_rows(x, i);
    for (int64_t row = 0; row < rows; row++)
      for (int64_t h = 0; h < v->heads; h++)
        for (int64_t d = 0; d < v->dim; d++) {
          r->values[i][(row * v->heads + h) * v->dim + d] = aotk__dtype_value(host[element_index(v, row, h, d)], x->c->dtype);
        }
  }
  for (int64_t e = 0; e < x->total_q * x->heads_q; e++) r->lse[e] = x->lse_host[e];
}

/* Poisons what the run writes (and the workspace), runs the forward and/or the backward with `params`,
 * downloads, checks coverage and unpacks into r (tensors the run did not write keep the values of the
 * last download). */
static bool run_sel(sel_run *x, const aotk_sel_params *params, unsigned what, results *r, const char *label) {
  for (int s = 0; s < x->storage_count; s++) {
    bool written = false;
    for (int t = T_OUT; t < TENSORS; t++) written |= x->views[t].storage == s && is_result_tensor_of(t, what);
    if (written && !aotk_gpu_test_poison(x->storages[s].device, (size_t)x->storages[s].elements * 2)) return false;
  }
  if ((what & RUN_FWD) && !aotk_gpu_test_poison(x->lse_device, (size_t)(x->rows_q * x->heads_q) * 4)) return false;
  if ((what & RUN_BWD) && !aotk_gpu_test_poison(x->workspace, x->workspace_bytes)) return false;
  if (!aotk_gpu_test_settle()) return false;
  aotk_status status;
  if (what & RUN_FWD) {
    status = aotk_sel_fwd(params, (aotk_stream)stream);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_fwd: %s: %s", label, aotk_status_name(status), aotk_last_error());
    if (status != AOTK_OK) return false;
  }
  if (what & RUN_BWD) {
    status = aotk_sel_bwd(params, (void *)(uintptr_t)x->workspace, x->workspace_bytes, (aotk_stream)stream);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_bwd: %s: %s", label, aotk_status_name(status), aotk_last_error());
    if (status != AOTK_OK) return false;
  }
  if (!aotk_gpu_test_synchronize(label)) return false;
  for (int s = 0; s < x->storage_count; s++) {
    bool written = false;
    for (int t = T_OUT; t < TENSORS; t++) written |= x->views[t].storage == s && is_result_tensor_of(t, what);
    if (written && !aotk_gpu_test_download(x->storages[s].host, x->storages[s].device, (size_t)x->storages[s].elements * 2)) {
      return false;
    }
  }
  if ((what & RUN_FWD) && !aotk_gpu_test_download(x->lse_host, x->lse_device, (size_t)(x->rows_q * x->heads_q) * 4)) return false;
  check_coverage(x, what, (what & RUN_FWD) && params->lse.data != NULL, label);
  if (r != NULL) unpack(x, r);
  return true;
}

#endif /* SEL_GPU_CASES_H */
