/*
 * What tests/test_kernel_table.c and tests/test_images.c check the generated table and the embedded images
 * against: every family's run-time parameters as kinds and its variant axes, written out here from the
 * kernel sources rather than read from the table or the launchers, the head dims, tiles and targets each
 * may have, the variants the catalog must cover, and the names its rows must carry. Static, for the one
 * file of either binary. A new family adds its entry to `families` below.
 */
#ifndef KERNEL_FAMILIES_H
#define KERNEL_FAMILIES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotk.h"
#include "aotk_image.h"
#include "aotk_kernel_table.h"
#include "aotk_launch.h"
#include "aotk_test_harness.h"

/* Each family's run-time parameters, in the order of the Triton function's signature (kernels/attn_fwd.py,
 * kernels/attn_bwd.py, kernels/sel_attn.py; the tl.constexpr ones are compiled in and not passed), as
 * kinds: p pointer, l int64, i int32, f fp32, t a host-side TMA descriptor (a 128-byte CUtensorMap, then
 * its rank-3 view's shape as 3 x int32 and strides as 3 x int64: seven .entry parameters), the types
 * codegen/aotk_catalog.py gives them. Written out
 * here rather than read from the table or the launchers (src/attn/aotk_attn.c, src/sel/aotk_sel.c) so
 * that a row, its PTX and the launcher are each checked against an independent list. "lii" is one
 * tensor's (batch: int64, sequence: int32, head: int32) strides; the selection kernels' packed tensors
 * have "li" (token: int64, head: int32).
 *   attn_fwd: Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, AlibiSlopes, Sinks, RngState; the strides of Q,
 *     K, V and Out; stride_lb (l), stride_lh (i), stride_ab (l); seqlen_q, seqlen_k, heads_q, group_size,
 *     num_m_blocks, head_dim_qk8, head_dim_v8, window_left, window_right, flags; qk_scale_log2,
 *     softcap_scale, softcap_log2; dropout_threshold (i), dropout_scale (f).
 *   attn_fwd_tma: attn_fwd's, then DescQ, DescK, DescV (t): Q, K and V as [batch, seqlen, heads * head_dim].
 *   attn_fwd_hopper (Gluon, kernels/attn_fwd_hopper.py): attn_fwd_tma's, then num_tiles (i).
 *   attn_fwd_hopper_paged (the same file): attn_fwd_hopper's, then BlockTable, CacheSeqlens, CacheLeftpad,
 *     stride_bt (l), page_shift (i), OutPartial, stride_pp, stride_lpp (l), num_splits, split_keys (i).
 *   attn_dropout_mask: Mask, CuSeqlensQ, CuSeqlensK, RngState; stride_mb, stride_mh, stride_ms (all l);
 *     seqlen_q, seqlen_k, heads_q, num_m_blocks, flags, dropout_threshold.
 *   attn_bwd_preprocess: Out, DOut, Lse, Delta, LseLog2, CuSeqlensQ, Sinks, SinkPartial; the strides of
 *     Out and DOut; stride_lb (l), stride_lh (i); seqlen_q, heads_q, num_seqs, num_m_blocks, stats_stride,
 *     head_dim_v8, flags.
 *   attn_bwd_sink_reduce: SinkPartial, DSinks; count.
 *   attn_bwd_dkdv: Q, K, V, DOut, LseLog2, Delta, DK, DV, CuSeqlensQ, CuSeqlensK, AlibiSlopes, RngState;
 *     the strides of Q, K, V, DOut, DK and DV; stride_ab (l); seqlen_q, seqlen_k, heads_q, heads_kv,
 *     group_size, num_n_blocks, stats_stride, head_dim_qk8, head_dim_v8, window_left, window_right, flags;
 *     softmax_scale, qk_scale_log2, softcap_scale, softcap_log2; dropout_threshold (i), dropout_scale (f).
 *   attn_bwd_dq: Q, K, V, DOut, LseLog2, Delta, DQ, CuSeqlensQ, CuSeqlensK, AlibiSlopes, RngState; the
 *     strides of Q, K, V, DOut and DQ; stride_ab (l); seqlen_q, seqlen_k, heads_q, group_size,
 *     num_m_blocks, stats_stride, head_dim_qk8, head_dim_v8, window_left, window_right, flags;
 *     softmax_scale, qk_scale_log2, softcap_scale, softcap_log2; dropout_threshold (i), dropout_scale (f).
 *   sel_fwd: Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, BlockIdx, BlockCnt; the strides of Q, K, V, Out,
 *     Lse, BlockIdx and BlockCnt; num_seqs, total_q, total_k, max_seqlen_k, group_size, group_chunks,
 *     num_slots, flags; qk_scale_log2.
 *   sel_bwd_dq: Q, K, V, Out, DOut, Lse, DQ, Delta, CuSeqlensQ, CuSeqlensK, BlockIdx, BlockCnt, Compact;
 *     the strides of Q, K, V, Out, DOut, DQ, Lse, BlockIdx and BlockCnt; num_seqs, total_q, total_k,
 *     max_seqlen_k, heads_q, group_size, group_chunks, num_slots, flags; qk_scale_log2, softmax_scale.
 *   sel_bwd_dkdv: Q, K, V, DOut, Lse, Delta, DK, DV, CuSeqlensQ, CuSeqlensK, Offsets, Tokens, Chunks,
 *     Partials; the strides of Q, K, V, DOut, DK, DV and Lse; stride_offsets (i), stride_tokens (l);
 *     num_seqs, total_q, total_k, max_seqlen_k, heads_q, group_size, num_key_tiles, chunk_tokens,
 *     max_chunks, partials_per_head, flags; qk_scale_log2, softmax_scale.
 *   sel_index_zero: Offsets; count.
 *   sel_index_count: BlockIdx, BlockCnt, CuSeqlensQ, CuSeqlensK, Offsets; the strides of BlockIdx and
 *     BlockCnt; stride_offsets (i); num_seqs, total_q, total_k, max_seqlen_k, block_size, num_slots,
 *     num_chunks, search_steps, flags.
 *   sel_index_scan: Offsets, Cursors, Chunks; stride_offsets, slots, chunk_tokens, max_chunks.
 *   sel_index_scatter: BlockIdx, BlockCnt, CuSeqlensQ, CuSeqlensK, Cursors, Tokens; the strides of
 *     BlockIdx and BlockCnt; stride_offsets (i), stride_tokens (l); then sel_index_count's nine ints.
 *   sel_index_order: BlockIdx, BlockCnt, CuSeqlensQ, CuSeqlensK, Offsets, Tokens; the strides of BlockIdx
 *     and BlockCnt; stride_offsets (i), stride_tokens (l); num_seqs, total_q, total_k, max_seqlen_k,
 *     block_size, num_slots, flags.
 *   sel_check_indices: BlockIdx, BlockCnt, CuSeqlensQ, CuSeqlensK, Result; the strides of BlockIdx and
 *     BlockCnt; num_seqs, total_q, total_k, max_seqlen_k, heads_kv, block_size, num_slots, flags.
 *
 * The variant axes each family has (the catalog's FAMILIES): the helpers (the dropout mask, the sink
 * reduction, the selection index passes and check) have none, so one row per arch with dtype 0, head
 * dims 0, aligned 0, extras 0 and block size 0. The selection kernels always assume 16-byte-aligned
 * tensors (the API refuses other layouts) and have the key block size as an axis; for sel_fwd and
 * sel_bwd_dkdv the alignment axis says instead whether the group size is a multiple of 16 ("g16" in the
 * name), and sel_bwd_dq has none. The TMA forward exists for sm_90 only, for the head dims in
 * tma_head_dim_pairs, and always assumes 16-byte-aligned tensors (TMA needs them): its rows are
 * aligned = 1 and named "aligned", and all of them EXTRAS (on sm_90 only dropout reaches it). The
 * warp-specialized Gluon forward likewise, for the head dims in hopper_head_dim_pairs, with an EXTRAS
 * variant beside the plain one (its three-warpgroup form without); so the Gluon backward passes, for
 * hopper_bwd_head_dim_pairs (the dK/dV pass), hopper_fused_head_dim_pairs (its fused form, and the cast
 * after it, which sees no scores: no EXTRAS) and hopper_dq_head_dim_pairs (the dQ pass). A Gluon program is
 * more warps than its name's "w" (the default partition's: the worker partitions add theirs, the row's
 * num_warps is the whole). */
