/* Selection attention (the selected-blocks branch of NSA): validation, kernel choice and launches.
 *
 * As for dense attention, a call validates everything before it touches the driver, so a bad argument
 * gets the same status with or without a GPU and nothing is launched or written. The kernels are in
 * kernels/sel_attn.py; the backward's workspace holds delta and the inverse (block -> tokens) index,
 * which five small kernels build before dQ and dK/dV run. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "aotk_driver.h"
#include "aotk_error.h"
#include "aotk_image.h"
#include "aotk_kernel_table.h"
#include "aotk_launch.h"
#include "aotk_tensor_validate.h"

/* A validated selection problem. */
typedef struct sel_problem {
  aotk_dtype dtype;
  int varlen;
  int64_t num_seqs;
  int64_t total_q, total_k;
  int64_t max_seqlen_k; /* the grid's bound on a sequence's keys: total_k without cu_seqlens */
  int64_t heads_q, heads_kv, group_size;
  int64_t head_dim_qk, head_dim_v;
  int64_t slots;
  int32_t block_size;
  float softmax_scale;
  int write_lse;
  int block_cnt;
  int backward;
} sel_problem;

static const char *const sel_q_layout = "[total_q, heads_q, head_dim_qk]";
static const char *const sel_k_layout = "[total_k, heads_kv, head_dim_qk]";
static const char *const sel_v_layout = "[total_k, heads_kv, head_dim_v]";
static const char *const sel_out_layout = "[total_q, heads_q, head_dim_v]";

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* One [rows, heads, dim] tensor: its own checks, q's dtype, each size, and (for the kernels' 16-byte
 * vector loads) alignment. Token strides are passed as int64 and head strides as int32, so the span
 * of one token's heads must fit in int32. */
static aotk_status check_packed(const aotk_tensor *t, const char *name, const char *layout, aotk_dtype dtype,
                                int64_t rows, const char *rows_source, int64_t heads, const char *heads_source,
                                int64_t dim, const char *dim_source, int is_output) {
  aotk_status status = aotk__check_tensor(t, name, 3, layout);
  if (status != AOTK_OK) return status;
  if ((status = aotk__check_same_dtype(t, name, dtype, "q")) != AOTK_OK) return status;
  const int64_t expected[3] = {rows, heads, dim};
  const char *const sources[3] = {rows_source, heads_source, dim_source};
  for (int i = 0; i < 3; i++) {
    if (sources[i] != NULL &&
        (status = aotk__check_dim(t, name, i, expected[i], sources[i], layout,
                                  i == 2 ? AOTK_ERROR_HEAD_DIM_MISMATCH : AOTK_ERROR_SHAPE_MISMATCH)) != AOTK_OK) {
      return status;
    }
  }
  if (is_output && (status = aotk__check_output_strides(t, name)) != AOTK_OK) return status;
  if ((t->shape[1] - 1) * t->strides[1] + t->shape[2] > INT32_MAX) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "%s: one token's heads span more than 2^31 elements", name);
  }
  return AOTK_OK;
}

/* Checked after the head dims, so that an unsupported head dim (72, say, whose contiguous strides are
 * not multiples of 16) is reported as such. */
static aotk_status check_aligned(const aotk_tensor *t, const char *name) {
  if (aotk__tensor_aligned16(t)) return AOTK_OK;
  return aotk__fail(AOTK_ERROR_MISALIGNED_POINTER,
                    "%s: data = %p, strides (%lld, %lld): selection attention needs a 16-byte-aligned pointer and "
                    "strides that are multiples of 16 elements",
                    name, t->data, (long long)t->strides[0], (long long)t->strides[1]);
}

/* An int32 or fp32 tensor [total_q, heads(, slots)] with a contiguous last dimension. */
static aotk_status check_per_token(const aotk_tensor *t, const char *name, const char *layout, aotk_dtype dtype,
                                   int rank, int64_t total_q, int64_t heads, const char *heads_name) {
  aotk_status status = aotk__check_tensor(t, name, rank, layout);
  if (status != AOTK_OK) return status;
  if (t->dtype != dtype) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_DTYPE, "%s.dtype = %s; it is %s %s", name, aotk__dtype_name(t->dtype),
                      aotk__dtype_name(dtype), layout);
  }
  if ((status = aotk__check_dim(t, name, 0, total_q, "q.shape[0]", "total_q", AOTK_ERROR_SHAPE_MISMATCH)) != AOTK_OK ||
      (status = aotk__check_dim(t, name, 1, heads, heads_name, NULL, AOTK_ERROR_SHAPE_MISMATCH)) != AOTK_OK) {
    return status;
  }
  if ((t->shape[1] - 1) * t->strides[1] + (rank == 3 ? t->shape[2] : 1) > INT32_MAX) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "%s: one token's entries span more than 2^31 elements", name);
  }
  return AOTK_OK;
}

