/*
 * CPU tests of the public API, the validation of the attention backward (features included): every bad
 * input (the forward's and the backward's own) returns its status with a message naming the argument,
 * reaches no driver call and touches nothing; edge inputs are accepted; the forward ignores the backward's
 * fields; the backward's workspace; aotk_query's arguments. The forward's validation is
 * test_api_attn_validation.c; the fake driver and the shared models are tests/api/api_*.h.
 */
#include "api_attn_bad_inputs.h"

/* ---- the backward's validation -------------------------------------------------------------- */

/* The same checks on each of dout, dq, dk and dv: each must be like its counterpart (out, q, k, v) in
 * dtype and shape, and a valid tensor on its own. Shape changes leave the strides contiguous for the
 * old shape: the tensor stays valid on its own, so only the comparison can refuse it. */
#define BWD_TENSOR_SPOILERS(t)                                                                   \
  static void set_##t##_null(aotk_attn_params *p) { p->t.data = NULL; }                          \
  static void set_##t##_float16(aotk_attn_params *p) { p->t.dtype = AOTK_DTYPE_FLOAT16; }        \
  static void set_##t##_float32(aotk_attn_params *p) { p->t.dtype = AOTK_DTYPE_FLOAT32; }        \
  static void set_##t##_dtype_garbage(aotk_attn_params *p) { p->t.dtype = (aotk_dtype)77; }      \
  static void set_##t##_rank_3(aotk_attn_params *p) { p->t.rank = 3; }                           \
  static void set_##t##_rank_5(aotk_attn_params *p) { p->t.rank = 5; }                           \
  static void set_##t##_batch(aotk_attn_params *p) { p->t.shape[0] += 1; }                       \
  static void set_##t##_seqlen(aotk_attn_params *p) { p->t.shape[1] -= 1; }                      \
  static void set_##t##_heads(aotk_attn_params *p) { p->t.shape[2] *= 2; }                       \
  static void set_##t##_head_dim(aotk_attn_params *p) { p->t.shape[3] = 128; }                   \
  static void set_##t##_seqlen_zero(aotk_attn_params *p) { p->t.shape[1] = 0; }                  \
  static void set_##t##_last_stride_2(aotk_attn_params *p) { p->t.strides[3] = 2; }              \
  static void set_##t##_last_stride_0(aotk_attn_params *p) { p->t.strides[3] = 0; }              \
  static void set_##t##_stride_negative(aotk_attn_params *p) { p->t.strides[2] = -64; }          \
  static void set_##t##_odd_address(aotk_attn_params *p) { p->t.data = byte_offset(p->t.data, 1); } \
  static void set_##t##_token_stride(aotk_attn_params *p) { p->t.strides[1] = (int64_t)1 << 24; }
BWD_TENSOR_SPOILERS(dout)
BWD_TENSOR_SPOILERS(dq)
BWD_TENSOR_SPOILERS(dk)
BWD_TENSOR_SPOILERS(dv)
#undef BWD_TENSOR_SPOILERS

