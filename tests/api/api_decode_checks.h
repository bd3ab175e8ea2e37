/*
 * The decoding API tests' models (test_api_decode.c, test_api_decode_query.c): the split's workspace as
 * include/aotk.h lays it out, strided layouts of every tensor, and the check of a call's launches (append,
 * decode, merge) against the expected kernel rows, grids and packed arguments. Static, for the one file
 * of either binary.
 */
#ifndef API_DECODE_CHECKS_H
#define API_DECODE_CHECKS_H

#include <math.h>
#include <stddef.h>

#include "api_launch_checks.h"

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

/* Whether the largest element offset of a cache (shape and strides as given) is below 2^31: the host's
 * condition for the 32-bit row lookup (include/aotk.h). */
static bool cache_offsets_fit_int32(const aotk_tensor *t) {
  long double last = 0;
  for (int i = 0; i < t->rank; i++) {
    if (t->shape[i] > 0) last += (long double)(t->shape[i] - 1) * (long double)t->strides[i];
  }
  return last < 2147483647.0L;
}

/* The decoding row for a cache of pages of `page_size` keys (0: contiguous), on target `arch`, for the
 * group's `group_rows` (G * seqlen_q): the row of the problem's dtype and (padded) head dims whose tile
 * those rows call for, in the family the cache calls for: attn_decode for a contiguous cache;
 * attn_decode_paged_blocks (one page lookup per key block) when the page size is a multiple of that
 * family's row's block_n, so that no block of keys straddles two pages; else attn_decode_paged32 (a
 * lookup per key row in 32-bit offsets) where `offset32` (every element offset of both caches below 2^31)
 * and the build has the row, else attn_decode_paged. */
static const aotk__kernel_entry *expected_decode_row(const decode_shape *s, int arch, int64_t page_size,
                                                     int64_t group_rows, bool offset32) {
  if (page_size == 0) {
    return expected_row(AOTK__FAMILY_ATTN_DECODE, arch, s->dtype, s->head_dim_qk, s->head_dim_v, 1, 0, group_rows);
  }
  const aotk__kernel_entry *blocks = expected_row(AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS, arch, s->dtype,
                                                  s->head_dim_qk, s->head_dim_v, 1, 0, group_rows);
  if (blocks != NULL && page_size % blocks->block_n == 0) return blocks;
  const aotk__kernel_entry *rows32 = offset32 ? expected_row(AOTK__FAMILY_ATTN_DECODE_PAGED32, arch, s->dtype,
                                                             s->head_dim_qk, s->head_dim_v, 1, 0, group_rows)
                                              : NULL;
  if (rows32 != NULL) return rows32;
  return expected_row(AOTK__FAMILY_ATTN_DECODE_PAGED, arch, s->dtype, s->head_dim_qk, s->head_dim_v, 1, 0, group_rows);
}

/* The short-split tile (codegen/aotk_catalog.py's DECODE_SHORT_SPLIT, its size key): it replaces `row` (the
 * tuning rule's) where that is the 16-row tile, the call splits with no split count of the caller's and no
 * packed queries, and the cache plans for at most 8192 keys (max_seqlen_k, or the capacity); only where the
 * build has it (sm_90, head dims up to 128). Its family by expected_decode_row's rule for its own block.
 * `splits` is the call's count (the short tile's rule: the test works it by hand). */
#define DECODE_SHORT_SPLIT_KEY (1 << 30)
static const aotk__kernel_entry *expected_short_split_row(const aotk__kernel_entry *row, const decode_shape *s,
                                                          int arch, const aotk_decode_params *params, int64_t splits,
                                                          int64_t capacity, int64_t page_size, bool offset32) {
  const int64_t size_hint =
      params->max_seqlen_k > 0 && params->max_seqlen_k < capacity ? params->max_seqlen_k : capacity;
  if (row == NULL || row->block_m != 16 || splits <= 1 || params->num_splits != 0 ||
      params->cu_seqlens_q.data != NULL || size_hint > 8192) {
    return row;
  }
  const aotk__kernel_entry *short_row = expected_decode_row(s, arch, page_size, DECODE_SHORT_SPLIT_KEY, offset32);
  return short_row != NULL && short_row->min_seqlen == DECODE_SHORT_SPLIT_KEY ? short_row : row;
}

