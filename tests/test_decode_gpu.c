/*
 * Decoding over a KV cache (aotk_attn_decode, aotk_decode_query) and the merge of partial attentions
 * (aotk_attn_merge, aotk_merge_query) on the GPU, against the float64 references of include/aotk.h's
 * "Decoding" and "Merging partial attentions" sections in src/check/aotk_decode_reference.c (which
 * aotk_self_test() shares). Exits 77 (skipped) on a machine with no GPU.
 *
 * Decoding, 51 cases (decode_rows below): fp16 and bf16 at head dims (64,64), (128,128), (256,256),
 * (192,128) (runs in the compiled (256,128)), (256,128), (80,80) and (96,64) (padded into (128,128)),
 * (32,32), and (40,40) in padded strides (its rows cannot be 16-element aligned contiguously);
 * contiguous caches and paged caches with page sizes 1, 3, 16, 64 and 256, whose block tables give each
 * request shuffled page ids interleaved with the other requests' (entries past a request's length point
 * at spare pages); seqlen_q 1, 2, 3, 4, 5 and 16; GQA groups 1, 2, 3, 4, 8, MQA with 16 query heads x 4
 * tokens (one full 64-row tile), G = 32 x 3 tokens and G = 8 x 16 tokens (two row chunks); cache_seqlens
 * per request mixing a long random length, 0, 1, exactly the capacity, capacity + 5 and -3 (both
 * clamped), seqlen_q - 1 (early tokens at negative positions: under causal they see nothing) and random
 * lengths, or lengths all <= seqlen_q, or all full; causal and not; windows left only (37, 64, and 0: the
 * diagonal key alone), left + right without causal (20/3, 50/10, 30/7) and right only (-1/5); softcap 5,
 * 10, 20, 30; ALiBi slopes [heads_q] and [batch, heads_q]; sinks (a row with no key then has lse = sink,
 * out = 0); softmax_scale default and 0.3; num_splits 0 (auto), 1, 3, 7 and 256 (AOTK_DECODE_MAX_SPLITS;
 * 64 ranges of 64 keys at capacity 4096); max_seqlen_k hints below the real lengths; batch up to 16.
 * The caches hold NaN in every key row at or past a request's length and in every padding element, and
 * q's padding is NaN: a kernel that reads past a length, a page it was not given or a padded head-dim
 * column makes NaNs, not small errors.
 *
 * Appending (k_new, v_new; 7 of those cases): contiguous and paged caches (page sizes 1, 16, 64,
 * shuffled pages), seqlen_new = seqlen_q (1 and 4), 3 new tokens for 1 query token and 2 for 4 (the
 * early query tokens then sit at old positions, or negative ones), with and without splits, causal,
 * GQA and not, head dims (64,64), (128,128), (192,128), (256,128), both dtypes, padded strides, a CUDA
 * graph. cache_seqlens per request, in turn: random with room for the new tokens, 0, the capacity minus
 * half the new tokens (an append that crosses the capacity: the tokens past it are dropped), exactly the
 * capacity (all dropped), random up to the capacity, -3 (written from position 0), capacity + 5; and one
 * case with INT32_MAX and INT32_MAX - 1 (nothing written; L_b = capacity). Before each call the caches
 * hold NaN at the rows the append writes; after it, every byte of both caches (spare pages, other
 * requests' pages, padding included) is compared with what it should be: the old contents with exactly
 * the rows at positions max(cache_seqlens[b], 0) + i < capacity replaced by k_new / v_new's bits. The
 * reference runs on that expected cache with L_b = min(max(cache_seqlens[b], 0) + seqlen_new, capacity).
 * Every run starts from the caches as first uploaded, so each checks its own append. Every case without
 * appending checks that the caches come back unchanged.
 *
 * Packed queries (cu_seqlens_q, a prefill over the cache; 6 of those cases): contiguous and paged caches
 * (page sizes 1, 16, 64, shuffled pages), max_seqlen_q 100 to 300, batch 6 with len_q per request, in
 * turn, 0, 1, 17, 100 (over exactly 100 keys: a prefill from an empty cache), max_seqlen_q (over up to
 * 3000 keys) and 5 over 2 keys (its first 3 tokens sit before position 0: out 0 and lse -inf under
 * causal), the others over random lengths from len_q to the capacity; 3 pad rows after
 * cu_seqlens_q[batch], which must keep their poison in out and in lse ([heads_q, total_q]); GQA 1 and 4,
 * causal and not, a left window and a left + right one, sinks, both dtypes, head dims (64,64),
 * (128,128), (192,128), padded strides, one case without lse (then added), one graph replayed with new
 * cache_seqlens. The query must report no split, one launch, no workspace and AOTK_FEATURE_VARLEN.
 *
 * Each decoding case, on the same inputs:
 * - aotk_decode_query: the kernel's dtype and (compiled) head dims, num_splits (1 .. the number asked;
 *   exactly the number asked where the key ranges are whole 64-key blocks; > 1 where the case expects
 *   the automatic choice to split: one request x 2 kv heads at capacity 8192, and 2 x 1 paged),
 *   launches (1, + 1 with splits, + 1 when appending), workspace_bytes against the header's formula,
 *   the grid (batch x kv heads x row chunks x splits) and the AOTK_FEATURE_* bits; the workspace is
 *   exactly that many bytes, poisoned (NULL when it is 0);
 * - out (and lse) poisoned before every run: every element written, padding and lse padding untouched;
 * - out within 2 x the error of a same-precision emulation (fp32 scores and softmax, P rounded to the
 *   dtype before P.V, fp32 accumulation) + AOTK__CHECK_ERROR_FLOOR of the float64 reference; lse within
 *   AOTK__CHECK_LSE_ABS + AOTK__CHECK_LSE_REL |lse|, -inf exactly where a row sees no key and no sink;
 *   rows that see no key have out exactly 0;
 * - the same call again: the same bits (out and lse);
 * - the call with lse dropped: the same out bits and the lse memory untouched (or, for a case without
 *   lse, with lse added: lse against the reference);
 * - (some cases) num_splits 1 and 3, each against the reference and within the sum of their bounds of
 *   each other;
 * - (three cases, one appending) the call captured in a CUDA graph: replayed, the direct call's bits;
 *   replayed after new cache_seqlens were copied in, the reference for the new lengths (appending: the
 *   caches as that append should leave them) and the bits of a direct call with them.
 * - the caches after every run (base, again, lse dropped or added, splits, graph replays): as expected,
 *   byte for byte.
 *
 * Merging, 16 cases (merge_rows below): 1, 2, 5, 17, 40 and 133 partials (both kernels: one partial a
 * step below 4 partials, 16 a step from 4, with a partly filled last step); partials fp32, fp16 and bf16 merged into
 * out fp32, fp16 and bf16 (all 9 pairs); head dims 8, 40, 64, 72, 96, 128, 200, 256; the rank-5 layout
 * contiguous, with odd strides and unaligned pointers (the "any" kernel), with padded strides that are
 * multiples of 16 (the aligned kernel); the packed rank-4 layout; in place (out and lse
 * the first partial's memory; the other partials untouched); lse present and absent (its memory then
 * untouched); sinks. The partials come from random attention rows (37 or 3 keys, scores N(0, 4)) whose
 * keys are dealt at random among the partials, computed in float64 and stored in the partial dtype; a
 * partial that got no key has lse -inf and garbage out (NaN, +-inf, huge), and on purpose: rows with one
 * partial emptied, rows with no key at all (out 0, lse -inf, or the sink's lse), rows with one NaN lse
 * (out and lse NaN). Checked against the float64 attention over all of a row's keys, with the bound
 * 2 x (a float32 merge of the stored partials rounded to out's dtype) + the floor; the query's kernel
 * (aligned or any), grid and num_splits (= partials); the same call twice gives the same bits.
 *
 * Then the refusals on the GPU, of an appending call: a workspace one byte short, a NULL workspace and a
 * misaligned one, misaligned q, k_cache stride, out, k_new and v_new's stride, and causal with
 * window_right 3, each refused with nothing written (out, lse, workspace keep their poison; the caches
 * their first bytes: no append ran); a merge with head_dim 12.
 *
 * Cost: the references are ~10^8 multiply-adds in all, spread over the machine's cores; the GPU work is a
 * few hundred small launches (the first use of each kernel loads its image).
 */
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
#include "aotk_decode_reference.h"
#include "aotk_driver.h"
#include "aotk_half.h"
#include "aotk_random.h"
#include "aotk_test_harness.h"
#include "aotk_gpu_test.h"

enum { MAX_BATCH = 16, MAX_THREADS = 64, MAX_PARTIALS = 160, SPARE_PAGES = 2 };

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

/* ---- decoding: cases ---------------------------------------------------------------------------- */

typedef enum lengths_kind {
  LENGTHS_MIXED,  /* per request, in turn: random in [capacity/2, capacity], 0, capacity, 1, capacity + 5,
                     seqlen_q - 1 (2 when seqlen_q is 1), -3, random in [1, capacity] */
  LENGTHS_RANDOM, /* random in [1, capacity] */
  LENGTHS_FULL,   /* capacity */
  LENGTHS_SHORT,  /* random in [0, seqlen_q]: most tokens at negative positions */
  LENGTHS_APPEND, /* (appending) per request, in turn: random in [0, capacity - seqlen_new], 0,
                     capacity - ceil(seqlen_new / 2) (crosses the capacity), capacity (nothing written),
                     random in [seqlen_new, capacity], -3, capacity + 5. The requests after the crossing
                     one and the full one hold old keys in their first seqlen_new rows, which their own
                     appends do not cover: a token written at the capacity of a contiguous cache lands
                     there, and so does one written through the block table's next entry (the next
                     request's first page). */
  LENGTHS_HUGE,   /* (appending) per request, in turn: INT32_MAX, INT32_MAX - 1, random in
                     [0, capacity - seqlen_new]: max(cache_seqlens, 0) + seqlen_new exceeds int32 */
  LENGTHS_PREFILL, /* (packed queries) per request, in turn, len_q and L_b: 0 and random in [0, capacity];
                      1 and random in [1, capacity]; 17 and random in [17, capacity]; min(100, seqlen_q)
                      and exactly that (a prefill from an empty cache); seqlen_q (max_seqlen_q) and random
                      in [seqlen_q, capacity]; 5 and 2 (len_q > L_b: the first 3 tokens sit before
                      position 0); then 3 pad rows after cu_seqlens_q[batch] */
} lengths_kind;

static const char *const lengths_names[] = {"mixed", "random", "full", "short", "append", "huge", "prefill"};

enum {
  EXTRA_SPLITS = 1,     /* also num_splits 1 and 3, against each other */
  EXTRA_GRAPH = 2,      /* also captured in a graph, replayed with new lengths */
  EXTRA_AUTO_SPLIT = 4, /* the automatic choice must split */
};

typedef struct decode_case {
  aotk_dtype dtype;
  int64_t head_dim_qk, head_dim_v, batch, heads_kv, group, seqlen_q, capacity, page_size; /* page_size 0: contiguous */
  int64_t seqlen_new; /* > 0: k_new and v_new of that many tokens per request are appended */
  int varlen;         /* packed queries (cu_seqlens_q, max_seqlen_q = seqlen_q): LENGTHS_PREFILL */
  lengths_kind lengths;
  int causal;
  int32_t window_left, window_right;
  float softcap, softmax_scale;
  int alibi; /* 0: off; 1: slopes [heads_q]; 2: [batch, heads_q] */
  int sinks, with_lse, padded;
  int32_t num_splits, max_seqlen_k;
  unsigned extra;
  uint64_t seed;
  char name[320];
} decode_case;

/* One row of the matrix; window 0 means none (-1, -1 passed). */
typedef struct decode_row {
  int bf16;
  int64_t dqk, dv, batch, heads_kv, group, seqlen_q, capacity, page_size, seqlen_new;
  int varlen; /* seqlen_q is then max_seqlen_q */
  lengths_kind lengths;
  int causal, window;
  int32_t window_left, window_right;
  float softcap;
  int alibi, sinks, lse, padded;
  int32_t num_splits, max_seqlen_k;
  unsigned extra;
  int scaled;
} decode_row;

