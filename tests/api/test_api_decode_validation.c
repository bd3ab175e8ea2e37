/*
 * CPU tests of the public API, decoding's validation (0.4): every bad input of aotk_attn_decode and
 * aotk_decode_query, overflows included, refused with its status before the driver is reached, and the
 * edge inputs it accepts. The bad inputs are tests/api/api_decode_bad_inputs.h; the launches are
 * test_api_decode.c's; the fake driver and the shared models are tests/api/api_*.h (see api_fake_driver.h).
 */
#include "api_decode_bad_inputs.h"

static void test_decode_validation_rejects_bad_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  /* The bases are valid, so each failure below is due to its one change. */
  void (*const bases[])(aotk_decode_params *) = {make_paged,         dec_alibi,          dec_alibi_per_batch,
                                                  dec_sinks,          dec_append,         dec_paged_append,
                                                  make_varlen_decode, make_varlen_paged_decode};
  for (size_t i = 0; i <= sizeof bases / sizeof bases[0]; i++) {
    aotk_decode_params params = valid_decode_params();
    if (i > 0) bases[i - 1](&params);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "base %zu fails: %s (%s)", i, aotk_status_name(status), aotk_last_error());
    status = aotk_attn_decode(&params, FAKE_WORKSPACE, info.workspace_bytes, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "base %zu: aotk_attn_decode %s (%s)", i, aotk_status_name(status), aotk_last_error());
  }
  const size_t count = sizeof decode_bad_inputs / sizeof decode_bad_inputs[0];
  for (size_t i = 0; i < count; i++) check_decode_bad_input(&decode_bad_inputs[i]);
  printf("    %zu bad inputs\n", count);
  uninstall_fake_gpu();
}

/* Sizes each valid on its own whose products overflow what the kernels count in 32 bits (or int64
 * itself): q, k and v broadcast (zero strides), out's rows overlapping 16 elements apart. The grid,
 * heads_q, the group and the merge's rows are int32 arguments; a product that wrapped would launch a
 * truncated problem. Kept apart for UBSan, which reports a signed overflow in the check itself. */
static aotk_decode_params broadcast_decode_params(int64_t batch, int64_t seqlen_q, int64_t heads_q, int64_t heads_kv) {
  aotk_decode_params params = AOTK_DECODE_PARAMS_INIT;
  const aotk_tensor q = {FAKE_Q, AOTK_DTYPE_BFLOAT16, 4, {batch, seqlen_q, heads_q, 64}, {0, 0, 0, 1}};
  const aotk_tensor cache = {FAKE_K, AOTK_DTYPE_BFLOAT16, 4, {batch, 128, heads_kv, 64}, {0, 0, 0, 1}};
  const aotk_tensor out = {FAKE_OUT, AOTK_DTYPE_BFLOAT16, 4, {batch, seqlen_q, heads_q, 64}, {16, 16, 16, 1}};
  params.q = q;
  params.k_cache = cache;
  params.v_cache = cache;
  params.v_cache.data = FAKE_V;
  params.cache_seqlens = aotk_tensor_1d(FAKE_CACHE_SEQLENS, AOTK_DTYPE_INT32, batch);
  params.out = out;
  return params;
}
/* 2^33 requests x 2^31 kv heads: the grid's program count wraps int64 to 0. */
static void dec_programs_overflow_int64(aotk_decode_params *p) {
  *p = broadcast_decode_params((int64_t)1 << 33, 1, (int64_t)1 << 31, (int64_t)1 << 31);
}
/* One request, one kv head with a group of 2^31 query heads: 2^25 programs (a valid grid), but heads_q
 * and group_size do not fit the kernel's int32. */
static void dec_heads_q_2_31(aotk_decode_params *p) { *p = broadcast_decode_params(1, 1, (int64_t)1 << 31, 1); }
/* 2^27 requests of 16 tokens and one head, two splits (of 128 keys: the cache holds 256): 2^28
 * programs, but the merge's 2^31 rows do not fit its int32 row count. */
