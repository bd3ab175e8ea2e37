/*
 * CPU tests of the public API, decoding (0.4): aotk_decode_query's and aotk_merge_query's arguments (the op
 * table included), the split's workspace (its size against the header's formula, too small, NULL,
 * misaligned), and load and launch faults, each refused with nothing launched after it. The launches
 * themselves are test_api_decode.c; the fake driver and the shared models are tests/api/api_*.h.
 */
#include "api_decode_checks.h"

/* The decoding and merge queries answer their own ops; aotk_query and aotk_sel_query send callers to
 * them; an older caller's shorter info struct gets no num_splits. */
static void test_decode_query_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_decode_params params = valid_decode_params();
  params.num_splits = 4;
  reset_calls();
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, NULL) == AOTK_ERROR_NULL_POINTER && message_mentions("info"));
  aotk_kernel_info info;
  poison_info(&info);
  info.struct_size = 0;
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_ERROR_STRUCT_SIZE &&
        message_mentions("struct_size"));
  CHECK(aotk_decode_query(AOTK_OP_DECODE, NULL, &info) == AOTK_ERROR_STRUCT_SIZE);

  static const int not_decode[] = {AOTK_OP_ATTN_FWD, AOTK_OP_ATTN_BWD, AOTK_OP_SEL_FWD, AOTK_OP_SEL_BWD,
                                   AOTK_OP_MERGE,    0,                -1,              1000};
  for (size_t i = 0; i < sizeof not_decode / sizeof not_decode[0]; i++) {
    poison_info(&info);
    aotk_status status = aotk_decode_query((aotk_op)not_decode[i], &params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE && message_mentions("AOTK_OP_DECODE"),
              "aotk_decode_query(op %d): %s (%s)", not_decode[i], aotk_status_name(status), aotk_last_error());
    CHECK(info_untouched(&info));
    /* The op is checked before the params. */
    CHECK(aotk_decode_query((aotk_op)not_decode[i], NULL, &info) == AOTK_ERROR_INVALID_VALUE);
  }
  aotk_merge_params merge_params = AOTK_MERGE_PARAMS_INIT;
  static const int not_merge[] = {AOTK_OP_ATTN_FWD, AOTK_OP_ATTN_BWD, AOTK_OP_SEL_FWD, AOTK_OP_SEL_BWD,
                                  AOTK_OP_DECODE,   0,                -1,              1000};
  for (size_t i = 0; i < sizeof not_merge / sizeof not_merge[0]; i++) {
    poison_info(&info);
    aotk_status status = aotk_merge_query((aotk_op)not_merge[i], &merge_params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE && message_mentions("AOTK_OP_MERGE"),
              "aotk_merge_query(op %d): %s (%s)", not_merge[i], aotk_status_name(status), aotk_last_error());
    CHECK(info_untouched(&info));
  }
  CHECK(aotk_merge_query(AOTK_OP_MERGE, &merge_params, NULL) == AOTK_ERROR_NULL_POINTER && message_mentions("info"));
  /* The other queries name the right one. */
  aotk_attn_params attn_params = valid_params();
  aotk_sel_params sel_params = valid_sel_params();
  static const struct {
    aotk_op op;
    const char *query;
  } elsewhere[] = {{AOTK_OP_DECODE, "aotk_decode_query"}, {AOTK_OP_MERGE, "aotk_merge_query"}};
  for (size_t i = 0; i < 2; i++) {
    poison_info(&info);
    aotk_status status = aotk_query(elsewhere[i].op, &attn_params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE && message_mentions(elsewhere[i].query),
              "aotk_query(op %d): %s (%s)", (int)elsewhere[i].op, aotk_status_name(status), aotk_last_error());
    CHECK(info_untouched(&info));
    status = aotk_sel_query(elsewhere[i].op, &sel_params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "aotk_sel_query(op %d): %s", (int)elsewhere[i].op,
              aotk_status_name(status));
    CHECK(info_untouched(&info));
  }
  CHECK_MSG(total_calls() == 0, "bad query arguments reached the driver (%s)", called_functions());

  /* A full struct: num_splits written. */
  poison_info(&info);
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK && info.num_splits == 4);
  const aotk_kernel_info full = info;
  /* A caller built before 0.4: its struct ends where num_splits begins. Everything before is written as
   * for the full struct; num_splits, past its end, is not. */
  const unsigned char *bytes = (const unsigned char *)&info;
  const size_t sizes[] = {offsetof(aotk_kernel_info, num_splits), offsetof(aotk_kernel_info, features),
                          offsetof(aotk_kernel_info, num_warps), sizeof(size_t)};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    poison_info(&info);
    info.struct_size = sizes[i];
    CHECK_MSG(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK, "struct_size %zu: %s", sizes[i],
              aotk_last_error());
    CHECK(info.struct_size == sizes[i]);
    CHECK_MSG(memcmp(bytes + sizeof(size_t), (const unsigned char *)&full + sizeof(size_t),
                     sizes[i] - sizeof(size_t)) == 0,
              "struct_size %zu: the prefix differs from the full struct's", sizes[i]);
    bool tail_untouched = true;
    for (size_t b = sizes[i]; b < sizeof info; b++) tail_untouched = tail_untouched && bytes[b] == POISON;
    CHECK_MSG(tail_untouched, "aotk_decode_query wrote past struct_size = %zu", sizes[i]);
  }
  /* A struct that ends just after num_splits gets it. */
  poison_info(&info);
  info.struct_size = offsetof(aotk_kernel_info, num_splits) + sizeof info.num_splits;
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK && info.num_splits == 4);
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "aotk_decode_query loaded or launched (%s)", called_functions());
  uninstall_fake_gpu();
}

