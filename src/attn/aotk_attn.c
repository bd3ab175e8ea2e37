/* The attention API: the plan (which kernels, from the generated table, through
 * src/runtime/aotk_launch.c), the packed arguments and the launch, and the query.
 *
 * A call validates everything (aotk_attn_validate.c) before it touches the driver, so a bad argument
 * gets the same status on a machine with no GPU as on one with a GPU, and nothing is launched or
 * written. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdbool.h>
#include <string.h>

#include "aotk_attn.h"
#include "aotk_driver.h"
#include "aotk_error.h"
#include "aotk_image.h"
#include "aotk_kernel_table.h"
#include "aotk_launch.h"
#include "aotk_tensor_validate.h"
#include "aotk_tma.h"

static int64_t blocks(int64_t length, int32_t block) { return (length + block - 1) / block; }

/* The dropout keep threshold: an element is kept when its random byte is >= t = round(256 p), at most 255
 * (include/aotk.h). The effective probability is t / 256, and kept weights are scaled by 256 / (256 - t). */
static uint32_t dropout_threshold(float p) {
  double t = floor((double)p * 256.0 + 0.5);
  return t >= 255.0 ? 255u : (uint32_t)t;
}

/* The Gluon forward: two consumer warpgroups (128-row tiles), or three at d=64 (192-row tiles), or two
 * drawing dropout. */
static bool is_hopper_fwd(int family) {
  return family == AOTK__FAMILY_ATTN_FWD_HOPPER || family == AOTK__FAMILY_ATTN_FWD_HOPPER_WG3 ||
         family == AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT;
}

/* The backward's Gluon dK/dV pass with dQ fused (non-deterministic), plain or drawing dropout. */
static bool is_bwd_fused(int family) {
  return family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER || family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER_DROPOUT;
}

/* The backward's Gluon dK/dV passes, deterministic or fused, plain or drawing dropout. */
static bool is_bwd_hopper(int family) {
  return family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER || family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER_DROPOUT ||
         is_bwd_fused(family);
}

/* The dropout forms carry no softcap or ALiBi code, and their rows are not EXTRAS rows. */
static bool is_dropout_form(int family) {
  return family == AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT || family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER_DROPOUT ||
         family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER_DROPOUT;
}

static uint32_t problem_features(const aotk__attn_problem *p, const aotk__kernel_entry *e) {
  uint32_t f = 0;
  if (p->varlen) f |= AOTK_FEATURE_VARLEN;
  if (p->causal) f |= AOTK_FEATURE_CAUSAL;
  if (p->window_left >= 0 || (p->window_right >= 0 && !p->causal)) f |= AOTK_FEATURE_WINDOW;
  if (p->softcap > 0.0f) f |= AOTK_FEATURE_SOFTCAP;
  if (p->alibi) f |= AOTK_FEATURE_ALIBI;
  if (p->sinks) f |= AOTK_FEATURE_SINKS;
  if (p->dropout_p > 0.0f) f |= AOTK_FEATURE_DROPOUT;
  if (e->head_dim_qk > p->head_dim_qk || e->head_dim_v > p->head_dim_v) f |= AOTK_FEATURE_PADDED_HEAD_DIM;
  if (e->extras) f |= AOTK_FEATURE_EXTRAS_KERNEL;
  const bool warp_specialized =
      is_hopper_fwd(e->family) || is_bwd_hopper(e->family) || e->family == AOTK__FAMILY_ATTN_BWD_DQ_HOPPER;
  if (e->family == AOTK__FAMILY_ATTN_FWD_TMA || warp_specialized) f |= AOTK_FEATURE_TMA;
  if (warp_specialized) f |= AOTK_FEATURE_WARP_SPECIALIZED;
  if (is_bwd_fused(e->family)) f |= AOTK_FEATURE_NONDETERMINISTIC;
  return f;
}

/* Kernel parameters, in the catalog's order (codegen/aotk_catalog.py). "lii" is one tensor's
 * (batch: int64, sequence: int32, head: int32) strides. */
#define STRIDES "lii"
#define FEATURE_POINTERS "pp" /* cu_seqlens_q, cu_seqlens_k */
#define MASK_INTS "iiiii"    /* head_dim_qk8, head_dim_v8, window_left, window_right, flags */
#define SCORE_SCALARS "fff"   /* qk_scale_log2, softcap_scale, softcap_log2 */
#define DROPOUT_SCALARS "if"  /* dropout_threshold, dropout_scale */
static const char attn_fwd_param_kinds[] = "ppppp" FEATURE_POINTERS "ppp" STRIDES STRIDES STRIDES STRIDES "lil"
                                           "iiiii" MASK_INTS SCORE_SCALARS DROPOUT_SCALARS;
/* The TMA forward takes the pointer kernel's parameters, then descriptors of Q, K and V. */
static const char attn_fwd_tma_param_kinds[] = "ppppp" FEATURE_POINTERS "ppp" STRIDES STRIDES STRIDES STRIDES "lil"
                                               "iiiii" MASK_INTS SCORE_SCALARS DROPOUT_SCALARS "ttt";
/* The Gluon forward takes the TMA kernel's and O's descriptor, then the number of tiles its persistent
 * programs share. */
static const char attn_fwd_hopper_param_kinds[] = "ppppp" FEATURE_POINTERS "ppp" STRIDES STRIDES STRIDES STRIDES "lil"
                                                  "iiiii" MASK_INTS SCORE_SCALARS DROPOUT_SCALARS "tttt" "i";
static const char attn_dropout_mask_param_kinds[] = "p" FEATURE_POINTERS "p" "lll" "iiiiii";
static const char attn_bwd_preprocess_param_kinds[] = "ppppp" "p" "pp" STRIDES STRIDES "li" "iiii" "i" "ii";
static const char attn_bwd_sink_reduce_param_kinds[] = "ppi";
#define BWD_DKDV_KINDS \
  "pppppppp" FEATURE_POINTERS "pp" STRIDES STRIDES STRIDES STRIDES STRIDES STRIDES "l" "iiiiii" "i" MASK_INTS "f" \
  SCORE_SCALARS DROPOUT_SCALARS
static const char attn_bwd_dkdv_param_kinds[] = BWD_DKDV_KINDS;
/* The Gluon dK/dV pass takes attn_bwd_dkdv's parameters, then descriptors of Q, K, V and dO; its fused
 * (non-deterministic) form one more, of the fp32 dQ accumulator. */
static const char attn_bwd_dkdv_hopper_param_kinds[] = BWD_DKDV_KINDS "tttt";
static const char attn_bwd_fused_hopper_param_kinds[] = BWD_DKDV_KINDS "ttttt";
#undef BWD_DKDV_KINDS
static const char attn_bwd_dq_convert_param_kinds[] = "ppp" STRIDES "iii" "i" "i";
#define BWD_DQ_KINDS \
  "ppppppp" FEATURE_POINTERS "pp" STRIDES STRIDES STRIDES STRIDES STRIDES "l" "iiiii" "i" MASK_INTS "f" SCORE_SCALARS \
  DROPOUT_SCALARS
