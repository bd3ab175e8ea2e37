/*
 * A libFuzzer target over the public entry points that take parameters: aotk_attn_fwd, aotk_attn_bwd,
 * aotk_query, aotk_sel_fwd, aotk_sel_bwd, aotk_sel_query and aotk_sel_check_indices (issue 14), and
 * aotk_attn_decode, aotk_decode_query, aotk_attn_merge and aotk_merge_query (0.4).
 *
 * Each input decodes into one call. A small problem is built valid first (shapes, contiguous strides,
 * dtypes, the features a byte turns on: causal, windows, softcap, ALiBi, sinks, dropout, varlen,
 * block_cnt; for decoding a contiguous or paged cache, seqlen_q 1..16 or packed queries (cu_seqlens_q,
 * max_seqlen_q up to 5000), GQA, splits forced or chosen, appending (k_new and v_new) or not; for the
 * merge dense or packed partials of any float dtype, in place or not) and then a run of edits
 * overwrites any field with a decoded value: a shape or stride entry (small, near a power of two,
 * negative or huge), a rank, a dtype, a pointer (NULL, moved by a few bytes, another tensor's), a
 * scalar's bits (NaN and the infinities included), num_splits, max_seqlen_k, max_seqlen_q, a dense
 * decoding call repacked (or a packed one unpacked), struct_size, the workspace's size and address.
 * Nothing is dereferenced: the pointers are fake, so sizes far past any GPU's memory are fine, and the
 * library runs over a fake driver table that records what reaches it, with four devices (sm_90, sm_80,
 * sm_86 and sm_120: the cubins with TMA, the sm_80 cubins, less shared memory, the PTX), the input's
 * last byte choosing whose context is current.
 *
 * The target aborts (a finding) on
 * - a crash or a sanitizer report (the build adds AddressSanitizer and UndefinedBehaviorSanitizer);
 * - a refused call that reached the driver: a launch, a memset, a copy or a TMA descriptor for a call
 *   that then returned an error; any call reaching an entry it has no business with (allocation,
 *   streams, graphs);
 * - an accepted call that hands a kernel a pointer outside every span the caller described (each
 *   tensor's bytes as its shape, strides and dtype say, the workspace), or encodes a TMA descriptor, or
 *   sets or copies memory, reaching past one;
 * - a refusal for want of a kernel (AOTK_ERROR_KERNEL_NOT_BUILT) in a build made without a filter;
 * - for the decoding, appending and merge kernels, more: the whole byte range each pointer argument can
 *   reach, worked out from the packed arguments as kernels/attn_decode.py indexes (grid, sizes, strides,
 *   flags; packed queries' rows, offsets read on the device, by the header's contract: q's own rows),
 *   must lie inside one span (the appending kernel's cache writes inside the cache's own); the
 *   arguments must describe the caller's problem (no size cut to int32, a grid that covers every row
 *   and no more, the alignment the compiled variant assumes); the appending kernel runs before the
 *   decoding kernel, which is told seqlen_new; and the call must agree with its query (the same
 *   refusal, the launches, grid and splits it announced, the launches the header counts), the query
 *   writing no byte past info->struct_size.
 * What it does not check yet: the same full reach for the attention and selection kernels (see
 * check_launch_extent; tests/test_api.c checks those per family on chosen cases).
 *
 * `make test` runs it for AOTK_FUZZ_SECONDS (60) from the committed corpus (tests/fuzz_corpus), which a
 * longer run grows: build/tests/fuzz_api build/fuzz-corpus tests/fuzz_corpus -max_total_time=N.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotk.h"
#include "aotk_driver.h"
#include "aotk_kernel_table.h"

/* ---- the input ---------------------------------------------------------------------------------- */

typedef struct reader {
  const uint8_t *data;
  size_t left;
} reader;

static uint64_t take(reader *r, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; i++) {
    uint64_t byte = 0;
    if (r->left > 0) {
      byte = *r->data++;
      r->left--;
    }
    value |= byte << (8 * i);
  }
  return value;
}

/* A value in [lo, hi]. */
static int64_t take_range(reader *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(take(r, 4) % (uint64_t)(hi - lo + 1));
}

/* A size-like value: mostly small, sometimes near a power of two, negative, or huge. */
static int64_t take_size(reader *r) {
  switch (take(r, 1) % 8) {
    case 0:
      return -(int64_t)take(r, 1);
    case 1: {
      int shift = (int)take_range(r, 0, 62);
      return ((int64_t)1 << shift) + take_range(r, -2, 2);
    }
    case 2:
      return (int64_t)take(r, 8);
    case 3:
      return INT64_MAX - (int64_t)take(r, 1);
    default:
      return (int64_t)take(r, 2) % 1100;
  }
}

static float take_float(reader *r) {
  static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1e-30f, 1e30f, INFINITY, -INFINITY, NAN};
  if (take(r, 1) % 2) return special[take(r, 1) % (sizeof special / sizeof special[0])];
  uint32_t bits = (uint32_t)take(r, 4);
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

/* ---- the fake address space --------------------------------------------------------------------- */

/* Tensor slot i lives at BASE + i * STRIDE (1 TiB apart, so no two overlap); the workspace has its own. */
#define REGION_BASE ((uintptr_t)0x100000000000ull)
#define REGION_STRIDE ((uintptr_t)0x10000000000ull)
enum { MAX_SPANS = 24 };

typedef struct span {
  uintptr_t lo, hi; /* [lo, hi) bytes */
  const char *what;
  const aotk_tensor *tensor; /* the description it comes from, if a tensor's */
} span;

/* Per thread: the driver's entries run on the calling thread, and the stress build calls from many. */
static _Thread_local struct {
  span spans[MAX_SPANS];
  int span_count;
  /* what reached the driver during the current call */
  int launches, memsets, copies, encodes;
  /* The decoding or merge call in flight (its caller's params, for the launches' checks), what its
   * query announced (valid when `announced`), and the splits the decoding launch packed, for its merge. */
  const aotk_decode_params *decode;
  const aotk_merge_params *merge;
  aotk_kernel_info announced_info;
  bool announced;
  int64_t decode_splits;
  int decode_launches, append_launches; /* of this call, in the order they came */
} seen;

static void fail(const char *what) {
  fprintf(stderr, "fuzz_api: %s\n", what);
  abort();
}

static size_t dtype_bytes(aotk_dtype dtype) {
  switch (dtype) {
    case AOTK_DTYPE_FLOAT16:
    case AOTK_DTYPE_BFLOAT16:
      return 2;
    case AOTK_DTYPE_FLOAT32:
    case AOTK_DTYPE_INT32:
      return 4;
    case AOTK_DTYPE_INT64:
      return 8;
    case AOTK_DTYPE_UINT8:
      return 1;
  }
  return 0;
}

/* The bytes a tensor description covers, or nothing for one the library must refuse (or NULL). */
static void add_tensor_span(const aotk_tensor *t, const char *what) {
  if (t->data == NULL || seen.span_count == MAX_SPANS) return;
  const size_t element = dtype_bytes(t->dtype);
  if (element == 0 || t->rank < 1 || t->rank > AOTK_TENSOR_MAX_RANK) return;
  /* In 128 bits, each term clamped to 2^100 (six of them cannot overflow), the span to the address space. */
  const __int128 cap = (__int128)1 << 100;
  __int128 lo = 0, hi = 0;
  for (int d = 0; d < t->rank; d++) {
    if (t->shape[d] <= 0) return; /* empty: nothing to reach */
    __int128 reach = (__int128)(t->shape[d] - 1) * t->strides[d];
    reach = reach > cap ? cap : reach < -cap ? -cap : reach;
    if (reach < 0) lo += reach; else hi += reach;
  }
  const __int128 base = (__int128)(uintptr_t)t->data, top = (__int128)UINTPTR_MAX;
  const __int128 first = base + lo * (__int128)element, end = base + (hi + 1) * (__int128)element;
  span *s = &seen.spans[seen.span_count++];
  s->lo = (uintptr_t)(first < 0 ? 0 : first);
  s->hi = (uintptr_t)(end > top ? top : end);
  s->what = what;
  s->tensor = t;
}

static void add_span(uintptr_t lo, size_t bytes, const char *what) {
  if (lo == 0 || bytes == 0 || seen.span_count == MAX_SPANS) return;
  const uintptr_t hi = bytes > UINTPTR_MAX - lo ? UINTPTR_MAX : lo + bytes; /* a caller may claim that much */
  seen.spans[seen.span_count++] = (span){lo, hi, what, NULL};
}

/* [address, address + bytes) inside one span. */
static void check_reach(uintptr_t address, unsigned __int128 bytes, const char *what) {
  for (int i = 0; i < seen.span_count; i++) {
    const span *s = &seen.spans[i];
    if (address >= s->lo && address < s->hi && bytes <= (unsigned __int128)(s->hi - address)) return;
  }
  fprintf(stderr, "fuzz_api: %s reaches %#lx + %llu bytes, outside every span the caller described:\n", what,
          (unsigned long)address, (unsigned long long)bytes);
  for (int i = 0; i < seen.span_count; i++) {
    const span *s = &seen.spans[i];
    fprintf(stderr, "  %-14s [%#lx, %#lx)", s->what, (unsigned long)s->lo, (unsigned long)s->hi);
    if (s->tensor != NULL) {
      fprintf(stderr, " data %p dtype %d rank %d shape", s->tensor->data, (int)s->tensor->dtype, s->tensor->rank);
      for (int d = 0; d < AOTK_TENSOR_MAX_RANK; d++) fprintf(stderr, " %lld", (long long)s->tensor->shape[d]);
      fprintf(stderr, " strides");
      for (int d = 0; d < AOTK_TENSOR_MAX_RANK; d++) fprintf(stderr, " %lld", (long long)s->tensor->strides[d]);
    }
    fprintf(stderr, "\n");
  }
  abort();
}

/* [address, address + bytes) inside the span of tensor `t` itself (a kernel's writes into it). */
static void check_reach_in(uintptr_t address, unsigned __int128 bytes, const aotk_tensor *t, const char *what) {
  for (int i = 0; i < seen.span_count; i++) {
    const span *s = &seen.spans[i];
    if (s->tensor != t) continue;
    if (address >= s->lo && address < s->hi && bytes <= (unsigned __int128)(s->hi - address)) return;
    fprintf(stderr, "fuzz_api: %s reaches %#lx + %llu bytes, outside %s [%#lx, %#lx)\n", what, (unsigned long)address,
            (unsigned long long)bytes, s->what, (unsigned long)s->lo, (unsigned long)s->hi);
    abort();
  }
  fprintf(stderr, "fuzz_api: %s reaches %#lx + %llu bytes of a tensor without a span\n", what, (unsigned long)address,
          (unsigned long long)bytes);
  abort();
}

/* ---- how far the decoding and merge kernels reach ------------------------------------------------ */

/* A failed expectation about a launch: what kernels/attn_decode.py would do with these arguments. */
#define EXPECT(condition, ...)                                   \
  do {                                                           \
    if (!(condition)) {                                          \
      fprintf(stderr, "fuzz_api: %s: ", e->function_name);      \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, " (expected: %s)\n", #condition);          \
      abort();                                                   \
    }                                                            \
  } while (0)

static uintptr_t arg_pointer(void **params, int i) {
  uintptr_t value;
  memcpy(&value, params[i], sizeof value);
  return value;
}
static int64_t arg_i64(void **params, int i) {
  int64_t value;
  memcpy(&value, params[i], sizeof value);
  return value;
}
static int32_t arg_i32(void **params, int i) {
  int32_t value;
  memcpy(&value, params[i], sizeof value);
  return value;
}

/* One index of an access: it takes the values start .. start + count - 1 and moves the address by
 * `stride` elements per step. */
typedef struct axis {
  int64_t start, count, stride;
} axis;

/* Adds the lowest and highest of sum(index * stride) over the box of `axes` to *lo and *hi; false when
 * the box is empty (nothing accessed). In 128 bits, each term clamped to 2^100 (a few cannot overflow;
 * anything that large lies outside the address space anyway). */
static bool box_offsets(const axis *axes, int count, __int128 *lo, __int128 *hi) {
  const __int128 cap = (__int128)1 << 100;
  __int128 low = 0, high = 0;
  for (int i = 0; i < count; i++) {
    if (axes[i].count < 1) return false;
    __int128 first = (__int128)axes[i].start * axes[i].stride;
    __int128 last = ((__int128)axes[i].start + axes[i].count - 1) * axes[i].stride;
    first = first > cap ? cap : first < -cap ? -cap : first;
    last = last > cap ? cap : last < -cap ? -cap : last;
    low += first < last ? first : last;
    high += first < last ? last : first;
  }
  *lo = low, *hi = high;
  return true;
}

/* The element offsets an access reaches: rows 0 .. num_rows - 1 of a flattened (batch, token, head)
 * grid, head fastest (as both kernels number their rows), moving by stride_b, stride_t, stride_h, plus
 * the `extra` axes (partials, head-dim columns). The rows form at most three boxes: whole batches, the
 * last batch's whole tokens, the last token's heads; the lowest and highest offset of their union is
 * what must fit in a span. False when nothing is reached. */
