/*
 * How tests/fuzz_api.c builds a call from its input: a small valid problem of each op (attention,
 * selection, decoding, the merge) in fake regions, the spans the caller describes, then a run of edits
 * that overwrite any field; and the checks that a call agrees with its query.
 */
#ifndef FUZZ_CALLS_H
#define FUZZ_CALLS_H

#include "fuzz_reach.h"

/* ---- building a call ---------------------------------------------------------------------------- */

enum { T_Q, T_K, T_V, T_OUT, T_LSE, T_DOUT, T_DQ, T_DK, T_DV, T_CU_Q, T_CU_K, T_ALIBI, T_SINKS, T_DSINKS, T_RNG,
       T_MASK, T_IDX, T_CNT, T_TABLE, T_SEQLENS, T_PARTIALS, T_LSE_PARTIALS, T_K_NEW, T_V_NEW, T_LEFTPAD,
       TENSOR_SLOTS };

static void *region(int slot) { return (void *)(REGION_BASE + (uintptr_t)slot * REGION_STRIDE); }

static aotk_tensor make(int slot, aotk_dtype dtype, int rank, const int64_t *shape) {
  aotk_tensor t;
  memset(&t, 0, sizeof t);
  t.data = region(slot);
  t.dtype = dtype;
  t.rank = rank;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; d--) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d] > 0 ? shape[d] : 1;
  }
  return t;
}

/* Like make, with the innermost rows `row_elements` apart (>= the last dimension): padded rows, which keep
 * every stride a multiple of 16 elements where the head dim is not. */
static aotk_tensor make_rows(int slot, aotk_dtype dtype, int rank, const int64_t *shape, int64_t row_elements) {
  aotk_tensor t = make(slot, dtype, rank, shape);
  int64_t stride = row_elements;
  for (int d = rank - 2; d >= 0 && row_elements > shape[rank - 1]; d--) {
    t.strides[d] = stride;
    stride *= shape[d] > 0 ? shape[d] : 1;
  }
  return t;
}

/* One edit of a tensor: a shape or stride entry, the rank, the dtype, the pointer, or dropping it. */
static void edit_tensor(reader *r, aotk_tensor *t, aotk_tensor *const *all, int count) {
  switch (take(r, 1) % 9) {
    case 0:
      t->shape[take(r, 1) % AOTK_TENSOR_MAX_RANK] = take_size(r);
      break;
    case 1:
      t->strides[take(r, 1) % AOTK_TENSOR_MAX_RANK] = take_size(r);
      break;
    case 2:
      t->rank = (int32_t)take_range(r, -1, AOTK_TENSOR_MAX_RANK + 1);
      break;
    case 3:
      t->dtype = (aotk_dtype)take_range(r, -1, 8);
      break;
    case 4:
      t->data = NULL;
      break;
    case 5:
      t->data = (void *)((uintptr_t)t->data + (uintptr_t)take_range(r, -16, 16));
      break;
    case 6:
      t->data = all[take(r, 1) % (unsigned)count]->data;
      break;
    case 7: { /* a stride times a factor: padded rows, or overlapping ones */
      int d = (int)(take(r, 1) % AOTK_TENSOR_MAX_RANK);
      t->strides[d] = (int64_t)((uint64_t)t->strides[d] * (uint64_t)take_range(r, 0, 4));
      break;
    }
    default:
      *t = *all[take(r, 1) % (unsigned)count];
      break;
  }
}

static const int head_dims[] = {32, 64, 96, 128, 192, 256, 40, 80, 16, 512};

static aotk_dtype take_dtype(reader *r) { return take(r, 1) % 2 ? AOTK_DTYPE_BFLOAT16 : AOTK_DTYPE_FLOAT16; }

