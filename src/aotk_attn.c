/* The attention API: argument validation, kernel choice from the generated table, and the launch.
 *
 * A call validates everything before it touches the driver, so a bad argument gets the same status on
 * a machine with no GPU as on one with a GPU, and nothing is launched or written. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "aotk_attn.h"
#include "aotk_driver.h"
#include "aotk_error.h"
#include "aotk_image.h"
#include "aotk_kernel_table.h"

/* Kernel offsets inside one batch entry are 32-bit (cheap address arithmetic in the inner loop);
 * rows past the end of a block are addressed (masked) up to this many rows beyond the length. */
#define AOTK__INT32_SPAN_LIMIT ((int64_t)INT32_MAX)
#define AOTK__MAX_BLOCK_ROWS 256
/* The smallest struct_size accepted: the struct as release 0.1 defines it. When fields are added,
 * this stays the 0.1 size and the new fields read as zero for callers built against 0.1. */
#define AOTK__ATTN_PARAMS_FIRST_BYTES sizeof(aotk_attn_params)

static _Atomic int image_policy = AOTK_IMAGE_POLICY_AUTO;

aotk_status aotk_set_image_policy(aotk_image_policy policy) {
  aotk__clear_error();
  if (policy != AOTK_IMAGE_POLICY_AUTO && policy != AOTK_IMAGE_POLICY_SM80_PTX) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "policy = %d is not an aotk_image_policy", (int)policy);
  }
  atomic_store(&image_policy, (int)policy);
  return AOTK_OK;
}

static int dtype_bytes(aotk_dtype dtype) {
  switch (dtype) {
    case AOTK_DTYPE_FLOAT16:
    case AOTK_DTYPE_BFLOAT16:
      return 2;
    case AOTK_DTYPE_FLOAT32:
      return 4;
  }
  return 0;
}

static const char *dtype_name(aotk_dtype dtype) {
  switch (dtype) {
    case AOTK_DTYPE_FLOAT16:
      return "float16";
    case AOTK_DTYPE_BFLOAT16:
      return "bfloat16";
    case AOTK_DTYPE_FLOAT32:
      return "float32";
  }
  return "unknown";
}

/* Checks what a tensor must satisfy on its own: data, rank, positive sizes, a contiguous last
 * dimension, non-negative strides, element alignment, and a byte span that fits in int64. */
static aotk_status check_tensor(const aotk_tensor *t, const char *name, int rank, const char *layout) {
  if (t->data == NULL) return aotk__fail(AOTK_ERROR_NULL_POINTER, "%s.data is NULL", name);
  int element_bytes = dtype_bytes(t->dtype);
  if (element_bytes == 0) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_DTYPE, "%s.dtype = %d is not an aotk_dtype", name, (int)t->dtype);
  }
  if (t->rank != rank) {
    return aotk__fail(AOTK_ERROR_RANK, "%s.rank = %d, expected %d (%s)", name, (int)t->rank, rank, layout);
  }
  for (int i = 0; i < rank; i++) {
    if (t->shape[i] <= 0) {
      return aotk__fail(AOTK_ERROR_NONPOSITIVE_SIZE, "%s.shape[%d] = %lld (%s): sizes must be >= 1", name, i,
                        (long long)t->shape[i], layout);
    }
  }
  if (t->strides[rank - 1] != 1) {
    return aotk__fail(AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "%s.strides[%d] = %lld: the last dimension must be contiguous",
                      name, rank - 1, (long long)t->strides[rank - 1]);
  }
  int64_t last_offset = 0;
  for (int i = 0; i < rank; i++) {
    if (t->strides[i] < 0) {
      return aotk__fail(AOTK_ERROR_NEGATIVE_STRIDE, "%s.strides[%d] = %lld is negative", name, i,
                        (long long)t->strides[i]);
    }
    int64_t term;
    if (__builtin_mul_overflow(t->shape[i] - 1, t->strides[i], &term) ||
        __builtin_add_overflow(last_offset, term, &last_offset)) {
      return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "%s: the offset of its last element overflows int64", name);
    }
  }
  int64_t span_bytes;
  if (__builtin_add_overflow(last_offset, 1, &span_bytes) ||
      __builtin_mul_overflow(span_bytes, (int64_t)element_bytes, &span_bytes)) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "%s: its byte span overflows int64", name);
  }
  if ((uintptr_t)t->data % (uintptr_t)element_bytes != 0) {
    return aotk__fail(AOTK_ERROR_MISALIGNED_POINTER, "%s.data = %p is not aligned to its %d-byte elements", name,
                      t->data, element_bytes);
  }
  return AOTK_OK;
}

/* The kernels index within one batch entry with 32-bit offsets, and address (masked) up to
 * AOTK__MAX_BLOCK_ROWS rows past the end of the sequence dimension `sequence_dim`. */
static aotk_status check_batch_span(const aotk_tensor *t, const char *name, int sequence_dim) {
  int64_t span = 0;
  for (int i = 1; i < t->rank; i++) {
    int64_t extent = t->shape[i] - 1 + (i == sequence_dim ? AOTK__MAX_BLOCK_ROWS : 0);
    int64_t term;
    if (__builtin_mul_overflow(extent, t->strides[i], &term) || __builtin_add_overflow(span, term, &span) ||
        span > AOTK__INT32_SPAN_LIMIT) {
      return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW,
                        "%s: one batch entry spans more than 2^31 elements; the kernels index within it with 32 bits",
                        name);
    }
  }
  return AOTK_OK;
}

