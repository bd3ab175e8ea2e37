/* The fake driver: see api_fake_driver.h. */
#include "api_fake_driver.h"

/* The record every file of a test binary writes its checks into (tests/aotk_test_harness.h). */
struct aotk_test_state aotk_test_state;

static const char *const driver_function_names[] = {
#define DRIVER_FUNCTION_NAME(name, params) #name,
    AOTK__DRIVER_FUNCTIONS(DRIVER_FUNCTION_NAME)
#undef DRIVER_FUNCTION_NAME
};

const struct kernel_signature kernel_signatures[KERNEL_COUNT] = {
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
     * then O's descriptor and num_tiles. */
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
     * name attn_decode: the driver finds that name first and hands out KERNEL_ATTN_DECODE for all four;
     * the row (the query's name, the block and shared memory of the launch) tells them apart. */
    {"attn_decode", AOTK__FAMILY_ATTN_DECODE_PAGED, ATTN_DECODE_KINDS HIDDEN_KINDS},
    {"attn_decode", AOTK__FAMILY_ATTN_DECODE_PAGED32, ATTN_DECODE_KINDS HIDDEN_KINDS},
    {"attn_decode", AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS, ATTN_DECODE_KINDS HIDDEN_KINDS},
    /* The Gluon dQ pass (kernels/attn_bwd_dq_hopper.py): attn_bwd_dq's parameters, then descriptors of Q, K,
     * V and dO. */
    {"attn_bwd_dq_hopper", AOTK__FAMILY_ATTN_BWD_DQ_HOPPER, ATTN_BWD_DQ_KINDS "tttt" HIDDEN_KINDS},
    /* The paged prefill on sm_90 (kernels/attn_fwd_hopper.py): the Gluon forward's parameters, then the
     * block table, lengths, left padding, the table's row stride and log2 of the page size. */
    {"attn_fwd_hopper_paged", AOTK__FAMILY_ATTN_FWD_HOPPER_PAGED, ATTN_FWD_HOPPER_PAGED_KINDS HIDDEN_KINDS},
    /* The Gluon forward drawing dropout in its consumers: the same parameters. */
    {"attn_fwd_hopper_dropout", AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT, ATTN_FWD_HOPPER_KINDS HIDDEN_KINDS},
    /* The Gluon dK/dV passes drawing dropout in their consumers: the parameters of their plain forms. */
    {"attn_bwd_dkdv_hopper_dropout", AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER_DROPOUT, ATTN_BWD_DKDV_KINDS "tttt" HIDDEN_KINDS},
    {"attn_bwd_fused_hopper_dropout", AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER_DROPOUT,
     ATTN_BWD_DKDV_KINDS "ttttt" HIDDEN_KINDS},
};
_Static_assert((int)LAUNCH_PARAM_COUNT == sizeof ATTN_FWD_KINDS HIDDEN_KINDS - 1, "forward parameter list");
_Static_assert((int)TMA_PARAM_COUNT ==
                   sizeof ATTN_FWD_TMA_KINDS HIDDEN_KINDS - 1 + TMA_DESCRIPTORS * (TMA_DESC_SLOTS - 1),
               "TMA forward parameter list");
_Static_assert((int)HOPPER_PARAM_COUNT ==
                   sizeof ATTN_FWD_HOPPER_KINDS HIDDEN_KINDS - 1 + (TMA_DESCRIPTORS + 1) * (TMA_DESC_SLOTS - 1),
               "warp-specialized forward parameter list");
_Static_assert((int)HOPPER_PARAM_COUNT <= (int)MAX_LAUNCH_PARAMS, "room for the warp-specialized forward's list");
_Static_assert((int)PAGED_PARAM_COUNT ==
                   sizeof ATTN_FWD_HOPPER_PAGED_KINDS HIDDEN_KINDS - 1 + (TMA_DESCRIPTORS + 1) * (TMA_DESC_SLOTS - 1),
               "paged prefill parameter list");
_Static_assert((int)PAGED_PARAM_COUNT <= (int)MAX_LAUNCH_PARAMS, "room for the paged prefill's list");
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

struct fake_gpu fake;

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

uint64_t fake_map_word(const void *address, int word) {
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

void install_fake_gpu(int compute_capability, int max_shared_bytes) {
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

int total_calls(void) {
  int total = 0;
  for (int i = 0; i < DRIVER_FUNCTION_COUNT; i++) total += fake.calls[i];
  return total;
}

const char *called_functions(void) {
  static char list[512];
  list[0] = '\0';
  for (int i = 0; i < DRIVER_FUNCTION_COUNT; i++) {
    if (fake.calls[i] == 0) continue;
    size_t used = strlen(list);
    snprintf(list + used, sizeof list - used, "%s%s x%d", used ? ", " : "", driver_function_names[i], fake.calls[i]);
  }
  return list;
}

const struct given_kernel *given_kernel_of(CUfunction function) {
  for (int i = 0; i < fake.given_count; i++) {
    if ((void *)fake.given[i].kernel == (void *)function) return &fake.given[i];
  }
  return NULL;
}

int64_t arg_i64(const recorded_launch *launch, int index) {
  int64_t value;
  memcpy(&value, launch->args[index], sizeof value);
  return value;
}

int32_t arg_i32(const recorded_launch *launch, int index) {
  int32_t value;
  memcpy(&value, launch->args[index], sizeof value);
  return value;
}

float arg_f32(const recorded_launch *launch, int index) {
  float value;
  memcpy(&value, launch->args[index], sizeof value);
  return value;
}

uint64_t arg_pointer(const recorded_launch *launch, int index) {
  uint64_t value;
  memcpy(&value, launch->args[index], sizeof value);
  return value;
}
