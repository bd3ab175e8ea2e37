/*
 * Decoding's and the merge's argument validation: the caller's aotk_decode_params and aotk_merge_params,
 * checked and resolved into the problems of aotk_decode.h before anything touches the driver.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "aotk.h"
#include "aotk_decode.h"
#include "aotk_error.h"
#include "aotk_tensor_validate.h"

/* --- decoding: validation ------------------------------------------------------------------------ */

static const char *const q_layout = "[batch, seqlen_q, heads_q, head_dim_qk]";
static const char *const cache_layout = "[batch, capacity, heads_kv, head_dim] (paged: [num_pages, page_size, heads_kv, head_dim])";
static const char *const out_layout = "[batch, seqlen_q, heads_q, head_dim_v]";
static const char *const varlen_q_layout = "[total_q, heads_q, head_dim_qk] (with cu_seqlens_q)";
static const char *const varlen_out_layout = "[total_q, heads_q, head_dim_v] (with cu_seqlens_q)";

static aotk_status check_head_dim(int64_t head_dim, const char *name) {
  if (head_dim % 8 != 0 || head_dim > 256) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "%s = %lld; decoding takes multiples of 8 up to 256", name,
                      (long long)head_dim);
  }
  return AOTK_OK;
}

static aotk_status check_aligned(const aotk_tensor *t, const char *name) {
  if (!aotk__tensor_aligned16(t)) {
    return aotk__fail(AOTK_ERROR_MISALIGNED_POINTER,
                      "%s: decoding needs a 16-byte-aligned pointer and strides that are multiples of 16 elements "
                      "(data %p, strides %lld %lld %lld)",
                      name, t->data, (long long)t->strides[0], (long long)t->strides[1], (long long)t->strides[2]);
  }
  return AOTK_OK;
}

static aotk_status check_dim(const aotk_tensor *t, const char *name, int dim, int64_t expected, const char *what,
                             aotk_status status) {
  return aotk__check_dim(t, name, dim, expected, what, NULL, status);
}

static aotk_status check_int32_vector(const aotk_tensor *t, const char *name, int rank, const char *layout) {
  aotk_status status = aotk__check_tensor(t, name, rank, layout);
  if (status != AOTK_OK) return status;
  return aotk__check_dtype_is(t, name, AOTK_DTYPE_INT32, "it is int32");
}

/* Whether the largest element offset of a (validated, non-negative-strided) cache is below 2^31. */
static int cache_offsets_fit_int32(const aotk_tensor *t) {
  int64_t last = 0;
  for (int i = 0; i < t->rank; i++) {
    int64_t term;
    if (t->shape[i] > 0 && (__builtin_mul_overflow(t->shape[i] - 1, t->strides[i], &term) ||
                            __builtin_add_overflow(last, term, &last))) {
      return 0;
    }
  }
  return last < INT32_MAX;
}