static aotk_status sel_validate(const aotk_sel_params *caller_params, int backward, aotk_sel_params *params,
                                sel_problem *problem) {
  if (caller_params == NULL) return aotk__fail(AOTK_ERROR_NULL_POINTER, "params is NULL");
  const size_t size = caller_params->struct_size;
  if (size < sizeof(aotk_sel_params) || size > (size_t)1 << 20) {
    return aotk__fail(AOTK_ERROR_STRUCT_SIZE, "params->struct_size = %zu; expected %zu (use AOTK_SEL_PARAMS_INIT)",
                      size, sizeof(aotk_sel_params));
  }
  memcpy(params, caller_params, sizeof *params);
  memset(problem, 0, sizeof *problem);
  problem->backward = backward;

  aotk_status status;
  const aotk_tensor *q = &params->q, *k = &params->k, *v = &params->v;
  const int varlen = params->cu_seqlens_q.data != NULL || params->cu_seqlens_k.data != NULL;
  if (varlen) {
    if ((status = aotk__check_cu_seqlens_pair(&params->cu_seqlens_q, &params->cu_seqlens_k)) != AOTK_OK) return status;
    if (params->max_seqlen_k < 1) {
      return aotk__fail(AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_k = %d: with cu_seqlens it must be >= 1",
                        (int)params->max_seqlen_k);
    }
  }
  if ((status = aotk__check_tensor(q, "q", 3, sel_q_layout)) != AOTK_OK) return status;
  if (q->dtype != AOTK_DTYPE_FLOAT16 && q->dtype != AOTK_DTYPE_BFLOAT16) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype = %s; selection attention takes float16 or bfloat16",
                      aotk__dtype_name(q->dtype));
  }
  const aotk_dtype dtype = q->dtype;
  const int64_t total_q = q->shape[0], heads_q = q->shape[1], head_dim_qk = q->shape[2];
  if ((status = check_packed(q, "q", sel_q_layout, dtype, total_q, NULL, heads_q, NULL, head_dim_qk, NULL, 0)) !=
      AOTK_OK) {
    return status;
  }
  if ((status = aotk__check_tensor(k, "k", 3, sel_k_layout)) != AOTK_OK) return status;
  const int64_t total_k = k->shape[0], heads_kv = k->shape[1];
  if ((status = check_packed(k, "k", sel_k_layout, dtype, total_k, NULL, heads_kv, NULL, head_dim_qk, "q.shape[2]",
                             0)) != AOTK_OK ||
      (status = aotk__check_tensor(v, "v", 3, sel_v_layout)) != AOTK_OK) {
    return status;
  }
  const int64_t head_dim_v = v->shape[2];
  if ((status = check_packed(v, "v", sel_v_layout, dtype, total_k, "k.shape[0]", heads_kv, "k.shape[1]", head_dim_v,
                             NULL, 0)) != AOTK_OK ||
      (status = check_packed(&params->out, "out", sel_out_layout, dtype, total_q, "q.shape[0]", heads_q, "q.shape[1]",
                             head_dim_v, "v.shape[2]", 1)) != AOTK_OK) {
    return status;
  }
  if (heads_q % heads_kv != 0) {
    return aotk__fail(AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_q = %lld is not a multiple of heads_kv = %lld",
                      (long long)heads_q, (long long)heads_kv);
  }
  if (!((head_dim_qk == 64 && head_dim_v == 64) || (head_dim_qk == 128 && head_dim_v == 128) ||
        (head_dim_qk == 192 && head_dim_v == 128))) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_HEAD_DIM,
                      "head_dim_qk = %lld, head_dim_v = %lld; selection attention runs (64, 64), (128, 128) and "
                      "(192, 128)",
                      (long long)head_dim_qk, (long long)head_dim_v);
  }
  if ((status = check_aligned(q, "q")) != AOTK_OK || (status = check_aligned(k, "k")) != AOTK_OK ||
      (status = check_aligned(v, "v")) != AOTK_OK || (status = check_aligned(&params->out, "out")) != AOTK_OK) {
    return status;
  }
  if (params->lse.data != NULL) {
    if ((status = check_per_token(&params->lse, "lse", "[total_q, heads_q]", AOTK_DTYPE_FLOAT32, 2, total_q, heads_q,
                                  "heads_q")) != AOTK_OK ||
        (status = aotk__check_output_strides(&params->lse, "lse")) != AOTK_OK) {
      return status;
    }
  } else if (backward) {
    return aotk__fail(AOTK_ERROR_NULL_POINTER, "lse.data is NULL: the backward needs the forward's lse");
  }
  if (params->block_idx.data == NULL) return aotk__fail(AOTK_ERROR_NULL_POINTER, "block_idx.data is NULL");
  if ((status = check_per_token(&params->block_idx, "block_idx", "[total_q, heads_kv, slots]", AOTK_DTYPE_INT32, 3,
                                total_q, heads_kv, "k.shape[1] (heads_kv)")) != AOTK_OK) {
    return status;
  }
  const int64_t slots = params->block_idx.shape[2];
  if (params->block_cnt.data != NULL &&
      (status = check_per_token(&params->block_cnt, "block_cnt", "[total_q, heads_kv]", AOTK_DTYPE_INT32, 2, total_q,
                                heads_kv, "k.shape[1] (heads_kv)")) != AOTK_OK) {
    return status;
  }
  if (params->block_size != 32 && params->block_size != 64 && params->block_size != 128) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "block_size = %d; use 32, 64 or 128", (int)params->block_size);
  }
  /* The forward and dQ address a selected block's key rows from its first in 32 bits. */
  for (int i = 0; i < 2; i++) {
    const aotk_tensor *t = i == 0 ? &params->k : &params->v;
    if (t->strides[0] > INT32_MAX / params->block_size) {
      return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW,
                        "%s.strides[0] = %lld: a block of %d tokens spans more than 2^31 elements; the kernels address "
                        "a block's rows with 32 bits",
                        i == 0 ? "k" : "v", (long long)t->strides[0], (int)params->block_size);
    }
  }
  float scale = params->softmax_scale;
  if (scale == 0.0f) {
    scale = 1.0f / sqrtf((float)head_dim_qk);
  } else if (!(scale > 0.0f) || !isfinite(scale)) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "softmax_scale = %g; use 0 (default) or a finite positive value",
                      (double)scale);
  }
  const int64_t num_seqs = varlen ? params->cu_seqlens_q.shape[0] - 1 : 1;
  const int64_t max_seqlen_k = varlen ? params->max_seqlen_k : total_k;
  const int64_t group_size = heads_q / heads_kv;
  /* The kernels' int32 arithmetic: lengths and token indices; a block's token list (up to total_q *
   * slots entries, times the group's heads as rows); the index's slots per kv head; the grids. */
  int64_t pairs, index_slots, grid;
  /* Margins: the index passes address whole chunks of 1024 entries, and the offsets rows are padded
   * to a multiple of 4 plus one. */
  if (total_q > INT32_MAX - 256 || total_k > INT32_MAX - 256 || num_seqs > INT32_MAX ||
      __builtin_mul_overflow(total_q * slots, group_size, &pairs) || pairs > INT32_MAX - 4096 ||
      __builtin_mul_overflow(num_seqs, ceil_div(max_seqlen_k, params->block_size), &index_slots) ||
      index_slots > INT32_MAX - 8 || (index_slots + 8) * heads_kv > INT32_MAX / 2 ||
      __builtin_mul_overflow(total_q, heads_q, &grid) || grid > INT32_MAX ||
      __builtin_mul_overflow(num_seqs * heads_kv, ceil_div(max_seqlen_k, 32), &grid) || grid > INT32_MAX / 2) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW,
                      "total_q = %lld, total_k = %lld, slots = %lld, group size %lld, %lld sequences of up to %lld "
                      "keys: the selection kernels index these with 32 bits (total_q * slots * group size and "
                      "total_q * heads_q must stay under 2^31, num_seqs * heads_kv * ceil(max_seqlen_k / 32) "
                      "under 2^30)",
                      (long long)total_q, (long long)total_k, (long long)slots, (long long)group_size,
                      (long long)num_seqs, (long long)max_seqlen_k);
  }

  if (backward) {
    /* Each gradient is like its tensor; messages name the size's source tensor. */
    struct {
      const aotk_tensor *tensor;
      const char *name, *layout;
      int64_t rows, heads, dim;
      const char *rows_source, *heads_source, *dim_source;
      int is_output;
    } const checks[] = {
        {&params->dout, "dout", sel_out_layout, total_q, heads_q, head_dim_v, "q.shape[0]", "q.shape[1]", "v.shape[2]", 0},
        {&params->dq, "dq", sel_q_layout, total_q, heads_q, head_dim_qk, "q.shape[0]", "q.shape[1]", "q.shape[2]", 1},
        {&params->dk, "dk", sel_k_layout, total_k, heads_kv, head_dim_qk, "k.shape[0]", "k.shape[1]", "k.shape[2]", 1},
        {&params->dv, "dv", sel_v_layout, total_k, heads_kv, head_dim_v, "v.shape[0]", "v.shape[1]", "v.shape[2]", 1},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
      if ((status = check_packed(checks[i].tensor, checks[i].name, checks[i].layout, dtype, checks[i].rows,
                                 checks[i].rows_source, checks[i].heads, checks[i].heads_source, checks[i].dim,
                                 checks[i].dim_source, checks[i].is_output)) != AOTK_OK ||
          (status = check_aligned(checks[i].tensor, checks[i].name)) != AOTK_OK) {
        return status;
      }
    }
  }

  problem->dtype = dtype;
  problem->varlen = varlen;
  problem->num_seqs = num_seqs;
  problem->total_q = total_q;
  problem->total_k = total_k;
  problem->max_seqlen_k = max_seqlen_k;
  problem->heads_q = heads_q;
  problem->heads_kv = heads_kv;
  problem->group_size = group_size;
  problem->head_dim_qk = head_dim_qk;
  problem->head_dim_v = head_dim_v;
  problem->slots = slots;
  problem->block_size = params->block_size;
  problem->softmax_scale = scale;
  problem->write_lse = params->lse.data != NULL;
  problem->block_cnt = params->block_cnt.data != NULL;
  return AOTK_OK;
}

