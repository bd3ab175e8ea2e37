/* Embedded kernel images: integrity check, decompression and loading into the driver. */
#ifndef AOTK_IMAGE_H
#define AOTK_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "aotk_driver.h"
#include "aotk_kernel_table.h"

uint64_t aotk__fnv1a64(const void *data, size_t bytes);

/* Decompresses `image` into a new malloc'd buffer of image->raw_bytes and checks its hash.
 * AOTK_ERROR_IMAGE_CORRUPT (xz error, wrong size or hash) or AOTK_ERROR_OUT_OF_MEMORY; the caller frees. */
aotk_status aotk__image_decompress(const aotk__image *image, const char *what, unsigned char **raw);

typedef enum aotk__image_kind { AOTK__IMAGE_CUBIN = 0, AOTK__IMAGE_PTX = 1 } aotk__image_kind;

/* The kernel handle for row `index` from its cubin or PTX, loaded once per process (valid for every
 * context and device: cuLibraryLoadData), with its dynamic shared-memory limit raised on `device`. */
aotk_status aotk__kernel_get(const aotk__driver *driver, int index, aotk__image_kind kind, CUdevice device,
                             CUkernel *kernel);

/* Tests only: forget every loaded kernel (they leak), so that a fake driver's handles never reach the
 * real driver or the other way round. Called by aotk__driver_set_for_testing. */
void aotk__image_forget_for_testing(void);

#endif /* AOTK_IMAGE_H */
