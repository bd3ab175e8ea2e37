/*
 * aotk: attention kernels written in Triton, compiled ahead of time into a C library.
 *
 * This header is the whole public API. It is C11, needs no CUDA header, and is stable: functions are
 * only added, status values are never renumbered, and parameter structs only grow at the end (each
 * starts with its own size, set by its AOTK_..._INIT macro).
 *
 * Conventions used throughout:
 * - Tensors are device pointers with a dtype, a shape and strides counted in elements. The last
 *   dimension must be contiguous (stride 1); every other stride is free (non-negative).
 * - Attention layout is flash-attn's: q [batch, seqlen_q, heads_q, head_dim], k and v
 *   [batch, seqlen_k, heads_kv, head_dim], out like q, lse [batch, heads_q, seqlen_q] fp32, natural log.
 * - Every function that can fail returns an aotk_status. On failure nothing was launched and no
 *   output was touched; aotk_last_error() holds a message naming the offending argument, kept per
 *   thread. The library never aborts, exits or prints.
 * - Launches are asynchronous on the given stream, allocate nothing and never synchronize, so they can
 *   be captured in a CUDA graph. A kernel's image is loaded on its first use in the process; call
 *   aotk_preload() before capturing a graph if that first use would otherwise happen during capture.
 * - Calls use the CUDA context current on the calling thread (the primary context when the caller
 *   uses the CUDA runtime API or PyTorch) and plan for its device. A call that takes a `stream` needs
 *   it to belong to that context, or to be a default stream (NULL, CU_STREAM_LEGACY,
 *   CU_STREAM_PER_THREAD): a stream of another context is refused with AOTK_ERROR_NO_CONTEXT and
 *   nothing is touched, because the driver would run the kernels in the stream's context, on another
 *   device than the one they were chosen and sized for. All functions are thread-safe.
 */
#ifndef AOTK_H
#define AOTK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define AOTK_API
#elif defined(AOTK_BUILDING_LIBRARY)
#define AOTK_API __attribute__((visibility("default")))
#else
#define AOTK_API
#endif

#define AOTK_VERSION_MAJOR 0
#define AOTK_VERSION_MINOR 4
#define AOTK_VERSION_PATCH 0
#define AOTK_VERSION_NUMBER (AOTK_VERSION_MAJOR * 10000 + AOTK_VERSION_MINOR * 100 + AOTK_VERSION_PATCH)

/* The CUDA stream type: what CUstream and cudaStream_t are. NULL is the legacy default stream. */
typedef struct CUstream_st *aotk_stream;

/*
 * Status codes. X(name, value, what to do). The list is the single source of the enum,
 * aotk_status_name() and aotk_status_string().
 */
#define AOTK_STATUS_LIST(X)                                                                          \
  X(AOTK_OK, 0, "success")                                                                           \
  X(AOTK_ERROR_NULL_POINTER, 1, "a required pointer (params, a tensor's data, an out-parameter) is NULL") \
  X(AOTK_ERROR_STRUCT_SIZE, 2, "struct_size is not set: initialize the struct with its AOTK_..._INIT macro") \
  X(AOTK_ERROR_UNSUPPORTED_DTYPE, 3, "a tensor has a dtype this operation does not accept (see the header)") \
  X(AOTK_ERROR_DTYPE_MISMATCH, 4, "tensors that must share a dtype do not")                          \
  X(AOTK_ERROR_RANK, 5, "a tensor has the wrong number of dimensions")                               \
  X(AOTK_ERROR_SHAPE_MISMATCH, 6, "tensor shapes disagree (batch, sequence length or head count)")   \
  X(AOTK_ERROR_HEAD_DIM_MISMATCH, 7, "q, k, v and out do not share one head_dim")                    \
  X(AOTK_ERROR_UNSUPPORTED_HEAD_DIM, 8, "head_dim is not one this build supports (aotk info lists them)") \
  X(AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, 9, "a tensor's last dimension is not contiguous (stride must be 1)") \
  X(AOTK_ERROR_NEGATIVE_STRIDE, 10, "a stride is negative")                                          \
  X(AOTK_ERROR_MISALIGNED_POINTER, 11, "a data pointer is not aligned to its element size")          \
  X(AOTK_ERROR_HEADS_NOT_DIVISIBLE, 12, "heads_q is not a multiple of heads_kv")                     \
  X(AOTK_ERROR_NONPOSITIVE_SIZE, 13, "a size (batch, sequence length, heads, head_dim) is zero or negative") \
  X(AOTK_ERROR_SIZE_OVERFLOW, 14, "a tensor spans more elements than the kernels can index")         \
  X(AOTK_ERROR_INVALID_VALUE, 15, "a scalar argument is out of range (see the message)")             \
  X(AOTK_ERROR_NO_DRIVER, 16, "libcuda.so.1 could not be loaded: install the NVIDIA driver")         \
  X(AOTK_ERROR_NO_DEVICE, 17, "the driver reports no CUDA device")                                   \
  X(AOTK_ERROR_NO_CONTEXT, 18, "no CUDA context is current on this thread, or `stream` belongs to another one: make the stream's device current (cudaSetDevice and any runtime call create its context)") \
  X(AOTK_ERROR_UNSUPPORTED_ARCH, 19, "the GPU is older than sm_80 or lacks the shared memory a kernel needs") \
  X(AOTK_ERROR_IMAGE_CORRUPT, 20, "an embedded kernel image failed its integrity check: the library file is damaged") \
  X(AOTK_ERROR_KERNEL_NOT_BUILT, 21, "no kernel for this configuration was compiled into this build (a filtered build?)") \
  X(AOTK_ERROR_CUDA, 22, "a CUDA driver call failed: aotk_last_cuda_result() gives the CUresult")   \
  X(AOTK_ERROR_OUT_OF_MEMORY, 23, "host memory ran out while loading a kernel image")               \
  X(AOTK_ERROR_WORKSPACE_TOO_SMALL, 24, "the workspace is smaller than the size the query reported") \
  X(AOTK_ERROR_INTERNAL, 25, "an internal invariant failed: please report it with aotk_last_error()") \
  X(AOTK_ERROR_INVALID_INDICES, 26, "block_idx or block_cnt breaks the selection contract (duplicate or out-of-range block, bad count): see the message")

typedef enum aotk_status {
#define AOTK__STATUS_ENUM(name, value, text) name = value,
  AOTK_STATUS_LIST(AOTK__STATUS_ENUM)
#undef AOTK__STATUS_ENUM
} aotk_status;

/* The enumerator's name ("AOTK_ERROR_RANK"), or "AOTK_STATUS_UNKNOWN". Never NULL. */
AOTK_API const char *aotk_status_name(aotk_status status);
/* A sentence saying what the status means and what to do. Never NULL. */
AOTK_API const char *aotk_status_string(aotk_status status);
/* The detail of the last failure on this thread ("q.shape[3] = 80 but k.shape[3] = 64"), or "" if the
 * last call succeeded. Valid until the thread's next aotk call. Never NULL. */
