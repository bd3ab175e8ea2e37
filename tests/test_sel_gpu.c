/*
 * Selection attention on the GPU (aotk_sel_fwd, aotk_sel_bwd, aotk_sel_query, aotk_sel_check_indices)
 * against the float64 reference of src/check/aotk_sel_reference.c, over every element of out, lse, dq, dk
 * and dv. Exits 77 (skipped) on a machine with no GPU.
 *
 * Matrix: both dtypes x the three head-dim pairs x the three block sizes; lengths 1, 63, 64, 65, 1000
 * and (in a few cases) 4097; sequences shorter than a block; more slots than blocks; group sizes 1, 4,
 * 16 and 64; varlen with an empty sequence, a sequence with no keys, len_q < len_k and len_q > len_k
 * (rows before the diagonal see nothing), and unused rows after the last sequence (left alone);
 * block_cnt present (with counts outside [0, slots], which clamp, and unread slots holding ids that
 * would count if read) and absent; random distinct blocks in random slot order mixed with -1, other
 * negative ids, ids past the last block and future blocks (all ignored); rows made empty on purpose;
 * NSA's fixed picks (block 0 and the local blocks in every row) at 8200 and 65600 tokens, whose token
 * lists the backward splits across dK/dV programs, and rows with about a quarter of their slots valid,
 * in every dtype and head-dim pair; the contiguous layout, padded strides, and q/k/v (and dq/dk/dv) as
 * slices of one packed buffer.
 *
 * Each case also checks, on the same inputs:
 * - every output element written, every padding element and unused row left alone (poison);
 * - rows with no key: out exactly 0, lse -inf, dq exactly 0; keys no row selected: dk = dv = 0;
 * - the backward run again on re-poisoned gradients and workspace gives the same bits;
 * - the forward without lse: the same out bits, and the lse memory untouched;
 * - the counted slots permuted: within twice the bound of the unpermuted run;
 * - (block_cnt present) the slots past each count set to -1 and block_cnt dropped: the same bits;
 * - (varlen) each sequence as its own call without cu_seqlens: the same bits when the two calls run
 *   the same kernels and neither may split a token list (one program per (token, kv head) or per key
 *   block, the same values in the same order: nothing depends on the packing), else within twice the
 *   bound (the split's chunk size follows the problem's size);
 * - (every block <= p / block_size selected) aotk's dense causal attention (aotk_attn_fwd/bwd, varlen,
 *   bottom-right aligned) on the same buffers: within twice the bound.
 * Then: the queries, the refusals (workspace, alignment, missing lse: nothing written), and
 * aotk_sel_check_indices on clean and on each kind of bad index.
 *
 * The error rule is the dense tests' (src/check/aotk_check.h): per tensor, max |gpu - float64| <= 2 x max
 * |same-precision emulation - float64| + a floor (AOTK__CHECK_ERROR_FLOOR for out,
 * AOTK__CHECK_BWD_ERROR_FLOOR x max(1, max |float64|) for the gradients); lse within AOTK__CHECK_LSE_ABS
 * + AOTK__CHECK_LSE_REL |lse|. Two GPU results that should agree may differ by the sum of their
 * bounds. The relative RMS error against float64 is printed for the worst case of each dtype (public
 * implementations quote < 5e-3 against float32).
 *
 * The host reference costs ~1 us per (query row, query head, selected key) on one core; it is spread
 * over the machine's cores, and the cases with 4097 tokens keep their group and slot counts small.
 */
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

/* Worst error as a fraction of its bound, per dtype, with the case and its relative RMS errors. */
static double worst_fraction[4];
static char worst_case[4][640];

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

/* ---- the reference, on every core ----------------------------------------------------------- */

typedef struct reference_job {
  sel_run *x;
  int phase; /* 0: out, lse, dq of (token, head_q) items; 1: dk, dv of (sequence, kv head, block) items */
  int64_t item_count;
  _Atomic int64_t next_item;
  int64_t (*blocks)[3];
} reference_job;

static void *reference_worker(void *argument) {
  reference_job *job = argument;
  sel_run *x = job->x;
  const aotk__sel_reference_problem *p = &x->problem;
  const int dtype = (int)x->c->dtype;
  for (;;) {
    const int64_t item = atomic_fetch_add(&job->next_item, 1);
    if (item >= job->item_count) break;
    if (job->phase == 0) {
      const int64_t token = item / x->heads_q, head = item % x->heads_q;
      aotk__sel_reference_fwd_row_f64(p, token, head, x->ref[R_OUT] + item * x->dv, &x->ref_lse[item]);
      aotk__sel_reference_fwd_row_lowp(p, dtype, token, head, x->lowp[R_OUT] + item * x->dv, &x->lowp_lse[item]);
      aotk__sel_reference_dq_row_f64(p, token, head, x->ref[R_OUT], x->ref_lse, x->ref[R_DQ] + item * x->dqk);
      aotk__sel_reference_dq_row_lowp(p, dtype, token, head, x->lowp[R_OUT], x->lowp_lse,
                                      x->lowp[R_DQ] + item * x->dqk);
    } else {
      const int64_t *b = job->blocks[item];
      aotk__sel_reference_dkdv_block_f64(p, b[0], b[1], b[2], x->ref[R_OUT], x->ref_lse, x->ref[R_DK], x->ref[R_DV],
                                         x->hits);
      aotk__sel_reference_dkdv_block_lowp(p, dtype, b[0], b[1], b[2], x->lowp[R_OUT], x->lowp_lse, x->lowp[R_DK],
                                          x->lowp[R_DV]);
    }
  }
  return NULL;
}

static void run_phase(reference_job *job, int phase, int64_t item_count) {
  job->phase = phase;
  job->item_count = item_count;
  atomic_store(&job->next_item, 0);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int threads = online < 1 ? 1 : online > MAX_THREADS ? MAX_THREADS : (int)online;
  pthread_t handles[MAX_THREADS];
  bool started[MAX_THREADS] = {false};
  for (int i = 1; i < threads; i++) started[i] = pthread_create(&handles[i], NULL, reference_worker, job) == 0;
  reference_worker(job);
  for (int i = 1; i < threads; i++) {
    if (started[i]) pthread_join(handles[i], NULL);
  }
}

static bool compute_reference(sel_run *x) {
  for (int i = 0; i < RESULTS; i++) {
    x->ref[i] = host_alloc(result_count(x, i), sizeof(double));
    x->lowp[i] = host_alloc(result_count(x, i), sizeof(float));
  }
  x->ref_lse = host_alloc(x->total_q * x->heads_q, sizeof(double));
  x->lowp_lse = host_alloc(x->total_q * x->heads_q, sizeof(float));
  x->hits = host_alloc(x->total_k * x->heads_kv, sizeof(int64_t));
  int64_t block_count = 0;
  for (int64_t n = 0; n < x->num_seqs; n++) {
    block_count += x->heads_kv * aotk__sel_reference_sequence(&x->problem, n).num_blocks;
  }
  int64_t(*blocks)[3] = host_alloc(block_count, sizeof *blocks);
  bool ok = blocks != NULL && x->ref_lse != NULL && x->lowp_lse != NULL && x->hits != NULL;
  for (int i = 0; i < RESULTS; i++) ok &= x->ref[i] != NULL && x->lowp[i] != NULL;
  if (!ok) {
    free(blocks);
    return false;
  }
  int64_t item = 0;
  for (int64_t n = 0; n < x->num_seqs; n++) {
    const int64_t num_blocks = aotk__sel_reference_sequence(&x->problem, n).num_blocks;
    for (int64_t h = 0; h < x->heads_kv; h++)
      for (int64_t b = 0; b < num_blocks; b++) {
        blocks[item][0] = n;
        blocks[item][1] = h;
        blocks[item][2] = b;
        item++;
      }
  }
  reference_job job;
  memset(&job, 0, sizeof job);
  job.x = x;
  job.blocks = blocks;
  run_phase(&job, 0, x->total_q * x->heads_q);
  run_phase(&job, 1, block_count);
  free(blocks);
  return true;
}

