/* Checking selection attention (aotk_sel_fwd and aotk_sel_bwd) on the GPU against the float64 reference
 * of aotk_sel_reference.h: one case at a time, for aotk_self_test(). (tests/test_sel_gpu.c runs a
 * larger matrix with its own runner: layouts, identities between runs, refusals.) Not a launch path:
 * it allocates and synchronizes. */
#ifndef AOTK_SEL_CHECK_H
#define AOTK_SEL_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "aotk.h"
#include "aotk_driver.h"

/* The most sequences of a varlen case. */
#define AOTK__SEL_CHECK_MAX_SEQS 8

/* The compared tensors of a result, in the order of its arrays. */
enum { AOTK__SEL_CHECK_OUT, AOTK__SEL_CHECK_DQ, AOTK__SEL_CHECK_DK, AOTK__SEL_CHECK_DV, AOTK__SEL_CHECK_TENSORS };

/*
 * One case: fresh N(0, 1) q, k, v, dout in the dtype; contiguous [rows, heads, dim] tensors (which the
 * selection kernels' alignment requires), heads_q = heads_kv * group.
 *
 * num_seqs 0: one sequence of seqlens_q[0] query rows and seqlens_k[0] keys, passed without
 * cu_seqlens. 1 .. AOTK__SEL_CHECK_MAX_SEQS: the varlen layout (lengths of 0 allowed), each tensor
 * followed by AOTK__CHECK_VARLEN_TAIL_ROWS unused rows (block_idx and block_cnt too, filled with
 * garbage) that the calls must leave alone; max_seqlen_k is the longest key length.
 *
 * The selection, per (token, kv head):
 * - every_block 0: a random number of distinct blocks the token may see (b * block_size <= p), mixed
 *   with ids the contract ignores (-1 mostly, -2, INT32_MIN, INT32_MAX, ceil(len_k / block_size), and
 *   blocks after the diagonal), in random slot order; some rows select nothing. With with_count,
 *   block_cnt holds a random count (sometimes outside [0, slots], which clamps) and the slots past it
 *   hold block ids that would count if they were read.
 * - every_block 1: every block 0 .. p / block_size in random slot order, -1 in the remaining slots, no
 *   block_cnt (slots must exceed the longest sequence's block count). That is dense causal attention
 *   (bottom-right aligned), so aotk_attn_fwd and aotk_attn_bwd run too (varlen layout, on the same q,
 *   k, v, dout), and their out, lse, dq, dk, dv are held to the same float64 reference and bounds.
 */
typedef struct aotk__sel_check_case {
  aotk_dtype dtype;
  int64_t head_dim_qk, head_dim_v;
  int64_t block_size;
  int64_t heads_kv, group;
  int64_t slots;
  int num_seqs;
  int64_t seqlens_q[AOTK__SEL_CHECK_MAX_SEQS], seqlens_k[AOTK__SEL_CHECK_MAX_SEQS];
  int with_count;
  int every_block;
  float softmax_scale; /* 0: the default */
  uint64_t seed;
  aotk_stream stream;
} aotk__sel_check_case;

/*
 * The error rule is the dense cases' (aotk_check.h), per tensor over every element: max |gpu - float64|
 * <= 2 x max |same-precision emulation - float64| + a floor: AOTK__CHECK_ERROR_FLOOR for out,
 * AOTK__CHECK_BWD_ERROR_FLOOR x max(1, max |float64|) for dq, dk, dv; lse within AOTK__CHECK_LSE_ABS +
 * AOTK__CHECK_LSE_REL |lse|. Rows that see no key must give out = 0, dq = 0 and lse = -inf exactly,
 * keys no row selected dk = dv = 0 exactly.
 */
typedef struct aotk__sel_check_result {
  int passed;
  double max_error[AOTK__SEL_CHECK_TENSORS];      /* max |gpu - float64 reference| */
  double lowp_max_error[AOTK__SEL_CHECK_TENSORS]; /* the same for the same-precision emulation */
  double max_magnitude[AOTK__SEL_CHECK_TENSORS];  /* max |float64 reference| */
  double bound[AOTK__SEL_CHECK_TENSORS];
  double lse_max_error;                           /* max |lse - reference| in units of its tolerance */
  double worst_fraction;                          /* max over the tensors of error / bound (> 1: failed) */
  int64_t selected_keys;        /* sum over (token, query head) of the keys it attends to */
  int64_t empty_rows, bad_empty_rows;       /* (token, query head) pairs with no key; those not 0 / -inf */
  int64_t unselected_keys, bad_unselected;  /* (key, kv head) pairs no row selected; those with dk, dv != 0 */
  int64_t unwritten;            /* output elements (out, lse, dq, dk, dv) still holding the poison */
  int64_t clobbered;            /* elements of the unused rows that a call overwrote */
  size_t workspace_bytes;       /* what aotk_sel_query reported for the backward (and the call was given) */
  char kernel_name[200];        /* "<forward kernel> + <backward dK/dV kernel>" */
  /* every_block only: aotk's dense causal attention on the same inputs, against the same reference. */
  int dense_compared;
  double dense_max_error[AOTK__SEL_CHECK_TENSORS];
  double dense_lse_max_error;
  double dense_worst_fraction;
  int64_t dense_bad;            /* dense empty rows not 0 / -inf, and poison left in its outputs */
  char detail[512];
} aotk__sel_check_result;

/* Runs one case: allocates, poisons the outputs and the workspace (0xff bytes: NaN), calls
 * aotk_sel_fwd and aotk_sel_bwd (workspace sized by aotk_sel_query) on c->stream, synchronizes and
 * compares; the host reference is spread over the machine's cores. Frees everything on every path.
 * Returns the aotk or driver status of the run itself (AOTK_OK when it ran; whether the numbers pass is
 * r->passed); AOTK_ERROR_INVALID_VALUE for a case it cannot describe. Uses the context current on the
 * thread. */
aotk_status aotk__check_sel(const aotk__driver *driver, const aotk__sel_check_case *c, aotk__sel_check_result *r);

#endif /* AOTK_SEL_CHECK_H */
