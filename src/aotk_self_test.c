/* aotk_self_test(): the forward and the backward on small random problems of every shipped dtype and
 * head dim, causal and not, checked against the float64 reference. What `aotk check` runs. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "aotk.h"
#include "aotk_check.h"
#include "aotk_driver.h"
#include "aotk_error.h"

static void append(char *report, size_t report_bytes, size_t *used, const char *line) {
  if (report == NULL || report_bytes == 0) return;
  int written = snprintf(report + *used, report_bytes - *used, "%s\n", line);
  if (written > 0) *used += (size_t)written < report_bytes - *used ? (size_t)written : report_bytes - *used - 1;
}

aotk_status aotk_self_test(int device_ordinal, char *report, size_t report_bytes) {
  aotk__clear_error();
  size_t used = 0;
  if (report != NULL && report_bytes > 0) report[0] = '\0';
  const aotk__driver *driver;
  aotk_status status = aotk__driver_get(&driver);
  if (status != AOTK_OK) return status;
  int count = 0;
  AOTK__CU_TRY(driver, driver->cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (device_ordinal < 0 || device_ordinal >= count) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "device_ordinal = %d; the driver sees %d device(s)", device_ordinal,
                      count);
  }
  CUdevice device;
  AOTK__CU_TRY(driver, driver->cuDeviceGet(&device, device_ordinal), "cuDeviceGet");
  CUcontext previous = NULL, primary = NULL;
  AOTK__CU_TRY(driver, driver->cuCtxGetCurrent(&previous), "cuCtxGetCurrent");
  AOTK__CU_TRY(driver, driver->cuDevicePrimaryCtxRetain(&primary, device), "cuDevicePrimaryCtxRetain");
  CUresult result = driver->cuCtxSetCurrent(primary);
  if (result != CUDA_SUCCESS) {
    status = aotk__cuda_failure(driver, result, "cuCtxSetCurrent");
    driver->cuDevicePrimaryCtxRelease(device);
    return status;
  }

  static const aotk_dtype dtypes[] = {AOTK_DTYPE_BFLOAT16, AOTK_DTYPE_FLOAT16};
  static const int64_t head_dims[] = {64, 128};
  aotk_status first_failure = AOTK_OK;
  char first_message[768] = "";
  int cases = 0, failures = 0;
  uint64_t seed = (uint64_t)time(NULL);
  for (int t = 0; t < 2; t++) {
    for (int h = 0; h < 2; h++) {
      for (int causal = 0; causal < 2; causal++) {
        /* seqlen_q != seqlen_k, neither a multiple of a block, GQA 2, and both alignment variants. */
        aotk__fwd_check_case c = {dtypes[t], 2, 67, 131, 4, 2, head_dims[h], causal, 0.0f,
                                  causal ? AOTK__LAYOUT_PADDED : AOTK__LAYOUT_CONTIGUOUS, 1, 67,
                                  seed + (uint64_t)cases * 7919u, NULL};
        aotk__fwd_check_result r;
        aotk_status case_status = aotk__check_attn_fwd(driver, &c, &r);
        char line[512];
        if (case_status != AOTK_OK) {
          snprintf(line, sizeof line, "FAIL %s d=%lld causal=%d: %s: %s",
                   dtypes[t] == AOTK_DTYPE_BFLOAT16 ? "bf16" : "fp16", (long long)head_dims[h], causal,
                   aotk_status_name(case_status), aotk_last_error());
        } else {
          snprintf(line, sizeof line, "%s %s d=%lld causal=%d %s: %s", r.passed ? "ok  " : "FAIL",
                   dtypes[t] == AOTK_DTYPE_BFLOAT16 ? "bf16" : "fp16", (long long)head_dims[h], causal,
                   r.kernel_name, r.detail);
        }
        append(report, report_bytes, &used, line);
        cases++;
        if (case_status != AOTK_OK || !r.passed) {
          failures++;
          if (first_failure == AOTK_OK) {
            first_failure = case_status != AOTK_OK ? case_status : AOTK_ERROR_INTERNAL;
            snprintf(first_message, sizeof first_message, "%s", line);
          }
        }
      }
    }
  }
  /* The backward, one case per dtype and head dim: seqlen_q != seqlen_k, neither a multiple of a
   * block, GQA 2, causal with more queries than keys (rows that see no key) in half, and both
   * alignment variants with every gradient's strides unlike its input's. Every element is compared. */
  for (int t = 0; t < 2; t++) {
    for (int h = 0; h < 2; h++) {
      int causal = (t + h) % 2;
      aotk__bwd_check_case c = {dtypes[t], 2, causal ? 131 : 67, causal ? 67 : 131, 4, 2, head_dims[h], causal, 0.0f,
                                h ? AOTK__LAYOUT_PADDED : AOTK__LAYOUT_CONTIGUOUS, 1, 1, 0,
                                seed + (uint64_t)cases * 7919u, NULL};
      aotk__bwd_check_result r;
      aotk_status case_status = aotk__check_attn_bwd(driver, &c, &r);
      char line[768];
      if (case_status != AOTK_OK) {
        snprintf(line, sizeof line, "FAIL bwd %s d=%lld causal=%d: %s: %s",
                 dtypes[t] == AOTK_DTYPE_BFLOAT16 ? "bf16" : "fp16", (long long)head_dims[h], causal,
                 aotk_status_name(case_status), aotk_last_error());
      } else {
        snprintf(line, sizeof line, "%s bwd %s d=%lld causal=%d %s: %s", r.passed ? "ok  " : "FAIL",
                 dtypes[t] == AOTK_DTYPE_BFLOAT16 ? "bf16" : "fp16", (long long)head_dims[h], causal,
                 r.kernel_name, r.detail);
      }
      append(report, report_bytes, &used, line);
      cases++;
      if (case_status != AOTK_OK || !r.passed) {
        failures++;
        if (first_failure == AOTK_OK) {
          first_failure = case_status != AOTK_OK ? case_status : AOTK_ERROR_INTERNAL;
          snprintf(first_message, sizeof first_message, "%s", line);
        }
      }
    }
  }
  driver->cuCtxSetCurrent(previous);
  driver->cuDevicePrimaryCtxRelease(device);
  if (failures > 0) {
    return aotk__fail(first_failure, "%d of %d self-test cases failed; first: %s", failures, cases, first_message);
  }
  return AOTK_OK;
}
