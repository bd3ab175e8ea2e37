/*
 * CPU tests of the public API, status names and strings, versions, the per-thread last error,
 * the driver's faults (no device, no context, an old GPU, too little shared memory, and failing library
 * load, kernel lookup, attribute and launch), a missing libcuda.so.1 (skipped where the driver is
 * installed), the image policy, preload, build info, and streams of another context.
 * The fake driver and the shared models are tests/api/api_*.h; see api_fake_driver.h.
 */
#include <dlfcn.h>
#include <pthread.h>

#include "api_problems.h"

/* ---- statuses and versions ------------------------------------------------------------------ */

static void test_status_names_and_strings(void) {
  static const struct {
    aotk_status status;
    int value;
    const char *spelling;
    const char *text;
  } statuses[] = {
#define STATUS_ROW(name, value, text) {name, value, #name, text},
      AOTK_STATUS_LIST(STATUS_ROW)
#undef STATUS_ROW
  };
  enum { COUNT = sizeof statuses / sizeof statuses[0] };
  int largest = 0;
  for (int i = 0; i < COUNT; i++) {
    const char *name = aotk_status_name(statuses[i].status);
    const char *text = aotk_status_string(statuses[i].status);
    CHECK_MSG((int)statuses[i].status == statuses[i].value, "%s = %d, the list says %d", statuses[i].spelling,
              (int)statuses[i].status, statuses[i].value);
    CHECK_MSG(name != NULL && strcmp(name, statuses[i].spelling) == 0, "aotk_status_name(%d) = \"%s\", expected \"%s\"",
              statuses[i].value, name ? name : "(null)", statuses[i].spelling);
    CHECK_MSG(text != NULL && text[0] != '\0' && strcmp(text, statuses[i].text) == 0,
              "aotk_status_string(%s) = \"%s\"", statuses[i].spelling, text ? text : "(null)");
    for (int j = 0; j < i; j++) {
      CHECK_MSG(statuses[i].value != statuses[j].value, "%s and %s share the value %d", statuses[i].spelling,
                statuses[j].spelling, statuses[i].value);
      CHECK_MSG(strcmp(name, aotk_status_name(statuses[j].status)) != 0, "%s and %s share a name",
                statuses[i].spelling, statuses[j].spelling);
    }
    if (statuses[i].value > largest) largest = statuses[i].value;
  }
  CHECK_MSG(COUNT >= 26, "the list has %d statuses; the first release had 26, and none is ever removed", (int)COUNT);
  /* Explicit values, never renumbered. */
  CHECK(AOTK_OK == 0);
  CHECK(AOTK_ERROR_NULL_POINTER == 1);
  CHECK(AOTK_ERROR_STRUCT_SIZE == 2);
  CHECK(AOTK_ERROR_UNSUPPORTED_HEAD_DIM == 8);
  CHECK(AOTK_ERROR_SIZE_OVERFLOW == 14);
  CHECK(AOTK_ERROR_INVALID_VALUE == 15);
  CHECK(AOTK_ERROR_NO_DRIVER == 16);
  CHECK(AOTK_ERROR_UNSUPPORTED_ARCH == 19);
  CHECK(AOTK_ERROR_CUDA == 22);
  CHECK(AOTK_ERROR_INTERNAL == 25);

  const int unknown_values[] = {largest + 1, 1000, -1, INT32_MAX};
  for (size_t i = 0; i < sizeof unknown_values / sizeof unknown_values[0]; i++) {
    aotk_status unknown = (aotk_status)unknown_values[i];
    const char *name = aotk_status_name(unknown);
    const char *text = aotk_status_string(unknown);
    CHECK_MSG(name != NULL && strcmp(name, "AOTK_STATUS_UNKNOWN") == 0, "aotk_status_name(%d) = \"%s\"",
              unknown_values[i], name ? name : "(null)");
    CHECK_MSG(text != NULL && text[0] != '\0', "aotk_status_string(%d) is empty", unknown_values[i]);
  }
}

static void test_version(void) {
  CHECK(AOTK_VERSION_NUMBER == AOTK_VERSION_MAJOR * 10000 + AOTK_VERSION_MINOR * 100 + AOTK_VERSION_PATCH);
  CHECK_MSG(aotk_version_number() == AOTK_VERSION_NUMBER, "aotk_version_number() = %u, the header says %d",
            aotk_version_number(), AOTK_VERSION_NUMBER);
  char expected[32];
  snprintf(expected, sizeof expected, "%d.%d.%d", AOTK_VERSION_MAJOR, AOTK_VERSION_MINOR, AOTK_VERSION_PATCH);
  const char *version = aotk_version_string();
  CHECK_MSG(version != NULL && strcmp(version, expected) == 0, "aotk_version_string() = \"%s\", expected \"%s\"",
            version ? version : "(null)", expected);
}

/* ---- the last error ------------------------------------------------------------------------- */

static void test_last_error_cleared_by_success(void) {
  aotk_attn_params params = valid_params();
  params.q.data = NULL;
  CHECK(aotk_attn_fwd(&params, NULL) == AOTK_ERROR_NULL_POINTER);
  CHECK_MSG(message_mentions("q.data"), "message \"%s\" does not name q.data", aotk_last_error());
  aotk_build_info info = AOTK_BUILD_INFO_INIT;
  CHECK(aotk_get_build_info(&info) == AOTK_OK);
  CHECK_MSG(aotk_last_error() != NULL && aotk_last_error()[0] == '\0', "after a success: \"%s\"", aotk_last_error());
  CHECK(aotk_last_cuda_result() == 0);
}

