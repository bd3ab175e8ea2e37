/* Loads the CUDA driver at run time: dlopen("libcuda.so.1"), then every entry point through
 * cuGetProcAddress at the 12.0 API version (the only symbol taken with dlsym is cuGetProcAddress
 * itself, so versioned names like cuMemAlloc_v2 are the driver's business, not ours). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "aotk_driver.h"
#include "aotk_error.h"
#include "aotk_image.h"

typedef CUresult (*get_proc_address_fn)(const char *symbol, void **function, int cuda_version,
                                        unsigned long long flags, int *symbol_status);

static aotk__driver real_driver;
static aotk_status real_driver_status = AOTK_ERROR_INTERNAL;
static char real_driver_message[256];
static int real_driver_cuda_result;
static pthread_once_t real_driver_once = PTHREAD_ONCE_INIT;
static const aotk__driver *_Atomic test_driver;

/* Device properties are read once per device: a launch must not pay four attribute queries. */
#define AOTK__CACHED_DEVICES 64
static _Atomic int cached_compute_capability[AOTK__CACHED_DEVICES]; /* 0: not read yet */
static _Atomic int cached_max_shared[AOTK__CACHED_DEVICES];
static _Atomic int cached_multiprocessors[AOTK__CACHED_DEVICES];

static void load_real_driver(void) {
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    const char *why = dlerror();
    snprintf(real_driver_message, sizeof real_driver_message,
             "dlopen(\"libcuda.so.1\") failed: %s", why ? why : "unknown reason");
    real_driver_status = AOTK_ERROR_NO_DRIVER;
    return;
  }
  /* POSIX guarantees dlsym's object pointer converts to a function pointer; ISO C does not, so copy
   * the bits rather than cast. */
  void *symbol = dlsym(handle, "cuGetProcAddress_v2");
  get_proc_address_fn get_proc_address = NULL;
  memcpy(&get_proc_address, &symbol, sizeof symbol);
  if (get_proc_address == NULL) {
    snprintf(real_driver_message, sizeof real_driver_message,
             "libcuda.so.1 has no cuGetProcAddress_v2: the driver is older than CUDA 12.0, which aotk needs");
    real_driver_status = AOTK_ERROR_NO_DRIVER;
    return;
  }
#define AOTK__LOAD_ENTRY(name, params)                                                                 \
  {                                                                                                    \
    void *function = NULL;                                                                             \
    int symbol_status = 0;                                                                             \
    CUresult result = get_proc_address(#name, &function, AOTK__CUDA_API_VERSION,                      \
                                       AOTK__CU_GET_PROC_ADDRESS_DEFAULT, &symbol_status);             \
    if (result != CUDA_SUCCESS || function == NULL) {                                                  \
      snprintf(real_driver_message, sizeof real_driver_message,                                        \
               "the driver does not provide " #name " (CUresult %d): it is older than CUDA 12.0", result); \
      real_driver_status = AOTK_ERROR_NO_DRIVER;                                                       \
      return;                                                                                          \
    }                                                                                                  \
    memcpy(&real_driver.name, &function, sizeof function);                                             \
  }
  AOTK__DRIVER_FUNCTIONS(AOTK__LOAD_ENTRY)
#undef AOTK__LOAD_ENTRY
  CUresult result = real_driver.cuInit(0);
  if (result == CUDA_ERROR_NO_DEVICE) {
    snprintf(real_driver_message, sizeof real_driver_message, "cuInit: the driver found no CUDA device");
    real_driver_cuda_result = result;
    real_driver_status = AOTK_ERROR_NO_DEVICE;
    return;
  }
  if (result != CUDA_SUCCESS) {
    const char *name = "?";
    real_driver.cuGetErrorName(result, &name);
    snprintf(real_driver_message, sizeof real_driver_message, "cuInit failed: %s", name ? name : "?");
    real_driver_cuda_result = result;
    real_driver_status = AOTK_ERROR_CUDA;
    return;
  }
  real_driver_status = AOTK_OK;
}

aotk_status aotk__driver_get(const aotk__driver **driver) {
  *driver = NULL;
  const aotk__driver *fake = atomic_load(&test_driver);
  if (fake != NULL) {
    CUresult result = fake->cuInit(0);
    if (result == CUDA_ERROR_NO_DEVICE) {
      aotk__set_cuda_result(result);
      return aotk__fail(AOTK_ERROR_NO_DEVICE, "cuInit: the driver found no CUDA device");
    }
    if (result != CUDA_SUCCESS) return aotk__cuda_failure(fake, result, "cuInit");
    *driver = fake;
    return AOTK_OK;
  }
  pthread_once(&real_driver_once, load_real_driver);
  if (real_driver_status != AOTK_OK) {
    aotk__set_cuda_result(real_driver_cuda_result);
    return aotk__fail(real_driver_status, "%s", real_driver_message);
  }
  *driver = &real_driver;
  return AOTK_OK;
}

