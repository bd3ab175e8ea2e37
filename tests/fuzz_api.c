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
 * - for every kernel, more: the whole byte range each pointer argument can reach, worked out from the
 *   packed arguments as the kernel indexes (grid, sizes, strides, flags; the fake driver tells the
 *   table row that runs from its image, for its tiles and compiled head dims), must lie inside one span
 *   (writes inside the output's own; workspace pointers inside the workspace, its parts apart); the
 *   arguments must describe the caller's problem (the caller's pointers and strides, no size cut to
 *   int32, no 32-bit offset that wraps, a grid that covers every row and no more, the alignment the
 *   compiled variant assumes). The masks (causal, windows) are ignored: the reach checked is every row.
 *   Offsets read on the device are bounded by the header's contract: packed rows (cu_seqlens) by the
 *   packed tensor's own rows, selection's block ids by the kernels' range checks, the inverse index's
 *   list positions by its construction (each entry in at most one list of its kv head's row);
 * - a TMA descriptor that cuTensorMapEncodeTiled would refuse, or whose tensor reaches past one span; at
 *   the launch, a map this call did not encode, or one whose shape, strides, box or swizzle are not the
 *   packed and compiled ones, whose box exceeds the kernel's tile, or which describes another tensor
 *   than the kernel's pointer argument (the hardware clips boxes at the described tensor: that is all
 *   it can reach);
 * - for decoding: the appending kernel runs before the decoding kernel, which is told seqlen_new; and
 *   the call must agree with its query (the same refusal, the launches, grid and splits it announced,
 *   the launches the header counts), the query writing no byte past info->struct_size.
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
  /* The attention or selection call in flight: the params as the library reads them (an attention
   * caller's first struct_size bytes, the rest AOTK_ATTN_PARAMS_INIT's), for the launches' checks. */
  const aotk_attn_params *attn;
  const aotk_sel_params *sel;
  /* The TMA descriptors this call encoded (fake_cuTensorMapEncodeTiled), which a launch's maps name. */
  struct encoded_map {
    uintptr_t address;
    unsigned element_bytes, rank, swizzle;
    uint64_t dims[5], strides_bytes[4]; /* innermost first, as the driver takes them */
    unsigned box[5];
  } maps[8];
  int map_count;
  /* The workspace parts this call's launches reached, by name, each the union of its reaches: no two
   * may overlap (a part's bytes are its own for the whole call). */
  struct workspace_part {
    const char *name;
    __int128 first, end;
  } parts[12];
  int part_count;
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

/* The workspace's span names this in place of a tensor, so that reaches can be required inside it. */
static const aotk_tensor workspace_marker = {0};

static void add_span(uintptr_t lo, size_t bytes, const char *what) {
  if (lo == 0 || bytes == 0 || seen.span_count == MAX_SPANS) return;
  const uintptr_t hi = bytes > UINTPTR_MAX - lo ? UINTPTR_MAX : lo + bytes; /* a caller may claim that much */
  seen.spans[seen.span_count++] = (span){lo, hi, what, &workspace_marker};
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
    if (s->tensor != NULL && s->tensor != &workspace_marker) {
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

/* A failed expectation about a launch: what its kernel (in kernels/) would do with these arguments. */
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

/* The smallest and largest block_m of the table rows sharing a kernel's .entry. */
static void entry_block_m(const aotk__kernel_entry *e, int64_t *smallest, int64_t *largest) {
  *smallest = INT64_MAX, *largest = 0;
  for (int row = 0; row < aotk__kernel_count; row++) {
    const aotk__kernel_entry *other = &aotk__kernel_table[row];
    if (strcmp(other->function_name, e->function_name) != 0) continue;
    *smallest = other->block_m < *smallest ? other->block_m : *smallest;
    *largest = other->block_m > *largest ? other->block_m : *largest;
  }
}

/* kernels/attn_decode.py's flags (src/decode/aotk_decode.c sets them). */
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
 * (a constexpr PAGE_MODE apart: attn_decode, attn_decode_paged, attn_decode_paged_blocks); the fake
 * driver's handle names the row that ran (by its image), and so does the query's announcement. */
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
   * every tensor). BLOCK_M and BLOCK_N: some row's sharing the .entry, the announced row's for
   * aotk_attn_merge. */
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
  /* The aligned variant's assumptions: the split's own partials always qualify (so src/decode/aotk_decode.c
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

/* ---- how far the attention and selection kernels reach ------------------------------------------ */

/* kernels/attn_common.py's flags (src/attn/aotk_attn.c sets them) and selection's own (kernels/sel_attn.py,
 * src/sel/aotk_sel.c). */
enum {
  ATTN_WRITE_LSE = 1,
  ATTN_VARLEN = 2,
  ATTN_ALIBI = 16,
  ATTN_SINKS = 32,
  ATTN_DROPOUT = 64,
  ATTN_O_TMA = 256, /* the Gluon forward's O leaves through its fourth descriptor */
  SEL_BLOCK_CNT = 256,
  SEL_DKDV_REDUCE = 512,
};

static int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }
static int64_t magnitude(int64_t n) { return n < 0 ? -n : n; }

/* A packed stride is the caller's where the kernel uses it: along a dimension of more than one index (a
 * size-1 dimension's stride multiplies only 0, and the packing may cut it to int32). */
static bool same_stride(int64_t packed, int64_t caller, int64_t count) { return count <= 1 || packed == caller; }

/* What codegen/aotk_catalog.py hints (divisible by 16, in the aligned variant or ALWAYS) the compiler
 * takes as given: a 16-byte-aligned pointer argument, an integer argument a multiple of 16. */
static void expect_aligned(const aotk__kernel_entry *e, void **a, int pointer, const char *argument) {
  EXPECT(arg_pointer(a, pointer) % 16 == 0, "%s = %#lx, hinted 16-byte aligned", argument,
         (unsigned long)arg_pointer(a, pointer));
}

/* The bytes [*first, *end) the elements of a box reach from `base`; false when the box is empty. */
static bool box_bytes(uintptr_t base, const axis *axes, int count, size_t element, __int128 *first, __int128 *end) {
  __int128 lo, hi;
  if (!box_offsets(axes, count, &lo, &hi)) return false;
  *first = (__int128)base + lo * (__int128)element;
  *end = (__int128)base + (hi + 1) * (__int128)element;
  return true;
}

/* Bytes [first, end) of the workspace part `name` (the union of its reaches in this call so far), apart
 * from every other part: the parts are carved from one workspace, each used by several launches. */
static void note_workspace_part(const aotk__kernel_entry *e, const char *name, __int128 first, __int128 end) {
  int i = 0;
  while (i < seen.part_count && strcmp(seen.parts[i].name, name) != 0) i++;
  if (i == seen.part_count) {
    EXPECT(i < (int)(sizeof seen.parts / sizeof seen.parts[0]), "more workspace parts than fuzz_api.c keeps");
    seen.parts[seen.part_count++] = (struct workspace_part){name, first, end};
  } else {
    seen.parts[i].first = first < seen.parts[i].first ? first : seen.parts[i].first;
    seen.parts[i].end = end > seen.parts[i].end ? end : seen.parts[i].end;
  }
  for (int j = 0; j < seen.part_count; j++) {
    const struct workspace_part *x = &seen.parts[i], *y = &seen.parts[j];
    EXPECT(j == i || x->end <= y->first || y->end <= x->first,
           "the workspace's %s [%#llx, %#llx) overlaps its %s [%#llx, %#llx)", x->name, (unsigned long long)x->first,
           (unsigned long long)x->end, y->name, (unsigned long long)y->first, (unsigned long long)y->end);
  }
}

/* A box of a workspace part: inside the workspace, and apart from the other parts. */
static void check_workspace_part(const aotk__kernel_entry *e, uintptr_t base, const axis *axes, int count,
                                 size_t element, const char *part) {
  __int128 first, end;
  if (!box_bytes(base, axes, count, element, &first, &end)) return;
  check_box_in(base, axes, count, element, e->function_name, part, &workspace_marker);
  note_workspace_part(e, part, first, end);
}

/* `count` elements from pointer argument `pointer`. */
static void check_vector(const aotk__kernel_entry *e, void **a, int pointer, int64_t count, size_t element,
                         const char *argument) {
  const axis axes[] = {{0, count, 1}};
  check_box(arg_pointer(a, pointer), axes, 1, element, e->function_name, argument);
}

/* A host-side TMA descriptor argument (the map, then its 3 x int32 shape and 3 x int64 strides, outermost
 * first, src/attn/aotk_attn.c's packed_descriptor): the map must be one that this call encoded, the shape
 * and strides beside it the encoded ones, its box and swizzle the compiled layout's (e->descriptors) and
 * within the kernel's tile, and the tensor it describes the one the kernel's pointer argument `pointer`
 * names (-1: the workspace part `name`). The hardware clips every box at the described tensor's bounds
 * (zero fill; box > dims is allowed), so that tensor, checked inside a span, is all the loads and
 * reduce-adds can reach. */
typedef struct descriptor_role {
  int pointer;
  int64_t rows, columns; /* the kernel's tile: the box's rows and innermost extent at most */
  unsigned element_bytes;
  const char *name;
} descriptor_role;

#define FAKE_MAP_MAGIC 0x70616d2d656b6166ull /* "fake-map": the fake's maps hold it and their index */

static void check_descriptors(const aotk__kernel_entry *e, void **a, int first, const descriptor_role *roles,
                              int count) {
  EXPECT(e->descriptor_count == count, "the table records %d descriptors, fuzz_api.c's model %d",
         (int)e->descriptor_count, count);
  for (int i = 0; i < count; i++) {
    const descriptor_role *role = &roles[i];
    const int slot = first + 7 * i;
    CUtensorMap map;
    memcpy(&map, a[slot], sizeof map);
    EXPECT(map.opaque[0] == FAKE_MAP_MAGIC && map.opaque[1] < (uint64_t)seen.map_count,
           "%s is no map this call encoded", role->name);
    const struct encoded_map *m = &seen.maps[map.opaque[1]];
    EXPECT(m->rank == 3 && m->element_bytes == role->element_bytes, "%s: rank %u, %u-byte elements", role->name,
           m->rank, m->element_bytes);
    for (int d = 0; d < 3; d++) {
      EXPECT((uint64_t)(int64_t)arg_i32(a, slot + 1 + d) == m->dims[2 - d], "%s's shape[%d] = %d, encoded %llu",
             role->name, d, (int)arg_i32(a, slot + 1 + d), (unsigned long long)m->dims[2 - d]);
    }
    EXPECT(arg_i64(a, slot + 6) == 1 && (uint64_t)arg_i64(a, slot + 5) * m->element_bytes == m->strides_bytes[0] &&
               (uint64_t)arg_i64(a, slot + 4) * m->element_bytes == m->strides_bytes[1],
           "%s's strides (%lld, %lld, %lld) elements, encoded (%llu, %llu) bytes", role->name,
           (long long)arg_i64(a, slot + 4), (long long)arg_i64(a, slot + 5), (long long)arg_i64(a, slot + 6),
           (unsigned long long)m->strides_bytes[1], (unsigned long long)m->strides_bytes[0]);
    const aotk__tma_layout *layout = &e->descriptors[i];
    EXPECT(m->swizzle == (unsigned)layout->swizzle && m->box[0] == (unsigned)layout->box[2] &&
               m->box[1] == (unsigned)layout->box[1] && m->box[2] == (unsigned)layout->box[0],
           "%s encoded with swizzle %u and box [%u, %u, %u]; compiled for %d and [%d, %d, %d]", role->name, m->swizzle,
           m->box[2], m->box[1], m->box[0], (int)layout->swizzle, (int)layout->box[0], (int)layout->box[1],
           (int)layout->box[2]);
    EXPECT(m->box[2] == 1 && m->box[1] <= role->rows && m->box[0] <= role->columns,
           "%s's box [%u, %u, %u] is not inside the kernel's tile of %lld rows x %lld columns", role->name, m->box[2],
           m->box[1], m->box[0], (long long)role->rows, (long long)role->columns);
    unsigned __int128 reach = (unsigned __int128)m->dims[0] * m->element_bytes;
    for (int d = 1; d < 3; d++) reach += (unsigned __int128)(m->dims[d] - 1) * m->strides_bytes[d - 1];
    char what[160];
    snprintf(what, sizeof what, "%s's %s (the tensor its descriptor describes)", e->function_name, role->name);
    if (role->pointer >= 0) {
      EXPECT(m->address == arg_pointer(a, role->pointer), "%s describes %#lx; the pointer argument is %#lx",
             role->name, (unsigned long)m->address, (unsigned long)arg_pointer(a, role->pointer));
      check_reach(m->address, reach, what);
    } else {
      check_reach_in(m->address, reach, &workspace_marker, what);
      note_workspace_part(e, role->name, (__int128)m->address, (__int128)m->address + (__int128)reach);
    }
  }
}

