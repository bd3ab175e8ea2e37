#include "aotk_reference.h"

#include <math.h>

#include "aotk_half.h"

/* Where one (batch, head) slice of each tensor starts, and which keys a query row sees. */
typedef struct row_view {
  const float *q_row;
  const float *k_head;
  const float *v_head;
  int64_t k_seq_stride, v_seq_stride;
  int64_t visible_keys; /* the row sees keys 0 .. visible_keys - 1 */
} row_view;

static row_view view_row(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q, int64_t row) {
  int64_t heads_per_kv_head = p->heads_q / p->heads_kv;
  int64_t head_kv = head_q / heads_per_kv_head;
  row_view view;
  view.q_row = p->q + batch * p->q_strides[0] + row * p->q_strides[1] + head_q * p->q_strides[2];
  view.k_head = p->k + batch * p->k_strides[0] + head_kv * p->k_strides[2];
  view.v_head = p->v + batch * p->v_strides[0] + head_kv * p->v_strides[2];
  view.k_seq_stride = p->k_strides[1];
  view.v_seq_stride = p->v_strides[1];
  view.visible_keys = p->seqlen_k;
  if (p->causal) {
    /* Bottom-right alignment: the last query row lines up with the last key. */
    int64_t last_visible_key = row + p->seqlen_k - p->seqlen_q;
    if (last_visible_key + 1 < view.visible_keys) view.visible_keys = last_visible_key + 1;
    if (view.visible_keys < 0) view.visible_keys = 0;
  }
  return view;
}

static double score_f64(const aotk__attn_reference_problem *p, const row_view *view, int64_t key) {
  const float *k_row = view->k_head + key * view->k_seq_stride;
  double dot = 0.0;
  for (int64_t d = 0; d < p->head_dim; d++) dot += (double)view->q_row[d] * (double)k_row[d];
  return dot * p->softmax_scale;
}

void aotk__attn_reference_row_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q,
                                  int64_t row, double *out_row, double *lse) {
  row_view view = view_row(p, batch, head_q, row);
  for (int64_t d = 0; d < p->head_dim; d++) out_row[d] = 0.0;
  if (view.visible_keys == 0) {
    *lse = -(double)INFINITY;
    return;
  }

  double max_score = -(double)INFINITY;
  for (int64_t key = 0; key < view.visible_keys; key++) {
    double score = score_f64(p, &view, key);
    if (score > max_score) max_score = score;
  }

  double sum = 0.0;
  for (int64_t key = 0; key < view.visible_keys; key++) {
    double weight = exp(score_f64(p, &view, key) - max_score);
    const float *v_row = view.v_head + key * view.v_seq_stride;
    sum += weight;
    for (int64_t d = 0; d < p->head_dim; d++) out_row[d] += weight * (double)v_row[d];
  }
  /* sum >= 1: the largest score contributes exp(0). */
  for (int64_t d = 0; d < p->head_dim; d++) out_row[d] /= sum;
  *lse = max_score + log(sum);
}

static float score_f32(const aotk__attn_reference_problem *p, const row_view *view, int64_t key,
                       float softmax_scale) {
  const float *k_row = view->k_head + key * view->k_seq_stride;
  float dot = 0.0f;
  for (int64_t d = 0; d < p->head_dim; d++) dot += view->q_row[d] * k_row[d];
  return dot * softmax_scale;
}

void aotk__attn_reference_row_lowp(const aotk__attn_reference_problem *p, int dtype, int64_t batch,
                                   int64_t head_q, int64_t row, float *out_row) {
  row_view view = view_row(p, batch, head_q, row);
  float softmax_scale = (float)p->softmax_scale;
  for (int64_t d = 0; d < p->head_dim; d++) out_row[d] = 0.0f;
  if (view.visible_keys == 0) return;

  float max_score = -INFINITY;
  for (int64_t key = 0; key < view.visible_keys; key++) {
    float score = score_f32(p, &view, key, softmax_scale);
    if (score > max_score) max_score = score;
  }

  /* The kernel sums the float32 probabilities before rounding them for the P*V product, so the
   * denominator carries no dtype rounding while the numerator does. */
  float sum = 0.0f;
  for (int64_t key = 0; key < view.visible_keys; key++) {
    float weight = expf(score_f32(p, &view, key, softmax_scale) - max_score);
    float weight_in_dtype = aotk__round_to_dtype(weight, dtype);
    const float *v_row = view.v_head + key * view.v_seq_stride;
    sum += weight;
    for (int64_t d = 0; d < p->head_dim; d++) out_row[d] += weight_in_dtype * v_row[d];
  }
  for (int64_t d = 0; d < p->head_dim; d++) out_row[d] = aotk__round_to_dtype(out_row[d] / sum, dtype);
}
