/*
 * tests/test_decode_gpu.c's cases: the matrix of decoding problems (decode_rows) and, for one case, its
 * tensors on the device: q, the caches (contiguous or paged, with shuffled block tables and spare pages),
 * the lengths as passed, the appended tokens, packed queries, ALiBi slopes and sinks, poisoned where no
 * read should reach, and the caches' bytes as a call must leave them. Static functions, included once.
 */
#ifndef DECODE_GPU_CASES_H
#define DECODE_GPU_CASES_H

#include "aotk_decode_reference.h"
#include "aotk_gpu_buffers.h"
#include "aotk_random.h"

enum { MAX_BATCH = 16, SPARE_PAGES = 2 };

/* ---- decoding: cases ---------------------------------------------------------------------------- */

typedef enum lengths_kind {
  LENGTHS_MIXED,  /* per request, in turn: random in [capacity/2, capacity], 0, capacity, 1, capacity + 5,
                     seqlen_q - 1 (2 when seqlen_q is 1), -3, random in [1, capacity] */
  LENGTHS_RANDOM, /* random in [1, capacity] */
  LENGTHS_FULL,   /* capacity */
  LENGTHS_SHORT,  /* random in [0, seqlen_q]: most tokens at negative positions */
  LENGTHS_APPEND, /* (appending) per request, in turn: random in [0, capacity - seqlen_new], 0,
                     capacity - ceil(seqlen_new / 2) (crosses the capacity), capacity (nothing written),
                     random in [seqlen_new, capacity], -3, capacity + 5. The requests after the crossing
                     one and the full one hold old keys in their first seqlen_new rows, which their own
                     appends do not cover: a token written at the capacity of a contiguous cache lands
                     there, and so does one written through the block table's next entry (the next
                     request's first page). */
  LENGTHS_HUGE,   /* (appending) per request, in turn: INT32_MAX, INT32_MAX - 1, random in
                     [0, capacity - seqlen_new]: max(cache_seqlens, 0) + seqlen_new exceeds int32 */
  LENGTHS_PREFILL, /* (packed queries) per request, in turn, len_q and L_b: 0 and random in [0, capacity];
                      1 and random in [1, capacity]; 17 and random in [17, capacity]; min(100, seqlen_q)
                      and exactly that (a prefill from an empty cache); seqlen_q (max_seqlen_q) and random
                      in [seqlen_q, capacity]; 5 and 2 (len_q > L_b: the first 3 tokens sit before
                      position 0); then 3 pad rows after cu_seqlens_q[batch] */
} lengths_kind;

static const char *const lengths_names[] = {"mixed", "random", "full", "short", "append", "huge", "prefill"};

enum {
  EXTRA_SPLITS = 1,     /* also num_splits 1 and 3, against each other */
  EXTRA_GRAPH = 2,      /* also captured in a graph, replayed with new lengths */
  EXTRA_AUTO_SPLIT = 4, /* the automatic choice must split */
};

typedef struct decode_case {
  aotk_dtype dtype;
  int64_t head_dim_qk, head_dim_v, batch, heads_kv, group, seqlen_q, capacity, page_size; /* page_size 0: contiguous */
  int64_t seqlen_new; /* > 0: k_new and v_new of that many tokens per request are appended */
  int varlen;         /* packed queries (cu_seqlens_q, max_seqlen_q = seqlen_q): LENGTHS_PREFILL */
  lengths_kind lengths;
  int causal;
  int32_t window_left, window_right;
  float softcap, softmax_scale;
  int alibi; /* 0: off; 1: slopes [heads_q]; 2: [batch, heads_q] */
  int sinks, with_lse, padded;
  int leftpad; /* cache_leftpad, per request in turn: 0, random in [1, L_b / 2], L_b (no key), -2, random in
                  [L_b / 2, L_b]; the padding rows hold NaN in a contiguous cache (never read), random
                  values in a paged one (read, never attended) */
  int32_t num_splits, max_seqlen_k;
  unsigned extra;
  uint64_t seed;
  char name[320];
} decode_case;

/* One row of the matrix; window 0 means none (-1, -1 passed). */
typedef struct decode_row {
  int bf16;
  int64_t dqk, dv, batch, heads_kv, group, seqlen_q, capacity, page_size, seqlen_new;
  int varlen; /* seqlen_q is then max_seqlen_q */
  lengths_kind lengths;
  int causal, window;
  int32_t window_left, window_right;
  float softcap;
  int alibi, sinks, lse, padded;
  int32_t num_splits, max_seqlen_k;
  unsigned extra;
  int scaled, leftpad;
} decode_row;

