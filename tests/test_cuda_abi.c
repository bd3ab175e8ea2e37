/*
 * src/runtime/aotk_cuda_abi.h against a CUDA toolkit's cuda.h: aotk declares its own slice of the driver API
 * so that it builds without the toolkit, and this test is what keeps that slice honest. Built only
 * where CMake finds a cuda.h of CUDA 12.0 or newer (tests/CMakeLists.txt).
 *
 * Both headers define the same names (CUresult, CUDA_SUCCESS, ...), so aotk's header is included
 * after cuda.h with every one of its names renamed by macro to aotk_abi_<name>; both sets then meet
 * in this one translation unit, where
 * - enum values and type sizes are compared by _Static_assert (the driver ABI never changes, so a
 *   difference is a bug in aotk_cuda_abi.h) and again at run time, to print them;
 * - aotk's handle types must be the very types cuda.h declares (same struct tags), so that a user's
 *   CUstream passes to aotk without a cast;
 * - every entry of AOTK__DRIVER_FUNCTIONS is checked at run time against cuda.h's prototype of the
 *   same name. aotk_driver.h is included after the renaming is undone, so its parameter lists are
 *   read with cuda.h's types. Where aotk passes one of cuda.h's enums as an int (or a pointer to one
 *   as a void pointer), RESPELLED_DRIVER_FUNCTIONS below names the substitution, and the prototype
 *   must match cuda.h's with it and aotk's without it. These checks are run-time ones because they
 *   depend on the header's version: cuda.h maps each name to its newest variant (cuMemAlloc to
 *   cuMemAlloc_v2), while aotk asks the driver for the variant of CUDA 12.0;
 * - where a driver is installed, the entry points aotk's driver table received (cuGetProcAddress at
 *   12.0) must be the exported functions cuda.h names, which proves that mapping is the same;
 * - aotk_cuda_abi.h's text is scanned for CU* names, so that a name added to it is not silently left
 *   unchecked.
 *
 * A compile error "redeclaration of enumerator" or "conflicting types" from aotk_cuda_abi.h below
 * means that header gained a name cuda.h also has: add it to the rename, #undef and check lists.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dlopen, dlsym and dladdr in strict C11 */
#endif

#include <cuda.h>

#if !defined(CUDA_VERSION) || CUDA_VERSION < 12000
#error "test_cuda_abi needs the cuda.h of CUDA 12.0 or newer (aotk uses the cuLibrary API of 12.0)"
#endif

/* --- aotk's declarations under other names ------------------------------------------------------ */
#define CUresult aotk_abi_CUresult
#define CUdevice aotk_abi_CUdevice
#define CUdeviceptr aotk_abi_CUdeviceptr
#define CUcontext aotk_abi_CUcontext
#define CUstream aotk_abi_CUstream
#define CUlibrary aotk_abi_CUlibrary
#define CUkernel aotk_abi_CUkernel
#define CUfunction aotk_abi_CUfunction
#define CUgraph aotk_abi_CUgraph
#define CUgraphExec aotk_abi_CUgraphExec
#define CUDA_SUCCESS aotk_abi_CUDA_SUCCESS
#define CUDA_ERROR_INVALID_VALUE aotk_abi_CUDA_ERROR_INVALID_VALUE
#define CUDA_ERROR_OUT_OF_MEMORY aotk_abi_CUDA_ERROR_OUT_OF_MEMORY
#define CUDA_ERROR_NOT_INITIALIZED aotk_abi_CUDA_ERROR_NOT_INITIALIZED
#define CUDA_ERROR_NO_DEVICE aotk_abi_CUDA_ERROR_NO_DEVICE
#define CUDA_ERROR_INVALID_CONTEXT aotk_abi_CUDA_ERROR_INVALID_CONTEXT
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT aotk_abi_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR aotk_abi_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR aotk_abi_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN aotk_abi_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES aotk_abi_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
#define CU_STREAM_NON_BLOCKING aotk_abi_CU_STREAM_NON_BLOCKING
#define CU_STREAM_CAPTURE_MODE_GLOBAL aotk_abi_CU_STREAM_CAPTURE_MODE_GLOBAL
#define CU_STREAM_CAPTURE_MODE_THREAD_LOCAL aotk_abi_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
#define CUtensorMap aotk_abi_CUtensorMap
#define CUtensorMap_st aotk_abi_CUtensorMap_st
#define CU_TENSOR_MAP_DATA_TYPE_FLOAT16 aotk_abi_CU_TENSOR_MAP_DATA_TYPE_FLOAT16
#define CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 aotk_abi_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
#define CU_TENSOR_MAP_DATA_TYPE_FLOAT32 aotk_abi_CU_TENSOR_MAP_DATA_TYPE_FLOAT32
#define CU_TENSOR_MAP_INTERLEAVE_NONE aotk_abi_CU_TENSOR_MAP_INTERLEAVE_NONE
#define CU_TENSOR_MAP_SWIZZLE_NONE aotk_abi_CU_TENSOR_MAP_SWIZZLE_NONE
#define CU_TENSOR_MAP_SWIZZLE_128B aotk_abi_CU_TENSOR_MAP_SWIZZLE_128B
#define CU_TENSOR_MAP_L2_PROMOTION_L2_128B aotk_abi_CU_TENSOR_MAP_L2_PROMOTION_L2_128B
#define CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE aotk_abi_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE

