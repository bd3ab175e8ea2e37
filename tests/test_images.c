/*
 * CPU tests of the embedded kernel images and the generated table that describes them: every row
 * decompresses to an image that matches its hash and its own description (ELF for cubins whose
 * parameter table, and PTX whose .entry, takes exactly the parameters the kernel source declares), every
 * variant of every family (the forward, its sm_90 TMA form and its dropout-mask helper; the backward's
 * preprocess, dK/dV, dQ and sink-reduce passes; selection attention's forward, dQ and dK/dV passes and
 * its index and check helpers) has a kernel for every problem size, each row's fields agree with its
 * name and with what its target allows, the TMA rows' descriptor layouts fit their tiles, a refusal for
 * want of a kernel names the family as the catalog does, and a damaged image is refused before the
 * driver could see it.
 *
 * The table and the images come from the build tree (build/generated), so these tests check what this
 * build actually embeds, not what the catalog meant to embed.
 */
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
    {AOTK__FAMILY_ATTN_DECODE, "attn_decode", "pppppppppppp" "llllllllllllllll" "iiiiiiiiiiiiiii" "fff", true, false,
     HEAD_DIMS_PAIRS, EXTRAS_NONE, false, true, 0, 0, true, false},
    /* The same kernel over a paged cache: a page lookup per key row, or one per key block. */
    {AOTK__FAMILY_ATTN_DECODE_PAGED, "attn_decode_paged", "pppppppppppp" "llllllllllllllll" "iiiiiiiiiiiiiii" "fff",
     true, false, HEAD_DIMS_PAIRS, EXTRAS_NONE, false, true, 0, 0, true, false},
    {AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS, "attn_decode_paged_blocks",
     "pppppppppppp" "llllllllllllllll" "iiiiiiiiiiiiiii" "fff", true, false, HEAD_DIMS_PAIRS, EXTRAS_NONE, false, true,
     0, 0, true, false},
    /* The merge: no dtype (typed pointer triples chosen at run time), aligned or any; 8 rows by 32
     * head-dim columns a program reading a partial a step, or 1 row by 32 reading 32 (BLOCK_P). */
    {AOTK__FAMILY_ATTN_MERGE, "attn_merge", "ppppppppp" "llllllllllllll" "iiiiii", false, true, HEAD_DIMS_NONE,
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
static const int32_t sel_block_sizes[] = {32, 64, 128};
enum { SEL_BLOCK_SIZE_COUNT = sizeof sel_block_sizes / sizeof sel_block_sizes[0] };

static const int32_t archs[] = {80, 90};
static const int32_t dtypes[] = {AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};

/* The .entry's name: the family's, except where families compile one function with different constexprs
 * (the paged decoding families are attn_decode with PAGE_MODE 1 and 2). */
static const char *entry_name(const struct family *family) {
  return family->id == AOTK__FAMILY_ATTN_DECODE_PAGED || family->id == AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS
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

/* ---- the table as a whole ------------------------------------------------------------------- */

static void test_hash_function_known_values(void) {
  /* Published FNV-1a 64 test vectors. */
  CHECK(aotk__fnv1a64("", 0) == 0xcbf29ce484222325ull);
  CHECK(aotk__fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
  CHECK(aotk__fnv1a64("foobar", 6) == 0x85944171f73967e8ull);
}

static void test_table_is_unfiltered(void) {
  if (aotk__kernel_filter[0] != '\0') {
    TEST_SKIP("built with the kernel filter \"%s\": %d of %d catalog kernels", aotk__kernel_filter,
              aotk__kernel_count, aotk__catalog_kernel_count);
    return;
  }
  CHECK_MSG(aotk__kernel_count == aotk__catalog_kernel_count, "%d kernels built, the catalog has %d",
            aotk__kernel_count, aotk__catalog_kernel_count);
}

static void test_table_covers_every_variant_from_seqlen_one(void) {
  static struct variant variants[MAX_VARIANTS];
  int variant_count = list_variants(variants);
  bool filtered = aotk__kernel_filter[0] != '\0';
  CHECK(aotk__kernel_count > 0);
  int filtered_out = 0;
  for (int v = 0; v < variant_count; v++) {
    int rows = 0, rows_from_one = 0;
    for (int i = 0; i < aotk__kernel_count; i++) {
      const aotk__kernel_entry *e = &aotk__kernel_table[i];
      if (!row_is_variant(e, &variants[v])) continue;
      rows++;
      rows_from_one += e->min_seqlen == 1;
    }
    /* A filtered build leaves whole variants out; one it keeps must still serve every size. */
    if (filtered && rows == 0) {
      filtered_out++;
      continue;
    }
    /* Exactly one: two rows with the same bound would make the tuning choice depend on row order,
     * and none would leave short problems (or a filtered build's) without a kernel. */
    const struct variant *x = &variants[v];
    CHECK_MSG(rows_from_one == 1,
              "%s sm_%d %s head dims (%d, %d) aligned=%d extras=%d block size %d: %d of its %d rows have min_seqlen "
              "1, expected 1",
              x->family->name, x->arch, x->dtype != 0 ? dtype_tag(x->dtype) : "(no dtype)", x->head_dim_qk,
              x->head_dim_v, x->aligned, x->extras, x->block_size, rows_from_one, rows);
  }
  printf("    %d variants (%d families)", variant_count, (int)FAMILY_COUNT);
  if (filtered) printf(", %d left out by the kernel filter \"%s\"", filtered_out, aotk__kernel_filter);
  printf("\n");
}

static void test_table_names_unique_per_arch(void) {
  for (int i = 0; i < aotk__kernel_count; i++) {
    for (int j = i + 1; j < aotk__kernel_count; j++) {
      const aotk__kernel_entry *a = &aotk__kernel_table[i], *b = &aotk__kernel_table[j];
      CHECK_MSG(a->arch != b->arch || strcmp(a->name, b->name) != 0, "rows %d and %d are both sm_%d %s", i, j,
                a->arch, a->name);
    }
  }
}

/* A refusal for want of a kernel names the family as the catalog does (src/runtime/aotk_launch.c's
 * family names), for every family chosen through aotk__choose_kernel: all but selection attention's,
 * which src/sel/aotk_sel.c chooses and names itself. Size key 0 is below every row's min_seqlen (at
 * least 1: see test_table_covers_every_variant_from_seqlen_one), so no row is chosen, built or not. */
static void test_kernel_refusals_name_the_family(void) {
  static const int archs[] = {80, 90};
  for (int f = 0; f < FAMILY_COUNT; f++) {
    if (strncmp(families[f].name, "sel_", 4) == 0) continue;
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
      const aotk__device_info device = {NULL, 0, archs[a], 227 * 1024, 132};
      const aotk__variant_key key = {AOTK_DTYPE_FLOAT16, 64, 64, 1, 0};
      int row = -1;
      aotk__image_kind kind;
      aotk_status status = aotk__choose_kernel(families[f].id, &key, 0, &device, &row, &kind);
      char expected[96];
      snprintf(expected, sizeof expected, "no sm_%d %s kernel for ", archs[a], families[f].name);
      CHECK_MSG(status == AOTK_ERROR_KERNEL_NOT_BUILT && strstr(aotk_last_error(), expected) != NULL,
                "%s on sm_%d: %s, \"%s\"; expected a refusal naming it (\"%s...\")", families[f].name, archs[a],
                aotk_status_name(status), aotk_last_error(), expected);
    }
  }
}

/* The tuning bounds of one variant must be distinct, or which config runs depends on row order. */
static void test_table_tuning_bounds_distinct(void) {
  for (int i = 0; i < aotk__kernel_count; i++) {
    for (int j = i + 1; j < aotk__kernel_count; j++) {
      const aotk__kernel_entry *a = &aotk__kernel_table[i], *b = &aotk__kernel_table[j];
      CHECK_MSG(!same_variant(a, b) || a->min_seqlen != b->min_seqlen, "%s and %s (sm_%d) share min_seqlen %d",
                a->name, b->name, a->arch, a->min_seqlen);
    }
  }
}

static bool is_head_dim_pair(int32_t head_dim_qk, int32_t head_dim_v) {
  for (int h = 0; h < HEAD_DIM_PAIR_COUNT; h++) {
    if (head_dim_pairs[h][0] == head_dim_qk && head_dim_pairs[h][1] == head_dim_v) return true;
  }
  return false;
}

static bool is_sel_head_dim_pair(int32_t head_dim_qk, int32_t head_dim_v) {
  for (int h = 0; h < SEL_HEAD_DIM_PAIR_COUNT; h++) {
    if (sel_head_dim_pairs[h][0] == head_dim_qk && sel_head_dim_pairs[h][1] == head_dim_v) return true;
  }
  return false;
}

static bool is_tma_head_dim_pair(int32_t head_dim_qk, int32_t head_dim_v) {
  for (int h = 0; h < TMA_HEAD_DIM_PAIR_COUNT; h++) {
    if (tma_head_dim_pairs[h][0] == head_dim_qk && tma_head_dim_pairs[h][1] == head_dim_v) return true;
  }
  return false;
}

static bool is_hopper_head_dim_pair(int32_t head_dim_qk, int32_t head_dim_v) {
  for (int h = 0; h < HOPPER_HEAD_DIM_PAIR_COUNT; h++) {
    if (hopper_head_dim_pairs[h][0] == head_dim_qk && hopper_head_dim_pairs[h][1] == head_dim_v) return true;
  }
  return false;
}

static bool is_head_dim_v(int32_t head_dim_v) {
  for (int h = 0; h < HEAD_DIM_V_COUNT; h++) {
    if (head_dims_v[h] == head_dim_v) return true;
  }
  return false;
}

/* The description of each row: the fields agree with the family's axes, with the name, and with what
 * the targets allow. */
static void test_table_rows_describe_valid_configs(void) {
  int rows_per_family[FAMILY_COUNT] = {0};
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    const struct family *family = family_of(e);
    CHECK_MSG(family != NULL, "row %d %s: family %d", i, e->name, e->family);
    if (family == NULL) continue;
    rows_per_family[family - families]++;
    CHECK_MSG(e->arch == 80 || e->arch == 90, "row %d %s: arch %d", i, e->name, e->arch);
    CHECK_MSG(family->only_arch == 0 || e->arch == family->only_arch, "row %d %s: arch %d, but %s is sm_%d only", i,
              e->name, e->arch, family->name, family->only_arch);
    if (family->has_dtype) {
      CHECK_MSG(e->dtype == AOTK_DTYPE_FLOAT16 || e->dtype == AOTK_DTYPE_BFLOAT16, "row %d %s: dtype %d", i,
                e->name, e->dtype);
    } else {
      CHECK_MSG(e->dtype == 0, "row %d %s: dtype %d, but %s has no dtype axis", i, e->name, e->dtype, family->name);
    }
    if (family->has_alignment) {
      CHECK_MSG(e->aligned == 0 || e->aligned == 1, "row %d %s: aligned %d", i, e->name, e->aligned);
    } else if (family->always_aligned) {
      CHECK_MSG(e->aligned == 1, "row %d %s: aligned %d, but %s is always the aligned variant", i, e->name, e->aligned,
                family->name);
    } else {
      CHECK_MSG(e->aligned == 0, "row %d %s: aligned %d, but %s has no alignment axis", i, e->name, e->aligned,
                family->name);
    }
    if (family->has_block_size) {
      bool known = false;
      for (int b = 0; b < SEL_BLOCK_SIZE_COUNT; b++) known = known || e->block_size == sel_block_sizes[b];
      CHECK_MSG(known, "row %d %s: block size %d, not 32, 64 or 128", i, e->name, e->block_size);
    } else {
      CHECK_MSG(e->block_size == 0, "row %d %s: block size %d, but %s has none", i, e->name, e->block_size,
                family->name);
    }
    switch (family->head_dims) {
      case HEAD_DIMS_PAIRS:
        CHECK_MSG(is_head_dim_pair(e->head_dim_qk, e->head_dim_v), "row %d %s: head dims (%d, %d), not a compiled pair",
                  i, e->name, e->head_dim_qk, e->head_dim_v);
        break;
      case HEAD_DIMS_V_ONLY:
        CHECK_MSG(e->head_dim_qk == 0 && is_head_dim_v(e->head_dim_v),
                  "row %d %s: head dims (%d, %d), expected (0, one of 32, 64, 128, 256)", i, e->name, e->head_dim_qk,
                  e->head_dim_v);
        break;
      case HEAD_DIMS_SEL_PAIRS:
        CHECK_MSG(is_sel_head_dim_pair(e->head_dim_qk, e->head_dim_v),
                  "row %d %s: head dims (%d, %d), expected (64, 64), (128, 128) or (192, 128)", i, e->name,
                  e->head_dim_qk, e->head_dim_v);
        break;
      case HEAD_DIMS_TMA_PAIRS:
        CHECK_MSG(is_tma_head_dim_pair(e->head_dim_qk, e->head_dim_v),
                  "row %d %s: head dims (%d, %d), expected (128, 128) or (256, 256)", i, e->name, e->head_dim_qk,
                  e->head_dim_v);
        break;
      case HEAD_DIMS_HOPPER_PAIRS:
        CHECK_MSG(is_hopper_head_dim_pair(e->head_dim_qk, e->head_dim_v),
                  "row %d %s: head dims (%d, %d), expected (64, 64), (128, 128), (192, 128) or (256, 256)", i,
                  e->name, e->head_dim_qk, e->head_dim_v);
        break;
      case HEAD_DIMS_HOPPER_BWD_PAIRS:
        CHECK_MSG(((e->head_dim_qk == 64 || e->head_dim_qk == 128 || e->head_dim_qk == 256) &&
                   e->head_dim_v == e->head_dim_qk) || (e->head_dim_qk == 192 && e->head_dim_v == 128),
                  "row %d %s: head dims (%d, %d), expected (64, 64), (128, 128), (192, 128) or (256, 256)", i,
                  e->name, e->head_dim_qk, e->head_dim_v);
        break;
      case HEAD_DIMS_HOPPER_FUSED_PAIRS:
        CHECK_MSG((e->head_dim_qk == 64 || e->head_dim_qk == 128) && e->head_dim_v == e->head_dim_qk,
                  "row %d %s: head dims (%d, %d), expected (64, 64) or (128, 128)", i, e->name, e->head_dim_qk,
                  e->head_dim_v);
        break;
      case HEAD_DIMS_HOPPER_DQ_PAIRS:
        CHECK_MSG((e->head_dim_qk == 256 && e->head_dim_v == 256) || (e->head_dim_qk == 192 && e->head_dim_v == 128),
                  "row %d %s: head dims (%d, %d), expected (192, 128) or (256, 256)", i, e->name, e->head_dim_qk,
                  e->head_dim_v);
        break;
      case HEAD_DIMS_HOPPER_WG3_PAIRS:
        CHECK_MSG(e->head_dim_qk == 64 && e->head_dim_v == 64, "row %d %s: head dims (%d, %d), expected (64, 64)", i,
                  e->name, e->head_dim_qk, e->head_dim_v);
        break;
      case HEAD_DIMS_NONE:
        CHECK_MSG(e->head_dim_qk == 0 && e->head_dim_v == 0, "row %d %s: head dims (%d, %d), but %s has none", i,
                  e->name, e->head_dim_qk, e->head_dim_v, family->name);
        break;
    }
    if (family->extras == EXTRAS_BOTH) {
      CHECK_MSG(e->extras == 0 || e->extras == 1, "row %d %s: extras %d", i, e->name, e->extras);
    } else if (family->extras == EXTRAS_ONLY) {
      CHECK_MSG(e->extras == 1, "row %d %s: extras %d, but %s has only the EXTRAS variant", i, e->name, e->extras,
                family->name);
    } else {
      CHECK_MSG(e->extras == 0, "row %d %s: extras %d, but %s has no extras variant", i, e->name, e->extras,
                family->name);
    }
    const int32_t named = named_warps(e);
    CHECK_MSG(is_power_of_two(named) && named <= 8, "row %d %s: num_warps %d in the name", i, e->name, named);
    if (family->warp_specialized) {
      CHECK_MSG(e->num_warps > named && e->num_warps % 4 == 0 && e->num_warps <= 16,
                "row %d %s: a warp-specialized program of %d warps, %d in the default partition", i, e->name,
                e->num_warps, named);
    } else {
      CHECK_MSG(e->num_warps == named, "row %d %s: num_warps %d, the name says %d", i, e->name, e->num_warps, named);
    }
    if (family->fixed_block_m != 0) {
      CHECK_MSG(e->block_m == family->fixed_block_m, "row %d %s: block_m %d, %s's is %d", i, e->name, e->block_m,
                family->name, family->fixed_block_m);
    } else {
      CHECK_MSG(is_power_of_two(e->block_m), "row %d %s: block_m %d", i, e->name, e->block_m);
    }
    if (family->has_block_n) {
      CHECK_MSG(is_power_of_two(e->block_n), "row %d %s: block_n %d", i, e->name, e->block_n);
    } else {
      CHECK_MSG(e->block_n == 0, "row %d %s: block_n %d, but %s has no BLOCK_N", i, e->name, e->block_n,
                family->name);
    }
    if (e->family == AOTK__FAMILY_ATTN_MERGE) {
      CHECK_MSG(is_power_of_two(e->block_p) && e->block_p <= 64, "row %d %s: block_p %d", i, e->name, e->block_p);
    } else {
      CHECK_MSG(e->block_p == 0, "row %d %s: block_p %d, but only the merge has BLOCK_P", i, e->name, e->block_p);
    }
    CHECK_MSG(e->num_stages >= 1, "row %d %s: num_stages %d", i, e->name, e->num_stages);
    CHECK_MSG(e->min_seqlen >= 1, "row %d %s: min_seqlen %d", i, e->name, e->min_seqlen);
    /* sm_80 cubins also serve sm_86/sm_89, which allow 99 KiB per block. A kernel may need none. */
    int32_t shared_limit = e->arch == 80 ? 99 * 1024 : 227 * 1024;
    CHECK_MSG(e->shared_bytes >= 0 && e->shared_bytes <= shared_limit,
              "row %d sm_%d %s: shared_bytes %d, the target allows %d", i, e->arch, e->name, e->shared_bytes,
              shared_limit);
    CHECK_MSG(e->function_name != NULL && strcmp(e->function_name, entry_name(family)) == 0,
              "row %d %s: function name \"%s\", expected \"%s\"", i, e->name,
              e->function_name ? e->function_name : "(null)", entry_name(family));
    CHECK_MSG(e->param_kinds != NULL && strcmp(e->param_kinds, family->param_kinds) == 0,
              "row %d %s: param_kinds \"%s\", expected \"%s\"", i, e->name, e->param_kinds ? e->param_kinds : "(null)",
              family->param_kinds);
    char name[160];
    expected_name(e, family->name, name, sizeof name);
    CHECK_MSG(strcmp(e->name, name) == 0, "row %d: name %s, but its fields say %s", i, e->name, name);
  }
  for (int f = 0; f < FAMILY_COUNT; f++) {
    printf("    %s: %d rows\n", families[f].name, rows_per_family[f]);
    CHECK_MSG(rows_per_family[f] > 0 || aotk__kernel_filter[0] != '\0', "no %s row in an unfiltered build",
              families[f].name);
  }
}

/* What the selection launcher (src/sel/aotk_sel.c) relies on in the rows it picks:
 * - sel_fwd and sel_bwd_dq are tuned by the group size G = heads_q / heads_kv: a 16-row tile from G = 1,
 *   a 64-row tile from G = 17 (several programs per token when G > 64). A tile must hold every group its
 *   bound range serves whole (block_m >= the next bound - 1), and it steps one selected block at a time
 *   (block_n = the block size).
 * - sel_bwd_dkdv finds its key tile's block as first_key / block_size: a tile may not straddle two blocks
 *   (the block size is a multiple of block_n).
 * - The index's count and scatter passes run on one grid, sized from the count row's ENTRIES (block_m):
 *   the scatter row must take the same entries per program.
 * - The order pass sorts a list in the smallest of four tiles, SORT_TILE (block_m) / 8 to SORT_TILE. */
static void test_table_selection_tiles(void) {
  int variants = 0;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (e->family == AOTK__FAMILY_SEL_FWD || e->family == AOTK__FAMILY_SEL_BWD_DQ) {
      CHECK_MSG(e->block_n == e->block_size, "%s (sm_%d): block_n %d, block size %d", e->name, e->arch, e->block_n,
                e->block_size);
      CHECK_MSG(e->min_seqlen == 1 || e->min_seqlen == 17, "%s (sm_%d): tuning bound %d, expected group size 1 or 17",
                e->name, e->arch, e->min_seqlen);
      /* The next larger bound of the variant: the groups this row serves end just before it. */
      int next_bound = 0;
      for (int j = 0; j < aotk__kernel_count; j++) {
        const aotk__kernel_entry *o = &aotk__kernel_table[j];
        if (!same_variant(e, o) || o->min_seqlen <= e->min_seqlen) continue;
        if (next_bound == 0 || o->min_seqlen < next_bound) next_bound = o->min_seqlen;
      }
      if (e->min_seqlen == 1) {
        variants++;
        CHECK_MSG(next_bound == 17, "%s (sm_%d): the next group-size bound is %d, expected 17", e->name, e->arch,
                  next_bound);
      }
      if (next_bound != 0) {
        CHECK_MSG(e->block_m >= next_bound - 1, "%s (sm_%d): block_m %d cannot hold a group of %d heads", e->name,
                  e->arch, e->block_m, next_bound - 1);
      }
    } else if (e->family == AOTK__FAMILY_SEL_BWD_DKDV) {
      CHECK_MSG(e->block_n > 0 && e->block_size % e->block_n == 0,
                "%s (sm_%d): block_n %d does not divide the block size %d", e->name, e->arch, e->block_n,
                e->block_size);
    } else if (e->family == AOTK__FAMILY_SEL_INDEX_SCATTER) {
      int counts = 0;
      for (int j = 0; j < aotk__kernel_count; j++) {
        const aotk__kernel_entry *o = &aotk__kernel_table[j];
        if (o->family != AOTK__FAMILY_SEL_INDEX_COUNT || o->arch != e->arch) continue;
        counts++;
        CHECK_MSG(o->block_m == e->block_m, "sm_%d: %s takes %d index entries per program, %s %d", e->arch,
                  o->name, o->block_m, e->name, e->block_m);
      }
      CHECK_MSG(counts == 1, "sm_%d: %d sel_index_count rows for %s", e->arch, counts, e->name);
    } else if (e->family == AOTK__FAMILY_SEL_INDEX_ORDER) {
      CHECK_MSG(e->block_m >= 8 && e->block_m % 8 == 0, "%s (sm_%d): SORT_TILE %d has no eighth", e->name, e->arch,
                e->block_m);
    }
  }
  printf("    %d sel_fwd and sel_bwd_dq variants\n", variants);
  CHECK_MSG(variants > 0 || aotk__kernel_filter[0] != '\0', "no selection row in an unfiltered build");
}