typedef struct thread_record {
  char message_at_start[512];
  int cuda_result_at_start;
  aotk_status status;
  char message_after_failure[512];
  char message_after_success[512];
} thread_record;

static void *thread_fails_then_succeeds(void *argument) {
  thread_record *record = argument;
  snprintf(record->message_at_start, sizeof record->message_at_start, "%s", aotk_last_error());
  record->cuda_result_at_start = aotk_last_cuda_result();
  aotk_attn_params params = valid_params();
  params.struct_size = 0;
  record->status = aotk_attn_fwd(&params, NULL);
  snprintf(record->message_after_failure, sizeof record->message_after_failure, "%s", aotk_last_error());
  aotk_build_info info = AOTK_BUILD_INFO_INIT;
  aotk_get_build_info(&info);
  snprintf(record->message_after_success, sizeof record->message_after_success, "%s", aotk_last_error());
  return NULL;
}

static void test_last_error_is_per_thread(void) {
  /* This thread's failure: a driver failure, so that the CUresult is set too. */
  install_fake_gpu(90, SHARED_SM90);
  fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
  aotk_attn_params params = valid_params();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_ERROR_CUDA);
  char own_message[512];
  snprintf(own_message, sizeof own_message, "%s", aotk_last_error());
  CHECK_MSG(strstr(own_message, "cuLaunchKernel") != NULL, "message \"%s\"", own_message);
  CHECK(aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY);

  thread_record record;
  memset(&record, 0, sizeof record);
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, thread_fails_then_succeeds, &record) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK_MSG(record.message_at_start[0] == '\0', "a new thread starts with \"%s\"", record.message_at_start);
  CHECK(record.cuda_result_at_start == 0);
  CHECK(record.status == AOTK_ERROR_STRUCT_SIZE);
  CHECK_MSG(strstr(record.message_after_failure, "struct_size") != NULL, "the thread's message: \"%s\"",
            record.message_after_failure);
  CHECK(record.message_after_success[0] == '\0');
  /* Neither the thread's failure nor its success touched this thread's record. */
  CHECK_MSG(strcmp(aotk_last_error(), own_message) == 0, "this thread's message became \"%s\"", aotk_last_error());
  CHECK(aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY);
  uninstall_fake_gpu();
}

/* softcap. */
static void set_softcap(aotk_attn_params *p) { p->softcap = 30.0f; }

/* ---- faults --------------------------------------------------------------------------------- */

/* Runs the valid default problem through aotk_attn_fwd and aotk_query; both must give `expected`,
 * nothing may launch, and a failed query must leave *info alone. */
static void check_fault(const char *what, aotk_status expected, aotk_status expected_from_query, const char *mentions) {
  aotk_attn_params params = valid_params();
  aotk_status status = aotk_attn_fwd(&params, FAKE_STREAM);
  CHECK_MSG(status == expected, "%s: aotk_attn_fwd gave %s (%s), expected %s", what, aotk_status_name(status),
            aotk_last_error(), aotk_status_name(expected));
  CHECK_MSG(message_mentions(mentions), "%s: the message \"%s\" does not mention \"%s\"", what, aotk_last_error(),
            mentions);
  CHECK_MSG(fake.launches == 0, "%s: launched", what);

  aotk_kernel_info info;
  poison_info(&info);
  aotk_status query_status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
  CHECK_MSG(query_status == expected_from_query, "%s: aotk_query gave %s (%s), expected %s", what,
            aotk_status_name(query_status), aotk_last_error(), aotk_status_name(expected_from_query));
  if (query_status != AOTK_OK) CHECK_MSG(info_untouched(&info), "%s: aotk_query wrote *info on failure", what);
}

static void test_fault_no_device(void) {
  install_fake_gpu(90, SHARED_SM90);
  fake.init_result = CUDA_ERROR_NO_DEVICE;
  check_fault("cuInit: no device", AOTK_ERROR_NO_DEVICE, AOTK_ERROR_NO_DEVICE, "cuInit");
  aotk_attn_params params = valid_params();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_ERROR_NO_DEVICE);
  CHECK_MSG(aotk_last_cuda_result() == CUDA_ERROR_NO_DEVICE, "aotk_last_cuda_result() = %d", aotk_last_cuda_result());
  CHECK(aotk_preload() == AOTK_ERROR_NO_DEVICE);

  install_fake_gpu(90, SHARED_SM90);
  fake.init_result = CUDA_ERROR_NOT_INITIALIZED;
  check_fault("cuInit: another failure", AOTK_ERROR_CUDA, AOTK_ERROR_CUDA, injected_error_name);
  CHECK(aotk_last_cuda_result() == CUDA_ERROR_NOT_INITIALIZED);
  uninstall_fake_gpu();
}

