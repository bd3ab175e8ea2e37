/*
 * The fake CUDA driver of the API tests (tests/api/test_api_*.c), installed with
 * aotk__driver_set_for_testing (SQLite's fault simulation). It answers as a GPU of a chosen compute
 * capability would, or fails where a case injects a fault, and records each call: how many of each
 * entry, the kernels it gave out, and the first launches with their arguments, read by the kernels'
 * parameter lists written here from their signatures (not taken from the library), so that the two are
 * compared. The tensors' device pointers are made-up addresses that nothing dereferences: a bad input
 * must be refused before the driver is reached, which the fake proves by having recorded no call at all.
 */
#ifndef AOTK_API_FAKE_DRIVER_H
#define AOTK_API_FAKE_DRIVER_H

/* The test binaries of tests/api are built from several files; they share one record of the cases'
 * results (tests/aotk_test_harness.h), defined in api_fake_driver.c. */
#define AOTK_TEST_STATE_EXTERN 1

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "aotk.h"
#include "aotk_driver.h"
#include "aotk_kernel_table.h"
#include "aotk_test_harness.h"
/* ---- made-up device addresses --------------------------------------------------------------- */

/* 16-byte aligned and far apart; never dereferenced. */
#define FAKE_Q ((void *)(uintptr_t)0x10000000u)
#define FAKE_K ((void *)(uintptr_t)0x20000000u)
#define FAKE_V ((void *)(uintptr_t)0x30000000u)
#define FAKE_OUT ((void *)(uintptr_t)0x40000000u)
#define FAKE_LSE ((void *)(uintptr_t)0x50000000u)
#define FAKE_DOUT ((void *)(uintptr_t)0x60000000u)
#define FAKE_DQ ((void *)(uintptr_t)0x70000000u)
#define FAKE_DK ((void *)(uintptr_t)0x80000000u)
#define FAKE_DV ((void *)(uintptr_t)0x90000000u)
#define FAKE_WORKSPACE ((void *)(uintptr_t)0xA0000000u)
#define FAKE_CU_SEQLENS_Q ((void *)(uintptr_t)0xB0000000u)
#define FAKE_CU_SEQLENS_K ((void *)(uintptr_t)0xC0000000u)
#define FAKE_ALIBI ((void *)(uintptr_t)0xD0000000u)
#define FAKE_SINKS ((void *)(uintptr_t)0xE0000000u)
#define FAKE_DSINKS ((void *)(uintptr_t)0xE8000000u)
#define FAKE_RNG_STATE ((void *)(uintptr_t)0xF0000000u)
#define FAKE_MASK ((void *)(uintptr_t)0xF8000000u)
#define FAKE_BLOCK_IDX ((void *)(uintptr_t)0xC8000000u)
#define FAKE_BLOCK_CNT ((void *)(uintptr_t)0xD8000000u)
#define FAKE_BLOCK_TABLE ((void *)(uintptr_t)0xB8000000u)
#define FAKE_CACHE_SEQLENS ((void *)(uintptr_t)0xA8000000u)
#define FAKE_CACHE_LEFTPAD ((void *)(uintptr_t)0x58000000u)
#define FAKE_PARTIALS ((void *)(uintptr_t)0x68000000u)
#define FAKE_LSE_PARTIALS ((void *)(uintptr_t)0x78000000u)
#define FAKE_K_NEW ((void *)(uintptr_t)0x88000000u)
#define FAKE_V_NEW ((void *)(uintptr_t)0x98000000u)
#define FAKE_STREAM ((aotk_stream)(uintptr_t)0x5000u)
#define FAKE_CONTEXT ((CUcontext)(uintptr_t)0x6000u)
#define FAKE_LIBRARY_BASE 0x7000u
#define FAKE_KERNEL_BASE 0x9000u
/* A kernel handle is FAKE_KERNEL_BASE + KERNEL_HANDLE_STRIDE * (its kernel_id) + 16 * (the load that
 * produced it): the fake can tell which kernel a launch names. */
#define KERNEL_HANDLE_STRIDE 0x100000u

static inline void *byte_offset(void *pointer, uintptr_t bytes) { return (void *)((uintptr_t)pointer + bytes); }

/* ---- the fake driver ------------------------------------------------------------------------ */

enum driver_function {
#define DRIVER_FUNCTION_ENUM(name, params) CALL_##name,
  AOTK__DRIVER_FUNCTIONS(DRIVER_FUNCTION_ENUM)
#undef DRIVER_FUNCTION_ENUM
  DRIVER_FUNCTION_COUNT
};

/* Each kernel's parameters in the catalog's order (codegen/aotk_catalog.py *_PARAMS), then Triton's
 * two hidden scratch pointers: p pointer, l int64, i int32, f fp32, t a host-side TMA descriptor (seven
 * arguments: the 128-byte CUtensorMap, then its view's shape as 3 x int32 and strides as 3 x int64,
 * outermost first). "lii" is one tensor's (batch, sequence, head) strides. The fake driver reads each
 * launch's arguments by these lists, written here
 * from the kernels' signatures rather than taken from the library, so that the two are compared. */
#define STRIDES "lii"
#define ATTN_FWD_KINDS "ppppp" "pp" "ppp" STRIDES STRIDES STRIDES STRIDES "lil" "iiiii" "iiiii" "fff" "if"
/* The sm_90 TMA forward: attn_fwd's, then descriptors of Q, K and V over [batch, seqlen, heads * d]. */
#define ATTN_FWD_TMA_KINDS ATTN_FWD_KINDS "ttt"
#define ATTN_FWD_HOPPER_KINDS ATTN_FWD_TMA_KINDS "t" "i"
/* The sm_90 paged prefill (attn_fwd_hopper_paged): the Gluon forward's, then BlockTable, CacheSeqlens,
 * CacheLeftpad, stride_bt and page_shift. */
