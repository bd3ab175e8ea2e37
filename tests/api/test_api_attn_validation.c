/*
 * CPU tests of the public API, the validation of the attention forward and backward
 * (features included): every bad input returns its status with a message naming the argument, reaches
 * no driver call and touches nothing; edge inputs are accepted; the backward's workspace; aotk_query's
 * arguments.
 * The fake driver and the shared models are tests/api/api_*.h; see api_fake_driver.h.
 */
#include <math.h>

#include "api_problems.h"

/* The default problem as 2 sequences in 170 query and 230 key rows (each under its max_seqlen). */
enum { VARLEN_TOTAL_Q = 170, VARLEN_TOTAL_K = 230 };

/* Rewrites *p as the varlen form of the default problem, for the forward or (when *p has dout) the
 * backward: the base of the varlen validation cases. */
static void make_varlen(aotk_attn_params *p) {
  *p = varlen_params_for(default_problem, VARLEN_TOTAL_Q, VARLEN_TOTAL_K, p->dout.data != NULL);
}

/* ---- validation ----------------------------------------------------------------------------- */

typedef struct bad_input {
  const char *what;
  void (*spoil)(aotk_attn_params *params); /* NULL: pass params = NULL */
  aotk_status expected;
  const char *mentions; /* in aotk_last_error() */
} bad_input;

static void set_struct_size_zero(aotk_attn_params *p) { p->struct_size = 0; }
static void set_struct_size_short(aotk_attn_params *p) { p->struct_size = ATTN_PARAMS_0_1_BYTES - 1; }
static void set_struct_size_of_a_pointer(aotk_attn_params *p) { p->struct_size = sizeof(void *); }
static void set_struct_size_garbage(aotk_attn_params *p) { p->struct_size = (size_t)1 << 40; }
static void set_q_null(aotk_attn_params *p) { p->q.data = NULL; }
/* 16-byte aligned, 16 bytes below the end of the address space: q's span runs past it. */
static void set_q_at_the_top(aotk_attn_params *p) { p->q.data = (void *)(UINTPTR_MAX - 15); }
static void set_k_null(aotk_attn_params *p) { p->k.data = NULL; }
static void set_v_null(aotk_attn_params *p) { p->v.data = NULL; }
static void set_out_null(aotk_attn_params *p) { p->out.data = NULL; }
static void set_q_float32(aotk_attn_params *p) { p->q.dtype = AOTK_DTYPE_FLOAT32; }
static void set_q_dtype_zero(aotk_attn_params *p) { p->q.dtype = (aotk_dtype)0; }
static void set_q_dtype_garbage(aotk_attn_params *p) { p->q.dtype = (aotk_dtype)1234; }
static void set_k_dtype_garbage(aotk_attn_params *p) { p->k.dtype = (aotk_dtype)-7; }
static void set_k_float16(aotk_attn_params *p) { p->k.dtype = AOTK_DTYPE_FLOAT16; }
static void set_v_float16(aotk_attn_params *p) { p->v.dtype = AOTK_DTYPE_FLOAT16; }
static void set_out_float32(aotk_attn_params *p) { p->out.dtype = AOTK_DTYPE_FLOAT32; }
static void set_q_rank_3(aotk_attn_params *p) { p->q.rank = 3; }
static void set_q_rank_negative(aotk_attn_params *p) { p->q.rank = -1; }
static void set_k_rank_5(aotk_attn_params *p) { p->k.rank = 5; }
static void set_v_rank_beyond_max(aotk_attn_params *p) { p->v.rank = AOTK_TENSOR_MAX_RANK + 1; }
static void set_out_rank_0(aotk_attn_params *p) { p->out.rank = 0; }
static void set_k_batch(aotk_attn_params *p) { p->k.shape[0] = 3; }
static void set_v_batch(aotk_attn_params *p) { p->v.shape[0] = 1; }
static void set_v_seqlen(aotk_attn_params *p) { p->v.shape[1] = 131; }
static void set_v_heads(aotk_attn_params *p) { p->v.shape[2] = 4; }
static void set_out_batch(aotk_attn_params *p) { p->out.shape[0] = 3; }
static void set_out_seqlen(aotk_attn_params *p) { p->out.shape[1] = 99; }
static void set_out_heads(aotk_attn_params *p) { p->out.shape[2] = 16; }
static void set_k_head_dim(aotk_attn_params *p) { p->k.shape[3] = 128; }
static void set_v_head_dim(aotk_attn_params *p) { p->v.shape[3] = 128; }
static void set_out_head_dim(aotk_attn_params *p) { p->out.shape[3] = 128; }
static void set_q_last_stride_2(aotk_attn_params *p) { p->q.strides[3] = 2; }
static void set_v_last_stride_0(aotk_attn_params *p) { p->v.strides[3] = 0; }
static void set_lse_last_stride_2(aotk_attn_params *p) { p->lse.strides[2] = 2; }
static void set_k_stride_negative(aotk_attn_params *p) { p->k.strides[1] = -128; }
static void set_out_stride_negative(aotk_attn_params *p) { p->out.strides[0] = -1; }
static void set_q_odd_address(aotk_attn_params *p) { p->q.data = byte_offset(FAKE_Q, 1); }
static void set_out_odd_address(aotk_attn_params *p) { p->out.data = byte_offset(FAKE_OUT, 3); }
static void set_lse_misaligned(aotk_attn_params *p) { p->lse.data = byte_offset(FAKE_LSE, 2); }
static void set_heads_kv_3(aotk_attn_params *p) { p->k.shape[2] = p->v.shape[2] = 3; }
static void set_heads_kv_above_heads_q(aotk_attn_params *p) { p->k.shape[2] = p->v.shape[2] = 16; }
static void set_q_batch_zero(aotk_attn_params *p) { p->q.shape[0] = 0; }
static void set_q_heads_zero(aotk_attn_params *p) { p->q.shape[2] = 0; }
static void set_k_seqlen_negative(aotk_attn_params *p) { p->k.shape[1] = -5; }
static void set_out_head_dim_negative(aotk_attn_params *p) { p->out.shape[3] = -64; }
static void set_lse_seqlen_zero(aotk_attn_params *p) { p->lse.shape[2] = 0; }
static void set_q_offset_overflow(aotk_attn_params *p) {
  p->q.shape[0] = (int64_t)1 << 40;
  p->q.strides[0] = (int64_t)1 << 40;
}
static void set_k_stride_max(aotk_attn_params *p) { p->k.strides[0] = INT64_MAX; }
static void set_v_byte_overflow(aotk_attn_params *p) { p->v.strides[0] = (int64_t)1 << 62; } /* elements fit, bytes do not */
/* The kernels address a block's rows within it in 32 bits: a token stride times 256 rows must fit. */
static void set_q_token_stride_2_23(aotk_attn_params *p) { p->q.strides[1] = (int64_t)1 << 23; }
static void set_k_token_stride_2_24(aotk_attn_params *p) { p->k.strides[1] = (int64_t)1 << 24; }
/* Head strides are int32 arguments. */
static void set_q_head_stride_2_31(aotk_attn_params *p) { p->q.strides[2] = (int64_t)1 << 31; }
static void set_lse_head_stride_2_31(aotk_attn_params *p) { p->lse.strides[1] = (int64_t)1 << 31; }
static void set_seqlen_q_beyond_int32(aotk_attn_params *p) {
  problem shape = default_problem;
  shape.seqlen_q = INT32_MAX;
  shape.heads_q = shape.heads_kv = 1;
  *p = params_for(shape);
}
static void set_seqlen_k_beyond_int32(aotk_attn_params *p) {
  p->k.shape[1] = p->v.shape[1] = INT32_MAX;
  p->k.strides[1] = p->v.strides[1] = 0; /* inputs may broadcast; keeps the byte span small */
}
/* One past the length limit, 2^30 - 512 (the Gluon kernels' window arithmetic). */
static void set_seqlen_k_past_limit(aotk_attn_params *p) {
  p->k.shape[1] = p->v.shape[1] = ((int64_t)1 << 30) - 511;
  p->k.strides[1] = p->v.strides[1] = 0;
}
static void set_batch_beyond_int32(aotk_attn_params *p) {
  problem shape = default_problem;
  shape.batch = (int64_t)1 << 33;
  *p = params_for(shape);
}
/* 2^28 sequences of 2 query blocks of 8 heads: 2^32 programs, each size well within int32. */
static void set_batch_beyond_grid(aotk_attn_params *p) {
  problem shape = default_problem;
  shape.batch = (int64_t)1 << 28;
  *p = params_for(shape);
}
static void set_causal_2(aotk_attn_params *p) { p->causal = 2; }
static void set_causal_negative(aotk_attn_params *p) { p->causal = -1; }
static void set_scale_negative(aotk_attn_params *p) { p->softmax_scale = -0.125f; }
static void set_scale_nan(aotk_attn_params *p) { p->softmax_scale = NAN; }
static void set_scale_infinite(aotk_attn_params *p) { p->softmax_scale = INFINITY; }
static void set_scale_negative_infinite(aotk_attn_params *p) { p->softmax_scale = -INFINITY; }
static void set_lse_bfloat16(aotk_attn_params *p) { p->lse.dtype = AOTK_DTYPE_BFLOAT16; }
static void set_lse_dtype_garbage(aotk_attn_params *p) { p->lse.dtype = (aotk_dtype)99; }
static void set_lse_rank_4(aotk_attn_params *p) { p->lse.rank = 4; }
static void set_lse_batch(aotk_attn_params *p) { p->lse.shape[0] = 3; }
static void set_lse_heads_kv(aotk_attn_params *p) { p->lse.shape[1] = p->k.shape[2]; }
static void set_lse_seqlen_k(aotk_attn_params *p) { p->lse.shape[2] = p->k.shape[1]; }
static void set_lse_like_q(aotk_attn_params *p) { /* [batch, seqlen_q, heads_q]: the layout of q, not of lse */
  p->lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, p->q.shape[0], p->q.shape[1], p->q.shape[2]);
}
static void set_out_seqlen_stride_zero(aotk_attn_params *p) { p->out.strides[1] = 0; }
static void set_out_batch_stride_zero(aotk_attn_params *p) { p->out.strides[0] = 0; }
static void set_lse_heads_stride_zero(aotk_attn_params *p) { p->lse.strides[1] = 0; }

