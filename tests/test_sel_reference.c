/*
 * CPU tests of the selection-attention reference (src/check/aotk_sel_reference.c), which aotk_self_test()
 * and test_sel_gpu.c trust as their oracle:
 * - the key sets of hand-worked rows (causal cut, len_k cut, future / out-of-range / negative ids,
 *   block_cnt and its clamping, duplicates, empty sequences, len_q > len_k);
 * - selecting every block <= p / block_size equals the dense causal attention of src/check/aotk_reference.c
 *   (bottom-right aligned) in out, lse, dq, dk, dv; and the same-precision emulation equals the dense
 *   emulation bit for bit when the blocks are listed in ascending order (same keys, same order);
 * - permuting the slots changes nothing (to float64 rounding);
 * - -1 padding equals a smaller block_cnt (bit for bit: the same blocks in the same order);
 * - empty rows: out 0, lse -inf, dq 0, and nothing in dk or dv (changing their q and dout changes no
 *   bit of dk, dv); keys no row selected get dk = dv = 0;
 * - a block listed twice counts twice (a row of block b twice: out unchanged, lse + log 2);
 * - the backward against central differences of the forward, duplicates included;
 * - the emulation in float32 agrees with float64, and in bf16/fp16 differs by the dtype's rounding.
 * Block sizes other than the library's 32/64/128 are used where small blocks make the cases richer.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aotk.h"
#include "aotk_half.h"
#include "aotk_reference.h"
#include "aotk_sel_reference.h"
#include "aotk_test_harness.h"
#include "aotk_test_random.h"

static void shuffle_int32(int32_t *values, int64_t count, random_generator *generator) {
  for (int64_t i = count - 1; i > 0; i--) {
    int64_t j = random_int(generator, 0, i);
    int32_t swap = values[i];
    values[i] = values[j];
    values[j] = swap;
  }
}

/* ---- a problem and its buffers ---------------------------------------------------------------- */

enum { MAX_SEQS = 8 };

typedef struct test_problem {
  aotk__sel_reference_problem p;
  int64_t cu_q[MAX_SEQS + 1], cu_k[MAX_SEQS + 1];
  int64_t total_q, total_k;
  float *qf, *kf, *vf, *doutf; /* the same values, for the dense reference */
  double *q, *k, *v, *dout;
  int32_t *idx, *cnt;
  /* float64 results */
  double *out, *lse, *dq, *dk, *dv;
  int64_t *hits;
} test_problem;

static void *checked_calloc(int64_t count, size_t size) {
  void *pointer = calloc((size_t)(count > 0 ? count : 1), size);
  if (pointer == NULL) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return pointer;
}

/* Lengths as (len_q, len_k) pairs; N(0, 1) inputs rounded to bf16 (so the emulation reads them
 * exactly); contiguous layout; every slot -1 and no block_cnt until a selection is filled in. */
static void problem_create(test_problem *t, const int64_t (*lengths)[2], int num_seqs, int64_t heads_q,
                           int64_t heads_kv, int64_t head_dim_qk, int64_t head_dim_v, int64_t block_size,
                           int64_t slots, random_generator *generator) {
  memset(t, 0, sizeof *t);
  for (int n = 0; n < num_seqs; n++) {
    t->cu_q[n + 1] = t->cu_q[n] + lengths[n][0];
    t->cu_k[n + 1] = t->cu_k[n] + lengths[n][1];
  }
  t->total_q = t->cu_q[num_seqs];
  t->total_k = t->cu_k[num_seqs];
  aotk__sel_reference_problem *p = &t->p;
  p->num_seqs = num_seqs;
  p->cu_seqlens_q = t->cu_q;
  p->cu_seqlens_k = t->cu_k;
  p->heads_q = heads_q;
  p->heads_kv = heads_kv;
  p->head_dim_qk = head_dim_qk;
  p->head_dim_v = head_dim_v;
  p->block_size = block_size;
  p->slots = slots;
  p->softmax_scale = 1.0 / sqrt((double)head_dim_qk);
  const int64_t counts[4] = {t->total_q * heads_q * head_dim_qk, t->total_k * heads_kv * head_dim_qk,
                             t->total_k * heads_kv * head_dim_v, t->total_q * heads_q * head_dim_v};
  float **floats[4] = {&t->qf, &t->kf, &t->vf, &t->doutf};
  double **doubles[4] = {&t->q, &t->k, &t->v, &t->dout};
  for (int i = 0; i < 4; i++) {
    *floats[i] = checked_calloc(counts[i], sizeof(float));
    *doubles[i] = checked_calloc(counts[i], sizeof(double));
    for (int64_t e = 0; e < counts[i]; e++) {
      float value = aotk__round_to_dtype((float)random_normal(generator), AOTK_DTYPE_BFLOAT16);
      (*floats[i])[e] = value;
      (*doubles[i])[e] = value;
    }
  }
  p->q = t->q;
  p->k = t->k;
  p->v = t->v;
  p->dout = t->dout;
  p->q_strides[0] = heads_q * head_dim_qk;
  p->q_strides[1] = head_dim_qk;
  p->k_strides[0] = heads_kv * head_dim_qk;
  p->k_strides[1] = head_dim_qk;
  p->v_strides[0] = heads_kv * head_dim_v;
  p->v_strides[1] = head_dim_v;
  p->dout_strides[0] = heads_q * head_dim_v;
  p->dout_strides[1] = head_dim_v;
  t->idx = checked_calloc(t->total_q * heads_kv * slots, sizeof(int32_t));
  for (int64_t i = 0; i < t->total_q * heads_kv * slots; i++) t->idx[i] = -1;
  p->block_idx = t->idx;
  t->out = checked_calloc(t->total_q * heads_q * head_dim_v, sizeof(double));
  t->lse = checked_calloc(t->total_q * heads_q, sizeof(double));
  t->dq = checked_calloc(t->total_q * heads_q * head_dim_qk, sizeof(double));
  t->dk = checked_calloc(t->total_k * heads_kv * head_dim_qk, sizeof(double));
  t->dv = checked_calloc(t->total_k * heads_kv * head_dim_v, sizeof(double));
  t->hits = checked_calloc(t->total_k * heads_kv, sizeof(int64_t));
}

