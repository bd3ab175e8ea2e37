/*
 * A libFuzzer target over the public entry points that take parameters: aotk_attn_fwd, aotk_attn_bwd,
 * aotk_query, aotk_sel_fwd, aotk_sel_bwd, aotk_sel_query and aotk_sel_check_indices (issue 14).
 *
 * Each input decodes into one call. A small problem is built valid first (shapes, contiguous strides,
 * dtypes, the features a byte turns on: causal, windows, softcap, ALiBi, sinks, dropout, varlen,
 * block_cnt) and then a run of edits overwrites any field with a decoded value: a shape or stride
 * entry (small, near a power of two, negative or huge), a rank, a dtype, a pointer (NULL, moved by a
 * few bytes, another tensor's), a scalar's bits (NaN and the infinities included), struct_size, the
 * workspace's size and address. Nothing is dereferenced: the pointers are fake, so sizes far past any
 * GPU's memory are fine, and the library runs over a fake driver table that records what reaches it,
 * with four devices (sm_90, sm_80, sm_86 and sm_120: the cubins with TMA, the sm_80 cubins, less shared
 * memory, the PTX), the input's last byte choosing whose context is current.
 *
 * The target aborts (a finding) on
 * - a crash or a sanitizer report (the build adds AddressSanitizer and UndefinedBehaviorSanitizer);
 * - a refused call that reached the driver: a launch, a memset, a copy or a TMA descriptor for a call
 *   that then returned an error; any call reaching an entry it has no business with (allocation,
 *   streams, graphs);
 * - an accepted call that hands a kernel a pointer outside every span the caller described (each
 *   tensor's bytes as its shape, strides and dtype say, the workspace), or encodes a TMA descriptor, or
 *   sets or copies memory, reaching past one.
 * What it does not check yet: how far a kernel indexes from a pointer given its other arguments (the
 * packed strides and sizes; tests/test_api.c checks those per family on chosen cases).
 *
 * `make test` runs it for AOTK_FUZZ_SECONDS (60) from the committed corpus (tests/fuzz_corpus), which a
 * longer run grows: build/tests/fuzz_api build/fuzz-corpus tests/fuzz_corpus -max_total_time=N.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotk.h"
#include "aotk_driver.h"
#include "aotk_kernel_table.h"

/* ---- the input ---------------------------------------------------------------------------------- */

typedef struct reader {
  const uint8_t *data;
  size_t left;
} reader;

static uint64_t take(reader *r, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; i++) {
    uint64_t byte = 0;
    if (r->left > 0) {
      byte = *r->data++;
      r->left--;
    }
    value |= byte << (8 * i);
  }
  return value;
}

/* A value in [lo, hi]. */
static int64_t take_range(reader *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(take(r, 4) % (uint64_t)(hi - lo + 1));
}

/* A size-like value: mostly small, sometimes near a power of two, negative, or huge. */
static int64_t take_size(reader *r) {
  switch (take(r, 1) % 8) {
    case 0:
      return -(int64_t)take(r, 1);
    case 1: {
      int shift = (int)take_range(r, 0, 62);
      return ((int64_t)1 << shift) + take_range(r, -2, 2);
    }
    case 2:
      return (int64_t)take(r, 8);
    case 3:
      return INT64_MAX - (int64_t)take(r, 1);
    default:
      return (int64_t)take(r, 2) % 1100;
  }
}

static float take_float(reader *r) {
  static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1e-30f, 1e30f, INFINITY, -INFINITY, NAN};
  if (take(r, 1) % 2) return special[take(r, 1) % (sizeof special / sizeof special[0])];
  uint32_t bits = (uint32_t)take(r, 4);
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

/* ---- the fake address space --------------------------------------------------------------------- */

/* Tensor slot i lives at BASE + i * STRIDE (1 TiB apart, so no two overlap); the workspace has its own. */
#define REGION_BASE ((uintptr_t)0x100000000000ull)
#define REGION_STRIDE ((uintptr_t)0x10000000000ull)
enum { MAX_SPANS = 24 };

typedef struct span {
  uintptr_t lo, hi; /* [lo, hi) bytes */
  const char *what;
  const aotk_tensor *tensor; /* the description it comes from, if a tensor's */
} span;

/* Per thread: the driver's entries run on the calling thread, and the stress build calls from many. */
static _Thread_local struct {
  span spans[MAX_SPANS];
  int span_count;
  /* what reached the driver during the current call */
  int launches, memsets, copies, encodes;
} seen;

static void fail(const char *what) {
  fprintf(stderr, "fuzz_api: %s\n", what);
  abort();
}