static bool rows_offsets(int64_t num_rows, int64_t seqlen_q, int64_t heads, int64_t stride_b, int64_t stride_t,
                         int64_t stride_h, const axis *extra, int extra_count, __int128 *lo, __int128 *hi) {
  enum { MAX_EXTRA = 3 };
  if (num_rows < 1 || seqlen_q < 1 || heads < 1 || extra_count > MAX_EXTRA) return false;
  const int64_t per_batch = seqlen_q * heads, batches = num_rows / per_batch, rest = num_rows % per_batch;
  const axis boxes[3][3] = {
      {{0, batches, stride_b}, {0, seqlen_q, stride_t}, {0, heads, stride_h}},
      {{batches, 1, stride_b}, {0, rest / heads, stride_t}, {0, heads, stride_h}},
      {{batches, 1, stride_b}, {rest / heads, 1, stride_t}, {0, rest % heads, stride_h}},
  };
  bool any = false;
  for (int b = 0; b < 3; b++) {
    axis axes[3 + MAX_EXTRA];
    memcpy(axes, boxes[b], sizeof boxes[b]);
    if (extra_count > 0) memcpy(axes + 3, extra, (size_t)extra_count * sizeof *extra);
    __int128 box_lo, box_hi;
    if (!box_offsets(axes, 3 + extra_count, &box_lo, &box_hi)) continue;
    *lo = any && *lo < box_lo ? *lo : box_lo;
    *hi = any && *hi > box_hi ? *hi : box_hi;
    any = true;
  }
  return any;
}

/* Elements lo .. hi (offsets from `base`, `element` bytes each) inside one span, or inside tensor
 * `within`'s own span when it is not NULL. */
static void check_offsets_in(uintptr_t base, __int128 lo, __int128 hi, size_t element, const char *kernel,
                             const char *argument, const aotk_tensor *within) {
  char what[160];
  snprintf(what, sizeof what, "%s's %s (elements %lld .. %lld of %zu bytes)", kernel, argument, (long long)lo,
           (long long)hi, element);
  const __int128 first = (__int128)base + lo * (__int128)element, end = (__int128)base + (hi + 1) * (__int128)element;
  if (first < 0 || end > (__int128)UINTPTR_MAX) {
    fprintf(stderr, "fuzz_api: %s runs outside the address space from %#lx\n", what, (unsigned long)base);
    abort();
  }
  if (within != NULL) {
    check_reach_in((uintptr_t)first, (unsigned __int128)(end - first), within, what);
  } else {
    check_reach((uintptr_t)first, (unsigned __int128)(end - first), what);
  }
}

static void check_offsets(uintptr_t base, __int128 lo, __int128 hi, size_t element, const char *kernel,
                          const char *argument) {
  check_offsets_in(base, lo, hi, element, kernel, argument, NULL);
}

static void check_box(uintptr_t base, const axis *axes, int count, size_t element, const char *kernel,
                      const char *argument) {
  __int128 lo, hi;
  if (box_offsets(axes, count, &lo, &hi)) check_offsets(base, lo, hi, element, kernel, argument);
}

static void check_box_in(uintptr_t base, const axis *axes, int count, size_t element, const char *kernel,
                         const char *argument, const aotk_tensor *within) {
  __int128 lo, hi;
  if (box_offsets(axes, count, &lo, &hi)) check_offsets_in(base, lo, hi, element, kernel, argument, within);
}

static void check_rows(uintptr_t base, int64_t num_rows, int64_t seqlen_q, int64_t heads, int64_t stride_b,
                       int64_t stride_t, int64_t stride_h, const axis *extra, int extra_count, size_t element,
                       const char *kernel, const char *argument) {
  __int128 lo, hi;
  if (rows_offsets(num_rows, seqlen_q, heads, stride_b, stride_t, stride_h, extra, extra_count, &lo, &hi)) {
    check_offsets(base, lo, hi, element, kernel, argument);
  }
}

/* The smallest and largest block_m of the table rows sharing a kernel's .entry (the fake driver's handle
 * names the first of them). */
static void entry_block_m(const aotk__kernel_entry *e, int64_t *smallest, int64_t *largest) {
  *smallest = INT64_MAX, *largest = 0;
  for (int row = 0; row < aotk__kernel_count; row++) {
    const aotk__kernel_entry *other = &aotk__kernel_table[row];
    if (strcmp(other->function_name, e->function_name) != 0) continue;
    *smallest = other->block_m < *smallest ? other->block_m : *smallest;
    *largest = other->block_m > *largest ? other->block_m : *largest;
  }
}

/* kernels/attn_decode.py's flags (src/aotk_decode.c sets them). */
enum {
  DECODE_WRITE_LSE = 1,
  DECODE_VARLEN = 2,
  DECODE_ALIBI = 16,
  DECODE_SINKS = 32,
  DECODE_PAGED = 256,
  DECODE_SPLIT = 512,
  MERGE_PARTIAL_FP16 = 1024,
  MERGE_PARTIAL_BF16 = 2048,
  MERGE_OUT_FP16 = 4096,
  MERGE_OUT_BF16 = 8192,
  MERGE_WHOLE_ROWS = 16384,
};

/* The table row a query announced: its name on its target (names repeat across targets). */
static const aotk__kernel_entry *announced_row(const aotk_kernel_info *info) {
  for (int row = 0; row < aotk__kernel_count; row++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[row];
    if (e->arch == info->arch && strcmp(e->name, info->kernel_name) == 0) return e;
  }
  return NULL;
}

/* attn_decode(Q, K, V, Out, Lse, BlockTable, CacheSeqlens, CuSeqlensQ, AlibiSlopes, Sinks, OutPartial,
 * LsePartial, 12 int64 q/k/v/out strides, stride_lb, stride_lh, stride_tb, stride_ab, 15 int32 sizes and
 * flags (seqlen_new last), 3 floats), its grid (split fastest, then row chunk, kv head, request). With
 * FLAG_VARLEN, q and out are packed [total_q, heads_q, d] (batch strides 0) and lse [heads_q, total_q],
 * request b's rows starting at CuSeqlensQ[b], read on the device. Three families share the function
 * (a constexpr PAGE_MODE apart: attn_decode, attn_decode_paged, attn_decode_paged_blocks), so the fake
 * driver's handle names an attn_decode row whichever ran; the query's announcement names the one that
 * did. */