static void problem_destroy(test_problem *t) {
  void *all[] = {t->qf, t->kf, t->vf, t->doutf, t->q, t->k, t->v, t->dout, t->idx, t->cnt,
                 t->out, t->lse, t->dq, t->dk, t->dv, t->hits};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* A deep copy of the selection, so that a variant can be edited. */
static int32_t *copy_idx(const test_problem *t) {
  const int64_t count = t->total_q * t->p.heads_kv * t->p.slots;
  int32_t *copy = checked_calloc(count, sizeof(int32_t));
  memcpy(copy, t->idx, (size_t)count * sizeof(int32_t));
  return copy;
}

static void run_reference(test_problem *t) {
  aotk__sel_reference_fwd_f64(&t->p, t->out, t->lse);
  aotk__sel_reference_bwd_f64(&t->p, t->out, t->lse, t->dq, t->dk, t->dv);
  for (int64_t seq = 0; seq < t->p.num_seqs; seq++) {
    aotk__sel_reference_token s = aotk__sel_reference_sequence(&t->p, seq);
    for (int64_t h = 0; h < t->p.heads_kv; h++) {
      for (int64_t b = 0; b < s.num_blocks; b++) {
        /* Only for the hits: the same dk and dv are written again. */
        aotk__sel_reference_dkdv_block_f64(&t->p, seq, h, b, t->out, t->lse, t->dk, t->dv, t->hits);
      }
    }
  }
}

/* Each row's position p and, for every kv head, the blocks 0 .. p / block_size in a random order
 * (ascending if `ascending`), then -1s. Needs slots >= the longest sequence's block count. */
static void select_every_block(test_problem *t, int ascending, random_generator *generator) {
  const aotk__sel_reference_problem *p = &t->p;
  for (int64_t token = 0; token < t->total_q; token++) {
    aotk__sel_reference_token where = aotk__sel_reference_locate(p, token);
    const int64_t available = where.position >= 0 ? where.position / p->block_size + 1 : 0;
    for (int64_t h = 0; h < p->heads_kv; h++) {
      int32_t *row = t->idx + (token * p->heads_kv + h) * p->slots;
      for (int64_t s = 0; s < p->slots; s++) row[s] = s < available ? (int32_t)s : -1;
      if (!ascending) shuffle_int32(row, available, generator);
    }
  }
}

/* A random selection per (row, kv head): some distinct blocks among 0 .. p / block_size, and in the
 * remaining slots ignored ids (-1, -2, the first id past the last block, future blocks); all shuffled.
 * With `with_count`, block_cnt is drawn too (sometimes past [0, slots], which clamps), and the slots
 * it leaves out hold ids that would count if they were read. `duplicates`: some blocks listed twice. */
static void select_random(test_problem *t, int with_count, int duplicates, random_generator *generator) {
  const aotk__sel_reference_problem *p = &t->p;
  if (with_count) {
    t->cnt = checked_calloc(t->total_q * p->heads_kv, sizeof(int32_t));
    t->p.block_cnt = t->cnt;
  }
  for (int64_t token = 0; token < t->total_q; token++) {
    aotk__sel_reference_token where = aotk__sel_reference_locate(p, token);
    const int64_t available = where.position >= 0 ? where.position / p->block_size + 1 : 0;
    for (int64_t h = 0; h < p->heads_kv; h++) {
      int32_t *row = t->idx + (token * p->heads_kv + h) * p->slots;
      int64_t count = with_count ? random_int(generator, 0, p->slots) : p->slots;
      /* At least one block in most rows that can have one, so that few rows are empty by chance. */
      const int64_t most = available < count ? available : count;
      int64_t chosen = most > 0 && random_int(generator, 0, 7) != 0 ? random_int(generator, 1, most) : 0;
      /* distinct blocks by a partial shuffle of 0 .. available - 1 */
      int32_t *pool = checked_calloc(available, sizeof(int32_t));
      for (int64_t b = 0; b < available; b++) pool[b] = (int32_t)b;
      shuffle_int32(pool, available, generator);
      for (int64_t s = 0; s < count; s++) {
        if (s < chosen) {
          row[s] = pool[s];
        } else if (duplicates && chosen > 0 && random_int(generator, 0, 2) == 0) {
          row[s] = pool[random_int(generator, 0, chosen - 1)];
        } else {
          switch (random_int(generator, 0, 3)) {
            case 0:
              row[s] = -2;
              break;
            case 1:
              row[s] = (int32_t)where.num_blocks;
              break;
            case 2:
              row[s] = available < where.num_blocks ? (int32_t)random_int(generator, available, where.num_blocks - 1) : -1;
              break;
            default:
              row[s] = -1;
              break;
          }
        }
      }
      free(pool);
      shuffle_int32(row, count, generator);
      for (int64_t s = count; s < p->slots; s++) {
        row[s] = where.num_blocks > 0 ? (int32_t)random_int(generator, 0, where.num_blocks - 1) : 0;
      }
      if (with_count) {
        int32_t stored = (int32_t)count;
        /* counts outside [0, slots] clamp: -3 reads nothing, slots + 2 reads every slot */
        if (count == 0 && random_int(generator, 0, 1)) stored = -3;
        if (count == p->slots && random_int(generator, 0, 1)) stored = (int32_t)p->slots + 2;
        t->cnt[token * p->heads_kv + h] = stored;
      }
    }
  }
}

/* max |a - b| / max(1, |b|) over n values; equal infinities (lse of empty rows) count as equal. */
static double relative_difference(const double *a, const double *b, int64_t n) {
  double worst = 0.0;
  for (int64_t i = 0; i < n; i++) {
    if (a[i] == b[i]) continue;
    double error = fabs(a[i] - b[i]) / (fabs(b[i]) > 1.0 ? fabs(b[i]) : 1.0);
    if (!(error <= worst)) worst = isnan(error) ? INFINITY : error;
  }
  return worst;
}

static int64_t bit_differences(const void *a, const void *b, int64_t n, size_t size) {
  int64_t differences = 0;
  for (int64_t i = 0; i < n; i++) differences += memcmp((const char *)a + i * size, (const char *)b + i * size, size) != 0;
  return differences;
}

/* ---- key sets, worked by hand ----------------------------------------------------------------- */

static void check_keys(const aotk__sel_reference_problem *p, int64_t token, int64_t head_kv, const int64_t *expected,
                       int64_t expected_count, const char *what) {
  int64_t keys[64];
  int64_t count = aotk__sel_reference_keys(p, token, head_kv, keys);
  int same = count == expected_count;
  for (int64_t i = 0; same && i < count; i++) same = keys[i] == expected[i];
  CHECK_MSG(same, "%s: token %lld: %lld keys, expected %lld", what, (long long)token, (long long)count,
            (long long)expected_count);
}

static void test_key_sets(void) {
  random_generator generator = random_for_case(1);
  test_problem t;
  /* One sequence, len_q 3, len_k 5, block size 2: blocks {0,1} {2,3} {4}; positions 2, 3, 4. */
  const int64_t lengths[][2] = {{3, 5}};
  problem_create(&t, lengths, 1, 1, 1, 4, 4, 2, 4, &generator);
  const int32_t idx[3][4] = {
      {3, 1, -1, 0},  /* 3 is past the last block; 1 is cut at p = 2; 0 whole */
      {2, 1, 1, -2},  /* 2 starts after p = 3 (future); 1 twice counts twice; -2 ignored */
      {2, 0, 1, 2},   /* with block_cnt 2: only 2 (cut at len_k) and 0 */
  };
  memcpy(t.idx, idx, sizeof idx);
  t.cnt = checked_calloc(3, sizeof(int32_t));
  t.cnt[0] = 9; /* clamps to 4 */
  t.cnt[1] = 4;
  t.cnt[2] = 2;
  t.p.block_cnt = t.cnt;
  const int64_t keys0[] = {2, 0, 1}, keys1[] = {2, 3, 2, 3}, keys2[] = {4, 0, 1};
  check_keys(&t.p, 0, 0, keys0, 3, "by hand");
  check_keys(&t.p, 1, 0, keys1, 4, "by hand");
  check_keys(&t.p, 2, 0, keys2, 3, "by hand");
  t.cnt[0] = -1; /* clamps to 0 */
  check_keys(&t.p, 0, 0, NULL, 0, "count -1");
  t.cnt[0] = 0;
  check_keys(&t.p, 0, 0, NULL, 0, "count 0");
  t.p.block_cnt = NULL; /* every slot read: row 2 also gets block 1 and block 2 again */
  const int64_t keys2_all[] = {4, 0, 1, 2, 3, 4};
  check_keys(&t.p, 2, 0, keys2_all, 6, "no count");
  problem_destroy(&t);

  /* Varlen: (len_q 2, len_k 1): position -1 then 0; (0, 3): no rows; (2, 4): positions 2, 3; a second
   * kv head with its own selection. */
  const int64_t varlen[][2] = {{2, 1}, {0, 3}, {2, 4}};
  problem_create(&t, varlen, 3, 2, 2, 4, 4, 2, 2, &generator);
  const int32_t idx2[4][2][2] = {
      {{0, -1}, {0, 0}},  /* token 0, p = -1: nothing, even block 0 */
      {{0, 1}, {-1, 0}},  /* token 1, p = 0, one block: key 0; block 1 is past the last */
      {{1, 0}, {1, 2}},   /* token 2 (seq 2, t 0, p 2): {2}, {0, 1}; head 1: {2}, block 2 past the last */
      {{1, 0}, {0, 0}},   /* token 3 (p 3): {2, 3}, {0, 1}; head 1: block 0 twice */
  };
  memcpy(t.idx, idx2, sizeof idx2);
  check_keys(&t.p, 0, 0, NULL, 0, "p < 0");
  check_keys(&t.p, 0, 1, NULL, 0, "p < 0");
  const int64_t k1[] = {0}, k2h0[] = {2, 0, 1}, k2h1[] = {2}, k3h0[] = {2, 3, 0, 1}, k3h1[] = {0, 1, 0, 1};
  check_keys(&t.p, 1, 0, k1, 1, "varlen");
  check_keys(&t.p, 1, 1, k1, 1, "varlen");
  check_keys(&t.p, 2, 0, k2h0, 3, "varlen");
  check_keys(&t.p, 2, 1, k2h1, 1, "varlen");
  check_keys(&t.p, 3, 0, k3h0, 4, "varlen");
  check_keys(&t.p, 3, 1, k3h1, 4, "varlen");
  aotk__sel_reference_token where = aotk__sel_reference_locate(&t.p, 2);
  CHECK_MSG(where.seq == 2 && where.local == 0 && where.position == 2 && where.k_start == 4 && where.num_blocks == 2,
            "token 2: seq %lld local %lld position %lld k_start %lld blocks %lld", (long long)where.seq,
            (long long)where.local, (long long)where.position, (long long)where.k_start, (long long)where.num_blocks);
  problem_destroy(&t);
}

/* ---- (a) every block = dense causal attention ------------------------------------------------- */

typedef struct dense_case {
  const int64_t (*lengths)[2];
  int num_seqs;
  int64_t heads_q, heads_kv, head_dim_qk, head_dim_v, block_size;
} dense_case;

static const int64_t dense_single[][2] = {{13, 13}};
static const int64_t dense_varlen[][2] = {{9, 9}, {0, 5}, {12, 30}, {7, 3}, {5, 0}, {1, 1}};
static const int64_t dense_library_block[][2] = {{70, 70}, {1, 100}, {40, 33}};
static const dense_case dense_cases[] = {
    {dense_single, 1, 1, 1, 8, 8, 4},
    {dense_varlen, 6, 4, 2, 16, 8, 8},
    {dense_varlen, 6, 3, 3, 8, 16, 1},
    {dense_library_block, 3, 2, 1, 64, 64, 32},
};

/* The dense problem of sequence `seq` (src/check/aotk_reference.h: batch 0 pointed at the sequence's rows),
 * causal, bottom-right aligned. */
static aotk__attn_reference_problem dense_problem(const test_problem *t, int64_t seq) {
  const aotk__sel_reference_problem *p = &t->p;
  aotk__attn_reference_problem d;
  memset(&d, 0, sizeof d);
  d.seqlen_q = t->cu_q[seq + 1] - t->cu_q[seq];
  d.seqlen_k = t->cu_k[seq + 1] - t->cu_k[seq];
  d.heads_q = p->heads_q;
  d.heads_kv = p->heads_kv;
  d.head_dim = p->head_dim_qk;
  d.head_dim_v = p->head_dim_v;
  d.q = t->qf + t->cu_q[seq] * p->q_strides[0];
  d.k = t->kf + t->cu_k[seq] * p->k_strides[0];
  d.v = t->vf + t->cu_k[seq] * p->v_strides[0];
  d.dout = t->doutf + t->cu_q[seq] * p->dout_strides[0];
  d.q_strides[1] = p->q_strides[0];
  d.q_strides[2] = p->q_strides[1];
  d.k_strides[1] = p->k_strides[0];
  d.k_strides[2] = p->k_strides[1];
  d.v_strides[1] = p->v_strides[0];
  d.v_strides[2] = p->v_strides[1];
  d.dout_strides[1] = p->dout_strides[0];
  d.dout_strides[2] = p->dout_strides[1];
  d.softmax_scale = p->softmax_scale;
  d.causal = 1;
  d.top_left = 0;
  return d;
}

static void test_every_block_is_dense(void) {
  for (size_t c = 0; c < sizeof dense_cases / sizeof dense_cases[0]; c++) {
    const dense_case *dc = &dense_cases[c];
    random_generator generator = random_for_case(100 + c);
    int64_t longest_k = 1;
    for (int n = 0; n < dc->num_seqs; n++) longest_k = dc->lengths[n][1] > longest_k ? dc->lengths[n][1] : longest_k;
    /* Room for every block and two spare slots (left -1). */
    const int64_t slots = (longest_k + dc->block_size - 1) / dc->block_size + 2;
    test_problem t;
    problem_create(&t, dc->lengths, dc->num_seqs, dc->heads_q, dc->heads_kv, dc->head_dim_qk, dc->head_dim_v,
                   dc->block_size, slots, &generator);
    const aotk__sel_reference_problem *p = &t.p;
    const int64_t DQK = p->head_dim_qk, DV = p->head_dim_v, HQ = p->heads_q, HKV = p->heads_kv;

    /* Shuffled: the float64 results equal the dense reference's to rounding. */
    select_every_block(&t, 0, &generator);
    run_reference(&t);
    double worst[5] = {0, 0, 0, 0, 0};
    int64_t lse_mismatch = 0;
    double *row = checked_calloc(DQK + DV, sizeof(double));
    double *dense_lse = NULL, *dense_delta = NULL;
    for (int64_t seq = 0; seq < dc->num_seqs; seq++) {
      aotk__attn_reference_problem d = dense_problem(&t, seq);
      dense_lse = checked_calloc(HQ * d.seqlen_q, sizeof(double));
      dense_delta = checked_calloc(HQ * d.seqlen_q, sizeof(double));
      for (int64_t h = 0; h < HQ; h++) {
        for (int64_t i = 0; i < d.seqlen_q; i++) {
          const int64_t token = t.cu_q[seq] + i;
          double *lse = &dense_lse[h * d.seqlen_q + i];
          aotk__attn_reference_bwd_row_stats_f64(&d, 0, h, i, row, lse, &dense_delta[h * d.seqlen_q + i]);
          double e = relative_difference(t.out + (token * HQ + h) * DV, row, DV);
          worst[0] = e > worst[0] ? e : worst[0];
          double sel_lse = t.lse[token * HQ + h];
          if (isinf(*lse) || isinf(sel_lse)) {
            lse_mismatch += sel_lse != *lse;
          } else {
            e = fabs(sel_lse - *lse) / (fabs(*lse) > 1 ? fabs(*lse) : 1);
            worst[1] = e > worst[1] ? e : worst[1];
          }
          aotk__attn_reference_bwd_dq_row_f64(&d, 0, h, i, *lse, dense_delta[h * d.seqlen_q + i], row);
          e = relative_difference(t.dq + (token * HQ + h) * DQK, row, DQK);
          worst[2] = e > worst[2] ? e : worst[2];
        }
      }
      for (int64_t h = 0; h < HKV; h++) {
        for (int64_t j = 0; j < d.seqlen_k; j++) {
          const int64_t key = t.cu_k[seq] + j;
          aotk__attn_reference_bwd_dkdv_row_f64(&d, 0, h, j, dense_lse, dense_delta, row, row + DQK);
          double e = relative_difference(t.dk + (key * HKV + h) * DQK, row, DQK);
          worst[3] = e > worst[3] ? e : worst[3];
          e = relative_difference(t.dv + (key * HKV + h) * DV, row + DQK, DV);
          worst[4] = e > worst[4] ? e : worst[4];
        }
      }
      free(dense_lse);
      free(dense_delta);
    }
    static const char *const names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++) {
      CHECK_MSG(worst[i] < 1e-12, "case %zu: %s differs from dense causal by %.3g (relative)", c, names[i], worst[i]);
    }
    CHECK_MSG(lse_mismatch == 0, "case %zu: %lld rows empty in one and not the other", c, (long long)lse_mismatch);

    /* Ascending: the emulation equals the dense emulation bit for bit, in both dtypes. */
    select_every_block(&t, 1, &generator);
    static const int dtypes[2] = {AOTK_DTYPE_BFLOAT16, AOTK_DTYPE_FLOAT16};
    for (int k = 0; k < 2; k++) {
      const int dtype = dtypes[k];
      float *out = checked_calloc(t.total_q * HQ * DV, sizeof(float));
      float *lse = checked_calloc(t.total_q * HQ, sizeof(float));
      float *dq = checked_calloc(t.total_q * HQ * DQK, sizeof(float));
      float *dk = checked_calloc(t.total_k * HKV * DQK, sizeof(float));
      float *dv = checked_calloc(t.total_k * HKV * DV, sizeof(float));
      float *frow = checked_calloc(DQK + DV, sizeof(float));
      aotk__sel_reference_fwd_lowp(p, dtype, out, lse);
      aotk__sel_reference_bwd_lowp(p, dtype, out, lse, dq, dk, dv);
      int64_t differences[5] = {0, 0, 0, 0, 0};
      for (int64_t seq = 0; seq < dc->num_seqs; seq++) {
        aotk__attn_reference_problem d = dense_problem(&t, seq);
        float *stats_lse = checked_calloc(HQ * d.seqlen_q, sizeof(float));
        float *stats_delta = checked_calloc(HQ * d.seqlen_q, sizeof(float));
        for (int64_t h = 0; h < HQ; h++) {
          for (int64_t i = 0; i < d.seqlen_q; i++) {
            const int64_t token = t.cu_q[seq] + i;
            float *l = &stats_lse[h * d.seqlen_q + i];
            aotk__attn_reference_bwd_row_stats_lowp(&d, dtype, 0, h, i, frow, l, &stats_delta[h * d.seqlen_q + i]);
            differences[0] += bit_differences(out + (token * HQ + h) * DV, frow, DV, sizeof(float));
            differences[1] += bit_differences(lse + token * HQ + h, l, 1, sizeof(float));
            aotk__attn_reference_bwd_dq_row_lowp(&d, dtype, 0, h, i, *l, stats_delta[h * d.seqlen_q + i], frow);
            differences[2] += bit_differences(dq + (token * HQ + h) * DQK, frow, DQK, sizeof(float));
          }
        }
        for (int64_t h = 0; h < HKV; h++) {
          for (int64_t j = 0; j < d.seqlen_k; j++) {
            const int64_t key = t.cu_k[seq] + j;
            aotk__attn_reference_bwd_dkdv_row_lowp(&d, dtype, 0, h, j, stats_lse, stats_delta, frow, frow + DQK);
            differences[3] += bit_differences(dk + (key * HKV + h) * DQK, frow, DQK, sizeof(float));
            differences[4] += bit_differences(dv + (key * HKV + h) * DV, frow + DQK, DV, sizeof(float));
          }
        }
        free(stats_lse);
        free(stats_delta);
      }
      for (int i = 0; i < 5; i++) {
        CHECK_MSG(differences[i] == 0, "case %zu, dtype %d: the emulation's %s differs from the dense emulation's in %lld values",
                  c, dtype, names[i], (long long)differences[i]);
      }
      free(out);
      free(lse);
      free(dq);
      free(dk);
      free(dv);
      free(frow);
    }
    free(row);
    problem_destroy(&t);
  }
}