AOTK_API const char *aotk_last_error(void);
/* The raw CUresult of the last failing driver call on this thread (0 if none). */
AOTK_API int aotk_last_cuda_result(void);

/* AOTK_VERSION_NUMBER of the library actually loaded. */
AOTK_API unsigned aotk_version_number(void);
/* "0.2.0". */
AOTK_API const char *aotk_version_string(void);

typedef enum aotk_dtype {
  AOTK_DTYPE_FLOAT16 = 1,
  AOTK_DTYPE_BFLOAT16 = 2,
  AOTK_DTYPE_FLOAT32 = 3,
  AOTK_DTYPE_INT32 = 4, /* cu_seqlens */
  AOTK_DTYPE_INT64 = 5, /* the dropout RNG state */
  AOTK_DTYPE_UINT8 = 6, /* the dropout mask (debug output) */
} aotk_dtype;

#define AOTK_TENSOR_MAX_RANK 6

/* A strided device tensor. Strides are in elements. A tensor with data == NULL is "absent" where the
 * operation allows an optional tensor. */
typedef struct aotk_tensor {
  void *data;
  aotk_dtype dtype;
  int32_t rank;
  int64_t shape[AOTK_TENSOR_MAX_RANK];
  int64_t strides[AOTK_TENSOR_MAX_RANK];
} aotk_tensor;

/* A contiguous (row-major) 4-d tensor, the usual way to describe q, k, v and out. */
static inline aotk_tensor aotk_tensor_4d(void *data, aotk_dtype dtype, int64_t d0, int64_t d1, int64_t d2,
                                         int64_t d3) {
  aotk_tensor t = {data, dtype, 4, {d0, d1, d2, d3, 0, 0}, {d1 * d2 * d3, d2 * d3, d3, 1, 0, 0}};
  return t;
}
/* A contiguous 1-d tensor: cu_seqlens, ALiBi slopes, sinks, the RNG state. */
static inline aotk_tensor aotk_tensor_1d(void *data, aotk_dtype dtype, int64_t d0) {
  aotk_tensor t = {data, dtype, 1, {d0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0}};
  return t;
}
/* A contiguous 2-d tensor: lse [heads_q, total_q] of the variable-length layout, per-batch ALiBi slopes. */
static inline aotk_tensor aotk_tensor_2d(void *data, aotk_dtype dtype, int64_t d0, int64_t d1) {
  aotk_tensor t = {data, dtype, 2, {d0, d1, 0, 0, 0, 0}, {d1, 1, 0, 0, 0, 0}};
  return t;
}
/* A contiguous 3-d tensor: q, k, v, out [total, heads, head_dim] of the variable-length layout, and
 * lse [batch, heads_q, seqlen_q]. */
static inline aotk_tensor aotk_tensor_3d(void *data, aotk_dtype dtype, int64_t d0, int64_t d1, int64_t d2) {
  aotk_tensor t = {data, dtype, 3, {d0, d1, d2, 0, 0, 0}, {d1 * d2, d2, 1, 0, 0, 0}};
  return t;
}

/*
 * Arguments of an attention call. Initialize with AOTK_ATTN_PARAMS_INIT, then set what you use.
 *
 * Dense layout (cu_seqlens_q.data == NULL):
 *   q      in   [batch, seqlen_q, heads_q, head_dim_qk], fp16 or bf16.
 *   k      in   [batch, seqlen_k, heads_kv, head_dim_qk], q's dtype.
 *   v      in   [batch, seqlen_k, heads_kv, head_dim_v], q's dtype. heads_q must be a multiple of
 *               heads_kv (GQA; heads_kv = 1 is MQA): query head h reads kv head h / (heads_q / heads_kv).
 *   out    out  [batch, seqlen_q, heads_q, head_dim_v], q's dtype. Must not overlap the inputs.
 *   lse    out  optional (data NULL: not written). [batch, heads_q, seqlen_q] fp32, natural log of the
 *               softmax denominator of each row, as the scores enter the softmax (scale, softcap, ALiBi
 *               and the sink included): lse = log(sum_j exp(s_ij) [+ exp(sink_h)]). A row that sees no
 *               key (and has no sink) gets out = 0 and lse = -inf.
 * Variable-length layout, flash-attn's varlen API (cu_seqlens_q.data != NULL): sequence b holds query
 * rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1 and key rows cu_seqlens_k[b] .. cu_seqlens_k[b+1]-1.
 *   q, out [total_q, heads_q, head_dim], k, v [total_k, heads_kv, head_dim], lse [heads_q, total_q].
 *   cu_seqlens_q, cu_seqlens_k   int32 [num_seqs + 1] device memory, non-decreasing from 0 (their values
 *               are not read by the host: a sequence longer than max_seqlen is only partly computed, and
 *               offsets past total_q / total_k are the caller's error).
 *   max_seqlen_q, max_seqlen_k   >= every sequence's length (>= 1). Sequences of length 0 are allowed.
 *
 * Scores and masks, for query row i and key j of one sequence:
 *   s_ij = softmax_scale * q_i . k_j; then softcap: s = softcap * tanh(s / softcap); then ALiBi:
 *   s -= slope_h * |i + diag - j|; then the mask. diag = seqlen_k - seqlen_q (the sequence's own lengths)
 *   when causal_align is AOTK_ALIGN_BOTTOM_RIGHT, 0 when AOTK_ALIGN_TOP_LEFT.
 *   softmax_scale   0 means the default 1/sqrt(head_dim_qk); otherwise a finite positive value.
 *   causal          0 or 1: row i sees key j only when j <= i + diag (window_right = 0).
 *   causal_align    AOTK_ALIGN_BOTTOM_RIGHT (0, flash-attn >= 2.1's causal) or AOTK_ALIGN_TOP_LEFT
 *                   (1, PyTorch SDPA's is_causal): where the diagonal of causal masks and windows lies.
 *   window_left, window_right   sliding window: row i sees j when i + diag - window_left <= j <=
 *                   i + diag + window_right; -1 (AOTK_ATTN_PARAMS_INIT's value) for unbounded. With causal,
 *                   window_right must be -1 or 0. Key blocks outside the window are skipped, so the work
 *                   grows with the window, not with the sequence.
 *   softcap         0: off; > 0: Gemma-2's logit soft-capping, applied after the scale.
 *   alibi_slopes    optional fp32 [heads_q] or [batch, heads_q] (per sequence in the varlen layout).
 *   sinks           optional fp32 [heads_q]: one logit per query head (gpt-oss's attention sinks) that
 *                   joins each row's softmax denominator and takes no value: out_i = sum_j P_ij v_j with
 *                   P_ij = exp(s_ij) / (exp(sink_h) + sum_j exp(s_ij)).
 *   dropout_p       probability of dropping an attention weight, in [0, 1), rounded to t / 256 with
 *                   t = round(256 dropout_p), at most 255 (0.1 drops 26 / 256): kept weights are scaled by
 *                   256 / (256 - t). lse is the softmax's before dropout (as flash-attn's).
 *   rng_state       required when dropout_p > 0: int64 [2] in device memory, {seed, offset}, read by the
 *                   kernels when they run (so a captured CUDA graph replays with whatever it then holds).
 *                   With i = 16 I + 8 a + 2 p + e and j = 16 J + 8 b' + 2 q + c (a, b', c, e bits; p, q
 *                   in 0..3), element (b, h, i, j) is kept when byte 2 a + b' of word 2 e + c of Philox4x32-7
 *                   keyed by the seed, at counter (4 J + q, 4 I + p, b * heads_q + h, offset's low 32 bits),
 *                   is >= t; the key is the seed with the offset's high 32 bits XORed into its high 32
 *                   bits. (One call serves 16 elements, 8 of one thread in both layouts of the sm_90
 *                   kernels' matrix products.) Give each call its own offset.
 *   dropout_mask    optional debug output, uint8 [batch, heads_q, seqlen_q, seqlen_k] (varlen: [num_seqs,
 *                   heads_q, max_seqlen_q, max_seqlen_k]): 1 where the element was kept, 0 where dropped,
 *                   for every (i, j) of each sequence (masked-out pairs included); other elements untouched.
 *                   Costs an extra kernel; for tests.
 *
 * For the backward (aotk_attn_bwd), also (everything above must be as in the forward):
 *   out    in   the forward's output.
 *   lse    in   required: the forward's lse.
 *   dout   in   like out: the gradient of out.
 *   dq     out  like q.
 *   dk, dv out  like k and v. With GQA, each is summed over the heads_q / heads_kv query heads that
 *               share a kv head (no atomics: one program owns each block of dk and dv).
 *   dsinks out  optional fp32 [heads_q] (needs sinks): the gradient of the sink logits, summed over the
 *               batch and rows in a fixed order.
 *   deterministic   0 or 1. 1: the backward is bitwise deterministic (each output element computed by
 *                   exactly one program in a fixed order: a dK/dV pass and a dQ pass, 7 matrix products
 *                   per block). 0 (the default of a zeroed struct, as in flash-attn): aotk may run a
 *                   faster backward whose dQ is summed in a varying order, so repeated runs can differ
 *                   in the last bits of dq (dk, dv and dsinks stay deterministic). Today that is the
 *                   sm_90 backward at head dims 64 and 128 with TMA-readable inputs, without dropout
 *                   or with dropout alone (no softcap or ALiBi beside it)
 *                   (AOTK_FEATURE_NONDETERMINISTIC says when; it needs a larger workspace); every other
 *                   call runs the deterministic kernels either way (at head dim 256 they measured faster).
 *
 * Sizes: batch (num_seqs), seqlen_q, seqlen_k, heads >= 1; head_dim_qk and head_dim_v multiples of 8
 * from 8 to 256; the compiled pairs (aotk info lists them) are padded sizes that smaller dims run in.
 * A tensor may span more than 2^31 elements (and the whole under 2^63 bytes), but each token stride
 * must be at most (2^31 - 1) / 256 elements and each head stride (lse's too) under 2^31; seqlen_q and
 * seqlen_k (varlen: the max_seqlens) at most 2^30 - 512, the varlen totals at most 2^31 - 257.
 * AOTK_ERROR_SIZE_OVERFLOW otherwise.
 */
