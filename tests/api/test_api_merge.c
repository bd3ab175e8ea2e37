/*
 * CPU tests of the public API, the merge of partial attentions (0.4): every bad input of
 * aotk_attn_merge and aotk_merge_query, its grid (row blocks by column chunks, whole rows in place or
 * past the grid limit) and its packed arguments.
 * The fake driver and the shared models are tests/api/api_*.h; see api_fake_driver.h.
 */
#include <math.h>

#include "api_launch_checks.h"

/* ---- the merge of partial attentions (0.4) --------------------------------------------------- */

static const merge_shape packed_merge_shape = {AOTK_DTYPE_BFLOAT16, AOTK_DTYPE_BFLOAT16, 2, 1, 170, 8, 64,
                                               true, true, true};

/* Strides all distinct: the partials with padded rows and gaps between batches and partials, their
 * LSEs with padded rows, out heads-major, lse with padded rows. The partials' and out's strides are
 * multiples of 16 elements (what the aligned variant assumes) unless `unaligned`, which pads the
 * partials' rows by 8 instead. */
static aotk_merge_params strided_merge_params(merge_shape s, bool unaligned) {
  aotk_merge_params params = merge_params_for(s);
  const int64_t B = s.batch, S = s.seqlen_q, H = s.heads, D = s.head_dim;
  const int64_t row = round_up_to(D, 16) + (unaligned ? 8 : 16), out_row = round_up_to(D, 16);
  aotk_tensor *parts = &params.out_partials, *lse_parts = &params.lse_partials, *out = &params.out, *lse = &params.lse;
  if (s.packed) {
    parts->strides[2] = row, parts->strides[1] = H * row, parts->strides[0] = S * H * row + 64;
    lse_parts->strides[1] = S + 3, lse_parts->strides[0] = H * (S + 3) + 5;
    out->strides[1] = S * out_row, out->strides[0] = out_row;
    if (s.with_lse) lse->strides[0] = S + 7;
  } else {
    parts->strides[3] = row, parts->strides[2] = H * row, parts->strides[1] = S * H * row + 32;
    parts->strides[0] = B * parts->strides[1] + 64;
    lse_parts->strides[2] = S + 3, lse_parts->strides[1] = H * (S + 3) + 5;
    lse_parts->strides[0] = B * lse_parts->strides[1] + 7;
    out->strides[2] = S * out_row, out->strides[1] = out_row, out->strides[0] = H * S * out_row + 32;
    if (s.with_lse) lse->strides[1] = S + 7, lse->strides[0] = H * (S + 7) + 9;
  }
  return params;
}

/* The bytes [first, end) an fp32 tensor's elements lie in (strides are never negative; no element: none). */
static void fp32_byte_range(const aotk_tensor *t, uint64_t *first, uint64_t *end) {
  uint64_t last = 0;
  *first = *end = (uint64_t)(uintptr_t)t->data;
  for (int d = 0; d < t->rank; d++) {
    if (t->shape[d] == 0) return;
    last += (uint64_t)(t->shape[d] - 1) * (uint64_t)t->strides[d];
  }
  *end = *first + 4 * (last + 1);
}

/* Whether a merge writes lse over memory of lse_partials (an in-place merge): then each program must
 * cover whole rows (FLAG_WHOLE_ROWS), or one row's program could write the lse another one of the same
 * row still reads. Without lse nothing is written that a program reads: out is read-before-write per
 * element. */
static bool merge_writes_lse_in_place(const aotk_merge_params *params) {
  if (params->lse.data == NULL) return false;
  uint64_t lse_first, lse_end, parts_first, parts_end;
  fp32_byte_range(&params->lse, &lse_first, &lse_end);
  fp32_byte_range(&params->lse_partials, &parts_first, &parts_end);
  return lse_first < parts_end && parts_first < lse_end;
}

/* What aotk_merge_query reports and aotk_attn_merge launches, from the header: the merge row of the
 * GPU's target for the alignment and the partial count (partials and out 16-byte aligned with strides multiples of 16
 * elements), one program per block_m of the batch * seqlen_q * heads rows and block_n of the head_dim
 * columns, or per block_m rows alone with FLAG_WHOLE_ROWS when lse is written in place or the column
 * chunks would pass the grid limit of 2^31 - 1; the typed
 * pointer slots of the partials' and out's dtypes; the strides of the kernel's [partial, batch, token,
 * head] view (packed tensors: batch stride 0). */
