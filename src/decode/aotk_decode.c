/*
 * Decoding over a KV cache (aotk_attn_decode) and the merge of partial attentions (aotk_attn_merge):
 * the split-KV plan, argument packing and launches, and the queries. The arguments are validated first
 * (aotk_decode_validate.c). The kernels are kernels/attn_decode.py.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "aotk.h"
#include "aotk_decode.h"
#include "aotk_driver.h"
#include "aotk_error.h"
#include "aotk_image.h"
#include "aotk_kernel_table.h"
#include "aotk_launch.h"
#include "aotk_tma.h"

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

/* --- decoding: the plan -------------------------------------------------------------------------- */

/* kernels/attn_decode.py's FUSED_APPEND_ROWS: the most new tokens a request the decoding kernel appends. */
enum { AOTK__FUSED_APPEND_ROWS = 16 };
/* codegen/aotk_catalog.py's DECODE_SHORT_SPLIT (the short-split tile's size key, beyond any group's rows)
 * and DECODE_SHORT_SPLIT_KEYS (the longest cache it splits). */
enum { AOTK__DECODE_SHORT_SPLIT_KEY = 1 << 30, AOTK__DECODE_SHORT_SPLIT_KEYS = 8192 };
/* codegen/aotk_catalog.py's DECODE_PAGED_SHALLOW: the size key of the paged families' 16-row tile with 2
 * stages (K and V one step ahead), for grids of more programs than SMs. */
enum { AOTK__DECODE_PAGED_SHALLOW_KEY = 1 << 29 };

typedef struct decode_plan {
  const aotk__driver *driver;
  aotk__device_info device;
  aotk__image_kind kind;
  int decode_row, merge_row;  /* merge_row < 0 without splits */
  int append_row;             /* < 0 without appending, or when the decoding kernel appends (fused_append) */
  int fused_append;           /* the decoding kernel writes the step's new keys and values itself */
  int64_t row_chunks;         /* programs per group: ceil(G * seqlen_q / block_m) */
  int64_t num_splits, split_keys;
  int64_t programs;           /* the decoding grid */
  size_t workspace_bytes;
  int paged_prefill;          /* decode_row is attn_fwd_hopper_paged (paged_prefill_row) */
  int64_t paged_tiles;        /* its query tiles, which its persistent programs share */
} decode_plan;

/* How many ranges to cut each request's keys into, when batch * heads_kv * row_chunks programs cannot
 * fill the GPU. flash-attn's rule (num_splits_heuristic), with the split count that whole key blocks
 * really give: n asked splits of keys become ceil(keys / round_up(ceil(keys / n), block_n)), and the
 * efficiency of a count is the fraction of the last wave's program slots that have work, programs * count /
 * (ceil(programs * count / slots) * slots), the slots one per SM (two for the short-split tile, below);
 * take the smallest n within 95% of the best, so that a split is
 * not paid for (a merge, more partials) when it does not fill the GPU better. For example 2 requests x
 * 8 kv heads = 16 programs on 132 SMs: n = 8 gives 128 programs in one wave (97%), n = 16 gives 256 in
 * two (97%): 8. Each split keeps at least min_keys keys: 128 (a block of the d <= 128 kernels), 64 with
 * the short-split tile. On the H200
 * (bench/explore/tune_decode_jit.py, bf16 d128, with the merge below) the rounded count at 95% against
 * flash-attn's 85% of n took batch-1 MQA at 128k keys from 103 to 128 splits (46.6 to 45.7 us) and
 * batch-1 GQA at 16k from 15 to 16 (27.0 to 26.1 us), and lost nowhere by more than 1%; 128 keys a
 * split against 256 took batch 1 at 1k keys from 4 to 8 splits and 9.3 to 7.8 us. */
static int64_t split_count(int64_t keys, int64_t n, int64_t block_n) {
  return ceil_div(keys, round_up(ceil_div(keys, n), block_n));
}

static int64_t choose_splits_over(int64_t programs, int64_t keys, int64_t block_n, int multiprocessors, int slots,
                                  int64_t min_keys) {
  if (multiprocessors < 1) multiprocessors = 1;
  if (slots < 1) slots = 1;
  if (programs >= (int64_t)multiprocessors * 4 / 5) return 1;
  int64_t most = keys / min_keys; /* not ceil: 150 keys in 2 splits of at least 128 would give each 75 */
  if (most > AOTK_DECODE_MAX_SPLITS) most = AOTK_DECODE_MAX_SPLITS;
  if (most > ceil_div(keys, block_n)) most = ceil_div(keys, block_n);
  if (most <= 1) return 1;
  double efficiency[AOTK_DECODE_MAX_SPLITS + 1];
  double best = 0.0;
  for (int64_t n = 1; n <= most; n++) {
    int64_t work = programs * split_count(keys, n, block_n);
    int64_t waves = ceil_div(work, slots);
    efficiency[n] = (double)work / (double)(waves * slots);
    if (efficiency[n] > best) best = efficiency[n];
  }
  for (int64_t n = 1; n <= most; n++) {
    if (efficiency[n] >= 0.95 * best) return n;
  }
  return most;
}

static int64_t choose_splits(int64_t programs, int64_t keys, int64_t block_n, int multiprocessors) {
  return choose_splits_over(programs, keys, block_n, multiprocessors, multiprocessors, 128);
}

/* The merge's grid: a program per block_m rows and block_n head-dim columns, or per block_m rows with
 * FLAG_WHOLE_ROWS (each walks every column chunk). */
static int64_t merge_programs(int row, int64_t num_rows, int64_t head_dim, int whole_rows) {
  const aotk__kernel_entry *e = &aotk__kernel_table[row];
  const int64_t row_blocks = ceil_div(num_rows, e->block_m);
  return whole_rows ? row_blocks : row_blocks * ceil_div(head_dim, e->block_n);
}

/* Which merge kernel. The one that reads a partial a step (size key 1), unless its grid leaves SMs
 * idle: a merge of few rows (split-KV decoding at small batch, up to 256 partials) is bound by the
 * latency of its loads, and then the size key is the partial count, which from the catalog's
 * MERGE_WIDE_PARTIALS takes the kernel of one row and 32 partials a step (from MERGE_MANY_PARTIALS, 128
 * a step: a batch-1 MQA step's 128 splits merged in one step of loads). On the H200
 * (tune_decode_jit.py --merge-only, d128 fp32 partials into bf16): 32 rows x 128 partials 40 -> 5 us,
 * x 16 partials 6.5 -> 2.5 us; but 4096 rows x 4 partials 5 us a partial a step against 13-48 us with
 * the wide tiles, and 262,144 rows x 2 partials 168 against 720-3150 us: hence the test on the grid. */
static aotk_status choose_merge(aotk__variant_key *key, int64_t partials, int64_t rows, int64_t head_dim,
                                const aotk__device_info *device, int *row, aotk__image_kind *kind) {
  aotk_status status = aotk__choose_kernel(AOTK__FAMILY_ATTN_MERGE, key, 1, device, row, kind);
  if (status != AOTK_OK || merge_programs(*row, rows, head_dim, 0) >= device->multiprocessors) return status;
  return aotk__choose_kernel(AOTK__FAMILY_ATTN_MERGE, key, partials, device, row, kind);
}

static size_t round16(size_t bytes) { return (bytes + 15) & ~(size_t)15; }
static int64_t partial_stride(const aotk__decode_problem *p) { return round_up(p->head_dim_v, 16); }
static int64_t partial_rows(const aotk__decode_problem *p) { return p->batch * p->seqlen_q * p->heads_q; }
static size_t partial_out_bytes(const aotk__decode_problem *p, int64_t splits) {
  return round16((size_t)(splits * partial_rows(p) * partial_stride(p)) * sizeof(float));
}
static size_t partial_lse_bytes(const aotk__decode_problem *p, int64_t splits) {
  return round16((size_t)(splits * partial_rows(p)) * sizeof(float));
}

static void as_variant_key(const aotk__decode_problem *p, aotk__variant_key *key) {
  memset(key, 0, sizeof *key);
  key->dtype = p->dtype;
  key->head_dim_qk = p->head_dim_qk;
  key->head_dim_v = p->head_dim_v;
  key->aligned = 1;
}

/* The decoding row for `size_key` (the tuning rule's key): a paged cache whose pages hold whole key blocks
 * of that row is read with one page lookup per block (attn_decode_paged_blocks); other page sizes look
 * each key row up (attn_decode_paged32 where the caches' offsets fit in 31 bits, else attn_decode_paged);
 * a contiguous cache runs attn_decode. The block size is the chosen
 * config's, so the test follows the choice; a build without the blocks family falls back to the rows
 * one. */
