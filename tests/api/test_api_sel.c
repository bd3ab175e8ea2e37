/*
 * CPU tests of the public API, selection attention (0.3): its workspaces and queries,
 * the choice of its kernels by dtype, head dims, block size and group size, the forward's launch and
 * the backward's seven or eight (the split of long token lists), faults, and the index check's round
 * trip.
 * The fake driver and the shared models are tests/api/api_*.h; see api_fake_driver.h.
 */
#include <math.h>

#include "api_sel_model.h"

/* ---- selection: workspaces and query arguments ---- */

/* The backward's workspace: at least the size aotk_sel_query reports (the formula above, computed here
 * from the header's layout), not NULL, 16-byte aligned; checked after the params, before the driver. */
static void test_sel_bwd_workspace(void) {
  install_fake_gpu(90, SHARED_SM90);
  sel_shape shapes[4] = {default_sel_shape, default_sel_shape, default_sel_shape, default_sel_shape};
  shapes[1].dtype = AOTK_DTYPE_FLOAT16, shapes[1].num_seqs = 0, shapes[1].total_q = shapes[1].total_k = 1;
  shapes[1].heads_q = shapes[1].heads_kv = 1, shapes[1].slots = 1, shapes[1].block_size = 32;
  /* Lists split (chunks of 241 tokens for a group of 17, 5 per list), and 7007 token-list entries, not a
   * multiple of 4: that part too is rounded up to 16 bytes, ahead of the partial records. */
  shapes[2].heads_q = 17, shapes[2].heads_kv = 1, shapes[2].slots = 7, shapes[2].total_q = 1001;
  shapes[2].max_seqlen_k = 4097, shapes[2].num_seqs = 5, shapes[2].with_block_cnt = false;
  shapes[3].head_dim_qk = 192, shapes[3].block_size = 128, shapes[3].total_q = 17, shapes[3].heads_q = 6;
  shapes[3].heads_kv = 3, shapes[3].max_seqlen_k = 127;
  int cases = 0;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const sel_shape *s = &shapes[i];
    aotk_sel_params params = sel_params_for(*s, true);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_sel_query(AOTK_OP_SEL_BWD, &params, &info);
    CHECK_MSG(status == AOTK_OK, "shape %zu: %s (%s)", i, aotk_status_name(status), aotk_last_error());
    const size_t needed = sel_workspace_bytes(s);
    const int launches = sel_bwd_launches(s);
    CHECK_MSG(info.workspace_bytes == needed,
              "shape %zu: workspace_bytes %zu, expected %zu (delta %zu + 3 x offsets %zu + 2 x tokens %zu + partials "
              "%zu)", i, info.workspace_bytes, needed, sel_delta_bytes(s), sel_offsets_bytes(s), sel_tokens_bytes(s),
              sel_partials_bytes(s));
    CHECK_MSG(info.launches == launches, "shape %zu: %d launches, expected %d", i, info.launches, launches);
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
        {"4-byte aligned", byte_offset(FAKE_WORKSPACE, 4), needed + 64, AOTK_ERROR_MISALIGNED_POINTER},
        {"odd address", byte_offset(FAKE_WORKSPACE, 1), needed, AOTK_ERROR_MISALIGNED_POINTER},
        {"exactly the reported size", FAKE_WORKSPACE, needed, AOTK_OK},
        {"larger than needed", byte_offset(FAKE_WORKSPACE, 16), needed + 1, AOTK_OK},
    };
    for (size_t w = 0; w < sizeof workspaces / sizeof workspaces[0]; w++) {
      const aotk_sel_params before = params;
      reset_calls();
      reset_launch_log();
      status = aotk_sel_bwd(&params, workspaces[w].workspace, workspaces[w].bytes, FAKE_STREAM);
      CHECK_MSG(status == workspaces[w].expected, "shape %zu, %zu-byte workspace %s: %s (%s), expected %s", i, needed,
                workspaces[w].what, aotk_status_name(status), aotk_last_error(),
                aotk_status_name(workspaces[w].expected));
      CHECK(memcmp(&params, &before, sizeof params) == 0);
      if (workspaces[w].expected == AOTK_OK) {
        CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == launches && fake.logged_launches == launches,
                  "workspace %s: %d launches", workspaces[w].what, fake.calls[CALL_cuLaunchKernel]);
        /* The dQ pass stages delta at the workspace's start. */
        const recorded_launch *dq = &fake.launch_log[SEL_LAUNCH_DQ];
        CHECK_MSG(fake.logged_launches == launches && dq->kernel == KERNEL_SEL_BWD_DQ &&
                      arg_pointer(dq, SEL_DQ_DELTA) == (uint64_t)(uintptr_t)workspaces[w].workspace,
                  "workspace %s: delta is not at its start", workspaces[w].what);
      } else {
        CHECK_MSG(message_mentions("workspace"), "workspace %s: the message \"%s\" does not name the workspace",
                  workspaces[w].what, aotk_last_error());
        CHECK_MSG(total_calls() == 0, "workspace %s: reached the driver (%s)", workspaces[w].what, called_functions());
      }
      cases++;
    }
    CHECK(aotk_sel_bwd(&params, FAKE_WORKSPACE, needed - 1, FAKE_STREAM) == AOTK_ERROR_WORKSPACE_TOO_SMALL);
    char needed_text[32];
    snprintf(needed_text, sizeof needed_text, "%zu", needed);
    CHECK_MSG(message_mentions(needed_text), "the message \"%s\" does not say %zu bytes are needed", aotk_last_error(),
              needed);
  }
  /* Bad params are reported before a bad workspace. */
  aotk_sel_params params = valid_sel_bwd_params();
  params.block_size = 16;
  reset_calls();
  CHECK(aotk_sel_bwd(&params, NULL, 0, FAKE_STREAM) == AOTK_ERROR_INVALID_VALUE);
  CHECK(message_mentions("block_size"));
  CHECK(total_calls() == 0);
  printf("    %d workspaces\n", cases);
  uninstall_fake_gpu();
}

/* aotk_sel_check_indices needs 16 bytes of 16-byte-aligned workspace (its result word). */
static void test_sel_check_indices_workspace(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_sel_params params = valid_sel_params();
  const struct {
    const char *what;
    void *workspace;
    size_t bytes;
    aotk_status expected;
  } workspaces[] = {
      {"NULL, 16 bytes", NULL, 16, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"NULL, 0 bytes", NULL, 0, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"15 bytes", FAKE_WORKSPACE, 15, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"8 bytes (one word)", FAKE_WORKSPACE, 8, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"0 bytes", FAKE_WORKSPACE, 0, AOTK_ERROR_WORKSPACE_TOO_SMALL},
      {"8-byte aligned", byte_offset(FAKE_WORKSPACE, 8), 16, AOTK_ERROR_MISALIGNED_POINTER},
      {"4-byte aligned, ample", byte_offset(FAKE_WORKSPACE, 4), 4096, AOTK_ERROR_MISALIGNED_POINTER},
      {"odd address", byte_offset(FAKE_WORKSPACE, 1), 16, AOTK_ERROR_MISALIGNED_POINTER},
      {"16 bytes", FAKE_WORKSPACE, 16, AOTK_OK},
      {"more, 16 bytes further", byte_offset(FAKE_WORKSPACE, 16), 17, AOTK_OK},
  };
  for (size_t w = 0; w < sizeof workspaces / sizeof workspaces[0]; w++) {
    const aotk_sel_params before = params;
    reset_calls();
    aotk_status status = aotk_sel_check_indices(&params, workspaces[w].workspace, workspaces[w].bytes, FAKE_STREAM);
    CHECK_MSG(status == workspaces[w].expected, "workspace %s: %s (%s), expected %s", workspaces[w].what,
              aotk_status_name(status), aotk_last_error(), aotk_status_name(workspaces[w].expected));
    CHECK(memcmp(&params, &before, sizeof params) == 0);
    if (workspaces[w].expected == AOTK_OK) {
      CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 1 &&
                    fake.written_address == (CUdeviceptr)(uintptr_t)workspaces[w].workspace,
                "workspace %s: %d launches, result word at %#llx", workspaces[w].what,
                fake.calls[CALL_cuLaunchKernel], (unsigned long long)fake.written_address);
    } else {
      CHECK_MSG(message_mentions("workspace"), "workspace %s: the message \"%s\" does not name the workspace",
                workspaces[w].what, aotk_last_error());
      CHECK_MSG(total_calls() == 0, "workspace %s: reached the driver (%s)", workspaces[w].what, called_functions());
    }
    if (workspaces[w].expected == AOTK_ERROR_WORKSPACE_TOO_SMALL) {
      CHECK_MSG(message_mentions("needs 16"), "workspace %s: the message \"%s\" does not say 16 bytes are needed",
                workspaces[w].what, aotk_last_error());
    }
  }
  /* Bad params are reported before a bad workspace. */
  params.block_size = 0;
  reset_calls();
  CHECK(aotk_sel_check_indices(&params, NULL, 0, FAKE_STREAM) == AOTK_ERROR_INVALID_VALUE);
  CHECK(message_mentions("block_size") && total_calls() == 0);
  uninstall_fake_gpu();
}