#define ATTN_FWD_HOPPER_PAGED_KINDS ATTN_FWD_HOPPER_KINDS "ppp" "l" "i" "p" "ll" "ii"
#define ATTN_DROPOUT_MASK_KINDS "pppp" "lll" "iiiiii"
#define ATTN_BWD_PREPROCESS_KINDS "ppppp" "ppp" STRIDES STRIDES "li" "iiii" "i" "ii"
#define ATTN_BWD_SINK_REDUCE_KINDS "ppi"
#define ATTN_BWD_DKDV_KINDS \
  "pppppppp" "pppp" STRIDES STRIDES STRIDES STRIDES STRIDES STRIDES "l" "iiiiii" "i" "iiiii" "f" "fff" "if"
#define ATTN_BWD_DQ_KINDS "ppppppp" "pppp" STRIDES STRIDES STRIDES STRIDES STRIDES "l" "iiiii" "i" "iiiii" "f" "fff" "if"
/* The non-deterministic backward's cast of its fp32 dQ accumulator into dq: DQAcc, DQ, CuSeqlensQ, dq's
 * strides, seqlen_q, heads_q, num_m_blocks, stats_stride, flags. */
#define ATTN_BWD_DQ_CONVERT_KINDS "ppp" STRIDES "iii" "i" "i"
#define HIDDEN_KINDS "pp"
/* Selection attention (kernels/sel_attn.py): "li" is a packed tensor's (token: int64, head: int32) strides. */
#define PACKED "li"
#define SEL_FWD_KINDS "ppppp" "pp" "pp" PACKED PACKED PACKED PACKED PACKED PACKED PACKED "iiiiiiii" "f"
#define SEL_BWD_DQ_KINDS \
  "ppppppp" "p" "pp" "pp" "p" PACKED PACKED PACKED PACKED PACKED PACKED PACKED PACKED PACKED "iiiiiiiii" "ff"
#define SEL_BWD_DKDV_KINDS \
  "pppppppp" "pp" "pp" "pp" PACKED PACKED PACKED PACKED PACKED PACKED PACKED "il" "iiiiiiiiiii" "ff"
#define SEL_INDEX_ZERO_KINDS "p" "i"
#define SEL_INDEX_COUNT_KINDS "pp" "pp" "p" PACKED PACKED "i" "iiiiiiiii"
#define SEL_INDEX_SCAN_KINDS "ppp" "iiii"
#define SEL_INDEX_SCATTER_KINDS "pp" "pp" "pp" PACKED PACKED "il" "iiiiiiiii"
#define SEL_INDEX_ORDER_KINDS "pp" "pp" "pp" PACKED PACKED "il" "iiiiiii"
#define SEL_CHECK_INDICES_KINDS "pp" "pp" "p" PACKED PACKED "iiiiiiii"
/* Decoding and the merge (kernels/attn_decode.py): every stride is int64. attn_decode: Q, K, V, Out, Lse,
 * BlockTable, CacheSeqlens, CuSeqlensQ (NULL unless q is packed), AlibiSlopes, Sinks, OutPartial,
 * LsePartial; the (batch or page, sequence, head) strides of q, k, v and out; lse's (batch, head), the
 * block table's and ALiBi's batch strides; 15 ints (the last, seqlen_new, 0 unless appending); the three
 * score scalars. attn_merge: three typed partial pointers (fp32, fp16, bf16), the partial lse, three
 * typed outputs, lse, sinks, CuSeqlensQ (NULL unless the rows are a packed decoding call's); the
 * partials' (partial, batch, token, head) strides, the partial lse's
 * (partial, batch, head, token), out's (batch, token, head), lse's (batch, head, token); six ints.
 * attn_cache_append: KNew, VNew, K, V, BlockTable, CacheSeqlens; the (batch, token, head) strides of
 * k_new and v_new, the (page, row, head) strides of the k and v caches, the block table's batch stride;
 * seven ints. */
#define ATTN_DECODE_KINDS "ppppp" "pppp" "pp" "pp" "pp" "lll" "lll" "lll" "lll" "lll" "lll" "ll" "ll" "iiiiiiiiiiiiiii" "fff"
#define ATTN_MERGE_KINDS "ppp" "p" "ppp" "ppp" "llll" "llll" "lll" "lll" "iiiiii"
#define ATTN_CACHE_APPEND_KINDS "pppp" "pp" "lll" "lll" "lll" "lll" "l" "iiiiiii"

/* The kernels the fake driver knows, by their .entry name. */
enum kernel_id {
  KERNEL_ATTN_FWD,
  KERNEL_DROPOUT_MASK,
  KERNEL_BWD_PREPROCESS,
  KERNEL_BWD_DKDV,
  KERNEL_BWD_DQ,
  KERNEL_BWD_SINK_REDUCE,
  KERNEL_SEL_FWD,
  KERNEL_SEL_BWD_DQ,
  KERNEL_SEL_BWD_DKDV,
  KERNEL_SEL_INDEX_ZERO,
  KERNEL_SEL_INDEX_COUNT,
  KERNEL_SEL_INDEX_SCAN,
  KERNEL_SEL_INDEX_SCATTER,
  KERNEL_SEL_INDEX_ORDER,
  KERNEL_SEL_CHECK_INDICES,
  KERNEL_ATTN_FWD_TMA,
  KERNEL_ATTN_FWD_HOPPER,
  KERNEL_ATTN_FWD_HOPPER_WG3,
  KERNEL_BWD_DKDV_HOPPER,
  KERNEL_BWD_FUSED_HOPPER,
  KERNEL_BWD_DQ_CONVERT,
  KERNEL_ATTN_DECODE,
  KERNEL_ATTN_MERGE,
  KERNEL_ATTN_CACHE_APPEND,
  KERNEL_ATTN_DECODE_PAGED,
  KERNEL_ATTN_DECODE_PAGED32,
  KERNEL_ATTN_DECODE_PAGED_BLOCKS,
  KERNEL_BWD_DQ_HOPPER,
  KERNEL_ATTN_FWD_HOPPER_PAGED,
  KERNEL_ATTN_FWD_HOPPER_DROPOUT,
  KERNEL_BWD_DKDV_HOPPER_DROPOUT,
  KERNEL_BWD_FUSED_HOPPER_DROPOUT,
  KERNEL_COUNT
};
struct kernel_signature {
  const char *function;
  int family;              /* AOTK__FAMILY_... of the table rows that hold it */
  const char *param_kinds; /* including the hidden scratch pointers */
};
extern const struct kernel_signature kernel_signatures[KERNEL_COUNT];