typedef struct aotk_attn_params {
  size_t struct_size;
  aotk_tensor q;
  aotk_tensor k;
  aotk_tensor v;
  aotk_tensor out;
  aotk_tensor lse;
  float softmax_scale;
  int32_t causal;
  /* The backward's; ignored by the forward. */
  aotk_tensor dout;
  aotk_tensor dq;
  aotk_tensor dk;
  aotk_tensor dv;
  int32_t deterministic;
  /* Added in 0.2. */
  aotk_tensor cu_seqlens_q;
  aotk_tensor cu_seqlens_k;
  int32_t max_seqlen_q;
  int32_t max_seqlen_k;
  int32_t window_left;
  int32_t window_right;
  int32_t causal_align;
  float softcap;
  aotk_tensor alibi_slopes;
  aotk_tensor sinks;
  aotk_tensor dsinks;
  float dropout_p;
  aotk_tensor rng_state;
  aotk_tensor dropout_mask;
} aotk_attn_params;

typedef enum aotk_align {
  AOTK_ALIGN_BOTTOM_RIGHT = 0,
  AOTK_ALIGN_TOP_LEFT = 1,
} aotk_align;

#define AOTK_ATTN_PARAMS_INIT {.struct_size = sizeof(aotk_attn_params), .window_left = -1, .window_right = -1}

/*
 * The attention forward: out = softmax(scale * q k^T + mask) v, and lse if given.
 * Launches one kernel on `stream` (two with dropout_mask: the mask is written by a second one); returns
 * as soon as they are enqueued.
 * Statuses: AOTK_OK; the input errors above (nothing launched); AOTK_ERROR_NO_DRIVER,
 * AOTK_ERROR_NO_DEVICE, AOTK_ERROR_NO_CONTEXT (no context current, or `stream` belongs to another
 * context than the current one: nothing loaded or launched), AOTK_ERROR_UNSUPPORTED_ARCH,
 * AOTK_ERROR_IMAGE_CORRUPT, AOTK_ERROR_KERNEL_NOT_BUILT, AOTK_ERROR_CUDA, AOTK_ERROR_OUT_OF_MEMORY.
 */
AOTK_API aotk_status aotk_attn_fwd(const aotk_attn_params *params, aotk_stream stream);

/*
 * The attention backward: dq, dk, dv from q, k, v, out, lse (the forward's) and dout. Three kernels
 * on `stream`: delta = rowsum(dout * out) into the workspace, then dk/dv, then dq (with
 * deterministic = 0 on sm_90 where AOTK_FEATURE_NONDETERMINISTIC says so: a memset of the dq
 * accumulator, then delta, then one pass for dk, dv and dq, then the cast of dq); returns once they are
 * enqueued. `workspace` is device memory of at least the workspace_bytes that aotk_query(AOTK_OP_ATTN_BWD)
 * reports for the same params, deterministic included (8 * batch * heads_q * round_up(seqlen_q, 128)
 * bytes, plus 4 * heads_q * batch * round_up(seqlen_q, 128) / 64 with dsinks; seqlen_q is max_seqlen_q
 * for varlen; the non-deterministic pass adds its accumulator after that size rounded up to 256:
 * 4 * batch * heads_q * round_up(seqlen_q, 128) * head_dim_qk bytes), 16-byte aligned, not read before
 * it is written, and not to be used by anything else until the call's work on `stream` is done.
 * Statuses: as aotk_attn_fwd, plus AOTK_ERROR_WORKSPACE_TOO_SMALL. All the kernels are loaded and the
 * tensor maps encoded before the first is launched; only a driver failure of the memset or of a later
 * launch itself (AOTK_ERROR_CUDA) can leave earlier work enqueued, and then dq, dk, dv are undefined.
 */
