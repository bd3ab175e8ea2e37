/* The problems and rules of the API tests: see api_problems.h. */
#include "api_problems.h"
aotk_attn_params params_for(problem p) {
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = aotk_tensor_4d(FAKE_Q, p.dtype, p.batch, p.seqlen_q, p.heads_q, p.head_dim);
  params.k = aotk_tensor_4d(FAKE_K, p.dtype, p.batch, p.seqlen_k, p.heads_kv, p.head_dim);
  params.v = aotk_tensor_4d(FAKE_V, p.dtype, p.batch, p.seqlen_k, p.heads_kv, dim_v(&p));
  params.out = aotk_tensor_4d(FAKE_OUT, p.dtype, p.batch, p.seqlen_q, p.heads_q, dim_v(&p));
  if (p.with_lse) params.lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, p.batch, p.heads_q, p.seqlen_q);
  return params;
}

aotk_attn_params bwd_params_for(problem p) {
  p.with_lse = true;
  aotk_attn_params params = params_for(p);
  params.dout = aotk_tensor_4d(FAKE_DOUT, p.dtype, p.batch, p.seqlen_q, p.heads_q, dim_v(&p));
  params.dq = aotk_tensor_4d(FAKE_DQ, p.dtype, p.batch, p.seqlen_q, p.heads_q, p.head_dim);
  params.dk = aotk_tensor_4d(FAKE_DK, p.dtype, p.batch, p.seqlen_k, p.heads_kv, p.head_dim);
  params.dv = aotk_tensor_4d(FAKE_DV, p.dtype, p.batch, p.seqlen_k, p.heads_kv, dim_v(&p));
  return params;
}

aotk_attn_params varlen_params_for(problem p, int64_t total_q, int64_t total_k, bool bwd) {
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  const int64_t dv = dim_v(&p);
  params.q = aotk_tensor_3d(FAKE_Q, p.dtype, total_q, p.heads_q, p.head_dim);
  params.k = aotk_tensor_3d(FAKE_K, p.dtype, total_k, p.heads_kv, p.head_dim);
  params.v = aotk_tensor_3d(FAKE_V, p.dtype, total_k, p.heads_kv, dv);
  params.out = aotk_tensor_3d(FAKE_OUT, p.dtype, total_q, p.heads_q, dv);
  if (p.with_lse || bwd) params.lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, p.heads_q, total_q);
  params.cu_seqlens_q = aotk_tensor_1d(FAKE_CU_SEQLENS_Q, AOTK_DTYPE_INT32, p.batch + 1);
  params.cu_seqlens_k = aotk_tensor_1d(FAKE_CU_SEQLENS_K, AOTK_DTYPE_INT32, p.batch + 1);
  params.max_seqlen_q = (int32_t)p.seqlen_q;
  params.max_seqlen_k = (int32_t)p.seqlen_k;
  if (bwd) {
    params.dout = aotk_tensor_3d(FAKE_DOUT, p.dtype, total_q, p.heads_q, dv);
    params.dq = aotk_tensor_3d(FAKE_DQ, p.dtype, total_q, p.heads_q, p.head_dim);
    params.dk = aotk_tensor_3d(FAKE_DK, p.dtype, total_k, p.heads_kv, p.head_dim);
    params.dv = aotk_tensor_3d(FAKE_DV, p.dtype, total_k, p.heads_kv, dv);
  }
  return params;
}

size_t bwd_stats_bytes(const problem *p) {
  return (size_t)8 * (size_t)p->batch * (size_t)p->heads_q * (size_t)stats_stride(p);
}

size_t bwd_workspace_bytes_for(const problem *p, bool dsinks) {
  size_t bytes = bwd_stats_bytes(p);
  if (dsinks) {
    bytes += (size_t)4 * (size_t)(p->heads_q * p->batch * ceil_div(stats_stride(p), PREPROCESS_BLOCK_M));
  }
  return bytes;
}

size_t bwd_accumulator_offset(const problem *p, bool dsinks) {
  return (bwd_workspace_bytes_for(p, dsinks) + 255) / 256 * 256;
}

size_t bwd_accumulator_elements(const problem *p) {
  return (size_t)p->batch * (size_t)p->heads_q * (size_t)stats_stride(p) * (size_t)p->head_dim;
}

size_t bwd_fused_workspace_bytes_for(const problem *p, bool dsinks) {
  return bwd_accumulator_offset(p, dsinks) + 4 * bwd_accumulator_elements(p);
}

aotk_status run_op(aotk_op op, const aotk_attn_params *params) {
  if (op == AOTK_OP_ATTN_FWD) return aotk_attn_fwd(params, FAKE_STREAM);
  return aotk_attn_bwd(params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM);
}

void poison_info(aotk_kernel_info *info) {
  memset(info, POISON, sizeof *info);
  info->struct_size = sizeof *info;
}

