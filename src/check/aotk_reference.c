#include "aotk_reference.h"

#include <math.h>
#include <stddef.h>

#include "aotk_half.h"

static int64_t value_head_dim(const aotk__attn_reference_problem *p) {
  return p->head_dim_v > 0 ? p->head_dim_v : p->head_dim;
}

/* Where causal masks and windows put row i's diagonal: key i + diag. */
static int64_t diagonal(const aotk__attn_reference_problem *p) {
  return p->top_left ? 0 : p->seqlen_k - p->seqlen_q;
}

/* The mask's bounds, each a distance from the diagonal, or -1 for an unbounded side. Causal is the
 * right bound 0, which is at least as tight as any window's right bound. */
static void window_bounds(const aotk__attn_reference_problem *p, int64_t *left, int64_t *right) {
  *left = p->has_window && p->window_left >= 0 ? p->window_left : -1;
  *right = p->has_window && p->window_right >= 0 ? p->window_right : -1;
  if (p->causal) *right = 0;
}

/* The keys row `row` sees: *begin .. *end - 1, an empty range (*begin == *end) when none. Each mask
 * bounds the keys on one side, so what a row sees is always one run of keys. */
static void keys_seen_by(const aotk__attn_reference_problem *p, int64_t row, int64_t *begin, int64_t *end) {
  const int64_t diag_key = row + diagonal(p);
  int64_t left, right;
  window_bounds(p, &left, &right);
  int64_t first = 0, last = p->seqlen_k - 1;
  if (left >= 0 && diag_key - left > first) first = diag_key - left;
  if (right >= 0 && diag_key + right < last) last = diag_key + right;
  *begin = first;
  *end = last >= first ? last + 1 : first;
}

/* The rows that see key `key`: the same bounds solved for the row, *begin .. *end - 1, possibly
 * empty. Row i sees key j iff j - right <= i + diag <= j + left. */
static void rows_seeing(const aotk__attn_reference_problem *p, int64_t key, int64_t *begin, int64_t *end) {
  const int64_t diag_row = key - diagonal(p); /* the row whose diagonal is this key */
  int64_t left, right;
  window_bounds(p, &left, &right);
  int64_t first = 0, last = p->seqlen_q - 1;
  if (right >= 0 && diag_row - right > first) first = diag_row - right;
  if (left >= 0 && diag_row + left < last) last = diag_row + left;
  *begin = first;
  *end = last >= first ? last + 1 : first;
}

/* The score's ALiBi term for (row, key): what is subtracted after the softcap. */
static double alibi_bias(const aotk__attn_reference_problem *p, int64_t head_q, int64_t row, int64_t key) {
  if (p->alibi_slopes == NULL) return 0.0;
  int64_t distance = row + diagonal(p) - key;
  return (double)p->alibi_slopes[head_q] * (double)(distance < 0 ? -distance : distance);
}

static float alibi_bias_f32(const aotk__attn_reference_problem *p, int64_t head_q, int64_t row, int64_t key) {
  if (p->alibi_slopes == NULL) return 0.0f;
  int64_t distance = row + diagonal(p) - key;
  return p->alibi_slopes[head_q] * (float)(distance < 0 ? -distance : distance);
}

/* D_ij: the dropout factor of a pair, keep_ij / (1 - dropout_p), or 1 without dropout. */
static double dropout_factor(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q, int64_t row,
                             int64_t key) {
  if (p->keep == NULL) return 1.0;
  uint8_t kept = p->keep[batch * p->keep_strides[0] + head_q * p->keep_strides[1] + row * p->keep_strides[2] + key];
  return kept ? 1.0 / (1.0 - p->dropout_p) : 0.0;
}

static int is_kept(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q, int64_t row, int64_t key) {
  if (p->keep == NULL) return 1;
  return p->keep[batch * p->keep_strides[0] + head_q * p->keep_strides[1] + row * p->keep_strides[2] + key] != 0;
}

/* float32(1 / (1 - dropout_p)), the emulation's scale of kept weights; exactly 1 without dropout, so
 * multiplying by it changes nothing there. */
static float keep_scale_f32(const aotk__attn_reference_problem *p) {
  return p->keep == NULL ? 1.0f : (float)(1.0 / (1.0 - p->dropout_p));
}