static const decode_row decode_rows[] = {
    /* Every head-dim pair in both dtypes; page sizes 1, 3, 16, 64, 256; GQA 1..32, MQA, row chunks. */
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 1, .capacity = 300,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .extra = EXTRA_SPLITS},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 3, .heads_kv = 4, .group = 1, .seqlen_q = 2, .capacity = 200,
     .lengths = LENGTHS_RANDOM, .num_splits = 1},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 7, .heads_kv = 2, .group = 8, .seqlen_q = 1, .capacity = 517,
     .page_size = 3, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .num_splits = 3},
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 8, .heads_kv = 1, .group = 16, .seqlen_q = 4, .capacity = 600,
     .page_size = 64, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1},
    {.bf16 = 0, .dqk = 256, .dv = 256, .batch = 2, .heads_kv = 2, .group = 4, .seqlen_q = 5, .capacity = 700,
     .lengths = LENGTHS_RANDOM, .causal = 1, .lse = 1, .num_splits = 7},
    {.bf16 = 1, .dqk = 256, .dv = 256, .batch = 7, .heads_kv = 1, .group = 8, .seqlen_q = 2, .capacity = 256,
     .page_size = 256, .lengths = LENGTHS_MIXED, .lse = 1},
    {.bf16 = 0, .dqk = 192, .dv = 128, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 3, .capacity = 130,
     .page_size = 1, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1},
    {.bf16 = 1, .dqk = 192, .dv = 128, .batch = 2, .heads_kv = 1, .group = 32, .seqlen_q = 3, .capacity = 500,
     .lengths = LENGTHS_RANDOM, .causal = 1, .lse = 1, .num_splits = 3},
    {.bf16 = 0, .dqk = 80, .dv = 80, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 16, .capacity = 300,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .extra = EXTRA_SPLITS},
    {.bf16 = 1, .dqk = 80, .dv = 80, .batch = 3, .heads_kv = 2, .group = 1, .seqlen_q = 16, .capacity = 100,
     .lengths = LENGTHS_SHORT, .causal = 1, .lse = 1},
    {.bf16 = 0, .dqk = 256, .dv = 128, .batch = 3, .heads_kv = 2, .group = 2, .seqlen_q = 2, .capacity = 400,
     .page_size = 16, .lengths = LENGTHS_RANDOM, .causal = 1, .lse = 1},
    {.bf16 = 1, .dqk = 32, .dv = 32, .batch = 7, .heads_kv = 3, .group = 3, .seqlen_q = 5, .capacity = 128,
     .page_size = 64, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1},
    {.bf16 = 1, .dqk = 40, .dv = 40, .batch = 3, .heads_kv = 2, .group = 4, .seqlen_q = 2, .capacity = 150,
     .page_size = 3, .lengths = LENGTHS_RANDOM, .causal = 1, .lse = 1, .padded = 1},
    {.bf16 = 0, .dqk = 96, .dv = 64, .batch = 7, .heads_kv = 2, .group = 2, .seqlen_q = 1, .capacity = 333,
     .lengths = LENGTHS_MIXED, .lse = 1, .padded = 1, .num_splits = 3},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 7, .heads_kv = 2, .group = 8, .seqlen_q = 2, .capacity = 1000,
     .page_size = 64, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .padded = 1, .scaled = 1},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 7, .heads_kv = 2, .group = 8, .seqlen_q = 16, .capacity = 200,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .num_splits = 3},
    /* Windows. */
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 5, .capacity = 400,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .window = 1, .window_left = 37, .window_right = -1,
     .lse = 1, .num_splits = 3},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 4, .heads_kv = 2, .group = 4, .seqlen_q = 4, .capacity = 300,
     .lengths = LENGTHS_RANDOM, .window = 1, .window_left = 20, .window_right = 3, .lse = 1},
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 3, .heads_kv = 1, .group = 4, .seqlen_q = 3, .capacity = 250,
     .page_size = 64, .lengths = LENGTHS_SHORT, .window = 1, .window_left = -1, .window_right = 5, .lse = 1},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 7, .heads_kv = 2, .group = 2, .seqlen_q = 16, .capacity = 200,
     .page_size = 3, .lengths = LENGTHS_MIXED, .causal = 1, .window = 1, .window_left = 0, .window_right = -1,
     .lse = 1, .num_splits = 3},
    /* Softcap, ALiBi, sinks. */
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 4, .heads_kv = 2, .group = 4, .seqlen_q = 2, .capacity = 500,
     .page_size = 3, .lengths = LENGTHS_RANDOM, .causal = 1, .softcap = 30.0f, .lse = 1, .num_splits = 3},
    {.bf16 = 1, .dqk = 256, .dv = 256, .batch = 3, .heads_kv = 1, .group = 4, .seqlen_q = 1, .capacity = 300,
     .lengths = LENGTHS_MIXED, .softcap = 5.0f, .lse = 1},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 2, .capacity = 300,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .alibi = 1, .lse = 1},
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 4, .heads_kv = 2, .group = 2, .seqlen_q = 3, .capacity = 400,
     .lengths = LENGTHS_RANDOM, .window = 1, .window_left = 50, .window_right = 10, .alibi = 2, .lse = 1,
     .num_splits = 3},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 8, .heads_kv = 2, .group = 4, .seqlen_q = 3, .capacity = 300,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .sinks = 1, .lse = 1, .num_splits = 1},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 7, .heads_kv = 1, .group = 8, .seqlen_q = 2, .capacity = 512,
     .page_size = 1, .lengths = LENGTHS_MIXED, .causal = 1, .sinks = 1, .lse = 1, .num_splits = 7},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 4, .heads_kv = 2, .group = 2, .seqlen_q = 5, .capacity = 1000,
     .page_size = 16, .lengths = LENGTHS_SHORT, .causal = 1, .sinks = 1, .lse = 1, .num_splits = 3},
    /* Everything together. */
    {.bf16 = 1, .dqk = 192, .dv = 128, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 3, .capacity = 400,
     .page_size = 3, .lengths = LENGTHS_MIXED, .causal = 1, .window = 1, .window_left = 64, .window_right = -1,
     .softcap = 20.0f, .alibi = 2, .sinks = 1, .lse = 1, .num_splits = 3, .extra = EXTRA_SPLITS},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 7, .heads_kv = 1, .group = 8, .seqlen_q = 2, .capacity = 300,
     .lengths = LENGTHS_MIXED, .window = 1, .window_left = 30, .window_right = 7, .softcap = 10.0f, .alibi = 1,
     .sinks = 1, .padded = 1, .num_splits = 1},
    /* The split: automatic at 8192 keys, hints below the lengths, exactly 7, the most (256 asked). */
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 1, .heads_kv = 2, .group = 8, .seqlen_q = 1, .capacity = 8192,
     .lengths = LENGTHS_FULL, .causal = 1, .lse = 1, .extra = EXTRA_AUTO_SPLIT | EXTRA_SPLITS},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 2, .heads_kv = 1, .group = 4, .seqlen_q = 2, .capacity = 8192,
     .page_size = 256, .lengths = LENGTHS_RANDOM, .causal = 1, .sinks = 1, .lse = 1, .extra = EXTRA_AUTO_SPLIT},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 3, .heads_kv = 2, .group = 4, .seqlen_q = 1, .capacity = 1000,
     .lengths = LENGTHS_RANDOM, .causal = 1, .lse = 1, .max_seqlen_k = 100, .extra = EXTRA_SPLITS},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 7, .heads_kv = 2, .group = 2, .seqlen_q = 2, .capacity = 2000,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .num_splits = 3, .max_seqlen_k = 200},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 3, .heads_kv = 2, .group = 4, .seqlen_q = 1, .capacity = 448,
     .lengths = LENGTHS_FULL, .lse = 1, .num_splits = 7},
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 1, .heads_kv = 2, .group = 2, .seqlen_q = 2, .capacity = 4096,
     .page_size = 64, .lengths = LENGTHS_FULL, .causal = 1, .sinks = 1, .lse = 1, .num_splits = 256},
    /* CUDA graphs replayed with new lengths. */
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 4, .heads_kv = 2, .group = 4, .seqlen_q = 2, .capacity = 1024,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1, .extra = EXTRA_GRAPH},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 3, .heads_kv = 2, .group = 2, .seqlen_q = 1, .capacity = 300,
     .lengths = LENGTHS_RANDOM, .causal = 1, .sinks = 1, .lse = 1, .num_splits = 1, .extra = EXTRA_GRAPH},
    /* A batch of 16 x 8 kv heads. */
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 16, .heads_kv = 8, .group = 1, .seqlen_q = 1, .capacity = 256,
     .page_size = 16, .lengths = LENGTHS_MIXED, .causal = 1, .lse = 1},
    /* Appending: contiguous and paged (1, 16, 64), seqlen_new = seqlen_q (1, 4) or not (3 for 1, 2 for 4),
     * splits, a graph, and lengths past int32 once the new tokens are added. */
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 1, .capacity = 300,
     .seqlen_new = 1, .lengths = LENGTHS_APPEND, .causal = 1, .lse = 1, .extra = EXTRA_SPLITS},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 7, .heads_kv = 2, .group = 4, .seqlen_q = 4, .capacity = 200,
     .page_size = 16, .seqlen_new = 4, .lengths = LENGTHS_APPEND, .causal = 1, .lse = 1, .num_splits = 3},
    {.bf16 = 0, .dqk = 192, .dv = 128, .batch = 7, .heads_kv = 1, .group = 8, .seqlen_q = 4, .capacity = 130,
     .page_size = 1, .seqlen_new = 4, .lengths = LENGTHS_APPEND, .causal = 1, .lse = 1},
    {.bf16 = 1, .dqk = 256, .dv = 128, .batch = 7, .heads_kv = 2, .group = 2, .seqlen_q = 1, .capacity = 256,
     .page_size = 64, .seqlen_new = 3, .lengths = LENGTHS_APPEND, .causal = 1, .lse = 1, .num_splits = 3},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 4, .heads_kv = 2, .group = 1, .seqlen_q = 4, .capacity = 100,
     .seqlen_new = 2, .lengths = LENGTHS_APPEND, .causal = 1, .padded = 1},
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 4, .heads_kv = 2, .group = 4, .seqlen_q = 1, .capacity = 1024,
     .page_size = 16, .seqlen_new = 1, .lengths = LENGTHS_APPEND, .causal = 1, .lse = 1, .extra = EXTRA_GRAPH},
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 3, .heads_kv = 1, .group = 2, .seqlen_q = 1, .capacity = 100,
     .seqlen_new = 2, .lengths = LENGTHS_HUGE, .causal = 1, .lse = 1},
    /* Packed queries (cu_seqlens_q): a prefill over the cache, contiguous and paged (1, 16, 64), up to 300
     * tokens per request, GQA 1 and 4, causal and not, windows, sinks, a graph replayed with new lengths. */
    {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 6, .heads_kv = 2, .group = 4, .seqlen_q = 300, .capacity = 2000,
     .page_size = 16, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .lse = 1},
    {.bf16 = 1, .dqk = 128, .dv = 128, .batch = 6, .heads_kv = 4, .group = 1, .seqlen_q = 120, .capacity = 700,
     .page_size = 1, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .window = 1, .window_left = 100,
     .window_right = -1, .lse = 1},
    {.bf16 = 0, .dqk = 192, .dv = 128, .batch = 6, .heads_kv = 1, .group = 4, .seqlen_q = 300, .capacity = 1500,
     .page_size = 64, .varlen = 1, .lengths = LENGTHS_PREFILL, .sinks = 1, .lse = 1},
    {.bf16 = 1, .dqk = 64, .dv = 64, .batch = 6, .heads_kv = 2, .group = 1, .seqlen_q = 200, .capacity = 3000,
     .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .sinks = 1, .lse = 1, .extra = EXTRA_GRAPH},
    {.bf16 = 1, .dqk = 192, .dv = 128, .batch = 6, .heads_kv = 2, .group = 4, .seqlen_q = 100, .capacity = 600,
     .varlen = 1, .lengths = LENGTHS_PREFILL, .window = 1, .window_left = 50, .window_right = 20, .lse = 1},
    {.bf16 = 0, .dqk = 128, .dv = 128, .batch = 6, .heads_kv = 2, .group = 4, .seqlen_q = 150, .capacity = 1000,
     .page_size = 16, .varlen = 1, .lengths = LENGTHS_PREFILL, .causal = 1, .padded = 1},
};

static void make_decode_case(decode_case *c, const decode_row *row, int index) {
  memset(c, 0, sizeof *c);
  c->dtype = row->bf16 ? AOTK_DTYPE_BFLOAT16 : AOTK_DTYPE_FLOAT16;
  c->head_dim_qk = row->dqk;
  c->head_dim_v = row->dv;
  c->batch = row->batch;
  c->heads_kv = row->heads_kv;
  c->group = row->group;
  c->seqlen_q = row->seqlen_q;
  c->capacity = row->capacity;
  c->page_size = row->page_size;
  c->seqlen_new = row->seqlen_new;
  c->varlen = row->varlen;
  c->lengths = row->lengths;
  c->causal = row->causal;
  c->window_left = row->window ? row->window_left : -1;
  c->window_right = row->window ? row->window_right : -1;
  c->softcap = row->softcap;
  c->softmax_scale = row->scaled ? 0.3f : 0.0f;
  c->alibi = row->alibi;
  c->sinks = row->sinks;
  c->with_lse = row->lse;
  c->padded = row->padded;
  c->num_splits = row->num_splits;
  c->max_seqlen_k = row->max_seqlen_k;
  c->extra = row->extra;
  c->seed = seed + (uint64_t)index * 1000003u;
  char paging[32], extras[160] = "";
  if (c->page_size > 0) {
    snprintf(paging, sizeof paging, "paged(%lld)", (long long)c->page_size);
  } else {
    snprintf(paging, sizeof paging, "contiguous");
  }
  size_t used = 0;
#define APPEND(...)                                                                               \
  do {                                                                                            \
    int written = used < sizeof extras ? snprintf(extras + used, sizeof extras - used, __VA_ARGS__) : 0; \
    if (written > 0) used += (size_t)written;                                                    \
  } while (0)
  if (c->seqlen_new > 0) APPEND(" +append %lld", (long long)c->seqlen_new);
  if (c->varlen) APPEND(" packed (cu_seqlens_q)");
  if (row->window) APPEND(" window %d/%d", (int)c->window_left, (int)c->window_right);
  if (c->softcap > 0.0f) APPEND(" softcap %g", (double)c->softcap);
  if (c->alibi) APPEND(" alibi[%s]", c->alibi == 2 ? "b,h" : "h");
  if (c->sinks) APPEND(" sinks");
  if (c->max_seqlen_k > 0) APPEND(" hint %d", (int)c->max_seqlen_k);
  if (c->padded) APPEND(" padded");
  if (row->scaled) APPEND(" scale 0.3");
  if (c->extra & EXTRA_AUTO_SPLIT) APPEND(" +auto-split");
  if (c->extra & EXTRA_SPLITS) APPEND(" +splits 1 vs 3");
  if (c->extra & EXTRA_GRAPH) APPEND(" +graph");
#undef APPEND
  snprintf(c->name, sizeof c->name, "decode %s d=%lld/%lld b=%lld hkv=%lld G=%lld sq=%lld cap=%lld %s %s%s%s splits=%d%s",
           aotk_gpu_test_dtype_label(c->dtype), (long long)c->head_dim_qk, (long long)c->head_dim_v,
           (long long)c->batch, (long long)c->heads_kv, (long long)c->group, (long long)c->seqlen_q,
           (long long)c->capacity, paging, lengths_names[c->lengths], c->causal ? " causal" : "",
           c->with_lse ? " lse" : "", (int)c->num_splits, extras);
}

/* ---- decoding: one case's tensors ------------------------------------------------------------- */