enum head_dim_axis {
  HEAD_DIMS_NONE,      /* head_dim_qk = head_dim_v = 0 */
  HEAD_DIMS_PAIRS,     /* one of head_dim_pairs */
  HEAD_DIMS_V_ONLY,    /* head_dim_qk = 0, head_dim_v one of the pairs' v dims */
  HEAD_DIMS_SEL_PAIRS, /* one of sel_head_dim_pairs */
  HEAD_DIMS_TMA_PAIRS, /* one of tma_head_dim_pairs */
  HEAD_DIMS_HOPPER_PAIRS, /* one of hopper_head_dim_pairs */
  HEAD_DIMS_HOPPER_BWD_PAIRS, /* one of hopper_bwd_head_dim_pairs */
  HEAD_DIMS_HOPPER_FUSED_PAIRS, /* one of hopper_fused_head_dim_pairs */
  HEAD_DIMS_HOPPER_DQ_PAIRS,    /* one of hopper_dq_head_dim_pairs */
  HEAD_DIMS_HOPPER_WG3_PAIRS, /* (64, 64): the three-warpgroup forward */
  HEAD_DIMS_HOPPER_PAGED_PAIRS, /* one of hopper_paged_head_dim_pairs */
};
/* Whether a family compiles softcap, ALiBi and dropout in (the catalog's "extras" axis; sinks are in every
 * variant): never, as a variant beside the plain one, or as its only variant (the catalog's
 * "extras_only": the Triton TMA forward, which on sm_90 only dropout reaches). */
