/*
 * CPU tests of the generated kernel table as a whole (build/generated, so what this build embeds): it
 * is unfiltered, every variant of every family has a kernel for every problem size from seqlen 1, names
 * are unique per target, a refusal for want of a kernel names the family as the catalog does, tuning
 * bounds are distinct, each row's fields agree with its name and with what its target allows, the
 * selection rows' tiles and the TMA rows' descriptor layouts fit. The images themselves are
 * tests/test_images.c; the families both check against, tests/kernel_families.h.
 */
#include "kernel_families.h"

/* ---- the table as a whole ------------------------------------------------------------------- */

static void test_table_is_unfiltered(void) {
  if (aotk__kernel_filter[0] != '\0') {
    TEST_SKIP("built with the kernel filter \"%s\": %d of %d catalog kernels", aotk__kernel_filter,
              aotk__kernel_count, aotk__catalog_kernel_count);
    return;
  }
  CHECK_MSG(aotk__kernel_count == aotk__catalog_kernel_count, "%d kernels built, the catalog has %d",
            aotk__kernel_count, aotk__catalog_kernel_count);
}

static void test_table_covers_every_variant_from_seqlen_one(void) {
  static struct variant variants[MAX_VARIANTS];
  int variant_count = list_variants(variants);
  bool filtered = aotk__kernel_filter[0] != '\0';
  CHECK(aotk__kernel_count > 0);
  int filtered_out = 0;
  for (int v = 0; v < variant_count; v++) {
    int rows = 0, rows_from_one = 0;
    for (int i = 0; i < aotk__kernel_count; i++) {
      const aotk__kernel_entry *e = &aotk__kernel_table[i];
      if (!row_is_variant(e, &variants[v])) continue;
      rows++;
      rows_from_one += e->min_seqlen == 1;
    }
    /* A filtered build leaves whole variants out; one it keeps must still serve every size. */
    if (filtered && rows == 0) {
      filtered_out++;
      continue;
    }
    /* Exactly one: two rows with the same bound would make the tuning choice depend on row order,
     * and none would leave short problems (or a filtered build's) without a kernel. */
    const struct variant *x = &variants[v];
    CHECK_MSG(rows_from_one == 1,
              "%s sm_%d %s head dims (%d, %d) aligned=%d extras=%d block size %d: %d of its %d rows have min_seqlen "
              "1, expected 1",
              x->family->name, x->arch, x->dtype != 0 ? dtype_tag(x->dtype) : "(no dtype)", x->head_dim_qk,
              x->head_dim_v, x->aligned, x->extras, x->block_size, rows_from_one, rows);
  }
  printf("    %d variants (%d families)", variant_count, (int)FAMILY_COUNT);
  if (filtered) printf(", %d left out by the kernel filter \"%s\"", filtered_out, aotk__kernel_filter);
  printf("\n");
}

static void test_table_names_unique_per_arch(void) {
  for (int i = 0; i < aotk__kernel_count; i++) {
    for (int j = i + 1; j < aotk__kernel_count; j++) {
      const aotk__kernel_entry *a = &aotk__kernel_table[i], *b = &aotk__kernel_table[j];
      CHECK_MSG(a->arch != b->arch || strcmp(a->name, b->name) != 0, "rows %d and %d are both sm_%d %s", i, j,
                a->arch, a->name);
    }
  }
}

/* A refusal for want of a kernel names the family as the catalog does (src/runtime/aotk_launch.c's
 * family names), for every family chosen through aotk__choose_kernel: all but selection attention's,
 * which src/sel/aotk_sel.c chooses and names itself. Size key 0 is below every row's min_seqlen (at
 * least 1: see test_table_covers_every_variant_from_seqlen_one), so no row is chosen, built or not. */
static void test_kernel_refusals_name_the_family(void) {
  static const int archs[] = {80, 90};
  for (int f = 0; f < FAMILY_COUNT; f++) {
    if (strncmp(families[f].name, "sel_", 4) == 0) continue;
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
      const aotk__device_info device = {NULL, 0, archs[a], 227 * 1024, 132};
      const aotk__variant_key key = {AOTK_DTYPE_FLOAT16, 64, 64, 1, 0};
      int row = -1;
      aotk__image_kind kind;
      aotk_status status = aotk__choose_kernel(families[f].id, &key, 0, &device, &row, &kind);
      char expected[96];
      snprintf(expected, sizeof expected, "no sm_%d %s kernel for ", archs[a], families[f].name);
      CHECK_MSG(status == AOTK_ERROR_KERNEL_NOT_BUILT && strstr(aotk_last_error(), expected) != NULL,
                "%s on sm_%d: %s, \"%s\"; expected a refusal naming it (\"%s...\")", families[f].name, archs[a],
                aotk_status_name(status), aotk_last_error(), expected);
    }
  }
}