bool info_untouched(const aotk_kernel_info *info) {
  const unsigned char *bytes = (const unsigned char *)info;
  if (info->struct_size != sizeof *info) return false;
  for (size_t i = sizeof info->struct_size; i < sizeof *info; i++) {
    if (bytes[i] != POISON) return false;
  }
  return true;
}

const aotk__kernel_entry *table_row_named(const char *name, int arch) {
  for (int i = 0; i < aotk__kernel_count; i++) {
    if (aotk__kernel_table[i].arch == arch && strcmp(aotk__kernel_table[i].name, name) == 0) {
      return &aotk__kernel_table[i];
    }
  }
  return NULL;
}

/* The compiled head-dim pairs (q/k, v) of the attention kernels (codegen/aotk_catalog.py ATTN_HEAD_DIMS). */
static const int compiled_head_dims[][2] = {{32, 32}, {64, 64}, {128, 128}, {256, 256}, {256, 128}};

/* The TMA forward's (ATTN_TMA_HEAD_DIMS), the warp-specialized one's (ATTN_HOPPER_HEAD_DIMS) and that
 * one's three-warpgroup form's (ATTN_HOPPER_WG3_HEAD_DIMS): exact, never padded. The warp-specialized
 * forward runs (192, 128) as itself (Q and K in 64-column boxes), where the pointer kernel pads it to
 * (256, 128). */
static const int tma_head_dims[][2] = {{128, 128}, {256, 256}};
static const int hopper_head_dims[][2] = {{64, 64}, {128, 128}, {192, 128}, {256, 256}};
static const int hopper_wg3_head_dims[][2] = {{64, 64}};
/* The Gluon forward drawing dropout (ATTN_HOPPER_DROPOUT_HEAD_DIMS): exact. */
static const int hopper_dropout_head_dims[][2] = {{64, 64}, {128, 128}};
/* The sm_90 backward's Gluon dK/dV pass (ATTN_HOPPER_BWD_HEAD_DIMS), its fused form and the cast after it
 * (ATTN_HOPPER_BWD_FUSED_HEAD_DIMS), and the Gluon dQ pass (ATTN_HOPPER_BWD_DQ_HEAD_DIMS): exact. */
static const int hopper_bwd_head_dims[][2] = {{64, 64}, {128, 128}, {192, 128}, {256, 256}};
static const int hopper_fused_head_dims[][2] = {{64, 64}, {128, 128}};
static const int hopper_dq_head_dims[][2] = {{192, 128}, {256, 256}};

bool family_is_hopper_fwd(int family) {
  return family == AOTK__FAMILY_ATTN_FWD_HOPPER || family == AOTK__FAMILY_ATTN_FWD_HOPPER_WG3 ||
         family == AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT;
}

static bool family_is_hopper_bwd(int family) {
  return family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER || family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER ||
         family == AOTK__FAMILY_ATTN_BWD_DQ_CONVERT || family == AOTK__FAMILY_ATTN_BWD_DQ_HOPPER ||
         family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER_DROPOUT || family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER_DROPOUT;
}

/* The families with an EXTRAS variant (the catalog's axis "extras", or "extras_only" for the TMA forward,
 * which has nothing else): not the three-warpgroup forward, which runs only the plain forward, nor the
 * fused backward's dQ cast, which sees no scores (its one variant serves the EXTRAS fused pass too). */
static bool family_has_extras(int family) {
  return family == AOTK__FAMILY_ATTN_FWD || family == AOTK__FAMILY_ATTN_FWD_TMA ||
         family == AOTK__FAMILY_ATTN_FWD_HOPPER || family == AOTK__FAMILY_ATTN_BWD_DKDV ||
         family == AOTK__FAMILY_ATTN_BWD_DQ || family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER ||
         family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER || family == AOTK__FAMILY_ATTN_BWD_DQ_HOPPER;
}