static aotk_status check_output_strides(const aotk_tensor *t, const char *name) {
  for (int i = 0; i < t->rank; i++) {
    if (t->shape[i] > 1 && t->strides[i] == 0) {
      return aotk__fail(AOTK_ERROR_INVALID_VALUE,
                        "%s.strides[%d] = 0 with shape[%d] = %lld: output elements would overwrite each other", name,
                        i, i, (long long)t->shape[i]);
    }
  }
  return AOTK_OK;
}

static int64_t blocks(int64_t length, int32_t block) { return (length + block - 1) / block; }

static bool tensor_aligned16(const aotk_tensor *t) {
  if ((uintptr_t)t->data % 16 != 0) return false;
  for (int i = 0; i < t->rank - 1; i++) {
    if (t->strides[i] % 16 != 0) return false;
  }
  return true;
}

static const char *const q_layout = "[batch, seqlen_q, heads_q, head_dim]";
static const char *const kv_layout = "[batch, seqlen_k, heads_kv, head_dim]";
static const char *const lse_layout = "[batch, heads_q, seqlen_q]";

static aotk_status check_same_dim(const aotk_tensor *t, const char *name, int dim, int64_t expected,
                                  const char *reference, const char *meaning) {
  if (t->shape[dim] == expected) return AOTK_OK;
  aotk_status status = dim == 3 && strcmp(meaning, "head_dim") == 0 ? AOTK_ERROR_HEAD_DIM_MISMATCH
                                                                      : AOTK_ERROR_SHAPE_MISMATCH;
  return aotk__fail(status, "%s.shape[%d] = %lld but %s = %lld (%s)", name, dim, (long long)t->shape[dim], reference,
                    (long long)expected, meaning);
}