/* Each query answers its own API's ops: aotk_sel_query the selection's, aotk_query dense attention's. */
static void test_sel_query_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_sel_params params = valid_sel_bwd_params();
  reset_calls();
  CHECK(aotk_sel_query(AOTK_OP_SEL_FWD, &params, NULL) == AOTK_ERROR_NULL_POINTER && message_mentions("info"));
  aotk_kernel_info info;
  poison_info(&info);
  info.struct_size = 0;
  CHECK(aotk_sel_query(AOTK_OP_SEL_FWD, &params, &info) == AOTK_ERROR_STRUCT_SIZE && message_mentions("struct_size"));
  CHECK(aotk_sel_query(AOTK_OP_SEL_BWD, NULL, &info) == AOTK_ERROR_STRUCT_SIZE);

  static const int dense_and_bad_ops[] = {AOTK_OP_ATTN_FWD, AOTK_OP_ATTN_BWD, 0, -1, 5, 1000};
  for (size_t i = 0; i < sizeof dense_and_bad_ops / sizeof dense_and_bad_ops[0]; i++) {
    poison_info(&info);
    aotk_status status = aotk_sel_query((aotk_op)dense_and_bad_ops[i], &params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "aotk_sel_query(op %d): %s", dense_and_bad_ops[i],
              aotk_status_name(status));
    CHECK_MSG(message_mentions("AOTK_OP_SEL_FWD"), "aotk_sel_query(op %d): message \"%s\"", dense_and_bad_ops[i],
              aotk_last_error());
    CHECK(info_untouched(&info));
    /* The op is checked before the params. */
    CHECK(aotk_sel_query((aotk_op)dense_and_bad_ops[i], NULL, &info) == AOTK_ERROR_INVALID_VALUE);
  }
  aotk_attn_params attn_params = valid_bwd_params();
  static const aotk_op sel_ops[] = {AOTK_OP_SEL_FWD, AOTK_OP_SEL_BWD};
  for (size_t i = 0; i < 2; i++) {
    poison_info(&info);
    aotk_status status = aotk_query(sel_ops[i], &attn_params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "aotk_query(op %d): %s", (int)sel_ops[i], aotk_status_name(status));
    CHECK_MSG(message_mentions("aotk_sel_query"), "aotk_query(op %d): message \"%s\"", (int)sel_ops[i],
              aotk_last_error());
    CHECK(info_untouched(&info));
  }
  CHECK_MSG(total_calls() == 0, "bad query arguments reached the driver (%s)", called_functions());

  /* Both ops answer: the backward's params serve the forward too. The forward's alone are not enough
   * for the backward (no dout; without lse, no lse). */
  poison_info(&info);
  CHECK(aotk_sel_query(AOTK_OP_SEL_FWD, &params, &info) == AOTK_OK && info.launches == 1 && info.workspace_bytes == 0);
  poison_info(&info);
  CHECK(aotk_sel_query(AOTK_OP_SEL_BWD, &params, &info) == AOTK_OK &&
        info.launches == sel_bwd_launches(&default_sel_shape));
  aotk_sel_params fwd_params = valid_sel_params();
  poison_info(&info);
  CHECK(aotk_sel_query(AOTK_OP_SEL_BWD, &fwd_params, &info) == AOTK_ERROR_NULL_POINTER && message_mentions("dout"));
  CHECK(info_untouched(&info));
  fwd_params.lse.data = NULL;
  CHECK(aotk_sel_query(AOTK_OP_SEL_BWD, &fwd_params, &info) == AOTK_ERROR_NULL_POINTER && message_mentions("lse"));
  CHECK(info_untouched(&info));
  CHECK(aotk_sel_query(AOTK_OP_SEL_FWD, &fwd_params, &info) == AOTK_OK);

  /* A smaller info struct (an older caller): only its prefix is written. */
  const size_t prefix = offsetof(aotk_kernel_info, workspace_bytes);
  poison_info(&info);
  info.struct_size = prefix;
  CHECK(aotk_sel_query(AOTK_OP_SEL_BWD, &params, &info) == AOTK_OK);
  CHECK(info.struct_size == prefix && strncmp(info.kernel_name, "sel_bwd_dkdv_", 13) == 0 && info.grid > 0);
  const unsigned char *bytes = (const unsigned char *)&info;
  bool tail_untouched = true;
  for (size_t i = prefix; i < sizeof info; i++) tail_untouched = tail_untouched && bytes[i] == POISON;
  CHECK_MSG(tail_untouched, "aotk_sel_query(AOTK_OP_SEL_BWD) wrote past struct_size");
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "aotk_sel_query loaded or launched (%s)", called_functions());
  uninstall_fake_gpu();
}

/* ---- selection: what runs, and with which arguments ---- */

static void check_packed_strides(const char *what, const char *kernel, const recorded_launch *launch, int base,
                                 const aotk_tensor *t, const char *name) {
  /* An absent tensor (block_cnt, the forward's lse) passes zero strides. */
  const int64_t token = t->data != NULL ? t->strides[0] : 0, head = t->data != NULL ? t->strides[1] : 0;
  CHECK_MSG(arg_i64(launch, base) == token && arg_i32(launch, base + 1) == head,
            "%s: %s packs %s's strides as (%lld, %d), expected (%lld, %lld)", what, kernel, name,
            (long long)arg_i64(launch, base), arg_i32(launch, base + 1), (long long)token, (long long)head);
}

/* The flags the selection kernels are told (kernels/sel_attn.py), less WRITE_LSE, which only the
 * forward reads. */
static int32_t expected_sel_flags(const aotk_sel_params *params) {
  return (params->cu_seqlens_q.data != NULL ? SEL_FLAG_VARLEN : 0) |
         (params->block_cnt.data != NULL ? SEL_FLAG_BLOCK_CNT : 0);
}

/* aotk_sel_query(AOTK_OP_SEL_FWD), then aotk_sel_fwd on the fake GPU `g`: the query names the row of the
 * problem's dtype, head dims and block size whose tile the group size calls for (block_m 16 up to a group
 * of 16, else 64) on the GPU's target, with grid heads_kv * total_q * ceil(group / block_m); the call
 * launches it so, with every argument in the kernel's order. */