void compiled_dims(int family, int64_t head_dim_qk, int64_t head_dim_v, int *qk, int *v) {
  *qk = 0;
  *v = 0;
  if (family == AOTK__FAMILY_ATTN_DROPOUT_MASK || family == AOTK__FAMILY_ATTN_BWD_SINK_REDUCE) return;
  if (family == AOTK__FAMILY_ATTN_BWD_PREPROCESS) {
    for (int size = 32; size <= 256 && *v == 0; size *= 2) *v = size >= head_dim_v ? size : 0;
    return;
  }
  if (family == AOTK__FAMILY_ATTN_FWD_TMA || family_is_hopper_fwd(family) || family_is_hopper_bwd(family)) {
    const bool hopper = family == AOTK__FAMILY_ATTN_FWD_HOPPER, wg3 = family == AOTK__FAMILY_ATTN_FWD_HOPPER_WG3;
    /* The dropout forms, forward and backward, share ATTN_HOPPER_DROPOUT_HEAD_DIMS'
     * (= ATTN_HOPPER_BWD_DROPOUT_HEAD_DIMS) pairs. */
    const bool dropout = family == AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT ||
                         family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER_DROPOUT ||
                         family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER_DROPOUT;
    const bool fused = family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER || family == AOTK__FAMILY_ATTN_BWD_DQ_CONVERT;
    const bool dq = family == AOTK__FAMILY_ATTN_BWD_DQ_HOPPER, dkdv = family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER;
    const int(*pairs)[2] = dkdv    ? hopper_bwd_head_dims
                           : fused ? hopper_fused_head_dims
                           : dq    ? hopper_dq_head_dims
                           : wg3   ? hopper_wg3_head_dims
                           : dropout ? hopper_dropout_head_dims
                           : hopper ? hopper_head_dims
                                    : tma_head_dims;
    const size_t count = dkdv    ? sizeof hopper_bwd_head_dims / sizeof hopper_bwd_head_dims[0]
                         : fused ? sizeof hopper_fused_head_dims / sizeof hopper_fused_head_dims[0]
                         : dq    ? sizeof hopper_dq_head_dims / sizeof hopper_dq_head_dims[0]
                         : wg3   ? sizeof hopper_wg3_head_dims / sizeof hopper_wg3_head_dims[0]
                         : dropout ? sizeof hopper_dropout_head_dims / sizeof hopper_dropout_head_dims[0]
                         : hopper ? sizeof hopper_head_dims / sizeof hopper_head_dims[0]
                                  : sizeof tma_head_dims / sizeof tma_head_dims[0];
    for (size_t i = 0; i < count; i++) {
      if (pairs[i][0] == head_dim_qk && pairs[i][1] == head_dim_v) *qk = (int)head_dim_qk, *v = (int)head_dim_v;
    }
    return;
  }
  for (size_t i = 0; i < sizeof compiled_head_dims / sizeof compiled_head_dims[0]; i++) {
    const int *pair = compiled_head_dims[i];
    if (pair[0] < head_dim_qk || pair[1] < head_dim_v) continue;
    if (*qk == 0 || pair[0] + pair[1] < *qk + *v) *qk = pair[0], *v = pair[1];
  }
}

bool row_is_variant(const aotk__kernel_entry *e, int family, int arch, aotk_dtype dtype, int qk, int v,
                    int aligned, int extras) {
  if (e->family != family || e->arch != arch || e->head_dim_qk != qk || e->head_dim_v != v) return false;
  if (family == AOTK__FAMILY_ATTN_DROPOUT_MASK || family == AOTK__FAMILY_ATTN_BWD_SINK_REDUCE) return true;
  return e->dtype == (int)dtype && e->aligned == aligned && e->extras == (family_has_extras(family) ? extras : 0);
}

const aotk__kernel_entry *expected_row(int family, int arch, aotk_dtype dtype, int64_t head_dim_qk,
                                       int64_t head_dim_v, int aligned, int extras, int64_t size_key) {
  int qk, v;
  compiled_dims(family, head_dim_qk, head_dim_v, &qk, &v);
  const aotk__kernel_entry *best = NULL;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (!row_is_variant(e, family, arch, dtype, qk, v, aligned, extras) || e->min_seqlen > size_key) continue;
    if (best == NULL || e->min_seqlen > best->min_seqlen) best = e;
  }
  return best;
}

const aotk__kernel_entry *expected_fwd_row(const aotk_attn_params *params, int family, int arch, int64_t head_dim_qk,
                                           int64_t head_dim_v, int aligned, int extras, int64_t size_key) {
  const aotk__kernel_entry *row =
      expected_row(family, arch, params->q.dtype, head_dim_qk, head_dim_v, aligned, extras, size_key);
  if (family != AOTK__FAMILY_ATTN_FWD_HOPPER || row == NULL) return row;
  const bool varlen = params->cu_seqlens_q.data != NULL;
  const int64_t seqlen_q = varlen ? params->max_seqlen_q : params->q.shape[1];
  const int64_t seqlen_k = varlen ? params->max_seqlen_k : params->k.shape[1];
  const int64_t limit = extras ? 1024 : 512;
  const bool causal = params->window_left < 0 && (params->causal || params->window_right == 0);
  if (!causal || seqlen_q > limit || seqlen_k > limit) return row;
  const int64_t short_key = (int64_t)1 << 30;
  const aotk__kernel_entry *short_row =
      expected_row(family, arch, params->q.dtype, head_dim_qk, head_dim_v, aligned, extras, short_key);
  return short_row != NULL && short_row->min_seqlen == short_key ? short_row : row;
}

/* Whether aotk's aligned kernels may run on t (include/aotk.h): a 16-byte-aligned address and strides
 * that are multiples of 16 elements, the last dimension's aside. */