/* The tuning bounds of one variant must be distinct, or which config runs depends on row order. */
static void test_table_tuning_bounds_distinct(void) {
  for (int i = 0; i < aotk__kernel_count; i++) {
    for (int j = i + 1; j < aotk__kernel_count; j++) {
      const aotk__kernel_entry *a = &aotk__kernel_table[i], *b = &aotk__kernel_table[j];
      CHECK_MSG(!same_variant(a, b) || a->min_seqlen != b->min_seqlen, "%s and %s (sm_%d) share min_seqlen %d",
                a->name, b->name, a->arch, a->min_seqlen);
    }
  }
}

static bool is_head_dim_pair(int32_t head_dim_qk, int32_t head_dim_v) {
  for (int h = 0; h < HEAD_DIM_PAIR_COUNT; h++) {
    if (head_dim_pairs[h][0] == head_dim_qk && head_dim_pairs[h][1] == head_dim_v) return true;
  }
  return false;
}

static bool is_sel_head_dim_pair(int32_t head_dim_qk, int32_t head_dim_v) {
  for (int h = 0; h < SEL_HEAD_DIM_PAIR_COUNT; h++) {
    if (sel_head_dim_pairs[h][0] == head_dim_qk && sel_head_dim_pairs[h][1] == head_dim_v) return true;
  }
  return false;
}

static bool is_tma_head_dim_pair(int32_t head_dim_qk, int32_t head_dim_v) {
  for (int h = 0; h < TMA_HEAD_DIM_PAIR_COUNT; h++) {
    if (tma_head_dim_pairs[h][0] == head_dim_qk && tma_head_dim_pairs[h][1] == head_dim_v) return true;
  }
  return false;
}

static bool is_hopper_head_dim_pair(int32_t head_dim_qk, int32_t head_dim_v) {
  for (int h = 0; h < HOPPER_HEAD_DIM_PAIR_COUNT; h++) {
    if (hopper_head_dim_pairs[h][0] == head_dim_qk && hopper_head_dim_pairs[h][1] == head_dim_v) return true;
  }
  return false;
}

static bool is_head_dim_v(int32_t head_dim_v) {
  for (int h = 0; h < HEAD_DIM_V_COUNT; h++) {
    if (head_dims_v[h] == head_dim_v) return true;
  }
  return false;
}

/* The description of each row: the fields agree with the family's axes, with the name, and with what
 * the targets allow. */
