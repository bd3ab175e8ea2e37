/*
 * tests/fuzz_api.c's ground: decoding the input (reader), the fake address space of the spans a caller
 * described (each tensor's bytes, the workspace) and the checks that a pointer or a byte range lies in one,
 * and the primitives every kernel's reach model uses (boxes of offsets over axes, rows, the packed
 * arguments, aligned pointers, workspace parts, TMA descriptors). Static functions for the one file of
 * the fuzz target; the kernels' models are fuzz_reach_decode.h, fuzz_reach_attn.h and fuzz_reach_sel.h.
 */
#ifndef FUZZ_REACH_H
#define FUZZ_REACH_H

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
  int decode_fused_append;              /* the decoding kernel appended (FLAG_FUSED_APPEND) */
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
  DECODE_FUSED_APPEND = 32768,
  DECODE_LEFTPAD = 65536,
};

/* The table row a query announced: its name on its target (names repeat across targets). */
static const aotk__kernel_entry *announced_row(const aotk_kernel_info *info) {
  for (int row = 0; row < aotk__kernel_count; row++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[row];
    if (e->arch == info->arch && strcmp(e->name, info->kernel_name) == 0) return e;
  }
  return NULL;
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

#endif /* FUZZ_REACH_H */
