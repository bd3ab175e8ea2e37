/*
 * The host reference of selection attention (include/aotk.h, aotk_sel_params), for the tests: a
 * literal transcription of the header's math in float64, one query row (or one key block) at a time,
 * and beside it the same computation done the way the kernels of a 16-bit dtype do it, for the error
 * bound (flash-attention's rule: the kernel's error against float64 may be at most 2x that of a
 * same-precision computation, plus a small floor). Static functions: include it in the one file of a
 * test binary (tests/test_sel_reference.c checks it; tests/test_sel_gpu.c uses it).
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

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "aotk_half.h"

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
typedef struct aotk_sel_reference_problem {
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
} aotk_sel_reference_problem;

/* Where a query row lies: its sequence, the sequence's first rows and lengths, its local index and
 * key position, and the sequence's number of key blocks. */
typedef struct aotk_sel_reference_token {
  int64_t seq, q_start, len_q, k_start, len_k;
  int64_t local;      /* t */
  int64_t position;   /* p = len_k - len_q + t */
  int64_t num_blocks; /* ceil(len_k / block_size) */
} aotk_sel_reference_token;

static inline int64_t aotk_sel_reference_total_q(const aotk_sel_reference_problem *p) {
  return p->cu_seqlens_q[p->num_seqs];
}

static inline int64_t aotk_sel_reference_total_k(const aotk_sel_reference_problem *p) {
  return p->cu_seqlens_k[p->num_seqs];
}

static inline int64_t aotk_sel_reference_group_size(const aotk_sel_reference_problem *p) { return p->heads_q / p->heads_kv; }

/* The sequence of `seq`, as a token record with local = 0. */
static inline aotk_sel_reference_token aotk_sel_reference_sequence(const aotk_sel_reference_problem *p, int64_t seq) {
  aotk_sel_reference_token t;
  t.seq = seq;
  t.q_start = p->cu_seqlens_q[seq];
  t.len_q = p->cu_seqlens_q[seq + 1] - t.q_start;
  t.k_start = p->cu_seqlens_k[seq];
  t.len_k = p->cu_seqlens_k[seq + 1] - t.k_start;
  t.local = 0;
  t.position = t.len_k - t.len_q;
  t.num_blocks = (t.len_k + p->block_size - 1) / p->block_size;
  return t;
}

/* Query row `token` (0 <= token < total_q): the sequence n with cu_seqlens_q[n] <= token <
 * cu_seqlens_q[n+1] (never an empty one). */
static inline aotk_sel_reference_token aotk_sel_reference_locate(const aotk_sel_reference_problem *p, int64_t token) {
  int64_t seq = 0;
  while (seq + 1 < p->num_seqs && p->cu_seqlens_q[seq + 1] <= token) seq++;
  aotk_sel_reference_token t = aotk_sel_reference_sequence(p, seq);
  t.local = token - t.q_start;
  t.position = t.len_k - t.len_q + t.local;
  return t;
}

/* The slots of (token, head_kv) that are read: block_cnt clamped to [0, slots], or every slot. */
static inline int64_t aotk_sel_reference_count(const aotk_sel_reference_problem *p, int64_t token, int64_t head_kv) {
  if (p->block_cnt == NULL) return p->slots;
  int64_t count = p->block_cnt[token * p->heads_kv + head_kv];
  if (count < 0) count = 0;
  if (count > p->slots) count = p->slots;
  return count;
}

/* The block slot `slot` of (token, head_kv) names, if it is in B: 1 and its keys *begin .. *end - 1
 * (sequence-local, cut causally at the position and at len_k); 0 when the slot is ignored (not
 * counted, -1 or any other negative id, past the last block, or after the diagonal). */
