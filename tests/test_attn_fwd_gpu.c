/* The forward on the GPU against the float64 reference: every shipped dtype and head dim, causal and
 * not, sequence lengths {1, 17, 127, 128, 1000, 4097} for q and k, batch 1-4, GQA ratios 1/4/8, four
 * memory layouts (packed, permuted, padded with unaligned strides, unaligned pointer), lse on and off;
 * then the sm_80 PTX on this GPU, concurrent first use from several threads, and CUDA graph capture.
 *
 * Then the features of aotk_attn_params (tests/aotk_feature_matrix.h, the matrix the backward shares):
 * head dims from 8 to 256 with head_dim_qk != head_dim_v, variable length with empty sequences,
 * sliding windows of 0, 1, 63, 64, 65 and 1000 keys in both alignments, softcap, ALiBi, sinks and
 * dropout, each alone over both dtypes, and all together; the dropout mask checked bit for bit against the host's Philox, its keep rate, its
 * invariance to everything but (seed, offset, b, h, i, j), and a captured graph replayed under a new
 * offset. Exits 77 (skipped) on a machine with no GPU. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotk.h"
#include "aotk_check.h"
#include "aotk_driver.h"
#include "aotk_test_harness.h"
#include "aotk_gpu_test.h"
#include "aotk_feature_matrix.h"


typedef struct fwd_case {
  aotk__fwd_check_case check;
  bool expect_aligned;
  bool expect_ptx;
  char name[320];
} fwd_case;

/* Worst error seen, as a fraction of its bound, per dtype: reported at the end. */
static double worst_error_fraction[4];
/* Cases that ran the sm_90 TMA kernel (each one's choice is checked against aotk_gpu_test_expect_tma). */
static int tma_cases;
static int hopper_cases; /* and the warp-specialized Gluon kernel */
static int short_causal_cases; /* and its short causal tile */
static int wg3_cases;    /* of them, its three-warpgroup form */