enum extras_axis {
  EXTRAS_NONE, /* extras 0 */
  EXTRAS_BOTH, /* extras 0 and 1 */
  EXTRAS_ONLY, /* extras 1 */
};
static const struct family {
  int32_t id;
  const char *name; /* the catalog's family name: the kernel names' prefix and (see entry_name) the .entry's */
  const char *param_kinds;
  bool has_dtype;      /* fp16/bf16 */
  bool has_alignment;  /* aligned/any (only with a dtype), or for selection g16 or not */
  enum head_dim_axis head_dims;
  enum extras_axis extras; /* which of the EXTRAS variants it has */
  bool has_block_size; /* selection's key block size (32, 64, 128); the name has "bs<size>" */
  bool has_block_n;    /* tiles keys too: a BLOCK_N, and an "n" in its tag */
  int32_t fixed_block_m; /* 0: any power of two */
  int32_t only_arch;     /* 0: every arch in archs */
  bool always_aligned;   /* no alignment axis, but every row is the aligned variant */
  bool warp_specialized; /* num_warps counts the worker partitions' warps too; the name's w does not */
} families[] = {
    {AOTK__FAMILY_ATTN_FWD, "attn_fwd",
     "pppppppppp" "liiliiliilii" "lil" "iiiiiiiiii" "fff" "if", true, true, HEAD_DIMS_PAIRS, EXTRAS_BOTH, false, true,
     0, 0, false, false},
    /* Only EXTRAS rows: the Gluon forward takes every other call at these head dims. */
    {AOTK__FAMILY_ATTN_FWD_TMA, "attn_fwd_tma",
     "pppppppppp" "liiliiliilii" "lil" "iiiiiiiiii" "fff" "if" "ttt", true, false, HEAD_DIMS_TMA_PAIRS, EXTRAS_ONLY,
     false, true, 0, 90, true, false},
    /* The Gluon forward: every call but dropout (softcap and ALiBi in its EXTRAS rows). */
    {AOTK__FAMILY_ATTN_FWD_HOPPER, "attn_fwd_hopper",
     "pppppppppp" "liiliiliilii" "lil" "iiiiiiiiii" "fff" "if" "tttt" "i", true, false, HEAD_DIMS_HOPPER_PAIRS,
     EXTRAS_BOTH, false, true, 0, 90, true, true},
    /* The same Gluon forward with three consumer warpgroups (192-row tiles), d=64 only, for the plain
     * forward alone: no EXTRAS variant. */
    {AOTK__FAMILY_ATTN_FWD_HOPPER_WG3, "attn_fwd_hopper_wg3",
     "pppppppppp" "liiliiliilii" "lil" "iiiiiiiiii" "fff" "if" "tttt" "i", true, false, HEAD_DIMS_HOPPER_WG3_PAIRS,
     EXTRAS_NONE, false, true, 192, 90, true, true},
    /* The same Gluon forward drawing dropout in its consumers: d64 and d128 (the fused backward's pairs), no
     * EXTRAS variant (no softcap or ALiBi code). */
    {AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT, "attn_fwd_hopper_dropout",
     "pppppppppp" "liiliiliilii" "lil" "iiiiiiiiii" "fff" "if" "tttt" "i", true, false, HEAD_DIMS_HOPPER_FUSED_PAIRS,
     EXTRAS_NONE, false, true, 128, 90, true, true},
    /* The paged prefill (aotk_attn_decode with cu_seqlens_q on sm_90): the Gluon forward with K and V read
     * through the block table, softcap and ALiBi in its EXTRAS rows; two configs a variant, 16- and 64-row
     * boxes (min_seqlen: the page size). */
    {AOTK__FAMILY_ATTN_FWD_HOPPER_PAGED, "attn_fwd_hopper_paged",
     "pppppppppp" "liiliiliilii" "lil" "iiiiiiiiii" "fff" "if" "tttt" "i" "ppp" "l" "i" "p" "ll" "ii", true, false,
     HEAD_DIMS_HOPPER_PAGED_PAIRS, EXTRAS_BOTH, false, true, 128, 90, true, true},
    {AOTK__FAMILY_ATTN_DROPOUT_MASK, "attn_dropout_mask", "pppp" "lll" "iiiiii", false, false, HEAD_DIMS_NONE,
     EXTRAS_NONE, false, true, 0, 0, false, false},
    {AOTK__FAMILY_ATTN_BWD_PREPROCESS, "attn_bwd_preprocess", "pppppppp" "liilii" "li" "iiiiiii", true, true,
     HEAD_DIMS_V_ONLY, EXTRAS_NONE, false, false, 0, 0, false, false},
    /* One program sums one head's partials 1024 at a time (BLOCK, the catalog's SINK_REDUCE_CONFIG). */
    {AOTK__FAMILY_ATTN_BWD_SINK_REDUCE, "attn_bwd_sink_reduce", "ppi", false, false, HEAD_DIMS_NONE, EXTRAS_NONE,
     false, false, 1024, 0, false, false},
    {AOTK__FAMILY_ATTN_BWD_DKDV, "attn_bwd_dkdv",
     "pppppppppppp" "liiliiliiliiliilii" "l" "iiiiiiiiiiii" "ffff" "if", true, true, HEAD_DIMS_PAIRS, EXTRAS_BOTH,
     false, true, 0, 0, false, false},
    {AOTK__FAMILY_ATTN_BWD_DQ, "attn_bwd_dq",
     "ppppppppppp" "liiliiliiliilii" "l" "iiiiiiiiiii" "ffff" "if", true, true, HEAD_DIMS_PAIRS, EXTRAS_BOTH, false,
     true, 0, 0, false, false},
    /* The warp-specialized dK/dV pass (Gluon, kernels/attn_bwd_hopper.py): attn_bwd_dkdv's, then
     * descriptors of Q, K, V and dO; sm_90, aligned; every backward but dropout (softcap and ALiBi in its
     * EXTRAS rows). */
    {AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER, "attn_bwd_dkdv_hopper",
     "pppppppppppp" "liiliiliiliiliilii" "l" "iiiiiiiiiiii" "ffff" "if" "tttt", true, false, HEAD_DIMS_HOPPER_BWD_PAIRS,
     EXTRAS_BOTH, false, true, 0, 90, true, true},
    /* Its fused, non-deterministic form: the same, then a descriptor of the fp32 dQ accumulator. */
    {AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER, "attn_bwd_fused_hopper",
     "pppppppppppp" "liiliiliiliiliilii" "l" "iiiiiiiiiiii" "ffff" "if" "ttttt", true, false,
     HEAD_DIMS_HOPPER_FUSED_PAIRS, EXTRAS_BOTH, false, true, 0, 90, true, true},
    /* Both drawing dropout in their consumers: d64 and d128, no EXTRAS variant (no softcap or ALiBi code). */
    {AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER_DROPOUT, "attn_bwd_dkdv_hopper_dropout",
     "pppppppppppp" "liiliiliiliiliilii" "l" "iiiiiiiiiiii" "ffff" "if" "tttt", true, false,
     HEAD_DIMS_HOPPER_FUSED_PAIRS, EXTRAS_NONE, false, true, 0, 90, true, true},
    {AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER_DROPOUT, "attn_bwd_fused_hopper_dropout",
     "pppppppppppp" "liiliiliiliiliilii" "l" "iiiiiiiiiiii" "ffff" "if" "ttttt", true, false,
     HEAD_DIMS_HOPPER_FUSED_PAIRS, EXTRAS_NONE, false, true, 0, 90, true, true},
    /* ... and the cast of that accumulator into dq (varlen too: cu_seqlens_q and the flags): 64 rows per
     * program. It sees no scores, so one variant serves the EXTRAS fused pass too. */
    {AOTK__FAMILY_ATTN_BWD_DQ_CONVERT, "attn_bwd_dq_convert", "ppp" "lii" "iii" "i" "i", true, false,
     HEAD_DIMS_HOPPER_FUSED_PAIRS, EXTRAS_NONE, false, false, 64, 90, true, false},
    /* The Gluon dQ pass (kernels/attn_bwd_dq_hopper.py): attn_bwd_dq's, then descriptors of Q, K, V and
     * dO; sm_90, aligned, at d = 256 beside the deterministic Gluon dK/dV pass. */
    {AOTK__FAMILY_ATTN_BWD_DQ_HOPPER, "attn_bwd_dq_hopper",
     "ppppppppppp" "liiliiliiliilii" "l" "iiiiiiiiiii" "ffff" "if" "tttt", true, false, HEAD_DIMS_HOPPER_DQ_PAIRS,
     EXTRAS_BOTH, false, true, 0, 90, true, true},
    /* Selection: a tile of the group's query heads (block_m) against one selected block (block_n). */
    {AOTK__FAMILY_SEL_FWD, "sel_fwd", "ppppppppp" "li" "li" "li" "li" "li" "li" "li" "iiiiiiii" "f", true, true,
     HEAD_DIMS_SEL_PAIRS, EXTRAS_NONE, true, true, 0, 0, false, false},
    {AOTK__FAMILY_SEL_BWD_DQ, "sel_bwd_dq",
     "ppppppppppppp" "li" "li" "li" "li" "li" "li" "li" "li" "li" "iiiiiiiii" "ff", true, false, HEAD_DIMS_SEL_PAIRS,
     EXTRAS_NONE, true, true, 0, 0, false, false},
    {AOTK__FAMILY_SEL_BWD_DKDV, "sel_bwd_dkdv",
     "pppppppppppppp" "li" "li" "li" "li" "li" "li" "li" "il" "iiiiiiiiiii" "ff", true, true, HEAD_DIMS_SEL_PAIRS,
     EXTRAS_NONE, true, true, 0, 0, false, false},
    /* The inverse index's passes, and the debug check. */
    {AOTK__FAMILY_SEL_INDEX_ZERO, "sel_index_zero", "p" "i", false, false, HEAD_DIMS_NONE, EXTRAS_NONE, false, false,
     0, 0, false, false},
    {AOTK__FAMILY_SEL_INDEX_COUNT, "sel_index_count", "ppppp" "li" "li" "i" "iiiiiiiii", false, false,
     HEAD_DIMS_NONE, EXTRAS_NONE, false, false, 0, 0, false, false},
    {AOTK__FAMILY_SEL_INDEX_SCAN, "sel_index_scan", "ppp" "iiii", false, false, HEAD_DIMS_NONE, EXTRAS_NONE, false,
     false, 0, 0, false, false},
    {AOTK__FAMILY_SEL_INDEX_SCATTER, "sel_index_scatter", "pppppp" "li" "li" "il" "iiiiiiiii", false, false,
     HEAD_DIMS_NONE, EXTRAS_NONE, false, false, 0, 0, false, false},
    /* SORT_TILE tokens sorted in registers (block_m) and ENTRIES index entries per step (block_n). */
    {AOTK__FAMILY_SEL_INDEX_ORDER, "sel_index_order", "pppppp" "li" "li" "il" "iiiiiii", false, false,
     HEAD_DIMS_NONE, EXTRAS_NONE, false, true, 0, 0, false, false},
    {AOTK__FAMILY_SEL_CHECK_INDICES, "sel_check_indices", "ppppp" "li" "li" "iiiiiiii", false, false,
     HEAD_DIMS_NONE, EXTRAS_NONE, false, false, 0, 0, false, false},
    /* Decoding (kernels/attn_decode.py): the compiled head-dim pairs, the aligned variant only; a group's
     * rows (block_m) against key blocks (block_n). */
    {AOTK__FAMILY_ATTN_DECODE, "attn_decode", "ppppppppppppppp" "llllllllllllllllllllll" "iiiiiiiiiiiiiii" "fff", true, false,
     HEAD_DIMS_PAIRS, EXTRAS_NONE, false, true, 0, 0, true, false},
    /* The same kernel over a paged cache: a page lookup per key row, or one per key block. */
    {AOTK__FAMILY_ATTN_DECODE_PAGED, "attn_decode_paged", "ppppppppppppppp" "llllllllllllllllllllll" "iiiiiiiiiiiiiii" "fff",
     true, false, HEAD_DIMS_PAIRS, EXTRAS_NONE, false, true, 0, 0, true, false},
    /* ... the per-row lookup in 32-bit offsets, for caches whose element offsets fit in 31 bits. */
    {AOTK__FAMILY_ATTN_DECODE_PAGED32, "attn_decode_paged32", "ppppppppppppppp" "llllllllllllllllllllll" "iiiiiiiiiiiiiii" "fff",
     true, false, HEAD_DIMS_PAIRS, EXTRAS_NONE, false, true, 0, 0, true, false},
    {AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS, "attn_decode_paged_blocks",
     "ppppppppppppppp" "llllllllllllllllllllll" "iiiiiiiiiiiiiii" "fff", true, false, HEAD_DIMS_PAIRS, EXTRAS_NONE, false, true,
     0, 0, true, false},
    /* The merge: no dtype (typed pointer triples chosen at run time), aligned or any; 8 rows by 32
     * head-dim columns a program reading a partial a step, or 1 row by 32 reading 32 (BLOCK_P). */
    {AOTK__FAMILY_ATTN_MERGE, "attn_merge", "pppppppppp" "llllllllllllll" "iiiiii", false, true, HEAD_DIMS_NONE,
     EXTRAS_NONE, false, true, 0, 0, false, false},
    /* Appending the step's keys and values: 8 kv heads per step (block_m). */
    {AOTK__FAMILY_ATTN_CACHE_APPEND, "attn_cache_append", "pppppp" "lllllllllllll" "iiiiiii", true, false,
     HEAD_DIMS_PAIRS, EXTRAS_NONE, false, false, 8, 0, true, false},
};
enum { FAMILY_COUNT = sizeof families / sizeof families[0] };