/* --- the workspace -------------------------------------------------------------------------------
 * delta    fp32 [total_q, heads_q]                       rowsum(dO * O), staged by the dQ pass
 * offsets  int32 [heads_kv, offsets_stride]              per index slot, where its token list starts
 * cursors  int32 [heads_kv, offsets_stride]              the scatter pass's next free position per slot
 * chunks   int32 [heads_kv, offsets_stride]              per index slot, its first partial record
 * tokens   int32 [heads_kv, total_q * slots]             the lists, each in token order
 * compact  int32 [total_q, heads_kv, slots]              per token, its valid block ids in slot order
 *                                                        (dQ's: a 16-slot tile with invalid slots leaves
 *                                                        its valid ids here and reads them back)
 * partials fp32 [heads_kv, partials_per_head, block_size, head_dim_qk + head_dim_v]   the split lists'
 *                                                        partial dK/dV, one record per chunk
 * Index slot n * ceil(max_seqlen_k / block_size) + b is sequence n's block b. Each part starts
 * 16-byte aligned.
 *
 * The split (kernels/sel_attn.py, sel_bwd_dkdv): a block's list of L tokens runs in min(max_chunks,
 * ceil(L / chunk_tokens)) programs. chunk_tokens is about 1/512 of all the kv heads' index entries (at
 * least 4096 (token, query head) pairs), so that no program holds more than a small share of the
 * backward's work however the selection concentrates on a few blocks (NSA's first block is selected by
 * every token). A list split in c > 1 chunks has L > chunk_tokens and c < 2 L / chunk_tokens, so a kv
 * head's records number under 2 * total_q * slots / chunk_tokens: at most about 1024 / heads_kv + 1 records
 * per kv head, 1024 + heads_kv in all (64 MiB at head dim 128, block 64), whatever the problem's size. */