/* Where one (batch, head) slice of each tensor starts, and which keys a query row sees. */
typedef struct row_view {
  int64_t batch, head_q, row;
  const float *q_row;
  const float *k_head;
  const float *v_head;
  int64_t k_seq_stride, v_seq_stride;
  int64_t key_begin, key_end; /* the row sees keys key_begin .. key_end - 1 */
} row_view;

static row_view view_row(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q, int64_t row) {
  int64_t heads_per_kv_head = p->heads_q / p->heads_kv;
  int64_t head_kv = head_q / heads_per_kv_head;
  row_view view;
  view.batch = batch;
  view.head_q = head_q;
  view.row = row;
  view.q_row = p->q + batch * p->q_strides[0] + row * p->q_strides[1] + head_q * p->q_strides[2];
  view.k_head = p->k + batch * p->k_strides[0] + head_kv * p->k_strides[2];
  view.v_head = p->v + batch * p->v_strides[0] + head_kv * p->v_strides[2];
  view.k_seq_stride = p->k_strides[1];
  view.v_seq_stride = p->v_strides[1];
  keys_seen_by(p, row, &view.key_begin, &view.key_end);
  return view;
}

/* Dot products with four partial sums: the references make several per (row, key) pair, and a single
 * running sum would wait on the adder's latency at every element. The order of a float64 sum of
 * float products does not matter at the precision checked; the emulation's order was never the
 * kernels' (tensor cores) anyway. */