static const char attn_bwd_dq_param_kinds[] = BWD_DQ_KINDS;
/* The Gluon dQ pass takes attn_bwd_dq's parameters, then descriptors of Q, K, V and dO. */
static const char attn_bwd_dq_hopper_param_kinds[] = BWD_DQ_KINDS "tttt";
#undef BWD_DQ_KINDS
#undef STRIDES

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
  FLAG_O_TMA = 256, /* the Gluon forward stores O through its descriptor */
};

/* A tensor's device pointer and strides, as the kernels take them. */
typedef struct packed_tensor {
  CUdeviceptr pointer;
  int64_t stride_batch;
  int32_t stride_sequence, stride_head;
} packed_tensor;

static packed_tensor pack_tensor(const aotk_tensor *t) {
  packed_tensor p = {(CUdeviceptr)(uintptr_t)t->data, t->strides[0], (int32_t)t->strides[1], (int32_t)t->strides[2]};
  return p;
}

#define TENSOR_ARGS(p) &(p).pointer
#define STRIDE_ARGS(p) &(p).stride_batch, &(p).stride_sequence, &(p).stride_head

/* The scalars every attention kernel takes, from the validated problem. */
typedef struct feature_args {
  CUdeviceptr cu_seqlens_q, cu_seqlens_k, alibi, sinks, rng_state;
  int64_t stride_ab;
  int32_t head_dim_qk8, head_dim_v8, window_left, window_right, flags;
  float softmax_scale, qk_scale_log2, softcap_scale, softcap_log2;
  int32_t dropout_threshold;
  float dropout_scale;
} feature_args;

static feature_args make_feature_args(const aotk_attn_params *params, const aotk__attn_problem *p) {
  feature_args a;
  memset(&a, 0, sizeof a);
  a.cu_seqlens_q = (CUdeviceptr)(uintptr_t)params->cu_seqlens_q.data;
  a.cu_seqlens_k = (CUdeviceptr)(uintptr_t)params->cu_seqlens_k.data;
  a.alibi = (CUdeviceptr)(uintptr_t)params->alibi_slopes.data;
  a.sinks = (CUdeviceptr)(uintptr_t)params->sinks.data;
  a.rng_state = p->dropout_p > 0.0f ? (CUdeviceptr)(uintptr_t)params->rng_state.data : 0;
  a.stride_ab = p->alibi_batch_stride;
  a.head_dim_qk8 = (int32_t)(p->head_dim_qk / 8);
  a.head_dim_v8 = (int32_t)(p->head_dim_v / 8);
  a.window_left = p->window_left;
  a.window_right = p->window_right;
  a.flags = (p->write_lse ? FLAG_WRITE_LSE : 0) | (p->varlen ? FLAG_VARLEN : 0) | (p->top_left ? FLAG_TOP_LEFT : 0) |
            (p->softcap > 0.0f ? FLAG_SOFTCAP : 0) | (p->alibi ? FLAG_ALIBI : 0) | (p->sinks ? FLAG_SINKS : 0) |
            (p->dropout_p > 0.0f ? FLAG_DROPOUT : 0);
  /* Causal-like masks give later query blocks more work: run them first. */
  if (p->window_right >= 0 && p->window_left < 0) a.flags |= FLAG_REVERSE;
  a.softmax_scale = p->softmax_scale;
  a.qk_scale_log2 = p->softmax_scale * 1.4426950408889634f;
  a.softcap_scale = p->softcap > 0.0f ? p->softmax_scale / p->softcap : 0.0f;
  a.softcap_log2 = p->softcap * 1.4426950408889634f;
  uint32_t threshold = p->dropout_p > 0.0f ? dropout_threshold(p->dropout_p) : 0u;
  memcpy(&a.dropout_threshold, &threshold, sizeof threshold);
  a.dropout_scale = p->dropout_p > 0.0f ? (float)(256.0 / (256.0 - (double)threshold)) : 1.0f;
  return a;
}

/* Everything needed to launch a call, chosen before anything is loaded or launched. */
typedef struct attn_plan {
  aotk__device_info device;
  int rows[4];
  int count;
  aotk__image_kind kind;
} attn_plan;

/* The current context's device, and `stream` checked to belong to that context: before anything else
 * is planned, since a plan for another device than the stream's means nothing. Queries and preloading
 * launch nothing and pass NULL. */
static aotk_status plan_device(attn_plan *plan, const aotk__driver **driver, aotk_stream stream) {
  aotk_status status = aotk__driver_get(driver);
  if (status != AOTK_OK || (status = aotk__current_device(*driver, &plan->device)) != AOTK_OK) return status;
  return aotk__check_stream_context(*driver, &plan->device, stream);
}

/* The forward: its kernel, and the dropout-mask kernel when the mask is asked for. */

/* codegen/aotk_catalog.py's FWD_SHORT_CAUSAL: the size key of the Gluon forward's short causal tile, beyond
 * any sequence (fwd_size_key keeps its keys under it). */
#define HOPPER_SHORT_CAUSAL_KEY ((int64_t)1 << 30)

/* The forward's tuning key: seqlen_q, or for a window bounded on both sides (causal counts as a right
 * bound of 0) the keys a row sees, if fewer: a program's work follows the window, and the small tiles the
 * table picks for short sequences run windows faster too (bench/explore/feature_cost_jit.py --windows, H100,
 * d=128 at 16k: window 1024 causal 0.70 of plain with 64x64 tiles against 0.64 with 128x128; (512, 512)
 * 0.74 against 0.65). */
static int64_t fwd_size_key(const aotk__attn_problem *problem) {
  /* Not for the EXTRAS kernels: their short-sequence tile runs long rows 27% slower (same script,
   * --extras: softcap at 16k, 273 TFLOP/s with 64x64 against 371 with 128x64). */
  int64_t key = problem->seqlen_q;
  if (problem->window_left >= 0 && problem->window_right >= 0 && !problem->extras) {
    int64_t span = (int64_t)problem->window_left + problem->window_right;
    key = span < problem->seqlen_q ? (span > 1 ? span : 1) : problem->seqlen_q;
  }
  return key < HOPPER_SHORT_CAUSAL_KEY ? key : HOPPER_SHORT_CAUSAL_KEY - 1;
}

/* Whether the Gluon forward takes its short causal tile (64-key blocks, 3 stages; codegen/aotk_catalog.py,
 * FWD_SHORT_CAUSAL): a causal mask with no left window over at most 512 queries and keys, 1024 with the
 * EXTRAS code. Half-width key blocks halve the masked triangle that each tile's diagonal block computes,
 * most of a short causal row's waste; on longer rows the wider block's fewer steps win. On the H100
 * (fwd_hopper_jit.py, bf16, TFLOP/s with 128 -> 64 keys a block): d128 at 512 265 -> 290, d64 at 256 93 ->
 * 121 and at 512 184 -> 195, but at 768 257 -> 231; softcap or ALiBi at d128 and 1024 279-283 -> 318-331. */
static bool hopper_short_causal(const aotk__attn_problem *problem) {
  const int64_t limit = problem->extras ? 1024 : 512;
  return problem->window_left < 0 && problem->window_right == 0 && problem->seqlen_q <= limit &&
         problem->seqlen_k <= limit;
}