static inline int aotk_sel_reference_slot_keys(const aotk_sel_reference_problem *p, const aotk_sel_reference_token *t,
                                        int64_t token, int64_t head_kv, int64_t slot, int64_t *begin, int64_t *end) {
  if (slot >= aotk_sel_reference_count(p, token, head_kv)) return 0;
  const int64_t b = p->block_idx[(token * p->heads_kv + head_kv) * p->slots + slot];
  if (b < 0 || b >= t->num_blocks || b * p->block_size > t->position) return 0;
  int64_t last = (b + 1) * p->block_size;
  if (t->position + 1 < last) last = t->position + 1;
  if (t->len_k < last) last = t->len_k;
  *begin = b * p->block_size;
  *end = last;
  return 1;
}

/* J(token, head_kv) as sequence-local key indices, block by block in slot order (a block listed twice
 * appears twice). `keys` has room for slots * block_size. Returns the multiset's size. */
static inline int64_t aotk_sel_reference_keys(const aotk_sel_reference_problem *p, int64_t token, int64_t head_kv,
                                       int64_t *keys) {
  const aotk_sel_reference_token t = aotk_sel_reference_locate(p, token);
  int64_t size = 0, begin, end;
  for (int64_t s = 0; s < p->slots; s++) {
    if (!aotk_sel_reference_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
    for (int64_t j = begin; j < end; j++) keys[size++] = j;
  }
  return size;
}

static inline const double *aotk_sel_reference_q_row(const aotk_sel_reference_problem *p, int64_t token, int64_t head_q) {
  return p->q + token * p->q_strides[0] + head_q * p->q_strides[1];
}
static inline const double *aotk_sel_reference_k_row(const aotk_sel_reference_problem *p, int64_t key, int64_t head_kv) {
  return p->k + key * p->k_strides[0] + head_kv * p->k_strides[1];
}
static inline const double *aotk_sel_reference_v_row(const aotk_sel_reference_problem *p, int64_t key, int64_t head_kv) {
  return p->v + key * p->v_strides[0] + head_kv * p->v_strides[1];
}
static inline const double *aotk_sel_reference_dout_row(const aotk_sel_reference_problem *p, int64_t token, int64_t head_q) {
  return p->dout + token * p->dout_strides[0] + head_q * p->dout_strides[1];
}

static inline double aotk_sel_reference_dot_f64(const double *a, const double *b, int64_t n) {
  double sum = 0.0;
  for (int64_t d = 0; d < n; d++) sum += a[d] * b[d];
  return sum;
}

/* ---- float64 ----------------------------------------------------------------------------------- */

/* out_row (head_dim_v values) and *lse of (token, head_q). */
static inline void aotk_sel_reference_fwd_row_f64(const aotk_sel_reference_problem *p, int64_t token, int64_t head_q,
                                           double *out_row, double *lse) {
  const aotk_sel_reference_token t = aotk_sel_reference_locate(p, token);
  const int64_t head_kv = head_q / aotk_sel_reference_group_size(p);
  const double *q_row = aotk_sel_reference_q_row(p, token, head_q);
  for (int64_t d = 0; d < p->head_dim_v; d++) out_row[d] = 0.0;
  double max_score = -INFINITY;
  int64_t keys = 0, begin, end;
  for (int64_t s = 0; s < p->slots; s++) {
    if (!aotk_sel_reference_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
    for (int64_t j = begin; j < end; j++) {
      double score = p->softmax_scale * aotk_sel_reference_dot_f64(
                                            q_row, aotk_sel_reference_k_row(p, t.k_start + j, head_kv), p->head_dim_qk);
      if (score > max_score) max_score = score;
      keys++;
    }
  }
  if (keys == 0) {
    *lse = -INFINITY;
    return;
  }
  double sum = 0.0;
  for (int64_t s = 0; s < p->slots; s++) {
    if (!aotk_sel_reference_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
    for (int64_t j = begin; j < end; j++) {
      double score = p->softmax_scale * aotk_sel_reference_dot_f64(
                                            q_row, aotk_sel_reference_k_row(p, t.k_start + j, head_kv), p->head_dim_qk);
      double weight = exp(score - max_score);
      const double *v_row = aotk_sel_reference_v_row(p, t.k_start + j, head_kv);
      sum += weight;
      for (int64_t d = 0; d < p->head_dim_v; d++) out_row[d] += weight * v_row[d];
    }
  }
  for (int64_t d = 0; d < p->head_dim_v; d++) out_row[d] /= sum;
  *lse = max_score + log(sum);
}

/* delta = dout . out of (token, head_q), from the forward's out [total_q, heads_q, head_dim_v]. */
static inline double aotk_sel_reference_delta_f64(const aotk_sel_reference_problem *p, int64_t token, int64_t head_q,
                                           const double *out) {
  return aotk_sel_reference_dot_f64(aotk_sel_reference_dout_row(p, token, head_q),
                                    out + (token * p->heads_q + head_q) * p->head_dim_v, p->head_dim_v);
}

/* dq_row (head_dim_qk values) of (token, head_q), from the forward's out and lse (whole arrays). */
static inline void aotk_sel_reference_dq_row_f64(const aotk_sel_reference_problem *p, int64_t token, int64_t head_q,
                                          const double *out, const double *lse, double *dq_row) {
  const aotk_sel_reference_token t = aotk_sel_reference_locate(p, token);
  const int64_t head_kv = head_q / aotk_sel_reference_group_size(p);
  const double *q_row = aotk_sel_reference_q_row(p, token, head_q);
  const double *dout_row = aotk_sel_reference_dout_row(p, token, head_q);
  const double row_lse = lse[token * p->heads_q + head_q];
  const double delta = aotk_sel_reference_delta_f64(p, token, head_q, out);
  for (int64_t d = 0; d < p->head_dim_qk; d++) dq_row[d] = 0.0;
  int64_t begin, end;
  for (int64_t s = 0; s < p->slots; s++) {
    if (!aotk_sel_reference_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
    for (int64_t j = begin; j < end; j++) {
      const double *k_row = aotk_sel_reference_k_row(p, t.k_start + j, head_kv);
      double probability = exp(p->softmax_scale * aotk_sel_reference_dot_f64(q_row, k_row, p->head_dim_qk) - row_lse);
      double dp = aotk_sel_reference_dot_f64(dout_row, aotk_sel_reference_v_row(p, t.k_start + j, head_kv),
                                             p->head_dim_v);
      double ds = probability * (dp - delta);
      for (int64_t d = 0; d < p->head_dim_qk; d++) dq_row[d] += ds * k_row[d];
    }
  }
  for (int64_t d = 0; d < p->head_dim_qk; d++) dq_row[d] *= p->softmax_scale;
}

/* dk and dv of the keys of block `block` of sequence `seq`, kv head `head_kv`: the rows
 * block*BS .. min((block+1)*BS, len_k) - 1 of the sequence in the whole arrays dk and dv (nothing else
 * is written, so blocks can be computed in parallel). Gathered by scanning every (query head of the
 * group, row of the sequence, counted slot) for the block. hits, if not NULL ([total_k, heads_kv]),
 * receives for each of these keys the number of (row, query head, slot) triples that selected it. */
static inline void aotk_sel_reference_dkdv_block_f64(const aotk_sel_reference_problem *p, int64_t seq, int64_t head_kv,
                                              int64_t block, const double *out, const double *lse, double *dk,
                                              double *dv, int64_t *hits) {
  const aotk_sel_reference_token sequence = aotk_sel_reference_sequence(p, seq);
  const int64_t group_size = aotk_sel_reference_group_size(p);
  int64_t key_end = (block + 1) * p->block_size;
  if (sequence.len_k < key_end) key_end = sequence.len_k;
  for (int64_t j = block * p->block_size; j < key_end; j++) {
    const int64_t key = sequence.k_start + j;
    for (int64_t d = 0; d < p->head_dim_qk; d++) dk[(key * p->heads_kv + head_kv) * p->head_dim_qk + d] = 0.0;
    for (int64_t d = 0; d < p->head_dim_v; d++) dv[(key * p->heads_kv + head_kv) * p->head_dim_v + d] = 0.0;
    if (hits != NULL) hits[key * p->heads_kv + head_kv] = 0;
  }
  for (int64_t head_q = head_kv * group_size; head_q < (head_kv + 1) * group_size; head_q++) {
    for (int64_t local = 0; local < sequence.len_q; local++) {
      const int64_t token = sequence.q_start + local;
      const aotk_sel_reference_token t = aotk_sel_reference_locate(p, token);
      const double *q_row = aotk_sel_reference_q_row(p, token, head_q);
      const double *dout_row = aotk_sel_reference_dout_row(p, token, head_q);
      const double row_lse = lse[token * p->heads_q + head_q];
      double delta = 0.0;
      int have_delta = 0;
      int64_t begin, end;
      for (int64_t s = 0; s < p->slots; s++) {
        if (!aotk_sel_reference_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
        if (begin != block * p->block_size) continue; /* another block */
        if (!have_delta) {
          delta = aotk_sel_reference_delta_f64(p, token, head_q, out);
          have_delta = 1;
        }
        for (int64_t j = begin; j < end; j++) {
          const int64_t key = sequence.k_start + j;
          const double *k_row = aotk_sel_reference_k_row(p, key, head_kv);
          const double *v_row = aotk_sel_reference_v_row(p, key, head_kv);
          double probability =
              exp(p->softmax_scale * aotk_sel_reference_dot_f64(q_row, k_row, p->head_dim_qk) - row_lse);
          double ds = probability * (aotk_sel_reference_dot_f64(dout_row, v_row, p->head_dim_v) - delta);
          double *dk_row = dk + (key * p->heads_kv + head_kv) * p->head_dim_qk;
          double *dv_row = dv + (key * p->heads_kv + head_kv) * p->head_dim_v;
          for (int64_t d = 0; d < p->head_dim_v; d++) dv_row[d] += probability * dout_row[d];
          for (int64_t d = 0; d < p->head_dim_qk; d++) dk_row[d] += ds * q_row[d];
          if (hits != NULL) hits[key * p->heads_kv + head_kv] += 1;
        }
      }
    }
  }
  for (int64_t j = block * p->block_size; j < key_end; j++) {
    const int64_t key = sequence.k_start + j;
    for (int64_t d = 0; d < p->head_dim_qk; d++) dk[(key * p->heads_kv + head_kv) * p->head_dim_qk + d] *= p->softmax_scale;
  }
}

/* The whole forward: out and lse of every row. */
static inline void aotk_sel_reference_fwd_f64(const aotk_sel_reference_problem *p, double *out, double *lse) {
  for (int64_t token = 0; token < aotk_sel_reference_total_q(p); token++) {
    for (int64_t head_q = 0; head_q < p->heads_q; head_q++) {
      aotk_sel_reference_fwd_row_f64(p, token, head_q, out + (token * p->heads_q + head_q) * p->head_dim_v,
                                     lse + token * p->heads_q + head_q);
    }
  }
}

/* The whole backward, from the forward's out and lse: dq of every row, dk and dv of every key. */
static inline void aotk_sel_reference_bwd_f64(const aotk_sel_reference_problem *p, const double *out, const double *lse,
                                       double *dq, double *dk, double *dv) {
  for (int64_t token = 0; token < aotk_sel_reference_total_q(p); token++) {
    for (int64_t head_q = 0; head_q < p->heads_q; head_q++) {
      aotk_sel_reference_dq_row_f64(p, token, head_q, out, lse, dq + (token * p->heads_q + head_q) * p->head_dim_qk);
    }
  }
  for (int64_t seq = 0; seq < p->num_seqs; seq++) {
    const aotk_sel_reference_token sequence = aotk_sel_reference_sequence(p, seq);
    for (int64_t head_kv = 0; head_kv < p->heads_kv; head_kv++) {
      for (int64_t block = 0; block < sequence.num_blocks; block++) {
        aotk_sel_reference_dkdv_block_f64(p, seq, head_kv, block, out, lse, dk, dv, NULL);
      }
    }
  }
}

/* ---- the same precision as the kernels ----------------------------------------------------------
 *
 * As src/aotk_reference.c's emulation of the dense kernels (aotk__attn_reference_row_lowp and the
 * backward's *_lowp), which the selection kernels share their arithmetic with: scores, softmax, dP and
 * dS in float32; P rounded to `dtype` before it multiplies V (and dout, for dv); dS rounded to `dtype`
 * before it multiplies K (dq) and Q (dk); float32 accumulation; the results rounded to `dtype`; delta
 * read from the forward's out as stored (in dtype), summed in a plain loop (another order than the dot
 * products, as in the kernels). The forward's denominator sums the unrounded weights. It follows
 * neither the kernels' block order nor their running maximum nor their log2-domain exponentials: it
 * estimates what the dtype can do, it does not predict the kernels' bits. With the same keys in the
 * same order it computes exactly what the dense emulation computes (tests/test_sel_reference.c checks
 * this bit for bit). */

/* float32 dot product with four partial sums, as src/aotk_reference.c's dot_f32. */
static inline float aotk_sel_reference_dot_f32(const double *a, const double *b, int64_t n) {
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  int64_t d = 0;
  for (; d + 4 <= n; d += 4) {
    s0 += (float)a[d] * (float)b[d];
    s1 += (float)a[d + 1] * (float)b[d + 1];
    s2 += (float)a[d + 2] * (float)b[d + 2];
    s3 += (float)a[d + 3] * (float)b[d + 3];
  }
  for (; d < n; d++) s0 += (float)a[d] * (float)b[d];
  return (s0 + s1) + (s2 + s3);
}

static inline float aotk_sel_reference_score_f32(const aotk_sel_reference_problem *p, const double *q_row, const double *k_row) {
  return aotk_sel_reference_dot_f32(q_row, k_row, p->head_dim_qk) * (float)p->softmax_scale;
}

/* out_row (head_dim_v floats, already rounded to dtype) and *lse (float32) of (token, head_q). */
static inline void aotk_sel_reference_fwd_row_lowp(const aotk_sel_reference_problem *p, int dtype, int64_t token,
                                            int64_t head_q, float *out_row, float *lse) {
  const aotk_sel_reference_token t = aotk_sel_reference_locate(p, token);
  const int64_t head_kv = head_q / aotk_sel_reference_group_size(p);
  const double *q_row = aotk_sel_reference_q_row(p, token, head_q);
  for (int64_t d = 0; d < p->head_dim_v; d++) out_row[d] = 0.0f;
  float max_score = -INFINITY;
  int64_t keys = 0, begin, end;
  for (int64_t s = 0; s < p->slots; s++) {
    if (!aotk_sel_reference_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
    for (int64_t j = begin; j < end; j++) {
      float score = aotk_sel_reference_score_f32(p, q_row, aotk_sel_reference_k_row(p, t.k_start + j, head_kv));
      if (score > max_score) max_score = score;
      keys++;
    }
  }
  if (keys == 0) {
    *lse = -INFINITY;
    return;
  }
  float sum = 0.0f;
  for (int64_t s = 0; s < p->slots; s++) {
    if (!aotk_sel_reference_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
    for (int64_t j = begin; j < end; j++) {
      float weight = expf(aotk_sel_reference_score_f32(p, q_row, aotk_sel_reference_k_row(p, t.k_start + j, head_kv)) -
                          max_score);
      sum += weight;
      float weight_in_dtype = aotk__round_to_dtype(weight, dtype);
      const double *v_row = aotk_sel_reference_v_row(p, t.k_start + j, head_kv);
      for (int64_t d = 0; d < p->head_dim_v; d++) out_row[d] += weight_in_dtype * (float)v_row[d];
    }
  }
  for (int64_t d = 0; d < p->head_dim_v; d++) out_row[d] = aotk__round_to_dtype(out_row[d] / sum, dtype);
  *lse = max_score + logf(sum);
}

static inline float aotk_sel_reference_delta_lowp(const aotk_sel_reference_problem *p, int64_t token, int64_t head_q,
                                           const float *out) {
  const double *dout_row = aotk_sel_reference_dout_row(p, token, head_q);
  const float *out_row = out + (token * p->heads_q + head_q) * p->head_dim_v;
  float sum = 0.0f;
  for (int64_t d = 0; d < p->head_dim_v; d++) sum += (float)dout_row[d] * out_row[d];
  return sum;
}

static inline void aotk_sel_reference_dq_row_lowp(const aotk_sel_reference_problem *p, int dtype, int64_t token,
                                           int64_t head_q, const float *out, const float *lse, float *dq_row) {
  const aotk_sel_reference_token t = aotk_sel_reference_locate(p, token);
  const int64_t head_kv = head_q / aotk_sel_reference_group_size(p);
  const double *q_row = aotk_sel_reference_q_row(p, token, head_q);
  const double *dout_row = aotk_sel_reference_dout_row(p, token, head_q);
  const float row_lse = lse[token * p->heads_q + head_q];
  const float delta = aotk_sel_reference_delta_lowp(p, token, head_q, out);
  for (int64_t d = 0; d < p->head_dim_qk; d++) dq_row[d] = 0.0f;
  int64_t begin, end;
  for (int64_t s = 0; s < p->slots; s++) {
    if (!aotk_sel_reference_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
    for (int64_t j = begin; j < end; j++) {
      const double *k_row = aotk_sel_reference_k_row(p, t.k_start + j, head_kv);
      float probability = expf(aotk_sel_reference_score_f32(p, q_row, k_row) - row_lse);
      float dp = aotk_sel_reference_dot_f32(dout_row, aotk_sel_reference_v_row(p, t.k_start + j, head_kv), p->head_dim_v);
      float ds_in_dtype = aotk__round_to_dtype(probability * (dp - delta), dtype);
      for (int64_t d = 0; d < p->head_dim_qk; d++) dq_row[d] += ds_in_dtype * (float)k_row[d];
    }
  }
  for (int64_t d = 0; d < p->head_dim_qk; d++) {
    dq_row[d] = aotk__round_to_dtype(dq_row[d] * (float)p->softmax_scale, dtype);
  }
}

static inline void aotk_sel_reference_dkdv_block_lowp(const aotk_sel_reference_problem *p, int dtype, int64_t seq,
                                               int64_t head_kv, int64_t block, const float *out, const float *lse,
                                               float *dk, float *dv) {
  const aotk_sel_reference_token sequence = aotk_sel_reference_sequence(p, seq);
  const int64_t group_size = aotk_sel_reference_group_size(p);
  int64_t key_end = (block + 1) * p->block_size;
  if (sequence.len_k < key_end) key_end = sequence.len_k;
  for (int64_t j = block * p->block_size; j < key_end; j++) {
    const int64_t key = sequence.k_start + j;
    for (int64_t d = 0; d < p->head_dim_qk; d++) dk[(key * p->heads_kv + head_kv) * p->head_dim_qk + d] = 0.0f;
    for (int64_t d = 0; d < p->head_dim_v; d++) dv[(key * p->heads_kv + head_kv) * p->head_dim_v + d] = 0.0f;
  }
  for (int64_t head_q = head_kv * group_size; head_q < (head_kv + 1) * group_size; head_q++) {
    for (int64_t local = 0; local < sequence.len_q; local++) {
      const int64_t token = sequence.q_start + local;
      const aotk_sel_reference_token t = aotk_sel_reference_locate(p, token);
      const double *q_row = aotk_sel_reference_q_row(p, token, head_q);
      const double *dout_row = aotk_sel_reference_dout_row(p, token, head_q);
      const float row_lse = lse[token * p->heads_q + head_q];
      float delta = 0.0f;
      int have_delta = 0;
      int64_t begin, end;
      for (int64_t s = 0; s < p->slots; s++) {
        if (!aotk_sel_reference_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
        if (begin != block * p->block_size) continue;
        if (!have_delta) {
          delta = aotk_sel_reference_delta_lowp(p, token, head_q, out);
          have_delta = 1;
        }
        for (int64_t j = begin; j < end; j++) {
          const int64_t key = sequence.k_start + j;
          const double *k_row = aotk_sel_reference_k_row(p, key, head_kv);
          const double *v_row = aotk_sel_reference_v_row(p, key, head_kv);
          float probability = expf(aotk_sel_reference_score_f32(p, q_row, k_row) - row_lse);
          float dp = aotk_sel_reference_dot_f32(dout_row, v_row, p->head_dim_v);
          float probability_in_dtype = aotk__round_to_dtype(probability, dtype);
          float ds_in_dtype = aotk__round_to_dtype(probability * (dp - delta), dtype);
          float *dk_row = dk + (key * p->heads_kv + head_kv) * p->head_dim_qk;
          float *dv_row = dv + (key * p->heads_kv + head_kv) * p->head_dim_v;
          for (int64_t d = 0; d < p->head_dim_v; d++) dv_row[d] += probability_in_dtype * (float)dout_row[d];
          for (int64_t d = 0; d < p->head_dim_qk; d++) dk_row[d] += ds_in_dtype * (float)q_row[d];
        }
      }
    }
  }
  for (int64_t j = block * p->block_size; j < key_end; j++) {
    const int64_t key = sequence.k_start + j;
    float *dk_row = dk + (key * p->heads_kv + head_kv) * p->head_dim_qk;
    float *dv_row = dv + (key * p->heads_kv + head_kv) * p->head_dim_v;
    for (int64_t d = 0; d < p->head_dim_qk; d++) dk_row[d] = aotk__round_to_dtype(dk_row[d] * (float)p->softmax_scale, dtype);
    for (int64_t d = 0; d < p->head_dim_v; d++) dv_row[d] = aotk__round_to_dtype(dv_row[d], dtype);
  }
}

static inline void aotk_sel_reference_fwd_lowp(const aotk_sel_reference_problem *p, int dtype, float *out, float *lse) {
  for (int64_t token = 0; token < aotk_sel_reference_total_q(p); token++) {
    for (int64_t head_q = 0; head_q < p->heads_q; head_q++) {
      aotk_sel_reference_fwd_row_lowp(p, dtype, token, head_q, out + (token * p->heads_q + head_q) * p->head_dim_v,
                                      lse + token * p->heads_q + head_q);
    }
  }
}

static inline void aotk_sel_reference_bwd_lowp(const aotk_sel_reference_problem *p, int dtype, const float *out,
                                        const float *lse, float *dq, float *dk, float *dv) {
  for (int64_t token = 0; token < aotk_sel_reference_total_q(p); token++) {
    for (int64_t head_q = 0; head_q < p->heads_q; head_q++) {
      aotk_sel_reference_dq_row_lowp(p, dtype, token, head_q, out, lse,
                                     dq + (token * p->heads_q + head_q) * p->head_dim_qk);
    }
  }
  for (int64_t seq = 0; seq < p->num_seqs; seq++) {
    const aotk_sel_reference_token sequence = aotk_sel_reference_sequence(p, seq);
    for (int64_t head_kv = 0; head_kv < p->heads_kv; head_kv++) {
      for (int64_t block = 0; block < sequence.num_blocks; block++) {
        aotk_sel_reference_dkdv_block_lowp(p, dtype, seq, head_kv, block, out, lse, dk, dv);
      }
    }
  }
}

#endif /* AOTK_SEL_REFERENCE_H */
