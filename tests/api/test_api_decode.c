/*
 * CPU tests of the public API, decoding (0.4): packed queries, the split-KV choice on the fake's SM count,
 * the split's workspace, the cache-layout family each call takes, and the launches (append, decode,
 * merge) with their grids and packed arguments, contiguous and paged, on sm_90, sm_80, sm_86 and
 * sm_120; load and launch faults.
 * The fake driver and the shared models are tests/api/api_*.h; see api_fake_driver.h.
 */
#include <math.h>

#include "api_launch_checks.h"

/* ---- decoding (0.4) -------------------------------------------------------------------------- */

static int64_t decode_group(const decode_shape *s) { return s->heads_q / s->heads_kv; }

/* The split-KV workspace (include/aotk.h, aotk_attn_decode): fp32 partial outputs [splits, batch,
 * seqlen_q, heads_q, round_up(head_dim_v, 16)], then the partial LSEs [splits, batch, heads_q, seqlen_q],
 * each part rounded up to 16 bytes; nothing without a split. */
static int64_t decode_rows(const decode_shape *s) { return s->batch * s->seqlen_q * s->heads_q; }
static int64_t decode_partial_row(const decode_shape *s) { return round_up_to(s->head_dim_v, 16); }
static size_t decode_out_partial_bytes(const decode_shape *s, int64_t splits) {
  return round_up_16((size_t)(4 * splits * decode_rows(s) * decode_partial_row(s)));
}
static size_t decode_lse_partial_bytes(const decode_shape *s, int64_t splits) {
  return round_up_16((size_t)(4 * splits * decode_rows(s)));
}
static size_t decode_workspace_bytes(const decode_shape *s, int64_t splits) {
  return splits > 1 ? decode_out_partial_bytes(s, splits) + decode_lse_partial_bytes(s, splits) : 0;
}

/* Every tensor laid out differently, every stride distinct and a multiple of 16 elements (so the
 * compiled kernels, which assume that, run): q heads-major, the caches with padded rows (k) or
 * heads-major (v), out with padded heads, lse and the block table with padded rows. Head dims that are
 * not multiples of 16 get rows padded to one. */
static aotk_decode_params strided_decode_params(decode_shape s) {
  aotk_decode_params params = decode_params_for(s);
  const bool paged = s.page_size > 0;
  const int64_t row_keys = paged ? s.page_size : s.capacity;
  const int64_t dqk = round_up_to(s.head_dim_qk, 16), dv = round_up_to(s.head_dim_v, 16);
  aotk_tensor *q = &params.q, *k = &params.k_cache, *v = &params.v_cache, *out = &params.out;
  k->strides[2] = dqk, k->strides[1] = s.heads_kv * dqk + 48, k->strides[0] = row_keys * k->strides[1] + 64;
  v->strides[2] = row_keys * dv, v->strides[1] = dv, v->strides[0] = s.heads_kv * row_keys * dv + 80;
  if (s.total_q > 0) { /* packed: q and out with padded heads and a gap between tokens, lse with padded rows */
    q->strides[1] = dqk + 16, q->strides[0] = s.heads_q * (dqk + 16) + 32;
    out->strides[1] = dv + 32, out->strides[0] = s.heads_q * (dv + 32) + 48;
    if (s.with_lse) params.lse.strides[0] = s.total_q + 5;
  } else {
    q->strides[2] = s.seqlen_q * dqk, q->strides[1] = dqk, q->strides[0] = s.heads_q * s.seqlen_q * dqk + 32;
    out->strides[2] = dv + 16, out->strides[1] = s.heads_q * (dv + 16);
    out->strides[0] = s.seqlen_q * out->strides[1] + 96;
    if (s.with_lse) params.lse.strides[1] = s.seqlen_q + 5, params.lse.strides[0] = s.heads_q * (s.seqlen_q + 5) + 7;
  }
  if (paged) params.block_table.strides[0] = s.capacity / s.page_size + 3;
  return params;
}

/* The same laid out differently from each other and from the caches, every stride distinct and a
 * multiple of 16 elements: k_new with padded heads and a gap between requests, v_new heads-major. */
static void add_strided_new_kv(aotk_decode_params *params, const decode_shape *s, int64_t seqlen_new) {
  add_new_kv(params, s, seqlen_new);
  const int64_t dqk = round_up_to(s->head_dim_qk, 16), dv = round_up_to(s->head_dim_v, 16);
  aotk_tensor *k_new = &params->k_new, *v_new = &params->v_new;
  k_new->strides[2] = dqk + 32, k_new->strides[1] = s->heads_kv * (dqk + 32);
  k_new->strides[0] = seqlen_new * k_new->strides[1] + 112;
  v_new->strides[2] = seqlen_new * (dv + 16), v_new->strides[1] = dv + 16;
  v_new->strides[0] = s->heads_kv * seqlen_new * (dv + 16) + 144;
}

/* The appending kernel's launch (include/aotk.h, k_new and v_new; kernels/attn_decode.py,
 * attn_cache_append): the row of the problem's dtype and compiled head dims, one program per (request,
 * new token); the new keys and values, the caches, the block table (NULL when contiguous) and the lengths
 * before the step; k_new's and v_new's (batch, token, head) strides, the caches' (page or request, row,
 * head) strides, the block table's batch stride (0 when contiguous); seqlen_new, heads_kv, the capacity,
 * the page size (0 when contiguous), the head dims over 8, and of the flags only PAGED. */
static void check_append_launch(const char *what, const recorded_launch *launch, const aotk_decode_params *params,
                                const decode_shape *s, const aotk__kernel_entry *row, int64_t capacity) {
  const char *kernel = "attn_cache_append";
  const bool paged = params->block_table.data != NULL;
  const int64_t seqlen_new = params->k_new.shape[1];
  check_sel_launch_shape(what, launch, KERNEL_ATTN_CACHE_APPEND, row, s->batch * seqlen_new, APPEND_GLOBAL_SCRATCH);
  if (launch->kernel != KERNEL_ATTN_CACHE_APPEND) return;
  check_pointer(what, kernel, launch, APPEND_K_NEW, params->k_new.data, "k_new");
  check_pointer(what, kernel, launch, APPEND_V_NEW, params->v_new.data, "v_new");
  check_pointer(what, kernel, launch, APPEND_K, params->k_cache.data, "k_cache");
  check_pointer(what, kernel, launch, APPEND_V, params->v_cache.data, "v_cache");
  check_pointer(what, kernel, launch, APPEND_BLOCK_TABLE, paged ? params->block_table.data : NULL, "block_table");
  check_pointer(what, kernel, launch, APPEND_CACHE_SEQLENS, params->cache_seqlens.data, "cache_seqlens");
  const aotk_tensor *tensors[4] = {&params->k_new, &params->v_new, &params->k_cache, &params->v_cache};
  static const char *const names[4] = {"k_new", "v_new", "k_cache", "v_cache"};
  for (int t = 0; t < 4; t++) {
    for (int d = 0; d < 3; d++) {
      char name[32];
      snprintf(name, sizeof name, "%s.strides[%d]", names[t], d);
      check_i64(what, kernel, launch, APPEND_STRIDE_NB + 3 * t + d, tensors[t]->strides[d], name);
    }
  }
  check_i64(what, kernel, launch, APPEND_STRIDE_TB, paged ? params->block_table.strides[0] : 0, "block table stride");
  check_int(what, kernel, launch, APPEND_SEQLEN_NEW, seqlen_new, "seqlen_new");
  check_int(what, kernel, launch, APPEND_HEADS_KV, s->heads_kv, "heads_kv");
  check_int(what, kernel, launch, APPEND_CAPACITY, capacity, "capacity");
  check_int(what, kernel, launch, APPEND_PAGE_SIZE, paged ? params->k_cache.shape[1] : 0, "page_size");
  check_int(what, kernel, launch, APPEND_HEAD_DIM_QK8, s->head_dim_qk / 8, "head_dim_qk8");
  check_int(what, kernel, launch, APPEND_HEAD_DIM_V8, s->head_dim_v / 8, "head_dim_v8");
  CHECK_MSG(arg_i32(launch, APPEND_FLAGS) == (paged ? DECODE_FLAG_PAGED : 0), "%s: attn_cache_append's flags %#x, "
            "expected %#x", what, (unsigned)arg_i32(launch, APPEND_FLAGS), paged ? (unsigned)DECODE_FLAG_PAGED : 0u);
}

