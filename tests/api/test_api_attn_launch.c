/*
 * CPU tests of the public API, the attention forward's launches through the fake driver: the
 * parameter lists against the kernel table, the packed arguments of every family with each feature of
 * 0.2 (windows, softcap, ALiBi, sinks, dropout and its mask), varlen and padded head dims, optional
 * outputs, and callers built against release 0.1 (forward and backward). The backward's launches are
 * test_api_attn_bwd_launch.c.
 * The fake driver and the shared models are tests/api/api_*.h; see api_fake_driver.h.
 */
#include "api_attn_feature_cases.h"

/* ---- the launch ----------------------------------------------------------------------------- */

/* The fake driver reads launches by the test's own parameter lists: each must be what the table's rows
 * of its family declare, plus the two hidden pointers. */
static void test_parameter_lists_match_the_table(void) {
  int rows_checked = 0;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    int id = 0;
    while (id < KERNEL_COUNT && kernel_signatures[id].family != e->family) id++;
    CHECK_MSG(id < KERNEL_COUNT, "row %d %s: family %d unknown to the test", i, e->name, e->family);
    if (id == KERNEL_COUNT) continue;
    const char *kinds = kernel_signatures[id].param_kinds;
    size_t declared = strlen(e->param_kinds);
    CHECK_MSG(strcmp(e->function_name, kernel_signatures[id].function) == 0 && strlen(kinds) == declared + 2 &&
                  strncmp(kinds, e->param_kinds, declared) == 0,
              "row %d %s (%s): the table declares \"%s\", the test reads \"%s\"", i, e->name, e->function_name,
              e->param_kinds, kinds);
    rows_checked++;
  }
  CHECK(rows_checked == aotk__kernel_count);
}

static void test_launch_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);

  problem gqa = {AOTK_DTYPE_BFLOAT16, 3, 1500, 777, 12, 4, 128, true, 0};
  aotk_attn_params params = strided_params(gqa);
  params.causal = 1;
  check_launch("bf16 d128 GQA causal, strided, lse, default scale", &params, &gqa);
  CHECK(fake.loaded_images == 1);
  /* The kernel is loaded once: the second launch reuses it. */
  check_launch("the same again", &params, &gqa);
  CHECK_MSG(fake.loaded_images == 1 && fake.calls[CALL_cuLibraryLoadData] == 0, "loaded %d times",
            fake.loaded_images);
  CHECK(fake.launches == 2);

  problem plain = {AOTK_DTYPE_FLOAT16, 1, 37, 1000, 4, 4, 64, false, 0};
  params = strided_params(plain);
  params.softmax_scale = 0.3f;
  check_launch("fp16 d64 MHA, no lse, explicit scale", &params, &plain);
  uninstall_fake_gpu();
}

/* ---- the 0.2 features' launches --------------------------------------------------------------- */


/* Every feature alone and together, dense, on sm_90 and sm_80: the flags, windows, pointers and scalars
 * each launch gets, the row (the EXTRAS variant only when softcap, ALiBi or dropout is on), and
 * what aotk_query reports. */
static void test_feature_launches(void) {
  static const gpu gpus[] = {{90, SHARED_SM90, 90, 0}, {86, SHARED_SM86, 80, 0}};
  int extras_cases = 0, plain_cases = 0;
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (size_t i = 0; i < sizeof feature_cases / sizeof feature_cases[0]; i++) {
      const feature_case *c = &feature_cases[i];
      aotk_attn_params params = strided_params(c->shape);
      c->set(&params, &c->shape);
      char what[160];
      snprintf(what, sizeof what, "cc %d, %s", gpus[g].compute_capability, c->what);
      check_launch(what, &params, &c->shape);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
      const bool extras = params.softcap > 0.0f || params.alibi_slopes.data != NULL || params.dropout_p > 0.0f;
      CHECK_MSG((strstr(info.kernel_name, "_extras_") != NULL) == extras &&
                    ((info.features & AOTK_FEATURE_EXTRAS_KERNEL) != 0) == extras,
                "%s: runs %s (features %#x)", what, info.kernel_name, info.features);
      extras_cases += extras;
      plain_cases += !extras;
    }
  }
  printf("    %d cases with the EXTRAS kernel, %d without\n", extras_cases, plain_cases);
  uninstall_fake_gpu();
}

/* The pointer kernel's cases of test_feature_launches_literal: TMA cannot read q laid out heads-outer. */
static void window_both_heads_outer(aotk_attn_params *a, const problem *p) {
  window_both(a, p), make_heads_outer(&a->q);
}
static void softcap_heads_outer(aotk_attn_params *a, const problem *p) { softcap_30(a, p), make_heads_outer(&a->q); }