/* The compiled (q/k, v) head-dim pairs (the catalog's ATTN_HEAD_DIMS); (256, 128) serves (192, 128) in the
 * pointer kernels (the Gluon forward has a pair of its own). */
static const int32_t head_dim_pairs[][2] = {{32, 32}, {64, 64}, {128, 128}, {256, 256}, {256, 128}};
enum { HEAD_DIM_PAIR_COUNT = sizeof head_dim_pairs / sizeof head_dim_pairs[0] };
/* The preprocess pass reads only O and dO: one variant per distinct v dim of the pairs. */
static const int32_t head_dims_v[] = {32, 64, 128, 256};
enum { HEAD_DIM_V_COUNT = sizeof head_dims_v / sizeof head_dims_v[0] };
/* Selection runs exactly these (include/aotk.h): 192 as 128 + 64, not padded. */
static const int32_t sel_head_dim_pairs[][2] = {{64, 64}, {128, 128}, {192, 128}};
enum { SEL_HEAD_DIM_PAIR_COUNT = sizeof sel_head_dim_pairs / sizeof sel_head_dim_pairs[0] };
/* The TMA forward's (the catalog's ATTN_TMA_HEAD_DIMS): exact, never padded (a box past the head would read
 * the next one's columns). */
static const int32_t tma_head_dim_pairs[][2] = {{128, 128}, {256, 256}};
enum { TMA_HEAD_DIM_PAIR_COUNT = sizeof tma_head_dim_pairs / sizeof tma_head_dim_pairs[0] };
/* The warp-specialized forward's (the catalog's ATTN_HOPPER_HEAD_DIMS), exact too; (192, 128) in three
 * 64-column boxes of Q and K (see test_table_tma_descriptors). */
