/* Decoding's and the merge's internal interface: the validated problems, which aotk_decode_validate.c
 * fills and aotk_decode.c plans and launches. */
#ifndef AOTK_DECODE_H
#define AOTK_DECODE_H

#include <stdint.h>

#include "aotk.h"

typedef struct aotk__decode_problem {
  aotk_dtype dtype;
  int64_t batch, seqlen_q, heads_q, heads_kv, group_size;
  int64_t head_dim_qk, head_dim_v;
  int paged;
  int64_t capacity;      /* keys a request can hold: the contiguous cache's length, or pages x page_size */
  int64_t page_size;     /* paged only */
  int64_t size_hint;     /* max_seqlen_k, or the capacity: what the split choice plans for */
  float softmax_scale;   /* resolved */
  int causal;
  int32_t window_left, window_right; /* resolved: causal makes window_right 0 */
  float softcap;
  int alibi;
  int64_t alibi_batch_stride;
  int sinks;
  int write_lse;
  int32_t num_splits_asked; /* 0: aotk chooses */
  int append;               /* k_new and v_new given: attn_cache_append writes them first */
  int varlen;               /* cu_seqlens_q given: packed q, out [total_q, ...], lse [heads_q, total_q] */
  int64_t total_q;          /* varlen: q.shape[0] */
  int64_t seqlen_new;       /* their tokens per request; 0 without */
  int leftpad;              /* cache_leftpad given: request b's keys start at cache_leftpad[b] */
  int offset32;             /* every element offset of k_cache and v_cache is below 2^31 (the 32-bit row lookup) */
} aotk__decode_problem;

/* Validates the caller's params (copying them into *params) and fills *p. Touches no driver. */
aotk_status aotk__decode_validate(const aotk_decode_params *caller_params, aotk_decode_params *params,
                                  aotk__decode_problem *p);

typedef struct aotk__merge_problem {
  int packed;                      /* rank 4 partials: [num_partials, total_q, heads, head_dim] */
  int64_t num_partials, batch, seqlen_q, heads, head_dim;
  int write_lse, sinks, aligned;
} aotk__merge_problem;

/* The merge's validation, likewise. */
aotk_status aotk__merge_validate(const aotk_merge_params *caller_params, aotk_merge_params *params,
                                 aotk__merge_problem *p);

#endif /* AOTK_DECODE_H */
