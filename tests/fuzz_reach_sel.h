/*
 * How far the selection-attention kernels reach (tests/fuzz_api.c): the token-centric forward and dQ,
 * the dK/dV pass over the inverse index and its helpers (count, sort, offsets), each launch's packed
 * arguments against the caller's problem and every byte range each pointer argument can reach.
 */
#ifndef FUZZ_REACH_SEL_H
#define FUZZ_REACH_SEL_H

#include "fuzz_reach.h"

/* The caller's selection problem, as src/sel/aotk_sel.c's sel_validate reads it. */
typedef struct sel_caller {
  bool varlen;
  int64_t num_seqs, total_q, total_k, max_seqlen_k, heads_q, heads_kv, group_size, slots, block_size;
  int64_t head_dim_qk, head_dim_v;
  int64_t index_slots; /* the inverse index's slots per kv head: num_seqs * ceil(max_seqlen_k / block_size) */
} sel_caller;

static sel_caller sel_caller_problem(const aotk_sel_params *p) {
  sel_caller c;
  c.varlen = p->cu_seqlens_q.data != NULL || p->cu_seqlens_k.data != NULL;
  c.num_seqs = c.varlen ? p->cu_seqlens_q.shape[0] - 1 : 1;
  c.total_q = p->q.shape[0];
  c.total_k = p->k.shape[0];
  c.max_seqlen_k = c.varlen ? p->max_seqlen_k : c.total_k;
  c.heads_q = p->q.shape[1];
  c.heads_kv = p->k.shape[1];
  c.group_size = c.heads_q / c.heads_kv;
  c.slots = p->block_idx.shape[2];
  c.block_size = p->block_size;
  c.head_dim_qk = p->q.shape[2];
  c.head_dim_v = p->v.shape[2];
  c.index_slots = c.num_seqs * ceil_div(c.max_seqlen_k, c.block_size);
  return c;
}

/* What every selection kernel that takes them shares: num_seqs, total_q, total_k and max_seqlen_k (at
 * `sizes`; max_seqlen_k is total_k without cu_seqlens, which bounds a dense call's keys) the caller's,
 * cu_seqlens the caller's (num_seqs + 1 offsets read, packed calls only), and block_cnt's flag. */
static void check_sel_common(const aotk__kernel_entry *e, void **a, const sel_caller *c, const aotk_sel_params *p,
                             int cu_q, int cu_k, int sizes, int32_t flags) {
  EXPECT(arg_i32(a, sizes) == c->num_seqs && arg_i32(a, sizes + 1) == c->total_q &&
             arg_i32(a, sizes + 2) == c->total_k && arg_i32(a, sizes + 3) == c->max_seqlen_k,
         "num_seqs, total_q, total_k, max_seqlen_k = %d, %d, %d, %d for the caller's %lld, %lld, %lld, %lld",
         (int)arg_i32(a, sizes), (int)arg_i32(a, sizes + 1), (int)arg_i32(a, sizes + 2), (int)arg_i32(a, sizes + 3),
         (long long)c->num_seqs, (long long)c->total_q, (long long)c->total_k, (long long)c->max_seqlen_k);
  EXPECT(((flags & ATTN_VARLEN) != 0) == c->varlen && ((flags & SEL_BLOCK_CNT) != 0) == (p->block_cnt.data != NULL),
         "flags = %#x, block_cnt.data = %p", (unsigned)flags, p->block_cnt.data);
  EXPECT(arg_pointer(a, cu_q) == (uintptr_t)p->cu_seqlens_q.data &&
             arg_pointer(a, cu_k) == (uintptr_t)p->cu_seqlens_k.data,
         "CuSeqlensQ, CuSeqlensK = %#lx, %#lx for the caller's %p, %p", (unsigned long)arg_pointer(a, cu_q),
         (unsigned long)arg_pointer(a, cu_k), p->cu_seqlens_q.data, p->cu_seqlens_k.data);
  if (c->varlen) {
    check_vector(e, a, cu_q, c->num_seqs + 1, 4, "CuSeqlensQ");
    check_vector(e, a, cu_k, c->num_seqs + 1, 4, "CuSeqlensK");
  }
}