/* The problem's variant axes, as the kernel table is keyed. */
static aotk__variant_key variant_key(const aotk__attn_problem *problem) {
  aotk__variant_key key = {problem->dtype, problem->head_dim_qk, problem->head_dim_v, problem->aligned, problem->extras};
  return key;
}

/* The table row of a TMA family (the Triton TMA forward, or one of the warp-specialized Gluon kernels)
 * for this problem on this device, or -1: sm_90 cubins, a layout that TMA can read (dense, or varlen for
 * the Gluon kernels), and a kernel compiled for exactly the problem's head dims (a wider box would reach
 * into the next head). Chosen by the same tuning rule as the pointer kernels. Sets no error. */
static int choose_tma_row(int family, const aotk__attn_problem *problem, const attn_plan *plan, int64_t size_key) {
  int arch;
  aotk__image_kind kind;
  if (aotk__choose_target(&plan->device, &arch, &kind) != AOTK_OK || arch != 90 || kind != AOTK__IMAGE_CUBIN) return -1;
  /* Varlen: the Gluon kernels read the packed tensors as [1, total, heads * head_dim] and add each
   * sequence's start to their row coordinates (blocks past a sequence's end read the next one's rows,
   * which they mask or do not store); the Triton TMA forward is dense only. */
  if (problem->varlen && family == AOTK__FAMILY_ATTN_FWD_TMA) return -1;
  if (!problem->aligned || !aotk__tma_view_ok(&problem->q) || !aotk__tma_view_ok(&problem->k) || !aotk__tma_view_ok(&problem->v)) {
    return -1;
  }
  /* The backward's dK/dV pass reads dO through TMA too. */
  if ((is_bwd_hopper(family) || family == AOTK__FAMILY_ATTN_BWD_DQ_HOPPER) && !aotk__tma_view_ok(&problem->dout)) {
    return -1;
  }
  aotk__variant_key key = variant_key(problem);
  /* The dropout forms carry no softcap or ALiBi code: their rows are not EXTRAS rows (plan_fwd and plan_bwd
   * ask for them only without those). */
  if (is_dropout_form(family)) key.extras = 0;
  int best = -1;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (!aotk__variant_matches(e, family, arch, &key) || e->head_dim_qk != problem->head_dim_qk ||
        e->head_dim_v != problem->head_dim_v || e->min_seqlen > size_key || e->cubin.raw_bytes == 0 ||
        e->shared_bytes > plan->device.max_shared_bytes) {
      continue;
    }
    if (best < 0 || e->min_seqlen > aotk__kernel_table[best].min_seqlen) best = i;
  }
  return best;
}

/* The shortest query length (max_seqlen_q for varlen) that takes the three-warpgroup forward. */
#define HOPPER_WG3_MIN_SEQLEN 2048

/* The Gluon kernels (kernels/attn_fwd_hopper.py, kernels/attn_bwd_hopper.py) compute every call but
 * dropout, forward and backward: masks and windows of both alignments, sinks (the forward's epilogue, the
 * backward's staged lse), and softcap and ALiBi in their EXTRAS rows. Dropout without softcap or ALiBi has
 * forms of its own at d64 and d128 (plan_fwd, plan_bwd). */
static bool hopper_kernels_cover(const aotk__attn_problem *problem) { return problem->dropout_p == 0.0f; }

static aotk_status plan_fwd(const aotk__attn_problem *problem, attn_plan *plan) {
  const aotk__variant_key key = variant_key(problem);
  aotk_status status = AOTK_OK;
  int tma_row = -1;
  /* Without a causal mask the tiles are equal and three consumer warpgroups (192-row tiles, d=64 only)
   * are faster from 2048 query rows on; under a causal mask the static rounds balance 128-row tiles
   * better, and on short sequences a 192-row tile pads more rows (bench_attn.py, H100, bf16 d64
   * non-causal, TFLOP/s of the 2-warpgroup kernel (2026-11-24) -> 3 (2026-11-25): 512: 340 -> 319,
   * 1024: 397 -> 388, 2048: 431 -> 445, 4096: 449 -> 457, 8192: 463 -> 486, 16384: 446 -> 493). */
  if (hopper_kernels_cover(problem) && problem->window_left < 0 && problem->window_right < 0 &&
      fwd_size_key(problem) >= HOPPER_WG3_MIN_SEQLEN) {
    tma_row = choose_tma_row(AOTK__FAMILY_ATTN_FWD_HOPPER_WG3, problem, plan, fwd_size_key(problem));
  }
  /* Dropout without softcap or ALiBi: the Gluon forward drawing the keep rule in its consumers (d64 and d128,
   * 128-key blocks; kernels/attn_fwd_hopper.py, attn_fwd_hopper_dropout). The backward's dropout forms
   * draw the same mask (plan_bwd). */
  if (problem->dropout_p > 0.0f && problem->softcap == 0.0f && !problem->alibi) {
    tma_row = choose_tma_row(AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT, problem, plan, fwd_size_key(problem));
  }
  if (tma_row < 0 && hopper_kernels_cover(problem)) {
    tma_row = choose_tma_row(AOTK__FAMILY_ATTN_FWD_HOPPER, problem, plan, fwd_size_key(problem));
    if (tma_row >= 0 && hopper_short_causal(problem)) {
      const int short_row = choose_tma_row(AOTK__FAMILY_ATTN_FWD_HOPPER, problem, plan, HOPPER_SHORT_CAUSAL_KEY);
      if (short_row >= 0 && aotk__kernel_table[short_row].min_seqlen == HOPPER_SHORT_CAUSAL_KEY) tma_row = short_row;
    }
  }
  if (tma_row < 0) tma_row = choose_tma_row(AOTK__FAMILY_ATTN_FWD_TMA, problem, plan, fwd_size_key(problem));
  if (tma_row >= 0) {
    plan->rows[0] = tma_row;
    plan->kind = AOTK__IMAGE_CUBIN;
  } else {
    status = aotk__choose_kernel(AOTK__FAMILY_ATTN_FWD, &key, fwd_size_key(problem), &plan->device, &plan->rows[0],
                                 &plan->kind);
  }
  plan->count = 1;
  if (status == AOTK_OK && problem->write_dropout_mask) {
    status = aotk__choose_kernel(AOTK__FAMILY_ATTN_DROPOUT_MASK, &key, problem->seqlen_q, &plan->device,
                                 &plan->rows[1], &plan->kind);
    plan->count = 2;
  }
  return status;
}

/* The Gluon kernel's grid. It is persistent: each program walks tiles r * grid + p (boustrophedon, see
 * kernels/attn_fwd_hopper.py), so one program per SM, or fewer when there are fewer tiles. Under a causal
 * mask or a window the tiles differ in length and the static assignment can leave one program with
 * much more work than the mean; where it would (more than 8% over, the tile costed as its key blocks
 * plus one for its prologue and epilogue), the grid is one program per tile and the hardware's block
 * scheduler balances instead. From 64 rounds on the rounds average out and the check is skipped. The
 * rule is the one the exploration measured for causal masks (bench/explore/hopper/gluon_attn_fwd.py,
 * persistent_grid). */
