/*
 * What the reference tests share (tests/test_reference.c, test_reference_bwd.c): a seeded generator per
 * case (aotk_test_random.h), the strided test tensors and the attention problems built from them in
 * four layouts, the feature cases, and the emulation's error-test shapes. Static functions, each test
 * file using what it needs (they compile with -Wno-unused-function).
 */
#ifndef REFERENCE_TEST_INPUTS_H
#define REFERENCE_TEST_INPUTS_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aotk.h"
#include "aotk_decode_reference.h"
#include "aotk_half.h"
#include "aotk_reference.h"
#include "aotk_test_harness.h"
#include "aotk_test_random.h"

/* Equal values with equal signs, so that -0 and +0 differ. (signbit's nonzero result is not
 * normalised: compare its truth, not its value.) */
static int same_value(double got, double expected) {
  return got == expected && !signbit(got) == !signbit(expected);
}

static float float_from_bits(uint32_t bits) {
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

static uint32_t float_bits(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits;
}

/* ---- attention references ------------------------------------------------------------------- */

enum {
  LAYOUT_CONTIGUOUS,      /* [batch, seqlen, heads, head_dim] */
  LAYOUT_HEADS_OUTER,     /* [batch, heads, seqlen, head_dim] permuted to the API's order */
  LAYOUT_SEQUENCE_OUTER,  /* [seqlen, batch, heads, head_dim] permuted */
  LAYOUT_PADDED,          /* contiguous order with gaps after each head, row and batch entry */
  LAYOUT_COUNT
};

/* One input tensor twice: dense [batch][seqlen][heads][head_dim] doubles for the brute force, and
 * floats at `strides` for the reference, with NaN in every gap so a wrong index poisons the result. */
typedef struct test_tensor {
  int64_t batch, seqlen, heads, head_dim;
  double *dense;
  float *strided;
  int64_t strides[3];
} test_tensor;

static int test_tensor_create(test_tensor *t, random_generator *generator, int64_t batch, int64_t seqlen,
                              int64_t heads, int64_t head_dim, int layout, int dtype) {
  t->batch = batch;
  t->seqlen = seqlen;
  t->heads = heads;
  t->head_dim = head_dim;
  switch (layout) {
    case LAYOUT_HEADS_OUTER:
      t->strides[2] = seqlen * head_dim;
      t->strides[1] = head_dim;
      t->strides[0] = heads * seqlen * head_dim;
      break;
    case LAYOUT_SEQUENCE_OUTER:
      t->strides[2] = head_dim;
      t->strides[0] = heads * head_dim;
      t->strides[1] = batch * heads * head_dim;
      break;
    case LAYOUT_PADDED:
      t->strides[2] = head_dim + random_int(generator, 1, 3);
      t->strides[1] = heads * t->strides[2] + random_int(generator, 0, 5);
      t->strides[0] = seqlen * t->strides[1] + random_int(generator, 0, 7);
      break;
    default:
      t->strides[2] = head_dim;
      t->strides[1] = heads * head_dim;
      t->strides[0] = seqlen * heads * head_dim;
      break;
  }
  int64_t span = (batch - 1) * t->strides[0] + (seqlen - 1) * t->strides[1] + (heads - 1) * t->strides[2] + head_dim;
  int64_t dense_count = batch * seqlen * heads * head_dim;
  t->dense = malloc((size_t)dense_count * sizeof *t->dense);
  t->strided = malloc((size_t)span * sizeof *t->strided);
  if (t->dense == NULL || t->strided == NULL) return 0;
  for (int64_t i = 0; i < span; i++) t->strided[i] = NAN;
  int64_t dense_index = 0;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t s = 0; s < seqlen; s++)
      for (int64_t h = 0; h < heads; h++)
        for (int64_t d = 0; d < head_dim; d++) {
          float value = aotk__round_to_dtype((float)random_normal(generator), dtype);
          t->dense[dense_index++] = value;
          t->strided[b * t->strides[0] + s * t->strides[1] + h * t->strides[2] + d] = value;
        }
  return 1;
}

static void test_tensor_destroy(test_tensor *t) {
  free(t->dense);
  free(t->strided);
}

static double dense_at(const test_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d) {
  return t->dense[((b * t->seqlen + s) * t->heads + h) * t->head_dim + d];
}

