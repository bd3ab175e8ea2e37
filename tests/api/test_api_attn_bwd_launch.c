/*
 * CPU tests of the public API, the attention backward's launches through the fake driver: the packed
 * arguments of its passes (pre-pass, dK/dV, dQ or the fused pass and its cast, the sink reduction), with
 * the features of 0.2 and the gradient of sinks, the arch choice, and its faults (launch, memset, shared
 * memory). The forward's launches are test_api_attn_launch.c; the fake driver and the shared models are
 * tests/api/api_*.h.
 */
#include "api_attn_feature_cases.h"

/* ---- the backward's launches ---------------------------------------------------------------- */

/* Dense tensors whose token rows are padded, each by its own amount, dq laid out heads-outer and lse's
 * rows padded: TMA can read q, k, v and dout, every stride stays a multiple of 16 (so the Gluon passes,
 * and where deterministic is 0 the fused one and its cast, run), and a stride packed into the wrong slot
 * shows. */
static aotk_attn_params padded_bwd_params(problem p) {
  aotk_attn_params params = bwd_params_for(p);
  aotk_tensor *padded[] = {&params.q, &params.k, &params.v, &params.out, &params.dout, &params.dk, &params.dv};
  for (int t = 0; t < 7; t++) {
    aotk_tensor *x = padded[t];
    x->strides[1] = x->shape[2] * x->shape[3] + 16 * (t + 1);
    x->strides[0] = x->shape[1] * x->strides[1] + 64 * (t + 1);
  }
  aotk_tensor *dq = &params.dq;
  dq->strides[1] = dq->shape[3] + 16, dq->strides[2] = dq->shape[1] * dq->strides[1];
  dq->strides[0] = dq->shape[2] * dq->strides[2] + 256;
  params.lse.strides[1] = p.seqlen_q + 48, params.lse.strides[0] = p.heads_q * params.lse.strides[1];
  return params;
}

static void test_bwd_launch_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);

  problem gqa = {AOTK_DTYPE_BFLOAT16, 3, 1500, 777, 12, 4, 128, true, 0};
  aotk_attn_params params = strided_bwd_params(gqa);
  params.causal = 1;
  check_bwd_launch("bf16 d128 GQA causal, strided, default scale", &params, &gqa);
  /* Three images loaded, and each kernel above 48 KiB of shared memory opted in once. */
  const aotk__kernel_entry *rows[3];
  expected_bwd_rows_of(&params, 90, false, &gqa, 1, 0, rows);
  int opt_ins = 0;
  for (int i = 0; i < 3; i++) opt_ins += rows[i] != NULL && rows[i]->shared_bytes > 48 * 1024;
  CHECK_MSG(fake.loaded_images == 3 && fake.loaded_elf == 3, "loaded %d images (%d ELF)", fake.loaded_images,
            fake.loaded_elf);
  CHECK_MSG(fake.calls[CALL_cuKernelSetAttribute] == opt_ins, "%d shared-memory opt-ins, expected %d",
            fake.calls[CALL_cuKernelSetAttribute], opt_ins);
  /* The kernels are loaded once: the second call reuses them. */
  check_bwd_launch("the same again", &params, &gqa);
  CHECK_MSG(fake.loaded_images == 3 && fake.calls[CALL_cuLibraryLoadData] == 0, "loaded %d images",
            fake.loaded_images);
  CHECK(fake.launches == 6);

  problem mha = {AOTK_DTYPE_FLOAT16, 1, 37, 1000, 4, 4, 64, true, 0};
  params = strided_bwd_params(mha);
  params.softmax_scale = 0.3f;
  params.deterministic = 1;
  check_bwd_launch("fp16 d64 MHA, explicit scale, deterministic", &params, &mha);

  /* Past the dK/dV pass's seqlen_k bound (a wider key tile on sm_90 d128), MQA, causal with more
   * keys than queries. */
  problem long_keys = {AOTK_DTYPE_BFLOAT16, 2, 300, 5000, 4, 1, 128, true, 0};
  params = strided_bwd_params(long_keys);
  params.causal = 1;
  check_bwd_launch("bf16 d128 MQA causal, seqlen_k 5000", &params, &long_keys);

  /* More queries than keys, causal: some rows see no key. Contiguous, unaligned (dv one element in). */
  problem long_queries = {AOTK_DTYPE_FLOAT16, 2, 2049, 63, 6, 2, 64, true, 0};
  params = bwd_params_for(long_queries);
  params.causal = 1;
  params.dv.data = byte_offset(FAKE_DV, 2);
  check_bwd_launch("fp16 d64 GQA causal, seqlen_q > seqlen_k, unaligned", &params, &long_queries);

  /* Layouts the Gluon passes read: non-deterministic, the fused pass and the cast; the same calls
   * deterministic, the Gluon dK/dV pass and the dQ pass, with the smaller workspace and no clear. */
  static const struct {
    const char *what;
    problem shape;
    int causal;
  } gluon_cases[] = {
      {"bf16 d128 GQA causal, padded rows", {AOTK_DTYPE_BFLOAT16, 3, 1500, 777, 12, 4, 128, true, 0}, 1},
      {"fp16 d64 MHA, one head of one sequence, 17 queries", {AOTK_DTYPE_FLOAT16, 1, 17, 1000, 1, 1, 64, true, 0}, 0},
      {"fp16 d64 GQA causal, seqlen_q > seqlen_k", {AOTK_DTYPE_FLOAT16, 2, 2049, 63, 6, 2, 64, true, 0}, 1},
  };
  for (size_t i = 0; i < sizeof gluon_cases / sizeof gluon_cases[0]; i++) {
    const problem *p = &gluon_cases[i].shape;
    for (int deterministic = 0; deterministic <= 1; deterministic++) {
      params = padded_bwd_params(*p);
      params.causal = gluon_cases[i].causal;
      params.deterministic = deterministic;
      char what[128];
      snprintf(what, sizeof what, "%s, deterministic %d", gluon_cases[i].what, deterministic);
      CHECK_MSG(expect_bwd_fused(&params, 90, false, SHARED_SM90) == !deterministic &&
                    expect_bwd_hopper(&params, 90, false, SHARED_SM90),
                "%s: not the Gluon passes' case", what);
      check_bwd_launch(what, &params, p);
    }
  }
  uninstall_fake_gpu();
}