static void test_fault_no_context(void) {
  install_fake_gpu(90, SHARED_SM90);
  fake.has_context = false;
  check_fault("no current context", AOTK_ERROR_NO_CONTEXT, AOTK_ERROR_NO_CONTEXT, "context");
  CHECK(aotk_preload() == AOTK_ERROR_NO_CONTEXT);
  CHECK(fake.calls[CALL_cuLibraryLoadData] == 0);

  install_fake_gpu(90, SHARED_SM90);
  fake.context_result = CUDA_ERROR_INVALID_CONTEXT;
  check_fault("cuCtxGetCurrent fails", AOTK_ERROR_CUDA, AOTK_ERROR_CUDA, "cuCtxGetCurrent");
  CHECK(aotk_last_cuda_result() == CUDA_ERROR_INVALID_CONTEXT);
  uninstall_fake_gpu();
}

static void test_fault_old_gpu(void) {
  static const int old[] = {75, 70, 61};
  for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) {
    install_fake_gpu(old[i], 64 * 1024);
    char sm[16];
    snprintf(sm, sizeof sm, "sm_%d", old[i]);
    check_fault(sm, AOTK_ERROR_UNSUPPORTED_ARCH, AOTK_ERROR_UNSUPPORTED_ARCH, sm);
    CHECK(aotk_preload() == AOTK_ERROR_UNSUPPORTED_ARCH);
    CHECK(fake.calls[CALL_cuLibraryLoadData] == 0);
  }
  uninstall_fake_gpu();
}

/* A GPU whose opt-in shared memory is one byte short of what the chosen kernel needs: the pointer
 * kernels (q laid out heads-outer, which TMA cannot read) are refused; a TMA kernel that does not fit
 * gives way to the next choice (the three-warpgroup kernel to the two-warpgroup one, that to the pointer
 * kernel; with dropout the Triton TMA kernel to the pointer kernel), which runs. */