/* The caller's attention problem as src/attn/aotk_attn_validate.c reads it (validated: the call was
 * accepted). */
typedef struct attn_caller {
  bool varlen;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim_qk, head_dim_v;
  int64_t total_q, total_k; /* packed: q's and k's rows */
} attn_caller;

static attn_caller attn_caller_problem(const aotk_attn_params *p) {
  attn_caller c;
  c.varlen = p->cu_seqlens_q.data != NULL || p->cu_seqlens_k.data != NULL;
  const int d = c.varlen ? 1 : 0; /* packed tensors have no batch dimension */
  c.batch = c.varlen ? p->cu_seqlens_q.shape[0] - 1 : p->q.shape[0];
  c.seqlen_q = c.varlen ? p->max_seqlen_q : p->q.shape[1];
  c.seqlen_k = c.varlen ? p->max_seqlen_k : p->k.shape[1];
  c.heads_q = p->q.shape[2 - d];
  c.heads_kv = p->k.shape[2 - d];
  c.head_dim_qk = p->q.shape[3 - d];
  c.head_dim_v = p->v.shape[3 - d];
  c.total_q = p->q.shape[0];
  c.total_k = p->k.shape[0];
  return c;
}

/* The sizes a launch packed are the caller's (a negative one: the kernel takes no such argument), the
 * group size divides them, and the head dims (head_dim8 * 8) fit the compiled ones. */
static void expect_attn_sizes(const aotk__kernel_entry *e, const attn_caller *c, int32_t flags, int64_t seqlen_q,
                              int64_t seqlen_k, int64_t heads_q, int64_t group_size, int64_t head_dim_qk,
                              int64_t head_dim_v) {
  EXPECT(((flags & ATTN_VARLEN) != 0) == c->varlen, "flags = %#x for a %s call", (unsigned)flags,
         c->varlen ? "varlen" : "dense");
  EXPECT(seqlen_q == c->seqlen_q && (seqlen_k < 0 || seqlen_k == c->seqlen_k) && heads_q == c->heads_q,
         "seqlen_q, seqlen_k, heads_q = %lld, %lld, %lld for the caller's %lld, %lld, %lld", (long long)seqlen_q,
         (long long)seqlen_k, (long long)heads_q, (long long)c->seqlen_q, (long long)c->seqlen_k,
         (long long)c->heads_q);
  EXPECT(group_size < 0 || (group_size >= 1 && heads_q == c->heads_kv * group_size),
         "group_size = %lld for %lld query and %lld kv heads", (long long)group_size, (long long)heads_q,
         (long long)c->heads_kv);
  EXPECT((head_dim_qk < 0 || (head_dim_qk == c->head_dim_qk && head_dim_qk <= e->head_dim_qk)) &&
             (head_dim_v < 0 || (head_dim_v == c->head_dim_v && head_dim_v <= e->head_dim_v)),
         "head dims %lld, %lld for the caller's %lld, %lld (compiled %d, %d)", (long long)head_dim_qk,
         (long long)head_dim_v, (long long)c->head_dim_qk, (long long)c->head_dim_v, (int)e->head_dim_qk,
         (int)e->head_dim_v);
}

/* num_blocks tiles of `block` rows cover `length` rows, the last one not empty. */
static void expect_blocks(const aotk__kernel_entry *e, int64_t num_blocks, int64_t block, int64_t length,
                          const char *what) {
  EXPECT(num_blocks >= 1 && (num_blocks - 1) * block < length && num_blocks * block >= length,
         "%s = %lld tiles of %lld rows for %lld rows", what, (long long)num_blocks, (long long)block,
         (long long)length);
}

/* One of q, k, v, out, dout, dq, dk, dv as an attention kernel reaches it. Its pointer and (batch: int64,
 * sequence: int32, head: int32) stride arguments are the caller's tensor's (src/attn/aotk_attn_validate.c's
 * view_4d: packed, batch stride 0). A program touches rows 0 .. seqlen - 1 of its sequence (the masks bound
 * nothing more: this is every row of every sequence and head, causal or windowed or not), `heads`
 * heads, `columns` columns. Dense, that is rows 0 .. seqlen - 1 of each batch entry. Packed, a
 * sequence's rows start at its cu_seqlens offset, device data that include/aotk.h makes the caller's
 * promise ("offsets past total_q / total_k are the caller's error"): by that promise, and by nothing
 * the host can see, rows 0 .. total - 1 of the packed tensor (q's rows for the query side, k's for the
 * key side), which is the box checked. The Triton kernels address the batch, a sequence's start, a
 * block's first row and head * stride_h in int64, and a row within its block (up to 256 rows) times
 * stride_s plus the column in int32: with `int32_offsets`, that may not wrap, or the model would not be
 * the kernel. Writes (`output`) stay inside the tensor's own span. */
static void check_attn_tensor(const aotk__kernel_entry *e, void **a, int pointer, int strides, const attn_caller *c,
                              const aotk_tensor *t, bool key_side, int64_t heads, int64_t columns, bool int32_offsets,
                              bool output, const char *argument) {
  const int64_t stride_b = arg_i64(a, strides), stride_s = arg_i32(a, strides + 1), stride_h = arg_i32(a, strides + 2);
  const int d = c->varlen ? 1 : 0;
  const int64_t seqlen = key_side ? c->seqlen_k : c->seqlen_q;
  const int64_t rows = c->varlen ? (key_side ? c->total_k : c->total_q) : seqlen;
  EXPECT(arg_pointer(a, pointer) == (uintptr_t)t->data &&
             (c->varlen ? stride_b == 0 : same_stride(stride_b, t->strides[0], c->batch)) &&
             same_stride(stride_s, t->strides[1 - d], rows) && same_stride(stride_h, t->strides[2 - d], heads),
         "%s = %#lx with strides (%lld, %lld, %lld) for the caller's %p with strides (%lld, %lld, %lld, %lld)",
         argument, (unsigned long)arg_pointer(a, pointer), (long long)stride_b, (long long)stride_s,
         (long long)stride_h, t->data, (long long)t->strides[0], (long long)t->strides[1], (long long)t->strides[2],
         (long long)t->strides[3]);
  EXPECT(!e->aligned || (arg_pointer(a, pointer) % 16 == 0 && stride_b % 16 == 0 && stride_s % 16 == 0 &&
                         stride_h % 16 == 0),
         "%s = %#lx with strides (%lld, %lld, %lld) for the aligned variant", argument,
         (unsigned long)arg_pointer(a, pointer), (long long)stride_b, (long long)stride_s, (long long)stride_h);
  if (int32_offsets) {
    const int64_t block_rows = seqlen < 256 ? seqlen : 256;
    EXPECT((__int128)(block_rows - 1) * magnitude(stride_s) + columns - 1 <= INT32_MAX,
           "%s: %lld rows of a block %lld apart: its 32-bit offsets wrap", argument, (long long)block_rows,
           (long long)stride_s);
  }
  const axis axes[] = {{0, c->varlen ? 1 : c->batch, stride_b}, {0, rows, stride_s}, {0, heads, stride_h},
                       {0, columns, 1}};
  check_box_in(arg_pointer(a, pointer), axes, 4, 2, e->function_name, argument, output ? t : NULL);
}

/* lse as the kernels index it: batch * stride_lb + head * stride_lh (int64 in every kernel; stride_lh
 * an int32 argument) + the sequence's first row + row; dense [batch, heads_q, seqlen_q], packed
 * [heads_q, total_q] (stride_lb 0; rows by the promise above). */
static void check_attn_lse(const aotk__kernel_entry *e, void **a, int pointer, int strides, const attn_caller *c,
                           const aotk_tensor *t, bool output) {
  const int64_t stride_b = arg_i64(a, strides), stride_h = arg_i32(a, strides + 1);
  EXPECT(arg_pointer(a, pointer) == (uintptr_t)t->data &&
             (c->varlen ? stride_b == 0 : same_stride(stride_b, t->strides[0], c->batch)) &&
             same_stride(stride_h, t->strides[c->varlen ? 0 : 1], c->heads_q),
         "Lse = %#lx with strides (%lld, %lld) for the caller's %p with strides (%lld, %lld)",
         (unsigned long)arg_pointer(a, pointer), (long long)stride_b, (long long)stride_h, t->data,
         (long long)t->strides[0], (long long)t->strides[1]);
  const axis axes[] = {{0, c->varlen ? 1 : c->batch, stride_b}, {0, c->heads_q, stride_h},
                       {0, c->varlen ? c->total_q : c->seqlen_q, 1}};
  check_box_in(arg_pointer(a, pointer), axes, 3, 4, e->function_name, "Lse", output ? t : NULL);
}

/* cu_seqlens (num_seqs + 1 offsets each, packed calls only), ALiBi slopes ([heads_q] or [batch, heads_q]
 * by stride_ab), sinks ([heads_q]) and the RNG state ({seed, offset}) where the flags have the kernel
 * read them: the caller's, as many as it reads (an argument index < 0: the kernel takes none). */
static void check_attn_features(const aotk__kernel_entry *e, void **a, const attn_caller *c, const aotk_attn_params *p,
                                int32_t flags, int cu_q, int cu_k, int alibi, int stride_ab, int sinks, int rng) {
  const int cu[2] = {cu_q, cu_k};
  const aotk_tensor *cu_tensors[2] = {&p->cu_seqlens_q, &p->cu_seqlens_k};
  for (int i = 0; i < 2; i++) {
    if (cu[i] < 0) continue;
    EXPECT(arg_pointer(a, cu[i]) == (uintptr_t)cu_tensors[i]->data, "CuSeqlens%c = %#lx for the caller's %p",
           i ? 'K' : 'Q', (unsigned long)arg_pointer(a, cu[i]), cu_tensors[i]->data);
    if (c->varlen) check_vector(e, a, cu[i], c->batch + 1, 4, i ? "CuSeqlensK" : "CuSeqlensQ");
  }
  if (alibi >= 0 && (flags & ATTN_ALIBI)) {
    const aotk_tensor *t = &p->alibi_slopes;
    const int64_t packed_stride = arg_i64(a, stride_ab);
    EXPECT(arg_pointer(a, alibi) == (uintptr_t)t->data &&
               (t->rank == 2 ? same_stride(packed_stride, t->strides[0], c->batch) : packed_stride == 0),
           "AlibiSlopes = %#lx, stride_ab = %lld for the caller's %p", (unsigned long)arg_pointer(a, alibi),
           (long long)arg_i64(a, stride_ab), t->data);
    const axis axes[] = {{0, c->batch, arg_i64(a, stride_ab)}, {0, c->heads_q, 1}};
    check_box(arg_pointer(a, alibi), axes, 2, 4, e->function_name, "AlibiSlopes");
  }
  if (sinks >= 0 && (flags & ATTN_SINKS)) {
    EXPECT(arg_pointer(a, sinks) == (uintptr_t)p->sinks.data, "Sinks = %#lx for the caller's %p",
           (unsigned long)arg_pointer(a, sinks), p->sinks.data);
    check_vector(e, a, sinks, c->heads_q, 4, "Sinks");
  }
  if (rng >= 0 && (flags & ATTN_DROPOUT)) {
    EXPECT(arg_pointer(a, rng) == (uintptr_t)p->rng_state.data, "RngState = %#lx for the caller's %p",
           (unsigned long)arg_pointer(a, rng), p->rng_state.data);
    check_vector(e, a, rng, 2, 8, "RngState");
  }
}