static void check_merge(const char *what, const aotk_merge_params *params, const merge_shape *s, const gpu *g,
                        int aligned) {
  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status status = aotk_merge_query(AOTK_OP_MERGE, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_merge_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "%s: aotk_merge_query loaded or launched (%s)", what, called_functions());
  const aotk__kernel_entry *row =
      merge_row_for(g->arch, aligned, s->num_partials, s->batch * s->seqlen_q * s->heads, s->head_dim);
  CHECK_MSG(row != NULL, "%s: no sm_%d attn_merge row (aligned %d)", what, g->arch, aligned);
  if (row == NULL) return;
  const int64_t rows = s->batch * s->seqlen_q * s->heads;
  const bool whole_rows = merge_writes_lse_in_place(params) ||
                          ceil_div(rows, row->block_m) * ceil_div(s->head_dim, row->block_n) > INT32_MAX;
  const int64_t column_chunks = whole_rows ? 1 : ceil_div(s->head_dim, row->block_n);
  const int64_t grid = ceil_div(rows, row->block_m) * column_chunks;
  CHECK_MSG(strcmp(info.kernel_name, row->name) == 0 && info.aligned == aligned,
            "%s: aotk_merge_query names %s (aligned %d), expected %s", what, info.kernel_name, info.aligned, row->name);
  CHECK(info.arch == g->arch && info.from_ptx == g->from_ptx);
  CHECK_MSG(info.grid == grid, "%s: grid %lld, expected ceil(%lld rows / %d) x %lld column chunks = %lld", what,
            (long long)info.grid, (long long)rows, row->block_m, (long long)column_chunks, (long long)grid);
  CHECK(info.launches == 1 && info.workspace_bytes == 0 && info.num_splits == s->num_partials);
  const uint32_t features = s->with_sinks ? AOTK_FEATURE_SINKS : 0;
  CHECK_MSG(info.features == features, "%s: features %#x, expected %#x", what, info.features, features);

  reset_launch_log();
  status = aotk_attn_merge(params, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_merge %s (%s)", what, aotk_status_name(status), aotk_last_error());
  CHECK_MSG(fake.logged_launches == 1, "%s: %d launches", what, fake.logged_launches);
  if (status != AOTK_OK || fake.logged_launches != 1) return;
  const recorded_launch *launch = &fake.launch_log[0];
  const char *kernel = "attn_merge";
  check_sel_launch_shape(what, launch, KERNEL_ATTN_MERGE, row, grid, MERGE_GLOBAL_SCRATCH);
  if (launch->kernel != KERNEL_ATTN_MERGE) return;
  static const char *const slot_names[3] = {"fp32", "fp16", "bf16"};
  for (int slot = 0; slot < 3; slot++) {
    char name[32];
    snprintf(name, sizeof name, "%s partial pointer", slot_names[slot]);
    check_pointer(what, kernel, launch, MERGE_PARTIAL32 + slot,
                  slot == merge_slot(s->partial_dtype) ? params->out_partials.data : NULL, name);
    snprintf(name, sizeof name, "%s out pointer", slot_names[slot]);
    check_pointer(what, kernel, launch, MERGE_OUT32 + slot, slot == merge_slot(s->out_dtype) ? params->out.data : NULL,
                  name);
  }
  check_pointer(what, kernel, launch, MERGE_LSE_PARTIAL, params->lse_partials.data, "lse_partials");
  check_pointer(what, kernel, launch, MERGE_LSE, params->lse.data, "lse");
  check_pointer(what, kernel, launch, MERGE_SINKS, params->sinks.data, "sinks");
  const aotk_tensor *parts = &params->out_partials, *lse_parts = &params->lse_partials, *out = &params->out;
  const aotk_tensor *lse = &params->lse;
  int64_t expected[14];
  if (s->packed) {
    const int64_t packed[14] = {parts->strides[0], 0, parts->strides[1], parts->strides[2],
                                lse_parts->strides[0], 0, lse_parts->strides[1], lse_parts->strides[2],
                                0, out->strides[0], out->strides[1],
                                0, s->with_lse ? lse->strides[0] : 0, s->with_lse ? lse->strides[1] : 0};
    memcpy(expected, packed, sizeof expected);
  } else {
    const int64_t dense[14] = {parts->strides[0], parts->strides[1], parts->strides[2], parts->strides[3],
                               lse_parts->strides[0], lse_parts->strides[1], lse_parts->strides[2],
                               lse_parts->strides[3],
                               out->strides[0], out->strides[1], out->strides[2],
                               s->with_lse ? lse->strides[0] : 0, s->with_lse ? lse->strides[1] : 0,
                               s->with_lse ? lse->strides[2] : 0};
    memcpy(expected, dense, sizeof expected);
  }
  static const char *const stride_names[14] = {"stride_pp", "stride_pb", "stride_ps", "stride_ph", "stride_lpp",
                                               "stride_lpb", "stride_lph", "stride_lps", "stride_ob", "stride_os",
                                               "stride_oh", "stride_lb", "stride_lh", "stride_ls"};
  for (int i = 0; i < 14; i++) check_i64(what, kernel, launch, MERGE_STRIDE_PP + i, expected[i], stride_names[i]);
  check_int(what, kernel, launch, MERGE_NUM_PARTIALS, s->num_partials, "num_partials");
  check_int(what, kernel, launch, MERGE_SEQLEN_Q, s->seqlen_q, "seqlen_q");
  check_int(what, kernel, launch, MERGE_HEADS, s->heads, "heads");
  check_int(what, kernel, launch, MERGE_NUM_ROWS, rows, "num_rows");
  check_int(what, kernel, launch, MERGE_HEAD_DIM8, s->head_dim / 8, "head_dim8");
  const int32_t flags = merge_dtype_flags(s->partial_dtype, s->out_dtype) | (s->with_lse ? FLAG_WRITE_LSE : 0) |
                        (s->with_sinks ? FLAG_SINKS : 0) | (whole_rows ? MERGE_FLAG_WHOLE_ROWS : 0);
  CHECK_MSG(arg_i32(launch, MERGE_FLAGS) == flags, "%s: flags %#x, expected %#x", what,
            (unsigned)arg_i32(launch, MERGE_FLAGS), (unsigned)flags);
}

static void test_merge_launch_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const aotk_dtype dtypes[3] = {AOTK_DTYPE_FLOAT32, AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};
  int cases = 0;
  for (int packed = 0; packed <= 1; packed++) {
    for (int p = 0; p < 3; p++) {
      for (int o = 0; o < 3; o++) {
        merge_shape s = packed ? packed_merge_shape : default_merge_shape;
        s.partial_dtype = dtypes[p], s.out_dtype = dtypes[o];
        s.with_lse = (p + o) % 2 == 0, s.with_sinks = (p + 2 * o) % 3 == 0;
        char what[96];
        static const char *const dtype_names[3] = {"fp32", "fp16", "bf16"};
        snprintf(what, sizeof what, "%s, %s partials into %s, lse %d, sinks %d", packed ? "packed" : "dense",
                 dtype_names[p], dtype_names[o], s.with_lse, s.with_sinks);
        aotk_merge_params params = merge_params_for(s);
        check_merge(what, &params, &s, &sel_sm90, 1);
        params = strided_merge_params(s, false);
        check_merge(what, &params, &s, &sel_sm90, 1);
        params = strided_merge_params(s, true);
        check_merge(what, &params, &s, &sel_sm90, 0);
        cases += 3;
      }
    }
  }
  /* Alignment: each of the partials and out, moved off 16 bytes or given a stride that is not a
   * multiple of 16 elements, takes the unaligned variant; lse_partials, lse and sinks do not count. */
  merge_shape s = default_merge_shape;
  aotk_merge_params params = merge_params_for(s);
  params.out_partials.data = byte_offset(FAKE_PARTIALS, 4);
  check_merge("partials 4 bytes past 16", &params, &s, &sel_sm90, 0);
  params = merge_params_for(s);
  params.out.data = byte_offset(FAKE_OUT, 2);
  check_merge("out 2 bytes past 16", &params, &s, &sel_sm90, 0);
  params = merge_params_for(s);
  params.out.strides[1] += 8, params.out.strides[0] += 5 * 8;
  check_merge("out token stride 8 past", &params, &s, &sel_sm90, 0);
  params = merge_params_for(s);
  params.lse_partials.data = byte_offset(FAKE_LSE_PARTIALS, 4), params.lse_partials.strides[0] += 3;
  params.lse.data = byte_offset(FAKE_LSE, 4);
  check_merge("lse_partials and lse only 4-byte aligned", &params, &s, &sel_sm90, 1);
  /* Any multiple of 8 for head_dim, and one partial. */
  s.head_dim = 8, s.num_partials = 1;
  params = merge_params_for(s);
  check_merge("head_dim 8, one partial: strides of 8 elements, unaligned", &params, &s, &sel_sm90, 0);
  s.head_dim = 1000, s.partial_dtype = AOTK_DTYPE_FLOAT16, s.out_dtype = AOTK_DTYPE_FLOAT16;
  params = merge_params_for(s);
  check_merge("head_dim 1000", &params, &s, &sel_sm90, 0);
  s.head_dim = 1008;
  params = merge_params_for(s);
  check_merge("head_dim 1008 (63 x 16)", &params, &s, &sel_sm90, 1);
  uninstall_fake_gpu();
  /* The sm_80 image on sm_86, its PTX on sm_120. */
  static const gpu gpus[] = {{86, SHARED_SM86, 80, 0}, {120, SHARED_SM120, 80, 1}};
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    s = packed_merge_shape;
    params = strided_merge_params(s, false);
    check_merge(gpus[g].from_ptx ? "packed, sm_120 (PTX)" : "packed, sm_86", &params, &s, &gpus[g], 1);
  }
  uninstall_fake_gpu();
  printf("    %d merges\n", cases);
}

