/* Contexts, devices, threads and processes (issue 14), on the GPU:
 *
 * - first use concurrent from several threads on every GPU of the machine at once (two or more: each
 *   device's threads run the forward and the backward against the float64 reference; the warp-
 *   specialized kernels need the per-device opt-in to more than 48 KiB of shared memory, which the
 *   library sets once per (kernel, device));
 * - a call on one device after the same kernels ran on another, and calls with another device's
 *   context current while the stream or the tensors belong to the first: a clear status, nothing
 *   written, and the first device still usable;
 * - a context destroyed and created again: device 0's primary context reset (everything of the old
 *   context gone, the library's loaded kernels included on the driver's side) and a created context
 *   destroyed and created again, each followed by checked calls;
 * - fork after first use: the child's calls return a status and do not crash or hang (CUDA does not
 *   carry a context across fork), and the parent goes on working.
 *
 * Runs first, before anything else has touched the library, so that the concurrent first use is one.
 * Parts that need two GPUs are skipped (reported) on one; the whole binary exits 77 with none.
 */
#define _GNU_SOURCE /* fork, kill, alarm, nanosleep, pthread barriers under -std=c11 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "aotk.h"
#include "aotk_check.h"
#include "aotk_driver.h"
#include "aotk_test_harness.h"
#include "aotk_gpu_test.h"

enum { MAX_DEVICES = 8, THREADS_PER_DEVICE = 4 };

/* The three driver calls this test needs beyond the library's table (the library never creates or
 * destroys a context), by their versioned names: through cuGetProcAddress at 12.0 the driver of CUDA 13
 * hands out cuCtxCreate_v4 (which takes a parameter struct), so the names are spelled out. */
typedef CUresult (*ctx_create_fn)(CUcontext *context, unsigned flags, CUdevice device);
typedef CUresult (*ctx_destroy_fn)(CUcontext context);
typedef CUresult (*primary_reset_fn)(CUdevice device);
static ctx_create_fn ctx_create;
static ctx_destroy_fn ctx_destroy;
static primary_reset_fn primary_reset;

static bool load_context_calls(void) {
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) return false;
  void *create = dlsym(handle, "cuCtxCreate_v2"), *destroy = dlsym(handle, "cuCtxDestroy_v2");
  void *reset = dlsym(handle, "cuDevicePrimaryCtxReset_v2");
  memcpy(&ctx_create, &create, sizeof create);
  memcpy(&ctx_destroy, &destroy, sizeof destroy);
  memcpy(&primary_reset, &reset, sizeof reset);
  return ctx_create != NULL && ctx_destroy != NULL && primary_reset != NULL;
}

static int device_count;
static CUcontext primary[MAX_DEVICES];

/* A forward case that runs the warp-specialized kernel on an H100 (d128, packed, aligned) or the
 * pointer kernel elsewhere; `variant` varies the shape and mask so that threads do not all run one row. */
static void fill_fwd_case(aotk__fwd_check_case *c, int variant, aotk_stream on_stream) {
  memset(c, 0, sizeof *c);
  c->dtype = variant % 2 ? AOTK_DTYPE_FLOAT16 : AOTK_DTYPE_BFLOAT16;
  c->batch = 2;
  c->seqlen_q = 300 + 97 * (variant % 3);
  c->seqlen_k = 500 + 61 * (variant % 4);
  c->heads_kv = 2;
  c->heads_q = 4;
  c->head_dim = variant % 4 == 3 ? 64 : 128;
  c->causal = variant % 2;
  c->layout = AOTK__LAYOUT_CONTIGUOUS;
  c->with_lse = 1;
  c->rows_per_head = 24;
  c->seed = seed + 7919u * (uint64_t)variant;
  c->stream = on_stream;
  if (variant % 5 == 2) {
    c->features.window = 1;
    c->features.window_left = 100;
    c->features.window_right = -1;
  }
}

static void fill_bwd_case(aotk__bwd_check_case *c, int variant, aotk_stream on_stream) {
  memset(c, 0, sizeof *c);
  c->dtype = variant % 2 ? AOTK_DTYPE_FLOAT16 : AOTK_DTYPE_BFLOAT16;
  c->batch = 1;
  c->seqlen_q = 257 + 64 * (variant % 3);
  c->seqlen_k = 300 + 33 * (variant % 2);
  c->heads_kv = 2;
  c->heads_q = 4;
  c->head_dim = variant % 3 == 1 ? 64 : 128;
  c->causal = (variant / 2) % 2;
  c->layout = AOTK__LAYOUT_CONTIGUOUS;
  c->deterministic = variant % 2;
  c->seed = seed + 104729u * (uint64_t)variant;
  c->stream = on_stream;
}

