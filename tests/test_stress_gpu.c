/* Many host threads making random calls on the real GPU at once, for a while (issue 14):
 *
 * - valid calls: the attention forward and backward on random small problems (both dtypes, the head
 *   dims the library runs, causal or not, GQA, windows, softcap, ALiBi, sinks, dropout), each on the
 *   thread's own stream and buffers, must return AOTK_OK and leave the stream without a fault; every
 *   CHECK_EVERY-th of a thread goes instead through src/check's float64 reference (the bounds of the
 *   other GPU tests and of aotk_self_test), in any of its layouts, sometimes varlen; so do the
 *   selection, decoding and merge calls the threads make now and then;
 * - invalid calls: a valid small attention problem with one mutation the header says must be refused
 *   (a NULL pointer, struct_size, strides, dtypes, ranks, shapes, head dims, scalars, the workspace: the
 *   kinds of edits fuzz_api.c makes) must return that status with a message; every
 *   POISON_CHECK_EVERY-th also checks that the thread's poisoned outputs kept every byte (validation is
 *   host code, which fuzz_api and stress_api exercise over every entry point; here it meets the GPU);
 * - memory: device free memory (cuMemGetInfo) and the process's resident set (/proc/self/statm), taken
 *   with every thread parked after a warm-up and again at the end: the first may differ by less than
 *   DEVICE_TOLERANCE_MIB, the second grow by less than HOST_TOLERANCE_MIB;
 * - hangs: the main thread waits for the threads with deadlines; a thread not back HANG_MARGIN_SECONDS
 *   after a phase's end fails the run, which prints what each thread was doing.
 *
 *   test_stress_gpu [seconds]   (default 30, or AOTK_STRESS_SECONDS; threads: AOTK_STRESS_THREADS, 8)
 *
 * The seconds are the measured phase; a warm-up of a fifth of them (2 to 10 s) comes first. Exits 77
 * without a GPU. The seed is printed; threads interleave differently on each run, so a failure is
 * reported with its whole problem (and the checked ones with their seed), not replayed from the seed.
 */
#define _GNU_SOURCE /* pthread_condattr_setclock, clock_gettime, setenv, mallopt under -std=c11 */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "aotk.h"
#include "aotk_check.h"
#include "aotk_decode_check.h"
#include "aotk_driver.h"
#include "aotk_sel_check.h"
#include "aotk_test_harness.h"
#include "aotk_gpu_test.h"

enum {
  DEFAULT_THREADS = 8,
  MAX_THREADS = 64,
  CHECK_EVERY = 8,        /* every 8th valid attention call of a thread is checked against float64 */
  POISON_CHECK_EVERY = 4, /* every 4th refusal of a thread is checked to have written nothing */
  FAILURES_PRINTED_PER_THREAD = 5,
  /* The largest problem a thread runs on its own buffers: [2, 256, 8, 256]. */
  MAX_BATCH = 2, MAX_SEQLEN = 256, MAX_HEADS_Q = 8, MAX_HEAD_DIM = 256, MAX_SEQS = 4,
  TENSOR_ELEMENTS = MAX_BATCH * MAX_SEQLEN * MAX_HEADS_Q * MAX_HEAD_DIM,
  /* Refused calls get smaller problems (seqlen <= 64, head dims <= 128, 8 heads at most): what they
   * could write lies in the first POISON_BYTES of each output and in the small outputs. */
  POISON_BYTES = 256 << 10,
  SMALL_BYTES = 64 << 10,
};
#define TENSOR_BYTES ((size_t)TENSOR_ELEMENTS * 2)
#define BUFFER_BYTES (4 * TENSOR_BYTES + SMALL_BYTES) /* four tensors, then the small ones */
#define WORKSPACE_BYTES ((size_t)16 << 20)
#define DEVICE_TOLERANCE_MIB 64.0
#define HOST_TOLERANCE_MIB 64.0
#define HANG_MARGIN_SECONDS 120.0
/* The per-thread stack (local memory) the context reserves up front. The driver grows the reservation,
 * for every thread the device can hold (about 270,000 on an H100), the first time a kernel needs more
 * local memory, and never shrinks it: a kernel first reached after the warm-up would look like a leak of
 * hundreds of MiB. 8 KiB is several times the largest spill the kernels have had (2 KiB). */