/* The key blocks a tile of query rows [m0, m0 + block_m) walks in the Gluon forward (_tile in
 * kernels/attn_fwd_hopper.py): those some row sees under the window rule, from the first such key, or
 * from the block boundary below it in the rows that keep boundaries (EXTRAS, dropout, or blocks shorter
 * than the tile). */
static int64_t tile_key_blocks(const aotk__attn_problem *problem, const aotk__kernel_entry *e, int64_t m0,
                               int64_t diag) {
  const int64_t block_m = e->block_m, block_n = e->block_n;
  const int64_t sk = problem->seqlen_k;
  const int64_t last = (m0 + block_m < problem->seqlen_q ? m0 + block_m : problem->seqlen_q) - 1;
  int64_t lo = problem->window_left >= 0 ? m0 + diag - problem->window_left : 0;
  int64_t hi = problem->window_right >= 0 ? last + diag + problem->window_right + 1 : sk;
  lo = lo < 0 ? 0 : lo > sk ? sk : lo;
  hi = hi < 0 ? 0 : hi > sk ? sk : hi;
  if (e->extras || e->family == AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT || block_n < block_m - 1) {
    lo = lo / block_n * block_n;
  }
  return hi > lo ? blocks(hi - lo, block_n) : 0;
}

static int64_t hopper_grid(const aotk__attn_problem *problem, const aotk__kernel_entry *e, int64_t num_m_blocks,
                           int64_t num_tiles, int multiprocessors) {
  const int64_t sms = multiprocessors > 0 ? multiprocessors : 1;
  if (num_tiles <= sms) return num_tiles;
  /* A persistent program counts the key blocks of all its tiles in int32 (its pipeline's ring
   * counters): where that could pass 2^31 (sequences of 2^27 keys and more), one program per tile. */
  if (blocks(num_tiles, sms) * blocks(problem->seqlen_k, e->block_n) >= INT32_MAX) return num_tiles;
  /* Only a mask makes tiles unequal; many rounds average out. */
  if ((problem->window_left < 0 && problem->window_right < 0) || num_tiles > 64 * sms) return sms;
  const int64_t diag = problem->top_left ? 0 : problem->seqlen_k - problem->seqlen_q;
  /* The costing walks every tile (up to 64 rounds of SMs: ~20 us on the build machine's core), so the
   * last answer is kept per thread: a training or inference loop asks about the same shapes each step.
   * The answer depends on nothing else than the key. */
  static _Thread_local struct {
    int64_t key[10], grid;
  } memo;
  const int64_t key[10] = {num_tiles,  num_m_blocks,         problem->seqlen_k,     diag, e->block_m,
                           e->block_n, problem->window_left, problem->window_right, sms,
                           e->extras || e->family == AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT};
  if (memo.grid != 0 && memcmp(memo.key, key, sizeof key) == 0) return memo.grid;
  const bool reverse = problem->window_right >= 0 && problem->window_left < 0; /* as attn_flags sets it */
  double load[1024];
  if (sms > (int64_t)(sizeof load / sizeof load[0])) return sms;
  for (int64_t p = 0; p < sms; p++) load[p] = 0.0;
  double total = 0.0;
  for (int64_t r = 0; r * sms < num_tiles; r++) {
    for (int64_t p = 0; p < sms; p++) {
      const int64_t tile = r * sms + (r % 2 == 0 ? p : sms - 1 - p);
      if (tile >= num_tiles) continue;
      /* FLAG_REVERSE (causal-like masks): a head's last query block first. */
      const int64_t m_block = reverse ? num_m_blocks - 1 - tile % num_m_blocks : tile % num_m_blocks;
      const int64_t key_blocks = tile_key_blocks(problem, e, m_block * e->block_m, diag);
      const double work = (double)(key_blocks > 1 ? key_blocks : 1) + 1.0;
      load[p] += work;
      total += work;
    }
  }
  double busiest = 0.0;
  for (int64_t p = 0; p < sms; p++) busiest = load[p] > busiest ? load[p] : busiest;
  memcpy(memo.key, key, sizeof key);
  memo.grid = busiest <= 1.08 * total / (double)sms ? sms : num_tiles;
  return memo.grid;
}

/* The forward's tiles (query blocks x batch x query heads) and the programs launched over them: one per
 * tile, except for the persistent Gluon kernel. What aotk_query reports is what aotk_attn_fwd launches. */
static int64_t fwd_tiles(const aotk__attn_problem *problem, const aotk__kernel_entry *e) {
  return blocks(problem->seqlen_q, e->block_m) * problem->batch * problem->heads_q;
}

static int64_t fwd_grid(const aotk__attn_problem *problem, const aotk__kernel_entry *e, const attn_plan *plan) {
  const int64_t tiles = fwd_tiles(problem, e);
  if (!is_hopper_fwd(e->family)) return tiles;
  return hopper_grid(problem, e, blocks(problem->seqlen_q, e->block_m), tiles, plan->device.multiprocessors);
}