/* --- concurrent first use on every device ------------------------------------------------------ */

typedef struct device_job {
  int device, variant;
  pthread_barrier_t *start;
  aotk_status fwd_status, bwd_status;
  aotk__fwd_check_result fwd;
  aotk__bwd_check_result bwd;
  char setup_error[96];
} device_job;

static void *device_job_main(void *argument) {
  device_job *job = argument;
  CUstream own = NULL;
  bool ready = driver->cuCtxSetCurrent(primary[job->device]) == CUDA_SUCCESS &&
               driver->cuStreamCreate(&own, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS;
  if (!ready) snprintf(job->setup_error, sizeof job->setup_error, "context or stream of device %d", job->device);
  pthread_barrier_wait(job->start);
  if (!ready) return NULL;
  aotk__fwd_check_case f;
  fill_fwd_case(&f, job->variant, (aotk_stream)own);
  job->fwd_status = aotk__check_attn_fwd(driver, &f, &job->fwd);
  aotk__bwd_check_case b;
  fill_bwd_case(&b, job->variant, (aotk_stream)own);
  job->bwd_status = aotk__check_attn_bwd(driver, &b, &job->bwd);
  driver->cuStreamDestroy(own);
  return NULL;
}

static void test_concurrent_first_use_on_every_device(void) {
  const int devices = device_count < MAX_DEVICES ? device_count : MAX_DEVICES;
  const int count = devices * THREADS_PER_DEVICE;
  device_job jobs[MAX_DEVICES * THREADS_PER_DEVICE];
  pthread_t threads[MAX_DEVICES * THREADS_PER_DEVICE];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)count);
  for (int i = 0; i < count; i++) {
    memset(&jobs[i], 0, sizeof jobs[i]);
    jobs[i].device = i % devices;
    jobs[i].variant = i;
    jobs[i].start = &start;
    jobs[i].fwd_status = jobs[i].bwd_status = AOTK_ERROR_INTERNAL;
    CHECK(pthread_create(&threads[i], NULL, device_job_main, &jobs[i]) == 0);
  }
  for (int i = 0; i < count; i++) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&start);
  int warp_specialized = 0;
  for (int i = 0; i < count; i++) {
    const device_job *j = &jobs[i];
    CHECK_MSG(j->setup_error[0] == '\0', "thread %d: %s", i, j->setup_error);
    if (j->setup_error[0] != '\0') continue;
    CHECK_MSG(j->fwd_status == AOTK_OK && j->fwd.passed, "device %d thread %d forward: %s %s (%s)", j->device, i,
              aotk_status_name(j->fwd_status), j->fwd.kernel_name, j->fwd.detail);
    CHECK_MSG(j->bwd_status == AOTK_OK && j->bwd.passed, "device %d thread %d backward: %s %s (%s)", j->device, i,
              aotk_status_name(j->bwd_status), j->bwd.kernel_name, j->bwd.detail);
    if (strncmp(j->fwd.kernel_name, "attn_fwd_hopper", 15) == 0) warp_specialized++;
  }
  printf("    %d devices x %d threads, first use concurrent: forward and backward checked on each; %d forwards "
         "on the warp-specialized kernel\n",
         devices, THREADS_PER_DEVICE, warp_specialized);
  if (compute_capability == 90) {
    CHECK_MSG(warp_specialized >= devices, "only %d forwards ran the warp-specialized kernel", warp_specialized);
  }
}

/* --- another device's context current ----------------------------------------------------------- */

/* Device 1's context current, every tensor and the stream of device 0. The driver would run the launch
 * in the stream's context (the kernels are context-independent CUkernel handles), with a plan made for
 * device 1 (kernel, grid, the shared-memory opt-in): measured on two H200s before the library checked,
 * the call returned AOTK_OK and wrote device 0's output. The library refuses it: AOTK_ERROR_NO_CONTEXT
 * with a message, device 0's output keeps its poison, and device 1's context is unharmed. Then the same
 * call with device 0 current runs. */