/* Bits of the kernels' flags argument (kernels/attn_common.py). */
enum {
  FLAG_WRITE_LSE = 1,
  FLAG_VARLEN = 2,
  FLAG_TOP_LEFT = 4,
  FLAG_SOFTCAP = 8,
  FLAG_ALIBI = 16,
  FLAG_SINKS = 32,
  FLAG_DROPOUT = 64,
  FLAG_REVERSE = 128,
  FLAG_O_TMA = 256, /* the Gluon forward stores O through its fourth descriptor */
};

/* attn_fwd: one program per (query block, batch, query head). */
enum launch_param {
  ARG_Q, ARG_K, ARG_V, ARG_OUT, ARG_LSE,
  ARG_CU_SEQLENS_Q, ARG_CU_SEQLENS_K, ARG_ALIBI_SLOPES, ARG_SINKS, ARG_RNG_STATE,
  ARG_STRIDE_QB, ARG_STRIDE_QS, ARG_STRIDE_QH,
  ARG_STRIDE_KB, ARG_STRIDE_KS, ARG_STRIDE_KH,
  ARG_STRIDE_VB, ARG_STRIDE_VS, ARG_STRIDE_VH,
  ARG_STRIDE_OB, ARG_STRIDE_OS, ARG_STRIDE_OH,
  ARG_STRIDE_LB, ARG_STRIDE_LH, ARG_STRIDE_AB,
  ARG_SEQLEN_Q, ARG_SEQLEN_K, ARG_HEADS_Q, ARG_GROUP_SIZE, ARG_NUM_M_BLOCKS,
  ARG_HEAD_DIM_QK8, ARG_HEAD_DIM_V8, ARG_WINDOW_LEFT, ARG_WINDOW_RIGHT, ARG_FLAGS,
  ARG_QK_SCALE_LOG2, ARG_SOFTCAP_SCALE, ARG_SOFTCAP_LOG2, ARG_DROPOUT_THRESHOLD, ARG_DROPOUT_SCALE,
  ARG_GLOBAL_SCRATCH, ARG_PROFILE_SCRATCH,
  LAUNCH_PARAM_COUNT
};

/* attn_fwd_tma: attn_fwd's arguments up to ARG_DROPOUT_SCALE in the same slots, then seven per
 * descriptor (Q, K, V): the map (recorded_launch.maps), the view's shape (3 x int32) and its strides
 * (3 x int64, in elements), outermost first, then the two scratch pointers. */
enum { TMA_RANK = 3, TMA_DESC_SLOTS = 1 + 2 * TMA_RANK, TMA_MAP_BYTES = 128, TMA_DESCRIPTORS = 3 };
/* The most maps one launch passes: the backward's fused pass takes Q, K, V, dO and the dQ accumulator. */
enum { MAX_TMA_MAPS = 5 };
enum tma_launch_param {
  TMA_ARG_DESC_Q = ARG_GLOBAL_SCRATCH,
  TMA_ARG_DESC_K = TMA_ARG_DESC_Q + TMA_DESC_SLOTS,
  TMA_ARG_DESC_V = TMA_ARG_DESC_K + TMA_DESC_SLOTS,
  TMA_ARG_GLOBAL_SCRATCH = TMA_ARG_DESC_V + TMA_DESC_SLOTS,
  TMA_ARG_PROFILE_SCRATCH,
  TMA_PARAM_COUNT
};
enum { TMA_SLOT_MAP = 0, TMA_SLOT_SHAPE = 1, TMA_SLOT_STRIDES = 1 + TMA_RANK }; /* within a descriptor's seven */
/* attn_fwd_hopper and attn_fwd_hopper_wg3: attn_fwd_tma's arguments up to its descriptors, O's descriptor,
 * then the number of tiles their persistent programs share, then the two scratch pointers. */
enum hopper_launch_param {
  HOPPER_ARG_DESC_O = TMA_ARG_GLOBAL_SCRATCH,
  HOPPER_ARG_NUM_TILES = HOPPER_ARG_DESC_O + TMA_DESC_SLOTS,
  HOPPER_ARG_GLOBAL_SCRATCH,
  HOPPER_ARG_PROFILE_SCRATCH,
  HOPPER_PARAM_COUNT
};
/* attn_fwd_hopper_paged: attn_fwd_hopper's arguments up to num_tiles, then the paged cache's, then the
 * split's (fp32 partials, their split strides, the count, the keys a split). */
enum hopper_paged_launch_param {
  PAGED_ARG_BLOCK_TABLE = HOPPER_ARG_GLOBAL_SCRATCH,
  PAGED_ARG_CACHE_SEQLENS,
  PAGED_ARG_CACHE_LEFTPAD,
  PAGED_ARG_STRIDE_BT,
  PAGED_ARG_PAGE_SHIFT,
  PAGED_ARG_OUT_PARTIAL,
  PAGED_ARG_STRIDE_PP,
  PAGED_ARG_STRIDE_LPP,
  PAGED_ARG_NUM_SPLITS,
  PAGED_ARG_SPLIT_KEYS,
  PAGED_ARG_GLOBAL_SCRATCH,
  PAGED_ARG_PROFILE_SCRATCH,
  PAGED_PARAM_COUNT
};

/* attn_dropout_mask: the debug output, one program per (query block, batch, query head). */
enum dropout_mask_param {
  MASK_MASK, MASK_CU_SEQLENS_Q, MASK_CU_SEQLENS_K, MASK_RNG_STATE,
  MASK_STRIDE_MB, MASK_STRIDE_MH, MASK_STRIDE_MS,
  MASK_SEQLEN_Q, MASK_SEQLEN_K, MASK_HEADS_Q, MASK_NUM_M_BLOCKS, MASK_FLAGS, MASK_DROPOUT_THRESHOLD,
  MASK_GLOBAL_SCRATCH, MASK_PROFILE_SCRATCH,
  MASK_PARAM_COUNT
};

/* attn_bwd_preprocess: delta = rowsum(dout * out) and lse * log2(e) into the workspace, and with
 * dsinks each program's partial sum of the sink gradient. */
