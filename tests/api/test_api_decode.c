/*
 * CPU tests of the public API, decoding (0.4): packed queries, the split-KV choice on the fake's SM count,
 * the cache-layout family each call takes, and the launches (append, decode, merge) with their grids
 * and packed arguments, contiguous and paged, on sm_90, sm_80, sm_86 and sm_120, with the features. The
 * query's arguments, the split's workspace and load and launch faults are test_api_decode_query.c; the
 * models both use, api_decode_checks.h.
 * The fake driver and the shared models are tests/api/api_*.h; see api_fake_driver.h.
 */
#include <math.h>

#include "api_decode_checks.h"

/* ---- decoding: the split, its workspace, the query ---- */

/* The split choice, through aotk_decode_query on the fake's 132 SMs, worked by hand from the rule in
 * src/decode/aotk_decode.c's comment (flash-attn's num_splits_heuristic): split only when batch * heads_kv *
 * row chunks programs are fewer than 4/5 of the SMs; the efficiency of n splits is programs * n over the
 * SMs of the waves they take; take the smallest n within 85% of the best; each split keeps at least 256
 * keys (and at most 256 splits). Split lengths are whole key blocks (block_n: 128 keys for these head
 * dims of 128, whatever the row tile), so the count is then what ceil(keys / split_keys) gives. A forced
 * num_splits skips the rule but not the blocks. */