static void check_decode_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "pppppppppppplllllllllllllllliiiiiiiiiiiiiiifff") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_decode is out of date", e->param_kinds);
  const aotk_decode_params *d = seen.decode;
  EXPECT(d != NULL, "launched by a call other than aotk_attn_decode");
  /* Appending (include/aotk.h): the new keys are written first, and the decoding kernel attends to
   * seqlen_new more keys per request. */
  const bool append = d->k_new.data != NULL;
  const int64_t seqlen_new = arg_i32(a, 42);
  EXPECT(seqlen_new == (append ? d->k_new.shape[1] : 0), "seqlen_new = %lld for k_new of %lld tokens (data %p)",
         (long long)seqlen_new, (long long)d->k_new.shape[1], d->k_new.data);
  EXPECT(seen.decode_launches == 0 && seen.append_launches == (append ? 1 : 0),
         "launched after %d decoding and %d appending launches of the same call", seen.decode_launches,
         seen.append_launches);
  seen.decode_launches++;
  enum { Q, K, V, OUT, LSE, TABLE, SEQLENS, CU_SEQLENS_Q, ALIBI, SINKS, OUT_PARTIAL, LSE_PARTIAL };
  enum { QB = 12, QS, QH, KP, KS, KH, VP, VS, VH, OB, OS, OH, LB, LH, TB, AB };
  const int64_t batch = arg_i32(a, 28), seqlen_q = arg_i32(a, 29), heads_q = arg_i32(a, 30);
  const int64_t group_size = arg_i32(a, 31), capacity = arg_i32(a, 32), page_size = arg_i32(a, 33);
  const int64_t num_splits = arg_i32(a, 34), split_keys = arg_i32(a, 35), row_chunks = arg_i32(a, 36);
  const int64_t head_dim_qk = 8 * (int64_t)arg_i32(a, 37), head_dim_v = 8 * (int64_t)arg_i32(a, 38);
  const int32_t flags = arg_i32(a, 41);
  const bool paged = flags & DECODE_PAGED, split = flags & DECODE_SPLIT, varlen = flags & DECODE_VARLEN;

  /* The arguments describe the caller's problem (a size cut to int32 would not): dense q [batch,
   * seqlen_q, heads_q, d], or packed q [total_q, heads_q, d] with batch = cu_seqlens_q.shape[0] - 1 and
   * seqlen_q = max_seqlen_q, unsplit, without appending. */
  EXPECT(varlen == (d->cu_seqlens_q.data != NULL) &&
             arg_pointer(a, CU_SEQLENS_Q) == (uintptr_t)(varlen ? d->cu_seqlens_q.data : NULL),
         "flags = %#x, CuSeqlensQ = %#lx for cu_seqlens_q.data %p", (unsigned)flags,
         (unsigned long)arg_pointer(a, CU_SEQLENS_Q), d->cu_seqlens_q.data);
  if (varlen) {
    EXPECT(batch == d->cu_seqlens_q.shape[0] - 1 && seqlen_q == d->max_seqlen_q && heads_q == d->q.shape[1],
           "batch, seqlen_q, heads_q = %lld, %lld, %lld for cu_seqlens_q of %lld, max_seqlen_q %d, q of %lld heads",
           (long long)batch, (long long)seqlen_q, (long long)heads_q, (long long)d->cu_seqlens_q.shape[0],
           (int)d->max_seqlen_q, (long long)d->q.shape[1]);
    EXPECT(seqlen_q >= 1 && num_splits == 1 && !append, "max_seqlen_q %lld, %lld splits, appending %d",
           (long long)seqlen_q, (long long)num_splits, (int)append);
  } else {
    EXPECT(batch == d->q.shape[0] && seqlen_q == d->q.shape[1] && heads_q == d->q.shape[2],
           "batch, seqlen_q, heads_q = %lld, %lld, %lld for q of shape [%lld, %lld, %lld, %lld]", (long long)batch,
           (long long)seqlen_q, (long long)heads_q, (long long)d->q.shape[0], (long long)d->q.shape[1],
           (long long)d->q.shape[2], (long long)d->q.shape[3]);
  }
  EXPECT(group_size >= 1 && heads_q % group_size == 0 && heads_q / group_size == d->k_cache.shape[2],
         "group_size = %lld with heads_q = %lld and %lld kv heads", (long long)group_size, (long long)heads_q,
         (long long)d->k_cache.shape[2]);
  const int64_t q_head_dim = d->q.shape[varlen ? 2 : 3];
  EXPECT(head_dim_qk == q_head_dim && head_dim_v == d->v_cache.shape[3], "head dims %lld, %lld for %lld, %lld",
         (long long)head_dim_qk, (long long)head_dim_v, (long long)q_head_dim, (long long)d->v_cache.shape[3]);
  EXPECT(paged == (d->block_table.data != NULL), "flags = %#x", (unsigned)flags);
  const __int128 expected_capacity =
      paged ? (__int128)d->block_table.shape[1] * d->k_cache.shape[1] : (__int128)d->k_cache.shape[1];
  EXPECT(capacity == expected_capacity && (!paged || page_size == d->k_cache.shape[1]),
         "capacity = %lld, page_size = %lld for a cache of %lld rows per page or request", (long long)capacity,
         (long long)page_size, (long long)d->k_cache.shape[1]);
  /* The splits' key ranges start at split * split_keys in int32. */
  EXPECT(num_splits >= 1 && num_splits <= AOTK_DECODE_MAX_SPLITS && split == (num_splits > 1) && split_keys >= 1 &&
             (num_splits - 1) * split_keys <= (int64_t)INT32_MAX,
         "num_splits = %lld, split_keys = %lld, flags = %#x, capacity %lld", (long long)num_splits,
         (long long)split_keys, (unsigned)flags, (long long)capacity);
  /* Every query row of a group in some program, no program past the last request, and the int32 row
   * numbers (chunk * BLOCK_M + i < group_size * seqlen_q, at most row_chunks * BLOCK_M - 1) free of
   * overflow. */
  int64_t block_m_smallest, block_m_largest;
  entry_block_m(e, &block_m_smallest, &block_m_largest);
  const int64_t group_rows = group_size * seqlen_q;
  EXPECT(row_chunks >= 1 && row_chunks * block_m_largest >= group_rows &&
             row_chunks * block_m_largest - 1 <= (int64_t)INT32_MAX,
         "row_chunks = %lld for %lld rows per group", (long long)row_chunks, (long long)group_rows);
  const int64_t heads_kv = heads_q / group_size;
  EXPECT((__int128)grid == (__int128)batch * heads_kv * row_chunks * num_splits,
         "a grid of %u programs for %lld requests x %lld kv heads x %lld row chunks x %lld splits", grid,
         (long long)batch, (long long)heads_kv, (long long)row_chunks, (long long)num_splits);
  if (seen.announced) {
    const aotk_kernel_info *info = &seen.announced_info;
    EXPECT(info->grid == (int64_t)grid && info->num_splits == num_splits &&
               row_chunks == (group_rows + info->block_m - 1) / info->block_m,
           "aotk_decode_query announced a grid of %lld with %d splits and block_m %d; launched %u, %lld splits, %lld "
           "row chunks",
           (long long)info->grid, (int)info->num_splits, (int)info->block_m, grid, (long long)num_splits,
           (long long)row_chunks);
    /* The family follows the cache. One page lookup per key block (PAGE_MODE 2) reads the block's keys
     * as rows start_n % page_size + 0 .. BLOCK_N - 1 of one page: inside it only when the page size is
     * a multiple of BLOCK_N (start_n is one: the loop starts at a multiple and steps by BLOCK_N). */
    const aotk__kernel_entry *ran = announced_row(info);
    EXPECT(ran != NULL && strcmp(ran->function_name, e->function_name) == 0,
           "aotk_decode_query announced %s on sm_%d, no attn_decode row", info->kernel_name, (int)info->arch);
    EXPECT(paged ? ran->family == AOTK__FAMILY_ATTN_DECODE_PAGED || ran->family == AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS
                 : ran->family == AOTK__FAMILY_ATTN_DECODE,
           "%s (family %d) for a %s cache", ran->name, ran->family, paged ? "paged" : "contiguous");
    EXPECT(ran->family != AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS || page_size % ran->block_n == 0,
           "%s looks pages up per block of %d keys; pages of %lld keys", ran->name, ran->block_n,
           (long long)page_size);
  }
  /* What the aligned-only kernel assumes: 16-byte pointers, strides multiples of 16 elements. */
  static const int aligned_pointers[] = {Q, K, V, OUT, OUT_PARTIAL, LSE_PARTIAL};
  for (size_t i = 0; i < sizeof aligned_pointers / sizeof aligned_pointers[0]; i++) {
    EXPECT(arg_pointer(a, aligned_pointers[i]) % 16 == 0, "pointer argument %d = %#lx", aligned_pointers[i],
           (unsigned long)arg_pointer(a, aligned_pointers[i]));
  }
  for (int i = QB; i <= OH; i++) EXPECT(arg_i64(a, i) % 16 == 0, "stride argument %d = %lld", i, (long long)arg_i64(a, i));

  /* The reach. Rows (request, token, query head): all of them, the grid being whole. Keys: rows
   * 0 .. capacity - 1 of the request (contiguous), or rows 0 .. page_size - 1 of any page the caller
   * described (paged: the page ids are device data, valid by contract; per block, the rows of one page
   * as above). The block table: entries key / page_size of the keys below the capacity, whether looked
   * up per key row or once per block (at its first key, start_n < the request's length <= capacity,
   * an unmasked load). Packed queries: request b's
   * tokens are rows cu_seqlens_q[b] + i for i < min(cu_seqlens_q[b + 1] - cu_seqlens_q[b], max_seqlen_q),
   * device data the header asks to be offsets into q (0 <= cu_seqlens_q[b] <= cu_seqlens_q[b + 1] <=
   * total_q), so by contract every token row lies in 0 .. total_q - 1 (q's own rows, which out and lse
   * must match); the host cannot see more, so that whole box is what must fit. */
  const int64_t rows = batch * seqlen_q * heads_q; /* under 2^38: the grid is whole, 2^32 programs at most */
  const axis columns_qk = {0, head_dim_qk, 1}, columns_v = {0, head_dim_v, 1};
  const int64_t total_q = d->q.shape[0];
  if (varlen) {
    const bool lse = flags & DECODE_WRITE_LSE;
    EXPECT(arg_i64(a, QB) == 0 && arg_i64(a, OB) == 0 && arg_i64(a, LB) == 0 && arg_i64(a, QS) == d->q.strides[0] &&
               arg_i64(a, QH) == d->q.strides[1] && arg_i64(a, OS) == d->out.strides[0] &&
               arg_i64(a, OH) == d->out.strides[1] && (!lse || arg_i64(a, LH) == d->lse.strides[0]),
           "packed strides q (%lld, %lld, %lld), out (%lld, %lld, %lld), lse (%lld, %lld)", (long long)arg_i64(a, QB),
           (long long)arg_i64(a, QS), (long long)arg_i64(a, QH), (long long)arg_i64(a, OB), (long long)arg_i64(a, OS),
           (long long)arg_i64(a, OH), (long long)arg_i64(a, LB), (long long)arg_i64(a, LH));
    const axis cu_axes[] = {{0, batch + 1, 1}};
    check_box(arg_pointer(a, CU_SEQLENS_Q), cu_axes, 1, 4, e->function_name, "CuSeqlensQ");
    const axis q_axes[] = {{0, total_q, arg_i64(a, QS)}, {0, heads_q, arg_i64(a, QH)}, columns_qk};
    check_box(arg_pointer(a, Q), q_axes, 3, 2, e->function_name, "Q (packed)");
  } else {
    check_rows(arg_pointer(a, Q), rows, seqlen_q, heads_q, arg_i64(a, QB), arg_i64(a, QS), arg_i64(a, QH),
               &columns_qk, 1, 2, e->function_name, "Q");
  }
  const int64_t pages_k = paged ? d->k_cache.shape[0] : batch, pages_v = paged ? d->v_cache.shape[0] : batch;
  const int64_t cache_rows = paged ? (page_size < capacity ? page_size : capacity) : capacity;
  const axis k_axes[] = {{0, pages_k, arg_i64(a, KP)}, {0, cache_rows, arg_i64(a, KS)}, {0, heads_kv, arg_i64(a, KH)},
                         columns_qk};
  const axis v_axes[] = {{0, pages_v, arg_i64(a, VP)}, {0, cache_rows, arg_i64(a, VS)}, {0, heads_kv, arg_i64(a, VH)},
                         columns_v};
  check_box(arg_pointer(a, K), k_axes, 4, 2, e->function_name, "K");
  check_box(arg_pointer(a, V), v_axes, 4, 2, e->function_name, "V");
  if (paged) {
    EXPECT(page_size >= 1, "page_size = %lld", (long long)page_size);
    const axis table_axes[] = {{0, batch, arg_i64(a, TB)}, {0, capacity >= 1 ? (capacity - 1) / page_size + 1 : 0, 1}};
    check_box(arg_pointer(a, TABLE), table_axes, 2, 4, e->function_name, "BlockTable");
  }
  const axis seqlens_axes[] = {{0, batch, 1}};
  check_box(arg_pointer(a, SEQLENS), seqlens_axes, 1, 4, e->function_name, "CacheSeqlens");
  if (flags & DECODE_ALIBI) {
    const axis alibi_axes[] = {{0, batch, arg_i64(a, AB)}, {0, heads_q, 1}};
    check_box(arg_pointer(a, ALIBI), alibi_axes, 2, 4, e->function_name, "AlibiSlopes");
  }
  if (split) {
    /* The partials: rows [split, request, token, head] padded to 16 floats, then their LSEs, apart. */
    const int64_t padded = (head_dim_v / 8 + 1) / 2 * 16;
    const axis partial_axes[] = {{0, num_splits * rows, padded}, columns_v}, lse_axes[] = {{0, num_splits * rows, 1}};
    check_box(arg_pointer(a, OUT_PARTIAL), partial_axes, 2, 4, e->function_name, "OutPartial");
    check_box(arg_pointer(a, LSE_PARTIAL), lse_axes, 1, 4, e->function_name, "LsePartial");
    const __int128 partial_end = (__int128)arg_pointer(a, OUT_PARTIAL) +
                                 ((__int128)(num_splits * rows - 1) * padded + head_dim_v) * 4;
    const __int128 lse_end = (__int128)arg_pointer(a, LSE_PARTIAL) + (__int128)(num_splits * rows) * 4;
    EXPECT(partial_end <= arg_pointer(a, LSE_PARTIAL) || lse_end <= arg_pointer(a, OUT_PARTIAL),
           "the partial outputs at %#lx and their LSEs at %#lx overlap", (unsigned long)arg_pointer(a, OUT_PARTIAL),
           (unsigned long)arg_pointer(a, LSE_PARTIAL));
    seen.decode_splits = num_splits;
  } else if (varlen) {
    const axis out_axes[] = {{0, total_q, arg_i64(a, OS)}, {0, heads_q, arg_i64(a, OH)}, columns_v};
    check_box(arg_pointer(a, OUT), out_axes, 3, 2, e->function_name, "Out (packed)");
    if (flags & DECODE_WRITE_LSE) {
      const axis lse_axes[] = {{0, heads_q, arg_i64(a, LH)}, {0, total_q, 1}};
      check_box(arg_pointer(a, LSE), lse_axes, 2, 4, e->function_name, "Lse (packed)");
    }
    if (flags & DECODE_SINKS) {
      const axis sink_axes[] = {{0, heads_q, 1}};
      check_box(arg_pointer(a, SINKS), sink_axes, 1, 4, e->function_name, "Sinks");
    }
  } else {
    check_rows(arg_pointer(a, OUT), rows, seqlen_q, heads_q, arg_i64(a, OB), arg_i64(a, OS), arg_i64(a, OH),
               &columns_v, 1, 2, e->function_name, "Out");
    if (flags & DECODE_WRITE_LSE) {
      check_rows(arg_pointer(a, LSE), rows, seqlen_q, heads_q, arg_i64(a, LB), 1, arg_i64(a, LH), NULL, 0, 4, e->function_name,
                 "Lse");
    }
    if (flags & DECODE_SINKS) {
      const axis sink_axes[] = {{0, heads_q, 1}};
      check_box(arg_pointer(a, SINKS), sink_axes, 1, 4, e->function_name, "Sinks");
    }
  }
}

/* attn_merge(OutPartial32, OutPartial16, OutPartialBF16, LsePartial, Out32, Out16, OutBF16, Lse, Sinks,
 * 14 int64 strides, 6 int32), one program per BLOCK_M rows and BLOCK_N head-dim columns (the column
 * chunk fastest), or per BLOCK_M rows walking every chunk with FLAG_WHOLE_ROWS; from aotk_attn_merge or
 * after a split decoding launch. */