/* The same features through the argument slots, with literal values rather than the test's own rule:
 * causal turns window_right into 0 and leaves window_left unbounded; the flags are the bits of
 * kernels/attn_common.py (FLAG_REVERSE for the masks with a right bound alone); dropout 0.5 keeps words
 * >= 2^31 and scales by 2; the sinks pointer is in its slot exactly when sinks are given. On this sm_90
 * GPU every forward at d64 but dropout (any window, sinks in its epilogue, softcap and ALiBi in its EXTRAS
 * row) runs the warp-specialized TMA kernel, whose first forty arguments are the pointer kernel's: with
 * two consumer warpgroups, 300 query rows being short of the three-warpgroup kernel's 2048
 * (test_tma_eligibility). Dropout runs in the pointer kernel, the Triton TMA kernel having no d64; so do
 * a window and softcap with q laid out heads-outer, which TMA cannot read. */
#define WARP_SPECIALIZED_TMA (AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED)
static void test_feature_launches_literal(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const struct {
    const char *what;
    void (*set)(aotk_attn_params *params, const problem *p);
    int32_t window_left, window_right, flags;
    uint32_t features, dropout_threshold;
    float dropout_scale;
    int kernel; /* enum kernel_id */
  } cases[] = {
      {"nothing", nothing, -1, -1, FLAG_WRITE_LSE, WARP_SPECIALIZED_TMA, 0, 1.0f, KERNEL_ATTN_FWD_HOPPER},
      {"causal", causal, -1, 0, FLAG_WRITE_LSE | FLAG_REVERSE, AOTK_FEATURE_CAUSAL | WARP_SPECIALIZED_TMA, 0, 1.0f,
       KERNEL_ATTN_FWD_HOPPER},
      {"causal top-left", causal_top_left, -1, 0, FLAG_WRITE_LSE | FLAG_TOP_LEFT | FLAG_REVERSE,
       AOTK_FEATURE_CAUSAL | WARP_SPECIALIZED_TMA, 0, 1.0f, KERNEL_ATTN_FWD_HOPPER},
      {"causal, window_left 64", causal_window_left, 64, 0, FLAG_WRITE_LSE,
       AOTK_FEATURE_CAUSAL | AOTK_FEATURE_WINDOW | WARP_SPECIALIZED_TMA, 0, 1.0f, KERNEL_ATTN_FWD_HOPPER},
      {"window (16, 3)", window_both, 16, 3, FLAG_WRITE_LSE, AOTK_FEATURE_WINDOW | WARP_SPECIALIZED_TMA, 0, 1.0f,
       KERNEL_ATTN_FWD_HOPPER},
      {"window (16, 3), q heads-outer", window_both_heads_outer, 16, 3, FLAG_WRITE_LSE, AOTK_FEATURE_WINDOW, 0, 1.0f,
       KERNEL_ATTN_FWD},
      {"window_right 5", window_right_only, -1, 5, FLAG_WRITE_LSE | FLAG_REVERSE,
       AOTK_FEATURE_WINDOW | WARP_SPECIALIZED_TMA, 0, 1.0f, KERNEL_ATTN_FWD_HOPPER},
      {"softcap", softcap_30, -1, -1, FLAG_WRITE_LSE | FLAG_SOFTCAP,
       AOTK_FEATURE_SOFTCAP | AOTK_FEATURE_EXTRAS_KERNEL | WARP_SPECIALIZED_TMA, 0, 1.0f, KERNEL_ATTN_FWD_HOPPER},
      {"softcap, q heads-outer", softcap_heads_outer, -1, -1, FLAG_WRITE_LSE | FLAG_SOFTCAP,
       AOTK_FEATURE_SOFTCAP | AOTK_FEATURE_EXTRAS_KERNEL, 0, 1.0f, KERNEL_ATTN_FWD},
      {"ALiBi", alibi_per_head, -1, -1, FLAG_WRITE_LSE | FLAG_ALIBI,
       AOTK_FEATURE_ALIBI | AOTK_FEATURE_EXTRAS_KERNEL | WARP_SPECIALIZED_TMA, 0, 1.0f, KERNEL_ATTN_FWD_HOPPER},
      {"sinks (the warp-specialized kernel's epilogue)", sinks_on, -1, -1, FLAG_WRITE_LSE | FLAG_SINKS,
       AOTK_FEATURE_SINKS | WARP_SPECIALIZED_TMA, 0, 1.0f, KERNEL_ATTN_FWD_HOPPER},
      {"sinks and softcap", sinks_softcap, -1, -1, FLAG_WRITE_LSE | FLAG_SOFTCAP | FLAG_SINKS,
       AOTK_FEATURE_SOFTCAP | AOTK_FEATURE_SINKS | AOTK_FEATURE_EXTRAS_KERNEL | WARP_SPECIALIZED_TMA, 0, 1.0f,
       KERNEL_ATTN_FWD_HOPPER},
      {"dropout 0.5 (the Gluon forward's dropout form)", dropout_half, -1, -1, FLAG_WRITE_LSE | FLAG_DROPOUT,
       AOTK_FEATURE_DROPOUT | WARP_SPECIALIZED_TMA, 128u, 2.0f, KERNEL_ATTN_FWD_HOPPER_DROPOUT},
      {"dropout 0.5 and softcap (the pointer kernel: no Triton TMA kernel at d64)", dropout_half_softcap, -1, -1,
       FLAG_WRITE_LSE | FLAG_DROPOUT | FLAG_SOFTCAP,
       AOTK_FEATURE_DROPOUT | AOTK_FEATURE_SOFTCAP | AOTK_FEATURE_EXTRAS_KERNEL, 128u, 2.0f, KERNEL_ATTN_FWD},
      {"dropout 0 with an rng_state", dropout_off_rng_given, -1, -1, FLAG_WRITE_LSE, WARP_SPECIALIZED_TMA, 0, 1.0f,
       KERNEL_ATTN_FWD_HOPPER},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aotk_attn_params params = params_for(feature_problem);
    cases[i].set(&params, &feature_problem);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
    CHECK_MSG(status == AOTK_OK && info.features == cases[i].features, "%s: %s, features %#x, expected %#x",
              cases[i].what, aotk_status_name(status), info.features, cases[i].features);
    reset_launch_log();
    CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK);
    const recorded_launch *launch = &fake.launch_log[0];
    /* The warp-specialized kernel stores O by TMA (out is contiguous here): FLAG_O_TMA (256) besides. */
    const bool gluon = cases[i].kernel == KERNEL_ATTN_FWD_HOPPER || cases[i].kernel == KERNEL_ATTN_FWD_HOPPER_DROPOUT;
    const int32_t flags = cases[i].flags | (gluon ? FLAG_O_TMA : 0);
    CHECK_MSG(arg_i32(launch, ARG_WINDOW_LEFT) == cases[i].window_left &&
                  arg_i32(launch, ARG_WINDOW_RIGHT) == cases[i].window_right &&
                  arg_i32(launch, ARG_FLAGS) == flags,
              "%s: window (%d, %d) flags %#x, expected (%d, %d) %#x", cases[i].what, arg_i32(launch, ARG_WINDOW_LEFT),
              arg_i32(launch, ARG_WINDOW_RIGHT), (unsigned)arg_i32(launch, ARG_FLAGS), cases[i].window_left,
              cases[i].window_right, (unsigned)flags);
    CHECK_MSG((uint32_t)arg_i32(launch, ARG_DROPOUT_THRESHOLD) == cases[i].dropout_threshold &&
                  arg_f32(launch, ARG_DROPOUT_SCALE) == cases[i].dropout_scale,
              "%s: dropout threshold %u scale %g", cases[i].what, (uint32_t)arg_i32(launch, ARG_DROPOUT_THRESHOLD),
              (double)arg_f32(launch, ARG_DROPOUT_SCALE));
    CHECK(arg_i32(launch, ARG_HEAD_DIM_QK8) == 8 && arg_i32(launch, ARG_HEAD_DIM_V8) == 8);
    const uint64_t sinks = (cases[i].flags & FLAG_SINKS) != 0 ? (uint64_t)(uintptr_t)FAKE_SINKS : 0;
    CHECK_MSG(arg_pointer(launch, ARG_SINKS) == sinks, "%s: sinks %#llx, expected %#llx", cases[i].what,
              (unsigned long long)arg_pointer(launch, ARG_SINKS), (unsigned long long)sinks);
    CHECK_MSG(launch->kernel == cases[i].kernel, "%s: launched %s, expected %s", cases[i].what,
              kernel_signatures[launch->kernel].function, kernel_signatures[cases[i].kernel].function);
  }
  uninstall_fake_gpu();
}
#undef WARP_SPECIALIZED_TMA