static const int32_t hopper_head_dim_pairs[][2] = {{64, 64}, {128, 128}, {192, 128}, {256, 256}};
enum { HOPPER_HEAD_DIM_PAIR_COUNT = sizeof hopper_head_dim_pairs / sizeof hopper_head_dim_pairs[0] };
/* The warp-specialized dK/dV pass's (the catalog's ATTN_HOPPER_BWD_HEAD_DIMS). */
static const int32_t hopper_bwd_head_dim_pairs[][2] = {{64, 64}, {128, 128}, {192, 128}, {256, 256}};
enum { HOPPER_BWD_HEAD_DIM_PAIR_COUNT = sizeof hopper_bwd_head_dim_pairs / sizeof hopper_bwd_head_dim_pairs[0] };
/* Its fused form's and the cast's (ATTN_HOPPER_BWD_FUSED_HEAD_DIMS), and the Gluon dQ pass's
 * (ATTN_HOPPER_BWD_DQ_HEAD_DIMS). */
static const int32_t hopper_fused_head_dim_pairs[][2] = {{64, 64}, {128, 128}};
enum { HOPPER_FUSED_HEAD_DIM_PAIR_COUNT = sizeof hopper_fused_head_dim_pairs / sizeof hopper_fused_head_dim_pairs[0] };
static const int32_t hopper_dq_head_dim_pairs[][2] = {{192, 128}, {256, 256}};
enum { HOPPER_DQ_HEAD_DIM_PAIR_COUNT = sizeof hopper_dq_head_dim_pairs / sizeof hopper_dq_head_dim_pairs[0] };
/* The paged prefill's (ATTN_HOPPER_PAGED_HEAD_DIMS). */
static const int32_t hopper_paged_head_dim_pairs[][2] = {{64, 64}, {128, 128}, {192, 128}, {256, 256}};
enum { HOPPER_PAGED_HEAD_DIM_PAIR_COUNT = sizeof hopper_paged_head_dim_pairs / sizeof hopper_paged_head_dim_pairs[0] };
static const int32_t sel_block_sizes[] = {32, 64, 128};
enum { SEL_BLOCK_SIZE_COUNT = sizeof sel_block_sizes / sizeof sel_block_sizes[0] };

