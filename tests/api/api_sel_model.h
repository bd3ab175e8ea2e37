/*
 * The selection tests' model of what selection attention's calls must do (tests/api/test_api_sel.c and
 * test_api_sel_validation.c): the tile each group runs in, the backward's workspace parts and its split
 * of long token lists, the table row each kernel must come from, the backward's launches in order.
 * Static functions, each test file using what it needs (they compile with -Wno-unused-function).
 */
#ifndef API_SEL_MODEL_H
#define API_SEL_MODEL_H

#include "api_launch_checks.h"

/* What the kernels are told, worked out from the header's definitions. */
static int64_t sel_num_seqs(const sel_shape *s) { return s->num_seqs > 0 ? s->num_seqs : 1; }
static int64_t sel_max_seqlen_k(const sel_shape *s) { return s->num_seqs > 0 ? s->max_seqlen_k : s->total_k; }
static int64_t sel_group_size(const sel_shape *s) { return s->heads_q / s->heads_kv; }
static double sel_scale(const aotk_sel_params *params, const sel_shape *s) {
  return params->softmax_scale != 0.0f ? params->softmax_scale : 1.0 / sqrt((double)s->head_dim_qk);
}

/* The tile the forward and the dQ pass run a group in (the catalog's tuning by group size, in words):
 * 16 query-head rows up to a group of 16, 64 from 17 on (several programs per token past 64). */
static int64_t sel_expected_block_m(const sel_shape *s) { return sel_group_size(s) <= 16 ? 16 : 64; }

/* The dK/dV pass's split of long token lists (src/sel/aotk_sel.c, "the workspace"; kernels/sel_attn.py,
 * sel_bwd_dkdv): chunks of chunk_tokens tokens, the larger of 4096 (token, query head) pairs and 1/512 of
 * all the kv heads' index entries, at most 2^29 - 1 (the kernels divide a list's length by it, rounding
 * up, in 32 bits); at most max_chunks of them per list, ceil(total_q / chunk_tokens) clamped to [1, 16]
 * and kept so that the dK/dV grid (kv heads x sequences x key tiles of at least 32 keys x chunks) is a
 * valid grid size. A list of L tokens split in c > 1 chunks has L > chunk_tokens and c < 2 L /
 * chunk_tokens, hence the partial records per kv head below; none when no list can be split. */
static int64_t sel_chunk_tokens(const sel_shape *s) {
  const int64_t by_pairs = ceil_div(4096, sel_group_size(s));
  const int64_t by_share = ceil_div(s->heads_kv * s->total_q * s->slots, 512);
  const int64_t tokens = by_pairs > by_share ? by_pairs : by_share;
  return tokens < INT32_MAX / 4 ? tokens : INT32_MAX / 4;
}
static int64_t sel_max_chunks(const sel_shape *s) {
  const int64_t programs_per_chunk = s->heads_kv * sel_num_seqs(s) * ceil_div(sel_max_seqlen_k(s), 32);
  int64_t chunks = ceil_div(s->total_q, sel_chunk_tokens(s));
  if (chunks > 16) chunks = 16;
  if (chunks > INT32_MAX / programs_per_chunk) chunks = INT32_MAX / programs_per_chunk;
  return chunks > 1 ? chunks : 1;
}
static int64_t sel_partials_per_head(const sel_shape *s) {
  return sel_max_chunks(s) > 1 ? 2 * s->total_q * s->slots / sel_chunk_tokens(s) + 1 : 0;
}
static int64_t sel_index_slots(const sel_shape *s) {
  return sel_num_seqs(s) * ceil_div(sel_max_seqlen_k(s), s->block_size);
}
static int64_t sel_offsets_stride(const sel_shape *s) { return (sel_index_slots(s) + 1 + 3) / 4 * 4; }
static size_t sel_delta_bytes(const sel_shape *s) { return round_up_16((size_t)(4 * s->total_q * s->heads_q)); }
static size_t sel_offsets_bytes(const sel_shape *s) {
  return round_up_16((size_t)(4 * s->heads_kv * sel_offsets_stride(s)));
}
static size_t sel_tokens_bytes(const sel_shape *s) {
  return round_up_16((size_t)(4 * s->heads_kv * s->total_q * s->slots));
}
static size_t sel_partials_bytes(const sel_shape *s) {
  return round_up_16((size_t)(4 * s->heads_kv * sel_partials_per_head(s) * s->block_size *
                              (s->head_dim_qk + s->head_dim_v)));
}
static size_t sel_workspace_bytes(const sel_shape *s) {
  return sel_delta_bytes(s) + 3 * sel_offsets_bytes(s) + 2 * sel_tokens_bytes(s) + sel_partials_bytes(s);
}