static void test_other_device_current(void) {
  if (device_count < 2) {
    TEST_SKIP("one GPU: no other device to make current");
    return;
  }
  CHECK(driver->cuCtxSetCurrent(primary[0]) == CUDA_SUCCESS);
  const int64_t b = 1, s = 256, h = 2, d = 128;
  const size_t elements = (size_t)(b * s * h * d), bytes = elements * 2;
  CUdeviceptr q = 0, k = 0, v = 0, out = 0;
  if (!aotk_gpu_test_alloc(&q, bytes) || !aotk_gpu_test_alloc(&k, bytes) || !aotk_gpu_test_alloc(&v, bytes) ||
      !aotk_gpu_test_alloc(&out, bytes)) {
    return;
  }
  /* Zero inputs (softmax over equal scores, a finite output) and poisoned output. */
  CHECK(driver->cuMemsetD8(q, 0, bytes) == CUDA_SUCCESS && driver->cuMemsetD8(k, 0, bytes) == CUDA_SUCCESS &&
        driver->cuMemsetD8(v, 0, bytes) == CUDA_SUCCESS && aotk_gpu_test_poison(out, bytes) && aotk_gpu_test_settle());
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = aotk_tensor_4d((void *)(uintptr_t)q, AOTK_DTYPE_BFLOAT16, b, s, h, d);
  params.k = aotk_tensor_4d((void *)(uintptr_t)k, AOTK_DTYPE_BFLOAT16, b, s, h, d);
  params.v = aotk_tensor_4d((void *)(uintptr_t)v, AOTK_DTYPE_BFLOAT16, b, s, h, d);
  params.out = aotk_tensor_4d((void *)(uintptr_t)out, AOTK_DTYPE_BFLOAT16, b, s, h, d);
  params.causal = 1;

  CHECK(driver->cuCtxSetCurrent(primary[1]) == CUDA_SUCCESS);
  aotk_status status = aotk_attn_fwd(&params, (aotk_stream)stream);
  const char *message = aotk_last_error();
  printf("    device 1 current, device 0's stream and tensors: %s (%s)\n", aotk_status_name(status), message);
  CHECK_MSG(status == AOTK_ERROR_NO_CONTEXT && message[0] != '\0', "the call returned %s",
            aotk_status_name(status));
  CHECK(driver->cuCtxSynchronize() == CUDA_SUCCESS); /* device 1's context is not broken */

  CHECK(driver->cuCtxSetCurrent(primary[0]) == CUDA_SUCCESS);
  uint16_t *host = malloc(bytes);
  if (host == NULL) return;
  CHECK(aotk_gpu_test_download(host, out, bytes));
  size_t untouched = 0;
  for (size_t i = 0; i < elements; i++) untouched += host[i] == 0xffff;
  CHECK_MSG(untouched == elements, "%zu of %zu output elements were written by the refused call", elements - untouched,
            elements);
  status = aotk_attn_fwd(&params, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_OK, "device 0 current: %s (%s)", aotk_status_name(status), aotk_last_error());
  CHECK(aotk_gpu_test_synchronize("the forward on device 0"));
  CHECK(aotk_gpu_test_download(host, out, bytes));
  size_t zeros = 0;
  for (size_t i = 0; i < elements; i++) zeros += host[i] == 0 || host[i] == 0x8000;
  CHECK_MSG(zeros == elements, "%zu of %zu outputs are not 0 (the mean of zero values)", elements - zeros, elements);
  free(host);
  aotk_gpu_test_free(&q), aotk_gpu_test_free(&k), aotk_gpu_test_free(&v), aotk_gpu_test_free(&out);
}

/* Every kernel the first test loaded on device 0 runs again on device 1 after device 0 did, and back:
 * the per-device shared-memory opt-in is set for each device the kernel runs on. */
