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
 */
#ifndef AOTK_REFERENCE_H
#define AOTK_REFERENCE_H

#include <stdint.h>

typedef struct aotk__attn_reference_problem {
  int64_t seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  /* Host arrays of float values already converted from the device dtype. Element (b, s, h, d) of q is
   * at q[b*q_strides[0] + s*q_strides[1] + h*q_strides[2] + d]; k and v likewise with their strides.
   * The last dimension is contiguous, as on the device. */
  const float *q, *k, *v;
  int64_t q_strides[3], k_strides[3], v_strides[3];
  double softmax_scale; /* already resolved (0 no longer means the default), > 0 */
  int causal;           /* bottom-right aligned: row i sees key j iff j <= i + seqlen_k - seqlen_q */
  /* The backward's only (the forward references ignore them): dout, the gradient of out, laid out as
   * q is described above, with its own strides. */
  const float *dout;
  int64_t dout_strides[3];
} aotk__attn_reference_problem;

/*
 * Row `row` of query head `head_q` of batch entry `batch`, in float64 throughout: writes head_dim
 * values to out_row and the natural-log softmax denominator, scale included, to *lse. A row that sees
 * no key (causal with seqlen_q > seqlen_k) gets out_row all 0 and *lse = -INFINITY, as the kernel
 * writes. GQA: query head h reads kv head h / (heads_q / heads_kv). The softmax subtracts the row's
 * largest score before exponentiating, so any finite scores are safe.
 */
void aotk__attn_reference_row_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q,
                                  int64_t row, double *out_row, double *lse);

/*
 * The same row computed the way a flash-attention kernel of `dtype` (an aotk_dtype value) does:
 * scores and softmax in float32; the unnormalised probabilities rounded to `dtype` before they
 * multiply V (the kernel feeds P to the tensor cores in the input dtype); P*V accumulated in float32;
 * the result divided by the float32 sum of the unrounded probabilities and rounded to `dtype`. Writes
 * head_dim floats to out_row (all 0 for a row that sees no key). AOTK_DTYPE_FLOAT32 gives a plain
 * float32 attention; another dtype value gives NaN outputs (see aotk__round_to_dtype).
 *
 * It does not reproduce the kernel's block order or its running maximum, so it estimates what the
 * dtype can do rather than predicting the kernel's bits.
 */
void aotk__attn_reference_row_lowp(const aotk__attn_reference_problem *p, int dtype, int64_t batch,
                                   int64_t head_q, int64_t row, float *out_row);

/*
 * The backward, for the loss L = sum(dout * out): dq, dk and dv, in the order the kernels own them
 * (one query row of dq, one key row of dk and dv at a time), so that a caller can spread rows over
 * threads and needs no buffer larger than a row plus each (head, row)'s two statistics.
 *
 * With P_ij = exp(s_ij - lse_i) the softmax of the masked scores s_ij = scale * q_i . k_j,
 *   delta_i = sum_d dout_id * out_id            (= sum_j P_ij dP_ij)
 *   dP_ij   = dout_i . v_j
 *   dS_ij   = P_ij * (dP_ij - delta_i)
 *   dq_i    = scale * sum_j dS_ij k_j           over the keys row i sees
 *   dk_j    = scale * sum_i dS_ij q_i           over the rows that see key j, and with GQA over the
 *   dv_j    = sum_i P_ij dout_i                 heads_q / heads_kv query heads that read kv head j's
 * A row that sees no key has no P: it gets dq = 0 and adds nothing to dk and dv.
 *
 * First the statistics of every (batch, head_q, row) a later call needs: lse and delta. Row `row` of
 * query head `head_q`: the float64 forward (aotk__attn_reference_row_f64) into out_row (head_dim
 * doubles, the caller's scratch, left holding the row), its lse into *lse and delta into *delta. A row
 * that sees no key gets lse = -INFINITY and delta = 0.
 */
void aotk__attn_reference_bwd_row_stats_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q,
                                            int64_t row, double *out_row, double *lse, double *delta);

/* dq of row `row` of query head `head_q` (head_dim values into dq_row), from that row's lse and delta.
 * All 0 for a row that sees no key. */
void aotk__attn_reference_bwd_dq_row_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_q,
                                         int64_t row, double lse, double delta, double *dq_row);

/* dk and dv of key `key` of kv head `head_kv` (head_dim values each), summed over the query heads of
 * its group and the rows that see the key. `lse` and `delta` hold this batch entry's statistics,
 * [heads_q][seqlen_q]: (head_q, row) at head_q * seqlen_q + row. */
void aotk__attn_reference_bwd_dkdv_row_f64(const aotk__attn_reference_problem *p, int64_t batch, int64_t head_kv,
                                           int64_t key, const double *lse, const double *delta, double *dk_row,
                                           double *dv_row);

/*
 * The same backward computed the way the kernels of `dtype` do, for the error bound (as
 * aotk__attn_reference_row_lowp is for the forward). The kernels are handed the forward's out in
 * `dtype` and its lse in float32, compute delta, scores, P, dP and dS in float32, and feed P (for dv)
 * and dS (for dq and dk) to the tensor cores rounded to `dtype`, accumulating in float32; the outputs
 * are scaled in float32 and rounded to `dtype`. So here:
 *   stats: out_row = aotk__attn_reference_row_lowp's row (already in dtype), *lse = its float32
 *          max + log(sum), *delta = sum_d dout_d * out_d in float32, summed in another order than the
 *          dP dot products, as in the kernels (0 and -INFINITY for an empty row);
 *   dq, dk, dv: as the float64 versions in float32, with round(P) and round(dS) in the products and
 *          the results rounded to dtype.
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

#endif /* AOTK_REFERENCE_H */