static const decode_row decode_rows[] = {
    /* Every head-dim pair in both dtypes; page sizes 1, 3, 16, 64, 256; GQA 1..32, MQA, row chunks. */
    /* 32 rows a group (G = 8 x 4 tokens) over a contiguous cache, 64 groups: the 32-row tile would split
     * on 132 SMs, so the 16-row one runs them in two row chunks, unsplit (plan_decode). */
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 16, .heads_kv = 4, .group = 8, .seqlen_q = 4, .capacity = 700,
     .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 1, .capacity = 300,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .extra = EXTRA_SPLITS},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 3, .heads_kv = 4, .group = 1, .seqlen_q = 2, .capacity = 200,
     .lengths = LENGTHS_RANDOM, .num_splits = 1},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 7, .heads_kv = 2, .group = 8, .seqlen_q = 1, .capacity = 517,
     .page_size = 3, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .num_splits = 3},
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 8, .heads_kv = 1, .group = 16, .seqlen_q = 4, .capacity = 600,
     .page_size = 64, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1},
    {.bf16 = 0, .dqk = 256, .dv = 256, .batch = 2, .heads_kv = 2, .group = 4, .seqlen_q = 5, .capacity = 700,
     .lengths = LENGTHS_RANDOM, .causal = 1, .lse = 1, .num_splits = 7},
    {.bf16 = 1, .dqk = 256, .dv = 256, .batch = 7, .heads_kv = 1, .group = 8, .seqlen_q = 2, .capacity = 256,
     .page_size = 256, .lengths = LENGTHS_MIXED, .lse = 1},
    {.bf16 = 0, .dqk = 192, .dv = 128, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 3, .capacity = 130,
     .page_size = 1, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1},
    {.bf16 = 1, .dqk = 192, .dv = 128, .batch = 2, .heads_kv = 1, .group = 32, .seqlen_q = 3, .capacity = 500,
     .lengths = LENGTHS_RANDOM, .causal = 1, .lse = 1, .num_splits = 3},
    {.bf16 = 0, .dqk = 80, .dv = 80, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 16, .capacity = 300,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .extra = EXTRA_SPLITS},
    {.bf16 = 1, .dqk = 80, .dv = 80, .batch = 3, .heads_kv = 2, .group = 1, .seqlen_q = 16, .capacity = 100,
     .lengths = LENGTHS_SHORT, .causal = 1, .lse = 1},
    {.bf16 = 0, .dqk = 256, .dv = 128, .batch = 3, .heads_kv = 2, .group = 2, .seqlen_q = 2, .capacity = 400,
     .page_size = 16, .lengths = LENGTHS_RANDOM, .causal = 1, .lse = 1},
    {.bf16 = 1, .dqk = 32, .dv = 32, .batch = 7, .heads_kv = 3, .group = 3, .seqlen_q = 5, .capacity = 128,
     .page_size = 64, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1},
    {.bf16 = 1, .dqk = 40, .dv = 40, .batch = 3, .heads_kv = 2, .group = 4, .seqlen_q = 2, .capacity = 150,
     .page_size = 3, .lengths = LENGTHS_RANDOM, .causal = 1, .lse = 1, .padded = 1},
    {.bf16 = 0, .dqk = 96, .dv = 64, .batch = 7, .heads_kv = 2, .group = 2, .seqlen_q = 1, .capacity = 333,
     .lengths = LENGTHS_MIXED, .lse = 1, .padded = 1, .num_splits = 3},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 7, .heads_kv = 2, .group = 8, .seqlen_q = 2, .capacity = 1000,
     .page_size = 64, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .padded = 1, .scaled = 1},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 7, .heads_kv = 2, .group = 8, .seqlen_q = 16, .capacity = 200,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .num_splits = 3},
    /* Windows. */
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 5, .capacity = 400,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .window = 1, .window_left = 37, .window_right = -1,
     .lse = 1, .num_splits = 3},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 4, .heads_kv = 2, .group = 4, .seqlen_q = 4, .capacity = 300,
     .lengths = LENGTHS_RANDOM, .window = 1, .window_left = 20, .window_right = 3, .lse = 1},
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 3, .heads_kv = 1, .group = 4, .seqlen_q = 3, .capacity = 250,
     .page_size = 64, .lengths = LENGTHS_SHORT, .window = 1, .window_left = -1, .window_right = 5, .lse = 1},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 7, .heads_kv = 2, .group = 2, .seqlen_q = 16, .capacity = 200,
     .page_size = 3, .lengths = LENGTHS_MIXED, .causal = 1, .window = 1, .window_left = 0, .window_right = -1,
     .lse = 1, .num_splits = 3},
    /* Softcap, ALiBi, sinks. */
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 4, .heads_kv = 2, .group = 4, .seqlen_q = 2, .capacity = 500,
     .page_size = 3, .lengths = LENGTHS_RANDOM, .causal = 1, .softcap = 30.0f, .lse = 1, .num_splits = 3},
    {.bf16 = 1, .dqk = 256, .dv = 256, .batch = 3, .heads_kv = 1, .group = 4, .seqlen_q = 1, .capacity = 300,
     .lengths = LENGTHS_MIXED, .softcap = 5.0f, .lse = 1},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 2, .capacity = 300,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .alibi = 1, .lse = 1},
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 4, .heads_kv = 2, .group = 2, .seqlen_q = 3, .capacity = 400,
     .lengths = LENGTHS_RANDOM, .window = 1, .window_left = 50, .window_right = 10, .alibi = 2, .lse = 1,
     .num_splits = 3},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 8, .heads_kv = 2, .group = 4, .seqlen_q = 3, .capacity = 300,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .sinks = 1, .lse = 1, .num_splits = 1},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 7, .heads_kv = 1, .group = 8, .seqlen_q = 2, .capacity = 512,
     .page_size = 1, .lengths = LENGTHS_MIXED, .causal = 1, .sinks = 1, .lse = 1, .num_splits = 7},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 4, .heads_kv = 2, .group = 2, .seqlen_q = 5, .capacity = 1000,
     .page_size = 16, .lengths = LENGTHS_SHORT, .causal = 1, .sinks = 1, .lse = 1, .num_splits = 3},
    /* Everything together. */
    {.bf16 = 1, .dqk = 192, .dv = 128, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 3, .capacity = 400,
     .page_size = 3, .lengths = LENGTHS_MIXED, .causal = 1, .window = 1, .window_left = 64, .window_right = -1,
     .softcap = 20.0f, .alibi = 2, .sinks = 1, .lse = 1, .num_splits = 3, .extra = EXTRA_SPLITS},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 7, .heads_kv = 1, .group = 8, .seqlen_q = 2, .capacity = 300,
     .lengths = LENGTHS_MIXED, .window = 1, .window_left = 30, .window_right = 7, .softcap = 10.0f, .alibi = 1,
     .sinks = 1, .padded = 1, .num_splits = 1},
    /* The split: automatic at 8192 keys, hints below the lengths, exactly 7, the most (256 asked). */
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 1, .heads_kv = 2, .group = 8, .seqlen_q = 1, .capacity = 8192,
     .lengths = LENGTHS_FULL, .causal = 1, .lse = 1, .extra = EXTRA_AUTO_SPLIT | EXTRA_SPLITS},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 2, .heads_kv = 1, .group = 4, .seqlen_q = 2, .capacity = 8192,
     .page_size = 256, .lengths = LENGTHS_RANDOM, .causal = 1, .sinks = 1, .lse = 1, .extra = EXTRA_AUTO_SPLIT},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 3, .heads_kv = 2, .group = 4, .seqlen_q = 1, .capacity = 1000,
     .lengths = LENGTHS_RANDOM, .causal = 1, .lse = 1, .max_seqlen_k = 100, .extra = EXTRA_SPLITS},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 7, .heads_kv = 2, .group = 2, .seqlen_q = 2, .capacity = 2000,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .num_splits = 3, .max_seqlen_k = 200},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 3, .heads_kv = 2, .group = 4, .seqlen_q = 1, .capacity = 448,
     .lengths = LENGTHS_FULL, .lse = 1, .num_splits = 7},
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 1, .heads_kv = 2, .group = 2, .seqlen_q = 2, .capacity = 4096,
     .page_size = 64, .lengths = LENGTHS_FULL, .causal = 1, .sinks = 1, .lse = 1, .num_splits = 256},
    /* CUDA graphs replayed with new lengths. */
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 4, .heads_kv = 2, .group = 4, .seqlen_q = 2, .capacity = 1024,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .extra = EXTRA_GRAPH},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 3, .heads_kv = 2, .group = 2, .seqlen_q = 1, .capacity = 300,
     .lengths = LENGTHS_RANDOM, .causal = 1, .sinks = 1, .lse = 1, .num_splits = 1, .extra = EXTRA_GRAPH},
    /* A batch of 16 x 8 kv heads. */
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 16, .heads_kv = 8, .group = 1, .seqlen_q = 1, .capacity = 256,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1},
    /* Appending: contiguous and paged (1, 16, 64), seqlen_new = seqlen_q (1, 4) or not (3 for 1, 2 for 4),
     * splits, a graph, and lengths past int32 once the new tokens are added. */
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 1, .capacity = 300,
     .seqlen_new = 1, .lengths = LENGTHS_APPEND, .causal = 1, .lse = 1, .extra = EXTRA_SPLITS},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 4, .capacity = 200,
     .page_size = 16, .seqlen_new = 4, .lengths = LENGTHS_APPEND, .causal = 1, .lse = 1, .num_splits = 3},
    {.bf16 = 0, .dqk = 192, .dv = 128, .batch = 7, .heads_kv = 1, .group = 8, .seqlen_q = 4, .capacity = 130,
     .page_size = 1, .seqlen_new = 4, .lengths = LENGTHS_APPEND, .causal = 1, .lse = 1},
    {.bf16 = 1, .dqk = 256, .dv = 128, .batch = 7, .heads_kv = 2, .group = 2, .seqlen_q = 1, .capacity = 256,
     .page_size = 64, .seqlen_new = 3, .lengths = LENGTHS_APPEND, .causal = 1, .lse = 1, .num_splits = 3},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 4, .heads_kv = 2, .group = 1, .seqlen_q = 4, .capacity = 100,
     .seqlen_new = 2, .lengths = LENGTHS_APPEND, .causal = 1, .padded = 1},
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 4, .heads_kv = 2, .group = 4, .seqlen_q = 1, .capacity = 1024,
     .page_size = 16, .seqlen_new = 1, .lengths = LENGTHS_APPEND, .causal = 1, .lse = 1, .extra = EXTRA_GRAPH},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 3, .heads_kv = 1, .group = 2, .seqlen_q = 1, .capacity = 100,
     .seqlen_new = 2, .lengths = LENGTHS_HUGE, .causal = 1, .lse = 1},
    /* The cases above append inside the decoding kernel (one row chunk a group, at most 16 new tokens);
     * these two through the separate append kernel: 20 new tokens, and a group of two row chunks. */
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 5, .heads_kv = 2, .group = 4, .seqlen_q = 1, .capacity = 300,
     .page_size = 16, .seqlen_new = 20, .lengths = LENGTHS_APPEND, .causal = 1, .lse = 1},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 3, .heads_kv = 2, .group = 8, .seqlen_q = 16, .capacity = 400,
     .seqlen_new = 16, .lengths = LENGTHS_APPEND, .causal = 1, .lse = 1, .extra = EXTRA_SPLITS},
    /* Packed queries (cu_seqlens_q): a prefill over the cache, contiguous and paged (1, 16, 64), up to 300
     * tokens per request, GQA 1 and 4, causal and not, windows, sinks, a graph replayed with new lengths. */
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 6, .heads_kv = 2, .group = 4, .seqlen_q = 300, .capacity = 2000,
     .page_size = 16, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .lse = 1},
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 6, .heads_kv = 4, .group = 1, .seqlen_q = 120, .capacity = 700,
     .page_size = 1, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .window = 1, .window_left = 100,
     .window_right = -1, .lse = 1, .extra = EXTRA_SPLITS},
    {.bf16 = 0, .dqk = 192, .dv = 128, .batch = 6, .heads_kv = 1, .group = 4, .seqlen_q = 300, .capacity = 1500,
     .page_size = 64, .varlen = 1, .lengths = LENGTHS_PREFILL, .sinks = 1, .lse = 1},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 6, .heads_kv = 2, .group = 1, .seqlen_q = 200, .capacity = 3000,
     .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .sinks = 1, .lse = 1, .extra = EXTRA_GRAPH},
    {.bf16 = 1, .dqk = 192, .dv = 128, .batch = 6, .heads_kv = 2, .group = 4, .seqlen_q = 100, .capacity = 600,
     .varlen = 1, .lengths = LENGTHS_PREFILL, .window = 1, .window_left = 50, .window_right = 20, .lse = 1},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 6, .heads_kv = 2, .group = 4, .seqlen_q = 150, .capacity = 1000,
     .page_size = 16, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .padded = 1},
    /* The sm_90 paged prefill (the Gluon forward through the block table; the first packed row above takes
     * it too, and so does the (192, 128) one over 64-key pages): 64-row boxes from 64-key pages on, 16-row
     * ones below, a tile boundary (129 queries), GQA 8, sinks, a left window and none, non-causal, left
     * padding in a graph replayed with new lengths, head dims 256 and (192, 128), softcap, ALiBi. */
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 6, .heads_kv = 2, .group = 4, .seqlen_q = 300, .capacity = 2000,
     .page_size = 64, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .sinks = 1, .lse = 1},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 6, .heads_kv = 1, .group = 8, .seqlen_q = 129, .capacity = 1536,
     .page_size = 256, .varlen = 1, .lengths = LENGTHS_PREFILL, .window = 1, .window_left = 100, .window_right = -1,
     .lse = 1},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 6, .heads_kv = 2, .group = 2, .seqlen_q = 200, .capacity = 1024,
     .page_size = 32, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .lse = 1, .leftpad = 1,
     .extra = EXTRA_GRAPH},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 6, .heads_kv = 4, .group = 1, .seqlen_q = 256, .capacity = 900,
     .page_size = 128, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .window = 1, .window_left = 300,
     .window_right = -1, .sinks = 1},
    {.bf16 = 1, .dqk = 256, .dv = 256, .batch = 6, .heads_kv = 2, .group = 2, .seqlen_q = 200, .capacity = 1200,
     .page_size = 16, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .lse = 1, .leftpad = 1},
    {.bf16 = 0, .dqk = 192, .dv = 128, .batch = 6, .heads_kv = 2, .group = 4, .seqlen_q = 160, .capacity = 1024,
     .page_size = 256, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .lse = 1},
    /* Its EXTRAS rows: softcap (with a window), ALiBi per request (non-causal, sinks). */
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 6, .heads_kv = 2, .group = 4, .seqlen_q = 200, .capacity = 1500,
     .page_size = 16, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .window = 1, .window_left = 150,
     .window_right = -1, .softcap = 30.0f, .lse = 1},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 6, .heads_kv = 2, .group = 2, .seqlen_q = 256, .capacity = 1024,
     .page_size = 64, .varlen = 1, .lengths = LENGTHS_PREFILL, .alibi = 2, .sinks = 1, .lse = 1},
    /* The paged prefill's split keys (its tiles filling at most half the SMs; the 200- and 256-query rows
     * above over 1024-1200 keys split in 2 too, with left padding in a graph, at d256, and with ALiBi and
     * sinks): 4 splits of 1024 keys under a 300-key window (most splits empty for each tile), 2 at (192,
     * 128). */
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 2, .heads_kv = 1, .group = 8, .seqlen_q = 256, .capacity = 4000,
     .page_size = 16, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .window = 1, .window_left = 300,
     .window_right = -1, .sinks = 1, .lse = 1},
    {.bf16 = 0, .dqk = 192, .dv = 128, .batch = 2, .heads_kv = 2, .group = 4, .seqlen_q = 300, .capacity = 3000,
     .page_size = 64, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .lse = 1},
    /* Packed prefills of fewer than 64 queries. Where the decoding kernel would run its 64-row tile (G x
     * max_seqlen_q > 32) and the Gluon forward's tiles fit one wave: the decoding kernel's split while its
     * tiles are few (12 of them against the forward's 24, unsplit over 900 keys; 4 against 32 tiles in 2
     * forward splits; the first also with num_splits 1, which takes the paged prefill, against 3), the
     * paged prefill from 0.4 of the SMs' count (64 tiles against the forward's unsplit 128, with softcap
     * and sinks); the decoding kernel at 30 rows a group (G 1). */
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 3, .heads_kv = 2, .group = 4, .seqlen_q = 20, .capacity = 900,
     .page_size = 16, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .lse = 1, .extra = EXTRA_SPLITS},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 2, .heads_kv = 1, .group = 16, .seqlen_q = 5, .capacity = 1300,
     .page_size = 256, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .softcap = 20.0f, .sinks = 1, .lse = 1},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 8, .heads_kv = 1, .group = 16, .seqlen_q = 30, .capacity = 1300,
     .page_size = 256, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .softcap = 20.0f, .sinks = 1, .lse = 1},
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 4, .heads_kv = 4, .group = 1, .seqlen_q = 30, .capacity = 700,
     .page_size = 16, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .lse = 1},
    /* Left-padded caches (cache_leftpad): the automatic split (the short-split tile on sm_90) and 1 vs 3,
     * 16-key pages with a window and ALiBi, whole-block pages appending in a graph, a packed prefill. */
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 1, .capacity = 700,
     .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .leftpad = 1, .extra = EXTRA_SPLITS},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 6, .heads_kv = 2, .group = 2, .seqlen_q = 3, .capacity = 300,
     .page_size = 16, .lengths = LENGTHS_RANDOM, .causal = 1, .window = 1, .window_left = 40, .window_right = -1,
     .alibi = 1, .lse = 1, .leftpad = 1},
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 5, .heads_kv = 1, .group = 8, .seqlen_q = 2, .capacity = 512,
     .page_size = 64, .seqlen_new = 2, .lengths = LENGTHS_APPEND, .causal = 1, .sinks = 1, .lse = 1, .leftpad = 1,
     .extra = EXTRA_GRAPH},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 6, .heads_kv = 2, .group = 2, .seqlen_q = 100, .capacity = 600,
     .page_size = 1, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .lse = 1, .leftpad = 1},
};