static aotk_status launch_fwd(const aotk__driver *driver, const aotk_attn_params *params,
                              const aotk__attn_problem *problem, const attn_plan *plan, aotk_stream stream) {
  const aotk__kernel_entry *e = &aotk__kernel_table[plan->rows[0]];
  packed_tensor q = pack_tensor(&problem->q), k = pack_tensor(&problem->k), v = pack_tensor(&problem->v);
  packed_tensor o = pack_tensor(&problem->out);
  feature_args f = make_feature_args(params, problem);
  CUdeviceptr lse_ptr = (CUdeviceptr)(uintptr_t)problem->lse.data;
  int64_t stride_lb = problem->write_lse ? problem->lse.strides[0] : 0;
  int32_t stride_lh = problem->write_lse ? (int32_t)problem->lse.strides[1] : 0;
  int32_t seqlen_q = (int32_t)problem->seqlen_q, seqlen_k = (int32_t)problem->seqlen_k;
  int32_t heads_q = (int32_t)problem->heads_q, group_size = (int32_t)(problem->heads_q / problem->heads_kv);
  int32_t num_m_blocks = (int32_t)blocks(problem->seqlen_q, e->block_m);
  void *args[] = {TENSOR_ARGS(q), TENSOR_ARGS(k), TENSOR_ARGS(v), TENSOR_ARGS(o), &lse_ptr, &f.cu_seqlens_q,
                  &f.cu_seqlens_k, &f.alibi, &f.sinks, &f.rng_state, STRIDE_ARGS(q), STRIDE_ARGS(k), STRIDE_ARGS(v),
                  STRIDE_ARGS(o), &stride_lb, &stride_lh, &f.stride_ab, &seqlen_q, &seqlen_k, &heads_q, &group_size,
                  &num_m_blocks, &f.head_dim_qk8, &f.head_dim_v8, &f.window_left, &f.window_right, &f.flags,
                  &f.qk_scale_log2, &f.softcap_scale, &f.softcap_log2, &f.dropout_threshold, &f.dropout_scale};
  _Static_assert(sizeof args / sizeof args[0] == sizeof attn_fwd_param_kinds - 1, "one argument per parameter");
  const bool hopper = is_hopper_fwd(e->family);
  const bool tma = e->family == AOTK__FAMILY_ATTN_FWD_TMA || hopper;
  const char *const kinds[] = {hopper ? attn_fwd_hopper_param_kinds : tma ? attn_fwd_tma_param_kinds : attn_fwd_param_kinds,
                               attn_dropout_mask_param_kinds};
  const int64_t num_tiles = fwd_tiles(problem, e);
  /* A guard, not a reachable refusal: validation's grid bound, batch * heads_q * ceil(seqlen_q / 64)
   * < 2^31, keeps the tiles (64 query rows or more) below it. */
  if (hopper && num_tiles > INT32_MAX) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "%lld query tiles: the persistent forward counts them in 32 bits",
                      (long long)num_tiles);
  }
  int32_t num_tiles32 = (int32_t)num_tiles;
  CUkernel kernels[2];
  aotk_status status = aotk__load_rows(driver, plan->rows, kinds, plan->count, plan->kind, plan->device.device, kernels);
  if (status != AOTK_OK) return status;
  const int64_t grid = fwd_grid(problem, e, plan);
  if (tma) {
    /* The Gluon forward stores O by TMA where O's layout allows (its descriptor in 64-row boxes, dv wide);
     * otherwise by masked stores, and the fourth descriptor is V's (same box width, always encodable
     * here, never used). */
    const bool o_tma = hopper && aotk__tma_view_ok(&problem->out);
    if (o_tma) f.flags |= FLAG_O_TMA;
    const int count_maps = hopper ? 4 : 3;
    aotk__packed_descriptor descriptors[4];
    const aotk_tensor *tensors[4] = {&problem->q, &problem->k, &problem->v, o_tma ? &problem->out : &problem->v};
    const char *const names[4] = {"q", "k", "v", o_tma ? "out" : "v (as out's stand-in)"};
    if ((status = aotk__encode_descriptors(driver, e, tensors, names, count_maps, descriptors)) != AOTK_OK) return status;
    void *tma_args[sizeof args / sizeof args[0] + 4 * 7 + 1];
    memcpy(tma_args, args, sizeof args);
    void *descriptor_args[] = {AOTK__DESCRIPTOR_ARGS(descriptors[0]), AOTK__DESCRIPTOR_ARGS(descriptors[1]),
                               AOTK__DESCRIPTOR_ARGS(descriptors[2]), AOTK__DESCRIPTOR_ARGS(descriptors[3])};
    _Static_assert(sizeof descriptor_args == 4 * 7 * sizeof(void *), "seven arguments per descriptor");
    memcpy(tma_args + sizeof args / sizeof args[0], descriptor_args, (size_t)count_maps * 7 * sizeof(void *));
    size_t count = sizeof args / sizeof args[0] + (size_t)count_maps * 7;
    if (hopper) tma_args[count++] = &num_tiles32;
    status = aotk__launch_row(driver, plan->rows[0], kernels[0], count, tma_args, grid, stream);
  } else {
    status = aotk__launch_row(driver, plan->rows[0], kernels[0], sizeof args / sizeof args[0], args, grid, stream);
  }
  if (status != AOTK_OK || plan->count < 2) return status;

  const aotk__kernel_entry *m = &aotk__kernel_table[plan->rows[1]];
  CUdeviceptr mask = (CUdeviceptr)(uintptr_t)params->dropout_mask.data;
  int64_t mask_strides[3] = {params->dropout_mask.strides[0], params->dropout_mask.strides[1],
                             params->dropout_mask.strides[2]};
  int32_t mask_blocks = (int32_t)blocks(problem->seqlen_q, m->block_m);
  int32_t mask_flags = f.flags & FLAG_VARLEN;
  void *mask_args[] = {&mask, &f.cu_seqlens_q, &f.cu_seqlens_k, &f.rng_state, &mask_strides[0], &mask_strides[1],
                       &mask_strides[2], &seqlen_q, &seqlen_k, &heads_q, &mask_blocks, &mask_flags,
                       &f.dropout_threshold};
  _Static_assert(sizeof mask_args / sizeof mask_args[0] == sizeof attn_dropout_mask_param_kinds - 1, "one per parameter");
  return aotk__launch_row(driver, plan->rows[1], kernels[1], sizeof mask_args / sizeof mask_args[0], mask_args,
                    mask_blocks * problem->batch * problem->heads_q, stream);
}

aotk_status aotk_attn_fwd(const aotk_attn_params *caller_params, aotk_stream stream) {
  aotk__clear_error();
  aotk_attn_params params;
  aotk__attn_problem problem;
  aotk_status status = aotk__attn_validate(caller_params, &params, &problem);
  if (status != AOTK_OK) return status;
  const aotk__driver *driver;
  attn_plan plan;
  if ((status = plan_device(&plan, &driver, stream)) != AOTK_OK) return status;
  if ((status = plan_fwd(&problem, &plan)) != AOTK_OK) return status;
  return launch_fwd(driver, &params, &problem, &plan, stream);
}

/* --- the backward ------------------------------------------------------------------------------ */

/* The workspace holds two fp32 arrays [batch * heads_q, stats_stride]: delta = rowsum(dO * O), then
 * lse * log2(e). Rows are padded to a multiple of 128 (the largest BLOCK_M), so the passes load them
 * unmasked and aligned (kernels/attn_bwd.py, attn_bwd_preprocess). With dsinks, the sink gradient's
 * partial sums follow: [heads_q, batch, pre-pass blocks]. */
int64_t aotk__attn_bwd_stats_stride(const aotk__attn_problem *problem) { return blocks(problem->seqlen_q, 128) * 128; }

static size_t bwd_stats_bytes(const aotk__attn_problem *problem) {
  return 2 * (size_t)(problem->batch * problem->heads_q * aotk__attn_bwd_stats_stride(problem)) * sizeof(float);
}

static size_t bwd_stats_and_sinks_bytes(const aotk__attn_problem *problem) {
  size_t bytes = bwd_stats_bytes(problem);
  if (problem->dsinks) {
    bytes += (size_t)(problem->heads_q * problem->batch *
                      blocks(aotk__attn_bwd_stats_stride(problem), AOTK__ATTN_BWD_PREPROCESS_BLOCK_M)) *
             sizeof(float);
  }
  return bytes;
}

/* The non-deterministic backward (attn_bwd_fused_hopper) adds dQ into an fp32 accumulator
 * [batch * heads_q, stats_stride, head_dim_qk] after the rest, at a 256-byte boundary (TMA needs 16). */
static size_t bwd_dq_accumulator_offset(const aotk__attn_problem *problem) {
  return (bwd_stats_and_sinks_bytes(problem) + 255) / 256 * 256;
}

static size_t bwd_dq_accumulator_elements(const aotk__attn_problem *problem) {
  return (size_t)(problem->batch * problem->heads_q) * (size_t)aotk__attn_bwd_stats_stride(problem) *
         (size_t)problem->head_dim_qk;
}

static bool bwd_fused(const attn_plan *plan) {
  return plan != NULL && is_bwd_fused(aotk__kernel_table[plan->rows[1]].family);
}

/* What the planned backward needs (plan NULL: what every plan needs): the fused pass's accumulator only
 * where it runs. */