typedef struct decode_run {
  const decode_case *c;
  int64_t heads_q, capacity, page_size, pages_per_seq, num_pages;
  int paged;
  float softmax_scale; /* resolved as the library does: 1/sqrt(head_dim_qk) in float32 */
  strided q, k, v, out, lse, k_new, v_new;
  buffer q_buffer, k_buffer, v_buffer, out_buffer, lse_buffer, k_new_buffer, v_new_buffer;
  /* The caches' bytes as first uploaded (every run starts from them), and as a call with the lengths
   * last given to expect_caches must leave them (the same bytes without appending). */
  void *k_initial, *v_initial, *k_expected, *v_expected;
  float *q_values, *k_values, *v_values; /* q and the expected caches as floats (exact), for the reference */
  int32_t *table;                        /* [batch, pages_per_seq] */
  int32_t seqlens[MAX_BATCH];            /* as passed: some outside [0, capacity] */
  int32_t replay_seqlens[MAX_BATCH];     /* the graph replay's */
  /* Packed queries: request b's len_q and first row (cu_seqlens_q), total_q (with the pad rows), and the
   * parts of out [total_q, heads_q, head_dim_v] and lse [heads_q, total_q] the call writes. */
  int32_t q_lengths[MAX_BATCH], cu_seqlens_q[MAX_BATCH + 1];
  int64_t total_q;
  strided out_written, lse_written;
  CUdeviceptr cu_seqlens_q_device;
  float *alibi, *sinks;
  CUdeviceptr table_device, seqlens_device, alibi_device, sinks_device;
  aotk_decode_params params;
  /* The run as src/check/aotk_decode_reference.h sees it, with the lengths as passed (a reference for other
   * lengths swaps in its own cache_seqlens); its paging fields are set with the block table, the rest
   * once the inputs exist. */
  aotk__decode_reference_problem problem;
  uint64_t state;
} decode_run;

typedef struct decode_results {
  double *out; /* [batch, seqlen_q, heads_q, head_dim_v] */
  double *lse; /* [batch, heads_q, seqlen_q] */
} decode_results;

typedef struct decode_reference {
  double *out, *lse;
  float *lowp;   /* the same-precision emulation of out */
  int64_t *keys; /* keys each (batch, head, token) row sees, [batch, heads_q, seqlen_q] */
  double lowp_error, bound;
} decode_reference;

static int64_t out_count(const decode_run *x) {
  return x->c->batch * x->c->seqlen_q * x->heads_q * x->c->head_dim_v;
}
static int64_t row_count(const decode_run *x) { return x->c->batch * x->heads_q * x->c->seqlen_q; }

/* The row of q and out holding token `token` of request b: b * seqlen_q + token, or packed
 * cu_seqlens_q[b] + token. The results and references keep the dense [batch, seqlen_q, ...] order either
 * way; packed, a token at or past len_q_b is no row (out 0 and lse -inf there on both sides). */
static int64_t token_row(const decode_run *x, int64_t b, int64_t token) {
  return x->c->varlen ? x->cu_seqlens_q[b] + token : b * x->c->seqlen_q + token;
}

static int64_t clamp_length(const decode_run *x, int32_t length) {
  return length < 0 ? 0 : length > x->capacity ? x->capacity : length;
}

/* The keys request b attends to: L_b (include/aotk.h; the reference's rule). */
static int64_t attended_length(const decode_run *x, int32_t length) {
  return aotk__decode_reference_length(length, x->c->seqlen_new, x->capacity);
}

static int32_t draw_length(decode_run *x, int64_t b) {
  const int64_t cap = x->capacity, S = x->c->seqlen_q, N = x->c->seqlen_new;
  const int64_t room = cap > N ? cap - N : 0;
  switch (x->c->lengths) {
    case LENGTHS_FULL:
      return (int32_t)cap;
    case LENGTHS_SHORT:
      return (int32_t)aotk__random_int(&x->state, 0, S);
    case LENGTHS_RANDOM:
      return (int32_t)aotk__random_int(&x->state, 1, cap);
    case LENGTHS_APPEND: {
      const int32_t lengths[7] = {(int32_t)aotk__random_int(&x->state, 0, room), 0, (int32_t)(cap - (N + 1) / 2),
                                  (int32_t)cap, (int32_t)aotk__random_int(&x->state, N, cap), -3, (int32_t)cap + 5};
      return lengths[b % 7];
    }
    case LENGTHS_HUGE: {
      const int32_t lengths[3] = {INT32_MAX, INT32_MAX - 1, (int32_t)aotk__random_int(&x->state, 0, room)};
      return lengths[b % 3];
    }
    case LENGTHS_PREFILL: {
      const int64_t len_q = x->q_lengths[b];
      return (int32_t)(b % 6 == 3 ? len_q : b % 6 == 5 ? 2 : aotk__random_int(&x->state, len_q, cap));
    }
    case LENGTHS_MIXED:
      break;
  }
  switch (b % 8) {
    case 0:
      return (int32_t)aotk__random_int(&x->state, cap / 2, cap);
    case 1:
      return 0;
    case 2:
      return (int32_t)cap;
    case 3:
      return 1;
    case 4:
      return (int32_t)cap + 5;
    case 5:
      return S > 1 ? (int32_t)S - 1 : 2;
    case 6:
      return -3;
    default:
      return (int32_t)aotk__random_int(&x->state, 1, cap);
  }
}

/* Buffer index of element 0 of key `key` of request b, kv head h, in cache view `cache`: where the
 * reference reads it (through the block table when paged). */
static int64_t cache_index(const decode_run *x, const strided *cache, int64_t b, int64_t key, int64_t h) {
  return cache->offset + aotk__decode_reference_cache_row(&x->problem, cache->strides, b, key, h);
}

static float *float_copy(const buffer *b, aotk_dtype dtype) {
  float *values = host_alloc(b->elements, sizeof(float));
  if (values != NULL) {
    for (int64_t e = 0; e < b->elements; e++) values[e] = load_value(b, dtype, e);
  }
  return values;
}

static void *bytes_copy(const buffer *b) {
  void *copy = host_alloc(b->elements, b->element_size);
  if (copy != NULL) memcpy(copy, b->host, buffer_bytes(b));
  return copy;
}

/* The caches as a call with lengths `seqlens` must leave them: the first bytes, with new token i of
 * request b (k_new, v_new's bits, head-dim columns only) at position max(seqlens[b], 0) + i where that is
 * below the capacity; and their floats, which the reference reads. */
static void expect_caches(decode_run *x, const int32_t *seqlens) {
  const decode_case *c = x->c;
  const size_t size = x->k_buffer.element_size;
  memcpy(x->k_expected, x->k_initial, buffer_bytes(&x->k_buffer));
  memcpy(x->v_expected, x->v_initial, buffer_bytes(&x->v_buffer));
  for (int64_t b = 0; b < c->batch; b++)
    for (int64_t i = 0; i < c->seqlen_new; i++) {
      const int64_t position = aotk__decode_reference_append_start(seqlens[b]) + i;
      if (position >= x->capacity) break;
      for (int64_t h = 0; h < c->heads_kv; h++) {
        const int64_t new_row = (b * c->seqlen_new + i) * c->heads_kv + h; /* k_new[b, i, h] */
        memcpy((char *)x->k_expected + (size_t)cache_index(x, &x->k, b, position, h) * size,
               (const char *)x->k_new_buffer.host + (size_t)strided_at(&x->k_new, new_row * c->head_dim_qk) * size,
               (size_t)c->head_dim_qk * size);
        memcpy((char *)x->v_expected + (size_t)cache_index(x, &x->v, b, position, h) * size,
               (const char *)x->v_new_buffer.host + (size_t)strided_at(&x->v_new, new_row * c->head_dim_v) * size,
               (size_t)c->head_dim_v * size);
      }
    }
  for (int64_t e = 0; e < x->k_buffer.elements; e++) {
    x->k_values[e] = aotk__dtype_value(((const uint16_t *)x->k_expected)[e], c->dtype);
  }
  for (int64_t e = 0; e < x->v_buffer.elements; e++) {
    x->v_values[e] = aotk__dtype_value(((const uint16_t *)x->v_expected)[e], c->dtype);
  }
}

/* Every run starts from the caches as first uploaded, so that it writes (and is checked for) its own
 * append; without appending nothing writes them. */
static bool restore_caches(decode_run *x) {
  if (x->c->seqlen_new == 0) return true;
  memcpy(x->k_buffer.host, x->k_initial, buffer_bytes(&x->k_buffer));
  memcpy(x->v_buffer.host, x->v_initial, buffer_bytes(&x->v_buffer));
  return buffer_upload(&x->k_buffer) && buffer_upload(&x->v_buffer);
}

/* The caches, downloaded, against `k_want` and `v_want` byte for byte: the first difference named by its
 * block (request or page), row, kv head and column. */
static void check_caches_equal(decode_run *x, const void *k_want, const void *v_want, const char *label) {
  if (!buffer_download(&x->k_buffer) || !buffer_download(&x->v_buffer)) return;
  const buffer *buffers[2] = {&x->k_buffer, &x->v_buffer};
  const void *wanted[2] = {k_want, v_want};
  const strided *views[2] = {&x->k, &x->v};
  static const char *const names[2] = {"k_cache", "v_cache"};
  for (int t = 0; t < 2; t++) {
    const uint16_t *got = buffers[t]->host, *want = wanted[t];
    int64_t differences = 0, first = -1;
    for (int64_t e = 0; e < buffers[t]->elements; e++) {
      if (got[e] != want[e]) {
        if (first < 0) first = e;
        differences++;
      }
    }
    if (differences == 0) continue;
    const strided *view = views[t];
    const int64_t at = first - view->offset;
    CHECK_MSG(false,
              "%s: %s: %lld elements differ from what the call should leave, first at buffer element %lld "
              "(block %lld, row %lld, kv head %lld, column %lld): 0x%04x, expected 0x%04x",
              label, names[t], (long long)differences, (long long)first, (long long)(at / view->strides[0]),
              (long long)(at % view->strides[0] / view->strides[1]), (long long)(at % view->strides[1] / view->strides[2]),
              (long long)(at % view->strides[2]), (unsigned)got[first], (unsigned)want[first]);
  }
}

static void decode_run_destroy(decode_run *x) {
  buffer *buffers[] = {&x->q_buffer,   &x->k_buffer,     &x->v_buffer,    &x->out_buffer,
                       &x->lse_buffer, &x->k_new_buffer, &x->v_new_buffer};
  for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) buffer_destroy(buffers[i]);
  free(x->k_initial);
  free(x->v_initial);
  free(x->k_expected);
  free(x->v_expected);
  free(x->q_values);
  free(x->k_values);
  free(x->v_values);
  free(x->table);
  free(x->alibi);
  free(x->sinks);
  CUdeviceptr *devices[] = {&x->table_device, &x->seqlens_device, &x->alibi_device, &x->sinks_device,
                            &x->cu_seqlens_q_device};
  for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) aotk_gpu_test_free(devices[i]);
}

