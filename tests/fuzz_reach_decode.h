/*
 * How far the decoding, merge and cache-append kernels reach (tests/fuzz_api.c): each launch's packed
 * arguments against the caller's problem, and every byte range each pointer argument can reach.
 */
#ifndef FUZZ_REACH_DECODE_H
#define FUZZ_REACH_DECODE_H

#include "fuzz_reach.h"


/* The appending's reach, for attn_cache_append and for attn_decode when it appends itself: k_new's and
 * v_new's rows [batch, seqlen_new, heads_kv, d] read, and the cache rows written inside the caller's
 * caches (rows 0 .. capacity - 1 of each request, or of any page the caller described). The argument
 * indices are the kernel's: KNew then VNew, K then V, and the six strides of each pair in order. */
static void check_append_reach(const aotk__kernel_entry *e, void **a, const aotk_decode_params *d, int k_new, int k,
                               int stride_nb, int stride_kp, int64_t batch, int64_t seqlen_new, int64_t heads_kv,
                               bool paged, int64_t capacity, int64_t page_size, int64_t head_dim_qk,
                               int64_t head_dim_v) {
  const axis columns_qk = {0, head_dim_qk, 1}, columns_v = {0, head_dim_v, 1};
  const int nb = stride_nb, kp = stride_kp;
  const axis k_new_axes[] = {{0, batch, arg_i64(a, nb)}, {0, seqlen_new, arg_i64(a, nb + 1)},
                             {0, heads_kv, arg_i64(a, nb + 2)}, columns_qk};
  const axis v_new_axes[] = {{0, batch, arg_i64(a, nb + 3)}, {0, seqlen_new, arg_i64(a, nb + 4)},
                             {0, heads_kv, arg_i64(a, nb + 5)}, columns_v};
  check_box(arg_pointer(a, k_new), k_new_axes, 4, 2, e->function_name, "KNew");
  check_box(arg_pointer(a, k_new + 1), v_new_axes, 4, 2, e->function_name, "VNew");
  const int64_t pages_k = paged ? d->k_cache.shape[0] : batch, pages_v = paged ? d->v_cache.shape[0] : batch;
  const int64_t cache_rows = paged ? (page_size < capacity ? page_size : capacity) : capacity;
  const axis k_axes[] = {{0, pages_k, arg_i64(a, kp)}, {0, cache_rows, arg_i64(a, kp + 1)},
                         {0, heads_kv, arg_i64(a, kp + 2)}, columns_qk};
  const axis v_axes[] = {{0, pages_v, arg_i64(a, kp + 3)}, {0, cache_rows, arg_i64(a, kp + 4)},
                         {0, heads_kv, arg_i64(a, kp + 5)}, columns_v};
  check_box_in(arg_pointer(a, k), k_axes, 4, 2, e->function_name, "K (written)", &d->k_cache);
  check_box_in(arg_pointer(a, k + 1), v_axes, 4, 2, e->function_name, "V (written)", &d->v_cache);
}

/* attn_decode(Q, K, V, Out, Lse, BlockTable, CacheSeqlens, CuSeqlensQ, CacheLeftpad, AlibiSlopes, Sinks, OutPartial,
 * LsePartial, KNew, VNew, 18 int64 q/k/v/out/k_new/v_new strides, stride_lb, stride_lh, stride_tb,
 * stride_ab, 15 int32 sizes and flags (seqlen_new last), 3 floats), its grid (split fastest, then row
 * chunk, kv head, request). With FLAG_VARLEN, q and out are packed [total_q, heads_q, d] (batch strides
 * 0) and lse [heads_q, total_q], request b's rows starting at CuSeqlensQ[b], read on the device. Three families share the function
 * (a constexpr PAGE_MODE apart: attn_decode, attn_decode_paged, attn_decode_paged_blocks); the fake
 * driver's handle names the row that ran (by its image), and so does the query's announcement. */
