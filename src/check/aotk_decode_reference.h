/*
 * The host reference of decoding (include/aotk.h, "Decoding": aotk_attn_decode) and of merging partial
 * attentions ("Merging partial attentions": aotk_attn_merge), for the self-test
 * (src/check/aotk_decode_check.c) and tests/test_decode_gpu.c: the header's math in float64, one query row
 * at a time, and beside it the same row computed the way the kernels of a 16-bit dtype do it, for the
 * error bound (flash-attention's rule: the kernel's error against float64 may be at most 2x that of a
 * same-precision computation, plus a small floor). Internal (aotk__ names, not exported): one copy for
 * aotk_self_test() and the tests. Nothing here allocates; every function only reads the problem and
 * writes its outputs, so rows can be computed on several threads at once.
 *
 * The math of decoding, for token i of request b (seqlen_q tokens, or len_q_b = cu_seqlens_q[b+1] -
 * cu_seqlens_q[b] packed), query head h, kv head h / (heads_q / heads_kv):
 *   L_b  = min(max(cache_seqlens[b], 0) + seqlen_new, capacity)   (seqlen_new 0 without appending)
 *   p_i  = L_b - len_q_b + i                                        (bottom-right)
 *   keys j with 0 <= j < L_b, j <= p_i under causal, and p_i - window_left <= j <= p_i + window_right
 *        where each bound is >= 0 (window_right is ignored under causal: causal is window_right = 0),
 *        and j >= cache_leftpad[b] when given
 *   s_j  = softcap * tanh(scale q_i . k_j / softcap) (or scale q_i . k_j) - slope_{b,h} |p_i - j|
 *   lse  = log(exp(sink_h) + sum_j exp(s_j)), out = sum_j exp(s_j - lse) v_j; no key and no sink: out 0,
 *          lse -inf; no key with a sink: out 0, lse = sink_h.
 * Key j of request b is row j % page_size of page block_table[b, j / page_size] (paged), or row j of
 * cache block b (contiguous). Appending writes new token t of request b at position
 * max(cache_seqlens[b], 0) + t when that is below the capacity: the caller applies that to the caches
 * the reference reads (aotk__decode_reference_append_start and aotk__decode_reference_cache_row say
 * where).
 */
#ifndef AOTK_DECODE_REFERENCE_H
#define AOTK_DECODE_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

typedef struct aotk__decode_reference_problem {
  int64_t batch;
  int64_t seqlen_q; /* tokens per request; packed: max_seqlen_q, the outputs' token dimension */
  int64_t heads_q, heads_kv, head_dim_qk, head_dim_v;
  /* q as floats (exact copies of the dtype's values): element (b, token, h, d) at
   * q[b * q_strides[0] + token * q_strides[1] + h * q_strides[2] + d]; packed (cu_seqlens_q != NULL),
   * at q[(cu_seqlens_q[b] + token) * q_strides[1] + h * q_strides[2] + d] (q_strides[0] unused). */
  const float *q;
  int64_t q_strides[3];
  const int32_t *cu_seqlens_q; /* [batch + 1] or NULL */
  /* The caches as floats: element d of (block, row, kv head) at k_cache[block * k_strides[0] + row *
   * k_strides[1] + head * k_strides[2] + d] (v alike); a block is a request (contiguous) or a page. */
  const float *k_cache, *v_cache;
  int64_t k_strides[3], v_strides[3];
  const int32_t *block_table; /* NULL: contiguous; else page of (b, slot) at block_table[b * block_table_stride + slot] */
  int64_t block_table_stride, page_size;
  int64_t capacity;             /* keys a request holds: contiguous, the cache's rows; paged, pages_per_seq * page_size */
  const int32_t *cache_seqlens; /* [batch], as passed to the call (values outside [0, capacity] clamp) */
  const int32_t *cache_leftpad; /* [batch] or NULL: request b's first key row */
  int64_t seqlen_new;           /* tokens appended per request (0: none) */
  float softmax_scale;          /* resolved as the library does: the call's, or 1 / sqrtf(head_dim_qk) */
  int causal;
  int32_t window_left, window_right; /* -1: unbounded */
  float softcap;                     /* 0: off */
  const float *alibi_slopes;         /* NULL: off; slope of (b, h) at alibi_slopes[b * alibi_batch_stride + h] */
  int64_t alibi_batch_stride;        /* 0 for slopes [heads_q] */
  const float *sinks;                /* [heads_q] or NULL */
  int dtype;                         /* the emulation's (an aotk_dtype value: AOTK_DTYPE_FLOAT16 or _BFLOAT16) */
} aotk__decode_reference_problem;