static bool decode_run_create(decode_run *x, const decode_case *c) {
  memset(x, 0, sizeof *x);
  x->c = c;
  x->state = c->seed;
  const aotk_dtype dtype = c->dtype;
  const int64_t B = c->batch, S = c->seqlen_q, HKV = c->heads_kv, HQ = c->heads_kv * c->group;
  const int64_t DQK = c->head_dim_qk, DV = c->head_dim_v;
  CHECK_MSG(B <= MAX_BATCH, "batch %lld > MAX_BATCH", (long long)B);
  if (B > MAX_BATCH) return false;
  x->heads_q = HQ;
  x->paged = c->page_size > 0;
  x->page_size = c->page_size;
  x->pages_per_seq = x->paged ? ceil_div(c->capacity, c->page_size) : 0;
  x->capacity = x->paged ? x->pages_per_seq * c->page_size : c->capacity;
  x->softmax_scale = c->softmax_scale != 0.0f ? c->softmax_scale : 1.0f / sqrtf((float)DQK);

  /* Lengths; the cache holds keys up to the longest length a run will use, NaN past it (appending: NaN
   * where the new keys go, unless a graph replay's longer length holds keys there). */
  int64_t filled[MAX_BATCH], reached[MAX_BATCH];
  if (c->varlen) {
    const int64_t pattern[6] = {0, 1, 17, S < 100 ? S : 100, S, 5};
    x->cu_seqlens_q[0] = 0;
    for (int64_t b = 0; b < B; b++) {
      x->q_lengths[b] = (int32_t)(pattern[b % 6] < S ? pattern[b % 6] : S);
      x->cu_seqlens_q[b + 1] = x->cu_seqlens_q[b] + x->q_lengths[b];
    }
    x->total_q = x->cu_seqlens_q[B] + 3;
  }
  for (int64_t b = 0; b < B; b++) {
    x->seqlens[b] = draw_length(x, b);
    x->replay_seqlens[b] = (int32_t)aotk__random_int(&x->state, -1, x->capacity + 2);
    filled[b] = clamp_length(x, x->seqlens[b]);
    reached[b] = attended_length(x, x->seqlens[b]);
    const int64_t replay = clamp_length(x, x->replay_seqlens[b]);
    if ((c->extra & EXTRA_GRAPH) && replay > filled[b]) filled[b] = replay;
    if ((c->extra & EXTRA_GRAPH) && attended_length(x, x->replay_seqlens[b]) > reached[b]) {
      reached[b] = attended_length(x, x->replay_seqlens[b]);
    }
    if (filled[b] > reached[b]) reached[b] = filled[b];
  }

  /* Pages: the ones a run reads or appends to, shuffled over all requests; slots past them point at
   * spare pages, which hold only NaN (and which no append may write). */
  if (x->paged) {
    int64_t used[MAX_BATCH], total = 0;
    for (int64_t b = 0; b < B; b++) total += used[b] = ceil_div(reached[b], c->page_size);
    x->num_pages = total + SPARE_PAGES;
    int32_t *order = host_alloc(x->num_pages, sizeof(int32_t));
    x->table = host_alloc(B * x->pages_per_seq, sizeof(int32_t));
    if (order == NULL || x->table == NULL) {
      free(order);
      return false;
    }
    for (int64_t p = 0; p < x->num_pages; p++) order[p] = (int32_t)p;
    aotk__random_shuffle_int32(order, x->num_pages, &x->state);
    int64_t next = 0;
    for (int64_t slot = 0; slot < x->pages_per_seq; slot++)
      for (int64_t b = 0; b < B; b++) {
        x->table[b * x->pages_per_seq + slot] =
            slot < used[b] ? order[next++] : order[total + aotk__random_int(&x->state, 0, SPARE_PAGES - 1)];
      }
    free(order);
    x->problem.block_table = x->table;
    x->problem.block_table_stride = x->pages_per_seq;
    x->problem.page_size = x->page_size;
  }

  const int64_t slack = c->padded ? 16 : 0;
  const int64_t cache_blocks = x->paged ? x->num_pages : B, cache_rows = x->paged ? c->page_size : x->capacity;
  const int64_t q_shape[4] = {B, S, HQ, DQK}, out_shape[4] = {B, S, HQ, DV}, lse_shape[3] = {B, HQ, S};
  const int64_t k_shape[4] = {cache_blocks, cache_rows, HKV, DQK}, v_shape[4] = {cache_blocks, cache_rows, HKV, DV};
  x->q = make_layout(4, q_shape, slack);
  x->k = make_layout(4, k_shape, slack);
  x->v = make_layout(4, v_shape, slack);
  x->out = make_layout(4, out_shape, slack);
  x->lse = make_layout(3, lse_shape, c->padded ? 3 : 0);
  x->out_written = x->out;
  x->lse_written = x->lse;
  if (c->varlen) { /* q, out [total_q, heads_q, d], lse [heads_q, total_q]; the pad rows written by no one */
    const int64_t packed_q[3] = {x->total_q, HQ, DQK}, packed_out[3] = {x->total_q, HQ, DV};
    const int64_t packed_lse[2] = {HQ, x->total_q};
    x->q = make_layout(3, packed_q, slack);
    x->out = make_layout(3, packed_out, slack);
    x->lse = make_layout(2, packed_lse, c->padded ? 3 : 0);
    x->out_written = x->out;
    x->out_written.shape[0] = x->cu_seqlens_q[B];
    x->lse_written = x->lse;
    x->lse_written.shape[1] = x->cu_seqlens_q[B];
  }
  if (!buffer_create(&x->q_buffer, strided_span(&x->q), 2) || !buffer_create(&x->k_buffer, strided_span(&x->k), 2) ||
      !buffer_create(&x->v_buffer, strided_span(&x->v), 2) ||
      !buffer_create(&x->out_buffer, strided_span(&x->out), 2) ||
      !buffer_create(&x->lse_buffer, strided_span(&x->lse), 4)) {
    return false;
  }

  /* Inputs N(0, 1) in the dtype; NaN in q's padding and in every cache element no run may read. */
  for (int64_t e = 0; e < x->q_buffer.elements; e++) store_value(&x->q_buffer, dtype, e, NAN);
  for (int64_t flat = 0; flat < strided_count(&x->q); flat++) {
    store_value(&x->q_buffer, dtype, strided_at(&x->q, flat), aotk__random_normal(&x->state));
  }
  for (int64_t e = 0; e < x->k_buffer.elements; e++) store_value(&x->k_buffer, dtype, e, NAN);
  for (int64_t e = 0; e < x->v_buffer.elements; e++) store_value(&x->v_buffer, dtype, e, NAN);
  for (int64_t b = 0; b < B; b++)
    for (int64_t key = 0; key < filled[b]; key++)
      for (int64_t h = 0; h < HKV; h++) {
        const int64_t k_row = cache_index(x, &x->k, b, key, h), v_row = cache_index(x, &x->v, b, key, h);
        for (int64_t d = 0; d < DQK; d++) store_value(&x->k_buffer, dtype, k_row + d, aotk__random_normal(&x->state));
        for (int64_t d = 0; d < DV; d++) store_value(&x->v_buffer, dtype, v_row + d, aotk__random_normal(&x->state));
      }
  /* The new keys and values N(0, 1); their padding a finite value the caches' padding (NaN) does not
   * hold, so that a padding column copied into the cache shows. */
  if (c->seqlen_new > 0) {
    const int64_t k_new_shape[4] = {B, c->seqlen_new, HKV, DQK}, v_new_shape[4] = {B, c->seqlen_new, HKV, DV};
    x->k_new = make_layout(4, k_new_shape, slack);
    x->v_new = make_layout(4, v_new_shape, slack);
    if (!buffer_create(&x->k_new_buffer, strided_span(&x->k_new), 2) ||
        !buffer_create(&x->v_new_buffer, strided_span(&x->v_new), 2)) {
      return false;
    }
    buffer *news[2] = {&x->k_new_buffer, &x->v_new_buffer};
    const strided *views[2] = {&x->k_new, &x->v_new};
    for (int t = 0; t < 2; t++) {
      for (int64_t e = 0; e < news[t]->elements; e++) store_value(news[t], dtype, e, 77.0f);
      for (int64_t flat = 0; flat < strided_count(views[t]); flat++) {
        store_value(news[t], dtype, strided_at(views[t], flat), aotk__random_normal(&x->state));
      }
    }
    if (!buffer_upload(&x->k_new_buffer) || !buffer_upload(&x->v_new_buffer)) return false;
  }
  x->k_initial = bytes_copy(&x->k_buffer);
  x->v_initial = bytes_copy(&x->v_buffer);
  x->k_expected = bytes_copy(&x->k_buffer);
  x->v_expected = bytes_copy(&x->v_buffer);
  x->q_values = float_copy(&x->q_buffer, dtype);
  x->k_values = host_alloc(x->k_buffer.elements, sizeof(float));
  x->v_values = host_alloc(x->v_buffer.elements, sizeof(float));
  if (x->k_initial == NULL || x->v_initial == NULL || x->k_expected == NULL || x->v_expected == NULL ||
      x->q_values == NULL || x->k_values == NULL || x->v_values == NULL) {
    return false;
  }
  expect_caches(x, x->seqlens);
  if (!buffer_upload(&x->q_buffer) || !buffer_upload(&x->k_buffer) || !buffer_upload(&x->v_buffer)) return false;
  if (!aotk_gpu_test_upload(&x->seqlens_device, x->seqlens, (size_t)B * sizeof(int32_t))) return false;
  if (x->paged && !aotk_gpu_test_upload(&x->table_device, x->table, (size_t)(B * x->pages_per_seq) * sizeof(int32_t))) return false;
  if (c->alibi) {
    const int64_t count = c->alibi == 2 ? B * HQ : HQ;
    x->alibi = host_alloc(count, sizeof(float));
    if (x->alibi == NULL) return false;
    for (int64_t i = 0; i < count; i++) x->alibi[i] = (float)(0.25 * aotk__random_uniform(&x->state));
    if (!aotk_gpu_test_upload(&x->alibi_device, x->alibi, (size_t)count * sizeof(float))) return false;
  }
  if (c->sinks) {
    x->sinks = host_alloc(HQ, sizeof(float));
    if (x->sinks == NULL) return false;
    for (int64_t h = 0; h < HQ; h++) x->sinks[h] = 1.5f * aotk__random_normal(&x->state);
    x->sinks[0] = 4.0f; /* one sink that outweighs most rows' keys */
    if (!aotk_gpu_test_upload(&x->sinks_device, x->sinks, (size_t)HQ * sizeof(float))) return false;
  }

  aotk__decode_reference_problem *problem = &x->problem;
  problem->batch = B;
  problem->seqlen_q = S;
  problem->heads_q = HQ;
  problem->heads_kv = HKV;
  problem->head_dim_qk = DQK;
  problem->head_dim_v = DV;
  problem->q = x->q_values + x->q.offset;
  if (c->varlen) { /* [total_q, heads_q, head_dim_qk]: rows cu_seqlens_q[b] + token */
    problem->cu_seqlens_q = x->cu_seqlens_q;
    problem->q_strides[1] = x->q.strides[0];
    problem->q_strides[2] = x->q.strides[1];
  } else {
    for (int i = 0; i < 3; i++) problem->q_strides[i] = x->q.strides[i];
  }
  problem->k_cache = x->k_values + x->k.offset;
  problem->v_cache = x->v_values + x->v.offset;
  for (int i = 0; i < 3; i++) {
    problem->k_strides[i] = x->k.strides[i];
    problem->v_strides[i] = x->v.strides[i];
  }
  problem->capacity = x->capacity;
  problem->cache_seqlens = x->seqlens;
  problem->seqlen_new = c->seqlen_new;
  problem->softmax_scale = x->softmax_scale;
  problem->causal = c->causal;
  problem->window_left = c->window_left;
  problem->window_right = c->window_right;
  problem->softcap = c->softcap;
  problem->alibi_slopes = x->alibi;
  problem->alibi_batch_stride = c->alibi == 2 ? HQ : 0;
  problem->sinks = x->sinks;
  problem->dtype = (int)dtype;

  aotk_decode_params params = AOTK_DECODE_PARAMS_INIT;
  params.q = tensor_of(&x->q_buffer, &x->q, dtype);
  params.k_cache = tensor_of(&x->k_buffer, &x->k, dtype);
  params.v_cache = tensor_of(&x->v_buffer, &x->v, dtype);
  if (x->paged) {
    params.block_table = aotk_tensor_2d((void *)(uintptr_t)x->table_device, AOTK_DTYPE_INT32, B, x->pages_per_seq);
  }
  params.cache_seqlens = aotk_tensor_1d((void *)(uintptr_t)x->seqlens_device, AOTK_DTYPE_INT32, B);
  params.out = tensor_of(&x->out_buffer, &x->out, dtype);
  if (c->with_lse) params.lse = tensor_of(&x->lse_buffer, &x->lse, AOTK_DTYPE_FLOAT32);
  params.softmax_scale = c->softmax_scale;
  params.causal = c->causal;
  params.window_left = c->window_left;
  params.window_right = c->window_right;
  params.softcap = c->softcap;
  if (c->alibi == 1) params.alibi_slopes = aotk_tensor_1d((void *)(uintptr_t)x->alibi_device, AOTK_DTYPE_FLOAT32, HQ);
  if (c->alibi == 2) {
    params.alibi_slopes = aotk_tensor_2d((void *)(uintptr_t)x->alibi_device, AOTK_DTYPE_FLOAT32, B, HQ);
  }
  if (c->sinks) params.sinks = aotk_tensor_1d((void *)(uintptr_t)x->sinks_device, AOTK_DTYPE_FLOAT32, HQ);
  params.num_splits = c->num_splits;
  params.max_seqlen_k = c->max_seqlen_k;
  if (c->seqlen_new > 0) {
    params.k_new = tensor_of(&x->k_new_buffer, &x->k_new, dtype);
    params.v_new = tensor_of(&x->v_new_buffer, &x->v_new, dtype);
  }
  if (c->varlen) {
    if (!aotk_gpu_test_upload(&x->cu_seqlens_q_device, x->cu_seqlens_q, (size_t)(B + 1) * sizeof(int32_t))) return false;
    params.cu_seqlens_q = aotk_tensor_1d((void *)(uintptr_t)x->cu_seqlens_q_device, AOTK_DTYPE_INT32, B + 1);
    params.max_seqlen_q = (int32_t)S;
  }
  x->params = params;
  return aotk_gpu_test_settle();
}

static bool decode_results_create(const decode_run *x, decode_results *r) {
  r->out = host_alloc(out_count(x), sizeof(double));
  r->lse = host_alloc(row_count(x), sizeof(double));
  return r->out != NULL && r->lse != NULL;
}

static void decode_results_destroy(decode_results *r) {
  free(r->out);
  free(r->lse);
  memset(r, 0, sizeof *r);
}

/* ---- decoding: the reference ---------------------------------------------------------------------- */

/* The float64 reference and the same-precision emulation are src/check/aotk_decode_reference.c's (shared
 * with aotk_self_test()), one row per item on every core. */
typedef struct decode_reference_job {
  const aotk__decode_reference_problem *problem;
  decode_reference *ref;
} decode_reference_job;

static void decode_reference_item(void *context, int64_t item, void *scratch) {
  const decode_reference_job *job = context;
  aotk__decode_reference_row(job->problem, item, scratch, job->ref->out, job->ref->lowp, job->ref->lse, job->ref->keys);
}

static void decode_reference_destroy(decode_reference *ref) {
  free(ref->out);
  free(ref->lse);
  free(ref->lowp);
  free(ref->keys);
  memset(ref, 0, sizeof *ref);
}

/* The reference for the lengths `seqlens` (on the caches expect_caches last made: for these lengths),
 * and its bound: 2 x the emulation's largest error + the floor. */
static bool compute_decode_reference(const decode_run *x, const int32_t *seqlens, decode_reference *ref) {
  memset(ref, 0, sizeof *ref);
  ref->out = host_alloc(out_count(x), sizeof(double));
  ref->lse = host_alloc(row_count(x), sizeof(double));
  ref->lowp = host_alloc(out_count(x), sizeof(float));
  ref->keys = host_alloc(row_count(x), sizeof(int64_t));
  if (ref->out == NULL || ref->lse == NULL || ref->lowp == NULL || ref->keys == NULL) return false;
  aotk__decode_reference_problem problem = x->problem;
  problem.cache_seqlens = seqlens;
  decode_reference_job job = {&problem, ref};
  if (!parallel_for(row_count(x), aotk__decode_reference_scratch_bytes(&problem), decode_reference_item, &job)) {
    return false;
  }
  for (int64_t e = 0; e < out_count(x); e++) {
    double error = fabs((double)ref->lowp[e] - ref->out[e]);
    if (!(error <= ref->lowp_error)) ref->lowp_error = isnan(error) ? INFINITY : error;
  }
  ref->bound = 2.0 * ref->lowp_error + AOTK__CHECK_ERROR_FLOOR;
  return true;
}

/* A run against the reference: out within the bound, lse within its tolerance (-inf exactly where the
 * reference is), rows that see no key exactly 0. */
