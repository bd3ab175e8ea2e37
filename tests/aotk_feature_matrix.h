/*
 * The feature matrix of the dense attention GPU tests, described once for the forward
 * (test_attn_fwd_gpu) and the backward (test_attn_bwd_gpu): each feature of aotk_attn_params alone over
 * both dtypes, a few head dims, causal and not, GQA, odd lengths and the four layouts, then all of
 * them together, then the EXTRAS kernels through the sm_80 PTX.
 *
 * The backward runs the forward's cases for the gradients (dk and dv summed over a GQA group, dsinks
 * compared whenever there are sinks, the dropout mask regenerated in the backward's kernels), with its
 * gradients' strides unlike its inputs' in half of them (mix_layouts), shorter sequences where its host
 * reference would cost minutes (300 keys where the forward takes 1000), and a few cases of its own or
 * none: where the two differ, the line says which runs what. Sizes stay at or below 1000 x 1000 so that
 * the host references of the ~100 cases of each cost seconds.
 *
 * aotk_feature_matrix walks the description and hands each case, with its index, to the suite's runner,
 * which builds its own case (fwd_case, bwd_case) and runs it. The index picks layouts, GQA groups and
 * mixes (k below), and dropout's RNG offsets come from the suite's random state in a fixed order, so a
 * suite's cases are the same from run to run for a seed.
 */
#ifndef AOTK_FEATURE_MATRIX_H
#define AOTK_FEATURE_MATRIX_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "aotk.h"
#include "aotk_check.h"
#include "aotk_gpu_test.h"
#include "aotk_test_harness.h"

typedef enum { AOTK_MATRIX_FWD, AOTK_MATRIX_BWD } aotk_matrix_op;

/* One case of the matrix. mix_layouts and repeats are the backward's (0 for the forward). */
typedef struct aotk_feature_spec {
  aotk_dtype dtype;
  int64_t head_dim; /* head_dim_qk; features.head_dim_v when it differs */
  int causal;
  int64_t seqlen_q, seqlen_k, batch; /* 0, 0, 0 on the varlen layout (features.num_seqs) */
  int64_t heads_q, heads_kv;
  aotk__check_layout layout;
  int mix_layouts;
  float softmax_scale; /* 0: the default */
  int repeats;
  bool ptx; /* through the sm_80 PTX (the image policy is set around such cases) */
  aotk__check_features features;
} aotk_feature_spec;

typedef void (*aotk_feature_runner)(const aotk_feature_spec *spec, int index);

/* Varlen sequence sets, each with empty sequences of some kind (no rows, no keys, or neither) and
 * lengths on and around the block sizes. */
static const int64_t aotk_varlen_mixed[][2] = {{17, 17}, {0, 31}, {127, 0}, {1, 1}, {1000, 1000}, {5, 300}};
static const int64_t aotk_varlen_short_rows[][2] = {{1, 1000}, {1, 127}, {1, 0}, {64, 64}, {65, 63}, {128, 129}};
static const int64_t aotk_varlen_empty[][2] = {{300, 0}, {0, 300}, {0, 0}, {257, 255}};

static void set_varlen(aotk__check_features *f, int which) {
  switch (which % 3) {
    case 0:
      aotk_gpu_test_set_seqlens(f, aotk_varlen_mixed, 6);
      break;
    case 1:
      aotk_gpu_test_set_seqlens(f, aotk_varlen_short_rows, 6);
      break;
    default:
      aotk_gpu_test_set_seqlens(f, aotk_varlen_empty, 4);
      break;
  }
}

/* Dropout's RNG offsets: below 2^62, so that the check's offset + 1 cannot overflow; for odd indices
 * past 2^32, where the offset's high word enters the Philox key. */
static int64_t random_offset(uint64_t *state, int index) {
  uint64_t r = aotk_gpu_test_random(state);
  return (int64_t)(index % 2 ? r >> 2 : r >> 34);
}

typedef struct aotk_feature_walk {
  bool bwd;
  int *index;
  aotk_feature_runner run;
} aotk_feature_walk;