/* One of selection's packed [rows, heads, columns] tensors (lse and block_cnt: one column): its pointer
 * and (token: int64, head: int32) strides the caller's; rows 0 .. rows - 1, `heads` heads (head *
 * stride_h is int32 in the kernels), `columns` columns; writes (`output`) inside its own span. */
static void check_sel_tensor(const aotk__kernel_entry *e, void **a, int pointer, int strides, const aotk_tensor *t,
                             int64_t rows, int64_t heads, int64_t columns, size_t element, bool output,
                             const char *argument) {
  /* q, k, v, out and the gradients: pointer and strides hinted ALWAYS (lse and the index are not). */
  const bool hinted = element == 2;
  const int64_t stride_s = arg_i64(a, strides), stride_h = arg_i32(a, strides + 1);
  EXPECT(arg_pointer(a, pointer) == (uintptr_t)t->data && same_stride(stride_s, t->strides[0], rows) &&
             same_stride(stride_h, t->strides[1], heads),
         "%s = %#lx with strides (%lld, %lld) for the caller's %p with strides (%lld, %lld)", argument,
         (unsigned long)arg_pointer(a, pointer), (long long)stride_s, (long long)stride_h, t->data,
         (long long)t->strides[0], (long long)t->strides[1]);
  EXPECT((__int128)(heads - 1) * magnitude(stride_h) <= INT32_MAX, "%s: %lld heads %lld apart: 32-bit offsets wrap",
         argument, (long long)heads, (long long)stride_h);
  EXPECT(!hinted || (arg_pointer(a, pointer) % 16 == 0 && stride_s % 16 == 0 && stride_h % 16 == 0),
         "%s = %#lx with strides (%lld, %lld), hinted multiples of 16", argument,
         (unsigned long)arg_pointer(a, pointer), (long long)stride_s, (long long)stride_h);
  const axis axes[] = {{0, rows, stride_s}, {0, heads, stride_h}, {0, columns, 1}};
  check_box_in(arg_pointer(a, pointer), axes, 3, element, e->function_name, argument, output ? t : NULL);
}

/* block_idx, and block_cnt where its flag is set, read at rows 0 .. rows - 1 (index entries' tokens:
 * below total_q by the grid, or read from cu_seqlens, the caller's promise), every kv head and slot. */
static void check_sel_index(const aotk__kernel_entry *e, void **a, const sel_caller *c, const aotk_sel_params *p,
                            int idx, int cnt, int strides, int32_t flags) {
  check_sel_tensor(e, a, idx, strides, &p->block_idx, c->total_q, c->heads_kv, c->slots, 4, false, "BlockIdx");
  if (flags & SEL_BLOCK_CNT) {
    check_sel_tensor(e, a, cnt, strides + 2, &p->block_cnt, c->total_q, c->heads_kv, 1, 4, false, "BlockCnt");
  }
}

/* sel_fwd and sel_bwd_dq (kernels/sel_attn.py), one program per (kv head, token, chunk of BLOCK_G query
 * heads of the group), kv head outermost. sel_fwd: Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, BlockIdx,
 * BlockCnt, the q, k, v, out, lse, block_idx, block_cnt strides, 8 int32 (num_seqs, total_q, total_k,
 * max_seqlen_k, group_size, group_chunks, num_slots, flags), qk_scale_log2. sel_bwd_dq: Q, K, V, Out,
 * DOut, Lse, DQ, Delta, the cu_seqlens, BlockIdx, BlockCnt, Compact, the q, k, v, out, dout, dq, lse,
 * block_idx, block_cnt strides, 9 int32 (heads_q after max_seqlen_k), 2 scalars; it also writes delta,
 * [total_q, heads_q] fp32, and (its compacted slot lists) [total_q, heads_kv, slots] int32 in the
 * workspace. Keys: a selected block's rows up to the sequence's key length, from its start read in
 * cu_seqlens_k (dense: from 0, max_seqlen_k = total_k), so by the caller's promise rows below total_k;
 * block ids out of range are skipped (their keys masked). The forward's scratch for the valid ids is
 * the first 32 int32 of the token's first out row: inside out's box. */