enum preprocess_param {
  PRE_OUT, PRE_DOUT, PRE_LSE, PRE_DELTA, PRE_LSE_LOG2, PRE_CU_SEQLENS_Q, PRE_SINKS, PRE_SINK_PARTIAL,
  PRE_STRIDE_OB, PRE_STRIDE_OS, PRE_STRIDE_OH,
  PRE_STRIDE_DOB, PRE_STRIDE_DOS, PRE_STRIDE_DOH,
  PRE_STRIDE_LB, PRE_STRIDE_LH,
  PRE_SEQLEN_Q, PRE_HEADS_Q, PRE_NUM_SEQS, PRE_NUM_M_BLOCKS, PRE_STATS_STRIDE, PRE_HEAD_DIM_V8, PRE_FLAGS,
  PRE_GLOBAL_SCRATCH, PRE_PROFILE_SCRATCH,
  PRE_PARAM_COUNT
};

/* attn_bwd_sink_reduce: one program per query head sums its partials into dsinks. */
enum sink_reduce_param {
  REDUCE_SINK_PARTIAL, REDUCE_DSINKS, REDUCE_COUNT,
  REDUCE_GLOBAL_SCRATCH, REDUCE_PROFILE_SCRATCH,
  REDUCE_PARAM_COUNT
};

/* attn_bwd_dkdv: one program per (key block, batch, kv head). */
enum dkdv_param {
  DKDV_Q, DKDV_K, DKDV_V, DKDV_DOUT, DKDV_LSE_LOG2, DKDV_DELTA, DKDV_DK, DKDV_DV,
  DKDV_CU_SEQLENS_Q, DKDV_CU_SEQLENS_K, DKDV_ALIBI_SLOPES, DKDV_RNG_STATE,
  DKDV_STRIDE_QB, DKDV_STRIDE_QS, DKDV_STRIDE_QH,
  DKDV_STRIDE_KB, DKDV_STRIDE_KS, DKDV_STRIDE_KH,
  DKDV_STRIDE_VB, DKDV_STRIDE_VS, DKDV_STRIDE_VH,
  DKDV_STRIDE_DOB, DKDV_STRIDE_DOS, DKDV_STRIDE_DOH,
  DKDV_STRIDE_DKB, DKDV_STRIDE_DKS, DKDV_STRIDE_DKH,
  DKDV_STRIDE_DVB, DKDV_STRIDE_DVS, DKDV_STRIDE_DVH,
  DKDV_STRIDE_AB,
  DKDV_SEQLEN_Q, DKDV_SEQLEN_K, DKDV_HEADS_Q, DKDV_HEADS_KV, DKDV_GROUP_SIZE, DKDV_NUM_N_BLOCKS,
  DKDV_STATS_STRIDE,
  DKDV_HEAD_DIM_QK8, DKDV_HEAD_DIM_V8, DKDV_WINDOW_LEFT, DKDV_WINDOW_RIGHT, DKDV_FLAGS,
  DKDV_SOFTMAX_SCALE, DKDV_QK_SCALE_LOG2, DKDV_SOFTCAP_SCALE, DKDV_SOFTCAP_LOG2,
  DKDV_DROPOUT_THRESHOLD, DKDV_DROPOUT_SCALE,
  DKDV_GLOBAL_SCRATCH, DKDV_PROFILE_SCRATCH,
  DKDV_PARAM_COUNT
};

/* attn_bwd_dq: one program per (query block, batch, query head). */
enum dq_param {
  DQ_Q, DQ_K, DQ_V, DQ_DOUT, DQ_LSE_LOG2, DQ_DELTA, DQ_DQ,
  DQ_CU_SEQLENS_Q, DQ_CU_SEQLENS_K, DQ_ALIBI_SLOPES, DQ_RNG_STATE,
  DQ_STRIDE_QB, DQ_STRIDE_QS, DQ_STRIDE_QH,
  DQ_STRIDE_KB, DQ_STRIDE_KS, DQ_STRIDE_KH,
  DQ_STRIDE_VB, DQ_STRIDE_VS, DQ_STRIDE_VH,
  DQ_STRIDE_DOB, DQ_STRIDE_DOS, DQ_STRIDE_DOH,
  DQ_STRIDE_DQB, DQ_STRIDE_DQS, DQ_STRIDE_DQH,
  DQ_STRIDE_AB,
  DQ_SEQLEN_Q, DQ_SEQLEN_K, DQ_HEADS_Q, DQ_GROUP_SIZE, DQ_NUM_M_BLOCKS, DQ_STATS_STRIDE,
  DQ_HEAD_DIM_QK8, DQ_HEAD_DIM_V8, DQ_WINDOW_LEFT, DQ_WINDOW_RIGHT, DQ_FLAGS,
  DQ_SOFTMAX_SCALE, DQ_QK_SCALE_LOG2, DQ_SOFTCAP_SCALE, DQ_SOFTCAP_LOG2,
  DQ_DROPOUT_THRESHOLD, DQ_DROPOUT_SCALE,
  DQ_GLOBAL_SCRATCH, DQ_PROFILE_SCRATCH,
  DQ_PARAM_COUNT
};

/* attn_bwd_dq_convert: one program per (query block, batch or sequence, query head) casts the fp32
 * accumulator [batch * heads_q, stats_stride, head_dim_qk] into dq; varlen, sequence b's rows start at
 * cu_seqlens_q[b] of the packed dq (flags: FLAG_VARLEN alone). */
enum dq_convert_param {
  CONVERT_DQ_ACC, CONVERT_DQ, CONVERT_CU_SEQLENS_Q, CONVERT_STRIDE_DQB, CONVERT_STRIDE_DQS, CONVERT_STRIDE_DQH,
  CONVERT_SEQLEN_Q, CONVERT_HEADS_Q, CONVERT_NUM_M_BLOCKS, CONVERT_STATS_STRIDE, CONVERT_FLAGS,
  CONVERT_GLOBAL_SCRATCH, CONVERT_PROFILE_SCRATCH,
  CONVERT_PARAM_COUNT
};
/* The fused pass's descriptors, after attn_bwd_dkdv's arguments (the slots up to DKDV_GLOBAL_SCRATCH):
 * Q, K, V, dO, then the accumulator. */
