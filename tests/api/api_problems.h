/*
 * The problems the API tests (tests/api/test_api_*.c) build and the rules they hold the library to,
 * worked out here from include/aotk.h and codegen/aotk_catalog.py rather than taken from the library:
 * contiguous and varlen attention params at the fake addresses, the backward's workspace, which table
 * row and which forward or backward family a call must run, and the params of selection attention,
 * decoding and the merge.
 */
#ifndef AOTK_API_PROBLEMS_H
#define AOTK_API_PROBLEMS_H

#include "api_fake_driver.h"
/* ---- problems ------------------------------------------------------------------------------- */

typedef struct problem {
  aotk_dtype dtype;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim; /* head_dim: q's and k's (head_dim_qk) */
  bool with_lse;
  int64_t head_dim_v; /* v's and out's; 0: head_dim */
} problem;

static inline int64_t dim_v(const problem *p) { return p->head_dim_v != 0 ? p->head_dim_v : p->head_dim; }

/* GQA (group 4), seqlen_q != seqlen_k, lse written: every tensor and every check is in play. */
static const problem default_problem = {AOTK_DTYPE_BFLOAT16, 2, 100, 130, 8, 2, 64, true, 0};

/* Contiguous tensors at the fake addresses. */
aotk_attn_params params_for(problem p);

static inline aotk_attn_params valid_params(void) { return params_for(default_problem); }

/* The backward's params: the forward's (lse required), and dout like out, dq like q, dk and dv like k
 * and v, each contiguous at its own fake address. */
aotk_attn_params bwd_params_for(problem p);

static inline aotk_attn_params valid_bwd_params(void) { return bwd_params_for(default_problem); }
/* params_for with q and k laid out [batch, heads, seqlen, head_dim] (transposed), v and lse with padded
 * rows, out contiguous: every stride distinct (a stride packed into the wrong slot shows), all multiples
 * of 16 (the aligned kernels run). strided_bwd_params: the same with dout, dq, dk and dv strided too, each
 * differently from its counterpart. */
aotk_attn_params strided_params(problem p);
aotk_attn_params strided_bwd_params(problem p);

/* The variable-length layout of problem `p`: p.batch sequences of at most p.seqlen_q query and
 * p.seqlen_k key rows (max_seqlen_q, max_seqlen_k), packed into total_q and total_k rows; q, out
 * [total_q, heads_q, d], k, v [total_k, heads_kv, d], lse [heads_q, total_q], cu_seqlens int32
 * [batch + 1]. With `bwd`, dout, dq, dk and dv too, like out, q, k and v. */
aotk_attn_params varlen_params_for(problem p, int64_t total_q, int64_t total_k, bool bwd);

/* The statistics' row length: seqlen_q rounded up to 128 (include/aotk.h, aotk_attn_bwd). */
static inline int64_t stats_stride(const problem *p) { return (p->seqlen_q + 127) / 128 * 128; }

/* Two fp32 arrays [batch * heads_q, stats_stride]: delta, then lse * log2(e). */
size_t bwd_stats_bytes(const problem *p);

/* The pre-pass's rows per program (codegen/aotk_catalog.py PREPROCESS_CONFIG). */
enum { PREPROCESS_BLOCK_M = 64 };

static inline int64_t ceil_div(int64_t length, int64_t block) { return (length + block - 1) / block; }

/* The workspace the backward needs: the statistics, and with dsinks one fp32 partial sum of the sink
 * gradient per (query head, sequence, pre-pass program) after them. */
size_t bwd_workspace_bytes_for(const problem *p, bool dsinks);

static inline size_t bwd_workspace_bytes(const problem *p) { return bwd_workspace_bytes_for(p, false); }

/* The non-deterministic (fused) backward's fp32 dQ accumulator [batch * heads_q, stats_stride,
 * head_dim_qk] follows the rest at the first 256-byte boundary (include/aotk.h,
 * AOTK_FEATURE_NONDETERMINISTIC): its offset, its size in 32-bit words, and the workspace in all. */
size_t bwd_accumulator_offset(const problem *p, bool dsinks);

size_t bwd_accumulator_elements(const problem *p);

size_t bwd_fused_workspace_bytes_for(const problem *p, bool dsinks);

/* Big enough for any problem the validation cases build, so that only their one spoiled argument can
 * make a call fail. */
#define AMPLE_WORKSPACE_BYTES ((size_t)1 << 40)