static aotk_attn_params attn_problem(reader *r, bool backward) {
  aotk_attn_params p = AOTK_ATTN_PARAMS_INIT;
  const aotk_dtype dtype = take_dtype(r);
  const int64_t batch = take_range(r, 1, 4), sq = take_range(r, 1, 300), sk = take_range(r, 1, 300);
  const int64_t hk = take_range(r, 1, 4), hq = hk * take_range(r, 1, 4);
  const int64_t dqk = head_dims[take(r, 1) % 10];
  const int64_t dv = take(r, 1) % 4 == 0 ? head_dims[take(r, 1) % 10] : dqk;
  const unsigned features = (unsigned)take(r, 2);
  const bool varlen = features & 1;
  if (varlen) {
    const int64_t total_q = batch * sq, total_k = batch * sk;
    p.q = make(T_Q, dtype, 3, (int64_t[]){total_q, hq, dqk});
    p.k = make(T_K, dtype, 3, (int64_t[]){total_k, hk, dqk});
    p.v = make(T_V, dtype, 3, (int64_t[]){total_k, hk, dv});
    p.out = make(T_OUT, dtype, 3, (int64_t[]){total_q, hq, dv});
    p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 2, (int64_t[]){hq, total_q});
    p.cu_seqlens_q = make(T_CU_Q, AOTK_DTYPE_INT32, 1, (int64_t[]){batch + 1});
    p.cu_seqlens_k = make(T_CU_K, AOTK_DTYPE_INT32, 1, (int64_t[]){batch + 1});
    p.max_seqlen_q = (int32_t)sq;
    p.max_seqlen_k = (int32_t)sk;
  } else {
    p.q = make(T_Q, dtype, 4, (int64_t[]){batch, sq, hq, dqk});
    p.k = make(T_K, dtype, 4, (int64_t[]){batch, sk, hk, dqk});
    p.v = make(T_V, dtype, 4, (int64_t[]){batch, sk, hk, dv});
    p.out = make(T_OUT, dtype, 4, (int64_t[]){batch, sq, hq, dv});
    p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 3, (int64_t[]){batch, hq, sq});
  }
  if (features & 2) p.lse.data = NULL;
  p.causal = (features >> 2) & 1;
  p.causal_align = (int32_t)((features >> 3) & 1);
  if (features & 16) {
    p.window_left = (int32_t)take_range(r, -1, 300);
    p.window_right = (int32_t)take_range(r, -1, 300);
  }
  if (features & 32) p.softcap = take(r, 1) % 2 ? 30.0f : take_float(r);
  if (features & 64) p.alibi_slopes = make(T_ALIBI, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){hq});
  if (features & 128) p.sinks = make(T_SINKS, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){hq});
  if (features & 256) {
    p.dropout_p = take(r, 1) % 2 ? 0.1f : take_float(r);
    p.rng_state = make(T_RNG, AOTK_DTYPE_INT64, 1, (int64_t[]){2});
  }
  if (features & 512) p.softmax_scale = take_float(r);
  if (backward) {
    p.dout = p.out;
    p.dout.data = region(T_DOUT);
    p.dq = p.q;
    p.dq.data = region(T_DQ);
    p.dk = p.k;
    p.dk.data = region(T_DK);
    p.dv = p.v;
    p.dv.data = region(T_DV);
    p.deterministic = (features >> 10) & 1;
    if ((features & 2048) && p.sinks.data != NULL) p.dsinks = make(T_DSINKS, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){hq});
  }
  if ((features & 4096) && p.dropout_p > 0.0f) {
    p.dropout_mask = make(T_MASK, AOTK_DTYPE_UINT8, 4, (int64_t[]){batch, hq, sq, sk});
  }
  return p;
}