/* ---- the arguments added in 0.2 ---- */

/* Head dims: any multiple of 8 from 8 to 256, q and k sharing one (head_dim_qk), v and out another
 * (head_dim_v). The spoilers keep the backward's tensors when the params have them. */
static void set_head_dims(aotk_attn_params *p, int64_t head_dim_qk, int64_t head_dim_v) {
  problem shape = default_problem;
  shape.head_dim = head_dim_qk;
  shape.head_dim_v = head_dim_v;
  *p = p->dout.data != NULL ? bwd_params_for(shape) : params_for(shape);
}
static void set_head_dim_84(aotk_attn_params *p) { set_head_dims(p, 84, 84); }
static void set_head_dim_4(aotk_attn_params *p) { set_head_dims(p, 4, 4); }
static void set_head_dim_264(aotk_attn_params *p) { set_head_dims(p, 264, 264); }
static void set_head_dim_512(aotk_attn_params *p) { set_head_dims(p, 512, 512); }
static void set_head_dim_v_20(aotk_attn_params *p) { set_head_dims(p, 64, 20); }
static void set_head_dim_v_264(aotk_attn_params *p) { set_head_dims(p, 128, 264); }
static void set_head_dim_qk_260(aotk_attn_params *p) { set_head_dims(p, 260, 128); }
static void set_k_head_dim_of_v(aotk_attn_params *p) { /* q 64, k 128, v and out 128: k must follow q */
  set_head_dims(p, 64, 128);
  p->k.shape[3] = 128;
  p->k.strides[2] = 128, p->k.strides[1] = p->k.shape[2] * 128, p->k.strides[0] = p->k.shape[1] * p->k.strides[1];
}
static void set_out_head_dim_of_qk(aotk_attn_params *p) { /* v 128, out 64 (q's): out must follow v */
  set_head_dims(p, 64, 128);
  p->out = aotk_tensor_4d(FAKE_OUT, p->q.dtype, p->q.shape[0], p->q.shape[1], p->q.shape[2], 64);
}