static size_t dtype_bytes(aotk_dtype dtype) {
  switch (dtype) {
    case AOTK_DTYPE_FLOAT16:
    case AOTK_DTYPE_BFLOAT16:
      return 2;
    case AOTK_DTYPE_FLOAT32:
    case AOTK_DTYPE_INT32:
      return 4;
    case AOTK_DTYPE_INT64:
      return 8;
    case AOTK_DTYPE_UINT8:
      return 1;
  }
  return 0;
}

/* The bytes a tensor description covers, or nothing for one the library must refuse (or NULL). */
static void add_tensor_span(const aotk_tensor *t, const char *what) {
  if (t->data == NULL || seen.span_count == MAX_SPANS) return;
  const size_t element = dtype_bytes(t->dtype);
  if (element == 0 || t->rank < 1 || t->rank > AOTK_TENSOR_MAX_RANK) return;
  /* In 128 bits, each term clamped to 2^100 (six of them cannot overflow), the span to the address space. */
  const __int128 cap = (__int128)1 << 100;
  __int128 lo = 0, hi = 0;
  for (int d = 0; d < t->rank; d++) {
    if (t->shape[d] <= 0) return; /* empty: nothing to reach */
    __int128 reach = (__int128)(t->shape[d] - 1) * t->strides[d];
    reach = reach > cap ? cap : reach < -cap ? -cap : reach;
    if (reach < 0) lo += reach; else hi += reach;
  }
  const __int128 base = (__int128)(uintptr_t)t->data, top = (__int128)UINTPTR_MAX;
  const __int128 first = base + lo * (__int128)element, end = base + (hi + 1) * (__int128)element;
  span *s = &seen.spans[seen.span_count++];
  s->lo = (uintptr_t)(first < 0 ? 0 : first);
  s->hi = (uintptr_t)(end > top ? top : end);
  s->what = what;
  s->tensor = t;
}

static void add_span(uintptr_t lo, size_t bytes, const char *what) {
  if (lo == 0 || bytes == 0 || seen.span_count == MAX_SPANS) return;
  const uintptr_t hi = bytes > UINTPTR_MAX - lo ? UINTPTR_MAX : lo + bytes; /* a caller may claim that much */
  seen.spans[seen.span_count++] = (span){lo, hi, what, NULL};
}

/* [address, address + bytes) inside one span. */
static void check_reach(uintptr_t address, unsigned __int128 bytes, const char *what) {
  for (int i = 0; i < seen.span_count; i++) {
    const span *s = &seen.spans[i];
    if (address >= s->lo && address < s->hi && bytes <= (unsigned __int128)(s->hi - address)) return;
  }
  fprintf(stderr, "fuzz_api: %s reaches %#lx + %llu bytes, outside every span the caller described:\n", what,
          (unsigned long)address, (unsigned long long)bytes);
  for (int i = 0; i < seen.span_count; i++) {
    const span *s = &seen.spans[i];
    fprintf(stderr, "  %-14s [%#lx, %#lx)", s->what, (unsigned long)s->lo, (unsigned long)s->hi);
    if (s->tensor != NULL) {
      fprintf(stderr, " data %p dtype %d rank %d shape", s->tensor->data, (int)s->tensor->dtype, s->tensor->rank);
      for (int d = 0; d < AOTK_TENSOR_MAX_RANK; d++) fprintf(stderr, " %lld", (long long)s->tensor->shape[d]);
      fprintf(stderr, " strides");
      for (int d = 0; d < AOTK_TENSOR_MAX_RANK; d++) fprintf(stderr, " %lld", (long long)s->tensor->strides[d]);
    }
    fprintf(stderr, "\n");
  }
  abort();
}

/* ---- the fake driver ---------------------------------------------------------------------------- */

#define FAKE_CONTEXT ((CUcontext)(uintptr_t)0xc0de0)
#define FAKE_LIBRARY ((CUlibrary)(uintptr_t)0x11b0)
#define FAKE_KERNEL_BASE ((uintptr_t)0x4e000000u)

