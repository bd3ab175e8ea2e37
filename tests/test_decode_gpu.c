/*
 * Decoding over a KV cache (aotk_attn_decode, aotk_decode_query) on the GPU, against the float64
 * reference of include/aotk.h's "Decoding" section in src/check/aotk_decode_reference.c (which
 * aotk_self_test() shares). Exits 77 (skipped) on a machine with no GPU. The merge of partial attentions
 * is tests/test_merge_gpu.c; the case matrix and how a case's tensors are built, tests/decode_gpu_cases.h;
 * the device buffers, strided views and the parallel reference loop both share, tests/aotk_gpu_buffers.h.
 *
 * Decoding, 69 cases (decode_rows, tests/decode_gpu_cases.h): fp16 and bf16 at head dims (64,64), (128,128), (256,256),
 * (192,128) (runs in the compiled (256,128)), (256,128), (80,80) and (96,64) (padded into (128,128)),
 * (32,32), and (40,40) in padded strides (its rows cannot be 16-element aligned contiguously);
 * contiguous caches and paged caches with page sizes 1, 3, 16, 64 and 256, whose block tables give each
 * request shuffled page ids interleaved with the other requests' (entries past a request's length point
 * at spare pages); seqlen_q 1, 2, 3, 4, 5 and 16; GQA groups 1, 2, 3, 4, 8, MQA with 16 query heads x 4
 * tokens (one full 64-row tile), G = 32 x 3 tokens and G = 8 x 16 tokens (two row chunks), G = 8 x 4 tokens at
 * batch 16 x 4 kv heads over a contiguous cache (the 16-row tile in two chunks rather than a split of the
 * 32-row one, on 132 SMs); cache_seqlens
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
 * Appending (k_new, v_new; 9 of those cases: the decoding kernel appends itself over contiguous caches
 * and pages of 64 keys (whole blocks at d256), the separate append kernel runs over pages of 1 and 16
 * keys (looked up per key row), for 20 new tokens and for a group of two row chunks, as plan_decode
 * chooses and the query's launch count says): contiguous and paged caches (page sizes 1, 16, 64,
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
 * Packed queries (cu_seqlens_q, a prefill over the cache; 21 of those cases, 13 of them through the sm_90
 * paged prefill where expect_paged_prefill says so, 5 of those splitting their keys (2 and 4 splits,
 * merged), and one more with num_splits 1, the query's choice checked on each): contiguous and paged
 * caches (page sizes 1 to 256, shuffled pages), max_seqlen_q 5 to 300 (below 64 the paged prefill takes
 * a one-wave batch whose groups hold more than 32 rows when the decoding kernel's tiles are not few
 * enough for its split, the decoding kernel 30 rows), batch 2 to 8
 * with len_q per request, in turn, 0, 1, 17, 100 (over exactly 100 keys: a prefill from an empty
 * cache), max_seqlen_q (over up to 3000 keys) and 5 over 2 keys (its first 3 tokens sit before
 * position 0: out 0 and lse -inf under causal), the others over random lengths from len_q to the
 * capacity; 3 pad rows after cu_seqlens_q[batch], which must keep their poison in out and in lse
 * ([heads_q, total_q]); GQA 1 to 16, causal and not, a left window and a left + right one, sinks, both dtypes, head dims (64,64),
 * (128,128), (192,128), padded strides, one case without lse (then added), one graph replayed with new
 * cache_seqlens. The decoding kernel splits packed calls by the same rule as others (most of these cases,
 * batch 6 over short caches, split; one forces num_splits 1 and 3), its merge writing the packed rows;
 * the query must report AOTK_FEATURE_VARLEN.
 *
 * Left-padded caches (cache_leftpad; 4 of those cases): per request in turn a padding of 0, inside the
 * first half of the keys, at the length (no key), -2 (none) and inside the second half; contiguous (its
 * padding NaN: never read) with the automatic split and 1 vs 3, paged with 16-key pages (a window and
 * ALiBi: positions stay the cache's rows) and 64-key pages (appending, sinks, a graph replayed with new
 * lengths), and packed queries over 1-key pages. The query must report AOTK_FEATURE_LEFTPAD_KV.
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
 * Then the refusals on the GPU, of an appending call: a workspace one byte short, a NULL workspace and a
 * misaligned one, misaligned q, k_cache stride, out, k_new and v_new's stride, and causal with
 * window_right 3, each refused with nothing written (out, lse, workspace keep their poison; the caches
 * their first bytes: no append ran).
 *
 * Cost: the references are ~10^8 multiply-adds in all, spread over the machine's cores; the GPU work is a
 * few hundred small launches (the first use of each kernel loads its image).
 */