/* ---- (b) permutations, (c) padding, (d) empty rows, duplicates -------------------------------- */

static const int64_t varlen_mixed[][2] = {{9, 9}, {0, 6}, {20, 40}, {11, 4}, {3, 0}, {1, 1}, {17, 17}};

/* The float64 results of two selections of one problem agree to `tolerance` (relative; 0: bit for bit). */
static void check_same_results(test_problem *a, test_problem *b, double tolerance, const char *what) {
  const aotk__sel_reference_problem *p = &a->p;
  const int64_t n[5] = {a->total_q * p->heads_q * p->head_dim_v, a->total_q * p->heads_q,
                        a->total_q * p->heads_q * p->head_dim_qk, a->total_k * p->heads_kv * p->head_dim_qk,
                        a->total_k * p->heads_kv * p->head_dim_v};
  double *const x[5] = {a->out, a->lse, a->dq, a->dk, a->dv};
  double *const y[5] = {b->out, b->lse, b->dq, b->dk, b->dv};
  static const char *const names[5] = {"out", "lse", "dq", "dk", "dv"};
  for (int i = 0; i < 5; i++) {
    if (tolerance == 0.0) {
      int64_t differences = bit_differences(x[i], y[i], n[i], sizeof(double));
      CHECK_MSG(differences == 0, "%s: %s differs in %lld values", what, names[i], (long long)differences);
    } else {
      double e = relative_difference(x[i], y[i], n[i]);
      CHECK_MSG(e <= tolerance, "%s: %s differs by %.3g", what, names[i], e);
    }
  }
}