static size_t round16(size_t bytes) { return (bytes + 15) & ~(size_t)15; }
static int64_t index_slots(const sel_problem *p) { return p->num_seqs * ceil_div(p->max_seqlen_k, p->block_size); }
static int64_t offsets_stride(const sel_problem *p) { return (index_slots(p) + 1 + 3) & ~(int64_t)3; }
static size_t delta_bytes(const sel_problem *p) { return round16((size_t)(p->total_q * p->heads_q) * sizeof(float)); }
static size_t offsets_bytes(const sel_problem *p) {
  return round16((size_t)(p->heads_kv * offsets_stride(p)) * sizeof(int32_t));
}
static size_t tokens_bytes(const sel_problem *p) {
  return round16((size_t)(p->heads_kv * p->total_q * p->slots) * sizeof(int32_t));
}
static int64_t chunk_tokens(const sel_problem *p) {
  int64_t by_pairs = ceil_div(4096, p->group_size);
  int64_t by_share = ceil_div(p->heads_kv * p->total_q * p->slots, 512);
  int64_t tokens = by_pairs > by_share ? by_pairs : by_share;
  return tokens < INT32_MAX / 4 ? tokens : INT32_MAX / 4;
}
static int64_t max_chunks(const sel_problem *p) {
  int64_t most = ceil_div(p->total_q, chunk_tokens(p));
  /* The dK/dV grid (key tiles of at least 32 keys, times the chunks) stays a valid grid size. */
  int64_t fit = INT32_MAX / (p->heads_kv * p->num_seqs * ceil_div(p->max_seqlen_k, 32));
  if (most > fit) most = fit;
  return most < 1 ? 1 : most > 16 ? 16 : most;
}
static int64_t partials_per_head(const sel_problem *p) {
  return max_chunks(p) > 1 ? 2 * p->total_q * p->slots / chunk_tokens(p) + 1 : 0;
}
static size_t partials_bytes(const sel_problem *p) {
  return (size_t)(p->heads_kv * partials_per_head(p) * p->block_size * (p->head_dim_qk + p->head_dim_v)) *
         sizeof(float);
}
static size_t bwd_workspace_bytes(const sel_problem *p) {
  return delta_bytes(p) + 3 * offsets_bytes(p) + 2 * tokens_bytes(p) + partials_bytes(p);
}
#define CHECK_WORKSPACE_BYTES 16

static aotk_status check_workspace(const void *workspace, size_t workspace_bytes, size_t needed) {
  return aotk__check_workspace(workspace, workspace_bytes, needed, "", "aotk_sel_query reports it");
}

/* --- kernel choice ------------------------------------------------------------------------------ */

/* The row of `family` for the problem: the variant (dtype, head dims, block size; the index helpers
 * have none), then the tuning rule on the group size (the largest min_seqlen it reaches). */
static aotk_status choose_sel_kernel(int family, const sel_problem *p, const aotk__device_info *device, int *row,
                                     aotk__image_kind *kind) {
  int arch;
  aotk_status status = aotk__choose_target(device, &arch, kind);
  if (status != AOTK_OK) return status;
  const int helper = family != AOTK__FAMILY_SEL_FWD && family != AOTK__FAMILY_SEL_BWD_DQ &&
                     family != AOTK__FAMILY_SEL_BWD_DKDV;
  /* The forward's and dK/dV's aligned variant assumes a group size that is a multiple of 16. */
  const int aligned = (family == AOTK__FAMILY_SEL_FWD || family == AOTK__FAMILY_SEL_BWD_DKDV) &&
                      p->group_size % 16 == 0;
  int best = -1;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (e->family != family || e->arch != arch || e->aligned != aligned) continue;
    if (!helper && (e->dtype != (int)p->dtype || e->head_dim_qk != p->head_dim_qk || e->head_dim_v != p->head_dim_v ||
                    e->block_size != p->block_size)) {
      continue;
    }
    if (e->min_seqlen > p->group_size) continue;
    if (best < 0 || e->min_seqlen > aotk__kernel_table[best].min_seqlen) best = i;
  }
  if (best < 0) {
    return aotk__fail(AOTK_ERROR_KERNEL_NOT_BUILT,
                      "no sm_%d %s kernel for %s, head dims %lld/%lld, block size %d, group size %lld in this build%s%s%s",
                      arch, aotk__family_name(family), aotk__dtype_name(p->dtype), (long long)p->head_dim_qk,
                      (long long)p->head_dim_v, (int)p->block_size, (long long)p->group_size,
                      aotk__kernel_filter[0] ? " (built with the filter " : "",
                      aotk__kernel_filter, aotk__kernel_filter[0] ? ")" : "");
  }
  if ((status = aotk__check_row_runs(best, *kind, device)) != AOTK_OK) return status;
  *row = best;
  return AOTK_OK;
}

enum { PLAN_FWD, PLAN_ZERO, PLAN_COUNT, PLAN_SCAN, PLAN_SCATTER, PLAN_ORDER, PLAN_DQ, PLAN_DKDV, PLAN_ROWS };

typedef struct sel_plan {
  aotk__device_info device;
  const aotk__driver *driver;
  aotk__image_kind kind;
  int rows[PLAN_ROWS]; /* the forward uses rows[PLAN_FWD] only */
} sel_plan;

/* `stream` is checked to belong to the current context before the kernels are chosen for its device
 * (aotk__check_stream_context); the query, which launches nothing, passes NULL. */
static aotk_status plan_sel(const sel_problem *p, aotk_stream stream, sel_plan *plan) {
  aotk_status status = aotk__driver_get(&plan->driver);
  if (status != AOTK_OK) return status;
  if ((status = aotk__current_device(plan->driver, &plan->device)) != AOTK_OK ||
      (status = aotk__check_stream_context(plan->driver, &plan->device, stream)) != AOTK_OK) {
    return status;
  }
  if (!p->backward) return choose_sel_kernel(AOTK__FAMILY_SEL_FWD, p, &plan->device, &plan->rows[PLAN_FWD], &plan->kind);
  static const int families[PLAN_ROWS] = {0,
                                          AOTK__FAMILY_SEL_INDEX_ZERO,
                                          AOTK__FAMILY_SEL_INDEX_COUNT,
                                          AOTK__FAMILY_SEL_INDEX_SCAN,
                                          AOTK__FAMILY_SEL_INDEX_SCATTER,
                                          AOTK__FAMILY_SEL_INDEX_ORDER,
                                          AOTK__FAMILY_SEL_BWD_DQ,
                                          AOTK__FAMILY_SEL_BWD_DKDV};
  for (int i = PLAN_ZERO; i < PLAN_ROWS; i++) {
    if ((status = choose_sel_kernel(families[i], p, &plan->device, &plan->rows[i], &plan->kind)) != AOTK_OK) {
      return status;
    }
  }
  return AOTK_OK;
}

/* --- launches ------------------------------------------------------------------------------------ */

/* Parameter kinds, in the catalog's order (codegen/aotk_catalog.py): p pointer, l int64, i int32,
 * f fp32. "li" is a packed tensor's (token: int64, head: int32) strides. */