static void test_fault_too_little_shared_memory(void) {
  static const int compute_capabilities[] = {90, 86};
  problem problems[2] = {default_problem, default_problem};
  problems[1].head_dim = 128;
  problems[1].seqlen_q = 4096;
  for (size_t c = 0; c < 2; c++) {
    for (size_t p = 0; p < 2; p++) {
      install_fake_gpu(compute_capabilities[c], SHARED_SM90);
      aotk_attn_params params = params_for(problems[p]);
      make_heads_outer(&params.q);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);

      install_fake_gpu(compute_capabilities[c], info.shared_bytes); /* exactly enough */
      CHECK_MSG(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK, "sm_%d %s with exactly %d bytes: %s",
                compute_capabilities[c], info.kernel_name, info.shared_bytes, aotk_last_error());

      install_fake_gpu(compute_capabilities[c], info.shared_bytes - 1);
      aotk_status status = aotk_attn_fwd(&params, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_UNSUPPORTED_ARCH, "sm_%d %s with %d bytes: %s", compute_capabilities[c],
                info.kernel_name, info.shared_bytes - 1, aotk_status_name(status));
      CHECK_MSG(message_mentions(info.kernel_name), "the message \"%s\" does not name the kernel", aotk_last_error());
      CHECK(fake.launches == 0 && fake.calls[CALL_cuLibraryLoadData] == 0);
      aotk_kernel_info refused;
      poison_info(&refused);
      CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &refused) == AOTK_ERROR_UNSUPPORTED_ARCH);
      CHECK(info_untouched(&refused));
    }
  }
  /* The chains of choices, written out: d64 without a mask at 2048 rows runs the three-warpgroup kernel,
   * then the two-warpgroup one, then the pointer kernel; causal d64, and d64 with ALiBi (an EXTRAS row),
   * start at the two-warpgroup kernel. The Triton TMA kernel has only EXTRAS rows, so plain d128 goes
   * from the two-warpgroup kernel straight to the pointer kernel, d128 with softcap through the Triton
   * TMA kernel's EXTRAS row, and d128 with dropout starts at the Gluon forward's dropout form (not an
   * EXTRAS row), then the Triton TMA kernel's EXTRAS row. */
  static const struct {
    int64_t head_dim, seqlen_q;
    int causal;
    void (*set_extras)(aotk_attn_params *); /* NULL: none */
    const char *extras_name;
    int chain[4];
  } chains[] = {
      {64, 2048, 0, NULL, "",
       {AOTK__FAMILY_ATTN_FWD_HOPPER_WG3, AOTK__FAMILY_ATTN_FWD_HOPPER, AOTK__FAMILY_ATTN_FWD, AOTK__FAMILY_ATTN_FWD}},
      {64, 2048, 1, NULL, "",
       {AOTK__FAMILY_ATTN_FWD_HOPPER, AOTK__FAMILY_ATTN_FWD, AOTK__FAMILY_ATTN_FWD, AOTK__FAMILY_ATTN_FWD}},
      {64, 2048, 0, set_alibi, " ALiBi",
       {AOTK__FAMILY_ATTN_FWD_HOPPER, AOTK__FAMILY_ATTN_FWD, AOTK__FAMILY_ATTN_FWD, AOTK__FAMILY_ATTN_FWD}},
      {128, 4096, 0, NULL, "",
       {AOTK__FAMILY_ATTN_FWD_HOPPER, AOTK__FAMILY_ATTN_FWD, AOTK__FAMILY_ATTN_FWD, AOTK__FAMILY_ATTN_FWD}},
      {128, 4096, 0, set_softcap, " softcap",
       {AOTK__FAMILY_ATTN_FWD_HOPPER, AOTK__FAMILY_ATTN_FWD_TMA, AOTK__FAMILY_ATTN_FWD, AOTK__FAMILY_ATTN_FWD}},
      {128, 4096, 0, set_dropout, " dropout",
       {AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT, AOTK__FAMILY_ATTN_FWD_TMA, AOTK__FAMILY_ATTN_FWD, AOTK__FAMILY_ATTN_FWD}},
  };
  for (size_t c = 0; c < sizeof chains / sizeof chains[0]; c++) {
    problem p = default_problem;
    p.head_dim = chains[c].head_dim, p.seqlen_q = chains[c].seqlen_q;
    aotk_attn_params params = params_for(p);
    params.causal = chains[c].causal;
    if (chains[c].set_extras != NULL) chains[c].set_extras(&params);
    const bool extras = chains[c].set_extras != NULL;
    char what[48];
    snprintf(what, sizeof what, "d%lld%s%s", (long long)p.head_dim, chains[c].causal ? " causal" : "",
             chains[c].extras_name);
    int shared = SHARED_SM90, reached = chains[c].chain[0];
    /* Each TMA kernel one byte short in turn, until the pointer kernel's turn: it runs, or where it needs
     * more than the TMA kernel it replaces, it is refused as above. */
    for (int step = 0; step < 3 && reached != AOTK__FAMILY_ATTN_FWD; step++) {
      const int family = chains[c].chain[step], next_family = chains[c].chain[step + 1];
      install_fake_gpu(90, shared);
      int modelled = expected_fwd_family(&params, 90, false, shared);
      CHECK_MSG(modelled == family, "%s with %d bytes: the test's rule says %s", what, shared,
                kernel_signatures[fwd_kernel_id(modelled)].function);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
      const aotk__kernel_entry *row = table_row_named(info.kernel_name, 90);
      /* The Gluon forward's dropout form carries dropout alone: not an EXTRAS row. */
      const bool extras_row = extras && family != AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT;
      CHECK_MSG(row != NULL && row->family == family && fwd_family_of_name(info.kernel_name) == family &&
                    row->extras == extras_row,
                "%s with %d bytes: runs %s, expected a %s kernel%s", what, shared, info.kernel_name,
                kernel_signatures[fwd_kernel_id(family)].function, extras_row ? " (an EXTRAS row)" : "");
      if (row == NULL || row->family != family) break;
      shared = info.shared_bytes - 1;
      install_fake_gpu(90, shared);
      modelled = expected_fwd_family(&params, 90, false, shared);
      CHECK_MSG(modelled == next_family, "%s with %d bytes: the test's rule says %s", what, shared,
                kernel_signatures[fwd_kernel_id(modelled)].function);
      aotk_kernel_info next = AOTK_KERNEL_INFO_INIT;
      aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &next);
      const aotk__kernel_entry *fallback = status == AOTK_OK ? table_row_named(next.kernel_name, 90) : NULL;
      if (status == AOTK_ERROR_UNSUPPORTED_ARCH && next_family == AOTK__FAMILY_ATTN_FWD) {
        CHECK_MSG(message_mentions("attn_fwd_") && !message_mentions("attn_fwd_tma_") &&
                      !message_mentions("attn_fwd_hopper_"),
                  "%s one short of %s: \"%s\", not the pointer kernel's refusal", what, info.kernel_name,
                  aotk_last_error());
        CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_ERROR_UNSUPPORTED_ARCH && fake.launches == 0);
        reached = next_family;
        break;
      }
      CHECK_MSG(status == AOTK_OK && fallback != NULL && fallback->family == next_family &&
                    fwd_family_of_name(next.kernel_name) == next_family && fallback->shared_bytes <= shared,
                "%s one short of %s: %s runs %s, expected a %s kernel", what, info.kernel_name,
                aotk_status_name(status), next.kernel_name, kernel_signatures[fwd_kernel_id(next_family)].function);
      if (fallback == NULL || fallback->family != next_family) break;
      reset_launch_log();
      CHECK_MSG(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK && fake.launches == 1 && fake.logged_launches == 1 &&
                    fake.launch_log[0].kernel == fwd_kernel_id(next_family),
                "%s with %d bytes, one short of %s: %s", what, shared, info.kernel_name, aotk_last_error());
      reached = next_family;
    }
    CHECK_MSG(reached == AOTK__FAMILY_ATTN_FWD, "%s: never fell back to the pointer kernel", what);
  }
  uninstall_fake_gpu();
}