static void feature_emit(const aotk_feature_walk *w, aotk_dtype dtype, int64_t head_dim, int causal, int64_t seqlen_q,
                         int64_t seqlen_k, int64_t batch, int64_t heads_q, int64_t heads_kv, aotk__check_layout layout,
                         int mix_layouts, float softmax_scale, const aotk__check_features *f, int repeats, bool ptx) {
  const aotk_feature_spec s = {dtype, head_dim, causal, seqlen_q, seqlen_k, batch, heads_q, heads_kv, layout,
                               w->bwd ? mix_layouts : 0, softmax_scale, w->bwd ? repeats : 0, ptx, *f};
  w->run(&s, (*w->index)++);
}

static aotk__check_layout layout_of(int k) { return (aotk__check_layout)(k % AOTK__LAYOUT_COUNT); }

static void aotk_feature_matrix(aotk_matrix_op op, int *index, uint64_t *state, aotk_feature_runner run) {
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_BFLOAT16, AOTK_DTYPE_FLOAT16};
  static const int64_t groups[] = {1, 4, 8};
  const aotk_feature_walk walk = {op == AOTK_MATRIX_BWD, index, run}, *w = &walk;
  const bool bwd = walk.bwd;
  aotk__check_features f;

  /* Head dims: every multiple of 8 runs in the smallest compiled pair that holds it; head_dim_v may
   * differ from head_dim_qk either way. */
  static const int64_t dims[][2] = {{8, 8},     {40, 40},   {72, 72},   {96, 96},  {136, 136},
                                    {192, 128}, {256, 256}, {256, 128}, {64, 128}, {128, 40}};
  static const int64_t fwd_shapes[][2] = {{1, 17}, {17, 127}, {127, 1000}, {1000, 1000}, {1000, 127}};
  static const int64_t bwd_shapes[][2] = {{1, 17}, {17, 127}, {127, 1000}, {1000, 127}, {300, 300}};
  for (int t = 0; t < 2; t++)
    for (int i = 0; i < 10; i++) {
      memset(&f, 0, sizeof f);
      f.head_dim_v = dims[i][1];
      const int k = *index;
      const int64_t *shape = (bwd ? bwd_shapes : fwd_shapes)[(i + t) % 5];
      const bool large = shape[0] * shape[1] > (bwd ? 50000 : 100000);
      const int64_t heads_kv = large ? 1 : 1 + k % 2;
      feature_emit(w, dtypes[t], dims[i][0], (i + t) % 2, shape[0], shape[1], large ? 1 : 1 + k % 3,
                   heads_kv * groups[k % 3], heads_kv, layout_of(k), k / 4 % 2, 0.0f, &f, 0, false);
    }

  /* Variable length, with sequences of no query rows (the backward: dk and dv of its keys are 0), no
   * keys (dq of its rows is 0), or neither; causal is bottom-right per sequence (each its own diagonal). */
  static const int64_t varlen_dims[] = {64, 128, 96};
  for (int t = 0; t < 2; t++)
    for (int causal = 0; causal < 2; causal++)
      for (int h = 0; h < 2; h++) {
        memset(&f, 0, sizeof f);
        const int k = *index;
        set_varlen(&f, t * 4 + causal * 2 + h);
        feature_emit(w, dtypes[t], varlen_dims[(t + h) % 3], causal, 0, 0, 0, 2 * groups[k % 3], 2, layout_of(k),
                     k % 2, 0.0f, &f, 0, false);
      }
  /* max_seqlen above every sequence (its grid covers more rows than any has), top-left causal. */
  memset(&f, 0, sizeof f);
  set_varlen(&f, 1);
  f.max_seqlen_slack = 37;
  f.top_left = 1;
  feature_emit(w, AOTK_DTYPE_BFLOAT16, 96, 1, 0, 0, 0, 4, 4, AOTK__LAYOUT_PADDED, 1, 0.0f, &f, 0, false);
  if (!bwd) { /* the forward: one sequence, the varlen layout of a plain batch of 1 */
    static const int64_t single[][2] = {{1000, 127}};
    memset(&f, 0, sizeof f);
    aotk_gpu_test_set_seqlens(&f, single, 1);
    feature_emit(w, AOTK_DTYPE_FLOAT16, 128, 1, 0, 0, 0, 8, 1, AOTK__LAYOUT_PERMUTED, 0, 0.0f, &f, 0, false);
  }

  /* Sliding windows of 0, 1, 63, 64, 65 and 1000 keys (around the 64-key blocks, and wider than the
   * keys), with seqlen_q != seqlen_k both ways and both alignments: left-only under causal, both sides,
   * right-only, and causal with an explicit right bound of 0 (more rows than keys, bottom-right: the
   * first rows see no key). The backward's dK/dV pass walks the window's query range (query_ranges in
   * kernels/attn_common.py). */
  static const int32_t windows[] = {0, 1, 63, 64, 65, 1000};
  for (int win = 0; win < 6; win++)
    for (int shape = 0; shape < 4; shape++) {
      memset(&f, 0, sizeof f);
      f.window = 1;
      int causal = 0;
      int64_t seqlen_q = 127, seqlen_k = 1000;
      switch (shape) {
        case 0:
          causal = 1;
          f.window_left = windows[win];
          f.window_right = -1;
          break;
        case 1:
          f.window_left = windows[win];
          f.window_right = windows[win];
          f.top_left = 1;
          seqlen_q = 1000;
          seqlen_k = 127;
          break;
        case 2:
          f.window_left = -1;
          f.window_right = windows[win];
          f.top_left = 1;
          break;
        default:
          causal = 1;
          f.window_left = windows[win];
          f.window_right = 0;
          seqlen_q = 1000;
          seqlen_k = 127;
          break;
      }
      const int k = *index;
      feature_emit(w, dtypes[(win + shape) % 2], (win + shape) % 3 == 0 ? 128 : 64, causal, seqlen_q, seqlen_k,
                   1 + k % 2, groups[k % 3], 1, layout_of(k), k / 4 % 2, 0.0f, &f, 0, false);
    }
  if (!bwd) { /* the forward: a local-attention model's shape, causal, equal lengths, window 255 */
    for (int t = 0; t < 2; t++) {
      memset(&f, 0, sizeof f);
      f.window = 1;
      f.window_left = 255;
      f.window_right = -1;
      feature_emit(w, dtypes[t], 128, 1, 1000, 1000, 2, 8, 2, AOTK__LAYOUT_CONTIGUOUS, 0, 0.0f, &f, 0, false);
    }
  }

  /* Softcap: 5 with scale 0.3 at d=128 (scores of standard deviation ~3.4, well into tanh's bend, and
   * into the backward's 1 - tanh^2) and Gemma-2's 30 with the default scale. */
  for (int t = 0; t < 2; t++)
    for (int causal = 0; causal < 2; causal++)
      for (int which = 0; which < 2; which++) {
        memset(&f, 0, sizeof f);
        f.softcap = which ? 30.0f : 5.0f;
        const int k = *index;
        const int64_t seqlen_q = which ? (bwd ? 300 : 1000) : 127, seqlen_k = which && bwd ? 300 : 1000;
        feature_emit(w, dtypes[t], which ? 64 : 128, causal, seqlen_q, seqlen_k, 1 + k % 2, 4, 4 / groups[k % 2],
                     layout_of(k), k % 2, which ? 0.0f : 0.3f, &f, 0, false);
      }

  /* ALiBi, slopes per head [heads_q] and per batch entry [batch, heads_q] (no gradient of its own: a
   * constant shift of the scores). */
  for (int t = 0; t < 2; t++)
    for (int kind = 1; kind <= 2; kind++)
      for (int causal = 0; causal < 2; causal++) {
        memset(&f, 0, sizeof f);
        f.alibi = kind;
        const int k = *index;
        const int64_t long_side = bwd ? 300 : 1000;
        feature_emit(w, dtypes[t], kind == 1 ? 64 : 128, causal, causal ? 17 : long_side, causal ? 127 : long_side,
                     kind == 2 ? 3 : 1, 4, bwd || causal ? 2 : 1, layout_of(k), k % 2, 0.0f, &f, 0, false);
      }
  if (!bwd) {
    /* The forward: ALiBi on the warp-specialized kernel at head dim 64, whose distances come from fp32
     * column offsets (kernels/attn_fwd_hopper.py, ALIBI_FP32): the packed layout, both slope shapes, more
     * rows than one tile and keys far from the diagonal. */
    for (int kind = 1; kind <= 2; kind++)
      for (int causal = 0; causal < 2; causal++) {
        memset(&f, 0, sizeof f);
        f.alibi = kind;
        feature_emit(w, AOTK_DTYPE_BFLOAT16, 64, causal, 1000, causal ? 1000 : 1531, kind == 2 ? 3 : 1, 4, 2,
                     AOTK__LAYOUT_CONTIGUOUS, 0, 0.0f, &f, 0, false);
      }
  }
  memset(&f, 0, sizeof f);
  f.alibi = 2;
  set_varlen(&f, bwd ? 2 : 0);
  feature_emit(w, AOTK_DTYPE_FLOAT16, 64, 1, 0, 0, 0, 4, 2, AOTK__LAYOUT_OFFSET, 1, 0.0f, &f, 0, false);

  /* Sinks: with causal and more rows than keys (bottom-right), the first rows see no key and get the
   * sink alone (out 0, lse = sink) and carry no gradient to it. */
  for (int t = 0; t < 2; t++)
    for (int causal = 0; causal < 2; causal++) {
      memset(&f, 0, sizeof f);
      f.sinks = 1;
      const int k = *index;
      feature_emit(w, dtypes[t], causal ? 128 : 64, causal, causal ? 1000 : 127, causal ? 127 : 1000, 2, 8, 2,
                   layout_of(k), k % 2, 0.0f, &f, 0, false);
    }
  memset(&f, 0, sizeof f);
  f.sinks = 1;
  if (bwd) { /* the backward: sinks on the varlen layout */
    set_varlen(&f, 0);
    feature_emit(w, AOTK_DTYPE_BFLOAT16, 64, 0, 0, 0, 0, 4, 1, AOTK__LAYOUT_PADDED, 1, 0.0f, &f, 0, false);
  } else { /* the forward: a top-left diagonal-only window leaves the rows past the keys empty */
    f.window = 1;
    f.top_left = 1;
    feature_emit(w, AOTK_DTYPE_BFLOAT16, 64, 0, 127, 17, 2, 4, 1, AOTK__LAYOUT_PADDED, 0, 0.0f, &f, 0, false);
  }

  /* Dropout: the forward's mask bit for bit against the host's Philox, the same bits from the same
   * state, another mask from the next offset, and the keep rate over 8e6 (and 1e6) elements; the
   * backward regenerates the mask in two differently tiled kernels. The two large ones in both dtypes,
   * the others in one each. */
  static const struct {
    float p;
    int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    int causal, top_left;
    aotk__check_layout layout;
  } dropouts[] = {
      {0.1f, 2, 4, 2, 1000, 1000, 64, 1, 0, AOTK__LAYOUT_CONTIGUOUS},
      {0.5f, 2, 4, 1, 1000, 1000, 128, 0, 0, AOTK__LAYOUT_PERMUTED}, /* the backward: batch 1, 300 x 300 */
      {0.9f, 1, 8, 1, 127, 1000, 96, 0, 0, AOTK__LAYOUT_PADDED},
      {0.01f, 3, 2, 2, 17, 127, 64, 1, 1, AOTK__LAYOUT_OFFSET},
      {0.3f, 1, 4, 4, 1, 17, 128, 0, 0, AOTK__LAYOUT_CONTIGUOUS},
      {0.7f, 2, 8, 1, 1000, 1, 64, 1, 1, AOTK__LAYOUT_PADDED},
  };
  for (int i = 0; i < 6; i++) {
    for (int t = 0; t < 2; t++) {
      if (i >= 2 && t != i % 2) continue;
      memset(&f, 0, sizeof f);
      f.dropout_p = dropouts[i].p;
      f.top_left = dropouts[i].top_left;
      f.rng_seed = (int64_t)aotk_gpu_test_random(state);
      f.rng_offset = random_offset(state, *index);
      const bool smaller = bwd && i == 1;
      feature_emit(w, dtypes[t], dropouts[i].head_dim, dropouts[i].causal, smaller ? 300 : dropouts[i].seqlen_q,
                   smaller ? 300 : dropouts[i].seqlen_k, smaller ? 1 : dropouts[i].batch, dropouts[i].heads_q,
                   dropouts[i].heads_kv, dropouts[i].layout, i % 2, 0.0f, &f, 0, false);
    }
  }
  if (!bwd) { /* the forward: dropout on the varlen layout, the mask [num_seqs, heads_q, max_seqlen_q, max_seqlen_k] */
    memset(&f, 0, sizeof f);
    set_varlen(&f, 1);
    f.dropout_p = 0.2f;
    f.rng_seed = (int64_t)aotk_gpu_test_random(state);
    f.rng_offset = random_offset(state, 1);
    feature_emit(w, AOTK_DTYPE_BFLOAT16, 64, 1, 0, 0, 0, 4, 2, AOTK__LAYOUT_CONTIGUOUS, 0, 0.0f, &f, 0, false);
  }

  /* Everything together: varlen, a window under causal, softcap, ALiBi per sequence, sinks, dropout;
   * both alignments, both dtypes, two head dims (the backward runs the first three times, for bitwise
   * determinism). Then dense, non-causal two-sided windows with the 1-d slopes and the padded head dims. */
  for (int t = 0; t < 2; t++)
    for (int align = 0; align < 2; align++) {
      memset(&f, 0, sizeof f);
      const int k = *index;
      set_varlen(&f, k);
      f.window = 1;
      f.window_left = 63;
      f.window_right = 0;
      f.top_left = align;
      f.softcap = 20.0f;
      f.alibi = 2;
      f.sinks = 1;
      f.dropout_p = 0.2f;
      f.rng_seed = (int64_t)aotk_gpu_test_random(state);
      f.rng_offset = random_offset(state, k);
      feature_emit(w, dtypes[t], (t + align) % 2 ? 128 : 64, 1, 0, 0, 0, 2 * groups[k % 3], 2, layout_of(k), 1, 0.0f,
                   &f, t == 0 && align == 0 ? 2 : 0, false);
    }
  static const int64_t combined_dims[][2] = {{192, 128}, {40, 40}};
  for (int t = 0; t < 2; t++) {
    memset(&f, 0, sizeof f);
    f.head_dim_v = combined_dims[t][1];
    f.window = 1;
    f.window_left = 65;
    f.window_right = 64;
    f.top_left = t;
    f.softcap = 10.0f;
    f.alibi = 1;
    f.sinks = 1;
    f.dropout_p = 0.15f;
    f.rng_seed = (int64_t)aotk_gpu_test_random(state);
    f.rng_offset = random_offset(state, t);
    feature_emit(w, dtypes[t], combined_dims[t][0], 0, 127, 1000, 2, 4, 2,
                 t ? AOTK__LAYOUT_PADDED : AOTK__LAYOUT_CONTIGUOUS, 1, 0.0f, &f, 0, false);
  }

  /* The EXTRAS kernels through the sm_80 PTX (what GPUs newer than sm_90 run). */
  CHECK(aotk_set_image_policy(AOTK_IMAGE_POLICY_SM80_PTX) == AOTK_OK);
  memset(&f, 0, sizeof f);
  set_varlen(&f, bwd ? 1 : 0);
  f.window = 1;
  f.window_left = 64;
  f.window_right = -1;
  f.softcap = 20.0f;
  f.alibi = 2;
  f.sinks = 1;
  f.dropout_p = 0.25f;
  f.rng_seed = (int64_t)aotk_gpu_test_random(state);
  f.rng_offset = random_offset(state, 1);
  feature_emit(w, AOTK_DTYPE_BFLOAT16, 128, 1, 0, 0, 0, 4, 2, AOTK__LAYOUT_CONTIGUOUS, 1, 0.0f, &f, 0, true);
  memset(&f, 0, sizeof f);
  f.window = 1;
  f.window_left = 63;
  f.window_right = 1;
  f.dropout_p = 0.4f;
  f.rng_seed = (int64_t)aotk_gpu_test_random(state);
  f.rng_offset = random_offset(state, 0);
  feature_emit(w, AOTK_DTYPE_FLOAT16, 96, 0, bwd ? 300 : 1000, 127, 1, 4, 1, AOTK__LAYOUT_PADDED, 0, 0.0f, &f, 0, true);
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);
}

#endif /* AOTK_FEATURE_MATRIX_H */
