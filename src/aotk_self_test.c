/* aotk_self_test(): the forward and the backward on small random problems of every shipped dtype and
 * head dim, causal and not, checked against the float64 reference. What `aotk check` runs. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "aotk.h"
#include "aotk_check.h"
#include "aotk_driver.h"
#include "aotk_error.h"

/* The report and the first failure, kept across cases. */
typedef struct self_test_log {
  char *report;
  size_t report_bytes, used;
  int cases, failures;
  aotk_status first_failure;
  char first_message[768];
} self_test_log;

/* Records one case: a line in the report, and the first failure's status and line. A case that could
 * not run keeps its own status; one that ran but failed its checks counts as AOTK_ERROR_INTERNAL. */
static void record_case(self_test_log *log, const char *what, aotk_dtype dtype, int64_t head_dim, int causal,
                        aotk_status status, int passed, const char *kernel_name, const char *detail) {
  char line[768];
  const char *dtype_name = dtype == AOTK_DTYPE_BFLOAT16 ? "bf16" : "fp16";
  if (status != AOTK_OK) {
    snprintf(line, sizeof line, "FAIL %s%s d=%lld causal=%d: %s: %s", what, dtype_name, (long long)head_dim, causal,
             aotk_status_name(status), aotk_last_error());
  } else {
    snprintf(line, sizeof line, "%s %s%s d=%lld causal=%d %s: %s", passed ? "ok  " : "FAIL", what, dtype_name,
             (long long)head_dim, causal, kernel_name, detail);
  }
  if (log->report != NULL && log->report_bytes > 0) {
    int written = snprintf(log->report + log->used, log->report_bytes - log->used, "%s\n", line);
    if (written > 0) {
      size_t room = log->report_bytes - log->used - 1;
      log->used += (size_t)written < room ? (size_t)written : room;
    }
  }
  log->cases++;
  if (status != AOTK_OK || !passed) {
    log->failures++;
    if (log->first_failure == AOTK_OK) {
      log->first_failure = status != AOTK_OK ? status : AOTK_ERROR_INTERNAL;
      snprintf(log->first_message, sizeof log->first_message, "%s", line);
    }
  }
}

aotk_status aotk_self_test(int device_ordinal, char *report, size_t report_bytes) {
  aotk__clear_error();
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
  self_test_log log = {report, report_bytes, 0, 0, 0, AOTK_OK, ""};
  uint64_t seed = (uint64_t)time(NULL);
  for (int t = 0; t < 2; t++) {
    for (int h = 0; h < 2; h++) {
      for (int causal = 0; causal < 2; causal++) {
        /* seqlen_q != seqlen_k, neither a multiple of a block, GQA 2, and both alignment variants. */
        aotk__fwd_check_case c = {dtypes[t], 2, 67, 131, 4, 2, head_dims[h], causal, 0.0f,
                                  causal ? AOTK__LAYOUT_PADDED : AOTK__LAYOUT_CONTIGUOUS, 1, 67,
                                  seed + (uint64_t)log.cases * 7919u, NULL};
        aotk__fwd_check_result r;
        aotk_status case_status = aotk__check_attn_fwd(driver, &c, &r);
        record_case(&log, "", dtypes[t], head_dims[h], causal, case_status, r.passed, r.kernel_name, r.detail);
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
                                seed + (uint64_t)log.cases * 7919u, NULL};
      aotk__bwd_check_result r;
      aotk_status case_status = aotk__check_attn_bwd(driver, &c, &r);
      record_case(&log, "bwd ", dtypes[t], head_dims[h], causal, case_status, r.passed, r.kernel_name, r.detail);
    }
  }
  driver->cuCtxSetCurrent(previous);
  driver->cuDevicePrimaryCtxRelease(device);
  if (log.failures > 0) {
    return aotk__fail(log.first_failure, "%d of %d self-test cases failed; first: %s", log.failures, log.cases,
                      log.first_message);
  }
  return AOTK_OK;
}