static void check_merge_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "ppppppppplllllllllllllliiiiii") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_merge is out of date", e->param_kinds);
  enum { LSE_PARTIAL = 3, LSE = 7, SINKS = 8 };
  enum { PP = 9, PB, PS, PH, LPP, LPB, LPH, LPS, OB, OS, OH, LB, LH, LS };
  const int64_t num_partials = arg_i32(a, 23), seqlen_q = arg_i32(a, 24), heads = arg_i32(a, 25);
  const int64_t num_rows = arg_i32(a, 26), head_dim = 8 * (int64_t)arg_i32(a, 27);
  const int32_t flags = arg_i32(a, 28);
  const int partial_slot = flags & MERGE_PARTIAL_FP16 ? 1 : flags & MERGE_PARTIAL_BF16 ? 2 : 0;
  const int out_slot = flags & MERGE_OUT_FP16 ? 1 : flags & MERGE_OUT_BF16 ? 2 : 0;
  static const aotk_dtype slot_dtypes[] = {AOTK_DTYPE_FLOAT32, AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};

  /* The caller's problem: aotk_attn_merge's params, or the decoding call's splits. */
  int64_t batch;
  aotk_dtype partial_dtype, out_dtype;
  if (seen.merge != NULL) {
    const aotk_tensor *parts = &seen.merge->out_partials;
    const int rank = parts->rank;
    batch = rank == 5 ? parts->shape[1] : 1;
    EXPECT(num_partials == parts->shape[0] && seqlen_q == parts->shape[rank - 3] && heads == parts->shape[rank - 2] &&
               head_dim == parts->shape[rank - 1],
           "num_partials, seqlen_q, heads, head_dim = %lld, %lld, %lld, %lld", (long long)num_partials,
           (long long)seqlen_q, (long long)heads, (long long)head_dim);
    partial_dtype = parts->dtype, out_dtype = seen.merge->out.dtype;
  } else {
    const aotk_decode_params *d = seen.decode;
    EXPECT(d != NULL, "launched by a call other than aotk_attn_merge and aotk_attn_decode");
    EXPECT(seen.decode_launches == 1, "the merge of a decoding call after %d decoding launches", seen.decode_launches);
    batch = d->q.shape[0];
    EXPECT(num_partials == seen.decode_splits && seqlen_q == d->q.shape[1] && heads == d->q.shape[2] &&
               head_dim == d->v_cache.shape[3],
           "num_partials, seqlen_q, heads, head_dim = %lld, %lld, %lld, %lld after %lld splits", (long long)num_partials,
           (long long)seqlen_q, (long long)heads, (long long)head_dim, (long long)seen.decode_splits);
    partial_dtype = AOTK_DTYPE_FLOAT32, out_dtype = d->q.dtype;
  }
  EXPECT(head_dim <= (int64_t)INT32_MAX, "head_dim8 = %lld: the kernel's head_dim8 * 8 overflows int32",
         (long long)(head_dim / 8));
  EXPECT((__int128)num_rows == (__int128)batch * seqlen_q * heads, "num_rows = %lld for %lld x %lld x %lld", (long long)num_rows,
         (long long)batch, (long long)seqlen_q, (long long)heads);
  EXPECT(slot_dtypes[partial_slot] == partial_dtype && slot_dtypes[out_slot] == out_dtype, "flags = %#x",
         (unsigned)flags);
  /* The typed pointers: exactly the flags' one of each triple set. */
  for (int slot = 0; slot < 3; slot++) {
    EXPECT((arg_pointer(a, slot) != 0) == (slot == partial_slot), "partial pointer %d = %#lx with flags %#x", slot,
           (unsigned long)arg_pointer(a, slot), (unsigned)flags);
    EXPECT((arg_pointer(a, 4 + slot) != 0) == (slot == out_slot), "output pointer %d = %#lx with flags %#x", slot,
           (unsigned long)arg_pointer(a, 4 + slot), (unsigned)flags);
  }
  /* Program pid covers rows (pid / chunks) * BLOCK_M + i and columns (pid % chunks) * BLOCK_N + j, chunks
   * = ceil(head_dim / BLOCK_N), or rows pid * BLOCK_M + i and every chunk with FLAG_WHOLE_ROWS; rows and
   * columns past the ends are masked off. So the grid must be ceil(num_rows / BLOCK_M) programs times
   * the chunks (fewer leaves rows or columns unwritten), within the launch limit of 2^31 - 1, and no
   * int32 row or column number may wrap (a wrapped one is negative, passes the masks and indexes before
   * every tensor). BLOCK_M and BLOCK_N: some row's sharing the .entry (the fake's handle names the first
   * of them), the announced row's for aotk_attn_merge. */
  const bool whole_rows = flags & MERGE_WHOLE_ROWS;
  const aotk__kernel_entry *announced = seen.merge != NULL && seen.announced ? announced_row(&seen.announced_info) : NULL;
  if (seen.merge != NULL && seen.announced) {
    EXPECT(announced != NULL && strcmp(announced->function_name, e->function_name) == 0 &&
               seen.announced_info.grid == (int64_t)grid,
           "aotk_merge_query announced %s with a grid of %lld; launched %u", seen.announced_info.kernel_name,
           (long long)seen.announced_info.grid, grid);
  }
  bool grid_covers = false;
  for (int row = 0; row < aotk__kernel_count && !grid_covers; row++) {
    const aotk__kernel_entry *other = &aotk__kernel_table[row];
    if (strcmp(other->function_name, e->function_name) != 0 || (announced != NULL && other != announced)) continue;
    const int64_t row_blocks = (num_rows + other->block_m - 1) / other->block_m;
    const int64_t chunks = whole_rows ? 1 : (head_dim + other->block_n - 1) / other->block_n;
    grid_covers = (int64_t)grid == row_blocks * chunks && row_blocks * other->block_m - 1 <= (int64_t)INT32_MAX &&
                  head_dim + other->block_n - 1 <= (int64_t)INT32_MAX;
  }
  EXPECT(grid <= (unsigned)INT32_MAX && grid_covers,
         "a grid of %u programs for %lld rows x %lld columns (whole rows %d) fits no attn_merge tile", grid,
         (long long)num_rows, (long long)head_dim, (int)whole_rows);
  /* Written over the partials' LSEs (in place, aotk_attn_merge's contract), lse must be written by the one
   * program that reads a row's partial LSEs for every column chunk: else a row's chunk programs race, one
   * writing the lse another still reads. (Split-KV's own merge reads the workspace: an lse overlapping
   * it is the caller's error, include/aotk.h.) */
  if (seen.merge != NULL && (flags & DECODE_WRITE_LSE)) {
    const axis lse_extra[] = {{0, num_partials, arg_i64(a, LPP)}};
    __int128 lse_lo, lse_hi, parts_lo, parts_hi;
    if (rows_offsets(num_rows, seqlen_q, heads, arg_i64(a, LB), arg_i64(a, LS), arg_i64(a, LH), NULL, 0, &lse_lo,
                     &lse_hi) &&
        rows_offsets(num_rows, seqlen_q, heads, arg_i64(a, LPB), arg_i64(a, LPS), arg_i64(a, LPH), lse_extra, 1,
                     &parts_lo, &parts_hi)) {
      const __int128 lse_base = arg_pointer(a, LSE), parts_base = arg_pointer(a, LSE_PARTIAL);
      const bool overlap = lse_base + 4 * lse_lo < parts_base + 4 * (parts_hi + 1) &&
                           parts_base + 4 * parts_lo < lse_base + 4 * (lse_hi + 1);
      EXPECT(!overlap || whole_rows, "lse at %#lx over the partials' LSEs at %#lx, flags %#x",
             (unsigned long)arg_pointer(a, LSE), (unsigned long)arg_pointer(a, LSE_PARTIAL), (unsigned)flags);
    }
  }
  /* The aligned variant's assumptions: the split's own partials always qualify (so src/aotk_decode.c
   * always takes it there); for aotk_attn_merge, where its query named it. */
  if (seen.merge == NULL || (seen.announced && seen.announced_info.aligned)) {
    for (int slot = 0; slot < 3; slot++) {
      EXPECT(arg_pointer(a, slot) % 16 == 0 && arg_pointer(a, 4 + slot) % 16 == 0, "pointers %#lx, %#lx",
             (unsigned long)arg_pointer(a, slot), (unsigned long)arg_pointer(a, 4 + slot));
    }
    static const int aligned_strides[] = {PP, PB, PS, PH, OB, OS, OH};
    for (size_t i = 0; i < sizeof aligned_strides / sizeof aligned_strides[0]; i++) {
      EXPECT(arg_i64(a, aligned_strides[i]) % 16 == 0, "stride argument %d = %lld", aligned_strides[i],
             (long long)arg_i64(a, aligned_strides[i]));
    }
  }
  /* The reach: every partial of every row, head_dim columns (the loop's mask). */
  static const size_t slot_bytes[] = {4, 2, 2};
  const axis partial_extra[] = {{0, num_partials, arg_i64(a, PP)}, {0, head_dim, 1}};
  check_rows(arg_pointer(a, partial_slot), num_rows, seqlen_q, heads, arg_i64(a, PB), arg_i64(a, PS), arg_i64(a, PH),
             partial_extra, 2, slot_bytes[partial_slot], e->function_name, "OutPartial");
  const axis lse_extra[] = {{0, num_partials, arg_i64(a, LPP)}};
  check_rows(arg_pointer(a, LSE_PARTIAL), num_rows, seqlen_q, heads, arg_i64(a, LPB), arg_i64(a, LPS), arg_i64(a, LPH),
             lse_extra, 1, 4, e->function_name, "LsePartial");
  const axis out_extra[] = {{0, head_dim, 1}};
  check_rows(arg_pointer(a, 4 + out_slot), num_rows, seqlen_q, heads, arg_i64(a, OB), arg_i64(a, OS), arg_i64(a, OH),
             out_extra, 1, slot_bytes[out_slot], e->function_name, "Out");
  if (flags & DECODE_WRITE_LSE) {
    check_rows(arg_pointer(a, LSE), num_rows, seqlen_q, heads, arg_i64(a, LB), arg_i64(a, LS), arg_i64(a, LH), NULL, 0,
               4, e->function_name, "Lse");
  }
  if (flags & DECODE_SINKS) {
    const axis sink_axes[] = {{0, num_rows < heads ? num_rows : heads, 1}};
    check_box(arg_pointer(a, SINKS), sink_axes, 1, 4, e->function_name, "Sinks");
  }
}

/* attn_cache_append(KNew, VNew, K, V, BlockTable, CacheSeqlens, k_new's and v_new's (batch, token, head)
 * strides, the caches' (page, row, head) strides, stride_tb, 7 int32: seqlen_new, heads_kv, capacity,
 * page_size, head_dim_qk8, head_dim_v8, flags), one program per (request, new token). It reads every
 * row of k_new and v_new, the request's cache_seqlens entry and, paged, the block table's entries of
 * positions below the capacity; it writes rows of the caches at positions below the capacity: anywhere
 * in rows 0 .. capacity - 1 of the request (contiguous), or in rows 0 .. page_size - 1 of any page the
 * caller described (paged: page ids are device data, valid by contract). */
static void check_append_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "ppppppllllllllllllliiiiiii") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_cache_append is out of date", e->param_kinds);
  const aotk_decode_params *d = seen.decode;
  EXPECT(d != NULL && d->k_new.data != NULL && d->v_new.data != NULL && d->cu_seqlens_q.data == NULL,
         "launched by a call other than a dense aotk_attn_decode with k_new and v_new");
  EXPECT(seen.append_launches == 0 && seen.decode_launches == 0,
         "launched after %d appending and %d decoding launches of the same call", seen.append_launches,
         seen.decode_launches);
  seen.append_launches++;
  enum { K_NEW, V_NEW, K, V, TABLE, SEQLENS };
  enum { NB = 6, NS, NH, WB, WS, WH, KP, KS, KH, VP, VS, VH, TB };
  const int64_t seqlen_new = arg_i32(a, 19), heads_kv = arg_i32(a, 20), capacity = arg_i32(a, 21);
  const int64_t page_size = arg_i32(a, 22), head_dim_qk = 8 * (int64_t)arg_i32(a, 23);
  const int64_t head_dim_v = 8 * (int64_t)arg_i32(a, 24);
  const int32_t flags = arg_i32(a, 25);
  const bool paged = flags & DECODE_PAGED;
  const int64_t batch = d->q.shape[0];

  /* The caller's problem, untruncated. */
  EXPECT((flags & ~DECODE_PAGED) == 0 && paged == (d->block_table.data != NULL), "flags = %#x", (unsigned)flags);
  EXPECT(seqlen_new == d->k_new.shape[1] && seqlen_new == d->v_new.shape[1] && seqlen_new >= 1 &&
             seqlen_new <= AOTK_DECODE_MAX_CAPACITY,
         "seqlen_new = %lld for k_new of %lld and v_new of %lld tokens", (long long)seqlen_new,
         (long long)d->k_new.shape[1], (long long)d->v_new.shape[1]);
  EXPECT(heads_kv == d->k_cache.shape[2] && heads_kv == d->k_new.shape[2] && heads_kv == d->v_new.shape[2],
         "heads_kv = %lld for caches of %lld heads, k_new of %lld and v_new of %lld", (long long)heads_kv,
         (long long)d->k_cache.shape[2], (long long)d->k_new.shape[2], (long long)d->v_new.shape[2]);
  EXPECT(head_dim_qk == d->k_new.shape[3] && head_dim_qk == d->k_cache.shape[3] && head_dim_v == d->v_new.shape[3] &&
             head_dim_v == d->v_cache.shape[3],
         "head dims %lld, %lld for k_new's %lld and v_new's %lld", (long long)head_dim_qk, (long long)head_dim_v,
         (long long)d->k_new.shape[3], (long long)d->v_new.shape[3]);
  const __int128 expected_capacity =
      paged ? (__int128)d->block_table.shape[1] * d->k_cache.shape[1] : (__int128)d->k_cache.shape[1];
  EXPECT(capacity == expected_capacity && page_size == (paged ? d->k_cache.shape[1] : 0),
         "capacity = %lld, page_size = %lld for a cache of %lld rows per page or request", (long long)capacity,
         (long long)page_size, (long long)d->k_cache.shape[1]);
  EXPECT((__int128)grid == (__int128)batch * seqlen_new, "a grid of %u programs for %lld requests x %lld new tokens",
         grid, (long long)batch, (long long)seqlen_new);
  /* The caller's tensors, not others of the same shape. */
  EXPECT(arg_pointer(a, K_NEW) == (uintptr_t)d->k_new.data && arg_pointer(a, V_NEW) == (uintptr_t)d->v_new.data &&
             arg_pointer(a, K) == (uintptr_t)d->k_cache.data && arg_pointer(a, V) == (uintptr_t)d->v_cache.data &&
             arg_pointer(a, TABLE) == (uintptr_t)(paged ? d->block_table.data : NULL) &&
             arg_pointer(a, SEQLENS) == (uintptr_t)d->cache_seqlens.data,
         "pointers %#lx %#lx %#lx %#lx %#lx %#lx", (unsigned long)arg_pointer(a, K_NEW),
         (unsigned long)arg_pointer(a, V_NEW), (unsigned long)arg_pointer(a, K), (unsigned long)arg_pointer(a, V),
         (unsigned long)arg_pointer(a, TABLE), (unsigned long)arg_pointer(a, SEQLENS));
  const aotk_tensor *strided[4] = {&d->k_new, &d->v_new, &d->k_cache, &d->v_cache};
  for (int t = 0; t < 4; t++) {
    for (int i = 0; i < 3; i++) {
      EXPECT(arg_i64(a, NB + 3 * t + i) == strided[t]->strides[i], "stride argument %d = %lld, the tensor's %lld",
             NB + 3 * t + i, (long long)arg_i64(a, NB + 3 * t + i), (long long)strided[t]->strides[i]);
    }
  }
  EXPECT(!paged || arg_i64(a, TB) == d->block_table.strides[0], "stride_tb = %lld, the block table's %lld",
         (long long)arg_i64(a, TB), (long long)d->block_table.strides[0]);
  /* What the kernel assumes (hinted throughout, as attn_decode). */
  for (int i = K_NEW; i <= V; i++) {
    EXPECT(arg_pointer(a, i) % 16 == 0, "pointer argument %d = %#lx", i, (unsigned long)arg_pointer(a, i));
  }
  for (int i = NB; i <= VH; i++) EXPECT(arg_i64(a, i) % 16 == 0, "stride argument %d = %lld", i, (long long)arg_i64(a, i));

  /* The reach, from the packed arguments. */
  const axis columns_qk = {0, head_dim_qk, 1}, columns_v = {0, head_dim_v, 1};
  const axis k_new_axes[] = {{0, batch, arg_i64(a, NB)}, {0, seqlen_new, arg_i64(a, NS)}, {0, heads_kv, arg_i64(a, NH)},
                             columns_qk};
  const axis v_new_axes[] = {{0, batch, arg_i64(a, WB)}, {0, seqlen_new, arg_i64(a, WS)}, {0, heads_kv, arg_i64(a, WH)},
                             columns_v};
  check_box(arg_pointer(a, K_NEW), k_new_axes, 4, 2, e->function_name, "KNew");
  check_box(arg_pointer(a, V_NEW), v_new_axes, 4, 2, e->function_name, "VNew");
  const int64_t pages_k = paged ? d->k_cache.shape[0] : batch, pages_v = paged ? d->v_cache.shape[0] : batch;
  const int64_t cache_rows = paged ? (page_size < capacity ? page_size : capacity) : capacity;
  const axis k_axes[] = {{0, pages_k, arg_i64(a, KP)}, {0, cache_rows, arg_i64(a, KS)}, {0, heads_kv, arg_i64(a, KH)},
                         columns_qk};
  const axis v_axes[] = {{0, pages_v, arg_i64(a, VP)}, {0, cache_rows, arg_i64(a, VS)}, {0, heads_kv, arg_i64(a, VH)},
                         columns_v};
  check_box_in(arg_pointer(a, K), k_axes, 4, 2, e->function_name, "K (written)", &d->k_cache);
  check_box_in(arg_pointer(a, V), v_axes, 4, 2, e->function_name, "V (written)", &d->v_cache);
  if (paged) {
    EXPECT(page_size >= 1, "page_size = %lld", (long long)page_size);
    const axis table_axes[] = {{0, batch, arg_i64(a, TB)}, {0, capacity >= 1 ? (capacity - 1) / page_size + 1 : 0, 1}};
    check_box(arg_pointer(a, TABLE), table_axes, 2, 4, e->function_name, "BlockTable");
  }
  const axis seqlens_axes[] = {{0, batch, 1}};
  check_box(arg_pointer(a, SEQLENS), seqlens_axes, 1, 4, e->function_name, "CacheSeqlens");
}

