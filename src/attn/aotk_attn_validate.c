/* Dense attention's argument validation: the caller's aotk_attn_params, checked and resolved into an
 * aotk__attn_problem (sizes, scalars, the 4-d views the kernels take) before anything touches the
 * driver, for the forward and, with its gradients, the backward. */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "aotk_attn.h"
#include "aotk_error.h"
#include "aotk_kernel_table.h"
#include "aotk_tensor_validate.h"

/* The most rows of a block (and so the most rows a block addresses, masked, past a sequence's end). */
#define AOTK__MAX_BLOCK_ROWS 256
/* The kernels address a block's first row in 64 bits and its rows within the block in 32: a token
 * stride times AOTK__MAX_BLOCK_ROWS must fit in int32. */
#define AOTK__MAX_TOKEN_STRIDE (AOTK__INT32_SPAN_LIMIT / AOTK__MAX_BLOCK_ROWS)
/* Sequence lengths (max_seqlen for varlen): the Gluon kernels' window arithmetic adds a row, the
 * diagonal and a bound clamped to +-2^30 in int32 (FAR in kernels/attn_hopper_common.py), which holds
 * for lengths up to 2^30 less a block of padding rows. */
#define AOTK__MAX_SEQLEN (((int64_t)1 << 30) - 2 * AOTK__MAX_BLOCK_ROWS)
/* The smallest struct_size accepted: the struct as release 0.1 defines it. When fields are added,
 * this stays the 0.1 size and the new fields read as zero for callers built against 0.1. */
#define AOTK__ATTN_PARAMS_FIRST_BYTES offsetof(aotk_attn_params, cu_seqlens_q)

/* A tensor may span any number of elements (the kernels address a block's first row and each head in
 * 64 bits), but the rows within a block are addressed in 32 bits and the head stride is an int32
 * argument. `t` is the kernels' 4-d view [batch, seqlen, heads, head_dim]; the caller's dims are one
 * fewer for varlen. */
static aotk_status check_kernel_strides(const aotk_tensor *t, const char *name, int varlen) {
  if (t->strides[1] > AOTK__MAX_TOKEN_STRIDE) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW,
                      "%s: strides[%d] = %lld; a token stride must be at most %lld elements (the kernels address "
                      "the %d rows of a block with 32 bits)",
                      name, 1 - varlen, (long long)t->strides[1], (long long)AOTK__MAX_TOKEN_STRIDE,
                      AOTK__MAX_BLOCK_ROWS);
  }
  if (t->strides[2] > AOTK__INT32_SPAN_LIMIT) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "%s: strides[%d] = %lld; a head stride must be under 2^31 elements",
                      name, 2 - varlen, (long long)t->strides[2]);
  }
  return AOTK_OK;
}

static int64_t blocks(int64_t length, int32_t block) { return (length + block - 1) / block; }

static const char *const q_layout = "[batch, seqlen_q, heads_q, head_dim_qk]";
static const char *const k_layout = "[batch, seqlen_k, heads_kv, head_dim_qk]";
static const char *const v_layout = "[batch, seqlen_k, heads_kv, head_dim_v]";
static const char *const out_layout = "[batch, seqlen_q, heads_q, head_dim_v]";
static const char *const lse_layout = "[batch, heads_q, seqlen_q]";
static const char *const varlen_q_layout = "[total_q, heads_q, head_dim_qk] (varlen)";
static const char *const varlen_k_layout = "[total_k, heads_kv, head_dim_qk] (varlen)";
static const char *const varlen_v_layout = "[total_k, heads_kv, head_dim_v] (varlen)";
static const char *const varlen_out_layout = "[total_q, heads_q, head_dim_v] (varlen)";
static const char *const varlen_lse_layout = "[heads_q, total_q] (varlen)";

static aotk_status check_dim(const aotk_tensor *t, const char *name, int dim, int64_t expected, const char *reference,
                             const char *meaning) {
  aotk_status status = strncmp(meaning, "head_dim", 8) == 0 ? AOTK_ERROR_HEAD_DIM_MISMATCH : AOTK_ERROR_SHAPE_MISMATCH;
  return aotk__check_dim(t, name, dim, expected, reference, meaning, status);
}