static void check_sel_fwd(const char *what, const aotk_sel_params *params, const sel_shape *s, const gpu *g) {
  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status status = aotk_sel_query(AOTK_OP_SEL_FWD, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "%s: aotk_sel_query loaded or launched (%s)", what, called_functions());
  const aotk__kernel_entry *row = expected_sel_row(AOTK__FAMILY_SEL_FWD, g->arch, s);
  CHECK_MSG(row != NULL, "%s: no sm_%d sel_fwd row", what, g->arch);
  if (row == NULL) return;
  const int64_t group = sel_group_size(s), block_m = sel_expected_block_m(s), chunks = ceil_div(group, block_m);
  const int64_t grid = s->heads_kv * s->total_q * chunks;
  CHECK(info.struct_size == sizeof info);
  CHECK_MSG(strncmp(info.kernel_name, "sel_fwd_", 8) == 0 && strcmp(info.kernel_name, row->name) == 0,
            "%s: aotk_sel_query names %s, expected %s", what, info.kernel_name, row->name);
  CHECK_MSG(info.arch == g->arch && info.from_ptx == g->from_ptx, "%s: sm_%d from_ptx %d, expected sm_%d from_ptx %d",
            what, info.arch, info.from_ptx, g->arch, g->from_ptx);
  CHECK_MSG(info.block_m == block_m && info.block_n == s->block_size,
            "%s: a group of %lld runs in block_m %d, block_n %d; expected %lld, %d", what, (long long)group,
            info.block_m, info.block_n, (long long)block_m, s->block_size);
  CHECK_MSG(info.head_dim_qk == s->head_dim_qk && info.head_dim_v == s->head_dim_v, "%s: head dims %d/%d", what,
            info.head_dim_qk, info.head_dim_v);
  CHECK(info.num_warps == row->num_warps && info.shared_bytes == row->shared_bytes);
  CHECK_MSG(info.aligned == row->aligned && info.aligned == sel_expected_g16(AOTK__FAMILY_SEL_FWD, s),
            "%s: a group of %lld runs the variant with aligned %d", what, (long long)group, info.aligned);
  CHECK_MSG(info.grid == grid, "%s: info.grid %lld, expected %lld", what, (long long)info.grid, (long long)grid);
  CHECK(info.workspace_bytes == 0 && info.launches == 1);
  const uint32_t features = s->num_seqs > 0 ? AOTK_FEATURE_VARLEN : 0;
  CHECK_MSG(info.features == features, "%s: features %#x, expected %#x", what, info.features, features);

  reset_launch_log();
  const int launches_before = fake.launches;
  status = aotk_sel_fwd(params, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_fwd %s (%s)", what, aotk_status_name(status), aotk_last_error());
  CHECK_MSG(aotk_last_error()[0] == '\0', "%s: a success left the message \"%s\"", what, aotk_last_error());
  CHECK_MSG(fake.launches == launches_before + 1, "%s: %d launches", what, fake.launches - launches_before);
  if (status != AOTK_OK || fake.logged_launches != 1) return;
  const recorded_launch *launch = &fake.launch_log[0];
  const char *kernel = "sel_fwd";
  check_sel_launch_shape(what, launch, KERNEL_SEL_FWD, row, grid, SEL_FWD_GLOBAL_SCRATCH);
  if (launch->kernel != KERNEL_SEL_FWD) return;
  check_pointer(what, kernel, launch, SEL_FWD_Q, params->q.data, "q");
  check_pointer(what, kernel, launch, SEL_FWD_K, params->k.data, "k");
  check_pointer(what, kernel, launch, SEL_FWD_V, params->v.data, "v");
  check_pointer(what, kernel, launch, SEL_FWD_OUT, params->out.data, "out");
  check_pointer(what, kernel, launch, SEL_FWD_LSE, params->lse.data, "lse");
  check_pointer(what, kernel, launch, SEL_FWD_CU_SEQLENS_Q, params->cu_seqlens_q.data, "cu_seqlens_q");
  check_pointer(what, kernel, launch, SEL_FWD_CU_SEQLENS_K, params->cu_seqlens_k.data, "cu_seqlens_k");
  check_pointer(what, kernel, launch, SEL_FWD_BLOCK_IDX, params->block_idx.data, "block_idx");
  check_pointer(what, kernel, launch, SEL_FWD_BLOCK_CNT, params->block_cnt.data, "block_cnt");
  const aotk_tensor *tensors[] = {&params->q,   &params->k,         &params->v,        &params->out,
                                  &params->lse, &params->block_idx, &params->block_cnt};
  static const char *const names[] = {"q", "k", "v", "out", "lse", "block_idx", "block_cnt"};
  for (int t = 0; t < 7; t++) {
    check_packed_strides(what, kernel, launch, SEL_FWD_STRIDE_QS + 2 * t, tensors[t], names[t]);
  }
  check_int(what, kernel, launch, SEL_FWD_NUM_SEQS, sel_num_seqs(s), "num_seqs");
  check_int(what, kernel, launch, SEL_FWD_TOTAL_Q, s->total_q, "total_q");
  check_int(what, kernel, launch, SEL_FWD_TOTAL_K, s->total_k, "total_k");
  check_int(what, kernel, launch, SEL_FWD_MAX_SEQLEN_K, sel_max_seqlen_k(s), "max_seqlen_k");
  check_int(what, kernel, launch, SEL_FWD_GROUP_SIZE, group, "group_size");
  check_int(what, kernel, launch, SEL_FWD_GROUP_CHUNKS, chunks, "group_chunks");
  check_int(what, kernel, launch, SEL_FWD_NUM_SLOTS, s->slots, "num_slots");
  const int32_t flags = expected_sel_flags(params) | (params->lse.data != NULL ? SEL_FLAG_WRITE_LSE : 0);
  CHECK_MSG(arg_i32(launch, SEL_FWD_FLAGS) == flags, "%s: flags %#x, expected %#x", what,
            (unsigned)arg_i32(launch, SEL_FWD_FLAGS), (unsigned)flags);
  check_float(what, kernel, launch, SEL_FWD_QK_SCALE_LOG2, sel_scale(params, s) / log(2.0), "qk_scale_log2");
}

/* The binary search over cu_seqlens_q that the count and scatter passes run per index entry: enough
 * halvings of num_seqs to reach one sequence (at least one). */
static int32_t sel_search_steps(const sel_shape *s) {
  int32_t steps = 1;
  while (((int64_t)1 << steps) < sel_num_seqs(s)) steps++;
  return steps;
}

/* aotk_sel_query(AOTK_OP_SEL_BWD), then aotk_sel_bwd with `workspace`: the query describes the dK/dV pass
 * (its grid with the chunks of split lists), the launches and the workspace its formula gives; the call
 * launches the index's five passes, then dQ (on the forward's grid), then dK/dV, each with its grid and
 * arguments, the workspace's six parts at their offsets; then, when lists may be split, dK/dV again with
 * the same arguments but SEL_FLAG_DKDV_REDUCE, one program per key tile. */
static void check_sel_bwd(const char *what, const aotk_sel_params *params, const sel_shape *s, const gpu *g,
                          void *workspace) {
  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status status = aotk_sel_query(AOTK_OP_SEL_BWD, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "%s: aotk_sel_query loaded or launched (%s)", what, called_functions());
  const aotk__kernel_entry *rows[SEL_BWD_KERNELS];
  for (int i = 0; i < SEL_BWD_KERNELS; i++) {
    rows[i] = expected_sel_row(sel_bwd_families[i], g->arch, s);
    CHECK_MSG(rows[i] != NULL, "%s: no sm_%d %s row", what, g->arch, kernel_signatures[sel_bwd_kernels[i]].function);
    if (rows[i] == NULL) return;
  }
  const aotk__kernel_entry *dq_row = rows[SEL_LAUNCH_DQ], *dkdv_row = rows[SEL_LAUNCH_DKDV];
  const int64_t group = sel_group_size(s), num_seqs = sel_num_seqs(s), max_seqlen_k = sel_max_seqlen_k(s);
  const int64_t stride_offsets = sel_offsets_stride(s), stride_tokens = s->total_q * s->slots;
  const int64_t zero_count = s->heads_kv * stride_offsets;
  const int64_t entry_chunks = ceil_div(s->total_q * s->slots, rows[SEL_LAUNCH_COUNT]->block_m);
  const int64_t dq_chunks = ceil_div(group, dq_row->block_m);
  const int64_t key_tiles = ceil_div(max_seqlen_k, dkdv_row->block_n);
  const int64_t chunk_tokens = sel_chunk_tokens(s), max_chunks = sel_max_chunks(s);
  const int launches = sel_bwd_launches(s);
  const int64_t grids[SEL_BWD_KERNELS] = {ceil_div(zero_count, rows[SEL_LAUNCH_ZERO]->block_m),
                                          s->heads_kv * entry_chunks,
                                          s->heads_kv,
                                          s->heads_kv * entry_chunks,
                                          s->heads_kv * sel_index_slots(s),
                                          s->heads_kv * s->total_q * dq_chunks,
                                          s->heads_kv * num_seqs * key_tiles * max_chunks};
  const size_t workspace_bytes = sel_workspace_bytes(s);
  CHECK(info.struct_size == sizeof info);
  CHECK_MSG(strncmp(info.kernel_name, "sel_bwd_dkdv_", 13) == 0 && strcmp(info.kernel_name, dkdv_row->name) == 0,
            "%s: aotk_sel_query names %s, expected %s", what, info.kernel_name, dkdv_row->name);
  CHECK_MSG(info.launches == launches, "%s: launches %d, expected %d (max_chunks %lld)", what, info.launches,
            launches, (long long)max_chunks);
  CHECK_MSG(info.workspace_bytes == workspace_bytes, "%s: workspace_bytes %zu, expected %zu", what,
            info.workspace_bytes, workspace_bytes);
  CHECK_MSG(info.arch == g->arch && info.from_ptx == g->from_ptx, "%s: sm_%d from_ptx %d", what, info.arch,
            info.from_ptx);
  CHECK(info.num_warps == dkdv_row->num_warps && info.shared_bytes == dkdv_row->shared_bytes &&
        info.block_m == dkdv_row->block_m && info.block_n == dkdv_row->block_n);
  CHECK_MSG(info.aligned == dkdv_row->aligned && info.aligned == sel_expected_g16(AOTK__FAMILY_SEL_BWD_DKDV, s),
            "%s: a group of %lld runs the dK/dV variant with aligned %d", what, (long long)group, info.aligned);
  CHECK_MSG(info.head_dim_qk == s->head_dim_qk && info.head_dim_v == s->head_dim_v, "%s: head dims %d/%d", what,
            info.head_dim_qk, info.head_dim_v);
  CHECK_MSG(info.grid == grids[SEL_LAUNCH_DKDV], "%s: info.grid %lld, expected %lld", what, (long long)info.grid,
            (long long)grids[SEL_LAUNCH_DKDV]);
  const uint32_t features = s->num_seqs > 0 ? AOTK_FEATURE_VARLEN : 0;
  CHECK_MSG(info.features == features, "%s: features %#x, expected %#x", what, info.features, features);
  /* The dQ pass runs a group in the forward's tile. */
  CHECK_MSG(dq_row->block_m == sel_expected_block_m(s) && dq_row->block_n == s->block_size,
            "%s: %s for a group of %lld", what, dq_row->name, (long long)group);

  reset_launch_log();
  const int launches_before = fake.launches;
  status = aotk_sel_bwd(params, workspace, workspace_bytes, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_bwd %s (%s)", what, aotk_status_name(status), aotk_last_error());
  CHECK_MSG(aotk_last_error()[0] == '\0', "%s: a success left the message \"%s\"", what, aotk_last_error());
  CHECK_MSG(fake.launches == launches_before + launches && fake.logged_launches == launches,
            "%s: %d launches, expected %d (max_chunks %lld)", what, fake.launches - launches_before, launches,
            (long long)max_chunks);
  if (status != AOTK_OK || fake.logged_launches != launches) return;
  bool in_order = true;
  for (int i = 0; i < SEL_BWD_KERNELS; i++) {
    char step[200];
    snprintf(step, sizeof step, "%s, launch %d", what, i + 1);
    check_sel_launch_shape(step, &fake.launch_log[i], sel_bwd_kernels[i], rows[i], grids[i], sel_bwd_scratch[i]);
    in_order = in_order && fake.launch_log[i].kernel == sel_bwd_kernels[i];
  }
  if (launches > SEL_BWD_KERNELS) { /* the reduce: one program per key tile */
    char step[200];
    snprintf(step, sizeof step, "%s, launch %d (the reduce)", what, SEL_LAUNCH_DKDV_REDUCE + 1);
    check_sel_launch_shape(step, &fake.launch_log[SEL_LAUNCH_DKDV_REDUCE], KERNEL_SEL_BWD_DKDV, dkdv_row,
                           s->heads_kv * num_seqs * key_tiles, SEL_DKDV_GLOBAL_SCRATCH);
    in_order = in_order && fake.launch_log[SEL_LAUNCH_DKDV_REDUCE].kernel == KERNEL_SEL_BWD_DKDV;
  }
  if (!in_order) return;

  /* The workspace: delta, the index's offsets, its cursors, each list's first partial record, its token
   * lists, the dQ pass's compacted rows (as large as the lists), the split lists' partial records, each
   * 16-byte aligned. */
  const uintptr_t delta = (uintptr_t)workspace, offsets = delta + sel_delta_bytes(s);
  const uintptr_t cursors = offsets + sel_offsets_bytes(s), chunks = cursors + sel_offsets_bytes(s);
  const uintptr_t tokens = chunks + sel_offsets_bytes(s), compact = tokens + sel_tokens_bytes(s);
  const uintptr_t partials = sel_partials_bytes(s) > 0 ? compact + sel_tokens_bytes(s) : 0; /* none: NULL */
  const int32_t flags = expected_sel_flags(params);
  const double scale = sel_scale(params, s);

  const recorded_launch *zero = &fake.launch_log[SEL_LAUNCH_ZERO];
  const char *kernel = "sel_index_zero";
  check_pointer(what, kernel, zero, SEL_ZERO_OFFSETS, (void *)offsets, "Offsets");
  check_int(what, kernel, zero, SEL_ZERO_COUNT, zero_count, "count");

  /* The count and scatter passes read the index entries alike. */
  const struct {
    const char *kernel;
    int launch, base, stride_offsets;
  } entry_passes[] = {{"sel_index_count", SEL_LAUNCH_COUNT, SEL_COUNT_BLOCK_IDX, SEL_COUNT_STRIDE_OFFSETS},
                      {"sel_index_scatter", SEL_LAUNCH_SCATTER, SEL_SCATTER_BLOCK_IDX, SEL_SCATTER_STRIDE_OFFSETS}};
  for (int e = 0; e < 2; e++) {
    const recorded_launch *launch = &fake.launch_log[entry_passes[e].launch];
    kernel = entry_passes[e].kernel;
    const int base = entry_passes[e].base, ints = entry_passes[e].stride_offsets + (e == 0 ? 1 : 2);
    check_pointer(what, kernel, launch, base + 0, params->block_idx.data, "block_idx");
    check_pointer(what, kernel, launch, base + 1, params->block_cnt.data, "block_cnt");
    check_pointer(what, kernel, launch, base + 2, params->cu_seqlens_q.data, "cu_seqlens_q");
    check_pointer(what, kernel, launch, base + 3, params->cu_seqlens_k.data, "cu_seqlens_k");
    const int strides = e == 0 ? SEL_COUNT_STRIDE_IS : SEL_SCATTER_STRIDE_IS;
    check_packed_strides(what, kernel, launch, strides, &params->block_idx, "block_idx");
    check_packed_strides(what, kernel, launch, strides + 2, &params->block_cnt, "block_cnt");
    check_int(what, kernel, launch, entry_passes[e].stride_offsets, stride_offsets, "stride_offsets");
    check_int(what, kernel, launch, ints + 0, num_seqs, "num_seqs");
    check_int(what, kernel, launch, ints + 1, s->total_q, "total_q");
    check_int(what, kernel, launch, ints + 2, s->total_k, "total_k");
    check_int(what, kernel, launch, ints + 3, max_seqlen_k, "max_seqlen_k");
    check_int(what, kernel, launch, ints + 4, s->block_size, "block_size");
    check_int(what, kernel, launch, ints + 5, s->slots, "num_slots");
    check_int(what, kernel, launch, ints + 6, entry_chunks, "num_chunks");
    check_int(what, kernel, launch, ints + 7, sel_search_steps(s), "search_steps");
    CHECK_MSG((arg_i32(launch, ints + 8) & ~SEL_FLAG_WRITE_LSE) == flags, "%s: %s flags %#x, expected %#x", what,
              kernel, (unsigned)arg_i32(launch, ints + 8), (unsigned)flags);
  }
  _Static_assert(SEL_COUNT_NUM_SEQS == SEL_COUNT_STRIDE_OFFSETS + 1 && SEL_COUNT_FLAGS == SEL_COUNT_NUM_SEQS + 8,
                 "sel_index_count's ints follow stride_offsets");
  _Static_assert(SEL_SCATTER_NUM_SEQS == SEL_SCATTER_STRIDE_OFFSETS + 2 &&
                     SEL_SCATTER_FLAGS == SEL_SCATTER_NUM_SEQS + 8,
                 "sel_index_scatter's ints follow stride_offsets and stride_tokens");
  const recorded_launch *count = &fake.launch_log[SEL_LAUNCH_COUNT];
  check_pointer(what, "sel_index_count", count, SEL_COUNT_OFFSETS, (void *)offsets, "Offsets");
  const recorded_launch *scatter = &fake.launch_log[SEL_LAUNCH_SCATTER];
  kernel = "sel_index_scatter";
  check_pointer(what, kernel, scatter, SEL_SCATTER_CURSORS, (void *)cursors, "Cursors");
  check_pointer(what, kernel, scatter, SEL_SCATTER_TOKENS, (void *)tokens, "Tokens");
  CHECK_MSG(arg_i64(scatter, SEL_SCATTER_STRIDE_TOKENS) == stride_tokens, "%s: %s stride_tokens %lld, expected %lld",
            what, kernel, (long long)arg_i64(scatter, SEL_SCATTER_STRIDE_TOKENS), (long long)stride_tokens);

  const recorded_launch *scan = &fake.launch_log[SEL_LAUNCH_SCAN];
  kernel = "sel_index_scan";
  check_pointer(what, kernel, scan, SEL_SCAN_OFFSETS, (void *)offsets, "Offsets");
  check_pointer(what, kernel, scan, SEL_SCAN_CURSORS, (void *)cursors, "Cursors");
  check_pointer(what, kernel, scan, SEL_SCAN_CHUNKS, (void *)chunks, "Chunks");
  check_int(what, kernel, scan, SEL_SCAN_STRIDE_OFFSETS, stride_offsets, "stride_offsets");
  check_int(what, kernel, scan, SEL_SCAN_SLOTS, sel_index_slots(s), "slots");
  check_int(what, kernel, scan, SEL_SCAN_CHUNK_TOKENS, chunk_tokens, "chunk_tokens");
  check_int(what, kernel, scan, SEL_SCAN_MAX_CHUNKS, max_chunks, "max_chunks");

  const recorded_launch *order = &fake.launch_log[SEL_LAUNCH_ORDER];
  kernel = "sel_index_order";
  check_pointer(what, kernel, order, SEL_ORDER_BLOCK_IDX, params->block_idx.data, "block_idx");
  check_pointer(what, kernel, order, SEL_ORDER_BLOCK_CNT, params->block_cnt.data, "block_cnt");
  check_pointer(what, kernel, order, SEL_ORDER_CU_SEQLENS_Q, params->cu_seqlens_q.data, "cu_seqlens_q");
  check_pointer(what, kernel, order, SEL_ORDER_CU_SEQLENS_K, params->cu_seqlens_k.data, "cu_seqlens_k");
  check_pointer(what, kernel, order, SEL_ORDER_OFFSETS, (void *)offsets, "Offsets");
  check_pointer(what, kernel, order, SEL_ORDER_TOKENS, (void *)tokens, "Tokens");
  check_packed_strides(what, kernel, order, SEL_ORDER_STRIDE_IS, &params->block_idx, "block_idx");
  check_packed_strides(what, kernel, order, SEL_ORDER_STRIDE_CS, &params->block_cnt, "block_cnt");
  check_int(what, kernel, order, SEL_ORDER_STRIDE_OFFSETS, stride_offsets, "stride_offsets");
  CHECK_MSG(arg_i64(order, SEL_ORDER_STRIDE_TOKENS) == stride_tokens, "%s: %s stride_tokens %lld, expected %lld",
            what, kernel, (long long)arg_i64(order, SEL_ORDER_STRIDE_TOKENS), (long long)stride_tokens);
  check_int(what, kernel, order, SEL_ORDER_NUM_SEQS, num_seqs, "num_seqs");
  check_int(what, kernel, order, SEL_ORDER_TOTAL_Q, s->total_q, "total_q");
  check_int(what, kernel, order, SEL_ORDER_TOTAL_K, s->total_k, "total_k");
  check_int(what, kernel, order, SEL_ORDER_MAX_SEQLEN_K, max_seqlen_k, "max_seqlen_k");
  check_int(what, kernel, order, SEL_ORDER_BLOCK_SIZE, s->block_size, "block_size");
  check_int(what, kernel, order, SEL_ORDER_NUM_SLOTS, s->slots, "num_slots");
  CHECK_MSG((arg_i32(order, SEL_ORDER_FLAGS) & ~SEL_FLAG_WRITE_LSE) == flags, "%s: %s flags %#x, expected %#x", what,
            kernel, (unsigned)arg_i32(order, SEL_ORDER_FLAGS), (unsigned)flags);

  const recorded_launch *dq = &fake.launch_log[SEL_LAUNCH_DQ];
  kernel = "sel_bwd_dq";
  const void *dq_pointers[] = {params->q.data,    params->k.data,  params->v.data,   params->out.data,
                               params->dout.data, params->lse.data, params->dq.data, (void *)delta,
                               params->cu_seqlens_q.data, params->cu_seqlens_k.data, params->block_idx.data,
                               params->block_cnt.data, (void *)compact};
  static const char *const dq_pointer_names[] = {"q", "k", "v", "out", "dout", "lse", "dq", "Delta",
                                                 "cu_seqlens_q", "cu_seqlens_k", "block_idx", "block_cnt",
                                                 "Compact"};
  for (int i = 0; i < 13; i++) check_pointer(what, kernel, dq, SEL_DQ_Q + i, dq_pointers[i], dq_pointer_names[i]);
  const aotk_tensor *dq_tensors[] = {&params->q,  &params->k,   &params->v,         &params->out,      &params->dout,
                                     &params->dq, &params->lse, &params->block_idx, &params->block_cnt};
  static const char *const dq_tensor_names[] = {"q", "k", "v", "out", "dout", "dq", "lse", "block_idx", "block_cnt"};
  for (int t = 0; t < 9; t++) {
    check_packed_strides(what, kernel, dq, SEL_DQ_STRIDE_QS + 2 * t, dq_tensors[t], dq_tensor_names[t]);
  }
  check_int(what, kernel, dq, SEL_DQ_NUM_SEQS, num_seqs, "num_seqs");
  check_int(what, kernel, dq, SEL_DQ_TOTAL_Q, s->total_q, "total_q");
  check_int(what, kernel, dq, SEL_DQ_TOTAL_K, s->total_k, "total_k");
  check_int(what, kernel, dq, SEL_DQ_MAX_SEQLEN_K, max_seqlen_k, "max_seqlen_k");
  check_int(what, kernel, dq, SEL_DQ_HEADS_Q, s->heads_q, "heads_q");
  check_int(what, kernel, dq, SEL_DQ_GROUP_SIZE, group, "group_size");
  check_int(what, kernel, dq, SEL_DQ_GROUP_CHUNKS, dq_chunks, "group_chunks");
  check_int(what, kernel, dq, SEL_DQ_NUM_SLOTS, s->slots, "num_slots");
  CHECK_MSG((arg_i32(dq, SEL_DQ_FLAGS) & ~SEL_FLAG_WRITE_LSE) == flags, "%s: dQ flags %#x, expected %#x", what,
            (unsigned)arg_i32(dq, SEL_DQ_FLAGS), (unsigned)flags);
  check_float(what, kernel, dq, SEL_DQ_QK_SCALE_LOG2, scale / log(2.0), "qk_scale_log2");
  check_float(what, kernel, dq, SEL_DQ_SOFTMAX_SCALE, scale, "softmax_scale");

  const recorded_launch *dkdv = &fake.launch_log[SEL_LAUNCH_DKDV];
  kernel = "sel_bwd_dkdv";
  const void *dkdv_pointers[] = {params->q.data,  params->k.data,  params->v.data,
                                 params->dout.data, params->lse.data, (void *)delta,
                                 params->dk.data, params->dv.data, params->cu_seqlens_q.data,
                                 params->cu_seqlens_k.data, (void *)offsets, (void *)tokens,
                                 (void *)chunks, (void *)partials};
  static const char *const dkdv_pointer_names[] = {"q", "k", "v", "dout", "lse", "Delta", "dk", "dv",
                                                   "cu_seqlens_q", "cu_seqlens_k", "Offsets", "Tokens",
                                                   "Chunks", "Partials"};
  for (int i = 0; i < 14; i++) {
    check_pointer(what, kernel, dkdv, SEL_DKDV_Q + i, dkdv_pointers[i], dkdv_pointer_names[i]);
  }
  const aotk_tensor *dkdv_tensors[] = {&params->q,  &params->k,  &params->v,  &params->dout,
                                       &params->dk, &params->dv, &params->lse};
  static const char *const dkdv_tensor_names[] = {"q", "k", "v", "dout", "dk", "dv", "lse"};
  for (int t = 0; t < 7; t++) {
    check_packed_strides(what, kernel, dkdv, SEL_DKDV_STRIDE_QS + 2 * t, dkdv_tensors[t], dkdv_tensor_names[t]);
  }
  check_int(what, kernel, dkdv, SEL_DKDV_STRIDE_OFFSETS, stride_offsets, "stride_offsets");
  CHECK_MSG(arg_i64(dkdv, SEL_DKDV_STRIDE_TOKENS) == stride_tokens, "%s: dK/dV stride_tokens %lld, expected %lld",
            what, (long long)arg_i64(dkdv, SEL_DKDV_STRIDE_TOKENS), (long long)stride_tokens);
  check_int(what, kernel, dkdv, SEL_DKDV_NUM_SEQS, num_seqs, "num_seqs");
  check_int(what, kernel, dkdv, SEL_DKDV_TOTAL_Q, s->total_q, "total_q");
  check_int(what, kernel, dkdv, SEL_DKDV_TOTAL_K, s->total_k, "total_k");
  check_int(what, kernel, dkdv, SEL_DKDV_MAX_SEQLEN_K, max_seqlen_k, "max_seqlen_k");
  check_int(what, kernel, dkdv, SEL_DKDV_HEADS_Q, s->heads_q, "heads_q");
  check_int(what, kernel, dkdv, SEL_DKDV_GROUP_SIZE, group, "group_size");
  check_int(what, kernel, dkdv, SEL_DKDV_NUM_KEY_TILES, key_tiles, "num_key_tiles");
  check_int(what, kernel, dkdv, SEL_DKDV_CHUNK_TOKENS, chunk_tokens, "chunk_tokens");
  check_int(what, kernel, dkdv, SEL_DKDV_MAX_CHUNKS, max_chunks, "max_chunks");
  check_int(what, kernel, dkdv, SEL_DKDV_PARTIALS_PER_HEAD, sel_partials_per_head(s), "partials_per_head");
  CHECK_MSG((arg_i32(dkdv, SEL_DKDV_FLAGS) & ~SEL_FLAG_WRITE_LSE) == flags, "%s: dK/dV flags %#x, expected %#x", what,
            (unsigned)arg_i32(dkdv, SEL_DKDV_FLAGS), (unsigned)flags);
  check_float(what, kernel, dkdv, SEL_DKDV_QK_SCALE_LOG2, scale / log(2.0), "qk_scale_log2");
  check_float(what, kernel, dkdv, SEL_DKDV_SOFTMAX_SCALE, scale, "softmax_scale");
  if (launches == SEL_BWD_KERNELS) return;

  /* The reduce reads the split lists' records where the first launch wrote them: every argument as
   * there, the flags with SEL_FLAG_DKDV_REDUCE added. */
  const recorded_launch *reduce = &fake.launch_log[SEL_LAUNCH_DKDV_REDUCE];
  for (int i = 0; i < SEL_DKDV_PARAM_COUNT; i++) {
    if (i == SEL_DKDV_FLAGS) continue;
    CHECK_MSG(memcmp(reduce->args[i], dkdv->args[i], sizeof reduce->args[i]) == 0,
              "%s: the dK/dV reduce's argument %d differs from the first launch's", what, i);
  }
  CHECK_MSG((arg_i32(reduce, SEL_DKDV_FLAGS) & ~SEL_FLAG_WRITE_LSE) == (flags | SEL_FLAG_DKDV_REDUCE),
            "%s: the dK/dV reduce's flags %#x, expected %#x", what, (unsigned)arg_i32(reduce, SEL_DKDV_FLAGS),
            (unsigned)(flags | SEL_FLAG_DKDV_REDUCE));
}

/* Every tensor strided differently (all strides multiples of 16 where the kernels need it), so a
 * stride packed into the wrong slot shows: q with padded heads, k heads-major, v with padded rows, lse
 * and block_cnt with padded rows, block_idx heads-major; dk padded, dout heads-major. */
static aotk_sel_params strided_sel_params(sel_shape s, bool bwd) {
  aotk_sel_params params = sel_params_for(s, bwd);
  const int64_t dqk = s.head_dim_qk, dv = s.head_dim_v;
  params.q.strides[1] = dqk + 16, params.q.strides[0] = s.heads_q * (dqk + 16) + 32;
  params.k.strides[0] = dqk, params.k.strides[1] = s.total_k * dqk;
  params.v.strides[1] = dv, params.v.strides[0] = s.heads_kv * dv + 48;
  if (params.lse.data != NULL) params.lse.strides[0] = s.heads_q + 3;
  params.block_idx.strides[0] = s.slots, params.block_idx.strides[1] = s.total_q * s.slots + 5;
  if (params.block_cnt.data != NULL) params.block_cnt.strides[0] = s.heads_kv + 7;
  if (bwd) {
    params.dk.strides[1] = dqk + 32, params.dk.strides[0] = s.heads_kv * (dqk + 32) + 64;
    params.dout.strides[0] = dv, params.dout.strides[1] = s.total_q * dv;
  }
  return params;
}

static void test_sel_launch_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  sel_shape s = default_sel_shape;
  aotk_sel_params params = strided_sel_params(s, true);
  check_sel_fwd("bf16 d128 bs64 GQA 4, varlen, strided", &params, &s, &sel_sm90);
  CHECK_MSG(fake.loaded_images == 1 && fake.loaded_elf == 1, "loaded %d images", fake.loaded_images);
  check_sel_bwd("bf16 d128 bs64 GQA 4, varlen, strided", &params, &s, &sel_sm90, FAKE_WORKSPACE);
  CHECK_MSG(fake.loaded_images == 1 + SEL_BWD_KERNELS, "loaded %d images, expected 1 + %d", fake.loaded_images,
            (int)SEL_BWD_KERNELS);
  /* Loaded once: the same calls again load nothing. */
  check_sel_fwd("the same again", &params, &s, &sel_sm90);
  check_sel_bwd("the same again", &params, &s, &sel_sm90, byte_offset(FAKE_WORKSPACE, 4096));
  CHECK_MSG(fake.loaded_images == 1 + SEL_BWD_KERNELS && fake.calls[CALL_cuLibraryLoadData] == 0, "loaded %d images",
            fake.loaded_images);

  s.dtype = AOTK_DTYPE_FLOAT16, s.num_seqs = 0, s.with_lse = false, s.with_block_cnt = false;
  s.head_dim_qk = s.head_dim_v = 64, s.block_size = 32, s.total_q = 1000, s.total_k = 4097, s.slots = 3;
  params = strided_sel_params(s, false);
  params.softmax_scale = 0.3f;
  check_sel_fwd("fp16 d64 bs32, one sequence, no lse, no block_cnt, explicit scale", &params, &s, &sel_sm90);
  params = strided_sel_params(s, true);
  check_sel_bwd("fp16 d64 bs32, one sequence, no block_cnt", &params, &s, &sel_sm90, FAKE_WORKSPACE);

  /* Groups of 17 (one 64-row tile), 64 (one) and 65 and 128 (two), head dims (192, 128), block size 128. */
  static const int64_t groups[] = {17, 64, 65, 128};
  for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
    s = default_sel_shape;
    s.head_dim_qk = 192, s.block_size = 128, s.heads_kv = 2, s.heads_q = 2 * groups[i], s.slots = 5;
    s.total_q = 77, s.total_k = 1000, s.num_seqs = 2, s.max_seqlen_k = 999;
    char what[96];
    snprintf(what, sizeof what, "bf16 d192v128 bs128, a group of %lld", (long long)groups[i]);
    params = strided_sel_params(s, true);
    check_sel_fwd(what, &params, &s, &sel_sm90);
    check_sel_bwd(what, &params, &s, &sel_sm90, FAKE_WORKSPACE);
  }

  /* The dK/dV split of long token lists, worked through (the values by hand, then the launches): chunks
   * of the larger of ceil(4096 / group) tokens and 1/512 of the index's entries, capped at 2^29 - 1; at
   * most ceil(total_q / chunk) of them, 16, and what keeps the grid valid; 2 * total_q * slots / chunk + 1
   * partial records per kv head when some list can be split. */
  static const struct {
    const char *what;
    int64_t heads_q, heads_kv, total_q, slots, num_seqs;
    int32_t max_seqlen_k;
    int64_t head_dim, chunk_tokens, max_chunks, partials_per_head;
  } splits[] = {
      {"GQA 4, 300 tokens: chunks of 1024 tokens (4096 pairs), one per list", 8, 2, 300, 16, 3, 250, 128, 1024, 1, 0},
      {"MHA, 20000 tokens: chunks of 5000 tokens (1/512 of 2.56M entries), 4 per list", 8, 8, 20000, 16, 3, 250, 128,
       5000, 4, 129},
      {"MQA 128, 1000 tokens of 8 slots: chunks of 32 tokens, 16 per list, not 32", 128, 1, 1000, 8, 3, 250, 128, 32,
       16, 501},
      {"21 sequences of up to 32 * 51130563 keys: 2^30 - 1 key tiles of 32, so 2 chunks per list, not 6", 8, 1, 3000,
       16, 21, 32 * 51130563, 128, 512, 2, 188},
      {"46340 tokens, kv heads and slots: chunks of 2^29 - 1 tokens, not 1/512 of 46340^3", 46340, 46340, 46340, 46340,
       0, 0, 64, INT32_MAX / 4, 1, 0},
  };
  for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
    s = default_sel_shape;
    s.heads_q = splits[i].heads_q, s.heads_kv = splits[i].heads_kv, s.total_q = splits[i].total_q;
    s.slots = splits[i].slots, s.num_seqs = splits[i].num_seqs, s.max_seqlen_k = splits[i].max_seqlen_k;
    s.head_dim_qk = s.head_dim_v = splits[i].head_dim;
    CHECK_MSG(sel_chunk_tokens(&s) == splits[i].chunk_tokens && sel_max_chunks(&s) == splits[i].max_chunks &&
                  sel_partials_per_head(&s) == splits[i].partials_per_head,
              "%s: the test's formulas give chunks of %lld, %lld per list, %lld records", splits[i].what,
              (long long)sel_chunk_tokens(&s), (long long)sel_max_chunks(&s), (long long)sel_partials_per_head(&s));
    params = sel_params_for(s, true);
    check_sel_bwd(splits[i].what, &params, &s, &sel_sm90, FAKE_WORKSPACE);
  }
  uninstall_fake_gpu();
}