void aotk__driver_set_for_testing(const aotk__driver *fake) {
  atomic_store(&test_driver, fake);
  aotk__image_forget_for_testing();
  for (int i = 0; i < AOTK__CACHED_DEVICES; i++) atomic_store(&cached_compute_capability[i], 0);
}

aotk_status aotk__cuda_failure(const aotk__driver *driver, CUresult result, const char *what) {
  const char *name = NULL, *text = NULL;
  if (driver != NULL) {
    if (driver->cuGetErrorName(result, &name) != CUDA_SUCCESS) name = NULL;
    if (driver->cuGetErrorString(result, &text) != CUDA_SUCCESS) text = NULL;
  }
  aotk__fail(AOTK_ERROR_CUDA, "%s failed: %s (%s)", what, name ? name : "unknown CUresult",
             text ? text : "no description");
  aotk__set_cuda_result(result);
  return AOTK_ERROR_CUDA;
}

aotk_status aotk__current_device(const aotk__driver *driver, aotk__device_info *info) {
  CUcontext context = NULL;
  AOTK__CU_TRY(driver, driver->cuCtxGetCurrent(&context), "cuCtxGetCurrent");
  if (context == NULL) {
    return aotk__fail(AOTK_ERROR_NO_CONTEXT,
                      "no CUDA context is current on this thread (call cudaSetDevice or create one)");
  }
  CUdevice device = 0;
  AOTK__CU_TRY(driver, driver->cuCtxGetDevice(&device), "cuCtxGetDevice");
  info->context = context;
  info->device = device;
  if (device >= 0 && device < AOTK__CACHED_DEVICES) {
    int cc = atomic_load_explicit(&cached_compute_capability[device], memory_order_acquire);
    if (cc != 0) {
      info->compute_capability = cc;
      info->max_shared_bytes = atomic_load_explicit(&cached_max_shared[device], memory_order_relaxed);
      info->multiprocessors = atomic_load_explicit(&cached_multiprocessors[device], memory_order_relaxed);
      return AOTK_OK;
    }
  }
  int major = 0, minor = 0;
  AOTK__CU_TRY(driver, driver->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
               "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  AOTK__CU_TRY(driver, driver->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
               "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  AOTK__CU_TRY(driver,
               driver->cuDeviceGetAttribute(&info->max_shared_bytes,
                                            CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device),
               "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
  AOTK__CU_TRY(driver,
               driver->cuDeviceGetAttribute(&info->multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device),
               "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  info->compute_capability = major * 10 + minor;
  if (device >= 0 && device < AOTK__CACHED_DEVICES) {
    atomic_store_explicit(&cached_max_shared[device], info->max_shared_bytes, memory_order_relaxed);
    atomic_store_explicit(&cached_multiprocessors[device], info->multiprocessors, memory_order_relaxed);
    atomic_store_explicit(&cached_compute_capability[device], info->compute_capability, memory_order_release);
  }
  return AOTK_OK;
}

/* The kernels are context-independent CUkernel handles, so the driver runs a launch in the context its
 * stream belongs to, whatever context is current: with device 0's stream and device 1's context
 * current, a call planned for device 1 (kernel and image for its arch, grid from its SM count, the
 * shared-memory opt-in set on it) returned AOTK_OK and wrote device 0's output (measured on two GPUs).
 * Comparing with the context the plan was made for costs one driver call per launching call. */
aotk_status aotk__check_stream_context(const aotk__driver *driver, const aotk__device_info *device,
                                       aotk_stream stream) {
  CUstream cu_stream = (CUstream)stream;
  if (cu_stream == NULL || cu_stream == AOTK__CU_STREAM_LEGACY || cu_stream == AOTK__CU_STREAM_PER_THREAD) {
    return AOTK_OK;
  }
  CUcontext stream_context = NULL;
  AOTK__CU_TRY(driver, driver->cuStreamGetCtx(cu_stream, &stream_context), "cuStreamGetCtx");
  if (stream_context != device->context) {
    return aotk__fail(AOTK_ERROR_NO_CONTEXT,
                      "the stream belongs to another CUDA context than the one current on this thread (device %d's): "
                      "make the stream's context (its device's) current before the call",
                      (int)device->device);
  }
  return AOTK_OK;
}