/* What the TMA launcher (src/attn/aotk_attn.c, encode_descriptor) hands cuTensorMapEncodeTiled comes from
 * the row: per descriptor (Q, K, V, and for the backward's dK/dV pass dO, in the kernel's parameter
 * order) the swizzle and the box, outermost first, over the view [batch, seqlen, heads * head_dim]. The
 * box must be one batch, the kernel's tile of rows (block_m query rows for Q and dO, or for the
 * warp-specialized forward one consumer warpgroup's 64 of them; block_n key rows for K and V), and a
 * slice of one head that tiles it exactly (a box past the head would read the next head's columns, and
 * the kernel loads the head as whole boxes); for the Gluon kernels a power of two wide, since Gluon's
 * shapes must be (a head of 192 is three 64-column boxes side by side); TMA's own rules: at most 256 per
 * dimension, an inner extent of a multiple of 16 bytes, and at most the swizzle's span (128 bytes for the
 * 128-byte swizzle, 3). The Triton TMA forward takes three, the Gluon forward four (O last, in 64-row boxes), the backward's Gluon passes four (the dK/dV
 * pass, and the dQ pass with the same tiles: block_m rows of Q and dO, block_n of K and V), the fused
 * form five (the fifth over the fp32 dQ accumulator, [batch * heads_q, stats_stride, head_dim_qk], in
 * block_m-row tiles); other rows have none. */