static void test_decode_split_choice(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const struct {
    const char *what;
    int64_t batch, heads_q, heads_kv, seqlen_q, capacity, page_size;
    int32_t num_splits, max_seqlen_k;
    int64_t splits, split_keys; /* split_keys 0: one split */
  } cases[] = {
      {"64 requests x 8 kv heads = 512 programs fill 132 SMs: no split", 64, 32, 8, 1, 32768, 0, 0, 0, 1, 0},
      {"105 programs (132 x 4/5): no split", 105, 4, 1, 1, 32768, 0, 0, 0, 1, 0},
      {"104 programs: 5 splits (520 in 4 waves, 98.5%; 1 to 4 give 79%; the best, 99.9%, at 52) of ceil(32768 / 5) = "
       "6554 keys, 6656 in whole blocks", 13, 32, 8, 1, 32768, 0, 0, 0, 5, 6656},
      {"1 request x 8 kv heads, 32768 keys: 16 splits of 2048 keys (128 of 132 SMs, 97%, the best; 15 give 91%, under "
       "95% of it)", 1, 32, 8, 1, 32768, 0, 0, 0, 16, 2048},
      {"the comment's example, 2 requests x 8 kv heads: 8 splits (128 programs, 97%)", 2, 16, 8, 1, 65536, 0, 0, 0, 8,
       8192},
      {"a group of 128 x 16 tokens is 32 row chunks of 64: 32 programs, 4 splits (97%)", 1, 128, 1, 16, 32768, 0, 0,
       0, 4, 8192},
      {"200 keys: fewer than two splits of 128", 1, 32, 8, 1, 200, 0, 0, 0, 1, 0},
      {"255 keys: two splits would hold fewer than 128 each", 1, 32, 8, 1, 255, 0, 0, 0, 1, 0},
      /* From here to 8192 keys the 16-row tile's split (at least 128 keys each, one program per SM) takes the
       * short-split tile: splits of at least 64 keys in 64-key blocks, two program slots per SM (264). */
      {"256 keys: the short-split tile's 4 splits of 64 (the wide tile would take 2 of 128)", 1, 32, 8, 1, 256, 0, 0,
       0, 4, 64},
      {"300 keys: 3 splits of 128 (4 asked give 75 keys, 128 in whole blocks of 64: 3; the wide tile, 2 of 256)", 1,
       32, 8, 1, 300, 0, 0, 0, 3, 128},
      {"1024 keys, 16 programs: 16 splits of 64 (256 programs in 264 slots, 97%; the wide tile, 8 of 128)", 2, 32, 8,
       1, 1024, 0, 0, 0, 16, 64},
      {"max_seqlen_k 255 bounds a 32768-key cache: no split", 1, 32, 8, 1, 32768, 0, 0, 255, 1, 0},
      {"max_seqlen_k 4096: the short-split tile's 32 splits of 128 (256 programs in 264 slots, 97%; the wide tile "
       "would take 16 of 256)", 1, 32, 8, 1, 32768, 0, 0, 4096, 32, 128},
      {"max_seqlen_k 8192, the longest the short-split tile splits: 32 of 256", 1, 32, 8, 1, 32768, 0, 0, 8192, 32,
       256},
      {"max_seqlen_k 8193: the wide tile's rule, 33 splits of 256 (264 programs, two whole waves; 16 of 513 keys "
       "round to 13 of 640, 79%)", 1, 32, 8, 1, 32768, 0, 0, 8193, 33, 256},
      {"4 requests x 8 kv heads at 1024 keys: 8 splits of 128 (256 programs; the wide tile, 4 of 256)", 4, 32, 8, 1,
       1024, 0, 0, 0, 8, 128},
      {"a group of 32 rows (MQA) keeps its tile: 8 splits of 128 at 1024 keys", 1, 32, 1, 1, 1024, 0, 0, 0, 8, 128},
      {"MQA, 64 requests at 4096 keys: the 32-row tile's 2 splits of 2048 (64 programs; 2 give 97%), not the 16-row "
       "tile in two row chunks (128 programs unsplit, which measured slower on the H200)", 64, 32, 1, 1, 4096, 0, 0, 0,
       2, 2048},
      {"max_seqlen_k above the capacity: the capacity", 1, 32, 8, 1, 32768, 0, 0, 100000, 16, 2048},
      {"forced 64 splits of 200 keys: one 128-key block each, 2", 1, 32, 8, 1, 200, 0, 64, 0, 2, 128},
      {"forced 256 splits of 32768 keys: 128 keys each", 1, 32, 8, 1, 32768, 0, 256, 0, 256, 128},
      {"forced 7 splits of 1000 keys: 143 keys, 256 in whole blocks, so 4", 3, 8, 2, 2, 1000, 0, 7, 0, 4, 256},
      {"forced 3 splits of 1000 keys: 384 keys each", 3, 8, 2, 2, 1000, 0, 3, 0, 3, 384},
      {"forced 1 split where the rule would take 16", 1, 32, 8, 1, 32768, 0, 1, 0, 1, 0},
      {"forced 2 splits of 64 keys: one block, one split", 1, 32, 8, 1, 64, 0, 2, 0, 1, 0},
      {"paged, 2048 pages of 16 keys: as the contiguous 32768", 1, 32, 8, 1, 32768, 16, 0, 0, 16, 2048},
      {"paged, 128 pages of 256 keys (whole blocks, one lookup each): as the contiguous 32768", 1, 32, 8, 1, 32768,
       256, 0, 0, 16, 2048},
      {"paged, 64 pages of 100 keys (6400, per-row lookups): the short-split tile, 100 splits of 64 allowed; 25 of 256 "
       "are the best (200 programs in 264 slots, 76%; the wide tile, 13 of 512)", 1, 32, 8, 1, 6400, 100, 0, 0, 25,
       256},
      {"paged, 64 pages of 128 keys (whole blocks of both tiles): 32 splits of 256 as contiguous", 1, 32, 8, 1, 8192,
       128, 0, 0, 32, 256},
      {"paged, 64 pages of 64 keys (a lookup per key row for the wide tile): the short-split tile's 32 splits of 128, "
       "one lookup per block", 1, 32, 8, 1, 4096, 64, 0, 0, 32, 128},
      {"paged, 64 requests x 8 kv heads over 64 pages of 16 keys: 512 programs, unsplit, on the paged families' "
       "2-stage row", 64, 32, 8, 1, 1024, 16, 0, 0, 1, 0},
      {"paged, 64 requests x 8 kv heads over 4 pages of 256 keys: 512 programs, unsplit, on the 2-stage row of "
       "the one-lookup-a-block family", 64, 32, 8, 1, 1024, 256, 0, 0, 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    decode_shape s = {AOTK_DTYPE_BFLOAT16, cases[i].batch, cases[i].seqlen_q, cases[i].heads_q, cases[i].heads_kv,
                      128, 128, cases[i].capacity, cases[i].page_size, 0, true, 0};
    if (s.page_size > 0) s.num_pages = s.capacity / s.page_size;
    aotk_decode_params params = decode_params_for(s);
    params.num_splits = cases[i].num_splits, params.max_seqlen_k = cases[i].max_seqlen_k;
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(info.num_splits == cases[i].splits, "%s: %d splits, expected %lld", cases[i].what, info.num_splits,
              (long long)cases[i].splits);
    const size_t bytes = decode_workspace_bytes(&s, cases[i].splits);
    CHECK_MSG(info.workspace_bytes == bytes, "%s: workspace_bytes %zu, expected %zu", cases[i].what,
              info.workspace_bytes, bytes);
    CHECK_MSG(((info.features & AOTK_FEATURE_SPLIT_KV) != 0) == (cases[i].splits > 1) &&
                  info.launches == (cases[i].splits > 1 ? 2 : 1),
              "%s: features %#x, %d launches", cases[i].what, info.features, info.launches);
    char what[200];
    snprintf(what, sizeof what, "split choice: %s", cases[i].what);
    check_decode(what, &params, &s, &sel_sm90, cases[i].splits, cases[i].split_keys,
                 FAKE_WORKSPACE);
    /* The split depends on sizes the host sees, not on the new tokens: appending keeps it (and the
     * workspace), one launch more. */
    add_new_kv(&params, &s, 1 + (int64_t)i % 5);
    snprintf(what, sizeof what, "split choice, appending %lld tokens: %s", 1 + (long long)i % 5, cases[i].what);
    check_decode(what, &params, &s, &sel_sm90, cases[i].splits, cases[i].split_keys, FAKE_WORKSPACE);
  }
  /* The workspace formula's two parts, by hand: 15 splits x 1 request x 1 token x 32 heads = 480 rows of
   * 128 floats (245760 bytes) and 480 LSEs (1920 bytes). */
  decode_shape s = {AOTK_DTYPE_BFLOAT16, 1, 1, 32, 8, 128, 128, 32768, 0, 0, true, 0};
  CHECK(decode_workspace_bytes(&s, 15) == 245760 + 1920);
  /* head_dim_v 72 pads partial rows to 80 floats: with 11 splits, 11 x 1 x 3 x 5 = 165 rows of them (52800
   * bytes), and 165 LSEs (660 bytes) pad to 672. The rule's split for it: one program (a group of 5 x 3
   * tokens in one 16-row chunk), 4096 keys: the short-split tile's 64 splits of 64 keys (the most it allows;
   * the wide tile would take 32 of 128, 480 rows, 153600 + 1920 bytes). */
  s = (decode_shape){AOTK_DTYPE_FLOAT16, 1, 3, 5, 1, 64, 72, 4096, 0, 0, true, 0};
  CHECK(decode_workspace_bytes(&s, 11) == 52800 + 672);
  CHECK(decode_workspace_bytes(&s, 32) == 153600 + 1920);
  aotk_decode_params params = strided_decode_params(s);
  check_decode("head dims (64, 72), 3 tokens of a group of 5", &params, &s, &sel_sm90, 64, 64,
               FAKE_WORKSPACE);
  uninstall_fake_gpu();
}

/* ---- decoding: what runs, and with which arguments ---- */

static void test_decode_launch_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  decode_shape s = default_decode_shape;
  aotk_decode_params params = strided_decode_params(s);
  params.num_splits = 1;
  check_decode("contiguous, bf16 d128 GQA 4, two tokens, strided, no split", &params, &s, &sel_sm90, 1, 0, NULL);
  CHECK_MSG(fake.loaded_images == 1, "loaded %d images", fake.loaded_images);
  params.num_splits = 3;
  check_decode("contiguous, 3 splits of 384 keys", &params, &s, &sel_sm90, 3, 384, FAKE_WORKSPACE);
  CHECK_MSG(fake.loaded_images == 2, "loaded %d images, expected the decoding kernel and the merge",
            fake.loaded_images);
  /* The rule's own choice for 6 programs and 1000 keys: the wide tile would split (4 of 256), so the
   * short-split tile takes it: 8 splits of 128 (15 of 64 allowed; 8 to 15 asked all round to 128-key
   * splits, 8 of them, 48 programs; 6 or 7 would be 192 keys each). */
  params.num_splits = 0;
  check_decode("contiguous, the rule's split", &params, &s, &sel_sm90, 8, 128, byte_offset(FAKE_WORKSPACE, 4096));
  /* The 3 forced splits' merge read a partial a step; 8 partials of 48 rows (a grid of 24 programs for
   * that kernel) take the wide one; the decoding kernel is the short-split tile: two images, loaded now. */
  CHECK_MSG(fake.loaded_images == 4 && fake.calls[CALL_cuLibraryLoadData] == 2, "loaded %d images, %d now",
            fake.loaded_images, fake.calls[CALL_cuLibraryLoadData]);

  s = default_paged_shape;
  params = strided_decode_params(s);
  params.num_splits = 1;
  check_decode("paged, 64 pages of 16 keys, strided, no split", &params, &s, &sel_sm90, 1, 0, NULL);
  params.num_splits = 4;
  check_decode("paged, 4 splits of 256 keys", &params, &s, &sel_sm90, 4, 256, FAKE_WORKSPACE);

  /* Every run-time feature at once, float16, no lse, ALiBi per request with padded rows. */
  s.dtype = AOTK_DTYPE_FLOAT16, s.with_lse = false;
  params = strided_decode_params(s);
  params.causal = 1, params.window_left = 40, params.softcap = 30.0f, params.softmax_scale = 0.05f;
  params.alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 3, 8);
  params.alibi_slopes.strides[0] = 16;
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 8);
  params.num_splits = 2;
  check_decode("paged, fp16, causal, window, softcap, ALiBi, sinks, no lse, 2 splits", &params, &s, &sel_sm90, 2, 512,
               FAKE_WORKSPACE);
  params.num_splits = 1, params.causal = 0, params.window_left = -1, params.window_right = 7;
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 8);
  check_decode("paged, fp16, window_right 7, ALiBi per head, sinks, no split", &params, &s, &sel_sm90, 1, 0, NULL);
  /* cache_leftpad: its pointer and FLAG_LEFTPAD; nothing else changes. */
  params.cache_leftpad = aotk_tensor_1d(FAKE_CACHE_LEFTPAD, AOTK_DTYPE_INT32, s.batch);
  check_decode("paged, fp16, cache_leftpad, no split", &params, &s, &sel_sm90, 1, 0, NULL);
  params.num_splits = 2;
  check_decode("paged, fp16, cache_leftpad, 2 splits", &params, &s, &sel_sm90, 2, 512, FAKE_WORKSPACE);
  params.struct_size = offsetof(aotk_decode_params, cache_leftpad); /* an older caller: the field unread */
  check_decode("paged, fp16, the struct_size before cache_leftpad, the field past it", &params, &s, &sel_sm90, 2, 512, FAKE_WORKSPACE);

  /* MQA, a group of 32 query heads x 4 tokens = 128 rows: the 64-row tile, two chunks per request. */
  s = (decode_shape){AOTK_DTYPE_BFLOAT16, 2, 4, 32, 1, 64, 64, 4096, 0, 0, true, 0};
  params = strided_decode_params(s);
  params.num_splits = 5;
  check_decode("MQA, 128 rows in two 64-row chunks, d64, 5 splits", &params, &s, &sel_sm90, 5, 832, FAKE_WORKSPACE);
  uninstall_fake_gpu();

  /* Appending: the appending kernel first, then the decoding kernel (told seqlen_new), then the merge. */
  install_fake_gpu(90, SHARED_SM90);
  s = default_decode_shape;
  params = strided_decode_params(s);
  add_strided_new_kv(&params, &s, 3);
  params.num_splits = 1;
  check_decode("appending 3 tokens, contiguous, strided, no split", &params, &s, &sel_sm90, 1, 0, NULL);
  CHECK_MSG(fake.loaded_images == 1, "loaded %d images, expected the decoding kernel alone (it appends itself)",
            fake.loaded_images);
  params.num_splits = 3;
  check_decode("appending 3 tokens, contiguous, 3 splits", &params, &s, &sel_sm90, 3, 384, FAKE_WORKSPACE);
  CHECK_MSG(fake.loaded_images == 2, "loaded %d images, expected the merge too", fake.loaded_images);
  add_strided_new_kv(&params, &s, 17);
  check_decode("appending 17 tokens, contiguous, strided, 3 splits", &params, &s, &sel_sm90, 3, 384, FAKE_WORKSPACE);
  CHECK_MSG(fake.loaded_images == 3, "loaded %d images, expected the appending kernel too (17 new tokens)",
            fake.loaded_images);
  add_new_kv(&params, &s, 1);
  check_decode("appending one token, contiguous (k_new and v_new contiguous), 3 splits", &params, &s, &sel_sm90, 3,
               384, FAKE_WORKSPACE);
  s = default_paged_shape;
  params = strided_decode_params(s);
  add_strided_new_kv(&params, &s, 7);
  params.num_splits = 1;
  check_decode("appending 7 tokens, paged, strided, no split", &params, &s, &sel_sm90, 1, 0, NULL);
  params.num_splits = 4;
  check_decode("appending 7 tokens, paged, 4 splits", &params, &s, &sel_sm90, 4, 256, FAKE_WORKSPACE);
  /* Head dims (192, 64) in the (256, 128) pair, fp16, every feature, no lse, 2 splits. */
  s = (decode_shape){AOTK_DTYPE_FLOAT16, 2, 1, 6, 3, 192, 64, 640, 0, 0, false, 0};
  params = strided_decode_params(s);
  add_strided_new_kv(&params, &s, 16);
  params.causal = 1, params.window_left = 40, params.softcap = 30.0f;
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 6);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 6);
  params.num_splits = 2;
  check_decode("appending 16 tokens, fp16, head dims (192, 64), every feature, 2 splits", &params, &s, &sel_sm90, 2,
               320, FAKE_WORKSPACE);
  uninstall_fake_gpu();

  /* The other targets: sm_80 cubins on sm_80 and sm_86, the sm_80 PTX on sm_120. */
  static const gpu gpus[] = {{80, SHARED_SM80, 80, 0}, {86, SHARED_SM86, 80, 0}, {120, SHARED_SM120, 80, 1}};
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    char what[64];
    snprintf(what, sizeof what, "cc %d, paged, 4 splits", gpus[g].compute_capability);
    s = default_paged_shape;
    params = strided_decode_params(s);
    params.num_splits = 4;
    check_decode(what, &params, &s, &gpus[g], 4, 256, FAKE_WORKSPACE);
    CHECK_MSG(gpus[g].from_ptx ? fake.loaded_ptx == 2 : fake.loaded_elf == 2, "%s: loaded %d ELF, %d PTX", what,
              fake.loaded_elf, fake.loaded_ptx);
    snprintf(what, sizeof what, "cc %d, paged, appending, 4 splits", gpus[g].compute_capability);
    add_strided_new_kv(&params, &s, 2);
    check_decode(what, &params, &s, &gpus[g], 4, 256, FAKE_WORKSPACE);
    CHECK_MSG(gpus[g].from_ptx ? fake.loaded_ptx == 3 : fake.loaded_elf == 3, "%s: loaded %d ELF, %d PTX", what,
              fake.loaded_elf, fake.loaded_ptx);
  }
  uninstall_fake_gpu();
}