static inline const char *op_function(aotk_op op) { return op == AOTK_OP_ATTN_FWD ? "aotk_attn_fwd" : "aotk_attn_bwd"; }

/* The call `op` names, with the ample workspace for the backward. */
aotk_status run_op(aotk_op op, const aotk_attn_params *params);

static inline bool message_mentions(const char *needle) { return strstr(aotk_last_error(), needle) != NULL; }

/* A kernel info struct with every byte after struct_size poisoned, to see what a call writes. */
enum { POISON = 0xAB };
void poison_info(aotk_kernel_info *info);

bool info_untouched(const aotk_kernel_info *info);

const aotk__kernel_entry *table_row_named(const char *name, int arch);

/* The Gluon forward: two consumer warpgroups (128-row tiles), or three (192-row tiles, d=64 only). */
bool family_is_hopper_fwd(int family);

/* The compiled head dims a problem with head dims (head_dim_qk, head_dim_v) runs in, by the catalog's
 * rule: the smallest pair that holds both. The pre-pass has only a v dim (the smallest that holds
 * head_dim_v); the helper kernels have neither (0, 0). (0, 0) also when nothing holds them. */
void compiled_dims(int family, int64_t head_dim_qk, int64_t head_dim_v, int *qk, int *v);

/* Whether table row e is of `family`'s variant for (arch, dtype, compiled dims, alignment, EXTRAS),
 * each axis compared only where the family has it. */
bool row_is_variant(const aotk__kernel_entry *e, int family, int arch, aotk_dtype dtype, int qk, int v,
                    int aligned, int extras);

/* The tuning rule from codegen/aotk_catalog.py: among the rows of a family's variant (its compiled head
 * dims from the problem's by compiled_dims), the one with the largest min_seqlen that the family's size
 * key reaches (seqlen_k for the dK/dV pass, seqlen_q for the others). NULL when the variant has no row. */
const aotk__kernel_entry *expected_row(int family, int arch, aotk_dtype dtype, int64_t head_dim_qk,
                                       int64_t head_dim_v, int aligned, int extras, int64_t size_key);

/* A varlen tensor [total, heads, d] as the kernels see it: [1, total, heads, d], batch stride 0. */
aotk_tensor as_4d(const aotk_tensor *t);

/* The fewest query rows (max_seqlen_q for varlen) that take the three-warpgroup forward
 * (src/attn/aotk_attn.c HOPPER_WG3_MIN_SEQLEN: below, its 192-row tiles measured slower than two
 * warpgroups' 128). */
enum { WG3_MIN_SEQLEN_Q = 2048 };

/* The forward family that must run `params` on a GPU that runs `arch` images (from PTX or not) with
 * `max_shared_bytes` of opt-in shared memory per block, by include/aotk.h. On sm_90 cubins, for aligned
 * inputs that TMA can read, the first of these that has a row at the call's head dims (exactly: a padded
 * head would put the box into the next one) fitting the shared memory:
 *   AOTK__FAMILY_ATTN_FWD_HOPPER_WG3, the warp-specialized kernel with three consumer warpgroups (d64), for
 *     the plain forward without a mask from WG3_MIN_SEQLEN_Q query rows on (max_seqlen_q for varlen);
 *   AOTK__FAMILY_ATTN_FWD_HOPPER, the one with two (AOTK_FEATURE_WARP_SPECIALIZED too), for everything but
 *     dropout (windows, sinks, and softcap and ALiBi in its EXTRAS rows);
 *   AOTK__FAMILY_ATTN_FWD_TMA (AOTK_FEATURE_TMA), dense only (its rows are EXTRAS: dropout);
 * the Gluon ones varlen too (the packed tensors read as [1, total, heads * d]). AOTK__FAMILY_ATTN_FWD, the
 * pointer kernel, otherwise (which is refused where it does not fit either). A TMA family that does not
 * fit with the config tuned for seqlen_q runs with one for fewer rows that does (src/attn/aotk_attn.c
 * choose_tma_row). */
int expected_fwd_family(const aotk_attn_params *params, int arch, bool from_ptx, int max_shared_bytes);

/* The forward's row in `family` (expected_fwd_family's) for `params` with the tuning rule's size key
 * (seqlen_q, or a window's span): expected_row's, except that the two-warpgroup Gluon forward takes its
 * short causal tile (codegen/aotk_catalog.py's FWD_SHORT_CAUSAL, size key 2^30, where the build has it)
 * for a causal mask with no left window over at most 512 queries and keys (max_seqlen for varlen), or
 * 1024 with softcap, ALiBi or dropout (src/attn/aotk_attn.c, hopper_short_causal). */