static aotk_status choose_decode_row(const aotk__decode_problem *p, const aotk__variant_key *key, int64_t size_key,
                                     const aotk__device_info *device, int *row, aotk__image_kind *kind) {
  if (p->paged &&
      aotk__choose_kernel(AOTK__FAMILY_ATTN_DECODE_PAGED_BLOCKS, key, size_key, device, row, kind) == AOTK_OK &&
      p->page_size % aotk__kernel_table[*row].block_n == 0) {
    return AOTK_OK;
  }
  /* Caches whose element offsets all fit in 31 bits look key rows up with 32-bit offsets
   * (attn_decode_paged32: 5-13% faster over 16-key pages on the H200); a build without it falls back. */
  if (p->paged && p->offset32 &&
      aotk__choose_kernel(AOTK__FAMILY_ATTN_DECODE_PAGED32, key, size_key, device, row, kind) == AOTK_OK) {
    return AOTK_OK;
  }
  aotk_status status =
      aotk__choose_kernel(p->paged ? AOTK__FAMILY_ATTN_DECODE_PAGED : AOTK__FAMILY_ATTN_DECODE, key, size_key, device,
                          row, kind);
  if (status == AOTK_OK) aotk__clear_error(); /* a blocks family missing from a filtered build is no error */
  return status;
}

/* --- the paged prefill on sm_90 ------------------------------------------------------------------- */

/* The fewest queries (max_seqlen_q) a packed prefill must have to take the Gluon forward. From 64 on, the
 * decoding kernel's 64-row chunks of a group's head-major rows hold one query head's tokens each, so it
 * reads K and V once per query head as the Gluon forward does, and slower: on the H100 (4 requests, GQA
 * 32/8, 16k keys, bf16, the library's call against the Gluon kernel through the JIT in one process,
 * bench/explore/hopper/paged_prefill_threshold.py) d128 at 64 and 96 queries 538 -> 269 and 593 -> 240 us
 * over 16-key pages, 419 -> 228 and 478 -> 228 over 256-key pages; d64 2.3-2.5x. Below 64 a chunk holds
 * several heads' tokens and reads K and V once for them. With those 4 requests the Gluon forward still
 * measured 1.6-2.5x faster at 16-48 queries (32 unsplit programs of the decoding kernel against 128
 * tiles), but with 64 requests of 4k keys (d128, GQA 32/8) the decoding kernel was 2.3-2.6x faster at 8
 * and 16 queries, 1.6-1.9x at 32 and 1.1-1.3x at 48: the decoding kernel keeps those calls, unless
 * paged_prefill_short says otherwise. */
enum { AOTK__PAGED_PREFILL_MIN_QUERIES = 64 };

/* Whether a packed prefill of fewer than AOTK__PAGED_PREFILL_MIN_QUERIES queries takes the Gluon forward
 * all the same: where the decoding kernel would run its 64-row tile (G * max_seqlen_q > 32) and the Gluon
 * forward's tiles (a 128-row tile per request and query head) fit one wave: the wave takes about one
 * tile's time, where the decoding kernel's programs, too few to fill the SMs and too many to split their
 * keys (from 0.8 of the SMs' count), each stream a request's whole cache at a fraction of the GPU's
 * bandwidth. Measured on the H100 before packed calls split at all
 * (bench/explore/hopper/paged_prefill_threshold.py --graphs, CUDA-graph replays in one process, bf16 d128,
 * GQA 32/8, 16-48 queries, 2k and 16k keys, pages of 16 and 256 keys): 1.8-2.5x faster at 1, 2 and 4
 * requests (32-128 tiles), at 16k keys 205-232 us against 412-539. At 8 requests (256 tiles, two waves)
 * it won on 16-key pages (1.16-1.42x) and split even on 256-key pages (0.93-1.13x); from 16 requests the
 * decoding kernel won at 16 and 32 queries (the Gluon forward 0.36-0.80x): the rule takes one wave only.
 * Within it, at 1 and 4 requests, the forward was also faster at d64 (1.96-2.52x) and d256 (1.47-1.93x)
 * over GQA 32/8, and at d128 over MQA 32/1 (1.76-2.50x) and MHA 32/32 at 48 queries (1.25-2.50x); MHA at
 * 16 queries (16 rows a group, which the rule leaves to the decoding kernel's 16-row tile) 1.02-1.51x.
 * Where the decoding kernel has few enough tiles to split them, paged_prefill_split_wins takes the call
 * back. */
static int paged_prefill_short(const aotk__decode_problem *p, const aotk__device_info *device) {
  return p->group_size * p->seqlen_q > 32 && p->batch * p->heads_q <= (int64_t)device->multiprocessors;
}

/* The fewest keys a split of the paged prefill takes: 4 blocks of 128 rows. */
enum { AOTK__PAGED_PREFILL_MIN_SPLIT_KEYS = 512 };

/* How many ranges the paged prefill cuts each request's keys into: where its tiles fill at most half
 * the SMs, as many as fit one wave (floor(SMs / tiles)), each of at least
 * AOTK__PAGED_PREFILL_MIN_SPLIT_KEYS keys of max_seqlen_k (or the capacity), at most
 * AOTK_DECODE_MAX_SPLITS; num_splits 1 asks for none (a count above 1 runs the decoding kernel). A
 * one-wave forward takes about one tile's time over the whole cache however few tiles it has: split,
 * its tiles fill the SMs, and the fp32 partials cost a write, a read and the merge's launch. On the H100
 * (paged_prefill_threshold.py --graphs, bf16 d128, 256-key pages, against the unsplit forward through
 * the JIT): 1 request over 16k keys, GQA 32/8, 128 queries (32 tiles, 4 splits) 87 against 207 us, 256
 * queries (64 tiles, 2 splits) 142 against 207, 8/1 heads at 64-1024 queries 45-139 against 204-207,
 * 2 requests of 512 138 against 206; 128 queries over 4k keys 48 against 60. (bench_decode.py --prefill
 * has the 128- and 256-query rows.) */
static int64_t paged_prefill_splits(const aotk__decode_problem *p, int multiprocessors, int64_t tiles) {
  const int64_t sms = multiprocessors > 0 ? multiprocessors : 1;
  if (p->num_splits_asked == 1 || tiles < 1 || 2 * tiles > sms) return 1;
  int64_t n = sms / tiles;
  if (n > p->size_hint / AOTK__PAGED_PREFILL_MIN_SPLIT_KEYS) n = p->size_hint / AOTK__PAGED_PREFILL_MIN_SPLIT_KEYS;
  if (n > AOTK_DECODE_MAX_SPLITS) n = AOTK_DECODE_MAX_SPLITS;
  return n > 1 ? n : 1;
}

/* Whether the split decoding path keeps a packed prefill that the rules above give the Gluon forward,
 * which then runs one wave of tiles (a 128-row tile per request, query head and 128 queries). Its work
 * is those tiles over the whole cache, split or not; the decoding kernel's is its 64-row tiles (each
 * request and kv head's G x max_seqlen_q rows in chunks of 64) over the cache, split to fill the SMs,
 * at a lower rate. Where the forward splits its keys (paged_prefill_splits), the decoding kernel keeps
 * the call while its tiles are at most half the forward's (a quarter of the rows); where the forward's
 * tiles fill more than half the SMs and it runs unsplit, about one tile's time over the whole cache,
 * while the decoding kernel's tiles are under 0.4 of the SMs (0.5 from head dim 192).
 * Measured on the H100 (bench/explore/hopper/paged_prefill_threshold.py --graphs --rows, CUDA-graph
 * replays in one process, bf16, 16k keys, 256-key pages; the library with this rule, the library with
 * the forward split on every one-wave call, and a build with the decoding path alone):
 * - Forward split, decoding tiles at most half its tiles (an eighth of the rows): the decoding kernel
 *   1.13-1.43x faster at 16 queries (1 request over GQA 32/8, MQA 32/1 and d256, 2 requests: 52-88 us
 *   against 71-122); at 4k keys the forward split 1.06x faster (34.6 against 36.6 us).
 * - Forward split, more decoding tiles: the forward 1.04x at 48 queries and 1.21-2.2x elsewhere (1
 *   request of 64 and 96 queries 78-80 against 127-146 us, 2 of 48 127 against 154, 8/1 heads at 64
 *   and 256 queries 45-58 against 52-117, d256 at 128 153 against 337).
 * - Forward unsplit (its tiles filling more than half the SMs), against it before it split (nineteenth
 *   session): d128 GQA 32/8 at 8-48 decoding tiles 63-179 us against 207-219, at 64 tiles the forward
 *   1.03-1.32x faster; MQA, MHA, d64 and 4k keys on the same side of the bound; d256 the decoding
 *   kernel at 64 tiles still 1.10-1.24x faster, hence the wider bound from head dim 192 ((192, 128) and
 *   d256 between 64 and 128 tiles not measured). */