/* Head dims: every multiple of 8 up to 256 runs, in the smallest compiled pair that holds it
 * ((32, 32), (64, 64), (128, 128), (256, 256), (256, 128)), told the true dims in eighths. On sm_90 the
 * Gluon forward runs (192, 128) unpadded where TMA can read the inputs and there is no dropout (as it
 * does its other pairs, which equal their compiled ones); with q heads-outer (no TMA) or with dropout
 * (which it lacks) the pointer kernel's (256, 128) runs. The backward pads (192, 128) everywhere: its
 * Gluon passes are 64 and 128 only. */
static void test_padded_head_dims(void) {
  static const struct {
    int64_t head_dim_qk, head_dim_v;
    int compiled_qk, compiled_v;
    const char *tag; /* in the forward's kernel name */
  } cases[] = {
      {8, 8, 32, 32, "_d32_"},        {16, 16, 32, 32, "_d32_"},      {32, 32, 32, 32, "_d32_"},
      {40, 40, 64, 64, "_d64_"},      {64, 64, 64, 64, "_d64_"},      {72, 72, 128, 128, "_d128_"},
      {80, 80, 128, 128, "_d128_"},   {96, 96, 128, 128, "_d128_"},   {128, 128, 128, 128, "_d128_"},
      {136, 136, 256, 256, "_d256_"}, {160, 160, 256, 256, "_d256_"}, {256, 256, 256, 256, "_d256_"},
      {192, 128, 256, 128, "_d256v128_"}, {256, 128, 256, 128, "_d256v128_"}, {200, 96, 256, 128, "_d256v128_"},
      {64, 128, 128, 128, "_d128_"},  {128, 64, 128, 128, "_d128_"},  {32, 8, 32, 32, "_d32_"},
      {128, 256, 256, 256, "_d256_"}, {192, 192, 256, 256, "_d256_"}, {8, 256, 256, 256, "_d256_"},
  };
  static const gpu gpus[] = {{90, SHARED_SM90, 90, 0}, {80, SHARED_SM80, 80, 0}, {120, SHARED_SM120, 80, 1}};
  int launches = 0;
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      problem p = {AOTK_DTYPE_FLOAT16, 2, 77, 130, 4, 2, cases[i].head_dim_qk, true, cases[i].head_dim_v};
      /* The forward three ways: contiguous (TMA-readable), q heads-outer, and with dropout. */
      for (int form = 0; form < 3; form++) {
        static const char *const forms[] = {"", ", q heads-outer", ", dropout"};
        char what[96];
        snprintf(what, sizeof what, "cc %d head dims %lld/%lld%s", gpus[g].compute_capability,
                 (long long)cases[i].head_dim_qk, (long long)cases[i].head_dim_v, forms[form]);
        aotk_attn_params params = params_for(p);
        if (form == 1) make_heads_outer(&params.q);
        if (form == 2) dropout_on(&params, &p);
        const bool gluon_192 = gpus[g].compute_capability == 90 && form == 0 && cases[i].head_dim_qk == 192 &&
                               cases[i].head_dim_v == 128;
        const int compiled_qk = gluon_192 ? 192 : cases[i].compiled_qk;
        const int compiled_v = gluon_192 ? 128 : cases[i].compiled_v;
        const char *tag = gluon_192 ? "attn_fwd_hopper_fp16_d192v128_" : cases[i].tag;
        aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
        aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
        const bool padded = compiled_qk > cases[i].head_dim_qk || compiled_v > cases[i].head_dim_v;
        CHECK_MSG(status == AOTK_OK && strstr(info.kernel_name, tag) != NULL && info.head_dim_qk == compiled_qk &&
                      info.head_dim_v == compiled_v &&
                      ((info.features & AOTK_FEATURE_PADDED_HEAD_DIM) != 0) == padded,
                  "%s: %s (%s), runs %s as %d/%d, features %#x; expected %s as %d/%d", what, aotk_status_name(status),
                  aotk_last_error(), info.kernel_name, info.head_dim_qk, info.head_dim_v, info.features, tag,
                  compiled_qk, compiled_v);
        check_launch(what, &params, &p);
        launches++;
      }
      /* The backward runs in the same pair (on sm_90 (192, 128) as itself, in the Gluon passes); its
       * pre-pass in the smallest v dim that holds head_dim_v. */
      char what[96];
      snprintf(what, sizeof what, "cc %d head dims %lld/%lld, backward", gpus[g].compute_capability,
               (long long)cases[i].head_dim_qk, (long long)cases[i].head_dim_v);
      aotk_attn_params params = bwd_params_for(p);
      check_bwd_launch(what, &params, &p);
      const bool gluon_192 = gpus[g].compute_capability == 90 && cases[i].head_dim_qk == 192 &&
                             cases[i].head_dim_v == 128;
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK_MSG(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK &&
                    info.head_dim_qk == (gluon_192 ? 192 : cases[i].compiled_qk) &&
                    info.head_dim_v == (gluon_192 ? 128 : cases[i].compiled_v),
                "%s: the backward runs %s as %d/%d", what, info.kernel_name, info.head_dim_qk, info.head_dim_v);
    }
  }
  printf("    %d forwards of %d head-dim pairs\n", launches, (int)(sizeof cases / sizeof cases[0]));
  uninstall_fake_gpu();
}