/* Windows and the causal alignment. */
static void set_window_left_minus_2(aotk_attn_params *p) { p->window_left = -2; }
static void set_window_left_min(aotk_attn_params *p) { p->window_left = INT32_MIN; }
static void set_window_right_minus_7(aotk_attn_params *p) { p->window_right = -7; }
static void set_causal_window_right_1(aotk_attn_params *p) { p->causal = 1, p->window_right = 1; }
static void set_causal_window_right_max(aotk_attn_params *p) { p->causal = 1, p->window_right = INT32_MAX; }
static void set_causal_align_2(aotk_attn_params *p) { p->causal = 1, p->causal_align = 2; }
static void set_causal_align_negative(aotk_attn_params *p) { p->causal_align = -1; }
static void set_softcap_negative(aotk_attn_params *p) { p->softcap = -30.0f; }
static void set_softcap_infinite(aotk_attn_params *p) { p->softcap = INFINITY; }
static void set_softcap_negative_infinite(aotk_attn_params *p) { p->softcap = -INFINITY; }
static void set_softcap_nan(aotk_attn_params *p) { p->softcap = NAN; }
static void set_alibi_bfloat16(aotk_attn_params *p) { set_alibi(p), p->alibi_slopes.dtype = AOTK_DTYPE_BFLOAT16; }
static void set_alibi_heads_kv(aotk_attn_params *p) { set_alibi(p), p->alibi_slopes.shape[0] = 2; }
static void set_alibi_heads_plus_one(aotk_attn_params *p) { set_alibi(p), p->alibi_slopes.shape[0] = 9; }
static void set_alibi_size_zero(aotk_attn_params *p) { set_alibi(p), p->alibi_slopes.shape[0] = 0; }
static void set_alibi_stride_2(aotk_attn_params *p) { set_alibi(p), p->alibi_slopes.strides[0] = 2; }
static void set_alibi_misaligned(aotk_attn_params *p) { set_alibi(p), p->alibi_slopes.data = byte_offset(FAKE_ALIBI, 2); }
static void set_alibi_per_batch(aotk_attn_params *p) {
  p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 2, 8);
}
static void set_alibi_2d_batch(aotk_attn_params *p) {
  p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 3, 8);
}
static void set_alibi_2d_heads_kv(aotk_attn_params *p) {
  p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 2, 2);
}
static void set_alibi_2d_float16(aotk_attn_params *p) {
  p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT16, 2, 8);
}
static void set_alibi_2d_transposed(aotk_attn_params *p) { /* [heads_q, batch] */
  p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 8, 2);
}
static void set_alibi_rank_3(aotk_attn_params *p) {
  p->alibi_slopes = aotk_tensor_3d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 2, 1, 8);
}
static void set_sinks_heads_kv(aotk_attn_params *p) { set_sinks(p), p->sinks.shape[0] = 2; }
static void set_sinks_heads_plus_one(aotk_attn_params *p) { set_sinks(p), p->sinks.shape[0] = 9; }
static void set_sinks_per_batch(aotk_attn_params *p) { /* a shape ALiBi allows, sinks do not */
  p->sinks = aotk_tensor_2d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 2, 8);
}
static void set_sinks_bfloat16(aotk_attn_params *p) { set_sinks(p), p->sinks.dtype = AOTK_DTYPE_BFLOAT16; }
static void set_sinks_misaligned(aotk_attn_params *p) { set_sinks(p), p->sinks.data = byte_offset(FAKE_SINKS, 1); }
static void set_dropout_negative(aotk_attn_params *p) { set_dropout(p), p->dropout_p = -0.1f; }
static void set_dropout_one(aotk_attn_params *p) { set_dropout(p), p->dropout_p = 1.0f; }
static void set_dropout_above_one(aotk_attn_params *p) { set_dropout(p), p->dropout_p = 1.5f; }
static void set_dropout_nan(aotk_attn_params *p) { set_dropout(p), p->dropout_p = NAN; }
static void set_dropout_infinite(aotk_attn_params *p) { set_dropout(p), p->dropout_p = INFINITY; }
static void set_dropout_no_rng_state(aotk_attn_params *p) { set_dropout(p), p->rng_state.data = NULL; }
static void set_rng_state_int32(aotk_attn_params *p) { set_dropout(p), p->rng_state.dtype = AOTK_DTYPE_INT32; }
static void set_rng_state_float32(aotk_attn_params *p) {
  set_dropout(p), p->rng_state = aotk_tensor_1d(FAKE_RNG_STATE, AOTK_DTYPE_FLOAT32, 4);
}
static void set_rng_state_one_element(aotk_attn_params *p) { set_dropout(p), p->rng_state.shape[0] = 1; }
static void set_rng_state_rank_2(aotk_attn_params *p) {
  set_dropout(p), p->rng_state = aotk_tensor_2d(FAKE_RNG_STATE, AOTK_DTYPE_INT64, 1, 2);
}
static void set_rng_state_misaligned(aotk_attn_params *p) {
  set_dropout(p), p->rng_state.data = byte_offset(FAKE_RNG_STATE, 4);
}
static void set_rng_state_stride_2(aotk_attn_params *p) { set_dropout(p), p->rng_state.strides[0] = 2; }
static void set_mask(aotk_attn_params *p) { set_dropout(p), p->dropout_mask = mask_for(p); }
/* A one-byte mask element at the very last address: its span fits, but its end address wraps to 0. */
static void set_mask_at_the_last_byte(aotk_attn_params *p) {
  set_mask(p);
  p->dropout_mask.data = (void *)UINTPTR_MAX;
  for (int d = 0; d < 4; d++) p->dropout_mask.shape[d] = 1;
}
static void set_mask_without_dropout(aotk_attn_params *p) { set_mask(p), p->dropout_p = 0.0f; }
static void set_mask_without_anything(aotk_attn_params *p) {
  set_mask_without_dropout(p), p->rng_state.data = NULL;
}
static void set_mask_no_rng_state(aotk_attn_params *p) { set_mask(p), p->rng_state.data = NULL; }
static void set_mask_float16(aotk_attn_params *p) { set_mask(p), p->dropout_mask.dtype = AOTK_DTYPE_FLOAT16; }
static void set_mask_rank_3(aotk_attn_params *p) { set_mask(p), p->dropout_mask.rank = 3; }
static void set_mask_batch(aotk_attn_params *p) { set_mask(p), p->dropout_mask.shape[0] += 1; }
static void set_mask_heads_kv(aotk_attn_params *p) { set_mask(p), p->dropout_mask.shape[1] = 2; }
static void set_mask_seqlen_k_rows(aotk_attn_params *p) { set_mask(p), p->dropout_mask.shape[2] = 130; }
static void set_mask_seqlen_k_short(aotk_attn_params *p) { set_mask(p), p->dropout_mask.shape[3] -= 1; }
static void set_mask_heads_stride_zero(aotk_attn_params *p) { set_mask(p), p->dropout_mask.strides[1] = 0; }
static void set_mask_last_stride_2(aotk_attn_params *p) { set_mask(p), p->dropout_mask.strides[3] = 2; }
static void set_mask_like_q(aotk_attn_params *p) { /* [batch, seqlen_q, heads_q, seqlen_k]: heads and rows swapped */
  set_mask(p);
  p->dropout_mask = aotk_tensor_4d(FAKE_MASK, AOTK_DTYPE_UINT8, 2, 100, 8, 130);
}

