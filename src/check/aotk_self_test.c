/* aotk_self_test(): the forward and the backward on small random problems of every shipped dtype and
 * head dim, causal and not, one case per feature (variable length, a sliding window, softcap with
 * ALiBi and sinks, dropout, head dims 96 and 192/128), selection attention (aotk_sel_fwd and
 * aotk_sel_bwd, and once against the dense causal attention it becomes when every block is selected),
 * and decoding (aotk_attn_decode over contiguous and paged caches, split and appending) with the public
 * merge (aotk_attn_merge), checked against the float64 references. What `aotk check` runs. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "aotk.h"
#include "aotk_check.h"
#include "aotk_decode_check.h"
#include "aotk_driver.h"
#include "aotk_error.h"
#include "aotk_sel_check.h"

/* The report and the first failure, kept across cases. */
typedef struct self_test_log {
  char *report;
  size_t report_bytes, used;
  int cases, failures;
  aotk_status first_failure;
  char first_message[768];
} self_test_log;

/* Records one case: a line in the report, and the first failure's status and line. A case that could
 * not run keeps its own status; one that ran but failed its checks counts as AOTK_ERROR_INTERNAL. */
static void record_case(self_test_log *log, const char *label, aotk_status status, int passed,
                        const char *kernel_name, const char *detail) {
  char line[768];
  if (status != AOTK_OK) {
    snprintf(line, sizeof line, "FAIL %s: %s: %s", label, aotk_status_name(status), aotk_last_error());
  } else {
    snprintf(line, sizeof line, "%s %s %s: %s", passed ? "ok  " : "FAIL", label, kernel_name, detail);
  }
  if (log->report != NULL && log->report_bytes > 0) {
    int written = snprintf(log->report + log->used, log->report_bytes - log->used, "%s\n", line);
    if (written > 0) {
      size_t room = log->report_bytes - log->used - 1;
      log->used += (size_t)written < room ? (size_t)written : room;
    }
  }
  log->cases++;
  if (status != AOTK_OK || !passed) {
    log->failures++;
    if (log->first_failure == AOTK_OK) {
      log->first_failure = status != AOTK_OK ? status : AOTK_ERROR_INTERNAL;
      snprintf(log->first_message, sizeof log->first_message, "%s", line);
    }
  }
}

static const char *dtype_label(aotk_dtype dtype) { return dtype == AOTK_DTYPE_BFLOAT16 ? "bf16" : "fp16"; }

/* The features of aotk_attn_params beyond plain attention, one small case each, forward and backward
 * alike: so that `aotk check` exercises the EXTRAS kernels, the varlen layout, windows and the head dims
 * that run padded in a larger compiled one. */
typedef struct feature_case {
  const char *label;
  aotk_dtype dtype;
  int64_t seqlen_q, seqlen_k, head_dim;
  int causal;
  aotk__check_features features;
} feature_case;

static int feature_cases(feature_case *cases, uint64_t seed) {
  int n = 0;
  /* Varlen: four sequences, one without query rows and one without keys, causal (bottom-right per
   * sequence), GQA 2. */
  feature_case varlen = {"varlen", AOTK_DTYPE_BFLOAT16, 0, 0, 64, 1, {.num_seqs = 4}};
  static const int64_t varlen_q[4] = {67, 0, 1, 131}, varlen_k[4] = {131, 5, 0, 67};
  for (int i = 0; i < 4; i++) {
    varlen.features.seqlens_q[i] = varlen_q[i];
    varlen.features.seqlens_k[i] = varlen_k[i];
  }
  cases[n++] = varlen;
  cases[n++] = (feature_case){"window 32/16 top-left", AOTK_DTYPE_FLOAT16, 131, 67, 128, 0,
                              {.window = 1, .window_left = 32, .window_right = 16, .top_left = 1}};
  cases[n++] = (feature_case){"softcap+alibi+sinks", AOTK_DTYPE_BFLOAT16, 67, 131, 128, 1,
                              {.softcap = 5.0f, .alibi = 2, .sinks = 1}};
  cases[n++] = (feature_case){"dropout 0.25", AOTK_DTYPE_FLOAT16, 67, 131, 64, 0,
                              {.dropout_p = 0.25f, .rng_seed = (int64_t)(seed >> 1), .rng_offset = 12345}};
  cases[n++] = (feature_case){"d96", AOTK_DTYPE_BFLOAT16, 67, 131, 96, 1, {.head_dim_v = 0}};
  cases[n++] = (feature_case){"d192/128", AOTK_DTYPE_FLOAT16, 131, 67, 192, 0, {.head_dim_v = 128}};
  return n;
}