/* A second problem sharing a's inputs (pointers, not copies) with its own selection and results. */
static void problem_share_inputs(test_problem *b, const test_problem *a) {
  *b = *a;
  b->qf = b->kf = b->vf = b->doutf = NULL;
  b->q = b->k = b->v = b->dout = NULL;
  b->idx = copy_idx(a);
  b->p.block_idx = b->idx;
  b->cnt = NULL;
  if (a->cnt != NULL) {
    b->cnt = checked_calloc(a->total_q * a->p.heads_kv, sizeof(int32_t));
    memcpy(b->cnt, a->cnt, (size_t)(a->total_q * a->p.heads_kv) * sizeof(int32_t));
    b->p.block_cnt = b->cnt;
  }
  const aotk__sel_reference_problem *p = &a->p;
  b->out = checked_calloc(a->total_q * p->heads_q * p->head_dim_v, sizeof(double));
  b->lse = checked_calloc(a->total_q * p->heads_q, sizeof(double));
  b->dq = checked_calloc(a->total_q * p->heads_q * p->head_dim_qk, sizeof(double));
  b->dk = checked_calloc(a->total_k * p->heads_kv * p->head_dim_qk, sizeof(double));
  b->dv = checked_calloc(a->total_k * p->heads_kv * p->head_dim_v, sizeof(double));
  b->hits = checked_calloc(a->total_k * p->heads_kv, sizeof(int64_t));
}