static void make_decode_case(decode_case *c, const decode_row *row, int index) {
  memset(c, 0, sizeof *c);
  c->dtype = row->bf16 ? AOTK_DTYPE_BFLOAT16 : AOTK_DTYPE_FLOAT16;
  c->head_dim_qk = row->dqk;
  c->head_dim_v = row->dv;
  c->batch = row->batch;
  c->heads_kv = row->heads_kv;
  c->group = row->group;
  c->seqlen_q = row->seqlen_q;
  c->capacity = row->capacity;
  c->page_size = row->page_size;
  c->seqlen_new = row->seqlen_new;
  c->varlen = row->varlen;
  c->lengths = row->lengths;
  c->causal = row->causal;
  c->window_left = row->window ? row->window_left : -1;
  c->window_right = row->window ? row->window_right : -1;
  c->softcap = row->softcap;
  c->softmax_scale = row->scaled ? 0.3f : 0.0f;
  c->alibi = row->alibi;
  c->sinks = row->sinks;
  c->with_lse = row->lse;
  c->padded = row->padded;
  c->num_splits = row->num_splits;
  c->max_seqlen_k = row->max_seqlen_k;
  c->extra = row->extra;
  c->leftpad = row->leftpad;
  c->seed = seed + (uint64_t)index * 1000003u;
  char paging[32], extras[160] = "";
  if (c->page_size > 0) {
    snprintf(paging, sizeof paging, "paged(%lld)", (long long)c->page_size);
  } else {
    snprintf(paging, sizeof paging, "contiguous");
  }
  size_t used = 0;
#define APPEND(...)                                                                               \
  do {                                                                                            \
    int written = used < sizeof extras ? snprintf(extras + used, sizeof extras - used, __VA_ARGS__) : 0; \
    if (written > 0) used += (size_t)written;                                                    \
  } while (0)
  if (c->seqlen_new > 0) APPEND(" +append %lld", (long long)c->seqlen_new);
  if (c->varlen) APPEND(" packed (cu_seqlens_q)");
  if (row->window) APPEND(" window %d/%d", (int)c->window_left, (int)c->window_right);
  if (c->softcap > 0.0f) APPEND(" softcap %g", (double)c->softcap);
  if (c->alibi) APPEND(" alibi[%s]", c->alibi == 2 ? "b,h" : "h");
  if (c->sinks) APPEND(" sinks");
  if (c->max_seqlen_k > 0) APPEND(" hint %d", (int)c->max_seqlen_k);
  if (c->padded) APPEND(" padded");
  if (c->leftpad) APPEND(" leftpad");
  if (row->scaled) APPEND(" scale 0.3");
  if (c->extra & EXTRA_AUTO_SPLIT) APPEND(" +auto-split");
  if (c->extra & EXTRA_SPLITS) APPEND(" +splits 1 vs 3");
  if (c->extra & EXTRA_GRAPH) APPEND(" +graph");
#undef APPEND
  snprintf(c->name, sizeof c->name, "decode %s d=%lld/%lld b=%lld hkv=%lld G=%lld sq=%lld cap=%lld %s %s%s%s splits=%d%s",
           aotk_gpu_test_dtype_label(c->dtype), (long long)c->head_dim_qk, (long long)c->head_dim_v,
           (long long)c->batch, (long long)c->heads_kv, (long long)c->group, (long long)c->seqlen_q,
           (long long)c->capacity, paging, lengths_names[c->lengths], c->causal ? " causal" : "",
           c->with_lse ? " lse" : "", (int)c->num_splits, extras);
}