/* The features a problem turns on (the reference problem's fields of the same names), each off when
 * zero. The arrays they need (ALiBi slopes, sinks, the keep mask) are drawn with the inputs. */
typedef struct feature_set {
  int64_t head_dim_v; /* 0: head_dim */
  int top_left;
  int has_window;
  int64_t window_left, window_right;
  double softcap;
  int alibi, sinks, dropout;
  double dropout_p;
} feature_set;

enum {
  FEATURE_TOP_LEFT = 1u << 0,
  FEATURE_WINDOW = 1u << 1,
  FEATURE_SOFTCAP = 1u << 2,
  FEATURE_ALIBI = 1u << 3,
  FEATURE_SINKS = 1u << 4,
  FEATURE_DROPOUT = 1u << 5,
  FEATURE_HEAD_DIM_V = 1u << 6,
  FEATURE_COUNT = 7,
  FEATURE_ALL = (1u << FEATURE_COUNT) - 1u,
};

/* One window side for sequences of up to `longest` rows: mostly narrow (the mask's edges are where
 * mistakes show), sometimes unbounded, sometimes wider than the sequence. */
static int64_t random_window_side(random_generator *generator, int64_t longest) {
  switch (random_int(generator, 0, 3)) {
    case 0: return -1;
    case 1: return random_int(generator, longest, 2 * longest);
    default: return random_int(generator, 0, 3);
  }
}

/* Random values for the features in `bits`, for sequences of up to `longest` rows and q/k rows of
 * head_dim values. */
static feature_set random_features(random_generator *generator, unsigned bits, int64_t longest, int64_t head_dim) {
  feature_set f;
  memset(&f, 0, sizeof f);
  f.top_left = (bits & FEATURE_TOP_LEFT) != 0;
  if (bits & FEATURE_WINDOW) {
    f.has_window = 1;
    f.window_left = random_window_side(generator, longest);
    f.window_right = random_window_side(generator, longest);
  }
  if (bits & FEATURE_SOFTCAP) f.softcap = 0.5 + 3.0 * random_uniform(generator);
  f.alibi = (bits & FEATURE_ALIBI) != 0;
  f.sinks = (bits & FEATURE_SINKS) != 0;
  if (bits & FEATURE_DROPOUT) {
    f.dropout = 1;
    f.dropout_p = 0.1 + 0.5 * random_uniform(generator);
  }
  if (bits & FEATURE_HEAD_DIM_V) {
    f.head_dim_v = random_int(generator, 1, 2 * head_dim);
    if (f.head_dim_v == head_dim) f.head_dim_v += 1;
  }
  return f;
}

static void describe_features(const feature_set *f, char *text, size_t text_bytes) {
  snprintf(text, text_bytes, "top_left%d window%d(%lld,%lld) softcap %.3g alibi%d sinks%d dropout%d(%.3g) dv%lld",
           f->top_left, f->has_window, (long long)f->window_left, (long long)f->window_right, f->softcap, f->alibi,
           f->sinks, f->dropout, f->dropout_p, (long long)f->head_dim_v);
}

/* The feature cases of the tests that go through the features one by one: -1 none, 0 ..
 * FEATURE_COUNT - 1 that FEATURE_ bit alone, FEATURE_COUNT all together. */
enum { FEATURE_CASE_NONE = -1, FEATURE_CASE_ALL = FEATURE_COUNT };

static unsigned feature_case_bits(int feature_case) {
  if (feature_case == FEATURE_CASE_NONE) return 0;
  return feature_case == FEATURE_CASE_ALL ? FEATURE_ALL : 1u << feature_case;
}

static const char *feature_case_name(int feature_case) {
  static const char *const names[FEATURE_COUNT] = {"top_left", "window", "softcap", "alibi", "sinks", "dropout",
                                                   "head_dim_v"};
  if (feature_case == FEATURE_CASE_NONE) return "plain";
  return feature_case == FEATURE_CASE_ALL ? "all" : names[feature_case];
}

typedef struct attention_inputs {
  test_tensor q, k, v;
  aotk__attn_reference_problem problem;
  int64_t batch;
  float *alibi_slopes, *sinks; /* [heads_q] each, or NULL */
  uint8_t *keep;               /* at problem.keep_strides, every gap random too; or NULL */
  uint8_t *keep_dense;         /* [batch][heads_q][seqlen_q][seqlen_k], for the brute force */
} attention_inputs;