/* One of the q/k/v/out-like tensors: its own checks, the dtype, and each dimension against what the
 * problem says (`expected`, in the caller's layout: 4 dims dense, 3 varlen). */
typedef struct tensor_rule {
  const char *name;
  const char *dense_layout, *varlen_layout;
  /* Indices into the problem's named sizes, per dimension of the dense layout. */
  int sizes[4];
  int is_output;
} tensor_rule;

enum { SIZE_BATCH, SIZE_SEQ_Q, SIZE_SEQ_K, SIZE_HEADS_Q, SIZE_HEADS_KV, SIZE_DIM_QK, SIZE_DIM_V, SIZE_COUNT };
static const char *const size_meaning[SIZE_COUNT] = {"batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv",
                                                     "head_dim_qk", "head_dim_v"};

typedef struct named_sizes {
  int64_t value[SIZE_COUNT];
  const char *source[SIZE_COUNT]; /* where the value was read ("q.shape[2]"); NULL: not read */
} named_sizes;

/* Where each size is read, in the dense and the varlen layout (which has no batch or sequence
 * dimension in q, k, v: those sizes come from cu_seqlens and max_seqlen). */
static const char *const size_sources[2][SIZE_COUNT] = {
    {"q.shape[0]", "q.shape[1]", "k.shape[1]", "q.shape[2]", "k.shape[2]", "q.shape[3]", "v.shape[3]"},
    {NULL, NULL, NULL, "q.shape[1]", "k.shape[1]", "q.shape[2]", "v.shape[2]"}};

/* The dimension each size_sources entry names, in the dense layout (one fewer in the varlen one). */
static const int size_dims[SIZE_COUNT] = {0, 1, 1, 2, 2, 3, 3};

/* Reads size `which` from tensor t where size_sources says it lives (nothing in the varlen layout for
 * batch and sequence lengths). */
static void read_size(named_sizes *sizes, int which, const aotk_tensor *t, int varlen) {
  if (size_sources[varlen][which] == NULL) return;
  sizes->value[which] = t->shape[size_dims[which] - varlen];
  sizes->source[which] = size_sources[varlen][which];
}

/* The 4-d view the kernels use: varlen tensors [total, heads, d] become [1, total, heads, d] with batch
 * stride 0 (the kernels add each sequence's start). */
static aotk_tensor view_4d(const aotk_tensor *t, int varlen) {
  if (!varlen) return *t;
  aotk_tensor v = {t->data, t->dtype, 4, {1, t->shape[0], t->shape[1], t->shape[2], 0, 0},
                   {0, t->strides[0], t->strides[1], t->strides[2], 0, 0}};
  return v;
}

static aotk_status check_like(const aotk_tensor *t, const tensor_rule *rule, const named_sizes *sizes, int varlen,
                              aotk_dtype dtype) {
  const char *layout = varlen ? rule->varlen_layout : rule->dense_layout;
  aotk_status status = aotk__check_tensor(t, rule->name, varlen ? 3 : 4, layout);
  if (status != AOTK_OK) return status;
  if ((status = aotk__check_same_dtype(t, rule->name, dtype, "q")) != AOTK_OK) return status;
  /* Varlen tensors have no batch dimension, and their sequence dimension is a total checked apart. */
  for (int dim = varlen ? 2 : 0; dim < 4; dim++) {
    int size = rule->sizes[dim];
    if (sizes->source[size] == NULL) continue;
    int caller_dim = varlen ? dim - 1 : dim;
    if ((status = check_dim(t, rule->name, caller_dim, sizes->value[size], sizes->source[size], size_meaning[size])) !=
        AOTK_OK) {
      return status;
    }
  }
  if (rule->is_output && (status = aotk__check_output_strides(t, rule->name)) != AOTK_OK) return status;
  return AOTK_OK;
}

static const tensor_rule k_rule = {"k", k_layout, varlen_k_layout, {SIZE_BATCH, SIZE_SEQ_K, SIZE_HEADS_KV, SIZE_DIM_QK}, 0};
static const tensor_rule v_rule = {"v", v_layout, varlen_v_layout, {SIZE_BATCH, SIZE_SEQ_K, SIZE_HEADS_KV, SIZE_DIM_V}, 0};
static const tensor_rule out_rule = {"out", out_layout, varlen_out_layout,
                                     {SIZE_BATCH, SIZE_SEQ_Q, SIZE_HEADS_Q, SIZE_DIM_V}, 1};

