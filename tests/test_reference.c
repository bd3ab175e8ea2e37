/*
 * CPU tests of the host-side numerics the GPU tests rely on: the float <-> fp16/bf16 conversions and
 * the two attention references (float64, and the same-precision emulation used for error bounds).
 *
 * The float64 reference is checked against a brute force written differently on purpose: it builds
 * the whole masked score matrix of one (batch, head) from a dense copy of the inputs (so the
 * reference's stride handling is checked too), exponentiates in long double without subtracting the
 * maximum (safe because the test's scores are moderate), and normalises afterwards.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aotk.h"
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

typedef struct attention_inputs {
  test_tensor q, k, v;
  aotk__attn_reference_problem problem;
  int64_t batch;
} attention_inputs;

static int attention_inputs_create(attention_inputs *inputs, random_generator *generator, int64_t batch,
                                   int64_t seqlen_q, int64_t seqlen_k, int64_t heads_kv, int64_t heads_per_kv_head,
                                   int64_t head_dim, int causal, int dtype) {
  memset(inputs, 0, sizeof *inputs);
  int64_t heads_q = heads_kv * heads_per_kv_head;
  int ok = test_tensor_create(&inputs->q, generator, batch, seqlen_q, heads_q, head_dim,
                              (int)random_int(generator, 0, LAYOUT_COUNT - 1), dtype);
  ok = ok && test_tensor_create(&inputs->k, generator, batch, seqlen_k, heads_kv, head_dim,
                                (int)random_int(generator, 0, LAYOUT_COUNT - 1), dtype);
  ok = ok && test_tensor_create(&inputs->v, generator, batch, seqlen_k, heads_kv, head_dim,
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
  return ok;
}

static void attention_inputs_destroy(attention_inputs *inputs) {
  test_tensor_destroy(&inputs->q);
  test_tensor_destroy(&inputs->k);
  test_tensor_destroy(&inputs->v);
}

/* Whole-matrix attention of one (batch, query head) in long double, from the dense copies. Writes
 * out[seqlen_q][head_dim] and lse[seqlen_q]. */
static void brute_force_attention(const attention_inputs *inputs, int64_t b, int64_t head_q, long double *out,
                                  long double *lse) {
  const aotk__attn_reference_problem *p = &inputs->problem;
  int64_t seqlen_q = p->seqlen_q, seqlen_k = p->seqlen_k, head_dim = p->head_dim;
  /* heads_q = group * heads_kv, so this equals head_q / group. */
  int64_t head_kv = head_q * p->heads_kv / p->heads_q;
  long double *weights = malloc((size_t)(seqlen_q * seqlen_k) * sizeof *weights);
  if (weights == NULL) {
    CHECK_MSG(0, "out of memory");
    return;
  }
  for (int64_t i = 0; i < seqlen_q; i++) {
    for (int64_t j = 0; j < seqlen_k; j++) {
      /* The diagonal of the bottom-right mask: key j - (seqlen_k - seqlen_q) is query j's twin. */
      int masked = p->causal && j - i > seqlen_k - seqlen_q;
      long double score = 0.0L;
      for (int64_t d = 0; d < head_dim; d++)
        score += (long double)dense_at(&inputs->q, b, i, head_q, d) * dense_at(&inputs->k, b, j, head_kv, d);
      weights[i * seqlen_k + j] = masked ? 0.0L : expl(score * (long double)p->softmax_scale);
    }
  }
  for (int64_t i = 0; i < seqlen_q; i++) {
    long double sum = 0.0L;
    for (int64_t j = 0; j < seqlen_k; j++) sum += weights[i * seqlen_k + j];
    lse[i] = sum > 0.0L ? logl(sum) : -INFINITY;
    for (int64_t d = 0; d < head_dim; d++) {
      long double weighted = 0.0L;
      for (int64_t j = 0; j < seqlen_k; j++) weighted += weights[i * seqlen_k + j] * dense_at(&inputs->v, b, j, head_kv, d);
      out[i * head_dim + d] = sum > 0.0L ? weighted / sum : 0.0L;
    }
  }
  free(weights);
}

