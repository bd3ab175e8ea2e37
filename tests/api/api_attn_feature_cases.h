/*
 * The attention launch tests' feature cases (test_api_attn_launch.c runs them forward,
 * test_api_attn_bwd_launch.c backward): a problem and the features of 0.2 to turn on (masks and windows of
 * both alignments, softcap, ALiBi, sinks, dropout and its mask, all of them). Static, for the one file of
 * either binary.
 */
#ifndef API_ATTN_FEATURE_CASES_H
#define API_ATTN_FEATURE_CASES_H

#include "api_launch_checks.h"

/* One forward case: a problem and what to turn on. */
typedef struct feature_case {
  const char *what;
  problem shape;
  void (*set)(aotk_attn_params *params, const problem *p);
} feature_case;
static void causal_top_left(aotk_attn_params *a, const problem *p) {
  (void)p, a->causal = 1, a->causal_align = AOTK_ALIGN_TOP_LEFT;
}
static void causal_explicit_right_0(aotk_attn_params *a, const problem *p) {
  (void)p, a->causal = 1, a->window_right = 0;
}
static void causal_window_left(aotk_attn_params *a, const problem *p) {
  (void)p, a->causal = 1, a->window_left = 64, a->window_right = -1;
}
static void window_left_only(aotk_attn_params *a, const problem *p) { (void)p, a->window_left = 100, a->window_right = -1; }
static void window_right_only(aotk_attn_params *a, const problem *p) { (void)p, a->window_left = -1, a->window_right = 5; }
static void window_both(aotk_attn_params *a, const problem *p) { (void)p, a->window_left = 16, a->window_right = 3; }
static void window_diagonal(aotk_attn_params *a, const problem *p) { (void)p, a->window_left = 0, a->window_right = 0; }
static void window_top_left(aotk_attn_params *a, const problem *p) {
  (void)p, a->window_left = 10, a->window_right = 10, a->causal_align = AOTK_ALIGN_TOP_LEFT;
}
static void top_left_alone(aotk_attn_params *a, const problem *p) { (void)p, a->causal_align = AOTK_ALIGN_TOP_LEFT; }
static void softcap_30(aotk_attn_params *a, const problem *p) { (void)p, a->softcap = 30.0f; }
static void alibi_per_head(aotk_attn_params *a, const problem *p) {
  a->alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p->heads_q);
}
static void alibi_broadcast(aotk_attn_params *a, const problem *p) { /* one row for every sequence */
  alibi_per_sequence(a, p);
  a->alibi_slopes.strides[0] = 0;
}
static void sinks_softcap(aotk_attn_params *a, const problem *p) { sinks_on(a, p), softcap_30(a, p); }
static void dropout_half(aotk_attn_params *a, const problem *p) { dropout_on(a, p), a->dropout_p = 0.5f; }
static void dropout_half_softcap(aotk_attn_params *a, const problem *p) { dropout_half(a, p), softcap_30(a, p); }
static void dropout_tiny(aotk_attn_params *a, const problem *p) { dropout_on(a, p), a->dropout_p = 1e-6f; }
static void dropout_almost_all(aotk_attn_params *a, const problem *p) {
  dropout_on(a, p), a->dropout_p = 0.99999994f; /* the largest float below 1 */
}
static void dropout_off_rng_given(aotk_attn_params *a, const problem *p) { /* the state is ignored */
  dropout_on(a, p), a->dropout_p = 0.0f;
}
static void dropout_mask_on(aotk_attn_params *a, const problem *p) {
  dropout_on(a, p);
  a->dropout_mask = mask_for(a);
}
static void dropout_mask_padded(aotk_attn_params *a, const problem *p) { /* rows padded, heads far apart */
  dropout_mask_on(a, p);
  aotk_tensor *m = &a->dropout_mask;
  m->strides[2] = m->shape[3] + 64, m->strides[1] = m->shape[2] * m->strides[2] + 4096;
  m->strides[0] = m->shape[1] * m->strides[1] + 16;
}
static void everything(aotk_attn_params *a, const problem *p) {
  causal_top_left(a, p), a->window_left = 32, softcap_30(a, p), alibi_per_sequence(a, p), sinks_on(a, p);
  dropout_mask_on(a, p);
}
static void nothing(aotk_attn_params *a, const problem *p) { (void)a, (void)p; }

static const problem feature_problem = {AOTK_DTYPE_BFLOAT16, 2, 300, 517, 8, 2, 64, true, 0};
static const problem feature_problem_no_lse = {AOTK_DTYPE_FLOAT16, 3, 65, 40, 4, 4, 128, false, 0};

static const feature_case feature_cases[] = {
    {"no features", feature_problem, nothing},
    {"causal (bottom-right)", feature_problem, causal},
    {"causal top-left", feature_problem, causal_top_left},
    {"causal with window_right 0 given", feature_problem, causal_explicit_right_0},
    {"causal with window_left 64 (window_right -1 resolves to 0)", feature_problem, causal_window_left},
    {"window_left 100 only", feature_problem, window_left_only},
    {"window_right 5 only", feature_problem, window_right_only},
    {"window (16, 3)", feature_problem, window_both},
    {"window (0, 0): the diagonal", feature_problem, window_diagonal},
    {"window (10, 10) top-left", feature_problem, window_top_left},
    {"top-left alignment without a mask", feature_problem, top_left_alone},
    {"softcap 30", feature_problem, softcap_30},
    {"softcap 50, scale 1/16, causal", feature_problem_no_lse, softcap_scale},
    {"ALiBi [heads_q]", feature_problem, alibi_per_head},
    {"ALiBi [batch, heads_q], padded rows", feature_problem, alibi_per_sequence},
    {"ALiBi [batch, heads_q], batch stride 0", feature_problem_no_lse, alibi_broadcast},
    {"sinks", feature_problem, sinks_on},
    {"dropout 0.1", feature_problem, dropout_on},
    {"dropout 0.5", feature_problem_no_lse, dropout_half},
    {"dropout 1e-6", feature_problem, dropout_tiny},
    {"dropout just below 1", feature_problem, dropout_almost_all},
    {"dropout 0 with an rng_state", feature_problem, dropout_off_rng_given},
    {"dropout 0.1 with its mask", feature_problem, dropout_mask_on},
    {"dropout with a padded mask", feature_problem_no_lse, dropout_mask_padded},
    {"everything at once", feature_problem, everything},
};

#endif /* API_ATTN_FEATURE_CASES_H */