static void test_fault_library_load_fails(void) {
  enum { CUDA_ERROR_NO_BINARY_FOR_GPU = 209 };
  install_fake_gpu(90, SHARED_SM90);
  fake.library_load_result = CUDA_ERROR_NO_BINARY_FOR_GPU;
  /* aotk_query loads nothing, so it cannot see this failure: it reports what would run. */
  check_fault("cuLibraryLoadData fails", AOTK_ERROR_CUDA, AOTK_OK, "cuLibraryLoadData");
  aotk_attn_params params = valid_params();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_ERROR_CUDA);
  CHECK_MSG(aotk_last_cuda_result() == CUDA_ERROR_NO_BINARY_FOR_GPU, "aotk_last_cuda_result() = %d",
            aotk_last_cuda_result());
  CHECK_MSG(message_mentions(injected_error_name), "the message \"%s\" lacks the driver's error name",
            aotk_last_error());
  CHECK(fake.calls[CALL_cuLibraryGetKernel] == 0);
  CHECK(aotk_preload() == AOTK_ERROR_CUDA);

  /* A failed load is not remembered: once the driver recovers, the call goes through. */
  fake.library_load_result = CUDA_SUCCESS;
  CHECK_MSG(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK, "after recovery: %s", aotk_last_error());
  CHECK(fake.launches == 1);
  CHECK(aotk_last_cuda_result() == 0);
  uninstall_fake_gpu();
}

static void test_fault_get_kernel_fails(void) {
  install_fake_gpu(90, SHARED_SM90);
  fake.get_kernel_result = CUDA_ERROR_INVALID_VALUE;
  check_fault("cuLibraryGetKernel fails", AOTK_ERROR_CUDA, AOTK_OK, "cuLibraryGetKernel");
  CHECK(aotk_last_cuda_result() == 0); /* the query succeeded last */
  aotk_attn_params params = valid_params();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_ERROR_CUDA);
  CHECK(aotk_last_cuda_result() == CUDA_ERROR_INVALID_VALUE);
  uninstall_fake_gpu();
}

/* Above 48 KiB of dynamic shared memory the kernel must opt in; below, the call is not made. */
static void test_fault_set_attribute_fails(void) {
  problem big = default_problem;
  big.head_dim = 128;
  for (int i = 0; i < 2; i++) {
    install_fake_gpu(90, SHARED_SM90);
    aotk_attn_params params = params_for(i == 0 ? big : default_problem);
    /* The second: d64 with an unaligned q, the variant with the smallest tiles. */
    if (i == 1) params.q.data = byte_offset(FAKE_Q, 2);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
    bool opts_in = info.shared_bytes > 48 * 1024;
    fake.set_attribute_result = CUDA_ERROR_INVALID_VALUE;
    aotk_status status = aotk_attn_fwd(&params, FAKE_STREAM);
    if (opts_in) {
      CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuKernelSetAttribute"), "%s (%d bytes): %s, \"%s\"",
                info.kernel_name, info.shared_bytes, aotk_status_name(status), aotk_last_error());
      CHECK(fake.launches == 0);
    } else {
      CHECK_MSG(status == AOTK_OK && fake.calls[CALL_cuKernelSetAttribute] == 0,
                "%s (%d bytes) asked for more shared memory than the default: %s", info.kernel_name, info.shared_bytes,
                aotk_status_name(status));
    }
  }
  uninstall_fake_gpu();
}

static void test_fault_launch_fails(void) {
  install_fake_gpu(90, SHARED_SM90);
  fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
  check_fault("cuLaunchKernel fails", AOTK_ERROR_CUDA, AOTK_OK, "cuLaunchKernel");
  aotk_attn_params params = valid_params();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_ERROR_CUDA);
  CHECK(aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY);
  uninstall_fake_gpu();
}

static void test_image_policy(void) {
  aotk_attn_params params = valid_params();
  install_fake_gpu(90, SHARED_SM90);
  CHECK(aotk_set_image_policy(AOTK_IMAGE_POLICY_SM80_PTX) == AOTK_OK);
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
  CHECK_MSG(info.arch == 80 && info.from_ptx == 1, "SM80_PTX on cc 9.0: arch %d from_ptx %d", info.arch, info.from_ptx);
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK);
  CHECK_MSG(fake.loaded_ptx == 1 && fake.loaded_elf == 0, "SM80_PTX on cc 9.0 loaded %d ELF, %d PTX", fake.loaded_elf,
            fake.loaded_ptx);

  install_fake_gpu(86, SHARED_SM86);
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
  CHECK_MSG(info.arch == 80 && info.from_ptx == 1, "SM80_PTX on cc 8.6: arch %d from_ptx %d", info.arch, info.from_ptx);

  /* Bad values are refused and leave the policy as it was. */
  static const int bad_policies[] = {2, -1, 1000};
  for (size_t i = 0; i < sizeof bad_policies / sizeof bad_policies[0]; i++) {
    aotk_status status = aotk_set_image_policy((aotk_image_policy)bad_policies[i]);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "policy %d: %s", bad_policies[i], aotk_status_name(status));
    CHECK_MSG(message_mentions("policy"), "policy %d: message \"%s\"", bad_policies[i], aotk_last_error());
  }
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK && info.from_ptx == 1);

  CHECK(aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO) == AOTK_OK);
  CHECK(aotk_last_error()[0] == '\0');
  install_fake_gpu(90, SHARED_SM90);
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
  CHECK_MSG(info.arch == 90 && info.from_ptx == 0, "AUTO again on cc 9.0: arch %d from_ptx %d", info.arch,
            info.from_ptx);
  uninstall_fake_gpu();
}