aotk_status aotk__attn_validate(const aotk_attn_params *caller_params, aotk_attn_params *params,
                                aotk__attn_problem *problem) {
  if (caller_params == NULL) return aotk__fail(AOTK_ERROR_NULL_POINTER, "params is NULL");
  /* The sizes of released structs: 0.1's, and 0.2's (this one) or larger (a newer caller's; its extra
   * fields are ignored). A size in between would cut a field in two. Fields a 0.1 caller does not know
   * about take AOTK_ATTN_PARAMS_INIT's values (features off, windows unbounded). */
  const size_t size = caller_params->struct_size;
  if ((size != AOTK__ATTN_PARAMS_FIRST_BYTES && size < sizeof(aotk_attn_params)) || size > (size_t)1 << 20) {
    return aotk__fail(AOTK_ERROR_STRUCT_SIZE,
                      "params->struct_size = %zu; expected %zu (use AOTK_ATTN_PARAMS_INIT) or release 0.1's %zu",
                      size, sizeof(aotk_attn_params), (size_t)AOTK__ATTN_PARAMS_FIRST_BYTES);
  }
  const aotk_attn_params defaults = AOTK_ATTN_PARAMS_INIT;
  *params = defaults;
  memcpy(params, caller_params,
         caller_params->struct_size < sizeof *params ? caller_params->struct_size : sizeof *params);
  memset(problem, 0, sizeof *problem);

  aotk_status status;
  const int varlen = params->cu_seqlens_q.data != NULL || params->cu_seqlens_k.data != NULL;
  if (varlen) {
    if ((status = aotk__check_cu_seqlens_pair(&params->cu_seqlens_q, &params->cu_seqlens_k)) != AOTK_OK) return status;
    if (params->max_seqlen_q < 1 || params->max_seqlen_k < 1) {
      return aotk__fail(AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_q = %d, max_seqlen_k = %d: each must be >= 1",
                        (int)params->max_seqlen_q, (int)params->max_seqlen_k);
    }
  }
  const aotk_tensor *q = &params->q, *k = &params->k, *v = &params->v, *out = &params->out, *lse = &params->lse;
  if ((status = aotk__check_tensor(q, "q", varlen ? 3 : 4, varlen ? varlen_q_layout : q_layout)) != AOTK_OK) return status;
  if (q->dtype != AOTK_DTYPE_FLOAT16 && q->dtype != AOTK_DTYPE_BFLOAT16) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype = %s; attention takes float16 or bfloat16",
                      aotk__dtype_name(q->dtype));
  }
  named_sizes sizes;
  memset(&sizes, 0, sizeof sizes);
  const int d = varlen ? 1 : 0; /* the caller's dims are one fewer in the varlen layout */
  read_size(&sizes, SIZE_BATCH, q, varlen);
  read_size(&sizes, SIZE_SEQ_Q, q, varlen);
  read_size(&sizes, SIZE_HEADS_Q, q, varlen);
  read_size(&sizes, SIZE_DIM_QK, q, varlen);
  if ((status = aotk__check_tensor(k, "k", 4 - d, varlen ? varlen_k_layout : k_layout)) != AOTK_OK) return status;
  read_size(&sizes, SIZE_SEQ_K, k, varlen);
  read_size(&sizes, SIZE_HEADS_KV, k, varlen);
  if ((status = check_like(k, &k_rule, &sizes, varlen, q->dtype)) != AOTK_OK) return status;
  if ((status = aotk__check_tensor(v, "v", 4 - d, varlen ? varlen_v_layout : v_layout)) != AOTK_OK) return status;
  read_size(&sizes, SIZE_DIM_V, v, varlen);
  if ((status = check_like(v, &v_rule, &sizes, varlen, q->dtype)) != AOTK_OK) return status;
  const aotk_status mismatch = AOTK_ERROR_SHAPE_MISMATCH;
  if (varlen && (status = aotk__check_dim(v, "v", 0, k->shape[0], "k.shape[0]", "total_k", mismatch)) != AOTK_OK) {
    return status;
  }
  if ((status = check_like(out, &out_rule, &sizes, varlen, q->dtype)) != AOTK_OK) return status;
  if (varlen && (status = aotk__check_dim(out, "out", 0, q->shape[0], "q.shape[0]", "total_q", mismatch)) != AOTK_OK) {
    return status;
  }
  const int64_t heads_q = sizes.value[SIZE_HEADS_Q], heads_kv = sizes.value[SIZE_HEADS_KV];
  const int64_t head_dim_qk = sizes.value[SIZE_DIM_QK], head_dim_v = sizes.value[SIZE_DIM_V];
  const int64_t batch = varlen ? params->cu_seqlens_q.shape[0] - 1 : sizes.value[SIZE_BATCH];
  const int64_t seqlen_q = varlen ? params->max_seqlen_q : sizes.value[SIZE_SEQ_Q];
  const int64_t seqlen_k = varlen ? params->max_seqlen_k : sizes.value[SIZE_SEQ_K];
  if (heads_q % heads_kv != 0) {
    return aotk__fail(AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_q = %lld is not a multiple of heads_kv = %lld",
                      (long long)heads_q, (long long)heads_kv);
  }
  if (head_dim_qk % 8 != 0 || head_dim_qk > 256 || head_dim_v % 8 != 0 || head_dim_v > 256) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_HEAD_DIM,
                      "head_dim_qk = %lld, head_dim_v = %lld; each must be a multiple of 8 from 8 to 256",
                      (long long)head_dim_qk, (long long)head_dim_v);
  }
  aotk_tensor lse_view = {0};
  if (lse->data != NULL) {
    if ((status = aotk__check_tensor(lse, "lse", 3 - d, varlen ? varlen_lse_layout : lse_layout)) != AOTK_OK) return status;
    if ((status = aotk__check_dtype_is(lse, "lse", AOTK_DTYPE_FLOAT32, "lse is float32")) != AOTK_OK) return status;
    if (varlen) {
      if ((status = check_dim(lse, "lse", 0, heads_q, "heads_q", "heads_q")) != AOTK_OK) return status;
      if ((status = check_dim(lse, "lse", 1, q->shape[0], "q.shape[0]", "total_q")) != AOTK_OK) return status;
      aotk_tensor view = {lse->data, lse->dtype, 3, {1, heads_q, q->shape[0], 0, 0, 0},
                          {0, lse->strides[0], 1, 0, 0, 0}};
      lse_view = view;
    } else {
      const int64_t expected[3] = {batch, heads_q, seqlen_q};
      static const char *const reference[3] = {"q.shape[0]", "q.shape[2]", "q.shape[1]"};
      static const char *const meaning[3] = {"batch", "heads_q", "seqlen_q"};
      for (int dim = 0; dim < 3; dim++) {
        if ((status = check_dim(lse, "lse", dim, expected[dim], reference[dim], meaning[dim])) != AOTK_OK) return status;
      }
      lse_view = *lse;
    }
    if ((status = aotk__check_output_strides(lse, "lse")) != AOTK_OK) return status;
  }
  if (seqlen_q > AOTK__MAX_SEQLEN || seqlen_k > AOTK__MAX_SEQLEN || heads_q > INT32_MAX || batch > INT32_MAX) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW,
                      "batch = %lld, seqlen_q = %lld, seqlen_k = %lld, heads_q = %lld: batch and heads must fit in "
                      "int32, and the lengths be at most 2^30 - %d = %lld",
                      (long long)batch, (long long)seqlen_q, (long long)seqlen_k, (long long)heads_q,
                      2 * AOTK__MAX_BLOCK_ROWS, (long long)AOTK__MAX_SEQLEN);
  }
  /* Varlen: the Gluon kernels' TMA coordinates (a sequence's first token plus a row) are int32. */
  if (varlen && (q->shape[0] > INT32_MAX - AOTK__MAX_BLOCK_ROWS || k->shape[0] > INT32_MAX - AOTK__MAX_BLOCK_ROWS)) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "total_q = %lld, total_k = %lld: each must be at most 2^31 - %d",
                      (long long)q->shape[0], (long long)k->shape[0], AOTK__MAX_BLOCK_ROWS + 1);
  }
  /* The kernels' view: 4-d, and for varlen each sequence spans at most max_seqlen rows. */
  problem->q = view_4d(q, varlen);
  problem->k = view_4d(k, varlen);
  problem->v = view_4d(v, varlen);
  problem->out = view_4d(out, varlen);
  problem->lse = lse_view;
  aotk_tensor *spanned[] = {&problem->q, &problem->k, &problem->v, &problem->out};
  const char *spanned_names[] = {"q", "k", "v", "out"};
  for (int i = 0; i < 4; i++) {
    if ((status = check_kernel_strides(spanned[i], spanned_names[i], varlen)) != AOTK_OK) return status;
  }
  /* lse's head stride is an int32 argument too (its rows are contiguous). */
  if (lse->data != NULL && lse_view.strides[1] > AOTK__INT32_SPAN_LIMIT) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "lse: strides[%d] = %lld; a head stride must be under 2^31 elements",
                      1 - varlen, (long long)lse_view.strides[1]);
  }
  /* The grid is 1-d with at most 2^31 - 1 programs; the smallest tile has 64 rows. */
  int64_t programs = (seqlen_q + 63) / 64;
  if (__builtin_mul_overflow(programs, batch, &programs) || __builtin_mul_overflow(programs, heads_q, &programs) ||
      programs > INT32_MAX) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "batch * heads_q * ceil(seqlen_q / 64) exceeds the grid limit of 2^31 - 1 programs");
  }
  if (params->causal != 0 && params->causal != 1) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "causal = %d; use 0 or 1", (int)params->causal);
  }
  if (params->causal_align != AOTK_ALIGN_BOTTOM_RIGHT && params->causal_align != AOTK_ALIGN_TOP_LEFT) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "causal_align = %d; use AOTK_ALIGN_BOTTOM_RIGHT or AOTK_ALIGN_TOP_LEFT",
                      (int)params->causal_align);
  }
  if ((status = aotk__check_window(params->causal, params->window_left, params->window_right)) != AOTK_OK) {
    return status;
  }
  float scale = params->softmax_scale;
  if (scale == 0.0f) {
    scale = 1.0f / sqrtf((float)head_dim_qk);
  } else if (!(scale > 0.0f) || !isfinite(scale)) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "softmax_scale = %g; use 0 (default) or a finite positive value",
                      (double)scale);
  }
  if (!(params->softcap >= 0.0f) || !isfinite(params->softcap)) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "softcap = %g; use 0 (off) or a finite positive value",
                      (double)params->softcap);
  }
  if (params->alibi_slopes.data != NULL &&
      (status = aotk__check_fp32_vector(&params->alibi_slopes, "alibi_slopes", heads_q, batch, 1,
                                  &problem->alibi_batch_stride)) != AOTK_OK) {
    return status;
  }
  int64_t unused_stride;
  if (params->sinks.data != NULL &&
      (status = aotk__check_fp32_vector(&params->sinks, "sinks", heads_q, batch, 0, &unused_stride)) != AOTK_OK) {
    return status;
  }
  if (!(params->dropout_p >= 0.0f && params->dropout_p < 1.0f)) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "dropout_p = %g; it must be in [0, 1)", (double)params->dropout_p);
  }
  if (params->dropout_p > 0.0f || params->dropout_mask.data != NULL) {
    if (params->dropout_p == 0.0f) {
      return aotk__fail(AOTK_ERROR_INVALID_VALUE, "dropout_mask is set but dropout_p = 0");
    }
    if (params->rng_state.data == NULL) {
      return aotk__fail(AOTK_ERROR_NULL_POINTER, "rng_state.data is NULL: dropout_p > 0 needs the {seed, offset} state");
    }
    if ((status = aotk__check_tensor(&params->rng_state, "rng_state", 1, "[2] {seed, offset}")) != AOTK_OK) return status;
    const char *const rng_dtype = "it is int64 [2] {seed, offset}";
    if ((status = aotk__check_dtype_is(&params->rng_state, "rng_state", AOTK_DTYPE_INT64, rng_dtype)) != AOTK_OK) {
      return status;
    }
    if (params->rng_state.shape[0] < 2) {
      return aotk__fail(AOTK_ERROR_SHAPE_MISMATCH, "rng_state.shape[0] = %lld; it holds {seed, offset}: 2 values",
                        (long long)params->rng_state.shape[0]);
    }
  }
  if (params->dropout_mask.data != NULL) {
    const aotk_tensor *m = &params->dropout_mask;
    if ((status = aotk__check_tensor(m, "dropout_mask", 4, "[batch, heads_q, seqlen_q, seqlen_k]")) != AOTK_OK) return status;
    if ((status = aotk__check_dtype_is(m, "dropout_mask", AOTK_DTYPE_UINT8, "it is uint8")) != AOTK_OK) return status;
    const int64_t expected[4] = {batch, heads_q, seqlen_q, seqlen_k};
    static const char *const meaning[4] = {"batch", "heads_q", "seqlen_q", "seqlen_k"};
    for (int dim = 0; dim < 4; dim++) {
      if ((status = check_dim(m, "dropout_mask", dim, expected[dim], meaning[dim], meaning[dim])) != AOTK_OK) {
        return status;
      }
    }
    if ((status = aotk__check_output_strides(m, "dropout_mask")) != AOTK_OK) return status;
  }

  problem->dtype = q->dtype;
  problem->batch = batch;
  problem->seqlen_q = seqlen_q;
  problem->seqlen_k = seqlen_k;
  problem->heads_q = heads_q;
  problem->heads_kv = heads_kv;
  problem->head_dim_qk = head_dim_qk;
  problem->head_dim_v = head_dim_v;
  problem->softmax_scale = scale;
  problem->varlen = varlen;
  problem->causal = params->causal;
  problem->top_left = params->causal_align == AOTK_ALIGN_TOP_LEFT;
  problem->window_left = params->window_left;
  problem->window_right = params->causal ? 0 : params->window_right;
  problem->softcap = params->softcap;
  problem->alibi = params->alibi_slopes.data != NULL;
  problem->sinks = params->sinks.data != NULL;
  problem->dropout_p = params->dropout_p;
  problem->write_dropout_mask = params->dropout_mask.data != NULL;
  problem->write_lse = lse->data != NULL;
  /* Sinks need no EXTRAS kernel: they touch only the forward's epilogue and the backward's pre-pass. */
  problem->extras = problem->softcap > 0.0f || problem->alibi || problem->dropout_p > 0.0f;
  problem->aligned = aotk__tensor_aligned16(q) && aotk__tensor_aligned16(k) && aotk__tensor_aligned16(v) && aotk__tensor_aligned16(out);
  return AOTK_OK;
}