/* The forward: attn_fwd and attn_fwd_tma (kernels/attn_fwd.py), attn_fwd_hopper(_wg3)
 * (kernels/attn_fwd_hopper.py). Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, AlibiSlopes, Sinks, RngState,
 * the q, k, v, out strides, stride_lb, stride_lh, stride_ab, 10 int32 (seqlen_q, seqlen_k, heads_q,
 * group_size, num_m_blocks, head_dim_qk8, head_dim_v8, window_left, window_right, flags), 5 scalars;
 * the TMA kernels then Q's, K's and V's descriptors, the Gluon ones num_tiles. Tiles (query block,
 * sequence, query head), query block fastest: one program each, or for the persistent Gluon kernel at
 * most num_tiles programs walking them. The Triton kernels mask the head dims at head_dim8 * 8; the
 * Gluon kernel and the TMA boxes use the compiled ones, which the host chooses equal to the problem's
 * (a wider one would read and write the next head's columns). The Gluon kernel reads nothing through
 * Q, K and V (their descriptors instead) and the TMA one nothing through Q: checked all the same. */
static void check_attn_fwd_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  const bool hopper = e->family == AOTK__FAMILY_ATTN_FWD_HOPPER || e->family == AOTK__FAMILY_ATTN_FWD_HOPPER_WG3;
  const bool tma = hopper || e->family == AOTK__FAMILY_ATTN_FWD_TMA;
  enum { POINTER_KERNEL_PARAMS = 40 };
  EXPECT(strncmp(e->param_kinds, "ppppp" "pp" "ppp" "liiliiliilii" "lil" "iiiii" "iiiii" "fff" "if",
                 POINTER_KERNEL_PARAMS) == 0 &&
             strcmp(e->param_kinds + POINTER_KERNEL_PARAMS, hopper ? "tttti" : tma ? "ttt" : "") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of the forward is out of date", e->param_kinds);
  const aotk_attn_params *p = seen.attn;
  EXPECT(p != NULL, "launched by a call other than aotk_attn_fwd");
  enum { Q, K, V, OUT, LSE, CU_Q, CU_K, ALIBI, SINKS, RNG, QB, KB = 13, VB = 16, OB = 19, LB = 22, AB = 24, SEQLEN_Q,
         SEQLEN_K, HEADS_Q, GROUP_SIZE, M_BLOCKS, DQK8, DV8, FLAGS = 34, DESCRIPTORS = 40, NUM_TILES = 68 };
  const attn_caller c = attn_caller_problem(p);
  const int64_t seqlen_q = arg_i32(a, SEQLEN_Q), heads_q = arg_i32(a, HEADS_Q), group_size = arg_i32(a, GROUP_SIZE);
  const int64_t m_blocks = arg_i32(a, M_BLOCKS);
  const int64_t head_dim_qk = 8 * (int64_t)arg_i32(a, DQK8), head_dim_v = 8 * (int64_t)arg_i32(a, DV8);
  const int32_t flags = arg_i32(a, FLAGS);
  expect_attn_sizes(e, &c, flags, seqlen_q, arg_i32(a, SEQLEN_K), heads_q, group_size, head_dim_qk, head_dim_v);
  EXPECT(!tma || (e->head_dim_qk == head_dim_qk && e->head_dim_v == head_dim_v),
         "compiled for head dims %d, %d; the problem's are %lld, %lld", (int)e->head_dim_qk, (int)e->head_dim_v,
         (long long)head_dim_qk, (long long)head_dim_v);
  expect_blocks(e, m_blocks, e->block_m, seqlen_q, "num_m_blocks");
  const int64_t tiles = hopper ? arg_i32(a, NUM_TILES) : (int64_t)grid;
  EXPECT(tiles == c.batch * heads_q * m_blocks && (int64_t)grid <= tiles,
         "%u programs over %lld tiles for %lld sequences x %lld heads x %lld query blocks", grid, (long long)tiles,
         (long long)c.batch, (long long)heads_q, (long long)m_blocks);
  EXPECT(((flags & ATTN_WRITE_LSE) != 0) == (p->lse.data != NULL), "flags = %#x, lse.data = %p", (unsigned)flags,
         p->lse.data);

  const int64_t heads_kv = heads_q / group_size;
  check_attn_tensor(e, a, Q, QB, &c, &p->q, false, heads_q, head_dim_qk, true, false, "Q");
  check_attn_tensor(e, a, K, KB, &c, &p->k, true, heads_kv, head_dim_qk, true, false, "K");
  check_attn_tensor(e, a, V, VB, &c, &p->v, true, heads_kv, head_dim_v, true, false, "V");
  check_attn_tensor(e, a, OUT, OB, &c, &p->out, false, heads_q, head_dim_v, !hopper, true, "Out");
  if (flags & ATTN_WRITE_LSE) check_attn_lse(e, a, LSE, LB, &c, &p->lse, true);
  check_attn_features(e, a, &c, p, flags, CU_Q, CU_K, ALIBI, AB, SINKS, RNG);
  /* The Gluon forward's fourth descriptor is over out where it stores O by TMA (FLAG_O_TMA), else over v
   * (unused, in O's 64-row boxes); only it sets the flag. */
  EXPECT(hopper || (flags & ATTN_O_TMA) == 0, "flags = %#x: FLAG_O_TMA for a kernel without O's descriptor",
         (unsigned)flags);
  if (tma) {
    const bool o_tma = (flags & ATTN_O_TMA) != 0;
    const descriptor_role roles[] = {{Q, hopper ? 64 : e->block_m, head_dim_qk, 2, "DescQ"},
                                     {K, e->block_n, head_dim_qk, 2, "DescK"},
                                     {V, e->block_n, head_dim_v, 2, "DescV"},
                                     {o_tma ? OUT : V, 64, head_dim_v, 2, o_tma ? "DescO" : "DescO (v's)"}};
    check_descriptors(e, a, DESCRIPTORS, roles, hopper ? 4 : 3);
  }
}

/* attn_dropout_mask (kernels/attn_fwd.py): Mask, CuSeqlensQ, CuSeqlensK, RngState, the mask's batch,
 * head and row strides (int64), 6 int32 (seqlen_q, seqlen_k, heads_q, num_m_blocks, flags, threshold);
 * one program per (query block, sequence, head) writing rows < the sequence's query length and columns
 * < its key length of the caller's [batch, heads_q, seqlen_q, seqlen_k] mask. */
static void check_attn_dropout_mask_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "p" "pp" "p" "lll" "iiiiii") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_dropout_mask is out of date", e->param_kinds);
  const aotk_attn_params *p = seen.attn;
  EXPECT(p != NULL && p->dropout_mask.data != NULL, "launched by a call other than aotk_attn_fwd with dropout_mask");
  enum { MASK, CU_Q, CU_K, RNG, MB, MH, MS, SEQLEN_Q, SEQLEN_K, HEADS_Q, M_BLOCKS, FLAGS };
  const attn_caller c = attn_caller_problem(p);
  const aotk_tensor *t = &p->dropout_mask;
  const int64_t seqlen_q = arg_i32(a, SEQLEN_Q), seqlen_k = arg_i32(a, SEQLEN_K), heads_q = arg_i32(a, HEADS_Q);
  const int64_t m_blocks = arg_i32(a, M_BLOCKS);
  const int32_t flags = arg_i32(a, FLAGS);
  expect_attn_sizes(e, &c, flags, seqlen_q, seqlen_k, heads_q, -1, -1, -1);
  EXPECT((flags & ~ATTN_VARLEN) == 0 && (flags & ATTN_DROPOUT) == 0, "flags = %#x", (unsigned)flags);
  expect_blocks(e, m_blocks, e->block_m, seqlen_q, "num_m_blocks");
  EXPECT((int64_t)grid == m_blocks * c.batch * heads_q, "a grid of %u programs for %lld x %lld x %lld", grid,
         (long long)m_blocks, (long long)c.batch, (long long)heads_q);
  EXPECT(arg_pointer(a, MASK) == (uintptr_t)t->data && same_stride(arg_i64(a, MB), t->strides[0], c.batch) &&
             same_stride(arg_i64(a, MH), t->strides[1], heads_q) &&
             same_stride(arg_i64(a, MS), t->strides[2], seqlen_q),
         "Mask = %#lx with strides (%lld, %lld, %lld) for the caller's %p", (unsigned long)arg_pointer(a, MASK),
         (long long)arg_i64(a, MB), (long long)arg_i64(a, MH), (long long)arg_i64(a, MS), t->data);
  const axis axes[] = {{0, c.batch, arg_i64(a, MB)}, {0, heads_q, arg_i64(a, MH)}, {0, seqlen_q, arg_i64(a, MS)},
                       {0, seqlen_k, 1}};
  check_box_in(arg_pointer(a, MASK), axes, 4, 1, e->function_name, "Mask", t);
  check_attn_features(e, a, &c, p, ATTN_DROPOUT, CU_Q, CU_K, -1, -1, -1, RNG);
}

/* attn_bwd_preprocess (kernels/attn_bwd.py): Out, DOut, Lse, Delta, LseLog2, CuSeqlensQ, Sinks,
 * SinkPartial, out's and dout's strides, stride_lb, stride_lh, 7 int32 (seqlen_q, heads_q, num_seqs,
 * num_m_blocks, stats_stride, head_dim_v8, flags); one program per (block of statistics rows, sequence,
 * query head). It reads out, dout and lse at the sequence's rows and writes every row of its block,
 * padding included (unmasked), into the workspace's delta and lse * log2(e), [num_seqs * heads_q,
 * stats_stride] fp32 each; with sinks, one partial per program into [heads_q, num_seqs, num_m_blocks]. */
