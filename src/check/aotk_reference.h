/*
 * Host references of the attention forward and backward, for the self-test and the tests.
 *
 * The forward's work one query row at a time, so a test can check sampled rows of a problem far too
 * large to recompute whole, and both need no memory beyond the caller's output row: each makes two
 * passes over the row's keys (the first finds the largest score, the second sums and accumulates) and
 * recomputes the scores in the second pass instead of keeping them. That doubles the dot products but
 * leaves no allocation to fail, and a reference row is cheap next to the GPU run it checks. The
 * backward's work one row of dq, or one key row of dk and dv, at a time (see below).
 *
 * Two references of each, for flash-attention's error rule: the kernel's error against the float64
 * reference may be at most 2x the error of the same-precision reference against float64, plus a small
 * floor.
 *
 * Each reference sees one dense batch layout. The variable-length layout is checked by pointing a
 * problem at each sequence's rows (batch 0, that sequence's lengths and its row of ALiBi slopes), so
 * nothing here knows cu_seqlens.
 */
#ifndef AOTK_REFERENCE_H
#define AOTK_REFERENCE_H

#include <stdint.h>

typedef struct aotk__attn_reference_problem {
  int64_t seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  /* Host arrays of float values already converted from the device dtype. Element (b, s, h, d) of q is
   * at q[b*q_strides[0] + s*q_strides[1] + h*q_strides[2] + d]; k and v likewise with their strides.
   * The last dimension is contiguous, as on the device. q and k rows have head_dim values; v rows
   * have head_dim_v (below). */
  const float *q, *k, *v;
  int64_t q_strides[3], k_strides[3], v_strides[3];
  double softmax_scale; /* already resolved (0 no longer means the default), > 0 */
  int causal;           /* row i sees key j only if j <= i + diag (diag: see top_left) */
  /* The backward's only (the forward references ignore them): dout, the gradient of out, laid out as
   * q is described above, with its own strides, rows of head_dim_v values. */
  const float *dout;
  int64_t dout_strides[3];

  /* The features of aotk_attn_params (include/aotk.h defines them), each off when zero, so that a
   * problem initialised with only the fields above is plain attention. For query row i, key j:
   *   s_ij = softmax_scale * q_i . k_j; with softcap, s = softcap * tanh(s / softcap); with ALiBi,
   *   s -= slope_h * |i + diag - j|. Row i sees key j iff 0 <= j < seqlen_k, (causal: j <= i + diag),
   *   (window_left bounded: j >= i + diag - window_left), (window_right bounded: j <= i + diag +
   *   window_right). lse_i = log([exp(sink_h) +] sum_j exp(s_ij)) over the keys row i sees,
   *   P_ij = exp(s_ij - lse_i), out_i = sum_j P_ij * D_ij * v_j, with D_ij = keep_ij / (1 - dropout_p)
   *   under dropout and 1 otherwise. lse is the softmax's before dropout. */
  int64_t head_dim_v;   /* values per row of v, out, dout and dv; 0: head_dim */
  int top_left;         /* 0: diag = seqlen_k - seqlen_q (AOTK_ALIGN_BOTTOM_RIGHT); 1: diag = 0 */
  /* 0: no sliding window (window_left and window_right ignored). 1: the window applies; a negative
   * bound (the API's -1) leaves its side unbounded, so has_window = 1 with both -1 is no window. Causal
   * with a window applies both masks (causal is the window's right bound 0). */
  int has_window;
  int64_t window_left, window_right;
  double softcap;              /* 0: off; > 0: the cap */
  const float *alibi_slopes;   /* NULL: off; else [heads_q], this batch entry's (or sequence's) row */
  /* NULL: off; else [heads_q] logits that join each row's softmax denominator and carry no value. A
   * row that sees no key but has a sink gets out = 0 and lse = sink_h. */
  const float *sinks;
  /* Dropout: NULL keep means none (dropout_p is then ignored). Otherwise element (b, h, i, j) is kept
   * when keep[b*keep_strides[0] + h*keep_strides[1] + i*keep_strides[2] + j] is nonzero (h the query
   * head), and kept weights are scaled by 1 / (1 - dropout_p), dropout_p in [0, 1). Only the pairs a
   * row sees are read, so the kernels' debug dropout_mask (every pair) can be passed as it is. The
   * checks pass the probability the library's byte threshold really drops (aotk__check_dropout_effective_p). */
  double dropout_p;
  const uint8_t *keep;
  int64_t keep_strides[3];
} aotk__attn_reference_problem;