double aotk__reference_dot_f64(const float *a, const float *b, int64_t n) {
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

float aotk__reference_dot_f32(const float *a, const float *b, int64_t n) {
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

/* s_ij of query row q_row (row `row` of head_q) and key row k_row (key `key`): scale, softcap, ALiBi.
 * If score_derivative is not NULL it receives ds/dx, x the scaled dot product: the softcap's
 * 1 - tanh^2 (1 without softcap; ALiBi only shifts s). */
static double score_f64(const aotk__attn_reference_problem *p, const float *q_row, const float *k_row,
                        int64_t head_q, int64_t row, int64_t key, double *score_derivative) {
  double score = aotk__reference_dot_f64(q_row, k_row, p->head_dim) * p->softmax_scale;
  double derivative = 1.0;
  if (p->softcap > 0.0) {
    double t = tanh(score / p->softcap);
    score = p->softcap * t;
    derivative = 1.0 - t * t;
  }
  score -= alibi_bias(p, head_q, row, key);
  if (score_derivative != NULL) *score_derivative = derivative;
  return score;
}

static float score_f32(const aotk__attn_reference_problem *p, const float *q_row, const float *k_row,
                       int64_t head_q, int64_t row, int64_t key, float *score_derivative) {
  float score = aotk__reference_dot_f32(q_row, k_row, p->head_dim) * (float)p->softmax_scale;
  float derivative = 1.0f;
  if (p->softcap > 0.0) {
    float softcap = (float)p->softcap;
    float t = tanhf(score / softcap);
    score = softcap * t;
    derivative = 1.0f - t * t;
  }
  score -= alibi_bias_f32(p, head_q, row, key);
  if (score_derivative != NULL) *score_derivative = derivative;
  return score;
}

static const float *k_row_of(const row_view *view, int64_t key) { return view->k_head + key * view->k_seq_stride; }
static const float *v_row_of(const row_view *view, int64_t key) { return view->v_head + key * view->v_seq_stride; }

void aotk__attn_reference_row_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q,
                                  int64_t row, double *out_row, double *lse) {
  row_view view = view_row(p, batch, head_q, row);
  const int64_t head_dim_v = value_head_dim(p);
  for (int64_t d = 0; d < head_dim_v; d++) out_row[d] = 0.0;

  /* The sink takes part in the maximum as in the sum: a sink far above every score would otherwise
   * overflow exp. */
  double max_score = p->sinks != NULL ? (double)p->sinks[head_q] : -(double)INFINITY;
  for (int64_t key = view.key_begin; key < view.key_end; key++) {
    double score = score_f64(p, view.q_row, k_row_of(&view, key), head_q, row, key, NULL);
    if (score > max_score) max_score = score;
  }
  /* No key and no (finite) sink: nothing to normalise. */
  if (max_score == -(double)INFINITY) {
    *lse = -(double)INFINITY;
    return;
  }

  double sum = p->sinks != NULL ? exp((double)p->sinks[head_q] - max_score) : 0.0;
  for (int64_t key = view.key_begin; key < view.key_end; key++) {
    double weight = exp(score_f64(p, view.q_row, k_row_of(&view, key), head_q, row, key, NULL) - max_score);
    double dropped_weight = weight * dropout_factor(p, batch, head_q, row, key);
    const float *v_row = v_row_of(&view, key);
    sum += weight;
    for (int64_t d = 0; d < head_dim_v; d++) out_row[d] += dropped_weight * (double)v_row[d];
  }
  /* sum >= 1: the largest score (or the sink) contributes exp(0). */
  for (int64_t d = 0; d < head_dim_v; d++) out_row[d] /= sum;
  *lse = max_score + log(sum);
}

/* The forward emulation of one row; also gives the float32 maximum and denominator (the sink's
 * included), from which the backward emulation takes its lse. A row with neither key nor sink gets
 * max -INFINITY and sum 0. */
static void row_lowp(const aotk__attn_reference_problem *p, int dtype, const row_view *view, float *out_row,
                     float *max_score_out, float *sum_out) {
  const int64_t head_dim_v = value_head_dim(p);
  for (int64_t d = 0; d < head_dim_v; d++) out_row[d] = 0.0f;
  *max_score_out = -INFINITY;
  *sum_out = 0.0f;

  float max_score = p->sinks != NULL ? p->sinks[view->head_q] : -INFINITY;
  for (int64_t key = view->key_begin; key < view->key_end; key++) {
    float score = score_f32(p, view->q_row, k_row_of(view, key), view->head_q, view->row, key, NULL);
    if (score > max_score) max_score = score;
  }
  if (max_score == -INFINITY) return;

  /* The kernel sums the float32 probabilities before rounding them for the P*V product, so the
   * denominator carries no dtype rounding while the numerator does. A dropped weight still counts in
   * the denominator (lse is the undropped softmax's) and is zeroed only for the product; the kept ones
   * enter it unscaled, and 1 / (1 - dropout_p) is applied once to the normalised row. */
  float sum = p->sinks != NULL ? expf(p->sinks[view->head_q] - max_score) : 0.0f;
  for (int64_t key = view->key_begin; key < view->key_end; key++) {
    float weight = expf(score_f32(p, view->q_row, k_row_of(view, key), view->head_q, view->row, key, NULL) - max_score);
    sum += weight;
    if (!is_kept(p, view->batch, view->head_q, view->row, key)) continue;
    float weight_in_dtype = aotk__round_to_dtype(weight, dtype);
    const float *v_row = v_row_of(view, key);
    for (int64_t d = 0; d < head_dim_v; d++) out_row[d] += weight_in_dtype * v_row[d];
  }
  const float keep_scale = keep_scale_f32(p);
  for (int64_t d = 0; d < head_dim_v; d++) out_row[d] = aotk__round_to_dtype(out_row[d] / sum * keep_scale, dtype);
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

static const float *q_row_of(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q, int64_t row) {
  return p->q + batch * p->q_strides[0] + row * p->q_strides[1] + head_q * p->q_strides[2];
}

void aotk__attn_reference_bwd_row_stats_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q,
                                            int64_t row, double *out_row, double *lse, double *delta) {
  aotk__attn_reference_row_f64(p, batch, head_q, row, out_row, lse);
  const float *dout_row = dout_row_of(p, batch, head_q, row);
  const int64_t head_dim_v = value_head_dim(p);
  double sum = 0.0;
  for (int64_t d = 0; d < head_dim_v; d++) sum += (double)dout_row[d] * out_row[d];
  *delta = sum; /* 0 for an empty row: its out_row is 0 */
}

void aotk__attn_reference_bwd_dq_row_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q,
                                         int64_t row, double lse, double delta, double *dq_row) {
  row_view view = view_row(p, batch, head_q, row);
  const float *dout_row = dout_row_of(p, batch, head_q, row);
  const int64_t head_dim = p->head_dim, head_dim_v = value_head_dim(p);
  for (int64_t d = 0; d < head_dim; d++) dq_row[d] = 0.0;
  for (int64_t key = view.key_begin; key < view.key_end; key++) {
    const float *k_row = k_row_of(&view, key);
    double score_derivative;
    double probability = exp(score_f64(p, view.q_row, k_row, head_q, row, key, &score_derivative) - lse);
    double dp = aotk__reference_dot_f64(dout_row, v_row_of(&view, key), head_dim_v) * dropout_factor(p, batch, head_q, row, key);
    double dx = probability * (dp - delta) * score_derivative;
    for (int64_t d = 0; d < head_dim; d++) dq_row[d] += dx * (double)k_row[d];
  }
  for (int64_t d = 0; d < head_dim; d++) dq_row[d] *= p->softmax_scale;
}

