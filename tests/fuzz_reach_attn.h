/*
 * How far the attention kernels reach (tests/fuzz_api.c): the forward (pointer, TMA and Gluon kernels),
 * the dropout mask, the backward's pre-pass, dK/dV, dQ, cast and sink reduction, each launch's packed
 * arguments against the caller's problem and every byte range each pointer argument can reach.
 */
#ifndef FUZZ_REACH_ATTN_H
#define FUZZ_REACH_ATTN_H

#include "fuzz_reach.h"

/* The caller's attention problem as src/attn/aotk_attn_validate.c reads it (validated: the call was
 * accepted). */
typedef struct attn_caller {
  bool varlen;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim_qk, head_dim_v;
  int64_t total_q, total_k; /* packed: q's and k's rows */
} attn_caller;

static attn_caller attn_caller_problem(const aotk_attn_params *p) {
  attn_caller c;
  c.varlen = p->cu_seqlens_q.data != NULL || p->cu_seqlens_k.data != NULL;
  const int d = c.varlen ? 1 : 0; /* packed tensors have no batch dimension */
  c.batch = c.varlen ? p->cu_seqlens_q.shape[0] - 1 : p->q.shape[0];
  c.seqlen_q = c.varlen ? p->max_seqlen_q : p->q.shape[1];
  c.seqlen_k = c.varlen ? p->max_seqlen_k : p->k.shape[1];
  c.heads_q = p->q.shape[2 - d];
  c.heads_kv = p->k.shape[2 - d];
  c.head_dim_qk = p->q.shape[3 - d];
  c.head_dim_v = p->v.shape[3 - d];
  c.total_q = p->q.shape[0];
  c.total_k = p->k.shape[0];
  return c;
}

/* The sizes a launch packed are the caller's (a negative one: the kernel takes no such argument), the
 * group size divides them, and the head dims (head_dim8 * 8) fit the compiled ones. */
static void expect_attn_sizes(const aotk__kernel_entry *e, const attn_caller *c, int32_t flags, int64_t seqlen_q,
                              int64_t seqlen_k, int64_t heads_q, int64_t group_size, int64_t head_dim_qk,
                              int64_t head_dim_v) {
  EXPECT(((flags & ATTN_VARLEN) != 0) == c->varlen, "flags = %#x for a %s call", (unsigned)flags,
         c->varlen ? "varlen" : "dense");
  EXPECT(seqlen_q == c->seqlen_q && (seqlen_k < 0 || seqlen_k == c->seqlen_k) && heads_q == c->heads_q,
         "seqlen_q, seqlen_k, heads_q = %lld, %lld, %lld for the caller's %lld, %lld, %lld", (long long)seqlen_q,
         (long long)seqlen_k, (long long)heads_q, (long long)c->seqlen_q, (long long)c->seqlen_k,
         (long long)c->heads_q);
  EXPECT(group_size < 0 || (group_size >= 1 && heads_q == c->heads_kv * group_size),
         "group_size = %lld for %lld query and %lld kv heads", (long long)group_size, (long long)heads_q,
         (long long)c->heads_kv);
  EXPECT((head_dim_qk < 0 || (head_dim_qk == c->head_dim_qk && head_dim_qk <= e->head_dim_qk)) &&
             (head_dim_v < 0 || (head_dim_v == c->head_dim_v && head_dim_v <= e->head_dim_v)),
         "head dims %lld, %lld for the caller's %lld, %lld (compiled %d, %d)", (long long)head_dim_qk,
         (long long)head_dim_v, (long long)c->head_dim_qk, (long long)c->head_dim_v, (int)e->head_dim_qk,
         (int)e->head_dim_v);
}

/* num_blocks tiles of `block` rows cover `length` rows, the last one not empty. */
static void expect_blocks(const aotk__kernel_entry *e, int64_t num_blocks, int64_t block, int64_t length,
                          const char *what) {
  EXPECT(num_blocks >= 1 && (num_blocks - 1) * block < length && num_blocks * block >= length,
         "%s = %lld tiles of %lld rows for %lld rows", what, (long long)num_blocks, (long long)block,
         (long long)length);
}

/* One of q, k, v, out, dout, dq, dk, dv as an attention kernel reaches it. Its pointer and (batch: int64,
 * sequence: int32, head: int32) stride arguments are the caller's tensor's (src/attn/aotk_attn_validate.c's
 * view_4d: packed, batch stride 0). A program touches rows 0 .. seqlen - 1 of its sequence (the masks bound
 * nothing more: this is every row of every sequence and head, causal or windowed or not), `heads`
 * heads, `columns` columns. Dense, that is rows 0 .. seqlen - 1 of each batch entry. Packed, a
 * sequence's rows start at its cu_seqlens offset, device data that include/aotk.h makes the caller's
 * promise ("offsets past total_q / total_k are the caller's error"): by that promise, and by nothing
 * the host can see, rows 0 .. total - 1 of the packed tensor (q's rows for the query side, k's for the
 * key side), which is the box checked. The Triton kernels address the batch, a sequence's start, a
 * block's first row and head * stride_h in int64, and a row within its block (up to 256 rows) times
 * stride_s plus the column in int32: with `int32_offsets`, that may not wrap, or the model would not be
 * the kernel. Writes (`output`) stay inside the tensor's own span. */
