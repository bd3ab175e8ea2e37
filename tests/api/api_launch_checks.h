/*
 * What a launch the fake driver recorded must hold, for the API tests (tests/api/test_api_*.c): each
 * argument against the kernel's parameter list, the grids, the TMA descriptors, and the whole of a
 * forward's or a backward's launches for a call, each failure recorded as the calling case's (CHECK).
 */
#ifndef AOTK_API_LAUNCH_CHECKS_H
#define AOTK_API_LAUNCH_CHECKS_H

#include "api_problems.h"
void check_pointer(const char *what, const char *kernel, const recorded_launch *launch, int index,
                   const void *expected, const char *name);

void check_float(const char *what, const char *kernel, const recorded_launch *launch, int index,
                 double expected, const char *name);

void check_int(const char *what, const char *kernel, const recorded_launch *launch, int index,
               int64_t expected, const char *name);

/* What the kernels must be told about the 0.2 features, worked out here from the params as the header
 * defines them (not from the library's code). */
typedef struct feature_expectation {
  bool varlen, extras;
  int32_t window_left, window_right; /* causal resolves window_right to 0; -1 unbounded */
  int32_t flags;                     /* FLAG_* */
  uint32_t features;                 /* AOTK_FEATURE_* for aotk_query, less PADDED_HEAD_DIM and EXTRAS_KERNEL */
  double scale, qk_scale_log2, softcap_scale, softcap_log2, dropout_scale;
  uint32_t dropout_threshold;
  const void *rng_state; /* what the kernels get: NULL unless dropout is on */
  int64_t alibi_batch_stride;
} feature_expectation;

void check_launch(const char *what, const aotk_attn_params *params, const problem *p);

/* The three rows the backward must run for `p` on an `arch` GPU: preprocess and dQ tuned by
 * seqlen_q, dK/dV by seqlen_k; dK/dV and dQ of the EXTRAS variant when `extras`. */
void expected_bwd_rows_extras(int arch, const problem *p, int aligned, int extras,
                              const aotk__kernel_entry *rows[3]);

/* The same for the call `params` on the fake GPU as installed: the fused pass and the cast in the
 * second and third places where expect_bwd_fused says so, else the dK/dV row is the Gluon kernel's where
 * expect_bwd_hopper says so. */
void expected_bwd_rows_of(const aotk_attn_params *params, int arch, bool from_ptx, const problem *p,
                          int aligned, int extras, const aotk__kernel_entry *rows[3]);

/* aotk_query(AOTK_OP_ATTN_BWD) and then aotk_attn_bwd with exactly the reported workspace: the query
 * describes the dK/dV kernel, the workspace (larger with dsinks) and the features; the call launches
 * preprocess, dK/dV and dQ in that order on the stream, and the sink reduction fourth when dsinks is
 * asked for, each with its row's grid, block and shared memory, and its arguments in the catalog's
 * order. Where the non-deterministic backward runs (expect_bwd_fused), the fused pass and the cast take
 * the second and third places, the workspace holds the accumulator too, which is cleared on the stream
 * before the first launch and mapped as the fused pass's fifth descriptor, and the statistics' bytes
 * alone are refused. `p` describes the problem as for check_launch. */
void check_bwd_launch(const char *what, const aotk_attn_params *params, const problem *p);

static inline void causal(aotk_attn_params *a, const problem *p) { (void)p, a->causal = 1; }
void softcap_scale(aotk_attn_params *a, const problem *p);
void alibi_per_sequence(aotk_attn_params *a, const problem *p);
void sinks_on(aotk_attn_params *a, const problem *p);
void dropout_on(aotk_attn_params *a, const problem *p);

/* The launch's grid, block, shared memory, stream and scratch pointers, for table row `row`. */
void check_sel_launch_shape(const char *what, const recorded_launch *launch, int kernel,
                            const aotk__kernel_entry *row, int64_t grid, int scratch_index);

void check_i64(const char *what, const char *kernel, const recorded_launch *launch, int index, int64_t expected,
               const char *name);

#endif /* AOTK_API_LAUNCH_CHECKS_H */