aotk_status aotk__attn_validate(const aotk_attn_params *caller_params, aotk_attn_params *params,
                                aotk__attn_problem *problem) {
  if (caller_params == NULL) return aotk__fail(AOTK_ERROR_NULL_POINTER, "params is NULL");
  /* Older callers pass a smaller struct; fields they do not know about read as zero (the default). */
  if (caller_params->struct_size < AOTK__ATTN_PARAMS_FIRST_BYTES || caller_params->struct_size > (size_t)1 << 20) {
    return aotk__fail(AOTK_ERROR_STRUCT_SIZE, "params->struct_size = %zu, expected %zu (use AOTK_ATTN_PARAMS_INIT)",
                      caller_params->struct_size, sizeof(aotk_attn_params));
  }
  memset(params, 0, sizeof *params);
  memcpy(params, caller_params,
         caller_params->struct_size < sizeof *params ? caller_params->struct_size : sizeof *params);

  const aotk_tensor *q = &params->q, *k = &params->k, *v = &params->v, *out = &params->out, *lse = &params->lse;
  aotk_status status;
  if ((status = check_tensor(q, "q", 4, q_layout)) != AOTK_OK) return status;
  if (q->dtype != AOTK_DTYPE_FLOAT16 && q->dtype != AOTK_DTYPE_BFLOAT16) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype = %s; attention takes float16 or bfloat16",
                      dtype_name(q->dtype));
  }
  if ((status = check_tensor(k, "k", 4, kv_layout)) != AOTK_OK) return status;
  if ((status = check_tensor(v, "v", 4, kv_layout)) != AOTK_OK) return status;
  if ((status = check_tensor(out, "out", 4, q_layout)) != AOTK_OK) return status;
  const aotk_tensor *same_dtype[] = {k, v, out};
  const char *same_dtype_names[] = {"k", "v", "out"};
  for (int i = 0; i < 3; i++) {
    if (same_dtype[i]->dtype != q->dtype) {
      return aotk__fail(AOTK_ERROR_DTYPE_MISMATCH, "%s.dtype = %s but q.dtype = %s", same_dtype_names[i],
                        dtype_name(same_dtype[i]->dtype), dtype_name(q->dtype));
    }
  }
  const int64_t batch = q->shape[0], seqlen_q = q->shape[1], heads_q = q->shape[2], head_dim = q->shape[3];
  const int64_t seqlen_k = k->shape[1], heads_kv = k->shape[2];
  if ((status = check_same_dim(k, "k", 0, batch, "q.shape[0]", "batch")) != AOTK_OK) return status;
  if ((status = check_same_dim(k, "k", 3, head_dim, "q.shape[3]", "head_dim")) != AOTK_OK) return status;
  for (int dim = 0; dim < 4; dim++) {
    static const char *const kv_meaning[] = {"batch", "seqlen_k", "heads_kv", "head_dim"};
    static const char *const kv_reference[] = {"k.shape[0]", "k.shape[1]", "k.shape[2]", "k.shape[3]"};
    if ((status = check_same_dim(v, "v", dim, k->shape[dim], kv_reference[dim], kv_meaning[dim])) != AOTK_OK) {
      return status;
    }
  }
  for (int dim = 0; dim < 4; dim++) {
    static const char *const q_meaning[] = {"batch", "seqlen_q", "heads_q", "head_dim"};
    static const char *const q_reference[] = {"q.shape[0]", "q.shape[1]", "q.shape[2]", "q.shape[3]"};
    if ((status = check_same_dim(out, "out", dim, q->shape[dim], q_reference[dim], q_meaning[dim])) != AOTK_OK) {
      return status;
    }
  }
  if (heads_q % heads_kv != 0) {
    return aotk__fail(AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_q = %lld (q.shape[2]) is not a multiple of heads_kv = %lld (k.shape[2])",
                      (long long)heads_q, (long long)heads_kv);
  }
  if (head_dim != 64 && head_dim != 128) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim = %lld (q.shape[3]); this release supports 64 and 128",
                      (long long)head_dim);
  }
  if (lse->data != NULL) {
    if ((status = check_tensor(lse, "lse", 3, lse_layout)) != AOTK_OK) return status;
    if (lse->dtype != AOTK_DTYPE_FLOAT32) {
      return aotk__fail(AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype = %s; lse is float32", dtype_name(lse->dtype));
    }
    const int64_t expected[3] = {batch, heads_q, seqlen_q};
    static const char *const reference[3] = {"q.shape[0]", "q.shape[2]", "q.shape[1]"};
    static const char *const meaning[3] = {"batch", "heads_q", "seqlen_q"};
    for (int dim = 0; dim < 3; dim++) {
      if ((status = check_same_dim(lse, "lse", dim, expected[dim], reference[dim], meaning[dim])) != AOTK_OK) {
        return status;
      }
    }
    if ((status = check_output_strides(lse, "lse")) != AOTK_OK) return status;
  }
  if ((status = check_output_strides(out, "out")) != AOTK_OK) return status;
  if (seqlen_q > INT32_MAX - AOTK__MAX_BLOCK_ROWS || seqlen_k > INT32_MAX - AOTK__MAX_BLOCK_ROWS ||
      heads_q > INT32_MAX) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "seqlen_q = %lld, seqlen_k = %lld, heads_q = %lld: each must fit in int32",
                      (long long)seqlen_q, (long long)seqlen_k, (long long)heads_q);
  }
  const aotk_tensor *spanned[] = {q, k, v, out};
  const char *spanned_names[] = {"q", "k", "v", "out"};
  for (int i = 0; i < 4; i++) {
    if ((status = check_batch_span(spanned[i], spanned_names[i], 1)) != AOTK_OK) return status;
  }
  if (lse->data != NULL && (status = check_batch_span(lse, "lse", 2)) != AOTK_OK) return status;
  /* The grid is 1-d with at most 2^31 - 1 programs; the smallest tile has 64 rows. */
  int64_t programs = (seqlen_q + 63) / 64;
  if (__builtin_mul_overflow(programs, batch, &programs) || __builtin_mul_overflow(programs, heads_q, &programs) ||
      programs > INT32_MAX) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "batch * heads_q * ceil(seqlen_q / 64) exceeds the grid limit of 2^31 - 1 programs");
  }
  if (params->causal != 0 && params->causal != 1) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "causal = %d; use 0 or 1", (int)params->causal);
  }
  float scale = params->softmax_scale;
  if (scale == 0.0f) {
    scale = 1.0f / sqrtf((float)head_dim);
  } else if (!(scale > 0.0f) || !isfinite(scale)) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "softmax_scale = %g; use 0 (default) or a finite positive value",
                      (double)scale);
  }

  problem->dtype = q->dtype;
  problem->batch = batch;
  problem->seqlen_q = seqlen_q;
  problem->seqlen_k = seqlen_k;
  problem->heads_q = heads_q;
  problem->heads_kv = heads_kv;
  problem->head_dim = head_dim;
  problem->softmax_scale = scale;
  problem->causal = params->causal;
  problem->write_lse = lse->data != NULL;
  problem->aligned = tensor_aligned16(q) && tensor_aligned16(k) && tensor_aligned16(v) && tensor_aligned16(out);
  return AOTK_OK;
}

/* Which image a device runs: the sm_90a cubins only on sm_90 itself (arch-specific code), the sm_80
 * cubins on sm_8x, and the sm_80 PTX, JIT-compiled by the driver, on anything newer. */
static aotk_status choose_target(const aotk__device_info *device, int *arch, aotk__image_kind *kind) {
  int cc = device->compute_capability;
  *arch = 0;
  *kind = AOTK__IMAGE_CUBIN;
  if (cc < 80) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_ARCH, "the GPU is sm_%d; aotk's kernels need sm_80 or newer", cc);
  }
  if (atomic_load(&image_policy) == AOTK_IMAGE_POLICY_SM80_PTX) {
    *arch = 80;
    *kind = AOTK__IMAGE_PTX;
  } else if (cc == 90) {
    *arch = 90;
    *kind = AOTK__IMAGE_CUBIN;
  } else if (cc < 90) {
    *arch = 80;
    *kind = AOTK__IMAGE_CUBIN;
  } else {
    *arch = 80;
    *kind = AOTK__IMAGE_PTX;
  }
  return AOTK_OK;
}