/* ---- decoding: one case's tensors ------------------------------------------------------------- */

typedef struct decode_run {
  const decode_case *c;
  int64_t heads_q, capacity, page_size, pages_per_seq, num_pages;
  int paged;
  float softmax_scale; /* resolved as the library does: 1/sqrt(head_dim_qk) in float32 */
  strided q, k, v, out, lse, k_new, v_new;
  buffer q_buffer, k_buffer, v_buffer, out_buffer, lse_buffer, k_new_buffer, v_new_buffer;
  /* The caches' bytes as first uploaded (every run starts from them), and as a call with the lengths
   * last given to expect_caches must leave them (the same bytes without appending). */
  void *k_initial, *v_initial, *k_expected, *v_expected;
  float *q_values, *k_values, *v_values; /* q and the expected caches as floats (exact), for the reference */
  int32_t *table;                        /* [batch, pages_per_seq] */
  int32_t seqlens[MAX_BATCH];            /* as passed: some outside [0, capacity] */
  int32_t replay_seqlens[MAX_BATCH];     /* the graph replay's */
  int32_t leftpad[MAX_BATCH];            /* cache_leftpad (with c->leftpad) */
  /* Packed queries: request b's len_q and first row (cu_seqlens_q), total_q (with the pad rows), and the
   * parts of out [total_q, heads_q, head_dim_v] and lse [heads_q, total_q] the call writes. */
  int32_t q_lengths[MAX_BATCH], cu_seqlens_q[MAX_BATCH + 1];
  int64_t total_q;
  strided out_written, lse_written;
  CUdeviceptr cu_seqlens_q_device;
  float *alibi, *sinks;
  CUdeviceptr table_device, seqlens_device, alibi_device, sinks_device, leftpad_device;
  aotk_decode_params params;
  /* The run as src/check/aotk_decode_reference.h sees it, with the lengths as passed (a reference for other
   * lengths swaps in its own cache_seqlens); its paging fields are set with the block table, the rest
   * once the inputs exist. */
  aotk__decode_reference_problem problem;
  uint64_t state;
} decode_run;