static void compare_decode(const decode_run *x, const decode_results *r, const decode_reference *ref, bool lse_written,
                           bool record, const char *label) {
  const decode_case *c = x->c;
  const int64_t S = c->seqlen_q, HQ = x->heads_q, DV = c->head_dim_v;
  double max_error = 0.0;
  int64_t worst = 0;
  for (int64_t e = 0; e < out_count(x); e++) {
    double error = fabs(r->out[e] - ref->out[e]);
    if (isnan(error)) error = INFINITY;
    if (error > max_error) {
      max_error = error;
      worst = e;
    }
  }
  CHECK_MSG(max_error <= ref->bound,
            "%s: out error %.3g > bound %.3g (2 x same-precision %.3g + %.2g) at (b %lld, token %lld, head %lld, %lld): "
            "%.6g, expected %.6g",
            label, max_error, ref->bound, ref->lowp_error, AOTK__CHECK_ERROR_FLOOR, (long long)(worst / DV / HQ / S),
            (long long)(worst / DV / HQ % S), (long long)(worst / DV % HQ), (long long)(worst % DV), r->out[worst],
            ref->out[worst]);
  if (record) record_fraction(c->dtype, max_error, ref->bound, c->name);
  int64_t bad_lse = 0, first_bad = -1, empty = 0, bad_empty = 0;
  for (int64_t row = 0; row < row_count(x); row++) {
    if (lse_written) {
      const double exact = ref->lse[row], got = r->lse[row];
      const bool ok = isinf(exact) ? got == exact : fabs(got - exact) <= lse_tolerance(exact);
      if (!ok && first_bad < 0) first_bad = row;
      bad_lse += !ok;
    }
    if (ref->keys[row] == 0) {
      const int64_t b = row / (HQ * S), h = row / S % HQ, token = row % S;
      const double *out_row = r->out + ((b * S + token) * HQ + h) * DV;
      bool zero = true;
      for (int64_t d = 0; d < DV; d++) zero &= out_row[d] == 0.0;
      empty++;
      bad_empty += !zero;
    }
  }
  CHECK_MSG(bad_lse == 0, "%s: %lld lse values off, first (b %lld, head %lld, token %lld): %.7g, expected %.7g", label,
            (long long)bad_lse, (long long)(first_bad / (HQ * S)), (long long)(first_bad / S % HQ),
            (long long)(first_bad % S), first_bad >= 0 ? r->lse[first_bad] : 0.0,
            first_bad >= 0 ? ref->lse[first_bad] : 0.0);
  CHECK_MSG(bad_empty == 0, "%s: %lld of %lld rows that see no key have out != 0", label, (long long)bad_empty,
            (long long)empty);
}

/* Two runs that must agree: bit for bit (allowed 0), or within `allowed` (out) and twice lse's
 * tolerance. */
static void compare_decode_runs(const decode_run *x, const decode_results *a, const decode_results *b, double allowed,
                                bool compare_lse, const char *label) {
  int64_t differences = 0, first = -1;
  double max_difference = 0.0;
  for (int64_t e = 0; e < out_count(x); e++) {
    bool differ;
    if (allowed == 0.0) {
      differ = memcmp(&a->out[e], &b->out[e], sizeof(double)) != 0;
    } else {
      double difference = fabs(a->out[e] - b->out[e]);
      if (isnan(difference)) difference = INFINITY;
      if (difference > max_difference) max_difference = difference;
      differ = difference > allowed;
    }
    if (differ && first < 0) first = e;
    differences += differ;
  }
  CHECK_MSG(differences == 0, "%s: %lld out values differ%s (first at %lld: %.6g vs %.6g; max difference %.3g, allowed %.3g)",
            label, (long long)differences, allowed == 0.0 ? " in their bits" : "", (long long)first,
            first >= 0 ? a->out[first] : 0.0, first >= 0 ? b->out[first] : 0.0, max_difference, allowed);
  if (!compare_lse) return;
  differences = 0;
  for (int64_t e = 0; e < row_count(x); e++) {
    const double u = a->lse[e], v = b->lse[e];
    differences += allowed == 0.0 ? memcmp(&u, &v, sizeof u) != 0 : !(u == v || fabs(u - v) <= 2.0 * lse_tolerance(u));
  }
  CHECK_MSG(differences == 0, "%s: %lld lse values differ", label, (long long)differences);
}

/* ---- decoding: running ---------------------------------------------------------------------------- */

/* out and lse into the dense [batch, seqlen_q, heads_q, head_dim_v] and [batch, heads_q, seqlen_q] order
 * (packed: each request's rows from cu_seqlens_q[b], out 0 and lse -inf past its len_q). */
static void unpack_decode(const decode_run *x, decode_results *r) {
  const decode_case *c = x->c;
  const aotk_dtype dtype = c->dtype;
  if (!c->varlen) {
    for (int64_t e = 0; e < out_count(x); e++) r->out[e] = load_value(&x->out_buffer, dtype, strided_at(&x->out, e));
    for (int64_t e = 0; e < row_count(x); e++) {
      r->lse[e] = load_value(&x->lse_buffer, AOTK_DTYPE_FLOAT32, strided_at(&x->lse, e));
    }
    return;
  }
  const int64_t S = c->seqlen_q, HQ = x->heads_q, DV = c->head_dim_v;
  for (int64_t b = 0; b < c->batch; b++)
    for (int64_t token = 0; token < S; token++)
      for (int64_t h = 0; h < HQ; h++) {
        const bool present = token < x->q_lengths[b];
        const int64_t row = token_row(x, b, token);
        for (int64_t d = 0; d < DV; d++) {
          r->out[((b * S + token) * HQ + h) * DV + d] =
              present ? load_value(&x->out_buffer, dtype, strided_at(&x->out, (row * HQ + h) * DV + d)) : 0.0;
        }
        r->lse[(b * HQ + h) * S + token] =
            present ? load_value(&x->lse_buffer, AOTK_DTYPE_FLOAT32, strided_at(&x->lse, h * x->total_q + row))
                    : -(double)INFINITY;
      }
}

static bool download_and_check(decode_run *x, const aotk_decode_params *params, decode_results *r, const char *label) {
  if (!buffer_download(&x->out_buffer) || !buffer_download(&x->lse_buffer)) return false;
  check_coverage(&x->out_buffer, &x->out_written, true, label, "out");
  check_coverage(&x->lse_buffer, &x->lse_written, params->lse.data != NULL, label, "lse");
  unpack_decode(x, r);
  return true;
}

/* The query's answer for `params`, checked against include/aotk.h: the kernel's dtype and compiled head
 * dims, the split (1 .. the number asked), launches, workspace (the header's formula), grid and features. */
static void check_decode_query(const decode_run *x, const aotk_decode_params *params, const aotk_kernel_info *info,
                               const char *label) {
  const decode_case *c = x->c;
  /* The family follows the cache: contiguous, paged with a lookup per key row, or paged with pages that
   * hold whole key blocks (one lookup per block). */
  char prefix[48];
  const char *family = c->page_size == 0                      ? "attn_decode"
                       : info->block_n > 0 && c->page_size % info->block_n == 0 ? "attn_decode_paged_blocks"
                                                                                 : "attn_decode_paged";
  snprintf(prefix, sizeof prefix, "%s_%s_", family, aotk_gpu_test_dtype_label(c->dtype));
  CHECK_MSG(strncmp(info->kernel_name, prefix, strlen(prefix)) == 0, "%s: the query names %s", label, info->kernel_name);
  CHECK_MSG(info->head_dim_qk >= c->head_dim_qk && info->head_dim_v >= c->head_dim_v && info->head_dim_qk <= 256 &&
                info->head_dim_v <= 256,
            "%s: head dims %lld/%lld run in the compiled %d/%d (%s)", label, (long long)c->head_dim_qk,
            (long long)c->head_dim_v, (int)info->head_dim_qk, (int)info->head_dim_v, info->kernel_name);
  const int64_t splits = info->num_splits;
  CHECK_MSG(splits >= 1 && splits <= AOTK_DECODE_MAX_SPLITS, "%s: num_splits %lld", label, (long long)splits);
  if (params->num_splits > 0) {
    CHECK_MSG(splits <= params->num_splits, "%s: %lld splits, %d asked", label, (long long)splits,
              (int)params->num_splits);
    /* Where the asked ranges are whole key blocks the split is exactly the number asked. */
    const int64_t hint = params->max_seqlen_k > 0 && params->max_seqlen_k < x->capacity ? params->max_seqlen_k
                                                                                       : x->capacity;
    if (info->block_n > 0 && hint % ((int64_t)info->block_n * params->num_splits) == 0) {
      CHECK_MSG(splits == params->num_splits, "%s: %lld splits, %d asked, of %lld keys in blocks of %d", label,
                (long long)splits, (int)params->num_splits, (long long)hint, (int)info->block_n);
    }
  }
  if ((c->extra & EXTRA_AUTO_SPLIT) && params->num_splits == 0) {
    CHECK_MSG(splits > 1, "%s: the automatic choice did not split (%lld programs before the split)", label,
              (long long)(info->grid / (splits > 0 ? splits : 1)));
  }
  const int launches = 1 + (splits > 1) + (c->seqlen_new > 0);
  CHECK_MSG(info->launches == launches, "%s: %d launches with %lld splits%s, expected %d", label, (int)info->launches,
            (long long)splits, c->seqlen_new > 0 ? " and appending" : "", launches);
  const int64_t rows = c->batch * c->seqlen_q * x->heads_q;
  const size_t documented = splits > 1 ? round_up16((size_t)(splits * rows * round_up(c->head_dim_v, 16)) * 4) +
                                             round_up16((size_t)(splits * rows) * 4)
                                       : 0;
  CHECK_MSG(info->workspace_bytes == documented, "%s: workspace %zu bytes, the header's formula gives %zu", label,
            info->workspace_bytes, documented);
  const int64_t chunks = info->block_m > 0 ? ceil_div(c->group * c->seqlen_q, info->block_m) : 0;
  CHECK_MSG(info->grid == c->batch * c->heads_kv * chunks * splits,
            "%s: grid %lld, expected batch x heads_kv x ceil(%lld rows / %d) x %lld splits", label,
            (long long)info->grid, (long long)(c->group * c->seqlen_q), (int)info->block_m, (long long)splits);
  uint32_t expected = 0;
  if (c->causal) expected |= AOTK_FEATURE_CAUSAL;
  if (c->window_left >= 0 || (c->window_right >= 0 && !c->causal)) expected |= AOTK_FEATURE_WINDOW;
  if (c->softcap > 0.0f) expected |= AOTK_FEATURE_SOFTCAP;
  if (c->alibi) expected |= AOTK_FEATURE_ALIBI;
  if (c->sinks) expected |= AOTK_FEATURE_SINKS;
  if (info->head_dim_qk > c->head_dim_qk || info->head_dim_v > c->head_dim_v) expected |= AOTK_FEATURE_PADDED_HEAD_DIM;
  if (x->paged) expected |= AOTK_FEATURE_PAGED_KV;
  if (splits > 1) expected |= AOTK_FEATURE_SPLIT_KV;
  if (c->seqlen_new > 0) expected |= AOTK_FEATURE_APPEND_KV;
  if (c->varlen) expected |= AOTK_FEATURE_VARLEN;
  CHECK_MSG(!c->varlen || splits == 1, "%s: packed queries run unsplit, the query says %lld splits", label,
            (long long)splits);
  CHECK_MSG(info->features == expected, "%s: features 0x%x, expected 0x%x", label, (unsigned)info->features,
            (unsigned)expected);
}

/* Queries, allocates exactly the workspace the query reports (poisoned; none when it is 0), poisons out
 * and lse, restores the caches' first bytes, runs, downloads, checks that every element of out (and of
 * lse when asked for) was written and nothing around them, and the caches byte for byte (what
 * expect_caches last made), and unpacks into r. */