/* Selection attention, forward and backward in one case each: every head-dim pair, block size and both
 * dtypes once, G = 16 (the kernels' variant for multiples of 16), 4 and 1 (and 2), one sequence and
 * varlen (with an empty sequence and one with more query rows than keys: rows before the diagonal see
 * nothing), block_cnt or not; random selections mixed with -1, other negative, out-of-range and
 * future ids. Then every block selected, in permuted slots padded with -1: dense causal attention,
 * which aotk_attn_fwd and aotk_attn_bwd run too on the same inputs. The reference costs ~1.3 s of one
 * core for the four together, spread over the machine's cores. */
typedef struct selection_case {
  const char *label;
  aotk__sel_check_case c;
} selection_case;

static int selection_cases(selection_case *cases) {
  int n = 0;
  cases[n++] = (selection_case){"sel bf16 d128 bs64 G16 L=300 random",
                                {.dtype = AOTK_DTYPE_BFLOAT16, .head_dim_qk = 128, .head_dim_v = 128, .block_size = 64,
                                 .heads_kv = 1, .group = 16, .slots = 4, .seqlens_q = {300}, .seqlens_k = {300}}};
  cases[n++] = (selection_case){"sel fp16 d192/128 bs32 G4 varlen 90x130,0x40,70x50 random cnt",
                                {.dtype = AOTK_DTYPE_FLOAT16, .head_dim_qk = 192, .head_dim_v = 128, .block_size = 32,
                                 .heads_kv = 2, .group = 4, .slots = 8, .num_seqs = 3, .seqlens_q = {90, 0, 70},
                                 .seqlens_k = {130, 40, 50}, .with_count = 1}};
  cases[n++] = (selection_case){"sel bf16 d64 bs128 G1 200x333 random cnt scale=0.3",
                                {.dtype = AOTK_DTYPE_BFLOAT16, .head_dim_qk = 64, .head_dim_v = 64, .block_size = 128,
                                 .heads_kv = 4, .group = 1, .slots = 3, .seqlens_q = {200}, .seqlens_k = {333},
                                 .with_count = 1, .softmax_scale = 0.3f}};
  cases[n++] = (selection_case){"sel fp16 d128 bs64 G2 varlen 150x150,40x200 every block vs dense",
                                {.dtype = AOTK_DTYPE_FLOAT16, .head_dim_qk = 128, .head_dim_v = 128, .block_size = 64,
                                 .heads_kv = 2, .group = 2, .slots = 5, .num_seqs = 2, .seqlens_q = {150, 40},
                                 .seqlens_k = {150, 200}, .every_block = 1}};
  return n;
}

/* Decoding, one case per cache layout and kernel family, every element of out, lse and both caches
 * compared: (1) a contiguous cache split into 3 key ranges, so the merge kernel runs, with sinks (which
 * the splits leave to the merge); (2) a paged cache of 16-key pages in shuffled order (a lookup per key
 * row), appending 2 tokens, with sinks; (3) head dims 192/128 (run in the compiled 256/128) over 64-key
 * pages, whole key blocks of that kernel (one lookup per block), with a window, softcap and ALiBi.
 * Lengths include 0, 1 with 2 tokens (the first token sits before position 0: it sees nothing), the
 * full capacity and, appending, one that crosses the capacity, one at it (nothing written) and a
 * negative one (written from position 0). Then the public merge: 3 float32 partials into bf16 with lse,
 * some rows with a partial that got no key (lse -inf, out NaN), some with no key at all. The four
 * references together cost a few milliseconds of one core. */
typedef struct decoding_case {
  const char *label;
  aotk__decode_check_case c;
} decoding_case;