static void check_decode_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "ppppppppppppppplllllllllllllllllllllliiiiiiiiiiiiiiifff") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_decode is out of date", e->param_kinds);
  const aotk_decode_params *d = seen.decode;
  EXPECT(d != NULL, "launched by a call other than aotk_attn_decode");
  enum { Q, K, V, OUT, LSE, TABLE, SEQLENS, CU_SEQLENS_Q, LEFTPAD, ALIBI, SINKS, OUT_PARTIAL, LSE_PARTIAL, K_NEW,
         V_NEW };
  enum { QB = 15, QS, QH, KP, KS, KH, VP, VS, VH, OB, OS, OH, NB, NS, NH, WB, WS, WH, LB, LH, TB, AB };
  const int64_t batch = arg_i32(a, 37), seqlen_q = arg_i32(a, 38), heads_q = arg_i32(a, 39);
  const int64_t group_size = arg_i32(a, 40), capacity = arg_i32(a, 41), page_size = arg_i32(a, 42);
  const int64_t num_splits = arg_i32(a, 43), split_keys = arg_i32(a, 44), row_chunks = arg_i32(a, 45);
  const int64_t head_dim_qk = 8 * (int64_t)arg_i32(a, 46), head_dim_v = 8 * (int64_t)arg_i32(a, 47);
  const int32_t flags = arg_i32(a, 50);
  const bool paged = flags & DECODE_PAGED, split = flags & DECODE_SPLIT, varlen = flags & DECODE_VARLEN;
  /* Appending (include/aotk.h): the new keys are written first, by attn_cache_append launched before,
   * or by this kernel itself (DECODE_FUSED_APPEND: one row chunk a group and at most 16 new tokens), and
   * the decoding kernel attends to seqlen_new more keys per request. */
  const bool append = d->k_new.data != NULL, fused = flags & DECODE_FUSED_APPEND;
  const int64_t seqlen_new = arg_i32(a, 51);
  EXPECT(seqlen_new == (append ? d->k_new.shape[1] : 0), "seqlen_new = %lld for k_new of %lld tokens (data %p)",
         (long long)seqlen_new, (long long)d->k_new.shape[1], d->k_new.data);
  /* (Not the per-row page lookup: its kernel is compiled without the appending code.) */
  EXPECT(!fused || (append && !varlen && row_chunks == 1 && seqlen_new <= 16 &&
                    e->family != AOTK__FAMILY_ATTN_DECODE_PAGED && e->family != AOTK__FAMILY_ATTN_DECODE_PAGED32),
         "fused appending with k_new %p, flags %#x, %lld row chunks, %lld new tokens, family %d", d->k_new.data,
         (unsigned)flags, (long long)row_chunks, (long long)seqlen_new, e->family);
  /* The paged families' 2-stage row (size key 2^29, codegen/aotk_catalog.py's DECODE_PAGED_SHALLOW) serves
   * paged caches only, on sm_90. */
  EXPECT(e->min_seqlen != 1 << 29 || ((flags & DECODE_PAGED) && e->arch == 90),
         "%s (the paged families' 2-stage row) for flags %#x", e->name, (unsigned)flags);
  EXPECT(seen.decode_launches == 0 && seen.append_launches == (append && !fused ? 1 : 0),
         "launched after %d decoding and %d appending launches of the same call (fused %d)", seen.decode_launches,
         seen.append_launches, (int)fused);
  seen.decode_launches++;
  seen.decode_fused_append = fused;
  /* The new keys and values: the caller's, with their strides, when fused; else none. */
  EXPECT(arg_pointer(a, K_NEW) == (uintptr_t)(fused ? d->k_new.data : NULL) &&
             arg_pointer(a, V_NEW) == (uintptr_t)(fused ? d->v_new.data : NULL),
         "KNew %#lx, VNew %#lx (fused %d)", (unsigned long)arg_pointer(a, K_NEW), (unsigned long)arg_pointer(a, V_NEW),
         (int)fused);
  const aotk_tensor *news[2] = {&d->k_new, &d->v_new};
  for (int t = 0; t < 2; t++) {
    for (int i = 0; i < 3; i++) {
      const int64_t expected = fused ? news[t]->strides[i] : 0;
      EXPECT(arg_i64(a, NB + 3 * t + i) == expected, "stride argument %d = %lld, expected %lld", NB + 3 * t + i,
             (long long)arg_i64(a, NB + 3 * t + i), (long long)expected);
    }
  }

  /* The arguments describe the caller's problem (a size cut to int32 would not): dense q [batch,
   * seqlen_q, heads_q, d], or packed q [total_q, heads_q, d] with batch = cu_seqlens_q.shape[0] - 1 and
   * seqlen_q = max_seqlen_q, unsplit, without appending. */
  EXPECT(varlen == (d->cu_seqlens_q.data != NULL) &&
             arg_pointer(a, CU_SEQLENS_Q) == (uintptr_t)(varlen ? d->cu_seqlens_q.data : NULL),
         "flags = %#x, CuSeqlensQ = %#lx for cu_seqlens_q.data %p", (unsigned)flags,
         (unsigned long)arg_pointer(a, CU_SEQLENS_Q), d->cu_seqlens_q.data);
  if (varlen) {
    EXPECT(batch == d->cu_seqlens_q.shape[0] - 1 && seqlen_q == d->max_seqlen_q && heads_q == d->q.shape[1],
           "batch, seqlen_q, heads_q = %lld, %lld, %lld for cu_seqlens_q of %lld, max_seqlen_q %d, q of %lld heads",
           (long long)batch, (long long)seqlen_q, (long long)heads_q, (long long)d->cu_seqlens_q.shape[0],
           (int)d->max_seqlen_q, (long long)d->q.shape[1]);
    EXPECT(seqlen_q >= 1 && !append, "max_seqlen_q %lld, appending %d", (long long)seqlen_q, (int)append);
  } else {
    EXPECT(batch == d->q.shape[0] && seqlen_q == d->q.shape[1] && heads_q == d->q.shape[2],
           "batch, seqlen_q, heads_q = %lld, %lld, %lld for q of shape [%lld, %lld, %lld, %lld]", (long long)batch,
           (long long)seqlen_q, (long long)heads_q, (long long)d->q.shape[0], (long long)d->q.shape[1],
           (long long)d->q.shape[2], (long long)d->q.shape[3]);
  }
  EXPECT(group_size >= 1 && heads_q % group_size == 0 && heads_q / group_size == d->k_cache.shape[2],
         "group_size = %lld with heads_q = %lld and %lld kv heads", (long long)group_size, (long long)heads_q,
         (long long)d->k_cache.shape[2]);
  const int64_t q_head_dim = d->q.shape[varlen ? 2 : 3];
  EXPECT(head_dim_qk == q_head_dim && head_dim_v == d->v_cache.shape[3], "head dims %lld, %lld for %lld, %lld",
         (long long)head_dim_qk, (long long)head_dim_v, (long long)q_head_dim, (long long)d->v_cache.shape[3]);
  EXPECT(paged == (d->block_table.data != NULL), "flags = %#x", (unsigned)flags);
  const __int128 expected_capacity =
      paged ? (__int128)d->block_table.shape[1] * d->k_cache.shape[1] : (__int128)d->k_cache.shape[1];
  EXPECT(capacity == expected_capacity && (!paged || page_size == d->k_cache.shape[1]),
         "capacity = %lld, page_size = %lld for a cache of %lld rows per page or request", (long long)capacity,
         (long long)page_size, (long long)d->k_cache.shape[1]);
  /* The splits' key ranges start at split * split_keys in int32. */
  EXPECT(num_splits >= 1 && num_splits <= AOTK_DECODE_MAX_SPLITS && split == (num_splits > 1) && split_keys >= 1 &&
             (num_splits - 1) * split_keys <= (int64_t)INT32_MAX,
         "num_splits = %lld, split_keys = %lld, flags = %#x, capacity %lld", (long long)num_splits,
         (long long)split_keys, (unsigned)flags, (long long)capacity);
  /* Every query row of a group in some program, no program past the last request, and the int32 row
   * numbers (chunk * BLOCK_M + i < group_size * seqlen_q, at most row_chunks * BLOCK_M - 1) free of
   * overflow. */
  int64_t block_m_smallest, block_m_largest;
  entry_block_m(e, &block_m_smallest, &block_m_largest);
  const int64_t group_rows = group_size * seqlen_q;
  EXPECT(row_chunks >= 1 && row_chunks * block_m_largest >= group_rows &&
             row_chunks * block_m_largest - 1 <= (int64_t)INT32_MAX,
         "row_chunks = %lld for %lld rows per group", (long long)row_chunks, (long long)group_rows);
  const int64_t heads_kv = heads_q / group_size;
  EXPECT((__int128)grid == (__int128)batch * heads_kv * row_chunks * num_splits,
         "a grid of %u programs for %lld requests x %lld kv heads x %lld row chunks x %lld splits", grid,
         (long long)batch, (long long)heads_kv, (long long)row_chunks, (long long)num_splits);
  if (seen.announced) {
    const aotk_kernel_info *info = &seen.announced_info;
    EXPECT(info->grid == (int64_t)grid && info->num_splits == num_splits &&
               row_chunks == (group_rows + info->block_m - 1) / info->block_m,
           "aotk_decode_query announced a grid of %lld with %d splits and block_m %d; launched %u, %lld splits, %lld "
           "row chunks",
           (long long)info->grid, (int)info->num_splits, (int)info->block_m, grid, (long long)num_splits,
           (long long)row_chunks);
    /* The family follows the cache. One page lookup per key block (PAGE_MODE 2) reads the block's keys
     * as rows start_n % page_size + 0 .. BLOCK_N - 1 of one page: inside it only when the page size is
     * a multiple of BLOCK_N (start_n is one: the loop starts at a multiple and steps by BLOCK_N). */
    const aotk__kernel_entry *ran = announced_row(info);
    EXPECT(ran != NULL && strcmp(ran->function_name, e->function_name) == 0,
           "aotk_decode_query announced %s on sm_%d, no attn_decode row", info->kernel_name, (int)info->arch);
    EXPECT(paged ? ran->family == AOTK__FAMILY_ATTN_DECODE_PAGED || ran->family == AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS ||
                       ran->family == AOTK__FAMILY_ATTN_DECODE_PAGED32
                 : ran->family == AOTK__FAMILY_ATTN_DECODE,
           "%s (family %d) for a %s cache", ran->name, ran->family, paged ? "paged" : "contiguous");
    EXPECT(ran->family != AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS || page_size % ran->block_n == 0,
           "%s looks pages up per block of %d keys; pages of %lld keys", ran->name, ran->block_n,
           (long long)page_size);
    /* The 32-bit row lookup only where every element offset of both caches is below 2^31. */
    if (ran->family == AOTK__FAMILY_ATTN_DECODE_PAGED32) {
      const aotk_tensor *caches[2] = {&d->k_cache, &d->v_cache};
      for (int c = 0; c < 2; c++) {
        long double last = 0;
        for (int i = 0; i < caches[c]->rank; i++) {
          last += (long double)(caches[c]->shape[i] - 1) * (long double)caches[c]->strides[i];
        }
        EXPECT(last < 2147483647.0L, "%s (32-bit offsets) over a %s whose last element is at offset %.0Lf", ran->name,
               c == 0 ? "k_cache" : "v_cache", last);
      }
    }
  }
  /* What the aligned-only kernel assumes: 16-byte pointers, strides multiples of 16 elements. */
  static const int aligned_pointers[] = {Q, K, V, OUT, OUT_PARTIAL, LSE_PARTIAL, K_NEW, V_NEW};
  for (size_t i = 0; i < sizeof aligned_pointers / sizeof aligned_pointers[0]; i++) {
    EXPECT(arg_pointer(a, aligned_pointers[i]) % 16 == 0, "pointer argument %d = %#lx", aligned_pointers[i],
           (unsigned long)arg_pointer(a, aligned_pointers[i]));
  }
  for (int i = QB; i <= WH; i++) {
    EXPECT(arg_i64(a, i) % 16 == 0, "stride argument %d = %lld", i, (long long)arg_i64(a, i));
  }

  /* The reach. Rows (request, token, query head): all of them, the grid being whole. Keys: rows
   * 0 .. capacity - 1 of the request (contiguous), or rows 0 .. page_size - 1 of any page the caller
   * described (paged: the page ids are device data, valid by contract; per block, the rows of one page
   * as above). The block table: entries key / page_size of the keys below the capacity, whether looked
   * up per key row or once per block (at its first key, start_n < the request's length <= capacity,
   * an unmasked load). Packed queries: request b's
   * tokens are rows cu_seqlens_q[b] + i for i < min(cu_seqlens_q[b + 1] - cu_seqlens_q[b], max_seqlen_q),
   * device data the header asks to be offsets into q (0 <= cu_seqlens_q[b] <= cu_seqlens_q[b + 1] <=
   * total_q), so by contract every token row lies in 0 .. total_q - 1 (q's own rows, which out and lse
   * must match); the host cannot see more, so that whole box is what must fit. */
  const int64_t rows = batch * seqlen_q * heads_q; /* under 2^38: the grid is whole, 2^32 programs at most */
  const axis columns_qk = {0, head_dim_qk, 1}, columns_v = {0, head_dim_v, 1};
  const int64_t total_q = d->q.shape[0];
  if (varlen) {
    const bool lse = flags & DECODE_WRITE_LSE;
    EXPECT(arg_i64(a, QB) == 0 && arg_i64(a, OB) == 0 && arg_i64(a, LB) == 0 && arg_i64(a, QS) == d->q.strides[0] &&
               arg_i64(a, QH) == d->q.strides[1] && arg_i64(a, OS) == d->out.strides[0] &&
               arg_i64(a, OH) == d->out.strides[1] && (!lse || arg_i64(a, LH) == d->lse.strides[0]),
           "packed strides q (%lld, %lld, %lld), out (%lld, %lld, %lld), lse (%lld, %lld)", (long long)arg_i64(a, QB),
           (long long)arg_i64(a, QS), (long long)arg_i64(a, QH), (long long)arg_i64(a, OB), (long long)arg_i64(a, OS),
           (long long)arg_i64(a, OH), (long long)arg_i64(a, LB), (long long)arg_i64(a, LH));
    const axis cu_axes[] = {{0, batch + 1, 1}};
    check_box(arg_pointer(a, CU_SEQLENS_Q), cu_axes, 1, 4, e->function_name, "CuSeqlensQ");
    const axis q_axes[] = {{0, total_q, arg_i64(a, QS)}, {0, heads_q, arg_i64(a, QH)}, columns_qk};
    check_box(arg_pointer(a, Q), q_axes, 3, 2, e->function_name, "Q (packed)");
  } else {
    check_rows(arg_pointer(a, Q), rows, seqlen_q, heads_q, arg_i64(a, QB), arg_i64(a, QS), arg_i64(a, QH),
               &columns_qk, 1, 2, e->function_name, "Q");
  }
  const int64_t pages_k = paged ? d->k_cache.shape[0] : batch, pages_v = paged ? d->v_cache.shape[0] : batch;
  const int64_t cache_rows = paged ? (page_size < capacity ? page_size : capacity) : capacity;
  const axis k_axes[] = {{0, pages_k, arg_i64(a, KP)}, {0, cache_rows, arg_i64(a, KS)}, {0, heads_kv, arg_i64(a, KH)},
                         columns_qk};
  const axis v_axes[] = {{0, pages_v, arg_i64(a, VP)}, {0, cache_rows, arg_i64(a, VS)}, {0, heads_kv, arg_i64(a, VH)},
                         columns_v};
  check_box(arg_pointer(a, K), k_axes, 4, 2, e->function_name, "K");
  check_box(arg_pointer(a, V), v_axes, 4, 2, e->function_name, "V");
  /* Appending itself, it also writes rows of that box (the new tokens' positions, through the same page
   * lookup), which must lie in the caller's caches, as attn_cache_append's writes. */
  if (fused) {
    check_append_reach(e, a, d, K_NEW, K, NB, KP, batch, seqlen_new, heads_kv, paged, capacity, page_size,
                       head_dim_qk, head_dim_v);
  }
  if (paged) {
    EXPECT(page_size >= 1, "page_size = %lld", (long long)page_size);
    const axis table_axes[] = {{0, batch, arg_i64(a, TB)}, {0, capacity >= 1 ? (capacity - 1) / page_size + 1 : 0, 1}};
    check_box(arg_pointer(a, TABLE), table_axes, 2, 4, e->function_name, "BlockTable");
  }
  const axis seqlens_axes[] = {{0, batch, 1}};
  check_box(arg_pointer(a, SEQLENS), seqlens_axes, 1, 4, e->function_name, "CacheSeqlens");
  /* Left padding: the caller's cache_leftpad (when its struct_size holds the field), int32 [batch], read
   * only under the flag. */
  const bool leftpad = flags & DECODE_LEFTPAD;
  const bool leftpad_given = d->struct_size > offsetof(aotk_decode_params, cache_leftpad) &&
                             d->cache_leftpad.data != NULL;
  EXPECT(leftpad == leftpad_given && arg_pointer(a, LEFTPAD) == (uintptr_t)(leftpad ? d->cache_leftpad.data : NULL),
         "flags = %#x, CacheLeftpad = %#lx for cache_leftpad.data %p (struct_size %zu)", (unsigned)flags,
         (unsigned long)arg_pointer(a, LEFTPAD), d->cache_leftpad.data, d->struct_size);
  if (leftpad) check_box(arg_pointer(a, LEFTPAD), seqlens_axes, 1, 4, e->function_name, "CacheLeftpad");
  if (flags & DECODE_ALIBI) {
    const axis alibi_axes[] = {{0, batch, arg_i64(a, AB)}, {0, heads_q, 1}};
    check_box(arg_pointer(a, ALIBI), alibi_axes, 2, 4, e->function_name, "AlibiSlopes");
  }
  if (split) {
    /* The partials: rows [split, request, token, head] padded to 16 floats, then their LSEs, apart. */
    const int64_t padded = (head_dim_v / 8 + 1) / 2 * 16;
    const axis partial_axes[] = {{0, num_splits * rows, padded}, columns_v}, lse_axes[] = {{0, num_splits * rows, 1}};
    check_box(arg_pointer(a, OUT_PARTIAL), partial_axes, 2, 4, e->function_name, "OutPartial");
    check_box(arg_pointer(a, LSE_PARTIAL), lse_axes, 1, 4, e->function_name, "LsePartial");
    const __int128 partial_end = (__int128)arg_pointer(a, OUT_PARTIAL) +
                                 ((__int128)(num_splits * rows - 1) * padded + head_dim_v) * 4;
    const __int128 lse_end = (__int128)arg_pointer(a, LSE_PARTIAL) + (__int128)(num_splits * rows) * 4;
    EXPECT(partial_end <= arg_pointer(a, LSE_PARTIAL) || lse_end <= arg_pointer(a, OUT_PARTIAL),
           "the partial outputs at %#lx and their LSEs at %#lx overlap", (unsigned long)arg_pointer(a, OUT_PARTIAL),
           (unsigned long)arg_pointer(a, LSE_PARTIAL));
    seen.decode_splits = num_splits;
  } else if (varlen) {
    const axis out_axes[] = {{0, total_q, arg_i64(a, OS)}, {0, heads_q, arg_i64(a, OH)}, columns_v};
    check_box(arg_pointer(a, OUT), out_axes, 3, 2, e->function_name, "Out (packed)");
    if (flags & DECODE_WRITE_LSE) {
      const axis lse_axes[] = {{0, heads_q, arg_i64(a, LH)}, {0, total_q, 1}};
      check_box(arg_pointer(a, LSE), lse_axes, 2, 4, e->function_name, "Lse (packed)");
    }
    if (flags & DECODE_SINKS) {
      const axis sink_axes[] = {{0, heads_q, 1}};
      check_box(arg_pointer(a, SINKS), sink_axes, 1, 4, e->function_name, "Sinks");
    }
  } else {
    check_rows(arg_pointer(a, OUT), rows, seqlen_q, heads_q, arg_i64(a, OB), arg_i64(a, OS), arg_i64(a, OH),
               &columns_v, 1, 2, e->function_name, "Out");
    if (flags & DECODE_WRITE_LSE) {
      check_rows(arg_pointer(a, LSE), rows, seqlen_q, heads_q, arg_i64(a, LB), 1, arg_i64(a, LH), NULL, 0, 4, e->function_name,
                 "Lse");
    }
    if (flags & DECODE_SINKS) {
      const axis sink_axes[] = {{0, heads_q, 1}};
      check_box(arg_pointer(a, SINKS), sink_axes, 1, 4, e->function_name, "Sinks");
    }
  }
}