/*
 * Row `row` of query head `head_q` of batch entry `batch`, in float64 throughout: writes head_dim_v
 * values to out_row and the natural-log softmax denominator (scale, softcap, ALiBi and the sink
 * included, dropout not) to *lse. A row that sees no key gets out_row all 0 and *lse = -INFINITY, or
 * *lse = sink_h when the problem has sinks, as the kernel writes. GQA: query head h reads kv head
 * h / (heads_q / heads_kv). The softmax subtracts the largest of the row's scores and its sink before
 * exponentiating, so any finite scores are safe.
 */
void aotk__attn_reference_row_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q,
                                  int64_t row, double *out_row, double *lse);

/*
 * The same row computed the way a flash-attention kernel of `dtype` (an aotk_dtype value) does:
 * scores in float32 (softcap's tanh and ALiBi's subtraction included); the softmax in float32, the
 * sink's exp(sink - max) joining the denominator; the unnormalised probabilities rounded to `dtype`
 * before they multiply V (the kernel feeds P to the tensor cores in the input dtype), dropped ones
 * zeroed after the rounding (the kept ones enter unscaled); P*V accumulated in float32; the result
 * divided by the float32 sum of the unrounded, undropped probabilities, then multiplied by the float32
 * 1 / (1 - dropout_p) under dropout, and rounded to `dtype`. Writes head_dim_v floats to out_row (all 0
 * for a row that sees no key). AOTK_DTYPE_FLOAT32 gives a plain float32 attention; another dtype value
 * gives NaN outputs (see aotk__round_to_dtype).
 *
 * It does not reproduce the kernel's block order, its running maximum or its log2-domain exponentials,
 * so it estimates what the dtype can do rather than predicting the kernel's bits.
 */
void aotk__attn_reference_row_lowp(const aotk__attn_reference_problem *p, int dtype, int64_t batch,
                                   int64_t head_q, int64_t row, float *out_row);

/*
 * The backward, for the loss L = sum(dout * out): dq, dk and dv, in the order the kernels own them
 * (one query row of dq, one key row of dk and dv at a time), so that a caller can spread rows over
 * threads and needs no buffer larger than a row plus each (head, row)'s two statistics; and the sinks'
 * gradient from those statistics.
 *
 * With s_ij, P_ij, D_ij and lse_i as defined above the problem struct (D_ij = 1 without dropout), and
 * x_ij = softmax_scale * q_i . k_j the score before softcap and ALiBi:
 *   delta_i = sum_d dout_id * out_id             (= sum_j P_ij dP_ij: out holds the dropout)
 *   dP_ij   = (dout_i . v_j) * D_ij              (dL/dP_ij)
 *   dS_ij   = P_ij * (dP_ij - delta_i)           (dL/ds_ij: the sink and the other keys enter through
 *                                                 lse_i, whose derivative in s_ij is P_ij)
 *   dX_ij   = dS_ij * (1 - tanh^2(x_ij / softcap))  with softcap, else dS_ij (ALiBi adds a constant)
 *   dq_i    = scale * sum_j dX_ij k_j            over the keys row i sees
 *   dk_j    = scale * sum_i dX_ij q_i            over the rows that see key j, and with GQA over the
 *   dv_j    = sum_i P_ij D_ij dout_i             heads_q / heads_kv query heads that read kv head j's
 *   dsink_h = -sum_i exp(sink_h - lse_i) delta_i over every row (and batch entry) of head h: lse_i
 *             depends on sink_h with derivative exp(sink_h - lse_i), the sink's share of the row.
 * A row that sees no key has no P: it gets dq = 0, adds nothing to dk and dv, and (out = 0, so
 * delta = 0) nothing to dsink.
 *
 * First the statistics of every (batch, head_q, row) a later call needs: lse and delta. Row `row` of
 * query head `head_q`: the float64 forward (aotk__attn_reference_row_f64) into out_row (head_dim_v
 * doubles, the caller's scratch, left holding the row), its lse into *lse and delta into *delta. A row
 * that sees no key gets lse = -INFINITY (sink_h with sinks) and delta = 0.
 */
void aotk__attn_reference_bwd_row_stats_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q,
                                            int64_t row, double *out_row, double *lse, double *delta);