static bool run_decode(decode_run *x, const aotk_decode_params *params, decode_results *r, aotk_kernel_info *info_out,
                       const char *label) {
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_decode_query(AOTK_OP_DECODE, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_decode_query: %s: %s", label, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return false;
  if (info_out != NULL) *info_out = info;
  CUdeviceptr workspace = 0;
  bool ok = info.workspace_bytes == 0 ||
            (aotk_gpu_test_alloc(&workspace, info.workspace_bytes) && aotk_gpu_test_poison(workspace, info.workspace_bytes));
  ok = ok && buffer_poison(&x->out_buffer) && buffer_poison(&x->lse_buffer) && restore_caches(x) && aotk_gpu_test_settle();
  if (ok) {
    status = aotk_attn_decode(params, (void *)(uintptr_t)workspace, info.workspace_bytes, (aotk_stream)stream);
    CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_decode: %s: %s", label, aotk_status_name(status), aotk_last_error());
    ok = status == AOTK_OK && aotk_gpu_test_synchronize(label);
  }
  ok = ok && download_and_check(x, params, r, label);
  if (ok) check_caches_equal(x, x->k_expected, x->v_expected, label);
  aotk_gpu_test_free(&workspace);
  return ok;
}

/* num_splits 1 and 3: each against the reference, and the two within the sum of their bounds (the same
 * inputs: the same bound each). */
static void check_split_counts(decode_run *x, const decode_reference *ref) {
  decode_results runs[2];
  memset(runs, 0, sizeof runs);
  static const int32_t counts[2] = {1, 3};
  bool ok = decode_results_create(x, &runs[0]) && decode_results_create(x, &runs[1]);
  for (int i = 0; i < 2 && ok; i++) {
    aotk_decode_params params = x->params;
    params.num_splits = counts[i];
    char label[48];
    snprintf(label, sizeof label, "num_splits %d", (int)counts[i]);
    aotk_kernel_info info;
    ok = run_decode(x, &params, &runs[i], &info, label);
    if (!ok) break;
    check_decode_query(x, &params, &info, label);
    compare_decode(x, &runs[i], ref, params.lse.data != NULL, false, label);
    printf("    %s: %d splits\n", label, (int)info.num_splits);
  }
  if (ok) compare_decode_runs(x, &runs[0], &runs[1], 2.0 * ref->bound, x->params.lse.data != NULL, "num_splits 1 vs 3");
  decode_results_destroy(&runs[0]);
  decode_results_destroy(&runs[1]);
}

/* The call captured in a CUDA graph: replayed as captured, the direct call's bits; replayed after new
 * cache_seqlens were copied in (the lengths are read on the device), the reference for the new lengths
 * and the bits of a direct call with them. */
static void check_graph_replay(decode_run *x, const decode_results *base) {
  const decode_case *c = x->c;
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CUdeviceptr workspace = 0;
  CUgraph graph = NULL;
  CUgraphExec exec = NULL;
  decode_results replay, direct;
  decode_reference ref;
  memset(&replay, 0, sizeof replay);
  memset(&direct, 0, sizeof direct);
  memset(&ref, 0, sizeof ref);
  aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &x->params, &info);
  CHECK_MSG(status == AOTK_OK, "graph: query: %s: %s", aotk_status_name(status), aotk_last_error());
  bool ok = status == AOTK_OK && decode_results_create(x, &replay) && decode_results_create(x, &direct);
  ok = ok && (info.workspace_bytes == 0 || aotk_gpu_test_alloc(&workspace, info.workspace_bytes)) && aotk_gpu_test_settle();
  if (ok) {
    CUresult result = driver->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    CHECK_MSG(result == CUDA_SUCCESS, "cuStreamBeginCapture = %d", (int)result);
    status = aotk_attn_decode(&x->params, (void *)(uintptr_t)workspace, info.workspace_bytes, (aotk_stream)stream);
    if (result == CUDA_SUCCESS) {
      result = driver->cuStreamEndCapture(stream, &graph);
      CHECK_MSG(result == CUDA_SUCCESS, "cuStreamEndCapture = %d", (int)result);
    }
    CHECK_MSG(status == AOTK_OK, "graph: captured aotk_attn_decode: %s: %s", aotk_status_name(status), aotk_last_error());
    ok = result == CUDA_SUCCESS && status == AOTK_OK && graph != NULL;
    if (ok) {
      result = driver->cuGraphInstantiateWithFlags(&exec, graph, 0);
      CHECK_MSG(result == CUDA_SUCCESS, "cuGraphInstantiateWithFlags = %d", (int)result);
      ok = result == CUDA_SUCCESS;
    }
  }
  for (int round = 0; round < 2 && ok; round++) {
    const char *label = round == 0 ? "graph replay" : "graph replay with new lengths";
    if (round == 1) {
      ok = driver->cuMemcpyHtoD(x->seqlens_device, x->replay_seqlens, (size_t)c->batch * sizeof(int32_t)) ==
           CUDA_SUCCESS;
      CHECK_MSG(ok, "copying the new lengths failed");
      expect_caches(x, x->replay_seqlens); /* appending: the new lengths move the rows the replay writes */
    }
    ok = ok && buffer_poison(&x->out_buffer) && buffer_poison(&x->lse_buffer) &&
         (workspace == 0 || aotk_gpu_test_poison(workspace, info.workspace_bytes)) && restore_caches(x) && aotk_gpu_test_settle();
    if (!ok) break;
    CUresult result = driver->cuGraphLaunch(exec, stream);
    CHECK_MSG(result == CUDA_SUCCESS, "%s: cuGraphLaunch = %d", label, (int)result);
    ok = result == CUDA_SUCCESS && aotk_gpu_test_synchronize(label) && download_and_check(x, &x->params, &replay, label);
    if (ok) check_caches_equal(x, x->k_expected, x->v_expected, label);
    if (ok && round == 0) compare_decode_runs(x, base, &replay, 0.0, c->with_lse, "graph replay against the direct call");
  }
  if (ok) ok = compute_decode_reference(x, x->replay_seqlens, &ref);
  if (ok) {
    compare_decode(x, &replay, &ref, c->with_lse, false, "graph replay with new lengths");
    ok = run_decode(x, &x->params, &direct, NULL, "direct call with the new lengths");
  }
  if (ok) {
    compare_decode_runs(x, &direct, &replay, 0.0, c->with_lse, "graph replay against a direct call, new lengths");
    char lengths[160] = "";
    size_t used = 0;
    for (int64_t b = 0; b < c->batch && used < sizeof lengths; b++) {
      int written = snprintf(lengths + used, sizeof lengths - used, "%s%d->%d", b ? " " : "", (int)x->seqlens[b],
                             (int)x->replay_seqlens[b]);
      if (written > 0) used += (size_t)written;
    }
    printf("    graph: %d splits, lengths %s\n", (int)info.num_splits, lengths);
  }
  /* The lengths (and expected caches) the other checks assume. */
  if (driver->cuMemcpyHtoD(x->seqlens_device, x->seqlens, (size_t)c->batch * sizeof(int32_t)) != CUDA_SUCCESS) {
    CHECK_MSG(false, "restoring the lengths failed");
  }
  expect_caches(x, x->seqlens);
  if (exec) driver->cuGraphExecDestroy(exec);
  if (graph) driver->cuGraphDestroy(graph);
  aotk_gpu_test_free(&workspace);
  decode_results_destroy(&replay);
  decode_results_destroy(&direct);
  decode_reference_destroy(&ref);
}

static void run_decode_case(const void *argument) {
  const decode_case *c = argument;
  decode_run x;
  decode_results base, again, other;
  decode_reference ref;
  memset(&base, 0, sizeof base);
  memset(&again, 0, sizeof again);
  memset(&other, 0, sizeof other);
  memset(&ref, 0, sizeof ref);
  if (!decode_run_create(&x, c) || !decode_results_create(&x, &base) || !decode_results_create(&x, &again) ||
      !decode_results_create(&x, &other)) {
    goto done;
  }
  aotk_kernel_info info;
  if (!run_decode(&x, &x.params, &base, &info, "base run")) goto done;
  check_decode_query(&x, &x.params, &info, "base run");
  printf("    %s, %d splits, %d launches, grid %lld, workspace %zu bytes\n", info.kernel_name, (int)info.num_splits,
         (int)info.launches, (long long)info.grid, info.workspace_bytes);
  /* Determinism: the same call again, on re-poisoned outputs and workspace. */
  if (!run_decode(&x, &x.params, &again, NULL, "run again")) goto done;
  compare_decode_runs(&x, &base, &again, 0.0, c->with_lse, "the same call twice");
  if (!compute_decode_reference(&x, x.seqlens, &ref)) goto done;
  compare_decode(&x, &base, &ref, c->with_lse, true, "base run");
  if (aotk_test_state.case_failures > 0) goto done; /* the identities would only repeat the failure */
  /* lse dropped: out's bits unchanged, lse's memory untouched; or, for a case without lse, added. */
  aotk_decode_params params = x.params;
  if (c->with_lse) {
    memset(&params.lse, 0, sizeof params.lse);
  } else {
    params.lse = tensor_of(&x.lse_buffer, &x.lse, AOTK_DTYPE_FLOAT32);
  }
  const char *label = c->with_lse ? "without lse" : "with lse";
  if (!run_decode(&x, &params, &other, NULL, label)) goto done;
  compare_decode_runs(&x, &base, &other, 0.0, false, label);
  if (!c->with_lse) compare_decode(&x, &other, &ref, true, false, label);
  if (c->extra & EXTRA_SPLITS) check_split_counts(&x, &ref);
  if (c->extra & EXTRA_GRAPH) check_graph_replay(&x, &base);
done:
  decode_results_destroy(&base);
  decode_results_destroy(&again);
  decode_results_destroy(&other);
  decode_reference_destroy(&ref);
  decode_run_destroy(&x);
}

/* ---- decoding: refusals ----------------------------------------------------------------------------- */

/* A split, appending call (it needs a workspace) refused for its workspace or a misaligned tensor: the
 * right status, and nothing written (out, lse and the workspace keep their poison, the caches their
 * first bytes: the append did not run either). */
static void test_decode_refusals(void) {
  decode_case c;
  const decode_row row = {.bf16 = 0, .dqk = 64, .dv = 64, .batch = 2, .heads_kv = 2, .group = 2, .seqlen_q = 2,
                          .capacity = 512, .page_size = 16, .seqlen_new = 2, .lengths = LENGTHS_APPEND, .causal = 1,
                          .lse = 1, .num_splits = 3};
  make_decode_case(&c, &row, 9001);
  decode_run x;
  CUdeviceptr workspace = 0;
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  if (!decode_run_create(&x, &c)) goto done;
  aotk_status status = aotk_decode_query(AOTK_OP_DECODE, &x.params, &info);
  CHECK_MSG(status == AOTK_OK && info.workspace_bytes > 0, "query: %s, workspace %zu", aotk_status_name(status),
            info.workspace_bytes);
  if (status != AOTK_OK || info.workspace_bytes == 0) goto done;
  const size_t bytes = info.workspace_bytes;
  if (!aotk_gpu_test_alloc(&workspace, bytes + 16) || !aotk_gpu_test_poison(workspace, bytes + 16) || !buffer_poison(&x.out_buffer) ||
      !buffer_poison(&x.lse_buffer) || !aotk_gpu_test_settle()) {
    goto done;
  }
  void *ws = (void *)(uintptr_t)workspace;
  status = aotk_attn_decode(&x.params, ws, bytes - 1, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL, "one byte short: %s", aotk_status_name(status));
  status = aotk_attn_decode(&x.params, NULL, 0, (aotk_stream)stream);
  /* As aotk_attn_bwd: a NULL workspace is one too small. */
  CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL, "NULL workspace: %s", aotk_status_name(status));
  status = aotk_attn_decode(&x.params, (char *)ws + 4, bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "workspace + 4 bytes: %s", aotk_status_name(status));
  aotk_decode_params params = x.params;
  params.q.data = (char *)params.q.data + 2;
  status = aotk_attn_decode(&params, ws, bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "q + 2 bytes: %s", aotk_status_name(status));
  params = x.params;
  params.q.data = (char *)params.q.data + 8;
  status = aotk_attn_decode(&params, ws, bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "q + 8 bytes: %s", aotk_status_name(status));
  /* k_cache's row stride 8 elements short of a multiple of 16 (rows overlap; nothing is read). */
  params = x.params;
  params.k_cache.strides[1] -= 8;
  status = aotk_attn_decode(&params, ws, bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "k_cache row stride %lld: %s", (long long)params.k_cache.strides[1],
            aotk_status_name(status));
  /* include/aotk.h: with causal, window_right must be -1 or 0. */
  params = x.params;
  params.window_right = 3;
  status = aotk_attn_decode(&params, ws, bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "causal with window_right 3: %s", aotk_status_name(status));
  params = x.params;
  params.out.data = (char *)params.out.data + 8;
  status = aotk_attn_decode(&params, ws, bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "out + 8 bytes: %s", aotk_status_name(status));
  status = aotk_decode_query(AOTK_OP_DECODE, &params, &info);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "the query of out + 8 bytes: %s", aotk_status_name(status));
  /* k_new and v_new: the decode's alignment rule (include/aotk.h). */
  params = x.params;
  params.k_new.data = (char *)params.k_new.data + 8;
  status = aotk_attn_decode(&params, ws, bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "k_new + 8 bytes: %s", aotk_status_name(status));
  params = x.params;
  params.v_new.strides[1] -= 8;
  status = aotk_attn_decode(&params, ws, bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "v_new token stride %lld: %s", (long long)params.v_new.strides[1],
            aotk_status_name(status));
  if (!aotk_gpu_test_synchronize("refused calls") || !buffer_download(&x.out_buffer) || !buffer_download(&x.lse_buffer)) goto done;
  check_coverage(&x.out_buffer, &x.out, false, "refused calls", "out");
  check_coverage(&x.lse_buffer, &x.lse, false, "refused calls", "lse");
  check_caches_equal(&x, x.k_initial, x.v_initial, "refused calls");
  uint8_t *host = host_alloc((int64_t)bytes + 16, 1);
  if (host != NULL && driver->cuMemcpyDtoH(host, workspace, bytes + 16) == CUDA_SUCCESS) {
    int64_t written = 0;
    for (size_t i = 0; i < bytes + 16; i++) written += host[i] != 0xff;
    CHECK_MSG(written == 0, "refused calls wrote %lld workspace bytes", (long long)written);
  }
  free(host);
done:
  aotk_gpu_test_free(&workspace);
  decode_run_destroy(&x);
}

/* ---- merging ------------------------------------------------------------------------------------- */

typedef enum merge_layout {
  MERGE_CONTIGUOUS,      /* rank 5, row-major */
  MERGE_PACKED,          /* rank 4: [num_partials, total_q, heads, head_dim], lse [num_partials, heads, total_q] */
  MERGE_STRIDED,         /* rank 5, partials interleaved [b, s, h, p, d + 3], odd strides, unaligned pointers */
  MERGE_STRIDED_ALIGNED, /* rank 5, like MERGE_STRIDED with 16-element padding: the aligned kernel */
  MERGE_IN_PLACE,        /* rank 5 row-major; out and lse are partial 0's memory */
} merge_layout;

static const char *const merge_layout_names[] = {"contiguous", "packed", "strided", "strided-aligned", "in-place"};

typedef enum row_kind {
  ROW_NORMAL,
  ROW_ONE_EMPTY, /* one partial gets no key (lse -inf, garbage out) on purpose */
  ROW_ALL_EMPTY, /* no key in any partial: out 0, lse -inf (or the sink's) */
  ROW_NAN_LSE,   /* one partial's lse is NaN: out and lse NaN */
} row_kind;

typedef struct merge_case {
  aotk_dtype partial_dtype, out_dtype;
  int64_t num_partials, batch, seqlen_q, heads, head_dim, keys;
  merge_layout layout;
  int with_lse, sinks;
  uint64_t seed;
  char name[200];
} merge_case;

typedef struct merge_run {
  const merge_case *c;
  int64_t rows; /* batch * seqlen_q * heads, head fastest (the kernel's order) */
  strided part, lpart, out, lse;
  buffer part_buffer, lpart_buffer, out_buffer, lse_buffer;
  buffer *out_storage, *lse_storage; /* the partials' own buffers in place */
  void *part_input, *lpart_input;    /* the partials as uploaded */
  float *sinks;
  CUdeviceptr sinks_device;
  row_kind *kinds;
  double *ref_out, *ref_lse; /* [rows, head_dim], [rows] */
  float *lowp_out;
  double lowp_error, bound;
  aotk_merge_params params;
} merge_run;

static int64_t merge_out_index(const merge_run *x, int64_t row, int64_t d) {
  return strided_at(&x->out, row * x->c->head_dim + d);
}
/* lse's element of row (b, s, h): its view is [b, h, s]. */
static int64_t merge_lse_index(const merge_run *x, const strided *view, int64_t partial, int64_t row) {
  const merge_case *c = x->c;
  const int64_t b = row / (c->seqlen_q * c->heads), s = row / c->heads % c->seqlen_q, h = row % c->heads;
  const int64_t base = view->rank == 4 ? view->offset + partial * view->strides[0] : view->offset;
  const int first = view->rank == 4 ? 1 : 0;
  return base + b * view->strides[first] + h * view->strides[first + 1] + s * view->strides[first + 2];
}
static int64_t merge_part_index(const merge_run *x, int64_t partial, int64_t row, int64_t d) {
  return strided_at(&x->part, (partial * x->rows + row) * x->c->head_dim + d);
}