/* The variable-length layout: batch strides 0 (the kernels add each sequence's start from cu_seqlens),
 * sequence and head strides from the caller's first two dims, lengths and grids from max_seqlen, lse
 * [heads_q, total_q] as (batch stride 0, head stride its first), the num_seqs from cu_seqlens. */
static aotk_attn_params strided_varlen_params(problem p, int64_t total_q, int64_t total_k, bool bwd) {
  aotk_attn_params params = varlen_params_for(p, total_q, total_k, bwd);
  aotk_tensor *tensors[] = {&params.q, &params.k, &params.v, &params.out, &params.dout, &params.dq, &params.dk,
                            &params.dv};
  for (int t = 0; t < 8; t++) { /* rows padded, each tensor differently, keeping multiples of 16 */
    aotk_tensor *x = tensors[t];
    if (x->data == NULL) continue;
    x->strides[1] = x->shape[2] + 16 * (t + 1);
    x->strides[0] = x->shape[1] * x->strides[1] + 32 * t;
  }
  if (params.lse.data != NULL) params.lse.strides[0] = total_q + 48;
  return params;
}

static void test_varlen_launches(void) {
  static const gpu gpus[] = {{90, SHARED_SM90, 90, 0}, {86, SHARED_SM86, 80, 0}};
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    /* 5 sequences of at most 700 query and 1030 key rows, 2000 and 3000 rows in all. */
    problem p = {AOTK_DTYPE_BFLOAT16, 5, 700, 1030, 12, 4, 128, true, 0};
    aotk_attn_params params = strided_varlen_params(p, 2000, 3000, false);
    check_launch("varlen, strided, lse", &params, &p);
    params.causal = 1;
    check_launch("varlen causal", &params, &p);
    everything(&params, &p);
    check_launch("varlen with every feature and the mask", &params, &p);

    problem no_lse = {AOTK_DTYPE_FLOAT16, 1, 1, 1, 2, 1, 96, false, 64};
    params = strided_varlen_params(no_lse, 1, 1, false);
    check_launch("varlen, one sequence of one row, no lse, head dims 96/64", &params, &no_lse);

    /* The backward in the varlen layout. */
    params = strided_varlen_params(p, 2000, 3000, true);
    check_bwd_launch("varlen backward, strided", &params, &p);
    params.causal = 1;
    params.window_left = 100;
    dropout_on(&params, &p);
    alibi_per_sequence(&params, &p);
    sinks_on(&params, &p);
    params.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
    check_bwd_launch("varlen backward with every feature and dsinks", &params, &p);

    /* Literal checks of what the layout changes. */
    problem small = {AOTK_DTYPE_BFLOAT16, 3, 200, 300, 8, 2, 64, true, 0};
    params = varlen_params_for(small, 450, 700, false);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
    /* On sm_90 the plain varlen forward runs the Gluon kernel (which adds its feature bits). */
    const uint32_t varlen_features =
        AOTK_FEATURE_VARLEN |
        fwd_family_features(expected_fwd_family(&params, info.arch, info.from_ptx, fake.max_shared_bytes));
    CHECK_MSG(info.features == varlen_features, "varlen: features %#x, expected %#x", info.features, varlen_features);
    CHECK_MSG(info.grid == ceil_div(200, info.block_m) * 3 * 8, "varlen: grid %lld with block_m %d",
              (long long)info.grid, info.block_m);
    reset_launch_log();
    CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK);
    const recorded_launch *launch = &fake.launch_log[0];
    CHECK(arg_i64(launch, ARG_STRIDE_QB) == 0 && arg_i32(launch, ARG_STRIDE_QS) == 8 * 64 &&
          arg_i32(launch, ARG_STRIDE_QH) == 64);
    CHECK(arg_i64(launch, ARG_STRIDE_KB) == 0 && arg_i32(launch, ARG_STRIDE_KS) == 2 * 64);
    CHECK_MSG(arg_i64(launch, ARG_STRIDE_LB) == 0 && arg_i32(launch, ARG_STRIDE_LH) == 450,
              "varlen lse strides (%lld, %d), expected (0, 450)", (long long)arg_i64(launch, ARG_STRIDE_LB),
              arg_i32(launch, ARG_STRIDE_LH));
    CHECK(arg_i32(launch, ARG_SEQLEN_Q) == 200 && arg_i32(launch, ARG_SEQLEN_K) == 300);
    /* The Gluon kernel (sm_90): O by TMA store (FLAG_O_TMA) where out is TMA-writable, a sequence's last
     * slice by the masked stores (kernels/attn_fwd_hopper.py). */
    const bool o_tma = family_is_hopper_fwd(expected_fwd_family(&params, info.arch, info.from_ptx,
                                                                fake.max_shared_bytes)) &&
                       tma_readable(&params.out);
    CHECK_MSG(arg_i32(launch, ARG_FLAGS) == (FLAG_WRITE_LSE | FLAG_VARLEN | (o_tma ? FLAG_O_TMA : 0)),
              "varlen: flags %#x, expected O by TMA %d", (unsigned)arg_i32(launch, ARG_FLAGS), (int)o_tma);
    CHECK(arg_pointer(launch, ARG_CU_SEQLENS_Q) == (uint64_t)(uintptr_t)FAKE_CU_SEQLENS_Q &&
          arg_pointer(launch, ARG_CU_SEQLENS_K) == (uint64_t)(uintptr_t)FAKE_CU_SEQLENS_K);
    CHECK(launch->grid[0] == (unsigned)info.grid);
  }
  uninstall_fake_gpu();
}