/* Packed queries (include/aotk.h, cu_seqlens_q): a prefill over the cache, the tile chosen by G *
 * max_seqlen_q (the 32-row one above 16 rows, the 64-row one above 32), on a grid of batch * heads_kv *
 * ceil(G * max_seqlen_q / block_m) times the splits; check_decode checks the packed strides, the
 * CuSeqlensQ pointer and FLAG_VARLEN, and after a split the merge's packed rows. The table runs unsplit
 * (num_splits 1: one launch, no workspace); the split choice, as for dense queries, is worked by hand
 * below. The literals are worked by hand. */
static void test_decode_varlen(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const struct {
    const char *what;
    int64_t batch, max_seqlen_q, heads_q, heads_kv, total_q, page_size;
    int32_t block_m;
    int64_t grid;
  } cases[] = {
      {"G 4 x 40 tokens = 160 rows: three 64-row chunks x 3 requests x 2 kv heads", 3, 40, 8, 2, 100, 0, 64, 18},
      {"the same over 64 pages of 16 keys", 3, 40, 8, 2, 100, 16, 64, 18},
      {"G 4 x 4 tokens = 16 rows: one 16-row chunk", 3, 4, 8, 2, 10, 0, 16, 6},
      {"G 1 x 16 tokens = 16 rows: the 16-row tile", 2, 16, 4, 4, 20, 0, 16, 8},
      {"G 1 x 17 tokens = 17 rows: the 32-row tile (dense refuses 17 tokens)", 2, 17, 4, 4, 20, 0, 32, 8},
      {"G 8 x 3 tokens = 24 rows: the 32-row tile", 1, 3, 8, 1, 3, 0, 32, 1},
      {"G 11 x 3 tokens = 33 rows: the 64-row tile", 1, 3, 11, 1, 3, 0, 64, 1},
      {"G 4 x 8 tokens = 32 rows over 4 pages of 256 keys: the 32-row tile", 3, 8, 8, 2, 20, 256, 32, 6},
      {"MQA, G 32 x 5000 tokens: 2500 chunks x 2 requests", 2, 5000, 32, 1, 9000, 0, 64, 5000},
      {"paged, 5000 tokens, G 1: 79 chunks x 4 requests x 8 kv heads", 4, 5000, 8, 8, 12345, 16, 64, 2528},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    decode_shape s = cases[i].page_size > 0 ? default_varlen_paged_shape : default_varlen_shape;
    if (s.page_size > 0) s.page_size = cases[i].page_size; /* a pool of 200 pages, whatever their size */
    s.batch = cases[i].batch, s.seqlen_q = cases[i].max_seqlen_q, s.heads_q = cases[i].heads_q;
    s.heads_kv = cases[i].heads_kv, s.total_q = cases[i].total_q;
    aotk_decode_params params = strided_decode_params(s);
    params.num_splits = 1;
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(info.block_m == cases[i].block_m && info.grid == cases[i].grid && info.num_splits == 1 &&
                  info.launches == 1 && info.workspace_bytes == 0 && (info.features & AOTK_FEATURE_VARLEN) != 0,
              "%s: block_m %d, grid %lld, %d splits, %d launches, %zu bytes, features %#x", cases[i].what,
              info.block_m, (long long)info.grid, info.num_splits, info.launches, info.workspace_bytes,
              info.features);
    char what[200];
    snprintf(what, sizeof what, "varlen, num_splits 1: %s", cases[i].what);
    check_decode(what, &params, &s, &sel_sm90, 1, 0, NULL);
  }

  /* The automatic split of packed calls (num_splits 0), by the dense rule (choose_splits, worked as in
   * test_decode_split_choice): 3 requests x 2 kv heads x 3 row chunks of the 64-row tile (64 keys a
   * step) = 18 programs over 1000 keys: n = 6 asks ceil(1000 / 6) = 167 keys, 192 in whole blocks, which
   * is 6 splits and 108 programs (81.8% of 132 SMs; n = 7 gives the same 6; 1 to 5 at most 54.5%), and
   * over 1024 keys in 16-key pages the same 6 of 192. The merge then writes the packed rows. */
  {
    decode_shape s = default_varlen_shape;
    aotk_decode_params params = strided_decode_params(s);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK && info.num_splits == 6 && info.grid == 108 &&
          info.launches == 2);
    check_decode("varlen, the rule's split: 6 of 192 keys", &params, &s, &sel_sm90, 6, 192, FAKE_WORKSPACE);
    s = default_varlen_paged_shape;
    params = strided_decode_params(s);
    check_decode("varlen, paged, the rule's split: 6 of 192 keys", &params, &s, &sel_sm90, 6, 192, FAKE_WORKSPACE);
    /* A split asked for: 3 of ceil(1000 / 3) = 334, 384 in whole blocks. */
    s = default_varlen_shape;
    params = strided_decode_params(s);
    params.num_splits = 3;
    check_decode("varlen, 3 splits asked: 3 of 384 keys", &params, &s, &sel_sm90, 3, 384,
                 byte_offset(FAKE_WORKSPACE, 4096));
  }

  /* One token a request, where the dense call splits 1 request x 8 kv heads over 32768 keys 16 ways: the
   * packed one too (the 16-row tile's 128 keys a step: 16 splits of 2048 keys, 128 programs, 97%; 15
   * give 120, 90.9%, under 95% of the best), its merge writing the one packed row. */
  decode_shape s = {AOTK_DTYPE_BFLOAT16, 1, 1, 32, 8, 128, 128, 32768, 0, 0, true, 0};
  aotk_decode_params params = decode_params_for(s);
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_decode_query(AOTK_OP_DECODE, &params, &info) == AOTK_OK && info.num_splits == 16);
  s.total_q = 1;
  params = decode_params_for(s);
  check_decode("varlen, one token: 16 splits of 2048 keys", &params, &s, &sel_sm90, 16, 2048, FAKE_WORKSPACE);

  /* Every run-time feature at once, float16, no lse, ALiBi per request, head dims (192, 64). */
  s = default_varlen_paged_shape;
  s.dtype = AOTK_DTYPE_FLOAT16, s.with_lse = false, s.head_dim_qk = 192, s.head_dim_v = 64;
  params = strided_decode_params(s);
  params.causal = 1, params.window_left = 40, params.softcap = 30.0f, params.softmax_scale = 0.05f;
  params.alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 3, 8);
  params.alibi_slopes.strides[0] = 16;
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 8);
  /* (Split as above: 18 programs of the 64-row tile over 1024 keys, 6 splits of 192; the sinks join in
   * the merge.) */
  check_decode("varlen, paged, fp16, (192, 64), causal, window, softcap, ALiBi, sinks, no lse, 6 splits", &params,
               &s, &sel_sm90, 6, 192, FAKE_WORKSPACE);

  /* max_seqlen_q 5000 is a prefill chunk; the same 5000 or even 17 tokens dense are refused. */
  s = default_varlen_shape;
  s.seqlen_q = 5000, s.total_q = 12000;
  params = decode_params_for(s);
  info = (aotk_kernel_info)AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
  CHECK_MSG(status == AOTK_OK && info.grid == 3 * 2 * 313, "max_seqlen_q 5000: %s (%s), grid %lld",
            aotk_status_name(status), aotk_last_error(), (long long)info.grid);
  static const int64_t dense_tokens[] = {17, 5000};
  for (size_t i = 0; i < sizeof dense_tokens / sizeof dense_tokens[0]; i++) {
    s = default_decode_shape;
    s.seqlen_q = dense_tokens[i];
    params = decode_params_for(s);
    params.max_seqlen_q = (int32_t)dense_tokens[i]; /* unread without cu_seqlens_q */
    reset_calls();
    status = aotk_attn_decode(&params, NULL, 0, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE && message_mentions("cu_seqlens_q") && total_calls() == 0,
              "dense seqlen_q %lld: %s (%s)", (long long)dense_tokens[i], aotk_status_name(status), aotk_last_error());
  }
  /* Query rows past int32: 3 requests x 2^31 - 1 tokens x 8 heads. */
  s = default_varlen_shape;
  s.seqlen_q = INT32_MAX;
  params = decode_params_for(s);
  status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
  CHECK_MSG(status == AOTK_ERROR_SIZE_OVERFLOW && message_mentions("batch * seqlen_q * heads_q"),
            "varlen, max_seqlen_q 2^31 - 1 x 3 requests x 8 heads: %s (%s)", aotk_status_name(status),
            aotk_last_error());
  uninstall_fake_gpu();

  /* The other targets: sm_80 cubins on sm_80 and sm_86, the sm_80 PTX on sm_120. */
  static const gpu gpus[] = {{80, SHARED_SM80, 80, 0}, {86, SHARED_SM86, 80, 0}, {120, SHARED_SM120, 80, 1}};
  for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    char what[64];
    snprintf(what, sizeof what, "cc %d, varlen, paged", gpus[g].compute_capability);
    s = default_varlen_paged_shape;
    params = strided_decode_params(s);
    params.num_splits = 1; /* (unsplit: the target's image is what this checks) */
    check_decode(what, &params, &s, &gpus[g], 1, 0, NULL);
    CHECK_MSG(gpus[g].from_ptx ? fake.loaded_ptx == 1 : fake.loaded_elf == 1, "%s: loaded %d ELF, %d PTX", what,
              fake.loaded_elf, fake.loaded_ptx);
    uninstall_fake_gpu();
  }
}