/* The decoding row for a cache of pages of `page_size` keys (0: contiguous), on target `arch`, for the
 * group's `group_rows` (G * seqlen_q): the row of the problem's dtype and (padded) head dims whose tile
 * those rows call for, in the family the cache calls for: attn_decode for a contiguous cache;
 * attn_decode_paged_blocks (one page lookup per key block) when the page size is a multiple of that
 * family's row's block_n, so that no block of keys straddles two pages; else attn_decode_paged (a
 * lookup per key row). */
static const aotk__kernel_entry *expected_decode_row(const decode_shape *s, int arch, int64_t page_size,
                                                     int64_t group_rows) {
  if (page_size == 0) {
    return expected_row(AOTK__FAMILY_ATTN_DECODE, arch, s->dtype, s->head_dim_qk, s->head_dim_v, 1, 0, group_rows);
  }
  const aotk__kernel_entry *blocks = expected_row(AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS, arch, s->dtype,
                                                  s->head_dim_qk, s->head_dim_v, 1, 0, group_rows);
  if (blocks != NULL && page_size % blocks->block_n == 0) return blocks;
  return expected_row(AOTK__FAMILY_ATTN_DECODE_PAGED, arch, s->dtype, s->head_dim_qk, s->head_dim_v, 1, 0, group_rows);
}

/* What a decoding call's query reports and its call launches, worked out from the header: the decoding
 * kernel is expected_decode_row's, on a grid of batch * heads_kv * ceil(G * seqlen_q / block_m) * splits
 * programs; with `splits` > 1 the fp32 partials lie in the workspace and the merge follows, one program
 * per block_m of the batch * seqlen_q * heads_q rows and block_n of the head_dim_v columns (whole rows
 * only past the grid limit, check_merge's rule: the partials are not the outputs). With k_new and v_new the appending kernel runs first
 * (check_append_launch) and the decoding kernel is told seqlen_new; the split and the workspace do not
 * change. Packed queries (cu_seqlens_q) run unsplit with the kernel seeing q and out as [1, total_q,
 * heads_q, d] (batch strides 0; each request's first row read from cu_seqlens_q on the device), lse as
 * [1, heads_q, total_q], seqlen_q = max_seqlen_q and FLAG_VARLEN. `splits` and `split_keys` are the
 * caller's (worked by hand); split_keys 0: one split (whose length does not matter). */