static const char *family_name(int family) {
  switch (family) {
    case AOTK__FAMILY_ATTN_FWD:
      return "attn_fwd";
    case AOTK__FAMILY_ATTN_BWD_PREPROCESS:
      return "attn_bwd_preprocess";
    case AOTK__FAMILY_ATTN_BWD_DKDV:
      return "attn_bwd_dkdv";
    case AOTK__FAMILY_ATTN_BWD_DQ:
      return "attn_bwd_dq";
  }
  return "unknown";
}

aotk_status aotk__choose_kernel(int family, const aotk__attn_problem *problem, int64_t size_key,
                                const aotk__device_info *device, int *row, aotk__image_kind *kind) {
  int arch;
  aotk_status status = choose_target(device, &arch, kind);
  if (status != AOTK_OK) return status;
  /* The tuning rule: among the configs of this variant, the one with the largest min_seqlen that
   * the problem's size key reaches. */
  int best = -1;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (e->family != family || e->arch != arch || e->dtype != (int)problem->dtype ||
        e->head_dim != problem->head_dim || e->aligned != problem->aligned || e->min_seqlen > size_key) {
      continue;
    }
    if (best < 0 || e->min_seqlen > aotk__kernel_table[best].min_seqlen) best = i;
  }
  if (best < 0) {
    return aotk__fail(AOTK_ERROR_KERNEL_NOT_BUILT, "no sm_%d %s kernel for %s, head_dim %lld, %s inputs in this build%s%s%s",
                      arch, family_name(family), dtype_name(problem->dtype), (long long)problem->head_dim,
                      problem->aligned ? "16-byte-aligned" : "unaligned",
                      aotk__kernel_filter[0] ? " (built with the filter " : "", aotk__kernel_filter,
                      aotk__kernel_filter[0] ? ")" : "");
  }
  const aotk__kernel_entry *e = &aotk__kernel_table[best];
  if ((*kind == AOTK__IMAGE_PTX ? e->ptx.raw_bytes : e->cubin.raw_bytes) == 0) {
    return aotk__fail(AOTK_ERROR_KERNEL_NOT_BUILT, "sm_%d %s has no %s image in this build", arch, e->name,
                      *kind == AOTK__IMAGE_PTX ? "PTX" : "cubin");
  }
  if (e->shared_bytes > device->max_shared_bytes) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_ARCH, "%s needs %d bytes of shared memory; the GPU (sm_%d) allows %d",
                      e->name, e->shared_bytes, device->compute_capability, device->max_shared_bytes);
  }
  *row = best;
  return AOTK_OK;
}


static void fill_info(const aotk__kernel_entry *e, aotk__image_kind kind, int64_t grid, size_t workspace_bytes,
                      int32_t launches, aotk_kernel_info *info) {
  size_t size = info->struct_size < sizeof *info ? info->struct_size : sizeof *info;
  aotk_kernel_info full;
  memset(&full, 0, sizeof full);
  full.struct_size = info->struct_size;
  snprintf(full.kernel_name, sizeof full.kernel_name, "%s", e->name);
  full.arch = e->arch;
  full.from_ptx = kind == AOTK__IMAGE_PTX;
  full.num_warps = e->num_warps;
  full.shared_bytes = e->shared_bytes;
  full.block_m = e->block_m;
  full.block_n = e->block_n;
  full.aligned = e->aligned;
  full.grid = grid;
  full.workspace_bytes = workspace_bytes;
  full.launches = launches;
  memcpy(info, &full, size);
}

/* Loads the kernels of `rows` (checking each row's parameter kinds against what its launcher packs)
 * before anything is launched, so that a call that fails to load launches nothing. */
static aotk_status load_rows(const aotk__driver *driver, const int *rows, const char *const *param_kinds, int count,
                             aotk__image_kind kind, CUdevice device, CUkernel *kernels) {
  for (int i = 0; i < count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[rows[i]];
    if (strcmp(e->param_kinds, param_kinds[i]) != 0) {
      return aotk__fail(AOTK_ERROR_INTERNAL, "%s takes parameters \"%s\"; the launcher packs \"%s\"", e->name,
                        e->param_kinds, param_kinds[i]);
    }
    aotk_status status = aotk__kernel_get(driver, rows[i], kind, device, &kernels[i]);
    if (status != AOTK_OK) return status;
  }
  return AOTK_OK;
}

/* Launches table row `row`'s loaded `kernel` with `args`, one per parameter kind, followed by
 * Triton's two scratch pointers (NULL: the generator admits no kernel that needs them). */