static void test_permuted_slots(void) {
  for (int c = 0; c < 4; c++) {
    random_generator generator = random_for_case(200 + (uint64_t)c);
    test_problem a, b;
    problem_create(&a, varlen_mixed, 7, c % 2 ? 4 : 2, 2, 8, 8, c < 2 ? 4 : 8, 6, &generator);
    select_random(&a, c % 2, c == 3, &generator);
    run_reference(&a);
    problem_share_inputs(&b, &a);
    /* Permute the counted slots of every row (all slots without block_cnt). */
    for (int64_t token = 0; token < a.total_q; token++) {
      for (int64_t h = 0; h < a.p.heads_kv; h++) {
        shuffle_int32(b.idx + (token * a.p.heads_kv + h) * a.p.slots, aotk__sel_reference_count(&a.p, token, h),
                      &generator);
      }
    }
    run_reference(&b);
    check_same_results(&a, &b, 1e-12, c % 2 ? "permuted counted slots" : "permuted slots");
    problem_destroy(&b);
    problem_destroy(&a);
  }
}

static void test_padding_equals_count(void) {
  for (int c = 0; c < 3; c++) {
    random_generator generator = random_for_case(300 + (uint64_t)c);
    test_problem a, b;
    problem_create(&a, varlen_mixed, 7, 4, c == 2 ? 1 : 2, 8, 16, 4, 5, &generator);
    select_random(&a, 1, c == 1, &generator);
    run_reference(&a);
    problem_share_inputs(&b, &a);
    free(b.cnt);
    b.cnt = NULL;
    b.p.block_cnt = NULL;
    for (int64_t token = 0; token < a.total_q; token++) {
      for (int64_t h = 0; h < a.p.heads_kv; h++) {
        int32_t *row = b.idx + (token * a.p.heads_kv + h) * a.p.slots;
        for (int64_t s = aotk__sel_reference_count(&a.p, token, h); s < a.p.slots; s++) row[s] = -1;
      }
    }
    run_reference(&b);
    check_same_results(&a, &b, 0.0, "-1 padding against block_cnt");
    problem_destroy(&b);
    problem_destroy(&a);
  }
}

