/*
 * A user's program against an installed aotk: only <aotk.h> and the library, through the public API.
 * Built three ways by tests/test_install.cmake (CMake with the shared target, CMake with the static
 * target, plain cc with pkg-config). Needs no GPU: every call made here answers without the driver.
 * Prints what it checks; exits 0 when every check holds, 1 otherwise.
 */
#include <aotk.h>
#include <stdio.h>
#include <string.h>

static int failures;

static void check(int condition, const char *what) {
  printf("  %s %s\n", condition ? "ok  " : "FAIL", what);
  if (!condition) failures += 1;
}

static void check_status_name(aotk_status status, const char *expected) {
  const char *name = aotk_status_name(status);
  char what[160];
  snprintf(what, sizeof what, "aotk_status_name(%d) = %s (expected %s)", (int)status, name, expected);
  check(strcmp(name, expected) == 0, what);
}

int main(int argc, char **argv) {
  printf("%s: aotk %s\n", argc > 0 ? argv[0] : "install_consumer", aotk_version_string());

  char what[160];
  snprintf(what, sizeof what, "aotk_version_number() = %u, AOTK_VERSION_NUMBER = %d", aotk_version_number(),
           AOTK_VERSION_NUMBER);
  check(aotk_version_number() == AOTK_VERSION_NUMBER, what);

  check_status_name(AOTK_OK, "AOTK_OK");
  check_status_name(AOTK_ERROR_NULL_POINTER, "AOTK_ERROR_NULL_POINTER");
  check_status_name(AOTK_ERROR_NO_DRIVER, "AOTK_ERROR_NO_DRIVER");
  check_status_name((aotk_status)9999, "AOTK_STATUS_UNKNOWN");

  aotk_build_info info = AOTK_BUILD_INFO_INIT;
  aotk_status status = aotk_get_build_info(&info);
  snprintf(what, sizeof what, "aotk_get_build_info = %s", aotk_status_name(status));
  check(status == AOTK_OK, what);
  if (status == AOTK_OK) {
    printf("  build: triton %s, ptxas %s, %d sm_80 kernels, %d sm_90 kernels, %d in the catalog\n",
           info.triton_version ? info.triton_version : "(null)", info.ptxas_version ? info.ptxas_version : "(null)",
           (int)info.kernels_sm80, (int)info.kernels_sm90, (int)info.catalog_kernels);
    check(info.kernels_sm80 + info.kernels_sm90 > 0, "the library holds at least one kernel");
  }

  status = aotk_attn_fwd(NULL, NULL);
  snprintf(what, sizeof what, "aotk_attn_fwd(NULL, NULL) = %s (\"%s\")", aotk_status_name(status), aotk_last_error());
  check(status == AOTK_ERROR_NULL_POINTER, what);

  printf("%s: %s\n", argc > 0 ? argv[0] : "install_consumer", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}