/* ---- comparing ------------------------------------------------------------------------------ */

static const char *const result_names[RESULTS] = {"out", "dq", "dk", "dv"};

static double lse_tolerance(double reference) { return AOTK__CHECK_LSE_ABS + AOTK__CHECK_LSE_REL * fabs(reference); }

/* A run against the reference: the error bound of each tensor, lse, empty rows, unselected keys. With
 * record_bounds the bounds are kept for the comparisons between runs. */
static void compare_with_reference(sel_run *x, const results *r, unsigned what, bool record_bounds, const char *label) {
  const aotk_dtype dtype = x->c->dtype;
  double fraction = 0.0;
  char rms_text[160] = "";
  size_t rms_used = 0;
  for (int i = 0; i < RESULTS; i++) {
    if (i == R_OUT ? !(what & RUN_FWD) : !(what & RUN_BWD)) continue;
    const int64_t n = result_count(x, i);
    double max_error = 0.0, lowp_error = 0.0, magnitude = 0.0, squared_error = 0.0, squared = 0.0;
    int64_t worst = 0;
    for (int64_t e = 0; e < n; e++) {
      const double exact = x->ref[i][e], got = r->values[i][e];
      double error = fabs(got - exact);
      if (isnan(error)) error = INFINITY;
      if (error > max_error) {
        max_error = error;
        worst = e;
      }
      const double emulation_error = fabs((double)x->lowp[i][e] - exact);
      if (!(emulation_error <= lowp_error)) lowp_error = isnan(emulation_error) ? INFINITY : emulation_error;
      magnitude = fabs(exact) > magnitude ? fabs(exact) : magnitude;
      squared_error += error * error;
      squared += exact * exact;
    }
    const double floor = i == R_OUT ? AOTK__CHECK_ERROR_FLOOR
                                    : AOTK__CHECK_BWD_ERROR_FLOOR * (magnitude > 1.0 ? magnitude : 1.0);
    const double bound = 2.0 * lowp_error + floor;
    if (record_bounds) x->bound[i] = bound;
    const int64_t heads = result_heads(x, i), dim = result_dim(x, i);
    CHECK_MSG(max_error <= bound,
              "%s: %s error %.3g > bound %.3g (2 x same-precision %.3g + %.2g) at (row %lld, head %lld, %lld): "
              "%.6g, expected %.6g",
              label, result_names[i], max_error, bound, lowp_error, floor, (long long)(worst / dim / heads),
              (long long)(worst / dim % heads), (long long)(worst % dim), n > 0 ? r->values[i][worst] : 0.0,
              n > 0 ? x->ref[i][worst] : 0.0);
    if (bound > 0.0 && max_error / bound > fraction) fraction = max_error / bound;
    if (rms_used < sizeof rms_text) {
      int written = snprintf(rms_text + rms_used, sizeof rms_text - rms_used, " %s %.2e", result_names[i],
                             squared > 0.0 ? sqrt(squared_error / squared) : 0.0);
      if (written > 0) rms_used += (size_t)written;
    }
  }
  if (what & RUN_FWD) {
    int64_t bad = 0, first = -1;
    for (int64_t e = 0; e < x->total_q * x->heads_q; e++) {
      const double exact = x->ref_lse[e], got = r->lse[e];
      bool ok = isinf(exact) ? got == exact : fabs(got - exact) <= lse_tolerance(exact);
      if (!ok && first < 0) first = e;
      bad += !ok;
    }
    CHECK_MSG(bad == 0, "%s: %lld lse values off, first (row %lld, head %lld): %.7g, expected %.7g", label,
              (long long)bad, (long long)(first / x->heads_q), (long long)(first % x->heads_q),
              first >= 0 ? r->lse[first] : 0.0, first >= 0 ? x->ref_lse[first] : 0.0);
  }
  /* Rows that see no key: out exactly 0 (and dq); keys nobody selected: dk = dv = 0 exactly. */
  int64_t bad_rows = 0, empty_rows = 0;
  for (int64_t e = 0; e < x->total_q * x->heads_q; e++) {
    if (!isinf(x->ref_lse[e])) continue;
    empty_rows++;
    bool zero = true;
    for (int64_t d = 0; (what & RUN_FWD) && d < x->dv; d++) zero &= r->values[R_OUT][e * x->dv + d] == 0.0;
    for (int64_t d = 0; (what & RUN_BWD) && d < x->dqk; d++) zero &= r->values[R_DQ][e * x->dqk + d] == 0.0;
    bad_rows += !zero;
  }
  CHECK_MSG(bad_rows == 0, "%s: %lld of %lld rows that see no key have out or dq != 0", label, (long long)bad_rows,
            (long long)empty_rows);
  if (what & RUN_BWD) {
    int64_t bad_keys = 0, unselected = 0;
    for (int64_t e = 0; e < x->total_k * x->heads_kv; e++) {
      if (x->hits[e] > 0) continue;
      unselected++;
      bool zero = true;
      for (int64_t d = 0; d < x->dqk; d++) zero &= r->values[R_DK][e * x->dqk + d] == 0.0;
      for (int64_t d = 0; d < x->dv; d++) zero &= r->values[R_DV][e * x->dv + d] == 0.0;
      bad_keys += !zero;
    }
    CHECK_MSG(bad_keys == 0, "%s: %lld of %lld keys no row selected have dk or dv != 0", label, (long long)bad_keys,
              (long long)unselected);
  }
  if (record_bounds && fraction > worst_fraction[dtype]) {
    worst_fraction[dtype] = fraction;
    snprintf(worst_case[dtype], sizeof worst_case[dtype], "%s (relative RMS:%s)", x->c->name, rms_text);
  }
}

/* Two runs that must agree: bit for bit, or within the sum of their bounds (each run's bound is the
 * base run's: the same inputs and reference). */
static void compare_runs(const sel_run *x, const results *a, const results *b, unsigned what, bool bitwise,
                         const char *label) {
  for (int i = 0; i < RESULTS; i++) {
    if (i == R_OUT ? !(what & RUN_FWD) : !(what & RUN_BWD)) continue;
    const int64_t n = result_count(x, i);
    int64_t differences = 0, first = -1;
    double max_difference = 0.0;
    for (int64_t e = 0; e < n; e++) {
      const double u = a->values[i][e], v = b->values[i][e];
      bool differ;
      if (bitwise) {
        differ = memcmp(&u, &v, sizeof u) != 0;
      } else {
        double difference = fabs(u - v);
        if (isnan(difference)) difference = INFINITY;
        max_difference = difference > max_difference ? difference : max_difference;
        differ = difference > 2.0 * x->bound[i];
      }
      if (differ && first < 0) first = e;
      differences += differ;
    }
    CHECK_MSG(differences == 0, "%s: %s: %lld values differ%s (first at element %lld: %.6g vs %.6g; max difference "
              "%.3g, allowed %.3g)", label, result_names[i], (long long)differences, bitwise ? " in their bits" : "",
              (long long)first, first >= 0 ? a->values[i][first] : 0.0, first >= 0 ? b->values[i][first] : 0.0,
              max_difference, bitwise ? 0.0 : 2.0 * x->bound[i]);
  }
  if (what & RUN_FWD) {
    int64_t differences = 0;
    for (int64_t e = 0; e < x->total_q * x->heads_q; e++) {
      const double u = a->lse[e], v = b->lse[e];
      differences += bitwise ? memcmp(&u, &v, sizeof u) != 0
                             : !(u == v || fabs(u - v) <= 2.0 * lse_tolerance(u));
    }
    CHECK_MSG(differences == 0, "%s: %lld lse values differ", label, (long long)differences);
  }
}