static void dec_split_rows_2_31(aotk_decode_params *p) {
  *p = broadcast_decode_params((int64_t)1 << 27, 16, 1, 1);
  p->k_cache.shape[1] = p->v_cache.shape[1] = 256;
  p->num_splits = 2;
}

/* Appending seqlen_new tokens per request to broadcast_decode_params' problem, k_new and v_new broadcast
 * too. The appending kernel's grid is batch * seqlen_new programs (int32), and seqlen_new is at most
 * AOTK_DECODE_MAX_CAPACITY (no request holds more). */
static void add_broadcast_new_kv(aotk_decode_params *p, int64_t seqlen_new) {
  const aotk_tensor k_new = {FAKE_K_NEW, AOTK_DTYPE_BFLOAT16, 4, {p->q.shape[0], seqlen_new, p->k_cache.shape[2], 64},
                             {0, 0, 0, 1}};
  p->k_new = k_new;
  p->v_new = k_new;
  p->v_new.data = FAKE_V_NEW;
}
static void dec_seqlen_new_max_plus_1(aotk_decode_params *p) {
  *p = broadcast_decode_params(1, 1, 1, 1);
  add_broadcast_new_kv(p, AOTK_DECODE_MAX_CAPACITY + 1);
}
static void dec_seqlen_new_2_62(aotk_decode_params *p) {
  *p = broadcast_decode_params(3, 1, 1, 1);
  add_broadcast_new_kv(p, (int64_t)1 << 62);
}
static void dec_seqlen_new_2_62_one_request(aotk_decode_params *p) {
  *p = broadcast_decode_params(1, 1, 1, 1);
  add_broadcast_new_kv(p, (int64_t)1 << 62);
}
/* 3 requests x 2^30 new tokens: each within AOTK_DECODE_MAX_CAPACITY, 3 x 2^30 programs are not. */
static void dec_append_programs_3_2_30(aotk_decode_params *p) {
  *p = broadcast_decode_params(3, 1, 1, 1);
  add_broadcast_new_kv(p, AOTK_DECODE_MAX_CAPACITY);
}
/* 2^31 - 1 requests (the most query rows) x 2 new tokens. */
static void dec_append_programs_2_32(aotk_decode_params *p) {
  *p = broadcast_decode_params(INT32_MAX, 1, 1, 1);
  add_broadcast_new_kv(p, 2);
}
/* 2^31 requests: the query rows overflow first. */
static void dec_append_requests_2_31(aotk_decode_params *p) {
  *p = broadcast_decode_params((int64_t)1 << 31, 1, 1, 1);
  add_broadcast_new_kv(p, 1);
}

/* Appending into caches broadcast over the requests: every request would write the same rows. */
static void dec_append_into_broadcast_cache(aotk_decode_params *p) {
  *p = broadcast_decode_params(3, 1, 1, 1);
  add_broadcast_new_kv(p, 1);
  p->k_cache.strides[1] = p->v_cache.strides[1] = 64;
}
static void dec_append_into_broadcast_v_cache(aotk_decode_params *p) {
  dec_append_into_broadcast_cache(p);
  p->k_cache.strides[0] = 128 * 64;
}