static aotk_status launch_row(const aotk__driver *driver, int row, CUkernel kernel, size_t count, void **args,
                              int64_t grid, aotk_stream stream) {
  enum { MAX_ARGS = 64 };
  const aotk__kernel_entry *e = &aotk__kernel_table[row];
  if (count + 2 > MAX_ARGS) return aotk__fail(AOTK_ERROR_INTERNAL, "%s: too many parameters", e->name);
  CUdeviceptr global_scratch = 0, profile_scratch = 0;
  void *all_args[MAX_ARGS];
  memcpy(all_args, args, count * sizeof *args);
  all_args[count] = &global_scratch;
  all_args[count + 1] = &profile_scratch;
  CUresult result = driver->cuLaunchKernel((CUfunction)(void *)kernel, (unsigned)grid, 1, 1,
                                           32u * (unsigned)e->num_warps, 1, 1, (unsigned)e->shared_bytes,
                                           (CUstream)stream, all_args, NULL);
  if (result != CUDA_SUCCESS) {
    char what[160];
    snprintf(what, sizeof what, "cuLaunchKernel(%s)", e->name);
    return aotk__cuda_failure(driver, result, what);
  }
  return AOTK_OK;
}

/* Kernel parameters, in the catalog's order (codegen/aotk_catalog.py). "lii" is one tensor's
 * (batch: int64, sequence: int32, head: int32) strides. */
#define STRIDES "lii"
static const char attn_fwd_param_kinds[] = "ppppp" STRIDES STRIDES STRIDES STRIDES "li" "iiiii" "f" "ii";
static const char attn_bwd_preprocess_param_kinds[] = "ppppp" STRIDES STRIDES "li" "iii" "i";
static const char attn_bwd_dkdv_param_kinds[] =
    "pppppppp" STRIDES STRIDES STRIDES STRIDES STRIDES STRIDES "iiiiii" "i" "ff" "i";
static const char attn_bwd_dq_param_kinds[] = "ppppppp" STRIDES STRIDES STRIDES STRIDES STRIDES "iiiii" "i" "ff" "i";
#undef STRIDES

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

/* Everything needed to launch a call, chosen before anything is loaded or launched. */
typedef struct attn_plan {
  aotk__device_info device;
  int rows[3];
  aotk__image_kind kind;
} attn_plan;

static aotk_status plan_device(attn_plan *plan, const aotk__driver **driver) {
  aotk_status status = aotk__driver_get(driver);
  if (status != AOTK_OK) return status;
  return aotk__current_device(*driver, &plan->device);
}

static aotk_status plan_fwd(const aotk__attn_problem *problem, attn_plan *plan) {
  return aotk__choose_kernel(AOTK__FAMILY_ATTN_FWD, problem, problem->seqlen_q, &plan->device, &plan->rows[0],
                             &plan->kind);
}

static aotk_status launch_fwd(const aotk__driver *driver, const aotk_attn_params *params,
                              const aotk__attn_problem *problem, const attn_plan *plan, aotk_stream stream) {
  const aotk__kernel_entry *e = &aotk__kernel_table[plan->rows[0]];
  packed_tensor q = pack_tensor(&params->q), k = pack_tensor(&params->k), v = pack_tensor(&params->v);
  packed_tensor o = pack_tensor(&params->out);
  CUdeviceptr lse_ptr = (CUdeviceptr)(uintptr_t)params->lse.data;
  int64_t stride_lb = problem->write_lse ? params->lse.strides[0] : 0;
  int32_t stride_lh = problem->write_lse ? (int32_t)params->lse.strides[1] : 0;
  int32_t seqlen_q = (int32_t)problem->seqlen_q, seqlen_k = (int32_t)problem->seqlen_k;
  int32_t heads_q = (int32_t)problem->heads_q, group_size = (int32_t)(problem->heads_q / problem->heads_kv);
  int32_t num_m_blocks = (int32_t)blocks(problem->seqlen_q, e->block_m);
  float qk_scale_log2 = problem->softmax_scale * 1.4426950408889634f;
  int32_t causal = problem->causal, write_lse = problem->write_lse;
  void *args[] = {TENSOR_ARGS(q), TENSOR_ARGS(k), TENSOR_ARGS(v), TENSOR_ARGS(o), &lse_ptr,
                  STRIDE_ARGS(q), STRIDE_ARGS(k), STRIDE_ARGS(v), STRIDE_ARGS(o), &stride_lb, &stride_lh,
                  &seqlen_q, &seqlen_k, &heads_q, &group_size, &num_m_blocks, &qk_scale_log2, &causal, &write_lse};
  _Static_assert(sizeof args / sizeof args[0] == sizeof attn_fwd_param_kinds - 1, "one argument per parameter");
  const char *const kinds[] = {attn_fwd_param_kinds};
  CUkernel kernel;
  aotk_status status = load_rows(driver, plan->rows, kinds, 1, plan->kind, plan->device.device, &kernel);
  if (status != AOTK_OK) return status;
  return launch_row(driver, plan->rows[0], kernel, sizeof args / sizeof args[0], args,
                    num_m_blocks * problem->batch * problem->heads_q, stream);
}

aotk_status aotk_attn_fwd(const aotk_attn_params *caller_params, aotk_stream stream) {
  aotk__clear_error();
  aotk_attn_params params;
  aotk__attn_problem problem;
  aotk_status status = aotk__attn_validate(caller_params, &params, &problem);
  if (status != AOTK_OK) return status;
  const aotk__driver *driver;
  attn_plan plan;
  if ((status = plan_device(&plan, &driver)) != AOTK_OK) return status;
  if ((status = plan_fwd(&problem, &plan)) != AOTK_OK) return status;
  return launch_fwd(driver, &params, &problem, &plan, stream);
}