static void check_attn_tensor(const aotk__kernel_entry *e, void **a, int pointer, int strides, const attn_caller *c,
                              const aotk_tensor *t, bool key_side, int64_t heads, int64_t columns, bool int32_offsets,
                              bool output, const char *argument) {
  const int64_t stride_b = arg_i64(a, strides), stride_s = arg_i32(a, strides + 1), stride_h = arg_i32(a, strides + 2);
  const int d = c->varlen ? 1 : 0;
  const int64_t seqlen = key_side ? c->seqlen_k : c->seqlen_q;
  const int64_t rows = c->varlen ? (key_side ? c->total_k : c->total_q) : seqlen;
  EXPECT(arg_pointer(a, pointer) == (uintptr_t)t->data &&
             (c->varlen ? stride_b == 0 : same_stride(stride_b, t->strides[0], c->batch)) &&
             same_stride(stride_s, t->strides[1 - d], rows) && same_stride(stride_h, t->strides[2 - d], heads),
         "%s = %#lx with strides (%lld, %lld, %lld) for the caller's %p with strides (%lld, %lld, %lld, %lld)",
         argument, (unsigned long)arg_pointer(a, pointer), (long long)stride_b, (long long)stride_s,
         (long long)stride_h, t->data, (long long)t->strides[0], (long long)t->strides[1], (long long)t->strides[2],
         (long long)t->strides[3]);
  EXPECT(!e->aligned || (arg_pointer(a, pointer) % 16 == 0 && stride_b % 16 == 0 && stride_s % 16 == 0 &&
                         stride_h % 16 == 0),
         "%s = %#lx with strides (%lld, %lld, %lld) for the aligned variant", argument,
         (unsigned long)arg_pointer(a, pointer), (long long)stride_b, (long long)stride_s, (long long)stride_h);
  if (int32_offsets) {
    const int64_t block_rows = seqlen < 256 ? seqlen : 256;
    EXPECT((__int128)(block_rows - 1) * magnitude(stride_s) + columns - 1 <= INT32_MAX,
           "%s: %lld rows of a block %lld apart: its 32-bit offsets wrap", argument, (long long)block_rows,
           (long long)stride_s);
  }
  const axis axes[] = {{0, c->varlen ? 1 : c->batch, stride_b}, {0, rows, stride_s}, {0, heads, stride_h},
                       {0, columns, 1}};
  check_box_in(arg_pointer(a, pointer), axes, 4, 2, e->function_name, argument, output ? t : NULL);
}

/* lse as the kernels index it: batch * stride_lb + head * stride_lh (int64 in every kernel; stride_lh
 * an int32 argument) + the sequence's first row + row; dense [batch, heads_q, seqlen_q], packed
 * [heads_q, total_q] (stride_lb 0; rows by the promise above). */
static void check_attn_lse(const aotk__kernel_entry *e, void **a, int pointer, int strides, const attn_caller *c,
                           const aotk_tensor *t, bool output) {
  const int64_t stride_b = arg_i64(a, strides), stride_h = arg_i32(a, strides + 1);
  EXPECT(arg_pointer(a, pointer) == (uintptr_t)t->data &&
             (c->varlen ? stride_b == 0 : same_stride(stride_b, t->strides[0], c->batch)) &&
             same_stride(stride_h, t->strides[c->varlen ? 0 : 1], c->heads_q),
         "Lse = %#lx with strides (%lld, %lld) for the caller's %p with strides (%lld, %lld)",
         (unsigned long)arg_pointer(a, pointer), (long long)stride_b, (long long)stride_h, t->data,
         (long long)t->strides[0], (long long)t->strides[1]);
  const axis axes[] = {{0, c->varlen ? 1 : c->batch, stride_b}, {0, c->heads_q, stride_h},
                       {0, c->varlen ? c->total_q : c->seqlen_q, 1}};
  check_box_in(arg_pointer(a, pointer), axes, 3, 4, e->function_name, "Lse", output ? t : NULL);
}

/* cu_seqlens (num_seqs + 1 offsets each, packed calls only), ALiBi slopes ([heads_q] or [batch, heads_q]
 * by stride_ab), sinks ([heads_q]) and the RNG state ({seed, offset}) where the flags have the kernel
 * read them: the caller's, as many as it reads (an argument index < 0: the kernel takes none). */