/* The variable-length layout: each spoiler starts from the valid varlen form of the default problem
 * (make_varlen: 2 sequences, max_seqlen 100 / 130, totals 170 / 230). */
static void set_varlen_no_cu_seqlens_k(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_k.data = NULL; }
static void set_varlen_no_cu_seqlens_q(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_q.data = NULL; }
static void set_cu_seqlens_q_int64(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_q.dtype = AOTK_DTYPE_INT64; }
static void set_cu_seqlens_k_uint8(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_k.dtype = AOTK_DTYPE_UINT8; }
static void set_cu_seqlens_q_float32(aotk_attn_params *p) {
  make_varlen(p), p->cu_seqlens_q.dtype = AOTK_DTYPE_FLOAT32;
}
static void set_cu_seqlens_q_rank_2(aotk_attn_params *p) {
  make_varlen(p), p->cu_seqlens_q = aotk_tensor_2d(FAKE_CU_SEQLENS_Q, AOTK_DTYPE_INT32, 1, 3);
}
static void set_cu_seqlens_k_rank_0(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_k.rank = 0; }
static void set_cu_seqlens_q_one_offset(aotk_attn_params *p) {
  make_varlen(p), p->cu_seqlens_q.shape[0] = p->cu_seqlens_k.shape[0] = 1;
}
static void set_cu_seqlens_k_longer(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_k.shape[0] += 1; }
static void set_cu_seqlens_q_shorter(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_q.shape[0] -= 1; }
static void set_cu_seqlens_q_misaligned(aotk_attn_params *p) {
  make_varlen(p), p->cu_seqlens_q.data = byte_offset(FAKE_CU_SEQLENS_Q, 2);
}
static void set_cu_seqlens_k_stride_2(aotk_attn_params *p) { make_varlen(p), p->cu_seqlens_k.strides[0] = 2; }
static void set_max_seqlen_q_zero(aotk_attn_params *p) { make_varlen(p), p->max_seqlen_q = 0; }
static void set_max_seqlen_k_negative(aotk_attn_params *p) { make_varlen(p), p->max_seqlen_k = -1; }
static void set_max_seqlen_q_beyond_int32(aotk_attn_params *p) { make_varlen(p), p->max_seqlen_q = INT32_MAX; }
/* total_k past 2^31 - 257 (the Gluon kernels' TMA row coordinates are int32); k and v broadcast, so
 * that only the total is out of range. */
static void set_total_k_beyond_limit(aotk_attn_params *p) {
  make_varlen(p);
  p->k.shape[0] = p->v.shape[0] = INT32_MAX - 255;
  p->k.strides[0] = p->v.strides[0] = 0;
}
static void set_varlen_q_rank_4(aotk_attn_params *p) {
  make_varlen(p), p->q = aotk_tensor_4d(FAKE_Q, p->q.dtype, 1, VARLEN_TOTAL_Q, 8, 64);
}
static void set_varlen_k_rank_4(aotk_attn_params *p) {
  make_varlen(p), p->k = aotk_tensor_4d(FAKE_K, p->k.dtype, 1, VARLEN_TOTAL_K, 2, 64);
}
static void set_varlen_v_rank_4(aotk_attn_params *p) {
  make_varlen(p), p->v = aotk_tensor_4d(FAKE_V, p->v.dtype, 1, VARLEN_TOTAL_K, 2, 64);
}
static void set_varlen_out_rank_4(aotk_attn_params *p) {
  make_varlen(p), p->out = aotk_tensor_4d(FAKE_OUT, p->out.dtype, 1, VARLEN_TOTAL_Q, 8, 64);
}
static void set_varlen_lse_dense(aotk_attn_params *p) { /* [batch, heads_q, max_seqlen_q]: the dense layout */
  make_varlen(p), p->lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 2, 8, 100);
}
static void set_varlen_v_total(aotk_attn_params *p) { make_varlen(p), p->v.shape[0] = VARLEN_TOTAL_K - 1; }
static void set_varlen_out_total(aotk_attn_params *p) { make_varlen(p), p->out.shape[0] = VARLEN_TOTAL_Q + 1; }
static void set_varlen_lse_total(aotk_attn_params *p) { make_varlen(p), p->lse.shape[1] = VARLEN_TOTAL_K; }
static void set_varlen_lse_heads_kv(aotk_attn_params *p) { make_varlen(p), p->lse.shape[0] = 2; }
static void set_varlen_lse_like_q(aotk_attn_params *p) { /* [total_q, heads_q]: transposed */
  make_varlen(p), p->lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, VARLEN_TOTAL_Q, 8);
}
static void set_varlen_heads_kv_3(aotk_attn_params *p) { make_varlen(p), p->k.shape[1] = p->v.shape[1] = 3; }
static void set_varlen_v_heads(aotk_attn_params *p) { make_varlen(p), p->v.shape[1] = 4; }
static void set_varlen_out_heads(aotk_attn_params *p) { make_varlen(p), p->out.shape[1] = 4; }
static void set_varlen_k_head_dim(aotk_attn_params *p) { make_varlen(p), p->k.shape[2] = 128; }
static void set_varlen_out_head_dim(aotk_attn_params *p) { make_varlen(p), p->out.shape[2] = 32; }
static void set_varlen_q_last_stride_2(aotk_attn_params *p) { make_varlen(p), p->q.strides[2] = 2; }
static void set_varlen_alibi_sequences(aotk_attn_params *p) { /* [num_seqs + 1, heads_q] */
  make_varlen(p), p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 3, 8);
}
static void set_varlen_mask_totals(aotk_attn_params *p) { /* [num_seqs, heads_q, total_q, total_k] */
  make_varlen(p), set_mask(p);
  p->dropout_mask = aotk_tensor_4d(FAKE_MASK, AOTK_DTYPE_UINT8, 2, 8, VARLEN_TOTAL_Q, VARLEN_TOTAL_K);
}