enum { TMA_SWIZZLE_NONE = 0, TMA_SWIZZLE_128B = 3, TMA_ELEMENT_BYTES = 2 };
static void test_table_tma_descriptors(void) {
  int tma_rows = 0, rows_of_192 = 0;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    const bool fused = e->family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER;
    const bool bwd = e->family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER || e->family == AOTK__FAMILY_ATTN_BWD_DQ_HOPPER || fused;
    const bool hopper_fwd = e->family == AOTK__FAMILY_ATTN_FWD_HOPPER || e->family == AOTK__FAMILY_ATTN_FWD_HOPPER_WG3;
    if (e->family != AOTK__FAMILY_ATTN_FWD_TMA && !hopper_fwd && !bwd) {
      CHECK_MSG(e->descriptor_count == 0, "row %d %s: %d TMA descriptors, but it takes none", i, e->name,
                e->descriptor_count);
      static const aotk__tma_layout none[AOTK__MAX_TMA_DESCRIPTORS];
      CHECK_MSG(memcmp(e->descriptors, none, sizeof none) == 0, "row %d %s: descriptor layouts set", i, e->name);
      continue;
    }
    tma_rows++;
    const int count = fused ? 5 : bwd || hopper_fwd ? 4 : 3;
    CHECK_MSG(e->descriptor_count == count, "row %d %s: %d TMA descriptors, expected %d (Q, K, V%s)", i, e->name,
              e->descriptor_count, count,
              fused ? ", dO, the dQ accumulator" : bwd ? ", dO" : hopper_fwd ? ", O" : "");
    if (e->descriptor_count != count) continue;
    rows_of_192 += e->head_dim_qk == 192;
    /* The Gluon forward's fourth is O's, in 64-row boxes like Q's, dv wide like dO's. */
    const char *const names[5] = {"Q", "K", "V", hopper_fwd ? "O" : "dO", "dQ accumulator"};
    const int32_t q_rows = hopper_fwd ? 64 : e->block_m;
    const int32_t rows[5] = {q_rows, e->block_n, e->block_n, q_rows, e->block_m};
    const int32_t head_dims[5] = {e->head_dim_qk, e->head_dim_qk, e->head_dim_v, e->head_dim_v, e->head_dim_qk};
    /* The accumulator is fp32 ([batch * heads_q, stats_stride, head_dim_qk]), the others fp16/bf16. */
    const int32_t element_bytes[5] = {TMA_ELEMENT_BYTES, TMA_ELEMENT_BYTES, TMA_ELEMENT_BYTES, TMA_ELEMENT_BYTES, 4};
    for (int d = 0; d < count; d++) {
      const aotk__tma_layout *t = &e->descriptors[d];
      CHECK_MSG(t->swizzle >= TMA_SWIZZLE_NONE && t->swizzle <= TMA_SWIZZLE_128B, "row %d %s %s: swizzle %d", i,
                e->name, names[d], t->swizzle);
      CHECK_MSG(t->box[0] == 1, "row %d %s %s: box[0] (batch) %d, expected 1", i, e->name, names[d], t->box[0]);
      CHECK_MSG(t->box[1] == rows[d], "row %d %s %s: box[1] (rows) %d, expected the tile's %d", i, e->name, names[d],
                t->box[1], rows[d]);
      const int32_t inner = t->box[2];
      CHECK_MSG(inner > 0 && inner <= 256 && head_dims[d] % inner == 0,
                "row %d %s %s: box[2] %d does not divide the head dim %d", i, e->name, names[d], inner, head_dims[d]);
      if (hopper_fwd || bwd) {
        CHECK_MSG(is_power_of_two(inner), "row %d %s %s: box[2] %d is not a power of two (a Gluon shape)", i,
                  e->name, names[d], inner);
      }
      CHECK_MSG(inner * element_bytes[d] % 16 == 0, "row %d %s %s: box[2] %d is not a multiple of 16 bytes", i,
                e->name, names[d], inner);
      if (t->swizzle == TMA_SWIZZLE_128B) {
        CHECK_MSG(inner * element_bytes[d] <= 128, "row %d %s %s: box[2] %d is %d bytes, over the 128-byte swizzle",
                  i, e->name, names[d], inner, inner * element_bytes[d]);
      }
      for (int b = 0; b < 3; b++) {
        CHECK_MSG(t->box[b] >= 1 && t->box[b] <= 256, "row %d %s %s: box[%d] %d outside [1, 256]", i, e->name,
                  names[d], b, t->box[b]);
      }
    }
    for (int d = count; d < AOTK__MAX_TMA_DESCRIPTORS; d++) {
      CHECK_MSG(e->descriptors[d].swizzle == 0 && e->descriptors[d].box[0] == 0, "row %d %s: descriptor %d set", i,
                e->name, d);
    }
  }
  printf("    %d TMA rows (the TMA forward, the Gluon forward and backward), %d of head dim 192\n", tma_rows,
         rows_of_192);
  CHECK_MSG(tma_rows > 0 || aotk__kernel_filter[0] != '\0', "no TMA row in an unfiltered build");
  /* The Gluon forward's (192, 128) rows, whose Q and K boxes the checks above hold to a power of two
   * that divides 192: whole boxes side by side. */
  CHECK_MSG(rows_of_192 > 0 || aotk__kernel_filter[0] != '\0', "no TMA row of head dim 192 in an unfiltered build");
}