static void check_attn_features(const aotk__kernel_entry *e, void **a, const attn_caller *c, const aotk_attn_params *p,
                                int32_t flags, int cu_q, int cu_k, int alibi, int stride_ab, int sinks, int rng) {
  const int cu[2] = {cu_q, cu_k};
  const aotk_tensor *cu_tensors[2] = {&p->cu_seqlens_q, &p->cu_seqlens_k};
  for (int i = 0; i < 2; i++) {
    if (cu[i] < 0) continue;
    EXPECT(arg_pointer(a, cu[i]) == (uintptr_t)cu_tensors[i]->data, "CuSeqlens%c = %#lx for the caller's %p",
           i ? 'K' : 'Q', (unsigned long)arg_pointer(a, cu[i]), cu_tensors[i]->data);
    if (c->varlen) check_vector(e, a, cu[i], c->batch + 1, 4, i ? "CuSeqlensK" : "CuSeqlensQ");
  }
  if (alibi >= 0 && (flags & ATTN_ALIBI)) {
    const aotk_tensor *t = &p->alibi_slopes;
    const int64_t packed_stride = arg_i64(a, stride_ab);
    EXPECT(arg_pointer(a, alibi) == (uintptr_t)t->data &&
               (t->rank == 2 ? same_stride(packed_stride, t->strides[0], c->batch) : packed_stride == 0),
           "AlibiSlopes = %#lx, stride_ab = %lld for the caller's %p", (unsigned long)arg_pointer(a, alibi),
           (long long)arg_i64(a, stride_ab), t->data);
    const axis axes[] = {{0, c->batch, arg_i64(a, stride_ab)}, {0, c->heads_q, 1}};
    check_box(arg_pointer(a, alibi), axes, 2, 4, e->function_name, "AlibiSlopes");
  }
  if (sinks >= 0 && (flags & ATTN_SINKS)) {
    EXPECT(arg_pointer(a, sinks) == (uintptr_t)p->sinks.data, "Sinks = %#lx for the caller's %p",
           (unsigned long)arg_pointer(a, sinks), p->sinks.data);
    check_vector(e, a, sinks, c->heads_q, 4, "Sinks");
  }
  if (rng >= 0 && (flags & ATTN_DROPOUT)) {
    EXPECT(arg_pointer(a, rng) == (uintptr_t)p->rng_state.data, "RngState = %#lx for the caller's %p",
           (unsigned long)arg_pointer(a, rng), p->rng_state.data);
    check_vector(e, a, rng, 2, 8, "RngState");
  }
}

/* The forward: attn_fwd and attn_fwd_tma (kernels/attn_fwd.py), attn_fwd_hopper(_wg3)
 * (kernels/attn_fwd_hopper.py). Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, AlibiSlopes, Sinks, RngState,
 * the q, k, v, out strides, stride_lb, stride_lh, stride_ab, 10 int32 (seqlen_q, seqlen_k, heads_q,
 * group_size, num_m_blocks, head_dim_qk8, head_dim_v8, window_left, window_right, flags), 5 scalars;
 * the TMA kernels then Q's, K's and V's descriptors, the Gluon ones num_tiles. Tiles (query block,
 * sequence, query head), query block fastest: one program each, or for the persistent Gluon kernel at
 * most num_tiles programs walking them. The Triton kernels mask the head dims at head_dim8 * 8; the
 * Gluon kernel and the TMA boxes use the compiled ones, which the host chooses equal to the problem's
 * (a wider one would read and write the next head's columns). The Gluon kernel reads nothing through
 * Q, K and V (their descriptors instead) and the TMA one nothing through Q: checked all the same. */