static void test_devices_alternate(void) {
  if (device_count < 2) {
    TEST_SKIP("one GPU");
    return;
  }
  for (int round = 0; round < 4; round++) {
    const int device = round % 2;
    CHECK(driver->cuCtxSetCurrent(primary[device]) == CUDA_SUCCESS);
    CUstream own = NULL;
    CHECK(driver->cuStreamCreate(&own, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
    aotk__fwd_check_case c;
    fill_fwd_case(&c, 40 + round, (aotk_stream)own);
    aotk__fwd_check_result r;
    aotk_status status = aotk__check_attn_fwd(driver, &c, &r);
    CHECK_MSG(status == AOTK_OK && r.passed, "round %d on device %d: %s %s (%s)", round, device,
              aotk_status_name(status), r.kernel_name, r.detail);
    driver->cuStreamDestroy(own);
  }
  CHECK(driver->cuCtxSetCurrent(primary[0]) == CUDA_SUCCESS);
}

/* --- contexts destroyed and created again ------------------------------------------------------- */

static void run_checked_forward_and_backward(const char *when, int variant) {
  CUstream own = NULL;
  CUresult result = driver->cuStreamCreate(&own, CU_STREAM_NON_BLOCKING);
  CHECK_MSG(result == CUDA_SUCCESS, "%s: cuStreamCreate = %d", when, (int)result);
  if (result != CUDA_SUCCESS) return;
  aotk__fwd_check_case f;
  fill_fwd_case(&f, variant, (aotk_stream)own);
  aotk__fwd_check_result fr;
  aotk_status status = aotk__check_attn_fwd(driver, &f, &fr);
  CHECK_MSG(status == AOTK_OK && fr.passed, "%s forward: %s %s (%s)", when, aotk_status_name(status), fr.kernel_name,
            fr.detail);
  aotk__bwd_check_case b;
  fill_bwd_case(&b, variant, (aotk_stream)own);
  aotk__bwd_check_result br;
  status = aotk__check_attn_bwd(driver, &b, &br);
  CHECK_MSG(status == AOTK_OK && br.passed, "%s backward: %s %s (%s)", when, aotk_status_name(status), br.kernel_name,
            br.detail);
  driver->cuStreamDestroy(own);
}

static void test_primary_context_reset(void) {
  CUdevice device;
  CHECK(driver->cuDeviceGet(&device, 0) == CUDA_SUCCESS);
  /* The harness's stream dies with the context: destroy it first, and make a new one after. */
  driver->cuStreamDestroy(stream);
  stream = NULL;
  CHECK(driver->cuCtxSetCurrent(NULL) == CUDA_SUCCESS);
  CUresult result = primary_reset(device);
  CHECK_MSG(result == CUDA_SUCCESS, "cuDevicePrimaryCtxReset = %d", (int)result);
  CUcontext again = NULL;
  CHECK(driver->cuDevicePrimaryCtxRetain(&again, device) == CUDA_SUCCESS);
  /* The retain of the setup and this one: the reset ended the old context whatever its count. */
  primary[0] = again;
  context = again;
  CHECK(driver->cuCtxSetCurrent(again) == CUDA_SUCCESS);
  CHECK(driver->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  run_checked_forward_and_backward("after cuDevicePrimaryCtxReset", 60);
}

static void test_created_context_destroyed_and_created(void) {
  CUdevice device;
  CHECK(driver->cuDeviceGet(&device, 0) == CUDA_SUCCESS);
  for (int round = 0; round < 2; round++) {
    CUcontext created = NULL;
    CUresult result = ctx_create(&created, 0, device);
    CHECK_MSG(result == CUDA_SUCCESS, "cuCtxCreate = %d", (int)result);
    if (result != CUDA_SUCCESS) return;
    char when[64];
    snprintf(when, sizeof when, "in a created context (round %d)", round);
    run_checked_forward_and_backward(when, 70 + round);
    CHECK(ctx_destroy(created) == CUDA_SUCCESS);
  }
  CHECK(driver->cuCtxSetCurrent(primary[0]) == CUDA_SUCCESS);
}

/* --- fork after first use ----------------------------------------------------------------------- */

/* The child calls the forward on the parent's device pointers with the parent's context handle current
 * (what a careless child would do) and exits 0 when the call returned a status other than AOTK_OK with a
 * message, 1 when it returned AOTK_OK, 2 when it could not even start; a crash or a hang (killed after
 * 60 s) fails the test too. The parent then goes on using the GPU. */
static void test_fork_after_first_use(void) {
  const int64_t b = 1, s = 128, h = 2, d = 128;
  const size_t bytes = (size_t)(b * s * h * d) * 2;
  CUdeviceptr q = 0, k = 0, v = 0, out = 0;
  if (!aotk_gpu_test_alloc(&q, bytes) || !aotk_gpu_test_alloc(&k, bytes) || !aotk_gpu_test_alloc(&v, bytes) ||
      !aotk_gpu_test_alloc(&out, bytes)) {
    return;
  }
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = aotk_tensor_4d((void *)(uintptr_t)q, AOTK_DTYPE_BFLOAT16, b, s, h, d);
  params.k = aotk_tensor_4d((void *)(uintptr_t)k, AOTK_DTYPE_BFLOAT16, b, s, h, d);
  params.v = aotk_tensor_4d((void *)(uintptr_t)v, AOTK_DTYPE_BFLOAT16, b, s, h, d);
  params.out = aotk_tensor_4d((void *)(uintptr_t)out, AOTK_DTYPE_BFLOAT16, b, s, h, d);
  fflush(stdout);
  pid_t child = fork();
  CHECK_MSG(child >= 0, "fork failed");
  if (child < 0) return;
  if (child == 0) {
    alarm(60);
    aotk_attn_params bad = params;
    bad.out.dtype = AOTK_DTYPE_FLOAT16; /* validation alone: refused before the driver */
    const aotk_status refused = aotk_attn_fwd(&bad, NULL);
    driver->cuCtxSetCurrent(primary[0]);
    const aotk_status status = aotk_attn_fwd(&params, NULL);
    printf("    child after fork: a bad call %s; a valid one %s (%s)\n", aotk_status_name(refused),
           aotk_status_name(status), aotk_last_error());
    fflush(stdout);
    _exit(refused == AOTK_OK ? 2 : status == AOTK_OK ? 1 : aotk_last_error()[0] == '\0' ? 3 : 0);
  }
  int wstatus = 0;
  pid_t done = 0;
  for (int waited = 0; waited < 700 && (done = waitpid(child, &wstatus, WNOHANG)) == 0; waited++) {
    struct timespec tenth = {0, 100000000};
    nanosleep(&tenth, NULL);
  }
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &wstatus, 0);
    CHECK_MSG(false, "the child hung");
  } else {
    CHECK_MSG(WIFEXITED(wstatus), "the child died of signal %d", WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : -1);
    if (WIFEXITED(wstatus)) {
      CHECK_MSG(WEXITSTATUS(wstatus) == 0,
                "child exit %d (1: the GPU call returned AOTK_OK; 2: a bad call was accepted; 3: no message)",
                WEXITSTATUS(wstatus));
    }
  }
  aotk_gpu_test_free(&q), aotk_gpu_test_free(&k), aotk_gpu_test_free(&v), aotk_gpu_test_free(&out);
  run_checked_forward_and_backward("in the parent after fork", 80);
}

static void test_context_calls_missing(void) { CHECK_MSG(false, "cannot destroy or create contexts"); }

int main(void) {
  if (!aotk_gpu_test_setup()) return aotk_gpu_test_skip_all();
  printf("seed %llu\n", (unsigned long long)seed);
  if (driver->cuDeviceGetCount(&device_count) != CUDA_SUCCESS || device_count < 1) device_count = 1;
  if (device_count > MAX_DEVICES) device_count = MAX_DEVICES;
  primary[0] = context;
  for (int i = 1; i < device_count; i++) {
    CUdevice device;
    if (driver->cuDeviceGet(&device, i) != CUDA_SUCCESS ||
        driver->cuDevicePrimaryCtxRetain(&primary[i], device) != CUDA_SUCCESS) {
      device_count = i;
      break;
    }
  }
  printf("%d GPU(s), device 0 sm_%d\n", device_count, compute_capability);
  RUN_TEST(test_concurrent_first_use_on_every_device);
  RUN_TEST(test_devices_alternate);
  RUN_TEST(test_other_device_current);
  RUN_TEST(test_fork_after_first_use);
  const bool context_calls = load_context_calls();
  if (!context_calls) printf("the driver gave no cuCtxCreate, cuCtxDestroy or cuDevicePrimaryCtxReset\n");
  if (context_calls) RUN_TEST(test_created_context_destroyed_and_created);
  if (context_calls) RUN_TEST(test_primary_context_reset);
  if (!context_calls) RUN_TEST(test_context_calls_missing);
  return aotk_test_finish();
}