static void test_table_rows_describe_valid_configs(void) {
  int rows_per_family[FAMILY_COUNT] = {0};
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    const struct family *family = family_of(e);
    CHECK_MSG(family != NULL, "row %d %s: family %d", i, e->name, e->family);
    if (family == NULL) continue;
    rows_per_family[family - families]++;
    CHECK_MSG(e->arch == 80 || e->arch == 90, "row %d %s: arch %d", i, e->name, e->arch);
    CHECK_MSG(family->only_arch == 0 || e->arch == family->only_arch, "row %d %s: arch %d, but %s is sm_%d only", i,
              e->name, e->arch, family->name, family->only_arch);
    if (family->has_dtype) {
      CHECK_MSG(e->dtype == AOTK_DTYPE_FLOAT16 || e->dtype == AOTK_DTYPE_BFLOAT16, "row %d %s: dtype %d", i,
                e->name, e->dtype);
    } else {
      CHECK_MSG(e->dtype == 0, "row %d %s: dtype %d, but %s has no dtype axis", i, e->name, e->dtype, family->name);
    }
    if (family->has_alignment) {
      CHECK_MSG(e->aligned == 0 || e->aligned == 1, "row %d %s: aligned %d", i, e->name, e->aligned);
    } else if (family->always_aligned) {
      CHECK_MSG(e->aligned == 1, "row %d %s: aligned %d, but %s is always the aligned variant", i, e->name, e->aligned,
                family->name);
    } else {
      CHECK_MSG(e->aligned == 0, "row %d %s: aligned %d, but %s has no alignment axis", i, e->name, e->aligned,
                family->name);
    }
    if (family->has_block_size) {
      bool known = false;
      for (int b = 0; b < SEL_BLOCK_SIZE_COUNT; b++) known = known || e->block_size == sel_block_sizes[b];
      CHECK_MSG(known, "row %d %s: block size %d, not 32, 64 or 128", i, e->name, e->block_size);
    } else {
      CHECK_MSG(e->block_size == 0, "row %d %s: block size %d, but %s has none", i, e->name, e->block_size,
                family->name);
    }
    switch (family->head_dims) {
      case HEAD_DIMS_PAIRS:
        CHECK_MSG(is_head_dim_pair(e->head_dim_qk, e->head_dim_v), "row %d %s: head dims (%d, %d), not a compiled pair",
                  i, e->name, e->head_dim_qk, e->head_dim_v);
        break;
      case HEAD_DIMS_V_ONLY:
        CHECK_MSG(e->head_dim_qk == 0 && is_head_dim_v(e->head_dim_v),
                  "row %d %s: head dims (%d, %d), expected (0, one of 32, 64, 128, 256)", i, e->name, e->head_dim_qk,
                  e->head_dim_v);
        break;
      case HEAD_DIMS_SEL_PAIRS:
        CHECK_MSG(is_sel_head_dim_pair(e->head_dim_qk, e->head_dim_v),
                  "row %d %s: head dims (%d, %d), expected (64, 64), (128, 128) or (192, 128)", i, e->name,
                  e->head_dim_qk, e->head_dim_v);
        break;
      case HEAD_DIMS_TMA_PAIRS:
        CHECK_MSG(is_tma_head_dim_pair(e->head_dim_qk, e->head_dim_v),
                  "row %d %s: head dims (%d, %d), expected (128, 128) or (256, 256)", i, e->name, e->head_dim_qk,
                  e->head_dim_v);
        break;
      case HEAD_DIMS_HOPPER_PAIRS:
        CHECK_MSG(is_hopper_head_dim_pair(e->head_dim_qk, e->head_dim_v),
                  "row %d %s: head dims (%d, %d), expected (64, 64), (128, 128), (192, 128) or (256, 256)", i,
                  e->name, e->head_dim_qk, e->head_dim_v);
        break;
      case HEAD_DIMS_HOPPER_BWD_PAIRS:
        CHECK_MSG(((e->head_dim_qk == 64 || e->head_dim_qk == 128 || e->head_dim_qk == 256) &&
                   e->head_dim_v == e->head_dim_qk) || (e->head_dim_qk == 192 && e->head_dim_v == 128),
                  "row %d %s: head dims (%d, %d), expected (64, 64), (128, 128), (192, 128) or (256, 256)", i,
                  e->name, e->head_dim_qk, e->head_dim_v);
        break;
      case HEAD_DIMS_HOPPER_FUSED_PAIRS:
        CHECK_MSG((e->head_dim_qk == 64 || e->head_dim_qk == 128) && e->head_dim_v == e->head_dim_qk,
                  "row %d %s: head dims (%d, %d), expected (64, 64) or (128, 128)", i, e->name, e->head_dim_qk,
                  e->head_dim_v);
        break;
      case HEAD_DIMS_HOPPER_DQ_PAIRS:
        CHECK_MSG((e->head_dim_qk == 256 && e->head_dim_v == 256) || (e->head_dim_qk == 192 && e->head_dim_v == 128),
                  "row %d %s: head dims (%d, %d), expected (192, 128) or (256, 256)", i, e->name, e->head_dim_qk,
                  e->head_dim_v);
        break;
      case HEAD_DIMS_HOPPER_WG3_PAIRS:
        CHECK_MSG(e->head_dim_qk == 64 && e->head_dim_v == 64, "row %d %s: head dims (%d, %d), expected (64, 64)", i,
                  e->name, e->head_dim_qk, e->head_dim_v);
        break;
      case HEAD_DIMS_HOPPER_PAGED_PAIRS:
        CHECK_MSG(((e->head_dim_qk == 64 || e->head_dim_qk == 128 || e->head_dim_qk == 256) &&
                   e->head_dim_v == e->head_dim_qk) || (e->head_dim_qk == 192 && e->head_dim_v == 128),
                  "row %d %s: head dims (%d, %d), expected (64, 64), (128, 128), (192, 128) or (256, 256)", i,
                  e->name, e->head_dim_qk, e->head_dim_v);
        break;
      case HEAD_DIMS_NONE:
        CHECK_MSG(e->head_dim_qk == 0 && e->head_dim_v == 0, "row %d %s: head dims (%d, %d), but %s has none", i,
                  e->name, e->head_dim_qk, e->head_dim_v, family->name);
        break;
    }
    if (family->extras == EXTRAS_BOTH) {
      CHECK_MSG(e->extras == 0 || e->extras == 1, "row %d %s: extras %d", i, e->name, e->extras);
    } else if (family->extras == EXTRAS_ONLY) {
      CHECK_MSG(e->extras == 1, "row %d %s: extras %d, but %s has only the EXTRAS variant", i, e->name, e->extras,
                family->name);
    } else {
      CHECK_MSG(e->extras == 0, "row %d %s: extras %d, but %s has no extras variant", i, e->name, e->extras,
                family->name);
    }
    const int32_t named = named_warps(e);
    CHECK_MSG(is_power_of_two(named) && named <= 8, "row %d %s: num_warps %d in the name", i, e->name, named);
    if (family->warp_specialized) {
      CHECK_MSG(e->num_warps > named && e->num_warps % 4 == 0 && e->num_warps <= 16,
                "row %d %s: a warp-specialized program of %d warps, %d in the default partition", i, e->name,
                e->num_warps, named);
    } else {
      CHECK_MSG(e->num_warps == named, "row %d %s: num_warps %d, the name says %d", i, e->name, e->num_warps, named);
    }
    if (family->fixed_block_m != 0) {
      CHECK_MSG(e->block_m == family->fixed_block_m, "row %d %s: block_m %d, %s's is %d", i, e->name, e->block_m,
                family->name, family->fixed_block_m);
    } else {
      CHECK_MSG(is_power_of_two(e->block_m), "row %d %s: block_m %d", i, e->name, e->block_m);
    }
    if (family->has_block_n) {
      CHECK_MSG(is_power_of_two(e->block_n), "row %d %s: block_n %d", i, e->name, e->block_n);
    } else {
      CHECK_MSG(e->block_n == 0, "row %d %s: block_n %d, but %s has no BLOCK_N", i, e->name, e->block_n,
                family->name);
    }
    if (e->family == AOTK__FAMILY_ATTN_MERGE) {
      /* At most the split count a decoding call makes: more would only pad its one step. */
      CHECK_MSG(is_power_of_two(e->block_p) && e->block_p <= AOTK_DECODE_MAX_SPLITS, "row %d %s: block_p %d", i,
                e->name, e->block_p);
    } else if (e->family == AOTK__FAMILY_ATTN_FWD_HOPPER_PAGED) {
      /* The rows of K and V in a TMA box (test_table_tma_descriptors). */
      CHECK_MSG(e->block_p == (e->min_seqlen >= 64 ? 64 : 16), "row %d %s: block_p %d, expected %d", i, e->name,
                e->block_p, e->min_seqlen >= 64 ? 64 : 16);
    } else {
      CHECK_MSG(e->block_p == 0, "row %d %s: block_p %d, but only the merge and the paged prefill have one", i,
                e->name, e->block_p);
    }
    CHECK_MSG(e->num_stages >= 1, "row %d %s: num_stages %d", i, e->name, e->num_stages);
    CHECK_MSG(e->min_seqlen >= 1, "row %d %s: min_seqlen %d", i, e->name, e->min_seqlen);
    /* sm_80 cubins also serve sm_86/sm_89, which allow 99 KiB per block. A kernel may need none. */
    int32_t shared_limit = e->arch == 80 ? 99 * 1024 : 227 * 1024;
    CHECK_MSG(e->shared_bytes >= 0 && e->shared_bytes <= shared_limit,
              "row %d sm_%d %s: shared_bytes %d, the target allows %d", i, e->arch, e->name, e->shared_bytes,
              shared_limit);
    CHECK_MSG(e->function_name != NULL && strcmp(e->function_name, entry_name(family)) == 0,
              "row %d %s: function name \"%s\", expected \"%s\"", i, e->name,
              e->function_name ? e->function_name : "(null)", entry_name(family));
    CHECK_MSG(e->param_kinds != NULL && strcmp(e->param_kinds, family->param_kinds) == 0,
              "row %d %s: param_kinds \"%s\", expected \"%s\"", i, e->name, e->param_kinds ? e->param_kinds : "(null)",
              family->param_kinds);
    char name[160];
    expected_name(e, family->name, name, sizeof name);
    CHECK_MSG(strcmp(e->name, name) == 0, "row %d: name %s, but its fields say %s", i, e->name, name);
  }
  for (int f = 0; f < FAMILY_COUNT; f++) {
    printf("    %s: %d rows\n", families[f].name, rows_per_family[f]);
    CHECK_MSG(rows_per_family[f] > 0 || aotk__kernel_filter[0] != '\0', "no %s row in an unfiltered build",
              families[f].name);
  }
}