/* ---- the identities --------------------------------------------------------------------------- */

/* The counted slots of every row in another order: the same blocks, accumulated in another order. */
static void identity_permuted(sel_run *x, const results *base) {
  const int64_t H = x->heads_kv, S = x->slots;
  int32_t *idx = host_alloc(x->rows_q * H * S, sizeof(int32_t));
  CUdeviceptr device = 0;
  results r;
  memset(&r, 0, sizeof r);
  if (idx == NULL || !results_create(x, &r)) goto done;
  memcpy(idx, x->idx, (size_t)(x->rows_q * H * S) * sizeof(int32_t));
  for (int64_t token = 0; token < x->total_q; token++)
    for (int64_t h = 0; h < H; h++) {
      aotk__random_shuffle_int32(idx + (token * H + h) * S, aotk__sel_reference_count(&x->problem, token, h), &x->state);
    }
  if (!aotk_gpu_test_upload(&device, idx, (size_t)(x->rows_q * H * S) * 4)) goto done;
  aotk_sel_params params = x->params;
  params.block_idx.data = (void *)(uintptr_t)device;
  if (!run_sel(x, &params, RUN_FWD | RUN_BWD, &r, "slots permuted")) goto done;
  compare_with_reference(x, &r, RUN_FWD | RUN_BWD, false, "slots permuted");
  compare_runs(x, base, &r, RUN_FWD | RUN_BWD, false, "slots permuted against the base run");
done:
  aotk_gpu_test_free(&device);
  free(idx);
  results_destroy(&r);
}

/* -1 in every slot past its count, and no block_cnt: the same blocks in the same order, the same bits. */
static void identity_padding(sel_run *x, const results *base) {
  const int64_t H = x->heads_kv, S = x->slots;
  int32_t *idx = host_alloc(x->rows_q * H * S, sizeof(int32_t));
  CUdeviceptr device = 0;
  results r;
  memset(&r, 0, sizeof r);
  if (idx == NULL || !results_create(x, &r)) goto done;
  memcpy(idx, x->idx, (size_t)(x->rows_q * H * S) * sizeof(int32_t));
  for (int64_t token = 0; token < x->total_q; token++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t s = aotk__sel_reference_count(&x->problem, token, h); s < S; s++) idx[(token * H + h) * S + s] = -1;
  if (!aotk_gpu_test_upload(&device, idx, (size_t)(x->rows_q * H * S) * 4)) goto done;
  aotk_sel_params params = x->params;
  params.block_idx.data = (void *)(uintptr_t)device;
  memset(&params.block_cnt, 0, sizeof params.block_cnt);
  if (!run_sel(x, &params, RUN_FWD | RUN_BWD, &r, "-1 padding")) goto done;
  compare_runs(x, base, &r, RUN_FWD | RUN_BWD, true, "-1 padding instead of block_cnt");
done:
  aotk_gpu_test_free(&device);
  free(idx);
  results_destroy(&r);
}

/* The forward without lse: out's bits unchanged, and the lse buffer (poisoned) left alone. */
static void identity_no_lse(sel_run *x, const results *base) {
  results r;
  if (!results_create(x, &r)) return;
  aotk_sel_params params = x->params;
  memset(&params.lse, 0, sizeof params.lse);
  if (run_sel(x, &params, RUN_FWD, &r, "forward without lse")) {
    /* lse was not written (check_coverage saw its poison intact): nothing of it to compare */
    memcpy(r.lse, base->lse, (size_t)(x->total_q * x->heads_q) * sizeof(double));
    compare_runs(x, base, &r, RUN_FWD, true, "forward without lse");
  }
  results_destroy(&r);
}

/* Each sequence with rows and keys as its own call (no cu_seqlens, contiguous copies). */
static void identity_separate_calls(sel_run *x, const results *base) {
  results r;
  if (!results_create(x, &r)) return;
  results_copy(x, &r, base);
  const aotk_dtype dtype = x->c->dtype;
  const int64_t HQ = x->heads_q, HKV = x->heads_kv, DQK = x->dqk, DV = x->dv, S = x->slots;
  bool same_kernels = true;
  int calls = 0;
  for (int64_t n = 0; n < x->num_seqs && aotk_test_state.case_failures == 0; n++) {
    const int64_t q0 = x->cu_q[n], k0 = x->cu_k[n], lq = x->cu_q[n + 1] - q0, lk = x->cu_k[n + 1] - k0;
    if (lq == 0 || lk == 0) continue; /* not a call the API takes; the packed run was checked */
    enum { SQ, SK, SV, SDOUT, SOUT, SDQ, SDK, SDV, SIDX, SCNT, SLSE, SWORK, SBUFFERS };
    CUdeviceptr dev[SBUFFERS] = {0};
    const int source[4] = {T_Q, T_K, T_V, T_DOUT};
    const int64_t rows[8] = {lq, lk, lk, lq, lq, lq, lk, lk}, heads[8] = {HQ, HKV, HKV, HQ, HQ, HQ, HKV, HKV},
                  dims[8] = {DQK, DQK, DV, DV, DV, DQK, DQK, DV}, first[4] = {q0, k0, k0, q0};
    uint16_t *host[8] = {NULL};
    bool ok = true;
    for (int t = 0; t < 8 && ok; t++) {
      const size_t count = (size_t)(rows[t] * heads[t] * dims[t]);
      host[t] = host_alloc((int64_t)count, sizeof(uint16_t));
      ok = host[t] != NULL;
      if (!ok) break;
      if (t < 4) {
        const view *v = &x->views[source[t]];
        for (int64_t row = 0; row < rows[t]; row++)
          for (int64_t h = 0; h < heads[t]; h++)
            for (int64_t d = 0; d < dims[t]; d++) {
              host[t][(row * heads[t] + h) * dims[t] + d] =
                  x->storages[v->storage].host[element_index(v, first[t] + row, h, d)];
            }
        ok = aotk_gpu_test_upload(&dev[t], host[t], count * 2);
      } else {
        ok = aotk_gpu_test_alloc(&dev[t], count * 2) && aotk_gpu_test_poison(dev[t], count * 2);
      }
    }
    ok = ok && aotk_gpu_test_upload(&dev[SIDX], x->idx + q0 * HKV * S, (size_t)(lq * HKV * S) * 4);
    ok = ok && (x->cnt == NULL || aotk_gpu_test_upload(&dev[SCNT], x->cnt + q0 * HKV, (size_t)(lq * HKV) * 4));
    ok = ok && aotk_gpu_test_alloc(&dev[SLSE], (size_t)(lq * HQ) * 4) && aotk_gpu_test_poison(dev[SLSE], (size_t)(lq * HQ) * 4);
    aotk_sel_params params = AOTK_SEL_PARAMS_INIT;
    aotk_tensor *const tensors[8] = {&params.q, &params.k, &params.v, &params.dout,
                                     &params.out, &params.dq, &params.dk, &params.dv};
    for (int t = 0; t < 8; t++) {
      *tensors[t] = aotk_tensor_3d((void *)(uintptr_t)dev[t], dtype, rows[t], heads[t], dims[t]);
    }
    params.lse = aotk_tensor_2d((void *)(uintptr_t)dev[SLSE], AOTK_DTYPE_FLOAT32, lq, HQ);
    params.block_size = (int32_t)x->c->block_size;
    params.block_idx = aotk_tensor_3d((void *)(uintptr_t)dev[SIDX], AOTK_DTYPE_INT32, lq, HKV, S);
    if (x->cnt) params.block_cnt = aotk_tensor_2d((void *)(uintptr_t)dev[SCNT], AOTK_DTYPE_INT32, lq, HKV);
    params.softmax_scale = x->c->softmax_scale;
    aotk_kernel_info fwd_info = AOTK_KERNEL_INFO_INIT, bwd_info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = AOTK_OK;
    if (ok) {
      status = aotk_sel_query(AOTK_OP_SEL_FWD, &params, &fwd_info);
      if (status == AOTK_OK) status = aotk_sel_query(AOTK_OP_SEL_BWD, &params, &bwd_info);
      CHECK_MSG(status == AOTK_OK, "sequence %lld alone: query: %s: %s", (long long)n, aotk_status_name(status),
                aotk_last_error());
      ok = status == AOTK_OK && aotk_gpu_test_alloc(&dev[SWORK], bwd_info.workspace_bytes) &&
           aotk_gpu_test_poison(dev[SWORK], bwd_info.workspace_bytes) && aotk_gpu_test_settle();
    }
    if (ok) {
      /* The dK/dV split's chunk size follows the whole problem's size: the same bits only where neither
       * call may split a list (7 launches). */
      same_kernels &= strcmp(fwd_info.kernel_name, x->fwd_kernel) == 0 &&
                      strcmp(bwd_info.kernel_name, x->bwd_kernel) == 0 && bwd_info.launches == 7 &&
                      x->bwd_launches == 7;
      status = aotk_sel_fwd(&params, (aotk_stream)stream);
      if (status == AOTK_OK) {
        status = aotk_sel_bwd(&params, (void *)(uintptr_t)dev[SWORK], bwd_info.workspace_bytes, (aotk_stream)stream);
      }
      CHECK_MSG(status == AOTK_OK, "sequence %lld alone: %s: %s", (long long)n, aotk_status_name(status),
                aotk_last_error());
      ok = status == AOTK_OK && aotk_gpu_test_synchronize("a sequence alone");
    }
    float *lse = host_alloc(lq * HQ, sizeof(float));
    ok = ok && lse != NULL && aotk_gpu_test_download(lse, dev[SLSE], (size_t)(lq * HQ) * 4);
    int64_t poison_left = 0;
    for (int t = 4; t < 8 && ok; t++) {
      const size_t count = (size_t)(rows[t] * heads[t] * dims[t]);
      ok = aotk_gpu_test_download(host[t], dev[t], count * 2);
      const int r_index = t - 4;
      const int64_t start = r_index == R_OUT || r_index == R_DQ ? q0 : k0;
      for (size_t e = 0; ok && e < count; e++) {
        poison_left += host[t][e] == 0xffff;
        r.values[r_index][start * heads[t] * dims[t] + (int64_t)e] = aotk__dtype_value(host[t][e], dtype);
      }
    }
    for (int64_t e = 0; ok && e < lq * HQ; e++) r.lse[q0 * HQ + e] = lse[e];
    CHECK_MSG(poison_left == 0, "sequence %lld alone: %lld output elements unwritten", (long long)n,
              (long long)poison_left);
    calls += ok;
    free(lse);
    for (int t = 0; t < 8; t++) free(host[t]);
    for (int b = 0; b < SBUFFERS; b++) aotk_gpu_test_free(&dev[b]);
  }
  if (calls > 0 && aotk_test_state.case_failures == 0) {
    char label[96];
    snprintf(label, sizeof label, "%d sequences as separate calls (%s)", calls,
             same_kernels ? "same kernels: bit for bit" : "other kernels: within the bounds");
    compare_runs(x, base, &r, RUN_FWD | RUN_BWD, same_kernels, label);
    printf("    %s\n", label);
  }
  results_destroy(&r);
}