#define PACKED "li"
static const char sel_fwd_param_kinds[] = "ppppp" "pp" "pp" PACKED PACKED PACKED PACKED PACKED "lili" "iiiiiiii" "f";
static const char sel_bwd_dq_param_kinds[] = "ppppppp" "p" "pp" "pp" "p" PACKED PACKED PACKED PACKED PACKED PACKED
                                             PACKED "lili" "iiiiiiiii" "ff";
static const char sel_bwd_dkdv_param_kinds[] = "pppppppp" "pp" "pp" "pp" PACKED PACKED PACKED PACKED PACKED PACKED
                                               PACKED "il" "iiiiiiiiiii" "ff";
static const char sel_index_zero_param_kinds[] = "p" "i";
static const char sel_index_count_param_kinds[] = "pp" "pp" "p" "lili" "i" "iiiiiiiii";
static const char sel_index_scan_param_kinds[] = "ppp" "iiii";
static const char sel_index_scatter_param_kinds[] = "pp" "pp" "pp" "lili" "il" "iiiiiiiii";
static const char sel_index_order_param_kinds[] = "pp" "pp" "pp" "lili" "il" "iiiiiii";
static const char sel_check_indices_param_kinds[] = "pp" "pp" "p" "lili" "iiiiiiii";
#undef PACKED

/* Bits of the kernels' flags (kernels/sel_attn.py): attn_common.py's WRITE_LSE and VARLEN, and two of its own. */
enum { SEL_FLAG_WRITE_LSE = 1, SEL_FLAG_VARLEN = 2, SEL_FLAG_BLOCK_CNT = 256, SEL_FLAG_DKDV_REDUCE = 512 };

/* A packed tensor as the kernels take it. */
typedef struct packed {
  CUdeviceptr pointer;
  int64_t stride_token;
  int32_t stride_head;
} packed;

static packed pack(const aotk_tensor *t) {
  packed p = {0, 0, 0};
  if (t->data == NULL) return p; /* absent: whatever else the caller left in it is not passed on */
  p.pointer = (CUdeviceptr)(uintptr_t)t->data;
  p.stride_token = t->strides[0];
  p.stride_head = (int32_t)t->strides[1];
  return p;
}

#define PTR(p) &(p).pointer
#define STRIDES(p) &(p).stride_token, &(p).stride_head

/* The arguments every selection kernel shares. */
typedef struct common_args {
  CUdeviceptr cu_seqlens_q, cu_seqlens_k;
  packed block_idx, block_cnt;
  int32_t num_seqs, total_q, total_k, max_seqlen_k, heads_q, heads_kv, group_size, slots, block_size, flags;
  float qk_scale_log2, softmax_scale;
} common_args;

static common_args make_common(const aotk_sel_params *params, const sel_problem *p) {
  common_args a;
  memset(&a, 0, sizeof a);
  a.cu_seqlens_q = (CUdeviceptr)(uintptr_t)params->cu_seqlens_q.data;
  a.cu_seqlens_k = (CUdeviceptr)(uintptr_t)params->cu_seqlens_k.data;
  a.block_idx = pack(&params->block_idx);
  a.block_cnt = pack(&params->block_cnt);
  a.num_seqs = (int32_t)p->num_seqs;
  a.total_q = (int32_t)p->total_q;
  a.total_k = (int32_t)p->total_k;
  a.max_seqlen_k = (int32_t)p->max_seqlen_k;
  a.heads_q = (int32_t)p->heads_q;
  a.heads_kv = (int32_t)p->heads_kv;
  a.group_size = (int32_t)p->group_size;
  a.slots = (int32_t)p->slots;
  a.block_size = p->block_size;
  a.flags = (p->varlen ? SEL_FLAG_VARLEN : 0) | (p->write_lse ? SEL_FLAG_WRITE_LSE : 0) |
            (p->block_cnt ? SEL_FLAG_BLOCK_CNT : 0);
  a.softmax_scale = p->softmax_scale;
  a.qk_scale_log2 = p->softmax_scale * 1.4426950408889634f;
  return a;
}

static int64_t group_chunks(const sel_problem *p, const aotk__kernel_entry *e) { return ceil_div(p->group_size, e->block_m); }

static int64_t fwd_grid(const sel_problem *p, const aotk__kernel_entry *e) {
  return p->heads_kv * p->total_q * group_chunks(p, e);
}

static int64_t dkdv_tiles(const sel_problem *p, const aotk__kernel_entry *e) {
  return p->heads_kv * p->num_seqs * ceil_div(p->max_seqlen_k, e->block_n);
}

static int64_t dkdv_grid(const sel_problem *p, const aotk__kernel_entry *e) { return dkdv_tiles(p, e) * max_chunks(p); }

static aotk_status launch_sel_fwd(const aotk_sel_params *params, const sel_problem *p, const sel_plan *plan,
                                  aotk_stream stream) {
  const int row = plan->rows[PLAN_FWD];
  const aotk__kernel_entry *e = &aotk__kernel_table[row];
  const char *const kinds[] = {sel_fwd_param_kinds};
  CUkernel kernel;
  aotk_status status = aotk__load_rows(plan->driver, &row, kinds, 1, plan->kind, plan->device.device, &kernel);
  if (status != AOTK_OK) return status;
  common_args a = make_common(params, p);
  packed q = pack(&params->q), k = pack(&params->k), v = pack(&params->v), o = pack(&params->out);
  packed lse = pack(&params->lse);
  int32_t chunks = (int32_t)group_chunks(p, e);
  void *args[] = {PTR(q), PTR(k), PTR(v), PTR(o), PTR(lse), &a.cu_seqlens_q, &a.cu_seqlens_k, PTR(a.block_idx),
                  PTR(a.block_cnt), STRIDES(q), STRIDES(k), STRIDES(v), STRIDES(o), STRIDES(lse),
                  STRIDES(a.block_idx), STRIDES(a.block_cnt), &a.num_seqs, &a.total_q, &a.total_k, &a.max_seqlen_k,
                  &a.group_size, &chunks, &a.slots, &a.flags, &a.qk_scale_log2};
  _Static_assert(sizeof args / sizeof args[0] == sizeof sel_fwd_param_kinds - 1, "one argument per parameter");
  return aotk__launch_row(plan->driver, row, kernel, sizeof args / sizeof args[0], args, fwd_grid(p, e), stream);
}