static void run_fwd_case(const void *argument) {
  const fwd_case *fc = argument;
  const aotk__fwd_check_case *c = &fc->check;
  aotk__fwd_check_result r;
  aotk_status status = aotk__check_attn_fwd(driver, c, &r);
  CHECK_MSG(status == AOTK_OK, "%s: %s", aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(r.passed, "%s: %s", r.kernel_name, r.detail);
  bool aligned = strstr(r.kernel_name, "_aligned_") != NULL;
  CHECK_MSG(aligned == fc->expect_aligned, "%s layout ran %s", aotk__check_layout_name(c->layout), r.kernel_name);
  CHECK_MSG(r.from_ptx == (int)fc->expect_ptx, "from_ptx = %d", r.from_ptx);
  const aotk_gpu_test_fwd_path path = aotk_gpu_test_expect_fwd_path(c->layout, c->head_dim, &c->features,
                                                                    fc->expect_ptx);
  aotk_gpu_test_check_kernel_choice(r.kernel_name, c->causal, c->head_dim, &c->features, r.kernel_head_dim_qk,
                                    r.kernel_head_dim_v, r.features, path);
  /* The warp-specialized kernel has three consumer warpgroups (192-row tiles) at d=64 for the plain
   * forward without a mask from 2048 query rows on (src/attn/aotk_attn.c, plan_fwd), two otherwise. */
  const bool unmasked =
      !c->causal && (!c->features.window || (c->features.window_left < 0 && c->features.window_right < 0));
  const bool expect_wg3 = path == FWD_HOPPER && c->head_dim == 64 && unmasked && !aotk_gpu_test_has_extras(&c->features) &&
                          aotk_gpu_test_max_seqlen_q(&c->features, c->seqlen_q) >= 2048;
  const bool wg3 = strncmp(r.kernel_name, "attn_fwd_hopper_wg3_", 20) == 0;
  CHECK_MSG(wg3 == expect_wg3, "ran %s, expected the %s-warpgroup kernel", r.kernel_name, expect_wg3 ? "three" : "two");
  if (strncmp(r.kernel_name, "attn_fwd_tma_", 13) == 0) tma_cases++;
  if (strncmp(r.kernel_name, "attn_fwd_hopper_", 16) == 0) hopper_cases++;
  if (wg3) wg3_cases++;
  /* The two-warpgroup kernel's short causal tile (64-key blocks: "_m128n64w4s3") at d64 and d128 for a
   * causal mask with no left window over at most 512 queries and keys, 1024 with softcap or ALiBi
   * (src/attn/aotk_attn.c, hopper_short_causal); checked on dense cases (varlen's max_seqlen_k is the
   * runner's). */
  const bool short_tile = strstr(r.kernel_name, "_m128n64w4s3") != NULL;
  if (short_tile) short_causal_cases++;
  if (path == FWD_HOPPER && c->features.num_seqs == 0) {
    const bool causal_only = (c->causal && (!c->features.window || c->features.window_left < 0)) ||
                             (!c->causal && c->features.window && c->features.window_left < 0 &&
                              c->features.window_right == 0);
    const int64_t limit = aotk_gpu_test_has_extras(&c->features) ? 1024 : 512;
    /* (Not the dropout form, which has the 128-key tile alone.) */
    const bool expect_short = causal_only && (c->head_dim == 64 || c->head_dim == 128) &&
                              c->seqlen_q <= limit && c->seqlen_k <= limit &&
                              strncmp(r.kernel_name, "attn_fwd_hopper_dropout_", 24) != 0;
    CHECK_MSG(short_tile == expect_short, "ran %s, expected %s tile", r.kernel_name,
              expect_short ? "the short causal" : "the 128-key");
  }
  /* The forward, and the mask kernel when the mask is asked for (the check asks with dropout). */
  const int32_t launches = c->features.dropout_p > 0.0f ? 2 : 1;
  CHECK_MSG(r.launches == launches, "launches = %d, expected %d", (int)r.launches, (int)launches);
  double bound = 2.0 * r.lowp_max_error + AOTK__CHECK_ERROR_FLOOR;
  if (r.max_error / bound > worst_error_fraction[c->dtype]) {
    worst_error_fraction[c->dtype] = r.max_error / bound;
  }
}

static uint64_t next_random(uint64_t *state) { return aotk_gpu_test_random(state); }

static void make_case_in(fwd_case *fc, aotk_dtype dtype, int64_t head_dim, int causal, int64_t seqlen_q,
                         int64_t seqlen_k, int index, uint64_t *state, bool ptx, int layout) {
  static const int64_t group_sizes[] = {1, 4, 8};
  const bool large = seqlen_q * seqlen_k > 1000000;
  memset(fc, 0, sizeof *fc);
  aotk__fwd_check_case *c = &fc->check;
  c->dtype = dtype;
  c->head_dim = head_dim;
  c->causal = causal;
  c->seqlen_q = seqlen_q;
  c->seqlen_k = seqlen_k;
  c->batch = 1 + (int64_t)(next_random(state) % (large ? 2 : 4));
  c->heads_kv = large ? 1 : 1 + (int64_t)(next_random(state) % 2);
  c->heads_q = c->heads_kv * group_sizes[index % 3];
  c->layout = (aotk__check_layout)(layout >= 0 ? layout : index % AOTK__LAYOUT_COUNT);
  c->with_lse = index % 5 != 4;
  c->softmax_scale = index % 7 == 3 ? 0.3f : 0.0f;
  c->rows_per_head = large ? 12 : 40;
  c->seed = seed + (uint64_t)index * 1000003u + (ptx ? 17 : 0);
  c->stream = (aotk_stream)stream;
  fc->expect_aligned = aotk_gpu_test_expect_aligned(c->layout, head_dim, &c->features);
  fc->expect_ptx = ptx;
  snprintf(fc->name, sizeof fc->name, "%s%s d=%lld %s sq=%lld sk=%lld b=%lld hq=%lld hkv=%lld %s%s%s",
           ptx ? "ptx sm_80 " : "", dtype == AOTK_DTYPE_BFLOAT16 ? "bf16" : "fp16", (long long)head_dim,
           causal ? "causal" : "full", (long long)seqlen_q, (long long)seqlen_k, (long long)c->batch,
           (long long)c->heads_q, (long long)c->heads_kv, aotk__check_layout_name(c->layout),
           c->with_lse ? " lse" : "", c->softmax_scale != 0.0f ? " scale=0.3" : "");
}

/* A case of the main matrix: the layout cycles with the index. */
static void make_case(fwd_case *fc, aotk_dtype dtype, int64_t head_dim, int causal, int64_t seqlen_q,
                      int64_t seqlen_k, int index, uint64_t *state, bool ptx) {
  make_case_in(fc, dtype, head_dim, causal, seqlen_q, seqlen_k, index, state, ptx, -1);
}

/* The sm_90 kernels at the head dim the main matrix leaves out (256; d=128 runs there in the packed
 * layout), over lengths that end mid-block on either side: each case plain and with a softcap (the
 * warp-specialized kernel, its EXTRAS variant for the softcap), and with dropout (the Triton TMA kernel);
 * and the layouts they must decline (strided heads, unaligned strides or pointers), which take the
 * pointer kernel. run_fwd_case checks each choice against aotk_gpu_test_expect_fwd_path. */
static void tma_section(int *index, uint64_t *state) {
  static const int64_t lengths[][2] = {{1, 1000}, {1000, 1000}, {4097, 128}, {128, 4097}, {17, 300}};
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_BFLOAT16, AOTK_DTYPE_FLOAT16};
  fwd_case fc;
  for (int t = 0; t < 2; t++)
    for (int causal = 0; causal < 2; causal++)
      for (int i = 0; i < 5; i++) {
        make_case_in(&fc, dtypes[t], 256, causal, lengths[i][0], lengths[i][1], (*index)++, state, false,
                     AOTK__LAYOUT_CONTIGUOUS);
        aotk_test_run_with(fc.name, run_fwd_case, &fc);
        fc.check.features.softcap = 30.0f;
        fc.expect_aligned = aotk_gpu_test_expect_aligned(fc.check.layout, 256, &fc.check.features);
        strncat(fc.name, " softcap=30", sizeof fc.name - strlen(fc.name) - 1);
        aotk_test_run_with(fc.name, run_fwd_case, &fc);
        fc.check.features.softcap = 0.0f;
        fc.check.features.dropout_p = 0.1f;
        fc.check.features.rng_seed = (int64_t)next_random(state);
        fc.check.features.rng_offset = 4 * (int64_t)*index;
        fc.expect_aligned = aotk_gpu_test_expect_aligned(fc.check.layout, 256, &fc.check.features);
        fc.name[strlen(fc.name) - strlen(" softcap=30")] = '\0';
        strncat(fc.name, " dropout=0.1", sizeof fc.name - strlen(fc.name) - 1);
        aotk_test_run_with(fc.name, run_fwd_case, &fc);
      }
  /* (192, 128), DeepSeek's pair: the warp-specialized kernel's chunked form (Q and K in 64-column
   * boxes), plain, under a window of both sides, and with softcap and ALiBi (its EXTRAS rows). */
  for (int t = 0; t < 2; t++)
    for (int causal = 0; causal < 2; causal++)
      for (int i = 0; i < 5; i++) {
        make_case_in(&fc, dtypes[t], 192, causal, lengths[i][0], lengths[i][1], (*index)++, state, false,
                     AOTK__LAYOUT_CONTIGUOUS);
        fc.check.features.head_dim_v = 128;
        fc.expect_aligned = aotk_gpu_test_expect_aligned(fc.check.layout, 192, &fc.check.features);
        strncat(fc.name, " dv=128", sizeof fc.name - strlen(fc.name) - 1);
        if (i % 2 == 1) {
          fc.check.features.window = 1;
          fc.check.features.window_left = 200;
          fc.check.features.window_right = causal ? -1 : 77;
          strncat(fc.name, " window", sizeof fc.name - strlen(fc.name) - 1);
        }
        aotk_test_run_with(fc.name, run_fwd_case, &fc);
        fc.check.features.softcap = 20.0f;
        fc.check.features.alibi = 1;
        strncat(fc.name, " softcap=20 alibi", sizeof fc.name - strlen(fc.name) - 1);
        aotk_test_run_with(fc.name, run_fwd_case, &fc);
      }
  for (int layout = AOTK__LAYOUT_PERMUTED; layout < AOTK__LAYOUT_COUNT; layout++)
    for (int h = 128; h <= 256; h += 128) {
      make_case_in(&fc, dtypes[layout % 2], h, layout % 2, 1000, 1000, (*index)++, state, false, layout);
      aotk_test_run_with(fc.name, run_fwd_case, &fc);
    }
  /* q, k and v packed, out heads-outer: the warp-specialized kernel all the same, storing O by its masked
   * stores (out is not TMA-writable: no FLAG_O_TMA, O's descriptor encoded over v and unused). */
  for (int h = 64; h <= 256; h *= 2)
    for (int causal = 0; causal < 2; causal++) {
      make_case_in(&fc, dtypes[causal], h, causal, 1000, 777, (*index)++, state, false, AOTK__LAYOUT_CONTIGUOUS);
      fc.check.out_permuted = 1;
      strncat(fc.name, " out=permuted", sizeof fc.name - strlen(fc.name) - 1);
      aotk_test_run_with(fc.name, run_fwd_case, &fc);
    }
}