/* ---- the merge: validation ---- */

typedef struct merge_bad_input {
  const char *what;
  void (*spoil)(aotk_merge_params *params); /* NULL: pass params = NULL */
  aotk_status expected;
  const char *mentions;
} merge_bad_input;

static void make_packed(aotk_merge_params *p) { *p = merge_params_for(packed_merge_shape); }
static void mrg_struct_size_zero(aotk_merge_params *p) { p->struct_size = 0; }
static void mrg_struct_size_short(aotk_merge_params *p) { p->struct_size = sizeof(aotk_merge_params) - 1; }
static void mrg_struct_size_garbage(aotk_merge_params *p) { p->struct_size = (size_t)1 << 40; }
static void mrg_partials_null(aotk_merge_params *p) { p->out_partials.data = NULL; }
static void mrg_partials_rank_3(aotk_merge_params *p) { p->out_partials.rank = 3; }
static void mrg_partials_rank_6(aotk_merge_params *p) { p->out_partials.rank = 6; }
static void mrg_partials_int32(aotk_merge_params *p) { p->out_partials.dtype = AOTK_DTYPE_INT32; }
static void mrg_partials_uint8(aotk_merge_params *p) { p->out_partials.dtype = AOTK_DTYPE_UINT8; }
static void mrg_partials_dtype_garbage(aotk_merge_params *p) { p->out_partials.dtype = (aotk_dtype)99; }
static void mrg_partials_head_dim_100(aotk_merge_params *p) { p->out_partials.shape[4] = p->out.shape[3] = 100; }
static void mrg_partials_head_dim_4(aotk_merge_params *p) { p->out_partials.shape[4] = p->out.shape[3] = 4; }
static void mrg_partials_last_stride_2(aotk_merge_params *p) { p->out_partials.strides[4] = 2; }
static void mrg_partials_stride_negative(aotk_merge_params *p) { p->out_partials.strides[0] = -1; }
static void mrg_partials_zero_partials(aotk_merge_params *p) { p->out_partials.shape[0] = 0; }
static void mrg_partials_misaligned(aotk_merge_params *p) { p->out_partials.data = byte_offset(FAKE_PARTIALS, 2); }
static void mrg_lse_partials_null(aotk_merge_params *p) { p->lse_partials.data = NULL; }
static void mrg_lse_partials_rank_5(aotk_merge_params *p) { p->lse_partials.rank = 5; }
static void mrg_lse_partials_rank_3(aotk_merge_params *p) { p->lse_partials.rank = 3; }
static void mrg_lse_partials_float16(aotk_merge_params *p) { p->lse_partials.dtype = AOTK_DTYPE_FLOAT16; }
static void mrg_lse_partials_num_partials(aotk_merge_params *p) { p->lse_partials.shape[0] += 1; }
static void mrg_lse_partials_batch(aotk_merge_params *p) { p->lse_partials.shape[1] += 1; }
static void mrg_lse_partials_heads(aotk_merge_params *p) { p->lse_partials.shape[2] -= 1; }
static void mrg_lse_partials_seqlen(aotk_merge_params *p) { p->lse_partials.shape[3] += 1; }
static void mrg_lse_partials_like_out(aotk_merge_params *p) { /* [num_partials, batch, seqlen_q, heads] */
  p->lse_partials = aotk_tensor_4d(FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 4, 3, 5, 8);
}
static void mrg_out_null(aotk_merge_params *p) { p->out.data = NULL; }
static void mrg_out_rank_5(aotk_merge_params *p) { p->out.rank = 5; }
static void mrg_out_int32(aotk_merge_params *p) { p->out.dtype = AOTK_DTYPE_INT32; }
static void mrg_out_int64(aotk_merge_params *p) { p->out.dtype = AOTK_DTYPE_INT64; }
static void mrg_out_batch(aotk_merge_params *p) { p->out.shape[0] += 1; }
static void mrg_out_seqlen(aotk_merge_params *p) { p->out.shape[1] -= 1; }
static void mrg_out_heads(aotk_merge_params *p) { p->out.shape[2] = 4; }
static void mrg_out_head_dim(aotk_merge_params *p) { p->out.shape[3] = 64; }
static void mrg_out_heads_stride_zero(aotk_merge_params *p) { p->out.strides[2] = 0; }
static void mrg_out_last_stride_2(aotk_merge_params *p) { p->out.strides[3] = 2; }
static void mrg_lse_rank_2(aotk_merge_params *p) { p->lse.rank = 2; }
static void mrg_lse_float16(aotk_merge_params *p) { p->lse.dtype = AOTK_DTYPE_FLOAT16; }
static void mrg_lse_batch(aotk_merge_params *p) { p->lse.shape[0] += 1; }
static void mrg_lse_heads(aotk_merge_params *p) { p->lse.shape[1] = 4; }
static void mrg_lse_seqlen(aotk_merge_params *p) { p->lse.shape[2] += 1; }
static void mrg_lse_like_out(aotk_merge_params *p) { /* [batch, seqlen_q, heads] */
  p->lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 3, 5, 8);
}
static void mrg_lse_heads_stride_zero(aotk_merge_params *p) { p->lse.strides[1] = 0; }
static void mrg_sinks(aotk_merge_params *p) { p->sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 8); }
static void mrg_sinks_heads_plus_one(aotk_merge_params *p) { mrg_sinks(p), p->sinks.shape[0] = 9; }
static void mrg_sinks_per_batch(aotk_merge_params *p) {
  p->sinks = aotk_tensor_2d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 3, 8);
}
static void mrg_sinks_bfloat16(aotk_merge_params *p) { mrg_sinks(p), p->sinks.dtype = AOTK_DTYPE_BFLOAT16; }
static void mrg_packed_lse_partials_rank_4(aotk_merge_params *p) { /* the dense layout's [P, 1, heads, total_q] */
  make_packed(p), p->lse_partials = aotk_tensor_4d(FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 2, 1, 8, 170);
}
static void mrg_packed_lse_partials_transposed(aotk_merge_params *p) { /* [P, total_q, heads] */
  make_packed(p), p->lse_partials = aotk_tensor_3d(FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 2, 170, 8);
}
static void mrg_packed_lse_partials_num_partials(aotk_merge_params *p) {
  make_packed(p), p->lse_partials.shape[0] = 3;
}
static void mrg_packed_out_rank_4(aotk_merge_params *p) {
  make_packed(p), p->out = aotk_tensor_4d(FAKE_OUT, AOTK_DTYPE_BFLOAT16, 1, 170, 8, 64);
}
static void mrg_packed_out_total(aotk_merge_params *p) { make_packed(p), p->out.shape[0] += 1; }
static void mrg_packed_out_heads(aotk_merge_params *p) { make_packed(p), p->out.shape[1] = 2; }
static void mrg_packed_out_head_dim(aotk_merge_params *p) { make_packed(p), p->out.shape[2] = 128; }
static void mrg_packed_head_dim_12(aotk_merge_params *p) {
  make_packed(p), p->out_partials.shape[3] = p->out.shape[2] = 12;
}
static void mrg_packed_lse_rank_3(aotk_merge_params *p) {
  make_packed(p), p->lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 1, 8, 170);
}
static void mrg_packed_lse_transposed(aotk_merge_params *p) { /* [total_q, heads] */
  make_packed(p), p->lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 170, 8);
}
static void mrg_packed_sinks_heads(aotk_merge_params *p) { make_packed(p), p->sinks.shape[0] = 7; }
static void mrg_packed_partials_rank_5_lse_rank_3(aotk_merge_params *p) { /* dense partials, packed LSEs */
  p->lse_partials = aotk_tensor_3d(FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 4, 8, 15);
}
/* 2^20 requests of 64 tokens and 32 heads: 2^31 rows, one more than the kernel's int32 row count (the
 * partials broadcast, out's rows 16 elements apart). */