static void check_decode(const char *what, const aotk_decode_params *params, const decode_shape *s, const gpu *g,
                         int64_t splits, int64_t split_keys, void *workspace) {
  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status status = aotk_decode_query(AOTK_OP_DECODE, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_decode_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "%s: aotk_decode_query loaded or launched (%s)", what, called_functions());
  const int64_t group = decode_group(s), group_rows = group * s->seqlen_q;
  const bool split = splits > 1, paged = params->block_table.data != NULL, causal = params->causal == 1;
  const aotk__kernel_entry *row = expected_decode_row(s, g->arch, paged ? params->k_cache.shape[1] : 0, group_rows);
  const aotk__kernel_entry *merge =
      merge_row_for(g->arch, 1, splits, s->batch * s->seqlen_q * s->heads_q, s->head_dim_v);
  CHECK_MSG(row != NULL && merge != NULL, "%s: no sm_%d decoding or attn_merge row", what, g->arch);
  if (row == NULL || merge == NULL) return;
  const bool append = params->k_new.data != NULL, varlen = params->cu_seqlens_q.data != NULL;
  const int64_t seqlen_new = append ? params->k_new.shape[1] : 0;
  const int launches = 1 + split + append, first = append; /* the decoding launch's index */
  const aotk__kernel_entry *append_row =
      expected_row(AOTK__FAMILY_ATTN_CACHE_APPEND, g->arch, s->dtype, s->head_dim_qk, s->head_dim_v, 1, 0, 1);
  CHECK_MSG(!append || append_row != NULL, "%s: no sm_%d attn_cache_append row", what, g->arch);
  if (append && append_row == NULL) return;
  const int64_t row_chunks = ceil_div(group_rows, row->block_m);
  const int64_t grid = s->batch * s->heads_kv * row_chunks * splits;
  const size_t workspace_bytes = decode_workspace_bytes(s, splits);
  const int64_t capacity = paged ? params->block_table.shape[1] * params->k_cache.shape[1] : params->k_cache.shape[1];
  const uint32_t features =
      (causal ? AOTK_FEATURE_CAUSAL : 0) |
      (params->window_left >= 0 || (!causal && params->window_right >= 0) ? AOTK_FEATURE_WINDOW : 0) |
      (params->softcap > 0.0f ? AOTK_FEATURE_SOFTCAP : 0) |
      (params->alibi_slopes.data != NULL ? AOTK_FEATURE_ALIBI : 0) |
      (params->sinks.data != NULL ? AOTK_FEATURE_SINKS : 0) |
      (row->head_dim_qk > s->head_dim_qk || row->head_dim_v > s->head_dim_v ? AOTK_FEATURE_PADDED_HEAD_DIM : 0) |
      (paged ? AOTK_FEATURE_PAGED_KV : 0) | (split ? AOTK_FEATURE_SPLIT_KV : 0) |
      (append ? AOTK_FEATURE_APPEND_KV : 0) | (varlen ? AOTK_FEATURE_VARLEN : 0);
  CHECK(info.struct_size == sizeof info);
  CHECK_MSG(strcmp(info.kernel_name, row->name) == 0, "%s: aotk_decode_query names %s, expected %s", what,
            info.kernel_name, row->name);
  CHECK_MSG(info.arch == g->arch && info.from_ptx == g->from_ptx, "%s: sm_%d from_ptx %d, expected sm_%d from_ptx %d",
            what, info.arch, info.from_ptx, g->arch, g->from_ptx);
  CHECK(info.num_warps == row->num_warps && info.shared_bytes == row->shared_bytes && info.aligned == 1);
  CHECK(info.block_m == row->block_m && info.block_n == row->block_n);
  CHECK(info.head_dim_qk == row->head_dim_qk && info.head_dim_v == row->head_dim_v);
  CHECK_MSG(info.num_splits == splits, "%s: %d splits, expected %lld", what, info.num_splits, (long long)splits);
  CHECK_MSG(info.grid == grid, "%s: grid %lld, expected %lld (%lld requests x %lld kv heads x %lld row chunks x %lld "
            "splits)", what, (long long)info.grid, (long long)grid, (long long)s->batch, (long long)s->heads_kv,
            (long long)row_chunks, (long long)splits);
  CHECK_MSG(info.workspace_bytes == workspace_bytes, "%s: workspace_bytes %zu, expected %zu", what,
            info.workspace_bytes, workspace_bytes);
  CHECK_MSG(info.launches == launches, "%s: the query announces %d launches, expected %d", what, info.launches,
            launches);
  CHECK_MSG(info.features == features, "%s: features %#x, expected %#x", what, info.features, features);

  reset_launch_log();
  const int launches_before = fake.launches;
  status = aotk_attn_decode(params, workspace, workspace_bytes, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_decode %s (%s)", what, aotk_status_name(status), aotk_last_error());
  CHECK_MSG(aotk_last_error()[0] == '\0', "%s: a success left the message \"%s\"", what, aotk_last_error());
  CHECK_MSG(fake.launches == launches_before + launches, "%s: %d launches, expected %d", what,
            fake.launches - launches_before, launches);
  if (status != AOTK_OK || fake.logged_launches != launches) return;

  /* The order: appending first (the decoding kernel reads the rows it writes), the merge last. */
  if (append) check_append_launch(what, &fake.launch_log[0], params, s, append_row, capacity);
  const recorded_launch *launch = &fake.launch_log[first];
  const char *kernel = "attn_decode";
  check_sel_launch_shape(what, launch, KERNEL_ATTN_DECODE, row, grid, DECODE_GLOBAL_SCRATCH);
  if (launch->kernel != KERNEL_ATTN_DECODE) return;
  check_pointer(what, kernel, launch, DECODE_Q, params->q.data, "q");
  check_pointer(what, kernel, launch, DECODE_K, params->k_cache.data, "k_cache");
  check_pointer(what, kernel, launch, DECODE_V, params->v_cache.data, "v_cache");
  check_pointer(what, kernel, launch, DECODE_OUT, params->out.data, "out");
  check_pointer(what, kernel, launch, DECODE_LSE, params->lse.data, "lse");
  check_pointer(what, kernel, launch, DECODE_BLOCK_TABLE, params->block_table.data, "block_table");
  check_pointer(what, kernel, launch, DECODE_CACHE_SEQLENS, params->cache_seqlens.data, "cache_seqlens");
  check_pointer(what, kernel, launch, DECODE_CU_SEQLENS_Q, params->cu_seqlens_q.data, "cu_seqlens_q");
  check_pointer(what, kernel, launch, DECODE_ALIBI_SLOPES, params->alibi_slopes.data, "alibi_slopes");
  check_pointer(what, kernel, launch, DECODE_SINKS, params->sinks.data, "sinks");
  /* The partials: the outputs at the workspace's start, the LSEs after them at a 16-byte boundary, both
   * inside the workspace. */
  const uint64_t base = (uint64_t)(uintptr_t)workspace, out_partial = arg_pointer(launch, DECODE_OUT_PARTIAL);
  const uint64_t lse_partial = arg_pointer(launch, DECODE_LSE_PARTIAL);
  if (split) {
    CHECK_MSG(out_partial == base && lse_partial == base + decode_out_partial_bytes(s, splits) &&
                  lse_partial % 16 == 0 &&
                  out_partial + (uint64_t)(4 * splits * decode_rows(s) * decode_partial_row(s)) <= lse_partial &&
                  lse_partial + (uint64_t)(4 * splits * decode_rows(s)) <= base + workspace_bytes,
              "%s: partials at %#llx and %#llx, not laid out in the %zu-byte workspace at %#llx", what,
              (unsigned long long)out_partial, (unsigned long long)lse_partial, workspace_bytes,
              (unsigned long long)base);
  } else {
    CHECK_MSG(out_partial == 0 && lse_partial == 0, "%s: partial pointers without a split", what);
  }
  const aotk_tensor *tensors[4] = {&params->q, &params->k_cache, &params->v_cache, &params->out};
  static const char *const names[4] = {"q", "k_cache", "v_cache", "out"};
  for (int t = 0; t < 4; t++) {
    const bool packed = varlen && (t == 0 || t == 3); /* (0, token, head) */
    for (int d = 0; d < 3; d++) {
      char name[48];
      if (packed && d == 0) {
        snprintf(name, sizeof name, "packed %s's batch stride", names[t]);
      } else {
        snprintf(name, sizeof name, "%s.strides[%d]", names[t], packed ? d - 1 : d);
      }
      const int64_t expected = packed ? (d == 0 ? 0 : tensors[t]->strides[d - 1]) : tensors[t]->strides[d];
      check_i64(what, kernel, launch, DECODE_STRIDE_QB + 3 * t + d, expected, name);
    }
  }
  const bool lse = params->lse.data != NULL;
  check_i64(what, kernel, launch, DECODE_STRIDE_LB, lse && !varlen ? params->lse.strides[0] : 0, "lse batch stride");
  check_i64(what, kernel, launch, DECODE_STRIDE_LH, lse ? params->lse.strides[varlen ? 0 : 1] : 0, "lse head stride");
  check_i64(what, kernel, launch, DECODE_STRIDE_TB, paged ? params->block_table.strides[0] : 0, "block table stride");
  const bool alibi_per_batch = params->alibi_slopes.data != NULL && params->alibi_slopes.rank == 2;
  check_i64(what, kernel, launch, DECODE_STRIDE_AB, alibi_per_batch ? params->alibi_slopes.strides[0] : 0,
            "alibi batch stride");
  check_int(what, kernel, launch, DECODE_BATCH, s->batch, "batch_size");
  check_int(what, kernel, launch, DECODE_SEQLEN_Q, s->seqlen_q, "seqlen_q");
  check_int(what, kernel, launch, DECODE_HEADS_Q, s->heads_q, "heads_q");
  check_int(what, kernel, launch, DECODE_GROUP_SIZE, group, "group_size");
  check_int(what, kernel, launch, DECODE_CAPACITY, capacity, "capacity");
  check_int(what, kernel, launch, DECODE_PAGE_SIZE, paged ? params->k_cache.shape[1] : 0, "page_size");
  check_int(what, kernel, launch, DECODE_NUM_SPLITS, splits, "num_splits");
  if (split_keys > 0) {
    check_int(what, kernel, launch, DECODE_SPLIT_KEYS, split_keys, "split_keys");
  } else { /* one split: it runs to each request's end (the last split does), whatever split_keys says */
    CHECK_MSG(splits == 1 && arg_i32(launch, DECODE_SPLIT_KEYS) > 0, "%s: split_keys %d", what,
              arg_i32(launch, DECODE_SPLIT_KEYS));
  }
  check_int(what, kernel, launch, DECODE_ROW_CHUNKS, row_chunks, "row_chunks");
  check_int(what, kernel, launch, DECODE_HEAD_DIM_QK8, s->head_dim_qk / 8, "head_dim_qk8");
  check_int(what, kernel, launch, DECODE_HEAD_DIM_V8, s->head_dim_v / 8, "head_dim_v8");
  check_int(what, kernel, launch, DECODE_WINDOW_LEFT, params->window_left, "window_left");
  check_int(what, kernel, launch, DECODE_WINDOW_RIGHT, causal ? 0 : params->window_right, "window_right");
  const int32_t flags = (lse ? FLAG_WRITE_LSE : 0) | (params->softcap > 0.0f ? FLAG_SOFTCAP : 0) |
                        (params->alibi_slopes.data != NULL ? FLAG_ALIBI : 0) |
                        (params->sinks.data != NULL ? FLAG_SINKS : 0) | (paged ? DECODE_FLAG_PAGED : 0) |
                        (split ? DECODE_FLAG_SPLIT : 0) | (varlen ? FLAG_VARLEN : 0);
  CHECK_MSG(arg_i32(launch, DECODE_FLAGS) == flags, "%s: attn_decode's flags %#x, expected %#x", what,
            (unsigned)arg_i32(launch, DECODE_FLAGS), (unsigned)flags);
  check_int(what, kernel, launch, DECODE_SEQLEN_NEW, seqlen_new, "seqlen_new");
  const double scale = params->softmax_scale != 0.0f ? params->softmax_scale : 1.0 / sqrt((double)s->head_dim_qk);
  check_float(what, kernel, launch, DECODE_QK_SCALE_LOG2, scale / log(2.0), "qk_scale_log2");
  check_float(what, kernel, launch, DECODE_SOFTCAP_SCALE, params->softcap > 0.0f ? scale / params->softcap : 0.0,
              "softcap_scale");
  check_float(what, kernel, launch, DECODE_SOFTCAP_LOG2, params->softcap / log(2.0), "softcap_log2");
  if (!split) return;

  /* The merge reads the partials as [split, batch, seqlen_q, heads_q, round_up(head_dim_v, 16)] and
   * [split, batch, heads_q, seqlen_q], and writes out and lse in the caller's layout; the sinks join here. */
  launch = &fake.launch_log[first + 1];
  kernel = "attn_merge";
  const int64_t rows = decode_rows(s);
  const int64_t row_blocks = ceil_div(rows, merge->block_m);
  const bool merge_whole_rows = row_blocks * ceil_div(s->head_dim_v, merge->block_n) > INT32_MAX;
  const int64_t merge_grid = row_blocks * (merge_whole_rows ? 1 : ceil_div(s->head_dim_v, merge->block_n));
  check_sel_launch_shape(what, launch, KERNEL_ATTN_MERGE, merge, merge_grid, MERGE_GLOBAL_SCRATCH);
  if (launch->kernel != KERNEL_ATTN_MERGE) return;
  CHECK_MSG(arg_pointer(launch, MERGE_PARTIAL32) == out_partial && arg_pointer(launch, MERGE_PARTIAL16) == 0 &&
                arg_pointer(launch, MERGE_PARTIAL_BF16) == 0 && arg_pointer(launch, MERGE_LSE_PARTIAL) == lse_partial,
            "%s: the merge does not read the decoding kernel's fp32 partials", what);
  for (int slot = 0; slot < 3; slot++) {
    const void *expected = slot == merge_slot(s->dtype) ? params->out.data : NULL;
    check_pointer(what, kernel, launch, MERGE_OUT32 + slot, expected,
                  slot == 0 ? "Out32" : slot == 1 ? "Out16" : "OutBF16");
  }
  check_pointer(what, kernel, launch, MERGE_LSE, params->lse.data, "lse");
  check_pointer(what, kernel, launch, MERGE_SINKS, params->sinks.data, "sinks");
  const int64_t pd = decode_partial_row(s);
  const int64_t partial_strides[4] = {rows * pd, s->seqlen_q * s->heads_q * pd, s->heads_q * pd, pd};
  const int64_t lse_partial_strides[4] = {rows, s->heads_q * s->seqlen_q, s->seqlen_q, 1};
  static const char *const partial_names[4] = {"partial stride_pp", "partial stride_pb", "partial stride_ps",
                                               "partial stride_ph"};
  static const char *const lse_partial_names[4] = {"stride_lpp", "stride_lpb", "stride_lph", "stride_lps"};
  for (int d = 0; d < 4; d++) {
    check_i64(what, kernel, launch, MERGE_STRIDE_PP + d, partial_strides[d], partial_names[d]);
    check_i64(what, kernel, launch, MERGE_STRIDE_LPP + d, lse_partial_strides[d], lse_partial_names[d]);
  }
  for (int d = 0; d < 3; d++) {
    check_i64(what, kernel, launch, MERGE_STRIDE_OB + d, params->out.strides[d], "out stride");
    if (lse) check_i64(what, kernel, launch, MERGE_STRIDE_LB + d, params->lse.strides[d], "lse stride");
  }
  check_int(what, kernel, launch, MERGE_NUM_PARTIALS, splits, "num_partials");
  check_int(what, kernel, launch, MERGE_SEQLEN_Q, s->seqlen_q, "seqlen_q");
  check_int(what, kernel, launch, MERGE_HEADS, s->heads_q, "heads");
  check_int(what, kernel, launch, MERGE_NUM_ROWS, rows, "num_rows");
  check_int(what, kernel, launch, MERGE_HEAD_DIM8, s->head_dim_v / 8, "head_dim8");
  const int32_t merge_flags = merge_dtype_flags(AOTK_DTYPE_FLOAT32, s->dtype) | (lse ? FLAG_WRITE_LSE : 0) |
                              (params->sinks.data != NULL ? FLAG_SINKS : 0) |
                              (merge_whole_rows ? MERGE_FLAG_WHOLE_ROWS : 0);
  CHECK_MSG(arg_i32(launch, MERGE_FLAGS) == merge_flags, "%s: attn_merge's flags %#x, expected %#x", what,
            (unsigned)arg_i32(launch, MERGE_FLAGS), (unsigned)merge_flags);
}

/* ---- decoding: the split, its workspace, the query ---- */

/* The split choice, through aotk_decode_query on the fake's 132 SMs, worked by hand from the rule in
 * src/decode/aotk_decode.c's comment (flash-attn's num_splits_heuristic): split only when batch * heads_kv *
 * row chunks programs are fewer than 4/5 of the SMs; the efficiency of n splits is programs * n over the
 * SMs of the waves they take; take the smallest n within 85% of the best; each split keeps at least 256
 * keys (and at most 256 splits). Split lengths are whole key blocks (block_n: 128 keys for these head
 * dims of 128, whatever the row tile), so the count is then what ceil(keys / split_keys) gives. A forced
 * num_splits skips the rule but not the blocks. */
static void test_decode_split_choice(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const struct {
    const char *what;
    int64_t batch, heads_q, heads_kv, seqlen_q, capacity, page_size;
    int32_t num_splits, max_seqlen_k;
    int64_t splits, split_keys; /* split_keys 0: one split */
  } cases[] = {
      {"64 requests x 8 kv heads = 512 programs fill 132 SMs: no split", 64, 32, 8, 1, 32768, 0, 0, 0, 1, 0},
      {"105 programs (132 x 4/5): no split", 105, 4, 1, 1, 32768, 0, 0, 0, 1, 0},
      {"104 programs: 5 splits (520 in 4 waves, 98.5%; 1 to 4 give 79%; the best, 99.9%, at 52) of ceil(32768 / 5) = "
       "6554 keys, 6656 in whole blocks", 13, 32, 8, 1, 32768, 0, 0, 0, 5, 6656},
      {"1 request x 8 kv heads, 32768 keys: 16 splits of 2048 keys (128 of 132 SMs, 97%, the best; 15 give 91%, under "
       "95% of it)", 1, 32, 8, 1, 32768, 0, 0, 0, 16, 2048},
      {"the comment's example, 2 requests x 8 kv heads: 8 splits (128 programs, 97%)", 2, 16, 8, 1, 65536, 0, 0, 0, 8,
       8192},
      {"a group of 128 x 16 tokens is 32 row chunks of 64: 32 programs, 4 splits (97%)", 1, 128, 1, 16, 32768, 0, 0,
       0, 4, 8192},
      {"200 keys: fewer than two splits of 128", 1, 32, 8, 1, 200, 0, 0, 0, 1, 0},
      {"255 keys: two splits would hold fewer than 128 each", 1, 32, 8, 1, 255, 0, 0, 0, 1, 0},
      {"256 keys: two splits of 128", 1, 32, 8, 1, 256, 0, 0, 0, 2, 128},
      {"300 keys: two splits asked of 150, 256 in whole blocks (and 44)", 1, 32, 8, 1, 300, 0, 0, 0, 2, 256},
      {"1024 keys, 16 programs: 8 splits of 128 (the most that keep 128 each; 128 programs, 97%)", 2, 32, 8, 1, 1024,
       0, 0, 0, 8, 128},
      {"max_seqlen_k 255 bounds a 32768-key cache: no split", 1, 32, 8, 1, 32768, 0, 0, 255, 1, 0},
      {"max_seqlen_k 4096: 16 splits of 256 (97%; 13 to 15 asked give 11 splits of 384 in whole blocks, 67%)", 1, 32,
       8, 1, 32768, 0, 0, 4096, 16, 256},
      {"max_seqlen_k above the capacity: the capacity", 1, 32, 8, 1, 32768, 0, 0, 100000, 16, 2048},
      {"forced 64 splits of 200 keys: one 128-key block each, 2", 1, 32, 8, 1, 200, 0, 64, 0, 2, 128},
      {"forced 256 splits of 32768 keys: 128 keys each", 1, 32, 8, 1, 32768, 0, 256, 0, 256, 128},
      {"forced 7 splits of 1000 keys: 143 keys, 256 in whole blocks, so 4", 3, 8, 2, 2, 1000, 0, 7, 0, 4, 256},
      {"forced 3 splits of 1000 keys: 384 keys each", 3, 8, 2, 2, 1000, 0, 3, 0, 3, 384},
      {"forced 1 split where the rule would take 16", 1, 32, 8, 1, 32768, 0, 1, 0, 1, 0},
      {"forced 2 splits of 64 keys: one block, one split", 1, 32, 8, 1, 64, 0, 2, 0, 1, 0},
      {"paged, 2048 pages of 16 keys: as the contiguous 32768", 1, 32, 8, 1, 32768, 16, 0, 0, 16, 2048},
      {"paged, 128 pages of 256 keys (whole blocks, one lookup each): as the contiguous 32768", 1, 32, 8, 1, 32768,
       256, 0, 0, 16, 2048},
      {"paged, 64 pages of 100 keys: 50 splits allowed; 13 splits of 512 keys are the best (104 programs, 79%: 14 to "
       "16 asked round to 13 too, 17 give 136 programs in two waves)", 1, 32, 8, 1, 6400, 100, 0, 0, 13, 512},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    decode_shape s = {AOTK_DTYPE_BFLOAT16, cases[i].batch, cases[i].seqlen_q, cases[i].heads_q, cases[i].heads_kv,
                      128, 128, cases[i].capacity, cases[i].page_size, 0, true, 0};
    if (s.page_size > 0) s.num_pages = s.capacity / s.page_size;
    aotk_decode_params params = decode_params_for(s);
    params.num_splits = cases[i].num_splits, params.max_seqlen_k = cases[i].max_seqlen_k;
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(info.num_splits == cases[i].splits, "%s: %d splits, expected %lld", cases[i].what, info.num_splits,
              (long long)cases[i].splits);
    const size_t bytes = decode_workspace_bytes(&s, cases[i].splits);
    CHECK_MSG(info.workspace_bytes == bytes, "%s: workspace_bytes %zu, expected %zu", cases[i].what,
              info.workspace_bytes, bytes);
    CHECK_MSG(((info.features & AOTK_FEATURE_SPLIT_KV) != 0) == (cases[i].splits > 1) &&
                  info.launches == (cases[i].splits > 1 ? 2 : 1),
              "%s: features %#x, %d launches", cases[i].what, info.features, info.launches);
    char what[200];
    snprintf(what, sizeof what, "split choice: %s", cases[i].what);
    check_decode(what, &params, &s, &sel_sm90, cases[i].splits, cases[i].split_keys,
                 FAKE_WORKSPACE);
    /* The split depends on sizes the host sees, not on the new tokens: appending keeps it (and the
     * workspace), one launch more. */
    add_new_kv(&params, &s, 1 + (int64_t)i % 5);
    snprintf(what, sizeof what, "split choice, appending %lld tokens: %s", 1 + (long long)i % 5, cases[i].what);
    check_decode(what, &params, &s, &sel_sm90, cases[i].splits, cases[i].split_keys, FAKE_WORKSPACE);
  }
  /* The workspace formula's two parts, by hand: 15 splits x 1 request x 1 token x 32 heads = 480 rows of
   * 128 floats (245760 bytes) and 480 LSEs (1920 bytes). */
  decode_shape s = {AOTK_DTYPE_BFLOAT16, 1, 1, 32, 8, 128, 128, 32768, 0, 0, true, 0};
  CHECK(decode_workspace_bytes(&s, 15) == 245760 + 1920);
  /* head_dim_v 72 pads partial rows to 80 floats: with 11 splits, 11 x 1 x 3 x 5 = 165 rows of them (52800
   * bytes), and 165 LSEs (660 bytes) pad to 672. The rule's split for it: one program (a group of 5 x 3
   * tokens in one 16-row chunk of 128-key blocks), 4096 keys allow 32 splits of 128, and only 32 come
   * within 95% of the best (31 asked round to 256-key splits, 16 of them): 480 rows, 153600 + 1920 bytes. */
  s = (decode_shape){AOTK_DTYPE_FLOAT16, 1, 3, 5, 1, 64, 72, 4096, 0, 0, true, 0};
  CHECK(decode_workspace_bytes(&s, 11) == 52800 + 672);
  CHECK(decode_workspace_bytes(&s, 32) == 153600 + 1920);
  aotk_decode_params params = strided_decode_params(s);
  check_decode("head dims (64, 72), 3 tokens of a group of 5", &params, &s, &sel_sm90, 32, 128,
               FAKE_WORKSPACE);
  uninstall_fake_gpu();
}

/* ---- decoding: what runs, and with which arguments ---- */

static void test_decode_launch_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  decode_shape s = default_decode_shape;
  aotk_decode_params params = strided_decode_params(s);
  params.num_splits = 1;
  check_decode("contiguous, bf16 d128 GQA 4, two tokens, strided, no split", &params, &s, &sel_sm90, 1, 0, NULL);
  CHECK_MSG(fake.loaded_images == 1, "loaded %d images", fake.loaded_images);
  params.num_splits = 3;
  check_decode("contiguous, 3 splits of 384 keys", &params, &s, &sel_sm90, 3, 384, FAKE_WORKSPACE);
  CHECK_MSG(fake.loaded_images == 2, "loaded %d images, expected the decoding kernel and the merge",
            fake.loaded_images);
  /* The rule's own choice for 6 programs and 1000 keys: 4 splits of 256 (7 keep 128 keys each, but 4 to 7
   * asked all round to 256-key splits, 4 of them; 3 would be 384 keys each). */
  params.num_splits = 0;
  check_decode("contiguous, the rule's split", &params, &s, &sel_sm90, 4, 256, byte_offset(FAKE_WORKSPACE, 4096));
  /* The 3 forced splits' merge read a partial a step; 4 partials of 48 rows (a grid of 24 programs for
   * that kernel) take the wide one: a third image, loaded now. */
  CHECK_MSG(fake.loaded_images == 3 && fake.calls[CALL_cuLibraryLoadData] == 1, "loaded %d images, %d now",
            fake.loaded_images, fake.calls[CALL_cuLibraryLoadData]);

  s = default_paged_shape;
  params = strided_decode_params(s);
  params.num_splits = 1;
  check_decode("paged, 64 pages of 16 keys, strided, no split", &params, &s, &sel_sm90, 1, 0, NULL);
  params.num_splits = 4;
  check_decode("paged, 4 splits of 256 keys", &params, &s, &sel_sm90, 4, 256, FAKE_WORKSPACE);

  /* Every run-time feature at once, float16, no lse, ALiBi per request with padded rows. */
  s.dtype = AOTK_DTYPE_FLOAT16, s.with_lse = false;
  params = strided_decode_params(s);
  params.causal = 1, params.window_left = 40, params.softcap = 30.0f, params.softmax_scale = 0.05f;
  params.alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 3, 8);
  params.alibi_slopes.strides[0] = 16;
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 8);
  params.num_splits = 2;
  check_decode("paged, fp16, causal, window, softcap, ALiBi, sinks, no lse, 2 splits", &params, &s, &sel_sm90, 2, 512,
               FAKE_WORKSPACE);
  params.num_splits = 1, params.causal = 0, params.window_left = -1, params.window_right = 7;
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 8);
  check_decode("paged, fp16, window_right 7, ALiBi per head, sinks, no split", &params, &s, &sel_sm90, 1, 0, NULL);

  /* MQA, a group of 32 query heads x 4 tokens = 128 rows: the 64-row tile, two chunks per request. */
  s = (decode_shape){AOTK_DTYPE_BFLOAT16, 2, 4, 32, 1, 64, 64, 4096, 0, 0, true, 0};
  params = strided_decode_params(s);
  params.num_splits = 5;
  check_decode("MQA, 128 rows in two 64-row chunks, d64, 5 splits", &params, &s, &sel_sm90, 5, 832, FAKE_WORKSPACE);
  uninstall_fake_gpu();

  /* Appending: the appending kernel first, then the decoding kernel (told seqlen_new), then the merge. */
  install_fake_gpu(90, SHARED_SM90);
  s = default_decode_shape;
  params = strided_decode_params(s);
  add_strided_new_kv(&params, &s, 3);
  params.num_splits = 1;
  check_decode("appending 3 tokens, contiguous, strided, no split", &params, &s, &sel_sm90, 1, 0, NULL);
  CHECK_MSG(fake.loaded_images == 2, "loaded %d images, expected the appending and the decoding kernels",
            fake.loaded_images);
  params.num_splits = 3;
  check_decode("appending 3 tokens, contiguous, 3 splits", &params, &s, &sel_sm90, 3, 384, FAKE_WORKSPACE);
  CHECK_MSG(fake.loaded_images == 3, "loaded %d images, expected the merge too", fake.loaded_images);
  add_new_kv(&params, &s, 1);
  check_decode("appending one token, contiguous (k_new and v_new contiguous), 3 splits", &params, &s, &sel_sm90, 3,
               384, FAKE_WORKSPACE);
  s = default_paged_shape;
  params = strided_decode_params(s);
  add_strided_new_kv(&params, &s, 7);
  params.num_splits = 1;
  check_decode("appending 7 tokens, paged, strided, no split", &params, &s, &sel_sm90, 1, 0, NULL);
  params.num_splits = 4;
  check_decode("appending 7 tokens, paged, 4 splits", &params, &s, &sel_sm90, 4, 256, FAKE_WORKSPACE);
  /* Head dims (192, 64) in the (256, 128) pair, fp16, every feature, no lse, 2 splits. */
  s = (decode_shape){AOTK_DTYPE_FLOAT16, 2, 1, 6, 3, 192, 64, 640, 0, 0, false, 0};
  params = strided_decode_params(s);
  add_strided_new_kv(&params, &s, 16);
  params.causal = 1, params.window_left = 40, params.softcap = 30.0f;
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 6);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 6);
  params.num_splits = 2;
  check_decode("appending 16 tokens, fp16, head dims (192, 64), every feature, 2 splits", &params, &s, &sel_sm90, 2,
               320, FAKE_WORKSPACE);
  uninstall_fake_gpu();

  /* The other targets: sm_80 cubins on sm_80 and sm_86, the sm_80 PTX on sm_120. */
  static const gpu gpus[] = {{80, SHARED_SM80, 80, 0}, {86, SHARED_SM86, 80, 0}, {120, SHARED_SM120, 80, 1}};
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    char what[64];
    snprintf(what, sizeof what, "cc %d, paged, 4 splits", gpus[g].compute_capability);
    s = default_paged_shape;
    params = strided_decode_params(s);
    params.num_splits = 4;
    check_decode(what, &params, &s, &gpus[g], 4, 256, FAKE_WORKSPACE);
    CHECK_MSG(gpus[g].from_ptx ? fake.loaded_ptx == 2 : fake.loaded_elf == 2, "%s: loaded %d ELF, %d PTX", what,
              fake.loaded_elf, fake.loaded_ptx);
    snprintf(what, sizeof what, "cc %d, paged, appending, 4 splits", gpus[g].compute_capability);
    add_strided_new_kv(&params, &s, 2);
    check_decode(what, &params, &s, &gpus[g], 4, 256, FAKE_WORKSPACE);
    CHECK_MSG(gpus[g].from_ptx ? fake.loaded_ptx == 3 : fake.loaded_elf == 3, "%s: loaded %d ELF, %d PTX", what,
              fake.loaded_elf, fake.loaded_ptx);
  }
  uninstall_fake_gpu();
}

