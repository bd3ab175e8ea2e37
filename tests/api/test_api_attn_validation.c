/*
 * CPU tests of the public API, the validation of the attention forward (features included): every bad
 * input returns its status with a message naming the argument, reaches no driver call and touches
 * nothing; edge inputs are accepted. The backward's, the workspace's and aotk_query's arguments are
 * test_api_attn_bwd_validation.c; the bad inputs both run, api_attn_bad_inputs.h.
 * The fake driver and the shared models are tests/api/api_*.h; see api_fake_driver.h.
 */
#include <math.h>

#include "api_attn_bad_inputs.h"

static void check_bad_input(const bad_input *c) { check_bad_input_op(c, AOTK_OP_ATTN_FWD); }

static void test_validation_rejects_bad_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  /* The base case is valid, so each failure below is due to its one change. */
  aotk_attn_params params = valid_params();
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK_MSG(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK, "the base case fails: %s", aotk_last_error());
  /* So are the bases the 0.2 cases start from: the varlen layout, a mask with dropout, ALiBi, sinks. */
  void (*const bases[])(aotk_attn_params *) = {make_varlen, set_mask, set_alibi, set_alibi_per_batch, set_sinks};
  for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
    params = valid_params();
    bases[i](&params);
    aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
    CHECK_MSG(status == AOTK_OK, "base %zu fails: %s (%s)", i, aotk_status_name(status), aotk_last_error());
  }
  for (size_t i = 0; i < sizeof bad_inputs / sizeof bad_inputs[0]; i++) check_bad_input(&bad_inputs[i]);
  printf("    %zu bad inputs\n", sizeof bad_inputs / sizeof bad_inputs[0]);
  uninstall_fake_gpu();
}

static void test_validation_span_checks_do_not_wrap(void) {
  install_fake_gpu(90, SHARED_SM90);
  for (size_t i = 0; i < sizeof overflowing_inputs / sizeof overflowing_inputs[0]; i++) {
    check_bad_input(&overflowing_inputs[i]);
  }
  uninstall_fake_gpu();
}

/* Inputs at the edge of what is allowed, which validation must accept. */
static void test_validation_accepts_edge_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  struct {
    const char *what;
    aotk_attn_params params;
  } cases[8];
  int count = 0;

  cases[count].what = "no lse, its other fields garbage";
  cases[count].params = valid_params();
  memset(&cases[count].params.lse, 0xEE, sizeof cases[count].params.lse);
  cases[count].params.lse.data = NULL;
  count++;

  cases[count].what = "out stride 0 on dimensions of size 1";
  problem single = default_problem;
  single.batch = 1;
  single.heads_q = single.heads_kv = 1;
  cases[count].params = params_for(single);
  cases[count].params.out.strides[0] = cases[count].params.out.strides[2] = 0;
  cases[count].params.lse.strides[0] = cases[count].params.lse.strides[1] = 0;
  count++;

  cases[count].what = "k and v broadcast over the batch (stride 0)";
  cases[count].params = valid_params();
  cases[count].params.k.strides[0] = cases[count].params.v.strides[0] = 0;
  count++;

  cases[count].what = "MQA (heads_kv 1), causal, explicit scale";
  problem mqa = default_problem;
  mqa.heads_kv = 1;
  cases[count].params = params_for(mqa);
  cases[count].params.causal = 1;
  cases[count].params.softmax_scale = 0.3f;
  count++;

  cases[count].what = "softmax_scale -0.0 (zero: the default)";
  cases[count].params = valid_params();
  cases[count].params.softmax_scale = -0.0f;
  count++;

  cases[count].what = "struct_size of a newer, larger struct";
  cases[count].params = valid_params();
  cases[count].params.struct_size = sizeof(aotk_attn_params) + 64;
  count++;

  /* Past 2^31 elements: the kernels address a block's first row and each head in 64 bits. */
  cases[count].what = "one batch entry of 2^31 elements (2^22 rows of 8 heads of 64)";
  problem long_rows = default_problem;
  long_rows.seqlen_q = (int64_t)1 << 22;
  cases[count].params = params_for(long_rows);
  count++;

  cases[count].what = "q, k, v, out as [batch, heads, seqlen, head_dim] in memory, 2^33 elements each";
  problem transposed = default_problem;
  transposed.seqlen_q = transposed.seqlen_k = (int64_t)1 << 23;
  transposed.heads_kv = transposed.heads_q;
  transposed.with_lse = false;
  cases[count].params = params_for(transposed);
  aotk_tensor *heads_outer[] = {&cases[count].params.q, &cases[count].params.k, &cases[count].params.v,
                                &cases[count].params.out};
  for (int t = 0; t < 4; t++) {
    aotk_tensor *x = heads_outer[t];
    x->strides[3] = 1, x->strides[1] = x->shape[3], x->strides[2] = x->shape[1] * x->shape[3];
    x->strides[0] = x->shape[2] * x->strides[2];
  }
  count++;

  for (int i = 0; i < count; i++) {
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &cases[i].params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    status = aotk_attn_fwd(&cases[i].params, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_fwd %s (%s)", cases[i].what, aotk_status_name(status),
              aotk_last_error());
  }
  uninstall_fake_gpu();
}

/* lse is [batch, heads_q, seqlen_q]: the rows a block may address past the end run along its last
 * dimension, not along heads. seqlen_q 2^23 with one head: the call must be accepted. */
static void test_validation_lse_span_follows_its_layout(void) {
  install_fake_gpu(90, SHARED_SM90);
  problem long_sequence = {AOTK_DTYPE_FLOAT16, 1, (int64_t)1 << 23, 64, 1, 1, 64, true, 0};
  aotk_attn_params params = params_for(long_sequence);
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
  CHECK_MSG(status == AOTK_OK, "aotk_query: %s (%s)", aotk_status_name(status), aotk_last_error());
  status = aotk_attn_fwd(&params, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "aotk_attn_fwd: %s (%s)", aotk_status_name(status), aotk_last_error());
  /* Without lse the same problem is accepted: only lse's span is miscounted. */
  params.lse.data = NULL;
  CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_validation_rejects_bad_inputs);
  RUN_TEST(test_validation_span_checks_do_not_wrap);
  RUN_TEST(test_validation_accepts_edge_inputs);
  RUN_TEST(test_validation_lse_span_follows_its_layout);
  return aotk_test_finish();
}