/* The backward with each feature, dense: the same flags, windows and scalars as the forward's in the
 * dK/dV and dQ passes, and the EXTRAS variants only when a feature needs them. */
static void test_bwd_feature_launches(void) {
  static const gpu gpus[] = {{90, SHARED_SM90, 90, 0}, {86, SHARED_SM86, 80, 0}};
  int cases = 0;
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (size_t i = 0; i < sizeof feature_cases / sizeof feature_cases[0]; i++) {
      const feature_case *c = &feature_cases[i];
      aotk_attn_params params = strided_bwd_params(c->shape);
      c->set(&params, &c->shape);
      params.dropout_mask.data = NULL; /* a forward output */
      problem p = c->shape;
      p.with_lse = true;
      char what[160];
      snprintf(what, sizeof what, "cc %d backward, %s", gpus[g].compute_capability, c->what);
      check_bwd_launch(what, &params, &p);
      if (params.sinks.data != NULL) {
        params.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
        snprintf(what, sizeof what, "cc %d backward with dsinks, %s", gpus[g].compute_capability, c->what);
        check_bwd_launch(what, &params, &p);
      }
      cases++;
    }
  }
  printf("    %d cases\n", cases);
  uninstall_fake_gpu();
}

/* The backward on every kind of GPU: the image its arch runs, for every family. */
static void test_bwd_arch_choice(void) {
  static const struct {
    int compute_capability, max_shared_bytes, arch, from_ptx;
  } gpus[] = {
      {80, SHARED_SM80, 80, 0}, {86, SHARED_SM86, 80, 0},   {90, SHARED_SM90, 90, 0},
      {100, SHARED_SM100, 80, 1}, {120, SHARED_SM120, 80, 1},
  };
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (int head_dim = 64; head_dim <= 128; head_dim += 64) {
      problem p = default_problem;
      p.head_dim = head_dim;
      aotk_attn_params params = bwd_params_for(p);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info);
      CHECK_MSG(status == AOTK_OK && info.arch == gpus[g].arch && info.from_ptx == gpus[g].from_ptx,
                "cc %d d%d: %s, arch %d from_ptx %d, expected arch %d from_ptx %d", gpus[g].compute_capability,
                head_dim, aotk_status_name(status), info.arch, info.from_ptx, gpus[g].arch, gpus[g].from_ptx);
      char what[32];
      snprintf(what, sizeof what, "cc %d d%d", gpus[g].compute_capability, head_dim);
      check_bwd_launch(what, &params, &p);
    }
    CHECK_MSG(fake.loaded_images == 6 && (gpus[g].from_ptx ? fake.loaded_ptx : fake.loaded_elf) == 6,
              "cc %d: loaded %d images (%d ELF, %d PTX), expected 6", gpus[g].compute_capability, fake.loaded_images,
              fake.loaded_elf, fake.loaded_ptx);
  }
  uninstall_fake_gpu();
}