/* The full reach of a launch, where fuzz_api.c models its kernel.
 * TODO: the attention and selection families. Their reach depends on device data for varlen (the
 * cu_seqlens offsets) and selection (block_idx), on the tile (BLOCK_M rows past the sequence, masked,
 * with 32-bit sequence and head strides) and, for the TMA kernels, on descriptors checked when
 * encoded; each family needs its own model, as tests/test_api.c has per case. Until then their pointer
 * arguments are only checked to lie in a span. */
static void check_launch_extent(const aotk__kernel_entry *e, unsigned grid, void **params) {
  if (e->family == AOTK__FAMILY_ATTN_DECODE || e->family == AOTK__FAMILY_ATTN_DECODE_PAGED ||
      e->family == AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS) {
    check_decode_launch(e, grid, params);
  }
  if (e->family == AOTK__FAMILY_ATTN_MERGE) check_merge_launch(e, grid, params);
  if (e->family == AOTK__FAMILY_ATTN_CACHE_APPEND) check_append_launch(e, grid, params);
}
#undef EXPECT

/* ---- the fake driver ---------------------------------------------------------------------------- */

#define FAKE_CONTEXT ((CUcontext)(uintptr_t)0xc0de0)
#define FAKE_LIBRARY ((CUlibrary)(uintptr_t)0x11b0)
#define FAKE_KERNEL_BASE ((uintptr_t)0x4e000000u)

static CUresult fake_cuInit(unsigned flags) { return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
static CUresult fake_cuDriverGetVersion(int *version) {
  *version = 13000;
  return CUDA_SUCCESS;
}
static CUresult fake_cuGetErrorName(CUresult error, const char **name) {
  (void)error;
  *name = "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
static CUresult fake_cuGetErrorString(CUresult error, const char **text) {
  (void)error;
  *text = "a fake error";
  return CUDA_SUCCESS;
}
static CUresult fake_cuDeviceGet(CUdevice *device, int ordinal) {
  *device = ordinal;
  return ordinal >= 0 && ordinal < 4 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
/* The fake GPUs: an H100 (sm_90, the cubins and TMA), an A100 (sm_80), an RTX 3090 (sm_86, 99 KiB of
 * shared memory) and an sm_120 part (the sm_80 PTX). Each input (each thread's call) picks the one whose
 * context is current. */
static const struct fake_device {
  int compute_capability, multiprocessors, max_shared_bytes;
} fake_devices[] = {{90, 132, 227 * 1024}, {80, 108, 163 * 1024}, {86, 82, 99 * 1024}, {120, 170, 99 * 1024}};
enum { FAKE_DEVICES = sizeof fake_devices / sizeof fake_devices[0] };
static _Thread_local CUdevice current_device;

static CUresult fake_cuDeviceGetCount(int *count) {
  *count = FAKE_DEVICES;
  return CUDA_SUCCESS;
}
static CUresult fake_cuDeviceGetAttribute(int *value, int attribute, CUdevice device) {
  if (device < 0 || device >= FAKE_DEVICES) return CUDA_ERROR_INVALID_VALUE;
  const struct fake_device *d = &fake_devices[device];
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = d->compute_capability / 10;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = d->compute_capability % 10;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *value = d->max_shared_bytes;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = d->multiprocessors;
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}
static CUresult fake_cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device) {
  (void)device;
  *context = FAKE_CONTEXT;
  return CUDA_SUCCESS;
}
static CUresult fake_cuDevicePrimaryCtxRelease(CUdevice device) {
  (void)device;
  return CUDA_SUCCESS;
}
static CUresult fake_cuCtxGetCurrent(CUcontext *context) {
  *context = (CUcontext)((uintptr_t)FAKE_CONTEXT + 16u * (uintptr_t)current_device);
  return CUDA_SUCCESS;
}
static CUresult fake_cuCtxSetCurrent(CUcontext context) {
  (void)context;
  return CUDA_SUCCESS;
}
static CUresult fake_cuCtxGetDevice(CUdevice *device) {
  *device = current_device;
  return CUDA_SUCCESS;
}
static CUresult fake_cuCtxSynchronize(void) { return CUDA_SUCCESS; }
static CUresult fake_cuLibraryLoadData(CUlibrary *library, const void *code, void *jit_options, void **jit_values,
                                       unsigned num_jit_options, void *library_options, void **library_values,
                                       unsigned num_library_options) {
  (void)code, (void)jit_options, (void)jit_values, (void)num_jit_options;
  (void)library_options, (void)library_values, (void)num_library_options;
  *library = FAKE_LIBRARY;
  return CUDA_SUCCESS;
}
/* A kernel handle names the first table row with that .entry (a family's rows share their parameters). */
static CUresult fake_cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name) {
  if (library != FAKE_LIBRARY) return CUDA_ERROR_INVALID_VALUE;
  for (int row = 0; row < aotk__kernel_count; row++) {
    if (strcmp(aotk__kernel_table[row].function_name, name) == 0) {
      *kernel = (CUkernel)(FAKE_KERNEL_BASE + 16u * (uintptr_t)row);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}
static CUresult fake_cuKernelSetAttribute(int attribute, int value, CUkernel kernel, CUdevice device) {
  (void)attribute, (void)value, (void)kernel, (void)device;
  return CUDA_SUCCESS;
}
static CUresult fake_cuLaunchKernel(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                    unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_bytes,
                                    CUstream stream, void **params, void **extra) {
  (void)grid_y, (void)grid_z, (void)block_x, (void)block_y, (void)block_z, (void)shared_bytes, (void)stream;
  seen.launches++;
  const uintptr_t handle = (uintptr_t)(void *)function;
  if (handle < FAKE_KERNEL_BASE || (handle - FAKE_KERNEL_BASE) % 16u != 0 ||
      (handle - FAKE_KERNEL_BASE) / 16u >= (uintptr_t)aotk__kernel_count) {
    fail("a launch of a handle the driver never gave out");
  }
  if (extra != NULL) fail("a launch with `extra`");
  if (grid_x == 0) fail("a launch of an empty grid");
  const aotk__kernel_entry *e = &aotk__kernel_table[(handle - FAKE_KERNEL_BASE) / 16u];
  /* Reads each argument at its kind's size (as the driver would: a short list or a narrow argument
   * shows under ASan); a pointer must be NULL or inside a span. */
  char what[160];
  int slot = 0;
  for (const char *kind = e->param_kinds; *kind != '\0'; kind++) {
    if (*kind == 't') {
      slot += 1 + 3 + 3; /* the map (checked when encoded), its shape and strides */
      continue;
    }
    if (*kind == 'p') {
      uintptr_t pointer;
      memcpy(&pointer, params[slot], sizeof pointer);
      snprintf(what, sizeof what, "%s's pointer argument %d", e->name, slot);
      if (pointer != 0) check_reach(pointer, 1, what);
    } else {
      unsigned char bytes[8];
      memcpy(bytes, params[slot], *kind == 'l' ? 8 : 4);
    }
    slot++;
  }
  check_launch_extent(e, grid_x, params);
  return CUDA_SUCCESS;
}
static CUresult fake_cuMemcpyHtoD(CUdeviceptr destination, const void *source, size_t bytes) {
  (void)source;
  seen.copies++;
  check_reach((uintptr_t)destination, bytes, "a copy to the device");
  return CUDA_SUCCESS;
}
/* The index check's result word: INT64_MAX, clean. */
static CUresult fake_cuMemcpyDtoH(void *destination, CUdeviceptr source, size_t bytes) {
  seen.copies++;
  check_reach((uintptr_t)source, bytes, "a copy from the device");
  memset(destination, 0xff, bytes);
  if (bytes >= 8) ((unsigned char *)destination)[7] = 0x7f;
  return CUDA_SUCCESS;
}
static CUresult fake_cuMemsetD8(CUdeviceptr destination, unsigned char value, size_t count) {
  (void)value;
  seen.memsets++;
  check_reach((uintptr_t)destination, count, "a memset");
  return CUDA_SUCCESS;
}
static CUresult fake_cuMemsetD32Async(CUdeviceptr destination, unsigned value, size_t count, CUstream stream) {
  (void)value, (void)stream;
  seen.memsets++;
  check_reach((uintptr_t)destination, (unsigned __int128)count * 4, "a memset");
  return CUDA_SUCCESS;
}
static CUresult fake_cuStreamSynchronize(CUstream stream) {
  (void)stream;
  return CUDA_SUCCESS;
}
/* Entries none of the fuzzed calls has any business with (the library allocates nothing and captures
 * nothing): reaching one is a finding. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define UNEXPECTED_ENTRY(name, params)                  \
  static CUresult fake_##name params {                  \
    fail("the library called " #name);                 \
    return CUDA_ERROR_INVALID_VALUE;                    \
  }
UNEXPECTED_ENTRY(cuMemAlloc, (CUdeviceptr * pointer, size_t bytes))
UNEXPECTED_ENTRY(cuMemFree, (CUdeviceptr pointer))
UNEXPECTED_ENTRY(cuStreamCreate, (CUstream * stream, unsigned flags))
UNEXPECTED_ENTRY(cuStreamDestroy, (CUstream stream))
UNEXPECTED_ENTRY(cuStreamBeginCapture, (CUstream stream, int mode))
UNEXPECTED_ENTRY(cuStreamEndCapture, (CUstream stream, CUgraph *graph))
UNEXPECTED_ENTRY(cuGraphInstantiateWithFlags, (CUgraphExec * exec, CUgraph graph, unsigned long long flags))
UNEXPECTED_ENTRY(cuGraphLaunch, (CUgraphExec exec, CUstream stream))
UNEXPECTED_ENTRY(cuGraphExecDestroy, (CUgraphExec exec))
UNEXPECTED_ENTRY(cuGraphDestroy, (CUgraph graph))
#undef UNEXPECTED_ENTRY
#pragma GCC diagnostic pop
/* A descriptor's reach: the last element of its box of dims, with the strides between dims (dim 0 is
 * contiguous). Data types as cuda.h numbers them. */
static CUresult fake_cuTensorMapEncodeTiled(CUtensorMap *map, int data_type, unsigned rank, void *address,
                                            const uint64_t *dims, const uint64_t *strides_bytes,
                                            const unsigned *box, const unsigned *element_strides, int interleave,
                                            int swizzle, int l2_promotion, int oob_fill) {
  (void)box, (void)element_strides, (void)interleave, (void)swizzle, (void)l2_promotion, (void)oob_fill;
  static const unsigned element_bytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  seen.encodes++;
  if (data_type < 0 || data_type >= (int)(sizeof element_bytes / sizeof element_bytes[0]) || rank < 1 || rank > 5) {
    fail("a TMA descriptor of an unknown data type or rank");
  }
  unsigned __int128 reach = (unsigned __int128)dims[0] * element_bytes[data_type];
  for (unsigned d = 1; d < rank; d++) {
    if (dims[d] == 0) fail("a TMA descriptor with an empty dimension");
    reach += (unsigned __int128)(dims[d] - 1) * strides_bytes[d - 1];
  }
  check_reach((uintptr_t)address, reach, "a TMA descriptor");
  memset(map, 0, sizeof *map);
  return CUDA_SUCCESS;
}

static const aotk__driver fake_driver = {
#define FAKE_ENTRY(name, params) .name = fake_##name,
    AOTK__DRIVER_FUNCTIONS(FAKE_ENTRY)
#undef FAKE_ENTRY
};

/* ---- building a call ---------------------------------------------------------------------------- */

enum { T_Q, T_K, T_V, T_OUT, T_LSE, T_DOUT, T_DQ, T_DK, T_DV, T_CU_Q, T_CU_K, T_ALIBI, T_SINKS, T_DSINKS, T_RNG,
       T_MASK, T_IDX, T_CNT, T_TABLE, T_SEQLENS, T_PARTIALS, T_LSE_PARTIALS, T_K_NEW, T_V_NEW, TENSOR_SLOTS };

static void *region(int slot) { return (void *)(REGION_BASE + (uintptr_t)slot * REGION_STRIDE); }

static aotk_tensor make(int slot, aotk_dtype dtype, int rank, const int64_t *shape) {
  aotk_tensor t;
  memset(&t, 0, sizeof t);
  t.data = region(slot);
  t.dtype = dtype;
  t.rank = rank;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; d--) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d] > 0 ? shape[d] : 1;
  }
  return t;
}

/* Like make, with the innermost rows `row_elements` apart (>= the last dimension): padded rows, which keep
 * every stride a multiple of 16 elements where the head dim is not. */
static aotk_tensor make_rows(int slot, aotk_dtype dtype, int rank, const int64_t *shape, int64_t row_elements) {
  aotk_tensor t = make(slot, dtype, rank, shape);
  int64_t stride = row_elements;
  for (int d = rank - 2; d >= 0 && row_elements > shape[rank - 1]; d--) {
    t.strides[d] = stride;
    stride *= shape[d] > 0 ? shape[d] : 1;
  }
  return t;
}