static aotk_sel_params sel_problem(reader *r, bool backward) {
  aotk_sel_params p = AOTK_SEL_PARAMS_INIT;
  static const int64_t dims[][2] = {{64, 64}, {128, 128}, {192, 128}, {96, 96}};
  const aotk_dtype dtype = take_dtype(r);
  const int64_t total_q = take_range(r, 1, 5000), total_k = take_range(r, 1, 5000);
  const int64_t hk = take_range(r, 1, 4), hq = hk * take_range(r, 1, 64), slots = take_range(r, 1, 40);
  const int64_t *d = dims[take(r, 1) % 4];
  const unsigned features = (unsigned)take(r, 1);
  p.q = make(T_Q, dtype, 3, (int64_t[]){total_q, hq, d[0]});
  p.k = make(T_K, dtype, 3, (int64_t[]){total_k, hk, d[0]});
  p.v = make(T_V, dtype, 3, (int64_t[]){total_k, hk, d[1]});
  p.out = make(T_OUT, dtype, 3, (int64_t[]){total_q, hq, d[1]});
  p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 2, (int64_t[]){total_q, hq});
  if ((features & 1) && !backward) p.lse.data = NULL;
  p.block_size = (int32_t)(32 << (take(r, 1) % 3));
  p.block_idx = make(T_IDX, AOTK_DTYPE_INT32, 3, (int64_t[]){total_q, hk, slots});
  if (features & 2) p.block_cnt = make(T_CNT, AOTK_DTYPE_INT32, 2, (int64_t[]){total_q, hk});
  if (features & 4) {
    const int64_t seqs = take_range(r, 1, 8);
    p.cu_seqlens_q = make(T_CU_Q, AOTK_DTYPE_INT32, 1, (int64_t[]){seqs + 1});
    p.cu_seqlens_k = make(T_CU_K, AOTK_DTYPE_INT32, 1, (int64_t[]){seqs + 1});
    p.max_seqlen_k = (int32_t)take_range(r, 1, total_k);
  }
  if (features & 8) p.softmax_scale = take_float(r);
  if (backward) {
    p.dout = p.out;
    p.dout.data = region(T_DOUT);
    p.dq = p.q;
    p.dq.data = region(T_DQ);
    p.dk = p.k;
    p.dk.data = region(T_DK);
    p.dv = p.v;
    p.dv.data = region(T_DV);
  }
  return p;
}

/* Head dims decoding takes: multiples of 8 up to 256, run in the compiled pairs (those that are not
 * multiples of 16 are aligned only with padded rows). */
static const int decode_head_dims[] = {64, 128, 256, 32, 96, 192, 16, 48, 80, 160, 8, 24, 40, 72, 136, 248};
static int64_t round_up16(int64_t n) { return (n + 15) / 16 * 16; }