/* --- the backward ------------------------------------------------------------------------------ */

/* The workspace holds two fp32 arrays [batch * heads_q, stats_stride]: delta = rowsum(dO * O), then
 * lse * log2(e). Rows are padded to a multiple of 128 (the largest BLOCK_M), so the passes load them
 * unmasked and aligned (kernels/attn_bwd.py, attn_bwd_preprocess). */
static int64_t bwd_stats_stride(const aotk__attn_problem *problem) { return blocks(problem->seqlen_q, 128) * 128; }

static size_t bwd_workspace_bytes(const aotk__attn_problem *problem) {
  return 2 * (size_t)(problem->batch * problem->heads_q * bwd_stats_stride(problem)) * sizeof(float);
}

/* The backward's checks beyond the forward's: lse is required (it is the forward's), dout is like
 * out, dq like q, dk and dv like k and v. */
aotk_status aotk__attn_bwd_validate(const aotk_attn_params *caller_params, aotk_attn_params *params,
                                    aotk__attn_problem *problem) {
  aotk_status status = aotk__attn_validate(caller_params, params, problem);
  if (status != AOTK_OK) return status;
  if (params->lse.data == NULL) {
    return aotk__fail(AOTK_ERROR_NULL_POINTER, "lse.data is NULL: the backward needs the forward's lse");
  }
  struct {
    const aotk_tensor *tensor;
    const char *name;
    const aotk_tensor *like;
    const char *like_name;
    const char *layout;
    int is_output;
  } const checks[] = {
      {&params->dout, "dout", &params->out, "out", q_layout, 0},
      {&params->dq, "dq", &params->q, "q", q_layout, 1},
      {&params->dk, "dk", &params->k, "k", kv_layout, 1},
      {&params->dv, "dv", &params->v, "v", kv_layout, 1},
  };
  static const char *const q_meaning[] = {"batch", "seqlen_q", "heads_q", "head_dim"};
  static const char *const kv_meaning[] = {"batch", "seqlen_k", "heads_kv", "head_dim"};
  for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
    const aotk_tensor *t = checks[i].tensor;
    if ((status = check_tensor(t, checks[i].name, 4, checks[i].layout)) != AOTK_OK) return status;
    if (t->dtype != params->q.dtype) {
      return aotk__fail(AOTK_ERROR_DTYPE_MISMATCH, "%s.dtype = %s but q.dtype = %s", checks[i].name,
                        dtype_name(t->dtype), dtype_name(params->q.dtype));
    }
    for (int dim = 0; dim < 4; dim++) {
      char reference[32];
      snprintf(reference, sizeof reference, "%s.shape[%d]", checks[i].like_name, dim);
      const char *meaning = checks[i].layout == q_layout ? q_meaning[dim] : kv_meaning[dim];
      if ((status = check_same_dim(t, checks[i].name, dim, checks[i].like->shape[dim], reference, meaning)) != AOTK_OK) {
        return status;
      }
    }
    if (checks[i].is_output && (status = check_output_strides(t, checks[i].name)) != AOTK_OK) return status;
    if ((status = check_batch_span(t, checks[i].name, 1)) != AOTK_OK) return status;
  }
  if (params->deterministic != 0 && params->deterministic != 1) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "deterministic = %d; use 0 or 1", (int)params->deterministic);
  }
  /* The dK/dV pass runs one program per key block per kv head; bound its grid with the table's
   * smallest key block here, before the driver (plan_bwd checks the chosen row's exactly). */
  int32_t smallest_block_n = INT32_MAX;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (e->family == AOTK__FAMILY_ATTN_BWD_DKDV && e->block_n < smallest_block_n) smallest_block_n = e->block_n;
  }
  int64_t programs = smallest_block_n == INT32_MAX ? 0 : blocks(problem->seqlen_k, smallest_block_n);
  if (__builtin_mul_overflow(programs, problem->batch, &programs) ||
      __builtin_mul_overflow(programs, problem->heads_kv, &programs) || programs > INT32_MAX) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "batch * heads_kv * ceil(seqlen_k / %d) exceeds the grid limit",
                      (int)smallest_block_n);
  }
  problem->aligned = problem->aligned && tensor_aligned16(&params->dout) && tensor_aligned16(&params->dq) &&
                     tensor_aligned16(&params->dk) && tensor_aligned16(&params->dv);
  return AOTK_OK;
}

static aotk_status check_workspace(const aotk__attn_problem *problem, const void *workspace, size_t workspace_bytes) {
  size_t needed = bwd_workspace_bytes(problem);
  if (workspace_bytes < needed || (workspace == NULL && needed > 0)) {
    return aotk__fail(AOTK_ERROR_WORKSPACE_TOO_SMALL,
                      "workspace_bytes = %zu%s but this problem needs %zu (aotk_query reports it)", workspace_bytes,
                      workspace == NULL ? " (workspace NULL)" : "", needed);
  }
  if ((uintptr_t)workspace % 16 != 0) {
    return aotk__fail(AOTK_ERROR_MISALIGNED_POINTER, "workspace = %p is not 16-byte aligned", workspace);
  }
  return AOTK_OK;
}