static const int32_t archs[] = {80, 90};
static const int32_t dtypes[] = {AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};

/* The .entry's name: the family's, except where families compile one function with different constexprs
 * (the paged decoding families are attn_decode with PAGE_MODE 1 and 2). */
static const char *entry_name(const struct family *family) {
  return family->id == AOTK__FAMILY_ATTN_DECODE_PAGED || family->id == AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS ||
                 family->id == AOTK__FAMILY_ATTN_DECODE_PAGED32
             ? "attn_decode"
             : family->name;
}

static const struct family *family_of(const aotk__kernel_entry *e) {
  for (int f = 0; f < FAMILY_COUNT; f++) {
    if (families[f].id == e->family) return &families[f];
  }
  return NULL;
}

/* Triton appends two pointers the caller does not see (global and profile scratch). */
enum { HIDDEN_PARAMS = 2 };

enum { ELF_MACHINE_CUDA = 190, ELF_CLASS_64 = 2 };

static const char *dtype_tag(int dtype) {
  switch (dtype) {
    case AOTK_DTYPE_FLOAT16:
      return "fp16";
    case AOTK_DTYPE_BFLOAT16:
      return "bf16";
  }
  return "?";
}

static bool is_power_of_two(int32_t value) { return value > 0 && (value & (value - 1)) == 0; }