static int decoding_cases(decoding_case *cases) {
  int n = 0;
  cases[n++] = (decoding_case){"decode bf16 d128 G4 contiguous 4x384 2 tokens causal sinks lengths 0,384,1,random "
                               "left padding 0,200,-1,37 splits 3",
                               {.dtype = AOTK_DTYPE_BFLOAT16, .head_dim_qk = 128, .head_dim_v = 128, .batch = 4,
                                .heads_kv = 2, .group = 4, .seqlen_q = 2, .capacity = 384,
                                .cache_seqlens = {0, 384, 1, AOTK__DECODE_CHECK_RANDOM_LENGTH}, .leftpad = 1,
                                .cache_leftpad = {0, 200, -1, 37}, .causal = 1, .sinks = 1, .num_splits = 3,
                                .expect_split = 1}};
  cases[n++] = (decoding_case){"decode fp16 d64 G4 paged(16) shuffled 5x208 append 2 causal sinks "
                               "lengths random,0,207,208,-3",
                               {.dtype = AOTK_DTYPE_FLOAT16, .head_dim_qk = 64, .head_dim_v = 64, .batch = 5,
                                .heads_kv = 2, .group = 4, .seqlen_q = 2, .capacity = 208, .page_size = 16,
                                .seqlen_new = 2, .cache_seqlens = {AOTK__DECODE_CHECK_RANDOM_LENGTH, 0, 207, 208, -3},
                                .causal = 1, .sinks = 1}};
  cases[n++] = (decoding_case){"decode bf16 d192/128 G8 paged(64) blocks 3x320 3 tokens causal window 50 "
                               "softcap+alibi lengths random,320,2",
                               {.dtype = AOTK_DTYPE_BFLOAT16, .head_dim_qk = 192, .head_dim_v = 128, .batch = 3,
                                .heads_kv = 1, .group = 8, .seqlen_q = 3, .capacity = 320, .page_size = 64,
                                .cache_seqlens = {AOTK__DECODE_CHECK_RANDOM_LENGTH, 320, 2}, .causal = 1, .window = 1,
                                .window_left = 50, .window_right = -1, .softcap = 20.0f, .alibi = 2}};
  return n;
}