/* dq of row `row` of query head `head_q` (head_dim values into dq_row), from that row's lse and delta.
 * All 0 for a row that sees no key. */
void aotk__attn_reference_bwd_dq_row_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q,
                                         int64_t row, double lse, double delta, double *dq_row);

/* dk (head_dim values) and dv (head_dim_v values) of key `key` of kv head `head_kv`, summed over the
 * query heads of its group and the rows that see the key. `lse` and `delta` hold this batch entry's
 * statistics, [heads_q][seqlen_q]: (head_q, row) at head_q * seqlen_q + row. */
void aotk__attn_reference_bwd_dkdv_row_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_kv,
                                           int64_t key, const double *lse, const double *delta, double *dk_row,
                                           double *dv_row);

/* One batch entry's share of the gradient of query head `head_q`'s sink: -sum_i exp(sink - lse[i]) *
 * delta[i] over the seqlen_q rows, from that (batch, head_q)'s statistics (lse and delta each point at
 * seqlen_q values, row i at [i]). dsinks[head_q] is the sum of the shares of every batch entry (every
 * sequence in the variable-length layout). 0 when the problem has no sinks. */
double aotk__attn_reference_bwd_dsink_f64(const aotk__attn_reference_problem *p, int64_t head_q, const double *lse,
                                          const double *delta);

/*
 * The same backward computed the way the kernels of `dtype` do, for the error bound (as
 * aotk__attn_reference_row_lowp is for the forward). The kernels are handed the forward's out in
 * `dtype` and its lse in float32, compute delta, scores (softcap's tanh and ALiBi included), P, dP
 * and dS in float32, and feed P (for dv) and dS (for dq and dk) to the tensor cores rounded to
 * `dtype`, accumulating in float32; the outputs are scaled in float32 and rounded to `dtype`. So here:
 *   stats: out_row = aotk__attn_reference_row_lowp's row (already in dtype), *lse = its float32
 *          max + log(sum) (the sink included), *delta = sum_d dout_d * out_d in float32, summed in
 *          another order than the dP dot products, as in the kernels (0 and -INFINITY, or the sink,
 *          for an empty row);
 *   dq, dk, dv: as the float64 versions in float32, with D_ij = keep_ij * float32(1 / (1 - dropout_p)):
 *          dP = (dout . v) * D; dX = P * (dP - delta), times float32 (1 - t*t) with t = tanh(x /
 *          softcap) under softcap; round(P * D) in dv's product and round(dX) in dq's and dk's; the
 *          results rounded to dtype;
 *   dsink: the float64 version's sum in float32 (the kernels write dsinks in float32).
 * Like the forward's, it does not follow the kernels' block order, so it estimates what the dtype can
 * do rather than predicting the kernels' bits. AOTK_DTYPE_FLOAT32 gives a plain float32 backward.
 */
void aotk__attn_reference_bwd_row_stats_lowp(const aotk__attn_reference_problem *p, int dtype, int64_t batch,
                                             int64_t head_q, int64_t row, float *out_row, float *lse, float *delta);
void aotk__attn_reference_bwd_dq_row_lowp(const aotk__attn_reference_problem *p, int dtype, int64_t batch,
                                          int64_t head_q, int64_t row, float lse, float delta, float *dq_row);
void aotk__attn_reference_bwd_dkdv_row_lowp(const aotk__attn_reference_problem *p, int dtype, int64_t batch,
                                            int64_t head_kv, int64_t key, const float *lse, const float *delta,
                                            float *dk_row, float *dv_row);
/* The emulation's delta of one row, sum(dout * out) in float32 in its order, over a given out row (the
 * emulation's own, or the one the forward stored: aotk__bwd_check_case.stored_out_delta). */
float aotk__attn_reference_bwd_delta_lowp(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q,
                                          int64_t row, const float *out_row);
float aotk__attn_reference_bwd_dsink_lowp(const aotk__attn_reference_problem *p, int64_t head_q, const float *lse,
                                          const float *delta);

/* The dot products the references use: float64 with four partial sums, and float32 with four (the
 * same-precision references' order). Shared with the tests' own references. */
double aotk__reference_dot_f64(const float *a, const float *b, int64_t n);
float aotk__reference_dot_f32(const float *a, const float *b, int64_t n);

#endif /* AOTK_REFERENCE_H */
