/* Checking the forward and the backward on the GPU against the float64 reference: one case at a time.
 * Shared by aotk_self_test() and the GPU tests, so the two cannot drift apart. Not a launch path: it
 * allocates and synchronizes. */
#ifndef AOTK_CHECK_H
#define AOTK_CHECK_H

#include <stdint.h>

#include "aotk.h"
#include "aotk_driver.h"

typedef enum aotk__check_layout {
  AOTK__LAYOUT_CONTIGUOUS = 0, /* [batch, seqlen, heads, head_dim] packed */
  AOTK__LAYOUT_PERMUTED = 1,   /* memory [batch, heads, seqlen, head_dim], viewed as [b, s, h, d]: strided */
  AOTK__LAYOUT_PADDED = 2,     /* each head's row padded by 3 elements: strides not multiples of 16 */
  AOTK__LAYOUT_OFFSET = 3,     /* packed, but data starts one element past a 16-byte boundary */
  AOTK__LAYOUT_COUNT = 4,
} aotk__check_layout;

const char *aotk__check_layout_name(aotk__check_layout layout);

typedef struct aotk__fwd_check_case {
  aotk_dtype dtype;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  int causal;
  float softmax_scale;        /* 0: the default */
  aotk__check_layout layout;  /* of q, k, v, out (and lse, padded for PADDED) */
  int with_lse;
  int64_t rows_per_head;      /* query rows compared per (batch, head): all when seqlen_q is at most this */
  uint64_t seed;
  aotk_stream stream;
} aotk__fwd_check_case;

typedef struct aotk__fwd_check_result {
  int passed;
  double max_error;       /* max |out - float64 reference| over the rows checked */
  double lowp_max_error;  /* the same for the same-precision reference: the bound is 2x this + a floor */
  double lse_max_error;   /* max |lse - reference| over rows with keys */
  int64_t rows_checked;
  int64_t unwritten;      /* output elements still holding the poison after the call */
  int64_t clobbered;      /* padding elements between outputs that the call overwrote */
  int64_t bad_empty_rows; /* rows with no visible key whose out is not 0 or lse not -inf */
  char kernel_name[96];
  int from_ptx;
  char detail[256];
} aotk__fwd_check_result;

/* Runs one case with fresh random inputs: allocates, poisons outputs, calls aotk_attn_fwd on
 * c->stream, synchronizes, compares. Returns the aotk or driver status of the run itself (AOTK_OK
 * when it ran; whether the numbers pass is r->passed). Uses the context current on the thread. */
aotk_status aotk__check_attn_fwd(const aotk__driver *driver, const aotk__fwd_check_case *c,
                                 aotk__fwd_check_result *r);

/* The absolute error floor added to 2x the same-precision reference's error. */
#define AOTK__CHECK_ERROR_FLOOR 1e-4
#define AOTK__CHECK_LSE_ABS 1e-3
#define AOTK__CHECK_LSE_REL 1e-4

/*
 * The backward: one case runs the forward (for out and lse: the two are tested together), then the
 * backward, and compares every element of dq, dk and dv with the float64 reference.
 *
 * The error rule is the forward's, per gradient tensor: max |x - float64| <= 2 x (the same-precision
 * emulation's max error) + a floor. The forward's outputs are convex combinations of N(0, 1) values, so
 * an absolute floor of 1e-4 sits well below their rounding; gradients are sums over sequence rows and
 * GQA heads (|dv| reaches ~100 at seqlen 1000, group 8), so the floor here is the forward's measured in
 * the tensor's own units: AOTK__CHECK_BWD_ERROR_FLOOR x max(1, max |float64 reference| of the tensor).
 * Relative to the tensor's largest value that is 1/39 of bf16's unit roundoff (2^-8) and 1/5 of
 * fp16's (2^-11), so it only matters where the emulation's error happens to be near 0 (e.g. dk, which
 * is exactly 0 when every query row sees a single key, while the kernel's float32 dP - delta leaves
 * ~1e-6).
 */
#define AOTK__CHECK_BWD_ERROR_FLOOR 1e-4

typedef struct aotk__bwd_check_case {
  aotk_dtype dtype;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  int causal;
  float softmax_scale;       /* 0: the default */
  aotk__check_layout layout; /* of q, k, v, out, dout, dq, dk, dv (and lse, padded for PADDED) */
  int mix_layouts;           /* 1: every other tensor (k, out, dq, dv) takes the layout's partner of the same
                                alignment (contiguous <-> permuted, padded <-> offset), so that q and dq,
                                out and dout, k and dk, v and dv, dk and dv all have different strides */
  int deterministic;         /* params.deterministic */
  int repeats;               /* further backward runs, each on re-poisoned outputs and workspace, that must
                                reproduce the first run's dq, dk and dv bit for bit */
  uint64_t seed;
  aotk_stream stream;
} aotk__bwd_check_case;

typedef struct aotk__bwd_check_result {
  int passed;
  /* Per gradient tensor, in the order dq, dk, dv: */
  double max_error[3];      /* max |x - float64 reference| over every element */
  double lowp_max_error[3]; /* the same for the same-precision emulation */
  double max_magnitude[3];  /* max |float64 reference|: the floor's scale */
  double bound[3];          /* 2 x lowp_max_error + AOTK__CHECK_BWD_ERROR_FLOOR x max(1, max_magnitude) */
  double worst_fraction;    /* max over the three of max_error / bound (> 1: failed) */
  int64_t elements_checked;
  int64_t unwritten;        /* gradient elements still holding the poison after the call */
  int64_t clobbered;        /* padding elements between gradient elements that the call overwrote */
  int64_t bad_empty_rows;   /* rows that see no key whose dq is not exactly 0 */
  int64_t nondeterministic; /* repeats that did not reproduce the first run's bits */
  size_t workspace_bytes;   /* what aotk_query reported (and the call was given) */
  char kernel_name[96];     /* the query's: the dK/dV kernel */
  int from_ptx;
  char detail[400];
} aotk__bwd_check_result;

/* Runs one backward case with fresh random q, k, v, dout (N(0, 1) in the dtype): allocates, runs
 * aotk_attn_fwd for out and lse, queries the backward's workspace and allocates it, poisons dq, dk, dv
 * and the workspace (0xff bytes: NaN), calls aotk_attn_bwd on c->stream (1 + repeats times),
 * synchronizes and compares. The host reference is spread over the machine's cores. Returns the aotk
 * or driver status of the run itself (AOTK_OK when it ran; whether the numbers pass is r->passed). */
aotk_status aotk__check_attn_bwd(const aotk__driver *driver, const aotk__bwd_check_case *c,
                                 aotk__bwd_check_result *r);

#endif /* AOTK_CHECK_H */