static void check_attn_preprocess_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "ppppp" "p" "pp" "liilii" "li" "iiii" "i" "ii") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_bwd_preprocess is out of date", e->param_kinds);
  const aotk_attn_params *p = seen.attn;
  EXPECT(p != NULL, "launched by a call other than aotk_attn_bwd");
  enum { OUT, DOUT, LSE, DELTA, LSE_LOG2, CU_Q, SINKS, SINK_PARTIAL, OB, DB = 11, LB = 14, SEQLEN_Q = 16, HEADS_Q,
         NUM_SEQS, M_BLOCKS, STATS_STRIDE, DV8, FLAGS };
  const attn_caller c = attn_caller_problem(p);
  const int64_t seqlen_q = arg_i32(a, SEQLEN_Q), heads_q = arg_i32(a, HEADS_Q), num_seqs = arg_i32(a, NUM_SEQS);
  const int64_t m_blocks = arg_i32(a, M_BLOCKS), stats_stride = arg_i32(a, STATS_STRIDE);
  const int64_t head_dim_v = 8 * (int64_t)arg_i32(a, DV8);
  const int32_t flags = arg_i32(a, FLAGS);
  expect_attn_sizes(e, &c, flags, seqlen_q, -1, heads_q, -1, -1, head_dim_v);
  EXPECT((flags & ~(ATTN_VARLEN | ATTN_SINKS)) == 0 && ((flags & ATTN_SINKS) != 0) == (p->dsinks.data != NULL),
         "flags = %#x, dsinks.data = %p", (unsigned)flags, p->dsinks.data);
  /* Every statistics row of a sequence written, none past its own row. */
  EXPECT(num_seqs == c.batch && m_blocks >= 1 && m_blocks * e->block_m >= seqlen_q &&
             m_blocks * e->block_m <= stats_stride,
         "num_seqs = %lld, %lld blocks of %d rows, stats_stride = %lld for %lld sequences of %lld rows",
         (long long)num_seqs, (long long)m_blocks, (int)e->block_m, (long long)stats_stride, (long long)c.batch,
         (long long)seqlen_q);
  EXPECT((int64_t)grid == m_blocks * num_seqs * heads_q, "a grid of %u programs for %lld x %lld x %lld", grid,
         (long long)m_blocks, (long long)num_seqs, (long long)heads_q);

  check_attn_tensor(e, a, OUT, OB, &c, &p->out, false, heads_q, head_dim_v, true, false, "Out");
  check_attn_tensor(e, a, DOUT, DB, &c, &p->dout, false, heads_q, head_dim_v, true, false, "DOut");
  check_attn_lse(e, a, LSE, LB, &c, &p->lse, false);
  EXPECT(stats_stride % 16 == 0, "stats_stride = %lld, hinted a multiple of 16", (long long)stats_stride);
  expect_aligned(e, a, DELTA, "Delta");
  expect_aligned(e, a, LSE_LOG2, "LseLog2");
  const axis stats_axes[] = {{0, num_seqs * heads_q, stats_stride}, {0, m_blocks * e->block_m, 1}};
  check_workspace_part(e, arg_pointer(a, DELTA), stats_axes, 2, 4, "Delta");
  check_workspace_part(e, arg_pointer(a, LSE_LOG2), stats_axes, 2, 4, "LseLog2");
  check_attn_features(e, a, &c, p, flags, CU_Q, -1, -1, -1, SINKS, -1);
  if (flags & ATTN_SINKS) {
    const axis partial_axes[] = {{0, heads_q * num_seqs * m_blocks, 1}};
    check_workspace_part(e, arg_pointer(a, SINK_PARTIAL), partial_axes, 1, 4, "SinkPartial");
  }
}

/* The statistics the dK/dV and dQ passes load, unmasked: rows below seqlen_q rounded up to the tile's
 * BLOCK_M (the pre-pass padded them), of statistics rows sequence * heads_q + head. */
static void check_attn_stats(const aotk__kernel_entry *e, void **a, const attn_caller *c, int lse_log2, int delta,
                             int64_t stats_stride) {
  const int64_t stats_rows = ceil_div(c->seqlen_q, e->block_m) * e->block_m;
  EXPECT(stats_rows <= stats_stride && stats_stride % 16 == 0,
         "stats_stride = %lld (hinted a multiple of 16) for %lld rows loaded per statistics row",
         (long long)stats_stride, (long long)stats_rows);
  expect_aligned(e, a, lse_log2, "LseLog2");
  expect_aligned(e, a, delta, "Delta");
  const axis axes[] = {{0, c->batch * c->heads_q, stats_stride}, {0, stats_rows, 1}};
  check_workspace_part(e, arg_pointer(a, lse_log2), axes, 2, 4, "LseLog2");
  check_workspace_part(e, arg_pointer(a, delta), axes, 2, 4, "Delta");
}

/* The dK/dV pass: attn_bwd_dkdv (kernels/attn_bwd.py) and the Gluon attn_bwd_dkdv_hopper and
 * attn_bwd_fused_hopper (kernels/attn_bwd_hopper.py). Q, K, V, DOut, LseLog2, Delta, DK, DV,
 * CuSeqlensQ, CuSeqlensK, AlibiSlopes, RngState, the q, k, v, dout, dk, dv strides, stride_ab, 7 int32
 * (seqlen_q, seqlen_k, heads_q, heads_kv, group_size, num_n_blocks, stats_stride), head_dim_qk8,
 * head_dim_v8, window_left, window_right, flags, 7 scalars; the Gluon passes then Q's, K's, V's and dO's
 * descriptors, the fused one the fp32 dQ accumulator's ([batch * heads_q, stats_stride, head_dim_qk] in
 * the workspace, reduce-added into). One program per (key block, sequence, kv head): its keys' rows of
 * k, v, dk and dv, every query row of its group's heads in q and dout, and their statistics. */
static void check_attn_dkdv_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  const bool fused = e->family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER;
  const bool hopper = fused || e->family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER;
  enum { POINTER_KERNEL_PARAMS = 49 };
  EXPECT(strncmp(e->param_kinds, "pppppppp" "pp" "pp" "liiliiliiliiliilii" "l" "iiiiii" "i" "iiiii" "f" "fff" "if",
                 POINTER_KERNEL_PARAMS) == 0 &&
             strcmp(e->param_kinds + POINTER_KERNEL_PARAMS, fused ? "ttttt" : hopper ? "tttt" : "") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of the dK/dV pass is out of date", e->param_kinds);
  const aotk_attn_params *p = seen.attn;
  EXPECT(p != NULL, "launched by a call other than aotk_attn_bwd");
  enum { Q, K, V, DOUT, LSE_LOG2, DELTA, DK, DV, CU_Q, CU_K, ALIBI, RNG, QB, KB = 15, VB = 18, DOB = 21, DKB = 24,
         DVB = 27, AB = 30, SEQLEN_Q, SEQLEN_K, HEADS_Q, HEADS_KV, GROUP_SIZE, N_BLOCKS, STATS_STRIDE, DQK8, DV8,
         FLAGS = 42, DESCRIPTORS = 49 };
  const attn_caller c = attn_caller_problem(p);
  const int64_t seqlen_k = arg_i32(a, SEQLEN_K), heads_q = arg_i32(a, HEADS_Q), heads_kv = arg_i32(a, HEADS_KV);
  const int64_t n_blocks = arg_i32(a, N_BLOCKS);
  const int64_t head_dim_qk = 8 * (int64_t)arg_i32(a, DQK8), head_dim_v = 8 * (int64_t)arg_i32(a, DV8);
  const int32_t flags = arg_i32(a, FLAGS);
  expect_attn_sizes(e, &c, flags, arg_i32(a, SEQLEN_Q), seqlen_k, heads_q, arg_i32(a, GROUP_SIZE), head_dim_qk,
                    head_dim_v);
  EXPECT(heads_kv == c.heads_kv, "heads_kv = %lld for the caller's %lld", (long long)heads_kv, (long long)c.heads_kv);
  EXPECT(!hopper || (e->head_dim_qk == head_dim_qk && e->head_dim_v == head_dim_v),
         "compiled for head dims %d, %d; the problem's are %lld, %lld", (int)e->head_dim_qk, (int)e->head_dim_v,
         (long long)head_dim_qk, (long long)head_dim_v);
  expect_blocks(e, n_blocks, e->block_n, seqlen_k, "num_n_blocks");
  EXPECT((int64_t)grid == n_blocks * c.batch * heads_kv, "a grid of %u programs for %lld x %lld x %lld", grid,
         (long long)n_blocks, (long long)c.batch, (long long)heads_kv);

  check_attn_tensor(e, a, Q, QB, &c, &p->q, false, heads_q, head_dim_qk, !hopper, false, "Q");
  check_attn_tensor(e, a, K, KB, &c, &p->k, true, heads_kv, head_dim_qk, !hopper, false, "K");
  check_attn_tensor(e, a, V, VB, &c, &p->v, true, heads_kv, head_dim_v, !hopper, false, "V");
  check_attn_tensor(e, a, DOUT, DOB, &c, &p->dout, false, heads_q, head_dim_v, !hopper, false, "DOut");
  check_attn_tensor(e, a, DK, DKB, &c, &p->dk, true, heads_kv, head_dim_qk, !hopper, true, "DK");
  check_attn_tensor(e, a, DV, DVB, &c, &p->dv, true, heads_kv, head_dim_v, !hopper, true, "DV");
  check_attn_stats(e, a, &c, LSE_LOG2, DELTA, arg_i32(a, STATS_STRIDE));
  check_attn_features(e, a, &c, p, flags, CU_Q, CU_K, ALIBI, AB, -1, RNG);
  if (hopper) {
    const descriptor_role roles[] = {{Q, e->block_m, head_dim_qk, 2, "DescQ"},
                                     {K, e->block_n, head_dim_qk, 2, "DescK"},
                                     {V, e->block_n, head_dim_v, 2, "DescV"},
                                     {DOUT, e->block_m, head_dim_v, 2, "DescDO"},
                                     {-1, e->block_m, head_dim_qk, 4, "DQAcc"}};
    check_descriptors(e, a, DESCRIPTORS, roles, fused ? 5 : 4);
  }
}

/* The dQ pass: attn_bwd_dq (kernels/attn_bwd.py) and the Gluon attn_bwd_dq_hopper
 * (kernels/attn_bwd_dq_hopper.py). Q, K, V, DOut, LseLog2, Delta, DQ, CuSeqlensQ, CuSeqlensK,
 * AlibiSlopes, RngState, the q, k, v, dout, dq strides, stride_ab, 6 int32 (seqlen_q, seqlen_k, heads_q,
 * group_size, num_m_blocks, stats_stride), head_dim_qk8, head_dim_v8, window_left, window_right, flags,
 * 7 scalars; the Gluon pass then Q's, K's, V's and dO's descriptors. One program per (query block,
 * sequence, query head). */