/* Every block <= p / block_size selected: aotk's dense causal attention (bottom-right aligned, the
 * varlen layout) on the same q, k, v, dout. */
static void identity_dense(sel_run *x, const results *base) {
  const aotk_dtype dtype = x->c->dtype;
  const int64_t HQ = x->heads_q, HKV = x->heads_kv;
  results r;
  if (!results_create(x, &r)) return;
  enum { DOUT_, DDQ, DDK, DDV, DLSE, DWORK, DBUFFERS };
  CUdeviceptr dev[DBUFFERS] = {0};
  const int64_t rows[4] = {x->rows_q, x->rows_q, x->rows_k, x->rows_k}, heads[4] = {HQ, HQ, HKV, HKV},
                dims[4] = {x->dv, x->dqk, x->dqk, x->dv};
  uint16_t *host = NULL;
  float *lse = NULL;
  bool ok = true;
  for (int t = 0; t < 4 && ok; t++) ok = aotk_gpu_test_alloc(&dev[t], (size_t)(rows[t] * heads[t] * dims[t]) * 2);
  ok = ok && aotk_gpu_test_alloc(&dev[DLSE], (size_t)(HQ * x->rows_q) * 4);
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = view_tensor(x, T_Q);
  params.k = view_tensor(x, T_K);
  params.v = view_tensor(x, T_V);
  params.dout = view_tensor(x, T_DOUT);
  aotk_tensor *const outputs[4] = {&params.out, &params.dq, &params.dk, &params.dv};
  for (int t = 0; t < 4; t++) *outputs[t] = aotk_tensor_3d((void *)(uintptr_t)dev[t], dtype, rows[t], heads[t], dims[t]);
  params.lse = aotk_tensor_2d((void *)(uintptr_t)dev[DLSE], AOTK_DTYPE_FLOAT32, HQ, x->rows_q);
  params.cu_seqlens_q = aotk_tensor_1d((void *)(uintptr_t)x->cu_q_device, AOTK_DTYPE_INT32, x->num_seqs + 1);
  params.cu_seqlens_k = aotk_tensor_1d((void *)(uintptr_t)x->cu_k_device, AOTK_DTYPE_INT32, x->num_seqs + 1);
  params.max_seqlen_q = (int32_t)x->max_seqlen_q;
  params.max_seqlen_k = (int32_t)x->max_seqlen_k;
  params.causal = 1;
  params.causal_align = AOTK_ALIGN_BOTTOM_RIGHT;
  params.deterministic = 1;
  params.softmax_scale = x->c->softmax_scale;
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = AOTK_OK;
  if (ok) {
    status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info);
    CHECK_MSG(status == AOTK_OK, "dense attention: query: %s: %s", aotk_status_name(status), aotk_last_error());
    ok = status == AOTK_OK && aotk_gpu_test_alloc(&dev[DWORK], info.workspace_bytes);
  }
  if (ok) {
    status = aotk_attn_fwd(&params, (aotk_stream)stream);
    if (status == AOTK_OK) {
      status = aotk_attn_bwd(&params, (void *)(uintptr_t)dev[DWORK], info.workspace_bytes, (aotk_stream)stream);
    }
    CHECK_MSG(status == AOTK_OK, "dense attention: %s: %s", aotk_status_name(status), aotk_last_error());
    ok = status == AOTK_OK && aotk_gpu_test_synchronize("dense attention");
  }
  for (int t = 0; t < 4 && ok; t++) {
    const int64_t count = rows[t] * heads[t] * dims[t];
    free(host);
    host = host_alloc(count, sizeof(uint16_t));
    ok = host != NULL && aotk_gpu_test_download(host, dev[t], (size_t)count * 2);
    const int64_t used_rows = result_rows(x, t);
    for (int64_t e = 0; ok && e < used_rows * heads[t] * dims[t]; e++) r.values[t][e] = aotk__dtype_value(host[e], dtype);
  }
  lse = host_alloc(HQ * x->rows_q, sizeof(float));
  ok = ok && lse != NULL && aotk_gpu_test_download(lse, dev[DLSE], (size_t)(HQ * x->rows_q) * 4);
  for (int64_t token = 0; ok && token < x->total_q; token++)
    for (int64_t h = 0; h < HQ; h++) r.lse[token * HQ + h] = lse[h * x->rows_q + token];
  if (ok) compare_runs(x, base, &r, RUN_FWD | RUN_BWD, false, "every block against dense causal attention");
  free(host);
  free(lse);
  for (int b = 0; b < DBUFFERS; b++) aotk_gpu_test_free(&dev[b]);
  results_destroy(&r);
}