/* The split's workspace: at least the size the query reports (the header's formula, checked in
 * test_decode_split_choice), not NULL, 16-byte aligned, not running past the address space; checked
 * after the params, before anything is loaded or launched. Without a split none is needed and what is
 * passed is ignored. */
static void test_decode_workspace(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_decode_params params = valid_decode_params();
  params.num_splits = 4; /* 4 splits of 256 keys: 4 x 48 rows of 128 floats and 4 x 48 LSEs */
  const size_t needed = 98304 + 768;
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK);
  CHECK_MSG(info.workspace_bytes == needed && info.num_splits == 4, "workspace_bytes %zu, %d splits",
            info.workspace_bytes, info.num_splits);
  const struct {
    const char *what;
    void *workspace;
    size_t bytes;
    aotk_status expected;
  } workspaces[] = {
      {"NULL, the reported size", NULL, needed, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"NULL, size 0", NULL, 0, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"one byte short", FAKE_WORKSPACE, needed - 1, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"half", FAKE_WORKSPACE, needed / 2, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"size 0", FAKE_WORKSPACE, 0, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"8-byte aligned", byte_offset(FAKE_WORKSPACE, 8), needed, AOTK_ERROR_MISALIGNED_POINTER},
      {"4-byte aligned, ample", byte_offset(FAKE_WORKSPACE, 4), needed + 64, AOTK_ERROR_MISALIGNED_POINTER},
      {"odd address", byte_offset(FAKE_WORKSPACE, 1), needed, AOTK_ERROR_MISALIGNED_POINTER},
      {"16 bytes below the end of the address space", (void *)(UINTPTR_MAX - 15), needed, AOTK_ERROR_SIZE_OVERFLOW},
      {"exactly the reported size", FAKE_WORKSPACE, needed, AOTK_OK},
      {"larger, 16 bytes further", byte_offset(FAKE_WORKSPACE, 16), needed + 1, AOTK_OK},
  };
  for (size_t w = 0; w < sizeof workspaces / sizeof workspaces[0]; w++) {
    const aotk_decode_params before = params;
    reset_calls();
    reset_launch_log();
    aotk_status status = aotk_attn_decode(&params, workspaces[w].workspace, workspaces[w].bytes, FAKE_STREAM);
    CHECK_MSG(status == workspaces[w].expected, "workspace %s: %s (%s), expected %s", workspaces[w].what,
              aotk_status_name(status), aotk_last_error(), aotk_status_name(workspaces[w].expected));
    CHECK(memcmp(&params, &before, sizeof params) == 0);
    if (workspaces[w].expected == AOTK_OK) {
      CHECK_MSG(fake.logged_launches == 2 && fake.launch_log[0].kernel == KERNEL_ATTN_DECODE &&
                    arg_pointer(&fake.launch_log[0], DECODE_OUT_PARTIAL) ==
                        (uint64_t)(uintptr_t)workspaces[w].workspace,
                "workspace %s: %d launches, the partials not at its start", workspaces[w].what, fake.logged_launches);
    } else {
      CHECK_MSG(message_mentions("workspace"), "workspace %s: the message \"%s\" does not name the workspace",
                workspaces[w].what, aotk_last_error());
      CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLibraryGetKernel] == 0 &&
                    fake.calls[CALL_cuLaunchKernel] == 0,
                "workspace %s: loaded or launched (%s)", workspaces[w].what, called_functions());
    }
    if (workspaces[w].expected == AOTK_ERROR_WORKSPACE_TOO_SMALL) {
      char needed_text[32];
      snprintf(needed_text, sizeof needed_text, "needs %zu", needed);
      CHECK_MSG(message_mentions(needed_text), "the message \"%s\" does not say %zu bytes are needed",
                aotk_last_error(), needed);
    }
  }
  /* No split: no workspace, whatever is passed. */
  params.num_splits = 1;
  static const struct {
    void *workspace;
    size_t bytes;
  } ignored[] = {{NULL, 0}, {NULL, 1000}, {FAKE_WORKSPACE, 0}, {(void *)(uintptr_t)1, 3}};
  for (size_t w = 0; w < sizeof ignored / sizeof ignored[0]; w++) {
    reset_launch_log();
    aotk_status status = aotk_attn_decode(&params, ignored[w].workspace, ignored[w].bytes, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK && fake.logged_launches == 1, "no split, workspace %p of %zu bytes: %s (%s)",
              ignored[w].workspace, ignored[w].bytes, aotk_status_name(status), aotk_last_error());
  }
  /* Appending takes no workspace of its own: the same size, the same checks. Up to 16 new tokens the
   * decoding kernel appends itself (one launch fewer); 17 take the separate appending kernel. */
  add_new_kv(&params, &default_decode_shape, 5);
  params.num_splits = 4;
  poison_info(&info);
  info.struct_size = sizeof info;
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK);
  CHECK_MSG(info.workspace_bytes == needed && info.num_splits == 4 && info.launches == 2,
            "appending 5 tokens (fused): workspace_bytes %zu, %d splits, %d launches", info.workspace_bytes,
            info.num_splits, info.launches);
  reset_launch_log();
  CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, needed, FAKE_STREAM) == AOTK_OK && fake.logged_launches == 2);
  add_new_kv(&params, &default_decode_shape, 17);
  poison_info(&info);
  info.struct_size = sizeof info;
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK);
  CHECK_MSG(info.workspace_bytes == needed && info.num_splits == 4 && info.launches == 3,
            "appending 17 tokens: workspace_bytes %zu, %d splits, %d launches", info.workspace_bytes, info.num_splits,
            info.launches);
  reset_calls();
  CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, needed - 1, FAKE_STREAM) == AOTK_ERROR_WORKSPACE_TOO_SMALL &&
        fake.calls[CALL_cuLaunchKernel] == 0 && fake.calls[CALL_cuLibraryLoadData] == 0);
  reset_launch_log();
  CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, needed, FAKE_STREAM) == AOTK_OK && fake.logged_launches == 3);
  params.num_splits = 1;
  reset_launch_log();
  CHECK(aotk_attn_decode(&params, NULL, 0, FAKE_STREAM) == AOTK_OK && fake.logged_launches == 2);
  params.k_new = params.v_new = (aotk_tensor){0};
  /* Bad params are reported before a bad workspace, without the driver. */
  params.num_splits = 4, params.causal = 2;
  reset_calls();
  CHECK(aotk_attn_decode(&params, NULL, 0, FAKE_STREAM) == AOTK_ERROR_INVALID_VALUE && message_mentions("causal"));
  CHECK(total_calls() == 0);
  uninstall_fake_gpu();
}