/* attn_merge(OutPartial32, OutPartial16, OutPartialBF16, LsePartial, Out32, Out16, OutBF16, Lse, Sinks,
 * CuSeqlensQ, 14 int64 strides, 6 int32), one program per BLOCK_M rows and BLOCK_N head-dim columns (the
 * column chunk fastest), or per BLOCK_M rows walking every chunk with FLAG_WHOLE_ROWS; from aotk_attn_merge
 * or after a split decoding launch. After a packed decoding call (DECODE_VARLEN) the partials keep
 * [request, max_seqlen_q] rows and out and lse are packed: token t of request b is their row
 * CuSeqlensQ[b] + t, the batch strides 0 (the rows written are bounded by the packed tensors). */
static void check_merge_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "pppppppppplllllllllllllliiiiii") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_merge is out of date", e->param_kinds);
  enum { LSE_PARTIAL = 3, LSE = 7, SINKS = 8, CU_SEQLENS_Q = 9 };
  enum { PP = 10, PB, PS, PH, LPP, LPB, LPH, LPS, OB, OS, OH, LB, LH, LS };
  const int64_t num_partials = arg_i32(a, 24), seqlen_q = arg_i32(a, 25), heads = arg_i32(a, 26);
  const int64_t num_rows = arg_i32(a, 27), head_dim = 8 * (int64_t)arg_i32(a, 28);
  const int32_t flags = arg_i32(a, 29);
  const bool packed = flags & DECODE_VARLEN;
  const int partial_slot = flags & MERGE_PARTIAL_FP16 ? 1 : flags & MERGE_PARTIAL_BF16 ? 2 : 0;
  const int out_slot = flags & MERGE_OUT_FP16 ? 1 : flags & MERGE_OUT_BF16 ? 2 : 0;
  static const aotk_dtype slot_dtypes[] = {AOTK_DTYPE_FLOAT32, AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};

  /* The caller's problem: aotk_attn_merge's params, or the decoding call's splits. */
  int64_t batch;
  aotk_dtype partial_dtype, out_dtype;
  if (seen.merge != NULL) {
    const aotk_tensor *parts = &seen.merge->out_partials;
    const int rank = parts->rank;
    batch = rank == 5 ? parts->shape[1] : 1;
    EXPECT(num_partials == parts->shape[0] && seqlen_q == parts->shape[rank - 3] && heads == parts->shape[rank - 2] &&
               head_dim == parts->shape[rank - 1],
           "num_partials, seqlen_q, heads, head_dim = %lld, %lld, %lld, %lld", (long long)num_partials,
           (long long)seqlen_q, (long long)heads, (long long)head_dim);
    partial_dtype = parts->dtype, out_dtype = seen.merge->out.dtype;
    EXPECT(!packed && arg_pointer(a, CU_SEQLENS_Q) == 0, "aotk_attn_merge launched with flags %#x, CuSeqlensQ %#lx",
           (unsigned)flags, (unsigned long)arg_pointer(a, CU_SEQLENS_Q));
  } else {
    const aotk_decode_params *d = seen.decode;
    EXPECT(d != NULL, "launched by a call other than aotk_attn_merge and aotk_attn_decode");
    EXPECT(seen.decode_launches == 1, "the merge of a decoding call after %d decoding launches", seen.decode_launches);
    const bool varlen = d->cu_seqlens_q.data != NULL;
    EXPECT(packed == varlen && arg_pointer(a, CU_SEQLENS_Q) == (uintptr_t)(varlen ? d->cu_seqlens_q.data : NULL),
           "flags %#x, CuSeqlensQ %#lx for cu_seqlens_q.data %p", (unsigned)flags,
           (unsigned long)arg_pointer(a, CU_SEQLENS_Q), d->cu_seqlens_q.data);
    batch = varlen ? d->cu_seqlens_q.shape[0] - 1 : d->q.shape[0];
    const int64_t q_seqlen = varlen ? d->max_seqlen_q : d->q.shape[1], q_heads = d->q.shape[varlen ? 1 : 2];
    EXPECT(num_partials == seen.decode_splits && seqlen_q == q_seqlen && heads == q_heads &&
               head_dim == d->v_cache.shape[3],
           "num_partials, seqlen_q, heads, head_dim = %lld, %lld, %lld, %lld after %lld splits", (long long)num_partials,
           (long long)seqlen_q, (long long)heads, (long long)head_dim, (long long)seen.decode_splits);
    partial_dtype = AOTK_DTYPE_FLOAT32, out_dtype = d->q.dtype;
  }
  EXPECT(head_dim <= (int64_t)INT32_MAX, "head_dim8 = %lld: the kernel's head_dim8 * 8 overflows int32",
         (long long)(head_dim / 8));
  EXPECT((__int128)num_rows == (__int128)batch * seqlen_q * heads, "num_rows = %lld for %lld x %lld x %lld", (long long)num_rows,
         (long long)batch, (long long)seqlen_q, (long long)heads);
  EXPECT(slot_dtypes[partial_slot] == partial_dtype && slot_dtypes[out_slot] == out_dtype, "flags = %#x",
         (unsigned)flags);
  /* The typed pointers: exactly the flags' one of each triple set. */
  for (int slot = 0; slot < 3; slot++) {
    EXPECT((arg_pointer(a, slot) != 0) == (slot == partial_slot), "partial pointer %d = %#lx with flags %#x", slot,
           (unsigned long)arg_pointer(a, slot), (unsigned)flags);
    EXPECT((arg_pointer(a, 4 + slot) != 0) == (slot == out_slot), "output pointer %d = %#lx with flags %#x", slot,
           (unsigned long)arg_pointer(a, 4 + slot), (unsigned)flags);
  }
  /* Program pid covers rows (pid / chunks) * BLOCK_M + i and columns (pid % chunks) * BLOCK_N + j, chunks
   * = ceil(head_dim / BLOCK_N), or rows pid * BLOCK_M + i and every chunk with FLAG_WHOLE_ROWS; rows and
   * columns past the ends are masked off. So the grid must be ceil(num_rows / BLOCK_M) programs times
   * the chunks (fewer leaves rows or columns unwritten), within the launch limit of 2^31 - 1, and no
   * int32 row or column number may wrap (a wrapped one is negative, passes the masks and indexes before
   * every tensor). BLOCK_M and BLOCK_N: some row's sharing the .entry, the announced row's for
   * aotk_attn_merge. */
  const bool whole_rows = flags & MERGE_WHOLE_ROWS;
  const aotk__kernel_entry *announced = seen.merge != NULL && seen.announced ? announced_row(&seen.announced_info) : NULL;
  if (seen.merge != NULL && seen.announced) {
    EXPECT(announced != NULL && strcmp(announced->function_name, e->function_name) == 0 &&
               seen.announced_info.grid == (int64_t)grid,
           "aotk_merge_query announced %s with a grid of %lld; launched %u", seen.announced_info.kernel_name,
           (long long)seen.announced_info.grid, grid);
  }
  bool grid_covers = false;
  for (int row = 0; row < aotk__kernel_count && !grid_covers; row++) {
    const aotk__kernel_entry *other = &aotk__kernel_table[row];
    if (strcmp(other->function_name, e->function_name) != 0 || (announced != NULL && other != announced)) continue;
    const int64_t row_blocks = (num_rows + other->block_m - 1) / other->block_m;
    const int64_t chunks = whole_rows ? 1 : (head_dim + other->block_n - 1) / other->block_n;
    grid_covers = (int64_t)grid == row_blocks * chunks && row_blocks * other->block_m - 1 <= (int64_t)INT32_MAX &&
                  head_dim + other->block_n - 1 <= (int64_t)INT32_MAX;
  }
  EXPECT(grid <= (unsigned)INT32_MAX && grid_covers,
         "a grid of %u programs for %lld rows x %lld columns (whole rows %d) fits no attn_merge tile", grid,
         (long long)num_rows, (long long)head_dim, (int)whole_rows);
  /* Written over the partials' LSEs (in place, aotk_attn_merge's contract), lse must be written by the one
   * program that reads a row's partial LSEs for every column chunk: else a row's chunk programs race, one
   * writing the lse another still reads. (Split-KV's own merge reads the workspace: an lse overlapping
   * it is the caller's error, include/aotk.h.) */
  if (seen.merge != NULL && (flags & DECODE_WRITE_LSE)) {
    const axis lse_extra[] = {{0, num_partials, arg_i64(a, LPP)}};
    __int128 lse_lo, lse_hi, parts_lo, parts_hi;
    if (rows_offsets(num_rows, seqlen_q, heads, arg_i64(a, LB), arg_i64(a, LS), arg_i64(a, LH), NULL, 0, &lse_lo,
                     &lse_hi) &&
        rows_offsets(num_rows, seqlen_q, heads, arg_i64(a, LPB), arg_i64(a, LPS), arg_i64(a, LPH), lse_extra, 1,
                     &parts_lo, &parts_hi)) {
      const __int128 lse_base = arg_pointer(a, LSE), parts_base = arg_pointer(a, LSE_PARTIAL);
      const bool overlap = lse_base + 4 * lse_lo < parts_base + 4 * (parts_hi + 1) &&
                           parts_base + 4 * parts_lo < lse_base + 4 * (lse_hi + 1);
      EXPECT(!overlap || whole_rows, "lse at %#lx over the partials' LSEs at %#lx, flags %#x",
             (unsigned long)arg_pointer(a, LSE), (unsigned long)arg_pointer(a, LSE_PARTIAL), (unsigned)flags);
    }
  }
  /* The aligned variant's assumptions: the split's own partials always qualify (so src/decode/aotk_decode.c
   * always takes it there); for aotk_attn_merge, where its query named it. */
  if (seen.merge == NULL || (seen.announced && seen.announced_info.aligned)) {
    for (int slot = 0; slot < 3; slot++) {
      EXPECT(arg_pointer(a, slot) % 16 == 0 && arg_pointer(a, 4 + slot) % 16 == 0, "pointers %#lx, %#lx",
             (unsigned long)arg_pointer(a, slot), (unsigned long)arg_pointer(a, 4 + slot));
    }
    static const int aligned_strides[] = {PP, PB, PS, PH, OB, OS, OH};
    for (size_t i = 0; i < sizeof aligned_strides / sizeof aligned_strides[0]; i++) {
      EXPECT(arg_i64(a, aligned_strides[i]) % 16 == 0, "stride argument %d = %lld", aligned_strides[i],
             (long long)arg_i64(a, aligned_strides[i]));
    }
  }
  /* The reach: every partial of every row, head_dim columns (the loop's mask). */
  static const size_t slot_bytes[] = {4, 2, 2};
  const axis partial_extra[] = {{0, num_partials, arg_i64(a, PP)}, {0, head_dim, 1}};
  check_rows(arg_pointer(a, partial_slot), num_rows, seqlen_q, heads, arg_i64(a, PB), arg_i64(a, PS), arg_i64(a, PH),
             partial_extra, 2, slot_bytes[partial_slot], e->function_name, "OutPartial");
  const axis lse_extra[] = {{0, num_partials, arg_i64(a, LPP)}};
  check_rows(arg_pointer(a, LSE_PARTIAL), num_rows, seqlen_q, heads, arg_i64(a, LPB), arg_i64(a, LPS), arg_i64(a, LPH),
             lse_extra, 1, 4, e->function_name, "LsePartial");
  const axis out_extra[] = {{0, head_dim, 1}};
  if (packed) {
    /* Packed rows: any row of out [total_q, heads, head_dim] and lse [heads, total_q] (which rows is device
     * data), the batch strides 0, and CuSeqlensQ's batch + 1 entries. */
    const aotk_decode_params *d = seen.decode;
    const int64_t total_q = d->q.shape[0];
    EXPECT(arg_i64(a, OB) == 0 && arg_i64(a, LB) == 0, "packed rows with batch strides %lld, %lld",
           (long long)arg_i64(a, OB), (long long)arg_i64(a, LB));
    const axis out_axes[] = {{0, total_q, arg_i64(a, OS)}, {0, heads, arg_i64(a, OH)}, {0, head_dim, 1}};
    check_box(arg_pointer(a, 4 + out_slot), out_axes, 3, slot_bytes[out_slot], e->function_name, "Out (packed)");
    if (flags & DECODE_WRITE_LSE) {
      const axis lse_axes[] = {{0, heads, arg_i64(a, LH)}, {0, total_q, arg_i64(a, LS)}};
      check_box(arg_pointer(a, LSE), lse_axes, 2, 4, e->function_name, "Lse (packed)");
    }
    const axis cu_axes[] = {{0, batch + 1, 1}};
    check_box(arg_pointer(a, CU_SEQLENS_Q), cu_axes, 1, 4, e->function_name, "CuSeqlensQ");
  } else {
    check_rows(arg_pointer(a, 4 + out_slot), num_rows, seqlen_q, heads, arg_i64(a, OB), arg_i64(a, OS),
               arg_i64(a, OH), out_extra, 1, slot_bytes[out_slot], e->function_name, "Out");
    if (flags & DECODE_WRITE_LSE) {
      check_rows(arg_pointer(a, LSE), num_rows, seqlen_q, heads, arg_i64(a, LB), arg_i64(a, LS), arg_i64(a, LH), NULL,
                 0, 4, e->function_name, "Lse");
    }
  }
  if (flags & DECODE_SINKS) {
    const axis sink_axes[] = {{0, num_rows < heads ? num_rows : heads, 1}};
    check_box(arg_pointer(a, SINKS), sink_axes, 1, 4, e->function_name, "Sinks");
  }
}