/* One edit of a tensor: a shape or stride entry, the rank, the dtype, the pointer, or dropping it. */
static void edit_tensor(reader *r, aotk_tensor *t, aotk_tensor *const *all, int count) {
  switch (take(r, 1) % 9) {
    case 0:
      t->shape[take(r, 1) % AOTK_TENSOR_MAX_RANK] = take_size(r);
      break;
    case 1:
      t->strides[take(r, 1) % AOTK_TENSOR_MAX_RANK] = take_size(r);
      break;
    case 2:
      t->rank = (int32_t)take_range(r, -1, AOTK_TENSOR_MAX_RANK + 1);
      break;
    case 3:
      t->dtype = (aotk_dtype)take_range(r, -1, 8);
      break;
    case 4:
      t->data = NULL;
      break;
    case 5:
      t->data = (void *)((uintptr_t)t->data + (uintptr_t)take_range(r, -16, 16));
      break;
    case 6:
      t->data = all[take(r, 1) % (unsigned)count]->data;
      break;
    case 7: { /* a stride times a factor: padded rows, or overlapping ones */
      int d = (int)(take(r, 1) % AOTK_TENSOR_MAX_RANK);
      t->strides[d] = (int64_t)((uint64_t)t->strides[d] * (uint64_t)take_range(r, 0, 4));
      break;
    }
    default:
      *t = *all[take(r, 1) % (unsigned)count];
      break;
  }
}

static const int head_dims[] = {32, 64, 96, 128, 192, 256, 40, 80, 16, 512};

static aotk_dtype take_dtype(reader *r) { return take(r, 1) % 2 ? AOTK_DTYPE_BFLOAT16 : AOTK_DTYPE_FLOAT16; }

static aotk_attn_params attn_problem(reader *r, bool backward) {
  aotk_attn_params p = AOTK_ATTN_PARAMS_INIT;
  const aotk_dtype dtype = take_dtype(r);
  const int64_t batch = take_range(r, 1, 4), sq = take_range(r, 1, 300), sk = take_range(r, 1, 300);
  const int64_t hk = take_range(r, 1, 4), hq = hk * take_range(r, 1, 4);
  const int64_t dqk = head_dims[take(r, 1) % 10];
  const int64_t dv = take(r, 1) % 4 == 0 ? head_dims[take(r, 1) % 10] : dqk;
  const unsigned features = (unsigned)take(r, 2);
  const bool varlen = features & 1;
  if (varlen) {
    const int64_t total_q = batch * sq, total_k = batch * sk;
    p.q = make(T_Q, dtype, 3, (int64_t[]){total_q, hq, dqk});
    p.k = make(T_K, dtype, 3, (int64_t[]){total_k, hk, dqk});
    p.v = make(T_V, dtype, 3, (int64_t[]){total_k, hk, dv});
    p.out = make(T_OUT, dtype, 3, (int64_t[]){total_q, hq, dv});
    p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 2, (int64_t[]){hq, total_q});
    p.cu_seqlens_q = make(T_CU_Q, AOTK_DTYPE_INT32, 1, (int64_t[]){batch + 1});
    p.cu_seqlens_k = make(T_CU_K, AOTK_DTYPE_INT32, 1, (int64_t[]){batch + 1});
    p.max_seqlen_q = (int32_t)sq;
    p.max_seqlen_k = (int32_t)sk;
  } else {
    p.q = make(T_Q, dtype, 4, (int64_t[]){batch, sq, hq, dqk});
    p.k = make(T_K, dtype, 4, (int64_t[]){batch, sk, hk, dqk});
    p.v = make(T_V, dtype, 4, (int64_t[]){batch, sk, hk, dv});
    p.out = make(T_OUT, dtype, 4, (int64_t[]){batch, sq, hq, dv});
    p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 3, (int64_t[]){batch, hq, sq});
  }
  if (features & 2) p.lse.data = NULL;
  p.causal = (features >> 2) & 1;
  p.causal_align = (int32_t)((features >> 3) & 1);
  if (features & 16) {
    p.window_left = (int32_t)take_range(r, -1, 300);
    p.window_right = (int32_t)take_range(r, -1, 300);
  }
  if (features & 32) p.softcap = take(r, 1) % 2 ? 30.0f : take_float(r);
  if (features & 64) p.alibi_slopes = make(T_ALIBI, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){hq});
  if (features & 128) p.sinks = make(T_SINKS, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){hq});
  if (features & 256) {
    p.dropout_p = take(r, 1) % 2 ? 0.1f : take_float(r);
    p.rng_state = make(T_RNG, AOTK_DTYPE_INT64, 1, (int64_t[]){2});
  }
  if (features & 512) p.softmax_scale = take_float(r);
  if (backward) {
    p.dout = p.out;
    p.dout.data = region(T_DOUT);
    p.dq = p.q;
    p.dq.data = region(T_DQ);
    p.dk = p.k;
    p.dk.data = region(T_DK);
    p.dv = p.v;
    p.dv.data = region(T_DV);
    p.deterministic = (features >> 10) & 1;
    if ((features & 2048) && p.sinks.data != NULL) p.dsinks = make(T_DSINKS, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){hq});
  }
  if ((features & 4096) && p.dropout_p > 0.0f) {
    p.dropout_mask = make(T_MASK, AOTK_DTYPE_UINT8, 4, (int64_t[]){batch, hq, sq, sk});
  }
  return p;
}

static aotk_sel_params sel_problem(reader *r, bool backward) {
  aotk_sel_params p = AOTK_SEL_PARAMS_INIT;
  static const int64_t dims[][2] = {{64, 64}, {128, 128}, {192, 128}, {96, 96}};
  const aotk_dtype dtype = take_dtype(r);
  const int64_t total_q = take_range(r, 1, 5000), total_k = take_range(r, 1, 5000);
  const int64_t hk = take_range(r, 1, 4), hq = hk * take_range(r, 1, 64), slots = take_range(r, 1, 40);
  const int64_t *d = dims[take(r, 1) % 4];
  const unsigned features = (unsigned)take(r, 1);
  p.q = make(T_Q, dtype, 3, (int64_t[]){total_q, hq, d[0]});
  p.k = make(T_K, dtype, 3, (int64_t[]){total_k, hk, d[0]});
  p.v = make(T_V, dtype, 3, (int64_t[]){total_k, hk, d[1]});
  p.out = make(T_OUT, dtype, 3, (int64_t[]){total_q, hq, d[1]});
  p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 2, (int64_t[]){total_q, hq});
  if ((features & 1) && !backward) p.lse.data = NULL;
  p.block_size = (int32_t)(32 << (take(r, 1) % 3));
  p.block_idx = make(T_IDX, AOTK_DTYPE_INT32, 3, (int64_t[]){total_q, hk, slots});
  if (features & 2) p.block_cnt = make(T_CNT, AOTK_DTYPE_INT32, 2, (int64_t[]){total_q, hk});
  if (features & 4) {
    const int64_t seqs = take_range(r, 1, 8);
    p.cu_seqlens_q = make(T_CU_Q, AOTK_DTYPE_INT32, 1, (int64_t[]){seqs + 1});
    p.cu_seqlens_k = make(T_CU_K, AOTK_DTYPE_INT32, 1, (int64_t[]){seqs + 1});
    p.max_seqlen_k = (int32_t)take_range(r, 1, total_k);
  }
  if (features & 8) p.softmax_scale = take_float(r);
  if (backward) {
    p.dout = p.out;
    p.dout.data = region(T_DOUT);
    p.dq = p.q;
    p.dq.data = region(T_DQ);
    p.dk = p.k;
    p.dk.data = region(T_DK);
    p.dv = p.v;
    p.dv.data = region(T_DV);
  }
  return p;
}

/* Head dims decoding takes: multiples of 8 up to 256, run in the compiled pairs (those that are not
 * multiples of 16 are aligned only with padded rows). */
static const int decode_head_dims[] = {64, 128, 256, 32, 96, 192, 16, 48, 80, 160, 8, 24, 40, 72, 136, 248};
static int64_t round_up16(int64_t n) { return (n + 15) / 16 * 16; }

static aotk_decode_params decode_problem(reader *r) {
  aotk_decode_params p = AOTK_DECODE_PARAMS_INIT;
  const aotk_dtype dtype = take_dtype(r);
  const int64_t batch = take_range(r, 1, 8);
  const int64_t seqlen_q = take(r, 1) % 2 ? 1 : take_range(r, 1, AOTK_DECODE_MAX_SEQLEN_Q);
  const int64_t hk = take_range(r, 1, 8), hq = hk * (take(r, 1) % 4 == 0 ? 16 : take_range(r, 1, 8));
  const int64_t dqk = decode_head_dims[take(r, 1) % 16];
  const int64_t dv = take(r, 1) % 4 == 0 ? decode_head_dims[take(r, 1) % 16] : dqk;
  const unsigned features = (unsigned)take(r, 2);
  const bool padded = (features & 1) || dqk % 16 != 0 || dv % 16 != 0;
  const int64_t row_qk = padded ? round_up16(dqk + 8) : dqk, row_v = padded ? round_up16(dv + 8) : dv;
  /* Packed queries (a prefill over the cache): total_q tokens, at most max_seqlen_q per request, which
   * has no 16-token limit. */
  const bool varlen = features & 4096;
  int64_t total_q = 0;
  if (varlen) {
    p.max_seqlen_q = (int32_t)(take(r, 1) % 2 ? take_range(r, 1, 32) : take_range(r, 1, 5000));
    total_q = take(r, 1) % 4 == 0 ? take_range(r, 1, 3) : take_range(r, 1, batch * p.max_seqlen_q);
    p.cu_seqlens_q = make(T_CU_Q, AOTK_DTYPE_INT32, 1, (int64_t[]){batch + 1});
    p.q = make_rows(T_Q, dtype, 3, (int64_t[]){total_q, hq, dqk}, row_qk);
  } else {
    p.q = make_rows(T_Q, dtype, 4, (int64_t[]){batch, seqlen_q, hq, dqk}, row_qk);
  }
  int64_t capacity;
  if (features & 2) {
    static const int64_t page_sizes[] = {16, 64, 256, 1, 2, 3, 17, 128};
    const int64_t page_size = page_sizes[take(r, 1) % 8], pages_per_request = take_range(r, 1, 64);
    const int64_t num_pages = take_range(r, 1, batch * pages_per_request + 3);
    capacity = page_size * pages_per_request;
    p.k_cache = make_rows(T_K, dtype, 4, (int64_t[]){num_pages, page_size, hk, dqk}, row_qk);
    p.v_cache = make_rows(T_V, dtype, 4, (int64_t[]){num_pages, page_size, hk, dv}, row_v);
    p.block_table = make(T_TABLE, AOTK_DTYPE_INT32, 2, (int64_t[]){batch, pages_per_request});
  } else {
    capacity = take(r, 1) % 2 ? take_range(r, 1, 300) : take_range(r, 1, 20000);
    p.k_cache = make_rows(T_K, dtype, 4, (int64_t[]){batch, capacity, hk, dqk}, row_qk);
    p.v_cache = make_rows(T_V, dtype, 4, (int64_t[]){batch, capacity, hk, dv}, row_v);
  }
  p.cache_seqlens = make(T_SEQLENS, AOTK_DTYPE_INT32, 1, (int64_t[]){batch});
  if (varlen) {
    p.out = make_rows(T_OUT, dtype, 3, (int64_t[]){total_q, hq, dv}, row_v);
    if (!(features & 4)) p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 2, (int64_t[]){hq, total_q});
  } else {
    p.out = make_rows(T_OUT, dtype, 4, (int64_t[]){batch, seqlen_q, hq, dv}, row_v);
    if (!(features & 4)) p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 3, (int64_t[]){batch, hq, seqlen_q});
  }
  p.causal = (features >> 3) & 1;
  if (features & 16) {
    p.window_left = (int32_t)take_range(r, -1, 300);
    p.window_right = p.causal ? (int32_t)take_range(r, -1, 0) : (int32_t)take_range(r, -1, 300);
  }
  if (features & 32) p.softcap = take(r, 1) % 2 ? 30.0f : take_float(r);
  if (features & 64) {
    p.alibi_slopes = take(r, 1) % 2 ? make(T_ALIBI, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){hq})
                                    : make(T_ALIBI, AOTK_DTYPE_FLOAT32, 2, (int64_t[]){batch, hq});
  }
  if (features & 128) p.sinks = make(T_SINKS, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){hq});
  if (features & 256) p.softmax_scale = take_float(r);
  switch ((features >> 9) & 3) { /* the splits: chosen (0), forced, few forced, or chosen for a bound */
    case 1:
      p.num_splits = (int32_t)take_range(r, 1, AOTK_DECODE_MAX_SPLITS);
      break;
    case 2:
      p.num_splits = (int32_t)take_range(r, 1, 8);
      break;
    case 3:
      p.max_seqlen_k = (int32_t)take_range(r, 1, capacity);
      break;
  }
  /* Packed queries run unsplit and without appending: mostly valid (0 or 1), sometimes a refusal. */
  if (varlen && p.num_splits > 1 && take(r, 1) % 8 != 0) p.num_splits = (int32_t)(take(r, 1) % 2);
  const bool append = (features & 2048) && (!varlen || take(r, 1) % 8 == 0);
  if (append) { /* appending: a few tokens, or up to past the capacity (the rest is dropped) */
    const int64_t seqlen_new = take(r, 1) % 4 == 0 ? take_range(r, 1, capacity + 20) : take_range(r, 1, 16);
    p.k_new = make_rows(T_K_NEW, dtype, 4, (int64_t[]){batch, seqlen_new, hk, dqk}, row_qk);
    p.v_new = make_rows(T_V_NEW, dtype, 4, (int64_t[]){batch, seqlen_new, hk, dv}, row_v);
  }
  return p;
}