#define STACK_BYTES 8192

/* Byte offsets in a thread's small inputs, and in its small outputs. */
enum { AT_ALIBI = 0, AT_SINKS = 256, AT_RNG = 512, AT_LSE = 0, AT_DSINKS = 32 << 10 };

/* ---- the driver calls the library's table lacks --------------------------------------------------- */

/* Reached as test_contexts_gpu reaches context creation: by their versioned names. */
typedef CUresult (*mem_get_info_fn)(size_t *free_bytes, size_t *total_bytes);
typedef CUresult (*ctx_set_limit_fn)(int limit, size_t value);
typedef CUresult (*ctx_get_limit_fn)(size_t *value, int limit);
static mem_get_info_fn mem_get_info;
static ctx_set_limit_fn ctx_set_limit;
static ctx_get_limit_fn ctx_get_limit;
enum { LIMIT_STACK_SIZE = 0 }; /* CU_LIMIT_STACK_SIZE */

static void load_extra_driver_calls(void) {
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) return;
  void *info = dlsym(handle, "cuMemGetInfo_v2"), *set = dlsym(handle, "cuCtxSetLimit");
  void *get = dlsym(handle, "cuCtxGetLimit");
  memcpy(&mem_get_info, &info, sizeof info);
  memcpy(&ctx_set_limit, &set, sizeof set);
  memcpy(&ctx_get_limit, &get, sizeof get);
}

/* ---- one thread's state --------------------------------------------------------------------------- */

enum { OP_FWD, OP_BWD, OP_SEL, OP_DECODE, OP_MERGE, OPS };
static const char *const op_names[OPS] = {"forward", "backward", "selection", "decoding", "merge"};

typedef struct worker {
  int index;
  uint64_t random;
  CUstream stream;
  CUdeviceptr memory; /* one allocation: inputs, outputs, workspace */
  CUdeviceptr q, k, v, dout, small_in, out, dq, dk, dv, small_out, workspace;
  unsigned char *downloaded; /* POISON_BYTES, for the refusals' check */
  char setup_error[160];
  /* Written by the thread, read by main after the join; `calls` and `doing` also while it runs. */
  long valid[OPS], refused, checked, poison_checked, valid_attention, failures, stored_out_checked, precision_tails;
  double worst_tail;          /* the largest error / bound among the precision tails (see check_bwd_result) */
  char worst_tail_detail[1400];
  char first_failure[400];
  atomic_long calls;
  _Atomic(const char *) doing;
} worker;

static int thread_count = DEFAULT_THREADS;
static double run_seconds = 30.0, warmup_seconds;
static double warmup_end, run_end; /* CLOCK_MONOTONIC seconds; run_end is written under meet.lock */
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *pointer(CUdeviceptr p) { return (void *)(uintptr_t)p; }
static uint64_t next(worker *w) { return aotk__random_next(&w->random); }
static int64_t pick(worker *w, int64_t low, int64_t high) { return aotk__random_int(&w->random, low, high); }
static aotk_dtype half_dtype(worker *w) { return next(w) % 2 ? AOTK_DTYPE_BFLOAT16 : AOTK_DTYPE_FLOAT16; }
static void set_doing(worker *w, const char *what) { atomic_store_explicit(&w->doing, what, memory_order_relaxed); }

/* The harness's CHECK is the main thread's: a worker keeps its own count and first message, and prints
 * its first few failures as they happen. */
static AOTK_TEST_PRINTF_LIKE(2) void worker_fail(worker *w, const char *format, ...) {
  char message[400];
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof message, format, args);
  va_end(args);
  if (w->failures == 0) snprintf(w->first_failure, sizeof w->first_failure, "%s", message);
  if (w->failures++ < FAILURES_PRINTED_PER_THREAD) {
    pthread_mutex_lock(&print_lock);
    printf("    thread %d: %s\n", w->index, message);
    fflush(stdout);
    pthread_mutex_unlock(&print_lock);
  }
}

/* Setup, random problems, valid and invalid calls. */
#include "stress_gpu_calls.h"

/* ---- the threads, and the main thread's watch ----------------------------------------------------- */

