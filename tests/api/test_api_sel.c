/*
 * CPU tests of the public API, selection attention (0.3): its workspaces and queries,
 * the choice of its kernels by dtype, head dims, block size and group size, the forward's launch and
 * the backward's seven or eight (the split of long token lists), faults, and the index check's round
 * trip.
 * The fake driver and the shared models are tests/api/api_*.h; see api_fake_driver.h.
 */
#include <math.h>

#include "api_sel_launch_checks.h"

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

/* ---- selection: what runs, and with which arguments (the checks: api_sel_launch_checks.h) ---- */

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
