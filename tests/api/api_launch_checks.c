/* The launch checks of the API tests: see api_launch_checks.h. */
#include <math.h>

#include "api_launch_checks.h"
static void check_strides(const char *what, const char *kernel, const recorded_launch *launch, int base,
                          const aotk_tensor *t, const char *name) {
  /* The kernels take 4-d views: a varlen tensor [total, heads, d] is [1, total, heads, d] with batch
   * stride 0 (each sequence's start comes from cu_seqlens). */
  const bool varlen = t->rank == 3;
  const int64_t expected[3] = {varlen ? 0 : t->strides[0], t->strides[varlen ? 0 : 1], t->strides[varlen ? 1 : 2]};
  CHECK_MSG(arg_i64(launch, base) == expected[0] && arg_i32(launch, base + 1) == expected[1] &&
                arg_i32(launch, base + 2) == expected[2],
            "%s: %s packs %s's strides as (%lld, %d, %d), expected (%lld, %lld, %lld)", what, kernel, name,
            (long long)arg_i64(launch, base), arg_i32(launch, base + 1), arg_i32(launch, base + 2),
            (long long)expected[0], (long long)expected[1], (long long)expected[2]);
}

void check_pointer(const char *what, const char *kernel, const recorded_launch *launch, int index,
                   const void *expected, const char *name) {
  CHECK_MSG(arg_pointer(launch, index) == (uint64_t)(uintptr_t)expected, "%s: %s's %s is %#llx, expected %p", what,
            kernel, name, (unsigned long long)arg_pointer(launch, index), expected);
}

void check_float(const char *what, const char *kernel, const recorded_launch *launch, int index,
                 double expected, const char *name) {
  float value = arg_f32(launch, index);
  CHECK_MSG(fabs(value - expected) <= 1e-6 * fabs(expected), "%s: %s's %s is %.9g, expected %.9g", what, kernel, name,
            value, expected);
}

void check_int(const char *what, const char *kernel, const recorded_launch *launch, int index,
               int64_t expected, const char *name) {
  CHECK_MSG(arg_i32(launch, index) == expected, "%s: %s's %s is %d, expected %lld", what, kernel, name,
            arg_i32(launch, index), (long long)expected);
}

static feature_expectation expect_features(const aotk_attn_params *params, int64_t head_dim_qk) {
  feature_expectation e;
  memset(&e, 0, sizeof e);
  const bool causal = params->causal == 1;
  const float p = params->dropout_p;
  e.varlen = params->cu_seqlens_q.data != NULL;
  e.window_left = params->window_left;
  e.window_right = causal ? 0 : params->window_right;
  /* Sinks need no EXTRAS kernel (only the forward's epilogue and the backward's pre-pass see them). */
  e.extras = params->softcap > 0.0f || params->alibi_slopes.data != NULL || p > 0.0f;
  e.flags = (params->lse.data != NULL ? FLAG_WRITE_LSE : 0) | (e.varlen ? FLAG_VARLEN : 0) |
            (params->causal_align == AOTK_ALIGN_TOP_LEFT ? FLAG_TOP_LEFT : 0) |
            (params->softcap > 0.0f ? FLAG_SOFTCAP : 0) | (params->alibi_slopes.data != NULL ? FLAG_ALIBI : 0) |
            (params->sinks.data != NULL ? FLAG_SINKS : 0) | (p > 0.0f ? FLAG_DROPOUT : 0) |
            /* causal-like work (a right bound, no left one) grows with the query block: last blocks first */
            (e.window_right >= 0 && e.window_left < 0 ? FLAG_REVERSE : 0);
  e.features = (e.varlen ? AOTK_FEATURE_VARLEN : 0) | (causal ? AOTK_FEATURE_CAUSAL : 0) |
               (e.window_left >= 0 || (!causal && e.window_right >= 0) ? AOTK_FEATURE_WINDOW : 0) |
               (params->softcap > 0.0f ? AOTK_FEATURE_SOFTCAP : 0) |
               (params->alibi_slopes.data != NULL ? AOTK_FEATURE_ALIBI : 0) |
               (params->sinks.data != NULL ? AOTK_FEATURE_SINKS : 0) | (p > 0.0f ? AOTK_FEATURE_DROPOUT : 0);
  e.scale = params->softmax_scale != 0.0f ? params->softmax_scale : 1.0 / sqrt((double)head_dim_qk);
  e.qk_scale_log2 = e.scale / log(2.0);
  e.softcap_scale = params->softcap > 0.0f ? e.scale / params->softcap : 0.0;
  e.softcap_log2 = params->softcap / log(2.0);
  /* An element is kept when its random byte is >= t = round(256 p), at most 255, and kept weights are scaled
   * by 256 / (256 - t) (include/aotk.h). */
  const double t = fmin(floor((double)p * 256.0 + 0.5), 255.0);
  e.dropout_threshold = p > 0.0f ? (uint32_t)t : 0u;
  e.dropout_scale = p > 0.0f ? 256.0 / (256.0 - t) : 1.0;
  e.rng_state = p > 0.0f ? params->rng_state.data : NULL;
  e.alibi_batch_stride = params->alibi_slopes.data != NULL && params->alibi_slopes.rank == 2
                             ? params->alibi_slopes.strides[0]
                             : 0;
  return e;
}

/* The padded head dims a query reports, and the feature bits that come from them and from the kernel. */
static uint32_t expected_info_features(const feature_expectation *e, const problem *p, const aotk_kernel_info *info) {
  return e->features | (info->head_dim_qk > p->head_dim || info->head_dim_v > dim_v(p) ? AOTK_FEATURE_PADDED_HEAD_DIM : 0) |
         (e->extras ? AOTK_FEATURE_EXTRAS_KERNEL : 0);
}

/* A launch's `count` descriptors (the kernel's 't' arguments from slot first_slot on), against the encodes
 * logged from fake.encodes[first]: for each tensor in turn, the encode of the tensor's view [batch, seqlen, heads * d] (dims innermost
 * first, byte strides of a token and a batch, the row's box reversed and its swizzle, 2-byte elements of
 * the tensor's dtype, no interleave, element strides 1, 128-byte L2 promotion, no NaN fill), and in the
 * launch that encode's map with the view's shape and element strides, outermost first. A single batch's
 * stride is unused: the view gives it the span of the sequence (a valid stride, whatever the caller's). */