static bool tensor_aligned16(const aotk_tensor *t) {
  if ((uintptr_t)t->data % 16 != 0) return false;
  for (int i = 0; i < t->rank - 1; i++) {
    if (t->strides[i] % 16 != 0) return false;
  }
  return true;
}

aotk_tensor as_4d(const aotk_tensor *t) {
  if (t->rank != 3) return *t;
  aotk_tensor v = {t->data, t->dtype, 4, {1, t->shape[0], t->shape[1], t->shape[2], 0, 0},
                   {0, t->strides[0], t->strides[1], t->strides[2], 0, 0}};
  return v;
}

/* Whether TMA can read t [batch, seqlen, heads, d] as the kernel's view [batch, seqlen, heads * d]: each
 * token's heads contiguous, token rows that do not overlap and are a multiple of 16 bytes apart, and
 * batches that do not overlap either (unless there is one batch, whose stride nothing uses). */
bool tma_readable(const aotk_tensor *caller_tensor) {
  const aotk_tensor view = as_4d(caller_tensor), *t = &view;
  if (t->rank != 4) return false;
  const int64_t row = t->shape[2] * t->shape[3];
  return t->strides[2] == t->shape[3] && t->strides[1] >= row && t->strides[1] % 8 == 0 &&
         (t->shape[0] == 1 || (t->strides[0] % 8 == 0 && t->strides[0] >= t->shape[1] * t->strides[1]));
}

int expected_fwd_family(const aotk_attn_params *params, int arch, bool from_ptx, int max_shared_bytes) {
  const bool varlen = params->cu_seqlens_q.data != NULL;
  if (arch != 90 || from_ptx || params->q.rank != (varlen ? 3 : 4)) return AOTK__FAMILY_ATTN_FWD;
  if (!tensor_aligned16(&params->q) || !tensor_aligned16(&params->k) || !tensor_aligned16(&params->v) ||
      !tensor_aligned16(&params->out)) {
    return AOTK__FAMILY_ATTN_FWD;
  }
  if (!tma_readable(&params->q) || !tma_readable(&params->k) || !tma_readable(&params->v)) return AOTK__FAMILY_ATTN_FWD;
  const int32_t window_right = params->causal == 1 ? 0 : params->window_right;
  const bool extras = params->softcap > 0.0f || params->alibi_slopes.data != NULL || params->dropout_p > 0.0f;
  /* The warp-specialized forward takes everything but dropout; its three-warpgroup form only the plain
   * forward without a mask, from WG3_MIN_SEQLEN_Q rows on; its dropout form dropout without softcap or
   * ALiBi (d64, d128). */
  const bool warp_specialized = params->dropout_p == 0.0f;
  const bool hopper_dropout =
      params->dropout_p > 0.0f && params->softcap == 0.0f && params->alibi_slopes.data == NULL;
  const int last = params->q.rank - 1;
  const int64_t seqlen_q = varlen ? params->max_seqlen_q : params->q.shape[1];
  const bool wg3 = warp_specialized && !extras && params->window_left < 0 && window_right < 0 &&
                   seqlen_q >= WG3_MIN_SEQLEN_Q;
  const int candidates[4] = {hopper_dropout ? AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT : -1,
                             wg3 ? AOTK__FAMILY_ATTN_FWD_HOPPER_WG3 : -1,
                             warp_specialized ? AOTK__FAMILY_ATTN_FWD_HOPPER : -1,
                             varlen ? -1 : AOTK__FAMILY_ATTN_FWD_TMA};
  for (int c = 0; c < 4; c++) {
    if (candidates[c] < 0) continue;
    int qk, v;
    compiled_dims(candidates[c], params->q.shape[last], params->v.shape[last], &qk, &v);
    for (int i = 0; i < aotk__kernel_count; i++) {
      const aotk__kernel_entry *e = &aotk__kernel_table[i];
      if (row_is_variant(e, candidates[c], 90, params->q.dtype, qk, v, 1, extras) && e->min_seqlen <= seqlen_q &&
          e->shared_bytes <= max_shared_bytes) {
        return candidates[c];
      }
    }
  }
  return AOTK__FAMILY_ATTN_FWD;
}

static bool expect_tma(const aotk_attn_params *params, int arch, bool from_ptx, int max_shared_bytes) {
  return expected_fwd_family(params, arch, from_ptx, max_shared_bytes) != AOTK__FAMILY_ATTN_FWD;
}

/* The problem's sizes as the kernels see them: dense, from q's and k's shapes; varlen, num_seqs
 * sequences of at most max_seqlen_q / max_seqlen_k rows. */