/* The paged families' 2-stage row (codegen/aotk_catalog.py's DECODE_PAGED_SHALLOW, its size key): it replaces
 * `row` where that is the tuned tile (not the short-split one), the cache is paged and the grid holds more
 * programs than the fake GPU's SMs (FAKE_MULTIPROCESSORS); only where the build has it (sm_90, head dims up to
 * 128), in the same family with the same tile. */
#define DECODE_PAGED_SHALLOW_KEY (1 << 29)
static const aotk__kernel_entry *expected_shallow_row(const aotk__kernel_entry *row, const decode_shape *s, int arch,
                                                      int64_t page_size, int64_t grid, bool offset32) {
  if (row == NULL || page_size == 0 || row->min_seqlen == DECODE_SHORT_SPLIT_KEY || grid <= FAKE_MULTIPROCESSORS) {
    return row;
  }
  const aotk__kernel_entry *shallow = expected_decode_row(s, arch, page_size, DECODE_PAGED_SHALLOW_KEY, offset32);
  return shallow != NULL && shallow->min_seqlen == DECODE_PAGED_SHALLOW_KEY && shallow->family == row->family &&
                 shallow->block_m == row->block_m && shallow->block_n == row->block_n
             ? shallow
             : row;
}

/* What a decoding call's query reports and its call launches, worked out from the header: the decoding
 * kernel is expected_decode_row's, on a grid of batch * heads_kv * ceil(G * seqlen_q / block_m) * splits
 * programs; with `splits` > 1 the fp32 partials lie in the workspace and the merge follows, one program
 * per block_m of the batch * seqlen_q * heads_q rows and block_n of the head_dim_v columns (whole rows
 * only past the grid limit, check_merge's rule: the partials are not the outputs). With k_new and v_new the appending kernel runs first
 * (check_append_launch), unless the decoding kernel appends itself (one row chunk a group, at most 16
 * new tokens, a contiguous cache or pages of whole key blocks: then it gets k_new, v_new, their strides
 * and FLAG_FUSED_APPEND), and the decoding kernel is told seqlen_new; the split and the workspace do not
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
  const bool paged_cache = params->block_table.data != NULL;
  const int64_t cache_capacity =
      paged_cache ? params->block_table.shape[1] * params->k_cache.shape[1] : params->k_cache.shape[1];
  const bool offset32 = cache_offsets_fit_int32(&params->k_cache) && cache_offsets_fit_int32(&params->v_cache);
  const aotk__kernel_entry *tuned = expected_short_split_row(
      expected_decode_row(s, g->arch, paged_cache ? params->k_cache.shape[1] : 0, group_rows, offset32), s, g->arch,
      params, splits, cache_capacity, paged_cache ? params->k_cache.shape[1] : 0, offset32);
  const aotk__kernel_entry *row =
      tuned == NULL ? NULL
                    : expected_shallow_row(tuned, s, g->arch, paged_cache ? params->k_cache.shape[1] : 0,
                                           s->batch * s->heads_kv * ceil_div(group_rows, tuned->block_m) * splits,
                                           offset32);
  const aotk__kernel_entry *merge =
      merge_row_for(g->arch, 1, splits, s->batch * s->seqlen_q * s->heads_q, s->head_dim_v);
  CHECK_MSG(row != NULL && merge != NULL, "%s: no sm_%d decoding or attn_merge row", what, g->arch);
  if (row == NULL || merge == NULL) return;
  const bool append = params->k_new.data != NULL, varlen = params->cu_seqlens_q.data != NULL;
  /* cache_leftpad, when the caller's struct holds it (the struct_size of the struct before it does not). */
  const bool leftpad = params->struct_size > offsetof(aotk_decode_params, cache_leftpad) &&
                       params->cache_leftpad.data != NULL;
  const int64_t seqlen_new = append ? params->k_new.shape[1] : 0;
  const int64_t row_chunks = ceil_div(group_rows, row->block_m);
  /* The decoding kernel appends itself with one row chunk a group, at most 16 new tokens and a cache
   * that is contiguous or paged in whole key blocks (not attn_decode_paged's per-row lookup). */
  const bool fused = append && !varlen && row_chunks == 1 && seqlen_new <= 16 &&
                     row->family != AOTK__FAMILY_ATTN_DECODE_PAGED && row->family != AOTK__FAMILY_ATTN_DECODE_PAGED32;
  const bool separate = append && !fused;
  const int launches = 1 + split + separate, first = separate; /* the decoding launch's index */
  const aotk__kernel_entry *append_row =
      expected_row(AOTK__FAMILY_ATTN_CACHE_APPEND, g->arch, s->dtype, s->head_dim_qk, s->head_dim_v, 1, 0, 1);
  CHECK_MSG(!separate || append_row != NULL, "%s: no sm_%d attn_cache_append row", what, g->arch);
  if (separate && append_row == NULL) return;
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
      (append ? AOTK_FEATURE_APPEND_KV : 0) | (varlen ? AOTK_FEATURE_VARLEN : 0) |
      (leftpad ? AOTK_FEATURE_LEFTPAD_KV : 0);
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
  if (separate) check_append_launch(what, &fake.launch_log[0], params, s, append_row, capacity);
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
  check_pointer(what, kernel, launch, DECODE_CACHE_LEFTPAD, leftpad ? params->cache_leftpad.data : NULL,
                "cache_leftpad");
  check_pointer(what, kernel, launch, DECODE_ALIBI_SLOPES, params->alibi_slopes.data, "alibi_slopes");
  check_pointer(what, kernel, launch, DECODE_SINKS, params->sinks.data, "sinks");
  check_pointer(what, kernel, launch, DECODE_K_NEW, fused ? params->k_new.data : NULL, "k_new");
  check_pointer(what, kernel, launch, DECODE_V_NEW, fused ? params->v_new.data : NULL, "v_new");
  const aotk_tensor *news[2] = {&params->k_new, &params->v_new};
  for (int t = 0; t < 2; t++) {
    for (int d = 0; d < 3; d++) {
      char name[48];
      snprintf(name, sizeof name, "%s.strides[%d]", t == 0 ? "k_new" : "v_new", d);
      check_i64(what, kernel, launch, DECODE_STRIDE_NB + 3 * t + d, fused ? news[t]->strides[d] : 0, name);
    }
  }
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
                        (split ? DECODE_FLAG_SPLIT : 0) | (varlen ? FLAG_VARLEN : 0) |
                        (fused ? DECODE_FLAG_FUSED_APPEND : 0) | (leftpad ? DECODE_FLAG_LEFTPAD : 0);
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
   * [split, batch, heads_q, seqlen_q], and writes out and lse in the caller's layout; the sinks join here.
   * Packed queries: partial rows [request, max_seqlen_q], out [total_q, heads_q, dv] and lse [heads_q,
   * total_q] with batch strides 0, each request's first row read from CuSeqlensQ (FLAG_VARLEN). */
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
  check_pointer(what, kernel, launch, MERGE_CU_SEQLENS_Q, varlen ? params->cu_seqlens_q.data : NULL, "cu_seqlens_q");
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
  const int64_t out_strides[3] = {varlen ? 0 : params->out.strides[0], params->out.strides[varlen ? 0 : 1],
                                  params->out.strides[varlen ? 1 : 2]};
  const int64_t lse_strides[3] = {varlen ? 0 : params->lse.strides[0], params->lse.strides[varlen ? 0 : 1],
                                  varlen ? params->lse.strides[1] : params->lse.strides[2]};
  for (int d = 0; d < 3; d++) {
    check_i64(what, kernel, launch, MERGE_STRIDE_OB + d, out_strides[d], "out stride");
    if (lse) check_i64(what, kernel, launch, MERGE_STRIDE_LB + d, lse_strides[d], "lse stride");
  }
  check_int(what, kernel, launch, MERGE_NUM_PARTIALS, splits, "num_partials");
  check_int(what, kernel, launch, MERGE_SEQLEN_Q, s->seqlen_q, "seqlen_q");
  check_int(what, kernel, launch, MERGE_HEADS, s->heads_q, "heads");
  check_int(what, kernel, launch, MERGE_NUM_ROWS, rows, "num_rows");
  check_int(what, kernel, launch, MERGE_HEAD_DIM8, s->head_dim_v / 8, "head_dim8");
  const int32_t merge_flags = merge_dtype_flags(AOTK_DTYPE_FLOAT32, s->dtype) | (lse ? FLAG_WRITE_LSE : 0) |
                              (params->sinks.data != NULL ? FLAG_SINKS : 0) | (varlen ? FLAG_VARLEN : 0) |
                              (merge_whole_rows ? MERGE_FLAG_WHOLE_ROWS : 0);
  CHECK_MSG(arg_i32(launch, MERGE_FLAGS) == merge_flags, "%s: attn_merge's flags %#x, expected %#x", what,
            (unsigned)arg_i32(launch, MERGE_FLAGS), (unsigned)merge_flags);
}

#endif /* API_DECODE_CHECKS_H */