/* ---- each image ----------------------------------------------------------------------------- */

/* A kernel's .entry parameters as the launcher passes them, from its kinds: each one's size in bytes
 * and the alignment the parameter space gives it. A 't' is seven: the 128-byte map (".align 64"),
 * then the view's shape (3 x 4 bytes) and strides (3 x 8 bytes). Then Triton's two hidden pointers.
 * Returns how many, or -1 if the kinds hold an unknown letter or too many. */
enum { MAX_ENTRY_PARAMS = 96, TMA_MAP_BYTES = 128, TMA_MAP_ALIGNMENT = 64, TMA_RANK = 3 };
typedef struct entry_param {
  char kind; /* the kind it comes from ('p' for the hidden pointers) */
  int part;  /* within a 't': 0 the map, 1-3 the shape, 4-6 the strides; 0 otherwise */
  int bytes, alignment;
} entry_param;

static int expected_entry_params(const char *param_kinds, entry_param out[MAX_ENTRY_PARAMS]) {
  int count = 0;
  size_t kinds = strlen(param_kinds);
  for (size_t k = 0; k < kinds + HIDDEN_PARAMS; k++) {
    char kind = k < kinds ? param_kinds[k] : 'p';
    int parts = kind == 't' ? 1 + 2 * TMA_RANK : 1;
    if (count + parts > MAX_ENTRY_PARAMS) return -1;
    for (int part = 0; part < parts; part++) {
      entry_param *e = &out[count++];
      e->kind = kind;
      e->part = part;
      switch (kind) {
        case 'p':
        case 'l':
          e->bytes = e->alignment = 8;
          break;
        case 'i':
        case 'f':
          e->bytes = e->alignment = 4;
          break;
        case 't':
          e->bytes = part == 0 ? TMA_MAP_BYTES : part <= TMA_RANK ? 4 : 8;
          e->alignment = part == 0 ? TMA_MAP_ALIGNMENT : e->bytes;
          break;
        default:
          return -1;
      }
    }
  }
  return count;
}