static int paged_prefill_split_wins(const aotk__decode_problem *p, const aotk__device_info *device) {
  const int64_t sms = device->multiprocessors > 0 ? device->multiprocessors : 1;
  const int64_t forward_tiles = p->batch * p->heads_q * ceil_div(p->seqlen_q, 128);
  const int64_t decode_tiles = p->batch * p->heads_kv * ceil_div(p->group_size * p->seqlen_q, 64);
  if (forward_tiles > sms) return 0;
  if (paged_prefill_splits(p, device->multiprocessors, forward_tiles) > 1) return 2 * decode_tiles <= forward_tiles;
  return (p->head_dim_qk > 128 ? 4 : 5) * decode_tiles < 2 * sms;
}
/* The most queries (max_seqlen_q) and keys (the capacity) it takes: the Gluon forward's window arithmetic
 * adds a row, the diagonal and a bound clamped to +-2^30 in int32, which holds for lengths up to 2^30 less
 * two blocks of rows (aotk_attn_validate.c's AOTK__MAX_SEQLEN, which the dense forward validates). A
 * decoding call may hold 2^30 keys (AOTK_DECODE_MAX_CAPACITY): those run the decoding kernel. */
enum { AOTK__PAGED_PREFILL_MAX_LENGTH = (1 << 30) - 512 };

/* Packed q or out [total_q, heads, head_dim] as the 4-d [1, total_q, heads, head_dim] the descriptors
 * view. (The batch of one's stride is never read: aotk__tma_view_ok and the encoding skip it.) */
static aotk_tensor packed_as_4d(const aotk_tensor *t) {
  aotk_tensor v = *t;
  v.rank = 4;
  v.shape[0] = 1, v.shape[1] = t->shape[0], v.shape[2] = t->shape[1], v.shape[3] = t->shape[2];
  v.strides[0] = t->strides[0], v.strides[1] = t->strides[0], v.strides[2] = t->strides[1];
  v.strides[3] = t->strides[2];
  return v;
}

/* The row of attn_fwd_hopper_paged (kernels/attn_fwd_hopper.py: the sm_90 forward's schedule, K and V
 * through the block table by TMA) for a packed prefill over a paged cache, or -1: sm_90 cubins, a page
 * size that is a power of two of at least 16 rows (the boxes are 16 rows, or 64 from 64-row pages: the
 * family's size key is the page size), no appending (softcap and ALiBi in its EXTRAS rows), at least
 * AOTK__PAGED_PREFILL_MIN_QUERIES queries (or fewer where paged_prefill_short holds), not where the
 * decoding kernel's split wins (paged_prefill_split_wins; num_splits 1 asks for no split, and a split
 * asked for keeps the decoding kernel), head dims the family has exactly ((64, 64), (128, 128), (192, 128), (256, 256)), and q and both caches readable by
 * TMA. Sets no error. On the H100
 * (bench/explore/hopper/paged_prefill_jit.py, bf16 d64 and d128, 4 requests of 4k-16k keys, chunks of
 * 256-4096 causal queries) it runs at 0.87-1.00 of the dense varlen forward over the same keys with
 * 16-row boxes and 0.92-1.06 with 64-row ones, where the decoding kernel's 64-row tiles ran 0.43-0.57. */
static int paged_prefill_row(const aotk__decode_problem *p, const aotk_decode_params *params,
                             const aotk__device_info *device, aotk__image_kind *kind) {
  int arch, row = -1;
  if (!p->varlen || !p->paged || p->append || p->num_splits_asked > 1 ||
      (p->seqlen_q < AOTK__PAGED_PREFILL_MIN_QUERIES && !paged_prefill_short(p, device)) ||
      (p->num_splits_asked != 1 && paged_prefill_split_wins(p, device)) ||
      p->seqlen_q > AOTK__PAGED_PREFILL_MAX_LENGTH || p->capacity > AOTK__PAGED_PREFILL_MAX_LENGTH ||
      p->page_size < 16 || (p->page_size & (p->page_size - 1)) != 0) {
    return -1;
  }
  if (aotk__choose_target(device, &arch, kind) != AOTK_OK || arch != 90 || *kind != AOTK__IMAGE_CUBIN) {
    aotk__clear_error();
    return -1;
  }
  /* (out leaves by TMA stores where it can, else by masked stores: launch_paged_prefill.) */
  const aotk_tensor q = packed_as_4d(&params->q);
  if (!aotk__tma_view_ok(&q) || !aotk__tma_view_ok(&params->k_cache) || !aotk__tma_view_ok(&params->v_cache)) return -1;
  /* The forward's int32 sizes and strides: the descriptors' shapes, out's token and head strides and
   * lse's head stride (the caches' strides go in the descriptors, 64-bit). */
  const int64_t int32_fields[] = {params->q.shape[0], params->k_cache.shape[0], params->v_cache.shape[0],
                                  params->out.strides[0], params->out.strides[1],
                                  p->write_lse ? params->lse.strides[0] : 0};
  for (size_t i = 0; i < sizeof int32_fields / sizeof int32_fields[0]; i++) {
    if (int32_fields[i] > INT32_MAX) return -1;
  }
  aotk__variant_key key;
  as_variant_key(p, &key);
  key.extras = p->softcap > 0.0f || p->alibi; /* the forward's EXTRAS rows compute softcap and ALiBi */
  if (aotk__choose_kernel(AOTK__FAMILY_ATTN_FWD_HOPPER_PAGED, &key, p->page_size, device, &row, kind) != AOTK_OK) {
    aotk__clear_error();
    return -1;
  }
  const aotk__kernel_entry *e = &aotk__kernel_table[row];
  if (e->head_dim_qk != p->head_dim_qk || e->head_dim_v != p->head_dim_v) return -1;
  return row;
}

/* Its persistent grid over num_tiles query tiles: one program per SM, or one per tile when there are fewer
 * tiles, or when a program's ring counters (int32, every key block of its tiles) could wrap. */
static int64_t paged_prefill_grid(const aotk__decode_problem *p, const aotk__kernel_entry *e, int multiprocessors,
                                  int64_t num_tiles) {
  const int64_t sms = multiprocessors > 0 ? multiprocessors : 1;
  if (num_tiles <= sms || ceil_div(num_tiles, sms) * ceil_div(p->capacity, e->block_n) >= INT32_MAX) return num_tiles;
  return sms;
}

/* The workspace and the merge of a split call's partials. The merge has no dtype or head-dim axis (one
 * kernel serves them all: its rows say 0), so only the alignment chooses (the partials are padded rows;
 * out was checked aligned), and choose_merge's rule. */
static aotk_status plan_split_merge(const aotk__decode_problem *p, decode_plan *plan) {
  plan->workspace_bytes = partial_out_bytes(p, plan->num_splits) + partial_lse_bytes(p, plan->num_splits);
  aotk__variant_key key;
  memset(&key, 0, sizeof key);
  key.aligned = 1;
  return choose_merge(&key, plan->num_splits, partial_rows(p), p->head_dim_v, &plan->device, &plan->merge_row,
                      &plan->kind);
}

/* `stream` is checked to belong to the current context before anything is chosen for its device
 * (aotk__check_stream_context); the query, which launches nothing, passes NULL. */