#include "aotk.h"
#include "aotk_test_harness.h"
#include "aotk_gpu_test.h"
#include "decode_gpu_cases.h"

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
/* Whether TMA can read t as the paged prefill's descriptors view it (written here from TMA's rules, not
 * taken from the library): packed [total, heads, d] as [1, total, heads * d], a cache [pages, page_size,
 * heads, d] as [pages, page_size, heads * d]; a token's heads contiguous, the other strides multiples of
 * 16 bytes (8 elements) that do not overlap rows. */
static bool tma_readable(const aotk_tensor *t) {
  const int r = t->rank;
  const int64_t heads = t->shape[r - 2], head_dim = t->shape[r - 1];
  if (t->strides[r - 2] != head_dim || t->strides[r - 3] % 8 != 0 || t->strides[r - 3] < heads * head_dim) return false;
  return r == 3 || t->shape[0] == 1 || (t->strides[0] % 8 == 0 && t->strides[0] >= t->shape[1] * t->strides[1]);
}

/* The paged prefill's split count (src/decode/aotk_decode.c, paged_prefill_splits): where its tiles fill
 * at most half the SMs, floor(SMs / tiles) splits of at least 512 keys of max_seqlen_k (or the capacity),
 * in whole key blocks (64 at d256, else 128), unless num_splits is 1. */
static int64_t expected_paged_splits(const decode_run *x, const aotk_decode_params *params) {
  const decode_case *c = x->c;
  const int64_t tiles = c->batch * x->heads_q * ceil_div(c->seqlen_q, 128);
  const int64_t sms = multiprocessors > 0 ? multiprocessors : 1;
  const int64_t hint = params->max_seqlen_k > 0 && params->max_seqlen_k < x->capacity ? params->max_seqlen_k
                                                                                       : x->capacity;
  if (params->num_splits == 1 || 2 * tiles > sms) return 1;
  const int64_t n = sms / tiles < hint / 512 ? sms / tiles : hint / 512;
  if (n <= 1) return 1;
  const int64_t block_n = c->head_dim_qk == 256 ? 64 : 128;
  return ceil_div(hint, ceil_div(ceil_div(hint, n), block_n) * block_n);
}

/* The sm_90 paged prefill (src/decode/aotk_decode.c, paged_prefill_row): packed queries of at least 64
 * tokens (max_seqlen_q), or fewer where the decoding kernel would run its 64-row tile (G x max_seqlen_q >
 * 32) and the Gluon forward's 128-row tiles (requests x query heads) fit one wave of the SMs; not where
 * those tiles fit one wave and the decoding kernel's 64-row tiles (requests x kv heads x ceil(G x
 * max_seqlen_q / 64)) are few, which its split runs faster: at most half the forward's tiles where the
 * forward splits (expected_paged_splits), else under 0.4 of the SMs' count (half from head dim 192),
 * unless num_splits 1 asks for no split; over pages
 * of a power of two of at least 16 keys (softcap and ALiBi in the EXTRAS rows), head dims
 * (64, 64), (128, 128), (192, 128) or (256, 256), and TMA-readable q and caches, on sm_90. It runs the Gluon forward with K and V
 * read through the block table, in boxes of 64 rows from 64-key pages on, else 16. */
