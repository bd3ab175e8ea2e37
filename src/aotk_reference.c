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

/* Dot products with four partial sums: the references make several per (row, key) pair, and a single
 * running sum would wait on the adder's latency at every element. The order of a float64 sum of
 * float products does not matter at the precision checked; the emulation's order was never the
 * kernels' (tensor cores) anyway. */
static double dot_f64(const float *a, const float *b, int64_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  int64_t d = 0;
  for (; d + 4 <= n; d += 4) {
    s0 += (double)a[d] * (double)b[d];
    s1 += (double)a[d + 1] * (double)b[d + 1];
    s2 += (double)a[d + 2] * (double)b[d + 2];
    s3 += (double)a[d + 3] * (double)b[d + 3];
  }
  for (; d < n; d++) s0 += (double)a[d] * (double)b[d];
  return (s0 + s1) + (s2 + s3);
}

static float dot_f32(const float *a, const float *b, int64_t n) {
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  int64_t d = 0;
  for (; d + 4 <= n; d += 4) {
    s0 += a[d] * b[d];
    s1 += a[d + 1] * b[d + 1];
    s2 += a[d + 2] * b[d + 2];
    s3 += a[d + 3] * b[d + 3];
  }
  for (; d < n; d++) s0 += a[d] * b[d];
  return (s0 + s1) + (s2 + s3);
}

static double score_f64(const aotk__attn_reference_problem *p, const row_view *view, int64_t key) {
  return dot_f64(view->q_row, view->k_head + key * view->k_seq_stride, p->head_dim) * p->softmax_scale;
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
  return dot_f32(view->q_row, view->k_head + key * view->k_seq_stride, p->head_dim) * softmax_scale;
}

/* The forward emulation of one row; also gives the float32 running maximum and denominator, from
 * which the backward emulation takes its lse. */
static void row_lowp(const aotk__attn_reference_problem *p, int dtype, const row_view *view, float *out_row,
                     float *max_score_out, float *sum_out) {
  float softmax_scale = (float)p->softmax_scale;
  for (int64_t d = 0; d < p->head_dim; d++) out_row[d] = 0.0f;
  *max_score_out = -INFINITY;
  *sum_out = 0.0f;
  if (view->visible_keys == 0) return;

  float max_score = -INFINITY;
  for (int64_t key = 0; key < view->visible_keys; key++) {
    float score = score_f32(p, view, key, softmax_scale);
    if (score > max_score) max_score = score;
  }

  /* The kernel sums the float32 probabilities before rounding them for the P*V product, so the
   * denominator carries no dtype rounding while the numerator does. */
  float sum = 0.0f;
  for (int64_t key = 0; key < view->visible_keys; key++) {
    float weight = expf(score_f32(p, view, key, softmax_scale) - max_score);
    float weight_in_dtype = aotk__round_to_dtype(weight, dtype);
    const float *v_row = view->v_head + key * view->v_seq_stride;
    sum += weight;
    for (int64_t d = 0; d < p->head_dim; d++) out_row[d] += weight_in_dtype * v_row[d];
  }
  for (int64_t d = 0; d < p->head_dim; d++) out_row[d] = aotk__round_to_dtype(out_row[d] / sum, dtype);
  *max_score_out = max_score;
  *sum_out = sum;
}

void aotk__attn_reference_row_lowp(const aotk__attn_reference_problem *p, int dtype, int64_t batch,
                                   int64_t head_q, int64_t row, float *out_row) {
  row_view view = view_row(p, batch, head_q, row);
  float max_score, sum;
  row_lowp(p, dtype, &view, out_row, &max_score, &sum);
}

/* ---- the backward ------------------------------------------------------------------------------ */

static const float *dout_row_of(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q, int64_t row) {
  return p->dout + batch * p->dout_strides[0] + row * p->dout_strides[1] + head_q * p->dout_strides[2];
}