/* Cubins per family whose .nv.info parameter table is exactly the family's parameters. */
static int cubin_entries_matching[FAMILY_COUNT];

static uint16_t read_u16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t read_u32(const unsigned char *p) { return (uint32_t)read_u16(p) | (uint32_t)read_u16(p + 2) << 16; }
static uint64_t read_u64(const unsigned char *p) { return (uint64_t)read_u32(p) | (uint64_t)read_u32(p + 4) << 32; }

/* The cubin's own record of the kernel's parameters: the section ".nv.info.<function>" holds one
 * EIATTR_KPARAM_INFO attribute per parameter (ordinal, offset in the parameter space, and size in the
 * top 14 bits of its last word), and EIATTR_PARAM_CBANK where that space starts in its constant bank
 * (alignments hold there: the kernel reads a map in place). Each must be what the launcher packs: this
 * is the check of the sm_90 rows, which embed no PTX, and so of the TMA kernels' descriptors (a
 * 128-byte, 64-aligned map, then 3 x 4 and 3 x 8 bytes). */
enum { EIFMT_NVAL = 1, EIFMT_BVAL = 2, EIFMT_HVAL = 3, EIFMT_SVAL = 4 };
enum { EIATTR_PARAM_CBANK = 0x0a, EIATTR_KPARAM_INFO = 0x17 };
static void check_cubin_parameters(int row, const unsigned char *elf, size_t bytes) {
  const aotk__kernel_entry *e = &aotk__kernel_table[row];
  const uint64_t section_headers = read_u64(elf + 0x28);
  const uint16_t header_size = read_u16(elf + 0x3a), sections = read_u16(elf + 0x3c), names = read_u16(elf + 0x3e);
  bool headers_fit = header_size >= 64 && names < sections && section_headers <= bytes &&
                     (uint64_t)sections * header_size <= bytes - section_headers;
  CHECK_MSG(headers_fit, "row %d sm_%d %s: the cubin's section headers lie outside it", row, e->arch, e->name);
  if (!headers_fit) return;
  const unsigned char *names_header = elf + section_headers + (size_t)names * header_size;
  const uint64_t names_offset = read_u64(names_header + 0x18), names_size = read_u64(names_header + 0x20);
  CHECK_MSG(names_offset <= bytes && names_size <= bytes - names_offset, "row %d %s: the section names lie outside",
            row, e->name);
  if (names_offset > bytes || names_size > bytes - names_offset) return;
  char wanted[160];
  snprintf(wanted, sizeof wanted, ".nv.info.%s", e->function_name);
  const unsigned char *info = NULL;
  uint64_t info_size = 0;
  for (int i = 0; i < sections; i++) {
    const unsigned char *header = elf + section_headers + (size_t)i * header_size;
    uint32_t name = read_u32(header);
    if (name >= names_size) continue;
    const char *section_name = (const char *)elf + names_offset + name;
    if (memchr(section_name, '\0', names_size - name) == NULL || strcmp(section_name, wanted) != 0) {
      continue;
    }
    uint64_t offset = read_u64(header + 0x18), size = read_u64(header + 0x20);
    if (offset <= bytes && size <= bytes - offset) info = elf + offset, info_size = size;
  }
  CHECK_MSG(info != NULL, "row %d sm_%d %s: the cubin has no %s section", row, e->arch, e->name, wanted);
  if (info == NULL) return;

  const struct family *family = family_of(e);
  entry_param expected[MAX_ENTRY_PARAMS];
  int expected_count = expected_entry_params(family != NULL ? family->param_kinds : e->param_kinds, expected);
  CHECK_MSG(expected_count > 0, "row %d %s: cannot expand its parameter kinds", row, e->name);
  if (expected_count <= 0) return;
  /* First the attributes: each parameter's offset and size, and where the parameters start in their
   * constant bank (EIATTR_PARAM_CBANK: section, offset, size), which the alignments are relative to. */
  int offsets[MAX_ENTRY_PARAMS], sizes[MAX_ENTRY_PARAMS];
  bool seen[MAX_ENTRY_PARAMS] = {false};
  int found = 0, mismatches = 0;
  long bank_offset = -1;
  for (uint64_t at = 0; at + 4 <= info_size;) {
    const unsigned char *attribute = info + at;
    uint64_t length = attribute[0] == EIFMT_SVAL ? 4u + read_u16(attribute + 2) : 4u;
    bool known_format = attribute[0] >= EIFMT_NVAL && attribute[0] <= EIFMT_SVAL;
    CHECK_MSG(known_format && at + length <= info_size, "row %d %s: %s attribute at %llu: format %d, %llu bytes", row,
              e->name, wanted, (unsigned long long)at, attribute[0], (unsigned long long)length);
    if (!known_format || at + length > info_size) return;
    if (attribute[0] == EIFMT_SVAL && attribute[1] == EIATTR_PARAM_CBANK && length >= 12) {
      bank_offset = read_u16(attribute + 8);
    } else if (attribute[0] == EIFMT_SVAL && attribute[1] == EIATTR_KPARAM_INFO && length >= 16) {
      const int ordinal = read_u16(attribute + 8);
      found++;
      CHECK_MSG(ordinal < expected_count && !seen[ordinal],
                "row %d sm_%d %s: parameter %d is past the %d expected, or listed twice", row, e->arch, e->name,
                ordinal, expected_count);
      if (ordinal < expected_count && !seen[ordinal]) {
        seen[ordinal] = true;
        offsets[ordinal] = read_u16(attribute + 10);
        sizes[ordinal] = (int)(read_u32(attribute + 12) >> 18);
      } else {
        mismatches++;
      }
    }
    at += length;
  }
  CHECK_MSG(found == expected_count, "row %d sm_%d %s: the cubin lists %d parameters, expected %d", row, e->arch,
            e->name, found, expected_count);
  CHECK_MSG(bank_offset >= 0, "row %d sm_%d %s: no EIATTR_PARAM_CBANK", row, e->arch, e->name);
  for (int i = 0; i < expected_count && bank_offset >= 0; i++) {
    if (!seen[i]) continue;
    const entry_param *x = &expected[i];
    bool matches = sizes[i] == x->bytes && (bank_offset + offsets[i]) % x->alignment == 0;
    CHECK_MSG(matches, "row %d sm_%d %s: parameter %d (kind '%c', part %d) is %d bytes at %ld + %d, expected %d bytes "
              "aligned to %d", row, e->arch, e->name, i, x->kind, x->part, sizes[i], bank_offset, offsets[i],
              x->bytes, x->alignment);
    mismatches += !matches;
  }
  if (bank_offset < 0) mismatches++;
  if (family != NULL && found == expected_count && mismatches == 0) cubin_entries_matching[family - families]++;
}

