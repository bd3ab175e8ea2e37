/*
 * A libFuzzer target over the public entry points that take parameters: aotk_attn_fwd, aotk_attn_bwd,
 * aotk_query, aotk_sel_fwd, aotk_sel_bwd, aotk_sel_query and aotk_sel_check_indices (issue 14), and
 * aotk_attn_decode, aotk_decode_query, aotk_attn_merge and aotk_merge_query (0.4).
 *
 * Each input decodes into one call. A small problem is built valid first (shapes, contiguous strides,
 * dtypes, the features a byte turns on: causal, windows, softcap, ALiBi, sinks, dropout, varlen,
 * block_cnt; for decoding a contiguous or paged cache, seqlen_q 1..16 or packed queries (cu_seqlens_q,
 * max_seqlen_q up to 5000), GQA, splits forced or chosen, appending (k_new and v_new) or not; for the
 * merge dense or packed partials of any float dtype, in place or not) and then a run of edits
 * overwrites any field with a decoded value: a shape or stride entry (small, near a power of two,
 * negative or huge), a rank, a dtype, a pointer (NULL, moved by a few bytes, another tensor's), a
 * scalar's bits (NaN and the infinities included), num_splits, max_seqlen_k, max_seqlen_q, a dense
 * decoding call repacked (or a packed one unpacked), struct_size, the workspace's size and address.
 * Nothing is dereferenced: the pointers are fake, so sizes far past any GPU's memory are fine, and the
 * library runs over a fake driver table that records what reaches it, with four devices (sm_90, sm_80,
 * sm_86 and sm_120: the cubins with TMA, the sm_80 cubins, less shared memory, the PTX), the input's
 * last byte choosing whose context is current.
 *
 * The target aborts (a finding) on
 * - a crash or a sanitizer report (the build adds AddressSanitizer and UndefinedBehaviorSanitizer);
 * - a refused call that reached the driver: a launch, a memset, a copy or a TMA descriptor for a call
 *   that then returned an error; any call reaching an entry it has no business with (allocation,
 *   streams, graphs);
 * - an accepted call that hands a kernel a pointer outside every span the caller described (each
 *   tensor's bytes as its shape, strides and dtype say, the workspace), or encodes a TMA descriptor, or
 *   sets or copies memory, reaching past one;
 * - a refusal for want of a kernel (AOTK_ERROR_KERNEL_NOT_BUILT) in a build made without a filter;
 * - for every kernel, more: the whole byte range each pointer argument can reach, worked out from the
 *   packed arguments as the kernel indexes (grid, sizes, strides, flags; the fake driver tells the
 *   table row that runs from its image, for its tiles and compiled head dims), must lie inside one span
 *   (writes inside the output's own; workspace pointers inside the workspace, its parts apart); the
 *   arguments must describe the caller's problem (the caller's pointers and strides, no size cut to
 *   int32, no 32-bit offset that wraps, a grid that covers every row and no more, the alignment the
 *   compiled variant assumes). The masks (causal, windows) are ignored: the reach checked is every row.
 *   Offsets read on the device are bounded by the header's contract: packed rows (cu_seqlens) by the
 *   packed tensor's own rows, selection's block ids by the kernels' range checks, the inverse index's
 *   list positions by its construction (each entry in at most one list of its kv head's row);
 * - a TMA descriptor that cuTensorMapEncodeTiled would refuse, or whose tensor reaches past one span; at
 *   the launch, a map this call did not encode, or one whose shape, strides, box or swizzle are not the
 *   packed and compiled ones, whose box exceeds the kernel's tile, or which describes another tensor
 *   than the kernel's pointer argument (the hardware clips boxes at the described tensor: that is all
 *   it can reach);
 * - for decoding: the appending kernel runs before the decoding kernel, which is told seqlen_new; and
 *   the call must agree with its query (the same refusal, the launches, grid and splits it announced,
 *   the launches the header counts), the query writing no byte past info->struct_size.
 *
 * `make test` runs it for AOTK_FUZZ_SECONDS (60) from the committed corpus (tests/fuzz_corpus), which a
 * longer run grows: build/tests/fuzz_api build/fuzz-corpus tests/fuzz_corpus -max_total_time=N.
 *
 * The pieces: fuzz_reach.h (the input, the fake address space, the reach primitives), the kernels' reach
 * models in fuzz_reach_attn.h, fuzz_reach_decode.h and fuzz_reach_sel.h, building a call in
 * fuzz_calls.h; here, the fake driver, one input, and main.
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

#include "fuzz_reach.h"
#include "fuzz_reach_attn.h"
#include "fuzz_reach_decode.h"
#include "fuzz_reach_sel.h"

/* The full reach of a launch: every family's kernel is modelled (above). */
static void check_launch_extent(const aotk__kernel_entry *e, unsigned grid, void **params) {
  switch (e->family) {
    case AOTK__FAMILY_ATTN_DECODE:
    case AOTK__FAMILY_ATTN_DECODE_PAGED:
    case AOTK__FAMILY_ATTN_DECODE_PAGED32:
    case AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS:
      check_decode_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_FWD_HOPPER_PAGED:
      check_paged_prefill_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_MERGE:
      check_merge_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_CACHE_APPEND:
      check_append_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_FWD:
    case AOTK__FAMILY_ATTN_FWD_TMA:
    case AOTK__FAMILY_ATTN_FWD_HOPPER:
    case AOTK__FAMILY_ATTN_FWD_HOPPER_WG3:
    case AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT:
      check_attn_fwd_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_DROPOUT_MASK:
      check_attn_dropout_mask_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_BWD_PREPROCESS:
      check_attn_preprocess_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_BWD_DKDV:
    case AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER:
    case AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER:
    case AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER_DROPOUT:
    case AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER_DROPOUT:
      check_attn_dkdv_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_BWD_DQ:
    case AOTK__FAMILY_ATTN_BWD_DQ_HOPPER:
      check_attn_dq_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_BWD_DQ_CONVERT:
      check_attn_dq_convert_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_BWD_SINK_REDUCE:
      check_attn_sink_reduce_launch(e, grid, params);
      return;
    case AOTK__FAMILY_SEL_FWD:
    case AOTK__FAMILY_SEL_BWD_DQ:
      check_sel_token_launch(e, grid, params);
      return;
    case AOTK__FAMILY_SEL_BWD_DKDV:
      check_sel_dkdv_launch(e, grid, params);
      return;
    case AOTK__FAMILY_SEL_INDEX_ZERO:
    case AOTK__FAMILY_SEL_INDEX_COUNT:
    case AOTK__FAMILY_SEL_INDEX_SCAN:
    case AOTK__FAMILY_SEL_INDEX_SCATTER:
    case AOTK__FAMILY_SEL_INDEX_ORDER:
    case AOTK__FAMILY_SEL_CHECK_INDICES:
      check_sel_helper_launch(e, grid, params);
      return;
  }
  fprintf(stderr, "fuzz_api: %s (family %d) has no model in fuzz_api.c\n", e->name, (int)e->family);
  abort();
}
#undef EXPECT

