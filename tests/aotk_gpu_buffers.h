/*
 * What the decoding and merge GPU tests (tests/test_decode_gpu.c, tests/test_merge_gpu.c) share: device
 * buffers with a host copy, strided views over them and the check that a call wrote exactly its view,
 * the dtypes' loads and stores, a loop that runs the float64 references on every core, and the worst
 * error as a fraction of its bound per dtype. Static functions, for the one file of a GPU test binary
 * (as aotk_gpu_test.h, which it includes).
 */
#ifndef AOTK_GPU_BUFFERS_H
#define AOTK_GPU_BUFFERS_H

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aotk.h"
#include "aotk_check.h"
#include "aotk_driver.h"
#include "aotk_half.h"
#include "aotk_test_harness.h"
#include "aotk_gpu_test.h"

/* Threads of the reference loop, at most. */
enum { MAX_THREADS = 64 };

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
static size_t round_up16(size_t bytes) { return (bytes + 15) / 16 * 16; }

/* ---- device memory ---------------------------------------------------------------------------- */

static void *host_alloc(int64_t count, size_t size) {
  void *pointer = calloc((size_t)(count > 0 ? count : 1), size);
  CHECK_MSG(pointer != NULL, "out of host memory (%lld x %zu bytes)", (long long)count, size);
  return pointer;
}

/* A host array and its device copy, `elements` of `element_size` bytes. */
typedef struct buffer {
  int64_t elements;
  size_t element_size;
  void *host;
  CUdeviceptr device;
} buffer;

static bool buffer_create(buffer *b, int64_t elements, size_t element_size) {
  b->elements = elements;
  b->element_size = element_size;
  b->host = host_alloc(elements, element_size);
  return b->host != NULL && aotk_gpu_test_alloc(&b->device, (size_t)elements * element_size);
}

static size_t buffer_bytes(const buffer *b) { return (size_t)b->elements * b->element_size; }

static bool buffer_upload(buffer *b) {
  CUresult result = driver->cuMemcpyHtoD(b->device, b->host, buffer_bytes(b));
  CHECK_MSG(result == CUDA_SUCCESS, "cuMemcpyHtoD = %d", (int)result);
  return result == CUDA_SUCCESS;
}

static bool buffer_download(buffer *b) {
  CUresult result = driver->cuMemcpyDtoH(b->host, b->device, buffer_bytes(b));
  CHECK_MSG(result == CUDA_SUCCESS, "cuMemcpyDtoH = %d", (int)result);
  return result == CUDA_SUCCESS;
}

static bool buffer_poison(buffer *b) { return aotk_gpu_test_poison(b->device, buffer_bytes(b)); }

static void buffer_destroy(buffer *b) {
  free(b->host);
  aotk_gpu_test_free(&b->device);
  memset(b, 0, sizeof *b);
}

static bool holds_poison(const buffer *b, int64_t index) {
  const uint8_t *bytes = (const uint8_t *)b->host + (size_t)index * b->element_size;
  for (size_t i = 0; i < b->element_size; i++) {
    if (bytes[i] != 0xff) return false;
  }
  return true;
}

static size_t dtype_bytes(aotk_dtype dtype) { return dtype == AOTK_DTYPE_FLOAT32 ? 4 : 2; }

static const char *dtype_label(aotk_dtype dtype) {
  return dtype == AOTK_DTYPE_FLOAT32 ? "fp32" : aotk_gpu_test_dtype_label(dtype);
}

static void store_value(buffer *b, aotk_dtype dtype, int64_t index, float x) {
  if (dtype == AOTK_DTYPE_FLOAT32) {
    ((float *)b->host)[index] = x;
  } else {
    ((uint16_t *)b->host)[index] = aotk__dtype_bits(x, dtype);
  }
}

static float load_value(const buffer *b, aotk_dtype dtype, int64_t index) {
  if (dtype == AOTK_DTYPE_FLOAT32) return ((const float *)b->host)[index];
  return aotk__dtype_value(((const uint16_t *)b->host)[index], dtype);
}

/* ---- strided views ------------------------------------------------------------------------------ */

/* A view of up to 5 dimensions inside a buffer, in elements; the last dimension is contiguous. */
typedef struct strided {
  int rank;
  int64_t shape[5], strides[5], offset;
} strided;

static int64_t strided_count(const strided *s) {
  int64_t count = 1;
  for (int i = 0; i < s->rank; i++) count *= s->shape[i];
  return count;
}

/* Elements from the buffer's start to the view's last element, inclusive. */
static int64_t strided_span(const strided *s) {
  int64_t last = s->offset;
  for (int i = 0; i < s->rank; i++) last += (s->shape[i] - 1) * s->strides[i];
  return last + 1;
}

/* The buffer index of the view's element number `flat` in row-major order. */
static int64_t strided_at(const strided *s, int64_t flat) {
  int64_t index = s->offset;
  for (int i = s->rank - 1; i >= 0; i--) {
    index += flat % s->shape[i] * s->strides[i];
    flat /= s->shape[i];
  }
  return index;
}

/* Row-major (slack 0), or with the innermost row rounded up to `slack` elements and every stride then
 * `slack` elements longer than it needs, starting `slack` elements into the buffer: a multiple of 16
 * keeps every stride and the start 16-element aligned. */
static strided make_layout(int rank, const int64_t *shape, int64_t slack) {
  strided s;
  memset(&s, 0, sizeof s);
  s.rank = rank;
  for (int i = 0; i < rank; i++) s.shape[i] = shape[i];
  s.strides[rank - 1] = 1;
  for (int i = rank - 2; i >= 0; i--) {
    const int64_t inner = i == rank - 2 && slack > 0 ? round_up(shape[rank - 1], slack) : s.strides[i + 1] * shape[i + 1];
    s.strides[i] = inner + slack;
  }
  s.offset = slack;
  return s;
}

