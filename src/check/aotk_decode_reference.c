/* The host reference of decoding and merging: see aotk_decode_reference.h. */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include "aotk_decode_reference.h"
#include "aotk_half.h"
#include "aotk_reference.h"

int64_t aotk__decode_reference_append_start(int32_t cache_seqlen) { return cache_seqlen < 0 ? 0 : (int64_t)cache_seqlen; }

int64_t aotk__decode_reference_length(int32_t cache_seqlen, int64_t seqlen_new, int64_t capacity) {
  const int64_t end = aotk__decode_reference_append_start(cache_seqlen) + seqlen_new;
  return end > capacity ? capacity : end;
}

int64_t aotk__decode_reference_tokens(const aotk__decode_reference_problem *p, int64_t b) {
  return p->cu_seqlens_q != NULL ? (int64_t)p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b] : p->seqlen_q;
}

int64_t aotk__decode_reference_cache_row(const aotk__decode_reference_problem *p, const int64_t strides[3], int64_t b,
                                         int64_t key, int64_t head_kv) {
  int64_t block = b, row = key;
  if (p->block_table != NULL) {
    block = p->block_table[b * p->block_table_stride + key / p->page_size];
    row = key % p->page_size;
  }
  return block * strides[0] + row * strides[1] + head_kv * strides[2];
}

void aotk__decode_reference_visible_keys(const aotk__decode_reference_problem *p, int64_t b, int64_t length,
                                         int64_t tokens, int64_t token, int64_t *first, int64_t *last,
                                         int64_t *position) {
  const int64_t at = length - tokens + token;
  const int64_t right = p->causal ? 0 : p->window_right;
  *first = p->window_left >= 0 && at - p->window_left > 0 ? at - p->window_left : 0;
  if (p->cache_leftpad != NULL && p->cache_leftpad[b] > *first) *first = p->cache_leftpad[b];
  *last = right >= 0 && at + right < length - 1 ? at + right : length - 1;
  *position = at;
}

size_t aotk__decode_reference_scratch_bytes(const aotk__decode_reference_problem *p) {
  return (size_t)(p->capacity + p->head_dim_v) * (sizeof(double) + sizeof(float));
}

void aotk__decode_reference_row(const aotk__decode_reference_problem *p, int64_t row, void *scratch, double *out,
                                float *lowp, double *lse, int64_t *keys) {
  const int64_t S = p->seqlen_q, HQ = p->heads_q, DQK = p->head_dim_qk, DV = p->head_dim_v;
  const int64_t b = row / (HQ * S), h = row / S % HQ, token = row % S, head_kv = h / (HQ / p->heads_kv);
  double *out_row = out + ((b * S + token) * HQ + h) * DV;
  float *lowp_row = lowp + ((b * S + token) * HQ + h) * DV;
  const int64_t tokens = aotk__decode_reference_tokens(p, b);
  if (token >= tokens) { /* packed: no such token */
    for (int64_t d = 0; d < DV; d++) {
      out_row[d] = 0.0;
      lowp_row[d] = 0.0f;
    }
    keys[row] = 0;
    lse[row] = -(double)INFINITY;
    return;
  }
  int64_t first, last, position;
  const int64_t length = aotk__decode_reference_length(p->cache_seqlens[b], p->seqlen_new, p->capacity);
  aotk__decode_reference_visible_keys(p, b, length, tokens, token, &first, &last, &position);
  const int64_t count = last >= first ? last - first + 1 : 0;
  double *scores = scratch, *acc = scores + p->capacity;
  float *scores_f32 = (float *)(acc + DV), *acc_f32 = scores_f32 + p->capacity;
  const int64_t q_offset = p->cu_seqlens_q != NULL ? (p->cu_seqlens_q[b] + token) * p->q_strides[1]
                                                   : b * p->q_strides[0] + token * p->q_strides[1];
  const float *q_row = p->q + q_offset + h * p->q_strides[2];
  const double scale = p->softmax_scale, softcap = p->softcap;
  const float slope = p->alibi_slopes != NULL ? p->alibi_slopes[b * p->alibi_batch_stride + h] : 0.0f;
  const bool sink = p->sinks != NULL;
  const float sink_value = sink ? p->sinks[h] : 0.0f;
  double max_score = sink ? (double)sink_value : -(double)INFINITY;
  float max_f32 = sink ? sink_value : -INFINITY;
  for (int64_t i = 0; i < count; i++) {
    const int64_t key = first + i;
    const float *k_row = p->k_cache + aotk__decode_reference_cache_row(p, p->k_strides, b, key, head_kv);
    double s = aotk__reference_dot_f64(q_row, k_row, DQK) * scale;
    float s_f32 = aotk__reference_dot_f32(q_row, k_row, DQK) * p->softmax_scale;
    if (softcap > 0.0) {
      s = softcap * tanh(s / softcap);
      s_f32 = p->softcap * tanhf(s_f32 / p->softcap);
    }
    const int64_t distance = position > key ? position - key : key - position;
    s -= (double)slope * (double)distance;
    s_f32 -= slope * (float)distance;
    scores[i] = s;
    scores_f32[i] = s_f32;
    if (s > max_score) max_score = s;
    if (s_f32 > max_f32) max_f32 = s_f32;
  }
  keys[row] = count;
  for (int64_t d = 0; d < DV; d++) {
    out_row[d] = 0.0;
    lowp_row[d] = 0.0f;
    acc[d] = 0.0;
    acc_f32[d] = 0.0f;
  }
  if (max_score == -(double)INFINITY) { /* no key, no sink */
    lse[row] = -(double)INFINITY;
    return;
  }
  double sum = sink ? exp((double)sink_value - max_score) : 0.0;
  float sum_f32 = sink ? expf(sink_value - max_f32) : 0.0f;
  for (int64_t i = 0; i < count; i++) {
    const float *v_row = p->v_cache + aotk__decode_reference_cache_row(p, p->v_strides, b, first + i, head_kv);
    const double weight = exp(scores[i] - max_score);
    const float weight_f32 = expf(scores_f32[i] - max_f32);
    const float weight_in_dtype = aotk__round_to_dtype(weight_f32, p->dtype);
    sum += weight;
    sum_f32 += weight_f32;
    for (int64_t d = 0; d < DV; d++) {
      acc[d] += weight * (double)v_row[d];
      acc_f32[d] += weight_in_dtype * v_row[d];
    }
  }
  for (int64_t d = 0; d < DV; d++) {
    out_row[d] = acc[d] / sum;
    lowp_row[d] = aotk__round_to_dtype(acc_f32[d] / sum_f32, p->dtype);
  }
  lse[row] = max_score + log(sum);
}