static size_t bwd_workspace_bytes(const aotk__attn_problem *problem, const attn_plan *plan) {
  if (!bwd_fused(plan)) return bwd_stats_and_sinks_bytes(problem);
  return bwd_dq_accumulator_offset(problem) + bwd_dq_accumulator_elements(problem) * sizeof(float);
}

static aotk_status check_workspace(const aotk__attn_problem *problem, const attn_plan *plan, const void *workspace,
                                   size_t workspace_bytes) {
  /* Before planning only the size every plan needs is known: say "at least". */
  return aotk__check_workspace(workspace, workspace_bytes, bwd_workspace_bytes(problem, plan),
                               plan == NULL && !problem->deterministic ? "at least " : "",
                               "aotk_query reports the size for these params");
}

/* The backward: the pre-pass, the dK/dV pass (on sm_90 the Gluon kernel where it covers the call and TMA
 * can read the inputs, else the Triton one), the dQ pass (beside the Gluon dK/dV pass, the Gluon dQ pass
 * where the build has one for the head dims, else the Triton one), and with dsinks the sink reduction.
 * Where the caller allows a non-deterministic backward (deterministic = 0) and the Gluon pass covers the
 * call, its fused form computes dQ too, into an fp32 accumulator that a cast pass then writes into dq
 * (rows[2] is then the cast). */
static aotk_status plan_bwd(const aotk__attn_problem *problem, attn_plan *plan) {
  const aotk__variant_key key = variant_key(problem);
  aotk_status status;
  plan->count = 3;
  const bool covered = hopper_kernels_cover(problem);
  int hopper_row = -1, dq_row = -1;
  /* (The accumulator's descriptor counts its batch * heads_q rows in 32 bits: validation's grid bound,
   * batch * heads_q * ceil(seqlen_q / 64) < 2^31, keeps them there.) */
  /* Dropout without softcap or ALiBi: the Gluon dK/dV passes drawing the keep rule in their consumers (d64
   * and d128; kernels/attn_bwd_hopper.py), fused with dQ or beside the Triton dQ pass's EXTRAS rows, which
   * draw the same mask. */
  const bool dropout_form = problem->dropout_p > 0.0f && problem->softcap == 0.0f && !problem->alibi;
  if ((covered || dropout_form) && !problem->deterministic) {
    const int fused_family = covered ? AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER : AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER_DROPOUT;
    hopper_row = choose_tma_row(fused_family, problem, plan, problem->seqlen_k);
    dq_row = choose_tma_row(AOTK__FAMILY_ATTN_BWD_DQ_CONVERT, problem, plan, problem->seqlen_q);
    if (dq_row < 0) hopper_row = -1;
  }
  if (dropout_form && hopper_row < 0) {
    hopper_row = choose_tma_row(AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER_DROPOUT, problem, plan, problem->seqlen_k);
    dq_row = -1;
  }
  if (covered && hopper_row < 0) {
    hopper_row = choose_tma_row(AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER, problem, plan, problem->seqlen_k);
    dq_row = -1;
    /* Beside the deterministic Gluon dK/dV pass, the Gluon dQ pass where the build has one for these
     * head dims (it takes the Triton pass's place and arguments, and the same one owner per row). */
    if (hopper_row >= 0) dq_row = choose_tma_row(AOTK__FAMILY_ATTN_BWD_DQ_HOPPER, problem, plan, problem->seqlen_q);
  }
  if ((status = aotk__choose_kernel(AOTK__FAMILY_ATTN_BWD_PREPROCESS, &key, problem->seqlen_q, &plan->device,
                                    &plan->rows[0], &plan->kind)) != AOTK_OK ||
      (hopper_row < 0 &&
       (status = aotk__choose_kernel(AOTK__FAMILY_ATTN_BWD_DKDV, &key, problem->seqlen_k, &plan->device,
                                     &plan->rows[1], &plan->kind)) != AOTK_OK) ||
      (dq_row < 0 &&
       (status = aotk__choose_kernel(AOTK__FAMILY_ATTN_BWD_DQ, &key, problem->seqlen_q, &plan->device,
                                     &plan->rows[2], &plan->kind)) != AOTK_OK)) {
    return status;
  }
  if (hopper_row >= 0) plan->rows[1] = hopper_row;
  if (dq_row >= 0) plan->rows[2] = dq_row;
  if (problem->dsinks) {
    if ((status = aotk__choose_kernel(AOTK__FAMILY_ATTN_BWD_SINK_REDUCE, &key, problem->seqlen_q, &plan->device,
                                      &plan->rows[3], &plan->kind)) != AOTK_OK) {
      return status;
    }
    plan->count = 4;
  }
  if (aotk__kernel_table[plan->rows[0]].block_m != AOTK__ATTN_BWD_PREPROCESS_BLOCK_M) {
    return aotk__fail(AOTK_ERROR_INTERNAL, "%s has BLOCK_M %d; the workspace layout assumes %d",
                      aotk__kernel_table[plan->rows[0]].name, aotk__kernel_table[plan->rows[0]].block_m,
                      AOTK__ATTN_BWD_PREPROCESS_BLOCK_M);
  }
  /* The forward's validation bounds the grids over query blocks; the dK/dV grid runs over key
   * blocks of the chosen row and kv heads. */
  int64_t programs = blocks(problem->seqlen_k, aotk__kernel_table[plan->rows[1]].block_n);
  if (__builtin_mul_overflow(programs, problem->batch, &programs) ||
      __builtin_mul_overflow(programs, problem->heads_kv, &programs) || programs > INT32_MAX) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "batch * heads_kv * ceil(seqlen_k / %d) exceeds the grid limit",
                      aotk__kernel_table[plan->rows[1]].block_n);
  }
  return AOTK_OK;
}

