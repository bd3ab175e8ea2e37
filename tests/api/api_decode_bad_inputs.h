/*
 * Decoding's bad inputs for tests/api/test_api_decode_validation.c: spoilers of a valid call (contiguous
 * or paged, appending or not, packed queries, each feature), each with the status and the word its
 * message must carry, and the check of one against aotk_attn_decode and aotk_decode_query. Static, for
 * the one file that includes it.
 */
#ifndef API_DECODE_BAD_INPUTS_H
#define API_DECODE_BAD_INPUTS_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "api_launch_checks.h"

typedef struct decode_bad_input {
  const char *what;
  void (*spoil)(aotk_decode_params *params); /* NULL: pass params = NULL */
  aotk_status expected;
  const char *mentions; /* in aotk_last_error() */
} decode_bad_input;

static void make_paged(aotk_decode_params *p) { *p = decode_params_for(default_paged_shape); }
static void dec_struct_size_zero(aotk_decode_params *p) { p->struct_size = 0; }
static void dec_struct_size_short(aotk_decode_params *p) { p->struct_size = sizeof(aotk_decode_params) - 1; }
static void dec_struct_size_of_a_pointer(aotk_decode_params *p) { p->struct_size = sizeof(void *); }
static void dec_struct_size_garbage(aotk_decode_params *p) { p->struct_size = (size_t)1 << 40; }
static void dec_q_null(aotk_decode_params *p) { p->q.data = NULL; }
static void dec_q_at_the_top(aotk_decode_params *p) { p->q.data = (void *)(UINTPTR_MAX - 15); }
static void dec_q_rank_3(aotk_decode_params *p) { p->q = aotk_tensor_3d(FAKE_Q, AOTK_DTYPE_BFLOAT16, 6, 8, 128); }
static void dec_q_float32(aotk_decode_params *p) { p->q.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_q_int32(aotk_decode_params *p) { p->q.dtype = AOTK_DTYPE_INT32; }
static void dec_q_dtype_garbage(aotk_decode_params *p) { p->q.dtype = (aotk_dtype)1234; }
static void dec_q_seqlen_17(aotk_decode_params *p) { p->q.shape[1] = 17; }
static void dec_q_seqlen_huge(aotk_decode_params *p) { p->q.shape[1] = (int64_t)1 << 40, p->q.strides[0] = 0; }
static void dec_q_head_dim_100(aotk_decode_params *p) { p->q.shape[3] = 100; }
static void dec_q_head_dim_264(aotk_decode_params *p) { p->q.shape[3] = 264; }
static void dec_q_head_dim_4(aotk_decode_params *p) { p->q.shape[3] = 4; }
static void dec_k_null(aotk_decode_params *p) { p->k_cache.data = NULL; }
static void dec_k_rank_5(aotk_decode_params *p) { p->k_cache.rank = 5; }
static void dec_k_rank_3(aotk_decode_params *p) {
  p->k_cache = aotk_tensor_3d(FAKE_K, AOTK_DTYPE_BFLOAT16, 3 * 1000, 2, 128); /* [batch * capacity, heads_kv, d] */
}
static void dec_k_float16(aotk_decode_params *p) { p->k_cache.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_k_dtype_garbage(aotk_decode_params *p) { p->k_cache.dtype = (aotk_dtype)-7; }
static void dec_k_head_dim_64(aotk_decode_params *p) { p->k_cache.shape[3] = 64; }
static void dec_k_last_stride_2(aotk_decode_params *p) { p->k_cache.strides[3] = 2; }
static void dec_k_stride_negative(aotk_decode_params *p) { p->k_cache.strides[1] = -256; }
static void dec_k_capacity_zero(aotk_decode_params *p) { p->k_cache.shape[1] = p->v_cache.shape[1] = 0; }
static void dec_v_null(aotk_decode_params *p) { p->v_cache.data = NULL; }
static void dec_v_rank_3(aotk_decode_params *p) { p->v_cache.rank = 3; }
static void dec_v_float16(aotk_decode_params *p) { p->v_cache.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_v_float32(aotk_decode_params *p) { p->v_cache.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_v_batch(aotk_decode_params *p) { p->v_cache.shape[0] += 1; }
static void dec_v_capacity(aotk_decode_params *p) { p->v_cache.shape[1] -= 1; }
static void dec_v_heads(aotk_decode_params *p) { p->v_cache.shape[2] = 4; }
static void dec_v_head_dim_100(aotk_decode_params *p) { p->v_cache.shape[3] = 100, p->out.shape[3] = 100; }
static void dec_v_head_dim_512(aotk_decode_params *p) { p->v_cache.shape[3] = 512, p->out.shape[3] = 512; }
static void dec_heads_kv_3(aotk_decode_params *p) { p->k_cache.shape[2] = p->v_cache.shape[2] = 3; }
static void dec_heads_kv_16(aotk_decode_params *p) { p->k_cache.shape[2] = p->v_cache.shape[2] = 16; }
static void dec_table_rank_1(aotk_decode_params *p) {
  make_paged(p), p->block_table = aotk_tensor_1d(FAKE_BLOCK_TABLE, AOTK_DTYPE_INT32, 3 * 64);
}
static void dec_table_rank_3(aotk_decode_params *p) {
  make_paged(p), p->block_table = aotk_tensor_3d(FAKE_BLOCK_TABLE, AOTK_DTYPE_INT32, 3, 8, 8);
}
static void dec_table_int64(aotk_decode_params *p) { make_paged(p), p->block_table.dtype = AOTK_DTYPE_INT64; }
static void dec_table_float32(aotk_decode_params *p) { make_paged(p), p->block_table.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_table_dtype_zero(aotk_decode_params *p) { make_paged(p), p->block_table.dtype = (aotk_dtype)0; }
static void dec_table_batch(aotk_decode_params *p) { make_paged(p), p->block_table.shape[0] += 1; }
static void dec_table_one_row(aotk_decode_params *p) { /* one row of pages broadcast to every request */
  make_paged(p), p->block_table.shape[0] = 1;
}
static void dec_table_pages_zero(aotk_decode_params *p) { make_paged(p), p->block_table.shape[1] = 0; }
static void dec_table_last_stride_2(aotk_decode_params *p) { make_paged(p), p->block_table.strides[1] = 2; }
static void dec_table_misaligned(aotk_decode_params *p) {
  make_paged(p), p->block_table.data = byte_offset(FAKE_BLOCK_TABLE, 2);
}
/* 2^27 pages of 16 keys: a request could hold 2^31 keys, one more than int32 cache_seqlens can say. */
static void dec_table_capacity_2_31(aotk_decode_params *p) {
  make_paged(p), p->block_table.shape[1] = (int64_t)1 << 27, p->block_table.strides[0] = (int64_t)1 << 27;
}
/* 2^60 pages (the rows broadcast) of 16 keys: pages x page_size overflows int64 itself. */
static void dec_table_capacity_2_64(aotk_decode_params *p) {
  make_paged(p), p->block_table.shape[1] = (int64_t)1 << 60, p->block_table.strides[0] = 0;
}
/* 2^31 - 1 pages of 2 keys. */
static void dec_page_size_2_capacity_2_32(aotk_decode_params *p) {
  make_paged(p), p->block_table.shape[1] = INT32_MAX, p->block_table.strides[0] = 0;
  p->k_cache.shape[1] = p->v_cache.shape[1] = 2;
}
static void dec_paged_v_pages(aotk_decode_params *p) { make_paged(p), p->v_cache.shape[0] -= 1; }
static void dec_paged_v_page_size(aotk_decode_params *p) { make_paged(p), p->v_cache.shape[1] = 32; }
static void dec_paged_without_table(aotk_decode_params *p) { make_paged(p), p->block_table.data = NULL; }
static void dec_k_batch(aotk_decode_params *p) { p->k_cache.shape[0] = p->v_cache.shape[0] = 4; }
/* One key past AOTK_DECODE_MAX_CAPACITY, contiguous and paged. */
static void dec_capacity_max_plus_1(aotk_decode_params *p) {
  decode_shape s = default_decode_shape;
  s.capacity = (int64_t)AOTK_DECODE_MAX_CAPACITY + 1;
  *p = decode_params_for(s);
}
static void dec_table_capacity_max_plus_16(aotk_decode_params *p) {
  make_paged(p), p->block_table.shape[1] = AOTK_DECODE_MAX_CAPACITY / 16 + 1, p->block_table.strides[0] = 0;
}
static void dec_capacity_2_31(aotk_decode_params *p) {
  decode_shape s = default_decode_shape;
  s.capacity = (int64_t)1 << 31;
  *p = decode_params_for(s);
}
static void dec_seqlens_null(aotk_decode_params *p) { p->cache_seqlens.data = NULL; }
static void dec_seqlens_rank_2(aotk_decode_params *p) {
  p->cache_seqlens = aotk_tensor_2d(FAKE_CACHE_SEQLENS, AOTK_DTYPE_INT32, 3, 1);
}
static void dec_seqlens_rank_0(aotk_decode_params *p) { p->cache_seqlens.rank = 0; }
static void dec_seqlens_int64(aotk_decode_params *p) { p->cache_seqlens.dtype = AOTK_DTYPE_INT64; }
static void dec_seqlens_float32(aotk_decode_params *p) { p->cache_seqlens.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_seqlens_batch(aotk_decode_params *p) { p->cache_seqlens.shape[0] += 1; }
static void dec_seqlens_one(aotk_decode_params *p) { p->cache_seqlens.shape[0] = 1; }
static void dec_seqlens_stride_2(aotk_decode_params *p) { p->cache_seqlens.strides[0] = 2; }
static void dec_seqlens_misaligned(aotk_decode_params *p) {
  p->cache_seqlens.data = byte_offset(FAKE_CACHE_SEQLENS, 2);
}
static void dec_paged_seqlens_batch(aotk_decode_params *p) { make_paged(p), p->cache_seqlens.shape[0] = 200; }
static void dec_leftpad(aotk_decode_params *p) {
  p->cache_leftpad = aotk_tensor_1d(FAKE_CACHE_LEFTPAD, AOTK_DTYPE_INT32, p->cache_seqlens.shape[0]);
}
static void dec_leftpad_rank_2(aotk_decode_params *p) {
  p->cache_leftpad = aotk_tensor_2d(FAKE_CACHE_LEFTPAD, AOTK_DTYPE_INT32, p->cache_seqlens.shape[0], 1);
}
static void dec_leftpad_int64(aotk_decode_params *p) { dec_leftpad(p), p->cache_leftpad.dtype = AOTK_DTYPE_INT64; }
static void dec_leftpad_batch(aotk_decode_params *p) { dec_leftpad(p), p->cache_leftpad.shape[0] += 1; }
static void dec_leftpad_stride_2(aotk_decode_params *p) { dec_leftpad(p), p->cache_leftpad.strides[0] = 2; }
static void dec_leftpad_misaligned(aotk_decode_params *p) {
  dec_leftpad(p), p->cache_leftpad.data = byte_offset(FAKE_CACHE_LEFTPAD, 2);
}
static void dec_out_null(aotk_decode_params *p) { p->out.data = NULL; }
static void dec_out_rank_3(aotk_decode_params *p) { p->out.rank = 3; }
static void dec_out_float16(aotk_decode_params *p) { p->out.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_out_float32(aotk_decode_params *p) { p->out.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_out_batch(aotk_decode_params *p) { p->out.shape[0] += 1; }
static void dec_out_seqlen(aotk_decode_params *p) { p->out.shape[1] = 1; }
static void dec_out_heads_kv(aotk_decode_params *p) { p->out.shape[2] = 2; }
static void dec_out_head_dim(aotk_decode_params *p) { p->out.shape[3] = 64; }
static void dec_out_heads_stride_zero(aotk_decode_params *p) { p->out.strides[2] = 0; }
static void dec_out_batch_stride_zero(aotk_decode_params *p) { p->out.strides[0] = 0; }
static void dec_out_last_stride_2(aotk_decode_params *p) { p->out.strides[3] = 2; }
static void dec_out_stride_negative(aotk_decode_params *p) { p->out.strides[1] = -1024; }
static void dec_lse_rank_2(aotk_decode_params *p) { p->lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 8, 6); }
static void dec_lse_float16(aotk_decode_params *p) { p->lse.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_lse_bfloat16(aotk_decode_params *p) { p->lse.dtype = AOTK_DTYPE_BFLOAT16; }
static void dec_lse_batch(aotk_decode_params *p) { p->lse.shape[0] += 1; }
static void dec_lse_heads_kv(aotk_decode_params *p) { p->lse.shape[1] = 2; }
static void dec_lse_seqlen(aotk_decode_params *p) { p->lse.shape[2] = 3; }
static void dec_lse_like_out(aotk_decode_params *p) { /* [batch, seqlen_q, heads_q]: out's order */
  p->lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 3, 2, 8);
}
static void dec_lse_heads_stride_zero(aotk_decode_params *p) { p->lse.strides[1] = 0; }
static void dec_lse_last_stride_2(aotk_decode_params *p) { p->lse.strides[2] = 2; }
static void dec_lse_misaligned(aotk_decode_params *p) { p->lse.data = byte_offset(FAKE_LSE, 2); }
static void dec_causal_2(aotk_decode_params *p) { p->causal = 2; }
static void dec_causal_negative(aotk_decode_params *p) { p->causal = -1; }
static void dec_window_left_minus_2(aotk_decode_params *p) { p->window_left = -2; }
static void dec_window_right_min(aotk_decode_params *p) { p->window_right = INT32_MIN; }
static void dec_causal_window_right_1(aotk_decode_params *p) { p->causal = 1, p->window_right = 1; }
static void dec_causal_window_left_minus_2(aotk_decode_params *p) { p->causal = 1, p->window_left = -2; }
static void dec_scale_nan(aotk_decode_params *p) { p->softmax_scale = NAN; }
static void dec_scale_negative(aotk_decode_params *p) { p->softmax_scale = -0.125f; }
static void dec_scale_infinite(aotk_decode_params *p) { p->softmax_scale = INFINITY; }
static void dec_scale_negative_infinite(aotk_decode_params *p) { p->softmax_scale = -INFINITY; }
static void dec_softcap_negative(aotk_decode_params *p) { p->softcap = -30.0f; }
static void dec_softcap_nan(aotk_decode_params *p) { p->softcap = NAN; }
static void dec_softcap_infinite(aotk_decode_params *p) { p->softcap = INFINITY; }
static void dec_alibi_per_batch(aotk_decode_params *p) {
  p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 3, 8);
}
static void dec_alibi_float16(aotk_decode_params *p) { dec_alibi(p), p->alibi_slopes.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_alibi_heads_kv(aotk_decode_params *p) { dec_alibi(p), p->alibi_slopes.shape[0] = 2; }
static void dec_alibi_2d_batch(aotk_decode_params *p) { dec_alibi_per_batch(p), p->alibi_slopes.shape[0] = 4; }
static void dec_alibi_2d_heads_kv(aotk_decode_params *p) { dec_alibi_per_batch(p), p->alibi_slopes.shape[1] = 2; }
static void dec_alibi_rank_3(aotk_decode_params *p) {
  p->alibi_slopes = aotk_tensor_3d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 3, 2, 8);
}
static void dec_alibi_misaligned(aotk_decode_params *p) {
  dec_alibi(p), p->alibi_slopes.data = byte_offset(FAKE_ALIBI, 2);
}
static void dec_sinks_per_batch(aotk_decode_params *p) { /* a shape ALiBi allows, sinks do not */
  p->sinks = aotk_tensor_2d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 3, 8);
}
static void dec_sinks_heads_kv(aotk_decode_params *p) { dec_sinks(p), p->sinks.shape[0] = 2; }
static void dec_sinks_bfloat16(aotk_decode_params *p) { dec_sinks(p), p->sinks.dtype = AOTK_DTYPE_BFLOAT16; }
static void dec_num_splits_negative(aotk_decode_params *p) { p->num_splits = -1; }
static void dec_num_splits_257(aotk_decode_params *p) { p->num_splits = AOTK_DECODE_MAX_SPLITS + 1; }
static void dec_num_splits_min(aotk_decode_params *p) { p->num_splits = INT32_MIN; }
static void dec_max_seqlen_k_negative(aotk_decode_params *p) { p->max_seqlen_k = -1; }
static void dec_max_seqlen_k_min(aotk_decode_params *p) { p->max_seqlen_k = INT32_MIN; }
static void dec_q_two_bytes_off(aotk_decode_params *p) { p->q.data = byte_offset(FAKE_Q, 2); }
static void dec_q_eight_bytes_off(aotk_decode_params *p) { p->q.data = byte_offset(FAKE_Q, 8); }
static void dec_q_odd_address(aotk_decode_params *p) { p->q.data = byte_offset(FAKE_Q, 1); }
static void dec_q_heads_stride_136(aotk_decode_params *p) {
  p->q.strides[2] = 136, p->q.strides[1] = 8 * 136, p->q.strides[0] = 2 * 8 * 136;
}
static void dec_q_batch_stride_8_past(aotk_decode_params *p) { p->q.strides[0] += 8; }
static void dec_k_eight_bytes_off(aotk_decode_params *p) { p->k_cache.data = byte_offset(FAKE_K, 8); }
static void dec_k_token_stride_8_past(aotk_decode_params *p) { p->k_cache.strides[1] += 8; }
static void dec_v_four_bytes_off(aotk_decode_params *p) { p->v_cache.data = byte_offset(FAKE_V, 4); }
static void dec_v_batch_stride_8_past(aotk_decode_params *p) { p->v_cache.strides[0] += 8; }
static void dec_paged_k_page_stride_8_past(aotk_decode_params *p) { make_paged(p), p->k_cache.strides[0] += 8; }
static void dec_paged_v_heads_stride_8_past(aotk_decode_params *p) {
  make_paged(p), p->v_cache.strides[2] = 136, p->v_cache.strides[1] = 2 * 136, p->v_cache.strides[0] = 16 * 2 * 136;
}
static void dec_out_two_bytes_off(aotk_decode_params *p) { p->out.data = byte_offset(FAKE_OUT, 2); }
static void dec_out_heads_stride_136(aotk_decode_params *p) {
  p->out.strides[2] = 136, p->out.strides[1] = 8 * 136, p->out.strides[0] = 2 * 8 * 136;
}
static void dec_head_dims_72(aotk_decode_params *p) { /* contiguous rows of 72 elements: 144 bytes apart */
  decode_shape s = default_decode_shape;
  s.head_dim_qk = s.head_dim_v = 72;
  *p = decode_params_for(s);
}
static void dec_misaligned_q_and_causal_2(aotk_decode_params *p) { dec_q_two_bytes_off(p), dec_causal_2(p); }
/* Appending: three new tokens per request, then one change. */
static void dec_append(aotk_decode_params *p) { add_new_kv(p, &default_decode_shape, 3); }
static void dec_paged_append(aotk_decode_params *p) { make_paged(p), add_new_kv(p, &default_paged_shape, 3); }
static void dec_k_new_only(aotk_decode_params *p) { dec_append(p), p->v_new = (aotk_tensor){0}; }
static void dec_v_new_only(aotk_decode_params *p) { dec_append(p), p->k_new = (aotk_tensor){0}; }
static void dec_k_new_only_garbage_v_new(aotk_decode_params *p) { /* v_new's other fields set, its data NULL */
  dec_append(p), p->v_new.data = NULL;
}
static void dec_k_new_rank_3(aotk_decode_params *p) {
  dec_append(p), p->k_new = aotk_tensor_3d(FAKE_K_NEW, AOTK_DTYPE_BFLOAT16, 9, 2, 128);
}
static void dec_v_new_rank_5(aotk_decode_params *p) { dec_append(p), p->v_new.rank = 5; }
static void dec_v_new_rank_0(aotk_decode_params *p) { dec_append(p), p->v_new.rank = 0; }
static void dec_k_new_float16(aotk_decode_params *p) { dec_append(p), p->k_new.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_v_new_float32(aotk_decode_params *p) { dec_append(p), p->v_new.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_k_new_dtype_garbage(aotk_decode_params *p) { dec_append(p), p->k_new.dtype = (aotk_dtype)99; }
static void dec_k_new_batch(aotk_decode_params *p) { dec_append(p), p->k_new.shape[0] += 1; }
static void dec_v_new_batch(aotk_decode_params *p) { dec_append(p), p->v_new.shape[0] = 1; }
static void dec_k_new_seqlen_zero(aotk_decode_params *p) { dec_append(p), p->k_new.shape[1] = 0; }
static void dec_v_new_seqlen(aotk_decode_params *p) { dec_append(p), p->v_new.shape[1] = 4; }
static void dec_both_new_seqlen(aotk_decode_params *p) { /* k_new sets seqlen_new: v_new's 3 is then wrong */
  dec_append(p), p->k_new.shape[1] = 2;
}
static void dec_k_new_heads_q(aotk_decode_params *p) { dec_append(p), p->k_new.shape[2] = 8; }
static void dec_v_new_heads(aotk_decode_params *p) { dec_append(p), p->v_new.shape[2] = 1; }
static void dec_k_new_head_dim(aotk_decode_params *p) { dec_append(p), p->k_new.shape[3] = 64; }
static void dec_v_new_head_dim(aotk_decode_params *p) { dec_append(p), p->v_new.shape[3] = 136; }
static void dec_new_head_dims_swapped(aotk_decode_params *p) { /* head dims (256, 128): k_new given v's 128 */
  decode_shape s = default_decode_shape;
  s.head_dim_qk = 256;
  *p = decode_params_for(s);
  add_new_kv(p, &s, 3);
  p->k_new.shape[3] = 128, p->v_new.shape[3] = 256;
}
static void dec_k_new_last_stride_2(aotk_decode_params *p) { dec_append(p), p->k_new.strides[3] = 2; }
static void dec_v_new_stride_negative(aotk_decode_params *p) { dec_append(p), p->v_new.strides[1] = -256; }
static void dec_k_new_odd_address(aotk_decode_params *p) { dec_append(p), p->k_new.data = byte_offset(FAKE_K_NEW, 1); }
static void dec_k_new_eight_bytes_off(aotk_decode_params *p) {
  dec_append(p), p->k_new.data = byte_offset(FAKE_K_NEW, 8);
}
static void dec_v_new_two_bytes_off(aotk_decode_params *p) {
  dec_append(p), p->v_new.data = byte_offset(FAKE_V_NEW, 2);
}
static void dec_k_new_token_stride_8_past(aotk_decode_params *p) { dec_append(p), p->k_new.strides[1] += 8; }
static void dec_v_new_heads_stride_136(aotk_decode_params *p) { dec_append(p), p->v_new.strides[2] = 136; }
static void dec_v_new_batch_stride_8_past(aotk_decode_params *p) { dec_append(p), p->v_new.strides[0] += 8; }
static void dec_paged_k_new_heads(aotk_decode_params *p) { dec_paged_append(p), p->k_new.shape[2] = 3; }
static void dec_paged_v_new_misaligned(aotk_decode_params *p) {
  dec_paged_append(p), p->v_new.data = byte_offset(FAKE_V_NEW, 4);
}
static void dec_k_new_at_the_top(aotk_decode_params *p) { dec_append(p), p->k_new.data = (void *)(UINTPTR_MAX - 15); }
static void dec_misaligned_k_new_and_bad_v_new_heads(aotk_decode_params *p) { /* the shape first */
  dec_k_new_eight_bytes_off(p), p->v_new.shape[2] = 4;
}
static void dec_misaligned_q_and_bad_k_new(aotk_decode_params *p) { /* k_new's shape before q's alignment */
  dec_q_two_bytes_off(p), dec_append(p), p->k_new.shape[0] = 2;
}
/* Packed queries (cu_seqlens_q): default_varlen_shape, 3 requests' 100 tokens, G 4, at most 40 each. */
static void make_varlen_decode(aotk_decode_params *p) { *p = decode_params_for(default_varlen_shape); }
static void make_varlen_paged_decode(aotk_decode_params *p) { *p = decode_params_for(default_varlen_paged_shape); }
static void dec_cu_rank_2(aotk_decode_params *p) {
  make_varlen_decode(p), p->cu_seqlens_q = aotk_tensor_2d(FAKE_CU_SEQLENS_Q, AOTK_DTYPE_INT32, 1, 4);
}
static void dec_cu_rank_0(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.rank = 0; }
static void dec_cu_int64(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.dtype = AOTK_DTYPE_INT64; }
static void dec_cu_float32(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_cu_dtype_garbage(aotk_decode_params *p) {
  make_varlen_decode(p), p->cu_seqlens_q.dtype = (aotk_dtype)77;
}
static void dec_cu_one_offset(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.shape[0] = 1; }
static void dec_cu_no_offsets(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.shape[0] = 0; }
static void dec_cu_negative_size(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.shape[0] = -4; }
static void dec_cu_stride_2(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.strides[0] = 2; }
static void dec_cu_misaligned(aotk_decode_params *p) {
  make_varlen_decode(p), p->cu_seqlens_q.data = byte_offset(FAKE_CU_SEQLENS_Q, 2);
}
static void dec_cu_at_the_top(aotk_decode_params *p) {
  make_varlen_decode(p), p->cu_seqlens_q.data = (void *)(UINTPTR_MAX - 7);
}
static void dec_cu_batch_plus_1(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.shape[0] += 1; }
static void dec_cu_batch_minus_1(aotk_decode_params *p) { make_varlen_decode(p), p->cu_seqlens_q.shape[0] -= 1; }
static void dec_paged_cu_batch_plus_1(aotk_decode_params *p) {
  make_varlen_paged_decode(p), p->cu_seqlens_q.shape[0] += 1;
}
static void dec_cu_null_fields_set(aotk_decode_params *p) { /* dense then: q's rank 3 is wrong */
  make_varlen_decode(p), p->cu_seqlens_q.data = NULL;
}
static void dec_varlen_q_rank_4(aotk_decode_params *p) {
  make_varlen_decode(p), p->q = aotk_tensor_4d(FAKE_Q, AOTK_DTYPE_BFLOAT16, 3, 40, 8, 128);
}
static void dec_varlen_q_rank_2(aotk_decode_params *p) { make_varlen_decode(p), p->q.rank = 2; }
static void dec_varlen_q_null(aotk_decode_params *p) { make_varlen_decode(p), p->q.data = NULL; }
static void dec_varlen_q_total_zero(aotk_decode_params *p) { make_varlen_decode(p), p->q.shape[0] = 0; }
static void dec_varlen_q_float32(aotk_decode_params *p) { make_varlen_decode(p), p->q.dtype = AOTK_DTYPE_FLOAT32; }
static void dec_varlen_q_last_stride_2(aotk_decode_params *p) { make_varlen_decode(p), p->q.strides[2] = 2; }
static void dec_varlen_head_dim_100(aotk_decode_params *p) { make_varlen_decode(p), p->q.shape[2] = 100; }
static void dec_varlen_head_dim_264(aotk_decode_params *p) { make_varlen_decode(p), p->q.shape[2] = 264; }
static void dec_varlen_head_dim_4(aotk_decode_params *p) { make_varlen_decode(p), p->q.shape[2] = 4; }
static void dec_varlen_k_head_dim_64(aotk_decode_params *p) { make_varlen_decode(p), p->k_cache.shape[3] = 64; }
static void dec_varlen_heads_q_6(aotk_decode_params *p) { /* 6 query heads over 4 kv heads */
  make_varlen_decode(p), p->q.shape[1] = p->out.shape[1] = p->lse.shape[0] = 6;
  p->k_cache.shape[2] = p->v_cache.shape[2] = 4;
}
static void dec_varlen_out_rank_4(aotk_decode_params *p) {
  make_varlen_decode(p), p->out = aotk_tensor_4d(FAKE_OUT, AOTK_DTYPE_BFLOAT16, 3, 40, 8, 128);
}
static void dec_varlen_out_rank_2(aotk_decode_params *p) { make_varlen_decode(p), p->out.rank = 2; }
static void dec_varlen_out_total_plus_1(aotk_decode_params *p) { make_varlen_decode(p), p->out.shape[0] += 1; }
static void dec_varlen_out_batch_rows(aotk_decode_params *p) { /* [batch * max_seqlen_q, ...]: not q's rows */
  make_varlen_decode(p), p->out.shape[0] = 3 * 40;
}
static void dec_varlen_out_heads_kv(aotk_decode_params *p) { make_varlen_decode(p), p->out.shape[1] = 2; }
static void dec_varlen_out_head_dim(aotk_decode_params *p) { make_varlen_decode(p), p->out.shape[2] = 64; }
static void dec_varlen_out_float16(aotk_decode_params *p) { make_varlen_decode(p), p->out.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_varlen_out_token_stride_zero(aotk_decode_params *p) { make_varlen_decode(p), p->out.strides[0] = 0; }
static void dec_varlen_out_heads_stride_zero(aotk_decode_params *p) { make_varlen_decode(p), p->out.strides[1] = 0; }
static void dec_varlen_out_last_stride_2(aotk_decode_params *p) { make_varlen_decode(p), p->out.strides[2] = 2; }
static void dec_varlen_lse_rank_3(aotk_decode_params *p) { /* the dense layout [batch, heads_q, max_seqlen_q] */
  make_varlen_decode(p), p->lse = aotk_tensor_3d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 3, 8, 40);
}
static void dec_varlen_lse_rank_1(aotk_decode_params *p) { make_varlen_decode(p), p->lse.rank = 1; }
static void dec_varlen_lse_like_out(aotk_decode_params *p) { /* [total_q, heads_q]: out's order */
  make_varlen_decode(p), p->lse = aotk_tensor_2d(FAKE_LSE, AOTK_DTYPE_FLOAT32, 100, 8);
}
static void dec_varlen_lse_heads_kv(aotk_decode_params *p) { make_varlen_decode(p), p->lse.shape[0] = 2; }
static void dec_varlen_lse_total_minus_1(aotk_decode_params *p) { make_varlen_decode(p), p->lse.shape[1] -= 1; }
static void dec_varlen_lse_float16(aotk_decode_params *p) { make_varlen_decode(p), p->lse.dtype = AOTK_DTYPE_FLOAT16; }
static void dec_varlen_lse_heads_stride_zero(aotk_decode_params *p) { make_varlen_decode(p), p->lse.strides[0] = 0; }
static void dec_varlen_lse_last_stride_2(aotk_decode_params *p) { make_varlen_decode(p), p->lse.strides[1] = 2; }
static void dec_max_seqlen_q_zero(aotk_decode_params *p) { make_varlen_decode(p), p->max_seqlen_q = 0; }
static void dec_max_seqlen_q_negative(aotk_decode_params *p) { make_varlen_decode(p), p->max_seqlen_q = -1; }
static void dec_max_seqlen_q_min(aotk_decode_params *p) { make_varlen_decode(p), p->max_seqlen_q = INT32_MIN; }
static void dec_varlen_num_splits_257(aotk_decode_params *p) {
  make_varlen_decode(p), p->num_splits = AOTK_DECODE_MAX_SPLITS + 1;
}
static void dec_varlen_append(aotk_decode_params *p) {
  make_varlen_decode(p), add_new_kv(p, &default_varlen_shape, 1);
}
static void dec_varlen_paged_append(aotk_decode_params *p) {
  make_varlen_paged_decode(p), add_new_kv(p, &default_varlen_paged_shape, 3);
}
static void dec_varlen_k_new_only(aotk_decode_params *p) { dec_varlen_append(p), p->v_new = (aotk_tensor){0}; }
static void dec_varlen_v_new_only(aotk_decode_params *p) { dec_varlen_append(p), p->k_new = (aotk_tensor){0}; }
static void dec_varlen_alibi_batch_plus_1(aotk_decode_params *p) {
  make_varlen_decode(p), p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 4, 8);
}
static void dec_varlen_alibi_total_q_rows(aotk_decode_params *p) { /* per token, not per request */
  make_varlen_decode(p), p->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 100, 8);
}
static void dec_varlen_q_token_stride_8_past(aotk_decode_params *p) { make_varlen_decode(p), p->q.strides[0] += 8; }
static void dec_varlen_q_heads_stride_136(aotk_decode_params *p) {
  make_varlen_decode(p), p->q.strides[1] = 136, p->q.strides[0] = 8 * 136 + 8;
}
static void dec_varlen_out_heads_stride_136(aotk_decode_params *p) {
  make_varlen_decode(p), p->out.strides[1] = 136, p->out.strides[0] = 8 * 136 + 8;
}
static void dec_varlen_out_two_bytes_off(aotk_decode_params *p) {
  make_varlen_decode(p), p->out.data = byte_offset(FAKE_OUT, 2);
}
static void dec_varlen_misaligned_q_and_splits_257(aotk_decode_params *p) { /* the value first */
  dec_varlen_q_token_stride_8_past(p), p->num_splits = AOTK_DECODE_MAX_SPLITS + 1;
}

static const decode_bad_input decode_bad_inputs[] = {
    {"params NULL", NULL, AOTK_ERROR_NULL_POINTER, "params"},
    {"struct_size 0", dec_struct_size_zero, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size one byte short", dec_struct_size_short, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size of a pointer", dec_struct_size_of_a_pointer, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"struct_size garbage", dec_struct_size_garbage, AOTK_ERROR_STRUCT_SIZE, "struct_size"},
    {"q.data NULL", dec_q_null, AOTK_ERROR_NULL_POINTER, "q.data"},
    {"q past the end of the address space", dec_q_at_the_top, AOTK_ERROR_SIZE_OVERFLOW, "end of the address space"},
    {"q rank 3", dec_q_rank_3, AOTK_ERROR_RANK, "q.rank"},
    {"q float32", dec_q_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"q int32", dec_q_int32, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"q dtype garbage", dec_q_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"seqlen_q 17", dec_q_seqlen_17, AOTK_ERROR_INVALID_VALUE, "q.shape[1]"},
    {"seqlen_q 2^40", dec_q_seqlen_huge, AOTK_ERROR_INVALID_VALUE, "q.shape[1]"},
    {"head_dim_qk 100", dec_q_head_dim_100, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "q.shape[3]"},
    {"head_dim_qk 264", dec_q_head_dim_264, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "q.shape[3]"},
    {"head_dim_qk 4", dec_q_head_dim_4, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "q.shape[3]"},
    {"k_cache.data NULL", dec_k_null, AOTK_ERROR_NULL_POINTER, "k_cache.data"},
    {"k_cache rank 5", dec_k_rank_5, AOTK_ERROR_RANK, "k_cache.rank"},
    {"k_cache rank 3 (rows packed)", dec_k_rank_3, AOTK_ERROR_RANK, "k_cache.rank"},
    {"k_cache float16, q bfloat16", dec_k_float16, AOTK_ERROR_DTYPE_MISMATCH, "k_cache.dtype"},
    {"k_cache dtype garbage", dec_k_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "k_cache.dtype"},
    {"k_cache head_dim 64, q 128", dec_k_head_dim_64, AOTK_ERROR_HEAD_DIM_MISMATCH, "k_cache.shape[3]"},
    {"k_cache last stride 2", dec_k_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "k_cache.strides[3]"},
    {"k_cache stride negative", dec_k_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "k_cache.strides[1]"},
    {"k_cache capacity 0", dec_k_capacity_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "k_cache.shape[1]"},
    {"v_cache.data NULL", dec_v_null, AOTK_ERROR_NULL_POINTER, "v_cache.data"},
    {"v_cache rank 3", dec_v_rank_3, AOTK_ERROR_RANK, "v_cache.rank"},
    {"v_cache float16, q bfloat16", dec_v_float16, AOTK_ERROR_DTYPE_MISMATCH, "v_cache.dtype"},
    {"v_cache float32, q bfloat16", dec_v_float32, AOTK_ERROR_DTYPE_MISMATCH, "v_cache.dtype"},
    {"v_cache batch != k_cache's", dec_v_batch, AOTK_ERROR_SHAPE_MISMATCH, "v_cache.shape[0]"},
    {"v_cache capacity != k_cache's", dec_v_capacity, AOTK_ERROR_SHAPE_MISMATCH, "v_cache.shape[1]"},
    {"v_cache heads != k_cache's", dec_v_heads, AOTK_ERROR_SHAPE_MISMATCH, "v_cache.shape[2]"},
    {"head_dim_v 100", dec_v_head_dim_100, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "v_cache.shape[3]"},
    {"head_dim_v 512", dec_v_head_dim_512, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "v_cache.shape[3]"},
    {"heads_kv 3, heads_q 8", dec_heads_kv_3, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_kv"},
    {"heads_kv 16 > heads_q 8", dec_heads_kv_16, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_kv"},
    {"paged: block_table rank 1", dec_table_rank_1, AOTK_ERROR_RANK, "block_table.rank"},
    {"paged: block_table rank 3", dec_table_rank_3, AOTK_ERROR_RANK, "block_table.rank"},
    {"paged: block_table int64", dec_table_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "block_table.dtype"},
    {"paged: block_table float32", dec_table_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "block_table.dtype"},
    {"paged: block_table dtype 0", dec_table_dtype_zero, AOTK_ERROR_UNSUPPORTED_DTYPE, "block_table.dtype"},
    {"paged: block_table batch + 1", dec_table_batch, AOTK_ERROR_SHAPE_MISMATCH, "block_table.shape[0]"},
    {"paged: block_table of one row", dec_table_one_row, AOTK_ERROR_SHAPE_MISMATCH, "block_table.shape[0]"},
    {"paged: block_table of 0 pages", dec_table_pages_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "block_table.shape[1]"},
    {"paged: block_table last stride 2", dec_table_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM,
     "block_table.strides[1]"},
    {"paged: block_table misaligned", dec_table_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "block_table.data"},
    {"paged: 2^27 pages of 16 keys (2^31 keys)", dec_table_capacity_2_31, AOTK_ERROR_SIZE_OVERFLOW,
     "block_table.shape[1]"},
    {"paged: 2^60 pages of 16 keys (overflows int64)", dec_table_capacity_2_64, AOTK_ERROR_SIZE_OVERFLOW,
     "block_table.shape[1]"},
    {"paged: 2^31 - 1 pages of 2 keys", dec_page_size_2_capacity_2_32, AOTK_ERROR_SIZE_OVERFLOW,
     "block_table.shape[1]"},
    {"paged: v_cache one page fewer", dec_paged_v_pages, AOTK_ERROR_SHAPE_MISMATCH, "v_cache.shape[0]"},
    {"paged: v_cache page size 32, k_cache 16", dec_paged_v_page_size, AOTK_ERROR_SHAPE_MISMATCH, "v_cache.shape[1]"},
    {"paged cache without block_table", dec_paged_without_table, AOTK_ERROR_SHAPE_MISMATCH, "needs block_table"},
    {"paged: cache_seqlens per page", dec_paged_seqlens_batch, AOTK_ERROR_SHAPE_MISMATCH, "cache_seqlens.shape[0]"},
    {"contiguous: k_cache and v_cache batch 4, q 3", dec_k_batch, AOTK_ERROR_SHAPE_MISMATCH, "k_cache.shape[0]"},
    {"contiguous: capacity 2^31", dec_capacity_2_31, AOTK_ERROR_SIZE_OVERFLOW, "k_cache.shape[1]"},
    {"contiguous: capacity 2^30 + 1", dec_capacity_max_plus_1, AOTK_ERROR_SIZE_OVERFLOW, "AOTK_DECODE_MAX_CAPACITY"},
    {"paged: 2^26 + 1 pages of 16 keys", dec_table_capacity_max_plus_16, AOTK_ERROR_SIZE_OVERFLOW,
     "AOTK_DECODE_MAX_CAPACITY"},
    {"cache_seqlens.data NULL", dec_seqlens_null, AOTK_ERROR_NULL_POINTER, "cache_seqlens.data"},
    {"cache_seqlens rank 2", dec_seqlens_rank_2, AOTK_ERROR_RANK, "cache_seqlens.rank"},
    {"cache_seqlens rank 0", dec_seqlens_rank_0, AOTK_ERROR_RANK, "cache_seqlens.rank"},
    {"cache_seqlens int64", dec_seqlens_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "cache_seqlens.dtype"},
    {"cache_seqlens float32", dec_seqlens_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "cache_seqlens.dtype"},
    {"cache_seqlens batch + 1", dec_seqlens_batch, AOTK_ERROR_SHAPE_MISMATCH, "cache_seqlens.shape[0]"},
    {"cache_seqlens one length for all", dec_seqlens_one, AOTK_ERROR_SHAPE_MISMATCH, "cache_seqlens.shape[0]"},
    {"cache_seqlens stride 2", dec_seqlens_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "cache_seqlens.strides[0]"},
    {"cache_seqlens misaligned", dec_seqlens_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "cache_seqlens.data"},
    {"cache_leftpad rank 2", dec_leftpad_rank_2, AOTK_ERROR_RANK, "cache_leftpad.rank"},
    {"cache_leftpad int64", dec_leftpad_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "cache_leftpad.dtype"},
    {"cache_leftpad batch + 1", dec_leftpad_batch, AOTK_ERROR_SHAPE_MISMATCH, "cache_leftpad.shape[0]"},
    {"cache_leftpad stride 2", dec_leftpad_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "cache_leftpad.strides[0]"},
    {"cache_leftpad misaligned", dec_leftpad_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "cache_leftpad.data"},
    {"out.data NULL", dec_out_null, AOTK_ERROR_NULL_POINTER, "out.data"},
    {"out rank 3", dec_out_rank_3, AOTK_ERROR_RANK, "out.rank"},
    {"out float16, q bfloat16", dec_out_float16, AOTK_ERROR_DTYPE_MISMATCH, "out.dtype"},
    {"out float32, q bfloat16", dec_out_float32, AOTK_ERROR_DTYPE_MISMATCH, "out.dtype"},
    {"out batch + 1", dec_out_batch, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[0]"},
    {"out one token, q two", dec_out_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[1]"},
    {"out heads_kv", dec_out_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[2]"},
    {"out head_dim 64, v 128", dec_out_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[3]"},
    {"out heads stride 0", dec_out_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[2]"},
    {"out batch stride 0", dec_out_batch_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[0]"},
    {"out last stride 2", dec_out_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "out.strides[3]"},
    {"out stride negative", dec_out_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "out.strides[1]"},
    {"lse rank 2", dec_lse_rank_2, AOTK_ERROR_RANK, "lse.rank"},
    {"lse float16", dec_lse_float16, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"lse bfloat16", dec_lse_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"lse batch + 1", dec_lse_batch, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"lse heads_kv", dec_lse_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"lse seqlen_q + 1", dec_lse_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[2]"},
    {"lse [batch, seqlen_q, heads_q]", dec_lse_like_out, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"lse heads stride 0", dec_lse_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "lse.strides[1]"},
    {"lse last stride 2", dec_lse_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "lse.strides[2]"},
    {"lse misaligned", dec_lse_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "lse.data"},
    {"causal 2", dec_causal_2, AOTK_ERROR_INVALID_VALUE, "causal"},
    {"causal -1", dec_causal_negative, AOTK_ERROR_INVALID_VALUE, "causal"},
    {"window_left -2", dec_window_left_minus_2, AOTK_ERROR_INVALID_VALUE, "window_left"},
    {"window_right INT32_MIN", dec_window_right_min, AOTK_ERROR_INVALID_VALUE, "window_right"},
    {"causal with window_right 1", dec_causal_window_right_1, AOTK_ERROR_INVALID_VALUE, "window_right"},
    {"causal with window_left -2", dec_causal_window_left_minus_2, AOTK_ERROR_INVALID_VALUE, "window_left"},
    {"softmax_scale NaN", dec_scale_nan, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale negative", dec_scale_negative, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale infinite", dec_scale_infinite, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softmax_scale -infinity", dec_scale_negative_infinite, AOTK_ERROR_INVALID_VALUE, "softmax_scale"},
    {"softcap negative", dec_softcap_negative, AOTK_ERROR_INVALID_VALUE, "softcap"},
    {"softcap NaN", dec_softcap_nan, AOTK_ERROR_INVALID_VALUE, "softcap"},
    {"softcap infinite", dec_softcap_infinite, AOTK_ERROR_INVALID_VALUE, "softcap"},
    {"alibi_slopes float16", dec_alibi_float16, AOTK_ERROR_UNSUPPORTED_DTYPE, "alibi_slopes.dtype"},
    {"alibi_slopes [heads_kv]", dec_alibi_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[0]"},
    {"alibi_slopes [batch + 1, heads_q]", dec_alibi_2d_batch, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[0]"},
    {"alibi_slopes [batch, heads_kv]", dec_alibi_2d_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "alibi_slopes.shape[1]"},
    {"alibi_slopes rank 3", dec_alibi_rank_3, AOTK_ERROR_RANK, "alibi_slopes.rank"},
    {"alibi_slopes misaligned", dec_alibi_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "alibi_slopes.data"},
    {"sinks [batch, heads_q]", dec_sinks_per_batch, AOTK_ERROR_RANK, "sinks.rank"},
    {"sinks [heads_kv]", dec_sinks_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "sinks.shape[0]"},
    {"sinks bfloat16", dec_sinks_bfloat16, AOTK_ERROR_UNSUPPORTED_DTYPE, "sinks.dtype"},
    {"num_splits -1", dec_num_splits_negative, AOTK_ERROR_INVALID_VALUE, "num_splits"},
    {"num_splits 257", dec_num_splits_257, AOTK_ERROR_INVALID_VALUE, "num_splits"},
    {"num_splits INT32_MIN", dec_num_splits_min, AOTK_ERROR_INVALID_VALUE, "num_splits"},
    {"max_seqlen_k -1", dec_max_seqlen_k_negative, AOTK_ERROR_INVALID_VALUE, "max_seqlen_k"},
    {"max_seqlen_k INT32_MIN", dec_max_seqlen_k_min, AOTK_ERROR_INVALID_VALUE, "max_seqlen_k"},
    {"q 2 bytes past 16", dec_q_two_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "q: decoding"},
    {"q 8 bytes past 16", dec_q_eight_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "q: decoding"},
    {"q odd address", dec_q_odd_address, AOTK_ERROR_MISALIGNED_POINTER, "q.data"},
    {"q heads stride 136", dec_q_heads_stride_136, AOTK_ERROR_MISALIGNED_POINTER, "q: decoding"},
    {"q batch stride 8 past a multiple of 16", dec_q_batch_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER, "q: decoding"},
    {"k_cache 8 bytes past 16", dec_k_eight_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "k_cache: decoding"},
    {"k_cache token stride 8 past", dec_k_token_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER, "k_cache: decoding"},
    {"v_cache 4 bytes past 16", dec_v_four_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "v_cache: decoding"},
    {"v_cache batch stride 8 past", dec_v_batch_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER, "v_cache: decoding"},
    {"paged: k_cache page stride 8 past", dec_paged_k_page_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER,
     "k_cache: decoding"},
    {"paged: v_cache heads stride 136", dec_paged_v_heads_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER,
     "v_cache: decoding"},
    {"out 2 bytes past 16", dec_out_two_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "out: decoding"},
    {"out heads stride 136", dec_out_heads_stride_136, AOTK_ERROR_MISALIGNED_POINTER, "out: decoding"},
    {"head dims 72, contiguous (rows 144 bytes apart)", dec_head_dims_72, AOTK_ERROR_MISALIGNED_POINTER, "q: decoding"},
    {"misaligned q and causal 2: the value first", dec_misaligned_q_and_causal_2, AOTK_ERROR_INVALID_VALUE, "causal"},
    {"k_new without v_new", dec_k_new_only, AOTK_ERROR_NULL_POINTER, "v_new.data"},
    {"v_new without k_new", dec_v_new_only, AOTK_ERROR_NULL_POINTER, "k_new.data"},
    {"k_new with a described v_new whose data is NULL", dec_k_new_only_garbage_v_new, AOTK_ERROR_NULL_POINTER,
     "v_new.data"},
    {"k_new rank 3", dec_k_new_rank_3, AOTK_ERROR_RANK, "k_new.rank"},
    {"v_new rank 5", dec_v_new_rank_5, AOTK_ERROR_RANK, "v_new.rank"},
    {"v_new rank 0", dec_v_new_rank_0, AOTK_ERROR_RANK, "v_new.rank"},
    {"k_new float16, q bfloat16", dec_k_new_float16, AOTK_ERROR_DTYPE_MISMATCH, "k_new.dtype"},
    {"v_new float32, q bfloat16", dec_v_new_float32, AOTK_ERROR_DTYPE_MISMATCH, "v_new.dtype"},
    {"k_new dtype garbage", dec_k_new_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "k_new.dtype"},
    {"k_new batch + 1", dec_k_new_batch, AOTK_ERROR_SHAPE_MISMATCH, "k_new.shape[0]"},
    {"v_new batch 1, q 3", dec_v_new_batch, AOTK_ERROR_SHAPE_MISMATCH, "v_new.shape[0]"},
    {"k_new seqlen_new 0", dec_k_new_seqlen_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "k_new.shape[1]"},
    {"v_new 4 new tokens, k_new 3", dec_v_new_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "v_new.shape[1]"},
    {"k_new 2 new tokens, v_new 3", dec_both_new_seqlen, AOTK_ERROR_SHAPE_MISMATCH, "v_new.shape[1]"},
    {"k_new with heads_q heads", dec_k_new_heads_q, AOTK_ERROR_SHAPE_MISMATCH, "k_new.shape[2]"},
    {"v_new one head, heads_kv 2", dec_v_new_heads, AOTK_ERROR_SHAPE_MISMATCH, "v_new.shape[2]"},
    {"k_new head_dim 64, q 128", dec_k_new_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "k_new.shape[3]"},
    {"v_new head_dim 136, v_cache 128", dec_v_new_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "v_new.shape[3]"},
    {"k_new and v_new head dims swapped (256, 128)", dec_new_head_dims_swapped, AOTK_ERROR_HEAD_DIM_MISMATCH,
     "k_new.shape[3]"},
    {"k_new last stride 2", dec_k_new_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "k_new.strides[3]"},
    {"v_new stride negative", dec_v_new_stride_negative, AOTK_ERROR_NEGATIVE_STRIDE, "v_new.strides[1]"},
    {"k_new past the end of the address space", dec_k_new_at_the_top, AOTK_ERROR_SIZE_OVERFLOW,
     "end of the address space"},
    {"k_new odd address", dec_k_new_odd_address, AOTK_ERROR_MISALIGNED_POINTER, "k_new.data"},
    {"k_new 8 bytes past 16", dec_k_new_eight_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "k_new: decoding"},
    {"v_new 2 bytes past 16", dec_v_new_two_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "v_new: decoding"},
    {"k_new token stride 8 past", dec_k_new_token_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER, "k_new: decoding"},
    {"v_new heads stride 136", dec_v_new_heads_stride_136, AOTK_ERROR_MISALIGNED_POINTER, "v_new: decoding"},
    {"v_new batch stride 8 past", dec_v_new_batch_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER, "v_new: decoding"},
    {"paged: k_new 3 heads, heads_kv 2", dec_paged_k_new_heads, AOTK_ERROR_SHAPE_MISMATCH, "k_new.shape[2]"},
    {"paged: v_new 4 bytes past 16", dec_paged_v_new_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "v_new: decoding"},
    {"misaligned k_new and v_new heads: the shape first", dec_misaligned_k_new_and_bad_v_new_heads,
     AOTK_ERROR_SHAPE_MISMATCH, "v_new.shape[2]"},
    {"misaligned q and k_new batch: the shape first", dec_misaligned_q_and_bad_k_new, AOTK_ERROR_SHAPE_MISMATCH,
     "k_new.shape[0]"},
    {"varlen: cu_seqlens_q rank 2", dec_cu_rank_2, AOTK_ERROR_RANK, "cu_seqlens_q.rank"},
    {"varlen: cu_seqlens_q rank 0", dec_cu_rank_0, AOTK_ERROR_RANK, "cu_seqlens_q.rank"},
    {"varlen: cu_seqlens_q int64", dec_cu_int64, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_q.dtype"},
    {"varlen: cu_seqlens_q float32", dec_cu_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_q.dtype"},
    {"varlen: cu_seqlens_q dtype garbage", dec_cu_dtype_garbage, AOTK_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_q.dtype"},
    {"varlen: cu_seqlens_q of one offset (no request)", dec_cu_one_offset, AOTK_ERROR_NONPOSITIVE_SIZE,
     "cu_seqlens_q.shape[0]"},
    {"varlen: cu_seqlens_q of no offsets", dec_cu_no_offsets, AOTK_ERROR_NONPOSITIVE_SIZE, "cu_seqlens_q.shape[0]"},
    {"varlen: cu_seqlens_q of -4 offsets", dec_cu_negative_size, AOTK_ERROR_NONPOSITIVE_SIZE, "cu_seqlens_q.shape[0]"},
    {"varlen: cu_seqlens_q stride 2", dec_cu_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "cu_seqlens_q.strides[0]"},
    {"varlen: cu_seqlens_q misaligned", dec_cu_misaligned, AOTK_ERROR_MISALIGNED_POINTER, "cu_seqlens_q.data"},
    {"varlen: cu_seqlens_q past the end of the address space", dec_cu_at_the_top, AOTK_ERROR_SIZE_OVERFLOW,
     "end of the address space"},
    {"varlen: cu_seqlens_q of 4 requests, caches of 3", dec_cu_batch_plus_1, AOTK_ERROR_SHAPE_MISMATCH,
     "k_cache.shape[0]"},
    {"varlen: cu_seqlens_q of 2 requests, caches of 3", dec_cu_batch_minus_1, AOTK_ERROR_SHAPE_MISMATCH,
     "k_cache.shape[0]"},
    {"varlen, paged: cu_seqlens_q of 4 requests, block_table of 3", dec_paged_cu_batch_plus_1,
     AOTK_ERROR_SHAPE_MISMATCH, "block_table.shape[0]"},
    {"varlen: cu_seqlens_q.data NULL (dense), q rank 3", dec_cu_null_fields_set, AOTK_ERROR_RANK, "q.rank"},
    {"varlen: q rank 4", dec_varlen_q_rank_4, AOTK_ERROR_RANK, "q.rank"},
    {"varlen: q rank 2", dec_varlen_q_rank_2, AOTK_ERROR_RANK, "q.rank"},
    {"varlen: q.data NULL", dec_varlen_q_null, AOTK_ERROR_NULL_POINTER, "q.data"},
    {"varlen: total_q 0", dec_varlen_q_total_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "q.shape[0]"},
    {"varlen: q float32", dec_varlen_q_float32, AOTK_ERROR_UNSUPPORTED_DTYPE, "q.dtype"},
    {"varlen: q last stride 2", dec_varlen_q_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "q.strides[2]"},
    {"varlen: head_dim_qk 100", dec_varlen_head_dim_100, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "q.shape[2]"},
    {"varlen: head_dim_qk 264", dec_varlen_head_dim_264, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "q.shape[2]"},
    {"varlen: head_dim_qk 4", dec_varlen_head_dim_4, AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "q.shape[2]"},
    {"varlen: k_cache head_dim 64, q 128", dec_varlen_k_head_dim_64, AOTK_ERROR_HEAD_DIM_MISMATCH, "k_cache.shape[3]"},
    {"varlen: heads_q 6, heads_kv 4", dec_varlen_heads_q_6, AOTK_ERROR_HEADS_NOT_DIVISIBLE, "heads_kv"},
    {"varlen: out rank 4", dec_varlen_out_rank_4, AOTK_ERROR_RANK, "out.rank"},
    {"varlen: out rank 2", dec_varlen_out_rank_2, AOTK_ERROR_RANK, "out.rank"},
    {"varlen: out total_q + 1", dec_varlen_out_total_plus_1, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[0]"},
    {"varlen: out of batch * max_seqlen_q rows", dec_varlen_out_batch_rows, AOTK_ERROR_SHAPE_MISMATCH, "total_q"},
    {"varlen: out heads_kv", dec_varlen_out_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "out.shape[1]"},
    {"varlen: out head_dim 64, v 128", dec_varlen_out_head_dim, AOTK_ERROR_HEAD_DIM_MISMATCH, "out.shape[2]"},
    {"varlen: out float16, q bfloat16", dec_varlen_out_float16, AOTK_ERROR_DTYPE_MISMATCH, "out.dtype"},
    {"varlen: out token stride 0", dec_varlen_out_token_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[0]"},
    {"varlen: out heads stride 0", dec_varlen_out_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "out.strides[1]"},
    {"varlen: out last stride 2", dec_varlen_out_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "out.strides[2]"},
    {"varlen: lse rank 3 (the dense layout)", dec_varlen_lse_rank_3, AOTK_ERROR_RANK, "lse.rank"},
    {"varlen: lse rank 1", dec_varlen_lse_rank_1, AOTK_ERROR_RANK, "lse.rank"},
    {"varlen: lse [total_q, heads_q]", dec_varlen_lse_like_out, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"varlen: lse heads_kv", dec_varlen_lse_heads_kv, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[0]"},
    {"varlen: lse total_q - 1", dec_varlen_lse_total_minus_1, AOTK_ERROR_SHAPE_MISMATCH, "lse.shape[1]"},
    {"varlen: lse float16", dec_varlen_lse_float16, AOTK_ERROR_UNSUPPORTED_DTYPE, "lse.dtype"},
    {"varlen: lse heads stride 0", dec_varlen_lse_heads_stride_zero, AOTK_ERROR_INVALID_VALUE, "lse.strides[0]"},
    {"varlen: lse last stride 2", dec_varlen_lse_last_stride_2, AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "lse.strides[1]"},
    {"varlen: max_seqlen_q 0", dec_max_seqlen_q_zero, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_q"},
    {"varlen: max_seqlen_q -1", dec_max_seqlen_q_negative, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_q"},
    {"varlen: max_seqlen_q INT32_MIN", dec_max_seqlen_q_min, AOTK_ERROR_NONPOSITIVE_SIZE, "max_seqlen_q"},
    {"varlen: num_splits 257", dec_varlen_num_splits_257, AOTK_ERROR_INVALID_VALUE, "num_splits"},
    {"varlen: appending (k_new and v_new)", dec_varlen_append, AOTK_ERROR_INVALID_VALUE, "with cu_seqlens_q"},
    {"varlen, paged: appending", dec_varlen_paged_append, AOTK_ERROR_INVALID_VALUE, "with cu_seqlens_q"},
    {"varlen: k_new without v_new", dec_varlen_k_new_only, AOTK_ERROR_INVALID_VALUE, "with cu_seqlens_q"},
    {"varlen: v_new without k_new", dec_varlen_v_new_only, AOTK_ERROR_INVALID_VALUE, "with cu_seqlens_q"},
    {"varlen: alibi_slopes [batch + 1, heads_q]", dec_varlen_alibi_batch_plus_1, AOTK_ERROR_SHAPE_MISMATCH,
     "alibi_slopes.shape[0]"},
    {"varlen: alibi_slopes [total_q, heads_q]", dec_varlen_alibi_total_q_rows, AOTK_ERROR_SHAPE_MISMATCH,
     "alibi_slopes.shape[0]"},
    {"varlen: q token stride 8 past", dec_varlen_q_token_stride_8_past, AOTK_ERROR_MISALIGNED_POINTER, "q: decoding"},
    {"varlen: q heads stride 136", dec_varlen_q_heads_stride_136, AOTK_ERROR_MISALIGNED_POINTER, "q: decoding"},
    {"varlen: out heads stride 136", dec_varlen_out_heads_stride_136, AOTK_ERROR_MISALIGNED_POINTER, "out: decoding"},
    {"varlen: out 2 bytes past 16", dec_varlen_out_two_bytes_off, AOTK_ERROR_MISALIGNED_POINTER, "out: decoding"},
    {"varlen: misaligned q and num_splits 257: the value first", dec_varlen_misaligned_q_and_splits_257,
     AOTK_ERROR_INVALID_VALUE, "num_splits"},
};

/* Runs one bad input through aotk_attn_decode (with an ample workspace) and aotk_decode_query with the
 * recording fake installed as a working sm_90 GPU: both must refuse it with the expected status and a
 * message naming the argument, call no driver function (so nothing is loaded, launched or written), and
 * leave the caller's params and the query's info untouched. */
static void check_decode_bad_input(const decode_bad_input *c) {
  aotk_decode_params params = valid_decode_params();
  if (c->spoil != NULL) c->spoil(&params);
  const aotk_decode_params before = params;
  const aotk_decode_params *argument = c->spoil != NULL ? &params : NULL;

  reset_calls();
  aotk_status status = aotk_attn_decode(argument, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM);
  CHECK_MSG(status == c->expected, "%s: aotk_attn_decode gave %s (%s), expected %s", c->what, aotk_status_name(status),
            aotk_last_error(), aotk_status_name(c->expected));
  CHECK_MSG(message_mentions(c->mentions), "%s: aotk_attn_decode's message \"%s\" does not mention \"%s\"", c->what,
            aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: aotk_attn_decode reached the driver (%s)", c->what, called_functions());
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: aotk_attn_decode changed the caller's params", c->what);

  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status query_status = aotk_decode_query(AOTK_OP_DECODE, argument, &info);
  CHECK_MSG(query_status == status, "%s: aotk_decode_query gave %s, aotk_attn_decode %s", c->what,
            aotk_status_name(query_status), aotk_status_name(status));
  CHECK_MSG(message_mentions(c->mentions), "%s: aotk_decode_query's message \"%s\" does not mention \"%s\"", c->what,
            aotk_last_error(), c->mentions);
  CHECK_MSG(total_calls() == 0, "%s: aotk_decode_query reached the driver (%s)", c->what, called_functions());
  CHECK_MSG(info_untouched(&info), "%s: aotk_decode_query wrote *info on failure", c->what);
  CHECK_MSG(memcmp(&params, &before, sizeof params) == 0, "%s: aotk_decode_query changed the caller's params", c->what);
}

#endif /* API_DECODE_BAD_INPUTS_H */