void aotk__attn_reference_bwd_dkdv_row_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_kv,
                                           int64_t key, const double *lse, const double *delta, double *dk_row,
                                           double *dv_row) {
  const int64_t head_dim = p->head_dim, head_dim_v = value_head_dim(p), group_size = p->heads_q / p->heads_kv;
  const float *k_row = p->k + batch * p->k_strides[0] + key * p->k_strides[1] + head_kv * p->k_strides[2];
  const float *v_row = p->v + batch * p->v_strides[0] + key * p->v_strides[1] + head_kv * p->v_strides[2];
  for (int64_t d = 0; d < head_dim; d++) dk_row[d] = 0.0;
  for (int64_t d = 0; d < head_dim_v; d++) dv_row[d] = 0.0;
  int64_t row_begin, row_end;
  rows_seeing(p, key, &row_begin, &row_end);
  for (int64_t head_q = head_kv * group_size; head_q < (head_kv + 1) * group_size; head_q++) {
    for (int64_t row = row_begin; row < row_end; row++) {
      const float *q_row = q_row_of(p, batch, head_q, row);
      const float *dout_row = dout_row_of(p, batch, head_q, row);
      const int64_t stat = head_q * p->seqlen_q + row;
      double score_derivative;
      double probability = exp(score_f64(p, q_row, k_row, head_q, row, key, &score_derivative) - lse[stat]);
      double dropout = dropout_factor(p, batch, head_q, row, key);
      double dx = probability * (aotk__reference_dot_f64(dout_row, v_row, head_dim_v) * dropout - delta[stat]) * score_derivative;
      double dropped_probability = probability * dropout;
      for (int64_t d = 0; d < head_dim_v; d++) dv_row[d] += dropped_probability * (double)dout_row[d];
      for (int64_t d = 0; d < head_dim; d++) dk_row[d] += dx * (double)q_row[d];
    }
  }
  for (int64_t d = 0; d < head_dim; d++) dk_row[d] *= p->softmax_scale;
}

double aotk__attn_reference_bwd_dsink_f64(const aotk__attn_reference_problem *p, int64_t head_q, const double *lse,
                                          const double *delta) {
  if (p->sinks == NULL) return 0.0;
  const double sink = (double)p->sinks[head_q];
  double sum = 0.0;
  for (int64_t row = 0; row < p->seqlen_q; row++) {
    /* lse >= sink wherever the row has one, so the share is at most 1. Only a sink of -inf leaves an
     * empty row at lse = -inf, and it has no share (nor a gradient) there. */
    if (lse[row] == -(double)INFINITY) continue;
    sum += exp(sink - lse[row]) * delta[row];
  }
  return -sum;
}

