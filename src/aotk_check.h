/* Checking the forward on the GPU against the float64 reference: one case at a time. Shared by
 * aotk_self_test() and the GPU tests, so the two cannot drift apart. Not a launch path: it allocates
 * and synchronizes. */
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

#endif /* AOTK_CHECK_H */