/* The backward's checks beyond the forward's: lse is required (it is the forward's), dout is like
 * out, dq like q, dk and dv like k and v, dsinks like sinks. */
aotk_status aotk__attn_bwd_validate(const aotk_attn_params *caller_params, aotk_attn_params *params,
                                    aotk__attn_problem *problem) {
  aotk_status status = aotk__attn_validate(caller_params, params, problem);
  if (status != AOTK_OK) return status;
  if (params->lse.data == NULL) {
    return aotk__fail(AOTK_ERROR_NULL_POINTER, "lse.data is NULL: the backward needs the forward's lse");
  }
  if (params->dropout_mask.data != NULL) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "dropout_mask is a forward output; the backward does not take it");
  }
  const int varlen = problem->varlen;
  named_sizes sizes;
  memset(&sizes, 0, sizeof sizes);
  const int64_t values[SIZE_COUNT] = {problem->batch, problem->seqlen_q, problem->seqlen_k, problem->heads_q,
                                      problem->heads_kv, problem->head_dim_qk, problem->head_dim_v};
  for (int i = 0; i < SIZE_COUNT; i++) {
    sizes.value[i] = values[i];
    sizes.source[i] = size_sources[varlen][i];
  }
  struct {
    const aotk_tensor *tensor;
    tensor_rule rule;
    const aotk_tensor *like;
    aotk_tensor *view;
  } const checks[] = {
      {&params->dout, {"dout", out_layout, varlen_out_layout, {SIZE_BATCH, SIZE_SEQ_Q, SIZE_HEADS_Q, SIZE_DIM_V}, 0},
       &params->out, &problem->dout},
      {&params->dq, {"dq", q_layout, varlen_q_layout, {SIZE_BATCH, SIZE_SEQ_Q, SIZE_HEADS_Q, SIZE_DIM_QK}, 1},
       &params->q, &problem->dq},
      {&params->dk, {"dk", k_layout, varlen_k_layout, {SIZE_BATCH, SIZE_SEQ_K, SIZE_HEADS_KV, SIZE_DIM_QK}, 1},
       &params->k, &problem->dk},
      {&params->dv, {"dv", v_layout, varlen_v_layout, {SIZE_BATCH, SIZE_SEQ_K, SIZE_HEADS_KV, SIZE_DIM_V}, 1},
       &params->v, &problem->dv},
  };
  for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
    const aotk_tensor *t = checks[i].tensor;
    if ((status = check_like(t, &checks[i].rule, &sizes, varlen, params->q.dtype)) != AOTK_OK) return status;
    if (varlen && t->shape[0] != checks[i].like->shape[0]) {
      return aotk__fail(AOTK_ERROR_SHAPE_MISMATCH, "%s.shape[0] = %lld but %s has %lld rows", checks[i].rule.name,
                        (long long)t->shape[0], checks[i].rule.name + 1, (long long)checks[i].like->shape[0]);
    }
    *checks[i].view = view_4d(t, varlen);
    if ((status = check_kernel_strides(checks[i].view, checks[i].rule.name, varlen)) != AOTK_OK) return status;
  }
  if (params->dsinks.data != NULL) {
    if (!problem->sinks) return aotk__fail(AOTK_ERROR_INVALID_VALUE, "dsinks is set but sinks is not");
    int64_t unused_stride;
    if ((status = aotk__check_fp32_vector(&params->dsinks, "dsinks", problem->heads_q, problem->batch, 0, &unused_stride)) !=
        AOTK_OK) {
      return status;
    }
    problem->dsinks = 1;
  }
  if (params->deterministic != 0 && params->deterministic != 1) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "deterministic = %d; use 0 or 1", (int)params->deterministic);
  }
  problem->deterministic = params->deterministic;
  /* The pre-pass runs one program per 64 rows of the padded stats_stride (at least 128 rows, so up to
   * twice the forward's bound of ceil(seqlen_q / 64) blocks): bound its grid too. */
  int64_t pre_programs = blocks(aotk__attn_bwd_stats_stride(problem), AOTK__ATTN_BWD_PREPROCESS_BLOCK_M);
  if (__builtin_mul_overflow(pre_programs, problem->batch, &pre_programs) ||
      __builtin_mul_overflow(pre_programs, problem->heads_q, &pre_programs) || pre_programs > INT32_MAX) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW,
                      "batch * heads_q * round_up(seqlen_q, 128) / 64 exceeds the grid limit of 2^31 - 1 programs");
  }
  /* The dK/dV pass runs one program per key block per kv head; bound its grid with the table's
   * smallest key block here, before the driver (plan_bwd checks the chosen row's exactly). */
  int32_t smallest_block_n = INT32_MAX;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (e->family == AOTK__FAMILY_ATTN_BWD_DKDV && e->block_n < smallest_block_n) smallest_block_n = e->block_n;
  }
  int64_t programs = smallest_block_n == INT32_MAX ? 0 : blocks(problem->seqlen_k, smallest_block_n);
  if (__builtin_mul_overflow(programs, problem->batch, &programs) ||
      __builtin_mul_overflow(programs, problem->heads_kv, &programs) || programs > INT32_MAX) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "batch * heads_kv * ceil(seqlen_k / %d) exceeds the grid limit",
                      (int)smallest_block_n);
  }
  problem->aligned = problem->aligned && aotk__tensor_aligned16(&params->dout) && aotk__tensor_aligned16(&params->dq) &&
                     aotk__tensor_aligned16(&params->dk) && aotk__tensor_aligned16(&params->dv);
  return AOTK_OK;
}