typedef struct decode_results {
  double *out; /* [batch, seqlen_q, heads_q, head_dim_v] */
  double *lse; /* [batch, heads_q, seqlen_q] */
} decode_results;

typedef struct decode_reference {
  double *out, *lse;
  float *lowp;   /* the same-precision emulation of out */
  int64_t *keys; /* keys each (batch, head, token) row sees, [batch, heads_q, seqlen_q] */
  double lowp_error, bound;
} decode_reference;

static int64_t out_count(const decode_run *x) {
  return x->c->batch * x->c->seqlen_q * x->heads_q * x->c->head_dim_v;
}
static int64_t row_count(const decode_run *x) { return x->c->batch * x->heads_q * x->c->seqlen_q; }

/* The row of q and out holding token `token` of request b: b * seqlen_q + token, or packed
 * cu_seqlens_q[b] + token. The results and references keep the dense [batch, seqlen_q, ...] order either
 * way; packed, a token at or past len_q_b is no row (out 0 and lse -inf there on both sides). */
static int64_t token_row(const decode_run *x, int64_t b, int64_t token) {
  return x->c->varlen ? x->cu_seqlens_q[b] + token : b * x->c->seqlen_q + token;
}

static int64_t clamp_length(const decode_run *x, int32_t length) {
  return length < 0 ? 0 : length > x->capacity ? x->capacity : length;
}

/* The keys request b attends to: L_b (include/aotk.h; the reference's rule). */
static int64_t attended_length(const decode_run *x, int32_t length) {
  return aotk__decode_reference_length(length, x->c->seqlen_new, x->capacity);
}

static int32_t draw_length(decode_run *x, int64_t b) {
  const int64_t cap = x->capacity, S = x->c->seqlen_q, N = x->c->seqlen_new;
  const int64_t room = cap > N ? cap - N : 0;
  switch (x->c->lengths) {
    case LENGTHS_FULL:
      return (int32_t)cap;
    case LENGTHS_SHORT:
      return (int32_t)aotk__random_int(&x->state, 0, S);
    case LENGTHS_RANDOM:
      return (int32_t)aotk__random_int(&x->state, 1, cap);
    case LENGTHS_APPEND: {
      const int32_t lengths[7] = {(int32_t)aotk__random_int(&x->state, 0, room), 0, (int32_t)(cap - (N + 1) / 2),
                                  (int32_t)cap, (int32_t)aotk__random_int(&x->state, N, cap), -3, (int32_t)cap + 5};
      return lengths[b % 7];
    }
    case LENGTHS_HUGE: {
      const int32_t lengths[3] = {INT32_MAX, INT32_MAX - 1, (int32_t)aotk__random_int(&x->state, 0, room)};
      return lengths[b % 3];
    }
    case LENGTHS_PREFILL: {
      const int64_t len_q = x->q_lengths[b];
      return (int32_t)(b % 6 == 3 ? len_q : b % 6 == 5 ? 2 : aotk__random_int(&x->state, len_q, cap));
    }
    case LENGTHS_MIXED:
      break;
  }
  switch (b % 8) {
    case 0:
      return (int32_t)aotk__random_int(&x->state, cap / 2, cap);
    case 1:
      return 0;
    case 2:
      return (int32_t)cap;
    case 3:
      return 1;
    case 4:
      return (int32_t)cap + 5;
    case 5:
      return S > 1 ? (int32_t)S - 1 : 2;
    case 6:
      return -3;
    default:
      return (int32_t)aotk__random_int(&x->state, 1, cap);
  }
}

/* Buffer index of element 0 of key `key` of request b, kv head h, in cache view `cache`: where the
 * reference reads it (through the block table when paged). */
static int64_t cache_index(const decode_run *x, const strided *cache, int64_t b, int64_t key, int64_t h) {
  return cache->offset + aotk__decode_reference_cache_row(&x->problem, cache->strides, b, key, h);
}

static float *float_copy(const buffer *b, aotk_dtype dtype) {
  float *values = host_alloc(b->elements, sizeof(float));
  if (values != NULL) {
    for (int64_t e = 0; e < b->elements; e++) values[e] = load_value(b, dtype, e);
  }
  return values;
}

static void *bytes_copy(const buffer *b) {
  void *copy = host_alloc(b->elements, b->element_size);
  if (copy != NULL) memcpy(copy, b->host, buffer_bytes(b));
  return copy;
}

/* The caches as a call with lengths `seqlens` must leave them: the first bytes, with new token i of
 * request b (k_new, v_new's bits, head-dim columns only) at position max(seqlens[b], 0) + i where that is
 * below the capacity; and their floats, which the reference reads. */