/* max(cache_seqlen, 0): where the first appended token goes (include/aotk.h). */
int64_t aotk__decode_reference_append_start(int32_t cache_seqlen);

/* L_b for a request whose cache_seqlens entry is `cache_seqlen`: min(max(cache_seqlen, 0) + seqlen_new,
 * capacity), in 64 bits (cache_seqlen + seqlen_new may pass INT32_MAX). */
int64_t aotk__decode_reference_length(int32_t cache_seqlen, int64_t seqlen_new, int64_t capacity);

/* The query tokens of request b: seqlen_q, or packed cu_seqlens_q[b + 1] - cu_seqlens_q[b]. */
int64_t aotk__decode_reference_tokens(const aotk__decode_reference_problem *p, int64_t b);

/* The element offset, within a cache of `strides` (the problem's k_strides or v_strides), of element 0
 * of key `key` of request b, kv head `head_kv`: through the block table when paged. */
int64_t aotk__decode_reference_cache_row(const aotk__decode_reference_problem *p, const int64_t strides[3], int64_t b,
                                         int64_t key, int64_t head_kv);

/* The keys [*first, *last] token `token` of `tokens` sees in request b, of L = `length` keys, at position
 * *position = length - tokens + token. Empty when *last < *first. */
void aotk__decode_reference_visible_keys(const aotk__decode_reference_problem *p, int64_t b, int64_t length,
                                         int64_t tokens, int64_t token, int64_t *first, int64_t *last,
                                         int64_t *position);

/* Bytes of scratch aotk__decode_reference_row needs (scores and an accumulator, in both precisions). */
size_t aotk__decode_reference_scratch_bytes(const aotk__decode_reference_problem *p);

/*
 * Row `row` = (b, h, token) in lse's order ((b * heads_q + h) * seqlen_q + token): the float64 attention
 * into out ([batch, seqlen_q, heads_q, head_dim_v]: head_dim_v doubles at ((b * seqlen_q + token) *
 * heads_q + h) * head_dim_v) and lse[row], the keys the row sees into keys[row], and the emulation of
 * what a kernel of p->dtype does into lowp (out's layout, floats): float32 scores, softcap, ALiBi and
 * softmax; the probabilities rounded to the dtype before they multiply V, accumulated in float32;
 * divided by the float32 sum of the unrounded ones, the sink included; rounded to the dtype. It follows
 * neither the kernels' block order nor their running maximum nor their splits: it estimates what the
 * dtype can do, it does not predict the kernels' bits. A packed request's tokens past its len_q are no
 * rows: out and lowp 0, lse -inf, keys 0.
 */
void aotk__decode_reference_row(const aotk__decode_reference_problem *p, int64_t row, void *scratch, double *out,
                                float *lowp, double *lse, int64_t *keys);

/* Every row (batch * heads_q * seqlen_q of them), one after the other, with one scratch. */
void aotk__decode_reference(const aotk__decode_reference_problem *p, void *scratch, double *out, float *lowp,
                            double *lse, int64_t *keys);

/* ---- merging ------------------------------------------------------------------------------------
 *
 * One row of a merge: `keys` scores and value rows (values[j * head_dim + d]) dealt among partials
 * (dealt[j] names key j's partial). Each partial is the float64 attention over its own keys (what a
 * split of the decoding, or any attention over a disjoint key set, stores), the merge's float64
 * reference is the attention over every key (the sink joining once), and the same-precision emulation
 * merges the partials as stored (in their dtype, lse in float32) the way the kernel does, in float32. */

/* Partial `partial`'s attention: head_dim doubles into out_row; returns its lse, or -INFINITY (out_row
 * then all 0) when no key was dealt to it. */
double aotk__merge_reference_partial_f64(const double *scores, const double *values, const int32_t *dealt, int64_t keys,
                                         int32_t partial, int64_t head_dim, double *out_row);

/* The attention over every key, with the sink's logit (-INFINITY: none) in the denominator: head_dim
 * doubles into out_row (0 without keys); returns the lse (-INFINITY with neither keys nor sink). */
double aotk__merge_reference_attention_f64(const double *scores, const double *values, int64_t keys, int64_t head_dim,
                                           float sink, double *out_row);

/* The float32 merge of num_partials stored partials: lse_partials[p] and out_partials[p * head_dim +
 * d] (the stored values as floats), sink as above. A partial with lse -inf adds nothing, whatever its
 * out holds. Writes head_dim floats rounded to out_dtype (an aotk_dtype value) to out_row, 0 when no
 * partial and no sink has weight. */
void aotk__merge_reference_lowp(const float *lse_partials, const float *out_partials, int64_t num_partials,
                                int64_t head_dim, float sink, int out_dtype, float *out_row);

#endif /* AOTK_DECODE_REFERENCE_H */
