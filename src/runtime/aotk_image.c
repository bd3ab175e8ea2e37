/* Loading the embedded images. The first use of a kernel decompresses and loads it under one lock;
 * every later use reads the handle with one atomic load, so launches stay cheap and allocation-free. */
#include <lzma.h>
#include <stdio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "aotk_error.h"
#include "aotk_image.h"

/* Loaded state per (row, image kind). Rows are few (tens): a fixed bound keeps this static. */
#define AOTK__MAX_KERNELS 4096
static CUkernel _Atomic loaded_kernels[AOTK__MAX_KERNELS][2];
/* Devices (ordinals < 64) on which a row's shared-memory limit has been raised. */
static _Atomic uint64_t shared_limit_set[AOTK__MAX_KERNELS][2];
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

uint64_t aotk__fnv1a64(const void *data, size_t bytes) {
  const unsigned char *p = data;
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes; i++) {
    hash ^= p[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

aotk_status aotk__image_decompress(const aotk__image *image, const char *what, unsigned char **raw) {
  *raw = NULL;
  if (image->data == NULL || image->raw_bytes == 0) {
    return aotk__fail(AOTK_ERROR_KERNEL_NOT_BUILT, "%s: this image is not embedded in this build", what);
  }
  unsigned char *buffer = malloc(image->raw_bytes);
  if (buffer == NULL) {
    return aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "%s: cannot allocate %u bytes to decompress the image", what,
                      image->raw_bytes);
  }
  uint64_t memory_limit = UINT64_MAX;
  size_t in_position = 0, out_position = 0;
  lzma_ret ret = lzma_stream_buffer_decode(&memory_limit, 0, NULL, image->data, &in_position,
                                           image->compressed_bytes, buffer, &out_position, image->raw_bytes);
  if (ret != LZMA_OK || out_position != image->raw_bytes || in_position != image->compressed_bytes) {
    free(buffer);
    return aotk__fail(AOTK_ERROR_IMAGE_CORRUPT, "%s: xz decoding failed (lzma_ret %d, %zu of %u bytes)", what,
                      (int)ret, out_position, image->raw_bytes);
  }
  uint64_t hash = aotk__fnv1a64(buffer, image->raw_bytes);
  if (hash != image->hash) {
    free(buffer);
    return aotk__fail(AOTK_ERROR_IMAGE_CORRUPT, "%s: hash %016llx, expected %016llx", what,
                      (unsigned long long)hash, (unsigned long long)image->hash);
  }
  *raw = buffer;
  return AOTK_OK;
}

static aotk_status load_locked(const aotk__driver *driver, int index, aotk__image_kind kind, CUkernel *kernel) {
  CUkernel existing = atomic_load_explicit(&loaded_kernels[index][kind], memory_order_acquire);
  if (existing != NULL) {
    *kernel = existing;
    return AOTK_OK;
  }
  const aotk__kernel_entry *entry = &aotk__kernel_table[index];
  const aotk__image *image = kind == AOTK__IMAGE_PTX ? &entry->ptx : &entry->cubin;
  char what[160];
  snprintf(what, sizeof what, "sm_%d %s (%s)", entry->arch, entry->name, kind == AOTK__IMAGE_PTX ? "ptx" : "cubin");
  unsigned char *raw = NULL;
  aotk_status status = aotk__image_decompress(image, what, &raw);
  if (status != AOTK_OK) return status;
  CUlibrary library = NULL;
  CUresult result = driver->cuLibraryLoadData(&library, raw, NULL, NULL, 0, NULL, NULL, 0);
  free(raw); /* the driver keeps its own copy */
  if (result != CUDA_SUCCESS) return aotk__cuda_failure(driver, result, "cuLibraryLoadData");
  /* The library is never unloaded: kernels stay valid for the life of the process, like the
   * CUDA runtime's own fat binaries. */
  result = driver->cuLibraryGetKernel(kernel, library, entry->function_name);
  if (result != CUDA_SUCCESS) return aotk__cuda_failure(driver, result, "cuLibraryGetKernel");
  atomic_store_explicit(&loaded_kernels[index][kind], *kernel, memory_order_release);
  return AOTK_OK;
}

aotk_status aotk__kernel_get(const aotk__driver *driver, int index, aotk__image_kind kind, CUdevice device,
                             CUkernel *kernel) {
  if (index < 0 || index >= aotk__kernel_count || index >= AOTK__MAX_KERNELS) {
    return aotk__fail(AOTK_ERROR_INTERNAL, "kernel row %d out of range", index);
  }
  *kernel = atomic_load_explicit(&loaded_kernels[index][kind], memory_order_acquire);
  if (*kernel == NULL) {
    pthread_mutex_lock(&load_lock);
    aotk_status status = load_locked(driver, index, kind, kernel);
    pthread_mutex_unlock(&load_lock);
    if (status != AOTK_OK) return status;
  }
  /* Above 48 KiB of dynamic shared memory a kernel must opt in, per device. Setting it twice is
   * harmless, so threads racing here need no lock. */
  const aotk__kernel_entry *entry = &aotk__kernel_table[index];
  uint64_t bit = device >= 0 && device < 64 ? 1ull << device : 0;
  if (entry->shared_bytes > 48 * 1024 &&
      (bit == 0 || !(atomic_load_explicit(&shared_limit_set[index][kind], memory_order_acquire) & bit))) {
    AOTK__CU_TRY(driver,
                 driver->cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, entry->shared_bytes,
                                              *kernel, device),
                 "cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    atomic_fetch_or_explicit(&shared_limit_set[index][kind], bit, memory_order_release);
  }
  return AOTK_OK;
}

void aotk__image_forget_for_testing(void) {
  for (int i = 0; i < AOTK__MAX_KERNELS; i++) {
    for (int kind = 0; kind < 2; kind++) {
      atomic_store(&loaded_kernels[i][kind], NULL);
      atomic_store(&shared_limit_set[i][kind], 0);
    }
  }
}