static int all_zero(const double *values, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (values[i] != 0.0) return 0;
  }
  return 1;
}

static void test_empty_rows(void) {
  random_generator generator = random_for_case(400);
  test_problem a, b;
  /* (11, 4): rows 0..6 have p < 0; (3, 0): no keys at all. */
  problem_create(&a, varlen_mixed, 7, 4, 2, 8, 8, 4, 4, &generator);
  select_random(&a, 1, 0, &generator);
  /* Make some rows empty in each way the contract allows; remember them. */
  const aotk__sel_reference_problem *p = &a.p;
  const int64_t HQ = p->heads_q, HKV = p->heads_kv, G = HQ / HKV, DQK = p->head_dim_qk, DV = p->head_dim_v;
  for (int64_t token = 0; token < a.total_q; token++) {
    aotk__sel_reference_token where = aotk__sel_reference_locate(p, token);
    for (int64_t h = 0; h < HKV; h++) {
      int32_t *row = a.idx + (token * HKV + h) * p->slots;
      switch ((token + h) % 5) {
        case 0: /* every slot -1 (count all) */
          a.cnt[token * HKV + h] = (int32_t)p->slots;
          for (int64_t s = 0; s < p->slots; s++) row[s] = -1;
          break;
        case 1: /* count 0, valid ids behind it */
          a.cnt[token * HKV + h] = 0;
          break;
        case 2: /* only ignored ids: past the last block, -2, and future ones where there are */
          a.cnt[token * HKV + h] = (int32_t)p->slots;
          for (int64_t s = 0; s < p->slots; s++) {
            int64_t future = where.position >= 0 ? where.position / p->block_size + 1 : 0;
            row[s] = s % 2 ? -2 : (int32_t)(future < where.num_blocks ? future : where.num_blocks + s);
          }
          break;
        default:
          break;
      }
    }
  }
  run_reference(&a);
  int64_t empty = 0, bad = 0;
  for (int64_t token = 0; token < a.total_q; token++) {
    for (int64_t g = 0; g < HQ; g++) {
      int64_t keys[64];
      if (aotk__sel_reference_keys(p, token, g / G, keys) > 0) continue;
      empty++;
      const double *out = a.out + (token * HQ + g) * DV, *dq = a.dq + (token * HQ + g) * DQK;
      double lse = a.lse[token * HQ + g];
      bad += !(all_zero(out, DV) && isinf(lse) && lse < 0 && all_zero(dq, DQK));
    }
  }
  CHECK_MSG(empty > a.total_q, "only %lld empty (row, head) pairs", (long long)empty);
  CHECK_MSG(bad == 0, "%lld empty rows with out != 0, lse != -inf or dq != 0", (long long)bad);
  /* Keys nobody selected: dk = dv = 0. */
  int64_t unselected = 0, bad_keys = 0;
  for (int64_t key = 0; key < a.total_k; key++) {
    for (int64_t h = 0; h < HKV; h++) {
      if (a.hits[key * HKV + h] > 0) continue;
      unselected++;
      bad_keys += !(all_zero(a.dk + (key * HKV + h) * DQK, DQK) && all_zero(a.dv + (key * HKV + h) * DV, DV));
    }
  }
  CHECK_MSG(unselected > 0 && bad_keys == 0, "%lld unselected keys, %lld with dk or dv != 0", (long long)unselected,
            (long long)bad_keys);
  /* New q and dout in every empty (row, head): dk and dv keep every bit. */
  problem_share_inputs(&b, &a);
  const int64_t nq = a.total_q * HQ * DQK, nd = a.total_q * HQ * DV;
  double *q = checked_calloc(nq, sizeof(double)), *dout = checked_calloc(nd, sizeof(double));
  memcpy(q, a.q, (size_t)nq * sizeof(double));
  memcpy(dout, a.dout, (size_t)nd * sizeof(double));
  for (int64_t token = 0; token < a.total_q; token++) {
    for (int64_t g = 0; g < HQ; g++) {
      int64_t keys[64];
      if (aotk__sel_reference_keys(p, token, g / G, keys) > 0) continue;
      for (int64_t d = 0; d < DQK; d++) q[(token * HQ + g) * DQK + d] = 10.0 * random_normal(&generator);
      for (int64_t d = 0; d < DV; d++) dout[(token * HQ + g) * DV + d] = 10.0 * random_normal(&generator);
    }
  }
  b.p.q = q;
  b.p.dout = dout;
  run_reference(&b);
  const int64_t nk = a.total_k * HKV * DQK, nv = a.total_k * HKV * DV;
  CHECK_MSG(bit_differences(a.dk, b.dk, nk, sizeof(double)) == 0, "an empty row's q or dout changed dk");
  CHECK_MSG(bit_differences(a.dv, b.dv, nv, sizeof(double)) == 0, "an empty row's q or dout changed dv");
  free(q);
  free(dout);
  problem_destroy(&b);
  problem_destroy(&a);
}

