/*
 * CPU tests of the public API, selection attention's validation (0.3): every bad input of
 * aotk_sel_fwd, aotk_sel_bwd, aotk_sel_query and aotk_sel_check_indices refused with its status before
 * the driver is reached, the backward's fields the forward ignores, and the edge inputs accepted. The
 * rest is test_api_sel.c's; the fake driver and the shared models are tests/api/api_*.h (see
 * api_fake_driver.h).
 */
#include <math.h>

#include "api_sel_model.h"

/* ---- selection: validation ---- */

typedef struct sel_bad_input {
  const char *what;
  void (*spoil)(aotk_sel_params *params); /* NULL: pass params = NULL */
  aotk_status expected;
  const char *mentions; /* in aotk_last_error() */
} sel_bad_input;

/* Rebuilds *p from shape `s`, keeping it a backward's params if it was one. */
static void sel_rebuild(aotk_sel_params *p, sel_shape s) { *p = sel_params_for(s, p->dout.data != NULL); }

static void sel_struct_size_zero(aotk_sel_params *p) { p->struct_size = 0; }
static void sel_struct_size_short(aotk_sel_params *p) { p->struct_size = sizeof(aotk_sel_params) - 1; }
static void sel_struct_size_of_a_pointer(aotk_sel_params *p) { p->struct_size = sizeof(void *); }
static void sel_struct_size_garbage(aotk_sel_params *p) { p->struct_size = (size_t)1 << 40; }
static void sel_q_null(aotk_sel_params *p) { p->q.data = NULL; }
static void sel_block_idx_at_the_top(aotk_sel_params *p) { p->block_idx.data = (void *)(UINTPTR_MAX - 3); }
static void sel_k_null(aotk_sel_params *p) { p->k.data = NULL; }
static void sel_v_null(aotk_sel_params *p) { p->v.data = NULL; }
static void sel_out_null(aotk_sel_params *p) { p->out.data = NULL; }
static void sel_block_idx_null(aotk_sel_params *p) { p->block_idx.data = NULL; }
/* dtypes */
static void sel_q_float32(aotk_sel_params *p) { p->q.dtype = AOTK_DTYPE_FLOAT32; }
static void sel_q_int32(aotk_sel_params *p) { p->q.dtype = AOTK_DTYPE_INT32; }
static void sel_q_dtype_garbage(aotk_sel_params *p) { p->q.dtype = (aotk_dtype)1234; }
static void sel_k_float16(aotk_sel_params *p) { p->k.dtype = AOTK_DTYPE_FLOAT16; }
static void sel_k_dtype_zero(aotk_sel_params *p) { p->k.dtype = (aotk_dtype)0; }
static void sel_v_float32(aotk_sel_params *p) { p->v.dtype = AOTK_DTYPE_FLOAT32; }
static void sel_out_float16(aotk_sel_params *p) { p->out.dtype = AOTK_DTYPE_FLOAT16; }
static void sel_lse_bfloat16(aotk_sel_params *p) { p->lse.dtype = AOTK_DTYPE_BFLOAT16; }
static void sel_lse_int32(aotk_sel_params *p) { p->lse.dtype = AOTK_DTYPE_INT32; }
static void sel_block_idx_int64(aotk_sel_params *p) { p->block_idx.dtype = AOTK_DTYPE_INT64; }
static void sel_block_idx_float32(aotk_sel_params *p) { p->block_idx.dtype = AOTK_DTYPE_FLOAT32; }
static void sel_block_cnt_int64(aotk_sel_params *p) { p->block_cnt.dtype = AOTK_DTYPE_INT64; }
static void sel_block_cnt_uint8(aotk_sel_params *p) { p->block_cnt.dtype = AOTK_DTYPE_UINT8; }
static void sel_cu_seqlens_q_int64(aotk_sel_params *p) { p->cu_seqlens_q.dtype = AOTK_DTYPE_INT64; }
static void sel_cu_seqlens_k_float32(aotk_sel_params *p) { p->cu_seqlens_k.dtype = AOTK_DTYPE_FLOAT32; }
/* ranks */
static void sel_q_rank_4(aotk_sel_params *p) { p->q.rank = 4; }
static void sel_k_rank_2(aotk_sel_params *p) { p->k.rank = 2; }
static void sel_v_rank_4(aotk_sel_params *p) { p->v.rank = 4; }
static void sel_out_rank_2(aotk_sel_params *p) { p->out.rank = 2; }
static void sel_lse_rank_3(aotk_sel_params *p) { p->lse.rank = 3; }
static void sel_lse_rank_1(aotk_sel_params *p) { p->lse.rank = 1; }
static void sel_block_idx_rank_2(aotk_sel_params *p) { p->block_idx.rank = 2; }
static void sel_block_idx_rank_4(aotk_sel_params *p) { p->block_idx.rank = 4; }
static void sel_block_cnt_rank_3(aotk_sel_params *p) { p->block_cnt.rank = 3; }
static void sel_cu_seqlens_k_rank_2(aotk_sel_params *p) { p->cu_seqlens_k.rank = 2; }
/* shapes */
static void sel_k_head_dim(aotk_sel_params *p) { p->k.shape[2] = 64; }
static void sel_v_total_k(aotk_sel_params *p) { p->v.shape[0] -= 1; }
static void sel_v_heads(aotk_sel_params *p) { p->v.shape[1] = 4; }
static void sel_out_total_q(aotk_sel_params *p) { p->out.shape[0] += 1; }
static void sel_out_heads_kv(aotk_sel_params *p) { p->out.shape[1] = p->k.shape[1]; }
static void sel_out_head_dim(aotk_sel_params *p) { p->out.shape[2] = 64; }
static void sel_lse_total_q(aotk_sel_params *p) { p->lse.shape[0] -= 1; }
static void sel_lse_heads_kv(aotk_sel_params *p) { p->lse.shape[1] = p->k.shape[1]; }
static void sel_lse_transposed(aotk_sel_params *p) { /* [heads_q, total_q]: dense attention's varlen layout */
  p->lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, p->q.shape[1], p->q.shape[0]);
}
static void sel_block_idx_total_q(aotk_sel_params *p) { p->block_idx.shape[0] += 1; }
static void sel_block_idx_heads_q(aotk_sel_params *p) { /* one selection per query head, not per kv head */
  p->block_idx = aotk_tensor_3d(FAKE_BLOCK_IDX, AOTK_DTYPE_INT32, p->q.shape[0], p->q.shape[1], 16);
}
static void sel_block_idx_total_k(aotk_sel_params *p) {
  p->block_idx = aotk_tensor_3d(FAKE_BLOCK_IDX, AOTK_DTYPE_INT32, p->k.shape[0], p->k.shape[1], 16);
}
static void sel_block_cnt_total_q(aotk_sel_params *p) { p->block_cnt.shape[0] -= 1; }
static void sel_block_cnt_heads_q(aotk_sel_params *p) {
  p->block_cnt = aotk_tensor_2d(FAKE_BLOCK_CNT, AOTK_DTYPE_INT32, p->q.shape[0], p->q.shape[1]);
}
/* sizes */
static void sel_q_total_zero(aotk_sel_params *p) { p->q.shape[0] = 0; }
static void sel_k_heads_zero(aotk_sel_params *p) { p->k.shape[1] = 0; }
static void sel_v_head_dim_negative(aotk_sel_params *p) { p->v.shape[2] = -128; }
static void sel_block_idx_slots_zero(aotk_sel_params *p) { p->block_idx.shape[2] = 0; }
/* strides */
static void sel_q_last_stride_2(aotk_sel_params *p) { p->q.strides[2] = 2; }
static void sel_v_last_stride_0(aotk_sel_params *p) { p->v.strides[2] = 0; }
static void sel_lse_last_stride_2(aotk_sel_params *p) { p->lse.strides[1] = 2; }
static void sel_block_idx_last_stride_2(aotk_sel_params *p) { p->block_idx.strides[2] = 2; }
static void sel_block_cnt_last_stride_0(aotk_sel_params *p) { p->block_cnt.strides[1] = 0; }
static void sel_k_stride_negative(aotk_sel_params *p) { p->k.strides[0] = -256; }
static void sel_block_idx_stride_negative(aotk_sel_params *p) { p->block_idx.strides[1] = -16; }
static void sel_out_heads_stride_zero(aotk_sel_params *p) { p->out.strides[1] = 0; }
static void sel_out_token_stride_zero(aotk_sel_params *p) { p->out.strides[0] = 0; }
static void sel_lse_token_stride_zero(aotk_sel_params *p) { p->lse.strides[0] = 0; }
/* alignment: the kernels assume 16-byte-aligned pointers and strides that are multiples of 16 elements */
static void sel_q_odd_address(aotk_sel_params *p) { p->q.data = byte_offset(FAKE_Q, 1); }
static void sel_q_two_bytes_off(aotk_sel_params *p) { p->q.data = byte_offset(FAKE_Q, 2); }
static void sel_k_eight_bytes_off(aotk_sel_params *p) { p->k.data = byte_offset(FAKE_K, 8); }
static void sel_v_token_stride_8(aotk_sel_params *p) { p->v.strides[0] += 8; }
static void sel_out_heads_stride_136(aotk_sel_params *p) { p->out.strides[1] = 136, p->out.strides[0] = 8 * 136; }
static void sel_q_token_stride_8_past(aotk_sel_params *p) { p->q.strides[1] = 144, p->q.strides[0] = 8 * 144 + 8; }
static void sel_lse_odd_address(aotk_sel_params *p) { p->lse.data = byte_offset(FAKE_LSE, 2); }
static void sel_block_idx_misaligned(aotk_sel_params *p) { p->block_idx.data = byte_offset(FAKE_BLOCK_IDX, 2); }
static void sel_block_cnt_misaligned(aotk_sel_params *p) { p->block_cnt.data = byte_offset(FAKE_BLOCK_CNT, 1); }
static void sel_cu_seqlens_q_misaligned(aotk_sel_params *p) {
  p->cu_seqlens_q.data = byte_offset(FAKE_CU_SEQLENS_Q, 2);
}
/* head dims: only (64, 64), (128, 128) and (192, 128) are compiled; none is padded */
static void sel_set_head_dims(aotk_sel_params *p, int64_t head_dim_qk, int64_t head_dim_v) {
  sel_shape s = default_sel_shape;
  s.head_dim_qk = head_dim_qk, s.head_dim_v = head_dim_v;
  sel_rebuild(p, s);
}
static void sel_head_dims_96(aotk_sel_params *p) { sel_set_head_dims(p, 96, 96); }
static void sel_head_dims_192(aotk_sel_params *p) { sel_set_head_dims(p, 192, 192); }
static void sel_head_dims_256_128(aotk_sel_params *p) { sel_set_head_dims(p, 256, 128); }
static void sel_head_dims_256(aotk_sel_params *p) { sel_set_head_dims(p, 256, 256); }
static void sel_head_dims_32(aotk_sel_params *p) { sel_set_head_dims(p, 32, 32); }
static void sel_head_dims_64_128(aotk_sel_params *p) { sel_set_head_dims(p, 64, 128); }
static void sel_head_dims_128_64(aotk_sel_params *p) { sel_set_head_dims(p, 128, 64); }
static void sel_head_dims_192_64(aotk_sel_params *p) { sel_set_head_dims(p, 192, 64); }
/* heads */
static void sel_set_heads_kv(aotk_sel_params *p, int64_t heads_kv) {
  sel_shape s = default_sel_shape;
  s.heads_kv = heads_kv;
  sel_rebuild(p, s);
}
static void sel_heads_kv_3(aotk_sel_params *p) { sel_set_heads_kv(p, 3); }
static void sel_heads_kv_above_heads_q(aotk_sel_params *p) { sel_set_heads_kv(p, 16); }
/* scalars */
static void sel_block_size_16(aotk_sel_params *p) { p->block_size = 16; }
static void sel_block_size_0(aotk_sel_params *p) { p->block_size = 0; }
static void sel_block_size_negative(aotk_sel_params *p) { p->block_size = -64; }
static void sel_block_size_48(aotk_sel_params *p) { p->block_size = 48; }
static void sel_block_size_256(aotk_sel_params *p) { p->block_size = 256; }
static void sel_scale_negative(aotk_sel_params *p) { p->softmax_scale = -0.125f; }
static void sel_scale_nan(aotk_sel_params *p) { p->softmax_scale = NAN; }
static void sel_scale_infinite(aotk_sel_params *p) { p->softmax_scale = INFINITY; }
static void sel_scale_negative_infinite(aotk_sel_params *p) { p->softmax_scale = -INFINITY; }
/* cu_seqlens */
static void sel_only_cu_seqlens_q(aotk_sel_params *p) { p->cu_seqlens_k.data = NULL; }
static void sel_only_cu_seqlens_k(aotk_sel_params *p) { p->cu_seqlens_q.data = NULL; }
static void sel_only_cu_seqlens_q_no_max(aotk_sel_params *p) { p->cu_seqlens_k.data = NULL, p->max_seqlen_k = 0; }
static void sel_cu_seqlens_k_longer(aotk_sel_params *p) { p->cu_seqlens_k.shape[0] += 1; }
static void sel_cu_seqlens_q_shorter(aotk_sel_params *p) { p->cu_seqlens_q.shape[0] -= 1; }
static void sel_cu_seqlens_q_one_offset(aotk_sel_params *p) { p->cu_seqlens_q.shape[0] = p->cu_seqlens_k.shape[0] = 1; }
static void sel_cu_seqlens_k_stride_2(aotk_sel_params *p) { p->cu_seqlens_k.strides[0] = 2; }
static void sel_max_seqlen_k_zero(aotk_sel_params *p) { p->max_seqlen_k = 0; }
static void sel_max_seqlen_k_negative(aotk_sel_params *p) { p->max_seqlen_k = -1; }
static void sel_max_seqlen_k_min(aotk_sel_params *p) { p->max_seqlen_k = INT32_MIN; }
/* sizes the kernels' 32-bit arithmetic cannot hold */
static void sel_slots_overflow(aotk_sel_params *p) { /* total_q * slots * group size > 2^31 */
  p->block_idx = aotk_tensor_3d(FAKE_BLOCK_IDX, AOTK_DTYPE_INT32, p->q.shape[0], p->k.shape[1], (int64_t)1 << 22);
}
static void sel_q_heads_span_overflow(aotk_sel_params *p) { /* one token's heads span > 2^31 elements */
  p->q.strides[1] = (int64_t)1 << 29, p->q.strides[0] = (int64_t)1 << 32;
}
static void sel_block_idx_heads_span_overflow(aotk_sel_params *p) { p->block_idx.strides[1] = (int64_t)1 << 31; }
/* a block of block_size tokens past 2^31 elements (the kernels address a block's rows with 32 bits) */
static void sel_k_block_span_overflow(aotk_sel_params *p) {
  p->k.strides[0] = (INT32_MAX / p->block_size / 16 + 1) * 16;
}
static void sel_v_block_span_overflow(aotk_sel_params *p) {
  p->v.strides[0] = (INT32_MAX / p->block_size / 16 + 1) * 16;
}
static void sel_total_q_beyond_int32(aotk_sel_params *p) {
  sel_shape s = default_sel_shape;
  s.total_q = INT32_MAX;
  sel_rebuild(p, s);
}
static void sel_index_beyond_int32(aotk_sel_params *p) { /* 2^20 sequences of up to 2^31 - 1 keys */
  p->cu_seqlens_q.shape[0] = p->cu_seqlens_k.shape[0] = ((int64_t)1 << 20) + 1;
  p->max_seqlen_k = INT32_MAX;
}
/* Just past the two bounds the dK/dV split lowered to 2^30 - 1 (from 2^31 - 1), every other size within
 * its own: 9 sequences of up to 2^31 - 1 keys on 2 kv heads make 9 * 2 * 2^26 key tiles of 32 keys (their
 * index, 9 * 2^25 slots of 64 keys per kv head, fits); 21 sequences of up to 32 * 51130563 keys on one kv
 * head, blocks of 32, make 21 * 51130563 = 2^30 - 1 key tiles (at the bound) and as many index slots, to
 * which the bound adds 8. */