/* The dropout mask is a second launch, and only when asked for; the backward's sink reduction is a
 * fourth, only with dsinks, and its partial sums make the workspace grow: the deterministic plan's by
 * their bytes, the non-deterministic plan's (whose accumulator follows them at a 256-byte boundary) by
 * their bytes rounded up to 256. */
static void test_optional_launches(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_attn_params params = valid_params();
  dropout_on(&params, &default_problem);
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK && info.launches == 1);
  reset_launch_log();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK);
  CHECK_MSG(fake.logged_launches == 1, "dropout without a mask: %d launches", fake.logged_launches);
  params.dropout_mask = mask_for(&params);
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK && info.launches == 2);
  reset_launch_log();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK);
  CHECK_MSG(fake.logged_launches == 2 && fake.launch_log[0].kernel == fwd_kernel_id(expected_fwd_family(&params, 90, false,
                                                                                  fake.max_shared_bytes)) &&
                fake.launch_log[1].kernel == KERNEL_DROPOUT_MASK,
            "dropout with a mask: %d launches, the first %s", fake.logged_launches,
            fake.logged_launches >= 1 ? kernel_signatures[fake.launch_log[0].kernel].function : "(none)");

  /* A failing mask launch is reported, naming the mask kernel; the forward was enqueued before it. */
  fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
  fake.fail_launch_call = fake.calls[CALL_cuLaunchKernel] + 2;
  aotk_status status = aotk_attn_fwd(&params, FAKE_STREAM);
  CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("attn_dropout_mask"), "the mask launch fails: %s (%s)",
            aotk_status_name(status), aotk_last_error());
  fake.launch_result = CUDA_SUCCESS;
  fake.fail_launch_call = 0;

  aotk_attn_params bwd = valid_bwd_params();
  bwd.deterministic = 1;
  sinks_on(&bwd, &default_problem);
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, &bwd, &info) == AOTK_OK);
  const size_t without_dsinks = info.workspace_bytes;
  CHECK_MSG(info.launches == 3 && without_dsinks == bwd_workspace_bytes(&default_problem),
            "sinks without dsinks: %d launches, %zu bytes", info.launches, without_dsinks);
  reset_launch_log();
  CHECK(aotk_attn_bwd(&bwd, FAKE_WORKSPACE, without_dsinks, FAKE_STREAM) == AOTK_OK);
  CHECK(fake.logged_launches == 3 && arg_pointer(&fake.launch_log[0], PRE_SINKS) == 0 &&
        arg_i32(&fake.launch_log[0], PRE_FLAGS) == 0);
  bwd.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, default_problem.heads_q);
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, &bwd, &info) == AOTK_OK);
  /* 2 sequences, 8 heads, 128 padded rows in blocks of 64: 32 partials. */
  CHECK_MSG(info.launches == 4 && info.workspace_bytes == without_dsinks + 4 * 8 * 2 * 2,
            "dsinks: %d launches, %zu bytes (%zu without)", info.launches, info.workspace_bytes, without_dsinks);
  /* The workspace without dsinks' share is now too small. */
  reset_calls();
  status = aotk_attn_bwd(&bwd, FAKE_WORKSPACE, without_dsinks, FAKE_STREAM);
  CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL && total_calls() == 0,
            "dsinks with the workspace of no dsinks: %s, %d driver calls", aotk_status_name(status), total_calls());
  reset_launch_log();
  CHECK(aotk_attn_bwd(&bwd, FAKE_WORKSPACE, info.workspace_bytes, FAKE_STREAM) == AOTK_OK);
  CHECK_MSG(fake.logged_launches == 4 && fake.launch_log[3].kernel == KERNEL_BWD_SINK_REDUCE &&
                fake.launch_log[3].grid[0] == 8,
            "dsinks: %d launches", fake.logged_launches);
  CHECK(arg_i32(&fake.launch_log[3], REDUCE_COUNT) == 2 * 2);
  check_bwd_launch("dsinks, default problem", &bwd, &default_problem);

  /* A failing sink reduction: the three passes were enqueued; the failure names the kernel. */
  fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
  fake.fail_launch_call = fake.calls[CALL_cuLaunchKernel] + 4;
  status = aotk_attn_bwd(&bwd, FAKE_WORKSPACE, info.workspace_bytes, FAKE_STREAM);
  CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("attn_bwd_sink_reduce"), "the reduction fails: %s (%s)",
            aotk_status_name(status), aotk_last_error());
  fake.launch_result = CUDA_SUCCESS;
  fake.fail_launch_call = 0;

  /* The same non-deterministic: the statistics (16384 bytes) at 0, the accumulator (2 * 8 * 128 rows of
   * 64 floats) after them; with dsinks the 128 bytes of partials push it to the next 256-byte boundary. */
  aotk_attn_params nondeterministic = bwd;
  nondeterministic.deterministic = 0;
  nondeterministic.dsinks.data = NULL;
  for (int with_dsinks = 0; with_dsinks <= 1; with_dsinks++) {
    if (with_dsinks) nondeterministic.dsinks = bwd.dsinks;
    const size_t accumulator_offset = with_dsinks ? 16384 + 256 : 16384, accumulator_bytes = 2 * 8 * 128 * 64 * 4;
    CHECK(aotk_query(AOTK_OP_ATTN_BWD, &nondeterministic, &info) == AOTK_OK);
    CHECK_MSG(info.launches == 3 + with_dsinks && info.workspace_bytes == accumulator_offset + accumulator_bytes &&
                  (info.features & AOTK_FEATURE_NONDETERMINISTIC) != 0,
              "non-deterministic, dsinks %d: %d launches, %zu bytes, features %#x", with_dsinks, info.launches,
              info.workspace_bytes, info.features);
    reset_launch_log();
    CHECK(aotk_attn_bwd(&nondeterministic, FAKE_WORKSPACE, info.workspace_bytes, FAKE_STREAM) == AOTK_OK);
    CHECK_MSG(fake.logged_launches == 3 + with_dsinks && fake.launch_log[1].kernel == KERNEL_BWD_FUSED_HOPPER &&
                  fake.launch_log[2].kernel == KERNEL_BWD_DQ_CONVERT &&
                  (!with_dsinks || fake.launch_log[3].kernel == KERNEL_BWD_SINK_REDUCE) && fake.memsets == 1 &&
                  fake.memset_destination == (CUdeviceptr)(uintptr_t)byte_offset(FAKE_WORKSPACE, accumulator_offset) &&
                  fake.memset_count == accumulator_bytes / 4,
              "non-deterministic, dsinks %d: %d launches, %d clears of %zu words at %#llx", with_dsinks,
              fake.logged_launches, fake.memsets, fake.memset_count, (unsigned long long)fake.memset_destination);
    check_bwd_launch(with_dsinks ? "non-deterministic dsinks, default problem" : "non-deterministic sinks",
                     &nondeterministic, &default_problem);
  }
  uninstall_fake_gpu();
}