const aotk__kernel_entry *expected_fwd_row(const aotk_attn_params *params, int family, int arch, int64_t head_dim_qk,
                                           int64_t head_dim_v, int aligned, int extras, int64_t size_key);

/* Whether TMA can read or write t [batch, seqlen, heads, d] (varlen [total, heads, d]) as the kernels'
 * view [batch, seqlen, heads * d]. */
bool tma_readable(const aotk_tensor *caller_tensor);

/* The Gluon dK/dV pass's row for the call: its EXTRAS variant where bwd_hopper_extras says, tuned by
 * seqlen_k (max_seqlen_k for varlen). */
const aotk__kernel_entry *bwd_hopper_row(const aotk_attn_params *params);

/* Whether the backward's dK/dV pass must be the warp-specialized Gluon kernel where the caller asks for
 * a deterministic backward: bwd_hopper_covers, and its row fitting the GPU's shared memory. */
bool expect_bwd_hopper(const aotk_attn_params *params, int arch, bool from_ptx, int max_shared_bytes);

/* The non-deterministic backward's two rows (include/aotk.h, AOTK_FEATURE_NONDETERMINISTIC): the fused
 * pass (EXTRAS with softcap or ALiBi), tuned by seqlen_k, and the cast of its accumulator into dq, by
 * seqlen_q (for varlen the max_seqlen's), whose one variant serves every call. */
const aotk__kernel_entry *fused_row(const aotk_attn_params *params);
const aotk__kernel_entry *convert_row(const aotk_attn_params *params);

/* Whether the backward must be the non-deterministic one (the fused pass and the cast instead of the
 * dK/dV and dQ passes): deterministic 0, the Gluon passes covering the call, batch (num_seqs) * heads_q
 * within the accumulator map's 32-bit count, and both rows fitting the GPU's shared memory. Where the
 * fused pass does not fit, the deterministic kernels run (expect_bwd_hopper says which dK/dV pass). */
bool expect_bwd_fused(const aotk_attn_params *params, int arch, bool from_ptx, int max_shared_bytes);

/* The Gluon dQ pass's row (EXTRAS with softcap or ALiBi), tuned by seqlen_q (max_seqlen_q for varlen),
 * and whether the backward's dQ pass must be it: the Gluon dK/dV pass running in its deterministic form
 * (expect_bwd_hopper without expect_bwd_fused), a row for the head dims in the build (d = 256), fitting
 * the GPU's shared memory. Otherwise the Triton dQ pass runs beside the Gluon dK/dV pass. */
const aotk__kernel_entry *dq_hopper_row(const aotk_attn_params *params);
bool expect_bwd_dq_hopper(const aotk_attn_params *params, int arch, bool from_ptx, int max_shared_bytes);

/* The workspace the call `params` needs on the fake GPU as installed: the accumulator's too where the
 * fused pass runs. */
size_t expected_bwd_workspace_bytes(const aotk_attn_params *params, int arch, bool from_ptx, const problem *p);

/* The kernel (enum kernel_id) and aotk_query feature bits of a forward family. */
int fwd_kernel_id(int family);
uint32_t fwd_family_features(int family);
/* The forward family a kernel name is of, by its catalog prefix, the longest that matches: each shorter
 * one is a prefix of the longer ("attn_fwd_hopper_" of "attn_fwd_hopper_wg3_", "attn_fwd_" of all). -1
 * for a name that is no forward's. */
int fwd_family_of_name(const char *name);

/* t [batch, seqlen, heads, d] with the heads outermost after the batch ([batch, heads, seqlen, d] in
 * memory): still 16-byte aligned, but a token's heads are not contiguous, so TMA cannot read it as
 * [batch, seqlen, heads * d] and the pointer kernel runs. */
void make_heads_outer(aotk_tensor *t);
/* The struct as release 0.1 defined it ends where 0.2's fields begin: the smallest size accepted. */
#define ATTN_PARAMS_0_1_BYTES offsetof(aotk_attn_params, cu_seqlens_q)

/* ALiBi slopes: fp32 [heads_q] or [batch, heads_q]. */
static inline void set_alibi(aotk_attn_params *p) { p->alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 8); }

