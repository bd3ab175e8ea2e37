/*
 * CPU tests of the host-side backward references (tests/test_reference.c has the conversions, the
 * forward and the decoding reference): the float64 backward against central differences of the float64
 * forward, dsink included, plain and with each feature; edits that must change nothing (an unbounded
 * window, causal as a window's right bound 0, top-left on a square, a huge cap, a vanishing sink,
 * dropout that keeps everything), checked on both references' every output, forward and backward; and
 * the backward emulation's error against float64, which must stay the dtype's rounding.
 */
#include "reference_test_inputs.h"

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

int main(void) {
  run_seed = aotk_test_seed();
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
  return aotk_test_finish();
}
