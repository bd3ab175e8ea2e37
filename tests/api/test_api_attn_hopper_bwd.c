/*
 * CPU tests of the public API, the sm_90 backward kernels: which calls take the Gluon dK/dV pass, its
 * fused form with the non-deterministic accumulator and the Gluon dQ pass, on the dense and the varlen
 * layout, the tensor maps they encode and pass, and failing encodes. The fake driver and the shared
 * models are tests/api/api_*.h; see api_fake_driver.h.
 */
#include <math.h>

#include "api_launch_checks.h"

/* Which backward calls run the Gluon dK/dV pass (include/aotk.h, AOTK_FEATURE_TMA and
 * AOTK_FEATURE_WARP_SPECIALIZED for AOTK_OP_ATTN_BWD), and which its fused non-deterministic form
 * (AOTK_FEATURE_NONDETERMINISTIC) with the cast of its dQ: the calls the Gluon pass covers (every call but
 * dropout, at head dims 64, 128 and 256 that TMA can read; softcap and ALiBi in its EXTRAS rows, the cast's
 * one variant after either; dropout without softcap or ALiBi at 64 and 128 in the dropout forms, whose
 * deterministic pass runs beside the Triton dQ pass's EXTRAS row), when deterministic is 0 and the head dim
 * 64 or 128; at 256 the deterministic
 * Gluon passes (dK/dV, then the Gluon dQ pass) either way. check_bwd_launch holds aotk_query, the launches,
 * their arguments, the clear and the tensor maps to expect_bwd_fused and expect_bwd_hopper; here the
 * rules' answers are also written out per case, so that every outcome is seen. */