static void check_sel_token_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  const bool dq = e->family == AOTK__FAMILY_SEL_BWD_DQ;
  const char *kinds = dq ? "ppppppp" "p" "pp" "pp" "p" "lilililililililili" "iiiiiiiii" "ff"
                         : "ppppp" "pp" "pp" "lilililililili" "iiiiiiii" "f";
  EXPECT(strcmp(e->param_kinds, kinds) == 0, "the parameters are \"%s\": fuzz_api.c's model of %s is out of date",
         e->param_kinds, dq ? "sel_bwd_dq" : "sel_fwd");
  const aotk_sel_params *p = seen.sel;
  EXPECT(p != NULL, "launched by a call other than aotk_sel_fwd or aotk_sel_bwd");
  /* Argument numbers: the forward's, or the dQ pass's. */
  const int Q = 0, K = 1, V = 2, OUT = 3, DOUT = 4, LSE = dq ? 5 : 4, DQ = 6, DELTA = 7, CU_Q = dq ? 8 : 5;
  const int IDX = CU_Q + 2, COMPACT = 12, QS = dq ? 13 : 9, KS = QS + 2, VS = QS + 4, OS = QS + 6, DOS = 21, DQS = 23;
  const int LS = dq ? 25 : 17, IS = LS + 2, SIZES = IS + 4, HEADS_Q = 35;
  const int GROUP_SIZE = dq ? 36 : 27, GROUP_CHUNKS = GROUP_SIZE + 1, NUM_SLOTS = GROUP_SIZE + 2;
  const int FLAGS = GROUP_SIZE + 3;
  const sel_caller c = sel_caller_problem(p);
  const int32_t flags = arg_i32(a, FLAGS);
  check_sel_common(e, a, &c, p, CU_Q, CU_Q + 1, SIZES, flags);
  const int64_t group_size = arg_i32(a, GROUP_SIZE), group_chunks = arg_i32(a, GROUP_CHUNKS);
  EXPECT(group_size == c.group_size && group_chunks == ceil_div(group_size, e->block_m) &&
             arg_i32(a, NUM_SLOTS) == c.slots && (!dq || arg_i32(a, HEADS_Q) == c.heads_q),
         "group_size, group_chunks, num_slots = %lld, %lld, %d (BLOCK_G %d) for the caller's %lld, %lld slots",
         (long long)group_size, (long long)group_chunks, (int)arg_i32(a, NUM_SLOTS), (int)e->block_m,
         (long long)c.group_size, (long long)c.slots);
  EXPECT(e->head_dim_qk == c.head_dim_qk && e->head_dim_v == c.head_dim_v && e->block_size == c.block_size,
         "compiled for head dims %d, %d and blocks of %d", (int)e->head_dim_qk, (int)e->head_dim_v, (int)e->block_size);
  EXPECT(dq || !e->aligned || group_size % 16 == 0, "group_size = %lld for the variant hinting a multiple of 16",
         (long long)group_size);
  EXPECT((int64_t)grid == c.heads_kv * c.total_q * group_chunks, "a grid of %u programs for %lld x %lld x %lld", grid,
         (long long)c.heads_kv, (long long)c.total_q, (long long)group_chunks);
  EXPECT(((flags & ATTN_WRITE_LSE) != 0) == (p->lse.data != NULL) && (flags & SEL_DKDV_REDUCE) == 0,
         "flags = %#x, lse.data = %p", (unsigned)flags, p->lse.data);

  check_sel_tensor(e, a, Q, QS, &p->q, c.total_q, c.heads_q, c.head_dim_qk, 2, false, "Q");
  check_sel_tensor(e, a, K, KS, &p->k, c.total_k, c.heads_kv, c.head_dim_qk, 2, false, "K");
  check_sel_tensor(e, a, V, VS, &p->v, c.total_k, c.heads_kv, c.head_dim_v, 2, false, "V");
  check_sel_tensor(e, a, OUT, OS, &p->out, c.total_q, c.heads_q, c.head_dim_v, 2, !dq, "Out");
  if (flags & ATTN_WRITE_LSE) check_sel_tensor(e, a, LSE, LS, &p->lse, c.total_q, c.heads_q, 1, 4, !dq, "Lse");
  check_sel_index(e, a, &c, p, IDX, IDX + 1, IS, flags);
  if (dq) {
    check_sel_tensor(e, a, DOUT, DOS, &p->dout, c.total_q, c.heads_q, c.head_dim_v, 2, false, "DOut");
    check_sel_tensor(e, a, DQ, DQS, &p->dq, c.total_q, c.heads_q, c.head_dim_qk, 2, true, "DQ");
    expect_aligned(e, a, DELTA, "Delta");
    expect_aligned(e, a, COMPACT, "Compact");
    const axis delta_axes[] = {{0, c.total_q, c.heads_q}, {0, c.heads_q, 1}};
    check_workspace_part(e, arg_pointer(a, DELTA), delta_axes, 2, 4, "Delta");
    const axis compact_axes[] = {{0, c.total_q, c.heads_kv * c.slots}, {0, c.heads_kv, c.slots}, {0, c.slots, 1}};
    check_workspace_part(e, arg_pointer(a, COMPACT), compact_axes, 3, 4, "Compact");
  }
}