AOTK_API aotk_status aotk_attn_bwd(const aotk_attn_params *params, void *workspace, size_t workspace_bytes,
                                   aotk_stream stream);

typedef enum aotk_op {
  AOTK_OP_ATTN_FWD = 1,
  AOTK_OP_ATTN_BWD = 2,
  AOTK_OP_SEL_FWD = 3, /* aotk_sel_query only */
  AOTK_OP_SEL_BWD = 4,
  AOTK_OP_DECODE = 5, /* aotk_decode_query only */
  AOTK_OP_MERGE = 6,  /* aotk_merge_query only */
} aotk_op;

/* What a call would run. Filled by aotk_query(). */
typedef struct aotk_kernel_info {
  size_t struct_size;
  char kernel_name[96]; /* the catalog name, e.g. "attn_fwd_bf16_d128_aligned_m128n64w8s3"; for the backward,
                           its main kernel (the dK/dV pass); the other fields describe that kernel */
  int32_t arch;         /* the image's target: 80 or 90 */
  int32_t from_ptx;     /* 1 when the driver JIT-compiles the image's PTX (a GPU newer than the cubins) */
  int32_t num_warps;
  int32_t shared_bytes; /* dynamic shared memory per program */
  int32_t block_m;      /* query rows per program */
  int32_t block_n;      /* key rows per inner step */
  int32_t aligned;      /* 1: the variant that assumes 16-byte-aligned pointers and strides that are
                           multiples of 16 elements. Selection attention (which always assumes those):
                           the variant for a group size that is a multiple of 16 */
  int64_t grid;         /* programs launched */
  size_t workspace_bytes; /* caller-provided workspace the call needs (0 for the forward) */
  int32_t launches;     /* kernels the call launches (1 for the forward, 3 for the backward; one more for
                           a dropout mask or dsinks; selection: 1, and 7 or 8 for the backward) */
  /* Added in 0.2. */
  int32_t head_dim_qk;  /* the compiled (padded) head dims the call runs in */
  int32_t head_dim_v;
  uint32_t features;    /* AOTK_FEATURE_* bits the call applies */
  /* Added in 0.4. */
  int32_t num_splits;   /* decoding: the key ranges each request is cut into (1: no split, no merge) */
} aotk_kernel_info;

#define AOTK_FEATURE_VARLEN (1u << 0)
#define AOTK_FEATURE_CAUSAL (1u << 1)
#define AOTK_FEATURE_WINDOW (1u << 2)
#define AOTK_FEATURE_SOFTCAP (1u << 3)
#define AOTK_FEATURE_ALIBI (1u << 4)
#define AOTK_FEATURE_SINKS (1u << 5)
#define AOTK_FEATURE_DROPOUT (1u << 6)
#define AOTK_FEATURE_PADDED_HEAD_DIM (1u << 7) /* head_dim_qk or head_dim_v smaller than the compiled size */
#define AOTK_FEATURE_EXTRAS_KERNEL (1u << 8)   /* runs the kernel variant with softcap/ALiBi/dropout code */
/* Added in 0.4. The call runs an sm_90 forward that loads Q, K and V through the Tensor Memory
 * Accelerator (host-side tensor maps encoded per call: no allocation, nothing else changes for the
 * caller). That needs sm_90 (cubin images), a dense layout (varlen too for the warp-specialized
 * forward, AOTK_FEATURE_WARP_SPECIALIZED below), 16-byte-aligned inputs, each
 * token's heads contiguous (head stride == head_dim; packed qkv qualifies) and head dims with such a
 * kernel: 64, 128, 256 and (192, 128) for every forward but dropout (AOTK_FEATURE_WARP_SPECIALIZED
 * below), 64 and 128 with dropout alone (the same, drawing dropout in its consumers), 128 and 256 with
 * dropout and softcap or ALiBi. Other calls take the pointer-load kernels, with the same results to
 * within rounding. For AOTK_OP_ATTN_BWD the bit describes the dK/dV pass, the kernel aotk_query names:
 * it loads Q, K, V and dO so under the same conditions (dO's layout too; dense or varlen), at head dims
 * 64 and 128, for every backward but dropout (0.4 before 2026-11-26: without softcap or ALiBi and with no
 * window but causal), and with dropout alone (no softcap or ALiBi beside it; since 2026-11-28). */
#define AOTK_FEATURE_TMA (1u << 9)
/* Added in 0.4. The sm_90 forward with FlashAttention-3's schedule (a TMA producer warp, two consumer
 * warpgroups taking turns, three at d=64 for the plain forward without a mask from 2048 query rows on;
 * softmax overlapped with the matrix products; written in Gluon), which also
 * sets AOTK_FEATURE_TMA. It runs every forward but dropout (masks and windows of both alignments,
 * sinks, softcap and ALiBi, the last two with AOTK_FEATURE_EXTRAS_KERNEL) at head dims 64, 128, 256
 * and (192, 128), and dropout without softcap or ALiBi at 64 and 128 (a form of its own, without
 * AOTK_FEATURE_EXTRAS_KERNEL), where TMA's conditions above hold.
 * It is persistent: at most one program per SM, each walking several query tiles, so aotk_kernel_info's grid
 * can be smaller than the number of tiles. For AOTK_OP_ATTN_BWD: the dK/dV pass has FlashAttention-3's
 * backward schedule (a TMA producer warp, two consumer warpgroups), one owner per output and bitwise
 * deterministic, unless AOTK_FEATURE_NONDETERMINISTIC is set too (dQ fused into it), at head dims 64, 128,
 * 256 and (192, 128) (every backward but dropout), and at 64 and 128 with dropout alone (a form drawing
 * dropout in its consumers, without AOTK_FEATURE_EXTRAS_KERNEL; its deterministic dQ pass is the pointer
 * kernel's EXTRAS variant); at 256 and (192, 128) the dQ pass is warp-specialized
 * too. For AOTK_OP_DECODE both bits mark a packed prefill over a paged cache that runs this forward with
 * K and V read through the block table (aotk_decode_params' cu_seqlens_q says when). */
#define AOTK_FEATURE_WARP_SPECIALIZED (1u << 10)
/* Added in 0.4, AOTK_OP_ATTN_BWD only. The backward is not bitwise deterministic: one warp-specialized
 * pass computes dK, dV and dQ (5 matrix products per block instead of 7), adding each block's dQ into
 * an fp32 accumulator in the workspace with TMA reduce-adds whose order varies from run to run (dK and
 * dV still have one owner each). Taken on sm_90 when params.deterministic is 0 and the dK/dV pass would
 * be the warp-specialized one at head dim 64 or 128; the workspace then also holds the accumulator, at a 256-byte boundary
 * after the rest (batch * heads_q * round_up(seqlen_q, 128) * head_dim_qk floats). */