/* The decoding family, as literals (src/decode/aotk_decode.c, plan_decode): a contiguous cache runs
 * attn_decode; a paged one runs attn_decode_paged_blocks (one page lookup per block of keys) when its
 * page size is a multiple of the chosen row's block_n (128 keys up to head dim 128, 64 at 256), else a
 * lookup per key row: attn_decode_paged32 where every element offset of both caches is below 2^31,
 * attn_decode_paged past that. The tile is chosen by G * seqlen_q: 16 rows up to 16, 32 up
 * to 32, then 64 (with 64-key blocks). check_decode then checks the launches, the split's merge too. */
static void test_decode_family_choice(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const struct {
    const char *what;
    int64_t heads_q, head_dim, page_size; /* 3 requests x 2 tokens, 2 kv heads, 1024 keys */
    int32_t num_splits;
    const char *family; /* the name's prefix, through the dtype */
    int32_t block_m, block_n;
    int64_t splits, split_keys;
  } cases[] = {
      {"contiguous, G 4 x 2 tokens", 8, 128, 0, 1, "attn_decode_bf16_", 16, 128, 1, 0},
      {"contiguous, 4 splits of 256 keys", 8, 128, 0, 4, "attn_decode_bf16_", 16, 128, 4, 256},
      {"pages of 16 keys: a lookup per key row, offsets in 32 bits", 8, 128, 16, 1, "attn_decode_paged32_bf16_", 16,
       128, 1, 0},
      {"pages of 64 keys hold half a 128-key block: a lookup per key row", 8, 128, 64, 1, "attn_decode_paged32_bf16_",
       16, 128, 1, 0},
      {"pages of 16 keys 2^24 elements apart: offsets past 2^31, the 64-bit lookup", 8, 128, -16, 1,
       "attn_decode_paged_bf16_", 16, 128, 1, 0},
      {"pages of 256 keys (two 128-key blocks): a lookup per block", 8, 128, 256, 1, "attn_decode_paged_blocks_bf16_",
       16, 128, 1, 0},
      {"pages of 256 keys, 4 splits of 256 keys", 8, 128, 256, 4, "attn_decode_paged_blocks_bf16_", 16, 128, 4, 256},
      {"pages of 128 keys, G 16 x 2 tokens = 32 rows: the 32-row tile", 32, 128, 128, 1,
       "attn_decode_paged_blocks_bf16_", 32, 128, 1, 0},
      {"pages of 128 keys, G 32 x 2 tokens = 64 rows: the 64-row tile of 64-key blocks", 64, 128, 128, 1,
       "attn_decode_paged_blocks_bf16_", 64, 64, 1, 0},
      {"head dim 256, pages of 64 keys (one 64-key block): a lookup per block", 8, 256, 64, 1,
       "attn_decode_paged_blocks_bf16_d256_", 16, 64, 1, 0},
      {"head dim 256, pages of 64 keys, 7 splits forced: 147 keys, 192 in whole 64-key blocks, so 6", 8, 256, 64, 7,
       "attn_decode_paged_blocks_bf16_d256_", 16, 64, 6, 192},
      {"head dim 256, pages of 16 keys: a lookup per key row", 8, 256, 16, 1, "attn_decode_paged32_bf16_d256_", 16,
       64, 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    decode_shape s = default_decode_shape;
    s.heads_q = cases[i].heads_q, s.head_dim_qk = s.head_dim_v = cases[i].head_dim, s.capacity = 1024;
    /* A negative page size: its magnitude, the pages 2^24 elements apart (the caches span more than 2^31). */
    const int64_t page_size = cases[i].page_size < 0 ? -cases[i].page_size : cases[i].page_size;
    if (page_size > 0) s.page_size = page_size, s.num_pages = 3 * 1024 / page_size;
    aotk_decode_params params = strided_decode_params(s);
    if (cases[i].page_size < 0) params.k_cache.strides[0] = params.v_cache.strides[0] = (int64_t)1 << 24;
    params.num_splits = cases[i].num_splits;
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    CHECK_MSG(strncmp(info.kernel_name, cases[i].family, strlen(cases[i].family)) == 0 &&
                  info.block_m == cases[i].block_m && info.block_n == cases[i].block_n &&
                  info.num_splits == cases[i].splits,
              "%s: %s (block %d x %d, %d splits), expected %s... (block %d x %d, %lld splits)", cases[i].what,
              info.kernel_name, info.block_m, info.block_n, info.num_splits, cases[i].family, cases[i].block_m,
              cases[i].block_n, (long long)cases[i].splits);
    char what[160];
    snprintf(what, sizeof what, "family choice: %s", cases[i].what);
    check_decode(what, &params, &s, &sel_sm90, cases[i].splits, cases[i].split_keys, FAKE_WORKSPACE);
  }
  uninstall_fake_gpu();
}

/* The sm_90 paged prefill (src/decode/aotk_decode.c, paged_prefill_row): packed queries of at least 64
 * tokens (or fewer where the decoding kernel would run its 64-row tile and the Gluon forward's tiles fit one
 * wave: paged_prefill_short) over pages of a power of two of at least 16 keys, head dims (64, 64),
 * (128, 128), (192, 128) or (256, 256), q and the caches readable by TMA (heads contiguous; softcap and
 * ALiBi in the EXTRAS rows), on sm_90 cubins, run the Gluon forward through the block table: one launch
 * of attn_fwd_hopper_paged on one program per SM (or per tile), its boxes 16 rows below 64-key pages and
 * 64 from them, the page size passed as its log2; where its tiles fill at most half the SMs, split into
 * min(132 / tiles, keys / 512) key ranges whose fp32 partials a second launch merges. Not where the
 * forward's tiles fit one wave and the decoding kernel's 64-row tiles (requests x kv heads x ceil(G x
 * max_seqlen_q / 64)) are few: at most half the forward's tiles where the forward splits, else under 0.4
 * of the SMs' count (under half from head dim 192): its split runs those (paged_prefill_split_wins),
 * unless num_splits 1 asks for no split. Everything else keeps the decoding kernel. (fuzz_api checks every
 * argument's reach; this, the rule.) The shape: 8 query heads over 2 (G 4), 3 requests unless said. */
static void test_decode_paged_prefill(void) {
  static const struct {
    const char *what;
    int arch;
    int64_t batch, max_seqlen_q, page_size, head_dim;
    int variation; /* 0: none; 1: softcap; 2: ALiBi; 3: q's heads not contiguous; 4: fp16 with sinks and leftpad;
                      5: a capacity of 2^30 keys; 6: num_splits 1 */
    const char *box;  /* NULL: not the paged prefill */
    int32_t page_shift;
    int64_t grid;     /* requests x 8 heads x ceil(max_seqlen_q / 128) tiles x splits, at most 132 */
    int32_t splits;   /* where the tiles fill at most half the SMs: min(132 / tiles, 3072 keys / 512) */
  } cases[] = {
      {"128 tokens, 16-key pages (64 decoding tiles; 32 tiles in 4 splits of 768 keys)", 90, 4, 128, 16, 128, 0,
       "p16", 4, 128, 4},
      {"300 tokens, 32-key pages", 90, 3, 300, 32, 128, 0, "p16", 5, 72, 1},
      {"300 tokens, 64-key pages: 64-row boxes", 90, 3, 300, 64, 128, 0, "p64", 6, 72, 1},
      {"700 tokens, 256-key pages, d64", 90, 3, 700, 256, 64, 0, "p64", 8, 132, 1},
      {"fp16, sinks and cache_leftpad (48 tiles: 2 splits)", 90, 3, 200, 16, 128, 4, "p16", 4, 96, 2},
      {"64 tokens, one 128-row tile a head (16 requests)", 90, 16, 64, 16, 128, 0, "p16", 4, 128, 1},
      /* The decoding kernel's split against the forward's. Where the forward splits (its tiles fill at most
       * half the SMs), the decoding kernel keeps the call while its tiles are at most half the forward's;
       * where the forward's one wave runs unsplit, while its tiles are under 0.4 x 132 (52.8), or 66 from
       * head dim 192. */
      {"128 tokens, 3 requests (48 decoding tiles, 24 forward ones): 5 forward splits of 640 keys", 90, 3, 128, 16,
       128, 0, "p16", 4, 120, 5},
      {"the same with num_splits 1: the paged prefill, unsplit", 90, 3, 128, 16, 128, 6, "p16", 4, 24, 1},
      {"32 tokens, 3 requests (12 decoding tiles, half the forward's 24): the decoding kernel", 90, 3, 32, 16, 128,
       0, NULL, 0, 0, 0},
      {"33 tokens, 3 requests (18 decoding tiles): 5 forward splits", 90, 3, 33, 16, 128, 0, "p16", 4, 120, 5},
      {"head dim 256, 128 tokens, 4 requests (64 decoding tiles): 4 forward splits of 768 keys", 90, 4, 128, 16, 256,
       0, "p16", 4, 128, 4},
      {"head dim 256, 300 tokens (114 decoding tiles)", 90, 3, 300, 16, 256, 0, "p16", 4, 72, 1},
      /* Fewer than 64 tokens: the paged prefill where the decoding kernel would run its 64-row tile
       * (G * tokens > 32), the 128-row tiles (requests x query heads) fit one wave of 132 SMs, and the
       * decoding kernel's tiles are not few enough for its split. */
      {"63 tokens, 16 requests x 8 heads (128 tiles, one wave)", 90, 16, 63, 16, 128, 0, "p16", 4, 128, 1},
      {"17 tokens x G 4 = 68 rows, 16 requests (64 decoding tiles)", 90, 16, 17, 16, 128, 0, "p16", 4, 128, 1},
      {"16 tokens x G 4 = 64 rows, 16 requests (32 decoding tiles): the split", 90, 16, 16, 16, 128, 0, NULL, 0, 0, 0},
      {"8 tokens x G 4 = 32 rows: the decoding kernel", 90, 16, 8, 16, 128, 0, NULL, 0, 0, 0},
      {"63 tokens, 17 requests x 8 heads (136 tiles, two waves): the decoding kernel", 90, 17, 63, 16, 128, 0, NULL,
       0, 0, 0},
      {"48-key pages (not a power of two)", 90, 3, 300, 48, 128, 0, NULL, 0, 0, 0},
      {"8-key pages", 90, 3, 300, 8, 128, 0, NULL, 0, 0, 0},
      {"softcap: the EXTRAS row", 90, 3, 300, 16, 128, 1, "p16", 4, 72, 1},
      {"ALiBi: the EXTRAS row", 90, 3, 300, 64, 128, 2, "p64", 6, 72, 1},
      {"ALiBi over 4 requests of 128 tokens: the EXTRAS row in 4 splits", 90, 4, 128, 64, 128, 2, "p64", 6, 128, 4},
      {"q's heads not contiguous", 90, 3, 300, 16, 128, 3, NULL, 0, 0, 0},
      {"head dim 96 (no row of its own)", 90, 3, 300, 16, 96, 0, NULL, 0, 0, 0},
      {"sm_80", 80, 3, 300, 16, 128, 0, NULL, 0, 0, 0},
      {"2^30 keys (past the Gluon forward's int32 window arithmetic)", 90, 3, 300, 16, 128, 5, NULL, 0, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    install_fake_gpu(cases[i].arch, cases[i].arch == 90 ? SHARED_SM90 : SHARED_SM80);
    decode_shape s = default_varlen_paged_shape;
    s.batch = cases[i].batch;
    s.seqlen_q = cases[i].max_seqlen_q, s.total_q = s.batch * cases[i].max_seqlen_q - 7;
    s.page_size = cases[i].page_size, s.capacity = cases[i].variation == 5 ? (int64_t)1 << 30 : 3072;
    s.num_pages = 3 * s.capacity / cases[i].page_size + 5;
    s.head_dim_qk = s.head_dim_v = cases[i].head_dim;
    if (cases[i].variation == 4) s.dtype = AOTK_DTYPE_FLOAT16;
    aotk_decode_params params = decode_params_for(s);
    params.causal = 1;
    if (cases[i].variation == 1) params.softcap = 30.0f;
    if (cases[i].variation == 6) params.num_splits = 1;
    if (cases[i].variation == 2) params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 8);
    if (cases[i].variation == 3) params.q.strides[1] = s.head_dim_qk + 16, params.q.strides[0] = 8 * (s.head_dim_qk + 16);
    if (cases[i].variation == 4) {
      params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 8);
      params.cache_leftpad = aotk_tensor_1d(FAKE_CACHE_LEFTPAD, AOTK_DTYPE_INT32, 3);
    }
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    const bool paged_prefill = strncmp(info.kernel_name, "attn_fwd_hopper_paged_", 22) == 0;
    CHECK_MSG(paged_prefill == (cases[i].box != NULL), "%s: the query names %s", cases[i].what, info.kernel_name);
    reset_launch_log();
    /* (The decoding kernel's calls may split: the workspace the query asks for.) */
    status = aotk_attn_decode(&params, info.workspace_bytes > 0 ? FAKE_WORKSPACE : NULL, info.workspace_bytes,
                              FAKE_STREAM);
    CHECK_MSG(status == AOTK_OK && fake.logged_launches == info.launches, "%s: %s (%s), %d launches", cases[i].what,
              aotk_status_name(status), aotk_last_error(), fake.logged_launches);
    const int32_t splits = cases[i].splits;
    if (cases[i].box == NULL || !paged_prefill || fake.logged_launches != (splits > 1 ? 2 : 1)) {
      uninstall_fake_gpu();
      continue;
    }
    const int variation = cases[i].variation;
    const uint32_t features = AOTK_FEATURE_PAGED_KV | AOTK_FEATURE_VARLEN | AOTK_FEATURE_CAUSAL | AOTK_FEATURE_TMA |
                              AOTK_FEATURE_WARP_SPECIALIZED | (splits > 1 ? AOTK_FEATURE_SPLIT_KV : 0) |
                              (variation == 4 ? AOTK_FEATURE_SINKS | AOTK_FEATURE_LEFTPAD_KV : 0) |
                              (variation == 1 ? AOTK_FEATURE_SOFTCAP | AOTK_FEATURE_EXTRAS_KERNEL : 0) |
                              (variation == 2 ? AOTK_FEATURE_ALIBI | AOTK_FEATURE_EXTRAS_KERNEL : 0);
    /* Split: fp32 partials [splits, requests, max_seqlen_q, 8 heads, d] then their LSEs, each part rounded up
     * to 16 bytes, in keys of ceil(3072 / splits) rounded up to the key block. */
    const int64_t partial_rows = cases[i].batch * cases[i].max_seqlen_q * 8, d = cases[i].head_dim;
    const size_t out_bytes = (size_t)((splits * partial_rows * d * 4 + 15) / 16 * 16);
    const size_t workspace = splits > 1 ? out_bytes + (size_t)((splits * partial_rows * 4 + 15) / 16 * 16) : 0;
    const int32_t block_n = cases[i].head_dim == 256 ? 64 : 128; /* the paged rows' key blocks */
    const int32_t split_keys =
        splits > 1 ? (int32_t)(((3072 + splits - 1) / splits + block_n - 1) / block_n * block_n) : 3072;
    const bool extras_row = strstr(info.kernel_name, "_extras_") != NULL;
    CHECK_MSG(extras_row == (variation == 1 || variation == 2), "%s: %s", cases[i].what, info.kernel_name);
    CHECK_MSG(strstr(info.kernel_name, cases[i].box) != NULL && info.grid == cases[i].grid &&
                  info.launches == (splits > 1 ? 2 : 1) && info.num_splits == splits &&
                  info.workspace_bytes == workspace && info.features == features,
              "%s: %s, grid %lld, %d launches, %d splits, %zu bytes, features %#x; expected boxes %s, grid %lld, "
              "%d splits, %zu bytes, features %#x",
              cases[i].what, info.kernel_name, (long long)info.grid, info.launches, info.num_splits,
              info.workspace_bytes, info.features, cases[i].box, (long long)cases[i].grid, (int)splits, workspace,
              features);
    const recorded_launch *launch = &fake.launch_log[0];
    const int32_t leftpad_flag = variation == 4 ? 512 : 0, sinks_flag = variation == 4 && splits == 1 ? 32 : 0;
    const int32_t softcap_flag = variation == 1 ? 8 : 0, alibi_flag = variation == 2 ? 16 : 0;
    /* flags: FLAG_WRITE_LSE | FLAG_VARLEN | FLAG_REVERSE (causal) | FLAG_O_TMA (out is contiguous; not when
     * split, whose fp32 partials leave by masked stores, nor the sinks, which join in the merge) or, split,
     * FLAG_SPLIT_OUT. */
    const int32_t flags = 1 | 2 | 128 | (splits > 1 ? 1024 : 256) | leftpad_flag | sinks_flag | softcap_flag |
                          alibi_flag;
    /* softcap_scale: the resolved softmax scale (1 / sqrt(head dim)) over the softcap, 0 without one. */
    const float softcap_scale = variation == 1 ? (float)(1.0 / sqrt((double)cases[i].head_dim)) / 30.0f : 0.0f;
    const uint64_t workspace_at = (uint64_t)(uintptr_t)FAKE_WORKSPACE;
    CHECK_MSG(arg_i32(launch, PAGED_ARG_NUM_SPLITS) == splits && arg_i32(launch, PAGED_ARG_SPLIT_KEYS) == split_keys &&
                  arg_pointer(launch, PAGED_ARG_OUT_PARTIAL) == (splits > 1 ? workspace_at : 0) &&
                  arg_pointer(launch, ARG_LSE) ==
                      (splits > 1 ? workspace_at + out_bytes : (uint64_t)(uintptr_t)FAKE_LSE) &&
                  arg_i64(launch, PAGED_ARG_STRIDE_PP) == (splits > 1 ? partial_rows * d : 0) &&
                  arg_i64(launch, PAGED_ARG_STRIDE_LPP) == (splits > 1 ? partial_rows : 0),
              "%s: %d splits of %d keys, partials %#llx (strides %lld, %lld), lse %#llx; expected %d of %d", cases[i].what,
              arg_i32(launch, PAGED_ARG_NUM_SPLITS), arg_i32(launch, PAGED_ARG_SPLIT_KEYS),
              (unsigned long long)arg_pointer(launch, PAGED_ARG_OUT_PARTIAL),
              (long long)arg_i64(launch, PAGED_ARG_STRIDE_PP), (long long)arg_i64(launch, PAGED_ARG_STRIDE_LPP),
              (unsigned long long)arg_pointer(launch, ARG_LSE), (int)splits, (int)split_keys);
    if (splits > 1) {
      /* The merge of the partials into the packed rows (FLAG_VARLEN), the sinks joining there. */
      const recorded_launch *merge = &fake.launch_log[1];
      const int32_t merge_flags = arg_i32(merge, MERGE_FLAGS);
      CHECK_MSG(merge->kernel == KERNEL_ATTN_MERGE && arg_i32(merge, MERGE_NUM_PARTIALS) == splits &&
                    arg_pointer(merge, MERGE_PARTIAL32) == workspace_at &&
                    arg_pointer(merge, MERGE_LSE_PARTIAL) == workspace_at + out_bytes &&
                    arg_pointer(merge, MERGE_CU_SEQLENS_Q) == (uint64_t)(uintptr_t)FAKE_CU_SEQLENS_Q &&
                    (merge_flags & 2) != 0 && ((merge_flags & 32) != 0) == (variation == 4) &&
                    arg_pointer(merge, MERGE_SINKS) == (uint64_t)(uintptr_t)(variation == 4 ? FAKE_SINKS : NULL),
                "%s: the merge: kernel %d, %d partials, flags %#x", cases[i].what, merge->kernel,
                arg_i32(merge, MERGE_NUM_PARTIALS), merge_flags);
    }
    CHECK_MSG(launch->kernel == KERNEL_ATTN_FWD_HOPPER_PAGED && launch->grid[0] == (unsigned)cases[i].grid &&
                  arg_i32(launch, ARG_SEQLEN_Q) == cases[i].max_seqlen_q && arg_i32(launch, ARG_SEQLEN_K) == 3072 &&
                  arg_i32(launch, ARG_GROUP_SIZE) == 4 && arg_i32(launch, ARG_FLAGS) == flags &&
                  arg_i32(launch, ARG_WINDOW_RIGHT) == 0 && arg_i32(launch, ARG_WINDOW_LEFT) == -1 &&
                  arg_i32(launch, HOPPER_ARG_NUM_TILES) ==
                      cases[i].batch * 8 * ((cases[i].max_seqlen_q + 127) / 128) * splits &&
                  arg_pointer(launch, PAGED_ARG_BLOCK_TABLE) == (uint64_t)(uintptr_t)FAKE_BLOCK_TABLE &&
                  arg_pointer(launch, PAGED_ARG_CACHE_SEQLENS) == (uint64_t)(uintptr_t)FAKE_CACHE_SEQLENS &&
                  arg_pointer(launch, PAGED_ARG_CACHE_LEFTPAD) ==
                      (uint64_t)(uintptr_t)(cases[i].variation == 4 ? FAKE_CACHE_LEFTPAD : NULL) &&
                  arg_i64(launch, PAGED_ARG_STRIDE_BT) == 3072 / cases[i].page_size &&
                  arg_i32(launch, PAGED_ARG_PAGE_SHIFT) == cases[i].page_shift &&
                  arg_pointer(launch, ARG_ALIBI_SLOPES) == (uint64_t)(uintptr_t)(variation == 2 ? FAKE_ALIBI : NULL) &&
                  fabsf(arg_f32(launch, ARG_SOFTCAP_SCALE) - softcap_scale) <= 1e-6f * softcap_scale &&
                  (variation != 1 || arg_f32(launch, ARG_SOFTCAP_SCALE) > 0.0f),
              "%s: kernel %d, grid %u, seqlen_q %d, seqlen_k %d, G %d, flags %#x (expected %#x), window (%d, %d), "
              "tiles %d, table %#llx, lengths %#llx, leftpad %#llx, stride_bt %lld, page_shift %d",
              cases[i].what, launch->kernel, launch->grid[0], arg_i32(launch, ARG_SEQLEN_Q),
              arg_i32(launch, ARG_SEQLEN_K), arg_i32(launch, ARG_GROUP_SIZE), arg_i32(launch, ARG_FLAGS), flags,
              arg_i32(launch, ARG_WINDOW_LEFT), arg_i32(launch, ARG_WINDOW_RIGHT),
              arg_i32(launch, HOPPER_ARG_NUM_TILES), (unsigned long long)arg_pointer(launch, PAGED_ARG_BLOCK_TABLE),
              (unsigned long long)arg_pointer(launch, PAGED_ARG_CACHE_SEQLENS),
              (unsigned long long)arg_pointer(launch, PAGED_ARG_CACHE_LEFTPAD),
              (long long)arg_i64(launch, PAGED_ARG_STRIDE_BT), arg_i32(launch, PAGED_ARG_PAGE_SHIFT));
    /* The caches' descriptors: [num_pages, page_size, heads_kv * d] in boxes of 16 or 64 rows, 64 columns. */
    const unsigned box_rows = strcmp(cases[i].box, "p64") == 0 ? 64 : 16;
    CHECK_MSG(fake.encode_count == 4, "%s: %d descriptors encoded", cases[i].what, fake.encode_count);
    for (int d = 1; d <= 2 && d < fake.encode_count; d++) {
      const encode_call *e = &fake.encodes[d];
      CHECK_MSG(e->address == (d == 1 ? FAKE_K : FAKE_V) && e->dims[0] == (uint64_t)(2 * s.head_dim_qk) &&
                    e->dims[1] == (uint64_t)s.page_size && e->dims[2] == (uint64_t)s.num_pages && e->box[0] == 64 &&
                    e->box[1] == box_rows && e->box[2] == 1,
                "%s: descriptor %d over %p dims [%llu, %llu, %llu] box [%u, %u, %u]", cases[i].what, d, e->address,
                (unsigned long long)e->dims[0], (unsigned long long)e->dims[1], (unsigned long long)e->dims[2],
                e->box[0], e->box[1], e->box[2]);
    }
    uninstall_fake_gpu();
  }
}

