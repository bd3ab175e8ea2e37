/*
 * The attention validation tests' bad inputs (test_api_attn_validation.c runs them on the forward,
 * test_api_attn_bwd_validation.c on the backward too): spoilers of valid params, each with the status
 * and the word its message must carry, in two tables (bad_inputs; overflowing_inputs, whose refusal
 * rests on overflow arithmetic), the default problem's varlen form, and the check of one bad input
 * against the call and the query. Static, for the one file of either binary.
 */
#ifndef API_ATTN_BAD_INPUTS_H
#define API_ATTN_BAD_INPUTS_H

#include <math.h>
#include <string.h>

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

#endif /* API_ATTN_BAD_INPUTS_H */