/* Head dims the merge takes: any multiple of 8. */
static const int merge_head_dims[] = {128, 64, 256, 8, 16, 24, 40, 96, 512, 1000, 72, 2048};

static aotk_dtype take_float_dtype(reader *r) {
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_FLOAT32, AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};
  return dtypes[take(r, 1) % 3];
}

/* The view of `t` without its first dimension (partial 0 of the partials: the in-place merge's out). */
static aotk_tensor drop_first(const aotk_tensor *t) {
  aotk_tensor view = *t;
  view.rank = t->rank - 1;
  for (int d = 0; d < AOTK_TENSOR_MAX_RANK - 1; d++) {
    view.shape[d] = t->shape[d + 1];
    view.strides[d] = t->strides[d + 1];
  }
  view.shape[AOTK_TENSOR_MAX_RANK - 1] = view.strides[AOTK_TENSOR_MAX_RANK - 1] = 0;
  return view;
}

static aotk_merge_params merge_problem(reader *r) {
  aotk_merge_params p = AOTK_MERGE_PARAMS_INIT;
  const aotk_dtype partial_dtype = take_float_dtype(r);
  const aotk_dtype out_dtype = take(r, 1) % 2 ? partial_dtype : take_float_dtype(r);
  const int64_t num_partials = take(r, 1) % 4 == 0 ? take_range(r, 1, 300) : take_range(r, 1, 8);
  const int64_t heads = take_range(r, 1, 16), head_dim = merge_head_dims[take(r, 1) % 12];
  const unsigned features = (unsigned)take(r, 1);
  /* Padded partial rows (a split's workspace pads to 16 floats; others pad by any 8). */
  const int64_t row = features & 2 ? head_dim + 8 * take_range(r, 1, 4) : head_dim;
  if (features & 1) { /* packed: [num_partials, total_q, heads, head_dim] */
    const int64_t total_q = take_range(r, 1, 2000);
    p.out_partials = make_rows(T_PARTIALS, partial_dtype, 4, (int64_t[]){num_partials, total_q, heads, head_dim}, row);
    p.lse_partials = make(T_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 3, (int64_t[]){num_partials, heads, total_q});
    p.out = make(T_OUT, out_dtype, 3, (int64_t[]){total_q, heads, head_dim});
    p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 2, (int64_t[]){heads, total_q});
  } else {
    const int64_t batch = take_range(r, 1, 4), seqlen_q = take_range(r, 1, 300);
    p.out_partials =
        make_rows(T_PARTIALS, partial_dtype, 5, (int64_t[]){num_partials, batch, seqlen_q, heads, head_dim}, row);
    p.lse_partials = make(T_LSE_PARTIALS, AOTK_DTYPE_FLOAT32, 4, (int64_t[]){num_partials, batch, heads, seqlen_q});
    p.out = make(T_OUT, out_dtype, 4, (int64_t[]){batch, seqlen_q, heads, head_dim});
    p.lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 3, (int64_t[]){batch, heads, seqlen_q});
  }
  if (features & 4) { /* in place: out and lse are partial 0 */
    p.out = drop_first(&p.out_partials);
    p.lse = drop_first(&p.lse_partials);
  }
  if (features & 8) p.lse.data = NULL;
  if (features & 16) p.sinks = make(T_SINKS, AOTK_DTYPE_FLOAT32, 1, (int64_t[]){heads});
  return p;
}

/* The spans of every tensor field of a params struct (the fields each call reads, as the header lists
 * them; the selection struct names a subset). */
static void attn_spans(const aotk_attn_params *p) {
  const aotk_tensor *t[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->dout, &p->dq, &p->dk, &p->dv,
                            &p->cu_seqlens_q, &p->cu_seqlens_k, &p->alibi_slopes, &p->sinks, &p->dsinks,
                            &p->rng_state, &p->dropout_mask};
  static const char *const names[] = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv", "cu_seqlens_q",
                                      "cu_seqlens_k", "alibi_slopes", "sinks", "dsinks", "rng_state",
                                      "dropout_mask"};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) add_tensor_span(t[i], names[i]);
}

static void sel_spans(const aotk_sel_params *p) {
  const aotk_tensor *t[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->cu_seqlens_q, &p->cu_seqlens_k,
                            &p->block_idx, &p->block_cnt, &p->dout, &p->dq, &p->dk, &p->dv};
  static const char *const names[] = {"q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_k", "block_idx",
                                      "block_cnt", "dout", "dq", "dk", "dv"};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) add_tensor_span(t[i], names[i]);
}

static void decode_spans(const aotk_decode_params *p) {
  const aotk_tensor *t[] = {&p->q,   &p->k_cache, &p->v_cache,      &p->block_table, &p->cache_seqlens,
                            &p->out, &p->lse,     &p->alibi_slopes, &p->sinks,       &p->k_new,
                            &p->v_new, &p->cu_seqlens_q};
  static const char *const names[] = {"q", "k_cache", "v_cache", "block_table", "cache_seqlens", "out", "lse",
                                      "alibi_slopes", "sinks", "k_new", "v_new", "cu_seqlens_q"};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) add_tensor_span(t[i], names[i]);
}

static void merge_spans(const aotk_merge_params *p) {
  const aotk_tensor *t[] = {&p->out_partials, &p->lse_partials, &p->out, &p->lse, &p->sinks};
  static const char *const names[] = {"out_partials", "lse_partials", "out", "lse", "sinks"};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) add_tensor_span(t[i], names[i]);
}

/* Edits: a tensor, a scalar, struct_size. */
static void edit_attn(reader *r, aotk_attn_params *p) {
  aotk_tensor *const all[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->dout, &p->dq, &p->dk, &p->dv,
                              &p->cu_seqlens_q, &p->cu_seqlens_k, &p->alibi_slopes, &p->sinks, &p->dsinks,
                              &p->rng_state, &p->dropout_mask};
  const int count = (int)(sizeof all / sizeof all[0]);
  switch (take(r, 1) % 6) {
    case 0:
    case 1:
      edit_tensor(r, all[take(r, 1) % (unsigned)count], all, count);
      break;
    case 2: {
      int32_t *ints[] = {&p->causal, &p->deterministic, &p->max_seqlen_q, &p->max_seqlen_k, &p->window_left,
                         &p->window_right, &p->causal_align};
      *ints[take(r, 1) % 7] = (int32_t)take_size(r);
      break;
    }
    case 3: {
      float *floats[] = {&p->softmax_scale, &p->softcap, &p->dropout_p};
      *floats[take(r, 1) % 3] = take_float(r);
      break;
    }
    case 4:
      p->struct_size = take(r, 1) % 2 ? (size_t)take_range(r, 0, sizeof *p + 8) : (size_t)take(r, 8);
      break;
    default:
      p->struct_size = offsetof(aotk_attn_params, cu_seqlens_q); /* a 0.1 caller */
      break;
  }
}

static void edit_sel(reader *r, aotk_sel_params *p) {
  aotk_tensor *const all[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->cu_seqlens_q, &p->cu_seqlens_k,
                              &p->block_idx, &p->block_cnt, &p->dout, &p->dq, &p->dk, &p->dv};
  const int count = (int)(sizeof all / sizeof all[0]);
  switch (take(r, 1) % 5) {
    case 0:
    case 1:
      edit_tensor(r, all[take(r, 1) % (unsigned)count], all, count);
      break;
    case 2:
      *(take(r, 1) % 2 ? &p->max_seqlen_k : &p->block_size) = (int32_t)take_size(r);
      break;
    case 3:
      p->softmax_scale = take_float(r);
      break;
    default:
      p->struct_size = take(r, 1) % 2 ? (size_t)take_range(r, 0, sizeof *p + 8) : (size_t)take(r, 8);
      break;
  }
}

/* A dense decoding call's q, out and lse as packed ones (each request seqlen_q tokens in a row), or a
 * packed call's back as dense ones of max_seqlen_q tokens per request, over the same caches: mostly
 * valid when the layouts allow it, a refusal when they do not. */
/* Sizes make() can lay out: each >= 1, their product (its strides) far from overflowing int64. */
static bool repackable(const int64_t *sizes, int count) {
  int64_t product = 1;
  for (int i = 0; i < count; i++) {
    if (sizes[i] < 1 || __builtin_mul_overflow(product, sizes[i], &product) || product > (int64_t)1 << 48) return false;
  }
  return true;
}

static void repack_decode(reader *r, aotk_decode_params *p) {
  if (p->cu_seqlens_q.data == NULL) {
    const int64_t batch = p->q.shape[0], seqlen_q = p->q.shape[1];
    if (!repackable((const int64_t[]){batch, seqlen_q, p->q.shape[2]}, 3)) return;
    const int64_t total_q = batch * seqlen_q;
    const aotk_tensor q = p->q, out = p->out;
    p->q.rank = p->out.rank = 3;
    p->q.shape[0] = p->out.shape[0] = total_q;
    for (int d = 1; d < 3; d++) {
      p->q.shape[d] = q.shape[d + 1], p->q.strides[d - 1] = q.strides[d];
      p->out.shape[d] = out.shape[d + 1], p->out.strides[d - 1] = out.strides[d];
    }
    p->q.strides[2] = q.strides[3], p->out.strides[2] = out.strides[3];
    p->q.shape[3] = p->q.strides[3] = p->out.shape[3] = p->out.strides[3] = 0;
    if (p->lse.data != NULL) p->lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 2, (int64_t[]){q.shape[2], total_q});
    p->cu_seqlens_q = make(T_CU_Q, AOTK_DTYPE_INT32, 1, (int64_t[]){batch + 1});
    p->max_seqlen_q = (int32_t)(take(r, 1) % 2 ? seqlen_q : take_size(r));
  } else {
    const int64_t batch = p->cu_seqlens_q.shape[0] - 1, seqlen_q = p->max_seqlen_q;
    const int64_t heads_q = p->q.shape[1], dqk = p->q.shape[2], dv = p->out.shape[2];
    if (!repackable((const int64_t[]){batch, seqlen_q, heads_q, dqk}, 4) ||
        !repackable((const int64_t[]){batch, seqlen_q, heads_q, dv}, 4)) {
      p->cu_seqlens_q.data = NULL;
      return;
    }
    p->q = make(T_Q, p->q.dtype, 4, (int64_t[]){batch, seqlen_q, heads_q, dqk});
    p->out = make(T_OUT, p->out.dtype, 4, (int64_t[]){batch, seqlen_q, heads_q, dv});
    if (p->lse.data != NULL) p->lse = make(T_LSE, AOTK_DTYPE_FLOAT32, 3, (int64_t[]){batch, heads_q, seqlen_q});
    if (take(r, 1) % 4 != 0) p->cu_seqlens_q.data = NULL; /* else: the dense layouts with cu_seqlens_q */
  }
}

static void edit_decode(reader *r, aotk_decode_params *p) {
  aotk_tensor *const all[] = {&p->q,   &p->k_cache, &p->v_cache,      &p->block_table, &p->cache_seqlens,
                              &p->out, &p->lse,     &p->alibi_slopes, &p->sinks,       &p->k_new,
                              &p->v_new, &p->cu_seqlens_q};
  const int count = (int)(sizeof all / sizeof all[0]);
  switch (take(r, 1) % 9) {
    case 0:
    case 1:
      edit_tensor(r, all[take(r, 1) % (unsigned)count], all, count);
      break;
    case 2: {
      int32_t *ints[] = {&p->causal,     &p->window_left,  &p->window_right,
                         &p->num_splits, &p->max_seqlen_k, &p->max_seqlen_q};
      *ints[take(r, 1) % 6] = (int32_t)take_size(r);
      break;
    }
    case 7: /* max_seqlen_q near its bounds: 0, 1, the old 16-token limit, 2^31 - 1 */
      p->max_seqlen_q = (int32_t)(take(r, 1) % 2 ? take_range(r, -1, 18) : INT32_MAX - take_range(r, 0, 2));
      break;
    case 8:
      repack_decode(r, p);
      break;
    case 3: /* near the bounds */
      *(take(r, 1) % 2 ? &p->num_splits : &p->max_seqlen_k) = (int32_t)take_range(r, -1, AOTK_DECODE_MAX_SPLITS + 1);
      break;
    case 4:
      *(take(r, 1) % 2 ? &p->softmax_scale : &p->softcap) = take_float(r);
      break;
    case 5: /* appending turned off (one or both dropped), or on with the caches' layout */
      if (p->k_new.data != NULL || p->v_new.data != NULL) {
        const unsigned which = (unsigned)take(r, 1) % 3;
        if (which != 1) p->k_new.data = NULL;
        if (which != 0) p->v_new.data = NULL;
      } else {
        const int64_t seqlen_new = take_size(r);
        p->k_new = p->k_cache, p->v_new = p->v_cache;
        p->k_new.data = region(T_K_NEW), p->v_new.data = region(T_V_NEW);
        p->k_new.shape[0] = p->v_new.shape[0] = p->q.shape[0];
        p->k_new.shape[1] = p->v_new.shape[1] = seqlen_new;
      }
      break;
    default:
      p->struct_size = take(r, 1) % 2 ? (size_t)take_range(r, 0, sizeof *p + 8) : (size_t)take(r, 8);
      break;
  }
}

static void edit_merge(reader *r, aotk_merge_params *p) {
  aotk_tensor *const all[] = {&p->out_partials, &p->lse_partials, &p->out, &p->lse, &p->sinks};
  const int count = (int)(sizeof all / sizeof all[0]);
  if (take(r, 1) % 5 != 0) {
    edit_tensor(r, all[take(r, 1) % (unsigned)count], all, count);
  } else {
    p->struct_size = take(r, 1) % 2 ? (size_t)take_range(r, 0, sizeof *p + 8) : (size_t)take(r, 8);
  }
}