static aotk_tensor tensor_of(const buffer *b, const strided *s, aotk_dtype dtype) {
  aotk_tensor t;
  memset(&t, 0, sizeof t);
  t.data = (void *)(uintptr_t)(b->device + (CUdeviceptr)((size_t)s->offset * b->element_size));
  t.dtype = dtype;
  t.rank = s->rank;
  for (int i = 0; i < s->rank; i++) {
    t.shape[i] = s->shape[i];
    t.strides[i] = s->strides[i];
  }
  return t;
}

/* What aotk__tensor_aligned16 asks of a tensor (include/aotk.h: a 16-byte-aligned pointer, every stride
 * but the last a multiple of 16 elements). */
static bool tensor_aligned16(const aotk_tensor *t) {
  if ((uintptr_t)t->data % 16 != 0) return false;
  for (int i = 0; i < t->rank - 1; i++) {
    if (t->strides[i] % 16 != 0) return false;
  }
  return true;
}

/* Every element of `view` in b no longer holds the poison (when `written`), and every other element of
 * b still does. b holds what was just downloaded. */
static void check_coverage(const buffer *b, const strided *view, bool written, const char *label, const char *name) {
  uint8_t *inside = host_alloc(b->elements, 1);
  if (inside == NULL) return;
  if (written) {
    const int64_t count = strided_count(view);
    for (int64_t flat = 0; flat < count; flat++) inside[strided_at(view, flat)] = 1;
  }
  int64_t unwritten = 0, clobbered = 0, first_clobbered = -1;
  for (int64_t e = 0; e < b->elements; e++) {
    const bool poison_left = holds_poison(b, e);
    unwritten += inside[e] && poison_left;
    if (!inside[e] && !poison_left) {
      if (first_clobbered < 0) first_clobbered = e;
      clobbered++;
    }
  }
  free(inside);
  CHECK_MSG(unwritten == 0 && clobbered == 0,
            "%s: %s: %lld elements unwritten, %lld written outside it%s (first at buffer element %lld)", label, name,
            (long long)unwritten, (long long)clobbered, written ? "" : " (not asked for)", (long long)first_clobbered);
}

/* ---- the references, on every core -------------------------------------------------------------- */

typedef void (*item_function)(void *context, int64_t item, void *scratch);

typedef struct parallel_job {
  item_function function;
  void *context;
  int64_t count;
  size_t scratch_bytes;
  _Atomic int64_t next;
} parallel_job;

static void *parallel_worker(void *argument) {
  parallel_job *job = argument;
  void *scratch = malloc(job->scratch_bytes > 0 ? job->scratch_bytes : 1);
  if (scratch == NULL) return NULL; /* the other workers take the items; parallel_for checks they did */
  for (;;) {
    const int64_t item = atomic_fetch_add(&job->next, 1);
    if (item >= job->count) break;
    job->function(job->context, item, scratch);
  }
  free(scratch);
  return NULL;
}

/* function(context, item, scratch) for every item in [0, count), each worker with its own scratch. */
static bool parallel_for(int64_t count, size_t scratch_bytes, item_function function, void *context) {
  parallel_job job;
  memset(&job, 0, sizeof job);
  job.function = function;
  job.context = context;
  job.count = count;
  job.scratch_bytes = scratch_bytes;
  atomic_store(&job.next, 0);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  int threads = online < 1 ? 1 : online > MAX_THREADS ? MAX_THREADS : (int)online;
  if (threads > count) threads = count > 0 ? (int)count : 1;
  pthread_t handles[MAX_THREADS];
  bool started[MAX_THREADS] = {false};
  for (int i = 1; i < threads; i++) started[i] = pthread_create(&handles[i], NULL, parallel_worker, &job) == 0;
  parallel_worker(&job);
  for (int i = 1; i < threads; i++) {
    if (started[i]) pthread_join(handles[i], NULL);
  }
  const bool done = atomic_load(&job.next) >= count;
  CHECK_MSG(done, "the reference's workers could not get scratch memory (%zu bytes)", scratch_bytes);
  return done;
}

static double lse_tolerance(double reference) { return AOTK__CHECK_LSE_ABS + AOTK__CHECK_LSE_REL * fabs(reference); }

/* Worst error as a fraction of its bound, per dtype of out, with the case. */
static double worst_fraction[4];
static char worst_case[4][320];

static void record_fraction(aotk_dtype dtype, double error, double bound, const char *name) {
  if (bound > 0.0 && error / bound > worst_fraction[dtype]) {
    worst_fraction[dtype] = error / bound;
    snprintf(worst_case[dtype], sizeof worst_case[dtype], "%s", name);
  }
}

/* The worst fractions and their cases, at the end of a run. */
static void print_worst_fractions(void) {
  printf("worst error as a fraction of its bound: fp32 %.3f, bf16 %.3f, fp16 %.3f\n",
         worst_fraction[AOTK_DTYPE_FLOAT32], worst_fraction[AOTK_DTYPE_BFLOAT16], worst_fraction[AOTK_DTYPE_FLOAT16]);
  printf("    fp32: %s\n    bf16: %s\n    fp16: %s\n", worst_case[AOTK_DTYPE_FLOAT32], worst_case[AOTK_DTYPE_BFLOAT16],
         worst_case[AOTK_DTYPE_FLOAT16]);
}

#endif /* AOTK_GPU_BUFFERS_H */