static void check_attn_dq_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  const bool hopper = e->family == AOTK__FAMILY_ATTN_BWD_DQ_HOPPER;
  enum { POINTER_KERNEL_PARAMS = 44 };
  EXPECT(strncmp(e->param_kinds, "ppppppp" "pp" "pp" "liiliiliiliilii" "l" "iiiii" "i" "iiiii" "f" "fff" "if",
                 POINTER_KERNEL_PARAMS) == 0 &&
             strcmp(e->param_kinds + POINTER_KERNEL_PARAMS, hopper ? "tttt" : "") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of the dQ pass is out of date", e->param_kinds);
  const aotk_attn_params *p = seen.attn;
  EXPECT(p != NULL, "launched by a call other than aotk_attn_bwd");
  enum { Q, K, V, DOUT, LSE_LOG2, DELTA, DQ, CU_Q, CU_K, ALIBI, RNG, QB, KB = 14, VB = 17, DOB = 20, DQB = 23, AB = 26,
         SEQLEN_Q, SEQLEN_K, HEADS_Q, GROUP_SIZE, M_BLOCKS, STATS_STRIDE, DQK8, DV8, FLAGS = 37, DESCRIPTORS = 44 };
  const attn_caller c = attn_caller_problem(p);
  const int64_t seqlen_q = arg_i32(a, SEQLEN_Q), heads_q = arg_i32(a, HEADS_Q), group_size = arg_i32(a, GROUP_SIZE);
  const int64_t m_blocks = arg_i32(a, M_BLOCKS);
  const int64_t head_dim_qk = 8 * (int64_t)arg_i32(a, DQK8), head_dim_v = 8 * (int64_t)arg_i32(a, DV8);
  const int32_t flags = arg_i32(a, FLAGS);
  expect_attn_sizes(e, &c, flags, seqlen_q, arg_i32(a, SEQLEN_K), heads_q, group_size, head_dim_qk, head_dim_v);
  EXPECT(!hopper || (e->head_dim_qk == head_dim_qk && e->head_dim_v == head_dim_v),
         "compiled for head dims %d, %d; the problem's are %lld, %lld", (int)e->head_dim_qk, (int)e->head_dim_v,
         (long long)head_dim_qk, (long long)head_dim_v);
  expect_blocks(e, m_blocks, e->block_m, seqlen_q, "num_m_blocks");
  EXPECT((int64_t)grid == m_blocks * c.batch * heads_q, "a grid of %u programs for %lld x %lld x %lld", grid,
         (long long)m_blocks, (long long)c.batch, (long long)heads_q);

  const int64_t heads_kv = heads_q / group_size;
  check_attn_tensor(e, a, Q, QB, &c, &p->q, false, heads_q, head_dim_qk, !hopper, false, "Q");
  check_attn_tensor(e, a, K, KB, &c, &p->k, true, heads_kv, head_dim_qk, !hopper, false, "K");
  check_attn_tensor(e, a, V, VB, &c, &p->v, true, heads_kv, head_dim_v, !hopper, false, "V");
  check_attn_tensor(e, a, DOUT, DOB, &c, &p->dout, false, heads_q, head_dim_v, !hopper, false, "DOut");
  check_attn_tensor(e, a, DQ, DQB, &c, &p->dq, false, heads_q, head_dim_qk, !hopper, true, "DQ");
  check_attn_stats(e, a, &c, LSE_LOG2, DELTA, arg_i32(a, STATS_STRIDE));
  check_attn_features(e, a, &c, p, flags, CU_Q, CU_K, ALIBI, AB, -1, RNG);
  if (hopper) {
    const descriptor_role roles[] = {{Q, e->block_m, head_dim_qk, 2, "DescQ"},
                                     {K, e->block_n, head_dim_qk, 2, "DescK"},
                                     {V, e->block_n, head_dim_v, 2, "DescV"},
                                     {DOUT, e->block_m, head_dim_v, 2, "DescDO"}};
    check_descriptors(e, a, DESCRIPTORS, roles, 4);
  }
}

/* attn_bwd_dq_convert (kernels/attn_bwd.py): DQAcc, DQ, CuSeqlensQ, dq's strides, 5 int32 (seqlen_q,
 * heads_q, num_m_blocks, stats_stride, flags); one program per (query block, sequence, query head),
 * loading its block of the accumulator unmasked, [batch * heads_q, stats_stride, HEAD_DIM] fp32, and
 * storing the sequence's rows of dq, HEAD_DIM (compiled) columns, with 64-bit offsets. */
static void check_attn_dq_convert_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "ppp" "lii" "iii" "i" "i") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_bwd_dq_convert is out of date", e->param_kinds);
  const aotk_attn_params *p = seen.attn;
  EXPECT(p != NULL, "launched by a call other than aotk_attn_bwd");
  enum { DQ_ACC, DQ, CU_Q, QB, SEQLEN_Q = 6, HEADS_Q, M_BLOCKS, STATS_STRIDE, FLAGS };
  const attn_caller c = attn_caller_problem(p);
  const int64_t seqlen_q = arg_i32(a, SEQLEN_Q), heads_q = arg_i32(a, HEADS_Q), m_blocks = arg_i32(a, M_BLOCKS);
  const int64_t stats_stride = arg_i32(a, STATS_STRIDE), head_dim = e->head_dim_qk;
  const int32_t flags = arg_i32(a, FLAGS);
  expect_attn_sizes(e, &c, flags, seqlen_q, -1, heads_q, -1, head_dim, -1);
  EXPECT((flags & ~ATTN_VARLEN) == 0, "flags = %#x", (unsigned)flags);
  expect_blocks(e, m_blocks, e->block_m, seqlen_q, "num_m_blocks");
  EXPECT(m_blocks * e->block_m <= stats_stride && stats_stride % 16 == 0,
         "%lld blocks of %d rows in accumulator rows of %lld (hinted a multiple of 16)", (long long)m_blocks,
         (int)e->block_m, (long long)stats_stride);
  expect_aligned(e, a, DQ_ACC, "DQAcc");
  EXPECT((int64_t)grid == m_blocks * c.batch * heads_q, "a grid of %u programs for %lld x %lld x %lld", grid,
         (long long)m_blocks, (long long)c.batch, (long long)heads_q);
  const axis acc_axes[] = {{0, c.batch * heads_q, stats_stride * head_dim}, {0, m_blocks * e->block_m, head_dim},
                           {0, head_dim, 1}};
  check_workspace_part(e, arg_pointer(a, DQ_ACC), acc_axes, 3, 4, "DQAcc");
  check_attn_tensor(e, a, DQ, QB, &c, &p->dq, false, heads_q, head_dim, false, true, "DQ");
  check_attn_features(e, a, &c, p, flags, CU_Q, -1, -1, -1, -1, -1);
}

/* attn_bwd_sink_reduce (kernels/attn_bwd.py): SinkPartial, DSinks, count; one program per query head,
 * reading its `count` partials and writing its dsinks entry. */
static void check_attn_sink_reduce_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "ppi") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of attn_bwd_sink_reduce is out of date", e->param_kinds);
  const aotk_attn_params *p = seen.attn;
  EXPECT(p != NULL && p->dsinks.data != NULL, "launched by a call other than aotk_attn_bwd with dsinks");
  enum { SINK_PARTIAL, DSINKS, COUNT };
  const attn_caller c = attn_caller_problem(p);
  const int64_t count = arg_i32(a, COUNT);
  EXPECT((int64_t)grid == c.heads_q && count >= 1, "a grid of %u programs and %lld partials for %lld heads", grid,
         (long long)count, (long long)c.heads_q);
  EXPECT(arg_pointer(a, DSINKS) == (uintptr_t)p->dsinks.data, "DSinks = %#lx for the caller's %p",
         (unsigned long)arg_pointer(a, DSINKS), p->dsinks.data);
  const axis partial_axes[] = {{0, c.heads_q, count}, {0, count, 1}};
  check_workspace_part(e, arg_pointer(a, SINK_PARTIAL), partial_axes, 2, 4, "SinkPartial");
  const axis dsinks_axes[] = {{0, c.heads_q, 1}};
  check_box_in(arg_pointer(a, DSINKS), dsinks_axes, 1, 4, e->function_name, "DSinks", &p->dsinks);
}

/* The caller's selection problem, as src/sel/aotk_sel.c's sel_validate reads it. */
typedef struct sel_caller {
  bool varlen;
  int64_t num_seqs, total_q, total_k, max_seqlen_k, heads_q, heads_kv, group_size, slots, block_size;
  int64_t head_dim_qk, head_dim_v;
  int64_t index_slots; /* the inverse index's slots per kv head: num_seqs * ceil(max_seqlen_k / block_size) */
} sel_caller;

static sel_caller sel_caller_problem(const aotk_sel_params *p) {
  sel_caller c;
  c.varlen = p->cu_seqlens_q.data != NULL || p->cu_seqlens_k.data != NULL;
  c.num_seqs = c.varlen ? p->cu_seqlens_q.shape[0] - 1 : 1;
  c.total_q = p->q.shape[0];
  c.total_k = p->k.shape[0];
  c.max_seqlen_k = c.varlen ? p->max_seqlen_k : c.total_k;
  c.heads_q = p->q.shape[1];
  c.heads_kv = p->k.shape[1];
  c.group_size = c.heads_q / c.heads_kv;
  c.slots = p->block_idx.shape[2];
  c.block_size = p->block_size;
  c.head_dim_qk = p->q.shape[2];
  c.head_dim_v = p->v.shape[2];
  c.index_slots = c.num_seqs * ceil_div(c.max_seqlen_k, c.block_size);
  return c;
}

/* What every selection kernel that takes them shares: num_seqs, total_q, total_k and max_seqlen_k (at
 * `sizes`; max_seqlen_k is total_k without cu_seqlens, which bounds a dense call's keys) the caller's,
 * cu_seqlens the caller's (num_seqs + 1 offsets read, packed calls only), and block_cnt's flag. */
static void check_sel_common(const aotk__kernel_entry *e, void **a, const sel_caller *c, const aotk_sel_params *p,
                             int cu_q, int cu_k, int sizes, int32_t flags) {
  EXPECT(arg_i32(a, sizes) == c->num_seqs && arg_i32(a, sizes + 1) == c->total_q &&
             arg_i32(a, sizes + 2) == c->total_k && arg_i32(a, sizes + 3) == c->max_seqlen_k,
         "num_seqs, total_q, total_k, max_seqlen_k = %d, %d, %d, %d for the caller's %lld, %lld, %lld, %lld",
         (int)arg_i32(a, sizes), (int)arg_i32(a, sizes + 1), (int)arg_i32(a, sizes + 2), (int)arg_i32(a, sizes + 3),
         (long long)c->num_seqs, (long long)c->total_q, (long long)c->total_k, (long long)c->max_seqlen_k);
  EXPECT(((flags & ATTN_VARLEN) != 0) == c->varlen && ((flags & SEL_BLOCK_CNT) != 0) == (p->block_cnt.data != NULL),
         "flags = %#x, block_cnt.data = %p", (unsigned)flags, p->block_cnt.data);
  EXPECT(arg_pointer(a, cu_q) == (uintptr_t)p->cu_seqlens_q.data &&
             arg_pointer(a, cu_k) == (uintptr_t)p->cu_seqlens_k.data,
         "CuSeqlensQ, CuSeqlensK = %#lx, %#lx for the caller's %p, %p", (unsigned long)arg_pointer(a, cu_q),
         (unsigned long)arg_pointer(a, cu_k), p->cu_seqlens_q.data, p->cu_seqlens_k.data);
  if (c->varlen) {
    check_vector(e, a, cu_q, c->num_seqs + 1, 4, "CuSeqlensQ");
    check_vector(e, a, cu_k, c->num_seqs + 1, 4, "CuSeqlensK");
  }
}

/* One of selection's packed [rows, heads, columns] tensors (lse and block_cnt: one column): its pointer
 * and (token: int64, head: int32) strides the caller's; rows 0 .. rows - 1, `heads` heads (head *
 * stride_h is int32 in the kernels), `columns` columns; writes (`output`) inside its own span. */
static void check_sel_tensor(const aotk__kernel_entry *e, void **a, int pointer, int strides, const aotk_tensor *t,
                             int64_t rows, int64_t heads, int64_t columns, size_t element, bool output,
                             const char *argument) {
  /* q, k, v, out and the gradients: pointer and strides hinted ALWAYS (lse and the index are not). */
  const bool hinted = element == 2;
  const int64_t stride_s = arg_i64(a, strides), stride_h = arg_i32(a, strides + 1);
  EXPECT(arg_pointer(a, pointer) == (uintptr_t)t->data && same_stride(stride_s, t->strides[0], rows) &&
             same_stride(stride_h, t->strides[1], heads),
         "%s = %#lx with strides (%lld, %lld) for the caller's %p with strides (%lld, %lld)", argument,
         (unsigned long)arg_pointer(a, pointer), (long long)stride_s, (long long)stride_h, t->data,
         (long long)t->strides[0], (long long)t->strides[1]);
  EXPECT((__int128)(heads - 1) * magnitude(stride_h) <= INT32_MAX, "%s: %lld heads %lld apart: 32-bit offsets wrap",
         argument, (long long)heads, (long long)stride_h);
  EXPECT(!hinted || (arg_pointer(a, pointer) % 16 == 0 && stride_s % 16 == 0 && stride_h % 16 == 0),
         "%s = %#lx with strides (%lld, %lld), hinted multiples of 16", argument,
         (unsigned long)arg_pointer(a, pointer), (long long)stride_s, (long long)stride_h);
  const axis axes[] = {{0, rows, stride_s}, {0, heads, stride_h}, {0, columns, 1}};
  check_box_in(arg_pointer(a, pointer), axes, 3, element, e->function_name, argument, output ? t : NULL);
}