/* The first query row that sees key `key` (all rows from it on do); seqlen_q if none. */
static int64_t first_row_seeing(const aotk__attn_reference_problem *p, int64_t key) {
  if (!p->causal) return 0;
  int64_t first = key - (p->seqlen_k - p->seqlen_q);
  return first < 0 ? 0 : first;
}

void aotk__attn_reference_bwd_row_stats_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q,
                                            int64_t row, double *out_row, double *lse, double *delta) {
  aotk__attn_reference_row_f64(p, batch, head_q, row, out_row, lse);
  const float *dout_row = dout_row_of(p, batch, head_q, row);
  double sum = 0.0;
  for (int64_t d = 0; d < p->head_dim; d++) sum += (double)dout_row[d] * out_row[d];
  *delta = sum; /* 0 for an empty row: its out_row is 0 */
}

void aotk__attn_reference_bwd_dq_row_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q,
                                         int64_t row, double lse, double delta, double *dq_row) {
  row_view view = view_row(p, batch, head_q, row);
  const float *dout_row = dout_row_of(p, batch, head_q, row);
  const int64_t head_dim = p->head_dim;
  for (int64_t d = 0; d < head_dim; d++) dq_row[d] = 0.0;
  for (int64_t key = 0; key < view.visible_keys; key++) {
    const float *k_row = view.k_head + key * view.k_seq_stride;
    const float *v_row = view.v_head + key * view.v_seq_stride;
    double probability = exp(dot_f64(view.q_row, k_row, head_dim) * p->softmax_scale - lse);
    double ds = probability * (dot_f64(dout_row, v_row, head_dim) - delta);
    for (int64_t d = 0; d < head_dim; d++) dq_row[d] += ds * (double)k_row[d];
  }
  for (int64_t d = 0; d < head_dim; d++) dq_row[d] *= p->softmax_scale;
}

void aotk__attn_reference_bwd_dkdv_row_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_kv,
                                           int64_t key, const double *lse, const double *delta, double *dk_row,
                                           double *dv_row) {
  const int64_t head_dim = p->head_dim, group_size = p->heads_q / p->heads_kv;
  const float *k_row = p->k + batch * p->k_strides[0] + key * p->k_strides[1] + head_kv * p->k_strides[2];
  const float *v_row = p->v + batch * p->v_strides[0] + key * p->v_strides[1] + head_kv * p->v_strides[2];
  for (int64_t d = 0; d < head_dim; d++) {
    dk_row[d] = 0.0;
    dv_row[d] = 0.0;
  }
  for (int64_t head_q = head_kv * group_size; head_q < (head_kv + 1) * group_size; head_q++) {
    for (int64_t row = first_row_seeing(p, key); row < p->seqlen_q; row++) {
      const float *q_row = p->q + batch * p->q_strides[0] + row * p->q_strides[1] + head_q * p->q_strides[2];
      const float *dout_row = dout_row_of(p, batch, head_q, row);
      const int64_t stat = head_q * p->seqlen_q + row;
      double probability = exp(dot_f64(q_row, k_row, head_dim) * p->softmax_scale - lse[stat]);
      double ds = probability * (dot_f64(dout_row, v_row, head_dim) - delta[stat]);
      for (int64_t d = 0; d < head_dim; d++) {
        dv_row[d] += probability * (double)dout_row[d];
        dk_row[d] += ds * (double)q_row[d];
      }
    }
  }
  for (int64_t d = 0; d < head_dim; d++) dk_row[d] *= p->softmax_scale;
}

void aotk__attn_reference_bwd_row_stats_lowp(const aotk__attn_reference_problem *p, int dtype, int64_t batch,
                                             int64_t head_q, int64_t row, float *out_row, float *lse, float *delta) {
  row_view view = view_row(p, batch, head_q, row);
  float max_score, sum;
  row_lowp(p, dtype, &view, out_row, &max_score, &sum);
  if (view.visible_keys == 0) {
    *lse = -INFINITY;
    *delta = 0.0f;
    return;
  }
  *lse = max_score + logf(sum);
  /* The kernels' delta reads out as the forward stored it, in dtype: out_row already is. It is summed
   * here in another order than dot_f32's, as the kernels' reduction differs from their tensor-core dP:
   * where dP - delta cancels in exact arithmetic (a row that sees a single key has dS = 0), the
   * float32 rounding noise left over, which the kernels sum over rows into dk, is then in the
   * emulation too instead of cancelling exactly. */
  const float *dout_row = dout_row_of(p, batch, head_q, row);
  float sum_of_products = 0.0f;
  for (int64_t d = 0; d < p->head_dim; d++) sum_of_products += dout_row[d] * out_row[d];
  *delta = sum_of_products;
}