static const decode_bad_input decode_overflowing_inputs[] = {
    {"appending into a k_cache broadcast over the requests", dec_append_into_broadcast_cache, AOTK_ERROR_INVALID_VALUE,
     "k_cache.strides[0] = 0"},
    {"appending into a v_cache broadcast over the requests", dec_append_into_broadcast_v_cache,
     AOTK_ERROR_INVALID_VALUE, "v_cache.strides[0] = 0"},
    {"batch * heads_kv overflows int64", dec_programs_overflow_int64, AOTK_ERROR_SIZE_OVERFLOW,
     "batch * seqlen_q * heads_q"},
    {"heads_q 2^31", dec_heads_q_2_31, AOTK_ERROR_SIZE_OVERFLOW, "batch * seqlen_q * heads_q"},
    {"2^31 query rows in two splits", dec_split_rows_2_31, AOTK_ERROR_SIZE_OVERFLOW, "batch * seqlen_q * heads_q"},
    {"appending 2^30 + 1 tokens to one request", dec_seqlen_new_max_plus_1, AOTK_ERROR_SIZE_OVERFLOW,
     "AOTK_DECODE_MAX_CAPACITY"},
    {"appending 2^62 tokens to one request", dec_seqlen_new_2_62_one_request, AOTK_ERROR_SIZE_OVERFLOW,
     "k_new.shape[1]"},
    {"appending 2^62 tokens to 3 requests (the product overflows int64)", dec_seqlen_new_2_62,
     AOTK_ERROR_SIZE_OVERFLOW, "k_new.shape[1]"},
    {"appending 2^30 tokens to 3 requests", dec_append_programs_3_2_30, AOTK_ERROR_SIZE_OVERFLOW,
     "batch * seqlen_new"},
    {"appending 2 tokens to 2^31 - 1 requests", dec_append_programs_2_32, AOTK_ERROR_SIZE_OVERFLOW,
     "batch * seqlen_new"},
    {"appending to 2^31 requests", dec_append_requests_2_31, AOTK_ERROR_SIZE_OVERFLOW, "batch * seqlen_q * heads_q"},
};

static void test_decode_validation_overflow(void) {
  install_fake_gpu(90, SHARED_SM90);
  for (size_t i = 0; i < sizeof decode_overflowing_inputs / sizeof decode_overflowing_inputs[0]; i++) {
    check_decode_bad_input(&decode_overflowing_inputs[i]);
  }
  /* One row fewer than the limit: accepted, the merge's rows and the grid in range (two splits of one
   * 128-key block each). */
  aotk_decode_params params = broadcast_decode_params(((int64_t)1 << 27) - 1, 16, 1, 1);
  params.k_cache.shape[1] = params.v_cache.shape[1] = 256;
  params.num_splits = 2;
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
  CHECK_MSG(status == AOTK_OK, "2^31 - 16 query rows: %s (%s)", aotk_status_name(status), aotk_last_error());
  CHECK(info.num_splits == 2 && info.grid == 2 * (((int64_t)1 << 27) - 1));

  /* Appending at the limits: accepted, the appending kernel on batch * seqlen_new programs, first. */
  static const struct {
    const char *what;
    int64_t batch, seqlen_new;
  } appends[] = {
      {"one request x 2^30 new tokens (AOTK_DECODE_MAX_CAPACITY)", 1, AOTK_DECODE_MAX_CAPACITY},
      {"2 requests x (2^30 - 1) new tokens: 2^31 - 2 programs", 2, AOTK_DECODE_MAX_CAPACITY - 1},
      {"2^31 - 1 requests x 1 new token: 2^31 - 1 programs", INT32_MAX, 1},
  };
  for (size_t i = 0; i < sizeof appends / sizeof appends[0]; i++) {
    params = broadcast_decode_params(appends[i].batch, 1, 1, 1);
    add_broadcast_new_kv(&params, appends[i].seqlen_new);
    /* Appending writes the caches: they need their own rows (no stride 0), unlike the inputs. */
    const int64_t contiguous[4] = {128 * 64, 64, 64, 1};
    memcpy(params.k_cache.strides, contiguous, sizeof contiguous);
    memcpy(params.v_cache.strides, contiguous, sizeof contiguous);
    info = (aotk_kernel_info)AOTK_KERNEL_INFO_INIT;
    status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    const int launches = status == AOTK_OK ? expected_decode_launches(&params, &info) : 0;
    CHECK_MSG(status == AOTK_OK && info.launches == launches && info.num_splits == 1, "%s: %s (%s), %d launches",
              appends[i].what, aotk_status_name(status), aotk_last_error(), info.launches);
    reset_launch_log();
    status = aotk_attn_decode(&params, NULL, 0, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK && fake.logged_launches == launches, "%s: aotk_attn_decode %s (%s), %d launches",
              appends[i].what, aotk_status_name(status), aotk_last_error(), fake.logged_launches);
    if (status != AOTK_OK || fake.logged_launches != launches) continue;
    /* The 2^30-token appends run the appending kernel first; the one-token append is the decoding
     * kernel's own. */
    const recorded_launch *append = &fake.launch_log[0], *decode = &fake.launch_log[launches - 1];
    CHECK_MSG(launches == 1 ||
                  (append->kernel == KERNEL_ATTN_CACHE_APPEND &&
                   append->grid[0] == (unsigned)(appends[i].batch * appends[i].seqlen_new) &&
                   arg_i32(append, APPEND_SEQLEN_NEW) == appends[i].seqlen_new),
              "%s: launched %s first on %u programs, seqlen_new %d", appends[i].what,
              kernel_signatures[append->kernel].function, append->grid[0], arg_i32(append, APPEND_SEQLEN_NEW));
    CHECK_MSG((launches == 1) == (appends[i].seqlen_new <= 16) &&
                  ((arg_i32(decode, DECODE_FLAGS) & DECODE_FLAG_FUSED_APPEND) != 0) == (launches == 1),
              "%s: %d launches, flags %#x", appends[i].what, launches, (unsigned)arg_i32(decode, DECODE_FLAGS));
    CHECK_MSG(decode->kernel == KERNEL_ATTN_DECODE && decode->grid[0] == (unsigned)appends[i].batch &&
                  arg_i32(decode, DECODE_SEQLEN_NEW) == appends[i].seqlen_new,
              "%s: then %s on %u programs, seqlen_new %d", appends[i].what,
              kernel_signatures[decode->kernel].function, decode->grid[0], arg_i32(decode, DECODE_SEQLEN_NEW));
  }
  uninstall_fake_gpu();
}