/* ---- the fake driver ---------------------------------------------------------------------------- */

#define FAKE_CONTEXT ((CUcontext)(uintptr_t)0xc0de0)
#define FAKE_LIBRARY_BASE ((uintptr_t)0x11b00000u)
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
/* Every stream the fuzzer passes belongs to the current context: the calls it makes are ones the
 * library accepts on this count (test_api_runtime covers a stream of another context). */
static CUresult fake_cuStreamGetCtx(CUstream stream, CUcontext *context) {
  (void)stream;
  return fake_cuCtxGetCurrent(context);
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
/* Which table row an image is. The rows of one .entry differ in their tiles and head dims, which the
 * launches' models need, so the fake tells them apart by the image the library loads: its length and
 * FNV-1a 64 hash, as the table records them (the library checks the same hash before it loads). The
 * images sorted by length. Images equal in both belong to rows that differ only in their dtype (the
 * appending kernel, which copies bits) or in a hint the compiler did not use (sel_fwd's group size, a
 * multiple of 16, at d=64): of those the row that assumes less (unaligned) comes first. */
typedef struct image_key {
  uint32_t bytes;
  uint64_t hash;
  int row;
} image_key;
static image_key *image_keys;
static int image_key_count;

static int compare_image_keys(const void *x, const void *y) {
  const image_key *a = x, *b = y;
  if (a->bytes != b->bytes) return a->bytes < b->bytes ? -1 : 1;
  if (a->hash != b->hash) return a->hash < b->hash ? -1 : 1;
  const int32_t aligned_a = aotk__kernel_table[a->row].aligned, aligned_b = aotk__kernel_table[b->row].aligned;
  return aligned_a != aligned_b ? aligned_a - aligned_b : a->row - b->row;
}

static void index_images(void) {
  image_keys = calloc(2 * (size_t)aotk__kernel_count + 1, sizeof *image_keys);
  if (image_keys == NULL) fail("out of memory");
  for (int row = 0; row < aotk__kernel_count; row++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[row];
    if (e->cubin.raw_bytes > 0) image_keys[image_key_count++] = (image_key){e->cubin.raw_bytes, e->cubin.hash, row};
    if (e->ptx.raw_bytes > 0) image_keys[image_key_count++] = (image_key){e->ptx.raw_bytes, e->ptx.hash, row};
  }
  qsort(image_keys, (size_t)image_key_count, sizeof *image_keys, compare_image_keys);
}

/* The library handle names the row: the hash of the image's first n bytes, walked in order of the rows'
 * lengths, matches at the loaded image's own length (never reading past it, unless the image is no
 * row's: the library checked its hash). */
static CUresult fake_cuLibraryLoadData(CUlibrary *library, const void *code, void *jit_options, void **jit_values,
                                       unsigned num_jit_options, void *library_options, void **library_values,
                                       unsigned num_library_options) {
  (void)jit_options, (void)jit_values, (void)num_jit_options;
  (void)library_options, (void)library_values, (void)num_library_options;
  const unsigned char *bytes = code;
  uint64_t hash = 0xcbf29ce484222325ull;
  size_t hashed = 0;
  for (int i = 0; i < image_key_count; i++) {
    for (; hashed < image_keys[i].bytes; hashed++) hash = (hash ^ bytes[hashed]) * 0x100000001b3ull;
    if (hash == image_keys[i].hash) {
      *library = (CUlibrary)(FAKE_LIBRARY_BASE + 16u * (uintptr_t)image_keys[i].row);
      return CUDA_SUCCESS;
    }
  }
  fail("cuLibraryLoadData of an image that is no table row's");
  return CUDA_ERROR_INVALID_VALUE;
}
/* A kernel handle names the row whose image holds it. */
static CUresult fake_cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name) {
  const uintptr_t handle = (uintptr_t)(void *)library;
  if (handle < FAKE_LIBRARY_BASE || (handle - FAKE_LIBRARY_BASE) % 16u != 0 ||
      (handle - FAKE_LIBRARY_BASE) / 16u >= (uintptr_t)aotk__kernel_count) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int row = (int)((handle - FAKE_LIBRARY_BASE) / 16u);
  if (strcmp(aotk__kernel_table[row].function_name, name) != 0) {
    fprintf(stderr, "fuzz_api: cuLibraryGetKernel(%s) from the image of %s\n", name, aotk__kernel_table[row].name);
    abort();
  }
  *kernel = (CUkernel)(FAKE_KERNEL_BASE + 16u * (uintptr_t)row);
  return CUDA_SUCCESS;
}
static CUresult fake_cuKernelSetAttribute(int attribute, int value, CUkernel kernel, CUdevice device) {
  (void)attribute, (void)value, (void)kernel, (void)device;
  return CUDA_SUCCESS;
}
static CUresult fake_cuLaunchKernel(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                    unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_bytes,
                                    CUstream stream, void **params, void **extra) {
  (void)stream;
  seen.launches++;
  const uintptr_t handle = (uintptr_t)(void *)function;
  if (handle < FAKE_KERNEL_BASE || (handle - FAKE_KERNEL_BASE) % 16u != 0 ||
      (handle - FAKE_KERNEL_BASE) / 16u >= (uintptr_t)aotk__kernel_count) {
    fail("a launch of a handle the driver never gave out");
  }
  if (extra != NULL) fail("a launch with `extra`");
  if (grid_x == 0) fail("a launch of an empty grid");
  const aotk__kernel_entry *e = &aotk__kernel_table[(handle - FAKE_KERNEL_BASE) / 16u];
  /* The models number programs in one dimension, with the row's warps and shared memory. */
  if (grid_y != 1 || grid_z != 1 || block_x != 32u * (unsigned)e->num_warps || block_y != 1 || block_z != 1 ||
      shared_bytes != (unsigned)e->shared_bytes) {
    fprintf(stderr,
            "fuzz_api: %s launched on a grid (%u, %u, %u) of blocks (%u, %u, %u) with %u bytes of shared memory\n",
            e->name, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes);
    abort();
  }
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
  check_launch_extent(e, grid_x, params);
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
 * contiguous). Data types as cuda.h numbers them. What cuTensorMapEncodeTiled refuses (its documented
 * rules: a 16-byte-aligned address, dims 1 .. 2^32, strides multiples of 16 bytes below 2^40, boxes of
 * 1 .. 256 whose inner extent is a multiple of 16 bytes and, swizzled, at most the swizzle's span) the
 * library must not ask for: it would fail a call that validation accepted. The map records which
 * encode it is, for the launch that takes it (check_descriptors). */
static CUresult fake_cuTensorMapEncodeTiled(CUtensorMap *map, int data_type, unsigned rank, void *address,
                                            const uint64_t *dims, const uint64_t *strides_bytes,
                                            const unsigned *box, const unsigned *element_strides, int interleave,
                                            int swizzle, int l2_promotion, int oob_fill) {
  (void)l2_promotion, (void)oob_fill;
  static const unsigned element_bytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  static const unsigned swizzle_bytes[] = {0, 32, 64, 128};
  seen.encodes++;
  if (data_type < 0 || data_type >= (int)(sizeof element_bytes / sizeof element_bytes[0]) || rank < 1 || rank > 5) {
    fail("a TMA descriptor of an unknown data type or rank");
  }
  const unsigned element = element_bytes[data_type];
  if ((uintptr_t)address % 16 != 0 || interleave != 0 || swizzle < 0 || swizzle > 3) {
    fail("a TMA descriptor of a misaligned address, or an interleave or swizzle TMA has not");
  }
  unsigned __int128 reach = (unsigned __int128)dims[0] * element;
  for (unsigned d = 0; d < rank; d++) {
    if (dims[d] == 0 || dims[d] > (uint64_t)1 << 32 || box[d] == 0 || box[d] > 256 || element_strides[d] == 0 ||
        element_strides[d] > 8) {
      fail("a TMA descriptor with a dimension, box or element stride that TMA refuses");
    }
    if (d == 0) continue;
    if (strides_bytes[d - 1] % 16 != 0 || strides_bytes[d - 1] >= (uint64_t)1 << 40) {
      fail("a TMA descriptor with a stride that TMA refuses (a multiple of 16 bytes below 2^40)");
    }
    reach += (unsigned __int128)(dims[d] - 1) * strides_bytes[d - 1];
  }
  if (box[0] * element % 16 != 0 || (swizzle > 0 && box[0] * element > swizzle_bytes[swizzle])) {
    fail("a TMA descriptor whose box's inner extent TMA refuses");
  }
  check_reach((uintptr_t)address, reach, "a TMA descriptor");
  if (seen.map_count == (int)(sizeof seen.maps / sizeof seen.maps[0])) fail("more TMA descriptors than one call needs");
  struct encoded_map *m = &seen.maps[seen.map_count];
  memset(m, 0, sizeof *m);
  m->address = (uintptr_t)address;
  m->element_bytes = element;
  m->rank = rank;
  m->swizzle = (unsigned)swizzle;
  for (unsigned d = 0; d < rank; d++) {
    m->dims[d] = dims[d];
    m->box[d] = box[d];
    if (d > 0) m->strides_bytes[d - 1] = strides_bytes[d - 1];
  }
  memset(map, 0, sizeof *map);
  map->opaque[0] = FAKE_MAP_MAGIC;
  map->opaque[1] = (uint64_t)seen.map_count++;
  return CUDA_SUCCESS;
}

static const aotk__driver fake_driver = {
#define FAKE_ENTRY(name, params) .name = fake_##name,
    AOTK__DRIVER_FUNCTIONS(FAKE_ENTRY)
#undef FAKE_ENTRY
};

#include "fuzz_calls.h"

/* ---- one input ---------------------------------------------------------------------------------- */

/* The first seven are chosen by op bytes 0..223 as before 0.4 (so the committed corpus keeps its
 * meaning), the decoding and merge calls by 224..255. */
enum { OP_ATTN_FWD, OP_ATTN_BWD, OP_QUERY, OP_SEL_FWD, OP_SEL_BWD, OP_SEL_QUERY, OP_SEL_CHECK, OP_DECODE,
       OP_DECODE_QUERY, OP_MERGE, OP_MERGE_QUERY };

/* This thread's calls that the library accepted, and that launched kernels. */
static _Thread_local long accepted_calls, launching_calls;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  index_images();
  aotk__driver_set_for_testing(&fake_driver);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader in = {data, size};
  reader *r = &in;
  memset(&seen, 0, sizeof seen);
  current_device = size > 0 ? data[size - 1] % FAKE_DEVICES : 0; /* shares the last byte with the decoder */
  const unsigned op_byte = (unsigned)take(r, 1);
  const int op = op_byte < 224 ? (int)(op_byte % 7) : OP_DECODE + (int)((op_byte - 224) % 4);
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
    /* What the library reads: the caller's first struct_size bytes, the rest AOTK_ATTN_PARAMS_INIT's (a
     * 0.1 caller's struct ends before cu_seqlens_q). Only those bytes describe memory. */
    aotk_attn_params view = AOTK_ATTN_PARAMS_INIT;
    memcpy(&view, &p, p.struct_size < sizeof view ? p.struct_size : sizeof view);
    attn_spans(&view);
    seen.attn = &view;
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
  } else if (op <= OP_SEL_CHECK) {
    const bool backward = op == OP_SEL_BWD || (op == OP_SEL_QUERY && take(r, 1) % 2);
    aotk_sel_params p = sel_problem(r, backward);
    for (int i = 0; i < edits; i++) edit_sel(r, &p);
    sel_spans(&p); /* the library reads sizeof(aotk_sel_params) bytes, refusing a smaller struct_size */
    seen.sel = &p;
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
  } else if (op <= OP_DECODE_QUERY) {
    aotk_decode_params p = decode_problem(r);
    for (int i = 0; i < edits; i++) edit_decode(r, &p);
    decode_spans(&p);
    seen.decode = &p;
    if (op == OP_DECODE) {
      seen.announced_info = (aotk_kernel_info)AOTK_KERNEL_INFO_INIT;
      const aotk_status asked = aotk_decode_query(AOTK_OP_DECODE, &p, &seen.announced_info);
      if (seen.launches || seen.memsets || seen.copies || seen.encodes) fail("a query reached the device");
      seen.announced = asked == AOTK_OK;
      if (seen.announced && seen.announced_info.workspace_bytes > 0) { /* exactly what it asked for, or a byte less */
        const size_t asked_bytes = seen.announced_info.workspace_bytes;
        const unsigned choice = (unsigned)take(r, 1) % 4;
        workspace_bytes = choice == 0 ? asked_bytes : choice == 1 ? asked_bytes - 1 : workspace_bytes;
      }
      add_span(workspace, workspace_bytes, "workspace");
      status = aotk_attn_decode(&p, (void *)workspace, workspace_bytes, stream);
      check_agrees_with_query(asked, status, true);
      /* The launches the header counts: the decoding kernel, the merge after a split, the appending
       * kernel with k_new and v_new (announced by AOTK_FEATURE_APPEND_KV) unless the decoding kernel
       * appended itself. */
      const bool append = p.k_new.data != NULL, separate = append && !seen.decode_fused_append;
      if (status == AOTK_OK &&
          (seen.launches != 1 + (seen.announced_info.num_splits > 1) + separate || seen.decode_launches != 1 ||
           seen.append_launches != separate || seen.announced_info.launches != seen.launches ||
           ((seen.announced_info.features & AOTK_FEATURE_APPEND_KV) != 0) != append)) {
        fprintf(stderr, "fuzz_api: %d launches (%d decoding, %d appending), %d splits, features %#x, k_new %p\n",
                seen.launches, seen.decode_launches, seen.append_launches, (int)seen.announced_info.num_splits,
                (unsigned)seen.announced_info.features, p.k_new.data);
        fail("a decoding call's launches are not the header's");
      }
    } else {
      const aotk_op asked_op = take(r, 1) % 8 == 7 ? (aotk_op)take_range(r, -1, 8) : AOTK_OP_DECODE;
      size_t info_bytes = 0;
      aotk_kernel_info *info = take_info(r, &info_bytes);
      status = aotk_decode_query(asked_op, &p, info);
      if (seen.launches || seen.memsets || seen.copies || seen.encodes) fail("a query reached the device");
      if (info != NULL) check_info_tail(info, info_bytes);
      free(info);
    }
  } else {
    aotk_merge_params p = merge_problem(r);
    for (int i = 0; i < edits; i++) edit_merge(r, &p);
    merge_spans(&p); /* no workspace: the merge takes none */
    seen.merge = &p;
    if (op == OP_MERGE) {
      seen.announced_info = (aotk_kernel_info)AOTK_KERNEL_INFO_INIT;
      const aotk_status asked = aotk_merge_query(AOTK_OP_MERGE, &p, &seen.announced_info);
      if (seen.launches || seen.memsets || seen.copies || seen.encodes) fail("a query reached the device");
      seen.announced = asked == AOTK_OK;
      status = aotk_attn_merge(&p, stream);
      check_agrees_with_query(asked, status, false);
    } else {
      const aotk_op asked_op = take(r, 1) % 8 == 7 ? (aotk_op)take_range(r, -1, 8) : AOTK_OP_MERGE;
      size_t info_bytes = 0;
      aotk_kernel_info *info = take_info(r, &info_bytes);
      status = aotk_merge_query(asked_op, &p, info);
      if (seen.launches || seen.memsets || seen.copies || seen.encodes) fail("a query reached the device");
      if (info != NULL) check_info_tail(info, info_bytes);
      free(info);
    }
  }
  if (status != AOTK_OK && (seen.launches || seen.memsets || seen.copies || seen.encodes)) {
    fprintf(stderr, "fuzz_api: %s (%s), after %d launches, %d memsets, %d copies, %d descriptors\n",
            aotk_status_name(status), aotk_last_error(), seen.launches, seen.memsets, seen.copies, seen.encodes);
    fail("a refused call reached the driver");
  }
  if (status != AOTK_OK && aotk_last_error()[0] == '\0') fail("a refusal without a message");
  /* A build with no filter has every kernel the catalog lists: a call that passed validation and finds
   * none is a dispatch or catalog mistake (the split decoding's merge did, asking for a dtype). */
  if (status == AOTK_ERROR_KERNEL_NOT_BUILT && aotk__kernel_filter[0] == '\0') {
    fprintf(stderr, "fuzz_api: %s\n", aotk_last_error());
    fail("a refusal for want of a kernel, in a build with every kernel");
  }
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