#include "aotk_cuda_abi.h"

#undef CUresult
#undef CUdevice
#undef CUdeviceptr
#undef CUcontext
#undef CUstream
#undef CUlibrary
#undef CUkernel
#undef CUfunction
#undef CUgraph
#undef CUgraphExec
#undef CUDA_SUCCESS
#undef CUDA_ERROR_INVALID_VALUE
#undef CUDA_ERROR_OUT_OF_MEMORY
#undef CUDA_ERROR_NOT_INITIALIZED
#undef CUDA_ERROR_NO_DEVICE
#undef CUDA_ERROR_INVALID_CONTEXT
#undef CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
#undef CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
#undef CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
#undef CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
#undef CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
#undef CU_STREAM_NON_BLOCKING
#undef CU_STREAM_CAPTURE_MODE_GLOBAL
#undef CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
#undef CUtensorMap
#undef CUtensorMap_st
#undef CU_TENSOR_MAP_DATA_TYPE_FLOAT16
#undef CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
#undef CU_TENSOR_MAP_DATA_TYPE_FLOAT32
#undef CU_TENSOR_MAP_INTERLEAVE_NONE
#undef CU_TENSOR_MAP_SWIZZLE_NONE
#undef CU_TENSOR_MAP_SWIZZLE_128B
#undef CU_TENSOR_MAP_L2_PROMOTION_L2_128B
#undef CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE

/* aotk_cuda_abi.h is already included (its guard is set), so the driver table is declared with
 * cuda.h's types. The members take the names the arguments expand to here (cuMemAlloc_v2 for
 * cuMemAlloc); the layout, a list of function pointers, is the library's. */
#include "aotk_driver.h"

#include <dlfcn.h>
#include <string.h>

#include "aotk_test_harness.h"

/* --- the lists: everything aotk_cuda_abi.h declares ------------------------------------------- */
#define ABI_VALUES(X)                                    \
  X(CUDA_SUCCESS)                                        \
  X(CUDA_ERROR_INVALID_VALUE)                            \
  X(CUDA_ERROR_OUT_OF_MEMORY)                            \
  X(CUDA_ERROR_NOT_INITIALIZED)                          \
  X(CUDA_ERROR_NO_DEVICE)                                \
  X(CUDA_ERROR_INVALID_CONTEXT)                          \
  X(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)            \
  X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)        \
  X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)        \
  X(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) \
  X(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)     \
  X(CU_STREAM_NON_BLOCKING)                              \
  X(CU_STREAM_CAPTURE_MODE_GLOBAL)                       \
  X(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)                 \
  X(CU_TENSOR_MAP_DATA_TYPE_FLOAT16)                     \
  X(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16)                    \
  X(CU_TENSOR_MAP_DATA_TYPE_FLOAT32)                     \
  X(CU_TENSOR_MAP_INTERLEAVE_NONE)                       \
  X(CU_TENSOR_MAP_SWIZZLE_NONE)                          \
  X(CU_TENSOR_MAP_SWIZZLE_128B)                          \
  X(CU_TENSOR_MAP_L2_PROMOTION_L2_128B)                  \
  X(CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)