/* The inverse index's rows in the workspace (src/sel/aotk_sel.c): offsets, cursors and chunks, int32
 * [heads_kv, stride_offsets] (index_slots + 1 offsets a row, index_slots cursors and chunks), and the
 * token lists, int32 [heads_kv, stride_tokens = total_q * slots]. Where a kernel writes or reads a list
 * entry is device data (a prefix sum of the counts, a cursor): each index entry lands in at most one
 * list, so by the index passes' construction every position stays in its kv head's row, and that row is
 * the box. */
static void check_sel_index_rows(const aotk__kernel_entry *e, void **a, const sel_caller *c, int pointer,
                                 int64_t stride_offsets, int64_t per_row, const char *part) {
  EXPECT(stride_offsets >= c->index_slots + 1, "stride_offsets = %lld for %lld index slots",
         (long long)stride_offsets, (long long)c->index_slots);
  expect_aligned(e, a, pointer, part);
  const axis axes[] = {{0, c->heads_kv, stride_offsets}, {0, per_row, 1}};
  check_workspace_part(e, arg_pointer(a, pointer), axes, 2, 4, part);
}

static void check_sel_tokens(const aotk__kernel_entry *e, void **a, const sel_caller *c, int pointer,
                             int64_t stride_tokens) {
  EXPECT(stride_tokens == c->total_q * c->slots, "stride_tokens = %lld for %lld tokens x %lld slots",
         (long long)stride_tokens, (long long)c->total_q, (long long)c->slots);
  expect_aligned(e, a, pointer, "Tokens");
  const axis axes[] = {{0, c->heads_kv, stride_tokens}, {0, stride_tokens, 1}};
  check_workspace_part(e, arg_pointer(a, pointer), axes, 2, 4, "Tokens");
}

/* sel_bwd_dkdv (kernels/sel_attn.py): Q, K, V, DOut, Lse, Delta, DK, DV, the cu_seqlens, Offsets, Tokens,
 * Chunks, Partials, the q, k, v, dout, dk, dv, lse strides, stride_offsets, stride_tokens, 11 int32
 * (num_seqs, total_q, total_k, max_seqlen_k, heads_q, group_size, num_key_tiles, chunk_tokens,
 * max_chunks, partials_per_head, flags), 2 scalars. Programs per (kv head, sequence, key tile of BLOCK_N
 * keys, chunk of a split list), or with SEL_FLAG_DKDV_REDUCE one per key tile. A tile's keys: rows below
 * the sequence's key length from its start (as sel_fwd). The query rows are the tokens of the tile's
 * block's list, written by the index passes from the grid's tokens or cu_seqlens_q (the caller's
 * promise): rows below total_q. A split list's partial records, fp32 [BLOCK_N, head_dim_qk +
 * head_dim_v] per (record, tile of the block), are numbered by the scan pass's prefix sum, under
 * partials_per_head per kv head by the host's bound (src/sel/aotk_sel.c): the box is every kv head's
 * records. */