static void mrg_rows_2_31(aotk_merge_params *p) {
  const int64_t B = (int64_t)1 << 20, S = 64, H = 32;
  const aotk_tensor parts = {FAKE_PARTIALS, AOTK_DTYPE_FLOAT32, 5, {2, B, S, H, 16, 0}, {0, 0, 0, 0, 1, 0}};
  const aotk_tensor lse_parts = {FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 4, {2, B, H, S, 0, 0}, {0, 0, 0, 1, 0, 0}};
  const aotk_tensor out = {FAKE_OUT, AOTK_DTYPE_FLOAT32, 4, {B, S, H, 16, 0, 0}, {S * H * 16, H * 16, 16, 1, 0, 0}};
  aotk_merge_params params = AOTK_MERGE_PARAMS_INIT;
  params.out_partials = parts, params.lse_partials = lse_parts, params.out = out;
  *p = params;
}
static void mrg_partials_2_31(aotk_merge_params *p) { /* 2^31 partials, broadcast */
  p->out_partials.shape[0] = p->lse_partials.shape[0] = (int64_t)1 << 31;
  p->out_partials.strides[0] = p->lse_partials.strides[0] = 0;
}

static const merge_bad_input merge_bad_inputs[] = {
    {"params NULL", NULL, AOTK_ERROR_NULL_POINTER, "params"},
    {"struct_size 0", mrg_struct_size_zero, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size one byte short", mrg_struct_size_short, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size garbage", mrg_struct_size_garbage, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"out_partials.data NULL", mrg_partials_null, AOTK_ERROR_NULL_POINTER, "out_partials.data"},
    {"out_partials rank 3", mrg_partials_rank_3, AOTK_ERROR_RANK, "out_partials.rank"},
    {"out_partials rank 6", mrg_partials_rank_6, AOTK_ERROR_RANK, "out_partials.rank"},
    {"out_partials int32", mrg_partials_int32, AOTK_ERROR_UNSUPPORTED_DTYPE, "out_partials.dtype"},
    {"out_partials uint8", mrg_partials_uint8, AOTK_ERROR_UNSUPPORTED_DTYPE, "out_partials.dtype"},
    {"out_partials dtype garbage", mrg_partials_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "out_partials.dtype"},
    {"head_dim 100", mrg_partials_head_dim_100, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "out_partials.shape[4]"},
    {"head_dim 4", mrg_partials_head_dim_4, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "out_partials.shape[4]"},
    {"out_partials last stride 2", mrg_partials_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM,
     "out_partials.strides[4]"},
    {"out_partials stride negative", mrg_partials_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE,
     "out_partials.strides[0]"},
    {"no partials", mrg_partials_zero_partials, AOTK_ERROR_NONPOSITIVE_SIZE, "out_partials.shape[0]"},
    {"out_partials misaligned", mrg_partials_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "out_partials.data"},
    {"lse_partials.data NULL", mrg_lse_partials_null, AOTK_ERROR_NULL_POINTER, "lse_partials.data"},
    {"lse_partials rank 5", mrg_lse_partials_rank_5, AOTK_ERROR_RANK, "lse_partials.rank"},
    {"lse_partials rank 3 (packed), partials dense", mrg_lse_partials_rank_3, AOTK_ERROR_RANK, "lse_partials.rank"},
    {"lse_partials float16", mrg_lse_partials_float16, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse_partials.dtype"},
    {"lse_partials one partial more", mrg_lse_partials_num_partials, AOTK_ERROR_SHAPE_MISMATCH,
     "lse_partials.shape[0]"},
    {"lse_partials batch + 1", mrg_lse_partials_batch, AOTK_ERROR_SHAPE_MISMATCH, "lse_partials.shape[1]"},
    {"lse_partials heads - 1", mrg_lse_partials_heads, AOTK_ERROR_SHAPE_MISMATCH, "lse_partials.shape[2]"},
    {"lse_partials seqlen_q + 1", mrg_lse_partials_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "lse_partials.shape[3]"},
    {"lse_partials in out's order", mrg_lse_partials_like_out, AOTK_ERROR_SHAPE_MISMATCH, "lse_partials.shape[2]"},
    {"out.data NULL", mrg_out_null, AOTK_ERROR_NULL_POINTER, "out.data"},
    {"out rank 5", mrg_out_rank_5, AOTK_ERROR_RANK, "out.rank"},
    {"out int32", mrg_out_int32, AOTK_ERROR_UNSUPPORTED_DTYPE, "out.dtype"},
    {"out int64", mrg_out_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "out.dtype"},
    {"out batch + 1", mrg_out_batch, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[0]"},
    {"out seqlen_q - 1", mrg_out_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[1]"},
    {"out heads 4", mrg_out_heads, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[2]"},
    {"out head_dim 64, partials 128", mrg_out_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[3]"},
    {"out heads stride 0", mrg_out_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[2]"},
    {"out last stride 2", mrg_out_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "out.strides[3]"},
    {"lse rank 2", mrg_lse_rank_2, AOTK_ERROR_RANK, "lse.rank"},
    {"lse float16", mrg_lse_float16, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"lse batch + 1", mrg_lse_batch, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"lse heads 4", mrg_lse_heads, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"lse seqlen_q + 1", mrg_lse_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[2]"},
    {"lse in out's order", mrg_lse_like_out, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"lse heads stride 0", mrg_lse_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "lse.strides[1]"},
    {"sinks [heads + 1]", mrg_sinks_heads_plus_one, AOTK_ERROR_SHAPE_MISMATCH, "sinks.shape[0]"},
    {"sinks [batch, heads]", mrg_sinks_per_batch, AOTK_ERROR_RANK, "sinks.rank"},
    {"sinks bfloat16", mrg_sinks_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "sinks.dtype"},
    {"packed: lse_partials rank 4", mrg_packed_lse_partials_rank_4, AOTK_ERROR_RANK, "lse_partials.rank"},
    {"packed: lse_partials [P, total_q, heads]", mrg_packed_lse_partials_transposed, AOTK_ERROR_SHAPE_MISMATCH,
     "lse_partials.shape[1]"},
    {"packed: lse_partials one partial more", mrg_packed_lse_partials_num_partials, AOTK_ERROR_SHAPE_MISMATCH,
     "lse_partials.shape[0]"},
    {"packed: out rank 4", mrg_packed_out_rank_4, AOTK_ERROR_RANK, "out.rank"},
    {"packed: out total_q + 1", mrg_packed_out_total, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[0]"},
    {"packed: out heads 2", mrg_packed_out_heads, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[1]"},
    {"packed: out head_dim 128, partials 64", mrg_packed_out_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[2]"},
    {"packed: head_dim 12", mrg_packed_head_dim_12, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "out_partials.shape[3]"},
    {"packed: lse rank 3", mrg_packed_lse_rank_3, AOTK_ERROR_RANK, "lse.rank"},
    {"packed: lse [total_q, heads]", mrg_packed_lse_transposed, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"packed: sinks [7]", mrg_packed_sinks_heads, AOTK_ERROR_SHAPE_MISMATCH, "sinks.shape[0]"},
    {"dense partials with packed LSEs", mrg_packed_partials_rank_5_lse_rank_3, AOTK_ERROR_RANK, "lse_partials.rank"},
    {"2^31 rows", mrg_rows_2_31, AOTK_ERROR_SIZE_OVERFLOW, "batch * seqlen_q * heads"},
    {"2^31 partials", mrg_partials_2_31, AOTK_ERROR_SIZE_OVERFLOW, "num_partials"},
};

/* One bad input through aotk_attn_merge and aotk_merge_query, the fake installed as a working sm_90 GPU:
 * the expected status and a message naming the argument, no driver call, params and info untouched. */
static void check_merge_bad_input(const merge_bad_input *c) {
  aotk_merge_params params = valid_merge_params();
  if (c->spoil != NULL) c->spoil(&params);
  const aotk_merge_params before = params;
  const aotk_merge_params *argument = c->spoil != NULL ? &params : NULL;
  reset_calls();
  aotk_status status = aotk_attn_merge(argument, FAKE_STREAM);
  CHECK_MSG(status == c->expected, "%s: aotk_attn_merge gave %s (%s), expected %s", c->what, aotk_status_name(status),
            aotk_last_error(), aotk_status_name(c->expected));
  CHECK_MSG(message_mentions(c->mentions), "%s: aotk_attn_merge's message \"%s\" does not mention \"%s\"", c->what,
            aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: aotk_attn_merge reached the driver (%s)", c->what, called_functions());
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: aotk_attn_merge changed the caller's params", c->what);

  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status query_status = aotk_merge_query(AOTK_OP_MERGE, argument, &info);
  CHECK_MSG(query_status == status, "%s: aotk_merge_query gave %s, aotk_attn_merge %s", c->what,
            aotk_status_name(query_status), aotk_status_name(status));
  CHECK_MSG(message_mentions(c->mentions), "%s: aotk_merge_query's message \"%s\" does not mention \"%s\"", c->what,
            aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: aotk_merge_query reached the driver (%s)", c->what, called_functions());
  CHECK_MSG(info_untouched(&info), "%s: aotk_merge_query wrote *info on failure", c->what);
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: aotk_merge_query changed the caller's params", c->what);
}

static void test_merge_validation_rejects_bad_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  void (*const bases[])(aotk_merge_params *) = {make_packed, mrg_sinks};
  for (size_t i = 0; i <= sizeof bases / sizeof bases[0]; i++) {
    aotk_merge_params params = valid_merge_params();
    if (i > 0) bases[i - 1](&params);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_merge_query(AOTK_OP_MERGE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "base %zu fails: %s (%s)", i, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(aotk_attn_merge(&params, FAKE_STREAM) == AOTK_OK, "base %zu: %s", i, aotk_last_error());
  }
  const size_t count = sizeof merge_bad_inputs / sizeof merge_bad_inputs[0];
  for (size_t i = 0; i < count; i++) check_merge_bad_input(&merge_bad_inputs[i]);
  printf("    %zu bad inputs\n", count);
  uninstall_fake_gpu();
}

/* Merges the header allows that look odd: in place (out and lse are the first partial's memory, in its
 * layout and dtype), outputs broadcast over dimensions of size 1, partials broadcast, a newer caller's
 * larger struct, a row count of exactly 2^31 - 1; and a query from a caller built before 0.4. */
static void test_merge_validation_accepts_edge_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  struct {
    aotk_merge_params params;
    unsigned char newer_fields[64];
  } call;
  merge_shape s = default_merge_shape;
  s.out_dtype = AOTK_DTYPE_FLOAT32;
  memset(&call, 0, sizeof call);
  call.params = merge_params_for(s);
  /* In place: out is partial 0 (its strides are the partials' without the first), lse partial 0's. */
  call.params.out.data = call.params.out_partials.data;
  memcpy(call.params.out.strides, call.params.out_partials.strides + 1, 4 * sizeof(int64_t));
  call.params.lse.data = call.params.lse_partials.data;
  memcpy(call.params.lse.strides, call.params.lse_partials.strides + 1, 3 * sizeof(int64_t));
  check_merge("in place", &call.params, &s, &sel_sm90, 1);
  call.params.struct_size = sizeof call.params + 64;
  check_merge("in place, a newer caller's struct", &call.params, &s, &sel_sm90, 1);

  s = default_merge_shape;
  s.batch = 1, s.seqlen_q = 1;
  aotk_merge_params params = merge_params_for(s);
  params.out.strides[0] = params.out.strides[1] = 0, params.lse.strides[0] = 0;
  check_merge("out and lse stride 0 on dimensions of size 1", &params, &s, &sel_sm90, 1);
  params = merge_params_for(s);
  params.out_partials.strides[0] = params.lse_partials.strides[0] = 0;
  check_merge("every partial the same memory", &params, &s, &sel_sm90, 1);

  /* 2^31 - 1 rows: 1 x (2^31 - 1) tokens x 1 head, the partials broadcast. */
  const aotk_tensor parts = {FAKE_PARTIALS, AOTK_DTYPE_FLOAT32, 4, {2, INT32_MAX, 1, 16, 0, 0}, {0, 0, 16, 1, 0, 0}};
  const aotk_tensor lse_parts = {FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 3, {2, 1, INT32_MAX, 0, 0, 0},
                                 {0, 0, 1, 0, 0, 0}};
  params = (aotk_merge_params)AOTK_MERGE_PARAMS_INIT;
  params.out_partials = parts, params.lse_partials = lse_parts;
  params.out = aotk_tensor_3d(FAKE_OUT, AOTK_DTYPE_FLOAT16, INT32_MAX, 1, 16);
  s = (merge_shape){AOTK_DTYPE_FLOAT32, AOTK_DTYPE_FLOAT16, 2, 1, INT32_MAX, 1, 16, true, false, false};
  check_merge("2^31 - 1 rows", &params, &s, &sel_sm90, 1);

  /* A caller built before 0.4: nothing from num_splits on is written. */
  params = merge_params_for(default_merge_shape);
  aotk_kernel_info info;
  poison_info(&info);
  info.struct_size = offsetof(aotk_kernel_info, num_splits);
  CHECK(aotk_merge_query(AOTK_OP_MERGE, &params, &info) == AOTK_OK);
  const unsigned char *bytes = (const unsigned char *)&info;
  bool tail_untouched = true;
  for (size_t b = offsetof(aotk_kernel_info, num_splits); b < sizeof info; b++) {
    tail_untouched = tail_untouched && bytes[b] == POISON;
  }
  CHECK_MSG(tail_untouched && info.launches == 1 && strncmp(info.kernel_name, "attn_merge_", 11) == 0,
            "aotk_merge_query wrote past struct_size (or not before it): %s", info.kernel_name);
  uninstall_fake_gpu();
}

/* The merge's grid, as literals. The default problem's 3 x 5 x 8 = 120 rows of 128 columns from 4
 * partials: the one-partial kernel (8 rows x 32 columns a program) would have 15 x 4 = 60 programs, fewer
 * than the 132 SMs, so the kernel of one row x 32 columns (32 partials a step) runs, 120 row blocks x 4
 * column chunks = 480 programs, unless lse is written over the partials' lse (in place), where one
 * program per row block walks the 4 chunks (FLAG_WHOLE_ROWS, 120 programs): the programs of a row would
 * otherwise write the lse that the others still read. An in-place merge without lse, or an lse that
 * only borders the partials' lse (on either side), keeps the chunks. The same with 2 partials (the
 * one-partial kernel: 60 and 15 programs). */
static void test_merge_in_place_grid(void) {
  install_fake_gpu(90, SHARED_SM90);
  for (int round = 0; round < 2; round++) {
    /* Round 0: 4 partials, the wide kernel; round 1: 2 partials, the one-partial kernel. */
    const int64_t partials = round == 0 ? 4 : 2, block_m = round == 0 ? 1 : 8, row_blocks = 120 / block_m;
    merge_shape s = default_merge_shape;
    s.out_dtype = AOTK_DTYPE_FLOAT32;
    s.num_partials = partials;
    aotk_merge_params in_place = merge_params_for(s);
    in_place.out.data = in_place.out_partials.data;
    memcpy(in_place.out.strides, in_place.out_partials.strides + 1, 4 * sizeof(int64_t));
    in_place.lse.data = in_place.lse_partials.data;
    memcpy(in_place.lse.strides, in_place.lse_partials.strides + 1, 3 * sizeof(int64_t));
    aotk_merge_params no_lse = in_place;
    no_lse.lse.data = NULL;
    /* lse (120 floats) right after the partials' lse (partials x 120 floats from FAKE_LSE_PARTIALS), and
     * right before it. */
    aotk_merge_params after = merge_params_for(s), before = merge_params_for(s);
    after.lse.data = byte_offset(FAKE_LSE_PARTIALS, 4 * (size_t)partials * 120);
    before.lse.data = (void *)((uintptr_t)FAKE_LSE_PARTIALS - 4 * 120);
    const struct {
      const char *what;
      const aotk_merge_params *params;
      bool with_lse, whole_rows;
      int64_t grid;
    } cases[] = {
        {"out of place", NULL, true, false, row_blocks * 4},
        {"in place, lse over the first partial's", &in_place, true, true, row_blocks},
        {"in place, no lse", &no_lse, false, false, row_blocks * 4},
        {"lse right after the partials' lse", &after, true, false, row_blocks * 4},
        {"lse right before the partials' lse", &before, true, false, row_blocks * 4},
    };
    const aotk_merge_params out_of_place = merge_params_for(s);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      char what[160];
      snprintf(what, sizeof what, "%lld partials, %s", (long long)partials, cases[i].what);
      const aotk_merge_params *params = cases[i].params != NULL ? cases[i].params : &out_of_place;
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      aotk_status status = aotk_merge_query(AOTK_OP_MERGE, params, &info);
      CHECK_MSG(status == AOTK_OK && info.block_m == block_m && info.block_n == 32 && info.grid == cases[i].grid,
                "%s: %s (%s), block %d x %d, grid %lld, expected %lld x 32, %lld", what, aotk_status_name(status),
                aotk_last_error(), info.block_m, info.block_n, (long long)info.grid, (long long)block_m,
                (long long)cases[i].grid);
      reset_launch_log();
      status = aotk_attn_merge(params, FAKE_STREAM);
      CHECK_MSG(status == AOTK_OK && fake.logged_launches == 1, "%s: %s (%s), %d launches", what,
                aotk_status_name(status), aotk_last_error(), fake.logged_launches);
      if (status != AOTK_OK || fake.logged_launches != 1) continue;
      const recorded_launch *launch = &fake.launch_log[0];
      const int32_t flags =
          (cases[i].with_lse ? FLAG_WRITE_LSE : 0) | (cases[i].whole_rows ? MERGE_FLAG_WHOLE_ROWS : 0);
      CHECK_MSG(launch->grid[0] == (unsigned)cases[i].grid && arg_i32(launch, MERGE_FLAGS) == flags,
                "%s: grid %u, flags %#x, expected %lld, %#x", what, launch->grid[0],
                (unsigned)arg_i32(launch, MERGE_FLAGS), (long long)cases[i].grid, (unsigned)flags);
      s.with_lse = cases[i].with_lse;
      check_merge(what, params, &s, &sel_sm90, 1);
    }
  }
  /* 2^31 - 1 rows (1 x (2^31 - 1) tokens x 1 head, the partials broadcast) of head dim 1024: 2^28 row
   * blocks x 32 column chunks = 2^33 programs would pass the grid limit of 2^31 - 1, so whole rows, 2^28
   * programs, though nothing is in place. */
  aotk_merge_params huge = AOTK_MERGE_PARAMS_INIT;
  huge.out_partials = (aotk_tensor){FAKE_PARTIALS, AOTK_DTYPE_FLOAT32, 4, {2, INT32_MAX, 1, 1024, 0, 0},
                                    {0, 0, 1024, 1, 0, 0}};
  huge.lse_partials = (aotk_tensor){FAKE_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 3, {2, 1, INT32_MAX, 0, 0, 0},
                                    {0, 0, 1, 0, 0, 0}};
  huge.out = aotk_tensor_3d(FAKE_OUT, AOTK_DTYPE_FLOAT16, INT32_MAX, 1, 1024);
  const merge_shape huge_shape = {AOTK_DTYPE_FLOAT32, AOTK_DTYPE_FLOAT16, 2, 1, INT32_MAX, 1, 1024, true, false, false};
  aotk_kernel_info huge_info = AOTK_KERNEL_INFO_INIT;
  aotk_status huge_status = aotk_merge_query(AOTK_OP_MERGE, &huge, &huge_info);
  CHECK_MSG(huge_status == AOTK_OK && huge_info.grid == (int64_t)1 << 28, "2^31 - 1 rows of head dim 1024: %s (%s), "
            "grid %lld", aotk_status_name(huge_status), aotk_last_error(), (long long)huge_info.grid);
  reset_launch_log();
  huge_status = aotk_attn_merge(&huge, FAKE_STREAM);
  CHECK_MSG(huge_status == AOTK_OK && fake.logged_launches == 1 && fake.launch_log[0].grid[0] == 1u << 28 &&
                arg_i32(&fake.launch_log[0], MERGE_FLAGS) == (MERGE_FLAG_OUT_FP16 | MERGE_FLAG_WHOLE_ROWS),
            "2^31 - 1 rows of head dim 1024: %s (%s), %d launches", aotk_status_name(huge_status), aotk_last_error(),
            fake.logged_launches);
  check_merge("2^31 - 1 rows of head dim 1024", &huge, &huge_shape, &sel_sm90, 1);
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_merge_validation_rejects_bad_inputs);
  RUN_TEST(test_merge_validation_accepts_edge_inputs);
  RUN_TEST(test_merge_in_place_grid);
  RUN_TEST(test_merge_launch_arguments);
  aotk__driver_set_for_testing(NULL);
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);
  return aotk_test_finish();
}
