/* Status names and strings (from the one list in aotk.h), the per-thread last error, versions. */
#include <stdarg.h>
#include <stdio.h>

#include "aotk.h"
#include "aotk_error.h"

#define AOTK__MESSAGE_BYTES 512

static _Thread_local char last_error_message[AOTK__MESSAGE_BYTES];
static _Thread_local int last_cuda_result;

const char *aotk_status_name(aotk_status status) {
  switch (status) {
#define AOTK__STATUS_NAME(name, value, text) \
  case name:                                 \
    return #name;
    AOTK_STATUS_LIST(AOTK__STATUS_NAME)
#undef AOTK__STATUS_NAME
  }
  return "AOTK_STATUS_UNKNOWN";
}

const char *aotk_status_string(aotk_status status) {
  switch (status) {
#define AOTK__STATUS_STRING(name, value, text) \
  case name:                                   \
    return text;
    AOTK_STATUS_LIST(AOTK__STATUS_STRING)
#undef AOTK__STATUS_STRING
  }
  return "unknown status: the library is older than the caller";
}

const char *aotk_last_error(void) { return last_error_message; }

int aotk_last_cuda_result(void) { return last_cuda_result; }

aotk_status aotk__fail(aotk_status status, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(last_error_message, sizeof last_error_message, format, args);
  va_end(args);
  return status;
}

void aotk__clear_error(void) {
  last_error_message[0] = '\0';
  last_cuda_result = 0;
}

void aotk__set_cuda_result(int result) { last_cuda_result = result; }

unsigned aotk_version_number(void) { return AOTK_VERSION_NUMBER; }

#define AOTK__STRINGIFY2(x) #x
#define AOTK__STRINGIFY(x) AOTK__STRINGIFY2(x)
const char *aotk_version_string(void) {
  return AOTK__STRINGIFY(AOTK_VERSION_MAJOR) "." AOTK__STRINGIFY(AOTK_VERSION_MINOR) "." AOTK__STRINGIFY(
      AOTK_VERSION_PATCH);
}