static void check_attn_fwd_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  const bool hopper = e->family == AOTK__FAMILY_ATTN_FWD_HOPPER || e->family == AOTK__FAMILY_ATTN_FWD_HOPPER_WG3 ||
                      e->family == AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT;
  const bool tma = hopper || e->family == AOTK__FAMILY_ATTN_FWD_TMA;
  enum { POINTER_KERNEL_PARAMS = 40 };
  EXPECT(strncmp(e->param_kinds, "ppppp" "pp" "ppp" "liiliiliilii" "lil" "iiiii" "iiiii" "fff" "if",
                 POINTER_KERNEL_PARAMS) == 0 &&
             strcmp(e->param_kinds + POINTER_KERNEL_PARAMS, hopper ? "tttti" : tma ? "ttt" : "") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of the forward is out of date", e->param_kinds);
  const aotk_attn_params *p = seen.attn;
  EXPECT(p != NULL, "launched by a call other than aotk_attn_fwd");
  enum { Q, K, V, OUT, LSE, CU_Q, CU_K, ALIBI, SINKS, RNG, QB, KB = 13, VB = 16, OB = 19, LB = 22, AB = 24, SEQLEN_Q,
         SEQLEN_K, HEADS_Q, GROUP_SIZE, M_BLOCKS, DQK8, DV8, FLAGS = 34, DESCRIPTORS = 40, NUM_TILES = 68 };
  const attn_caller c = attn_caller_problem(p);
  const int64_t seqlen_q = arg_i32(a, SEQLEN_Q), heads_q = arg_i32(a, HEADS_Q), group_size = arg_i32(a, GROUP_SIZE);
  const int64_t m_blocks = arg_i32(a, M_BLOCKS);
  const int64_t head_dim_qk = 8 * (int64_t)arg_i32(a, DQK8), head_dim_v = 8 * (int64_t)arg_i32(a, DV8);
  const int32_t flags = arg_i32(a, FLAGS);
  expect_attn_sizes(e, &c, flags, seqlen_q, arg_i32(a, SEQLEN_K), heads_q, group_size, head_dim_qk, head_dim_v);
  EXPECT(!tma || (e->head_dim_qk == head_dim_qk && e->head_dim_v == head_dim_v),
         "compiled for head dims %d, %d; the problem's are %lld, %lld", (int)e->head_dim_qk, (int)e->head_dim_v,
         (long long)head_dim_qk, (long long)head_dim_v);
  expect_blocks(e, m_blocks, e->block_m, seqlen_q, "num_m_blocks");
  const int64_t tiles = hopper ? arg_i32(a, NUM_TILES) : (int64_t)grid;
  EXPECT(tiles == c.batch * heads_q * m_blocks && (int64_t)grid <= tiles,
         "%u programs over %lld tiles for %lld sequences x %lld heads x %lld query blocks", grid, (long long)tiles,
         (long long)c.batch, (long long)heads_q, (long long)m_blocks);
  EXPECT(((flags & ATTN_WRITE_LSE) != 0) == (p->lse.data != NULL), "flags = %#x, lse.data = %p", (unsigned)flags,
         p->lse.data);

  const int64_t heads_kv = heads_q / group_size;
  check_attn_tensor(e, a, Q, QB, &c, &p->q, false, heads_q, head_dim_qk, true, false, "Q");
  check_attn_tensor(e, a, K, KB, &c, &p->k, true, heads_kv, head_dim_qk, true, false, "K");
  check_attn_tensor(e, a, V, VB, &c, &p->v, true, heads_kv, head_dim_v, true, false, "V");
  check_attn_tensor(e, a, OUT, OB, &c, &p->out, false, heads_q, head_dim_v, !hopper, true, "Out");
  if (flags & ATTN_WRITE_LSE) check_attn_lse(e, a, LSE, LB, &c, &p->lse, true);
  check_attn_features(e, a, &c, p, flags, CU_Q, CU_K, ALIBI, AB, SINKS, RNG);
  /* The Gluon forward's fourth descriptor is over out where it stores O by TMA (FLAG_O_TMA), else over v
   * (unused, in O's 64-row boxes); only it sets the flag. */
  EXPECT(hopper || (flags & ATTN_O_TMA) == 0, "flags = %#x: FLAG_O_TMA for a kernel without O's descriptor",
         (unsigned)flags);
  if (tma) {
    const bool o_tma = (flags & ATTN_O_TMA) != 0;
    const descriptor_role roles[] = {{Q, hopper ? 64 : e->block_m, head_dim_qk, 2, "DescQ"},
                                     {K, e->block_n, head_dim_qk, 2, "DescK"},
                                     {V, e->block_n, head_dim_v, 2, "DescV"},
                                     {o_tma ? OUT : V, 64, head_dim_v, 2, o_tma ? "DescO" : "DescO (v's)"}};
    check_descriptors(e, a, DESCRIPTORS, roles, hopper ? 4 : 3);
  }
}

/* attn_dropout_mask (kernels/attn_fwd.py): Mask, CuSeqlensQ, CuSeqlensK, RngState, the mask's batch,
 * head and row strides (int64), 6 int32 (seqlen_q, seqlen_k, heads_q, num_m_blocks, flags, threshold);
 * one program per (query block, sequence, head) writing rows < the sequence's query length and columns
 * < its key length of the caller's [batch, heads_q, seqlen_q, seqlen_k] mask. */
static void check_attn_dropout_mask_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "p" "pp" "p" "lll" "iiiiii") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_dropout_mask is out of date", e->param_kinds);
  const aotk_attn_params *p = seen.attn;
  EXPECT(p != NULL && p->dropout_mask.data != NULL, "launched by a call other than aotk_attn_fwd with dropout_mask");
  enum { MASK, CU_Q, CU_K, RNG, MB, MH, MS, SEQLEN_Q, SEQLEN_K, HEADS_Q, M_BLOCKS, FLAGS };
  const attn_caller c = attn_caller_problem(p);
  const aotk_tensor *t = &p->dropout_mask;
  const int64_t seqlen_q = arg_i32(a, SEQLEN_Q), seqlen_k = arg_i32(a, SEQLEN_K), heads_q = arg_i32(a, HEADS_Q);
  const int64_t m_blocks = arg_i32(a, M_BLOCKS);
  const int32_t flags = arg_i32(a, FLAGS);
  expect_attn_sizes(e, &c, flags, seqlen_q, seqlen_k, heads_q, -1, -1, -1);
  EXPECT((flags & ~ATTN_VARLEN) == 0 && (flags & ATTN_DROPOUT) == 0, "flags = %#x", (unsigned)flags);
  expect_blocks(e, m_blocks, e->block_m, seqlen_q, "num_m_blocks");
  EXPECT((int64_t)grid == m_blocks * c.batch * heads_q, "a grid of %u programs for %lld x %lld x %lld", grid,
         (long long)m_blocks, (long long)c.batch, (long long)heads_q);
  EXPECT(arg_pointer(a, MASK) == (uintptr_t)t->data && same_stride(arg_i64(a, MB), t->strides[0], c.batch) &&
             same_stride(arg_i64(a, MH), t->strides[1], heads_q) &&
             same_stride(arg_i64(a, MS), t->strides[2], seqlen_q),
         "Mask = %#lx with strides (%lld, %lld, %lld) for the caller's %p", (unsigned long)arg_pointer(a, MASK),
         (long long)arg_i64(a, MB), (long long)arg_i64(a, MH), (long long)arg_i64(a, MS), t->data);
  const axis axes[] = {{0, c.batch, arg_i64(a, MB)}, {0, heads_q, arg_i64(a, MH)}, {0, seqlen_q, arg_i64(a, MS)},
                       {0, seqlen_k, 1}};
  check_box_in(arg_pointer(a, MASK), axes, 4, 1, e->function_name, "Mask", t);
  check_attn_features(e, a, &c, p, ATTN_DROPOUT, CU_Q, CU_K, -1, -1, -1, RNG);
}