/* Packed queries (include/aotk.h, cu_seqlens_q): a prefill over the cache, one launch, unsplit, no
 * workspace, the tile chosen by G * max_seqlen_q (the 32-row one above 16 rows, the 64-row one above
 * 32), on a grid of batch * heads_kv * ceil(G * max_seqlen_q / block_m); check_decode checks the packed
 * strides, the CuSeqlensQ pointer and FLAG_VARLEN. The literals are worked by hand. */
static void test_decode_varlen(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const struct {
    const char *what;
    int64_t batch, max_seqlen_q, heads_q, heads_kv, total_q, page_size;
    int32_t block_m;
    int64_t grid;
  } cases[] = {
      {"G 4 x 40 tokens = 160 rows: three 64-row chunks x 3 requests x 2 kv heads", 3, 40, 8, 2, 100, 0, 64, 18},
      {"the same over 64 pages of 16 keys", 3, 40, 8, 2, 100, 16, 64, 18},
      {"G 4 x 4 tokens = 16 rows: one 16-row chunk", 3, 4, 8, 2, 10, 0, 16, 6},
      {"G 1 x 16 tokens = 16 rows: the 16-row tile", 2, 16, 4, 4, 20, 0, 16, 8},
      {"G 1 x 17 tokens = 17 rows: the 32-row tile (dense refuses 17 tokens)", 2, 17, 4, 4, 20, 0, 32, 8},
      {"G 8 x 3 tokens = 24 rows: the 32-row tile", 1, 3, 8, 1, 3, 0, 32, 1},
      {"G 11 x 3 tokens = 33 rows: the 64-row tile", 1, 3, 11, 1, 3, 0, 64, 1},
      {"G 4 x 8 tokens = 32 rows over 4 pages of 256 keys: the 32-row tile", 3, 8, 8, 2, 20, 256, 32, 6},
      {"MQA, G 32 x 5000 tokens: 2500 chunks x 2 requests", 2, 5000, 32, 1, 9000, 0, 64, 5000},
      {"paged, 5000 tokens, G 1: 79 chunks x 4 requests x 8 kv heads", 4, 5000, 8, 8, 12345, 16, 64, 2528},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    decode_shape s = cases[i].page_size > 0 ? default_varlen_paged_shape : default_varlen_shape;
    if (s.page_size > 0) s.page_size = cases[i].page_size; /* a pool of 200 pages, whatever their size */
    s.batch = cases[i].batch, s.seqlen_q = cases[i].max_seqlen_q, s.heads_q = cases[i].heads_q;
    s.heads_kv = cases[i].heads_kv, s.total_q = cases[i].total_q;
    aotk_decode_params params = strided_decode_params(s);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(info.block_m == cases[i].block_m && info.grid == cases[i].grid && info.num_splits == 1 &&
                  info.launches == 1 && info.workspace_bytes == 0 && (info.features & AOTK_FEATURE_VARLEN) != 0,
              "%s: block_m %d, grid %lld, %d splits, %d launches, %zu bytes, features %#x", cases[i].what,
              info.block_m, (long long)info.grid, info.num_splits, info.launches, info.workspace_bytes,
              info.features);
    char what[200];
    snprintf(what, sizeof what, "varlen: %s", cases[i].what);
    check_decode(what, &params, &s, &sel_sm90, 1, 0, NULL);
    /* num_splits 0 (aotk chooses) and 1 are the same call. */
    params.num_splits = 1;
    snprintf(what, sizeof what, "varlen, num_splits 1: %s", cases[i].what);
    check_decode(what, &params, &s, &sel_sm90, 1, 0, NULL);
  }

  /* Where the dense call splits (1 request x 8 kv heads over 32768 keys: 16 splits), the packed one does
   * not: one launch, no workspace, and a NULL workspace is fine. */
  decode_shape s = {AOTK_DTYPE_BFLOAT16, 1, 1, 32, 8, 128, 128, 32768, 0, 0, true, 0};
  aotk_decode_params params = decode_params_for(s);
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK && info.num_splits == 16);
  s.total_q = 1;
  params = decode_params_for(s);
  check_decode("varlen, one token where the dense call takes 16 splits", &params, &s, &sel_sm90, 1, 0, NULL);

  /* Every run-time feature at once, float16, no lse, ALiBi per request, head dims (192, 64). */
  s = default_varlen_paged_shape;
  s.dtype = AOTK_DTYPE_FLOAT16, s.with_lse = false, s.head_dim_qk = 192, s.head_dim_v = 64;
  params = strided_decode_params(s);
  params.causal = 1, params.window_left = 40, params.softcap = 30.0f, params.softmax_scale = 0.05f;
  params.alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 3, 8);
  params.alibi_slopes.strides[0] = 16;
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 8);
  check_decode("varlen, paged, fp16, (192, 64), causal, window, softcap, ALiBi, sinks, no lse", &params, &s,
               &sel_sm90, 1, 0, NULL);

  /* max_seqlen_q 5000 is a prefill chunk; the same 5000 or even 17 tokens dense are refused. */
  s = default_varlen_shape;
  s.seqlen_q = 5000, s.total_q = 12000;
  params = decode_params_for(s);
  info = (aotk_kernel_info)AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
  CHECK_MSG(status == AOTK_OK && info.grid == 3 * 2 * 313, "max_seqlen_q 5000: %s (%s), grid %lld",
            aotk_status_name(status), aotk_last_error(), (long long)info.grid);
  static const int64_t dense_tokens[] = {17, 5000};
  for (size_t i = 0; i < sizeof dense_tokens / sizeof dense_tokens[0]; i++) {
    s = default_decode_shape;
    s.seqlen_q = dense_tokens[i];
    params = decode_params_for(s);
    params.max_seqlen_q = (int32_t)dense_tokens[i]; /* unread without cu_seqlens_q */
    reset_calls();
    status = aotk_attn_decode(&params, NULL, 0, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE && message_mentions("cu_seqlens_q") && total_calls() == 0,
              "dense seqlen_q %lld: %s (%s)", (long long)dense_tokens[i], aotk_status_name(status), aotk_last_error());
  }
  /* Query rows past int32: 3 requests x 2^31 - 1 tokens x 8 heads. */
  s = default_varlen_shape;
  s.seqlen_q = INT32_MAX;
  params = decode_params_for(s);
  status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
  CHECK_MSG(status == AOTK_ERROR_SIZE_OVERFLOW && message_mentions("batch * seqlen_q * heads_q"),
            "varlen, max_seqlen_q 2^31 - 1 x 3 requests x 8 heads: %s (%s)", aotk_status_name(status),
            aotk_last_error());
  uninstall_fake_gpu();

  /* The other targets: sm_80 cubins on sm_80 and sm_86, the sm_80 PTX on sm_120. */
  static const gpu gpus[] = {{80, SHARED_SM80, 80, 0}, {86, SHARED_SM86, 80, 0}, {120, SHARED_SM120, 80, 1}};
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    char what[64];
    snprintf(what, sizeof what, "cc %d, varlen, paged", gpus[g].compute_capability);
    s = default_varlen_paged_shape;
    params = strided_decode_params(s);
    check_decode(what, &params, &s, &gpus[g], 1, 0, NULL);
    CHECK_MSG(gpus[g].from_ptx ? fake.loaded_ptx == 1 : fake.loaded_elf == 1, "%s: loaded %d ELF, %d PTX", what,
              fake.loaded_elf, fake.loaded_ptx);
    uninstall_fake_gpu();
  }
}