static void check_sel_dkdv_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "pppppppp" "pp" "pppp" "lilililililili" "il" "iiiiiiiiiii" "ff") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of sel_bwd_dkdv is out of date", e->param_kinds);
  const aotk_sel_params *p = seen.sel;
  EXPECT(p != NULL, "launched by a call other than aotk_sel_bwd");
  enum { Q, K, V, DOUT, LSE, DELTA, DK, DV, CU_Q, CU_K, OFFSETS, TOKENS, CHUNKS, PARTIALS, QS, KS = 16, VS = 18,
         DOS = 20, DKS = 22, DVS = 24, LS = 26, STRIDE_OFFSETS = 28, STRIDE_TOKENS, SIZES, HEADS_Q = 34, GROUP_SIZE,
         KEY_TILES, CHUNK_TOKENS, MAX_CHUNKS, PARTIALS_PER_HEAD, FLAGS };
  const sel_caller c = sel_caller_problem(p);
  const int32_t flags = arg_i32(a, FLAGS);
  check_sel_common(e, a, &c, p, CU_Q, CU_K, SIZES, flags);
  const int64_t key_tiles = arg_i32(a, KEY_TILES), max_chunks = arg_i32(a, MAX_CHUNKS);
  const int64_t partials_per_head = arg_i32(a, PARTIALS_PER_HEAD);
  const bool reduce = flags & SEL_DKDV_REDUCE;
  EXPECT(arg_i32(a, HEADS_Q) == c.heads_q && arg_i32(a, GROUP_SIZE) == c.group_size &&
             key_tiles == ceil_div(c.max_seqlen_k, e->block_n) && max_chunks >= 1 && arg_i32(a, CHUNK_TOKENS) >= 1 &&
             e->block_size % e->block_n == 0,
         "heads_q, group_size, num_key_tiles, chunk_tokens, max_chunks = %d, %d, %lld, %d, %lld (BLOCK_N %d)",
         (int)arg_i32(a, HEADS_Q), (int)arg_i32(a, GROUP_SIZE), (long long)key_tiles, (int)arg_i32(a, CHUNK_TOKENS),
         (long long)max_chunks, (int)e->block_n);
  EXPECT(e->head_dim_qk == c.head_dim_qk && e->head_dim_v == c.head_dim_v && e->block_size == c.block_size,
         "compiled for head dims %d, %d and blocks of %d", (int)e->head_dim_qk, (int)e->head_dim_v, (int)e->block_size);
  EXPECT((flags & ~(ATTN_VARLEN | ATTN_WRITE_LSE | SEL_BLOCK_CNT | SEL_DKDV_REDUCE)) == 0 &&
             (!reduce || max_chunks > 1),
         "flags = %#x with max_chunks %lld", (unsigned)flags, (long long)max_chunks);
  EXPECT((int64_t)grid == c.heads_kv * c.num_seqs * key_tiles * (reduce ? 1 : max_chunks),
         "a grid of %u programs for %lld x %lld x %lld (x %lld chunks)", grid, (long long)c.heads_kv,
         (long long)c.num_seqs, (long long)key_tiles, (long long)(reduce ? 1 : max_chunks));

  check_sel_tensor(e, a, Q, QS, &p->q, c.total_q, c.heads_q, c.head_dim_qk, 2, false, "Q");
  check_sel_tensor(e, a, K, KS, &p->k, c.total_k, c.heads_kv, c.head_dim_qk, 2, false, "K");
  check_sel_tensor(e, a, V, VS, &p->v, c.total_k, c.heads_kv, c.head_dim_v, 2, false, "V");
  check_sel_tensor(e, a, DOUT, DOS, &p->dout, c.total_q, c.heads_q, c.head_dim_v, 2, false, "DOut");
  check_sel_tensor(e, a, LSE, LS, &p->lse, c.total_q, c.heads_q, 1, 4, false, "Lse");
  check_sel_tensor(e, a, DK, DKS, &p->dk, c.total_k, c.heads_kv, c.head_dim_qk, 2, true, "DK");
  check_sel_tensor(e, a, DV, DVS, &p->dv, c.total_k, c.heads_kv, c.head_dim_v, 2, true, "DV");
  EXPECT(!e->aligned || c.group_size % 16 == 0, "group_size = %lld for the variant hinting a multiple of 16",
         (long long)c.group_size);
  expect_aligned(e, a, DELTA, "Delta");
  const axis delta_axes[] = {{0, c.total_q, c.heads_q}, {0, c.heads_q, 1}};
  check_workspace_part(e, arg_pointer(a, DELTA), delta_axes, 2, 4, "Delta");
  const int64_t stride_offsets = arg_i32(a, STRIDE_OFFSETS);
  check_sel_index_rows(e, a, &c, OFFSETS, stride_offsets, c.index_slots + 1, "Offsets");
  check_sel_index_rows(e, a, &c, CHUNKS, stride_offsets, c.index_slots, "Chunks");
  check_sel_tokens(e, a, &c, TOKENS, arg_i64(a, STRIDE_TOKENS));
  if (max_chunks > 1) {
    EXPECT(partials_per_head >= 1 && arg_pointer(a, PARTIALS) != 0, "Partials = %#lx, %lld records per kv head",
           (unsigned long)arg_pointer(a, PARTIALS), (long long)partials_per_head);
    expect_aligned(e, a, PARTIALS, "Partials");
    const int64_t record_floats = c.block_size * (c.head_dim_qk + c.head_dim_v);
    const axis partial_axes[] = {{0, c.heads_kv * partials_per_head * record_floats, 1}};
    check_workspace_part(e, arg_pointer(a, PARTIALS), partial_axes, 1, 4, "Partials");
  }
}