/* Sinks: fp32 [heads_q]. */
static inline void set_sinks(aotk_attn_params *p) { p->sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 8); }

/* Dropout: p in [0, 1), with an int64 [2] RNG state. */
void set_dropout(aotk_attn_params *p);

/* The dropout mask: uint8 [batch, heads_q, seqlen_q, seqlen_k], only with dropout. */
aotk_tensor mask_for(const aotk_attn_params *p);

/* The backward's 0.2 arguments: dsinks (needs sinks), no dropout mask, and the varlen layout of dout,
 * dq, dk and dv. */
static inline void set_dsinks(aotk_attn_params *p) { p->dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, 8); }

/* ---- selection attention -------------------------------------------------------------------- */

/* A selection problem (include/aotk.h, aotk_sel_params): packed q [total_q, heads_q, head_dim_qk], k and v
 * [total_k, heads_kv, ...], out like q with head_dim_v, lse [total_q, heads_q], block_idx int32 [total_q,
 * heads_kv, slots], block_cnt int32 [total_q, heads_kv]. */
typedef struct sel_shape {
  aotk_dtype dtype;
  int64_t num_seqs; /* 0: no cu_seqlens (q and k form one sequence) */
  int64_t total_q, total_k;
  int32_t max_seqlen_k; /* with cu_seqlens */
  int64_t heads_q, heads_kv, head_dim_qk, head_dim_v, slots;
  int32_t block_size;
  bool with_lse, with_block_cnt; /* the backward always has lse */
} sel_shape;

/* Three sequences, GQA (group 4), every optional tensor: every check is in play. */
static const sel_shape default_sel_shape = {AOTK_DTYPE_BFLOAT16, 3, 300, 400, 250, 8, 2, 128, 128, 16, 64, true, true};

/* Contiguous tensors at the fake addresses; with `bwd`, dout, dq, dk and dv too, like out, q, k and v. */
aotk_sel_params sel_params_for(sel_shape s, bool bwd);

static inline aotk_sel_params valid_sel_params(void) { return sel_params_for(default_sel_shape, false); }
static inline aotk_sel_params valid_sel_bwd_params(void) { return sel_params_for(default_sel_shape, true); }

/* The backward's workspace (include/aotk.h, aotk_sel_bwd; src/sel/aotk_sel.c lays it out), each part
 * starting 16-byte aligned: delta fp32 [total_q, heads_q]; the inverse index's list offsets, the scatter's
 * cursors and each list's first partial record, each int32 [heads_kv, round_up(index slots + 1, 4)], one
 * index slot per (sequence, key block); the token lists int32 [heads_kv, total_q * slots]; the split
 * lists' partial dK/dV fp32 [heads_kv, partials_per_head, block_size, head_dim_qk + head_dim_v]. */
static inline size_t round_up_16(size_t bytes) { return (bytes + 15) / 16 * 16; }

static const gpu sel_sm90 = {90, SHARED_SM90, 90, 0};

/* ---- decoding and the merge (0.4) ----------------------------------------------------------- */

/* A decoding problem (include/aotk.h, aotk_decode_params): seqlen_q new tokens per request against a
 * cache of `capacity` keys per request, contiguous ([batch, capacity, heads_kv, d]) or, with page_size
 * > 0, paged ([num_pages, page_size, heads_kv, d], and a block table [batch, capacity / page_size]).
 * With total_q > 0 the queries are packed (cu_seqlens_q [batch + 1]): q [total_q, heads_q, d], out
 * [total_q, heads_q, d_v], lse [heads_q, total_q], and seqlen_q is max_seqlen_q. */
typedef struct decode_shape {
  aotk_dtype dtype;
  int64_t batch, seqlen_q, heads_q, heads_kv, head_dim_qk, head_dim_v;
  int64_t capacity, page_size, num_pages;
  bool with_lse;
  int64_t total_q; /* 0: dense q [batch, seqlen_q, heads_q, d] */
} decode_shape;

/* GQA (group 4), two new tokens, lse written. */
static const decode_shape default_decode_shape = {AOTK_DTYPE_BFLOAT16, 3, 2, 8, 2, 128, 128, 1000, 0, 0, true, 0};
/* The default shape with 64 pages of 16 keys per request, out of a pool of 200 pages. */
static const decode_shape default_paged_shape = {AOTK_DTYPE_BFLOAT16, 3, 2, 8, 2, 128, 128, 1024, 16, 200, true, 0};
/* Packed: 3 requests' 100 query tokens, at most 40 each, over the default caches: G 4 x 40 = 160 rows per
 * (request, kv head), the 64-row tile in 3 chunks. */