static aotk_decode_params decode_problem(reader *r) {
  aotk_decode_params p = AOTK_DECODE_PARAMS_INIT;
  const aotk_dtype dtype = take_dtype(r);
  const int64_t batch = take_range(r, 1, 8);
  const int64_t seqlen_q = take(r, 1) % 2 ? 1 : take_range(r, 1, AOTK_DECODE_MAX_SEQLEN_Q);
  const int64_t hk = take_range(r, 1, 8), hq = hk * (take(r, 1) % 4 == 0 ? 16 : take_range(r, 1, 8));
  const int64_t dqk = decode_head_dims[take(r, 1) % 16];
  const int64_t dv = take(r, 1) % 4 == 0 ? decode_head_dims[take(r, 1) % 16] : dqk;
  const unsigned features = (unsigned)take(r, 2);
  const bool padded = (features & 1) || dqk % 16 != 0 || dv % 16 != 0;
  const int64_t row_qk = padded ? round_up16(dqk + 8) : dqk, row_v = padded ? round_up16(dv + 8) : dv;
  /* Packed queries (a prefill over the cache): total_q tokens, at most max_seqlen_q per request, which
   * has no 16-token limit. */
  const bool varlen = features & 4096;
  int64_t total_q = 0;
  if (varlen) {
    p.max_seqlen_q = (int32_t)(take(r, 1) % 2 ? take_range(r, 1, 32) : take_range(r, 1, 5000));
    total_q = take(r, 1) % 4 == 0 ? take_range(r, 1, 3) : take_range(r, 1, batch * p.max_seqlen_q);
    p.cu_seqlens_q = make(T_CU_Q, AOTK_DTYPE_INT32, 1, (int64_t[]){batch + 1});
    p.q = make_rows(T_Q, dtype, 3, (int64_t[]){total_q, hq, dqk}, row_qk);
  } else {
    p.q = make_rows(T_Q, dtype, 4, (int64_t[]){batch, seqlen_q, hq, dqk}, row_qk);
  }
  int64_t capacity;
  if (features & 2) {
    static const int64_t page_sizes[] = {16, 64, 256, 1, 2, 3, 17, 128};
    const int64_t page_size = page_sizes[take(r, 1) % 8], pages_per_request = take_range(r, 1, 64);
    const int64_t num_pages = take_range(r, 1, batch * pages_per_request + 3);
    capacity = page_size * pages_per_request;
    p.k_cache = make_rows(T_K, dtype, 4, (int64_t[]){num_pages, page_size, hk, dqk}, row_qk);
    p.v_cache = make_rows(T_V, dtype, 4, (int64_t[]){num_pages, page_size, hk, dv}, row_v);
    p.block_table = make(T_TABLE, AOTK_DTYPE_INT32, 2, (int64_t[]){batch, pages_per_request});
  } else {
    capacity = take(r, 1) % 2 ? take_range(r, 1, 300) : take_range(r, 1, 20000);
    p.k_cache = make_rows(T_K, dtype, 4, (int64_t[]){batch, capacity, hk, dqk}, row_qk);
    p.v_cache = make_rows(T_V, dtype, 4, (int64_t[]){batch, capacity, hk, dv}, row_v);
  }
  p.cache_seqlens = make(T_SEQLENS, AOTK_DTYPE_INT32, 1, (int64_t[]){batch});
  if (features & 8192) p.cache_leftpad = make(T_LEFTPAD, AOTK_DTYPE_INT32, 1, (int64_t[]){batch});
  if (varlen) {
    p.out = make_rows(T_OUT, dtype, 3, (int64_t[]){total_q, hq, dv}, row_v);
    if (!(features & 4)) p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 2, (int64_t[]){hq, total_q});
  } else {
    p.out = make_rows(T_OUT, dtype, 4, (int64_t[]){batch, seqlen_q, hq, dv}, row_v);
    if (!(features & 4)) p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 3, (int64_t[]){batch, hq, seqlen_q});
  }
  p.causal = (features >> 3) & 1;
  if (features & 16) {
    p.window_left = (int32_t)take_range(r, -1, 300);
    p.window_right = p.causal ? (int32_t)take_range(r, -1, 0) : (int32_t)take_range(r, -1, 300);
  }
  if (features & 32) p.softcap = take(r, 1) % 2 ? 30.0f : take_float(r);
  if (features & 64) {
    p.alibi_slopes = take(r, 1) % 2 ? make(T_ALIBI, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){hq})
                                    : make(T_ALIBI, AOTK_DTYPE_FLOAT32, 2, (int64_t[]){batch, hq});
  }
  if (features & 128) p.sinks = make(T_SINKS, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){hq});
  if (features & 256) p.softmax_scale = take_float(r);
  switch ((features >> 9) & 3) { /* the splits: chosen (0), forced, few forced, or chosen for a bound */
    case 1:
      p.num_splits = (int32_t)take_range(r, 1, AOTK_DECODE_MAX_SPLITS);
      break;
    case 2:
      p.num_splits = (int32_t)take_range(r, 1, 8);
      break;
    case 3:
      p.max_seqlen_k = (int32_t)take_range(r, 1, capacity);
      break;
  }
  /* Packed queries run unsplit and without appending: mostly valid (0 or 1), sometimes a refusal. */
  if (varlen && p.num_splits > 1 && take(r, 1) % 8 != 0) p.num_splits = (int32_t)(take(r, 1) % 2);
  const bool append = (features & 2048) && (!varlen || take(r, 1) % 8 == 0);
  if (append) { /* appending: a few tokens, or up to past the capacity (the rest is dropped) */
    const int64_t seqlen_new = take(r, 1) % 4 == 0 ? take_range(r, 1, capacity + 20) : take_range(r, 1, 16);
    p.k_new = make_rows(T_K_NEW, dtype, 4, (int64_t[]){batch, seqlen_new, hk, dqk}, row_qk);
    p.v_new = make_rows(T_V_NEW, dtype, 4, (int64_t[]){batch, seqlen_new, hk, dv}, row_v);
  }
  return p;
}

/* Head dims the merge takes: any multiple of 8. */
static const int merge_head_dims[] = {128, 64, 256, 8, 16, 24, 40, 96, 512, 1000, 72, 2048};