static void expect_caches(decode_run *x, const int32_t *seqlens) {
  const decode_case *c = x->c;
  const size_t size = x->k_buffer.element_size;
  memcpy(x->k_expected, x->k_initial, buffer_bytes(&x->k_buffer));
  memcpy(x->v_expected, x->v_initial, buffer_bytes(&x->v_buffer));
  for (int64_t b = 0; b < c->batch; b++)
    for (int64_t i = 0; i < c->seqlen_new; i++) {
      const int64_t position = aotk__decode_reference_append_start(seqlens[b]) + i;
      if (position >= x->capacity) break;
      for (int64_t h = 0; h < c->heads_kv; h++) {
        const int64_t new_row = (b * c->seqlen_new + i) * c->heads_kv + h; /* k_new[b, i, h] */
        memcpy((char *)x->k_expected + (size_t)cache_index(x, &x->k, b, position, h) * size,
               (const char *)x->k_new_buffer.host + (size_t)strided_at(&x->k_new, new_row * c->head_dim_qk) * size,
               (size_t)c->head_dim_qk * size);
        memcpy((char *)x->v_expected + (size_t)cache_index(x, &x->v, b, position, h) * size,
               (const char *)x->v_new_buffer.host + (size_t)strided_at(&x->v_new, new_row * c->head_dim_v) * size,
               (size_t)c->head_dim_v * size);
      }
    }
  for (int64_t e = 0; e < x->k_buffer.elements; e++) {
    x->k_values[e] = aotk__dtype_value(((const uint16_t *)x->k_expected)[e], c->dtype);
  }
  for (int64_t e = 0; e < x->v_buffer.elements; e++) {
    x->v_values[e] = aotk__dtype_value(((const uint16_t *)x->v_expected)[e], c->dtype);
  }
}

/* Every run starts from the caches as first uploaded, so that it writes (and is checked for) its own
 * append; without appending nothing writes them. */
static bool restore_caches(decode_run *x) {
  if (x->c->seqlen_new == 0) return true;
  memcpy(x->k_buffer.host, x->k_initial, buffer_bytes(&x->k_buffer));
  memcpy(x->v_buffer.host, x->v_initial, buffer_bytes(&x->v_buffer));
  return buffer_upload(&x->k_buffer) && buffer_upload(&x->v_buffer);
}

/* The caches, downloaded, against `k_want` and `v_want` byte for byte: the first difference named by its
 * block (request or page), row, kv head and column. */
static void check_caches_equal(decode_run *x, const void *k_want, const void *v_want, const char *label) {
  if (!buffer_download(&x->k_buffer) || !buffer_download(&x->v_buffer)) return;
  const buffer *buffers[2] = {&x->k_buffer, &x->v_buffer};
  const void *wanted[2] = {k_want, v_want};
  const strided *views[2] = {&x->k, &x->v};
  static const char *const names[2] = {"k_cache", "v_cache"};
  for (int t = 0; t < 2; t++) {
    const uint16_t *got = buffers[t]->host, *want = wanted[t];
    int64_t differences = 0, first = -1;
    for (int64_t e = 0; e < buffers[t]->elements; e++) {
      if (got[e] != want[e]) {
        if (first < 0) first = e;
        differences++;
      }
    }
    if (differences == 0) continue;
    const strided *view = views[t];
    const int64_t at = first - view->offset;
    CHECK_MSG(false,
              "%s: %s: %lld elements differ from what the call should leave, first at buffer element %lld "
              "(block %lld, row %lld, kv head %lld, column %lld): 0x%04x, expected 0x%04x",
              label, names[t], (long long)differences, (long long)first, (long long)(at / view->strides[0]),
              (long long)(at % view->strides[0] / view->strides[1]), (long long)(at % view->strides[1] / view->strides[2]),
              (long long)(at % view->strides[2]), (unsigned)got[first], (unsigned)want[first]);
  }
}

static void decode_run_destroy(decode_run *x) {
  buffer *buffers[] = {&x->q_buffer,   &x->k_buffer,     &x->v_buffer,    &x->out_buffer,
                       &x->lse_buffer, &x->k_new_buffer, &x->v_new_buffer};
  for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) buffer_destroy(buffers[i]);
  free(x->k_initial);
  free(x->v_initial);
  free(x->k_expected);
  free(x->v_expected);
  free(x->q_values);
  free(x->k_values);
  free(x->v_values);
  free(x->table);
  free(x->alibi);
  free(x->sinks);
  CUdeviceptr *devices[] = {&x->table_device, &x->seqlens_device, &x->alibi_device, &x->sinks_device,
                            &x->cu_seqlens_q_device, &x->leftpad_device};
  for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) aotk_gpu_test_free(devices[i]);
}