/* A failing launch of any of the three kernels: AOTK_ERROR_CUDA naming cuLaunchKernel and the kernel,
 * and no later kernel is attempted. For the deterministic plan and the non-deterministic one (whose
 * accumulator was cleared before the first launch). */
static void test_bwd_launch_fails(void) {
  for (int deterministic = 0; deterministic <= 1; deterministic++) {
    aotk_attn_params params = valid_bwd_params();
    params.deterministic = deterministic;
    for (int failing = 1; failing <= 3; failing++) {
      install_fake_gpu(90, SHARED_SM90);
      const bool fused = expect_bwd_fused(&params, 90, false, SHARED_SM90);
      CHECK(fused == !deterministic);
      const size_t workspace_bytes = expected_bwd_workspace_bytes(&params, 90, false, &default_problem);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK);
      const aotk__kernel_entry *rows[3];
      expected_bwd_rows_of(&params, info.arch, info.from_ptx, &default_problem, info.aligned, 0, rows);
      const char *failing_name = rows[failing - 1] != NULL ? rows[failing - 1]->name : "(none)";
      fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
      fake.fail_launch_call = failing;
      aotk_status status = aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA, "deterministic %d, launch %d fails: %s (%s)", deterministic, failing,
                aotk_status_name(status), aotk_last_error());
      CHECK_MSG(message_mentions("cuLaunchKernel") && message_mentions(failing_name),
                "launch %d fails: the message \"%s\" does not name cuLaunchKernel and %s", failing, aotk_last_error(),
                failing_name);
      CHECK_MSG(message_mentions(injected_error_name), "the message \"%s\" lacks the driver's error name",
                aotk_last_error());
      CHECK(aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY);
      CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == failing, "launch %d fails: cuLaunchKernel called %d times", failing,
                fake.calls[CALL_cuLaunchKernel]);
      CHECK_MSG(fake.launches == failing - 1, "launch %d fails: %d launches went through", failing, fake.launches);
      CHECK_MSG(fake.memsets == (fused ? 1 : 0) && fake.memset_after_launches == 0,
                "deterministic %d, launch %d fails: %d clears, after %d launches", deterministic, failing, fake.memsets,
                fake.memset_after_launches);

      /* The failure is not remembered. */
      fake.launch_result = CUDA_SUCCESS;
      fake.fail_launch_call = 0;
      reset_launch_log();
      CHECK_MSG(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK, "after recovery: %s",
                aotk_last_error());
      CHECK(fake.logged_launches == 3 && aotk_last_cuda_result() == 0 && fake.memsets == (fused ? 1 : 0));
    }
  }
  uninstall_fake_gpu();
}

/* A failing clear of the non-deterministic plan's accumulator: AOTK_ERROR_CUDA naming cuMemsetD32Async
 * and the driver's error, after the tensor maps are encoded and before anything is launched (a pass
 * adding into an uncleared accumulator would be wrong, not merely slow); the next call runs whole. The
 * deterministic plan clears nothing, so the same fault does not touch it. */