/* The feature bits and split counts aotk_decode_query reports, as literals. */
static void test_decode_features(void) {
  install_fake_gpu(90, SHARED_SM90);
  enum { F_CAUSAL = AOTK_FEATURE_CAUSAL, F_WINDOW = AOTK_FEATURE_WINDOW, F_SOFTCAP = AOTK_FEATURE_SOFTCAP };
  enum { F_ALIBI = AOTK_FEATURE_ALIBI, F_SINKS = AOTK_FEATURE_SINKS, F_PADDED = AOTK_FEATURE_PADDED_HEAD_DIM };
  enum { F_PAGED = AOTK_FEATURE_PAGED_KV, F_SPLIT = AOTK_FEATURE_SPLIT_KV, F_APPEND = AOTK_FEATURE_APPEND_KV };
  static const struct {
    const char *what;
    bool paged;
    int64_t head_dim_qk, head_dim_v;
    int32_t causal, window_left, window_right, num_splits;
    float softcap;
    bool alibi, sinks;
    uint32_t features;
    int32_t splits;
    int64_t seqlen_new; /* appending: k_new and v_new of this many tokens; 0: none */
  } cases[] = {
      {"nothing", false, 128, 128, 0, -1, -1, 1, 0.0f, false, false, 0, 1, 0},
      {"causal", false, 128, 128, 1, -1, -1, 1, 0.0f, false, false, F_CAUSAL, 1, 0},
      {"causal, window_right 0", false, 128, 128, 1, -1, 0, 1, 0.0f, false, false, F_CAUSAL, 1, 0},
      {"causal, window_left 100", false, 128, 128, 1, 100, -1, 1, 0.0f, false, false, F_CAUSAL | F_WINDOW, 1, 0},
      {"window_left 100", false, 128, 128, 0, 100, -1, 1, 0.0f, false, false, F_WINDOW, 1, 0},
      {"window_right 5", false, 128, 128, 0, -1, 5, 1, 0.0f, false, false, F_WINDOW, 1, 0},
      {"window 0, 0", false, 128, 128, 0, 0, 0, 1, 0.0f, false, false, F_WINDOW, 1, 0},
      {"softcap", false, 128, 128, 0, -1, -1, 1, 30.0f, false, false, F_SOFTCAP, 1, 0},
      {"ALiBi", false, 128, 128, 0, -1, -1, 1, 0.0f, true, false, F_ALIBI, 1, 0},
      {"sinks", false, 128, 128, 0, -1, -1, 1, 0.0f, false, true, F_SINKS, 1, 0},
      {"head dims 80 (in 128)", false, 80, 80, 0, -1, -1, 1, 0.0f, false, false, F_PADDED, 1, 0},
      {"head dims (256, 128): compiled", false, 256, 128, 0, -1, -1, 1, 0.0f, false, false, 0, 1, 0},
      {"head dims (192, 128) (in (256, 128))", false, 192, 128, 0, -1, -1, 1, 0.0f, false, false, F_PADDED, 1, 0},
      {"head dims (64, 128) (in (128, 128))", false, 64, 128, 0, -1, -1, 1, 0.0f, false, false, F_PADDED, 1, 0},
      {"paged", true, 128, 128, 0, -1, -1, 1, 0.0f, false, false, F_PAGED, 1, 0},
      {"4 splits", false, 128, 128, 0, -1, -1, 4, 0.0f, false, false, F_SPLIT, 4, 0},
      {"paged, 4 splits, causal, sinks", true, 128, 128, 1, -1, -1, 4, 0.0f, false, true,
       F_PAGED | F_SPLIT | F_CAUSAL | F_SINKS, 4, 0},
      {"everything", true, 48, 48, 1, 9, 0, 2, 10.0f, true, true,
       F_PAGED | F_SPLIT | F_CAUSAL | F_WINDOW | F_SOFTCAP | F_ALIBI | F_SINKS | F_PADDED, 2, 0},
      {"appending", false, 128, 128, 0, -1, -1, 1, 0.0f, false, false, F_APPEND, 1, 1},
      {"appending 16 tokens, paged", true, 128, 128, 0, -1, -1, 1, 0.0f, false, false, F_PAGED | F_APPEND, 1, 16},
      {"appending, 4 splits", false, 128, 128, 0, -1, -1, 4, 0.0f, false, false, F_SPLIT | F_APPEND, 4, 3},
      {"appending, everything", true, 48, 48, 1, 9, 0, 2, 10.0f, true, true,
       F_PAGED | F_SPLIT | F_CAUSAL | F_WINDOW | F_SOFTCAP | F_ALIBI | F_SINKS | F_PADDED | F_APPEND, 2, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    decode_shape s = cases[i].paged ? default_paged_shape : default_decode_shape;
    s.head_dim_qk = cases[i].head_dim_qk, s.head_dim_v = cases[i].head_dim_v;
    aotk_decode_params params = decode_params_for(s);
    params.causal = cases[i].causal, params.window_left = cases[i].window_left;
    params.window_right = cases[i].window_right, params.num_splits = cases[i].num_splits;
    params.softcap = cases[i].softcap;
    if (cases[i].alibi) dec_alibi(&params);
    if (cases[i].sinks) dec_sinks(&params);
    if (cases[i].seqlen_new > 0) add_new_kv(&params, &s, cases[i].seqlen_new);
    aotk_kernel_info info;
    poison_info(&info);
    aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", cases[i].what, aotk_status_name(status), aotk_last_error());
    const int launches = expected_decode_launches(&params, &info);
    CHECK_MSG(info.features == cases[i].features && info.num_splits == cases[i].splits && info.launches == launches,
              "%s: features %#x, %d splits, %d launches; expected %#x, %d, %d", cases[i].what, info.features,
              info.num_splits, info.launches, cases[i].features, cases[i].splits, launches);
  }
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_decode_split_choice);
  RUN_TEST(test_decode_launch_arguments);
  RUN_TEST(test_decode_varlen);
  RUN_TEST(test_decode_family_choice);
  RUN_TEST(test_decode_paged_prefill);
  RUN_TEST(test_decode_features);
  return aotk_test_finish();
}