/* ---- one case ------------------------------------------------------------------------------- */

static void run_case(const void *argument) {
  const sel_case *c = argument;
  sel_run x;
  results base, repeat;
  memset(&base, 0, sizeof base);
  memset(&repeat, 0, sizeof repeat);
  if (!sel_run_create(&x, c) || !results_create(&x, &base) || !results_create(&x, &repeat)) goto done;
  CHECK_MSG(strncmp(x.fwd_kernel, "sel_fwd_", 8) == 0, "the forward query names %s", x.fwd_kernel);
  CHECK_MSG(strncmp(x.bwd_kernel, "sel_bwd_dkdv_", 13) == 0, "the backward query names %s, not the dK/dV pass",
            x.bwd_kernel);
  if (!run_sel(&x, &x.params, RUN_FWD | RUN_BWD, &base, "base run")) goto done;
  /* Determinism: the backward again, on re-poisoned gradients and workspace. */
  if (!run_sel(&x, &x.params, RUN_BWD, &repeat, "backward again")) goto done;
  compare_runs(&x, &base, &repeat, RUN_BWD, true, "the backward run twice");
  if (!compute_reference(&x)) goto done;
  compare_with_reference(&x, &base, RUN_FWD | RUN_BWD, true, "base run");
  if (aotk_test_state.case_failures > 0) goto done; /* the identities would only repeat the failure */
  identity_no_lse(&x, &base);
  identity_permuted(&x, &base);
  if (c->with_count) identity_padding(&x, &base);
  if (c->varlen) identity_separate_calls(&x, &base);
  if (c->selection == SELECT_EVERY_BLOCK) identity_dense(&x, &base);
done:
  results_destroy(&base);
  results_destroy(&repeat);
  sel_run_destroy(&x);
}

/* ---- the matrix ------------------------------------------------------------------------------ */

/* Sequence sets: one sequence of length L (no cu_seqlens), and two varlen mixes. The first holds an
 * empty sequence (no rows, 40 keys), one with no keys, len_q < len_k, len_q > len_k (rows 0..59 see
 * nothing), sequences shorter than every block size, and 63/64/65 around the block sizes. */
static const int64_t mix_short[][2] = {{63, 63}, {0, 40}, {17, 200}, {65, 65}, {1, 1}, {100, 40}, {64, 130}, {30, 0}};
static const int64_t mix_long[][2] = {{1000, 1000}, {5, 300}, {0, 0}, {31, 31}};
enum { SEQS_SINGLE, SEQS_SHORT_MIX, SEQS_LONG_MIX };

static void set_sequences(sel_case *c, int which, int64_t length) {
  c->varlen = which != SEQS_SINGLE;
  if (which == SEQS_SINGLE) {
    c->num_seqs = 1;
    c->len_q[0] = c->len_k[0] = length;
    return;
  }
  const int64_t(*mix)[2] = which == SEQS_SHORT_MIX ? mix_short : mix_long;
  c->num_seqs = which == SEQS_SHORT_MIX ? 8 : 4;
  for (int n = 0; n < c->num_seqs; n++) {
    c->len_q[n] = mix[n][0];
    c->len_k[n] = mix[n][1];
  }
}

static void name_case(sel_case *c) {
  char lengths[200];
  size_t used = 0;
  if (!c->varlen) {
    snprintf(lengths, sizeof lengths, "L=%lld", (long long)c->len_q[0]);
  } else {
    used = (size_t)snprintf(lengths, sizeof lengths, "varlen[");
    for (int n = 0; n < c->num_seqs && used < sizeof lengths; n++) {
      int written = snprintf(lengths + used, sizeof lengths - used, "%s%lldx%lld", n ? "," : "", (long long)c->len_q[n],
                             (long long)c->len_k[n]);
      if (written > 0) used += (size_t)written;
    }
    if (used < sizeof lengths) snprintf(lengths + used, sizeof lengths - used, "]");
  }
  snprintf(c->name, sizeof c->name, "sel %s d=%lld/%lld bs=%lld hkv=%lld G=%lld slots=%lld %s %s %s%s%s%s",
           aotk_gpu_test_dtype_label(c->dtype), (long long)c->head_dim_qk, (long long)c->head_dim_v,
           (long long)c->block_size, (long long)c->heads_kv, (long long)c->group, (long long)c->slots, lengths,
           selection_names[c->selection], layout_names[c->layout], c->with_count ? " cnt" : "",
           c->empty_percent ? " +empty rows" : "", c->softmax_scale != 0.0f ? " scale=0.3" : "");
}

typedef struct case_row {
  int bf16;
  int64_t head_dim_qk, head_dim_v, block_size, heads_kv, group, slots;
  int sequences;
  int64_t length;
  int with_count;
  selection_kind selection;
  int empty_percent;
  layout_kind layout;
  int scaled;
} case_row;

/* Every (dtype, head dims, block size) once with random selections, then the identities' and the long
 * cases. Slots beyond the available blocks are common (short sequences, 1 slot, ...). */