/* A row whose only block is b, listed once or twice: twice doubles every weight, so out and the
 * gradients are unchanged and lse grows by log 2. */
static void test_duplicate_counts_twice(void) {
  random_generator generator = random_for_case(500);
  const int64_t lengths[][2] = {{20, 40}};
  test_problem a, b;
  problem_create(&a, lengths, 1, 2, 1, 8, 8, 8, 3, &generator);
  for (int64_t token = 0; token < a.total_q; token++) {
    aotk__sel_reference_token where = aotk__sel_reference_locate(&a.p, token);
    int32_t block = (int32_t)random_int(&generator, 0, where.position / 8);
    int32_t *row = a.idx + token * 3;
    row[0] = block;
    row[1] = -1;
    row[2] = -1;
  }
  run_reference(&a);
  problem_share_inputs(&b, &a);
  for (int64_t token = 0; token < a.total_q; token++) b.idx[token * 3 + 2] = b.idx[token * 3];
  run_reference(&b);
  double worst_lse = 0.0;
  for (int64_t i = 0; i < a.total_q * 2; i++) {
    double e = fabs(b.lse[i] - (a.lse[i] + log(2.0)));
    worst_lse = e > worst_lse ? e : worst_lse;
  }
  CHECK_MSG(worst_lse < 1e-12, "lse of a block listed twice is off log 2 by %.3g", worst_lse);
  const aotk__sel_reference_problem *p = &a.p;
  CHECK(relative_difference(b.out, a.out, a.total_q * 2 * p->head_dim_v) < 1e-12);
  CHECK(relative_difference(b.dq, a.dq, a.total_q * 2 * p->head_dim_qk) < 1e-12);
  CHECK(relative_difference(b.dk, a.dk, a.total_k * p->head_dim_qk) < 1e-12);
  CHECK(relative_difference(b.dv, a.dv, a.total_k * p->head_dim_v) < 1e-12);
  /* and every selected key counted twice */
  int64_t wrong = 0;
  for (int64_t key = 0; key < a.total_k; key++) wrong += b.hits[key] != 2 * a.hits[key];
  CHECK_MSG(wrong == 0, "%lld keys not counted twice", (long long)wrong);
  problem_destroy(&b);
  problem_destroy(&a);
}

/* ---- (e) the backward against finite differences ------------------------------------------- */

/* L = sum(dout * out) of the float64 forward. */
static double loss(const test_problem *t, double *out, double *lse) {
  aotk__sel_reference_fwd_f64(&t->p, out, lse);
  double sum = 0.0;
  const int64_t n = t->total_q * t->p.heads_q * t->p.head_dim_v;
  for (int64_t i = 0; i < n; i++) sum += t->dout[i] * out[i];
  return sum;
}