/* What the selection launcher (src/sel/aotk_sel.c) relies on in the rows it picks:
 * - sel_fwd and sel_bwd_dq are tuned by the group size G = heads_q / heads_kv: a 16-row tile from G = 1,
 *   a 64-row tile from G = 17 (several programs per token when G > 64). A tile must hold every group its
 *   bound range serves whole (block_m >= the next bound - 1), and it steps one selected block at a time
 *   (block_n = the block size).
 * - sel_bwd_dkdv finds its key tile's block as first_key / block_size: a tile may not straddle two blocks
 *   (the block size is a multiple of block_n).
 * - The index's count and scatter passes run on one grid, sized from the count row's ENTRIES (block_m):
 *   the scatter row must take the same entries per program.
 * - The order pass sorts a list in the smallest of four tiles, SORT_TILE (block_m) / 8 to SORT_TILE. */
static void test_table_selection_tiles(void) {
  int variants = 0;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (e->family == AOTK__FAMILY_SEL_FWD || e->family == AOTK__FAMILY_SEL_BWD_DQ) {
      CHECK_MSG(e->block_n == e->block_size, "%s (sm_%d): block_n %d, block size %d", e->name, e->arch, e->block_n,
                e->block_size);
      CHECK_MSG(e->min_seqlen == 1 || e->min_seqlen == 17, "%s (sm_%d): tuning bound %d, expected group size 1 or 17",
                e->name, e->arch, e->min_seqlen);
      /* The next larger bound of the variant: the groups this row serves end just before it. */
      int next_bound = 0;
      for (int j = 0; j < aotk__kernel_count; j++) {
        const aotk__kernel_entry *o = &aotk__kernel_table[j];
        if (!same_variant(e, o) || o->min_seqlen <= e->min_seqlen) continue;
        if (next_bound == 0 || o->min_seqlen < next_bound) next_bound = o->min_seqlen;
      }
      if (e->min_seqlen == 1) {
        variants++;
        CHECK_MSG(next_bound == 17, "%s (sm_%d): the next group-size bound is %d, expected 17", e->name, e->arch,
                  next_bound);
      }
      if (next_bound != 0) {
        CHECK_MSG(e->block_m >= next_bound - 1, "%s (sm_%d): block_m %d cannot hold a group of %d heads", e->name,
                  e->arch, e->block_m, next_bound - 1);
      }
    } else if (e->family == AOTK__FAMILY_SEL_BWD_DKDV) {
      CHECK_MSG(e->block_n > 0 && e->block_size % e->block_n == 0,
                "%s (sm_%d): block_n %d does not divide the block size %d", e->name, e->arch, e->block_n,
                e->block_size);
    } else if (e->family == AOTK__FAMILY_SEL_INDEX_SCATTER) {
      int counts = 0;
      for (int j = 0; j < aotk__kernel_count; j++) {
        const aotk__kernel_entry *o = &aotk__kernel_table[j];
        if (o->family != AOTK__FAMILY_SEL_INDEX_COUNT || o->arch != e->arch) continue;
        counts++;
        CHECK_MSG(o->block_m == e->block_m, "sm_%d: %s takes %d index entries per program, %s %d", e->arch,
                  o->name, o->block_m, e->name, e->block_m);
      }
      CHECK_MSG(counts == 1, "sm_%d: %d sel_index_count rows for %s", e->arch, counts, e->name);
    } else if (e->family == AOTK__FAMILY_SEL_INDEX_ORDER) {
      CHECK_MSG(e->block_m >= 8 && e->block_m % 8 == 0, "%s (sm_%d): SORT_TILE %d has no eighth", e->name, e->arch,
                e->block_m);
    }
  }
  printf("    %d sel_fwd and sel_bwd_dq variants\n", variants);
  CHECK_MSG(variants > 0 || aotk__kernel_filter[0] != '\0', "no selection row in an unfiltered build");
}