static bool params_varlen(const aotk_attn_params *params) { return params->cu_seqlens_q.data != NULL; }
static int64_t params_batch(const aotk_attn_params *params) {
  return params_varlen(params) ? params->cu_seqlens_q.shape[0] - 1 : params->q.shape[0];
}
static int64_t params_seqlen_q(const aotk_attn_params *params) {
  return params_varlen(params) ? params->max_seqlen_q : params->q.shape[1];
}
static int64_t params_seqlen_k(const aotk_attn_params *params) {
  return params_varlen(params) ? params->max_seqlen_k : params->k.shape[1];
}
static int64_t params_heads_q(const aotk_attn_params *params) { return params->q.shape[params->q.rank - 2]; }
static int64_t params_head_dim(const aotk_tensor *t) { return t->shape[t->rank - 1]; }

/* Whether the backward's dropout forms are the ones asked for: dropout without softcap or ALiBi. */
static bool bwd_dropout_form(const aotk_attn_params *params) {
  return params->dropout_p > 0.0f && params->softcap == 0.0f && params->alibi_slopes.data == NULL;
}

/* Whether the backward's Gluon passes cover the call (include/aotk.h, AOTK_FEATURE_TMA for
 * AOTK_OP_ATTN_BWD): on sm_90 cubins, dense or varlen (the packed tensors read as [1, total, heads * d]),
 * every tensor 16-byte aligned, q, k, v and dout readable by TMA, head dims exactly 64, 128 or 256 (q/k
 * and v equal) or (192, 128), and no dropout: any mask or window, sinks, and softcap and ALiBi (in the EXTRAS rows) are
 * theirs. Dropout without softcap or ALiBi at head dims 64 and 128: their dropout forms'. */
static bool bwd_hopper_covers(const aotk_attn_params *params, int arch, bool from_ptx) {
  if (arch != 90 || from_ptx || params->q.rank != (params_varlen(params) ? 3 : 4)) return false;
  const aotk_tensor *all[] = {&params->q,    &params->k,  &params->v,  &params->out,
                              &params->dout, &params->dq, &params->dk, &params->dv};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (!tensor_aligned16(all[i])) return false;
  }
  if (!tma_readable(&params->q) || !tma_readable(&params->k) || !tma_readable(&params->v) ||
      !tma_readable(&params->dout)) {
    return false;
  }
  const int64_t d = params_head_dim(&params->q);
  const int64_t dv = params_head_dim(&params->v);
  if (params->dropout_p != 0.0f) return bwd_dropout_form(params) && dv == d && (d == 64 || d == 128);
  return (dv == d && (d == 64 || d == 128 || d == 256)) || (d == 192 && dv == 128);
}

/* Whether the Gluon backward passes run their EXTRAS rows: softcap or ALiBi (dropout reaches only the
 * dropout forms, which have none; sinks enter only through the pre-pass's statistics). */
static int bwd_hopper_extras(const aotk_attn_params *params) {
  return params->softcap > 0.0f || params->alibi_slopes.data != NULL;
}

const aotk__kernel_entry *bwd_hopper_row(const aotk_attn_params *params) {
  const int64_t d = params_head_dim(&params->q), dv = params_head_dim(&params->v);
  if (params->dropout_p > 0.0f) {
    return expected_row(AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER_DROPOUT, 90, params->q.dtype, d, dv, 1, 0,
                        params_seqlen_k(params));
  }
  return expected_row(AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER, 90, params->q.dtype, d, dv, 1, bwd_hopper_extras(params),
                      params_seqlen_k(params));
}

bool expect_bwd_hopper(const aotk_attn_params *params, int arch, bool from_ptx, int max_shared_bytes) {
  if (!bwd_hopper_covers(params, arch, from_ptx)) return false;
  const aotk__kernel_entry *row = bwd_hopper_row(params);
  return row != NULL && row->shared_bytes <= max_shared_bytes;
}

const aotk__kernel_entry *fused_row(const aotk_attn_params *params) {
  const int64_t d = params_head_dim(&params->q), dv = params_head_dim(&params->v);
  if (params->dropout_p > 0.0f) {
    return expected_row(AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER_DROPOUT, 90, params->q.dtype, d, dv, 1, 0,
                        params_seqlen_k(params));
  }
  return expected_row(AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER, 90, params->q.dtype, d, dv, 1, bwd_hopper_extras(params),
                      params_seqlen_k(params));
}

const aotk__kernel_entry *convert_row(const aotk_attn_params *params) {
  const int64_t d = params_head_dim(&params->q), dv = params_head_dim(&params->v);
  return expected_row(AOTK__FAMILY_ATTN_BWD_DQ_CONVERT, 90, params->q.dtype, d, dv, 1, 0, params_seqlen_q(params));
}

bool expect_bwd_fused(const aotk_attn_params *params, int arch, bool from_ptx, int max_shared_bytes) {
  if (params->deterministic != 0 || !bwd_hopper_covers(params, arch, from_ptx)) return false;
  if (params_batch(params) * params_heads_q(params) > INT32_MAX) return false;
  const aotk__kernel_entry *fused = fused_row(params), *convert = convert_row(params);
  return fused != NULL && convert != NULL && fused->shared_bytes <= max_shared_bytes &&
         convert->shared_bytes <= max_shared_bytes;
}