static aotk_dtype take_float_dtype(reader *r) {
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_FLOAT32, AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};
  return dtypes[take(r, 1) % 3];
}

/* The view of `t` without its first dimension (partial 0 of the partials: the in-place merge's out). */
static aotk_tensor drop_first(const aotk_tensor *t) {
  aotk_tensor view = *t;
  view.rank = t->rank - 1;
  for (int d = 0; d < AOTK_TENSOR_MAX_RANK - 1; d++) {
    view.shape[d] = t->shape[d + 1];
    view.strides[d] = t->strides[d + 1];
  }
  view.shape[AOTK_TENSOR_MAX_RANK - 1] = view.strides[AOTK_TENSOR_MAX_RANK - 1] = 0;
  return view;
}

static aotk_merge_params merge_problem(reader *r) {
  aotk_merge_params p = AOTK_MERGE_PARAMS_INIT;
  const aotk_dtype partial_dtype = take_float_dtype(r);
  const aotk_dtype out_dtype = take(r, 1) % 2 ? partial_dtype : take_float_dtype(r);
  const int64_t num_partials = take(r, 1) % 4 == 0 ? take_range(r, 1, 300) : take_range(r, 1, 8);
  const int64_t heads = take_range(r, 1, 16), head_dim = merge_head_dims[take(r, 1) % 12];
  const unsigned features = (unsigned)take(r, 1);
  /* Padded partial rows (a split's workspace pads to 16 floats; others pad by any 8). */
  const int64_t row = features & 2 ? head_dim + 8 * take_range(r, 1, 4) : head_dim;
  if (features & 1) { /* packed: [num_partials, total_q, heads, head_dim] */
    const int64_t total_q = take_range(r, 1, 2000);
    p.out_partials = make_rows(T_PARTIALS, partial_dtype, 4, (int64_t[]){num_partials, total_q, heads, head_dim}, row);
    p.lse_partials = make(T_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 3, (int64_t[]){num_partials, heads, total_q});
    p.out = make(T_OUT, out_dtype, 3, (int64_t[]){total_q, heads, head_dim});
    p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 2, (int64_t[]){heads, total_q});
  } else {
    const int64_t batch = take_range(r, 1, 4), seqlen_q = take_range(r, 1, 300);
    p.out_partials =
        make_rows(T_PARTIALS, partial_dtype, 5, (int64_t[]){num_partials, batch, seqlen_q, heads, head_dim}, row);
    p.lse_partials = make(T_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 4, (int64_t[]){num_partials, batch, heads, seqlen_q});
    p.out = make(T_OUT, out_dtype, 4, (int64_t[]){batch, seqlen_q, heads, head_dim});
    p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 3, (int64_t[]){batch, heads, seqlen_q});
  }
  if (features & 4) { /* in place: out and lse are partial 0 */
    p.out = drop_first(&p.out_partials);
    p.lse = drop_first(&p.lse_partials);
  }
  if (features & 8) p.lse.data = NULL;
  if (features & 16) p.sinks = make(T_SINKS, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){heads});
  return p;
}

/* The spans of every tensor field of a params struct (the fields each call reads, as the header lists
 * them; the selection struct names a subset). */
static void attn_spans(const aotk_attn_params *p) {
  const aotk_tensor *t[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->dout, &p->dq, &p->dk, &p->dv,
                            &p->cu_seqlens_q, &p->cu_seqlens_k, &p->alibi_slopes, &p->sinks, &p->dsinks,
                            &p->rng_state, &p->dropout_mask};
  static const char *const names[] = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv", "cu_seqlens_q",
                                      "cu_seqlens_k", "alibi_slopes", "sinks", "dsinks", "rng_state",
                                      "dropout_mask"};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) add_tensor_span(t[i], names[i]);
}

static void sel_spans(const aotk_sel_params *p) {
  const aotk_tensor *t[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->cu_seqlens_q, &p->cu_seqlens_k,
                            &p->block_idx, &p->block_cnt, &p->dout, &p->dq, &p->dk, &p->dv};
  static const char *const names[] = {"q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_k", "block_idx",
                                      "block_cnt", "dout", "dq", "dk", "dv"};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) add_tensor_span(t[i], names[i]);
}