static CUresult fake_cuInit(unsigned flags) { return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
static CUresult fake_cuDriverGetVersion(int *version) {
  *version = 13000;
  return CUDA_SUCCESS;
}
static CUresult fake_cuGetErrorName(CUresult error, const char **name) {
  (void)error;
  *name = "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
static CUresult fake_cuGetErrorString(CUresult error, const char **text) {
  (void)error;
  *text = "a fake error";
  return CUDA_SUCCESS;
}
static CUresult fake_cuDeviceGet(CUdevice *device, int ordinal) {
  *device = ordinal;
  return ordinal >= 0 && ordinal < 4 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
/* The fake GPUs: an H100 (sm_90, the cubins and TMA), an A100 (sm_80), an RTX 3090 (sm_86, 99 KiB of
 * shared memory) and an sm_120 part (the sm_80 PTX). Each input (each thread's call) picks the one whose
 * context is current. */
static const struct fake_device {
  int compute_capability, multiprocessors, max_shared_bytes;
} fake_devices[] = {{90, 132, 227 * 1024}, {80, 108, 163 * 1024}, {86, 82, 99 * 1024}, {120, 170, 99 * 1024}};
enum { FAKE_DEVICES = sizeof fake_devices / sizeof fake_devices[0] };
static _Thread_local CUdevice current_device;

static CUresult fake_cuDeviceGetCount(int *count) {
  *count = FAKE_DEVICES;
  return CUDA_SUCCESS;
}
static CUresult fake_cuDeviceGetAttribute(int *value, int attribute, CUdevice device) {
  if (device < 0 || device >= FAKE_DEVICES) return CUDA_ERROR_INVALID_VALUE;
  const struct fake_device *d = &fake_devices[device];
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = d->compute_capability / 10;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = d->compute_capability % 10;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *value = d->max_shared_bytes;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = d->multiprocessors;
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}
static CUresult fake_cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device) {
  (void)device;
  *context = FAKE_CONTEXT;
  return CUDA_SUCCESS;
}
static CUresult fake_cuDevicePrimaryCtxRelease(CUdevice device) {
  (void)device;
  return CUDA_SUCCESS;
}
static CUresult fake_cuCtxGetCurrent(CUcontext *context) {
  *context = (CUcontext)((uintptr_t)FAKE_CONTEXT + 16u * (uintptr_t)current_device);
  return CUDA_SUCCESS;
}
static CUresult fake_cuCtxSetCurrent(CUcontext context) {
  (void)context;
  return CUDA_SUCCESS;
}
static CUresult fake_cuCtxGetDevice(CUdevice *device) {
  *device = current_device;
  return CUDA_SUCCESS;
}
static CUresult fake_cuCtxSynchronize(void) { return CUDA_SUCCESS; }
static CUresult fake_cuLibraryLoadData(CUlibrary *library, const void *code, void *jit_options, void **jit_values,
                                       unsigned num_jit_options, void *library_options, void **library_values,
                                       unsigned num_library_options) {
  (void)code, (void)jit_options, (void)jit_values, (void)num_jit_options;
  (void)library_options, (void)library_values, (void)num_library_options;
  *library = FAKE_LIBRARY;
  return CUDA_SUCCESS;
}
/* A kernel handle names the first table row with that .entry (a family's rows share their parameters). */
static CUresult fake_cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name) {
  if (library != FAKE_LIBRARY) return CUDA_ERROR_INVALID_VALUE;
  for (int row = 0; row < aotk__kernel_count; row++) {
    if (strcmp(aotk__kernel_table[row].function_name, name) == 0) {
      *kernel = (CUkernel)(FAKE_KERNEL_BASE + 16u * (uintptr_t)row);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}
static CUresult fake_cuKernelSetAttribute(int attribute, int value, CUkernel kernel, CUdevice device) {
  (void)attribute, (void)value, (void)kernel, (void)device;
  return CUDA_SUCCESS;
}
static CUresult fake_cuLaunchKernel(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                    unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_bytes,
                                    CUstream stream, void **params, void **extra) {
  (void)grid_y, (void)grid_z, (void)block_x, (void)block_y, (void)block_z, (void)shared_bytes, (void)stream;
  seen.launches++;
  const uintptr_t handle = (uintptr_t)(void *)function;
  if (handle < FAKE_KERNEL_BASE || (handle - FAKE_KERNEL_BASE) % 16u != 0 ||
      (handle - FAKE_KERNEL_BASE) / 16u >= (uintptr_t)aotk__kernel_count) {
    fail("a launch of a handle the driver never gave out");
  }
  if (extra != NULL) fail("a launch with `extra`");
  if (grid_x == 0) fail("a launch of an empty grid");
  const aotk__kernel_entry *e = &aotk__kernel_table[(handle - FAKE_KERNEL_BASE) / 16u];
  /* Reads each argument at its kind's size (as the driver would: a short list or a narrow argument
   * shows under ASan); a pointer must be NULL or inside a span. */
  char what[160];
  int slot = 0;
  for (const char *kind = e->param_kinds; *kind != '\0'; kind++) {
    if (*kind == 't') {
      slot += 1 + 3 + 3; /* the map (checked when encoded), its shape and strides */
      continue;
    }
    if (*kind == 'p') {
      uintptr_t pointer;
      memcpy(&pointer, params[slot], sizeof pointer);
      snprintf(what, sizeof what, "%s's pointer argument %d", e->name, slot);
      if (pointer != 0) check_reach(pointer, 1, what);
    } else {
      unsigned char bytes[8];
      memcpy(bytes, params[slot], *kind == 'l' ? 8 : 4);
    }
    slot++;
  }
  return CUDA_SUCCESS;
}
static CUresult fake_cuMemcpyHtoD(CUdeviceptr destination, const void *source, size_t bytes) {
  (void)source;
  seen.copies++;
  check_reach((uintptr_t)destination, bytes, "a copy to the device");
  return CUDA_SUCCESS;
}
/* The index check's result word: INT64_MAX, clean. */
static CUresult fake_cuMemcpyDtoH(void *destination, CUdeviceptr source, size_t bytes) {
  seen.copies++;
  check_reach((uintptr_t)source, bytes, "a copy from the device");
  memset(destination, 0xff, bytes);
  if (bytes >= 8) ((unsigned char *)destination)[7] = 0x7f;
  return CUDA_SUCCESS;
}
static CUresult fake_cuMemsetD8(CUdeviceptr destination, unsigned char value, size_t count) {
  (void)value;
  seen.memsets++;
  check_reach((uintptr_t)destination, count, "a memset");
  return CUDA_SUCCESS;
}
static CUresult fake_cuMemsetD32Async(CUdeviceptr destination, unsigned value, size_t count, CUstream stream) {
  (void)value, (void)stream;
  seen.memsets++;
  check_reach((uintptr_t)destination, (unsigned __int128)count * 4, "a memset");
  return CUDA_SUCCESS;
}
static CUresult fake_cuStreamSynchronize(CUstream stream) {
  (void)stream;
  return CUDA_SUCCESS;
}
/* Entries none of the fuzzed calls has any business with (the library allocates nothing and captures
 * nothing): reaching one is a finding. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define UNEXPECTED_ENTRY(name, params)                  \
  static CUresult fake_##name params {                  \
    fail("the library called " #name);                 \
    return CUDA_ERROR_INVALID_VALUE;                    \
  }
UNEXPECTED_ENTRY(cuMemAlloc, (CUdeviceptr * pointer, size_t bytes))
UNEXPECTED_ENTRY(cuMemFree, (CUdeviceptr pointer))
UNEXPECTED_ENTRY(cuStreamCreate, (CUstream * stream, unsigned flags))
UNEXPECTED_ENTRY(cuStreamDestroy, (CUstream stream))
UNEXPECTED_ENTRY(cuStreamBeginCapture, (CUstream stream, int mode))
UNEXPECTED_ENTRY(cuStreamEndCapture, (CUstream stream, CUgraph *graph))
UNEXPECTED_ENTRY(cuGraphInstantiateWithFlags, (CUgraphExec * exec, CUgraph graph, unsigned long long flags))
UNEXPECTED_ENTRY(cuGraphLaunch, (CUgraphExec exec, CUstream stream))
UNEXPECTED_ENTRY(cuGraphExecDestroy, (CUgraphExec exec))
UNEXPECTED_ENTRY(cuGraphDestroy, (CUgraph graph))
#undef UNEXPECTED_ENTRY
#pragma GCC diagnostic pop
/* A descriptor's reach: the last element of its box of dims, with the strides between dims (dim 0 is
 * contiguous). Data types as cuda.h numbers them. */
static CUresult fake_cuTensorMapEncodeTiled(CUtensorMap *map, int data_type, unsigned rank, void *address,
                                            const uint64_t *dims, const uint64_t *strides_bytes,
                                            const unsigned *box, const unsigned *element_strides, int interleave,
                                            int swizzle, int l2_promotion, int oob_fill) {
  (void)box, (void)element_strides, (void)interleave, (void)swizzle, (void)l2_promotion, (void)oob_fill;
  static const unsigned element_bytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  seen.encodes++;
  if (data_type < 0 || data_type >= (int)(sizeof element_bytes / sizeof element_bytes[0]) || rank < 1 || rank > 5) {
    fail("a TMA descriptor of an unknown data type or rank");
  }
  unsigned __int128 reach = (unsigned __int128)dims[0] * element_bytes[data_type];
  for (unsigned d = 1; d < rank; d++) {
    if (dims[d] == 0) fail("a TMA descriptor with an empty dimension");
    reach += (unsigned __int128)(dims[d] - 1) * strides_bytes[d - 1];
  }
  check_reach((uintptr_t)address, reach, "a TMA descriptor");
  memset(map, 0, sizeof *map);
  return CUDA_SUCCESS;
}

static const aotk__driver fake_driver = {
#define FAKE_ENTRY(name, params) .name = fake_##name,
    AOTK__DRIVER_FUNCTIONS(FAKE_ENTRY)
#undef FAKE_ENTRY
};

/* ---- building a call ---------------------------------------------------------------------------- */

enum { T_Q, T_K, T_V, T_OUT, T_LSE, T_DOUT, T_DQ, T_DK, T_DV, T_CU_Q, T_CU_K, T_ALIBI, T_SINKS, T_DSINKS, T_RNG,
       T_MASK, T_IDX, T_CNT, TENSOR_SLOTS };

static void *region(int slot) { return (void *)(REGION_BASE + (uintptr_t)slot * REGION_STRIDE); }

static aotk_tensor make(int slot, aotk_dtype dtype, int rank, const int64_t *shape) {
  aotk_tensor t;
  memset(&t, 0, sizeof t);
  t.data = region(slot);
  t.dtype = dtype;
  t.rank = rank;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; d--) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d] > 0 ? shape[d] : 1;
  }
  return t;
}

