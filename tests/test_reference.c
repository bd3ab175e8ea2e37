/*
 * CPU tests of the host-side numerics the GPU tests rely on: the float <-> fp16/bf16 conversions and
 * the two attention references (float64, and the same-precision emulation used for error bounds),
 * plain and with each feature of aotk_attn_params (alignment, window, softcap, ALiBi, sinks, dropout,
 * head_dim_v != head_dim).
 *
 * The float64 forward is checked against a brute force written differently on purpose: it builds
 * the whole masked score matrix of one (batch, head) from a dense copy of the inputs (so the
 * reference's stride handling is checked too), decides each pair's mask from the API's definition
 * (where the reference solves the masks for ranges), exponentiates in long double without
 * subtracting the maximum (safe because the test's scores are moderate), and normalises afterwards.
 * The float64 backward is checked against central differences of the float64 forward, dsink included.
 * Edits that must change nothing (an unbounded window, causal as a window's right bound 0, top-left on
 * a square, a huge cap, a vanishing sink, dropout that keeps everything) are checked on both
 * references' every output. The emulation's error against float64 must stay the dtype's rounding.
 *
 * The decoding reference (src/check/aotk_decode_reference.c, which aotk_self_test() and test_decode_gpu
 * share) is checked against this dense reference, request by request (bottom-right at each request's
 * L_b keys: lengths 0, 1, the capacity, clamped ones, after an append), with every feature; a paged
 * copy of the cache in shuffled pages and packed queries must give the same bits as the contiguous
 * cache; and its merge functions against each other (the merge of the partials is the attention over
 * every key).
 */
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

static uint64_t run_seed;

/* splitmix64: tiny, and good enough for test inputs. Each case seeds its own generator from the run
 * seed, so a case's inputs do not depend on which cases ran before it. */
typedef struct random_generator {
  uint64_t state;
} random_generator;

static random_generator random_for_case(uint64_t case_salt) {
  random_generator generator = {run_seed ^ (case_salt * 0x9E3779B97F4A7C15ull)};
  return generator;
}