/* attn_cache_append(KNew, VNew, K, V, BlockTable, CacheSeqlens, k_new's and v_new's (batch, token, head)
 * strides, the caches' (page, row, head) strides, stride_tb, 7 int32: seqlen_new, heads_kv, capacity,
 * page_size, head_dim_qk8, head_dim_v8, flags), one program per (request, new token). It reads every
 * row of k_new and v_new, the request's cache_seqlens entry and, paged, the block table's entries of
 * positions below the capacity; it writes rows of the caches at positions below the capacity: anywhere
 * in rows 0 .. capacity - 1 of the request (contiguous), or in rows 0 .. page_size - 1 of any page the
 * caller described (paged: page ids are device data, valid by contract). */
static void check_append_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "ppppppllllllllllllliiiiiii") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_cache_append is out of date", e->param_kinds);
  const aotk_decode_params *d = seen.decode;
  EXPECT(d != NULL && d->k_new.data != NULL && d->v_new.data != NULL && d->cu_seqlens_q.data == NULL,
         "launched by a call other than a dense aotk_attn_decode with k_new and v_new");
  EXPECT(seen.append_launches == 0 && seen.decode_launches == 0,
         "launched after %d appending and %d decoding launches of the same call", seen.append_launches,
         seen.decode_launches);
  seen.append_launches++;
  enum { K_NEW, V_NEW, K, V, TABLE, SEQLENS };
  enum { NB = 6, NS, NH, WB, WS, WH, KP, KS, KH, VP, VS, VH, TB };
  const int64_t seqlen_new = arg_i32(a, 19), heads_kv = arg_i32(a, 20), capacity = arg_i32(a, 21);
  const int64_t page_size = arg_i32(a, 22), head_dim_qk = 8 * (int64_t)arg_i32(a, 23);
  const int64_t head_dim_v = 8 * (int64_t)arg_i32(a, 24);
  const int32_t flags = arg_i32(a, 25);
  const bool paged = flags & DECODE_PAGED;
  const int64_t batch = d->q.shape[0];

  /* The caller's problem, untruncated. */
  EXPECT((flags & ~DECODE_PAGED) == 0 && paged == (d->block_table.data != NULL), "flags = %#x", (unsigned)flags);
  EXPECT(seqlen_new == d->k_new.shape[1] && seqlen_new == d->v_new.shape[1] && seqlen_new >= 1 &&
             seqlen_new <= AOTK_DECODE_MAX_CAPACITY,
         "seqlen_new = %lld for k_new of %lld and v_new of %lld tokens", (long long)seqlen_new,
         (long long)d->k_new.shape[1], (long long)d->v_new.shape[1]);
  EXPECT(heads_kv == d->k_cache.shape[2] && heads_kv == d->k_new.shape[2] && heads_kv == d->v_new.shape[2],
         "heads_kv = %lld for caches of %lld heads, k_new of %lld and v_new of %lld", (long long)heads_kv,
         (long long)d->k_cache.shape[2], (long long)d->k_new.shape[2], (long long)d->v_new.shape[2]);
  EXPECT(head_dim_qk == d->k_new.shape[3] && head_dim_qk == d->k_cache.shape[3] && head_dim_v == d->v_new.shape[3] &&
             head_dim_v == d->v_cache.shape[3],
         "head dims %lld, %lld for k_new's %lld and v_new's %lld", (long long)head_dim_qk, (long long)head_dim_v,
         (long long)d->k_new.shape[3], (long long)d->v_new.shape[3]);
  const __int128 expected_capacity =
      paged ? (__int128)d->block_table.shape[1] * d->k_cache.shape[1] : (__int128)d->k_cache.shape[1];
  EXPECT(capacity == expected_capacity && page_size == (paged ? d->k_cache.shape[1] : 0),
         "capacity = %lld, page_size = %lld for a cache of %lld rows per page or request", (long long)capacity,
         (long long)page_size, (long long)d->k_cache.shape[1]);
  EXPECT((__int128)grid == (__int128)batch * seqlen_new, "a grid of %u programs for %lld requests x %lld new tokens",
         grid, (long long)batch, (long long)seqlen_new);
  /* The caller's tensors, not others of the same shape. */
  EXPECT(arg_pointer(a, K_NEW) == (uintptr_t)d->k_new.data && arg_pointer(a, V_NEW) == (uintptr_t)d->v_new.data &&
             arg_pointer(a, K) == (uintptr_t)d->k_cache.data && arg_pointer(a, V) == (uintptr_t)d->v_cache.data &&
             arg_pointer(a, TABLE) == (uintptr_t)(paged ? d->block_table.data : NULL) &&
             arg_pointer(a, SEQLENS) == (uintptr_t)d->cache_seqlens.data,
         "pointers %#lx %#lx %#lx %#lx %#lx %#lx", (unsigned long)arg_pointer(a, K_NEW),
         (unsigned long)arg_pointer(a, V_NEW), (unsigned long)arg_pointer(a, K), (unsigned long)arg_pointer(a, V),
         (unsigned long)arg_pointer(a, TABLE), (unsigned long)arg_pointer(a, SEQLENS));
  const aotk_tensor *strided[4] = {&d->k_new, &d->v_new, &d->k_cache, &d->v_cache};
  for (int t = 0; t < 4; t++) {
    for (int i = 0; i < 3; i++) {
      EXPECT(arg_i64(a, NB + 3 * t + i) == strided[t]->strides[i], "stride argument %d = %lld, the tensor's %lld",
             NB + 3 * t + i, (long long)arg_i64(a, NB + 3 * t + i), (long long)strided[t]->strides[i]);
    }
  }
  EXPECT(!paged || arg_i64(a, TB) == d->block_table.strides[0], "stride_tb = %lld, the block table's %lld",
         (long long)arg_i64(a, TB), (long long)d->block_table.strides[0]);
  /* What the kernel assumes (hinted throughout, as attn_decode). */
  for (int i = K_NEW; i <= V; i++) {
    EXPECT(arg_pointer(a, i) % 16 == 0, "pointer argument %d = %#lx", i, (unsigned long)arg_pointer(a, i));
  }
  for (int i = NB; i <= VH; i++) EXPECT(arg_i64(a, i) % 16 == 0, "stride argument %d = %lld", i, (long long)arg_i64(a, i));

  /* The reach, from the packed arguments. */
  check_append_reach(e, a, d, K_NEW, K, NB, KP, batch, seqlen_new, heads_kv, paged, capacity, page_size, head_dim_qk,
                     head_dim_v);
  if (paged) {
    EXPECT(page_size >= 1, "page_size = %lld", (long long)page_size);
    const axis table_axes[] = {{0, batch, arg_i64(a, TB)}, {0, capacity >= 1 ? (capacity - 1) / page_size + 1 : 0, 1}};
    check_box(arg_pointer(a, TABLE), table_axes, 2, 4, e->function_name, "BlockTable");
  }
  const axis seqlens_axes[] = {{0, batch, 1}};
  check_box(arg_pointer(a, SEQLENS), seqlens_axes, 1, 4, e->function_name, "CacheSeqlens");
}