/* FNV-1a 64, written out again here so the check does not trust aotk__fnv1a64 to vouch for itself. */
static uint64_t fnv1a64(const unsigned char *data, size_t bytes) {
  uint64_t hash = 14695981039346656037ull;
  for (size_t i = 0; i < bytes; i++) hash = (hash ^ data[i]) * 1099511628211ull;
  return hash;
}

static bool message_mentions(const char *needle) { return strstr(aotk_last_error(), needle) != NULL; }

/* One variant: every field of a row but the tile config and its tuning bound. */
struct variant {
  const struct family *family;
  int32_t arch, dtype, head_dim_qk, head_dim_v, aligned, extras, block_size;
};

static bool row_is_variant(const aotk__kernel_entry *e, const struct variant *v) {
  return e->family == v->family->id && e->arch == v->arch && e->dtype == v->dtype &&
         e->head_dim_qk == v->head_dim_qk && e->head_dim_v == v->head_dim_v && e->aligned == v->aligned &&
         e->extras == v->extras && e->block_size == v->block_size;
}

static bool same_variant(const aotk__kernel_entry *a, const aotk__kernel_entry *b) {
  return a->family == b->family && a->arch == b->arch && a->dtype == b->dtype && a->head_dim_qk == b->head_dim_qk &&
         a->head_dim_v == b->head_dim_v && a->aligned == b->aligned && a->extras == b->extras &&
         a->block_size == b->block_size;
}

/* Every variant of every family (family x arch x dtype x head dims x alignment x extras x block size, over
 * the axes the family has), written into `out`; returns how many. */
enum { MAX_VARIANTS = FAMILY_COUNT * 2 * 2 * HEAD_DIM_PAIR_COUNT * 2 * 2 * SEL_BLOCK_SIZE_COUNT };
static int list_variants(struct variant out[MAX_VARIANTS]) {
  int count = 0;
  for (int f = 0; f < FAMILY_COUNT; f++) {
    const struct family *family = &families[f];
    int dtype_count = family->has_dtype ? 2 : 1;
    int head_dim_count = family->head_dims == HEAD_DIMS_PAIRS       ? HEAD_DIM_PAIR_COUNT
                         : family->head_dims == HEAD_DIMS_V_ONLY    ? HEAD_DIM_V_COUNT
                         : family->head_dims == HEAD_DIMS_SEL_PAIRS ? SEL_HEAD_DIM_PAIR_COUNT
                         : family->head_dims == HEAD_DIMS_TMA_PAIRS ? TMA_HEAD_DIM_PAIR_COUNT
                         : family->head_dims == HEAD_DIMS_HOPPER_PAIRS ? HOPPER_HEAD_DIM_PAIR_COUNT
                         : family->head_dims == HEAD_DIMS_HOPPER_BWD_PAIRS ? HOPPER_BWD_HEAD_DIM_PAIR_COUNT
                         : family->head_dims == HEAD_DIMS_HOPPER_FUSED_PAIRS ? HOPPER_FUSED_HEAD_DIM_PAIR_COUNT
                         : family->head_dims == HEAD_DIMS_HOPPER_DQ_PAIRS ? HOPPER_DQ_HEAD_DIM_PAIR_COUNT
                         : family->head_dims == HEAD_DIMS_HOPPER_PAGED_PAIRS ? HOPPER_PAGED_HEAD_DIM_PAIR_COUNT
                                                                    : 1;
    /* HEAD_DIMS_HOPPER_WG3_PAIRS: one pair, (64, 64). */
    int block_size_count = family->has_block_size ? SEL_BLOCK_SIZE_COUNT : 1;
    int first_aligned = family->always_aligned ? 1 : 0, last_aligned = family->has_alignment ? 1 : first_aligned;
    for (int a = 0; a < 2; a++)
      for (int d = 0; d < dtype_count && (family->only_arch == 0 || family->only_arch == archs[a]); d++)
        for (int h = 0; h < head_dim_count; h++)
          for (int aligned = first_aligned; aligned <= last_aligned; aligned++)
            for (int extras = family->extras == EXTRAS_ONLY; extras <= (family->extras != EXTRAS_NONE); extras++)
              for (int b = 0; b < block_size_count; b++) {
                struct variant *v = &out[count++];
                v->family = family;
                v->arch = archs[a];
                v->dtype = family->has_dtype ? dtypes[d] : 0;
                v->head_dim_qk = family->head_dims == HEAD_DIMS_PAIRS       ? head_dim_pairs[h][0]
                                 : family->head_dims == HEAD_DIMS_SEL_PAIRS ? sel_head_dim_pairs[h][0]
                                 : family->head_dims == HEAD_DIMS_TMA_PAIRS ? tma_head_dim_pairs[h][0]
                                 : family->head_dims == HEAD_DIMS_HOPPER_PAIRS ? hopper_head_dim_pairs[h][0]
                                 : family->head_dims == HEAD_DIMS_HOPPER_BWD_PAIRS ? hopper_bwd_head_dim_pairs[h][0]
                                 : family->head_dims == HEAD_DIMS_HOPPER_FUSED_PAIRS ? hopper_fused_head_dim_pairs[h][0]
                                 : family->head_dims == HEAD_DIMS_HOPPER_DQ_PAIRS ? hopper_dq_head_dim_pairs[h][0]
                                 : family->head_dims == HEAD_DIMS_HOPPER_WG3_PAIRS ? 64
                                 : family->head_dims == HEAD_DIMS_HOPPER_PAGED_PAIRS ? hopper_paged_head_dim_pairs[h][0]
                                                                            : 0;
                v->head_dim_v = family->head_dims == HEAD_DIMS_PAIRS       ? head_dim_pairs[h][1]
                                : family->head_dims == HEAD_DIMS_V_ONLY    ? head_dims_v[h]
                                : family->head_dims == HEAD_DIMS_SEL_PAIRS ? sel_head_dim_pairs[h][1]
                                : family->head_dims == HEAD_DIMS_TMA_PAIRS ? tma_head_dim_pairs[h][1]
                                : family->head_dims == HEAD_DIMS_HOPPER_PAIRS ? hopper_head_dim_pairs[h][1]
                                : family->head_dims == HEAD_DIMS_HOPPER_BWD_PAIRS ? hopper_bwd_head_dim_pairs[h][1]
                                : family->head_dims == HEAD_DIMS_HOPPER_FUSED_PAIRS ? hopper_fused_head_dim_pairs[h][1]
                                : family->head_dims == HEAD_DIMS_HOPPER_DQ_PAIRS ? hopper_dq_head_dim_pairs[h][1]
                                : family->head_dims == HEAD_DIMS_HOPPER_WG3_PAIRS ? 64
                                : family->head_dims == HEAD_DIMS_HOPPER_PAGED_PAIRS ? hopper_paged_head_dim_pairs[h][1]
                                                                           : 0;
                v->aligned = aligned;
                v->extras = extras;
                v->block_size = family->has_block_size ? sel_block_sizes[b] : 0;
              }
  }
  return count;
}