/* What a partial with no key may hold: anything. */
static float garbage(aotk_dtype dtype, int64_t which) {
  switch (which % 4) {
    case 0:
      return NAN;
    case 1:
      return INFINITY;
    case 2:
      return -INFINITY;
    default:
      return dtype == AOTK_DTYPE_FLOAT32 ? 1e30f : 60000.0f;
  }
}

static void merge_layouts(merge_run *x) {
  const merge_case *c = x->c;
  const int64_t P = c->num_partials, B = c->batch, S = c->seqlen_q, H = c->heads, D = c->head_dim, T = B * S;
  const int64_t part_shape[5] = {P, B, S, H, D}, lpart_shape[4] = {P, B, H, S};
  const int64_t out_shape[4] = {B, S, H, D}, lse_shape[3] = {B, H, S};
  x->part = make_layout(5, part_shape, 0);
  x->lpart = make_layout(4, lpart_shape, 0);
  x->out = make_layout(4, out_shape, 0);
  x->lse = make_layout(3, lse_shape, 0);
  switch (c->layout) {
    case MERGE_CONTIGUOUS:
    case MERGE_IN_PLACE:
      break;
    case MERGE_PACKED: { /* lse [P, H, T] and [H, T]: token t = b * S + s */
      const int64_t lpart_strides[4] = {H * T, S, T, 1}, lse_strides[3] = {S, T, 1};
      memcpy(x->lpart.strides, lpart_strides, sizeof lpart_strides);
      memcpy(x->lse.strides, lse_strides, sizeof lse_strides);
      break;
    }
    case MERGE_STRIDED:
    case MERGE_STRIDED_ALIGNED: {
      const int64_t pad = c->layout == MERGE_STRIDED_ALIGNED ? 16 : 3;
      const int64_t row = round_up(D, pad) + pad, token = H * P * row + pad;
      const int64_t part_strides[5] = {row, S * token + pad, token, P * row, 1};
      memcpy(x->part.strides, part_strides, sizeof part_strides);
      x->part.offset = pad;
      const int64_t lse_row = S + 2, lpart_strides[4] = {H * lse_row, P * H * lse_row + 1, lse_row, 1};
      memcpy(x->lpart.strides, lpart_strides, sizeof lpart_strides);
      x->lpart.offset = 1;
      x->out = make_layout(4, out_shape, pad);
      x->lse = make_layout(3, lse_shape, 3);
      break;
    }
  }
  if (c->layout == MERGE_IN_PLACE) { /* partial 0's views */
    x->out.offset = x->part.offset;
    memcpy(x->out.strides, x->part.strides + 1, 4 * sizeof(int64_t));
    x->lse.offset = x->lpart.offset;
    memcpy(x->lse.strides, x->lpart.strides + 1, 3 * sizeof(int64_t));
  }
}

/* The aotk tensors of the views: rank 5/4/4/3, or packed rank 4/3/3/2 with batch and seqlen_q merged
 * into total_q (the views' batch strides are seqlen_q x their token strides there). */
static void merge_params(merge_run *x) {
  const merge_case *c = x->c;
  aotk_merge_params params = AOTK_MERGE_PARAMS_INIT;
  params.out_partials = tensor_of(&x->part_buffer, &x->part, c->partial_dtype);
  params.lse_partials = tensor_of(&x->lpart_buffer, &x->lpart, AOTK_DTYPE_FLOAT32);
  params.out = tensor_of(x->out_storage, &x->out, c->out_dtype);
  if (c->with_lse) params.lse = tensor_of(x->lse_storage, &x->lse, AOTK_DTYPE_FLOAT32);
  if (c->layout == MERGE_PACKED) {
    const int64_t P = c->num_partials, T = c->batch * c->seqlen_q, H = c->heads, D = c->head_dim;
    aotk_tensor *t = &params.out_partials;
    const int64_t part_shape[4] = {P, T, H, D}, part_strides[4] = {x->part.strides[0], x->part.strides[2],
                                                                   x->part.strides[3], 1};
    t->rank = 4;
    memcpy(t->shape, part_shape, sizeof part_shape);
    memcpy(t->strides, part_strides, sizeof part_strides);
    t->shape[4] = t->strides[4] = 0;
    params.lse_partials = aotk_tensor_3d(params.lse_partials.data, AOTK_DTYPE_FLOAT32, P, H, T);
    params.out = aotk_tensor_3d(params.out.data, c->out_dtype, T, H, D);
    if (c->with_lse) params.lse = aotk_tensor_2d(params.lse.data, AOTK_DTYPE_FLOAT32, H, T);
  }
  if (c->sinks) params.sinks = aotk_tensor_1d((void *)(uintptr_t)x->sinks_device, AOTK_DTYPE_FLOAT32, c->heads);
  x->params = params;
}

static void merge_run_destroy(merge_run *x) {
  buffer_destroy(&x->part_buffer);
  buffer_destroy(&x->lpart_buffer);
  buffer_destroy(&x->out_buffer);
  buffer_destroy(&x->lse_buffer);
  free(x->part_input);
  free(x->lpart_input);
  free(x->sinks);
  aotk_gpu_test_free(&x->sinks_device);
  free(x->kinds);
  free(x->ref_out);
  free(x->ref_lse);
  free(x->lowp_out);
}

/* One row: random scores N(0, 4) and values N(0, 1) of `keys` keys, dealt at random among the partials;
 * each partial's float64 attention stored in the partial dtype (garbage where it got no key), the
 * float64 attention over all keys (the sink joining once), and the float32 merge of the stored partials
 * rounded to out's dtype. */
static void merge_row_data(merge_run *x, int64_t row, double *scores, int32_t *dealt, double *values, double *partial,
                           float *stored) {
  const merge_case *c = x->c;
  const int64_t P = c->num_partials, D = c->head_dim, H = c->heads;
  uint64_t state = c->seed ^ ((uint64_t)(row + 1) * 0x9e3779b97f4a7c15ull);
  const row_kind kind = x->kinds[row];
  const int64_t keys = kind == ROW_ALL_EMPTY ? 0 : c->keys;
  const int64_t emptied = kind == ROW_ONE_EMPTY ? aotk__random_int(&state, 0, P - 1) : -1;
  for (int64_t j = 0; j < keys; j++) {
    scores[j] = 2.0 * aotk__random_normal(&state);
    int64_t p = aotk__random_int(&state, 0, P - 1);
    if (p == emptied) p = (p + 1) % P;
    dealt[j] = (int32_t)p;
    for (int64_t d = 0; d < D; d++) values[j * D + d] = aotk__random_normal(&state);
  }
  for (int64_t p = 0; p < P; p++) {
    const double partial_lse = aotk__merge_reference_partial_f64(scores, values, dealt, keys, (int32_t)p, D, partial);
    const bool empty = partial_lse == -(double)INFINITY;
    float lse = empty ? -INFINITY : (float)partial_lse;
    if (kind == ROW_NAN_LSE && p == row % P) lse = NAN;
    store_value(&x->lpart_buffer, AOTK_DTYPE_FLOAT32, merge_lse_index(x, &x->lpart, p, row), lse);
    for (int64_t d = 0; d < D; d++) {
      const float value = empty ? garbage(c->partial_dtype, row + d + p) : (float)partial[d];
      store_value(&x->part_buffer, c->partial_dtype, merge_part_index(x, p, row, d), value);
    }
  }
  /* The float64 attention over every key, and the float32 merge of what was stored. */
  const float sink = c->sinks ? x->sinks[row % H] : -INFINITY;
  x->ref_lse[row] = aotk__merge_reference_attention_f64(scores, values, keys, D, sink, x->ref_out + row * D);
  float lse_p[MAX_PARTIALS];
  for (int64_t p = 0; p < P; p++) {
    lse_p[p] = load_value(&x->lpart_buffer, AOTK_DTYPE_FLOAT32, merge_lse_index(x, &x->lpart, p, row));
    for (int64_t d = 0; d < D; d++) {
      stored[p * D + d] = load_value(&x->part_buffer, c->partial_dtype, merge_part_index(x, p, row, d));
    }
  }
  aotk__merge_reference_lowp(lse_p, stored, P, D, sink, (int)c->out_dtype, x->lowp_out + row * D);
}

static bool merge_run_create(merge_run *x, const merge_case *c) {
  memset(x, 0, sizeof *x);
  x->c = c;
  const int64_t P = c->num_partials, D = c->head_dim;
  x->rows = c->batch * c->seqlen_q * c->heads;
  const bool describable = P <= MAX_PARTIALS && (c->layout != MERGE_IN_PLACE || c->partial_dtype == c->out_dtype);
  CHECK_MSG(describable, "a case this test cannot run: %lld partials (at most %d), or in place with two dtypes",
            (long long)P, (int)MAX_PARTIALS);
  if (!describable) return false;
  merge_layouts(x);
  if (!buffer_create(&x->part_buffer, strided_span(&x->part), dtype_bytes(c->partial_dtype)) ||
      !buffer_create(&x->lpart_buffer, strided_span(&x->lpart), 4)) {
    return false;
  }
  if (c->layout == MERGE_IN_PLACE) {
    x->out_storage = &x->part_buffer;
    x->lse_storage = &x->lpart_buffer;
  } else {
    if (!buffer_create(&x->out_buffer, strided_span(&x->out), dtype_bytes(c->out_dtype)) ||
        !buffer_create(&x->lse_buffer, strided_span(&x->lse), 4)) {
      return false;
    }
    x->out_storage = &x->out_buffer;
    x->lse_storage = &x->lse_buffer;
  }
  x->kinds = host_alloc(x->rows, sizeof(row_kind));
  x->ref_out = host_alloc(x->rows * D, sizeof(double));
  x->ref_lse = host_alloc(x->rows, sizeof(double));
  x->lowp_out = host_alloc(x->rows * D, sizeof(float));
  double *scores = host_alloc(c->keys, sizeof(double)), *values = host_alloc(c->keys * D, sizeof(double));
  double *partial = host_alloc(D, sizeof(double));
  float *stored = host_alloc(P * D, sizeof(float));
  int32_t *dealt = host_alloc(c->keys, sizeof(int32_t));
  bool ok = x->kinds != NULL && x->ref_out != NULL && x->ref_lse != NULL && x->lowp_out != NULL && scores != NULL &&
            values != NULL && partial != NULL && stored != NULL && dealt != NULL;
  if (ok && c->sinks) {
    uint64_t state = c->seed ^ 0x51ull;
    x->sinks = host_alloc(c->heads, sizeof(float));
    ok = x->sinks != NULL;
    for (int64_t h = 0; ok && h < c->heads; h++) x->sinks[h] = 1.5f * aotk__random_normal(&state);
    ok = ok && aotk_gpu_test_upload(&x->sinks_device, x->sinks, (size_t)c->heads * sizeof(float));
  }
  if (ok) {
    /* Every element of the buffers (padding too) starts as a value nothing may read or write. */
    for (int64_t e = 0; e < x->part_buffer.elements; e++) store_value(&x->part_buffer, c->partial_dtype, e, -7.0f);
    for (int64_t e = 0; e < x->lpart_buffer.elements; e++) store_value(&x->lpart_buffer, AOTK_DTYPE_FLOAT32, e, 99.0f);
    for (int64_t row = 0; row < x->rows; row++) {
      x->kinds[row] = row % 9 == 4 && P >= 2 ? ROW_ONE_EMPTY
                      : row % 11 == 6        ? ROW_ALL_EMPTY
                      : row % 13 == 8        ? ROW_NAN_LSE
                                             : ROW_NORMAL;
      merge_row_data(x, row, scores, dealt, values, partial, stored);
    }
    for (int64_t e = 0; e < x->rows * D; e++) {
      if (x->kinds[e / D] == ROW_ALL_EMPTY || x->kinds[e / D] == ROW_NAN_LSE) continue;
      const double error = fabs((double)x->lowp_out[e] - x->ref_out[e]);
      if (!(error <= x->lowp_error)) x->lowp_error = isnan(error) ? INFINITY : error;
    }
    x->bound = 2.0 * x->lowp_error + AOTK__CHECK_ERROR_FLOOR;
    x->part_input = host_alloc(x->part_buffer.elements, x->part_buffer.element_size);
    x->lpart_input = host_alloc(x->lpart_buffer.elements, 4);
    ok = x->part_input != NULL && x->lpart_input != NULL;
  }
  if (ok) {
    memcpy(x->part_input, x->part_buffer.host, buffer_bytes(&x->part_buffer));
    memcpy(x->lpart_input, x->lpart_buffer.host, buffer_bytes(&x->lpart_buffer));
    ok = buffer_upload(&x->part_buffer) && buffer_upload(&x->lpart_buffer) && aotk_gpu_test_settle();
  }
  free(scores);
  free(values);
  free(partial);
  free(stored);
  free(dealt);
  merge_params(x);
  return ok;
}

/* Runs the merge on fresh outputs (poisoned; in place, the partials uploaded again), downloads, checks
 * coverage (in place: nothing but partial 0's out and lse changed) and unpacks out [rows, head_dim] and
 * lse [rows]. */