/* One edit of a tensor: a shape or stride entry, the rank, the dtype, the pointer, or dropping it. */
static void edit_tensor(reader *r, aotk_tensor *t, aotk_tensor *const *all, int count) {
  switch (take(r, 1) % 9) {
    case 0:
      t->shape[take(r, 1) % AOTK_TENSOR_MAX_RANK] = take_size(r);
      break;
    case 1:
      t->strides[take(r, 1) % AOTK_TENSOR_MAX_RANK] = take_size(r);
      break;
    case 2:
      t->rank = (int32_t)take_range(r, -1, AOTK_TENSOR_MAX_RANK + 1);
      break;
    case 3:
      t->dtype = (aotk_dtype)take_range(r, -1, 8);
      break;
    case 4:
      t->data = NULL;
      break;
    case 5:
      t->data = (void *)((uintptr_t)t->data + (uintptr_t)take_range(r, -16, 16));
      break;
    case 6:
      t->data = all[take(r, 1) % (unsigned)count]->data;
      break;
    case 7: { /* a stride times a factor: padded rows, or overlapping ones */
      int d = (int)(take(r, 1) % AOTK_TENSOR_MAX_RANK);
      t->strides[d] = (int64_t)((uint64_t)t->strides[d] * (uint64_t)take_range(r, 0, 4));
      break;
    }
    default:
      *t = *all[take(r, 1) % (unsigned)count];
      break;
  }
}

