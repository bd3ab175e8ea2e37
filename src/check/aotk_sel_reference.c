/* The host reference of selection attention: see aotk_sel_reference.h. */
#include <math.h>
#include <stddef.h>

#include "aotk_half.h"
#include "aotk_sel_reference.h"

static int64_t sel_total_q(const aotk__sel_reference_problem *p) { return p->cu_seqlens_q[p->num_seqs]; }

static int64_t sel_group_size(const aotk__sel_reference_problem *p) { return p->heads_q / p->heads_kv; }

/* The sequence of `seq`, as a token record with local = 0. */
aotk__sel_reference_token aotk__sel_reference_sequence(const aotk__sel_reference_problem *p, int64_t seq) {
  aotk__sel_reference_token t;
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
aotk__sel_reference_token aotk__sel_reference_locate(const aotk__sel_reference_problem *p, int64_t token) {
  int64_t seq = 0;
  while (seq + 1 < p->num_seqs && p->cu_seqlens_q[seq + 1] <= token) seq++;
  aotk__sel_reference_token t = aotk__sel_reference_sequence(p, seq);
  t.local = token - t.q_start;
  t.position = t.len_k - t.len_q + t.local;
  return t;
}

/* The slots of (token, head_kv) that are read: block_cnt clamped to [0, slots], or every slot. */
int64_t aotk__sel_reference_count(const aotk__sel_reference_problem *p, int64_t token, int64_t head_kv) {
  if (p->block_cnt == NULL) return p->slots;
  int64_t count = p->block_cnt[token * p->heads_kv + head_kv];
  if (count < 0) count = 0;
  if (count > p->slots) count = p->slots;
  return count;
}

/* The block slot `slot` of (token, head_kv) names, if it is in B: 1 and its keys *begin .. *end - 1
 * (sequence-local, cut causally at the position and at len_k); 0 when the slot is ignored (not
 * counted, -1 or any other negative id, past the last block, or after the diagonal). */
static int sel_slot_keys(const aotk__sel_reference_problem *p, const aotk__sel_reference_token *t, int64_t token,
                         int64_t head_kv, int64_t slot, int64_t *begin, int64_t *end) {
  if (slot >= aotk__sel_reference_count(p, token, head_kv)) return 0;
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
int64_t aotk__sel_reference_keys(const aotk__sel_reference_problem *p, int64_t token, int64_t head_kv, int64_t *keys) {
  const aotk__sel_reference_token t = aotk__sel_reference_locate(p, token);
  int64_t size = 0, begin, end;
  for (int64_t s = 0; s < p->slots; s++) {
    if (!sel_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
    for (int64_t j = begin; j < end; j++) keys[size++] = j;
  }
  return size;
}

static const double *sel_q_row(const aotk__sel_reference_problem *p, int64_t token, int64_t head_q) {
  return p->q + token * p->q_strides[0] + head_q * p->q_strides[1];
}
static const double *sel_k_row(const aotk__sel_reference_problem *p, int64_t key, int64_t head_kv) {
  return p->k + key * p->k_strides[0] + head_kv * p->k_strides[1];
}
static const double *sel_v_row(const aotk__sel_reference_problem *p, int64_t key, int64_t head_kv) {
  return p->v + key * p->v_strides[0] + head_kv * p->v_strides[1];
}
static const double *sel_dout_row(const aotk__sel_reference_problem *p, int64_t token, int64_t head_q) {
  return p->dout + token * p->dout_strides[0] + head_q * p->dout_strides[1];
}

static double sel_dot_f64(const double *a, const double *b, int64_t n) {
  double sum = 0.0;
  for (int64_t d = 0; d < n; d++) sum += a[d] * b[d];
  return sum;
}

/* ---- float64 ----------------------------------------------------------------------------------- */

/* out_row (head_dim_v values) and *lse of (token, head_q). */
void aotk__sel_reference_fwd_row_f64(const aotk__sel_reference_problem *p, int64_t token, int64_t head_q,
                                     double *out_row, double *lse) {
  const aotk__sel_reference_token t = aotk__sel_reference_locate(p, token);
  const int64_t head_kv = head_q / sel_group_size(p);
  const double *q_row = sel_q_row(p, token, head_q);
  for (int64_t d = 0; d < p->head_dim_v; d++) out_row[d] = 0.0;
  double max_score = -INFINITY;
  int64_t keys = 0, begin, end;
  for (int64_t s = 0; s < p->slots; s++) {
    if (!sel_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
    for (int64_t j = begin; j < end; j++) {
      double score = p->softmax_scale * sel_dot_f64(q_row, sel_k_row(p, t.k_start + j, head_kv), p->head_dim_qk);
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
    if (!sel_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
    for (int64_t j = begin; j < end; j++) {
      double score = p->softmax_scale * sel_dot_f64(q_row, sel_k_row(p, t.k_start + j, head_kv), p->head_dim_qk);
      double weight = exp(score - max_score);
      const double *v_row = sel_v_row(p, t.k_start + j, head_kv);
      sum += weight;
      for (int64_t d = 0; d < p->head_dim_v; d++) out_row[d] += weight * v_row[d];
    }
  }
  for (int64_t d = 0; d < p->head_dim_v; d++) out_row[d] /= sum;
  *lse = max_score + log(sum);
}

/* delta = dout . out of (token, head_q), from the forward's out [total_q, heads_q, head_dim_v]. */
static double sel_delta_f64(const aotk__sel_reference_problem *p, int64_t token, int64_t head_q, const double *out) {
  return sel_dot_f64(sel_dout_row(p, token, head_q), out + (token * p->heads_q + head_q) * p->head_dim_v,
                     p->head_dim_v);
}

/* dq_row (head_dim_qk values) of (token, head_q), from the forward's out and lse (whole arrays). */
void aotk__sel_reference_dq_row_f64(const aotk__sel_reference_problem *p, int64_t token, int64_t head_q,
                                    const double *out, const double *lse, double *dq_row) {
  const aotk__sel_reference_token t = aotk__sel_reference_locate(p, token);
  const int64_t head_kv = head_q / sel_group_size(p);
  const double *q_row = sel_q_row(p, token, head_q);
  const double *dout_row = sel_dout_row(p, token, head_q);
  const double row_lse = lse[token * p->heads_q + head_q];
  const double delta = sel_delta_f64(p, token, head_q, out);
  for (int64_t d = 0; d < p->head_dim_qk; d++) dq_row[d] = 0.0;
  int64_t begin, end;
  for (int64_t s = 0; s < p->slots; s++) {
    if (!sel_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
    for (int64_t j = begin; j < end; j++) {
      const double *k_row = sel_k_row(p, t.k_start + j, head_kv);
      double probability = exp(p->softmax_scale * sel_dot_f64(q_row, k_row, p->head_dim_qk) - row_lse);
      double dp = sel_dot_f64(dout_row, sel_v_row(p, t.k_start + j, head_kv), p->head_dim_v);
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
void aotk__sel_reference_dkdv_block_f64(const aotk__sel_reference_problem *p, int64_t seq, int64_t head_kv,
                                        int64_t block, const double *out, const double *lse, double *dk, double *dv,
                                        int64_t *hits) {
  const aotk__sel_reference_token sequence = aotk__sel_reference_sequence(p, seq);
  const int64_t group_size = sel_group_size(p);
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
      const aotk__sel_reference_token t = aotk__sel_reference_locate(p, token);
      const double *q_row = sel_q_row(p, token, head_q);
      const double *dout_row = sel_dout_row(p, token, head_q);
      const double row_lse = lse[token * p->heads_q + head_q];
      double delta = 0.0;
      int have_delta = 0;
      int64_t begin, end;
      for (int64_t s = 0; s < p->slots; s++) {
        if (!sel_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
        if (begin != block * p->block_size) continue; /* another block */
        if (!have_delta) {
          delta = sel_delta_f64(p, token, head_q, out);
          have_delta = 1;
        }
        for (int64_t j = begin; j < end; j++) {
          const int64_t key = sequence.k_start + j;
          const double *k_row = sel_k_row(p, key, head_kv);
          const double *v_row = sel_v_row(p, key, head_kv);
          double probability = exp(p->softmax_scale * sel_dot_f64(q_row, k_row, p->head_dim_qk) - row_lse);
          double ds = probability * (sel_dot_f64(dout_row, v_row, p->head_dim_v) - delta);
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
    for (int64_t d = 0; d < p->head_dim_qk; d++)
      dk[(key * p->heads_kv + head_kv) * p->head_dim_qk + d] *= p->softmax_scale;
  }
}

/* The whole forward: out and lse of every row. */
void aotk__sel_reference_fwd_f64(const aotk__sel_reference_problem *p, double *out, double *lse) {
  for (int64_t token = 0; token < sel_total_q(p); token++) {
    for (int64_t head_q = 0; head_q < p->heads_q; head_q++) {
      aotk__sel_reference_fwd_row_f64(p, token, head_q, out + (token * p->heads_q + head_q) * p->head_dim_v,
                                      lse + token * p->heads_q + head_q);
    }
  }
}

/* The whole backward, from the forward's out and lse: dq of every row, dk and dv of every key. */
void aotk__sel_reference_bwd_f64(const aotk__sel_reference_problem *p, const double *out, const double *lse, double *dq,
                                 double *dk, double *dv) {
  for (int64_t token = 0; token < sel_total_q(p); token++) {
    for (int64_t head_q = 0; head_q < p->heads_q; head_q++) {
      aotk__sel_reference_dq_row_f64(p, token, head_q, out, lse, dq + (token * p->heads_q + head_q) * p->head_dim_qk);
    }
  }
  for (int64_t seq = 0; seq < p->num_seqs; seq++) {
    const aotk__sel_reference_token sequence = aotk__sel_reference_sequence(p, seq);
    for (int64_t head_kv = 0; head_kv < p->heads_kv; head_kv++) {
      for (int64_t block = 0; block < sequence.num_blocks; block++) {
        aotk__sel_reference_dkdv_block_f64(p, seq, head_kv, block, out, lse, dk, dv, NULL);
      }
    }
  }
}

/* ---- the same precision as the kernels (the header says what it models) ------------------------ */

/* float32 dot product with four partial sums, as src/check/aotk_reference.c's dot_f32. */
static float sel_dot_f32(const double *a, const double *b, int64_t n) {
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

static float sel_score_f32(const aotk__sel_reference_problem *p, const double *q_row, const double *k_row) {
  return sel_dot_f32(q_row, k_row, p->head_dim_qk) * (float)p->softmax_scale;
}

/* out_row (head_dim_v floats, already rounded to dtype) and *lse (float32) of (token, head_q). */
void aotk__sel_reference_fwd_row_lowp(const aotk__sel_reference_problem *p, int dtype, int64_t token, int64_t head_q,
                                      float *out_row, float *lse) {
  const aotk__sel_reference_token t = aotk__sel_reference_locate(p, token);
  const int64_t head_kv = head_q / sel_group_size(p);
  const double *q_row = sel_q_row(p, token, head_q);
  for (int64_t d = 0; d < p->head_dim_v; d++) out_row[d] = 0.0f;
  float max_score = -INFINITY;
  int64_t keys = 0, begin, end;
  for (int64_t s = 0; s < p->slots; s++) {
    if (!sel_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
    for (int64_t j = begin; j < end; j++) {
      float score = sel_score_f32(p, q_row, sel_k_row(p, t.k_start + j, head_kv));
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
    if (!sel_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
    for (int64_t j = begin; j < end; j++) {
      float weight = expf(sel_score_f32(p, q_row, sel_k_row(p, t.k_start + j, head_kv)) - max_score);
      sum += weight;
      float weight_in_dtype = aotk__round_to_dtype(weight, dtype);
      const double *v_row = sel_v_row(p, t.k_start + j, head_kv);
      for (int64_t d = 0; d < p->head_dim_v; d++) out_row[d] += weight_in_dtype * (float)v_row[d];
    }
  }
  for (int64_t d = 0; d < p->head_dim_v; d++) out_row[d] = aotk__round_to_dtype(out_row[d] / sum, dtype);
  *lse = max_score + logf(sum);
}

static float sel_delta_lowp(const aotk__sel_reference_problem *p, int64_t token, int64_t head_q, const float *out) {
  const double *dout_row = sel_dout_row(p, token, head_q);
  const float *out_row = out + (token * p->heads_q + head_q) * p->head_dim_v;
  float sum = 0.0f;
  for (int64_t d = 0; d < p->head_dim_v; d++) sum += (float)dout_row[d] * out_row[d];
  return sum;
}

void aotk__sel_reference_dq_row_lowp(const aotk__sel_reference_problem *p, int dtype, int64_t token, int64_t head_q,
                                     const float *out, const float *lse, float *dq_row) {
  const aotk__sel_reference_token t = aotk__sel_reference_locate(p, token);
  const int64_t head_kv = head_q / sel_group_size(p);
  const double *q_row = sel_q_row(p, token, head_q);
  const double *dout_row = sel_dout_row(p, token, head_q);
  const float row_lse = lse[token * p->heads_q + head_q];
  const float delta = sel_delta_lowp(p, token, head_q, out);
  for (int64_t d = 0; d < p->head_dim_qk; d++) dq_row[d] = 0.0f;
  int64_t begin, end;
  for (int64_t s = 0; s < p->slots; s++) {
    if (!sel_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
    for (int64_t j = begin; j < end; j++) {
      const double *k_row = sel_k_row(p, t.k_start + j, head_kv);
      float probability = expf(sel_score_f32(p, q_row, k_row) - row_lse);
      float dp = sel_dot_f32(dout_row, sel_v_row(p, t.k_start + j, head_kv), p->head_dim_v);
      float ds_in_dtype = aotk__round_to_dtype(probability * (dp - delta), dtype);
      for (int64_t d = 0; d < p->head_dim_qk; d++) dq_row[d] += ds_in_dtype * (float)k_row[d];
    }
  }
  for (int64_t d = 0; d < p->head_dim_qk; d++) {
    dq_row[d] = aotk__round_to_dtype(dq_row[d] * (float)p->softmax_scale, dtype);
  }
}

void aotk__sel_reference_dkdv_block_lowp(const aotk__sel_reference_problem *p, int dtype, int64_t seq, int64_t head_kv,
                                         int64_t block, const float *out, const float *lse, float *dk, float *dv) {
  const aotk__sel_reference_token sequence = aotk__sel_reference_sequence(p, seq);
  const int64_t group_size = sel_group_size(p);
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
      const aotk__sel_reference_token t = aotk__sel_reference_locate(p, token);
      const double *q_row = sel_q_row(p, token, head_q);
      const double *dout_row = sel_dout_row(p, token, head_q);
      const float row_lse = lse[token * p->heads_q + head_q];
      float delta = 0.0f;
      int have_delta = 0;
      int64_t begin, end;
      for (int64_t s = 0; s < p->slots; s++) {
        if (!sel_slot_keys(p, &t, token, head_kv, s, &begin, &end)) continue;
        if (begin != block * p->block_size) continue;
        if (!have_delta) {
          delta = sel_delta_lowp(p, token, head_q, out);
          have_delta = 1;
        }
        for (int64_t j = begin; j < end; j++) {
          const int64_t key = sequence.k_start + j;
          const double *k_row = sel_k_row(p, key, head_kv);
          const double *v_row = sel_v_row(p, key, head_kv);
          float probability = expf(sel_score_f32(p, q_row, k_row) - row_lse);
          float dp = sel_dot_f32(dout_row, v_row, p->head_dim_v);
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
    for (int64_t d = 0; d < p->head_dim_qk; d++)
      dk_row[d] = aotk__round_to_dtype(dk_row[d] * (float)p->softmax_scale, dtype);
    for (int64_t d = 0; d < p->head_dim_v; d++) dv_row[d] = aotk__round_to_dtype(dv_row[d], dtype);
  }
}

void aotk__sel_reference_fwd_lowp(const aotk__sel_reference_problem *p, int dtype, float *out, float *lse) {
  for (int64_t token = 0; token < sel_total_q(p); token++) {
    for (int64_t head_q = 0; head_q < p->heads_q; head_q++) {
      aotk__sel_reference_fwd_row_lowp(p, dtype, token, head_q, out + (token * p->heads_q + head_q) * p->head_dim_v,
                                       lse + token * p->heads_q + head_q);
    }
  }
}

void aotk__sel_reference_bwd_lowp(const aotk__sel_reference_problem *p, int dtype, const float *out, const float *lse,
                                  float *dq, float *dk, float *dv) {
  for (int64_t token = 0; token < sel_total_q(p); token++) {
    for (int64_t head_q = 0; head_q < p->heads_q; head_q++) {
      aotk__sel_reference_dq_row_lowp(p, dtype, token, head_q, out, lse,
                                      dq + (token * p->heads_q + head_q) * p->head_dim_qk);
    }
  }
  for (int64_t seq = 0; seq < p->num_seqs; seq++) {
    const aotk__sel_reference_token sequence = aotk__sel_reference_sequence(p, seq);
    for (int64_t head_kv = 0; head_kv < p->heads_kv; head_kv++) {
      for (int64_t block = 0; block < sequence.num_blocks; block++) {
        aotk__sel_reference_dkdv_block_lowp(p, dtype, seq, head_kv, block, out, lse, dk, dv);
      }
    }
  }
}
