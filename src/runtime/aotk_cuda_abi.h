/*
 * The slice of the CUDA driver API aotk uses, declared here so that the library builds without
 * cuda.h and links without libcuda: the driver is reached at run time through aotk_driver.c.
 * Values are the driver ABI's and never change; tests/test_cuda_abi.c checks them against cuda.h
 * where a toolkit is installed.
 */
#ifndef AOTK_CUDA_ABI_H
#define AOTK_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUfunc_st *CUfunction;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_CONTEXT = 201,
};

enum {
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};

enum { CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8 };

/* Tensor maps (sm_90's TMA): an opaque 128-byte object, passed to kernels by value. */
#define AOTK__CU_TENSOR_MAP_NUM_QWORDS 16
typedef struct CUtensorMap_st {
  _Alignas(64) uint64_t opaque[AOTK__CU_TENSOR_MAP_NUM_QWORDS];
} CUtensorMap;
enum { CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6, CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9 };
enum { CU_TENSOR_MAP_INTERLEAVE_NONE = 0 };
enum { CU_TENSOR_MAP_SWIZZLE_NONE = 0, CU_TENSOR_MAP_SWIZZLE_128B = 3 };
enum { CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2 };
enum { CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0 };
enum { CU_STREAM_NON_BLOCKING = 1 };
enum { CU_STREAM_CAPTURE_MODE_GLOBAL = 0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1 };

/* cuda.h's CU_STREAM_LEGACY and CU_STREAM_PER_THREAD: the default streams, which belong to whatever
 * context is current. Prefixed because cuda.h defines them as macros, which test_cuda_abi.c could not
 * rename; it compares the values instead. */
#define AOTK__CU_STREAM_LEGACY ((CUstream)0x1)
#define AOTK__CU_STREAM_PER_THREAD ((CUstream)0x2)

/* cuGetProcAddress flags and the version the entry points are requested at: 12.0 introduced the
 * cuLibrary API aotk loads images with, so every function is taken as it was in 12.0. */
#define AOTK__CU_GET_PROC_ADDRESS_DEFAULT 0
#define AOTK__CUDA_API_VERSION 12000

#endif /* AOTK_CUDA_ABI_H */