/* attn_bwd_preprocess (kernels/attn_bwd.py): Out, DOut, Lse, Delta, LseLog2, CuSeqlensQ, Sinks,
 * SinkPartial, out's and dout's strides, stride_lb, stride_lh, 7 int32 (seqlen_q, heads_q, num_seqs,
 * num_m_blocks, stats_stride, head_dim_v8, flags); one program per (block of statistics rows, sequence,
 * query head). It reads out, dout and lse at the sequence's rows and writes every row of its block,
 * padding included (unmasked), into the workspace's delta and lse * log2(e), [num_seqs * heads_q,
 * stats_stride] fp32 each; with sinks, one partial per program into [heads_q, num_seqs, num_m_blocks]. */
static void check_attn_preprocess_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "ppppp" "p" "pp" "liilii" "li" "iiii" "i" "ii") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_bwd_preprocess is out of date", e->param_kinds);
  const aotk_attn_params *p = seen.attn;
  EXPECT(p != NULL, "launched by a call other than aotk_attn_bwd");
  enum { OUT, DOUT, LSE, DELTA, LSE_LOG2, CU_Q, SINKS, SINK_PARTIAL, OB, DB = 11, LB = 14, SEQLEN_Q = 16, HEADS_Q,
         NUM_SEQS, M_BLOCKS, STATS_STRIDE, DV8, FLAGS };
  const attn_caller c = attn_caller_problem(p);
  const int64_t seqlen_q = arg_i32(a, SEQLEN_Q), heads_q = arg_i32(a, HEADS_Q), num_seqs = arg_i32(a, NUM_SEQS);
  const int64_t m_blocks = arg_i32(a, M_BLOCKS), stats_stride = arg_i32(a, STATS_STRIDE);
  const int64_t head_dim_v = 8 * (int64_t)arg_i32(a, DV8);
  const int32_t flags = arg_i32(a, FLAGS);
  expect_attn_sizes(e, &c, flags, seqlen_q, -1, heads_q, -1, -1, head_dim_v);
  EXPECT((flags & ~(ATTN_VARLEN | ATTN_SINKS)) == 0 && ((flags & ATTN_SINKS) != 0) == (p->dsinks.data != NULL),
         "flags = %#x, dsinks.data = %p", (unsigned)flags, p->dsinks.data);
  /* Every statistics row of a sequence written, none past its own row. */
  EXPECT(num_seqs == c.batch && m_blocks >= 1 && m_blocks * e->block_m >= seqlen_q &&
             m_blocks * e->block_m <= stats_stride,
         "num_seqs = %lld, %lld blocks of %d rows, stats_stride = %lld for %lld sequences of %lld rows",
         (long long)num_seqs, (long long)m_blocks, (int)e->block_m, (long long)stats_stride, (long long)c.batch,
         (long long)seqlen_q);
  EXPECT((int64_t)grid == m_blocks * num_seqs * heads_q, "a grid of %u programs for %lld x %lld x %lld", grid,
         (long long)m_blocks, (long long)num_seqs, (long long)heads_q);

  check_attn_tensor(e, a, OUT, OB, &c, &p->out, false, heads_q, head_dim_v, true, false, "Out");
  check_attn_tensor(e, a, DOUT, DB, &c, &p->dout, false, heads_q, head_dim_v, true, false, "DOut");
  check_attn_lse(e, a, LSE, LB, &c, &p->lse, false);
  EXPECT(stats_stride % 16 == 0, "stats_stride = %lld, hinted a multiple of 16", (long long)stats_stride);
  expect_aligned(e, a, DELTA, "Delta");
  expect_aligned(e, a, LSE_LOG2, "LseLog2");
  const axis stats_axes[] = {{0, num_seqs * heads_q, stats_stride}, {0, m_blocks * e->block_m, 1}};
  check_workspace_part(e, arg_pointer(a, DELTA), stats_axes, 2, 4, "Delta");
  check_workspace_part(e, arg_pointer(a, LSE_LOG2), stats_axes, 2, 4, "LseLog2");
  check_attn_features(e, a, &c, p, flags, CU_Q, -1, -1, -1, SINKS, -1);
  if (flags & ATTN_SINKS) {
    const axis partial_axes[] = {{0, heads_q * num_seqs * m_blocks, 1}};
    check_workspace_part(e, arg_pointer(a, SINK_PARTIAL), partial_axes, 1, 4, "SinkPartial");
  }
}

/* The statistics the dK/dV and dQ passes load, unmasked: rows below seqlen_q rounded up to the tile's
 * BLOCK_M (the pre-pass padded them), of statistics rows sequence * heads_q + head. */