static void check_descriptors(const char *what, const recorded_launch *launch, const aotk__kernel_entry *row,
                              int first, int count, int total, const aotk_tensor *const *tensors,
                              const char *const *names, const int32_t *tile_rows_of, int first_slot) {
  /* Encodes first .. first + count - 1 of the call's `total` are this launch's. */
  CHECK_MSG(fake.encode_count == total && first + count <= total && total <= ENCODE_LOG_SIZE,
            "%s: %d tensor maps encoded, expected %d", what, fake.encode_count, total);
  CHECK_MSG(launch->maps_recorded == count, "%s: %d maps in the launch", what, launch->maps_recorded);
  CHECK_MSG(row->descriptor_count == count, "%s: %s records %d descriptors", what, row->name, row->descriptor_count);
  if (fake.encode_count != total || first + count > total || total > ENCODE_LOG_SIZE || row->descriptor_count != count) {
    return;
  }
  for (int d = 0; d < count; d++) {
    const aotk_tensor view = as_4d(tensors[d]), *t = &view; /* varlen: [1, total, heads, d] */
    const encode_call *c = &fake.encodes[first + d];
    const aotk__tma_layout *layout = &row->descriptors[d];
    const int64_t row_elements = t->shape[2] * t->shape[3];
    const int64_t batch_stride = t->shape[0] == 1 ? t->shape[1] * t->strides[1] : t->strides[0];
    const int data_type = t->dtype == AOTK_DTYPE_BFLOAT16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                          : t->dtype == AOTK_DTYPE_FLOAT32  ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                                            : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const int64_t element_bytes = t->dtype == AOTK_DTYPE_FLOAT32 ? 4 : 2;
    /* The box is the tile's rows of one batch (its width is the compiler's, checked by test_images). */
    const int32_t tile_rows = tile_rows_of[d];
    CHECK_MSG(c->address == t->data && c->rank == TMA_RANK && c->data_type == data_type,
              "%s: encode %d is of %p, rank %u, type %d; expected %s at %p, rank 3, type %d", what, d, c->address,
              c->rank, c->data_type, names[d], t->data, data_type);
    CHECK_MSG(c->dims[0] == (uint64_t)row_elements && c->dims[1] == (uint64_t)t->shape[1] &&
                  c->dims[2] == (uint64_t)t->shape[0],
              "%s: %s's map has dims {%llu, %llu, %llu}, expected {%lld, %lld, %lld}", what, names[d],
              (unsigned long long)c->dims[0], (unsigned long long)c->dims[1], (unsigned long long)c->dims[2],
              (long long)row_elements, (long long)t->shape[1], (long long)t->shape[0]);
    CHECK_MSG(c->strides_bytes[0] == (uint64_t)(element_bytes * t->strides[1]) &&
                  c->strides_bytes[1] == (uint64_t)(element_bytes * batch_stride),
              "%s: %s's map has byte strides {%llu, %llu}, expected {%lld, %lld}", what, names[d],
              (unsigned long long)c->strides_bytes[0], (unsigned long long)c->strides_bytes[1],
              (long long)(element_bytes * t->strides[1]), (long long)(element_bytes * batch_stride));
    CHECK_MSG(c->box[0] == (unsigned)layout->box[2] && c->box[1] == (unsigned)layout->box[1] &&
                  c->box[2] == (unsigned)layout->box[0] && c->box[1] == (unsigned)tile_rows && c->box[2] == 1,
              "%s: %s's box {%u, %u, %u}, the row's (innermost first) {%d, %d, %d}, %d tile rows", what, names[d],
              c->box[0], c->box[1], c->box[2], layout->box[2], layout->box[1], layout->box[0], tile_rows);
    CHECK_MSG(c->element_strides[0] == 1 && c->element_strides[1] == 1 && c->element_strides[2] == 1,
              "%s: %s's element strides {%u, %u, %u}", what, names[d], c->element_strides[0], c->element_strides[1],
              c->element_strides[2]);
    CHECK_MSG(c->swizzle == layout->swizzle && c->interleave == CU_TENSOR_MAP_INTERLEAVE_NONE &&
                  c->l2_promotion == CU_TENSOR_MAP_L2_PROMOTION_L2_128B &&
                  c->oob_fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
              "%s: %s's swizzle %d (the row's %d), interleave %d, L2 promotion %d, OOB fill %d", what, names[d],
              c->swizzle, layout->swizzle, c->interleave, c->l2_promotion, c->oob_fill);

    const int base = first_slot + d * TMA_DESC_SLOTS;
    bool map_matches = true;
    for (int word = 0; word < AOTK__CU_TENSOR_MAP_NUM_QWORDS; word++) {
      uint64_t value;
      memcpy(&value, launch->maps[d] + 8 * word, sizeof value);
      map_matches = map_matches && value == fake_map_word(t->data, word);
    }
    CHECK_MSG(map_matches, "%s: descriptor %d's map is not the one encoded for %s", what, d, names[d]);
    CHECK_MSG(arg_i32(launch, base + TMA_SLOT_SHAPE) == t->shape[0] &&
                  arg_i32(launch, base + TMA_SLOT_SHAPE + 1) == t->shape[1] &&
                  arg_i32(launch, base + TMA_SLOT_SHAPE + 2) == row_elements,
              "%s: %s's descriptor shape (%d, %d, %d), expected (%lld, %lld, %lld)", what, names[d],
              arg_i32(launch, base + TMA_SLOT_SHAPE), arg_i32(launch, base + TMA_SLOT_SHAPE + 1),
              arg_i32(launch, base + TMA_SLOT_SHAPE + 2), (long long)t->shape[0], (long long)t->shape[1],
              (long long)row_elements);
    CHECK_MSG(arg_i64(launch, base + TMA_SLOT_STRIDES) == batch_stride &&
                  arg_i64(launch, base + TMA_SLOT_STRIDES + 1) == t->strides[1] &&
                  arg_i64(launch, base + TMA_SLOT_STRIDES + 2) == 1,
              "%s: %s's descriptor strides (%lld, %lld, %lld), expected (%lld, %lld, 1)", what, names[d],
              (long long)arg_i64(launch, base + TMA_SLOT_STRIDES),
              (long long)arg_i64(launch, base + TMA_SLOT_STRIDES + 1),
              (long long)arg_i64(launch, base + TMA_SLOT_STRIDES + 2), (long long)batch_stride,
              (long long)t->strides[1]);
  }
}

/* The forward's three (Q, K, V), after its pointer kernel's arguments: boxes of the tile's query rows
 * (or for the warp-specialized kernels one consumer warpgroup's 64) and of its key block; the
 * warp-specialized kernels' fourth, O's in 64-row boxes, over out where TMA can write it (FLAG_O_TMA), else
 * over v (unused). */
static void check_tma_descriptors(const char *what, const recorded_launch *launch, const aotk_attn_params *params,
                                  const aotk__kernel_entry *row, int first) {
  const bool hopper = family_is_hopper_fwd(row->family), o_tma = tma_readable(&params->out);
  const char *const names[TMA_DESCRIPTORS + 1] = {"q", "k", "v", o_tma ? "out" : "v (as out)"};
  const aotk_tensor *tensors[TMA_DESCRIPTORS + 1] = {&params->q, &params->k, &params->v,
                                                     o_tma ? &params->out : &params->v};
  const int32_t q_rows = hopper ? 64 : row->block_m;
  const int32_t tile_rows[TMA_DESCRIPTORS + 1] = {q_rows, row->block_n, row->block_n, 64};
  const int count = TMA_DESCRIPTORS + hopper;
  check_descriptors(what, launch, row, first, count, first + count, tensors, names, tile_rows, TMA_ARG_DESC_Q);
}

/* aotk_query(AOTK_OP_ATTN_FWD), then aotk_attn_fwd: the query names the row the tuning rule picks for
 * the padded head dims and the EXTRAS axis, and reports the features; the call launches that row with
 * its grid, block and shared memory, every argument in the catalog's order, and then the dropout-mask
 * kernel when the mask is asked for. Where expect_tma says so, the row is the TMA forward's, whose first
 * arguments are the pointer kernel's and whose descriptors check_tma_descriptors checks. `p` describes
 * the problem (for varlen: p->batch sequences of at most p->seqlen_q / p->seqlen_k rows). */
/* The programs a warp-specialized forward launches for p (kernels/attn_fwd_hopper.py, include/aotk.h),
 * with two consumer warpgroups or three (tiles of row->block_m rows either way): it is persistent,
 * program i taking tiles r * grid + i on even rounds and r * grid + grid - 1 - i on odd ones. One
 * program per SM, fewer if there are fewer tiles; under a causal mask or any window bounded on either
 * side one per tile instead when, with tiles costed as their key blocks plus one, the busiest SM would
 * carry more than 1.08 times the mean, unless there are more than 64 rounds. Computed here tile by tile. */