static aotk_status launch_sel_bwd(const aotk_sel_params *params, const sel_problem *p, const sel_plan *plan,
                                  void *workspace, aotk_stream stream) {
  const char *const kinds[PLAN_ROWS] = {NULL,
                                        sel_index_zero_param_kinds,
                                        sel_index_count_param_kinds,
                                        sel_index_scan_param_kinds,
                                        sel_index_scatter_param_kinds,
                                        sel_index_order_param_kinds,
                                        sel_bwd_dq_param_kinds,
                                        sel_bwd_dkdv_param_kinds};
  CUkernel kernels[PLAN_ROWS];
  aotk_status status = aotk__load_rows(plan->driver, plan->rows + PLAN_ZERO, kinds + PLAN_ZERO, PLAN_ROWS - PLAN_ZERO,
                                       plan->kind, plan->device.device, kernels + PLAN_ZERO);
  if (status != AOTK_OK) return status;
  common_args a = make_common(params, p);
  packed q = pack(&params->q), k = pack(&params->k), v = pack(&params->v), o = pack(&params->out);
  packed lse = pack(&params->lse), dout = pack(&params->dout), dq = pack(&params->dq), dk = pack(&params->dk);
  packed dv = pack(&params->dv);
  CUdeviceptr delta = (CUdeviceptr)(uintptr_t)workspace;
  CUdeviceptr offsets = delta + delta_bytes(p);
  CUdeviceptr cursors = offsets + offsets_bytes(p);
  CUdeviceptr chunks_first = cursors + offsets_bytes(p);
  CUdeviceptr tokens = chunks_first + offsets_bytes(p);
  CUdeviceptr compact = tokens + tokens_bytes(p);
  /* No records (no list can be split): no pointer past the workspace's end, but NULL. */
  CUdeviceptr partials = partials_bytes(p) > 0 ? compact + tokens_bytes(p) : 0;
  int32_t split_tokens = (int32_t)chunk_tokens(p), split_most = (int32_t)max_chunks(p);
  int32_t records_per_head = (int32_t)partials_per_head(p);
  int32_t stride_offsets = (int32_t)offsets_stride(p);
  int64_t stride_tokens = p->total_q * p->slots;
  /* The packed-token binary search of the count and scatter passes: steps enough for num_seqs. */
  int32_t search_steps = 1;
  while (((int64_t)1 << search_steps) < p->num_seqs) search_steps++;

  /* The inverse index: zero, count, prefix sum (and the split lists' partial records), scatter, order. */
  const aotk__kernel_entry *zero_entry = &aotk__kernel_table[plan->rows[PLAN_ZERO]];
  int32_t zero_count = (int32_t)(p->heads_kv * offsets_stride(p));
  void *zero_args[] = {&offsets, &zero_count};
  _Static_assert(sizeof zero_args / sizeof zero_args[0] == sizeof sel_index_zero_param_kinds - 1, "one per parameter");
  if ((status = aotk__launch_row(plan->driver, plan->rows[PLAN_ZERO], kernels[PLAN_ZERO], 2, zero_args,
                                 ceil_div(zero_count, zero_entry->block_m), stream)) != AOTK_OK) {
    return status;
  }
  const aotk__kernel_entry *count_entry = &aotk__kernel_table[plan->rows[PLAN_COUNT]];
  int32_t entry_chunks = (int32_t)ceil_div(p->total_q * p->slots, count_entry->block_m);
  void *count_args[] = {PTR(a.block_idx), PTR(a.block_cnt), &a.cu_seqlens_q, &a.cu_seqlens_k, &offsets,
                        STRIDES(a.block_idx), STRIDES(a.block_cnt), &stride_offsets, &a.num_seqs, &a.total_q,
                        &a.total_k, &a.max_seqlen_k, &a.block_size, &a.slots, &entry_chunks, &search_steps, &a.flags};
  _Static_assert(sizeof count_args / sizeof count_args[0] == sizeof sel_index_count_param_kinds - 1, "one per parameter");
  if ((status = aotk__launch_row(plan->driver, plan->rows[PLAN_COUNT], kernels[PLAN_COUNT],
                                 sizeof count_args / sizeof count_args[0], count_args, p->heads_kv * entry_chunks, stream)) !=
      AOTK_OK) {
    return status;
  }
  int32_t slots_total = (int32_t)index_slots(p);
  void *scan_args[] = {&offsets, &cursors, &chunks_first, &stride_offsets, &slots_total, &split_tokens, &split_most};
  _Static_assert(sizeof scan_args / sizeof scan_args[0] == sizeof sel_index_scan_param_kinds - 1, "one per parameter");
  if ((status = aotk__launch_row(plan->driver, plan->rows[PLAN_SCAN], kernels[PLAN_SCAN],
                                 sizeof scan_args / sizeof scan_args[0], scan_args, p->heads_kv, stream)) != AOTK_OK) {
    return status;
  }
  if (aotk__kernel_table[plan->rows[PLAN_SCATTER]].block_m != count_entry->block_m) {
    return aotk__fail(AOTK_ERROR_INTERNAL, "the index count and scatter passes disagree on their chunk size");
  }
  void *scatter_args[] = {PTR(a.block_idx), PTR(a.block_cnt), &a.cu_seqlens_q, &a.cu_seqlens_k, &cursors, &tokens,
                          STRIDES(a.block_idx), STRIDES(a.block_cnt), &stride_offsets, &stride_tokens, &a.num_seqs,
                          &a.total_q, &a.total_k, &a.max_seqlen_k, &a.block_size, &a.slots, &entry_chunks, &search_steps,
                          &a.flags};
  _Static_assert(sizeof scatter_args / sizeof scatter_args[0] == sizeof sel_index_scatter_param_kinds - 1,
                 "one per parameter");
  if ((status = aotk__launch_row(plan->driver, plan->rows[PLAN_SCATTER], kernels[PLAN_SCATTER],
                                 sizeof scatter_args / sizeof scatter_args[0], scatter_args, p->heads_kv * entry_chunks,
                                 stream)) != AOTK_OK) {
    return status;
  }
  void *order_args[] = {PTR(a.block_idx), PTR(a.block_cnt), &a.cu_seqlens_q, &a.cu_seqlens_k, &offsets, &tokens,
                        STRIDES(a.block_idx), STRIDES(a.block_cnt), &stride_offsets, &stride_tokens, &a.num_seqs,
                        &a.total_q, &a.total_k, &a.max_seqlen_k, &a.block_size, &a.slots, &a.flags};
  _Static_assert(sizeof order_args / sizeof order_args[0] == sizeof sel_index_order_param_kinds - 1,
                 "one per parameter");
  if ((status = aotk__launch_row(plan->driver, plan->rows[PLAN_ORDER], kernels[PLAN_ORDER],
                                 sizeof order_args / sizeof order_args[0], order_args, p->heads_kv * index_slots(p),
                                 stream)) != AOTK_OK) {
    return status;
  }

  /* dQ (and delta), on the forward's grid. */
  const aotk__kernel_entry *dq_entry = &aotk__kernel_table[plan->rows[PLAN_DQ]];
  int32_t chunks = (int32_t)group_chunks(p, dq_entry);
  void *dq_args[] = {PTR(q), PTR(k), PTR(v), PTR(o), PTR(dout), PTR(lse), PTR(dq), &delta, &a.cu_seqlens_q,
                     &a.cu_seqlens_k, PTR(a.block_idx), PTR(a.block_cnt), &compact, STRIDES(q), STRIDES(k), STRIDES(v),
                     STRIDES(o), STRIDES(dout), STRIDES(dq), STRIDES(lse), STRIDES(a.block_idx), STRIDES(a.block_cnt),
                     &a.num_seqs, &a.total_q, &a.total_k, &a.max_seqlen_k, &a.heads_q, &a.group_size, &chunks,
                     &a.slots, &a.flags, &a.qk_scale_log2, &a.softmax_scale};
  _Static_assert(sizeof dq_args / sizeof dq_args[0] == sizeof sel_bwd_dq_param_kinds - 1, "one per parameter");
  if ((status = aotk__launch_row(plan->driver, plan->rows[PLAN_DQ], kernels[PLAN_DQ], sizeof dq_args / sizeof dq_args[0],
                                 dq_args, fwd_grid(p, dq_entry), stream)) != AOTK_OK) {
    return status;
  }

  /* dK and dV: programs per kv head, sequence, key tile and chunk of a split list; then, when some list
   * may be split, the same kernel again, one program per key tile, adding the split lists' partials. */
  const aotk__kernel_entry *dkdv_entry = &aotk__kernel_table[plan->rows[PLAN_DKDV]];
  int32_t key_tiles = (int32_t)ceil_div(p->max_seqlen_k, dkdv_entry->block_n);
  int32_t dkdv_flags = a.flags;
  void *dkdv_args[] = {PTR(q), PTR(k), PTR(v), PTR(dout), PTR(lse), &delta, PTR(dk), PTR(dv), &a.cu_seqlens_q,
                       &a.cu_seqlens_k, &offsets, &tokens, &chunks_first, &partials, STRIDES(q), STRIDES(k),
                       STRIDES(v), STRIDES(dout), STRIDES(dk), STRIDES(dv), STRIDES(lse), &stride_offsets,
                       &stride_tokens, &a.num_seqs, &a.total_q, &a.total_k, &a.max_seqlen_k, &a.heads_q,
                       &a.group_size, &key_tiles, &split_tokens, &split_most, &records_per_head, &dkdv_flags,
                       &a.qk_scale_log2, &a.softmax_scale};
  _Static_assert(sizeof dkdv_args / sizeof dkdv_args[0] == sizeof sel_bwd_dkdv_param_kinds - 1, "one per parameter");
  const size_t dkdv_args_count = sizeof dkdv_args / sizeof dkdv_args[0];
  status = aotk__launch_row(plan->driver, plan->rows[PLAN_DKDV], kernels[PLAN_DKDV], dkdv_args_count, dkdv_args,
                            dkdv_grid(p, dkdv_entry), stream);
  if (status != AOTK_OK || split_most == 1) return status;
  dkdv_flags |= SEL_FLAG_DKDV_REDUCE;
  return aotk__launch_row(plan->driver, plan->rows[PLAN_DKDV], kernels[PLAN_DKDV], dkdv_args_count, dkdv_args,
                          dkdv_tiles(p, dkdv_entry), stream);
}