aotk_status aotk__decode_validate(const aotk_decode_params *caller_params, aotk_decode_params *params,
                                   aotk__decode_problem *p) {
  if (caller_params == NULL) return aotk__fail(AOTK_ERROR_NULL_POINTER, "params is NULL");
  const size_t size = caller_params->struct_size;
  /* The struct ended before cache_leftpad until late in 0.4: a caller built against that header gets
   * the fields it knows, the rest zero (off). Any other size short of this header's is an error. */
  const size_t size_before_leftpad = offsetof(aotk_decode_params, cache_leftpad);
  if (size != size_before_leftpad && (size < sizeof(aotk_decode_params) || size > (size_t)1 << 20)) {
    return aotk__fail(AOTK_ERROR_STRUCT_SIZE,
                      "params->struct_size = %zu; expected %zu (use AOTK_DECODE_PARAMS_INIT)", size,
                      sizeof(aotk_decode_params));
  }
  memset(params, 0, sizeof *params);
  memcpy(params, caller_params, size < sizeof *params ? size : sizeof *params);
  memset(p, 0, sizeof *p);
  aotk_status status;
  const aotk_tensor *q = &params->q, *k = &params->k_cache, *v = &params->v_cache, *out = &params->out;

  /* Packed queries (cu_seqlens_q): a prefill over the cache, any number of tokens per request. */
  p->varlen = params->cu_seqlens_q.data != NULL;
  if (p->varlen) {
    if ((status = aotk__check_cu_seqlens(&params->cu_seqlens_q, "cu_seqlens_q")) != AOTK_OK) return status;
    if ((status = aotk__check_tensor(q, "q", 3, varlen_q_layout)) != AOTK_OK) return status;
  } else if ((status = aotk__check_tensor(q, "q", 4, q_layout)) != AOTK_OK) {
    return status;
  }
  if (q->dtype != AOTK_DTYPE_FLOAT16 && q->dtype != AOTK_DTYPE_BFLOAT16) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype = %s; decoding takes float16 or bfloat16",
                      aotk__dtype_name(q->dtype));
  }
  p->dtype = q->dtype;
  if (p->varlen) {
    p->batch = params->cu_seqlens_q.shape[0] - 1;
    p->total_q = q->shape[0];
    p->heads_q = q->shape[1];
    p->head_dim_qk = q->shape[2];
    if (params->max_seqlen_q < 1) {
      return aotk__fail(AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_q = %d: with cu_seqlens_q it must be >= 1",
                        (int)params->max_seqlen_q);
    }
    p->seqlen_q = params->max_seqlen_q;
  } else {
    p->batch = q->shape[0];
    p->seqlen_q = q->shape[1];
    p->heads_q = q->shape[2];
    p->head_dim_qk = q->shape[3];
  }
  if (!p->varlen && p->seqlen_q > AOTK_DECODE_MAX_SEQLEN_Q) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE,
                      "q.shape[1] = %lld new tokens; decoding takes 1 to %d per request (pack longer steps with "
                      "cu_seqlens_q, or use aotk_attn_fwd for a prefill without a cache)",
                      (long long)p->seqlen_q, AOTK_DECODE_MAX_SEQLEN_Q);
  }
  if ((status = check_head_dim(p->head_dim_qk, p->varlen ? "q.shape[2] (head_dim_qk)" : "q.shape[3] (head_dim_qk)")) !=
      AOTK_OK) {
    return status;
  }

  const char *const batch_source = p->varlen ? "batch (cu_seqlens_q.shape[0] - 1)" : "batch (q.shape[0])";
  p->paged = params->block_table.data != NULL;
  if ((status = aotk__check_tensor(k, "k_cache", 4, cache_layout)) != AOTK_OK) return status;
  if ((status = aotk__check_same_dtype(k, "k_cache", p->dtype, "q")) != AOTK_OK) return status;
  p->heads_kv = k->shape[2];
  if ((status = check_dim(k, "k_cache", 3, p->head_dim_qk, "head_dim_qk (q's last dimension)", AOTK_ERROR_HEAD_DIM_MISMATCH)) !=
      AOTK_OK) {
    return status;
  }
  if ((status = aotk__check_tensor(v, "v_cache", 4, cache_layout)) != AOTK_OK) return status;
  if ((status = aotk__check_same_dtype(v, "v_cache", p->dtype, "q")) != AOTK_OK) return status;
  static const char *const cache_dims[] = {"k_cache.shape[0]", "k_cache.shape[1]", "heads_kv (k_cache.shape[2])"};
  for (int d = 0; d < 3; d++) {
    if ((status = check_dim(v, "v_cache", d, k->shape[d], cache_dims[d], AOTK_ERROR_SHAPE_MISMATCH)) != AOTK_OK) {
      return status;
    }
  }
  p->head_dim_v = v->shape[3];
  if ((status = check_head_dim(p->head_dim_v, "v_cache.shape[3] (head_dim_v)")) != AOTK_OK) return status;
  if (p->heads_q % p->heads_kv != 0) {
    return aotk__fail(AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_q = %lld (q.shape[2]) is not a multiple of heads_kv = %lld",
                      (long long)p->heads_q, (long long)p->heads_kv);
  }
  p->group_size = p->heads_q / p->heads_kv;
  /* The kernels count query rows (and the merge its rows, the grid its programs, which are fewer) in
   * int32; each size can be valid alone (broadcast inputs) while the product wraps. */
  int64_t rows;
  if (__builtin_mul_overflow(p->batch, p->seqlen_q, &rows) || __builtin_mul_overflow(rows, p->heads_q, &rows) ||
      rows > INT32_MAX) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW,
                      "batch * seqlen_q * heads_q = %lld * %lld * %lld query rows exceeds 2^31 - 1",
                      (long long)p->batch, (long long)p->seqlen_q, (long long)p->heads_q);
  }

  if (p->paged) {
    const aotk_tensor *table = &params->block_table;
    if ((status = check_int32_vector(table, "block_table", 2, "[batch, max_pages_per_seq]")) != AOTK_OK) return status;
    if ((status = check_dim(table, "block_table", 0, p->batch, batch_source, AOTK_ERROR_SHAPE_MISMATCH)) !=
        AOTK_OK) {
      return status;
    }
    p->page_size = k->shape[1];
    if (__builtin_mul_overflow(table->shape[1], p->page_size, &p->capacity) || p->capacity > AOTK_DECODE_MAX_CAPACITY) {
      return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW,
                        "block_table.shape[1] * page_size = %lld * %lld keys per request exceeds AOTK_DECODE_MAX_CAPACITY (2^30)",
                        (long long)table->shape[1], (long long)p->page_size);
    }
  } else {
    if ((status = aotk__check_dim(k, "k_cache", 0, p->batch, batch_source, "a paged cache needs block_table",
                                  AOTK_ERROR_SHAPE_MISMATCH)) != AOTK_OK) {
      return status;
    }
    p->capacity = k->shape[1];
    p->page_size = 0;
    if (p->capacity > AOTK_DECODE_MAX_CAPACITY) {
      return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "k_cache.shape[1] = %lld keys exceeds AOTK_DECODE_MAX_CAPACITY (2^30)",
                        (long long)p->capacity);
    }
  }
  if ((status = check_int32_vector(&params->cache_seqlens, "cache_seqlens", 1, "[batch]")) != AOTK_OK) return status;
  if ((status = check_dim(&params->cache_seqlens, "cache_seqlens", 0, p->batch, batch_source,
                          AOTK_ERROR_SHAPE_MISMATCH)) != AOTK_OK) {
    return status;
  }
  p->leftpad = params->cache_leftpad.data != NULL;
  if (p->leftpad &&
      ((status = check_int32_vector(&params->cache_leftpad, "cache_leftpad", 1, "[batch]")) != AOTK_OK ||
       (status = check_dim(&params->cache_leftpad, "cache_leftpad", 0, p->batch, batch_source,
                           AOTK_ERROR_SHAPE_MISMATCH)) != AOTK_OK)) {
    return status;
  }

  const int out_rank = p->varlen ? 3 : 4;
  if ((status = aotk__check_tensor(out, "out", out_rank, p->varlen ? varlen_out_layout : out_layout)) != AOTK_OK) {
    return status;
  }
  if ((status = aotk__check_same_dtype(out, "out", p->dtype, "q")) != AOTK_OK) return status;
  const int64_t dense_out_shape[4] = {p->batch, p->seqlen_q, p->heads_q, p->head_dim_v};
  const int64_t varlen_out_shape[3] = {p->total_q, p->heads_q, p->head_dim_v};
  static const char *const dense_out_dims[] = {"batch", "seqlen_q", "heads_q", "head_dim_v"};
  static const char *const varlen_out_dims[] = {"total_q (q.shape[0])", "heads_q", "head_dim_v"};
  for (int d = 0; d < out_rank; d++) {
    if ((status = check_dim(out, "out", d, p->varlen ? varlen_out_shape[d] : dense_out_shape[d],
                            p->varlen ? varlen_out_dims[d] : dense_out_dims[d],
                            d == out_rank - 1 ? AOTK_ERROR_HEAD_DIM_MISMATCH : AOTK_ERROR_SHAPE_MISMATCH)) != AOTK_OK) {
      return status;
    }
  }
  if ((status = aotk__check_output_strides(out, "out")) != AOTK_OK) return status;
  const aotk_tensor *lse = &params->lse;
  p->write_lse = lse->data != NULL;
  if (p->write_lse) {
    const int lse_rank = p->varlen ? 2 : 3;
    if ((status = aotk__check_tensor(lse, "lse", lse_rank,
                                     p->varlen ? "[heads_q, total_q] (with cu_seqlens_q)" : "[batch, heads_q, seqlen_q]")) !=
        AOTK_OK) {
      return status;
    }
    if ((status = aotk__check_dtype_is(lse, "lse", AOTK_DTYPE_FLOAT32, "it is float32")) != AOTK_OK) return status;
    const int64_t dense_lse_shape[3] = {p->batch, p->heads_q, p->seqlen_q};
    const int64_t varlen_lse_shape[2] = {p->heads_q, p->total_q};
    static const char *const dense_lse_dims[] = {"batch", "heads_q", "seqlen_q"};
    static const char *const varlen_lse_dims[] = {"heads_q", "total_q (q.shape[0])"};
    for (int d = 0; d < lse_rank; d++) {
      if ((status = check_dim(lse, "lse", d, p->varlen ? varlen_lse_shape[d] : dense_lse_shape[d],
                              p->varlen ? varlen_lse_dims[d] : dense_lse_dims[d], AOTK_ERROR_SHAPE_MISMATCH)) !=
          AOTK_OK) {
        return status;
      }
    }
    if ((status = aotk__check_output_strides(lse, "lse")) != AOTK_OK) return status;
  }

  if (params->causal != 0 && params->causal != 1) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "causal = %d; use 0 or 1", (int)params->causal);
  }
  if ((status = aotk__check_window(params->causal, params->window_left, params->window_right)) != AOTK_OK) {
    return status;
  }
  p->causal = params->causal;
  p->window_left = params->window_left;
  p->window_right = params->causal ? 0 : params->window_right;
  float scale = params->softmax_scale;
  if (scale == 0.0f) {
    scale = 1.0f / sqrtf((float)p->head_dim_qk);
  } else if (!(scale > 0.0f) || !isfinite(scale)) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "softmax_scale = %g; use 0 (default) or a finite positive value",
                      (double)scale);
  }
  p->softmax_scale = scale;
  if (!(params->softcap >= 0.0f) || !isfinite(params->softcap)) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "softcap = %g; use 0 (off) or a finite positive value",
                      (double)params->softcap);
  }
  p->softcap = params->softcap;
  p->alibi = params->alibi_slopes.data != NULL;
  if (p->alibi && (status = aotk__check_fp32_vector(&params->alibi_slopes, "alibi_slopes", p->heads_q, p->batch, 1,
                                                    &p->alibi_batch_stride)) != AOTK_OK) {
    return status;
  }
  p->sinks = params->sinks.data != NULL;
  int64_t unused_stride;
  if (p->sinks &&
      (status = aotk__check_fp32_vector(&params->sinks, "sinks", p->heads_q, p->batch, 0, &unused_stride)) != AOTK_OK) {
    return status;
  }
  if (params->num_splits < 0 || params->num_splits > AOTK_DECODE_MAX_SPLITS) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "num_splits = %d; use 0 (aotk chooses) or 1 to %d",
                      (int)params->num_splits, AOTK_DECODE_MAX_SPLITS);
  }
  p->num_splits_asked = params->num_splits;
  if (params->max_seqlen_k < 0) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "max_seqlen_k = %d; use 0 (the capacity) or a bound >= 1",
                      (int)params->max_seqlen_k);
  }
  p->size_hint = params->max_seqlen_k > 0 && params->max_seqlen_k < p->capacity ? params->max_seqlen_k : p->capacity;

  /* Appending: k_new [batch, seqlen_new, heads_kv, head_dim_qk] and v_new (head_dim_v), given together. */
  const aotk_tensor *k_new = &params->k_new, *v_new = &params->v_new;
  p->append = k_new->data != NULL || v_new->data != NULL;
  if (p->append && p->varlen) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE,
                      "k_new and v_new with cu_seqlens_q: appending is for the dense decoding step only (write a "
                      "prefill chunk's keys into the cache first)");
  }
  if (p->append) {
    static const char *const new_layouts[2] = {"[batch, seqlen_new, heads_kv, head_dim_qk]",
                                               "[batch, seqlen_new, heads_kv, head_dim_v]"};
    const aotk_tensor *news[2] = {k_new, v_new};
    static const char *const names[2] = {"k_new", "v_new"};
    for (int t = 0; t < 2; t++) {
      if ((status = aotk__check_tensor(news[t], names[t], 4, new_layouts[t])) != AOTK_OK) return status;
      if ((status = aotk__check_same_dtype(news[t], names[t], p->dtype, "q")) != AOTK_OK) return status;
      const int64_t expected[4] = {p->batch, k_new->shape[1], p->heads_kv, t == 0 ? p->head_dim_qk : p->head_dim_v};
      static const char *const what[4] = {"batch (q.shape[0])", "seqlen_new (k_new.shape[1])", "heads_kv",
                                          "the cache's head dim"};
      for (int d = 0; d < 4; d++) {
        if ((status = check_dim(news[t], names[t], d, expected[d], what[d],
                                d == 3 ? AOTK_ERROR_HEAD_DIM_MISMATCH : AOTK_ERROR_SHAPE_MISMATCH)) != AOTK_OK) {
          return status;
        }
      }
    }
    p->seqlen_new = k_new->shape[1];
    int64_t programs;
    if (p->seqlen_new > AOTK_DECODE_MAX_CAPACITY || __builtin_mul_overflow(p->batch, p->seqlen_new, &programs) ||
        programs > INT32_MAX) {
      return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW,
                        "k_new.shape[1] = %lld new tokens per request: more than AOTK_DECODE_MAX_CAPACITY, or "
                        "batch * seqlen_new exceeds 2^31 - 1",
                        (long long)p->seqlen_new);
    }
    /* The caches are outputs now: a stride 0 would make requests (or heads, or rows) write one row. */
    if ((status = aotk__check_output_strides(k, "k_cache")) != AOTK_OK ||
        (status = aotk__check_output_strides(v, "v_cache")) != AOTK_OK) {
      return status;
    }
  }

  /* Whether the per-row page lookup may compute its K and V offsets in 32 bits: every element offset of both
   * caches (strides are non-negative) below 2^31. */
  p->offset32 = cache_offsets_fit_int32(k) && cache_offsets_fit_int32(v);

  /* Last: the 16-byte alignment the compiled kernels assume (the shape errors above are more useful). */
  if ((status = check_aligned(q, "q")) != AOTK_OK || (status = check_aligned(k, "k_cache")) != AOTK_OK ||
      (status = check_aligned(v, "v_cache")) != AOTK_OK || (status = check_aligned(out, "out")) != AOTK_OK) {
    return status;
  }
  if (p->append &&
      ((status = check_aligned(k_new, "k_new")) != AOTK_OK || (status = check_aligned(v_new, "v_new")) != AOTK_OK)) {
    return status;
  }
  /* The grid: batch * heads_kv * row chunks * splits programs, each factor small, checked as a whole
   * once the plan knows its tile. */
  return AOTK_OK;
}