const aotk__kernel_entry *dq_hopper_row(const aotk_attn_params *params) {
  const int64_t d = params_head_dim(&params->q), dv = params_head_dim(&params->v);
  return expected_row(AOTK__FAMILY_ATTN_BWD_DQ_HOPPER, 90, params->q.dtype, d, dv, 1, bwd_hopper_extras(params),
                      params_seqlen_q(params));
}

bool expect_bwd_dq_hopper(const aotk_attn_params *params, int arch, bool from_ptx, int max_shared_bytes) {
  if (expect_bwd_fused(params, arch, from_ptx, max_shared_bytes) ||
      !expect_bwd_hopper(params, arch, from_ptx, max_shared_bytes)) {
    return false;
  }
  const aotk__kernel_entry *row = dq_hopper_row(params);
  return row != NULL && row->shared_bytes <= max_shared_bytes;
}

size_t expected_bwd_workspace_bytes(const aotk_attn_params *params, int arch, bool from_ptx, const problem *p) {
  const bool dsinks = params->dsinks.data != NULL;
  return expect_bwd_fused(params, arch, from_ptx, fake.max_shared_bytes) ? bwd_fused_workspace_bytes_for(p, dsinks)
                                                                         : bwd_workspace_bytes_for(p, dsinks);
}

int fwd_kernel_id(int family) {
  return family == AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT ? KERNEL_ATTN_FWD_HOPPER_DROPOUT
         : family == AOTK__FAMILY_ATTN_FWD_HOPPER_WG3 ? KERNEL_ATTN_FWD_HOPPER_WG3
         : family == AOTK__FAMILY_ATTN_FWD_HOPPER   ? KERNEL_ATTN_FWD_HOPPER
         : family == AOTK__FAMILY_ATTN_FWD_TMA      ? KERNEL_ATTN_FWD_TMA
                                                    : KERNEL_ATTN_FWD;
}

uint32_t fwd_family_features(int family) {
  return family_is_hopper_fwd(family)          ? AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED
         : family == AOTK__FAMILY_ATTN_FWD_TMA ? AOTK_FEATURE_TMA
                                               : 0;
}

int fwd_family_of_name(const char *name) {
  static const struct {
    const char *prefix;
    int family;
  } prefixes[] = {{"attn_fwd_hopper_paged_", AOTK__FAMILY_ATTN_FWD_HOPPER_PAGED},
                  {"attn_fwd_hopper_wg3_", AOTK__FAMILY_ATTN_FWD_HOPPER_WG3},
                  {"attn_fwd_hopper_dropout_", AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT},
                  {"attn_fwd_hopper_", AOTK__FAMILY_ATTN_FWD_HOPPER},
                  {"attn_fwd_tma_", AOTK__FAMILY_ATTN_FWD_TMA},
                  {"attn_fwd_", AOTK__FAMILY_ATTN_FWD}};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
    if (strncmp(name, prefixes[i].prefix, strlen(prefixes[i].prefix)) == 0) return prefixes[i].family;
  }
  return -1;
}

void make_heads_outer(aotk_tensor *t) {
  t->strides[2] = t->shape[1] * t->shape[3];
  t->strides[1] = t->shape[3];
  t->strides[0] = t->shape[2] * t->strides[2];
}

void set_dropout(aotk_attn_params *p) {
  p->dropout_p = 0.1f;
  p->rng_state = aotk_tensor_1d(FAKE_RNG_STATE, AOTK_DTYPE_INT64, 2);
}

aotk_tensor mask_for(const aotk_attn_params *p) {
  return aotk_tensor_4d(FAKE_MASK, AOTK_DTYPE_UINT8, params_batch(p), params_heads_q(p), params_seqlen_q(p),
                        params_seqlen_k(p));
}