/* A query's info as a caller of some version allocates it: exactly struct_size bytes (at least the size
 * field), so that AddressSanitizer sees a write past them; bytes past what the library knows must stay
 * untouched. NULL sometimes. */
enum { INFO_POISON = 0xa5 };
static aotk_kernel_info *take_info(reader *r, size_t *bytes) {
  switch (take(r, 1) % 5) {
    case 1:
      *bytes = offsetof(aotk_kernel_info, num_splits); /* a 0.3 caller */
      break;
    case 2:
      *bytes = (size_t)take_range(r, 0, sizeof(aotk_kernel_info) + 16);
      break;
    case 3:
      return NULL;
    default:
      *bytes = sizeof(aotk_kernel_info);
      break;
  }
  const size_t allocated = *bytes > sizeof(size_t) ? *bytes : sizeof(size_t);
  unsigned char *info = malloc(allocated);
  if (info == NULL) fail("out of memory");
  memset(info, INFO_POISON, allocated);
  memcpy(info, bytes, sizeof *bytes);
  return (aotk_kernel_info *)(void *)info;
}

static void check_info_tail(const aotk_kernel_info *info, size_t bytes) {
  for (size_t i = sizeof *info; i < bytes; i++) {
    if (((const unsigned char *)info)[i] != INFO_POISON) fail("a query wrote past the aotk_kernel_info it knows");
  }
}

/* The call agrees with its query: "exactly the status the call itself would return before launching"
 * (the decoding call also checks its workspace, which the query does not), and, accepted, the launches
 * it announced. */
static bool workspace_refusal(aotk_status status) {
  return status == AOTK_ERROR_NULL_POINTER || status == AOTK_ERROR_WORKSPACE_TOO_SMALL ||
         status == AOTK_ERROR_MISALIGNED_POINTER || status == AOTK_ERROR_SIZE_OVERFLOW;
}

static void check_agrees_with_query(aotk_status asked, aotk_status status, bool workspace_checked) {
  if (asked != AOTK_OK ? status != asked : status != AOTK_OK && !(workspace_checked && workspace_refusal(status))) {
    fprintf(stderr, "fuzz_api: the query said %s, the call returned %s (%s)\n", aotk_status_name(asked),
            aotk_status_name(status), aotk_last_error());
    fail("a call and its query disagree");
  }
  if (status == AOTK_OK && seen.launches != seen.announced_info.launches) {
    fprintf(stderr, "fuzz_api: the query announced %d launches, the call made %d\n",
            (int)seen.announced_info.launches, seen.launches);
    fail("a call and its query disagree");
  }
}

/* ---- one input ---------------------------------------------------------------------------------- */

/* The first seven are chosen by op bytes 0..223 as before 0.4 (so the committed corpus keeps its
 * meaning), the decoding and merge calls by 224..255. */
enum { OP_ATTN_FWD, OP_ATTN_BWD, OP_QUERY, OP_SEL_FWD, OP_SEL_BWD, OP_SEL_QUERY, OP_SEL_CHECK, OP_DECODE,
       OP_DECODE_QUERY, OP_MERGE, OP_MERGE_QUERY };

/* This thread's calls that the library accepted, and that launched kernels. */
static _Thread_local long accepted_calls, launching_calls;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  aotk__driver_set_for_testing(&fake_driver);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader in = {data, size};
  reader *r = &in;
  memset(&seen, 0, sizeof seen);
  current_device = size > 0 ? data[size - 1] % FAKE_DEVICES : 0; /* shares the last byte with the decoder */
  const unsigned op_byte = (unsigned)take(r, 1);
  const int op = op_byte < 224 ? (int)(op_byte % 7) : OP_DECODE + (int)((op_byte - 224) % 4);
  const int edits = (int)(take(r, 1) % 8);
  const aotk_stream stream = take(r, 1) % 4 == 0 ? (aotk_stream)(uintptr_t)0x57 : NULL;
  /* The workspace: enough for most problems, or a decoded size; 16-byte aligned or not. */
  uintptr_t workspace = REGION_BASE + (uintptr_t)TENSOR_SLOTS * REGION_STRIDE;
  size_t workspace_bytes = (size_t)1 << 36;
  switch (take(r, 1) % 4) {
    case 0:
      workspace_bytes = (size_t)take_size(r);
      break;
    case 1:
      workspace += (uintptr_t)take_range(r, 1, 15);
      break;
    case 2:
      workspace = 0;
      break;
  }
  aotk_status status;
  if (op <= OP_QUERY) {
    const bool backward = op == OP_ATTN_BWD || (op == OP_QUERY && take(r, 1) % 2);
    aotk_attn_params p = attn_problem(r, backward);
    for (int i = 0; i < edits; i++) edit_attn(r, &p);
    attn_spans(&p);
    add_span(workspace, workspace_bytes, "workspace");
    if (op == OP_ATTN_FWD) {
      status = aotk_attn_fwd(&p, stream);
    } else if (op == OP_ATTN_BWD) {
      status = aotk_attn_bwd(&p, (void *)workspace, workspace_bytes, stream);
    } else {
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      status = aotk_query(backward ? AOTK_OP_ATTN_BWD : AOTK_OP_ATTN_FWD, &p, &info);
      if (seen.launches || seen.memsets || seen.copies || seen.encodes) fail("a query reached the device");
    }
  } else if (op <= OP_SEL_CHECK) {
    const bool backward = op == OP_SEL_BWD || (op == OP_SEL_QUERY && take(r, 1) % 2);
    aotk_sel_params p = sel_problem(r, backward);
    for (int i = 0; i < edits; i++) edit_sel(r, &p);
    sel_spans(&p);
    add_span(workspace, workspace_bytes, "workspace");
    if (op == OP_SEL_FWD) {
      status = aotk_sel_fwd(&p, stream);
    } else if (op == OP_SEL_BWD) {
      status = aotk_sel_bwd(&p, (void *)workspace, workspace_bytes, stream);
    } else if (op == OP_SEL_QUERY) {
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      status = aotk_sel_query(backward ? AOTK_OP_SEL_BWD : AOTK_OP_SEL_FWD, &p, &info);
      if (seen.launches || seen.memsets || seen.copies || seen.encodes) fail("a query reached the device");
    } else {
      status = aotk_sel_check_indices(&p, (void *)workspace, workspace_bytes, stream);
    }
  } else if (op <= OP_DECODE_QUERY) {
    aotk_decode_params p = decode_problem(r);
    for (int i = 0; i < edits; i++) edit_decode(r, &p);
    decode_spans(&p);
    seen.decode = &p;
    if (op == OP_DECODE) {
      seen.announced_info = (aotk_kernel_info)AOTK_KERNEL_INFO_INIT;
      const aotk_status asked = aotk_decode_query(AOTK_OP_DECODE, &p, &seen.announced_info);
      if (seen.launches || seen.memsets || seen.copies || seen.encodes) fail("a query reached the device");
      seen.announced = asked == AOTK_OK;
      if (seen.announced && seen.announced_info.workspace_bytes > 0) { /* exactly what it asked for, or a byte less */
        const size_t asked_bytes = seen.announced_info.workspace_bytes;
        const unsigned choice = (unsigned)take(r, 1) % 4;
        workspace_bytes = choice == 0 ? asked_bytes : choice == 1 ? asked_bytes - 1 : workspace_bytes;
      }
      add_span(workspace, workspace_bytes, "workspace");
      status = aotk_attn_decode(&p, (void *)workspace, workspace_bytes, stream);
      check_agrees_with_query(asked, status, true);
      /* The launches the header counts: the decoding kernel, the merge after a split, the appending
       * kernel with k_new and v_new (announced by AOTK_FEATURE_APPEND_KV). */
      const bool append = p.k_new.data != NULL;
      if (status == AOTK_OK &&
          (seen.launches != 1 + (seen.announced_info.num_splits > 1) + append || seen.decode_launches != 1 ||
           seen.append_launches != append ||
           ((seen.announced_info.features & AOTK_FEATURE_APPEND_KV) != 0) != append)) {
        fprintf(stderr, "fuzz_api: %d launches (%d decoding, %d appending), %d splits, features %#x, k_new %p\n",
                seen.launches, seen.decode_launches, seen.append_launches, (int)seen.announced_info.num_splits,
                (unsigned)seen.announced_info.features, p.k_new.data);
        fail("a decoding call's launches are not the header's");
      }
    } else {
      const aotk_op asked_op = take(r, 1) % 8 == 7 ? (aotk_op)take_range(r, -1, 8) : AOTK_OP_DECODE;
      size_t info_bytes = 0;
      aotk_kernel_info *info = take_info(r, &info_bytes);
      status = aotk_decode_query(asked_op, &p, info);
      if (seen.launches || seen.memsets || seen.copies || seen.encodes) fail("a query reached the device");
      if (info != NULL) check_info_tail(info, info_bytes);
      free(info);
    }
  } else {
    aotk_merge_params p = merge_problem(r);
    for (int i = 0; i < edits; i++) edit_merge(r, &p);
    merge_spans(&p); /* no workspace: the merge takes none */
    seen.merge = &p;
    if (op == OP_MERGE) {
      seen.announced_info = (aotk_kernel_info)AOTK_KERNEL_INFO_INIT;
      const aotk_status asked = aotk_merge_query(AOTK_OP_MERGE, &p, &seen.announced_info);
      if (seen.launches || seen.memsets || seen.copies || seen.encodes) fail("a query reached the device");
      seen.announced = asked == AOTK_OK;
      status = aotk_attn_merge(&p, stream);
      check_agrees_with_query(asked, status, false);
    } else {
      const aotk_op asked_op = take(r, 1) % 8 == 7 ? (aotk_op)take_range(r, -1, 8) : AOTK_OP_MERGE;
      size_t info_bytes = 0;
      aotk_kernel_info *info = take_info(r, &info_bytes);
      status = aotk_merge_query(asked_op, &p, info);
      if (seen.launches || seen.memsets || seen.copies || seen.encodes) fail("a query reached the device");
      if (info != NULL) check_info_tail(info, info_bytes);
      free(info);
    }
  }
  if (status != AOTK_OK && (seen.launches || seen.memsets || seen.copies || seen.encodes)) {
    fprintf(stderr, "fuzz_api: %s (%s), after %d launches, %d memsets, %d copies, %d descriptors\n",
            aotk_status_name(status), aotk_last_error(), seen.launches, seen.memsets, seen.copies, seen.encodes);
    fail("a refused call reached the driver");
  }
  if (status != AOTK_OK && aotk_last_error()[0] == '\0') fail("a refusal without a message");
  /* A build with no filter has every kernel the catalog lists: a call that passed validation and finds
   * none is a dispatch or catalog mistake (the split decoding's merge did, asking for a dtype). */
  if (status == AOTK_ERROR_KERNEL_NOT_BUILT && aotk__kernel_filter[0] == '\0') {
    fprintf(stderr, "fuzz_api: %s\n", aotk_last_error());
    fail("a refusal for want of a kernel, in a build with every kernel");
  }
  accepted_calls += status == AOTK_OK;
  launching_calls += seen.launches > 0;
  return 0;
}

#ifdef AOTK_FUZZ_THREADS_MAIN
/* The stress build (tests/CMakeLists.txt: stress_api, under ThreadSanitizer): the same calls with the
 * same checks from many threads at once, each decoding its own random inputs, the library's first use
 * included (every thread starts at once, before any kernel is loaded).
 *   stress_api [threads] [seconds] */
#include <pthread.h>
#include <time.h>

static double stress_seconds;
static pthread_barrier_t stress_start;
static pthread_mutex_t stress_totals_lock = PTHREAD_MUTEX_INITIALIZER;
static long stress_totals[3]; /* calls, accepted, launching */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *stress_thread(void *argument) {
  uint64_t state = 0x9e3779b97f4a7c15ull * (uint64_t)(uintptr_t)argument + 1;
  uint8_t input[160];
  long calls = 0;
  pthread_barrier_wait(&stress_start);
  const double end = now() + stress_seconds;
  while (now() < end) {
    for (size_t i = 0; i < sizeof input; i++) { /* xorshift64 */
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      input[i] = (uint8_t)state;
    }
    LLVMFuzzerTestOneInput(input, 16 + (size_t)(state % (sizeof input - 16)));
    calls++;
  }
  pthread_mutex_lock(&stress_totals_lock);
  stress_totals[0] += calls, stress_totals[1] += accepted_calls, stress_totals[2] += launching_calls;
  pthread_mutex_unlock(&stress_totals_lock);
  return NULL;
}

int main(int argc, char **argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 8;
  stress_seconds = argc > 2 ? atof(argv[2]) : 10.0;
  if (threads < 1 || threads > 256 || !(stress_seconds > 0)) {
    fprintf(stderr, "usage: %s [threads 1..256] [seconds]\n", argv[0]);
    return 2;
  }
  LLVMFuzzerInitialize(&argc, &argv);
  pthread_t ids[256];
  pthread_barrier_init(&stress_start, NULL, (unsigned)threads);
  for (int i = 0; i < threads; i++) {
    if (pthread_create(&ids[i], NULL, stress_thread, (void *)(uintptr_t)(i + 1)) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      return 1;
    }
  }
  for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
  printf("%ld calls from %d threads in %.0f s (%ld accepted, %ld of them launching kernels), every check held\n",
         stress_totals[0], threads, stress_seconds, stress_totals[1], stress_totals[2]);
  /* Accepted calls that launch: the checks above did run (a decoder that only made refusals would not
   * test much). */
  return stress_totals[2] > 0 ? 0 : 1;
}
#endif