/* aotk_preload loads every kernel the GPU can run, once, so that no later call loads one. */
static void test_preload(void) {
  static const gpu gpus[] = {{90, SHARED_SM90, 90, 0}, {86, SHARED_SM86, 80, 0}, {120, SHARED_SM120, 80, 1},
                             {90, 100 * 1024, 90, 0}};
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    int expected = 0;
    for (int i = 0; i < aotk__kernel_count; i++) {
      expected += aotk__kernel_table[i].arch == gpus[g].arch &&
                  aotk__kernel_table[i].shared_bytes <= gpus[g].max_shared_bytes;
    }
    aotk_status status = aotk_preload();
    CHECK_MSG(status == AOTK_OK, "cc %d: %s (%s)", gpus[g].compute_capability, aotk_status_name(status),
              aotk_last_error());
    CHECK_MSG(fake.loaded_images == expected && (gpus[g].from_ptx ? fake.loaded_ptx : fake.loaded_elf) == expected,
              "cc %d with %d bytes: loaded %d images (%d ELF, %d PTX), expected %d", gpus[g].compute_capability,
              gpus[g].max_shared_bytes, fake.loaded_images, fake.loaded_elf, fake.loaded_ptx, expected);
    CHECK(fake.launches == 0);
    aotk_attn_params params = valid_params();
    CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK);
    CHECK_MSG(fake.loaded_images == expected, "cc %d: a launch after preload loaded an image",
              gpus[g].compute_capability);
  }
  uninstall_fake_gpu();
}

/* ---- the real driver ------------------------------------------------------------------------ */

static void test_no_driver(void) {
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle != NULL) {
    dlclose(handle);
    TEST_SKIP("libcuda.so.1 is installed: AOTK_ERROR_NO_DRIVER cannot happen here");
    return;
  }
  uninstall_fake_gpu();
  aotk_attn_params params = valid_params();
  aotk_status status = aotk_attn_fwd(&params, FAKE_STREAM);
  CHECK_MSG(status == AOTK_ERROR_NO_DRIVER, "aotk_attn_fwd: %s (%s)", aotk_status_name(status), aotk_last_error());
  CHECK_MSG(message_mentions("libcuda.so.1"), "the message \"%s\" does not name libcuda.so.1", aotk_last_error());
  CHECK(aotk_last_cuda_result() == 0);
  aotk_kernel_info info;
  poison_info(&info);
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_ERROR_NO_DRIVER);
  CHECK(info_untouched(&info));
  CHECK(aotk_preload() == AOTK_ERROR_NO_DRIVER);
  CHECK(message_mentions("libcuda.so.1"));
}

/* ---- build info ------------------------------------------------------------------------------ */

static void test_build_info(void) {
  aotk_build_info info;
  memset(&info, 0, sizeof info);
  CHECK(aotk_get_build_info(&info) == AOTK_ERROR_STRUCT_SIZE);
  CHECK(message_mentions("struct_size"));
  CHECK(aotk_get_build_info(NULL) == AOTK_ERROR_NULL_POINTER);

  aotk_build_info full = AOTK_BUILD_INFO_INIT;
  CHECK(aotk_get_build_info(&full) == AOTK_OK);
  CHECK(full.struct_size == sizeof full);
  CHECK_MSG(full.triton_version != NULL && strcmp(full.triton_version, "3.6.0") == 0, "triton_version \"%s\"",
            full.triton_version ? full.triton_version : "(null)");
  CHECK(full.ptxas_version != NULL && full.ptxas_version[0] != '\0');
  int sm80 = 0, sm90 = 0;
  for (int i = 0; i < aotk__kernel_count; i++) {
    sm80 += aotk__kernel_table[i].arch == 80;
    sm90 += aotk__kernel_table[i].arch == 90;
  }
  CHECK_MSG(full.kernels_sm80 > 0 && full.kernels_sm80 == sm80, "kernels_sm80 %d, the table has %d", full.kernels_sm80,
            sm80);
  CHECK_MSG(full.kernels_sm90 > 0 && full.kernels_sm90 == sm90, "kernels_sm90 %d, the table has %d", full.kernels_sm90,
            sm90);
  CHECK(full.image_bytes_sm80 > 0 && full.image_bytes_sm90 > 0);
  CHECK(full.catalog_kernels == aotk__catalog_kernel_count && full.catalog_kernels >= sm80 + sm90);

  /* An older caller's smaller struct: only its prefix is written. */
  aotk_build_info partial;
  aotk_build_info *prefix = &partial;
  const unsigned char *buffer = (const unsigned char *)&partial;
  memset(&partial, 0xCD, sizeof partial);
  const size_t prefix_bytes = offsetof(aotk_build_info, kernels_sm80);
  prefix->struct_size = prefix_bytes;
  CHECK(aotk_get_build_info(prefix) == AOTK_OK);
  CHECK(prefix->struct_size == prefix_bytes);
  CHECK(prefix->triton_version == full.triton_version && prefix->ptxas_version == full.ptxas_version);
  bool tail_untouched = true;
  for (size_t i = prefix_bytes; i < sizeof partial; i++) tail_untouched = tail_untouched && buffer[i] == 0xCD;
  CHECK_MSG(tail_untouched, "aotk_get_build_info wrote past struct_size = %zu", prefix_bytes);

  /* Just the size field: nothing else written, and still a success. */
  memset(&partial, 0xCD, sizeof partial);
  prefix->struct_size = sizeof(size_t);
  CHECK(aotk_get_build_info(prefix) == AOTK_OK);
  tail_untouched = true;
  for (size_t i = sizeof(size_t); i < sizeof partial; i++) tail_untouched = tail_untouched && buffer[i] == 0xCD;
  CHECK(tail_untouched);
}