/* block_idx, and block_cnt where its flag is set, read at rows 0 .. rows - 1 (index entries' tokens:
 * below total_q by the grid, or read from cu_seqlens, the caller's promise), every kv head and slot. */
static void check_sel_index(const aotk__kernel_entry *e, void **a, const sel_caller *c, const aotk_sel_params *p,
                            int idx, int cnt, int strides, int32_t flags) {
  check_sel_tensor(e, a, idx, strides, &p->block_idx, c->total_q, c->heads_kv, c->slots, 4, false, "BlockIdx");
  if (flags & SEL_BLOCK_CNT) {
    check_sel_tensor(e, a, cnt, strides + 2, &p->block_cnt, c->total_q, c->heads_kv, 1, 4, false, "BlockCnt");
  }
}

/* sel_fwd and sel_bwd_dq (kernels/sel_attn.py), one program per (kv head, token, chunk of BLOCK_G query
 * heads of the group), kv head outermost. sel_fwd: Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, BlockIdx,
 * BlockCnt, the q, k, v, out, lse, block_idx, block_cnt strides, 8 int32 (num_seqs, total_q, total_k,
 * max_seqlen_k, group_size, group_chunks, num_slots, flags), qk_scale_log2. sel_bwd_dq: Q, K, V, Out,
 * DOut, Lse, DQ, Delta, the cu_seqlens, BlockIdx, BlockCnt, Compact, the q, k, v, out, dout, dq, lse,
 * block_idx, block_cnt strides, 9 int32 (heads_q after max_seqlen_k), 2 scalars; it also writes delta,
 * [total_q, heads_q] fp32, and (its compacted slot lists) [total_q, heads_kv, slots] int32 in the
 * workspace. Keys: a selected block's rows up to the sequence's key length, from its start read in
 * cu_seqlens_k (dense: from 0, max_seqlen_k = total_k), so by the caller's promise rows below total_k;
 * block ids out of range are skipped (their keys masked). The forward's scratch for the valid ids is
 * the first 32 int32 of the token's first out row: inside out's box. */
static void check_sel_token_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  const bool dq = e->family == AOTK__FAMILY_SEL_BWD_DQ;
  const char *kinds = dq ? "ppppppp" "p" "pp" "pp" "p" "lilililililililili" "iiiiiiiii" "ff"
                         : "ppppp" "pp" "pp" "lilililililili" "iiiiiiii" "f";
  EXPECT(strcmp(e->param_kinds, kinds) == 0, "the parameters are \"%s\": fuzz_api.c's model of %s is out of date",
         e->param_kinds, dq ? "sel_bwd_dq" : "sel_fwd");
  const aotk_sel_params *p = seen.sel;
  EXPECT(p != NULL, "launched by a call other than aotk_sel_fwd or aotk_sel_bwd");
  /* Argument numbers: the forward's, or the dQ pass's. */
  const int Q = 0, K = 1, V = 2, OUT = 3, DOUT = 4, LSE = dq ? 5 : 4, DQ = 6, DELTA = 7, CU_Q = dq ? 8 : 5;
  const int IDX = CU_Q + 2, COMPACT = 12, QS = dq ? 13 : 9, KS = QS + 2, VS = QS + 4, OS = QS + 6, DOS = 21, DQS = 23;
  const int LS = dq ? 25 : 17, IS = LS + 2, SIZES = IS + 4, HEADS_Q = 35;
  const int GROUP_SIZE = dq ? 36 : 27, GROUP_CHUNKS = GROUP_SIZE + 1, NUM_SLOTS = GROUP_SIZE + 2;
  const int FLAGS = GROUP_SIZE + 3;
  const sel_caller c = sel_caller_problem(p);
  const int32_t flags = arg_i32(a, FLAGS);
  check_sel_common(e, a, &c, p, CU_Q, CU_Q + 1, SIZES, flags);
  const int64_t group_size = arg_i32(a, GROUP_SIZE), group_chunks = arg_i32(a, GROUP_CHUNKS);
  EXPECT(group_size == c.group_size && group_chunks == ceil_div(group_size, e->block_m) &&
             arg_i32(a, NUM_SLOTS) == c.slots && (!dq || arg_i32(a, HEADS_Q) == c.heads_q),
         "group_size, group_chunks, num_slots = %lld, %lld, %d (BLOCK_G %d) for the caller's %lld, %lld slots",
         (long long)group_size, (long long)group_chunks, (int)arg_i32(a, NUM_SLOTS), (int)e->block_m,
         (long long)c.group_size, (long long)c.slots);
  EXPECT(e->head_dim_qk == c.head_dim_qk && e->head_dim_v == c.head_dim_v && e->block_size == c.block_size,
         "compiled for head dims %d, %d and blocks of %d", (int)e->head_dim_qk, (int)e->head_dim_v, (int)e->block_size);
  EXPECT(dq || !e->aligned || group_size % 16 == 0, "group_size = %lld for the variant hinting a multiple of 16",
         (long long)group_size);
  EXPECT((int64_t)grid == c.heads_kv * c.total_q * group_chunks, "a grid of %u programs for %lld x %lld x %lld", grid,
         (long long)c.heads_kv, (long long)c.total_q, (long long)group_chunks);
  EXPECT(((flags & ATTN_WRITE_LSE) != 0) == (p->lse.data != NULL) && (flags & SEL_DKDV_REDUCE) == 0,
         "flags = %#x, lse.data = %p", (unsigned)flags, p->lse.data);

  check_sel_tensor(e, a, Q, QS, &p->q, c.total_q, c.heads_q, c.head_dim_qk, 2, false, "Q");
  check_sel_tensor(e, a, K, KS, &p->k, c.total_k, c.heads_kv, c.head_dim_qk, 2, false, "K");
  check_sel_tensor(e, a, V, VS, &p->v, c.total_k, c.heads_kv, c.head_dim_v, 2, false, "V");
  check_sel_tensor(e, a, OUT, OS, &p->out, c.total_q, c.heads_q, c.head_dim_v, 2, !dq, "Out");
  if (flags & ATTN_WRITE_LSE) check_sel_tensor(e, a, LSE, LS, &p->lse, c.total_q, c.heads_q, 1, 4, !dq, "Lse");
  check_sel_index(e, a, &c, p, IDX, IDX + 1, IS, flags);
  if (dq) {
    check_sel_tensor(e, a, DOUT, DOS, &p->dout, c.total_q, c.heads_q, c.head_dim_v, 2, false, "DOut");
    check_sel_tensor(e, a, DQ, DQS, &p->dq, c.total_q, c.heads_q, c.head_dim_qk, 2, true, "DQ");
    expect_aligned(e, a, DELTA, "Delta");
    expect_aligned(e, a, COMPACT, "Compact");
    const axis delta_axes[] = {{0, c.total_q, c.heads_q}, {0, c.heads_q, 1}};
    check_workspace_part(e, arg_pointer(a, DELTA), delta_axes, 2, 4, "Delta");
    const axis compact_axes[] = {{0, c.total_q, c.heads_kv * c.slots}, {0, c.heads_kv, c.slots}, {0, c.slots, 1}};
    check_workspace_part(e, arg_pointer(a, COMPACT), compact_axes, 3, 4, "Compact");
  }
}

/* The inverse index's rows in the workspace (src/sel/aotk_sel.c): offsets, cursors and chunks, int32
 * [heads_kv, stride_offsets] (index_slots + 1 offsets a row, index_slots cursors and chunks), and the
 * token lists, int32 [heads_kv, stride_tokens = total_q * slots]. Where a kernel writes or reads a list
 * entry is device data (a prefix sum of the counts, a cursor): each index entry lands in at most one
 * list, so by the index passes' construction every position stays in its kv head's row, and that row is
 * the box. */
static void check_sel_index_rows(const aotk__kernel_entry *e, void **a, const sel_caller *c, int pointer,
                                 int64_t stride_offsets, int64_t per_row, const char *part) {
  EXPECT(stride_offsets >= c->index_slots + 1, "stride_offsets = %lld for %lld index slots",
         (long long)stride_offsets, (long long)c->index_slots);
  expect_aligned(e, a, pointer, part);
  const axis axes[] = {{0, c->heads_kv, stride_offsets}, {0, per_row, 1}};
  check_workspace_part(e, arg_pointer(a, pointer), axes, 2, 4, part);
}

static void check_sel_tokens(const aotk__kernel_entry *e, void **a, const sel_caller *c, int pointer,
                             int64_t stride_tokens) {
  EXPECT(stride_tokens == c->total_q * c->slots, "stride_tokens = %lld for %lld tokens x %lld slots",
         (long long)stride_tokens, (long long)c->total_q, (long long)c->slots);
  expect_aligned(e, a, pointer, "Tokens");
  const axis axes[] = {{0, c->heads_kv, stride_tokens}, {0, stride_tokens, 1}};
  check_workspace_part(e, arg_pointer(a, pointer), axes, 2, 4, "Tokens");
}

/* sel_bwd_dkdv (kernels/sel_attn.py): Q, K, V, DOut, Lse, Delta, DK, DV, the cu_seqlens, Offsets, Tokens,
 * Chunks, Partials, the q, k, v, dout, dk, dv, lse strides, stride_offsets, stride_tokens, 11 int32
 * (num_seqs, total_q, total_k, max_seqlen_k, heads_q, group_size, num_key_tiles, chunk_tokens,
 * max_chunks, partials_per_head, flags), 2 scalars. Programs per (kv head, sequence, key tile of BLOCK_N
 * keys, chunk of a split list), or with SEL_FLAG_DKDV_REDUCE one per key tile. A tile's keys: rows below
 * the sequence's key length from its start (as sel_fwd). The query rows are the tokens of the tile's
 * block's list, written by the index passes from the grid's tokens or cu_seqlens_q (the caller's
 * promise): rows below total_q. A split list's partial records, fp32 [BLOCK_N, head_dim_qk +
 * head_dim_v] per (record, tile of the block), are numbered by the scan pass's prefix sum, under
 * partials_per_head per kv head by the host's bound (src/sel/aotk_sel.c): the box is every kv head's
 * records. */