/* What the TMA launcher (src/attn/aotk_attn.c, encode_descriptor) hands cuTensorMapEncodeTiled comes from
 * the row: per descriptor (Q, K, V, and for the backward's dK/dV pass dO, in the kernel's parameter
 * order) the swizzle and the box, outermost first, over the view [batch, seqlen, heads * head_dim]. The
 * box must be one batch, the kernel's tile of rows (block_m query rows for Q and dO, or for the
 * warp-specialized forward one consumer warpgroup's 64 of them; block_n key rows for K and V), and a
 * slice of one head that tiles it exactly (a box past the head would read the next head's columns, and
 * the kernel loads the head as whole boxes); for the Gluon kernels a power of two wide, since Gluon's
 * shapes must be (a head of 192 is three 64-column boxes side by side); TMA's own rules: at most 256 per
 * dimension, an inner extent of a multiple of 16 bytes, and at most the swizzle's span (128 bytes for the
 * 128-byte swizzle, 3). The Triton TMA forward takes three, the Gluon forward four (O last, in 64-row boxes), the backward's Gluon passes four (the dK/dV
 * pass, and the dQ pass with the same tiles: block_m rows of Q and dO, block_n of K and V), the fused
 * form five (the fifth over the fp32 dQ accumulator, [batch * heads_q, stats_stride, head_dim_qk], in
 * block_m-row tiles); other rows have none. */