/* --- the merge ----------------------------------------------------------------------------------- */

static aotk_status check_float_dtype(const aotk_tensor *t, const char *name) {
  if (t->dtype != AOTK_DTYPE_FLOAT32 && t->dtype != AOTK_DTYPE_FLOAT16 && t->dtype != AOTK_DTYPE_BFLOAT16) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_DTYPE, "%s.dtype = %s; the merge takes float32, float16 or bfloat16", name,
                      aotk__dtype_name(t->dtype));
  }
  return AOTK_OK;
}

aotk_status aotk__merge_validate(const aotk_merge_params *caller_params, aotk_merge_params *params,
                                 aotk__merge_problem *p) {
  if (caller_params == NULL) return aotk__fail(AOTK_ERROR_NULL_POINTER, "params is NULL");
  const size_t size = caller_params->struct_size;
  if (size < sizeof(aotk_merge_params) || size > (size_t)1 << 20) {
    return aotk__fail(AOTK_ERROR_STRUCT_SIZE, "params->struct_size = %zu; expected %zu (use AOTK_MERGE_PARAMS_INIT)",
                      size, sizeof(aotk_merge_params));
  }
  memcpy(params, caller_params, sizeof *params);
  memset(p, 0, sizeof *p);
  aotk_status status;
  const aotk_tensor *parts = &params->out_partials, *lse_parts = &params->lse_partials, *out = &params->out;
  if (parts->data == NULL) return aotk__fail(AOTK_ERROR_NULL_POINTER, "out_partials.data is NULL");
  if (parts->rank != 4 && parts->rank != 5) {
    return aotk__fail(AOTK_ERROR_RANK,
                      "out_partials.rank = %d, expected 5 ([num_partials, batch, seqlen_q, heads, head_dim]) or 4 "
                      "([num_partials, total_q, heads, head_dim])",
                      (int)parts->rank);
  }
  p->packed = parts->rank == 4;
  const int rank = parts->rank;
  if ((status = aotk__check_tensor(parts, "out_partials", rank,
                                   p->packed ? "[num_partials, total_q, heads, head_dim]"
                                             : "[num_partials, batch, seqlen_q, heads, head_dim]")) != AOTK_OK ||
      (status = check_float_dtype(parts, "out_partials")) != AOTK_OK) {
    return status;
  }
  p->num_partials = parts->shape[0];
  p->batch = p->packed ? 1 : parts->shape[1];
  p->seqlen_q = parts->shape[rank - 3];
  p->heads = parts->shape[rank - 2];
  p->head_dim = parts->shape[rank - 1];
  if (p->head_dim % 8 != 0) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "out_partials.shape[%d] = %lld; head_dim must be a multiple of 8",
                      rank - 1, (long long)p->head_dim);
  }
  /* The kernel walks the columns in int32 (head_dim / 8 packed as int32, times 8, plus a 64-wide block):
   * a fuzz_api input had 2^34 accepted, packed as INT32_MIN, and nothing written. */
  if (p->head_dim > (int64_t)1 << 30) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "out_partials.shape[%d] = %lld; the merge takes head dims up to 2^30",
                      rank - 1, (long long)p->head_dim);
  }
  /* lse_partials: [num_partials, (batch,) heads, seqlen_q]. */
  if ((status = aotk__check_tensor(lse_parts, "lse_partials", rank - 1,
                                   p->packed ? "[num_partials, heads, total_q]"
                                             : "[num_partials, batch, heads, seqlen_q]")) != AOTK_OK) {
    return status;
  }
  if ((status = aotk__check_dtype_is(lse_parts, "lse_partials", AOTK_DTYPE_FLOAT32, "it is float32")) != AOTK_OK) {
    return status;
  }
  int64_t lse_shape[4] = {p->num_partials, p->batch, p->heads, p->seqlen_q};
  static const char *const lse_names[4] = {"num_partials", "batch", "heads", "seqlen_q"};
  for (int d = 0; d < rank - 1; d++) {
    const int source = p->packed && d > 0 ? d + 1 : d;
    if ((status = check_dim(lse_parts, "lse_partials", d, lse_shape[source], lse_names[source],
                            AOTK_ERROR_SHAPE_MISMATCH)) != AOTK_OK) {
      return status;
    }
  }
  /* out: the partials' shape without the first dimension. */
  if ((status = aotk__check_tensor(out, "out", rank - 1,
                                   p->packed ? "[total_q, heads, head_dim]" : "[batch, seqlen_q, heads, head_dim]")) !=
          AOTK_OK ||
      (status = check_float_dtype(out, "out")) != AOTK_OK) {
    return status;
  }
  for (int d = 0; d < rank - 1; d++) {
    if ((status = check_dim(out, "out", d, parts->shape[d + 1], "out_partials' matching size",
                            d == rank - 2 ? AOTK_ERROR_HEAD_DIM_MISMATCH : AOTK_ERROR_SHAPE_MISMATCH)) != AOTK_OK) {
      return status;
    }
  }
  if ((status = aotk__check_output_strides(out, "out")) != AOTK_OK) return status;
  const aotk_tensor *lse = &params->lse;
  p->write_lse = lse->data != NULL;
  if (p->write_lse) {
    if ((status = aotk__check_tensor(lse, "lse", rank - 2,
                                     p->packed ? "[heads, total_q]" : "[batch, heads, seqlen_q]")) != AOTK_OK) {
      return status;
    }
    if ((status = aotk__check_dtype_is(lse, "lse", AOTK_DTYPE_FLOAT32, "it is float32")) != AOTK_OK) return status;
    for (int d = 0; d < rank - 2; d++) {
      if ((status = check_dim(lse, "lse", d, lse_parts->shape[d + 1], "lse_partials' matching size",
                              AOTK_ERROR_SHAPE_MISMATCH)) != AOTK_OK) {
        return status;
      }
    }
    if ((status = aotk__check_output_strides(lse, "lse")) != AOTK_OK) return status;
  }
  p->sinks = params->sinks.data != NULL;
  int64_t unused_stride;
  if (p->sinks &&
      (status = aotk__check_fp32_vector(&params->sinks, "sinks", p->heads, p->batch, 0, &unused_stride)) != AOTK_OK) {
    return status;
  }
  int64_t rows;
  if (__builtin_mul_overflow(p->batch, p->seqlen_q, &rows) || __builtin_mul_overflow(rows, p->heads, &rows) ||
      rows > INT32_MAX || p->num_partials > INT32_MAX) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "batch * seqlen_q * heads or num_partials exceeds 2^31 - 1");
  }
  p->aligned = aotk__tensor_aligned16(parts) && aotk__tensor_aligned16(out);
  return AOTK_OK;
}