enum { FUSED_DESCRIPTORS = 5 };
/* The Gluon dQ pass (kernels/attn_bwd_dq_hopper.py) takes attn_bwd_dq's arguments (the slots up to
 * DQ_GLOBAL_SCRATCH), then descriptors of Q, K, V and dO. */
enum { DQ_HOPPER_DESCRIPTORS = 4 };

/* sel_fwd: one program per (kv head, token, chunk of the group's query heads), kv head outermost. */
enum sel_fwd_param {
  SEL_FWD_Q, SEL_FWD_K, SEL_FWD_V, SEL_FWD_OUT, SEL_FWD_LSE,
  SEL_FWD_CU_SEQLENS_Q, SEL_FWD_CU_SEQLENS_K, SEL_FWD_BLOCK_IDX, SEL_FWD_BLOCK_CNT,
  SEL_FWD_STRIDE_QS, SEL_FWD_STRIDE_QH, SEL_FWD_STRIDE_KS, SEL_FWD_STRIDE_KH,
  SEL_FWD_STRIDE_VS, SEL_FWD_STRIDE_VH, SEL_FWD_STRIDE_OS, SEL_FWD_STRIDE_OH,
  SEL_FWD_STRIDE_LS, SEL_FWD_STRIDE_LH, SEL_FWD_STRIDE_IS, SEL_FWD_STRIDE_IH, SEL_FWD_STRIDE_CS, SEL_FWD_STRIDE_CH,
  SEL_FWD_NUM_SEQS, SEL_FWD_TOTAL_Q, SEL_FWD_TOTAL_K, SEL_FWD_MAX_SEQLEN_K, SEL_FWD_GROUP_SIZE, SEL_FWD_GROUP_CHUNKS,
  SEL_FWD_NUM_SLOTS, SEL_FWD_FLAGS, SEL_FWD_QK_SCALE_LOG2,
  SEL_FWD_GLOBAL_SCRATCH, SEL_FWD_PROFILE_SCRATCH,
  SEL_FWD_PARAM_COUNT
};

/* sel_bwd_dq: the forward's grid; also stages delta in the workspace. */
enum sel_dq_param {
  SEL_DQ_Q, SEL_DQ_K, SEL_DQ_V, SEL_DQ_OUT, SEL_DQ_DOUT, SEL_DQ_LSE, SEL_DQ_DQ, SEL_DQ_DELTA,
  SEL_DQ_CU_SEQLENS_Q, SEL_DQ_CU_SEQLENS_K, SEL_DQ_BLOCK_IDX, SEL_DQ_BLOCK_CNT, SEL_DQ_COMPACT,
  SEL_DQ_STRIDE_QS, SEL_DQ_STRIDE_QH, SEL_DQ_STRIDE_KS, SEL_DQ_STRIDE_KH, SEL_DQ_STRIDE_VS, SEL_DQ_STRIDE_VH,
  SEL_DQ_STRIDE_OS, SEL_DQ_STRIDE_OH, SEL_DQ_STRIDE_DOS, SEL_DQ_STRIDE_DOH, SEL_DQ_STRIDE_DQS, SEL_DQ_STRIDE_DQH,
  SEL_DQ_STRIDE_LS, SEL_DQ_STRIDE_LH, SEL_DQ_STRIDE_IS, SEL_DQ_STRIDE_IH, SEL_DQ_STRIDE_CS, SEL_DQ_STRIDE_CH,
  SEL_DQ_NUM_SEQS, SEL_DQ_TOTAL_Q, SEL_DQ_TOTAL_K, SEL_DQ_MAX_SEQLEN_K, SEL_DQ_HEADS_Q, SEL_DQ_GROUP_SIZE,
  SEL_DQ_GROUP_CHUNKS, SEL_DQ_NUM_SLOTS, SEL_DQ_FLAGS, SEL_DQ_QK_SCALE_LOG2, SEL_DQ_SOFTMAX_SCALE,
  SEL_DQ_GLOBAL_SCRATCH, SEL_DQ_PROFILE_SCRATCH,
  SEL_DQ_PARAM_COUNT
};

/* sel_bwd_dkdv: one program per (kv head, sequence, key tile, chunk of a split token list), walking the
 * inverse index; when lists may be split, launched again with SEL_FLAG_DKDV_REDUCE, one program per key
 * tile, to add the chunks' partial sums. */
enum sel_dkdv_param {
  SEL_DKDV_Q, SEL_DKDV_K, SEL_DKDV_V, SEL_DKDV_DOUT, SEL_DKDV_LSE, SEL_DKDV_DELTA, SEL_DKDV_DK, SEL_DKDV_DV,
  SEL_DKDV_CU_SEQLENS_Q, SEL_DKDV_CU_SEQLENS_K, SEL_DKDV_OFFSETS, SEL_DKDV_TOKENS, SEL_DKDV_CHUNKS, SEL_DKDV_PARTIALS,
  SEL_DKDV_STRIDE_QS, SEL_DKDV_STRIDE_QH, SEL_DKDV_STRIDE_KS, SEL_DKDV_STRIDE_KH, SEL_DKDV_STRIDE_VS,
  SEL_DKDV_STRIDE_VH, SEL_DKDV_STRIDE_DOS, SEL_DKDV_STRIDE_DOH, SEL_DKDV_STRIDE_DKS, SEL_DKDV_STRIDE_DKH,
  SEL_DKDV_STRIDE_DVS, SEL_DKDV_STRIDE_DVH, SEL_DKDV_STRIDE_LS, SEL_DKDV_STRIDE_LH,
  SEL_DKDV_STRIDE_OFFSETS, SEL_DKDV_STRIDE_TOKENS,
  SEL_DKDV_NUM_SEQS, SEL_DKDV_TOTAL_Q, SEL_DKDV_TOTAL_K, SEL_DKDV_MAX_SEQLEN_K, SEL_DKDV_HEADS_Q,
  SEL_DKDV_GROUP_SIZE, SEL_DKDV_NUM_KEY_TILES, SEL_DKDV_CHUNK_TOKENS, SEL_DKDV_MAX_CHUNKS,
  SEL_DKDV_PARTIALS_PER_HEAD, SEL_DKDV_FLAGS, SEL_DKDV_QK_SCALE_LOG2, SEL_DKDV_SOFTMAX_SCALE,
  SEL_DKDV_GLOBAL_SCRATCH, SEL_DKDV_PROFILE_SCRATCH,
  SEL_DKDV_PARAM_COUNT
};

