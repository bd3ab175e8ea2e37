/*
 * The host reference of selection attention (include/aotk.h, aotk_sel_params), for the self-test
 * (src/check/aotk_sel_check.c) and the tests: a literal transcription of the header's math in float64, one
 * query row (or one key block) at a time, and beside it the same computation done the way the kernels
 * of a 16-bit dtype do it, for the error bound (flash-attention's rule: the kernel's error against
 * float64 may be at most 2x that of a same-precision computation, plus a small floor). Internal (aotk__ names, not exported): one copy for
 * aotk_self_test() and the tests (tests/test_sel_reference.c checks it; tests/test_sel_gpu.c uses it).
 * Nothing here allocates; every function only reads the problem and writes its outputs, so rows and
 * blocks can be computed on several threads at once.
 *
 * The math, for query row `token` of sequence n (local index t = token - cu_seqlens_q[n]), at key
 * position p = len_k - len_q + t, kv head h, query heads g = h*G .. h*G+G-1 (G = heads_q / heads_kv):
 *   count  = block_cnt ? clamp(block_cnt[token, h], 0, slots) : slots
 *   B      = the multiset { b = block_idx[token, h, s] : s < count, 0 <= b < ceil(len_k / BS), b*BS <= p }
 *   J      = for each b of B (in slot order, a block listed twice counted twice) the keys
 *            b*BS .. min((b+1)*BS, p+1, len_k) - 1 of the sequence
 *   s_j    = scale * q[token, g] . k[j, h];  lse = log sum_{j in J} exp(s_j);  P_j = exp(s_j - lse)
 *   out    = sum_{j in J} P_j v[j, h]; an empty J gives out = 0 and lse = -inf.
 * The backward of L = sum(dout * out):
 *   delta = dout . out;  dP_j = dout . v_j;  dS_j = P_j (dP_j - delta)
 *   dq[token, g] = scale * sum_{j in J} dS_j k_j
 *   dk[j, h] = scale * sum over every (token, g, occurrence of j in J(token, h)) of dS_j q[token, g]
 *   dv[j, h] = sum over the same of P_j dout[token, g]
 * An empty J gives dq = 0 and adds nothing to dk and dv; a key no row selected gets dk = dv = 0.
 *
 * Nothing here is clever: the key set is re-derived from the slots wherever it is needed, each row
 * makes two passes over its keys (the maximum, then the sums), and dk/dv of a block are gathered by
 * scanning every row of the sequence for slots that name the block.
 */
#ifndef AOTK_SEL_REFERENCE_H
#define AOTK_SEL_REFERENCE_H

#include <stdint.h>

/*
 * One problem, on host arrays. The inputs are float64; the tests fill them with values exactly
 * representable in the device dtype, so that the emulation (which reads them as float) sees the same
 * numbers.
 *   cu_seqlens_q, cu_seqlens_k   [num_seqs + 1], non-decreasing from 0 (one sequence: {0, total}).
 *   q [total_q, heads_q, head_dim_qk]: element (token, head, d) at q[token*q_strides[0] +
 *     head*q_strides[1] + d]; k, v, dout likewise (k, v [total_k, heads_kv, .], dout [total_q, heads_q,
 *     head_dim_v]). dout is read by the backward only.
 *   block_idx [total_q, heads_kv, slots], contiguous; block_cnt NULL or [total_q, heads_kv], contiguous.
 * The outputs, here and below, are contiguous: out [total_q, heads_q, head_dim_v], lse [total_q,
 * heads_q], dq [total_q, heads_q, head_dim_qk], dk [total_k, heads_kv, head_dim_qk], dv [total_k,
 * heads_kv, head_dim_v], with total_q = cu_seqlens_q[num_seqs] and total_k = cu_seqlens_k[num_seqs].
 */
typedef struct aotk__sel_reference_problem {
  int64_t num_seqs;
  const int64_t *cu_seqlens_q, *cu_seqlens_k;
  int64_t heads_q, heads_kv, head_dim_qk, head_dim_v;
  int64_t block_size; /* any size >= 1 (the library takes 32, 64, 128) */
  int64_t slots;
  double softmax_scale; /* resolved: > 0 */
  const double *q, *k, *v, *dout;
  int64_t q_strides[2], k_strides[2], v_strides[2], dout_strides[2];
  const int32_t *block_idx;
  const int32_t *block_cnt;
} aotk__sel_reference_problem;

/* Where a query row lies: its sequence, the sequence's first rows and lengths, its local index and
 * key position, and the sequence's number of key blocks. */
typedef struct aotk__sel_reference_token {
  int64_t seq, q_start, len_q, k_start, len_k;
  int64_t local;      /* t */
  int64_t position;   /* p = len_k - len_q + t */
  int64_t num_blocks; /* ceil(len_k / block_size) */
} aotk__sel_reference_token;