static void check_cubin(int row) {
  const aotk__kernel_entry *e = &aotk__kernel_table[row];
  CHECK_MSG(e->cubin.data != NULL && e->cubin.raw_bytes > 0, "row %d sm_%d %s: no cubin", row, e->arch, e->name);
  unsigned char *raw = (unsigned char *)1; /* decompress must set it, also on failure */
  aotk_status status = aotk__image_decompress(&e->cubin, e->name, &raw);
  CHECK_MSG(status == AOTK_OK, "row %d sm_%d %s cubin: %s (%s)", row, e->arch, e->name, aotk_status_name(status),
            aotk_last_error());
  if (status != AOTK_OK) {
    CHECK(raw == NULL);
    return;
  }
  CHECK_MSG(fnv1a64(raw, e->cubin.raw_bytes) == e->cubin.hash, "row %d sm_%d %s: cubin hash differs", row, e->arch,
            e->name);
  CHECK_MSG(e->cubin.raw_bytes >= 64 && memcmp(raw, "\x7f" "ELF", 4) == 0, "row %d sm_%d %s: cubin is not ELF",
            row, e->arch, e->name);
  if (e->cubin.raw_bytes >= 64) {
    uint16_t machine;
    memcpy(&machine, raw + 18, sizeof machine); /* e_machine; cubins are little-endian */
    CHECK_MSG(raw[4] == ELF_CLASS_64 && machine == ELF_MACHINE_CUDA, "row %d sm_%d %s: ELF class %d, machine %u",
              row, e->arch, e->name, raw[4], (unsigned)machine);
    /* In the CUDA ELF ABI version 7 (what ptxas 12.x writes) the low byte of e_flags is the SM. Other
     * versions lay e_flags out differently; the test does not guess at them. */
    if (raw[8] == 7) {
      uint32_t flags;
      memcpy(&flags, raw + 48, sizeof flags);
      CHECK_MSG((int)(flags & 0xffu) == e->arch, "row %d sm_%d %s: the cubin targets sm_%u", row, e->arch, e->name,
                flags & 0xffu);
    }
    if (raw[4] == ELF_CLASS_64 && machine == ELF_MACHINE_CUDA) check_cubin_parameters(row, raw, e->cubin.raw_bytes);
  }
  free(raw);
}