static aotk_status plan_decode(const aotk__decode_problem *p, const aotk_decode_params *params, aotk_stream stream,
                               decode_plan *plan) {
  memset(plan, 0, sizeof *plan);
  aotk_status status = aotk__driver_get(&plan->driver);
  if (status != AOTK_OK) return status;
  if ((status = aotk__current_device(plan->driver, &plan->device)) != AOTK_OK ||
      (status = aotk__check_stream_context(plan->driver, &plan->device, stream)) != AOTK_OK) {
    return status;
  }
  aotk__variant_key key;
  as_variant_key(p, &key);
  if ((plan->decode_row = paged_prefill_row(p, params, &plan->device, &plan->kind)) >= 0) {
    const aotk__kernel_entry *e = &aotk__kernel_table[plan->decode_row];
    plan->paged_prefill = 1;
    plan->row_chunks = 1, plan->num_splits = 1, plan->split_keys = p->capacity;
    plan->paged_tiles = p->batch * p->heads_q * ceil_div(p->seqlen_q, e->block_m);
    const int64_t splits = paged_prefill_splits(p, plan->device.multiprocessors, plan->paged_tiles);
    if (splits > 1) {
      plan->split_keys = round_up(ceil_div(p->size_hint, splits), e->block_n);
      plan->num_splits = ceil_div(p->size_hint, plan->split_keys);
      plan->paged_tiles *= plan->num_splits;
    }
    plan->programs = paged_prefill_grid(p, e, plan->device.multiprocessors, plan->paged_tiles);
    plan->append_row = -1, plan->merge_row = -1;
    return plan->num_splits > 1 ? plan_split_merge(p, plan) : AOTK_OK;
  }
  const int64_t group_rows = p->group_size * p->seqlen_q;
  /* The tuning rule's size key: the group's rows, below the keys of the short-split tile and of the paged
   * families' 2-stage row (the catalog's configs by size end at 33 rows). */
  const int64_t size_key =
      group_rows < AOTK__DECODE_PAGED_SHALLOW_KEY ? group_rows : AOTK__DECODE_PAGED_SHALLOW_KEY - 1;
  if ((status = choose_decode_row(p, &key, size_key, &plan->device, &plan->decode_row, &plan->kind)) != AOTK_OK) {
    return status;
  }
  const aotk__kernel_entry *e = &aotk__kernel_table[plan->decode_row];
  plan->row_chunks = ceil_div(group_rows, e->block_m);
  int64_t programs = p->batch * p->heads_kv * plan->row_chunks;
  int64_t splits = p->num_splits_asked > 0 ? p->num_splits_asked
                                           : choose_splits(programs, p->size_hint, e->block_n, plan->device.multiprocessors);
  /* A group of more rows than the smallest tile (MQA's 32 query heads) keeps its tile where it splits.
   * Running the 16-row tile in row chunks instead (each chunk reading the group's keys, the second time
   * mostly from L2; no partials, no merge) measured 55.2 -> 52.4 us on the H100 at batch 64 and 4k keys
   * (bf16 d128), but on the H200 it reads at L2's rate, not HBM's: the 32-row tile's 2 splits against
   * the chunks ran 43.7 against 53.2 us at batch 64 and 4k keys, 76.5 against 101.2 at 8k and 28.0
   * against 29.0 at 2k (docs/design.md, "One program per group"), so that rule is gone. */
  /* The short-split tile (codegen/aotk_catalog.py, DECODE_SHORT_SPLIT: 64 keys a step, 2 stages): where
   * the 16-row tile would split a cache of at most AOTK__DECODE_SHORT_SPLIT_KEYS keys, it takes the
   * split instead, filling two program slots per SM with splits of as few as 64 keys. Its programs read
   * less and more of them are resident, so a short step waits for fewer round trips of loads: on the
   * H100 (bf16 d128, GQA 32/8, the kernel and its merge) batch 1 at 1k keys 8.2 -> 6.9 us, batch 8 at
   * 1k 13.7 -> 13.1, 16-key pages 8-10% faster; 1-2% slower from 16k keys, hence the bound. Only builds
   * with the tile have it (sm_90, head dims up to 128); a caller's split count is kept. */
  if (splits > 1 && !p->varlen && p->num_splits_asked == 0 && e->block_m == 16 &&
      p->size_hint <= AOTK__DECODE_SHORT_SPLIT_KEYS) {
    /* Its family by choose_decode_row's rule, for its own block (pages of 64 keys are whole blocks of it). */
    int short_row = -1;
    aotk__image_kind short_kind;
    const bool found =
        choose_decode_row(p, &key, AOTK__DECODE_SHORT_SPLIT_KEY, &plan->device, &short_row, &short_kind) == AOTK_OK &&
        aotk__kernel_table[short_row].min_seqlen == AOTK__DECODE_SHORT_SPLIT_KEY;
    if (found) {
      const aotk__kernel_entry *s = &aotk__kernel_table[short_row];
      const int sms = plan->device.multiprocessors > 0 ? plan->device.multiprocessors : 1;
      const int64_t n = choose_splits_over(programs, p->size_hint, s->block_n, sms, 2 * sms, 64);
      if (s->block_m == e->block_m && n > 1) plan->decode_row = short_row, plan->kind = short_kind, e = s, splits = n;
    }
    aotk__clear_error();
  }
  /* Split lengths are whole key blocks; asking for more splits than blocks gives one block each. */
  plan->split_keys = round_up(ceil_div(p->size_hint, splits), e->block_n);
  plan->num_splits = ceil_div(p->size_hint, plan->split_keys);
  if (plan->num_splits < 1) plan->num_splits = 1;
  if (__builtin_mul_overflow(programs, plan->num_splits, &plan->programs) || plan->programs > INT32_MAX) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW,
                      "batch * heads_kv * ceil(G * seqlen_q / %d) * num_splits = %lld programs exceeds the grid limit of 2^31 - 1",
                      (int)e->block_m, (long long)programs * plan->num_splits);
  }
  /* The paged families' tile streams K and V two steps ahead (their page ids loaded a step before:
   * kernels/attn_decode.py), which holds 139 KB of shared memory at 16 x 128 with 3 stages, one program
   * an SM. A grid of more programs than SMs takes the same tile with 2 stages (one step ahead, three
   * programs an SM), where the catalog has it (sm_90, head dims up to 128). Through the JIT (H200, bf16
   * d128, GQA 32/8): batch 64 at 1k keys 85.1 -> 73.9 us over 16-key pages and 76.7 -> 68.9 over 256-key
   * pages, batch 256 at 1k 326.9 -> 275.9 and 278.9 -> 256.5; one wave keeps 3 stages (batch 16 at 32k
   * 535.6 us against 686.1 with 2). */
  if (p->paged && e->min_seqlen != AOTK__DECODE_SHORT_SPLIT_KEY && plan->programs > plan->device.multiprocessors) {
    int shallow_row = -1;
    aotk__image_kind shallow_kind;
    if (choose_decode_row(p, &key, AOTK__DECODE_PAGED_SHALLOW_KEY, &plan->device, &shallow_row, &shallow_kind) ==
            AOTK_OK &&
        aotk__kernel_table[shallow_row].min_seqlen == AOTK__DECODE_PAGED_SHALLOW_KEY &&
        aotk__kernel_table[shallow_row].family == e->family && aotk__kernel_table[shallow_row].block_m == e->block_m &&
        aotk__kernel_table[shallow_row].block_n == e->block_n) {
      plan->decode_row = shallow_row, plan->kind = shallow_kind, e = &aotk__kernel_table[shallow_row];
    }
    aotk__clear_error();
  }
  plan->append_row = -1;
  /* Appending: the decoding kernel writes the new rows itself when each (kv head, split) has one program
   * (one row chunk a group), there are at most FUSED_APPEND_ROWS of them a request (attn_decode.py) and
   * the cache is contiguous or its pages hold whole key blocks (the per-row page lookup's kernel has no
   * such code: it slowed its loop): each program writes the ones in its own key range, which only it
   * reads. Else attn_cache_append runs first. On the H100 the separate kernel cost a one-token step
   * 1.7-3.0 us up to batch 16, the fused writes 0.1-1.4 us (4 at batch 64, 0.1% of its step; design.md). */
  plan->fused_append = p->append && !p->varlen && plan->row_chunks == 1 &&
                       p->seqlen_new <= AOTK__FUSED_APPEND_ROWS &&
                       aotk__kernel_table[plan->decode_row].family != AOTK__FAMILY_ATTN_DECODE_PAGED &&
                       aotk__kernel_table[plan->decode_row].family != AOTK__FAMILY_ATTN_DECODE_PAGED32;
  if (p->append && !plan->fused_append &&
      (status = aotk__choose_kernel(AOTK__FAMILY_ATTN_CACHE_APPEND, &key, 1, &plan->device, &plan->append_row,
                                    &plan->kind)) != AOTK_OK) {
    return status;
  }
  plan->merge_row = -1;
  return plan->num_splits > 1 ? plan_split_merge(p, plan) : AOTK_OK;
}

static uint32_t decode_features(const aotk__decode_problem *p, const decode_plan *plan) {
  const aotk__kernel_entry *e = &aotk__kernel_table[plan->decode_row];
  uint32_t f = 0;
  if (p->causal) f |= AOTK_FEATURE_CAUSAL;
  if (p->window_left >= 0 || (p->window_right >= 0 && !p->causal)) f |= AOTK_FEATURE_WINDOW;
  if (p->softcap > 0.0f) f |= AOTK_FEATURE_SOFTCAP;
  if (p->alibi) f |= AOTK_FEATURE_ALIBI;
  if (p->sinks) f |= AOTK_FEATURE_SINKS;
  if (e->head_dim_qk > p->head_dim_qk || e->head_dim_v > p->head_dim_v) f |= AOTK_FEATURE_PADDED_HEAD_DIM;
  if (p->paged) f |= AOTK_FEATURE_PAGED_KV;
  if (plan->num_splits > 1) f |= AOTK_FEATURE_SPLIT_KV;
  if (p->append) f |= AOTK_FEATURE_APPEND_KV;
  if (p->leftpad) f |= AOTK_FEATURE_LEFTPAD_KV;
  if (p->varlen) f |= AOTK_FEATURE_VARLEN;
  if (plan->paged_prefill) f |= AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED;
  if (plan->paged_prefill && e->extras) f |= AOTK_FEATURE_EXTRAS_KERNEL;
  return f;
}