static void decode_spans(const aotk_decode_params *p) {
  const aotk_tensor *t[] = {&p->q,   &p->k_cache, &p->v_cache,      &p->block_table, &p->cache_seqlens,
                            &p->out, &p->lse,     &p->alibi_slopes, &p->sinks,       &p->k_new,
                            &p->v_new, &p->cu_seqlens_q, &p->cache_leftpad};
  static const char *const names[] = {"q", "k_cache", "v_cache", "block_table", "cache_seqlens", "out", "lse",
                                      "alibi_slopes", "sinks", "k_new", "v_new", "cu_seqlens_q", "cache_leftpad"};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) add_tensor_span(t[i], names[i]);
}

static void merge_spans(const aotk_merge_params *p) {
  const aotk_tensor *t[] = {&p->out_partials, &p->lse_partials, &p->out, &p->lse, &p->sinks};
  static const char *const names[] = {"out_partials", "lse_partials", "out", "lse", "sinks"};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) add_tensor_span(t[i], names[i]);
}

/* Edits: a tensor, a scalar, struct_size. */
static void edit_attn(reader *r, aotk_attn_params *p) {
  aotk_tensor *const all[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->dout, &p->dq, &p->dk, &p->dv,
                              &p->cu_seqlens_q, &p->cu_seqlens_k, &p->alibi_slopes, &p->sinks, &p->dsinks,
                              &p->rng_state, &p->dropout_mask};
  const int count = (int)(sizeof all / sizeof all[0]);
  switch (take(r, 1) % 6) {
    case 0:
    case 1:
      edit_tensor(r, all[take(r, 1) % (unsigned)count], all, count);
      break;
    case 2: {
      int32_t *ints[] = {&p->causal, &p->deterministic, &p->max_seqlen_q, &p->max_seqlen_k, &p->window_left,
                         &p->window_right, &p->causal_align};
      *ints[take(r, 1) % 7] = (int32_t)take_size(r);
      break;
    }
    case 3: {
      float *floats[] = {&p->softmax_scale, &p->softcap, &p->dropout_p};
      *floats[take(r, 1) % 3] = take_float(r);
      break;
    }
    case 4:
      p->struct_size = take(r, 1) % 2 ? (size_t)take_range(r, 0, sizeof *p + 8) : (size_t)take(r, 8);
      break;
    default:
      p->struct_size = offsetof(aotk_attn_params, cu_seqlens_q); /* a 0.1 caller */
      break;
  }
}

static void edit_sel(reader *r, aotk_sel_params *p) {
  aotk_tensor *const all[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->cu_seqlens_q, &p->cu_seqlens_k,
                              &p->block_idx, &p->block_cnt, &p->dout, &p->dq, &p->dk, &p->dv};
  const int count = (int)(sizeof all / sizeof all[0]);
  switch (take(r, 1) % 5) {
    case 0:
    case 1:
      edit_tensor(r, all[take(r, 1) % (unsigned)count], all, count);
      break;
    case 2:
      *(take(r, 1) % 2 ? &p->max_seqlen_k : &p->block_size) = (int32_t)take_size(r);
      break;
    case 3:
      p->softmax_scale = take_float(r);
      break;
    default:
      p->struct_size = take(r, 1) % 2 ? (size_t)take_range(r, 0, sizeof *p + 8) : (size_t)take(r, 8);
      break;
  }
}

/* A dense decoding call's q, out and lse as packed ones (each request seqlen_q tokens in a row), or a
 * packed call's back as dense ones of max_seqlen_q tokens per request, over the same caches: mostly
 * valid when the layouts allow it, a refusal when they do not. */
/* Sizes make() can lay out: each >= 1, their product (its strides) far from overflowing int64. */
static bool repackable(const int64_t *sizes, int count) {
  int64_t product = 1;
  for (int i = 0; i < count; i++) {
    if (sizes[i] < 1 || __builtin_mul_overflow(product, sizes[i], &product) || product > (int64_t)1 << 48) return false;
  }
  return true;
}