static void check_attn_stats(const aotk__kernel_entry *e, void **a, const attn_caller *c, int lse_log2, int delta,
                             int64_t stats_stride) {
  const int64_t stats_rows = ceil_div(c->seqlen_q, e->block_m) * e->block_m;
  EXPECT(stats_rows <= stats_stride && stats_stride % 16 == 0,
         "stats_stride = %lld (hinted a multiple of 16) for %lld rows loaded per statistics row",
         (long long)stats_stride, (long long)stats_rows);
  expect_aligned(e, a, lse_log2, "LseLog2");
  expect_aligned(e, a, delta, "Delta");
  const axis axes[] = {{0, c->batch * c->heads_q, stats_stride}, {0, stats_rows, 1}};
  check_workspace_part(e, arg_pointer(a, lse_log2), axes, 2, 4, "LseLog2");
  check_workspace_part(e, arg_pointer(a, delta), axes, 2, 4, "Delta");
}

/* The dK/dV pass: attn_bwd_dkdv (kernels/attn_bwd.py) and the Gluon attn_bwd_dkdv_hopper and
 * attn_bwd_fused_hopper and their dropout forms (kernels/attn_bwd_hopper.py). Q, K, V, DOut, LseLog2, Delta, DK, DV,
 * CuSeqlensQ, CuSeqlensK, AlibiSlopes, RngState, the q, k, v, dout, dk, dv strides, stride_ab, 7 int32
 * (seqlen_q, seqlen_k, heads_q, heads_kv, group_size, num_n_blocks, stats_stride), head_dim_qk8,
 * head_dim_v8, window_left, window_right, flags, 7 scalars; the Gluon passes then Q's, K's, V's and dO's
 * descriptors, the fused one the fp32 dQ accumulator's ([batch * heads_q, stats_stride, head_dim_qk] in
 * the workspace, reduce-added into). One program per (key block, sequence, kv head): its keys' rows of
 * k, v, dk and dv, every query row of its group's heads in q and dout, and their statistics. */
static void check_attn_dkdv_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  const bool fused =
      e->family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER || e->family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER_DROPOUT;
  const bool hopper =
      fused || e->family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER || e->family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER_DROPOUT;
  enum { POINTER_KERNEL_PARAMS = 49 };
  EXPECT(strncmp(e->param_kinds, "pppppppp" "pp" "pp" "liiliiliiliiliilii" "l" "iiiiii" "i" "iiiii" "f" "fff" "if",
                 POINTER_KERNEL_PARAMS) == 0 &&
             strcmp(e->param_kinds + POINTER_KERNEL_PARAMS, fused ? "ttttt" : hopper ? "tttt" : "") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of the dK/dV pass is out of date", e->param_kinds);
  const aotk_attn_params *p = seen.attn;
  EXPECT(p != NULL, "launched by a call other than aotk_attn_bwd");
  enum { Q, K, V, DOUT, LSE_LOG2, DELTA, DK, DV, CU_Q, CU_K, ALIBI, RNG, QB, KB = 15, VB = 18, DOB = 21, DKB = 24,
         DVB = 27, AB = 30, SEQLEN_Q, SEQLEN_K, HEADS_Q, HEADS_KV, GROUP_SIZE, N_BLOCKS, STATS_STRIDE, DQK8, DV8,
         FLAGS = 42, DESCRIPTORS = 49 };
  const attn_caller c = attn_caller_problem(p);
  const int64_t seqlen_k = arg_i32(a, SEQLEN_K), heads_q = arg_i32(a, HEADS_Q), heads_kv = arg_i32(a, HEADS_KV);
  const int64_t n_blocks = arg_i32(a, N_BLOCKS);
  const int64_t head_dim_qk = 8 * (int64_t)arg_i32(a, DQK8), head_dim_v = 8 * (int64_t)arg_i32(a, DV8);
  const int32_t flags = arg_i32(a, FLAGS);
  expect_attn_sizes(e, &c, flags, arg_i32(a, SEQLEN_Q), seqlen_k, heads_q, arg_i32(a, GROUP_SIZE), head_dim_qk,
                    head_dim_v);
  EXPECT(heads_kv == c.heads_kv, "heads_kv = %lld for the caller's %lld", (long long)heads_kv, (long long)c.heads_kv);
  EXPECT(!hopper || (e->head_dim_qk == head_dim_qk && e->head_dim_v == head_dim_v),
         "compiled for head dims %d, %d; the problem's are %lld, %lld", (int)e->head_dim_qk, (int)e->head_dim_v,
         (long long)head_dim_qk, (long long)head_dim_v);
  expect_blocks(e, n_blocks, e->block_n, seqlen_k, "num_n_blocks");
  EXPECT((int64_t)grid == n_blocks * c.batch * heads_kv, "a grid of %u programs for %lld x %lld x %lld", grid,
         (long long)n_blocks, (long long)c.batch, (long long)heads_kv);

  check_attn_tensor(e, a, Q, QB, &c, &p->q, false, heads_q, head_dim_qk, !hopper, false, "Q");
  check_attn_tensor(e, a, K, KB, &c, &p->k, true, heads_kv, head_dim_qk, !hopper, false, "K");
  check_attn_tensor(e, a, V, VB, &c, &p->v, true, heads_kv, head_dim_v, !hopper, false, "V");
  check_attn_tensor(e, a, DOUT, DOB, &c, &p->dout, false, heads_q, head_dim_v, !hopper, false, "DOut");
  check_attn_tensor(e, a, DK, DKB, &c, &p->dk, true, heads_kv, head_dim_qk, !hopper, true, "DK");
  check_attn_tensor(e, a, DV, DVB, &c, &p->dv, true, heads_kv, head_dim_v, !hopper, true, "DV");
  check_attn_stats(e, a, &c, LSE_LOG2, DELTA, arg_i32(a, STATS_STRIDE));
  check_attn_features(e, a, &c, p, flags, CU_Q, CU_K, ALIBI, AB, -1, RNG);
  if (hopper) {
    const descriptor_role roles[] = {{Q, e->block_m, head_dim_qk, 2, "DescQ"},
                                     {K, e->block_n, head_dim_qk, 2, "DescK"},
                                     {V, e->block_n, head_dim_v, 2, "DescV"},
                                     {DOUT, e->block_m, head_dim_v, 2, "DescDO"},
                                     {-1, e->block_m, head_dim_qk, 4, "DQAcc"}};
    check_descriptors(e, a, DESCRIPTORS, roles, fused ? 5 : 4);
  }
}

