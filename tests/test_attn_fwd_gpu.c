/* The forward on the GPU against the float64 reference: every shipped dtype and head dim, causal and
 * not, sequence lengths {1, 17, 127, 128, 1000, 4097} for q and k, batch 1-4, GQA ratios 1/4/8, four
 * memory layouts (packed, permuted, padded with unaligned strides, unaligned pointer), lse on and off;
 * then the sm_80 PTX on this GPU, concurrent first use from several threads, and CUDA graph capture.
 * Exits 77 (skipped) on a machine with no GPU. */
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


typedef struct fwd_case {
  aotk__fwd_check_case check;
  bool expect_aligned;
  bool expect_ptx;
  char name[320];
} fwd_case;

/* Worst error seen, as a fraction of its bound, per dtype: reported at the end. */
static double worst_error_fraction[4];

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
  aotk_gpu_test_check_kernel_choice(r.kernel_name, c->causal, c->head_dim, &c->features, r.kernel_head_dim_qk,
                                    r.kernel_head_dim_v, r.features);
  /* The forward, and the mask kernel when the mask is asked for (the check asks with dropout). */
  const int32_t launches = c->features.dropout_p > 0.0f ? 2 : 1;
  CHECK_MSG(r.launches == launches, "launches = %d, expected %d", (int)r.launches, (int)launches);
  double bound = 2.0 * r.lowp_max_error + AOTK__CHECK_ERROR_FLOOR;
  if (r.max_error / bound > worst_error_fraction[c->dtype]) {
    worst_error_fraction[c->dtype] = r.max_error / bound;
  }
}

static uint64_t next_random(uint64_t *state) { return aotk_gpu_test_random(state); }

static void make_case(fwd_case *fc, aotk_dtype dtype, int64_t head_dim, int causal, int64_t seqlen_q,
                      int64_t seqlen_k, int index, uint64_t *state, bool ptx) {
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
  c->layout = (aotk__check_layout)(index % AOTK__LAYOUT_COUNT);
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
  CHECK(info.grid == (4096 + info.block_m - 1) / info.block_m * 16);
  printf("    query: %s (sm_%d%s), %d warps, %d bytes shared, grid %lld\n", info.kernel_name, info.arch,
         info.from_ptx ? " PTX" : "", info.num_warps, info.shared_bytes, (long long)info.grid);
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

  printf("worst error as a fraction of its bound: bf16 %.3f, fp16 %.3f\n", worst_error_fraction[AOTK_DTYPE_BFLOAT16],
         worst_error_fraction[AOTK_DTYPE_FLOAT16]);
  driver->cuStreamDestroy(stream);
  return aotk_test_finish();
}