/* ---- the stream's context ------------------------------------------------------------------ */

/* A context other than the current one (FAKE_CONTEXT): the context of another device's stream. */
#define OTHER_CONTEXT ((CUcontext)(uintptr_t)0x6100u)

/* Each public call that launches on a stream, on a valid problem of its own. The decoding call splits
 * (a merge follows); on the fake sm_90 the backward takes the non-deterministic plan (a memset first). */
static aotk_status stream_call_attn_fwd(aotk_stream stream) {
  aotk_attn_params params = valid_params();
  return aotk_attn_fwd(&params, stream);
}
static aotk_status stream_call_attn_bwd(aotk_stream stream) {
  aotk_attn_params params = valid_bwd_params();
  return aotk_attn_bwd(&params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, stream);
}
static aotk_status stream_call_sel_fwd(aotk_stream stream) {
  aotk_sel_params params = valid_sel_params();
  return aotk_sel_fwd(&params, stream);
}
static aotk_status stream_call_sel_bwd(aotk_stream stream) {
  aotk_sel_params params = valid_sel_bwd_params();
  return aotk_sel_bwd(&params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, stream);
}
static aotk_status stream_call_sel_check_indices(aotk_stream stream) {
  aotk_sel_params params = valid_sel_params();
  return aotk_sel_check_indices(&params, FAKE_WORKSPACE, 16, stream);
}
static aotk_status stream_call_decode(aotk_stream stream) {
  aotk_decode_params params = valid_decode_params();
  params.num_splits = 4;
  return aotk_attn_decode(&params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, stream);
}
static aotk_status stream_call_merge(aotk_stream stream) {
  aotk_merge_params params = valid_merge_params();
  return aotk_attn_merge(&params, stream);
}

static const struct stream_call {
  const char *what;
  aotk_status (*call)(aotk_stream stream);
  int launches; /* on success */
} stream_calls[] = {
    {"aotk_attn_fwd", stream_call_attn_fwd, 1},
    {"aotk_attn_bwd", stream_call_attn_bwd, 3},
    {"aotk_sel_fwd", stream_call_sel_fwd, 1},
    {"aotk_sel_bwd", stream_call_sel_bwd, 7},
    {"aotk_sel_check_indices", stream_call_sel_check_indices, 1},
    {"aotk_attn_decode", stream_call_decode, 2},
    {"aotk_attn_merge", stream_call_merge, 1},
};

/* Whether every driver call since the last reset_calls only found the device and the stream's context
 * (or named a failure): nothing was loaded, encoded, cleared, copied, synchronized or launched. */
static bool only_planning_calls(void) {
  static const int planning[] = {CALL_cuInit,         CALL_cuCtxGetCurrent, CALL_cuCtxGetDevice,  CALL_cuDeviceGetAttribute,
                                 CALL_cuStreamGetCtx, CALL_cuGetErrorName,  CALL_cuGetErrorString};
  int allowed = 0;
  for (size_t i = 0; i < sizeof planning / sizeof planning[0]; i++) allowed += fake.calls[planning[i]];
  return allowed == total_calls();
}

/* The kernels are context-independent, so the driver would run a launch in its stream's context even
 * when another is current, with a plan made for the current context's device (measured on two GPUs).
 * Every launching call refuses such a stream, AOTK_ERROR_NO_CONTEXT with a message, before it loads,
 * encodes, clears, copies or launches anything, on a first call (nothing loaded yet) and after a
 * success; a failing cuStreamGetCtx (a destroyed stream) is AOTK_ERROR_CUDA, touching nothing either.
 * The current context's stream runs, after one cuStreamGetCtx; the default streams (NULL,
 * CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) belong to whatever context is current and run without one.
 * The queries take no stream and never ask. */