static const case_row case_rows[] = {
    {1, 64, 64, 32, 2, 1, 4, SEQS_SINGLE, 1, 0, SELECT_RANDOM, 0, LAYOUT_CONTIGUOUS, 0},
    {1, 64, 64, 64, 2, 4, 8, SEQS_SHORT_MIX, 0, 1, SELECT_RANDOM, 10, LAYOUT_PADDED, 0},
    {1, 64, 64, 128, 1, 16, 4, SEQS_LONG_MIX, 0, 0, SELECT_RANDOM, 0, LAYOUT_CONTIGUOUS, 1},
    {1, 128, 128, 32, 2, 4, 16, SEQS_SINGLE, 63, 1, SELECT_RANDOM, 0, LAYOUT_QKV, 0},
    {1, 128, 128, 64, 4, 1, 16, SEQS_SINGLE, 1000, 0, SELECT_RANDOM, 0, LAYOUT_PADDED, 0},
    {1, 128, 128, 128, 1, 64, 4, SEQS_SHORT_MIX, 0, 1, SELECT_RANDOM, 10, LAYOUT_CONTIGUOUS, 0},
    {1, 192, 128, 32, 1, 16, 32, SEQS_SINGLE, 65, 0, SELECT_RANDOM, 0, LAYOUT_QKV, 0},
    {1, 192, 128, 64, 1, 4, 16, SEQS_LONG_MIX, 0, 1, SELECT_RANDOM, 0, LAYOUT_PADDED, 0},
    {1, 192, 128, 128, 2, 1, 2, SEQS_SHORT_MIX, 0, 0, SELECT_RANDOM, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 64, 64, 32, 2, 4, 32, SEQS_LONG_MIX, 0, 1, SELECT_RANDOM, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 64, 64, 64, 1, 64, 4, SEQS_SINGLE, 64, 0, SELECT_RANDOM, 0, LAYOUT_QKV, 0},
    {0, 64, 64, 128, 3, 1, 8, SEQS_SHORT_MIX, 0, 1, SELECT_RANDOM, 0, LAYOUT_PADDED, 0},
    {0, 128, 128, 32, 1, 16, 16, SEQS_SHORT_MIX, 0, 0, SELECT_RANDOM, 10, LAYOUT_PADDED, 0},
    {0, 128, 128, 64, 2, 4, 1, SEQS_SINGLE, 65, 1, SELECT_RANDOM, 0, LAYOUT_QKV, 0},
    {0, 128, 128, 128, 2, 1, 16, SEQS_LONG_MIX, 0, 0, SELECT_RANDOM, 0, LAYOUT_CONTIGUOUS, 1},
    {0, 192, 128, 32, 2, 4, 8, SEQS_SHORT_MIX, 0, 1, SELECT_RANDOM, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 192, 128, 64, 1, 16, 8, SEQS_SINGLE, 1000, 0, SELECT_RANDOM, 0, LAYOUT_PADDED, 0},
    {0, 192, 128, 128, 1, 64, 4, SEQS_SINGLE, 63, 1, SELECT_RANDOM, 0, LAYOUT_QKV, 0},
    /* Every block: the dense identity (slots: the longest sequence's blocks, or more). */
    {1, 64, 64, 32, 2, 4, 8, SEQS_SHORT_MIX, 0, 1, SELECT_EVERY_BLOCK, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 128, 128, 64, 2, 1, 16, SEQS_SINGLE, 1000, 0, SELECT_EVERY_BLOCK, 0, LAYOUT_QKV, 0},
    {1, 192, 128, 128, 1, 16, 8, SEQS_LONG_MIX, 0, 0, SELECT_EVERY_BLOCK, 0, LAYOUT_PADDED, 0},
    {0, 64, 64, 64, 1, 64, 4, SEQS_SHORT_MIX, 0, 0, SELECT_EVERY_BLOCK, 0, LAYOUT_PADDED, 0},
    {0, 192, 128, 128, 1, 2, 33, SEQS_SINGLE, 4097, 1, SELECT_EVERY_BLOCK, 0, LAYOUT_CONTIGUOUS, 0},
    /* 4097 tokens with random selections. */
    {1, 128, 128, 64, 1, 4, 16, SEQS_SINGLE, 4097, 1, SELECT_RANDOM, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 64, 64, 32, 1, 16, 32, SEQS_SINGLE, 4097, 0, SELECT_RANDOM, 5, LAYOUT_PADDED, 0},
    /* Nothing selected anywhere: every output 0 (lse -inf); with block_cnt 0 over readable ids. */
    {0, 64, 64, 64, 2, 4, 4, SEQS_SHORT_MIX, 0, 0, SELECT_NOTHING, 0, LAYOUT_CONTIGUOUS, 0},
    {1, 128, 128, 32, 1, 4, 8, SEQS_SINGLE, 300, 1, SELECT_NOTHING, 0, LAYOUT_PADDED, 0},
    /* Blocks listed twice (the caller's error, but the header defines it: counted twice). */
    {1, 64, 64, 64, 2, 4, 8, SEQS_SHORT_MIX, 0, 1, SELECT_DUPLICATES, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 128, 128, 32, 1, 16, 16, SEQS_SINGLE, 1000, 0, SELECT_DUPLICATES, 0, LAYOUT_PADDED, 0},
    /* Hot blocks (NSA's fixed picks: block 0's list holds every token, past the index's sort tile of
     * 8192 and past 65536 tokens: split across dK/dV programs), every dtype and head-dim pair. */
    {1, 64, 64, 64, 2, 4, 3, SEQS_SINGLE, 8200, 0, SELECT_HOT, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 64, 64, 32, 1, 1, 3, SEQS_SINGLE, 65600, 1, SELECT_HOT, 0, LAYOUT_PADDED, 0},
    {0, 128, 128, 128, 1, 8, 4, SEQS_SINGLE, 8200, 1, SELECT_HOT, 0, LAYOUT_QKV, 0},
    {1, 128, 128, 64, 1, 1, 3, SEQS_SINGLE, 65600, 0, SELECT_HOT, 0, LAYOUT_CONTIGUOUS, 0},
    {1, 192, 128, 32, 1, 4, 4, SEQS_SINGLE, 8200, 0, SELECT_HOT, 0, LAYOUT_PADDED, 0},
    {0, 192, 128, 64, 1, 1, 3, SEQS_SINGLE, 65600, 0, SELECT_HOT, 0, LAYOUT_CONTIGUOUS, 0},
    /* Mostly empty rows (about a quarter of the slots valid), every dtype and head-dim pair. */
    {1, 64, 64, 32, 2, 16, 16, SEQS_SINGLE, 2000, 1, SELECT_SPARSE, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 64, 64, 128, 1, 4, 8, SEQS_LONG_MIX, 0, 0, SELECT_SPARSE, 0, LAYOUT_PADDED, 0},
    {1, 128, 128, 64, 1, 16, 16, SEQS_SINGLE, 2000, 0, SELECT_SPARSE, 0, LAYOUT_QKV, 0},
    {0, 128, 128, 32, 2, 4, 32, SEQS_SHORT_MIX, 0, 1, SELECT_SPARSE, 0, LAYOUT_CONTIGUOUS, 0},
    {1, 192, 128, 128, 1, 8, 16, SEQS_LONG_MIX, 0, 1, SELECT_SPARSE, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 192, 128, 64, 2, 4, 16, SEQS_SINGLE, 2000, 0, SELECT_SPARSE, 0, LAYOUT_PADDED, 0},
    /* A group of 64 with two kv heads (128 query heads). */
    {1, 128, 128, 64, 2, 64, 8, SEQS_SHORT_MIX, 0, 1, SELECT_RANDOM, 5, LAYOUT_PADDED, 0},
};

static void make_case(sel_case *c, const case_row *row, int index) {
  memset(c, 0, sizeof *c);
  c->dtype = row->bf16 ? AOTK_DTYPE_BFLOAT16 : AOTK_DTYPE_FLOAT16;
  c->head_dim_qk = row->head_dim_qk;
  c->head_dim_v = row->head_dim_v;
  c->block_size = row->block_size;
  c->heads_kv = row->heads_kv;
  c->group = row->group;
  c->slots = row->slots;
  set_sequences(c, row->sequences, row->length);
  c->with_count = row->with_count;
  c->selection = row->selection;
  c->empty_percent = row->empty_percent;
  c->layout = row->layout;
  c->softmax_scale = row->scaled ? 0.3f : 0.0f;
  c->max_seqlen_slack = index % 3 == 1 ? 7 : 0;
  c->seed = seed + (uint64_t)index * 1000003u;
  name_case(c);
}

/* ---- the calls that are not a numerics case ------------------------------------------------ */

/* A small valid problem for the tests below: bf16, d=64, varlen (40 x 100, 0 x 10, 70 x 200) + 2 unused
 * rows, heads 4/2, block size 32, 6 slots, a clean random selection with block_cnt. */
static const sel_case small_case = {
    .dtype = AOTK_DTYPE_BFLOAT16, .head_dim_qk = 64, .head_dim_v = 64, .block_size = 32, .slots = 6,
    .heads_kv = 2, .group = 2, .varlen = 1, .num_seqs = 3, .len_q = {40, 0, 70}, .len_k = {100, 10, 200},
    .with_count = 1, .selection = SELECT_RANDOM, .layout = LAYOUT_CONTIGUOUS, .name = "small"};

/* Elements of the output storages and lse no longer holding the poison. */
static int64_t written_count(sel_run *x) {
  int64_t poisoned = 0, total = 0;
  for (int s = 0; s < x->storage_count; s++) {
    storage *st = &x->storages[s];
    if (!st->is_output || !aotk_gpu_test_download(st->host, st->device, (size_t)st->elements * 2)) continue;
    for (int64_t e = 0; e < st->elements; e++) poisoned += st->host[e] == 0xffff;
    total += st->elements;
  }
  if (aotk_gpu_test_download(x->lse_host, x->lse_device, (size_t)(x->rows_q * x->heads_q) * 4)) {
    for (int64_t e = 0; e < x->rows_q * x->heads_q; e++) {
      uint32_t bits;
      memcpy(&bits, &x->lse_host[e], 4);
      poisoned += bits == 0xffffffffu;
    }
    total += x->rows_q * x->heads_q;
  }
  return total - poisoned; /* elements written */
}