#define AOTK_FEATURE_NONDETERMINISTIC (1u << 11)
/* Added in 0.4, decoding (aotk_decode_query): the cache is paged (block_table), and the keys are split
 * (num_splits > 1: a merge follows the decoding kernel). */
#define AOTK_FEATURE_PAGED_KV (1u << 12)
#define AOTK_FEATURE_SPLIT_KV (1u << 13)
#define AOTK_FEATURE_APPEND_KV (1u << 14) /* k_new and v_new are written into the cache first */
#define AOTK_FEATURE_LEFTPAD_KV (1u << 15) /* cache_leftpad (keys before it not attended) */

#define AOTK_KERNEL_INFO_INIT {.struct_size = sizeof(aotk_kernel_info)}

/*
 * Says, without launching, whether `op` with these params is supported on the current context's
 * device, which kernel it would run and how much workspace it needs. Returns exactly the status the
 * call itself would return before launching (AOTK_OK when it would launch; the backward's workspace
 * is not checked, since the query is how its size is learned, nor the call's stream, which the query
 * does not take), and fills *info on AOTK_OK. Loads nothing.
 */
AOTK_API aotk_status aotk_query(aotk_op op, const aotk_attn_params *params, aotk_kernel_info *info);

/*
 * Selection attention: the selected-blocks branch of Native Sparse Attention. Each query token attends
 * only to the key blocks listed for it (chosen upstream, e.g. the top-n blocks by compressed-attention
 * score, shared by the query heads of a GQA group); choosing them is not this call's job.
 *
 * Layout: packed variable length, like flash-attn's varlen API. Sequence n holds query rows
 * cu_seqlens_q[n] .. cu_seqlens_q[n+1]-1 and key rows cu_seqlens_k[n] .. cu_seqlens_k[n+1]-1; a dense
 * batch is the case of equal lengths. Without cu_seqlens (both data NULL) q and k form one sequence.
 *   q          in   [total_q, heads_q, head_dim_qk], fp16 or bf16.
 *   k          in   [total_k, heads_kv, head_dim_qk], q's dtype.
 *   v          in   [total_k, heads_kv, head_dim_v], q's dtype. heads_q is a multiple of heads_kv; the
 *                   G = heads_q / heads_kv query heads h*G .. h*G+G-1 share kv head h and its selection.
 *   out        out  [total_q, heads_q, head_dim_v], q's dtype.
 *   lse        out  optional in the forward (data NULL: not written), required in the backward:
 *                   fp32 [total_q, heads_q], natural log, so that this branch and others (dense, window,
 *                   compressed) can be merged by LSE.
 *   (head_dim_qk, head_dim_v) is (64, 64), (128, 128) or (192, 128).
 *   cu_seqlens_q, cu_seqlens_k   int32 [num_seqs + 1] in device memory, non-decreasing from 0 (not read
 *                   by the host); rows past the last offset are not touched.
 *   max_seqlen_k    with cu_seqlens: >= every sequence's key length (>= 1). It sizes the grids; a longer
 *                   sequence is treated as if its len_k were max_seqlen_k (in p below too). Ignored
 *                   without cu_seqlens.
 *   block_idx  in   int32 [total_q, heads_kv, slots]: sequence-local key block ids (block b holds keys
 *                   b*block_size .. (b+1)*block_size-1 of its sequence), in any order, -1 for an empty slot.
 *   block_cnt  in   optional int32 [total_q, heads_kv]: only slots s < block_cnt[t, h] are read (a count
 *                   outside [0, slots] is clamped to it).
 *   block_size      32, 64 or 128.
 *   softmax_scale   0 means the default 1/sqrt(head_dim_qk); otherwise a finite positive value.
 *
 * The math, for query token t of a sequence with lengths len_q, len_k, at key position
 * p = len_k - len_q + t (bottom-right aligned, as flash-attn's causal), kv head h:
 *   B(t, h) = { b = block_idx[t, h, s] : s < count, 0 <= b < ceil(len_k / block_size), b * block_size <= p }
 *   J(t, h) = keys of the blocks of B, each cut causally at p (and at len_k);
 *   s_j = softmax_scale * q[t, g] . k[j, h]; lse[t, g] = log sum_{j in J} exp(s_j);
 *   out[t, g] = sum_{j in J} exp(s_j - lse) v[j, h]. An empty J gives out = 0, lse = -inf, no gradient.
 * Slots outside B (-1, out of range, after the diagonal) are ignored. A block listed twice counts twice;
 * that is the caller's error, which aotk_sel_check_indices reports.
 *
 * For the backward (aotk_sel_bwd), also:
 *   out, lse   in   the forward's.
 *   dout       in   like out.
 *   dq         out  like q.
 *   dk, dv     out  like k and v: every key row of every sequence is written (0 where no query selected
 *                   it). Each block of dk and dv sums the queries that selected it in token order, in one
 *                   program, or, for a long token list (a block most tokens select, like NSA's first
 *                   block), in several programs over consecutive chunks of the list whose fp32 partial
 *                   sums are then added in chunk order: no atomics on values, bitwise deterministic.
 *
 * Alignment: the selection kernels are compiled for 16-byte-aligned pointers and strides that are
 * multiples of 16 elements in q, k, v, out, dout, dq, dk and dv (true of contiguous tensors with these
 * head dims); other layouts get AOTK_ERROR_MISALIGNED_POINTER. lse, block_idx, block_cnt and the
 * cu_seqlens need only element alignment.
 *
 * Sizes: a tensor may span more than 2^31 elements, but one token's heads must not, and the token
 * stride of k and v times block_size must stay under 2^31 (a block's rows are addressed with 32
 * bits); AOTK_ERROR_SIZE_OVERFLOW otherwise.
 */
typedef struct aotk_sel_params {
  size_t struct_size;
  aotk_tensor q;
  aotk_tensor k;
  aotk_tensor v;
  aotk_tensor out;
  aotk_tensor lse;
  aotk_tensor cu_seqlens_q;
  aotk_tensor cu_seqlens_k;
  int32_t max_seqlen_k;
  int32_t block_size;
  aotk_tensor block_idx;
  aotk_tensor block_cnt;
  float softmax_scale;
  /* The backward's; ignored by the forward. */
  aotk_tensor dout;
  aotk_tensor dq;
  aotk_tensor dk;
  aotk_tensor dv;
} aotk_sel_params;

#define AOTK_SEL_PARAMS_INIT {.struct_size = sizeof(aotk_sel_params)}