/* The dQ pass: attn_bwd_dq (kernels/attn_bwd.py) and the Gluon attn_bwd_dq_hopper
 * (kernels/attn_bwd_dq_hopper.py). Q, K, V, DOut, LseLog2, Delta, DQ, CuSeqlensQ, CuSeqlensK,
 * AlibiSlopes, RngState, the q, k, v, dout, dq strides, stride_ab, 6 int32 (seqlen_q, seqlen_k, heads_q,
 * group_size, num_m_blocks, stats_stride), head_dim_qk8, head_dim_v8, window_left, window_right, flags,
 * 7 scalars; the Gluon pass then Q's, K's, V's and dO's descriptors. One program per (query block,
 * sequence, query head). */
static void check_attn_dq_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  const bool hopper = e->family == AOTK__FAMILY_ATTN_BWD_DQ_HOPPER;
  enum { POINTER_KERNEL_PARAMS = 44 };
  EXPECT(strncmp(e->param_kinds, "ppppppp" "pp" "pp" "liiliiliiliilii" "l" "iiiii" "i" "iiiii" "f" "fff" "if",
                 POINTER_KERNEL_PARAMS) == 0 &&
             strcmp(e->param_kinds + POINTER_KERNEL_PARAMS, hopper ? "tttt" : "") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of the dQ pass is out of date", e->param_kinds);
  const aotk_attn_params *p = seen.attn;
  EXPECT(p != NULL, "launched by a call other than aotk_attn_bwd");
  enum { Q, K, V, DOUT, LSE_LOG2, DELTA, DQ, CU_Q, CU_K, ALIBI, RNG, QB, KB = 14, VB = 17, DOB = 20, DQB = 23, AB = 26,
         SEQLEN_Q, SEQLEN_K, HEADS_Q, GROUP_SIZE, M_BLOCKS, STATS_STRIDE, DQK8, DV8, FLAGS = 37, DESCRIPTORS = 44 };
  const attn_caller c = attn_caller_problem(p);
  const int64_t seqlen_q = arg_i32(a, SEQLEN_Q), heads_q = arg_i32(a, HEADS_Q), group_size = arg_i32(a, GROUP_SIZE);
  const int64_t m_blocks = arg_i32(a, M_BLOCKS);
  const int64_t head_dim_qk = 8 * (int64_t)arg_i32(a, DQK8), head_dim_v = 8 * (int64_t)arg_i32(a, DV8);
  const int32_t flags = arg_i32(a, FLAGS);
  expect_attn_sizes(e, &c, flags, seqlen_q, arg_i32(a, SEQLEN_K), heads_q, group_size, head_dim_qk, head_dim_v);
  EXPECT(!hopper || (e->head_dim_qk == head_dim_qk && e->head_dim_v == head_dim_v),
         "compiled for head dims %d, %d; the problem's are %lld, %lld", (int)e->head_dim_qk, (int)e->head_dim_v,
         (long long)head_dim_qk, (long long)head_dim_v);
  expect_blocks(e, m_blocks, e->block_m, seqlen_q, "num_m_blocks");
  EXPECT((int64_t)grid == m_blocks * c.batch * heads_q, "a grid of %u programs for %lld x %lld x %lld", grid,
         (long long)m_blocks, (long long)c.batch, (long long)heads_q);

  const int64_t heads_kv = heads_q / group_size;
  check_attn_tensor(e, a, Q, QB, &c, &p->q, false, heads_q, head_dim_qk, !hopper, false, "Q");
  check_attn_tensor(e, a, K, KB, &c, &p->k, true, heads_kv, head_dim_qk, !hopper, false, "K");
  check_attn_tensor(e, a, V, VB, &c, &p->v, true, heads_kv, head_dim_v, !hopper, false, "V");
  check_attn_tensor(e, a, DOUT, DOB, &c, &p->dout, false, heads_q, head_dim_v, !hopper, false, "DOut");
  check_attn_tensor(e, a, DQ, DQB, &c, &p->dq, false, heads_q, head_dim_qk, !hopper, true, "DQ");
  check_attn_stats(e, a, &c, LSE_LOG2, DELTA, arg_i32(a, STATS_STRIDE));
  check_attn_features(e, a, &c, p, flags, CU_Q, CU_K, ALIBI, AB, -1, RNG);
  if (hopper) {
    const descriptor_role roles[] = {{Q, e->block_m, head_dim_qk, 2, "DescQ"},
                                     {K, e->block_n, head_dim_qk, 2, "DescK"},
                                     {V, e->block_n, head_dim_v, 2, "DescV"},
                                     {DOUT, e->block_m, head_dim_v, 2, "DescDO"}};
    check_descriptors(e, a, DESCRIPTORS, roles, 4);
  }
}