/* The sequence of `seq`, as a token record with local = 0. */
aotk__sel_reference_token aotk__sel_reference_sequence(const aotk__sel_reference_problem *p, int64_t seq);

/* Query row `token` (0 <= token < total_q): the sequence n with cu_seqlens_q[n] <= token <
 * cu_seqlens_q[n+1] (never an empty one). */
aotk__sel_reference_token aotk__sel_reference_locate(const aotk__sel_reference_problem *p, int64_t token);

/* The slots of (token, head_kv) that are read: block_cnt clamped to [0, slots], or every slot. */
int64_t aotk__sel_reference_count(const aotk__sel_reference_problem *p, int64_t token, int64_t head_kv);

/* J(token, head_kv) as sequence-local key indices, block by block in slot order (a block listed twice
 * appears twice). `keys` has room for slots * block_size. Returns the multiset's size. */
int64_t aotk__sel_reference_keys(const aotk__sel_reference_problem *p, int64_t token, int64_t head_kv, int64_t *keys);

/* ---- float64 ----------------------------------------------------------------------------------- */

/* out_row (head_dim_v values) and *lse of (token, head_q). */
void aotk__sel_reference_fwd_row_f64(const aotk__sel_reference_problem *p, int64_t token, int64_t head_q,
                                     double *out_row, double *lse);

/* dq_row (head_dim_qk values) of (token, head_q), from the forward's out and lse (whole arrays). */
void aotk__sel_reference_dq_row_f64(const aotk__sel_reference_problem *p, int64_t token, int64_t head_q,
                                    const double *out, const double *lse, double *dq_row);

/* dk and dv of the keys of block `block` of sequence `seq`, kv head `head_kv`: the rows
 * block*BS .. min((block+1)*BS, len_k) - 1 of the sequence in the whole arrays dk and dv (nothing else
 * is written, so blocks can be computed in parallel). Gathered by scanning every (query head of the
 * group, row of the sequence, counted slot) for the block. hits, if not NULL ([total_k, heads_kv]),
 * receives for each of these keys the number of (row, query head, slot) triples that selected it. */
void aotk__sel_reference_dkdv_block_f64(const aotk__sel_reference_problem *p, int64_t seq, int64_t head_kv,
                                        int64_t block, const double *out, const double *lse, double *dk, double *dv,
                                        int64_t *hits);

/* The whole forward: out and lse of every row. */
void aotk__sel_reference_fwd_f64(const aotk__sel_reference_problem *p, double *out, double *lse);

/* The whole backward, from the forward's out and lse: dq of every row, dk and dv of every key. */
void aotk__sel_reference_bwd_f64(const aotk__sel_reference_problem *p, const double *out, const double *lse,
                                 double *dq, double *dk, double *dv);

/* ---- the same precision as the kernels ----------------------------------------------------------
 *
 * As src/check/aotk_reference.c's emulation of the dense kernels (aotk__attn_reference_row_lowp and the
 * backward's *_lowp), which the selection kernels share their arithmetic with: scores, softmax, dP and
 * dS in float32; P rounded to `dtype` (an aotk_dtype value) before it multiplies V (and dout, for dv);
 * dS rounded to `dtype` before it multiplies K (dq) and Q (dk); float32 accumulation; the results
 * rounded to `dtype`; delta read from the forward's out as stored (in dtype), summed in a plain loop
 * (another order than the dot products, as in the kernels). The forward's denominator sums the
 * unrounded weights. It follows neither the kernels' block order nor their running maximum nor their
 * log2-domain exponentials: it estimates what the dtype can do, it does not predict the kernels' bits.
 * With the same keys in the same order it computes exactly what the dense emulation computes
 * (tests/test_sel_reference.c checks this bit for bit). The arrays are as the float64 functions', in
 * float. */

/* out_row (head_dim_v floats, already rounded to dtype) and *lse (float32) of (token, head_q). */
void aotk__sel_reference_fwd_row_lowp(const aotk__sel_reference_problem *p, int dtype, int64_t token, int64_t head_q,
                                      float *out_row, float *lse);

void aotk__sel_reference_dq_row_lowp(const aotk__sel_reference_problem *p, int dtype, int64_t token, int64_t head_q,
                                     const float *out, const float *lse, float *dq_row);

void aotk__sel_reference_dkdv_block_lowp(const aotk__sel_reference_problem *p, int dtype, int64_t seq, int64_t head_kv,
                                         int64_t block, const float *out, const float *lse, float *dk, float *dv);

void aotk__sel_reference_fwd_lowp(const aotk__sel_reference_problem *p, int dtype, float *out, float *lse);

void aotk__sel_reference_bwd_lowp(const aotk__sel_reference_problem *p, int dtype, const float *out, const float *lse,
                                  float *dq, float *dk, float *dv);

#endif /* AOTK_SEL_REFERENCE_H */