/* The choice on every target: for each dtype, head dims, block size and group size (either side of the
 * tuning bound and of a tile's 64 rows, multiples of 16 and not), the forward and the backward run the
 * rows the catalog's rule picks, with the tile and grid the header's formulas give. */
static void test_sel_tuning_choice(void) {
  static const gpu gpus[] = {{90, SHARED_SM90, 90, 0}, {80, SHARED_SM80, 80, 0}, {86, SHARED_SM86, 80, 0},
                             {120, SHARED_SM120, 80, 1}};
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};
  static const int64_t dims[][2] = {{64, 64}, {128, 128}, {192, 128}};
  static const int32_t block_sizes[] = {32, 64, 128};
  static const int64_t groups[] = {1, 2, 16, 17, 48, 64, 65};
  int calls = 0, split = 0;
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (size_t d = 0; d < 2; d++)
      for (size_t h = 0; h < 3; h++)
        for (size_t b = 0; b < 3; b++)
          for (size_t m = 0; m < sizeof groups / sizeof groups[0]; m++) {
            sel_shape s = default_sel_shape;
            s.dtype = dtypes[d], s.head_dim_qk = dims[h][0], s.head_dim_v = dims[h][1];
            s.block_size = block_sizes[b], s.heads_kv = 2, s.heads_q = 2 * groups[m];
            s.num_seqs = (int64_t)(m % 3), s.total_q = 100 + 13 * (int64_t)m, s.max_seqlen_k = 300;
            char what[128];
            snprintf(what, sizeof what, "cc %d %s d%lldv%lld bs%d group %lld", gpus[g].compute_capability,
                     dtypes[d] == AOTK_DTYPE_FLOAT16 ? "fp16" : "bf16", (long long)dims[h][0], (long long)dims[h][1],
                     block_sizes[b], (long long)groups[m]);
            aotk_sel_params params = sel_params_for(s, true);
            check_sel_fwd(what, &params, &s, &gpus[g]);
            check_sel_bwd(what, &params, &s, &gpus[g], FAKE_WORKSPACE);
            calls += 2;
            split += sel_max_chunks(&s) > 1;
          }
  }
  /* Groups of 48 and more make chunks of at most 86 tokens, fewer than their problems' 152 to 178 tokens:
   * those split the lists; the smaller groups' chunks, 241 tokens and more, never do. */
  CHECK_MSG(split > 0 && split < calls / 2, "%d of %d backward calls split the dK/dV lists", split, calls / 2);
  printf("    %d queries and calls, %d backward calls with split dK/dV lists\n", calls, split);
  uninstall_fake_gpu();
}