/* The kernel's name as codegen's Kernel.name builds it from the fields: family, dtype, head dims
 * ("d128", "d256v128", or "v64" where only v is compiled), the alignment ("aligned" or "any"; for
 * selection, the block size "bs64" followed by "g16" in the variant for group sizes that are multiples
 * of 16), "extras", and the tile tag
 * m<block_m>[n<block_n>]w<num_warps>s<num_stages>. */
/* The warps the name's tag gives ("w<n>s<stages>" at its end), or 0 if it has none. */
static int32_t named_warps(const aotk__kernel_entry *e) {
  const char *w = strrchr(e->name, 'w');
  int warps = 0, stages = 0, used = 0;
  if (w == NULL || sscanf(w, "w%ds%d%n", &warps, &stages, &used) != 2 || w[used] != '\0') return 0;
  return warps;
}

static void expected_name(const aotk__kernel_entry *e, const char *family_name, char *name, size_t size) {
  int used = snprintf(name, size, "%s", family_name);
  if (e->dtype != 0) used += snprintf(name + used, size - used, "_%s", dtype_tag(e->dtype));
  if (e->head_dim_qk != 0 && e->head_dim_qk == e->head_dim_v) {
    used += snprintf(name + used, size - used, "_d%d", e->head_dim_qk);
  } else if (e->head_dim_qk != 0) {
    used += snprintf(name + used, size - used, "_d%dv%d", e->head_dim_qk, e->head_dim_v);
  } else if (e->head_dim_v != 0) {
    used += snprintf(name + used, size - used, "_v%d", e->head_dim_v);
  }
  if (e->block_size != 0) {
    used += snprintf(name + used, size - used, "_bs%d%s", e->block_size, e->aligned ? "g16" : "");
  } else if (e->dtype != 0 || e->family == AOTK__FAMILY_ATTN_MERGE) { /* the merge: no dtype, but both variants */
    used += snprintf(name + used, size - used, "_%s", e->aligned ? "aligned" : "any");
  }
  if (e->extras) used += snprintf(name + used, size - used, "_extras");
  used += snprintf(name + used, size - used, "_m%d", e->block_m);
  if (e->block_n != 0) used += snprintf(name + used, size - used, "n%d", e->block_n);
  if (e->block_p != 0) used += snprintf(name + used, size - used, "p%d", e->block_p);
  const struct family *family = family_of(e);
  const int32_t warps = family != NULL && family->warp_specialized ? named_warps(e) : e->num_warps;
  snprintf(name + used, size - used, "w%ds%d", warps, e->num_stages);
}

#endif /* KERNEL_FAMILIES_H */