/* Types that must be cuda.h's own (same struct tag, or the same integer type). */
#define ABI_IDENTICAL_TYPES(X) \
  X(CUdevice)                  \
  X(CUdeviceptr)               \
  X(CUcontext)                 \
  X(CUstream)                  \
  X(CUlibrary)                 \
  X(CUkernel)                  \
  X(CUfunction)                \
  X(CUgraph)                   \
  X(CUgraphExec)

/* CUresult is an int in aotk and an enum in cuda.h: the same size and the same register, which is all
 * a return value needs. */
#define ABI_SAME_SIZE_TYPES(X) X(CUresult)

/* Structs aotk defines itself (not handles to cuda.h's opaque ones), passed to the driver by address
 * and to kernels by value: the same size, and at least the alignment the driver requires of them.
 * The alignments may differ: cuda.h raised CUtensorMap's from 64 (CUDA 12.0) to 128 bytes, while
 * cuTensorMapEncodeTiled asks for 64 and the kernels declare the parameter ".align 64". */
#define ABI_LAYOUT_TYPES(X) X(CUtensorMap, 64)

/* The struct tags behind the handle types: checked through ABI_IDENTICAL_TYPES, listed for the scan;
 * CUtensorMap_st through ABI_LAYOUT_TYPES. */
#define ABI_STRUCT_TAGS(X) \
  X(CUctx_st) X(CUstream_st) X(CUlib_st) X(CUkern_st) X(CUfunc_st) X(CUgraph_st) X(CUgraphExec_st) X(CUtensorMap_st)

#define STRINGIFY(x) #x
#define EXPANDED_NAME(x) STRINGIFY(x) /* the name after macro expansion: cuMemAlloc -> "cuMemAlloc_v2" */

#if defined(__GNUC__)
#define TYPES_COMPATIBLE(a, b) __builtin_types_compatible_p(a, b)
#define HAVE_TYPES_COMPATIBLE 1
#else
#define TYPES_COMPATIBLE(a, b) 0
#define HAVE_TYPES_COMPATIBLE 0
#endif

/* --- compile-time checks -------------------------------------------------------------------------- */
/* The size comparison of the spellings catches a name left out of the #undef list above, which would
 * otherwise compare aotk's value with itself. */