static const int head_dims[] = {32, 64, 96, 128, 192, 256, 40, 80, 16, 512};

static aotk_dtype take_dtype(reader *r) { return take(r, 1) % 2 ? AOTK_DTYPE_BFLOAT16 : AOTK_DTYPE_FLOAT16; }

static aotk_attn_params attn_problem(reader *r, bool backward) {
  aotk_attn_params p = AOTK_ATTN_PARAMS_INIT;
  const aotk_dtype dtype = take_dtype(r);
  const int64_t batch = take_range(r, 1, 4), sq = take_range(r, 1, 300), sk = take_range(r, 1, 300);
  const int64_t hk = take_range(r, 1, 4), hq = hk * take_range(r, 1, 4);
  const int64_t dqk = head_dims[take(r, 1) % 10];
  const int64_t dv = take(r, 1) % 4 == 0 ? head_dims[take(r, 1) % 10] : dqk;
  const unsigned features = (unsigned)take(r, 2);
  const bool varlen = features & 1;
  if (varlen) {
    const int64_t total_q = batch * sq, total_k = batch * sk;
    p.q = make(T_Q, dtype, 3, (int64_t[]){total_q, hq, dqk});
    p.k = make(T_K, dtype, 3, (int64_t[]){total_k, hk, dqk});
    p.v = make(T_V, dtype, 3, (int64_t[]){total_k, hk, dv});
    p.out = make(T_OUT, dtype, 3, (int64_t[]){total_q, hq, dv});
    p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 2, (int64_t[]){hq, total_q});
    p.cu_seqlens_q = make(T_CU_Q, AOTK_DTYPE_INT32, 1, (int64_t[]){batch + 1});
    p.cu_seqlens_k = make(T_CU_K, AOTK_DTYPE_INT32, 1, (int64_t[]){batch + 1});
    p.max_seqlen_q = (int32_t)sq;
    p.max_seqlen_k = (int32_t)sk;
  } else {
    p.q = make(T_Q, dtype, 4, (int64_t[]){batch, sq, hq, dqk});
    p.k = make(T_K, dtype, 4, (int64_t[]){batch, sk, hk, dqk});
    p.v = make(T_V, dtype, 4, (int64_t[]){batch, sk, hk, dv});
    p.out = make(T_OUT, dtype, 4, (int64_t[]){batch, sq, hq, dv});
    p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 3, (int64_t[]){batch, hq, sq});
  }
  if (features & 2) p.lse.data = NULL;
  p.causal = (features >> 2) & 1;
  p.causal_align = (int32_t)((features >> 3) & 1);
  if (features & 16) {
    p.window_left = (int32_t)take_range(r, -1, 300);
    p.window_right = (int32_t)take_range(r, -1, 300);
  }
  if (features & 32) p.softcap = take(r, 1) % 2 ? 30.0f : take_float(r);
  if (features & 64) p.alibi_slopes = make(T_ALIBI, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){hq});
  if (features & 128) p.sinks = make(T_SINKS, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){hq});
  if (features & 256) {
    p.dropout_p = take(r, 1) % 2 ? 0.1f : take_float(r);
    p.rng_state = make(T_RNG, AOTK_DTYPE_INT64, 1, (int64_t[]){2});
  }
  if (features & 512) p.softmax_scale = take_float(r);
  if (backward) {
    p.dout = p.out;
    p.dout.data = region(T_DOUT);
    p.dq = p.q;
    p.dq.data = region(T_DQ);
    p.dk = p.k;
    p.dk.data = region(T_DK);
    p.dv = p.v;
    p.dv.data = region(T_DV);
    p.deterministic = (features >> 10) & 1;
    if ((features & 2048) && p.sinks.data != NULL) p.dsinks = make(T_DSINKS, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){hq});
  }
  if ((features & 4096) && p.dropout_p > 0.0f) {
    p.dropout_mask = make(T_MASK, AOTK_DTYPE_UINT8, 4, (int64_t[]){batch, hq, sq, sk});
  }
  return p;
}

