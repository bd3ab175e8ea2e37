/*
 * The CUDA driver, reached through one table of function pointers (NCCL's cudawrap): filled by
 * dlopen("libcuda.so.1") + cuGetProcAddress on first use, so nothing links against libcuda and the
 * library and its CPU tests work on machines with no GPU. Tests replace the table to inject faults
 * (no device, an old GPU, a failing launch) on machines with no GPU.
 */
#ifndef AOTK_DRIVER_H
#define AOTK_DRIVER_H

#include "aotk.h"
#include "aotk_cuda_abi.h"

/* X(name, return, parameters). Every entry is required. */
#define AOTK__DRIVER_FUNCTIONS(X)                                                                        \
  X(cuInit, (unsigned flags))                                                                           \
  X(cuDriverGetVersion, (int *version))                                                                 \
  X(cuGetErrorName, (CUresult error, const char **name))                                                \
  X(cuGetErrorString, (CUresult error, const char **text))                                              \
  X(cuDeviceGet, (CUdevice * device, int ordinal))                                                      \
  X(cuDeviceGetCount, (int *count))                                                                     \
  X(cuDeviceGetAttribute, (int *value, int attribute, CUdevice device))                                 \
  X(cuDevicePrimaryCtxRetain, (CUcontext * context, CUdevice device))                                   \
  X(cuDevicePrimaryCtxRelease, (CUdevice device))                                                       \
  X(cuCtxGetCurrent, (CUcontext * context))                                                             \
  X(cuCtxSetCurrent, (CUcontext context))                                                               \
  X(cuCtxGetDevice, (CUdevice * device))                                                                \
  X(cuCtxSynchronize, (void))                                                                           \
  X(cuLibraryLoadData, (CUlibrary * library, const void *code, void *jit_options, void **jit_values,    \
                        unsigned num_jit_options, void *library_options, void **library_values,         \
                        unsigned num_library_options))                                                  \
  X(cuLibraryGetKernel, (CUkernel * kernel, CUlibrary library, const char *name))                       \
  X(cuKernelSetAttribute, (int attribute, int value, CUkernel kernel, CUdevice device))                 \
  X(cuLaunchKernel, (CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,            \
                     unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_bytes,       \
                     CUstream stream, void **params, void **extra))                                     \
  X(cuMemAlloc, (CUdeviceptr * pointer, size_t bytes))                                                  \
  X(cuMemFree, (CUdeviceptr pointer))                                                                   \
  X(cuMemcpyHtoD, (CUdeviceptr destination, const void *source, size_t bytes))                          \
  X(cuMemcpyDtoH, (void *destination, CUdeviceptr source, size_t bytes))                                \
  X(cuMemsetD8, (CUdeviceptr destination, unsigned char value, size_t count))                           \
  X(cuMemsetD32Async, (CUdeviceptr destination, unsigned value, size_t count, CUstream stream))         \
  X(cuStreamCreate, (CUstream * stream, unsigned flags))                                                \
  X(cuStreamDestroy, (CUstream stream))                                                                 \
  X(cuStreamSynchronize, (CUstream stream))                                                             \
  X(cuStreamGetCtx, (CUstream stream, CUcontext * context))                                             \
  X(cuStreamBeginCapture, (CUstream stream, int mode))                                                  \
  X(cuStreamEndCapture, (CUstream stream, CUgraph * graph))                                             \
  X(cuGraphInstantiateWithFlags, (CUgraphExec * exec, CUgraph graph, unsigned long long flags))                  \
  X(cuGraphLaunch, (CUgraphExec exec, CUstream stream))                                                 \
  X(cuGraphExecDestroy, (CUgraphExec exec))                                                             \
  X(cuGraphDestroy, (CUgraph graph))                                                                    \
  X(cuTensorMapEncodeTiled, (CUtensorMap * map, int data_type, unsigned rank, void *address,              \
                             const uint64_t *dims, const uint64_t *strides_bytes, const unsigned *box,   \
                             const unsigned *element_strides, int interleave, int swizzle, int l2_promotion, \
                             int oob_fill))

typedef struct aotk__driver {
#define AOTK__DRIVER_MEMBER(name, params) CUresult(*name) params;
  AOTK__DRIVER_FUNCTIONS(AOTK__DRIVER_MEMBER)
#undef AOTK__DRIVER_MEMBER
} aotk__driver;

/* The driver table, loaded and cuInit-ed once per process. On failure returns AOTK_ERROR_NO_DRIVER,
 * AOTK_ERROR_NO_DEVICE or AOTK_ERROR_CUDA with the thread's message set, and *driver is NULL. */
aotk_status aotk__driver_get(const aotk__driver **driver);

/* Tests only: make aotk__driver_get() return `fake` (NULL: the real driver again), and reset the
 * per-device cache. `fake` must outlive its use. */
void aotk__driver_set_for_testing(const aotk__driver *fake);

/* Turns a failed CUresult into AOTK_ERROR_CUDA (or a more precise status), recording the raw result and
 * a message "<what>: CUDA_ERROR_NAME (description)". */
aotk_status aotk__cuda_failure(const aotk__driver *driver, CUresult result, const char *what);

#define AOTK__CU_TRY(driver, call, what)                                                          \
  do {                                                                                            \
    CUresult aotk__cu_result = (call);                                                            \
    if (aotk__cu_result != CUDA_SUCCESS) return aotk__cuda_failure((driver), aotk__cu_result, (what)); \
  } while (0)

/* The device of the context current on this thread, with its properties cached per device.
 * AOTK_ERROR_NO_CONTEXT when none is current. */
typedef struct aotk__device_info {
  CUcontext context; /* the current context the call is planned for */
  CUdevice device;
  int compute_capability; /* major * 10 + minor */
  int max_shared_bytes;   /* opt-in maximum per block */
  int multiprocessors;
} aotk__device_info;
aotk_status aotk__current_device(const aotk__driver *driver, aotk__device_info *info);

/* Refuses, with AOTK_ERROR_NO_CONTEXT, a `stream` of another context than `device`'s (the one current
 * when the call was planned); NULL and the legacy and per-thread default streams belong to the current
 * context and pass without a driver call. A call that launches checks before it loads or touches
 * anything: see the definition for why. */
aotk_status aotk__check_stream_context(const aotk__driver *driver, const aotk__device_info *device,
                                       aotk_stream stream);

#endif /* AOTK_DRIVER_H */