static void test_bwd_hopper_choice(void) {
  install_fake_gpu(90, SHARED_SM90);
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 2, 300, 400, 8, 2, 128, true, 0};
  const problem d64 = {AOTK_DTYPE_FLOAT16, 3, 1000, 1000, 4, 4, 64, true, 0};
  enum {
    PLAIN, CAUSAL, CAUSAL_TOP_LEFT, WINDOW_RIGHT_0, SINKS, D64, SOFTCAP, ALIBI, DROPOUT, WINDOW_LEFT, DOUT_HEADS_OUTER,
    D96, D256, VARLEN, DOUT_STRIDE_ODD, WINDOW_BOTH, WINDOW_RIGHT_5, CAUSAL_WINDOW, WINDOW_TOP_LEFT, EVERYTHING,
    D64_SOFTCAP, ALIBI_PER_SEQUENCE, CAUSAL_DROPOUT, SOFTCAP_DROPOUT, WINDOW_DROPOUT, D256_SOFTCAP, D192_128,
    D192_128_CAUSAL_ALIBI, D192_192, CASE_COUNT
  };
  static const struct {
    const char *what;
    bool gluon;  /* the Gluon passes run (the fused one and the cast where deterministic is 0) */
    bool extras; /* in their EXTRAS rows (or, for the Triton passes, theirs) */
    bool d256;   /* head dims 256 or (192, 128): never fused; the Gluon dQ pass beside the Gluon dK/dV pass */
  } cases[CASE_COUNT] = {
      [PLAIN] = {"bf16 d128 GQA", true, false},
      [CAUSAL] = {"causal", true, false},
      [CAUSAL_TOP_LEFT] = {"causal top-left", true, false},
      [WINDOW_RIGHT_0] = {"window_right 0 alone", true, false},
      [SINKS] = {"sinks and dsinks", true, false},
      [D64] = {"fp16 d64", true, false},
      [SOFTCAP] = {"softcap", true, true},
      [ALIBI] = {"ALiBi", true, true},
      [DROPOUT] = {"dropout (the Gluon passes' dropout forms, not EXTRAS rows)", true, false},
      [WINDOW_LEFT] = {"a left window", true, false},
      [DOUT_HEADS_OUTER] = {"dout's heads outermost", false, false},
      [D96] = {"d96 (padded)", false, false},
      [D256] = {"d256", true, false, true},
      [VARLEN] = {"varlen (read as [1, total, heads * d])", true, false},
      [DOUT_STRIDE_ODD] = {"dout's token stride not a multiple of 16 bytes", false, false},
      [WINDOW_BOTH] = {"window (16, 5)", true, false},
      [WINDOW_RIGHT_5] = {"window_right 5 alone", true, false},
      [CAUSAL_WINDOW] = {"causal, window_left 64 (sliding)", true, false},
      [WINDOW_TOP_LEFT] = {"window (16, 5) top-left", true, false},
      [EVERYTHING] = {"causal window, softcap, ALiBi, sinks and dsinks", true, true},
      [D64_SOFTCAP] = {"fp16 d64 softcap", true, true},
      [ALIBI_PER_SEQUENCE] = {"ALiBi per sequence", true, true},
      [CAUSAL_DROPOUT] = {"causal dropout", true, false},
      [SOFTCAP_DROPOUT] = {"softcap and dropout (the Triton passes)", false, true},
      [WINDOW_DROPOUT] = {"window (16, 5) and dropout", true, false},
      [D256_SOFTCAP] = {"d256 softcap", true, true, true},
      [D192_128] = {"(192, 128)", true, false, true},
      [D192_128_CAUSAL_ALIBI] = {"(192, 128) causal ALiBi", true, true, true},
      [D192_192] = {"(192, 192) (padded)", false, false, false},
  };
  int fused_cases = 0, extras_cases = 0;
  for (size_t c = 0; c < 2 * (size_t)CASE_COUNT; c++) {
    const size_t i = c / 2;
    const int deterministic = (int)(c % 2);
    const bool expect_hopper = cases[i].gluon, expect_fused = expect_hopper && !deterministic && !cases[i].d256;
    fused_cases += expect_fused;
    extras_cases += expect_hopper && cases[i].extras;
    problem p = i == D64 || i == D64_SOFTCAP ? d64 : d128;
    if (i == D96) p.head_dim = 96;
    if (i == D256 || i == D256_SOFTCAP) p.head_dim = 256;
    if (i == D192_128 || i == D192_128_CAUSAL_ALIBI || i == D192_192) p.head_dim = 192;
    if (i == D192_128 || i == D192_128_CAUSAL_ALIBI) p.head_dim_v = 128;
    aotk_attn_params params = bwd_params_for(p);
    switch (i) {
      case CAUSAL: params.causal = 1; break;
      case CAUSAL_TOP_LEFT: params.causal = 1, params.causal_align = AOTK_ALIGN_TOP_LEFT; break;
      case WINDOW_RIGHT_0: params.window_right = 0; break;
      case SINKS:
        params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
        params.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
        break;
      case SOFTCAP:
      case D64_SOFTCAP:
      case D256_SOFTCAP: params.softcap = 30.0f; break;
      case D192_128_CAUSAL_ALIBI:
        params.causal = 1, params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p.heads_q);
        break;
      case ALIBI: params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p.heads_q); break;
      case DROPOUT: dropout_on(&params, &p); break;
      case WINDOW_LEFT: params.window_left = 64; break;
      case DOUT_HEADS_OUTER: make_heads_outer(&params.dout); break;
      case VARLEN: params = varlen_params_for(p, p.batch * p.seqlen_q, p.batch * p.seqlen_k, true); break;
      case DOUT_STRIDE_ODD:
        params.dout.strides[1] += 4, params.dout.strides[0] = params.dout.strides[1] * p.seqlen_q;
        break;
      case WINDOW_BOTH: params.window_left = 16, params.window_right = 5; break;
      case WINDOW_RIGHT_5: params.window_right = 5; break;
      case CAUSAL_WINDOW: params.causal = 1, params.window_left = 64; break;
      case WINDOW_TOP_LEFT:
        params.window_left = 16, params.window_right = 5, params.causal_align = AOTK_ALIGN_TOP_LEFT;
        break;
      case EVERYTHING:
        params.causal = 1, params.window_left = 100, params.softcap = 30.0f;
        params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p.heads_q);
        params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
        params.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
        break;
      case ALIBI_PER_SEQUENCE: alibi_per_sequence(&params, &p); break;
      case CAUSAL_DROPOUT: params.causal = 1, dropout_on(&params, &p); break;
      case SOFTCAP_DROPOUT: params.softcap = 30.0f, dropout_on(&params, &p); break;
      case WINDOW_DROPOUT: params.window_left = 16, params.window_right = 5, dropout_on(&params, &p); break;
      default: break;
    }
    params.deterministic = deterministic;
    char what_of_case[96];
    snprintf(what_of_case, sizeof what_of_case, "%s, deterministic %d", cases[i].what, deterministic);
    CHECK_MSG(expect_bwd_hopper(&params, 90, false, SHARED_SM90) == expect_hopper, "%s: the rule says %d",
              what_of_case, (int)expect_bwd_hopper(&params, 90, false, SHARED_SM90));
    CHECK_MSG(expect_bwd_fused(&params, 90, false, SHARED_SM90) == expect_fused, "%s: the fused rule says %d",
              what_of_case, (int)expect_bwd_fused(&params, 90, false, SHARED_SM90));
    CHECK_MSG(expect_bwd_dq_hopper(&params, 90, false, SHARED_SM90) == (expect_hopper && cases[i].d256),
              "%s: the Gluon dQ rule says %d", what_of_case, (int)expect_bwd_dq_hopper(&params, 90, false, SHARED_SM90));
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK_MSG(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK, "%s: %s", what_of_case, aotk_last_error());
    const bool hopper = strncmp(info.kernel_name, "attn_bwd_dkdv_hopper_", 21) == 0;
    const bool fused = strncmp(info.kernel_name, "attn_bwd_fused_hopper_", 22) == 0;
    CHECK_MSG(hopper == (expect_hopper && !expect_fused) && fused == expect_fused &&
                  ((info.features & (AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED)) != 0) == expect_hopper &&
                  ((info.features & AOTK_FEATURE_NONDETERMINISTIC) != 0) == expect_fused,
              "%s: aotk_query names %s with features %#x", what_of_case, info.kernel_name, info.features);
    /* The EXTRAS row exactly where softcap, ALiBi (or, in the Triton passes, dropout) are on; the dropout
     * forms are not EXTRAS rows. */
    const aotk__kernel_entry *named = table_row_named(info.kernel_name, 90);
    CHECK_MSG(named != NULL && (bool)named->extras == cases[i].extras &&
                  ((info.features & AOTK_FEATURE_EXTRAS_KERNEL) != 0) == cases[i].extras,
              "%s: aotk_query names %s with features %#x, expected %s EXTRAS row", what_of_case, info.kernel_name,
              info.features, cases[i].extras ? "an" : "no");
    check_bwd_launch(what_of_case, &params, &p);
    /* The launches, written out: the Gluon pass, then the cast (fused), the Gluon dQ pass (d256) or the
     * Triton dQ pass. */
    const bool dropout_form = expect_hopper && params.dropout_p > 0.0f;
    const int second = expect_fused && dropout_form ? KERNEL_BWD_FUSED_HOPPER_DROPOUT
                       : expect_fused               ? KERNEL_BWD_FUSED_HOPPER
                       : dropout_form               ? KERNEL_BWD_DKDV_HOPPER_DROPOUT
                       : expect_hopper              ? KERNEL_BWD_DKDV_HOPPER
                                                    : KERNEL_BWD_DKDV;
    const int third = expect_fused                      ? KERNEL_BWD_DQ_CONVERT
                      : expect_hopper && cases[i].d256 ? KERNEL_BWD_DQ_HOPPER
                                                        : KERNEL_BWD_DQ;
    CHECK_MSG(fake.logged_launches >= 3 && fake.launch_log[1].kernel == second && fake.launch_log[2].kernel == third,
              "%s: launched %s and %s, expected %s and %s", what_of_case,
              fake.logged_launches >= 3 ? kernel_signatures[fake.launch_log[1].kernel].function : "(none)",
              fake.logged_launches >= 3 ? kernel_signatures[fake.launch_log[2].kernel].function : "(none)",
              kernel_signatures[second].function, kernel_signatures[third].function);
  }
  printf("    %d cases, %d of them non-deterministic, %d in the Gluon passes' EXTRAS rows\n", 2 * (int)CASE_COUNT,
         fused_cases, extras_cases);
  /* Too little shared memory for the Gluon pass (but enough for the Triton one): the Triton pass. */
  aotk_attn_params params = bwd_params_for(d128);
  const aotk__kernel_entry *gluon = expected_row(AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER, 90, d128.dtype, 128, 128, 1, 0,
                                                 d128.seqlen_k);
  CHECK(gluon != NULL);
  if (gluon != NULL) {
    install_fake_gpu(90, gluon->shared_bytes - 1);
    CHECK(!expect_bwd_hopper(&params, 90, false, gluon->shared_bytes - 1));
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info);
    CHECK_MSG(status != AOTK_OK || (strncmp(info.kernel_name, "attn_bwd_dkdv_hopper_", 21) != 0 &&
                                    strncmp(info.kernel_name, "attn_bwd_fused_hopper_", 22) != 0),
              "%d bytes of shared memory: %s", gluon->shared_bytes - 1, info.kernel_name);
  }
  /* Too little for the fused pass but enough for the Gluon dK/dV pass (the fused pass holds dQ's tiles
   * too): a non-deterministic call runs the deterministic plan, with its smaller workspace, no clear,
   * and dQ's own pass; with exactly enough it runs the fused one. */
  const aotk__kernel_entry *fused = fused_row(&params);
  CHECK_MSG(fused != NULL && gluon != NULL && fused->shared_bytes > gluon->shared_bytes,
            "the fused pass (%d bytes) should need more shared memory than the dK/dV pass (%d)",
            fused ? fused->shared_bytes : -1, gluon ? gluon->shared_bytes : -1);
  if (fused != NULL && gluon != NULL && fused->shared_bytes > gluon->shared_bytes) {
    for (int short_by = 0; short_by <= 1; short_by++) {
      install_fake_gpu(90, fused->shared_bytes - short_by);
      char what_of_case[96];
      snprintf(what_of_case, sizeof what_of_case, "bf16 d128, %d bytes of shared memory",
               fused->shared_bytes - short_by);
      CHECK_MSG(expect_bwd_fused(&params, 90, false, fused->shared_bytes - short_by) == !short_by &&
                    expect_bwd_hopper(&params, 90, false, fused->shared_bytes - short_by),
                "%s: the rules say fused %d, Gluon dK/dV %d", what_of_case,
                (int)expect_bwd_fused(&params, 90, false, fused->shared_bytes - short_by),
                (int)expect_bwd_hopper(&params, 90, false, fused->shared_bytes - short_by));
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK);
      CHECK_MSG(strcmp(info.kernel_name, short_by ? gluon->name : fused->name) == 0 &&
                    info.workspace_bytes ==
                        (short_by ? bwd_workspace_bytes(&d128) : bwd_fused_workspace_bytes_for(&d128, false)),
                "%s: aotk_query names %s, %zu bytes of workspace", what_of_case, info.kernel_name,
                info.workspace_bytes);
      check_bwd_launch(what_of_case, &params, &d128);
    }
  }
  uninstall_fake_gpu();
}