static aotk_sel_params sel_problem(reader *r, bool backward) {
  aotk_sel_params p = AOTK_SEL_PARAMS_INIT;
  static const int64_t dims[][2] = {{64, 64}, {128, 128}, {192, 128}, {96, 96}};
  const aotk_dtype dtype = take_dtype(r);
  const int64_t total_q = take_range(r, 1, 5000), total_k = take_range(r, 1, 5000);
  const int64_t hk = take_range(r, 1, 4), hq = hk * take_range(r, 1, 64), slots = take_range(r, 1, 40);
  const int64_t *d = dims[take(r, 1) % 4];
  const unsigned features = (unsigned)take(r, 1);
  p.q = make(T_Q, dtype, 3, (int64_t[]){total_q, hq, d[0]});
  p.k = make(T_K, dtype, 3, (int64_t[]){total_k, hk, d[0]});
  p.v = make(T_V, dtype, 3, (int64_t[]){total_k, hk, d[1]});
  p.out = make(T_OUT, dtype, 3, (int64_t[]){total_q, hq, d[1]});
  p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 2, (int64_t[]){total_q, hq});
  if ((features & 1) && !backward) p.lse.data = NULL;
  p.block_size = (int32_t)(32 << (take(r, 1) % 3));
  p.block_idx = make(T_IDX, AOTK_DTYPE_INT32, 3, (int64_t[]){total_q, hk, slots});
  if (features & 2) p.block_cnt = make(T_CNT, AOTK_DTYPE_INT32, 2, (int64_t[]){total_q, hk});
  if (features & 4) {
    const int64_t seqs = take_range(r, 1, 8);
    p.cu_seqlens_q = make(T_CU_Q, AOTK_DTYPE_INT32, 1, (int64_t[]){seqs + 1});
    p.cu_seqlens_k = make(T_CU_K, AOTK_DTYPE_INT32, 1, (int64_t[]){seqs + 1});
    p.max_seqlen_k = (int32_t)take_range(r, 1, total_k);
  }
  if (features & 8) p.softmax_scale = take_float(r);
  if (backward) {
    p.dout = p.out;
    p.dout.data = region(T_DOUT);
    p.dq = p.q;
    p.dq.data = region(T_DQ);
    p.dk = p.k;
    p.dk.data = region(T_DK);
    p.dv = p.v;
    p.dv.data = region(T_DV);
  }
  return p;
}

/* The spans of every tensor field of a params struct (the fields each call reads, as the header lists
 * them; the selection struct names a subset). */
static void attn_spans(const aotk_attn_params *p) {
  const aotk_tensor *t[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->dout, &p->dq, &p->dk, &p->dv,
                            &p->cu_seqlens_q, &p->cu_seqlens_k, &p->alibi_slopes, &p->sinks, &p->dsinks,
                            &p->rng_state, &p->dropout_mask};
  static const char *const names[] = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv", "cu_seqlens_q",
                                      "cu_seqlens_k", "alibi_slopes", "sinks", "dsinks", "rng_state",
                                      "dropout_mask"};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) add_tensor_span(t[i], names[i]);
}