static aotk_status plan_bwd(const aotk__attn_problem *problem, attn_plan *plan) {
  aotk_status status;
  if ((status = aotk__choose_kernel(AOTK__FAMILY_ATTN_BWD_PREPROCESS, problem, problem->seqlen_q, &plan->device,
                                    &plan->rows[0], &plan->kind)) != AOTK_OK ||
      (status = aotk__choose_kernel(AOTK__FAMILY_ATTN_BWD_DKDV, problem, problem->seqlen_k, &plan->device,
                                    &plan->rows[1], &plan->kind)) != AOTK_OK ||
      (status = aotk__choose_kernel(AOTK__FAMILY_ATTN_BWD_DQ, problem, problem->seqlen_q, &plan->device,
                                    &plan->rows[2], &plan->kind)) != AOTK_OK) {
    return status;
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
  packed_tensor q = pack_tensor(&params->q), k = pack_tensor(&params->k), v = pack_tensor(&params->v);
  packed_tensor o = pack_tensor(&params->out), dout = pack_tensor(&params->dout), dq = pack_tensor(&params->dq);
  packed_tensor dk = pack_tensor(&params->dk), dv = pack_tensor(&params->dv);
  int32_t stats_stride = (int32_t)bwd_stats_stride(problem);
  CUdeviceptr lse_ptr = (CUdeviceptr)(uintptr_t)params->lse.data, delta_ptr = (CUdeviceptr)(uintptr_t)workspace;
  CUdeviceptr lse_log2_ptr = delta_ptr + bwd_workspace_bytes(problem) / 2;
  int64_t stride_lb = params->lse.strides[0];
  int32_t stride_lh = (int32_t)params->lse.strides[1];
  int32_t seqlen_q = (int32_t)problem->seqlen_q, seqlen_k = (int32_t)problem->seqlen_k;
  int32_t heads_q = (int32_t)problem->heads_q, heads_kv = (int32_t)problem->heads_kv;
  int32_t group_size = heads_q / heads_kv, causal = problem->causal;
  float softmax_scale = problem->softmax_scale, qk_scale_log2 = problem->softmax_scale * 1.4426950408889634f;
  const char *const kinds[] = {attn_bwd_preprocess_param_kinds, attn_bwd_dkdv_param_kinds, attn_bwd_dq_param_kinds};
  CUkernel kernels[3];
  aotk_status status = load_rows(driver, plan->rows, kinds, 3, plan->kind, plan->device.device, kernels);
  if (status != AOTK_OK) return status;

  /* The pre-pass covers the padded rows too: it writes their neutral statistics. */
  int32_t pre_blocks = (int32_t)blocks(stats_stride, pre->block_m);
  void *pre_args[] = {TENSOR_ARGS(o), TENSOR_ARGS(dout), &lse_ptr, &delta_ptr, &lse_log2_ptr, STRIDE_ARGS(o),
                      STRIDE_ARGS(dout), &stride_lb, &stride_lh, &seqlen_q, &heads_q, &pre_blocks, &stats_stride};
  _Static_assert(sizeof pre_args / sizeof pre_args[0] == sizeof attn_bwd_preprocess_param_kinds - 1, "one per parameter");
  if ((status = launch_row(driver, plan->rows[0], kernels[0], sizeof pre_args / sizeof pre_args[0], pre_args,
                           pre_blocks * problem->batch * problem->heads_q, stream)) != AOTK_OK) {
    return status;
  }

  int32_t n_blocks = (int32_t)blocks(problem->seqlen_k, dkdv->block_n);
  void *dkdv_args[] = {TENSOR_ARGS(q), TENSOR_ARGS(k), TENSOR_ARGS(v), TENSOR_ARGS(dout), &lse_log2_ptr, &delta_ptr,
                       TENSOR_ARGS(dk), TENSOR_ARGS(dv), STRIDE_ARGS(q), STRIDE_ARGS(k), STRIDE_ARGS(v),
                       STRIDE_ARGS(dout), STRIDE_ARGS(dk), STRIDE_ARGS(dv), &seqlen_q, &seqlen_k, &heads_q,
                       &heads_kv, &group_size, &n_blocks, &stats_stride, &softmax_scale, &qk_scale_log2, &causal};
  _Static_assert(sizeof dkdv_args / sizeof dkdv_args[0] == sizeof attn_bwd_dkdv_param_kinds - 1, "one per parameter");
  if ((status = launch_row(driver, plan->rows[1], kernels[1], sizeof dkdv_args / sizeof dkdv_args[0], dkdv_args,
                           n_blocks * problem->batch * problem->heads_kv, stream)) != AOTK_OK) {
    return status;
  }

  int32_t m_blocks = (int32_t)blocks(problem->seqlen_q, dq_entry->block_m);
  void *dq_args[] = {TENSOR_ARGS(q), TENSOR_ARGS(k), TENSOR_ARGS(v), TENSOR_ARGS(dout), &lse_log2_ptr, &delta_ptr,
                     TENSOR_ARGS(dq), STRIDE_ARGS(q), STRIDE_ARGS(k), STRIDE_ARGS(v), STRIDE_ARGS(dout),
                     STRIDE_ARGS(dq), &seqlen_q, &seqlen_k, &heads_q, &group_size, &m_blocks, &stats_stride,
                     &softmax_scale, &qk_scale_log2, &causal};
  _Static_assert(sizeof dq_args / sizeof dq_args[0] == sizeof attn_bwd_dq_param_kinds - 1, "one per parameter");
  return launch_row(driver, plan->rows[2], kernels[2], sizeof dq_args / sizeof dq_args[0], dq_args,
                    m_blocks * problem->batch * problem->heads_q, stream);
}

aotk_status aotk_attn_bwd(const aotk_attn_params *caller_params, void *workspace, size_t workspace_bytes,
                          aotk_stream stream) {
  aotk__clear_error();
  aotk_attn_params params;
  aotk__attn_problem problem;
  aotk_status status = aotk__attn_bwd_validate(caller_params, &params, &problem);
  if (status != AOTK_OK) return status;
  if ((status = check_workspace(&problem, workspace, workspace_bytes)) != AOTK_OK) return status;
  const aotk__driver *driver;
  attn_plan plan;
  if ((status = plan_device(&plan, &driver)) != AOTK_OK) return status;
  if ((status = plan_bwd(&problem, &plan)) != AOTK_OK) return status;
  return launch_bwd(driver, &params, &problem, &plan, workspace, stream);
}

aotk_status aotk_query(aotk_op op, const aotk_attn_params *caller_params, aotk_kernel_info *info) {
  aotk__clear_error();
  if (info == NULL) return aotk__fail(AOTK_ERROR_NULL_POINTER, "info is NULL");
  if (info->struct_size < sizeof(size_t)) {
    return aotk__fail(AOTK_ERROR_STRUCT_SIZE, "info->struct_size = %zu (use AOTK_KERNEL_INFO_INIT)", info->struct_size);
  }
  if (op != AOTK_OP_ATTN_FWD && op != AOTK_OP_ATTN_BWD) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "op = %d is not an aotk_op", (int)op);
  }
  aotk_attn_params params;
  aotk__attn_problem problem;
  aotk_status status = op == AOTK_OP_ATTN_FWD ? aotk__attn_validate(caller_params, &params, &problem)
                                              : aotk__attn_bwd_validate(caller_params, &params, &problem);
  if (status != AOTK_OK) return status;
  const aotk__driver *driver;
  attn_plan plan;
  if ((status = plan_device(&plan, &driver)) != AOTK_OK) return status;
  if (op == AOTK_OP_ATTN_FWD) {
    if ((status = plan_fwd(&problem, &plan)) != AOTK_OK) return status;
    const aotk__kernel_entry *e = &aotk__kernel_table[plan.rows[0]];
    fill_info(e, plan.kind, blocks(problem.seqlen_q, e->block_m) * problem.batch * problem.heads_q, 0, 1, info);
  } else {
    if ((status = plan_bwd(&problem, &plan)) != AOTK_OK) return status;
    const aotk__kernel_entry *e = &aotk__kernel_table[plan.rows[1]];
    fill_info(e, plan.kind, blocks(problem.seqlen_k, e->block_n) * problem.batch * problem.heads_kv,
              bwd_workspace_bytes(&problem), 3, info);
  }
  return AOTK_OK;
}