static void sel_key_tiles_beyond_2_30(aotk_sel_params *p) {
  p->cu_seqlens_q.shape[0] = p->cu_seqlens_k.shape[0] = 9 + 1;
  p->max_seqlen_k = INT32_MAX;
}
static void sel_index_slots_beyond_2_30(aotk_sel_params *p) {
  sel_set_heads_kv(p, 1);
  p->block_size = 32;
  p->cu_seqlens_q.shape[0] = p->cu_seqlens_k.shape[0] = 21 + 1;
  p->max_seqlen_k = 32 * 51130563;
}

static const sel_bad_input sel_bad_inputs[] = {
    {"params NULL", NULL, AOTK_ERROR_NULL_POINTER, "params"},
    {"struct_size 0", sel_struct_size_zero, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size one byte short", sel_struct_size_short, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size of a pointer", sel_struct_size_of_a_pointer, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size garbage", sel_struct_size_garbage, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"q.data NULL", sel_q_null, AOTK_ERROR_NULL_POINTER, "q.data"},
    {"k.data NULL", sel_k_null, AOTK_ERROR_NULL_POINTER, "k.data"},
    {"v.data NULL", sel_v_null, AOTK_ERROR_NULL_POINTER, "v.data"},
    {"out.data NULL", sel_out_null, AOTK_ERROR_NULL_POINTER, "out.data"},
    {"block_idx.data NULL", sel_block_idx_null, AOTK_ERROR_NULL_POINTER, "block_idx.data"},
    {"block_idx past the end of the address space", sel_block_idx_at_the_top, AOTK_ERROR_SIZE_OVERFLOW,
     "end of the address space"},
    {"q float32", sel_q_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"q int32", sel_q_int32, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"q dtype garbage", sel_q_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"k float16, q bfloat16", sel_k_float16, AOTK_ERROR_DTYPE_MISMATCH, "k.dtype"},
    {"k dtype 0", sel_k_dtype_zero, AOTK_ERROR_UNSUPPORTED_DTYPE, "k.dtype"},
    {"v float32", sel_v_float32, AOTK_ERROR_DTYPE_MISMATCH, "v.dtype"},
    {"out float16, q bfloat16", sel_out_float16, AOTK_ERROR_DTYPE_MISMATCH, "out.dtype"},
    {"lse bfloat16", sel_lse_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"lse int32", sel_lse_int32, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"block_idx int64", sel_block_idx_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "block_idx.dtype"},
    {"block_idx float32", sel_block_idx_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "block_idx.dtype"},
    {"block_cnt int64", sel_block_cnt_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "block_cnt.dtype"},
    {"block_cnt uint8", sel_block_cnt_uint8, AOTK_ERROR_UNSUPPORTED_DTYPE, "block_cnt.dtype"},
    {"cu_seqlens_q int64", sel_cu_seqlens_q_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_q"},
    {"cu_seqlens_k float32", sel_cu_seqlens_k_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_k"},
    {"q rank 4", sel_q_rank_4, AOTK_ERROR_RANK, "q.rank"},
    {"k rank 2", sel_k_rank_2, AOTK_ERROR_RANK, "k.rank"},
    {"v rank 4", sel_v_rank_4, AOTK_ERROR_RANK, "v.rank"},
    {"out rank 2", sel_out_rank_2, AOTK_ERROR_RANK, "out.rank"},
    {"lse rank 3", sel_lse_rank_3, AOTK_ERROR_RANK, "lse.rank"},
    {"lse rank 1", sel_lse_rank_1, AOTK_ERROR_RANK, "lse.rank"},
    {"block_idx rank 2", sel_block_idx_rank_2, AOTK_ERROR_RANK, "block_idx.rank"},
    {"block_idx rank 4", sel_block_idx_rank_4, AOTK_ERROR_RANK, "block_idx.rank"},
    {"block_cnt rank 3", sel_block_cnt_rank_3, AOTK_ERROR_RANK, "block_cnt.rank"},
    {"cu_seqlens_k rank 2", sel_cu_seqlens_k_rank_2, AOTK_ERROR_RANK, "cu_seqlens_k.rank"},
    {"k head_dim != q head_dim", sel_k_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "k.shape[2]"},
    {"v total_k != k total_k", sel_v_total_k, AOTK_ERROR_SHAPE_MISMATCH, "v.shape[0]"},
    {"v heads != k heads", sel_v_heads, AOTK_ERROR_SHAPE_MISMATCH, "v.shape[1]"},
    {"out total_q != q total_q", sel_out_total_q, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[0]"},
    {"out heads_kv heads", sel_out_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[1]"},
    {"out head_dim != v head_dim", sel_out_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[2]"},
    {"lse total_q short", sel_lse_total_q, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"lse heads_kv heads", sel_lse_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"lse [heads_q, total_q]", sel_lse_transposed, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"block_idx total_q long", sel_block_idx_total_q, AOTK_ERROR_SHAPE_MISMATCH, "block_idx.shape[0]"},
    {"block_idx per query head", sel_block_idx_heads_q, AOTK_ERROR_SHAPE_MISMATCH, "block_idx.shape[1]"},
    {"block_idx over the keys", sel_block_idx_total_k, AOTK_ERROR_SHAPE_MISMATCH, "block_idx.shape[0]"},
    {"block_cnt total_q short", sel_block_cnt_total_q, AOTK_ERROR_SHAPE_MISMATCH, "block_cnt.shape[0]"},
    {"block_cnt per query head", sel_block_cnt_heads_q, AOTK_ERROR_SHAPE_MISMATCH, "block_cnt.shape[1]"},
    {"q total_q 0", sel_q_total_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "q.shape[0]"},
    {"k heads 0", sel_k_heads_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "k.shape[1]"},
    {"v head_dim negative", sel_v_head_dim_negative, AOTK_ERROR_NONPOSITIVE_SIZE, "v.shape[2]"},
    {"block_idx 0 slots", sel_block_idx_slots_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "block_idx.shape[2]"},
    {"q last stride 2", sel_q_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "q.strides[2]"},
    {"v last stride 0", sel_v_last_stride_0, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "v.strides[2]"},
    {"lse last stride 2", sel_lse_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "lse.strides[1]"},
    {"block_idx last stride 2", sel_block_idx_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "block_idx.strides[2]"},
    {"block_cnt last stride 0", sel_block_cnt_last_stride_0, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "block_cnt.strides[1]"},
    {"k stride negative", sel_k_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "k.strides[0]"},
    {"block_idx stride negative", sel_block_idx_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "block_idx.strides[1]"},
    {"out heads stride 0", sel_out_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[1]"},
    {"out token stride 0", sel_out_token_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[0]"},
    {"lse token stride 0", sel_lse_token_stride_zero, AOTK_ERROR_INVALID_VALUE, "lse.strides[0]"},
    {"q odd address", sel_q_odd_address, AOTK_ERROR_MISALIGNED_POINTER, "q.data"},
    {"q 2 bytes past 16-byte alignment", sel_q_two_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "q: data"},
    {"k 8 bytes past 16-byte alignment", sel_k_eight_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "k: data"},
    {"v token stride not a multiple of 16", sel_v_token_stride_8, AOTK_ERROR_MISALIGNED_POINTER, "v: data"},
    {"out heads stride 136", sel_out_heads_stride_136, AOTK_ERROR_MISALIGNED_POINTER, "out: data"},
    {"q token stride 8 * 144 + 8", sel_q_token_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER, "q: data"},
    {"lse odd address", sel_lse_odd_address, AOTK_ERROR_MISALIGNED_POINTER, "lse.data"},
    {"block_idx 2-byte aligned", sel_block_idx_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "block_idx.data"},
    {"block_cnt odd address", sel_block_cnt_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "block_cnt.data"},
    {"cu_seqlens_q 2-byte aligned", sel_cu_seqlens_q_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "cu_seqlens_q.data"},
    {"head dims (96, 96)", sel_head_dims_96, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 96"},
    {"head dims (192, 192)", sel_head_dims_192, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v = 192"},
    {"head dims (256, 128)", sel_head_dims_256_128, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 256"},
    {"head dims (256, 256)", sel_head_dims_256, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 256"},
    {"head dims (32, 32)", sel_head_dims_32, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 32"},
    {"head dims (64, 128)", sel_head_dims_64_128, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v = 128"},
    {"head dims (128, 64)", sel_head_dims_128_64, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v = 64"},
    {"head dims (192, 64)", sel_head_dims_192_64, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 192"},
    {"heads_kv 3, heads_q 8", sel_heads_kv_3, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_kv = 3"},
    {"heads_kv 16, heads_q 8", sel_heads_kv_above_heads_q, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_kv = 16"},
    {"block_size 16", sel_block_size_16, AOTK_ERROR_INVALID_VALUE, "block_size"},
    {"block_size 0", sel_block_size_0, AOTK_ERROR_INVALID_VALUE, "block_size"},
    {"block_size -64", sel_block_size_negative, AOTK_ERROR_INVALID_VALUE, "block_size"},
    {"block_size 48", sel_block_size_48, AOTK_ERROR_INVALID_VALUE, "block_size"},
    {"block_size 256", sel_block_size_256, AOTK_ERROR_INVALID_VALUE, "block_size"},
    {"softmax_scale negative", sel_scale_negative, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale NaN", sel_scale_nan, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale infinite", sel_scale_infinite, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale -infinite", sel_scale_negative_infinite, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"cu_seqlens_q without cu_seqlens_k", sel_only_cu_seqlens_q, AOTK_ERROR_NULL_POINTER, "cu_seqlens_k.data"},
    {"cu_seqlens_k without cu_seqlens_q", sel_only_cu_seqlens_k, AOTK_ERROR_NULL_POINTER, "cu_seqlens_q.data"},
    {"cu_seqlens_q alone, max_seqlen_k 0", sel_only_cu_seqlens_q_no_max, AOTK_ERROR_NULL_POINTER,
     "cu_seqlens_k.data"},
    {"cu_seqlens_k longer", sel_cu_seqlens_k_longer, AOTK_ERROR_SHAPE_MISMATCH, "cu_seqlens_k.shape[0]"},
    {"cu_seqlens_q shorter", sel_cu_seqlens_q_shorter, AOTK_ERROR_SHAPE_MISMATCH, "cu_seqlens_q.shape[0]"},
    {"cu_seqlens of one offset", sel_cu_seqlens_q_one_offset, AOTK_ERROR_NONPOSITIVE_SIZE, "cu_seqlens_q.shape[0]"},
    {"cu_seqlens_k stride 2", sel_cu_seqlens_k_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "cu_seqlens_k.strides[0]"},
    {"max_seqlen_k 0 with cu_seqlens", sel_max_seqlen_k_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_k"},
    {"max_seqlen_k -1 with cu_seqlens", sel_max_seqlen_k_negative, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_k"},
    {"max_seqlen_k INT32_MIN with cu_seqlens", sel_max_seqlen_k_min, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_k"},
    {"total_q * slots * group size beyond int32", sel_slots_overflow, AOTK_ERROR_SIZE_OVERFLOW, "slots = 4194304"},
    {"q: one token's heads beyond int32", sel_q_heads_span_overflow, AOTK_ERROR_SIZE_OVERFLOW, "q: one token"},
    {"k: a block of tokens beyond int32", sel_k_block_span_overflow, AOTK_ERROR_SIZE_OVERFLOW, "k.strides[0]"},
    {"v: a block of tokens beyond int32", sel_v_block_span_overflow, AOTK_ERROR_SIZE_OVERFLOW, "v.strides[0]"},
    {"block_idx: one token's heads beyond int32", sel_block_idx_heads_span_overflow, AOTK_ERROR_SIZE_OVERFLOW,
     "block_idx: one token"},
    {"total_q beyond int32", sel_total_q_beyond_int32, AOTK_ERROR_SIZE_OVERFLOW, "total_q = 2147483647"},
    {"index slots beyond int32", sel_index_beyond_int32, AOTK_ERROR_SIZE_OVERFLOW, "1048576 sequences"},
    {"dK/dV key tiles beyond 2^30", sel_key_tiles_beyond_2_30, AOTK_ERROR_SIZE_OVERFLOW, "9 sequences"},
    {"index slots and kv heads beyond 2^30", sel_index_slots_beyond_2_30, AOTK_ERROR_SIZE_OVERFLOW, "21 sequences"},
};

/* The backward's own arguments. */
static void sel_lse_null(aotk_sel_params *p) { p->lse.data = NULL; }
static void sel_dout_null(aotk_sel_params *p) { p->dout.data = NULL; }
static void sel_dq_null(aotk_sel_params *p) { p->dq.data = NULL; }
static void sel_dk_null(aotk_sel_params *p) { p->dk.data = NULL; }
static void sel_dv_null(aotk_sel_params *p) { p->dv.data = NULL; }
static void sel_dq_float16(aotk_sel_params *p) { p->dq.dtype = AOTK_DTYPE_FLOAT16; }
static void sel_dout_float32(aotk_sel_params *p) { p->dout.dtype = AOTK_DTYPE_FLOAT32; }
static void sel_dk_dtype_garbage(aotk_sel_params *p) { p->dk.dtype = (aotk_dtype)77; }
static void sel_dk_rank_4(aotk_sel_params *p) { p->dk.rank = 4; }
static void sel_dv_rank_2(aotk_sel_params *p) { p->dv.rank = 2; }
static void sel_dout_rank_4(aotk_sel_params *p) { p->dout.rank = 4; }
static void sel_dq_like_k(aotk_sel_params *p) {
  p->dq = aotk_tensor_3d(FAKE_DQ, p->q.dtype, p->k.shape[0], p->k.shape[1], p->k.shape[2]);
}
static void sel_dk_like_q(aotk_sel_params *p) { /* what dk would be without the sum over the group */
  p->dk = aotk_tensor_3d(FAKE_DK, p->q.dtype, p->q.shape[0], p->q.shape[1], p->q.shape[2]);
}
static void sel_dk_heads_q(aotk_sel_params *p) {
  p->dk = aotk_tensor_3d(FAKE_DK, p->q.dtype, p->k.shape[0], p->q.shape[1], p->k.shape[2]);
}
static void sel_dv_total_k(aotk_sel_params *p) { p->dv.shape[0] += 1; }
static void sel_dv_heads_q(aotk_sel_params *p) { p->dv.shape[1] = p->q.shape[1]; }
static void sel_dout_total_q(aotk_sel_params *p) { p->dout.shape[0] -= 1; }
static void sel_dout_heads_kv(aotk_sel_params *p) { p->dout.shape[1] = p->k.shape[1]; }
static void sel_dout_head_dim(aotk_sel_params *p) { p->dout.shape[2] = 64; }
static void sel_dq_head_dim(aotk_sel_params *p) { p->dq.shape[2] = 64; }
static void sel_dv_head_dim(aotk_sel_params *p) { p->dv.shape[2] = 64; }
static void sel_dq_misaligned(aotk_sel_params *p) { p->dq.data = byte_offset(FAKE_DQ, 2); }
static void sel_dk_token_stride_8(aotk_sel_params *p) { p->dk.strides[0] += 8; }
static void sel_dout_misaligned(aotk_sel_params *p) { p->dout.data = byte_offset(FAKE_DOUT, 8); }
static void sel_dv_odd_address(aotk_sel_params *p) { p->dv.data = byte_offset(FAKE_DV, 1); }
static void sel_dv_heads_stride_zero(aotk_sel_params *p) { p->dv.strides[1] = 0; }
static void sel_dq_token_stride_zero(aotk_sel_params *p) { p->dq.strides[0] = 0; }
static void sel_dout_last_stride_2(aotk_sel_params *p) { p->dout.strides[2] = 2; }
static void sel_dk_stride_negative(aotk_sel_params *p) { p->dk.strides[0] = -256; }
static void sel_dq_total_zero(aotk_sel_params *p) { p->dq.shape[0] = 0; }

static const sel_bad_input sel_bwd_bad_inputs[] = {
    {"lse.data NULL", sel_lse_null, AOTK_ERROR_NULL_POINTER, "lse"},
    {"dout.data NULL", sel_dout_null, AOTK_ERROR_NULL_POINTER, "dout.data"},
    {"dq.data NULL", sel_dq_null, AOTK_ERROR_NULL_POINTER, "dq.data"},
    {"dk.data NULL", sel_dk_null, AOTK_ERROR_NULL_POINTER, "dk.data"},
    {"dv.data NULL", sel_dv_null, AOTK_ERROR_NULL_POINTER, "dv.data"},
    {"dq float16, q bfloat16", sel_dq_float16, AOTK_ERROR_DTYPE_MISMATCH, "dq.dtype"},
    {"dout float32", sel_dout_float32, AOTK_ERROR_DTYPE_MISMATCH, "dout.dtype"},
    {"dk dtype garbage", sel_dk_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "dk.dtype"},
    {"dk rank 4", sel_dk_rank_4, AOTK_ERROR_RANK, "dk.rank"},
    {"dv rank 2", sel_dv_rank_2, AOTK_ERROR_RANK, "dv.rank"},
    {"dout rank 4", sel_dout_rank_4, AOTK_ERROR_RANK, "dout.rank"},
    {"dq like k", sel_dq_like_k, AOTK_ERROR_SHAPE_MISMATCH, "dq.shape[0]"},
    {"dk like q", sel_dk_like_q, AOTK_ERROR_SHAPE_MISMATCH, "dk.shape[0]"},
    {"dk with the query heads", sel_dk_heads_q, AOTK_ERROR_SHAPE_MISMATCH, "dk.shape[1]"},
    {"dv total_k long", sel_dv_total_k, AOTK_ERROR_SHAPE_MISMATCH, "dv.shape[0]"},
    {"dv with the query heads", sel_dv_heads_q, AOTK_ERROR_SHAPE_MISMATCH, "dv.shape[1]"},
    {"dout total_q short", sel_dout_total_q, AOTK_ERROR_SHAPE_MISMATCH, "dout.shape[0]"},
    {"dout with the kv heads", sel_dout_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "dout.shape[1]"},
    {"dout head_dim != v head_dim", sel_dout_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "dout.shape[2]"},
    {"dq head_dim != q head_dim", sel_dq_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "dq.shape[2]"},
    {"dv head_dim != v head_dim", sel_dv_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "dv.shape[2]"},
    {"dq 2 bytes past 16-byte alignment", sel_dq_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "dq: data"},
    {"dk token stride not a multiple of 16", sel_dk_token_stride_8, AOTK_ERROR_MISALIGNED_POINTER, "dk: data"},
    {"dout 8 bytes past 16-byte alignment", sel_dout_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "dout: data"},
    {"dv odd address", sel_dv_odd_address, AOTK_ERROR_MISALIGNED_POINTER, "dv.data"},
    {"dv heads stride 0", sel_dv_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "dv.strides[1]"},
    {"dq token stride 0", sel_dq_token_stride_zero, AOTK_ERROR_INVALID_VALUE, "dq.strides[0]"},
    {"dout last stride 2", sel_dout_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "dout.strides[2]"},
    {"dk stride negative", sel_dk_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "dk.strides[0]"},
    {"dq total_q 0", sel_dq_total_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "dq.shape[0]"},
};

enum { SEL_CHECK_WORKSPACE_BYTES = 16 };

/* Runs one bad input through the call `op` names, through aotk_sel_query(op) and (for the forward's
 * inputs, which it validates too) through aotk_sel_check_indices, with the recording fake installed as a
 * working sm_90 GPU: each must refuse it with the expected status and a message naming the argument,
 * call no driver function (so nothing is launched and no output written), and leave the caller's params
 * and the query's info untouched. */
static void check_sel_bad_input_op(const sel_bad_input *c, aotk_op op, bool check_indices) {
  const char *function = sel_op_function(op);
  aotk_sel_params params = op == AOTK_OP_SEL_FWD ? valid_sel_params() : valid_sel_bwd_params();
  if (c->spoil != NULL) c->spoil(&params);
  const aotk_sel_params before = params;
  const aotk_sel_params *argument = c->spoil != NULL ? &params : NULL;

  reset_calls();
  aotk_status status = run_sel_op(op, argument);
  CHECK_MSG(status == c->expected, "%s: %s gave %s (%s), expected %s", c->what, function, aotk_status_name(status),
            aotk_last_error(), aotk_status_name(c->expected));
  CHECK_MSG(message_mentions(c->mentions), "%s: %s's message \"%s\" does not mention \"%s\"", c->what, function,
            aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: %s reached the driver (%s)", c->what, function, called_functions());
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: %s changed the caller's params", c->what, function);

  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status query_status = aotk_sel_query(op, argument, &info);
  CHECK_MSG(query_status == status, "%s: aotk_sel_query(op %d) gave %s, %s %s", c->what, (int)op,
            aotk_status_name(query_status), function, aotk_status_name(status));
  CHECK_MSG(message_mentions(c->mentions), "%s: aotk_sel_query(op %d)'s message \"%s\" does not mention \"%s\"",
            c->what, (int)op, aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: aotk_sel_query(op %d) reached the driver (%s)", c->what, (int)op,
            called_functions());
  CHECK_MSG(info_untouched(&info), "%s: aotk_sel_query(op %d) wrote *info on failure", c->what, (int)op);
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: aotk_sel_query changed the caller's params", c->what);

  if (!check_indices) return;
  reset_calls();
  status = aotk_sel_check_indices(argument, FAKE_WORKSPACE, SEL_CHECK_WORKSPACE_BYTES, FAKE_STREAM);
  CHECK_MSG(status == c->expected, "%s: aotk_sel_check_indices gave %s (%s), expected %s", c->what,
            aotk_status_name(status), aotk_last_error(), aotk_status_name(c->expected));
  CHECK_MSG(message_mentions(c->mentions), "%s: aotk_sel_check_indices' message \"%s\" does not mention \"%s\"",
            c->what, aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: aotk_sel_check_indices reached the driver (%s)", c->what, called_functions());
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: aotk_sel_check_indices changed the caller's params",
            c->what);
}

/* Every bad input of the forward's arguments, through the forward, the backward (which validates them
 * first, the same way), both queries and the index check; then the backward's own. */
static void test_sel_validation_rejects_bad_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  /* The bases are valid, so each failure below is due to its one change. */
  aotk_sel_params params = valid_sel_params();
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK_MSG(aotk_sel_query(AOTK_OP_SEL_FWD, &params, &info) == AOTK_OK, "the base case fails: %s", aotk_last_error());
  params = valid_sel_bwd_params();
  CHECK_MSG(aotk_sel_query(AOTK_OP_SEL_BWD, &params, &info) == AOTK_OK, "the backward's base case fails: %s",
            aotk_last_error());
  reset_calls();
  CHECK_MSG(aotk_sel_check_indices(&params, FAKE_WORKSPACE, SEL_CHECK_WORKSPACE_BYTES, FAKE_STREAM) == AOTK_OK,
            "the index check's base case fails: %s", aotk_last_error());

  const size_t forward_cases = sizeof sel_bad_inputs / sizeof sel_bad_inputs[0];
  for (size_t i = 0; i < forward_cases; i++) {
    check_sel_bad_input_op(&sel_bad_inputs[i], AOTK_OP_SEL_FWD, true);
    check_sel_bad_input_op(&sel_bad_inputs[i], AOTK_OP_SEL_BWD, false);
  }
  const size_t backward_cases = sizeof sel_bwd_bad_inputs / sizeof sel_bwd_bad_inputs[0];
  for (size_t i = 0; i < backward_cases; i++) check_sel_bad_input_op(&sel_bwd_bad_inputs[i], AOTK_OP_SEL_BWD, false);
  printf("    %zu forward and %zu backward bad inputs\n", forward_cases, backward_cases);
  uninstall_fake_gpu();
}

/* The forward (and the index check) ignores the backward's fields: each of the backward's bad inputs is
 * fine for them, and they launch exactly what they launch without the fields. */
static void test_sel_fwd_ignores_bwd_fields(void) {
  install_fake_gpu(90, SHARED_SM90);
  aotk_sel_params clean = valid_sel_params();
  aotk_kernel_info clean_info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_sel_query(AOTK_OP_SEL_FWD, &clean, &clean_info) == AOTK_OK);
  CHECK(aotk_sel_fwd(&clean, FAKE_STREAM) == AOTK_OK);
  const recorded_launch clean_launch = fake.launch;
  const size_t cases = sizeof sel_bwd_bad_inputs / sizeof sel_bwd_bad_inputs[0];
  for (size_t i = 0; i <= cases; i++) {
    aotk_sel_params dirty = valid_sel_bwd_params();
    const char *what = "valid backward fields";
    if (i < cases) {
      if (sel_bwd_bad_inputs[i].spoil == sel_lse_null) continue; /* lse is the forward's own (optional) output */
      sel_bwd_bad_inputs[i].spoil(&dirty);
      what = sel_bwd_bad_inputs[i].what;
    }
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_sel_query(AOTK_OP_SEL_FWD, &dirty, &info);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(memcmp(&info, &clean_info, sizeof info) == 0, "%s: aotk_sel_query reports %s, without them %s", what,
              info.kernel_name, clean_info.kernel_name);
    reset_calls();
    status = aotk_sel_fwd(&dirty, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_fwd %s (%s)", what, aotk_status_name(status), aotk_last_error());
    CHECK(fake.calls[CALL_cuLaunchKernel] == 1);
    CHECK_MSG(memcmp(&fake.launch, &clean_launch, sizeof clean_launch) == 0, "%s: the forward launched differently",
              what);
    status = aotk_sel_check_indices(&dirty, FAKE_WORKSPACE, SEL_CHECK_WORKSPACE_BYTES, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_check_indices %s (%s)", what, aotk_status_name(status),
              aotk_last_error());
  }
  uninstall_fake_gpu();
}

/* Inputs at the edge of what selection attention allows, which validation must accept: each runs its
 * one kernel (forward) or its seven or eight launches (backward), as the query says. The params sit in a
 * struct with room after them, so that a struct_size larger than this header's (a newer caller's) is
 * readable memory. */
typedef struct sel_edge_case {
  const char *what;
  bool bwd;
  int launches;
  struct {
    aotk_sel_params params;
    unsigned char newer_fields[64];
  } call;
} sel_edge_case;

static aotk_sel_params *add_sel_edge_case(sel_edge_case *cases, int *count, const char *what, sel_shape shape,
                                          bool bwd) {
  sel_edge_case *c = &cases[(*count)++];
  memset(c, 0, sizeof *c);
  c->what = what;
  c->bwd = bwd;
  c->launches = bwd ? sel_bwd_launches(&shape) : 1;
  c->call.params = sel_params_for(shape, bwd);
  return &c->call.params;
}

static void test_sel_validation_accepts_edge_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  static sel_edge_case cases[24];
  int count = 0;
  sel_shape s = default_sel_shape;
  s.dtype = AOTK_DTYPE_FLOAT16;
  add_sel_edge_case(cases, &count, "float16", s, false);
  add_sel_edge_case(cases, &count, "float16 backward", s, true);
  s = default_sel_shape;
  s.num_seqs = 0;
  add_sel_edge_case(cases, &count, "no cu_seqlens (one sequence), max_seqlen_k 0 ignored", s, false)->max_seqlen_k = 0;
  add_sel_edge_case(cases, &count, "no cu_seqlens, backward, max_seqlen_k -5 ignored", s, true)->max_seqlen_k = -5;
  s = default_sel_shape;
  s.with_lse = false, s.with_block_cnt = false;
  add_sel_edge_case(cases, &count, "no lse, no block_cnt", s, false);
  add_sel_edge_case(cases, &count, "no block_cnt, backward", s, true);
  s = default_sel_shape;
  s.heads_q = 128, s.heads_kv = 1;
  add_sel_edge_case(cases, &count, "MQA, a group of 128", s, false);
  add_sel_edge_case(cases, &count, "MQA, a group of 128, backward (dK/dV chunks of 32 tokens: eight launches)", s,
                    true);
  s = default_sel_shape;
  s.heads_q = s.heads_kv = 1, s.slots = 1, s.total_q = s.total_k = 1, s.num_seqs = 1, s.max_seqlen_k = 1;
  add_sel_edge_case(cases, &count, "one token, one key, one slot", s, false);
  add_sel_edge_case(cases, &count, "one token, one key, one slot, backward", s, true);
  s = default_sel_shape;
  s.head_dim_qk = 192, s.block_size = 128;
  add_sel_edge_case(cases, &count, "head dims (192, 128), block size 128, backward", s, true);
  s.head_dim_qk = s.head_dim_v = 64, s.block_size = 32;
  add_sel_edge_case(cases, &count, "head dims (64, 64), block size 32", s, false);
  s = default_sel_shape;
  s.max_seqlen_k = INT32_MAX / 2; /* longer than any sequence: the grids and the index grow, nothing else */
  add_sel_edge_case(cases, &count, "max_seqlen_k far above total_k", s, false);
  add_sel_edge_case(cases, &count, "lse 4-byte aligned (it is not read 16 bytes at a time)", default_sel_shape,
                    false)->lse.data = byte_offset(FAKE_LSE, 4);
  aotk_sel_params *p = add_sel_edge_case(cases, &count, "block_idx and block_cnt 4-byte aligned", default_sel_shape,
                                         true);
  p->block_idx.data = byte_offset(FAKE_BLOCK_IDX, 4), p->block_cnt.data = byte_offset(FAKE_BLOCK_CNT, 12);
  p = add_sel_edge_case(cases, &count, "block_idx with odd strides (not read 16 bytes at a time)", default_sel_shape,
                        true);
  p->block_idx.strides[0] = 2 * 17 + 3, p->block_idx.strides[1] = 17;
  p = add_sel_edge_case(cases, &count, "inputs broadcast (zero strides)", default_sel_shape, true);
  p->q.strides[0] = p->k.strides[1] = p->v.strides[0] = p->dout.strides[0] = p->dout.strides[1] = 0;
  p->block_idx.strides[0] = p->block_cnt.strides[0] = 0;
  add_sel_edge_case(cases, &count, "explicit softmax_scale", default_sel_shape, true)->softmax_scale = 0.01f;
  add_sel_edge_case(cases, &count, "a struct_size larger than this header's (a newer caller)", default_sel_shape,
                    false)->struct_size = sizeof(aotk_sel_params) + 64;
  add_sel_edge_case(cases, &count, "a newer caller's backward", default_sel_shape, true)->struct_size =
      sizeof(aotk_sel_params) + 8;

  for (int i = 0; i < count; i++) {
    const aotk_op op = cases[i].bwd ? AOTK_OP_SEL_BWD : AOTK_OP_SEL_FWD;
    const aotk_sel_params *params = &cases[i].call.params;
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_sel_query(op, params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_sel_query %s (%s)", cases[i].what, aotk_status_name(status),
              aotk_last_error());
    CHECK_MSG(info.launches == cases[i].launches, "%s: the query says %d launches, expected %d", cases[i].what,
              info.launches, cases[i].launches);
    reset_calls();
    status = cases[i].bwd ? aotk_sel_bwd(params, FAKE_WORKSPACE, info.workspace_bytes, FAKE_STREAM)
                          : aotk_sel_fwd(params, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "%s: %s %s (%s)", cases[i].what, sel_op_function(op), aotk_status_name(status),
              aotk_last_error());
    CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == cases[i].launches, "%s: %d launches, expected %d", cases[i].what,
              fake.calls[CALL_cuLaunchKernel], cases[i].launches);
  }
  printf("    %d cases\n", count);
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_sel_validation_rejects_bad_inputs);
  RUN_TEST(test_sel_fwd_ignores_bwd_fields);
  RUN_TEST(test_sel_validation_accepts_edge_inputs);
  aotk__driver_set_for_testing(NULL);
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);
  return aotk_test_finish();
}