static bool run_merge(merge_run *x, const aotk_merge_params *params, double *out, double *lse, const char *label) {
  const merge_case *c = x->c;
  const bool in_place = c->layout == MERGE_IN_PLACE;
  bool ok;
  if (in_place) {
    memcpy(x->part_buffer.host, x->part_input, buffer_bytes(&x->part_buffer));
    memcpy(x->lpart_buffer.host, x->lpart_input, buffer_bytes(&x->lpart_buffer));
    ok = buffer_upload(&x->part_buffer) && buffer_upload(&x->lpart_buffer);
  } else {
    ok = buffer_poison(&x->out_buffer) && buffer_poison(&x->lse_buffer);
  }
  ok = ok && aotk_gpu_test_settle();
  if (!ok) return false;
  aotk_status status = aotk_attn_merge(params, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_merge: %s: %s", label, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK || !aotk_gpu_test_synchronize(label)) return false;
  if (!buffer_download(x->out_storage) || !buffer_download(x->lse_storage)) return false;
  const bool lse_written = params->lse.data != NULL;
  if (in_place) {
    /* Partials 1.. and every padding element as uploaded; partial 0's lse too when lse is not asked for. */
    uint8_t *inside = host_alloc(x->part_buffer.elements, 1), *lse_inside = host_alloc(x->lpart_buffer.elements, 1);
    if (inside == NULL || lse_inside == NULL) {
      free(inside);
      free(lse_inside);
      return false;
    }
    for (int64_t e = 0; e < x->rows * c->head_dim; e++) inside[strided_at(&x->out, e)] = 1;
    for (int64_t row = 0; lse_written && row < x->rows; row++) lse_inside[merge_lse_index(x, &x->lse, 0, row)] = 1;
    int64_t changed = 0;
    const size_t size = x->part_buffer.element_size;
    for (int64_t e = 0; e < x->part_buffer.elements; e++) {
      changed += !inside[e] && memcmp((uint8_t *)x->part_buffer.host + e * size, (uint8_t *)x->part_input + e * size,
                                      size) != 0;
    }
    for (int64_t e = 0; e < x->lpart_buffer.elements; e++) {
      changed += !lse_inside[e] && memcmp((float *)x->lpart_buffer.host + e, (float *)x->lpart_input + e, 4) != 0;
    }
    CHECK_MSG(changed == 0, "%s: %lld elements changed outside partial 0's out and lse", label, (long long)changed);
    free(inside);
    free(lse_inside);
  } else {
    check_coverage(&x->out_buffer, &x->out, true, label, "out");
    check_coverage(&x->lse_buffer, &x->lse, lse_written, label, "lse");
  }
  for (int64_t row = 0; row < x->rows; row++) {
    for (int64_t d = 0; d < c->head_dim; d++) {
      out[row * c->head_dim + d] = load_value(x->out_storage, c->out_dtype, merge_out_index(x, row, d));
    }
    lse[row] = load_value(x->lse_storage, AOTK_DTYPE_FLOAT32, merge_lse_index(x, &x->lse, 0, row));
  }
  return true;
}

static void compare_merge(const merge_run *x, const double *out, const double *lse, bool lse_written, const char *label) {
  const merge_case *c = x->c;
  const int64_t D = c->head_dim;
  double max_error = 0.0;
  int64_t worst = 0, bad_lse = 0, first_bad_lse = -1, bad_special = 0, first_special = -1;
  for (int64_t row = 0; row < x->rows; row++) {
    const row_kind kind = x->kinds[row];
    const double *got = out + row * D;
    if (kind == ROW_NAN_LSE || kind == ROW_ALL_EMPTY) {
      bool ok = true;
      for (int64_t d = 0; d < D; d++) ok &= kind == ROW_NAN_LSE ? isnan(got[d]) : got[d] == 0.0;
      if (lse_written) ok &= kind == ROW_NAN_LSE ? isnan(lse[row]) : lse[row] == x->ref_lse[row];
      if (!ok && first_special < 0) first_special = row;
      bad_special += !ok;
      continue;
    }
    for (int64_t d = 0; d < D; d++) {
      double error = fabs(got[d] - x->ref_out[row * D + d]);
      if (isnan(error)) error = INFINITY;
      if (error > max_error) {
        max_error = error;
        worst = row * D + d;
      }
    }
    if (lse_written && !(fabs(lse[row] - x->ref_lse[row]) <= lse_tolerance(x->ref_lse[row]))) {
      if (first_bad_lse < 0) first_bad_lse = row;
      bad_lse++;
    }
  }
  CHECK_MSG(max_error <= x->bound,
            "%s: out error %.3g > bound %.3g (2 x same-precision %.3g + %.2g) at (row %lld, %lld): %.6g, expected %.6g",
            label, max_error, x->bound, x->lowp_error, AOTK__CHECK_ERROR_FLOOR, (long long)(worst / D),
            (long long)(worst % D), out[worst], x->ref_out[worst]);
  CHECK_MSG(bad_lse == 0, "%s: %lld lse values off, first row %lld: %.7g, expected %.7g", label, (long long)bad_lse,
            (long long)first_bad_lse, first_bad_lse >= 0 ? lse[first_bad_lse] : 0.0,
            first_bad_lse >= 0 ? x->ref_lse[first_bad_lse] : 0.0);
  CHECK_MSG(bad_special == 0,
            "%s: %lld rows with no key (out 0, lse -inf or the sink) or a NaN lse (out and lse NaN) are wrong, first "
            "row %lld (%s): out[0] %.6g, lse %.7g",
            label, (long long)bad_special, (long long)first_special,
            first_special >= 0 && x->kinds[first_special] == ROW_NAN_LSE ? "NaN lse" : "no key",
            first_special >= 0 ? out[first_special * D] : 0.0, first_special >= 0 ? lse[first_special] : 0.0);
  record_fraction(c->out_dtype, max_error, x->bound, c->name);
}

static void run_merge_case(const void *argument) {
  const merge_case *c = argument;
  merge_run x;
  const int64_t D = c->head_dim;
  double *out[2] = {NULL, NULL}, *lse[2] = {NULL, NULL};
  if (!merge_run_create(&x, c)) goto done;
  for (int i = 0; i < 2; i++) {
    out[i] = host_alloc(x.rows * D, sizeof(double));
    lse[i] = host_alloc(x.rows, sizeof(double));
    if (out[i] == NULL || lse[i] == NULL) goto done;
  }
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_merge_query(AOTK_OP_MERGE, &x.params, &info);
  CHECK_MSG(status == AOTK_OK, "aotk_merge_query: %s: %s", aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) goto done;
  const bool aligned = tensor_aligned16(&x.params.out_partials) && tensor_aligned16(&x.params.out);
  CHECK_MSG(strncmp(info.kernel_name, aligned ? "attn_merge_aligned_" : "attn_merge_any_", aligned ? 19 : 15) == 0 &&
                info.aligned == (int32_t)aligned,
            "the query names %s (aligned %d), expected the %s kernel", info.kernel_name, (int)info.aligned,
            aligned ? "aligned" : "any");
  /* A program per block_m rows and block_n head-dim columns; per block_m rows when lse is written over
   * the partials' lse (in place). */
  const bool whole_rows = x.params.lse.data != NULL && x.params.lse.data == x.params.lse_partials.data;
  const int64_t merge_grid = info.block_m > 0 && info.block_n > 0
                                 ? ceil_div(x.rows, info.block_m) * (whole_rows ? 1 : ceil_div(D, info.block_n))
                                 : -1;
  CHECK_MSG(info.num_splits == c->num_partials && info.launches == 1 && info.workspace_bytes == 0 &&
                info.block_m > 0 && info.grid == merge_grid &&
                info.features == (c->sinks ? AOTK_FEATURE_SINKS : 0u),
            "query: num_splits %d, launches %d, workspace %zu, grid %lld for %lld rows of %d by %lld columns of %d, "
            "features 0x%x",
            (int)info.num_splits, (int)info.launches, info.workspace_bytes, (long long)info.grid, (long long)x.rows,
            (int)info.block_m, (long long)D, (int)info.block_n, (unsigned)info.features);
  printf("    %s, grid %lld\n", info.kernel_name, (long long)info.grid);
  if (!run_merge(&x, &x.params, out[0], lse[0], "merge")) goto done;
  compare_merge(&x, out[0], lse[0], c->with_lse, "merge");
  if (!run_merge(&x, &x.params, out[1], lse[1], "merge again")) goto done;
  int64_t differences = memcmp(out[0], out[1], (size_t)(x.rows * D) * sizeof(double)) != 0;
  differences += c->with_lse && memcmp(lse[0], lse[1], (size_t)x.rows * sizeof(double)) != 0;
  CHECK_MSG(differences == 0, "the same merge twice gave other bits");
done:
  for (int i = 0; i < 2; i++) {
    free(out[i]);
    free(lse[i]);
  }
  merge_run_destroy(&x);
}

typedef struct merge_row {
  aotk_dtype partial_dtype, out_dtype;
  int64_t num_partials, batch, seqlen_q, heads, head_dim, keys;
  merge_layout layout;
  int with_lse, sinks;
} merge_row;

#define F32 AOTK_DTYPE_FLOAT32
#define F16 AOTK_DTYPE_FLOAT16
#define BF16 AOTK_DTYPE_BFLOAT16
static const merge_row merge_rows[] = {
    {F32, F32, 1, 2, 5, 7, 64, 37, MERGE_CONTIGUOUS, 1, 0},
    {F32, BF16, 2, 2, 5, 7, 128, 37, MERGE_CONTIGUOUS, 1, 1},
    {F32, F16, 5, 3, 4, 6, 64, 37, MERGE_PACKED, 1, 0},
    {F16, F32, 2, 2, 5, 7, 40, 37, MERGE_STRIDED, 1, 0},
    {BF16, BF16, 5, 2, 3, 11, 200, 3, MERGE_STRIDED, 0, 0},
    {BF16, F16, 2, 1, 9, 8, 256, 37, MERGE_PACKED, 0, 1},
    {F16, F16, 5, 2, 5, 7, 128, 37, MERGE_IN_PLACE, 1, 0},
    {F32, F32, 2, 2, 5, 7, 40, 37, MERGE_IN_PLACE, 1, 1},
    {BF16, F32, 1, 1, 16, 5, 8, 37, MERGE_PACKED, 1, 0},
    {F32, BF16, 5, 2, 5, 7, 128, 37, MERGE_STRIDED_ALIGNED, 1, 1},
    {BF16, BF16, 2, 3, 2, 13, 64, 37, MERGE_IN_PLACE, 0, 0},
    {F16, BF16, 5, 2, 5, 7, 96, 3, MERGE_CONTIGUOUS, 1, 0},
    {F16, F16, 2, 2, 5, 7, 72, 37, MERGE_STRIDED, 1, 1},
    {F32, BF16, 17, 2, 3, 7, 128, 37, MERGE_CONTIGUOUS, 1, 1},
    {BF16, BF16, 40, 1, 2, 5, 64, 37, MERGE_IN_PLACE, 1, 0},
    {F32, F16, 133, 1, 1, 32, 128, 300, MERGE_STRIDED_ALIGNED, 1, 0},
};
#undef F32
#undef F16
#undef BF16

static void make_merge_case(merge_case *c, const merge_row *row, int index) {
  memset(c, 0, sizeof *c);
  c->partial_dtype = row->partial_dtype;
  c->out_dtype = row->out_dtype;
  c->num_partials = row->num_partials;
  c->batch = row->batch;
  c->seqlen_q = row->seqlen_q;
  c->heads = row->heads;
  c->head_dim = row->head_dim;
  c->keys = row->keys;
  c->layout = row->layout;
  c->with_lse = row->with_lse;
  c->sinks = row->sinks;
  c->seed = seed + 0x3e7ull + (uint64_t)index * 7919u;
  snprintf(c->name, sizeof c->name, "merge P=%lld %s->%s b=%lld sq=%lld h=%lld d=%lld keys=%lld %s%s%s",
           (long long)c->num_partials, dtype_label(c->partial_dtype), dtype_label(c->out_dtype), (long long)c->batch,
           (long long)c->seqlen_q, (long long)c->heads, (long long)c->head_dim, (long long)c->keys,
           merge_layout_names[c->layout], c->with_lse ? " lse" : "", c->sinks ? " sinks" : "");
}

/* A merge with head_dim 12 (not a multiple of 8) is refused and writes nothing. */
static void test_merge_refusal(void) {
  const merge_row row = {AOTK_DTYPE_FLOAT32, AOTK_DTYPE_FLOAT16, 2, 1, 3, 2, 12, 5, MERGE_CONTIGUOUS, 1, 0};
  merge_case c;
  make_merge_case(&c, &row, 9002);
  merge_run x;
  if (merge_run_create(&x, &c) && buffer_poison(&x.out_buffer) && buffer_poison(&x.lse_buffer) && aotk_gpu_test_settle()) {
    aotk_status status = aotk_attn_merge(&x.params, (aotk_stream)stream);
    CHECK_MSG(status == AOTK_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim 12: %s", aotk_status_name(status));
    if (aotk_gpu_test_synchronize("a refused merge") && buffer_download(&x.out_buffer) && buffer_download(&x.lse_buffer)) {
      check_coverage(&x.out_buffer, &x.out, false, "a refused merge", "out");
      check_coverage(&x.lse_buffer, &x.lse, false, "a refused merge", "lse");
    }
  }
  merge_run_destroy(&x);
}

int main(void) {
  if (!aotk_gpu_test_setup()) return aotk_gpu_test_skip_all();
  RUN_TEST(test_decode_refusals);
  RUN_TEST(test_merge_refusal);
  static decode_case decode_cases[sizeof decode_rows / sizeof decode_rows[0]];
  for (size_t i = 0; i < sizeof decode_rows / sizeof decode_rows[0]; i++) {
    make_decode_case(&decode_cases[i], &decode_rows[i], (int)i);
    aotk_test_run_with(decode_cases[i].name, run_decode_case, &decode_cases[i]);
  }
  static merge_case merge_cases[sizeof merge_rows / sizeof merge_rows[0]];
  for (size_t i = 0; i < sizeof merge_rows / sizeof merge_rows[0]; i++) {
    make_merge_case(&merge_cases[i], &merge_rows[i], (int)i);
    aotk_test_run_with(merge_cases[i].name, run_merge_case, &merge_cases[i]);
  }
  printf("worst error as a fraction of its bound: fp32 %.3f, bf16 %.3f, fp16 %.3f\n",
         worst_fraction[AOTK_DTYPE_FLOAT32], worst_fraction[AOTK_DTYPE_BFLOAT16], worst_fraction[AOTK_DTYPE_FLOAT16]);
  printf("    fp32: %s\n    bf16: %s\n    fp16: %s\n", worst_case[AOTK_DTYPE_FLOAT32], worst_case[AOTK_DTYPE_BFLOAT16],
         worst_case[AOTK_DTYPE_FLOAT16]);
  driver->cuStreamDestroy(stream);
  return aotk_test_finish();
}