/* A GPU without the shared memory a chosen kernel needs: the call and the query refuse, naming the
 * kernel, and nothing is loaded or launched (the backward chooses all seven kernels before it loads any);
 * with exactly enough, the call runs. */
static void test_sel_too_little_shared_memory(void) {
  for (int bwd = 0; bwd <= 1; bwd++) {
    sel_shape s = default_sel_shape;
    s.heads_q = 2 * 17; /* a 64-row tile */
    aotk_sel_params params = sel_params_for(s, bwd);
    const aotk_op op = bwd ? AOTK_OP_SEL_BWD : AOTK_OP_SEL_FWD;
    /* The hungriest kernel of the call (the index passes need little). */
    const int families[] = {AOTK__FAMILY_SEL_FWD, AOTK__FAMILY_SEL_BWD_DQ, AOTK__FAMILY_SEL_BWD_DKDV};
    const aotk__kernel_entry *hungriest = NULL;
    for (int f = bwd; f < (bwd ? 3 : 1); f++) {
      const aotk__kernel_entry *e = expected_sel_row(families[f], 90, &s);
      CHECK(e != NULL);
      if (e != NULL && (hungriest == NULL || e->shared_bytes > hungriest->shared_bytes)) hungriest = e;
    }
    if (hungriest == NULL) return;
    install_fake_gpu(90, hungriest->shared_bytes);
    aotk_status status = run_sel_op(op, &params);
    CHECK_MSG(status == AOTK_OK, "%s with exactly %d bytes: %s (%s)", sel_op_function(op), hungriest->shared_bytes,
              aotk_status_name(status), aotk_last_error());
    CHECK(fake.launches == (bwd ? sel_bwd_launches(&s) : 1));
    install_fake_gpu(90, hungriest->shared_bytes - 1);
    status = run_sel_op(op, &params);
    CHECK_MSG(status == AOTK_ERROR_UNSUPPORTED_ARCH, "%s with %d bytes: %s", sel_op_function(op),
              hungriest->shared_bytes - 1, aotk_status_name(status));
    CHECK_MSG(message_mentions(hungriest->name), "the message \"%s\" does not name %s", aotk_last_error(),
              hungriest->name);
    CHECK(fake.launches == 0 && fake.calls[CALL_cuLibraryLoadData] == 0);
    aotk_kernel_info info;
    poison_info(&info);
    CHECK(aotk_sel_query(op, &params, &info) == AOTK_ERROR_UNSUPPORTED_ARCH);
    CHECK(info_untouched(&info));
  }
  uninstall_fake_gpu();
}