#define BWD_TENSOR_CASES(t)                                                                                    \
  {#t ".data NULL", set_##t##_null, AOTK_ERROR_NULL_POINTER, #t ".data"},                                       \
      {#t " float16, q bfloat16", set_##t##_float16, AOTK_ERROR_DTYPE_MISMATCH, #t ".dtype"},                   \
      {#t " float32, q bfloat16", set_##t##_float32, AOTK_ERROR_DTYPE_MISMATCH, #t ".dtype"},                   \
      {#t " dtype garbage", set_##t##_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, #t ".dtype"},                \
      {#t " rank 3", set_##t##_rank_3, AOTK_ERROR_RANK, #t ".rank"},                                            \
      {#t " rank 5", set_##t##_rank_5, AOTK_ERROR_RANK, #t ".rank"},                                            \
      {#t " batch one more", set_##t##_batch, AOTK_ERROR_SHAPE_MISMATCH, #t ".shape[0]"},                       \
      {#t " seqlen one less", set_##t##_seqlen, AOTK_ERROR_SHAPE_MISMATCH, #t ".shape[1]"},                     \
      {#t " heads doubled", set_##t##_heads, AOTK_ERROR_SHAPE_MISMATCH, #t ".shape[2]"},                        \
      {#t " head_dim 128 of 64", set_##t##_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, #t ".shape[3]"},             \
      {#t " seqlen 0", set_##t##_seqlen_zero, AOTK_ERROR_NONPOSITIVE_SIZE, #t ".shape[1]"},                     \
      {#t " last stride 2", set_##t##_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, #t ".strides[3]"},      \
      {#t " last stride 0", set_##t##_last_stride_0, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, #t ".strides[3]"},      \
      {#t " negative head stride", set_##t##_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, #t ".strides[2]"},    \
      {#t " odd address", set_##t##_odd_address, AOTK_ERROR_MISALIGNED_POINTER, #t ".data"},                    \
      {#t " token stride 2^24", set_##t##_token_stride, AOTK_ERROR_SIZE_OVERFLOW, #t ": strides[1]"}

/* Outputs: a zero stride on a dimension longer than 1 would make programs overwrite each other. */
#define BWD_OUTPUT_STRIDE_SPOILERS(t)                                                  \
  static void set_##t##_batch_stride_zero(aotk_attn_params *p) { p->t.strides[0] = 0; } \
  static void set_##t##_seqlen_stride_zero(aotk_attn_params *p) { p->t.strides[1] = 0; } \
  static void set_##t##_heads_stride_zero(aotk_attn_params *p) { p->t.strides[2] = 0; }
BWD_OUTPUT_STRIDE_SPOILERS(dq)
BWD_OUTPUT_STRIDE_SPOILERS(dk)
BWD_OUTPUT_STRIDE_SPOILERS(dv)
#undef BWD_OUTPUT_STRIDE_SPOILERS

#define BWD_OUTPUT_STRIDE_CASES(t)                                                                          \
  {#t " batch stride 0", set_##t##_batch_stride_zero, AOTK_ERROR_INVALID_VALUE, #t ".strides[0]"},           \
      {#t " seqlen stride 0", set_##t##_seqlen_stride_zero, AOTK_ERROR_INVALID_VALUE, #t ".strides[1]"},     \
      {#t " heads stride 0", set_##t##_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, #t ".strides[2]"}

static void set_lse_null(aotk_attn_params *p) { p->lse.data = NULL; }
static void set_lse_null_fields_garbage(aotk_attn_params *p) {
  memset(&p->lse, 0xEE, sizeof p->lse);
  p->lse.data = NULL;
}
static void set_dk_like_q(aotk_attn_params *p) { /* [batch, seqlen_q, heads_q, head_dim]: q's layout, not k's */
  p->dk = aotk_tensor_4d(FAKE_DK, p->q.dtype, p->q.shape[0], p->q.shape[1], p->q.shape[2], p->q.shape[3]);
}
static void set_dq_like_k(aotk_attn_params *p) {
  p->dq = aotk_tensor_4d(FAKE_DQ, p->k.dtype, p->k.shape[0], p->k.shape[1], p->k.shape[2], p->k.shape[3]);
}
static void set_dv_heads_q(aotk_attn_params *p) { /* the query heads: what dv would be without the GQA sum */
  p->dv = aotk_tensor_4d(FAKE_DV, p->v.dtype, p->v.shape[0], p->v.shape[1], p->q.shape[2], p->v.shape[3]);
}
static void set_dout_like_k(aotk_attn_params *p) {
  p->dout = aotk_tensor_4d(FAKE_DOUT, p->k.dtype, p->k.shape[0], p->k.shape[1], p->k.shape[2], p->k.shape[3]);
}
static void set_deterministic_2(aotk_attn_params *p) { p->deterministic = 2; }
static void set_deterministic_negative(aotk_attn_params *p) { p->deterministic = -1; }
static void set_deterministic_max(aotk_attn_params *p) { p->deterministic = INT32_MAX; }
/* The dK/dV pass's grid is batch * heads_kv * ceil(seqlen_k / block_n): 2^20 * 1 * 2^18 / 64 = 2^32
 * programs (2^33 at the 32 rows the check assumes), while the forward's grid (one query row) is 2^20. */
static void set_dkdv_grid_beyond_limit(aotk_attn_params *p) {
  problem shape = {AOTK_DTYPE_BFLOAT16, (int64_t)1 << 20, 1, (int64_t)1 << 18, 1, 1, 64, true, 0};
  *p = bwd_params_for(shape);
}
/* 2^30 sequences of 64 rows: the forward's grid (one 64-row block each) fits, the pre-pass's (128
 * padded rows: two blocks each) does not. */
static void set_preprocess_grid_beyond_limit(aotk_attn_params *p) {
  problem shape = {AOTK_DTYPE_BFLOAT16, (int64_t)1 << 30, 64, 1, 1, 1, 64, true, 0};
  *p = bwd_params_for(shape);
}
static void set_dsinks_without_sinks(aotk_attn_params *p) { set_dsinks(p); }
static void set_dsinks_heads_kv(aotk_attn_params *p) { set_sinks(p), set_dsinks(p), p->dsinks.shape[0] = 2; }
static void set_dsinks_bfloat16(aotk_attn_params *p) {
  set_sinks(p), set_dsinks(p), p->dsinks.dtype = AOTK_DTYPE_BFLOAT16;
}
static void set_dsinks_rank_2(aotk_attn_params *p) {
  set_sinks(p), p->dsinks = aotk_tensor_2d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, 2, 8);
}
static void set_dsinks_misaligned(aotk_attn_params *p) {
  set_sinks(p), set_dsinks(p), p->dsinks.data = byte_offset(FAKE_DSINKS, 2);
}
static void set_dsinks_stride_2(aotk_attn_params *p) { set_sinks(p), set_dsinks(p), p->dsinks.strides[0] = 2; }
static void set_bwd_mask(aotk_attn_params *p) { set_mask(p); } /* valid for the forward */
static void set_varlen_lse_null(aotk_attn_params *p) { make_varlen(p), p->lse.data = NULL; }
static void set_varlen_dq_total(aotk_attn_params *p) { make_varlen(p), p->dq.shape[0] = VARLEN_TOTAL_K; }
static void set_varlen_dk_total(aotk_attn_params *p) { make_varlen(p), p->dk.shape[0] = VARLEN_TOTAL_Q; }
static void set_varlen_dv_total(aotk_attn_params *p) { make_varlen(p), p->dv.shape[0] = VARLEN_TOTAL_K + 1; }
static void set_varlen_dout_total(aotk_attn_params *p) { make_varlen(p), p->dout.shape[0] = VARLEN_TOTAL_Q - 1; }
static void set_varlen_dq_rank_4(aotk_attn_params *p) {
  make_varlen(p), p->dq = aotk_tensor_4d(FAKE_DQ, p->q.dtype, 1, VARLEN_TOTAL_Q, 8, 64);
}
static void set_varlen_dk_heads(aotk_attn_params *p) { make_varlen(p), p->dk.shape[1] = 8; }
static void set_varlen_dv_head_dim(aotk_attn_params *p) { make_varlen(p), p->dv.shape[2] = 128; }
static void set_varlen_dq_heads_stride_zero(aotk_attn_params *p) { make_varlen(p), p->dq.strides[1] = 0; }
static void set_varlen_dsinks_without_sinks(aotk_attn_params *p) { make_varlen(p), set_dsinks(p); }

static const bad_input bwd_bad_inputs[] = {
    {"lse.data NULL", set_lse_null, AOTK_ERROR_NULL_POINTER, "lse"},
    {"lse.data NULL, its other fields garbage", set_lse_null_fields_garbage, AOTK_ERROR_NULL_POINTER, "lse"},
    BWD_TENSOR_CASES(dout),
    BWD_TENSOR_CASES(dq),
    BWD_TENSOR_CASES(dk),
    BWD_TENSOR_CASES(dv),
    BWD_OUTPUT_STRIDE_CASES(dq),
    BWD_OUTPUT_STRIDE_CASES(dk),
    BWD_OUTPUT_STRIDE_CASES(dv),
    {"dk in q's layout", set_dk_like_q, AOTK_ERROR_SHAPE_MISMATCH, "dk.shape[1]"},
    {"dq in k's layout", set_dq_like_k, AOTK_ERROR_SHAPE_MISMATCH, "dq.shape[1]"},
    {"dv with heads_q heads", set_dv_heads_q, AOTK_ERROR_SHAPE_MISMATCH, "dv.shape[2]"},
    {"dout in k's layout", set_dout_like_k, AOTK_ERROR_SHAPE_MISMATCH, "dout.shape[1]"},
    {"deterministic 2", set_deterministic_2, AOTK_ERROR_INVALID_VALUE, "deterministic"},
    {"deterministic -1", set_deterministic_negative, AOTK_ERROR_INVALID_VALUE, "deterministic"},
    {"deterministic INT32_MAX", set_deterministic_max, AOTK_ERROR_INVALID_VALUE, "deterministic"},
    {"dK/dV grid beyond 2^31 - 1 programs", set_dkdv_grid_beyond_limit, AOTK_ERROR_SIZE_OVERFLOW, "seqlen_k"},
    {"pre-pass grid beyond 2^31 - 1 programs", set_preprocess_grid_beyond_limit, AOTK_ERROR_SIZE_OVERFLOW,
     "round_up(seqlen_q, 128)"},
    {"dsinks without sinks", set_dsinks_without_sinks, AOTK_ERROR_INVALID_VALUE, "dsinks"},
    {"dsinks [heads_kv]", set_dsinks_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "dsinks.shape[0]"},
    {"dsinks bfloat16", set_dsinks_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "dsinks.dtype"},
    {"dsinks [batch, heads_q]", set_dsinks_rank_2, AOTK_ERROR_RANK, "dsinks.rank"},
    {"dsinks 2-byte aligned", set_dsinks_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "dsinks.data"},
    {"dsinks stride 2", set_dsinks_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "dsinks.strides[0]"},
    {"a dropout_mask (the forward's output)", set_bwd_mask, AOTK_ERROR_INVALID_VALUE, "dropout_mask"},
    {"varlen: lse.data NULL", set_varlen_lse_null, AOTK_ERROR_NULL_POINTER, "lse"},
    {"varlen: dq total = total_k", set_varlen_dq_total, AOTK_ERROR_SHAPE_MISMATCH, "dq.shape[0]"},
    {"varlen: dk total = total_q", set_varlen_dk_total, AOTK_ERROR_SHAPE_MISMATCH, "dk.shape[0]"},
    {"varlen: dv total + 1", set_varlen_dv_total, AOTK_ERROR_SHAPE_MISMATCH, "dv.shape[0]"},
    {"varlen: dout total - 1", set_varlen_dout_total, AOTK_ERROR_SHAPE_MISMATCH, "dout.shape[0]"},
    {"varlen: dq rank 4", set_varlen_dq_rank_4, AOTK_ERROR_RANK, "dq.rank"},
    {"varlen: dk with heads_q heads", set_varlen_dk_heads, AOTK_ERROR_SHAPE_MISMATCH, "dk.shape[1]"},
    {"varlen: dv head_dim 128 of 64", set_varlen_dv_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "dv.shape[2]"},
    {"varlen: dq heads stride 0", set_varlen_dq_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "dq.strides[1]"},
    {"varlen: dsinks without sinks", set_varlen_dsinks_without_sinks, AOTK_ERROR_INVALID_VALUE, "dsinks"},
};
#undef BWD_TENSOR_CASES
#undef BWD_OUTPUT_STRIDE_CASES

/* The backward validates what the forward does first (every forward bad input gets the same status
 * from aotk_attn_bwd and aotk_query(AOTK_OP_ATTN_BWD)), then its own arguments. */
static void test_bwd_validation_rejects_bad_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_attn_params params = valid_bwd_params();
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK_MSG(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK, "the base case fails: %s", aotk_last_error());
  reset_calls();
  CHECK_MSG(run_op(AOTK_OP_ATTN_BWD, &params) == AOTK_OK, "the base case fails: %s", aotk_last_error());
  CHECK(fake.calls[CALL_cuLaunchKernel] == 3);
  make_varlen(&params);
  CHECK_MSG(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK, "the varlen base case fails: %s",
            aotk_last_error());
  params = valid_bwd_params();
  set_sinks(&params);
  set_dsinks(&params);
  CHECK_MSG(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK, "the dsinks base case fails: %s",
            aotk_last_error());

  size_t forward_cases = sizeof bad_inputs / sizeof bad_inputs[0];
  for (size_t i = 0; i < forward_cases; i++) check_bad_input_op(&bad_inputs[i], AOTK_OP_ATTN_BWD);
  size_t overflowing_cases = sizeof overflowing_inputs / sizeof overflowing_inputs[0];
  for (size_t i = 0; i < overflowing_cases; i++) check_bad_input_op(&overflowing_inputs[i], AOTK_OP_ATTN_BWD);
  size_t backward_cases = sizeof bwd_bad_inputs / sizeof bwd_bad_inputs[0];
  for (size_t i = 0; i < backward_cases; i++) check_bad_input_op(&bwd_bad_inputs[i], AOTK_OP_ATTN_BWD);
  printf("    %zu forward and %zu backward bad inputs\n", forward_cases + overflowing_cases, backward_cases);
  uninstall_fake_gpu();
}

/* The forward ignores the backward's fields: garbage there changes neither its status, nor what
 * aotk_query reports, nor a byte of what it launches. */
static void test_fwd_ignores_bwd_fields(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_attn_params clean = valid_params();
  aotk_kernel_info clean_info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &clean, &clean_info) == AOTK_OK);
  CHECK(aotk_attn_fwd(&clean, FAKE_STREAM) == AOTK_OK);
  recorded_launch clean_launch = fake.launch;

  for (int variant = 0; variant < 3; variant++) {
    aotk_attn_params dirty = valid_params();
    if (variant == 0) { /* every byte garbage */
      memset(&dirty.dout, 0xEE, sizeof dirty.dout);
      memset(&dirty.dq, 0x5A, sizeof dirty.dq);
      memset(&dirty.dk, 0xFF, sizeof dirty.dk);
      memset(&dirty.dv, 0x81, sizeof dirty.dv);
      memset(&dirty.dsinks, 0x77, sizeof dirty.dsinks);
      dirty.deterministic = 12345;
    } else if (variant == 1) { /* plausible tensors, each with one defect the backward refuses */
      dirty = valid_bwd_params();
      dirty.dout.data = NULL;
      dirty.dq.dtype = AOTK_DTYPE_FLOAT32;
      dirty.dk.strides[3] = 2;
      dirty.dv.data = byte_offset(FAKE_DV, 1);
      dirty.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, 3); /* and no sinks */
      dirty.deterministic = -7;
    } else { /* valid backward params: the forward runs exactly as without them */
      dirty = valid_bwd_params();
      dirty.deterministic = 1;
    }
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &dirty, &info);
    CHECK_MSG(status == AOTK_OK, "variant %d: aotk_query %s (%s)", variant, aotk_status_name(status),
              aotk_last_error());
    CHECK_MSG(memcmp(&info, &clean_info, sizeof info) == 0, "variant %d: aotk_query reports %s, without them %s",
              variant, info.kernel_name, clean_info.kernel_name);
    reset_calls();
    status = aotk_attn_fwd(&dirty, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "variant %d: aotk_attn_fwd %s (%s)", variant, aotk_status_name(status),
              aotk_last_error());
    CHECK(fake.calls[CALL_cuLaunchKernel] == 1);
    CHECK_MSG(memcmp(&fake.launch, &clean_launch, sizeof clean_launch) == 0,
              "variant %d: the forward launched differently", variant);
  }
  uninstall_fake_gpu();
}

/* Inputs at the edge of what the backward allows, which its validation must accept. */
static void test_bwd_validation_accepts_edge_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  struct {
    const char *what;
    aotk_attn_params params;
    problem shape;
  } cases[8];
  int count = 0;

  cases[count].what = "deterministic 1";
  cases[count].shape = default_problem;
  cases[count].params = valid_bwd_params();
  cases[count].params.deterministic = 1;
  count++;

  cases[count].what = "dout broadcast (zero strides: it is an input)";
  cases[count].shape = default_problem;
  cases[count].params = valid_bwd_params();
  cases[count].params.dout.strides[0] = cases[count].params.dout.strides[1] = cases[count].params.dout.strides[2] = 0;
  count++;

  cases[count].what = "dq, dk, dv stride 0 on dimensions of size 1";
  problem single = default_problem;
  single.batch = 1;
  single.heads_q = single.heads_kv = 1;
  cases[count].shape = single;
  cases[count].params = bwd_params_for(single);
  aotk_tensor *outputs[] = {&cases[count].params.dq, &cases[count].params.dk, &cases[count].params.dv};
  for (int t = 0; t < 3; t++) outputs[t]->strides[0] = outputs[t]->strides[2] = 0;
  count++;

  cases[count].what = "MQA (heads_kv 1), causal, explicit scale";
  problem mqa = default_problem;
  mqa.heads_kv = 1;
  cases[count].shape = mqa;
  cases[count].params = bwd_params_for(mqa);
  cases[count].params.causal = 1;
  cases[count].params.softmax_scale = 0.3f;
  count++;

  cases[count].what = "dq one element past 16-byte alignment (the unaligned kernels)";
  cases[count].shape = default_problem;
  cases[count].params = valid_bwd_params();
  cases[count].params.dq.data = byte_offset(FAKE_DQ, 2);
  count++;

  cases[count].what = "seqlen_q 1, seqlen_k 1";
  problem tiny = default_problem;
  tiny.seqlen_q = tiny.seqlen_k = 1;
  cases[count].shape = tiny;
  cases[count].params = bwd_params_for(tiny);
  count++;

  cases[count].what = "sequences of 2^31 elements (2^22 rows of 8 heads of 64)";
  problem long_rows = default_problem;
  long_rows.seqlen_q = long_rows.seqlen_k = (int64_t)1 << 22;
  cases[count].shape = long_rows;
  cases[count].params = bwd_params_for(long_rows);
  count++;

  for (int i = 0; i < count; i++) {
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &cases[i].params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_query %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    /* The aligned dense cases at d64 with deterministic 0 take the non-deterministic backward. */
    const bool fused = expect_bwd_fused(&cases[i].params, 90, false, SHARED_SM90);
    size_t workspace_bytes = expected_bwd_workspace_bytes(&cases[i].params, 90, false, &cases[i].shape);
    CHECK_MSG(info.workspace_bytes == workspace_bytes, "%s: workspace_bytes %zu, expected %zu", cases[i].what,
              info.workspace_bytes, workspace_bytes);
    CHECK_MSG(((info.features & AOTK_FEATURE_NONDETERMINISTIC) != 0) == fused, "%s: features %#x", cases[i].what,
              info.features);
    reset_calls();
    status = aotk_attn_bwd(&cases[i].params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_bwd %s (%s)", cases[i].what, aotk_status_name(status),
              aotk_last_error());
    CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 3 && fake.calls[CALL_cuMemsetD32Async] == (fused ? 1 : 0),
              "%s: %d launches, %d clears", cases[i].what, fake.calls[CALL_cuLaunchKernel],
              fake.calls[CALL_cuMemsetD32Async]);
  }
  uninstall_fake_gpu();
}

/* The workspace: at least the size aotk_query reports, not NULL, 16-byte aligned. Checked by
 * aotk_attn_bwd only (the query is how the size is learned), after the params; a workspace short of
 * what every plan needs (the statistics) before the driver, and the non-deterministic plan's larger
 * one (its dQ accumulator too) once the plan is known, before anything is loaded, cleared or launched.
 * Each shape with deterministic 0 (on this sm_90 GPU the non-deterministic plan) and 1. */
static void test_bwd_workspace(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const problem shapes[] = {
      {AOTK_DTYPE_BFLOAT16, 2, 100, 130, 8, 2, 64, true, 0},
      {AOTK_DTYPE_FLOAT16, 1, 1, 1, 1, 1, 128, true, 0},
      {AOTK_DTYPE_FLOAT16, 3, 4097, 17, 6, 3, 128, true, 0},
  };
  int cases = 0, fused_cases = 0;
  for (size_t s = 0; s < 2 * sizeof shapes / sizeof shapes[0]; s++) {
    const problem *p = &shapes[s / 2];
    aotk_attn_params params = bwd_params_for(*p);
    params.deterministic = (int32_t)(s % 2);
    const bool fused = params.deterministic == 0;
    CHECK_MSG(expect_bwd_fused(&params, 90, false, SHARED_SM90) == fused,
              "shape %zu deterministic %d: the rule says %d", s / 2, (int)params.deterministic, (int)!fused);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK);
    /* What every plan needs (checked before the driver), and what this one needs. */
    const size_t statistics_bytes = bwd_workspace_bytes(p);
    const size_t needed = fused ? bwd_fused_workspace_bytes_for(p, false) : statistics_bytes;
    CHECK_MSG(info.workspace_bytes == needed,
              "batch %lld heads_q %lld seqlen_q %lld deterministic %d: workspace_bytes %zu, expected %zu",
              (long long)p->batch, (long long)p->heads_q, (long long)p->seqlen_q, (int)params.deterministic,
              info.workspace_bytes, needed);

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
        {"the statistics' size", FAKE_WORKSPACE, statistics_bytes, fused ? AOTK_ERROR_WORKSPACE_TOO_SMALL : AOTK_OK},
        {"one byte short of the statistics", FAKE_WORKSPACE, statistics_bytes - 1, AOTK_ERROR_WORKSPACE_TOO_SMALL},
        {"8-byte aligned", byte_offset(FAKE_WORKSPACE, 8), needed, AOTK_ERROR_MISALIGNED_POINTER},
        {"4-byte aligned", byte_offset(FAKE_WORKSPACE, 4), needed + 64, AOTK_ERROR_MISALIGNED_POINTER},
        {"odd address", byte_offset(FAKE_WORKSPACE, 1), needed, AOTK_ERROR_MISALIGNED_POINTER},
        {"exactly the reported size", FAKE_WORKSPACE, needed, AOTK_OK},
        {"larger than needed", byte_offset(FAKE_WORKSPACE, 16), needed + 1, AOTK_OK},
    };
    for (size_t w = 0; w < sizeof workspaces / sizeof workspaces[0]; w++) {
      aotk_attn_params before = params;
      reset_calls();
      reset_launch_log();
      int launches_before = fake.launches;
      aotk_status status = aotk_attn_bwd(&params, workspaces[w].workspace, workspaces[w].bytes, FAKE_STREAM);
      CHECK_MSG(status == workspaces[w].expected, "%zu-byte workspace %s (deterministic %d): %s (%s), expected %s",
                needed, workspaces[w].what, (int)params.deterministic, aotk_status_name(status), aotk_last_error(),
                aotk_status_name(workspaces[w].expected));
      CHECK(memcmp(&params, &before, sizeof params) == 0);
      if (workspaces[w].expected == AOTK_OK) {
        CHECK_MSG(fake.launches == launches_before + 3 && fake.logged_launches == 3, "workspace %s: %d launches",
                  workspaces[w].what, fake.launches - launches_before);
        CHECK_MSG(arg_pointer(&fake.launch_log[0], PRE_DELTA) == (uint64_t)(uintptr_t)workspaces[w].workspace,
                  "workspace %s: delta at %#llx", workspaces[w].what,
                  (unsigned long long)arg_pointer(&fake.launch_log[0], PRE_DELTA));
        /* The accumulator sits at its offset from wherever the workspace starts. */
        const uint64_t accumulator =
            (uint64_t)(uintptr_t)byte_offset(workspaces[w].workspace, bwd_accumulator_offset(p, false));
        CHECK_MSG(fake.memsets == (fused ? 1 : 0) &&
                      (!fused || (fake.memset_destination == accumulator &&
                                  arg_pointer(&fake.launch_log[2], CONVERT_DQ_ACC) == accumulator)),
                  "workspace %s: %d clears, of %#llx; the accumulator at %#llx", workspaces[w].what, fake.memsets,
                  (unsigned long long)fake.memset_destination, (unsigned long long)accumulator);
      } else {
        CHECK_MSG(message_mentions("workspace"), "workspace %s: the message \"%s\" does not name the workspace",
                  workspaces[w].what, aotk_last_error());
        /* Short of the statistics (or NULL, or misaligned): refused before the driver. Short of the
         * accumulator only: once planned, with nothing loaded, encoded, cleared or launched. */
        const bool before_driver = workspaces[w].workspace == NULL || workspaces[w].bytes < statistics_bytes ||
                                   workspaces[w].expected == AOTK_ERROR_MISALIGNED_POINTER;
        if (before_driver) {
          CHECK_MSG(total_calls() == 0, "workspace %s: reached the driver (%s)", workspaces[w].what,
                    called_functions());
        } else {
          CHECK_MSG(fused && fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuTensorMapEncodeTiled] == 0 &&
                        fake.calls[CALL_cuMemsetD32Async] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
                    "workspace %s (deterministic %d): reached %s", workspaces[w].what, (int)params.deterministic,
                    called_functions());
        }
      }
      cases++;
      fused_cases += fused;
    }
    /* The message says how much is needed. */
    CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, needed - 1, FAKE_STREAM) == AOTK_ERROR_WORKSPACE_TOO_SMALL);
    char needed_text[32];
    snprintf(needed_text, sizeof needed_text, "%zu", needed);
    CHECK_MSG(message_mentions(needed_text), "the message \"%s\" does not say %zu bytes are needed", aotk_last_error(),
              needed);
  }
  /* Bad params are reported before a bad workspace. */
  aotk_attn_params params = valid_bwd_params();
  params.deterministic = 2;
  reset_calls();
  CHECK(aotk_attn_bwd(&params, NULL, 0, FAKE_STREAM) == AOTK_ERROR_INVALID_VALUE);
  CHECK(message_mentions("deterministic"));
  CHECK(total_calls() == 0);
  /* The default problem's two sizes in numbers: 2 * 8 rows of 128 padded statistics, delta and
   * lse * log2(e), take 16384 bytes; the accumulator adds 2 * 8 * 128 rows of 64 floats, 524288. */
  CHECK(bwd_workspace_bytes(&default_problem) == 16384 &&
        bwd_fused_workspace_bytes_for(&default_problem, false) == 16384 + 524288);
  printf("    %d workspaces, %d of them for the non-deterministic plan\n", cases, fused_cases);
  uninstall_fake_gpu();
}

static void test_query_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_attn_params params = valid_params();
  reset_calls();
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, NULL) == AOTK_ERROR_NULL_POINTER);
  CHECK(message_mentions("info"));

  aotk_kernel_info info;
  poison_info(&info);
  info.struct_size = 0;
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_ERROR_STRUCT_SIZE);
  CHECK(message_mentions("struct_size"));

  static const int bad_ops[] = {0, 3, -1, 1000};
  for (size_t i = 0; i < sizeof bad_ops / sizeof bad_ops[0]; i++) {
    poison_info(&info);
    aotk_status status = aotk_query((aotk_op)bad_ops[i], &params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "op %d: %s", bad_ops[i], aotk_status_name(status));
    CHECK_MSG(message_mentions("op"), "op %d: message \"%s\"", bad_ops[i], aotk_last_error());
    CHECK(info_untouched(&info));
  }
  /* Another family's op: refused, naming the query that answers it (the runtime's table of ops). */
  static const struct {
    aotk_op op;
    const char *query;
  } other_ops[] = {{AOTK_OP_SEL_FWD, "aotk_sel_query"}, {AOTK_OP_SEL_BWD, "aotk_sel_query"},
                   {AOTK_OP_DECODE, "aotk_decode_query"}, {AOTK_OP_MERGE, "aotk_merge_query"}};
  for (size_t i = 0; i < sizeof other_ops / sizeof other_ops[0]; i++) {
    poison_info(&info);
    aotk_status status = aotk_query(other_ops[i].op, &params, &info);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE && message_mentions(other_ops[i].query) &&
                  message_mentions("AOTK_OP_ATTN_FWD"),
              "op %d: %s (%s)", (int)other_ops[i].op, aotk_status_name(status), aotk_last_error());
    CHECK(info_untouched(&info));
  }
  CHECK_MSG(total_calls() == 0, "bad query arguments reached the driver (%s)", called_functions());

  /* Both ops are valid: the forward's params with the forward, the backward's with the backward. The
   * forward's params alone are not enough for the backward (no dout). */
  poison_info(&info);
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK && info.launches == 1);
  aotk_attn_params bwd_params = valid_bwd_params();
  poison_info(&info);
  aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &bwd_params, &info);
  CHECK_MSG(status == AOTK_OK, "op 2: %s (%s)", aotk_status_name(status), aotk_last_error());
  /* On this sm_90 GPU the default problem (deterministic 0) takes the non-deterministic plan. */
  CHECK(info.launches == 3 && info.workspace_bytes == bwd_fused_workspace_bytes_for(&default_problem, false) &&
        (info.features & AOTK_FEATURE_NONDETERMINISTIC) != 0);
  char bwd_kernel_name[sizeof info.kernel_name];
  memcpy(bwd_kernel_name, info.kernel_name, sizeof bwd_kernel_name);
  poison_info(&info);
  CHECK(aotk_query((aotk_op)2, &params, &info) == AOTK_ERROR_NULL_POINTER && message_mentions("dout"));
  CHECK(info_untouched(&info));
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, NULL, &info) == AOTK_ERROR_NULL_POINTER && message_mentions("params"));
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, &bwd_params, NULL) == AOTK_ERROR_NULL_POINTER && message_mentions("info"));

  /* A smaller info struct (an older caller): only its prefix is written. */
  poison_info(&info);
  info.struct_size = offsetof(aotk_kernel_info, num_warps);
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
  CHECK(info.struct_size == offsetof(aotk_kernel_info, num_warps));
  CHECK(info.kernel_name[0] != (char)POISON && info.arch == 90);
  const unsigned char *bytes = (const unsigned char *)&info;
  bool tail_untouched = true;
  for (size_t i = offsetof(aotk_kernel_info, num_warps); i < sizeof info; i++) {
    tail_untouched = tail_untouched && bytes[i] == POISON;
  }
  CHECK_MSG(tail_untouched, "aotk_query wrote past struct_size");

  /* The same for the backward, cut just before workspace_bytes (a caller built before it existed). */
  const size_t prefix = offsetof(aotk_kernel_info, workspace_bytes);
  poison_info(&info);
  info.struct_size = prefix;
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, &bwd_params, &info) == AOTK_OK);
  CHECK_MSG(info.struct_size == prefix && strcmp(info.kernel_name, bwd_kernel_name) == 0 &&
                strncmp(info.kernel_name, "attn_bwd_fused_hopper_", 22) == 0 && info.grid > 0,
            "a short info struct: %s, the full one's %s", info.kernel_name, bwd_kernel_name);
  tail_untouched = true;
  for (size_t i = prefix; i < sizeof info; i++) tail_untouched = tail_untouched && bytes[i] == POISON;
  CHECK_MSG(tail_untouched, "aotk_query(AOTK_OP_ATTN_BWD) wrote past struct_size");
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_bwd_validation_rejects_bad_inputs);
  RUN_TEST(test_bwd_validation_accepts_edge_inputs);
  RUN_TEST(test_fwd_ignores_bwd_fields);
  RUN_TEST(test_bwd_workspace);
  RUN_TEST(test_query_arguments);
  return aotk_test_finish();
}
