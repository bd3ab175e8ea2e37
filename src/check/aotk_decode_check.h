/* Checking decoding (aotk_attn_decode) and the merge of partial attentions (aotk_attn_merge) on the GPU
 * against the float64 reference of aotk_decode_reference.h: one case at a time, for aotk_self_test().
 * (tests/test_decode_gpu.c runs a larger matrix with its own runner: strided layouts, packed queries,
 * CUDA graphs, identities between runs, refusals.) Not a launch path: it allocates and synchronizes. */
#ifndef AOTK_DECODE_CHECK_H
#define AOTK_DECODE_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "aotk.h"
#include "aotk_driver.h"

/* The most requests of a decoding case, and partials of a merge case. */
#define AOTK__DECODE_CHECK_MAX_BATCH 16
#define AOTK__MERGE_CHECK_MAX_PARTIALS 8
/* A cache_seqlens entry drawn at random from [1, capacity - seqlen_new] (1 when that is empty). */
#define AOTK__DECODE_CHECK_RANDOM_LENGTH INT32_MIN

/*
 * One decoding case: fresh N(0, 1) q, caches and new keys in the dtype; contiguous tensors (q, out
 * [batch, seqlen_q, heads_q, head_dim], lse [batch, heads_q, seqlen_q]), heads_q = heads_kv * group.
 *
 * The cache is contiguous [batch, capacity, heads_kv, d] (page_size 0) or paged: capacity rounded up
 * to whole pages of page_size keys, batch * pages_per_seq pages in shuffled order, each request's
 * block-table row naming its pages. Every cache row at or past a request's cache_seqlens entry (clamped
 * to [0, capacity]) holds NaN before the call, so a kernel that reads a key it must not makes NaNs, not
 * small errors. Appending (seqlen_new > 0): k_new and v_new are written by the call at positions
 * max(cache_seqlens[b], 0) + i below the capacity, and the request attends to L_b = min(that + seqlen_new,
 * capacity) keys; afterwards both caches must hold exactly their first bytes with those rows replaced by
 * k_new and v_new's (without appending: their first bytes).
 */
typedef struct aotk__decode_check_case {
  aotk_dtype dtype;
  int64_t head_dim_qk, head_dim_v;
  int64_t batch, heads_kv, group, seqlen_q;
  int64_t capacity;
  int64_t page_size;  /* 0: contiguous */
  int64_t seqlen_new; /* 0: no appending */
  int32_t cache_seqlens[AOTK__DECODE_CHECK_MAX_BATCH]; /* as passed (outside [0, capacity] allowed: it clamps) */
  int leftpad;                                         /* cache_leftpad given (contiguous caches: its rows NaN) */
  int32_t cache_leftpad[AOTK__DECODE_CHECK_MAX_BATCH];
  int causal;
  int window; /* 0: no window (-1, -1 passed); 1: window_left, window_right as given (-1: unbounded) */
  int32_t window_left, window_right;
  float softcap; /* 0: off */
  int alibi;     /* 0: off; 1: random slopes [heads_q]; 2: [batch, heads_q] */
  int sinks;     /* random sinks [heads_q] */
  int32_t num_splits;
  int expect_split; /* the query must report more than one split: the case is there to run the merge */
  uint64_t seed;
  aotk_stream stream;
} aotk__decode_check_case;

/*
 * One merge case: num_partials partials of random attention rows (`keys` keys, scores N(0, 4), values
 * N(0, 1), dealt at random among the partials, each partial's float64 attention stored in
 * partial_dtype, lse in float32), merged into out_dtype; contiguous [num_partials, batch, seqlen_q,
 * heads, head_dim] partials, lse [num_partials, batch, heads, seqlen_q]. Rows with row % 5 == 2 have one
 * partial with no key (lse -inf, out NaN: it must add nothing); rows with row % 7 == 3 have no key at
 * all (out 0, lse -inf exactly).
 */
typedef struct aotk__merge_check_case {
  aotk_dtype partial_dtype, out_dtype;
  int64_t num_partials, batch, seqlen_q, heads, head_dim, keys;
  int with_lse;
  uint64_t seed;
  aotk_stream stream;
} aotk__merge_check_case;

/*
 * The error rule is the dense cases' (aotk_check.h) over every element of out: max |gpu - float64| <=
 * 2 x max |same-precision emulation - float64| + AOTK__CHECK_ERROR_FLOOR; lse within AOTK__CHECK_LSE_ABS
 * + AOTK__CHECK_LSE_REL |lse|. Rows that see no key must give out = 0 exactly and lse = -inf exactly
 * (with a sink: lse = the sink, within the tolerance).
 */
typedef struct aotk__decode_check_result {
  int passed;
  double max_error;      /* max |out - float64 reference| */
  double lowp_max_error; /* the same for the same-precision emulation */
  double bound;          /* 2 x lowp_max_error + AOTK__CHECK_ERROR_FLOOR */
  double lse_max_error;  /* max |lse - reference| in units of its tolerance over rows with a finite reference */
  int64_t rows;          /* (request or row, token, head) rows compared */
  int64_t empty_rows, bad_empty_rows; /* rows that see no key; those whose out is not 0 or lse not the reference's */
  int64_t bad_lse;                    /* -inf where the reference is finite, or the other way */
  int64_t unwritten;                  /* output elements (out, lse) still holding the poison after the call */
  int64_t clobbered;                  /* poisoned bytes after out and lse that the call overwrote */
  int64_t cache_mismatches;           /* decoding: cache elements unlike what the call should leave */
  int wrong_kernel;                   /* decoding: the query named another family than the cache's, or did not
                                         split where expect_split */
  int32_t num_splits, launches;
  size_t workspace_bytes;
  uint32_t features;
  char kernel_name[96];
  char detail[400];
} aotk__decode_check_result;

/* Runs one decoding case: allocates, poisons out and lse (and the bytes after them) and the workspace
 * aotk_decode_query reports (exactly that many bytes: 0xff, NaN), calls aotk_attn_decode on c->stream,
 * synchronizes, downloads out, lse and both caches and compares. Frees everything on every path. Returns
 * the aotk or driver status of the run itself (AOTK_OK when it ran; whether the numbers pass is
 * r->passed); AOTK_ERROR_INVALID_VALUE for a case it cannot describe. Uses the context current on the
 * thread. */
aotk_status aotk__check_decode(const aotk__driver *driver, const aotk__decode_check_case *c, aotk__decode_check_result *r);

/* Runs one merge case as above with aotk_attn_merge (kernel_name: aotk_merge_query's; cache_mismatches,
 * wrong_kernel unused). */
aotk_status aotk__check_merge(const aotk__driver *driver, const aotk__merge_check_case *c, aotk__decode_check_result *r);

#endif /* AOTK_DECODE_CHECK_H */