/* Driver failures: no context, an old GPU, a failed load (the backward loads its seven kernels before it
 * launches one, so nothing runs), a failed launch (only the kernels before it were enqueued). */
static void test_sel_faults(void) {
  aotk_sel_params fwd_params = valid_sel_params(), bwd_params = valid_sel_bwd_params();
  aotk_kernel_info info;

  install_fake_gpu(90, SHARED_SM90);
  fake.has_context = false;
  CHECK(aotk_sel_fwd(&fwd_params, FAKE_STREAM) == AOTK_ERROR_NO_CONTEXT);
  CHECK(aotk_sel_bwd(&bwd_params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM) == AOTK_ERROR_NO_CONTEXT);
  CHECK(aotk_sel_check_indices(&fwd_params, FAKE_WORKSPACE, 16, FAKE_STREAM) == AOTK_ERROR_NO_CONTEXT);
  poison_info(&info);
  CHECK(aotk_sel_query(AOTK_OP_SEL_BWD, &bwd_params, &info) == AOTK_ERROR_NO_CONTEXT && info_untouched(&info));
  CHECK(fake.launches == 0 && fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuMemcpyHtoD] == 0);

  install_fake_gpu(75, 64 * 1024);
  CHECK(aotk_sel_fwd(&fwd_params, FAKE_STREAM) == AOTK_ERROR_UNSUPPORTED_ARCH && message_mentions("sm_75"));
  CHECK(aotk_sel_bwd(&bwd_params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM) == AOTK_ERROR_UNSUPPORTED_ARCH);
  CHECK(aotk_sel_check_indices(&fwd_params, FAKE_WORKSPACE, 16, FAKE_STREAM) == AOTK_ERROR_UNSUPPORTED_ARCH);
  poison_info(&info);
  CHECK(aotk_sel_query(AOTK_OP_SEL_FWD, &fwd_params, &info) == AOTK_ERROR_UNSUPPORTED_ARCH && info_untouched(&info));
  CHECK(fake.launches == 0 && fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuMemcpyHtoD] == 0);

  enum { CUDA_ERROR_NO_BINARY_FOR_GPU = 209 };
  for (int n = 1; n <= SEL_BWD_KERNELS; n++) {
    install_fake_gpu(90, SHARED_SM90);
    fake.library_load_result = CUDA_ERROR_NO_BINARY_FOR_GPU;
    fake.fail_library_load_call = n;
    aotk_status status = aotk_sel_bwd(&bwd_params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_CUDA && aotk_last_cuda_result() == CUDA_ERROR_NO_BINARY_FOR_GPU,
              "load %d of the backward fails: %s (%s)", n, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(fake.launches == 0, "load %d of the backward fails, yet %d kernels were launched", n, fake.launches);
    /* Once the driver recovers, the call goes through. */
    fake.library_load_result = CUDA_SUCCESS;
    CHECK(aotk_sel_bwd(&bwd_params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM) == AOTK_OK);
    CHECK(fake.launches == sel_bwd_launches(&default_sel_shape));
  }
  /* Each launch failing in turn, in a backward of seven launches and in one of eight (a group of 128
   * splits the dK/dV lists: the reduce's launch can fail too). */
  sel_shape split = default_sel_shape;
  split.heads_q = 128, split.heads_kv = 1;
  const sel_shape *launch_shapes[] = {&default_sel_shape, &split};
  for (int k = 0; k < 2; k++) {
    const aotk_sel_params params = sel_params_for(*launch_shapes[k], true);
    const int launches = sel_bwd_launches(launch_shapes[k]);
    CHECK(launches == SEL_BWD_KERNELS + k);
    for (int n = 1; n <= launches; n++) {
      install_fake_gpu(90, SHARED_SM90);
      fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
      fake.fail_launch_call = n;
      aotk_status status = aotk_sel_bwd(&params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA && aotk_last_cuda_result() == CUDA_ERROR_OUT_OF_MEMORY,
                "launch %d of %d of the backward fails: %s", n, launches, aotk_status_name(status));
      CHECK_MSG(message_mentions("cuLaunchKernel(sel_"), "launch %d fails: the message \"%s\" names no kernel", n,
                aotk_last_error());
      CHECK_MSG(fake.launches == n - 1 && fake.calls[CALL_cuLaunchKernel] == n,
                "launch %d of %d of the backward fails: %d launched, %d tried", n, launches, fake.launches,
                fake.calls[CALL_cuLaunchKernel]);
    }
  }
  install_fake_gpu(90, SHARED_SM90);
  fake.launch_result = CUDA_ERROR_OUT_OF_MEMORY;
  CHECK(aotk_sel_fwd(&fwd_params, FAKE_STREAM) == AOTK_ERROR_CUDA && fake.launches == 0);
  uninstall_fake_gpu();
}

