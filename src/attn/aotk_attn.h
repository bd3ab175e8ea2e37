/* Dense attention's internal interface: the validated problem, which aotk_attn_validate.c fills and
 * aotk_attn.c plans and launches. */
#ifndef AOTK_ATTN_H
#define AOTK_ATTN_H

#include <stdbool.h>
#include <stdint.h>

#include "aotk.h"

/* A validated attention problem: sizes and resolved scalars. */
typedef struct aotk__attn_problem {
  aotk_dtype dtype;
  int64_t batch;              /* dense: batch; varlen: the number of sequences */
  int64_t seqlen_q, seqlen_k; /* dense: the lengths; varlen: max_seqlen_q, max_seqlen_k */
  int64_t heads_q, heads_kv;
  int64_t head_dim_qk, head_dim_v; /* the caller's (multiples of 8); the kernels run padded sizes */
  float softmax_scale;        /* resolved: never 0 */
  int varlen;
  int causal;
  int top_left;               /* causal_align == AOTK_ALIGN_TOP_LEFT */
  int32_t window_left, window_right; /* resolved: causal makes window_right 0; -1 unbounded */
  float softcap;              /* 0: off */
  int alibi;
  int64_t alibi_batch_stride; /* 0 for slopes [heads_q] */
  int sinks;
  int dsinks;                 /* the backward writes dsinks */
  int deterministic;          /* the backward: params.deterministic */
  float dropout_p;
  int write_dropout_mask;
  int write_lse;
  int extras;                 /* softcap, ALiBi, sinks or dropout: the EXTRAS kernels */
  int aligned; /* q, k, v and out pointers 16-byte aligned and their strides multiples of 16 elements */
  /* Each tensor as the kernels see it, 4-d [batch, seqlen, heads, head_dim] (varlen: batch stride 0
   * and seqlen the max_seqlen), and lse as [batch, heads_q, seqlen_q]. */
  aotk_tensor q, k, v, out, lse, dout, dq, dk, dv;
} aotk__attn_problem;

/* Validates the caller's params (copying them into *params, zero-extended to the current struct) and
 * fills *problem. Touches no driver. */
aotk_status aotk__attn_validate(const aotk_attn_params *caller_params, aotk_attn_params *params,
                                aotk__attn_problem *problem);

/* The backward's validation: the forward's, plus dout, dq, dk, dv, a required lse and the flag. */
aotk_status aotk__attn_bwd_validate(const aotk_attn_params *caller_params, aotk_attn_params *params,
                                    aotk__attn_problem *problem);

/* The backward's workspace rows per (batch, head): seqlen_q padded to a multiple of 128 (aotk_attn.c
 * lays the workspace out), and the pre-pass's rows per program; validation bounds the pre-pass grid
 * with both. */
#define AOTK__ATTN_BWD_PREPROCESS_BLOCK_M 64
int64_t aotk__attn_bwd_stats_stride(const aotk__attn_problem *problem);

#endif /* AOTK_ATTN_H */