static int64_t expected_hopper_grid(const aotk_attn_params *params, const problem *p, const aotk__kernel_entry *row) {
  const int64_t sms = FAKE_MULTIPROCESSORS, m_blocks = ceil_div(p->seqlen_q, row->block_m);
  const int64_t tiles = m_blocks * p->batch * p->heads_q;
  const int64_t right = params->causal == 1 ? 0 : params->window_right, left = params->window_left;
  if (tiles <= sms) return tiles;
  if ((left < 0 && right < 0) || tiles > 64 * sms) return sms;
  const int64_t diag = params->causal_align == AOTK_ALIGN_TOP_LEFT ? 0 : p->seqlen_k - p->seqlen_q;
  double load[FAKE_MULTIPROCESSORS] = {0}, total = 0;
  for (int64_t t = 0; t < tiles; t++) {
    const int64_t round = t / sms, slot = t % sms, program = round % 2 == 0 ? slot : sms - 1 - slot;
    /* Causal-like masks (a right bound alone) run the longest first. */
    const int64_t m_block = right >= 0 && left < 0 ? m_blocks - 1 - t % m_blocks : t % m_blocks;
    /* Keys [first, last] that some row of rows [m0, m0 + block_m) sees, in blocks from the first of them,
     * or from the block boundary below it in the rows that keep boundaries (EXTRAS, or blocks shorter
     * than the tile). */
    const int64_t m0 = m_block * row->block_m;
    const int64_t last_row = (m0 + row->block_m < p->seqlen_q ? m0 + row->block_m : p->seqlen_q) - 1;
    int64_t first = left >= 0 ? m0 + diag - left : 0, end = right >= 0 ? last_row + diag + right + 1 : p->seqlen_k;
    first = first < 0 ? 0 : first > p->seqlen_k ? p->seqlen_k : first;
    end = end < 0 ? 0 : end > p->seqlen_k ? p->seqlen_k : end;
    if (row->extras || row->family == AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT || row->block_n < row->block_m - 1) {
      first -= first % row->block_n;
    }
    const int64_t key_blocks = end > first ? ceil_div(end - first, row->block_n) : 0;
    load[program] += (double)(key_blocks < 1 ? 1 : key_blocks) + 1.0;
    total += (double)(key_blocks < 1 ? 1 : key_blocks) + 1.0;
  }
  double busiest = 0;
  for (int64_t i = 0; i < sms; i++) busiest = load[i] > busiest ? load[i] : busiest;
  return busiest > 1.08 * total / (double)sms ? tiles : sms;
}