static void test_stream_of_another_context(void) {
  const size_t count = sizeof stream_calls / sizeof stream_calls[0];
  for (int round = 0; round < 2; round++) {
    install_fake_gpu(90, SHARED_SM90);
    if (round == 1) {
      /* Everything loaded and the device cached first: the refusal does not depend on a first use. */
      for (size_t i = 0; i < count; i++) CHECK(stream_calls[i].call(FAKE_STREAM) == AOTK_OK);
    }
    for (size_t i = 0; i < count; i++) {
      const struct stream_call *c = &stream_calls[i];
      fake.stream_context = OTHER_CONTEXT;
      reset_calls();
      reset_launch_log();
      fake.launches = 0;
      aotk_status status = c->call(FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_NO_CONTEXT, "round %d, %s: %s (%s), expected AOTK_ERROR_NO_CONTEXT", round,
                c->what, aotk_status_name(status), aotk_last_error());
      CHECK_MSG(message_mentions("the stream belongs to another CUDA context") &&
                    message_mentions("make the stream's context"),
                "round %d, %s: the message \"%s\"", round, c->what, aotk_last_error());
      CHECK_MSG(fake.calls[CALL_cuStreamGetCtx] == 1 && fake.stream_context_asked == (CUstream)FAKE_STREAM,
                "round %d, %s: %d cuStreamGetCtx calls", round, c->what, fake.calls[CALL_cuStreamGetCtx]);
      CHECK_MSG(only_planning_calls() && fake.launches == 0 && fake.memsets == 0,
                "round %d, %s: the refused call went on (%s)", round, c->what, called_functions());

      fake.stream_context = NULL;
      fake.stream_context_result = CUDA_ERROR_INVALID_CONTEXT;
      reset_calls();
      status = c->call(FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuStreamGetCtx") &&
                    aotk_last_cuda_result() == CUDA_ERROR_INVALID_CONTEXT,
                "round %d, %s with a failing cuStreamGetCtx: %s (%s)", round, c->what, aotk_status_name(status),
                aotk_last_error());
      CHECK_MSG(only_planning_calls() && fake.launches == 0 && fake.memsets == 0,
                "round %d, %s with a failing cuStreamGetCtx: the call went on (%s)", round, c->what,
                called_functions());
      fake.stream_context_result = CUDA_SUCCESS;
    }
    for (size_t i = 0; i < count; i++) {
      const struct stream_call *c = &stream_calls[i];
      reset_calls();
      reset_launch_log();
      aotk_status status = c->call(FAKE_STREAM);
      CHECK_MSG(status == AOTK_OK && fake.logged_launches == c->launches && fake.launch.stream == (CUstream)FAKE_STREAM,
                "round %d, %s on the current context's stream: %s (%s), %d launches", round, c->what,
                aotk_status_name(status), aotk_last_error(), fake.logged_launches);
      CHECK_MSG(fake.calls[CALL_cuStreamGetCtx] == 1, "round %d, %s: %d cuStreamGetCtx calls", round, c->what,
                fake.calls[CALL_cuStreamGetCtx]);
    }
  }

  /* The default streams: any context's, so never asked about, even where every other stream is refused. */
  static const struct {
    const char *what;
    aotk_stream stream;
  } default_streams[] = {{"NULL", NULL},
                         {"CU_STREAM_LEGACY", (aotk_stream)(uintptr_t)0x1},
                         {"CU_STREAM_PER_THREAD", (aotk_stream)(uintptr_t)0x2}};
  install_fake_gpu(90, SHARED_SM90);
  fake.stream_context = OTHER_CONTEXT;
  for (size_t s = 0; s < sizeof default_streams / sizeof default_streams[0]; s++) {
    for (size_t i = 0; i < count; i++) {
      const struct stream_call *c = &stream_calls[i];
      reset_calls();
      reset_launch_log();
      aotk_status status = c->call(default_streams[s].stream);
      CHECK_MSG(status == AOTK_OK && fake.logged_launches == c->launches &&
                    fake.launch.stream == (CUstream)default_streams[s].stream,
                "%s on %s: %s (%s), %d launches", c->what, default_streams[s].what, aotk_status_name(status),
                aotk_last_error(), fake.logged_launches);
      CHECK_MSG(fake.calls[CALL_cuStreamGetCtx] == 0, "%s on %s: cuStreamGetCtx called", c->what,
                default_streams[s].what);
    }
  }

  /* The queries launch nothing and take no stream: they answer as before, without asking. */
  reset_calls();
  aotk_attn_params attn = valid_bwd_params();
  aotk_sel_params sel = valid_sel_bwd_params();
  aotk_decode_params decode = valid_decode_params();
  aotk_merge_params merge = valid_merge_params();
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &attn, &info) == AOTK_OK && aotk_query(AOTK_OP_ATTN_BWD, &attn, &info) == AOTK_OK);
  CHECK(aotk_sel_query(AOTK_OP_SEL_FWD, &sel, &info) == AOTK_OK && aotk_sel_query(AOTK_OP_SEL_BWD, &sel, &info) == AOTK_OK);
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &decode, &info) == AOTK_OK);
  CHECK(aotk_merge_query(AOTK_OP_MERGE, &merge, &info) == AOTK_OK);
  CHECK(aotk_preload() == AOTK_OK);
  CHECK_MSG(fake.calls[CALL_cuStreamGetCtx] == 0, "a query or aotk_preload called cuStreamGetCtx");
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_status_names_and_strings);
  RUN_TEST(test_version);
  RUN_TEST(test_last_error_cleared_by_success);
  RUN_TEST(test_last_error_is_per_thread);
  RUN_TEST(test_fault_no_device);
  RUN_TEST(test_fault_no_context);
  RUN_TEST(test_fault_old_gpu);
  RUN_TEST(test_fault_too_little_shared_memory);
  RUN_TEST(test_fault_library_load_fails);
  RUN_TEST(test_fault_get_kernel_fails);
  RUN_TEST(test_fault_set_attribute_fails);
  RUN_TEST(test_fault_launch_fails);
  RUN_TEST(test_image_policy);
  RUN_TEST(test_preload);
  RUN_TEST(test_no_driver);
  RUN_TEST(test_build_info);
  RUN_TEST(test_stream_of_another_context);
  aotk__driver_set_for_testing(NULL);
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);
  return aotk_test_finish();
}