static void set_num_splits(aotk_kernel_info *info, int64_t num_splits) {
  if (info->struct_size >= offsetof(aotk_kernel_info, num_splits) + sizeof info->num_splits) {
    info->num_splits = (int32_t)num_splits;
  }
}

/* --- launches ------------------------------------------------------------------------------------ */

/* Parameter kinds, in the catalog's order (codegen/aotk_catalog.py): p pointer, l int64, i int32, f fp32. */
static const char decode_param_kinds[] =
    "ppppp" "pppp" "pp" "pp" "pp" "llllllllllllllllll" "llll" "iiiiiiiiiiiiiii" "fff";
static const char merge_param_kinds[] = "ppp" "p" "ppp" "ppp" "llllllllllllll" "iiiiii";
static const char append_param_kinds[] = "pppp" "pp" "llllllllllll" "l" "iiiiiii";

/* attn_common.py's flags, and attn_decode.py's. */
enum {
  FLAG_WRITE_LSE = 1,
  FLAG_VARLEN = 2,
  FLAG_SOFTCAP = 8,
  FLAG_ALIBI = 16,
  FLAG_SINKS = 32,
  FLAG_PAGED = 256,
  FLAG_SPLIT = 512,
  FLAG_PARTIAL_FP16 = 1024,
  FLAG_PARTIAL_BF16 = 2048,
  FLAG_OUT_FP16 = 4096,
  FLAG_OUT_BF16 = 8192,
  FLAG_WHOLE_ROWS = 16384,
  FLAG_FUSED_APPEND = 32768,
  FLAG_LEFTPAD = 65536,
};

/* The merge's arguments: partials and output as typed pointer triples plus int64 strides; cu_seqlens_q
 * (with FLAG_VARLEN) maps a packed decoding call's (request, token) rows to out's and lse's packed rows. */
typedef struct merge_args {
  CUdeviceptr partial[3], lse_partial, out[3], lse, sinks, cu_seqlens_q;
  int64_t strides[14]; /* partial (p, b, s, h), lse partial (p, b, h, s), out (b, s, h), lse (b, h, s) */
  int32_t num_partials, seqlen_q, heads, num_rows, head_dim8, flags;
} merge_args;

static int dtype_slot(aotk_dtype dtype) { return dtype == AOTK_DTYPE_FLOAT16 ? 1 : dtype == AOTK_DTYPE_BFLOAT16 ? 2 : 0; }
static int partial_flag(aotk_dtype dtype) {
  return dtype == AOTK_DTYPE_FLOAT16 ? FLAG_PARTIAL_FP16 : dtype == AOTK_DTYPE_BFLOAT16 ? FLAG_PARTIAL_BF16 : 0;
}
static int out_flag(aotk_dtype dtype) {
  return dtype == AOTK_DTYPE_FLOAT16 ? FLAG_OUT_FP16 : dtype == AOTK_DTYPE_BFLOAT16 ? FLAG_OUT_BF16 : 0;
}

/* Whether a program per column chunk would pass the grid limit of 2^31 - 1: 2^31 - 1 rows of head dim
 * 2^30 (the most validation lets through) would ask 2^53 programs. Row blocks alone fit (2^28 at most),
 * so such a merge runs whole rows. */
static int merge_chunks_overflow(int row, int64_t num_rows, int64_t head_dim) {
  return merge_programs(row, num_rows, head_dim, 0) > INT32_MAX;
}

static aotk_status launch_merge(const aotk__driver *driver, int row, CUkernel kernel, merge_args *a, aotk_stream stream) {
  void *args[] = {&a->partial[0], &a->partial[1], &a->partial[2], &a->lse_partial, &a->out[0], &a->out[1], &a->out[2],
                  &a->lse, &a->sinks, &a->cu_seqlens_q, &a->strides[0], &a->strides[1], &a->strides[2], &a->strides[3],
                  &a->strides[4], &a->strides[5], &a->strides[6], &a->strides[7], &a->strides[8], &a->strides[9],
                  &a->strides[10], &a->strides[11], &a->strides[12], &a->strides[13], &a->num_partials, &a->seqlen_q,
                  &a->heads, &a->num_rows, &a->head_dim8, &a->flags};
  _Static_assert(sizeof args / sizeof args[0] == sizeof merge_param_kinds - 1, "one argument per parameter");
  return aotk__launch_row(driver, row, kernel, sizeof args / sizeof args[0], args,
                          merge_programs(row, a->num_rows, (int64_t)a->head_dim8 * 8, a->flags & FLAG_WHOLE_ROWS), stream);
}

/* The merge of a split call's partials, [split, batch, seqlen_q, heads_q, round_up(head_dim_v, 16)] and
 * [split, batch, heads_q, seqlen_q] in the workspace, into out and lse (strides (batch, sequence, head)
 * and (batch, head) as the kernels saw them), the sinks joining here. Packed queries keep [batch,
 * max_seqlen_q] rows in the partials; the merge writes token t of request b to out's row
 * cu_seqlens_q[b] + t (FLAG_VARLEN). */
static aotk_status launch_split_merge(const aotk__decode_problem *p, const decode_plan *plan, CUkernel kernel,
                                      CUdeviceptr out_partial, CUdeviceptr lse_partial, CUdeviceptr out,
                                      CUdeviceptr lse, CUdeviceptr sinks, CUdeviceptr cu_seqlens_q,
                                      const int64_t out_strides[3], const int64_t lse_strides[2], aotk_stream stream) {
  merge_args m;
  memset(&m, 0, sizeof m);
  const int64_t pd = partial_stride(p);
  m.partial[0] = out_partial;
  m.lse_partial = lse_partial;
  m.out[dtype_slot(p->dtype)] = out;
  m.lse = lse;
  m.sinks = sinks;
  m.cu_seqlens_q = cu_seqlens_q;
  const int64_t merge_strides[14] = {partial_rows(p) * pd, p->seqlen_q * p->heads_q * pd, p->heads_q * pd, pd,
                                     partial_rows(p), p->heads_q * p->seqlen_q, p->seqlen_q, 1,
                                     out_strides[0], out_strides[1], out_strides[2], lse_strides[0], lse_strides[1], 1};
  memcpy(m.strides, merge_strides, sizeof m.strides);
  m.num_partials = (int32_t)plan->num_splits;
  m.seqlen_q = (int32_t)p->seqlen_q;
  m.heads = (int32_t)p->heads_q;
  m.num_rows = (int32_t)partial_rows(p);
  m.head_dim8 = (int32_t)(p->head_dim_v / 8);
  m.flags = out_flag(p->dtype) | (p->write_lse ? FLAG_WRITE_LSE : 0) | (p->sinks ? FLAG_SINKS : 0) |
            (p->varlen ? FLAG_VARLEN : 0) |
            (merge_chunks_overflow(plan->merge_row, m.num_rows, p->head_dim_v) ? FLAG_WHOLE_ROWS : 0);
  return launch_merge(plan->driver, plan->merge_row, kernel, &m, stream);
}

/* attn_fwd_hopper_paged's parameters (codegen/aotk_catalog.py, ATTN_FWD_HOPPER_PAGED_PARAMS): the forward's
 * ("lii" a tensor's strides), four descriptors, the tile count, then the block table, lengths, left
 * padding, the table's row stride and the page size's log2, and the split's: the partial outputs, the
 * partials' and their LSEs' split strides, the split count and the keys a split. */
static const char paged_prefill_param_kinds[] = "ppppp" "pp" "ppp" "lii" "lii" "lii" "lii" "lil" "iiiii" "iiiii" "fff"
                                                "if" "tttt" "i" "ppp" "l" "i" "p" "ll" "ii";

/* Bits of the Gluon forward's flags (kernels/attn_hopper_common.py) beside FLAG_WRITE_LSE, FLAG_VARLEN,
 * FLAG_SOFTCAP, FLAG_ALIBI and FLAG_SINKS, which it shares with the decoding kernel. */
enum { FWD_FLAG_REVERSE = 128, FWD_FLAG_O_TMA = 256, FWD_FLAG_LEFTPAD = 512, FWD_FLAG_SPLIT_OUT = 1024 };

static aotk_status launch_paged_prefill(const aotk_decode_params *params, const aotk__decode_problem *p,
                                        const decode_plan *plan, void *workspace, aotk_stream stream);