static void sel_spans(const aotk_sel_params *p) {
  const aotk_tensor *t[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->cu_seqlens_q, &p->cu_seqlens_k,
                            &p->block_idx, &p->block_cnt, &p->dout, &p->dq, &p->dk, &p->dv};
  static const char *const names[] = {"q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_k", "block_idx",
                                      "block_cnt", "dout", "dq", "dk", "dv"};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) add_tensor_span(t[i], names[i]);
}

/* Edits: a tensor, a scalar, struct_size. */
static void edit_attn(reader *r, aotk_attn_params *p) {
  aotk_tensor *const all[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->dout, &p->dq, &p->dk, &p->dv,
                              &p->cu_seqlens_q, &p->cu_seqlens_k, &p->alibi_slopes, &p->sinks, &p->dsinks,
                              &p->rng_state, &p->dropout_mask};
  const int count = (int)(sizeof all / sizeof all[0]);
  switch (take(r, 1) % 6) {
    case 0:
    case 1:
      edit_tensor(r, all[take(r, 1) % (unsigned)count], all, count);
      break;
    case 2: {
      int32_t *ints[] = {&p->causal, &p->deterministic, &p->max_seqlen_q, &p->max_seqlen_k, &p->window_left,
                         &p->window_right, &p->causal_align};
      *ints[take(r, 1) % 7] = (int32_t)take_size(r);
      break;
    }
    case 3: {
      float *floats[] = {&p->softmax_scale, &p->softcap, &p->dropout_p};
      *floats[take(r, 1) % 3] = take_float(r);
      break;
    }
    case 4:
      p->struct_size = take(r, 1) % 2 ? (size_t)take_range(r, 0, sizeof *p + 8) : (size_t)take(r, 8);
      break;
    default:
      p->struct_size = offsetof(aotk_attn_params, cu_seqlens_q); /* a 0.1 caller */
      break;
  }
}

static void edit_sel(reader *r, aotk_sel_params *p) {
  aotk_tensor *const all[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->cu_seqlens_q, &p->cu_seqlens_k,
                              &p->block_idx, &p->block_cnt, &p->dout, &p->dq, &p->dk, &p->dv};
  const int count = (int)(sizeof all / sizeof all[0]);
  switch (take(r, 1) % 5) {
    case 0:
    case 1:
      edit_tensor(r, all[take(r, 1) % (unsigned)count], all, count);
      break;
    case 2:
      *(take(r, 1) % 2 ? &p->max_seqlen_k : &p->block_size) = (int32_t)take_size(r);
      break;
    case 3:
      p->softmax_scale = take_float(r);
      break;
    default:
      p->struct_size = take(r, 1) % 2 ? (size_t)take_range(r, 0, sizeof *p + 8) : (size_t)take(r, 8);
      break;
  }
}

/* ---- one input ---------------------------------------------------------------------------------- */

enum { OP_ATTN_FWD, OP_ATTN_BWD, OP_QUERY, OP_SEL_FWD, OP_SEL_BWD, OP_SEL_QUERY, OP_SEL_CHECK, OPS };