/* sel_index_zero: the list offsets start at 0, BLOCK entries per program. */
enum sel_zero_param { SEL_ZERO_OFFSETS, SEL_ZERO_COUNT, SEL_ZERO_GLOBAL_SCRATCH, SEL_ZERO_PROFILE_SCRATCH,
                      SEL_ZERO_PARAM_COUNT };
/* sel_index_count and sel_index_scatter (the scatter advances Cursors and writes Tokens): one program per
 * (kv head, chunk of ENTRIES packed index entries). */
enum sel_count_param {
  SEL_COUNT_BLOCK_IDX, SEL_COUNT_BLOCK_CNT, SEL_COUNT_CU_SEQLENS_Q, SEL_COUNT_CU_SEQLENS_K, SEL_COUNT_OFFSETS,
  SEL_COUNT_STRIDE_IS, SEL_COUNT_STRIDE_IH, SEL_COUNT_STRIDE_CS, SEL_COUNT_STRIDE_CH, SEL_COUNT_STRIDE_OFFSETS,
  SEL_COUNT_NUM_SEQS, SEL_COUNT_TOTAL_Q, SEL_COUNT_TOTAL_K, SEL_COUNT_MAX_SEQLEN_K, SEL_COUNT_BLOCK_SIZE,
  SEL_COUNT_NUM_SLOTS, SEL_COUNT_NUM_CHUNKS, SEL_COUNT_SEARCH_STEPS, SEL_COUNT_FLAGS,
  SEL_COUNT_GLOBAL_SCRATCH, SEL_COUNT_PROFILE_SCRATCH,
  SEL_COUNT_PARAM_COUNT
};
enum sel_scatter_param {
  SEL_SCATTER_BLOCK_IDX, SEL_SCATTER_BLOCK_CNT, SEL_SCATTER_CU_SEQLENS_Q, SEL_SCATTER_CU_SEQLENS_K,
  SEL_SCATTER_CURSORS, SEL_SCATTER_TOKENS, SEL_SCATTER_STRIDE_IS, SEL_SCATTER_STRIDE_IH, SEL_SCATTER_STRIDE_CS,
  SEL_SCATTER_STRIDE_CH, SEL_SCATTER_STRIDE_OFFSETS, SEL_SCATTER_STRIDE_TOKENS,
  SEL_SCATTER_NUM_SEQS, SEL_SCATTER_TOTAL_Q, SEL_SCATTER_TOTAL_K, SEL_SCATTER_MAX_SEQLEN_K, SEL_SCATTER_BLOCK_SIZE,
  SEL_SCATTER_NUM_SLOTS, SEL_SCATTER_NUM_CHUNKS, SEL_SCATTER_SEARCH_STEPS, SEL_SCATTER_FLAGS,
  SEL_SCATTER_GLOBAL_SCRATCH, SEL_SCATTER_PROFILE_SCRATCH,
  SEL_SCATTER_PARAM_COUNT
};
/* sel_index_scan: one program per kv head, a prefix sum over its index slots (and a copy as cursors), and
 * where each split list's partial dK/dV records start (Chunks). */
enum sel_scan_param { SEL_SCAN_OFFSETS, SEL_SCAN_CURSORS, SEL_SCAN_CHUNKS, SEL_SCAN_STRIDE_OFFSETS, SEL_SCAN_SLOTS,
                      SEL_SCAN_CHUNK_TOKENS, SEL_SCAN_MAX_CHUNKS, SEL_SCAN_GLOBAL_SCRATCH, SEL_SCAN_PROFILE_SCRATCH,
                      SEL_SCAN_PARAM_COUNT };
/* sel_index_order: one program per (kv head, index slot) puts its list in token order. */
enum sel_order_param {
  SEL_ORDER_BLOCK_IDX, SEL_ORDER_BLOCK_CNT, SEL_ORDER_CU_SEQLENS_Q, SEL_ORDER_CU_SEQLENS_K, SEL_ORDER_OFFSETS,
  SEL_ORDER_TOKENS, SEL_ORDER_STRIDE_IS, SEL_ORDER_STRIDE_IH, SEL_ORDER_STRIDE_CS, SEL_ORDER_STRIDE_CH,
  SEL_ORDER_STRIDE_OFFSETS, SEL_ORDER_STRIDE_TOKENS,
  SEL_ORDER_NUM_SEQS, SEL_ORDER_TOTAL_Q, SEL_ORDER_TOTAL_K, SEL_ORDER_MAX_SEQLEN_K, SEL_ORDER_BLOCK_SIZE,
  SEL_ORDER_NUM_SLOTS, SEL_ORDER_FLAGS,
  SEL_ORDER_GLOBAL_SCRATCH, SEL_ORDER_PROFILE_SCRATCH,
  SEL_ORDER_PARAM_COUNT
};
/* sel_check_indices: one program per (token, kv head). */
enum sel_check_param {
  SEL_CHECK_BLOCK_IDX, SEL_CHECK_BLOCK_CNT, SEL_CHECK_CU_SEQLENS_Q, SEL_CHECK_CU_SEQLENS_K, SEL_CHECK_RESULT,
  SEL_CHECK_STRIDE_IS, SEL_CHECK_STRIDE_IH, SEL_CHECK_STRIDE_CS, SEL_CHECK_STRIDE_CH,
  SEL_CHECK_NUM_SEQS, SEL_CHECK_TOTAL_Q, SEL_CHECK_TOTAL_K, SEL_CHECK_MAX_SEQLEN_K, SEL_CHECK_HEADS_KV,
  SEL_CHECK_BLOCK_SIZE, SEL_CHECK_NUM_SLOTS, SEL_CHECK_FLAGS,
  SEL_CHECK_GLOBAL_SCRATCH, SEL_CHECK_PROFILE_SCRATCH,
  SEL_CHECK_PARAM_COUNT
};