/* What the last call of test_bwd_hopper_varlen's plain case (3 sequences of at most 300 / 400 rows, 700
 * and 1000 in all, bf16 d128, heads 8 / 2) launched, written out: stats_stride round_up(300, 128) = 384;
 * the statistics 8 * 3 * 8 * 384 bytes, and for the fused plan the accumulator after them, 3 * 8 * 384 *
 * 128 words; the Gluon pass over ceil(400 / block_n) * 3 * 2 programs, told FLAG_VARLEN and the
 * cu_seqlens, with maps over [1, total, heads * 128]; the cast over ceil(300 / 64) * 3 * 8 programs. */
static void check_bwd_varlen_literals(const char *what, const aotk_attn_params *params, bool fused) {
  enum { STATS_STRIDE = 384, STATISTICS_BYTES = 8 * 3 * 8 * STATS_STRIDE, ACCUMULATOR_WORDS = 3 * 8 * 384 * 128 };
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, params, &info) == AOTK_OK);
  const size_t workspace_bytes = STATISTICS_BYTES + (fused ? 4 * (size_t)ACCUMULATOR_WORDS : 0);
  CHECK_MSG(info.workspace_bytes == workspace_bytes, "%s: workspace_bytes %zu, expected %zu", what,
            info.workspace_bytes, workspace_bytes);
  CHECK_MSG(fake.logged_launches == 3, "%s: %d launches", what, fake.logged_launches);
  if (fake.logged_launches != 3) return;
  const recorded_launch *pass = &fake.launch_log[1], *dq = &fake.launch_log[2];
  CHECK_MSG(pass->kernel == (fused ? KERNEL_BWD_FUSED_HOPPER : KERNEL_BWD_DKDV_HOPPER) &&
                dq->kernel == (fused ? KERNEL_BWD_DQ_CONVERT : KERNEL_BWD_DQ),
            "%s: launched %s and %s", what, kernel_signatures[pass->kernel].function,
            kernel_signatures[dq->kernel].function);
  const aotk__kernel_entry *row = fused ? fused_row(params) : expected_row(AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER, 90,
                                                                           AOTK_DTYPE_BFLOAT16, 128, 128, 1, 0, 400);
  CHECK(row != NULL);
  if (row == NULL) return;
  CHECK_MSG(pass->grid[0] == (unsigned)(ceil_div(400, row->block_n) * 3 * 2) && info.grid == (int64_t)pass->grid[0],
            "%s: the dK/dV pass's grid %u (aotk_query %lld) with block_n %d", what, pass->grid[0],
            (long long)info.grid, row->block_n);
  CHECK_MSG(arg_i32(pass, DKDV_FLAGS) == (FLAG_WRITE_LSE | FLAG_VARLEN) && arg_i32(pass, DKDV_SEQLEN_Q) == 300 &&
                arg_i32(pass, DKDV_SEQLEN_K) == 400 && arg_i32(pass, DKDV_STATS_STRIDE) == STATS_STRIDE &&
                arg_pointer(pass, DKDV_CU_SEQLENS_Q) == (uint64_t)(uintptr_t)FAKE_CU_SEQLENS_Q &&
                arg_pointer(pass, DKDV_CU_SEQLENS_K) == (uint64_t)(uintptr_t)FAKE_CU_SEQLENS_K,
            "%s: the Gluon pass's flags %#x, lengths %d / %d, stats_stride %d, or cu_seqlens", what,
            (unsigned)arg_i32(pass, DKDV_FLAGS), arg_i32(pass, DKDV_SEQLEN_Q), arg_i32(pass, DKDV_SEQLEN_K),
            arg_i32(pass, DKDV_STATS_STRIDE));
  /* q's and k's maps: [1, 700, 8 * 128] and [1, 1000, 2 * 128] bf16, the single batch's stride spanning
   * the total; in the launch the same shapes and element strides. */
  const encode_call *q_map = &fake.encodes[0], *k_map = &fake.encodes[1];
  CHECK_MSG(fake.encode_count == (fused ? 5 : 4) && q_map->dims[0] == 1024 && q_map->dims[1] == 700 &&
                q_map->dims[2] == 1 && q_map->strides_bytes[0] == 2048 && q_map->strides_bytes[1] == 2048 * 700 &&
                k_map->dims[0] == 256 && k_map->dims[1] == 1000 && k_map->dims[2] == 1 &&
                k_map->strides_bytes[0] == 512 && k_map->strides_bytes[1] == 512 * 1000,
            "%s: %d maps; q's dims {%llu, %llu, %llu} byte strides {%llu, %llu}, k's dims {%llu, %llu, %llu}", what,
            fake.encode_count, (unsigned long long)q_map->dims[0], (unsigned long long)q_map->dims[1],
            (unsigned long long)q_map->dims[2], (unsigned long long)q_map->strides_bytes[0],
            (unsigned long long)q_map->strides_bytes[1], (unsigned long long)k_map->dims[0],
            (unsigned long long)k_map->dims[1], (unsigned long long)k_map->dims[2]);
  const int q_desc = DKDV_GLOBAL_SCRATCH;
  CHECK_MSG(arg_i32(pass, q_desc + TMA_SLOT_SHAPE) == 1 && arg_i32(pass, q_desc + TMA_SLOT_SHAPE + 1) == 700 &&
                arg_i32(pass, q_desc + TMA_SLOT_SHAPE + 2) == 1024 &&
                arg_i64(pass, q_desc + TMA_SLOT_STRIDES) == 700 * 1024 &&
                arg_i64(pass, q_desc + TMA_SLOT_STRIDES + 1) == 1024,
            "%s: q's descriptor (%d, %d, %d) strides (%lld, %lld)", what, arg_i32(pass, q_desc + TMA_SLOT_SHAPE),
            arg_i32(pass, q_desc + TMA_SLOT_SHAPE + 1), arg_i32(pass, q_desc + TMA_SLOT_SHAPE + 2),
            (long long)arg_i64(pass, q_desc + TMA_SLOT_STRIDES),
            (long long)arg_i64(pass, q_desc + TMA_SLOT_STRIDES + 1));
  if (!fused) {
    CHECK_MSG(fake.memsets == 0 && arg_i32(dq, DQ_FLAGS) == (FLAG_WRITE_LSE | FLAG_VARLEN),
              "%s: %d clears; the Triton dQ pass's flags %#x", what, fake.memsets, (unsigned)arg_i32(dq, DQ_FLAGS));
    return;
  }
  /* The fused plan: the accumulator [24, 384, 128] fp32 cleared and mapped after the statistics. */
  const encode_call *acc_map = &fake.encodes[4];
  CHECK_MSG(fake.memsets == 1 && fake.memset_count == ACCUMULATOR_WORDS &&
                fake.memset_destination == (CUdeviceptr)(uintptr_t)byte_offset(FAKE_WORKSPACE, STATISTICS_BYTES) &&
                acc_map->dims[0] == 128 && acc_map->dims[1] == STATS_STRIDE && acc_map->dims[2] == 24,
            "%s: %d clears of %zu words; the accumulator's map {%llu, %llu, %llu}", what, fake.memsets,
            fake.memset_count, (unsigned long long)acc_map->dims[0], (unsigned long long)acc_map->dims[1],
            (unsigned long long)acc_map->dims[2]);
  /* The cast: cu_seqlens_q and FLAG_VARLEN, the packed dq's strides (0, 8 * 128, 128), the max_seqlen's
   * 5 blocks of 64 rows for each of 3 sequences and 8 heads. */
  CHECK_MSG(dq->grid[0] == 5 * 3 * 8 &&
                arg_pointer(dq, CONVERT_CU_SEQLENS_Q) == (uint64_t)(uintptr_t)FAKE_CU_SEQLENS_Q &&
                arg_i32(dq, CONVERT_FLAGS) == FLAG_VARLEN && arg_i64(dq, CONVERT_STRIDE_DQB) == 0 &&
                arg_i32(dq, CONVERT_STRIDE_DQS) == 1024 && arg_i32(dq, CONVERT_STRIDE_DQH) == 128 &&
                arg_i32(dq, CONVERT_SEQLEN_Q) == 300 && arg_i32(dq, CONVERT_HEADS_Q) == 8 &&
                arg_i32(dq, CONVERT_NUM_M_BLOCKS) == 5 && arg_i32(dq, CONVERT_STATS_STRIDE) == STATS_STRIDE,
            "%s: the cast's grid %u, cu_seqlens_q %#llx, flags %#x, strides (%lld, %d, %d), seqlen_q %d, heads_q %d, "
            "num_m_blocks %d, stats_stride %d",
            what, dq->grid[0], (unsigned long long)arg_pointer(dq, CONVERT_CU_SEQLENS_Q),
            (unsigned)arg_i32(dq, CONVERT_FLAGS), (long long)arg_i64(dq, CONVERT_STRIDE_DQB),
            arg_i32(dq, CONVERT_STRIDE_DQS), arg_i32(dq, CONVERT_STRIDE_DQH), arg_i32(dq, CONVERT_SEQLEN_Q),
            arg_i32(dq, CONVERT_HEADS_Q), arg_i32(dq, CONVERT_NUM_M_BLOCKS), arg_i32(dq, CONVERT_STATS_STRIDE));
}