void aotk__attn_reference_bwd_row_stats_lowp(const aotk__attn_reference_problem *p, int dtype, int64_t batch,
                                             int64_t head_q, int64_t row, float *out_row, float *lse, float *delta) {
  row_view view = view_row(p, batch, head_q, row);
  float max_score, sum;
  row_lowp(p, dtype, &view, out_row, &max_score, &sum);
  if (max_score == -INFINITY) {
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
  *delta = aotk__attn_reference_bwd_delta_lowp(p, batch, head_q, row, out_row);
}

float aotk__attn_reference_bwd_delta_lowp(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q,
                                          int64_t row, const float *out_row) {
  const float *dout_row = dout_row_of(p, batch, head_q, row);
  const int64_t head_dim_v = value_head_dim(p);
  float sum_of_products = 0.0f;
  for (int64_t d = 0; d < head_dim_v; d++) sum_of_products += dout_row[d] * out_row[d];
  return sum_of_products;
}

void aotk__attn_reference_bwd_dq_row_lowp(const aotk__attn_reference_problem *p, int dtype, int64_t batch,
                                          int64_t head_q, int64_t row, float lse, float delta, float *dq_row) {
  row_view view = view_row(p, batch, head_q, row);
  const float *dout_row = dout_row_of(p, batch, head_q, row);
  const int64_t head_dim = p->head_dim, head_dim_v = value_head_dim(p);
  const float softmax_scale = (float)p->softmax_scale, keep_scale = keep_scale_f32(p);
  for (int64_t d = 0; d < head_dim; d++) dq_row[d] = 0.0f;
  for (int64_t key = view.key_begin; key < view.key_end; key++) {
    const float *k_row = k_row_of(&view, key);
    float score_derivative;
    float probability = expf(score_f32(p, view.q_row, k_row, head_q, row, key, &score_derivative) - lse);
    float dropout = is_kept(p, batch, head_q, row, key) ? keep_scale : 0.0f;
    float dp = aotk__reference_dot_f32(dout_row, v_row_of(&view, key), head_dim_v) * dropout;
    float dx = probability * (dp - delta) * score_derivative;
    float dx_in_dtype = aotk__round_to_dtype(dx, dtype);
    for (int64_t d = 0; d < head_dim; d++) dq_row[d] += dx_in_dtype * k_row[d];
  }
  for (int64_t d = 0; d < head_dim; d++) dq_row[d] = aotk__round_to_dtype(dq_row[d] * softmax_scale, dtype);
}

void aotk__attn_reference_bwd_dkdv_row_lowp(const aotk__attn_reference_problem *p, int dtype, int64_t batch,
                                            int64_t head_kv, int64_t key, const float *lse, const float *delta,
                                            float *dk_row, float *dv_row) {
  const int64_t head_dim = p->head_dim, head_dim_v = value_head_dim(p), group_size = p->heads_q / p->heads_kv;
  const float softmax_scale = (float)p->softmax_scale, keep_scale = keep_scale_f32(p);
  const float *k_row = p->k + batch * p->k_strides[0] + key * p->k_strides[1] + head_kv * p->k_strides[2];
  const float *v_row = p->v + batch * p->v_strides[0] + key * p->v_strides[1] + head_kv * p->v_strides[2];
  for (int64_t d = 0; d < head_dim; d++) dk_row[d] = 0.0f;
  for (int64_t d = 0; d < head_dim_v; d++) dv_row[d] = 0.0f;
  int64_t row_begin, row_end;
  rows_seeing(p, key, &row_begin, &row_end);
  for (int64_t head_q = head_kv * group_size; head_q < (head_kv + 1) * group_size; head_q++) {
    for (int64_t row = row_begin; row < row_end; row++) {
      const float *q_row = q_row_of(p, batch, head_q, row);
      const float *dout_row = dout_row_of(p, batch, head_q, row);
      const int64_t stat = head_q * p->seqlen_q + row;
      float score_derivative;
      float probability = expf(score_f32(p, q_row, k_row, head_q, row, key, &score_derivative) - lse[stat]);
      float dropout = is_kept(p, batch, head_q, row, key) ? keep_scale : 0.0f;
      float dx = probability * (aotk__reference_dot_f32(dout_row, v_row, head_dim_v) * dropout - delta[stat]) * score_derivative;
      float dropped_probability_in_dtype = aotk__round_to_dtype(probability * dropout, dtype);
      float dx_in_dtype = aotk__round_to_dtype(dx, dtype);
      for (int64_t d = 0; d < head_dim_v; d++) dv_row[d] += dropped_probability_in_dtype * dout_row[d];
      for (int64_t d = 0; d < head_dim; d++) dk_row[d] += dx_in_dtype * q_row[d];
    }
  }
  for (int64_t d = 0; d < head_dim; d++) dk_row[d] = aotk__round_to_dtype(dk_row[d] * softmax_scale, dtype);
  for (int64_t d = 0; d < head_dim_v; d++) dv_row[d] = aotk__round_to_dtype(dv_row[d], dtype);
}

float aotk__attn_reference_bwd_dsink_lowp(const aotk__attn_reference_problem *p, int64_t head_q, const float *lse,
                                          const float *delta) {
  if (p->sinks == NULL) return 0.0f;
  const float sink = p->sinks[head_q];
  float sum = 0.0f;
  for (int64_t row = 0; row < p->seqlen_q; row++) {
    if (lse[row] == -INFINITY) continue;
    sum += expf(sink - lse[row]) * delta[row];
  }
  return -sum;
}