aotk_sel_params sel_params_for(sel_shape s, bool bwd) {
  aotk_sel_params params = AOTK_SEL_PARAMS_INIT;
  params.q = aotk_tensor_3d(FAKE_Q, s.dtype, s.total_q, s.heads_q, s.head_dim_qk);
  params.k = aotk_tensor_3d(FAKE_K, s.dtype, s.total_k, s.heads_kv, s.head_dim_qk);
  params.v = aotk_tensor_3d(FAKE_V, s.dtype, s.total_k, s.heads_kv, s.head_dim_v);
  params.out = aotk_tensor_3d(FAKE_OUT, s.dtype, s.total_q, s.heads_q, s.head_dim_v);
  if (s.with_lse || bwd) params.lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, s.total_q, s.heads_q);
  if (s.num_seqs > 0) {
    params.cu_seqlens_q = aotk_tensor_1d(FAKE_CU_SEQLENS_Q, AOTK_DTYPE_INT32, s.num_seqs + 1);
    params.cu_seqlens_k = aotk_tensor_1d(FAKE_CU_SEQLENS_K, AOTK_DTYPE_INT32, s.num_seqs + 1);
    params.max_seqlen_k = s.max_seqlen_k;
  }
  params.block_idx = aotk_tensor_3d(FAKE_BLOCK_IDX, AOTK_DTYPE_INT32, s.total_q, s.heads_kv, s.slots);
  if (s.with_block_cnt) params.block_cnt = aotk_tensor_2d(FAKE_BLOCK_CNT, AOTK_DTYPE_INT32, s.total_q, s.heads_kv);
  params.block_size = s.block_size;
  if (bwd) {
    params.dout = aotk_tensor_3d(FAKE_DOUT, s.dtype, s.total_q, s.heads_q, s.head_dim_v);
    params.dq = aotk_tensor_3d(FAKE_DQ, s.dtype, s.total_q, s.heads_q, s.head_dim_qk);
    params.dk = aotk_tensor_3d(FAKE_DK, s.dtype, s.total_k, s.heads_kv, s.head_dim_qk);
    params.dv = aotk_tensor_3d(FAKE_DV, s.dtype, s.total_k, s.heads_kv, s.head_dim_v);
  }
  return params;
}

void add_new_kv(aotk_decode_params *params, const decode_shape *s, int64_t seqlen_new) {
  params->k_new = aotk_tensor_4d(FAKE_K_NEW, s->dtype, s->batch, seqlen_new, s->heads_kv, s->head_dim_qk);
  params->v_new = aotk_tensor_4d(FAKE_V_NEW, s->dtype, s->batch, seqlen_new, s->heads_kv, s->head_dim_v);
}

aotk_decode_params decode_params_for(decode_shape s) {
  aotk_decode_params params = AOTK_DECODE_PARAMS_INIT;
  const bool paged = s.page_size > 0;
  const int64_t cache_rows = paged ? s.num_pages : s.batch, row_keys = paged ? s.page_size : s.capacity;
  params.q = aotk_tensor_4d(FAKE_Q, s.dtype, s.batch, s.seqlen_q, s.heads_q, s.head_dim_qk);
  params.k_cache = aotk_tensor_4d(FAKE_K, s.dtype, cache_rows, row_keys, s.heads_kv, s.head_dim_qk);
  params.v_cache = aotk_tensor_4d(FAKE_V, s.dtype, cache_rows, row_keys, s.heads_kv, s.head_dim_v);
  if (paged) {
    params.block_table = aotk_tensor_2d(FAKE_BLOCK_TABLE, AOTK_DTYPE_INT32, s.batch, s.capacity / s.page_size);
  }
  params.cache_seqlens = aotk_tensor_1d(FAKE_CACHE_SEQLENS, AOTK_DTYPE_INT32, s.batch);
  params.out = aotk_tensor_4d(FAKE_OUT, s.dtype, s.batch, s.seqlen_q, s.heads_q, s.head_dim_v);
  if (s.with_lse) params.lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, s.batch, s.heads_q, s.seqlen_q);
  if (s.total_q > 0) {
    params.q = aotk_tensor_3d(FAKE_Q, s.dtype, s.total_q, s.heads_q, s.head_dim_qk);
    params.out = aotk_tensor_3d(FAKE_OUT, s.dtype, s.total_q, s.heads_q, s.head_dim_v);
    if (s.with_lse) params.lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, s.heads_q, s.total_q);
    params.cu_seqlens_q = aotk_tensor_1d(FAKE_CU_SEQLENS_Q, AOTK_DTYPE_INT32, s.batch + 1);
    params.max_seqlen_q = (int32_t)s.seqlen_q;
  }
  return params;
}

/* The merge's row, by the rule src/decode/aotk_decode.c's choose_merge states: the row for one partial
 * (the size key 1), unless its grid of ceil(rows / block_m) x ceil(head_dim / block_n) programs is
 * smaller than the fake device's SMs; then the row for `partials` (of the rows for the arch and
 * alignment, the one with the largest min_seqlen that `partials` reaches). */
static const aotk__kernel_entry *merge_row_for_size(int arch, int aligned, int64_t size) {
  const aotk__kernel_entry *best = NULL;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (e->family == AOTK__FAMILY_ATTN_MERGE && e->arch == arch && e->aligned == aligned && e->min_seqlen <= size &&
        (best == NULL || e->min_seqlen > best->min_seqlen)) {
      best = e;
    }
  }
  return best;
}

const aotk__kernel_entry *merge_row_for(int arch, int aligned, int64_t partials, int64_t rows, int64_t head_dim) {
  const aotk__kernel_entry *one = merge_row_for_size(arch, aligned, 1);
  if (one == NULL) return NULL;
  const int64_t grid = (rows + one->block_m - 1) / one->block_m * ((head_dim + one->block_n - 1) / one->block_n);
  return grid >= FAKE_MULTIPROCESSORS ? one : merge_row_for_size(arch, aligned, partials);
}