/* PTX images per family whose .entry took exactly the family's parameters. */
static int ptx_entries_matching[FAMILY_COUNT];

static const char *ptx_param_spelling(const entry_param *x) {
  if (x->kind == 't' && x->part == 0) return ".align 64 .b8 <name>[128]";
  return x->bytes == 8 ? ".u64" : x->kind == 'f' ? ".f32" : ".u32";
}

static bool followed_by_space(const char *text, const char *word) {
  size_t length = strlen(word);
  return strncmp(text, word, length) == 0 && (text[length] == ' ' || text[length] == '\t');
}

/* One .entry parameter's declaration (the text after ".param "): ".u64 name", ".u32 name", ".f32 name",
 * or a TMA descriptor's map, ".align 64 .b8 name[128]". */
static bool ptx_param_matches(const char *type, const entry_param *x) {
  if (x->kind == 't' && x->part == 0) {
    if (!followed_by_space(type, ".align")) return false;
    char *rest;
    long alignment = strtol(type + strlen(".align"), &rest, 10);
    while (*rest == ' ' || *rest == '\t') rest++;
    if (alignment != TMA_MAP_ALIGNMENT || !followed_by_space(rest, ".b8")) return false;
    rest += strlen(".b8");
    while (*rest == ' ' || *rest == '\t') rest++;
    while ((*rest >= 'a' && *rest <= 'z') || (*rest >= 'A' && *rest <= 'Z') || (*rest >= '0' && *rest <= '9') ||
           *rest == '_' || *rest == '$') {
      rest++;
    }
    return *rest == '[' && strtol(rest + 1, &rest, 10) == TMA_MAP_BYTES && *rest == ']';
  }
  return followed_by_space(type, ptx_param_spelling(x));
}

/* The text between ".entry <name>(" and its ")", as the list of parameter declarations; checks
 * each one's type against the kinds the launcher packs. */
static void check_ptx_parameters(int row, const char *ptx) {
  const aotk__kernel_entry *e = &aotk__kernel_table[row];
  char entry[160];
  snprintf(entry, sizeof entry, ".entry %s(", e->function_name);
  const char *start = strstr(ptx, entry);
  CHECK_MSG(start != NULL, "row %d %s: the PTX has no \"%s\"", row, e->name, entry);
  if (start == NULL) return;
  CHECK_MSG(strstr(start + 1, entry) == NULL, "row %d %s: the PTX has two \"%s\"", row, e->name, entry);
  start += strlen(entry);
  const char *end = strchr(start, ')');
  CHECK_MSG(end != NULL, "row %d %s: the .entry's parameter list never closes", row, e->name);
  if (end == NULL) return;

  /* The family's list as this test writes it (the row's own is compared with it above); a row of an
   * unknown family is checked against what it claims. */
  const struct family *family = family_of(e);
  const char *param_kinds = family != NULL ? family->param_kinds : e->param_kinds;
  entry_param expected[MAX_ENTRY_PARAMS];
  int expected_count = expected_entry_params(param_kinds, expected);
  CHECK_MSG(expected_count > 0, "row %d %s: cannot expand its parameter kinds \"%s\"", row, e->name, param_kinds);
  if (expected_count <= 0) return;
  int count = 0;
  bool all_match = true;
  for (const char *p = start; (p = strstr(p, ".param")) != NULL && p < end; p += strlen(".param")) {
    const char *type = p + strlen(".param");
    while (*type == ' ' || *type == '\t') type++;
    if (count < expected_count) {
      bool type_matches = ptx_param_matches(type, &expected[count]);
      CHECK_MSG(type_matches, "row %d %s: parameter %d (kind '%c', part %d) is declared \"%.40s\", expected %s", row,
                e->name, count, expected[count].kind, expected[count].part, type, ptx_param_spelling(&expected[count]));
      all_match = all_match && type_matches;
    }
    count++;
  }
  CHECK_MSG(count == expected_count, "row %d %s: the .entry has %d parameters, expected %d (\"%s\" + %d hidden)", row,
            e->name, count, expected_count, param_kinds, HIDDEN_PARAMS);
  if (family != NULL && count == expected_count && all_match) ptx_entries_matching[family - families]++;

  /* Triton pins the block size in the PTX; the launcher's 32 * num_warps must agree with it. */
  const char *reqntid = strstr(end, ".reqntid");
  if (reqntid != NULL) {
    long threads = strtol(reqntid + strlen(".reqntid"), NULL, 10);
    CHECK_MSG(threads == 32L * e->num_warps, "row %d %s: .reqntid %ld but num_warps %d", row, e->name, threads,
              e->num_warps);
  }
}