/* The sm_90 backward's Gluon passes take the varlen layout too, under the dense conditions: the packed
 * tensors [total, heads, d] are read as [1, total, heads * d] (batch stride 0: each sequence's rows
 * start at its cu_seqlens entry), and the problem is num_seqs sequences of max_seqlen_q / max_seqlen_k
 * rows, so the grids, stats_stride and the fused plan's workspace follow from those, never from the
 * totals. deterministic 1 runs the Gluon dK/dV pass and the Triton dQ pass; 0 the clear, the fused pass
 * and the cast, which is told cu_seqlens_q and FLAG_VARLEN. Masks and windows of either alignment, sinks,
 * and softcap and ALiBi (in the EXTRAS rows) run there too, and dropout alone in the dropout forms; dropout
 * with softcap or a padded head dim keep the Triton passes. check_bwd_launch checks each call against the
 * model; here the model's answers and the numbers that matter are also written out. */
static void test_bwd_hopper_varlen(void) {
  install_fake_gpu(90, SHARED_SM90);
  /* 3 sequences of at most 300 query and 400 key rows, 700 and 1000 rows in all; GQA 8 / 2. */
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 3, 300, 400, 8, 2, 128, true, 0};
  enum { TOTAL_Q = 700, TOTAL_K = 1000 };
  enum {
    PLAIN, CAUSAL, CAUSAL_TOP_LEFT, SINKS, D64, SOFTCAP, D96, ALIBI, WINDOW, WINDOW_TOP_LEFT, DROPOUT, SOFTCAP_DROPOUT,
    CASE_COUNT
  };
  static const struct {
    const char *what;
    bool gluon;  /* the Gluon passes run (the fused one where deterministic is 0) */
    bool extras; /* the dK/dV (or fused) row is EXTRAS */
  } cases[CASE_COUNT] = {
      [PLAIN] = {"varlen bf16 d128 GQA", true, false},
      [CAUSAL] = {"varlen causal", true, false},
      [CAUSAL_TOP_LEFT] = {"varlen causal top-left", true, false},
      [SINKS] = {"varlen sinks and dsinks", true, false},
      [D64] = {"varlen fp16 d64", true, false},
      [SOFTCAP] = {"varlen softcap (the Gluon passes' EXTRAS rows)", true, true},
      [D96] = {"varlen d96 (padded: the Triton passes)", false, false},
      [ALIBI] = {"varlen ALiBi per sequence, causal", true, true},
      [WINDOW] = {"varlen window (64, 8)", true, false},
      [WINDOW_TOP_LEFT] = {"varlen causal window_left 32, top-left", true, false},
      [DROPOUT] = {"varlen dropout (the Gluon passes' dropout forms)", true, false},
      [SOFTCAP_DROPOUT] = {"varlen softcap and dropout (the Triton passes)", false, true},
  };
  int calls = 0;
  for (int c = 0; c < CASE_COUNT; c++) {
    for (int deterministic = 0; deterministic <= 1; deterministic++) {
      problem p = d128;
      if (c == D64) p.dtype = AOTK_DTYPE_FLOAT16, p.head_dim = 64;
      if (c == D96) p.head_dim = 96;
      aotk_attn_params params = varlen_params_for(p, TOTAL_Q, TOTAL_K, true);
      params.deterministic = deterministic;
      if (c == CAUSAL || c == CAUSAL_TOP_LEFT) params.causal = 1;
      if (c == CAUSAL_TOP_LEFT) params.causal_align = AOTK_ALIGN_TOP_LEFT;
      if (c == SINKS) {
        sinks_on(&params, &p);
        params.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
      }
      if (c == SOFTCAP || c == SOFTCAP_DROPOUT) params.softcap = 30.0f;
      if (c == ALIBI) alibi_per_sequence(&params, &p), params.causal = 1;
      if (c == WINDOW) params.window_left = 64, params.window_right = 8;
      if (c == WINDOW_TOP_LEFT) {
        params.causal = 1, params.window_left = 32, params.causal_align = AOTK_ALIGN_TOP_LEFT;
      }
      if (c == DROPOUT || c == SOFTCAP_DROPOUT) dropout_on(&params, &p);
      const bool fused = cases[c].gluon && deterministic == 0;
      char what[128];
      snprintf(what, sizeof what, "%s, deterministic %d", cases[c].what, deterministic);
      CHECK_MSG(expect_bwd_hopper(&params, 90, false, SHARED_SM90) == cases[c].gluon &&
                    expect_bwd_fused(&params, 90, false, SHARED_SM90) == fused,
                "%s: the rules say Gluon %d, fused %d", what, (int)expect_bwd_hopper(&params, 90, false, SHARED_SM90),
                (int)expect_bwd_fused(&params, 90, false, SHARED_SM90));
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info);
      CHECK_MSG(status == AOTK_OK, "%s: aotk_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
      if (status != AOTK_OK) continue;
      const char *prefix = fused            ? "attn_bwd_fused_hopper_"
                           : cases[c].gluon ? "attn_bwd_dkdv_hopper_"
                                            : "attn_bwd_dkdv_";
      const uint32_t gluon_bits = AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED;
      /* ("attn_bwd_dkdv_" is also the start of the Gluon pass's names.) */
      const bool named_gluon_dkdv = strncmp(info.kernel_name, "attn_bwd_dkdv_hopper_", 21) == 0;
      CHECK_MSG(strncmp(info.kernel_name, prefix, strlen(prefix)) == 0 &&
                    named_gluon_dkdv == (cases[c].gluon && !fused),
                "%s: aotk_query names %s, expected a %s row", what, info.kernel_name, prefix);
      const aotk__kernel_entry *named = table_row_named(info.kernel_name, 90);
      CHECK_MSG((info.features & AOTK_FEATURE_VARLEN) != 0 &&
                    ((info.features & gluon_bits) == gluon_bits) == cases[c].gluon &&
                    ((info.features & AOTK_FEATURE_NONDETERMINISTIC) != 0) == fused &&
                    ((info.features & AOTK_FEATURE_EXTRAS_KERNEL) != 0) == cases[c].extras && named != NULL &&
                    (bool)named->extras == cases[c].extras,
                "%s: %s, features %#x", what, info.kernel_name, info.features);
      check_bwd_launch(what, &params, &p);
      calls++;
      if (c == PLAIN) check_bwd_varlen_literals(what, &params, fused);
    }
  }
  printf("    %d varlen backward calls\n", calls);
  uninstall_fake_gpu();
}