static bool expect_paged_prefill(const decode_run *x, const aotk_decode_params *params) {
  const decode_case *c = x->c;
  const int64_t ps = c->page_size, sms = multiprocessors;
  const int64_t forward_tiles = c->batch * c->heads_kv * c->group * ((c->seqlen_q + 127) / 128);
  const int64_t decode_tiles = c->batch * c->heads_kv * ((c->group * c->seqlen_q + 63) / 64);
  const bool split_wins = params->num_splits != 1 && forward_tiles <= sms &&
                          (expected_paged_splits(x, params) > 1
                               ? 2 * decode_tiles <= forward_tiles
                               : (c->head_dim_qk > 128 ? 4 : 5) * decode_tiles < 2 * sms);
  return compute_capability == 90 && !split_wins && c->varlen && ps >= 16 && (ps & (ps - 1)) == 0 && c->seqlen_new == 0 &&
         params->num_splits <= 1 &&
         (c->seqlen_q >= 64 ||
          (c->group * c->seqlen_q > 32 && c->batch * c->heads_kv * c->group <= (int64_t)multiprocessors)) &&
         ((c->head_dim_qk == c->head_dim_v && (c->head_dim_qk == 64 || c->head_dim_qk == 128 || c->head_dim_qk == 256)) ||
          (c->head_dim_qk == 192 && c->head_dim_v == 128)) &&
         tma_readable(&params->q) &&
         tma_readable(&params->k_cache) && tma_readable(&params->v_cache);
}

/* Its query: one launch, no split, no workspace, the persistent grid (one program per SM, or per tile
 * when there are fewer), the warp-specialized TMA kernel's feature bits. */
static void check_paged_prefill_query(const decode_run *x, const aotk_decode_params *params, const aotk_kernel_info *info,
                                      const char *label) {
  const decode_case *c = x->c;
  char prefix[64];
  if (c->head_dim_qk == c->head_dim_v) {
    snprintf(prefix, sizeof prefix, "attn_fwd_hopper_paged_%s_d%d_", aotk_gpu_test_dtype_label(c->dtype),
             (int)c->head_dim_qk);
  } else {
    snprintf(prefix, sizeof prefix, "attn_fwd_hopper_paged_%s_d%dv%d_", aotk_gpu_test_dtype_label(c->dtype),
             (int)c->head_dim_qk, (int)c->head_dim_v);
  }
  CHECK_MSG(strncmp(info->kernel_name, prefix, strlen(prefix)) == 0, "%s: the query names %s, expected %s...", label,
            info->kernel_name, prefix);
  const bool extras = c->softcap > 0.0f || c->alibi;
  CHECK_MSG((strstr(info->kernel_name, "_extras_") != NULL) == extras, "%s: %s with softcap %g, ALiBi %d", label,
            info->kernel_name, (double)c->softcap, c->alibi);
  /* (At d256 the 16-row boxes serve every page: codegen/aotk_catalog.py.) */
  const char *box = c->page_size >= 64 && c->head_dim_qk != 256 ? "p64" : "p16";
  CHECK_MSG(strstr(info->kernel_name, box) != NULL, "%s: %s for pages of %lld keys, expected boxes %s", label,
            info->kernel_name, (long long)c->page_size, box);
  /* Split keys (expected_paged_splits): the fp32 partials and their LSEs in the workspace, merged by a
   * second launch. */
  const int64_t base_tiles = c->batch * x->heads_q * ceil_div(c->seqlen_q, 128);
  const int64_t sms = multiprocessors > 0 ? multiprocessors : 1;
  const int64_t splits = expected_paged_splits(x, params);
  const int64_t rows = c->batch * c->seqlen_q * x->heads_q, padded = ceil_div(c->head_dim_v, 16) * 16;
  const size_t workspace =
      splits > 1 ? (size_t)(ceil_div(splits * rows * padded * 4, 16) * 16 + ceil_div(splits * rows * 4, 16) * 16) : 0;
  CHECK_MSG(info->num_splits == splits && info->launches == (splits > 1 ? 2 : 1) && info->workspace_bytes == workspace,
            "%s: %d splits, %d launches, %zu workspace bytes; expected %lld splits, %zu bytes", label,
            (int)info->num_splits, (int)info->launches, info->workspace_bytes, (long long)splits, workspace);
  const int64_t tiles = base_tiles * splits;
  CHECK_MSG(info->grid == (tiles < sms ? tiles : sms), "%s: grid %lld for %lld tiles on %lld SMs", label,
            (long long)info->grid, (long long)tiles, (long long)sms);
  uint32_t expected = AOTK_FEATURE_PAGED_KV | AOTK_FEATURE_VARLEN | AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED;
  if (splits > 1) expected |= AOTK_FEATURE_SPLIT_KV;
  if (c->causal) expected |= AOTK_FEATURE_CAUSAL;
  if (c->window_left >= 0 || (c->window_right >= 0 && !c->causal)) expected |= AOTK_FEATURE_WINDOW;
  if (c->sinks) expected |= AOTK_FEATURE_SINKS;
  if (c->leftpad) expected |= AOTK_FEATURE_LEFTPAD_KV;
  if (c->softcap > 0.0f) expected |= AOTK_FEATURE_SOFTCAP;
  if (c->alibi) expected |= AOTK_FEATURE_ALIBI;
  if (extras) expected |= AOTK_FEATURE_EXTRAS_KERNEL;
  CHECK_MSG(info->features == expected, "%s: features 0x%x, expected 0x%x", label, (unsigned)info->features,
            (unsigned)expected);
}