static void test_bwd_memset_fails(void) {
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 2, 300, 400, 8, 2, 128, true, 0};
  install_fake_gpu(90, SHARED_SM90);
  aotk_attn_params params = bwd_params_for(d128);
  CHECK(expect_bwd_fused(&params, 90, false, SHARED_SM90));
  const size_t workspace_bytes = bwd_fused_workspace_bytes_for(&d128, false);
  fake.memset_result = CUDA_ERROR_OUT_OF_MEMORY;
  reset_calls();
  reset_launch_log();
  aotk_status status = aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
  CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuMemsetD32Async") &&
                message_mentions(injected_error_name),
            "the clear fails: %s (\"%s\")", aotk_status_name(status), aotk_last_error());
  CHECK(aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK_MSG(fake.calls[CALL_cuMemsetD32Async] == 1 && fake.calls[CALL_cuTensorMapEncodeTiled] == FUSED_DESCRIPTORS &&
                fake.calls[CALL_cuLaunchKernel] == 0 && fake.launches == 0,
            "the clear fails: %s", called_functions());

  fake.memset_result = CUDA_SUCCESS;
  reset_launch_log();
  CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK);
  CHECK_MSG(fake.logged_launches == 3 && fake.memsets == 1 && aotk_last_cuda_result() == 0 &&
                aotk_last_error()[0] == '\0',
            "after the clear failed: %d launches, %d clears", fake.logged_launches, fake.memsets);

  fake.memset_result = CUDA_ERROR_OUT_OF_MEMORY;
  params.deterministic = 1;
  reset_calls();
  reset_launch_log();
  status = aotk_attn_bwd(&params, FAKE_WORKSPACE, bwd_workspace_bytes(&d128), FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK && fake.logged_launches == 3 && fake.calls[CALL_cuMemsetD32Async] == 0,
            "deterministic with clears failing: %s (%s), %d launches, %d clears", aotk_status_name(status),
            aotk_last_error(), fake.logged_launches, fake.calls[CALL_cuMemsetD32Async]);
  uninstall_fake_gpu();
}

/* Driver faults before any launch: the same statuses as the forward's, from the call and the query.
 * On sm_90 the default problem takes the non-deterministic plan: its workspace, and no clear either
 * where a load fails. */
static void test_bwd_faults(void) {
  aotk_attn_params params = valid_bwd_params();
  const size_t workspace_bytes = bwd_fused_workspace_bytes_for(&default_problem, false);
  aotk_kernel_info info;

  install_fake_gpu(90, SHARED_SM90);
  fake.has_context = false;
  CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_ERROR_NO_CONTEXT);
  poison_info(&info);
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_ERROR_NO_CONTEXT && info_untouched(&info));
  CHECK(fake.calls[CALL_cuLaunchKernel] == 0);

  install_fake_gpu(75, 64 * 1024);
  CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_ERROR_UNSUPPORTED_ARCH);
  CHECK(message_mentions("sm_75"));
  poison_info(&info);
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_ERROR_UNSUPPORTED_ARCH && info_untouched(&info));
  CHECK(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0);

  /* The first image fails to load: nothing is launched. */
  install_fake_gpu(90, SHARED_SM90);
  fake.library_load_result = CUDA_ERROR_OUT_OF_MEMORY;
  CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_ERROR_CUDA);
  CHECK(message_mentions("cuLibraryLoadData"));
  CHECK(fake.calls[CALL_cuLaunchKernel] == 0);
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK); /* the query loads nothing */

  /* The second or third image (the fused pass, the cast) fails to load: the call fails naming the load,
   * and nothing was cleared or launched, since all three are loaded before either (aotk.h). */
  for (int failing = 2; failing <= 3; failing++) {
    install_fake_gpu(90, SHARED_SM90);
    CHECK(expect_bwd_fused(&params, 90, false, SHARED_SM90));
    fake.library_load_result = CUDA_ERROR_OUT_OF_MEMORY;
    fake.fail_library_load_call = failing;
    CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_ERROR_CUDA);
    CHECK_MSG(message_mentions("cuLibraryLoadData"), "the message \"%s\"", aotk_last_error());
    CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 0 && fake.calls[CALL_cuMemsetD32Async] == 0 &&
                  fake.calls[CALL_cuLibraryLoadData] == failing,
              "load %d fails: %s", failing, called_functions());
  }
  /* The same with dsinks: the fourth image (the sink reduction) fails after three loaded. */
  install_fake_gpu(90, SHARED_SM90);
  aotk_attn_params with_dsinks = params;
  set_sinks(&with_dsinks);
  set_dsinks(&with_dsinks);
  fake.library_load_result = CUDA_ERROR_OUT_OF_MEMORY;
  fake.fail_library_load_call = 4;
  CHECK(aotk_attn_bwd(&with_dsinks, FAKE_WORKSPACE, bwd_fused_workspace_bytes_for(&default_problem, true),
                      FAKE_STREAM) == AOTK_ERROR_CUDA);
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 4 && fake.calls[CALL_cuLaunchKernel] == 0 &&
                fake.calls[CALL_cuMemsetD32Async] == 0,
            "the sink reduction fails to load: %s", called_functions());
  uninstall_fake_gpu();
}