static aotk_status launch_bwd(const aotk__driver *driver, const aotk_attn_params *params,
                              const aotk__attn_problem *problem, const attn_plan *plan, void *workspace,
                              aotk_stream stream) {
  const aotk__kernel_entry *pre = &aotk__kernel_table[plan->rows[0]];
  const aotk__kernel_entry *dkdv = &aotk__kernel_table[plan->rows[1]];
  const aotk__kernel_entry *dq_entry = &aotk__kernel_table[plan->rows[2]];
  packed_tensor q = pack_tensor(&problem->q), k = pack_tensor(&problem->k), v = pack_tensor(&problem->v);
  packed_tensor o = pack_tensor(&problem->out), dout = pack_tensor(&problem->dout), dq = pack_tensor(&problem->dq);
  packed_tensor dk = pack_tensor(&problem->dk), dv = pack_tensor(&problem->dv);
  feature_args f = make_feature_args(params, problem);
  int32_t stats_stride = (int32_t)aotk__attn_bwd_stats_stride(problem);
  CUdeviceptr lse_ptr = (CUdeviceptr)(uintptr_t)problem->lse.data, delta_ptr = (CUdeviceptr)(uintptr_t)workspace;
  CUdeviceptr lse_log2_ptr = delta_ptr + bwd_stats_bytes(problem) / 2;
  CUdeviceptr sink_partial = problem->dsinks ? delta_ptr + bwd_stats_bytes(problem) : 0;
  CUdeviceptr sinks = problem->dsinks ? f.sinks : 0;
  int64_t stride_lb = problem->lse.strides[0];
  int32_t stride_lh = (int32_t)problem->lse.strides[1];
  int32_t seqlen_q = (int32_t)problem->seqlen_q, seqlen_k = (int32_t)problem->seqlen_k;
  int32_t heads_q = (int32_t)problem->heads_q, heads_kv = (int32_t)problem->heads_kv;
  int32_t num_seqs = (int32_t)problem->batch, group_size = heads_q / heads_kv;
  const bool fused = is_bwd_fused(dkdv->family);
  const bool hopper = is_bwd_hopper(dkdv->family);
  const bool dq_hopper = dq_entry->family == AOTK__FAMILY_ATTN_BWD_DQ_HOPPER;
  const char *const kinds[] = {attn_bwd_preprocess_param_kinds,
                               fused    ? attn_bwd_fused_hopper_param_kinds
                               : hopper ? attn_bwd_dkdv_hopper_param_kinds
                                        : attn_bwd_dkdv_param_kinds,
                               fused       ? attn_bwd_dq_convert_param_kinds
                               : dq_hopper ? attn_bwd_dq_hopper_param_kinds
                                           : attn_bwd_dq_param_kinds,
                               attn_bwd_sink_reduce_param_kinds};
  CUkernel kernels[4];
  aotk_status status = aotk__load_rows(driver, plan->rows, kinds, plan->count, plan->kind, plan->device.device, kernels);
  if (status != AOTK_OK) return status;
  /* The Gluon pass's tensor maps, encoded before anything is launched: a failure launches nothing. The
   * fused pass's fifth is the dQ accumulator, [batch * heads_q, stats_stride, head_dim] fp32. */
  CUdeviceptr dq_acc = delta_ptr + bwd_dq_accumulator_offset(problem);
  const aotk_tensor acc_view = {(void *)(uintptr_t)dq_acc, AOTK_DTYPE_FLOAT32, 4,
                                {problem->batch * problem->heads_q, stats_stride, 1, problem->head_dim_qk, 0, 0},
                                {stats_stride * problem->head_dim_qk, problem->head_dim_qk, problem->head_dim_qk, 1, 0, 0}};
  aotk__packed_descriptor descriptors[5], dq_descriptors[4];
  const int descriptor_count = fused ? 5 : 4;
  const aotk_tensor *tensors[5] = {&problem->q, &problem->k, &problem->v, &problem->dout, &acc_view};
  static const char *const names[5] = {"q", "k", "v", "dout", "the dq accumulator"};
  if (hopper && (status = aotk__encode_descriptors(driver, dkdv, tensors, names, descriptor_count, descriptors)) != AOTK_OK) {
    return status;
  }
  /* The Gluon dQ pass's own, boxed for its tiles. */
  if (dq_hopper && (status = aotk__encode_descriptors(driver, dq_entry, tensors, names, 4, dq_descriptors)) != AOTK_OK) {
    return status;
  }
  /* The accumulator starts at zero: cleared on the stream, before the pass that adds into it. */
  if (fused) {
    AOTK__CU_TRY(driver,
                 driver->cuMemsetD32Async(dq_acc, 0, bwd_dq_accumulator_elements(problem), (CUstream)stream),
                 "cuMemsetD32Async(the dq accumulator)");
  }

  /* The pre-pass covers the padded rows too: it writes their neutral statistics. Only the sink
   * gradient's flag matters to it (and the varlen layout). */
  int32_t pre_blocks = (int32_t)blocks(stats_stride, pre->block_m);
  int32_t pre_flags = (f.flags & FLAG_VARLEN) | (problem->dsinks ? FLAG_SINKS : 0);
  void *pre_args[] = {TENSOR_ARGS(o), TENSOR_ARGS(dout), &lse_ptr, &delta_ptr, &lse_log2_ptr, &f.cu_seqlens_q, &sinks,
                      &sink_partial, STRIDE_ARGS(o), STRIDE_ARGS(dout), &stride_lb, &stride_lh, &seqlen_q, &heads_q,
                      &num_seqs, &pre_blocks, &stats_stride, &f.head_dim_v8, &pre_flags};
  _Static_assert(sizeof pre_args / sizeof pre_args[0] == sizeof attn_bwd_preprocess_param_kinds - 1, "one per parameter");
  if ((status = aotk__launch_row(driver, plan->rows[0], kernels[0], sizeof pre_args / sizeof pre_args[0], pre_args,
                           pre_blocks * problem->batch * problem->heads_q, stream)) != AOTK_OK) {
    return status;
  }

  int32_t n_blocks = (int32_t)blocks(problem->seqlen_k, dkdv->block_n);
  void *dkdv_args[] = {TENSOR_ARGS(q), TENSOR_ARGS(k), TENSOR_ARGS(v), TENSOR_ARGS(dout), &lse_log2_ptr, &delta_ptr,
                       TENSOR_ARGS(dk), TENSOR_ARGS(dv), &f.cu_seqlens_q, &f.cu_seqlens_k, &f.alibi, &f.rng_state,
                       STRIDE_ARGS(q), STRIDE_ARGS(k), STRIDE_ARGS(v), STRIDE_ARGS(dout), STRIDE_ARGS(dk),
                       STRIDE_ARGS(dv), &f.stride_ab, &seqlen_q, &seqlen_k, &heads_q, &heads_kv, &group_size,
                       &n_blocks, &stats_stride, &f.head_dim_qk8, &f.head_dim_v8, &f.window_left, &f.window_right,
                       &f.flags, &f.softmax_scale, &f.qk_scale_log2, &f.softcap_scale, &f.softcap_log2,
                       &f.dropout_threshold, &f.dropout_scale};
  _Static_assert(sizeof dkdv_args / sizeof dkdv_args[0] == sizeof attn_bwd_dkdv_param_kinds - 1, "one per parameter");
  if (hopper) {
    /* The pointers stay in their places (the kernel ignores them); Q, K, V and dO follow as tensor maps,
     * and for the fused pass the dQ accumulator. */
    void *hopper_args[sizeof dkdv_args / sizeof dkdv_args[0] + 5 * 7];
    memcpy(hopper_args, dkdv_args, sizeof dkdv_args);
    void *descriptor_args[] = {AOTK__DESCRIPTOR_ARGS(descriptors[0]), AOTK__DESCRIPTOR_ARGS(descriptors[1]),
                               AOTK__DESCRIPTOR_ARGS(descriptors[2]), AOTK__DESCRIPTOR_ARGS(descriptors[3]),
                               AOTK__DESCRIPTOR_ARGS(descriptors[4])};
    _Static_assert(sizeof descriptor_args == 5 * 7 * sizeof(void *), "seven arguments per descriptor");
    memcpy(hopper_args + sizeof dkdv_args / sizeof dkdv_args[0], descriptor_args,
           (size_t)descriptor_count * 7 * sizeof(void *));
    status = aotk__launch_row(driver, plan->rows[1], kernels[1],
                              sizeof dkdv_args / sizeof dkdv_args[0] + (size_t)descriptor_count * 7, hopper_args,
                              n_blocks * problem->batch * problem->heads_kv, stream);
  } else {
    status = aotk__launch_row(driver, plan->rows[1], kernels[1], sizeof dkdv_args / sizeof dkdv_args[0], dkdv_args,
                              n_blocks * problem->batch * problem->heads_kv, stream);
  }
  if (status != AOTK_OK) return status;

  /* dq: the cast of the fused pass's accumulator, or the dQ pass. */
  int32_t m_blocks = (int32_t)blocks(problem->seqlen_q, dq_entry->block_m);
  if (fused) {
    int32_t convert_flags = f.flags & FLAG_VARLEN;
    void *convert_args[] = {&dq_acc, TENSOR_ARGS(dq), &f.cu_seqlens_q, STRIDE_ARGS(dq), &seqlen_q, &heads_q, &m_blocks,
                            &stats_stride, &convert_flags};
    _Static_assert(sizeof convert_args / sizeof convert_args[0] == sizeof attn_bwd_dq_convert_param_kinds - 1,
                   "one per parameter");
    status = aotk__launch_row(driver, plan->rows[2], kernels[2], sizeof convert_args / sizeof convert_args[0],
                              convert_args, m_blocks * problem->batch * problem->heads_q, stream);
  } else {
    void *dq_args[] = {TENSOR_ARGS(q), TENSOR_ARGS(k), TENSOR_ARGS(v), TENSOR_ARGS(dout), &lse_log2_ptr, &delta_ptr,
                       TENSOR_ARGS(dq), &f.cu_seqlens_q, &f.cu_seqlens_k, &f.alibi, &f.rng_state, STRIDE_ARGS(q),
                       STRIDE_ARGS(k), STRIDE_ARGS(v), STRIDE_ARGS(dout), STRIDE_ARGS(dq), &f.stride_ab, &seqlen_q,
                       &seqlen_k, &heads_q, &group_size, &m_blocks, &stats_stride, &f.head_dim_qk8, &f.head_dim_v8,
                       &f.window_left, &f.window_right, &f.flags, &f.softmax_scale, &f.qk_scale_log2,
                       &f.softcap_scale, &f.softcap_log2, &f.dropout_threshold, &f.dropout_scale};
    _Static_assert(sizeof dq_args / sizeof dq_args[0] == sizeof attn_bwd_dq_param_kinds - 1, "one per parameter");
    if (dq_hopper) {
      /* The Gluon pass: the same arguments (the pointers it does not read stay in their places), then the
       * tensor maps of Q, K, V and dO. */
      void *dq_hopper_args[sizeof dq_args / sizeof dq_args[0] + 4 * 7];
      void *dq_descriptor_args[] = {AOTK__DESCRIPTOR_ARGS(dq_descriptors[0]), AOTK__DESCRIPTOR_ARGS(dq_descriptors[1]),
                                    AOTK__DESCRIPTOR_ARGS(dq_descriptors[2]), AOTK__DESCRIPTOR_ARGS(dq_descriptors[3])};
      _Static_assert(sizeof attn_bwd_dq_hopper_param_kinds == sizeof attn_bwd_dq_param_kinds + 4,
                     "four descriptors of seven arguments each");
      memcpy(dq_hopper_args, dq_args, sizeof dq_args);
      memcpy(dq_hopper_args + sizeof dq_args / sizeof dq_args[0], dq_descriptor_args, sizeof dq_descriptor_args);
      status = aotk__launch_row(driver, plan->rows[2], kernels[2], sizeof dq_hopper_args / sizeof dq_hopper_args[0],
                                dq_hopper_args, m_blocks * problem->batch * problem->heads_q, stream);
    } else {
      status = aotk__launch_row(driver, plan->rows[2], kernels[2], sizeof dq_args / sizeof dq_args[0], dq_args,
                                m_blocks * problem->batch * problem->heads_q, stream);
    }
  }
  if (status != AOTK_OK || plan->count < 4) return status;

  CUdeviceptr dsinks = (CUdeviceptr)(uintptr_t)params->dsinks.data;
  int32_t count = num_seqs * pre_blocks;
  void *reduce_args[] = {&sink_partial, &dsinks, &count};
  _Static_assert(sizeof reduce_args / sizeof reduce_args[0] == sizeof attn_bwd_sink_reduce_param_kinds - 1, "one per parameter");
  return aotk__launch_row(driver, plan->rows[3], kernels[3], 3, reduce_args, problem->heads_q, stream);
}