static void repack_decode(reader *r, aotk_decode_params *p) {
  if (p->cu_seqlens_q.data == NULL) {
    const int64_t batch = p->q.shape[0], seqlen_q = p->q.shape[1];
    if (!repackable((const int64_t[]){batch, seqlen_q, p->q.shape[2]}, 3)) return;
    const int64_t total_q = batch * seqlen_q;
    const aotk_tensor q = p->q, out = p->out;
    p->q.rank = p->out.rank = 3;
    p->q.shape[0] = p->out.shape[0] = total_q;
    for (int d = 1; d < 3; d++) {
      p->q.shape[d] = q.shape[d + 1], p->q.strides[d - 1] = q.strides[d];
      p->out.shape[d] = out.shape[d + 1], p->out.strides[d - 1] = out.strides[d];
    }
    p->q.strides[2] = q.strides[3], p->out.strides[2] = out.strides[3];
    p->q.shape[3] = p->q.strides[3] = p->out.shape[3] = p->out.strides[3] = 0;
    if (p->lse.data != NULL) p->lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 2, (int64_t[]){q.shape[2], total_q});
    p->cu_seqlens_q = make(T_CU_Q, AOTK_DTYPE_INT32, 1, (int64_t[]){batch + 1});
    p->max_seqlen_q = (int32_t)(take(r, 1) % 2 ? seqlen_q : take_size(r));
  } else {
    const int64_t batch = p->cu_seqlens_q.shape[0] - 1, seqlen_q = p->max_seqlen_q;
    const int64_t heads_q = p->q.shape[1], dqk = p->q.shape[2], dv = p->out.shape[2];
    if (!repackable((const int64_t[]){batch, seqlen_q, heads_q, dqk}, 4) ||
        !repackable((const int64_t[]){batch, seqlen_q, heads_q, dv}, 4)) {
      p->cu_seqlens_q.data = NULL;
      return;
    }
    p->q = make(T_Q, p->q.dtype, 4, (int64_t[]){batch, seqlen_q, heads_q, dqk});
    p->out = make(T_OUT, p->out.dtype, 4, (int64_t[]){batch, seqlen_q, heads_q, dv});
    if (p->lse.data != NULL) p->lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 3, (int64_t[]){batch, heads_q, seqlen_q});
    if (take(r, 1) % 4 != 0) p->cu_seqlens_q.data = NULL; /* else: the dense layouts with cu_seqlens_q */
  }
}

static void edit_decode(reader *r, aotk_decode_params *p) {
  aotk_tensor *const all[] = {&p->q,   &p->k_cache, &p->v_cache,      &p->block_table, &p->cache_seqlens,
                              &p->out, &p->lse,     &p->alibi_slopes, &p->sinks,       &p->k_new,
                              &p->v_new, &p->cu_seqlens_q, &p->cache_leftpad};
  const int count = (int)(sizeof all / sizeof all[0]);
  switch (take(r, 1) % 9) {
    case 0:
    case 1:
      edit_tensor(r, all[take(r, 1) % (unsigned)count], all, count);
      break;
    case 2: {
      int32_t *ints[] = {&p->causal,     &p->window_left,  &p->window_right,
                         &p->num_splits, &p->max_seqlen_k, &p->max_seqlen_q};
      *ints[take(r, 1) % 6] = (int32_t)take_size(r);
      break;
    }
    case 7: /* max_seqlen_q near its bounds: 0, 1, the old 16-token limit, 2^31 - 1 */
      p->max_seqlen_q = (int32_t)(take(r, 1) % 2 ? take_range(r, -1, 18) : INT32_MAX - take_range(r, 0, 2));
      break;
    case 8:
      repack_decode(r, p);
      break;
    case 3: /* near the bounds */
      *(take(r, 1) % 2 ? &p->num_splits : &p->max_seqlen_k) = (int32_t)take_range(r, -1, AOTK_DECODE_MAX_SPLITS + 1);
      break;
    case 4:
      *(take(r, 1) % 2 ? &p->softmax_scale : &p->softcap) = take_float(r);
      break;
    case 5: /* appending turned off (one or both dropped), or on with the caches' layout */
      if (p->k_new.data != NULL || p->v_new.data != NULL) {
        const unsigned which = (unsigned)take(r, 1) % 3;
        if (which != 1) p->k_new.data = NULL;
        if (which != 0) p->v_new.data = NULL;
      } else {
        const int64_t seqlen_new = take_size(r);
        p->k_new = p->k_cache, p->v_new = p->v_cache;
        p->k_new.data = region(T_K_NEW), p->v_new.data = region(T_V_NEW);
        p->k_new.shape[0] = p->v_new.shape[0] = p->q.shape[0];
        p->k_new.shape[1] = p->v_new.shape[1] = seqlen_new;
      }
      break;
    default:
      p->struct_size = take(r, 1) % 2 ? (size_t)take_range(r, 0, sizeof *p + 8) : (size_t)take(r, 8);
      break;
  }
}