void check_launch(const char *what, const aotk_attn_params *params, const problem *p) {
  feature_expectation expected = expect_features(params, p->head_dim);
  const bool mask = params->dropout_mask.data != NULL;
  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "%s: aotk_query loaded or launched (%s)", what, called_functions());
  CHECK(info.struct_size == sizeof info);
  CHECK(info.workspace_bytes == 0);
  CHECK_MSG(info.launches == 1 + mask, "%s: launches %d, expected %d", what, info.launches, 1 + mask);
  const int family = expected_fwd_family(params, info.arch, info.from_ptx, fake.max_shared_bytes);
  /* The Gluon forward's dropout form carries dropout alone: not an EXTRAS row. */
  if (family == AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT) expected.extras = false;
  const bool tma = family != AOTK__FAMILY_ATTN_FWD;
  CHECK_MSG(fwd_family_of_name(info.kernel_name) == family, "%s: kernel_name %s, expected a %s kernel", what,
            info.kernel_name, kernel_signatures[fwd_kernel_id(family)].function);
  const aotk__kernel_entry *row = table_row_named(info.kernel_name, info.arch);
  CHECK_MSG(row != NULL, "%s: aotk_query names %s, not a table row", what, info.kernel_name);
  if (row == NULL) return;
  const aotk__kernel_entry *tuned = expected_fwd_row(params, family, info.arch, p->head_dim, dim_v(p), info.aligned,
                                                     expected.extras, p->seqlen_q);
  CHECK_MSG(row == tuned, "%s: aotk_query names %s, expected %s", what, info.kernel_name,
            tuned != NULL ? tuned->name : "(none)");
  CHECK_MSG(row->extras == (int)expected.extras, "%s: %s is%s the EXTRAS variant", what, row->name,
            row->extras ? "" : " not");
  CHECK(info.num_warps == row->num_warps && info.shared_bytes == row->shared_bytes && info.block_m == row->block_m &&
        info.block_n == row->block_n && info.aligned == row->aligned);
  CHECK_MSG(info.head_dim_qk == row->head_dim_qk && info.head_dim_v == row->head_dim_v,
            "%s: aotk_query reports head dims %d/%d, %s has %d/%d", what, info.head_dim_qk, info.head_dim_v, row->name,
            row->head_dim_qk, row->head_dim_v);
  const uint32_t features = expected_info_features(&expected, p, &info) | fwd_family_features(family);
  CHECK_MSG(info.features == features, "%s: features %#x, expected %#x", what, info.features, features);
  int64_t m_blocks = (p->seqlen_q + info.block_m - 1) / info.block_m;
  const int64_t tiles = m_blocks * p->batch * p->heads_q;
  const bool hopper = family_is_hopper_fwd(family);
  int64_t grid = hopper ? expected_hopper_grid(params, p, row) : tiles;
  CHECK_MSG(info.grid == grid, "%s: info.grid %lld, expected %lld", what, (long long)info.grid, (long long)grid);

  int launches_before = fake.launches;
  reset_launch_log();
  CHECK_MSG(fake.calls[CALL_cuTensorMapEncodeTiled] == 0, "%s: aotk_query encoded tensor maps", what);
  status = aotk_attn_fwd(params, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_fwd %s (%s)", what, aotk_status_name(status), aotk_last_error());
  CHECK_MSG(aotk_last_error()[0] == '\0', "%s: a success left the message \"%s\"", what, aotk_last_error());
  CHECK_MSG(fake.launches == launches_before + 1 + mask, "%s: %d launches, expected %d", what,
            fake.launches - launches_before, 1 + mask);
  if (status != AOTK_OK || fake.logged_launches != 1 + mask) return;
  const recorded_launch *launch = &fake.launch_log[0];
  const char *kernel = kernel_signatures[fwd_kernel_id(family)].function;

  CHECK_MSG(launch->kernel == fwd_kernel_id(family), "%s: the first launch is %s, expected %s", what,
            kernel_signatures[launch->kernel].function, kernel);
  if (tma) {
    check_tma_descriptors(what, launch, params, row, 0);
  } else {
    CHECK_MSG(fake.encode_count == 0 && launch->maps_recorded == 0, "%s: the pointer kernel's launch encoded %d maps",
              what, fake.encode_count);
  }
  const struct given_kernel *given = given_kernel_of(launch->function);
  CHECK_MSG(given != NULL, "%s: launched a handle the driver never gave", what);
  /* The handle encodes the .entry name the library asked for: launch->kernel above is it. */
  CHECK_MSG(info.from_ptx ? fake.loaded_ptx > 0 : fake.loaded_elf > 0, "%s: loaded %d ELF and %d PTX images, from_ptx %d",
            what, fake.loaded_elf, fake.loaded_ptx, info.from_ptx);
  CHECK_MSG(launch->grid[0] == (unsigned)grid && launch->grid[1] == 1 && launch->grid[2] == 1,
            "%s: grid (%u, %u, %u), expected (%lld, 1, 1)", what, launch->grid[0], launch->grid[1], launch->grid[2],
            (long long)grid);
  CHECK_MSG(launch->block[0] == 32u * (unsigned)info.num_warps && launch->block[1] == 1 && launch->block[2] == 1,
            "%s: block (%u, %u, %u) for %d warps", what, launch->block[0], launch->block[1], launch->block[2],
            info.num_warps);
  CHECK_MSG(launch->shared_bytes == (unsigned)info.shared_bytes, "%s: %u bytes of shared memory, expected %d", what,
            launch->shared_bytes, info.shared_bytes);
  CHECK(launch->stream == (CUstream)FAKE_STREAM);
  CHECK(launch->extra == NULL);
  if (given != NULL) { /* above 48 KiB of dynamic shared memory the kernel must have opted in */
    const int opt_in = info.shared_bytes > 48 * 1024 ? info.shared_bytes : 0;
    CHECK_MSG(given->shared_opt_in == opt_in, "%s: %s (%d bytes) opted in to %d bytes", what, info.kernel_name,
              info.shared_bytes, given->shared_opt_in);
  }

  const aotk_tensor *q = &params->q, *k = &params->k, *v = &params->v, *out = &params->out, *lse = &params->lse;
  const bool write_lse = lse->data != NULL;
  check_pointer(what, kernel, launch, ARG_Q, q->data, "q");
  check_pointer(what, kernel, launch, ARG_K, k->data, "k");
  check_pointer(what, kernel, launch, ARG_V, v->data, "v");
  check_pointer(what, kernel, launch, ARG_OUT, out->data, "out");
  check_pointer(what, kernel, launch, ARG_LSE, lse->data, "lse");
  check_pointer(what, kernel, launch, ARG_CU_SEQLENS_Q, params->cu_seqlens_q.data, "cu_seqlens_q");
  check_pointer(what, kernel, launch, ARG_CU_SEQLENS_K, params->cu_seqlens_k.data, "cu_seqlens_k");
  check_pointer(what, kernel, launch, ARG_ALIBI_SLOPES, params->alibi_slopes.data, "alibi_slopes");
  check_pointer(what, kernel, launch, ARG_SINKS, params->sinks.data, "sinks");
  check_pointer(what, kernel, launch, ARG_RNG_STATE, expected.rng_state, "rng_state");
  const aotk_tensor *tensors[] = {q, k, v, out};
  static const char *const tensor_names[] = {"q", "k", "v", "out"};
  for (int t = 0; t < 4; t++) check_strides(what, kernel, launch, ARG_STRIDE_QB + 3 * t, tensors[t], tensor_names[t]);
  /* lse: dense [batch, heads_q, seqlen_q]; varlen [heads_q, total_q], no batch stride. */
  const int64_t stride_lb = !write_lse || expected.varlen ? 0 : lse->strides[0];
  const int64_t stride_lh = !write_lse ? 0 : lse->strides[expected.varlen ? 0 : 1];
  CHECK_MSG(arg_i64(launch, ARG_STRIDE_LB) == stride_lb &&
                arg_i32(launch, ARG_STRIDE_LH) == stride_lh,
            "%s: lse strides packed as (%lld, %d), expected (%lld, %lld)", what,
            (long long)arg_i64(launch, ARG_STRIDE_LB), arg_i32(launch, ARG_STRIDE_LH), (long long)stride_lb,
            (long long)stride_lh);
  CHECK_MSG(arg_i64(launch, ARG_STRIDE_AB) == expected.alibi_batch_stride, "%s: stride_ab %lld, expected %lld", what,
            (long long)arg_i64(launch, ARG_STRIDE_AB), (long long)expected.alibi_batch_stride);
  check_int(what, kernel, launch, ARG_SEQLEN_Q, p->seqlen_q, "seqlen_q");
  check_int(what, kernel, launch, ARG_SEQLEN_K, p->seqlen_k, "seqlen_k");
  check_int(what, kernel, launch, ARG_HEADS_Q, p->heads_q, "heads_q");
  check_int(what, kernel, launch, ARG_GROUP_SIZE, p->heads_q / p->heads_kv, "group_size");
  check_int(what, kernel, launch, ARG_NUM_M_BLOCKS, m_blocks, "num_m_blocks");
  check_int(what, kernel, launch, ARG_HEAD_DIM_QK8, p->head_dim / 8, "head_dim_qk8");
  check_int(what, kernel, launch, ARG_HEAD_DIM_V8, dim_v(p) / 8, "head_dim_v8");
  check_int(what, kernel, launch, ARG_WINDOW_LEFT, expected.window_left, "window_left");
  check_int(what, kernel, launch, ARG_WINDOW_RIGHT, expected.window_right, "window_right");
  const int32_t flags = expected.flags | (hopper && tma_readable(out) ? FLAG_O_TMA : 0);
  CHECK_MSG(arg_i32(launch, ARG_FLAGS) == flags, "%s: flags %#x, expected %#x", what,
            (unsigned)arg_i32(launch, ARG_FLAGS), (unsigned)flags);
  check_float(what, kernel, launch, ARG_QK_SCALE_LOG2, expected.qk_scale_log2, "qk_scale_log2");
  check_float(what, kernel, launch, ARG_SOFTCAP_SCALE, expected.softcap_scale, "softcap_scale");
  check_float(what, kernel, launch, ARG_SOFTCAP_LOG2, expected.softcap_log2, "softcap_log2");
  CHECK_MSG((uint32_t)arg_i32(launch, ARG_DROPOUT_THRESHOLD) == expected.dropout_threshold,
            "%s: dropout_threshold %u, expected %u", what, (uint32_t)arg_i32(launch, ARG_DROPOUT_THRESHOLD),
            expected.dropout_threshold);
  check_float(what, kernel, launch, ARG_DROPOUT_SCALE, expected.dropout_scale, "dropout_scale");
  if (hopper) {
    check_int(what, kernel, launch, HOPPER_ARG_NUM_TILES, tiles, "num_tiles");
    CHECK(arg_pointer(launch, HOPPER_ARG_GLOBAL_SCRATCH) == 0 && arg_pointer(launch, HOPPER_ARG_PROFILE_SCRATCH) == 0);
  } else {
    CHECK(arg_pointer(launch, tma ? TMA_ARG_GLOBAL_SCRATCH : ARG_GLOBAL_SCRATCH) == 0);
    CHECK(arg_pointer(launch, tma ? TMA_ARG_PROFILE_SCRATCH : ARG_PROFILE_SCRATCH) == 0);
  }
  if (!mask) return;

  /* The dropout mask, second: over every (row, key) pair of each sequence, with the same RNG. */
  const recorded_launch *mask_launch = &fake.launch_log[1];
  kernel = "attn_dropout_mask";
  const aotk__kernel_entry *mask_row =
      expected_row(AOTK__FAMILY_ATTN_DROPOUT_MASK, info.arch, p->dtype, 0, 0, 0, 0, p->seqlen_q);
  CHECK_MSG(mask_launch->kernel == KERNEL_DROPOUT_MASK, "%s: the second launch is %s", what,
            kernel_signatures[mask_launch->kernel].function);
  CHECK_MSG(mask_row != NULL, "%s: no sm_%d dropout-mask row", what, info.arch);
  if (mask_row == NULL || mask_launch->kernel != KERNEL_DROPOUT_MASK) return;
  const int64_t mask_blocks = ceil_div(p->seqlen_q, mask_row->block_m);
  CHECK_MSG(mask_launch->grid[0] == (unsigned)(mask_blocks * p->batch * p->heads_q) && mask_launch->grid[1] == 1 &&
                mask_launch->block[0] == 32u * (unsigned)mask_row->num_warps &&
                mask_launch->shared_bytes == (unsigned)mask_row->shared_bytes && mask_launch->stream == (CUstream)FAKE_STREAM,
            "%s: the mask kernel's grid %u, block %u, %u bytes", what, mask_launch->grid[0], mask_launch->block[0],
            mask_launch->shared_bytes);
  const aotk_tensor *m = &params->dropout_mask;
  check_pointer(what, kernel, mask_launch, MASK_MASK, m->data, "mask");
  check_pointer(what, kernel, mask_launch, MASK_CU_SEQLENS_Q, params->cu_seqlens_q.data, "cu_seqlens_q");
  check_pointer(what, kernel, mask_launch, MASK_CU_SEQLENS_K, params->cu_seqlens_k.data, "cu_seqlens_k");
  check_pointer(what, kernel, mask_launch, MASK_RNG_STATE, params->rng_state.data, "rng_state");
  CHECK_MSG(arg_i64(mask_launch, MASK_STRIDE_MB) == m->strides[0] && arg_i64(mask_launch, MASK_STRIDE_MH) == m->strides[1] &&
                arg_i64(mask_launch, MASK_STRIDE_MS) == m->strides[2],
            "%s: mask strides (%lld, %lld, %lld)", what, (long long)arg_i64(mask_launch, MASK_STRIDE_MB),
            (long long)arg_i64(mask_launch, MASK_STRIDE_MH), (long long)arg_i64(mask_launch, MASK_STRIDE_MS));
  check_int(what, kernel, mask_launch, MASK_SEQLEN_Q, p->seqlen_q, "seqlen_q");
  check_int(what, kernel, mask_launch, MASK_SEQLEN_K, p->seqlen_k, "seqlen_k");
  check_int(what, kernel, mask_launch, MASK_HEADS_Q, p->heads_q, "heads_q");
  check_int(what, kernel, mask_launch, MASK_NUM_M_BLOCKS, mask_blocks, "num_m_blocks");
  check_int(what, kernel, mask_launch, MASK_FLAGS, expected.flags & FLAG_VARLEN, "flags");
  CHECK_MSG((uint32_t)arg_i32(mask_launch, MASK_DROPOUT_THRESHOLD) == expected.dropout_threshold,
            "%s: the mask's dropout_threshold %u, expected %u", what,
            (uint32_t)arg_i32(mask_launch, MASK_DROPOUT_THRESHOLD), expected.dropout_threshold);
  CHECK(arg_pointer(mask_launch, MASK_GLOBAL_SCRATCH) == 0 && arg_pointer(mask_launch, MASK_PROFILE_SCRATCH) == 0);
}

