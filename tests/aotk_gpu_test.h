/*
 * Setup shared by the GPU test binaries: the driver, device 0's primary context made current, a
 * non-blocking stream, and the run's seed. Include after aotk_test_harness.h in the one file of a
 * binary, and start main with
 *
 *   if (!aotk_gpu_test_setup()) return aotk_gpu_test_skip_all();
 *
 * so that a machine with no GPU reports the binary as skipped (exit 77).
 */
#ifndef AOTK_GPU_TEST_H
#define AOTK_GPU_TEST_H

#include <stdbool.h>
#include <stdio.h>

#include "aotk.h"
#include "aotk_driver.h"
#include "aotk_test_harness.h"

static const aotk__driver *driver;
static CUcontext context;
static CUstream stream;
static uint64_t seed;

static bool aotk_gpu_test_setup(void) {
  seed = aotk_test_seed();
  aotk_status status = aotk__driver_get(&driver);
  if (status != AOTK_OK) {
    printf("no GPU: %s: %s\n", aotk_status_name(status), aotk_last_error());
    return false;
  }
  CUdevice device;
  if (driver->cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      driver->cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS ||
      driver->cuCtxSetCurrent(context) != CUDA_SUCCESS ||
      driver->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    printf("no usable GPU 0\n");
    return false;
  }
  return true;
}

static void aotk_gpu_test_no_gpu(void) { TEST_SKIP("no GPU on this machine"); }

static int aotk_gpu_test_skip_all(void) {
  RUN_TEST(aotk_gpu_test_no_gpu);
  return aotk_test_finish();
}

#endif /* AOTK_GPU_TEST_H */