static const decode_shape default_varlen_shape = {AOTK_DTYPE_BFLOAT16, 3, 40, 8, 2, 128, 128, 1000, 0, 0, true, 100};
static const decode_shape default_varlen_paged_shape = {AOTK_DTYPE_BFLOAT16, 3, 40, 8, 2, 128, 128, 1024, 16, 200,
                                                        true, 100};

/* Contiguous tensors at the fake addresses. */
aotk_decode_params decode_params_for(decode_shape s);
/* Appending (include/aotk.h, k_new and v_new): seqlen_new new keys and values per request,
 * [batch, seqlen_new, heads_kv, head_dim], contiguous at their own fake addresses. */
/* Appending (include/aotk.h, k_new and v_new): seqlen_new new keys and values per request,
 * [batch, seqlen_new, heads_kv, head_dim], contiguous at their own fake addresses. */
void add_new_kv(aotk_decode_params *params, const decode_shape *s, int64_t seqlen_new);

static inline aotk_decode_params valid_decode_params(void) { return decode_params_for(default_decode_shape); }
/* The launches a decoding call makes (include/aotk.h): the decoding kernel, the merge after a split, and
 * the appending kernel first unless the decoding kernel appends itself: dense queries, at most 16 new
 * tokens, one row chunk a group (G * seqlen_q rows within the announced tile), and a cache that is
 * contiguous or paged in whole key blocks (not attn_decode_paged's per-row lookup). */
static inline int expected_decode_launches(const aotk_decode_params *p, const aotk_kernel_info *info) {
  const bool append = p->k_new.data != NULL, varlen = p->cu_seqlens_q.data != NULL;
  const int64_t group_rows = (p->q.shape[2] / p->k_cache.shape[2]) * p->q.shape[1];
  const bool per_row_pages = (strncmp(info->kernel_name, "attn_decode_paged_", 18) == 0 &&
                              strncmp(info->kernel_name, "attn_decode_paged_blocks_", 25) != 0) ||
                             strncmp(info->kernel_name, "attn_decode_paged32_", 20) == 0;
  const bool fused = append && !varlen && p->k_new.shape[1] <= 16 && info->block_m > 0 &&
                     group_rows <= info->block_m && !per_row_pages;
  return 1 + (info->num_splits > 1) + (append && !fused);
}
/* ALiBi slopes and sinks for the default shape's 8 query heads. */
static inline void dec_alibi(aotk_decode_params *p) { p->alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, 8); }
static inline void dec_sinks(aotk_decode_params *p) { p->sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, 8); }
static inline int64_t round_up_to(int64_t value, int64_t multiple) { return ceil_div(value, multiple) * multiple; }

/* The one merge row for a target and alignment (the family has no dtype or head-dim axis). */
const aotk__kernel_entry *merge_row_for(int arch, int aligned, int64_t partials, int64_t rows, int64_t head_dim);

/* The merge's typed pointer slots (fp32, fp16, bf16) and the flags naming the partials' and output's. */
int merge_slot(aotk_dtype dtype);
int32_t merge_dtype_flags(aotk_dtype partial_dtype, aotk_dtype out_dtype);

/* ---- the merge ---- */

/* A merge problem (include/aotk.h, aotk_merge_params): num_partials partial outputs and LSEs of the
 * same rows, [num_partials, batch, seqlen_q, heads, head_dim] and [num_partials, batch, heads, seqlen_q],
 * or packed ([num_partials, total_q, heads, head_dim] and [num_partials, heads, total_q]: seqlen_q is
 * total_q and batch is 1). */
typedef struct merge_shape {
  aotk_dtype partial_dtype, out_dtype;
  int64_t num_partials, batch, seqlen_q, heads, head_dim;
  bool packed, with_lse, with_sinks;
} merge_shape;

static const merge_shape default_merge_shape = {AOTK_DTYPE_FLOAT32, AOTK_DTYPE_BFLOAT16, 4, 3, 5, 8, 128,
                                                false, true, false};

aotk_merge_params merge_params_for(merge_shape s);

static inline aotk_merge_params valid_merge_params(void) { return merge_params_for(default_merge_shape); }

#endif /* AOTK_API_PROBLEMS_H */
