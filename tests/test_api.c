/*
 * CPU tests of the public API: status names, versions, the per-thread last error, argument
 * validation, and dispatch and launch through a fake driver, for the forward and for the backward
 * (its three kernels, its workspace, and the tuning of its dK/dV pass by seqlen_k), and for the
 * features of 0.2: the variable-length layout, windows, head dims of any multiple of 8, softcap, ALiBi,
 * sinks and their gradient, dropout and its mask, and callers built against 0.1; and for selection
 * attention (0.3): its validation, workspaces, queries, the choice of its kernels by dtype, head dims,
 * block size and group size, the seven launches of its backward, and the index check's round trip;
 * and for the sm_90 TMA forward (0.4): which calls take it, the tensor maps it encodes (through a fake
 * cuTensorMapEncodeTiled that checks the driver's rules) and passes, and a failing encode; and for the
 * sm_90 non-deterministic backward (0.4): which calls take it, its larger workspace, the accumulator it
 * clears (cuMemsetD32Async) and maps, its cast pass, and a failing clear; and for decoding and the merge
 * of partial attentions (0.4): their validation, the split-KV choice on the fake's SM count, the split's
 * workspace, the decoding kernel's and the merge's packed arguments, and older callers' kernel info.
 *
 * No GPU is needed, and none is used where one exists: every case that gets past validation runs
 * against a fake driver table installed with aotk__driver_set_for_testing (SQLite's fault
 * simulation), which records each call and answers as a GPU of a chosen compute capability would,
 * or fails where a case injects a fault. The tensors' device pointers are made-up addresses that
 * nothing dereferences: a bad input must be refused before the driver is reached, which the fake
 * proves by having recorded no call at all. The one case about the real driver (a machine with no
 * libcuda.so.1) is skipped where the driver is installed.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

static void *byte_offset(void *pointer, uintptr_t bytes) { return (void *)((uintptr_t)pointer + bytes); }

/* ---- the fake driver ------------------------------------------------------------------------ */

enum driver_function {
#define DRIVER_FUNCTION_ENUM(name, params) CALL_##name,
  AOTK__DRIVER_FUNCTIONS(DRIVER_FUNCTION_ENUM)
#undef DRIVER_FUNCTION_ENUM
  DRIVER_FUNCTION_COUNT
};

static const char *const driver_function_names[] = {
#define DRIVER_FUNCTION_NAME(name, params) #name,
    AOTK__DRIVER_FUNCTIONS(DRIVER_FUNCTION_NAME)
#undef DRIVER_FUNCTION_NAME
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
#define ATTN_FWD_HOPPER_KINDS ATTN_FWD_TMA_KINDS "i"
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
 * typed outputs, lse, sinks; the partials' (partial, batch, token, head) strides, the partial lse's
 * (partial, batch, head, token), out's (batch, token, head), lse's (batch, head, token); six ints.
 * attn_cache_append: KNew, VNew, K, V, BlockTable, CacheSeqlens; the (batch, token, head) strides of
 * k_new and v_new, the (page, row, head) strides of the k and v caches, the block table's batch stride;
 * seven ints. */
#define ATTN_DECODE_KINDS "ppppp" "ppp" "pp" "pp" "lll" "lll" "lll" "lll" "ll" "ll" "iiiiiiiiiiiiiii" "fff"
#define ATTN_MERGE_KINDS "ppp" "p" "ppp" "pp" "llll" "llll" "lll" "lll" "iiiiii"
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
  KERNEL_ATTN_DECODE_PAGED_BLOCKS,
  KERNEL_COUNT
};
static const struct kernel_signature {
  const char *function;
  int family;              /* AOTK__FAMILY_... of the table rows that hold it */
  const char *param_kinds; /* including the hidden scratch pointers */
} kernel_signatures[KERNEL_COUNT] = {
    {"attn_fwd", AOTK__FAMILY_ATTN_FWD, ATTN_FWD_KINDS HIDDEN_KINDS},
    {"attn_dropout_mask", AOTK__FAMILY_ATTN_DROPOUT_MASK, ATTN_DROPOUT_MASK_KINDS HIDDEN_KINDS},
    {"attn_bwd_preprocess", AOTK__FAMILY_ATTN_BWD_PREPROCESS, ATTN_BWD_PREPROCESS_KINDS HIDDEN_KINDS},
    {"attn_bwd_dkdv", AOTK__FAMILY_ATTN_BWD_DKDV, ATTN_BWD_DKDV_KINDS HIDDEN_KINDS},
    {"attn_bwd_dq", AOTK__FAMILY_ATTN_BWD_DQ, ATTN_BWD_DQ_KINDS HIDDEN_KINDS},
    {"attn_bwd_sink_reduce", AOTK__FAMILY_ATTN_BWD_SINK_REDUCE, ATTN_BWD_SINK_REDUCE_KINDS HIDDEN_KINDS},
    {"sel_fwd", AOTK__FAMILY_SEL_FWD, SEL_FWD_KINDS HIDDEN_KINDS},
    {"sel_bwd_dq", AOTK__FAMILY_SEL_BWD_DQ, SEL_BWD_DQ_KINDS HIDDEN_KINDS},
    {"sel_bwd_dkdv", AOTK__FAMILY_SEL_BWD_DKDV, SEL_BWD_DKDV_KINDS HIDDEN_KINDS},
    {"sel_index_zero", AOTK__FAMILY_SEL_INDEX_ZERO, SEL_INDEX_ZERO_KINDS HIDDEN_KINDS},
    {"sel_index_count", AOTK__FAMILY_SEL_INDEX_COUNT, SEL_INDEX_COUNT_KINDS HIDDEN_KINDS},
    {"sel_index_scan", AOTK__FAMILY_SEL_INDEX_SCAN, SEL_INDEX_SCAN_KINDS HIDDEN_KINDS},
    {"sel_index_scatter", AOTK__FAMILY_SEL_INDEX_SCATTER, SEL_INDEX_SCATTER_KINDS HIDDEN_KINDS},
    {"sel_index_order", AOTK__FAMILY_SEL_INDEX_ORDER, SEL_INDEX_ORDER_KINDS HIDDEN_KINDS},
    {"sel_check_indices", AOTK__FAMILY_SEL_CHECK_INDICES, SEL_CHECK_INDICES_KINDS HIDDEN_KINDS},
    {"attn_fwd_tma", AOTK__FAMILY_ATTN_FWD_TMA, ATTN_FWD_TMA_KINDS HIDDEN_KINDS},
    /* The warp-specialized Gluon forward (kernels/attn_fwd_hopper.py) takes attn_fwd_tma's parameters,
     * then num_tiles. */
    {"attn_fwd_hopper", AOTK__FAMILY_ATTN_FWD_HOPPER, ATTN_FWD_HOPPER_KINDS HIDDEN_KINDS},
    /* The same Gluon forward with three consumer warpgroups (192-row tiles, d=64): the same parameters. */
    {"attn_fwd_hopper_wg3", AOTK__FAMILY_ATTN_FWD_HOPPER_WG3, ATTN_FWD_HOPPER_KINDS HIDDEN_KINDS},
    /* The warp-specialized Gluon dK/dV pass (kernels/attn_bwd_hopper.py): attn_bwd_dkdv's parameters,
     * then descriptors of Q, K, V and dO. */
    {"attn_bwd_dkdv_hopper", AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER, ATTN_BWD_DKDV_KINDS "tttt" HIDDEN_KINDS},
    /* The non-deterministic one-pass backward (kernels/attn_bwd_hopper.py): the Gluon dK/dV pass's
     * parameters, then a descriptor of the fp32 dQ accumulator it reduce-adds into. */
    {"attn_bwd_fused_hopper", AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER, ATTN_BWD_DKDV_KINDS "ttttt" HIDDEN_KINDS},
    {"attn_bwd_dq_convert", AOTK__FAMILY_ATTN_BWD_DQ_CONVERT, ATTN_BWD_DQ_CONVERT_KINDS HIDDEN_KINDS},
    {"attn_decode", AOTK__FAMILY_ATTN_DECODE, ATTN_DECODE_KINDS HIDDEN_KINDS},
    {"attn_merge", AOTK__FAMILY_ATTN_MERGE, ATTN_MERGE_KINDS HIDDEN_KINDS},
    {"attn_cache_append", AOTK__FAMILY_ATTN_CACHE_APPEND, ATTN_CACHE_APPEND_KINDS HIDDEN_KINDS},
    /* The paged decoding families compile the same function (a constexpr PAGE_MODE apart), so their rows
     * name attn_decode: the driver finds that name first and hands out KERNEL_ATTN_DECODE for all three;
     * the row (the query's name, the block and shared memory of the launch) tells them apart. */
    {"attn_decode", AOTK__FAMILY_ATTN_DECODE_PAGED, ATTN_DECODE_KINDS HIDDEN_KINDS},
    {"attn_decode", AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS, ATTN_DECODE_KINDS HIDDEN_KINDS},
};

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
/* attn_fwd_hopper and attn_fwd_hopper_wg3: attn_fwd_tma's arguments up to its descriptors, then the number
 * of tiles their persistent programs share, then the two scratch pointers. */
enum hopper_launch_param {
  HOPPER_ARG_NUM_TILES = TMA_ARG_GLOBAL_SCRATCH,
  HOPPER_ARG_GLOBAL_SCRATCH,
  HOPPER_ARG_PROFILE_SCRATCH,
  HOPPER_PARAM_COUNT
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
  DECODE_BLOCK_TABLE, DECODE_CACHE_SEQLENS, DECODE_CU_SEQLENS_Q, DECODE_ALIBI_SLOPES, DECODE_SINKS,
  DECODE_OUT_PARTIAL, DECODE_LSE_PARTIAL,
  DECODE_STRIDE_QB, DECODE_STRIDE_QS, DECODE_STRIDE_QH,
  DECODE_STRIDE_KP, DECODE_STRIDE_KS, DECODE_STRIDE_KH,
  DECODE_STRIDE_VP, DECODE_STRIDE_VS, DECODE_STRIDE_VH,
  DECODE_STRIDE_OB, DECODE_STRIDE_OS, DECODE_STRIDE_OH,
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
  MERGE_LSE, MERGE_SINKS,
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
};

enum { FAKE_MULTIPROCESSORS = 132 }; /* the fake device's SMs, an H100's */
enum { MAX_LAUNCH_PARAMS = 96, LAUNCH_LOG_SIZE = 8, GIVEN_KERNELS_MAX = 1024 };
_Static_assert((int)LAUNCH_PARAM_COUNT == sizeof ATTN_FWD_KINDS HIDDEN_KINDS - 1, "forward parameter list");
_Static_assert((int)TMA_PARAM_COUNT ==
                   sizeof ATTN_FWD_TMA_KINDS HIDDEN_KINDS - 1 + TMA_DESCRIPTORS * (TMA_DESC_SLOTS - 1),
               "TMA forward parameter list");
_Static_assert((int)HOPPER_PARAM_COUNT ==
                   sizeof ATTN_FWD_HOPPER_KINDS HIDDEN_KINDS - 1 + TMA_DESCRIPTORS * (TMA_DESC_SLOTS - 1),
               "warp-specialized forward parameter list");
_Static_assert((int)HOPPER_PARAM_COUNT <= (int)MAX_LAUNCH_PARAMS, "room for the warp-specialized forward's list");
_Static_assert((int)MASK_PARAM_COUNT == sizeof ATTN_DROPOUT_MASK_KINDS HIDDEN_KINDS - 1, "dropout-mask parameter list");
_Static_assert((int)PRE_PARAM_COUNT == sizeof ATTN_BWD_PREPROCESS_KINDS HIDDEN_KINDS - 1, "preprocess parameter list");
_Static_assert((int)REDUCE_PARAM_COUNT == sizeof ATTN_BWD_SINK_REDUCE_KINDS HIDDEN_KINDS - 1, "sink-reduce parameter list");
_Static_assert((int)DKDV_PARAM_COUNT == sizeof ATTN_BWD_DKDV_KINDS HIDDEN_KINDS - 1, "dK/dV parameter list");
_Static_assert((int)DQ_PARAM_COUNT == sizeof ATTN_BWD_DQ_KINDS HIDDEN_KINDS - 1, "dQ parameter list");
_Static_assert((int)CONVERT_PARAM_COUNT == sizeof ATTN_BWD_DQ_CONVERT_KINDS HIDDEN_KINDS - 1, "dQ cast parameter list");
_Static_assert((int)DKDV_PARAM_COUNT + FUSED_DESCRIPTORS * TMA_DESC_SLOTS <= (int)MAX_LAUNCH_PARAMS,
               "room for the fused pass's list");
_Static_assert((int)SEL_FWD_PARAM_COUNT == sizeof SEL_FWD_KINDS HIDDEN_KINDS - 1, "sel_fwd parameter list");
_Static_assert((int)SEL_DQ_PARAM_COUNT == sizeof SEL_BWD_DQ_KINDS HIDDEN_KINDS - 1, "sel_bwd_dq parameter list");
_Static_assert((int)SEL_DKDV_PARAM_COUNT == sizeof SEL_BWD_DKDV_KINDS HIDDEN_KINDS - 1, "sel_bwd_dkdv parameter list");
_Static_assert((int)SEL_ZERO_PARAM_COUNT == sizeof SEL_INDEX_ZERO_KINDS HIDDEN_KINDS - 1, "sel_index_zero list");
_Static_assert((int)SEL_COUNT_PARAM_COUNT == sizeof SEL_INDEX_COUNT_KINDS HIDDEN_KINDS - 1, "sel_index_count list");
_Static_assert((int)SEL_SCATTER_PARAM_COUNT == sizeof SEL_INDEX_SCATTER_KINDS HIDDEN_KINDS - 1,
               "sel_index_scatter list");
_Static_assert((int)SEL_ORDER_PARAM_COUNT == sizeof SEL_INDEX_ORDER_KINDS HIDDEN_KINDS - 1, "sel_index_order list");
_Static_assert((int)SEL_SCAN_PARAM_COUNT == sizeof SEL_INDEX_SCAN_KINDS HIDDEN_KINDS - 1, "sel_index_scan list");
_Static_assert((int)SEL_CHECK_PARAM_COUNT == sizeof SEL_CHECK_INDICES_KINDS HIDDEN_KINDS - 1, "sel_check_indices list");
_Static_assert((int)DECODE_PARAM_COUNT == sizeof ATTN_DECODE_KINDS HIDDEN_KINDS - 1, "attn_decode parameter list");
_Static_assert((int)MERGE_PARAM_COUNT == sizeof ATTN_MERGE_KINDS HIDDEN_KINDS - 1, "attn_merge parameter list");
_Static_assert((int)APPEND_PARAM_COUNT == sizeof ATTN_CACHE_APPEND_KINDS HIDDEN_KINDS - 1,
               "attn_cache_append parameter list");
_Static_assert((int)DECODE_PARAM_COUNT <= (int)MAX_LAUNCH_PARAMS, "room for attn_decode's list");
_Static_assert((int)DKDV_PARAM_COUNT <= (int)MAX_LAUNCH_PARAMS, "room for the longest list");
_Static_assert((int)SEL_DQ_PARAM_COUNT <= (int)MAX_LAUNCH_PARAMS, "room for the selection's longest list");

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
static struct fake_gpu {
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
} fake;

static const char injected_error_name[] = "CUDA_ERROR_INJECTED_BY_TEST";

static void record_in_sequence(int call) {
  if (fake.sequence_length < (int)(sizeof fake.sequence / sizeof fake.sequence[0])) {
    fake.sequence[fake.sequence_length++] = call;
  }
}

static CUresult fake_cuInit(unsigned flags) {
  fake.calls[CALL_cuInit]++;
  (void)flags;
  return fake.init_result;
}

static CUresult fake_cuGetErrorName(CUresult error, const char **name) {
  fake.calls[CALL_cuGetErrorName]++;
  *name = error == CUDA_SUCCESS ? "CUDA_SUCCESS" : injected_error_name;
  return CUDA_SUCCESS;
}

static CUresult fake_cuGetErrorString(CUresult error, const char **text) {
  fake.calls[CALL_cuGetErrorString]++;
  *text = error == CUDA_SUCCESS ? "no error" : "a failure injected by test_api";
  return CUDA_SUCCESS;
}

static CUresult fake_cuDeviceGetAttribute(int *value, int attribute, CUdevice device) {
  fake.calls[CALL_cuDeviceGetAttribute]++;
  if (device != 0) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = fake.compute_capability / 10;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = fake.compute_capability % 10;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *value = fake.max_shared_bytes;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = FAKE_MULTIPROCESSORS;
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuCtxGetCurrent(CUcontext *context) {
  fake.calls[CALL_cuCtxGetCurrent]++;
  if (fake.context_result != CUDA_SUCCESS) return fake.context_result;
  *context = fake.has_context ? FAKE_CONTEXT : NULL;
  return CUDA_SUCCESS;
}

static CUresult fake_cuStreamGetCtx(CUstream stream, CUcontext *context) {
  fake.calls[CALL_cuStreamGetCtx]++;
  fake.stream_context_asked = stream;
  if (fake.stream_context_result != CUDA_SUCCESS) return fake.stream_context_result;
  *context = fake.stream_context != NULL ? fake.stream_context : FAKE_CONTEXT;
  return CUDA_SUCCESS;
}

static CUresult fake_cuCtxGetDevice(CUdevice *device) {
  fake.calls[CALL_cuCtxGetDevice]++;
  *device = 0;
  return CUDA_SUCCESS;
}

static CUresult fake_cuLibraryLoadData(CUlibrary *library, const void *code, void *jit_options, void **jit_values,
                                       unsigned num_jit_options, void *library_options, void **library_values,
                                       unsigned num_library_options) {
  fake.calls[CALL_cuLibraryLoadData]++;
  (void)jit_options, (void)jit_values, (void)num_jit_options;
  (void)library_options, (void)library_values, (void)num_library_options;
  if (fake.library_load_result != CUDA_SUCCESS &&
      (fake.fail_library_load_call == 0 || fake.calls[CALL_cuLibraryLoadData] == fake.fail_library_load_call)) {
    return fake.library_load_result;
  }
  /* What the driver would be handed: a cubin (ELF) or NUL-terminated PTX text for sm_80. */
  if (memcmp(code, "\x7f" "ELF", 4) == 0) {
    fake.loaded_elf++;
  } else if (strstr((const char *)code, ".target sm_80") != NULL) {
    fake.loaded_ptx++;
  }
  fake.loaded_images++;
  *library = (CUlibrary)(uintptr_t)(FAKE_LIBRARY_BASE + 16u * (unsigned)fake.loaded_images);
  return CUDA_SUCCESS;
}

static CUresult fake_cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name) {
  fake.calls[CALL_cuLibraryGetKernel]++;
  if (fake.get_kernel_result != CUDA_SUCCESS) return fake.get_kernel_result;
  if (library != (CUlibrary)(uintptr_t)(FAKE_LIBRARY_BASE + 16u * (unsigned)fake.loaded_images)) {
    return CUDA_ERROR_INVALID_VALUE; /* not the library just loaded */
  }
  int id = 0;
  while (id < KERNEL_COUNT && strcmp(kernel_signatures[id].function, name) != 0) id++;
  if (id == KERNEL_COUNT) return CUDA_ERROR_INVALID_VALUE; /* no such .entry in any aotk image */
  fake.last_kernel = (CUkernel)(uintptr_t)(FAKE_KERNEL_BASE + KERNEL_HANDLE_STRIDE * (unsigned)id +
                                           16u * (unsigned)fake.loaded_images);
  if (fake.given_count < GIVEN_KERNELS_MAX) {
    fake.given[fake.given_count].kernel = fake.last_kernel;
    fake.given[fake.given_count].shared_opt_in = 0;
    fake.given_count++;
  }
  *kernel = fake.last_kernel;
  return CUDA_SUCCESS;
}

static CUresult fake_cuKernelSetAttribute(int attribute, int value, CUkernel kernel, CUdevice device) {
  fake.calls[CALL_cuKernelSetAttribute]++;
  (void)device;
  if (fake.set_attribute_result != CUDA_SUCCESS) return fake.set_attribute_result;
  fake.set_attribute = attribute;
  fake.set_attribute_value = value;
  for (int i = 0; i < fake.given_count; i++) {
    if (fake.given[i].kernel == kernel && attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
      fake.given[i].shared_opt_in = value;
    }
  }
  return CUDA_SUCCESS;
}

static CUresult fake_cuLaunchKernel(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                    unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_bytes,
                                    CUstream stream, void **params, void **extra) {
  fake.calls[CALL_cuLaunchKernel]++;
  if (fake.launch_result != CUDA_SUCCESS &&
      (fake.fail_launch_call == 0 || fake.calls[CALL_cuLaunchKernel] == fake.fail_launch_call)) {
    return fake.launch_result;
  }
  /* Only a handle the fake's cuLibraryGetKernel gave out names a kernel. */
  uintptr_t handle = (uintptr_t)(void *)function;
  if (handle < FAKE_KERNEL_BASE) return CUDA_ERROR_INVALID_VALUE;
  unsigned id = (unsigned)((handle - FAKE_KERNEL_BASE) / KERNEL_HANDLE_STRIDE);
  unsigned load = (unsigned)((handle - FAKE_KERNEL_BASE) % KERNEL_HANDLE_STRIDE);
  if (id >= KERNEL_COUNT || load % 16u != 0 || load / 16u == 0 || load / 16u > (unsigned)fake.loaded_images) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  fake.launches++;
  recorded_launch *launch = &fake.launch;
  memset(launch, 0, sizeof *launch);
  launch->kernel = (int)id;
  launch->function = function;
  launch->grid[0] = grid_x, launch->grid[1] = grid_y, launch->grid[2] = grid_z;
  launch->block[0] = block_x, launch->block[1] = block_y, launch->block[2] = block_z;
  launch->shared_bytes = shared_bytes;
  launch->stream = stream;
  launch->extra = extra;
  /* Reads each argument at its kind's size, as the driver would: an argument packed narrower than
   * the kernel declares, or a list shorter than the kernel's, shows up under ASan. */
  const char *kinds = kernel_signatures[id].param_kinds;
  for (size_t i = 0, slot = 0; kinds[i] != '\0'; i++) {
    if (kinds[i] == 't') { /* the whole map, then its shape and strides, one slot each */
      if (launch->maps_recorded < MAX_TMA_MAPS) {
        memcpy(launch->maps[launch->maps_recorded++], params[slot], TMA_MAP_BYTES);
      }
      slot++;
      for (int j = 0; j < TMA_RANK; j++, slot++) memcpy(launch->args[slot], params[slot], 4);
      for (int j = 0; j < TMA_RANK; j++, slot++) memcpy(launch->args[slot], params[slot], 8);
    } else {
      memcpy(launch->args[slot], params[slot], kinds[i] == 'p' || kinds[i] == 'l' ? 8 : 4);
      slot++;
    }
  }
  if (fake.logged_launches < LAUNCH_LOG_SIZE) fake.launch_log[fake.logged_launches] = *launch;
  fake.logged_launches++;
  record_in_sequence(CALL_cuLaunchKernel);
  if (id == KERNEL_SEL_CHECK_INDICES && fake.check_code != 0 && fake.check_code < fake.device_word) {
    fake.device_word = fake.check_code;
  }
  return CUDA_SUCCESS;
}

/* The pattern the fake writes into a map it encodes for `address`: a launch's maps show which tensor's
 * encode each one is. */
static uint64_t fake_map_word(const void *address, int word) {
  return 0x7e4d415000000000ull ^ ((uint64_t)(uintptr_t)address + (uint64_t)word);
}

/* A host-side encode, checked by the driver's own rules (cuda.h, cuTensorMapEncodeTiled) for what aotk
 * asks: a 64-byte-aligned map, 2-byte (fp16, bf16) or 4-byte (fp32) elements, a 16-byte-aligned
 * address, byte strides that are multiples of 16 below 2^40, dims in [1, 2^32], boxes in [1, 256] whose
 * inner extent is a multiple of 16 bytes (at most 128 with the 128-byte swizzle), element strides in
 * [1, 8]. A call breaking one is refused, as the driver would. */
static CUresult fake_cuTensorMapEncodeTiled(CUtensorMap *map, int data_type, unsigned rank, void *address,
                                            const uint64_t *dims, const uint64_t *strides_bytes, const unsigned *box,
                                            const unsigned *element_strides, int interleave, int swizzle,
                                            int l2_promotion, int oob_fill) {
  fake.calls[CALL_cuTensorMapEncodeTiled]++;
  if (fake.encode_result != CUDA_SUCCESS &&
      (fake.fail_encode_call == 0 || fake.calls[CALL_cuTensorMapEncodeTiled] == fake.fail_encode_call)) {
    return fake.encode_result;
  }
  const unsigned element_bytes = data_type == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ? 4 : 2;
  if (map == NULL || (uintptr_t)map % 64 != 0 || rank != TMA_RANK || (uintptr_t)address % 16 != 0 ||
      (data_type != CU_TENSOR_MAP_DATA_TYPE_FLOAT16 && data_type != CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 &&
       data_type != CU_TENSOR_MAP_DATA_TYPE_FLOAT32) ||
      interleave != CU_TENSOR_MAP_INTERLEAVE_NONE || swizzle < CU_TENSOR_MAP_SWIZZLE_NONE ||
      swizzle > CU_TENSOR_MAP_SWIZZLE_128B || box[0] * element_bytes % 16 != 0 ||
      (swizzle == CU_TENSOR_MAP_SWIZZLE_128B && box[0] * element_bytes > 128)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (unsigned i = 0; i < rank; i++) {
    if (dims[i] == 0 || dims[i] > ((uint64_t)1 << 32) || box[i] == 0 || box[i] > 256 || element_strides[i] == 0 ||
        element_strides[i] > 8) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (i + 1 < rank && (strides_bytes[i] % 16 != 0 || strides_bytes[i] >= ((uint64_t)1 << 40))) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (fake.encode_count < ENCODE_LOG_SIZE) {
    encode_call *c = &fake.encodes[fake.encode_count];
    c->map = map, c->data_type = data_type, c->rank = rank, c->address = address;
    memcpy(c->dims, dims, sizeof c->dims);
    memcpy(c->strides_bytes, strides_bytes, sizeof c->strides_bytes);
    memcpy(c->box, box, sizeof c->box);
    memcpy(c->element_strides, element_strides, sizeof c->element_strides);
    c->interleave = interleave, c->swizzle = swizzle, c->l2_promotion = l2_promotion, c->oob_fill = oob_fill;
  }
  fake.encode_count++;
  for (int word = 0; word < AOTK__CU_TENSOR_MAP_NUM_QWORDS; word++) map->opaque[word] = fake_map_word(address, word);
  return CUDA_SUCCESS;
}

/* An asynchronous fill of 32-bit words on a stream: recorded, or failed where a case injects it. */
static CUresult fake_cuMemsetD32Async(CUdeviceptr destination, unsigned value, size_t count, CUstream stream) {
  fake.calls[CALL_cuMemsetD32Async]++;
  if (fake.memset_result != CUDA_SUCCESS) return fake.memset_result;
  if (destination == 0 || destination % 4 != 0 || count == 0) return CUDA_ERROR_INVALID_VALUE;
  fake.memsets++;
  fake.memset_destination = destination;
  fake.memset_value = value;
  fake.memset_count = count;
  fake.memset_stream = stream;
  fake.memset_after_launches = fake.logged_launches;
  return CUDA_SUCCESS;
}

static CUresult fake_cuStreamSynchronize(CUstream stream) {
  fake.calls[CALL_cuStreamSynchronize]++;
  record_in_sequence(CALL_cuStreamSynchronize);
  fake.synchronized_stream = stream;
  return CUDA_SUCCESS;
}

static CUresult fake_cuCtxSynchronize(void) {
  fake.calls[CALL_cuCtxSynchronize]++;
  record_in_sequence(CALL_cuCtxSynchronize);
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemcpyHtoD(CUdeviceptr destination, const void *source, size_t bytes) {
  fake.calls[CALL_cuMemcpyHtoD]++;
  record_in_sequence(CALL_cuMemcpyHtoD);
  if (fake.memcpy_result != CUDA_SUCCESS) return fake.memcpy_result;
  fake.written_address = destination;
  fake.written_bytes = bytes;
  memcpy(&fake.device_word, source, bytes < sizeof fake.device_word ? bytes : sizeof fake.device_word);
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemcpyDtoH(void *destination, CUdeviceptr source, size_t bytes) {
  fake.calls[CALL_cuMemcpyDtoH]++;
  record_in_sequence(CALL_cuMemcpyDtoH);
  if (fake.memcpy_result != CUDA_SUCCESS) return fake.memcpy_result;
  fake.read_address = source;
  fake.read_bytes = bytes;
  memcpy(destination, &fake.device_word, bytes < sizeof fake.device_word ? bytes : sizeof fake.device_word);
  return CUDA_SUCCESS;
}

/* Every other entry: the library has no business calling it here. Recorded, and refused. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define DRIVER_FUNCTION_UNEXPECTED(name, params) \
  static CUresult unexpected_##name params {     \
    fake.calls[CALL_##name]++;                   \
    return CUDA_ERROR_INVALID_VALUE;             \
  }
AOTK__DRIVER_FUNCTIONS(DRIVER_FUNCTION_UNEXPECTED)
#undef DRIVER_FUNCTION_UNEXPECTED
#pragma GCC diagnostic pop

static aotk__driver fake_driver = {
#define DRIVER_FUNCTION_MEMBER(name, params) .name = unexpected_##name,
    AOTK__DRIVER_FUNCTIONS(DRIVER_FUNCTION_MEMBER)
#undef DRIVER_FUNCTION_MEMBER
};

/* Installs the fake as a working GPU of compute capability `compute_capability` with
 * `max_shared_bytes` of opt-in shared memory, with a current context and a clean record. Installing
 * also empties the library's device and kernel caches, so each case starts from a first call. */
static void install_fake_gpu(int compute_capability, int max_shared_bytes) {
  memset(&fake, 0, sizeof fake);
  fake.has_context = true;
  fake.compute_capability = compute_capability;
  fake.max_shared_bytes = max_shared_bytes;
  fake_driver.cuInit = fake_cuInit;
  fake_driver.cuGetErrorName = fake_cuGetErrorName;
  fake_driver.cuGetErrorString = fake_cuGetErrorString;
  fake_driver.cuDeviceGetAttribute = fake_cuDeviceGetAttribute;
  fake_driver.cuCtxGetCurrent = fake_cuCtxGetCurrent;
  fake_driver.cuStreamGetCtx = fake_cuStreamGetCtx;
  fake_driver.cuCtxGetDevice = fake_cuCtxGetDevice;
  fake_driver.cuLibraryLoadData = fake_cuLibraryLoadData;
  fake_driver.cuLibraryGetKernel = fake_cuLibraryGetKernel;
  fake_driver.cuKernelSetAttribute = fake_cuKernelSetAttribute;
  fake_driver.cuLaunchKernel = fake_cuLaunchKernel;
  fake_driver.cuStreamSynchronize = fake_cuStreamSynchronize;
  fake_driver.cuCtxSynchronize = fake_cuCtxSynchronize;
  fake_driver.cuMemcpyHtoD = fake_cuMemcpyHtoD;
  fake_driver.cuMemcpyDtoH = fake_cuMemcpyDtoH;
  fake_driver.cuTensorMapEncodeTiled = fake_cuTensorMapEncodeTiled;
  fake_driver.cuMemsetD32Async = fake_cuMemsetD32Async;
  aotk__driver_set_for_testing(&fake_driver);
}

static void uninstall_fake_gpu(void) { aotk__driver_set_for_testing(NULL); }

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

static void reset_calls(void) { memset(fake.calls, 0, sizeof fake.calls); }

static void reset_launch_log(void) { fake.logged_launches = 0, fake.encode_count = 0, fake.memsets = 0; }

static int total_calls(void) {
  int total = 0;
  for (int i = 0; i < DRIVER_FUNCTION_COUNT; i++) total += fake.calls[i];
  return total;
}

/* The names of the driver functions called since the last reset, for failure messages. */
static const char *called_functions(void) {
  static char list[512];
  list[0] = '\0';
  for (int i = 0; i < DRIVER_FUNCTION_COUNT; i++) {
    if (fake.calls[i] == 0) continue;
    size_t used = strlen(list);
    snprintf(list + used, sizeof list - used, "%s%s x%d", used ? ", " : "", driver_function_names[i], fake.calls[i]);
  }
  return list;
}

/* The given_kernel record of the handle a launch named, or NULL if the fake never gave it out. */
static const struct given_kernel *given_kernel_of(CUfunction function) {
  for (int i = 0; i < fake.given_count; i++) {
    if ((void *)fake.given[i].kernel == (void *)function) return &fake.given[i];
  }
  return NULL;
}

static int64_t arg_i64(const recorded_launch *launch, int index) {
  int64_t value;
  memcpy(&value, launch->args[index], sizeof value);
  return value;
}

static int32_t arg_i32(const recorded_launch *launch, int index) {
  int32_t value;
  memcpy(&value, launch->args[index], sizeof value);
  return value;
}

static float arg_f32(const recorded_launch *launch, int index) {
  float value;
  memcpy(&value, launch->args[index], sizeof value);
  return value;
}

static uint64_t arg_pointer(const recorded_launch *launch, int index) {
  uint64_t value;
  memcpy(&value, launch->args[index], sizeof value);
  return value;
}

/* ---- problems ------------------------------------------------------------------------------- */

typedef struct problem {
  aotk_dtype dtype;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim; /* head_dim: q's and k's (head_dim_qk) */
  bool with_lse;
  int64_t head_dim_v; /* v's and out's; 0: head_dim */
} problem;

static int64_t dim_v(const problem *p) { return p->head_dim_v != 0 ? p->head_dim_v : p->head_dim; }

/* GQA (group 4), seqlen_q != seqlen_k, lse written: every tensor and every check is in play. */
static const problem default_problem = {AOTK_DTYPE_BFLOAT16, 2, 100, 130, 8, 2, 64, true, 0};

/* Contiguous tensors at the fake addresses. */
static aotk_attn_params params_for(problem p) {
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = aotk_tensor_4d(FAKE_Q, p.dtype, p.batch, p.seqlen_q, p.heads_q, p.head_dim);
  params.k = aotk_tensor_4d(FAKE_K, p.dtype, p.batch, p.seqlen_k, p.heads_kv, p.head_dim);
  params.v = aotk_tensor_4d(FAKE_V, p.dtype, p.batch, p.seqlen_k, p.heads_kv, dim_v(&p));
  params.out = aotk_tensor_4d(FAKE_OUT, p.dtype, p.batch, p.seqlen_q, p.heads_q, dim_v(&p));
  if (p.with_lse) params.lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, p.batch, p.heads_q, p.seqlen_q);
  return params;
}

static aotk_attn_params valid_params(void) { return params_for(default_problem); }

/* The backward's params: the forward's (lse required), and dout like out, dq like q, dk and dv like k
 * and v, each contiguous at its own fake address. */
static aotk_attn_params bwd_params_for(problem p) {
  p.with_lse = true;
  aotk_attn_params params = params_for(p);
  params.dout = aotk_tensor_4d(FAKE_DOUT, p.dtype, p.batch, p.seqlen_q, p.heads_q, dim_v(&p));
  params.dq = aotk_tensor_4d(FAKE_DQ, p.dtype, p.batch, p.seqlen_q, p.heads_q, p.head_dim);
  params.dk = aotk_tensor_4d(FAKE_DK, p.dtype, p.batch, p.seqlen_k, p.heads_kv, p.head_dim);
  params.dv = aotk_tensor_4d(FAKE_DV, p.dtype, p.batch, p.seqlen_k, p.heads_kv, dim_v(&p));
  return params;
}

static aotk_attn_params valid_bwd_params(void) { return bwd_params_for(default_problem); }

/* The variable-length layout of problem `p`: p.batch sequences of at most p.seqlen_q query and
 * p.seqlen_k key rows (max_seqlen_q, max_seqlen_k), packed into total_q and total_k rows; q, out
 * [total_q, heads_q, d], k, v [total_k, heads_kv, d], lse [heads_q, total_q], cu_seqlens int32
 * [batch + 1]. With `bwd`, dout, dq, dk and dv too, like out, q, k and v. */
static aotk_attn_params varlen_params_for(problem p, int64_t total_q, int64_t total_k, bool bwd) {
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  const int64_t dv = dim_v(&p);
  params.q = aotk_tensor_3d(FAKE_Q, p.dtype, total_q, p.heads_q, p.head_dim);
  params.k = aotk_tensor_3d(FAKE_K, p.dtype, total_k, p.heads_kv, p.head_dim);
  params.v = aotk_tensor_3d(FAKE_V, p.dtype, total_k, p.heads_kv, dv);
  params.out = aotk_tensor_3d(FAKE_OUT, p.dtype, total_q, p.heads_q, dv);
  if (p.with_lse || bwd) params.lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, p.heads_q, total_q);
  params.cu_seqlens_q = aotk_tensor_1d(FAKE_CU_SEQLENS_Q, AOTK_DTYPE_INT32, p.batch + 1);
  params.cu_seqlens_k = aotk_tensor_1d(FAKE_CU_SEQLENS_K, AOTK_DTYPE_INT32, p.batch + 1);
  params.max_seqlen_q = (int32_t)p.seqlen_q;
  params.max_seqlen_k = (int32_t)p.seqlen_k;
  if (bwd) {
    params.dout = aotk_tensor_3d(FAKE_DOUT, p.dtype, total_q, p.heads_q, dv);
    params.dq = aotk_tensor_3d(FAKE_DQ, p.dtype, total_q, p.heads_q, p.head_dim);
    params.dk = aotk_tensor_3d(FAKE_DK, p.dtype, total_k, p.heads_kv, p.head_dim);
    params.dv = aotk_tensor_3d(FAKE_DV, p.dtype, total_k, p.heads_kv, dv);
  }
  return params;
}

/* The default problem as 2 sequences in 170 query and 230 key rows (each under its max_seqlen). */
enum { VARLEN_TOTAL_Q = 170, VARLEN_TOTAL_K = 230 };

/* Rewrites *p as the varlen form of the default problem, for the forward or (when *p has dout) the
 * backward: the base of the varlen validation cases. */
static void make_varlen(aotk_attn_params *p) {
  *p = varlen_params_for(default_problem, VARLEN_TOTAL_Q, VARLEN_TOTAL_K, p->dout.data != NULL);
}

/* The statistics' row length: seqlen_q rounded up to 128 (include/aotk.h, aotk_attn_bwd). */
static int64_t stats_stride(const problem *p) { return (p->seqlen_q + 127) / 128 * 128; }

/* Two fp32 arrays [batch * heads_q, stats_stride]: delta, then lse * log2(e). */
static size_t bwd_stats_bytes(const problem *p) {
  return (size_t)8 * (size_t)p->batch * (size_t)p->heads_q * (size_t)stats_stride(p);
}

/* The pre-pass's rows per program (codegen/aotk_catalog.py PREPROCESS_CONFIG). */
enum { PREPROCESS_BLOCK_M = 64 };

static int64_t ceil_div(int64_t length, int64_t block) { return (length + block - 1) / block; }

/* The workspace the backward needs: the statistics, and with dsinks one fp32 partial sum of the sink
 * gradient per (query head, sequence, pre-pass program) after them. */
static size_t bwd_workspace_bytes_for(const problem *p, bool dsinks) {
  size_t bytes = bwd_stats_bytes(p);
  if (dsinks) {
    bytes += (size_t)4 * (size_t)(p->heads_q * p->batch * ceil_div(stats_stride(p), PREPROCESS_BLOCK_M));
  }
  return bytes;
}

static size_t bwd_workspace_bytes(const problem *p) { return bwd_workspace_bytes_for(p, false); }

/* The non-deterministic (fused) backward's fp32 dQ accumulator [batch * heads_q, stats_stride,
 * head_dim_qk] follows the rest at the first 256-byte boundary (include/aotk.h,
 * AOTK_FEATURE_NONDETERMINISTIC): its offset, its size in 32-bit words, and the workspace in all. */
static size_t bwd_accumulator_offset(const problem *p, bool dsinks) {
  return (bwd_workspace_bytes_for(p, dsinks) + 255) / 256 * 256;
}

static size_t bwd_accumulator_elements(const problem *p) {
  return (size_t)p->batch * (size_t)p->heads_q * (size_t)stats_stride(p) * (size_t)p->head_dim;
}

static size_t bwd_fused_workspace_bytes_for(const problem *p, bool dsinks) {
  return bwd_accumulator_offset(p, dsinks) + 4 * bwd_accumulator_elements(p);
}

/* Big enough for any problem the validation cases build, so that only their one spoiled argument can
 * make a call fail. */
#define AMPLE_WORKSPACE_BYTES ((size_t)1 << 40)

static const char *op_function(aotk_op op) { return op == AOTK_OP_ATTN_FWD ? "aotk_attn_fwd" : "aotk_attn_bwd"; }

/* The call `op` names, with the ample workspace for the backward. */
static aotk_status run_op(aotk_op op, const aotk_attn_params *params) {
  if (op == AOTK_OP_ATTN_FWD) return aotk_attn_fwd(params, FAKE_STREAM);
  return aotk_attn_bwd(params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM);
}

static bool message_mentions(const char *needle) { return strstr(aotk_last_error(), needle) != NULL; }

/* A kernel info struct with every byte after struct_size poisoned, to see what a call writes. */
enum { POISON = 0xAB };
static void poison_info(aotk_kernel_info *info) {
  memset(info, POISON, sizeof *info);
  info->struct_size = sizeof *info;
}

static bool info_untouched(const aotk_kernel_info *info) {
  const unsigned char *bytes = (const unsigned char *)info;
  if (info->struct_size != sizeof *info) return false;
  for (size_t i = sizeof info->struct_size; i < sizeof *info; i++) {
    if (bytes[i] != POISON) return false;
  }
  return true;
}

static const aotk__kernel_entry *table_row_named(const char *name, int arch) {
  for (int i = 0; i < aotk__kernel_count; i++) {
    if (aotk__kernel_table[i].arch == arch && strcmp(aotk__kernel_table[i].name, name) == 0) {
      return &aotk__kernel_table[i];
    }
  }
  return NULL;
}

/* The compiled head-dim pairs (q/k, v) of the attention kernels (codegen/aotk_catalog.py ATTN_HEAD_DIMS). */
static const int compiled_head_dims[][2] = {{32, 32}, {64, 64}, {128, 128}, {256, 256}, {256, 128}};

/* The TMA forward's (ATTN_TMA_HEAD_DIMS), the warp-specialized one's (ATTN_HOPPER_HEAD_DIMS) and that
 * one's three-warpgroup form's (ATTN_HOPPER_WG3_HEAD_DIMS): exact, never padded. The warp-specialized
 * forward runs (192, 128) as itself (Q and K in 64-column boxes), where the pointer kernel pads it to
 * (256, 128). */
static const int tma_head_dims[][2] = {{128, 128}, {256, 256}};
static const int hopper_head_dims[][2] = {{64, 64}, {128, 128}, {192, 128}, {256, 256}};
static const int hopper_wg3_head_dims[][2] = {{64, 64}};
/* The sm_90 backward's Gluon passes and the cast after the fused one (ATTN_HOPPER_BWD_HEAD_DIMS): exact. */
static const int hopper_bwd_head_dims[][2] = {{64, 64}, {128, 128}};

/* The Gluon forward: two consumer warpgroups (128-row tiles), or three (192-row tiles, d=64 only). */
static bool family_is_hopper_fwd(int family) {
  return family == AOTK__FAMILY_ATTN_FWD_HOPPER || family == AOTK__FAMILY_ATTN_FWD_HOPPER_WG3;
}

static bool family_is_hopper_bwd(int family) {
  return family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER || family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER ||
         family == AOTK__FAMILY_ATTN_BWD_DQ_CONVERT;
}

/* The families with an EXTRAS variant (the catalog's axis "extras", or "extras_only" for the TMA forward,
 * which has nothing else): not the three-warpgroup forward, which runs only the plain forward, nor the
 * fused backward's dQ cast, which sees no scores (its one variant serves the EXTRAS fused pass too). */
static bool family_has_extras(int family) {
  return family == AOTK__FAMILY_ATTN_FWD || family == AOTK__FAMILY_ATTN_FWD_TMA ||
         family == AOTK__FAMILY_ATTN_FWD_HOPPER || family == AOTK__FAMILY_ATTN_BWD_DKDV ||
         family == AOTK__FAMILY_ATTN_BWD_DQ || family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER ||
         family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER;
}

/* The compiled head dims a problem with head dims (head_dim_qk, head_dim_v) runs in, by the catalog's
 * rule: the smallest pair that holds both. The pre-pass has only a v dim (the smallest that holds
 * head_dim_v); the helper kernels have neither (0, 0). (0, 0) also when nothing holds them. */
static void compiled_dims(int family, int64_t head_dim_qk, int64_t head_dim_v, int *qk, int *v) {
  *qk = 0;
  *v = 0;
  if (family == AOTK__FAMILY_ATTN_DROPOUT_MASK || family == AOTK__FAMILY_ATTN_BWD_SINK_REDUCE) return;
  if (family == AOTK__FAMILY_ATTN_BWD_PREPROCESS) {
    for (int size = 32; size <= 256 && *v == 0; size *= 2) *v = size >= head_dim_v ? size : 0;
    return;
  }
  if (family == AOTK__FAMILY_ATTN_FWD_TMA || family_is_hopper_fwd(family) || family_is_hopper_bwd(family)) {
    const bool hopper = family == AOTK__FAMILY_ATTN_FWD_HOPPER, wg3 = family == AOTK__FAMILY_ATTN_FWD_HOPPER_WG3;
    const bool hopper_bwd = family_is_hopper_bwd(family);
    const int(*pairs)[2] = hopper_bwd ? hopper_bwd_head_dims
                           : wg3      ? hopper_wg3_head_dims
                           : hopper   ? hopper_head_dims
                                      : tma_head_dims;
    const size_t count = hopper_bwd ? sizeof hopper_bwd_head_dims / sizeof hopper_bwd_head_dims[0]
                         : wg3      ? sizeof hopper_wg3_head_dims / sizeof hopper_wg3_head_dims[0]
                         : hopper   ? sizeof hopper_head_dims / sizeof hopper_head_dims[0]
                                    : sizeof tma_head_dims / sizeof tma_head_dims[0];
    for (size_t i = 0; i < count; i++) {
      if (pairs[i][0] == head_dim_qk && pairs[i][1] == head_dim_v) *qk = (int)head_dim_qk, *v = (int)head_dim_v;
    }
    return;
  }
  for (size_t i = 0; i < sizeof compiled_head_dims / sizeof compiled_head_dims[0]; i++) {
    const int *pair = compiled_head_dims[i];
    if (pair[0] < head_dim_qk || pair[1] < head_dim_v) continue;
    if (*qk == 0 || pair[0] + pair[1] < *qk + *v) *qk = pair[0], *v = pair[1];
  }
}

/* Whether table row e is of `family`'s variant for (arch, dtype, compiled dims, alignment, EXTRAS),
 * each axis compared only where the family has it. */
static bool row_is_variant(const aotk__kernel_entry *e, int family, int arch, aotk_dtype dtype, int qk, int v,
                           int aligned, int extras) {
  if (e->family != family || e->arch != arch || e->head_dim_qk != qk || e->head_dim_v != v) return false;
  if (family == AOTK__FAMILY_ATTN_DROPOUT_MASK || family == AOTK__FAMILY_ATTN_BWD_SINK_REDUCE) return true;
  return e->dtype == (int)dtype && e->aligned == aligned && e->extras == (family_has_extras(family) ? extras : 0);
}

/* The tuning rule from codegen/aotk_catalog.py: among the rows of a family's variant (its compiled head
 * dims from the problem's by compiled_dims), the one with the largest min_seqlen that the family's size
 * key reaches (seqlen_k for the dK/dV pass, seqlen_q for the others). NULL when the variant has no row. */
static const aotk__kernel_entry *expected_row(int family, int arch, aotk_dtype dtype, int64_t head_dim_qk,
                                              int64_t head_dim_v, int aligned, int extras, int64_t size_key) {
  int qk, v;
  compiled_dims(family, head_dim_qk, head_dim_v, &qk, &v);
  const aotk__kernel_entry *best = NULL;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (!row_is_variant(e, family, arch, dtype, qk, v, aligned, extras) || e->min_seqlen > size_key) continue;
    if (best == NULL || e->min_seqlen > best->min_seqlen) best = e;
  }
  return best;
}

/* Whether aotk's aligned kernels may run on t (include/aotk.h): a 16-byte-aligned address and strides
 * that are multiples of 16 elements, the last dimension's aside. */
static bool tensor_aligned16(const aotk_tensor *t) {
  if ((uintptr_t)t->data % 16 != 0) return false;
  for (int i = 0; i < t->rank - 1; i++) {
    if (t->strides[i] % 16 != 0) return false;
  }
  return true;
}

/* Whether TMA can read t [batch, seqlen, heads, d] as the kernel's view [batch, seqlen, heads * d]: each
 * token's heads contiguous, token rows that do not overlap and are a multiple of 16 bytes apart, and
 * batches that do not overlap either (unless there is one batch, whose stride nothing uses). */
/* A varlen tensor [total, heads, d] as the kernels see it: [1, total, heads, d], batch stride 0. */
static aotk_tensor as_4d(const aotk_tensor *t) {
  if (t->rank != 3) return *t;
  aotk_tensor v = {t->data, t->dtype, 4, {1, t->shape[0], t->shape[1], t->shape[2], 0, 0},
                   {0, t->strides[0], t->strides[1], t->strides[2], 0, 0}};
  return v;
}

static bool tma_readable(const aotk_tensor *caller_tensor) {
  const aotk_tensor view = as_4d(caller_tensor), *t = &view;
  if (t->rank != 4) return false;
  const int64_t row = t->shape[2] * t->shape[3];
  return t->strides[2] == t->shape[3] && t->strides[1] >= row && t->strides[1] % 8 == 0 &&
         (t->shape[0] == 1 || (t->strides[0] % 8 == 0 && t->strides[0] >= t->shape[1] * t->strides[1]));
}

/* The fewest query rows (max_seqlen_q for varlen) that take the three-warpgroup forward (src/aotk_attn.c
 * HOPPER_WG3_MIN_SEQLEN: below, its 192-row tiles measured slower than two warpgroups' 128). */
enum { WG3_MIN_SEQLEN_Q = 2048 };

/* The forward family that must run `params` on a GPU that runs `arch` images (from PTX or not) with
 * `max_shared_bytes` of opt-in shared memory per block, by include/aotk.h. On sm_90 cubins, for aligned
 * inputs that TMA can read, the first of these that has a row at the call's head dims (exactly: a padded
 * head would put the box into the next one) fitting the shared memory:
 *   AOTK__FAMILY_ATTN_FWD_HOPPER_WG3, the warp-specialized kernel with three consumer warpgroups (d64), for
 *     the plain forward without a mask from WG3_MIN_SEQLEN_Q query rows on (max_seqlen_q for varlen);
 *   AOTK__FAMILY_ATTN_FWD_HOPPER, the one with two (AOTK_FEATURE_WARP_SPECIALIZED too), for everything but
 *     dropout (windows, sinks, and softcap and ALiBi in its EXTRAS rows);
 *   AOTK__FAMILY_ATTN_FWD_TMA (AOTK_FEATURE_TMA), dense only (its rows are EXTRAS: dropout);
 * the Gluon ones varlen too (the packed tensors read as [1, total, heads * d]). AOTK__FAMILY_ATTN_FWD, the
 * pointer kernel, otherwise (which is refused where it does not fit either). A TMA family that does not
 * fit with the config tuned for seqlen_q runs with one for fewer rows that does (src/aotk_attn.c
 * choose_tma_row). */
static int expected_fwd_family(const aotk_attn_params *params, int arch, bool from_ptx, int max_shared_bytes) {
  const bool varlen = params->cu_seqlens_q.data != NULL;
  if (arch != 90 || from_ptx || params->q.rank != (varlen ? 3 : 4)) return AOTK__FAMILY_ATTN_FWD;
  if (!tensor_aligned16(&params->q) || !tensor_aligned16(&params->k) || !tensor_aligned16(&params->v) ||
      !tensor_aligned16(&params->out)) {
    return AOTK__FAMILY_ATTN_FWD;
  }
  if (!tma_readable(&params->q) || !tma_readable(&params->k) || !tma_readable(&params->v)) return AOTK__FAMILY_ATTN_FWD;
  const int32_t window_right = params->causal == 1 ? 0 : params->window_right;
  const bool extras = params->softcap > 0.0f || params->alibi_slopes.data != NULL || params->dropout_p > 0.0f;
  /* The warp-specialized forward takes everything but dropout; its three-warpgroup form only the plain
   * forward without a mask, from WG3_MIN_SEQLEN_Q rows on. */
  const bool warp_specialized = params->dropout_p == 0.0f;
  const int last = params->q.rank - 1;
  const int64_t seqlen_q = varlen ? params->max_seqlen_q : params->q.shape[1];
  const bool wg3 = warp_specialized && !extras && params->window_left < 0 && window_right < 0 &&
                   seqlen_q >= WG3_MIN_SEQLEN_Q;
  const int candidates[3] = {wg3 ? AOTK__FAMILY_ATTN_FWD_HOPPER_WG3 : -1,
                             warp_specialized ? AOTK__FAMILY_ATTN_FWD_HOPPER : -1,
                             varlen ? -1 : AOTK__FAMILY_ATTN_FWD_TMA};
  for (int c = 0; c < 3; c++) {
    if (candidates[c] < 0) continue;
    int qk, v;
    compiled_dims(candidates[c], params->q.shape[last], params->v.shape[last], &qk, &v);
    for (int i = 0; i < aotk__kernel_count; i++) {
      const aotk__kernel_entry *e = &aotk__kernel_table[i];
      if (row_is_variant(e, candidates[c], 90, params->q.dtype, qk, v, 1, extras) && e->min_seqlen <= seqlen_q &&
          e->shared_bytes <= max_shared_bytes) {
        return candidates[c];
      }
    }
  }
  return AOTK__FAMILY_ATTN_FWD;
}

static bool expect_tma(const aotk_attn_params *params, int arch, bool from_ptx, int max_shared_bytes) {
  return expected_fwd_family(params, arch, from_ptx, max_shared_bytes) != AOTK__FAMILY_ATTN_FWD;
}

/* The problem's sizes as the kernels see them: dense, from q's and k's shapes; varlen, num_seqs
 * sequences of at most max_seqlen_q / max_seqlen_k rows. */
static bool params_varlen(const aotk_attn_params *params) { return params->cu_seqlens_q.data != NULL; }
static int64_t params_batch(const aotk_attn_params *params) {
  return params_varlen(params) ? params->cu_seqlens_q.shape[0] - 1 : params->q.shape[0];
}
static int64_t params_seqlen_q(const aotk_attn_params *params) {
  return params_varlen(params) ? params->max_seqlen_q : params->q.shape[1];
}
static int64_t params_seqlen_k(const aotk_attn_params *params) {
  return params_varlen(params) ? params->max_seqlen_k : params->k.shape[1];
}
static int64_t params_heads_q(const aotk_attn_params *params) { return params->q.shape[params->q.rank - 2]; }
static int64_t params_head_dim(const aotk_tensor *t) { return t->shape[t->rank - 1]; }

/* Whether the backward's Gluon passes cover the call (include/aotk.h, AOTK_FEATURE_TMA for
 * AOTK_OP_ATTN_BWD): on sm_90 cubins, dense or varlen (the packed tensors read as [1, total, heads * d]),
 * every tensor 16-byte aligned, q, k, v and dout readable by TMA, head dims exactly 64 or 128 (q/k and v
 * equal), and no dropout: any mask or window, sinks, and softcap and ALiBi (in the EXTRAS rows) are
 * theirs. */
static bool bwd_hopper_covers(const aotk_attn_params *params, int arch, bool from_ptx) {
  if (arch != 90 || from_ptx || params->q.rank != (params_varlen(params) ? 3 : 4)) return false;
  const aotk_tensor *all[] = {&params->q,    &params->k,  &params->v,  &params->out,
                              &params->dout, &params->dq, &params->dk, &params->dv};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (!tensor_aligned16(all[i])) return false;
  }
  if (!tma_readable(&params->q) || !tma_readable(&params->k) || !tma_readable(&params->v) ||
      !tma_readable(&params->dout)) {
    return false;
  }
  if (params->dropout_p != 0.0f) return false;
  const int64_t d = params_head_dim(&params->q);
  return params_head_dim(&params->v) == d && (d == 64 || d == 128);
}

/* Whether the Gluon backward passes run their EXTRAS rows: softcap or ALiBi (dropout never reaches them;
 * sinks enter only through the pre-pass's statistics). */
static int bwd_hopper_extras(const aotk_attn_params *params) {
  return params->softcap > 0.0f || params->alibi_slopes.data != NULL;
}

/* The Gluon dK/dV pass's row for the call: its EXTRAS variant where bwd_hopper_extras says, tuned by
 * seqlen_k (max_seqlen_k for varlen). */
static const aotk__kernel_entry *bwd_hopper_row(const aotk_attn_params *params) {
  const int64_t d = params_head_dim(&params->q);
  return expected_row(AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER, 90, params->q.dtype, d, d, 1, bwd_hopper_extras(params),
                      params_seqlen_k(params));
}

/* Whether the backward's dK/dV pass must be the warp-specialized Gluon kernel where the caller asks for
 * a deterministic backward: bwd_hopper_covers, and its row fitting the GPU's shared memory. */
static bool expect_bwd_hopper(const aotk_attn_params *params, int arch, bool from_ptx, int max_shared_bytes) {
  if (!bwd_hopper_covers(params, arch, from_ptx)) return false;
  const aotk__kernel_entry *row = bwd_hopper_row(params);
  return row != NULL && row->shared_bytes <= max_shared_bytes;
}

/* The non-deterministic backward's two rows (include/aotk.h, AOTK_FEATURE_NONDETERMINISTIC): the fused
 * pass (EXTRAS with softcap or ALiBi), tuned by seqlen_k, and the cast of its accumulator into dq, by
 * seqlen_q (for varlen the max_seqlen's), whose one variant serves every call. */
static const aotk__kernel_entry *fused_row(const aotk_attn_params *params) {
  const int64_t d = params_head_dim(&params->q);
  return expected_row(AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER, 90, params->q.dtype, d, d, 1, bwd_hopper_extras(params),
                      params_seqlen_k(params));
}
static const aotk__kernel_entry *convert_row(const aotk_attn_params *params) {
  const int64_t d = params_head_dim(&params->q);
  return expected_row(AOTK__FAMILY_ATTN_BWD_DQ_CONVERT, 90, params->q.dtype, d, d, 1, 0, params_seqlen_q(params));
}

/* Whether the backward must be the non-deterministic one (the fused pass and the cast instead of the
 * dK/dV and dQ passes): deterministic 0, the Gluon passes covering the call, batch (num_seqs) * heads_q
 * within the accumulator map's 32-bit count, and both rows fitting the GPU's shared memory. Where the
 * fused pass does not fit, the deterministic kernels run (expect_bwd_hopper says which dK/dV pass). */
static bool expect_bwd_fused(const aotk_attn_params *params, int arch, bool from_ptx, int max_shared_bytes) {
  if (params->deterministic != 0 || !bwd_hopper_covers(params, arch, from_ptx)) return false;
  if (params_batch(params) * params_heads_q(params) > INT32_MAX) return false;
  const aotk__kernel_entry *fused = fused_row(params), *convert = convert_row(params);
  return fused != NULL && convert != NULL && fused->shared_bytes <= max_shared_bytes &&
         convert->shared_bytes <= max_shared_bytes;
}

/* The workspace the call `params` needs on the fake GPU as installed: the accumulator's too where the
 * fused pass runs. */
static size_t expected_bwd_workspace_bytes(const aotk_attn_params *params, int arch, bool from_ptx, const problem *p) {
  const bool dsinks = params->dsinks.data != NULL;
  return expect_bwd_fused(params, arch, from_ptx, fake.max_shared_bytes) ? bwd_fused_workspace_bytes_for(p, dsinks)
                                                                         : bwd_workspace_bytes_for(p, dsinks);
}

/* The kernel (enum kernel_id) and aotk_query feature bits of a forward family. */
static int fwd_kernel_id(int family) {
  return family == AOTK__FAMILY_ATTN_FWD_HOPPER_WG3 ? KERNEL_ATTN_FWD_HOPPER_WG3
         : family == AOTK__FAMILY_ATTN_FWD_HOPPER   ? KERNEL_ATTN_FWD_HOPPER
         : family == AOTK__FAMILY_ATTN_FWD_TMA      ? KERNEL_ATTN_FWD_TMA
                                                    : KERNEL_ATTN_FWD;
}
static uint32_t fwd_family_features(int family) {
  return family_is_hopper_fwd(family)          ? AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED
         : family == AOTK__FAMILY_ATTN_FWD_TMA ? AOTK_FEATURE_TMA
                                               : 0;
}
/* The forward family a kernel name is of, by its catalog prefix, the longest that matches: each shorter
 * one is a prefix of the longer ("attn_fwd_hopper_" of "attn_fwd_hopper_wg3_", "attn_fwd_" of all). -1
 * for a name that is no forward's. */
static int fwd_family_of_name(const char *name) {
  static const struct {
    const char *prefix;
    int family;
  } prefixes[] = {{"attn_fwd_hopper_wg3_", AOTK__FAMILY_ATTN_FWD_HOPPER_WG3},
                  {"attn_fwd_hopper_", AOTK__FAMILY_ATTN_FWD_HOPPER},
                  {"attn_fwd_tma_", AOTK__FAMILY_ATTN_FWD_TMA},
                  {"attn_fwd_", AOTK__FAMILY_ATTN_FWD}};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
    if (strncmp(name, prefixes[i].prefix, strlen(prefixes[i].prefix)) == 0) return prefixes[i].family;
  }
  return -1;
}

/* t [batch, seqlen, heads, d] with the heads outermost after the batch ([batch, heads, seqlen, d] in
 * memory): still 16-byte aligned, but a token's heads are not contiguous, so TMA cannot read it as
 * [batch, seqlen, heads * d] and the pointer kernel runs. */
static void make_heads_outer(aotk_tensor *t) {
  t->strides[2] = t->shape[1] * t->shape[3];
  t->strides[1] = t->shape[3];
  t->strides[0] = t->shape[2] * t->strides[2];
}

/* q, k and v as views of one packed qkv tensor [batch, seqlen, 3, heads, d] at FAKE_Q (MHA,
 * seqlen_q == seqlen_k): a token stride of 3 * heads * d. */
static aotk_attn_params packed_qkv_params(problem p) {
  aotk_attn_params params = params_for(p);
  const int64_t token = 3 * p.heads_q * p.head_dim, part_bytes = 2 * p.heads_q * p.head_dim;
  aotk_tensor *parts[3] = {&params.q, &params.k, &params.v};
  for (int i = 0; i < 3; i++) {
    parts[i]->data = byte_offset(FAKE_Q, (uintptr_t)(i * part_bytes));
    parts[i]->strides[0] = p.seqlen_q * token, parts[i]->strides[1] = token, parts[i]->strides[2] = p.head_dim;
  }
  return params;
}

/* ---- statuses and versions ------------------------------------------------------------------ */

static void test_status_names_and_strings(void) {
  static const struct {
    aotk_status status;
    int value;
    const char *spelling;
    const char *text;
  } statuses[] = {
#define STATUS_ROW(name, value, text) {name, value, #name, text},
      AOTK_STATUS_LIST(STATUS_ROW)
#undef STATUS_ROW
  };
  enum { COUNT = sizeof statuses / sizeof statuses[0] };
  int largest = 0;
  for (int i = 0; i < COUNT; i++) {
    const char *name = aotk_status_name(statuses[i].status);
    const char *text = aotk_status_string(statuses[i].status);
    CHECK_MSG((int)statuses[i].status == statuses[i].value, "%s = %d, the list says %d", statuses[i].spelling,
              (int)statuses[i].status, statuses[i].value);
    CHECK_MSG(name != NULL && strcmp(name, statuses[i].spelling) == 0, "aotk_status_name(%d) = \"%s\", expected \"%s\"",
              statuses[i].value, name ? name : "(null)", statuses[i].spelling);
    CHECK_MSG(text != NULL && text[0] != '\0' && strcmp(text, statuses[i].text) == 0,
              "aotk_status_string(%s) = \"%s\"", statuses[i].spelling, text ? text : "(null)");
    for (int j = 0; j < i; j++) {
      CHECK_MSG(statuses[i].value != statuses[j].value, "%s and %s share the value %d", statuses[i].spelling,
                statuses[j].spelling, statuses[i].value);
      CHECK_MSG(strcmp(name, aotk_status_name(statuses[j].status)) != 0, "%s and %s share a name",
                statuses[i].spelling, statuses[j].spelling);
    }
    if (statuses[i].value > largest) largest = statuses[i].value;
  }
  CHECK_MSG(COUNT >= 26, "the list has %d statuses; the first release had 26, and none is ever removed", (int)COUNT);
  /* Explicit values, never renumbered. */
  CHECK(AOTK_OK == 0);
  CHECK(AOTK_ERROR_NULL_POINTER == 1);
  CHECK(AOTK_ERROR_STRUCT_SIZE == 2);
  CHECK(AOTK_ERROR_UNSUPPORTED_HEAD_DIM == 8);
  CHECK(AOTK_ERROR_SIZE_OVERFLOW == 14);
  CHECK(AOTK_ERROR_INVALID_VALUE == 15);
  CHECK(AOTK_ERROR_NO_DRIVER == 16);
  CHECK(AOTK_ERROR_UNSUPPORTED_ARCH == 19);
  CHECK(AOTK_ERROR_CUDA == 22);
  CHECK(AOTK_ERROR_INTERNAL == 25);

  const int unknown_values[] = {largest + 1, 1000, -1, INT32_MAX};
  for (size_t i = 0; i < sizeof unknown_values / sizeof unknown_values[0]; i++) {
    aotk_status unknown = (aotk_status)unknown_values[i];
    const char *name = aotk_status_name(unknown);
    const char *text = aotk_status_string(unknown);
    CHECK_MSG(name != NULL && strcmp(name, "AOTK_STATUS_UNKNOWN") == 0, "aotk_status_name(%d) = \"%s\"",
              unknown_values[i], name ? name : "(null)");
    CHECK_MSG(text != NULL && text[0] != '\0', "aotk_status_string(%d) is empty", unknown_values[i]);
  }
}

static void test_version(void) {
  CHECK(AOTK_VERSION_NUMBER == AOTK_VERSION_MAJOR * 10000 + AOTK_VERSION_MINOR * 100 + AOTK_VERSION_PATCH);
  CHECK_MSG(aotk_version_number() == AOTK_VERSION_NUMBER, "aotk_version_number() = %u, the header says %d",
            aotk_version_number(), AOTK_VERSION_NUMBER);
  char expected[32];
  snprintf(expected, sizeof expected, "%d.%d.%d", AOTK_VERSION_MAJOR, AOTK_VERSION_MINOR, AOTK_VERSION_PATCH);
  const char *version = aotk_version_string();
  CHECK_MSG(version != NULL && strcmp(version, expected) == 0, "aotk_version_string() = \"%s\", expected \"%s\"",
            version ? version : "(null)", expected);
}

/* ---- the last error ------------------------------------------------------------------------- */

static void test_last_error_cleared_by_success(void) {
  aotk_attn_params params = valid_params();
  params.q.data = NULL;
  CHECK(aotk_attn_fwd(&params, NULL) == AOTK_ERROR_NULL_POINTER);
  CHECK_MSG(message_mentions("q.data"), "message \"%s\" does not name q.data", aotk_last_error());
  aotk_build_info info = AOTK_BUILD_INFO_INIT;
  CHECK(aotk_get_build_info(&info) == AOTK_OK);
  CHECK_MSG(aotk_last_error() != NULL && aotk_last_error()[0] == '\0', "after a success: \"%s\"", aotk_last_error());
  CHECK(aotk_last_cuda_result() == 0);
}

typedef struct thread_record {
  char message_at_start[512];
  int cuda_result_at_start;
  aotk_status status;
  char message_after_failure[512];
  char message_after_success[512];
} thread_record;

static void *thread_fails_then_succeeds(void *argument) {
  thread_record *record = argument;
  snprintf(record->message_at_start, sizeof record->message_at_start, "%s", aotk_last_error());
  record->cuda_result_at_start = aotk_last_cuda_result();
  aotk_attn_params params = valid_params();
  params.struct_size = 0;
  record->status = aotk_attn_fwd(&params, NULL);
  snprintf(record->message_after_failure, sizeof record->message_after_failure, "%s", aotk_last_error());
  aotk_build_info info = AOTK_BUILD_INFO_INIT;
  aotk_get_build_info(&info);
  snprintf(record->message_after_success, sizeof record->message_after_success, "%s", aotk_last_error());
  return NULL;
}

static void test_last_error_is_per_thread(void) {
  /* This thread's failure: a driver failure, so that the CUresult is set too. */
  install_fake_gpu(90, SHARED_SM90);
  fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
  aotk_attn_params params = valid_params();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_ERROR_CUDA);
  char own_message[512];
  snprintf(own_message, sizeof own_message, "%s", aotk_last_error());
  CHECK_MSG(strstr(own_message, "cuLaunchKernel") != NULL, "message \"%s\"", own_message);
  CHECK(aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY);

  thread_record record;
  memset(&record, 0, sizeof record);
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, thread_fails_then_succeeds, &record) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK_MSG(record.message_at_start[0] == '\0', "a new thread starts with \"%s\"", record.message_at_start);
  CHECK(record.cuda_result_at_start == 0);
  CHECK(record.status == AOTK_ERROR_STRUCT_SIZE);
  CHECK_MSG(strstr(record.message_after_failure, "struct_size") != NULL, "the thread's message: \"%s\"",
            record.message_after_failure);
  CHECK(record.message_after_success[0] == '\0');
  /* Neither the thread's failure nor its success touched this thread's record. */
  CHECK_MSG(strcmp(aotk_last_error(), own_message) == 0, "this thread's message became \"%s\"", aotk_last_error());
  CHECK(aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY);
  uninstall_fake_gpu();
}

/* ---- validation ----------------------------------------------------------------------------- */

typedef struct bad_input {
  const char *what;
  void (*spoil)(aotk_attn_params *params); /* NULL: pass params = NULL */
  aotk_status expected;
  const char *mentions; /* in aotk_last_error() */
} bad_input;

static void set_struct_size_zero(aotk_attn_params *p) { p->struct_size = 0; }
/* The struct as release 0.1 defined it ends where 0.2's fields begin: the smallest size accepted. */
#define ATTN_PARAMS_0_1_BYTES offsetof(aotk_attn_params, cu_seqlens_q)
static void set_struct_size_short(aotk_attn_params *p) { p->struct_size = ATTN_PARAMS_0_1_BYTES - 1; }
static void set_struct_size_of_a_pointer(aotk_attn_params *p) { p->struct_size = sizeof(void *); }
static void set_struct_size_garbage(aotk_attn_params *p) { p->struct_size = (size_t)1 << 40; }
static void set_q_null(aotk_attn_params *p) { p->q.data = NULL; }
/* 16-byte aligned, 16 bytes below the end of the address space: q's span runs past it. */
static void set_q_at_the_top(aotk_attn_params *p) { p->q.data = (void *)(UINTPTR_MAX - 15); }
static void set_k_null(aotk_attn_params *p) { p->k.data = NULL; }
static void set_v_null(aotk_attn_params *p) { p->v.data = NULL; }
static void set_out_null(aotk_attn_params *p) { p->out.data = NULL; }
static void set_q_float32(aotk_attn_params *p) { p->q.dtype = AOTK_DTYPE_FLOAT32; }
static void set_q_dtype_zero(aotk_attn_params *p) { p->q.dtype = (aotk_dtype)0; }
static void set_q_dtype_garbage(aotk_attn_params *p) { p->q.dtype = (aotk_dtype)1234; }
static void set_k_dtype_garbage(aotk_attn_params *p) { p->k.dtype = (aotk_dtype)-7; }
static void set_k_float16(aotk_attn_params *p) { p->k.dtype = AOTK_DTYPE_FLOAT16; }
static void set_v_float16(aotk_attn_params *p) { p->v.dtype = AOTK_DTYPE_FLOAT16; }
static void set_out_float32(aotk_attn_params *p) { p->out.dtype = AOTK_DTYPE_FLOAT32; }
static void set_q_rank_3(aotk_attn_params *p) { p->q.rank = 3; }
static void set_q_rank_negative(aotk_attn_params *p) { p->q.rank = -1; }
static void set_k_rank_5(aotk_attn_params *p) { p->k.rank = 5; }
static void set_v_rank_beyond_max(aotk_attn_params *p) { p->v.rank = AOTK_TENSOR_MAX_RANK + 1; }
static void set_out_rank_0(aotk_attn_params *p) { p->out.rank = 0; }
static void set_k_batch(aotk_attn_params *p) { p->k.shape[0] = 3; }
static void set_v_batch(aotk_attn_params *p) { p->v.shape[0] = 1; }
static void set_v_seqlen(aotk_attn_params *p) { p->v.shape[1] = 131; }
static void set_v_heads(aotk_attn_params *p) { p->v.shape[2] = 4; }
static void set_out_batch(aotk_attn_params *p) { p->out.shape[0] = 3; }
static void set_out_seqlen(aotk_attn_params *p) { p->out.shape[1] = 99; }
static void set_out_heads(aotk_attn_params *p) { p->out.shape[2] = 16; }
static void set_k_head_dim(aotk_attn_params *p) { p->k.shape[3] = 128; }
static void set_v_head_dim(aotk_attn_params *p) { p->v.shape[3] = 128; }
static void set_out_head_dim(aotk_attn_params *p) { p->out.shape[3] = 128; }
static void set_q_last_stride_2(aotk_attn_params *p) { p->q.strides[3] = 2; }
static void set_v_last_stride_0(aotk_attn_params *p) { p->v.strides[3] = 0; }
static void set_lse_last_stride_2(aotk_attn_params *p) { p->lse.strides[2] = 2; }
static void set_k_stride_negative(aotk_attn_params *p) { p->k.strides[1] = -128; }
static void set_out_stride_negative(aotk_attn_params *p) { p->out.strides[0] = -1; }
static void set_q_odd_address(aotk_attn_params *p) { p->q.data = byte_offset(FAKE_Q, 1); }
static void set_out_odd_address(aotk_attn_params *p) { p->out.data = byte_offset(FAKE_OUT, 3); }
static void set_lse_misaligned(aotk_attn_params *p) { p->lse.data = byte_offset(FAKE_LSE, 2); }
static void set_heads_kv_3(aotk_attn_params *p) { p->k.shape[2] = p->v.shape[2] = 3; }
static void set_heads_kv_above_heads_q(aotk_attn_params *p) { p->k.shape[2] = p->v.shape[2] = 16; }
static void set_q_batch_zero(aotk_attn_params *p) { p->q.shape[0] = 0; }
static void set_q_heads_zero(aotk_attn_params *p) { p->q.shape[2] = 0; }
static void set_k_seqlen_negative(aotk_attn_params *p) { p->k.shape[1] = -5; }
static void set_out_head_dim_negative(aotk_attn_params *p) { p->out.shape[3] = -64; }
static void set_lse_seqlen_zero(aotk_attn_params *p) { p->lse.shape[2] = 0; }
static void set_q_offset_overflow(aotk_attn_params *p) {
  p->q.shape[0] = (int64_t)1 << 40;
  p->q.strides[0] = (int64_t)1 << 40;
}
static void set_k_stride_max(aotk_attn_params *p) { p->k.strides[0] = INT64_MAX; }
static void set_v_byte_overflow(aotk_attn_params *p) { p->v.strides[0] = (int64_t)1 << 62; } /* elements fit, bytes do not */
static void set_q_batch_span_by_stride(aotk_attn_params *p) { p->q.strides[1] = (int64_t)1 << 24; }
static void set_lse_batch_span_by_stride(aotk_attn_params *p) { p->lse.strides[1] = (int64_t)1 << 30; }
static void set_batch_span_by_size(aotk_attn_params *p) {
  problem shape = default_problem;
  shape.seqlen_q = (int64_t)1 << 22; /* 2^22 rows of 8 heads of 64: 2^31 elements per batch entry */
  *p = params_for(shape);
}
static void set_seqlen_q_beyond_int32(aotk_attn_params *p) {
  problem shape = default_problem;
  shape.seqlen_q = INT32_MAX;
  shape.heads_q = shape.heads_kv = 1;
  *p = params_for(shape);
}
static void set_seqlen_k_beyond_int32(aotk_attn_params *p) {
  p->k.shape[1] = p->v.shape[1] = INT32_MAX;
  p->k.strides[1] = p->v.strides[1] = 0; /* inputs may broadcast; keeps the byte span small */
}
static void set_batch_beyond_int32(aotk_attn_params *p) {
  problem shape = default_problem;
  shape.batch = (int64_t)1 << 33;
  *p = params_for(shape);
}
/* 2^28 sequences of 2 query blocks of 8 heads: 2^32 programs, each size well within int32. */
static void set_batch_beyond_grid(aotk_attn_params *p) {
  problem shape = default_problem;
  shape.batch = (int64_t)1 << 28;
  *p = params_for(shape);
}
static void set_causal_2(aotk_attn_params *p) { p->causal = 2; }
static void set_causal_negative(aotk_attn_params *p) { p->causal = -1; }
static void set_scale_negative(aotk_attn_params *p) { p->softmax_scale = -0.125f; }
static void set_scale_nan(aotk_attn_params *p) { p->softmax_scale = NAN; }
static void set_scale_infinite(aotk_attn_params *p) { p->softmax_scale = INFINITY; }
static void set_scale_negative_infinite(aotk_attn_params *p) { p->softmax_scale = -INFINITY; }
static void set_lse_bfloat16(aotk_attn_params *p) { p->lse.dtype = AOTK_DTYPE_BFLOAT16; }
static void set_lse_dtype_garbage(aotk_attn_params *p) { p->lse.dtype = (aotk_dtype)99; }
static void set_lse_rank_4(aotk_attn_params *p) { p->lse.rank = 4; }
static void set_lse_batch(aotk_attn_params *p) { p->lse.shape[0] = 3; }
static void set_lse_heads_kv(aotk_attn_params *p) { p->lse.shape[1] = p->k.shape[2]; }
static void set_lse_seqlen_k(aotk_attn_params *p) { p->lse.shape[2] = p->k.shape[1]; }
static void set_lse_like_q(aotk_attn_params *p) { /* [batch, seqlen_q, heads_q]: the layout of q, not of lse */
  p->lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, p->q.shape[0], p->q.shape[1], p->q.shape[2]);
}
static void set_out_seqlen_stride_zero(aotk_attn_params *p) { p->out.strides[1] = 0; }
static void set_out_batch_stride_zero(aotk_attn_params *p) { p->out.strides[0] = 0; }
static void set_lse_heads_stride_zero(aotk_attn_params *p) { p->lse.strides[1] = 0; }

/* ---- the arguments added in 0.2 ---- */

/* Head dims: any multiple of 8 from 8 to 256, q and k sharing one (head_dim_qk), v and out another
 * (head_dim_v). The spoilers keep the backward's tensors when the params have them. */
static void set_head_dims(aotk_attn_params *p, int64_t head_dim_qk, int64_t head_dim_v) {
  problem shape = default_problem;
  shape.head_dim = head_dim_qk;
  shape.head_dim_v = head_dim_v;
  *p = p->dout.data != NULL ? bwd_params_for(shape) : params_for(shape);
}
static void set_head_dim_84(aotk_attn_params *p) { set_head_dims(p, 84, 84); }
static void set_head_dim_4(aotk_attn_params *p) { set_head_dims(p, 4, 4); }
static void set_head_dim_264(aotk_attn_params *p) { set_head_dims(p, 264, 264); }
static void set_head_dim_512(aotk_attn_params *p) { set_head_dims(p, 512, 512); }
static void set_head_dim_v_20(aotk_attn_params *p) { set_head_dims(p, 64, 20); }
static void set_head_dim_v_264(aotk_attn_params *p) { set_head_dims(p, 128, 264); }
static void set_head_dim_qk_260(aotk_attn_params *p) { set_head_dims(p, 260, 128); }
static void set_k_head_dim_of_v(aotk_attn_params *p) { /* q 64, k 128, v and out 128: k must follow q */
  set_head_dims(p, 64, 128);
  p->k.shape[3] = 128;
  p->k.strides[2] = 128, p->k.strides[1] = p->k.shape[2] * 128, p->k.strides[0] = p->k.shape[1] * p->k.strides[1];
}
static void set_out_head_dim_of_qk(aotk_attn_params *p) { /* v 128, out 64 (q's): out must follow v */
  set_head_dims(p, 64, 128);
  p->out = aotk_tensor_4d(FAKE_OUT, p->q.dtype, p->q.shape[0], p->q.shape[1], p->q.shape[2], 64);
}

/* Windows and the causal alignment. */
static void set_window_left_minus_2(aotk_attn_params *p) { p->window_left = -2; }
static void set_window_left_min(aotk_attn_params *p) { p->window_left = INT32_MIN; }
static void set_window_right_minus_7(aotk_attn_params *p) { p->window_right = -7; }
static void set_causal_window_right_1(aotk_attn_params *p) { p->causal = 1, p->window_right = 1; }
static void set_causal_window_right_max(aotk_attn_params *p) { p->causal = 1, p->window_right = INT32_MAX; }
static void set_causal_align_2(aotk_attn_params *p) { p->causal = 1, p->causal_align = 2; }
static void set_causal_align_negative(aotk_attn_params *p) { p->causal_align = -1; }

/* softcap. */
static void set_softcap(aotk_attn_params *p) { p->softcap = 30.0f; }
static void set_softcap_negative(aotk_attn_params *p) { p->softcap = -30.0f; }
static void set_softcap_infinite(aotk_attn_params *p) { p->softcap = INFINITY; }
static void set_softcap_negative_infinite(aotk_attn_params *p) { p->softcap = -INFINITY; }
static void set_softcap_nan(aotk_attn_params *p) { p->softcap = NAN; }

/* ALiBi slopes: fp32 [heads_q] or [batch, heads_q]. */
static void set_alibi(aotk_attn_params *p) { p->alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 8); }
static void set_alibi_bfloat16(aotk_attn_params *p) { set_alibi(p), p->alibi_slopes.dtype = AOTK_DTYPE_BFLOAT16; }
static void set_alibi_heads_kv(aotk_attn_params *p) { set_alibi(p), p->alibi_slopes.shape[0] = 2; }
static void set_alibi_heads_plus_one(aotk_attn_params *p) { set_alibi(p), p->alibi_slopes.shape[0] = 9; }
static void set_alibi_size_zero(aotk_attn_params *p) { set_alibi(p), p->alibi_slopes.shape[0] = 0; }
static void set_alibi_stride_2(aotk_attn_params *p) { set_alibi(p), p->alibi_slopes.strides[0] = 2; }
static void set_alibi_misaligned(aotk_attn_params *p) { set_alibi(p), p->alibi_slopes.data = byte_offset(FAKE_ALIBI, 2); }
static void set_alibi_per_batch(aotk_attn_params *p) {
  p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 2, 8);
}
static void set_alibi_2d_batch(aotk_attn_params *p) {
  p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 3, 8);
}
static void set_alibi_2d_heads_kv(aotk_attn_params *p) {
  p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 2, 2);
}
static void set_alibi_2d_float16(aotk_attn_params *p) {
  p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT16, 2, 8);
}
static void set_alibi_2d_transposed(aotk_attn_params *p) { /* [heads_q, batch] */
  p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 8, 2);
}
static void set_alibi_rank_3(aotk_attn_params *p) {
  p->alibi_slopes = aotk_tensor_3d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 2, 1, 8);
}

/* Sinks: fp32 [heads_q]. */
static void set_sinks(aotk_attn_params *p) { p->sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 8); }
static void set_sinks_heads_kv(aotk_attn_params *p) { set_sinks(p), p->sinks.shape[0] = 2; }
static void set_sinks_heads_plus_one(aotk_attn_params *p) { set_sinks(p), p->sinks.shape[0] = 9; }
static void set_sinks_per_batch(aotk_attn_params *p) { /* a shape ALiBi allows, sinks do not */
  p->sinks = aotk_tensor_2d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 2, 8);
}
static void set_sinks_bfloat16(aotk_attn_params *p) { set_sinks(p), p->sinks.dtype = AOTK_DTYPE_BFLOAT16; }
static void set_sinks_misaligned(aotk_attn_params *p) { set_sinks(p), p->sinks.data = byte_offset(FAKE_SINKS, 1); }

/* Dropout: p in [0, 1), with an int64 [2] RNG state. */
static void set_dropout(aotk_attn_params *p) {
  p->dropout_p = 0.1f;
  p->rng_state = aotk_tensor_1d(FAKE_RNG_STATE, AOTK_DTYPE_INT64, 2);
}
static void set_dropout_negative(aotk_attn_params *p) { set_dropout(p), p->dropout_p = -0.1f; }
static void set_dropout_one(aotk_attn_params *p) { set_dropout(p), p->dropout_p = 1.0f; }
static void set_dropout_above_one(aotk_attn_params *p) { set_dropout(p), p->dropout_p = 1.5f; }
static void set_dropout_nan(aotk_attn_params *p) { set_dropout(p), p->dropout_p = NAN; }
static void set_dropout_infinite(aotk_attn_params *p) { set_dropout(p), p->dropout_p = INFINITY; }
static void set_dropout_no_rng_state(aotk_attn_params *p) { set_dropout(p), p->rng_state.data = NULL; }
static void set_rng_state_int32(aotk_attn_params *p) { set_dropout(p), p->rng_state.dtype = AOTK_DTYPE_INT32; }
static void set_rng_state_float32(aotk_attn_params *p) {
  set_dropout(p), p->rng_state = aotk_tensor_1d(FAKE_RNG_STATE, AOTK_DTYPE_FLOAT32, 4);
}
static void set_rng_state_one_element(aotk_attn_params *p) { set_dropout(p), p->rng_state.shape[0] = 1; }
static void set_rng_state_rank_2(aotk_attn_params *p) {
  set_dropout(p), p->rng_state = aotk_tensor_2d(FAKE_RNG_STATE, AOTK_DTYPE_INT64, 1, 2);
}
static void set_rng_state_misaligned(aotk_attn_params *p) {
  set_dropout(p), p->rng_state.data = byte_offset(FAKE_RNG_STATE, 4);
}
static void set_rng_state_stride_2(aotk_attn_params *p) { set_dropout(p), p->rng_state.strides[0] = 2; }

/* The dropout mask: uint8 [batch, heads_q, seqlen_q, seqlen_k], only with dropout. */
static aotk_tensor mask_for(const aotk_attn_params *p) {
  return aotk_tensor_4d(FAKE_MASK, AOTK_DTYPE_UINT8, params_batch(p), params_heads_q(p), params_seqlen_q(p),
                        params_seqlen_k(p));
}
static void set_mask(aotk_attn_params *p) { set_dropout(p), p->dropout_mask = mask_for(p); }
/* A one-byte mask element at the very last address: its span fits, but its end address wraps to 0. */
static void set_mask_at_the_last_byte(aotk_attn_params *p) {
  set_mask(p);
  p->dropout_mask.data = (void *)UINTPTR_MAX;
  for (int d = 0; d < 4; d++) p->dropout_mask.shape[d] = 1;
}
static void set_mask_without_dropout(aotk_attn_params *p) { set_mask(p), p->dropout_p = 0.0f; }
static void set_mask_without_anything(aotk_attn_params *p) {
  set_mask_without_dropout(p), p->rng_state.data = NULL;
}
static void set_mask_no_rng_state(aotk_attn_params *p) { set_mask(p), p->rng_state.data = NULL; }
static void set_mask_float16(aotk_attn_params *p) { set_mask(p), p->dropout_mask.dtype = AOTK_DTYPE_FLOAT16; }
static void set_mask_rank_3(aotk_attn_params *p) { set_mask(p), p->dropout_mask.rank = 3; }
static void set_mask_batch(aotk_attn_params *p) { set_mask(p), p->dropout_mask.shape[0] += 1; }
static void set_mask_heads_kv(aotk_attn_params *p) { set_mask(p), p->dropout_mask.shape[1] = 2; }
static void set_mask_seqlen_k_rows(aotk_attn_params *p) { set_mask(p), p->dropout_mask.shape[2] = 130; }
static void set_mask_seqlen_k_short(aotk_attn_params *p) { set_mask(p), p->dropout_mask.shape[3] -= 1; }
static void set_mask_heads_stride_zero(aotk_attn_params *p) { set_mask(p), p->dropout_mask.strides[1] = 0; }
static void set_mask_last_stride_2(aotk_attn_params *p) { set_mask(p), p->dropout_mask.strides[3] = 2; }
static void set_mask_like_q(aotk_attn_params *p) { /* [batch, seqlen_q, heads_q, seqlen_k]: heads and rows swapped */
  set_mask(p);
  p->dropout_mask = aotk_tensor_4d(FAKE_MASK, AOTK_DTYPE_UINT8, 2, 100, 8, 130);
}

/* The variable-length layout: each spoiler starts from the valid varlen form of the default problem
 * (make_varlen: 2 sequences, max_seqlen 100 / 130, totals 170 / 230). */
static void set_varlen_no_cu_seqlens_k(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_k.data = NULL; }
static void set_varlen_no_cu_seqlens_q(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_q.data = NULL; }
static void set_cu_seqlens_q_int64(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_q.dtype = AOTK_DTYPE_INT64; }
static void set_cu_seqlens_k_uint8(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_k.dtype = AOTK_DTYPE_UINT8; }
static void set_cu_seqlens_q_float32(aotk_attn_params *p) {
  make_varlen(p), p->cu_seqlens_q.dtype = AOTK_DTYPE_FLOAT32;
}
static void set_cu_seqlens_q_rank_2(aotk_attn_params *p) {
  make_varlen(p), p->cu_seqlens_q = aotk_tensor_2d(FAKE_CU_SEQLENS_Q, AOTK_DTYPE_INT32, 1, 3);
}
static void set_cu_seqlens_k_rank_0(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_k.rank = 0; }
static void set_cu_seqlens_q_one_offset(aotk_attn_params *p) {
  make_varlen(p), p->cu_seqlens_q.shape[0] = p->cu_seqlens_k.shape[0] = 1;
}
static void set_cu_seqlens_k_longer(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_k.shape[0] += 1; }
static void set_cu_seqlens_q_shorter(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_q.shape[0] -= 1; }
static void set_cu_seqlens_q_misaligned(aotk_attn_params *p) {
  make_varlen(p), p->cu_seqlens_q.data = byte_offset(FAKE_CU_SEQLENS_Q, 2);
}
static void set_cu_seqlens_k_stride_2(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_k.strides[0] = 2; }
static void set_max_seqlen_q_zero(aotk_attn_params *p) { make_varlen(p), p->max_seqlen_q = 0; }
static void set_max_seqlen_k_negative(aotk_attn_params *p) { make_varlen(p), p->max_seqlen_k = -1; }
static void set_max_seqlen_q_beyond_int32(aotk_attn_params *p) { make_varlen(p), p->max_seqlen_q = INT32_MAX; }
static void set_varlen_q_rank_4(aotk_attn_params *p) {
  make_varlen(p), p->q = aotk_tensor_4d(FAKE_Q, p->q.dtype, 1, VARLEN_TOTAL_Q, 8, 64);
}
static void set_varlen_k_rank_4(aotk_attn_params *p) {
  make_varlen(p), p->k = aotk_tensor_4d(FAKE_K, p->k.dtype, 1, VARLEN_TOTAL_K, 2, 64);
}
static void set_varlen_v_rank_4(aotk_attn_params *p) {
  make_varlen(p), p->v = aotk_tensor_4d(FAKE_V, p->v.dtype, 1, VARLEN_TOTAL_K, 2, 64);
}
static void set_varlen_out_rank_4(aotk_attn_params *p) {
  make_varlen(p), p->out = aotk_tensor_4d(FAKE_OUT, p->out.dtype, 1, VARLEN_TOTAL_Q, 8, 64);
}
static void set_varlen_lse_dense(aotk_attn_params *p) { /* [batch, heads_q, max_seqlen_q]: the dense layout */
  make_varlen(p), p->lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 2, 8, 100);
}
static void set_varlen_v_total(aotk_attn_params *p) { make_varlen(p), p->v.shape[0] = VARLEN_TOTAL_K - 1; }
static void set_varlen_out_total(aotk_attn_params *p) { make_varlen(p), p->out.shape[0] = VARLEN_TOTAL_Q + 1; }
static void set_varlen_lse_total(aotk_attn_params *p) { make_varlen(p), p->lse.shape[1] = VARLEN_TOTAL_K; }
static void set_varlen_lse_heads_kv(aotk_attn_params *p) { make_varlen(p), p->lse.shape[0] = 2; }
static void set_varlen_lse_like_q(aotk_attn_params *p) { /* [total_q, heads_q]: transposed */
  make_varlen(p), p->lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, VARLEN_TOTAL_Q, 8);
}
static void set_varlen_heads_kv_3(aotk_attn_params *p) { make_varlen(p), p->k.shape[1] = p->v.shape[1] = 3; }
static void set_varlen_v_heads(aotk_attn_params *p) { make_varlen(p), p->v.shape[1] = 4; }
static void set_varlen_out_heads(aotk_attn_params *p) { make_varlen(p), p->out.shape[1] = 4; }
static void set_varlen_k_head_dim(aotk_attn_params *p) { make_varlen(p), p->k.shape[2] = 128; }
static void set_varlen_out_head_dim(aotk_attn_params *p) { make_varlen(p), p->out.shape[2] = 32; }
static void set_varlen_q_last_stride_2(aotk_attn_params *p) { make_varlen(p), p->q.strides[2] = 2; }
static void set_varlen_alibi_sequences(aotk_attn_params *p) { /* [num_seqs + 1, heads_q] */
  make_varlen(p), p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 3, 8);
}
static void set_varlen_mask_totals(aotk_attn_params *p) { /* [num_seqs, heads_q, total_q, total_k] */
  make_varlen(p), set_mask(p);
  p->dropout_mask = aotk_tensor_4d(FAKE_MASK, AOTK_DTYPE_UINT8, 2, 8, VARLEN_TOTAL_Q, VARLEN_TOTAL_K);
}

static const bad_input bad_inputs[] = {
    {"params NULL", NULL, AOTK_ERROR_NULL_POINTER, "params"},
    {"struct_size 0", set_struct_size_zero, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size one byte short of release 0.1's", set_struct_size_short, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size of a pointer", set_struct_size_of_a_pointer, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size garbage", set_struct_size_garbage, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"q.data NULL", set_q_null, AOTK_ERROR_NULL_POINTER, "q.data"},
    {"q past the end of the address space", set_q_at_the_top, AOTK_ERROR_SIZE_OVERFLOW, "end of the address space"},
    {"k.data NULL", set_k_null, AOTK_ERROR_NULL_POINTER, "k.data"},
    {"v.data NULL", set_v_null, AOTK_ERROR_NULL_POINTER, "v.data"},
    {"out.data NULL", set_out_null, AOTK_ERROR_NULL_POINTER, "out.data"},
    {"q float32", set_q_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"q dtype 0", set_q_dtype_zero, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"q dtype garbage", set_q_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"k dtype garbage", set_k_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "k.dtype"},
    {"k float16, q bfloat16", set_k_float16, AOTK_ERROR_DTYPE_MISMATCH, "k.dtype"},
    {"v float16, q bfloat16", set_v_float16, AOTK_ERROR_DTYPE_MISMATCH, "v.dtype"},
    {"out float32, q bfloat16", set_out_float32, AOTK_ERROR_DTYPE_MISMATCH, "out.dtype"},
    {"q rank 3", set_q_rank_3, AOTK_ERROR_RANK, "q.rank"},
    {"q rank -1", set_q_rank_negative, AOTK_ERROR_RANK, "q.rank"},
    {"k rank 5", set_k_rank_5, AOTK_ERROR_RANK, "k.rank"},
    {"v rank beyond AOTK_TENSOR_MAX_RANK", set_v_rank_beyond_max, AOTK_ERROR_RANK, "v.rank"},
    {"out rank 0", set_out_rank_0, AOTK_ERROR_RANK, "out.rank"},
    {"k batch != q batch", set_k_batch, AOTK_ERROR_SHAPE_MISMATCH, "k.shape[0]"},
    {"v batch != k batch", set_v_batch, AOTK_ERROR_SHAPE_MISMATCH, "v.shape[0]"},
    {"v seqlen_k != k seqlen_k", set_v_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "v.shape[1]"},
    {"v heads != k heads", set_v_heads, AOTK_ERROR_SHAPE_MISMATCH, "v.shape[2]"},
    {"out batch != q batch", set_out_batch, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[0]"},
    {"out seqlen != q seqlen", set_out_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[1]"},
    {"out heads != q heads", set_out_heads, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[2]"},
    {"k head_dim != q head_dim", set_k_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "k.shape[3]"},
    {"v head_dim 128, out 64", set_v_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[3]"},
    {"out head_dim 128, v 64", set_out_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[3]"},
    {"q last stride 2", set_q_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "q.strides[3]"},
    {"v last stride 0", set_v_last_stride_0, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "v.strides[3]"},
    {"lse last stride 2", set_lse_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "lse.strides[2]"},
    {"k negative stride", set_k_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "k.strides[1]"},
    {"out negative stride", set_out_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "out.strides[0]"},
    {"q odd address", set_q_odd_address, AOTK_ERROR_MISALIGNED_POINTER, "q.data"},
    {"out odd address", set_out_odd_address, AOTK_ERROR_MISALIGNED_POINTER, "out.data"},
    {"lse 2-byte aligned", set_lse_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "lse.data"},
    {"heads_kv 3 of heads_q 8", set_heads_kv_3, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_q"},
    {"heads_kv 16 > heads_q 8", set_heads_kv_above_heads_q, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_q"},
    {"q batch 0", set_q_batch_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "q.shape[0]"},
    {"q heads 0", set_q_heads_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "q.shape[2]"},
    {"k seqlen -5", set_k_seqlen_negative, AOTK_ERROR_NONPOSITIVE_SIZE, "k.shape[1]"},
    {"out head_dim -64", set_out_head_dim_negative, AOTK_ERROR_NONPOSITIVE_SIZE, "out.shape[3]"},
    {"lse seqlen 0", set_lse_seqlen_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "lse.shape[2]"},
    {"q last offset overflows int64", set_q_offset_overflow, AOTK_ERROR_SIZE_OVERFLOW, "q:"},
    {"k stride INT64_MAX", set_k_stride_max, AOTK_ERROR_SIZE_OVERFLOW, "k:"},
    {"v byte span overflows int64", set_v_byte_overflow, AOTK_ERROR_SIZE_OVERFLOW, "v:"},
    {"q batch entry beyond 2^31 elements (stride)", set_q_batch_span_by_stride, AOTK_ERROR_SIZE_OVERFLOW, "q:"},
    {"q batch entry beyond 2^31 elements (size)", set_batch_span_by_size, AOTK_ERROR_SIZE_OVERFLOW, "q:"},
    {"lse batch entry beyond 2^31 elements", set_lse_batch_span_by_stride, AOTK_ERROR_SIZE_OVERFLOW, "lse:"},
    {"seqlen_q beyond int32", set_seqlen_q_beyond_int32, AOTK_ERROR_SIZE_OVERFLOW, "seqlen_q"},
    {"seqlen_k beyond int32", set_seqlen_k_beyond_int32, AOTK_ERROR_SIZE_OVERFLOW, "seqlen_k"},
    {"batch beyond int32", set_batch_beyond_int32, AOTK_ERROR_SIZE_OVERFLOW, "batch"},
    {"batch * heads_q * query blocks beyond the grid", set_batch_beyond_grid, AOTK_ERROR_SIZE_OVERFLOW, "programs"},
    {"causal 2", set_causal_2, AOTK_ERROR_INVALID_VALUE, "causal"},
    {"causal -1", set_causal_negative, AOTK_ERROR_INVALID_VALUE, "causal"},
    {"softmax_scale negative", set_scale_negative, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale NaN", set_scale_nan, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale +inf", set_scale_infinite, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale -inf", set_scale_negative_infinite, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"lse bfloat16", set_lse_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"lse dtype garbage", set_lse_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"lse rank 4", set_lse_rank_4, AOTK_ERROR_RANK, "lse.rank"},
    {"lse batch != q batch", set_lse_batch, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"lse heads = heads_kv", set_lse_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"lse seqlen = seqlen_k", set_lse_seqlen_k, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[2]"},
    {"lse in q's layout", set_lse_like_q, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"out seqlen stride 0", set_out_seqlen_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[1]"},
    {"out batch stride 0", set_out_batch_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[0]"},
    {"lse heads stride 0", set_lse_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "lse.strides[1]"},
    /* Head dims. */
    {"head_dim 84 (not a multiple of 8)", set_head_dim_84, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 84"},
    {"head_dim 4", set_head_dim_4, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 4"},
    {"head_dim 264", set_head_dim_264, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 264"},
    {"head_dim 512", set_head_dim_512, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 512"},
    {"head_dim_v 20 (not a multiple of 8)", set_head_dim_v_20, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v = 20"},
    {"head_dim_v 264", set_head_dim_v_264, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v = 264"},
    {"head_dim_qk 260, head_dim_v 128", set_head_dim_qk_260, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 260"},
    {"k head_dim 128 of q 64 (v 128)", set_k_head_dim_of_v, AOTK_ERROR_HEAD_DIM_MISMATCH, "k.shape[3]"},
    {"out head_dim 64 of v 128 (q 64)", set_out_head_dim_of_qk, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[3]"},
    /* Windows and alignment. */
    {"window_left -2", set_window_left_minus_2, AOTK_ERROR_INVALID_VALUE, "window_left = -2"},
    {"window_left INT32_MIN", set_window_left_min, AOTK_ERROR_INVALID_VALUE, "window_left"},
    {"window_right -7", set_window_right_minus_7, AOTK_ERROR_INVALID_VALUE, "window_right = -7"},
    {"causal with window_right 1", set_causal_window_right_1, AOTK_ERROR_INVALID_VALUE, "window_right = 1"},
    {"causal with window_right INT32_MAX", set_causal_window_right_max, AOTK_ERROR_INVALID_VALUE, "window_right"},
    {"causal_align 2", set_causal_align_2, AOTK_ERROR_INVALID_VALUE, "causal_align = 2"},
    {"causal_align -1", set_causal_align_negative, AOTK_ERROR_INVALID_VALUE, "causal_align = -1"},
    /* softcap. */
    {"softcap negative", set_softcap_negative, AOTK_ERROR_INVALID_VALUE, "softcap"},
    {"softcap +inf", set_softcap_infinite, AOTK_ERROR_INVALID_VALUE, "softcap"},
    {"softcap -inf", set_softcap_negative_infinite, AOTK_ERROR_INVALID_VALUE, "softcap"},
    {"softcap NaN", set_softcap_nan, AOTK_ERROR_INVALID_VALUE, "softcap"},
    /* ALiBi. */
    {"alibi_slopes bfloat16", set_alibi_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "alibi_slopes.dtype"},
    {"alibi_slopes [heads_kv]", set_alibi_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[0]"},
    {"alibi_slopes [heads_q + 1]", set_alibi_heads_plus_one, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[0]"},
    {"alibi_slopes [0]", set_alibi_size_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "alibi_slopes.shape[0]"},
    {"alibi_slopes stride 2", set_alibi_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "alibi_slopes.strides[0]"},
    {"alibi_slopes 2-byte aligned", set_alibi_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "alibi_slopes.data"},
    {"alibi_slopes [batch + 1, heads_q]", set_alibi_2d_batch, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[0]"},
    {"alibi_slopes [batch, heads_kv]", set_alibi_2d_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[1]"},
    {"alibi_slopes [heads_q, batch]", set_alibi_2d_transposed, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[0]"},
    {"alibi_slopes [batch, heads_q] float16", set_alibi_2d_float16, AOTK_ERROR_UNSUPPORTED_DTYPE, "alibi_slopes.dtype"},
    {"alibi_slopes rank 3", set_alibi_rank_3, AOTK_ERROR_RANK, "alibi_slopes.rank"},
    /* Sinks. */
    {"sinks [heads_kv]", set_sinks_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "sinks.shape[0]"},
    {"sinks [heads_q + 1]", set_sinks_heads_plus_one, AOTK_ERROR_SHAPE_MISMATCH, "sinks.shape[0]"},
    {"sinks [batch, heads_q]", set_sinks_per_batch, AOTK_ERROR_RANK, "sinks.rank"},
    {"sinks bfloat16", set_sinks_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "sinks.dtype"},
    {"sinks odd address", set_sinks_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "sinks.data"},
    /* Dropout. */
    {"dropout_p -0.1", set_dropout_negative, AOTK_ERROR_INVALID_VALUE, "dropout_p"},
    {"dropout_p 1", set_dropout_one, AOTK_ERROR_INVALID_VALUE, "dropout_p"},
    {"dropout_p 1.5", set_dropout_above_one, AOTK_ERROR_INVALID_VALUE, "dropout_p"},
    {"dropout_p NaN", set_dropout_nan, AOTK_ERROR_INVALID_VALUE, "dropout_p"},
    {"dropout_p +inf", set_dropout_infinite, AOTK_ERROR_INVALID_VALUE, "dropout_p"},
    {"dropout without rng_state", set_dropout_no_rng_state, AOTK_ERROR_NULL_POINTER, "rng_state"},
    {"rng_state int32", set_rng_state_int32, AOTK_ERROR_UNSUPPORTED_DTYPE, "rng_state"},
    {"rng_state float32 [4]", set_rng_state_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "rng_state"},
    {"rng_state int64 [1]", set_rng_state_one_element, AOTK_ERROR_SHAPE_MISMATCH, "rng_state"},
    {"rng_state rank 2", set_rng_state_rank_2, AOTK_ERROR_RANK, "rng_state.rank"},
    {"rng_state 4-byte aligned", set_rng_state_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "rng_state.data"},
    {"rng_state stride 2", set_rng_state_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "rng_state.strides[0]"},
    /* The dropout mask. */
    {"dropout_mask with dropout_p 0", set_mask_without_dropout, AOTK_ERROR_INVALID_VALUE, "dropout_mask"},
    {"dropout_mask with dropout_p 0, no rng_state", set_mask_without_anything, AOTK_ERROR_INVALID_VALUE, "dropout_mask"},
    {"dropout_mask without rng_state", set_mask_no_rng_state, AOTK_ERROR_NULL_POINTER, "rng_state"},
    {"dropout_mask ending at the end of the address space", set_mask_at_the_last_byte, AOTK_ERROR_SIZE_OVERFLOW,
     "end of the address space"},
    {"dropout_mask float16", set_mask_float16, AOTK_ERROR_UNSUPPORTED_DTYPE, "dropout_mask.dtype"},
    {"dropout_mask rank 3", set_mask_rank_3, AOTK_ERROR_RANK, "dropout_mask.rank"},
    {"dropout_mask batch + 1", set_mask_batch, AOTK_ERROR_SHAPE_MISMATCH, "dropout_mask.shape[0]"},
    {"dropout_mask heads_kv", set_mask_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "dropout_mask.shape[1]"},
    {"dropout_mask seqlen_k rows", set_mask_seqlen_k_rows, AOTK_ERROR_SHAPE_MISMATCH, "dropout_mask.shape[2]"},
    {"dropout_mask seqlen_k - 1 columns", set_mask_seqlen_k_short, AOTK_ERROR_SHAPE_MISMATCH, "dropout_mask.shape[3]"},
    {"dropout_mask in q's layout", set_mask_like_q, AOTK_ERROR_SHAPE_MISMATCH, "dropout_mask.shape[1]"},
    {"dropout_mask heads stride 0", set_mask_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "dropout_mask.strides[1]"},
    {"dropout_mask last stride 2", set_mask_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "dropout_mask.strides[3]"},
    /* The variable-length layout. */
    {"varlen: cu_seqlens_k missing", set_varlen_no_cu_seqlens_k, AOTK_ERROR_NULL_POINTER, "cu_seqlens_k.data"},
    {"varlen: cu_seqlens_q missing", set_varlen_no_cu_seqlens_q, AOTK_ERROR_NULL_POINTER, "cu_seqlens_q.data"},
    {"varlen: cu_seqlens_q int64", set_cu_seqlens_q_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_q.dtype"},
    {"varlen: cu_seqlens_q float32", set_cu_seqlens_q_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_q.dtype"},
    {"varlen: cu_seqlens_k uint8", set_cu_seqlens_k_uint8, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_k.dtype"},
    {"varlen: cu_seqlens_q rank 2", set_cu_seqlens_q_rank_2, AOTK_ERROR_RANK, "cu_seqlens_q.rank"},
    {"varlen: cu_seqlens_k rank 0", set_cu_seqlens_k_rank_0, AOTK_ERROR_RANK, "cu_seqlens_k.rank"},
    {"varlen: cu_seqlens of one offset", set_cu_seqlens_q_one_offset, AOTK_ERROR_NONPOSITIVE_SIZE, "cu_seqlens_q.shape[0]"},
    {"varlen: cu_seqlens_k one longer", set_cu_seqlens_k_longer, AOTK_ERROR_SHAPE_MISMATCH, "cu_seqlens_k.shape[0]"},
    {"varlen: cu_seqlens_q one shorter", set_cu_seqlens_q_shorter, AOTK_ERROR_SHAPE_MISMATCH, "cu_seqlens_q.shape[0]"},
    {"varlen: cu_seqlens_q 2-byte aligned", set_cu_seqlens_q_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "cu_seqlens_q.data"},
    {"varlen: cu_seqlens_k stride 2", set_cu_seqlens_k_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "cu_seqlens_k.strides[0]"},
    {"varlen: max_seqlen_q 0", set_max_seqlen_q_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_q = 0"},
    {"varlen: max_seqlen_k -1", set_max_seqlen_k_negative, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_k = -1"},
    {"varlen: max_seqlen_q INT32_MAX", set_max_seqlen_q_beyond_int32, AOTK_ERROR_SIZE_OVERFLOW, "seqlen_q"},
    {"varlen: q rank 4", set_varlen_q_rank_4, AOTK_ERROR_RANK, "q.rank"},
    {"varlen: k rank 4", set_varlen_k_rank_4, AOTK_ERROR_RANK, "k.rank"},
    {"varlen: v rank 4", set_varlen_v_rank_4, AOTK_ERROR_RANK, "v.rank"},
    {"varlen: out rank 4", set_varlen_out_rank_4, AOTK_ERROR_RANK, "out.rank"},
    {"varlen: lse in the dense layout", set_varlen_lse_dense, AOTK_ERROR_RANK, "lse.rank"},
    {"varlen: v total != k total", set_varlen_v_total, AOTK_ERROR_SHAPE_MISMATCH, "v.shape[0]"},
    {"varlen: out total != q total", set_varlen_out_total, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[0]"},
    {"varlen: lse total = total_k", set_varlen_lse_total, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"varlen: lse heads = heads_kv", set_varlen_lse_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"varlen: lse [total_q, heads_q]", set_varlen_lse_like_q, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"varlen: heads_kv 3 of heads_q 8", set_varlen_heads_kv_3, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_q"},
    {"varlen: v heads != k heads", set_varlen_v_heads, AOTK_ERROR_SHAPE_MISMATCH, "v.shape[1]"},
    {"varlen: out heads != q heads", set_varlen_out_heads, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[1]"},
    {"varlen: k head_dim != q head_dim", set_varlen_k_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "k.shape[2]"},
    {"varlen: out head_dim != v head_dim", set_varlen_out_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[2]"},
    {"varlen: q last stride 2", set_varlen_q_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "q.strides[2]"},
    {"varlen: alibi_slopes [num_seqs + 1, heads_q]", set_varlen_alibi_sequences, AOTK_ERROR_SHAPE_MISMATCH,
     "alibi_slopes.shape[0]"},
    {"varlen: dropout_mask over the totals", set_varlen_mask_totals, AOTK_ERROR_SHAPE_MISMATCH, "dropout_mask.shape[2]"},
};

/* Runs one bad input through the call `op` names and through aotk_query(op) with the recording fake
 * installed (as a working sm_90 GPU, so a bad input that slipped through would reach it): both must
 * refuse it with the expected status and a message naming the argument, call no driver function, and
 * leave the caller's params and the query's info untouched. The spoiler applies to the op's valid
 * params (the backward's carry dout, dq, dk and dv). */
static void check_bad_input_op(const bad_input *c, aotk_op op) {
  const char *function = op_function(op);
  aotk_attn_params params = op == AOTK_OP_ATTN_FWD ? valid_params() : valid_bwd_params();
  if (c->spoil != NULL) c->spoil(&params);
  aotk_attn_params before = params;
  const aotk_attn_params *argument = c->spoil != NULL ? &params : NULL;

  reset_calls();
  aotk_status status = run_op(op, argument);
  CHECK_MSG(status == c->expected, "%s: %s gave %s (%s), expected %s", c->what, function, aotk_status_name(status),
            aotk_last_error(), aotk_status_name(c->expected));
  CHECK_MSG(message_mentions(c->mentions), "%s: %s's message \"%s\" does not mention \"%s\"", c->what, function,
            aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: %s reached the driver (%s)", c->what, function, called_functions());
  CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 0, "%s: %s launched", c->what, function);
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: %s changed the caller's params", c->what, function);

  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status query_status = aotk_query(op, argument, &info);
  CHECK_MSG(query_status == status, "%s: aotk_query(op %d) gave %s, %s %s", c->what, (int)op,
            aotk_status_name(query_status), function, aotk_status_name(status));
  CHECK_MSG(message_mentions(c->mentions), "%s: aotk_query(op %d)'s message \"%s\" does not mention \"%s\"", c->what,
            (int)op, aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: aotk_query(op %d) reached the driver (%s)", c->what, (int)op, called_functions());
  CHECK_MSG(info_untouched(&info), "%s: aotk_query(op %d) wrote *info on failure", c->what, (int)op);
  bool name_untouched = true;
  for (size_t i = 0; i < sizeof info.kernel_name; i++) {
    name_untouched = name_untouched && (unsigned char)info.kernel_name[i] == POISON;
  }
  CHECK_MSG(name_untouched, "%s: aotk_query(op %d) wrote kernel_name on failure", c->what, (int)op);
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: aotk_query changed the caller's params", c->what);
}

static void check_bad_input(const bad_input *c) { check_bad_input_op(c, AOTK_OP_ATTN_FWD); }

static void test_validation_rejects_bad_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  /* The base case is valid, so each failure below is due to its one change. */
  aotk_attn_params params = valid_params();
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK_MSG(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK, "the base case fails: %s", aotk_last_error());
  /* So are the bases the 0.2 cases start from: the varlen layout, a mask with dropout, ALiBi, sinks. */
  void (*const bases[])(aotk_attn_params *) = {make_varlen, set_mask, set_alibi, set_alibi_per_batch, set_sinks};
  for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
    params = valid_params();
    bases[i](&params);
    aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
    CHECK_MSG(status == AOTK_OK, "base %zu fails: %s (%s)", i, aotk_status_name(status), aotk_last_error());
  }
  for (size_t i = 0; i < sizeof bad_inputs / sizeof bad_inputs[0]; i++) check_bad_input(&bad_inputs[i]);
  printf("    %zu bad inputs\n", sizeof bad_inputs / sizeof bad_inputs[0]);
  uninstall_fake_gpu();
}

/* A sequence stride so large that the 257 rows the span check counts (seqlen_q 2 plus the 256 rows a
 * block may address past the end) wrap int64 to a small number: 257 * 71777214294589696 = 2^64 + 256.
 * The tensor's own last offset (1 stride) fits, so only the batch-span check can refuse it, and the
 * stride does not fit the kernel's int32 parameter: launching would address row 1 at a truncated
 * offset. */
static void set_sequence_stride_wrapping_span(aotk_attn_params *p) {
  problem shape = default_problem;
  shape.seqlen_q = 2;
  *p = params_for(shape);
  p->q.strides[1] = 71777214294589696;
}
static void set_out_sequence_stride_wrapping_span(aotk_attn_params *p) {
  set_sequence_stride_wrapping_span(p);
  p->q.strides[1] = p->out.strides[1];
  p->out.strides[1] = 71777214294589696;
}
/* The grid's program count, ceil(seqlen_q / 64) * batch * heads_q = 5 * (2^31 - 1) * 2^30, overflows
 * int64 while each size fits in int32 and every tensor is valid on its own: q, k and v broadcast (zero
 * strides), out's strides overlap but are non-zero, and one batch entry of out spans under 2^31. */
static void set_batch_times_heads_overflow(aotk_attn_params *p) {
  const int64_t batch = INT32_MAX, seqlen_q = 257, heads_q = (int64_t)1 << 30;
  aotk_tensor q = {FAKE_Q, AOTK_DTYPE_BFLOAT16, 4, {batch, seqlen_q, heads_q, 64}, {0, 0, 0, 1}};
  aotk_tensor kv = {FAKE_K, AOTK_DTYPE_BFLOAT16, 4, {batch, 1, 1, 64}, {0, 0, 0, 1}};
  aotk_tensor out = {FAKE_OUT, AOTK_DTYPE_BFLOAT16, 4, {batch, seqlen_q, heads_q, 64}, {1, 1, 1, 1}};
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = q;
  params.k = kv;
  params.v = kv;
  params.v.data = FAKE_V;
  params.out = out;
  *p = params;
}

/* Inputs whose rejection depends on overflow arithmetic in the span and grid checks. Kept apart from
 * the table above so that a failure here points at the arithmetic; run under UBSan as well, where a
 * signed overflow in the check is reported even when the status comes out right. */
static const bad_input overflowing_inputs[] = {
    {"q sequence stride whose block span wraps int64", set_sequence_stride_wrapping_span, AOTK_ERROR_SIZE_OVERFLOW,
     "q:"},
    {"out sequence stride whose block span wraps int64", set_out_sequence_stride_wrapping_span,
     AOTK_ERROR_SIZE_OVERFLOW, "out:"},
    {"blocks * batch * heads_q overflows int64", set_batch_times_heads_overflow, AOTK_ERROR_SIZE_OVERFLOW, "programs"},
};

static void test_validation_span_checks_do_not_wrap(void) {
  install_fake_gpu(90, SHARED_SM90);
  for (size_t i = 0; i < sizeof overflowing_inputs / sizeof overflowing_inputs[0]; i++) {
    check_bad_input(&overflowing_inputs[i]);
  }
  uninstall_fake_gpu();
}

/* Inputs at the edge of what is allowed, which validation must accept. */
static void test_validation_accepts_edge_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  struct {
    const char *what;
    aotk_attn_params params;
  } cases[8];
  int count = 0;

  cases[count].what = "no lse, its other fields garbage";
  cases[count].params = valid_params();
  memset(&cases[count].params.lse, 0xEE, sizeof cases[count].params.lse);
  cases[count].params.lse.data = NULL;
  count++;

  cases[count].what = "out stride 0 on dimensions of size 1";
  problem single = default_problem;
  single.batch = 1;
  single.heads_q = single.heads_kv = 1;
  cases[count].params = params_for(single);
  cases[count].params.out.strides[0] = cases[count].params.out.strides[2] = 0;
  cases[count].params.lse.strides[0] = cases[count].params.lse.strides[1] = 0;
  count++;

  cases[count].what = "k and v broadcast over the batch (stride 0)";
  cases[count].params = valid_params();
  cases[count].params.k.strides[0] = cases[count].params.v.strides[0] = 0;
  count++;

  cases[count].what = "MQA (heads_kv 1), causal, explicit scale";
  problem mqa = default_problem;
  mqa.heads_kv = 1;
  cases[count].params = params_for(mqa);
  cases[count].params.causal = 1;
  cases[count].params.softmax_scale = 0.3f;
  count++;

  cases[count].what = "softmax_scale -0.0 (zero: the default)";
  cases[count].params = valid_params();
  cases[count].params.softmax_scale = -0.0f;
  count++;

  cases[count].what = "struct_size of a newer, larger struct";
  cases[count].params = valid_params();
  cases[count].params.struct_size = sizeof(aotk_attn_params) + 64;
  count++;

  for (int i = 0; i < count; i++) {
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &cases[i].params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    status = aotk_attn_fwd(&cases[i].params, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_fwd %s (%s)", cases[i].what, aotk_status_name(status),
              aotk_last_error());
  }
  uninstall_fake_gpu();
}

/* lse is [batch, heads_q, seqlen_q]: the rows a block may address past the end run along its last
 * dimension, not along heads. seqlen_q 2^23 with one head spans 2^23 lse elements (and 2^29 of q),
 * well under the documented 2^31 per batch entry, so the call must be accepted. */
static void test_validation_lse_span_follows_its_layout(void) {
  install_fake_gpu(90, SHARED_SM90);
  problem long_sequence = {AOTK_DTYPE_FLOAT16, 1, (int64_t)1 << 23, 64, 1, 1, 64, true, 0};
  aotk_attn_params params = params_for(long_sequence);
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
  CHECK_MSG(status == AOTK_OK, "aotk_query: %s (%s)", aotk_status_name(status), aotk_last_error());
  status = aotk_attn_fwd(&params, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "aotk_attn_fwd: %s (%s)", aotk_status_name(status), aotk_last_error());
  /* Without lse the same problem is accepted: only lse's span is miscounted. */
  params.lse.data = NULL;
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
  uninstall_fake_gpu();
}

/* ---- the backward's validation -------------------------------------------------------------- */

/* The same checks on each of dout, dq, dk and dv: each must be like its counterpart (out, q, k, v) in
 * dtype and shape, and a valid tensor on its own. Shape changes leave the strides contiguous for the
 * old shape: the tensor stays valid on its own, so only the comparison can refuse it. */
#define BWD_TENSOR_SPOILERS(t)                                                                   \
  static void set_##t##_null(aotk_attn_params *p) { p->t.data = NULL; }                          \
  static void set_##t##_float16(aotk_attn_params *p) { p->t.dtype = AOTK_DTYPE_FLOAT16; }        \
  static void set_##t##_float32(aotk_attn_params *p) { p->t.dtype = AOTK_DTYPE_FLOAT32; }        \
  static void set_##t##_dtype_garbage(aotk_attn_params *p) { p->t.dtype = (aotk_dtype)77; }      \
  static void set_##t##_rank_3(aotk_attn_params *p) { p->t.rank = 3; }                           \
  static void set_##t##_rank_5(aotk_attn_params *p) { p->t.rank = 5; }                           \
  static void set_##t##_batch(aotk_attn_params *p) { p->t.shape[0] += 1; }                       \
  static void set_##t##_seqlen(aotk_attn_params *p) { p->t.shape[1] -= 1; }                      \
  static void set_##t##_heads(aotk_attn_params *p) { p->t.shape[2] *= 2; }                       \
  static void set_##t##_head_dim(aotk_attn_params *p) { p->t.shape[3] = 128; }                   \
  static void set_##t##_seqlen_zero(aotk_attn_params *p) { p->t.shape[1] = 0; }                  \
  static void set_##t##_last_stride_2(aotk_attn_params *p) { p->t.strides[3] = 2; }              \
  static void set_##t##_last_stride_0(aotk_attn_params *p) { p->t.strides[3] = 0; }              \
  static void set_##t##_stride_negative(aotk_attn_params *p) { p->t.strides[2] = -64; }          \
  static void set_##t##_odd_address(aotk_attn_params *p) { p->t.data = byte_offset(p->t.data, 1); } \
  static void set_##t##_batch_span(aotk_attn_params *p) { p->t.strides[1] = (int64_t)1 << 24; }
BWD_TENSOR_SPOILERS(dout)
BWD_TENSOR_SPOILERS(dq)
BWD_TENSOR_SPOILERS(dk)
BWD_TENSOR_SPOILERS(dv)
#undef BWD_TENSOR_SPOILERS

#define BWD_TENSOR_CASES(t)                                                                                    \
  {#t ".data NULL", set_##t##_null, AOTK_ERROR_NULL_POINTER, #t ".data"},                                       \
      {#t " float16, q bfloat16", set_##t##_float16, AOTK_ERROR_DTYPE_MISMATCH, #t ".dtype"},                   \
      {#t " float32, q bfloat16", set_##t##_float32, AOTK_ERROR_DTYPE_MISMATCH, #t ".dtype"},                   \
      {#t " dtype garbage", set_##t##_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, #t ".dtype"},                \
      {#t " rank 3", set_##t##_rank_3, AOTK_ERROR_RANK, #t ".rank"},                                            \
      {#t " rank 5", set_##t##_rank_5, AOTK_ERROR_RANK, #t ".rank"},                                            \
      {#t " batch one more", set_##t##_batch, AOTK_ERROR_SHAPE_MISMATCH, #t ".shape[0]"},                       \
      {#t " seqlen one less", set_##t##_seqlen, AOTK_ERROR_SHAPE_MISMATCH, #t ".shape[1]"},                     \
      {#t " heads doubled", set_##t##_heads, AOTK_ERROR_SHAPE_MISMATCH, #t ".shape[2]"},                        \
      {#t " head_dim 128 of 64", set_##t##_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, #t ".shape[3]"},             \
      {#t " seqlen 0", set_##t##_seqlen_zero, AOTK_ERROR_NONPOSITIVE_SIZE, #t ".shape[1]"},                     \
      {#t " last stride 2", set_##t##_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, #t ".strides[3]"},      \
      {#t " last stride 0", set_##t##_last_stride_0, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, #t ".strides[3]"},      \
      {#t " negative head stride", set_##t##_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, #t ".strides[2]"},    \
      {#t " odd address", set_##t##_odd_address, AOTK_ERROR_MISALIGNED_POINTER, #t ".data"},                    \
      {#t " batch entry beyond 2^31 elements", set_##t##_batch_span, AOTK_ERROR_SIZE_OVERFLOW, #t ":"}

/* Outputs: a zero stride on a dimension longer than 1 would make programs overwrite each other. */
#define BWD_OUTPUT_STRIDE_SPOILERS(t)                                                  \
  static void set_##t##_batch_stride_zero(aotk_attn_params *p) { p->t.strides[0] = 0; } \
  static void set_##t##_seqlen_stride_zero(aotk_attn_params *p) { p->t.strides[1] = 0; } \
  static void set_##t##_heads_stride_zero(aotk_attn_params *p) { p->t.strides[2] = 0; }
BWD_OUTPUT_STRIDE_SPOILERS(dq)
BWD_OUTPUT_STRIDE_SPOILERS(dk)
BWD_OUTPUT_STRIDE_SPOILERS(dv)
#undef BWD_OUTPUT_STRIDE_SPOILERS

#define BWD_OUTPUT_STRIDE_CASES(t)                                                                          \
  {#t " batch stride 0", set_##t##_batch_stride_zero, AOTK_ERROR_INVALID_VALUE, #t ".strides[0]"},           \
      {#t " seqlen stride 0", set_##t##_seqlen_stride_zero, AOTK_ERROR_INVALID_VALUE, #t ".strides[1]"},     \
      {#t " heads stride 0", set_##t##_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, #t ".strides[2]"}

static void set_lse_null(aotk_attn_params *p) { p->lse.data = NULL; }
static void set_lse_null_fields_garbage(aotk_attn_params *p) {
  memset(&p->lse, 0xEE, sizeof p->lse);
  p->lse.data = NULL;
}
static void set_dk_like_q(aotk_attn_params *p) { /* [batch, seqlen_q, heads_q, head_dim]: q's layout, not k's */
  p->dk = aotk_tensor_4d(FAKE_DK, p->q.dtype, p->q.shape[0], p->q.shape[1], p->q.shape[2], p->q.shape[3]);
}
static void set_dq_like_k(aotk_attn_params *p) {
  p->dq = aotk_tensor_4d(FAKE_DQ, p->k.dtype, p->k.shape[0], p->k.shape[1], p->k.shape[2], p->k.shape[3]);
}
static void set_dv_heads_q(aotk_attn_params *p) { /* the query heads: what dv would be without the GQA sum */
  p->dv = aotk_tensor_4d(FAKE_DV, p->v.dtype, p->v.shape[0], p->v.shape[1], p->q.shape[2], p->v.shape[3]);
}
static void set_dout_like_k(aotk_attn_params *p) {
  p->dout = aotk_tensor_4d(FAKE_DOUT, p->k.dtype, p->k.shape[0], p->k.shape[1], p->k.shape[2], p->k.shape[3]);
}
static void set_deterministic_2(aotk_attn_params *p) { p->deterministic = 2; }
static void set_deterministic_negative(aotk_attn_params *p) { p->deterministic = -1; }
static void set_deterministic_max(aotk_attn_params *p) { p->deterministic = INT32_MAX; }
/* The dK/dV pass's grid is batch * heads_kv * ceil(seqlen_k / block_n): 2^20 * 1 * 2^18 / 64 = 2^32
 * programs (2^33 at the 32 rows the check assumes), while the forward's grid (one query row) is 2^20. */
static void set_dkdv_grid_beyond_limit(aotk_attn_params *p) {
  problem shape = {AOTK_DTYPE_BFLOAT16, (int64_t)1 << 20, 1, (int64_t)1 << 18, 1, 1, 64, true, 0};
  *p = bwd_params_for(shape);
}
/* 2^30 sequences of 64 rows: the forward's grid (one 64-row block each) fits, the pre-pass's (128
 * padded rows: two blocks each) does not. */
static void set_preprocess_grid_beyond_limit(aotk_attn_params *p) {
  problem shape = {AOTK_DTYPE_BFLOAT16, (int64_t)1 << 30, 64, 1, 1, 1, 64, true, 0};
  *p = bwd_params_for(shape);
}

/* The backward's 0.2 arguments: dsinks (needs sinks), no dropout mask, and the varlen layout of dout,
 * dq, dk and dv. */
static void set_dsinks(aotk_attn_params *p) { p->dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, 8); }
static void set_dsinks_without_sinks(aotk_attn_params *p) { set_dsinks(p); }
static void set_dsinks_heads_kv(aotk_attn_params *p) { set_sinks(p), set_dsinks(p), p->dsinks.shape[0] = 2; }
static void set_dsinks_bfloat16(aotk_attn_params *p) {
  set_sinks(p), set_dsinks(p), p->dsinks.dtype = AOTK_DTYPE_BFLOAT16;
}
static void set_dsinks_rank_2(aotk_attn_params *p) {
  set_sinks(p), p->dsinks = aotk_tensor_2d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, 2, 8);
}
static void set_dsinks_misaligned(aotk_attn_params *p) {
  set_sinks(p), set_dsinks(p), p->dsinks.data = byte_offset(FAKE_DSINKS, 2);
}
static void set_dsinks_stride_2(aotk_attn_params *p) { set_sinks(p), set_dsinks(p), p->dsinks.strides[0] = 2; }
static void set_bwd_mask(aotk_attn_params *p) { set_mask(p); } /* valid for the forward */
static void set_varlen_lse_null(aotk_attn_params *p) { make_varlen(p), p->lse.data = NULL; }
static void set_varlen_dq_total(aotk_attn_params *p) { make_varlen(p), p->dq.shape[0] = VARLEN_TOTAL_K; }
static void set_varlen_dk_total(aotk_attn_params *p) { make_varlen(p), p->dk.shape[0] = VARLEN_TOTAL_Q; }
static void set_varlen_dv_total(aotk_attn_params *p) { make_varlen(p), p->dv.shape[0] = VARLEN_TOTAL_K + 1; }
static void set_varlen_dout_total(aotk_attn_params *p) { make_varlen(p), p->dout.shape[0] = VARLEN_TOTAL_Q - 1; }
static void set_varlen_dq_rank_4(aotk_attn_params *p) {
  make_varlen(p), p->dq = aotk_tensor_4d(FAKE_DQ, p->q.dtype, 1, VARLEN_TOTAL_Q, 8, 64);
}
static void set_varlen_dk_heads(aotk_attn_params *p) { make_varlen(p), p->dk.shape[1] = 8; }
static void set_varlen_dv_head_dim(aotk_attn_params *p) { make_varlen(p), p->dv.shape[2] = 128; }
static void set_varlen_dq_heads_stride_zero(aotk_attn_params *p) { make_varlen(p), p->dq.strides[1] = 0; }
static void set_varlen_dsinks_without_sinks(aotk_attn_params *p) { make_varlen(p), set_dsinks(p); }

static const bad_input bwd_bad_inputs[] = {
    {"lse.data NULL", set_lse_null, AOTK_ERROR_NULL_POINTER, "lse"},
    {"lse.data NULL, its other fields garbage", set_lse_null_fields_garbage, AOTK_ERROR_NULL_POINTER, "lse"},
    BWD_TENSOR_CASES(dout),
    BWD_TENSOR_CASES(dq),
    BWD_TENSOR_CASES(dk),
    BWD_TENSOR_CASES(dv),
    BWD_OUTPUT_STRIDE_CASES(dq),
    BWD_OUTPUT_STRIDE_CASES(dk),
    BWD_OUTPUT_STRIDE_CASES(dv),
    {"dk in q's layout", set_dk_like_q, AOTK_ERROR_SHAPE_MISMATCH, "dk.shape[1]"},
    {"dq in k's layout", set_dq_like_k, AOTK_ERROR_SHAPE_MISMATCH, "dq.shape[1]"},
    {"dv with heads_q heads", set_dv_heads_q, AOTK_ERROR_SHAPE_MISMATCH, "dv.shape[2]"},
    {"dout in k's layout", set_dout_like_k, AOTK_ERROR_SHAPE_MISMATCH, "dout.shape[1]"},
    {"deterministic 2", set_deterministic_2, AOTK_ERROR_INVALID_VALUE, "deterministic"},
    {"deterministic -1", set_deterministic_negative, AOTK_ERROR_INVALID_VALUE, "deterministic"},
    {"deterministic INT32_MAX", set_deterministic_max, AOTK_ERROR_INVALID_VALUE, "deterministic"},
    {"dK/dV grid beyond 2^31 - 1 programs", set_dkdv_grid_beyond_limit, AOTK_ERROR_SIZE_OVERFLOW, "seqlen_k"},
    {"pre-pass grid beyond 2^31 - 1 programs", set_preprocess_grid_beyond_limit, AOTK_ERROR_SIZE_OVERFLOW,
     "round_up(seqlen_q, 128)"},
    {"dsinks without sinks", set_dsinks_without_sinks, AOTK_ERROR_INVALID_VALUE, "dsinks"},
    {"dsinks [heads_kv]", set_dsinks_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "dsinks.shape[0]"},
    {"dsinks bfloat16", set_dsinks_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "dsinks.dtype"},
    {"dsinks [batch, heads_q]", set_dsinks_rank_2, AOTK_ERROR_RANK, "dsinks.rank"},
    {"dsinks 2-byte aligned", set_dsinks_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "dsinks.data"},
    {"dsinks stride 2", set_dsinks_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "dsinks.strides[0]"},
    {"a dropout_mask (the forward's output)", set_bwd_mask, AOTK_ERROR_INVALID_VALUE, "dropout_mask"},
    {"varlen: lse.data NULL", set_varlen_lse_null, AOTK_ERROR_NULL_POINTER, "lse"},
    {"varlen: dq total = total_k", set_varlen_dq_total, AOTK_ERROR_SHAPE_MISMATCH, "dq.shape[0]"},
    {"varlen: dk total = total_q", set_varlen_dk_total, AOTK_ERROR_SHAPE_MISMATCH, "dk.shape[0]"},
    {"varlen: dv total + 1", set_varlen_dv_total, AOTK_ERROR_SHAPE_MISMATCH, "dv.shape[0]"},
    {"varlen: dout total - 1", set_varlen_dout_total, AOTK_ERROR_SHAPE_MISMATCH, "dout.shape[0]"},
    {"varlen: dq rank 4", set_varlen_dq_rank_4, AOTK_ERROR_RANK, "dq.rank"},
    {"varlen: dk with heads_q heads", set_varlen_dk_heads, AOTK_ERROR_SHAPE_MISMATCH, "dk.shape[1]"},
    {"varlen: dv head_dim 128 of 64", set_varlen_dv_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "dv.shape[2]"},
    {"varlen: dq heads stride 0", set_varlen_dq_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "dq.strides[1]"},
    {"varlen: dsinks without sinks", set_varlen_dsinks_without_sinks, AOTK_ERROR_INVALID_VALUE, "dsinks"},
};
#undef BWD_TENSOR_CASES
#undef BWD_OUTPUT_STRIDE_CASES

/* The backward validates what the forward does first (every forward bad input gets the same status
 * from aotk_attn_bwd and aotk_query(AOTK_OP_ATTN_BWD)), then its own arguments. */
static void test_bwd_validation_rejects_bad_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_attn_params params = valid_bwd_params();
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK_MSG(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK, "the base case fails: %s", aotk_last_error());
  reset_calls();
  CHECK_MSG(run_op(AOTK_OP_ATTN_BWD, &params) == AOTK_OK, "the base case fails: %s", aotk_last_error());
  CHECK(fake.calls[CALL_cuLaunchKernel] == 3);
  make_varlen(&params);
  CHECK_MSG(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK, "the varlen base case fails: %s",
            aotk_last_error());
  params = valid_bwd_params();
  set_sinks(&params);
  set_dsinks(&params);
  CHECK_MSG(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK, "the dsinks base case fails: %s",
            aotk_last_error());

  size_t forward_cases = sizeof bad_inputs / sizeof bad_inputs[0];
  for (size_t i = 0; i < forward_cases; i++) check_bad_input_op(&bad_inputs[i], AOTK_OP_ATTN_BWD);
  size_t overflowing_cases = sizeof overflowing_inputs / sizeof overflowing_inputs[0];
  for (size_t i = 0; i < overflowing_cases; i++) check_bad_input_op(&overflowing_inputs[i], AOTK_OP_ATTN_BWD);
  size_t backward_cases = sizeof bwd_bad_inputs / sizeof bwd_bad_inputs[0];
  for (size_t i = 0; i < backward_cases; i++) check_bad_input_op(&bwd_bad_inputs[i], AOTK_OP_ATTN_BWD);
  printf("    %zu forward and %zu backward bad inputs\n", forward_cases + overflowing_cases, backward_cases);
  uninstall_fake_gpu();
}

/* The forward ignores the backward's fields: garbage there changes neither its status, nor what
 * aotk_query reports, nor a byte of what it launches. */
static void test_fwd_ignores_bwd_fields(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_attn_params clean = valid_params();
  aotk_kernel_info clean_info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &clean, &clean_info) == AOTK_OK);
  CHECK(aotk_attn_fwd(&clean, FAKE_STREAM) == AOTK_OK);
  recorded_launch clean_launch = fake.launch;

  for (int variant = 0; variant < 3; variant++) {
    aotk_attn_params dirty = valid_params();
    if (variant == 0) { /* every byte garbage */
      memset(&dirty.dout, 0xEE, sizeof dirty.dout);
      memset(&dirty.dq, 0x5A, sizeof dirty.dq);
      memset(&dirty.dk, 0xFF, sizeof dirty.dk);
      memset(&dirty.dv, 0x81, sizeof dirty.dv);
      memset(&dirty.dsinks, 0x77, sizeof dirty.dsinks);
      dirty.deterministic = 12345;
    } else if (variant == 1) { /* plausible tensors, each with one defect the backward refuses */
      dirty = valid_bwd_params();
      dirty.dout.data = NULL;
      dirty.dq.dtype = AOTK_DTYPE_FLOAT32;
      dirty.dk.strides[3] = 2;
      dirty.dv.data = byte_offset(FAKE_DV, 1);
      dirty.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, 3); /* and no sinks */
      dirty.deterministic = -7;
    } else { /* valid backward params: the forward runs exactly as without them */
      dirty = valid_bwd_params();
      dirty.deterministic = 1;
    }
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &dirty, &info);
    CHECK_MSG(status == AOTK_OK, "variant %d: aotk_query %s (%s)", variant, aotk_status_name(status),
              aotk_last_error());
    CHECK_MSG(memcmp(&info, &clean_info, sizeof info) == 0, "variant %d: aotk_query reports %s, without them %s",
              variant, info.kernel_name, clean_info.kernel_name);
    reset_calls();
    status = aotk_attn_fwd(&dirty, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "variant %d: aotk_attn_fwd %s (%s)", variant, aotk_status_name(status),
              aotk_last_error());
    CHECK(fake.calls[CALL_cuLaunchKernel] == 1);
    CHECK_MSG(memcmp(&fake.launch, &clean_launch, sizeof clean_launch) == 0,
              "variant %d: the forward launched differently", variant);
  }
  uninstall_fake_gpu();
}

/* Inputs at the edge of what the backward allows, which its validation must accept. */
static void test_bwd_validation_accepts_edge_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  struct {
    const char *what;
    aotk_attn_params params;
    problem shape;
  } cases[8];
  int count = 0;

  cases[count].what = "deterministic 1";
  cases[count].shape = default_problem;
  cases[count].params = valid_bwd_params();
  cases[count].params.deterministic = 1;
  count++;

  cases[count].what = "dout broadcast (zero strides: it is an input)";
  cases[count].shape = default_problem;
  cases[count].params = valid_bwd_params();
  cases[count].params.dout.strides[0] = cases[count].params.dout.strides[1] = cases[count].params.dout.strides[2] = 0;
  count++;

  cases[count].what = "dq, dk, dv stride 0 on dimensions of size 1";
  problem single = default_problem;
  single.batch = 1;
  single.heads_q = single.heads_kv = 1;
  cases[count].shape = single;
  cases[count].params = bwd_params_for(single);
  aotk_tensor *outputs[] = {&cases[count].params.dq, &cases[count].params.dk, &cases[count].params.dv};
  for (int t = 0; t < 3; t++) outputs[t]->strides[0] = outputs[t]->strides[2] = 0;
  count++;

  cases[count].what = "MQA (heads_kv 1), causal, explicit scale";
  problem mqa = default_problem;
  mqa.heads_kv = 1;
  cases[count].shape = mqa;
  cases[count].params = bwd_params_for(mqa);
  cases[count].params.causal = 1;
  cases[count].params.softmax_scale = 0.3f;
  count++;

  cases[count].what = "dq one element past 16-byte alignment (the unaligned kernels)";
  cases[count].shape = default_problem;
  cases[count].params = valid_bwd_params();
  cases[count].params.dq.data = byte_offset(FAKE_DQ, 2);
  count++;

  cases[count].what = "seqlen_q 1, seqlen_k 1";
  problem tiny = default_problem;
  tiny.seqlen_q = tiny.seqlen_k = 1;
  cases[count].shape = tiny;
  cases[count].params = bwd_params_for(tiny);
  count++;

  for (int i = 0; i < count; i++) {
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &cases[i].params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_query %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    /* The aligned dense cases at d64 with deterministic 0 take the non-deterministic backward. */
    const bool fused = expect_bwd_fused(&cases[i].params, 90, false, SHARED_SM90);
    size_t workspace_bytes = expected_bwd_workspace_bytes(&cases[i].params, 90, false, &cases[i].shape);
    CHECK_MSG(info.workspace_bytes == workspace_bytes, "%s: workspace_bytes %zu, expected %zu", cases[i].what,
              info.workspace_bytes, workspace_bytes);
    CHECK_MSG(((info.features & AOTK_FEATURE_NONDETERMINISTIC) != 0) == fused, "%s: features %#x", cases[i].what,
              info.features);
    reset_calls();
    status = aotk_attn_bwd(&cases[i].params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_bwd %s (%s)", cases[i].what, aotk_status_name(status),
              aotk_last_error());
    CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 3 && fake.calls[CALL_cuMemsetD32Async] == (fused ? 1 : 0),
              "%s: %d launches, %d clears", cases[i].what, fake.calls[CALL_cuLaunchKernel],
              fake.calls[CALL_cuMemsetD32Async]);
  }
  uninstall_fake_gpu();
}

/* The workspace: at least the size aotk_query reports, not NULL, 16-byte aligned. Checked by
 * aotk_attn_bwd only (the query is how the size is learned), after the params; a workspace short of
 * what every plan needs (the statistics) before the driver, and the non-deterministic plan's larger
 * one (its dQ accumulator too) once the plan is known, before anything is loaded, cleared or launched.
 * Each shape with deterministic 0 (on this sm_90 GPU the non-deterministic plan) and 1. */
static void test_bwd_workspace(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const problem shapes[] = {
      {AOTK_DTYPE_BFLOAT16, 2, 100, 130, 8, 2, 64, true, 0},
      {AOTK_DTYPE_FLOAT16, 1, 1, 1, 1, 1, 128, true, 0},
      {AOTK_DTYPE_FLOAT16, 3, 4097, 17, 6, 3, 128, true, 0},
  };
  int cases = 0, fused_cases = 0;
  for (size_t s = 0; s < 2 * sizeof shapes / sizeof shapes[0]; s++) {
    const problem *p = &shapes[s / 2];
    aotk_attn_params params = bwd_params_for(*p);
    params.deterministic = (int32_t)(s % 2);
    const bool fused = params.deterministic == 0;
    CHECK_MSG(expect_bwd_fused(&params, 90, false, SHARED_SM90) == fused,
              "shape %zu deterministic %d: the rule says %d", s / 2, (int)params.deterministic, (int)!fused);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK);
    /* What every plan needs (checked before the driver), and what this one needs. */
    const size_t statistics_bytes = bwd_workspace_bytes(p);
    const size_t needed = fused ? bwd_fused_workspace_bytes_for(p, false) : statistics_bytes;
    CHECK_MSG(info.workspace_bytes == needed,
              "batch %lld heads_q %lld seqlen_q %lld deterministic %d: workspace_bytes %zu, expected %zu",
              (long long)p->batch, (long long)p->heads_q, (long long)p->seqlen_q, (int)params.deterministic,
              info.workspace_bytes, needed);

    const struct {
      const char *what;
      void *workspace;
      size_t bytes;
      aotk_status expected;
    } workspaces[] = {
        {"NULL, the reported size", NULL, needed, AOTK_ERROR_WORKSPACE_TOO_SMALL},
        {"NULL, size 0", NULL, 0, AOTK_ERROR_WORKSPACE_TOO_SMALL},
        {"one byte short", FAKE_WORKSPACE, needed - 1, AOTK_ERROR_WORKSPACE_TOO_SMALL},
        {"half", FAKE_WORKSPACE, needed / 2, AOTK_ERROR_WORKSPACE_TOO_SMALL},
        {"size 0", FAKE_WORKSPACE, 0, AOTK_ERROR_WORKSPACE_TOO_SMALL},
        {"the statistics' size", FAKE_WORKSPACE, statistics_bytes, fused ? AOTK_ERROR_WORKSPACE_TOO_SMALL : AOTK_OK},
        {"one byte short of the statistics", FAKE_WORKSPACE, statistics_bytes - 1, AOTK_ERROR_WORKSPACE_TOO_SMALL},
        {"8-byte aligned", byte_offset(FAKE_WORKSPACE, 8), needed, AOTK_ERROR_MISALIGNED_POINTER},
        {"4-byte aligned", byte_offset(FAKE_WORKSPACE, 4), needed + 64, AOTK_ERROR_MISALIGNED_POINTER},
        {"odd address", byte_offset(FAKE_WORKSPACE, 1), needed, AOTK_ERROR_MISALIGNED_POINTER},
        {"exactly the reported size", FAKE_WORKSPACE, needed, AOTK_OK},
        {"larger than needed", byte_offset(FAKE_WORKSPACE, 16), needed + 1, AOTK_OK},
    };
    for (size_t w = 0; w < sizeof workspaces / sizeof workspaces[0]; w++) {
      aotk_attn_params before = params;
      reset_calls();
      reset_launch_log();
      int launches_before = fake.launches;
      aotk_status status = aotk_attn_bwd(&params, workspaces[w].workspace, workspaces[w].bytes, FAKE_STREAM);
      CHECK_MSG(status == workspaces[w].expected, "%zu-byte workspace %s (deterministic %d): %s (%s), expected %s",
                needed, workspaces[w].what, (int)params.deterministic, aotk_status_name(status), aotk_last_error(),
                aotk_status_name(workspaces[w].expected));
      CHECK(memcmp(&params, &before, sizeof params) == 0);
      if (workspaces[w].expected == AOTK_OK) {
        CHECK_MSG(fake.launches == launches_before + 3 && fake.logged_launches == 3, "workspace %s: %d launches",
                  workspaces[w].what, fake.launches - launches_before);
        CHECK_MSG(arg_pointer(&fake.launch_log[0], PRE_DELTA) == (uint64_t)(uintptr_t)workspaces[w].workspace,
                  "workspace %s: delta at %#llx", workspaces[w].what,
                  (unsigned long long)arg_pointer(&fake.launch_log[0], PRE_DELTA));
        /* The accumulator sits at its offset from wherever the workspace starts. */
        const uint64_t accumulator =
            (uint64_t)(uintptr_t)byte_offset(workspaces[w].workspace, bwd_accumulator_offset(p, false));
        CHECK_MSG(fake.memsets == (fused ? 1 : 0) &&
                      (!fused || (fake.memset_destination == accumulator &&
                                  arg_pointer(&fake.launch_log[2], CONVERT_DQ_ACC) == accumulator)),
                  "workspace %s: %d clears, of %#llx; the accumulator at %#llx", workspaces[w].what, fake.memsets,
                  (unsigned long long)fake.memset_destination, (unsigned long long)accumulator);
      } else {
        CHECK_MSG(message_mentions("workspace"), "workspace %s: the message \"%s\" does not name the workspace",
                  workspaces[w].what, aotk_last_error());
        /* Short of the statistics (or NULL, or misaligned): refused before the driver. Short of the
         * accumulator only: once planned, with nothing loaded, encoded, cleared or launched. */
        const bool before_driver = workspaces[w].workspace == NULL || workspaces[w].bytes < statistics_bytes ||
                                   workspaces[w].expected == AOTK_ERROR_MISALIGNED_POINTER;
        if (before_driver) {
          CHECK_MSG(total_calls() == 0, "workspace %s: reached the driver (%s)", workspaces[w].what,
                    called_functions());
        } else {
          CHECK_MSG(fused && fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuTensorMapEncodeTiled] == 0 &&
                        fake.calls[CALL_cuMemsetD32Async] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
                    "workspace %s (deterministic %d): reached %s", workspaces[w].what, (int)params.deterministic,
                    called_functions());
        }
      }
      cases++;
      fused_cases += fused;
    }
    /* The message says how much is needed. */
    CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, needed - 1, FAKE_STREAM) == AOTK_ERROR_WORKSPACE_TOO_SMALL);
    char needed_text[32];
    snprintf(needed_text, sizeof needed_text, "%zu", needed);
    CHECK_MSG(message_mentions(needed_text), "the message \"%s\" does not say %zu bytes are needed", aotk_last_error(),
              needed);
  }
  /* Bad params are reported before a bad workspace. */
  aotk_attn_params params = valid_bwd_params();
  params.deterministic = 2;
  reset_calls();
  CHECK(aotk_attn_bwd(&params, NULL, 0, FAKE_STREAM) == AOTK_ERROR_INVALID_VALUE);
  CHECK(message_mentions("deterministic"));
  CHECK(total_calls() == 0);
  /* The default problem's two sizes in numbers: 2 * 8 rows of 128 padded statistics, delta and
   * lse * log2(e), take 16384 bytes; the accumulator adds 2 * 8 * 128 rows of 64 floats, 524288. */
  CHECK(bwd_workspace_bytes(&default_problem) == 16384 &&
        bwd_fused_workspace_bytes_for(&default_problem, false) == 16384 + 524288);
  printf("    %d workspaces, %d of them for the non-deterministic plan\n", cases, fused_cases);
  uninstall_fake_gpu();
}

/* ---- faults --------------------------------------------------------------------------------- */

/* Runs the valid default problem through aotk_attn_fwd and aotk_query; both must give `expected`,
 * nothing may launch, and a failed query must leave *info alone. */
static void check_fault(const char *what, aotk_status expected, aotk_status expected_from_query, const char *mentions) {
  aotk_attn_params params = valid_params();
  aotk_status status = aotk_attn_fwd(&params, FAKE_STREAM);
  CHECK_MSG(status == expected, "%s: aotk_attn_fwd gave %s (%s), expected %s", what, aotk_status_name(status),
            aotk_last_error(), aotk_status_name(expected));
  CHECK_MSG(message_mentions(mentions), "%s: the message \"%s\" does not mention \"%s\"", what, aotk_last_error(),
            mentions);
  CHECK_MSG(fake.launches == 0, "%s: launched", what);

  aotk_kernel_info info;
  poison_info(&info);
  aotk_status query_status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
  CHECK_MSG(query_status == expected_from_query, "%s: aotk_query gave %s (%s), expected %s", what,
            aotk_status_name(query_status), aotk_last_error(), aotk_status_name(expected_from_query));
  if (query_status != AOTK_OK) CHECK_MSG(info_untouched(&info), "%s: aotk_query wrote *info on failure", what);
}

static void test_fault_no_device(void) {
  install_fake_gpu(90, SHARED_SM90);
  fake.init_result = CUDA_ERROR_NO_DEVICE;
  check_fault("cuInit: no device", AOTK_ERROR_NO_DEVICE, AOTK_ERROR_NO_DEVICE, "cuInit");
  aotk_attn_params params = valid_params();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_ERROR_NO_DEVICE);
  CHECK_MSG(aotk_last_cuda_result() == CUDA_ERROR_NO_DEVICE, "aotk_last_cuda_result() = %d", aotk_last_cuda_result());
  CHECK(aotk_preload() == AOTK_ERROR_NO_DEVICE);

  install_fake_gpu(90, SHARED_SM90);
  fake.init_result = CUDA_ERROR_NOT_INITIALIZED;
  check_fault("cuInit: another failure", AOTK_ERROR_CUDA, AOTK_ERROR_CUDA, injected_error_name);
  CHECK(aotk_last_cuda_result() == CUDA_ERROR_NOT_INITIALIZED);
  uninstall_fake_gpu();
}

static void test_fault_no_context(void) {
  install_fake_gpu(90, SHARED_SM90);
  fake.has_context = false;
  check_fault("no current context", AOTK_ERROR_NO_CONTEXT, AOTK_ERROR_NO_CONTEXT, "context");
  CHECK(aotk_preload() == AOTK_ERROR_NO_CONTEXT);
  CHECK(fake.calls[CALL_cuLibraryLoadData] == 0);

  install_fake_gpu(90, SHARED_SM90);
  fake.context_result = CUDA_ERROR_INVALID_CONTEXT;
  check_fault("cuCtxGetCurrent fails", AOTK_ERROR_CUDA, AOTK_ERROR_CUDA, "cuCtxGetCurrent");
  CHECK(aotk_last_cuda_result() == CUDA_ERROR_INVALID_CONTEXT);
  uninstall_fake_gpu();
}

static void test_fault_old_gpu(void) {
  static const int old[] = {75, 70, 61};
  for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) {
    install_fake_gpu(old[i], 64 * 1024);
    char sm[16];
    snprintf(sm, sizeof sm, "sm_%d", old[i]);
    check_fault(sm, AOTK_ERROR_UNSUPPORTED_ARCH, AOTK_ERROR_UNSUPPORTED_ARCH, sm);
    CHECK(aotk_preload() == AOTK_ERROR_UNSUPPORTED_ARCH);
    CHECK(fake.calls[CALL_cuLibraryLoadData] == 0);
  }
  uninstall_fake_gpu();
}

/* A GPU whose opt-in shared memory is one byte short of what the chosen kernel needs: the pointer
 * kernels (q laid out heads-outer, which TMA cannot read) are refused; a TMA kernel that does not fit
 * gives way to the next choice (the three-warpgroup kernel to the two-warpgroup one, that to the pointer
 * kernel; with dropout the Triton TMA kernel to the pointer kernel), which runs. */
static void test_fault_too_little_shared_memory(void) {
  static const int compute_capabilities[] = {90, 86};
  problem problems[2] = {default_problem, default_problem};
  problems[1].head_dim = 128;
  problems[1].seqlen_q = 4096;
  for (size_t c = 0; c < 2; c++) {
    for (size_t p = 0; p < 2; p++) {
      install_fake_gpu(compute_capabilities[c], SHARED_SM90);
      aotk_attn_params params = params_for(problems[p]);
      make_heads_outer(&params.q);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);

      install_fake_gpu(compute_capabilities[c], info.shared_bytes); /* exactly enough */
      CHECK_MSG(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK, "sm_%d %s with exactly %d bytes: %s",
                compute_capabilities[c], info.kernel_name, info.shared_bytes, aotk_last_error());

      install_fake_gpu(compute_capabilities[c], info.shared_bytes - 1);
      aotk_status status = aotk_attn_fwd(&params, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_UNSUPPORTED_ARCH, "sm_%d %s with %d bytes: %s", compute_capabilities[c],
                info.kernel_name, info.shared_bytes - 1, aotk_status_name(status));
      CHECK_MSG(message_mentions(info.kernel_name), "the message \"%s\" does not name the kernel", aotk_last_error());
      CHECK(fake.launches == 0 && fake.calls[CALL_cuLibraryLoadData] == 0);
      aotk_kernel_info refused;
      poison_info(&refused);
      CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &refused) == AOTK_ERROR_UNSUPPORTED_ARCH);
      CHECK(info_untouched(&refused));
    }
  }
  /* The chains of choices, written out: d64 without a mask at 2048 rows runs the three-warpgroup kernel,
   * then the two-warpgroup one, then the pointer kernel; causal d64, and d64 with ALiBi (an EXTRAS row),
   * start at the two-warpgroup kernel. The Triton TMA kernel has only EXTRAS rows, so plain d128 goes
   * from the two-warpgroup kernel straight to the pointer kernel, d128 with softcap through the Triton
   * TMA kernel's EXTRAS row, and d128 with dropout starts at the Triton TMA kernel. */
  static const struct {
    int64_t head_dim, seqlen_q;
    int causal;
    void (*set_extras)(aotk_attn_params *); /* NULL: none */
    const char *extras_name;
    int chain[3];
  } chains[] = {
      {64, 2048, 0, NULL, "", {AOTK__FAMILY_ATTN_FWD_HOPPER_WG3, AOTK__FAMILY_ATTN_FWD_HOPPER, AOTK__FAMILY_ATTN_FWD}},
      {64, 2048, 1, NULL, "", {AOTK__FAMILY_ATTN_FWD_HOPPER, AOTK__FAMILY_ATTN_FWD, AOTK__FAMILY_ATTN_FWD}},
      {64, 2048, 0, set_alibi, " ALiBi", {AOTK__FAMILY_ATTN_FWD_HOPPER, AOTK__FAMILY_ATTN_FWD, AOTK__FAMILY_ATTN_FWD}},
      {128, 4096, 0, NULL, "", {AOTK__FAMILY_ATTN_FWD_HOPPER, AOTK__FAMILY_ATTN_FWD, AOTK__FAMILY_ATTN_FWD}},
      {128, 4096, 0, set_softcap, " softcap",
       {AOTK__FAMILY_ATTN_FWD_HOPPER, AOTK__FAMILY_ATTN_FWD_TMA, AOTK__FAMILY_ATTN_FWD}},
      {128, 4096, 0, set_dropout, " dropout",
       {AOTK__FAMILY_ATTN_FWD_TMA, AOTK__FAMILY_ATTN_FWD, AOTK__FAMILY_ATTN_FWD}},
  };
  for (size_t c = 0; c < sizeof chains / sizeof chains[0]; c++) {
    problem p = default_problem;
    p.head_dim = chains[c].head_dim, p.seqlen_q = chains[c].seqlen_q;
    aotk_attn_params params = params_for(p);
    params.causal = chains[c].causal;
    if (chains[c].set_extras != NULL) chains[c].set_extras(&params);
    const bool extras = chains[c].set_extras != NULL;
    char what[48];
    snprintf(what, sizeof what, "d%lld%s%s", (long long)p.head_dim, chains[c].causal ? " causal" : "",
             chains[c].extras_name);
    int shared = SHARED_SM90, reached = chains[c].chain[0];
    /* Each TMA kernel one byte short in turn, until the pointer kernel's turn: it runs, or where it needs
     * more than the TMA kernel it replaces, it is refused as above. */
    for (int step = 0; step < 2 && reached != AOTK__FAMILY_ATTN_FWD; step++) {
      const int family = chains[c].chain[step], next_family = chains[c].chain[step + 1];
      install_fake_gpu(90, shared);
      int modelled = expected_fwd_family(&params, 90, false, shared);
      CHECK_MSG(modelled == family, "%s with %d bytes: the test's rule says %s", what, shared,
                kernel_signatures[fwd_kernel_id(modelled)].function);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
      const aotk__kernel_entry *row = table_row_named(info.kernel_name, 90);
      CHECK_MSG(row != NULL && row->family == family && fwd_family_of_name(info.kernel_name) == family &&
                    row->extras == extras,
                "%s with %d bytes: runs %s, expected a %s kernel%s", what, shared, info.kernel_name,
                kernel_signatures[fwd_kernel_id(family)].function, extras ? " (an EXTRAS row)" : "");
      if (row == NULL || row->family != family) break;
      shared = info.shared_bytes - 1;
      install_fake_gpu(90, shared);
      modelled = expected_fwd_family(&params, 90, false, shared);
      CHECK_MSG(modelled == next_family, "%s with %d bytes: the test's rule says %s", what, shared,
                kernel_signatures[fwd_kernel_id(modelled)].function);
      aotk_kernel_info next = AOTK_KERNEL_INFO_INIT;
      aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &next);
      const aotk__kernel_entry *fallback = status == AOTK_OK ? table_row_named(next.kernel_name, 90) : NULL;
      if (status == AOTK_ERROR_UNSUPPORTED_ARCH && next_family == AOTK__FAMILY_ATTN_FWD) {
        CHECK_MSG(message_mentions("attn_fwd_") && !message_mentions("attn_fwd_tma_") &&
                      !message_mentions("attn_fwd_hopper_"),
                  "%s one short of %s: \"%s\", not the pointer kernel's refusal", what, info.kernel_name,
                  aotk_last_error());
        CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_ERROR_UNSUPPORTED_ARCH && fake.launches == 0);
        reached = next_family;
        break;
      }
      CHECK_MSG(status == AOTK_OK && fallback != NULL && fallback->family == next_family &&
                    fwd_family_of_name(next.kernel_name) == next_family && fallback->shared_bytes <= shared,
                "%s one short of %s: %s runs %s, expected a %s kernel", what, info.kernel_name,
                aotk_status_name(status), next.kernel_name, kernel_signatures[fwd_kernel_id(next_family)].function);
      if (fallback == NULL || fallback->family != next_family) break;
      reset_launch_log();
      CHECK_MSG(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK && fake.launches == 1 && fake.logged_launches == 1 &&
                    fake.launch_log[0].kernel == fwd_kernel_id(next_family),
                "%s with %d bytes, one short of %s: %s", what, shared, info.kernel_name, aotk_last_error());
      reached = next_family;
    }
    CHECK_MSG(reached == AOTK__FAMILY_ATTN_FWD, "%s: never fell back to the pointer kernel", what);
  }
  uninstall_fake_gpu();
}

static void test_fault_library_load_fails(void) {
  enum { CUDA_ERROR_NO_BINARY_FOR_GPU = 209 };
  install_fake_gpu(90, SHARED_SM90);
  fake.library_load_result = CUDA_ERROR_NO_BINARY_FOR_GPU;
  /* aotk_query loads nothing, so it cannot see this failure: it reports what would run. */
  check_fault("cuLibraryLoadData fails", AOTK_ERROR_CUDA, AOTK_OK, "cuLibraryLoadData");
  aotk_attn_params params = valid_params();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_ERROR_CUDA);
  CHECK_MSG(aotk_last_cuda_result() == CUDA_ERROR_NO_BINARY_FOR_GPU, "aotk_last_cuda_result() = %d",
            aotk_last_cuda_result());
  CHECK_MSG(message_mentions(injected_error_name), "the message \"%s\" lacks the driver's error name",
            aotk_last_error());
  CHECK(fake.calls[CALL_cuLibraryGetKernel] == 0);
  CHECK(aotk_preload() == AOTK_ERROR_CUDA);

  /* A failed load is not remembered: once the driver recovers, the call goes through. */
  fake.library_load_result = CUDA_SUCCESS;
  CHECK_MSG(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK, "after recovery: %s", aotk_last_error());
  CHECK(fake.launches == 1);
  CHECK(aotk_last_cuda_result() == 0);
  uninstall_fake_gpu();
}

static void test_fault_get_kernel_fails(void) {
  install_fake_gpu(90, SHARED_SM90);
  fake.get_kernel_result = CUDA_ERROR_INVALID_VALUE;
  check_fault("cuLibraryGetKernel fails", AOTK_ERROR_CUDA, AOTK_OK, "cuLibraryGetKernel");
  CHECK(aotk_last_cuda_result() == 0); /* the query succeeded last */
  aotk_attn_params params = valid_params();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_ERROR_CUDA);
  CHECK(aotk_last_cuda_result() == CUDA_ERROR_INVALID_VALUE);
  uninstall_fake_gpu();
}

/* Above 48 KiB of dynamic shared memory the kernel must opt in; below, the call is not made. */
static void test_fault_set_attribute_fails(void) {
  problem big = default_problem;
  big.head_dim = 128;
  for (int i = 0; i < 2; i++) {
    install_fake_gpu(90, SHARED_SM90);
    aotk_attn_params params = params_for(i == 0 ? big : default_problem);
    /* The second: d64 with an unaligned q, the variant with the smallest tiles. */
    if (i == 1) params.q.data = byte_offset(FAKE_Q, 2);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
    bool opts_in = info.shared_bytes > 48 * 1024;
    fake.set_attribute_result = CUDA_ERROR_INVALID_VALUE;
    aotk_status status = aotk_attn_fwd(&params, FAKE_STREAM);
    if (opts_in) {
      CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuKernelSetAttribute"), "%s (%d bytes): %s, \"%s\"",
                info.kernel_name, info.shared_bytes, aotk_status_name(status), aotk_last_error());
      CHECK(fake.launches == 0);
    } else {
      CHECK_MSG(status == AOTK_OK && fake.calls[CALL_cuKernelSetAttribute] == 0,
                "%s (%d bytes) asked for more shared memory than the default: %s", info.kernel_name, info.shared_bytes,
                aotk_status_name(status));
    }
  }
  uninstall_fake_gpu();
}

static void test_fault_launch_fails(void) {
  install_fake_gpu(90, SHARED_SM90);
  fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
  check_fault("cuLaunchKernel fails", AOTK_ERROR_CUDA, AOTK_OK, "cuLaunchKernel");
  aotk_attn_params params = valid_params();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_ERROR_CUDA);
  CHECK(aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY);
  uninstall_fake_gpu();
}

/* ---- the launch ----------------------------------------------------------------------------- */

/* q and k laid out [batch, heads, seqlen, head_dim] (transposed), v with padded rows, out contiguous,
 * lse with padded rows: every stride has a distinct value, so a stride packed into the wrong slot
 * shows. All strides stay multiples of 16, so the aligned kernel runs. */
static aotk_attn_params strided_params(problem p) {
  aotk_attn_params params = params_for(p);
  const int64_t d = p.head_dim, dv = dim_v(&p), v_row = p.heads_kv * dv + 32, lse_row = p.seqlen_q + 48;
  aotk_tensor *q = &params.q, *k = &params.k, *v = &params.v, *lse = &params.lse;
  q->strides[0] = p.heads_q * p.seqlen_q * d, q->strides[1] = d, q->strides[2] = p.seqlen_q * d;
  k->strides[0] = p.heads_kv * p.seqlen_k * d, k->strides[1] = d, k->strides[2] = p.seqlen_k * d;
  v->strides[0] = p.seqlen_k * v_row + 1024, v->strides[1] = v_row, v->strides[2] = dv;
  if (p.with_lse) lse->strides[0] = p.heads_q * lse_row, lse->strides[1] = lse_row, lse->strides[2] = 1;
  return params;
}

static void check_strides(const char *what, const char *kernel, const recorded_launch *launch, int base,
                          const aotk_tensor *t, const char *name) {
  /* The kernels take 4-d views: a varlen tensor [total, heads, d] is [1, total, heads, d] with batch
   * stride 0 (each sequence's start comes from cu_seqlens). */
  const bool varlen = t->rank == 3;
  const int64_t expected[3] = {varlen ? 0 : t->strides[0], t->strides[varlen ? 0 : 1], t->strides[varlen ? 1 : 2]};
  CHECK_MSG(arg_i64(launch, base) == expected[0] && arg_i32(launch, base + 1) == expected[1] &&
                arg_i32(launch, base + 2) == expected[2],
            "%s: %s packs %s's strides as (%lld, %d, %d), expected (%lld, %lld, %lld)", what, kernel, name,
            (long long)arg_i64(launch, base), arg_i32(launch, base + 1), arg_i32(launch, base + 2),
            (long long)expected[0], (long long)expected[1], (long long)expected[2]);
}

static void check_pointer(const char *what, const char *kernel, const recorded_launch *launch, int index,
                          const void *expected, const char *name) {
  CHECK_MSG(arg_pointer(launch, index) == (uint64_t)(uintptr_t)expected, "%s: %s's %s is %#llx, expected %p", what,
            kernel, name, (unsigned long long)arg_pointer(launch, index), expected);
}

static void check_float(const char *what, const char *kernel, const recorded_launch *launch, int index,
                        double expected, const char *name) {
  float value = arg_f32(launch, index);
  CHECK_MSG(fabs(value - expected) <= 1e-6 * fabs(expected), "%s: %s's %s is %.9g, expected %.9g", what, kernel, name,
            value, expected);
}

static void check_int(const char *what, const char *kernel, const recorded_launch *launch, int index,
                      int64_t expected, const char *name) {
  CHECK_MSG(arg_i32(launch, index) == expected, "%s: %s's %s is %d, expected %lld", what, kernel, name,
            arg_i32(launch, index), (long long)expected);
}

/* What the kernels must be told about the 0.2 features, worked out here from the params as the header
 * defines them (not from the library's code). */
typedef struct feature_expectation {
  bool varlen, extras;
  int32_t window_left, window_right; /* causal resolves window_right to 0; -1 unbounded */
  int32_t flags;                     /* FLAG_* */
  uint32_t features;                 /* AOTK_FEATURE_* for aotk_query, less PADDED_HEAD_DIM and EXTRAS_KERNEL */
  double scale, qk_scale_log2, softcap_scale, softcap_log2, dropout_scale;
  uint32_t dropout_threshold;
  const void *rng_state; /* what the kernels get: NULL unless dropout is on */
  int64_t alibi_batch_stride;
} feature_expectation;

static feature_expectation expect_features(const aotk_attn_params *params, int64_t head_dim_qk) {
  feature_expectation e;
  memset(&e, 0, sizeof e);
  const bool causal = params->causal == 1;
  const float p = params->dropout_p;
  e.varlen = params->cu_seqlens_q.data != NULL;
  e.window_left = params->window_left;
  e.window_right = causal ? 0 : params->window_right;
  /* Sinks need no EXTRAS kernel (only the forward's epilogue and the backward's pre-pass see them). */
  e.extras = params->softcap > 0.0f || params->alibi_slopes.data != NULL || p > 0.0f;
  e.flags = (params->lse.data != NULL ? FLAG_WRITE_LSE : 0) | (e.varlen ? FLAG_VARLEN : 0) |
            (params->causal_align == AOTK_ALIGN_TOP_LEFT ? FLAG_TOP_LEFT : 0) |
            (params->softcap > 0.0f ? FLAG_SOFTCAP : 0) | (params->alibi_slopes.data != NULL ? FLAG_ALIBI : 0) |
            (params->sinks.data != NULL ? FLAG_SINKS : 0) | (p > 0.0f ? FLAG_DROPOUT : 0) |
            /* causal-like work (a right bound, no left one) grows with the query block: last blocks first */
            (e.window_right >= 0 && e.window_left < 0 ? FLAG_REVERSE : 0);
  e.features = (e.varlen ? AOTK_FEATURE_VARLEN : 0) | (causal ? AOTK_FEATURE_CAUSAL : 0) |
               (e.window_left >= 0 || (!causal && e.window_right >= 0) ? AOTK_FEATURE_WINDOW : 0) |
               (params->softcap > 0.0f ? AOTK_FEATURE_SOFTCAP : 0) |
               (params->alibi_slopes.data != NULL ? AOTK_FEATURE_ALIBI : 0) |
               (params->sinks.data != NULL ? AOTK_FEATURE_SINKS : 0) | (p > 0.0f ? AOTK_FEATURE_DROPOUT : 0);
  e.scale = params->softmax_scale != 0.0f ? params->softmax_scale : 1.0 / sqrt((double)head_dim_qk);
  e.qk_scale_log2 = e.scale / log(2.0);
  e.softcap_scale = params->softcap > 0.0f ? e.scale / params->softcap : 0.0;
  e.softcap_log2 = params->softcap / log(2.0);
  /* An element is kept when its 32-bit word is >= dropout_p * 2^32 (include/aotk.h). */
  e.dropout_threshold = p > 0.0f ? (uint32_t)floor((double)p * 4294967296.0) : 0u;
  e.dropout_scale = p > 0.0f ? 1.0 / (1.0 - (double)p) : 1.0;
  e.rng_state = p > 0.0f ? params->rng_state.data : NULL;
  e.alibi_batch_stride = params->alibi_slopes.data != NULL && params->alibi_slopes.rank == 2
                             ? params->alibi_slopes.strides[0]
                             : 0;
  return e;
}

/* The padded head dims a query reports, and the feature bits that come from them and from the kernel. */
static uint32_t expected_info_features(const feature_expectation *e, const problem *p, const aotk_kernel_info *info) {
  return e->features | (info->head_dim_qk > p->head_dim || info->head_dim_v > dim_v(p) ? AOTK_FEATURE_PADDED_HEAD_DIM : 0) |
         (e->extras ? AOTK_FEATURE_EXTRAS_KERNEL : 0);
}

/* A launch's `count` descriptors (the kernel's 't' arguments from slot first_slot on), against the encodes
 * logged from fake.encodes[first]: for each tensor in turn, the encode of the tensor's view [batch, seqlen, heads * d] (dims innermost
 * first, byte strides of a token and a batch, the row's box reversed and its swizzle, 2-byte elements of
 * the tensor's dtype, no interleave, element strides 1, 128-byte L2 promotion, no NaN fill), and in the
 * launch that encode's map with the view's shape and element strides, outermost first. A single batch's
 * stride is unused: the view gives it the span of the sequence (a valid stride, whatever the caller's). */
static void check_descriptors(const char *what, const recorded_launch *launch, const aotk__kernel_entry *row,
                              int first, int count, const aotk_tensor *const *tensors, const char *const *names,
                              const int32_t *tile_rows_of, int first_slot) {
  CHECK_MSG(fake.encode_count == first + count && first + count <= ENCODE_LOG_SIZE,
            "%s: %d tensor maps encoded, expected %d", what, fake.encode_count - first, count);
  CHECK_MSG(launch->maps_recorded == count, "%s: %d maps in the launch", what, launch->maps_recorded);
  CHECK_MSG(row->descriptor_count == count, "%s: %s records %d descriptors", what, row->name, row->descriptor_count);
  if (fake.encode_count != first + count || first + count > ENCODE_LOG_SIZE || row->descriptor_count != count) {
    return;
  }
  for (int d = 0; d < count; d++) {
    const aotk_tensor view = as_4d(tensors[d]), *t = &view; /* varlen: [1, total, heads, d] */
    const encode_call *c = &fake.encodes[first + d];
    const aotk__tma_layout *layout = &row->descriptors[d];
    const int64_t row_elements = t->shape[2] * t->shape[3];
    const int64_t batch_stride = t->shape[0] == 1 ? t->shape[1] * t->strides[1] : t->strides[0];
    const int data_type = t->dtype == AOTK_DTYPE_BFLOAT16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                          : t->dtype == AOTK_DTYPE_FLOAT32  ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                                            : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const int64_t element_bytes = t->dtype == AOTK_DTYPE_FLOAT32 ? 4 : 2;
    /* The box is the tile's rows of one batch (its width is the compiler's, checked by test_images). */
    const int32_t tile_rows = tile_rows_of[d];
    CHECK_MSG(c->address == t->data && c->rank == TMA_RANK && c->data_type == data_type,
              "%s: encode %d is of %p, rank %u, type %d; expected %s at %p, rank 3, type %d", what, d, c->address,
              c->rank, c->data_type, names[d], t->data, data_type);
    CHECK_MSG(c->dims[0] == (uint64_t)row_elements && c->dims[1] == (uint64_t)t->shape[1] &&
                  c->dims[2] == (uint64_t)t->shape[0],
              "%s: %s's map has dims {%llu, %llu, %llu}, expected {%lld, %lld, %lld}", what, names[d],
              (unsigned long long)c->dims[0], (unsigned long long)c->dims[1], (unsigned long long)c->dims[2],
              (long long)row_elements, (long long)t->shape[1], (long long)t->shape[0]);
    CHECK_MSG(c->strides_bytes[0] == (uint64_t)(element_bytes * t->strides[1]) &&
                  c->strides_bytes[1] == (uint64_t)(element_bytes * batch_stride),
              "%s: %s's map has byte strides {%llu, %llu}, expected {%lld, %lld}", what, names[d],
              (unsigned long long)c->strides_bytes[0], (unsigned long long)c->strides_bytes[1],
              (long long)(element_bytes * t->strides[1]), (long long)(element_bytes * batch_stride));
    CHECK_MSG(c->box[0] == (unsigned)layout->box[2] && c->box[1] == (unsigned)layout->box[1] &&
                  c->box[2] == (unsigned)layout->box[0] && c->box[1] == (unsigned)tile_rows && c->box[2] == 1,
              "%s: %s's box {%u, %u, %u}, the row's (innermost first) {%d, %d, %d}, %d tile rows", what, names[d],
              c->box[0], c->box[1], c->box[2], layout->box[2], layout->box[1], layout->box[0], tile_rows);
    CHECK_MSG(c->element_strides[0] == 1 && c->element_strides[1] == 1 && c->element_strides[2] == 1,
              "%s: %s's element strides {%u, %u, %u}", what, names[d], c->element_strides[0], c->element_strides[1],
              c->element_strides[2]);
    CHECK_MSG(c->swizzle == layout->swizzle && c->interleave == CU_TENSOR_MAP_INTERLEAVE_NONE &&
                  c->l2_promotion == CU_TENSOR_MAP_L2_PROMOTION_L2_128B &&
                  c->oob_fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
              "%s: %s's swizzle %d (the row's %d), interleave %d, L2 promotion %d, OOB fill %d", what, names[d],
              c->swizzle, layout->swizzle, c->interleave, c->l2_promotion, c->oob_fill);

    const int base = first_slot + d * TMA_DESC_SLOTS;
    bool map_matches = true;
    for (int word = 0; word < AOTK__CU_TENSOR_MAP_NUM_QWORDS; word++) {
      uint64_t value;
      memcpy(&value, launch->maps[d] + 8 * word, sizeof value);
      map_matches = map_matches && value == fake_map_word(t->data, word);
    }
    CHECK_MSG(map_matches, "%s: descriptor %d's map is not the one encoded for %s", what, d, names[d]);
    CHECK_MSG(arg_i32(launch, base + TMA_SLOT_SHAPE) == t->shape[0] &&
                  arg_i32(launch, base + TMA_SLOT_SHAPE + 1) == t->shape[1] &&
                  arg_i32(launch, base + TMA_SLOT_SHAPE + 2) == row_elements,
              "%s: %s's descriptor shape (%d, %d, %d), expected (%lld, %lld, %lld)", what, names[d],
              arg_i32(launch, base + TMA_SLOT_SHAPE), arg_i32(launch, base + TMA_SLOT_SHAPE + 1),
              arg_i32(launch, base + TMA_SLOT_SHAPE + 2), (long long)t->shape[0], (long long)t->shape[1],
              (long long)row_elements);
    CHECK_MSG(arg_i64(launch, base + TMA_SLOT_STRIDES) == batch_stride &&
                  arg_i64(launch, base + TMA_SLOT_STRIDES + 1) == t->strides[1] &&
                  arg_i64(launch, base + TMA_SLOT_STRIDES + 2) == 1,
              "%s: %s's descriptor strides (%lld, %lld, %lld), expected (%lld, %lld, 1)", what, names[d],
              (long long)arg_i64(launch, base + TMA_SLOT_STRIDES),
              (long long)arg_i64(launch, base + TMA_SLOT_STRIDES + 1),
              (long long)arg_i64(launch, base + TMA_SLOT_STRIDES + 2), (long long)batch_stride,
              (long long)t->strides[1]);
  }
}

/* The forward's three (Q, K, V), after its pointer kernel's arguments: boxes of the tile's query rows
 * (or for the warp-specialized kernels one consumer warpgroup's 64) and of its key block. */
static void check_tma_descriptors(const char *what, const recorded_launch *launch, const aotk_attn_params *params,
                                  const aotk__kernel_entry *row, int first) {
  static const char *const names[TMA_DESCRIPTORS] = {"q", "k", "v"};
  const aotk_tensor *tensors[TMA_DESCRIPTORS] = {&params->q, &params->k, &params->v};
  const int32_t q_rows = family_is_hopper_fwd(row->family) ? 64 : row->block_m;
  const int32_t tile_rows[TMA_DESCRIPTORS] = {q_rows, row->block_n, row->block_n};
  check_descriptors(what, launch, row, first, TMA_DESCRIPTORS, tensors, names, tile_rows, TMA_ARG_DESC_Q);
}

/* aotk_query(AOTK_OP_ATTN_FWD), then aotk_attn_fwd: the query names the row the tuning rule picks for
 * the padded head dims and the EXTRAS axis, and reports the features; the call launches that row with
 * its grid, block and shared memory, every argument in the catalog's order, and then the dropout-mask
 * kernel when the mask is asked for. Where expect_tma says so, the row is the TMA forward's, whose first
 * arguments are the pointer kernel's and whose descriptors check_tma_descriptors checks. `p` describes
 * the problem (for varlen: p->batch sequences of at most p->seqlen_q / p->seqlen_k rows). */
/* The programs a warp-specialized forward launches for p (kernels/attn_fwd_hopper.py, include/aotk.h),
 * with two consumer warpgroups or three (tiles of row->block_m rows either way): it is persistent,
 * program i taking tiles r * grid + i on even rounds and r * grid + grid - 1 - i on odd ones. One
 * program per SM, fewer if there are fewer tiles; under a causal mask or any window bounded on either
 * side one per tile instead when, with tiles costed as their key blocks plus one, the busiest SM would
 * carry more than 1.08 times the mean, unless there are more than 64 rounds. Computed here tile by tile. */
static int64_t expected_hopper_grid(const aotk_attn_params *params, const problem *p, const aotk__kernel_entry *row) {
  const int64_t sms = FAKE_MULTIPROCESSORS, m_blocks = ceil_div(p->seqlen_q, row->block_m);
  const int64_t tiles = m_blocks * p->batch * p->heads_q;
  const int64_t right = params->causal == 1 ? 0 : params->window_right, left = params->window_left;
  if (tiles <= sms) return tiles;
  if ((left < 0 && right < 0) || tiles > 64 * sms) return sms;
  const int64_t diag = params->causal_align == AOTK_ALIGN_TOP_LEFT ? 0 : p->seqlen_k - p->seqlen_q;
  double load[FAKE_MULTIPROCESSORS] = {0}, total = 0;
  for (int64_t t = 0; t < tiles; t++) {
    const int64_t round = t / sms, slot = t % sms, program = round % 2 == 0 ? slot : sms - 1 - slot;
    /* Causal-like masks (a right bound alone) run the longest first. */
    const int64_t m_block = right >= 0 && left < 0 ? m_blocks - 1 - t % m_blocks : t % m_blocks;
    /* Keys [first, last] that some row of rows [m0, m0 + block_m) sees, from a block boundary. */
    const int64_t m0 = m_block * row->block_m;
    const int64_t last_row = (m0 + row->block_m < p->seqlen_q ? m0 + row->block_m : p->seqlen_q) - 1;
    int64_t first = left >= 0 ? m0 + diag - left : 0, end = right >= 0 ? last_row + diag + right + 1 : p->seqlen_k;
    first = first < 0 ? 0 : first > p->seqlen_k ? p->seqlen_k : first;
    end = end < 0 ? 0 : end > p->seqlen_k ? p->seqlen_k : end;
    first -= first % row->block_n;
    const int64_t key_blocks = end > first ? ceil_div(end - first, row->block_n) : 0;
    load[program] += (double)(key_blocks < 1 ? 1 : key_blocks) + 1.0;
    total += (double)(key_blocks < 1 ? 1 : key_blocks) + 1.0;
  }
  double busiest = 0;
  for (int64_t i = 0; i < sms; i++) busiest = load[i] > busiest ? load[i] : busiest;
  return busiest > 1.08 * total / (double)sms ? tiles : sms;
}

static void check_launch(const char *what, const aotk_attn_params *params, const problem *p) {
  const feature_expectation expected = expect_features(params, p->head_dim);
  const bool mask = params->dropout_mask.data != NULL;
  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "%s: aotk_query loaded or launched (%s)", what, called_functions());
  CHECK(info.struct_size == sizeof info);
  CHECK(info.workspace_bytes == 0);
  CHECK_MSG(info.launches == 1 + mask, "%s: launches %d, expected %d", what, info.launches, 1 + mask);
  const int family = expected_fwd_family(params, info.arch, info.from_ptx, fake.max_shared_bytes);
  const bool tma = family != AOTK__FAMILY_ATTN_FWD;
  CHECK_MSG(fwd_family_of_name(info.kernel_name) == family, "%s: kernel_name %s, expected a %s kernel", what,
            info.kernel_name, kernel_signatures[fwd_kernel_id(family)].function);
  const aotk__kernel_entry *row = table_row_named(info.kernel_name, info.arch);
  CHECK_MSG(row != NULL, "%s: aotk_query names %s, not a table row", what, info.kernel_name);
  if (row == NULL) return;
  const aotk__kernel_entry *tuned = expected_row(family, info.arch, p->dtype, p->head_dim, dim_v(p), info.aligned,
                                                 expected.extras, p->seqlen_q);
  CHECK_MSG(row == tuned, "%s: aotk_query names %s, expected %s", what, info.kernel_name,
            tuned != NULL ? tuned->name : "(none)");
  CHECK_MSG(row->extras == (int)expected.extras, "%s: %s is%s the EXTRAS variant", what, row->name,
            row->extras ? "" : " not");
  CHECK(info.num_warps == row->num_warps && info.shared_bytes == row->shared_bytes && info.block_m == row->block_m &&
        info.block_n == row->block_n && info.aligned == row->aligned);
  CHECK_MSG(info.head_dim_qk == row->head_dim_qk && info.head_dim_v == row->head_dim_v,
            "%s: aotk_query reports head dims %d/%d, %s has %d/%d", what, info.head_dim_qk, info.head_dim_v, row->name,
            row->head_dim_qk, row->head_dim_v);
  const uint32_t features = expected_info_features(&expected, p, &info) | fwd_family_features(family);
  CHECK_MSG(info.features == features, "%s: features %#x, expected %#x", what, info.features, features);
  int64_t m_blocks = (p->seqlen_q + info.block_m - 1) / info.block_m;
  const int64_t tiles = m_blocks * p->batch * p->heads_q;
  const bool hopper = family_is_hopper_fwd(family);
  int64_t grid = hopper ? expected_hopper_grid(params, p, row) : tiles;
  CHECK_MSG(info.grid == grid, "%s: info.grid %lld, expected %lld", what, (long long)info.grid, (long long)grid);

  int launches_before = fake.launches;
  reset_launch_log();
  CHECK_MSG(fake.calls[CALL_cuTensorMapEncodeTiled] == 0, "%s: aotk_query encoded tensor maps", what);
  status = aotk_attn_fwd(params, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_fwd %s (%s)", what, aotk_status_name(status), aotk_last_error());
  CHECK_MSG(aotk_last_error()[0] == '\0', "%s: a success left the message \"%s\"", what, aotk_last_error());
  CHECK_MSG(fake.launches == launches_before + 1 + mask, "%s: %d launches, expected %d", what,
            fake.launches - launches_before, 1 + mask);
  if (status != AOTK_OK || fake.logged_launches != 1 + mask) return;
  const recorded_launch *launch = &fake.launch_log[0];
  const char *kernel = kernel_signatures[fwd_kernel_id(family)].function;

  CHECK_MSG(launch->kernel == fwd_kernel_id(family), "%s: the first launch is %s, expected %s", what,
            kernel_signatures[launch->kernel].function, kernel);
  if (tma) {
    check_tma_descriptors(what, launch, params, row, 0);
  } else {
    CHECK_MSG(fake.encode_count == 0 && launch->maps_recorded == 0, "%s: the pointer kernel's launch encoded %d maps",
              what, fake.encode_count);
  }
  const struct given_kernel *given = given_kernel_of(launch->function);
  CHECK_MSG(given != NULL, "%s: launched a handle the driver never gave", what);
  /* The handle encodes the .entry name the library asked for: launch->kernel above is it. */
  CHECK_MSG(info.from_ptx ? fake.loaded_ptx > 0 : fake.loaded_elf > 0, "%s: loaded %d ELF and %d PTX images, from_ptx %d",
            what, fake.loaded_elf, fake.loaded_ptx, info.from_ptx);
  CHECK_MSG(launch->grid[0] == (unsigned)grid && launch->grid[1] == 1 && launch->grid[2] == 1,
            "%s: grid (%u, %u, %u), expected (%lld, 1, 1)", what, launch->grid[0], launch->grid[1], launch->grid[2],
            (long long)grid);
  CHECK_MSG(launch->block[0] == 32u * (unsigned)info.num_warps && launch->block[1] == 1 && launch->block[2] == 1,
            "%s: block (%u, %u, %u) for %d warps", what, launch->block[0], launch->block[1], launch->block[2],
            info.num_warps);
  CHECK_MSG(launch->shared_bytes == (unsigned)info.shared_bytes, "%s: %u bytes of shared memory, expected %d", what,
            launch->shared_bytes, info.shared_bytes);
  CHECK(launch->stream == (CUstream)FAKE_STREAM);
  CHECK(launch->extra == NULL);
  if (given != NULL) { /* above 48 KiB of dynamic shared memory the kernel must have opted in */
    const int opt_in = info.shared_bytes > 48 * 1024 ? info.shared_bytes : 0;
    CHECK_MSG(given->shared_opt_in == opt_in, "%s: %s (%d bytes) opted in to %d bytes", what, info.kernel_name,
              info.shared_bytes, given->shared_opt_in);
  }

  const aotk_tensor *q = &params->q, *k = &params->k, *v = &params->v, *out = &params->out, *lse = &params->lse;
  const bool write_lse = lse->data != NULL;
  check_pointer(what, kernel, launch, ARG_Q, q->data, "q");
  check_pointer(what, kernel, launch, ARG_K, k->data, "k");
  check_pointer(what, kernel, launch, ARG_V, v->data, "v");
  check_pointer(what, kernel, launch, ARG_OUT, out->data, "out");
  check_pointer(what, kernel, launch, ARG_LSE, lse->data, "lse");
  check_pointer(what, kernel, launch, ARG_CU_SEQLENS_Q, params->cu_seqlens_q.data, "cu_seqlens_q");
  check_pointer(what, kernel, launch, ARG_CU_SEQLENS_K, params->cu_seqlens_k.data, "cu_seqlens_k");
  check_pointer(what, kernel, launch, ARG_ALIBI_SLOPES, params->alibi_slopes.data, "alibi_slopes");
  check_pointer(what, kernel, launch, ARG_SINKS, params->sinks.data, "sinks");
  check_pointer(what, kernel, launch, ARG_RNG_STATE, expected.rng_state, "rng_state");
  const aotk_tensor *tensors[] = {q, k, v, out};
  static const char *const tensor_names[] = {"q", "k", "v", "out"};
  for (int t = 0; t < 4; t++) check_strides(what, kernel, launch, ARG_STRIDE_QB + 3 * t, tensors[t], tensor_names[t]);
  /* lse: dense [batch, heads_q, seqlen_q]; varlen [heads_q, total_q], no batch stride. */
  const int64_t stride_lb = !write_lse || expected.varlen ? 0 : lse->strides[0];
  const int64_t stride_lh = !write_lse ? 0 : lse->strides[expected.varlen ? 0 : 1];
  CHECK_MSG(arg_i64(launch, ARG_STRIDE_LB) == stride_lb &&
                arg_i32(launch, ARG_STRIDE_LH) == stride_lh,
            "%s: lse strides packed as (%lld, %d), expected (%lld, %lld)", what,
            (long long)arg_i64(launch, ARG_STRIDE_LB), arg_i32(launch, ARG_STRIDE_LH), (long long)stride_lb,
            (long long)stride_lh);
  CHECK_MSG(arg_i64(launch, ARG_STRIDE_AB) == expected.alibi_batch_stride, "%s: stride_ab %lld, expected %lld", what,
            (long long)arg_i64(launch, ARG_STRIDE_AB), (long long)expected.alibi_batch_stride);
  check_int(what, kernel, launch, ARG_SEQLEN_Q, p->seqlen_q, "seqlen_q");
  check_int(what, kernel, launch, ARG_SEQLEN_K, p->seqlen_k, "seqlen_k");
  check_int(what, kernel, launch, ARG_HEADS_Q, p->heads_q, "heads_q");
  check_int(what, kernel, launch, ARG_GROUP_SIZE, p->heads_q / p->heads_kv, "group_size");
  check_int(what, kernel, launch, ARG_NUM_M_BLOCKS, m_blocks, "num_m_blocks");
  check_int(what, kernel, launch, ARG_HEAD_DIM_QK8, p->head_dim / 8, "head_dim_qk8");
  check_int(what, kernel, launch, ARG_HEAD_DIM_V8, dim_v(p) / 8, "head_dim_v8");
  check_int(what, kernel, launch, ARG_WINDOW_LEFT, expected.window_left, "window_left");
  check_int(what, kernel, launch, ARG_WINDOW_RIGHT, expected.window_right, "window_right");
  CHECK_MSG(arg_i32(launch, ARG_FLAGS) == expected.flags, "%s: flags %#x, expected %#x", what,
            (unsigned)arg_i32(launch, ARG_FLAGS), (unsigned)expected.flags);
  check_float(what, kernel, launch, ARG_QK_SCALE_LOG2, expected.qk_scale_log2, "qk_scale_log2");
  check_float(what, kernel, launch, ARG_SOFTCAP_SCALE, expected.softcap_scale, "softcap_scale");
  check_float(what, kernel, launch, ARG_SOFTCAP_LOG2, expected.softcap_log2, "softcap_log2");
  CHECK_MSG((uint32_t)arg_i32(launch, ARG_DROPOUT_THRESHOLD) == expected.dropout_threshold,
            "%s: dropout_threshold %u, expected %u", what, (uint32_t)arg_i32(launch, ARG_DROPOUT_THRESHOLD),
            expected.dropout_threshold);
  check_float(what, kernel, launch, ARG_DROPOUT_SCALE, expected.dropout_scale, "dropout_scale");
  if (hopper) {
    check_int(what, kernel, launch, HOPPER_ARG_NUM_TILES, tiles, "num_tiles");
    CHECK(arg_pointer(launch, HOPPER_ARG_GLOBAL_SCRATCH) == 0 && arg_pointer(launch, HOPPER_ARG_PROFILE_SCRATCH) == 0);
  } else {
    CHECK(arg_pointer(launch, tma ? TMA_ARG_GLOBAL_SCRATCH : ARG_GLOBAL_SCRATCH) == 0);
    CHECK(arg_pointer(launch, tma ? TMA_ARG_PROFILE_SCRATCH : ARG_PROFILE_SCRATCH) == 0);
  }
  if (!mask) return;

  /* The dropout mask, second: over every (row, key) pair of each sequence, with the same RNG. */
  const recorded_launch *mask_launch = &fake.launch_log[1];
  kernel = "attn_dropout_mask";
  const aotk__kernel_entry *mask_row =
      expected_row(AOTK__FAMILY_ATTN_DROPOUT_MASK, info.arch, p->dtype, 0, 0, 0, 0, p->seqlen_q);
  CHECK_MSG(mask_launch->kernel == KERNEL_DROPOUT_MASK, "%s: the second launch is %s", what,
            kernel_signatures[mask_launch->kernel].function);
  CHECK_MSG(mask_row != NULL, "%s: no sm_%d dropout-mask row", what, info.arch);
  if (mask_row == NULL || mask_launch->kernel != KERNEL_DROPOUT_MASK) return;
  const int64_t mask_blocks = ceil_div(p->seqlen_q, mask_row->block_m);
  CHECK_MSG(mask_launch->grid[0] == (unsigned)(mask_blocks * p->batch * p->heads_q) && mask_launch->grid[1] == 1 &&
                mask_launch->block[0] == 32u * (unsigned)mask_row->num_warps &&
                mask_launch->shared_bytes == (unsigned)mask_row->shared_bytes && mask_launch->stream == (CUstream)FAKE_STREAM,
            "%s: the mask kernel's grid %u, block %u, %u bytes", what, mask_launch->grid[0], mask_launch->block[0],
            mask_launch->shared_bytes);
  const aotk_tensor *m = &params->dropout_mask;
  check_pointer(what, kernel, mask_launch, MASK_MASK, m->data, "mask");
  check_pointer(what, kernel, mask_launch, MASK_CU_SEQLENS_Q, params->cu_seqlens_q.data, "cu_seqlens_q");
  check_pointer(what, kernel, mask_launch, MASK_CU_SEQLENS_K, params->cu_seqlens_k.data, "cu_seqlens_k");
  check_pointer(what, kernel, mask_launch, MASK_RNG_STATE, params->rng_state.data, "rng_state");
  CHECK_MSG(arg_i64(mask_launch, MASK_STRIDE_MB) == m->strides[0] && arg_i64(mask_launch, MASK_STRIDE_MH) == m->strides[1] &&
                arg_i64(mask_launch, MASK_STRIDE_MS) == m->strides[2],
            "%s: mask strides (%lld, %lld, %lld)", what, (long long)arg_i64(mask_launch, MASK_STRIDE_MB),
            (long long)arg_i64(mask_launch, MASK_STRIDE_MH), (long long)arg_i64(mask_launch, MASK_STRIDE_MS));
  check_int(what, kernel, mask_launch, MASK_SEQLEN_Q, p->seqlen_q, "seqlen_q");
  check_int(what, kernel, mask_launch, MASK_SEQLEN_K, p->seqlen_k, "seqlen_k");
  check_int(what, kernel, mask_launch, MASK_HEADS_Q, p->heads_q, "heads_q");
  check_int(what, kernel, mask_launch, MASK_NUM_M_BLOCKS, mask_blocks, "num_m_blocks");
  check_int(what, kernel, mask_launch, MASK_FLAGS, expected.flags & FLAG_VARLEN, "flags");
  CHECK_MSG((uint32_t)arg_i32(mask_launch, MASK_DROPOUT_THRESHOLD) == expected.dropout_threshold,
            "%s: the mask's dropout_threshold %u, expected %u", what,
            (uint32_t)arg_i32(mask_launch, MASK_DROPOUT_THRESHOLD), expected.dropout_threshold);
  CHECK(arg_pointer(mask_launch, MASK_GLOBAL_SCRATCH) == 0 && arg_pointer(mask_launch, MASK_PROFILE_SCRATCH) == 0);
}

/* The fake driver reads launches by the test's own parameter lists: each must be what the table's rows
 * of its family declare, plus the two hidden pointers. */
static void test_parameter_lists_match_the_table(void) {
  int rows_checked = 0;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    int id = 0;
    while (id < KERNEL_COUNT && kernel_signatures[id].family != e->family) id++;
    CHECK_MSG(id < KERNEL_COUNT, "row %d %s: family %d unknown to the test", i, e->name, e->family);
    if (id == KERNEL_COUNT) continue;
    const char *kinds = kernel_signatures[id].param_kinds;
    size_t declared = strlen(e->param_kinds);
    CHECK_MSG(strcmp(e->function_name, kernel_signatures[id].function) == 0 && strlen(kinds) == declared + 2 &&
                  strncmp(kinds, e->param_kinds, declared) == 0,
              "row %d %s (%s): the table declares \"%s\", the test reads \"%s\"", i, e->name, e->function_name,
              e->param_kinds, kinds);
    rows_checked++;
  }
  CHECK(rows_checked == aotk__kernel_count);
}

static void test_launch_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);

  problem gqa = {AOTK_DTYPE_BFLOAT16, 3, 1500, 777, 12, 4, 128, true, 0};
  aotk_attn_params params = strided_params(gqa);
  params.causal = 1;
  check_launch("bf16 d128 GQA causal, strided, lse, default scale", &params, &gqa);
  CHECK(fake.loaded_images == 1);
  /* The kernel is loaded once: the second launch reuses it. */
  check_launch("the same again", &params, &gqa);
  CHECK_MSG(fake.loaded_images == 1 && fake.calls[CALL_cuLibraryLoadData] == 0, "loaded %d times",
            fake.loaded_images);
  CHECK(fake.launches == 2);

  problem plain = {AOTK_DTYPE_FLOAT16, 1, 37, 1000, 4, 4, 64, false, 0};
  params = strided_params(plain);
  params.softmax_scale = 0.3f;
  check_launch("fp16 d64 MHA, no lse, explicit scale", &params, &plain);
  uninstall_fake_gpu();
}

/* ---- the backward's launches ---------------------------------------------------------------- */

/* strided_params, with dout, dq, dk and dv strided too, each differently from its counterpart: a
 * stride packed into the wrong slot shows. All strides stay multiples of 16, so the aligned kernels
 * run. */
static aotk_attn_params strided_bwd_params(problem p) {
  p.with_lse = true;
  aotk_attn_params params = strided_params(p);
  const aotk_attn_params contiguous = bwd_params_for(p);
  params.dout = contiguous.dout;
  params.dq = contiguous.dq;
  params.dk = contiguous.dk;
  params.dv = contiguous.dv;
  const int64_t d = p.head_dim, e = dim_v(&p), dout_row = p.heads_q * (e + 80), dk_row = p.heads_kv * (d + 32);
  aotk_tensor *dout = &params.dout, *dq = &params.dq, *dk = &params.dk, *dv = &params.dv;
  dout->strides[0] = p.seqlen_q * dout_row + 512, dout->strides[1] = dout_row, dout->strides[2] = e + 80;
  dq->strides[0] = p.heads_q * p.seqlen_q * (d + 16) + 256, dq->strides[1] = d + 16, dq->strides[2] = p.seqlen_q * (d + 16);
  dk->strides[0] = p.seqlen_k * dk_row + 64, dk->strides[1] = dk_row, dk->strides[2] = d + 32;
  dv->strides[0] = p.heads_kv * p.seqlen_k * (e + 48) + 128, dv->strides[1] = e + 48, dv->strides[2] = p.seqlen_k * (e + 48);
  return params;
}

/* Dense tensors whose token rows are padded, each by its own amount, dq laid out heads-outer and lse's
 * rows padded: TMA can read q, k, v and dout, every stride stays a multiple of 16 (so the Gluon passes,
 * and where deterministic is 0 the fused one and its cast, run), and a stride packed into the wrong slot
 * shows. */
static aotk_attn_params padded_bwd_params(problem p) {
  aotk_attn_params params = bwd_params_for(p);
  aotk_tensor *padded[] = {&params.q, &params.k, &params.v, &params.out, &params.dout, &params.dk, &params.dv};
  for (int t = 0; t < 7; t++) {
    aotk_tensor *x = padded[t];
    x->strides[1] = x->shape[2] * x->shape[3] + 16 * (t + 1);
    x->strides[0] = x->shape[1] * x->strides[1] + 64 * (t + 1);
  }
  aotk_tensor *dq = &params.dq;
  dq->strides[1] = dq->shape[3] + 16, dq->strides[2] = dq->shape[1] * dq->strides[1];
  dq->strides[0] = dq->shape[2] * dq->strides[2] + 256;
  params.lse.strides[1] = p.seqlen_q + 48, params.lse.strides[0] = p.heads_q * params.lse.strides[1];
  return params;
}

/* The three rows the backward must run for `p` on an `arch` GPU: preprocess and dQ tuned by
 * seqlen_q, dK/dV by seqlen_k; dK/dV and dQ of the EXTRAS variant when `extras`. */
static void expected_bwd_rows_extras(int arch, const problem *p, int aligned, int extras,
                                     const aotk__kernel_entry *rows[3]) {
  const int64_t dv = dim_v(p);
  rows[0] = expected_row(AOTK__FAMILY_ATTN_BWD_PREPROCESS, arch, p->dtype, p->head_dim, dv, aligned, 0, p->seqlen_q);
  rows[1] = expected_row(AOTK__FAMILY_ATTN_BWD_DKDV, arch, p->dtype, p->head_dim, dv, aligned, extras, p->seqlen_k);
  rows[2] = expected_row(AOTK__FAMILY_ATTN_BWD_DQ, arch, p->dtype, p->head_dim, dv, aligned, extras, p->seqlen_q);
}

static void expected_bwd_rows(int arch, const problem *p, int aligned, const aotk__kernel_entry *rows[3]) {
  expected_bwd_rows_extras(arch, p, aligned, 0, rows);
}

/* The same for the call `params` on the fake GPU as installed: the fused pass and the cast in the
 * second and third places where expect_bwd_fused says so, else the dK/dV row is the Gluon kernel's where
 * expect_bwd_hopper says so. */
static void expected_bwd_rows_of(const aotk_attn_params *params, int arch, bool from_ptx, const problem *p,
                                 int aligned, int extras, const aotk__kernel_entry *rows[3]) {
  expected_bwd_rows_extras(arch, p, aligned, extras, rows);
  if (expect_bwd_fused(params, arch, from_ptx, fake.max_shared_bytes)) {
    rows[1] = fused_row(params);
    rows[2] = convert_row(params);
  } else if (expect_bwd_hopper(params, arch, from_ptx, fake.max_shared_bytes)) {
    rows[1] = bwd_hopper_row(params);
  }
}

/* The programs each backward kernel launches: preprocess and dQ (or the cast) one per (query block,
 * batch, query head), dK/dV (or the fused pass) one per (key block, batch, kv head). */
static void expected_bwd_grids(const problem *p, const aotk__kernel_entry *const rows[3], int64_t grids[3]) {
  grids[0] = ceil_div(stats_stride(p), rows[0]->block_m) * p->batch * p->heads_q; /* over the padded rows */
  grids[1] = ceil_div(p->seqlen_k, rows[1]->block_n) * p->batch * p->heads_kv;
  grids[2] = ceil_div(p->seqlen_q, rows[2]->block_m) * p->batch * p->heads_q;
}

/* The arguments dK/dV and dQ share: stride_ab, and from head_dim_qk8 on (the indices given). */
static void check_bwd_feature_args(const char *what, const char *kernel, const recorded_launch *launch,
                                   const problem *p, const feature_expectation *expected, int stride_ab,
                                   int head_dim_qk8) {
  CHECK_MSG(arg_i64(launch, stride_ab) == expected->alibi_batch_stride, "%s: %s's stride_ab %lld, expected %lld", what,
            kernel, (long long)arg_i64(launch, stride_ab), (long long)expected->alibi_batch_stride);
  check_int(what, kernel, launch, head_dim_qk8, p->head_dim / 8, "head_dim_qk8");
  check_int(what, kernel, launch, head_dim_qk8 + 1, dim_v(p) / 8, "head_dim_v8");
  check_int(what, kernel, launch, head_dim_qk8 + 2, expected->window_left, "window_left");
  check_int(what, kernel, launch, head_dim_qk8 + 3, expected->window_right, "window_right");
  CHECK_MSG(arg_i32(launch, head_dim_qk8 + 4) == expected->flags, "%s: %s's flags %#x, expected %#x", what, kernel,
            (unsigned)arg_i32(launch, head_dim_qk8 + 4), (unsigned)expected->flags);
  check_float(what, kernel, launch, head_dim_qk8 + 5, expected->scale, "softmax_scale");
  check_float(what, kernel, launch, head_dim_qk8 + 6, expected->qk_scale_log2, "qk_scale_log2");
  check_float(what, kernel, launch, head_dim_qk8 + 7, expected->softcap_scale, "softcap_scale");
  check_float(what, kernel, launch, head_dim_qk8 + 8, expected->softcap_log2, "softcap_log2");
  CHECK_MSG((uint32_t)arg_i32(launch, head_dim_qk8 + 9) == expected->dropout_threshold,
            "%s: %s's dropout_threshold %u, expected %u", what, kernel, (uint32_t)arg_i32(launch, head_dim_qk8 + 9),
            expected->dropout_threshold);
  check_float(what, kernel, launch, head_dim_qk8 + 10, expected->dropout_scale, "dropout_scale");
}

/* aotk_query(AOTK_OP_ATTN_BWD) and then aotk_attn_bwd with exactly the reported workspace: the query
 * describes the dK/dV kernel, the workspace (larger with dsinks) and the features; the call launches
 * preprocess, dK/dV and dQ in that order on the stream, and the sink reduction fourth when dsinks is
 * asked for, each with its row's grid, block and shared memory, and its arguments in the catalog's
 * order. Where the non-deterministic backward runs (expect_bwd_fused), the fused pass and the cast take
 * the second and third places, the workspace holds the accumulator too, which is cleared on the stream
 * before the first launch and mapped as the fused pass's fifth descriptor, and the statistics' bytes
 * alone are refused. `p` describes the problem as for check_launch. */
static void check_bwd_launch(const char *what, const aotk_attn_params *params, const problem *p) {
  const feature_expectation expected = expect_features(params, p->head_dim);
  const bool dsinks = params->dsinks.data != NULL;
  const int launches = 3 + dsinks;
  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "%s: aotk_query loaded or launched (%s)", what, called_functions());
  const aotk__kernel_entry *rows[4];
  expected_bwd_rows_of(params, info.arch, info.from_ptx, p, info.aligned, expected.extras, rows);
  const bool fused = expect_bwd_fused(params, info.arch, info.from_ptx, fake.max_shared_bytes);
  /* The dK/dV pass is a Gluon kernel (four descriptors, five for the fused pass). */
  const bool hopper = fused || expect_bwd_hopper(params, info.arch, info.from_ptx, fake.max_shared_bytes);
  rows[3] = expected_row(AOTK__FAMILY_ATTN_BWD_SINK_REDUCE, info.arch, p->dtype, 0, 0, 0, 0, p->seqlen_q);
  CHECK_MSG(rows[0] != NULL && rows[1] != NULL && rows[2] != NULL && rows[3] != NULL,
            "%s: a backward family has no sm_%d row", what, info.arch);
  if (rows[0] == NULL || rows[1] == NULL || rows[2] == NULL || rows[3] == NULL) return;
  int64_t grids[4];
  expected_bwd_grids(p, rows, grids);
  grids[3] = p->heads_q;
  const size_t statistics_bytes = bwd_workspace_bytes_for(p, dsinks);
  const size_t workspace_bytes = fused ? bwd_fused_workspace_bytes_for(p, dsinks) : statistics_bytes;
  const void *accumulator = byte_offset(FAKE_WORKSPACE, bwd_accumulator_offset(p, dsinks));
  const char *name_prefix = fused ? "attn_bwd_fused_hopper_" : "attn_bwd_dkdv_";
  CHECK(info.struct_size == sizeof info);
  CHECK_MSG(strncmp(info.kernel_name, name_prefix, strlen(name_prefix)) == 0 &&
                strcmp(info.kernel_name, rows[1]->name) == 0,
            "%s: aotk_query names %s, expected %s", what, info.kernel_name, rows[1]->name);
  CHECK_MSG(info.launches == launches, "%s: launches %d, expected %d", what, info.launches, launches);
  CHECK_MSG(info.workspace_bytes == workspace_bytes,
            "%s: workspace_bytes %zu, expected 8 * %lld * %lld * round_up(%lld, 128)%s%s = %zu", what,
            info.workspace_bytes, (long long)p->batch, (long long)p->heads_q, (long long)p->seqlen_q,
            dsinks ? " + the sink partials" : "", fused ? ", rounded up to 256, + the dQ accumulator" : "",
            workspace_bytes);
  CHECK(info.num_warps == rows[1]->num_warps && info.shared_bytes == rows[1]->shared_bytes &&
        info.block_m == rows[1]->block_m && info.block_n == rows[1]->block_n && info.aligned == rows[1]->aligned);
  CHECK_MSG(info.grid == grids[1], "%s: info.grid %lld, expected %lld", what, (long long)info.grid,
            (long long)grids[1]);
  CHECK_MSG(info.head_dim_qk == rows[1]->head_dim_qk && info.head_dim_v == rows[1]->head_dim_v,
            "%s: aotk_query reports head dims %d/%d, %s has %d/%d", what, info.head_dim_qk, info.head_dim_v,
            rows[1]->name, rows[1]->head_dim_qk, rows[1]->head_dim_v);
  const uint32_t features = expected_info_features(&expected, p, &info) |
                            (hopper ? AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED : 0) |
                            (fused ? AOTK_FEATURE_NONDETERMINISTIC : 0);
  CHECK_MSG(info.features == features, "%s: features %#x, expected %#x", what, info.features, features);
  CHECK_MSG(fake.calls[CALL_cuTensorMapEncodeTiled] == 0 && fake.calls[CALL_cuMemsetD32Async] == 0,
            "%s: aotk_query encoded tensor maps or cleared memory (%s)", what, called_functions());

  reset_launch_log();
  int launches_before = fake.launches;
  if (fused) {
    /* What the deterministic plan needs is not enough: refused once the plan is known, before anything
     * is loaded, encoded, cleared or launched. */
    reset_calls();
    status = aotk_attn_bwd(params, FAKE_WORKSPACE, statistics_bytes, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL && message_mentions("workspace"),
              "%s: the statistics' %zu bytes alone: %s (%s)", what, statistics_bytes, aotk_status_name(status),
              aotk_last_error());
    CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuTensorMapEncodeTiled] == 0 &&
                  fake.calls[CALL_cuMemsetD32Async] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
              "%s: the statistics' bytes alone reached %s", what, called_functions());
  }
  reset_calls();
  status = aotk_attn_bwd(params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_bwd %s (%s)", what, aotk_status_name(status), aotk_last_error());
  CHECK_MSG(aotk_last_error()[0] == '\0', "%s: a success left the message \"%s\"", what, aotk_last_error());
  CHECK_MSG(fake.launches == launches_before + launches && fake.logged_launches == launches,
            "%s: %d launches, expected %d", what, fake.launches - launches_before, launches);
  /* The accumulator is cleared once, on the caller's stream, before any launch: before the fused pass
   * adds into it, and before the pre-pass too, since only a failing launch may leave earlier work
   * enqueued (include/aotk.h, aotk_attn_bwd). No other plan clears anything. */
  CHECK_MSG(fake.calls[CALL_cuMemsetD32Async] == (fused ? 1 : 0) && fake.memsets == (fused ? 1 : 0),
            "%s: %d cuMemsetD32Async calls, expected %d", what, fake.calls[CALL_cuMemsetD32Async], fused ? 1 : 0);
  if (fused && fake.memsets == 1) {
    CHECK_MSG(fake.memset_destination == (CUdeviceptr)(uintptr_t)accumulator && fake.memset_value == 0 &&
                  fake.memset_count == bwd_accumulator_elements(p) && fake.memset_stream == (CUstream)FAKE_STREAM,
              "%s: cleared %zu words of %#llx to %u on stream %p; expected %zu words of %p (the workspace + %zu) to 0 "
              "on the caller's",
              what, fake.memset_count, (unsigned long long)fake.memset_destination, fake.memset_value,
              (void *)fake.memset_stream, bwd_accumulator_elements(p), accumulator, bwd_accumulator_offset(p, dsinks));
    CHECK_MSG(fake.memset_after_launches == 0, "%s: the accumulator cleared after %d launches", what,
              fake.memset_after_launches);
  }
  if (status != AOTK_OK || fake.logged_launches != launches) return;

  /* The Gluon dK/dV pass takes attn_bwd_dkdv's arguments in the same slots, then four descriptors; the
   * fused pass five. */
  const int descriptors = fused ? FUSED_DESCRIPTORS : hopper ? 4 : 0;
  const int order[4] = {KERNEL_BWD_PREPROCESS,
                        fused    ? KERNEL_BWD_FUSED_HOPPER
                        : hopper ? KERNEL_BWD_DKDV_HOPPER
                                 : KERNEL_BWD_DKDV,
                        fused ? KERNEL_BWD_DQ_CONVERT : KERNEL_BWD_DQ, KERNEL_BWD_SINK_REDUCE};
  const int scratch_index[4] = {PRE_GLOBAL_SCRATCH, DKDV_GLOBAL_SCRATCH + descriptors * TMA_DESC_SLOTS,
                                fused ? CONVERT_GLOBAL_SCRATCH : DQ_GLOBAL_SCRATCH, REDUCE_GLOBAL_SCRATCH};
  for (int i = 0; i < launches; i++) {
    const recorded_launch *launch = &fake.launch_log[i];
    const char *name = kernel_signatures[launch->kernel].function;
    CHECK_MSG(launch->kernel == order[i], "%s: launch %d is %s, expected %s", what, i + 1, name,
              kernel_signatures[order[i]].function);
    CHECK_MSG(launch->grid[0] == (unsigned)grids[i] && launch->grid[1] == 1 && launch->grid[2] == 1,
              "%s: %s grid (%u, %u, %u), expected (%lld, 1, 1)", what, name, launch->grid[0], launch->grid[1],
              launch->grid[2], (long long)grids[i]);
    CHECK_MSG(launch->block[0] == 32u * (unsigned)rows[i]->num_warps && launch->block[1] == 1 && launch->block[2] == 1,
              "%s: %s block (%u, %u, %u) for %d warps", what, name, launch->block[0], launch->block[1],
              launch->block[2], rows[i]->num_warps);
    CHECK_MSG(launch->shared_bytes == (unsigned)rows[i]->shared_bytes, "%s: %s with %u bytes of shared memory, %s needs %d",
              what, name, launch->shared_bytes, rows[i]->name, rows[i]->shared_bytes);
    CHECK_MSG(launch->stream == (CUstream)FAKE_STREAM, "%s: %s on another stream", what, name);
    CHECK(launch->extra == NULL);
    CHECK_MSG(arg_pointer(launch, scratch_index[i]) == 0 && arg_pointer(launch, scratch_index[i] + 1) == 0,
              "%s: %s's hidden scratch pointers are not NULL", what, name);
    for (int j = 0; j < i; j++) CHECK(launch->function != fake.launch_log[j].function);
  }

  const aotk_tensor *q = &params->q, *k = &params->k, *v = &params->v, *out = &params->out, *lse = &params->lse;
  const aotk_tensor *dout = &params->dout, *dq = &params->dq, *dk = &params->dk, *dv = &params->dv;
  const int64_t pre_blocks = ceil_div(stats_stride(p), rows[0]->block_m);

  const recorded_launch *pre = &fake.launch_log[0];
  const char *kernel = "attn_bwd_preprocess";
  const void *lse_log2 = byte_offset(FAKE_WORKSPACE, bwd_stats_bytes(p) / 2);
  const void *sink_partial = dsinks ? byte_offset(FAKE_WORKSPACE, bwd_stats_bytes(p)) : NULL;
  check_pointer(what, kernel, pre, PRE_OUT, out->data, "out");
  check_pointer(what, kernel, pre, PRE_DOUT, dout->data, "dout");
  check_pointer(what, kernel, pre, PRE_LSE, lse->data, "lse");
  check_pointer(what, kernel, pre, PRE_DELTA, FAKE_WORKSPACE, "delta (the workspace)");
  check_pointer(what, kernel, pre, PRE_LSE_LOG2, lse_log2, "lse * log2(e) (the statistics' second half)");
  check_pointer(what, kernel, pre, PRE_CU_SEQLENS_Q, params->cu_seqlens_q.data, "cu_seqlens_q");
  check_pointer(what, kernel, pre, PRE_SINKS, dsinks ? params->sinks.data : NULL, "sinks (only for dsinks)");
  check_pointer(what, kernel, pre, PRE_SINK_PARTIAL, sink_partial, "the sink partials (after the statistics)");
  check_strides(what, kernel, pre, PRE_STRIDE_OB, out, "out");
  check_strides(what, kernel, pre, PRE_STRIDE_DOB, dout, "dout");
  const int64_t stride_lb = expected.varlen ? 0 : lse->strides[0], stride_lh = lse->strides[expected.varlen ? 0 : 1];
  CHECK_MSG(arg_i64(pre, PRE_STRIDE_LB) == stride_lb && arg_i32(pre, PRE_STRIDE_LH) == stride_lh,
            "%s: the pre-pass's lse strides (%lld, %d), expected (%lld, %lld)", what,
            (long long)arg_i64(pre, PRE_STRIDE_LB), arg_i32(pre, PRE_STRIDE_LH), (long long)stride_lb,
            (long long)stride_lh);
  check_int(what, kernel, pre, PRE_SEQLEN_Q, p->seqlen_q, "seqlen_q");
  check_int(what, kernel, pre, PRE_HEADS_Q, p->heads_q, "heads_q");
  check_int(what, kernel, pre, PRE_NUM_SEQS, p->batch, "num_seqs");
  /* The pre-pass covers the padded rows of the statistics too. */
  check_int(what, kernel, pre, PRE_NUM_M_BLOCKS, pre_blocks, "num_m_blocks");
  check_int(what, kernel, pre, PRE_STATS_STRIDE, stats_stride(p), "stats_stride");
  check_int(what, kernel, pre, PRE_HEAD_DIM_V8, dim_v(p) / 8, "head_dim_v8");
  /* Only the layout and whether to sum the sink gradient matter to the pre-pass. */
  check_int(what, kernel, pre, PRE_FLAGS, (expected.flags & FLAG_VARLEN) | (dsinks ? FLAG_SINKS : 0), "flags");

  const recorded_launch *dkdv = &fake.launch_log[1];
  kernel = kernel_signatures[order[1]].function;
  if (hopper) {
    /* The accumulator as the fused pass maps it: fp32 [batch * heads_q, stats_stride, head_dim_qk] at its
     * offset in the workspace, read in tiles of the pass's query rows. */
    const aotk_tensor accumulator_view = {(void *)accumulator,
                                          AOTK_DTYPE_FLOAT32,
                                          4,
                                          {p->batch * p->heads_q, stats_stride(p), 1, p->head_dim, 0, 0},
                                          {stats_stride(p) * p->head_dim, p->head_dim, p->head_dim, 1, 0, 0}};
    const aotk_tensor *mapped[FUSED_DESCRIPTORS] = {q, k, v, dout, &accumulator_view};
    static const char *const mapped_names[FUSED_DESCRIPTORS] = {"q", "k", "v", "dout", "the dQ accumulator"};
    const int32_t tile_rows[FUSED_DESCRIPTORS] = {rows[1]->block_m, rows[1]->block_n, rows[1]->block_n,
                                                  rows[1]->block_m, rows[1]->block_m};
    check_descriptors(what, dkdv, rows[1], 0, descriptors, mapped, mapped_names, tile_rows, DKDV_GLOBAL_SCRATCH);
  } else {
    CHECK_MSG(fake.encode_count == 0 && dkdv->maps_recorded == 0, "%s: the Triton dK/dV pass encoded %d maps", what,
              fake.encode_count);
  }
  const void *dkdv_pointers[] = {q->data, k->data, v->data, dout->data, lse_log2, FAKE_WORKSPACE, dk->data, dv->data,
                                 params->cu_seqlens_q.data, params->cu_seqlens_k.data, params->alibi_slopes.data,
                                 expected.rng_state};
  static const char *const dkdv_pointer_names[] = {"q", "k", "v", "dout", "lse_log2", "delta", "dk", "dv",
                                                   "cu_seqlens_q", "cu_seqlens_k", "alibi_slopes", "rng_state"};
  for (int i = 0; i < 12; i++) check_pointer(what, kernel, dkdv, DKDV_Q + i, dkdv_pointers[i], dkdv_pointer_names[i]);
  const aotk_tensor *dkdv_strided[] = {q, k, v, dout, dk, dv};
  for (int i = 0; i < 6; i++) {
    check_strides(what, kernel, dkdv, DKDV_STRIDE_QB + 3 * i, dkdv_strided[i], dkdv_pointer_names[i < 4 ? i : i + 2]);
  }
  check_int(what, kernel, dkdv, DKDV_SEQLEN_Q, p->seqlen_q, "seqlen_q");
  check_int(what, kernel, dkdv, DKDV_SEQLEN_K, p->seqlen_k, "seqlen_k");
  check_int(what, kernel, dkdv, DKDV_HEADS_Q, p->heads_q, "heads_q");
  check_int(what, kernel, dkdv, DKDV_HEADS_KV, p->heads_kv, "heads_kv");
  check_int(what, kernel, dkdv, DKDV_GROUP_SIZE, p->heads_q / p->heads_kv, "group_size");
  check_int(what, kernel, dkdv, DKDV_NUM_N_BLOCKS, ceil_div(p->seqlen_k, rows[1]->block_n), "num_n_blocks");
  check_int(what, kernel, dkdv, DKDV_STATS_STRIDE, stats_stride(p), "stats_stride");
  check_bwd_feature_args(what, kernel, dkdv, p, &expected, DKDV_STRIDE_AB, DKDV_HEAD_DIM_QK8);

  const recorded_launch *dq_launch = &fake.launch_log[2];
  kernel = kernel_signatures[order[2]].function;
  if (fused) {
    /* The cast reads the accumulator the fused pass filled and writes dq, over seqlen_q's blocks. */
    check_pointer(what, kernel, dq_launch, CONVERT_DQ_ACC, accumulator, "DQAcc (the accumulator)");
    check_pointer(what, kernel, dq_launch, CONVERT_DQ, dq->data, "dq");
    check_pointer(what, kernel, dq_launch, CONVERT_CU_SEQLENS_Q, params->cu_seqlens_q.data, "cu_seqlens_q");
    check_strides(what, kernel, dq_launch, CONVERT_STRIDE_DQB, dq, "dq");
    check_int(what, kernel, dq_launch, CONVERT_SEQLEN_Q, p->seqlen_q, "seqlen_q");
    check_int(what, kernel, dq_launch, CONVERT_HEADS_Q, p->heads_q, "heads_q");
    check_int(what, kernel, dq_launch, CONVERT_NUM_M_BLOCKS, ceil_div(p->seqlen_q, rows[2]->block_m), "num_m_blocks");
    check_int(what, kernel, dq_launch, CONVERT_STATS_STRIDE, stats_stride(p), "stats_stride");
    /* Of the flags only the layout matters to the cast. */
    check_int(what, kernel, dq_launch, CONVERT_FLAGS, expected.flags & FLAG_VARLEN, "flags");
  } else {
    const void *dq_pointers[] = {q->data, k->data, v->data, dout->data, lse_log2, FAKE_WORKSPACE, dq->data,
                                 params->cu_seqlens_q.data, params->cu_seqlens_k.data, params->alibi_slopes.data,
                                 expected.rng_state};
    static const char *const dq_pointer_names[] = {"q", "k", "v", "dout", "lse_log2", "delta", "dq",
                                                   "cu_seqlens_q", "cu_seqlens_k", "alibi_slopes", "rng_state"};
    for (int i = 0; i < 11; i++) check_pointer(what, kernel, dq_launch, DQ_Q + i, dq_pointers[i], dq_pointer_names[i]);
    const aotk_tensor *dq_strided[] = {q, k, v, dout, dq};
    for (int i = 0; i < 5; i++) {
      check_strides(what, kernel, dq_launch, DQ_STRIDE_QB + 3 * i, dq_strided[i], dq_pointer_names[i < 4 ? i : 6]);
    }
    check_int(what, kernel, dq_launch, DQ_SEQLEN_Q, p->seqlen_q, "seqlen_q");
    check_int(what, kernel, dq_launch, DQ_SEQLEN_K, p->seqlen_k, "seqlen_k");
    check_int(what, kernel, dq_launch, DQ_HEADS_Q, p->heads_q, "heads_q");
    check_int(what, kernel, dq_launch, DQ_GROUP_SIZE, p->heads_q / p->heads_kv, "group_size");
    check_int(what, kernel, dq_launch, DQ_NUM_M_BLOCKS, ceil_div(p->seqlen_q, rows[2]->block_m), "num_m_blocks");
    check_int(what, kernel, dq_launch, DQ_STATS_STRIDE, stats_stride(p), "stats_stride");
    check_bwd_feature_args(what, kernel, dq_launch, p, &expected, DQ_STRIDE_AB, DQ_HEAD_DIM_QK8);
  }
  if (!dsinks) return;

  /* The sink reduction: one program per query head sums its batch * pre-pass-blocks partials. */
  const recorded_launch *reduce = &fake.launch_log[3];
  kernel = "attn_bwd_sink_reduce";
  check_pointer(what, kernel, reduce, REDUCE_SINK_PARTIAL, sink_partial, "sink partials");
  check_pointer(what, kernel, reduce, REDUCE_DSINKS, params->dsinks.data, "dsinks");
  check_int(what, kernel, reduce, REDUCE_COUNT, p->batch * pre_blocks, "count");
}

static void test_bwd_launch_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);

  problem gqa = {AOTK_DTYPE_BFLOAT16, 3, 1500, 777, 12, 4, 128, true, 0};
  aotk_attn_params params = strided_bwd_params(gqa);
  params.causal = 1;
  check_bwd_launch("bf16 d128 GQA causal, strided, default scale", &params, &gqa);
  /* Three images loaded, and each kernel above 48 KiB of shared memory opted in once. */
  const aotk__kernel_entry *rows[3];
  expected_bwd_rows_of(&params, 90, false, &gqa, 1, 0, rows);
  int opt_ins = 0;
  for (int i = 0; i < 3; i++) opt_ins += rows[i] != NULL && rows[i]->shared_bytes > 48 * 1024;
  CHECK_MSG(fake.loaded_images == 3 && fake.loaded_elf == 3, "loaded %d images (%d ELF)", fake.loaded_images,
            fake.loaded_elf);
  CHECK_MSG(fake.calls[CALL_cuKernelSetAttribute] == opt_ins, "%d shared-memory opt-ins, expected %d",
            fake.calls[CALL_cuKernelSetAttribute], opt_ins);
  /* The kernels are loaded once: the second call reuses them. */
  check_bwd_launch("the same again", &params, &gqa);
  CHECK_MSG(fake.loaded_images == 3 && fake.calls[CALL_cuLibraryLoadData] == 0, "loaded %d images",
            fake.loaded_images);
  CHECK(fake.launches == 6);

  problem mha = {AOTK_DTYPE_FLOAT16, 1, 37, 1000, 4, 4, 64, true, 0};
  params = strided_bwd_params(mha);
  params.softmax_scale = 0.3f;
  params.deterministic = 1;
  check_bwd_launch("fp16 d64 MHA, explicit scale, deterministic", &params, &mha);

  /* Past the dK/dV pass's seqlen_k bound (a wider key tile on sm_90 d128), MQA, causal with more
   * keys than queries. */
  problem long_keys = {AOTK_DTYPE_BFLOAT16, 2, 300, 5000, 4, 1, 128, true, 0};
  params = strided_bwd_params(long_keys);
  params.causal = 1;
  check_bwd_launch("bf16 d128 MQA causal, seqlen_k 5000", &params, &long_keys);

  /* More queries than keys, causal: some rows see no key. Contiguous, unaligned (dv one element in). */
  problem long_queries = {AOTK_DTYPE_FLOAT16, 2, 2049, 63, 6, 2, 64, true, 0};
  params = bwd_params_for(long_queries);
  params.causal = 1;
  params.dv.data = byte_offset(FAKE_DV, 2);
  check_bwd_launch("fp16 d64 GQA causal, seqlen_q > seqlen_k, unaligned", &params, &long_queries);

  /* Layouts the Gluon passes read: non-deterministic, the fused pass and the cast; the same calls
   * deterministic, the Gluon dK/dV pass and the dQ pass, with the smaller workspace and no clear. */
  static const struct {
    const char *what;
    problem shape;
    int causal;
  } gluon_cases[] = {
      {"bf16 d128 GQA causal, padded rows", {AOTK_DTYPE_BFLOAT16, 3, 1500, 777, 12, 4, 128, true, 0}, 1},
      {"fp16 d64 MHA, one head of one sequence, 17 queries", {AOTK_DTYPE_FLOAT16, 1, 17, 1000, 1, 1, 64, true, 0}, 0},
      {"fp16 d64 GQA causal, seqlen_q > seqlen_k", {AOTK_DTYPE_FLOAT16, 2, 2049, 63, 6, 2, 64, true, 0}, 1},
  };
  for (size_t i = 0; i < sizeof gluon_cases / sizeof gluon_cases[0]; i++) {
    const problem *p = &gluon_cases[i].shape;
    for (int deterministic = 0; deterministic <= 1; deterministic++) {
      params = padded_bwd_params(*p);
      params.causal = gluon_cases[i].causal;
      params.deterministic = deterministic;
      char what[128];
      snprintf(what, sizeof what, "%s, deterministic %d", gluon_cases[i].what, deterministic);
      CHECK_MSG(expect_bwd_fused(&params, 90, false, SHARED_SM90) == !deterministic &&
                    expect_bwd_hopper(&params, 90, false, SHARED_SM90),
                "%s: not the Gluon passes' case", what);
      check_bwd_launch(what, &params, p);
    }
  }
  uninstall_fake_gpu();
}

/* ---- the 0.2 features' launches --------------------------------------------------------------- */

/* One forward case: a problem and what to turn on. */
typedef struct feature_case {
  const char *what;
  problem shape;
  void (*set)(aotk_attn_params *params, const problem *p);
} feature_case;

static void causal(aotk_attn_params *a, const problem *p) { (void)p, a->causal = 1; }
static void causal_top_left(aotk_attn_params *a, const problem *p) {
  (void)p, a->causal = 1, a->causal_align = AOTK_ALIGN_TOP_LEFT;
}
static void causal_explicit_right_0(aotk_attn_params *a, const problem *p) {
  (void)p, a->causal = 1, a->window_right = 0;
}
static void causal_window_left(aotk_attn_params *a, const problem *p) {
  (void)p, a->causal = 1, a->window_left = 64, a->window_right = -1;
}
static void window_left_only(aotk_attn_params *a, const problem *p) { (void)p, a->window_left = 100, a->window_right = -1; }
static void window_right_only(aotk_attn_params *a, const problem *p) { (void)p, a->window_left = -1, a->window_right = 5; }
static void window_both(aotk_attn_params *a, const problem *p) { (void)p, a->window_left = 16, a->window_right = 3; }
static void window_diagonal(aotk_attn_params *a, const problem *p) { (void)p, a->window_left = 0, a->window_right = 0; }
static void window_top_left(aotk_attn_params *a, const problem *p) {
  (void)p, a->window_left = 10, a->window_right = 10, a->causal_align = AOTK_ALIGN_TOP_LEFT;
}
static void top_left_alone(aotk_attn_params *a, const problem *p) { (void)p, a->causal_align = AOTK_ALIGN_TOP_LEFT; }
static void softcap_30(aotk_attn_params *a, const problem *p) { (void)p, a->softcap = 30.0f; }
static void softcap_scale(aotk_attn_params *a, const problem *p) {
  (void)p, a->softcap = 50.0f, a->softmax_scale = 0.0625f, a->causal = 1;
}
static void alibi_per_head(aotk_attn_params *a, const problem *p) {
  a->alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p->heads_q);
}
static void alibi_per_sequence(aotk_attn_params *a, const problem *p) { /* rows padded to a distinct stride */
  a->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p->batch, p->heads_q);
  a->alibi_slopes.strides[0] = p->heads_q + 24;
}
static void alibi_broadcast(aotk_attn_params *a, const problem *p) { /* one row for every sequence */
  alibi_per_sequence(a, p);
  a->alibi_slopes.strides[0] = 0;
}
static void sinks_on(aotk_attn_params *a, const problem *p) {
  a->sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, p->heads_q);
}
static void sinks_softcap(aotk_attn_params *a, const problem *p) { sinks_on(a, p), softcap_30(a, p); }
static void dropout_on(aotk_attn_params *a, const problem *p) {
  (void)p, a->dropout_p = 0.1f, a->rng_state = aotk_tensor_1d(FAKE_RNG_STATE, AOTK_DTYPE_INT64, 2);
}
static void dropout_half(aotk_attn_params *a, const problem *p) { dropout_on(a, p), a->dropout_p = 0.5f; }
static void dropout_tiny(aotk_attn_params *a, const problem *p) { dropout_on(a, p), a->dropout_p = 1e-6f; }
static void dropout_almost_all(aotk_attn_params *a, const problem *p) {
  dropout_on(a, p), a->dropout_p = 0.99999994f; /* the largest float below 1 */
}
static void dropout_off_rng_given(aotk_attn_params *a, const problem *p) { /* the state is ignored */
  dropout_on(a, p), a->dropout_p = 0.0f;
}
static void dropout_mask_on(aotk_attn_params *a, const problem *p) {
  dropout_on(a, p);
  a->dropout_mask = mask_for(a);
}
static void dropout_mask_padded(aotk_attn_params *a, const problem *p) { /* rows padded, heads far apart */
  dropout_mask_on(a, p);
  aotk_tensor *m = &a->dropout_mask;
  m->strides[2] = m->shape[3] + 64, m->strides[1] = m->shape[2] * m->strides[2] + 4096;
  m->strides[0] = m->shape[1] * m->strides[1] + 16;
}
static void everything(aotk_attn_params *a, const problem *p) {
  causal_top_left(a, p), a->window_left = 32, softcap_30(a, p), alibi_per_sequence(a, p), sinks_on(a, p);
  dropout_mask_on(a, p);
}
static void nothing(aotk_attn_params *a, const problem *p) { (void)a, (void)p; }

static const problem feature_problem = {AOTK_DTYPE_BFLOAT16, 2, 300, 517, 8, 2, 64, true, 0};
static const problem feature_problem_no_lse = {AOTK_DTYPE_FLOAT16, 3, 65, 40, 4, 4, 128, false, 0};

static const feature_case feature_cases[] = {
    {"no features", feature_problem, nothing},
    {"causal (bottom-right)", feature_problem, causal},
    {"causal top-left", feature_problem, causal_top_left},
    {"causal with window_right 0 given", feature_problem, causal_explicit_right_0},
    {"causal with window_left 64 (window_right -1 resolves to 0)", feature_problem, causal_window_left},
    {"window_left 100 only", feature_problem, window_left_only},
    {"window_right 5 only", feature_problem, window_right_only},
    {"window (16, 3)", feature_problem, window_both},
    {"window (0, 0): the diagonal", feature_problem, window_diagonal},
    {"window (10, 10) top-left", feature_problem, window_top_left},
    {"top-left alignment without a mask", feature_problem, top_left_alone},
    {"softcap 30", feature_problem, softcap_30},
    {"softcap 50, scale 1/16, causal", feature_problem_no_lse, softcap_scale},
    {"ALiBi [heads_q]", feature_problem, alibi_per_head},
    {"ALiBi [batch, heads_q], padded rows", feature_problem, alibi_per_sequence},
    {"ALiBi [batch, heads_q], batch stride 0", feature_problem_no_lse, alibi_broadcast},
    {"sinks", feature_problem, sinks_on},
    {"dropout 0.1", feature_problem, dropout_on},
    {"dropout 0.5", feature_problem_no_lse, dropout_half},
    {"dropout 1e-6", feature_problem, dropout_tiny},
    {"dropout just below 1", feature_problem, dropout_almost_all},
    {"dropout 0 with an rng_state", feature_problem, dropout_off_rng_given},
    {"dropout 0.1 with its mask", feature_problem, dropout_mask_on},
    {"dropout with a padded mask", feature_problem_no_lse, dropout_mask_padded},
    {"everything at once", feature_problem, everything},
};

/* Every feature alone and together, dense, on sm_90 and sm_80: the flags, windows, pointers and scalars
 * each launch gets, the row (the EXTRAS variant only when softcap, ALiBi or dropout is on), and
 * what aotk_query reports. */
static void test_feature_launches(void) {
  static const gpu gpus[] = {{90, SHARED_SM90, 90, 0}, {86, SHARED_SM86, 80, 0}};
  int extras_cases = 0, plain_cases = 0;
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (size_t i = 0; i < sizeof feature_cases / sizeof feature_cases[0]; i++) {
      const feature_case *c = &feature_cases[i];
      aotk_attn_params params = strided_params(c->shape);
      c->set(&params, &c->shape);
      char what[160];
      snprintf(what, sizeof what, "cc %d, %s", gpus[g].compute_capability, c->what);
      check_launch(what, &params, &c->shape);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
      const bool extras = params.softcap > 0.0f || params.alibi_slopes.data != NULL || params.dropout_p > 0.0f;
      CHECK_MSG((strstr(info.kernel_name, "_extras_") != NULL) == extras &&
                    ((info.features & AOTK_FEATURE_EXTRAS_KERNEL) != 0) == extras,
                "%s: runs %s (features %#x)", what, info.kernel_name, info.features);
      extras_cases += extras;
      plain_cases += !extras;
    }
  }
  printf("    %d cases with the EXTRAS kernel, %d without\n", extras_cases, plain_cases);
  uninstall_fake_gpu();
}

/* The pointer kernel's cases of test_feature_launches_literal: TMA cannot read q laid out heads-outer. */
static void window_both_heads_outer(aotk_attn_params *a, const problem *p) {
  window_both(a, p), make_heads_outer(&a->q);
}
static void softcap_heads_outer(aotk_attn_params *a, const problem *p) { softcap_30(a, p), make_heads_outer(&a->q); }

/* The same features through the argument slots, with literal values rather than the test's own rule:
 * causal turns window_right into 0 and leaves window_left unbounded; the flags are the bits of
 * kernels/attn_common.py (FLAG_REVERSE for the masks with a right bound alone); dropout 0.5 keeps words
 * >= 2^31 and scales by 2; the sinks pointer is in its slot exactly when sinks are given. On this sm_90
 * GPU every forward at d64 but dropout (any window, sinks in its epilogue, softcap and ALiBi in its EXTRAS
 * row) runs the warp-specialized TMA kernel, whose first forty arguments are the pointer kernel's: with
 * two consumer warpgroups, 300 query rows being short of the three-warpgroup kernel's 2048
 * (test_tma_eligibility). Dropout runs in the pointer kernel, the Triton TMA kernel having no d64; so do
 * a window and softcap with q laid out heads-outer, which TMA cannot read. */
#define WARP_SPECIALIZED_TMA (AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED)
static void test_feature_launches_literal(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const struct {
    const char *what;
    void (*set)(aotk_attn_params *params, const problem *p);
    int32_t window_left, window_right, flags;
    uint32_t features, dropout_threshold;
    float dropout_scale;
    int kernel; /* enum kernel_id */
  } cases[] = {
      {"nothing", nothing, -1, -1, FLAG_WRITE_LSE, WARP_SPECIALIZED_TMA, 0, 1.0f, KERNEL_ATTN_FWD_HOPPER},
      {"causal", causal, -1, 0, FLAG_WRITE_LSE | FLAG_REVERSE, AOTK_FEATURE_CAUSAL | WARP_SPECIALIZED_TMA, 0, 1.0f,
       KERNEL_ATTN_FWD_HOPPER},
      {"causal top-left", causal_top_left, -1, 0, FLAG_WRITE_LSE | FLAG_TOP_LEFT | FLAG_REVERSE,
       AOTK_FEATURE_CAUSAL | WARP_SPECIALIZED_TMA, 0, 1.0f, KERNEL_ATTN_FWD_HOPPER},
      {"causal, window_left 64", causal_window_left, 64, 0, FLAG_WRITE_LSE,
       AOTK_FEATURE_CAUSAL | AOTK_FEATURE_WINDOW | WARP_SPECIALIZED_TMA, 0, 1.0f, KERNEL_ATTN_FWD_HOPPER},
      {"window (16, 3)", window_both, 16, 3, FLAG_WRITE_LSE, AOTK_FEATURE_WINDOW | WARP_SPECIALIZED_TMA, 0, 1.0f,
       KERNEL_ATTN_FWD_HOPPER},
      {"window (16, 3), q heads-outer", window_both_heads_outer, 16, 3, FLAG_WRITE_LSE, AOTK_FEATURE_WINDOW, 0, 1.0f,
       KERNEL_ATTN_FWD},
      {"window_right 5", window_right_only, -1, 5, FLAG_WRITE_LSE | FLAG_REVERSE,
       AOTK_FEATURE_WINDOW | WARP_SPECIALIZED_TMA, 0, 1.0f, KERNEL_ATTN_FWD_HOPPER},
      {"softcap", softcap_30, -1, -1, FLAG_WRITE_LSE | FLAG_SOFTCAP,
       AOTK_FEATURE_SOFTCAP | AOTK_FEATURE_EXTRAS_KERNEL | WARP_SPECIALIZED_TMA, 0, 1.0f, KERNEL_ATTN_FWD_HOPPER},
      {"softcap, q heads-outer", softcap_heads_outer, -1, -1, FLAG_WRITE_LSE | FLAG_SOFTCAP,
       AOTK_FEATURE_SOFTCAP | AOTK_FEATURE_EXTRAS_KERNEL, 0, 1.0f, KERNEL_ATTN_FWD},
      {"ALiBi", alibi_per_head, -1, -1, FLAG_WRITE_LSE | FLAG_ALIBI,
       AOTK_FEATURE_ALIBI | AOTK_FEATURE_EXTRAS_KERNEL | WARP_SPECIALIZED_TMA, 0, 1.0f, KERNEL_ATTN_FWD_HOPPER},
      {"sinks (the warp-specialized kernel's epilogue)", sinks_on, -1, -1, FLAG_WRITE_LSE | FLAG_SINKS,
       AOTK_FEATURE_SINKS | WARP_SPECIALIZED_TMA, 0, 1.0f, KERNEL_ATTN_FWD_HOPPER},
      {"sinks and softcap", sinks_softcap, -1, -1, FLAG_WRITE_LSE | FLAG_SOFTCAP | FLAG_SINKS,
       AOTK_FEATURE_SOFTCAP | AOTK_FEATURE_SINKS | AOTK_FEATURE_EXTRAS_KERNEL | WARP_SPECIALIZED_TMA, 0, 1.0f,
       KERNEL_ATTN_FWD_HOPPER},
      {"dropout 0.5", dropout_half, -1, -1, FLAG_WRITE_LSE | FLAG_DROPOUT,
       AOTK_FEATURE_DROPOUT | AOTK_FEATURE_EXTRAS_KERNEL, 2147483648u, 2.0f, KERNEL_ATTN_FWD},
      {"dropout 0 with an rng_state", dropout_off_rng_given, -1, -1, FLAG_WRITE_LSE, WARP_SPECIALIZED_TMA, 0, 1.0f,
       KERNEL_ATTN_FWD_HOPPER},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aotk_attn_params params = params_for(feature_problem);
    cases[i].set(&params, &feature_problem);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
    CHECK_MSG(status == AOTK_OK && info.features == cases[i].features, "%s: %s, features %#x, expected %#x",
              cases[i].what, aotk_status_name(status), info.features, cases[i].features);
    reset_launch_log();
    CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK);
    const recorded_launch *launch = &fake.launch_log[0];
    CHECK_MSG(arg_i32(launch, ARG_WINDOW_LEFT) == cases[i].window_left &&
                  arg_i32(launch, ARG_WINDOW_RIGHT) == cases[i].window_right &&
                  arg_i32(launch, ARG_FLAGS) == cases[i].flags,
              "%s: window (%d, %d) flags %#x, expected (%d, %d) %#x", cases[i].what, arg_i32(launch, ARG_WINDOW_LEFT),
              arg_i32(launch, ARG_WINDOW_RIGHT), (unsigned)arg_i32(launch, ARG_FLAGS), cases[i].window_left,
              cases[i].window_right, (unsigned)cases[i].flags);
    CHECK_MSG((uint32_t)arg_i32(launch, ARG_DROPOUT_THRESHOLD) == cases[i].dropout_threshold &&
                  arg_f32(launch, ARG_DROPOUT_SCALE) == cases[i].dropout_scale,
              "%s: dropout threshold %u scale %g", cases[i].what, (uint32_t)arg_i32(launch, ARG_DROPOUT_THRESHOLD),
              (double)arg_f32(launch, ARG_DROPOUT_SCALE));
    CHECK(arg_i32(launch, ARG_HEAD_DIM_QK8) == 8 && arg_i32(launch, ARG_HEAD_DIM_V8) == 8);
    const uint64_t sinks = (cases[i].flags & FLAG_SINKS) != 0 ? (uint64_t)(uintptr_t)FAKE_SINKS : 0;
    CHECK_MSG(arg_pointer(launch, ARG_SINKS) == sinks, "%s: sinks %#llx, expected %#llx", cases[i].what,
              (unsigned long long)arg_pointer(launch, ARG_SINKS), (unsigned long long)sinks);
    CHECK_MSG(launch->kernel == cases[i].kernel, "%s: launched %s, expected %s", cases[i].what,
              kernel_signatures[launch->kernel].function, kernel_signatures[cases[i].kernel].function);
  }
  uninstall_fake_gpu();
}
#undef WARP_SPECIALIZED_TMA

/* Head dims: every multiple of 8 up to 256 runs, in the smallest compiled pair that holds it
 * ((32, 32), (64, 64), (128, 128), (256, 256), (256, 128)), told the true dims in eighths. On sm_90 the
 * Gluon forward runs (192, 128) unpadded where TMA can read the inputs and there is no dropout (as it
 * does its other pairs, which equal their compiled ones); with q heads-outer (no TMA) or with dropout
 * (which it lacks) the pointer kernel's (256, 128) runs. The backward pads (192, 128) everywhere: its
 * Gluon passes are 64 and 128 only. */
static void test_padded_head_dims(void) {
  static const struct {
    int64_t head_dim_qk, head_dim_v;
    int compiled_qk, compiled_v;
    const char *tag; /* in the forward's kernel name */
  } cases[] = {
      {8, 8, 32, 32, "_d32_"},        {16, 16, 32, 32, "_d32_"},      {32, 32, 32, 32, "_d32_"},
      {40, 40, 64, 64, "_d64_"},      {64, 64, 64, 64, "_d64_"},      {72, 72, 128, 128, "_d128_"},
      {80, 80, 128, 128, "_d128_"},   {96, 96, 128, 128, "_d128_"},   {128, 128, 128, 128, "_d128_"},
      {136, 136, 256, 256, "_d256_"}, {160, 160, 256, 256, "_d256_"}, {256, 256, 256, 256, "_d256_"},
      {192, 128, 256, 128, "_d256v128_"}, {256, 128, 256, 128, "_d256v128_"}, {200, 96, 256, 128, "_d256v128_"},
      {64, 128, 128, 128, "_d128_"},  {128, 64, 128, 128, "_d128_"},  {32, 8, 32, 32, "_d32_"},
      {128, 256, 256, 256, "_d256_"}, {192, 192, 256, 256, "_d256_"}, {8, 256, 256, 256, "_d256_"},
  };
  static const gpu gpus[] = {{90, SHARED_SM90, 90, 0}, {80, SHARED_SM80, 80, 0}, {120, SHARED_SM120, 80, 1}};
  int launches = 0;
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      problem p = {AOTK_DTYPE_FLOAT16, 2, 77, 130, 4, 2, cases[i].head_dim_qk, true, cases[i].head_dim_v};
      /* The forward three ways: contiguous (TMA-readable), q heads-outer, and with dropout. */
      for (int form = 0; form < 3; form++) {
        static const char *const forms[] = {"", ", q heads-outer", ", dropout"};
        char what[96];
        snprintf(what, sizeof what, "cc %d head dims %lld/%lld%s", gpus[g].compute_capability,
                 (long long)cases[i].head_dim_qk, (long long)cases[i].head_dim_v, forms[form]);
        aotk_attn_params params = params_for(p);
        if (form == 1) make_heads_outer(&params.q);
        if (form == 2) dropout_on(&params, &p);
        const bool gluon_192 = gpus[g].compute_capability == 90 && form == 0 && cases[i].head_dim_qk == 192 &&
                               cases[i].head_dim_v == 128;
        const int compiled_qk = gluon_192 ? 192 : cases[i].compiled_qk;
        const int compiled_v = gluon_192 ? 128 : cases[i].compiled_v;
        const char *tag = gluon_192 ? "attn_fwd_hopper_fp16_d192v128_" : cases[i].tag;
        aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
        aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
        const bool padded = compiled_qk > cases[i].head_dim_qk || compiled_v > cases[i].head_dim_v;
        CHECK_MSG(status == AOTK_OK && strstr(info.kernel_name, tag) != NULL && info.head_dim_qk == compiled_qk &&
                      info.head_dim_v == compiled_v &&
                      ((info.features & AOTK_FEATURE_PADDED_HEAD_DIM) != 0) == padded,
                  "%s: %s (%s), runs %s as %d/%d, features %#x; expected %s as %d/%d", what, aotk_status_name(status),
                  aotk_last_error(), info.kernel_name, info.head_dim_qk, info.head_dim_v, info.features, tag,
                  compiled_qk, compiled_v);
        check_launch(what, &params, &p);
        launches++;
      }
      /* The backward runs in the same pair; its pre-pass in the smallest v dim that holds head_dim_v. */
      char what[96];
      snprintf(what, sizeof what, "cc %d head dims %lld/%lld, backward", gpus[g].compute_capability,
               (long long)cases[i].head_dim_qk, (long long)cases[i].head_dim_v);
      aotk_attn_params params = bwd_params_for(p);
      check_bwd_launch(what, &params, &p);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK_MSG(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK && info.head_dim_qk == cases[i].compiled_qk &&
                    info.head_dim_v == cases[i].compiled_v,
                "%s: the backward runs %s as %d/%d", what, info.kernel_name, info.head_dim_qk, info.head_dim_v);
    }
  }
  printf("    %d forwards of %d head-dim pairs\n", launches, (int)(sizeof cases / sizeof cases[0]));
  uninstall_fake_gpu();
}

/* The variable-length layout: batch strides 0 (the kernels add each sequence's start from cu_seqlens),
 * sequence and head strides from the caller's first two dims, lengths and grids from max_seqlen, lse
 * [heads_q, total_q] as (batch stride 0, head stride its first), the num_seqs from cu_seqlens. */
static aotk_attn_params strided_varlen_params(problem p, int64_t total_q, int64_t total_k, bool bwd) {
  aotk_attn_params params = varlen_params_for(p, total_q, total_k, bwd);
  aotk_tensor *tensors[] = {&params.q, &params.k, &params.v, &params.out, &params.dout, &params.dq, &params.dk,
                            &params.dv};
  for (int t = 0; t < 8; t++) { /* rows padded, each tensor differently, keeping multiples of 16 */
    aotk_tensor *x = tensors[t];
    if (x->data == NULL) continue;
    x->strides[1] = x->shape[2] + 16 * (t + 1);
    x->strides[0] = x->shape[1] * x->strides[1] + 32 * t;
  }
  if (params.lse.data != NULL) params.lse.strides[0] = total_q + 48;
  return params;
}

static void test_varlen_launches(void) {
  static const gpu gpus[] = {{90, SHARED_SM90, 90, 0}, {86, SHARED_SM86, 80, 0}};
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    /* 5 sequences of at most 700 query and 1030 key rows, 2000 and 3000 rows in all. */
    problem p = {AOTK_DTYPE_BFLOAT16, 5, 700, 1030, 12, 4, 128, true, 0};
    aotk_attn_params params = strided_varlen_params(p, 2000, 3000, false);
    check_launch("varlen, strided, lse", &params, &p);
    params.causal = 1;
    check_launch("varlen causal", &params, &p);
    everything(&params, &p);
    check_launch("varlen with every feature and the mask", &params, &p);

    problem no_lse = {AOTK_DTYPE_FLOAT16, 1, 1, 1, 2, 1, 96, false, 64};
    params = strided_varlen_params(no_lse, 1, 1, false);
    check_launch("varlen, one sequence of one row, no lse, head dims 96/64", &params, &no_lse);

    /* The backward in the varlen layout. */
    params = strided_varlen_params(p, 2000, 3000, true);
    check_bwd_launch("varlen backward, strided", &params, &p);
    params.causal = 1;
    params.window_left = 100;
    dropout_on(&params, &p);
    alibi_per_sequence(&params, &p);
    sinks_on(&params, &p);
    params.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
    check_bwd_launch("varlen backward with every feature and dsinks", &params, &p);

    /* Literal checks of what the layout changes. */
    problem small = {AOTK_DTYPE_BFLOAT16, 3, 200, 300, 8, 2, 64, true, 0};
    params = varlen_params_for(small, 450, 700, false);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
    /* On sm_90 the plain varlen forward runs the Gluon kernel (which adds its feature bits). */
    const uint32_t varlen_features =
        AOTK_FEATURE_VARLEN |
        fwd_family_features(expected_fwd_family(&params, info.arch, info.from_ptx, fake.max_shared_bytes));
    CHECK_MSG(info.features == varlen_features, "varlen: features %#x, expected %#x", info.features, varlen_features);
    CHECK_MSG(info.grid == ceil_div(200, info.block_m) * 3 * 8, "varlen: grid %lld with block_m %d",
              (long long)info.grid, info.block_m);
    reset_launch_log();
    CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK);
    const recorded_launch *launch = &fake.launch_log[0];
    CHECK(arg_i64(launch, ARG_STRIDE_QB) == 0 && arg_i32(launch, ARG_STRIDE_QS) == 8 * 64 &&
          arg_i32(launch, ARG_STRIDE_QH) == 64);
    CHECK(arg_i64(launch, ARG_STRIDE_KB) == 0 && arg_i32(launch, ARG_STRIDE_KS) == 2 * 64);
    CHECK_MSG(arg_i64(launch, ARG_STRIDE_LB) == 0 && arg_i32(launch, ARG_STRIDE_LH) == 450,
              "varlen lse strides (%lld, %d), expected (0, 450)", (long long)arg_i64(launch, ARG_STRIDE_LB),
              arg_i32(launch, ARG_STRIDE_LH));
    CHECK(arg_i32(launch, ARG_SEQLEN_Q) == 200 && arg_i32(launch, ARG_SEQLEN_K) == 300);
    CHECK(arg_i32(launch, ARG_FLAGS) == (FLAG_WRITE_LSE | FLAG_VARLEN));
    CHECK(arg_pointer(launch, ARG_CU_SEQLENS_Q) == (uint64_t)(uintptr_t)FAKE_CU_SEQLENS_Q &&
          arg_pointer(launch, ARG_CU_SEQLENS_K) == (uint64_t)(uintptr_t)FAKE_CU_SEQLENS_K);
    CHECK(launch->grid[0] == (unsigned)info.grid);
  }
  uninstall_fake_gpu();
}

/* The dropout mask is a second launch, and only when asked for; the backward's sink reduction is a
 * fourth, only with dsinks, and its partial sums make the workspace grow: the deterministic plan's by
 * their bytes, the non-deterministic plan's (whose accumulator follows them at a 256-byte boundary) by
 * their bytes rounded up to 256. */
static void test_optional_launches(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_attn_params params = valid_params();
  dropout_on(&params, &default_problem);
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK && info.launches == 1);
  reset_launch_log();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK);
  CHECK_MSG(fake.logged_launches == 1, "dropout without a mask: %d launches", fake.logged_launches);
  params.dropout_mask = mask_for(&params);
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK && info.launches == 2);
  reset_launch_log();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK);
  CHECK_MSG(fake.logged_launches == 2 && fake.launch_log[0].kernel == KERNEL_ATTN_FWD &&
                fake.launch_log[1].kernel == KERNEL_DROPOUT_MASK,
            "dropout with a mask: %d launches", fake.logged_launches);

  /* A failing mask launch is reported, naming the mask kernel; the forward was enqueued before it. */
  fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
  fake.fail_launch_call = fake.calls[CALL_cuLaunchKernel] + 2;
  aotk_status status = aotk_attn_fwd(&params, FAKE_STREAM);
  CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("attn_dropout_mask"), "the mask launch fails: %s (%s)",
            aotk_status_name(status), aotk_last_error());
  fake.launch_result = CUDA_SUCCESS;
  fake.fail_launch_call = 0;

  aotk_attn_params bwd = valid_bwd_params();
  bwd.deterministic = 1;
  sinks_on(&bwd, &default_problem);
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, &bwd, &info) == AOTK_OK);
  const size_t without_dsinks = info.workspace_bytes;
  CHECK_MSG(info.launches == 3 && without_dsinks == bwd_workspace_bytes(&default_problem),
            "sinks without dsinks: %d launches, %zu bytes", info.launches, without_dsinks);
  reset_launch_log();
  CHECK(aotk_attn_bwd(&bwd, FAKE_WORKSPACE, without_dsinks, FAKE_STREAM) == AOTK_OK);
  CHECK(fake.logged_launches == 3 && arg_pointer(&fake.launch_log[0], PRE_SINKS) == 0 &&
        arg_i32(&fake.launch_log[0], PRE_FLAGS) == 0);
  bwd.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, default_problem.heads_q);
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, &bwd, &info) == AOTK_OK);
  /* 2 sequences, 8 heads, 128 padded rows in blocks of 64: 32 partials. */
  CHECK_MSG(info.launches == 4 && info.workspace_bytes == without_dsinks + 4 * 8 * 2 * 2,
            "dsinks: %d launches, %zu bytes (%zu without)", info.launches, info.workspace_bytes, without_dsinks);
  /* The workspace without dsinks' share is now too small. */
  reset_calls();
  status = aotk_attn_bwd(&bwd, FAKE_WORKSPACE, without_dsinks, FAKE_STREAM);
  CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL && total_calls() == 0,
            "dsinks with the workspace of no dsinks: %s, %d driver calls", aotk_status_name(status), total_calls());
  reset_launch_log();
  CHECK(aotk_attn_bwd(&bwd, FAKE_WORKSPACE, info.workspace_bytes, FAKE_STREAM) == AOTK_OK);
  CHECK_MSG(fake.logged_launches == 4 && fake.launch_log[3].kernel == KERNEL_BWD_SINK_REDUCE &&
                fake.launch_log[3].grid[0] == 8,
            "dsinks: %d launches", fake.logged_launches);
  CHECK(arg_i32(&fake.launch_log[3], REDUCE_COUNT) == 2 * 2);
  check_bwd_launch("dsinks, default problem", &bwd, &default_problem);

  /* A failing sink reduction: the three passes were enqueued; the failure names the kernel. */
  fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
  fake.fail_launch_call = fake.calls[CALL_cuLaunchKernel] + 4;
  status = aotk_attn_bwd(&bwd, FAKE_WORKSPACE, info.workspace_bytes, FAKE_STREAM);
  CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("attn_bwd_sink_reduce"), "the reduction fails: %s (%s)",
            aotk_status_name(status), aotk_last_error());
  fake.launch_result = CUDA_SUCCESS;
  fake.fail_launch_call = 0;

  /* The same non-deterministic: the statistics (16384 bytes) at 0, the accumulator (2 * 8 * 128 rows of
   * 64 floats) after them; with dsinks the 128 bytes of partials push it to the next 256-byte boundary. */
  aotk_attn_params nondeterministic = bwd;
  nondeterministic.deterministic = 0;
  nondeterministic.dsinks.data = NULL;
  for (int with_dsinks = 0; with_dsinks <= 1; with_dsinks++) {
    if (with_dsinks) nondeterministic.dsinks = bwd.dsinks;
    const size_t accumulator_offset = with_dsinks ? 16384 + 256 : 16384, accumulator_bytes = 2 * 8 * 128 * 64 * 4;
    CHECK(aotk_query(AOTK_OP_ATTN_BWD, &nondeterministic, &info) == AOTK_OK);
    CHECK_MSG(info.launches == 3 + with_dsinks && info.workspace_bytes == accumulator_offset + accumulator_bytes &&
                  (info.features & AOTK_FEATURE_NONDETERMINISTIC) != 0,
              "non-deterministic, dsinks %d: %d launches, %zu bytes, features %#x", with_dsinks, info.launches,
              info.workspace_bytes, info.features);
    reset_launch_log();
    CHECK(aotk_attn_bwd(&nondeterministic, FAKE_WORKSPACE, info.workspace_bytes, FAKE_STREAM) == AOTK_OK);
    CHECK_MSG(fake.logged_launches == 3 + with_dsinks && fake.launch_log[1].kernel == KERNEL_BWD_FUSED_HOPPER &&
                  fake.launch_log[2].kernel == KERNEL_BWD_DQ_CONVERT &&
                  (!with_dsinks || fake.launch_log[3].kernel == KERNEL_BWD_SINK_REDUCE) && fake.memsets == 1 &&
                  fake.memset_destination == (CUdeviceptr)(uintptr_t)byte_offset(FAKE_WORKSPACE, accumulator_offset) &&
                  fake.memset_count == accumulator_bytes / 4,
              "non-deterministic, dsinks %d: %d launches, %d clears of %zu words at %#llx", with_dsinks,
              fake.logged_launches, fake.memsets, fake.memset_count, (unsigned long long)fake.memset_destination);
    check_bwd_launch(with_dsinks ? "non-deterministic dsinks, default problem" : "non-deterministic sinks",
                     &nondeterministic, &default_problem);
  }
  uninstall_fake_gpu();
}

/* The backward with each feature, dense: the same flags, windows and scalars as the forward's in the
 * dK/dV and dQ passes, and the EXTRAS variants only when a feature needs them. */
static void test_bwd_feature_launches(void) {
  static const gpu gpus[] = {{90, SHARED_SM90, 90, 0}, {86, SHARED_SM86, 80, 0}};
  int cases = 0;
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (size_t i = 0; i < sizeof feature_cases / sizeof feature_cases[0]; i++) {
      const feature_case *c = &feature_cases[i];
      aotk_attn_params params = strided_bwd_params(c->shape);
      c->set(&params, &c->shape);
      params.dropout_mask.data = NULL; /* a forward output */
      problem p = c->shape;
      p.with_lse = true;
      char what[160];
      snprintf(what, sizeof what, "cc %d backward, %s", gpus[g].compute_capability, c->what);
      check_bwd_launch(what, &params, &p);
      if (params.sinks.data != NULL) {
        params.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
        snprintf(what, sizeof what, "cc %d backward with dsinks, %s", gpus[g].compute_capability, c->what);
        check_bwd_launch(what, &params, &p);
      }
      cases++;
    }
  }
  printf("    %d cases\n", cases);
  uninstall_fake_gpu();
}

/* The backward on every kind of GPU: the image its arch runs, for every family. */
static void test_bwd_arch_choice(void) {
  static const struct {
    int compute_capability, max_shared_bytes, arch, from_ptx;
  } gpus[] = {
      {80, SHARED_SM80, 80, 0}, {86, SHARED_SM86, 80, 0},   {90, SHARED_SM90, 90, 0},
      {100, SHARED_SM100, 80, 1}, {120, SHARED_SM120, 80, 1},
  };
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (int head_dim = 64; head_dim <= 128; head_dim += 64) {
      problem p = default_problem;
      p.head_dim = head_dim;
      aotk_attn_params params = bwd_params_for(p);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info);
      CHECK_MSG(status == AOTK_OK && info.arch == gpus[g].arch && info.from_ptx == gpus[g].from_ptx,
                "cc %d d%d: %s, arch %d from_ptx %d, expected arch %d from_ptx %d", gpus[g].compute_capability,
                head_dim, aotk_status_name(status), info.arch, info.from_ptx, gpus[g].arch, gpus[g].from_ptx);
      char what[32];
      snprintf(what, sizeof what, "cc %d d%d", gpus[g].compute_capability, head_dim);
      check_bwd_launch(what, &params, &p);
    }
    CHECK_MSG(fake.loaded_images == 6 && (gpus[g].from_ptx ? fake.loaded_ptx : fake.loaded_elf) == 6,
              "cc %d: loaded %d images (%d ELF, %d PTX), expected 6", gpus[g].compute_capability, fake.loaded_images,
              fake.loaded_elf, fake.loaded_ptx);
  }
  uninstall_fake_gpu();
}

/* A failing launch of any of the three kernels: AOTK_ERROR_CUDA naming cuLaunchKernel and the kernel,
 * and no later kernel is attempted. For the deterministic plan and the non-deterministic one (whose
 * accumulator was cleared before the first launch). */
static void test_bwd_launch_fails(void) {
  for (int deterministic = 0; deterministic <= 1; deterministic++) {
    aotk_attn_params params = valid_bwd_params();
    params.deterministic = deterministic;
    for (int failing = 1; failing <= 3; failing++) {
      install_fake_gpu(90, SHARED_SM90);
      const bool fused = expect_bwd_fused(&params, 90, false, SHARED_SM90);
      CHECK(fused == !deterministic);
      const size_t workspace_bytes = expected_bwd_workspace_bytes(&params, 90, false, &default_problem);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK);
      const aotk__kernel_entry *rows[3];
      expected_bwd_rows_of(&params, info.arch, info.from_ptx, &default_problem, info.aligned, 0, rows);
      const char *failing_name = rows[failing - 1] != NULL ? rows[failing - 1]->name : "(none)";
      fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
      fake.fail_launch_call = failing;
      aotk_status status = aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA, "deterministic %d, launch %d fails: %s (%s)", deterministic, failing,
                aotk_status_name(status), aotk_last_error());
      CHECK_MSG(message_mentions("cuLaunchKernel") && message_mentions(failing_name),
                "launch %d fails: the message \"%s\" does not name cuLaunchKernel and %s", failing, aotk_last_error(),
                failing_name);
      CHECK_MSG(message_mentions(injected_error_name), "the message \"%s\" lacks the driver's error name",
                aotk_last_error());
      CHECK(aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY);
      CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == failing, "launch %d fails: cuLaunchKernel called %d times", failing,
                fake.calls[CALL_cuLaunchKernel]);
      CHECK_MSG(fake.launches == failing - 1, "launch %d fails: %d launches went through", failing, fake.launches);
      CHECK_MSG(fake.memsets == (fused ? 1 : 0) && fake.memset_after_launches == 0,
                "deterministic %d, launch %d fails: %d clears, after %d launches", deterministic, failing, fake.memsets,
                fake.memset_after_launches);

      /* The failure is not remembered. */
      fake.launch_result = CUDA_SUCCESS;
      fake.fail_launch_call = 0;
      reset_launch_log();
      CHECK_MSG(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK, "after recovery: %s",
                aotk_last_error());
      CHECK(fake.logged_launches == 3 && aotk_last_cuda_result() == 0 && fake.memsets == (fused ? 1 : 0));
    }
  }
  uninstall_fake_gpu();
}

/* A failing clear of the non-deterministic plan's accumulator: AOTK_ERROR_CUDA naming cuMemsetD32Async
 * and the driver's error, after the tensor maps are encoded and before anything is launched (a pass
 * adding into an uncleared accumulator would be wrong, not merely slow); the next call runs whole. The
 * deterministic plan clears nothing, so the same fault does not touch it. */
static void test_bwd_memset_fails(void) {
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 2, 300, 400, 8, 2, 128, true, 0};
  install_fake_gpu(90, SHARED_SM90);
  aotk_attn_params params = bwd_params_for(d128);
  CHECK(expect_bwd_fused(&params, 90, false, SHARED_SM90));
  const size_t workspace_bytes = bwd_fused_workspace_bytes_for(&d128, false);
  fake.memset_result = CUDA_ERROR_OUT_OF_MEMORY;
  reset_calls();
  reset_launch_log();
  aotk_status status = aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
  CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuMemsetD32Async") &&
                message_mentions(injected_error_name),
            "the clear fails: %s (\"%s\")", aotk_status_name(status), aotk_last_error());
  CHECK(aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK_MSG(fake.calls[CALL_cuMemsetD32Async] == 1 && fake.calls[CALL_cuTensorMapEncodeTiled] == FUSED_DESCRIPTORS &&
                fake.calls[CALL_cuLaunchKernel] == 0 && fake.launches == 0,
            "the clear fails: %s", called_functions());

  fake.memset_result = CUDA_SUCCESS;
  reset_launch_log();
  CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK);
  CHECK_MSG(fake.logged_launches == 3 && fake.memsets == 1 && aotk_last_cuda_result() == 0 &&
                aotk_last_error()[0] == '\0',
            "after the clear failed: %d launches, %d clears", fake.logged_launches, fake.memsets);

  fake.memset_result = CUDA_ERROR_OUT_OF_MEMORY;
  params.deterministic = 1;
  reset_calls();
  reset_launch_log();
  status = aotk_attn_bwd(&params, FAKE_WORKSPACE, bwd_workspace_bytes(&d128), FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK && fake.logged_launches == 3 && fake.calls[CALL_cuMemsetD32Async] == 0,
            "deterministic with clears failing: %s (%s), %d launches, %d clears", aotk_status_name(status),
            aotk_last_error(), fake.logged_launches, fake.calls[CALL_cuMemsetD32Async]);
  uninstall_fake_gpu();
}

/* Driver faults before any launch: the same statuses as the forward's, from the call and the query.
 * On sm_90 the default problem takes the non-deterministic plan: its workspace, and no clear either
 * where a load fails. */
static void test_bwd_faults(void) {
  aotk_attn_params params = valid_bwd_params();
  const size_t workspace_bytes = bwd_fused_workspace_bytes_for(&default_problem, false);
  aotk_kernel_info info;

  install_fake_gpu(90, SHARED_SM90);
  fake.has_context = false;
  CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_ERROR_NO_CONTEXT);
  poison_info(&info);
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_ERROR_NO_CONTEXT && info_untouched(&info));
  CHECK(fake.calls[CALL_cuLaunchKernel] == 0);

  install_fake_gpu(75, 64 * 1024);
  CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_ERROR_UNSUPPORTED_ARCH);
  CHECK(message_mentions("sm_75"));
  poison_info(&info);
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_ERROR_UNSUPPORTED_ARCH && info_untouched(&info));
  CHECK(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0);

  /* The first image fails to load: nothing is launched. */
  install_fake_gpu(90, SHARED_SM90);
  fake.library_load_result = CUDA_ERROR_OUT_OF_MEMORY;
  CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_ERROR_CUDA);
  CHECK(message_mentions("cuLibraryLoadData"));
  CHECK(fake.calls[CALL_cuLaunchKernel] == 0);
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK); /* the query loads nothing */

  /* The second or third image (the fused pass, the cast) fails to load: the call fails naming the load,
   * and nothing was cleared or launched, since all three are loaded before either (aotk.h). */
  for (int failing = 2; failing <= 3; failing++) {
    install_fake_gpu(90, SHARED_SM90);
    CHECK(expect_bwd_fused(&params, 90, false, SHARED_SM90));
    fake.library_load_result = CUDA_ERROR_OUT_OF_MEMORY;
    fake.fail_library_load_call = failing;
    CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_ERROR_CUDA);
    CHECK_MSG(message_mentions("cuLibraryLoadData"), "the message \"%s\"", aotk_last_error());
    CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 0 && fake.calls[CALL_cuMemsetD32Async] == 0 &&
                  fake.calls[CALL_cuLibraryLoadData] == failing,
              "load %d fails: %s", failing, called_functions());
  }
  /* The same with dsinks: the fourth image (the sink reduction) fails after three loaded. */
  install_fake_gpu(90, SHARED_SM90);
  aotk_attn_params with_dsinks = params;
  set_sinks(&with_dsinks);
  set_dsinks(&with_dsinks);
  fake.library_load_result = CUDA_ERROR_OUT_OF_MEMORY;
  fake.fail_library_load_call = 4;
  CHECK(aotk_attn_bwd(&with_dsinks, FAKE_WORKSPACE, bwd_fused_workspace_bytes_for(&default_problem, true),
                      FAKE_STREAM) == AOTK_ERROR_CUDA);
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 4 && fake.calls[CALL_cuLaunchKernel] == 0 &&
                fake.calls[CALL_cuMemsetD32Async] == 0,
            "the sink reduction fails to load: %s", called_functions());
  uninstall_fake_gpu();
}

/* A GPU one byte short of the shared memory that the hungriest of the three kernels needs: refused
 * while planning, before anything is loaded or launched, naming that kernel; with exactly enough, it
 * runs. Deterministic: a non-deterministic call short of memory for the fused pass runs the
 * deterministic kernels instead (test_bwd_hopper_choice). */
static void test_bwd_too_little_shared_memory(void) {
  static const problem problems[] = {
      {AOTK_DTYPE_BFLOAT16, 2, 4096, 4096, 8, 2, 128, true, 0}, /* sm_90's widest dK/dV tile */
      {AOTK_DTYPE_FLOAT16, 2, 100, 130, 8, 2, 64, true, 0},
  };
  static const int compute_capabilities[] = {90, 86};
  for (size_t c = 0; c < 2; c++) {
    for (size_t i = 0; i < sizeof problems / sizeof problems[0]; i++) {
      const problem *p = &problems[i];
      aotk_attn_params params = bwd_params_for(*p);
      params.deterministic = 1;
      install_fake_gpu(compute_capabilities[c], SHARED_SM90);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK);
      const aotk__kernel_entry *rows[3];
      expected_bwd_rows_of(&params, info.arch, info.from_ptx, p, info.aligned, 0, rows);
      if (rows[0] == NULL || rows[1] == NULL || rows[2] == NULL) {
        CHECK_MSG(false, "sm_%d: a backward family has no row", info.arch);
        continue;
      }
      int most = 0;
      for (int r = 0; r < 3; r++) most = rows[r]->shared_bytes > most ? rows[r]->shared_bytes : most;
      /* The first row (in launch order) that does not fit is the one named. */
      const aotk__kernel_entry *refused = NULL;
      for (int r = 0; r < 3 && refused == NULL; r++) refused = rows[r]->shared_bytes > most - 1 ? rows[r] : NULL;
      const size_t workspace_bytes = bwd_workspace_bytes(p);

      install_fake_gpu(compute_capabilities[c], most);
      CHECK_MSG(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK,
                "cc %d with exactly %d bytes: %s", compute_capabilities[c], most, aotk_last_error());
      CHECK(fake.launches == 3);

      install_fake_gpu(compute_capabilities[c], most - 1);
      aotk_status status = aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_UNSUPPORTED_ARCH, "cc %d with %d bytes: %s", compute_capabilities[c], most - 1,
                aotk_status_name(status));
      CHECK_MSG(message_mentions(refused->name), "the message \"%s\" does not name %s", aotk_last_error(),
                refused->name);
      CHECK(fake.launches == 0 && fake.calls[CALL_cuLibraryLoadData] == 0);
      aotk_kernel_info refused_info;
      poison_info(&refused_info);
      CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &refused_info) == AOTK_ERROR_UNSUPPORTED_ARCH);
      CHECK(info_untouched(&refused_info));
    }
  }
  uninstall_fake_gpu();
}

/* ---- dispatch ------------------------------------------------------------------------------- */

static void test_arch_choice(void) {
  static const gpu gpus[] = {
      {80, SHARED_SM80, 80, 0},  {86, SHARED_SM86, 80, 0},  {89, SHARED_SM86, 80, 0},
      {90, SHARED_SM90, 90, 0},  {100, SHARED_SM100, 80, 1}, {120, SHARED_SM120, 80, 1},
  };
  for (size_t i = 0; i < sizeof gpus / sizeof gpus[0]; i++) {
    install_fake_gpu(gpus[i].compute_capability, gpus[i].max_shared_bytes);
    for (int head_dim = 64; head_dim <= 128; head_dim += 64) {
      problem p = default_problem;
      p.head_dim = head_dim;
      aotk_attn_params params = params_for(p);
      aotk_kernel_info info;
      poison_info(&info);
      aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
      CHECK_MSG(status == AOTK_OK, "cc %d: %s (%s)", gpus[i].compute_capability, aotk_status_name(status),
                aotk_last_error());
      CHECK_MSG(info.arch == gpus[i].arch && info.from_ptx == gpus[i].from_ptx,
                "cc %d d%d: arch %d from_ptx %d, expected arch %d from_ptx %d", gpus[i].compute_capability, head_dim,
                info.arch, info.from_ptx, gpus[i].arch, gpus[i].from_ptx);
      char sm[32];
      snprintf(sm, sizeof sm, "cc %d d%d", gpus[i].compute_capability, head_dim);
      check_launch(sm, &params, &p);
    }
    CHECK_MSG(gpus[i].from_ptx ? fake.loaded_elf == 0 : fake.loaded_ptx == 0,
              "cc %d: loaded %d ELF and %d PTX images", gpus[i].compute_capability, fake.loaded_elf, fake.loaded_ptx);
  }
  uninstall_fake_gpu();
}

static void test_image_policy(void) {
  aotk_attn_params params = valid_params();
  install_fake_gpu(90, SHARED_SM90);
  CHECK(aotk_set_image_policy(AOTK_IMAGE_POLICY_SM80_PTX) == AOTK_OK);
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
  CHECK_MSG(info.arch == 80 && info.from_ptx == 1, "SM80_PTX on cc 9.0: arch %d from_ptx %d", info.arch, info.from_ptx);
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK);
  CHECK_MSG(fake.loaded_ptx == 1 && fake.loaded_elf == 0, "SM80_PTX on cc 9.0 loaded %d ELF, %d PTX", fake.loaded_elf,
            fake.loaded_ptx);

  install_fake_gpu(86, SHARED_SM86);
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
  CHECK_MSG(info.arch == 80 && info.from_ptx == 1, "SM80_PTX on cc 8.6: arch %d from_ptx %d", info.arch, info.from_ptx);

  /* Bad values are refused and leave the policy as it was. */
  static const int bad_policies[] = {2, -1, 1000};
  for (size_t i = 0; i < sizeof bad_policies / sizeof bad_policies[0]; i++) {
    aotk_status status = aotk_set_image_policy((aotk_image_policy)bad_policies[i]);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "policy %d: %s", bad_policies[i], aotk_status_name(status));
    CHECK_MSG(message_mentions("policy"), "policy %d: message \"%s\"", bad_policies[i], aotk_last_error());
  }
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK && info.from_ptx == 1);

  CHECK(aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO) == AOTK_OK);
  CHECK(aotk_last_error()[0] == '\0');
  install_fake_gpu(90, SHARED_SM90);
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
  CHECK_MSG(info.arch == 90 && info.from_ptx == 0, "AUTO again on cc 9.0: arch %d from_ptx %d", info.arch,
            info.from_ptx);
  uninstall_fake_gpu();
}

static bool query_aligned(const char *what, const aotk_attn_params *params, int expected_aligned) {
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", what, aotk_status_name(status), aotk_last_error());
  const char *tag = expected_aligned ? "_aligned_" : "_any_";
  bool ok = status == AOTK_OK && info.aligned == expected_aligned && strstr(info.kernel_name, tag) != NULL;
  CHECK_MSG(ok, "%s: picked %s (aligned %d), expected a%s kernel", what, info.kernel_name, info.aligned, tag);
  return ok;
}

static void test_alignment_choice(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};
  for (int d = 0; d < 2; d++) {
    for (int head_dim = 64; head_dim <= 128; head_dim += 64) {
      problem p = default_problem;
      p.dtype = dtypes[d];
      p.head_dim = head_dim;
      aotk_attn_params params = params_for(p);
      query_aligned("16-byte aligned, strides multiples of 16", &params, 1);

      params = params_for(p);
      params.q.data = byte_offset(FAKE_Q, 2); /* one element in */
      query_aligned("q one element past 16-byte alignment", &params, 0);

      params = params_for(p);
      params.k.data = byte_offset(FAKE_K, 8); /* 8-byte aligned only */
      query_aligned("k 8-byte aligned", &params, 0);

      params = params_for(p);
      params.out.strides[1] = p.heads_q * p.head_dim + 1; /* rows padded by one element */
      params.out.strides[0] = p.seqlen_q * params.out.strides[1];
      query_aligned("out rows padded to an odd stride", &params, 0);

      params = params_for(p);
      params.v.strides[2] = p.head_dim + 8; /* heads padded by 8 elements */
      params.v.strides[1] = p.heads_kv * params.v.strides[2];
      params.v.strides[0] = p.seqlen_k * params.v.strides[1];
      query_aligned("v heads padded by 8 elements", &params, 0);

      params = params_for(p);
      params.lse.data = byte_offset(FAKE_LSE, 4); /* lse is not read by the aligned loads */
      query_aligned("lse only 4-byte aligned", &params, 1);
    }
  }
  uninstall_fake_gpu();
}

/* The forward's tuning, checked at every bound of every variant and on either side of it, with the
 * expectation read from the table rows (expected_row) rather than written down here: the pointer kernel's
 * with q laid out heads-outer (which TMA cannot read, so sm_90 runs it too), and on sm_90 the TMA
 * kernel's with contiguous tensors. */

/* The sizes at which to probe a variant's tuning choice: 1, each row's bound and its neighbours, and
 * one far beyond the largest bound. Returns how many were written (at most 31) and sets *bounds to
 * the number of table rows of the variant. */
static int tuning_probe_sizes(int family, int arch, aotk_dtype dtype, int head_dim, int aligned, int extras,
                              int64_t sizes[32], int *bounds) {
  int qk, v;
  compiled_dims(family, head_dim, head_dim, &qk, &v);
  int count = 0;
  int32_t largest_bound = 1;
  sizes[count++] = 1;
  *bounds = 0;
  for (int i = 0; i < aotk__kernel_count && count < 28; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (!row_is_variant(e, family, arch, dtype, qk, v, aligned, extras)) continue;
    (*bounds)++;
    if (e->min_seqlen > largest_bound) largest_bound = e->min_seqlen;
    if (e->min_seqlen > 1) sizes[count++] = e->min_seqlen - 1;
    sizes[count++] = e->min_seqlen;
    sizes[count++] = e->min_seqlen + 1;
  }
  sizes[count++] = (int64_t)largest_bound * 8 + 3;
  return count;
}

static void test_tuning_choice(void) {
  static const gpu gpus[] = {{80, SHARED_SM80, 80, 0}, {90, SHARED_SM90, 90, 0}};
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};
  int queries = 0;
  for (int g = 0; g < 2; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (int d = 0; d < 2; d++)
      for (int head_dim = 64; head_dim <= 128; head_dim += 64)
        for (int aligned = 0; aligned <= 1; aligned++)
        for (int extras = 0; extras <= 1; extras++) { /* the EXTRAS variant: softcap on */
          /* The seqlens to try: 1, each bound and its neighbours, and one far beyond the last. */
          int64_t seqlens[32];
          int bounds = 0;
          int count = tuning_probe_sizes(AOTK__FAMILY_ATTN_FWD, gpus[g].arch, dtypes[d], head_dim, aligned, extras,
                                         seqlens, &bounds);
          /* The catalog tunes every variant by size: a second config must exist, or this proves nothing. */
          CHECK_MSG(bounds >= 2, "sm_%d dtype %d d%d aligned %d extras %d: %d configs", gpus[g].arch, (int)dtypes[d],
                    head_dim, aligned, extras, bounds);

          const aotk__kernel_entry *previous = NULL;
          int changes = 0;
          for (int s = 0; s < count; s++) {
            problem p = default_problem;
            p.dtype = dtypes[d];
            p.head_dim = head_dim;
            p.seqlen_q = seqlens[s];
            aotk_attn_params params = params_for(p);
            make_heads_outer(&params.q);
            if (!aligned) params.q.data = byte_offset(FAKE_Q, 2);
            if (extras) params.softcap = 30.0f;
            const aotk__kernel_entry *expected = expected_row(AOTK__FAMILY_ATTN_FWD, gpus[g].arch, dtypes[d], head_dim,
                                                              head_dim, aligned, extras, seqlens[s]);
            aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
            aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
            queries++;
            CHECK_MSG(status == AOTK_OK && expected != NULL && strcmp(info.kernel_name, expected->name) == 0 &&
                          info.arch == gpus[g].arch && info.block_m == expected->block_m,
                      "sm_%d seqlen_q %lld: %s picked %s (block_m %d), expected %s", gpus[g].arch,
                      (long long)seqlens[s], aotk_status_name(status), info.kernel_name, info.block_m,
                      expected ? expected->name : "(none)");
            CHECK_MSG(info.grid == (seqlens[s] + info.block_m - 1) / info.block_m * p.batch * p.heads_q,
                      "seqlen_q %lld: grid %lld", (long long)seqlens[s], (long long)info.grid);
            changes += previous != NULL && expected != previous;
            previous = expected;
          }
          CHECK_MSG(changes >= 1, "sm_%d d%d: the config never changes with seqlen_q", gpus[g].arch, head_dim);
        }
  }
  /* The TMA kernel (sm_90, aligned, exact head dims), the same rule over its own rows. They are all
   * EXTRAS: the warp-specialized kernel takes every call but dropout, so dropout is what reaches this one
   * (no window, so the size key is seqlen_q, src/aotk_attn.c fwd_size_key), and a row without EXTRAS
   * would be dead weight in the library. */
  install_fake_gpu(90, SHARED_SM90);
  int tma_variants_tuned_by_size = 0;
  for (int d = 0; d < 2; d++)
    for (int head_dim = 128; head_dim <= 256; head_dim += 128) {
      int64_t seqlens[32];
      int bounds = 0;
      tuning_probe_sizes(AOTK__FAMILY_ATTN_FWD_TMA, 90, dtypes[d], head_dim, 1, 0, seqlens, &bounds);
      CHECK_MSG(bounds == 0, "TMA dtype %d d%d: %d rows without EXTRAS, which no call reaches", (int)dtypes[d],
                head_dim, bounds);
      int count = tuning_probe_sizes(AOTK__FAMILY_ATTN_FWD_TMA, 90, dtypes[d], head_dim, 1, 1, seqlens, &bounds);
      CHECK_MSG(bounds >= 1, "TMA dtype %d d%d: no EXTRAS row", (int)dtypes[d], head_dim);
      tma_variants_tuned_by_size += bounds >= 2;
      const aotk__kernel_entry *previous = NULL;
      int changes = 0;
      for (int s = 0; s < count; s++) {
        problem p = default_problem;
        p.dtype = dtypes[d];
        p.head_dim = head_dim;
        p.seqlen_q = seqlens[s];
        aotk_attn_params params = params_for(p);
        set_dropout(&params);
        const aotk__kernel_entry *expected =
            expected_row(AOTK__FAMILY_ATTN_FWD_TMA, 90, dtypes[d], head_dim, head_dim, 1, 1, seqlens[s]);
        aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
        aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
        queries++;
        CHECK_MSG(status == AOTK_OK && expected != NULL && strcmp(info.kernel_name, expected->name) == 0 &&
                      info.block_m == expected->block_m && (info.features & AOTK_FEATURE_TMA) != 0,
                  "TMA d%d seqlen_q %lld: %s picked %s (block_m %d), expected %s", head_dim, (long long)seqlens[s],
                  aotk_status_name(status), info.kernel_name, info.block_m, expected ? expected->name : "(none)");
        CHECK_MSG(info.grid == (seqlens[s] + info.block_m - 1) / info.block_m * p.batch * p.heads_q,
                  "TMA seqlen_q %lld: grid %lld", (long long)seqlens[s], (long long)info.grid);
        changes += previous != NULL && expected != previous;
        previous = expected;
        /* Without dropout, a left window bound or softcap takes the warp-specialized kernel's row for the
         * same size (its EXTRAS one with softcap). */
        for (int extras = 0; extras <= 1; extras++) {
          aotk_attn_params without_dropout = params_for(p);
          if (extras) {
            without_dropout.softcap = 30.0f;
          } else {
            without_dropout.window_left = 64;
          }
          const aotk__kernel_entry *gluon =
              expected_row(AOTK__FAMILY_ATTN_FWD_HOPPER, 90, dtypes[d], head_dim, head_dim, 1, extras, seqlens[s]);
          aotk_kernel_info gluon_info = AOTK_KERNEL_INFO_INIT;
          status = aotk_query(AOTK_OP_ATTN_FWD, &without_dropout, &gluon_info);
          queries++;
          CHECK_MSG(status == AOTK_OK && gluon != NULL && strcmp(gluon_info.kernel_name, gluon->name) == 0,
                    "d%d seqlen_q %lld %s: %s picked %s, expected %s", head_dim, (long long)seqlens[s],
                    extras ? "softcap" : "window_left 64", aotk_status_name(status), gluon_info.kernel_name,
                    gluon ? gluon->name : "(none)");
        }
      }
      CHECK_MSG(bounds < 2 || changes >= 1, "TMA d%d: the config never changes with seqlen_q", head_dim);
    }
  CHECK_MSG(tma_variants_tuned_by_size > 0 || aotk__kernel_filter[0] != '\0', "no TMA variant is tuned by size");
  printf("    %d queries\n", queries);
  /* The catalog's tuning table in words: up to 1024 query rows, a smaller tile than beyond. */
  for (int g = 0; g < 2; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (int head_dim = 64; head_dim <= 128; head_dim += 64) {
      int32_t block_m[2] = {0, 0};
      for (int longer = 0; longer <= 1; longer++) {
        problem p = default_problem;
        p.head_dim = head_dim;
        p.seqlen_q = longer ? 1025 : 1024;
        aotk_attn_params params = params_for(p);
        make_heads_outer(&params.q);
        aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
        CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
        block_m[longer] = info.block_m;
      }
      CHECK_MSG(block_m[0] < block_m[1], "sm_%d d%d: block_m %d at seqlen_q 1024, %d at 1025", gpus[g].arch,
                head_dim, block_m[0], block_m[1]);
    }
  }
  /* The TMA kernel's at d128 (only EXTRAS rows, reached with dropout: the Gluon forward takes every
   * other call): 4 warps from 1 query row up to 4095 (the row of min_seqlen 1), 8 from 4096 (the row of
   * min_seqlen 4096). */
  install_fake_gpu(90, SHARED_SM90);
  int32_t num_warps[2] = {0, 0};
  for (int longer = 0; longer <= 1; longer++) {
    problem p = default_problem;
    p.head_dim = 128;
    p.seqlen_q = longer ? 4096 : 4095;
    aotk_attn_params params = params_for(p);
    set_dropout(&params);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK && (info.features & AOTK_FEATURE_TMA) != 0);
    const aotk__kernel_entry *row = table_row_named(info.kernel_name, info.arch);
    const int32_t min_seqlen = longer ? 4096 : 1;
    CHECK_MSG(row != NULL && row->family == AOTK__FAMILY_ATTN_FWD_TMA && row->extras && row->min_seqlen == min_seqlen,
              "TMA d128 at seqlen_q %lld: %s, expected the attn_fwd_tma EXTRAS row of min_seqlen %d",
              (long long)p.seqlen_q, info.kernel_name, min_seqlen);
    num_warps[longer] = info.num_warps;
  }
  CHECK_MSG(num_warps[0] < num_warps[1], "TMA d128: %d warps at seqlen_q 4095, %d at 4096", num_warps[0], num_warps[1]);
  uninstall_fake_gpu();
}

/* A window bounded on both sides is tuned by the keys a row sees (window_left + window_right), not by
 * seqlen_q: at seqlen 16384, a causal window of 1024 (or 512 each side) takes the short-sequence tile,
 * one of 1025 or an unbounded side the long one; the EXTRAS kernels keep seqlen_q's. */
static void test_window_tuning_choice(void) {
  static const struct {
    int32_t causal, window_left, window_right;
    int64_t key; /* the size the choice must match */
  } cases[] = {
      {1, 1024, -1, 1024}, {0, 512, 512, 1024}, {0, 0, 0, 1}, {1, 1025, -1, 1025}, {0, 1024, -1, 16384},
      {0, -1, 0, 16384},   {1, -1, -1, 16384},  {0, 20000, 20000, 16384}, {0, 2048, 2047, 4095}, {0, 2048, 2048, 4096},
  };
  install_fake_gpu(90, SHARED_SM90);
  /* The pointer kernel (q heads-outer, which TMA cannot read), then the warp-specialized one
   * (contiguous), which takes every window and the EXTRAS cases (softcap, in its EXTRAS row) and has one
   * tile per head dim. */
  for (int tma = 0; tma <= 1; tma++)
  for (size_t c = 0; c < 2 * sizeof cases / sizeof cases[0]; c++) {
    const int extras = c >= sizeof cases / sizeof cases[0];
    const size_t i = extras ? c - sizeof cases / sizeof cases[0] : c;
    problem p = default_problem;
    p.head_dim = 128;
    p.seqlen_q = 16384;
    p.seqlen_k = 16384;
    aotk_attn_params params = params_for(p);
    if (!tma) make_heads_outer(&params.q);
    params.causal = cases[i].causal;
    params.window_left = cases[i].window_left;
    params.window_right = cases[i].window_right;
    if (extras) params.softcap = 30.0f;
    const int family = tma ? AOTK__FAMILY_ATTN_FWD_HOPPER : AOTK__FAMILY_ATTN_FWD;
    CHECK_MSG(expected_fwd_family(&params, 90, false, SHARED_SM90) == family,
              "causal %d window (%d, %d) extras %d: the test's own rule does not take %s", cases[i].causal,
              cases[i].window_left, cases[i].window_right, extras, kernel_signatures[fwd_kernel_id(family)].function);
    const aotk__kernel_entry *expected =
        expected_row(family, 90, p.dtype, 128, 128, 1, extras, extras ? 16384 : cases[i].key);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
    CHECK_MSG(status == AOTK_OK && expected != NULL && strcmp(info.kernel_name, expected->name) == 0,
              "%s causal %d window (%d, %d) extras %d: %s picked %s, expected %s",
              kernel_signatures[fwd_kernel_id(family)].function, cases[i].causal, cases[i].window_left,
              cases[i].window_right, extras, aotk_status_name(status), info.kernel_name,
              expected ? expected->name : "(none)");
  }
  uninstall_fake_gpu();
}

/* ---- the sm_90 TMA forward ------------------------------------------------------------------ */

/* aotk_query and aotk_attn_fwd agree on which forward family runs `params` (`family`), and so does the
 * rule check_launch expects by (expected_fwd_family): the name, the feature bits, the launched .entry,
 * and the three encodes (none for the pointer kernel). */
static void check_fwd_family(const char *what, const aotk_attn_params *params, int family) {
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  reset_calls();
  aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  const aotk__kernel_entry *row = table_row_named(info.kernel_name, info.arch);
  const uint32_t bits = AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED;
  CHECK_MSG(row != NULL && row->family == family && (info.features & bits) == fwd_family_features(family) &&
                fwd_family_of_name(info.kernel_name) == family,
            "%s: aotk_query names %s with features %#x; expected a %s kernel", what, info.kernel_name, info.features,
            kernel_signatures[fwd_kernel_id(family)].function);
  /* Softcap, ALiBi and dropout run in an EXTRAS row (the Gluon kernel's too); anything else never does. */
  const bool extras = params->softcap > 0.0f || params->alibi_slopes.data != NULL || params->dropout_p > 0.0f;
  CHECK_MSG(row == NULL || (bool)row->extras == extras, "%s: aotk_query names %s, expected %s EXTRAS row", what,
            info.kernel_name, extras ? "an" : "no");
  const int modelled = expected_fwd_family(params, info.arch, info.from_ptx, fake.max_shared_bytes);
  CHECK_MSG(modelled == family, "%s: the test's own rule says %s", what,
            kernel_signatures[fwd_kernel_id(modelled)].function);
  CHECK_MSG(fake.calls[CALL_cuTensorMapEncodeTiled] == 0, "%s: aotk_query encoded tensor maps", what);
  const int launches_before = fake.launches;
  reset_launch_log();
  status = aotk_attn_fwd(params, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_fwd %s (%s)", what, aotk_status_name(status), aotk_last_error());
  CHECK_MSG(fake.launches == launches_before + info.launches && fake.logged_launches >= 1 &&
                fake.launch_log[0].kernel == fwd_kernel_id(family),
            "%s: %d launches, the first of %s", what, fake.launches - launches_before,
            fake.logged_launches >= 1 ? kernel_signatures[fake.launch_log[0].kernel].function : "(none)");
  const int encodes = family == AOTK__FAMILY_ATTN_FWD ? 0 : TMA_DESCRIPTORS;
  CHECK_MSG(fake.encode_count == encodes, "%s: %d tensor maps encoded, expected %d", what, fake.encode_count, encodes);
}

/* Which calls take a TMA kernel (include/aotk.h, AOTK_FEATURE_TMA): on an sm_90 GPU running its cubins,
 * dense or varlen, aligned, each token's heads contiguous, head dims that have TMA kernels exactly. The
 * warp-specialized kernel ((64, 64), (128, 128), (192, 128) or (256, 256)) takes every call but dropout:
 * any window, sinks, and softcap and ALiBi in its EXTRAS rows; with three consumer warpgroups at d64 for
 * the plain forward without a mask. Dropout takes the Triton TMA kernel (dense, 128 or 256); any other
 * call the pointer kernel. */
static void test_tma_eligibility(void) {
  install_fake_gpu(90, SHARED_SM90);
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 2, 300, 400, 8, 2, 128, true, 0};
  aotk_attn_params params = params_for(d128);
  check_fwd_family("bf16 d128, dense, aligned, not causal (three warpgroups are d64 only)", &params,
                   AOTK__FAMILY_ATTN_FWD_HOPPER);
  problem p = d128;
  p.dtype = AOTK_DTYPE_FLOAT16, p.head_dim = 256, p.with_lse = false;
  params = params_for(p);
  check_fwd_family("fp16 d256, no lse", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p.heads_q);
  check_fwd_family("fp16 d256, no lse, ALiBi (the EXTRAS variant)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  dropout_on(&params, &p);
  check_fwd_family("fp16 d256, no lse, ALiBi and dropout", &params, AOTK__FAMILY_ATTN_FWD_TMA);
  params = params_for(p);
  dropout_on(&params, &p);
  check_fwd_family("fp16 d256, no lse, dropout", &params, AOTK__FAMILY_ATTN_FWD_TMA);
  params = params_for(d128);
  params.softcap = 30.0f;
  check_fwd_family("d128 softcap (the EXTRAS variant)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  dropout_on(&params, &d128);
  check_fwd_family("d128 softcap and dropout", &params, AOTK__FAMILY_ATTN_FWD_TMA);
  params = params_for(d128);
  params.causal = 1;
  check_fwd_family("d128 causal", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.causal_align = AOTK_ALIGN_TOP_LEFT;
  check_fwd_family("d128 causal top-left", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params = params_for(d128);
  params.window_right = 0;
  check_fwd_family("d128 window_right 0 alone (causal)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.window_right = 5;
  check_fwd_family("d128 window_right 5 alone", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.window_left = 16;
  check_fwd_family("d128 window (16, 5)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.causal_align = AOTK_ALIGN_TOP_LEFT;
  check_fwd_family("d128 window (16, 5) top-left", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params = params_for(d128);
  params.window_left = 64;
  check_fwd_family("d128 window_left 64 alone", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  dropout_on(&params, &d128);
  check_fwd_family("d128 window_left 64 and dropout", &params, AOTK__FAMILY_ATTN_FWD_TMA);
  params = params_for(d128);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, d128.heads_q);
  check_fwd_family("d128 sinks (the warp-specialized kernel's epilogue)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.causal = 1;
  check_fwd_family("d128 causal sinks", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.softcap = 30.0f;
  check_fwd_family("d128 causal sinks and softcap (the EXTRAS variant)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.softcap = 0.0f, params.window_left = 64;
  check_fwd_family("d128 causal window sinks", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  dropout_on(&params, &d128);
  check_fwd_family("d128 causal window sinks dropout", &params, AOTK__FAMILY_ATTN_FWD_TMA);
  params = params_for(d128);
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, d128.heads_q);
  check_fwd_family("d128 ALiBi", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.causal = 1;
  check_fwd_family("d128 causal ALiBi", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);

  /* d64: the warp-specialized kernel with three consumer warpgroups for the plain forward (sinks or not)
   * without a mask from 2048 query rows on (max_seqlen_q for varlen), with two otherwise: under any
   * window (window_right 0 alone is the causal mask; a window wider than the sequence is a window still)
   * and with softcap or ALiBi (the EXTRAS rows). The Triton TMA kernel has no d64, so with dropout the
   * pointer kernel runs. */
  const int wg3 = AOTK__FAMILY_ATTN_FWD_HOPPER_WG3, hopper = AOTK__FAMILY_ATTN_FWD_HOPPER;
  const problem d64 = {AOTK_DTYPE_BFLOAT16, 2, 2048, 2100, 8, 2, 64, true, 0};
  params = params_for(d64);
  check_fwd_family("d64 plain at 2048 rows, not causal (three warpgroups)", &params, wg3);
  params.causal_align = AOTK_ALIGN_TOP_LEFT;
  check_fwd_family("d64 not causal, causal_align top-left (no mask to align)", &params, wg3);
  p = d64;
  p.seqlen_q = 2047;
  params = params_for(p);
  check_fwd_family("d64 plain at 2047 rows, not causal (two warpgroups)", &params, hopper);
  p.seqlen_q = 300, p.seqlen_k = 400;
  params = params_for(p);
  check_fwd_family("d64 plain at 300 rows, not causal", &params, hopper);
  p = d64;
  p.seqlen_q = 16384, p.seqlen_k = 16384;
  params = params_for(p);
  check_fwd_family("d64 plain at 16384 rows, not causal", &params, wg3);
  params = params_for(d64);
  params.causal = 1;
  check_fwd_family("d64 causal (two warpgroups)", &params, hopper);
  params.causal_align = AOTK_ALIGN_TOP_LEFT;
  check_fwd_family("d64 causal top-left", &params, hopper);
  params = params_for(d64);
  params.window_right = 0;
  check_fwd_family("d64 window_right 0 alone (causal)", &params, hopper);
  params.causal = 1;
  check_fwd_family("d64 causal and window_right 0", &params, hopper);
  params = params_for(d64);
  params.softcap = 30.0f;
  check_fwd_family("d64 softcap at 2048 rows (two warpgroups, the EXTRAS variant)", &params, hopper);
  params.causal = 1;
  check_fwd_family("d64 causal softcap", &params, hopper);
  params = params_for(d64);
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, d64.heads_q);
  check_fwd_family("d64 ALiBi at 2048 rows", &params, hopper);
  params = params_for(d64);
  dropout_on(&params, &d64);
  check_fwd_family("d64 dropout (the Triton TMA kernel has no d64)", &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(d64);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, d64.heads_q);
  check_fwd_family("d64 sinks at 2048 rows, not causal (three warpgroups)", &params, wg3);
  params.causal = 1;
  check_fwd_family("d64 causal sinks (two warpgroups)", &params, hopper);
  params.causal = 0, params.softcap = 30.0f;
  check_fwd_family("d64 sinks and softcap", &params, hopper);
  params = params_for(d64);
  params.window_left = 64;
  check_fwd_family("d64 window_left 64 alone at 2048 rows (two warpgroups)", &params, hopper);
  params = params_for(d64);
  params.window_right = 5;
  check_fwd_family("d64 window_right 5 alone", &params, hopper);
  params = params_for(d64);
  params.window_left = 20000, params.window_right = 20000;
  check_fwd_family("d64 window (20000, 20000), wider than the sequence", &params, hopper);
  params.causal_align = AOTK_ALIGN_TOP_LEFT;
  check_fwd_family("d64 window (20000, 20000) top-left", &params, hopper);
  p = d64;
  p.dtype = AOTK_DTYPE_FLOAT16, p.with_lse = false, p.heads_kv = p.heads_q, p.seqlen_k = p.seqlen_q;
  params = packed_qkv_params(p);
  check_fwd_family("fp16 d64 packed qkv, no lse", &params, wg3);
  params = varlen_params_for(d64, 3000, 3500, false);
  check_fwd_family("varlen d64 at max_seqlen_q 2048, not causal", &params, wg3);
  params.causal = 1;
  check_fwd_family("varlen d64 causal", &params, hopper);
  params = varlen_params_for(d64, 3000, 3500, false);
  params.window_right = 0;
  check_fwd_family("varlen d64 window_right 0 alone", &params, hopper);
  params = varlen_params_for(d64, 3000, 3500, false);
  params.max_seqlen_q = 2047;
  check_fwd_family("varlen d64 at max_seqlen_q 2047, not causal", &params, hopper);
  params = varlen_params_for(d64, 3000, 3500, false);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, d64.heads_q);
  check_fwd_family("varlen d64 sinks at max_seqlen_q 2048, not causal", &params, wg3);
  params.softcap = 30.0f;
  check_fwd_family("varlen d64 sinks and softcap", &params, hopper);
  params = varlen_params_for(d64, 3000, 3500, false);
  params.window_left = 128, params.window_right = 0;
  check_fwd_family("varlen d64 causal window", &params, hopper);
  params = varlen_params_for(d64, 3000, 3500, false);
  dropout_on(&params, &d64);
  check_fwd_family("varlen d64 dropout", &params, AOTK__FAMILY_ATTN_FWD);
  /* A GPU whose shared memory holds the two-warpgroup kernel's tile and not the three's. */
  const aotk__kernel_entry *wg3_row = expected_row(wg3, 90, d64.dtype, 64, 64, 1, 0, d64.seqlen_q);
  const aotk__kernel_entry *hopper_row = expected_row(hopper, 90, d64.dtype, 64, 64, 1, 0, d64.seqlen_q);
  CHECK_MSG(wg3_row != NULL && hopper_row != NULL && hopper_row->shared_bytes < wg3_row->shared_bytes,
            "d64: the three-warpgroup row %s, the two-warpgroup row %s", wg3_row ? wg3_row->name : "(none)",
            hopper_row ? hopper_row->name : "(none)");
  if (wg3_row != NULL && hopper_row != NULL) {
    install_fake_gpu(90, wg3_row->shared_bytes - 1);
    params = params_for(d64);
    check_fwd_family("d64 not causal, one byte short of three warpgroups' shared memory", &params, hopper);
    install_fake_gpu(90, SHARED_SM90);
  }
  params = params_for(d128);
  params.causal = 1, params.window_left = 64;
  check_fwd_family("d128 causal window", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params = params_for(d128);
  dropout_on(&params, &d128);
  params.dropout_mask = mask_for(&params);
  check_fwd_family("d128 dropout with its mask", &params, AOTK__FAMILY_ATTN_FWD_TMA);
  CHECK_MSG(fake.logged_launches == 2 && fake.launch_log[1].kernel == KERNEL_DROPOUT_MASK,
            "d128 dropout with its mask: %d launches", fake.logged_launches);
  params = params_for(d128);
  params.v.strides[1] = d128.heads_kv * d128.head_dim + 64, params.v.strides[0] = d128.seqlen_k * params.v.strides[1];
  check_fwd_family("v tokens 64 elements apart beyond their heads", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  p = d128;
  p.heads_kv = p.heads_q, p.seqlen_k = p.seqlen_q;
  params = packed_qkv_params(p);
  check_fwd_family("packed qkv", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  p = d128;
  p.batch = 1;
  params = params_for(p);
  params.q.strides[0] = 16; /* the one batch's stride is not used */
  check_fwd_family("batch 1, batch stride 16", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);

  /* (192, 128), DeepSeek's pair: a Gluon tile of its own, reached as its other pairs are. Q and K come
   * in three 64-column boxes each (the row's layout, which check_launch holds the encodes to; written
   * out here): [batch, seqlen, heads * 192] in boxes of 64 rows (one consumer warpgroup's) or 128 keys
   * by 64 columns; V [batch, seqlen_k, heads_kv * 128] in boxes of 128 keys by 64 columns. */
  p = d128;
  p.head_dim = 192, p.head_dim_v = 128;
  params = params_for(p);
  check_fwd_family("head dims 192/128 (the Gluon kernel's own pair)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  {
    const encode_call *q_map = &fake.encodes[0], *k_map = &fake.encodes[1], *v_map = &fake.encodes[2];
    CHECK_MSG(fake.encode_count == 3 && q_map->dims[0] == 8 * 192 && q_map->box[0] == 64 && q_map->box[1] == 64 &&
                  k_map->dims[0] == 2 * 192 && k_map->box[0] == 64 && k_map->box[1] == 128 &&
                  v_map->dims[0] == 2 * 128 && v_map->box[0] == 64 && v_map->box[1] == 128,
              "head dims 192/128: %d maps; q {%llu, ...} box {%u, %u}, k {%llu, ...} box {%u, %u}, v {%llu, ...} "
              "box {%u, %u}",
              fake.encode_count, (unsigned long long)q_map->dims[0], q_map->box[0], q_map->box[1],
              (unsigned long long)k_map->dims[0], k_map->box[0], k_map->box[1], (unsigned long long)v_map->dims[0],
              v_map->box[0], v_map->box[1]);
  }
  check_launch("head dims 192/128", &params, &p);
  params.causal = 1, params.window_left = 100;
  check_fwd_family("head dims 192/128, causal window", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.softcap = 30.0f;
  check_fwd_family("head dims 192/128, causal window and softcap (the EXTRAS variant)", &params,
                   AOTK__FAMILY_ATTN_FWD_HOPPER);
  check_launch("head dims 192/128, causal window and softcap", &params, &p);
  params = params_for(p);
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p.heads_q);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
  check_fwd_family("head dims 192/128, ALiBi and sinks", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  dropout_on(&params, &p);
  check_fwd_family("head dims 192/128, ALiBi, sinks and dropout (the pointer kernel's 256/128: the Triton TMA "
                   "kernel has no 192)",
                   &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(p);
  make_heads_outer(&params.k);
  check_fwd_family("head dims 192/128, k heads outer", &params, AOTK__FAMILY_ATTN_FWD);
  params = varlen_params_for(p, 500, 700, false);
  check_fwd_family("varlen head dims 192/128", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  dropout_on(&params, &p);
  check_fwd_family("varlen head dims 192/128, dropout", &params, AOTK__FAMILY_ATTN_FWD);
  p.head_dim = 192, p.head_dim_v = 192;
  params = params_for(p);
  check_fwd_family("head dims 192/192 (no Gluon pair: the pointer kernel's 256)", &params, AOTK__FAMILY_ATTN_FWD);

  static const int64_t other_dims[][2] = {{32, 32}, {96, 96}, {120, 120}, {128, 64}, {256, 128}, {64, 128},
                                          {56, 56},  {184, 128}, {192, 120}};
  for (size_t i = 0; i < sizeof other_dims / sizeof other_dims[0]; i++) {
    p = d128;
    p.head_dim = other_dims[i][0], p.head_dim_v = other_dims[i][1];
    params = params_for(p);
    char what[64];
    snprintf(what, sizeof what, "head dims %lld/%lld", (long long)other_dims[i][0], (long long)other_dims[i][1]);
    check_fwd_family(what, &params, AOTK__FAMILY_ATTN_FWD);
  }
  params = varlen_params_for(d128, 500, 700, false);
  check_fwd_family("varlen d128 (the Gluon kernel takes the packed layout)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.causal = 1;
  check_fwd_family("varlen d128 causal", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.softcap = 30.0f;
  check_fwd_family("varlen d128 causal softcap (the EXTRAS variant)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.softcap = 0.0f;
  dropout_on(&params, &d128);
  check_fwd_family("varlen d128 causal dropout (the Triton TMA kernel is dense only)", &params,
                   AOTK__FAMILY_ATTN_FWD);
  params = varlen_params_for(d128, 500, 700, false);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, d128.heads_q);
  check_fwd_family("varlen d128 sinks", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.causal = 1;
  check_fwd_family("varlen d128 causal sinks", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.softcap = 30.0f;
  check_fwd_family("varlen d128 causal sinks and softcap", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.window_left = 100;
  check_fwd_family("varlen d128 causal window, sinks and softcap", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  dropout_on(&params, &d128);
  check_fwd_family("varlen d128 causal window, sinks, softcap and dropout (dense only)", &params,
                   AOTK__FAMILY_ATTN_FWD);
  params = varlen_params_for(d128, 500, 700, false);
  params.q.strides[1] = 3 * 128, params.q.strides[0] = 8 * 3 * 128; /* heads 3 * 128 apart: not one row */
  check_fwd_family("varlen d128, q's heads not contiguous", &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(d128);
  params.q.data = byte_offset(FAKE_Q, 2);
  check_fwd_family("q 2-byte aligned", &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(d128);
  params.out.data = byte_offset(FAKE_OUT, 8);
  check_fwd_family("out 8-byte aligned (the aligned kernels need all four)", &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(d128);
  make_heads_outer(&params.q);
  check_fwd_family("q heads outer (head stride != head_dim)", &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(d128);
  params.k.strides[2] = d128.head_dim + 16, params.k.strides[1] = d128.heads_kv * params.k.strides[2];
  params.k.strides[0] = d128.seqlen_k * params.k.strides[1];
  check_fwd_family("k heads 16 elements apart beyond head_dim", &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(d128);
  params.v.strides[1] = d128.head_dim; /* tokens overlap: a token's heads run into the next tokens */
  params.v.strides[0] = d128.seqlen_k * d128.heads_kv * d128.head_dim;
  check_fwd_family("v tokens overlapping", &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(d128);
  params.q.strides[0] = 16;
  check_fwd_family("batch 2, batches overlapping (batch stride 16)", &params, AOTK__FAMILY_ATTN_FWD);
  /* A single batch's stride is not used, but the alignment of every stride decides the kernel variant:
   * an odd one makes the problem unaligned, and unaligned problems take the pointer kernel. */
  p = d128;
  p.batch = 1;
  params = params_for(p);
  params.q.strides[0] = 7;
  check_fwd_family("batch 1, batch stride 7", &params, AOTK__FAMILY_ATTN_FWD);

  /* (The backward's dK/dV pass has its own rule: test_bwd_hopper_choice.) */

  /* sm_90 images only: the PTX policy, and any other GPU, run the pointer kernel. */
  CHECK(aotk_set_image_policy(AOTK_IMAGE_POLICY_SM80_PTX) == AOTK_OK);
  params = params_for(d128);
  check_fwd_family("sm_90 with AOTK_IMAGE_POLICY_SM80_PTX", &params, AOTK__FAMILY_ATTN_FWD);
  CHECK(aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO) == AOTK_OK);
  check_fwd_family("sm_90 again with AOTK_IMAGE_POLICY_AUTO", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  static const gpu others[] = {{80, SHARED_SM80, 80, 0}, {86, SHARED_SM86, 80, 0}, {100, SHARED_SM100, 80, 1},
                               {120, SHARED_SM120, 80, 1}};
  for (size_t g = 0; g < sizeof others / sizeof others[0]; g++) {
    install_fake_gpu(others[g].compute_capability, others[g].max_shared_bytes);
    char what[64];
    snprintf(what, sizeof what, "sm_%d, d128 dense aligned", others[g].compute_capability);
    params = params_for(d128);
    check_fwd_family(what, &params, AOTK__FAMILY_ATTN_FWD);
  }
  uninstall_fake_gpu();
}

/* The TMA forwards' arguments: the pointer kernel's forty, then each descriptor as encoded for q, k and
 * v (check_launch, check_tma_descriptors), for strided, packed and single-batch layouts, for the Triton
 * TMA kernel and the warp-specialized one. */
static void check_launch_of(const char *what, const aotk_attn_params *params, const problem *p, int family) {
  CHECK_MSG(expected_fwd_family(params, 90, false, fake.max_shared_bytes) == family, "%s: the case does not take %s",
            what, kernel_signatures[fwd_kernel_id(family)].function);
  check_launch(what, params, p);
}

static void test_tma_launch_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  const int tma = AOTK__FAMILY_ATTN_FWD_TMA, hopper = AOTK__FAMILY_ATTN_FWD_HOPPER;
  const int wg3 = AOTK__FAMILY_ATTN_FWD_HOPPER_WG3;
  problem gqa = {AOTK_DTYPE_BFLOAT16, 3, 1500, 777, 12, 4, 128, true, 0};
  aotk_attn_params params = params_for(gqa);
  params.causal = 1;
  check_launch_of("warp-specialized bf16 d128 GQA causal, lse", &params, &gqa, hopper);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, gqa.heads_q);
  check_launch_of("warp-specialized bf16 d128 GQA causal, sinks", &params, &gqa, hopper);
  /* The sinks written out: FLAG_SINKS (32, kernels/attn_fwd_hopper.py) with the causal mask's bits, and
   * the pointer in attn_fwd's Sinks slot, which the Gluon kernel's arguments keep. */
  reset_launch_log();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK && fake.logged_launches == 1);
  CHECK_MSG(fake.launch_log[0].kernel == KERNEL_ATTN_FWD_HOPPER &&
                arg_i32(&fake.launch_log[0], ARG_FLAGS) == (FLAG_WRITE_LSE | FLAG_SINKS | FLAG_REVERSE) &&
                arg_pointer(&fake.launch_log[0], ARG_SINKS) == (uint64_t)(uintptr_t)FAKE_SINKS,
            "warp-specialized d128 sinks: %s, flags %#x, sinks %#llx; expected attn_fwd_hopper, %#x, %#llx",
            kernel_signatures[fake.launch_log[0].kernel].function, (unsigned)arg_i32(&fake.launch_log[0], ARG_FLAGS),
            (unsigned long long)arg_pointer(&fake.launch_log[0], ARG_SINKS),
            (unsigned)(FLAG_WRITE_LSE | FLAG_SINKS | FLAG_REVERSE), (unsigned long long)(uintptr_t)FAKE_SINKS);
  /* A left window bound (wider than the query rows, so the size key stays seqlen_q) is the warp-specialized
   * kernel's too, in natural tile order (no FLAG_REVERSE); with dropout the Triton TMA kernel runs it. */
  params.window_left = 2048;
  check_launch_of("warp-specialized bf16 d128 GQA causal, window_left 2048, sinks", &params, &gqa, hopper);
  dropout_on(&params, &gqa);
  check_launch_of("TMA bf16 d128 GQA causal, window_left 2048, sinks, dropout", &params, &gqa, tma);

  problem long_q = {AOTK_DTYPE_FLOAT16, 2, 4097, 5000, 4, 4, 128, true, 0};
  params = params_for(long_q);
  params.v.strides[1] = long_q.heads_kv * long_q.head_dim + 32;
  params.v.strides[0] = long_q.seqlen_k * params.v.strides[1] + 1024;
  check_launch_of("warp-specialized fp16 d128 at 4097 rows, v tokens padded", &params, &long_q, hopper);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, long_q.heads_q);
  check_launch_of("warp-specialized fp16 d128 at 4097 rows, v tokens padded, sinks", &params, &long_q, hopper);
  /* Not causal: with window_right unbounded the size key is seqlen_q, whatever window_left is. */
  params.window_left = 1024;
  check_launch_of("warp-specialized fp16 d128 at 4097 rows, v tokens padded, window_left 1024, sinks", &params,
                  &long_q, hopper);
  dropout_on(&params, &long_q);
  check_launch_of("TMA fp16 d128 at 4097 rows (the second config), v tokens padded, window_left 1024, sinks, dropout",
                  &params, &long_q, tma);

  problem d256 = {AOTK_DTYPE_BFLOAT16, 2, 333, 333, 4, 4, 256, false, 0};
  params = packed_qkv_params(d256);
  check_launch_of("warp-specialized bf16 d256 packed qkv, no lse", &params, &d256, hopper);
  params.softcap = 10.0f;
  check_launch_of("warp-specialized bf16 d256 packed qkv, no lse, softcap (the EXTRAS variant)", &params, &d256,
                  hopper);
  dropout_on(&params, &d256);
  check_launch_of("TMA bf16 d256 packed qkv, no lse, softcap, dropout", &params, &d256, tma);
  problem d64 = {AOTK_DTYPE_FLOAT16, 2, 333, 333, 4, 4, 64, true, 0};
  params = packed_qkv_params(d64);
  check_launch_of("two-warpgroup fp16 d64 packed qkv at 333 rows", &params, &d64, hopper);
  d64.seqlen_q = d64.seqlen_k = 2333;
  params = packed_qkv_params(d64);
  check_launch_of("three-warpgroup fp16 d64 packed qkv at 2333 rows", &params, &d64, wg3);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, d64.heads_q);
  check_launch_of("three-warpgroup fp16 d64 packed qkv at 2333 rows, sinks", &params, &d64, wg3);
  params.softcap = 30.0f;
  check_launch_of("two-warpgroup fp16 d64 packed qkv at 2333 rows, sinks and softcap (the EXTRAS variant)", &params,
                  &d64, hopper);
  dropout_on(&params, &d64);
  check_launch_of("pointer fp16 d64 packed qkv at 2333 rows, sinks, softcap and dropout", &params, &d64,
                  AOTK__FAMILY_ATTN_FWD);
  params = packed_qkv_params(d64);
  params.causal = 1;
  check_launch_of("two-warpgroup fp16 d64 packed qkv at 2333 rows, causal", &params, &d64, hopper);

  problem single = {AOTK_DTYPE_BFLOAT16, 1, 100, 130, 8, 2, 128, true, 0};
  params = params_for(single);
  params.q.strides[0] = 16, params.k.strides[0] = 48, params.v.strides[0] = 1u << 20;
  check_launch_of("warp-specialized batch 1 with batch strides 16, 48 and 2^20", &params, &single, hopper);
  params.softcap = 20.0f;
  check_launch_of("warp-specialized batch 1 with batch strides 16, 48 and 2^20, softcap", &params, &single, hopper);
  dropout_on(&params, &single);
  check_launch_of("TMA batch 1 with batch strides 16, 48 and 2^20, softcap, dropout", &params, &single, tma);

  params = params_for(gqa);
  params.softcap = 30.0f;
  dropout_on(&params, &gqa);
  params.dropout_mask = mask_for(&params);
  check_launch_of("TMA d128 softcap and dropout with its mask", &params, &gqa, tma);

  /* Varlen: the packed tensors as [1, total, heads * d] (batch 1, the whole packing as rows). */
  problem packed = {AOTK_DTYPE_BFLOAT16, 3, 200, 300, 8, 2, 128, true, 0};
  params = varlen_params_for(packed, 450, 700, false);
  check_launch_of("warp-specialized varlen", &params, &packed, hopper);
  params.causal = 1;
  params.causal_align = AOTK_ALIGN_TOP_LEFT;
  check_launch_of("warp-specialized varlen causal top-left", &params, &packed, hopper);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, packed.heads_q);
  check_launch_of("warp-specialized varlen causal top-left, sinks", &params, &packed, hopper);
  packed.head_dim = 64, packed.seqlen_q = 2100, packed.seqlen_k = 2200;
  params = varlen_params_for(packed, 5000, 6000, false);
  check_launch_of("three-warpgroup varlen d64", &params, &packed, wg3);

  /* The three-warpgroup kernel's launch written out (the checks above hold it to the test's rules):
   * 192-row tiles, ceil(seqlen_q / 192) a head, so 11 for 2048 rows (the two-warpgroup kernel's would be
   * 16) and 22 for 4096 (32); one program per tile up to the 132 SMs, then 132 walking them all; 16 warps
   * (3 consumer warpgroups and the producer's, padded); Q's box one consumer warpgroup's 64 rows, K's
   * and V's the 128-key block, one batch deep. */
  static const struct {
    problem p;
    int64_t m_blocks, tiles, grid;
  } written[] = {
      {{AOTK_DTYPE_BFLOAT16, 1, 2048, 2048, 8, 8, 64, true, 0}, 11, 88, 88},
      {{AOTK_DTYPE_FLOAT16, 4, 4096, 4096, 16, 4, 64, false, 0}, 22, 1408, 132},
  };
  for (size_t i = 0; i < sizeof written / sizeof written[0]; i++) {
    const problem *w = &written[i].p;
    char what[96];
    snprintf(what, sizeof what, "three-warpgroup launch %zu (seqlen_q %lld)", i, (long long)w->seqlen_q);
    params = params_for(*w);
    check_launch_of(what, &params, w, wg3);
    reset_launch_log();
    CHECK_MSG(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK && fake.logged_launches == 1, "%s: %s", what,
              aotk_last_error());
    if (fake.logged_launches != 1) continue;
    const recorded_launch *launch = &fake.launch_log[0];
    CHECK_MSG(launch->kernel == KERNEL_ATTN_FWD_HOPPER_WG3 && launch->grid[0] == (unsigned)written[i].grid &&
                  launch->block[0] == 16 * 32 && arg_i32(launch, ARG_NUM_M_BLOCKS) == written[i].m_blocks &&
                  arg_i32(launch, HOPPER_ARG_NUM_TILES) == written[i].tiles,
              "%s: %s, grid %u, block %u, num_m_blocks %d, num_tiles %d; expected attn_fwd_hopper_wg3, %lld, 512, "
              "%lld, %lld",
              what, kernel_signatures[launch->kernel].function, launch->grid[0], launch->block[0],
              arg_i32(launch, ARG_NUM_M_BLOCKS), arg_i32(launch, HOPPER_ARG_NUM_TILES), (long long)written[i].grid,
              (long long)written[i].m_blocks, (long long)written[i].tiles);
    CHECK_MSG(fake.encode_count == TMA_DESCRIPTORS && fake.encodes[0].box[1] == 64 && fake.encodes[1].box[1] == 128 &&
                  fake.encodes[2].box[1] == 128 && fake.encodes[0].box[2] == 1 && fake.encodes[1].box[2] == 1 &&
                  fake.encodes[2].box[2] == 1,
              "%s: %d maps, boxes of %u, %u and %u rows (expected 64, 128, 128)", what, fake.encode_count,
              fake.encodes[0].box[1], fake.encodes[1].box[1], fake.encodes[2].box[1]);
  }
  uninstall_fake_gpu();
}

/* The persistent forward's grid, on shapes of the benchmark's grid (16k tokens, 2048 channels) and
 * others: check_launch holds aotk_query's grid and the launch to expected_hopper_grid, and here the
 * figures are written out (from a separate model of the rule) so that both branches are seen taken. */
static void test_hopper_grid(void) {
  install_fake_gpu(90, SHARED_SM90);
  enum { TWO = AOTK__FAMILY_ATTN_FWD_HOPPER, THREE = AOTK__FAMILY_ATTN_FWD_HOPPER_WG3 }; /* warpgroups */
  static const struct {
    problem p;
    int causal;
    int64_t grid;
    int family;
  } cases[] = {
      {{AOTK_DTYPE_BFLOAT16, 4, 4096, 4096, 16, 16, 128, true, 0}, 0, 132, TWO},    /* 2048 tiles */
      {{AOTK_DTYPE_BFLOAT16, 4, 4096, 4096, 16, 16, 128, true, 0}, 1, 132, TWO},    /* balanced enough */
      {{AOTK_DTYPE_BFLOAT16, 1, 8192, 8192, 16, 16, 128, true, 0}, 1, 1024, TWO},   /* too unequal: per tile */
      {{AOTK_DTYPE_BFLOAT16, 1, 16384, 16384, 16, 16, 128, true, 0}, 1, 2048, TWO}, /* too unequal: per tile */
      {{AOTK_DTYPE_BFLOAT16, 1, 16384, 16384, 16, 16, 128, true, 0}, 0, 132, TWO},  /* not causal */
      {{AOTK_DTYPE_FLOAT16, 1, 16384, 16384, 32, 32, 64, true, 0}, 1, 132, TWO},    /* 4096 tiles */
      {{AOTK_DTYPE_FLOAT16, 1, 16384, 16384, 32, 32, 64, true, 0}, 0, 132, THREE},  /* 86 * 32 = 2752 tiles */
      {{AOTK_DTYPE_BFLOAT16, 1, 2048, 2048, 8, 8, 64, true, 0}, 0, 88, THREE},      /* 11 * 8 (two: 16 * 8) */
      {{AOTK_DTYPE_BFLOAT16, 1, 2048, 2048, 8, 8, 64, true, 0}, 1, 128, TWO},       /* causal: 16 * 8 */
      {{AOTK_DTYPE_BFLOAT16, 1, 2047, 2047, 8, 8, 64, true, 0}, 0, 128, TWO},       /* short of 2048 rows */
      {{AOTK_DTYPE_BFLOAT16, 2, 8192, 8192, 8, 8, 256, true, 0}, 1, 1024, TWO},     /* 64-key blocks */
      {{AOTK_DTYPE_BFLOAT16, 1, 200, 200, 8, 8, 128, true, 0}, 1, 16, TWO},         /* fewer tiles than SMs */
      {{AOTK_DTYPE_BFLOAT16, 32, 8192, 8192, 32, 8, 128, false, 0}, 1, 132, TWO},   /* 65536 tiles: rounds average */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aotk_attn_params params = params_for(cases[i].p);
    params.causal = cases[i].causal;
    char what[96];
    snprintf(what, sizeof what, "persistent grid case %zu (causal %d)", i, cases[i].causal);
    check_launch_of(what, &params, &cases[i].p, cases[i].family);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
    CHECK_MSG(info.grid == cases[i].grid, "%s: grid %lld, expected %lld", what, (long long)info.grid,
              (long long)cases[i].grid);
  }
  /* Windows make tiles unequal too: a tile costs the key blocks some row of it sees, counted from the
   * block boundary at or below its first key (src/aotk_attn.c tile_key_blocks). A right bound alone runs
   * a head's last query block first, as causal does; any other window runs the tiles in order. */
  static const struct {
    problem p;
    int32_t window_left, window_right;
    aotk_align causal_align;
    int64_t grid;
  } windows[] = {
      /* A sliding causal window: the first 8 query blocks see fewer keys, 9% over the mean. */
      {{AOTK_DTYPE_BFLOAT16, 1, 8192, 8192, 16, 16, 128, true, 0}, 1024, 0, AOTK_ALIGN_BOTTOM_RIGHT, 1024},
      /* A left bound alone: the early query blocks see every key, the late ones 9 blocks. */
      {{AOTK_DTYPE_BFLOAT16, 1, 8192, 8192, 16, 16, 128, true, 0}, 1024, -1, AOTK_ALIGN_BOTTOM_RIGHT, 1024},
      /* A band: only the tiles at either end are shorter, 3% over. */
      {{AOTK_DTYPE_BFLOAT16, 1, 16384, 16384, 16, 16, 128, true, 0}, 2048, 2048, AOTK_ALIGN_BOTTOM_RIGHT, 132},
      /* Wider than the sequence: every tile walks every key. */
      {{AOTK_DTYPE_BFLOAT16, 1, 8192, 8192, 16, 16, 128, true, 0}, 100000, -1, AOTK_ALIGN_BOTTOM_RIGHT, 132},
      /* The diagonal: one key block a tile. */
      {{AOTK_DTYPE_BFLOAT16, 1, 8192, 8192, 16, 16, 128, true, 0}, 0, 0, AOTK_ALIGN_BOTTOM_RIGHT, 132},
      /* Top-left with twice as many keys as query rows: no row sees the keys past 5120, 10% over. */
      {{AOTK_DTYPE_BFLOAT16, 1, 4096, 8192, 16, 16, 128, true, 0}, 1024, 1024, AOTK_ALIGN_TOP_LEFT, 512},
      /* Causal as window_right 0: the last query block first balances 2592 tiles on 132 programs (in order
       * they would take one program each). */
      {{AOTK_DTYPE_BFLOAT16, 3, 3333, 3333, 32, 32, 128, true, 0}, -1, 0, AOTK_ALIGN_BOTTOM_RIGHT, 132},
      /* A right bound alone, top-left: causal-like, the last query block first. */
      {{AOTK_DTYPE_BFLOAT16, 1, 3000, 3000, 16, 16, 128, true, 0}, -1, 700, AOTK_ALIGN_TOP_LEFT, 384},
      /* A left bound alone runs in order, the first query blocks (which see every key) first: too
       * unequal, one program per tile; the same tiles last block first would balance on 132. */
      {{AOTK_DTYPE_BFLOAT16, 1, 4096, 4096, 24, 24, 128, true, 0}, 1000, -1, AOTK_ALIGN_BOTTOM_RIGHT, 768},
      /* A narrow band: a tile's keys [m0 - 64, m0 + 191] span 3 blocks counted from the boundary below
       * them (2 from the first key), so the middle tiles cost 4 and the first and last 3: one program per
       * tile. Counted from the first key every tile would cost 3, and 132 programs would do. */
      {{AOTK_DTYPE_BFLOAT16, 1, 1000, 1000, 32, 32, 128, true, 0}, 64, 64, AOTK_ALIGN_BOTTOM_RIGHT, 256},
  };
  for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
    aotk_attn_params params = params_for(windows[i].p);
    params.window_left = windows[i].window_left, params.window_right = windows[i].window_right;
    params.causal_align = windows[i].causal_align;
    char what[96];
    snprintf(what, sizeof what, "persistent grid, window (%d, %d)%s", windows[i].window_left, windows[i].window_right,
             windows[i].causal_align == AOTK_ALIGN_TOP_LEFT ? " top-left" : "");
    check_launch_of(what, &params, &windows[i].p, TWO);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
    CHECK_MSG(info.grid == windows[i].grid, "%s: grid %lld, expected %lld", what, (long long)info.grid,
              (long long)windows[i].grid);
  }
  uninstall_fake_gpu();
}

/* Which backward calls run the Gluon dK/dV pass (include/aotk.h, AOTK_FEATURE_TMA and
 * AOTK_FEATURE_WARP_SPECIALIZED for AOTK_OP_ATTN_BWD), and which its fused non-deterministic form
 * (AOTK_FEATURE_NONDETERMINISTIC) with the cast of its dQ: the calls the Gluon pass covers (every call but
 * dropout, at head dims 64 and 128 that TMA can read; softcap and ALiBi in its EXTRAS rows, the cast's
 * one variant after either), when deterministic is 0. check_bwd_launch holds aotk_query, the launches,
 * their arguments, the clear and the tensor maps to expect_bwd_fused and expect_bwd_hopper; here the
 * rules' answers are also written out per case, so that every outcome is seen. */
static void test_bwd_hopper_choice(void) {
  install_fake_gpu(90, SHARED_SM90);
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 2, 300, 400, 8, 2, 128, true, 0};
  const problem d64 = {AOTK_DTYPE_FLOAT16, 3, 1000, 1000, 4, 4, 64, true, 0};
  enum {
    PLAIN, CAUSAL, CAUSAL_TOP_LEFT, WINDOW_RIGHT_0, SINKS, D64, SOFTCAP, ALIBI, DROPOUT, WINDOW_LEFT, DOUT_HEADS_OUTER,
    D96, D256, VARLEN, DOUT_STRIDE_ODD, WINDOW_BOTH, WINDOW_RIGHT_5, CAUSAL_WINDOW, WINDOW_TOP_LEFT, EVERYTHING,
    D64_SOFTCAP, ALIBI_PER_SEQUENCE, CAUSAL_DROPOUT, SOFTCAP_DROPOUT, WINDOW_DROPOUT, D256_SOFTCAP, CASE_COUNT
  };
  static const struct {
    const char *what;
    bool gluon;  /* the Gluon passes run (the fused one and the cast where deterministic is 0) */
    bool extras; /* in their EXTRAS rows (or, for the Triton passes, theirs) */
  } cases[CASE_COUNT] = {
      [PLAIN] = {"bf16 d128 GQA", true, false},
      [CAUSAL] = {"causal", true, false},
      [CAUSAL_TOP_LEFT] = {"causal top-left", true, false},
      [WINDOW_RIGHT_0] = {"window_right 0 alone", true, false},
      [SINKS] = {"sinks and dsinks", true, false},
      [D64] = {"fp16 d64", true, false},
      [SOFTCAP] = {"softcap", true, true},
      [ALIBI] = {"ALiBi", true, true},
      [DROPOUT] = {"dropout (the Triton passes)", false, true},
      [WINDOW_LEFT] = {"a left window", true, false},
      [DOUT_HEADS_OUTER] = {"dout's heads outermost", false, false},
      [D96] = {"d96 (padded)", false, false},
      [D256] = {"d256", false, false},
      [VARLEN] = {"varlen (read as [1, total, heads * d])", true, false},
      [DOUT_STRIDE_ODD] = {"dout's token stride not a multiple of 16 bytes", false, false},
      [WINDOW_BOTH] = {"window (16, 5)", true, false},
      [WINDOW_RIGHT_5] = {"window_right 5 alone", true, false},
      [CAUSAL_WINDOW] = {"causal, window_left 64 (sliding)", true, false},
      [WINDOW_TOP_LEFT] = {"window (16, 5) top-left", true, false},
      [EVERYTHING] = {"causal window, softcap, ALiBi, sinks and dsinks", true, true},
      [D64_SOFTCAP] = {"fp16 d64 softcap", true, true},
      [ALIBI_PER_SEQUENCE] = {"ALiBi per sequence", true, true},
      [CAUSAL_DROPOUT] = {"causal dropout", false, true},
      [SOFTCAP_DROPOUT] = {"softcap and dropout", false, true},
      [WINDOW_DROPOUT] = {"window (16, 5) and dropout", false, true},
      [D256_SOFTCAP] = {"d256 softcap", false, true},
  };
  int fused_cases = 0, extras_cases = 0;
  for (size_t c = 0; c < 2 * (size_t)CASE_COUNT; c++) {
    const size_t i = c / 2;
    const int deterministic = (int)(c % 2);
    const bool expect_hopper = cases[i].gluon, expect_fused = expect_hopper && !deterministic;
    fused_cases += expect_fused;
    extras_cases += expect_hopper && cases[i].extras;
    problem p = i == D64 || i == D64_SOFTCAP ? d64 : d128;
    if (i == D96) p.head_dim = 96;
    if (i == D256 || i == D256_SOFTCAP) p.head_dim = 256;
    aotk_attn_params params = bwd_params_for(p);
    switch (i) {
      case CAUSAL: params.causal = 1; break;
      case CAUSAL_TOP_LEFT: params.causal = 1, params.causal_align = AOTK_ALIGN_TOP_LEFT; break;
      case WINDOW_RIGHT_0: params.window_right = 0; break;
      case SINKS:
        params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
        params.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
        break;
      case SOFTCAP:
      case D64_SOFTCAP:
      case D256_SOFTCAP: params.softcap = 30.0f; break;
      case ALIBI: params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p.heads_q); break;
      case DROPOUT: dropout_on(&params, &p); break;
      case WINDOW_LEFT: params.window_left = 64; break;
      case DOUT_HEADS_OUTER: make_heads_outer(&params.dout); break;
      case VARLEN: params = varlen_params_for(p, p.batch * p.seqlen_q, p.batch * p.seqlen_k, true); break;
      case DOUT_STRIDE_ODD:
        params.dout.strides[1] += 4, params.dout.strides[0] = params.dout.strides[1] * p.seqlen_q;
        break;
      case WINDOW_BOTH: params.window_left = 16, params.window_right = 5; break;
      case WINDOW_RIGHT_5: params.window_right = 5; break;
      case CAUSAL_WINDOW: params.causal = 1, params.window_left = 64; break;
      case WINDOW_TOP_LEFT:
        params.window_left = 16, params.window_right = 5, params.causal_align = AOTK_ALIGN_TOP_LEFT;
        break;
      case EVERYTHING:
        params.causal = 1, params.window_left = 100, params.softcap = 30.0f;
        params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p.heads_q);
        params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
        params.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
        break;
      case ALIBI_PER_SEQUENCE: alibi_per_sequence(&params, &p); break;
      case CAUSAL_DROPOUT: params.causal = 1, dropout_on(&params, &p); break;
      case SOFTCAP_DROPOUT: params.softcap = 30.0f, dropout_on(&params, &p); break;
      case WINDOW_DROPOUT: params.window_left = 16, params.window_right = 5, dropout_on(&params, &p); break;
      default: break;
    }
    params.deterministic = deterministic;
    char what_of_case[96];
    snprintf(what_of_case, sizeof what_of_case, "%s, deterministic %d", cases[i].what, deterministic);
    CHECK_MSG(expect_bwd_hopper(&params, 90, false, SHARED_SM90) == expect_hopper, "%s: the rule says %d",
              what_of_case, (int)expect_bwd_hopper(&params, 90, false, SHARED_SM90));
    CHECK_MSG(expect_bwd_fused(&params, 90, false, SHARED_SM90) == expect_fused, "%s: the fused rule says %d",
              what_of_case, (int)expect_bwd_fused(&params, 90, false, SHARED_SM90));
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK_MSG(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK, "%s: %s", what_of_case, aotk_last_error());
    const bool hopper = strncmp(info.kernel_name, "attn_bwd_dkdv_hopper_", 21) == 0;
    const bool fused = strncmp(info.kernel_name, "attn_bwd_fused_hopper_", 22) == 0;
    CHECK_MSG(hopper == (expect_hopper && !expect_fused) && fused == expect_fused &&
                  ((info.features & (AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED)) != 0) == expect_hopper &&
                  ((info.features & AOTK_FEATURE_NONDETERMINISTIC) != 0) == expect_fused,
              "%s: aotk_query names %s with features %#x", what_of_case, info.kernel_name, info.features);
    /* The EXTRAS row exactly where softcap, ALiBi (or, in the Triton passes, dropout) are on. */
    const aotk__kernel_entry *named = table_row_named(info.kernel_name, 90);
    CHECK_MSG(named != NULL && (bool)named->extras == cases[i].extras &&
                  ((info.features & AOTK_FEATURE_EXTRAS_KERNEL) != 0) == cases[i].extras,
              "%s: aotk_query names %s with features %#x, expected %s EXTRAS row", what_of_case, info.kernel_name,
              info.features, cases[i].extras ? "an" : "no");
    check_bwd_launch(what_of_case, &params, &p);
    /* The launches, written out: the Gluon pass, then the cast (fused) or the Triton dQ pass. */
    const int second = expect_fused    ? KERNEL_BWD_FUSED_HOPPER
                       : expect_hopper ? KERNEL_BWD_DKDV_HOPPER
                                       : KERNEL_BWD_DKDV;
    const int third = expect_fused ? KERNEL_BWD_DQ_CONVERT : KERNEL_BWD_DQ;
    CHECK_MSG(fake.logged_launches >= 3 && fake.launch_log[1].kernel == second && fake.launch_log[2].kernel == third,
              "%s: launched %s and %s, expected %s and %s", what_of_case,
              fake.logged_launches >= 3 ? kernel_signatures[fake.launch_log[1].kernel].function : "(none)",
              fake.logged_launches >= 3 ? kernel_signatures[fake.launch_log[2].kernel].function : "(none)",
              kernel_signatures[second].function, kernel_signatures[third].function);
  }
  printf("    %d cases, %d of them non-deterministic, %d in the Gluon passes' EXTRAS rows\n", 2 * (int)CASE_COUNT,
         fused_cases, extras_cases);
  /* Too little shared memory for the Gluon pass (but enough for the Triton one): the Triton pass. */
  aotk_attn_params params = bwd_params_for(d128);
  const aotk__kernel_entry *gluon = expected_row(AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER, 90, d128.dtype, 128, 128, 1, 0,
                                                 d128.seqlen_k);
  CHECK(gluon != NULL);
  if (gluon != NULL) {
    install_fake_gpu(90, gluon->shared_bytes - 1);
    CHECK(!expect_bwd_hopper(&params, 90, false, gluon->shared_bytes - 1));
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info);
    CHECK_MSG(status != AOTK_OK || (strncmp(info.kernel_name, "attn_bwd_dkdv_hopper_", 21) != 0 &&
                                    strncmp(info.kernel_name, "attn_bwd_fused_hopper_", 22) != 0),
              "%d bytes of shared memory: %s", gluon->shared_bytes - 1, info.kernel_name);
  }
  /* Too little for the fused pass but enough for the Gluon dK/dV pass (the fused pass holds dQ's tiles
   * too): a non-deterministic call runs the deterministic plan, with its smaller workspace, no clear,
   * and dQ's own pass; with exactly enough it runs the fused one. */
  const aotk__kernel_entry *fused = fused_row(&params);
  CHECK_MSG(fused != NULL && gluon != NULL && fused->shared_bytes > gluon->shared_bytes,
            "the fused pass (%d bytes) should need more shared memory than the dK/dV pass (%d)",
            fused ? fused->shared_bytes : -1, gluon ? gluon->shared_bytes : -1);
  if (fused != NULL && gluon != NULL && fused->shared_bytes > gluon->shared_bytes) {
    for (int short_by = 0; short_by <= 1; short_by++) {
      install_fake_gpu(90, fused->shared_bytes - short_by);
      char what_of_case[96];
      snprintf(what_of_case, sizeof what_of_case, "bf16 d128, %d bytes of shared memory",
               fused->shared_bytes - short_by);
      CHECK_MSG(expect_bwd_fused(&params, 90, false, fused->shared_bytes - short_by) == !short_by &&
                    expect_bwd_hopper(&params, 90, false, fused->shared_bytes - short_by),
                "%s: the rules say fused %d, Gluon dK/dV %d", what_of_case,
                (int)expect_bwd_fused(&params, 90, false, fused->shared_bytes - short_by),
                (int)expect_bwd_hopper(&params, 90, false, fused->shared_bytes - short_by));
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK);
      CHECK_MSG(strcmp(info.kernel_name, short_by ? gluon->name : fused->name) == 0 &&
                    info.workspace_bytes ==
                        (short_by ? bwd_workspace_bytes(&d128) : bwd_fused_workspace_bytes_for(&d128, false)),
                "%s: aotk_query names %s, %zu bytes of workspace", what_of_case, info.kernel_name,
                info.workspace_bytes);
      check_bwd_launch(what_of_case, &params, &d128);
    }
  }
  uninstall_fake_gpu();
}

/* What the last call of test_bwd_hopper_varlen's plain case (3 sequences of at most 300 / 400 rows, 700
 * and 1000 in all, bf16 d128, heads 8 / 2) launched, written out: stats_stride round_up(300, 128) = 384;
 * the statistics 8 * 3 * 8 * 384 bytes, and for the fused plan the accumulator after them, 3 * 8 * 384 *
 * 128 words; the Gluon pass over ceil(400 / block_n) * 3 * 2 programs, told FLAG_VARLEN and the
 * cu_seqlens, with maps over [1, total, heads * 128]; the cast over ceil(300 / 64) * 3 * 8 programs. */
static void check_bwd_varlen_literals(const char *what, const aotk_attn_params *params, bool fused) {
  enum { STATS_STRIDE = 384, STATISTICS_BYTES = 8 * 3 * 8 * STATS_STRIDE, ACCUMULATOR_WORDS = 3 * 8 * 384 * 128 };
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, params, &info) == AOTK_OK);
  const size_t workspace_bytes = STATISTICS_BYTES + (fused ? 4 * (size_t)ACCUMULATOR_WORDS : 0);
  CHECK_MSG(info.workspace_bytes == workspace_bytes, "%s: workspace_bytes %zu, expected %zu", what,
            info.workspace_bytes, workspace_bytes);
  CHECK_MSG(fake.logged_launches == 3, "%s: %d launches", what, fake.logged_launches);
  if (fake.logged_launches != 3) return;
  const recorded_launch *pass = &fake.launch_log[1], *dq = &fake.launch_log[2];
  CHECK_MSG(pass->kernel == (fused ? KERNEL_BWD_FUSED_HOPPER : KERNEL_BWD_DKDV_HOPPER) &&
                dq->kernel == (fused ? KERNEL_BWD_DQ_CONVERT : KERNEL_BWD_DQ),
            "%s: launched %s and %s", what, kernel_signatures[pass->kernel].function,
            kernel_signatures[dq->kernel].function);
  const aotk__kernel_entry *row = fused ? fused_row(params) : expected_row(AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER, 90,
                                                                           AOTK_DTYPE_BFLOAT16, 128, 128, 1, 0, 400);
  CHECK(row != NULL);
  if (row == NULL) return;
  CHECK_MSG(pass->grid[0] == (unsigned)(ceil_div(400, row->block_n) * 3 * 2) && info.grid == (int64_t)pass->grid[0],
            "%s: the dK/dV pass's grid %u (aotk_query %lld) with block_n %d", what, pass->grid[0],
            (long long)info.grid, row->block_n);
  CHECK_MSG(arg_i32(pass, DKDV_FLAGS) == (FLAG_WRITE_LSE | FLAG_VARLEN) && arg_i32(pass, DKDV_SEQLEN_Q) == 300 &&
                arg_i32(pass, DKDV_SEQLEN_K) == 400 && arg_i32(pass, DKDV_STATS_STRIDE) == STATS_STRIDE &&
                arg_pointer(pass, DKDV_CU_SEQLENS_Q) == (uint64_t)(uintptr_t)FAKE_CU_SEQLENS_Q &&
                arg_pointer(pass, DKDV_CU_SEQLENS_K) == (uint64_t)(uintptr_t)FAKE_CU_SEQLENS_K,
            "%s: the Gluon pass's flags %#x, lengths %d / %d, stats_stride %d, or cu_seqlens", what,
            (unsigned)arg_i32(pass, DKDV_FLAGS), arg_i32(pass, DKDV_SEQLEN_Q), arg_i32(pass, DKDV_SEQLEN_K),
            arg_i32(pass, DKDV_STATS_STRIDE));
  /* q's and k's maps: [1, 700, 8 * 128] and [1, 1000, 2 * 128] bf16, the single batch's stride spanning
   * the total; in the launch the same shapes and element strides. */
  const encode_call *q_map = &fake.encodes[0], *k_map = &fake.encodes[1];
  CHECK_MSG(fake.encode_count == (fused ? 5 : 4) && q_map->dims[0] == 1024 && q_map->dims[1] == 700 &&
                q_map->dims[2] == 1 && q_map->strides_bytes[0] == 2048 && q_map->strides_bytes[1] == 2048 * 700 &&
                k_map->dims[0] == 256 && k_map->dims[1] == 1000 && k_map->dims[2] == 1 &&
                k_map->strides_bytes[0] == 512 && k_map->strides_bytes[1] == 512 * 1000,
            "%s: %d maps; q's dims {%llu, %llu, %llu} byte strides {%llu, %llu}, k's dims {%llu, %llu, %llu}", what,
            fake.encode_count, (unsigned long long)q_map->dims[0], (unsigned long long)q_map->dims[1],
            (unsigned long long)q_map->dims[2], (unsigned long long)q_map->strides_bytes[0],
            (unsigned long long)q_map->strides_bytes[1], (unsigned long long)k_map->dims[0],
            (unsigned long long)k_map->dims[1], (unsigned long long)k_map->dims[2]);
  const int q_desc = DKDV_GLOBAL_SCRATCH;
  CHECK_MSG(arg_i32(pass, q_desc + TMA_SLOT_SHAPE) == 1 && arg_i32(pass, q_desc + TMA_SLOT_SHAPE + 1) == 700 &&
                arg_i32(pass, q_desc + TMA_SLOT_SHAPE + 2) == 1024 &&
                arg_i64(pass, q_desc + TMA_SLOT_STRIDES) == 700 * 1024 &&
                arg_i64(pass, q_desc + TMA_SLOT_STRIDES + 1) == 1024,
            "%s: q's descriptor (%d, %d, %d) strides (%lld, %lld)", what, arg_i32(pass, q_desc + TMA_SLOT_SHAPE),
            arg_i32(pass, q_desc + TMA_SLOT_SHAPE + 1), arg_i32(pass, q_desc + TMA_SLOT_SHAPE + 2),
            (long long)arg_i64(pass, q_desc + TMA_SLOT_STRIDES),
            (long long)arg_i64(pass, q_desc + TMA_SLOT_STRIDES + 1));
  if (!fused) {
    CHECK_MSG(fake.memsets == 0 && arg_i32(dq, DQ_FLAGS) == (FLAG_WRITE_LSE | FLAG_VARLEN),
              "%s: %d clears; the Triton dQ pass's flags %#x", what, fake.memsets, (unsigned)arg_i32(dq, DQ_FLAGS));
    return;
  }
  /* The fused plan: the accumulator [24, 384, 128] fp32 cleared and mapped after the statistics. */
  const encode_call *acc_map = &fake.encodes[4];
  CHECK_MSG(fake.memsets == 1 && fake.memset_count == ACCUMULATOR_WORDS &&
                fake.memset_destination == (CUdeviceptr)(uintptr_t)byte_offset(FAKE_WORKSPACE, STATISTICS_BYTES) &&
                acc_map->dims[0] == 128 && acc_map->dims[1] == STATS_STRIDE && acc_map->dims[2] == 24,
            "%s: %d clears of %zu words; the accumulator's map {%llu, %llu, %llu}", what, fake.memsets,
            fake.memset_count, (unsigned long long)acc_map->dims[0], (unsigned long long)acc_map->dims[1],
            (unsigned long long)acc_map->dims[2]);
  /* The cast: cu_seqlens_q and FLAG_VARLEN, the packed dq's strides (0, 8 * 128, 128), the max_seqlen's
   * 5 blocks of 64 rows for each of 3 sequences and 8 heads. */
  CHECK_MSG(dq->grid[0] == 5 * 3 * 8 &&
                arg_pointer(dq, CONVERT_CU_SEQLENS_Q) == (uint64_t)(uintptr_t)FAKE_CU_SEQLENS_Q &&
                arg_i32(dq, CONVERT_FLAGS) == FLAG_VARLEN && arg_i64(dq, CONVERT_STRIDE_DQB) == 0 &&
                arg_i32(dq, CONVERT_STRIDE_DQS) == 1024 && arg_i32(dq, CONVERT_STRIDE_DQH) == 128 &&
                arg_i32(dq, CONVERT_SEQLEN_Q) == 300 && arg_i32(dq, CONVERT_HEADS_Q) == 8 &&
                arg_i32(dq, CONVERT_NUM_M_BLOCKS) == 5 && arg_i32(dq, CONVERT_STATS_STRIDE) == STATS_STRIDE,
            "%s: the cast's grid %u, cu_seqlens_q %#llx, flags %#x, strides (%lld, %d, %d), seqlen_q %d, heads_q %d, "
            "num_m_blocks %d, stats_stride %d",
            what, dq->grid[0], (unsigned long long)arg_pointer(dq, CONVERT_CU_SEQLENS_Q),
            (unsigned)arg_i32(dq, CONVERT_FLAGS), (long long)arg_i64(dq, CONVERT_STRIDE_DQB),
            arg_i32(dq, CONVERT_STRIDE_DQS), arg_i32(dq, CONVERT_STRIDE_DQH), arg_i32(dq, CONVERT_SEQLEN_Q),
            arg_i32(dq, CONVERT_HEADS_Q), arg_i32(dq, CONVERT_NUM_M_BLOCKS), arg_i32(dq, CONVERT_STATS_STRIDE));
}

/* The sm_90 backward's Gluon passes take the varlen layout too, under the dense conditions: the packed
 * tensors [total, heads, d] are read as [1, total, heads * d] (batch stride 0: each sequence's rows
 * start at its cu_seqlens entry), and the problem is num_seqs sequences of max_seqlen_q / max_seqlen_k
 * rows, so the grids, stats_stride and the fused plan's workspace follow from those, never from the
 * totals. deterministic 1 runs the Gluon dK/dV pass and the Triton dQ pass; 0 the clear, the fused pass
 * and the cast, which is told cu_seqlens_q and FLAG_VARLEN. Masks and windows of either alignment, sinks,
 * and softcap and ALiBi (in the EXTRAS rows) run there too; dropout or a padded head dim keep the Triton
 * passes. check_bwd_launch checks each call against the model; here the model's answers and the numbers
 * that matter are also written out. */
static void test_bwd_hopper_varlen(void) {
  install_fake_gpu(90, SHARED_SM90);
  /* 3 sequences of at most 300 query and 400 key rows, 700 and 1000 rows in all; GQA 8 / 2. */
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 3, 300, 400, 8, 2, 128, true, 0};
  enum { TOTAL_Q = 700, TOTAL_K = 1000 };
  enum {
    PLAIN, CAUSAL, CAUSAL_TOP_LEFT, SINKS, D64, SOFTCAP, D96, ALIBI, WINDOW, WINDOW_TOP_LEFT, DROPOUT, SOFTCAP_DROPOUT,
    CASE_COUNT
  };
  static const struct {
    const char *what;
    bool gluon;  /* the Gluon passes run (the fused one where deterministic is 0) */
    bool extras; /* the dK/dV (or fused) row is EXTRAS */
  } cases[CASE_COUNT] = {
      [PLAIN] = {"varlen bf16 d128 GQA", true, false},
      [CAUSAL] = {"varlen causal", true, false},
      [CAUSAL_TOP_LEFT] = {"varlen causal top-left", true, false},
      [SINKS] = {"varlen sinks and dsinks", true, false},
      [D64] = {"varlen fp16 d64", true, false},
      [SOFTCAP] = {"varlen softcap (the Gluon passes' EXTRAS rows)", true, true},
      [D96] = {"varlen d96 (padded: the Triton passes)", false, false},
      [ALIBI] = {"varlen ALiBi per sequence, causal", true, true},
      [WINDOW] = {"varlen window (64, 8)", true, false},
      [WINDOW_TOP_LEFT] = {"varlen causal window_left 32, top-left", true, false},
      [DROPOUT] = {"varlen dropout (the Triton passes)", false, true},
      [SOFTCAP_DROPOUT] = {"varlen softcap and dropout (the Triton passes)", false, true},
  };
  int calls = 0;
  for (int c = 0; c < CASE_COUNT; c++) {
    for (int deterministic = 0; deterministic <= 1; deterministic++) {
      problem p = d128;
      if (c == D64) p.dtype = AOTK_DTYPE_FLOAT16, p.head_dim = 64;
      if (c == D96) p.head_dim = 96;
      aotk_attn_params params = varlen_params_for(p, TOTAL_Q, TOTAL_K, true);
      params.deterministic = deterministic;
      if (c == CAUSAL || c == CAUSAL_TOP_LEFT) params.causal = 1;
      if (c == CAUSAL_TOP_LEFT) params.causal_align = AOTK_ALIGN_TOP_LEFT;
      if (c == SINKS) {
        sinks_on(&params, &p);
        params.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
      }
      if (c == SOFTCAP || c == SOFTCAP_DROPOUT) params.softcap = 30.0f;
      if (c == ALIBI) alibi_per_sequence(&params, &p), params.causal = 1;
      if (c == WINDOW) params.window_left = 64, params.window_right = 8;
      if (c == WINDOW_TOP_LEFT) {
        params.causal = 1, params.window_left = 32, params.causal_align = AOTK_ALIGN_TOP_LEFT;
      }
      if (c == DROPOUT || c == SOFTCAP_DROPOUT) dropout_on(&params, &p);
      const bool fused = cases[c].gluon && deterministic == 0;
      char what[128];
      snprintf(what, sizeof what, "%s, deterministic %d", cases[c].what, deterministic);
      CHECK_MSG(expect_bwd_hopper(&params, 90, false, SHARED_SM90) == cases[c].gluon &&
                    expect_bwd_fused(&params, 90, false, SHARED_SM90) == fused,
                "%s: the rules say Gluon %d, fused %d", what, (int)expect_bwd_hopper(&params, 90, false, SHARED_SM90),
                (int)expect_bwd_fused(&params, 90, false, SHARED_SM90));
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info);
      CHECK_MSG(status == AOTK_OK, "%s: aotk_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
      if (status != AOTK_OK) continue;
      const char *prefix = fused            ? "attn_bwd_fused_hopper_"
                           : cases[c].gluon ? "attn_bwd_dkdv_hopper_"
                                            : "attn_bwd_dkdv_";
      const uint32_t gluon_bits = AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED;
      /* ("attn_bwd_dkdv_" is also the start of the Gluon pass's names.) */
      const bool named_gluon_dkdv = strncmp(info.kernel_name, "attn_bwd_dkdv_hopper_", 21) == 0;
      CHECK_MSG(strncmp(info.kernel_name, prefix, strlen(prefix)) == 0 &&
                    named_gluon_dkdv == (cases[c].gluon && !fused),
                "%s: aotk_query names %s, expected a %s row", what, info.kernel_name, prefix);
      const aotk__kernel_entry *named = table_row_named(info.kernel_name, 90);
      CHECK_MSG((info.features & AOTK_FEATURE_VARLEN) != 0 &&
                    ((info.features & gluon_bits) == gluon_bits) == cases[c].gluon &&
                    ((info.features & AOTK_FEATURE_NONDETERMINISTIC) != 0) == fused &&
                    ((info.features & AOTK_FEATURE_EXTRAS_KERNEL) != 0) == cases[c].extras && named != NULL &&
                    (bool)named->extras == cases[c].extras,
                "%s: %s, features %#x", what, info.kernel_name, info.features);
      check_bwd_launch(what, &params, &p);
      calls++;
      if (c == PLAIN) check_bwd_varlen_literals(what, &params, fused);
    }
  }
  printf("    %d varlen backward calls\n", calls);
  uninstall_fake_gpu();
}

/* The backward's tensor maps are encoded before anything is cleared or launched: a failing encode (of
 * q, k, v or dout, and for the non-deterministic plan its dQ accumulator) fails the call naming the
 * tensor, with nothing cleared or launched; the next call runs whole. */
static void test_bwd_encode_failure(void) {
  static const char *const names[FUSED_DESCRIPTORS] = {
      "cuTensorMapEncodeTiled(q)", "cuTensorMapEncodeTiled(k)", "cuTensorMapEncodeTiled(v)",
      "cuTensorMapEncodeTiled(dout)", "cuTensorMapEncodeTiled(the dq accumulator)"};
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 2, 300, 400, 8, 2, 128, true, 0};
  for (int deterministic = 0; deterministic <= 1; deterministic++) {
    const int encodes = deterministic ? 4 : FUSED_DESCRIPTORS;
    for (int failing = 1; failing <= encodes; failing++) {
      install_fake_gpu(90, SHARED_SM90);
      aotk_attn_params params = bwd_params_for(d128);
      params.deterministic = deterministic;
      CHECK(expect_bwd_hopper(&params, 90, false, SHARED_SM90) &&
            expect_bwd_fused(&params, 90, false, SHARED_SM90) == !deterministic);
      const size_t workspace_bytes =
          deterministic ? bwd_workspace_bytes(&d128) : bwd_fused_workspace_bytes_for(&d128, false);
      fake.encode_result = CUDA_ERROR_INVALID_VALUE;
      fake.fail_encode_call = failing;
      reset_calls();
      reset_launch_log();
      aotk_status status = aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions(names[failing - 1]),
                "deterministic %d, encode %d failing: %s (\"%s\")", deterministic, failing, aotk_status_name(status),
                aotk_last_error());
      CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 0 && fake.calls[CALL_cuMemsetD32Async] == 0 &&
                    fake.calls[CALL_cuTensorMapEncodeTiled] == failing,
                "deterministic %d, encode %d failing: %s", deterministic, failing, called_functions());
      fake.encode_result = CUDA_SUCCESS;
      reset_launch_log();
      CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK);
      CHECK_MSG(fake.launches == 3 &&
                    fake.launch_log[1].kernel == (deterministic ? KERNEL_BWD_DKDV_HOPPER : KERNEL_BWD_FUSED_HOPPER) &&
                    fake.encode_count == encodes && fake.memsets == !deterministic,
                "deterministic %d, after encode %d failed: %d launches, %d encodes, %d clears", deterministic, failing,
                fake.launches, fake.encode_count, fake.memsets);
    }
  }
  uninstall_fake_gpu();
}

/* A tensor map that fails to encode fails the call with AOTK_ERROR_CUDA naming the tensor, before
 * anything is launched (the dropout-mask kernel neither); the next call, with the driver well again,
 * runs whole. For the Triton TMA kernel (with dropout and its mask) and the warp-specialized one. */
static void test_tma_encode_failure(void) {
  static const char *const names[3] = {"cuTensorMapEncodeTiled(q)", "cuTensorMapEncodeTiled(k)",
                                       "cuTensorMapEncodeTiled(v)"};
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 2, 300, 400, 8, 2, 128, true, 0};
  for (int hopper = 0; hopper <= 1; hopper++)
    for (int failing = 1; failing <= 3; failing++) {
      install_fake_gpu(90, SHARED_SM90);
      aotk_attn_params params = params_for(d128);
      if (!hopper) {
        dropout_on(&params, &d128);
        params.dropout_mask = mask_for(&params);
      }
      const int family = hopper ? AOTK__FAMILY_ATTN_FWD_HOPPER : AOTK__FAMILY_ATTN_FWD_TMA;
      CHECK(expected_fwd_family(&params, 90, false, fake.max_shared_bytes) == family);
      fake.encode_result = CUDA_ERROR_INVALID_VALUE;
      fake.fail_encode_call = failing;
      reset_calls();
      reset_launch_log();
      aotk_status status = aotk_attn_fwd(&params, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA, "%s, encode %d failing: %s, expected AOTK_ERROR_CUDA",
                hopper ? "hopper" : "tma", failing, aotk_status_name(status));
      CHECK_MSG(message_mentions(names[failing - 1]) && message_mentions(injected_error_name),
                "encode %d failing: the message \"%s\" does not name %s and the error", failing, aotk_last_error(),
                names[failing - 1]);
      CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 0 && fake.launches == 0, "encode %d failing: %d launches", failing,
                fake.calls[CALL_cuLaunchKernel]);
      CHECK_MSG(fake.calls[CALL_cuTensorMapEncodeTiled] == failing, "encode %d failing: %d encodes tried", failing,
                fake.calls[CALL_cuTensorMapEncodeTiled]);
      fake.encode_result = CUDA_SUCCESS;
      reset_launch_log();
      CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK);
      CHECK_MSG(fake.launches == 2 - hopper && fake.launch_log[0].kernel == fwd_kernel_id(family) &&
                    fake.encode_count == TMA_DESCRIPTORS,
                "after encode %d failed: %d launches, %d encodes", failing, fake.launches, fake.encode_count);
      CHECK(aotk_last_error()[0] == '\0');
    }
  uninstall_fake_gpu();
}

/* The backward's tuning: each family's config is chosen by its own size key, seqlen_k for the dK/dV
 * pass and seqlen_q for the preprocess and dQ passes, at every bound of every variant and on either
 * side of it, with the expectation read from the table rows. aotk_query names the dK/dV kernel; the
 * other two are recognised by their launch (tile rows, warps, shared memory). */
static void test_bwd_tuning_choice(void) {
  static const struct {
    int compute_capability, max_shared_bytes, arch;
  } gpus[] = {{80, SHARED_SM80, 80}, {90, SHARED_SM90, 90}};
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};
  static const int families[] = {AOTK__FAMILY_ATTN_BWD_PREPROCESS, AOTK__FAMILY_ATTN_BWD_DKDV, AOTK__FAMILY_ATTN_BWD_DQ};
  const int64_t other_length = 100; /* the length that is not the family's key */
  int queries = 0, launches = 0, dkdv_variants_tuned_by_size = 0;
  for (int g = 0; g < 2; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (int d = 0; d < 2; d++)
      for (int head_dim = 64; head_dim <= 128; head_dim += 64)
        for (int aligned = 0; aligned <= 1; aligned++)
          for (int f = 0; f < 3; f++) {
            const int family = families[f];
            int64_t sizes[32];
            int bounds = 0;
            int count = tuning_probe_sizes(family, gpus[g].arch, dtypes[d], head_dim, aligned, 0, sizes, &bounds);
            CHECK_MSG(bounds >= 1, "family %d sm_%d dtype %d d%d aligned %d: no row", family, gpus[g].arch,
                      (int)dtypes[d], head_dim, aligned);
            if (bounds == 0) continue;

            const aotk__kernel_entry *previous = NULL;
            int changes = 0;
            for (int s = 0; s < count; s++) {
              problem p = default_problem;
              p.dtype = dtypes[d];
              p.head_dim = head_dim;
              p.seqlen_q = family == AOTK__FAMILY_ATTN_BWD_DKDV ? other_length : sizes[s];
              p.seqlen_k = family == AOTK__FAMILY_ATTN_BWD_DKDV ? sizes[s] : other_length;
              aotk_attn_params params = bwd_params_for(p);
              /* q's heads outermost: TMA cannot read it, so sm_90 runs the Triton dK/dV pass, whose
               * tuning this is (the Gluon one has a single config; test_bwd_hopper_launch covers it). */
              make_heads_outer(&params.q);
              if (!aligned) params.q.data = byte_offset(FAKE_Q, 2);
              const aotk__kernel_entry *rows[3];
              expected_bwd_rows(gpus[g].arch, &p, aligned, rows);
              const aotk__kernel_entry *expected = rows[f];
              changes += previous != NULL && expected != previous;
              previous = expected;

              aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
              aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info);
              queries++;
              CHECK_MSG(status == AOTK_OK && rows[1] != NULL && strcmp(info.kernel_name, rows[1]->name) == 0,
                        "sm_%d seqlen_q %lld seqlen_k %lld: %s picked %s for dK/dV, expected %s", gpus[g].arch,
                        (long long)p.seqlen_q, (long long)p.seqlen_k, aotk_status_name(status), info.kernel_name,
                        rows[1] ? rows[1]->name : "(none)");
              if (family == AOTK__FAMILY_ATTN_BWD_DKDV) {
                CHECK_MSG(info.grid == ceil_div(p.seqlen_k, info.block_n) * p.batch * p.heads_kv,
                          "seqlen_k %lld: grid %lld with block_n %d", (long long)p.seqlen_k, (long long)info.grid,
                          info.block_n);
                /* The same lengths the other way round: dK/dV follows seqlen_k, not seqlen_q. */
                problem swapped = p;
                swapped.seqlen_q = p.seqlen_k;
                swapped.seqlen_k = p.seqlen_q;
                aotk_attn_params swapped_params = bwd_params_for(swapped);
                make_heads_outer(&swapped_params.q);
                if (!aligned) swapped_params.q.data = byte_offset(FAKE_Q, 2);
                const aotk__kernel_entry *swapped_expected = expected_row(AOTK__FAMILY_ATTN_BWD_DKDV, gpus[g].arch, dtypes[d], head_dim,
                                                                          head_dim, aligned, 0, swapped.seqlen_k);
                status = aotk_query(AOTK_OP_ATTN_BWD, &swapped_params, &info);
                queries++;
                CHECK_MSG(status == AOTK_OK && swapped_expected != NULL &&
                              strcmp(info.kernel_name, swapped_expected->name) == 0,
                          "sm_%d seqlen_q %lld seqlen_k %lld: %s picked %s for dK/dV, expected %s", gpus[g].arch,
                          (long long)swapped.seqlen_q, (long long)swapped.seqlen_k, aotk_status_name(status),
                          info.kernel_name, swapped_expected ? swapped_expected->name : "(none)");
                continue;
              }
              /* Preprocess or dQ: launch, and recognise the row by how it was launched. */
              if (expected == NULL) continue;
              reset_launch_log();
              status = aotk_attn_bwd(&params, FAKE_WORKSPACE, bwd_workspace_bytes(&p), FAKE_STREAM);
              launches++;
              CHECK_MSG(status == AOTK_OK && fake.logged_launches == 3, "sm_%d seqlen_q %lld: %s (%s), %d launches",
                        gpus[g].arch, (long long)p.seqlen_q, aotk_status_name(status), aotk_last_error(),
                        fake.logged_launches);
              if (status != AOTK_OK || fake.logged_launches != 3) continue;
              const recorded_launch *launch = &fake.launch_log[f];
              int num_m_blocks_index = family == AOTK__FAMILY_ATTN_BWD_PREPROCESS ? PRE_NUM_M_BLOCKS : DQ_NUM_M_BLOCKS;
              /* The pre-pass runs over the statistics' padded rows, dQ over seqlen_q. */
              int64_t m_blocks = ceil_div(family == AOTK__FAMILY_ATTN_BWD_PREPROCESS ? stats_stride(&p) : p.seqlen_q,
                                          expected->block_m);
              CHECK_MSG(launch->kernel == (family == AOTK__FAMILY_ATTN_BWD_PREPROCESS ? KERNEL_BWD_PREPROCESS
                                                                                     : KERNEL_BWD_DQ) &&
                            arg_i32(launch, num_m_blocks_index) == m_blocks &&
                            launch->grid[0] == (unsigned)(m_blocks * p.batch * p.heads_q) &&
                            launch->block[0] == 32u * (unsigned)expected->num_warps &&
                            launch->shared_bytes == (unsigned)expected->shared_bytes,
                        "sm_%d seqlen_q %lld: launched %s with %d blocks of rows, grid %u, block %u, %u bytes; "
                        "expected %s (block_m %d, %d warps, %d bytes)",
                        gpus[g].arch, (long long)p.seqlen_q, kernel_signatures[launch->kernel].function,
                        arg_i32(launch, num_m_blocks_index), launch->grid[0], launch->block[0], launch->shared_bytes,
                        expected->name, expected->block_m, expected->num_warps, expected->shared_bytes);
            }
            if (bounds >= 2) {
              CHECK_MSG(changes >= 1, "family %d sm_%d d%d: %d configs, but the choice never changes with its key",
                        family, gpus[g].arch, head_dim, bounds);
              dkdv_variants_tuned_by_size += family == AOTK__FAMILY_ATTN_BWD_DKDV;
            }
          }
  }
  printf("    %d queries, %d backward calls\n", queries, launches);
  /* Otherwise the checks above never saw the dK/dV choice change, and prove nothing about its key. */
  CHECK_MSG(dkdv_variants_tuned_by_size > 0, "no dK/dV variant has two configs");

  /* The catalog's dK/dV tuning in words: on sm_90 with head_dim 128, a wider key tile from seqlen_k
   * 4096 on, whatever seqlen_q is (the Triton pass: q's heads outermost keep TMA out). */
  install_fake_gpu(90, SHARED_SM90);
  for (int64_t seqlen_q = 100; seqlen_q <= 8192; seqlen_q *= 82) {
    int32_t block_n[2] = {0, 0};
    for (int longer = 0; longer <= 1; longer++) {
      problem p = default_problem;
      p.head_dim = 128;
      p.seqlen_q = seqlen_q;
      p.seqlen_k = longer ? 4096 : 4095;
      aotk_attn_params params = bwd_params_for(p);
      make_heads_outer(&params.q);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK);
      block_n[longer] = info.block_n;
    }
    CHECK_MSG(block_n[0] < block_n[1], "sm_90 d128 seqlen_q %lld: dK/dV block_n %d at seqlen_k 4095, %d at 4096",
              (long long)seqlen_q, block_n[0], block_n[1]);
  }
  uninstall_fake_gpu();
}

/* aotk_preload loads every kernel the GPU can run, once, so that no later call loads one. */
static void test_preload(void) {
  static const gpu gpus[] = {{90, SHARED_SM90, 90, 0}, {86, SHARED_SM86, 80, 0}, {120, SHARED_SM120, 80, 1},
                             {90, 100 * 1024, 90, 0}};
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    int expected = 0;
    for (int i = 0; i < aotk__kernel_count; i++) {
      expected += aotk__kernel_table[i].arch == gpus[g].arch &&
                  aotk__kernel_table[i].shared_bytes <= gpus[g].max_shared_bytes;
    }
    aotk_status status = aotk_preload();
    CHECK_MSG(status == AOTK_OK, "cc %d: %s (%s)", gpus[g].compute_capability, aotk_status_name(status),
              aotk_last_error());
    CHECK_MSG(fake.loaded_images == expected && (gpus[g].from_ptx ? fake.loaded_ptx : fake.loaded_elf) == expected,
              "cc %d with %d bytes: loaded %d images (%d ELF, %d PTX), expected %d", gpus[g].compute_capability,
              gpus[g].max_shared_bytes, fake.loaded_images, fake.loaded_elf, fake.loaded_ptx, expected);
    CHECK(fake.launches == 0);
    aotk_attn_params params = valid_params();
    CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK);
    CHECK_MSG(fake.loaded_images == expected, "cc %d: a launch after preload loaded an image",
              gpus[g].compute_capability);
  }
  uninstall_fake_gpu();
}

/* ---- callers built against release 0.1 ---------------------------------------------------------- */

/* The launch arguments of two recorded launches, compared over the kernel's parameter list. */
static bool same_launch(const recorded_launch *a, const recorded_launch *b) {
  if (a->kernel != b->kernel || a->function != b->function || memcmp(a->grid, b->grid, sizeof a->grid) != 0 ||
      memcmp(a->block, b->block, sizeof a->block) != 0 || a->shared_bytes != b->shared_bytes ||
      a->stream != b->stream) {
    return false;
  }
  return memcmp(a->args, b->args, strlen(kernel_signatures[a->kernel].param_kinds) * sizeof a->args[0]) == 0;
}

/* `params` as a caller built against 0.1 passes it: struct_size is 0.1's size, and the struct is copied
 * into a heap block of exactly that size, so that a read past it shows under ASan. Free the result. */
static aotk_attn_params *as_release_0_1(const aotk_attn_params *params) {
  aotk_attn_params prefix = *params;
  prefix.struct_size = ATTN_PARAMS_0_1_BYTES;
  aotk_attn_params *block = malloc(ATTN_PARAMS_0_1_BYTES);
  if (block != NULL) memcpy(block, &prefix, ATTN_PARAMS_0_1_BYTES);
  return block;
}

/* A caller compiled against 0.1 passes the struct as 0.1 defined it, ending where cu_seqlens_q begins,
 * and nothing past it. Its calls must behave exactly as 0.1's did, which is as a 0.2 caller's with the
 * new fields at AOTK_ATTN_PARAMS_INIT's values: no varlen, no softcap, ALiBi, sinks or dropout, and
 * windows unbounded (-1, not the 0 of zeroed memory, which would mean "the diagonal only"). */
static void test_release_0_1_caller(void) {
  install_fake_gpu(90, SHARED_SM90);
  CHECK(ATTN_PARAMS_0_1_BYTES < sizeof(aotk_attn_params));
  for (int causal = 0; causal <= 1; causal++) {
    for (int op = AOTK_OP_ATTN_FWD; op <= AOTK_OP_ATTN_BWD; op++) {
      const bool bwd = op == AOTK_OP_ATTN_BWD;
      const int launches = bwd ? 3 : 1;
      char what[64];
      snprintf(what, sizeof what, "a 0.1 caller's %s%s", op_function((aotk_op)op), causal ? ", causal" : "");
      aotk_attn_params current = bwd ? strided_bwd_params(default_problem) : strided_params(default_problem);
      current.causal = causal;
      aotk_attn_params *old = as_release_0_1(&current);
      CHECK(old != NULL);
      if (old == NULL) continue;

      aotk_kernel_info old_info, current_info;
      poison_info(&old_info);
      poison_info(&current_info);
      aotk_status status = aotk_query((aotk_op)op, old, &old_info);
      CHECK_MSG(status == AOTK_OK, "%s: aotk_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
      CHECK(aotk_query((aotk_op)op, &current, &current_info) == AOTK_OK);
      if (status != AOTK_OK) { /* old_info is still poisoned: no kernel_name to print */
        free(old);
        continue;
      }
      CHECK_MSG(memcmp(&old_info, &current_info, sizeof old_info) == 0,
                "%s: aotk_query reports %s (features %#x), a 0.2 caller's %s (features %#x)", what,
                old_info.kernel_name, old_info.features, current_info.kernel_name, current_info.features);
      CHECK_MSG(old_info.features == (causal ? AOTK_FEATURE_CAUSAL : 0u), "%s: features %#x", what, old_info.features);

      reset_launch_log();
      status = run_op((aotk_op)op, old);
      CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", what, aotk_status_name(status), aotk_last_error());
      CHECK_MSG(fake.logged_launches == launches, "%s: %d launches", what, fake.logged_launches);
      if (status != AOTK_OK || fake.logged_launches != launches) {
        free(old);
        continue;
      }
      recorded_launch old_launches[3];
      memcpy(old_launches, fake.launch_log, sizeof old_launches[0] * (size_t)launches);
      /* The windows the kernels get: unbounded on the left, and on the right unless causal. */
      const recorded_launch *main_launch = &old_launches[bwd ? 1 : 0];
      const int left = bwd ? DKDV_WINDOW_LEFT : ARG_WINDOW_LEFT, right = bwd ? DKDV_WINDOW_RIGHT : ARG_WINDOW_RIGHT;
      const int flags = bwd ? DKDV_FLAGS : ARG_FLAGS;
      CHECK_MSG(arg_i32(main_launch, left) == -1 && arg_i32(main_launch, right) == (causal ? 0 : -1),
                "%s: window (%d, %d), expected (-1, %d)", what, arg_i32(main_launch, left),
                arg_i32(main_launch, right), causal ? 0 : -1);
      CHECK_MSG(arg_i32(main_launch, flags) == (FLAG_WRITE_LSE | (causal ? FLAG_REVERSE : 0)), "%s: flags %#x", what,
                (unsigned)arg_i32(main_launch, flags));
      /* And everything else as a 0.2 caller's call with the defaults. */
      reset_launch_log();
      CHECK(run_op((aotk_op)op, &current) == AOTK_OK && fake.logged_launches == launches);
      for (int i = 0; i < launches && i < fake.logged_launches; i++) {
        CHECK_MSG(same_launch(&old_launches[i], &fake.launch_log[i]), "%s: launch %d differs from a 0.2 caller's",
                  what, i + 1);
      }
      free(old);
    }
  }

  /* What lies past a 0.1 caller's struct is not its: garbage there changes nothing. */
  aotk_attn_params garbage = valid_params();
  garbage.causal = 1;
  memset((unsigned char *)&garbage + ATTN_PARAMS_0_1_BYTES, 0xEE, sizeof garbage - ATTN_PARAMS_0_1_BYTES);
  garbage.struct_size = ATTN_PARAMS_0_1_BYTES;
  aotk_attn_params clean = valid_params();
  clean.causal = 1;
  reset_launch_log();
  aotk_status status = aotk_attn_fwd(&garbage, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "0.1 size, garbage past it: %s (%s)", aotk_status_name(status), aotk_last_error());
  recorded_launch garbage_launch = fake.launch_log[0];
  reset_launch_log();
  CHECK(aotk_attn_fwd(&clean, FAKE_STREAM) == AOTK_OK);
  CHECK_MSG(status != AOTK_OK || same_launch(&garbage_launch, &fake.launch_log[0]),
            "0.1 size, garbage past it: the launch differs");

  /* A 0.1 caller's bad input gets the same status, and reaches no driver function. */
  aotk_attn_params bad = valid_params();
  bad.q.data = NULL;
  aotk_attn_params *old_bad = as_release_0_1(&bad);
  if (old_bad != NULL) {
    reset_calls();
    status = aotk_attn_fwd(old_bad, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_NULL_POINTER && message_mentions("q.data") && total_calls() == 0,
              "a 0.1 caller's q.data NULL: %s (%s), %d driver calls", aotk_status_name(status), aotk_last_error(),
              total_calls());
    free(old_bad);
  }

  /* A 0.1 caller's aotk_kernel_info ends before head_dim_qk: nothing past it is written. */
  aotk_kernel_info info;
  poison_info(&info);
  const size_t info_0_1_bytes = offsetof(aotk_kernel_info, head_dim_qk);
  info.struct_size = info_0_1_bytes;
  aotk_attn_params params = valid_params();
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
  CHECK(info.struct_size == info_0_1_bytes && info.launches == 1 && strncmp(info.kernel_name, "attn_fwd_", 9) == 0);
  const unsigned char *bytes = (const unsigned char *)&info;
  bool tail_untouched = true;
  for (size_t i = info_0_1_bytes; i < sizeof info; i++) tail_untouched = tail_untouched && bytes[i] == POISON;
  CHECK_MSG(tail_untouched, "aotk_query wrote past a 0.1 caller's aotk_kernel_info");
  uninstall_fake_gpu();
}

/* ---- the real driver ------------------------------------------------------------------------ */

static void test_no_driver(void) {
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle != NULL) {
    dlclose(handle);
    TEST_SKIP("libcuda.so.1 is installed: AOTK_ERROR_NO_DRIVER cannot happen here");
    return;
  }
  uninstall_fake_gpu();
  aotk_attn_params params = valid_params();
  aotk_status status = aotk_attn_fwd(&params, FAKE_STREAM);
  CHECK_MSG(status == AOTK_ERROR_NO_DRIVER, "aotk_attn_fwd: %s (%s)", aotk_status_name(status), aotk_last_error());
  CHECK_MSG(message_mentions("libcuda.so.1"), "the message \"%s\" does not name libcuda.so.1", aotk_last_error());
  CHECK(aotk_last_cuda_result() == 0);
  aotk_kernel_info info;
  poison_info(&info);
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_ERROR_NO_DRIVER);
  CHECK(info_untouched(&info));
  CHECK(aotk_preload() == AOTK_ERROR_NO_DRIVER);
  CHECK(message_mentions("libcuda.so.1"));
}

/* ---- build info and query arguments --------------------------------------------------------- */

static void test_build_info(void) {
  aotk_build_info info;
  memset(&info, 0, sizeof info);
  CHECK(aotk_get_build_info(&info) == AOTK_ERROR_STRUCT_SIZE);
  CHECK(message_mentions("struct_size"));
  CHECK(aotk_get_build_info(NULL) == AOTK_ERROR_NULL_POINTER);

  aotk_build_info full = AOTK_BUILD_INFO_INIT;
  CHECK(aotk_get_build_info(&full) == AOTK_OK);
  CHECK(full.struct_size == sizeof full);
  CHECK_MSG(full.triton_version != NULL && strcmp(full.triton_version, "3.6.0") == 0, "triton_version \"%s\"",
            full.triton_version ? full.triton_version : "(null)");
  CHECK(full.ptxas_version != NULL && full.ptxas_version[0] != '\0');
  int sm80 = 0, sm90 = 0;
  for (int i = 0; i < aotk__kernel_count; i++) {
    sm80 += aotk__kernel_table[i].arch == 80;
    sm90 += aotk__kernel_table[i].arch == 90;
  }
  CHECK_MSG(full.kernels_sm80 > 0 && full.kernels_sm80 == sm80, "kernels_sm80 %d, the table has %d", full.kernels_sm80,
            sm80);
  CHECK_MSG(full.kernels_sm90 > 0 && full.kernels_sm90 == sm90, "kernels_sm90 %d, the table has %d", full.kernels_sm90,
            sm90);
  CHECK(full.image_bytes_sm80 > 0 && full.image_bytes_sm90 > 0);
  CHECK(full.catalog_kernels == aotk__catalog_kernel_count && full.catalog_kernels >= sm80 + sm90);

  /* An older caller's smaller struct: only its prefix is written. */
  aotk_build_info partial;
  aotk_build_info *prefix = &partial;
  const unsigned char *buffer = (const unsigned char *)&partial;
  memset(&partial, 0xCD, sizeof partial);
  const size_t prefix_bytes = offsetof(aotk_build_info, kernels_sm80);
  prefix->struct_size = prefix_bytes;
  CHECK(aotk_get_build_info(prefix) == AOTK_OK);
  CHECK(prefix->struct_size == prefix_bytes);
  CHECK(prefix->triton_version == full.triton_version && prefix->ptxas_version == full.ptxas_version);
  bool tail_untouched = true;
  for (size_t i = prefix_bytes; i < sizeof partial; i++) tail_untouched = tail_untouched && buffer[i] == 0xCD;
  CHECK_MSG(tail_untouched, "aotk_get_build_info wrote past struct_size = %zu", prefix_bytes);

  /* Just the size field: nothing else written, and still a success. */
  memset(&partial, 0xCD, sizeof partial);
  prefix->struct_size = sizeof(size_t);
  CHECK(aotk_get_build_info(prefix) == AOTK_OK);
  tail_untouched = true;
  for (size_t i = sizeof(size_t); i < sizeof partial; i++) tail_untouched = tail_untouched && buffer[i] == 0xCD;
  CHECK(tail_untouched);
}

static void test_query_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_attn_params params = valid_params();
  reset_calls();
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, NULL) == AOTK_ERROR_NULL_POINTER);
  CHECK(message_mentions("info"));

  aotk_kernel_info info;
  poison_info(&info);
  info.struct_size = 0;
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_ERROR_STRUCT_SIZE);
  CHECK(message_mentions("struct_size"));

  static const int bad_ops[] = {0, 3, -1, 1000};
  for (size_t i = 0; i < sizeof bad_ops / sizeof bad_ops[0]; i++) {
    poison_info(&info);
    aotk_status status = aotk_query((aotk_op)bad_ops[i], &params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "op %d: %s", bad_ops[i], aotk_status_name(status));
    CHECK_MSG(message_mentions("op"), "op %d: message \"%s\"", bad_ops[i], aotk_last_error());
    CHECK(info_untouched(&info));
  }
  CHECK_MSG(total_calls() == 0, "bad query arguments reached the driver (%s)", called_functions());

  /* Both ops are valid: the forward's params with the forward, the backward's with the backward. The
   * forward's params alone are not enough for the backward (no dout). */
  poison_info(&info);
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK && info.launches == 1);
  aotk_attn_params bwd_params = valid_bwd_params();
  poison_info(&info);
  aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &bwd_params, &info);
  CHECK_MSG(status == AOTK_OK, "op 2: %s (%s)", aotk_status_name(status), aotk_last_error());
  /* On this sm_90 GPU the default problem (deterministic 0) takes the non-deterministic plan. */
  CHECK(info.launches == 3 && info.workspace_bytes == bwd_fused_workspace_bytes_for(&default_problem, false) &&
        (info.features & AOTK_FEATURE_NONDETERMINISTIC) != 0);
  char bwd_kernel_name[sizeof info.kernel_name];
  memcpy(bwd_kernel_name, info.kernel_name, sizeof bwd_kernel_name);
  poison_info(&info);
  CHECK(aotk_query((aotk_op)2, &params, &info) == AOTK_ERROR_NULL_POINTER && message_mentions("dout"));
  CHECK(info_untouched(&info));
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, NULL, &info) == AOTK_ERROR_NULL_POINTER && message_mentions("params"));
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, &bwd_params, NULL) == AOTK_ERROR_NULL_POINTER && message_mentions("info"));

  /* A smaller info struct (an older caller): only its prefix is written. */
  poison_info(&info);
  info.struct_size = offsetof(aotk_kernel_info, num_warps);
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
  CHECK(info.struct_size == offsetof(aotk_kernel_info, num_warps));
  CHECK(info.kernel_name[0] != (char)POISON && info.arch == 90);
  const unsigned char *bytes = (const unsigned char *)&info;
  bool tail_untouched = true;
  for (size_t i = offsetof(aotk_kernel_info, num_warps); i < sizeof info; i++) {
    tail_untouched = tail_untouched && bytes[i] == POISON;
  }
  CHECK_MSG(tail_untouched, "aotk_query wrote past struct_size");

  /* The same for the backward, cut just before workspace_bytes (a caller built before it existed). */
  const size_t prefix = offsetof(aotk_kernel_info, workspace_bytes);
  poison_info(&info);
  info.struct_size = prefix;
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, &bwd_params, &info) == AOTK_OK);
  CHECK_MSG(info.struct_size == prefix && strcmp(info.kernel_name, bwd_kernel_name) == 0 &&
                strncmp(info.kernel_name, "attn_bwd_fused_hopper_", 22) == 0 && info.grid > 0,
            "a short info struct: %s, the full one's %s", info.kernel_name, bwd_kernel_name);
  tail_untouched = true;
  for (size_t i = prefix; i < sizeof info; i++) tail_untouched = tail_untouched && bytes[i] == POISON;
  CHECK_MSG(tail_untouched, "aotk_query(AOTK_OP_ATTN_BWD) wrote past struct_size");
  uninstall_fake_gpu();
}

/* ---- selection attention -------------------------------------------------------------------- */

/* A selection problem (include/aotk.h, aotk_sel_params): packed q [total_q, heads_q, head_dim_qk], k and v
 * [total_k, heads_kv, ...], out like q with head_dim_v, lse [total_q, heads_q], block_idx int32 [total_q,
 * heads_kv, slots], block_cnt int32 [total_q, heads_kv]. */
typedef struct sel_shape {
  aotk_dtype dtype;
  int64_t num_seqs; /* 0: no cu_seqlens (q and k form one sequence) */
  int64_t total_q, total_k;
  int32_t max_seqlen_k; /* with cu_seqlens */
  int64_t heads_q, heads_kv, head_dim_qk, head_dim_v, slots;
  int32_t block_size;
  bool with_lse, with_block_cnt; /* the backward always has lse */
} sel_shape;

/* Three sequences, GQA (group 4), every optional tensor: every check is in play. */
static const sel_shape default_sel_shape = {AOTK_DTYPE_BFLOAT16, 3, 300, 400, 250, 8, 2, 128, 128, 16, 64, true, true};

/* Contiguous tensors at the fake addresses; with `bwd`, dout, dq, dk and dv too, like out, q, k and v. */
static aotk_sel_params sel_params_for(sel_shape s, bool bwd) {
  aotk_sel_params params = AOTK_SEL_PARAMS_INIT;
  params.q = aotk_tensor_3d(FAKE_Q, s.dtype, s.total_q, s.heads_q, s.head_dim_qk);
  params.k = aotk_tensor_3d(FAKE_K, s.dtype, s.total_k, s.heads_kv, s.head_dim_qk);
  params.v = aotk_tensor_3d(FAKE_V, s.dtype, s.total_k, s.heads_kv, s.head_dim_v);
  params.out = aotk_tensor_3d(FAKE_OUT, s.dtype, s.total_q, s.heads_q, s.head_dim_v);
  if (s.with_lse || bwd) params.lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, s.total_q, s.heads_q);
  if (s.num_seqs > 0) {
    params.cu_seqlens_q = aotk_tensor_1d(FAKE_CU_SEQLENS_Q, AOTK_DTYPE_INT32, s.num_seqs + 1);
    params.cu_seqlens_k = aotk_tensor_1d(FAKE_CU_SEQLENS_K, AOTK_DTYPE_INT32, s.num_seqs + 1);
    params.max_seqlen_k = s.max_seqlen_k;
  }
  params.block_idx = aotk_tensor_3d(FAKE_BLOCK_IDX, AOTK_DTYPE_INT32, s.total_q, s.heads_kv, s.slots);
  if (s.with_block_cnt) params.block_cnt = aotk_tensor_2d(FAKE_BLOCK_CNT, AOTK_DTYPE_INT32, s.total_q, s.heads_kv);
  params.block_size = s.block_size;
  if (bwd) {
    params.dout = aotk_tensor_3d(FAKE_DOUT, s.dtype, s.total_q, s.heads_q, s.head_dim_v);
    params.dq = aotk_tensor_3d(FAKE_DQ, s.dtype, s.total_q, s.heads_q, s.head_dim_qk);
    params.dk = aotk_tensor_3d(FAKE_DK, s.dtype, s.total_k, s.heads_kv, s.head_dim_qk);
    params.dv = aotk_tensor_3d(FAKE_DV, s.dtype, s.total_k, s.heads_kv, s.head_dim_v);
  }
  return params;
}

static aotk_sel_params valid_sel_params(void) { return sel_params_for(default_sel_shape, false); }
static aotk_sel_params valid_sel_bwd_params(void) { return sel_params_for(default_sel_shape, true); }

/* What the kernels are told, worked out from the header's definitions. */
static int64_t sel_num_seqs(const sel_shape *s) { return s->num_seqs > 0 ? s->num_seqs : 1; }
static int64_t sel_max_seqlen_k(const sel_shape *s) { return s->num_seqs > 0 ? s->max_seqlen_k : s->total_k; }
static int64_t sel_group_size(const sel_shape *s) { return s->heads_q / s->heads_kv; }
static double sel_scale(const aotk_sel_params *params, const sel_shape *s) {
  return params->softmax_scale != 0.0f ? params->softmax_scale : 1.0 / sqrt((double)s->head_dim_qk);
}

/* The tile the forward and the dQ pass run a group in (the catalog's tuning by group size, in words):
 * 16 query-head rows up to a group of 16, 64 from 17 on (several programs per token past 64). */
static int64_t sel_expected_block_m(const sel_shape *s) { return sel_group_size(s) <= 16 ? 16 : 64; }

/* The dK/dV pass's split of long token lists (src/aotk_sel.c, "the workspace"; kernels/sel_attn.py,
 * sel_bwd_dkdv): chunks of chunk_tokens tokens, the larger of 4096 (token, query head) pairs and 1/512 of
 * all the kv heads' index entries, at most 2^29 - 1 (the kernels divide a list's length by it, rounding
 * up, in 32 bits); at most max_chunks of them per list, ceil(total_q / chunk_tokens) clamped to [1, 16]
 * and kept so that the dK/dV grid (kv heads x sequences x key tiles of at least 32 keys x chunks) is a
 * valid grid size. A list of L tokens split in c > 1 chunks has L > chunk_tokens and c < 2 L /
 * chunk_tokens, hence the partial records per kv head below; none when no list can be split. */
static int64_t sel_chunk_tokens(const sel_shape *s) {
  const int64_t by_pairs = ceil_div(4096, sel_group_size(s));
  const int64_t by_share = ceil_div(s->heads_kv * s->total_q * s->slots, 512);
  const int64_t tokens = by_pairs > by_share ? by_pairs : by_share;
  return tokens < INT32_MAX / 4 ? tokens : INT32_MAX / 4;
}
static int64_t sel_max_chunks(const sel_shape *s) {
  const int64_t programs_per_chunk = s->heads_kv * sel_num_seqs(s) * ceil_div(sel_max_seqlen_k(s), 32);
  int64_t chunks = ceil_div(s->total_q, sel_chunk_tokens(s));
  if (chunks > 16) chunks = 16;
  if (chunks > INT32_MAX / programs_per_chunk) chunks = INT32_MAX / programs_per_chunk;
  return chunks > 1 ? chunks : 1;
}
static int64_t sel_partials_per_head(const sel_shape *s) {
  return sel_max_chunks(s) > 1 ? 2 * s->total_q * s->slots / sel_chunk_tokens(s) + 1 : 0;
}

/* The backward's workspace (include/aotk.h, aotk_sel_bwd; src/aotk_sel.c lays it out), each part starting
 * 16-byte aligned: delta fp32 [total_q, heads_q]; the inverse index's list offsets, the scatter's
 * cursors and each list's first partial record, each int32 [heads_kv, round_up(index slots + 1, 4)], one
 * index slot per (sequence, key block); the token lists int32 [heads_kv, total_q * slots]; the split
 * lists' partial dK/dV fp32 [heads_kv, partials_per_head, block_size, head_dim_qk + head_dim_v]. */
static size_t round_up_16(size_t bytes) { return (bytes + 15) / 16 * 16; }
static int64_t sel_index_slots(const sel_shape *s) {
  return sel_num_seqs(s) * ceil_div(sel_max_seqlen_k(s), s->block_size);
}
static int64_t sel_offsets_stride(const sel_shape *s) { return (sel_index_slots(s) + 1 + 3) / 4 * 4; }
static size_t sel_delta_bytes(const sel_shape *s) { return round_up_16((size_t)(4 * s->total_q * s->heads_q)); }
static size_t sel_offsets_bytes(const sel_shape *s) {
  return round_up_16((size_t)(4 * s->heads_kv * sel_offsets_stride(s)));
}
static size_t sel_tokens_bytes(const sel_shape *s) {
  return round_up_16((size_t)(4 * s->heads_kv * s->total_q * s->slots));
}
static size_t sel_partials_bytes(const sel_shape *s) {
  return round_up_16((size_t)(4 * s->heads_kv * sel_partials_per_head(s) * s->block_size *
                              (s->head_dim_qk + s->head_dim_v)));
}
static size_t sel_workspace_bytes(const sel_shape *s) {
  return sel_delta_bytes(s) + 3 * sel_offsets_bytes(s) + 2 * sel_tokens_bytes(s) + sel_partials_bytes(s);
}

/* The index passes and the check have no variant axes. */
static bool sel_family_is_helper(int family) {
  return family != AOTK__FAMILY_SEL_FWD && family != AOTK__FAMILY_SEL_BWD_DQ && family != AOTK__FAMILY_SEL_BWD_DKDV;
}

/* Whether `family` has the variant that assumes a group size that is a multiple of 16, and the problem
 * runs it (codegen/aotk_catalog.py: sel_fwd and sel_bwd_dkdv; the kernel row's `aligned`). */
static int sel_expected_g16(int family, const sel_shape *s) {
  return (family == AOTK__FAMILY_SEL_FWD || family == AOTK__FAMILY_SEL_BWD_DKDV) && sel_group_size(s) % 16 == 0;
}

/* The row the selection launcher must pick: the family's variant for (arch, dtype, head dims, block size,
 * group size a multiple of 16 or not; the index helpers have none), the largest tuning bound the group
 * size reaches. */
static const aotk__kernel_entry *expected_sel_row(int family, int arch, const sel_shape *s) {
  const aotk__kernel_entry *best = NULL;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (e->family != family || e->arch != arch || e->min_seqlen > sel_group_size(s)) continue;
    if (e->aligned != sel_expected_g16(family, s)) continue;
    if (!sel_family_is_helper(family) &&
        (e->dtype != (int)s->dtype || e->head_dim_qk != s->head_dim_qk || e->head_dim_v != s->head_dim_v ||
         e->block_size != s->block_size)) {
      continue;
    }
    if (best == NULL || e->min_seqlen > best->min_seqlen) best = e;
  }
  return best;
}

static const char *sel_op_function(aotk_op op) { return op == AOTK_OP_SEL_FWD ? "aotk_sel_fwd" : "aotk_sel_bwd"; }

/* The call `op` names; the backward with the ample workspace. */
static aotk_status run_sel_op(aotk_op op, const aotk_sel_params *params) {
  if (op == AOTK_OP_SEL_FWD) return aotk_sel_fwd(params, FAKE_STREAM);
  return aotk_sel_bwd(params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM);
}

/* The backward's kernels, in launch order: the inverse index's five passes (zero the counts, count,
 * prefix sum, scatter, order each list), then dQ, then dK/dV; then, when lists may be split (max_chunks >
 * 1), dK/dV again to add the split lists' partials: seven launches, or eight. */
enum { SEL_BWD_KERNELS = 7 };
static const int sel_bwd_families[SEL_BWD_KERNELS] = {
    AOTK__FAMILY_SEL_INDEX_ZERO,    AOTK__FAMILY_SEL_INDEX_COUNT, AOTK__FAMILY_SEL_INDEX_SCAN,
    AOTK__FAMILY_SEL_INDEX_SCATTER, AOTK__FAMILY_SEL_INDEX_ORDER, AOTK__FAMILY_SEL_BWD_DQ,
    AOTK__FAMILY_SEL_BWD_DKDV};
static const int sel_bwd_kernels[SEL_BWD_KERNELS] = {KERNEL_SEL_INDEX_ZERO,    KERNEL_SEL_INDEX_COUNT,
                                                     KERNEL_SEL_INDEX_SCAN,    KERNEL_SEL_INDEX_SCATTER,
                                                     KERNEL_SEL_INDEX_ORDER,   KERNEL_SEL_BWD_DQ,
                                                     KERNEL_SEL_BWD_DKDV};
static const int sel_bwd_scratch[SEL_BWD_KERNELS] = {SEL_ZERO_GLOBAL_SCRATCH,    SEL_COUNT_GLOBAL_SCRATCH,
                                                     SEL_SCAN_GLOBAL_SCRATCH,    SEL_SCATTER_GLOBAL_SCRATCH,
                                                     SEL_ORDER_GLOBAL_SCRATCH,   SEL_DQ_GLOBAL_SCRATCH,
                                                     SEL_DKDV_GLOBAL_SCRATCH};
enum { SEL_LAUNCH_ZERO, SEL_LAUNCH_COUNT, SEL_LAUNCH_SCAN, SEL_LAUNCH_SCATTER, SEL_LAUNCH_ORDER, SEL_LAUNCH_DQ,
       SEL_LAUNCH_DKDV, SEL_LAUNCH_DKDV_REDUCE };
_Static_assert((int)SEL_LAUNCH_DKDV_REDUCE < (int)LAUNCH_LOG_SIZE, "the fake logs every launch of the backward");
static int sel_bwd_launches(const sel_shape *s) { return SEL_BWD_KERNELS + (sel_max_chunks(s) > 1); }

/* ---- selection: validation ---- */

typedef struct sel_bad_input {
  const char *what;
  void (*spoil)(aotk_sel_params *params); /* NULL: pass params = NULL */
  aotk_status expected;
  const char *mentions; /* in aotk_last_error() */
} sel_bad_input;

/* Rebuilds *p from shape `s`, keeping it a backward's params if it was one. */
static void sel_rebuild(aotk_sel_params *p, sel_shape s) { *p = sel_params_for(s, p->dout.data != NULL); }

static void sel_struct_size_zero(aotk_sel_params *p) { p->struct_size = 0; }
static void sel_struct_size_short(aotk_sel_params *p) { p->struct_size = sizeof(aotk_sel_params) - 1; }
static void sel_struct_size_of_a_pointer(aotk_sel_params *p) { p->struct_size = sizeof(void *); }
static void sel_struct_size_garbage(aotk_sel_params *p) { p->struct_size = (size_t)1 << 40; }
static void sel_q_null(aotk_sel_params *p) { p->q.data = NULL; }
static void sel_block_idx_at_the_top(aotk_sel_params *p) { p->block_idx.data = (void *)(UINTPTR_MAX - 3); }
static void sel_k_null(aotk_sel_params *p) { p->k.data = NULL; }
static void sel_v_null(aotk_sel_params *p) { p->v.data = NULL; }
static void sel_out_null(aotk_sel_params *p) { p->out.data = NULL; }
static void sel_block_idx_null(aotk_sel_params *p) { p->block_idx.data = NULL; }
/* dtypes */
static void sel_q_float32(aotk_sel_params *p) { p->q.dtype = AOTK_DTYPE_FLOAT32; }
static void sel_q_int32(aotk_sel_params *p) { p->q.dtype = AOTK_DTYPE_INT32; }
static void sel_q_dtype_garbage(aotk_sel_params *p) { p->q.dtype = (aotk_dtype)1234; }
static void sel_k_float16(aotk_sel_params *p) { p->k.dtype = AOTK_DTYPE_FLOAT16; }
static void sel_k_dtype_zero(aotk_sel_params *p) { p->k.dtype = (aotk_dtype)0; }
static void sel_v_float32(aotk_sel_params *p) { p->v.dtype = AOTK_DTYPE_FLOAT32; }
static void sel_out_float16(aotk_sel_params *p) { p->out.dtype = AOTK_DTYPE_FLOAT16; }
static void sel_lse_bfloat16(aotk_sel_params *p) { p->lse.dtype = AOTK_DTYPE_BFLOAT16; }
static void sel_lse_int32(aotk_sel_params *p) { p->lse.dtype = AOTK_DTYPE_INT32; }
static void sel_block_idx_int64(aotk_sel_params *p) { p->block_idx.dtype = AOTK_DTYPE_INT64; }
static void sel_block_idx_float32(aotk_sel_params *p) { p->block_idx.dtype = AOTK_DTYPE_FLOAT32; }
static void sel_block_cnt_int64(aotk_sel_params *p) { p->block_cnt.dtype = AOTK_DTYPE_INT64; }
static void sel_block_cnt_uint8(aotk_sel_params *p) { p->block_cnt.dtype = AOTK_DTYPE_UINT8; }
static void sel_cu_seqlens_q_int64(aotk_sel_params *p) { p->cu_seqlens_q.dtype = AOTK_DTYPE_INT64; }
static void sel_cu_seqlens_k_float32(aotk_sel_params *p) { p->cu_seqlens_k.dtype = AOTK_DTYPE_FLOAT32; }
/* ranks */
static void sel_q_rank_4(aotk_sel_params *p) { p->q.rank = 4; }
static void sel_k_rank_2(aotk_sel_params *p) { p->k.rank = 2; }
static void sel_v_rank_4(aotk_sel_params *p) { p->v.rank = 4; }
static void sel_out_rank_2(aotk_sel_params *p) { p->out.rank = 2; }
static void sel_lse_rank_3(aotk_sel_params *p) { p->lse.rank = 3; }
static void sel_lse_rank_1(aotk_sel_params *p) { p->lse.rank = 1; }
static void sel_block_idx_rank_2(aotk_sel_params *p) { p->block_idx.rank = 2; }
static void sel_block_idx_rank_4(aotk_sel_params *p) { p->block_idx.rank = 4; }
static void sel_block_cnt_rank_3(aotk_sel_params *p) { p->block_cnt.rank = 3; }
static void sel_cu_seqlens_k_rank_2(aotk_sel_params *p) { p->cu_seqlens_k.rank = 2; }
/* shapes */
static void sel_k_head_dim(aotk_sel_params *p) { p->k.shape[2] = 64; }
static void sel_v_total_k(aotk_sel_params *p) { p->v.shape[0] -= 1; }
static void sel_v_heads(aotk_sel_params *p) { p->v.shape[1] = 4; }
static void sel_out_total_q(aotk_sel_params *p) { p->out.shape[0] += 1; }
static void sel_out_heads_kv(aotk_sel_params *p) { p->out.shape[1] = p->k.shape[1]; }
static void sel_out_head_dim(aotk_sel_params *p) { p->out.shape[2] = 64; }
static void sel_lse_total_q(aotk_sel_params *p) { p->lse.shape[0] -= 1; }
static void sel_lse_heads_kv(aotk_sel_params *p) { p->lse.shape[1] = p->k.shape[1]; }
static void sel_lse_transposed(aotk_sel_params *p) { /* [heads_q, total_q]: dense attention's varlen layout */
  p->lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, p->q.shape[1], p->q.shape[0]);
}
static void sel_block_idx_total_q(aotk_sel_params *p) { p->block_idx.shape[0] += 1; }
static void sel_block_idx_heads_q(aotk_sel_params *p) { /* one selection per query head, not per kv head */
  p->block_idx = aotk_tensor_3d(FAKE_BLOCK_IDX, AOTK_DTYPE_INT32, p->q.shape[0], p->q.shape[1], 16);
}
static void sel_block_idx_total_k(aotk_sel_params *p) {
  p->block_idx = aotk_tensor_3d(FAKE_BLOCK_IDX, AOTK_DTYPE_INT32, p->k.shape[0], p->k.shape[1], 16);
}
static void sel_block_cnt_total_q(aotk_sel_params *p) { p->block_cnt.shape[0] -= 1; }
static void sel_block_cnt_heads_q(aotk_sel_params *p) {
  p->block_cnt = aotk_tensor_2d(FAKE_BLOCK_CNT, AOTK_DTYPE_INT32, p->q.shape[0], p->q.shape[1]);
}
/* sizes */
static void sel_q_total_zero(aotk_sel_params *p) { p->q.shape[0] = 0; }
static void sel_k_heads_zero(aotk_sel_params *p) { p->k.shape[1] = 0; }
static void sel_v_head_dim_negative(aotk_sel_params *p) { p->v.shape[2] = -128; }
static void sel_block_idx_slots_zero(aotk_sel_params *p) { p->block_idx.shape[2] = 0; }
/* strides */
static void sel_q_last_stride_2(aotk_sel_params *p) { p->q.strides[2] = 2; }
static void sel_v_last_stride_0(aotk_sel_params *p) { p->v.strides[2] = 0; }
static void sel_lse_last_stride_2(aotk_sel_params *p) { p->lse.strides[1] = 2; }
static void sel_block_idx_last_stride_2(aotk_sel_params *p) { p->block_idx.strides[2] = 2; }
static void sel_block_cnt_last_stride_0(aotk_sel_params *p) { p->block_cnt.strides[1] = 0; }
static void sel_k_stride_negative(aotk_sel_params *p) { p->k.strides[0] = -256; }
static void sel_block_idx_stride_negative(aotk_sel_params *p) { p->block_idx.strides[1] = -16; }
static void sel_out_heads_stride_zero(aotk_sel_params *p) { p->out.strides[1] = 0; }
static void sel_out_token_stride_zero(aotk_sel_params *p) { p->out.strides[0] = 0; }
static void sel_lse_token_stride_zero(aotk_sel_params *p) { p->lse.strides[0] = 0; }
/* alignment: the kernels assume 16-byte-aligned pointers and strides that are multiples of 16 elements */
static void sel_q_odd_address(aotk_sel_params *p) { p->q.data = byte_offset(FAKE_Q, 1); }
static void sel_q_two_bytes_off(aotk_sel_params *p) { p->q.data = byte_offset(FAKE_Q, 2); }
static void sel_k_eight_bytes_off(aotk_sel_params *p) { p->k.data = byte_offset(FAKE_K, 8); }
static void sel_v_token_stride_8(aotk_sel_params *p) { p->v.strides[0] += 8; }
static void sel_out_heads_stride_136(aotk_sel_params *p) { p->out.strides[1] = 136, p->out.strides[0] = 8 * 136; }
static void sel_q_token_stride_8_past(aotk_sel_params *p) { p->q.strides[1] = 144, p->q.strides[0] = 8 * 144 + 8; }
static void sel_lse_odd_address(aotk_sel_params *p) { p->lse.data = byte_offset(FAKE_LSE, 2); }
static void sel_block_idx_misaligned(aotk_sel_params *p) { p->block_idx.data = byte_offset(FAKE_BLOCK_IDX, 2); }
static void sel_block_cnt_misaligned(aotk_sel_params *p) { p->block_cnt.data = byte_offset(FAKE_BLOCK_CNT, 1); }
static void sel_cu_seqlens_q_misaligned(aotk_sel_params *p) {
  p->cu_seqlens_q.data = byte_offset(FAKE_CU_SEQLENS_Q, 2);
}
/* head dims: only (64, 64), (128, 128) and (192, 128) are compiled; none is padded */
static void sel_set_head_dims(aotk_sel_params *p, int64_t head_dim_qk, int64_t head_dim_v) {
  sel_shape s = default_sel_shape;
  s.head_dim_qk = head_dim_qk, s.head_dim_v = head_dim_v;
  sel_rebuild(p, s);
}
static void sel_head_dims_96(aotk_sel_params *p) { sel_set_head_dims(p, 96, 96); }
static void sel_head_dims_192(aotk_sel_params *p) { sel_set_head_dims(p, 192, 192); }
static void sel_head_dims_256_128(aotk_sel_params *p) { sel_set_head_dims(p, 256, 128); }
static void sel_head_dims_256(aotk_sel_params *p) { sel_set_head_dims(p, 256, 256); }
static void sel_head_dims_32(aotk_sel_params *p) { sel_set_head_dims(p, 32, 32); }
static void sel_head_dims_64_128(aotk_sel_params *p) { sel_set_head_dims(p, 64, 128); }
static void sel_head_dims_128_64(aotk_sel_params *p) { sel_set_head_dims(p, 128, 64); }
static void sel_head_dims_192_64(aotk_sel_params *p) { sel_set_head_dims(p, 192, 64); }
/* heads */
static void sel_set_heads_kv(aotk_sel_params *p, int64_t heads_kv) {
  sel_shape s = default_sel_shape;
  s.heads_kv = heads_kv;
  sel_rebuild(p, s);
}
static void sel_heads_kv_3(aotk_sel_params *p) { sel_set_heads_kv(p, 3); }
static void sel_heads_kv_above_heads_q(aotk_sel_params *p) { sel_set_heads_kv(p, 16); }
/* scalars */
static void sel_block_size_16(aotk_sel_params *p) { p->block_size = 16; }
static void sel_block_size_0(aotk_sel_params *p) { p->block_size = 0; }
static void sel_block_size_negative(aotk_sel_params *p) { p->block_size = -64; }
static void sel_block_size_48(aotk_sel_params *p) { p->block_size = 48; }
static void sel_block_size_256(aotk_sel_params *p) { p->block_size = 256; }
static void sel_scale_negative(aotk_sel_params *p) { p->softmax_scale = -0.125f; }
static void sel_scale_nan(aotk_sel_params *p) { p->softmax_scale = NAN; }
static void sel_scale_infinite(aotk_sel_params *p) { p->softmax_scale = INFINITY; }
static void sel_scale_negative_infinite(aotk_sel_params *p) { p->softmax_scale = -INFINITY; }
/* cu_seqlens */
static void sel_only_cu_seqlens_q(aotk_sel_params *p) { p->cu_seqlens_k.data = NULL; }
static void sel_only_cu_seqlens_k(aotk_sel_params *p) { p->cu_seqlens_q.data = NULL; }
static void sel_only_cu_seqlens_q_no_max(aotk_sel_params *p) { p->cu_seqlens_k.data = NULL, p->max_seqlen_k = 0; }
static void sel_cu_seqlens_k_longer(aotk_sel_params *p) { p->cu_seqlens_k.shape[0] += 1; }
static void sel_cu_seqlens_q_shorter(aotk_sel_params *p) { p->cu_seqlens_q.shape[0] -= 1; }
static void sel_cu_seqlens_q_one_offset(aotk_sel_params *p) { p->cu_seqlens_q.shape[0] = p->cu_seqlens_k.shape[0] = 1; }
static void sel_cu_seqlens_k_stride_2(aotk_sel_params *p) { p->cu_seqlens_k.strides[0] = 2; }
static void sel_max_seqlen_k_zero(aotk_sel_params *p) { p->max_seqlen_k = 0; }
static void sel_max_seqlen_k_negative(aotk_sel_params *p) { p->max_seqlen_k = -1; }
static void sel_max_seqlen_k_min(aotk_sel_params *p) { p->max_seqlen_k = INT32_MIN; }
/* sizes the kernels' 32-bit arithmetic cannot hold */
static void sel_slots_overflow(aotk_sel_params *p) { /* total_q * slots * group size > 2^31 */
  p->block_idx = aotk_tensor_3d(FAKE_BLOCK_IDX, AOTK_DTYPE_INT32, p->q.shape[0], p->k.shape[1], (int64_t)1 << 22);
}
static void sel_q_heads_span_overflow(aotk_sel_params *p) { /* one token's heads span > 2^31 elements */
  p->q.strides[1] = (int64_t)1 << 29, p->q.strides[0] = (int64_t)1 << 32;
}
static void sel_block_idx_heads_span_overflow(aotk_sel_params *p) { p->block_idx.strides[1] = (int64_t)1 << 31; }
static void sel_total_q_beyond_int32(aotk_sel_params *p) {
  sel_shape s = default_sel_shape;
  s.total_q = INT32_MAX;
  sel_rebuild(p, s);
}
static void sel_index_beyond_int32(aotk_sel_params *p) { /* 2^20 sequences of up to 2^31 - 1 keys */
  p->cu_seqlens_q.shape[0] = p->cu_seqlens_k.shape[0] = ((int64_t)1 << 20) + 1;
  p->max_seqlen_k = INT32_MAX;
}
/* Just past the two bounds the dK/dV split lowered to 2^30 - 1 (from 2^31 - 1), every other size within
 * its own: 9 sequences of up to 2^31 - 1 keys on 2 kv heads make 9 * 2 * 2^26 key tiles of 32 keys (their
 * index, 9 * 2^25 slots of 64 keys per kv head, fits); 21 sequences of up to 32 * 51130563 keys on one kv
 * head, blocks of 32, make 21 * 51130563 = 2^30 - 1 key tiles (at the bound) and as many index slots, to
 * which the bound adds 8. */
static void sel_key_tiles_beyond_2_30(aotk_sel_params *p) {
  p->cu_seqlens_q.shape[0] = p->cu_seqlens_k.shape[0] = 9 + 1;
  p->max_seqlen_k = INT32_MAX;
}
static void sel_index_slots_beyond_2_30(aotk_sel_params *p) {
  sel_set_heads_kv(p, 1);
  p->block_size = 32;
  p->cu_seqlens_q.shape[0] = p->cu_seqlens_k.shape[0] = 21 + 1;
  p->max_seqlen_k = 32 * 51130563;
}

static const sel_bad_input sel_bad_inputs[] = {
    {"params NULL", NULL, AOTK_ERROR_NULL_POINTER, "params"},
    {"struct_size 0", sel_struct_size_zero, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size one byte short", sel_struct_size_short, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size of a pointer", sel_struct_size_of_a_pointer, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size garbage", sel_struct_size_garbage, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"q.data NULL", sel_q_null, AOTK_ERROR_NULL_POINTER, "q.data"},
    {"k.data NULL", sel_k_null, AOTK_ERROR_NULL_POINTER, "k.data"},
    {"v.data NULL", sel_v_null, AOTK_ERROR_NULL_POINTER, "v.data"},
    {"out.data NULL", sel_out_null, AOTK_ERROR_NULL_POINTER, "out.data"},
    {"block_idx.data NULL", sel_block_idx_null, AOTK_ERROR_NULL_POINTER, "block_idx.data"},
    {"block_idx past the end of the address space", sel_block_idx_at_the_top, AOTK_ERROR_SIZE_OVERFLOW,
     "end of the address space"},
    {"q float32", sel_q_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"q int32", sel_q_int32, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"q dtype garbage", sel_q_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"k float16, q bfloat16", sel_k_float16, AOTK_ERROR_DTYPE_MISMATCH, "k.dtype"},
    {"k dtype 0", sel_k_dtype_zero, AOTK_ERROR_UNSUPPORTED_DTYPE, "k.dtype"},
    {"v float32", sel_v_float32, AOTK_ERROR_DTYPE_MISMATCH, "v.dtype"},
    {"out float16, q bfloat16", sel_out_float16, AOTK_ERROR_DTYPE_MISMATCH, "out.dtype"},
    {"lse bfloat16", sel_lse_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"lse int32", sel_lse_int32, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"block_idx int64", sel_block_idx_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "block_idx.dtype"},
    {"block_idx float32", sel_block_idx_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "block_idx.dtype"},
    {"block_cnt int64", sel_block_cnt_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "block_cnt.dtype"},
    {"block_cnt uint8", sel_block_cnt_uint8, AOTK_ERROR_UNSUPPORTED_DTYPE, "block_cnt.dtype"},
    {"cu_seqlens_q int64", sel_cu_seqlens_q_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_q"},
    {"cu_seqlens_k float32", sel_cu_seqlens_k_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_k"},
    {"q rank 4", sel_q_rank_4, AOTK_ERROR_RANK, "q.rank"},
    {"k rank 2", sel_k_rank_2, AOTK_ERROR_RANK, "k.rank"},
    {"v rank 4", sel_v_rank_4, AOTK_ERROR_RANK, "v.rank"},
    {"out rank 2", sel_out_rank_2, AOTK_ERROR_RANK, "out.rank"},
    {"lse rank 3", sel_lse_rank_3, AOTK_ERROR_RANK, "lse.rank"},
    {"lse rank 1", sel_lse_rank_1, AOTK_ERROR_RANK, "lse.rank"},
    {"block_idx rank 2", sel_block_idx_rank_2, AOTK_ERROR_RANK, "block_idx.rank"},
    {"block_idx rank 4", sel_block_idx_rank_4, AOTK_ERROR_RANK, "block_idx.rank"},
    {"block_cnt rank 3", sel_block_cnt_rank_3, AOTK_ERROR_RANK, "block_cnt.rank"},
    {"cu_seqlens_k rank 2", sel_cu_seqlens_k_rank_2, AOTK_ERROR_RANK, "cu_seqlens_k.rank"},
    {"k head_dim != q head_dim", sel_k_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "k.shape[2]"},
    {"v total_k != k total_k", sel_v_total_k, AOTK_ERROR_SHAPE_MISMATCH, "v.shape[0]"},
    {"v heads != k heads", sel_v_heads, AOTK_ERROR_SHAPE_MISMATCH, "v.shape[1]"},
    {"out total_q != q total_q", sel_out_total_q, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[0]"},
    {"out heads_kv heads", sel_out_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[1]"},
    {"out head_dim != v head_dim", sel_out_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[2]"},
    {"lse total_q short", sel_lse_total_q, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"lse heads_kv heads", sel_lse_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"lse [heads_q, total_q]", sel_lse_transposed, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"block_idx total_q long", sel_block_idx_total_q, AOTK_ERROR_SHAPE_MISMATCH, "block_idx.shape[0]"},
    {"block_idx per query head", sel_block_idx_heads_q, AOTK_ERROR_SHAPE_MISMATCH, "block_idx.shape[1]"},
    {"block_idx over the keys", sel_block_idx_total_k, AOTK_ERROR_SHAPE_MISMATCH, "block_idx.shape[0]"},
    {"block_cnt total_q short", sel_block_cnt_total_q, AOTK_ERROR_SHAPE_MISMATCH, "block_cnt.shape[0]"},
    {"block_cnt per query head", sel_block_cnt_heads_q, AOTK_ERROR_SHAPE_MISMATCH, "block_cnt.shape[1]"},
    {"q total_q 0", sel_q_total_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "q.shape[0]"},
    {"k heads 0", sel_k_heads_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "k.shape[1]"},
    {"v head_dim negative", sel_v_head_dim_negative, AOTK_ERROR_NONPOSITIVE_SIZE, "v.shape[2]"},
    {"block_idx 0 slots", sel_block_idx_slots_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "block_idx.shape[2]"},
    {"q last stride 2", sel_q_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "q.strides[2]"},
    {"v last stride 0", sel_v_last_stride_0, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "v.strides[2]"},
    {"lse last stride 2", sel_lse_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "lse.strides[1]"},
    {"block_idx last stride 2", sel_block_idx_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "block_idx.strides[2]"},
    {"block_cnt last stride 0", sel_block_cnt_last_stride_0, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "block_cnt.strides[1]"},
    {"k stride negative", sel_k_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "k.strides[0]"},
    {"block_idx stride negative", sel_block_idx_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "block_idx.strides[1]"},
    {"out heads stride 0", sel_out_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[1]"},
    {"out token stride 0", sel_out_token_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[0]"},
    {"lse token stride 0", sel_lse_token_stride_zero, AOTK_ERROR_INVALID_VALUE, "lse.strides[0]"},
    {"q odd address", sel_q_odd_address, AOTK_ERROR_MISALIGNED_POINTER, "q.data"},
    {"q 2 bytes past 16-byte alignment", sel_q_two_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "q: data"},
    {"k 8 bytes past 16-byte alignment", sel_k_eight_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "k: data"},
    {"v token stride not a multiple of 16", sel_v_token_stride_8, AOTK_ERROR_MISALIGNED_POINTER, "v: data"},
    {"out heads stride 136", sel_out_heads_stride_136, AOTK_ERROR_MISALIGNED_POINTER, "out: data"},
    {"q token stride 8 * 144 + 8", sel_q_token_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER, "q: data"},
    {"lse odd address", sel_lse_odd_address, AOTK_ERROR_MISALIGNED_POINTER, "lse.data"},
    {"block_idx 2-byte aligned", sel_block_idx_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "block_idx.data"},
    {"block_cnt odd address", sel_block_cnt_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "block_cnt.data"},
    {"cu_seqlens_q 2-byte aligned", sel_cu_seqlens_q_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "cu_seqlens_q.data"},
    {"head dims (96, 96)", sel_head_dims_96, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 96"},
    {"head dims (192, 192)", sel_head_dims_192, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v = 192"},
    {"head dims (256, 128)", sel_head_dims_256_128, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 256"},
    {"head dims (256, 256)", sel_head_dims_256, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 256"},
    {"head dims (32, 32)", sel_head_dims_32, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 32"},
    {"head dims (64, 128)", sel_head_dims_64_128, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v = 128"},
    {"head dims (128, 64)", sel_head_dims_128_64, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v = 64"},
    {"head dims (192, 64)", sel_head_dims_192_64, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 192"},
    {"heads_kv 3, heads_q 8", sel_heads_kv_3, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_kv = 3"},
    {"heads_kv 16, heads_q 8", sel_heads_kv_above_heads_q, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_kv = 16"},
    {"block_size 16", sel_block_size_16, AOTK_ERROR_INVALID_VALUE, "block_size"},
    {"block_size 0", sel_block_size_0, AOTK_ERROR_INVALID_VALUE, "block_size"},
    {"block_size -64", sel_block_size_negative, AOTK_ERROR_INVALID_VALUE, "block_size"},
    {"block_size 48", sel_block_size_48, AOTK_ERROR_INVALID_VALUE, "block_size"},
    {"block_size 256", sel_block_size_256, AOTK_ERROR_INVALID_VALUE, "block_size"},
    {"softmax_scale negative", sel_scale_negative, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale NaN", sel_scale_nan, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale infinite", sel_scale_infinite, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale -infinite", sel_scale_negative_infinite, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"cu_seqlens_q without cu_seqlens_k", sel_only_cu_seqlens_q, AOTK_ERROR_NULL_POINTER, "cu_seqlens_k.data"},
    {"cu_seqlens_k without cu_seqlens_q", sel_only_cu_seqlens_k, AOTK_ERROR_NULL_POINTER, "cu_seqlens_q.data"},
    {"cu_seqlens_q alone, max_seqlen_k 0", sel_only_cu_seqlens_q_no_max, AOTK_ERROR_NULL_POINTER,
     "cu_seqlens_k.data"},
    {"cu_seqlens_k longer", sel_cu_seqlens_k_longer, AOTK_ERROR_SHAPE_MISMATCH, "cu_seqlens_k.shape[0]"},
    {"cu_seqlens_q shorter", sel_cu_seqlens_q_shorter, AOTK_ERROR_SHAPE_MISMATCH, "cu_seqlens_q.shape[0]"},
    {"cu_seqlens of one offset", sel_cu_seqlens_q_one_offset, AOTK_ERROR_NONPOSITIVE_SIZE, "cu_seqlens_q.shape[0]"},
    {"cu_seqlens_k stride 2", sel_cu_seqlens_k_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "cu_seqlens_k.strides[0]"},
    {"max_seqlen_k 0 with cu_seqlens", sel_max_seqlen_k_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_k"},
    {"max_seqlen_k -1 with cu_seqlens", sel_max_seqlen_k_negative, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_k"},
    {"max_seqlen_k INT32_MIN with cu_seqlens", sel_max_seqlen_k_min, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_k"},
    {"total_q * slots * group size beyond int32", sel_slots_overflow, AOTK_ERROR_SIZE_OVERFLOW, "slots = 4194304"},
    {"q: one token's heads beyond int32", sel_q_heads_span_overflow, AOTK_ERROR_SIZE_OVERFLOW, "q: one token"},
    {"block_idx: one token's heads beyond int32", sel_block_idx_heads_span_overflow, AOTK_ERROR_SIZE_OVERFLOW,
     "block_idx: one token"},
    {"total_q beyond int32", sel_total_q_beyond_int32, AOTK_ERROR_SIZE_OVERFLOW, "total_q = 2147483647"},
    {"index slots beyond int32", sel_index_beyond_int32, AOTK_ERROR_SIZE_OVERFLOW, "1048576 sequences"},
    {"dK/dV key tiles beyond 2^30", sel_key_tiles_beyond_2_30, AOTK_ERROR_SIZE_OVERFLOW, "9 sequences"},
    {"index slots and kv heads beyond 2^30", sel_index_slots_beyond_2_30, AOTK_ERROR_SIZE_OVERFLOW, "21 sequences"},
};

/* The backward's own arguments. */
static void sel_lse_null(aotk_sel_params *p) { p->lse.data = NULL; }
static void sel_dout_null(aotk_sel_params *p) { p->dout.data = NULL; }
static void sel_dq_null(aotk_sel_params *p) { p->dq.data = NULL; }
static void sel_dk_null(aotk_sel_params *p) { p->dk.data = NULL; }
static void sel_dv_null(aotk_sel_params *p) { p->dv.data = NULL; }
static void sel_dq_float16(aotk_sel_params *p) { p->dq.dtype = AOTK_DTYPE_FLOAT16; }
static void sel_dout_float32(aotk_sel_params *p) { p->dout.dtype = AOTK_DTYPE_FLOAT32; }
static void sel_dk_dtype_garbage(aotk_sel_params *p) { p->dk.dtype = (aotk_dtype)77; }
static void sel_dk_rank_4(aotk_sel_params *p) { p->dk.rank = 4; }
static void sel_dv_rank_2(aotk_sel_params *p) { p->dv.rank = 2; }
static void sel_dout_rank_4(aotk_sel_params *p) { p->dout.rank = 4; }
static void sel_dq_like_k(aotk_sel_params *p) {
  p->dq = aotk_tensor_3d(FAKE_DQ, p->q.dtype, p->k.shape[0], p->k.shape[1], p->k.shape[2]);
}
static void sel_dk_like_q(aotk_sel_params *p) { /* what dk would be without the sum over the group */
  p->dk = aotk_tensor_3d(FAKE_DK, p->q.dtype, p->q.shape[0], p->q.shape[1], p->q.shape[2]);
}
static void sel_dk_heads_q(aotk_sel_params *p) {
  p->dk = aotk_tensor_3d(FAKE_DK, p->q.dtype, p->k.shape[0], p->q.shape[1], p->k.shape[2]);
}
static void sel_dv_total_k(aotk_sel_params *p) { p->dv.shape[0] += 1; }
static void sel_dv_heads_q(aotk_sel_params *p) { p->dv.shape[1] = p->q.shape[1]; }
static void sel_dout_total_q(aotk_sel_params *p) { p->dout.shape[0] -= 1; }
static void sel_dout_heads_kv(aotk_sel_params *p) { p->dout.shape[1] = p->k.shape[1]; }
static void sel_dout_head_dim(aotk_sel_params *p) { p->dout.shape[2] = 64; }
static void sel_dq_head_dim(aotk_sel_params *p) { p->dq.shape[2] = 64; }
static void sel_dv_head_dim(aotk_sel_params *p) { p->dv.shape[2] = 64; }
static void sel_dq_misaligned(aotk_sel_params *p) { p->dq.data = byte_offset(FAKE_DQ, 2); }
static void sel_dk_token_stride_8(aotk_sel_params *p) { p->dk.strides[0] += 8; }
static void sel_dout_misaligned(aotk_sel_params *p) { p->dout.data = byte_offset(FAKE_DOUT, 8); }
static void sel_dv_odd_address(aotk_sel_params *p) { p->dv.data = byte_offset(FAKE_DV, 1); }
static void sel_dv_heads_stride_zero(aotk_sel_params *p) { p->dv.strides[1] = 0; }
static void sel_dq_token_stride_zero(aotk_sel_params *p) { p->dq.strides[0] = 0; }
static void sel_dout_last_stride_2(aotk_sel_params *p) { p->dout.strides[2] = 2; }
static void sel_dk_stride_negative(aotk_sel_params *p) { p->dk.strides[0] = -256; }
static void sel_dq_total_zero(aotk_sel_params *p) { p->dq.shape[0] = 0; }

static const sel_bad_input sel_bwd_bad_inputs[] = {
    {"lse.data NULL", sel_lse_null, AOTK_ERROR_NULL_POINTER, "lse"},
    {"dout.data NULL", sel_dout_null, AOTK_ERROR_NULL_POINTER, "dout.data"},
    {"dq.data NULL", sel_dq_null, AOTK_ERROR_NULL_POINTER, "dq.data"},
    {"dk.data NULL", sel_dk_null, AOTK_ERROR_NULL_POINTER, "dk.data"},
    {"dv.data NULL", sel_dv_null, AOTK_ERROR_NULL_POINTER, "dv.data"},
    {"dq float16, q bfloat16", sel_dq_float16, AOTK_ERROR_DTYPE_MISMATCH, "dq.dtype"},
    {"dout float32", sel_dout_float32, AOTK_ERROR_DTYPE_MISMATCH, "dout.dtype"},
    {"dk dtype garbage", sel_dk_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "dk.dtype"},
    {"dk rank 4", sel_dk_rank_4, AOTK_ERROR_RANK, "dk.rank"},
    {"dv rank 2", sel_dv_rank_2, AOTK_ERROR_RANK, "dv.rank"},
    {"dout rank 4", sel_dout_rank_4, AOTK_ERROR_RANK, "dout.rank"},
    {"dq like k", sel_dq_like_k, AOTK_ERROR_SHAPE_MISMATCH, "dq.shape[0]"},
    {"dk like q", sel_dk_like_q, AOTK_ERROR_SHAPE_MISMATCH, "dk.shape[0]"},
    {"dk with the query heads", sel_dk_heads_q, AOTK_ERROR_SHAPE_MISMATCH, "dk.shape[1]"},
    {"dv total_k long", sel_dv_total_k, AOTK_ERROR_SHAPE_MISMATCH, "dv.shape[0]"},
    {"dv with the query heads", sel_dv_heads_q, AOTK_ERROR_SHAPE_MISMATCH, "dv.shape[1]"},
    {"dout total_q short", sel_dout_total_q, AOTK_ERROR_SHAPE_MISMATCH, "dout.shape[0]"},
    {"dout with the kv heads", sel_dout_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "dout.shape[1]"},
    {"dout head_dim != v head_dim", sel_dout_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "dout.shape[2]"},
    {"dq head_dim != q head_dim", sel_dq_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "dq.shape[2]"},
    {"dv head_dim != v head_dim", sel_dv_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "dv.shape[2]"},
    {"dq 2 bytes past 16-byte alignment", sel_dq_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "dq: data"},
    {"dk token stride not a multiple of 16", sel_dk_token_stride_8, AOTK_ERROR_MISALIGNED_POINTER, "dk: data"},
    {"dout 8 bytes past 16-byte alignment", sel_dout_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "dout: data"},
    {"dv odd address", sel_dv_odd_address, AOTK_ERROR_MISALIGNED_POINTER, "dv.data"},
    {"dv heads stride 0", sel_dv_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "dv.strides[1]"},
    {"dq token stride 0", sel_dq_token_stride_zero, AOTK_ERROR_INVALID_VALUE, "dq.strides[0]"},
    {"dout last stride 2", sel_dout_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "dout.strides[2]"},
    {"dk stride negative", sel_dk_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "dk.strides[0]"},
    {"dq total_q 0", sel_dq_total_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "dq.shape[0]"},
};

enum { SEL_CHECK_WORKSPACE_BYTES = 16 };

/* Runs one bad input through the call `op` names, through aotk_sel_query(op) and (for the forward's
 * inputs, which it validates too) through aotk_sel_check_indices, with the recording fake installed as a
 * working sm_90 GPU: each must refuse it with the expected status and a message naming the argument,
 * call no driver function (so nothing is launched and no output written), and leave the caller's params
 * and the query's info untouched. */
static void check_sel_bad_input_op(const sel_bad_input *c, aotk_op op, bool check_indices) {
  const char *function = sel_op_function(op);
  aotk_sel_params params = op == AOTK_OP_SEL_FWD ? valid_sel_params() : valid_sel_bwd_params();
  if (c->spoil != NULL) c->spoil(&params);
  const aotk_sel_params before = params;
  const aotk_sel_params *argument = c->spoil != NULL ? &params : NULL;

  reset_calls();
  aotk_status status = run_sel_op(op, argument);
  CHECK_MSG(status == c->expected, "%s: %s gave %s (%s), expected %s", c->what, function, aotk_status_name(status),
            aotk_last_error(), aotk_status_name(c->expected));
  CHECK_MSG(message_mentions(c->mentions), "%s: %s's message \"%s\" does not mention \"%s\"", c->what, function,
            aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: %s reached the driver (%s)", c->what, function, called_functions());
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: %s changed the caller's params", c->what, function);

  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status query_status = aotk_sel_query(op, argument, &info);
  CHECK_MSG(query_status == status, "%s: aotk_sel_query(op %d) gave %s, %s %s", c->what, (int)op,
            aotk_status_name(query_status), function, aotk_status_name(status));
  CHECK_MSG(message_mentions(c->mentions), "%s: aotk_sel_query(op %d)'s message \"%s\" does not mention \"%s\"",
            c->what, (int)op, aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: aotk_sel_query(op %d) reached the driver (%s)", c->what, (int)op,
            called_functions());
  CHECK_MSG(info_untouched(&info), "%s: aotk_sel_query(op %d) wrote *info on failure", c->what, (int)op);
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: aotk_sel_query changed the caller's params", c->what);

  if (!check_indices) return;
  reset_calls();
  status = aotk_sel_check_indices(argument, FAKE_WORKSPACE, SEL_CHECK_WORKSPACE_BYTES, FAKE_STREAM);
  CHECK_MSG(status == c->expected, "%s: aotk_sel_check_indices gave %s (%s), expected %s", c->what,
            aotk_status_name(status), aotk_last_error(), aotk_status_name(c->expected));
  CHECK_MSG(message_mentions(c->mentions), "%s: aotk_sel_check_indices' message \"%s\" does not mention \"%s\"",
            c->what, aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: aotk_sel_check_indices reached the driver (%s)", c->what, called_functions());
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: aotk_sel_check_indices changed the caller's params",
            c->what);
}

/* Every bad input of the forward's arguments, through the forward, the backward (which validates them
 * first, the same way), both queries and the index check; then the backward's own. */
static void test_sel_validation_rejects_bad_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  /* The bases are valid, so each failure below is due to its one change. */
  aotk_sel_params params = valid_sel_params();
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK_MSG(aotk_sel_query(AOTK_OP_SEL_FWD, &params, &info) == AOTK_OK, "the base case fails: %s", aotk_last_error());
  params = valid_sel_bwd_params();
  CHECK_MSG(aotk_sel_query(AOTK_OP_SEL_BWD, &params, &info) == AOTK_OK, "the backward's base case fails: %s",
            aotk_last_error());
  reset_calls();
  CHECK_MSG(aotk_sel_check_indices(&params, FAKE_WORKSPACE, SEL_CHECK_WORKSPACE_BYTES, FAKE_STREAM) == AOTK_OK,
            "the index check's base case fails: %s", aotk_last_error());

  const size_t forward_cases = sizeof sel_bad_inputs / sizeof sel_bad_inputs[0];
  for (size_t i = 0; i < forward_cases; i++) {
    check_sel_bad_input_op(&sel_bad_inputs[i], AOTK_OP_SEL_FWD, true);
    check_sel_bad_input_op(&sel_bad_inputs[i], AOTK_OP_SEL_BWD, false);
  }
  const size_t backward_cases = sizeof sel_bwd_bad_inputs / sizeof sel_bwd_bad_inputs[0];
  for (size_t i = 0; i < backward_cases; i++) check_sel_bad_input_op(&sel_bwd_bad_inputs[i], AOTK_OP_SEL_BWD, false);
  printf("    %zu forward and %zu backward bad inputs\n", forward_cases, backward_cases);
  uninstall_fake_gpu();
}

/* The forward (and the index check) ignores the backward's fields: each of the backward's bad inputs is
 * fine for them, and they launch exactly what they launch without the fields. */
static void test_sel_fwd_ignores_bwd_fields(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_sel_params clean = valid_sel_params();
  aotk_kernel_info clean_info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_sel_query(AOTK_OP_SEL_FWD, &clean, &clean_info) == AOTK_OK);
  CHECK(aotk_sel_fwd(&clean, FAKE_STREAM) == AOTK_OK);
  const recorded_launch clean_launch = fake.launch;
  const size_t cases = sizeof sel_bwd_bad_inputs / sizeof sel_bwd_bad_inputs[0];
  for (size_t i = 0; i <= cases; i++) {
    aotk_sel_params dirty = valid_sel_bwd_params();
    const char *what = "valid backward fields";
    if (i < cases) {
      if (sel_bwd_bad_inputs[i].spoil == sel_lse_null) continue; /* lse is the forward's own (optional) output */
      sel_bwd_bad_inputs[i].spoil(&dirty);
      what = sel_bwd_bad_inputs[i].what;
    }
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_sel_query(AOTK_OP_SEL_FWD, &dirty, &info);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(memcmp(&info, &clean_info, sizeof info) == 0, "%s: aotk_sel_query reports %s, without them %s", what,
              info.kernel_name, clean_info.kernel_name);
    reset_calls();
    status = aotk_sel_fwd(&dirty, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_fwd %s (%s)", what, aotk_status_name(status), aotk_last_error());
    CHECK(fake.calls[CALL_cuLaunchKernel] == 1);
    CHECK_MSG(memcmp(&fake.launch, &clean_launch, sizeof clean_launch) == 0, "%s: the forward launched differently",
              what);
    status = aotk_sel_check_indices(&dirty, FAKE_WORKSPACE, SEL_CHECK_WORKSPACE_BYTES, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_check_indices %s (%s)", what, aotk_status_name(status),
              aotk_last_error());
  }
  uninstall_fake_gpu();
}

/* Inputs at the edge of what selection attention allows, which validation must accept: each runs its
 * one kernel (forward) or its seven or eight launches (backward), as the query says. The params sit in a
 * struct with room after them, so that a struct_size larger than this header's (a newer caller's) is
 * readable memory. */
typedef struct sel_edge_case {
  const char *what;
  bool bwd;
  int launches;
  struct {
    aotk_sel_params params;
    unsigned char newer_fields[64];
  } call;
} sel_edge_case;

static aotk_sel_params *add_sel_edge_case(sel_edge_case *cases, int *count, const char *what, sel_shape shape,
                                          bool bwd) {
  sel_edge_case *c = &cases[(*count)++];
  memset(c, 0, sizeof *c);
  c->what = what;
  c->bwd = bwd;
  c->launches = bwd ? sel_bwd_launches(&shape) : 1;
  c->call.params = sel_params_for(shape, bwd);
  return &c->call.params;
}

static void test_sel_validation_accepts_edge_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  static sel_edge_case cases[24];
  int count = 0;
  sel_shape s = default_sel_shape;
  s.dtype = AOTK_DTYPE_FLOAT16;
  add_sel_edge_case(cases, &count, "float16", s, false);
  add_sel_edge_case(cases, &count, "float16 backward", s, true);
  s = default_sel_shape;
  s.num_seqs = 0;
  add_sel_edge_case(cases, &count, "no cu_seqlens (one sequence), max_seqlen_k 0 ignored", s, false)->max_seqlen_k = 0;
  add_sel_edge_case(cases, &count, "no cu_seqlens, backward, max_seqlen_k -5 ignored", s, true)->max_seqlen_k = -5;
  s = default_sel_shape;
  s.with_lse = false, s.with_block_cnt = false;
  add_sel_edge_case(cases, &count, "no lse, no block_cnt", s, false);
  add_sel_edge_case(cases, &count, "no block_cnt, backward", s, true);
  s = default_sel_shape;
  s.heads_q = 128, s.heads_kv = 1;
  add_sel_edge_case(cases, &count, "MQA, a group of 128", s, false);
  add_sel_edge_case(cases, &count, "MQA, a group of 128, backward (dK/dV chunks of 32 tokens: eight launches)", s,
                    true);
  s = default_sel_shape;
  s.heads_q = s.heads_kv = 1, s.slots = 1, s.total_q = s.total_k = 1, s.num_seqs = 1, s.max_seqlen_k = 1;
  add_sel_edge_case(cases, &count, "one token, one key, one slot", s, false);
  add_sel_edge_case(cases, &count, "one token, one key, one slot, backward", s, true);
  s = default_sel_shape;
  s.head_dim_qk = 192, s.block_size = 128;
  add_sel_edge_case(cases, &count, "head dims (192, 128), block size 128, backward", s, true);
  s.head_dim_qk = s.head_dim_v = 64, s.block_size = 32;
  add_sel_edge_case(cases, &count, "head dims (64, 64), block size 32", s, false);
  s = default_sel_shape;
  s.max_seqlen_k = INT32_MAX / 2; /* longer than any sequence: the grids and the index grow, nothing else */
  add_sel_edge_case(cases, &count, "max_seqlen_k far above total_k", s, false);
  add_sel_edge_case(cases, &count, "lse 4-byte aligned (it is not read 16 bytes at a time)", default_sel_shape,
                    false)->lse.data = byte_offset(FAKE_LSE, 4);
  aotk_sel_params *p = add_sel_edge_case(cases, &count, "block_idx and block_cnt 4-byte aligned", default_sel_shape,
                                         true);
  p->block_idx.data = byte_offset(FAKE_BLOCK_IDX, 4), p->block_cnt.data = byte_offset(FAKE_BLOCK_CNT, 12);
  p = add_sel_edge_case(cases, &count, "block_idx with odd strides (not read 16 bytes at a time)", default_sel_shape,
                        true);
  p->block_idx.strides[0] = 2 * 17 + 3, p->block_idx.strides[1] = 17;
  p = add_sel_edge_case(cases, &count, "inputs broadcast (zero strides)", default_sel_shape, true);
  p->q.strides[0] = p->k.strides[1] = p->v.strides[0] = p->dout.strides[0] = p->dout.strides[1] = 0;
  p->block_idx.strides[0] = p->block_cnt.strides[0] = 0;
  add_sel_edge_case(cases, &count, "explicit softmax_scale", default_sel_shape, true)->softmax_scale = 0.01f;
  add_sel_edge_case(cases, &count, "a struct_size larger than this header's (a newer caller)", default_sel_shape,
                    false)->struct_size = sizeof(aotk_sel_params) + 64;
  add_sel_edge_case(cases, &count, "a newer caller's backward", default_sel_shape, true)->struct_size =
      sizeof(aotk_sel_params) + 8;

  for (int i = 0; i < count; i++) {
    const aotk_op op = cases[i].bwd ? AOTK_OP_SEL_BWD : AOTK_OP_SEL_FWD;
    const aotk_sel_params *params = &cases[i].call.params;
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_sel_query(op, params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_query %s (%s)", cases[i].what, aotk_status_name(status),
              aotk_last_error());
    CHECK_MSG(info.launches == cases[i].launches, "%s: the query says %d launches, expected %d", cases[i].what,
              info.launches, cases[i].launches);
    reset_calls();
    status = cases[i].bwd ? aotk_sel_bwd(params, FAKE_WORKSPACE, info.workspace_bytes, FAKE_STREAM)
                          : aotk_sel_fwd(params, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "%s: %s %s (%s)", cases[i].what, sel_op_function(op), aotk_status_name(status),
              aotk_last_error());
    CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == cases[i].launches, "%s: %d launches, expected %d", cases[i].what,
              fake.calls[CALL_cuLaunchKernel], cases[i].launches);
  }
  printf("    %d cases\n", count);
  uninstall_fake_gpu();
}

/* ---- selection: workspaces and query arguments ---- */

/* The backward's workspace: at least the size aotk_sel_query reports (the formula above, computed here
 * from the header's layout), not NULL, 16-byte aligned; checked after the params, before the driver. */
static void test_sel_bwd_workspace(void) {
  install_fake_gpu(90, SHARED_SM90);
  sel_shape shapes[4] = {default_sel_shape, default_sel_shape, default_sel_shape, default_sel_shape};
  shapes[1].dtype = AOTK_DTYPE_FLOAT16, shapes[1].num_seqs = 0, shapes[1].total_q = shapes[1].total_k = 1;
  shapes[1].heads_q = shapes[1].heads_kv = 1, shapes[1].slots = 1, shapes[1].block_size = 32;
  /* Lists split (chunks of 241 tokens for a group of 17, 5 per list), and 7007 token-list entries, not a
   * multiple of 4: that part too is rounded up to 16 bytes, ahead of the partial records. */
  shapes[2].heads_q = 17, shapes[2].heads_kv = 1, shapes[2].slots = 7, shapes[2].total_q = 1001;
  shapes[2].max_seqlen_k = 4097, shapes[2].num_seqs = 5, shapes[2].with_block_cnt = false;
  shapes[3].head_dim_qk = 192, shapes[3].block_size = 128, shapes[3].total_q = 17, shapes[3].heads_q = 6;
  shapes[3].heads_kv = 3, shapes[3].max_seqlen_k = 127;
  int cases = 0;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const sel_shape *s = &shapes[i];
    aotk_sel_params params = sel_params_for(*s, true);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_sel_query(AOTK_OP_SEL_BWD, &params, &info);
    CHECK_MSG(status == AOTK_OK, "shape %zu: %s (%s)", i, aotk_status_name(status), aotk_last_error());
    const size_t needed = sel_workspace_bytes(s);
    const int launches = sel_bwd_launches(s);
    CHECK_MSG(info.workspace_bytes == needed,
              "shape %zu: workspace_bytes %zu, expected %zu (delta %zu + 3 x offsets %zu + 2 x tokens %zu + partials "
              "%zu)", i, info.workspace_bytes, needed, sel_delta_bytes(s), sel_offsets_bytes(s), sel_tokens_bytes(s),
              sel_partials_bytes(s));
    CHECK_MSG(info.launches == launches, "shape %zu: %d launches, expected %d", i, info.launches, launches);
    const struct {
      const char *what;
      void *workspace;
      size_t bytes;
      aotk_status expected;
    } workspaces[] = {
        {"NULL, the reported size", NULL, needed, AOTK_ERROR_WORKSPACE_TOO_SMALL},
        {"NULL, size 0", NULL, 0, AOTK_ERROR_WORKSPACE_TOO_SMALL},
        {"one byte short", FAKE_WORKSPACE, needed - 1, AOTK_ERROR_WORKSPACE_TOO_SMALL},
        {"half", FAKE_WORKSPACE, needed / 2, AOTK_ERROR_WORKSPACE_TOO_SMALL},
        {"size 0", FAKE_WORKSPACE, 0, AOTK_ERROR_WORKSPACE_TOO_SMALL},
        {"8-byte aligned", byte_offset(FAKE_WORKSPACE, 8), needed, AOTK_ERROR_MISALIGNED_POINTER},
        {"4-byte aligned", byte_offset(FAKE_WORKSPACE, 4), needed + 64, AOTK_ERROR_MISALIGNED_POINTER},
        {"odd address", byte_offset(FAKE_WORKSPACE, 1), needed, AOTK_ERROR_MISALIGNED_POINTER},
        {"exactly the reported size", FAKE_WORKSPACE, needed, AOTK_OK},
        {"larger than needed", byte_offset(FAKE_WORKSPACE, 16), needed + 1, AOTK_OK},
    };
    for (size_t w = 0; w < sizeof workspaces / sizeof workspaces[0]; w++) {
      const aotk_sel_params before = params;
      reset_calls();
      reset_launch_log();
      status = aotk_sel_bwd(&params, workspaces[w].workspace, workspaces[w].bytes, FAKE_STREAM);
      CHECK_MSG(status == workspaces[w].expected, "shape %zu, %zu-byte workspace %s: %s (%s), expected %s", i, needed,
                workspaces[w].what, aotk_status_name(status), aotk_last_error(),
                aotk_status_name(workspaces[w].expected));
      CHECK(memcmp(&params, &before, sizeof params) == 0);
      if (workspaces[w].expected == AOTK_OK) {
        CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == launches && fake.logged_launches == launches,
                  "workspace %s: %d launches", workspaces[w].what, fake.calls[CALL_cuLaunchKernel]);
        /* The dQ pass stages delta at the workspace's start. */
        const recorded_launch *dq = &fake.launch_log[SEL_LAUNCH_DQ];
        CHECK_MSG(fake.logged_launches == launches && dq->kernel == KERNEL_SEL_BWD_DQ &&
                      arg_pointer(dq, SEL_DQ_DELTA) == (uint64_t)(uintptr_t)workspaces[w].workspace,
                  "workspace %s: delta is not at its start", workspaces[w].what);
      } else {
        CHECK_MSG(message_mentions("workspace"), "workspace %s: the message \"%s\" does not name the workspace",
                  workspaces[w].what, aotk_last_error());
        CHECK_MSG(total_calls() == 0, "workspace %s: reached the driver (%s)", workspaces[w].what, called_functions());
      }
      cases++;
    }
    CHECK(aotk_sel_bwd(&params, FAKE_WORKSPACE, needed - 1, FAKE_STREAM) == AOTK_ERROR_WORKSPACE_TOO_SMALL);
    char needed_text[32];
    snprintf(needed_text, sizeof needed_text, "%zu", needed);
    CHECK_MSG(message_mentions(needed_text), "the message \"%s\" does not say %zu bytes are needed", aotk_last_error(),
              needed);
  }
  /* Bad params are reported before a bad workspace. */
  aotk_sel_params params = valid_sel_bwd_params();
  params.block_size = 16;
  reset_calls();
  CHECK(aotk_sel_bwd(&params, NULL, 0, FAKE_STREAM) == AOTK_ERROR_INVALID_VALUE);
  CHECK(message_mentions("block_size"));
  CHECK(total_calls() == 0);
  printf("    %d workspaces\n", cases);
  uninstall_fake_gpu();
}

/* aotk_sel_check_indices needs 16 bytes of 16-byte-aligned workspace (its result word). */
static void test_sel_check_indices_workspace(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_sel_params params = valid_sel_params();
  const struct {
    const char *what;
    void *workspace;
    size_t bytes;
    aotk_status expected;
  } workspaces[] = {
      {"NULL, 16 bytes", NULL, 16, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"NULL, 0 bytes", NULL, 0, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"15 bytes", FAKE_WORKSPACE, 15, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"8 bytes (one word)", FAKE_WORKSPACE, 8, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"0 bytes", FAKE_WORKSPACE, 0, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"8-byte aligned", byte_offset(FAKE_WORKSPACE, 8), 16, AOTK_ERROR_MISALIGNED_POINTER},
      {"4-byte aligned, ample", byte_offset(FAKE_WORKSPACE, 4), 4096, AOTK_ERROR_MISALIGNED_POINTER},
      {"odd address", byte_offset(FAKE_WORKSPACE, 1), 16, AOTK_ERROR_MISALIGNED_POINTER},
      {"16 bytes", FAKE_WORKSPACE, 16, AOTK_OK},
      {"more, 16 bytes further", byte_offset(FAKE_WORKSPACE, 16), 17, AOTK_OK},
  };
  for (size_t w = 0; w < sizeof workspaces / sizeof workspaces[0]; w++) {
    const aotk_sel_params before = params;
    reset_calls();
    aotk_status status = aotk_sel_check_indices(&params, workspaces[w].workspace, workspaces[w].bytes, FAKE_STREAM);
    CHECK_MSG(status == workspaces[w].expected, "workspace %s: %s (%s), expected %s", workspaces[w].what,
              aotk_status_name(status), aotk_last_error(), aotk_status_name(workspaces[w].expected));
    CHECK(memcmp(&params, &before, sizeof params) == 0);
    if (workspaces[w].expected == AOTK_OK) {
      CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 1 &&
                    fake.written_address == (CUdeviceptr)(uintptr_t)workspaces[w].workspace,
                "workspace %s: %d launches, result word at %#llx", workspaces[w].what,
                fake.calls[CALL_cuLaunchKernel], (unsigned long long)fake.written_address);
    } else {
      CHECK_MSG(message_mentions("workspace"), "workspace %s: the message \"%s\" does not name the workspace",
                workspaces[w].what, aotk_last_error());
      CHECK_MSG(total_calls() == 0, "workspace %s: reached the driver (%s)", workspaces[w].what, called_functions());
    }
    if (workspaces[w].expected == AOTK_ERROR_WORKSPACE_TOO_SMALL) {
      CHECK_MSG(message_mentions("needs 16"), "workspace %s: the message \"%s\" does not say 16 bytes are needed",
                workspaces[w].what, aotk_last_error());
    }
  }
  /* Bad params are reported before a bad workspace. */
  params.block_size = 0;
  reset_calls();
  CHECK(aotk_sel_check_indices(&params, NULL, 0, FAKE_STREAM) == AOTK_ERROR_INVALID_VALUE);
  CHECK(message_mentions("block_size") && total_calls() == 0);
  uninstall_fake_gpu();
}

/* Each query answers its own API's ops: aotk_sel_query the selection's, aotk_query dense attention's. */
static void test_sel_query_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_sel_params params = valid_sel_bwd_params();
  reset_calls();
  CHECK(aotk_sel_query(AOTK_OP_SEL_FWD, &params, NULL) == AOTK_ERROR_NULL_POINTER && message_mentions("info"));
  aotk_kernel_info info;
  poison_info(&info);
  info.struct_size = 0;
  CHECK(aotk_sel_query(AOTK_OP_SEL_FWD, &params, &info) == AOTK_ERROR_STRUCT_SIZE && message_mentions("struct_size"));
  CHECK(aotk_sel_query(AOTK_OP_SEL_BWD, NULL, &info) == AOTK_ERROR_STRUCT_SIZE);

  static const int dense_and_bad_ops[] = {AOTK_OP_ATTN_FWD, AOTK_OP_ATTN_BWD, 0, -1, 5, 1000};
  for (size_t i = 0; i < sizeof dense_and_bad_ops / sizeof dense_and_bad_ops[0]; i++) {
    poison_info(&info);
    aotk_status status = aotk_sel_query((aotk_op)dense_and_bad_ops[i], &params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "aotk_sel_query(op %d): %s", dense_and_bad_ops[i],
              aotk_status_name(status));
    CHECK_MSG(message_mentions("AOTK_OP_SEL_FWD"), "aotk_sel_query(op %d): message \"%s\"", dense_and_bad_ops[i],
              aotk_last_error());
    CHECK(info_untouched(&info));
    /* The op is checked before the params. */
    CHECK(aotk_sel_query((aotk_op)dense_and_bad_ops[i], NULL, &info) == AOTK_ERROR_INVALID_VALUE);
  }
  aotk_attn_params attn_params = valid_bwd_params();
  static const aotk_op sel_ops[] = {AOTK_OP_SEL_FWD, AOTK_OP_SEL_BWD};
  for (size_t i = 0; i < 2; i++) {
    poison_info(&info);
    aotk_status status = aotk_query(sel_ops[i], &attn_params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "aotk_query(op %d): %s", (int)sel_ops[i], aotk_status_name(status));
    CHECK_MSG(message_mentions("aotk_sel_query"), "aotk_query(op %d): message \"%s\"", (int)sel_ops[i],
              aotk_last_error());
    CHECK(info_untouched(&info));
  }
  CHECK_MSG(total_calls() == 0, "bad query arguments reached the driver (%s)", called_functions());

  /* Both ops answer: the backward's params serve the forward too. The forward's alone are not enough
   * for the backward (no dout; without lse, no lse). */
  poison_info(&info);
  CHECK(aotk_sel_query(AOTK_OP_SEL_FWD, &params, &info) == AOTK_OK && info.launches == 1 && info.workspace_bytes == 0);
  poison_info(&info);
  CHECK(aotk_sel_query(AOTK_OP_SEL_BWD, &params, &info) == AOTK_OK &&
        info.launches == sel_bwd_launches(&default_sel_shape));
  aotk_sel_params fwd_params = valid_sel_params();
  poison_info(&info);
  CHECK(aotk_sel_query(AOTK_OP_SEL_BWD, &fwd_params, &info) == AOTK_ERROR_NULL_POINTER && message_mentions("dout"));
  CHECK(info_untouched(&info));
  fwd_params.lse.data = NULL;
  CHECK(aotk_sel_query(AOTK_OP_SEL_BWD, &fwd_params, &info) == AOTK_ERROR_NULL_POINTER && message_mentions("lse"));
  CHECK(info_untouched(&info));
  CHECK(aotk_sel_query(AOTK_OP_SEL_FWD, &fwd_params, &info) == AOTK_OK);

  /* A smaller info struct (an older caller): only its prefix is written. */
  const size_t prefix = offsetof(aotk_kernel_info, workspace_bytes);
  poison_info(&info);
  info.struct_size = prefix;
  CHECK(aotk_sel_query(AOTK_OP_SEL_BWD, &params, &info) == AOTK_OK);
  CHECK(info.struct_size == prefix && strncmp(info.kernel_name, "sel_bwd_dkdv_", 13) == 0 && info.grid > 0);
  const unsigned char *bytes = (const unsigned char *)&info;
  bool tail_untouched = true;
  for (size_t i = prefix; i < sizeof info; i++) tail_untouched = tail_untouched && bytes[i] == POISON;
  CHECK_MSG(tail_untouched, "aotk_sel_query(AOTK_OP_SEL_BWD) wrote past struct_size");
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "aotk_sel_query loaded or launched (%s)", called_functions());
  uninstall_fake_gpu();
}

/* ---- selection: what runs, and with which arguments ---- */

static void check_packed_strides(const char *what, const char *kernel, const recorded_launch *launch, int base,
                                 const aotk_tensor *t, const char *name) {
  /* An absent tensor (block_cnt, the forward's lse) passes zero strides. */
  const int64_t token = t->data != NULL ? t->strides[0] : 0, head = t->data != NULL ? t->strides[1] : 0;
  CHECK_MSG(arg_i64(launch, base) == token && arg_i32(launch, base + 1) == head,
            "%s: %s packs %s's strides as (%lld, %d), expected (%lld, %lld)", what, kernel, name,
            (long long)arg_i64(launch, base), arg_i32(launch, base + 1), (long long)token, (long long)head);
}

/* The launch's grid, block, shared memory, stream and scratch pointers, for table row `row`. */
static void check_sel_launch_shape(const char *what, const recorded_launch *launch, int kernel,
                                   const aotk__kernel_entry *row, int64_t grid, int scratch_index) {
  const char *name = kernel_signatures[kernel].function;
  CHECK_MSG(launch->kernel == kernel, "%s: launched %s, expected %s", what, kernel_signatures[launch->kernel].function,
            name);
  CHECK_MSG(launch->grid[0] == (unsigned)grid && launch->grid[1] == 1 && launch->grid[2] == 1,
            "%s: %s grid (%u, %u, %u), expected (%lld, 1, 1)", what, name, launch->grid[0], launch->grid[1],
            launch->grid[2], (long long)grid);
  CHECK_MSG(launch->block[0] == 32u * (unsigned)row->num_warps && launch->block[1] == 1 && launch->block[2] == 1,
            "%s: %s block %u for %s's %d warps", what, name, launch->block[0], row->name, row->num_warps);
  CHECK_MSG(launch->shared_bytes == (unsigned)row->shared_bytes, "%s: %s with %u bytes of shared memory, %s needs %d",
            what, name, launch->shared_bytes, row->name, row->shared_bytes);
  CHECK(launch->stream == (CUstream)FAKE_STREAM && launch->extra == NULL);
  const struct given_kernel *given = given_kernel_of(launch->function);
  CHECK_MSG(given != NULL, "%s: %s launched a handle the driver never gave", what, name);
  if (given != NULL) { /* above 48 KiB of dynamic shared memory the kernel must have opted in */
    const int opt_in = row->shared_bytes > 48 * 1024 ? row->shared_bytes : 0;
    CHECK_MSG(given->shared_opt_in == opt_in, "%s: %s (%d bytes) opted in to %d bytes", what, row->name,
              row->shared_bytes, given->shared_opt_in);
  }
  CHECK_MSG(arg_pointer(launch, scratch_index) == 0 && arg_pointer(launch, scratch_index + 1) == 0,
            "%s: %s's scratch pointers are not NULL", what, name);
}

/* The flags the selection kernels are told (kernels/sel_attn.py), less WRITE_LSE, which only the
 * forward reads. */
static int32_t expected_sel_flags(const aotk_sel_params *params) {
  return (params->cu_seqlens_q.data != NULL ? SEL_FLAG_VARLEN : 0) |
         (params->block_cnt.data != NULL ? SEL_FLAG_BLOCK_CNT : 0);
}

/* aotk_sel_query(AOTK_OP_SEL_FWD), then aotk_sel_fwd on the fake GPU `g`: the query names the row of the
 * problem's dtype, head dims and block size whose tile the group size calls for (block_m 16 up to a group
 * of 16, else 64) on the GPU's target, with grid heads_kv * total_q * ceil(group / block_m); the call
 * launches it so, with every argument in the kernel's order. */
static void check_sel_fwd(const char *what, const aotk_sel_params *params, const sel_shape *s, const gpu *g) {
  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status status = aotk_sel_query(AOTK_OP_SEL_FWD, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "%s: aotk_sel_query loaded or launched (%s)", what, called_functions());
  const aotk__kernel_entry *row = expected_sel_row(AOTK__FAMILY_SEL_FWD, g->arch, s);
  CHECK_MSG(row != NULL, "%s: no sm_%d sel_fwd row", what, g->arch);
  if (row == NULL) return;
  const int64_t group = sel_group_size(s), block_m = sel_expected_block_m(s), chunks = ceil_div(group, block_m);
  const int64_t grid = s->heads_kv * s->total_q * chunks;
  CHECK(info.struct_size == sizeof info);
  CHECK_MSG(strncmp(info.kernel_name, "sel_fwd_", 8) == 0 && strcmp(info.kernel_name, row->name) == 0,
            "%s: aotk_sel_query names %s, expected %s", what, info.kernel_name, row->name);
  CHECK_MSG(info.arch == g->arch && info.from_ptx == g->from_ptx, "%s: sm_%d from_ptx %d, expected sm_%d from_ptx %d",
            what, info.arch, info.from_ptx, g->arch, g->from_ptx);
  CHECK_MSG(info.block_m == block_m && info.block_n == s->block_size,
            "%s: a group of %lld runs in block_m %d, block_n %d; expected %lld, %d", what, (long long)group,
            info.block_m, info.block_n, (long long)block_m, s->block_size);
  CHECK_MSG(info.head_dim_qk == s->head_dim_qk && info.head_dim_v == s->head_dim_v, "%s: head dims %d/%d", what,
            info.head_dim_qk, info.head_dim_v);
  CHECK(info.num_warps == row->num_warps && info.shared_bytes == row->shared_bytes);
  CHECK_MSG(info.aligned == row->aligned && info.aligned == sel_expected_g16(AOTK__FAMILY_SEL_FWD, s),
            "%s: a group of %lld runs the variant with aligned %d", what, (long long)group, info.aligned);
  CHECK_MSG(info.grid == grid, "%s: info.grid %lld, expected %lld", what, (long long)info.grid, (long long)grid);
  CHECK(info.workspace_bytes == 0 && info.launches == 1);
  const uint32_t features = s->num_seqs > 0 ? AOTK_FEATURE_VARLEN : 0;
  CHECK_MSG(info.features == features, "%s: features %#x, expected %#x", what, info.features, features);

  reset_launch_log();
  const int launches_before = fake.launches;
  status = aotk_sel_fwd(params, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_fwd %s (%s)", what, aotk_status_name(status), aotk_last_error());
  CHECK_MSG(aotk_last_error()[0] == '\0', "%s: a success left the message \"%s\"", what, aotk_last_error());
  CHECK_MSG(fake.launches == launches_before + 1, "%s: %d launches", what, fake.launches - launches_before);
  if (status != AOTK_OK || fake.logged_launches != 1) return;
  const recorded_launch *launch = &fake.launch_log[0];
  const char *kernel = "sel_fwd";
  check_sel_launch_shape(what, launch, KERNEL_SEL_FWD, row, grid, SEL_FWD_GLOBAL_SCRATCH);
  if (launch->kernel != KERNEL_SEL_FWD) return;
  check_pointer(what, kernel, launch, SEL_FWD_Q, params->q.data, "q");
  check_pointer(what, kernel, launch, SEL_FWD_K, params->k.data, "k");
  check_pointer(what, kernel, launch, SEL_FWD_V, params->v.data, "v");
  check_pointer(what, kernel, launch, SEL_FWD_OUT, params->out.data, "out");
  check_pointer(what, kernel, launch, SEL_FWD_LSE, params->lse.data, "lse");
  check_pointer(what, kernel, launch, SEL_FWD_CU_SEQLENS_Q, params->cu_seqlens_q.data, "cu_seqlens_q");
  check_pointer(what, kernel, launch, SEL_FWD_CU_SEQLENS_K, params->cu_seqlens_k.data, "cu_seqlens_k");
  check_pointer(what, kernel, launch, SEL_FWD_BLOCK_IDX, params->block_idx.data, "block_idx");
  check_pointer(what, kernel, launch, SEL_FWD_BLOCK_CNT, params->block_cnt.data, "block_cnt");
  const aotk_tensor *tensors[] = {&params->q,   &params->k,         &params->v,        &params->out,
                                  &params->lse, &params->block_idx, &params->block_cnt};
  static const char *const names[] = {"q", "k", "v", "out", "lse", "block_idx", "block_cnt"};
  for (int t = 0; t < 7; t++) {
    check_packed_strides(what, kernel, launch, SEL_FWD_STRIDE_QS + 2 * t, tensors[t], names[t]);
  }
  check_int(what, kernel, launch, SEL_FWD_NUM_SEQS, sel_num_seqs(s), "num_seqs");
  check_int(what, kernel, launch, SEL_FWD_TOTAL_Q, s->total_q, "total_q");
  check_int(what, kernel, launch, SEL_FWD_TOTAL_K, s->total_k, "total_k");
  check_int(what, kernel, launch, SEL_FWD_MAX_SEQLEN_K, sel_max_seqlen_k(s), "max_seqlen_k");
  check_int(what, kernel, launch, SEL_FWD_GROUP_SIZE, group, "group_size");
  check_int(what, kernel, launch, SEL_FWD_GROUP_CHUNKS, chunks, "group_chunks");
  check_int(what, kernel, launch, SEL_FWD_NUM_SLOTS, s->slots, "num_slots");
  const int32_t flags = expected_sel_flags(params) | (params->lse.data != NULL ? SEL_FLAG_WRITE_LSE : 0);
  CHECK_MSG(arg_i32(launch, SEL_FWD_FLAGS) == flags, "%s: flags %#x, expected %#x", what,
            (unsigned)arg_i32(launch, SEL_FWD_FLAGS), (unsigned)flags);
  check_float(what, kernel, launch, SEL_FWD_QK_SCALE_LOG2, sel_scale(params, s) / log(2.0), "qk_scale_log2");
}

/* The binary search over cu_seqlens_q that the count and scatter passes run per index entry: enough
 * halvings of num_seqs to reach one sequence (at least one). */
static int32_t sel_search_steps(const sel_shape *s) {
  int32_t steps = 1;
  while (((int64_t)1 << steps) < sel_num_seqs(s)) steps++;
  return steps;
}

/* aotk_sel_query(AOTK_OP_SEL_BWD), then aotk_sel_bwd with `workspace`: the query describes the dK/dV pass
 * (its grid with the chunks of split lists), the launches and the workspace its formula gives; the call
 * launches the index's five passes, then dQ (on the forward's grid), then dK/dV, each with its grid and
 * arguments, the workspace's six parts at their offsets; then, when lists may be split, dK/dV again with
 * the same arguments but SEL_FLAG_DKDV_REDUCE, one program per key tile. */
static void check_sel_bwd(const char *what, const aotk_sel_params *params, const sel_shape *s, const gpu *g,
                          void *workspace) {
  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status status = aotk_sel_query(AOTK_OP_SEL_BWD, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "%s: aotk_sel_query loaded or launched (%s)", what, called_functions());
  const aotk__kernel_entry *rows[SEL_BWD_KERNELS];
  for (int i = 0; i < SEL_BWD_KERNELS; i++) {
    rows[i] = expected_sel_row(sel_bwd_families[i], g->arch, s);
    CHECK_MSG(rows[i] != NULL, "%s: no sm_%d %s row", what, g->arch, kernel_signatures[sel_bwd_kernels[i]].function);
    if (rows[i] == NULL) return;
  }
  const aotk__kernel_entry *dq_row = rows[SEL_LAUNCH_DQ], *dkdv_row = rows[SEL_LAUNCH_DKDV];
  const int64_t group = sel_group_size(s), num_seqs = sel_num_seqs(s), max_seqlen_k = sel_max_seqlen_k(s);
  const int64_t stride_offsets = sel_offsets_stride(s), stride_tokens = s->total_q * s->slots;
  const int64_t zero_count = s->heads_kv * stride_offsets;
  const int64_t entry_chunks = ceil_div(s->total_q * s->slots, rows[SEL_LAUNCH_COUNT]->block_m);
  const int64_t dq_chunks = ceil_div(group, dq_row->block_m);
  const int64_t key_tiles = ceil_div(max_seqlen_k, dkdv_row->block_n);
  const int64_t chunk_tokens = sel_chunk_tokens(s), max_chunks = sel_max_chunks(s);
  const int launches = sel_bwd_launches(s);
  const int64_t grids[SEL_BWD_KERNELS] = {ceil_div(zero_count, rows[SEL_LAUNCH_ZERO]->block_m),
                                          s->heads_kv * entry_chunks,
                                          s->heads_kv,
                                          s->heads_kv * entry_chunks,
                                          s->heads_kv * sel_index_slots(s),
                                          s->heads_kv * s->total_q * dq_chunks,
                                          s->heads_kv * num_seqs * key_tiles * max_chunks};
  const size_t workspace_bytes = sel_workspace_bytes(s);
  CHECK(info.struct_size == sizeof info);
  CHECK_MSG(strncmp(info.kernel_name, "sel_bwd_dkdv_", 13) == 0 && strcmp(info.kernel_name, dkdv_row->name) == 0,
            "%s: aotk_sel_query names %s, expected %s", what, info.kernel_name, dkdv_row->name);
  CHECK_MSG(info.launches == launches, "%s: launches %d, expected %d (max_chunks %lld)", what, info.launches,
            launches, (long long)max_chunks);
  CHECK_MSG(info.workspace_bytes == workspace_bytes, "%s: workspace_bytes %zu, expected %zu", what,
            info.workspace_bytes, workspace_bytes);
  CHECK_MSG(info.arch == g->arch && info.from_ptx == g->from_ptx, "%s: sm_%d from_ptx %d", what, info.arch,
            info.from_ptx);
  CHECK(info.num_warps == dkdv_row->num_warps && info.shared_bytes == dkdv_row->shared_bytes &&
        info.block_m == dkdv_row->block_m && info.block_n == dkdv_row->block_n);
  CHECK_MSG(info.aligned == dkdv_row->aligned && info.aligned == sel_expected_g16(AOTK__FAMILY_SEL_BWD_DKDV, s),
            "%s: a group of %lld runs the dK/dV variant with aligned %d", what, (long long)group, info.aligned);
  CHECK_MSG(info.head_dim_qk == s->head_dim_qk && info.head_dim_v == s->head_dim_v, "%s: head dims %d/%d", what,
            info.head_dim_qk, info.head_dim_v);
  CHECK_MSG(info.grid == grids[SEL_LAUNCH_DKDV], "%s: info.grid %lld, expected %lld", what, (long long)info.grid,
            (long long)grids[SEL_LAUNCH_DKDV]);
  const uint32_t features = s->num_seqs > 0 ? AOTK_FEATURE_VARLEN : 0;
  CHECK_MSG(info.features == features, "%s: features %#x, expected %#x", what, info.features, features);
  /* The dQ pass runs a group in the forward's tile. */
  CHECK_MSG(dq_row->block_m == sel_expected_block_m(s) && dq_row->block_n == s->block_size,
            "%s: %s for a group of %lld", what, dq_row->name, (long long)group);

  reset_launch_log();
  const int launches_before = fake.launches;
  status = aotk_sel_bwd(params, workspace, workspace_bytes, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_bwd %s (%s)", what, aotk_status_name(status), aotk_last_error());
  CHECK_MSG(aotk_last_error()[0] == '\0', "%s: a success left the message \"%s\"", what, aotk_last_error());
  CHECK_MSG(fake.launches == launches_before + launches && fake.logged_launches == launches,
            "%s: %d launches, expected %d (max_chunks %lld)", what, fake.launches - launches_before, launches,
            (long long)max_chunks);
  if (status != AOTK_OK || fake.logged_launches != launches) return;
  bool in_order = true;
  for (int i = 0; i < SEL_BWD_KERNELS; i++) {
    char step[200];
    snprintf(step, sizeof step, "%s, launch %d", what, i + 1);
    check_sel_launch_shape(step, &fake.launch_log[i], sel_bwd_kernels[i], rows[i], grids[i], sel_bwd_scratch[i]);
    in_order = in_order && fake.launch_log[i].kernel == sel_bwd_kernels[i];
  }
  if (launches > SEL_BWD_KERNELS) { /* the reduce: one program per key tile */
    char step[200];
    snprintf(step, sizeof step, "%s, launch %d (the reduce)", what, SEL_LAUNCH_DKDV_REDUCE + 1);
    check_sel_launch_shape(step, &fake.launch_log[SEL_LAUNCH_DKDV_REDUCE], KERNEL_SEL_BWD_DKDV, dkdv_row,
                           s->heads_kv * num_seqs * key_tiles, SEL_DKDV_GLOBAL_SCRATCH);
    in_order = in_order && fake.launch_log[SEL_LAUNCH_DKDV_REDUCE].kernel == KERNEL_SEL_BWD_DKDV;
  }
  if (!in_order) return;

  /* The workspace: delta, the index's offsets, its cursors, each list's first partial record, its token
   * lists, the dQ pass's compacted rows (as large as the lists), the split lists' partial records, each
   * 16-byte aligned. */
  const uintptr_t delta = (uintptr_t)workspace, offsets = delta + sel_delta_bytes(s);
  const uintptr_t cursors = offsets + sel_offsets_bytes(s), chunks = cursors + sel_offsets_bytes(s);
  const uintptr_t tokens = chunks + sel_offsets_bytes(s), compact = tokens + sel_tokens_bytes(s);
  const uintptr_t partials = sel_partials_bytes(s) > 0 ? compact + sel_tokens_bytes(s) : 0; /* none: NULL */
  const int32_t flags = expected_sel_flags(params);
  const double scale = sel_scale(params, s);

  const recorded_launch *zero = &fake.launch_log[SEL_LAUNCH_ZERO];
  const char *kernel = "sel_index_zero";
  check_pointer(what, kernel, zero, SEL_ZERO_OFFSETS, (void *)offsets, "Offsets");
  check_int(what, kernel, zero, SEL_ZERO_COUNT, zero_count, "count");

  /* The count and scatter passes read the index entries alike. */
  const struct {
    const char *kernel;
    int launch, base, stride_offsets;
  } entry_passes[] = {{"sel_index_count", SEL_LAUNCH_COUNT, SEL_COUNT_BLOCK_IDX, SEL_COUNT_STRIDE_OFFSETS},
                      {"sel_index_scatter", SEL_LAUNCH_SCATTER, SEL_SCATTER_BLOCK_IDX, SEL_SCATTER_STRIDE_OFFSETS}};
  for (int e = 0; e < 2; e++) {
    const recorded_launch *launch = &fake.launch_log[entry_passes[e].launch];
    kernel = entry_passes[e].kernel;
    const int base = entry_passes[e].base, ints = entry_passes[e].stride_offsets + (e == 0 ? 1 : 2);
    check_pointer(what, kernel, launch, base + 0, params->block_idx.data, "block_idx");
    check_pointer(what, kernel, launch, base + 1, params->block_cnt.data, "block_cnt");
    check_pointer(what, kernel, launch, base + 2, params->cu_seqlens_q.data, "cu_seqlens_q");
    check_pointer(what, kernel, launch, base + 3, params->cu_seqlens_k.data, "cu_seqlens_k");
    const int strides = e == 0 ? SEL_COUNT_STRIDE_IS : SEL_SCATTER_STRIDE_IS;
    check_packed_strides(what, kernel, launch, strides, &params->block_idx, "block_idx");
    check_packed_strides(what, kernel, launch, strides + 2, &params->block_cnt, "block_cnt");
    check_int(what, kernel, launch, entry_passes[e].stride_offsets, stride_offsets, "stride_offsets");
    check_int(what, kernel, launch, ints + 0, num_seqs, "num_seqs");
    check_int(what, kernel, launch, ints + 1, s->total_q, "total_q");
    check_int(what, kernel, launch, ints + 2, s->total_k, "total_k");
    check_int(what, kernel, launch, ints + 3, max_seqlen_k, "max_seqlen_k");
    check_int(what, kernel, launch, ints + 4, s->block_size, "block_size");
    check_int(what, kernel, launch, ints + 5, s->slots, "num_slots");
    check_int(what, kernel, launch, ints + 6, entry_chunks, "num_chunks");
    check_int(what, kernel, launch, ints + 7, sel_search_steps(s), "search_steps");
    CHECK_MSG((arg_i32(launch, ints + 8) & ~SEL_FLAG_WRITE_LSE) == flags, "%s: %s flags %#x, expected %#x", what,
              kernel, (unsigned)arg_i32(launch, ints + 8), (unsigned)flags);
  }
  _Static_assert(SEL_COUNT_NUM_SEQS == SEL_COUNT_STRIDE_OFFSETS + 1 && SEL_COUNT_FLAGS == SEL_COUNT_NUM_SEQS + 8,
                 "sel_index_count's ints follow stride_offsets");
  _Static_assert(SEL_SCATTER_NUM_SEQS == SEL_SCATTER_STRIDE_OFFSETS + 2 &&
                     SEL_SCATTER_FLAGS == SEL_SCATTER_NUM_SEQS + 8,
                 "sel_index_scatter's ints follow stride_offsets and stride_tokens");
  const recorded_launch *count = &fake.launch_log[SEL_LAUNCH_COUNT];
  check_pointer(what, "sel_index_count", count, SEL_COUNT_OFFSETS, (void *)offsets, "Offsets");
  const recorded_launch *scatter = &fake.launch_log[SEL_LAUNCH_SCATTER];
  kernel = "sel_index_scatter";
  check_pointer(what, kernel, scatter, SEL_SCATTER_CURSORS, (void *)cursors, "Cursors");
  check_pointer(what, kernel, scatter, SEL_SCATTER_TOKENS, (void *)tokens, "Tokens");
  CHECK_MSG(arg_i64(scatter, SEL_SCATTER_STRIDE_TOKENS) == stride_tokens, "%s: %s stride_tokens %lld, expected %lld",
            what, kernel, (long long)arg_i64(scatter, SEL_SCATTER_STRIDE_TOKENS), (long long)stride_tokens);

  const recorded_launch *scan = &fake.launch_log[SEL_LAUNCH_SCAN];
  kernel = "sel_index_scan";
  check_pointer(what, kernel, scan, SEL_SCAN_OFFSETS, (void *)offsets, "Offsets");
  check_pointer(what, kernel, scan, SEL_SCAN_CURSORS, (void *)cursors, "Cursors");
  check_pointer(what, kernel, scan, SEL_SCAN_CHUNKS, (void *)chunks, "Chunks");
  check_int(what, kernel, scan, SEL_SCAN_STRIDE_OFFSETS, stride_offsets, "stride_offsets");
  check_int(what, kernel, scan, SEL_SCAN_SLOTS, sel_index_slots(s), "slots");
  check_int(what, kernel, scan, SEL_SCAN_CHUNK_TOKENS, chunk_tokens, "chunk_tokens");
  check_int(what, kernel, scan, SEL_SCAN_MAX_CHUNKS, max_chunks, "max_chunks");

  const recorded_launch *order = &fake.launch_log[SEL_LAUNCH_ORDER];
  kernel = "sel_index_order";
  check_pointer(what, kernel, order, SEL_ORDER_BLOCK_IDX, params->block_idx.data, "block_idx");
  check_pointer(what, kernel, order, SEL_ORDER_BLOCK_CNT, params->block_cnt.data, "block_cnt");
  check_pointer(what, kernel, order, SEL_ORDER_CU_SEQLENS_Q, params->cu_seqlens_q.data, "cu_seqlens_q");
  check_pointer(what, kernel, order, SEL_ORDER_CU_SEQLENS_K, params->cu_seqlens_k.data, "cu_seqlens_k");
  check_pointer(what, kernel, order, SEL_ORDER_OFFSETS, (void *)offsets, "Offsets");
  check_pointer(what, kernel, order, SEL_ORDER_TOKENS, (void *)tokens, "Tokens");
  check_packed_strides(what, kernel, order, SEL_ORDER_STRIDE_IS, &params->block_idx, "block_idx");
  check_packed_strides(what, kernel, order, SEL_ORDER_STRIDE_CS, &params->block_cnt, "block_cnt");
  check_int(what, kernel, order, SEL_ORDER_STRIDE_OFFSETS, stride_offsets, "stride_offsets");
  CHECK_MSG(arg_i64(order, SEL_ORDER_STRIDE_TOKENS) == stride_tokens, "%s: %s stride_tokens %lld, expected %lld",
            what, kernel, (long long)arg_i64(order, SEL_ORDER_STRIDE_TOKENS), (long long)stride_tokens);
  check_int(what, kernel, order, SEL_ORDER_NUM_SEQS, num_seqs, "num_seqs");
  check_int(what, kernel, order, SEL_ORDER_TOTAL_Q, s->total_q, "total_q");
  check_int(what, kernel, order, SEL_ORDER_TOTAL_K, s->total_k, "total_k");
  check_int(what, kernel, order, SEL_ORDER_MAX_SEQLEN_K, max_seqlen_k, "max_seqlen_k");
  check_int(what, kernel, order, SEL_ORDER_BLOCK_SIZE, s->block_size, "block_size");
  check_int(what, kernel, order, SEL_ORDER_NUM_SLOTS, s->slots, "num_slots");
  CHECK_MSG((arg_i32(order, SEL_ORDER_FLAGS) & ~SEL_FLAG_WRITE_LSE) == flags, "%s: %s flags %#x, expected %#x", what,
            kernel, (unsigned)arg_i32(order, SEL_ORDER_FLAGS), (unsigned)flags);

  const recorded_launch *dq = &fake.launch_log[SEL_LAUNCH_DQ];
  kernel = "sel_bwd_dq";
  const void *dq_pointers[] = {params->q.data,    params->k.data,  params->v.data,   params->out.data,
                               params->dout.data, params->lse.data, params->dq.data, (void *)delta,
                               params->cu_seqlens_q.data, params->cu_seqlens_k.data, params->block_idx.data,
                               params->block_cnt.data, (void *)compact};
  static const char *const dq_pointer_names[] = {"q", "k", "v", "out", "dout", "lse", "dq", "Delta",
                                                 "cu_seqlens_q", "cu_seqlens_k", "block_idx", "block_cnt",
                                                 "Compact"};
  for (int i = 0; i < 13; i++) check_pointer(what, kernel, dq, SEL_DQ_Q + i, dq_pointers[i], dq_pointer_names[i]);
  const aotk_tensor *dq_tensors[] = {&params->q,  &params->k,   &params->v,         &params->out,      &params->dout,
                                     &params->dq, &params->lse, &params->block_idx, &params->block_cnt};
  static const char *const dq_tensor_names[] = {"q", "k", "v", "out", "dout", "dq", "lse", "block_idx", "block_cnt"};
  for (int t = 0; t < 9; t++) {
    check_packed_strides(what, kernel, dq, SEL_DQ_STRIDE_QS + 2 * t, dq_tensors[t], dq_tensor_names[t]);
  }
  check_int(what, kernel, dq, SEL_DQ_NUM_SEQS, num_seqs, "num_seqs");
  check_int(what, kernel, dq, SEL_DQ_TOTAL_Q, s->total_q, "total_q");
  check_int(what, kernel, dq, SEL_DQ_TOTAL_K, s->total_k, "total_k");
  check_int(what, kernel, dq, SEL_DQ_MAX_SEQLEN_K, max_seqlen_k, "max_seqlen_k");
  check_int(what, kernel, dq, SEL_DQ_HEADS_Q, s->heads_q, "heads_q");
  check_int(what, kernel, dq, SEL_DQ_GROUP_SIZE, group, "group_size");
  check_int(what, kernel, dq, SEL_DQ_GROUP_CHUNKS, dq_chunks, "group_chunks");
  check_int(what, kernel, dq, SEL_DQ_NUM_SLOTS, s->slots, "num_slots");
  CHECK_MSG((arg_i32(dq, SEL_DQ_FLAGS) & ~SEL_FLAG_WRITE_LSE) == flags, "%s: dQ flags %#x, expected %#x", what,
            (unsigned)arg_i32(dq, SEL_DQ_FLAGS), (unsigned)flags);
  check_float(what, kernel, dq, SEL_DQ_QK_SCALE_LOG2, scale / log(2.0), "qk_scale_log2");
  check_float(what, kernel, dq, SEL_DQ_SOFTMAX_SCALE, scale, "softmax_scale");

  const recorded_launch *dkdv = &fake.launch_log[SEL_LAUNCH_DKDV];
  kernel = "sel_bwd_dkdv";
  const void *dkdv_pointers[] = {params->q.data,  params->k.data,  params->v.data,
                                 params->dout.data, params->lse.data, (void *)delta,
                                 params->dk.data, params->dv.data, params->cu_seqlens_q.data,
                                 params->cu_seqlens_k.data, (void *)offsets, (void *)tokens,
                                 (void *)chunks, (void *)partials};
  static const char *const dkdv_pointer_names[] = {"q", "k", "v", "dout", "lse", "Delta", "dk", "dv",
                                                   "cu_seqlens_q", "cu_seqlens_k", "Offsets", "Tokens",
                                                   "Chunks", "Partials"};
  for (int i = 0; i < 14; i++) {
    check_pointer(what, kernel, dkdv, SEL_DKDV_Q + i, dkdv_pointers[i], dkdv_pointer_names[i]);
  }
  const aotk_tensor *dkdv_tensors[] = {&params->q,  &params->k,  &params->v,  &params->dout,
                                       &params->dk, &params->dv, &params->lse};
  static const char *const dkdv_tensor_names[] = {"q", "k", "v", "dout", "dk", "dv", "lse"};
  for (int t = 0; t < 7; t++) {
    check_packed_strides(what, kernel, dkdv, SEL_DKDV_STRIDE_QS + 2 * t, dkdv_tensors[t], dkdv_tensor_names[t]);
  }
  check_int(what, kernel, dkdv, SEL_DKDV_STRIDE_OFFSETS, stride_offsets, "stride_offsets");
  CHECK_MSG(arg_i64(dkdv, SEL_DKDV_STRIDE_TOKENS) == stride_tokens, "%s: dK/dV stride_tokens %lld, expected %lld",
            what, (long long)arg_i64(dkdv, SEL_DKDV_STRIDE_TOKENS), (long long)stride_tokens);
  check_int(what, kernel, dkdv, SEL_DKDV_NUM_SEQS, num_seqs, "num_seqs");
  check_int(what, kernel, dkdv, SEL_DKDV_TOTAL_Q, s->total_q, "total_q");
  check_int(what, kernel, dkdv, SEL_DKDV_TOTAL_K, s->total_k, "total_k");
  check_int(what, kernel, dkdv, SEL_DKDV_MAX_SEQLEN_K, max_seqlen_k, "max_seqlen_k");
  check_int(what, kernel, dkdv, SEL_DKDV_HEADS_Q, s->heads_q, "heads_q");
  check_int(what, kernel, dkdv, SEL_DKDV_GROUP_SIZE, group, "group_size");
  check_int(what, kernel, dkdv, SEL_DKDV_NUM_KEY_TILES, key_tiles, "num_key_tiles");
  check_int(what, kernel, dkdv, SEL_DKDV_CHUNK_TOKENS, chunk_tokens, "chunk_tokens");
  check_int(what, kernel, dkdv, SEL_DKDV_MAX_CHUNKS, max_chunks, "max_chunks");
  check_int(what, kernel, dkdv, SEL_DKDV_PARTIALS_PER_HEAD, sel_partials_per_head(s), "partials_per_head");
  CHECK_MSG((arg_i32(dkdv, SEL_DKDV_FLAGS) & ~SEL_FLAG_WRITE_LSE) == flags, "%s: dK/dV flags %#x, expected %#x", what,
            (unsigned)arg_i32(dkdv, SEL_DKDV_FLAGS), (unsigned)flags);
  check_float(what, kernel, dkdv, SEL_DKDV_QK_SCALE_LOG2, scale / log(2.0), "qk_scale_log2");
  check_float(what, kernel, dkdv, SEL_DKDV_SOFTMAX_SCALE, scale, "softmax_scale");
  if (launches == SEL_BWD_KERNELS) return;

  /* The reduce reads the split lists' records where the first launch wrote them: every argument as
   * there, the flags with SEL_FLAG_DKDV_REDUCE added. */
  const recorded_launch *reduce = &fake.launch_log[SEL_LAUNCH_DKDV_REDUCE];
  for (int i = 0; i < SEL_DKDV_PARAM_COUNT; i++) {
    if (i == SEL_DKDV_FLAGS) continue;
    CHECK_MSG(memcmp(reduce->args[i], dkdv->args[i], sizeof reduce->args[i]) == 0,
              "%s: the dK/dV reduce's argument %d differs from the first launch's", what, i);
  }
  CHECK_MSG((arg_i32(reduce, SEL_DKDV_FLAGS) & ~SEL_FLAG_WRITE_LSE) == (flags | SEL_FLAG_DKDV_REDUCE),
            "%s: the dK/dV reduce's flags %#x, expected %#x", what, (unsigned)arg_i32(reduce, SEL_DKDV_FLAGS),
            (unsigned)(flags | SEL_FLAG_DKDV_REDUCE));
}

/* Every tensor strided differently (all strides multiples of 16 where the kernels need it), so a
 * stride packed into the wrong slot shows: q with padded heads, k heads-major, v with padded rows, lse
 * and block_cnt with padded rows, block_idx heads-major; dk padded, dout heads-major. */
static aotk_sel_params strided_sel_params(sel_shape s, bool bwd) {
  aotk_sel_params params = sel_params_for(s, bwd);
  const int64_t dqk = s.head_dim_qk, dv = s.head_dim_v;
  params.q.strides[1] = dqk + 16, params.q.strides[0] = s.heads_q * (dqk + 16) + 32;
  params.k.strides[0] = dqk, params.k.strides[1] = s.total_k * dqk;
  params.v.strides[1] = dv, params.v.strides[0] = s.heads_kv * dv + 48;
  if (params.lse.data != NULL) params.lse.strides[0] = s.heads_q + 3;
  params.block_idx.strides[0] = s.slots, params.block_idx.strides[1] = s.total_q * s.slots + 5;
  if (params.block_cnt.data != NULL) params.block_cnt.strides[0] = s.heads_kv + 7;
  if (bwd) {
    params.dk.strides[1] = dqk + 32, params.dk.strides[0] = s.heads_kv * (dqk + 32) + 64;
    params.dout.strides[0] = dv, params.dout.strides[1] = s.total_q * dv;
  }
  return params;
}

static const gpu sel_sm90 = {90, SHARED_SM90, 90, 0};

static void test_sel_launch_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  sel_shape s = default_sel_shape;
  aotk_sel_params params = strided_sel_params(s, true);
  check_sel_fwd("bf16 d128 bs64 GQA 4, varlen, strided", &params, &s, &sel_sm90);
  CHECK_MSG(fake.loaded_images == 1 && fake.loaded_elf == 1, "loaded %d images", fake.loaded_images);
  check_sel_bwd("bf16 d128 bs64 GQA 4, varlen, strided", &params, &s, &sel_sm90, FAKE_WORKSPACE);
  CHECK_MSG(fake.loaded_images == 1 + SEL_BWD_KERNELS, "loaded %d images, expected 1 + %d", fake.loaded_images,
            (int)SEL_BWD_KERNELS);
  /* Loaded once: the same calls again load nothing. */
  check_sel_fwd("the same again", &params, &s, &sel_sm90);
  check_sel_bwd("the same again", &params, &s, &sel_sm90, byte_offset(FAKE_WORKSPACE, 4096));
  CHECK_MSG(fake.loaded_images == 1 + SEL_BWD_KERNELS && fake.calls[CALL_cuLibraryLoadData] == 0, "loaded %d images",
            fake.loaded_images);

  s.dtype = AOTK_DTYPE_FLOAT16, s.num_seqs = 0, s.with_lse = false, s.with_block_cnt = false;
  s.head_dim_qk = s.head_dim_v = 64, s.block_size = 32, s.total_q = 1000, s.total_k = 4097, s.slots = 3;
  params = strided_sel_params(s, false);
  params.softmax_scale = 0.3f;
  check_sel_fwd("fp16 d64 bs32, one sequence, no lse, no block_cnt, explicit scale", &params, &s, &sel_sm90);
  params = strided_sel_params(s, true);
  check_sel_bwd("fp16 d64 bs32, one sequence, no block_cnt", &params, &s, &sel_sm90, FAKE_WORKSPACE);

  /* Groups of 17 (one 64-row tile), 64 (one) and 65 and 128 (two), head dims (192, 128), block size 128. */
  static const int64_t groups[] = {17, 64, 65, 128};
  for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
    s = default_sel_shape;
    s.head_dim_qk = 192, s.block_size = 128, s.heads_kv = 2, s.heads_q = 2 * groups[i], s.slots = 5;
    s.total_q = 77, s.total_k = 1000, s.num_seqs = 2, s.max_seqlen_k = 999;
    char what[96];
    snprintf(what, sizeof what, "bf16 d192v128 bs128, a group of %lld", (long long)groups[i]);
    params = strided_sel_params(s, true);
    check_sel_fwd(what, &params, &s, &sel_sm90);
    check_sel_bwd(what, &params, &s, &sel_sm90, FAKE_WORKSPACE);
  }

  /* The dK/dV split of long token lists, worked through (the values by hand, then the launches): chunks
   * of the larger of ceil(4096 / group) tokens and 1/512 of the index's entries, capped at 2^29 - 1; at
   * most ceil(total_q / chunk) of them, 16, and what keeps the grid valid; 2 * total_q * slots / chunk + 1
   * partial records per kv head when some list can be split. */
  static const struct {
    const char *what;
    int64_t heads_q, heads_kv, total_q, slots, num_seqs;
    int32_t max_seqlen_k;
    int64_t head_dim, chunk_tokens, max_chunks, partials_per_head;
  } splits[] = {
      {"GQA 4, 300 tokens: chunks of 1024 tokens (4096 pairs), one per list", 8, 2, 300, 16, 3, 250, 128, 1024, 1, 0},
      {"MHA, 20000 tokens: chunks of 5000 tokens (1/512 of 2.56M entries), 4 per list", 8, 8, 20000, 16, 3, 250, 128,
       5000, 4, 129},
      {"MQA 128, 1000 tokens of 8 slots: chunks of 32 tokens, 16 per list, not 32", 128, 1, 1000, 8, 3, 250, 128, 32,
       16, 501},
      {"21 sequences of up to 32 * 51130563 keys: 2^30 - 1 key tiles of 32, so 2 chunks per list, not 6", 8, 1, 3000,
       16, 21, 32 * 51130563, 128, 512, 2, 188},
      {"46340 tokens, kv heads and slots: chunks of 2^29 - 1 tokens, not 1/512 of 46340^3", 46340, 46340, 46340, 46340,
       0, 0, 64, INT32_MAX / 4, 1, 0},
  };
  for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
    s = default_sel_shape;
    s.heads_q = splits[i].heads_q, s.heads_kv = splits[i].heads_kv, s.total_q = splits[i].total_q;
    s.slots = splits[i].slots, s.num_seqs = splits[i].num_seqs, s.max_seqlen_k = splits[i].max_seqlen_k;
    s.head_dim_qk = s.head_dim_v = splits[i].head_dim;
    CHECK_MSG(sel_chunk_tokens(&s) == splits[i].chunk_tokens && sel_max_chunks(&s) == splits[i].max_chunks &&
                  sel_partials_per_head(&s) == splits[i].partials_per_head,
              "%s: the test's formulas give chunks of %lld, %lld per list, %lld records", splits[i].what,
              (long long)sel_chunk_tokens(&s), (long long)sel_max_chunks(&s), (long long)sel_partials_per_head(&s));
    params = sel_params_for(s, true);
    check_sel_bwd(splits[i].what, &params, &s, &sel_sm90, FAKE_WORKSPACE);
  }
  uninstall_fake_gpu();
}

/* The choice on every target: for each dtype, head dims, block size and group size (either side of the
 * tuning bound and of a tile's 64 rows, multiples of 16 and not), the forward and the backward run the
 * rows the catalog's rule picks, with the tile and grid the header's formulas give. */
static void test_sel_tuning_choice(void) {
  static const gpu gpus[] = {{90, SHARED_SM90, 90, 0}, {80, SHARED_SM80, 80, 0}, {86, SHARED_SM86, 80, 0},
                             {120, SHARED_SM120, 80, 1}};
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};
  static const int64_t dims[][2] = {{64, 64}, {128, 128}, {192, 128}};
  static const int32_t block_sizes[] = {32, 64, 128};
  static const int64_t groups[] = {1, 2, 16, 17, 48, 64, 65};
  int calls = 0, split = 0;
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (size_t d = 0; d < 2; d++)
      for (size_t h = 0; h < 3; h++)
        for (size_t b = 0; b < 3; b++)
          for (size_t m = 0; m < sizeof groups / sizeof groups[0]; m++) {
            sel_shape s = default_sel_shape;
            s.dtype = dtypes[d], s.head_dim_qk = dims[h][0], s.head_dim_v = dims[h][1];
            s.block_size = block_sizes[b], s.heads_kv = 2, s.heads_q = 2 * groups[m];
            s.num_seqs = (int64_t)(m % 3), s.total_q = 100 + 13 * (int64_t)m, s.max_seqlen_k = 300;
            char what[128];
            snprintf(what, sizeof what, "cc %d %s d%lldv%lld bs%d group %lld", gpus[g].compute_capability,
                     dtypes[d] == AOTK_DTYPE_FLOAT16 ? "fp16" : "bf16", (long long)dims[h][0], (long long)dims[h][1],
                     block_sizes[b], (long long)groups[m]);
            aotk_sel_params params = sel_params_for(s, true);
            check_sel_fwd(what, &params, &s, &gpus[g]);
            check_sel_bwd(what, &params, &s, &gpus[g], FAKE_WORKSPACE);
            calls += 2;
            split += sel_max_chunks(&s) > 1;
          }
  }
  /* Groups of 48 and more make chunks of at most 86 tokens, fewer than their problems' 152 to 178 tokens:
   * those split the lists; the smaller groups' chunks, 241 tokens and more, never do. */
  CHECK_MSG(split > 0 && split < calls / 2, "%d of %d backward calls split the dK/dV lists", split, calls / 2);
  printf("    %d queries and calls, %d backward calls with split dK/dV lists\n", calls, split);
  uninstall_fake_gpu();
}

/* A GPU without the shared memory a chosen kernel needs: the call and the query refuse, naming the
 * kernel, and nothing is loaded or launched (the backward chooses all seven kernels before it loads any);
 * with exactly enough, the call runs. */
static void test_sel_too_little_shared_memory(void) {
  for (int bwd = 0; bwd <= 1; bwd++) {
    sel_shape s = default_sel_shape;
    s.heads_q = 2 * 17; /* a 64-row tile */
    aotk_sel_params params = sel_params_for(s, bwd);
    const aotk_op op = bwd ? AOTK_OP_SEL_BWD : AOTK_OP_SEL_FWD;
    /* The hungriest kernel of the call (the index passes need little). */
    const int families[] = {AOTK__FAMILY_SEL_FWD, AOTK__FAMILY_SEL_BWD_DQ, AOTK__FAMILY_SEL_BWD_DKDV};
    const aotk__kernel_entry *hungriest = NULL;
    for (int f = bwd; f < (bwd ? 3 : 1); f++) {
      const aotk__kernel_entry *e = expected_sel_row(families[f], 90, &s);
      CHECK(e != NULL);
      if (e != NULL && (hungriest == NULL || e->shared_bytes > hungriest->shared_bytes)) hungriest = e;
    }
    if (hungriest == NULL) return;
    install_fake_gpu(90, hungriest->shared_bytes);
    aotk_status status = run_sel_op(op, &params);
    CHECK_MSG(status == AOTK_OK, "%s with exactly %d bytes: %s (%s)", sel_op_function(op), hungriest->shared_bytes,
              aotk_status_name(status), aotk_last_error());
    CHECK(fake.launches == (bwd ? sel_bwd_launches(&s) : 1));
    install_fake_gpu(90, hungriest->shared_bytes - 1);
    status = run_sel_op(op, &params);
    CHECK_MSG(status == AOTK_ERROR_UNSUPPORTED_ARCH, "%s with %d bytes: %s", sel_op_function(op),
              hungriest->shared_bytes - 1, aotk_status_name(status));
    CHECK_MSG(message_mentions(hungriest->name), "the message \"%s\" does not name %s", aotk_last_error(),
              hungriest->name);
    CHECK(fake.launches == 0 && fake.calls[CALL_cuLibraryLoadData] == 0);
    aotk_kernel_info info;
    poison_info(&info);
    CHECK(aotk_sel_query(op, &params, &info) == AOTK_ERROR_UNSUPPORTED_ARCH);
    CHECK(info_untouched(&info));
  }
  uninstall_fake_gpu();
}

/* Driver failures: no context, an old GPU, a failed load (the backward loads its seven kernels before it
 * launches one, so nothing runs), a failed launch (only the kernels before it were enqueued). */
static void test_sel_faults(void) {
  aotk_sel_params fwd_params = valid_sel_params(), bwd_params = valid_sel_bwd_params();
  aotk_kernel_info info;

  install_fake_gpu(90, SHARED_SM90);
  fake.has_context = false;
  CHECK(aotk_sel_fwd(&fwd_params, FAKE_STREAM) == AOTK_ERROR_NO_CONTEXT);
  CHECK(aotk_sel_bwd(&bwd_params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM) == AOTK_ERROR_NO_CONTEXT);
  CHECK(aotk_sel_check_indices(&fwd_params, FAKE_WORKSPACE, 16, FAKE_STREAM) == AOTK_ERROR_NO_CONTEXT);
  poison_info(&info);
  CHECK(aotk_sel_query(AOTK_OP_SEL_BWD, &bwd_params, &info) == AOTK_ERROR_NO_CONTEXT && info_untouched(&info));
  CHECK(fake.launches == 0 && fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuMemcpyHtoD] == 0);

  install_fake_gpu(75, 64 * 1024);
  CHECK(aotk_sel_fwd(&fwd_params, FAKE_STREAM) == AOTK_ERROR_UNSUPPORTED_ARCH && message_mentions("sm_75"));
  CHECK(aotk_sel_bwd(&bwd_params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM) == AOTK_ERROR_UNSUPPORTED_ARCH);
  CHECK(aotk_sel_check_indices(&fwd_params, FAKE_WORKSPACE, 16, FAKE_STREAM) == AOTK_ERROR_UNSUPPORTED_ARCH);
  poison_info(&info);
  CHECK(aotk_sel_query(AOTK_OP_SEL_FWD, &fwd_params, &info) == AOTK_ERROR_UNSUPPORTED_ARCH && info_untouched(&info));
  CHECK(fake.launches == 0 && fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuMemcpyHtoD] == 0);

  enum { CUDA_ERROR_NO_BINARY_FOR_GPU = 209 };
  for (int n = 1; n <= SEL_BWD_KERNELS; n++) {
    install_fake_gpu(90, SHARED_SM90);
    fake.library_load_result = CUDA_ERROR_NO_BINARY_FOR_GPU;
    fake.fail_library_load_call = n;
    aotk_status status = aotk_sel_bwd(&bwd_params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_CUDA && aotk_last_cuda_result() == CUDA_ERROR_NO_BINARY_FOR_GPU,
              "load %d of the backward fails: %s (%s)", n, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(fake.launches == 0, "load %d of the backward fails, yet %d kernels were launched", n, fake.launches);
    /* Once the driver recovers, the call goes through. */
    fake.library_load_result = CUDA_SUCCESS;
    CHECK(aotk_sel_bwd(&bwd_params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM) == AOTK_OK);
    CHECK(fake.launches == sel_bwd_launches(&default_sel_shape));
  }
  /* Each launch failing in turn, in a backward of seven launches and in one of eight (a group of 128
   * splits the dK/dV lists: the reduce's launch can fail too). */
  sel_shape split = default_sel_shape;
  split.heads_q = 128, split.heads_kv = 1;
  const sel_shape *launch_shapes[] = {&default_sel_shape, &split};
  for (int k = 0; k < 2; k++) {
    const aotk_sel_params params = sel_params_for(*launch_shapes[k], true);
    const int launches = sel_bwd_launches(launch_shapes[k]);
    CHECK(launches == SEL_BWD_KERNELS + k);
    for (int n = 1; n <= launches; n++) {
      install_fake_gpu(90, SHARED_SM90);
      fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
      fake.fail_launch_call = n;
      aotk_status status = aotk_sel_bwd(&params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA && aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY,
                "launch %d of %d of the backward fails: %s", n, launches, aotk_status_name(status));
      CHECK_MSG(message_mentions("cuLaunchKernel(sel_"), "launch %d fails: the message \"%s\" names no kernel", n,
                aotk_last_error());
      CHECK_MSG(fake.launches == n - 1 && fake.calls[CALL_cuLaunchKernel] == n,
                "launch %d of %d of the backward fails: %d launched, %d tried", n, launches, fake.launches,
                fake.calls[CALL_cuLaunchKernel]);
    }
  }
  install_fake_gpu(90, SHARED_SM90);
  fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
  CHECK(aotk_sel_fwd(&fwd_params, FAKE_STREAM) == AOTK_ERROR_CUDA && fake.launches == 0);
  uninstall_fake_gpu();
}

/* The index check through the fake: it orders its result word after the stream's earlier work, sets it,
 * runs one program per (token, kv head), waits, and reads the word back: AOTK_OK when the kernel left it
 * alone, else AOTK_ERROR_INVALID_INDICES naming the (token, kv head, slot) the kernel's code encodes
 * (kernels/sel_attn.py: ((token * heads_kv + head) * 2^24 + slot) * 4 + kind). */
static int64_t index_problem_code(int64_t token, int64_t head, int64_t heads_kv, int64_t slot, int64_t kind) {
  return ((token * heads_kv + head) * ((int64_t)1 << 24) + slot) * 4 + kind;
}

static void test_sel_check_indices(void) {
  install_fake_gpu(90, SHARED_SM90);
  for (int variant = 0; variant < 2; variant++) {
    sel_shape s = default_sel_shape;
    if (variant == 1) s.num_seqs = 0, s.with_block_cnt = false, s.with_lse = false, s.block_size = 128;
    aotk_sel_params params = strided_sel_params(s, false);
    void *workspace = byte_offset(FAKE_WORKSPACE, 32);
    reset_calls();
    reset_launch_log();
    fake.sequence_length = 0;
    fake.device_word = 0;
    aotk_status status = aotk_sel_check_indices(&params, workspace, 16, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "variant %d: %s (%s)", variant, aotk_status_name(status), aotk_last_error());
    CHECK(aotk_last_error()[0] == '\0');
    static const int expected_sequence[] = {CALL_cuStreamSynchronize, CALL_cuMemcpyHtoD, CALL_cuCtxSynchronize,
                                            CALL_cuLaunchKernel,      CALL_cuStreamSynchronize, CALL_cuMemcpyDtoH};
    bool same = fake.sequence_length == 6;
    for (int i = 0; same && i < 6; i++) same = fake.sequence[i] == expected_sequence[i];
    CHECK_MSG(same, "variant %d: the check called the driver out of order (%s)", variant, called_functions());
    CHECK(fake.synchronized_stream == (CUstream)FAKE_STREAM);
    CHECK_MSG(fake.written_address == (CUdeviceptr)(uintptr_t)workspace && fake.written_bytes == 8 &&
                  fake.read_address == (CUdeviceptr)(uintptr_t)workspace && fake.read_bytes == 8,
              "variant %d: the result word is not the workspace's first 8 bytes", variant);
    CHECK_MSG(fake.device_word == INT64_MAX, "variant %d: the result word starts at %lld, not INT64_MAX", variant,
              (long long)fake.device_word);
    if (fake.logged_launches != 1) continue;
    const recorded_launch *launch = &fake.launch_log[0];
    const aotk__kernel_entry *row = expected_sel_row(AOTK__FAMILY_SEL_CHECK_INDICES, 90, &s);
    CHECK(row != NULL);
    if (row == NULL) continue;
    const char *what = variant == 0 ? "varlen, block_cnt" : "one sequence";
    const char *kernel = "sel_check_indices";
    check_sel_launch_shape(what, launch, KERNEL_SEL_CHECK_INDICES, row, s.total_q * s.heads_kv,
                           SEL_CHECK_GLOBAL_SCRATCH);
    check_pointer(what, kernel, launch, SEL_CHECK_BLOCK_IDX, params.block_idx.data, "block_idx");
    check_pointer(what, kernel, launch, SEL_CHECK_BLOCK_CNT, params.block_cnt.data, "block_cnt");
    check_pointer(what, kernel, launch, SEL_CHECK_CU_SEQLENS_Q, params.cu_seqlens_q.data, "cu_seqlens_q");
    check_pointer(what, kernel, launch, SEL_CHECK_CU_SEQLENS_K, params.cu_seqlens_k.data, "cu_seqlens_k");
    check_pointer(what, kernel, launch, SEL_CHECK_RESULT, workspace, "Result");
    check_packed_strides(what, kernel, launch, SEL_CHECK_STRIDE_IS, &params.block_idx, "block_idx");
    check_packed_strides(what, kernel, launch, SEL_CHECK_STRIDE_CS, &params.block_cnt, "block_cnt");
    check_int(what, kernel, launch, SEL_CHECK_NUM_SEQS, sel_num_seqs(&s), "num_seqs");
    check_int(what, kernel, launch, SEL_CHECK_TOTAL_Q, s.total_q, "total_q");
    check_int(what, kernel, launch, SEL_CHECK_TOTAL_K, s.total_k, "total_k");
    check_int(what, kernel, launch, SEL_CHECK_MAX_SEQLEN_K, sel_max_seqlen_k(&s), "max_seqlen_k");
    check_int(what, kernel, launch, SEL_CHECK_HEADS_KV, s.heads_kv, "heads_kv");
    check_int(what, kernel, launch, SEL_CHECK_BLOCK_SIZE, s.block_size, "block_size");
    check_int(what, kernel, launch, SEL_CHECK_NUM_SLOTS, s.slots, "num_slots");
    CHECK_MSG((arg_i32(launch, SEL_CHECK_FLAGS) & ~SEL_FLAG_WRITE_LSE) == expected_sel_flags(&params),
              "%s: flags %#x", what, (unsigned)arg_i32(launch, SEL_CHECK_FLAGS));
  }

  /* What the kernel finds, as the caller reads it. */
  aotk_sel_params params = valid_sel_params();
  const int64_t heads_kv = default_sel_shape.heads_kv;
  const struct {
    int64_t code;
    const char *mentions[2];
  } problems[] = {
      {index_problem_code(7, 1, heads_kv, 3, 2), {"block_idx[token 7, kv head 1, slot 3]", "twice"}},
      {index_problem_code(299, 0, heads_kv, 15, 1), {"block_idx[token 299, kv head 0, slot 15]", "out of range"}},
      {index_problem_code(0, 1, heads_kv, 0, 3), {"block_cnt[token 0, kv head 1]", "16 slots"}},
      {index_problem_code(0, 0, heads_kv, 0, 1), {"block_idx[token 0, kv head 0, slot 0]", "out of range"}},
  };
  for (size_t i = 0; i < sizeof problems / sizeof problems[0]; i++) {
    fake.check_code = problems[i].code;
    aotk_status status = aotk_sel_check_indices(&params, FAKE_WORKSPACE, 16, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_INVALID_INDICES, "code %lld: %s", (long long)problems[i].code,
              aotk_status_name(status));
    for (int m = 0; m < 2; m++) {
      CHECK_MSG(message_mentions(problems[i].mentions[m]), "code %lld: the message \"%s\" does not mention \"%s\"",
                (long long)problems[i].code, aotk_last_error(), problems[i].mentions[m]);
    }
  }
  fake.check_code = 0;
  CHECK(aotk_sel_check_indices(&params, FAKE_WORKSPACE, 16, FAKE_STREAM) == AOTK_OK);

  /* A failed copy is the driver's failure, not a verdict on the indices. */
  fake.memcpy_result = CUDA_ERROR_INVALID_VALUE;
  aotk_status status = aotk_sel_check_indices(&params, FAKE_WORKSPACE, 16, FAKE_STREAM);
  CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuMemcpyHtoD"), "a failed copy: %s (%s)",
            aotk_status_name(status), aotk_last_error());
  uninstall_fake_gpu();
}

/* aotk_preload loads the selection kernels too: after it, no selection call loads an image. */
static void test_sel_after_preload(void) {
  static const gpu gpus[] = {{90, SHARED_SM90, 90, 0}, {86, SHARED_SM86, 80, 0}, {120, SHARED_SM120, 80, 1},
                             {90, 100 * 1024, 90, 0}};
  sel_shape s = default_sel_shape;
  s.head_dim_qk = s.head_dim_v = 64; /* kernels that fit the smallest of these GPUs */
  const aotk_sel_params fwd_params = sel_params_for(s, false), bwd_params = sel_params_for(s, true);
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    aotk_status status = aotk_preload();
    CHECK_MSG(status == AOTK_OK, "cc %d: %s (%s)", gpus[g].compute_capability, aotk_status_name(status),
              aotk_last_error());
    const int loaded = fake.loaded_images;
    CHECK(aotk_sel_fwd(&fwd_params, FAKE_STREAM) == AOTK_OK);
    CHECK(aotk_sel_bwd(&bwd_params, FAKE_WORKSPACE, sel_workspace_bytes(&s), FAKE_STREAM) == AOTK_OK);
    CHECK(aotk_sel_check_indices(&fwd_params, FAKE_WORKSPACE, 16, FAKE_STREAM) == AOTK_OK);
    CHECK_MSG(fake.launches == 1 + sel_bwd_launches(&s) + 1, "cc %d: %d launches, expected 1 + %d + 1",
              gpus[g].compute_capability, fake.launches, sel_bwd_launches(&s));
    CHECK_MSG(fake.loaded_images == loaded, "cc %d: a selection call after preload loaded %d images",
              gpus[g].compute_capability, fake.loaded_images - loaded);
  }
  uninstall_fake_gpu();
}

/* ---- decoding and the merge (0.4) ----------------------------------------------------------- */

/* A decoding problem (include/aotk.h, aotk_decode_params): seqlen_q new tokens per request against a
 * cache of `capacity` keys per request, contiguous ([batch, capacity, heads_kv, d]) or, with page_size
 * > 0, paged ([num_pages, page_size, heads_kv, d], and a block table [batch, capacity / page_size]).
 * With total_q > 0 the queries are packed (cu_seqlens_q [batch + 1]): q [total_q, heads_q, d], out
 * [total_q, heads_q, d_v], lse [heads_q, total_q], and seqlen_q is max_seqlen_q. */
typedef struct decode_shape {
  aotk_dtype dtype;
  int64_t batch, seqlen_q, heads_q, heads_kv, head_dim_qk, head_dim_v;
  int64_t capacity, page_size, num_pages;
  bool with_lse;
  int64_t total_q; /* 0: dense q [batch, seqlen_q, heads_q, d] */
} decode_shape;

/* GQA (group 4), two new tokens, lse written. */
static const decode_shape default_decode_shape = {AOTK_DTYPE_BFLOAT16, 3, 2, 8, 2, 128, 128, 1000, 0, 0, true, 0};
/* The same with 64 pages of 16 keys per request, out of a pool of 200 pages. */
static const decode_shape default_paged_shape = {AOTK_DTYPE_BFLOAT16, 3, 2, 8, 2, 128, 128, 1024, 16, 200, true, 0};
/* Packed: 3 requests' 100 query tokens, at most 40 each, over the default caches: G 4 x 40 = 160 rows per
 * (request, kv head), the 64-row tile in 3 chunks. */
static const decode_shape default_varlen_shape = {AOTK_DTYPE_BFLOAT16, 3, 40, 8, 2, 128, 128, 1000, 0, 0, true, 100};
static const decode_shape default_varlen_paged_shape = {AOTK_DTYPE_BFLOAT16, 3, 40, 8, 2, 128, 128, 1024, 16, 200,
                                                        true, 100};

/* Contiguous tensors at the fake addresses. */
static aotk_decode_params decode_params_for(decode_shape s) {
  aotk_decode_params params = AOTK_DECODE_PARAMS_INIT;
  const bool paged = s.page_size > 0;
  const int64_t cache_rows = paged ? s.num_pages : s.batch, row_keys = paged ? s.page_size : s.capacity;
  params.q = aotk_tensor_4d(FAKE_Q, s.dtype, s.batch, s.seqlen_q, s.heads_q, s.head_dim_qk);
  params.k_cache = aotk_tensor_4d(FAKE_K, s.dtype, cache_rows, row_keys, s.heads_kv, s.head_dim_qk);
  params.v_cache = aotk_tensor_4d(FAKE_V, s.dtype, cache_rows, row_keys, s.heads_kv, s.head_dim_v);
  if (paged) {
    params.block_table = aotk_tensor_2d(FAKE_BLOCK_TABLE, AOTK_DTYPE_INT32, s.batch, s.capacity / s.page_size);
  }
  params.cache_seqlens = aotk_tensor_1d(FAKE_CACHE_SEQLENS, AOTK_DTYPE_INT32, s.batch);
  params.out = aotk_tensor_4d(FAKE_OUT, s.dtype, s.batch, s.seqlen_q, s.heads_q, s.head_dim_v);
  if (s.with_lse) params.lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, s.batch, s.heads_q, s.seqlen_q);
  if (s.total_q > 0) {
    params.q = aotk_tensor_3d(FAKE_Q, s.dtype, s.total_q, s.heads_q, s.head_dim_qk);
    params.out = aotk_tensor_3d(FAKE_OUT, s.dtype, s.total_q, s.heads_q, s.head_dim_v);
    if (s.with_lse) params.lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, s.heads_q, s.total_q);
    params.cu_seqlens_q = aotk_tensor_1d(FAKE_CU_SEQLENS_Q, AOTK_DTYPE_INT32, s.batch + 1);
    params.max_seqlen_q = (int32_t)s.seqlen_q;
  }
  return params;
}

static aotk_decode_params valid_decode_params(void) { return decode_params_for(default_decode_shape); }

static int64_t decode_group(const decode_shape *s) { return s->heads_q / s->heads_kv; }
static int64_t round_up_to(int64_t value, int64_t multiple) { return ceil_div(value, multiple) * multiple; }

/* The split-KV workspace (include/aotk.h, aotk_attn_decode): fp32 partial outputs [splits, batch,
 * seqlen_q, heads_q, round_up(head_dim_v, 16)], then the partial LSEs [splits, batch, heads_q, seqlen_q],
 * each part rounded up to 16 bytes; nothing without a split. */
static int64_t decode_rows(const decode_shape *s) { return s->batch * s->seqlen_q * s->heads_q; }
static int64_t decode_partial_row(const decode_shape *s) { return round_up_to(s->head_dim_v, 16); }
static size_t decode_out_partial_bytes(const decode_shape *s, int64_t splits) {
  return round_up_16((size_t)(4 * splits * decode_rows(s) * decode_partial_row(s)));
}
static size_t decode_lse_partial_bytes(const decode_shape *s, int64_t splits) {
  return round_up_16((size_t)(4 * splits * decode_rows(s)));
}
static size_t decode_workspace_bytes(const decode_shape *s, int64_t splits) {
  return splits > 1 ? decode_out_partial_bytes(s, splits) + decode_lse_partial_bytes(s, splits) : 0;
}

/* Every tensor laid out differently, every stride distinct and a multiple of 16 elements (so the
 * compiled kernels, which assume that, run): q heads-major, the caches with padded rows (k) or
 * heads-major (v), out with padded heads, lse and the block table with padded rows. Head dims that are
 * not multiples of 16 get rows padded to one. */
static aotk_decode_params strided_decode_params(decode_shape s) {
  aotk_decode_params params = decode_params_for(s);
  const bool paged = s.page_size > 0;
  const int64_t row_keys = paged ? s.page_size : s.capacity;
  const int64_t dqk = round_up_to(s.head_dim_qk, 16), dv = round_up_to(s.head_dim_v, 16);
  aotk_tensor *q = &params.q, *k = &params.k_cache, *v = &params.v_cache, *out = &params.out;
  k->strides[2] = dqk, k->strides[1] = s.heads_kv * dqk + 48, k->strides[0] = row_keys * k->strides[1] + 64;
  v->strides[2] = row_keys * dv, v->strides[1] = dv, v->strides[0] = s.heads_kv * row_keys * dv + 80;
  if (s.total_q > 0) { /* packed: q and out with padded heads and a gap between tokens, lse with padded rows */
    q->strides[1] = dqk + 16, q->strides[0] = s.heads_q * (dqk + 16) + 32;
    out->strides[1] = dv + 32, out->strides[0] = s.heads_q * (dv + 32) + 48;
    if (s.with_lse) params.lse.strides[0] = s.total_q + 5;
  } else {
    q->strides[2] = s.seqlen_q * dqk, q->strides[1] = dqk, q->strides[0] = s.heads_q * s.seqlen_q * dqk + 32;
    out->strides[2] = dv + 16, out->strides[1] = s.heads_q * (dv + 16);
    out->strides[0] = s.seqlen_q * out->strides[1] + 96;
    if (s.with_lse) params.lse.strides[1] = s.seqlen_q + 5, params.lse.strides[0] = s.heads_q * (s.seqlen_q + 5) + 7;
  }
  if (paged) params.block_table.strides[0] = s.capacity / s.page_size + 3;
  return params;
}

/* Appending (include/aotk.h, k_new and v_new): seqlen_new new keys and values per request,
 * [batch, seqlen_new, heads_kv, head_dim], contiguous at their own fake addresses. */
static void add_new_kv(aotk_decode_params *params, const decode_shape *s, int64_t seqlen_new) {
  params->k_new = aotk_tensor_4d(FAKE_K_NEW, s->dtype, s->batch, seqlen_new, s->heads_kv, s->head_dim_qk);
  params->v_new = aotk_tensor_4d(FAKE_V_NEW, s->dtype, s->batch, seqlen_new, s->heads_kv, s->head_dim_v);
}

/* The same laid out differently from each other and from the caches, every stride distinct and a
 * multiple of 16 elements: k_new with padded heads and a gap between requests, v_new heads-major. */
static void add_strided_new_kv(aotk_decode_params *params, const decode_shape *s, int64_t seqlen_new) {
  add_new_kv(params, s, seqlen_new);
  const int64_t dqk = round_up_to(s->head_dim_qk, 16), dv = round_up_to(s->head_dim_v, 16);
  aotk_tensor *k_new = &params->k_new, *v_new = &params->v_new;
  k_new->strides[2] = dqk + 32, k_new->strides[1] = s->heads_kv * (dqk + 32);
  k_new->strides[0] = seqlen_new * k_new->strides[1] + 112;
  v_new->strides[2] = seqlen_new * (dv + 16), v_new->strides[1] = dv + 16;
  v_new->strides[0] = s->heads_kv * seqlen_new * (dv + 16) + 144;
}

/* The one merge row for a target and alignment (the family has no dtype or head-dim axis). */
static const aotk__kernel_entry *merge_row_for(int arch, int aligned) {
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (e->family == AOTK__FAMILY_ATTN_MERGE && e->arch == arch && e->aligned == aligned) return e;
  }
  return NULL;
}

/* The merge's typed pointer slots (fp32, fp16, bf16) and the flags naming the partials' and output's. */
static int merge_slot(aotk_dtype dtype) {
  return dtype == AOTK_DTYPE_FLOAT16 ? 1 : dtype == AOTK_DTYPE_BFLOAT16 ? 2 : 0;
}
static int32_t merge_dtype_flags(aotk_dtype partial_dtype, aotk_dtype out_dtype) {
  return (partial_dtype == AOTK_DTYPE_FLOAT16 ? MERGE_FLAG_PARTIAL_FP16 : 0) |
         (partial_dtype == AOTK_DTYPE_BFLOAT16 ? MERGE_FLAG_PARTIAL_BF16 : 0) |
         (out_dtype == AOTK_DTYPE_FLOAT16 ? MERGE_FLAG_OUT_FP16 : 0) |
         (out_dtype == AOTK_DTYPE_BFLOAT16 ? MERGE_FLAG_OUT_BF16 : 0);
}

static void check_i64(const char *what, const char *kernel, const recorded_launch *launch, int index, int64_t expected,
                      const char *name) {
  CHECK_MSG(arg_i64(launch, index) == expected, "%s: %s's %s is %lld, expected %lld", what, kernel, name,
            (long long)arg_i64(launch, index), (long long)expected);
}

/* The appending kernel's launch (include/aotk.h, k_new and v_new; kernels/attn_decode.py,
 * attn_cache_append): the row of the problem's dtype and compiled head dims, one program per (request,
 * new token); the new keys and values, the caches, the block table (NULL when contiguous) and the lengths
 * before the step; k_new's and v_new's (batch, token, head) strides, the caches' (page or request, row,
 * head) strides, the block table's batch stride (0 when contiguous); seqlen_new, heads_kv, the capacity,
 * the page size (0 when contiguous), the head dims over 8, and of the flags only PAGED. */
static void check_append_launch(const char *what, const recorded_launch *launch, const aotk_decode_params *params,
                                const decode_shape *s, const aotk__kernel_entry *row, int64_t capacity) {
  const char *kernel = "attn_cache_append";
  const bool paged = params->block_table.data != NULL;
  const int64_t seqlen_new = params->k_new.shape[1];
  check_sel_launch_shape(what, launch, KERNEL_ATTN_CACHE_APPEND, row, s->batch * seqlen_new, APPEND_GLOBAL_SCRATCH);
  if (launch->kernel != KERNEL_ATTN_CACHE_APPEND) return;
  check_pointer(what, kernel, launch, APPEND_K_NEW, params->k_new.data, "k_new");
  check_pointer(what, kernel, launch, APPEND_V_NEW, params->v_new.data, "v_new");
  check_pointer(what, kernel, launch, APPEND_K, params->k_cache.data, "k_cache");
  check_pointer(what, kernel, launch, APPEND_V, params->v_cache.data, "v_cache");
  check_pointer(what, kernel, launch, APPEND_BLOCK_TABLE, paged ? params->block_table.data : NULL, "block_table");
  check_pointer(what, kernel, launch, APPEND_CACHE_SEQLENS, params->cache_seqlens.data, "cache_seqlens");
  const aotk_tensor *tensors[4] = {&params->k_new, &params->v_new, &params->k_cache, &params->v_cache};
  static const char *const names[4] = {"k_new", "v_new", "k_cache", "v_cache"};
  for (int t = 0; t < 4; t++) {
    for (int d = 0; d < 3; d++) {
      char name[32];
      snprintf(name, sizeof name, "%s.strides[%d]", names[t], d);
      check_i64(what, kernel, launch, APPEND_STRIDE_NB + 3 * t + d, tensors[t]->strides[d], name);
    }
  }
  check_i64(what, kernel, launch, APPEND_STRIDE_TB, paged ? params->block_table.strides[0] : 0, "block table stride");
  check_int(what, kernel, launch, APPEND_SEQLEN_NEW, seqlen_new, "seqlen_new");
  check_int(what, kernel, launch, APPEND_HEADS_KV, s->heads_kv, "heads_kv");
  check_int(what, kernel, launch, APPEND_CAPACITY, capacity, "capacity");
  check_int(what, kernel, launch, APPEND_PAGE_SIZE, paged ? params->k_cache.shape[1] : 0, "page_size");
  check_int(what, kernel, launch, APPEND_HEAD_DIM_QK8, s->head_dim_qk / 8, "head_dim_qk8");
  check_int(what, kernel, launch, APPEND_HEAD_DIM_V8, s->head_dim_v / 8, "head_dim_v8");
  CHECK_MSG(arg_i32(launch, APPEND_FLAGS) == (paged ? DECODE_FLAG_PAGED : 0), "%s: attn_cache_append's flags %#x, "
            "expected %#x", what, (unsigned)arg_i32(launch, APPEND_FLAGS), paged ? (unsigned)DECODE_FLAG_PAGED : 0u);
}

/* The decoding row for a cache of pages of `page_size` keys (0: contiguous), on target `arch`, for the
 * group's `group_rows` (G * seqlen_q): the row of the problem's dtype and (padded) head dims whose tile
 * those rows call for, in the family the cache calls for: attn_decode for a contiguous cache;
 * attn_decode_paged_blocks (one page lookup per key block) when the page size is a multiple of that
 * family's row's block_n, so that no block of keys straddles two pages; else attn_decode_paged (a
 * lookup per key row). */
static const aotk__kernel_entry *expected_decode_row(const decode_shape *s, int arch, int64_t page_size,
                                                     int64_t group_rows) {
  if (page_size == 0) {
    return expected_row(AOTK__FAMILY_ATTN_DECODE, arch, s->dtype, s->head_dim_qk, s->head_dim_v, 1, 0, group_rows);
  }
  const aotk__kernel_entry *blocks = expected_row(AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS, arch, s->dtype,
                                                  s->head_dim_qk, s->head_dim_v, 1, 0, group_rows);
  if (blocks != NULL && page_size % blocks->block_n == 0) return blocks;
  return expected_row(AOTK__FAMILY_ATTN_DECODE_PAGED, arch, s->dtype, s->head_dim_qk, s->head_dim_v, 1, 0, group_rows);
}

/* What a decoding call's query reports and its call launches, worked out from the header: the decoding
 * kernel is expected_decode_row's, on a grid of batch * heads_kv * ceil(G * seqlen_q / block_m) * splits
 * programs; with `splits` > 1 the fp32 partials lie in the workspace and the merge follows, one program
 * per block_m of the batch * seqlen_q * heads_q rows and block_n of the head_dim_v columns (whole rows
 * only past the grid limit, check_merge's rule: the partials are not the outputs). With k_new and v_new the appending kernel runs first
 * (check_append_launch) and the decoding kernel is told seqlen_new; the split and the workspace do not
 * change. Packed queries (cu_seqlens_q) run unsplit with the kernel seeing q and out as [1, total_q,
 * heads_q, d] (batch strides 0; each request's first row read from cu_seqlens_q on the device), lse as
 * [1, heads_q, total_q], seqlen_q = max_seqlen_q and FLAG_VARLEN. `splits` and `split_keys` are the
 * caller's (worked by hand); split_keys 0: one split (whose length does not matter). */
static void check_decode(const char *what, const aotk_decode_params *params, const decode_shape *s, const gpu *g,
                         int64_t splits, int64_t split_keys, void *workspace) {
  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status status = aotk_decode_query(AOTK_OP_DECODE, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_decode_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "%s: aotk_decode_query loaded or launched (%s)", what, called_functions());
  const int64_t group = decode_group(s), group_rows = group * s->seqlen_q;
  const bool split = splits > 1, paged = params->block_table.data != NULL, causal = params->causal == 1;
  const aotk__kernel_entry *row = expected_decode_row(s, g->arch, paged ? params->k_cache.shape[1] : 0, group_rows);
  const aotk__kernel_entry *merge = merge_row_for(g->arch, 1);
  CHECK_MSG(row != NULL && merge != NULL, "%s: no sm_%d decoding or attn_merge row", what, g->arch);
  if (row == NULL || merge == NULL) return;
  const bool append = params->k_new.data != NULL, varlen = params->cu_seqlens_q.data != NULL;
  const int64_t seqlen_new = append ? params->k_new.shape[1] : 0;
  const int launches = 1 + split + append, first = append; /* the decoding launch's index */
  const aotk__kernel_entry *append_row =
      expected_row(AOTK__FAMILY_ATTN_CACHE_APPEND, g->arch, s->dtype, s->head_dim_qk, s->head_dim_v, 1, 0, 1);
  CHECK_MSG(!append || append_row != NULL, "%s: no sm_%d attn_cache_append row", what, g->arch);
  if (append && append_row == NULL) return;
  const int64_t row_chunks = ceil_div(group_rows, row->block_m);
  const int64_t grid = s->batch * s->heads_kv * row_chunks * splits;
  const size_t workspace_bytes = decode_workspace_bytes(s, splits);
  const int64_t capacity = paged ? params->block_table.shape[1] * params->k_cache.shape[1] : params->k_cache.shape[1];
  const uint32_t features =
      (causal ? AOTK_FEATURE_CAUSAL : 0) |
      (params->window_left >= 0 || (!causal && params->window_right >= 0) ? AOTK_FEATURE_WINDOW : 0) |
      (params->softcap > 0.0f ? AOTK_FEATURE_SOFTCAP : 0) |
      (params->alibi_slopes.data != NULL ? AOTK_FEATURE_ALIBI : 0) |
      (params->sinks.data != NULL ? AOTK_FEATURE_SINKS : 0) |
      (row->head_dim_qk > s->head_dim_qk || row->head_dim_v > s->head_dim_v ? AOTK_FEATURE_PADDED_HEAD_DIM : 0) |
      (paged ? AOTK_FEATURE_PAGED_KV : 0) | (split ? AOTK_FEATURE_SPLIT_KV : 0) |
      (append ? AOTK_FEATURE_APPEND_KV : 0) | (varlen ? AOTK_FEATURE_VARLEN : 0);
  CHECK(info.struct_size == sizeof info);
  CHECK_MSG(strcmp(info.kernel_name, row->name) == 0, "%s: aotk_decode_query names %s, expected %s", what,
            info.kernel_name, row->name);
  CHECK_MSG(info.arch == g->arch && info.from_ptx == g->from_ptx, "%s: sm_%d from_ptx %d, expected sm_%d from_ptx %d",
            what, info.arch, info.from_ptx, g->arch, g->from_ptx);
  CHECK(info.num_warps == row->num_warps && info.shared_bytes == row->shared_bytes && info.aligned == 1);
  CHECK(info.block_m == row->block_m && info.block_n == row->block_n);
  CHECK(info.head_dim_qk == row->head_dim_qk && info.head_dim_v == row->head_dim_v);
  CHECK_MSG(info.num_splits == splits, "%s: %d splits, expected %lld", what, info.num_splits, (long long)splits);
  CHECK_MSG(info.grid == grid, "%s: grid %lld, expected %lld (%lld requests x %lld kv heads x %lld row chunks x %lld "
            "splits)", what, (long long)info.grid, (long long)grid, (long long)s->batch, (long long)s->heads_kv,
            (long long)row_chunks, (long long)splits);
  CHECK_MSG(info.workspace_bytes == workspace_bytes, "%s: workspace_bytes %zu, expected %zu", what,
            info.workspace_bytes, workspace_bytes);
  CHECK_MSG(info.launches == launches, "%s: the query announces %d launches, expected %d", what, info.launches,
            launches);
  CHECK_MSG(info.features == features, "%s: features %#x, expected %#x", what, info.features, features);

  reset_launch_log();
  const int launches_before = fake.launches;
  status = aotk_attn_decode(params, workspace, workspace_bytes, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_decode %s (%s)", what, aotk_status_name(status), aotk_last_error());
  CHECK_MSG(aotk_last_error()[0] == '\0', "%s: a success left the message \"%s\"", what, aotk_last_error());
  CHECK_MSG(fake.launches == launches_before + launches, "%s: %d launches, expected %d", what,
            fake.launches - launches_before, launches);
  if (status != AOTK_OK || fake.logged_launches != launches) return;

  /* The order: appending first (the decoding kernel reads the rows it writes), the merge last. */
  if (append) check_append_launch(what, &fake.launch_log[0], params, s, append_row, capacity);
  const recorded_launch *launch = &fake.launch_log[first];
  const char *kernel = "attn_decode";
  check_sel_launch_shape(what, launch, KERNEL_ATTN_DECODE, row, grid, DECODE_GLOBAL_SCRATCH);
  if (launch->kernel != KERNEL_ATTN_DECODE) return;
  check_pointer(what, kernel, launch, DECODE_Q, params->q.data, "q");
  check_pointer(what, kernel, launch, DECODE_K, params->k_cache.data, "k_cache");
  check_pointer(what, kernel, launch, DECODE_V, params->v_cache.data, "v_cache");
  check_pointer(what, kernel, launch, DECODE_OUT, params->out.data, "out");
  check_pointer(what, kernel, launch, DECODE_LSE, params->lse.data, "lse");
  check_pointer(what, kernel, launch, DECODE_BLOCK_TABLE, params->block_table.data, "block_table");
  check_pointer(what, kernel, launch, DECODE_CACHE_SEQLENS, params->cache_seqlens.data, "cache_seqlens");
  check_pointer(what, kernel, launch, DECODE_CU_SEQLENS_Q, params->cu_seqlens_q.data, "cu_seqlens_q");
  check_pointer(what, kernel, launch, DECODE_ALIBI_SLOPES, params->alibi_slopes.data, "alibi_slopes");
  check_pointer(what, kernel, launch, DECODE_SINKS, params->sinks.data, "sinks");
  /* The partials: the outputs at the workspace's start, the LSEs after them at a 16-byte boundary, both
   * inside the workspace. */
  const uint64_t base = (uint64_t)(uintptr_t)workspace, out_partial = arg_pointer(launch, DECODE_OUT_PARTIAL);
  const uint64_t lse_partial = arg_pointer(launch, DECODE_LSE_PARTIAL);
  if (split) {
    CHECK_MSG(out_partial == base && lse_partial == base + decode_out_partial_bytes(s, splits) &&
                  lse_partial % 16 == 0 &&
                  out_partial + (uint64_t)(4 * splits * decode_rows(s) * decode_partial_row(s)) <= lse_partial &&
                  lse_partial + (uint64_t)(4 * splits * decode_rows(s)) <= base + workspace_bytes,
              "%s: partials at %#llx and %#llx, not laid out in the %zu-byte workspace at %#llx", what,
              (unsigned long long)out_partial, (unsigned long long)lse_partial, workspace_bytes,
              (unsigned long long)base);
  } else {
    CHECK_MSG(out_partial == 0 && lse_partial == 0, "%s: partial pointers without a split", what);
  }
  const aotk_tensor *tensors[4] = {&params->q, &params->k_cache, &params->v_cache, &params->out};
  static const char *const names[4] = {"q", "k_cache", "v_cache", "out"};
  for (int t = 0; t < 4; t++) {
    const bool packed = varlen && (t == 0 || t == 3); /* (0, token, head) */
    for (int d = 0; d < 3; d++) {
      char name[48];
      if (packed && d == 0) {
        snprintf(name, sizeof name, "packed %s's batch stride", names[t]);
      } else {
        snprintf(name, sizeof name, "%s.strides[%d]", names[t], packed ? d - 1 : d);
      }
      const int64_t expected = packed ? (d == 0 ? 0 : tensors[t]->strides[d - 1]) : tensors[t]->strides[d];
      check_i64(what, kernel, launch, DECODE_STRIDE_QB + 3 * t + d, expected, name);
    }
  }
  const bool lse = params->lse.data != NULL;
  check_i64(what, kernel, launch, DECODE_STRIDE_LB, lse && !varlen ? params->lse.strides[0] : 0, "lse batch stride");
  check_i64(what, kernel, launch, DECODE_STRIDE_LH, lse ? params->lse.strides[varlen ? 0 : 1] : 0, "lse head stride");
  check_i64(what, kernel, launch, DECODE_STRIDE_TB, paged ? params->block_table.strides[0] : 0, "block table stride");
  const bool alibi_per_batch = params->alibi_slopes.data != NULL && params->alibi_slopes.rank == 2;
  check_i64(what, kernel, launch, DECODE_STRIDE_AB, alibi_per_batch ? params->alibi_slopes.strides[0] : 0,
            "alibi batch stride");
  check_int(what, kernel, launch, DECODE_BATCH, s->batch, "batch_size");
  check_int(what, kernel, launch, DECODE_SEQLEN_Q, s->seqlen_q, "seqlen_q");
  check_int(what, kernel, launch, DECODE_HEADS_Q, s->heads_q, "heads_q");
  check_int(what, kernel, launch, DECODE_GROUP_SIZE, group, "group_size");
  check_int(what, kernel, launch, DECODE_CAPACITY, capacity, "capacity");
  check_int(what, kernel, launch, DECODE_PAGE_SIZE, paged ? params->k_cache.shape[1] : 0, "page_size");
  check_int(what, kernel, launch, DECODE_NUM_SPLITS, splits, "num_splits");
  if (split_keys > 0) {
    check_int(what, kernel, launch, DECODE_SPLIT_KEYS, split_keys, "split_keys");
  } else { /* one split: it runs to each request's end (the last split does), whatever split_keys says */
    CHECK_MSG(splits == 1 && arg_i32(launch, DECODE_SPLIT_KEYS) > 0, "%s: split_keys %d", what,
              arg_i32(launch, DECODE_SPLIT_KEYS));
  }
  check_int(what, kernel, launch, DECODE_ROW_CHUNKS, row_chunks, "row_chunks");
  check_int(what, kernel, launch, DECODE_HEAD_DIM_QK8, s->head_dim_qk / 8, "head_dim_qk8");
  check_int(what, kernel, launch, DECODE_HEAD_DIM_V8, s->head_dim_v / 8, "head_dim_v8");
  check_int(what, kernel, launch, DECODE_WINDOW_LEFT, params->window_left, "window_left");
  check_int(what, kernel, launch, DECODE_WINDOW_RIGHT, causal ? 0 : params->window_right, "window_right");
  const int32_t flags = (lse ? FLAG_WRITE_LSE : 0) | (params->softcap > 0.0f ? FLAG_SOFTCAP : 0) |
                        (params->alibi_slopes.data != NULL ? FLAG_ALIBI : 0) |
                        (params->sinks.data != NULL ? FLAG_SINKS : 0) | (paged ? DECODE_FLAG_PAGED : 0) |
                        (split ? DECODE_FLAG_SPLIT : 0) | (varlen ? FLAG_VARLEN : 0);
  CHECK_MSG(arg_i32(launch, DECODE_FLAGS) == flags, "%s: attn_decode's flags %#x, expected %#x", what,
            (unsigned)arg_i32(launch, DECODE_FLAGS), (unsigned)flags);
  check_int(what, kernel, launch, DECODE_SEQLEN_NEW, seqlen_new, "seqlen_new");
  const double scale = params->softmax_scale != 0.0f ? params->softmax_scale : 1.0 / sqrt((double)s->head_dim_qk);
  check_float(what, kernel, launch, DECODE_QK_SCALE_LOG2, scale / log(2.0), "qk_scale_log2");
  check_float(what, kernel, launch, DECODE_SOFTCAP_SCALE, params->softcap > 0.0f ? scale / params->softcap : 0.0,
              "softcap_scale");
  check_float(what, kernel, launch, DECODE_SOFTCAP_LOG2, params->softcap / log(2.0), "softcap_log2");
  if (!split) return;

  /* The merge reads the partials as [split, batch, seqlen_q, heads_q, round_up(head_dim_v, 16)] and
   * [split, batch, heads_q, seqlen_q], and writes out and lse in the caller's layout; the sinks join here. */
  launch = &fake.launch_log[first + 1];
  kernel = "attn_merge";
  const int64_t rows = decode_rows(s);
  const int64_t row_blocks = ceil_div(rows, merge->block_m);
  const bool merge_whole_rows = row_blocks * ceil_div(s->head_dim_v, merge->block_n) > INT32_MAX;
  const int64_t merge_grid = row_blocks * (merge_whole_rows ? 1 : ceil_div(s->head_dim_v, merge->block_n));
  check_sel_launch_shape(what, launch, KERNEL_ATTN_MERGE, merge, merge_grid, MERGE_GLOBAL_SCRATCH);
  if (launch->kernel != KERNEL_ATTN_MERGE) return;
  CHECK_MSG(arg_pointer(launch, MERGE_PARTIAL32) == out_partial && arg_pointer(launch, MERGE_PARTIAL16) == 0 &&
                arg_pointer(launch, MERGE_PARTIAL_BF16) == 0 && arg_pointer(launch, MERGE_LSE_PARTIAL) == lse_partial,
            "%s: the merge does not read the decoding kernel's fp32 partials", what);
  for (int slot = 0; slot < 3; slot++) {
    const void *expected = slot == merge_slot(s->dtype) ? params->out.data : NULL;
    check_pointer(what, kernel, launch, MERGE_OUT32 + slot, expected,
                  slot == 0 ? "Out32" : slot == 1 ? "Out16" : "OutBF16");
  }
  check_pointer(what, kernel, launch, MERGE_LSE, params->lse.data, "lse");
  check_pointer(what, kernel, launch, MERGE_SINKS, params->sinks.data, "sinks");
  const int64_t pd = decode_partial_row(s);
  const int64_t partial_strides[4] = {rows * pd, s->seqlen_q * s->heads_q * pd, s->heads_q * pd, pd};
  const int64_t lse_partial_strides[4] = {rows, s->heads_q * s->seqlen_q, s->seqlen_q, 1};
  static const char *const partial_names[4] = {"partial stride_pp", "partial stride_pb", "partial stride_ps",
                                               "partial stride_ph"};
  static const char *const lse_partial_names[4] = {"stride_lpp", "stride_lpb", "stride_lph", "stride_lps"};
  for (int d = 0; d < 4; d++) {
    check_i64(what, kernel, launch, MERGE_STRIDE_PP + d, partial_strides[d], partial_names[d]);
    check_i64(what, kernel, launch, MERGE_STRIDE_LPP + d, lse_partial_strides[d], lse_partial_names[d]);
  }
  for (int d = 0; d < 3; d++) {
    check_i64(what, kernel, launch, MERGE_STRIDE_OB + d, params->out.strides[d], "out stride");
    if (lse) check_i64(what, kernel, launch, MERGE_STRIDE_LB + d, params->lse.strides[d], "lse stride");
  }
  check_int(what, kernel, launch, MERGE_NUM_PARTIALS, splits, "num_partials");
  check_int(what, kernel, launch, MERGE_SEQLEN_Q, s->seqlen_q, "seqlen_q");
  check_int(what, kernel, launch, MERGE_HEADS, s->heads_q, "heads");
  check_int(what, kernel, launch, MERGE_NUM_ROWS, rows, "num_rows");
  check_int(what, kernel, launch, MERGE_HEAD_DIM8, s->head_dim_v / 8, "head_dim8");
  const int32_t merge_flags = merge_dtype_flags(AOTK_DTYPE_FLOAT32, s->dtype) | (lse ? FLAG_WRITE_LSE : 0) |
                              (params->sinks.data != NULL ? FLAG_SINKS : 0) |
                              (merge_whole_rows ? MERGE_FLAG_WHOLE_ROWS : 0);
  CHECK_MSG(arg_i32(launch, MERGE_FLAGS) == merge_flags, "%s: attn_merge's flags %#x, expected %#x", what,
            (unsigned)arg_i32(launch, MERGE_FLAGS), (unsigned)merge_flags);
}

/* ---- decoding: validation ---- */

typedef struct decode_bad_input {
  const char *what;
  void (*spoil)(aotk_decode_params *params); /* NULL: pass params = NULL */
  aotk_status expected;
  const char *mentions; /* in aotk_last_error() */
} decode_bad_input;

static void make_paged(aotk_decode_params *p) { *p = decode_params_for(default_paged_shape); }
static void dec_struct_size_zero(aotk_decode_params *p) { p->struct_size = 0; }
static void dec_struct_size_short(aotk_decode_params *p) { p->struct_size = sizeof(aotk_decode_params) - 1; }
static void dec_struct_size_of_a_pointer(aotk_decode_params *p) { p->struct_size = sizeof(void *); }
static void dec_struct_size_garbage(aotk_decode_params *p) { p->struct_size = (size_t)1 << 40; }
static void dec_q_null(aotk_decode_params *p) { p->q.data = NULL; }
static void dec_q_at_the_top(aotk_decode_params *p) { p->q.data = (void *)(UINTPTR_MAX - 15); }
static void dec_q_rank_3(aotk_decode_params *p) { p->q = aotk_tensor_3d(FAKE_Q, AOTK_DTYPE_BFLOAT16, 6, 8, 128); }
static void dec_q_float32(aotk_decode_params *p) { p->q.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_q_int32(aotk_decode_params *p) { p->q.dtype = AOTK_DTYPE_INT32; }
static void dec_q_dtype_garbage(aotk_decode_params *p) { p->q.dtype = (aotk_dtype)1234; }
static void dec_q_seqlen_17(aotk_decode_params *p) { p->q.shape[1] = 17; }
static void dec_q_seqlen_huge(aotk_decode_params *p) { p->q.shape[1] = (int64_t)1 << 40, p->q.strides[0] = 0; }
static void dec_q_head_dim_100(aotk_decode_params *p) { p->q.shape[3] = 100; }
static void dec_q_head_dim_264(aotk_decode_params *p) { p->q.shape[3] = 264; }
static void dec_q_head_dim_4(aotk_decode_params *p) { p->q.shape[3] = 4; }
static void dec_k_null(aotk_decode_params *p) { p->k_cache.data = NULL; }
static void dec_k_rank_5(aotk_decode_params *p) { p->k_cache.rank = 5; }
static void dec_k_rank_3(aotk_decode_params *p) {
  p->k_cache = aotk_tensor_3d(FAKE_K, AOTK_DTYPE_BFLOAT16, 3 * 1000, 2, 128); /* [batch * capacity, heads_kv, d] */
}
static void dec_k_float16(aotk_decode_params *p) { p->k_cache.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_k_dtype_garbage(aotk_decode_params *p) { p->k_cache.dtype = (aotk_dtype)-7; }
static void dec_k_head_dim_64(aotk_decode_params *p) { p->k_cache.shape[3] = 64; }
static void dec_k_last_stride_2(aotk_decode_params *p) { p->k_cache.strides[3] = 2; }
static void dec_k_stride_negative(aotk_decode_params *p) { p->k_cache.strides[1] = -256; }
static void dec_k_capacity_zero(aotk_decode_params *p) { p->k_cache.shape[1] = p->v_cache.shape[1] = 0; }
static void dec_v_null(aotk_decode_params *p) { p->v_cache.data = NULL; }
static void dec_v_rank_3(aotk_decode_params *p) { p->v_cache.rank = 3; }
static void dec_v_float16(aotk_decode_params *p) { p->v_cache.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_v_float32(aotk_decode_params *p) { p->v_cache.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_v_batch(aotk_decode_params *p) { p->v_cache.shape[0] += 1; }
static void dec_v_capacity(aotk_decode_params *p) { p->v_cache.shape[1] -= 1; }
static void dec_v_heads(aotk_decode_params *p) { p->v_cache.shape[2] = 4; }
static void dec_v_head_dim_100(aotk_decode_params *p) { p->v_cache.shape[3] = 100, p->out.shape[3] = 100; }
static void dec_v_head_dim_512(aotk_decode_params *p) { p->v_cache.shape[3] = 512, p->out.shape[3] = 512; }
static void dec_heads_kv_3(aotk_decode_params *p) { p->k_cache.shape[2] = p->v_cache.shape[2] = 3; }
static void dec_heads_kv_16(aotk_decode_params *p) { p->k_cache.shape[2] = p->v_cache.shape[2] = 16; }
static void dec_table_rank_1(aotk_decode_params *p) {
  make_paged(p), p->block_table = aotk_tensor_1d(FAKE_BLOCK_TABLE, AOTK_DTYPE_INT32, 3 * 64);
}
static void dec_table_rank_3(aotk_decode_params *p) {
  make_paged(p), p->block_table = aotk_tensor_3d(FAKE_BLOCK_TABLE, AOTK_DTYPE_INT32, 3, 8, 8);
}
static void dec_table_int64(aotk_decode_params *p) { make_paged(p), p->block_table.dtype = AOTK_DTYPE_INT64; }
static void dec_table_float32(aotk_decode_params *p) { make_paged(p), p->block_table.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_table_dtype_zero(aotk_decode_params *p) { make_paged(p), p->block_table.dtype = (aotk_dtype)0; }
static void dec_table_batch(aotk_decode_params *p) { make_paged(p), p->block_table.shape[0] += 1; }
static void dec_table_one_row(aotk_decode_params *p) { /* one row of pages broadcast to every request */
  make_paged(p), p->block_table.shape[0] = 1;
}
static void dec_table_pages_zero(aotk_decode_params *p) { make_paged(p), p->block_table.shape[1] = 0; }
static void dec_table_last_stride_2(aotk_decode_params *p) { make_paged(p), p->block_table.strides[1] = 2; }
static void dec_table_misaligned(aotk_decode_params *p) {
  make_paged(p), p->block_table.data = byte_offset(FAKE_BLOCK_TABLE, 2);
}
/* 2^27 pages of 16 keys: a request could hold 2^31 keys, one more than int32 cache_seqlens can say. */
static void dec_table_capacity_2_31(aotk_decode_params *p) {
  make_paged(p), p->block_table.shape[1] = (int64_t)1 << 27, p->block_table.strides[0] = (int64_t)1 << 27;
}
/* 2^60 pages (the rows broadcast) of 16 keys: pages x page_size overflows int64 itself. */
static void dec_table_capacity_2_64(aotk_decode_params *p) {
  make_paged(p), p->block_table.shape[1] = (int64_t)1 << 60, p->block_table.strides[0] = 0;
}
/* 2^31 - 1 pages of 2 keys. */
static void dec_page_size_2_capacity_2_32(aotk_decode_params *p) {
  make_paged(p), p->block_table.shape[1] = INT32_MAX, p->block_table.strides[0] = 0;
  p->k_cache.shape[1] = p->v_cache.shape[1] = 2;
}
static void dec_paged_v_pages(aotk_decode_params *p) { make_paged(p), p->v_cache.shape[0] -= 1; }
static void dec_paged_v_page_size(aotk_decode_params *p) { make_paged(p), p->v_cache.shape[1] = 32; }
static void dec_paged_without_table(aotk_decode_params *p) { make_paged(p), p->block_table.data = NULL; }
static void dec_k_batch(aotk_decode_params *p) { p->k_cache.shape[0] = p->v_cache.shape[0] = 4; }
/* One key past AOTK_DECODE_MAX_CAPACITY, contiguous and paged. */
static void dec_capacity_max_plus_1(aotk_decode_params *p) {
  decode_shape s = default_decode_shape;
  s.capacity = (int64_t)AOTK_DECODE_MAX_CAPACITY + 1;
  *p = decode_params_for(s);
}
static void dec_table_capacity_max_plus_16(aotk_decode_params *p) {
  make_paged(p), p->block_table.shape[1] = AOTK_DECODE_MAX_CAPACITY / 16 + 1, p->block_table.strides[0] = 0;
}
static void dec_capacity_2_31(aotk_decode_params *p) {
  decode_shape s = default_decode_shape;
  s.capacity = (int64_t)1 << 31;
  *p = decode_params_for(s);
}
static void dec_seqlens_null(aotk_decode_params *p) { p->cache_seqlens.data = NULL; }
static void dec_seqlens_rank_2(aotk_decode_params *p) {
  p->cache_seqlens = aotk_tensor_2d(FAKE_CACHE_SEQLENS, AOTK_DTYPE_INT32, 3, 1);
}
static void dec_seqlens_rank_0(aotk_decode_params *p) { p->cache_seqlens.rank = 0; }
static void dec_seqlens_int64(aotk_decode_params *p) { p->cache_seqlens.dtype = AOTK_DTYPE_INT64; }
static void dec_seqlens_float32(aotk_decode_params *p) { p->cache_seqlens.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_seqlens_batch(aotk_decode_params *p) { p->cache_seqlens.shape[0] += 1; }
static void dec_seqlens_one(aotk_decode_params *p) { p->cache_seqlens.shape[0] = 1; }
static void dec_seqlens_stride_2(aotk_decode_params *p) { p->cache_seqlens.strides[0] = 2; }
static void dec_seqlens_misaligned(aotk_decode_params *p) {
  p->cache_seqlens.data = byte_offset(FAKE_CACHE_SEQLENS, 2);
}
static void dec_paged_seqlens_batch(aotk_decode_params *p) { make_paged(p), p->cache_seqlens.shape[0] = 200; }
static void dec_out_null(aotk_decode_params *p) { p->out.data = NULL; }
static void dec_out_rank_3(aotk_decode_params *p) { p->out.rank = 3; }
static void dec_out_float16(aotk_decode_params *p) { p->out.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_out_float32(aotk_decode_params *p) { p->out.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_out_batch(aotk_decode_params *p) { p->out.shape[0] += 1; }
static void dec_out_seqlen(aotk_decode_params *p) { p->out.shape[1] = 1; }
static void dec_out_heads_kv(aotk_decode_params *p) { p->out.shape[2] = 2; }
static void dec_out_head_dim(aotk_decode_params *p) { p->out.shape[3] = 64; }
static void dec_out_heads_stride_zero(aotk_decode_params *p) { p->out.strides[2] = 0; }
static void dec_out_batch_stride_zero(aotk_decode_params *p) { p->out.strides[0] = 0; }
static void dec_out_last_stride_2(aotk_decode_params *p) { p->out.strides[3] = 2; }
static void dec_out_stride_negative(aotk_decode_params *p) { p->out.strides[1] = -1024; }
static void dec_lse_rank_2(aotk_decode_params *p) { p->lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 8, 6); }
static void dec_lse_float16(aotk_decode_params *p) { p->lse.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_lse_bfloat16(aotk_decode_params *p) { p->lse.dtype = AOTK_DTYPE_BFLOAT16; }
static void dec_lse_batch(aotk_decode_params *p) { p->lse.shape[0] += 1; }
static void dec_lse_heads_kv(aotk_decode_params *p) { p->lse.shape[1] = 2; }
static void dec_lse_seqlen(aotk_decode_params *p) { p->lse.shape[2] = 3; }
static void dec_lse_like_out(aotk_decode_params *p) { /* [batch, seqlen_q, heads_q]: out's order */
  p->lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 3, 2, 8);
}
static void dec_lse_heads_stride_zero(aotk_decode_params *p) { p->lse.strides[1] = 0; }
static void dec_lse_last_stride_2(aotk_decode_params *p) { p->lse.strides[2] = 2; }
static void dec_lse_misaligned(aotk_decode_params *p) { p->lse.data = byte_offset(FAKE_LSE, 2); }
static void dec_causal_2(aotk_decode_params *p) { p->causal = 2; }
static void dec_causal_negative(aotk_decode_params *p) { p->causal = -1; }
static void dec_window_left_minus_2(aotk_decode_params *p) { p->window_left = -2; }
static void dec_window_right_min(aotk_decode_params *p) { p->window_right = INT32_MIN; }
static void dec_causal_window_right_1(aotk_decode_params *p) { p->causal = 1, p->window_right = 1; }
static void dec_causal_window_left_minus_2(aotk_decode_params *p) { p->causal = 1, p->window_left = -2; }
static void dec_scale_nan(aotk_decode_params *p) { p->softmax_scale = NAN; }
static void dec_scale_negative(aotk_decode_params *p) { p->softmax_scale = -0.125f; }
static void dec_scale_infinite(aotk_decode_params *p) { p->softmax_scale = INFINITY; }
static void dec_scale_negative_infinite(aotk_decode_params *p) { p->softmax_scale = -INFINITY; }
static void dec_softcap_negative(aotk_decode_params *p) { p->softcap = -30.0f; }
static void dec_softcap_nan(aotk_decode_params *p) { p->softcap = NAN; }
static void dec_softcap_infinite(aotk_decode_params *p) { p->softcap = INFINITY; }
static void dec_alibi(aotk_decode_params *p) { p->alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 8); }
static void dec_alibi_per_batch(aotk_decode_params *p) {
  p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 3, 8);
}
static void dec_alibi_float16(aotk_decode_params *p) { dec_alibi(p), p->alibi_slopes.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_alibi_heads_kv(aotk_decode_params *p) { dec_alibi(p), p->alibi_slopes.shape[0] = 2; }
static void dec_alibi_2d_batch(aotk_decode_params *p) { dec_alibi_per_batch(p), p->alibi_slopes.shape[0] = 4; }
static void dec_alibi_2d_heads_kv(aotk_decode_params *p) { dec_alibi_per_batch(p), p->alibi_slopes.shape[1] = 2; }
static void dec_alibi_rank_3(aotk_decode_params *p) {
  p->alibi_slopes = aotk_tensor_3d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 3, 2, 8);
}
static void dec_alibi_misaligned(aotk_decode_params *p) {
  dec_alibi(p), p->alibi_slopes.data = byte_offset(FAKE_ALIBI, 2);
}
static void dec_sinks(aotk_decode_params *p) { p->sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 8); }
static void dec_sinks_per_batch(aotk_decode_params *p) { /* a shape ALiBi allows, sinks do not */
  p->sinks = aotk_tensor_2d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 3, 8);
}
static void dec_sinks_heads_kv(aotk_decode_params *p) { dec_sinks(p), p->sinks.shape[0] = 2; }
static void dec_sinks_bfloat16(aotk_decode_params *p) { dec_sinks(p), p->sinks.dtype = AOTK_DTYPE_BFLOAT16; }
static void dec_num_splits_negative(aotk_decode_params *p) { p->num_splits = -1; }
static void dec_num_splits_257(aotk_decode_params *p) { p->num_splits = AOTK_DECODE_MAX_SPLITS + 1; }
static void dec_num_splits_min(aotk_decode_params *p) { p->num_splits = INT32_MIN; }
static void dec_max_seqlen_k_negative(aotk_decode_params *p) { p->max_seqlen_k = -1; }
static void dec_max_seqlen_k_min(aotk_decode_params *p) { p->max_seqlen_k = INT32_MIN; }
static void dec_q_two_bytes_off(aotk_decode_params *p) { p->q.data = byte_offset(FAKE_Q, 2); }
static void dec_q_eight_bytes_off(aotk_decode_params *p) { p->q.data = byte_offset(FAKE_Q, 8); }
static void dec_q_odd_address(aotk_decode_params *p) { p->q.data = byte_offset(FAKE_Q, 1); }
static void dec_q_heads_stride_136(aotk_decode_params *p) {
  p->q.strides[2] = 136, p->q.strides[1] = 8 * 136, p->q.strides[0] = 2 * 8 * 136;
}
static void dec_q_batch_stride_8_past(aotk_decode_params *p) { p->q.strides[0] += 8; }
static void dec_k_eight_bytes_off(aotk_decode_params *p) { p->k_cache.data = byte_offset(FAKE_K, 8); }
static void dec_k_token_stride_8_past(aotk_decode_params *p) { p->k_cache.strides[1] += 8; }
static void dec_v_four_bytes_off(aotk_decode_params *p) { p->v_cache.data = byte_offset(FAKE_V, 4); }
static void dec_v_batch_stride_8_past(aotk_decode_params *p) { p->v_cache.strides[0] += 8; }
static void dec_paged_k_page_stride_8_past(aotk_decode_params *p) { make_paged(p), p->k_cache.strides[0] += 8; }
static void dec_paged_v_heads_stride_8_past(aotk_decode_params *p) {
  make_paged(p), p->v_cache.strides[2] = 136, p->v_cache.strides[1] = 2 * 136, p->v_cache.strides[0] = 16 * 2 * 136;
}
static void dec_out_two_bytes_off(aotk_decode_params *p) { p->out.data = byte_offset(FAKE_OUT, 2); }
static void dec_out_heads_stride_136(aotk_decode_params *p) {
  p->out.strides[2] = 136, p->out.strides[1] = 8 * 136, p->out.strides[0] = 2 * 8 * 136;
}
static void dec_head_dims_72(aotk_decode_params *p) { /* contiguous rows of 72 elements: 144 bytes apart */
  decode_shape s = default_decode_shape;
  s.head_dim_qk = s.head_dim_v = 72;
  *p = decode_params_for(s);
}
static void dec_misaligned_q_and_causal_2(aotk_decode_params *p) { dec_q_two_bytes_off(p), dec_causal_2(p); }
/* Appending: three new tokens per request, then one change. */
static void dec_append(aotk_decode_params *p) { add_new_kv(p, &default_decode_shape, 3); }
static void dec_paged_append(aotk_decode_params *p) { make_paged(p), add_new_kv(p, &default_paged_shape, 3); }
static void dec_k_new_only(aotk_decode_params *p) { dec_append(p), p->v_new = (aotk_tensor){0}; }
static void dec_v_new_only(aotk_decode_params *p) { dec_append(p), p->k_new = (aotk_tensor){0}; }
static void dec_k_new_only_garbage_v_new(aotk_decode_params *p) { /* v_new's other fields set, its data NULL */
  dec_append(p), p->v_new.data = NULL;
}
static void dec_k_new_rank_3(aotk_decode_params *p) {
  dec_append(p), p->k_new = aotk_tensor_3d(FAKE_K_NEW, AOTK_DTYPE_BFLOAT16, 9, 2, 128);
}
static void dec_v_new_rank_5(aotk_decode_params *p) { dec_append(p), p->v_new.rank = 5; }
static void dec_v_new_rank_0(aotk_decode_params *p) { dec_append(p), p->v_new.rank = 0; }
static void dec_k_new_float16(aotk_decode_params *p) { dec_append(p), p->k_new.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_v_new_float32(aotk_decode_params *p) { dec_append(p), p->v_new.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_k_new_dtype_garbage(aotk_decode_params *p) { dec_append(p), p->k_new.dtype = (aotk_dtype)99; }
static void dec_k_new_batch(aotk_decode_params *p) { dec_append(p), p->k_new.shape[0] += 1; }
static void dec_v_new_batch(aotk_decode_params *p) { dec_append(p), p->v_new.shape[0] = 1; }
static void dec_k_new_seqlen_zero(aotk_decode_params *p) { dec_append(p), p->k_new.shape[1] = 0; }
static void dec_v_new_seqlen(aotk_decode_params *p) { dec_append(p), p->v_new.shape[1] = 4; }
static void dec_both_new_seqlen(aotk_decode_params *p) { /* k_new sets seqlen_new: v_new's 3 is then wrong */
  dec_append(p), p->k_new.shape[1] = 2;
}
static void dec_k_new_heads_q(aotk_decode_params *p) { dec_append(p), p->k_new.shape[2] = 8; }
static void dec_v_new_heads(aotk_decode_params *p) { dec_append(p), p->v_new.shape[2] = 1; }
static void dec_k_new_head_dim(aotk_decode_params *p) { dec_append(p), p->k_new.shape[3] = 64; }
static void dec_v_new_head_dim(aotk_decode_params *p) { dec_append(p), p->v_new.shape[3] = 136; }
static void dec_new_head_dims_swapped(aotk_decode_params *p) { /* head dims (256, 128): k_new given v's 128 */
  decode_shape s = default_decode_shape;
  s.head_dim_qk = 256;
  *p = decode_params_for(s);
  add_new_kv(p, &s, 3);
  p->k_new.shape[3] = 128, p->v_new.shape[3] = 256;
}
static void dec_k_new_last_stride_2(aotk_decode_params *p) { dec_append(p), p->k_new.strides[3] = 2; }
static void dec_v_new_stride_negative(aotk_decode_params *p) { dec_append(p), p->v_new.strides[1] = -256; }
static void dec_k_new_odd_address(aotk_decode_params *p) { dec_append(p), p->k_new.data = byte_offset(FAKE_K_NEW, 1); }
static void dec_k_new_eight_bytes_off(aotk_decode_params *p) {
  dec_append(p), p->k_new.data = byte_offset(FAKE_K_NEW, 8);
}
static void dec_v_new_two_bytes_off(aotk_decode_params *p) {
  dec_append(p), p->v_new.data = byte_offset(FAKE_V_NEW, 2);
}
static void dec_k_new_token_stride_8_past(aotk_decode_params *p) { dec_append(p), p->k_new.strides[1] += 8; }
static void dec_v_new_heads_stride_136(aotk_decode_params *p) { dec_append(p), p->v_new.strides[2] = 136; }
static void dec_v_new_batch_stride_8_past(aotk_decode_params *p) { dec_append(p), p->v_new.strides[0] += 8; }
static void dec_paged_k_new_heads(aotk_decode_params *p) { dec_paged_append(p), p->k_new.shape[2] = 3; }
static void dec_paged_v_new_misaligned(aotk_decode_params *p) {
  dec_paged_append(p), p->v_new.data = byte_offset(FAKE_V_NEW, 4);
}
static void dec_k_new_at_the_top(aotk_decode_params *p) { dec_append(p), p->k_new.data = (void *)(UINTPTR_MAX - 15); }
static void dec_misaligned_k_new_and_bad_v_new_heads(aotk_decode_params *p) { /* the shape first */
  dec_k_new_eight_bytes_off(p), p->v_new.shape[2] = 4;
}
static void dec_misaligned_q_and_bad_k_new(aotk_decode_params *p) { /* k_new's shape before q's alignment */
  dec_q_two_bytes_off(p), dec_append(p), p->k_new.shape[0] = 2;
}
/* Packed queries (cu_seqlens_q): default_varlen_shape, 3 requests' 100 tokens, G 4, at most 40 each. */
static void make_varlen_decode(aotk_decode_params *p) { *p = decode_params_for(default_varlen_shape); }
static void make_varlen_paged_decode(aotk_decode_params *p) { *p = decode_params_for(default_varlen_paged_shape); }
static void dec_cu_rank_2(aotk_decode_params *p) {
  make_varlen_decode(p), p->cu_seqlens_q = aotk_tensor_2d(FAKE_CU_SEQLENS_Q, AOTK_DTYPE_INT32, 1, 4);
}
static void dec_cu_rank_0(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.rank = 0; }
static void dec_cu_int64(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.dtype = AOTK_DTYPE_INT64; }
static void dec_cu_float32(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_cu_dtype_garbage(aotk_decode_params *p) {
  make_varlen_decode(p), p->cu_seqlens_q.dtype = (aotk_dtype)77;
}
static void dec_cu_one_offset(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.shape[0] = 1; }
static void dec_cu_no_offsets(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.shape[0] = 0; }
static void dec_cu_negative_size(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.shape[0] = -4; }
static void dec_cu_stride_2(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.strides[0] = 2; }
static void dec_cu_misaligned(aotk_decode_params *p) {
  make_varlen_decode(p), p->cu_seqlens_q.data = byte_offset(FAKE_CU_SEQLENS_Q, 2);
}
static void dec_cu_at_the_top(aotk_decode_params *p) {
  make_varlen_decode(p), p->cu_seqlens_q.data = (void *)(UINTPTR_MAX - 7);
}
static void dec_cu_batch_plus_1(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.shape[0] += 1; }
static void dec_cu_batch_minus_1(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.shape[0] -= 1; }
static void dec_paged_cu_batch_plus_1(aotk_decode_params *p) {
  make_varlen_paged_decode(p), p->cu_seqlens_q.shape[0] += 1;
}
static void dec_cu_null_fields_set(aotk_decode_params *p) { /* dense then: q's rank 3 is wrong */
  make_varlen_decode(p), p->cu_seqlens_q.data = NULL;
}
static void dec_varlen_q_rank_4(aotk_decode_params *p) {
  make_varlen_decode(p), p->q = aotk_tensor_4d(FAKE_Q, AOTK_DTYPE_BFLOAT16, 3, 40, 8, 128);
}
static void dec_varlen_q_rank_2(aotk_decode_params *p) { make_varlen_decode(p), p->q.rank = 2; }
static void dec_varlen_q_null(aotk_decode_params *p) { make_varlen_decode(p), p->q.data = NULL; }
static void dec_varlen_q_total_zero(aotk_decode_params *p) { make_varlen_decode(p), p->q.shape[0] = 0; }
static void dec_varlen_q_float32(aotk_decode_params *p) { make_varlen_decode(p), p->q.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_varlen_q_last_stride_2(aotk_decode_params *p) { make_varlen_decode(p), p->q.strides[2] = 2; }
static void dec_varlen_head_dim_100(aotk_decode_params *p) { make_varlen_decode(p), p->q.shape[2] = 100; }
static void dec_varlen_head_dim_264(aotk_decode_params *p) { make_varlen_decode(p), p->q.shape[2] = 264; }
static void dec_varlen_head_dim_4(aotk_decode_params *p) { make_varlen_decode(p), p->q.shape[2] = 4; }
static void dec_varlen_k_head_dim_64(aotk_decode_params *p) { make_varlen_decode(p), p->k_cache.shape[3] = 64; }
static void dec_varlen_heads_q_6(aotk_decode_params *p) { /* 6 query heads over 4 kv heads */
  make_varlen_decode(p), p->q.shape[1] = p->out.shape[1] = p->lse.shape[0] = 6;
  p->k_cache.shape[2] = p->v_cache.shape[2] = 4;
}
static void dec_varlen_out_rank_4(aotk_decode_params *p) {
  make_varlen_decode(p), p->out = aotk_tensor_4d(FAKE_OUT, AOTK_DTYPE_BFLOAT16, 3, 40, 8, 128);
}
static void dec_varlen_out_rank_2(aotk_decode_params *p) { make_varlen_decode(p), p->out.rank = 2; }
static void dec_varlen_out_total_plus_1(aotk_decode_params *p) { make_varlen_decode(p), p->out.shape[0] += 1; }
static void dec_varlen_out_batch_rows(aotk_decode_params *p) { /* [batch * max_seqlen_q, ...]: not q's rows */
  make_varlen_decode(p), p->out.shape[0] = 3 * 40;
}
static void dec_varlen_out_heads_kv(aotk_decode_params *p) { make_varlen_decode(p), p->out.shape[1] = 2; }
static void dec_varlen_out_head_dim(aotk_decode_params *p) { make_varlen_decode(p), p->out.shape[2] = 64; }
static void dec_varlen_out_float16(aotk_decode_params *p) { make_varlen_decode(p), p->out.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_varlen_out_token_stride_zero(aotk_decode_params *p) { make_varlen_decode(p), p->out.strides[0] = 0; }
static void dec_varlen_out_heads_stride_zero(aotk_decode_params *p) { make_varlen_decode(p), p->out.strides[1] = 0; }
static void dec_varlen_out_last_stride_2(aotk_decode_params *p) { make_varlen_decode(p), p->out.strides[2] = 2; }
static void dec_varlen_lse_rank_3(aotk_decode_params *p) { /* the dense layout [batch, heads_q, max_seqlen_q] */
  make_varlen_decode(p), p->lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 3, 8, 40);
}
static void dec_varlen_lse_rank_1(aotk_decode_params *p) { make_varlen_decode(p), p->lse.rank = 1; }
static void dec_varlen_lse_like_out(aotk_decode_params *p) { /* [total_q, heads_q]: out's order */
  make_varlen_decode(p), p->lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 100, 8);
}
static void dec_varlen_lse_heads_kv(aotk_decode_params *p) { make_varlen_decode(p), p->lse.shape[0] = 2; }
static void dec_varlen_lse_total_minus_1(aotk_decode_params *p) { make_varlen_decode(p), p->lse.shape[1] -= 1; }
static void dec_varlen_lse_float16(aotk_decode_params *p) { make_varlen_decode(p), p->lse.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_varlen_lse_heads_stride_zero(aotk_decode_params *p) { make_varlen_decode(p), p->lse.strides[0] = 0; }
static void dec_varlen_lse_last_stride_2(aotk_decode_params *p) { make_varlen_decode(p), p->lse.strides[1] = 2; }
static void dec_max_seqlen_q_zero(aotk_decode_params *p) { make_varlen_decode(p), p->max_seqlen_q = 0; }
static void dec_max_seqlen_q_negative(aotk_decode_params *p) { make_varlen_decode(p), p->max_seqlen_q = -1; }
static void dec_max_seqlen_q_min(aotk_decode_params *p) { make_varlen_decode(p), p->max_seqlen_q = INT32_MIN; }
static void dec_varlen_num_splits_2(aotk_decode_params *p) { make_varlen_decode(p), p->num_splits = 2; }
static void dec_varlen_num_splits_256(aotk_decode_params *p) {
  make_varlen_decode(p), p->num_splits = AOTK_DECODE_MAX_SPLITS;
}
static void dec_varlen_paged_num_splits_2(aotk_decode_params *p) { make_varlen_paged_decode(p), p->num_splits = 2; }
static void dec_varlen_append(aotk_decode_params *p) {
  make_varlen_decode(p), add_new_kv(p, &default_varlen_shape, 1);
}
static void dec_varlen_paged_append(aotk_decode_params *p) {
  make_varlen_paged_decode(p), add_new_kv(p, &default_varlen_paged_shape, 3);
}
static void dec_varlen_k_new_only(aotk_decode_params *p) { dec_varlen_append(p), p->v_new = (aotk_tensor){0}; }
static void dec_varlen_v_new_only(aotk_decode_params *p) { dec_varlen_append(p), p->k_new = (aotk_tensor){0}; }
static void dec_varlen_alibi_batch_plus_1(aotk_decode_params *p) {
  make_varlen_decode(p), p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 4, 8);
}
static void dec_varlen_alibi_total_q_rows(aotk_decode_params *p) { /* per token, not per request */
  make_varlen_decode(p), p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 100, 8);
}
static void dec_varlen_q_token_stride_8_past(aotk_decode_params *p) { make_varlen_decode(p), p->q.strides[0] += 8; }
static void dec_varlen_q_heads_stride_136(aotk_decode_params *p) {
  make_varlen_decode(p), p->q.strides[1] = 136, p->q.strides[0] = 8 * 136 + 8;
}
static void dec_varlen_out_heads_stride_136(aotk_decode_params *p) {
  make_varlen_decode(p), p->out.strides[1] = 136, p->out.strides[0] = 8 * 136 + 8;
}
static void dec_varlen_out_two_bytes_off(aotk_decode_params *p) {
  make_varlen_decode(p), p->out.data = byte_offset(FAKE_OUT, 2);
}
static void dec_varlen_misaligned_q_and_splits_2(aotk_decode_params *p) { /* the value first */
  dec_varlen_q_token_stride_8_past(p), p->num_splits = 2;
}

static const decode_bad_input decode_bad_inputs[] = {
    {"params NULL", NULL, AOTK_ERROR_NULL_POINTER, "params"},
    {"struct_size 0", dec_struct_size_zero, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size one byte short", dec_struct_size_short, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size of a pointer", dec_struct_size_of_a_pointer, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size garbage", dec_struct_size_garbage, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"q.data NULL", dec_q_null, AOTK_ERROR_NULL_POINTER, "q.data"},
    {"q past the end of the address space", dec_q_at_the_top, AOTK_ERROR_SIZE_OVERFLOW, "end of the address space"},
    {"q rank 3", dec_q_rank_3, AOTK_ERROR_RANK, "q.rank"},
    {"q float32", dec_q_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"q int32", dec_q_int32, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"q dtype garbage", dec_q_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"seqlen_q 17", dec_q_seqlen_17, AOTK_ERROR_INVALID_VALUE, "q.shape[1]"},
    {"seqlen_q 2^40", dec_q_seqlen_huge, AOTK_ERROR_INVALID_VALUE, "q.shape[1]"},
    {"head_dim_qk 100", dec_q_head_dim_100, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "q.shape[3]"},
    {"head_dim_qk 264", dec_q_head_dim_264, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "q.shape[3]"},
    {"head_dim_qk 4", dec_q_head_dim_4, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "q.shape[3]"},
    {"k_cache.data NULL", dec_k_null, AOTK_ERROR_NULL_POINTER, "k_cache.data"},
    {"k_cache rank 5", dec_k_rank_5, AOTK_ERROR_RANK, "k_cache.rank"},
    {"k_cache rank 3 (rows packed)", dec_k_rank_3, AOTK_ERROR_RANK, "k_cache.rank"},
    {"k_cache float16, q bfloat16", dec_k_float16, AOTK_ERROR_DTYPE_MISMATCH, "k_cache.dtype"},
    {"k_cache dtype garbage", dec_k_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "k_cache.dtype"},
    {"k_cache head_dim 64, q 128", dec_k_head_dim_64, AOTK_ERROR_HEAD_DIM_MISMATCH, "k_cache.shape[3]"},
    {"k_cache last stride 2", dec_k_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "k_cache.strides[3]"},
    {"k_cache stride negative", dec_k_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "k_cache.strides[1]"},
    {"k_cache capacity 0", dec_k_capacity_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "k_cache.shape[1]"},
    {"v_cache.data NULL", dec_v_null, AOTK_ERROR_NULL_POINTER, "v_cache.data"},
    {"v_cache rank 3", dec_v_rank_3, AOTK_ERROR_RANK, "v_cache.rank"},
    {"v_cache float16, q bfloat16", dec_v_float16, AOTK_ERROR_DTYPE_MISMATCH, "v_cache.dtype"},
    {"v_cache float32, q bfloat16", dec_v_float32, AOTK_ERROR_DTYPE_MISMATCH, "v_cache.dtype"},
    {"v_cache batch != k_cache's", dec_v_batch, AOTK_ERROR_SHAPE_MISMATCH, "v_cache.shape[0]"},
    {"v_cache capacity != k_cache's", dec_v_capacity, AOTK_ERROR_SHAPE_MISMATCH, "v_cache.shape[1]"},
    {"v_cache heads != k_cache's", dec_v_heads, AOTK_ERROR_SHAPE_MISMATCH, "v_cache.shape[2]"},
    {"head_dim_v 100", dec_v_head_dim_100, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "v_cache.shape[3]"},
    {"head_dim_v 512", dec_v_head_dim_512, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "v_cache.shape[3]"},
    {"heads_kv 3, heads_q 8", dec_heads_kv_3, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_kv"},
    {"heads_kv 16 > heads_q 8", dec_heads_kv_16, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_kv"},
    {"paged: block_table rank 1", dec_table_rank_1, AOTK_ERROR_RANK, "block_table.rank"},
    {"paged: block_table rank 3", dec_table_rank_3, AOTK_ERROR_RANK, "block_table.rank"},
    {"paged: block_table int64", dec_table_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "block_table.dtype"},
    {"paged: block_table float32", dec_table_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "block_table.dtype"},
    {"paged: block_table dtype 0", dec_table_dtype_zero, AOTK_ERROR_UNSUPPORTED_DTYPE, "block_table.dtype"},
    {"paged: block_table batch + 1", dec_table_batch, AOTK_ERROR_SHAPE_MISMATCH, "block_table.shape[0]"},
    {"paged: block_table of one row", dec_table_one_row, AOTK_ERROR_SHAPE_MISMATCH, "block_table.shape[0]"},
    {"paged: block_table of 0 pages", dec_table_pages_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "block_table.shape[1]"},
    {"paged: block_table last stride 2", dec_table_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM,
     "block_table.strides[1]"},
    {"paged: block_table misaligned", dec_table_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "block_table.data"},
    {"paged: 2^27 pages of 16 keys (2^31 keys)", dec_table_capacity_2_31, AOTK_ERROR_SIZE_OVERFLOW,
     "block_table.shape[1]"},
    {"paged: 2^60 pages of 16 keys (overflows int64)", dec_table_capacity_2_64, AOTK_ERROR_SIZE_OVERFLOW,
     "block_table.shape[1]"},
    {"paged: 2^31 - 1 pages of 2 keys", dec_page_size_2_capacity_2_32, AOTK_ERROR_SIZE_OVERFLOW,
     "block_table.shape[1]"},
    {"paged: v_cache one page fewer", dec_paged_v_pages, AOTK_ERROR_SHAPE_MISMATCH, "v_cache.shape[0]"},
    {"paged: v_cache page size 32, k_cache 16", dec_paged_v_page_size, AOTK_ERROR_SHAPE_MISMATCH, "v_cache.shape[1]"},
    {"paged cache without block_table", dec_paged_without_table, AOTK_ERROR_SHAPE_MISMATCH, "needs block_table"},
    {"paged: cache_seqlens per page", dec_paged_seqlens_batch, AOTK_ERROR_SHAPE_MISMATCH, "cache_seqlens.shape[0]"},
    {"contiguous: k_cache and v_cache batch 4, q 3", dec_k_batch, AOTK_ERROR_SHAPE_MISMATCH, "k_cache.shape[0]"},
    {"contiguous: capacity 2^31", dec_capacity_2_31, AOTK_ERROR_SIZE_OVERFLOW, "k_cache.shape[1]"},
    {"contiguous: capacity 2^30 + 1", dec_capacity_max_plus_1, AOTK_ERROR_SIZE_OVERFLOW, "AOTK_DECODE_MAX_CAPACITY"},
    {"paged: 2^26 + 1 pages of 16 keys", dec_table_capacity_max_plus_16, AOTK_ERROR_SIZE_OVERFLOW,
     "AOTK_DECODE_MAX_CAPACITY"},
    {"cache_seqlens.data NULL", dec_seqlens_null, AOTK_ERROR_NULL_POINTER, "cache_seqlens.data"},
    {"cache_seqlens rank 2", dec_seqlens_rank_2, AOTK_ERROR_RANK, "cache_seqlens.rank"},
    {"cache_seqlens rank 0", dec_seqlens_rank_0, AOTK_ERROR_RANK, "cache_seqlens.rank"},
    {"cache_seqlens int64", dec_seqlens_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "cache_seqlens.dtype"},
    {"cache_seqlens float32", dec_seqlens_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "cache_seqlens.dtype"},
    {"cache_seqlens batch + 1", dec_seqlens_batch, AOTK_ERROR_SHAPE_MISMATCH, "cache_seqlens.shape[0]"},
    {"cache_seqlens one length for all", dec_seqlens_one, AOTK_ERROR_SHAPE_MISMATCH, "cache_seqlens.shape[0]"},
    {"cache_seqlens stride 2", dec_seqlens_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "cache_seqlens.strides[0]"},
    {"cache_seqlens misaligned", dec_seqlens_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "cache_seqlens.data"},
    {"out.data NULL", dec_out_null, AOTK_ERROR_NULL_POINTER, "out.data"},
    {"out rank 3", dec_out_rank_3, AOTK_ERROR_RANK, "out.rank"},
    {"out float16, q bfloat16", dec_out_float16, AOTK_ERROR_DTYPE_MISMATCH, "out.dtype"},
    {"out float32, q bfloat16", dec_out_float32, AOTK_ERROR_DTYPE_MISMATCH, "out.dtype"},
    {"out batch + 1", dec_out_batch, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[0]"},
    {"out one token, q two", dec_out_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[1]"},
    {"out heads_kv", dec_out_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[2]"},
    {"out head_dim 64, v 128", dec_out_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[3]"},
    {"out heads stride 0", dec_out_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[2]"},
    {"out batch stride 0", dec_out_batch_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[0]"},
    {"out last stride 2", dec_out_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "out.strides[3]"},
    {"out stride negative", dec_out_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "out.strides[1]"},
    {"lse rank 2", dec_lse_rank_2, AOTK_ERROR_RANK, "lse.rank"},
    {"lse float16", dec_lse_float16, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"lse bfloat16", dec_lse_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"lse batch + 1", dec_lse_batch, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"lse heads_kv", dec_lse_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"lse seqlen_q + 1", dec_lse_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[2]"},
    {"lse [batch, seqlen_q, heads_q]", dec_lse_like_out, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"lse heads stride 0", dec_lse_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "lse.strides[1]"},
    {"lse last stride 2", dec_lse_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "lse.strides[2]"},
    {"lse misaligned", dec_lse_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "lse.data"},
    {"causal 2", dec_causal_2, AOTK_ERROR_INVALID_VALUE, "causal"},
    {"causal -1", dec_causal_negative, AOTK_ERROR_INVALID_VALUE, "causal"},
    {"window_left -2", dec_window_left_minus_2, AOTK_ERROR_INVALID_VALUE, "window_left"},
    {"window_right INT32_MIN", dec_window_right_min, AOTK_ERROR_INVALID_VALUE, "window_right"},
    {"causal with window_right 1", dec_causal_window_right_1, AOTK_ERROR_INVALID_VALUE, "window_right"},
    {"causal with window_left -2", dec_causal_window_left_minus_2, AOTK_ERROR_INVALID_VALUE, "window_left"},
    {"softmax_scale NaN", dec_scale_nan, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale negative", dec_scale_negative, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale infinite", dec_scale_infinite, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale -infinity", dec_scale_negative_infinite, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softcap negative", dec_softcap_negative, AOTK_ERROR_INVALID_VALUE, "softcap"},
    {"softcap NaN", dec_softcap_nan, AOTK_ERROR_INVALID_VALUE, "softcap"},
    {"softcap infinite", dec_softcap_infinite, AOTK_ERROR_INVALID_VALUE, "softcap"},
    {"alibi_slopes float16", dec_alibi_float16, AOTK_ERROR_UNSUPPORTED_DTYPE, "alibi_slopes.dtype"},
    {"alibi_slopes [heads_kv]", dec_alibi_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[0]"},
    {"alibi_slopes [batch + 1, heads_q]", dec_alibi_2d_batch, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[0]"},
    {"alibi_slopes [batch, heads_kv]", dec_alibi_2d_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[1]"},
    {"alibi_slopes rank 3", dec_alibi_rank_3, AOTK_ERROR_RANK, "alibi_slopes.rank"},
    {"alibi_slopes misaligned", dec_alibi_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "alibi_slopes.data"},
    {"sinks [batch, heads_q]", dec_sinks_per_batch, AOTK_ERROR_RANK, "sinks.rank"},
    {"sinks [heads_kv]", dec_sinks_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "sinks.shape[0]"},
    {"sinks bfloat16", dec_sinks_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "sinks.dtype"},
    {"num_splits -1", dec_num_splits_negative, AOTK_ERROR_INVALID_VALUE, "num_splits"},
    {"num_splits 257", dec_num_splits_257, AOTK_ERROR_INVALID_VALUE, "num_splits"},
    {"num_splits INT32_MIN", dec_num_splits_min, AOTK_ERROR_INVALID_VALUE, "num_splits"},
    {"max_seqlen_k -1", dec_max_seqlen_k_negative, AOTK_ERROR_INVALID_VALUE, "max_seqlen_k"},
    {"max_seqlen_k INT32_MIN", dec_max_seqlen_k_min, AOTK_ERROR_INVALID_VALUE, "max_seqlen_k"},
    {"q 2 bytes past 16", dec_q_two_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "q: decoding"},
    {"q 8 bytes past 16", dec_q_eight_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "q: decoding"},
    {"q odd address", dec_q_odd_address, AOTK_ERROR_MISALIGNED_POINTER, "q.data"},
    {"q heads stride 136", dec_q_heads_stride_136, AOTK_ERROR_MISALIGNED_POINTER, "q: decoding"},
    {"q batch stride 8 past a multiple of 16", dec_q_batch_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER, "q: decoding"},
    {"k_cache 8 bytes past 16", dec_k_eight_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "k_cache: decoding"},
    {"k_cache token stride 8 past", dec_k_token_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER, "k_cache: decoding"},
    {"v_cache 4 bytes past 16", dec_v_four_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "v_cache: decoding"},
    {"v_cache batch stride 8 past", dec_v_batch_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER, "v_cache: decoding"},
    {"paged: k_cache page stride 8 past", dec_paged_k_page_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER,
     "k_cache: decoding"},
    {"paged: v_cache heads stride 136", dec_paged_v_heads_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER,
     "v_cache: decoding"},
    {"out 2 bytes past 16", dec_out_two_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "out: decoding"},
    {"out heads stride 136", dec_out_heads_stride_136, AOTK_ERROR_MISALIGNED_POINTER, "out: decoding"},
    {"head dims 72, contiguous (rows 144 bytes apart)", dec_head_dims_72, AOTK_ERROR_MISALIGNED_POINTER, "q: decoding"},
    {"misaligned q and causal 2: the value first", dec_misaligned_q_and_causal_2, AOTK_ERROR_INVALID_VALUE, "causal"},
    {"k_new without v_new", dec_k_new_only, AOTK_ERROR_NULL_POINTER, "v_new.data"},
    {"v_new without k_new", dec_v_new_only, AOTK_ERROR_NULL_POINTER, "k_new.data"},
    {"k_new with a described v_new whose data is NULL", dec_k_new_only_garbage_v_new, AOTK_ERROR_NULL_POINTER,
     "v_new.data"},
    {"k_new rank 3", dec_k_new_rank_3, AOTK_ERROR_RANK, "k_new.rank"},
    {"v_new rank 5", dec_v_new_rank_5, AOTK_ERROR_RANK, "v_new.rank"},
    {"v_new rank 0", dec_v_new_rank_0, AOTK_ERROR_RANK, "v_new.rank"},
    {"k_new float16, q bfloat16", dec_k_new_float16, AOTK_ERROR_DTYPE_MISMATCH, "k_new.dtype"},
    {"v_new float32, q bfloat16", dec_v_new_float32, AOTK_ERROR_DTYPE_MISMATCH, "v_new.dtype"},
    {"k_new dtype garbage", dec_k_new_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "k_new.dtype"},
    {"k_new batch + 1", dec_k_new_batch, AOTK_ERROR_SHAPE_MISMATCH, "k_new.shape[0]"},
    {"v_new batch 1, q 3", dec_v_new_batch, AOTK_ERROR_SHAPE_MISMATCH, "v_new.shape[0]"},
    {"k_new seqlen_new 0", dec_k_new_seqlen_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "k_new.shape[1]"},
    {"v_new 4 new tokens, k_new 3", dec_v_new_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "v_new.shape[1]"},
    {"k_new 2 new tokens, v_new 3", dec_both_new_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "v_new.shape[1]"},
    {"k_new with heads_q heads", dec_k_new_heads_q, AOTK_ERROR_SHAPE_MISMATCH, "k_new.shape[2]"},
    {"v_new one head, heads_kv 2", dec_v_new_heads, AOTK_ERROR_SHAPE_MISMATCH, "v_new.shape[2]"},
    {"k_new head_dim 64, q 128", dec_k_new_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "k_new.shape[3]"},
    {"v_new head_dim 136, v_cache 128", dec_v_new_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "v_new.shape[3]"},
    {"k_new and v_new head dims swapped (256, 128)", dec_new_head_dims_swapped, AOTK_ERROR_HEAD_DIM_MISMATCH,
     "k_new.shape[3]"},
    {"k_new last stride 2", dec_k_new_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "k_new.strides[3]"},
    {"v_new stride negative", dec_v_new_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "v_new.strides[1]"},
    {"k_new past the end of the address space", dec_k_new_at_the_top, AOTK_ERROR_SIZE_OVERFLOW,
     "end of the address space"},
    {"k_new odd address", dec_k_new_odd_address, AOTK_ERROR_MISALIGNED_POINTER, "k_new.data"},
    {"k_new 8 bytes past 16", dec_k_new_eight_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "k_new: decoding"},
    {"v_new 2 bytes past 16", dec_v_new_two_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "v_new: decoding"},
    {"k_new token stride 8 past", dec_k_new_token_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER, "k_new: decoding"},
    {"v_new heads stride 136", dec_v_new_heads_stride_136, AOTK_ERROR_MISALIGNED_POINTER, "v_new: decoding"},
    {"v_new batch stride 8 past", dec_v_new_batch_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER, "v_new: decoding"},
    {"paged: k_new 3 heads, heads_kv 2", dec_paged_k_new_heads, AOTK_ERROR_SHAPE_MISMATCH, "k_new.shape[2]"},
    {"paged: v_new 4 bytes past 16", dec_paged_v_new_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "v_new: decoding"},
    {"misaligned k_new and v_new heads: the shape first", dec_misaligned_k_new_and_bad_v_new_heads,
     AOTK_ERROR_SHAPE_MISMATCH, "v_new.shape[2]"},
    {"misaligned q and k_new batch: the shape first", dec_misaligned_q_and_bad_k_new, AOTK_ERROR_SHAPE_MISMATCH,
     "k_new.shape[0]"},
    {"varlen: cu_seqlens_q rank 2", dec_cu_rank_2, AOTK_ERROR_RANK, "cu_seqlens_q.rank"},
    {"varlen: cu_seqlens_q rank 0", dec_cu_rank_0, AOTK_ERROR_RANK, "cu_seqlens_q.rank"},
    {"varlen: cu_seqlens_q int64", dec_cu_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_q.dtype"},
    {"varlen: cu_seqlens_q float32", dec_cu_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_q.dtype"},
    {"varlen: cu_seqlens_q dtype garbage", dec_cu_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_q.dtype"},
    {"varlen: cu_seqlens_q of one offset (no request)", dec_cu_one_offset, AOTK_ERROR_NONPOSITIVE_SIZE,
     "cu_seqlens_q.shape[0]"},
    {"varlen: cu_seqlens_q of no offsets", dec_cu_no_offsets, AOTK_ERROR_NONPOSITIVE_SIZE, "cu_seqlens_q.shape[0]"},
    {"varlen: cu_seqlens_q of -4 offsets", dec_cu_negative_size, AOTK_ERROR_NONPOSITIVE_SIZE, "cu_seqlens_q.shape[0]"},
    {"varlen: cu_seqlens_q stride 2", dec_cu_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "cu_seqlens_q.strides[0]"},
    {"varlen: cu_seqlens_q misaligned", dec_cu_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "cu_seqlens_q.data"},
    {"varlen: cu_seqlens_q past the end of the address space", dec_cu_at_the_top, AOTK_ERROR_SIZE_OVERFLOW,
     "end of the address space"},
    {"varlen: cu_seqlens_q of 4 requests, caches of 3", dec_cu_batch_plus_1, AOTK_ERROR_SHAPE_MISMATCH,
     "k_cache.shape[0]"},
    {"varlen: cu_seqlens_q of 2 requests, caches of 3", dec_cu_batch_minus_1, AOTK_ERROR_SHAPE_MISMATCH,
     "k_cache.shape[0]"},
    {"varlen, paged: cu_seqlens_q of 4 requests, block_table of 3", dec_paged_cu_batch_plus_1,
     AOTK_ERROR_SHAPE_MISMATCH, "block_table.shape[0]"},
    {"varlen: cu_seqlens_q.data NULL (dense), q rank 3", dec_cu_null_fields_set, AOTK_ERROR_RANK, "q.rank"},
    {"varlen: q rank 4", dec_varlen_q_rank_4, AOTK_ERROR_RANK, "q.rank"},
    {"varlen: q rank 2", dec_varlen_q_rank_2, AOTK_ERROR_RANK, "q.rank"},
    {"varlen: q.data NULL", dec_varlen_q_null, AOTK_ERROR_NULL_POINTER, "q.data"},
    {"varlen: total_q 0", dec_varlen_q_total_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "q.shape[0]"},
    {"varlen: q float32", dec_varlen_q_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"varlen: q last stride 2", dec_varlen_q_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "q.strides[2]"},
    {"varlen: head_dim_qk 100", dec_varlen_head_dim_100, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "q.shape[2]"},
    {"varlen: head_dim_qk 264", dec_varlen_head_dim_264, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "q.shape[2]"},
    {"varlen: head_dim_qk 4", dec_varlen_head_dim_4, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "q.shape[2]"},
    {"varlen: k_cache head_dim 64, q 128", dec_varlen_k_head_dim_64, AOTK_ERROR_HEAD_DIM_MISMATCH, "k_cache.shape[3]"},
    {"varlen: heads_q 6, heads_kv 4", dec_varlen_heads_q_6, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_kv"},
    {"varlen: out rank 4", dec_varlen_out_rank_4, AOTK_ERROR_RANK, "out.rank"},
    {"varlen: out rank 2", dec_varlen_out_rank_2, AOTK_ERROR_RANK, "out.rank"},
    {"varlen: out total_q + 1", dec_varlen_out_total_plus_1, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[0]"},
    {"varlen: out of batch * max_seqlen_q rows", dec_varlen_out_batch_rows, AOTK_ERROR_SHAPE_MISMATCH, "total_q"},
    {"varlen: out heads_kv", dec_varlen_out_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[1]"},
    {"varlen: out head_dim 64, v 128", dec_varlen_out_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[2]"},
    {"varlen: out float16, q bfloat16", dec_varlen_out_float16, AOTK_ERROR_DTYPE_MISMATCH, "out.dtype"},
    {"varlen: out token stride 0", dec_varlen_out_token_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[0]"},
    {"varlen: out heads stride 0", dec_varlen_out_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[1]"},
    {"varlen: out last stride 2", dec_varlen_out_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "out.strides[2]"},
    {"varlen: lse rank 3 (the dense layout)", dec_varlen_lse_rank_3, AOTK_ERROR_RANK, "lse.rank"},
    {"varlen: lse rank 1", dec_varlen_lse_rank_1, AOTK_ERROR_RANK, "lse.rank"},
    {"varlen: lse [total_q, heads_q]", dec_varlen_lse_like_out, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"varlen: lse heads_kv", dec_varlen_lse_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"varlen: lse total_q - 1", dec_varlen_lse_total_minus_1, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"varlen: lse float16", dec_varlen_lse_float16, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"varlen: lse heads stride 0", dec_varlen_lse_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "lse.strides[0]"},
    {"varlen: lse last stride 2", dec_varlen_lse_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "lse.strides[1]"},
    {"varlen: max_seqlen_q 0", dec_max_seqlen_q_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_q"},
    {"varlen: max_seqlen_q -1", dec_max_seqlen_q_negative, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_q"},
    {"varlen: max_seqlen_q INT32_MIN", dec_max_seqlen_q_min, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_q"},
    {"varlen: num_splits 2", dec_varlen_num_splits_2, AOTK_ERROR_INVALID_VALUE, "num_splits = 2 with cu_seqlens_q"},
    {"varlen: num_splits 256", dec_varlen_num_splits_256, AOTK_ERROR_INVALID_VALUE, "with cu_seqlens_q"},
    {"varlen, paged: num_splits 2", dec_varlen_paged_num_splits_2, AOTK_ERROR_INVALID_VALUE, "with cu_seqlens_q"},
    {"varlen: appending (k_new and v_new)", dec_varlen_append, AOTK_ERROR_INVALID_VALUE, "with cu_seqlens_q"},
    {"varlen, paged: appending", dec_varlen_paged_append, AOTK_ERROR_INVALID_VALUE, "with cu_seqlens_q"},
    {"varlen: k_new without v_new", dec_varlen_k_new_only, AOTK_ERROR_INVALID_VALUE, "with cu_seqlens_q"},
    {"varlen: v_new without k_new", dec_varlen_v_new_only, AOTK_ERROR_INVALID_VALUE, "with cu_seqlens_q"},
    {"varlen: alibi_slopes [batch + 1, heads_q]", dec_varlen_alibi_batch_plus_1, AOTK_ERROR_SHAPE_MISMATCH,
     "alibi_slopes.shape[0]"},
    {"varlen: alibi_slopes [total_q, heads_q]", dec_varlen_alibi_total_q_rows, AOTK_ERROR_SHAPE_MISMATCH,
     "alibi_slopes.shape[0]"},
    {"varlen: q token stride 8 past", dec_varlen_q_token_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER, "q: decoding"},
    {"varlen: q heads stride 136", dec_varlen_q_heads_stride_136, AOTK_ERROR_MISALIGNED_POINTER, "q: decoding"},
    {"varlen: out heads stride 136", dec_varlen_out_heads_stride_136, AOTK_ERROR_MISALIGNED_POINTER, "out: decoding"},
    {"varlen: out 2 bytes past 16", dec_varlen_out_two_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "out: decoding"},
    {"varlen: misaligned q and num_splits 2: the value first", dec_varlen_misaligned_q_and_splits_2,
     AOTK_ERROR_INVALID_VALUE, "num_splits"},
};

/* Runs one bad input through aotk_attn_decode (with an ample workspace) and aotk_decode_query with the
 * recording fake installed as a working sm_90 GPU: both must refuse it with the expected status and a
 * message naming the argument, call no driver function (so nothing is loaded, launched or written), and
 * leave the caller's params and the query's info untouched. */
static void check_decode_bad_input(const decode_bad_input *c) {
  aotk_decode_params params = valid_decode_params();
  if (c->spoil != NULL) c->spoil(&params);
  const aotk_decode_params before = params;
  const aotk_decode_params *argument = c->spoil != NULL ? &params : NULL;

  reset_calls();
  aotk_status status = aotk_attn_decode(argument, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM);
  CHECK_MSG(status == c->expected, "%s: aotk_attn_decode gave %s (%s), expected %s", c->what, aotk_status_name(status),
            aotk_last_error(), aotk_status_name(c->expected));
  CHECK_MSG(message_mentions(c->mentions), "%s: aotk_attn_decode's message \"%s\" does not mention \"%s\"", c->what,
            aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: aotk_attn_decode reached the driver (%s)", c->what, called_functions());
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: aotk_attn_decode changed the caller's params", c->what);

  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status query_status = aotk_decode_query(AOTK_OP_DECODE, argument, &info);
  CHECK_MSG(query_status == status, "%s: aotk_decode_query gave %s, aotk_attn_decode %s", c->what,
            aotk_status_name(query_status), aotk_status_name(status));
  CHECK_MSG(message_mentions(c->mentions), "%s: aotk_decode_query's message \"%s\" does not mention \"%s\"", c->what,
            aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: aotk_decode_query reached the driver (%s)", c->what, called_functions());
  CHECK_MSG(info_untouched(&info), "%s: aotk_decode_query wrote *info on failure", c->what);
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: aotk_decode_query changed the caller's params", c->what);
}

static void test_decode_validation_rejects_bad_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  /* The bases are valid, so each failure below is due to its one change. */
  void (*const bases[])(aotk_decode_params *) = {make_paged,         dec_alibi,          dec_alibi_per_batch,
                                                  dec_sinks,          dec_append,         dec_paged_append,
                                                  make_varlen_decode, make_varlen_paged_decode};
  for (size_t i = 0; i <= sizeof bases / sizeof bases[0]; i++) {
    aotk_decode_params params = valid_decode_params();
    if (i > 0) bases[i - 1](&params);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "base %zu fails: %s (%s)", i, aotk_status_name(status), aotk_last_error());
    status = aotk_attn_decode(&params, FAKE_WORKSPACE, info.workspace_bytes, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "base %zu: aotk_attn_decode %s (%s)", i, aotk_status_name(status), aotk_last_error());
  }
  const size_t count = sizeof decode_bad_inputs / sizeof decode_bad_inputs[0];
  for (size_t i = 0; i < count; i++) check_decode_bad_input(&decode_bad_inputs[i]);
  printf("    %zu bad inputs\n", count);
  uninstall_fake_gpu();
}

/* Sizes each valid on its own whose products overflow what the kernels count in 32 bits (or int64
 * itself): q, k and v broadcast (zero strides), out's rows overlapping 16 elements apart. The grid,
 * heads_q, the group and the merge's rows are int32 arguments; a product that wrapped would launch a
 * truncated problem. Kept apart for UBSan, which reports a signed overflow in the check itself. */
static aotk_decode_params broadcast_decode_params(int64_t batch, int64_t seqlen_q, int64_t heads_q, int64_t heads_kv) {
  aotk_decode_params params = AOTK_DECODE_PARAMS_INIT;
  const aotk_tensor q = {FAKE_Q, AOTK_DTYPE_BFLOAT16, 4, {batch, seqlen_q, heads_q, 64}, {0, 0, 0, 1}};
  const aotk_tensor cache = {FAKE_K, AOTK_DTYPE_BFLOAT16, 4, {batch, 128, heads_kv, 64}, {0, 0, 0, 1}};
  const aotk_tensor out = {FAKE_OUT, AOTK_DTYPE_BFLOAT16, 4, {batch, seqlen_q, heads_q, 64}, {16, 16, 16, 1}};
  params.q = q;
  params.k_cache = cache;
  params.v_cache = cache;
  params.v_cache.data = FAKE_V;
  params.cache_seqlens = aotk_tensor_1d(FAKE_CACHE_SEQLENS, AOTK_DTYPE_INT32, batch);
  params.out = out;
  return params;
}
/* 2^33 requests x 2^31 kv heads: the grid's program count wraps int64 to 0. */
static void dec_programs_overflow_int64(aotk_decode_params *p) {
  *p = broadcast_decode_params((int64_t)1 << 33, 1, (int64_t)1 << 31, (int64_t)1 << 31);
}
/* One request, one kv head with a group of 2^31 query heads: 2^25 programs (a valid grid), but heads_q
 * and group_size do not fit the kernel's int32. */
static void dec_heads_q_2_31(aotk_decode_params *p) { *p = broadcast_decode_params(1, 1, (int64_t)1 << 31, 1); }
/* 2^27 requests of 16 tokens and one head, two splits (of 128 keys: the cache holds 256): 2^28
 * programs, but the merge's 2^31 rows do not fit its int32 row count. */
static void dec_split_rows_2_31(aotk_decode_params *p) {
  *p = broadcast_decode_params((int64_t)1 << 27, 16, 1, 1);
  p->k_cache.shape[1] = p->v_cache.shape[1] = 256;
  p->num_splits = 2;
}

/* Appending seqlen_new tokens per request to broadcast_decode_params' problem, k_new and v_new broadcast
 * too. The appending kernel's grid is batch * seqlen_new programs (int32), and seqlen_new is at most
 * AOTK_DECODE_MAX_CAPACITY (no request holds more). */
static void add_broadcast_new_kv(aotk_decode_params *p, int64_t seqlen_new) {
  const aotk_tensor k_new = {FAKE_K_NEW, AOTK_DTYPE_BFLOAT16, 4, {p->q.shape[0], seqlen_new, p->k_cache.shape[2], 64},
                             {0, 0, 0, 1}};
  p->k_new = k_new;
  p->v_new = k_new;
  p->v_new.data = FAKE_V_NEW;
}
static void dec_seqlen_new_max_plus_1(aotk_decode_params *p) {
  *p = broadcast_decode_params(1, 1, 1, 1);
  add_broadcast_new_kv(p, AOTK_DECODE_MAX_CAPACITY + 1);
}
static void dec_seqlen_new_2_62(aotk_decode_params *p) {
  *p = broadcast_decode_params(3, 1, 1, 1);
  add_broadcast_new_kv(p, (int64_t)1 << 62);
}
static void dec_seqlen_new_2_62_one_request(aotk_decode_params *p) {
  *p = broadcast_decode_params(1, 1, 1, 1);
  add_broadcast_new_kv(p, (int64_t)1 << 62);
}
/* 3 requests x 2^30 new tokens: each within AOTK_DECODE_MAX_CAPACITY, 3 x 2^30 programs are not. */
static void dec_append_programs_3_2_30(aotk_decode_params *p) {
  *p = broadcast_decode_params(3, 1, 1, 1);
  add_broadcast_new_kv(p, AOTK_DECODE_MAX_CAPACITY);
}
/* 2^31 - 1 requests (the most query rows) x 2 new tokens. */
static void dec_append_programs_2_32(aotk_decode_params *p) {
  *p = broadcast_decode_params(INT32_MAX, 1, 1, 1);
  add_broadcast_new_kv(p, 2);
}
/* 2^31 requests: the query rows overflow first. */
static void dec_append_requests_2_31(aotk_decode_params *p) {
  *p = broadcast_decode_params((int64_t)1 << 31, 1, 1, 1);
  add_broadcast_new_kv(p, 1);
}

/* Appending into caches broadcast over the requests: every request would write the same rows. */
static void dec_append_into_broadcast_cache(aotk_decode_params *p) {
  *p = broadcast_decode_params(3, 1, 1, 1);
  add_broadcast_new_kv(p, 1);
  p->k_cache.strides[1] = p->v_cache.strides[1] = 64;
}
static void dec_append_into_broadcast_v_cache(aotk_decode_params *p) {
  dec_append_into_broadcast_cache(p);
  p->k_cache.strides[0] = 128 * 64;
}

static const decode_bad_input decode_overflowing_inputs[] = {
    {"appending into a k_cache broadcast over the requests", dec_append_into_broadcast_cache, AOTK_ERROR_INVALID_VALUE,
     "k_cache.strides[0] = 0"},
    {"appending into a v_cache broadcast over the requests", dec_append_into_broadcast_v_cache,
     AOTK_ERROR_INVALID_VALUE, "v_cache.strides[0] = 0"},
    {"batch * heads_kv overflows int64", dec_programs_overflow_int64, AOTK_ERROR_SIZE_OVERFLOW,
     "batch * seqlen_q * heads_q"},
    {"heads_q 2^31", dec_heads_q_2_31, AOTK_ERROR_SIZE_OVERFLOW, "batch * seqlen_q * heads_q"},
    {"2^31 query rows in two splits", dec_split_rows_2_31, AOTK_ERROR_SIZE_OVERFLOW, "batch * seqlen_q * heads_q"},
    {"appending 2^30 + 1 tokens to one request", dec_seqlen_new_max_plus_1, AOTK_ERROR_SIZE_OVERFLOW,
     "AOTK_DECODE_MAX_CAPACITY"},
    {"appending 2^62 tokens to one request", dec_seqlen_new_2_62_one_request, AOTK_ERROR_SIZE_OVERFLOW,
     "k_new.shape[1]"},
    {"appending 2^62 tokens to 3 requests (the product overflows int64)", dec_seqlen_new_2_62,
     AOTK_ERROR_SIZE_OVERFLOW, "k_new.shape[1]"},
    {"appending 2^30 tokens to 3 requests", dec_append_programs_3_2_30, AOTK_ERROR_SIZE_OVERFLOW,
     "batch * seqlen_new"},
    {"appending 2 tokens to 2^31 - 1 requests", dec_append_programs_2_32, AOTK_ERROR_SIZE_OVERFLOW,
     "batch * seqlen_new"},
    {"appending to 2^31 requests", dec_append_requests_2_31, AOTK_ERROR_SIZE_OVERFLOW, "batch * seqlen_q * heads_q"},
};

static void test_decode_validation_overflow(void) {
  install_fake_gpu(90, SHARED_SM90);
  for (size_t i = 0; i < sizeof decode_overflowing_inputs / sizeof decode_overflowing_inputs[0]; i++) {
    check_decode_bad_input(&decode_overflowing_inputs[i]);
  }
  /* One row fewer than the limit: accepted, the merge's rows and the grid in range (two splits of one
   * 128-key block each). */
  aotk_decode_params params = broadcast_decode_params(((int64_t)1 << 27) - 1, 16, 1, 1);
  params.k_cache.shape[1] = params.v_cache.shape[1] = 256;
  params.num_splits = 2;
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
  CHECK_MSG(status == AOTK_OK, "2^31 - 16 query rows: %s (%s)", aotk_status_name(status), aotk_last_error());
  CHECK(info.num_splits == 2 && info.grid == 2 * (((int64_t)1 << 27) - 1));

  /* Appending at the limits: accepted, the appending kernel on batch * seqlen_new programs, first. */
  static const struct {
    const char *what;
    int64_t batch, seqlen_new;
  } appends[] = {
      {"one request x 2^30 new tokens (AOTK_DECODE_MAX_CAPACITY)", 1, AOTK_DECODE_MAX_CAPACITY},
      {"2 requests x (2^30 - 1) new tokens: 2^31 - 2 programs", 2, AOTK_DECODE_MAX_CAPACITY - 1},
      {"2^31 - 1 requests x 1 new token: 2^31 - 1 programs", INT32_MAX, 1},
  };
  for (size_t i = 0; i < sizeof appends / sizeof appends[0]; i++) {
    params = broadcast_decode_params(appends[i].batch, 1, 1, 1);
    add_broadcast_new_kv(&params, appends[i].seqlen_new);
    /* Appending writes the caches: they need their own rows (no stride 0), unlike the inputs. */
    const int64_t contiguous[4] = {128 * 64, 64, 64, 1};
    memcpy(params.k_cache.strides, contiguous, sizeof contiguous);
    memcpy(params.v_cache.strides, contiguous, sizeof contiguous);
    info = (aotk_kernel_info)AOTK_KERNEL_INFO_INIT;
    status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK && info.launches == 2 && info.num_splits == 1, "%s: %s (%s), %d launches",
              appends[i].what, aotk_status_name(status), aotk_last_error(), info.launches);
    reset_launch_log();
    status = aotk_attn_decode(&params, NULL, 0, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK && fake.logged_launches == 2, "%s: aotk_attn_decode %s (%s), %d launches",
              appends[i].what, aotk_status_name(status), aotk_last_error(), fake.logged_launches);
    if (status != AOTK_OK || fake.logged_launches != 2) continue;
    const recorded_launch *append = &fake.launch_log[0], *decode = &fake.launch_log[1];
    CHECK_MSG(append->kernel == KERNEL_ATTN_CACHE_APPEND &&
                  append->grid[0] == (unsigned)(appends[i].batch * appends[i].seqlen_new) &&
                  arg_i32(append, APPEND_SEQLEN_NEW) == appends[i].seqlen_new,
              "%s: launched %s first on %u programs, seqlen_new %d", appends[i].what,
              kernel_signatures[append->kernel].function, append->grid[0], arg_i32(append, APPEND_SEQLEN_NEW));
    CHECK_MSG(decode->kernel == KERNEL_ATTN_DECODE && decode->grid[0] == (unsigned)appends[i].batch &&
                  arg_i32(decode, DECODE_SEQLEN_NEW) == appends[i].seqlen_new,
              "%s: then %s on %u programs, seqlen_new %d", appends[i].what,
              kernel_signatures[decode->kernel].function, decode->grid[0], arg_i32(decode, DECODE_SEQLEN_NEW));
  }
  uninstall_fake_gpu();
}

/* Inputs at the edge of what decoding allows, which validation must accept: each runs one launch, or
 * two with a split, as its query says. The params sit in a struct with room after them, so that a
 * struct_size larger than this header's (a newer caller's) is readable memory. */
typedef struct decode_edge_case {
  const char *what;
  struct {
    aotk_decode_params params;
    unsigned char newer_fields[64];
  } call;
} decode_edge_case;

static aotk_decode_params *add_decode_edge_case(decode_edge_case *cases, int *count, const char *what,
                                                decode_shape shape) {
  decode_edge_case *c = &cases[(*count)++];
  memset(c, 0, sizeof *c);
  c->what = what;
  c->call.params = decode_params_for(shape);
  return &c->call.params;
}

static void test_decode_validation_accepts_edge_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  static decode_edge_case cases[64];
  int count = 0;
  decode_shape s = default_decode_shape;
  s.seqlen_q = 16;
  add_decode_edge_case(cases, &count, "seqlen_q 16 (the most)", s);
  s = default_decode_shape;
  s.seqlen_q = 1, s.batch = 1, s.heads_q = s.heads_kv = 1;
  add_decode_edge_case(cases, &count, "one token, one request, one head", s);
  s = default_decode_shape;
  s.heads_kv = 1;
  add_decode_edge_case(cases, &count, "MQA (heads_kv 1)", s);
  s = default_decode_shape;
  s.capacity = 1;
  add_decode_edge_case(cases, &count, "a cache of one key", s);
  s = default_decode_shape;
  s.head_dim_qk = s.head_dim_v = 16;
  add_decode_edge_case(cases, &count, "head dims 16 (padded to 32)", s);
  s.head_dim_qk = s.head_dim_v = 256;
  add_decode_edge_case(cases, &count, "head dims 256", s);
  s.head_dim_qk = 256, s.head_dim_v = 128;
  add_decode_edge_case(cases, &count, "head dims (256, 128)", s);
  s.head_dim_qk = 192, s.head_dim_v = 64;
  add_decode_edge_case(cases, &count, "head dims (192, 64), padded to (256, 128)", s);
  s = default_decode_shape;
  s.dtype = AOTK_DTYPE_FLOAT16, s.with_lse = false;
  memset(&add_decode_edge_case(cases, &count, "float16, no lse (its other fields garbage)", s)->lse, 0xEE,
         sizeof(aotk_tensor));
  cases[count - 1].call.params.lse.data = NULL;
  s = default_paged_shape;
  s.page_size = 1, s.capacity = 1000, s.num_pages = 5000;
  add_decode_edge_case(cases, &count, "paged, pages of one key", s);
  s.page_size = 1000, s.capacity = 3000, s.num_pages = 7;
  add_decode_edge_case(cases, &count, "paged, pages of 1000 keys (not a power of two)", s);
  s.page_size = 1, s.capacity = AOTK_DECODE_MAX_CAPACITY, s.num_pages = 8;
  aotk_decode_params *p = add_decode_edge_case(cases, &count, "paged, 2^30 pages of one key (the largest)", s);
  p->block_table.strides[0] = 0;
  p = add_decode_edge_case(cases, &count, "contiguous, caches broadcast over the batch", default_decode_shape);
  p->k_cache.strides[0] = p->v_cache.strides[0] = 0;
  p = add_decode_edge_case(cases, &count, "out stride 0 on dimensions of size 1", default_decode_shape);
  p->out = aotk_tensor_4d(FAKE_OUT, AOTK_DTYPE_BFLOAT16, 3, 2, 8, 128);
  p->q.shape[1] = p->out.shape[1] = p->lse.shape[2] = 1, p->out.strides[1] = 0;
  p = add_decode_edge_case(cases, &count, "causal, window_left 100, window_right 0", default_decode_shape);
  p->causal = 1, p->window_left = 100, p->window_right = 0;
  p = add_decode_edge_case(cases, &count, "window_left 0, window_right 0", default_decode_shape);
  p->window_left = 0, p->window_right = 0;
  add_decode_edge_case(cases, &count, "softmax_scale -0.0 (zero: the default)", default_decode_shape)->softmax_scale =
      -0.0f;
  p = add_decode_edge_case(cases, &count, "softcap, ALiBi per request, sinks, explicit scale", default_decode_shape);
  dec_alibi_per_batch(p), dec_sinks(p), p->softcap = 50.0f, p->softmax_scale = 0.01f;
  add_decode_edge_case(cases, &count, "num_splits 1", default_decode_shape)->num_splits = 1;
  add_decode_edge_case(cases, &count, "num_splits 256", default_decode_shape)->num_splits = AOTK_DECODE_MAX_SPLITS;
  add_decode_edge_case(cases, &count, "max_seqlen_k above the capacity", default_decode_shape)->max_seqlen_k =
      INT32_MAX;
  add_decode_edge_case(cases, &count, "max_seqlen_k 1", default_decode_shape)->max_seqlen_k = 1;
  add_decode_edge_case(cases, &count, "a struct_size larger than this header's (a newer caller)",
                       default_decode_shape)->struct_size = sizeof(aotk_decode_params) + 64;
  /* Appending. */
  s = default_decode_shape;
  add_new_kv(add_decode_edge_case(cases, &count, "appending one token", s), &s, 1);
  s.seqlen_q = 1;
  add_new_kv(add_decode_edge_case(cases, &count, "appending 16 tokens for one query token", s), &s, 16);
  s = default_decode_shape;
  s.capacity = 10;
  add_new_kv(add_decode_edge_case(cases, &count, "appending 50 tokens to a cache of 10 keys (the rest dropped)", s),
             &s, 50);
  s = default_decode_shape;
  s.batch = 1, s.seqlen_q = 1, s.heads_q = s.heads_kv = 1, s.capacity = 1;
  add_new_kv(add_decode_edge_case(cases, &count, "appending one token to a cache of one key", s), &s, 1);
  s = default_decode_shape;
  s.head_dim_qk = 192, s.head_dim_v = 64;
  add_new_kv(add_decode_edge_case(cases, &count, "appending, head dims (192, 64)", s), &s, 2);
  s = default_paged_shape;
  add_new_kv(add_decode_edge_case(cases, &count, "appending to a paged cache", s), &s, 5);
  s.page_size = 1, s.capacity = 1000, s.num_pages = 5000;
  add_new_kv(add_decode_edge_case(cases, &count, "appending to pages of one key", s), &s, 16);
  s = default_decode_shape;
  p = add_decode_edge_case(cases, &count, "appending k_new and v_new broadcast (strides 0)", s);
  add_new_kv(p, &s, 4);
  memset(p->k_new.strides, 0, 3 * sizeof p->k_new.strides[0]);
  memset(p->v_new.strides, 0, 3 * sizeof p->v_new.strides[0]);
  p = add_decode_edge_case(cases, &count, "appending with 4 splits", s);
  add_new_kv(p, &s, 2);
  p->num_splits = 4;
  p = add_decode_edge_case(cases, &count, "appending, float16, every feature", s);
  dec_alibi_per_batch(p), dec_sinks(p), p->softcap = 50.0f, p->causal = 1, p->window_left = 7;
  p->q.dtype = p->k_cache.dtype = p->v_cache.dtype = p->out.dtype = AOTK_DTYPE_FLOAT16;
  add_new_kv(p, &s, 3);
  p->k_new.dtype = p->v_new.dtype = AOTK_DTYPE_FLOAT16;
  /* Not appending: k_new and v_new NULL, whatever their other fields hold. */
  p = add_decode_edge_case(cases, &count, "k_new and v_new NULL, their other fields garbage", s);
  memset(&p->k_new, 0xEE, sizeof p->k_new);
  memset(&p->v_new, 0x5A, sizeof p->v_new);
  p->k_new.data = p->v_new.data = NULL;
  /* Packed queries (cu_seqlens_q). */
  add_decode_edge_case(cases, &count, "varlen, 100 tokens, at most 40", default_varlen_shape);
  add_decode_edge_case(cases, &count, "varlen, paged", default_varlen_paged_shape);
  s = default_varlen_shape;
  s.seqlen_q = 5000, s.total_q = 12000;
  add_decode_edge_case(cases, &count, "varlen, max_seqlen_q 5000 (no 16-token limit)", s);
  s = default_varlen_shape;
  s.seqlen_q = 1, s.total_q = 1, s.batch = 1, s.heads_q = s.heads_kv = 1;
  add_decode_edge_case(cases, &count, "varlen, one request of one token, one head", s);
  s.seqlen_q = INT32_MAX;
  add_decode_edge_case(cases, &count, "varlen, max_seqlen_q 2^31 - 1, one head (2^31 - 1 query rows)", s);
  s = default_varlen_shape;
  s.seqlen_q = 1;
  add_decode_edge_case(cases, &count, "varlen, max_seqlen_q 1 below total_q / batch (tokens cut)", s);
  add_decode_edge_case(cases, &count, "varlen, num_splits 1", default_varlen_shape)->num_splits = 1;
  add_decode_edge_case(cases, &count, "varlen, max_seqlen_k 300", default_varlen_shape)->max_seqlen_k = 300;
  s = default_varlen_shape;
  s.dtype = AOTK_DTYPE_FLOAT16, s.with_lse = false, s.head_dim_qk = 192, s.head_dim_v = 64;
  p = add_decode_edge_case(cases, &count, "varlen, fp16, no lse, head dims (192, 64), every feature", s);
  dec_alibi_per_batch(p), dec_sinks(p), p->softcap = 50.0f, p->causal = 1, p->window_left = 7;
  p = add_decode_edge_case(cases, &count, "varlen, out stride 0 over one head", default_varlen_shape);
  p->q.shape[1] = p->out.shape[1] = p->lse.shape[0] = 1, p->out.strides[1] = 0;
  p->k_cache.shape[2] = p->v_cache.shape[2] = 1;
  p = add_decode_edge_case(cases, &count, "varlen, q broadcast over tokens (stride 0)", default_varlen_shape);
  p->q.strides[0] = 0;
  p = add_decode_edge_case(cases, &count, "varlen, k_new and v_new NULL, their other fields garbage",
                           default_varlen_shape);
  memset(&p->k_new, 0xEE, sizeof p->k_new);
  memset(&p->v_new, 0x5A, sizeof p->v_new);
  p->k_new.data = p->v_new.data = NULL;
  /* Dense: max_seqlen_q is read only with cu_seqlens_q, and cu_seqlens_q's other fields without its data. */
  add_decode_edge_case(cases, &count, "dense, max_seqlen_q -5 (unread)", default_decode_shape)->max_seqlen_q = -5;
  p = add_decode_edge_case(cases, &count, "dense, cu_seqlens_q.data NULL, its other fields garbage",
                           default_decode_shape);
  memset(&p->cu_seqlens_q, 0xEE, sizeof p->cu_seqlens_q);
  p->cu_seqlens_q.data = NULL;

  for (int i = 0; i < count; i++) {
    const aotk_decode_params *params = &cases[i].call.params;
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_decode_query %s (%s)", cases[i].what, aotk_status_name(status),
              aotk_last_error());
    const int launches = 1 + (info.num_splits > 1) + (params->k_new.data != NULL);
    CHECK_MSG(info.launches == launches && (info.workspace_bytes > 0) == (info.num_splits > 1) &&
                  ((info.features & AOTK_FEATURE_APPEND_KV) != 0) == (params->k_new.data != NULL) &&
                  ((info.features & AOTK_FEATURE_VARLEN) != 0) == (params->cu_seqlens_q.data != NULL) &&
                  (params->cu_seqlens_q.data == NULL || info.num_splits == 1),
              "%s: %d launches, %d splits, %zu bytes of workspace, features %#x", cases[i].what, info.launches,
              info.num_splits, info.workspace_bytes, info.features);
    reset_calls();
    void *workspace = info.workspace_bytes > 0 ? FAKE_WORKSPACE : NULL;
    status = aotk_attn_decode(params, workspace, info.workspace_bytes, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_decode %s (%s)", cases[i].what, aotk_status_name(status),
              aotk_last_error());
    CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == info.launches, "%s: %d launches, the query says %d", cases[i].what,
              fake.calls[CALL_cuLaunchKernel], info.launches);
  }
  printf("    %d cases\n", count);
  uninstall_fake_gpu();
}

/* ---- decoding: the split, its workspace, the query ---- */

/* The split choice, through aotk_decode_query on the fake's 132 SMs, worked by hand from the rule in
 * src/aotk_decode.c's comment (flash-attn's num_splits_heuristic): split only when batch * heads_kv *
 * row chunks programs are fewer than 4/5 of the SMs; the efficiency of n splits is programs * n over the
 * SMs of the waves they take; take the smallest n within 85% of the best; each split keeps at least 256
 * keys (and at most 256 splits). Split lengths are whole key blocks (block_n: 128 keys for these head
 * dims of 128, whatever the row tile), so the count is then what ceil(keys / split_keys) gives. A forced
 * num_splits skips the rule but not the blocks. */
static void test_decode_split_choice(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const struct {
    const char *what;
    int64_t batch, heads_q, heads_kv, seqlen_q, capacity, page_size;
    int32_t num_splits, max_seqlen_k;
    int64_t splits, split_keys; /* split_keys 0: one split */
  } cases[] = {
      {"64 requests x 8 kv heads = 512 programs fill 132 SMs: no split", 64, 32, 8, 1, 32768, 0, 0, 0, 1, 0},
      {"105 programs (132 x 4/5): no split", 105, 4, 1, 1, 32768, 0, 0, 0, 1, 0},
      {"104 programs: 5 splits (520 in 4 waves, 98%; 1 to 4 give 79%; 33 give 100%) of ceil(32768 / 5) = 6554 keys, "
       "6656 in whole blocks", 13, 32, 8, 1, 32768, 0, 0, 0, 5, 6656},
      {"1 request x 8 kv heads, 32768 keys: 15 splits (120 of 132 SMs, 91%; 14 give 84.8% of the best, 33's 100%) of "
       "2185 keys, 2304 in whole blocks", 1, 32, 8, 1, 32768, 0, 0, 0, 15, 2304},
      {"the comment's example, 2 requests x 8 kv heads: 8 splits (128 programs, 97%)", 2, 16, 8, 1, 65536, 0, 0, 0, 8,
       8192},
      {"a group of 128 x 16 tokens is 32 row chunks of 64: 32 programs, 4 splits (97%)", 1, 128, 1, 16, 32768, 0, 0,
       0, 4, 8192},
      {"200 keys: fewer than two splits of 256", 1, 32, 8, 1, 200, 0, 0, 0, 1, 0},
      {"300 keys: two splits would hold fewer than 256 each", 1, 32, 8, 1, 300, 0, 0, 0, 1, 0},
      {"1024 keys, 16 programs: 4 splits of 256 (the most that keep 256 each)", 2, 32, 8, 1, 1024, 0, 0, 0, 4, 256},
      {"max_seqlen_k 300 bounds a 32768-key cache: no split", 1, 32, 8, 1, 32768, 0, 0, 300, 1, 0},
      {"max_seqlen_k 4096: 14 splits asked (85%) of 293 keys, 384-key splits make 11", 1, 32, 8, 1, 32768, 0, 0, 4096,
       11, 384},
      {"max_seqlen_k above the capacity: the capacity", 1, 32, 8, 1, 32768, 0, 0, 100000, 15, 2304},
      {"forced 64 splits of 200 keys: one 128-key block each, 2", 1, 32, 8, 1, 200, 0, 64, 0, 2, 128},
      {"forced 256 splits of 32768 keys: 128 keys each", 1, 32, 8, 1, 32768, 0, 256, 0, 256, 128},
      {"forced 7 splits of 1000 keys: 143 keys, 256 in whole blocks, so 4", 3, 8, 2, 2, 1000, 0, 7, 0, 4, 256},
      {"forced 3 splits of 1000 keys: 384 keys each", 3, 8, 2, 2, 1000, 0, 3, 0, 3, 384},
      {"forced 1 split where the rule would take 15", 1, 32, 8, 1, 32768, 0, 1, 0, 1, 0},
      {"forced 2 splits of 64 keys: one block, one split", 1, 32, 8, 1, 64, 0, 2, 0, 1, 0},
      {"paged, 2048 pages of 16 keys: as the contiguous 32768", 1, 32, 8, 1, 32768, 16, 0, 0, 15, 2304},
      {"paged, 128 pages of 256 keys (whole blocks, one lookup each): as the contiguous 32768", 1, 32, 8, 1, 32768,
       256, 0, 0, 15, 2304},
      {"paged, 64 pages of 100 keys: 25 splits allowed, the best 16's 97%, 14 within 85% of it, 512-key splits: 13",
       1, 32, 8, 1, 6400, 100, 0, 0, 13, 512},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    decode_shape s = {AOTK_DTYPE_BFLOAT16, cases[i].batch, cases[i].seqlen_q, cases[i].heads_q, cases[i].heads_kv,
                      128, 128, cases[i].capacity, cases[i].page_size, 0, true, 0};
    if (s.page_size > 0) s.num_pages = s.capacity / s.page_size;
    aotk_decode_params params = decode_params_for(s);
    params.num_splits = cases[i].num_splits, params.max_seqlen_k = cases[i].max_seqlen_k;
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(info.num_splits == cases[i].splits, "%s: %d splits, expected %lld", cases[i].what, info.num_splits,
              (long long)cases[i].splits);
    const size_t bytes = decode_workspace_bytes(&s, cases[i].splits);
    CHECK_MSG(info.workspace_bytes == bytes, "%s: workspace_bytes %zu, expected %zu", cases[i].what,
              info.workspace_bytes, bytes);
    CHECK_MSG(((info.features & AOTK_FEATURE_SPLIT_KV) != 0) == (cases[i].splits > 1) &&
                  info.launches == (cases[i].splits > 1 ? 2 : 1),
              "%s: features %#x, %d launches", cases[i].what, info.features, info.launches);
    char what[200];
    snprintf(what, sizeof what, "split choice: %s", cases[i].what);
    check_decode(what, &params, &s, &sel_sm90, cases[i].splits, cases[i].split_keys,
                 FAKE_WORKSPACE);
    /* The split depends on sizes the host sees, not on the new tokens: appending keeps it (and the
     * workspace), one launch more. */
    add_new_kv(&params, &s, 1 + (int64_t)i % 5);
    snprintf(what, sizeof what, "split choice, appending %lld tokens: %s", 1 + (long long)i % 5, cases[i].what);
    check_decode(what, &params, &s, &sel_sm90, cases[i].splits, cases[i].split_keys, FAKE_WORKSPACE);
  }
  /* The workspace formula's two parts, by hand: 15 splits x 1 request x 1 token x 32 heads = 480 rows of
   * 128 floats (245760 bytes) and 480 LSEs (1920 bytes). */
  decode_shape s = {AOTK_DTYPE_BFLOAT16, 1, 1, 32, 8, 128, 128, 32768, 0, 0, true, 0};
  CHECK(decode_workspace_bytes(&s, 15) == 245760 + 1920);
  /* head_dim_v 72 pads partial rows to 80 floats: 11 x 1 x 3 x 5 = 165 rows of them (52800 bytes), and
   * 165 LSEs (660 bytes) pad to 672: one program (a group of 5 x 3 tokens in one 16-row chunk of 128-key
   * blocks), 4096 keys allow 16 splits of 256, the rule takes 14 (n / 132 within 85% of 16 / 132), of
   * ceil(4096 / 14) = 293 keys, 384 in whole blocks: 11 splits. */
  s = (decode_shape){AOTK_DTYPE_FLOAT16, 1, 3, 5, 1, 64, 72, 4096, 0, 0, true, 0};
  CHECK(decode_workspace_bytes(&s, 11) == 52800 + 672);
  aotk_decode_params params = strided_decode_params(s);
  check_decode("head dims (64, 72), 3 tokens of a group of 5", &params, &s, &sel_sm90, 11, 384,
               FAKE_WORKSPACE);
  uninstall_fake_gpu();
}

/* ---- decoding: what runs, and with which arguments ---- */

static void test_decode_launch_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  decode_shape s = default_decode_shape;
  aotk_decode_params params = strided_decode_params(s);
  params.num_splits = 1;
  check_decode("contiguous, bf16 d128 GQA 4, two tokens, strided, no split", &params, &s, &sel_sm90, 1, 0, NULL);
  CHECK_MSG(fake.loaded_images == 1, "loaded %d images", fake.loaded_images);
  params.num_splits = 3;
  check_decode("contiguous, 3 splits of 384 keys", &params, &s, &sel_sm90, 3, 384, FAKE_WORKSPACE);
  CHECK_MSG(fake.loaded_images == 2, "loaded %d images, expected the decoding kernel and the merge",
            fake.loaded_images);
  /* The rule's own choice for 6 programs and 1000 keys: 3 splits (the most that keep 256 keys each). */
  params.num_splits = 0;
  check_decode("contiguous, the rule's split", &params, &s, &sel_sm90, 3, 384, byte_offset(FAKE_WORKSPACE, 4096));
  CHECK_MSG(fake.loaded_images == 2 && fake.calls[CALL_cuLibraryLoadData] == 0, "loaded %d images",
            fake.loaded_images);

  s = default_paged_shape;
  params = strided_decode_params(s);
  params.num_splits = 1;
  check_decode("paged, 64 pages of 16 keys, strided, no split", &params, &s, &sel_sm90, 1, 0, NULL);
  params.num_splits = 4;
  check_decode("paged, 4 splits of 256 keys", &params, &s, &sel_sm90, 4, 256, FAKE_WORKSPACE);

  /* Every run-time feature at once, float16, no lse, ALiBi per request with padded rows. */
  s.dtype = AOTK_DTYPE_FLOAT16, s.with_lse = false;
  params = strided_decode_params(s);
  params.causal = 1, params.window_left = 40, params.softcap = 30.0f, params.softmax_scale = 0.05f;
  params.alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 3, 8);
  params.alibi_slopes.strides[0] = 16;
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 8);
  params.num_splits = 2;
  check_decode("paged, fp16, causal, window, softcap, ALiBi, sinks, no lse, 2 splits", &params, &s, &sel_sm90, 2, 512,
               FAKE_WORKSPACE);
  params.num_splits = 1, params.causal = 0, params.window_left = -1, params.window_right = 7;
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 8);
  check_decode("paged, fp16, window_right 7, ALiBi per head, sinks, no split", &params, &s, &sel_sm90, 1, 0, NULL);

  /* MQA, a group of 32 query heads x 4 tokens = 128 rows: the 64-row tile, two chunks per request. */
  s = (decode_shape){AOTK_DTYPE_BFLOAT16, 2, 4, 32, 1, 64, 64, 4096, 0, 0, true, 0};
  params = strided_decode_params(s);
  params.num_splits = 5;
  check_decode("MQA, 128 rows in two 64-row chunks, d64, 5 splits", &params, &s, &sel_sm90, 5, 832, FAKE_WORKSPACE);
  uninstall_fake_gpu();

  /* Appending: the appending kernel first, then the decoding kernel (told seqlen_new), then the merge. */
  install_fake_gpu(90, SHARED_SM90);
  s = default_decode_shape;
  params = strided_decode_params(s);
  add_strided_new_kv(&params, &s, 3);
  params.num_splits = 1;
  check_decode("appending 3 tokens, contiguous, strided, no split", &params, &s, &sel_sm90, 1, 0, NULL);
  CHECK_MSG(fake.loaded_images == 2, "loaded %d images, expected the appending and the decoding kernels",
            fake.loaded_images);
  params.num_splits = 3;
  check_decode("appending 3 tokens, contiguous, 3 splits", &params, &s, &sel_sm90, 3, 384, FAKE_WORKSPACE);
  CHECK_MSG(fake.loaded_images == 3, "loaded %d images, expected the merge too", fake.loaded_images);
  add_new_kv(&params, &s, 1);
  check_decode("appending one token, contiguous (k_new and v_new contiguous), 3 splits", &params, &s, &sel_sm90, 3,
               384, FAKE_WORKSPACE);
  s = default_paged_shape;
  params = strided_decode_params(s);
  add_strided_new_kv(&params, &s, 7);
  params.num_splits = 1;
  check_decode("appending 7 tokens, paged, strided, no split", &params, &s, &sel_sm90, 1, 0, NULL);
  params.num_splits = 4;
  check_decode("appending 7 tokens, paged, 4 splits", &params, &s, &sel_sm90, 4, 256, FAKE_WORKSPACE);
  /* Head dims (192, 64) in the (256, 128) pair, fp16, every feature, no lse, 2 splits. */
  s = (decode_shape){AOTK_DTYPE_FLOAT16, 2, 1, 6, 3, 192, 64, 640, 0, 0, false, 0};
  params = strided_decode_params(s);
  add_strided_new_kv(&params, &s, 16);
  params.causal = 1, params.window_left = 40, params.softcap = 30.0f;
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 6);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 6);
  params.num_splits = 2;
  check_decode("appending 16 tokens, fp16, head dims (192, 64), every feature, 2 splits", &params, &s, &sel_sm90, 2,
               320, FAKE_WORKSPACE);
  uninstall_fake_gpu();

  /* The other targets: sm_80 cubins on sm_80 and sm_86, the sm_80 PTX on sm_120. */
  static const gpu gpus[] = {{80, SHARED_SM80, 80, 0}, {86, SHARED_SM86, 80, 0}, {120, SHARED_SM120, 80, 1}};
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    char what[64];
    snprintf(what, sizeof what, "cc %d, paged, 4 splits", gpus[g].compute_capability);
    s = default_paged_shape;
    params = strided_decode_params(s);
    params.num_splits = 4;
    check_decode(what, &params, &s, &gpus[g], 4, 256, FAKE_WORKSPACE);
    CHECK_MSG(gpus[g].from_ptx ? fake.loaded_ptx == 2 : fake.loaded_elf == 2, "%s: loaded %d ELF, %d PTX", what,
              fake.loaded_elf, fake.loaded_ptx);
    snprintf(what, sizeof what, "cc %d, paged, appending, 4 splits", gpus[g].compute_capability);
    add_strided_new_kv(&params, &s, 2);
    check_decode(what, &params, &s, &gpus[g], 4, 256, FAKE_WORKSPACE);
    CHECK_MSG(gpus[g].from_ptx ? fake.loaded_ptx == 3 : fake.loaded_elf == 3, "%s: loaded %d ELF, %d PTX", what,
              fake.loaded_elf, fake.loaded_ptx);
  }
  uninstall_fake_gpu();
}

/* Packed queries (include/aotk.h, cu_seqlens_q): a prefill over the cache, one launch, unsplit, no
 * workspace, the tile chosen by G * max_seqlen_q (the 32-row one above 16 rows, the 64-row one above
 * 32), on a grid of batch * heads_kv * ceil(G * max_seqlen_q / block_m); check_decode checks the packed
 * strides, the CuSeqlensQ pointer and FLAG_VARLEN. The literals are worked by hand. */
static void test_decode_varlen(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const struct {
    const char *what;
    int64_t batch, max_seqlen_q, heads_q, heads_kv, total_q, page_size;
    int32_t block_m;
    int64_t grid;
  } cases[] = {
      {"G 4 x 40 tokens = 160 rows: three 64-row chunks x 3 requests x 2 kv heads", 3, 40, 8, 2, 100, 0, 64, 18},
      {"the same over 64 pages of 16 keys", 3, 40, 8, 2, 100, 16, 64, 18},
      {"G 4 x 4 tokens = 16 rows: one 16-row chunk", 3, 4, 8, 2, 10, 0, 16, 6},
      {"G 1 x 16 tokens = 16 rows: the 16-row tile", 2, 16, 4, 4, 20, 0, 16, 8},
      {"G 1 x 17 tokens = 17 rows: the 32-row tile (dense refuses 17 tokens)", 2, 17, 4, 4, 20, 0, 32, 8},
      {"G 8 x 3 tokens = 24 rows: the 32-row tile", 1, 3, 8, 1, 3, 0, 32, 1},
      {"G 11 x 3 tokens = 33 rows: the 64-row tile", 1, 3, 11, 1, 3, 0, 64, 1},
      {"G 4 x 8 tokens = 32 rows over 4 pages of 256 keys: the 32-row tile", 3, 8, 8, 2, 20, 256, 32, 6},
      {"MQA, G 32 x 5000 tokens: 2500 chunks x 2 requests", 2, 5000, 32, 1, 9000, 0, 64, 5000},
      {"paged, 5000 tokens, G 1: 79 chunks x 4 requests x 8 kv heads", 4, 5000, 8, 8, 12345, 16, 64, 2528},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    decode_shape s = cases[i].page_size > 0 ? default_varlen_paged_shape : default_varlen_shape;
    if (s.page_size > 0) s.page_size = cases[i].page_size; /* a pool of 200 pages, whatever their size */
    s.batch = cases[i].batch, s.seqlen_q = cases[i].max_seqlen_q, s.heads_q = cases[i].heads_q;
    s.heads_kv = cases[i].heads_kv, s.total_q = cases[i].total_q;
    aotk_decode_params params = strided_decode_params(s);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(info.block_m == cases[i].block_m && info.grid == cases[i].grid && info.num_splits == 1 &&
                  info.launches == 1 && info.workspace_bytes == 0 && (info.features & AOTK_FEATURE_VARLEN) != 0,
              "%s: block_m %d, grid %lld, %d splits, %d launches, %zu bytes, features %#x", cases[i].what,
              info.block_m, (long long)info.grid, info.num_splits, info.launches, info.workspace_bytes,
              info.features);
    char what[200];
    snprintf(what, sizeof what, "varlen: %s", cases[i].what);
    check_decode(what, &params, &s, &sel_sm90, 1, 0, NULL);
    /* num_splits 0 (aotk chooses) and 1 are the same call. */
    params.num_splits = 1;
    snprintf(what, sizeof what, "varlen, num_splits 1: %s", cases[i].what);
    check_decode(what, &params, &s, &sel_sm90, 1, 0, NULL);
  }

  /* Where the dense call splits (1 request x 8 kv heads over 32768 keys: 15 splits), the packed one does
   * not: one launch, no workspace, and a NULL workspace is fine. */
  decode_shape s = {AOTK_DTYPE_BFLOAT16, 1, 1, 32, 8, 128, 128, 32768, 0, 0, true, 0};
  aotk_decode_params params = decode_params_for(s);
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK && info.num_splits == 15);
  s.total_q = 1;
  params = decode_params_for(s);
  check_decode("varlen, one token where the dense call takes 15 splits", &params, &s, &sel_sm90, 1, 0, NULL);

  /* Every run-time feature at once, float16, no lse, ALiBi per request, head dims (192, 64). */
  s = default_varlen_paged_shape;
  s.dtype = AOTK_DTYPE_FLOAT16, s.with_lse = false, s.head_dim_qk = 192, s.head_dim_v = 64;
  params = strided_decode_params(s);
  params.causal = 1, params.window_left = 40, params.softcap = 30.0f, params.softmax_scale = 0.05f;
  params.alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 3, 8);
  params.alibi_slopes.strides[0] = 16;
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 8);
  check_decode("varlen, paged, fp16, (192, 64), causal, window, softcap, ALiBi, sinks, no lse", &params, &s,
               &sel_sm90, 1, 0, NULL);

  /* max_seqlen_q 5000 is a prefill chunk; the same 5000 or even 17 tokens dense are refused. */
  s = default_varlen_shape;
  s.seqlen_q = 5000, s.total_q = 12000;
  params = decode_params_for(s);
  info = (aotk_kernel_info)AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
  CHECK_MSG(status == AOTK_OK && info.grid == 3 * 2 * 313, "max_seqlen_q 5000: %s (%s), grid %lld",
            aotk_status_name(status), aotk_last_error(), (long long)info.grid);
  static const int64_t dense_tokens[] = {17, 5000};
  for (size_t i = 0; i < sizeof dense_tokens / sizeof dense_tokens[0]; i++) {
    s = default_decode_shape;
    s.seqlen_q = dense_tokens[i];
    params = decode_params_for(s);
    params.max_seqlen_q = (int32_t)dense_tokens[i]; /* unread without cu_seqlens_q */
    reset_calls();
    status = aotk_attn_decode(&params, NULL, 0, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE && message_mentions("cu_seqlens_q") && total_calls() == 0,
              "dense seqlen_q %lld: %s (%s)", (long long)dense_tokens[i], aotk_status_name(status), aotk_last_error());
  }
  /* Query rows past int32: 3 requests x 2^31 - 1 tokens x 8 heads. */
  s = default_varlen_shape;
  s.seqlen_q = INT32_MAX;
  params = decode_params_for(s);
  status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
  CHECK_MSG(status == AOTK_ERROR_SIZE_OVERFLOW && message_mentions("batch * seqlen_q * heads_q"),
            "varlen, max_seqlen_q 2^31 - 1 x 3 requests x 8 heads: %s (%s)", aotk_status_name(status),
            aotk_last_error());
  uninstall_fake_gpu();

  /* The other targets: sm_80 cubins on sm_80 and sm_86, the sm_80 PTX on sm_120. */
  static const gpu gpus[] = {{80, SHARED_SM80, 80, 0}, {86, SHARED_SM86, 80, 0}, {120, SHARED_SM120, 80, 1}};
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    char what[64];
    snprintf(what, sizeof what, "cc %d, varlen, paged", gpus[g].compute_capability);
    s = default_varlen_paged_shape;
    params = strided_decode_params(s);
    check_decode(what, &params, &s, &gpus[g], 1, 0, NULL);
    CHECK_MSG(gpus[g].from_ptx ? fake.loaded_ptx == 1 : fake.loaded_elf == 1, "%s: loaded %d ELF, %d PTX", what,
              fake.loaded_elf, fake.loaded_ptx);
    uninstall_fake_gpu();
  }
}

/* The decoding family, as literals (src/aotk_decode.c, plan_decode): a contiguous cache runs
 * attn_decode; a paged one runs attn_decode_paged_blocks (one page lookup per block of keys) when its
 * page size is a multiple of the chosen row's block_n (128 keys up to head dim 128, 64 at 256), else
 * attn_decode_paged (a lookup per key row). The tile is chosen by G * seqlen_q: 16 rows up to 16, 32 up
 * to 32, then 64 (with 64-key blocks). check_decode then checks the launches, the split's merge too. */
static void test_decode_family_choice(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const struct {
    const char *what;
    int64_t heads_q, head_dim, page_size; /* 3 requests x 2 tokens, 2 kv heads, 1024 keys */
    int32_t num_splits;
    const char *family; /* the name's prefix, through the dtype */
    int32_t block_m, block_n;
    int64_t splits, split_keys;
  } cases[] = {
      {"contiguous, G 4 x 2 tokens", 8, 128, 0, 1, "attn_decode_bf16_", 16, 128, 1, 0},
      {"contiguous, 4 splits of 256 keys", 8, 128, 0, 4, "attn_decode_bf16_", 16, 128, 4, 256},
      {"pages of 16 keys: a lookup per key row", 8, 128, 16, 1, "attn_decode_paged_bf16_", 16, 128, 1, 0},
      {"pages of 64 keys hold half a 128-key block: a lookup per key row", 8, 128, 64, 1, "attn_decode_paged_bf16_",
       16, 128, 1, 0},
      {"pages of 256 keys (two 128-key blocks): a lookup per block", 8, 128, 256, 1, "attn_decode_paged_blocks_bf16_",
       16, 128, 1, 0},
      {"pages of 256 keys, 4 splits of 256 keys", 8, 128, 256, 4, "attn_decode_paged_blocks_bf16_", 16, 128, 4, 256},
      {"pages of 128 keys, G 16 x 2 tokens = 32 rows: the 32-row tile", 32, 128, 128, 1,
       "attn_decode_paged_blocks_bf16_", 32, 128, 1, 0},
      {"pages of 128 keys, G 32 x 2 tokens = 64 rows: the 64-row tile of 64-key blocks", 64, 128, 128, 1,
       "attn_decode_paged_blocks_bf16_", 64, 64, 1, 0},
      {"head dim 256, pages of 64 keys (one 64-key block): a lookup per block", 8, 256, 64, 1,
       "attn_decode_paged_blocks_bf16_d256_", 16, 64, 1, 0},
      {"head dim 256, pages of 64 keys, 7 splits forced: 147 keys, 192 in whole 64-key blocks, so 6", 8, 256, 64, 7,
       "attn_decode_paged_blocks_bf16_d256_", 16, 64, 6, 192},
      {"head dim 256, pages of 16 keys: a lookup per key row", 8, 256, 16, 1, "attn_decode_paged_bf16_d256_", 16, 64,
       1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    decode_shape s = default_decode_shape;
    s.heads_q = cases[i].heads_q, s.head_dim_qk = s.head_dim_v = cases[i].head_dim, s.capacity = 1024;
    if (cases[i].page_size > 0) s.page_size = cases[i].page_size, s.num_pages = 3 * 1024 / cases[i].page_size;
    aotk_decode_params params = strided_decode_params(s);
    params.num_splits = cases[i].num_splits;
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(strncmp(info.kernel_name, cases[i].family, strlen(cases[i].family)) == 0 &&
                  info.block_m == cases[i].block_m && info.block_n == cases[i].block_n &&
                  info.num_splits == cases[i].splits,
              "%s: %s (block %d x %d, %d splits), expected %s... (block %d x %d, %lld splits)", cases[i].what,
              info.kernel_name, info.block_m, info.block_n, info.num_splits, cases[i].family, cases[i].block_m,
              cases[i].block_n, (long long)cases[i].splits);
    char what[160];
    snprintf(what, sizeof what, "family choice: %s", cases[i].what);
    check_decode(what, &params, &s, &sel_sm90, cases[i].splits, cases[i].split_keys, FAKE_WORKSPACE);
  }
  uninstall_fake_gpu();
}

/* The feature bits and split counts aotk_decode_query reports, as literals. */
static void test_decode_features(void) {
  install_fake_gpu(90, SHARED_SM90);
  enum { F_CAUSAL = AOTK_FEATURE_CAUSAL, F_WINDOW = AOTK_FEATURE_WINDOW, F_SOFTCAP = AOTK_FEATURE_SOFTCAP };
  enum { F_ALIBI = AOTK_FEATURE_ALIBI, F_SINKS = AOTK_FEATURE_SINKS, F_PADDED = AOTK_FEATURE_PADDED_HEAD_DIM };
  enum { F_PAGED = AOTK_FEATURE_PAGED_KV, F_SPLIT = AOTK_FEATURE_SPLIT_KV, F_APPEND = AOTK_FEATURE_APPEND_KV };
  static const struct {
    const char *what;
    bool paged;
    int64_t head_dim_qk, head_dim_v;
    int32_t causal, window_left, window_right, num_splits;
    float softcap;
    bool alibi, sinks;
    uint32_t features;
    int32_t splits;
    int64_t seqlen_new; /* appending: k_new and v_new of this many tokens; 0: none */
  } cases[] = {
      {"nothing", false, 128, 128, 0, -1, -1, 1, 0.0f, false, false, 0, 1, 0},
      {"causal", false, 128, 128, 1, -1, -1, 1, 0.0f, false, false, F_CAUSAL, 1, 0},
      {"causal, window_right 0", false, 128, 128, 1, -1, 0, 1, 0.0f, false, false, F_CAUSAL, 1, 0},
      {"causal, window_left 100", false, 128, 128, 1, 100, -1, 1, 0.0f, false, false, F_CAUSAL | F_WINDOW, 1, 0},
      {"window_left 100", false, 128, 128, 0, 100, -1, 1, 0.0f, false, false, F_WINDOW, 1, 0},
      {"window_right 5", false, 128, 128, 0, -1, 5, 1, 0.0f, false, false, F_WINDOW, 1, 0},
      {"window 0, 0", false, 128, 128, 0, 0, 0, 1, 0.0f, false, false, F_WINDOW, 1, 0},
      {"softcap", false, 128, 128, 0, -1, -1, 1, 30.0f, false, false, F_SOFTCAP, 1, 0},
      {"ALiBi", false, 128, 128, 0, -1, -1, 1, 0.0f, true, false, F_ALIBI, 1, 0},
      {"sinks", false, 128, 128, 0, -1, -1, 1, 0.0f, false, true, F_SINKS, 1, 0},
      {"head dims 80 (in 128)", false, 80, 80, 0, -1, -1, 1, 0.0f, false, false, F_PADDED, 1, 0},
      {"head dims (256, 128): compiled", false, 256, 128, 0, -1, -1, 1, 0.0f, false, false, 0, 1, 0},
      {"head dims (192, 128) (in (256, 128))", false, 192, 128, 0, -1, -1, 1, 0.0f, false, false, F_PADDED, 1, 0},
      {"head dims (64, 128) (in (128, 128))", false, 64, 128, 0, -1, -1, 1, 0.0f, false, false, F_PADDED, 1, 0},
      {"paged", true, 128, 128, 0, -1, -1, 1, 0.0f, false, false, F_PAGED, 1, 0},
      {"4 splits", false, 128, 128, 0, -1, -1, 4, 0.0f, false, false, F_SPLIT, 4, 0},
      {"paged, 4 splits, causal, sinks", true, 128, 128, 1, -1, -1, 4, 0.0f, false, true,
       F_PAGED | F_SPLIT | F_CAUSAL | F_SINKS, 4, 0},
      {"everything", true, 48, 48, 1, 9, 0, 2, 10.0f, true, true,
       F_PAGED | F_SPLIT | F_CAUSAL | F_WINDOW | F_SOFTCAP | F_ALIBI | F_SINKS | F_PADDED, 2, 0},
      {"appending", false, 128, 128, 0, -1, -1, 1, 0.0f, false, false, F_APPEND, 1, 1},
      {"appending 16 tokens, paged", true, 128, 128, 0, -1, -1, 1, 0.0f, false, false, F_PAGED | F_APPEND, 1, 16},
      {"appending, 4 splits", false, 128, 128, 0, -1, -1, 4, 0.0f, false, false, F_SPLIT | F_APPEND, 4, 3},
      {"appending, everything", true, 48, 48, 1, 9, 0, 2, 10.0f, true, true,
       F_PAGED | F_SPLIT | F_CAUSAL | F_WINDOW | F_SOFTCAP | F_ALIBI | F_SINKS | F_PADDED | F_APPEND, 2, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    decode_shape s = cases[i].paged ? default_paged_shape : default_decode_shape;
    s.head_dim_qk = cases[i].head_dim_qk, s.head_dim_v = cases[i].head_dim_v;
    aotk_decode_params params = decode_params_for(s);
    params.causal = cases[i].causal, params.window_left = cases[i].window_left;
    params.window_right = cases[i].window_right, params.num_splits = cases[i].num_splits;
    params.softcap = cases[i].softcap;
    if (cases[i].alibi) dec_alibi(&params);
    if (cases[i].sinks) dec_sinks(&params);
    if (cases[i].seqlen_new > 0) add_new_kv(&params, &s, cases[i].seqlen_new);
    aotk_kernel_info info;
    poison_info(&info);
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    const int launches = 1 + (cases[i].splits > 1) + (cases[i].seqlen_new > 0);
    CHECK_MSG(info.features == cases[i].features && info.num_splits == cases[i].splits && info.launches == launches,
              "%s: features %#x, %d splits, %d launches; expected %#x, %d, %d", cases[i].what, info.features,
              info.num_splits, info.launches, cases[i].features, cases[i].splits, launches);
  }
  uninstall_fake_gpu();
}

/* The decoding and merge queries answer their own ops; aotk_query and aotk_sel_query send callers to
 * them; an older caller's shorter info struct gets no num_splits. */
static void test_decode_query_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_decode_params params = valid_decode_params();
  params.num_splits = 4;
  reset_calls();
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, NULL) == AOTK_ERROR_NULL_POINTER && message_mentions("info"));
  aotk_kernel_info info;
  poison_info(&info);
  info.struct_size = 0;
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_ERROR_STRUCT_SIZE &&
        message_mentions("struct_size"));
  CHECK(aotk_decode_query(AOTK_OP_DECODE, NULL, &info) == AOTK_ERROR_STRUCT_SIZE);

  static const int not_decode[] = {AOTK_OP_ATTN_FWD, AOTK_OP_ATTN_BWD, AOTK_OP_SEL_FWD, AOTK_OP_SEL_BWD,
                                   AOTK_OP_MERGE,    0,                -1,              1000};
  for (size_t i = 0; i < sizeof not_decode / sizeof not_decode[0]; i++) {
    poison_info(&info);
    aotk_status status = aotk_decode_query((aotk_op)not_decode[i], &params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE && message_mentions("AOTK_OP_DECODE"),
              "aotk_decode_query(op %d): %s (%s)", not_decode[i], aotk_status_name(status), aotk_last_error());
    CHECK(info_untouched(&info));
    /* The op is checked before the params. */
    CHECK(aotk_decode_query((aotk_op)not_decode[i], NULL, &info) == AOTK_ERROR_INVALID_VALUE);
  }
  aotk_merge_params merge_params = AOTK_MERGE_PARAMS_INIT;
  static const int not_merge[] = {AOTK_OP_ATTN_FWD, AOTK_OP_ATTN_BWD, AOTK_OP_SEL_FWD, AOTK_OP_SEL_BWD,
                                  AOTK_OP_DECODE,   0,                -1,              1000};
  for (size_t i = 0; i < sizeof not_merge / sizeof not_merge[0]; i++) {
    poison_info(&info);
    aotk_status status = aotk_merge_query((aotk_op)not_merge[i], &merge_params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE && message_mentions("AOTK_OP_MERGE"),
              "aotk_merge_query(op %d): %s (%s)", not_merge[i], aotk_status_name(status), aotk_last_error());
    CHECK(info_untouched(&info));
  }
  CHECK(aotk_merge_query(AOTK_OP_MERGE, &merge_params, NULL) == AOTK_ERROR_NULL_POINTER && message_mentions("info"));
  /* The other queries name the right one. */
  aotk_attn_params attn_params = valid_params();
  aotk_sel_params sel_params = valid_sel_params();
  static const struct {
    aotk_op op;
    const char *query;
  } elsewhere[] = {{AOTK_OP_DECODE, "aotk_decode_query"}, {AOTK_OP_MERGE, "aotk_merge_query"}};
  for (size_t i = 0; i < 2; i++) {
    poison_info(&info);
    aotk_status status = aotk_query(elsewhere[i].op, &attn_params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE && message_mentions(elsewhere[i].query),
              "aotk_query(op %d): %s (%s)", (int)elsewhere[i].op, aotk_status_name(status), aotk_last_error());
    CHECK(info_untouched(&info));
    status = aotk_sel_query(elsewhere[i].op, &sel_params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "aotk_sel_query(op %d): %s", (int)elsewhere[i].op,
              aotk_status_name(status));
    CHECK(info_untouched(&info));
  }
  CHECK_MSG(total_calls() == 0, "bad query arguments reached the driver (%s)", called_functions());

  /* A full struct: num_splits written. */
  poison_info(&info);
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK && info.num_splits == 4);
  const aotk_kernel_info full = info;
  /* A caller built before 0.4: its struct ends where num_splits begins. Everything before is written as
   * for the full struct; num_splits, past its end, is not. */
  const unsigned char *bytes = (const unsigned char *)&info;
  const size_t sizes[] = {offsetof(aotk_kernel_info, num_splits), offsetof(aotk_kernel_info, features),
                          offsetof(aotk_kernel_info, num_warps), sizeof(size_t)};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    poison_info(&info);
    info.struct_size = sizes[i];
    CHECK_MSG(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK, "struct_size %zu: %s", sizes[i],
              aotk_last_error());
    CHECK(info.struct_size == sizes[i]);
    CHECK_MSG(memcmp(bytes + sizeof(size_t), (const unsigned char *)&full + sizeof(size_t),
                     sizes[i] - sizeof(size_t)) == 0,
              "struct_size %zu: the prefix differs from the full struct's", sizes[i]);
    bool tail_untouched = true;
    for (size_t b = sizes[i]; b < sizeof info; b++) tail_untouched = tail_untouched && bytes[b] == POISON;
    CHECK_MSG(tail_untouched, "aotk_decode_query wrote past struct_size = %zu", sizes[i]);
  }
  /* A struct that ends just after num_splits gets it. */
  poison_info(&info);
  info.struct_size = offsetof(aotk_kernel_info, num_splits) + sizeof info.num_splits;
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK && info.num_splits == 4);
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "aotk_decode_query loaded or launched (%s)", called_functions());
  uninstall_fake_gpu();
}

/* The split's workspace: at least the size the query reports (the header's formula, checked in
 * test_decode_split_choice), not NULL, 16-byte aligned, not running past the address space; checked
 * after the params, before anything is loaded or launched. Without a split none is needed and what is
 * passed is ignored. */
static void test_decode_workspace(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_decode_params params = valid_decode_params();
  params.num_splits = 4; /* 4 splits of 256 keys: 4 x 48 rows of 128 floats and 4 x 48 LSEs */
  const size_t needed = 98304 + 768;
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK);
  CHECK_MSG(info.workspace_bytes == needed && info.num_splits == 4, "workspace_bytes %zu, %d splits",
            info.workspace_bytes, info.num_splits);
  const struct {
    const char *what;
    void *workspace;
    size_t bytes;
    aotk_status expected;
  } workspaces[] = {
      {"NULL, the reported size", NULL, needed, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"NULL, size 0", NULL, 0, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"one byte short", FAKE_WORKSPACE, needed - 1, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"half", FAKE_WORKSPACE, needed / 2, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"size 0", FAKE_WORKSPACE, 0, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"8-byte aligned", byte_offset(FAKE_WORKSPACE, 8), needed, AOTK_ERROR_MISALIGNED_POINTER},
      {"4-byte aligned, ample", byte_offset(FAKE_WORKSPACE, 4), needed + 64, AOTK_ERROR_MISALIGNED_POINTER},
      {"odd address", byte_offset(FAKE_WORKSPACE, 1), needed, AOTK_ERROR_MISALIGNED_POINTER},
      {"16 bytes below the end of the address space", (void *)(UINTPTR_MAX - 15), needed, AOTK_ERROR_SIZE_OVERFLOW},
      {"exactly the reported size", FAKE_WORKSPACE, needed, AOTK_OK},
      {"larger, 16 bytes further", byte_offset(FAKE_WORKSPACE, 16), needed + 1, AOTK_OK},
  };
  for (size_t w = 0; w < sizeof workspaces / sizeof workspaces[0]; w++) {
    const aotk_decode_params before = params;
    reset_calls();
    reset_launch_log();
    aotk_status status = aotk_attn_decode(&params, workspaces[w].workspace, workspaces[w].bytes, FAKE_STREAM);
    CHECK_MSG(status == workspaces[w].expected, "workspace %s: %s (%s), expected %s", workspaces[w].what,
              aotk_status_name(status), aotk_last_error(), aotk_status_name(workspaces[w].expected));
    CHECK(memcmp(&params, &before, sizeof params) == 0);
    if (workspaces[w].expected == AOTK_OK) {
      CHECK_MSG(fake.logged_launches == 2 && fake.launch_log[0].kernel == KERNEL_ATTN_DECODE &&
                    arg_pointer(&fake.launch_log[0], DECODE_OUT_PARTIAL) ==
                        (uint64_t)(uintptr_t)workspaces[w].workspace,
                "workspace %s: %d launches, the partials not at its start", workspaces[w].what, fake.logged_launches);
    } else {
      CHECK_MSG(message_mentions("workspace"), "workspace %s: the message \"%s\" does not name the workspace",
                workspaces[w].what, aotk_last_error());
      CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLibraryGetKernel] == 0 &&
                    fake.calls[CALL_cuLaunchKernel] == 0,
                "workspace %s: loaded or launched (%s)", workspaces[w].what, called_functions());
    }
    if (workspaces[w].expected == AOTK_ERROR_WORKSPACE_TOO_SMALL) {
      char needed_text[32];
      snprintf(needed_text, sizeof needed_text, "needs %zu", needed);
      CHECK_MSG(message_mentions(needed_text), "the message \"%s\" does not say %zu bytes are needed",
                aotk_last_error(), needed);
    }
  }
  /* No split: no workspace, whatever is passed. */
  params.num_splits = 1;
  static const struct {
    void *workspace;
    size_t bytes;
  } ignored[] = {{NULL, 0}, {NULL, 1000}, {FAKE_WORKSPACE, 0}, {(void *)(uintptr_t)1, 3}};
  for (size_t w = 0; w < sizeof ignored / sizeof ignored[0]; w++) {
    reset_launch_log();
    aotk_status status = aotk_attn_decode(&params, ignored[w].workspace, ignored[w].bytes, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK && fake.logged_launches == 1, "no split, workspace %p of %zu bytes: %s (%s)",
              ignored[w].workspace, ignored[w].bytes, aotk_status_name(status), aotk_last_error());
  }
  /* Appending takes no workspace of its own: the same size, the same checks. */
  add_new_kv(&params, &default_decode_shape, 5);
  params.num_splits = 4;
  poison_info(&info);
  info.struct_size = sizeof info;
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK);
  CHECK_MSG(info.workspace_bytes == needed && info.num_splits == 4 && info.launches == 3,
            "appending: workspace_bytes %zu, %d splits, %d launches", info.workspace_bytes, info.num_splits,
            info.launches);
  reset_calls();
  CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, needed - 1, FAKE_STREAM) == AOTK_ERROR_WORKSPACE_TOO_SMALL &&
        fake.calls[CALL_cuLaunchKernel] == 0 && fake.calls[CALL_cuLibraryLoadData] == 0);
  reset_launch_log();
  CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, needed, FAKE_STREAM) == AOTK_OK && fake.logged_launches == 3);
  params.num_splits = 1;
  reset_launch_log();
  CHECK(aotk_attn_decode(&params, NULL, 0, FAKE_STREAM) == AOTK_OK && fake.logged_launches == 2);
  params.k_new = params.v_new = (aotk_tensor){0};
  /* Bad params are reported before a bad workspace, without the driver. */
  params.num_splits = 4, params.causal = 2;
  reset_calls();
  CHECK(aotk_attn_decode(&params, NULL, 0, FAKE_STREAM) == AOTK_ERROR_INVALID_VALUE && message_mentions("causal"));
  CHECK(total_calls() == 0);
  uninstall_fake_gpu();
}

/* Driver faults: no context, an old GPU, a failing load of either kernel (both are loaded before the
 * first launch, so nothing runs), a failing launch of either (the merge's leaves the decoding kernel's
 * partials enqueued, the status says so); the next call runs whole. */
static void test_decode_faults(void) {
  aotk_decode_params params = valid_decode_params();
  params.num_splits = 4;
  const size_t workspace_bytes = 98304 + 768;
  aotk_kernel_info info;

  install_fake_gpu(90, SHARED_SM90);
  fake.has_context = false;
  poison_info(&info);
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_ERROR_NO_CONTEXT && info_untouched(&info));
  CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_ERROR_NO_CONTEXT);
  CHECK(fake.launches == 0);

  install_fake_gpu(75, 64 * 1024);
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_ERROR_UNSUPPORTED_ARCH);
  CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_ERROR_UNSUPPORTED_ARCH &&
        message_mentions("sm_75"));
  CHECK(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.launches == 0);

  for (int failing = 1; failing <= 2; failing++) {
    install_fake_gpu(90, SHARED_SM90);
    fake.library_load_result = CUDA_ERROR_OUT_OF_MEMORY;
    fake.fail_library_load_call = failing;
    aotk_status status = aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuLibraryLoadData"), "load %d fails: %s (%s)", failing,
              aotk_status_name(status), aotk_last_error());
    CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 0, "load %d fails: %d launches", failing,
              fake.calls[CALL_cuLaunchKernel]);
    fake.library_load_result = CUDA_SUCCESS;
    CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK && fake.launches == 2);
  }
  static const char *const launched[2] = {"attn_decode_", "attn_merge_"};
  for (int failing = 1; failing <= 2; failing++) {
    install_fake_gpu(90, SHARED_SM90);
    fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
    fake.fail_launch_call = failing;
    aotk_status status = aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuLaunchKernel") &&
                  message_mentions(launched[failing - 1]),
              "launch %d fails: %s (%s)", failing, aotk_status_name(status), aotk_last_error());
    CHECK(aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == failing && fake.launches == failing - 1,
              "launch %d fails: cuLaunchKernel called %d times, %d went through", failing,
              fake.calls[CALL_cuLaunchKernel], fake.launches);
    fake.launch_result = CUDA_SUCCESS;
    fake.fail_launch_call = 0;
    CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK &&
          aotk_last_cuda_result() == 0);
  }

  /* Appending, with and without the split: three kernels (two), each loaded before the first launch, so
   * a failing load of any of them, the appending kernel's included, launches nothing; a failing launch
   * of the appending kernel, the first, stops the call there, and one of the later kernels leaves the
   * launches before it enqueued. */
  add_new_kv(&params, &default_decode_shape, 2);
  static const char *const append_launched[3] = {"attn_cache_append_", "attn_decode_", "attn_merge_"};
  for (int split = 0; split <= 1; split++) {
    params.num_splits = split ? 4 : 1;
    const int kernels = 2 + split;
    for (int failing = 1; failing <= kernels; failing++) {
      install_fake_gpu(90, SHARED_SM90);
      fake.library_load_result = CUDA_ERROR_OUT_OF_MEMORY;
      fake.fail_library_load_call = failing;
      aotk_status status = aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuLibraryLoadData"),
                "appending, %d splits, load %d fails: %s (%s)", (int)params.num_splits, failing,
                aotk_status_name(status), aotk_last_error());
      CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 0, "appending, %d splits, load %d fails: %d launches",
                (int)params.num_splits, failing, fake.calls[CALL_cuLaunchKernel]);
      fake.library_load_result = CUDA_SUCCESS;
      CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK &&
            fake.launches == kernels && fake.loaded_images == kernels);
    }
    for (int failing = 1; failing <= kernels; failing++) {
      install_fake_gpu(90, SHARED_SM90);
      fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
      fake.fail_launch_call = failing;
      aotk_status status = aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuLaunchKernel") &&
                    message_mentions(append_launched[failing - 1]),
                "appending, %d splits, launch %d fails: %s (%s)", (int)params.num_splits, failing,
                aotk_status_name(status), aotk_last_error());
      CHECK(aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY);
      CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == failing && fake.launches == failing - 1,
                "appending, %d splits, launch %d fails: cuLaunchKernel called %d times, %d went through",
                (int)params.num_splits, failing, fake.calls[CALL_cuLaunchKernel], fake.launches);
      fake.launch_result = CUDA_SUCCESS;
      fake.fail_launch_call = 0;
      reset_launch_log();
      CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK &&
            aotk_last_cuda_result() == 0 && fake.logged_launches == kernels &&
            fake.launch_log[0].kernel == KERNEL_ATTN_CACHE_APPEND);
    }
  }
  uninstall_fake_gpu();
}

/* ---- the merge ---- */

/* A merge problem (include/aotk.h, aotk_merge_params): num_partials partial outputs and LSEs of the
 * same rows, [num_partials, batch, seqlen_q, heads, head_dim] and [num_partials, batch, heads, seqlen_q],
 * or packed ([num_partials, total_q, heads, head_dim] and [num_partials, heads, total_q]: seqlen_q is
 * total_q and batch is 1). */
typedef struct merge_shape {
  aotk_dtype partial_dtype, out_dtype;
  int64_t num_partials, batch, seqlen_q, heads, head_dim;
  bool packed, with_lse, with_sinks;
} merge_shape;

static const merge_shape default_merge_shape = {AOTK_DTYPE_FLOAT32, AOTK_DTYPE_BFLOAT16, 4, 3, 5, 8, 128,
                                                false, true, false};
static const merge_shape packed_merge_shape = {AOTK_DTYPE_BFLOAT16, AOTK_DTYPE_BFLOAT16, 2, 1, 170, 8, 64,
                                               true, true, true};

static aotk_merge_params merge_params_for(merge_shape s) {
  aotk_merge_params params = AOTK_MERGE_PARAMS_INIT;
  const int64_t P = s.num_partials, B = s.batch, S = s.seqlen_q, H = s.heads, D = s.head_dim;
  if (s.packed) {
    params.out_partials = aotk_tensor_4d(FAKE_PARTIALS, s.partial_dtype, P, S, H, D);
    params.lse_partials = aotk_tensor_3d(FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, P, H, S);
    params.out = aotk_tensor_3d(FAKE_OUT, s.out_dtype, S, H, D);
    if (s.with_lse) params.lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, H, S);
  } else {
    const aotk_tensor parts = {FAKE_PARTIALS, s.partial_dtype, 5, {P, B, S, H, D, 0},
                               {B * S * H * D, S * H * D, H * D, D, 1, 0}};
    params.out_partials = parts;
    params.lse_partials = aotk_tensor_4d(FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, P, B, H, S);
    params.out = aotk_tensor_4d(FAKE_OUT, s.out_dtype, B, S, H, D);
    if (s.with_lse) params.lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, B, H, S);
  }
  if (s.with_sinks) params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, H);
  return params;
}

static aotk_merge_params valid_merge_params(void) { return merge_params_for(default_merge_shape); }

/* Strides all distinct: the partials with padded rows and gaps between batches and partials, their
 * LSEs with padded rows, out heads-major, lse with padded rows. The partials' and out's strides are
 * multiples of 16 elements (what the aligned variant assumes) unless `unaligned`, which pads the
 * partials' rows by 8 instead. */
static aotk_merge_params strided_merge_params(merge_shape s, bool unaligned) {
  aotk_merge_params params = merge_params_for(s);
  const int64_t B = s.batch, S = s.seqlen_q, H = s.heads, D = s.head_dim;
  const int64_t row = round_up_to(D, 16) + (unaligned ? 8 : 16), out_row = round_up_to(D, 16);
  aotk_tensor *parts = &params.out_partials, *lse_parts = &params.lse_partials, *out = &params.out, *lse = &params.lse;
  if (s.packed) {
    parts->strides[2] = row, parts->strides[1] = H * row, parts->strides[0] = S * H * row + 64;
    lse_parts->strides[1] = S + 3, lse_parts->strides[0] = H * (S + 3) + 5;
    out->strides[1] = S * out_row, out->strides[0] = out_row;
    if (s.with_lse) lse->strides[0] = S + 7;
  } else {
    parts->strides[3] = row, parts->strides[2] = H * row, parts->strides[1] = S * H * row + 32;
    parts->strides[0] = B * parts->strides[1] + 64;
    lse_parts->strides[2] = S + 3, lse_parts->strides[1] = H * (S + 3) + 5;
    lse_parts->strides[0] = B * lse_parts->strides[1] + 7;
    out->strides[2] = S * out_row, out->strides[1] = out_row, out->strides[0] = H * S * out_row + 32;
    if (s.with_lse) lse->strides[1] = S + 7, lse->strides[0] = H * (S + 7) + 9;
  }
  return params;
}

/* The bytes [first, end) an fp32 tensor's elements lie in (strides are never negative; no element: none). */
static void fp32_byte_range(const aotk_tensor *t, uint64_t *first, uint64_t *end) {
  uint64_t last = 0;
  *first = *end = (uint64_t)(uintptr_t)t->data;
  for (int d = 0; d < t->rank; d++) {
    if (t->shape[d] == 0) return;
    last += (uint64_t)(t->shape[d] - 1) * (uint64_t)t->strides[d];
  }
  *end = *first + 4 * (last + 1);
}

/* Whether a merge writes lse over memory of lse_partials (an in-place merge): then each program must
 * cover whole rows (FLAG_WHOLE_ROWS), or one row's program could write the lse another one of the same
 * row still reads. Without lse nothing is written that a program reads: out is read-before-write per
 * element. */
static bool merge_writes_lse_in_place(const aotk_merge_params *params) {
  if (params->lse.data == NULL) return false;
  uint64_t lse_first, lse_end, parts_first, parts_end;
  fp32_byte_range(&params->lse, &lse_first, &lse_end);
  fp32_byte_range(&params->lse_partials, &parts_first, &parts_end);
  return lse_first < parts_end && parts_first < lse_end;
}

/* What aotk_merge_query reports and aotk_attn_merge launches, from the header: the merge row of the
 * GPU's target for the alignment (partials and out 16-byte aligned with strides multiples of 16
 * elements), one program per block_m of the batch * seqlen_q * heads rows and block_n of the head_dim
 * columns, or per block_m rows alone with FLAG_WHOLE_ROWS when lse is written in place or the column
 * chunks would pass the grid limit of 2^31 - 1; the typed
 * pointer slots of the partials' and out's dtypes; the strides of the kernel's [partial, batch, token,
 * head] view (packed tensors: batch stride 0). */
static void check_merge(const char *what, const aotk_merge_params *params, const merge_shape *s, const gpu *g,
                        int aligned) {
  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status status = aotk_merge_query(AOTK_OP_MERGE, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_merge_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "%s: aotk_merge_query loaded or launched (%s)", what, called_functions());
  const aotk__kernel_entry *row = merge_row_for(g->arch, aligned);
  CHECK_MSG(row != NULL, "%s: no sm_%d attn_merge row (aligned %d)", what, g->arch, aligned);
  if (row == NULL) return;
  const int64_t rows = s->batch * s->seqlen_q * s->heads;
  const bool whole_rows = merge_writes_lse_in_place(params) ||
                          ceil_div(rows, row->block_m) * ceil_div(s->head_dim, row->block_n) > INT32_MAX;
  const int64_t column_chunks = whole_rows ? 1 : ceil_div(s->head_dim, row->block_n);
  const int64_t grid = ceil_div(rows, row->block_m) * column_chunks;
  CHECK_MSG(strcmp(info.kernel_name, row->name) == 0 && info.aligned == aligned,
            "%s: aotk_merge_query names %s (aligned %d), expected %s", what, info.kernel_name, info.aligned, row->name);
  CHECK(info.arch == g->arch && info.from_ptx == g->from_ptx);
  CHECK_MSG(info.grid == grid, "%s: grid %lld, expected ceil(%lld rows / %d) x %lld column chunks = %lld", what,
            (long long)info.grid, (long long)rows, row->block_m, (long long)column_chunks, (long long)grid);
  CHECK(info.launches == 1 && info.workspace_bytes == 0 && info.num_splits == s->num_partials);
  const uint32_t features = s->with_sinks ? AOTK_FEATURE_SINKS : 0;
  CHECK_MSG(info.features == features, "%s: features %#x, expected %#x", what, info.features, features);

  reset_launch_log();
  status = aotk_attn_merge(params, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_merge %s (%s)", what, aotk_status_name(status), aotk_last_error());
  CHECK_MSG(fake.logged_launches == 1, "%s: %d launches", what, fake.logged_launches);
  if (status != AOTK_OK || fake.logged_launches != 1) return;
  const recorded_launch *launch = &fake.launch_log[0];
  const char *kernel = "attn_merge";
  check_sel_launch_shape(what, launch, KERNEL_ATTN_MERGE, row, grid, MERGE_GLOBAL_SCRATCH);
  if (launch->kernel != KERNEL_ATTN_MERGE) return;
  static const char *const slot_names[3] = {"fp32", "fp16", "bf16"};
  for (int slot = 0; slot < 3; slot++) {
    char name[32];
    snprintf(name, sizeof name, "%s partial pointer", slot_names[slot]);
    check_pointer(what, kernel, launch, MERGE_PARTIAL32 + slot,
                  slot == merge_slot(s->partial_dtype) ? params->out_partials.data : NULL, name);
    snprintf(name, sizeof name, "%s out pointer", slot_names[slot]);
    check_pointer(what, kernel, launch, MERGE_OUT32 + slot, slot == merge_slot(s->out_dtype) ? params->out.data : NULL,
                  name);
  }
  check_pointer(what, kernel, launch, MERGE_LSE_PARTIAL, params->lse_partials.data, "lse_partials");
  check_pointer(what, kernel, launch, MERGE_LSE, params->lse.data, "lse");
  check_pointer(what, kernel, launch, MERGE_SINKS, params->sinks.data, "sinks");
  const aotk_tensor *parts = &params->out_partials, *lse_parts = &params->lse_partials, *out = &params->out;
  const aotk_tensor *lse = &params->lse;
  int64_t expected[14];
  if (s->packed) {
    const int64_t packed[14] = {parts->strides[0], 0, parts->strides[1], parts->strides[2],
                                lse_parts->strides[0], 0, lse_parts->strides[1], lse_parts->strides[2],
                                0, out->strides[0], out->strides[1],
                                0, s->with_lse ? lse->strides[0] : 0, s->with_lse ? lse->strides[1] : 0};
    memcpy(expected, packed, sizeof expected);
  } else {
    const int64_t dense[14] = {parts->strides[0], parts->strides[1], parts->strides[2], parts->strides[3],
                               lse_parts->strides[0], lse_parts->strides[1], lse_parts->strides[2],
                               lse_parts->strides[3],
                               out->strides[0], out->strides[1], out->strides[2],
                               s->with_lse ? lse->strides[0] : 0, s->with_lse ? lse->strides[1] : 0,
                               s->with_lse ? lse->strides[2] : 0};
    memcpy(expected, dense, sizeof expected);
  }
  static const char *const stride_names[14] = {"stride_pp", "stride_pb", "stride_ps", "stride_ph", "stride_lpp",
                                               "stride_lpb", "stride_lph", "stride_lps", "stride_ob", "stride_os",
                                               "stride_oh", "stride_lb", "stride_lh", "stride_ls"};
  for (int i = 0; i < 14; i++) check_i64(what, kernel, launch, MERGE_STRIDE_PP + i, expected[i], stride_names[i]);
  check_int(what, kernel, launch, MERGE_NUM_PARTIALS, s->num_partials, "num_partials");
  check_int(what, kernel, launch, MERGE_SEQLEN_Q, s->seqlen_q, "seqlen_q");
  check_int(what, kernel, launch, MERGE_HEADS, s->heads, "heads");
  check_int(what, kernel, launch, MERGE_NUM_ROWS, rows, "num_rows");
  check_int(what, kernel, launch, MERGE_HEAD_DIM8, s->head_dim / 8, "head_dim8");
  const int32_t flags = merge_dtype_flags(s->partial_dtype, s->out_dtype) | (s->with_lse ? FLAG_WRITE_LSE : 0) |
                        (s->with_sinks ? FLAG_SINKS : 0) | (whole_rows ? MERGE_FLAG_WHOLE_ROWS : 0);
  CHECK_MSG(arg_i32(launch, MERGE_FLAGS) == flags, "%s: flags %#x, expected %#x", what,
            (unsigned)arg_i32(launch, MERGE_FLAGS), (unsigned)flags);
}

static void test_merge_launch_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const aotk_dtype dtypes[3] = {AOTK_DTYPE_FLOAT32, AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};
  int cases = 0;
  for (int packed = 0; packed <= 1; packed++) {
    for (int p = 0; p < 3; p++) {
      for (int o = 0; o < 3; o++) {
        merge_shape s = packed ? packed_merge_shape : default_merge_shape;
        s.partial_dtype = dtypes[p], s.out_dtype = dtypes[o];
        s.with_lse = (p + o) % 2 == 0, s.with_sinks = (p + 2 * o) % 3 == 0;
        char what[96];
        static const char *const dtype_names[3] = {"fp32", "fp16", "bf16"};
        snprintf(what, sizeof what, "%s, %s partials into %s, lse %d, sinks %d", packed ? "packed" : "dense",
                 dtype_names[p], dtype_names[o], s.with_lse, s.with_sinks);
        aotk_merge_params params = merge_params_for(s);
        check_merge(what, &params, &s, &sel_sm90, 1);
        params = strided_merge_params(s, false);
        check_merge(what, &params, &s, &sel_sm90, 1);
        params = strided_merge_params(s, true);
        check_merge(what, &params, &s, &sel_sm90, 0);
        cases += 3;
      }
    }
  }
  /* Alignment: each of the partials and out, moved off 16 bytes or given a stride that is not a
   * multiple of 16 elements, takes the unaligned variant; lse_partials, lse and sinks do not count. */
  merge_shape s = default_merge_shape;
  aotk_merge_params params = merge_params_for(s);
  params.out_partials.data = byte_offset(FAKE_PARTIALS, 4);
  check_merge("partials 4 bytes past 16", &params, &s, &sel_sm90, 0);
  params = merge_params_for(s);
  params.out.data = byte_offset(FAKE_OUT, 2);
  check_merge("out 2 bytes past 16", &params, &s, &sel_sm90, 0);
  params = merge_params_for(s);
  params.out.strides[1] += 8, params.out.strides[0] += 5 * 8;
  check_merge("out token stride 8 past", &params, &s, &sel_sm90, 0);
  params = merge_params_for(s);
  params.lse_partials.data = byte_offset(FAKE_LSE_PARTIALS, 4), params.lse_partials.strides[0] += 3;
  params.lse.data = byte_offset(FAKE_LSE, 4);
  check_merge("lse_partials and lse only 4-byte aligned", &params, &s, &sel_sm90, 1);
  /* Any multiple of 8 for head_dim, and one partial. */
  s.head_dim = 8, s.num_partials = 1;
  params = merge_params_for(s);
  check_merge("head_dim 8, one partial: strides of 8 elements, unaligned", &params, &s, &sel_sm90, 0);
  s.head_dim = 1000, s.partial_dtype = AOTK_DTYPE_FLOAT16, s.out_dtype = AOTK_DTYPE_FLOAT16;
  params = merge_params_for(s);
  check_merge("head_dim 1000", &params, &s, &sel_sm90, 0);
  s.head_dim = 1008;
  params = merge_params_for(s);
  check_merge("head_dim 1008 (63 x 16)", &params, &s, &sel_sm90, 1);
  uninstall_fake_gpu();
  /* The sm_80 image on sm_86, its PTX on sm_120. */
  static const gpu gpus[] = {{86, SHARED_SM86, 80, 0}, {120, SHARED_SM120, 80, 1}};
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    s = packed_merge_shape;
    params = strided_merge_params(s, false);
    check_merge(gpus[g].from_ptx ? "packed, sm_120 (PTX)" : "packed, sm_86", &params, &s, &gpus[g], 1);
  }
  uninstall_fake_gpu();
  printf("    %d merges\n", cases);
}

/* ---- the merge: validation ---- */

typedef struct merge_bad_input {
  const char *what;
  void (*spoil)(aotk_merge_params *params); /* NULL: pass params = NULL */
  aotk_status expected;
  const char *mentions;
} merge_bad_input;

static void make_packed(aotk_merge_params *p) { *p = merge_params_for(packed_merge_shape); }
static void mrg_struct_size_zero(aotk_merge_params *p) { p->struct_size = 0; }
static void mrg_struct_size_short(aotk_merge_params *p) { p->struct_size = sizeof(aotk_merge_params) - 1; }
static void mrg_struct_size_garbage(aotk_merge_params *p) { p->struct_size = (size_t)1 << 40; }
static void mrg_partials_null(aotk_merge_params *p) { p->out_partials.data = NULL; }
static void mrg_partials_rank_3(aotk_merge_params *p) { p->out_partials.rank = 3; }
static void mrg_partials_rank_6(aotk_merge_params *p) { p->out_partials.rank = 6; }
static void mrg_partials_int32(aotk_merge_params *p) { p->out_partials.dtype = AOTK_DTYPE_INT32; }
static void mrg_partials_uint8(aotk_merge_params *p) { p->out_partials.dtype = AOTK_DTYPE_UINT8; }
static void mrg_partials_dtype_garbage(aotk_merge_params *p) { p->out_partials.dtype = (aotk_dtype)99; }
static void mrg_partials_head_dim_100(aotk_merge_params *p) { p->out_partials.shape[4] = p->out.shape[3] = 100; }
static void mrg_partials_head_dim_4(aotk_merge_params *p) { p->out_partials.shape[4] = p->out.shape[3] = 4; }
static void mrg_partials_last_stride_2(aotk_merge_params *p) { p->out_partials.strides[4] = 2; }
static void mrg_partials_stride_negative(aotk_merge_params *p) { p->out_partials.strides[0] = -1; }
static void mrg_partials_zero_partials(aotk_merge_params *p) { p->out_partials.shape[0] = 0; }
static void mrg_partials_misaligned(aotk_merge_params *p) { p->out_partials.data = byte_offset(FAKE_PARTIALS, 2); }
static void mrg_lse_partials_null(aotk_merge_params *p) { p->lse_partials.data = NULL; }
static void mrg_lse_partials_rank_5(aotk_merge_params *p) { p->lse_partials.rank = 5; }
static void mrg_lse_partials_rank_3(aotk_merge_params *p) { p->lse_partials.rank = 3; }
static void mrg_lse_partials_float16(aotk_merge_params *p) { p->lse_partials.dtype = AOTK_DTYPE_FLOAT16; }
static void mrg_lse_partials_num_partials(aotk_merge_params *p) { p->lse_partials.shape[0] += 1; }
static void mrg_lse_partials_batch(aotk_merge_params *p) { p->lse_partials.shape[1] += 1; }
static void mrg_lse_partials_heads(aotk_merge_params *p) { p->lse_partials.shape[2] -= 1; }
static void mrg_lse_partials_seqlen(aotk_merge_params *p) { p->lse_partials.shape[3] += 1; }
static void mrg_lse_partials_like_out(aotk_merge_params *p) { /* [num_partials, batch, seqlen_q, heads] */
  p->lse_partials = aotk_tensor_4d(FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 4, 3, 5, 8);
}
static void mrg_out_null(aotk_merge_params *p) { p->out.data = NULL; }
static void mrg_out_rank_5(aotk_merge_params *p) { p->out.rank = 5; }
static void mrg_out_int32(aotk_merge_params *p) { p->out.dtype = AOTK_DTYPE_INT32; }
static void mrg_out_int64(aotk_merge_params *p) { p->out.dtype = AOTK_DTYPE_INT64; }
static void mrg_out_batch(aotk_merge_params *p) { p->out.shape[0] += 1; }
static void mrg_out_seqlen(aotk_merge_params *p) { p->out.shape[1] -= 1; }
static void mrg_out_heads(aotk_merge_params *p) { p->out.shape[2] = 4; }
static void mrg_out_head_dim(aotk_merge_params *p) { p->out.shape[3] = 64; }
static void mrg_out_heads_stride_zero(aotk_merge_params *p) { p->out.strides[2] = 0; }
static void mrg_out_last_stride_2(aotk_merge_params *p) { p->out.strides[3] = 2; }
static void mrg_lse_rank_2(aotk_merge_params *p) { p->lse.rank = 2; }
static void mrg_lse_float16(aotk_merge_params *p) { p->lse.dtype = AOTK_DTYPE_FLOAT16; }
static void mrg_lse_batch(aotk_merge_params *p) { p->lse.shape[0] += 1; }
static void mrg_lse_heads(aotk_merge_params *p) { p->lse.shape[1] = 4; }
static void mrg_lse_seqlen(aotk_merge_params *p) { p->lse.shape[2] += 1; }
static void mrg_lse_like_out(aotk_merge_params *p) { /* [batch, seqlen_q, heads] */
  p->lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 3, 5, 8);
}
static void mrg_lse_heads_stride_zero(aotk_merge_params *p) { p->lse.strides[1] = 0; }
static void mrg_sinks(aotk_merge_params *p) { p->sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 8); }
static void mrg_sinks_heads_plus_one(aotk_merge_params *p) { mrg_sinks(p), p->sinks.shape[0] = 9; }
static void mrg_sinks_per_batch(aotk_merge_params *p) {
  p->sinks = aotk_tensor_2d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 3, 8);
}
static void mrg_sinks_bfloat16(aotk_merge_params *p) { mrg_sinks(p), p->sinks.dtype = AOTK_DTYPE_BFLOAT16; }
static void mrg_packed_lse_partials_rank_4(aotk_merge_params *p) { /* the dense layout's [P, 1, heads, total_q] */
  make_packed(p), p->lse_partials = aotk_tensor_4d(FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 2, 1, 8, 170);
}
static void mrg_packed_lse_partials_transposed(aotk_merge_params *p) { /* [P, total_q, heads] */
  make_packed(p), p->lse_partials = aotk_tensor_3d(FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 2, 170, 8);
}
static void mrg_packed_lse_partials_num_partials(aotk_merge_params *p) {
  make_packed(p), p->lse_partials.shape[0] = 3;
}
static void mrg_packed_out_rank_4(aotk_merge_params *p) {
  make_packed(p), p->out = aotk_tensor_4d(FAKE_OUT, AOTK_DTYPE_BFLOAT16, 1, 170, 8, 64);
}
static void mrg_packed_out_total(aotk_merge_params *p) { make_packed(p), p->out.shape[0] += 1; }
static void mrg_packed_out_heads(aotk_merge_params *p) { make_packed(p), p->out.shape[1] = 2; }
static void mrg_packed_out_head_dim(aotk_merge_params *p) { make_packed(p), p->out.shape[2] = 128; }
static void mrg_packed_head_dim_12(aotk_merge_params *p) {
  make_packed(p), p->out_partials.shape[3] = p->out.shape[2] = 12;
}
static void mrg_packed_lse_rank_3(aotk_merge_params *p) {
  make_packed(p), p->lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 1, 8, 170);
}
static void mrg_packed_lse_transposed(aotk_merge_params *p) { /* [total_q, heads] */
  make_packed(p), p->lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 170, 8);
}
static void mrg_packed_sinks_heads(aotk_merge_params *p) { make_packed(p), p->sinks.shape[0] = 7; }
static void mrg_packed_partials_rank_5_lse_rank_3(aotk_merge_params *p) { /* dense partials, packed LSEs */
  p->lse_partials = aotk_tensor_3d(FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 4, 8, 15);
}
/* 2^20 requests of 64 tokens and 32 heads: 2^31 rows, one more than the kernel's int32 row count (the
 * partials broadcast, out's rows 16 elements apart). */
static void mrg_rows_2_31(aotk_merge_params *p) {
  const int64_t B = (int64_t)1 << 20, S = 64, H = 32;
  const aotk_tensor parts = {FAKE_PARTIALS, AOTK_DTYPE_FLOAT32, 5, {2, B, S, H, 16, 0}, {0, 0, 0, 0, 1, 0}};
  const aotk_tensor lse_parts = {FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 4, {2, B, H, S, 0, 0}, {0, 0, 0, 1, 0, 0}};
  const aotk_tensor out = {FAKE_OUT, AOTK_DTYPE_FLOAT32, 4, {B, S, H, 16, 0, 0}, {S * H * 16, H * 16, 16, 1, 0, 0}};
  aotk_merge_params params = AOTK_MERGE_PARAMS_INIT;
  params.out_partials = parts, params.lse_partials = lse_parts, params.out = out;
  *p = params;
}
static void mrg_partials_2_31(aotk_merge_params *p) { /* 2^31 partials, broadcast */
  p->out_partials.shape[0] = p->lse_partials.shape[0] = (int64_t)1 << 31;
  p->out_partials.strides[0] = p->lse_partials.strides[0] = 0;
}

static const merge_bad_input merge_bad_inputs[] = {
    {"params NULL", NULL, AOTK_ERROR_NULL_POINTER, "params"},
    {"struct_size 0", mrg_struct_size_zero, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size one byte short", mrg_struct_size_short, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size garbage", mrg_struct_size_garbage, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"out_partials.data NULL", mrg_partials_null, AOTK_ERROR_NULL_POINTER, "out_partials.data"},
    {"out_partials rank 3", mrg_partials_rank_3, AOTK_ERROR_RANK, "out_partials.rank"},
    {"out_partials rank 6", mrg_partials_rank_6, AOTK_ERROR_RANK, "out_partials.rank"},
    {"out_partials int32", mrg_partials_int32, AOTK_ERROR_UNSUPPORTED_DTYPE, "out_partials.dtype"},
    {"out_partials uint8", mrg_partials_uint8, AOTK_ERROR_UNSUPPORTED_DTYPE, "out_partials.dtype"},
    {"out_partials dtype garbage", mrg_partials_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "out_partials.dtype"},
    {"head_dim 100", mrg_partials_head_dim_100, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "out_partials.shape[4]"},
    {"head_dim 4", mrg_partials_head_dim_4, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "out_partials.shape[4]"},
    {"out_partials last stride 2", mrg_partials_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM,
     "out_partials.strides[4]"},
    {"out_partials stride negative", mrg_partials_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE,
     "out_partials.strides[0]"},
    {"no partials", mrg_partials_zero_partials, AOTK_ERROR_NONPOSITIVE_SIZE, "out_partials.shape[0]"},
    {"out_partials misaligned", mrg_partials_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "out_partials.data"},
    {"lse_partials.data NULL", mrg_lse_partials_null, AOTK_ERROR_NULL_POINTER, "lse_partials.data"},
    {"lse_partials rank 5", mrg_lse_partials_rank_5, AOTK_ERROR_RANK, "lse_partials.rank"},
    {"lse_partials rank 3 (packed), partials dense", mrg_lse_partials_rank_3, AOTK_ERROR_RANK, "lse_partials.rank"},
    {"lse_partials float16", mrg_lse_partials_float16, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse_partials.dtype"},
    {"lse_partials one partial more", mrg_lse_partials_num_partials, AOTK_ERROR_SHAPE_MISMATCH,
     "lse_partials.shape[0]"},
    {"lse_partials batch + 1", mrg_lse_partials_batch, AOTK_ERROR_SHAPE_MISMATCH, "lse_partials.shape[1]"},
    {"lse_partials heads - 1", mrg_lse_partials_heads, AOTK_ERROR_SHAPE_MISMATCH, "lse_partials.shape[2]"},
    {"lse_partials seqlen_q + 1", mrg_lse_partials_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "lse_partials.shape[3]"},
    {"lse_partials in out's order", mrg_lse_partials_like_out, AOTK_ERROR_SHAPE_MISMATCH, "lse_partials.shape[2]"},
    {"out.data NULL", mrg_out_null, AOTK_ERROR_NULL_POINTER, "out.data"},
    {"out rank 5", mrg_out_rank_5, AOTK_ERROR_RANK, "out.rank"},
    {"out int32", mrg_out_int32, AOTK_ERROR_UNSUPPORTED_DTYPE, "out.dtype"},
    {"out int64", mrg_out_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "out.dtype"},
    {"out batch + 1", mrg_out_batch, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[0]"},
    {"out seqlen_q - 1", mrg_out_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[1]"},
    {"out heads 4", mrg_out_heads, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[2]"},
    {"out head_dim 64, partials 128", mrg_out_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[3]"},
    {"out heads stride 0", mrg_out_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[2]"},
    {"out last stride 2", mrg_out_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "out.strides[3]"},
    {"lse rank 2", mrg_lse_rank_2, AOTK_ERROR_RANK, "lse.rank"},
    {"lse float16", mrg_lse_float16, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"lse batch + 1", mrg_lse_batch, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"lse heads 4", mrg_lse_heads, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"lse seqlen_q + 1", mrg_lse_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[2]"},
    {"lse in out's order", mrg_lse_like_out, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"lse heads stride 0", mrg_lse_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "lse.strides[1]"},
    {"sinks [heads + 1]", mrg_sinks_heads_plus_one, AOTK_ERROR_SHAPE_MISMATCH, "sinks.shape[0]"},
    {"sinks [batch, heads]", mrg_sinks_per_batch, AOTK_ERROR_RANK, "sinks.rank"},
    {"sinks bfloat16", mrg_sinks_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "sinks.dtype"},
    {"packed: lse_partials rank 4", mrg_packed_lse_partials_rank_4, AOTK_ERROR_RANK, "lse_partials.rank"},
    {"packed: lse_partials [P, total_q, heads]", mrg_packed_lse_partials_transposed, AOTK_ERROR_SHAPE_MISMATCH,
     "lse_partials.shape[1]"},
    {"packed: lse_partials one partial more", mrg_packed_lse_partials_num_partials, AOTK_ERROR_SHAPE_MISMATCH,
     "lse_partials.shape[0]"},
    {"packed: out rank 4", mrg_packed_out_rank_4, AOTK_ERROR_RANK, "out.rank"},
    {"packed: out total_q + 1", mrg_packed_out_total, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[0]"},
    {"packed: out heads 2", mrg_packed_out_heads, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[1]"},
    {"packed: out head_dim 128, partials 64", mrg_packed_out_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[2]"},
    {"packed: head_dim 12", mrg_packed_head_dim_12, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "out_partials.shape[3]"},
    {"packed: lse rank 3", mrg_packed_lse_rank_3, AOTK_ERROR_RANK, "lse.rank"},
    {"packed: lse [total_q, heads]", mrg_packed_lse_transposed, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"packed: sinks [7]", mrg_packed_sinks_heads, AOTK_ERROR_SHAPE_MISMATCH, "sinks.shape[0]"},
    {"dense partials with packed LSEs", mrg_packed_partials_rank_5_lse_rank_3, AOTK_ERROR_RANK, "lse_partials.rank"},
    {"2^31 rows", mrg_rows_2_31, AOTK_ERROR_SIZE_OVERFLOW, "batch * seqlen_q * heads"},
    {"2^31 partials", mrg_partials_2_31, AOTK_ERROR_SIZE_OVERFLOW, "num_partials"},
};

/* One bad input through aotk_attn_merge and aotk_merge_query, the fake installed as a working sm_90 GPU:
 * the expected status and a message naming the argument, no driver call, params and info untouched. */
static void check_merge_bad_input(const merge_bad_input *c) {
  aotk_merge_params params = valid_merge_params();
  if (c->spoil != NULL) c->spoil(&params);
  const aotk_merge_params before = params;
  const aotk_merge_params *argument = c->spoil != NULL ? &params : NULL;
  reset_calls();
  aotk_status status = aotk_attn_merge(argument, FAKE_STREAM);
  CHECK_MSG(status == c->expected, "%s: aotk_attn_merge gave %s (%s), expected %s", c->what, aotk_status_name(status),
            aotk_last_error(), aotk_status_name(c->expected));
  CHECK_MSG(message_mentions(c->mentions), "%s: aotk_attn_merge's message \"%s\" does not mention \"%s\"", c->what,
            aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: aotk_attn_merge reached the driver (%s)", c->what, called_functions());
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: aotk_attn_merge changed the caller's params", c->what);

  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status query_status = aotk_merge_query(AOTK_OP_MERGE, argument, &info);
  CHECK_MSG(query_status == status, "%s: aotk_merge_query gave %s, aotk_attn_merge %s", c->what,
            aotk_status_name(query_status), aotk_status_name(status));
  CHECK_MSG(message_mentions(c->mentions), "%s: aotk_merge_query's message \"%s\" does not mention \"%s\"", c->what,
            aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: aotk_merge_query reached the driver (%s)", c->what, called_functions());
  CHECK_MSG(info_untouched(&info), "%s: aotk_merge_query wrote *info on failure", c->what);
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: aotk_merge_query changed the caller's params", c->what);
}

static void test_merge_validation_rejects_bad_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  void (*const bases[])(aotk_merge_params *) = {make_packed, mrg_sinks};
  for (size_t i = 0; i <= sizeof bases / sizeof bases[0]; i++) {
    aotk_merge_params params = valid_merge_params();
    if (i > 0) bases[i - 1](&params);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_merge_query(AOTK_OP_MERGE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "base %zu fails: %s (%s)", i, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(aotk_attn_merge(&params, FAKE_STREAM) == AOTK_OK, "base %zu: %s", i, aotk_last_error());
  }
  const size_t count = sizeof merge_bad_inputs / sizeof merge_bad_inputs[0];
  for (size_t i = 0; i < count; i++) check_merge_bad_input(&merge_bad_inputs[i]);
  printf("    %zu bad inputs\n", count);
  uninstall_fake_gpu();
}

/* Merges the header allows that look odd: in place (out and lse are the first partial's memory, in its
 * layout and dtype), outputs broadcast over dimensions of size 1, partials broadcast, a newer caller's
 * larger struct, a row count of exactly 2^31 - 1; and a query from a caller built before 0.4. */
static void test_merge_validation_accepts_edge_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  struct {
    aotk_merge_params params;
    unsigned char newer_fields[64];
  } call;
  merge_shape s = default_merge_shape;
  s.out_dtype = AOTK_DTYPE_FLOAT32;
  memset(&call, 0, sizeof call);
  call.params = merge_params_for(s);
  /* In place: out is partial 0 (its strides are the partials' without the first), lse partial 0's. */
  call.params.out.data = call.params.out_partials.data;
  memcpy(call.params.out.strides, call.params.out_partials.strides + 1, 4 * sizeof(int64_t));
  call.params.lse.data = call.params.lse_partials.data;
  memcpy(call.params.lse.strides, call.params.lse_partials.strides + 1, 3 * sizeof(int64_t));
  check_merge("in place", &call.params, &s, &sel_sm90, 1);
  call.params.struct_size = sizeof call.params + 64;
  check_merge("in place, a newer caller's struct", &call.params, &s, &sel_sm90, 1);

  s = default_merge_shape;
  s.batch = 1, s.seqlen_q = 1;
  aotk_merge_params params = merge_params_for(s);
  params.out.strides[0] = params.out.strides[1] = 0, params.lse.strides[0] = 0;
  check_merge("out and lse stride 0 on dimensions of size 1", &params, &s, &sel_sm90, 1);
  params = merge_params_for(s);
  params.out_partials.strides[0] = params.lse_partials.strides[0] = 0;
  check_merge("every partial the same memory", &params, &s, &sel_sm90, 1);

  /* 2^31 - 1 rows: 1 x (2^31 - 1) tokens x 1 head, the partials broadcast. */
  const aotk_tensor parts = {FAKE_PARTIALS, AOTK_DTYPE_FLOAT32, 4, {2, INT32_MAX, 1, 16, 0, 0}, {0, 0, 16, 1, 0, 0}};
  const aotk_tensor lse_parts = {FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 3, {2, 1, INT32_MAX, 0, 0, 0},
                                 {0, 0, 1, 0, 0, 0}};
  params = (aotk_merge_params)AOTK_MERGE_PARAMS_INIT;
  params.out_partials = parts, params.lse_partials = lse_parts;
  params.out = aotk_tensor_3d(FAKE_OUT, AOTK_DTYPE_FLOAT16, INT32_MAX, 1, 16);
  s = (merge_shape){AOTK_DTYPE_FLOAT32, AOTK_DTYPE_FLOAT16, 2, 1, INT32_MAX, 1, 16, true, false, false};
  check_merge("2^31 - 1 rows", &params, &s, &sel_sm90, 1);

  /* A caller built before 0.4: nothing from num_splits on is written. */
  params = merge_params_for(default_merge_shape);
  aotk_kernel_info info;
  poison_info(&info);
  info.struct_size = offsetof(aotk_kernel_info, num_splits);
  CHECK(aotk_merge_query(AOTK_OP_MERGE, &params, &info) == AOTK_OK);
  const unsigned char *bytes = (const unsigned char *)&info;
  bool tail_untouched = true;
  for (size_t b = offsetof(aotk_kernel_info, num_splits); b < sizeof info; b++) {
    tail_untouched = tail_untouched && bytes[b] == POISON;
  }
  CHECK_MSG(tail_untouched && info.launches == 1 && strncmp(info.kernel_name, "attn_merge_", 11) == 0,
            "aotk_merge_query wrote past struct_size (or not before it): %s", info.kernel_name);
  uninstall_fake_gpu();
}

/* The merge's grid, as literals (8 rows x 32 head-dim columns per program): the default problem's 3 x 5
 * x 8 = 120 rows of 128 columns take 15 row blocks x 4 column chunks = 60 programs, unless lse is
 * written over the partials' lse (in place), where one program per row block walks the 4 chunks
 * (FLAG_WHOLE_ROWS, 15 programs): the programs of a row would otherwise write the lse that the others
 * still read. An in-place merge without lse, or an lse that only borders the partials' lse (on either
 * side), keeps the chunks. */
static void test_merge_in_place_grid(void) {
  install_fake_gpu(90, SHARED_SM90);
  merge_shape s = default_merge_shape;
  s.out_dtype = AOTK_DTYPE_FLOAT32;
  aotk_merge_params in_place = merge_params_for(s);
  in_place.out.data = in_place.out_partials.data;
  memcpy(in_place.out.strides, in_place.out_partials.strides + 1, 4 * sizeof(int64_t));
  in_place.lse.data = in_place.lse_partials.data;
  memcpy(in_place.lse.strides, in_place.lse_partials.strides + 1, 3 * sizeof(int64_t));
  aotk_merge_params no_lse = in_place;
  no_lse.lse.data = NULL;
  /* lse (120 floats) right after the partials' lse (4 x 120 floats from FAKE_LSE_PARTIALS), and right
   * before it. */
  aotk_merge_params after = merge_params_for(s), before = merge_params_for(s);
  after.lse.data = byte_offset(FAKE_LSE_PARTIALS, 4 * 4 * 120);
  before.lse.data = (void *)((uintptr_t)FAKE_LSE_PARTIALS - 4 * 120);
  const struct {
    const char *what;
    const aotk_merge_params *params;
    bool with_lse, whole_rows;
    int64_t grid;
  } cases[] = {
      {"out of place", NULL, true, false, 60},
      {"in place, lse over the first partial's", &in_place, true, true, 15},
      {"in place, no lse", &no_lse, false, false, 60},
      {"lse right after the partials' lse", &after, true, false, 60},
      {"lse right before the partials' lse", &before, true, false, 60},
  };
  /* 2^31 - 1 rows (1 x (2^31 - 1) tokens x 1 head, the partials broadcast) of head dim 1024: 2^28 row
   * blocks x 32 column chunks = 2^33 programs would pass the grid limit of 2^31 - 1, so whole rows, 2^28
   * programs, though nothing is in place. */
  aotk_merge_params huge = AOTK_MERGE_PARAMS_INIT;
  huge.out_partials = (aotk_tensor){FAKE_PARTIALS, AOTK_DTYPE_FLOAT32, 4, {2, INT32_MAX, 1, 1024, 0, 0},
                                    {0, 0, 1024, 1, 0, 0}};
  huge.lse_partials = (aotk_tensor){FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 3, {2, 1, INT32_MAX, 0, 0, 0},
                                    {0, 0, 1, 0, 0, 0}};
  huge.out = aotk_tensor_3d(FAKE_OUT, AOTK_DTYPE_FLOAT16, INT32_MAX, 1, 1024);
  const merge_shape huge_shape = {AOTK_DTYPE_FLOAT32, AOTK_DTYPE_FLOAT16, 2, 1, INT32_MAX, 1, 1024, true, false, false};
  aotk_kernel_info huge_info = AOTK_KERNEL_INFO_INIT;
  aotk_status huge_status = aotk_merge_query(AOTK_OP_MERGE, &huge, &huge_info);
  CHECK_MSG(huge_status == AOTK_OK && huge_info.grid == (int64_t)1 << 28, "2^31 - 1 rows of head dim 1024: %s (%s), "
            "grid %lld", aotk_status_name(huge_status), aotk_last_error(), (long long)huge_info.grid);
  reset_launch_log();
  huge_status = aotk_attn_merge(&huge, FAKE_STREAM);
  CHECK_MSG(huge_status == AOTK_OK && fake.logged_launches == 1 && fake.launch_log[0].grid[0] == 1u << 28 &&
                arg_i32(&fake.launch_log[0], MERGE_FLAGS) == (MERGE_FLAG_OUT_FP16 | MERGE_FLAG_WHOLE_ROWS),
            "2^31 - 1 rows of head dim 1024: %s (%s), %d launches", aotk_status_name(huge_status), aotk_last_error(),
            fake.logged_launches);
  check_merge("2^31 - 1 rows of head dim 1024", &huge, &huge_shape, &sel_sm90, 1);
  const aotk_merge_params out_of_place = merge_params_for(s);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const aotk_merge_params *params = cases[i].params != NULL ? cases[i].params : &out_of_place;
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_merge_query(AOTK_OP_MERGE, params, &info);
    CHECK_MSG(status == AOTK_OK && info.block_m == 8 && info.block_n == 32 && info.grid == cases[i].grid,
              "%s: %s (%s), block %d x %d, grid %lld, expected 8 x 32, %lld", cases[i].what, aotk_status_name(status),
              aotk_last_error(), info.block_m, info.block_n, (long long)info.grid, (long long)cases[i].grid);
    reset_launch_log();
    status = aotk_attn_merge(params, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK && fake.logged_launches == 1, "%s: %s (%s), %d launches", cases[i].what,
              aotk_status_name(status), aotk_last_error(), fake.logged_launches);
    if (status != AOTK_OK || fake.logged_launches != 1) continue;
    const recorded_launch *launch = &fake.launch_log[0];
    const int32_t flags = (cases[i].with_lse ? FLAG_WRITE_LSE : 0) | (cases[i].whole_rows ? MERGE_FLAG_WHOLE_ROWS : 0);
    CHECK_MSG(launch->grid[0] == (unsigned)cases[i].grid && arg_i32(launch, MERGE_FLAGS) == flags,
              "%s: grid %u, flags %#x, expected %lld, %#x", cases[i].what, launch->grid[0],
              (unsigned)arg_i32(launch, MERGE_FLAGS), (long long)cases[i].grid, (unsigned)flags);
    s.with_lse = cases[i].with_lse;
    check_merge(cases[i].what, params, &s, &sel_sm90, 1);
  }
  uninstall_fake_gpu();
}

/* ---- the stream's context ------------------------------------------------------------------ */

/* A context other than the current one (FAKE_CONTEXT): the context of another device's stream. */
#define OTHER_CONTEXT ((CUcontext)(uintptr_t)0x6100u)

/* Each public call that launches on a stream, on a valid problem of its own. The decoding call splits
 * (a merge follows); on the fake sm_90 the backward takes the non-deterministic plan (a memset first). */
static aotk_status stream_call_attn_fwd(aotk_stream stream) {
  aotk_attn_params params = valid_params();
  return aotk_attn_fwd(&params, stream);
}
static aotk_status stream_call_attn_bwd(aotk_stream stream) {
  aotk_attn_params params = valid_bwd_params();
  return aotk_attn_bwd(&params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, stream);
}
static aotk_status stream_call_sel_fwd(aotk_stream stream) {
  aotk_sel_params params = valid_sel_params();
  return aotk_sel_fwd(&params, stream);
}
static aotk_status stream_call_sel_bwd(aotk_stream stream) {
  aotk_sel_params params = valid_sel_bwd_params();
  return aotk_sel_bwd(&params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, stream);
}
static aotk_status stream_call_sel_check_indices(aotk_stream stream) {
  aotk_sel_params params = valid_sel_params();
  return aotk_sel_check_indices(&params, FAKE_WORKSPACE, 16, stream);
}
static aotk_status stream_call_decode(aotk_stream stream) {
  aotk_decode_params params = valid_decode_params();
  params.num_splits = 4;
  return aotk_attn_decode(&params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, stream);
}
static aotk_status stream_call_merge(aotk_stream stream) {
  aotk_merge_params params = valid_merge_params();
  return aotk_attn_merge(&params, stream);
}

static const struct stream_call {
  const char *what;
  aotk_status (*call)(aotk_stream stream);
  int launches; /* on success */
} stream_calls[] = {
    {"aotk_attn_fwd", stream_call_attn_fwd, 1},
    {"aotk_attn_bwd", stream_call_attn_bwd, 3},
    {"aotk_sel_fwd", stream_call_sel_fwd, 1},
    {"aotk_sel_bwd", stream_call_sel_bwd, 7},
    {"aotk_sel_check_indices", stream_call_sel_check_indices, 1},
    {"aotk_attn_decode", stream_call_decode, 2},
    {"aotk_attn_merge", stream_call_merge, 1},
};

/* Whether every driver call since the last reset_calls only found the device and the stream's context
 * (or named a failure): nothing was loaded, encoded, cleared, copied, synchronized or launched. */
static bool only_planning_calls(void) {
  static const int planning[] = {CALL_cuInit,         CALL_cuCtxGetCurrent, CALL_cuCtxGetDevice,  CALL_cuDeviceGetAttribute,
                                 CALL_cuStreamGetCtx, CALL_cuGetErrorName,  CALL_cuGetErrorString};
  int allowed = 0;
  for (size_t i = 0; i < sizeof planning / sizeof planning[0]; i++) allowed += fake.calls[planning[i]];
  return allowed == total_calls();
}

/* The kernels are context-independent, so the driver would run a launch in its stream's context even
 * when another is current, with a plan made for the current context's device (measured on two GPUs).
 * Every launching call refuses such a stream, AOTK_ERROR_NO_CONTEXT with a message, before it loads,
 * encodes, clears, copies or launches anything, on a first call (nothing loaded yet) and after a
 * success; a failing cuStreamGetCtx (a destroyed stream) is AOTK_ERROR_CUDA, touching nothing either.
 * The current context's stream runs, after one cuStreamGetCtx; the default streams (NULL,
 * CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) belong to whatever context is current and run without one.
 * The queries take no stream and never ask. */
static void test_stream_of_another_context(void) {
  const size_t count = sizeof stream_calls / sizeof stream_calls[0];
  for (int round = 0; round < 2; round++) {
    install_fake_gpu(90, SHARED_SM90);
    if (round == 1) {
      /* Everything loaded and the device cached first: the refusal does not depend on a first use. */
      for (size_t i = 0; i < count; i++) CHECK(stream_calls[i].call(FAKE_STREAM) == AOTK_OK);
    }
    for (size_t i = 0; i < count; i++) {
      const struct stream_call *c = &stream_calls[i];
      fake.stream_context = OTHER_CONTEXT;
      reset_calls();
      reset_launch_log();
      fake.launches = 0;
      aotk_status status = c->call(FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_NO_CONTEXT, "round %d, %s: %s (%s), expected AOTK_ERROR_NO_CONTEXT", round,
                c->what, aotk_status_name(status), aotk_last_error());
      CHECK_MSG(message_mentions("the stream belongs to another CUDA context") &&
                    message_mentions("make the stream's context"),
                "round %d, %s: the message \"%s\"", round, c->what, aotk_last_error());
      CHECK_MSG(fake.calls[CALL_cuStreamGetCtx] == 1 && fake.stream_context_asked == (CUstream)FAKE_STREAM,
                "round %d, %s: %d cuStreamGetCtx calls", round, c->what, fake.calls[CALL_cuStreamGetCtx]);
      CHECK_MSG(only_planning_calls() && fake.launches == 0 && fake.memsets == 0,
                "round %d, %s: the refused call went on (%s)", round, c->what, called_functions());

      fake.stream_context = NULL;
      fake.stream_context_result = CUDA_ERROR_INVALID_CONTEXT;
      reset_calls();
      status = c->call(FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuStreamGetCtx") &&
                    aotk_last_cuda_result() == CUDA_ERROR_INVALID_CONTEXT,
                "round %d, %s with a failing cuStreamGetCtx: %s (%s)", round, c->what, aotk_status_name(status),
                aotk_last_error());
      CHECK_MSG(only_planning_calls() && fake.launches == 0 && fake.memsets == 0,
                "round %d, %s with a failing cuStreamGetCtx: the call went on (%s)", round, c->what,
                called_functions());
      fake.stream_context_result = CUDA_SUCCESS;
    }
    for (size_t i = 0; i < count; i++) {
      const struct stream_call *c = &stream_calls[i];
      reset_calls();
      reset_launch_log();
      aotk_status status = c->call(FAKE_STREAM);
      CHECK_MSG(status == AOTK_OK && fake.logged_launches == c->launches && fake.launch.stream == (CUstream)FAKE_STREAM,
                "round %d, %s on the current context's stream: %s (%s), %d launches", round, c->what,
                aotk_status_name(status), aotk_last_error(), fake.logged_launches);
      CHECK_MSG(fake.calls[CALL_cuStreamGetCtx] == 1, "round %d, %s: %d cuStreamGetCtx calls", round, c->what,
                fake.calls[CALL_cuStreamGetCtx]);
    }
  }

  /* The default streams: any context's, so never asked about, even where every other stream is refused. */
  static const struct {
    const char *what;
    aotk_stream stream;
  } default_streams[] = {{"NULL", NULL},
                         {"CU_STREAM_LEGACY", (aotk_stream)(uintptr_t)0x1},
                         {"CU_STREAM_PER_THREAD", (aotk_stream)(uintptr_t)0x2}};
  install_fake_gpu(90, SHARED_SM90);
  fake.stream_context = OTHER_CONTEXT;
  for (size_t s = 0; s < sizeof default_streams / sizeof default_streams[0]; s++) {
    for (size_t i = 0; i < count; i++) {
      const struct stream_call *c = &stream_calls[i];
      reset_calls();
      reset_launch_log();
      aotk_status status = c->call(default_streams[s].stream);
      CHECK_MSG(status == AOTK_OK && fake.logged_launches == c->launches &&
                    fake.launch.stream == (CUstream)default_streams[s].stream,
                "%s on %s: %s (%s), %d launches", c->what, default_streams[s].what, aotk_status_name(status),
                aotk_last_error(), fake.logged_launches);
      CHECK_MSG(fake.calls[CALL_cuStreamGetCtx] == 0, "%s on %s: cuStreamGetCtx called", c->what,
                default_streams[s].what);
    }
  }

  /* The queries launch nothing and take no stream: they answer as before, without asking. */
  reset_calls();
  aotk_attn_params attn = valid_bwd_params();
  aotk_sel_params sel = valid_sel_bwd_params();
  aotk_decode_params decode = valid_decode_params();
  aotk_merge_params merge = valid_merge_params();
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &attn, &info) == AOTK_OK && aotk_query(AOTK_OP_ATTN_BWD, &attn, &info) == AOTK_OK);
  CHECK(aotk_sel_query(AOTK_OP_SEL_FWD, &sel, &info) == AOTK_OK && aotk_sel_query(AOTK_OP_SEL_BWD, &sel, &info) == AOTK_OK);
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &decode, &info) == AOTK_OK);
  CHECK(aotk_merge_query(AOTK_OP_MERGE, &merge, &info) == AOTK_OK);
  CHECK(aotk_preload() == AOTK_OK);
  CHECK_MSG(fake.calls[CALL_cuStreamGetCtx] == 0, "a query or aotk_preload called cuStreamGetCtx");
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_status_names_and_strings);
  RUN_TEST(test_version);
  RUN_TEST(test_last_error_cleared_by_success);
  RUN_TEST(test_last_error_is_per_thread);
  RUN_TEST(test_validation_rejects_bad_inputs);
  RUN_TEST(test_validation_span_checks_do_not_wrap);
  RUN_TEST(test_validation_accepts_edge_inputs);
  RUN_TEST(test_validation_lse_span_follows_its_layout);
  RUN_TEST(test_bwd_validation_rejects_bad_inputs);
  RUN_TEST(test_bwd_validation_accepts_edge_inputs);
  RUN_TEST(test_fwd_ignores_bwd_fields);
  RUN_TEST(test_bwd_workspace);
  RUN_TEST(test_fault_no_device);
  RUN_TEST(test_fault_no_context);
  RUN_TEST(test_fault_old_gpu);
  RUN_TEST(test_fault_too_little_shared_memory);
  RUN_TEST(test_fault_library_load_fails);
  RUN_TEST(test_fault_get_kernel_fails);
  RUN_TEST(test_fault_set_attribute_fails);
  RUN_TEST(test_fault_launch_fails);
  RUN_TEST(test_parameter_lists_match_the_table);
  RUN_TEST(test_launch_arguments);
  RUN_TEST(test_bwd_launch_arguments);
  RUN_TEST(test_feature_launches);
  RUN_TEST(test_feature_launches_literal);
  RUN_TEST(test_padded_head_dims);
  RUN_TEST(test_varlen_launches);
  RUN_TEST(test_optional_launches);
  RUN_TEST(test_bwd_feature_launches);
  RUN_TEST(test_bwd_arch_choice);
  RUN_TEST(test_bwd_launch_fails);
  RUN_TEST(test_bwd_memset_fails);
  RUN_TEST(test_bwd_faults);
  RUN_TEST(test_bwd_too_little_shared_memory);
  RUN_TEST(test_arch_choice);
  RUN_TEST(test_image_policy);
  RUN_TEST(test_alignment_choice);
  RUN_TEST(test_tuning_choice);
  RUN_TEST(test_window_tuning_choice);
  RUN_TEST(test_tma_eligibility);
  RUN_TEST(test_tma_launch_arguments);
  RUN_TEST(test_hopper_grid);
  RUN_TEST(test_bwd_hopper_choice);
  RUN_TEST(test_bwd_hopper_varlen);
  RUN_TEST(test_bwd_encode_failure);
  RUN_TEST(test_tma_encode_failure);
  RUN_TEST(test_bwd_tuning_choice);
  RUN_TEST(test_preload);
  RUN_TEST(test_release_0_1_caller);
  RUN_TEST(test_no_driver);
  RUN_TEST(test_build_info);
  RUN_TEST(test_query_arguments);
  RUN_TEST(test_sel_validation_rejects_bad_inputs);
  RUN_TEST(test_sel_fwd_ignores_bwd_fields);
  RUN_TEST(test_sel_validation_accepts_edge_inputs);
  RUN_TEST(test_sel_bwd_workspace);
  RUN_TEST(test_sel_check_indices_workspace);
  RUN_TEST(test_sel_query_arguments);
  RUN_TEST(test_sel_launch_arguments);
  RUN_TEST(test_sel_tuning_choice);
  RUN_TEST(test_sel_too_little_shared_memory);
  RUN_TEST(test_sel_faults);
  RUN_TEST(test_sel_check_indices);
  RUN_TEST(test_sel_after_preload);
  RUN_TEST(test_decode_validation_rejects_bad_inputs);
  RUN_TEST(test_decode_validation_overflow);
  RUN_TEST(test_decode_validation_accepts_edge_inputs);
  RUN_TEST(test_decode_split_choice);
  RUN_TEST(test_decode_launch_arguments);
  RUN_TEST(test_decode_varlen);
  RUN_TEST(test_decode_family_choice);
  RUN_TEST(test_decode_features);
  RUN_TEST(test_decode_query_arguments);
  RUN_TEST(test_decode_workspace);
  RUN_TEST(test_decode_faults);
  RUN_TEST(test_merge_validation_rejects_bad_inputs);
  RUN_TEST(test_merge_validation_accepts_edge_inputs);
  RUN_TEST(test_merge_in_place_grid);
  RUN_TEST(test_merge_launch_arguments);
  RUN_TEST(test_stream_of_another_context);
  aotk__driver_set_for_testing(NULL);
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);
  return aotk_test_finish();
}