/* This thread's calls that the library accepted, and that launched kernels. */
static _Thread_local long accepted_calls, launching_calls;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  aotk__driver_set_for_testing(&fake_driver);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader in = {data, size};
  reader *r = &in;
  memset(&seen, 0, sizeof seen);
  current_device = size > 0 ? data[size - 1] % FAKE_DEVICES : 0; /* shares the last byte with the decoder */
  const int op = (int)(take(r, 1) % OPS);
  const int edits = (int)(take(r, 1) % 8);
  const aotk_stream stream = take(r, 1) % 4 == 0 ? (aotk_stream)(uintptr_t)0x57 : NULL;
  /* The workspace: enough for most problems, or a decoded size; 16-byte aligned or not. */
  uintptr_t workspace = REGION_BASE + (uintptr_t)TENSOR_SLOTS * REGION_STRIDE;
  size_t workspace_bytes = (size_t)1 << 36;
  switch (take(r, 1) % 4) {
    case 0:
      workspace_bytes = (size_t)take_size(r);
      break;
    case 1:
      workspace += (uintptr_t)take_range(r, 1, 15);
      break;
    case 2:
      workspace = 0;
      break;
  }
  aotk_status status;
  if (op <= OP_QUERY) {
    const bool backward = op == OP_ATTN_BWD || (op == OP_QUERY && take(r, 1) % 2);
    aotk_attn_params p = attn_problem(r, backward);
    for (int i = 0; i < edits; i++) edit_attn(r, &p);
    attn_spans(&p);
    add_span(workspace, workspace_bytes, "workspace");
    if (op == OP_ATTN_FWD) {
      status = aotk_attn_fwd(&p, stream);
    } else if (op == OP_ATTN_BWD) {
      status = aotk_attn_bwd(&p, (void *)workspace, workspace_bytes, stream);
    } else {
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      status = aotk_query(backward ? AOTK_OP_ATTN_BWD : AOTK_OP_ATTN_FWD, &p, &info);
      if (seen.launches || seen.memsets || seen.copies || seen.encodes) fail("a query reached the device");
    }
  } else {
    const bool backward = op == OP_SEL_BWD || (op == OP_SEL_QUERY && take(r, 1) % 2);
    aotk_sel_params p = sel_problem(r, backward);
    for (int i = 0; i < edits; i++) edit_sel(r, &p);
    sel_spans(&p);
    add_span(workspace, workspace_bytes, "workspace");
    if (op == OP_SEL_FWD) {
      status = aotk_sel_fwd(&p, stream);
    } else if (op == OP_SEL_BWD) {
      status = aotk_sel_bwd(&p, (void *)workspace, workspace_bytes, stream);
    } else if (op == OP_SEL_QUERY) {
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      status = aotk_sel_query(backward ? AOTK_OP_SEL_BWD : AOTK_OP_SEL_FWD, &p, &info);
      if (seen.launches || seen.memsets || seen.copies || seen.encodes) fail("a query reached the device");
    } else {
      status = aotk_sel_check_indices(&p, (void *)workspace, workspace_bytes, stream);
    }
  }
  if (status != AOTK_OK && (seen.launches || seen.memsets || seen.copies || seen.encodes)) {
    fprintf(stderr, "fuzz_api: %s (%s), after %d launches, %d memsets, %d copies, %d descriptors\n",
            aotk_status_name(status), aotk_last_error(), seen.launches, seen.memsets, seen.copies, seen.encodes);
    fail("a refused call reached the driver");
  }
  if (status != AOTK_OK && aotk_last_error()[0] == '\0') fail("a refusal without a message");
  accepted_calls += status == AOTK_OK;
  launching_calls += seen.launches > 0;
  return 0;
}

#ifdef AOTK_FUZZ_THREADS_MAIN
/* The stress build (tests/CMakeLists.txt: stress_api, under ThreadSanitizer): the same calls with the
 * same checks from many threads at once, each decoding its own random inputs, the library's first use
 * included (every thread starts at once, before any kernel is loaded).
 *   stress_api [threads] [seconds] */
#include <pthread.h>
#include <time.h>

static double stress_seconds;
static pthread_barrier_t stress_start;
static pthread_mutex_t stress_totals_lock = PTHREAD_MUTEX_INITIALIZER;
static long stress_totals[3]; /* calls, accepted, launching */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *stress_thread(void *argument) {
  uint64_t state = 0x9e3779b97f4a7c15ull * (uint64_t)(uintptr_t)argument + 1;
  uint8_t input[160];
  long calls = 0;
  pthread_barrier_wait(&stress_start);
  const double end = now() + stress_seconds;
  while (now() < end) {
    for (size_t i = 0; i < sizeof input; i++) { /* xorshift64 */
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      input[i] = (uint8_t)state;
    }
    LLVMFuzzerTestOneInput(input, 16 + (size_t)(state % (sizeof input - 16)));
    calls++;
  }
  pthread_mutex_lock(&stress_totals_lock);
  stress_totals[0] += calls, stress_totals[1] += accepted_calls, stress_totals[2] += launching_calls;
  pthread_mutex_unlock(&stress_totals_lock);
  return NULL;
}

int main(int argc, char **argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 8;
  stress_seconds = argc > 2 ? atof(argv[2]) : 10.0;
  if (threads < 1 || threads > 256 || !(stress_seconds > 0)) {
    fprintf(stderr, "usage: %s [threads 1..256] [seconds]\n", argv[0]);
    return 2;
  }
  LLVMFuzzerInitialize(&argc, &argv);
  pthread_t ids[256];
  pthread_barrier_init(&stress_start, NULL, (unsigned)threads);
  for (int i = 0; i < threads; i++) {
    if (pthread_create(&ids[i], NULL, stress_thread, (void *)(uintptr_t)(i + 1)) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      return 1;
    }
  }
  for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
  printf("%ld calls from %d threads in %.0f s (%ld accepted, %ld of them launching kernels), every check held\n",
         stress_totals[0], threads, stress_seconds, stress_totals[1], stress_totals[2]);
  /* Accepted calls that launch: the checks above did run (a decoder that only made refusals would not
   * test much). */
  return stress_totals[2] > 0 ? 0 : 1;
}
#endif