/* --- the public calls ---------------------------------------------------------------------------- */

aotk_status aotk_sel_fwd(const aotk_sel_params *caller_params, aotk_stream stream) {
  aotk__clear_error();
  aotk_sel_params params;
  sel_problem problem;
  sel_plan plan;
  aotk_status status = sel_validate(caller_params, 0, &params, &problem);
  if (status != AOTK_OK || (status = plan_sel(&problem, stream, &plan)) != AOTK_OK) return status;
  return launch_sel_fwd(&params, &problem, &plan, stream);
}

aotk_status aotk_sel_bwd(const aotk_sel_params *caller_params, void *workspace, size_t workspace_bytes,
                         aotk_stream stream) {
  aotk__clear_error();
  aotk_sel_params params;
  sel_problem problem;
  sel_plan plan;
  aotk_status status = sel_validate(caller_params, 1, &params, &problem);
  if (status != AOTK_OK ||
      (status = check_workspace(workspace, workspace_bytes, bwd_workspace_bytes(&problem))) != AOTK_OK ||
      (status = plan_sel(&problem, stream, &plan)) != AOTK_OK) {
    return status;
  }
  return launch_sel_bwd(&params, &problem, &plan, workspace, stream);
}

aotk_status aotk_sel_query(aotk_op op, const aotk_sel_params *caller_params, aotk_kernel_info *info) {
  aotk__clear_error();
  aotk_status status = aotk__check_query_info(info);
  if (status != AOTK_OK) return status;
  if ((status = aotk__check_query_op(op, "aotk_sel_query")) != AOTK_OK) return status;
  aotk_sel_params params;
  sel_problem problem;
  sel_plan plan;
  status = sel_validate(caller_params, op == AOTK_OP_SEL_BWD, &params, &problem);
  if (status != AOTK_OK || (status = plan_sel(&problem, NULL, &plan)) != AOTK_OK) return status;
  uint32_t features = problem.varlen ? AOTK_FEATURE_VARLEN : 0;
  if (op == AOTK_OP_SEL_FWD) {
    const aotk__kernel_entry *e = &aotk__kernel_table[plan.rows[PLAN_FWD]];
    aotk__fill_info(e, plan.kind, fwd_grid(&problem, e), 0, 1, features, info);
  } else {
    const aotk__kernel_entry *e = &aotk__kernel_table[plan.rows[PLAN_DKDV]];
    /* The index passes, dQ and dK/dV, and dK/dV again when lists may be split. */
    const int launches = PLAN_ROWS - PLAN_ZERO + (max_chunks(&problem) > 1);
    aotk__fill_info(e, plan.kind, dkdv_grid(&problem, e), bwd_workspace_bytes(&problem), launches, features, info);
  }
  return AOTK_OK;
}