aotk_status aotk_preload(void) {
  aotk__clear_error();
  const aotk__driver *driver;
  attn_plan plan;
  aotk_status status = plan_device(&plan, &driver);
  if (status != AOTK_OK) return status;
  int arch;
  aotk__image_kind kind;
  if ((status = choose_target(&plan.device, &arch, &kind)) != AOTK_OK) return status;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (e->arch != arch || e->shared_bytes > plan.device.max_shared_bytes) continue;
    CUkernel kernel;
    if ((status = aotk__kernel_get(driver, i, kind, plan.device.device, &kernel)) != AOTK_OK) return status;
  }
  return AOTK_OK;
}

aotk_status aotk_get_build_info(aotk_build_info *info) {
  aotk__clear_error();
  if (info == NULL) return aotk__fail(AOTK_ERROR_NULL_POINTER, "info is NULL");
  if (info->struct_size < sizeof(size_t)) {
    return aotk__fail(AOTK_ERROR_STRUCT_SIZE, "info->struct_size = %zu (use AOTK_BUILD_INFO_INIT)", info->struct_size);
  }
  aotk_build_info full;
  memset(&full, 0, sizeof full);
  full.struct_size = info->struct_size;
  full.triton_version = aotk__triton_version;
  full.ptxas_version = aotk__ptxas_version;
  full.catalog_kernels = aotk__catalog_kernel_count;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    int64_t bytes = (int64_t)e->cubin.compressed_bytes + (int64_t)e->ptx.compressed_bytes;
    if (e->arch == 80) {
      full.kernels_sm80++;
      full.image_bytes_sm80 += bytes;
    } else if (e->arch == 90) {
      full.kernels_sm90++;
      full.image_bytes_sm90 += bytes;
    }
  }
  size_t size = info->struct_size < sizeof full ? info->struct_size : sizeof full;
  memcpy(info, &full, size);
  return AOTK_OK;
}