enum { TMA_SWIZZLE_NONE = 0, TMA_SWIZZLE_128B = 3, TMA_ELEMENT_BYTES = 2 };
static void test_table_tma_descriptors(void) {
  int tma_rows = 0, rows_of_192 = 0;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    const bool fused =
        e->family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER || e->family == AOTK__FAMILY_ATTN_BWD_FUSED_HOPPER_DROPOUT;
    const bool bwd = e->family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER || e->family == AOTK__FAMILY_ATTN_BWD_DQ_HOPPER ||
                     e->family == AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER_DROPOUT || fused;
    const bool paged = e->family == AOTK__FAMILY_ATTN_FWD_HOPPER_PAGED;
    const bool hopper_fwd = e->family == AOTK__FAMILY_ATTN_FWD_HOPPER || e->family == AOTK__FAMILY_ATTN_FWD_HOPPER_WG3 ||
                            e->family == AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT || paged;
    if (e->family != AOTK__FAMILY_ATTN_FWD_TMA && !hopper_fwd && !bwd) {
      CHECK_MSG(e->descriptor_count == 0, "row %d %s: %d TMA descriptors, but it takes none", i, e->name,
                e->descriptor_count);
      static const aotk__tma_layout none[AOTK__MAX_TMA_DESCRIPTORS];
      CHECK_MSG(memcmp(e->descriptors, none, sizeof none) == 0, "row %d %s: descriptor layouts set", i, e->name);
      continue;
    }
    tma_rows++;
    const int count = fused ? 5 : bwd || hopper_fwd ? 4 : 3;
    CHECK_MSG(e->descriptor_count == count, "row %d %s: %d TMA descriptors, expected %d (Q, K, V%s)", i, e->name,
              e->descriptor_count, count,
              fused ? ", dO, the dQ accumulator" : bwd ? ", dO" : hopper_fwd ? ", O" : "");
    if (e->descriptor_count != count) continue;
    rows_of_192 += e->head_dim_qk == 192;
    /* The Gluon forward's fourth is O's, in 64-row boxes like Q's, dv wide like dO's. */
    const char *const names[5] = {"Q", "K", "V", hopper_fwd ? "O" : "dO", "dQ accumulator"};
    const int32_t q_rows = hopper_fwd ? 64 : e->block_m;
    /* The paged prefill's K and V come in boxes of 16 rows, or 64 in its config for pages of 64 keys and
     * more (min_seqlen is the page size there), 64 columns wide: a page holds whole boxes. */
    const int32_t kv_rows = paged ? (e->min_seqlen >= 64 ? 64 : 16) : e->block_n;
    const int32_t rows[5] = {q_rows, kv_rows, kv_rows, q_rows, e->block_m};
    const int32_t head_dims[5] = {e->head_dim_qk, e->head_dim_qk, e->head_dim_v, e->head_dim_v, e->head_dim_qk};
    if (paged) {
      CHECK_MSG(e->descriptors[1].box[2] == 64 && e->descriptors[2].box[2] == 64,
                "row %d %s: K and V boxes %d and %d columns wide, expected 64", i, e->name, e->descriptors[1].box[2],
                e->descriptors[2].box[2]);
    }
    /* The accumulator is fp32 ([batch * heads_q, stats_stride, head_dim_qk]), the others fp16/bf16. */
    const int32_t element_bytes[5] = {TMA_ELEMENT_BYTES, TMA_ELEMENT_BYTES, TMA_ELEMENT_BYTES, TMA_ELEMENT_BYTES, 4};
    for (int d = 0; d < count; d++) {
      const aotk__tma_layout *t = &e->descriptors[d];
      CHECK_MSG(t->swizzle >= TMA_SWIZZLE_NONE && t->swizzle <= TMA_SWIZZLE_128B, "row %d %s %s: swizzle %d", i,
                e->name, names[d], t->swizzle);
      CHECK_MSG(t->box[0] == 1, "row %d %s %s: box[0] (batch) %d, expected 1", i, e->name, names[d], t->box[0]);
      CHECK_MSG(t->box[1] == rows[d], "row %d %s %s: box[1] (rows) %d, expected the tile's %d", i, e->name, names[d],
                t->box[1], rows[d]);
      const int32_t inner = t->box[2];
      CHECK_MSG(inner > 0 && inner <= 256 && head_dims[d] % inner == 0,
                "row %d %s %s: box[2] %d does not divide the head dim %d", i, e->name, names[d], inner, head_dims[d]);
      if (hopper_fwd || bwd) {
        CHECK_MSG(is_power_of_two(inner), "row %d %s %s: box[2] %d is not a power of two (a Gluon shape)", i,
                  e->name, names[d], inner);
      }
      CHECK_MSG(inner * element_bytes[d] % 16 == 0, "row %d %s %s: box[2] %d is not a multiple of 16 bytes", i,
                e->name, names[d], inner);
      if (t->swizzle == TMA_SWIZZLE_128B) {
        CHECK_MSG(inner * element_bytes[d] <= 128, "row %d %s %s: box[2] %d is %d bytes, over the 128-byte swizzle",
                  i, e->name, names[d], inner, inner * element_bytes[d]);
      }
      for (int b = 0; b < 3; b++) {
        CHECK_MSG(t->box[b] >= 1 && t->box[b] <= 256, "row %d %s %s: box[%d] %d outside [1, 256]", i, e->name,
                  names[d], b, t->box[b]);
      }
    }
    for (int d = count; d < AOTK__MAX_TMA_DESCRIPTORS; d++) {
      CHECK_MSG(e->descriptors[d].swizzle == 0 && e->descriptors[d].box[0] == 0, "row %d %s: descriptor %d set", i,
                e->name, d);
    }
  }
  printf("    %d TMA rows (the TMA forward, the Gluon forward, paged prefill and backward), %d of head dim 192\n", tma_rows,
         rows_of_192);
  CHECK_MSG(tma_rows > 0 || aotk__kernel_filter[0] != '\0', "no TMA row in an unfiltered build");
  /* The Gluon forward's (192, 128) rows, whose Q and K boxes the checks above hold to a power of two
   * that divides 192: whole boxes side by side. */
  CHECK_MSG(rows_of_192 > 0 || aotk__kernel_filter[0] != '\0', "no TMA row of head dim 192 in an unfiltered build");
}

int main(void) {
  RUN_TEST(test_table_is_unfiltered);
  RUN_TEST(test_table_covers_every_variant_from_seqlen_one);
  RUN_TEST(test_table_names_unique_per_arch);
  RUN_TEST(test_kernel_refusals_name_the_family);
  RUN_TEST(test_table_tuning_bounds_distinct);
  RUN_TEST(test_table_rows_describe_valid_configs);
  RUN_TEST(test_table_selection_tiles);
  RUN_TEST(test_table_tma_descriptors);
  return aotk_test_finish();
}