aotk_status aotk_self_test(int device_ordinal, char *report, size_t report_bytes) {
  aotk__clear_error();
  if (report != NULL && report_bytes > 0) report[0] = '\0';
  const aotk__driver *driver;
  aotk_status status = aotk__driver_get(&driver);
  if (status != AOTK_OK) return status;
  int count = 0;
  AOTK__CU_TRY(driver, driver->cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (device_ordinal < 0 || device_ordinal >= count) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "device_ordinal = %d; the driver sees %d device(s)", device_ordinal,
                      count);
  }
  CUdevice device;
  AOTK__CU_TRY(driver, driver->cuDeviceGet(&device, device_ordinal), "cuDeviceGet");
  CUcontext previous = NULL, primary = NULL;
  AOTK__CU_TRY(driver, driver->cuCtxGetCurrent(&previous), "cuCtxGetCurrent");
  AOTK__CU_TRY(driver, driver->cuDevicePrimaryCtxRetain(&primary, device), "cuDevicePrimaryCtxRetain");
  CUresult result = driver->cuCtxSetCurrent(primary);
  if (result != CUDA_SUCCESS) {
    status = aotk__cuda_failure(driver, result, "cuCtxSetCurrent");
    driver->cuDevicePrimaryCtxRelease(device);
    return status;
  }

  static const aotk_dtype dtypes[] = {AOTK_DTYPE_BFLOAT16, AOTK_DTYPE_FLOAT16};
  static const int64_t head_dims[] = {64, 128};
  self_test_log log = {report, report_bytes, 0, 0, 0, AOTK_OK, ""};
  uint64_t seed = (uint64_t)time(NULL);
  char label[128];
  for (int t = 0; t < 2; t++) {
    for (int h = 0; h < 2; h++) {
      for (int causal = 0; causal < 2; causal++) {
        /* seqlen_q != seqlen_k, neither a multiple of a block, GQA 2, and both alignment variants. */
        aotk__fwd_check_case c = {.dtype = dtypes[t], .batch = 2, .seqlen_q = 67, .seqlen_k = 131, .heads_q = 4,
                                  .heads_kv = 2, .head_dim = head_dims[h], .causal = causal,
                                  .layout = causal ? AOTK__LAYOUT_PADDED : AOTK__LAYOUT_CONTIGUOUS, .with_lse = 1,
                                  .rows_per_head = 67, .seed = seed + (uint64_t)log.cases * 7919u};
        aotk__fwd_check_result r;
        aotk_status case_status = aotk__check_attn_fwd(driver, &c, &r);
        snprintf(label, sizeof label, "%s d=%lld causal=%d", dtype_label(dtypes[t]), (long long)head_dims[h], causal);
        record_case(&log, label, case_status, r.passed, r.kernel_name, r.detail);
      }
    }
  }
  /* The backward, one case per dtype and head dim: seqlen_q != seqlen_k, neither a multiple of a
   * block, GQA 2, causal with more queries than keys (rows that see no key) in half, and both
   * alignment variants with every gradient's strides unlike its input's. Every element is compared. */
  for (int t = 0; t < 2; t++) {
    for (int h = 0; h < 2; h++) {
      int causal = (t + h) % 2;
      aotk__bwd_check_case c = {.dtype = dtypes[t], .batch = 2, .seqlen_q = causal ? 131 : 67,
                                .seqlen_k = causal ? 67 : 131, .heads_q = 4, .heads_kv = 2, .head_dim = head_dims[h],
                                .causal = causal, .layout = h ? AOTK__LAYOUT_PADDED : AOTK__LAYOUT_CONTIGUOUS,
                                .mix_layouts = 1, .deterministic = 1, .seed = seed + (uint64_t)log.cases * 7919u};
      aotk__bwd_check_result r;
      aotk_status case_status = aotk__check_attn_bwd(driver, &c, &r);
      snprintf(label, sizeof label, "bwd %s d=%lld causal=%d", dtype_label(dtypes[t]), (long long)head_dims[h], causal);
      record_case(&log, label, case_status, r.passed, r.kernel_name, r.detail);
    }
  }
  /* The features, forward and backward: batch 2 (or the varlen case's four sequences), GQA 2. */
  feature_case features[8];
  const int feature_count = feature_cases(features, seed);
  for (int i = 0; i < feature_count; i++) {
    const feature_case *fc = &features[i];
    aotk__fwd_check_case c = {.dtype = fc->dtype, .batch = 2, .seqlen_q = fc->seqlen_q, .seqlen_k = fc->seqlen_k,
                              .heads_q = 4, .heads_kv = 2, .head_dim = fc->head_dim, .causal = fc->causal,
                              .layout = AOTK__LAYOUT_CONTIGUOUS, .with_lse = 1, .rows_per_head = 131,
                              .seed = seed + (uint64_t)log.cases * 7919u, .features = fc->features};
    aotk__fwd_check_result r;
    aotk_status case_status = aotk__check_attn_fwd(driver, &c, &r);
    snprintf(label, sizeof label, "%s %s causal=%d", dtype_label(fc->dtype), fc->label, fc->causal);
    record_case(&log, label, case_status, r.passed, r.kernel_name, r.detail);
  }
  for (int i = 0; i < feature_count; i++) {
    const feature_case *fc = &features[i];
    aotk__bwd_check_case c = {.dtype = fc->dtype, .batch = 2, .seqlen_q = fc->seqlen_q, .seqlen_k = fc->seqlen_k,
                              .heads_q = 4, .heads_kv = 2, .head_dim = fc->head_dim, .causal = fc->causal,
                              .layout = i % 2 ? AOTK__LAYOUT_PADDED : AOTK__LAYOUT_CONTIGUOUS, .mix_layouts = 1,
                              .deterministic = 1, .seed = seed + (uint64_t)log.cases * 7919u,
                              .features = fc->features};
    aotk__bwd_check_result r;
    aotk_status case_status = aotk__check_attn_bwd(driver, &c, &r);
    snprintf(label, sizeof label, "bwd %s %s causal=%d", dtype_label(fc->dtype), fc->label, fc->causal);
    record_case(&log, label, case_status, r.passed, r.kernel_name, r.detail);
  }
  selection_case selections[4];
  const int selection_count = selection_cases(selections);
  for (int i = 0; i < selection_count; i++) {
    aotk__sel_check_case c = selections[i].c;
    c.seed = seed + (uint64_t)log.cases * 7919u;
    aotk__sel_check_result r;
    aotk_status case_status = aotk__check_sel(driver, &c, &r);
    record_case(&log, selections[i].label, case_status, r.passed, r.kernel_name, r.detail);
  }
  decoding_case decodings[3];
  const int decoding_count = decoding_cases(decodings);
  for (int i = 0; i < decoding_count; i++) {
    aotk__decode_check_case c = decodings[i].c;
    c.seed = seed + (uint64_t)log.cases * 7919u;
    aotk__decode_check_result r;
    aotk_status case_status = aotk__check_decode(driver, &c, &r);
    record_case(&log, decodings[i].label, case_status, r.passed, r.kernel_name, r.detail);
  }
  {
    const aotk__merge_check_case c = {.partial_dtype = AOTK_DTYPE_FLOAT32, .out_dtype = AOTK_DTYPE_BFLOAT16,
                                      .num_partials = 3, .batch = 2, .seqlen_q = 3, .heads = 8, .head_dim = 128,
                                      .keys = 37, .with_lse = 1, .seed = seed + (uint64_t)log.cases * 7919u};
    aotk__decode_check_result r;
    aotk_status case_status = aotk__check_merge(driver, &c, &r);
    record_case(&log, "merge 3 fp32 partials -> bf16 d128 2x3x8 rows lse, empty partials and rows", case_status,
                r.passed, r.kernel_name, r.detail);
  }
  driver->cuCtxSetCurrent(previous);
  driver->cuDevicePrimaryCtxRelease(device);
  if (log.failures > 0) {
    return aotk__fail(log.first_failure, "%d of %d self-test cases failed; first: %s", log.failures, log.cases,
                      log.first_message);
  }
  return AOTK_OK;
}