/* The decoding family, as literals (src/decode/aotk_decode.c, plan_decode): a contiguous cache runs
 * attn_decode; a paged one runs attn_decode_paged_blocks (one page lookup per block of keys) when its
 * page size is a multiple of the chosen row's block_n (128 keys up to head dim 128, 64 at 256), else
 * attn_decode_paged (a lookup per key row). The tile is chosen by G * seqlen_q: 16 rows up to 16, 32 up
 * to 32, then 64 (with 64-key blocks). check_decode then checks the launches, the split's merge too. */
static void test_decode_family_choice(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const struct {
    const char *what;
    int64_t heads_q, head_dim, page_size; /* 3 requests x 2 tokens, 2 kv heads, 1024 keys */
    int32_t num_splits;
    const char *family; /* the name's prefix, through the dtype */
    int32_t block_m, block_n;
    int64_t splits, split_keys;
  } cases[] = {
      {"contiguous, G 4 x 2 tokens", 8, 128, 0, 1, "attn_decode_bf16_", 16, 128, 1, 0},
      {"contiguous, 4 splits of 256 keys", 8, 128, 0, 4, "attn_decode_bf16_", 16, 128, 4, 256},
      {"pages of 16 keys: a lookup per key row", 8, 128, 16, 1, "attn_decode_paged_bf16_", 16, 128, 1, 0},
      {"pages of 64 keys hold half a 128-key block: a lookup per key row", 8, 128, 64, 1, "attn_decode_paged_bf16_",
       16, 128, 1, 0},
      {"pages of 256 keys (two 128-key blocks): a lookup per block", 8, 128, 256, 1, "attn_decode_paged_blocks_bf16_",
       16, 128, 1, 0},
      {"pages of 256 keys, 4 splits of 256 keys", 8, 128, 256, 4, "attn_decode_paged_blocks_bf16_", 16, 128, 4, 256},
      {"pages of 128 keys, G 16 x 2 tokens = 32 rows: the 32-row tile", 32, 128, 128, 1,
       "attn_decode_paged_blocks_bf16_", 32, 128, 1, 0},
      {"pages of 128 keys, G 32 x 2 tokens = 64 rows: the 64-row tile of 64-key blocks", 64, 128, 128, 1,
       "attn_decode_paged_blocks_bf16_", 64, 64, 1, 0},
      {"head dim 256, pages of 64 keys (one 64-key block): a lookup per block", 8, 256, 64, 1,
       "attn_decode_paged_blocks_bf16_d256_", 16, 64, 1, 0},
      {"head dim 256, pages of 64 keys, 7 splits forced: 147 keys, 192 in whole 64-key blocks, so 6", 8, 256, 64, 7,
       "attn_decode_paged_blocks_bf16_d256_", 16, 64, 6, 192},
      {"head dim 256, pages of 16 keys: a lookup per key row", 8, 256, 16, 1, "attn_decode_paged_bf16_d256_", 16, 64,
       1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    decode_shape s = default_decode_shape;
    s.heads_q = cases[i].heads_q, s.head_dim_qk = s.head_dim_v = cases[i].head_dim, s.capacity = 1024;
    if (cases[i].page_size > 0) s.page_size = cases[i].page_size, s.num_pages = 3 * 1024 / cases[i].page_size;
    aotk_decode_params params = strided_decode_params(s);
    params.num_splits = cases[i].num_splits;
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(strncmp(info.kernel_name, cases[i].family, strlen(cases[i].family)) == 0 &&
                  info.block_m == cases[i].block_m && info.block_n == cases[i].block_n &&
                  info.num_splits == cases[i].splits,
              "%s: %s (block %d x %d, %d splits), expected %s... (block %d x %d, %lld splits)", cases[i].what,
              info.kernel_name, info.block_m, info.block_n, info.num_splits, cases[i].family, cases[i].block_m,
              cases[i].block_n, (long long)cases[i].splits);
    char what[160];
    snprintf(what, sizeof what, "family choice: %s", cases[i].what);
    check_decode(what, &params, &s, &sel_sm90, cases[i].splits, cases[i].split_keys, FAKE_WORKSPACE);
  }
  uninstall_fake_gpu();
}

/* The feature bits and split counts aotk_decode_query reports, as literals. */
static void test_decode_features(void) {
  install_fake_gpu(90, SHARED_SM90);
  enum { F_CAUSAL = AOTK_FEATURE_CAUSAL, F_WINDOW = AOTK_FEATURE_WINDOW, F_SOFTCAP = AOTK_FEATURE_SOFTCAP };
  enum { F_ALIBI = AOTK_FEATURE_ALIBI, F_SINKS = AOTK_FEATURE_SINKS, F_PADDED = AOTK_FEATURE_PADDED_HEAD_DIM };
  enum { F_PAGED = AOTK_FEATURE_PAGED_KV, F_SPLIT = AOTK_FEATURE_SPLIT_KV, F_APPEND = AOTK_FEATURE_APPEND_KV };
  static const struct {
    const char *what;
    bool paged;
    int64_t head_dim_qk, head_dim_v;
    int32_t causal, window_left, window_right, num_splits;
    float softcap;
    bool alibi, sinks;
    uint32_t features;
    int32_t splits;
    int64_t seqlen_new; /* appending: k_new and v_new of this many tokens; 0: none */
  } cases[] = {
      {"nothing", false, 128, 128, 0, -1, -1, 1, 0.0f, false, false, 0, 1, 0},
      {"causal", false, 128, 128, 1, -1, -1, 1, 0.0f, false, false, F_CAUSAL, 1, 0},
      {"causal, window_right 0", false, 128, 128, 1, -1, 0, 1, 0.0f, false, false, F_CAUSAL, 1, 0},
      {"causal, window_left 100", false, 128, 128, 1, 100, -1, 1, 0.0f, false, false, F_CAUSAL | F_WINDOW, 1, 0},
      {"window_left 100", false, 128, 128, 0, 100, -1, 1, 0.0f, false, false, F_WINDOW, 1, 0},
      {"window_right 5", false, 128, 128, 0, -1, 5, 1, 0.0f, false, false, F_WINDOW, 1, 0},
      {"window 0, 0", false, 128, 128, 0, 0, 0, 1, 0.0f, false, false, F_WINDOW, 1, 0},
      {"softcap", false, 128, 128, 0, -1, -1, 1, 30.0f, false, false, F_SOFTCAP, 1, 0},
      {"ALiBi", false, 128, 128, 0, -1, -1, 1, 0.0f, true, false, F_ALIBI, 1, 0},
      {"sinks", false, 128, 128, 0, -1, -1, 1, 0.0f, false, true, F_SINKS, 1, 0},
      {"head dims 80 (in 128)", false, 80, 80, 0, -1, -1, 1, 0.0f, false, false, F_PADDED, 1, 0},
      {"head dims (256, 128): compiled", false, 256, 128, 0, -1, -1, 1, 0.0f, false, false, 0, 1, 0},
      {"head dims (192, 128) (in (256, 128))", false, 192, 128, 0, -1, -1, 1, 0.0f, false, false, F_PADDED, 1, 0},
      {"head dims (64, 128) (in (128, 128))", false, 64, 128, 0, -1, -1, 1, 0.0f, false, false, F_PADDED, 1, 0},
      {"paged", true, 128, 128, 0, -1, -1, 1, 0.0f, false, false, F_PAGED, 1, 0},
      {"4 splits", false, 128, 128, 0, -1, -1, 4, 0.0f, false, false, F_SPLIT, 4, 0},
      {"paged, 4 splits, causal, sinks", true, 128, 128, 1, -1, -1, 4, 0.0f, false, true,
       F_PAGED | F_SPLIT | F_CAUSAL | F_SINKS, 4, 0},
      {"everything", true, 48, 48, 1, 9, 0, 2, 10.0f, true, true,
       F_PAGED | F_SPLIT | F_CAUSAL | F_WINDOW | F_SOFTCAP | F_ALIBI | F_SINKS | F_PADDED, 2, 0},
      {"appending", false, 128, 128, 0, -1, -1, 1, 0.0f, false, false, F_APPEND, 1, 1},
      {"appending 16 tokens, paged", true, 128, 128, 0, -1, -1, 1, 0.0f, false, false, F_PAGED | F_APPEND, 1, 16},
      {"appending, 4 splits", false, 128, 128, 0, -1, -1, 4, 0.0f, false, false, F_SPLIT | F_APPEND, 4, 3},
      {"appending, everything", true, 48, 48, 1, 9, 0, 2, 10.0f, true, true,
       F_PAGED | F_SPLIT | F_CAUSAL | F_WINDOW | F_SOFTCAP | F_ALIBI | F_SINKS | F_PADDED | F_APPEND, 2, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    decode_shape s = cases[i].paged ? default_paged_shape : default_decode_shape;
    s.head_dim_qk = cases[i].head_dim_qk, s.head_dim_v = cases[i].head_dim_v;
    aotk_decode_params params = decode_params_for(s);
    params.causal = cases[i].causal, params.window_left = cases[i].window_left;
    params.window_right = cases[i].window_right, params.num_splits = cases[i].num_splits;
    params.softcap = cases[i].softcap;
    if (cases[i].alibi) dec_alibi(&params);
    if (cases[i].sinks) dec_sinks(&params);
    if (cases[i].seqlen_new > 0) add_new_kv(&params, &s, cases[i].seqlen_new);
    aotk_kernel_info info;
    poison_info(&info);
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    const int launches = 1 + (cases[i].splits > 1) + (cases[i].seqlen_new > 0);
    CHECK_MSG(info.features == cases[i].features && info.num_splits == cases[i].splits && info.launches == launches,
              "%s: features %#x, %d splits, %d launches; expected %#x, %d, %d", cases[i].what, info.features,
              info.num_splits, info.launches, cases[i].features, cases[i].splits, launches);
  }
  uninstall_fake_gpu();
}

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
  /* Appending takes no workspace of its own: the same size, the same checks. */
  add_new_kv(&params, &default_decode_shape, 5);
  params.num_splits = 4;
  poison_info(&info);
  info.struct_size = sizeof info;
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK);
  CHECK_MSG(info.workspace_bytes == needed && info.num_splits == 4 && info.launches == 3,
            "appending: workspace_bytes %zu, %d splits, %d launches", info.workspace_bytes, info.num_splits,
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

  /* Appending, with and without the split: three kernels (two), each loaded before the first launch, so
   * a failing load of any of them, the appending kernel's included, launches nothing; a failing launch
   * of the appending kernel, the first, stops the call there, and one of the later kernels leaves the
   * launches before it enqueued. */
  add_new_kv(&params, &default_decode_shape, 2);
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
  RUN_TEST(test_decode_split_choice);
  RUN_TEST(test_decode_launch_arguments);
  RUN_TEST(test_decode_varlen);
  RUN_TEST(test_decode_family_choice);
  RUN_TEST(test_decode_features);
  RUN_TEST(test_decode_query_arguments);
  RUN_TEST(test_decode_workspace);
  RUN_TEST(test_decode_faults);
  aotk__driver_set_for_testing(NULL);
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);
  return aotk_test_finish();
}
