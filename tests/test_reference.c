/*
 * CPU tests of the host-side numerics the GPU tests rely on: the float <-> fp16/bf16 conversions, the
 * forward references (float64, and the same-precision emulation used for error bounds), plain and with
 * each feature of aotk_attn_params (alignment, window, softcap, ALiBi, sinks, dropout, head_dim_v !=
 * head_dim), and the decoding reference. The backward references and the identities checked on both
 * references are test_reference_bwd.c's.
 *
 * The float64 forward is checked against a brute force written differently on purpose: it builds
 * the whole masked score matrix of one (batch, head) from a dense copy of the inputs (so the
 * reference's stride handling is checked too), decides each pair's mask from the API's definition
 * (where the reference solves the masks for ranges), exponentiates in long double without
 * subtracting the maximum (safe because the test's scores are moderate), and normalises afterwards.
 * The emulation's error against float64 must stay the dtype's rounding.
 *
 * The decoding reference (src/check/aotk_decode_reference.c, which aotk_self_test() and test_decode_gpu
 * share) is checked against this dense reference, request by request (bottom-right at each request's
 * L_b keys: lengths 0, 1, the capacity, clamped ones, after an append), with every feature; a paged
 * copy of the cache in shuffled pages and packed queries must give the same bits as the contiguous
 * cache; and its merge functions against each other (the merge of the partials is the attention over
 * every key).
 */
#include "reference_test_inputs.h"

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
  RUN_TEST(test_decode_reference_matches_dense);
  RUN_TEST(test_merge_reference);
  return aotk_test_finish();
}