/* The check's result word: INT64_MAX when clean, else the first problem's code (kernels/sel_attn.py,
 * sel_check_indices). */
static aotk_status report_index_problem(int64_t code, const sel_problem *p, const aotk_sel_params *params) {
  const int64_t kind = code & 3, slot = (code >> 2) & ((1 << 24) - 1), row = code >> 26;
  const int64_t token = row / p->heads_kv, head = row % p->heads_kv;
  if (kind == 3) {
    return aotk__fail(AOTK_ERROR_INVALID_INDICES, "block_cnt[token %lld, kv head %lld] is outside [0, %lld slots]",
                      (long long)token, (long long)head, (long long)p->slots);
  }
  (void)params;
  return aotk__fail(AOTK_ERROR_INVALID_INDICES, "block_idx[token %lld, kv head %lld, slot %lld]: %s", (long long)token,
                    (long long)head, (long long)slot,
                    kind == 1 ? "block id out of range (it must be -1 or 0 .. ceil(len_k / block_size) - 1 of its "
                                "sequence)"
                              : "the same block is listed twice for this token and head");
}

aotk_status aotk_sel_check_indices(const aotk_sel_params *caller_params, void *workspace, size_t workspace_bytes,
                                   aotk_stream stream) {
  aotk__clear_error();
  aotk_sel_params params;
  sel_problem problem;
  aotk_status status = sel_validate(caller_params, 0, &params, &problem);
  if (status != AOTK_OK || (status = check_workspace(workspace, workspace_bytes, CHECK_WORKSPACE_BYTES)) != AOTK_OK) {
    return status;
  }
  if (problem.slots >= (1 << 24) || problem.total_q * problem.heads_kv >= ((int64_t)1 << 36)) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "the index check encodes positions in 64 bits: too many slots or tokens");
  }
  const aotk__driver *driver;
  aotk__device_info device;
  aotk__image_kind kind;
  int row;
  if ((status = aotk__driver_get(&driver)) != AOTK_OK || (status = aotk__current_device(driver, &device)) != AOTK_OK ||
      (status = aotk__check_stream_context(driver, &device, stream)) != AOTK_OK ||
      (status = choose_sel_kernel(AOTK__FAMILY_SEL_CHECK_INDICES, &problem, &device, &row, &kind)) != AOTK_OK) {
    return status;
  }
  const char *const kinds[] = {sel_check_indices_param_kinds};
  CUkernel kernel;
  if ((status = aotk__load_rows(driver, &row, kinds, 1, kind, device.device, &kernel)) != AOTK_OK) return status;
  /* The result word is set on the host after the stream's earlier work (the workspace may be in use by
   * it), then the check runs, then the word comes back. */
  CUdeviceptr result = (CUdeviceptr)(uintptr_t)workspace;
  const int64_t clean = INT64_MAX;
  AOTK__CU_TRY(driver, driver->cuStreamSynchronize((CUstream)stream), "cuStreamSynchronize");
  AOTK__CU_TRY(driver, driver->cuMemcpyHtoD(result, &clean, sizeof clean), "cuMemcpyHtoD");
  /* A copy from pageable memory may return before its DMA lands; `stream` may not order after it. */
  AOTK__CU_TRY(driver, driver->cuCtxSynchronize(), "cuCtxSynchronize");
  common_args a = make_common(&params, &problem);
  void *args[] = {PTR(a.block_idx), PTR(a.block_cnt), &a.cu_seqlens_q, &a.cu_seqlens_k, &result, STRIDES(a.block_idx),
                  STRIDES(a.block_cnt), &a.num_seqs, &a.total_q, &a.total_k, &a.max_seqlen_k, &a.heads_kv,
                  &a.block_size, &a.slots, &a.flags};
  _Static_assert(sizeof args / sizeof args[0] == sizeof sel_check_indices_param_kinds - 1, "one per parameter");
  if ((status = aotk__launch_row(driver, row, kernel, sizeof args / sizeof args[0], args,
                                 problem.total_q * problem.heads_kv, stream)) != AOTK_OK) {
    return status;
  }
  AOTK__CU_TRY(driver, driver->cuStreamSynchronize((CUstream)stream), "cuStreamSynchronize");
  int64_t code;
  AOTK__CU_TRY(driver, driver->cuMemcpyDtoH(&code, result, sizeof code), "cuMemcpyDtoH");
  return code == clean ? AOTK_OK : report_index_problem(code, &problem, &params);
}