/* The index check through the fake: it orders its result word after the stream's earlier work, sets it,
 * runs one program per (token, kv head), waits, and reads the word back: AOTK_OK when the kernel left it
 * alone, else AOTK_ERROR_INVALID_INDICES naming the (token, kv head, slot) the kernel's code encodes
 * (kernels/sel_attn.py: ((token * heads_kv + head) * 2^24 + slot) * 4 + kind). */
static int64_t index_problem_code(int64_t token, int64_t head, int64_t heads_kv, int64_t slot, int64_t kind) {
  return ((token * heads_kv + head) * ((int64_t)1 << 24) + slot) * 4 + kind;
}

static void test_sel_check_indices(void) {
  install_fake_gpu(90, SHARED_SM90);
  for (int variant = 0; variant < 2; variant++) {
    sel_shape s = default_sel_shape;
    if (variant == 1) s.num_seqs = 0, s.with_block_cnt = false, s.with_lse = false, s.block_size = 128;
    aotk_sel_params params = strided_sel_params(s, false);
    void *workspace = byte_offset(FAKE_WORKSPACE, 32);
    reset_calls();
    reset_launch_log();
    fake.sequence_length = 0;
    fake.device_word = 0;
    aotk_status status = aotk_sel_check_indices(&params, workspace, 16, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "variant %d: %s (%s)", variant, aotk_status_name(status), aotk_last_error());
    CHECK(aotk_last_error()[0] == '\0');
    static const int expected_sequence[] = {CALL_cuStreamSynchronize, CALL_cuMemcpyHtoD, CALL_cuCtxSynchronize,
                                            CALL_cuLaunchKernel,      CALL_cuStreamSynchronize, CALL_cuMemcpyDtoH};
    bool same = fake.sequence_length == 6;
    for (int i = 0; same && i < 6; i++) same = fake.sequence[i] == expected_sequence[i];
    CHECK_MSG(same, "variant %d: the check called the driver out of order (%s)", variant, called_functions());
    CHECK(fake.synchronized_stream == (CUstream)FAKE_STREAM);
    CHECK_MSG(fake.written_address == (CUdeviceptr)(uintptr_t)workspace && fake.written_bytes == 8 &&
                  fake.read_address == (CUdeviceptr)(uintptr_t)workspace && fake.read_bytes == 8,
              "variant %d: the result word is not the workspace's first 8 bytes", variant);
    CHECK_MSG(fake.device_word == INT64_MAX, "variant %d: the result word starts at %lld, not INT64_MAX", variant,
              (long long)fake.device_word);
    if (fake.logged_launches != 1) continue;
    const recorded_launch *launch = &fake.launch_log[0];
    const aotk__kernel_entry *row = expected_sel_row(AOTK__FAMILY_SEL_CHECK_INDICES, 90, &s);
    CHECK(row != NULL);
    if (row == NULL) continue;
    const char *what = variant == 0 ? "varlen, block_cnt" : "one sequence";
    const char *kernel = "sel_check_indices";
    check_sel_launch_shape(what, launch, KERNEL_SEL_CHECK_INDICES, row, s.total_q * s.heads_kv,
                           SEL_CHECK_GLOBAL_SCRATCH);
    check_pointer(what, kernel, launch, SEL_CHECK_BLOCK_IDX, params.block_idx.data, "block_idx");
    check_pointer(what, kernel, launch, SEL_CHECK_BLOCK_CNT, params.block_cnt.data, "block_cnt");
    check_pointer(what, kernel, launch, SEL_CHECK_CU_SEQLENS_Q, params.cu_seqlens_q.data, "cu_seqlens_q");
    check_pointer(what, kernel, launch, SEL_CHECK_CU_SEQLENS_K, params.cu_seqlens_k.data, "cu_seqlens_k");
    check_pointer(what, kernel, launch, SEL_CHECK_RESULT, workspace, "Result");
    check_packed_strides(what, kernel, launch, SEL_CHECK_STRIDE_IS, &params.block_idx, "block_idx");
    check_packed_strides(what, kernel, launch, SEL_CHECK_STRIDE_CS, &params.block_cnt, "block_cnt");
    check_int(what, kernel, launch, SEL_CHECK_NUM_SEQS, sel_num_seqs(&s), "num_seqs");
    check_int(what, kernel, launch, SEL_CHECK_TOTAL_Q, s.total_q, "total_q");
    check_int(what, kernel, launch, SEL_CHECK_TOTAL_K, s.total_k, "total_k");
    check_int(what, kernel, launch, SEL_CHECK_MAX_SEQLEN_K, sel_max_seqlen_k(&s), "max_seqlen_k");
    check_int(what, kernel, launch, SEL_CHECK_HEADS_KV, s.heads_kv, "heads_kv");
    check_int(what, kernel, launch, SEL_CHECK_BLOCK_SIZE, s.block_size, "block_size");
    check_int(what, kernel, launch, SEL_CHECK_NUM_SLOTS, s.slots, "num_slots");
    CHECK_MSG((arg_i32(launch, SEL_CHECK_FLAGS) & ~SEL_FLAG_WRITE_LSE) == expected_sel_flags(&params),
              "%s: flags %#x", what, (unsigned)arg_i32(launch, SEL_CHECK_FLAGS));
  }

  /* What the kernel finds, as the caller reads it. */
  aotk_sel_params params = valid_sel_params();
  const int64_t heads_kv = default_sel_shape.heads_kv;
  const struct {
    int64_t code;
    const char *mentions[2];
  } problems[] = {
      {index_problem_code(7, 1, heads_kv, 3, 2), {"block_idx[token 7, kv head 1, slot 3]", "twice"}},
      {index_problem_code(299, 0, heads_kv, 15, 1), {"block_idx[token 299, kv head 0, slot 15]", "out of range"}},
      {index_problem_code(0, 1, heads_kv, 0, 3), {"block_cnt[token 0, kv head 1]", "16 slots"}},
      {index_problem_code(0, 0, heads_kv, 0, 1), {"block_idx[token 0, kv head 0, slot 0]", "out of range"}},
  };
  for (size_t i = 0; i < sizeof problems / sizeof problems[0]; i++) {
    fake.check_code = problems[i].code;
    aotk_status status = aotk_sel_check_indices(&params, FAKE_WORKSPACE, 16, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_INVALID_INDICES, "code %lld: %s", (long long)problems[i].code,
              aotk_status_name(status));
    for (int m = 0; m < 2; m++) {
      CHECK_MSG(message_mentions(problems[i].mentions[m]), "code %lld: the message \"%s\" does not mention \"%s\"",
                (long long)problems[i].code, aotk_last_error(), problems[i].mentions[m]);
    }
  }
  fake.check_code = 0;
  CHECK(aotk_sel_check_indices(&params, FAKE_WORKSPACE, 16, FAKE_STREAM) == AOTK_OK);

  /* A failed copy is the driver's failure, not a verdict on the indices. */
  fake.memcpy_result = CUDA_ERROR_INVALID_VALUE;
  aotk_status status = aotk_sel_check_indices(&params, FAKE_WORKSPACE, 16, FAKE_STREAM);
  CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions("cuMemcpyHtoD"), "a failed copy: %s (%s)",
            aotk_status_name(status), aotk_last_error());
  uninstall_fake_gpu();
}