void aotk__decode_reference(const aotk__decode_reference_problem *p, void *scratch, double *out, float *lowp,
                            double *lse, int64_t *keys) {
  const int64_t rows = p->batch * p->heads_q * p->seqlen_q;
  for (int64_t row = 0; row < rows; row++) aotk__decode_reference_row(p, row, scratch, out, lowp, lse, keys);
}

/* ---- merging ------------------------------------------------------------------------------------ */

double aotk__merge_reference_partial_f64(const double *scores, const double *values, const int32_t *dealt, int64_t keys,
                                         int32_t partial, int64_t head_dim, double *out_row) {
  double max_score = -(double)INFINITY, sum = 0.0;
  for (int64_t j = 0; j < keys; j++) {
    if (dealt[j] == partial && scores[j] > max_score) max_score = scores[j];
  }
  for (int64_t d = 0; d < head_dim; d++) out_row[d] = 0.0;
  for (int64_t j = 0; j < keys; j++) {
    if (dealt[j] != partial) continue;
    const double weight = exp(scores[j] - max_score);
    sum += weight;
    for (int64_t d = 0; d < head_dim; d++) out_row[d] += weight * values[j * head_dim + d];
  }
  if (sum == 0.0) return -(double)INFINITY; /* no key: the largest weight, exp(0), would be 1 */
  for (int64_t d = 0; d < head_dim; d++) out_row[d] /= sum;
  return max_score + log(sum);
}

double aotk__merge_reference_attention_f64(const double *scores, const double *values, int64_t keys, int64_t head_dim,
                                           float sink, double *out_row) {
  double max_score = (double)sink;
  for (int64_t j = 0; j < keys; j++) max_score = scores[j] > max_score ? scores[j] : max_score;
  for (int64_t d = 0; d < head_dim; d++) out_row[d] = 0.0;
  if (max_score == -(double)INFINITY) return -(double)INFINITY;
  double sum = exp((double)sink - max_score);
  for (int64_t j = 0; j < keys; j++) sum += exp(scores[j] - max_score);
  const double lse = max_score + log(sum);
  for (int64_t j = 0; j < keys; j++) {
    const double weight = exp(scores[j] - lse);
    for (int64_t d = 0; d < head_dim; d++) out_row[d] += weight * values[j * head_dim + d];
  }
  return lse;
}

void aotk__merge_reference_lowp(const float *lse_partials, const float *out_partials, int64_t num_partials,
                                int64_t head_dim, float sink, int out_dtype, float *out_row) {
  float m = sink;
  for (int64_t p = 0; p < num_partials; p++) {
    if (lse_partials[p] > m) m = lse_partials[p];
  }
  const float m_safe = m == -INFINITY ? 0.0f : m;
  float total = expf(sink - m_safe);
  for (int64_t p = 0; p < num_partials; p++) total += expf(lse_partials[p] - m_safe);
  for (int64_t d = 0; d < head_dim; d++) {
    float sum = 0.0f;
    for (int64_t p = 0; p < num_partials; p++) {
      if (lse_partials[p] == -INFINITY) continue;
      sum += expf(lse_partials[p] - m_safe) / total * out_partials[p * head_dim + d];
    }
    out_row[d] = total > 0.0f ? aotk__round_to_dtype(sum, out_dtype) : 0.0f;
  }
}