static void edit_merge(reader *r, aotk_merge_params *p) {
  aotk_tensor *const all[] = {&p->out_partials, &p->lse_partials, &p->out, &p->lse, &p->sinks};
  const int count = (int)(sizeof all / sizeof all[0]);
  if (take(r, 1) % 5 != 0) {
    edit_tensor(r, all[take(r, 1) % (unsigned)count], all, count);
  } else {
    p->struct_size = take(r, 1) % 2 ? (size_t)take_range(r, 0, sizeof *p + 8) : (size_t)take(r, 8);
  }
}

/* A query's info as a caller of some version allocates it: exactly struct_size bytes (at least the size
 * field), so that AddressSanitizer sees a write past them; bytes past what the library knows must stay
 * untouched. NULL sometimes. */
enum { INFO_POISON = 0xa5 };
static aotk_kernel_info *take_info(reader *r, size_t *bytes) {
  switch (take(r, 1) % 5) {
    case 1:
      *bytes = offsetof(aotk_kernel_info, num_splits); /* a 0.3 caller */
      break;
    case 2:
      *bytes = (size_t)take_range(r, 0, sizeof(aotk_kernel_info) + 16);
      break;
    case 3:
      return NULL;
    default:
      *bytes = sizeof(aotk_kernel_info);
      break;
  }
  const size_t allocated = *bytes > sizeof(size_t) ? *bytes : sizeof(size_t);
  unsigned char *info = malloc(allocated);
  if (info == NULL) fail("out of memory");
  memset(info, INFO_POISON, allocated);
  memcpy(info, bytes, sizeof *bytes);
  return (aotk_kernel_info *)(void *)info;
}

static void check_info_tail(const aotk_kernel_info *info, size_t bytes) {
  for (size_t i = sizeof *info; i < bytes; i++) {
    if (((const unsigned char *)info)[i] != INFO_POISON) fail("a query wrote past the aotk_kernel_info it knows");
  }
}

/* The call agrees with its query: "exactly the status the call itself would return before launching"
 * (the decoding call also checks its workspace, which the query does not), and, accepted, the launches
 * it announced. */
static bool workspace_refusal(aotk_status status) {
  return status == AOTK_ERROR_NULL_POINTER || status == AOTK_ERROR_WORKSPACE_TOO_SMALL ||
         status == AOTK_ERROR_MISALIGNED_POINTER || status == AOTK_ERROR_SIZE_OVERFLOW;
}

static void check_agrees_with_query(aotk_status asked, aotk_status status, bool workspace_checked) {
  if (asked != AOTK_OK ? status != asked : status != AOTK_OK && !(workspace_checked && workspace_refusal(status))) {
    fprintf(stderr, "fuzz_api: the query said %s, the call returned %s (%s)\n", aotk_status_name(asked),
            aotk_status_name(status), aotk_last_error());
    fail("a call and its query disagree");
  }
  if (status == AOTK_OK && seen.launches != seen.announced_info.launches) {
    fprintf(stderr, "fuzz_api: the query announced %d launches, the call made %d\n",
            (int)seen.announced_info.launches, seen.launches);
    fail("a call and its query disagree");
  }
}

#endif /* FUZZ_CALLS_H */