/* Bad workspaces, misaligned tensors and a missing lse are refused before anything is launched: no
 * output element is written. */
static void test_refusals(void) {
  sel_case c = small_case;
  c.seed = seed ^ 0x5e1ull;
  sel_run x;
  if (!sel_run_create(&x, &c)) {
    sel_run_destroy(&x);
    return;
  }
  for (int s = 0; s < x.storage_count; s++) {
    if (x.storages[s].is_output) aotk_gpu_test_poison(x.storages[s].device, (size_t)x.storages[s].elements * 2);
  }
  aotk_gpu_test_poison(x.lse_device, (size_t)(x.rows_q * x.heads_q) * 4);
  aotk_gpu_test_settle();
  void *workspace = (void *)(uintptr_t)x.workspace;
  aotk_status status = aotk_sel_bwd(&x.params, workspace, x.workspace_bytes - 4, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL, "4 bytes short: %s", aotk_status_name(status));
  status = aotk_sel_bwd(&x.params, NULL, 0, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL, "NULL workspace: %s", aotk_status_name(status));
  status = aotk_sel_bwd(&x.params, (char *)workspace + 4, x.workspace_bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "workspace + 4: %s", aotk_status_name(status));
  aotk_sel_params params = x.params;
  memset(&params.lse, 0, sizeof params.lse);
  status = aotk_sel_bwd(&params, workspace, x.workspace_bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_NULL_POINTER, "backward without lse: %s", aotk_status_name(status));
  /* q 8 bytes past an aligned address (refused before anything reads it). */
  params = x.params;
  params.q.data = (char *)params.q.data + 8;
  status = aotk_sel_fwd(&params, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "q + 8 bytes: %s", aotk_status_name(status));
  /* k's token stride 8 elements short of a multiple of 16 (rows overlap; nothing is read). */
  params = x.params;
  params.k.strides[0] -= 8;
  status = aotk_sel_fwd(&params, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "k's token stride %lld: %s", (long long)params.k.strides[0],
            aotk_status_name(status));
  params = x.params;
  params.dv.data = (char *)params.dv.data + 2;
  status = aotk_sel_bwd(&params, workspace, x.workspace_bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "dv + 2 bytes: %s", aotk_status_name(status));
  params = x.params;
  params.block_size = 16;
  status = aotk_sel_fwd(&params, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "block_size 16: %s", aotk_status_name(status));
  aotk_gpu_test_synchronize("refused calls");
  int64_t written = written_count(&x);
  CHECK_MSG(written == 0, "refused calls wrote %lld output elements", (long long)written);
  sel_run_destroy(&x);
}

static size_t round_up16(size_t bytes) { return (bytes + 15) / 16 * 16; }

/* The queries on this GPU: kernel names, launches, workspace, and the forward's grid (one program
 * per (token, kv head) and group chunk). */
static void test_query_on_device(void) {
  const int64_t total_q = 8192, total_k = 8192, heads_q = 64, heads_kv = 4, slots = 16;
  aotk_sel_params params = AOTK_SEL_PARAMS_INIT;
  void *fake = (void *)(uintptr_t)0x100000;
  params.q = aotk_tensor_3d(fake, AOTK_DTYPE_BFLOAT16, total_q, heads_q, 128);
  params.k = aotk_tensor_3d(fake, AOTK_DTYPE_BFLOAT16, total_k, heads_kv, 128);
  params.v = params.k;
  params.out = params.q;
  params.lse = aotk_tensor_2d(fake, AOTK_DTYPE_FLOAT32, total_q, heads_q);
  params.dout = params.q;
  params.dq = params.q;
  params.dk = params.k;
  params.dv = params.k;
  params.block_size = 64;
  params.block_idx = aotk_tensor_3d(fake, AOTK_DTYPE_INT32, total_q, heads_kv, slots);
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_sel_query(AOTK_OP_SEL_FWD, &params, &info);
  CHECK_MSG(status == AOTK_OK, "forward: %s: %s", aotk_status_name(status), aotk_last_error());
  CHECK_MSG(strncmp(info.kernel_name, "sel_fwd_bf16_", 13) == 0, "forward kernel %s", info.kernel_name);
  CHECK(info.launches == 1 && info.workspace_bytes == 0);
  CHECK_MSG(info.grid >= total_q * heads_kv && info.grid % (total_q * heads_kv) == 0, "forward grid %lld",
            (long long)info.grid);
  printf("    forward: %s (sm_%d%s), %d warps, %d bytes shared, grid %lld\n", info.kernel_name, info.arch,
         info.from_ptx ? " PTX" : "", info.num_warps, info.shared_bytes, (long long)info.grid);
  info = (aotk_kernel_info)AOTK_KERNEL_INFO_INIT;
  status = aotk_sel_query(AOTK_OP_SEL_BWD, &params, &info);
  CHECK_MSG(status == AOTK_OK, "backward: %s: %s", aotk_status_name(status), aotk_last_error());
  CHECK_MSG(strncmp(info.kernel_name, "sel_bwd_dkdv_bf16_", 18) == 0, "backward kernel %s", info.kernel_name);
  /* The header's formula, each part rounded up to 16 bytes (one sequence: max_seqlen_k is total_k): delta,
   * list offsets, cursors and first records, the lists and the compacted rows, the partial records. */
  const size_t offsets_row = (size_t)((total_k + 63) / 64 + 1 + 3) / 4 * 4;
  const int64_t group = heads_q / heads_kv, by_pairs = (4096 + group - 1) / group,
                by_share = (heads_kv * total_q * slots + 511) / 512;
  const int64_t chunk_tokens = by_pairs > by_share ? by_pairs : by_share;
  int64_t max_chunks = (total_q + chunk_tokens - 1) / chunk_tokens;
  max_chunks = max_chunks < 1 ? 1 : max_chunks > 16 ? 16 : max_chunks;
  const int64_t records = max_chunks > 1 ? 2 * total_q * slots / chunk_tokens + 1 : 0;
  const size_t documented = round_up16((size_t)(4 * total_q * heads_q)) +
                            3 * round_up16(4 * (size_t)heads_kv * offsets_row) +
                            2 * round_up16((size_t)(4 * heads_kv * total_q * slots)) +
                            (size_t)(4 * heads_kv * records * 64 * (128 + 128));
  CHECK_MSG(info.launches == (max_chunks > 1 ? 8 : 7), "%d launches with at most %lld chunks per list",
            (int)info.launches, (long long)max_chunks);
  CHECK_MSG(info.workspace_bytes == documented, "workspace %zu bytes, the header's formula gives %zu",
            info.workspace_bytes, documented);
  printf("    backward: %s, %d warps, %d bytes shared, grid %lld, workspace %zu bytes\n", info.kernel_name,
         info.num_warps, info.shared_bytes, (long long)info.grid, info.workspace_bytes);
  status = aotk_sel_query(AOTK_OP_ATTN_FWD, &params, &info);
  CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "aotk_sel_query(AOTK_OP_ATTN_FWD): %s", aotk_status_name(status));
}

/* "token N" in the message, N not followed by another digit. */
static bool names_token(const char *message, int64_t token) {
  char needle[32];
  snprintf(needle, sizeof needle, "token %lld", (long long)token);
  for (const char *at = strstr(message, needle); at != NULL; at = strstr(at + 1, needle)) {
    char next = at[strlen(needle)];
    if (next < '0' || next > '9') return true;
  }
  return false;
}