static void test_finite_differences(void) {
  static const int64_t tiny[][2] = {{5, 7}, {0, 2}, {3, 3}, {4, 2}};
  for (int c = 0; c < 3; c++) {
    random_generator generator = random_for_case(600 + (uint64_t)c);
    test_problem t;
    problem_create(&t, tiny, 4, c == 2 ? 1 : 4, c == 2 ? 1 : 2, 4, 3, c == 0 ? 2 : 3, 4, &generator);
    select_random(&t, c == 1, c > 0, &generator);
    t.p.softmax_scale = 0.7;
    run_reference(&t);
    const aotk__sel_reference_problem *p = &t.p;
    double *out = checked_calloc(t.total_q * p->heads_q * p->head_dim_v, sizeof(double));
    double *lse = checked_calloc(t.total_q * p->heads_q, sizeof(double));
    double *inputs[3] = {t.q, t.k, t.v};
    const double *gradients[3] = {t.dq, t.dk, t.dv};
    const int64_t counts[3] = {t.total_q * p->heads_q * p->head_dim_qk, t.total_k * p->heads_kv * p->head_dim_qk,
                               t.total_k * p->heads_kv * p->head_dim_v};
    static const char *const names[3] = {"dq", "dk", "dv"};
    const double step = 1e-5;
    for (int i = 0; i < 3; i++) {
      double worst = 0.0, largest = 0.0;
      for (int64_t e = 0; e < counts[i]; e++) {
        const double saved = inputs[i][e];
        inputs[i][e] = saved + step;
        double plus = loss(&t, out, lse);
        inputs[i][e] = saved - step;
        double minus = loss(&t, out, lse);
        inputs[i][e] = saved;
        double numeric = (plus - minus) / (2.0 * step);
        double error = fabs(numeric - gradients[i][e]);
        worst = error > worst ? error : worst;
        largest = fabs(gradients[i][e]) > largest ? fabs(gradients[i][e]) : largest;
      }
      CHECK_MSG(worst < 1e-7 * (largest > 1.0 ? largest : 1.0), "case %d: %s off central differences by %.3g (largest %.3g)",
                c, names[i], worst, largest);
      CHECK_MSG(largest > 0.0, "case %d: %s is all zero: the case selects nothing", c, names[i]);
    }
    free(out);
    free(lse);
    problem_destroy(&t);
  }
}

/* ---- the emulation ---------------------------------------------------------------------------- */

/* Its error against float64: in float32 only float32's rounding; in bf16 and fp16 larger, and still
 * a small fraction of the values (it is the yardstick of the GPU tests' bound, so it must neither
 * vanish nor blow up). */
static void test_emulation_error(void) {
  random_generator generator = random_for_case(700);
  test_problem t;
  problem_create(&t, varlen_mixed, 7, 8, 2, 32, 16, 4, 6, &generator);
  select_random(&t, 1, 0, &generator);
  run_reference(&t);
  const aotk__sel_reference_problem *p = &t.p;
  const int64_t n[5] = {t.total_q * p->heads_q * p->head_dim_v, t.total_q * p->heads_q,
                        t.total_q * p->heads_q * p->head_dim_qk, t.total_k * p->heads_kv * p->head_dim_qk,
                        t.total_k * p->heads_kv * p->head_dim_v};
  const double *exact[5] = {t.out, t.lse, t.dq, t.dk, t.dv};
  static const char *const names[5] = {"out", "lse", "dq", "dk", "dv"};
  static const int dtypes[3] = {AOTK_DTYPE_FLOAT32, AOTK_DTYPE_BFLOAT16, AOTK_DTYPE_FLOAT16};
  /* Bounds on max error / max(1, max |value|): float32 ~2^-24 per step, bf16 2^-8, fp16 2^-11. */
  static const double upper[3] = {1e-5, 0.03, 0.005};
  static const double lower[3] = {0.0, 1e-4, 1e-5};
  for (int k = 0; k < 3; k++) {
    float *lowp[5];
    for (int i = 0; i < 5; i++) lowp[i] = checked_calloc(n[i], sizeof(float));
    aotk__sel_reference_fwd_lowp(p, dtypes[k], lowp[0], lowp[1]);
    aotk__sel_reference_bwd_lowp(p, dtypes[k], lowp[0], lowp[1], lowp[2], lowp[3], lowp[4]);
    for (int i = 0; i < 5; i++) {
      double worst = 0.0, largest = 0.0;
      for (int64_t e = 0; e < n[i]; e++) {
        if (isinf(exact[i][e])) {
          CHECK_MSG((double)lowp[i][e] == exact[i][e], "%s[%lld]: %g where float64 has %g", names[i], (long long)e,
                    (double)lowp[i][e], exact[i][e]);
          continue;
        }
        double error = fabs((double)lowp[i][e] - exact[i][e]);
        worst = error > worst || isnan(error) ? error : worst;
        largest = fabs(exact[i][e]) > largest ? fabs(exact[i][e]) : largest;
      }
      double relative = worst / (largest > 1.0 ? largest : 1.0);
      /* lse is float32 in every dtype: only the upper bound applies. */
      double low = i == 1 ? 0.0 : lower[k];
      CHECK_MSG(relative <= upper[k] && relative >= low, "dtype %d: %s's error %.3g of its largest value, expected in [%g, %g]",
                dtypes[k], names[i], relative, low, upper[k]);
    }
    for (int i = 0; i < 5; i++) free(lowp[i]);
  }
  problem_destroy(&t);
}

int main(void) {
  run_seed = aotk_test_seed();
  RUN_TEST(test_key_sets);
  RUN_TEST(test_every_block_is_dense);
  RUN_TEST(test_permuted_slots);
  RUN_TEST(test_padding_equals_count);
  RUN_TEST(test_empty_rows);
  RUN_TEST(test_duplicate_counts_twice);
  RUN_TEST(test_finite_differences);
  RUN_TEST(test_emulation_error);
  return aotk_test_finish();
}