static void check_sel_dkdv_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  EXPECT(strcmp(e->param_kinds, "pppppppp" "pp" "pppp" "lilililililili" "il" "iiiiiiiiiii" "ff") == 0,
         "the parameters are \"%s\": fuzz_api.c's model of sel_bwd_dkdv is out of date", e->param_kinds);
  const aotk_sel_params *p = seen.sel;
  EXPECT(p != NULL, "launched by a call other than aotk_sel_bwd");
  enum { Q, K, V, DOUT, LSE, DELTA, DK, DV, CU_Q, CU_K, OFFSETS, TOKENS, CHUNKS, PARTIALS, QS, KS = 16, VS = 18,
         DOS = 20, DKS = 22, DVS = 24, LS = 26, STRIDE_OFFSETS = 28, STRIDE_TOKENS, SIZES, HEADS_Q = 34, GROUP_SIZE,
         KEY_TILES, CHUNK_TOKENS, MAX_CHUNKS, PARTIALS_PER_HEAD, FLAGS };
  const sel_caller c = sel_caller_problem(p);
  const int32_t flags = arg_i32(a, FLAGS);
  check_sel_common(e, a, &c, p, CU_Q, CU_K, SIZES, flags);
  const int64_t key_tiles = arg_i32(a, KEY_TILES), max_chunks = arg_i32(a, MAX_CHUNKS);
  const int64_t partials_per_head = arg_i32(a, PARTIALS_PER_HEAD);
  const bool reduce = flags & SEL_DKDV_REDUCE;
  EXPECT(arg_i32(a, HEADS_Q) == c.heads_q && arg_i32(a, GROUP_SIZE) == c.group_size &&
             key_tiles == ceil_div(c.max_seqlen_k, e->block_n) && max_chunks >= 1 && arg_i32(a, CHUNK_TOKENS) >= 1 &&
             e->block_size % e->block_n == 0,
         "heads_q, group_size, num_key_tiles, chunk_tokens, max_chunks = %d, %d, %lld, %d, %lld (BLOCK_N %d)",
         (int)arg_i32(a, HEADS_Q), (int)arg_i32(a, GROUP_SIZE), (long long)key_tiles, (int)arg_i32(a, CHUNK_TOKENS),
         (long long)max_chunks, (int)e->block_n);
  EXPECT(e->head_dim_qk == c.head_dim_qk && e->head_dim_v == c.head_dim_v && e->block_size == c.block_size,
         "compiled for head dims %d, %d and blocks of %d", (int)e->head_dim_qk, (int)e->head_dim_v, (int)e->block_size);
  EXPECT((flags & ~(ATTN_VARLEN | ATTN_WRITE_LSE | SEL_BLOCK_CNT | SEL_DKDV_REDUCE)) == 0 &&
             (!reduce || max_chunks > 1),
         "flags = %#x with max_chunks %lld", (unsigned)flags, (long long)max_chunks);
  EXPECT((int64_t)grid == c.heads_kv * c.num_seqs * key_tiles * (reduce ? 1 : max_chunks),
         "a grid of %u programs for %lld x %lld x %lld (x %lld chunks)", grid, (long long)c.heads_kv,
         (long long)c.num_seqs, (long long)key_tiles, (long long)(reduce ? 1 : max_chunks));

  check_sel_tensor(e, a, Q, QS, &p->q, c.total_q, c.heads_q, c.head_dim_qk, 2, false, "Q");
  check_sel_tensor(e, a, K, KS, &p->k, c.total_k, c.heads_kv, c.head_dim_qk, 2, false, "K");
  check_sel_tensor(e, a, V, VS, &p->v, c.total_k, c.heads_kv, c.head_dim_v, 2, false, "V");
  check_sel_tensor(e, a, DOUT, DOS, &p->dout, c.total_q, c.heads_q, c.head_dim_v, 2, false, "DOut");
  check_sel_tensor(e, a, LSE, LS, &p->lse, c.total_q, c.heads_q, 1, 4, false, "Lse");
  check_sel_tensor(e, a, DK, DKS, &p->dk, c.total_k, c.heads_kv, c.head_dim_qk, 2, true, "DK");
  check_sel_tensor(e, a, DV, DVS, &p->dv, c.total_k, c.heads_kv, c.head_dim_v, 2, true, "DV");
  EXPECT(!e->aligned || c.group_size % 16 == 0, "group_size = %lld for the variant hinting a multiple of 16",
         (long long)c.group_size);
  expect_aligned(e, a, DELTA, "Delta");
  const axis delta_axes[] = {{0, c.total_q, c.heads_q}, {0, c.heads_q, 1}};
  check_workspace_part(e, arg_pointer(a, DELTA), delta_axes, 2, 4, "Delta");
  const int64_t stride_offsets = arg_i32(a, STRIDE_OFFSETS);
  check_sel_index_rows(e, a, &c, OFFSETS, stride_offsets, c.index_slots + 1, "Offsets");
  check_sel_index_rows(e, a, &c, CHUNKS, stride_offsets, c.index_slots, "Chunks");
  check_sel_tokens(e, a, &c, TOKENS, arg_i64(a, STRIDE_TOKENS));
  if (max_chunks > 1) {
    EXPECT(partials_per_head >= 1 && arg_pointer(a, PARTIALS) != 0, "Partials = %#lx, %lld records per kv head",
           (unsigned long)arg_pointer(a, PARTIALS), (long long)partials_per_head);
    expect_aligned(e, a, PARTIALS, "Partials");
    const int64_t record_floats = c.block_size * (c.head_dim_qk + c.head_dim_v);
    const axis partial_axes[] = {{0, c.heads_kv * partials_per_head * record_floats, 1}};
    check_workspace_part(e, arg_pointer(a, PARTIALS), partial_axes, 1, 4, "Partials");
  }
}

/* The inverse index's passes and the index check (kernels/sel_attn.py): sel_index_zero (Offsets, count:
 * its first `count` entries), sel_index_count (index entries' blocks counted into Offsets), sel_index_scan
 * (Offsets, Cursors, Chunks: one program per kv head over its row), sel_index_scatter (entries into the
 * lists at Cursors), sel_index_order (each list sorted, or rewritten from block_idx: one program per (kv
 * head, sequence, block)), sel_check_indices (one program per (token, kv head), an int64 result word in
 * the workspace). */
static void check_sel_helper_launch(const aotk__kernel_entry *e, unsigned grid, void **a) {
  const aotk_sel_params *p = seen.sel;
  EXPECT(p != NULL, "launched by a call other than aotk_sel_bwd or aotk_sel_check_indices");
  const sel_caller c = sel_caller_problem(p);
  switch (e->family) {
    case AOTK__FAMILY_SEL_INDEX_ZERO: {
      EXPECT(strcmp(e->param_kinds, "pi") == 0, "the parameters are \"%s\": fuzz_api.c's model is out of date",
             e->param_kinds);
      const int64_t count = arg_i32(a, 1);
      EXPECT(count >= 1 && (int64_t)grid == ceil_div(count, e->block_m), "a grid of %u programs for %lld entries",
             grid, (long long)count);
      expect_aligned(e, a, 0, "Offsets");
      const axis axes[] = {{0, count, 1}};
      check_workspace_part(e, arg_pointer(a, 0), axes, 1, 4, "Offsets");
      return;
    }
    case AOTK__FAMILY_SEL_INDEX_SCAN: {
      EXPECT(strcmp(e->param_kinds, "ppp" "iiii") == 0, "the parameters are \"%s\": fuzz_api.c's model is out of date",
             e->param_kinds);
      EXPECT((int64_t)grid == c.heads_kv && arg_i32(a, 4) == c.index_slots, "a grid of %u programs, %d slots",
             grid, (int)arg_i32(a, 4));
      check_sel_index_rows(e, a, &c, 0, arg_i32(a, 3), c.index_slots + 1, "Offsets");
      check_sel_index_rows(e, a, &c, 1, arg_i32(a, 3), c.index_slots, "Cursors");
      check_sel_index_rows(e, a, &c, 2, arg_i32(a, 3), c.index_slots, "Chunks");
      return;
    }
    case AOTK__FAMILY_SEL_CHECK_INDICES: {
      EXPECT(strcmp(e->param_kinds, "pp" "pp" "p" "lili" "iiiiiiii") == 0,
             "the parameters are \"%s\": fuzz_api.c's model is out of date", e->param_kinds);
      enum { IDX, CNT, CU_Q, CU_K, RESULT, IS, SIZES = 9, HEADS_KV = 13, BLOCK_SIZE, NUM_SLOTS, FLAGS };
      const int32_t flags = arg_i32(a, FLAGS);
      check_sel_common(e, a, &c, p, CU_Q, CU_K, SIZES, flags);
      EXPECT(arg_i32(a, HEADS_KV) == c.heads_kv && arg_i32(a, BLOCK_SIZE) == c.block_size &&
                 arg_i32(a, NUM_SLOTS) == c.slots && (int64_t)grid == c.total_q * c.heads_kv,
             "heads_kv, block_size, num_slots = %d, %d, %d, a grid of %u", (int)arg_i32(a, HEADS_KV),
             (int)arg_i32(a, BLOCK_SIZE), (int)arg_i32(a, NUM_SLOTS), grid);
      check_sel_index(e, a, &c, p, IDX, CNT, IS, flags);
      const axis axes[] = {{0, 1, 1}};
      check_workspace_part(e, arg_pointer(a, RESULT), axes, 1, 8, "Result");
      return;
    }
  }
  /* count, scatter and order: BlockIdx, BlockCnt, the cu_seqlens, two workspace pointers, block_idx's and
   * block_cnt's strides, then their own. */
  const bool count = e->family == AOTK__FAMILY_SEL_INDEX_COUNT, order = e->family == AOTK__FAMILY_SEL_INDEX_ORDER;
  const char *kinds = count ? "pp" "pp" "p" "lili" "i" "iiiiiiiii"
                      : order ? "pp" "pp" "pp" "lili" "il" "iiiiiii"
                              : "pp" "pp" "pp" "lili" "il" "iiiiiiiii";
  EXPECT(strcmp(e->param_kinds, kinds) == 0, "the parameters are \"%s\": fuzz_api.c's model is out of date",
         e->param_kinds);
  enum { IDX, CNT, CU_Q, CU_K, FIRST, SECOND };
  const int IS = count ? 5 : 6, STRIDE_OFFSETS = count ? 9 : 10, SIZES = count ? 10 : 12;
  const int BLOCK_SIZE = SIZES + 4, NUM_SLOTS = SIZES + 5;
  const int FLAGS = count ? 18 : order ? 18 : 20;
  const int32_t flags = arg_i32(a, FLAGS);
  check_sel_common(e, a, &c, p, CU_Q, CU_K, SIZES, flags);
  EXPECT(arg_i32(a, BLOCK_SIZE) == c.block_size && arg_i32(a, NUM_SLOTS) == c.slots,
         "block_size, num_slots = %d, %d for the caller's %lld, %lld", (int)arg_i32(a, BLOCK_SIZE),
         (int)arg_i32(a, NUM_SLOTS), (long long)c.block_size, (long long)c.slots);
  if (order) {
    EXPECT((int64_t)grid == c.heads_kv * c.index_slots, "a grid of %u programs for %lld kv heads x %lld blocks",
           grid, (long long)c.heads_kv, (long long)c.index_slots);
  } else {
    const int64_t num_chunks = arg_i32(a, SIZES + 6);
    EXPECT(num_chunks == ceil_div(c.total_q * c.slots, e->block_m) && (int64_t)grid == c.heads_kv * num_chunks,
           "a grid of %u programs, %lld chunks of %d entries for %lld kv heads x %lld entries", grid,
           (long long)num_chunks, (int)e->block_m, (long long)c.heads_kv, (long long)(c.total_q * c.slots));
  }
  check_sel_index(e, a, &c, p, IDX, CNT, IS, flags);
  const int64_t stride_offsets = arg_i32(a, STRIDE_OFFSETS);
  if (count) {
    check_sel_index_rows(e, a, &c, FIRST, stride_offsets, c.index_slots + 1, "Offsets");
    return;
  }
  check_sel_index_rows(e, a, &c, FIRST, stride_offsets, order ? c.index_slots + 1 : c.index_slots,
                       order ? "Offsets" : "Cursors");
  check_sel_tokens(e, a, &c, SECOND, arg_i64(a, STRIDE_OFFSETS + 1));
}