static aotk_status launch_decode(const aotk_decode_params *params, const aotk__decode_problem *p,
                                 const decode_plan *plan, void *workspace, aotk_stream stream) {
  if (plan->paged_prefill) return launch_paged_prefill(params, p, plan, workspace, stream);
  /* Every kernel is loaded before the first launch: a load failure launches nothing. */
  int rows[3] = {plan->decode_row, 0, 0};
  const char *kinds[3] = {decode_param_kinds, NULL, NULL};
  int count = 1, merge_index = 0, append_index = 0;
  if (plan->merge_row >= 0) merge_index = count, rows[count] = plan->merge_row, kinds[count++] = merge_param_kinds;
  if (plan->append_row >= 0) append_index = count, rows[count] = plan->append_row, kinds[count++] = append_param_kinds;
  CUkernel kernels[3];
  aotk_status status = aotk__load_rows(plan->driver, rows, kinds, count, plan->kind, plan->device.device, kernels);
  if (status != AOTK_OK) return status;
  const int split = plan->num_splits > 1;
  CUdeviceptr q = (CUdeviceptr)(uintptr_t)params->q.data, k = (CUdeviceptr)(uintptr_t)params->k_cache.data;
  CUdeviceptr v = (CUdeviceptr)(uintptr_t)params->v_cache.data, out = (CUdeviceptr)(uintptr_t)params->out.data;
  CUdeviceptr lse = p->write_lse ? (CUdeviceptr)(uintptr_t)params->lse.data : 0;
  CUdeviceptr table = p->paged ? (CUdeviceptr)(uintptr_t)params->block_table.data : 0;
  CUdeviceptr seqlens = (CUdeviceptr)(uintptr_t)params->cache_seqlens.data;
  CUdeviceptr cu_seqlens_q = p->varlen ? (CUdeviceptr)(uintptr_t)params->cu_seqlens_q.data : 0;
  CUdeviceptr leftpad = p->leftpad ? (CUdeviceptr)(uintptr_t)params->cache_leftpad.data : 0;
  CUdeviceptr alibi = p->alibi ? (CUdeviceptr)(uintptr_t)params->alibi_slopes.data : 0;
  CUdeviceptr sinks = p->sinks ? (CUdeviceptr)(uintptr_t)params->sinks.data : 0;
  CUdeviceptr out_partial = split ? (CUdeviceptr)(uintptr_t)workspace : 0;
  CUdeviceptr lse_partial = split ? out_partial + partial_out_bytes(p, plan->num_splits) : 0;
  const aotk_tensor *qt = &params->q, *kt = &params->k_cache, *vt = &params->v_cache, *ot = &params->out;
  /* k_new and v_new for the decoding kernel when it appends (NULL and strides 0 otherwise). */
  const aotk_tensor *kn = &params->k_new, *vn = &params->v_new;
  CUdeviceptr k_new = p->append ? (CUdeviceptr)(uintptr_t)kn->data : 0;
  CUdeviceptr v_new = p->append ? (CUdeviceptr)(uintptr_t)vn->data : 0;
  CUdeviceptr fused_k_new = plan->fused_append ? k_new : 0, fused_v_new = plan->fused_append ? v_new : 0;
  const int fused = plan->fused_append;
  int64_t strides[22] = {qt->strides[0], qt->strides[1], qt->strides[2], kt->strides[0], kt->strides[1], kt->strides[2],
                         vt->strides[0], vt->strides[1], vt->strides[2], ot->strides[0], ot->strides[1], ot->strides[2],
                         fused ? kn->strides[0] : 0, fused ? kn->strides[1] : 0, fused ? kn->strides[2] : 0,
                         fused ? vn->strides[0] : 0, fused ? vn->strides[1] : 0, fused ? vn->strides[2] : 0,
                         p->write_lse ? params->lse.strides[0] : 0, p->write_lse ? params->lse.strides[1] : 0,
                         p->paged ? params->block_table.strides[0] : 0, p->alibi_batch_stride};
  if (p->varlen) {
    /* The kernel's view of packed q, out [total_q, heads_q, d] and lse [heads_q, total_q]: batch strides 0,
     * each request's first row read from cu_seqlens_q. */
    const int64_t packed[6] = {0, qt->strides[0], qt->strides[1], 0, ot->strides[0], ot->strides[1]};
    memcpy(strides, packed, 3 * sizeof(int64_t));
    memcpy(strides + 9, packed + 3, 3 * sizeof(int64_t));
    strides[18] = 0;
    strides[19] = p->write_lse ? params->lse.strides[0] : 0;
  }
  int32_t ints[15] = {(int32_t)p->batch, (int32_t)p->seqlen_q, (int32_t)p->heads_q, (int32_t)p->group_size,
                      (int32_t)p->capacity, (int32_t)p->page_size, (int32_t)plan->num_splits,
                      (int32_t)plan->split_keys, (int32_t)plan->row_chunks, (int32_t)(p->head_dim_qk / 8),
                      (int32_t)(p->head_dim_v / 8), p->window_left, p->window_right, 0, (int32_t)p->seqlen_new};
  ints[13] = (p->write_lse ? FLAG_WRITE_LSE : 0) | (p->softcap > 0.0f ? FLAG_SOFTCAP : 0) | (p->alibi ? FLAG_ALIBI : 0) |
             (p->sinks ? FLAG_SINKS : 0) | (p->paged ? FLAG_PAGED : 0) | (split ? FLAG_SPLIT : 0) |
             (p->varlen ? FLAG_VARLEN : 0) | (fused ? FLAG_FUSED_APPEND : 0) | (p->leftpad ? FLAG_LEFTPAD : 0);
  float qk_scale_log2 = p->softmax_scale * 1.4426950408889634f;
  float softcap_scale = p->softcap > 0.0f ? p->softmax_scale / p->softcap : 0.0f;
  float softcap_log2 = p->softcap * 1.4426950408889634f;
  void *args[] = {&q, &k, &v, &out, &lse, &table, &seqlens, &cu_seqlens_q, &leftpad, &alibi, &sinks, &out_partial,
                  &lse_partial, &fused_k_new, &fused_v_new, &strides[0], &strides[1], &strides[2], &strides[3],
                  &strides[4], &strides[5], &strides[6], &strides[7], &strides[8], &strides[9], &strides[10], &strides[11],
                  &strides[12], &strides[13], &strides[14], &strides[15], &strides[16], &strides[17], &strides[18],
                  &strides[19], &strides[20], &strides[21], &ints[0], &ints[1], &ints[2], &ints[3], &ints[4],
                  &ints[5], &ints[6], &ints[7], &ints[8], &ints[9], &ints[10], &ints[11], &ints[12], &ints[13],
                  &ints[14],
                  &qk_scale_log2, &softcap_scale, &softcap_log2};
  _Static_assert(sizeof args / sizeof args[0] == sizeof decode_param_kinds - 1, "one argument per parameter");
  if (p->append && !fused) {
    /* The step's keys and values into the cache first; the decoding kernel, next on the stream, reads them. */
    int64_t append_strides[13] = {kn->strides[0], kn->strides[1], kn->strides[2], vn->strides[0], vn->strides[1],
                                  vn->strides[2], strides[3], strides[4], strides[5], strides[6], strides[7],
                                  strides[8], strides[20]};
    int32_t append_ints[7] = {(int32_t)p->seqlen_new, (int32_t)p->heads_kv, (int32_t)p->capacity, (int32_t)p->page_size,
                              (int32_t)(p->head_dim_qk / 8), (int32_t)(p->head_dim_v / 8), p->paged ? FLAG_PAGED : 0};
    void *append_args[] = {&k_new, &v_new, &k, &v, &table, &seqlens, &append_strides[0], &append_strides[1],
                           &append_strides[2], &append_strides[3], &append_strides[4], &append_strides[5],
                           &append_strides[6], &append_strides[7], &append_strides[8], &append_strides[9],
                           &append_strides[10], &append_strides[11], &append_strides[12], &append_ints[0],
                           &append_ints[1], &append_ints[2], &append_ints[3], &append_ints[4], &append_ints[5],
                           &append_ints[6]};
    _Static_assert(sizeof append_args / sizeof append_args[0] == sizeof append_param_kinds - 1,
                   "one argument per parameter");
    if ((status = aotk__launch_row(plan->driver, plan->append_row, kernels[append_index],
                                   sizeof append_args / sizeof append_args[0], append_args, p->batch * p->seqlen_new,
                                   stream)) != AOTK_OK) {
      return status;
    }
  }
  if ((status = aotk__launch_row(plan->driver, plan->decode_row, kernels[0], sizeof args / sizeof args[0], args,
                                 plan->programs, stream)) != AOTK_OK || !split) {
    return status;
  }
  const int64_t out_strides[3] = {strides[9], strides[10], strides[11]}, lse_strides[2] = {strides[18], strides[19]};
  return launch_split_merge(p, plan, kernels[merge_index], out_partial, lse_partial, out, lse, sinks, cu_seqlens_q,
                            out_strides, lse_strides, stream);
}

/* The packed prefill through attn_fwd_hopper_paged: q, out [total_q, heads, d] and the caches [num_pages,
 * page_size, heads_kv, d] as TMA descriptors, lse [heads_q, total_q] by masked stores, the queries at the
 * end of each request's keys (the forward's bottom-right diagonal, from cache_seqlens). Split
 * (plan->num_splits > 1, paged_prefill_splits), fp32 partials in the workspace instead, then the merge. */
