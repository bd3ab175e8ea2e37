/*
 * The merge of partial attentions (aotk_attn_merge, aotk_merge_query) on the GPU, against the float64
 * attention over all of a row's keys (include/aotk.h's "Merging partial attentions"; the merge inside
 * split-KV decoding is tested with decoding, tests/test_decode_gpu.c). Exits 77 (skipped) on a machine
 * with no GPU.
 *
 * Merging, 17 cases (merge_rows below): 1, 2, 5, 17, 40, 70 and 133 partials (the three kernels: one
 * partial a step below 4 partials, 32 a step from 4, 128 from 64, with a partly filled last step: 40, 70
 * and 133 partials); partials fp32, fp16 and bf16 merged into
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
 * And a merge with head_dim 12, refused with nothing written.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotk.h"
#include "aotk_check.h"
#include "aotk_decode_reference.h"
#include "aotk_half.h"
#include "aotk_random.h"
#include "aotk_test_harness.h"
#include "aotk_gpu_test.h"
#include "aotk_gpu_buffers.h"

/* Partials a merge case describes to the reference at most. */
enum { MAX_PARTIALS = 160 };

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
    {BF16, BF16, 70, 1, 2, 9, 64, 300, MERGE_IN_PLACE, 1, 1},
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
  RUN_TEST(test_merge_refusal);
  static merge_case merge_cases[sizeof merge_rows / sizeof merge_rows[0]];
  for (size_t i = 0; i < sizeof merge_rows / sizeof merge_rows[0]; i++) {
    make_merge_case(&merge_cases[i], &merge_rows[i], (int)i);
    aotk_test_run_with(merge_cases[i].name, run_merge_case, &merge_cases[i]);
  }
  print_worst_fractions();
  driver->cuStreamDestroy(stream);
  return aotk_test_finish();
}