static void one_call(worker *w) {
  const uint64_t kind = next(w) % 100;
  if (kind < 45) { /* attention, the library's main use */
    attn_draw d;
    draw_attn(w, false, &d);
    w->valid[d.backward ? OP_BWD : OP_FWD]++;
    if (w->valid_attention++ % CHECK_EVERY == 0) {
      run_attn_checked(w, &d);
    } else {
      run_attn_unchecked(w, &d);
    }
  } else if (kind < 50) { /* the other calls, every one checked: rarer, since the checks cost more */
    const int op = OP_SEL + (int)(next(w) % 3);
    w->valid[op]++;
    if (op == OP_SEL) run_sel_checked(w);
    if (op == OP_DECODE) run_decode_checked(w);
    if (op == OP_MERGE) run_merge_checked(w);
  } else {
    run_refusal(w);
  }
  atomic_fetch_add_explicit(&w->calls, 1, memory_order_relaxed);
  set_doing(w, "between calls");
}

/* Where the threads park (after the warm-up, at the end), so that memory is measured with every thread
 * idle and holding the same buffers; main waits for them with a deadline. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  int parked, finished, released;
} meet = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void park(worker *w, int stop, const char *where) {
  if (w->stream != NULL) driver->cuStreamSynchronize(w->stream);
  set_doing(w, where);
  pthread_mutex_lock(&meet.lock);
  meet.parked++;
  pthread_cond_broadcast(&meet.changed);
  while (meet.released < stop) pthread_cond_wait(&meet.changed, &meet.lock);
  pthread_mutex_unlock(&meet.lock);
}

/* Main: waits until `count` threads have parked (or finished), until `deadline`; false on time out. */
static bool wait_for(int *counter, int count, double deadline) {
  const struct timespec until = {(time_t)deadline, (long)((deadline - floor(deadline)) * 1e9)};
  pthread_mutex_lock(&meet.lock);
  int result = 0;
  while (*counter < count && result != ETIMEDOUT) result = pthread_cond_timedwait(&meet.changed, &meet.lock, &until);
  const bool all = *counter >= count;
  if (all && counter == &meet.parked) meet.parked = 0;
  pthread_mutex_unlock(&meet.lock);
  return all;
}

static void release(int stop) {
  pthread_mutex_lock(&meet.lock);
  if (stop == 1) run_end = now() + run_seconds;
  meet.released = stop;
  pthread_cond_broadcast(&meet.changed);
  pthread_mutex_unlock(&meet.lock);
}

static void *worker_main(void *argument) {
  worker *w = argument;
  const bool ready = worker_setup(w);
  while (ready && now() < warmup_end) one_call(w);
  park(w, 1, "parked after the warm-up");
  pthread_mutex_lock(&meet.lock);
  const double end = run_end;
  pthread_mutex_unlock(&meet.lock);
  while (ready && now() < end) one_call(w);
  park(w, 2, "parked at the end");
  set_doing(w, "freeing its buffers");
  worker_teardown(w);
  pthread_mutex_lock(&meet.lock);
  meet.finished++;
  pthread_cond_broadcast(&meet.changed);
  pthread_mutex_unlock(&meet.lock);
  return NULL;
}

typedef struct memory_sample {
  bool taken;
  size_t device_free, stack_bytes;
  double resident_mib;
} memory_sample;
static memory_sample after_warmup, at_end;

static void take_sample(memory_sample *s) {
  size_t total = 0;
  s->taken = mem_get_info != NULL && mem_get_info(&s->device_free, &total) == CUDA_SUCCESS;
  if (ctx_get_limit == NULL || ctx_get_limit(&s->stack_bytes, LIMIT_STACK_SIZE) != CUDA_SUCCESS) s->stack_bytes = 0;
  malloc_trim(0); /* free memory glibc keeps inside its arenas: not held, so not counted */
  long size = 0, resident = 0;
  FILE *statm = fopen("/proc/self/statm", "r");
  const bool read = statm != NULL && fscanf(statm, "%ld %ld", &size, &resident) == 2;
  if (statm != NULL) fclose(statm);
  s->resident_mib = read ? (double)resident * (double)sysconf(_SC_PAGESIZE) / 1048576.0 : -1.0;
}