/* attn_bwd_dq_convert (kernels/attn_bwd.py): DQAcc, DQ, CuSeqlensQ, dq's strides, 5 int32 (seqlen_q,
 * heads_q, num_m_blocks, stats_stride, flags); one program per (query block, sequence, query head),
 * loading its block of the accumulator unmasked, [batch * heads_q, stats_stride, HEAD_DIM] fp32, and
 * storing the sequence's rows of dq, HEAD_DIM (compiled) columns, with 64-bit offsets. */
static void check_attn_dq_convert_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "ppp" "lii" "iii" "i" "i") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_bwd_dq_convert is out of date", e->param_kinds);
  const aotk_attn_params *p = seen.attn;
  EXPECT(p != NULL, "launched by a call other than aotk_attn_bwd");
  enum { DQ_ACC, DQ, CU_Q, QB, SEQLEN_Q = 6, HEADS_Q, M_BLOCKS, STATS_STRIDE, FLAGS };
  const attn_caller c = attn_caller_problem(p);
  const int64_t seqlen_q = arg_i32(a, SEQLEN_Q), heads_q = arg_i32(a, HEADS_Q), m_blocks = arg_i32(a, M_BLOCKS);
  const int64_t stats_stride = arg_i32(a, STATS_STRIDE), head_dim = e->head_dim_qk;
  const int32_t flags = arg_i32(a, FLAGS);
  expect_attn_sizes(e, &c, flags, seqlen_q, -1, heads_q, -1, head_dim, -1);
  EXPECT((flags & ~ATTN_VARLEN) == 0, "flags = %#x", (unsigned)flags);
  expect_blocks(e, m_blocks, e->block_m, seqlen_q, "num_m_blocks");
  EXPECT(m_blocks * e->block_m <= stats_stride && stats_stride % 16 == 0,
         "%lld blocks of %d rows in accumulator rows of %lld (hinted a multiple of 16)", (long long)m_blocks,
         (int)e->block_m, (long long)stats_stride);
  expect_aligned(e, a, DQ_ACC, "DQAcc");
  EXPECT((int64_t)grid == m_blocks * c.batch * heads_q, "a grid of %u programs for %lld x %lld x %lld", grid,
         (long long)m_blocks, (long long)c.batch, (long long)heads_q);
  const axis acc_axes[] = {{0, c.batch * heads_q, stats_stride * head_dim}, {0, m_blocks * e->block_m, head_dim},
                           {0, head_dim, 1}};
  check_workspace_part(e, arg_pointer(a, DQ_ACC), acc_axes, 3, 4, "DQAcc");
  check_attn_tensor(e, a, DQ, QB, &c, &p->dq, false, heads_q, head_dim, false, true, "DQ");
  check_attn_features(e, a, &c, p, flags, CU_Q, -1, -1, -1, -1, -1);
}

/* attn_bwd_sink_reduce (kernels/attn_bwd.py): SinkPartial, DSinks, count; one program per query head,
 * reading its `count` partials and writing its dsinks entry. */
static void check_attn_sink_reduce_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "ppi") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_bwd_sink_reduce is out of date", e->param_kinds);
  const aotk_attn_params *p = seen.attn;
  EXPECT(p != NULL && p->dsinks.data != NULL, "launched by a call other than aotk_attn_bwd with dsinks");
  enum { SINK_PARTIAL, DSINKS, COUNT };
  const attn_caller c = attn_caller_problem(p);
  const int64_t count = arg_i32(a, COUNT);
  EXPECT((int64_t)grid == c.heads_q && count >= 1, "a grid of %u programs and %lld partials for %lld heads", grid,
         (long long)count, (long long)c.heads_q);
  EXPECT(arg_pointer(a, DSINKS) == (uintptr_t)p->dsinks.data, "DSinks = %#lx for the caller's %p",
         (unsigned long)arg_pointer(a, DSINKS), p->dsinks.data);
  const axis partial_axes[] = {{0, c.heads_q, count}, {0, count, 1}};
  check_workspace_part(e, arg_pointer(a, SINK_PARTIAL), partial_axes, 2, 4, "SinkPartial");
  const axis dsinks_axes[] = {{0, c.heads_q, 1}};
  check_box_in(arg_pointer(a, DSINKS), dsinks_axes, 1, 4, e->function_name, "DSinks", &p->dsinks);
}

#endif /* FUZZ_REACH_ATTN_H */