/* Driver faults: no context, an old GPU, a failing load of either kernel (both are loaded before the
 * first launch, so nothing runs), a failing launch of either (the merge's leaves the decoding kernel's
 * partials enqueued, the status says so); the next call runs whole. */
static void test_decode_faults(void) {
  aotk_decode_params params = valid_decode_params();
  params.num_splits = 4;
  const size_t workspace_bytes = 98304 + 768;
  aotk_kernel_info info;

  install_fake_gpu(90, SHARED_SM90);
  fake.has_context = false;
  poison_info(&info);
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_ERROR_NO_CONTEXT && info_untouched(&info));
  CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_ERROR_NO_CONTEXT);
  CHECK(fake.launches == 0);

  install_fake_gpu(75, 64 * 1024);
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_ERROR_UNSUPPORTED_ARCH);
  CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_ERROR_UNSUPPORTED_ARCH &&
        message_mentions("sm_75"));
  CHECK(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.launches == 0);

  for (int failing = 1; failing <= 2; failing++) {
    install_fake_gpu(90, SHARED_SM90);
    fake.library_load_result = CUDA_ERROR_OUT_OF_MEMORY;
    fake.fail_library_load_call = failing;
    aotk_status status = aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuLibraryLoadData"), "load %d fails: %s (%s)", failing,
              aotk_status_name(status), aotk_last_error());
    CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 0, "load %d fails: %d launches", failing,
              fake.calls[CALL_cuLaunchKernel]);
    fake.library_load_result = CUDA_SUCCESS;
    CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK && fake.launches == 2);
  }
  static const char *const launched[2] = {"attn_decode_", "attn_merge_"};
  for (int failing = 1; failing <= 2; failing++) {
    install_fake_gpu(90, SHARED_SM90);
    fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
    fake.fail_launch_call = failing;
    aotk_status status = aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuLaunchKernel") &&
                  message_mentions(launched[failing - 1]),
              "launch %d fails: %s (%s)", failing, aotk_status_name(status), aotk_last_error());
    CHECK(aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == failing && fake.launches == failing - 1,
              "launch %d fails: cuLaunchKernel called %d times, %d went through", failing,
              fake.calls[CALL_cuLaunchKernel], fake.launches);
    fake.launch_result = CUDA_SUCCESS;
    fake.fail_launch_call = 0;
    CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK &&
          aotk_last_cuda_result() == 0);
  }

  /* Appending (17 new tokens: the separate appending kernel), with and without the split: three
   * kernels (two), each loaded before the first launch, so a failing load of any of them, the appending
   * kernel's included, launches nothing; a failing launch of the appending kernel, the first, stops the
   * call there, and one of the later kernels leaves the launches before it enqueued. */
  add_new_kv(&params, &default_decode_shape, 17);
  static const char *const append_launched[3] = {"attn_cache_append_", "attn_decode_", "attn_merge_"};
  for (int split = 0; split <= 1; split++) {
    params.num_splits = split ? 4 : 1;
    const int kernels = 2 + split;
    for (int failing = 1; failing <= kernels; failing++) {
      install_fake_gpu(90, SHARED_SM90);
      fake.library_load_result = CUDA_ERROR_OUT_OF_MEMORY;
      fake.fail_library_load_call = failing;
      aotk_status status = aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuLibraryLoadData"),
                "appending, %d splits, load %d fails: %s (%s)", (int)params.num_splits, failing,
                aotk_status_name(status), aotk_last_error());
      CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 0, "appending, %d splits, load %d fails: %d launches",
                (int)params.num_splits, failing, fake.calls[CALL_cuLaunchKernel]);
      fake.library_load_result = CUDA_SUCCESS;
      CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK &&
            fake.launches == kernels && fake.loaded_images == kernels);
    }
    for (int failing = 1; failing <= kernels; failing++) {
      install_fake_gpu(90, SHARED_SM90);
      fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
      fake.fail_launch_call = failing;
      aotk_status status = aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuLaunchKernel") &&
                    message_mentions(append_launched[failing - 1]),
                "appending, %d splits, launch %d fails: %s (%s)", (int)params.num_splits, failing,
                aotk_status_name(status), aotk_last_error());
      CHECK(aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY);
      CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == failing && fake.launches == failing - 1,
                "appending, %d splits, launch %d fails: cuLaunchKernel called %d times, %d went through",
                (int)params.num_splits, failing, fake.calls[CALL_cuLaunchKernel], fake.launches);
      fake.launch_result = CUDA_SUCCESS;
      fake.fail_launch_call = 0;
      reset_launch_log();
      CHECK(aotk_attn_decode(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK &&
            aotk_last_cuda_result() == 0 && fake.logged_launches == kernels &&
            fake.launch_log[0].kernel == KERNEL_ATTN_CACHE_APPEND);
    }
  }
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_decode_query_arguments);
  RUN_TEST(test_decode_workspace);
  RUN_TEST(test_decode_faults);
  return aotk_test_finish();
}