/* A thread that is not back: say what each was doing, then end the case and the binary (the stuck
 * thread cannot be joined, and exit() could wait on it inside the driver). */
static void report_hang(worker *workers, const char *phase) {
  for (int i = 0; i < thread_count; i++) {
    printf("    thread %d: %ld calls, now %s\n", i, atomic_load(&workers[i].calls), atomic_load(&workers[i].doing));
  }
  CHECK_MSG(false, "threads not back %.0f s after %s: a hang", HANG_MARGIN_SECONDS, phase);
  aotk_test_end_case("test_random_calls_from_threads");
  aotk_test_finish();
  fflush(stdout);
  _exit(1);
}

static void print_totals(const worker *workers, double seconds) {
  long valid[OPS] = {0}, calls = 0, valid_all = 0, refused_all = 0, checked = 0, poison = 0, failures = 0, thin = 0;
  long tails = 0;
  double worst_tail = 0;
  const worker *worst = NULL;
  for (int i = 0; i < thread_count; i++) {
    const worker *w = &workers[i];
    for (int op = 0; op < OPS; op++) valid[op] += w->valid[op], valid_all += w->valid[op];
    refused_all += w->refused, checked += w->checked, poison += w->poison_checked, failures += w->failures;
    thin += w->stored_out_checked, tails += w->precision_tails;
    if (w->worst_tail > worst_tail) worst_tail = w->worst_tail, worst = w;
    calls += atomic_load(&w->calls);
  }
  printf("    %d threads, %.1f s (after a %.0f s warm-up; the counts cover both): %ld calls, %ld valid (", thread_count,
         seconds, warmup_seconds, calls, valid_all);
  for (int op = 0; op < OPS; op++) printf("%s%s %ld", op ? ", " : "", op_names[op], valid[op]);
  printf("), %ld invalid; %ld checked against the float64 reference (%ld of them bf16 backwards with "
         "sinks and 1-2 keys, their bound from the stored out), %ld refusals checked to write nothing; %ld failures\n", refused_all,
         checked, thin, poison, failures);
  printf("    precision tails (over the tight bound, within %dx of it, everything else checked): %ld", PRECISION_SLACK,
         tails);
  if (worst != NULL) printf(", the worst %.2fx: %s", worst_tail, worst->worst_tail_detail);
  printf("\n");
}

static void test_random_calls_from_threads(void) {
  static worker workers[MAX_THREADS];
  static pthread_t threads[MAX_THREADS];
  warmup_end = now() + warmup_seconds;
  int started = 0;
  for (; started < thread_count; started++) {
    worker *w = &workers[started];
    w->index = started;
    /* Hashed, not seed + i * the generator's own increment: that would give each thread its neighbour's
     * sequence one draw later, and the threads would soon run the same problems. */
    uint64_t stream_seed = seed + 0x632be59bd9b4e019ull * (uint64_t)(started + 1);
    w->random = aotk__random_next(&stream_seed);
    atomic_init(&w->calls, 0);
    atomic_init(&w->doing, "setting up");
    if (pthread_create(&threads[started], NULL, worker_main, w) != 0) break;
  }
  CHECK_MSG(started == thread_count, "started %d of %d threads", started, thread_count);
  thread_count = started;
  if (!wait_for(&meet.parked, started, warmup_end + HANG_MARGIN_SECONDS)) report_hang(workers, "the warm-up");
  take_sample(&after_warmup);
  const double start = now();
  release(1);
  if (!wait_for(&meet.parked, started, start + run_seconds + HANG_MARGIN_SECONDS)) report_hang(workers, "the run");
  const double seconds = now() - start;
  take_sample(&at_end);
  release(2);
  if (!wait_for(&meet.finished, started, now() + HANG_MARGIN_SECONDS)) report_hang(workers, "the end");
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  print_totals(workers, seconds);
  long calls = 0;
  for (int i = 0; i < started; i++) {
    const worker *w = &workers[i];
    CHECK_MSG(w->setup_error[0] == '\0', "thread %d: %s", i, w->setup_error);
    CHECK_MSG(w->failures == 0, "thread %d: %ld failures, the first: %s", i, w->failures, w->first_failure);
    calls += atomic_load(&w->calls);
  }
  CHECK_MSG(calls > 0, "no call was made");
}

