/* Internal interface of the attention entry points, shared with the self-test and the tests. */
#ifndef AOTK_ATTN_H
#define AOTK_ATTN_H

#include <stdint.h>

#include "aotk.h"
#include "aotk_driver.h"
#include "aotk_image.h"

/* A validated attention problem: sizes and resolved scalars. */
typedef struct aotk__attn_problem {
  aotk_dtype dtype;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  float softmax_scale; /* resolved: never 0 */
  int causal;
  int write_lse;
  int aligned; /* q, k, v and out pointers 16-byte aligned and their strides multiples of 16 elements */
} aotk__attn_problem;

/* Validates the caller's params (copying them into *params, zero-extended to the current struct) and
 * fills *problem. Touches no driver. */
aotk_status aotk__attn_validate(const aotk_attn_params *caller_params, aotk_attn_params *params,
                                aotk__attn_problem *problem);

/* The backward's validation: the forward's, plus dout, dq, dk, dv, a required lse and the flag. */
aotk_status aotk__attn_bwd_validate(const aotk_attn_params *caller_params, aotk_attn_params *params,
                                    aotk__attn_problem *problem);

/* The table row and image kind that kernel `family` runs for `problem` on `device`; `size_key` is the
 * length the family's tuning is keyed on (seqlen_k for the dK/dV pass, seqlen_q otherwise). */
aotk_status aotk__choose_kernel(int family, const aotk__attn_problem *problem, int64_t size_key,
                                const aotk__device_info *device, int *row, aotk__image_kind *kind);

#endif /* AOTK_ATTN_H */