aotk_status aotk_attn_bwd(const aotk_attn_params *caller_params, void *workspace, size_t workspace_bytes,
                          aotk_stream stream) {
  aotk__clear_error();
  aotk_attn_params params;
  aotk__attn_problem problem;
  aotk_status status = aotk__attn_bwd_validate(caller_params, &params, &problem);
  if (status != AOTK_OK) return status;
  /* Every plan needs the statistics (and sink partials): checked before the driver is touched; the
   * non-deterministic plan's accumulator once the device is known. */
  if ((status = check_workspace(&problem, NULL, workspace, workspace_bytes)) != AOTK_OK) return status;
  const aotk__driver *driver;
  attn_plan plan;
  if ((status = plan_device(&plan, &driver, stream)) != AOTK_OK) return status;
  if ((status = plan_bwd(&problem, &plan)) != AOTK_OK) return status;
  if ((status = check_workspace(&problem, &plan, workspace, workspace_bytes)) != AOTK_OK) return status;
  return launch_bwd(driver, &params, &problem, &plan, workspace, stream);
}

aotk_status aotk_query(aotk_op op, const aotk_attn_params *caller_params, aotk_kernel_info *info) {
  aotk__clear_error();
  aotk_status status = aotk__check_query_info(info);
  if (status != AOTK_OK) return status;
  if ((status = aotk__check_query_op(op, "aotk_query")) != AOTK_OK) return status;
  aotk_attn_params params;
  aotk__attn_problem problem;
  status = op == AOTK_OP_ATTN_FWD ? aotk__attn_validate(caller_params, &params, &problem)
                                 : aotk__attn_bwd_validate(caller_params, &params, &problem);
  if (status != AOTK_OK) return status;
  const aotk__driver *driver;
  attn_plan plan;
  if ((status = plan_device(&plan, &driver, NULL)) != AOTK_OK) return status;
  if (op == AOTK_OP_ATTN_FWD) {
    if ((status = plan_fwd(&problem, &plan)) != AOTK_OK) return status;
    const aotk__kernel_entry *e = &aotk__kernel_table[plan.rows[0]];
    aotk__fill_info(e, plan.kind, fwd_grid(&problem, e, &plan), 0, plan.count, problem_features(&problem, e), info);
  } else {
    if ((status = plan_bwd(&problem, &plan)) != AOTK_OK) return status;
    const aotk__kernel_entry *e = &aotk__kernel_table[plan.rows[1]];
    aotk__fill_info(e, plan.kind, blocks(problem.seqlen_k, e->block_n) * problem.batch * problem.heads_kv,
                    bwd_workspace_bytes(&problem, &plan), plan.count, problem_features(&problem, e), info);
  }
  return AOTK_OK;
}