static bool decode_run_create(decode_run *x, const decode_case *c) {
  memset(x, 0, sizeof *x);
  x->c = c;
  x->state = c->seed;
  const aotk_dtype dtype = c->dtype;
  const int64_t B = c->batch, S = c->seqlen_q, HKV = c->heads_kv, HQ = c->heads_kv * c->group;
  const int64_t DQK = c->head_dim_qk, DV = c->head_dim_v;
  CHECK_MSG(B <= MAX_BATCH, "batch %lld > MAX_BATCH", (long long)B);
  if (B > MAX_BATCH) return false;
  x->heads_q = HQ;
  x->paged = c->page_size > 0;
  x->page_size = c->page_size;
  x->pages_per_seq = x->paged ? ceil_div(c->capacity, c->page_size) : 0;
  x->capacity = x->paged ? x->pages_per_seq * c->page_size : c->capacity;
  x->softmax_scale = c->softmax_scale != 0.0f ? c->softmax_scale : 1.0f / sqrtf((float)DQK);

  /* Lengths; the cache holds keys up to the longest length a run will use, NaN past it (appending: NaN
   * where the new keys go, unless a graph replay's longer length holds keys there). */
  int64_t filled[MAX_BATCH], reached[MAX_BATCH];
  if (c->varlen) {
    const int64_t pattern[6] = {0, 1, 17, S < 100 ? S : 100, S, 5};
    x->cu_seqlens_q[0] = 0;
    for (int64_t b = 0; b < B; b++) {
      x->q_lengths[b] = (int32_t)(pattern[b % 6] < S ? pattern[b % 6] : S);
      x->cu_seqlens_q[b + 1] = x->cu_seqlens_q[b] + x->q_lengths[b];
    }
    x->total_q = x->cu_seqlens_q[B] + 3;
  }
  for (int64_t b = 0; b < B; b++) {
    x->seqlens[b] = draw_length(x, b);
    x->replay_seqlens[b] = (int32_t)aotk__random_int(&x->state, -1, x->capacity + 2);
    filled[b] = clamp_length(x, x->seqlens[b]);
    reached[b] = attended_length(x, x->seqlens[b]);
    const int64_t replay = clamp_length(x, x->replay_seqlens[b]);
    if ((c->extra & EXTRA_GRAPH) && replay > filled[b]) filled[b] = replay;
    if ((c->extra & EXTRA_GRAPH) && attended_length(x, x->replay_seqlens[b]) > reached[b]) {
      reached[b] = attended_length(x, x->replay_seqlens[b]);
    }
    if (filled[b] > reached[b]) reached[b] = filled[b];
    if (c->leftpad) {
      const int64_t L = attended_length(x, x->seqlens[b]);
      const int32_t pads[5] = {0, (int32_t)aotk__random_int(&x->state, L > 1 ? 1 : 0, L / 2), (int32_t)L, -2,
                               (int32_t)aotk__random_int(&x->state, L / 2, L)};
      x->leftpad[b] = pads[b % 5];
    }
  }

  /* Pages: the ones a run reads or appends to, shuffled over all requests; slots past them point at
   * spare pages, which hold only NaN (and which no append may write). */
  if (x->paged) {
    int64_t used[MAX_BATCH], total = 0;
    for (int64_t b = 0; b < B; b++) total += used[b] = ceil_div(reached[b], c->page_size);
    x->num_pages = total + SPARE_PAGES;
    int32_t *order = host_alloc(x->num_pages, sizeof(int32_t));
    x->table = host_alloc(B * x->pages_per_seq, sizeof(int32_t));
    if (order == NULL || x->table == NULL) {
      free(order);
      return false;
    }
    for (int64_t p = 0; p < x->num_pages; p++) order[p] = (int32_t)p;
    aotk__random_shuffle_int32(order, x->num_pages, &x->state);
    int64_t next = 0;
    for (int64_t slot = 0; slot < x->pages_per_seq; slot++)
      for (int64_t b = 0; b < B; b++) {
        x->table[b * x->pages_per_seq + slot] =
            slot < used[b] ? order[next++] : order[total + aotk__random_int(&x->state, 0, SPARE_PAGES - 1)];
      }
    free(order);
    x->problem.block_table = x->table;
    x->problem.block_table_stride = x->pages_per_seq;
    x->problem.page_size = x->page_size;
  }

  const int64_t slack = c->padded ? 16 : 0;
  const int64_t cache_blocks = x->paged ? x->num_pages : B, cache_rows = x->paged ? c->page_size : x->capacity;
  const int64_t q_shape[4] = {B, S, HQ, DQK}, out_shape[4] = {B, S, HQ, DV}, lse_shape[3] = {B, HQ, S};
  const int64_t k_shape[4] = {cache_blocks, cache_rows, HKV, DQK}, v_shape[4] = {cache_blocks, cache_rows, HKV, DV};
  x->q = make_layout(4, q_shape, slack);
  x->k = make_layout(4, k_shape, slack);
  x->v = make_layout(4, v_shape, slack);
  x->out = make_layout(4, out_shape, slack);
  x->lse = make_layout(3, lse_shape, c->padded ? 3 : 0);
  x->out_written = x->out;
  x->lse_written = x->lse;
  if (c->varlen) { /* q, out [total_q, heads_q, d], lse [heads_q, total_q]; the pad rows written by no one */
    const int64_t packed_q[3] = {x->total_q, HQ, DQK}, packed_out[3] = {x->total_q, HQ, DV};
    const int64_t packed_lse[2] = {HQ, x->total_q};
    x->q = make_layout(3, packed_q, slack);
    x->out = make_layout(3, packed_out, slack);
    x->lse = make_layout(2, packed_lse, c->padded ? 3 : 0);
    x->out_written = x->out;
    x->out_written.shape[0] = x->cu_seqlens_q[B];
    x->lse_written = x->lse;
    x->lse_written.shape[1] = x->cu_seqlens_q[B];
  }
  if (!buffer_create(&x->q_buffer, strided_span(&x->q), 2) || !buffer_create(&x->k_buffer, strided_span(&x->k), 2) ||
      !buffer_create(&x->v_buffer, strided_span(&x->v), 2) ||
      !buffer_create(&x->out_buffer, strided_span(&x->out), 2) ||
      !buffer_create(&x->lse_buffer, strided_span(&x->lse), 4)) {
    return false;
  }

  /* Inputs N(0, 1) in the dtype; NaN in q's padding and in every cache element no run may read. */
  for (int64_t e = 0; e < x->q_buffer.elements; e++) store_value(&x->q_buffer, dtype, e, NAN);
  for (int64_t flat = 0; flat < strided_count(&x->q); flat++) {
    store_value(&x->q_buffer, dtype, strided_at(&x->q, flat), aotk__random_normal(&x->state));
  }
  for (int64_t e = 0; e < x->k_buffer.elements; e++) store_value(&x->k_buffer, dtype, e, NAN);
  for (int64_t e = 0; e < x->v_buffer.elements; e++) store_value(&x->v_buffer, dtype, e, NAN);
  for (int64_t b = 0; b < B; b++)
    for (int64_t key = c->leftpad && !x->paged && x->leftpad[b] > 0 ? x->leftpad[b] : 0; key < filled[b]; key++)
      for (int64_t h = 0; h < HKV; h++) {
        const int64_t k_row = cache_index(x, &x->k, b, key, h), v_row = cache_index(x, &x->v, b, key, h);
        for (int64_t d = 0; d < DQK; d++) store_value(&x->k_buffer, dtype, k_row + d, aotk__random_normal(&x->state));
        for (int64_t d = 0; d < DV; d++) store_value(&x->v_buffer, dtype, v_row + d, aotk__random_normal(&x->state));
      }
  /* The new keys and values N(0, 1); their padding a finite value the caches' padding (NaN) does not
   * hold, so that a padding column copied into the cache shows. */
  if (c->seqlen_new > 0) {
    const int64_t k_new_shape[4] = {B, c->seqlen_new, HKV, DQK}, v_new_shape[4] = {B, c->seqlen_new, HKV, DV};
    x->k_new = make_layout(4, k_new_shape, slack);
    x->v_new = make_layout(4, v_new_shape, slack);
    if (!buffer_create(&x->k_new_buffer, strided_span(&x->k_new), 2) ||
        !buffer_create(&x->v_new_buffer, strided_span(&x->v_new), 2)) {
      return false;
    }
    buffer *news[2] = {&x->k_new_buffer, &x->v_new_buffer};
    const strided *views[2] = {&x->k_new, &x->v_new};
    for (int t = 0; t < 2; t++) {
      for (int64_t e = 0; e < news[t]->elements; e++) store_value(news[t], dtype, e, 77.0f);
      for (int64_t flat = 0; flat < strided_count(views[t]); flat++) {
        store_value(news[t], dtype, strided_at(views[t], flat), aotk__random_normal(&x->state));
      }
    }
    if (!buffer_upload(&x->k_new_buffer) || !buffer_upload(&x->v_new_buffer)) return false;
  }
  x->k_initial = bytes_copy(&x->k_buffer);
  x->v_initial = bytes_copy(&x->v_buffer);
  x->k_expected = bytes_copy(&x->k_buffer);
  x->v_expected = bytes_copy(&x->v_buffer);
  x->q_values = float_copy(&x->q_buffer, dtype);
  x->k_values = host_alloc(x->k_buffer.elements, sizeof(float));
  x->v_values = host_alloc(x->v_buffer.elements, sizeof(float));
  if (x->k_initial == NULL || x->v_initial == NULL || x->k_expected == NULL || x->v_expected == NULL ||
      x->q_values == NULL || x->k_values == NULL || x->v_values == NULL) {
    return false;
  }
  expect_caches(x, x->seqlens);
  if (!buffer_upload(&x->q_buffer) || !buffer_upload(&x->k_buffer) || !buffer_upload(&x->v_buffer)) return false;
  if (!aotk_gpu_test_upload(&x->seqlens_device, x->seqlens, (size_t)B * sizeof(int32_t))) return false;
  if (x->paged && !aotk_gpu_test_upload(&x->table_device, x->table, (size_t)(B * x->pages_per_seq) * sizeof(int32_t))) return false;
  if (c->alibi) {
    const int64_t count = c->alibi == 2 ? B * HQ : HQ;
    x->alibi = host_alloc(count, sizeof(float));
    if (x->alibi == NULL) return false;
    for (int64_t i = 0; i < count; i++) x->alibi[i] = (float)(0.25 * aotk__random_uniform(&x->state));
    if (!aotk_gpu_test_upload(&x->alibi_device, x->alibi, (size_t)count * sizeof(float))) return false;
  }
  if (c->sinks) {
    x->sinks = host_alloc(HQ, sizeof(float));
    if (x->sinks == NULL) return false;
    for (int64_t h = 0; h < HQ; h++) x->sinks[h] = 1.5f * aotk__random_normal(&x->state);
    x->sinks[0] = 4.0f; /* one sink that outweighs most rows' keys */
    if (!aotk_gpu_test_upload(&x->sinks_device, x->sinks, (size_t)HQ * sizeof(float))) return false;
  }

  aotk__decode_reference_problem *problem = &x->problem;
  problem->batch = B;
  problem->seqlen_q = S;
  problem->heads_q = HQ;
  problem->heads_kv = HKV;
  problem->head_dim_qk = DQK;
  problem->head_dim_v = DV;
  problem->q = x->q_values + x->q.offset;
  if (c->varlen) { /* [total_q, heads_q, head_dim_qk]: rows cu_seqlens_q[b] + token */
    problem->cu_seqlens_q = x->cu_seqlens_q;
    problem->q_strides[1] = x->q.strides[0];
    problem->q_strides[2] = x->q.strides[1];
  } else {
    for (int i = 0; i < 3; i++) problem->q_strides[i] = x->q.strides[i];
  }
  problem->k_cache = x->k_values + x->k.offset;
  problem->v_cache = x->v_values + x->v.offset;
  for (int i = 0; i < 3; i++) {
    problem->k_strides[i] = x->k.strides[i];
    problem->v_strides[i] = x->v.strides[i];
  }
  problem->capacity = x->capacity;
  problem->cache_seqlens = x->seqlens;
  problem->seqlen_new = c->seqlen_new;
  problem->softmax_scale = x->softmax_scale;
  problem->causal = c->causal;
  problem->window_left = c->window_left;
  problem->window_right = c->window_right;
  problem->softcap = c->softcap;
  problem->alibi_slopes = x->alibi;
  problem->alibi_batch_stride = c->alibi == 2 ? HQ : 0;
  problem->sinks = x->sinks;
  problem->cache_leftpad = c->leftpad ? x->leftpad : NULL;
  problem->dtype = (int)dtype;

  aotk_decode_params params = AOTK_DECODE_PARAMS_INIT;
  params.q = tensor_of(&x->q_buffer, &x->q, dtype);
  params.k_cache = tensor_of(&x->k_buffer, &x->k, dtype);
  params.v_cache = tensor_of(&x->v_buffer, &x->v, dtype);
  if (x->paged) {
    params.block_table = aotk_tensor_2d((void *)(uintptr_t)x->table_device, AOTK_DTYPE_INT32, B, x->pages_per_seq);
  }
  params.cache_seqlens = aotk_tensor_1d((void *)(uintptr_t)x->seqlens_device, AOTK_DTYPE_INT32, B);
  params.out = tensor_of(&x->out_buffer, &x->out, dtype);
  if (c->with_lse) params.lse = tensor_of(&x->lse_buffer, &x->lse, AOTK_DTYPE_FLOAT32);
  params.softmax_scale = c->softmax_scale;
  params.causal = c->causal;
  params.window_left = c->window_left;
  params.window_right = c->window_right;
  params.softcap = c->softcap;
  if (c->alibi == 1) params.alibi_slopes = aotk_tensor_1d((void *)(uintptr_t)x->alibi_device, AOTK_DTYPE_FLOAT32, HQ);
  if (c->alibi == 2) {
    params.alibi_slopes = aotk_tensor_2d((void *)(uintptr_t)x->alibi_device, AOTK_DTYPE_FLOAT32, B, HQ);
  }
  if (c->sinks) params.sinks = aotk_tensor_1d((void *)(uintptr_t)x->sinks_device, AOTK_DTYPE_FLOAT32, HQ);
  params.num_splits = c->num_splits;
  params.max_seqlen_k = c->max_seqlen_k;
  if (c->leftpad) {
    if (!aotk_gpu_test_upload(&x->leftpad_device, x->leftpad, (size_t)B * sizeof(int32_t))) return false;
    params.cache_leftpad = aotk_tensor_1d((void *)(uintptr_t)x->leftpad_device, AOTK_DTYPE_INT32, B);
  }
  if (c->seqlen_new > 0) {
    params.k_new = tensor_of(&x->k_new_buffer, &x->k_new, dtype);
    params.v_new = tensor_of(&x->v_new_buffer, &x->v_new, dtype);
  }
  if (c->varlen) {
    if (!aotk_gpu_test_upload(&x->cu_seqlens_q_device, x->cu_seqlens_q, (size_t)(B + 1) * sizeof(int32_t))) return false;
    params.cu_seqlens_q = aotk_tensor_1d((void *)(uintptr_t)x->cu_seqlens_q_device, AOTK_DTYPE_INT32, B + 1);
    params.max_seqlen_q = (int32_t)S;
  }
  x->params = params;
  return aotk_gpu_test_settle();
}

static bool decode_results_create(const decode_run *x, decode_results *r) {
  r->out = host_alloc(out_count(x), sizeof(double));
  r->lse = host_alloc(row_count(x), sizeof(double));
  return r->out != NULL && r->lse != NULL;
}

static void decode_results_destroy(decode_results *r) {
  free(r->out);
  free(r->lse);
  memset(r, 0, sizeof *r);
}

#endif /* DECODE_GPU_CASES_H */