/* Whether the largest element offset of a cache is below 2^31 (the host's rule for the 32-bit row lookup). */
static bool offsets_fit_int32(const aotk_tensor *t) {
  long double last = 0;
  for (int i = 0; i < t->rank; i++) last += (long double)(t->shape[i] - 1) * (long double)t->strides[i];
  return last < 2147483647.0L;
}

static void check_decode_query(const decode_run *x, const aotk_decode_params *params, const aotk_kernel_info *info,
                               const char *label) {
  const decode_case *c = x->c;
  if (expect_paged_prefill(x, params)) {
    check_paged_prefill_query(x, params, info, label);
    return;
  }
  /* The family follows the cache: contiguous, paged with a lookup per key row (in 32-bit offsets where every
   * element offset of both caches is below 2^31), or paged with pages that hold whole key blocks (one
   * lookup per block). */
  char prefix[48];
  const bool offset32 = offsets_fit_int32(&params->k_cache) && offsets_fit_int32(&params->v_cache);
  const char *family = c->page_size == 0                                        ? "attn_decode"
                       : info->block_n > 0 && c->page_size % info->block_n == 0 ? "attn_decode_paged_blocks"
                       : offset32                                               ? "attn_decode_paged32"
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
  /* Appending runs a first kernel unless the decoding kernel appends itself: one row chunk a group, at
   * most 16 new tokens and a cache that is contiguous or paged in whole key blocks, not attn_decode_paged's
   * per-row lookup (src/decode/aotk_decode.c, plan_decode). */
  const int64_t row_chunks = info->block_m > 0 ? ceil_div(c->group * c->seqlen_q, info->block_m) : 0;
  const bool per_row_pages = (strncmp(info->kernel_name, "attn_decode_paged_", 18) == 0 &&
                              strncmp(info->kernel_name, "attn_decode_paged_blocks_", 25) != 0) ||
                             strncmp(info->kernel_name, "attn_decode_paged32_", 20) == 0;
  const bool fused_append =
      c->seqlen_new > 0 && !c->varlen && row_chunks == 1 && c->seqlen_new <= 16 && !per_row_pages;
  const int launches = 1 + (splits > 1) + (c->seqlen_new > 0 && !fused_append);
  CHECK_MSG(info->launches == launches, "%s: %d launches with %lld splits%s, expected %d", label, (int)info->launches,
            (long long)splits, c->seqlen_new > 0 ? (fused_append ? " and appending (fused)" : " and appending") : "",
            launches);
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
  if (c->leftpad) expected |= AOTK_FEATURE_LEFTPAD_KV;
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

int main(void) {
  if (!aotk_gpu_test_setup()) return aotk_gpu_test_skip_all();
  RUN_TEST(test_decode_refusals);
  static decode_case decode_cases[sizeof decode_rows / sizeof decode_rows[0]];
  for (size_t i = 0; i < sizeof decode_rows / sizeof decode_rows[0]; i++) {
    make_decode_case(&decode_cases[i], &decode_rows[i], (int)i);
    aotk_test_run_with(decode_cases[i].name, run_decode_case, &decode_cases[i]);
  }
  print_worst_fractions();
  driver->cuStreamDestroy(stream);
  return aotk_test_finish();
}