static void expect_invalid(sel_run *x, const int32_t *idx, const int32_t *cnt, int64_t token, int64_t local,
                           const char *what) {
  const int64_t H = x->heads_kv, S = x->slots;
  CUdeviceptr idx_device = 0, cnt_device = 0;
  if (!aotk_gpu_test_upload(&idx_device, idx, (size_t)(x->rows_q * H * S) * 4)) return;
  aotk_sel_params params = x->params;
  params.block_idx.data = (void *)(uintptr_t)idx_device;
  if (cnt == NULL) {
    memset(&params.block_cnt, 0, sizeof params.block_cnt);
  } else if (aotk_gpu_test_upload(&cnt_device, cnt, (size_t)(x->rows_q * H) * 4)) {
    params.block_cnt.data = (void *)(uintptr_t)cnt_device;
  }
  if (aotk_gpu_test_settle()) {
    aotk_status status = aotk_sel_check_indices(&params, (void *)(uintptr_t)x->workspace, 16, (aotk_stream)stream);
    if (token < 0) {
      CHECK_MSG(status == AOTK_OK, "%s: %s: %s", what, aotk_status_name(status), aotk_last_error());
    } else {
      const char *message = aotk_last_error();
      CHECK_MSG(status == AOTK_ERROR_INVALID_INDICES, "%s: %s", what, aotk_status_name(status));
      CHECK_MSG(names_token(message, token) || names_token(message, local),
                "%s: the message does not name token %lld (local %lld): %s", what, (long long)token, (long long)local,
                message);
      printf("    %s: %s\n", what, message);
    }
  }
  aotk_gpu_test_free(&idx_device);
  aotk_gpu_test_free(&cnt_device);
}

/* The debug check: a clean index passes (with -1s, future blocks, duplicates and bad ids only past
 * the counts, and garbage in the unused rows); each kind of bad index fails naming its token; of two
 * bad rows, the first in token order is named. */
static void test_check_indices(void) {
  sel_case c = small_case;
  c.seed = seed ^ 0xc4eull;
  sel_run x;
  if (!sel_run_create(&x, &c)) {
    sel_run_destroy(&x);
    return;
  }
  const int64_t H = x.heads_kv, S = x.slots;
  int32_t *idx = host_alloc(x.rows_q * H * S, sizeof(int32_t));
  int32_t *cnt = host_alloc(x.rows_q * H, sizeof(int32_t));
  int32_t *bad_idx = host_alloc(x.rows_q * H * S, sizeof(int32_t));
  int32_t *bad_cnt = host_alloc(x.rows_q * H, sizeof(int32_t));
  if (idx == NULL || cnt == NULL || bad_idx == NULL || bad_cnt == NULL) goto done;
  /* Clean: per row, distinct blocks below ceil(len_k / BS) (future ones included) in the counted slots,
   * then -1s; past the count, repeats and ids out of range. Unused rows keep their garbage. */
  memcpy(idx, x.idx, (size_t)(x.rows_q * H * S) * 4);
  memcpy(cnt, x.cnt, (size_t)(x.rows_q * H) * 4);
  for (int64_t token = 0; token < x.total_q; token++) {
    const aotk__sel_reference_token where = aotk__sel_reference_locate(&x.problem, token);
    for (int64_t h = 0; h < H; h++) {
      int32_t *row = idx + (token * H + h) * S;
      const int64_t count = aotk__random_int(&x.state, 1, S - 1);
      for (int64_t s = 0; s < S; s++) row[s] = s < count ? -1 : (int32_t)aotk__random_int(&x.state, -5, where.num_blocks + 3);
      int64_t first = aotk__random_int(&x.state, 0, where.num_blocks - 1);
      for (int64_t s = 0; s < count && s < where.num_blocks; s += 2) row[s] = (int32_t)((first + s) % where.num_blocks);
      row[S - 1] = row[0]; /* a repeat past the count */
      cnt[token * H + h] = (int32_t)count;
    }
  }
  expect_invalid(&x, idx, cnt, -1, -1, "clean index with block_cnt");

  /* Row (token 45 = sequence 2's row 5, kv head 1). */
  const int64_t token = 45, local = 5, h = 1, num_blocks = (200 + 31) / 32;
  int32_t *row;
#define RESET()                                                     \
  do {                                                              \
    memcpy(bad_idx, idx, (size_t)(x.rows_q * H * S) * 4);            \
    memcpy(bad_cnt, cnt, (size_t)(x.rows_q * H) * 4);                \
    row = bad_idx + (token * H + h) * S;                            \
    bad_cnt[token * H + h] = (int32_t)S;                            \
    for (int64_t s = 0; s < S; s++) row[s] = -1;                     \
  } while (0)
  RESET();
  row[2] = -2;
  expect_invalid(&x, bad_idx, bad_cnt, token, local, "block id -2");
  RESET();
  row[3] = (int32_t)num_blocks;
  expect_invalid(&x, bad_idx, bad_cnt, token, local, "block id ceil(len_k / block_size)");
  RESET();
  row[0] = 3;
  row[4] = 3;
  expect_invalid(&x, bad_idx, bad_cnt, token, local, "a block listed twice");
  RESET();
  bad_cnt[token * H + h] = -1;
  expect_invalid(&x, bad_idx, bad_cnt, token, local, "block_cnt -1");
  RESET();
  bad_cnt[token * H + h] = (int32_t)S + 1;
  expect_invalid(&x, bad_idx, bad_cnt, token, local, "block_cnt slots + 1");
  /* Not errors: future blocks (token 40 = sequence 2's row 0, position 130: blocks 5 and 6 start at 160
   * and 192) and repeated -1s, all counted. */
  RESET();
  {
    static const int32_t future_row[6] = {6, -1, -1, 5, -1, 2};
    memcpy(bad_idx + (40 * H + 0) * S, future_row, sizeof future_row);
    bad_cnt[40 * H + 0] = 6;
  }
  expect_invalid(&x, bad_idx, bad_cnt, -1, -1, "future blocks and repeated -1s");
  /* Two bad rows: the first in token order is named (sequence 0's token 7, then token 45). */
  RESET();
  row[1] = 99;
  bad_idx[(7 * H + 0) * S + bad_cnt[7 * H + 0] - 1] = 4; /* 4 = ceil(100 / 32): out of range in sequence 0 */
  expect_invalid(&x, bad_idx, bad_cnt, 7, 7, "two bad rows");
  /* Without block_cnt every slot counts: the clean index's repeats and out-of-range ids past the
   * counts are now errors. */
  expect_invalid(&x, idx, NULL, 0, 0, "the clean index without block_cnt");
#undef RESET
  /* The check needs 16 bytes of workspace. */
  aotk_status status = aotk_sel_check_indices(&x.params, (void *)(uintptr_t)x.workspace, 8, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL, "8 bytes of workspace: %s", aotk_status_name(status));
done:
  free(idx);
  free(cnt);
  free(bad_idx);
  free(bad_cnt);
  sel_run_destroy(&x);
}

int main(void) {
  if (!aotk_gpu_test_setup()) return aotk_gpu_test_skip_all();
  RUN_TEST(test_query_on_device);
  RUN_TEST(test_refusals);
  RUN_TEST(test_check_indices);
  static sel_case cases[sizeof case_rows / sizeof case_rows[0]];
  for (size_t i = 0; i < sizeof case_rows / sizeof case_rows[0]; i++) {
    make_case(&cases[i], &case_rows[i], (int)i);
    aotk_test_run_with(cases[i].name, run_case, &cases[i]);
  }
  printf("worst error as a fraction of its bound: bf16 %.3f, fp16 %.3f\n", worst_fraction[AOTK_DTYPE_BFLOAT16],
         worst_fraction[AOTK_DTYPE_FLOAT16]);
  printf("    bf16: %s\n    fp16: %s\n", worst_case[AOTK_DTYPE_BFLOAT16], worst_case[AOTK_DTYPE_FLOAT16]);
  driver->cuStreamDestroy(stream);
  return aotk_test_finish();
}