void expected_bwd_rows_extras(int arch, const problem *p, int aligned, int extras,
                              const aotk__kernel_entry *rows[3]) {
  const int64_t dv = dim_v(p);
  rows[0] = expected_row(AOTK__FAMILY_ATTN_BWD_PREPROCESS, arch, p->dtype, p->head_dim, dv, aligned, 0, p->seqlen_q);
  rows[1] = expected_row(AOTK__FAMILY_ATTN_BWD_DKDV, arch, p->dtype, p->head_dim, dv, aligned, extras, p->seqlen_k);
  rows[2] = expected_row(AOTK__FAMILY_ATTN_BWD_DQ, arch, p->dtype, p->head_dim, dv, aligned, extras, p->seqlen_q);
}

void expected_bwd_rows_of(const aotk_attn_params *params, int arch, bool from_ptx, const problem *p,
                          int aligned, int extras, const aotk__kernel_entry *rows[3]) {
  expected_bwd_rows_extras(arch, p, aligned, extras, rows);
  if (expect_bwd_fused(params, arch, from_ptx, fake.max_shared_bytes)) {
    rows[1] = fused_row(params);
    rows[2] = convert_row(params);
  } else if (expect_bwd_hopper(params, arch, from_ptx, fake.max_shared_bytes)) {
    rows[1] = bwd_hopper_row(params);
    if (expect_bwd_dq_hopper(params, arch, from_ptx, fake.max_shared_bytes)) rows[2] = dq_hopper_row(params);
  }
}

/* The programs each backward kernel launches: preprocess and dQ (or the cast) one per (query block,
 * batch, query head), dK/dV (or the fused pass) one per (key block, batch, kv head). */
static void expected_bwd_grids(const problem *p, const aotk__kernel_entry *const rows[3], int64_t grids[3]) {
  grids[0] = ceil_div(stats_stride(p), rows[0]->block_m) * p->batch * p->heads_q; /* over the padded rows */
  grids[1] = ceil_div(p->seqlen_k, rows[1]->block_n) * p->batch * p->heads_kv;
  grids[2] = ceil_div(p->seqlen_q, rows[2]->block_m) * p->batch * p->heads_q;
}

/* The arguments dK/dV and dQ share: stride_ab, and from head_dim_qk8 on (the indices given). */
static void check_bwd_feature_args(const char *what, const char *kernel, const recorded_launch *launch,
                                   const problem *p, const feature_expectation *expected, int stride_ab,
                                   int head_dim_qk8) {
  CHECK_MSG(arg_i64(launch, stride_ab) == expected->alibi_batch_stride, "%s: %s's stride_ab %lld, expected %lld", what,
            kernel, (long long)arg_i64(launch, stride_ab), (long long)expected->alibi_batch_stride);
  check_int(what, kernel, launch, head_dim_qk8, p->head_dim / 8, "head_dim_qk8");
  check_int(what, kernel, launch, head_dim_qk8 + 1, dim_v(p) / 8, "head_dim_v8");
  check_int(what, kernel, launch, head_dim_qk8 + 2, expected->window_left, "window_left");
  check_int(what, kernel, launch, head_dim_qk8 + 3, expected->window_right, "window_right");
  CHECK_MSG(arg_i32(launch, head_dim_qk8 + 4) == expected->flags, "%s: %s's flags %#x, expected %#x", what, kernel,
            (unsigned)arg_i32(launch, head_dim_qk8 + 4), (unsigned)expected->flags);
  check_float(what, kernel, launch, head_dim_qk8 + 5, expected->scale, "softmax_scale");
  check_float(what, kernel, launch, head_dim_qk8 + 6, expected->qk_scale_log2, "qk_scale_log2");
  check_float(what, kernel, launch, head_dim_qk8 + 7, expected->softcap_scale, "softcap_scale");
  check_float(what, kernel, launch, head_dim_qk8 + 8, expected->softcap_log2, "softcap_log2");
  CHECK_MSG((uint32_t)arg_i32(launch, head_dim_qk8 + 9) == expected->dropout_threshold,
            "%s: %s's dropout_threshold %u, expected %u", what, kernel, (uint32_t)arg_i32(launch, head_dim_qk8 + 9),
            expected->dropout_threshold);
  check_float(what, kernel, launch, head_dim_qk8 + 10, expected->dropout_scale, "dropout_scale");
}