/* ---- callers built against release 0.1 ---------------------------------------------------------- */

/* The launch arguments of two recorded launches, compared over the kernel's parameter list. */
static bool same_launch(const recorded_launch *a, const recorded_launch *b) {
  if (a->kernel != b->kernel || a->function != b->function || memcmp(a->grid, b->grid, sizeof a->grid) != 0 ||
      memcmp(a->block, b->block, sizeof a->block) != 0 || a->shared_bytes != b->shared_bytes ||
      a->stream != b->stream) {
    return false;
  }
  return memcmp(a->args, b->args, strlen(kernel_signatures[a->kernel].param_kinds) * sizeof a->args[0]) == 0;
}

/* `params` as a caller built against 0.1 passes it: struct_size is 0.1's size, and the struct is copied
 * into a heap block of exactly that size, so that a read past it shows under ASan. Free the result. */
static aotk_attn_params *as_release_0_1(const aotk_attn_params *params) {
  aotk_attn_params prefix = *params;
  prefix.struct_size = ATTN_PARAMS_0_1_BYTES;
  aotk_attn_params *block = malloc(ATTN_PARAMS_0_1_BYTES);
  if (block != NULL) memcpy(block, &prefix, ATTN_PARAMS_0_1_BYTES);
  return block;
}

/* A caller compiled against 0.1 passes the struct as 0.1 defined it, ending where cu_seqlens_q begins,
 * and nothing past it. Its calls must behave exactly as 0.1's did, which is as a 0.2 caller's with the
 * new fields at AOTK_ATTN_PARAMS_INIT's values: no varlen, no softcap, ALiBi, sinks or dropout, and
 * windows unbounded (-1, not the 0 of zeroed memory, which would mean "the diagonal only"). */