static aotk_status launch_paged_prefill(const aotk_decode_params *params, const aotk__decode_problem *p,
                                        const decode_plan *plan, void *workspace, aotk_stream stream) {
  const aotk__kernel_entry *e = &aotk__kernel_table[plan->decode_row];
  /* Both kernels are loaded before the first launch (the merge's with a split). */
  const int split = plan->num_splits > 1;
  CUkernel kernels[2];
  const int rows[2] = {plan->decode_row, plan->merge_row};
  const char *kinds[2] = {paged_prefill_param_kinds, merge_param_kinds};
  aotk_status status = aotk__load_rows(plan->driver, rows, kinds, split ? 2 : 1, plan->kind, plan->device.device,
                                       kernels);
  if (status != AOTK_OK) return status;
  const aotk_tensor q4 = packed_as_4d(&params->q), out4 = packed_as_4d(&params->out);
  /* (Split, O leaves as fp32 partials by masked stores: out's descriptor is not read.) */
  const int o_tma = !split && aotk__tma_view_ok(&out4);
  const aotk_tensor *tensors[4] = {&q4, &params->k_cache, &params->v_cache, o_tma ? &out4 : &q4};
  const char *const names[4] = {"q", "k_cache", "v_cache", o_tma ? "out" : "q (as out's stand-in)"};
  aotk__packed_descriptor d[4];
  if ((status = aotk__encode_descriptors(plan->driver, e, tensors, names, 4, d)) != AOTK_OK) return status;
  CUdeviceptr q = (CUdeviceptr)(uintptr_t)params->q.data, k = (CUdeviceptr)(uintptr_t)params->k_cache.data;
  CUdeviceptr v = (CUdeviceptr)(uintptr_t)params->v_cache.data, out = (CUdeviceptr)(uintptr_t)params->out.data;
  CUdeviceptr lse = p->write_lse ? (CUdeviceptr)(uintptr_t)params->lse.data : 0;
  CUdeviceptr cu_seqlens_q = (CUdeviceptr)(uintptr_t)params->cu_seqlens_q.data, none = 0;
  CUdeviceptr sinks = p->sinks ? (CUdeviceptr)(uintptr_t)params->sinks.data : 0;
  CUdeviceptr alibi = p->alibi ? (CUdeviceptr)(uintptr_t)params->alibi_slopes.data : 0;
  CUdeviceptr table = (CUdeviceptr)(uintptr_t)params->block_table.data;
  CUdeviceptr seqlens = (CUdeviceptr)(uintptr_t)params->cache_seqlens.data;
  CUdeviceptr leftpad = p->leftpad ? (CUdeviceptr)(uintptr_t)params->cache_leftpad.data : 0;
  /* Strides: q, k, v, out (batch, sequence, head), as the forward takes them; only out's and lse's are
   * read (masked stores), the rest go through the descriptors. */
  const aotk_tensor *ot = &params->out;
  int64_t q_b = 0, k_b = params->k_cache.strides[0], v_b = params->v_cache.strides[0], o_b = 0;
  int32_t q_s = (int32_t)params->q.strides[0], q_h = (int32_t)params->q.strides[1];
  int32_t k_s = (int32_t)params->k_cache.strides[1], k_h = (int32_t)params->k_cache.strides[2];
  int32_t v_s = (int32_t)params->v_cache.strides[1], v_h = (int32_t)params->v_cache.strides[2];
  int32_t o_s = (int32_t)ot->strides[0], o_h = (int32_t)ot->strides[1];
  int64_t stride_lb = 0, stride_ab = p->alibi_batch_stride, stride_bt = params->block_table.strides[0];
  int32_t stride_lh = p->write_lse ? (int32_t)params->lse.strides[0] : 0;
  /* Split: the decoding kernel's partials (launch_split_merge), [split, batch, max_seqlen_q, heads_q,
   * round_up(head_dim_v, 16)] fp32 through out's strides and [split, batch, heads_q, max_seqlen_q]
   * through lse's; the sinks join in the merge. */
  CUdeviceptr out_partial = split ? (CUdeviceptr)(uintptr_t)workspace : 0;
  CUdeviceptr lse_partial = split ? out_partial + partial_out_bytes(p, plan->num_splits) : 0;
  const int64_t pd = partial_stride(p);
  int64_t stride_pp = split ? partial_rows(p) * pd : 0, stride_lpp = split ? partial_rows(p) : 0;
  int32_t num_splits32 = (int32_t)plan->num_splits, split_keys32 = (int32_t)plan->split_keys;
  if (split) {
    o_b = p->seqlen_q * p->heads_q * pd, o_s = (int32_t)(p->heads_q * pd), o_h = (int32_t)pd;
    stride_lb = p->heads_q * p->seqlen_q, stride_lh = (int32_t)p->seqlen_q;
  }
  int32_t ints[10] = {(int32_t)p->seqlen_q, (int32_t)p->capacity, (int32_t)p->heads_q, (int32_t)p->group_size,
                      (int32_t)ceil_div(p->seqlen_q, e->block_m), (int32_t)(p->head_dim_qk / 8),
                      (int32_t)(p->head_dim_v / 8), p->window_left, p->window_right, 0};
  ints[9] = FLAG_VARLEN | (p->write_lse || split ? FLAG_WRITE_LSE : 0) | (p->sinks && !split ? FLAG_SINKS : 0) |
            (p->softcap > 0.0f ? FLAG_SOFTCAP : 0) | (p->alibi ? FLAG_ALIBI : 0) |
            (o_tma ? FWD_FLAG_O_TMA : 0) | (p->leftpad ? FWD_FLAG_LEFTPAD : 0) | (split ? FWD_FLAG_SPLIT_OUT : 0) |
            /* causal-like masks give later query blocks more work: run them first */
            (p->window_right >= 0 && p->window_left < 0 ? FWD_FLAG_REVERSE : 0);
  /* qk_scale_log2, softcap_scale, softcap_log2, as the forward takes them (and the decoding kernel). */
  float scalars[3] = {p->softmax_scale * 1.4426950408889634f, p->softcap > 0.0f ? p->softmax_scale / p->softcap : 0.0f,
                      p->softcap * 1.4426950408889634f};
  int32_t dropout_threshold = 0, num_tiles32 = (int32_t)plan->paged_tiles, page_shift = 0;
  float dropout_scale = 1.0f;
  while (((int64_t)1 << page_shift) < p->page_size) page_shift++;
  CUdeviceptr kernel_lse = split ? lse_partial : lse; /* the partial LSEs when split */
  void *args[] = {&q, &k, &v, &out, &kernel_lse, &cu_seqlens_q, &none, &alibi, &sinks, &none,
                  &q_b, &q_s, &q_h, &k_b, &k_s, &k_h, &v_b, &v_s, &v_h, &o_b, &o_s, &o_h,
                  &stride_lb, &stride_lh, &stride_ab,
                  &ints[0], &ints[1], &ints[2], &ints[3], &ints[4], &ints[5], &ints[6], &ints[7], &ints[8], &ints[9],
                  &scalars[0], &scalars[1], &scalars[2], &dropout_threshold, &dropout_scale,
                  AOTK__DESCRIPTOR_ARGS(d[0]), AOTK__DESCRIPTOR_ARGS(d[1]), AOTK__DESCRIPTOR_ARGS(d[2]),
                  AOTK__DESCRIPTOR_ARGS(d[3]), &num_tiles32, &table, &seqlens, &leftpad, &stride_bt, &page_shift,
                  &out_partial, &stride_pp, &stride_lpp, &num_splits32, &split_keys32};
  _Static_assert(sizeof args / sizeof args[0] == sizeof paged_prefill_param_kinds - 1 + 4 * 6,
                 "one argument per parameter, seven per descriptor");
  if ((status = aotk__launch_row(plan->driver, plan->decode_row, kernels[0], sizeof args / sizeof args[0], args,
                                 plan->programs, stream)) != AOTK_OK ||
      !split) {
    return status;
  }
  const int64_t out_strides[3] = {0, ot->strides[0], ot->strides[1]};
  const int64_t lse_strides[2] = {0, p->write_lse ? params->lse.strides[0] : 0};
  return launch_split_merge(p, plan, kernels[1], out_partial, lse_partial, out, lse, sinks, cu_seqlens_q, out_strides,
                            lse_strides, stream);
}

/* --- decoding: the public calls ------------------------------------------------------------------ */