/* attn_fwd_hopper_paged (kernels/attn_fwd_hopper.py), the sm_90 paged prefill of aotk_attn_decode with
 * cu_seqlens_q: the Gluon forward's arguments (Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, AlibiSlopes,
 * Sinks, RngState, the q, k, v, out strides, stride_lb, stride_lh, stride_ab, 10 int32, 5 scalars, the
 * descriptors of Q, K, V and O, num_tiles), then BlockTable, CacheSeqlens, CacheLeftpad, stride_bt and
 * page_shift. Packed q and out [total_q, heads_q, d] (read and written through their descriptors over
 * [1, total_q, heads * d], out also by masked stores), the caches [num_pages, page_size, heads_kv, d]
 * through theirs (TMA clips a box at the described cache: any page id reaches no further), lse [heads_q,
 * total_q] by masked stores, the block table's rows below the batch and columns below its width (key j
 * of request b at entry j >> page_shift, j < min(L_b, capacity)), the lengths and the left padding one
 * int32 a request. Persistent: at most num_tiles programs over batch x heads_q x ceil(max_seqlen_q / 128)
 * tiles. */
static void check_paged_prefill_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "ppppp" "pp" "ppp" "liiliiliilii" "lil" "iiiii" "iiiii" "fff" "if" "tttt" "i" "ppp"
                                "l" "i" "p" "ll" "ii") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_fwd_hopper_paged is out of date", e->param_kinds);
  const aotk_decode_params *d = seen.decode;
  EXPECT(d != NULL, "launched by a call other than aotk_attn_decode");
  enum { Q, K, V, OUT, LSE, CU_Q, CU_K, ALIBI, SINKS, RNG, QB, QS, QH, KB, KS, KH, VB, VS, VH, OB, OS, OH, LB, LH, AB,
         SEQLEN_Q, SEQLEN_K, HEADS_Q, GROUP_SIZE, M_BLOCKS, DQK8, DV8, WINDOW_LEFT, WINDOW_RIGHT, FLAGS,
         DESCRIPTORS = 40, NUM_TILES = 68, TABLE, SEQLENS, LEFTPAD, STRIDE_BT, PAGE_SHIFT, OUT_PARTIAL, STRIDE_PP,
         STRIDE_LPP, NUM_SPLITS, SPLIT_KEYS };
  enum { FWD_WRITE_LSE = 1, FWD_VARLEN = 2, FWD_SOFTCAP = 8, FWD_ALIBI = 16, FWD_SINKS = 32, FWD_O_TMA = 256,
         FWD_LEFTPAD = 512, FWD_SPLIT_OUT = 1024 };
  EXPECT(seen.decode_launches == 0 && seen.append_launches == 0,
         "launched after %d decoding and %d appending launches of the same call", seen.decode_launches,
         seen.append_launches);
  seen.decode_launches++;
  const int32_t flags = arg_i32(a, FLAGS);
  const int64_t batch = d->cu_seqlens_q.shape[0] - 1, total_q = d->q.shape[0], heads_q = d->q.shape[1];
  const int64_t heads_kv = d->k_cache.shape[2], page_size = d->k_cache.shape[1];
  const int64_t head_dim_qk = d->q.shape[2], head_dim_v = d->v_cache.shape[3];
  const int64_t capacity = d->block_table.shape[1] * page_size;
  /* The problem: a paged cache, packed queries, no appending; softcap and ALiBi in the EXTRAS rows only;
   * the compiled head dims the problem's (a wider box would reach the next head), a page a whole number
   * of boxes. */
  const bool softcap = d->softcap > 0.0f, alibi = d->alibi_slopes.data != NULL;
  EXPECT(d->num_splits <= 1, "the paged prefill for num_splits = %d (a split asked for runs the decoding kernel)",
         (int)d->num_splits);
  EXPECT(d->cu_seqlens_q.data != NULL && d->block_table.data != NULL && d->k_new.data == NULL &&
             (e->extras != 0) == (softcap || alibi),
         "the paged prefill (%s) for cu_seqlens_q %p, block_table %p, k_new %p, softcap %g, alibi %p", e->name,
         d->cu_seqlens_q.data, d->block_table.data, d->k_new.data, (double)d->softcap, d->alibi_slopes.data);
  EXPECT(e->head_dim_qk == head_dim_qk && e->head_dim_v == head_dim_v && 8 * (int64_t)arg_i32(a, DQK8) == head_dim_qk &&
             8 * (int64_t)arg_i32(a, DV8) == head_dim_v,
         "compiled for head dims %d, %d; the problem's are %lld, %lld", (int)e->head_dim_qk, (int)e->head_dim_v,
         (long long)head_dim_qk, (long long)head_dim_v);
  EXPECT(page_size >= 16 && (page_size & (page_size - 1)) == 0 && arg_i32(a, PAGE_SHIFT) >= 0 &&
             arg_i32(a, PAGE_SHIFT) < 31 && ((int64_t)1 << arg_i32(a, PAGE_SHIFT)) == page_size &&
             page_size % e->descriptors[1].box[1] == 0,
         "page_shift %d for pages of %lld keys, boxes of %d rows", (int)arg_i32(a, PAGE_SHIFT), (long long)page_size,
         (int)e->descriptors[1].box[1]);
  /* The lengths the Gluon forward's int32 window arithmetic holds (2^30 - 512, as the dense forward's). */
  EXPECT(d->max_seqlen_q <= (1 << 30) - 512 && capacity <= (1 << 30) - 512,
         "max_seqlen_q %d, capacity %lld: past what the Gluon forward's int32 arithmetic holds", (int)d->max_seqlen_q,
         (long long)capacity);
  /* At least 64 queries, or fewer where the decoding kernel would run its 64-row tile (G x max_seqlen_q > 32)
   * and the 128-row tiles fit one wave of the fake H100's 132 SMs (the only sm_90 device); not where those
   * tiles fit one wave and the decoding kernel's 64-row tiles are few (at most half the forward's where
   * the forward splits, num_splits > 1 here; else under 0.4 of the SMs' count, under half from head dim
   * 192), unless num_splits 1 asks for no split. */
  const int64_t forward_tiles = batch * heads_q * (((int64_t)d->max_seqlen_q + 127) / 128);
  /* Split keys: where the forward's tiles fill at most half the SMs and no count was asked for (a count
   * above 1 runs the decoding kernel), min(132 / tiles, hint / 512) ranges of the max_seqlen_k hint (or
   * the capacity) in whole key blocks, the last taking every key from its first on; each tile's splits
   * its own tiles. */
  const int64_t num_splits = arg_i32(a, NUM_SPLITS), split_keys = arg_i32(a, SPLIT_KEYS);
  const bool split = num_splits > 1;
  const int64_t hint = d->max_seqlen_k > 0 && d->max_seqlen_k < capacity ? d->max_seqlen_k : capacity;
  int64_t expected_splits = 1, expected_keys = 0;
  if (d->num_splits != 1 && 2 * forward_tiles <= 132) {
    const int64_t n = 132 / forward_tiles < hint / 512 ? 132 / forward_tiles : hint / 512;
    if (n > 1) {
      expected_keys = ((hint + n - 1) / n + e->block_n - 1) / e->block_n * e->block_n;
      expected_splits = (hint + expected_keys - 1) / expected_keys;
    }
  }
  EXPECT(num_splits == expected_splits && (!split || d->num_splits == 0) &&
             (!split || (split_keys == expected_keys && (num_splits - 1) * split_keys < hint &&
                         num_splits * split_keys >= hint)),
         "num_splits %lld, split_keys %lld (expected %lld, %lld; block %d) for num_splits = %d, %lld keys planned",
         (long long)num_splits, (long long)split_keys, (long long)expected_splits, (long long)expected_keys,
         (int)e->block_n, (int)d->num_splits, (long long)hint);
  const int64_t decode_tiles = batch * heads_kv * (((int64_t)d->max_seqlen_q * (heads_q / heads_kv) + 63) / 64);
  const bool split_wins = d->num_splits != 1 && forward_tiles <= 132 &&
                          (num_splits > 1 ? 2 * decode_tiles <= forward_tiles
                                          : (head_dim_qk > 128 ? 4 : 5) * decode_tiles < 2 * 132);
  const bool enough_queries = !split_wins && (d->max_seqlen_q >= 64 ||
                                              ((int64_t)d->max_seqlen_q * (heads_q / heads_kv) > 32 &&
                                               batch * heads_q <= 132));
  EXPECT(arg_i32(a, SEQLEN_Q) == d->max_seqlen_q && enough_queries && arg_i32(a, SEQLEN_K) == capacity &&
             arg_i32(a, HEADS_Q) == heads_q && arg_i32(a, GROUP_SIZE) * heads_kv == heads_q,
         "seqlen_q %d, seqlen_k %d, heads_q %d, group_size %d for max_seqlen_q %d, capacity %lld, %lld / %lld heads",
         (int)arg_i32(a, SEQLEN_Q), (int)arg_i32(a, SEQLEN_K), (int)arg_i32(a, HEADS_Q), (int)arg_i32(a, GROUP_SIZE),
         (int)d->max_seqlen_q, (long long)capacity, (long long)heads_q, (long long)heads_kv);
  const int64_t m_blocks = arg_i32(a, M_BLOCKS), tiles = arg_i32(a, NUM_TILES);
  EXPECT(m_blocks == ((int64_t)d->max_seqlen_q + e->block_m - 1) / e->block_m &&
             tiles == batch * heads_q * m_blocks * num_splits && grid >= 1 && (int64_t)grid <= tiles,
         "%u programs over %lld tiles, %lld query blocks, for %lld requests x %lld heads x %lld splits", grid,
         (long long)tiles, (long long)m_blocks, (long long)batch, (long long)heads_q, (long long)num_splits);
  if (seen.announced) {
    EXPECT(seen.announced_info.grid == (int64_t)grid && seen.announced_info.num_splits == num_splits,
           "aotk_decode_query announced a grid of %lld and %d splits; launched %u", (long long)seen.announced_info.grid,
           (int)seen.announced_info.num_splits, grid);
    const aotk__kernel_entry *ran = announced_row(&seen.announced_info);
    EXPECT(ran == e, "aotk_decode_query announced %s, %s ran", seen.announced_info.kernel_name, e->name);
  }
  /* (Split, the partials' LSEs are always written and the sinks join in the merge.) */
  EXPECT((flags & FWD_VARLEN) && ((flags & FWD_WRITE_LSE) != 0) == (split || d->lse.data != NULL) &&
             ((flags & FWD_SINKS) != 0) == (!split && d->sinks.data != NULL) &&
             ((flags & FWD_SOFTCAP) != 0) == softcap && ((flags & FWD_ALIBI) != 0) == alibi &&
             (!split || (flags & FWD_O_TMA) == 0) && ((flags & FWD_SPLIT_OUT) != 0) == split,
         "flags = %#x for lse %p, sinks %p, softcap %g, alibi %p", (unsigned)flags, d->lse.data, d->sinks.data,
         (double)d->softcap, d->alibi_slopes.data);
  EXPECT(arg_pointer(a, ALIBI) == (uintptr_t)(alibi ? d->alibi_slopes.data : NULL) &&
             (!alibi || arg_i64(a, AB) == (d->alibi_slopes.rank == 2 ? d->alibi_slopes.strides[0] : 0)),
         "AlibiSlopes = %#lx, stride_ab %lld for alibi_slopes %p", (unsigned long)arg_pointer(a, ALIBI),
         (long long)arg_i64(a, AB), d->alibi_slopes.data);
  const bool leftpad_given = d->struct_size > offsetof(aotk_decode_params, cache_leftpad) && d->cache_leftpad.data != NULL;
  EXPECT(((flags & FWD_LEFTPAD) != 0) == leftpad_given &&
             arg_pointer(a, LEFTPAD) == (uintptr_t)(leftpad_given ? d->cache_leftpad.data : NULL),
         "flags = %#x, CacheLeftpad = %#lx for cache_leftpad %p", (unsigned)flags,
         (unsigned long)arg_pointer(a, LEFTPAD), leftpad_given ? d->cache_leftpad.data : NULL);
  EXPECT(arg_pointer(a, Q) == (uintptr_t)d->q.data && arg_pointer(a, K) == (uintptr_t)d->k_cache.data &&
             arg_pointer(a, V) == (uintptr_t)d->v_cache.data && arg_pointer(a, OUT) == (uintptr_t)d->out.data &&
             (split || arg_pointer(a, OUT_PARTIAL) == 0) &&
             arg_pointer(a, CU_Q) == (uintptr_t)d->cu_seqlens_q.data &&
             arg_pointer(a, TABLE) == (uintptr_t)d->block_table.data &&
             arg_pointer(a, SEQLENS) == (uintptr_t)d->cache_seqlens.data && arg_pointer(a, CU_K) == 0 &&
             arg_pointer(a, RNG) == 0,
         "the pointer arguments are not the caller's tensors");
  EXPECT((split || (arg_i64(a, OB) == 0 && arg_i32(a, OS) == d->out.strides[0] &&
                     arg_i32(a, OH) == d->out.strides[1] && arg_i64(a, LB) == 0 &&
                     (d->lse.data == NULL || arg_i32(a, LH) == d->lse.strides[0]))) &&
             arg_i64(a, STRIDE_BT) == d->block_table.strides[0],
         "strides out (%lld, %d, %d), lse (%lld, %d), block table %lld", (long long)arg_i64(a, OB), (int)arg_i32(a, OS),
         (int)arg_i32(a, OH), (long long)arg_i64(a, LB), (int)arg_i32(a, LH), (long long)arg_i64(a, STRIDE_BT));
  /* The reach. */
  const axis columns_v = {0, head_dim_v, 1};
  if (split) {
    /* Split: fp32 partials [split, request, token < max_seqlen_q, head, head_dim_v] through out's strides
     * and the split stride, and their LSEs [split, request, head, token] through lse's (the workspace:
     * any span the caller described, apart from each other). */
    const int64_t max_q = d->max_seqlen_q;
    const axis partial_axes[] = {{0, num_splits, arg_i64(a, STRIDE_PP)}, {0, batch, arg_i64(a, OB)},
                                 {0, max_q, arg_i32(a, OS)}, {0, heads_q, arg_i32(a, OH)}, columns_v};
    const axis lse_axes[] = {{0, num_splits, arg_i64(a, STRIDE_LPP)}, {0, batch, arg_i64(a, LB)},
                             {0, heads_q, arg_i32(a, LH)}, {0, max_q, 1}};
    check_box(arg_pointer(a, OUT_PARTIAL), partial_axes, 5, 4, e->function_name, "OutPartial");
    check_box(arg_pointer(a, LSE), lse_axes, 4, 4, e->function_name, "Lse (the partials')");
    const __int128 rows = (__int128)num_splits * batch * max_q * heads_q;
    EXPECT(arg_i64(a, STRIDE_PP) == batch * arg_i64(a, OB) && arg_i64(a, OB) == max_q * arg_i32(a, OS) &&
               arg_i32(a, OS) == heads_q * arg_i32(a, OH) && arg_i32(a, OH) >= head_dim_v &&
               arg_i64(a, STRIDE_LPP) == batch * arg_i64(a, LB) && arg_i64(a, LB) == heads_q * arg_i32(a, LH) &&
               arg_i32(a, LH) == max_q,
           "partial strides (%lld, %lld, %d, %d), lse (%lld, %lld, %d)", (long long)arg_i64(a, STRIDE_PP),
           (long long)arg_i64(a, OB), (int)arg_i32(a, OS), (int)arg_i32(a, OH), (long long)arg_i64(a, STRIDE_LPP),
           (long long)arg_i64(a, LB), (int)arg_i32(a, LH));
    const __int128 partial_end = (__int128)arg_pointer(a, OUT_PARTIAL) + rows * arg_i32(a, OH) * 4;
    const __int128 lse_end = (__int128)arg_pointer(a, LSE) + rows * 4;
    EXPECT(partial_end <= arg_pointer(a, LSE) || lse_end <= arg_pointer(a, OUT_PARTIAL),
           "the partial outputs at %#lx and their LSEs at %#lx overlap", (unsigned long)arg_pointer(a, OUT_PARTIAL),
           (unsigned long)arg_pointer(a, LSE));
    seen.decode_splits = num_splits;
  } else {
    const axis out_axes[] = {{0, total_q, arg_i32(a, OS)}, {0, heads_q, arg_i32(a, OH)}, columns_v};
    check_box_in(arg_pointer(a, OUT), out_axes, 3, 2, e->function_name, "Out (packed)", &d->out);
    if (flags & FWD_WRITE_LSE) {
      const axis lse_axes[] = {{0, heads_q, arg_i32(a, LH)}, {0, total_q, 1}};
      check_box_in(arg_pointer(a, LSE), lse_axes, 2, 4, e->function_name, "Lse (packed)", &d->lse);
    }
  }
  const axis cu_axes[] = {{0, batch + 1, 1}}, per_request[] = {{0, batch, 1}};
  check_box(arg_pointer(a, CU_Q), cu_axes, 1, 4, e->function_name, "CuSeqlensQ");
  check_box(arg_pointer(a, SEQLENS), per_request, 1, 4, e->function_name, "CacheSeqlens");
  if (leftpad_given) check_box(arg_pointer(a, LEFTPAD), per_request, 1, 4, e->function_name, "CacheLeftpad");
  if (flags & FWD_SINKS) {
    const axis sink_axes[] = {{0, heads_q, 1}};
    check_box(arg_pointer(a, SINKS), sink_axes, 1, 4, e->function_name, "Sinks");
  }
  if (flags & FWD_ALIBI) {
    const axis alibi_axes[] = {{0, batch, arg_i64(a, AB)}, {0, heads_q, 1}};
    check_box(arg_pointer(a, ALIBI), alibi_axes, 2, 4, e->function_name, "AlibiSlopes");
  }
  const axis table_axes[] = {{0, batch, arg_i64(a, STRIDE_BT)}, {0, d->block_table.shape[1], 1}};
  check_box(arg_pointer(a, TABLE), table_axes, 2, 4, e->function_name, "BlockTable");
  const bool o_tma = (flags & FWD_O_TMA) != 0;
  const descriptor_role roles[] = {{Q, 64, head_dim_qk, 2, "DescQ"},
                                   {K, e->block_n, head_dim_qk, 2, "DescK"},
                                   {V, e->block_n, head_dim_v, 2, "DescV"},
                                   {o_tma ? OUT : Q, 64, head_dim_v, 2, o_tma ? "DescO" : "DescO (q's)"}};
  check_descriptors(e, a, DESCRIPTORS, roles, 4);
}

#endif /* FUZZ_REACH_DECODE_H */