/* A problem with random inputs of `dtype` values in random layouts, with the features of `features`
 * (NULL: none). Returns 0 if memory ran out (the inputs can still be destroyed). */
static int attention_inputs_create(attention_inputs *inputs, random_generator *generator, int64_t batch,
                                   int64_t seqlen_q, int64_t seqlen_k, int64_t heads_kv, int64_t heads_per_kv_head,
                                   int64_t head_dim, int causal, const feature_set *features, int dtype) {
  static const feature_set no_features;
  if (features == NULL) features = &no_features;
  memset(inputs, 0, sizeof *inputs);
  int64_t heads_q = heads_kv * heads_per_kv_head;
  int64_t head_dim_v = features->head_dim_v > 0 ? features->head_dim_v : head_dim;
  int ok = test_tensor_create(&inputs->q, generator, batch, seqlen_q, heads_q, head_dim,
                              (int)random_int(generator, 0, LAYOUT_COUNT - 1), dtype);
  ok = ok && test_tensor_create(&inputs->k, generator, batch, seqlen_k, heads_kv, head_dim,
                                (int)random_int(generator, 0, LAYOUT_COUNT - 1), dtype);
  ok = ok && test_tensor_create(&inputs->v, generator, batch, seqlen_k, heads_kv, head_dim_v,
                                (int)random_int(generator, 0, LAYOUT_COUNT - 1), dtype);
  aotk__attn_reference_problem *p = &inputs->problem;
  p->seqlen_q = seqlen_q;
  p->seqlen_k = seqlen_k;
  p->heads_q = heads_q;
  p->heads_kv = heads_kv;
  p->head_dim = head_dim;
  p->q = inputs->q.strided;
  p->k = inputs->k.strided;
  p->v = inputs->v.strided;
  memcpy(p->q_strides, inputs->q.strides, sizeof p->q_strides);
  memcpy(p->k_strides, inputs->k.strides, sizeof p->k_strides);
  memcpy(p->v_strides, inputs->v.strides, sizeof p->v_strides);
  p->softmax_scale = 1.0 / sqrt((double)head_dim);
  p->causal = causal;
  inputs->batch = batch;

  p->head_dim_v = features->head_dim_v;
  p->top_left = features->top_left;
  p->has_window = features->has_window;
  p->window_left = features->window_left;
  p->window_right = features->window_right;
  p->softcap = features->softcap;
  if (ok && features->alibi) {
    /* ALiBi's slopes are 2^-1 .. 2^-8 for 8 heads; a similar range, not only powers of two. */
    ok = (inputs->alibi_slopes = malloc((size_t)heads_q * sizeof *inputs->alibi_slopes)) != NULL;
    for (int64_t h = 0; ok && h < heads_q; h++)
      inputs->alibi_slopes[h] = (float)(0.02 + 0.6 * random_uniform(generator));
    p->alibi_slopes = inputs->alibi_slopes;
  }
  if (ok && features->sinks) {
    /* bf16 values, so that the finite-difference steps taken on them are exact. */
    ok = (inputs->sinks = malloc((size_t)heads_q * sizeof *inputs->sinks)) != NULL;
    for (int64_t h = 0; ok && h < heads_q; h++)
      inputs->sinks[h] = aotk__round_to_dtype((float)(1.5 * random_normal(generator)), AOTK_DTYPE_BFLOAT16);
    p->sinks = inputs->sinks;
  }
  if (ok && features->dropout) {
    p->dropout_p = features->dropout_p;
    p->keep_strides[2] = seqlen_k + random_int(generator, 0, 3);
    p->keep_strides[1] = seqlen_q * p->keep_strides[2] + random_int(generator, 0, 5);
    p->keep_strides[0] = heads_q * p->keep_strides[1] + random_int(generator, 0, 7);
    int64_t span = batch * p->keep_strides[0];
    inputs->keep = malloc((size_t)span);
    inputs->keep_dense = malloc((size_t)(batch * heads_q * seqlen_q * seqlen_k));
    ok = inputs->keep != NULL && inputs->keep_dense != NULL;
    for (int64_t i = 0; ok && i < span; i++) inputs->keep[i] = (uint8_t)(random_u64(generator) & 1u);
    int64_t dense_index = 0;
    for (int64_t b = 0; ok && b < batch; b++)
      for (int64_t h = 0; h < heads_q; h++)
        for (int64_t i = 0; i < seqlen_q; i++)
          for (int64_t j = 0; j < seqlen_k; j++) {
            uint8_t kept = random_uniform(generator) >= features->dropout_p;
            inputs->keep_dense[dense_index++] = kept;
            inputs->keep[b * p->keep_strides[0] + h * p->keep_strides[1] + i * p->keep_strides[2] + j] = kept;
          }
    p->keep = inputs->keep;
  }
  return ok;
}

