/*
 * The checks of selection attention's launches for tests/api/test_api_sel.c: each kernel's packed
 * arguments (strides, flags, sizes, the workspace's parts) against the call, forward, backward and the
 * index check, on a fake GPU. Static, for the one file that includes it; the model of what must run is
 * api_sel_model.h.
 */
#ifndef API_SEL_LAUNCH_CHECKS_H
#define API_SEL_LAUNCH_CHECKS_H

#include "api_sel_model.h"

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

#endif /* API_SEL_LAUNCH_CHECKS_H */