/* Bits of the kernels' flags (kernels/sel_attn.py): attn_common.py's WRITE_LSE and VARLEN, and two of its own. */
enum { SEL_FLAG_WRITE_LSE = 1, SEL_FLAG_VARLEN = 2, SEL_FLAG_BLOCK_CNT = 256, SEL_FLAG_DKDV_REDUCE = 512 };

/* attn_decode: one program per (request, kv head, row chunk, split), the split fastest. */
enum decode_param {
  DECODE_Q, DECODE_K, DECODE_V, DECODE_OUT, DECODE_LSE,
  DECODE_BLOCK_TABLE, DECODE_CACHE_SEQLENS, DECODE_CU_SEQLENS_Q, DECODE_CACHE_LEFTPAD, DECODE_ALIBI_SLOPES, DECODE_SINKS,
  DECODE_OUT_PARTIAL, DECODE_LSE_PARTIAL, DECODE_K_NEW, DECODE_V_NEW,
  DECODE_STRIDE_QB, DECODE_STRIDE_QS, DECODE_STRIDE_QH,
  DECODE_STRIDE_KP, DECODE_STRIDE_KS, DECODE_STRIDE_KH,
  DECODE_STRIDE_VP, DECODE_STRIDE_VS, DECODE_STRIDE_VH,
  DECODE_STRIDE_OB, DECODE_STRIDE_OS, DECODE_STRIDE_OH,
  DECODE_STRIDE_NB, DECODE_STRIDE_NS, DECODE_STRIDE_NH,
  DECODE_STRIDE_WB, DECODE_STRIDE_WS, DECODE_STRIDE_WH,
  DECODE_STRIDE_LB, DECODE_STRIDE_LH, DECODE_STRIDE_TB, DECODE_STRIDE_AB,
  DECODE_BATCH, DECODE_SEQLEN_Q, DECODE_HEADS_Q, DECODE_GROUP_SIZE, DECODE_CAPACITY, DECODE_PAGE_SIZE,
  DECODE_NUM_SPLITS, DECODE_SPLIT_KEYS, DECODE_ROW_CHUNKS, DECODE_HEAD_DIM_QK8, DECODE_HEAD_DIM_V8,
  DECODE_WINDOW_LEFT, DECODE_WINDOW_RIGHT, DECODE_FLAGS, DECODE_SEQLEN_NEW,
  DECODE_QK_SCALE_LOG2, DECODE_SOFTCAP_SCALE, DECODE_SOFTCAP_LOG2,
  DECODE_GLOBAL_SCRATCH, DECODE_PROFILE_SCRATCH,
  DECODE_PARAM_COUNT
};

/* attn_merge: one program per block_m rows (batch, token, head), the head fastest. */
enum merge_param {
  MERGE_PARTIAL32, MERGE_PARTIAL16, MERGE_PARTIAL_BF16, MERGE_LSE_PARTIAL, MERGE_OUT32, MERGE_OUT16, MERGE_OUT_BF16,
  MERGE_LSE, MERGE_SINKS, MERGE_CU_SEQLENS_Q,
  MERGE_STRIDE_PP, MERGE_STRIDE_PB, MERGE_STRIDE_PS, MERGE_STRIDE_PH,
  MERGE_STRIDE_LPP, MERGE_STRIDE_LPB, MERGE_STRIDE_LPH, MERGE_STRIDE_LPS,
  MERGE_STRIDE_OB, MERGE_STRIDE_OS, MERGE_STRIDE_OH,
  MERGE_STRIDE_LB, MERGE_STRIDE_LH, MERGE_STRIDE_LS,
  MERGE_NUM_PARTIALS, MERGE_SEQLEN_Q, MERGE_HEADS, MERGE_NUM_ROWS, MERGE_HEAD_DIM8, MERGE_FLAGS,
  MERGE_GLOBAL_SCRATCH, MERGE_PROFILE_SCRATCH,
  MERGE_PARAM_COUNT
};

/* attn_cache_append: one program per (request, new token), the token fastest; it writes k_new's and
 * v_new's rows into the cache (kernels/attn_decode.py). */
enum append_param {
  APPEND_K_NEW, APPEND_V_NEW, APPEND_K, APPEND_V, APPEND_BLOCK_TABLE, APPEND_CACHE_SEQLENS,
  APPEND_STRIDE_NB, APPEND_STRIDE_NS, APPEND_STRIDE_NH,
  APPEND_STRIDE_WB, APPEND_STRIDE_WS, APPEND_STRIDE_WH,
  APPEND_STRIDE_KP, APPEND_STRIDE_KS, APPEND_STRIDE_KH,
  APPEND_STRIDE_VP, APPEND_STRIDE_VS, APPEND_STRIDE_VH,
  APPEND_STRIDE_TB,
  APPEND_SEQLEN_NEW, APPEND_HEADS_KV, APPEND_CAPACITY, APPEND_PAGE_SIZE, APPEND_HEAD_DIM_QK8, APPEND_HEAD_DIM_V8,
  APPEND_FLAGS,
  APPEND_GLOBAL_SCRATCH, APPEND_PROFILE_SCRATCH,
  APPEND_PARAM_COUNT
};

/* Bits of attn_decode's and attn_merge's flags beyond attn_common.py's (kernels/attn_decode.py): a paged
 * cache, split keys (fp32 partials into the workspace), which typed pointer of the merge's triples
 * holds the partials and the output (neither bit: fp32), and a merge whose programs each cover whole
 * rows (an in-place merge that writes lse over the partials' lse). */
enum {
  DECODE_FLAG_PAGED = 256,
  DECODE_FLAG_SPLIT = 512,
  MERGE_FLAG_PARTIAL_FP16 = 1024,
  MERGE_FLAG_PARTIAL_BF16 = 2048,
  MERGE_FLAG_OUT_FP16 = 4096,
  MERGE_FLAG_OUT_BF16 = 8192,
  MERGE_FLAG_WHOLE_ROWS = 16384,
  DECODE_FLAG_FUSED_APPEND = 32768,
  DECODE_FLAG_LEFTPAD = 65536,
};