/* Checks every row of every (batch, head) of one problem against the brute force; returns the number
 * of rows that saw no key. */
static int64_t check_f64_against_brute_force(const attention_inputs *inputs, const char *label) {
  const aotk__attn_reference_problem *p = &inputs->problem;
  int64_t head_dim = p->head_dim, empty_rows = 0;
  long double *expected_out = malloc((size_t)(p->seqlen_q * head_dim) * sizeof *expected_out);
  long double *expected_lse = malloc((size_t)p->seqlen_q * sizeof *expected_lse);
  double *out_row = malloc((size_t)head_dim * sizeof *out_row);
  if (expected_out == NULL || expected_lse == NULL || out_row == NULL) {
    CHECK_MSG(0, "out of memory");
    goto done;
  }
  for (int64_t b = 0; b < inputs->batch; b++) {
    for (int64_t h = 0; h < p->heads_q; h++) {
      brute_force_attention(inputs, b, h, expected_out, expected_lse);
      for (int64_t i = 0; i < p->seqlen_q; i++) {
        for (int64_t d = 0; d < head_dim; d++) out_row[d] = NAN; /* poison: every element must be written */
        double lse = NAN;
        aotk__attn_reference_row_f64(p, b, h, i, out_row, &lse);
        if (isinf(expected_lse[i])) {
          empty_rows++;
          CHECK_MSG(isinf(lse) && lse < 0, "%s b%lld h%lld row %lld sees no key but lse = %g", label, (long long)b,
                    (long long)h, (long long)i, lse);
        } else {
          double error = fabs(lse - (double)expected_lse[i]);
          CHECK_MSG(error <= 1e-12 * (1.0 + fabsl(expected_lse[i])), "%s b%lld h%lld row %lld: lse %.17g, expected %.17Lg",
                    label, (long long)b, (long long)h, (long long)i, lse, expected_lse[i]);
        }
        for (int64_t d = 0; d < head_dim; d++) {
          long double expected = expected_out[i * head_dim + d];
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

static void run_brute_force_case(random_generator *generator, int64_t seqlen_q, int64_t seqlen_k, int causal,
                                 int64_t *empty_rows_seen) {
  static const int64_t heads_per_kv_head_choices[] = {1, 2, 4};
  int64_t batch = random_int(generator, 1, 2);
  int64_t heads_kv = random_int(generator, 1, 3);
  int64_t heads_per_kv_head = heads_per_kv_head_choices[random_int(generator, 0, 2)];
  int64_t head_dim = random_int(generator, 1, 16);
  attention_inputs inputs;
  if (attention_inputs_create(&inputs, generator, batch, seqlen_q, seqlen_k, heads_kv, heads_per_kv_head,
                              head_dim, causal, AOTK_DTYPE_FLOAT32)) {
    /* Scales other than the default, so the scale's placement is tested too. */
    inputs.problem.softmax_scale *= 0.5 + 1.5 * random_uniform(generator);
    char label[256];
    snprintf(label, sizeof label, "[b%lld sq%lld sk%lld hkv%lld x%lld d%lld causal%d strides q %lld,%lld,%lld k %lld,%lld,%lld]",
             (long long)batch, (long long)seqlen_q, (long long)seqlen_k, (long long)heads_kv,
             (long long)heads_per_kv_head, (long long)head_dim, causal, (long long)inputs.q.strides[0],
             (long long)inputs.q.strides[1], (long long)inputs.q.strides[2], (long long)inputs.k.strides[0],
             (long long)inputs.k.strides[1], (long long)inputs.k.strides[2]);
    *empty_rows_seen += check_f64_against_brute_force(&inputs, label);
  } else {
    CHECK_MSG(0, "out of memory");
  }
  attention_inputs_destroy(&inputs);
}

static void test_reference_f64_matches_brute_force(void) {
  random_generator generator = random_for_case(3);
  /* Square, more queries than keys (causal rows that see nothing) and more keys than queries. */
  static const int64_t fixed_shapes[][2] = {{1, 1}, {1, 9}, {9, 1}, {5, 17}, {17, 5}, {13, 13}, {32, 7}, {7, 32}, {40, 40}};
  int64_t empty_rows_seen = 0;
  for (size_t i = 0; i < sizeof fixed_shapes / sizeof fixed_shapes[0]; i++)
    for (int causal = 0; causal <= 1; causal++)
      run_brute_force_case(&generator, fixed_shapes[i][0], fixed_shapes[i][1], causal, &empty_rows_seen);
  for (int i = 0; i < 300; i++) {
    run_brute_force_case(&generator, random_int(&generator, 1, 33), random_int(&generator, 1, 33),
                         (int)random_int(&generator, 0, 1), &empty_rows_seen);
  }
  /* {9, 1}, {17, 5} and {32, 7} causal guarantee some. */
  CHECK_MSG(empty_rows_seen > 0, "no case had a row that sees no key");
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

/* Maximum absolute error of the low-precision reference against float64 over every row of a
 * problem, relative to the largest float64 output. Also checks each output is a `dtype` value and
 * that rows without keys are 0. */
static double lowp_relative_error(const attention_inputs *inputs, int dtype) {
  const aotk__attn_reference_problem *p = &inputs->problem;
  double max_error = 0.0, max_magnitude = 0.0;
  enum { MAX_HEAD_DIM = 128 };
  double exact[MAX_HEAD_DIM];
  float lowp[MAX_HEAD_DIM];
  double lse;
  if (p->head_dim > MAX_HEAD_DIM) {
    CHECK_MSG(0, "head_dim %lld exceeds the test's row buffers", (long long)p->head_dim);
    return NAN;
  }
  for (int64_t b = 0; b < inputs->batch; b++)
    for (int64_t h = 0; h < p->heads_q; h++)
      for (int64_t i = 0; i < p->seqlen_q; i++) {
        for (int64_t d = 0; d < p->head_dim; d++) lowp[d] = NAN;
        aotk__attn_reference_row_f64(p, b, h, i, exact, &lse);
        aotk__attn_reference_row_lowp(p, dtype, b, h, i, lowp);
        for (int64_t d = 0; d < p->head_dim; d++) {
          CHECK_MSG(aotk__round_to_dtype(lowp[d], dtype) == lowp[d], "dtype %d row %lld d%lld: %a is not a dtype value",
                    dtype, (long long)i, (long long)d, lowp[d]);
          if (isinf(lse)) CHECK_MSG(lowp[d] == 0.0f, "row %lld sees no key but out = %g", (long long)i, lowp[d]);
          double error = fabs((double)lowp[d] - exact[d]);
          if (!(error <= max_error)) max_error = error; /* also catches NaN */
          if (fabs(exact[d]) > max_magnitude) max_magnitude = fabs(exact[d]);
        }
      }
  return max_error / max_magnitude;
}

static void check_lowp_error(int dtype, const char *dtype_name, double low, double high, uint64_t case_salt) {
  random_generator generator = random_for_case(case_salt);
  for (int causal = 0; causal <= 1; causal++) {
    attention_inputs inputs;
    /* seqlen_q 80 > seqlen_k 64: with causal, the first 16 rows see no key. */
    if (!attention_inputs_create(&inputs, &generator, 1, causal ? 80 : 64, 64, 2, 2, 64, causal, dtype)) {
      CHECK_MSG(0, "out of memory");
    } else {
      double error = lowp_relative_error(&inputs, dtype);
      printf("    %s causal=%d: relative max error %.3g against float64\n", dtype_name, causal, error);
      CHECK_MSG(error >= low && error <= high, "%s causal=%d: relative max error %.3g outside [%g, %g]", dtype_name,
                causal, error, low, high);
    }
    attention_inputs_destroy(&inputs);
  }
}

/* The error bound of the GPU tests rests on this reference erring a little: enough to be the dtype's
 * rounding (not 0, which would make 2x of it an impossible bound) and no more. */
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

/* A backward problem: the forward's inputs plus dout, shaped like q, in a random layout of its own. */
typedef struct backward_inputs {
  attention_inputs forward;
  test_tensor dout;
} backward_inputs;

static int backward_inputs_create(backward_inputs *inputs, random_generator *generator, int64_t batch,
                                  int64_t seqlen_q, int64_t seqlen_k, int64_t heads_kv, int64_t heads_per_kv_head,
                                  int64_t head_dim, int causal, int dtype) {
  memset(&inputs->dout, 0, sizeof inputs->dout);
  int ok = attention_inputs_create(&inputs->forward, generator, batch, seqlen_q, seqlen_k, heads_kv,
                                   heads_per_kv_head, head_dim, causal, dtype);
  ok = ok && test_tensor_create(&inputs->dout, generator, batch, seqlen_q, heads_kv * heads_per_kv_head, head_dim,
                                (int)random_int(generator, 0, LAYOUT_COUNT - 1), dtype);
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

/* Dense gradients, [batch][seqlen][heads][head_dim] like test_tensor's dense copies: dq like q, dk and
 * dv like k. Double for the float64 reference, float for the emulation. */
typedef struct gradients_f64 {
  double *dq, *dk, *dv;
} gradients_f64;

typedef struct gradients_lowp {
  float *dq, *dk, *dv;
} gradients_lowp;

static int64_t q_elements(const aotk__attn_reference_problem *p, int64_t batch) {
  return batch * p->seqlen_q * p->heads_q * p->head_dim;
}

static int64_t kv_elements(const aotk__attn_reference_problem *p, int64_t batch) {
  return batch * p->seqlen_k * p->heads_kv * p->head_dim;
}

/* Every gradient of one problem from the float64 row functions. Poisons each row first, so that an
 * element a row function leaves unwritten shows up as NaN. Returns 0 if memory ran out. */
static int reference_gradients_f64(const backward_inputs *inputs, gradients_f64 *g) {
  const aotk__attn_reference_problem *p = &inputs->forward.problem;
  const int64_t batch = inputs->forward.batch, heads_q = p->heads_q, heads_kv = p->heads_kv, head_dim = p->head_dim;
  g->dq = malloc((size_t)q_elements(p, batch) * sizeof *g->dq);
  g->dk = malloc((size_t)kv_elements(p, batch) * sizeof *g->dk);
  g->dv = malloc((size_t)kv_elements(p, batch) * sizeof *g->dv);
  double *lse = malloc((size_t)(heads_q * p->seqlen_q) * sizeof *lse);
  double *delta = malloc((size_t)(heads_q * p->seqlen_q) * sizeof *delta);
  double *out_row = malloc((size_t)head_dim * sizeof *out_row);
  int ok = g->dq && g->dk && g->dv && lse && delta && out_row;
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
        int64_t at = ((b * p->seqlen_k + j) * heads_kv + h) * head_dim;
        for (int64_t d = 0; d < head_dim; d++) g->dk[at + d] = g->dv[at + d] = NAN;
        aotk__attn_reference_bwd_dkdv_row_f64(p, b, h, j, lse, delta, &g->dk[at], &g->dv[at]);
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
  g->dq = malloc((size_t)q_elements(p, batch) * sizeof *g->dq);
  g->dk = malloc((size_t)kv_elements(p, batch) * sizeof *g->dk);
  g->dv = malloc((size_t)kv_elements(p, batch) * sizeof *g->dv);
  float *lse = malloc((size_t)(heads_q * p->seqlen_q) * sizeof *lse);
  float *delta = malloc((size_t)(heads_q * p->seqlen_q) * sizeof *delta);
  float *out_row = malloc((size_t)head_dim * sizeof *out_row);
  int ok = g->dq && g->dk && g->dv && lse && delta && out_row;
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
        int64_t at = ((b * p->seqlen_k + j) * heads_kv + h) * head_dim;
        for (int64_t d = 0; d < head_dim; d++) g->dk[at + d] = g->dv[at + d] = NAN;
        aotk__attn_reference_bwd_dkdv_row_lowp(p, dtype, b, h, j, lse, delta, &g->dk[at], &g->dv[at]);
      }
  }
  free(lse);
  free(delta);
  free(out_row);
  return ok;
}

/* The loss L = sum(dout * out) restricted to batch entry b (the other entries do not depend on b's
 * inputs), from the float64 forward. */
static double loss_of_batch_entry(const aotk__attn_reference_problem *p, int64_t b, double *out_row) {
  double loss = 0.0, lse;
  for (int64_t h = 0; h < p->heads_q; h++)
    for (int64_t i = 0; i < p->seqlen_q; i++) {
      aotk__attn_reference_row_f64(p, b, h, i, out_row, &lse);
      const float *dout_row = p->dout + b * p->dout_strides[0] + i * p->dout_strides[1] + h * p->dout_strides[2];
      for (int64_t d = 0; d < p->head_dim; d++) loss += (double)dout_row[d] * out_row[d];
    }
  return loss;
}

/* The central-difference step: 2^-12, which moves a bf16-valued input (8 significant bits) to a
 * neighbouring float exactly, so the step taken is the step meant. Truncation error is about
 * step^2 / 6 times the third derivative (~1e-8 relative here); rounding error about
 * 1e-16 * |L| / step (~1e-11). */
#define FINITE_DIFFERENCE_STEP 0x1.0p-12
/* |finite difference - analytic| <= this * max(1, the largest |analytic| of the tensor): ~100x the
 * expected finite-difference error, and far below what a wrong term (a missing GQA sum, a wrong mask
 * edge, delta from the wrong row) would cost. */
#define FINITE_DIFFERENCE_TOLERANCE 1e-6

/* Compares one input tensor's analytic gradient (dense) with central differences of the loss, element
 * by element. Returns the worst error as a fraction of its tolerance. */
static double check_by_finite_differences(backward_inputs *inputs, test_tensor *t, const double *analytic,
                                          const char *name, const char *label) {
  const aotk__attn_reference_problem *p = &inputs->forward.problem;
  int64_t count = t->batch * t->seqlen * t->heads * t->head_dim;
  double largest = 1.0, worst = 0.0;
  for (int64_t i = 0; i < count; i++) {
    if (fabs(analytic[i]) > largest) largest = fabs(analytic[i]);
  }
  double *out_row = malloc((size_t)p->head_dim * sizeof *out_row);
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
          const float x0 = *x;
          const float x_plus = x0 + (float)FINITE_DIFFERENCE_STEP, x_minus = x0 - (float)FINITE_DIFFERENCE_STEP;
          *x = x_plus;
          double loss_plus = loss_of_batch_entry(p, b, out_row);
          *x = x_minus;
          double loss_minus = loss_of_batch_entry(p, b, out_row);
          *x = x0;
          double estimate = (loss_plus - loss_minus) / ((double)x_plus - (double)x_minus);
          double error = fabs(estimate - analytic[index]) / (FINITE_DIFFERENCE_TOLERANCE * largest);
          if (!(error <= worst)) worst = isnan(error) ? INFINITY : error;
          CHECK_MSG(error <= 1.0, "%s d%s[b%lld s%lld h%lld d%lld] = %.12g, finite difference %.12g", label, name,
                    (long long)b, (long long)s, (long long)h, (long long)d, analytic[index], estimate);
        }
  free(out_row);
  return worst;
}

static void run_finite_difference_case(random_generator *generator, int64_t seqlen_q, int64_t seqlen_k, int causal,
                                       int64_t *empty_rows_seen, double *worst) {
  int64_t batch = random_int(generator, 1, 2);
  int64_t heads_kv = random_int(generator, 1, 2);
  int64_t heads_per_kv_head = random_int(generator, 1, 2);
  int64_t head_dim = random_int(generator, 1, 8);
  backward_inputs inputs;
  gradients_f64 g = {NULL, NULL, NULL};
  /* bf16-valued inputs, so that the finite-difference steps are exact. */
  if (!backward_inputs_create(&inputs, generator, batch, seqlen_q, seqlen_k, heads_kv, heads_per_kv_head, head_dim,
                              causal, AOTK_DTYPE_BFLOAT16)) {
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
    char label[200];
    snprintf(label, sizeof label, "[b%lld sq%lld sk%lld hkv%lld x%lld d%lld causal%d scale %.3g]", (long long)batch,
             (long long)seqlen_q, (long long)seqlen_k, (long long)heads_kv, (long long)heads_per_kv_head,
             (long long)head_dim, causal, p->softmax_scale);
    /* Rows that see no key get exactly 0. */
    for (int64_t b = 0; b < batch; b++)
      for (int64_t i = 0; i < seqlen_q; i++) {
        if (!causal || i + seqlen_k - seqlen_q >= 0) continue;
        for (int64_t h = 0; h < p->heads_q; h++) {
          *empty_rows_seen += 1;
          for (int64_t d = 0; d < head_dim; d++) {
            double value = g.dq[((b * seqlen_q + i) * p->heads_q + h) * head_dim + d];
            CHECK_MSG(value == 0.0, "%s row %lld sees no key but dq = %g", label, (long long)i, value);
          }
        }
      }
    double errors[3] = {check_by_finite_differences(&inputs, &inputs.forward.q, g.dq, "q", label),
                        check_by_finite_differences(&inputs, &inputs.forward.k, g.dk, "k", label),
                        check_by_finite_differences(&inputs, &inputs.forward.v, g.dv, "v", label)};
    for (int i = 0; i < 3; i++)
      if (!(errors[i] <= *worst)) *worst = errors[i];
  }
  free(g.dq);
  free(g.dk);
  free(g.dv);
  backward_inputs_destroy(&inputs);
}

/* The float64 backward against central differences of the float64 forward: every element of dq, dk
 * and dv, on small problems (sequence lengths 1-9, head_dim 1-8, GQA 1 and 2, both masks, queries
 * outnumbering keys so that causal rows see nothing, random strides and scales). */
static void test_reference_bwd_matches_finite_differences(void) {
  random_generator generator = random_for_case(7);
  static const int64_t fixed_shapes[][2] = {{1, 1}, {1, 9}, {9, 1}, {5, 7}, {7, 5}, {9, 9}, {3, 8}, {8, 3}};
  int64_t empty_rows_seen = 0;
  double worst = 0.0;
  for (size_t i = 0; i < sizeof fixed_shapes / sizeof fixed_shapes[0]; i++)
    for (int causal = 0; causal <= 1; causal++)
      run_finite_difference_case(&generator, fixed_shapes[i][0], fixed_shapes[i][1], causal, &empty_rows_seen, &worst);
  for (int i = 0; i < 100; i++) {
    run_finite_difference_case(&generator, random_int(&generator, 1, 9), random_int(&generator, 1, 9),
                               (int)random_int(&generator, 0, 1), &empty_rows_seen, &worst);
  }
  printf("    worst error %.3g of the tolerance (%g x the largest gradient), %lld empty rows\n", worst,
         FINITE_DIFFERENCE_TOLERANCE, (long long)empty_rows_seen);
  /* {9, 1}, {7, 5} and {8, 3} causal guarantee some. */
  CHECK_MSG(empty_rows_seen > 0, "no case had a row that sees no key");
}

/* Relative error (max |error| / max |float64|) of the emulation on each of dq, dk, dv, checking that
 * each value is a `dtype` value and that rows without keys get dq = 0. */
static void check_bwd_lowp_error(int dtype, const char *dtype_name, double low, double high, uint64_t case_salt) {
  random_generator generator = random_for_case(case_salt);
  for (int causal = 0; causal <= 1; causal++) {
    backward_inputs inputs;
    gradients_f64 exact = {NULL, NULL, NULL};
    gradients_lowp lowp = {NULL, NULL, NULL};
    /* seqlen_q 80 > seqlen_k 64: with causal, the first 16 rows see no key. */
    if (!backward_inputs_create(&inputs, &generator, 1, causal ? 80 : 64, 64, 2, 2, 64, causal, dtype) ||
        !reference_gradients_f64(&inputs, &exact) || !reference_gradients_lowp(&inputs, dtype, &lowp)) {
      CHECK_MSG(0, "out of memory");
    } else {
      const aotk__attn_reference_problem *p = &inputs.forward.problem;
      const double *exact_of[3] = {exact.dq, exact.dk, exact.dv};
      const float *lowp_of[3] = {lowp.dq, lowp.dk, lowp.dv};
      const int64_t count_of[3] = {q_elements(p, 1), kv_elements(p, 1), kv_elements(p, 1)};
      static const char *const names[3] = {"dq", "dk", "dv"};
      for (int t = 0; t < 3; t++) {
        double max_error = 0.0, max_magnitude = 0.0;
        for (int64_t i = 0; i < count_of[t]; i++) {
          CHECK_MSG(aotk__round_to_dtype(lowp_of[t][i], dtype) == lowp_of[t][i],
                    "%s %s[%lld] = %a is not a dtype value", dtype_name, names[t], (long long)i, lowp_of[t][i]);
          double error = fabs((double)lowp_of[t][i] - exact_of[t][i]);
          if (!(error <= max_error)) max_error = error; /* also catches NaN */
          if (fabs(exact_of[t][i]) > max_magnitude) max_magnitude = fabs(exact_of[t][i]);
        }
        double relative = max_error / max_magnitude;
        printf("    %s causal=%d %s: relative max error %.3g against float64 (max |%s| %.3g)\n", dtype_name, causal,
               names[t], relative, names[t], max_magnitude);
        CHECK_MSG(relative >= low && relative <= high, "%s causal=%d %s: relative max error %.3g outside [%g, %g]",
                  dtype_name, causal, names[t], relative, low, high);
      }
      if (causal) {
        /* Rows 0-15 of the one batch entry come first in the dense [seqlen][heads][head_dim] order. */
        for (int64_t i = 0; i < 16 * p->heads_q * p->head_dim; i++) {
          CHECK_MSG(lowp.dq[i] == 0.0f, "%s: a row that sees no key has dq = %g", dtype_name, lowp.dq[i]);
        }
      }
    }
    free(exact.dq);
    free(exact.dk);
    free(exact.dv);
    free(lowp.dq);
    free(lowp.dk);
    free(lowp.dv);
    backward_inputs_destroy(&inputs);
  }
}

/* As for the forward: the GPU backward's bound is 2x this emulation's error plus a floor, so the
 * emulation must err by the dtype's rounding (not 0) and no more. */
static void test_reference_bwd_lowp_error_bf16(void) {
  check_bwd_lowp_error(AOTK_DTYPE_BFLOAT16, "bf16", 1e-4, 3e-2, 8);
}

static void test_reference_bwd_lowp_error_fp16(void) {
  check_bwd_lowp_error(AOTK_DTYPE_FLOAT16, "fp16", 1e-5, 4e-3, 9);
}

static void test_reference_bwd_lowp_error_fp32(void) {
  check_bwd_lowp_error(AOTK_DTYPE_FLOAT32, "fp32", 0.0, 1e-5, 10);
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
  RUN_TEST(test_reference_f64_large_scores);
  RUN_TEST(test_reference_lowp_rounds_probabilities);
  RUN_TEST(test_reference_lowp_error_bf16);
  RUN_TEST(test_reference_lowp_error_fp16);
  RUN_TEST(test_reference_lowp_error_fp32);
  RUN_TEST(test_reference_bwd_matches_finite_differences);
  RUN_TEST(test_reference_bwd_lowp_error_bf16);
  RUN_TEST(test_reference_bwd_lowp_error_fp16);
  RUN_TEST(test_reference_bwd_lowp_error_fp32);
  return aotk_test_finish();
}