/*
 * The selection forward: out and lse (if given). One kernel on `stream`, one program per (token, kv
 * head) holding all G query heads of the group as one tile; returns once it is enqueued.
 * Statuses: as aotk_attn_fwd.
 */
AOTK_API aotk_status aotk_sel_fwd(const aotk_sel_params *params, aotk_stream stream);

/*
 * The selection backward: dq, dk, dv. Seven or eight kernels on `stream`: five build the inverse index
 * (for each kv head and key block, the tokens that selected it, in token order) in the workspace, then
 * dq (which also stages delta = rowsum(dout * out)), then dk/dv, and, when the problem is large enough
 * that a token list may be split across programs (aotk_sel_query reports 8 launches), the dk/dv kernel
 * again to add the split lists' partial sums. `workspace`: device memory of at least the
 * workspace_bytes aotk_sel_query(AOTK_OP_SEL_BWD) reports, 16-byte aligned, not read before it is
 * written: 4 * total_q * heads_q (delta) + 3 * 4 * heads_kv * round_up(num_seqs * ceil(max_seqlen_k /
 * block_size) + 1, 4) (list offsets, cursors, first partial records) + 2 * 4 * heads_kv * total_q *
 * slots (the lists; each token's valid block ids) + 4 * heads_kv * R * block_size * (head_dim_qk +
 * head_dim_v) (the partial records) bytes, each part rounded up to 16 (max_seqlen_k is total_k without
 * cu_seqlens). R = 0 with 7 launches, else 2 * total_q * slots / C + 1, where a list is split in chunks
 * of C = max(ceil(4096 / G), ceil(heads_kv * total_q * slots / 512)) tokens: R * heads_kv stays under
 * about 1028 records whatever the size (64 MiB at head dims 128 and block 64).
 * Statuses: as aotk_attn_bwd.
 */
AOTK_API aotk_status aotk_sel_bwd(const aotk_sel_params *params, void *workspace, size_t workspace_bytes,
                                  aotk_stream stream);

/* What aotk_sel_fwd (op AOTK_OP_SEL_FWD) or aotk_sel_bwd (AOTK_OP_SEL_BWD) would run, as aotk_query. For
 * the backward, kernel_name and the tile fields describe the dk/dv pass. */
AOTK_API aotk_status aotk_sel_query(aotk_op op, const aotk_sel_params *params, aotk_kernel_info *info);

/*
 * A debug check of block_idx and block_cnt: AOTK_OK, or AOTK_ERROR_INVALID_INDICES with a message
 * naming the first offending (token, kv head, slot) in token order (token: the packed row of q): a block id < -1 or >=
 * ceil(len_k / block_size), a block listed twice among a row's counted slots, or a count outside
 * [0, slots]. (Blocks after a token's diagonal are not errors: the contract ignores them, and top-n
 * selection produces them for early tokens.) Needs the forward's tensors (out and lse are not read) and
 * 16 bytes of workspace. Unlike the attention calls it synchronizes `stream` and copies the result
 * back: it is for tests and debugging, not for the training loop.
 */
AOTK_API aotk_status aotk_sel_check_indices(const aotk_sel_params *params, void *workspace, size_t workspace_bytes,
                                            aotk_stream stream);

