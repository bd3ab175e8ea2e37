/*
 * Host references of the attention forward, for the self-test and the tests.
 *
 * Both work one query row at a time, so a test can check sampled rows of a problem far too large to
 * recompute whole, and both need no memory beyond the caller's output row: each makes two passes over
 * the row's keys (the first finds the largest score, the second sums and accumulates) and recomputes
 * the scores in the second pass instead of keeping them. That doubles the dot products but leaves no
 * allocation to fail, and a reference row is cheap next to the GPU run it checks.
 *
 * Two references, for flash-attention's error rule: the kernel's error against the float64 reference
 * may be at most 2x the error of the same-precision reference against float64, plus a small floor.
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

#endif /* AOTK_REFERENCE_H */