int merge_slot(aotk_dtype dtype) {
  return dtype == AOTK_DTYPE_FLOAT16 ? 1 : dtype == AOTK_DTYPE_BFLOAT16 ? 2 : 0;
}

int32_t merge_dtype_flags(aotk_dtype partial_dtype, aotk_dtype out_dtype) {
  return (partial_dtype == AOTK_DTYPE_FLOAT16 ? MERGE_FLAG_PARTIAL_FP16 : 0) |
         (partial_dtype == AOTK_DTYPE_BFLOAT16 ? MERGE_FLAG_PARTIAL_BF16 : 0) |
         (out_dtype == AOTK_DTYPE_FLOAT16 ? MERGE_FLAG_OUT_FP16 : 0) |
         (out_dtype == AOTK_DTYPE_BFLOAT16 ? MERGE_FLAG_OUT_BF16 : 0);
}

aotk_merge_params merge_params_for(merge_shape s) {
  aotk_merge_params params = AOTK_MERGE_PARAMS_INIT;
  const int64_t P = s.num_partials, B = s.batch, S = s.seqlen_q, H = s.heads, D = s.head_dim;
  if (s.packed) {
    params.out_partials = aotk_tensor_4d(FAKE_PARTIALS, s.partial_dtype, P, S, H, D);
    params.lse_partials = aotk_tensor_3d(FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, P, H, S);
    params.out = aotk_tensor_3d(FAKE_OUT, s.out_dtype, S, H, D);
    if (s.with_lse) params.lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, H, S);
  } else {
    const aotk_tensor parts = {FAKE_PARTIALS, s.partial_dtype, 5, {P, B, S, H, D, 0},
                               {B * S * H * D, S * H * D, H * D, D, 1, 0}};
    params.out_partials = parts;
    params.lse_partials = aotk_tensor_4d(FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, P, B, H, S);
    params.out = aotk_tensor_4d(FAKE_OUT, s.out_dtype, B, S, H, D);
    if (s.with_lse) params.lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, B, H, S);
  }
  if (s.with_sinks) params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, H);
  return params;
}

/* q and k laid out [batch, heads, seqlen, head_dim] (transposed), v with padded rows, out contiguous,
 * lse with padded rows: every stride has a distinct value, so a stride packed into the wrong slot
 * shows. All strides stay multiples of 16, so the aligned kernel runs. */
aotk_attn_params strided_params(problem p) {
  aotk_attn_params params = params_for(p);
  const int64_t d = p.head_dim, dv = dim_v(&p), v_row = p.heads_kv * dv + 32, lse_row = p.seqlen_q + 48;
  aotk_tensor *q = &params.q, *k = &params.k, *v = &params.v, *lse = &params.lse;
  q->strides[0] = p.heads_q * p.seqlen_q * d, q->strides[1] = d, q->strides[2] = p.seqlen_q * d;
  k->strides[0] = p.heads_kv * p.seqlen_k * d, k->strides[1] = d, k->strides[2] = p.seqlen_k * d;
  v->strides[0] = p.seqlen_k * v_row + 1024, v->strides[1] = v_row, v->strides[2] = dv;
  if (p.with_lse) lse->strides[0] = p.heads_q * lse_row, lse->strides[1] = lse_row, lse->strides[2] = 1;
  return params;
}

/* strided_params, with dout, dq, dk and dv strided too, each differently from its counterpart: a
 * stride packed into the wrong slot shows. All strides stay multiples of 16, so the aligned kernels
 * run. */
aotk_attn_params strided_bwd_params(problem p) {
  p.with_lse = true;
  aotk_attn_params params = strided_params(p);
  const aotk_attn_params contiguous = bwd_params_for(p);
  params.dout = contiguous.dout;
  params.dq = contiguous.dq;
  params.dk = contiguous.dk;
  params.dv = contiguous.dv;
  const int64_t d = p.head_dim, e = dim_v(&p), dout_row = p.heads_q * (e + 80), dk_row = p.heads_kv * (d + 32);
  aotk_tensor *dout = &params.dout, *dq = &params.dq, *dk = &params.dk, *dv = &params.dv;
  dout->strides[0] = p.seqlen_q * dout_row + 512, dout->strides[1] = dout_row, dout->strides[2] = e + 80;
  dq->strides[0] = p.heads_q * p.seqlen_q * (d + 16) + 256, dq->strides[1] = d + 16, dq->strides[2] = p.seqlen_q * (d + 16);
  dk->strides[0] = p.seqlen_k * dk_row + 64, dk->strides[1] = dk_row, dk->strides[2] = d + 32;
  dv->strides[0] = p.heads_kv * p.seqlen_k * (e + 48) + 128, dv->strides[1] = e + 48, dv->strides[2] = p.seqlen_k * (e + 48);
  return params;
}