/*
 * Decoding (added in 0.4): a few new query tokens per request against a KV cache, contiguous or paged,
 * with each request's length read on the device, so that a captured CUDA graph replays with new lengths.
 *   q          in   [batch, seqlen_q, heads_q, head_dim_qk], fp16 or bf16; seqlen_q from 1 to 16 (one
 *                   token, or a speculative/multi-token step); packed, any length (cu_seqlens_q below).
 *   k_cache    in   (in and out when appending) contiguous (block_table.data == NULL): [batch, capacity,
 *                   heads_kv, head_dim_qk];
 *                   paged: [num_pages, page_size, heads_kv, head_dim_qk], any page_size >= 1. q's dtype.
 *   v_cache    in   like k_cache with head_dim_v (same capacity or page count and page size).
 *   block_table in  optional int32 [batch, max_pages_per_seq]: request b's key j is row j % page_size of
 *                   page block_table[b, j / page_size]. Only the entries of a request's first L_b
 *                   keys are read; they must be valid pages (not checked: a page id outside
 *                   [0, num_pages) reads outside k_cache). capacity = max_pages_per_seq * page_size.
 *                   Page sizes that are not a multiple of the kernel's key block (16, say) look each key
 *                   row up; where every element offset of k_cache and v_cache is below 2^31 (a cache
 *                   under 4 GiB of bf16 per tensor) that lookup runs in 32-bit offsets, faster (since
 *                   2026-11-28; the kernel's name says attn_decode_paged32).
 *   cache_seqlens in int32 [batch] in device memory: request b attends to its keys 0 .. L_b - 1,
 *                   L_b = cache_seqlens[b] (the new tokens' own keys already written, at the end; with
 *                   k_new below, the length before them), read by the kernels when they run. Values
 *                   outside [0, capacity] are clamped to it; L_b = 0 gives out = 0 and lse = -inf (or the
 *                   sink's) for that request.
 *   out        out  [batch, seqlen_q, heads_q, head_dim_v], q's dtype.
 *   lse        out  optional fp32 [batch, heads_q, seqlen_q], natural log, as aotk_attn_params' lse.
 *   softmax_scale, softcap, alibi_slopes ([heads_q] or [batch, heads_q]) and sinks ([heads_q]) as in
 *                   aotk_attn_params.
 *   causal     0 or 1: token i of the step sits at position p_i = L_b - seqlen_q + i and sees key j only
 *                   when j <= p_i (bottom-right, as flash-attn's flash_attn_with_kvcache).
 *   window_left, window_right   -1 (the INIT value) unbounded; else token i sees j when p_i - window_left
 *                   <= j <= p_i + window_right. With causal, window_right must be -1 or 0. ALiBi's
 *                   distance is |p_i - j|.
 *   num_splits      0 (default): aotk chooses; n >= 1 (at most AOTK_DECODE_MAX_SPLITS) cuts each request's
 *                   keys into at most n ranges of whole key blocks (128 keys up to head dim 128, else 64:
 *                   7 asked over 700 keys gives 6),
 *                   whose partial results are merged; aotk_decode_query reports the count. (aotk's own
 *                   choice may cut caches of up to 8192 keys into blocks of 64 on sm_90: README.)
 *   max_seqlen_k    0 (default): capacity; else a host-side bound on every L_b that aotk's choice of
 *                   num_splits uses (a request longer than it is still computed in full, only slower).
 *   k_new, v_new in optional, given together (appending, as flash_attn_with_kvcache's k and v):
 *                   [batch, seqlen_new, heads_kv, head_dim_qk] and [..., head_dim_v], q's dtype, not
 *                   overlapping the caches. New token i of request b is written into the cache row at
 *                   position max(cache_seqlens[b], 0) + i (through block_table when paged; a position at
 *                   or past the capacity is not written) before it is read: by the decoding kernel itself
 *                   when seqlen_new <= 16 and a group's rows (G * seqlen_q) run in one program a split,
 *                   else by a first kernel (aotk_decode_query's launches count says which); the request
 *                   then attends to
 *                   L_b = min(max(cache_seqlens[b], 0) + seqlen_new, capacity) keys: cache_seqlens then
 *                   holds the lengths before the step, and is not changed (the caller advances it).
 *   cu_seqlens_q    optional int32 [batch + 1] in device memory: packed queries, a prefill over the cache
 *                   (chunked prefill, prefix caching) with any number of tokens per request. q is then
 *                   [total_q, heads_q, head_dim_qk] with request b's rows cu_seqlens_q[b] ..
 *                   cu_seqlens_q[b+1] - 1 (len_q_b of them, at most max_seqlen_q >= 1; more are cut), out
 *                   [total_q, heads_q, head_dim_v] and lse [heads_q, total_q] (the varlen forward's
 *                   layouts). Token i sits at position L_b - len_q_b + i. Splits as above (seqlen_q
 *                   being max_seqlen_q: the partials hold batch * max_seqlen_q rows a head, and the
 *                   merge writes each request's tokens to its packed rows), without appending, in
 *                   64-row tiles of the group's (head, token) rows, head-major
 *                   (so K and V are read about once per query head, as the prefill kernel does, and
 *                   the grid is sized by max_seqlen_q); every key block is masked, so over a
 *                   contiguous cache without a prefix aotk_attn_fwd's varlen forward is faster. On
 *                   sm_90, a paged cache whose page_size is a power of two of at least 16, with
 *                   64 <= max_seqlen_q (or fewer queries where the group's rows, heads_q / heads_kv *
 *                   max_seqlen_q, exceed 32 and batch * heads_q <= the SM count: the forward's tiles
 *                   then fit one wave), but not where those tiles fit one wave and the decoding
 *                   kernel's 64-row tiles, batch * heads_kv * ceil(G * max_seqlen_q / 64), are few
 *                   (at most half the forward's tiles where the forward splits, below; else fewer
 *                   than 0.4 of the SM count, 0.5 from head_dim_qk 192): their split is faster there
 *                   (num_splits 1 asks for no split, and so for the forward), and with
 *                   max_seqlen_q, capacity <= 2^30 - 512, head dims (64, 64), (128, 128),
 *                   (192, 128) or (256, 256), q and both caches with each token's heads contiguous
 *                   and 16-byte strides, runs the sm_90 forward instead (with softcap or ALiBi its
 *                   EXTRAS rows; TMA loads through the block table, 128-query tiles; the query
 *                   reports AOTK_FEATURE_TMA and AOTK_FEATURE_WARP_SPECIALIZED), at 0.88-0.96 of
 *                   that varlen forward's speed on the same keys stored contiguously at d128
 *                   (README). Where its tiles, batch * heads_q * ceil(max_seqlen_q / 128), fill at
 *                   most half the SMs and num_splits is 0, it splits the keys too: min(SMs / tiles,
 *                   max_seqlen_k (or the capacity) / 512) ranges, the fp32 partials in the
 *                   workspace (the formula below) merged into out and lse by a second launch
 *                   (AOTK_FEATURE_SPLIT_KV; the query reports the count).
 *   cache_leftpad   optional int32 [batch] in device memory (flash_attn_with_kvcache's cache_leftpad):
 *                   request b's cache starts at row cache_leftpad[b]; the rows before it are padding, never
 *                   attended (0 or less: none; L_b or more: no key). Positions stay the cache's rows:
 *                   cache_seqlens[b] is where the request ends (and where appending writes), p_i is as
 *                   above, and windows and ALiBi's distance are counted in rows, as in flash-attn, where
 *                   the padding shifts only the rotary positions (the caller's, or the Python package's).
 *                   A contiguous cache's padding is never read. A paged cache's may be (whole key blocks
 *                   of 64 or 128 rows are read): its rows must hold finite values (a NaN under a zero
 *                   probability is still NaN), and its block-table entries valid pages, as every entry
 *                   below L_b. Read by the kernel when it runs (captured graphs replay with new values).
 * Program layout: one program per (request, kv head, split) holds all G = heads_q / heads_kv query
 * heads of the group times seqlen_q tokens, so K and V are read once per group (a group of more than 64
 * such rows runs in chunks of 64, each reading them again). When batch * heads_kv
 * programs cannot fill the GPU, each request's keys are split (flash-decoding): the splits write fp32
 * partial outputs and LSEs to the workspace and a merge kernel (aotk_attn_merge's) combines them, in a
 * fixed order (bitwise deterministic). The number of splits depends only on the sizes the host sees
 * (batch, heads, capacity or max_seqlen_k, the GPU's SM count), never on cache_seqlens.
 * Alignment: q, k_cache, v_cache, out (and k_new, v_new) must be 16-byte aligned with every stride but the last a
 * multiple of 16 elements (contiguous tensors with head dims that are multiples of 16 are), else
 * AOTK_ERROR_MISALIGNED_POINTER. Head dims: multiples of 8 up to 256, run in the compiled pairs.
 * Sizes: batch * seqlen_q * heads_q < 2^31, capacity and seqlen_new <= AOTK_DECODE_MAX_CAPACITY keys
 * per request, batch * seqlen_new < 2^31 (AOTK_ERROR_SIZE_OVERFLOW otherwise); the caches themselves may
 * span any number of elements: the kernels address them with 64-bit offsets. When appending, the
 * caches are outputs: no stride 0 on a dimension larger than 1.
 */
#define AOTK_DECODE_MAX_SPLITS 256
#define AOTK_DECODE_MAX_SEQLEN_Q 16
/* Keys a request's cache may hold (capacity): 2^30, so that the kernels' 32-bit key counters (split
 * ends, the last block's overshoot) cannot wrap. */
#define AOTK_DECODE_MAX_CAPACITY (1 << 30)
typedef struct aotk_decode_params {
  size_t struct_size;
  aotk_tensor q;
  aotk_tensor k_cache;
  aotk_tensor v_cache;
  aotk_tensor block_table;
  aotk_tensor cache_seqlens;
  aotk_tensor out;
  aotk_tensor lse;
  float softmax_scale;
  int32_t causal;
  int32_t window_left;
  int32_t window_right;
  float softcap;
  aotk_tensor alibi_slopes;
  aotk_tensor sinks;
  int32_t num_splits;
  int32_t max_seqlen_k;
  aotk_tensor k_new;
  aotk_tensor v_new;
  aotk_tensor cu_seqlens_q;
  int32_t max_seqlen_q;
  aotk_tensor cache_leftpad; /* added late in 0.4: the struct before it (its struct_size) is still accepted */
} aotk_decode_params;

