/*
 * Setup shared by the GPU test binaries: the driver, device 0's primary context made current, a
 * non-blocking stream, and the run's seed; and what a case's kernel choice should look like. Include
 * after aotk_test_harness.h in the one file of a binary, and start main with
 *
 *   if (!aotk_gpu_test_setup()) return aotk_gpu_test_skip_all();
 *
 * so that a machine with no GPU reports the binary as skipped (exit 77).
 */
#ifndef AOTK_GPU_TEST_H
#define AOTK_GPU_TEST_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "aotk.h"
#include "aotk_check.h"
#include "aotk_driver.h"
#include "aotk_random.h"
#include "aotk_test_harness.h"

static const aotk__driver *driver;
static CUcontext context;
static CUstream stream;
static uint64_t seed;
static int compute_capability; /* device 0's, major * 10 + minor */
static int multiprocessors;    /* device 0's SMs */

static bool aotk_gpu_test_setup(void) {
  seed = aotk_test_seed();
  aotk_status status = aotk__driver_get(&driver);
  if (status != AOTK_OK) {
    printf("no GPU: %s: %s\n", aotk_status_name(status), aotk_last_error());
    return false;
  }
  CUdevice device;
  if (driver->cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      driver->cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS ||
      driver->cuCtxSetCurrent(context) != CUDA_SUCCESS ||
      driver->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    printf("no usable GPU 0\n");
    return false;
  }
  int major = 0, minor = 0;
  driver->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  driver->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  compute_capability = major * 10 + minor;
  driver->cuDeviceGetAttribute(&multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
  return true;
}

/* Device memory for the GPU tests, each failure a failed check: allocation, copies, poison (0xff
 * bytes), and the two waits. */
static bool aotk_gpu_test_alloc(CUdeviceptr *pointer, size_t bytes) {
  CUresult result = driver->cuMemAlloc(pointer, bytes > 0 ? bytes : 16);
  CHECK_MSG(result == CUDA_SUCCESS, "cuMemAlloc(%zu) = %d", bytes, (int)result);
  if (result != CUDA_SUCCESS) *pointer = 0;
  return result == CUDA_SUCCESS;
}

static bool aotk_gpu_test_upload(CUdeviceptr *pointer, const void *host, size_t bytes) {
  if (!aotk_gpu_test_alloc(pointer, bytes)) return false;
  CUresult result = driver->cuMemcpyHtoD(*pointer, host, bytes);
  CHECK_MSG(result == CUDA_SUCCESS, "cuMemcpyHtoD = %d", (int)result);
  return result == CUDA_SUCCESS;
}

static bool aotk_gpu_test_download(void *host, CUdeviceptr pointer, size_t bytes) {
  CUresult result = driver->cuMemcpyDtoH(host, pointer, bytes);
  CHECK_MSG(result == CUDA_SUCCESS, "cuMemcpyDtoH = %d", (int)result);
  return result == CUDA_SUCCESS;
}

static void aotk_gpu_test_free(CUdeviceptr *pointer) {
  if (*pointer) driver->cuMemFree(*pointer);
  *pointer = 0;
}

/* cuMemsetD8 and cuMemcpyHtoD run on the legacy stream, which the test's non-blocking stream does not
 * wait for: wait for them before launching. */
static bool aotk_gpu_test_settle(void) {
  CUresult result = driver->cuCtxSynchronize();
  CHECK_MSG(result == CUDA_SUCCESS, "cuCtxSynchronize = %d", (int)result);
  return result == CUDA_SUCCESS;
}

static bool aotk_gpu_test_poison(CUdeviceptr pointer, size_t bytes) {
  CUresult result = driver->cuMemsetD8(pointer, 0xff, bytes);
  CHECK_MSG(result == CUDA_SUCCESS, "cuMemsetD8 = %d", (int)result);
  return result == CUDA_SUCCESS;
}

static bool aotk_gpu_test_synchronize(const char *after) {
  CUresult result = driver->cuStreamSynchronize(stream);
  CHECK_MSG(result == CUDA_SUCCESS, "cuStreamSynchronize after %s = %d", after, (int)result);
  return result == CUDA_SUCCESS;
}

static void aotk_gpu_test_no_gpu(void) { TEST_SKIP("no GPU on this machine"); }

static int aotk_gpu_test_skip_all(void) {
  RUN_TEST(aotk_gpu_test_no_gpu);
  return aotk_test_finish();
}

static uint64_t aotk_gpu_test_random(uint64_t *state) { return aotk__random_next(state); }

static const char *aotk_gpu_test_dtype_label(aotk_dtype dtype) {
  return dtype == AOTK_DTYPE_BFLOAT16 ? "bf16" : "fp16";
}

static int64_t aotk_gpu_test_head_dim_v(int64_t head_dim, const aotk__check_features *f) {
  return f->head_dim_v > 0 ? f->head_dim_v : head_dim;
}

/* The aligned kernels need 16-byte-aligned pointers and strides that are multiples of 16 elements:
 * the packed and permuted layouts give that exactly when both head dims are multiples of 16 (every
 * stride of theirs is a multiple of a head dim, the smallest being the head dim itself). */
static bool aotk_gpu_test_expect_aligned(aotk__check_layout layout, int64_t head_dim, const aotk__check_features *f) {
  return (layout == AOTK__LAYOUT_CONTIGUOUS || layout == AOTK__LAYOUT_PERMUTED) && head_dim % 16 == 0 &&
         aotk_gpu_test_head_dim_v(head_dim, f) % 16 == 0;
}

/* The kernel variant with softcap, ALiBi and dropout code (AOTK_FEATURE_EXTRAS_KERNEL); sinks touch only
 * the forward's epilogue and the backward's pre-pass, so they run in the plain variant. */
static bool aotk_gpu_test_has_extras(const aotk__check_features *f) {
  return f->softcap > 0.0f || f->alibi != 0 || f->dropout_p > 0.0f;
}

/* Which forward kernel a case should run (include/aotk.h, AOTK_FEATURE_TMA and
 * AOTK_FEATURE_WARP_SPECIALIZED): on sm_90 cubins, with a dense layout whose tokens hold their heads
 * contiguously (of the check's layouts, the packed one, aligned), the Gluon kernel for everything but
 * dropout (windows, sinks, softcap and ALiBi) at head dims 64, 128, 256 and (192, 128), varlen included,
 * and its dropout form for dropout without softcap or ALiBi at 64 and 128, else (dense only: dropout)
 * the TMA kernel at d=128 and 256; the pointer kernel otherwise. */
typedef enum aotk_gpu_test_fwd_path { FWD_POINTER, FWD_TMA, FWD_HOPPER } aotk_gpu_test_fwd_path;
static aotk_gpu_test_fwd_path aotk_gpu_test_expect_fwd_path(aotk__check_layout layout, int64_t head_dim,
                                                            const aotk__check_features *f, bool from_ptx) {
  const int64_t head_dim_v = aotk_gpu_test_head_dim_v(head_dim, f);
  if (compute_capability != 90 || from_ptx || layout != AOTK__LAYOUT_CONTIGUOUS) return FWD_POINTER;
  const bool hopper_dims = (head_dim == head_dim_v && (head_dim == 64 || head_dim == 128 || head_dim == 256)) ||
                           (head_dim == 192 && head_dim_v == 128);
  /* Varlen (packed) too for the Gluon kernel; the Triton TMA kernel is dense only. */
  if (f->dropout_p == 0.0f && hopper_dims) return FWD_HOPPER;
  if (f->softcap == 0.0f && f->alibi == 0 && head_dim == head_dim_v && (head_dim == 64 || head_dim == 128)) {
    return FWD_HOPPER; /* dropout alone: attn_fwd_hopper_dropout */
  }
  if (f->num_seqs != 0 || head_dim_v != head_dim) return FWD_POINTER;
  return head_dim == 128 || head_dim == 256 ? FWD_TMA : FWD_POINTER;
}


/* The AOTK_FEATURE_* bits the query should report for a case, from the header's definitions: a window
 * is a bound beyond what causal already implies; the padded head dim is a compiled pair larger than
 * the problem's (the query's kernel_head_dim_* are checked against the problem's apart). */
static uint32_t aotk_gpu_test_expected_features(int causal, int64_t head_dim, const aotk__check_features *f,
                                                int32_t kernel_head_dim_qk, int32_t kernel_head_dim_v) {
  uint32_t bits = 0;
  if (f->num_seqs > 0) bits |= AOTK_FEATURE_VARLEN;
  if (causal) bits |= AOTK_FEATURE_CAUSAL;
  if (f->window && (f->window_left >= 0 || (f->window_right >= 0 && !causal))) bits |= AOTK_FEATURE_WINDOW;
  if (f->softcap > 0.0f) bits |= AOTK_FEATURE_SOFTCAP;
  if (f->alibi) bits |= AOTK_FEATURE_ALIBI;
  if (f->sinks) bits |= AOTK_FEATURE_SINKS;
  if (f->dropout_p > 0.0f) bits |= AOTK_FEATURE_DROPOUT;
  if (kernel_head_dim_qk > head_dim || kernel_head_dim_v > aotk_gpu_test_head_dim_v(head_dim, f)) {
    bits |= AOTK_FEATURE_PADDED_HEAD_DIM;
  }
  if (aotk_gpu_test_has_extras(f)) bits |= AOTK_FEATURE_EXTRAS_KERNEL;
  return bits;
}

/* Checks the kernel choice the query reported for a case: the EXTRAS variant exactly when a feature
 * needs it, compiled head dims that hold the problem's (multiples of 8 up to 256, the header's range),
 * and the feature bits. */
static void aotk_gpu_test_check_kernel_choice(const char *kernel_name, int causal, int64_t head_dim,
                                              const aotk__check_features *f, int32_t kernel_head_dim_qk,
                                              int32_t kernel_head_dim_v, uint32_t features,
                                              aotk_gpu_test_fwd_path expect_path) {
  const int64_t head_dim_v = aotk_gpu_test_head_dim_v(head_dim, f);
  bool extras = strstr(kernel_name, "_extras_") != NULL;
  /* The Gluon kernels' dropout forms carry dropout alone and are no EXTRAS variants. */
  const bool dropout_form = strncmp(kernel_name, "attn_fwd_hopper_dropout_", 24) == 0 ||
                            strncmp(kernel_name, "attn_bwd_dkdv_hopper_dropout_", 29) == 0 ||
                            strncmp(kernel_name, "attn_bwd_fused_hopper_dropout_", 30) == 0;
  CHECK_MSG(extras == (aotk_gpu_test_has_extras(f) && !dropout_form), "ran %s", kernel_name);
  static const char *const path_names[] = {"pointer", "TMA", "warp-specialized"};
  aotk_gpu_test_fwd_path path = strncmp(kernel_name, "attn_fwd_tma_", 13) == 0             ? FWD_TMA
                                : strncmp(kernel_name, "attn_fwd_hopper_", 16) == 0        ? FWD_HOPPER
                                : strncmp(kernel_name, "attn_bwd_dkdv_hopper_", 21) == 0   ? FWD_HOPPER
                                : strncmp(kernel_name, "attn_bwd_fused_hopper_", 22) == 0  ? FWD_HOPPER
                                                                                           : FWD_POINTER;
  CHECK_MSG(path == expect_path, "ran %s, expected the %s kernel", kernel_name, path_names[expect_path]);
  const uint32_t path_bits = path == FWD_HOPPER ? AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED
                             : path == FWD_TMA  ? AOTK_FEATURE_TMA
                                                : 0u;
  CHECK_MSG((features & (AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED)) == path_bits,
            "features 0x%x for %s", (unsigned)features, kernel_name);
  features &= ~(AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED); /* checked just above */
  CHECK_MSG(kernel_head_dim_qk >= head_dim && kernel_head_dim_v >= head_dim_v && kernel_head_dim_qk <= 256 &&
                kernel_head_dim_v <= 256,
            "head dims %lld/%lld ran in the compiled %d/%d (%s)", (long long)head_dim, (long long)head_dim_v,
            (int)kernel_head_dim_qk, (int)kernel_head_dim_v, kernel_name);
  uint32_t expected = aotk_gpu_test_expected_features(causal, head_dim, f, kernel_head_dim_qk, kernel_head_dim_v);
  if (dropout_form) expected &= ~AOTK_FEATURE_EXTRAS_KERNEL;
  CHECK_MSG(features == expected, "features 0x%x, expected 0x%x", (unsigned)features, (unsigned)expected);
}

/* Whether a backward case's dK/dV pass (the kernel aotk_query names) should be the warp-specialized
 * Gluon one (include/aotk.h): on sm_90 cubins, the packed layout for q, k, v and dout (mixed layouts
 * put k in the permuted one, which TMA can read as [batch, seqlen, heads * d] only in the degenerate
 * case below), dense or varlen, head dims exactly 64,
 * 128, 256 or (192, 128), no dropout (windows, sinks, softcap and ALiBi allowed: the EXTRAS rows take the last two),
 * or dropout without softcap or ALiBi at 64 and 128 (the dropout forms). FWD_HOPPER then, else the pointer
 * kernel (the name check_kernel_choice takes). */
static aotk_gpu_test_fwd_path aotk_gpu_test_expect_bwd_path(aotk__check_layout layout, int mix_layouts,
                                                            int64_t seqlen_k, int64_t heads_kv, int64_t head_dim,
                                                            const aotk__check_features *f, bool from_ptx) {
  /* Mixed layouts put k in the permuted layout, [batch, heads, seqlen, d] in memory: a token's heads are
   * contiguous (and its rows as TMA wants them) only with one kv head and one key. */
  const bool k_readable = !mix_layouts || (heads_kv == 1 && seqlen_k == 1);
  const int64_t head_dim_v = aotk_gpu_test_head_dim_v(head_dim, f);
  const bool dims = (head_dim_v == head_dim && (head_dim == 64 || head_dim == 128 || head_dim == 256)) ||
                    (head_dim == 192 && head_dim_v == 128);
  if (compute_capability != 90 || from_ptx || layout != AOTK__LAYOUT_CONTIGUOUS || !k_readable || !dims) {
    return FWD_POINTER;
  }
  if (f->dropout_p == 0.0f) return FWD_HOPPER;
  const bool dropout_form = f->softcap == 0.0f && !f->alibi && head_dim_v == head_dim && head_dim <= 128;
  return dropout_form ? FWD_HOPPER : FWD_POINTER;
}

/* The query length a case's call has (what the host's tuning reads): seqlen_q, or for varlen
 * max_seqlen_q as the check runners pass it (the longest sequence, at least 1, plus the slack). */
static int64_t aotk_gpu_test_max_seqlen_q(const aotk__check_features *f, int64_t seqlen_q) {
  if (f->num_seqs == 0) return seqlen_q;
  int64_t longest = 1;
  for (int i = 0; i < f->num_seqs; i++) {
    if (f->seqlens_q[i] > longest) longest = f->seqlens_q[i];
  }
  return longest + f->max_seqlen_slack;
}

/* " dv=128 varlen[6] window=63/-1 top-left softcap=5 alibi[2d] sinks dropout=0.1": the features of a
 * case, for its name. */
static void aotk_gpu_test_feature_label(char *out, size_t size, int64_t head_dim, const aotk__check_features *f) {
  size_t used = 0;
  out[0] = '\0';
#define AOTK_GPU_TEST_APPEND(...)                                             \
  do {                                                                        \
    if (used < size) {                                                        \
      int written = snprintf(out + used, size - used, __VA_ARGS__);           \
      if (written > 0) used += (size_t)written;                               \
    }                                                                         \
  } while (0)
  if (f->head_dim_v > 0 && f->head_dim_v != head_dim) AOTK_GPU_TEST_APPEND(" dv=%lld", (long long)f->head_dim_v);
  if (f->num_seqs > 0) {
    AOTK_GPU_TEST_APPEND(" varlen[");
    for (int i = 0; i < f->num_seqs; i++) {
      AOTK_GPU_TEST_APPEND("%s%lldx%lld", i ? "," : "", (long long)f->seqlens_q[i], (long long)f->seqlens_k[i]);
    }
    AOTK_GPU_TEST_APPEND("]");
    if (f->max_seqlen_slack > 0) AOTK_GPU_TEST_APPEND("+%lld", (long long)f->max_seqlen_slack);
  }
  if (f->window) AOTK_GPU_TEST_APPEND(" window=%d/%d", (int)f->window_left, (int)f->window_right);
  if (f->top_left) AOTK_GPU_TEST_APPEND(" top-left");
  if (f->softcap > 0.0f) AOTK_GPU_TEST_APPEND(" softcap=%g", (double)f->softcap);
  if (f->alibi) AOTK_GPU_TEST_APPEND(" alibi[%s]", f->alibi == 2 ? "2d" : "1d");
  if (f->sinks) AOTK_GPU_TEST_APPEND(" sinks");
  if (f->dropout_p > 0.0f) AOTK_GPU_TEST_APPEND(" dropout=%g", (double)f->dropout_p);
#undef AOTK_GPU_TEST_APPEND
}

/* Sets varlen sequences from a list of (len_q, len_k) pairs. */
static void aotk_gpu_test_set_seqlens(aotk__check_features *f, const int64_t (*seqlens)[2], int count) {
  f->num_seqs = count;
  for (int i = 0; i < count; i++) {
    f->seqlens_q[i] = seqlens[i][0];
    f->seqlens_k[i] = seqlens[i][1];
  }
}

#endif /* AOTK_GPU_TEST_H */