static uint64_t random_u64(random_generator *generator) {
  uint64_t z = (generator->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1), 53 random bits. */
static double random_uniform(random_generator *generator) {
  return (double)(random_u64(generator) >> 11) * 0x1.0p-53;
}

/* Uniform in [low, high]. */
static int64_t random_int(random_generator *generator, int64_t low, int64_t high) {
  return low + (int64_t)(random_u64(generator) % (uint64_t)(high - low + 1));
}

/* N(0, 1) by Box-Muller. */
static double random_normal(random_generator *generator) {
  double u1 = 1.0 - random_uniform(generator); /* in (0, 1], so log is finite */
  double u2 = random_uniform(generator);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

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

/* ---- conversions ---------------------------------------------------------------------------- */

/* The value of a 16-bit pattern computed from the IEEE definition, independently of the decoders:
 * (-1)^sign * 2^(exponent - bias) * 1.mantissa, or 0.mantissa * 2^(1 - bias) for subnormals. */
static double half_value_by_definition(uint16_t bits, int mantissa_bits, int exponent_bias) {
  int exponent_bits = 15 - mantissa_bits;
  uint32_t mantissa = bits & ((1u << mantissa_bits) - 1u);
  uint32_t exponent = (bits >> mantissa_bits) & ((1u << exponent_bits) - 1u);
  double sign = (bits & 0x8000u) ? -1.0 : 1.0;
  if (exponent == (1u << exponent_bits) - 1u) return mantissa == 0 ? sign * INFINITY : NAN;
  if (exponent == 0) return sign * ldexp((double)mantissa, 1 - exponent_bias - mantissa_bits);
  return sign * ldexp((double)((1u << mantissa_bits) + mantissa), (int)exponent - exponent_bias - mantissa_bits);
}

static void test_bf16_every_pattern(void) {
  for (uint32_t bits = 0; bits < 0x10000u; bits++) {
    float value = aotk__bf16_to_float((uint16_t)bits);
    double expected = half_value_by_definition((uint16_t)bits, 7, 127);
    uint16_t back = aotk__float_to_bf16(value);
    if (isnan(expected)) {
      /* A NaN keeps its sign and payload and comes back quiet. */
      CHECK_MSG(isnan(value), "bf16 0x%04x decodes to %g, not NaN", bits, value);
      CHECK_MSG(back == (bits | 0x0040u), "bf16 NaN 0x%04x comes back as 0x%04x", bits, back);
      continue;
    }
    CHECK_MSG(same_value(value, expected),
              "bf16 0x%04x decodes to %a, expected %a", bits, value, expected);
    CHECK_MSG(back == bits, "bf16 0x%04x round-trips to 0x%04x", bits, back);
  }
}

static void test_fp16_every_pattern(void) {
  for (uint32_t bits = 0; bits < 0x10000u; bits++) {
    float value = aotk__fp16_to_float((uint16_t)bits);
    double expected = half_value_by_definition((uint16_t)bits, 10, 15);
    uint16_t back = aotk__float_to_fp16(value);
    if (isnan(expected)) {
      CHECK_MSG(isnan(value), "fp16 0x%04x decodes to %g, not NaN", bits, value);
      CHECK_MSG(back == (bits | 0x0200u), "fp16 NaN 0x%04x comes back as 0x%04x", bits, back);
      continue;
    }
    CHECK_MSG(same_value(value, expected),
              "fp16 0x%04x decodes to %a, expected %a", bits, value, expected);
    CHECK_MSG(back == bits, "fp16 0x%04x round-trips to 0x%04x", bits, back);
  }
}

typedef struct rounding_case {
  uint32_t float_bits;
  uint16_t expected;
  const char *what;
} rounding_case;

static void test_bf16_rounding_cases(void) {
  static const rounding_case cases[] = {
      {0x3F808000u, 0x3F80u, "1 + 2^-8: tie, 1.0 is even"},
      {0x3F818000u, 0x3F82u, "1 + 3*2^-8: tie, rounds up to the even 0x3F82"},
      {0x3F808001u, 0x3F81u, "just above the tie rounds up"},
      {0x3F807FFFu, 0x3F80u, "just below the tie rounds down"},
      {0xBF818000u, 0xBF82u, "negative tie goes to even too"},
      {0x7F7FFFFFu, 0x7F80u, "FLT_MAX overflows to infinity"},
      {0x7F7F7FFFu, 0x7F7Fu, "just below the overflow tie stays finite"},
      {0x7F7F8000u, 0x7F80u, "the overflow tie goes to the even side, infinity"},
      {0xFF800000u, 0xFF80u, "-infinity"},
      {0x80000000u, 0x8000u, "-0 keeps its sign"},
      {0x00008000u, 0x0000u, "float subnormal tie to even zero"},
      {0x00018000u, 0x0002u, "float subnormal tie to even 2"},
      {0x00008001u, 0x0001u, "float subnormal above the tie"},
      {0x007FFFFFu, 0x0080u, "largest float subnormal rounds up into the normals"},
      {0x7F800001u, 0x7FC0u, "NaN with a payload only in the low bits stays NaN, quiet"},
      {0xFF800001u, 0xFFC0u, "negative signalling NaN"},
      {0x7FC00000u, 0x7FC0u, "quiet NaN"},
      {0x7FA12345u, 0x7FE1u, "NaN keeps its top payload bits"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = aotk__float_to_bf16(float_from_bits(cases[i].float_bits));
    CHECK_MSG(got == cases[i].expected, "bf16(0x%08x) = 0x%04x, expected 0x%04x (%s)", cases[i].float_bits, got,
              cases[i].expected, cases[i].what);
  }
}

static void test_fp16_rounding_cases(void) {
  static const rounding_case cases[] = {
      {0x477FE000u, 0x7BFFu, "65504, the largest fp16"},
      {0x477FEFFFu, 0x7BFFu, "just below 65520 rounds down to 65504"},
      {0x477FF000u, 0x7C00u, "65520: tie, the even side overflows to infinity"},
      {0x49742400u, 0x7C00u, "1e6 overflows"},
      {0xC9742400u, 0xFC00u, "-1e6 overflows to -infinity"},
      {0x7F800000u, 0x7C00u, "infinity"},
      {0x3F801000u, 0x3C00u, "1 + 2^-11: tie, 1.0 is even"},
      {0x3F803000u, 0x3C02u, "1 + 3*2^-11: tie, rounds up to even"},
      {0x3F801001u, 0x3C01u, "just above the tie"},
      {0x38800000u, 0x0400u, "2^-14, the smallest normal"},
      {0x387FC000u, 0x03FFu, "2^-14 - 2^-24, the largest subnormal"},
      {0x387FE000u, 0x0400u, "2^-14 - 2^-25: tie, rounds up to the even normal"},
      {0x33800000u, 0x0001u, "2^-24, the smallest subnormal"},
      {0x33000000u, 0x0000u, "2^-25: tie, rounds to the even zero"},
      {0x33000001u, 0x0001u, "just above 2^-25 rounds up to 2^-24"},
      {0x32FFFFFFu, 0x0000u, "just below 2^-25 rounds to zero"},
      {0x33C00000u, 0x0002u, "3*2^-25: 1.5 units of 2^-24, tie to the even 2"},
      {0x34200000u, 0x0002u, "5*2^-25: 2.5 units, tie to the even 2"},
      {0x34A00000u, 0x0005u, "5*2^-24: exact"},
      {0xB3800000u, 0x8001u, "-2^-24"},
      {0x2EDBE6FFu, 0x0000u, "1e-10 underflows to zero"},
      {0x80000000u, 0x8000u, "-0 keeps its sign"},
      {0x00000001u, 0x0000u, "a float subnormal underflows"},
      {0x7F800001u, 0x7E00u, "NaN with a payload only in the low bits stays NaN, quiet"},
      {0xFF800001u, 0xFE00u, "negative signalling NaN"},
      {0x7FC02000u, 0x7E01u, "NaN keeps its top payload bits"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = aotk__float_to_fp16(float_from_bits(cases[i].float_bits));
    CHECK_MSG(got == cases[i].expected, "fp16(0x%08x) = 0x%04x, expected 0x%04x (%s)", cases[i].float_bits, got,
              cases[i].expected, cases[i].what);
  }
}

/* x rounded to a binary format with `mantissa_bits` stored bits and smallest normal exponent
 * `min_exponent`, by definition: pick the spacing of x's binade (the subnormal spacing below the
 * normals), let nearbyint round to nearest even in units of it, and overflow past `max_finite`. */
static double round_by_definition(double x, int mantissa_bits, int min_exponent, double max_finite) {
  if (x == 0.0 || isinf(x)) return x;
  int frexp_exponent;
  frexp(x, &frexp_exponent); /* |x| = m * 2^e with m in [0.5, 1): x's binade is 2^(e-1) */
  int binade = frexp_exponent - 1 < min_exponent ? min_exponent : frexp_exponent - 1;
  double spacing = ldexp(1.0, binade - mantissa_bits);
  double rounded = nearbyint(x / spacing) * spacing;
  if (fabs(rounded) > max_finite) return copysign(INFINITY, x);
  if (rounded == 0.0) return copysign(0.0, x);
  return rounded;
}

static void check_both_roundings(float x) {
  double expected_bf16 = round_by_definition(x, 7, -126, 0x1.FEp127);
  double expected_fp16 = round_by_definition(x, 10, -14, 65504.0);
  float got_bf16 = aotk__round_to_dtype(x, AOTK_DTYPE_BFLOAT16);
  float got_fp16 = aotk__round_to_dtype(x, AOTK_DTYPE_FLOAT16);
  CHECK_MSG(same_value(got_bf16, expected_bf16),
            "bf16 rounding of %a (0x%08x) gives %a, expected %a", x, float_bits(x), got_bf16, expected_bf16);
  CHECK_MSG(same_value(got_fp16, expected_fp16),
            "fp16 rounding of %a (0x%08x) gives %a, expected %a", x, float_bits(x), got_fp16, expected_fp16);
}

static void test_rounding_matches_definition_on_random_floats(void) {
  random_generator generator = random_for_case(1);
  for (int i = 0; i < 400000; i++) {
    uint32_t bits = (uint32_t)random_u64(&generator);
    switch (i % 4) {
      case 0: /* any finite float */
        break;
      case 1: /* exponents around fp16's range: underflow to zero, subnormals, normals, overflow */
        bits = (bits & 0x807FFFFFu) | ((uint32_t)random_int(&generator, 127 - 27, 127 + 17) << 23);
        break;
      case 2: /* exact fp16 ties: the 13 dropped bits are exactly one half */
        bits = (bits & 0x807FE000u) | 0x1000u | ((uint32_t)random_int(&generator, 127 - 14, 127 + 15) << 23);
        break;
      case 3: /* exact bf16 ties */
        bits = (bits & 0xFFFF0000u) | 0x8000u;
        break;
    }
    float x = float_from_bits(bits);
    if (isnan(x) || isinf(x)) continue;
    check_both_roundings(x);
  }
}

static void test_round_to_dtype(void) {
  random_generator generator = random_for_case(2);
  for (int i = 0; i < 1000; i++) {
    float x = float_from_bits((uint32_t)random_u64(&generator));
    if (isnan(x)) continue;
    CHECK_MSG(float_bits(aotk__round_to_dtype(x, AOTK_DTYPE_FLOAT32)) == float_bits(x),
              "float32 rounding changed %a", x);
  }
  CHECK(aotk__round_to_dtype(1.0f + 0x1.0p-9f, AOTK_DTYPE_BFLOAT16) == 1.0f);
  CHECK(aotk__round_to_dtype(1.0f + 0x1.0p-9f, AOTK_DTYPE_FLOAT16) == 1.0f + 0x1.0p-9f);
  CHECK(isnan(aotk__round_to_dtype(1.0f, 0)));
  CHECK(isnan(aotk__round_to_dtype(1.0f, 4)));
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

/* Whole-matrix attention of one (batch, query head) in long double, from the dense copies. Writes
 * out[seqlen_q][head_dim_v] and lse[seqlen_q]. */
static void brute_force_attention(const attention_inputs *inputs, int64_t b, int64_t head_q, long double *out,
                                  long double *lse) {
  const aotk__attn_reference_problem *p = &inputs->problem;
  int64_t seqlen_q = p->seqlen_q, seqlen_k = p->seqlen_k, head_dim = p->head_dim, head_dim_v = value_dim(p);
  int64_t diag = p->top_left ? 0 : seqlen_k - seqlen_q;
  /* heads_q = group * heads_kv, so this equals head_q / group. */
  int64_t head_kv = head_q * p->heads_kv / p->heads_q;
  long double *weights = malloc((size_t)(seqlen_q * seqlen_k) * sizeof *weights);
  if (weights == NULL) {
    CHECK_MSG(0, "out of memory");
    return;
  }
  for (int64_t i = 0; i < seqlen_q; i++) {
    for (int64_t j = 0; j < seqlen_k; j++) {
      long double score = 0.0L;
      for (int64_t d = 0; d < head_dim; d++)
        score += (long double)dense_at(&inputs->q, b, i, head_q, d) * dense_at(&inputs->k, b, j, head_kv, d);
      score *= (long double)p->softmax_scale;
      if (p->softcap > 0.0) score = (long double)p->softcap * tanhl(score / (long double)p->softcap);
      if (p->alibi_slopes != NULL) score -= (long double)p->alibi_slopes[head_q] * (long double)llabs(i + diag - j);
      weights[i * seqlen_k + j] = brute_force_visible(p, i, j) ? expl(score) : 0.0L;
    }
  }
  long double keep_scale = 1.0L / (1.0L - (long double)p->dropout_p);
  for (int64_t i = 0; i < seqlen_q; i++) {
    long double sum = p->sinks != NULL ? expl((long double)p->sinks[head_q]) : 0.0L;
    for (int64_t j = 0; j < seqlen_k; j++) sum += weights[i * seqlen_k + j];
    lse[i] = sum > 0.0L ? logl(sum) : -INFINITY;
    for (int64_t d = 0; d < head_dim_v; d++) {
      long double weighted = 0.0L;
      for (int64_t j = 0; j < seqlen_k; j++) {
        long double dropout = 1.0L;
        if (inputs->keep_dense != NULL)
          dropout = inputs->keep_dense[((b * p->heads_q + head_q) * seqlen_q + i) * seqlen_k + j] ? keep_scale : 0.0L;
        weighted += weights[i * seqlen_k + j] * dropout * dense_at(&inputs->v, b, j, head_kv, d);
      }
      out[i * head_dim_v + d] = sum > 0.0L ? weighted / sum : 0.0L;
    }
  }
  free(weights);
}

/* Checks every row of every (batch, head) of one problem against the brute force; returns the number
 * of rows that saw no key. */
static int64_t check_f64_against_brute_force(const attention_inputs *inputs, const char *label) {
  const aotk__attn_reference_problem *p = &inputs->problem;
  int64_t head_dim_v = value_dim(p), empty_rows = 0;
  long double *expected_out = malloc((size_t)(p->seqlen_q * head_dim_v) * sizeof *expected_out);
  long double *expected_lse = malloc((size_t)p->seqlen_q * sizeof *expected_lse);
  double *out_row = malloc((size_t)head_dim_v * sizeof *out_row);
  if (expected_out == NULL || expected_lse == NULL || out_row == NULL) {
    CHECK_MSG(0, "out of memory");
    goto done;
  }
  for (int64_t b = 0; b < inputs->batch; b++) {
    for (int64_t h = 0; h < p->heads_q; h++) {
      brute_force_attention(inputs, b, h, expected_out, expected_lse);
      for (int64_t i = 0; i < p->seqlen_q; i++) {
        for (int64_t d = 0; d < head_dim_v; d++) out_row[d] = NAN; /* poison: every element must be written */
        double lse = NAN;
        aotk__attn_reference_row_f64(p, b, h, i, out_row, &lse);
        if (brute_force_visible_keys(p, i) == 0) {
          empty_rows++;
          /* No key: lse = -inf, or the sink's logit exactly. */
          double expected = p->sinks != NULL ? (double)p->sinks[h] : -(double)INFINITY;
          CHECK_MSG(lse == expected, "%s b%lld h%lld row %lld sees no key but lse = %g, expected %g", label,
                    (long long)b, (long long)h, (long long)i, lse, expected);
        } else {
          double error = fabs(lse - (double)expected_lse[i]);
          CHECK_MSG(error <= 1e-12 * (1.0 + fabsl(expected_lse[i])), "%s b%lld h%lld row %lld: lse %.17g, expected %.17Lg",
                    label, (long long)b, (long long)h, (long long)i, lse, expected_lse[i]);
        }
        for (int64_t d = 0; d < head_dim_v; d++) {
          long double expected = expected_out[i * head_dim_v + d];
          double error = fabs(out_row[d] - (double)expected);
          CHECK_MSG(error <= 1e-12 * (1.0 + fabsl(expected)), "%s b%lld h%lld row %lld d%lld: %.17g, expected %.17Lg",
                    label, (long long)b, (long long)h, (long long)i, (long long)d, out_row[d], expected);
        }
      }
    }
  }
done:
  free(expected_out);
  free(expected_lse);
  free(out_row);
  return empty_rows;
}

/* Counts across the cases of one test, to check that the interesting situations occurred. */
typedef struct case_tally {
  int64_t empty_rows;           /* rows that saw no key */
  int64_t empty_rows_with_sink; /* of which with a sink */
  double worst;                 /* finite-difference tests: the worst error as a fraction of the tolerance */
} case_tally;

static void run_brute_force_case(random_generator *generator, int64_t seqlen_q, int64_t seqlen_k, int causal,
                                 const feature_set *features, case_tally *tally) {
  static const int64_t heads_per_kv_head_choices[] = {1, 2, 4};
  int64_t batch = random_int(generator, 1, 2);
  int64_t heads_kv = random_int(generator, 1, 3);
  int64_t heads_per_kv_head = heads_per_kv_head_choices[random_int(generator, 0, 2)];
  int64_t head_dim = random_int(generator, 1, 16);
  feature_set resolved;
  if (features != NULL) {
    resolved = *features;
    /* A head_dim_v of the caller's is relative to head_dim: drawn again for this head_dim. */
    if (resolved.head_dim_v > 0) {
      resolved.head_dim_v = random_int(generator, 1, 2 * head_dim);
      if (resolved.head_dim_v == head_dim) resolved.head_dim_v += 1;
    }
  }
  attention_inputs inputs;
  if (attention_inputs_create(&inputs, generator, batch, seqlen_q, seqlen_k, heads_kv, heads_per_kv_head,
                              head_dim, causal, features != NULL ? &resolved : NULL, AOTK_DTYPE_FLOAT32)) {
    /* Scales other than the default, so the scale's placement is tested too. */
    inputs.problem.softmax_scale *= 0.5 + 1.5 * random_uniform(generator);
    char label[512], feature_text[200] = "";
    if (features != NULL) describe_features(&resolved, feature_text, sizeof feature_text);
    snprintf(label, sizeof label, "[b%lld sq%lld sk%lld hkv%lld x%lld d%lld causal%d %s strides q %lld,%lld,%lld k %lld,%lld,%lld]",
             (long long)batch, (long long)seqlen_q, (long long)seqlen_k, (long long)heads_kv,
             (long long)heads_per_kv_head, (long long)head_dim, causal, feature_text, (long long)inputs.q.strides[0],
             (long long)inputs.q.strides[1], (long long)inputs.q.strides[2], (long long)inputs.k.strides[0],
             (long long)inputs.k.strides[1], (long long)inputs.k.strides[2]);
    int64_t empty_rows = check_f64_against_brute_force(&inputs, label);
    tally->empty_rows += empty_rows;
    if (inputs.problem.sinks != NULL) tally->empty_rows_with_sink += empty_rows;
  } else {
    CHECK_MSG(0, "out of memory");
  }
  attention_inputs_destroy(&inputs);
}

static void test_reference_f64_matches_brute_force(void) {
  random_generator generator = random_for_case(3);
  /* Square, more queries than keys (causal rows that see nothing) and more keys than queries. */
  static const int64_t fixed_shapes[][2] = {{1, 1}, {1, 9}, {9, 1}, {5, 17}, {17, 5}, {13, 13}, {32, 7}, {7, 32}, {40, 40}};
  case_tally tally = {0, 0, 0.0};
  for (size_t i = 0; i < sizeof fixed_shapes / sizeof fixed_shapes[0]; i++)
    for (int causal = 0; causal <= 1; causal++)
      run_brute_force_case(&generator, fixed_shapes[i][0], fixed_shapes[i][1], causal, NULL, &tally);
  for (int i = 0; i < 300; i++) {
    run_brute_force_case(&generator, random_int(&generator, 1, 33), random_int(&generator, 1, 33),
                         (int)random_int(&generator, 0, 1), NULL, &tally);
  }
  /* {9, 1}, {17, 5} and {32, 7} causal guarantee some. */
  CHECK_MSG(tally.empty_rows > 0, "no case had a row that sees no key");
}

/* Each feature alone, all of them together, and random combinations, against the brute force: its
 * masks are tested pair by pair, so this is where a window's or an alignment's edge is checked. */
static void test_reference_f64_features_match_brute_force(void) {
  random_generator generator = random_for_case(11);
  static const int64_t fixed_shapes[][2] = {{1, 1}, {1, 9}, {9, 1}, {5, 17}, {17, 5}, {13, 13}};
  case_tally tally = {0, 0, 0.0};
  for (int feature_case = 0; feature_case <= FEATURE_CASE_ALL; feature_case++) {
    unsigned bits = feature_case_bits(feature_case);
    for (size_t i = 0; i < sizeof fixed_shapes / sizeof fixed_shapes[0]; i++)
      for (int causal = 0; causal <= 1; causal++) {
        feature_set f = random_features(&generator, bits, 17, 8);
        run_brute_force_case(&generator, fixed_shapes[i][0], fixed_shapes[i][1], causal, &f, &tally);
      }
  }
  /* Every window of a small problem, both alignments, with and without causal: explicit pair-by-pair
   * masking against the reference's key ranges. */
  for (int64_t left = -1; left <= 6; left++)
    for (int64_t right = -1; right <= 6; right++)
      for (int variant = 0; variant < 4; variant++) {
        feature_set f;
        memset(&f, 0, sizeof f);
        f.has_window = 1;
        f.window_left = left;
        f.window_right = right;
        f.top_left = variant & 1;
        run_brute_force_case(&generator, 7 + (variant & 1) * 4, 9, variant >> 1, &f, &tally);
      }
  for (int i = 0; i < 120; i++) {
    feature_set f = random_features(&generator, (unsigned)random_int(&generator, 0, FEATURE_ALL), 25, 8);
    run_brute_force_case(&generator, random_int(&generator, 1, 25), random_int(&generator, 1, 25),
                         (int)random_int(&generator, 0, 1), &f, &tally);
  }
  printf("    %lld empty rows, %lld of them with a sink\n", (long long)tally.empty_rows,
         (long long)tally.empty_rows_with_sink);
  /* {9, 1} causal with sinks guarantees some. */
  CHECK_MSG(tally.empty_rows_with_sink > 0, "no case had a row that sees no key but has a sink");
}

/* Scores far beyond exp's range: only a softmax that subtracts the maximum gets these right. */
static void test_reference_f64_large_scores(void) {
  static const float q[1] = {1000.0f};
  static const float k_distinct[3] = {1.0f, 0.5f, -1.0f};
  static const float k_equal[2] = {1.0f, 1.0f};
  static const float v[3] = {1.0f, 3.0f, 5.0f};
  aotk__attn_reference_problem p = {.seqlen_q = 1, .seqlen_k = 3, .heads_q = 1, .heads_kv = 1, .head_dim = 1,
                                    .q = q, .k = k_distinct, .v = v,
                                    .q_strides = {1, 1, 1}, .k_strides = {3, 1, 1}, .v_strides = {3, 1, 1},
                                    .softmax_scale = 1.0, .causal = 0};
  double out, lse;
  aotk__attn_reference_row_f64(&p, 0, 0, 0, &out, &lse);
  /* Weights 1, e^-500, e^-2000 relative to the largest. */
  CHECK_MSG(out == 1.0 && lse == 1000.0, "distinct large scores: out %.17g lse %.17g", out, lse);

  p.seqlen_k = 2;
  p.k = k_equal;
  aotk__attn_reference_row_f64(&p, 0, 0, 0, &out, &lse);
  CHECK_MSG(fabs(out - 2.0) < 1e-15 && fabs(lse - (1000.0 + log(2.0))) < 1e-12,
            "equal large scores: out %.17g lse %.17g", out, lse);

  float lowp_out;
  aotk__attn_reference_row_lowp(&p, AOTK_DTYPE_BFLOAT16, 0, 0, 0, &lowp_out);
  CHECK_MSG(lowp_out == 2.0f, "low-precision reference with equal large scores: %g", lowp_out);

  /* A sink far above the scores: it takes the whole denominator (weights e^-1000 relative to it). */
  static const float sink[1] = {2000.0f};
  p.sinks = sink;
  aotk__attn_reference_row_f64(&p, 0, 0, 0, &out, &lse);
  CHECK_MSG(out == 0.0 && lse == 2000.0, "a large sink: out %.17g lse %.17g", out, lse);
  aotk__attn_reference_row_lowp(&p, AOTK_DTYPE_BFLOAT16, 0, 0, 0, &lowp_out);
  CHECK_MSG(lowp_out == 0.0f, "low-precision reference with a large sink: %g", lowp_out);
}

/* The emulation's contract on one row small enough to work by hand: scores 0 and -1, v = 0 and 1, so
 * out = P1 / (1 + p1) with P1 the bf16-rounded probability e^-1 and the denominator unrounded. With
 * P1 left unrounded the bf16 output would land on the neighbouring value, so this case tells the two
 * apart. */
static void test_reference_lowp_rounds_probabilities(void) {
  static const float q[1] = {1.0f};
  static const float k[2] = {0.0f, -1.0f};
  static const float v[2] = {0.0f, 1.0f};
  aotk__attn_reference_problem p = {.seqlen_q = 1, .seqlen_k = 2, .heads_q = 1, .heads_kv = 1, .head_dim = 1,
                                    .q = q, .k = k, .v = v,
                                    .q_strides = {1, 1, 1}, .k_strides = {2, 1, 1}, .v_strides = {2, 1, 1},
                                    .softmax_scale = 1.0, .causal = 0};
  float probability = expf(-1.0f);
  float expected = aotk__round_to_dtype(aotk__round_to_dtype(probability, AOTK_DTYPE_BFLOAT16) / (1.0f + probability),
                                        AOTK_DTYPE_BFLOAT16);
  float with_unrounded_probability = aotk__round_to_dtype(probability / (1.0f + probability), AOTK_DTYPE_BFLOAT16);
  CHECK_MSG(expected != with_unrounded_probability, "the case no longer separates the two (%a)", expected);
  float out;
  aotk__attn_reference_row_lowp(&p, AOTK_DTYPE_BFLOAT16, 0, 0, 0, &out);
  CHECK_MSG(out == expected, "bf16 out %a, expected %a (%a if P were not rounded)", out, expected,
            with_unrounded_probability);
}

/* The emulation's dropout on the same row: key 0 (score 0) dropped, key 1 (score -1, v = 1) kept,
 * dropout_p = 0.75. The dropped weight stays in the float32 denominator, the kept one enters the
 * product rounded and unscaled, and float32 1 / (1 - p) = 4 scales the normalised row:
 * out = bf16(bf16(e^-1) / (1 + e^-1) * 4). A denominator without the dropped weight would give
 * about 4 instead of about 1.08. */
static void test_reference_lowp_dropout(void) {
  static const float q[1] = {1.0f};
  static const float k[2] = {0.0f, -1.0f};
  static const float v[2] = {7.0f, 1.0f};
  static const uint8_t keep[2] = {0, 1};
  aotk__attn_reference_problem p = {.seqlen_q = 1, .seqlen_k = 2, .heads_q = 1, .heads_kv = 1, .head_dim = 1,
                                    .q = q, .k = k, .v = v,
                                    .q_strides = {1, 1, 1}, .k_strides = {2, 1, 1}, .v_strides = {2, 1, 1},
                                    .softmax_scale = 1.0, .dropout_p = 0.75, .keep = keep, .keep_strides = {2, 2, 2}};
  float probability = expf(-1.0f);
  float expected = aotk__round_to_dtype(
      aotk__round_to_dtype(probability, AOTK_DTYPE_BFLOAT16) / (1.0f + probability) * 4.0f, AOTK_DTYPE_BFLOAT16);
  float out;
  aotk__attn_reference_row_lowp(&p, AOTK_DTYPE_BFLOAT16, 0, 0, 0, &out);
  CHECK_MSG(out == expected, "bf16 out %a, expected %a", out, expected);
  double out_f64, lse;
  aotk__attn_reference_row_f64(&p, 0, 0, 0, &out_f64, &lse);
  double expected_f64 = exp(-1.0) / (1.0 + exp(-1.0)) * 4.0;
  CHECK_MSG(fabs(out_f64 - expected_f64) <= 1e-15 && fabs(lse - log(1.0 + exp(-1.0))) <= 1e-15,
            "float64 out %.17g lse %.17g, expected %.17g and %.17g", out_f64, lse, expected_f64, log(1.0 + exp(-1.0)));
}

/* Maximum absolute error of the low-precision reference against float64 over every row of a
 * problem, relative to the largest float64 output. Also checks each output is a `dtype` value and
 * that rows without keys are 0. */
static double lowp_relative_error(const attention_inputs *inputs, int dtype) {
  const aotk__attn_reference_problem *p = &inputs->problem;
  const int64_t head_dim_v = value_dim(p);
  double max_error = 0.0, max_magnitude = 0.0;
  enum { MAX_HEAD_DIM = 256 };
  double exact[MAX_HEAD_DIM];
  float lowp[MAX_HEAD_DIM];
  double lse;
  if (head_dim_v > MAX_HEAD_DIM) {
    CHECK_MSG(0, "head_dim_v %lld exceeds the test's row buffers", (long long)head_dim_v);
    return NAN;
  }
  for (int64_t b = 0; b < inputs->batch; b++)
    for (int64_t h = 0; h < p->heads_q; h++)
      for (int64_t i = 0; i < p->seqlen_q; i++) {
        for (int64_t d = 0; d < head_dim_v; d++) lowp[d] = NAN;
        aotk__attn_reference_row_f64(p, b, h, i, exact, &lse);
        aotk__attn_reference_row_lowp(p, dtype, b, h, i, lowp);
        int64_t visible_keys = brute_force_visible_keys(p, i);
        for (int64_t d = 0; d < head_dim_v; d++) {
          CHECK_MSG(aotk__round_to_dtype(lowp[d], dtype) == lowp[d], "dtype %d row %lld d%lld: %a is not a dtype value",
                    dtype, (long long)i, (long long)d, lowp[d]);
          if (visible_keys == 0) CHECK_MSG(lowp[d] == 0.0f, "row %lld sees no key but out = %g", (long long)i, lowp[d]);
          double error = fabs((double)lowp[d] - exact[d]);
          if (!(error <= max_error)) max_error = error; /* also catches NaN */
          if (fabs(exact[d]) > max_magnitude) max_magnitude = fabs(exact[d]);
        }
      }
  return max_error / max_magnitude;
}

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

static void check_lowp_error(int dtype, const char *dtype_name, double low, double high, uint64_t case_salt) {
  random_generator generator = random_for_case(case_salt);
  for (int feature_case = FEATURE_CASE_NONE; feature_case <= FEATURE_CASE_ALL; feature_case++) {
    feature_set features = lowp_test_features(feature_case);
    const char *name = feature_case_name(feature_case);
    for (int causal = 0; causal <= 1; causal++) {
      lowp_test_shape shape = lowp_test_shape_of(feature_case, causal);
      attention_inputs inputs;
      if (!attention_inputs_create(&inputs, &generator, 1, shape.seqlen_q, shape.seqlen_k, 2, 2, shape.head_dim, causal,
                                   &features, dtype)) {
        CHECK_MSG(0, "out of memory");
      } else {
        double error = lowp_relative_error(&inputs, dtype);
        printf("    %s %s causal=%d: relative max error %.3g against float64\n", dtype_name, name, causal, error);
        CHECK_MSG(error >= low && error <= high, "%s %s causal=%d: relative max error %.3g outside [%g, %g]",
                  dtype_name, name, causal, error, low, high);
      }
      attention_inputs_destroy(&inputs);
    }
  }
}

/* The error bound of the GPU tests rests on this reference erring a little: enough to be the dtype's
 * rounding (not 0, which would make 2x of it an impossible bound) and no more; with every feature. */
static void test_reference_lowp_error_bf16(void) {
  check_lowp_error(AOTK_DTYPE_BFLOAT16, "bf16", 1e-4, 3e-2, 4);
}

static void test_reference_lowp_error_fp16(void) {
  check_lowp_error(AOTK_DTYPE_FLOAT16, "fp16", 1e-5, 4e-3, 5);
}

static void test_reference_lowp_error_fp32(void) {
  check_lowp_error(AOTK_DTYPE_FLOAT32, "fp32", 0.0, 1e-5, 6);
}

/* ---- the backward reference ---------------------------------------------------------------- */

/* A backward problem: the forward's inputs plus dout, shaped like out, in a random layout of its own. */
typedef struct backward_inputs {
  attention_inputs forward;
  test_tensor dout;
} backward_inputs;

static int backward_inputs_create(backward_inputs *inputs, random_generator *generator, int64_t batch,
                                  int64_t seqlen_q, int64_t seqlen_k, int64_t heads_kv, int64_t heads_per_kv_head,
                                  int64_t head_dim, int causal, const feature_set *features, int dtype) {
  memset(&inputs->dout, 0, sizeof inputs->dout);
  int ok = attention_inputs_create(&inputs->forward, generator, batch, seqlen_q, seqlen_k, heads_kv,
                                   heads_per_kv_head, head_dim, causal, features, dtype);
  ok = ok && test_tensor_create(&inputs->dout, generator, batch, seqlen_q, heads_kv * heads_per_kv_head,
                                value_dim(&inputs->forward.problem), (int)random_int(generator, 0, LAYOUT_COUNT - 1),
                                dtype);
  if (ok) {
    inputs->forward.problem.dout = inputs->dout.strided;
    memcpy(inputs->forward.problem.dout_strides, inputs->dout.strides, sizeof inputs->dout.strides);
  }
  return ok;
}

static void backward_inputs_destroy(backward_inputs *inputs) {
  attention_inputs_destroy(&inputs->forward);
  test_tensor_destroy(&inputs->dout);
}

/* Dense gradients, [batch][seqlen][heads][head_dim] like test_tensor's dense copies: dq like q, dk like
 * k, dv like v (head_dim_v); dsink [heads_q], summed over the batch (NULL without sinks). Double for
 * the float64 reference, float for the emulation. The float64 side also keeps, per head, the sum of
 * the magnitudes of dsink's terms, |exp(sink - lse_i) delta_i| over the batch and rows: the scale of
 * dsink's rounding error, which cancellation between the terms can leave far above |dsink|. */
typedef struct gradients_f64 {
  double *dq, *dk, *dv, *dsink, *dsink_terms;
} gradients_f64;

typedef struct gradients_lowp {
  float *dq, *dk, *dv, *dsink;
} gradients_lowp;

static void gradients_f64_destroy(gradients_f64 *g) {
  free(g->dq);
  free(g->dk);
  free(g->dv);
  free(g->dsink);
  free(g->dsink_terms);
}

static void gradients_lowp_destroy(gradients_lowp *g) {
  free(g->dq);
  free(g->dk);
  free(g->dv);
  free(g->dsink);
}

static int64_t q_elements(const aotk__attn_reference_problem *p, int64_t batch) {
  return batch * p->seqlen_q * p->heads_q * p->head_dim;
}

static int64_t k_elements(const aotk__attn_reference_problem *p, int64_t batch) {
  return batch * p->seqlen_k * p->heads_kv * p->head_dim;
}

static int64_t v_elements(const aotk__attn_reference_problem *p, int64_t batch) {
  return batch * p->seqlen_k * p->heads_kv * value_dim(p);
}

/* Every gradient of one problem from the float64 row functions. Poisons each row first, so that an
 * element a row function leaves unwritten shows up as NaN. Returns 0 if memory ran out. */
static int reference_gradients_f64(const backward_inputs *inputs, gradients_f64 *g) {
  const aotk__attn_reference_problem *p = &inputs->forward.problem;
  const int64_t batch = inputs->forward.batch, heads_q = p->heads_q, heads_kv = p->heads_kv, head_dim = p->head_dim;
  const int64_t head_dim_v = value_dim(p);
  memset(g, 0, sizeof *g);
  g->dq = malloc((size_t)q_elements(p, batch) * sizeof *g->dq);
  g->dk = malloc((size_t)k_elements(p, batch) * sizeof *g->dk);
  g->dv = malloc((size_t)v_elements(p, batch) * sizeof *g->dv);
  if (p->sinks != NULL) {
    g->dsink = calloc((size_t)heads_q, sizeof *g->dsink);
    g->dsink_terms = calloc((size_t)heads_q, sizeof *g->dsink_terms);
  }
  double *lse = malloc((size_t)(heads_q * p->seqlen_q) * sizeof *lse);
  double *delta = malloc((size_t)(heads_q * p->seqlen_q) * sizeof *delta);
  double *out_row = malloc((size_t)head_dim_v * sizeof *out_row);
  int ok = g->dq && g->dk && g->dv && (p->sinks == NULL || (g->dsink && g->dsink_terms)) && lse && delta && out_row;
  for (int64_t b = 0; ok && b < batch; b++) {
    for (int64_t h = 0; h < heads_q; h++)
      for (int64_t i = 0; i < p->seqlen_q; i++)
        aotk__attn_reference_bwd_row_stats_f64(p, b, h, i, out_row, &lse[h * p->seqlen_q + i],
                                               &delta[h * p->seqlen_q + i]);
    for (int64_t i = 0; i < p->seqlen_q; i++)
      for (int64_t h = 0; h < heads_q; h++) {
        double *dq_row = &g->dq[((b * p->seqlen_q + i) * heads_q + h) * head_dim];
        for (int64_t d = 0; d < head_dim; d++) dq_row[d] = NAN;
        aotk__attn_reference_bwd_dq_row_f64(p, b, h, i, lse[h * p->seqlen_q + i], delta[h * p->seqlen_q + i], dq_row);
      }
    for (int64_t j = 0; j < p->seqlen_k; j++)
      for (int64_t h = 0; h < heads_kv; h++) {
        double *dk_row = &g->dk[((b * p->seqlen_k + j) * heads_kv + h) * head_dim];
        double *dv_row = &g->dv[((b * p->seqlen_k + j) * heads_kv + h) * head_dim_v];
        for (int64_t d = 0; d < head_dim; d++) dk_row[d] = NAN;
        for (int64_t d = 0; d < head_dim_v; d++) dv_row[d] = NAN;
        aotk__attn_reference_bwd_dkdv_row_f64(p, b, h, j, lse, delta, dk_row, dv_row);
      }
    if (p->sinks != NULL)
      for (int64_t h = 0; h < heads_q; h++) {
        g->dsink[h] += aotk__attn_reference_bwd_dsink_f64(p, h, &lse[h * p->seqlen_q], &delta[h * p->seqlen_q]);
        for (int64_t i = 0; i < p->seqlen_q; i++) {
          const int64_t stat = h * p->seqlen_q + i;
          if (lse[stat] != -(double)INFINITY) g->dsink_terms[h] += exp((double)p->sinks[h] - lse[stat]) * fabs(delta[stat]);
        }
      }
  }
  free(lse);
  free(delta);
  free(out_row);
  return ok;
}

static int reference_gradients_lowp(const backward_inputs *inputs, int dtype, gradients_lowp *g) {
  const aotk__attn_reference_problem *p = &inputs->forward.problem;
  const int64_t batch = inputs->forward.batch, heads_q = p->heads_q, heads_kv = p->heads_kv, head_dim = p->head_dim;
  const int64_t head_dim_v = value_dim(p);
  memset(g, 0, sizeof *g);
  g->dq = malloc((size_t)q_elements(p, batch) * sizeof *g->dq);
  g->dk = malloc((size_t)k_elements(p, batch) * sizeof *g->dk);
  g->dv = malloc((size_t)v_elements(p, batch) * sizeof *g->dv);
  if (p->sinks != NULL) g->dsink = calloc((size_t)heads_q, sizeof *g->dsink);
  float *lse = malloc((size_t)(heads_q * p->seqlen_q) * sizeof *lse);
  float *delta = malloc((size_t)(heads_q * p->seqlen_q) * sizeof *delta);
  float *out_row = malloc((size_t)head_dim_v * sizeof *out_row);
  int ok = g->dq && g->dk && g->dv && (p->sinks == NULL || g->dsink) && lse && delta && out_row;
  for (int64_t b = 0; ok && b < batch; b++) {
    for (int64_t h = 0; h < heads_q; h++)
      for (int64_t i = 0; i < p->seqlen_q; i++)
        aotk__attn_reference_bwd_row_stats_lowp(p, dtype, b, h, i, out_row, &lse[h * p->seqlen_q + i],
                                                &delta[h * p->seqlen_q + i]);
    for (int64_t i = 0; i < p->seqlen_q; i++)
      for (int64_t h = 0; h < heads_q; h++) {
        float *dq_row = &g->dq[((b * p->seqlen_q + i) * heads_q + h) * head_dim];
        for (int64_t d = 0; d < head_dim; d++) dq_row[d] = NAN;
        aotk__attn_reference_bwd_dq_row_lowp(p, dtype, b, h, i, lse[h * p->seqlen_q + i], delta[h * p->seqlen_q + i],
                                             dq_row);
      }
    for (int64_t j = 0; j < p->seqlen_k; j++)
      for (int64_t h = 0; h < heads_kv; h++) {
        float *dk_row = &g->dk[((b * p->seqlen_k + j) * heads_kv + h) * head_dim];
        float *dv_row = &g->dv[((b * p->seqlen_k + j) * heads_kv + h) * head_dim_v];
        for (int64_t d = 0; d < head_dim; d++) dk_row[d] = NAN;
        for (int64_t d = 0; d < head_dim_v; d++) dv_row[d] = NAN;
        aotk__attn_reference_bwd_dkdv_row_lowp(p, dtype, b, h, j, lse, delta, dk_row, dv_row);
      }
    if (p->sinks != NULL)
      for (int64_t h = 0; h < heads_q; h++)
        g->dsink[h] += aotk__attn_reference_bwd_dsink_lowp(p, h, &lse[h * p->seqlen_q], &delta[h * p->seqlen_q]);
  }
  free(lse);
  free(delta);
  free(out_row);
  return ok;
}

/* ---- features that must change nothing ------------------------------------------------------- */

/* Everything both references compute for one problem, dense: the float64 forward's out
 * [batch][seqlen_q][heads_q][head_dim_v] and lse [batch][heads_q][seqlen_q], the emulation's out, and
 * both backwards. */
typedef struct reference_results {
  double *out, *lse;
  float *out_lowp;
  gradients_f64 exact;
  gradients_lowp lowp;
} reference_results;

static void reference_results_destroy(reference_results *r) {
  free(r->out);
  free(r->lse);
  free(r->out_lowp);
  gradients_f64_destroy(&r->exact);
  gradients_lowp_destroy(&r->lowp);
}

static int reference_results_compute(const backward_inputs *inputs, int dtype, reference_results *r) {
  const aotk__attn_reference_problem *p = &inputs->forward.problem;
  const int64_t batch = inputs->forward.batch, head_dim_v = value_dim(p);
  memset(r, 0, sizeof *r);
  r->out = malloc((size_t)(batch * p->seqlen_q * p->heads_q * head_dim_v) * sizeof *r->out);
  r->out_lowp = malloc((size_t)(batch * p->seqlen_q * p->heads_q * head_dim_v) * sizeof *r->out_lowp);
  r->lse = malloc((size_t)(batch * p->heads_q * p->seqlen_q) * sizeof *r->lse);
  if (r->out == NULL || r->out_lowp == NULL || r->lse == NULL) return 0;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < p->seqlen_q; i++)
      for (int64_t h = 0; h < p->heads_q; h++) {
        int64_t at = ((b * p->seqlen_q + i) * p->heads_q + h) * head_dim_v;
        aotk__attn_reference_row_f64(p, b, h, i, &r->out[at], &r->lse[(b * p->heads_q + h) * p->seqlen_q + i]);
        aotk__attn_reference_row_lowp(p, dtype, b, h, i, &r->out_lowp[at]);
      }
  return reference_gradients_f64(inputs, &r->exact) && reference_gradients_lowp(inputs, dtype, &r->lowp);
}

/* The largest finite |values[i]|, 0 if none. */
static double largest_finite_magnitude(const double *values, int64_t count) {
  double largest = 0.0;
  for (int64_t i = 0; i < count; i++)
    if (isfinite(values[i]) && fabs(values[i]) > largest) largest = fabs(values[i]);
  return largest;
}

/* got[i] against scale * expected[i] for each i: equal (infinities included), or within tolerance
 * times `magnitude` (negative: the largest |scale * expected|). A tolerance of 0 asks for equality. */
static void check_arrays_match(const double *got, const double *expected, int64_t count, double scale,
                               double tolerance, double magnitude, const char *what, const char *label) {
  double largest = magnitude >= 0.0 ? magnitude : fabs(scale) * largest_finite_magnitude(expected, count);
  for (int64_t i = 0; i < count; i++) {
    double want = scale * expected[i];
    int ok = got[i] == want || fabs(got[i] - want) <= tolerance * largest;
    CHECK_MSG(ok, "%s %s[%lld] = %.17g, expected %.17g", label, what, (long long)i, got[i], want);
  }
}

static void check_floats_match(const float *got, const float *expected, int64_t count, double scale,
                               double tolerance, const char *what, const char *label) {
  double largest = 0.0;
  for (int64_t i = 0; i < count; i++)
    if (isfinite(expected[i]) && fabs(scale * expected[i]) > largest) largest = fabs(scale * expected[i]);
  for (int64_t i = 0; i < count; i++) {
    double want = scale * (double)expected[i];
    int ok = (double)got[i] == want || fabs((double)got[i] - want) <= tolerance * largest;
    CHECK_MSG(ok, "%s %s[%lld] = %a, expected %a", label, what, (long long)i, got[i], want);
  }
}

/* Compares every result of two problems of one shape: `got`'s out and gradients are `scale` times
 * `expected`'s (lse unscaled), within tolerance_f64 for the float64 reference and tolerance_lowp for
 * the emulation (negative: not compared), relative to each array's largest value (dsink: to the
 * magnitude of its terms). dsink is compared where both have one. */
static void check_results_match(const backward_inputs *inputs, const reference_results *got,
                                const reference_results *expected, double scale, double tolerance_f64,
                                double tolerance_lowp, const char *label) {
  const aotk__attn_reference_problem *p = &inputs->forward.problem;
  const int64_t batch = inputs->forward.batch;
  const int64_t out_count = batch * p->seqlen_q * p->heads_q * value_dim(p);
  const int64_t lse_count = batch * p->heads_q * p->seqlen_q;
  const int has_dsink = got->exact.dsink != NULL && expected->exact.dsink != NULL;
  if (tolerance_f64 >= 0.0) {
    check_arrays_match(got->out, expected->out, out_count, scale, tolerance_f64, -1.0, "out", label);
    check_arrays_match(got->lse, expected->lse, lse_count, 1.0, tolerance_f64, -1.0, "lse", label);
    check_arrays_match(got->exact.dq, expected->exact.dq, q_elements(p, batch), scale, tolerance_f64, -1.0, "dq",
                       label);
    check_arrays_match(got->exact.dk, expected->exact.dk, k_elements(p, batch), scale, tolerance_f64, -1.0, "dk",
                       label);
    check_arrays_match(got->exact.dv, expected->exact.dv, v_elements(p, batch), scale, tolerance_f64, -1.0, "dv",
                       label);
    if (has_dsink) {
      double terms = fabs(scale) * largest_finite_magnitude(expected->exact.dsink_terms, p->heads_q);
      check_arrays_match(got->exact.dsink, expected->exact.dsink, p->heads_q, scale, tolerance_f64, terms, "dsink",
                         label);
    }
  }
  if (tolerance_lowp >= 0.0) {
    check_floats_match(got->out_lowp, expected->out_lowp, out_count, scale, tolerance_lowp, "lowp out", label);
    check_floats_match(got->lowp.dq, expected->lowp.dq, q_elements(p, batch), scale, tolerance_lowp, "lowp dq", label);
    check_floats_match(got->lowp.dk, expected->lowp.dk, k_elements(p, batch), scale, tolerance_lowp, "lowp dk", label);
    check_floats_match(got->lowp.dv, expected->lowp.dv, v_elements(p, batch), scale, tolerance_lowp, "lowp dv", label);
    if (has_dsink)
      check_floats_match(got->lowp.dsink, expected->lowp.dsink, p->heads_q, scale, tolerance_lowp, "lowp dsink",
                         label);
  }
}

/* How an invariance test turns a problem into the one that must give the same results: it edits the
 * problem's fields (the arrays stay the inputs'). */
typedef void (*problem_edit)(aotk__attn_reference_problem *p, const void *context);

/* Runs both references on one random problem as drawn (the expected side) and after `edit` (the side
 * checked), and compares with check_results_match. bf16 emulation, so that a difference in what the
 * emulation rounds shows. */
static void check_edit_changes_nothing(random_generator *generator, int64_t seqlen_q, int64_t seqlen_k, int causal,
                                       const feature_set *features, problem_edit edit, const void *context,
                                       double scale, double tolerance_f64, double tolerance_lowp, const char *what) {
  backward_inputs inputs;
  reference_results expected, got;
  memset(&expected, 0, sizeof expected);
  memset(&got, 0, sizeof got);
  int64_t batch = random_int(generator, 1, 2), heads_kv = random_int(generator, 1, 2);
  int64_t heads_per_kv_head = random_int(generator, 1, 2), head_dim = random_int(generator, 1, 12);
  if (!backward_inputs_create(&inputs, generator, batch, seqlen_q, seqlen_k, heads_kv, heads_per_kv_head, head_dim,
                              causal, features, AOTK_DTYPE_BFLOAT16) ||
      !reference_results_compute(&inputs, AOTK_DTYPE_BFLOAT16, &expected)) {
    CHECK_MSG(0, "out of memory");
  } else {
    edit(&inputs.forward.problem, context);
    if (!reference_results_compute(&inputs, AOTK_DTYPE_BFLOAT16, &got)) {
      CHECK_MSG(0, "out of memory");
    } else {
      char label[300], feature_text[200] = "";
      if (features != NULL) describe_features(features, feature_text, sizeof feature_text);
      snprintf(label, sizeof label, "%s [b%lld sq%lld sk%lld hkv%lld x%lld d%lld causal%d %s]", what,
               (long long)batch, (long long)seqlen_q, (long long)seqlen_k, (long long)heads_kv,
               (long long)heads_per_kv_head, (long long)head_dim, causal, feature_text);
      check_results_match(&inputs, &got, &expected, scale, tolerance_f64, tolerance_lowp, label);
    }
  }
  reference_results_destroy(&expected);
  reference_results_destroy(&got);
  backward_inputs_destroy(&inputs);
}

/* A window of two unbounded sides; the context, if not NULL, is a left bound to set instead. */
static void edit_unbounded_window(aotk__attn_reference_problem *p, const void *context) {
  p->has_window = 1;
  p->window_left = context != NULL ? *(const int64_t *)context : -1;
  p->window_right = -1;
}

/* Causal off, replaced by a window's right bound 0 (the left bound kept). */
static void edit_causal_to_window(aotk__attn_reference_problem *p, const void *context) {
  (void)context;
  p->causal = 0;
  if (!p->has_window) p->window_left = -1;
  p->has_window = 1;
  p->window_right = 0;
}

static void edit_top_left(aotk__attn_reference_problem *p, const void *context) {
  (void)context;
  p->top_left = 1;
}

static void edit_softcap(aotk__attn_reference_problem *p, const void *context) {
  p->softcap = *(const double *)context;
}

static void edit_sinks(aotk__attn_reference_problem *p, const void *context) {
  p->sinks = context;
}

/* Dropout with every element kept; the context is dropout_p. The mask is static, large enough for
 * the invariance tests' shapes (checked). */
static uint8_t all_kept[2 * 4 * 9 * 9];
static void edit_keep_all(aotk__attn_reference_problem *p, const void *context) {
  memset(all_kept, 1, sizeof all_kept);
  CHECK_MSG(p->heads_q * p->seqlen_q * p->seqlen_k * 2 <= (int64_t)sizeof all_kept, "all_kept is too small");
  p->dropout_p = *(const double *)context;
  p->keep = all_kept;
  p->keep_strides[2] = p->seqlen_k;
  p->keep_strides[1] = p->seqlen_q * p->seqlen_k;
  p->keep_strides[0] = p->heads_q * p->seqlen_q * p->seqlen_k;
}

/* Shapes of the invariance tests: up to 9 rows, queries outnumbering keys and the reverse. */
static const int64_t invariance_shapes[][2] = {{1, 1}, {1, 9}, {9, 1}, {5, 7}, {7, 5}, {9, 9}, {3, 8}, {8, 3}};
enum { INVARIANCE_SHAPES = sizeof invariance_shapes / sizeof invariance_shapes[0] };

/* Masks that cannot bind: a window of two unbounded sides, or one wider than the sequences, is no
 * window, exactly, with and without causal and other features. */
static void test_reference_unbounded_window_is_no_window(void) {
  random_generator generator = random_for_case(12);
  for (int s = 0; s < INVARIANCE_SHAPES; s++)
    for (int causal = 0; causal <= 1; causal++) {
      feature_set f = random_features(&generator, FEATURE_ALL & ~(unsigned)FEATURE_WINDOW, 9, 12);
      int64_t wide = 9 + random_int(&generator, 0, 20);
      check_edit_changes_nothing(&generator, invariance_shapes[s][0], invariance_shapes[s][1], causal, NULL,
                                 edit_unbounded_window, NULL, 1.0, 0.0, 0.0, "window (-1, -1)");
      check_edit_changes_nothing(&generator, invariance_shapes[s][0], invariance_shapes[s][1], causal, &f,
                                 edit_unbounded_window, NULL, 1.0, 0.0, 0.0, "window (-1, -1) with features");
      check_edit_changes_nothing(&generator, invariance_shapes[s][0], invariance_shapes[s][1], causal, &f,
                                 edit_unbounded_window, &wide, 1.0, 0.0, 0.0, "window wider than the sequences");
    }
}

/* causal is the window's right bound 0: alone, and with a left bound, other features and top-left. */
static void test_reference_causal_is_window_right_zero(void) {
  random_generator generator = random_for_case(13);
  for (int s = 0; s < INVARIANCE_SHAPES; s++) {
    check_edit_changes_nothing(&generator, invariance_shapes[s][0], invariance_shapes[s][1], 1, NULL,
                               edit_causal_to_window, NULL, 1.0, 0.0, 0.0, "causal -> window (-1, 0)");
    feature_set f = random_features(&generator, FEATURE_ALL, 9, 12);
    f.has_window = 1;
    f.window_left = random_int(&generator, 0, 4);
    f.window_right = random_int(&generator, -1, 0); /* what the API allows with causal */
    check_edit_changes_nothing(&generator, invariance_shapes[s][0], invariance_shapes[s][1], 1, &f,
                               edit_causal_to_window, NULL, 1.0, 0.0, 0.0, "causal + window -> window (w, 0)");
  }
}

/* With seqlen_q == seqlen_k the two alignments put the diagonal in the same place: causal, windows and
 * ALiBi's distances agree exactly. */
static void test_reference_top_left_square_is_bottom_right(void) {
  random_generator generator = random_for_case(14);
  for (int64_t n = 1; n <= 9; n++)
    for (int causal = 0; causal <= 1; causal++) {
      feature_set f = random_features(&generator, FEATURE_ALL & ~(unsigned)FEATURE_TOP_LEFT, 9, 12);
      check_edit_changes_nothing(&generator, n, n, causal, &f, edit_top_left, NULL, 1.0, 0.0, 0.0,
                                 "top-left, square");
    }
}

/* softcap * tanh(s / softcap) = s (1 - s^2 / (3 softcap^2) + ...): a cap of 1e9 on scores of a few
 * units moves them by ~1e-18 relative, below float64's rounding, so the float64 results match to 1e-9
 * relative to the largest element. (A cap of 1e6 moved scores by ~1e-12, which a gradient that
 * cancels, such as dk of a single key, can amplify past 1e-9 of its own size: seed
 * 1795393590668032531 did, by 2.8e-9. The emulation's float32 tanh moves a score by an ulp at times,
 * which its dtype rounding can turn into an ulp of dtype, so it is not compared.) */
static void test_reference_huge_softcap_is_no_softcap(void) {
  random_generator generator = random_for_case(15);
  static const double huge_cap = 1e9;
  for (int s = 0; s < INVARIANCE_SHAPES; s++)
    for (int causal = 0; causal <= 1; causal++) {
      feature_set f = random_features(&generator, FEATURE_ALL & ~(unsigned)FEATURE_SOFTCAP, 9, 12);
      check_edit_changes_nothing(&generator, invariance_shapes[s][0], invariance_shapes[s][1], causal, NULL,
                                 edit_softcap, &huge_cap, 1.0, 1e-9, -1.0, "softcap 1e9");
      check_edit_changes_nothing(&generator, invariance_shapes[s][0], invariance_shapes[s][1], causal, &f,
                                 edit_softcap, &huge_cap, 1.0, 1e-9, -1.0, "softcap 1e9 with features");
    }
}

/* A sink of -1e30 adds exp(-1e30 - max) = 0 to every denominator: exactly no sink, and a dsink of 0.
 * Only shapes where every row sees a key: an empty row's lse would be the sink, not -inf. */
static void test_reference_vanishing_sink_is_no_sink(void) {
  random_generator generator = random_for_case(16);
  static const float vanishing[8] = {-1e30f, -1e30f, -1e30f, -1e30f, -1e30f, -1e30f, -1e30f, -1e30f};
  for (int s = 0; s < INVARIANCE_SHAPES; s++)
    for (int causal = 0; causal <= 1; causal++) {
      if (causal && invariance_shapes[s][0] > invariance_shapes[s][1]) continue;
      feature_set f = random_features(&generator, FEATURE_SOFTCAP | FEATURE_ALIBI | FEATURE_DROPOUT, 9, 12);
      check_edit_changes_nothing(&generator, invariance_shapes[s][0], invariance_shapes[s][1], causal, NULL,
                                 edit_sinks, vanishing, 1.0, 0.0, 0.0, "sinks -1e30");
      check_edit_changes_nothing(&generator, invariance_shapes[s][0], invariance_shapes[s][1], causal, &f,
                                 edit_sinks, vanishing, 1.0, 0.0, 0.0, "sinks -1e30 with features");
    }
  /* And dsink is 0 (the edit above compares it only where both sides have one). */
  float sink_lse[3] = {1.0f, 2.0f, 3.0f}, sink_delta[3] = {0.5f, -2.0f, 4.0f};
  double lse_f64[3] = {1.0, 2.0, 3.0}, delta_f64[3] = {0.5, -2.0, 4.0};
  aotk__attn_reference_problem p = {.seqlen_q = 3, .heads_q = 1, .sinks = vanishing};
  CHECK(aotk__attn_reference_bwd_dsink_f64(&p, 0, lse_f64, delta_f64) == 0.0);
  CHECK(aotk__attn_reference_bwd_dsink_lowp(&p, 0, sink_lse, sink_delta) == 0.0f);
}

/* Dropout keeping everything: with p = 0 it is no dropout, exactly; with p > 0 every kept weight is
 * scaled by 1 / (1 - p), so out, and L = sum(dout * out) with every gradient, scale by it while lse
 * does not. p = 0.5 scales by 2, exactly in both references (a power of two commutes with rounding);
 * other values to float64 rounding, which dsink's cancelling terms can raise to ~1e-12 of the result
 * (a wrong factor would be off by 5% or more). */
static void test_reference_dropout_keeping_all(void) {
  random_generator generator = random_for_case(17);
  static const double zero = 0.0, half = 0.5;
  for (int s = 0; s < INVARIANCE_SHAPES; s++)
    for (int causal = 0; causal <= 1; causal++) {
      feature_set f = random_features(&generator, FEATURE_ALL & ~(unsigned)FEATURE_DROPOUT, 9, 12);
      double p = 0.05 + 0.9 * random_uniform(&generator);
      check_edit_changes_nothing(&generator, invariance_shapes[s][0], invariance_shapes[s][1], causal, NULL,
                                 edit_keep_all, &zero, 1.0, 0.0, 0.0, "keep all, p = 0");
      check_edit_changes_nothing(&generator, invariance_shapes[s][0], invariance_shapes[s][1], causal, &f,
                                 edit_keep_all, &zero, 1.0, 0.0, 0.0, "keep all, p = 0, with features");
      check_edit_changes_nothing(&generator, invariance_shapes[s][0], invariance_shapes[s][1], causal, &f,
                                 edit_keep_all, &half, 2.0, 0.0, 0.0, "keep all, p = 0.5, with features");
      check_edit_changes_nothing(&generator, invariance_shapes[s][0], invariance_shapes[s][1], causal, &f,
                                 edit_keep_all, &p, 1.0 / (1.0 - p), 1e-10, -1.0, "keep all, random p, with features");
    }
}

/* ---- the backward against finite differences ------------------------------------------------- */

/* Which terms of the loss an input can change: those of query heads head_begin .. head_end - 1, rows
 * row_begin .. row_end - 1, of batch entries batch_begin .. batch_end - 1. A q element changes only
 * its own row; a k or v element the rows of its kv head's group; a sink its head's rows in every
 * batch entry. The central difference of those terms is the whole loss's, with fewer terms to
 * recompute and to round. */
typedef struct loss_terms {
  int64_t batch_begin, batch_end, head_begin, head_end, row_begin, row_end;
} loss_terms;

/* The part of the loss L = sum(dout * out) of `terms` in batch entry b, from the float64 forward.
 * out_row: head_dim_v doubles of scratch. */
static double loss_of_terms(const aotk__attn_reference_problem *p, int64_t b, const loss_terms *terms,
                            double *out_row) {
  const int64_t head_dim_v = value_dim(p);
  double loss = 0.0, lse;
  for (int64_t h = terms->head_begin; h < terms->head_end; h++)
    for (int64_t i = terms->row_begin; i < terms->row_end; i++) {
      aotk__attn_reference_row_f64(p, b, h, i, out_row, &lse);
      const float *dout_row = p->dout + b * p->dout_strides[0] + i * p->dout_strides[1] + h * p->dout_strides[2];
      for (int64_t d = 0; d < head_dim_v; d++) loss += (double)dout_row[d] * out_row[d];
    }
  return loss;
}

/* The central-difference step: 2^-14. A bf16-valued input (8 significant bits) of magnitude below 2^10
 * plus or minus it is exactly a float, so the step taken is the step meant. Truncation error is about
 * step^2 / 6 times the third derivative, largest with a small softcap (c tanh(x / c) has a third
 * derivative of up to 2 / c^2): over 200 seeds 2^-12 reached 0.996 of the tolerance there, 2^-14
 * 16x less. Rounding error is about 1e-16 * |L| / step (~1e-11). */
#define FINITE_DIFFERENCE_STEP 0x1.0p-14
/* |finite difference - analytic| <= this * max(1, the largest |analytic| of the tensor): ~100x the
 * expected finite-difference error, and far below what a wrong term (a missing GQA sum, a wrong mask
 * edge, delta from the wrong row, a missing softcap factor) would cost. */
#define FINITE_DIFFERENCE_TOLERANCE 1e-6

/* The central difference of the loss in *x, an input that changes only `terms`; *x restored after. */
static double central_difference(const aotk__attn_reference_problem *p, const loss_terms *terms, float *x,
                                 double *out_row) {
  const float x0 = *x;
  const float x_plus = x0 + (float)FINITE_DIFFERENCE_STEP, x_minus = x0 - (float)FINITE_DIFFERENCE_STEP;
  double loss_plus = 0.0, loss_minus = 0.0;
  for (int64_t b = terms->batch_begin; b < terms->batch_end; b++) {
    *x = x_plus;
    loss_plus += loss_of_terms(p, b, terms, out_row);
    *x = x_minus;
    loss_minus += loss_of_terms(p, b, terms, out_row);
  }
  *x = x0;
  return (loss_plus - loss_minus) / ((double)x_plus - (double)x_minus);
}

static double largest_magnitude_or_one(const double *values, int64_t count) {
  double largest = 1.0;
  for (int64_t i = 0; i < count; i++)
    if (fabs(values[i]) > largest) largest = fabs(values[i]);
  return largest;
}

/* Compares one input tensor's analytic gradient (dense) with central differences of the loss, element
 * by element. Returns the worst error as a fraction of its tolerance. */
static double check_by_finite_differences(backward_inputs *inputs, test_tensor *t, const double *analytic,
                                          const char *name, const char *label) {
  const aotk__attn_reference_problem *p = &inputs->forward.problem;
  int64_t count = t->batch * t->seqlen * t->heads * t->head_dim;
  double largest = largest_magnitude_or_one(analytic, count), worst = 0.0;
  double *out_row = malloc((size_t)value_dim(p) * sizeof *out_row);
  if (out_row == NULL) {
    CHECK_MSG(0, "out of memory");
    return INFINITY;
  }
  int64_t index = 0;
  for (int64_t b = 0; b < t->batch; b++)
    for (int64_t s = 0; s < t->seqlen; s++)
      for (int64_t h = 0; h < t->heads; h++)
        for (int64_t d = 0; d < t->head_dim; d++, index++) {
          float *x = &t->strided[b * t->strides[0] + s * t->strides[1] + h * t->strides[2] + d];
          /* Head h of q is query head h, row s of q is row s; head h of k or v is read by every row of its
           * group's query heads. */
          const int64_t group = p->heads_q / t->heads;
          const int is_q = t->strided == p->q;
          const loss_terms terms = {b, b + 1, h * group, (h + 1) * group, is_q ? s : 0, is_q ? s + 1 : p->seqlen_q};
          double estimate = central_difference(p, &terms, x, out_row);
          double error = fabs(estimate - analytic[index]) / (FINITE_DIFFERENCE_TOLERANCE * largest);
          if (!(error <= worst)) worst = isnan(error) ? INFINITY : error;
          CHECK_MSG(error <= 1.0, "%s d%s[b%lld s%lld h%lld d%lld] = %.12g, finite difference %.12g", label, name,
                    (long long)b, (long long)s, (long long)h, (long long)d, analytic[index], estimate);
        }
  free(out_row);
  return worst;
}

/* The same for the sinks, whose loss sums over every batch entry. */
static double check_dsink_by_finite_differences(backward_inputs *inputs, const double *analytic, const char *label) {
  const aotk__attn_reference_problem *p = &inputs->forward.problem;
  double largest = largest_magnitude_or_one(analytic, p->heads_q), worst = 0.0;
  double *out_row = malloc((size_t)value_dim(p) * sizeof *out_row);
  if (out_row == NULL) {
    CHECK_MSG(0, "out of memory");
    return INFINITY;
  }
  for (int64_t h = 0; h < p->heads_q; h++) {
    const loss_terms terms = {0, inputs->forward.batch, h, h + 1, 0, p->seqlen_q};
    double estimate = central_difference(p, &terms, &inputs->forward.sinks[h], out_row);
    double error = fabs(estimate - analytic[h]) / (FINITE_DIFFERENCE_TOLERANCE * largest);
    if (!(error <= worst)) worst = isnan(error) ? INFINITY : error;
    CHECK_MSG(error <= 1.0, "%s dsink[h%lld] = %.12g, finite difference %.12g", label, (long long)h, analytic[h],
              estimate);
  }
  free(out_row);
  return worst;
}

static void run_finite_difference_case(random_generator *generator, int64_t seqlen_q, int64_t seqlen_k, int causal,
                                       unsigned feature_bits, case_tally *tally) {
  int64_t batch = random_int(generator, 1, 2);
  int64_t heads_kv = random_int(generator, 1, 2);
  int64_t heads_per_kv_head = random_int(generator, 1, 2);
  int64_t head_dim = random_int(generator, 1, 8);
  feature_set f = random_features(generator, feature_bits, seqlen_q > seqlen_k ? seqlen_q : seqlen_k, head_dim);
  backward_inputs inputs;
  gradients_f64 g = {NULL, NULL, NULL, NULL, NULL};
  /* bf16-valued inputs, so that the finite-difference steps are exact. */
  if (!backward_inputs_create(&inputs, generator, batch, seqlen_q, seqlen_k, heads_kv, heads_per_kv_head, head_dim,
                              causal, &f, AOTK_DTYPE_BFLOAT16)) {
    CHECK_MSG(0, "out of memory");
    backward_inputs_destroy(&inputs);
    return;
  }
  aotk__attn_reference_problem *p = &inputs.forward.problem;
  /* Scales other than the default, so the scale's placement in each gradient is tested too. */
  p->softmax_scale *= 0.5 + 1.5 * random_uniform(generator);
  if (!reference_gradients_f64(&inputs, &g)) {
    CHECK_MSG(0, "out of memory");
  } else {
    char label[400], feature_text[200];
    describe_features(&f, feature_text, sizeof feature_text);
    snprintf(label, sizeof label, "[b%lld sq%lld sk%lld hkv%lld x%lld d%lld causal%d scale %.3g %s]", (long long)batch,
             (long long)seqlen_q, (long long)seqlen_k, (long long)heads_kv, (long long)heads_per_kv_head,
             (long long)head_dim, causal, p->softmax_scale, feature_text);
    /* Rows that see no key get exactly 0. */
    for (int64_t b = 0; b < batch; b++)
      for (int64_t i = 0; i < seqlen_q; i++) {
        if (brute_force_visible_keys(p, i) > 0) continue;
        for (int64_t h = 0; h < p->heads_q; h++) {
          tally->empty_rows += 1;
          if (p->sinks != NULL) tally->empty_rows_with_sink += 1;
          for (int64_t d = 0; d < head_dim; d++) {
            double value = g.dq[((b * seqlen_q + i) * p->heads_q + h) * head_dim + d];
            CHECK_MSG(value == 0.0, "%s row %lld sees no key but dq = %g", label, (long long)i, value);
          }
        }
      }
    double errors[4] = {check_by_finite_differences(&inputs, &inputs.forward.q, g.dq, "q", label),
                        check_by_finite_differences(&inputs, &inputs.forward.k, g.dk, "k", label),
                        check_by_finite_differences(&inputs, &inputs.forward.v, g.dv, "v", label),
                        p->sinks != NULL ? check_dsink_by_finite_differences(&inputs, g.dsink, label) : 0.0};
    for (int i = 0; i < 4; i++)
      if (!(errors[i] <= tally->worst)) tally->worst = errors[i];
  }
  gradients_f64_destroy(&g);
  backward_inputs_destroy(&inputs);
}

/* Sequence lengths of the finite-difference cases: 1-9, square, queries outnumbering keys (causal
 * rows that see nothing) and the reverse. */
static const int64_t finite_difference_shapes[][2] = {{1, 1}, {1, 9}, {9, 1}, {5, 7}, {7, 5}, {9, 9}, {3, 8}, {8, 3}};

/* The float64 backward against central differences of the float64 forward: every element of dq, dk
 * and dv, on small problems (sequence lengths 1-9, head_dim 1-8, GQA 1 and 2, both masks, queries
 * outnumbering keys so that causal rows see nothing, random strides and scales). */
static void test_reference_bwd_matches_finite_differences(void) {
  random_generator generator = random_for_case(7);
  case_tally tally = {0, 0, 0.0};
  for (size_t i = 0; i < sizeof finite_difference_shapes / sizeof finite_difference_shapes[0]; i++)
    for (int causal = 0; causal <= 1; causal++)
      run_finite_difference_case(&generator, finite_difference_shapes[i][0], finite_difference_shapes[i][1], causal,
                                 0, &tally);
  for (int i = 0; i < 100; i++) {
    run_finite_difference_case(&generator, random_int(&generator, 1, 9), random_int(&generator, 1, 9),
                               (int)random_int(&generator, 0, 1), 0, &tally);
  }
  printf("    worst error %.3g of the tolerance (%g x the largest gradient), %lld empty rows\n", tally.worst,
         FINITE_DIFFERENCE_TOLERANCE, (long long)tally.empty_rows);
  /* {9, 1}, {7, 5} and {8, 3} causal guarantee some. */
  CHECK_MSG(tally.empty_rows > 0, "no case had a row that sees no key");
}

/* The same with the features: each alone, each with sinks (so that dsink is checked next to every
 * other feature), and all together; dsink against the central difference in each sink. */
static void test_reference_bwd_features_match_finite_differences(void) {
  random_generator generator = random_for_case(18);
  case_tally all_cases = {0, 0, 0.0};
  for (int feature_case = 0; feature_case <= FEATURE_CASE_ALL; feature_case++)
    for (int with_sinks = 0; with_sinks <= (feature_case < FEATURE_CASE_ALL); with_sinks++) {
      unsigned bits = feature_case_bits(feature_case) | (with_sinks ? (unsigned)FEATURE_SINKS : 0u);
      if (with_sinks && bits == FEATURE_SINKS) continue; /* sinks alone ran already */
      case_tally tally = {0, 0, 0.0};
      for (size_t i = 0; i < sizeof finite_difference_shapes / sizeof finite_difference_shapes[0]; i++)
        for (int causal = 0; causal <= 1; causal++)
          run_finite_difference_case(&generator, finite_difference_shapes[i][0], finite_difference_shapes[i][1],
                                     causal, bits, &tally);
      for (int i = 0; i < 6; i++) {
        run_finite_difference_case(&generator, random_int(&generator, 1, 9), random_int(&generator, 1, 9),
                                   (int)random_int(&generator, 0, 1), bits, &tally);
      }
      printf("    %-10s%s worst error %.3g of the tolerance, %lld empty rows (%lld with a sink)\n",
             feature_case_name(feature_case), with_sinks ? " + sinks" : "        ", tally.worst,
             (long long)tally.empty_rows, (long long)tally.empty_rows_with_sink);
      all_cases.empty_rows += tally.empty_rows;
      all_cases.empty_rows_with_sink += tally.empty_rows_with_sink;
    }
  /* {9, 1} causal with sinks guarantees some. */
  CHECK_MSG(all_cases.empty_rows_with_sink > 0, "no case had a row that sees no key but has a sink");
}

/* ---- the backward emulation's error ---------------------------------------------------------- */

/* Relative error (max |error| / max |float64|) of the emulation on each of dq, dk, dv, for every
 * feature case, checking that each value is a `dtype` value and that rows without keys get dq = 0;
 * and dsink's error relative to the magnitude of its terms. */
static void check_bwd_lowp_error(int dtype, const char *dtype_name, double low, double high, uint64_t case_salt) {
  random_generator generator = random_for_case(case_salt);
  for (int feature_case = FEATURE_CASE_NONE; feature_case <= FEATURE_CASE_ALL; feature_case++)
    for (int causal = 0; causal <= 1; causal++) {
      feature_set features = lowp_test_features(feature_case);
      const char *name = feature_case_name(feature_case);
      backward_inputs inputs;
      gradients_f64 exact = {NULL, NULL, NULL, NULL, NULL};
      gradients_lowp lowp = {NULL, NULL, NULL, NULL};
      lowp_test_shape shape = lowp_test_shape_of(feature_case, causal);
      if (!backward_inputs_create(&inputs, &generator, 1, shape.seqlen_q, shape.seqlen_k, 2, 2, shape.head_dim, causal,
                                  &features, dtype) ||
          !reference_gradients_f64(&inputs, &exact) || !reference_gradients_lowp(&inputs, dtype, &lowp)) {
        CHECK_MSG(0, "out of memory");
      } else {
        const aotk__attn_reference_problem *p = &inputs.forward.problem;
        const double *exact_of[3] = {exact.dq, exact.dk, exact.dv};
        const float *lowp_of[3] = {lowp.dq, lowp.dk, lowp.dv};
        const int64_t count_of[3] = {q_elements(p, 1), k_elements(p, 1), v_elements(p, 1)};
        static const char *const names[3] = {"dq", "dk", "dv"};
        char summary[200];
        int summary_length = snprintf(summary, sizeof summary, "%s %s causal=%d, relative max error against float64:",
                                      dtype_name, name, causal);
        for (int t = 0; t < 3; t++) {
          double max_error = 0.0, max_magnitude = 0.0;
          for (int64_t i = 0; i < count_of[t]; i++) {
            CHECK_MSG(aotk__round_to_dtype(lowp_of[t][i], dtype) == lowp_of[t][i],
                      "%s %s %s[%lld] = %a is not a dtype value", dtype_name, name, names[t], (long long)i,
                      lowp_of[t][i]);
            double error = fabs((double)lowp_of[t][i] - exact_of[t][i]);
            if (!(error <= max_error)) max_error = error; /* also catches NaN */
            if (fabs(exact_of[t][i]) > max_magnitude) max_magnitude = fabs(exact_of[t][i]);
          }
          double relative = max_error / max_magnitude;
          summary_length += snprintf(summary + summary_length, sizeof summary - (size_t)summary_length, " %s %.3g",
                                     names[t], relative);
          CHECK_MSG(relative >= low && relative <= high, "%s %s causal=%d %s: relative max error %.3g outside [%g, %g]",
                    dtype_name, name, causal, names[t], relative, low, high);
        }
        if (p->sinks != NULL) {
          /* dsink's error relative to the magnitude of its terms. */
          double worst = 0.0;
          for (int64_t h = 0; h < p->heads_q; h++) {
            double relative = fabs((double)lowp.dsink[h] - exact.dsink[h]) / exact.dsink_terms[h];
            if (!(relative <= worst)) worst = relative;
          }
          snprintf(summary + summary_length, sizeof summary - (size_t)summary_length, " dsink %.3g", worst);
          CHECK_MSG(worst <= high, "%s %s causal=%d dsink: relative error %.3g above %g", dtype_name, name, causal,
                    worst, high);
        }
        printf("    %s\n", summary);
        /* Rows that see no key have dq = 0: rows come first in the dense [seqlen][heads][head_dim] order. */
        for (int64_t i = 0; i < p->seqlen_q; i++) {
          if (brute_force_visible_keys(p, i) > 0) continue;
          for (int64_t at = i * p->heads_q * p->head_dim; at < (i + 1) * p->heads_q * p->head_dim; at++)
            CHECK_MSG(lowp.dq[at] == 0.0f, "%s %s: row %lld sees no key but dq = %g", dtype_name, name, (long long)i,
                      lowp.dq[at]);
        }
      }
      gradients_f64_destroy(&exact);
      gradients_lowp_destroy(&lowp);
      backward_inputs_destroy(&inputs);
    }
}

/* As for the forward: the GPU backward's bound is 2x this emulation's error plus a floor, so the
 * emulation must err by the dtype's rounding (not 0) and no more, with every feature. */
static void test_reference_bwd_lowp_error_bf16(void) {
  check_bwd_lowp_error(AOTK_DTYPE_BFLOAT16, "bf16", 1e-4, 3e-2, 8);
}

static void test_reference_bwd_lowp_error_fp16(void) {
  check_bwd_lowp_error(AOTK_DTYPE_FLOAT16, "fp16", 1e-5, 4e-3, 9);
}

static void test_reference_bwd_lowp_error_fp32(void) {
  check_bwd_lowp_error(AOTK_DTYPE_FLOAT32, "fp32", 0.0, 1e-5, 10);
}

/* ---- the decoding reference ----------------------------------------------------------------------- */

enum { DECODE_BATCH = 6, DECODE_CAPACITY = 40, DECODE_PAGE = 8, DECODE_TOKENS = 3, DECODE_HEADS_KV = 2 };

/* The float64 rows of the decoding reference against the dense reference of each request (seqlen_q its
 * tokens, seqlen_k its L_b, bottom-right), for one set of features; then the same problem over a paged
 * copy of the cache and with packed queries, which must give the same bits. */
static void check_decode_reference(random_generator *generator, int64_t group, int64_t seqlen_new, int causal,
                                   int window, int features, const char *name) {
  const int64_t B = DECODE_BATCH, S = DECODE_TOKENS, HKV = DECODE_HEADS_KV, HQ = HKV * group, DQK = 24, DV = 16;
  const int64_t CAP = DECODE_CAPACITY, PAGES_PER_SEQ = CAP / DECODE_PAGE;
  const int64_t q_count = B * S * HQ * DQK, k_count = B * CAP * HKV * DQK, v_count = B * CAP * HKV * DV;
  const int64_t out_count = B * S * HQ * DV, rows = B * HQ * S;
  float *q = calloc((size_t)q_count, sizeof(float)), *k = calloc((size_t)k_count, sizeof(float));
  float *v = calloc((size_t)v_count, sizeof(float)), *k_paged = calloc((size_t)k_count, sizeof(float));
  float *v_paged = calloc((size_t)v_count, sizeof(float)), *lowp[3];
  double *out[3], *lse[3], *dense_out = calloc((size_t)DV, sizeof(double));
  int64_t *keys[3];
  bool allocated = q && k && v && k_paged && v_paged && dense_out;
  for (int i = 0; i < 3; i++) {
    out[i] = calloc((size_t)out_count, sizeof(double));
    lse[i] = calloc((size_t)rows, sizeof(double));
    lowp[i] = calloc((size_t)out_count, sizeof(float));
    keys[i] = calloc((size_t)rows, sizeof(int64_t));
    allocated = allocated && out[i] && lse[i] && lowp[i] && keys[i];
  }
  int32_t table[DECODE_BATCH * (DECODE_CAPACITY / DECODE_PAGE)], cu_seqlens_q[DECODE_BATCH + 1];
  /* Lengths: 0, 1, the capacity, past it and negative (both clamp), and a random one. */
  const int32_t seqlens[DECODE_BATCH] = {0, 1, (int32_t)CAP, (int32_t)CAP + 5, -3,
                                         (int32_t)random_int(generator, 2, CAP - 2)};
  float slopes[DECODE_BATCH * 8], sinks[8];
  void *scratch = NULL;
  CHECK_MSG(allocated && HQ <= 8, "%s: out of memory", name);
  if (!allocated || HQ > 8) goto done;
  for (int64_t e = 0; e < q_count; e++) q[e] = (float)random_normal(generator);
  for (int64_t e = 0; e < k_count; e++) k[e] = (float)random_normal(generator);
  for (int64_t e = 0; e < v_count; e++) v[e] = (float)random_normal(generator);
  for (int64_t i = 0; i < B * HQ; i++) slopes[i] = (float)(0.25 * random_uniform(generator));
  for (int64_t h = 0; h < HQ; h++) sinks[h] = (float)(1.5 * random_normal(generator));

  aotk__decode_reference_problem p;
  memset(&p, 0, sizeof p);
  p.batch = B;
  p.seqlen_q = S;
  p.heads_q = HQ;
  p.heads_kv = HKV;
  p.head_dim_qk = DQK;
  p.head_dim_v = DV;
  p.q = q;
  p.q_strides[0] = S * HQ * DQK;
  p.q_strides[1] = HQ * DQK;
  p.q_strides[2] = DQK;
  p.k_cache = k;
  p.v_cache = v;
  p.k_strides[0] = CAP * HKV * DQK;
  p.k_strides[1] = HKV * DQK;
  p.k_strides[2] = DQK;
  p.v_strides[0] = CAP * HKV * DV;
  p.v_strides[1] = HKV * DV;
  p.v_strides[2] = DV;
  p.capacity = CAP;
  p.cache_seqlens = seqlens;
  p.seqlen_new = seqlen_new;
  p.softmax_scale = 1.0f / sqrtf((float)DQK);
  p.causal = causal;
  p.window_left = window ? 7 : -1;
  p.window_right = window && !causal ? 2 : -1;
  p.softcap = features ? 4.0f : 0.0f;
  p.alibi_slopes = features ? slopes : NULL;
  p.alibi_batch_stride = HQ;
  p.sinks = features ? sinks : NULL;
  p.dtype = AOTK_DTYPE_BFLOAT16;
  scratch = malloc(aotk__decode_reference_scratch_bytes(&p));
  CHECK_MSG(scratch != NULL, "%s: out of memory", name);
  if (scratch == NULL) goto done;
  aotk__decode_reference(&p, scratch, out[0], lowp[0], lse[0], keys[0]);

  /* Request by request against the dense reference: batch entry 0 pointed at the request's rows. */
  double worst = 0.0;
  int64_t empty = 0;
  for (int64_t b = 0; b < B; b++) {
    aotk__attn_reference_problem dense;
    memset(&dense, 0, sizeof dense);
    dense.seqlen_q = S;
    const int64_t end = (seqlens[b] > 0 ? seqlens[b] : 0) + seqlen_new; /* L_b, as include/aotk.h defines it */
    dense.seqlen_k = end < CAP ? end : CAP;
    dense.heads_q = HQ;
    dense.heads_kv = HKV;
    dense.head_dim = DQK;
    dense.head_dim_v = DV;
    dense.q = q + b * p.q_strides[0];
    dense.k = k + b * p.k_strides[0];
    dense.v = v + b * p.v_strides[0];
    for (int i = 0; i < 3; i++) {
      dense.q_strides[i] = p.q_strides[i];
      dense.k_strides[i] = p.k_strides[i];
      dense.v_strides[i] = p.v_strides[i];
    }
    dense.softmax_scale = (double)p.softmax_scale;
    dense.causal = causal;
    dense.has_window = window;
    dense.window_left = p.window_left;
    dense.window_right = p.window_right;
    dense.softcap = (double)p.softcap;
    dense.alibi_slopes = features ? slopes + b * HQ : NULL;
    dense.sinks = features ? sinks : NULL;
    for (int64_t h = 0; h < HQ; h++) {
      for (int64_t token = 0; token < S; token++) {
        double dense_lse;
        aotk__attn_reference_row_f64(&dense, 0, h, token, dense_out, &dense_lse);
        const int64_t row = (b * HQ + h) * S + token;
        const double *got = out[0] + ((b * S + token) * HQ + h) * DV;
        empty += keys[0][row] == 0;
        CHECK_MSG(same_value(lse[0][row], dense_lse) || fabs(lse[0][row] - dense_lse) <= 1e-12 * fabs(dense_lse),
                  "%s: request %lld (length %d), head %lld, token %lld: lse %.17g, dense %.17g", name, (long long)b,
                  (int)seqlens[b], (long long)h, (long long)token, lse[0][row], dense_lse);
        for (int64_t d = 0; d < DV; d++) {
          const double difference = fabs(got[d] - dense_out[d]);
          if (!(difference <= worst)) worst = isnan(difference) ? INFINITY : difference;
        }
      }
    }
  }
  CHECK_MSG(worst <= 1e-12, "%s: out differs from the dense reference by %.3g", name, worst);

  /* The same keys in shuffled pages: the same bits. */
  for (int64_t i = 0; i < B * PAGES_PER_SEQ; i++) table[i] = (int32_t)i;
  for (int64_t i = B * PAGES_PER_SEQ - 1; i > 0; i--) {
    const int64_t j = random_int(generator, 0, i);
    const int32_t swap = table[i];
    table[i] = table[j];
    table[j] = swap;
  }
  aotk__decode_reference_problem paged = p;
  paged.block_table = table;
  paged.block_table_stride = PAGES_PER_SEQ;
  paged.page_size = DECODE_PAGE;
  paged.k_cache = k_paged;
  paged.v_cache = v_paged;
  paged.k_strides[0] = DECODE_PAGE * HKV * DQK;
  paged.v_strides[0] = DECODE_PAGE * HKV * DV;
  for (int64_t b = 0; b < B; b++) /* key j of request b: row j % page of page table[b, j / page] */
    for (int64_t key = 0; key < CAP; key++)
      for (int64_t h = 0; h < HKV; h++) {
        const int64_t page = table[b * PAGES_PER_SEQ + key / DECODE_PAGE], row = key % DECODE_PAGE;
        memcpy(k_paged + page * paged.k_strides[0] + row * paged.k_strides[1] + h * DQK,
               k + b * p.k_strides[0] + key * p.k_strides[1] + h * DQK, (size_t)DQK * sizeof(float));
        memcpy(v_paged + page * paged.v_strides[0] + row * paged.v_strides[1] + h * DV,
               v + b * p.v_strides[0] + key * p.v_strides[1] + h * DV, (size_t)DV * sizeof(float));
      }
  aotk__decode_reference(&paged, scratch, out[1], lowp[1], lse[1], keys[1]);
  /* Packed queries, every request with all its tokens: rows cu_seqlens_q[b] + token of q. */
  aotk__decode_reference_problem packed = p;
  for (int64_t b = 0; b <= B; b++) cu_seqlens_q[b] = (int32_t)(b * S);
  packed.cu_seqlens_q = cu_seqlens_q;
  packed.q_strides[0] = 0;
  aotk__decode_reference(&packed, scratch, out[2], lowp[2], lse[2], keys[2]);
  for (int i = 1; i < 3; i++) {
    CHECK_MSG(memcmp(out[0], out[i], (size_t)out_count * sizeof(double)) == 0 &&
                  memcmp(lse[0], lse[i], (size_t)rows * sizeof(double)) == 0 &&
                  memcmp(lowp[0], lowp[i], (size_t)out_count * sizeof(float)) == 0 &&
                  memcmp(keys[0], keys[i], (size_t)rows * sizeof(int64_t)) == 0,
              "%s: the %s problem gives other bits than the contiguous one", name, i == 1 ? "paged" : "packed");
  }
  /* Packed with fewer tokens in some requests: their tokens sit at L_b - len_q + i (the dense reference
   * of those tokens alone), and the missing ones are no rows (out 0, lse -inf). */
  static const int32_t short_lengths[DECODE_BATCH] = {3, 0, 1, 2, 3, 2};
  cu_seqlens_q[0] = 0;
  for (int64_t b = 0; b < B; b++) cu_seqlens_q[b + 1] = cu_seqlens_q[b] + short_lengths[b];
  aotk__decode_reference(&packed, scratch, out[2], lowp[2], lse[2], keys[2]);
  for (int64_t b = 0; b < B; b++) {
    /* Request b's tokens alone: a dense problem of one request with len_q tokens. */
    const int64_t len_q = short_lengths[b];
    aotk__decode_reference_problem alone = p;
    alone.batch = 1;
    alone.seqlen_q = len_q > 0 ? len_q : 1;
    alone.q = q + cu_seqlens_q[b] * p.q_strides[1];
    alone.k_cache = k + b * p.k_strides[0];
    alone.v_cache = v + b * p.v_strides[0];
    alone.cache_seqlens = seqlens + b;
    alone.alibi_slopes = features ? slopes + b * HQ : NULL;
    double alone_out[DECODE_TOKENS * 8 * 16], alone_lse[DECODE_TOKENS * 8];
    float alone_lowp[DECODE_TOKENS * 8 * 16];
    int64_t alone_keys[DECODE_TOKENS * 8];
    aotk__decode_reference(&alone, scratch, alone_out, alone_lowp, alone_lse, alone_keys);
    for (int64_t h = 0; h < HQ; h++) {
      for (int64_t token = 0; token < S; token++) {
        const int64_t row = (b * HQ + h) * S + token, alone_row = h * alone.seqlen_q + token;
        const double *got = out[2] + ((b * S + token) * HQ + h) * DV;
        if (token >= len_q) {
          bool zero = true;
          for (int64_t d = 0; d < DV; d++) zero = zero && got[d] == 0.0;
          CHECK_MSG(zero && lse[2][row] == -INFINITY && keys[2][row] == 0,
                    "%s: packed request %lld has no token %lld, but out/lse/keys are not 0/-inf/0", name, (long long)b,
                    (long long)token);
          continue;
        }
        CHECK_MSG(memcmp(got, alone_out + (token * HQ + h) * DV, (size_t)DV * sizeof(double)) == 0 &&
                      same_value(lse[2][row], alone_lse[alone_row]) && keys[2][row] == alone_keys[alone_row],
                  "%s: packed request %lld (%d tokens), head %lld, token %lld: not the request's own reference", name,
                  (long long)b, (int)len_q, (long long)h, (long long)token);
      }
    }
  }
  printf("    %s: %lld rows without a key, out within %.3g of the dense reference\n", name, (long long)empty, worst);
done:
  free(q);
  free(k);
  free(v);
  free(k_paged);
  free(v_paged);
  free(dense_out);
  free(scratch);
  for (int i = 0; i < 3; i++) {
    free(out[i]);
    free(lse[i]);
    free(lowp[i]);
    free(keys[i]);
  }
}

static void test_decode_reference_matches_dense(void) {
  random_generator generator = random_for_case(40);
  check_decode_reference(&generator, 1, 0, 0, 0, 0, "plain");
  check_decode_reference(&generator, 3, 0, 1, 0, 0, "causal, GQA 3");
  check_decode_reference(&generator, 2, 0, 1, 1, 1, "causal, window 7, softcap, ALiBi, sinks");
  check_decode_reference(&generator, 4, 0, 0, 1, 1, "window 7/2, softcap, ALiBi, sinks");
  check_decode_reference(&generator, 2, 2, 1, 0, 1, "appending 2, causal, softcap, ALiBi, sinks");
  check_decode_reference(&generator, 1, 5, 0, 1, 0, "appending 5, window 7/2");
}

/* The merge: each partial's attention over its keys, merged in float64 by the header's formula, is the
 * attention over every key; the float32 merge (to fp32) is within float32 rounding of it; a partial
 * without a key has lse -inf and adds nothing, whatever its out holds. */
static void test_merge_reference(void) {
  random_generator generator = random_for_case(41);
  enum { KEYS = 23, DIM = 16, PARTIALS = 3 };
  double scores[KEYS], values[KEYS * DIM], partial_out[PARTIALS][DIM], exact[DIM], merged[DIM];
  float lse_f32[PARTIALS], out_f32[PARTIALS * DIM], lowp[DIM];
  int32_t dealt[KEYS];
  for (int trial = 0; trial < 40; trial++) {
    const int keys = trial % 10 == 9 ? 0 : KEYS; /* some rows without a key */
    const int emptied = trial % 3;               /* a partial that gets no key */
    const float sink = trial % 2 ? (float)random_normal(&generator) : -INFINITY;
    for (int j = 0; j < keys; j++) {
      scores[j] = 2.0 * random_normal(&generator);
      int p = (int)random_int(&generator, 0, PARTIALS - 1);
      dealt[j] = p == emptied ? (p + 1) % PARTIALS : p;
      for (int d = 0; d < DIM; d++) values[j * DIM + d] = random_normal(&generator);
    }
    double partial_lse[PARTIALS], total = sink == -INFINITY ? 0.0 : exp((double)sink);
    for (int p = 0; p < PARTIALS; p++) {
      partial_lse[p] = aotk__merge_reference_partial_f64(scores, values, dealt, keys, p, DIM, partial_out[p]);
      total += exp(partial_lse[p]);
      lse_f32[p] = (float)partial_lse[p];
      for (int d = 0; d < DIM; d++) out_f32[p * DIM + d] = p == emptied || keys == 0 ? NAN : (float)partial_out[p][d];
    }
    CHECK_MSG(partial_lse[emptied] == -INFINITY, "trial %d: the emptied partial has lse %g", trial,
              partial_lse[emptied]);
    const double lse = aotk__merge_reference_attention_f64(scores, values, keys, DIM, sink, exact);
    const double merged_lse = total > 0.0 ? log(total) : -INFINITY;
    double worst = 0.0, worst_lowp = 0.0;
    for (int d = 0; d < DIM; d++) {
      merged[d] = 0.0;
      for (int p = 0; p < PARTIALS; p++) {
        if (partial_lse[p] != -INFINITY) merged[d] += exp(partial_lse[p] - merged_lse) * partial_out[p][d];
      }
      const double error = fabs(merged[d] - exact[d]);
      if (!(error <= worst)) worst = isnan(error) ? INFINITY : error;
    }
    aotk__merge_reference_lowp(lse_f32, out_f32, PARTIALS, DIM, sink, AOTK_DTYPE_FLOAT32, lowp);
    for (int d = 0; d < DIM; d++) {
      const double error = fabs((double)lowp[d] - exact[d]);
      if (!(error <= worst_lowp)) worst_lowp = isnan(error) ? INFINITY : error;
    }
    CHECK_MSG(same_value(lse, merged_lse) || fabs(lse - merged_lse) <= 1e-12 * fabs(lse),
              "trial %d: lse %.17g, merged %.17g", trial, lse, merged_lse);
    CHECK_MSG(worst <= 1e-12 && worst_lowp <= 1e-5, "trial %d (%d keys): merged out off by %.3g, float32 merge by %.3g",
              trial, keys, worst, worst_lowp);
  }
}

int main(void) {
  run_seed = aotk_test_seed();
  RUN_TEST(test_bf16_every_pattern);
  RUN_TEST(test_fp16_every_pattern);
  RUN_TEST(test_bf16_rounding_cases);
  RUN_TEST(test_fp16_rounding_cases);
  RUN_TEST(test_rounding_matches_definition_on_random_floats);
  RUN_TEST(test_round_to_dtype);
  RUN_TEST(test_reference_f64_matches_brute_force);
  RUN_TEST(test_reference_f64_features_match_brute_force);
  RUN_TEST(test_reference_f64_large_scores);
  RUN_TEST(test_reference_lowp_rounds_probabilities);
  RUN_TEST(test_reference_lowp_dropout);
  RUN_TEST(test_reference_lowp_error_bf16);
  RUN_TEST(test_reference_lowp_error_fp16);
  RUN_TEST(test_reference_lowp_error_fp32);
  RUN_TEST(test_reference_unbounded_window_is_no_window);
  RUN_TEST(test_reference_causal_is_window_right_zero);
  RUN_TEST(test_reference_top_left_square_is_bottom_right);
  RUN_TEST(test_reference_huge_softcap_is_no_softcap);
  RUN_TEST(test_reference_vanishing_sink_is_no_sink);
  RUN_TEST(test_reference_dropout_keeping_all);
  RUN_TEST(test_reference_bwd_matches_finite_differences);
  RUN_TEST(test_reference_bwd_features_match_finite_differences);
  RUN_TEST(test_reference_bwd_lowp_error_bf16);
  RUN_TEST(test_reference_bwd_lowp_error_fp16);
  RUN_TEST(test_reference_bwd_lowp_error_fp32);
  RUN_TEST(test_decode_reference_matches_dense);
  RUN_TEST(test_merge_reference);
  return aotk_test_finish();
}