/* The backward's tensor maps are encoded before anything is cleared or launched: a failing encode (of
 * q, k, v or dout, and for the non-deterministic plan its dQ accumulator) fails the call naming the
 * tensor, with nothing cleared or launched; the next call runs whole. */
static void test_bwd_encode_failure(void) {
  static const char *const names[FUSED_DESCRIPTORS] = {
      "cuTensorMapEncodeTiled(q)", "cuTensorMapEncodeTiled(k)", "cuTensorMapEncodeTiled(v)",
      "cuTensorMapEncodeTiled(dout)", "cuTensorMapEncodeTiled(the dq accumulator)"};
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 2, 300, 400, 8, 2, 128, true, 0};
  for (int deterministic = 0; deterministic <= 1; deterministic++) {
    const int encodes = deterministic ? 4 : FUSED_DESCRIPTORS;
    for (int failing = 1; failing <= encodes; failing++) {
      install_fake_gpu(90, SHARED_SM90);
      aotk_attn_params params = bwd_params_for(d128);
      params.deterministic = deterministic;
      CHECK(expect_bwd_hopper(&params, 90, false, SHARED_SM90) &&
            expect_bwd_fused(&params, 90, false, SHARED_SM90) == !deterministic);
      const size_t workspace_bytes =
          deterministic ? bwd_workspace_bytes(&d128) : bwd_fused_workspace_bytes_for(&d128, false);
      fake.encode_result = CUDA_ERROR_INVALID_VALUE;
      fake.fail_encode_call = failing;
      reset_calls();
      reset_launch_log();
      aotk_status status = aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions(names[failing - 1]),
                "deterministic %d, encode %d failing: %s (\"%s\")", deterministic, failing, aotk_status_name(status),
                aotk_last_error());
      CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 0 && fake.calls[CALL_cuMemsetD32Async] == 0 &&
                    fake.calls[CALL_cuTensorMapEncodeTiled] == failing,
                "deterministic %d, encode %d failing: %s", deterministic, failing, called_functions());
      fake.encode_result = CUDA_SUCCESS;
      reset_launch_log();
      CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK);
      CHECK_MSG(fake.launches == 3 &&
                    fake.launch_log[1].kernel == (deterministic ? KERNEL_BWD_DKDV_HOPPER : KERNEL_BWD_FUSED_HOPPER) &&
                    fake.encode_count == encodes && fake.memsets == !deterministic,
                "deterministic %d, after encode %d failed: %d launches, %d encodes, %d clears", deterministic, failing,
                fake.launches, fake.encode_count, fake.memsets);
    }
  }
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_bwd_hopper_choice);
  RUN_TEST(test_bwd_hopper_varlen);
  RUN_TEST(test_bwd_encode_failure);
  aotk__driver_set_for_testing(NULL);
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);
  return aotk_test_finish();
}