/* Each case's choice was checked against the rule; this catches a rule that never fires on an H100. */
static void test_tma_was_used(void) {
  printf("    cases that ran the TMA kernel: %d, the warp-specialized kernel: %d (%d with three warpgroups, %d "
         "its short causal tile) (GPU sm_%d)\n", tma_cases, hopper_cases, wg3_cases, short_causal_cases,
         compute_capability);
  if (compute_capability != 90) {
    TEST_SKIP("the TMA kernels run on sm_90 only");
    return;
  }
  CHECK_MSG(tma_cases >= 20, "only %d cases ran the TMA kernel", tma_cases);
  CHECK_MSG(hopper_cases >= 40, "only %d cases ran the warp-specialized kernel", hopper_cases);
  CHECK_MSG(wg3_cases >= 6, "only %d cases ran the three-warpgroup kernel", wg3_cases);
  CHECK_MSG(short_causal_cases >= 10, "only %d cases ran the short causal tile", short_causal_cases);
}

/* Several threads make the first calls of one kernel at once: the image must load exactly once and
 * every thread's result must be right. Runs first, before anything has loaded. */
typedef struct thread_job {
  aotk__fwd_check_case check;
  aotk_status status;
  aotk__fwd_check_result result;
} thread_job;

static void *thread_main(void *argument) {
  thread_job *job = argument;
  CUstream own_stream = NULL;
  if (driver->cuCtxSetCurrent(context) != CUDA_SUCCESS ||
      driver->cuStreamCreate(&own_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    job->status = AOTK_ERROR_CUDA;
    return NULL;
  }
  job->check.stream = (aotk_stream)own_stream;
  job->status = aotk__check_attn_fwd(driver, &job->check, &job->result);
  driver->cuStreamDestroy(own_stream);
  return NULL;
}

static void test_concurrent_first_use(void) {
  enum { THREADS = 8 };
  thread_job jobs[THREADS];
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++) {
    aotk__fwd_check_case c = {.dtype = AOTK_DTYPE_BFLOAT16, .batch = 1, .seqlen_q = 300, .seqlen_k = 333,
                              .heads_q = 4, .heads_kv = 2, .head_dim = 128, .causal = i % 2,
                              .layout = AOTK__LAYOUT_CONTIGUOUS, .with_lse = 1, .rows_per_head = 40,
                              .seed = seed + 99u * (uint64_t)i};
    jobs[i].check = c;
    CHECK(pthread_create(&threads[i], NULL, thread_main, &jobs[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(threads[i], NULL);
    CHECK_MSG(jobs[i].status == AOTK_OK, "thread %d: %s: %s", i, aotk_status_name(jobs[i].status),
              jobs[i].result.detail);
    CHECK_MSG(jobs[i].status != AOTK_OK || jobs[i].result.passed, "thread %d: %s", i, jobs[i].result.detail);
  }
}

/* A call captured in a CUDA graph and replayed gives the same bits as the call made directly. */
static void test_graph_capture(void) {
  const int64_t B = 2, S = 257, H = 8, D = 64;
  const size_t elements = (size_t)(B * S * H * D), bytes = elements * 2;
  uint16_t *host = malloc(bytes), *eager = malloc(bytes), *replayed = malloc(bytes);
  CUdeviceptr q = 0, k = 0, v = 0, out = 0;
  CUgraph graph = NULL;
  CUgraphExec exec = NULL;
  uint64_t state = seed ^ 0x5eedull;
  for (size_t i = 0; i < elements; i++) host[i] = (uint16_t)(0x3c00u ^ (next_random(&state) & 0x83ffu)); /* fp16, |x| in [1, 2) */
  CHECK(driver->cuMemAlloc(&q, bytes) == CUDA_SUCCESS && driver->cuMemAlloc(&k, bytes) == CUDA_SUCCESS &&
        driver->cuMemAlloc(&v, bytes) == CUDA_SUCCESS && driver->cuMemAlloc(&out, bytes) == CUDA_SUCCESS);
  CHECK(driver->cuMemcpyHtoD(q, host, bytes) == CUDA_SUCCESS);
  for (size_t i = 0; i < elements; i++) host[i] = (uint16_t)(0x3c00u ^ (next_random(&state) & 0x83ffu));
  CHECK(driver->cuMemcpyHtoD(k, host, bytes) == CUDA_SUCCESS);
  CHECK(driver->cuMemcpyHtoD(v, host, bytes) == CUDA_SUCCESS);
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = aotk_tensor_4d((void *)(uintptr_t)q, AOTK_DTYPE_FLOAT16, B, S, H, D);
  params.k = aotk_tensor_4d((void *)(uintptr_t)k, AOTK_DTYPE_FLOAT16, B, S, H, D);
  params.v = aotk_tensor_4d((void *)(uintptr_t)v, AOTK_DTYPE_FLOAT16, B, S, H, D);
  params.out = aotk_tensor_4d((void *)(uintptr_t)out, AOTK_DTYPE_FLOAT16, B, S, H, D);
  params.causal = 1;
  CHECK(aotk_preload() == AOTK_OK);
  CHECK(aotk_attn_fwd(&params, (aotk_stream)stream) == AOTK_OK);
  CHECK(driver->cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(driver->cuMemcpyDtoH(eager, out, bytes) == CUDA_SUCCESS);
  CHECK(driver->cuMemsetD8(out, 0xff, bytes) == CUDA_SUCCESS);
  /* The memset runs on the legacy stream, which the non-blocking stream does not wait for. */
  CHECK(driver->cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(driver->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS);
  aotk_status captured = aotk_attn_fwd(&params, (aotk_stream)stream);
  CHECK(driver->cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  CHECK_MSG(captured == AOTK_OK, "%s: %s", aotk_status_name(captured), aotk_last_error());
  CHECK(driver->cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  for (int replay = 0; replay < 3; replay++) CHECK(driver->cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  CHECK(driver->cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(driver->cuMemcpyDtoH(replayed, out, bytes) == CUDA_SUCCESS);
  CHECK_MSG(memcmp(eager, replayed, bytes) == 0, "graph replay differs from the direct call");
  if (exec) driver->cuGraphExecDestroy(exec);
  if (graph) driver->cuGraphDestroy(graph);
  CUdeviceptr all[] = {q, k, v, out};
  for (int i = 0; i < 4; i++) if (all[i]) driver->cuMemFree(all[i]);
  free(host);
  free(eager);
  free(replayed);
}

/* The query on this GPU: sm_90 cubins on an H100, and the same answer as the call. */
static void test_query_on_device(void) {
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = aotk_tensor_4d((void *)(uintptr_t)0x100000, AOTK_DTYPE_BFLOAT16, 1, 4096, 16, 128);
  params.k = params.q;
  params.v = params.q;
  params.out = aotk_tensor_4d((void *)(uintptr_t)0x200000, AOTK_DTYPE_BFLOAT16, 1, 4096, 16, 128);
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: %s", aotk_status_name(status), aotk_last_error());
  int major = 0;
  CUdevice device;
  driver->cuCtxGetDevice(&device);
  driver->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  if (major == 9) CHECK_MSG(info.arch == 90 && !info.from_ptx, "arch %d from_ptx %d", info.arch, info.from_ptx);
  CHECK(info.aligned == 1);
  /* One program per query tile, or for the persistent warp-specialized kernel one per SM (512 tiles
   * here, more than an H100's 132 SMs, and non-causal: no balancing fallback). */
  const int64_t tiles = (4096 + info.block_m - 1) / info.block_m * 16;
  int sms = 0;
  driver->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
  const bool persistent = (info.features & AOTK_FEATURE_WARP_SPECIALIZED) != 0;
  CHECK_MSG(info.grid == (persistent && tiles > sms ? sms : tiles), "grid %lld for %lld tiles on %d SMs%s",
            (long long)info.grid, (long long)tiles, sms, persistent ? ", persistent" : "");
  printf("    query: %s (sm_%d%s), %d warps, %d bytes shared, grid %lld\n", info.kernel_name, info.arch,
         info.from_ptx ? " PTX" : "", info.num_warps, info.shared_bytes, (long long)info.grid);
}

/* --- the features ------------------------------------------------------------------------------ */

/* One feature case: batch, heads and layout given; lse on in 4 cases of 5; 12 rows compared per
 * (sequence, head) where a head has more than 1e5 (row, key) pairs, 40 otherwise. */
static void feature_case(fwd_case *fc, aotk_dtype dtype, int64_t head_dim, int causal, int64_t seqlen_q,
                         int64_t seqlen_k, int64_t batch, int64_t heads_q, int64_t heads_kv, aotk__check_layout layout,
                         float softmax_scale, const aotk__check_features *features, int index, bool ptx) {
  memset(fc, 0, sizeof *fc);
  aotk__fwd_check_case *c = &fc->check;
  c->dtype = dtype;
  c->batch = batch;
  c->seqlen_q = seqlen_q;
  c->seqlen_k = seqlen_k;
  c->heads_q = heads_q;
  c->heads_kv = heads_kv;
  c->head_dim = head_dim;
  c->causal = causal;
  c->softmax_scale = softmax_scale;
  c->layout = layout;
  c->with_lse = index % 5 != 4;
  c->features = *features;
  int64_t longest_q = seqlen_q, longest_k = seqlen_k;
  if (features->num_seqs > 0) {
    longest_q = longest_k = 0;
    for (int i = 0; i < features->num_seqs; i++) {
      if (features->seqlens_q[i] > longest_q) longest_q = features->seqlens_q[i];
      if (features->seqlens_k[i] > longest_k) longest_k = features->seqlens_k[i];
    }
  }
  c->rows_per_head = longest_q * longest_k > 100000 ? 12 : 40;
  c->seed = seed + (uint64_t)index * 1000003u + (ptx ? 17 : 0);
  c->stream = (aotk_stream)stream;
  fc->expect_aligned = aotk_gpu_test_expect_aligned(layout, head_dim, features);
  fc->expect_ptx = ptx;
  char label[200];
  aotk_gpu_test_feature_label(label, sizeof label, head_dim, features);
  char lengths[64] = "";
  if (features->num_seqs == 0) {
    snprintf(lengths, sizeof lengths, " sq=%lld sk=%lld b=%lld", (long long)seqlen_q, (long long)seqlen_k,
             (long long)batch);
  }
  snprintf(fc->name, sizeof fc->name, "%s%s d=%lld %s%s hq=%lld hkv=%lld %s%s%s%s", ptx ? "ptx sm_80 " : "",
           aotk_gpu_test_dtype_label(dtype), (long long)head_dim, causal ? "causal" : "full", lengths,
           (long long)heads_q, (long long)heads_kv, aotk__check_layout_name(layout), c->with_lse ? " lse" : "",
           softmax_scale != 0.0f ? " scale" : "", label);
}

static void run_feature_case(fwd_case *fc) { aotk_test_run_with(fc->name, run_fwd_case, fc); }

/* The warp-specialized kernel is persistent (one program per SM walking tiles in rounds, or one per tile
 * where a causal mask would leave the static rounds unequal): problems of hundreds of tiles, so that
 * programs run several tiles each and their K/V rings and Q buffers wrap across tiles, with both causal
 * alignments, GQA and lengths that end mid-tile, at every head dim it has. */
static void persistent_section(int *index) {
  static const struct {
    aotk_dtype dtype;
    int64_t head_dim, batch, seqlen_q, seqlen_k, heads_q, heads_kv;
    int causal, top_left;
  } cases[] = {
      {AOTK_DTYPE_BFLOAT16, 128, 2, 1536, 1536, 32, 8, 0, 0},  /* 768 tiles on 132 programs */
      {AOTK_DTYPE_FLOAT16, 128, 2, 1536, 2000, 32, 8, 1, 0},   /* causal bottom-right */
      {AOTK_DTYPE_BFLOAT16, 128, 3, 1000, 1500, 16, 16, 1, 1}, /* causal top-left */
      {AOTK_DTYPE_FLOAT16, 64, 2, 2047, 2047, 32, 4, 0, 0},   /* two warpgroups: one row short of three */
      {AOTK_DTYPE_BFLOAT16, 64, 2, 2049, 2049, 32, 4, 0, 0},  /* three: 704 tiles of 192 rows, the last of 129 */
      {AOTK_DTYPE_FLOAT16, 64, 1, 2048, 3000, 16, 16, 0, 0},  /* three, seqlen_k != seqlen_q */
      {AOTK_DTYPE_BFLOAT16, 64, 2, 2048, 2048, 16, 2, 1, 1},  /* causal top-left: two */
      {AOTK_DTYPE_BFLOAT16, 64, 4, 1024, 1024, 16, 2, 1, 0},
      {AOTK_DTYPE_BFLOAT16, 256, 2, 1100, 1100, 16, 4, 0, 0},
      {AOTK_DTYPE_FLOAT16, 256, 2, 1100, 900, 16, 4, 1, 0},    /* the first rows see no key */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aotk__check_features f;
    memset(&f, 0, sizeof f);
    f.top_left = cases[i].top_left;
    fwd_case fc;
    feature_case(&fc, cases[i].dtype, cases[i].head_dim, cases[i].causal, cases[i].seqlen_q, cases[i].seqlen_k,
                 cases[i].batch, cases[i].heads_q, cases[i].heads_kv, AOTK__LAYOUT_CONTIGUOUS, 0.0f, &f, (*index)++,
                 false);
    strncat(fc.name, " (persistent)", sizeof fc.name - strlen(fc.name) - 1);
    run_feature_case(&fc);
  }
}

/* The warp-specialized kernel on the varlen layout (packed, read as [1, total, heads * d]): sequences of
 * every kind of length (empty ones, one row, longer than a tile, queries without keys and keys without
 * queries), causal of both alignments, at each head dim it has; run_fwd_case holds each to the rule. */
static void varlen_hopper_section(int *index) {
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_BFLOAT16, AOTK_DTYPE_FLOAT16};
  static const int64_t head_dims[] = {64, 128, 256};
  fwd_case fc;
  for (int which = 0; which < 3; which++)
    for (int h = 0; h < 3; h++) {
      aotk__check_features f;
      memset(&f, 0, sizeof f);
      set_varlen(&f, which + h);
      f.top_left = h == 2;
      feature_case(&fc, dtypes[(which + h) % 2], head_dims[h], (which + h) % 2 == 0 || h == 2, 0, 0, 0, 8, 2,
                   AOTK__LAYOUT_CONTIGUOUS, 0.0f, &f, (*index)++, false);
      run_feature_case(&fc);
    }
  /* d=64 without a mask and a longest sequence of 2048 rows or more: the three-warpgroup kernel, whose
   * 192-row tiles end mid-sequence and read the next sequence's rows (which it must not store). */
  static const int64_t long_mixed[][2] = {{2100, 2100}, {17, 17}, {0, 5}, {191, 193}, {2048, 1500}};
  for (int t = 0; t < 2; t++) {
    aotk__check_features f;
    memset(&f, 0, sizeof f);
    aotk_gpu_test_set_seqlens(&f, long_mixed, 5);
    feature_case(&fc, dtypes[t], 64, 0, 0, 0, 0, 4, 1 + t, AOTK__LAYOUT_CONTIGUOUS, 0.0f, &f, (*index)++, false);
    run_feature_case(&fc);
  }
}

/* The feature matrix (tests/aotk_feature_matrix.h), each case as a forward case. */
static void run_feature_spec(const aotk_feature_spec *spec, int index) {
  fwd_case fc;
  feature_case(&fc, spec->dtype, spec->head_dim, spec->causal, spec->seqlen_q, spec->seqlen_k, spec->batch,
               spec->heads_q, spec->heads_kv, spec->layout, spec->softmax_scale, &spec->features, index, spec->ptx);
  run_feature_case(&fc);
}

/* The host's Philox4x32 against Random123's known-answer vectors (kat_vectors, philox4x32 with 7 and
 * 10 rounds): the model the masks are checked with must itself be Philox. */
static void test_philox_known_answers(void) {
  static const struct {
    int rounds;
    uint32_t counter[4], key[2], expected[4];
  } vectors[] = {
      {7, {0, 0, 0, 0}, {0, 0}, {0x5f6fb709u, 0x0d893f64u, 0x4f121f81u, 0x4f730a48u}},
      {7,
       {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x5207ddc2u, 0x45165e59u, 0x4d8ee751u, 0x8c52f662u}},
      {7,
       {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0x4dfccabau, 0x190a87f0u, 0xc47362bau, 0xb6b5242au}},
      {10, {0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
  };
  for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
    uint32_t words[4];
    memcpy(words, vectors[i].counter, sizeof words);
    aotk__check_philox4x32(words, vectors[i].key, vectors[i].rounds);
    CHECK_MSG(memcmp(words, vectors[i].expected, sizeof words) == 0, "vector %zu: %08x %08x %08x %08x", i, words[0],
              words[1], words[2], words[3]);
  }
}

/* Random 16-bit inputs for the tests below that only look at the mask or compare two runs: fp16
 * |x| in [1, 2) (in bf16 the same bits are small finite numbers), never zero. */
static bool upload_random_bits(CUdeviceptr *pointer, size_t elements, uint64_t *state) {
  uint16_t *host = malloc(elements * 2);
  if (host == NULL) return false;
  for (size_t i = 0; i < elements; i++) host[i] = (uint16_t)(0x3c00u ^ (next_random(state) & 0x83ffu));
  bool ok = driver->cuMemAlloc(pointer, elements * 2) == CUDA_SUCCESS &&
            driver->cuMemcpyHtoD(*pointer, host, elements * 2) == CUDA_SUCCESS;
  free(host);
  return ok;
}

/* One forward's dropout mask for the invariance test: heads_q = MASK_HEADS on one kv head, the mask
 * [batch, MASK_HEADS, seqlen_q, seqlen_k] packed, poisoned with 0xaa first. varlen: every sequence of
 * the same lengths, through cu_seqlens (the mask's layout is then the same). NULL on failure. */
enum { MASK_HEADS = 3 };

typedef struct mask_problem {
  aotk_dtype dtype;
  int64_t batch, seqlen_q, seqlen_k, head_dim;
  int causal, window_left, varlen;
} mask_problem;

static uint8_t *dropout_mask_of(const mask_problem *mp, int64_t rng_seed, int64_t rng_offset, float dropout_p) {
  const int64_t B = mp->batch, SQ = mp->seqlen_q, SK = mp->seqlen_k, D = mp->head_dim;
  const size_t mask_bytes = (size_t)(B * MASK_HEADS * SQ * SK);
  uint8_t *mask = malloc(mask_bytes);
  CUdeviceptr q = 0, k = 0, v = 0, out = 0, rng = 0, device_mask = 0, cu_q = 0, cu_k = 0;
  uint64_t state = seed ^ (uint64_t)(SQ * 7919 + SK);
  bool ok = mask != NULL && upload_random_bits(&q, (size_t)(B * SQ * MASK_HEADS * D), &state) &&
            upload_random_bits(&k, (size_t)(B * SK * D), &state) && upload_random_bits(&v, (size_t)(B * SK * D), &state) &&
            driver->cuMemAlloc(&out, (size_t)(B * SQ * MASK_HEADS * D) * 2) == CUDA_SUCCESS &&
            driver->cuMemAlloc(&rng, 16) == CUDA_SUCCESS && driver->cuMemAlloc(&device_mask, mask_bytes) == CUDA_SUCCESS &&
            driver->cuMemsetD8(device_mask, 0xaa, mask_bytes) == CUDA_SUCCESS;
  const int64_t rng_state[2] = {rng_seed, rng_offset};
  ok = ok && driver->cuMemcpyHtoD(rng, rng_state, sizeof rng_state) == CUDA_SUCCESS;
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  if (mp->varlen) {
    int32_t offsets_q[17], offsets_k[17];
    for (int64_t b = 0; b <= B && b < 17; b++) {
      offsets_q[b] = (int32_t)(b * SQ);
      offsets_k[b] = (int32_t)(b * SK);
    }
    ok = ok && B < 17 && driver->cuMemAlloc(&cu_q, sizeof offsets_q) == CUDA_SUCCESS &&
         driver->cuMemAlloc(&cu_k, sizeof offsets_k) == CUDA_SUCCESS &&
         driver->cuMemcpyHtoD(cu_q, offsets_q, sizeof offsets_q) == CUDA_SUCCESS &&
         driver->cuMemcpyHtoD(cu_k, offsets_k, sizeof offsets_k) == CUDA_SUCCESS;
    params.q = aotk_tensor_3d((void *)(uintptr_t)q, mp->dtype, B * SQ, MASK_HEADS, D);
    params.k = aotk_tensor_3d((void *)(uintptr_t)k, mp->dtype, B * SK, 1, D);
    params.v = aotk_tensor_3d((void *)(uintptr_t)v, mp->dtype, B * SK, 1, D);
    params.out = aotk_tensor_3d((void *)(uintptr_t)out, mp->dtype, B * SQ, MASK_HEADS, D);
    params.cu_seqlens_q = aotk_tensor_1d((void *)(uintptr_t)cu_q, AOTK_DTYPE_INT32, B + 1);
    params.cu_seqlens_k = aotk_tensor_1d((void *)(uintptr_t)cu_k, AOTK_DTYPE_INT32, B + 1);
    params.max_seqlen_q = (int32_t)SQ;
    params.max_seqlen_k = (int32_t)SK;
  } else {
    params.q = aotk_tensor_4d((void *)(uintptr_t)q, mp->dtype, B, SQ, MASK_HEADS, D);
    params.k = aotk_tensor_4d((void *)(uintptr_t)k, mp->dtype, B, SK, 1, D);
    params.v = aotk_tensor_4d((void *)(uintptr_t)v, mp->dtype, B, SK, 1, D);
    params.out = aotk_tensor_4d((void *)(uintptr_t)out, mp->dtype, B, SQ, MASK_HEADS, D);
  }
  params.causal = mp->causal;
  params.window_left = mp->window_left;
  params.dropout_p = dropout_p;
  params.rng_state = aotk_tensor_1d((void *)(uintptr_t)rng, AOTK_DTYPE_INT64, 2);
  params.dropout_mask = aotk_tensor_4d((void *)(uintptr_t)device_mask, AOTK_DTYPE_UINT8, B, MASK_HEADS, SQ, SK);
  if (ok) {
    CHECK(driver->cuCtxSynchronize() == CUDA_SUCCESS);
    aotk_status status = aotk_attn_fwd(&params, (aotk_stream)stream);
    CHECK_MSG(status == AOTK_OK, "%s: %s", aotk_status_name(status), aotk_last_error());
    ok = status == AOTK_OK && driver->cuStreamSynchronize(stream) == CUDA_SUCCESS &&
         driver->cuMemcpyDtoH(mask, device_mask, mask_bytes) == CUDA_SUCCESS;
  }
  CHECK_MSG(ok, "could not run the forward for its mask (sq %lld, sk %lld)", (long long)SQ, (long long)SK);
  CUdeviceptr all[] = {q, k, v, out, rng, device_mask, cu_q, cu_k};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (all[i]) driver->cuMemFree(all[i]);
  }
  if (!ok) {
    free(mask);
    return NULL;
  }
  return mask;
}

/* Elements of `mask` [batch, heads, sq, sk] and `base` [batch, heads, base_sq, base_sk] (from batch
 * entry 0) that differ where both have (b, h, i, j). */
static int64_t mask_overlap_differences(const uint8_t *mask, const mask_problem *mp, const uint8_t *base,
                                        const mask_problem *bp) {
  int64_t differences = 0;
  const int64_t batch = mp->batch < bp->batch ? mp->batch : bp->batch;
  const int64_t rows = mp->seqlen_q < bp->seqlen_q ? mp->seqlen_q : bp->seqlen_q;
  const int64_t keys = mp->seqlen_k < bp->seqlen_k ? mp->seqlen_k : bp->seqlen_k;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t h = 0; h < MASK_HEADS; h++)
      for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < keys; j++) {
          differences += mask[((b * MASK_HEADS + h) * mp->seqlen_q + i) * mp->seqlen_k + j] !=
                         base[((b * MASK_HEADS + h) * bp->seqlen_q + i) * bp->seqlen_k + j];
        }
  return differences;
}

/* The mask is a function of (seed, offset, b, h, i, j) only (heads_q fixed, as b and h enter as the
 * stream b * heads_q + h): problems with more rows, fewer keys, a causal window, another head dim and
 * dtype, the varlen layout, or a smaller batch agree with the base wherever both have the element,
 * and the base agrees with the host's model everywhere. */
static void test_dropout_mask_invariance(void) {
  const float p = 0.35f;
  uint64_t state = seed ^ 0xd50ull;
  const int64_t rng_seed = (int64_t)next_random(&state), rng_offset = (int64_t)(next_random(&state) >> 2);
  const mask_problem base_problem = {AOTK_DTYPE_BFLOAT16, 2, 100, 300, 64, 0, -1, 0};
  uint8_t *base = dropout_mask_of(&base_problem, rng_seed, rng_offset, p);
  if (base == NULL) return;
  int64_t model_mismatches = 0;
  for (int64_t b = 0; b < base_problem.batch; b++)
    for (int64_t h = 0; h < MASK_HEADS; h++)
      for (int64_t i = 0; i < base_problem.seqlen_q; i++)
        for (int64_t j = 0; j < base_problem.seqlen_k; j++) {
          bool keep = aotk__check_dropout_keep(rng_seed, rng_offset, p, (uint32_t)(b * MASK_HEADS + h), i, j);
          model_mismatches +=
              base[((b * MASK_HEADS + h) * base_problem.seqlen_q + i) * base_problem.seqlen_k + j] != (keep ? 1 : 0);
        }
  CHECK_MSG(model_mismatches == 0, "%lld elements differ from the host's Philox model", (long long)model_mismatches);
  static const struct {
    const char *what;
    mask_problem problem;
  } variants[] = {
      {"seqlen_q 257", {AOTK_DTYPE_BFLOAT16, 2, 257, 300, 64, 0, -1, 0}},
      {"seqlen_k 129", {AOTK_DTYPE_BFLOAT16, 2, 100, 129, 64, 0, -1, 0}},
      {"causal, window_left 5, d 128, fp16", {AOTK_DTYPE_FLOAT16, 2, 100, 300, 128, 1, 5, 0}},
      {"varlen", {AOTK_DTYPE_BFLOAT16, 2, 100, 300, 64, 0, -1, 1}},
      {"batch 1", {AOTK_DTYPE_BFLOAT16, 1, 100, 300, 64, 0, -1, 0}},
  };
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    uint8_t *mask = dropout_mask_of(&variants[i].problem, rng_seed, rng_offset, p);
    if (mask == NULL) continue;
    int64_t differences = mask_overlap_differences(mask, &variants[i].problem, base, &base_problem);
    CHECK_MSG(differences == 0, "%s: %lld elements differ from the base problem's mask", variants[i].what,
              (long long)differences);
    free(mask);
  }
  free(base);
}

/* A forward with dropout captured in a CUDA graph reads rng_state when it runs: replayed after the
 * offset in device memory changed (a copy outside the graph), it gives a new mask and output, the
 * same bits as a direct call with that offset; and back at the first offset, the first call's bits. */
static void test_graph_capture_dropout(void) {
  const int64_t B = 2, S = 257, H = 4, D = 64;
  const float p = 0.3f;
  const size_t elements = (size_t)(B * S * H * D), bytes = elements * 2, mask_bytes = (size_t)(B * H * S * S);
  uint64_t state = seed ^ 0x6a7full;
  const int64_t rng_seed = (int64_t)next_random(&state);
  const int64_t state_a[2] = {rng_seed, (int64_t)(next_random(&state) >> 2)};
  const int64_t state_b[2] = {rng_seed, state_a[1] + 4096};
  uint16_t *out_a = malloc(bytes), *out_b = malloc(bytes), *out_replay = malloc(bytes);
  uint8_t *mask_a = malloc(mask_bytes), *mask_b = malloc(mask_bytes), *mask_replay = malloc(mask_bytes);
  CUdeviceptr q = 0, k = 0, v = 0, out = 0, mask = 0, rng = 0;
  CUgraph graph = NULL;
  CUgraphExec exec = NULL;
  bool ok = out_a && out_b && out_replay && mask_a && mask_b && mask_replay && upload_random_bits(&q, elements, &state) &&
            upload_random_bits(&k, elements, &state) && upload_random_bits(&v, elements, &state) &&
            driver->cuMemAlloc(&out, bytes) == CUDA_SUCCESS && driver->cuMemAlloc(&mask, mask_bytes) == CUDA_SUCCESS &&
            driver->cuMemAlloc(&rng, 16) == CUDA_SUCCESS;
  CHECK_MSG(ok, "allocation failed");
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = aotk_tensor_4d((void *)(uintptr_t)q, AOTK_DTYPE_FLOAT16, B, S, H, D);
  params.k = aotk_tensor_4d((void *)(uintptr_t)k, AOTK_DTYPE_FLOAT16, B, S, H, D);
  params.v = aotk_tensor_4d((void *)(uintptr_t)v, AOTK_DTYPE_FLOAT16, B, S, H, D);
  params.out = aotk_tensor_4d((void *)(uintptr_t)out, AOTK_DTYPE_FLOAT16, B, S, H, D);
  params.dropout_p = p;
  params.rng_state = aotk_tensor_1d((void *)(uintptr_t)rng, AOTK_DTYPE_INT64, 2);
  params.dropout_mask = aotk_tensor_4d((void *)(uintptr_t)mask, AOTK_DTYPE_UINT8, B, H, S, S);
  /* Sets the state and poisons the outputs (the copy and the memsets run on the legacy stream: wait
   * for them), then runs `launch`, and downloads out and the mask. */
#define RUN_WITH_STATE(rng_values, launch, out_host, mask_host)                                             \
  do {                                                                                                      \
    CHECK(driver->cuMemcpyHtoD(rng, (rng_values), 16) == CUDA_SUCCESS);                                     \
    CHECK(driver->cuMemsetD8(out, 0xff, bytes) == CUDA_SUCCESS);                                            \
    CHECK(driver->cuMemsetD8(mask, 0xaa, mask_bytes) == CUDA_SUCCESS);                                      \
    CHECK(driver->cuCtxSynchronize() == CUDA_SUCCESS);                                                      \
    launch;                                                                                                 \
    CHECK(driver->cuStreamSynchronize(stream) == CUDA_SUCCESS);                                             \
    CHECK(driver->cuMemcpyDtoH((out_host), out, bytes) == CUDA_SUCCESS);                                    \
    CHECK(driver->cuMemcpyDtoH((mask_host), mask, mask_bytes) == CUDA_SUCCESS);                             \
  } while (0)
  if (ok) {
    CHECK(aotk_preload() == AOTK_OK);
    RUN_WITH_STATE(state_a, CHECK(aotk_attn_fwd(&params, (aotk_stream)stream) == AOTK_OK), out_a, mask_a);
    RUN_WITH_STATE(state_b, CHECK(aotk_attn_fwd(&params, (aotk_stream)stream) == AOTK_OK), out_b, mask_b);
    CHECK_MSG(memcmp(mask_a, mask_b, mask_bytes) != 0, "two offsets gave the same mask");
    CHECK_MSG(memcmp(out_a, out_b, bytes) != 0, "two offsets gave the same output");
    /* Captured while rng_state holds the first offset. */
    CHECK(driver->cuMemcpyHtoD(rng, state_a, 16) == CUDA_SUCCESS);
    CHECK(driver->cuCtxSynchronize() == CUDA_SUCCESS);
    CHECK(driver->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS);
    aotk_status captured = aotk_attn_fwd(&params, (aotk_stream)stream);
    CHECK(driver->cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
    CHECK_MSG(captured == AOTK_OK, "%s: %s", aotk_status_name(captured), aotk_last_error());
    CHECK(graph != NULL && driver->cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  }
  if (exec != NULL) {
    RUN_WITH_STATE(state_b, CHECK(driver->cuGraphLaunch(exec, stream) == CUDA_SUCCESS), out_replay, mask_replay);
    CHECK_MSG(memcmp(mask_replay, mask_b, mask_bytes) == 0, "the replay under the new offset differs from the direct call's mask");
    CHECK_MSG(memcmp(out_replay, out_b, bytes) == 0, "the replay under the new offset differs from the direct call's output");
    CHECK_MSG(memcmp(mask_replay, mask_a, mask_bytes) != 0, "the replay kept the captured offset's mask");
    int64_t model_mismatches = 0;
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < S; i++)
          for (int64_t j = 0; j < S; j++) {
            bool keep = aotk__check_dropout_keep(state_b[0], state_b[1], p, (uint32_t)(b * H + h), i, j);
            model_mismatches += mask_replay[((b * H + h) * S + i) * S + j] != (keep ? 1 : 0);
          }
    CHECK_MSG(model_mismatches == 0, "%lld replayed mask elements differ from the host's model",
              (long long)model_mismatches);
    RUN_WITH_STATE(state_a, CHECK(driver->cuGraphLaunch(exec, stream) == CUDA_SUCCESS), out_replay, mask_replay);
    CHECK_MSG(memcmp(mask_replay, mask_a, mask_bytes) == 0 && memcmp(out_replay, out_a, bytes) == 0,
              "the replay under the first offset differs from the first direct call");
  }
#undef RUN_WITH_STATE
  if (exec) driver->cuGraphExecDestroy(exec);
  if (graph) driver->cuGraphDestroy(graph);
  CUdeviceptr all[] = {q, k, v, out, mask, rng};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (all[i]) driver->cuMemFree(all[i]);
  }
  free(out_a);
  free(out_b);
  free(out_replay);
  free(mask_a);
  free(mask_b);
  free(mask_replay);
}

int main(void) {
  if (!aotk_gpu_test_setup()) return aotk_gpu_test_skip_all();
  RUN_TEST(test_concurrent_first_use);
  RUN_TEST(test_query_on_device);

  static const int64_t lengths[] = {1, 17, 127, 128, 1000, 4097};
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_BFLOAT16, AOTK_DTYPE_FLOAT16};
  static const int64_t head_dims[] = {64, 128};
  uint64_t state = seed;
  int index = 0;
  fwd_case fc;
  for (int t = 0; t < 2; t++)
    for (int h = 0; h < 2; h++)
      for (int causal = 0; causal < 2; causal++)
        for (int i = 0; i < 6; i++)
          for (int j = 0; j < 6; j++) {
            make_case(&fc, dtypes[t], head_dims[h], causal, lengths[i], lengths[j], index++, &state, false);
            aotk_test_run_with(fc.name, run_fwd_case, &fc);
          }

  /* The path GPUs newer than sm_90 take: the sm_80 PTX, JIT-compiled by the driver. */
  CHECK(aotk_set_image_policy(AOTK_IMAGE_POLICY_SM80_PTX) == AOTK_OK);
  static const int64_t ptx_lengths[][2] = {{17, 127}, {1000, 1000}, {4097, 128}, {128, 4097}};
  for (int t = 0; t < 2; t++)
    for (int h = 0; h < 2; h++)
      for (int causal = 0; causal < 2; causal++)
        for (int i = 0; i < 4; i++) {
          make_case(&fc, dtypes[t], head_dims[h], causal, ptx_lengths[i][0], ptx_lengths[i][1], index++, &state, true);
          aotk_test_run_with(fc.name, run_fwd_case, &fc);
        }
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);

  RUN_TEST(test_graph_capture);
  tma_section(&index, &state);
  persistent_section(&index);
  varlen_hopper_section(&index);

  RUN_TEST(test_philox_known_answers);
  aotk_feature_matrix(AOTK_MATRIX_FWD, &index, &state, run_feature_spec);
  RUN_TEST(test_dropout_mask_invariance);
  RUN_TEST(test_graph_capture_dropout);
  printf("worst error as a fraction of its bound: bf16 %.3f, fp16 %.3f\n", worst_error_fraction[AOTK_DTYPE_BFLOAT16],
         worst_error_fraction[AOTK_DTYPE_FLOAT16]);
  RUN_TEST(test_tma_was_used);
  driver->cuStreamDestroy(stream);
  return aotk_test_finish();
}