#define AOTK_DECODE_PARAMS_INIT {.struct_size = sizeof(aotk_decode_params), .window_left = -1, .window_right = -1}

/*
 * The decoding forward. One kernel on `stream`, one more when the keys are split (the merge), one more
 * (first) when appending more than 16 tokens a request or a group's rows run in more than one program
 * a split (k_new above); every kernel is loaded before the first launch, so only a driver failure of a later
 * launch itself (AOTK_ERROR_CUDA) can leave the append done and out undefined. `workspace`:
 * device memory of at least the workspace_bytes aotk_decode_query reports (0 without splits: workspace
 * may then be NULL), 16-byte aligned: num_splits * batch * seqlen_q (max_seqlen_q with cu_seqlens_q) *
 * heads_q * (4 * round_up(head_dim_v, 16) + 4) bytes, the partial outputs then the partial LSEs, each part rounded up to 16 bytes. The
 * workspace must not overlap any tensor of the call (the library does not check it: the results are
 * then undefined). Statuses: as aotk_attn_bwd.
 */
AOTK_API aotk_status aotk_attn_decode(const aotk_decode_params *params, void *workspace, size_t workspace_bytes,
                                      aotk_stream stream);

/* What aotk_attn_decode would run (op must be AOTK_OP_DECODE), as aotk_query: kernel_name and the tile
 * fields describe the decoding kernel, num_splits and workspace_bytes the split. */
AOTK_API aotk_status aotk_decode_query(aotk_op op, const aotk_decode_params *params, aotk_kernel_info *info);

/*
 * Merging partial attentions (added in 0.4): out and lse of the same queries over the union of disjoint
 * key sets, from each set's out and lse. What split-KV decoding does inside, and what cascade attention
 * (a shared prefix attended once, then each request's suffix) and context parallelism (ring attention,
 * one partial per step) need from outside:
 *   lse = log(sum_p exp(lse_p) [+ exp(sink_h)]),  out = sum_p exp(lse_p - lse) out_p.
 *   out_partials in  [num_partials, batch, seqlen_q, heads, head_dim] (or, packed, [num_partials,
 *                    total_q, heads, head_dim]), fp32, fp16 or bf16.
 *   lse_partials in  fp32 [num_partials, batch, heads, seqlen_q] (packed: [num_partials, heads, total_q]):
 *                    natural log, as aotk_attn_fwd writes it. A partial whose lse is -inf (no key) adds
 *                    nothing, whatever its out holds; a NaN lse makes its row's out and lse NaN.
 *   out         out  [batch, seqlen_q, heads, head_dim] (packed: [total_q, heads, head_dim]), fp32, fp16 or
 *                    bf16. A row with no key in any partial (and no sink) gets out = 0, lse = -inf.
 *   lse         out  optional, fp32 [batch, heads, seqlen_q] (packed: [heads, total_q]).
 *   sinks       in   optional fp32 [heads]: each head's sink logit joins the denominator once (for
 *                    partials computed without it).
 * head_dim is a multiple of 8 up to 2^30. Every element is read from all partials before it is written
 * (when lse is written over the partials' lse, each row's program covers the whole head dim), so out
 * and lse may be exactly the memory of the first partial (the same layout and dtype): an in-place
 * update. Any other overlap between outputs and inputs is the caller's error. One kernel on `stream`.
 * Statuses: as aotk_attn_fwd.
 */
typedef struct aotk_merge_params {
  size_t struct_size;
  aotk_tensor out_partials;
  aotk_tensor lse_partials;
  aotk_tensor out;
  aotk_tensor lse;
  aotk_tensor sinks;
} aotk_merge_params;

#define AOTK_MERGE_PARAMS_INIT {.struct_size = sizeof(aotk_merge_params)}

AOTK_API aotk_status aotk_attn_merge(const aotk_merge_params *params, aotk_stream stream);
/* What aotk_attn_merge would run (op must be AOTK_OP_MERGE), as aotk_query. */
AOTK_API aotk_status aotk_merge_query(aotk_op op, const aotk_merge_params *params, aotk_kernel_info *info);

/* Loads every kernel image for the current context's device, so that no later call loads one
 * (useful before CUDA graph capture, or to pay the load cost up front). */
AOTK_API aotk_status aotk_preload(void);

/* Which embedded image a call runs. AUTO: the sm_90 cubins on sm_90, the sm_80 cubins on sm_8x, the
 * sm_80 PTX (JIT-compiled by the driver once per process) on newer GPUs. SM80_PTX forces the sm_80 PTX
 * on any GPU of sm_80 or newer: a way to test the path newer GPUs take. Process-wide. */
typedef enum aotk_image_policy {
  AOTK_IMAGE_POLICY_AUTO = 0,
  AOTK_IMAGE_POLICY_SM80_PTX = 1,
} aotk_image_policy;
AOTK_API aotk_status aotk_set_image_policy(aotk_image_policy policy);

/* What this build contains, for `aotk info`. */
typedef struct aotk_build_info {
  size_t struct_size;
  const char *triton_version; /* the pinned Triton that compiled the kernels */
  const char *ptxas_version;  /* the ptxas Triton used */
  int32_t kernels_sm80;       /* compiled kernels per target */
  int32_t kernels_sm90;
  int64_t image_bytes_sm80;   /* compressed bytes embedded per target (sm_80 counts cubin and PTX) */
  int64_t image_bytes_sm90;
  int32_t catalog_kernels;    /* kernels in the full catalog (more than built when a filter was used) */
} aotk_build_info;

#define AOTK_BUILD_INFO_INIT {.struct_size = sizeof(aotk_build_info)}

AOTK_API aotk_status aotk_get_build_info(aotk_build_info *info);

/*
 * A self-test on GPU `device_ordinal`: runs the forward and the backward on small random problems of
 * every dtype and head dim, causal and not, one per feature of aotk_attn_params, and selection attention
 * (aotk_sel_fwd and aotk_sel_bwd: both dtypes, every head-dim pair and block size, one sequence and
 * varlen, with and without block_cnt, random selections mixed with ignored ids, and every block
 * selected, which must match aotk_attn_fwd/bwd's causal attention), decoding (aotk_attn_decode over a
 * contiguous cache with left padding split into several key ranges, a paged one with appending, and one
 * with pages of whole key blocks: out, lse and both caches after the call) and aotk_attn_merge, and
 * compares with a float64 reference on the host. Allocates and synchronizes (it is not a launch-path
 * call). Makes the device's primary context current for its duration and restores the caller's context
 * after. AOTK_OK when every case passes; otherwise the failure's status and message (a case that cannot
 * run reports its status). `report` (may be NULL) receives one line per case.
 */
AOTK_API aotk_status aotk_self_test(int device_ordinal, char *report, size_t report_bytes);

#ifdef __cplusplus
}
#endif

#endif /* AOTK_H */