static void test_release_0_1_caller(void) {
  install_fake_gpu(90, SHARED_SM90);
  CHECK(ATTN_PARAMS_0_1_BYTES < sizeof(aotk_attn_params));
  for (int causal = 0; causal <= 1; causal++) {
    for (int op = AOTK_OP_ATTN_FWD; op <= AOTK_OP_ATTN_BWD; op++) {
      const bool bwd = op == AOTK_OP_ATTN_BWD;
      const int launches = bwd ? 3 : 1;
      char what[64];
      snprintf(what, sizeof what, "a 0.1 caller's %s%s", op_function((aotk_op)op), causal ? ", causal" : "");
      aotk_attn_params current = bwd ? strided_bwd_params(default_problem) : strided_params(default_problem);
      current.causal = causal;
      aotk_attn_params *old = as_release_0_1(&current);
      CHECK(old != NULL);
      if (old == NULL) continue;

      aotk_kernel_info old_info, current_info;
      poison_info(&old_info);
      poison_info(&current_info);
      aotk_status status = aotk_query((aotk_op)op, old, &old_info);
      CHECK_MSG(status == AOTK_OK, "%s: aotk_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
      CHECK(aotk_query((aotk_op)op, &current, &current_info) == AOTK_OK);
      if (status != AOTK_OK) { /* old_info is still poisoned: no kernel_name to print */
        free(old);
        continue;
      }
      CHECK_MSG(memcmp(&old_info, &current_info, sizeof old_info) == 0,
                "%s: aotk_query reports %s (features %#x), a 0.2 caller's %s (features %#x)", what,
                old_info.kernel_name, old_info.features, current_info.kernel_name, current_info.features);
      CHECK_MSG(old_info.features == (causal ? AOTK_FEATURE_CAUSAL : 0u), "%s: features %#x", what, old_info.features);

      reset_launch_log();
      status = run_op((aotk_op)op, old);
      CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", what, aotk_status_name(status), aotk_last_error());
      CHECK_MSG(fake.logged_launches == launches, "%s: %d launches", what, fake.logged_launches);
      if (status != AOTK_OK || fake.logged_launches != launches) {
        free(old);
        continue;
      }
      recorded_launch old_launches[3];
      memcpy(old_launches, fake.launch_log, sizeof old_launches[0] * (size_t)launches);
      /* The windows the kernels get: unbounded on the left, and on the right unless causal. */
      const recorded_launch *main_launch = &old_launches[bwd ? 1 : 0];
      const int left = bwd ? DKDV_WINDOW_LEFT : ARG_WINDOW_LEFT, right = bwd ? DKDV_WINDOW_RIGHT : ARG_WINDOW_RIGHT;
      const int flags = bwd ? DKDV_FLAGS : ARG_FLAGS;
      CHECK_MSG(arg_i32(main_launch, left) == -1 && arg_i32(main_launch, right) == (causal ? 0 : -1),
                "%s: window (%d, %d), expected (-1, %d)", what, arg_i32(main_launch, left),
                arg_i32(main_launch, right), causal ? 0 : -1);
      CHECK_MSG(arg_i32(main_launch, flags) == (FLAG_WRITE_LSE | (causal ? FLAG_REVERSE : 0)), "%s: flags %#x", what,
                (unsigned)arg_i32(main_launch, flags));
      /* And everything else as a 0.2 caller's call with the defaults. */
      reset_launch_log();
      CHECK(run_op((aotk_op)op, &current) == AOTK_OK && fake.logged_launches == launches);
      for (int i = 0; i < launches && i < fake.logged_launches; i++) {
        CHECK_MSG(same_launch(&old_launches[i], &fake.launch_log[i]), "%s: launch %d differs from a 0.2 caller's",
                  what, i + 1);
      }
      free(old);
    }
  }

  /* What lies past a 0.1 caller's struct is not its: garbage there changes nothing. */
  aotk_attn_params garbage = valid_params();
  garbage.causal = 1;
  memset((unsigned char *)&garbage + ATTN_PARAMS_0_1_BYTES, 0xEE, sizeof garbage - ATTN_PARAMS_0_1_BYTES);
  garbage.struct_size = ATTN_PARAMS_0_1_BYTES;
  aotk_attn_params clean = valid_params();
  clean.causal = 1;
  reset_launch_log();
  aotk_status status = aotk_attn_fwd(&garbage, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "0.1 size, garbage past it: %s (%s)", aotk_status_name(status), aotk_last_error());
  recorded_launch garbage_launch = fake.launch_log[0];
  reset_launch_log();
  CHECK(aotk_attn_fwd(&clean, FAKE_STREAM) == AOTK_OK);
  CHECK_MSG(status != AOTK_OK || same_launch(&garbage_launch, &fake.launch_log[0]),
            "0.1 size, garbage past it: the launch differs");

  /* A 0.1 caller's bad input gets the same status, and reaches no driver function. */
  aotk_attn_params bad = valid_params();
  bad.q.data = NULL;
  aotk_attn_params *old_bad = as_release_0_1(&bad);
  if (old_bad != NULL) {
    reset_calls();
    status = aotk_attn_fwd(old_bad, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_NULL_POINTER && message_mentions("q.data") && total_calls() == 0,
              "a 0.1 caller's q.data NULL: %s (%s), %d driver calls", aotk_status_name(status), aotk_last_error(),
              total_calls());
    free(old_bad);
  }

  /* A 0.1 caller's aotk_kernel_info ends before head_dim_qk: nothing past it is written. */
  aotk_kernel_info info;
  poison_info(&info);
  const size_t info_0_1_bytes = offsetof(aotk_kernel_info, head_dim_qk);
  info.struct_size = info_0_1_bytes;
  aotk_attn_params params = valid_params();
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
  CHECK(info.struct_size == info_0_1_bytes && info.launches == 1 && strncmp(info.kernel_name, "attn_fwd_", 9) == 0);
  const unsigned char *bytes = (const unsigned char *)&info;
  bool tail_untouched = true;
  for (size_t i = info_0_1_bytes; i < sizeof info; i++) tail_untouched = tail_untouched && bytes[i] == POISON;
  CHECK_MSG(tail_untouched, "aotk_query wrote past a 0.1 caller's aotk_kernel_info");
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_parameter_lists_match_the_table);
  RUN_TEST(test_launch_arguments);
  RUN_TEST(test_feature_launches);
  RUN_TEST(test_feature_launches_literal);
  RUN_TEST(test_padded_head_dims);
  RUN_TEST(test_varlen_launches);
  RUN_TEST(test_optional_launches);
  RUN_TEST(test_release_0_1_caller);
  return aotk_test_finish();
}