#define STATIC_SAME_VALUE(name)                                                                    \
  _Static_assert(sizeof(EXPANDED_NAME(name)) == sizeof(#name), #name " is still renamed: #undef it"); \
  _Static_assert((long long)aotk_abi_##name == (long long)name, "aotk_cuda_abi.h: " #name " differs from cuda.h");
ABI_VALUES(STATIC_SAME_VALUE)

#define STATIC_SAME_SIZE(type)                                                                     \
  _Static_assert(sizeof(EXPANDED_NAME(type)) == sizeof(#type), #type " is still renamed: #undef it"); \
  _Static_assert(sizeof(aotk_abi_##type) == sizeof(type), "aotk_cuda_abi.h: sizeof(" #type ") differs from cuda.h");
ABI_IDENTICAL_TYPES(STATIC_SAME_SIZE)
ABI_SAME_SIZE_TYPES(STATIC_SAME_SIZE)

#if HAVE_TYPES_COMPATIBLE
#define STATIC_IDENTICAL_TYPE(type) \
  _Static_assert(TYPES_COMPATIBLE(aotk_abi_##type, type), "aotk_cuda_abi.h: " #type " is not cuda.h's type");
ABI_IDENTICAL_TYPES(STATIC_IDENTICAL_TYPE)
/* The public header's stream type is what a user holds as a CUstream. */
_Static_assert(TYPES_COMPATIBLE(aotk_stream, CUstream), "aotk.h: aotk_stream is not cuda.h's CUstream");
#endif

#define STATIC_SAME_LAYOUT(type, required_alignment)                                                    \
  _Static_assert(sizeof(EXPANDED_NAME(type)) == sizeof(#type), #type " is still renamed: #undef it");      \
  _Static_assert(sizeof(aotk_abi_##type) == sizeof(type), "aotk_cuda_abi.h: sizeof(" #type ") differs from cuda.h"); \
  _Static_assert(_Alignof(aotk_abi_##type) >= (required_alignment), "aotk_cuda_abi.h: " #type " is under-aligned");
ABI_LAYOUT_TYPES(STATIC_SAME_LAYOUT)
_Static_assert(AOTK__CU_TENSOR_MAP_NUM_QWORDS == CU_TENSOR_MAP_NUM_QWORDS,
               "aotk_cuda_abi.h: AOTK__CU_TENSOR_MAP_NUM_QWORDS differs from cuda.h");

_Static_assert(AOTK__CU_GET_PROC_ADDRESS_DEFAULT == CU_GET_PROC_ADDRESS_DEFAULT,
               "aotk_cuda_abi.h: AOTK__CU_GET_PROC_ADDRESS_DEFAULT differs from cuda.h");

/* Where aotk passes one of cuda.h's types as a plain type of the same size and calling convention.
 * SUBSTITUTED(aotk's type, cuda.h's type) in RESPELLED_DRIVER_FUNCTIONS. */
#define ABI_SUBSTITUTIONS(X)                   \
  X(int, CUdevice_attribute)                   \
  X(int, CUfunction_attribute)                 \
  X(int, CUstreamCaptureMode)                  \
  X(void *, CUjit_option *)                    \
  X(void *, CUlibraryOption *)                 \
  X(unsigned long long, cuuint64_t)            \
  X(int *, CUdriverProcAddressQueryResult *)  \
  X(int, CUtensorMapDataType)                 \
  X(int, CUtensorMapInterleave)               \
  X(int, CUtensorMapSwizzle)                  \
  X(int, CUtensorMapL2promotion)              \
  X(int, CUtensorMapFloatOOBfill)
#define STATIC_SUBSTITUTION_SIZE(aotk_type, cuda_type) \
  _Static_assert(sizeof(aotk_type) == sizeof(cuda_type), #aotk_type " stands for " #cuda_type " but differs in size");
ABI_SUBSTITUTIONS(STATIC_SUBSTITUTION_SIZE)

/* The entries of AOTK__DRIVER_FUNCTIONS that use a substitution, spelled with it. */
#define RESPELLED_DRIVER_FUNCTIONS(X)                                                                  \
  X(cuDeviceGetAttribute, (int *value, SUBSTITUTED(int, CUdevice_attribute) attribute, CUdevice device)) \
  X(cuLibraryLoadData, (CUlibrary * library, const void *code, SUBSTITUTED(void *, CUjit_option *) jit_options, \
                        void **jit_values, unsigned num_jit_options,                                    \
                        SUBSTITUTED(void *, CUlibraryOption *) library_options, void **library_values,  \
                        unsigned num_library_options))                                                  \
  X(cuKernelSetAttribute, (SUBSTITUTED(int, CUfunction_attribute) attribute, int value, CUkernel kernel,  \
                           CUdevice device))                                                            \
  X(cuStreamBeginCapture, (CUstream stream, SUBSTITUTED(int, CUstreamCaptureMode) mode))                   \
  X(cuTensorMapEncodeTiled,                                                                              \
    (CUtensorMap * map, SUBSTITUTED(int, CUtensorMapDataType) data_type, unsigned rank, void *address,   \
     const uint64_t *dims, const uint64_t *strides_bytes, const unsigned *box, const unsigned *element_strides, \
     SUBSTITUTED(int, CUtensorMapInterleave) interleave, SUBSTITUTED(int, CUtensorMapSwizzle) swizzle,    \
     SUBSTITUTED(int, CUtensorMapL2promotion) l2_promotion, SUBSTITUTED(int, CUtensorMapFloatOOBfill) oob_fill))

/* cuGetProcAddress is taken with dlsym under cuda.h's name for it, with this prototype (a copy of
 * get_proc_address_fn, private to src/runtime/aotk_driver.c). */
#define AOTK_GET_PROC_ADDRESS_SYMBOL "cuGetProcAddress_v2"
#define RESPELLED_GET_PROC_ADDRESS                                                                     \
  (const char *symbol, void **function, int cuda_version, SUBSTITUTED(unsigned long long, cuuint64_t) flags, \
   SUBSTITUTED(int *, CUdriverProcAddressQueryResult *) symbol_status)

/* --- the tables the run-time checks read ------------------------------------------------------------ */
typedef struct value_pair {
  const char *name;
  long long aotk_value;
  long long cuda_value;
} value_pair;
#define VALUE_PAIR(name) {#name, (long long)aotk_abi_##name, (long long)name},
static const value_pair abi_values[] = {ABI_VALUES(VALUE_PAIR)};

typedef struct type_pair {
  const char *name;
  size_t aotk_size;
  size_t cuda_size;
  int identical; /* 1: must be cuda.h's type; 0: the same size is enough */
  int compatible;
} type_pair;
#define IDENTICAL_TYPE_PAIR(type) {#type, sizeof(aotk_abi_##type), sizeof(type), 1, TYPES_COMPATIBLE(aotk_abi_##type, type)},
#define SAME_SIZE_TYPE_PAIR(type) {#type, sizeof(aotk_abi_##type), sizeof(type), 0, TYPES_COMPATIBLE(aotk_abi_##type, type)},
static const type_pair abi_types[] = {ABI_IDENTICAL_TYPES(IDENTICAL_TYPE_PAIR) ABI_SAME_SIZE_TYPES(SAME_SIZE_TYPE_PAIR)};

typedef struct layout_pair {
  const char *name;
  size_t aotk_size, cuda_size;
  size_t aotk_alignment, cuda_alignment, required_alignment;
} layout_pair;
#define LAYOUT_PAIR(type, required_alignment)                                                               \
  {#type, sizeof(aotk_abi_##type), sizeof(type), _Alignof(aotk_abi_##type), _Alignof(type), (required_alignment)},
static const layout_pair abi_layouts[] = {ABI_LAYOUT_TYPES(LAYOUT_PAIR)};

typedef struct driver_function {
  const char *name;         /* as aotk asks cuGetProcAddress for it */
  const char *cuda_symbol;  /* what cuda.h maps the name to */
  int as_written;           /* aotk's parameter list is cuda.h's prototype */
} driver_function;
#define DRIVER_FUNCTION(name, params) {#name, EXPANDED_NAME(name), TYPES_COMPATIBLE(__typeof__(&name), CUresult(*) params)},
static const driver_function driver_functions[] = {AOTK__DRIVER_FUNCTIONS(DRIVER_FUNCTION)};

typedef struct respelled_function {
  const char *name;
  int matches_cuda; /* with cuda.h's types put back, the prototype is cuda.h's */
  int matches_aotk; /* with aotk's types, it is aotk's driver table member */
} respelled_function;
#define SUBSTITUTED(aotk_type, cuda_type) cuda_type
#define RESPELLED_MATCHES_CUDA(name, params) TYPES_COMPATIBLE(__typeof__(&name), CUresult(*) params),
static const int respelled_matches_cuda[] = {RESPELLED_DRIVER_FUNCTIONS(RESPELLED_MATCHES_CUDA)};
static const int get_proc_address_matches_cuda =
    TYPES_COMPATIBLE(__typeof__(&cuGetProcAddress), CUresult(*) RESPELLED_GET_PROC_ADDRESS);
#undef SUBSTITUTED
#define SUBSTITUTED(aotk_type, cuda_type) aotk_type
#define RESPELLED_MATCHES_AOTK(name, params) \
  TYPES_COMPATIBLE(__typeof__(((aotk__driver *)0)->name), CUresult(*) params),
static const int respelled_matches_aotk[] = {RESPELLED_DRIVER_FUNCTIONS(RESPELLED_MATCHES_AOTK)};
#undef SUBSTITUTED
#define RESPELLED_NAME(name, params) #name,
static const char *const respelled_names[] = {RESPELLED_DRIVER_FUNCTIONS(RESPELLED_NAME)};

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

/* --- the cases -------------------------------------------------------------------------------------- */
static void test_header_versions(void) {
  printf("    cuda.h: %s, CUDA_VERSION %d; aotk asks for entry points at %d\n", AOTK_TEST_CUDA_H, CUDA_VERSION,
         AOTK__CUDA_API_VERSION);
  CHECK_MSG(AOTK__CUDA_API_VERSION <= CUDA_VERSION, "aotk asks for the %d API but cuda.h is %d",
            AOTK__CUDA_API_VERSION, CUDA_VERSION);
  CHECK(AOTK__CU_GET_PROC_ADDRESS_DEFAULT == CU_GET_PROC_ADDRESS_DEFAULT);
}

static void test_enum_values(void) {
  for (size_t i = 0; i < COUNT(abi_values); i++) {
    const value_pair *pair = &abi_values[i];
    CHECK_MSG(pair->aotk_value == pair->cuda_value, "%s: aotk %lld, cuda.h %lld", pair->name, pair->aotk_value,
              pair->cuda_value);
  }
  /* cuda.h's default-stream handles are pointer constants, so compared here rather than by
   * _Static_assert; aotk's spellings are prefixed (aotk_cuda_abi.h says why). */
  CHECK(AOTK__CU_STREAM_LEGACY == CU_STREAM_LEGACY);
  CHECK(AOTK__CU_STREAM_PER_THREAD == CU_STREAM_PER_THREAD);
  printf("    %zu values and 2 default-stream handles compared\n", COUNT(abi_values));
}

static void test_types(void) {
  for (size_t i = 0; i < COUNT(abi_types); i++) {
    const type_pair *pair = &abi_types[i];
    CHECK_MSG(pair->aotk_size == pair->cuda_size, "sizeof(%s): aotk %zu, cuda.h %zu", pair->name, pair->aotk_size,
              pair->cuda_size);
    if (HAVE_TYPES_COMPATIBLE && pair->identical) {
      CHECK_MSG(pair->compatible, "%s: aotk's type is not cuda.h's", pair->name);
    }
  }
  for (size_t i = 0; i < COUNT(abi_layouts); i++) {
    const layout_pair *pair = &abi_layouts[i];
    CHECK_MSG(pair->aotk_size == pair->cuda_size, "sizeof(%s): aotk %zu, cuda.h %zu", pair->name, pair->aotk_size,
              pair->cuda_size);
    CHECK_MSG(pair->aotk_alignment >= pair->required_alignment, "_Alignof(%s): aotk %zu, the driver needs %zu",
              pair->name, pair->aotk_alignment, pair->required_alignment);
    printf("    %s: %zu bytes; aligned to %zu in aotk, %zu in cuda.h, %zu required\n", pair->name, pair->aotk_size,
           pair->aotk_alignment, pair->cuda_alignment, pair->required_alignment);
  }
  CHECK(sizeof(CUdeviceptr) == 8); /* aotk's kernels take 64-bit pointers */
  printf("    %zu types and %zu struct layouts compared; sizeof(CUdeviceptr) = %zu\n", COUNT(abi_types),
         COUNT(abi_layouts), sizeof(CUdeviceptr));
}

static int find_respelled(const char *name) {
  for (size_t i = 0; i < COUNT(respelled_names); i++) {
    if (strcmp(respelled_names[i], name) == 0) return (int)i;
  }
  return -1;
}

static void test_driver_prototypes(void) {
  if (!HAVE_TYPES_COMPATIBLE) {
    TEST_SKIP("the compiler has no __builtin_types_compatible_p");
    return;
  }
  for (size_t i = 0; i < COUNT(driver_functions); i++) {
    const driver_function *function = &driver_functions[i];
    int respelled = find_respelled(function->name);
    if (function->as_written) {
      CHECK_MSG(respelled < 0, "%s matches cuda.h as written: drop it from RESPELLED_DRIVER_FUNCTIONS", function->name);
    } else if (respelled < 0) {
      CHECK_MSG(0, "%s: aotk's parameter list is not cuda.h's %s (if only an enum is passed as int, add the "
                   "function to RESPELLED_DRIVER_FUNCTIONS)", function->name, function->cuda_symbol);
    } else {
      CHECK_MSG(respelled_matches_cuda[respelled], "%s: the respelled prototype is not cuda.h's %s", function->name,
                function->cuda_symbol);
      CHECK_MSG(respelled_matches_aotk[respelled], "%s: the respelled prototype is not aotk's driver table entry",
                function->name);
    }
    printf("    %-28s cuda.h %-28s %s\n", function->name, function->cuda_symbol,
           function->as_written ? "as written" : "respelled");
  }
  for (size_t i = 0; i < COUNT(respelled_names); i++) {
    int listed = 0;
    for (size_t j = 0; j < COUNT(driver_functions); j++) listed |= strcmp(driver_functions[j].name, respelled_names[i]) == 0;
    CHECK_MSG(listed, "%s is respelled but not in AOTK__DRIVER_FUNCTIONS", respelled_names[i]);
  }
  CHECK_MSG(strcmp(EXPANDED_NAME(cuGetProcAddress), AOTK_GET_PROC_ADDRESS_SYMBOL) == 0,
            "aotk takes %s with dlsym, cuda.h declares %s", AOTK_GET_PROC_ADDRESS_SYMBOL, EXPANDED_NAME(cuGetProcAddress));
  CHECK_MSG(get_proc_address_matches_cuda, "aotk's cuGetProcAddress prototype is not cuda.h's %s",
            EXPANDED_NAME(cuGetProcAddress));
  printf("    %zu driver functions and cuGetProcAddress compared\n", COUNT(driver_functions));
}

/* What cuda.h's names stand for is the newest variant; aotk asks for the 12.0 one. With a driver,
 * the two must be the same exported function for every entry, or the prototypes compared above are
 * not the ones aotk calls. */
static void test_driver_entry_points(void) {
  const aotk__driver *driver = NULL;
  aotk_status status = aotk__driver_get(&driver);
  if (status != AOTK_OK) {
    TEST_SKIP("no usable CUDA driver (%s: %s)", aotk_status_name(status), aotk_last_error());
    return;
  }
  void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  CHECK(library != NULL);
  if (library == NULL) return;
  /* The table is nothing but function pointers, in list order. */
  _Static_assert(sizeof(aotk__driver) == COUNT(driver_functions) * sizeof(void (*)(void)), "aotk__driver layout");
  for (size_t i = 0; i < COUNT(driver_functions); i++) {
    void (*from_aotk)(void);
    memcpy(&from_aotk, (const char *)driver + i * sizeof from_aotk, sizeof from_aotk);
    void *exported = dlsym(library, driver_functions[i].cuda_symbol);
    void (*from_cuda_h)(void) = NULL;
    memcpy(&from_cuda_h, &exported, sizeof exported);
    CHECK_MSG(exported != NULL, "libcuda.so.1 exports no %s", driver_functions[i].cuda_symbol);
    if (from_aotk != from_cuda_h) {
      Dl_info info = {0};
      void *from_aotk_address = NULL;
      memcpy(&from_aotk_address, &from_aotk, sizeof from_aotk);
      const char *actual = dladdr(from_aotk_address, &info) != 0 && info.dli_sname ? info.dli_sname : "another function";
      CHECK_MSG(0, "cuGetProcAddress(\"%s\", %d) gives %s, not cuda.h's %s: aotk calls it with the wrong prototype "
                "(name %s in AOTK__DRIVER_FUNCTIONS)", driver_functions[i].name, AOTK__CUDA_API_VERSION, actual,
                driver_functions[i].cuda_symbol, driver_functions[i].cuda_symbol);
    }
  }
  int driver_version = 0;
  if (driver->cuDriverGetVersion(&driver_version) == CUDA_SUCCESS) printf("    driver: CUDA %d\n", driver_version);
  dlclose(library);
}

/* Every CU* name in aotk_cuda_abi.h (comments aside) must be one the lists above compare. */
static int is_identifier_character(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

#define NAME_STRING(name) #name,
#define LAYOUT_NAME_STRING(name, required_alignment) #name,
static const char *const covered_names[] = {ABI_VALUES(NAME_STRING) ABI_IDENTICAL_TYPES(NAME_STRING)
                                                ABI_SAME_SIZE_TYPES(NAME_STRING) ABI_LAYOUT_TYPES(LAYOUT_NAME_STRING)
                                                    ABI_STRUCT_TAGS(NAME_STRING)};

static void test_every_name_is_checked(void) {
  FILE *file = fopen(AOTK_TEST_CUDA_ABI_HEADER, "rb");
  CHECK_MSG(file != NULL, "cannot open %s", AOTK_TEST_CUDA_ABI_HEADER);
  if (file == NULL) return;
  static char text[1 << 16];
  size_t length = fread(text, 1, sizeof text - 1, file);
  fclose(file);
  CHECK_MSG(length < sizeof text - 1, "%s is larger than the test reads", AOTK_TEST_CUDA_ABI_HEADER);
  text[length] = '\0';
  /* Blank out comments, so that prose naming CUDA types does not count. */
  for (char *p = text; *p != '\0'; p++) {
    if (p[0] == '/' && p[1] == '*') {
      char *end = strstr(p + 2, "*/");
      char *stop = end ? end + 2 : p + strlen(p);
      memset(p, ' ', (size_t)(stop - p));
      p = stop - 1;
    } else if (p[0] == '/' && p[1] == '/') {
      while (*p != '\0' && *p != '\n') *p++ = ' ';
      if (*p == '\0') break;
    }
  }
  int names_seen = 0;
  for (size_t i = 0; i < length;) {
    if (!is_identifier_character((unsigned char)text[i]) || (i > 0 && is_identifier_character((unsigned char)text[i - 1]))) {
      i++;
      continue;
    }
    size_t end = i;
    while (end < length && is_identifier_character((unsigned char)text[end])) end++;
    if (end - i >= 2 && text[i] == 'C' && text[i + 1] == 'U') {
      int covered = 0;
      for (size_t k = 0; k < COUNT(covered_names); k++) {
        covered |= strlen(covered_names[k]) == end - i && memcmp(covered_names[k], text + i, end - i) == 0;
      }
      CHECK_MSG(covered, "aotk_cuda_abi.h declares %.*s, which this test does not compare with cuda.h: add it",
                (int)(end - i), text + i);
      names_seen++;
    }
    i = end;
  }
  CHECK(names_seen > 0);
  printf("    %d CU* names found in %s\n", names_seen, AOTK_TEST_CUDA_ABI_HEADER);
}

int main(void) {
  RUN_TEST(test_header_versions);
  RUN_TEST(test_enum_values);
  RUN_TEST(test_types);
  RUN_TEST(test_driver_prototypes);
  RUN_TEST(test_driver_entry_points);
  RUN_TEST(test_every_name_is_checked);
  return aotk_test_finish();
}