/* The index passes and the check have no variant axes. */
static bool sel_family_is_helper(int family) {
  return family != AOTK__FAMILY_SEL_FWD && family != AOTK__FAMILY_SEL_BWD_DQ && family != AOTK__FAMILY_SEL_BWD_DKDV;
}

/* Whether `family` has the variant that assumes a group size that is a multiple of 16, and the problem
 * runs it (codegen/aotk_catalog.py: sel_fwd and sel_bwd_dkdv; the kernel row's `aligned`). */
static int sel_expected_g16(int family, const sel_shape *s) {
  return (family == AOTK__FAMILY_SEL_FWD || family == AOTK__FAMILY_SEL_BWD_DKDV) && sel_group_size(s) % 16 == 0;
}

/* The row the selection launcher must pick: the family's variant for (arch, dtype, head dims, block size,
 * group size a multiple of 16 or not; the index helpers have none), the largest tuning bound the group
 * size reaches. */
static const aotk__kernel_entry *expected_sel_row(int family, int arch, const sel_shape *s) {
  const aotk__kernel_entry *best = NULL;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (e->family != family || e->arch != arch || e->min_seqlen > sel_group_size(s)) continue;
    if (e->aligned != sel_expected_g16(family, s)) continue;
    if (!sel_family_is_helper(family) &&
        (e->dtype != (int)s->dtype || e->head_dim_qk != s->head_dim_qk || e->head_dim_v != s->head_dim_v ||
         e->block_size != s->block_size)) {
      continue;
    }
    if (best == NULL || e->min_seqlen > best->min_seqlen) best = e;
  }
  return best;
}

static const char *sel_op_function(aotk_op op) { return op == AOTK_OP_SEL_FWD ? "aotk_sel_fwd" : "aotk_sel_bwd"; }

/* The call `op` names; the backward with the ample workspace. */
static aotk_status run_sel_op(aotk_op op, const aotk_sel_params *params) {
  if (op == AOTK_OP_SEL_FWD) return aotk_sel_fwd(params, FAKE_STREAM);
  return aotk_sel_bwd(params, FAKE_WORKSPACE, AMPLE_WORKSPACE_BYTES, FAKE_STREAM);
}

/* The backward's kernels, in launch order: the inverse index's five passes (zero the counts, count,
 * prefix sum, scatter, order each list), then dQ, then dK/dV; then, when lists may be split (max_chunks >
 * 1), dK/dV again to add the split lists' partials: seven launches, or eight. */
enum { SEL_BWD_KERNELS = 7 };
static const int sel_bwd_families[SEL_BWD_KERNELS] = {
    AOTK__FAMILY_SEL_INDEX_ZERO,    AOTK__FAMILY_SEL_INDEX_COUNT, AOTK__FAMILY_SEL_INDEX_SCAN,
    AOTK__FAMILY_SEL_INDEX_SCATTER, AOTK__FAMILY_SEL_INDEX_ORDER, AOTK__FAMILY_SEL_BWD_DQ,
    AOTK__FAMILY_SEL_BWD_DKDV};
static const int sel_bwd_kernels[SEL_BWD_KERNELS] = {KERNEL_SEL_INDEX_ZERO,    KERNEL_SEL_INDEX_COUNT,
                                                     KERNEL_SEL_INDEX_SCAN,    KERNEL_SEL_INDEX_SCATTER,
                                                     KERNEL_SEL_INDEX_ORDER,   KERNEL_SEL_BWD_DQ,
                                                     KERNEL_SEL_BWD_DKDV};
static const int sel_bwd_scratch[SEL_BWD_KERNELS] = {SEL_ZERO_GLOBAL_SCRATCH,    SEL_COUNT_GLOBAL_SCRATCH,
                                                     SEL_SCAN_GLOBAL_SCRATCH,    SEL_SCATTER_GLOBAL_SCRATCH,
                                                     SEL_ORDER_GLOBAL_SCRATCH,   SEL_DQ_GLOBAL_SCRATCH,
                                                     SEL_DKDV_GLOBAL_SCRATCH};
enum { SEL_LAUNCH_ZERO, SEL_LAUNCH_COUNT, SEL_LAUNCH_SCAN, SEL_LAUNCH_SCATTER, SEL_LAUNCH_ORDER, SEL_LAUNCH_DQ,
       SEL_LAUNCH_DKDV, SEL_LAUNCH_DKDV_REDUCE };
_Static_assert((int)SEL_LAUNCH_DKDV_REDUCE < (int)LAUNCH_LOG_SIZE, "the fake logs every launch of the backward");
static int sel_bwd_launches(const sel_shape *s) { return SEL_BWD_KERNELS + (sel_max_chunks(s) > 1); }

#endif /* API_SEL_MODEL_H */