/* A GPU one byte short of the shared memory that the hungriest of the three kernels needs: refused
 * while planning, before anything is loaded or launched, naming that kernel; with exactly enough, it
 * runs. Deterministic: a non-deterministic call short of memory for the fused pass runs the
 * deterministic kernels instead (test_bwd_hopper_choice). */
static void test_bwd_too_little_shared_memory(void) {
  static const problem problems[] = {
      {AOTK_DTYPE_BFLOAT16, 2, 4096, 4096, 8, 2, 128, true, 0}, /* sm_90's widest dK/dV tile */
      {AOTK_DTYPE_FLOAT16, 2, 100, 130, 8, 2, 64, true, 0},
  };
  static const int compute_capabilities[] = {90, 86};
  for (size_t c = 0; c < 2; c++) {
    for (size_t i = 0; i < sizeof problems / sizeof problems[0]; i++) {
      const problem *p = &problems[i];
      aotk_attn_params params = bwd_params_for(*p);
      params.deterministic = 1;
      install_fake_gpu(compute_capabilities[c], SHARED_SM90);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK);
      const aotk__kernel_entry *rows[3];
      expected_bwd_rows_of(&params, info.arch, info.from_ptx, p, info.aligned, 0, rows);
      if (rows[0] == NULL || rows[1] == NULL || rows[2] == NULL) {
        CHECK_MSG(false, "sm_%d: a backward family has no row", info.arch);
        continue;
      }
      int most = 0;
      for (int r = 0; r < 3; r++) most = rows[r]->shared_bytes > most ? rows[r]->shared_bytes : most;
      /* The first row (in launch order) that does not fit is the one named. */
      const aotk__kernel_entry *refused = NULL;
      for (int r = 0; r < 3 && refused == NULL; r++) refused = rows[r]->shared_bytes > most - 1 ? rows[r] : NULL;
      const size_t workspace_bytes = bwd_workspace_bytes(p);

      install_fake_gpu(compute_capabilities[c], most);
      CHECK_MSG(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK,
                "cc %d with exactly %d bytes: %s", compute_capabilities[c], most, aotk_last_error());
      CHECK(fake.launches == 3);

      install_fake_gpu(compute_capabilities[c], most - 1);
      aotk_status status = aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_UNSUPPORTED_ARCH, "cc %d with %d bytes: %s", compute_capabilities[c], most - 1,
                aotk_status_name(status));
      CHECK_MSG(message_mentions(refused->name), "the message \"%s\" does not name %s", aotk_last_error(),
                refused->name);
      CHECK(fake.launches == 0 && fake.calls[CALL_cuLibraryLoadData] == 0);
      aotk_kernel_info refused_info;
      poison_info(&refused_info);
      CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &refused_info) == AOTK_ERROR_UNSUPPORTED_ARCH);
      CHECK(info_untouched(&refused_info));
    }
  }
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_bwd_launch_arguments);
  RUN_TEST(test_bwd_feature_launches);
  RUN_TEST(test_bwd_arch_choice);
  RUN_TEST(test_bwd_launch_fails);
  RUN_TEST(test_bwd_memset_fails);
  RUN_TEST(test_bwd_faults);
  RUN_TEST(test_bwd_too_little_shared_memory);
  return aotk_test_finish();
}