/* Inputs at the edge of what decoding allows, which validation must accept: each runs one launch, or
 * two with a split, as its query says. The params sit in a struct with room after them, so that a
 * struct_size larger than this header's (a newer caller's) is readable memory. */
typedef struct decode_edge_case {
  const char *what;
  struct {
    aotk_decode_params params;
    unsigned char newer_fields[64];
  } call;
} decode_edge_case;

static aotk_decode_params *add_decode_edge_case(decode_edge_case *cases, int *count, const char *what,
                                                decode_shape shape) {
  decode_edge_case *c = &cases[(*count)++];
  memset(c, 0, sizeof *c);
  c->what = what;
  c->call.params = decode_params_for(shape);
  return &c->call.params;
}

static void test_decode_validation_accepts_edge_inputs(void) {
  install_fake_gpu(90, SHARED_SM90);
  static decode_edge_case cases[64];
  int count = 0;
  decode_shape s = default_decode_shape;
  s.seqlen_q = 16;
  add_decode_edge_case(cases, &count, "seqlen_q 16 (the most)", s);
  s = default_decode_shape;
  s.seqlen_q = 1, s.batch = 1, s.heads_q = s.heads_kv = 1;
  add_decode_edge_case(cases, &count, "one token, one request, one head", s);
  s = default_decode_shape;
  s.heads_kv = 1;
  add_decode_edge_case(cases, &count, "MQA (heads_kv 1)", s);
  s = default_decode_shape;
  s.capacity = 1;
  add_decode_edge_case(cases, &count, "a cache of one key", s);
  s = default_decode_shape;
  s.head_dim_qk = s.head_dim_v = 16;
  add_decode_edge_case(cases, &count, "head dims 16 (padded to 32)", s);
  s.head_dim_qk = s.head_dim_v = 256;
  add_decode_edge_case(cases, &count, "head dims 256", s);
  s.head_dim_qk = 256, s.head_dim_v = 128;
  add_decode_edge_case(cases, &count, "head dims (256, 128)", s);
  s.head_dim_qk = 192, s.head_dim_v = 64;
  add_decode_edge_case(cases, &count, "head dims (192, 64), padded to (256, 128)", s);
  s = default_decode_shape;
  s.dtype = AOTK_DTYPE_FLOAT16, s.with_lse = false;
  memset(&add_decode_edge_case(cases, &count, "float16, no lse (its other fields garbage)", s)->lse, 0xEE,
         sizeof(aotk_tensor));
  cases[count - 1].call.params.lse.data = NULL;
  s = default_paged_shape;
  s.page_size = 1, s.capacity = 1000, s.num_pages = 5000;
  add_decode_edge_case(cases, &count, "paged, pages of one key", s);
  s.page_size = 1000, s.capacity = 3000, s.num_pages = 7;
  add_decode_edge_case(cases, &count, "paged, pages of 1000 keys (not a power of two)", s);
  s.page_size = 1, s.capacity = AOTK_DECODE_MAX_CAPACITY, s.num_pages = 8;
  aotk_decode_params *p = add_decode_edge_case(cases, &count, "paged, 2^30 pages of one key (the largest)", s);
  p->block_table.strides[0] = 0;
  p = add_decode_edge_case(cases, &count, "contiguous, caches broadcast over the batch", default_decode_shape);
  p->k_cache.strides[0] = p->v_cache.strides[0] = 0;
  p = add_decode_edge_case(cases, &count, "out stride 0 on dimensions of size 1", default_decode_shape);
  p->out = aotk_tensor_4d(FAKE_OUT, AOTK_DTYPE_BFLOAT16, 3, 2, 8, 128);
  p->q.shape[1] = p->out.shape[1] = p->lse.shape[2] = 1, p->out.strides[1] = 0;
  p = add_decode_edge_case(cases, &count, "causal, window_left 100, window_right 0", default_decode_shape);
  p->causal = 1, p->window_left = 100, p->window_right = 0;
  p = add_decode_edge_case(cases, &count, "window_left 0, window_right 0", default_decode_shape);
  p->window_left = 0, p->window_right = 0;
  add_decode_edge_case(cases, &count, "softmax_scale -0.0 (zero: the default)", default_decode_shape)->softmax_scale =
      -0.0f;
  p = add_decode_edge_case(cases, &count, "softcap, ALiBi per request, sinks, explicit scale", default_decode_shape);
  dec_alibi_per_batch(p), dec_sinks(p), p->softcap = 50.0f, p->softmax_scale = 0.01f;
  add_decode_edge_case(cases, &count, "num_splits 1", default_decode_shape)->num_splits = 1;
  add_decode_edge_case(cases, &count, "num_splits 256", default_decode_shape)->num_splits = AOTK_DECODE_MAX_SPLITS;
  add_decode_edge_case(cases, &count, "max_seqlen_k above the capacity", default_decode_shape)->max_seqlen_k =
      INT32_MAX;
  add_decode_edge_case(cases, &count, "max_seqlen_k 1", default_decode_shape)->max_seqlen_k = 1;
  add_decode_edge_case(cases, &count, "a struct_size larger than this header's (a newer caller)",
                       default_decode_shape)->struct_size = sizeof(aotk_decode_params) + 64;
  /* Left-padded caches; and a caller built against the header before cache_leftpad, whose struct ends there:
   * the memory after it (garbage here) is not read. */
  dec_leftpad(add_decode_edge_case(cases, &count, "cache_leftpad", default_decode_shape));
  p = add_decode_edge_case(cases, &count, "the struct_size before cache_leftpad, garbage after it",
                           default_decode_shape);
  p->struct_size = offsetof(aotk_decode_params, cache_leftpad);
  memset(&p->cache_leftpad, 0xEE, sizeof p->cache_leftpad);
  /* Appending. */
  s = default_decode_shape;
  add_new_kv(add_decode_edge_case(cases, &count, "appending one token", s), &s, 1);
  s.seqlen_q = 1;
  add_new_kv(add_decode_edge_case(cases, &count, "appending 16 tokens for one query token", s), &s, 16);
  s = default_decode_shape;
  s.capacity = 10;
  add_new_kv(add_decode_edge_case(cases, &count, "appending 50 tokens to a cache of 10 keys (the rest dropped)", s),
             &s, 50);
  s = default_decode_shape;
  s.batch = 1, s.seqlen_q = 1, s.heads_q = s.heads_kv = 1, s.capacity = 1;
  add_new_kv(add_decode_edge_case(cases, &count, "appending one token to a cache of one key", s), &s, 1);
  s = default_decode_shape;
  s.head_dim_qk = 192, s.head_dim_v = 64;
  add_new_kv(add_decode_edge_case(cases, &count, "appending, head dims (192, 64)", s), &s, 2);
  s = default_paged_shape;
  add_new_kv(add_decode_edge_case(cases, &count, "appending to a paged cache", s), &s, 5);
  s.page_size = 1, s.capacity = 1000, s.num_pages = 5000;
  add_new_kv(add_decode_edge_case(cases, &count, "appending to pages of one key", s), &s, 16);
  s = default_decode_shape;
  p = add_decode_edge_case(cases, &count, "appending k_new and v_new broadcast (strides 0)", s);
  add_new_kv(p, &s, 4);
  memset(p->k_new.strides, 0, 3 * sizeof p->k_new.strides[0]);
  memset(p->v_new.strides, 0, 3 * sizeof p->v_new.strides[0]);
  p = add_decode_edge_case(cases, &count, "appending with 4 splits", s);
  add_new_kv(p, &s, 2);
  p->num_splits = 4;
  p = add_decode_edge_case(cases, &count, "appending, float16, every feature", s);
  dec_alibi_per_batch(p), dec_sinks(p), p->softcap = 50.0f, p->causal = 1, p->window_left = 7;
  p->q.dtype = p->k_cache.dtype = p->v_cache.dtype = p->out.dtype = AOTK_DTYPE_FLOAT16;
  add_new_kv(p, &s, 3);
  p->k_new.dtype = p->v_new.dtype = AOTK_DTYPE_FLOAT16;
  /* Not appending: k_new and v_new NULL, whatever their other fields hold. */
  p = add_decode_edge_case(cases, &count, "k_new and v_new NULL, their other fields garbage", s);
  memset(&p->k_new, 0xEE, sizeof p->k_new);
  memset(&p->v_new, 0x5A, sizeof p->v_new);
  p->k_new.data = p->v_new.data = NULL;
  /* Packed queries (cu_seqlens_q). */
  add_decode_edge_case(cases, &count, "varlen, 100 tokens, at most 40", default_varlen_shape);
  add_decode_edge_case(cases, &count, "varlen, paged", default_varlen_paged_shape);
  s = default_varlen_shape;
  s.seqlen_q = 5000, s.total_q = 12000;
  add_decode_edge_case(cases, &count, "varlen, max_seqlen_q 5000 (no 16-token limit)", s);
  s = default_varlen_shape;
  s.seqlen_q = 1, s.total_q = 1, s.batch = 1, s.heads_q = s.heads_kv = 1;
  add_decode_edge_case(cases, &count, "varlen, one request of one token, one head", s);
  s.seqlen_q = INT32_MAX;
  add_decode_edge_case(cases, &count, "varlen, max_seqlen_q 2^31 - 1, one head (2^31 - 1 query rows)", s);
  s = default_varlen_shape;
  s.seqlen_q = 1;
  add_decode_edge_case(cases, &count, "varlen, max_seqlen_q 1 below total_q / batch (tokens cut)", s);
  add_decode_edge_case(cases, &count, "varlen, num_splits 1", default_varlen_shape)->num_splits = 1;
  add_decode_edge_case(cases, &count, "varlen, max_seqlen_k 300", default_varlen_shape)->max_seqlen_k = 300;
  s = default_varlen_shape;
  s.dtype = AOTK_DTYPE_FLOAT16, s.with_lse = false, s.head_dim_qk = 192, s.head_dim_v = 64;
  p = add_decode_edge_case(cases, &count, "varlen, fp16, no lse, head dims (192, 64), every feature", s);
  dec_alibi_per_batch(p), dec_sinks(p), p->softcap = 50.0f, p->causal = 1, p->window_left = 7;
  p = add_decode_edge_case(cases, &count, "varlen, out stride 0 over one head", default_varlen_shape);
  p->q.shape[1] = p->out.shape[1] = p->lse.shape[0] = 1, p->out.strides[1] = 0;
  p->k_cache.shape[2] = p->v_cache.shape[2] = 1;
  p = add_decode_edge_case(cases, &count, "varlen, q broadcast over tokens (stride 0)", default_varlen_shape);
  p->q.strides[0] = 0;
  p = add_decode_edge_case(cases, &count, "varlen, k_new and v_new NULL, their other fields garbage",
                           default_varlen_shape);
  memset(&p->k_new, 0xEE, sizeof p->k_new);
  memset(&p->v_new, 0x5A, sizeof p->v_new);
  p->k_new.data = p->v_new.data = NULL;
  /* Dense: max_seqlen_q is read only with cu_seqlens_q, and cu_seqlens_q's other fields without its data. */
  add_decode_edge_case(cases, &count, "dense, max_seqlen_q -5 (unread)", default_decode_shape)->max_seqlen_q = -5;
  p = add_decode_edge_case(cases, &count, "dense, cu_seqlens_q.data NULL, its other fields garbage",
                           default_decode_shape);
  memset(&p->cu_seqlens_q, 0xEE, sizeof p->cu_seqlens_q);
  p->cu_seqlens_q.data = NULL;

  for (int i = 0; i < count; i++) {
    const aotk_decode_params *params = &cases[i].call.params;
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_decode_query %s (%s)", cases[i].what, aotk_status_name(status),
              aotk_last_error());
    const int launches = expected_decode_launches(params, &info);
    CHECK_MSG(info.launches == launches && (info.workspace_bytes > 0) == (info.num_splits > 1) &&
                  ((info.features & AOTK_FEATURE_APPEND_KV) != 0) == (params->k_new.data != NULL) &&
                  ((info.features & AOTK_FEATURE_VARLEN) != 0) == (params->cu_seqlens_q.data != NULL) &&
                  ((info.features & AOTK_FEATURE_LEFTPAD_KV) != 0) ==
                      (params->struct_size > offsetof(aotk_decode_params, cache_leftpad) &&
                       params->cache_leftpad.data != NULL),
              "%s: %d launches, %d splits, %zu bytes of workspace, features %#x", cases[i].what, info.launches,
              info.num_splits, info.workspace_bytes, info.features);
    reset_calls();
    void *workspace = info.workspace_bytes > 0 ? FAKE_WORKSPACE : NULL;
    status = aotk_attn_decode(params, workspace, info.workspace_bytes, FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_decode %s (%s)", cases[i].what, aotk_status_name(status),
              aotk_last_error());
    CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == info.launches, "%s: %d launches, the query says %d", cases[i].what,
              fake.calls[CALL_cuLaunchKernel], info.launches);
  }
  printf("    %d cases\n", count);
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_decode_validation_rejects_bad_inputs);
  RUN_TEST(test_decode_validation_overflow);
  RUN_TEST(test_decode_validation_accepts_edge_inputs);
  aotk__driver_set_for_testing(NULL);
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);
  return aotk_test_finish();
}