static void attention_inputs_destroy(attention_inputs *inputs) {
  test_tensor_destroy(&inputs->q);
  test_tensor_destroy(&inputs->k);
  test_tensor_destroy(&inputs->v);
  free(inputs->alibi_slopes);
  free(inputs->sinks);
  free(inputs->keep);
  free(inputs->keep_dense);
}

static int64_t value_dim(const aotk__attn_reference_problem *p) {
  return p->head_dim_v > 0 ? p->head_dim_v : p->head_dim;
}

/* Whether row i sees key j, pair by pair from include/aotk.h's definition (the reference instead
 * solves the masks for a range of keys, or of rows). */
static int brute_force_visible(const aotk__attn_reference_problem *p, int64_t i, int64_t j) {
  int64_t diag = p->top_left ? 0 : p->seqlen_k - p->seqlen_q;
  if (p->causal && j > i + diag) return 0;
  if (p->has_window && p->window_left != -1 && j < i + diag - p->window_left) return 0;
  if (p->has_window && p->window_right != -1 && j > i + diag + p->window_right) return 0;
  return 1;
}

static int64_t brute_force_visible_keys(const aotk__attn_reference_problem *p, int64_t i) {
  int64_t count = 0;
  for (int64_t j = 0; j < p->seqlen_k; j++) count += brute_force_visible(p, i, j);
  return count;
}

/* Counts across the cases of one test, to check that the interesting situations occurred. */
typedef struct case_tally {
  int64_t empty_rows;           /* rows that saw no key */
  int64_t empty_rows_with_sink; /* of which with a sink */
  double worst;                 /* finite-difference tests: the worst error as a fraction of the tolerance */
} case_tally;

/* The shape of the emulation's error tests: one batch entry, GQA 2x2. The plain case keeps the size
 * these tests had before the features (64 keys, head_dim 64; with causal 80 queries, so that the first
 * 16 rows see no key). Each feature case runs a quarter of it (32 keys, head_dim 32), so that the nine
 * cases stay cheap, and never a square: with causal 40 queries (8 rows that see no key, bottom-right,
 * without a window), without it 24, so that diag = 8 moves ALiBi's distances (under causal they only
 * shift a row's scores by a constant, which the softmax ignores). */
typedef struct lowp_test_shape {
  int64_t seqlen_q, seqlen_k, head_dim;
} lowp_test_shape;

static lowp_test_shape lowp_test_shape_of(int feature_case, int causal) {
  if (feature_case == FEATURE_CASE_NONE) return (lowp_test_shape){causal ? 80 : 64, 64, 64};
  return (lowp_test_shape){causal ? 40 : 24, 32, 32};
}

/* A feature case with values that suit lowp_test_shape_of's sizes: a window that leaves every row
 * several keys, a cap the scores reach, head_dim_v other than head_dim. */
static feature_set lowp_test_features(int feature_case) {
  unsigned bits = feature_case_bits(feature_case);
  feature_set f;
  memset(&f, 0, sizeof f);
  f.top_left = (bits & FEATURE_TOP_LEFT) != 0;
  if (bits & FEATURE_WINDOW) {
    f.has_window = 1;
    f.window_left = 12;
    f.window_right = 4;
  }
  if (bits & FEATURE_SOFTCAP) f.softcap = 1.5;
  f.alibi = (bits & FEATURE_ALIBI) != 0;
  f.sinks = (bits & FEATURE_SINKS) != 0;
  if (bits & FEATURE_DROPOUT) {
    f.dropout = 1;
    f.dropout_p = 0.3;
  }
  if (bits & FEATURE_HEAD_DIM_V) f.head_dim_v = 48;
  return f;
}

#endif /* REFERENCE_TEST_INPUTS_H */