enum { FAKE_MULTIPROCESSORS = 132 }; /* the fake device's SMs, an H100's */
enum { MAX_LAUNCH_PARAMS = 96, LAUNCH_LOG_SIZE = 8, GIVEN_KERNELS_MAX = 1024 };

/* One cuLaunchKernel call as the fake driver saw it. */
typedef struct recorded_launch {
  int kernel; /* enum kernel_id */
  CUfunction function;
  unsigned grid[3], block[3], shared_bytes;
  CUstream stream;
  void **extra;
  unsigned char args[MAX_LAUNCH_PARAMS][8];
  unsigned char maps[MAX_TMA_MAPS][TMA_MAP_BYTES]; /* the 't' arguments' CUtensorMaps, in order */
  int maps_recorded;
} recorded_launch;

/* One cuTensorMapEncodeTiled call as the fake driver saw it (rank 3: the arrays are copied whole). */
typedef struct encode_call {
  const void *map;
  int data_type;
  unsigned rank;
  const void *address;
  uint64_t dims[TMA_RANK], strides_bytes[TMA_RANK - 1];
  unsigned box[TMA_RANK], element_strides[TMA_RANK];
  int interleave, swizzle, l2_promotion, oob_fill;
} encode_call;
enum { ENCODE_LOG_SIZE = 12 };

/* What the fake GPU is, which call fails, and what the library asked of it. */
struct fake_gpu {
  /* Behaviour, set before a case runs. */
  CUresult init_result;
  CUresult context_result;
  bool has_context;
  int compute_capability; /* major * 10 + minor */
  int max_shared_bytes;   /* opt-in maximum per block */
  CUresult library_load_result;
  CUresult get_kernel_result;
  CUresult set_attribute_result;
  CUresult launch_result;
  int fail_library_load_call; /* n: the n-th cuLibraryLoadData call fails with library_load_result */
  int fail_launch_call;       /* n: the n-th cuLaunchKernel call fails with launch_result */
  CUresult encode_result;
  int fail_encode_call;       /* n: the n-th cuTensorMapEncodeTiled call fails with encode_result (0: each) */
  CUresult memset_result;     /* every cuMemsetD32Async call fails with it */
  CUcontext stream_context;   /* the context cuStreamGetCtx says every stream belongs to (NULL: FAKE_CONTEXT,
                                 the current one) */
  CUresult stream_context_result; /* every cuStreamGetCtx call fails with it */
  /* Record. */
  CUstream stream_context_asked; /* the stream of the latest cuStreamGetCtx */
  int calls[DRIVER_FUNCTION_COUNT];
  int loaded_images, loaded_elf, loaded_ptx;
  CUkernel last_kernel;
  int set_attribute, set_attribute_value;
  /* Every kernel handle given out since install, and the dynamic shared memory each opted in to. */
  struct given_kernel {
    CUkernel kernel;
    int shared_opt_in;
  } given[GIVEN_KERNELS_MAX];
  int given_count;
  int launches;
  recorded_launch launch;                    /* the latest */
  recorded_launch launch_log[LAUNCH_LOG_SIZE]; /* the first launches since install or reset_launch_log */
  int logged_launches;
  encode_call encodes[ENCODE_LOG_SIZE]; /* the first tensor-map encodes since install or reset_launch_log */
  int encode_count;
  /* The cuMemsetD32Async calls that went through since install or reset_launch_log, and the latest's
   * arguments and how many launches were logged before it. */
  int memsets;
  CUdeviceptr memset_destination;
  unsigned memset_value;
  size_t memset_count;
  CUstream memset_stream;
  int memset_after_launches;
  /* aotk_sel_check_indices' round trip: one int64 word of device memory, which cuMemcpyHtoD sets, the
   * check kernel lowers to check_code (its atomic minimum; 0: the kernel finds nothing) and
   * cuMemcpyDtoH reads back; memcpy_result fails both copies. */
  CUresult memcpy_result;
  int64_t device_word;
  int64_t check_code;
  CUdeviceptr written_address, read_address;
  size_t written_bytes, read_bytes;
  CUstream synchronized_stream;
  /* The order of the calls the check makes (CALL_ ids of the synchronizations, copies and launches). */
  int sequence[16];
  int sequence_length;
};
extern struct fake_gpu fake;

static const char injected_error_name[] = "CUDA_ERROR_INJECTED_BY_TEST";

/* The pattern the fake writes into a map it encodes for `address`: a launch's maps show which tensor's
 * encode each one is. */
uint64_t fake_map_word(const void *address, int word);

/* Installs the fake as a working GPU of compute capability `compute_capability` with
 * `max_shared_bytes` of opt-in shared memory, with a current context and a clean record. Installing
 * also empties the library's device and kernel caches, so each case starts from a first call. */
void install_fake_gpu(int compute_capability, int max_shared_bytes);

static inline void uninstall_fake_gpu(void) { aotk__driver_set_for_testing(NULL); }

/* Opt-in shared memory per block of the GPUs the cases pretend to be. */
enum {
  SHARED_SM80 = 163 * 1024,
  SHARED_SM86 = 99 * 1024,
  SHARED_SM90 = 227 * 1024,
  SHARED_SM100 = 227 * 1024,
  SHARED_SM120 = 99 * 1024,
};

/* A GPU a case pretends to be. */
typedef struct gpu {
  int compute_capability, max_shared_bytes;
  int arch, from_ptx; /* the image it must run */
} gpu;

static inline void reset_calls(void) { memset(fake.calls, 0, sizeof fake.calls); }

static inline void reset_launch_log(void) { fake.logged_launches = 0, fake.encode_count = 0, fake.memsets = 0; }

int total_calls(void);

/* The names of the driver functions called since the last reset, for failure messages. */
const char *called_functions(void);

/* The given_kernel record of the handle a launch named, or NULL if the fake never gave it out. */
const struct given_kernel *given_kernel_of(CUfunction function);

int64_t arg_i64(const recorded_launch *launch, int index);

int32_t arg_i32(const recorded_launch *launch, int index);

float arg_f32(const recorded_launch *launch, int index);

uint64_t arg_pointer(const recorded_launch *launch, int index);

#endif /* AOTK_API_FAKE_DRIVER_H */