static void check_ptx(int row) {
  const aotk__kernel_entry *e = &aotk__kernel_table[row];
  CHECK_MSG(e->ptx.data != NULL && e->ptx.raw_bytes > 0, "row %d sm_80 %s: no PTX", row, e->name);
  unsigned char *raw = NULL;
  aotk_status status = aotk__image_decompress(&e->ptx, e->name, &raw);
  CHECK_MSG(status == AOTK_OK, "row %d sm_80 %s PTX: %s (%s)", row, e->name, aotk_status_name(status),
            aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(fnv1a64(raw, e->ptx.raw_bytes) == e->ptx.hash, "row %d %s: PTX hash differs", row, e->name);
  /* The driver reads PTX as a C string: it must end in its NUL and hold no other. */
  bool terminated = raw[e->ptx.raw_bytes - 1] == '\0';
  CHECK_MSG(terminated, "row %d %s: the PTX's last byte is %d, not NUL", row, e->name, raw[e->ptx.raw_bytes - 1]);
  if (terminated) {
    const char *ptx = (const char *)raw;
    CHECK_MSG(strlen(ptx) == e->ptx.raw_bytes - 1, "row %d %s: a NUL at byte %zu of %u", row, e->name, strlen(ptx),
              e->ptx.raw_bytes);
    const char *target = strstr(ptx, ".target sm_80");
    CHECK_MSG(target != NULL && (target[13] == '\n' || target[13] == ' ' || target[13] == ','),
              "row %d %s: the PTX does not target plain sm_80", row, e->name);
    check_ptx_parameters(row, ptx);
  }
  free(raw);
}

static void test_every_image_decompresses_and_matches_its_row(void) {
  int cubins = 0, ptxs = 0;
  for (int row = 0; row < aotk__kernel_count; row++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[row];
    check_cubin(row);
    cubins++;
    if (e->arch == 80) {
      check_ptx(row);
      ptxs++;
    } else {
      /* sm_90a PTX would serve no GPU (it is not forward compatible), so none is embedded. */
      CHECK_MSG(e->ptx.raw_bytes == 0 && e->ptx.data == NULL, "row %d sm_%d %s: has a %u-byte PTX", row, e->arch,
                e->name, e->ptx.raw_bytes);
    }
  }
  printf("    %d cubins, %d PTX images checked\n", cubins, ptxs);
  /* Every family's PTX was parsed: a family whose .entry the parser never matched would pass unseen. */
  for (int f = 0; f < FAMILY_COUNT; f++) {
    int sm80_rows = 0;
    for (int row = 0; row < aotk__kernel_count; row++) {
      sm80_rows += aotk__kernel_table[row].family == families[f].id && aotk__kernel_table[row].arch == 80;
    }
    int rows = 0;
    for (int row = 0; row < aotk__kernel_count; row++) rows += aotk__kernel_table[row].family == families[f].id;
    printf("    %s: %d of %d cubins and %d of %d PTX entries take its %zu parameters + %d hidden\n", families[f].name,
           cubin_entries_matching[f], rows, ptx_entries_matching[f], sm80_rows, strlen(families[f].param_kinds),
           HIDDEN_PARAMS);
    CHECK_MSG(cubin_entries_matching[f] == rows, "%s: %d of %d cubins match", families[f].name,
              cubin_entries_matching[f], rows);
    CHECK_MSG(ptx_entries_matching[f] == sm80_rows, "%s: %d of %d PTX entries match", families[f].name,
              ptx_entries_matching[f], sm80_rows);
  }
}

/* ---- damaged images ------------------------------------------------------------------------- */

/* A private copy of a row's compressed image, with `extra` spare bytes after it. */
static unsigned char *copy_image(const aotk__image *image, size_t extra, aotk__image *copy) {
  unsigned char *bytes = malloc(image->compressed_bytes + extra);
  if (bytes != NULL) {
    memcpy(bytes, image->data, image->compressed_bytes);
    memset(bytes + image->compressed_bytes, 0x42, extra);
  }
  *copy = *image;
  copy->data = bytes;
  return bytes;
}

/* Decompresses `image` expecting `expected`; checks the out-pointer is NULL and the message names
 * the image. Frees whatever comes back. */
static void check_decompress_fails(const aotk__image *image, aotk_status expected, const char *label) {
  unsigned char *raw = (unsigned char *)1;
  aotk_status status = aotk__image_decompress(image, label, &raw);
  CHECK_MSG(status == expected, "%s: %s, expected %s", label, aotk_status_name(status), aotk_status_name(expected));
  CHECK_MSG(raw == NULL, "%s: the out-pointer was not cleared on failure", label);
  if (status != AOTK_OK) {
    CHECK_MSG(message_mentions(label), "%s: the message \"%s\" does not name the image", label, aotk_last_error());
  } else {
    free(raw);
  }
}

/* One cubin and one PTX, so both kinds of image are covered. */
static const aotk__image *corruption_subjects(int which) {
  if (which == 0) return &aotk__kernel_table[0].cubin;
  for (int row = 0; row < aotk__kernel_count; row++) {
    if (aotk__kernel_table[row].ptx.raw_bytes > 0) return &aotk__kernel_table[row].ptx;
  }
  return NULL;
}

static void test_corrupt_images_rejected(void) {
  for (int which = 0; which < 2; which++) {
    const aotk__image *original = corruption_subjects(which);
    if (original == NULL) continue;
    aotk__image copy;
    unsigned char *bytes = copy_image(original, 0, &copy);
    CHECK(bytes != NULL);
    if (bytes == NULL) return;

    /* An intact copy decodes: the failures below are due to the damage alone. */
    unsigned char *raw = NULL;
    CHECK(aotk__image_decompress(&copy, "intact copy", &raw) == AOTK_OK);
    free(raw);

    bytes[copy.compressed_bytes / 2] ^= 0x5a;
    check_decompress_fails(&copy, AOTK_ERROR_IMAGE_CORRUPT, "one byte flipped in the middle");
    bytes[copy.compressed_bytes / 2] ^= 0x5a;

    copy.hash = original->hash ^ 1;
    check_decompress_fails(&copy, AOTK_ERROR_IMAGE_CORRUPT, "intact bytes, wrong hash");
    copy.hash = original->hash;

    copy.compressed_bytes = original->compressed_bytes - 1;
    check_decompress_fails(&copy, AOTK_ERROR_IMAGE_CORRUPT, "compressed size one byte short");
    copy.compressed_bytes = original->compressed_bytes / 2;
    check_decompress_fails(&copy, AOTK_ERROR_IMAGE_CORRUPT, "compressed size halved");
    copy.compressed_bytes = original->compressed_bytes;

    copy.raw_bytes = original->raw_bytes - 1;
    check_decompress_fails(&copy, AOTK_ERROR_IMAGE_CORRUPT, "raw size one byte short");
    copy.raw_bytes = original->raw_bytes + 1;
    check_decompress_fails(&copy, AOTK_ERROR_IMAGE_CORRUPT, "raw size one byte long");
    copy.raw_bytes = original->raw_bytes;

    copy.raw_bytes = 0;
    check_decompress_fails(&copy, AOTK_ERROR_KERNEL_NOT_BUILT, "raw_bytes 0");
    copy.raw_bytes = original->raw_bytes;
    copy.data = NULL;
    check_decompress_fails(&copy, AOTK_ERROR_KERNEL_NOT_BUILT, "data NULL");
    free(bytes);

    /* Bytes after the stream: the size recorded in the table no longer matches what was decoded. */
    bytes = copy_image(original, 8, &copy);
    CHECK(bytes != NULL);
    if (bytes == NULL) return;
    copy.compressed_bytes = original->compressed_bytes + 8;
    check_decompress_fails(&copy, AOTK_ERROR_IMAGE_CORRUPT, "trailing garbage after the stream");
    free(bytes);
  }
}

int main(void) {
  RUN_TEST(test_hash_function_known_values);
  RUN_TEST(test_table_is_unfiltered);
  RUN_TEST(test_table_covers_every_variant_from_seqlen_one);
  RUN_TEST(test_table_names_unique_per_arch);
  RUN_TEST(test_kernel_refusals_name_the_family);
  RUN_TEST(test_table_tuning_bounds_distinct);
  RUN_TEST(test_table_rows_describe_valid_configs);
  RUN_TEST(test_table_selection_tiles);
  RUN_TEST(test_table_tma_descriptors);
  RUN_TEST(test_every_image_decompresses_and_matches_its_row);
  RUN_TEST(test_corrupt_images_rejected);
  return aotk_test_finish();
}