aotk_status aotk_attn_decode(const aotk_decode_params *caller_params, void *workspace, size_t workspace_bytes,
                             aotk_stream stream) {
  aotk__clear_error();
  aotk_decode_params params;
  aotk__decode_problem problem;
  decode_plan plan;
  aotk_status status = aotk__decode_validate(caller_params, &params, &problem);
  if (status != AOTK_OK || (status = plan_decode(&problem, &params, stream, &plan)) != AOTK_OK) return status;
  if (plan.workspace_bytes > 0) {
    if (workspace == NULL) {
      /* As aotk_attn_bwd and aotk_sel_bwd answer a NULL workspace. */
      return aotk__fail(AOTK_ERROR_WORKSPACE_TOO_SMALL, "workspace is NULL; this call needs %zu bytes (%lld splits)",
                        plan.workspace_bytes, (long long)plan.num_splits);
    }
    if (workspace_bytes < plan.workspace_bytes) {
      return aotk__fail(AOTK_ERROR_WORKSPACE_TOO_SMALL, "workspace_bytes = %zu; this call needs %zu (%lld splits)",
                        workspace_bytes, plan.workspace_bytes, (long long)plan.num_splits);
    }
    if ((uintptr_t)workspace % 16 != 0) {
      return aotk__fail(AOTK_ERROR_MISALIGNED_POINTER, "workspace = %p is not 16-byte aligned", workspace);
    }
    if (plan.workspace_bytes - 1 > UINTPTR_MAX - (uintptr_t)workspace) {
      return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "workspace = %p: its %zu bytes run past the end of the address space",
                        workspace, plan.workspace_bytes);
    }
  }
  return launch_decode(&params, &problem, &plan, workspace, stream);
}

aotk_status aotk_decode_query(aotk_op op, const aotk_decode_params *caller_params, aotk_kernel_info *info) {
  aotk__clear_error();
  aotk_status status = aotk__check_query_op(op, "aotk_decode_query");
  if (status != AOTK_OK) return status;
  status = aotk__check_query_info(info);
  if (status != AOTK_OK) return status;
  aotk_decode_params params;
  aotk__decode_problem problem;
  decode_plan plan;
  status = aotk__decode_validate(caller_params, &params, &problem);
  if (status != AOTK_OK || (status = plan_decode(&problem, &params, NULL, &plan)) != AOTK_OK) return status;
  aotk__fill_info(&aotk__kernel_table[plan.decode_row], plan.kind, plan.programs, plan.workspace_bytes,
                  1 + (plan.num_splits > 1) + (problem.append && !plan.fused_append), decode_features(&problem, &plan),
                  info);
  set_num_splits(info, plan.num_splits);
  return AOTK_OK;
}

/* --- the merge ----------------------------------------------------------------------------------- */

typedef struct merge_plan {
  const aotk__driver *driver;
  aotk__device_info device;
  aotk__image_kind kind;
  int row;
} merge_plan;

/* As plan_decode: `stream` checked first, NULL from the query. */
static aotk_status plan_merge(const aotk__merge_problem *p, aotk_stream stream, merge_plan *plan) {
  aotk_status status = aotk__driver_get(&plan->driver);
  if (status != AOTK_OK) return status;
  if ((status = aotk__current_device(plan->driver, &plan->device)) != AOTK_OK ||
      (status = aotk__check_stream_context(plan->driver, &plan->device, stream)) != AOTK_OK) {
    return status;
  }
  aotk__variant_key key;
  memset(&key, 0, sizeof key);
  key.aligned = p->aligned;
  return choose_merge(&key, p->num_partials, p->batch * p->seqlen_q * p->heads, p->head_dim, &plan->device, &plan->row,
                      &plan->kind);
}

static int64_t merge_rows(const aotk__merge_problem *p) { return p->batch * p->seqlen_q * p->heads; }

/* One past the last byte a validated fp32 tensor reaches (its start when it has no element). */
static uintptr_t fp32_tensor_end(const aotk_tensor *t) {
  int64_t last = 0;
  for (int d = 0; d < t->rank; d++) {
    if (t->shape[d] == 0) return (uintptr_t)t->data;
    last += (t->shape[d] - 1) * t->strides[d];
  }
  return (uintptr_t)t->data + (uintptr_t)(last + 1) * sizeof(float);
}

/* An in-place merge writes lse over the first partial's: then one program per row block walks every
 * column chunk (FLAG_WHOLE_ROWS), so that no program writes an lse another still reads. So does a merge
 * whose column chunks would pass the grid limit. */
static int merge_whole_rows(const aotk__merge_problem *p, const aotk_merge_params *params, int row) {
  if (merge_chunks_overflow(row, merge_rows(p), p->head_dim)) return 1;
  if (!p->write_lse) return 0;
  const uintptr_t lse = (uintptr_t)params->lse.data, parts = (uintptr_t)params->lse_partials.data;
  return lse < fp32_tensor_end(&params->lse_partials) && parts < fp32_tensor_end(&params->lse);
}

aotk_status aotk_attn_merge(const aotk_merge_params *caller_params, aotk_stream stream) {
  aotk__clear_error();
  aotk_merge_params params;
  aotk__merge_problem problem;
  merge_plan plan;
  aotk_status status = aotk__merge_validate(caller_params, &params, &problem);
  if (status != AOTK_OK || (status = plan_merge(&problem, stream, &plan)) != AOTK_OK) return status;
  const char *const kinds[1] = {merge_param_kinds};
  CUkernel kernel;
  if ((status = aotk__load_rows(plan.driver, &plan.row, kinds, 1, plan.kind, plan.device.device, &kernel)) != AOTK_OK) {
    return status;
  }
  const aotk_tensor *parts = &params.out_partials, *lse_parts = &params.lse_partials, *out = &params.out;
  merge_args m;
  memset(&m, 0, sizeof m);
  m.partial[dtype_slot(parts->dtype)] = (CUdeviceptr)(uintptr_t)parts->data;
  m.lse_partial = (CUdeviceptr)(uintptr_t)lse_parts->data;
  m.out[dtype_slot(out->dtype)] = (CUdeviceptr)(uintptr_t)out->data;
  m.lse = problem.write_lse ? (CUdeviceptr)(uintptr_t)params.lse.data : 0;
  m.sinks = problem.sinks ? (CUdeviceptr)(uintptr_t)params.sinks.data : 0;
  /* The kernel's view is always [partial, batch, seqlen_q, heads]: packed tensors have batch stride 0. */
  if (problem.packed) {
    const int64_t s[14] = {parts->strides[0], 0, parts->strides[1], parts->strides[2],
                           lse_parts->strides[0], 0, lse_parts->strides[1], lse_parts->strides[2],
                           0, out->strides[0], out->strides[1],
                           0, problem.write_lse ? params.lse.strides[0] : 0, problem.write_lse ? params.lse.strides[1] : 0};
    memcpy(m.strides, s, sizeof s);
  } else {
    const int64_t s[14] = {parts->strides[0], parts->strides[1], parts->strides[2], parts->strides[3],
                           lse_parts->strides[0], lse_parts->strides[1], lse_parts->strides[2], lse_parts->strides[3],
                           out->strides[0], out->strides[1], out->strides[2],
                           problem.write_lse ? params.lse.strides[0] : 0, problem.write_lse ? params.lse.strides[1] : 0,
                           problem.write_lse ? params.lse.strides[2] : 0};
    memcpy(m.strides, s, sizeof s);
  }
  m.num_partials = (int32_t)problem.num_partials;
  m.seqlen_q = (int32_t)problem.seqlen_q;
  m.heads = (int32_t)problem.heads;
  m.num_rows = (int32_t)merge_rows(&problem);
  m.head_dim8 = (int32_t)(problem.head_dim / 8);
  m.flags = partial_flag(parts->dtype) | out_flag(out->dtype) | (problem.write_lse ? FLAG_WRITE_LSE : 0) |
            (problem.sinks ? FLAG_SINKS : 0) | (merge_whole_rows(&problem, &params, plan.row) ? FLAG_WHOLE_ROWS : 0);
  return launch_merge(plan.driver, plan.row, kernel, &m, stream);
}

aotk_status aotk_merge_query(aotk_op op, const aotk_merge_params *caller_params, aotk_kernel_info *info) {
  aotk__clear_error();
  aotk_status status = aotk__check_query_op(op, "aotk_merge_query");
  if (status != AOTK_OK) return status;
  status = aotk__check_query_info(info);
  if (status != AOTK_OK) return status;
  aotk_merge_params params;
  aotk__merge_problem problem;
  merge_plan plan;
  status = aotk__merge_validate(caller_params, &params, &problem);
  if (status != AOTK_OK || (status = plan_merge(&problem, NULL, &plan)) != AOTK_OK) return status;
  const aotk__kernel_entry *e = &aotk__kernel_table[plan.row];
  const int whole_rows = merge_whole_rows(&problem, &params, plan.row);
  aotk__fill_info(e, plan.kind, merge_programs(plan.row, merge_rows(&problem), problem.head_dim, whole_rows), 0, 1,
                  problem.sinks ? AOTK_FEATURE_SINKS : 0, info);
  set_num_splits(info, problem.num_partials);
  return AOTK_OK;
}