void check_bwd_launch(const char *what, const aotk_attn_params *params, const problem *p) {
  const feature_expectation expected = expect_features(params, p->head_dim);
  const bool dsinks = params->dsinks.data != NULL;
  const int launches = 3 + dsinks;
  aotk_kernel_info info;
  poison_info(&info);
  reset_calls();
  aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
            "%s: aotk_query loaded or launched (%s)", what, called_functions());
  const aotk__kernel_entry *rows[4];
  expected_bwd_rows_of(params, info.arch, info.from_ptx, p, info.aligned, expected.extras, rows);
  const bool fused = expect_bwd_fused(params, info.arch, info.from_ptx, fake.max_shared_bytes);
  /* The dK/dV pass is a Gluon kernel (four descriptors, five for the fused pass). */
  const bool hopper = fused || expect_bwd_hopper(params, info.arch, info.from_ptx, fake.max_shared_bytes);
  /* ... and beside it in its deterministic form, at d = 256, the Gluon dQ pass (four more descriptors). */
  const bool dq_hopper = expect_bwd_dq_hopper(params, info.arch, info.from_ptx, fake.max_shared_bytes);
  rows[3] = expected_row(AOTK__FAMILY_ATTN_BWD_SINK_REDUCE, info.arch, p->dtype, 0, 0, 0, 0, p->seqlen_q);
  CHECK_MSG(rows[0] != NULL && rows[1] != NULL && rows[2] != NULL && rows[3] != NULL,
            "%s: a backward family has no sm_%d row", what, info.arch);
  if (rows[0] == NULL || rows[1] == NULL || rows[2] == NULL || rows[3] == NULL) return;
  int64_t grids[4];
  expected_bwd_grids(p, rows, grids);
  grids[3] = p->heads_q;
  const size_t statistics_bytes = bwd_workspace_bytes_for(p, dsinks);
  const size_t workspace_bytes = fused ? bwd_fused_workspace_bytes_for(p, dsinks) : statistics_bytes;
  const void *accumulator = byte_offset(FAKE_WORKSPACE, bwd_accumulator_offset(p, dsinks));
  const char *name_prefix = fused ? "attn_bwd_fused_hopper_" : "attn_bwd_dkdv_";
  CHECK(info.struct_size == sizeof info);
  CHECK_MSG(strncmp(info.kernel_name, name_prefix, strlen(name_prefix)) == 0 &&
                strcmp(info.kernel_name, rows[1]->name) == 0,
            "%s: aotk_query names %s, expected %s", what, info.kernel_name, rows[1]->name);
  CHECK_MSG(info.launches == launches, "%s: launches %d, expected %d", what, info.launches, launches);
  CHECK_MSG(info.workspace_bytes == workspace_bytes,
            "%s: workspace_bytes %zu, expected 8 * %lld * %lld * round_up(%lld, 128)%s%s = %zu", what,
            info.workspace_bytes, (long long)p->batch, (long long)p->heads_q, (long long)p->seqlen_q,
            dsinks ? " + the sink partials" : "", fused ? ", rounded up to 256, + the dQ accumulator" : "",
            workspace_bytes);
  CHECK(info.num_warps == rows[1]->num_warps && info.shared_bytes == rows[1]->shared_bytes &&
        info.block_m == rows[1]->block_m && info.block_n == rows[1]->block_n && info.aligned == rows[1]->aligned);
  CHECK_MSG(info.grid == grids[1], "%s: info.grid %lld, expected %lld", what, (long long)info.grid,
            (long long)grids[1]);
  CHECK_MSG(info.head_dim_qk == rows[1]->head_dim_qk && info.head_dim_v == rows[1]->head_dim_v,
            "%s: aotk_query reports head dims %d/%d, %s has %d/%d", what, info.head_dim_qk, info.head_dim_v,
            rows[1]->name, rows[1]->head_dim_qk, rows[1]->head_dim_v);
  /* The dropout forms are not EXTRAS rows (the Triton dQ pass beside the deterministic one is). */
  const bool dropout_form = rows[1]->family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER_DROPOUT ||
                            rows[1]->family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER_DROPOUT;
  feature_expectation reported = expected;
  if (dropout_form) reported.extras = false;
  const uint32_t features = expected_info_features(&reported, p, &info) |
                            (hopper ? AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED : 0) |
                            (fused ? AOTK_FEATURE_NONDETERMINISTIC : 0);
  CHECK_MSG(info.features == features, "%s: features %#x, expected %#x", what, info.features, features);
  CHECK_MSG(fake.calls[CALL_cuTensorMapEncodeTiled] == 0 && fake.calls[CALL_cuMemsetD32Async] == 0,
            "%s: aotk_query encoded tensor maps or cleared memory (%s)", what, called_functions());

  reset_launch_log();
  int launches_before = fake.launches;
  if (fused) {
    /* What the deterministic plan needs is not enough: refused once the plan is known, before anything
     * is loaded, encoded, cleared or launched. */
    reset_calls();
    status = aotk_attn_bwd(params, FAKE_WORKSPACE, statistics_bytes, FAKE_STREAM);
    CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL && message_mentions("workspace"),
              "%s: the statistics' %zu bytes alone: %s (%s)", what, statistics_bytes, aotk_status_name(status),
              aotk_last_error());
    CHECK_MSG(fake.calls[CALL_cuLibraryLoadData] == 0 && fake.calls[CALL_cuTensorMapEncodeTiled] == 0 &&
                  fake.calls[CALL_cuMemsetD32Async] == 0 && fake.calls[CALL_cuLaunchKernel] == 0,
              "%s: the statistics' bytes alone reached %s", what, called_functions());
  }
  reset_calls();
  status = aotk_attn_bwd(params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_bwd %s (%s)", what, aotk_status_name(status), aotk_last_error());
  CHECK_MSG(aotk_last_error()[0] == '\0', "%s: a success left the message \"%s\"", what, aotk_last_error());
  CHECK_MSG(fake.launches == launches_before + launches && fake.logged_launches == launches,
            "%s: %d launches, expected %d", what, fake.launches - launches_before, launches);
  /* The accumulator is cleared once, on the caller's stream, before any launch: before the fused pass
   * adds into it, and before the pre-pass too, since only a failing launch may leave earlier work
   * enqueued (include/aotk.h, aotk_attn_bwd). No other plan clears anything. */
  CHECK_MSG(fake.calls[CALL_cuMemsetD32Async] == (fused ? 1 : 0) && fake.memsets == (fused ? 1 : 0),
            "%s: %d cuMemsetD32Async calls, expected %d", what, fake.calls[CALL_cuMemsetD32Async], fused ? 1 : 0);
  if (fused && fake.memsets == 1) {
    CHECK_MSG(fake.memset_destination == (CUdeviceptr)(uintptr_t)accumulator && fake.memset_value == 0 &&
                  fake.memset_count == bwd_accumulator_elements(p) && fake.memset_stream == (CUstream)FAKE_STREAM,
              "%s: cleared %zu words of %#llx to %u on stream %p; expected %zu words of %p (the workspace + %zu) to 0 "
              "on the caller's",
              what, fake.memset_count, (unsigned long long)fake.memset_destination, fake.memset_value,
              (void *)fake.memset_stream, bwd_accumulator_elements(p), accumulator, bwd_accumulator_offset(p, dsinks));
    CHECK_MSG(fake.memset_after_launches == 0, "%s: the accumulator cleared after %d launches", what,
              fake.memset_after_launches);
  }
  if (status != AOTK_OK || fake.logged_launches != launches) return;

  /* The Gluon dK/dV pass takes attn_bwd_dkdv's arguments in the same slots, then four descriptors; the
   * fused pass five. */
  const int descriptors = fused ? FUSED_DESCRIPTORS : hopper ? 4 : 0;
  const int order[4] = {KERNEL_BWD_PREPROCESS,
                        fused && dropout_form ? KERNEL_BWD_FUSED_HOPPER_DROPOUT
                        : fused               ? KERNEL_BWD_FUSED_HOPPER
                        : dropout_form        ? KERNEL_BWD_DKDV_HOPPER_DROPOUT
                        : hopper              ? KERNEL_BWD_DKDV_HOPPER
                                              : KERNEL_BWD_DKDV,
                        fused       ? KERNEL_BWD_DQ_CONVERT
                        : dq_hopper ? KERNEL_BWD_DQ_HOPPER
                                    : KERNEL_BWD_DQ,
                        KERNEL_BWD_SINK_REDUCE};
  const int dq_descriptors = dq_hopper ? DQ_HOPPER_DESCRIPTORS : 0;
  const int scratch_index[4] = {PRE_GLOBAL_SCRATCH, DKDV_GLOBAL_SCRATCH + descriptors * TMA_DESC_SLOTS,
                                fused ? CONVERT_GLOBAL_SCRATCH : DQ_GLOBAL_SCRATCH + dq_descriptors * TMA_DESC_SLOTS,
                                REDUCE_GLOBAL_SCRATCH};
  for (int i = 0; i < launches; i++) {
    const recorded_launch *launch = &fake.launch_log[i];
    const char *name = kernel_signatures[launch->kernel].function;
    CHECK_MSG(launch->kernel == order[i], "%s: launch %d is %s, expected %s", what, i + 1, name,
              kernel_signatures[order[i]].function);
    CHECK_MSG(launch->grid[0] == (unsigned)grids[i] && launch->grid[1] == 1 && launch->grid[2] == 1,
              "%s: %s grid (%u, %u, %u), expected (%lld, 1, 1)", what, name, launch->grid[0], launch->grid[1],
              launch->grid[2], (long long)grids[i]);
    CHECK_MSG(launch->block[0] == 32u * (unsigned)rows[i]->num_warps && launch->block[1] == 1 && launch->block[2] == 1,
              "%s: %s block (%u, %u, %u) for %d warps", what, name, launch->block[0], launch->block[1],
              launch->block[2], rows[i]->num_warps);
    CHECK_MSG(launch->shared_bytes == (unsigned)rows[i]->shared_bytes, "%s: %s with %u bytes of shared memory, %s needs %d",
              what, name, launch->shared_bytes, rows[i]->name, rows[i]->shared_bytes);
    CHECK_MSG(launch->stream == (CUstream)FAKE_STREAM, "%s: %s on another stream", what, name);
    CHECK(launch->extra == NULL);
    CHECK_MSG(arg_pointer(launch, scratch_index[i]) == 0 && arg_pointer(launch, scratch_index[i] + 1) == 0,
              "%s: %s's hidden scratch pointers are not NULL", what, name);
    for (int j = 0; j < i; j++) CHECK(launch->function != fake.launch_log[j].function);
  }

  const aotk_tensor *q = &params->q, *k = &params->k, *v = &params->v, *out = &params->out, *lse = &params->lse;
  const aotk_tensor *dout = &params->dout, *dq = &params->dq, *dk = &params->dk, *dv = &params->dv;
  const int64_t pre_blocks = ceil_div(stats_stride(p), rows[0]->block_m);

  const recorded_launch *pre = &fake.launch_log[0];
  const char *kernel = "attn_bwd_preprocess";
  const void *lse_log2 = byte_offset(FAKE_WORKSPACE, bwd_stats_bytes(p) / 2);
  const void *sink_partial = dsinks ? byte_offset(FAKE_WORKSPACE, bwd_stats_bytes(p)) : NULL;
  check_pointer(what, kernel, pre, PRE_OUT, out->data, "out");
  check_pointer(what, kernel, pre, PRE_DOUT, dout->data, "dout");
  check_pointer(what, kernel, pre, PRE_LSE, lse->data, "lse");
  check_pointer(what, kernel, pre, PRE_DELTA, FAKE_WORKSPACE, "delta (the workspace)");
  check_pointer(what, kernel, pre, PRE_LSE_LOG2, lse_log2, "lse * log2(e) (the statistics' second half)");
  check_pointer(what, kernel, pre, PRE_CU_SEQLENS_Q, params->cu_seqlens_q.data, "cu_seqlens_q");
  check_pointer(what, kernel, pre, PRE_SINKS, dsinks ? params->sinks.data : NULL, "sinks (only for dsinks)");
  check_pointer(what, kernel, pre, PRE_SINK_PARTIAL, sink_partial, "the sink partials (after the statistics)");
  check_strides(what, kernel, pre, PRE_STRIDE_OB, out, "out");
  check_strides(what, kernel, pre, PRE_STRIDE_DOB, dout, "dout");
  const int64_t stride_lb = expected.varlen ? 0 : lse->strides[0], stride_lh = lse->strides[expected.varlen ? 0 : 1];
  CHECK_MSG(arg_i64(pre, PRE_STRIDE_LB) == stride_lb && arg_i32(pre, PRE_STRIDE_LH) == stride_lh,
            "%s: the pre-pass's lse strides (%lld, %d), expected (%lld, %lld)", what,
            (long long)arg_i64(pre, PRE_STRIDE_LB), arg_i32(pre, PRE_STRIDE_LH), (long long)stride_lb,
            (long long)stride_lh);
  check_int(what, kernel, pre, PRE_SEQLEN_Q, p->seqlen_q, "seqlen_q");
  check_int(what, kernel, pre, PRE_HEADS_Q, p->heads_q, "heads_q");
  check_int(what, kernel, pre, PRE_NUM_SEQS, p->batch, "num_seqs");
  /* The pre-pass covers the padded rows of the statistics too. */
  check_int(what, kernel, pre, PRE_NUM_M_BLOCKS, pre_blocks, "num_m_blocks");
  check_int(what, kernel, pre, PRE_STATS_STRIDE, stats_stride(p), "stats_stride");
  check_int(what, kernel, pre, PRE_HEAD_DIM_V8, dim_v(p) / 8, "head_dim_v8");
  /* Only the layout and whether to sum the sink gradient matter to the pre-pass. */
  check_int(what, kernel, pre, PRE_FLAGS, (expected.flags & FLAG_VARLEN) | (dsinks ? FLAG_SINKS : 0), "flags");

  const recorded_launch *dkdv = &fake.launch_log[1];
  kernel = kernel_signatures[order[1]].function;
  if (hopper) {
    /* The accumulator as the fused pass maps it: fp32 [batch * heads_q, stats_stride, head_dim_qk] at its
     * offset in the workspace, read in tiles of the pass's query rows. */
    const aotk_tensor accumulator_view = {(void *)accumulator,
                                          AOTK_DTYPE_FLOAT32,
                                          4,
                                          {p->batch * p->heads_q, stats_stride(p), 1, p->head_dim, 0, 0},
                                          {stats_stride(p) * p->head_dim, p->head_dim, p->head_dim, 1, 0, 0}};
    const aotk_tensor *mapped[FUSED_DESCRIPTORS] = {q, k, v, dout, &accumulator_view};
    static const char *const mapped_names[FUSED_DESCRIPTORS] = {"q", "k", "v", "dout", "the dQ accumulator"};
    const int32_t tile_rows[FUSED_DESCRIPTORS] = {rows[1]->block_m, rows[1]->block_n, rows[1]->block_n,
                                                  rows[1]->block_m, rows[1]->block_m};
    check_descriptors(what, dkdv, rows[1], 0, descriptors, descriptors + dq_descriptors, mapped, mapped_names,
                      tile_rows, DKDV_GLOBAL_SCRATCH);
  } else {
    CHECK_MSG(fake.encode_count == 0 && dkdv->maps_recorded == 0, "%s: the Triton dK/dV pass encoded %d maps", what,
              fake.encode_count);
  }
  const void *dkdv_pointers[] = {q->data, k->data, v->data, dout->data, lse_log2, FAKE_WORKSPACE, dk->data, dv->data,
                                 params->cu_seqlens_q.data, params->cu_seqlens_k.data, params->alibi_slopes.data,
                                 expected.rng_state};
  static const char *const dkdv_pointer_names[] = {"q", "k", "v", "dout", "lse_log2", "delta", "dk", "dv",
                                                   "cu_seqlens_q", "cu_seqlens_k", "alibi_slopes", "rng_state"};
  for (int i = 0; i < 12; i++) check_pointer(what, kernel, dkdv, DKDV_Q + i, dkdv_pointers[i], dkdv_pointer_names[i]);
  const aotk_tensor *dkdv_strided[] = {q, k, v, dout, dk, dv};
  for (int i = 0; i < 6; i++) {
    check_strides(what, kernel, dkdv, DKDV_STRIDE_QB + 3 * i, dkdv_strided[i], dkdv_pointer_names[i < 4 ? i : i + 2]);
  }
  check_int(what, kernel, dkdv, DKDV_SEQLEN_Q, p->seqlen_q, "seqlen_q");
  check_int(what, kernel, dkdv, DKDV_SEQLEN_K, p->seqlen_k, "seqlen_k");
  check_int(what, kernel, dkdv, DKDV_HEADS_Q, p->heads_q, "heads_q");
  check_int(what, kernel, dkdv, DKDV_HEADS_KV, p->heads_kv, "heads_kv");
  check_int(what, kernel, dkdv, DKDV_GROUP_SIZE, p->heads_q / p->heads_kv, "group_size");
  check_int(what, kernel, dkdv, DKDV_NUM_N_BLOCKS, ceil_div(p->seqlen_k, rows[1]->block_n), "num_n_blocks");
  check_int(what, kernel, dkdv, DKDV_STATS_STRIDE, stats_stride(p), "stats_stride");
  check_bwd_feature_args(what, kernel, dkdv, p, &expected, DKDV_STRIDE_AB, DKDV_HEAD_DIM_QK8);

  const recorded_launch *dq_launch = &fake.launch_log[2];
  kernel = kernel_signatures[order[2]].function;
  if (fused) {
    /* The cast reads the accumulator the fused pass filled and writes dq, over seqlen_q's blocks. */
    check_pointer(what, kernel, dq_launch, CONVERT_DQ_ACC, accumulator, "DQAcc (the accumulator)");
    check_pointer(what, kernel, dq_launch, CONVERT_DQ, dq->data, "dq");
    check_pointer(what, kernel, dq_launch, CONVERT_CU_SEQLENS_Q, params->cu_seqlens_q.data, "cu_seqlens_q");
    check_strides(what, kernel, dq_launch, CONVERT_STRIDE_DQB, dq, "dq");
    check_int(what, kernel, dq_launch, CONVERT_SEQLEN_Q, p->seqlen_q, "seqlen_q");
    check_int(what, kernel, dq_launch, CONVERT_HEADS_Q, p->heads_q, "heads_q");
    check_int(what, kernel, dq_launch, CONVERT_NUM_M_BLOCKS, ceil_div(p->seqlen_q, rows[2]->block_m), "num_m_blocks");
    check_int(what, kernel, dq_launch, CONVERT_STATS_STRIDE, stats_stride(p), "stats_stride");
    /* Of the flags only the layout matters to the cast. */
    check_int(what, kernel, dq_launch, CONVERT_FLAGS, expected.flags & FLAG_VARLEN, "flags");
  } else {
    const void *dq_pointers[] = {q->data, k->data, v->data, dout->data, lse_log2, FAKE_WORKSPACE, dq->data,
                                 params->cu_seqlens_q.data, params->cu_seqlens_k.data, params->alibi_slopes.data,
                                 expected.rng_state};
    static const char *const dq_pointer_names[] = {"q", "k", "v", "dout", "lse_log2", "delta", "dq",
                                                   "cu_seqlens_q", "cu_seqlens_k", "alibi_slopes", "rng_state"};
    for (int i = 0; i < 11; i++) check_pointer(what, kernel, dq_launch, DQ_Q + i, dq_pointers[i], dq_pointer_names[i]);
    const aotk_tensor *dq_strided[] = {q, k, v, dout, dq};
    for (int i = 0; i < 5; i++) {
      check_strides(what, kernel, dq_launch, DQ_STRIDE_QB + 3 * i, dq_strided[i], dq_pointer_names[i < 4 ? i : 6]);
    }
    check_int(what, kernel, dq_launch, DQ_SEQLEN_Q, p->seqlen_q, "seqlen_q");
    check_int(what, kernel, dq_launch, DQ_SEQLEN_K, p->seqlen_k, "seqlen_k");
    check_int(what, kernel, dq_launch, DQ_HEADS_Q, p->heads_q, "heads_q");
    check_int(what, kernel, dq_launch, DQ_GROUP_SIZE, p->heads_q / p->heads_kv, "group_size");
    check_int(what, kernel, dq_launch, DQ_NUM_M_BLOCKS, ceil_div(p->seqlen_q, rows[2]->block_m), "num_m_blocks");
    check_int(what, kernel, dq_launch, DQ_STATS_STRIDE, stats_stride(p), "stats_stride");
    check_bwd_feature_args(what, kernel, dq_launch, p, &expected, DQ_STRIDE_AB, DQ_HEAD_DIM_QK8);
    if (dq_hopper) {
      /* Its own maps of Q, K, V and dO, boxed for its tiles, encoded after the dK/dV pass's. */
      const aotk_tensor *mapped[DQ_HOPPER_DESCRIPTORS] = {q, k, v, dout};
      static const char *const mapped_names[DQ_HOPPER_DESCRIPTORS] = {"q", "k", "v", "dout"};
      const int32_t tile_rows[DQ_HOPPER_DESCRIPTORS] = {rows[2]->block_m, rows[2]->block_n, rows[2]->block_n,
                                                        rows[2]->block_m};
      check_descriptors(what, dq_launch, rows[2], descriptors, DQ_HOPPER_DESCRIPTORS, descriptors + dq_descriptors,
                        mapped, mapped_names, tile_rows, DQ_GLOBAL_SCRATCH);
    } else {
      CHECK_MSG(dq_launch->maps_recorded == 0, "%s: the Triton dQ pass was given %d maps", what,
                dq_launch->maps_recorded);
    }
  }
  if (!dsinks) return;

  /* The sink reduction: one program per query head sums its batch * pre-pass-blocks partials. */
  const recorded_launch *reduce = &fake.launch_log[3];
  kernel = "attn_bwd_sink_reduce";
  check_pointer(what, kernel, reduce, REDUCE_SINK_PARTIAL, sink_partial, "sink partials");
  check_pointer(what, kernel, reduce, REDUCE_DSINKS, params->dsinks.data, "dsinks");
  check_int(what, kernel, reduce, REDUCE_COUNT, p->batch * pre_blocks, "count");
}