static const bad_input bad_inputs[] = {
    {"params NULL", NULL, AOTK_ERROR_NULL_POINTER, "params"},
    {"struct_size 0", set_struct_size_zero, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size one byte short of release 0.1's", set_struct_size_short, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size of a pointer", set_struct_size_of_a_pointer, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size garbage", set_struct_size_garbage, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"q.data NULL", set_q_null, AOTK_ERROR_NULL_POINTER, "q.data"},
    {"q past the end of the address space", set_q_at_the_top, AOTK_ERROR_SIZE_OVERFLOW, "end of the address space"},
    {"k.data NULL", set_k_null, AOTK_ERROR_NULL_POINTER, "k.data"},
    {"v.data NULL", set_v_null, AOTK_ERROR_NULL_POINTER, "v.data"},
    {"out.data NULL", set_out_null, AOTK_ERROR_NULL_POINTER, "out.data"},
    {"q float32", set_q_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"q dtype 0", set_q_dtype_zero, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"q dtype garbage", set_q_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"k dtype garbage", set_k_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "k.dtype"},
    {"k float16, q bfloat16", set_k_float16, AOTK_ERROR_DTYPE_MISMATCH, "k.dtype"},
    {"v float16, q bfloat16", set_v_float16, AOTK_ERROR_DTYPE_MISMATCH, "v.dtype"},
    {"out float32, q bfloat16", set_out_float32, AOTK_ERROR_DTYPE_MISMATCH, "out.dtype"},
    {"q rank 3", set_q_rank_3, AOTK_ERROR_RANK, "q.rank"},
    {"q rank -1", set_q_rank_negative, AOTK_ERROR_RANK, "q.rank"},
    {"k rank 5", set_k_rank_5, AOTK_ERROR_RANK, "k.rank"},
    {"v rank beyond AOTK_TENSOR_MAX_RANK", set_v_rank_beyond_max, AOTK_ERROR_RANK, "v.rank"},
    {"out rank 0", set_out_rank_0, AOTK_ERROR_RANK, "out.rank"},
    {"k batch != q batch", set_k_batch, AOTK_ERROR_SHAPE_MISMATCH, "k.shape[0]"},
    {"v batch != k batch", set_v_batch, AOTK_ERROR_SHAPE_MISMATCH, "v.shape[0]"},
    {"v seqlen_k != k seqlen_k", set_v_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "v.shape[1]"},
    {"v heads != k heads", set_v_heads, AOTK_ERROR_SHAPE_MISMATCH, "v.shape[2]"},
    {"out batch != q batch", set_out_batch, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[0]"},
    {"out seqlen != q seqlen", set_out_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[1]"},
    {"out heads != q heads", set_out_heads, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[2]"},
    {"k head_dim != q head_dim", set_k_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "k.shape[3]"},
    {"v head_dim 128, out 64", set_v_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[3]"},
    {"out head_dim 128, v 64", set_out_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[3]"},
    {"q last stride 2", set_q_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "q.strides[3]"},
    {"v last stride 0", set_v_last_stride_0, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "v.strides[3]"},
    {"lse last stride 2", set_lse_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "lse.strides[2]"},
    {"k negative stride", set_k_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "k.strides[1]"},
    {"out negative stride", set_out_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "out.strides[0]"},
    {"q odd address", set_q_odd_address, AOTK_ERROR_MISALIGNED_POINTER, "q.data"},
    {"out odd address", set_out_odd_address, AOTK_ERROR_MISALIGNED_POINTER, "out.data"},
    {"lse 2-byte aligned", set_lse_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "lse.data"},
    {"heads_kv 3 of heads_q 8", set_heads_kv_3, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_q"},
    {"heads_kv 16 > heads_q 8", set_heads_kv_above_heads_q, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_q"},
    {"q batch 0", set_q_batch_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "q.shape[0]"},
    {"q heads 0", set_q_heads_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "q.shape[2]"},
    {"k seqlen -5", set_k_seqlen_negative, AOTK_ERROR_NONPOSITIVE_SIZE, "k.shape[1]"},
    {"out head_dim -64", set_out_head_dim_negative, AOTK_ERROR_NONPOSITIVE_SIZE, "out.shape[3]"},
    {"lse seqlen 0", set_lse_seqlen_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "lse.shape[2]"},
    {"q last offset overflows int64", set_q_offset_overflow, AOTK_ERROR_SIZE_OVERFLOW, "q:"},
    {"k stride INT64_MAX", set_k_stride_max, AOTK_ERROR_SIZE_OVERFLOW, "k:"},
    {"v byte span overflows int64", set_v_byte_overflow, AOTK_ERROR_SIZE_OVERFLOW, "v:"},
    {"q token stride 2^23 (256 rows past 2^31)", set_q_token_stride_2_23, AOTK_ERROR_SIZE_OVERFLOW, "q: strides[1]"},
    {"k token stride 2^24", set_k_token_stride_2_24, AOTK_ERROR_SIZE_OVERFLOW, "k: strides[1]"},
    {"q head stride 2^31", set_q_head_stride_2_31, AOTK_ERROR_SIZE_OVERFLOW, "q: strides[2]"},
    {"lse head stride 2^31", set_lse_head_stride_2_31, AOTK_ERROR_SIZE_OVERFLOW, "lse: strides[1]"},
    {"seqlen_q beyond int32", set_seqlen_q_beyond_int32, AOTK_ERROR_SIZE_OVERFLOW, "seqlen_q"},
    {"seqlen_k beyond int32", set_seqlen_k_beyond_int32, AOTK_ERROR_SIZE_OVERFLOW, "seqlen_k"},
    {"seqlen_k 2^30 - 511", set_seqlen_k_past_limit, AOTK_ERROR_SIZE_OVERFLOW, "2^30 - 512"},
    {"batch beyond int32", set_batch_beyond_int32, AOTK_ERROR_SIZE_OVERFLOW, "batch"},
    {"batch * heads_q * query blocks beyond the grid", set_batch_beyond_grid, AOTK_ERROR_SIZE_OVERFLOW, "programs"},
    {"causal 2", set_causal_2, AOTK_ERROR_INVALID_VALUE, "causal"},
    {"causal -1", set_causal_negative, AOTK_ERROR_INVALID_VALUE, "causal"},
    {"softmax_scale negative", set_scale_negative, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale NaN", set_scale_nan, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale +inf", set_scale_infinite, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale -inf", set_scale_negative_infinite, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"lse bfloat16", set_lse_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"lse dtype garbage", set_lse_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"lse rank 4", set_lse_rank_4, AOTK_ERROR_RANK, "lse.rank"},
    {"lse batch != q batch", set_lse_batch, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"lse heads = heads_kv", set_lse_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"lse seqlen = seqlen_k", set_lse_seqlen_k, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[2]"},
    {"lse in q's layout", set_lse_like_q, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"out seqlen stride 0", set_out_seqlen_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[1]"},
    {"out batch stride 0", set_out_batch_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[0]"},
    {"lse heads stride 0", set_lse_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "lse.strides[1]"},
    /* Head dims. */
    {"head_dim 84 (not a multiple of 8)", set_head_dim_84, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 84"},
    {"head_dim 4", set_head_dim_4, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 4"},
    {"head_dim 264", set_head_dim_264, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 264"},
    {"head_dim 512", set_head_dim_512, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 512"},
    {"head_dim_v 20 (not a multiple of 8)", set_head_dim_v_20, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v = 20"},
    {"head_dim_v 264", set_head_dim_v_264, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v = 264"},
    {"head_dim_qk 260, head_dim_v 128", set_head_dim_qk_260, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_qk = 260"},
    {"k head_dim 128 of q 64 (v 128)", set_k_head_dim_of_v, AOTK_ERROR_HEAD_DIM_MISMATCH, "k.shape[3]"},
    {"out head_dim 64 of v 128 (q 64)", set_out_head_dim_of_qk, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[3]"},
    /* Windows and alignment. */
    {"window_left -2", set_window_left_minus_2, AOTK_ERROR_INVALID_VALUE, "window_left = -2"},
    {"window_left INT32_MIN", set_window_left_min, AOTK_ERROR_INVALID_VALUE, "window_left"},
    {"window_right -7", set_window_right_minus_7, AOTK_ERROR_INVALID_VALUE, "window_right = -7"},
    {"causal with window_right 1", set_causal_window_right_1, AOTK_ERROR_INVALID_VALUE, "window_right = 1"},
    {"causal with window_right INT32_MAX", set_causal_window_right_max, AOTK_ERROR_INVALID_VALUE, "window_right"},
    {"causal_align 2", set_causal_align_2, AOTK_ERROR_INVALID_VALUE, "causal_align = 2"},
    {"causal_align -1", set_causal_align_negative, AOTK_ERROR_INVALID_VALUE, "causal_align = -1"},
    /* softcap. */
    {"softcap negative", set_softcap_negative, AOTK_ERROR_INVALID_VALUE, "softcap"},
    {"softcap +inf", set_softcap_infinite, AOTK_ERROR_INVALID_VALUE, "softcap"},
    {"softcap -inf", set_softcap_negative_infinite, AOTK_ERROR_INVALID_VALUE, "softcap"},
    {"softcap NaN", set_softcap_nan, AOTK_ERROR_INVALID_VALUE, "softcap"},
    /* ALiBi. */
    {"alibi_slopes bfloat16", set_alibi_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "alibi_slopes.dtype"},
    {"alibi_slopes [heads_kv]", set_alibi_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[0]"},
    {"alibi_slopes [heads_q + 1]", set_alibi_heads_plus_one, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[0]"},
    {"alibi_slopes [0]", set_alibi_size_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "alibi_slopes.shape[0]"},
    {"alibi_slopes stride 2", set_alibi_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "alibi_slopes.strides[0]"},
    {"alibi_slopes 2-byte aligned", set_alibi_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "alibi_slopes.data"},
    {"alibi_slopes [batch + 1, heads_q]", set_alibi_2d_batch, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[0]"},
    {"alibi_slopes [batch, heads_kv]", set_alibi_2d_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[1]"},
    {"alibi_slopes [heads_q, batch]", set_alibi_2d_transposed, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[0]"},
    {"alibi_slopes [batch, heads_q] float16", set_alibi_2d_float16, AOTK_ERROR_UNSUPPORTED_DTYPE, "alibi_slopes.dtype"},
    {"alibi_slopes rank 3", set_alibi_rank_3, AOTK_ERROR_RANK, "alibi_slopes.rank"},
    /* Sinks. */
    {"sinks [heads_kv]", set_sinks_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "sinks.shape[0]"},
    {"sinks [heads_q + 1]", set_sinks_heads_plus_one, AOTK_ERROR_SHAPE_MISMATCH, "sinks.shape[0]"},
    {"sinks [batch, heads_q]", set_sinks_per_batch, AOTK_ERROR_RANK, "sinks.rank"},
    {"sinks bfloat16", set_sinks_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "sinks.dtype"},
    {"sinks odd address", set_sinks_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "sinks.data"},
    /* Dropout. */
    {"dropout_p -0.1", set_dropout_negative, AOTK_ERROR_INVALID_VALUE, "dropout_p"},
    {"dropout_p 1", set_dropout_one, AOTK_ERROR_INVALID_VALUE, "dropout_p"},
    {"dropout_p 1.5", set_dropout_above_one, AOTK_ERROR_INVALID_VALUE, "dropout_p"},
    {"dropout_p NaN", set_dropout_nan, AOTK_ERROR_INVALID_VALUE, "dropout_p"},
    {"dropout_p +inf", set_dropout_infinite, AOTK_ERROR_INVALID_VALUE, "dropout_p"},
    {"dropout without rng_state", set_dropout_no_rng_state, AOTK_ERROR_NULL_POINTER, "rng_state"},
    {"rng_state int32", set_rng_state_int32, AOTK_ERROR_UNSUPPORTED_DTYPE, "rng_state"},
    {"rng_state float32 [4]", set_rng_state_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "rng_state"},
    {"rng_state int64 [1]", set_rng_state_one_element, AOTK_ERROR_SHAPE_MISMATCH, "rng_state"},
    {"rng_state rank 2", set_rng_state_rank_2, AOTK_ERROR_RANK, "rng_state.rank"},
    {"rng_state 4-byte aligned", set_rng_state_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "rng_state.data"},
    {"rng_state stride 2", set_rng_state_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "rng_state.strides[0]"},
    /* The dropout mask. */
    {"dropout_mask with dropout_p 0", set_mask_without_dropout, AOTK_ERROR_INVALID_VALUE, "dropout_mask"},
    {"dropout_mask with dropout_p 0, no rng_state", set_mask_without_anything, AOTK_ERROR_INVALID_VALUE, "dropout_mask"},
    {"dropout_mask without rng_state", set_mask_no_rng_state, AOTK_ERROR_NULL_POINTER, "rng_state"},
    {"dropout_mask ending at the end of the address space", set_mask_at_the_last_byte, AOTK_ERROR_SIZE_OVERFLOW,
     "end of the address space"},
    {"dropout_mask float16", set_mask_float16, AOTK_ERROR_UNSUPPORTED_DTYPE, "dropout_mask.dtype"},
    {"dropout_mask rank 3", set_mask_rank_3, AOTK_ERROR_RANK, "dropout_mask.rank"},
    {"dropout_mask batch + 1", set_mask_batch, AOTK_ERROR_SHAPE_MISMATCH, "dropout_mask.shape[0]"},
    {"dropout_mask heads_kv", set_mask_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "dropout_mask.shape[1]"},
    {"dropout_mask seqlen_k rows", set_mask_seqlen_k_rows, AOTK_ERROR_SHAPE_MISMATCH, "dropout_mask.shape[2]"},
    {"dropout_mask seqlen_k - 1 columns", set_mask_seqlen_k_short, AOTK_ERROR_SHAPE_MISMATCH, "dropout_mask.shape[3]"},
    {"dropout_mask in q's layout", set_mask_like_q, AOTK_ERROR_SHAPE_MISMATCH, "dropout_mask.shape[1]"},
    {"dropout_mask heads stride 0", set_mask_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "dropout_mask.strides[1]"},
    {"dropout_mask last stride 2", set_mask_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "dropout_mask.strides[3]"},
    /* The variable-length layout. */
    {"varlen: cu_seqlens_k missing", set_varlen_no_cu_seqlens_k, AOTK_ERROR_NULL_POINTER, "cu_seqlens_k.data"},
    {"varlen: cu_seqlens_q missing", set_varlen_no_cu_seqlens_q, AOTK_ERROR_NULL_POINTER, "cu_seqlens_q.data"},
    {"varlen: cu_seqlens_q int64", set_cu_seqlens_q_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_q.dtype"},
    {"varlen: cu_seqlens_q float32", set_cu_seqlens_q_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_q.dtype"},
    {"varlen: cu_seqlens_k uint8", set_cu_seqlens_k_uint8, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_k.dtype"},
    {"varlen: cu_seqlens_q rank 2", set_cu_seqlens_q_rank_2, AOTK_ERROR_RANK, "cu_seqlens_q.rank"},
    {"varlen: cu_seqlens_k rank 0", set_cu_seqlens_k_rank_0, AOTK_ERROR_RANK, "cu_seqlens_k.rank"},
    {"varlen: cu_seqlens of one offset", set_cu_seqlens_q_one_offset, AOTK_ERROR_NONPOSITIVE_SIZE, "cu_seqlens_q.shape[0]"},
    {"varlen: cu_seqlens_k one longer", set_cu_seqlens_k_longer, AOTK_ERROR_SHAPE_MISMATCH, "cu_seqlens_k.shape[0]"},
    {"varlen: cu_seqlens_q one shorter", set_cu_seqlens_q_shorter, AOTK_ERROR_SHAPE_MISMATCH, "cu_seqlens_q.shape[0]"},
    {"varlen: cu_seqlens_q 2-byte aligned", set_cu_seqlens_q_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "cu_seqlens_q.data"},
    {"varlen: cu_seqlens_k stride 2", set_cu_seqlens_k_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "cu_seqlens_k.strides[0]"},
    {"varlen: max_seqlen_q 0", set_max_seqlen_q_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_q = 0"},
    {"varlen: max_seqlen_k -1", set_max_seqlen_k_negative, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_k = -1"},
    {"varlen: max_seqlen_q INT32_MAX", set_max_seqlen_q_beyond_int32, AOTK_ERROR_SIZE_OVERFLOW, "seqlen_q"},
    {"varlen: total_k 2^31 - 256", set_total_k_beyond_limit, AOTK_ERROR_SIZE_OVERFLOW, "total_k"},
    {"varlen: q rank 4", set_varlen_q_rank_4, AOTK_ERROR_RANK, "q.rank"},
    {"varlen: k rank 4", set_varlen_k_rank_4, AOTK_ERROR_RANK, "k.rank"},
    {"varlen: v rank 4", set_varlen_v_rank_4, AOTK_ERROR_RANK, "v.rank"},
    {"varlen: out rank 4", set_varlen_out_rank_4, AOTK_ERROR_RANK, "out.rank"},
    {"varlen: lse in the dense layout", set_varlen_lse_dense, AOTK_ERROR_RANK, "lse.rank"},
    {"varlen: v total != k total", set_varlen_v_total, AOTK_ERROR_SHAPE_MISMATCH, "v.shape[0]"},
    {"varlen: out total != q total", set_varlen_out_total, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[0]"},
    {"varlen: lse total = total_k", set_varlen_lse_total, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"varlen: lse heads = heads_kv", set_varlen_lse_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"varlen: lse [total_q, heads_q]", set_varlen_lse_like_q, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"varlen: heads_kv 3 of heads_q 8", set_varlen_heads_kv_3, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_q"},
    {"varlen: v heads != k heads", set_varlen_v_heads, AOTK_ERROR_SHAPE_MISMATCH, "v.shape[1]"},
    {"varlen: out heads != q heads", set_varlen_out_heads, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[1]"},
    {"varlen: k head_dim != q head_dim", set_varlen_k_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "k.shape[2]"},
    {"varlen: out head_dim != v head_dim", set_varlen_out_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[2]"},
    {"varlen: q last stride 2", set_varlen_q_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "q.strides[2]"},
    {"varlen: alibi_slopes [num_seqs + 1, heads_q]", set_varlen_alibi_sequences, AOTK_ERROR_SHAPE_MISMATCH,
     "alibi_slopes.shape[0]"},
    {"varlen: dropout_mask over the totals", set_varlen_mask_totals, AOTK_ERROR_SHAPE_MISMATCH, "dropout_mask.shape[2]"},
};

/* Runs one bad input through the call `op` names and through aotk_query(op) with the recording fake
 * installed (as a working sm_90 GPU, so a bad input that slipped through would reach it): both must
 * refuse it with the expected status and a message naming the argument, call no driver function, and
 * leave the caller's params and the query's info untouched. The spoiler applies to the op's valid
 * params (the backward's carry dout, dq, dk and dv). */
static void check_bad_input_op(const bad_input *c, aotk_op op) {
  const char *function = op_function(op);
  aotk_attn_params params = op == AOTK_OP_ATTN_FWD ? valid_params() : valid_bwd_params();
  if (c->spoil != NULL) c->spoil(&params);
  aotk_attn_params before = params;
  const aotk_attn_params *argument = c->spoil != NULL ? &params : NULL;

  reset_calls();
  aotk_status status = run_op(op, argument);
  CHECK_MSG(status == c->expected, "%s: %s gave %s (%s), expected %s", c->what, function, aotk_status_name(status),
            aotk_last_error(), aotk_status_name(c->expected));
  CHECK_MSG(message_mentions(c->mentions), "%s: %s's message \"%s\" does not mention \"%s\"", c->what, function,
            aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: %s reached the driver (%s)", c->what, function, called_functions());
  CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 0, "%s: %s launched", c->what, function);
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: %s changed the caller's params", c->what, function);

  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status query_status = aotk_query(op, argument, &info);
  CHECK_MSG(query_status == status, "%s: aotk_query(op %d) gave %s, %s %s", c->what, (int)op,
            aotk_status_name(query_status), function, aotk_status_name(status));
  CHECK_MSG(message_mentions(c->mentions), "%s: aotk_query(op %d)'s message \"%s\" does not mention \"%s\"", c->what,
            (int)op, aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: aotk_query(op %d) reached the driver (%s)", c->what, (int)op, called_functions());
  CHECK_MSG(info_untouched(&info), "%s: aotk_query(op %d) wrote *info on failure", c->what, (int)op);
  bool name_untouched = true;
  for (size_t i = 0; i < sizeof info.kernel_name; i++) {
    name_untouched = name_untouched && (unsigned char)info.kernel_name[i] == POISON;
  }
  CHECK_MSG(name_untouched, "%s: aotk_query(op %d) wrote kernel_name on failure", c->what, (int)op);
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: aotk_query changed the caller's params", c->what);
}

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

/* A sequence stride so large that 257 rows of it (seqlen_q 2 plus the 256 rows a block may address
 * past the end) wrap int64 to a small number: 257 * 71777214294589696 = 2^64 + 256. The tensor's own
 * last offset (1 stride) fits, so only the token-stride rule can refuse it, and the stride does not fit
 * the kernel's int32 parameter: launching would address row 1 at a truncated offset. */
static void set_sequence_stride_wrapping_span(aotk_attn_params *p) {
  problem shape = default_problem;
  shape.seqlen_q = 2;
  *p = params_for(shape);
  p->q.strides[1] = 71777214294589696;
}
static void set_out_sequence_stride_wrapping_span(aotk_attn_params *p) {
  set_sequence_stride_wrapping_span(p);
  p->q.strides[1] = p->out.strides[1];
  p->out.strides[1] = 71777214294589696;
}
/* The grid's program count, ceil(seqlen_q / 64) * batch * heads_q = 5 * (2^31 - 1) * 2^30, overflows
 * int64 while each size fits in int32 and every tensor is valid on its own: q, k and v broadcast (zero
 * strides), out's strides overlap but are non-zero, and one batch entry of out spans under 2^31. */
static void set_batch_times_heads_overflow(aotk_attn_params *p) {
  const int64_t batch = INT32_MAX, seqlen_q = 257, heads_q = (int64_t)1 << 30;
  aotk_tensor q = {FAKE_Q, AOTK_DTYPE_BFLOAT16, 4, {batch, seqlen_q, heads_q, 64}, {0, 0, 0, 1}};
  aotk_tensor kv = {FAKE_K, AOTK_DTYPE_BFLOAT16, 4, {batch, 1, 1, 64}, {0, 0, 0, 1}};
  aotk_tensor out = {FAKE_OUT, AOTK_DTYPE_BFLOAT16, 4, {batch, seqlen_q, heads_q, 64}, {1, 1, 1, 1}};
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = q;
  params.k = kv;
  params.v = kv;
  params.v.data = FAKE_V;
  params.out = out;
  *p = params;
}

/* Inputs whose rejection depends on overflow arithmetic in the span and grid checks. Kept apart from
 * the table above so that a failure here points at the arithmetic; run under UBSan as well, where a
 * signed overflow in the check is reported even when the status comes out right. */
static const bad_input overflowing_inputs[] = {
    {"q sequence stride whose block span wraps int64", set_sequence_stride_wrapping_span, AOTK_ERROR_SIZE_OVERFLOW,
     "q:"},
    {"out sequence stride whose block span wraps int64", set_out_sequence_stride_wrapping_span,
     AOTK_ERROR_SIZE_OVERFLOW, "out:"},
    {"blocks * batch * heads_q overflows int64", set_batch_times_heads_overflow, AOTK_ERROR_SIZE_OVERFLOW, "programs"},
};

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
  RUN_TEST(test_validation_rejects_bad_inputs);
  RUN_TEST(test_validation_span_checks_do_not_wrap);
  RUN_TEST(test_validation_accepts_edge_inputs);
  RUN_TEST(test_validation_lse_span_follows_its_layout);
  RUN_TEST(test_bwd_validation_rejects_bad_inputs);
  RUN_TEST(test_bwd_validation_accepts_edge_inputs);
  RUN_TEST(test_fwd_ignores_bwd_fields);
  RUN_TEST(test_bwd_workspace);
  RUN_TEST(test_query_arguments);
  aotk__driver_set_for_testing(NULL);
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);
  return aotk_test_finish();
}