/* The inverse index's passes and the index check (kernels/sel_attn.py): sel_index_zero (Offsets, count:
 * its first `count` entries), sel_index_count (index entries' blocks counted into Offsets), sel_index_scan
 * (Offsets, Cursors, Chunks: one program per kv head over its row), sel_index_scatter (entries into the
 * lists at Cursors), sel_index_order (each list sorted, or rewritten from block_idx: one program per (kv
 * head, sequence, block)), sel_check_indices (one program per (token, kv head), an int64 result word in
 * the workspace). */
static void check_sel_helper_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  const aotk_sel_params *p = seen.sel;
  EXPECT(p != NULL, "launched by a call other than aotk_sel_bwd or aotk_sel_check_indices");
  const sel_caller c = sel_caller_problem(p);
  switch (e->family) {
    case AOTK__FAMILY_SEL_INDEX_ZERO: {
      EXPECT(strcmp(e->param_kinds, "pi") == 0, "the parameters are \"%s\": fuzz_api.c's model is out of date",
             e->param_kinds);
      const int64_t count = arg_i32(a, 1);
      EXPECT(count >= 1 && (int64_t)grid == ceil_div(count, e->block_m), "a grid of %u programs for %lld entries",
             grid, (long long)count);
      expect_aligned(e, a, 0, "Offsets");
      const axis axes[] = {{0, count, 1}};
      check_workspace_part(e, arg_pointer(a, 0), axes, 1, 4, "Offsets");
      return;
    }
    case AOTK__FAMILY_SEL_INDEX_SCAN: {
      EXPECT(strcmp(e->param_kinds, "ppp" "iiii") == 0, "the parameters are \"%s\": fuzz_api.c's model is out of date",
             e->param_kinds);
      EXPECT((int64_t)grid == c.heads_kv && arg_i32(a, 4) == c.index_slots, "a grid of %u programs, %d slots",
             grid, (int)arg_i32(a, 4));
      check_sel_index_rows(e, a, &c, 0, arg_i32(a, 3), c.index_slots + 1, "Offsets");
      check_sel_index_rows(e, a, &c, 1, arg_i32(a, 3), c.index_slots, "Cursors");
      check_sel_index_rows(e, a, &c, 2, arg_i32(a, 3), c.index_slots, "Chunks");
      return;
    }
    case AOTK__FAMILY_SEL_CHECK_INDICES: {
      EXPECT(strcmp(e->param_kinds, "pp" "pp" "p" "lili" "iiiiiiii") == 0,
             "the parameters are \"%s\": fuzz_api.c's model is out of date", e->param_kinds);
      enum { IDX, CNT, CU_Q, CU_K, RESULT, IS, SIZES = 9, HEADS_KV = 13, BLOCK_SIZE, NUM_SLOTS, FLAGS };
      const int32_t flags = arg_i32(a, FLAGS);
      check_sel_common(e, a, &c, p, CU_Q, CU_K, SIZES, flags);
      EXPECT(arg_i32(a, HEADS_KV) == c.heads_kv && arg_i32(a, BLOCK_SIZE) == c.block_size &&
                 arg_i32(a, NUM_SLOTS) == c.slots && (int64_t)grid == c.total_q * c.heads_kv,
             "heads_kv, block_size, num_slots = %d, %d, %d, a grid of %u", (int)arg_i32(a, HEADS_KV),
             (int)arg_i32(a, BLOCK_SIZE), (int)arg_i32(a, NUM_SLOTS), grid);
      check_sel_index(e, a, &c, p, IDX, CNT, IS, flags);
      const axis axes[] = {{0, 1, 1}};
      check_workspace_part(e, arg_pointer(a, RESULT), axes, 1, 8, "Result");
      return;
    }
  }
  /* count, scatter and order: BlockIdx, BlockCnt, the cu_seqlens, two workspace pointers, block_idx's and
   * block_cnt's strides, then their own. */
  const bool count = e->family == AOTK__FAMILY_SEL_INDEX_COUNT, order = e->family == AOTK__FAMILY_SEL_INDEX_ORDER;
  const char *kinds = count ? "pp" "pp" "p" "lili" "i" "iiiiiiiii"
                      : order ? "pp" "pp" "pp" "lili" "il" "iiiiiii"
                              : "pp" "pp" "pp" "lili" "il" "iiiiiiiii";
  EXPECT(strcmp(e->param_kinds, kinds) == 0, "the parameters are \"%s\": fuzz_api.c's model is out of date",
         e->param_kinds);
  enum { IDX, CNT, CU_Q, CU_K, FIRST, SECOND };
  const int IS = count ? 5 : 6, STRIDE_OFFSETS = count ? 9 : 10, SIZES = count ? 10 : 12;
  const int BLOCK_SIZE = SIZES + 4, NUM_SLOTS = SIZES + 5;
  const int FLAGS = count ? 18 : order ? 18 : 20;
  const int32_t flags = arg_i32(a, FLAGS);
  check_sel_common(e, a, &c, p, CU_Q, CU_K, SIZES, flags);
  EXPECT(arg_i32(a, BLOCK_SIZE) == c.block_size && arg_i32(a, NUM_SLOTS) == c.slots,
         "block_size, num_slots = %d, %d for the caller's %lld, %lld", (int)arg_i32(a, BLOCK_SIZE),
         (int)arg_i32(a, NUM_SLOTS), (long long)c.block_size, (long long)c.slots);
  if (order) {
    EXPECT((int64_t)grid == c.heads_kv * c.index_slots, "a grid of %u programs for %lld kv heads x %lld blocks",
           grid, (long long)c.heads_kv, (long long)c.index_slots);
  } else {
    const int64_t num_chunks = arg_i32(a, SIZES + 6);
    EXPECT(num_chunks == ceil_div(c.total_q * c.slots, e->block_m) && (int64_t)grid == c.heads_kv * num_chunks,
           "a grid of %u programs, %lld chunks of %d entries for %lld kv heads x %lld entries", grid,
           (long long)num_chunks, (int)e->block_m, (long long)c.heads_kv, (long long)(c.total_q * c.slots));
  }
  check_sel_index(e, a, &c, p, IDX, CNT, IS, flags);
  const int64_t stride_offsets = arg_i32(a, STRIDE_OFFSETS);
  if (count) {
    check_sel_index_rows(e, a, &c, FIRST, stride_offsets, c.index_slots + 1, "Offsets");
    return;
  }
  check_sel_index_rows(e, a, &c, FIRST, stride_offsets, order ? c.index_slots + 1 : c.index_slots,
                       order ? "Offsets" : "Cursors");
  check_sel_tokens(e, a, &c, SECOND, arg_i64(a, STRIDE_OFFSETS + 1));
}

#endif /* FUZZ_REACH_SEL_H */