void aotk__attn_reference_bwd_dq_row_lowp(const aotk__attn_reference_problem *p, int dtype, int64_t batch,
                                          int64_t head_q, int64_t row, float lse, float delta, float *dq_row) {
  row_view view = view_row(p, batch, head_q, row);
  const float *dout_row = dout_row_of(p, batch, head_q, row);
  const int64_t head_dim = p->head_dim;
  const float softmax_scale = (float)p->softmax_scale;
  for (int64_t d = 0; d < head_dim; d++) dq_row[d] = 0.0f;
  for (int64_t key = 0; key < view.visible_keys; key++) {
    const float *k_row = view.k_head + key * view.k_seq_stride;
    const float *v_row = view.v_head + key * view.v_seq_stride;
    float probability = expf(dot_f32(view.q_row, k_row, head_dim) * softmax_scale - lse);
    float ds = probability * (dot_f32(dout_row, v_row, head_dim) - delta);
    float ds_in_dtype = aotk__round_to_dtype(ds, dtype);
    for (int64_t d = 0; d < head_dim; d++) dq_row[d] += ds_in_dtype * k_row[d];
  }
  for (int64_t d = 0; d < head_dim; d++) dq_row[d] = aotk__round_to_dtype(dq_row[d] * softmax_scale, dtype);
}

void aotk__attn_reference_bwd_dkdv_row_lowp(const aotk__attn_reference_problem *p, int dtype, int64_t batch,
                                            int64_t head_kv, int64_t key, const float *lse, const float *delta,
                                            float *dk_row, float *dv_row) {
  const int64_t head_dim = p->head_dim, group_size = p->heads_q / p->heads_kv;
  const float softmax_scale = (float)p->softmax_scale;
  const float *k_row = p->k + batch * p->k_strides[0] + key * p->k_strides[1] + head_kv * p->k_strides[2];
  const float *v_row = p->v + batch * p->v_strides[0] + key * p->v_strides[1] + head_kv * p->v_strides[2];
  for (int64_t d = 0; d < head_dim; d++) {
    dk_row[d] = 0.0f;
    dv_row[d] = 0.0f;
  }
  for (int64_t head_q = head_kv * group_size; head_q < (head_kv + 1) * group_size; head_q++) {
    for (int64_t row = first_row_seeing(p, key); row < p->seqlen_q; row++) {
      const float *q_row = p->q + batch * p->q_strides[0] + row * p->q_strides[1] + head_q * p->q_strides[2];
      const float *dout_row = dout_row_of(p, batch, head_q, row);
      const int64_t stat = head_q * p->seqlen_q + row;
      float probability = expf(dot_f32(q_row, k_row, head_dim) * softmax_scale - lse[stat]);
      float ds = probability * (dot_f32(dout_row, v_row, head_dim) - delta[stat]);
      float probability_in_dtype = aotk__round_to_dtype(probability, dtype);
      float ds_in_dtype = aotk__round_to_dtype(ds, dtype);
      for (int64_t d = 0; d < head_dim; d++) {
        dv_row[d] += probability_in_dtype * dout_row[d];
        dk_row[d] += ds_in_dtype * q_row[d];
      }
    }
  }
  for (int64_t d = 0; d < head_dim; d++) {
    dk_row[d] = aotk__round_to_dtype(dk_row[d] * softmax_scale, dtype);
    dv_row[d] = aotk__round_to_dtype(dv_row[d], dtype);
  }
}