static void test_memory_steady(void) {
  if (!after_warmup.taken || !at_end.taken) {
    CHECK_MSG(false, "no cuMemGetInfo measure (the driver gave no cuMemGetInfo_v2, or it failed)");
    return;
  }
  const double device_used = ((double)after_warmup.device_free - (double)at_end.device_free) / 1048576.0;
  const double host_growth = at_end.resident_mib - after_warmup.resident_mib;
  printf("    device free memory %.1f MiB after the warm-up, %.1f MiB at the end (%+.1f MiB used); resident set "
         "%.1f MiB, %.1f MiB (%+.1f MiB); stack limit %zu, %zu bytes\n",
         (double)after_warmup.device_free / 1048576.0, (double)at_end.device_free / 1048576.0, device_used,
         after_warmup.resident_mib, at_end.resident_mib, host_growth, after_warmup.stack_bytes, at_end.stack_bytes);
  CHECK_MSG(fabs(device_used) < DEVICE_TOLERANCE_MIB, "device memory in use changed by %+.1f MiB (tolerance %.0f)%s",
            device_used, DEVICE_TOLERANCE_MIB,
            at_end.stack_bytes != after_warmup.stack_bytes ? "; the stack limit grew: a kernel first run after the "
                                                             "warm-up needs more local memory than STACK_BYTES"
                                                           : "");
  CHECK_MSG(after_warmup.resident_mib > 0.0 && host_growth < HOST_TOLERANCE_MIB,
            "the resident set grew by %.1f MiB (tolerance %.0f)", host_growth, HOST_TOLERANCE_MIB);
}

static bool read_settings(int argc, char **argv) {
  const char *seconds = argc > 1 ? argv[1] : getenv("AOTK_STRESS_SECONDS");
  if (seconds != NULL && seconds[0] != '\0') run_seconds = strtod(seconds, NULL);
  const char *threads = getenv("AOTK_STRESS_THREADS");
  if (threads != NULL && threads[0] != '\0') thread_count = atoi(threads);
  if (!(run_seconds > 0.0 && run_seconds < 1e6) || thread_count < 1 || thread_count > MAX_THREADS) {
    fprintf(stderr, "usage: %s [seconds > 0] (or AOTK_STRESS_SECONDS; AOTK_STRESS_THREADS from 1 to %d)\n", argv[0],
            MAX_THREADS);
    return false;
  }
  warmup_seconds = fmin(10.0, fmax(2.0, run_seconds / 5.0));
  return true;
}

int main(int argc, char **argv) {
  if (!read_settings(argc, argv)) return 2;
  /* Two things that would read as leaks. Kernel code the driver loads lazily, at a kernel's first launch:
   * loaded eagerly, every kernel preloaded below is on the device before the warm-up. And glibc's mmap
   * threshold, which rises after large frees (the trim threshold with it), after which the checks' big
   * host arrays come from arenas whose freed tops stay resident: fixed, they are mmaps, unmapped when
   * freed (3 threads for 8 s over tests/api's fake driver: the resident set grew 42-57 MiB without, 3 with). */
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  if (!aotk_gpu_test_setup()) return aotk_gpu_test_skip_all();
  load_extra_driver_calls();
  pthread_condattr_t monotonic;
  pthread_condattr_init(&monotonic);
  pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
  pthread_cond_init(&meet.changed, &monotonic);
  if (ctx_set_limit == NULL || ctx_set_limit(LIMIT_STACK_SIZE, STACK_BYTES) != CUDA_SUCCESS) {
    printf("could not set the stack limit to %d bytes\n", STACK_BYTES);
  }
  const aotk_status preloaded = aotk_preload();
  printf("sm_%d, %d threads, %.0f s after a %.0f s warm-up, every %dth valid attention call checked; preload: %s\n",
         compute_capability, thread_count, run_seconds, warmup_seconds, CHECK_EVERY, aotk_status_name(preloaded));
  fflush(stdout);
  RUN_TEST(test_random_calls_from_threads);
  RUN_TEST(test_memory_steady);
  return aotk_test_finish();
}