/* aotk_preload loads the selection kernels too: after it, no selection call loads an image. */
static void test_sel_after_preload(void) {
  static const gpu gpus[] = {{90, SHARED_SM90, 90, 0}, {86, SHARED_SM86, 80, 0}, {120, SHARED_SM120, 80, 1},
                             {90, 100 * 1024, 90, 0}};
  sel_shape s = default_sel_shape;
  s.head_dim_qk = s.head_dim_v = 64; /* kernels that fit the smallest of these GPUs */
  const aotk_sel_params fwd_params = sel_params_for(s, false), bwd_params = sel_params_for(s, true);
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    aotk_status status = aotk_preload();
    CHECK_MSG(status == AOTK_OK, "cc %d: %s (%s)", gpus[g].compute_capability, aotk_status_name(status),
              aotk_last_error());
    const int loaded = fake.loaded_images;
    CHECK(aotk_sel_fwd(&fwd_params, FAKE_STREAM) == AOTK_OK);
    CHECK(aotk_sel_bwd(&bwd_params, FAKE_WORKSPACE, sel_workspace_bytes(&s), FAKE_STREAM) == AOTK_OK);
    CHECK(aotk_sel_check_indices(&fwd_params, FAKE_WORKSPACE, 16, FAKE_STREAM) == AOTK_OK);
    CHECK_MSG(fake.launches == 1 + sel_bwd_launches(&s) + 1, "cc %d: %d launches, expected 1 + %d + 1",
              gpus[g].compute_capability, fake.launches, sel_bwd_launches(&s));
    CHECK_MSG(fake.loaded_images == loaded, "cc %d: a selection call after preload loaded %d images",
              gpus[g].compute_capability, fake.loaded_images - loaded);
  }
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_sel_bwd_workspace);
  RUN_TEST(test_sel_check_indices_workspace);
  RUN_TEST(test_sel_query_arguments);
  RUN_TEST(test_sel_launch_arguments);
  RUN_TEST(test_sel_tuning_choice);
  RUN_TEST(test_sel_too_little_shared_memory);
  RUN_TEST(test_sel_faults);
  RUN_TEST(test_sel_check_indices);
  RUN_TEST(test_sel_after_preload);
  aotk__driver_set_for_testing(NULL);
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);
  return aotk_test_finish();
}