/* The full reach of a launch: every family's kernel is modelled (above). */
static void check_launch_extent(const aotk__kernel_entry *e, unsigned grid, void **params) {
  switch (e->family) {
    case AOTK__FAMILY_ATTN_DECODE:
    case AOTK__FAMILY_ATTN_DECODE_PAGED:
    case AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS:
      check_decode_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_MERGE:
      check_merge_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_CACHE_APPEND:
      check_append_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_FWD:
    case AOTK__FAMILY_ATTN_FWD_TMA:
    case AOTK__FAMILY_ATTN_FWD_HOPPER:
    case AOTK__FAMILY_ATTN_FWD_HOPPER_WG3:
      check_attn_fwd_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_DROPOUT_MASK:
      check_attn_dropout_mask_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_BWD_PREPROCESS:
      check_attn_preprocess_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_BWD_DKDV:
    case AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER:
    case AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER:
      check_attn_dkdv_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_BWD_DQ:
    case AOTK__FAMILY_ATTN_BWD_DQ_HOPPER:
      check_attn_dq_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_BWD_DQ_CONVERT:
      check_attn_dq_convert_launch(e, grid, params);
      return;
    case AOTK__FAMILY_ATTN_BWD_SINK_REDUCE:
      check_attn_sink_reduce_launch(e, grid, params);
      return;
    case AOTK__FAMILY_SEL_FWD:
    case AOTK__FAMILY_SEL_BWD_DQ:
      check_sel_token_launch(e, grid, params);
      return;
    case AOTK__FAMILY_SEL_BWD_DKDV:
      check_sel_dkdv_launch(e, grid, params);
      return;
    case AOTK__FAMILY_SEL_INDEX_ZERO:
    case AOTK__FAMILY_SEL_INDEX_COUNT:
    case AOTK__FAMILY_SEL_INDEX_SCAN:
    case AOTK__FAMILY_SEL_INDEX_SCATTER:
    case AOTK__FAMILY_SEL_INDEX_ORDER:
    case AOTK__FAMILY_SEL_CHECK_INDICES:
      check_sel_helper_launch(e, grid, params);
      return;
  }
  fprintf(stderr, "fuzz_api: %s (family %d) has no model in fuzz_api.c\n", e->name, (int)e->family);
  abort();
}
#undef EXPECT

/* ---- the fake driver ---------------------------------------------------------------------------- */

#define FAKE_CONTEXT ((CUcontext)(uintptr_t)0xc0de0)
#define FAKE_LIBRARY_BASE ((uintptr_t)0x11b00000u)
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
/* Every stream the fuzzer passes belongs to the current context: the calls it makes are ones the
 * library accepts on this count (test_api_runtime covers a stream of another context). */
static CUresult fake_cuStreamGetCtx(CUstream stream, CUcontext *context) {
  (void)stream;
  return fake_cuCtxGetCurrent(context);
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
/* Which table row an image is. The rows of one .entry differ in their tiles and head dims, which the
 * launches' models need, so the fake tells them apart by the image the library loads: its length and
 * FNV-1a 64 hash, as the table records them (the library checks the same hash before it loads). The
 * images sorted by length. Images equal in both belong to rows that differ only in their dtype (the
 * appending kernel, which copies bits) or in a hint the compiler did not use (sel_fwd's group size, a
 * multiple of 16, at d=64): of those the row that assumes less (unaligned) comes first. */
typedef struct image_key {
  uint32_t bytes;
  uint64_t hash;
  int row;
} image_key;
static image_key *image_keys;
static int image_key_count;

static int compare_image_keys(const void *x, const void *y) {
  const image_key *a = x, *b = y;
  if (a->bytes != b->bytes) return a->bytes < b->bytes ? -1 : 1;
  if (a->hash != b->hash) return a->hash < b->hash ? -1 : 1;
  const int32_t aligned_a = aotk__kernel_table[a->row].aligned, aligned_b = aotk__kernel_table[b->row].aligned;
  return aligned_a != aligned_b ? aligned_a - aligned_b : a->row - b->row;
}

static void index_images(void) {
  image_keys = calloc(2 * (size_t)aotk__kernel_count + 1, sizeof *image_keys);
  if (image_keys == NULL) fail("out of memory");
  for (int row = 0; row < aotk__kernel_count; row++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[row];
    if (e->cubin.raw_bytes > 0) image_keys[image_key_count++] = (image_key){e->cubin.raw_bytes, e->cubin.hash, row};
    if (e->ptx.raw_bytes > 0) image_keys[image_key_count++] = (image_key){e->ptx.raw_bytes, e->ptx.hash, row};
  }
  qsort(image_keys, (size_t)image_key_count, sizeof *image_keys, compare_image_keys);
}

/* The library handle names the row: the hash of the image's first n bytes, walked in order of the rows'
 * lengths, matches at the loaded image's own length (never reading past it, unless the image is no
 * row's: the library checked its hash). */
static CUresult fake_cuLibraryLoadData(CUlibrary *library, const void *code, void *jit_options, void **jit_values,
                                       unsigned num_jit_options, void *library_options, void **library_values,
                                       unsigned num_library_options) {
  (void)jit_options, (void)jit_values, (void)num_jit_options;
  (void)library_options, (void)library_values, (void)num_library_options;
  const unsigned char *bytes = code;
  uint64_t hash = 0xcbf29ce484222325ull;
  size_t hashed = 0;
  for (int i = 0; i < image_key_count; i++) {
    for (; hashed < image_keys[i].bytes; hashed++) hash = (hash ^ bytes[hashed]) * 0x100000001b3ull;
    if (hash == image_keys[i].hash) {
      *library = (CUlibrary)(FAKE_LIBRARY_BASE + 16u * (uintptr_t)image_keys[i].row);
      return CUDA_SUCCESS;
    }
  }
  fail("cuLibraryLoadData of an image that is no table row's");
  return CUDA_ERROR_INVALID_VALUE;
}
/* A kernel handle names the row whose image holds it. */
static CUresult fake_cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name) {
  const uintptr_t handle = (uintptr_t)(void *)library;
  if (handle < FAKE_LIBRARY_BASE || (handle - FAKE_LIBRARY_BASE) % 16u != 0 ||
      (handle - FAKE_LIBRARY_BASE) / 16u >= (uintptr_t)aotk__kernel_count) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int row = (int)((handle - FAKE_LIBRARY_BASE) / 16u);
  if (strcmp(aotk__kernel_table[row].function_name, name) != 0) {
    fprintf(stderr, "fuzz_api: cuLibraryGetKernel(%s) from the image of %s\n", name, aotk__kernel_table[row].name);
    abort();
  }
  *kernel = (CUkernel)(FAKE_KERNEL_BASE + 16u * (uintptr_t)row);
  return CUDA_SUCCESS;
}
static CUresult fake_cuKernelSetAttribute(int attribute, int value, CUkernel kernel, CUdevice device) {
  (void)attribute, (void)value, (void)kernel, (void)device;
  return CUDA_SUCCESS;
}
static CUresult fake_cuLaunchKernel(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                    unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_bytes,
                                    CUstream stream, void **params, void **extra) {
  (void)stream;
  seen.launches++;
  const uintptr_t handle = (uintptr_t)(void *)function;
  if (handle < FAKE_KERNEL_BASE || (handle - FAKE_KERNEL_BASE) % 16u != 0 ||
      (handle - FAKE_KERNEL_BASE) / 16u >= (uintptr_t)aotk__kernel_count) {
    fail("a launch of a handle the driver never gave out");
  }
  if (extra != NULL) fail("a launch with `extra`");
  if (grid_x == 0) fail("a launch of an empty grid");
  const aotk__kernel_entry *e = &aotk__kernel_table[(handle - FAKE_KERNEL_BASE) / 16u];
  /* The models number programs in one dimension, with the row's warps and shared memory. */
  if (grid_y != 1 || grid_z != 1 || block_x != 32u * (unsigned)e->num_warps || block_y != 1 || block_z != 1 ||
      shared_bytes != (unsigned)e->shared_bytes) {
    fprintf(stderr,
            "fuzz_api: %s launched on a grid (%u, %u, %u) of blocks (%u, %u, %u) with %u bytes of shared memory\n",
            e->name, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes);
    abort();
  }
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
 * contiguous). Data types as cuda.h numbers them. What cuTensorMapEncodeTiled refuses (its documented
 * rules: a 16-byte-aligned address, dims 1 .. 2^32, strides multiples of 16 bytes below 2^40, boxes of
 * 1 .. 256 whose inner extent is a multiple of 16 bytes and, swizzled, at most the swizzle's span) the
 * library must not ask for: it would fail a call that validation accepted. The map records which
 * encode it is, for the launch that takes it (check_descriptors). */
static CUresult fake_cuTensorMapEncodeTiled(CUtensorMap *map, int data_type, unsigned rank, void *address,
                                            const uint64_t *dims, const uint64_t *strides_bytes,
                                            const unsigned *box, const unsigned *element_strides, int interleave,
                                            int swizzle, int l2_promotion, int oob_fill) {
  (void)l2_promotion, (void)oob_fill;
  static const unsigned element_bytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  static const unsigned swizzle_bytes[] = {0, 32, 64, 128};
  seen.encodes++;
  if (data_type < 0 || data_type >= (int)(sizeof element_bytes / sizeof element_bytes[0]) || rank < 1 || rank > 5) {
    fail("a TMA descriptor of an unknown data type or rank");
  }
  const unsigned element = element_bytes[data_type];
  if ((uintptr_t)address % 16 != 0 || interleave != 0 || swizzle < 0 || swizzle > 3) {
    fail("a TMA descriptor of a misaligned address, or an interleave or swizzle TMA has not");
  }
  unsigned __int128 reach = (unsigned __int128)dims[0] * element;
  for (unsigned d = 0; d < rank; d++) {
    if (dims[d] == 0 || dims[d] > (uint64_t)1 << 32 || box[d] == 0 || box[d] > 256 || element_strides[d] == 0 ||
        element_strides[d] > 8) {
      fail("a TMA descriptor with a dimension, box or element stride that TMA refuses");
    }
    if (d == 0) continue;
    if (strides_bytes[d - 1] % 16 != 0 || strides_bytes[d - 1] >= (uint64_t)1 << 40) {
      fail("a TMA descriptor with a stride that TMA refuses (a multiple of 16 bytes below 2^40)");
    }
    reach += (unsigned __int128)(dims[d] - 1) * strides_bytes[d - 1];
  }
  if (box[0] * element % 16 != 0 || (swizzle > 0 && box[0] * element > swizzle_bytes[swizzle])) {
    fail("a TMA descriptor whose box's inner extent TMA refuses");
  }
  check_reach((uintptr_t)address, reach, "a TMA descriptor");
  if (seen.map_count == (int)(sizeof seen.maps / sizeof seen.maps[0])) fail("more TMA descriptors than one call needs");
  struct encoded_map *m = &seen.maps[seen.map_count];
  memset(m, 0, sizeof *m);
  m->address = (uintptr_t)address;
  m->element_bytes = element;
  m->rank = rank;
  m->swizzle = (unsigned)swizzle;
  for (unsigned d = 0; d < rank; d++) {
    m->dims[d] = dims[d];
    m->box[d] = box[d];
    if (d > 0) m->strides_bytes[d - 1] = strides_bytes[d - 1];
  }
  memset(map, 0, sizeof *map);
  map->opaque[0] = FAKE_MAP_MAGIC;
  map->opaque[1] = (uint64_t)seen.map_count++;
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
  index_images();
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
    /* What the library reads: the caller's first struct_size bytes, the rest AOTK_ATTN_PARAMS_INIT's (a
     * 0.1 caller's struct ends before cu_seqlens_q). Only those bytes describe memory. */
    aotk_attn_params view = AOTK_ATTN_PARAMS_INIT;
    memcpy(&view, &p, p.struct_size < sizeof view ? p.struct_size : sizeof view);
    attn_spans(&view);
    seen.attn = &view;
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
    sel_spans(&p); /* the library reads sizeof(aotk_sel_params) bytes, refusing a smaller struct_size */
    seen.sel = &p;
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