void softcap_scale(aotk_attn_params *a, const problem *p) {
  (void)p, a->softcap = 50.0f, a->softmax_scale = 0.0625f, a->causal = 1;
}

void alibi_per_sequence(aotk_attn_params *a, const problem *p) { /* rows padded to a distinct stride */
  a->alibi_slopes = aotk_tensor_2d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p->batch, p->heads_q);
  a->alibi_slopes.strides[0] = p->heads_q + 24;
}

void sinks_on(aotk_attn_params *a, const problem *p) {
  a->sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, p->heads_q);
}

void dropout_on(aotk_attn_params *a, const problem *p) {
  (void)p, a->dropout_p = 0.1f, a->rng_state = aotk_tensor_1d(FAKE_RNG_STATE, AOTK_DTYPE_INT64, 2);
}

void check_sel_launch_shape(const char *what, const recorded_launch *launch, int kernel,
                            const aotk__kernel_entry *row, int64_t grid, int scratch_index) {
  const char *name = kernel_signatures[kernel].function;
  CHECK_MSG(launch->kernel == kernel, "%s: launched %s, expected %s", what, kernel_signatures[launch->kernel].function,
            name);
  CHECK_MSG(launch->grid[0] == (unsigned)grid && launch->grid[1] == 1 && launch->grid[2] == 1,
            "%s: %s grid (%u, %u, %u), expected (%lld, 1, 1)", what, name, launch->grid[0], launch->grid[1],
            launch->grid[2], (long long)grid);
  CHECK_MSG(launch->block[0] == 32u * (unsigned)row->num_warps && launch->block[1] == 1 && launch->block[2] == 1,
            "%s: %s block %u for %s's %d warps", what, name, launch->block[0], row->name, row->num_warps);
  CHECK_MSG(launch->shared_bytes == (unsigned)row->shared_bytes, "%s: %s with %u bytes of shared memory, %s needs %d",
            what, name, launch->shared_bytes, row->name, row->shared_bytes);
  CHECK(launch->stream == (CUstream)FAKE_STREAM && launch->extra == NULL);
  const struct given_kernel *given = given_kernel_of(launch->function);
  CHECK_MSG(given != NULL, "%s: %s launched a handle the driver never gave", what, name);
  if (given != NULL) { /* above 48 KiB of dynamic shared memory the kernel must have opted in */
    const int opt_in = row->shared_bytes > 48 * 1024 ? row->shared_bytes : 0;
    CHECK_MSG(given->shared_opt_in == opt_in, "%s: %s (%d bytes) opted in to %d bytes", what, row->name,
              row->shared_bytes, given->shared_opt_in);
  }
  CHECK_MSG(arg_pointer(launch, scratch_index) == 0 && arg_pointer(launch, scratch_index + 1) == 0,
            "%s: %s's scratch pointers are not NULL", what, name);
}

void check_i64(const char *what, const char *kernel, const recorded_launch *launch, int index, int64_t expected,
               const char *name) {
  CHECK_MSG(arg_i64(launch, index) == expected, "%s: %s's %s is %lld, expected %lld", what, kernel, name,
            (long long)arg_i64(launch, index), (long long)expected);
}
