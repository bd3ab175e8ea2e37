/*
 * Selection attention on the GPU (aotk_sel_fwd, aotk_sel_bwd, aotk_sel_query, aotk_sel_check_indices)
 * against the float64 reference of src/check/aotk_sel_reference.c, over every element of out, lse, dq, dk
 * and dv. Exits 77 (skipped) on a machine with no GPU.
 *
 * Matrix: both dtypes x the three head-dim pairs x the three block sizes; lengths 1, 63, 64, 65, 1000
 * and (in a few cases) 4097; sequences shorter than a block; more slots than blocks; group sizes 1, 4,
 * 16 and 64; varlen with an empty sequence, a sequence with no keys, len_q < len_k and len_q > len_k
 * (rows before the diagonal see nothing), and unused rows after the last sequence (left alone);
 * block_cnt present (with counts outside [0, slots], which clamp, and unread slots holding ids that
 * would count if read) and absent; random distinct blocks in random slot order mixed with -1, other
 * negative ids, ids past the last block and future blocks (all ignored); rows made empty on purpose;
 * NSA's fixed picks (block 0 and the local blocks in every row) at 8200 and 65600 tokens, whose token
 * lists the backward splits across dK/dV programs, and rows with about a quarter of their slots valid,
 * in every dtype and head-dim pair; the contiguous layout, padded strides, and q/k/v (and dq/dk/dv) as
 * slices of one packed buffer.
 *
 * Each case also checks, on the same inputs:
 * - every output element written, every padding element and unused row left alone (poison);
 * - rows with no key: out exactly 0, lse -inf, dq exactly 0; keys no row selected: dk = dv = 0;
 * - the backward run again on re-poisoned gradients and workspace gives the same bits;
 * - the forward without lse: the same out bits, and the lse memory untouched;
 * - the counted slots permuted: within twice the bound of the unpermuted run;
 * - (block_cnt present) the slots past each count set to -1 and block_cnt dropped: the same bits;
 * - (varlen) each sequence as its own call without cu_seqlens: the same bits when the two calls run
 *   the same kernels and neither may split a token list (one program per (token, kv head) or per key
 *   block, the same values in the same order: nothing depends on the packing), else within twice the
 *   bound (the split's chunk size follows the problem's size);
 * - (every block <= p / block_size selected) aotk's dense causal attention (aotk_attn_fwd/bwd, varlen,
 *   bottom-right aligned) on the same buffers: within twice the bound.
 * The queries, the refusals and aotk_sel_check_indices are tests/test_sel_calls_gpu.c; one case's
 * tensors, selection and calls, tests/sel_gpu_cases.h (shared by both).
 *
 * The error rule is the dense tests' (src/check/aotk_check.h): per tensor, max |gpu - float64| <= 2 x max
 * |same-precision emulation - float64| + a floor (AOTK__CHECK_ERROR_FLOOR for out,
 * AOTK__CHECK_BWD_ERROR_FLOOR x max(1, max |float64|) for the gradients); lse within AOTK__CHECK_LSE_ABS
 * + AOTK__CHECK_LSE_REL |lse|. Two GPU results that should agree may differ by the sum of their
 * bounds. The relative RMS error against float64 is printed for the worst case of each dtype (public
 * implementations quote < 5e-3 against float32).
 *
 * The host reference costs ~1 us per (query row, query head, selected key) on one core; it is spread
 * over the machine's cores, and the cases with 4097 tokens keep their group and slot counts small.
 */
#include "sel_gpu_cases.h"

/* Worst error as a fraction of its bound, per dtype, with the case and its relative RMS errors. */
static double worst_fraction[4];
static char worst_case[4][640];

/* ---- the reference, on every core ----------------------------------------------------------- */

typedef struct reference_job {
  sel_run *x;
  int phase; /* 0: out, lse, dq of (token, head_q) items; 1: dk, dv of (sequence, kv head, block) items */
  int64_t item_count;
  _Atomic int64_t next_item;
  int64_t (*blocks)[3];
} reference_job;

static void *reference_worker(void *argument) {
  reference_job *job = argument;
  sel_run *x = job->x;
  const aotk__sel_reference_problem *p = &x->problem;
  const int dtype = (int)x->c->dtype;
  for (;;) {
    const int64_t item = atomic_fetch_add(&job->next_item, 1);
    if (item >= job->item_count) break;
    if (job->phase == 0) {
      const int64_t token = item / x->heads_q, head = item % x->heads_q;
      aotk__sel_reference_fwd_row_f64(p, token, head, x->ref[R_OUT] + item * x->dv, &x->ref_lse[item]);
      aotk__sel_reference_fwd_row_lowp(p, dtype, token, head, x->lowp[R_OUT] + item * x->dv, &x->lowp_lse[item]);
      aotk__sel_reference_dq_row_f64(p, token, head, x->ref[R_OUT], x->ref_lse, x->ref[R_DQ] + item * x->dqk);
      aotk__sel_reference_dq_row_lowp(p, dtype, token, head, x->lowp[R_OUT], x->lowp_lse,
                                      x->lowp[R_DQ] + item * x->dqk);
    } else {
      const int64_t *b = job->blocks[item];
      aotk__sel_reference_dkdv_block_f64(p, b[0], b[1], b[2], x->ref[R_OUT], x->ref_lse, x->ref[R_DK], x->ref[R_DV],
                                         x->hits);
      aotk__sel_reference_dkdv_block_lowp(p, dtype, b[0], b[1], b[2], x->lowp[R_OUT], x->lowp_lse, x->lowp[R_DK],
                                          x->lowp[R_DV]);
    }
  }
  return NULL;
}

static void run_phase(reference_job *job, int phase, int64_t item_count) {
  job->phase = phase;
  job->item_count = item_count;
  atomic_store(&job->next_item, 0);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int threads = online < 1 ? 1 : online > MAX_THREADS ? MAX_THREADS : (int)online;
  pthread_t handles[MAX_THREADS];
  bool started[MAX_THREADS] = {false};
  for (int i = 1; i < threads; i++) started[i] = pthread_create(&handles[i], NULL, reference_worker, job) == 0;
  reference_worker(job);
  for (int i = 1; i < threads; i++) {
    if (started[i]) pthread_join(handles[i], NULL);
  }
}

static bool compute_reference(sel_run *x) {
  for (int i = 0; i < RESULTS; i++) {
    x->ref[i] = host_alloc(result_count(x, i), sizeof(double));
    x->lowp[i] = host_alloc(result_count(x, i), sizeof(float));
  }
  x->ref_lse = host_alloc(x->total_q * x->heads_q, sizeof(double));
  x->lowp_lse = host_alloc(x->total_q * x->heads_q, sizeof(float));
  x->hits = host_alloc(x->total_k * x->heads_kv, sizeof(int64_t));
  int64_t block_count = 0;
  for (int64_t n = 0; n < x->num_seqs; n++) {
    block_count += x->heads_kv * aotk__sel_reference_sequence(&x->problem, n).num_blocks;
  }
  int64_t(*blocks)[3] = host_alloc(block_count, sizeof *blocks);
  bool ok = blocks != NULL && x->ref_lse != NULL && x->lowp_lse != NULL && x->hits != NULL;
  for (int i = 0; i < RESULTS; i++) ok &= x->ref[i] != NULL && x->lowp[i] != NULL;
  if (!ok) {
    free(blocks);
    return false;
  }
  int64_t item = 0;
  for (int64_t n = 0; n < x->num_seqs; n++) {
    const int64_t num_blocks = aotk__sel_reference_sequence(&x->problem, n).num_blocks;
    for (int64_t h = 0; h < x->heads_kv; h++)
      for (int64_t b = 0; b < num_blocks; b++) {
        blocks[item][0] = n;
        blocks[item][1] = h;
        blocks[item][2] = b;
        item++;
      }
  }
  reference_job job;
  memset(&job, 0, sizeof job);
  job.x = x;
  job.blocks = blocks;
  run_phase(&job, 0, x->total_q * x->heads_q);
  run_phase(&job, 1, block_count);
  free(blocks);
  return true;
}

/* ---- comparing ------------------------------------------------------------------------------ */

static const char *const result_names[RESULTS] = {"out", "dq", "dk", "dv"};

static double lse_tolerance(double reference) { return AOTK__CHECK_LSE_ABS + AOTK__CHECK_LSE_REL * fabs(reference); }

/* A run against the reference: the error bound of each tensor, lse, empty rows, unselected keys. With
 * record_bounds the bounds are kept for the comparisons between runs. */
static void compare_with_reference(sel_run *x, const results *r, unsigned what, bool record_bounds, const char *label) {
  const aotk_dtype dtype = x->c->dtype;
  double fraction = 0.0;
  char rms_text[160] = "";
  size_t rms_used = 0;
  for (int i = 0; i < RESULTS; i++) {
    if (i == R_OUT ? !(what & RUN_FWD) : !(what & RUN_BWD)) continue;
    const int64_t n = result_count(x, i);
    double max_error = 0.0, lowp_error = 0.0, magnitude = 0.0, squared_error = 0.0, squared = 0.0;
    int64_t worst = 0;
    for (int64_t e = 0; e < n; e++) {
      const double exact = x->ref[i][e], got = r->values[i][e];
      double error = fabs(got - exact);
      if (isnan(error)) error = INFINITY;
      if (error > max_error) {
        max_error = error;
        worst = e;
      }
      const double emulation_error = fabs((double)x->lowp[i][e] - exact);
      if (!(emulation_error <= lowp_error)) lowp_error = isnan(emulation_error) ? INFINITY : emulation_error;
      magnitude = fabs(exact) > magnitude ? fabs(exact) : magnitude;
      squared_error += error * error;
      squared += exact * exact;
    }
    const double floor = i == R_OUT ? AOTK__CHECK_ERROR_FLOOR
                                    : AOTK__CHECK_BWD_ERROR_FLOOR * (magnitude > 1.0 ? magnitude : 1.0);
    const double bound = 2.0 * lowp_error + floor;
    if (record_bounds) x->bound[i] = bound;
    const int64_t heads = result_heads(x, i), dim = result_dim(x, i);
    CHECK_MSG(max_error <= bound,
              "%s: %s error %.3g > bound %.3g (2 x same-precision %.3g + %.2g) at (row %lld, head %lld, %lld): "
              "%.6g, expected %.6g",
              label, result_names[i], max_error, bound, lowp_error, floor, (long long)(worst / dim / heads),
              (long long)(worst / dim % heads), (long long)(worst % dim), n > 0 ? r->values[i][worst] : 0.0,
              n > 0 ? x->ref[i][worst] : 0.0);
    if (bound > 0.0 && max_error / bound > fraction) fraction = max_error / bound;
    if (rms_used < sizeof rms_text) {
      int written = snprintf(rms_text + rms_used, sizeof rms_text - rms_used, " %s %.2e", result_names[i],
                             squared > 0.0 ? sqrt(squared_error / squared) : 0.0);
      if (written > 0) rms_used += (size_t)written;
    }
  }
  if (what & RUN_FWD) {
    int64_t bad = 0, first = -1;
    for (int64_t e = 0; e < x->total_q * x->heads_q; e++) {
      const double exact = x->ref_lse[e], got = r->lse[e];
      bool ok = isinf(exact) ? got == exact : fabs(got - exact) <= lse_tolerance(exact);
      if (!ok && first < 0) first = e;
      bad += !ok;
    }
    CHECK_MSG(bad == 0, "%s: %lld lse values off, first (row %lld, head %lld): %.7g, expected %.7g", label,
              (long long)bad, (long long)(first / x->heads_q), (long long)(first % x->heads_q),
              first >= 0 ? r->lse[first] : 0.0, first >= 0 ? x->ref_lse[first] : 0.0);
  }
  /* Rows that see no key: out exactly 0 (and dq); keys nobody selected: dk = dv = 0 exactly. */
  int64_t bad_rows = 0, empty_rows = 0;
  for (int64_t e = 0; e < x->total_q * x->heads_q; e++) {
    if (!isinf(x->ref_lse[e])) continue;
    empty_rows++;
    bool zero = true;
    for (int64_t d = 0; (what & RUN_FWD) && d < x->dv; d++) zero &= r->values[R_OUT][e * x->dv + d] == 0.0;
    for (int64_t d = 0; (what & RUN_BWD) && d < x->dqk; d++) zero &= r->values[R_DQ][e * x->dqk + d] == 0.0;
    bad_rows += !zero;
  }
  CHECK_MSG(bad_rows == 0, "%s: %lld of %lld rows that see no key have out or dq != 0", label, (long long)bad_rows,
            (long long)empty_rows);
  if (what & RUN_BWD) {
    int64_t bad_keys = 0, unselected = 0;
    for (int64_t e = 0; e < x->total_k * x->heads_kv; e++) {
      if (x->hits[e] > 0) continue;
      unselected++;
      bool zero = true;
      for (int64_t d = 0; d < x->dqk; d++) zero &= r->values[R_DK][e * x->dqk + d] == 0.0;
      for (int64_t d = 0; d < x->dv; d++) zero &= r->values[R_DV][e * x->dv + d] == 0.0;
      bad_keys += !zero;
    }
    CHECK_MSG(bad_keys == 0, "%s: %lld of %lld keys no row selected have dk or dv != 0", label, (long long)bad_keys,
              (long long)unselected);
  }
  if (record_bounds && fraction > worst_fraction[dtype]) {
    worst_fraction[dtype] = fraction;
    snprintf(worst_case[dtype], sizeof worst_case[dtype], "%s (relative RMS:%s)", x->c->name, rms_text);
  }
}

/* Two runs that must agree: bit for bit, or within the sum of their bounds (each run's bound is the
 * base run's: the same inputs and reference). */
static void compare_runs(const sel_run *x, const results *a, const results *b, unsigned what, bool bitwise,
                         const char *label) {
  for (int i = 0; i < RESULTS; i++) {
    if (i == R_OUT ? !(what & RUN_FWD) : !(what & RUN_BWD)) continue;
    const int64_t n = result_count(x, i);
    int64_t differences = 0, first = -1;
    double max_difference = 0.0;
    for (int64_t e = 0; e < n; e++) {
      const double u = a->values[i][e], v = b->values[i][e];
      bool differ;
      if (bitwise) {
        differ = memcmp(&u, &v, sizeof u) != 0;
      } else {
        double difference = fabs(u - v);
        if (isnan(difference)) difference = INFINITY;
        max_difference = difference > max_difference ? difference : max_difference;
        differ = difference > 2.0 * x->bound[i];
      }
      if (differ && first < 0) first = e;
      differences += differ;
    }
    CHECK_MSG(differences == 0, "%s: %s: %lld values differ%s (first at element %lld: %.6g vs %.6g; max difference "
              "%.3g, allowed %.3g)", label, result_names[i], (long long)differences, bitwise ? " in their bits" : "",
              (long long)first, first >= 0 ? a->values[i][first] : 0.0, first >= 0 ? b->values[i][first] : 0.0,
              max_difference, bitwise ? 0.0 : 2.0 * x->bound[i]);
  }
  if (what & RUN_FWD) {
    int64_t differences = 0;
    for (int64_t e = 0; e < x->total_q * x->heads_q; e++) {
      const double u = a->lse[e], v = b->lse[e];
      differences += bitwise ? memcmp(&u, &v, sizeof u) != 0
                             : !(u == v || fabs(u - v) <= 2.0 * lse_tolerance(u));
    }
    CHECK_MSG(differences == 0, "%s: %lld lse values differ", label, (long long)differences);
  }
}

/* ---- the identities --------------------------------------------------------------------------- */

/* The counted slots of every row in another order: the same blocks, accumulated in another order. */
static void identity_permuted(sel_run *x, const results *base) {
  const int64_t H = x->heads_kv, S = x->slots;
  int32_t *idx = host_alloc(x->rows_q * H * S, sizeof(int32_t));
  CUdeviceptr device = 0;
  results r;
  memset(&r, 0, sizeof r);
  if (idx == NULL || !results_create(x, &r)) goto done;
  memcpy(idx, x->idx, (size_t)(x->rows_q * H * S) * sizeof(int32_t));
  for (int64_t token = 0; token < x->total_q; token++)
    for (int64_t h = 0; h < H; h++) {
      aotk__random_shuffle_int32(idx + (token * H + h) * S, aotk__sel_reference_count(&x->problem, token, h), &x->state);
    }
  if (!aotk_gpu_test_upload(&device, idx, (size_t)(x->rows_q * H * S) * 4)) goto done;
  aotk_sel_params params = x->params;
  params.block_idx.data = (void *)(uintptr_t)device;
  if (!run_sel(x, &params, RUN_FWD | RUN_BWD, &r, "slots permuted")) goto done;
  compare_with_reference(x, &r, RUN_FWD | RUN_BWD, false, "slots permuted");
  compare_runs(x, base, &r, RUN_FWD | RUN_BWD, false, "slots permuted against the base run");
done:
  aotk_gpu_test_free(&device);
  free(idx);
  results_destroy(&r);
}

/* -1 in every slot past its count, and no block_cnt: the same blocks in the same order, the same bits. */
static void identity_padding(sel_run *x, const results *base) {
  const int64_t H = x->heads_kv, S = x->slots;
  int32_t *idx = host_alloc(x->rows_q * H * S, sizeof(int32_t));
  CUdeviceptr device = 0;
  results r;
  memset(&r, 0, sizeof r);
  if (idx == NULL || !results_create(x, &r)) goto done;
  memcpy(idx, x->idx, (size_t)(x->rows_q * H * S) * sizeof(int32_t));
  for (int64_t token = 0; token < x->total_q; token++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t s = aotk__sel_reference_count(&x->problem, token, h); s < S; s++) idx[(token * H + h) * S + s] = -1;
  if (!aotk_gpu_test_upload(&device, idx, (size_t)(x->rows_q * H * S) * 4)) goto done;
  aotk_sel_params params = x->params;
  params.block_idx.data = (void *)(uintptr_t)device;
  memset(&params.block_cnt, 0, sizeof params.block_cnt);
  if (!run_sel(x, &params, RUN_FWD | RUN_BWD, &r, "-1 padding")) goto done;
  compare_runs(x, base, &r, RUN_FWD | RUN_BWD, true, "-1 padding instead of block_cnt");
done:
  aotk_gpu_test_free(&device);
  free(idx);
  results_destroy(&r);
}

/* The forward without lse: out's bits unchanged, and the lse buffer (poisoned) left alone. */
static void identity_no_lse(sel_run *x, const results *base) {
  results r;
  if (!results_create(x, &r)) return;
  aotk_sel_params params = x->params;
  memset(&params.lse, 0, sizeof params.lse);
  if (run_sel(x, &params, RUN_FWD, &r, "forward without lse")) {
    /* lse was not written (check_coverage saw its poison intact): nothing of it to compare */
    memcpy(r.lse, base->lse, (size_t)(x->total_q * x->heads_q) * sizeof(double));
    compare_runs(x, base, &r, RUN_FWD, true, "forward without lse");
  }
  results_destroy(&r);
}

/* Each sequence with rows and keys as its own call (no cu_seqlens, contiguous copies). */
static void identity_separate_calls(sel_run *x, const results *base) {
  results r;
  if (!results_create(x, &r)) return;
  results_copy(x, &r, base);
  const aotk_dtype dtype = x->c->dtype;
  const int64_t HQ = x->heads_q, HKV = x->heads_kv, DQK = x->dqk, DV = x->dv, S = x->slots;
  bool same_kernels = true;
  int calls = 0;
  for (int64_t n = 0; n < x->num_seqs && aotk_test_state.case_failures == 0; n++) {
    const int64_t q0 = x->cu_q[n], k0 = x->cu_k[n], lq = x->cu_q[n + 1] - q0, lk = x->cu_k[n + 1] - k0;
    if (lq == 0 || lk == 0) continue; /* not a call the API takes; the packed run was checked */
    enum { SQ, SK, SV, SDOUT, SOUT, SDQ, SDK, SDV, SIDX, SCNT, SLSE, SWORK, SBUFFERS };
    CUdeviceptr dev[SBUFFERS] = {0};
    const int source[4] = {T_Q, T_K, T_V, T_DOUT};
    const int64_t rows[8] = {lq, lk, lk, lq, lq, lq, lk, lk}, heads[8] = {HQ, HKV, HKV, HQ, HQ, HQ, HKV, HKV},
                  dims[8] = {DQK, DQK, DV, DV, DV, DQK, DQK, DV}, first[4] = {q0, k0, k0, q0};
    uint16_t *host[8] = {NULL};
    bool ok = true;
    for (int t = 0; t < 8 && ok; t++) {
      const size_t count = (size_t)(rows[t] * heads[t] * dims[t]);
      host[t] = host_alloc((int64_t)count, sizeof(uint16_t));
      ok = host[t] != NULL;
      if (!ok) break;
      if (t < 4) {
        const view *v = &x->views[source[t]];
        for (int64_t row = 0; row < rows[t]; row++)
          for (int64_t h = 0; h < heads[t]; h++)
            for (int64_t d = 0; d < dims[t]; d++) {
              host[t][(row * heads[t] + h) * dims[t] + d] =
                  x->storages[v->storage].host[element_index(v, first[t] + row, h, d)];
            }
        ok = aotk_gpu_test_upload(&dev[t], host[t], count * 2);
      } else {
        ok = aotk_gpu_test_alloc(&dev[t], count * 2) && aotk_gpu_test_poison(dev[t], count * 2);
      }
    }
    ok = ok && aotk_gpu_test_upload(&dev[SIDX], x->idx + q0 * HKV * S, (size_t)(lq * HKV * S) * 4);
    ok = ok && (x->cnt == NULL || aotk_gpu_test_upload(&dev[SCNT], x->cnt + q0 * HKV, (size_t)(lq * HKV) * 4));
    ok = ok && aotk_gpu_test_alloc(&dev[SLSE], (size_t)(lq * HQ) * 4) && aotk_gpu_test_poison(dev[SLSE], (size_t)(lq * HQ) * 4);
    aotk_sel_params params = AOTK_SEL_PARAMS_INIT;
    aotk_tensor *const tensors[8] = {&params.q, &params.k, &params.v, &params.dout,
                                     &params.out, &params.dq, &params.dk, &params.dv};
    for (int t = 0; t < 8; t++) {
      *tensors[t] = aotk_tensor_3d((void *)(uintptr_t)dev[t], dtype, rows[t], heads[t], dims[t]);
    }
    params.lse = aotk_tensor_2d((void *)(uintptr_t)dev[SLSE], AOTK_DTYPE_FLOAT32, lq, HQ);
    params.block_size = (int32_t)x->c->block_size;
    params.block_idx = aotk_tensor_3d((void *)(uintptr_t)dev[SIDX], AOTK_DTYPE_INT32, lq, HKV, S);
    if (x->cnt) params.block_cnt = aotk_tensor_2d((void *)(uintptr_t)dev[SCNT], AOTK_DTYPE_INT32, lq, HKV);
    params.softmax_scale = x->c->softmax_scale;
    aotk_kernel_info fwd_info = AOTK_KERNEL_INFO_INIT, bwd_info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = AOTK_OK;
    if (ok) {
      status = aotk_sel_query(AOTK_OP_SEL_FWD, &params, &fwd_info);
      if (status == AOTK_OK) status = aotk_sel_query(AOTK_OP_SEL_BWD, &params, &bwd_info);
      CHECK_MSG(status == AOTK_OK, "sequence %lld alone: query: %s: %s", (long long)n, aotk_status_name(status),
                aotk_last_error());
      ok = status == AOTK_OK && aotk_gpu_test_alloc(&dev[SWORK], bwd_info.workspace_bytes) &&
           aotk_gpu_test_poison(dev[SWORK], bwd_info.workspace_bytes) && aotk_gpu_test_settle();
    }
    if (ok) {
      /* The dK/dV split's chunk size follows the whole problem's size: the same bits only where neither
       * call may split a list (7 launches). */
      same_kernels &= strcmp(fwd_info.kernel_name, x->fwd_kernel) == 0 &&
                      strcmp(bwd_info.kernel_name, x->bwd_kernel) == 0 && bwd_info.launches == 7 &&
                      x->bwd_launches == 7;
      status = aotk_sel_fwd(&params, (aotk_stream)stream);
      if (status == AOTK_OK) {
        status = aotk_sel_bwd(&params, (void *)(uintptr_t)dev[SWORK], bwd_info.workspace_bytes, (aotk_stream)stream);
      }
      CHECK_MSG(status == AOTK_OK, "sequence %lld alone: %s: %s", (long long)n, aotk_status_name(status),
                aotk_last_error());
      ok = status == AOTK_OK && aotk_gpu_test_synchronize("a sequence alone");
    }
    float *lse = host_alloc(lq * HQ, sizeof(float));
    ok = ok && lse != NULL && aotk_gpu_test_download(lse, dev[SLSE], (size_t)(lq * HQ) * 4);
    int64_t poison_left = 0;
    for (int t = 4; t < 8 && ok; t++) {
      const size_t count = (size_t)(rows[t] * heads[t] * dims[t]);
      ok = aotk_gpu_test_download(host[t], dev[t], count * 2);
      const int r_index = t - 4;
      const int64_t start = r_index == R_OUT || r_index == R_DQ ? q0 : k0;
      for (size_t e = 0; ok && e < count; e++) {
        poison_left += host[t][e] == 0xffff;
        r.values[r_index][start * heads[t] * dims[t] + (int64_t)e] = aotk__dtype_value(host[t][e], dtype);
      }
    }
    for (int64_t e = 0; ok && e < lq * HQ; e++) r.lse[q0 * HQ + e] = lse[e];
    CHECK_MSG(poison_left == 0, "sequence %lld alone: %lld output elements unwritten", (long long)n,
              (long long)poison_left);
    calls += ok;
    free(lse);
    for (int t = 0; t < 8; t++) free(host[t]);
    for (int b = 0; b < SBUFFERS; b++) aotk_gpu_test_free(&dev[b]);
  }
  if (calls > 0 && aotk_test_state.case_failures == 0) {
    char label[96];
    snprintf(label, sizeof label, "%d sequences as separate calls (%s)", calls,
             same_kernels ? "same kernels: bit for bit" : "other kernels: within the bounds");
    compare_runs(x, base, &r, RUN_FWD | RUN_BWD, same_kernels, label);
    printf("    %s\n", label);
  }
  results_destroy(&r);
}

/* Every block <= p / block_size selected: aotk's dense causal attention (bottom-right aligned, the
 * varlen layout) on the same q, k, v, dout. */
static void identity_dense(sel_run *x, const results *base) {
  const aotk_dtype dtype = x->c->dtype;
  const int64_t HQ = x->heads_q, HKV = x->heads_kv;
  results r;
  if (!results_create(x, &r)) return;
  enum { DOUT_, DDQ, DDK, DDV, DLSE, DWORK, DBUFFERS };
  CUdeviceptr dev[DBUFFERS] = {0};
  const int64_t rows[4] = {x->rows_q, x->rows_q, x->rows_k, x->rows_k}, heads[4] = {HQ, HQ, HKV, HKV},
                dims[4] = {x->dv, x->dqk, x->dqk, x->dv};
  uint16_t *host = NULL;
  float *lse = NULL;
  bool ok = true;
  for (int t = 0; t < 4 && ok; t++) ok = aotk_gpu_test_alloc(&dev[t], (size_t)(rows[t] * heads[t] * dims[t]) * 2);
  ok = ok && aotk_gpu_test_alloc(&dev[DLSE], (size_t)(HQ * x->rows_q) * 4);
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = view_tensor(x, T_Q);
  params.k = view_tensor(x, T_K);
  params.v = view_tensor(x, T_V);
  params.dout = view_tensor(x, T_DOUT);
  aotk_tensor *const outputs[4] = {&params.out, &params.dq, &params.dk, &params.dv};
  for (int t = 0; t < 4; t++) *outputs[t] = aotk_tensor_3d((void *)(uintptr_t)dev[t], dtype, rows[t], heads[t], dims[t]);
  params.lse = aotk_tensor_2d((void *)(uintptr_t)dev[DLSE], AOTK_DTYPE_FLOAT32, HQ, x->rows_q);
  params.cu_seqlens_q = aotk_tensor_1d((void *)(uintptr_t)x->cu_q_device, AOTK_DTYPE_INT32, x->num_seqs + 1);
  params.cu_seqlens_k = aotk_tensor_1d((void *)(uintptr_t)x->cu_k_device, AOTK_DTYPE_INT32, x->num_seqs + 1);
  params.max_seqlen_q = (int32_t)x->max_seqlen_q;
  params.max_seqlen_k = (int32_t)x->max_seqlen_k;
  params.causal = 1;
  params.causal_align = AOTK_ALIGN_BOTTOM_RIGHT;
  params.deterministic = 1;
  params.softmax_scale = x->c->softmax_scale;
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = AOTK_OK;
  if (ok) {
    status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info);
    CHECK_MSG(status == AOTK_OK, "dense attention: query: %s: %s", aotk_status_name(status), aotk_last_error());
    ok = status == AOTK_OK && aotk_gpu_test_alloc(&dev[DWORK], info.workspace_bytes);
  }
  if (ok) {
    status = aotk_attn_fwd(&params, (aotk_stream)stream);
    if (status == AOTK_OK) {
      status = aotk_attn_bwd(&params, (void *)(uintptr_t)dev[DWORK], info.workspace_bytes, (aotk_stream)stream);
    }
    CHECK_MSG(status == AOTK_OK, "dense attention: %s: %s", aotk_status_name(status), aotk_last_error());
    ok = status == AOTK_OK && aotk_gpu_test_synchronize("dense attention");
  }
  for (int t = 0; t < 4 && ok; t++) {
    const int64_t count = rows[t] * heads[t] * dims[t];
    free(host);
    host = host_alloc(count, sizeof(uint16_t));
    ok = host != NULL && aotk_gpu_test_download(host, dev[t], (size_t)count * 2);
    const int64_t used_rows = result_rows(x, t);
    for (int64_t e = 0; ok && e < used_rows * heads[t] * dims[t]; e++) r.values[t][e] = aotk__dtype_value(host[e], dtype);
  }
  lse = host_alloc(HQ * x->rows_q, sizeof(float));
  ok = ok && lse != NULL && aotk_gpu_test_download(lse, dev[DLSE], (size_t)(HQ * x->rows_q) * 4);
  for (int64_t token = 0; ok && token < x->total_q; token++)
    for (int64_t h = 0; h < HQ; h++) r.lse[token * HQ + h] = lse[h * x->rows_q + token];
  if (ok) compare_runs(x, base, &r, RUN_FWD | RUN_BWD, false, "every block against dense causal attention");
  free(host);
  free(lse);
  for (int b = 0; b < DBUFFERS; b++) aotk_gpu_test_free(&dev[b]);
  results_destroy(&r);
}

/* ---- one case ------------------------------------------------------------------------------- */

static void run_case(const void *argument) {
  const sel_case *c = argument;
  sel_run x;
  results base, repeat;
  memset(&base, 0, sizeof base);
  memset(&repeat, 0, sizeof repeat);
  if (!sel_run_create(&x, c) || !results_create(&x, &base) || !results_create(&x, &repeat)) goto done;
  CHECK_MSG(strncmp(x.fwd_kernel, "sel_fwd_", 8) == 0, "the forward query names %s", x.fwd_kernel);
  CHECK_MSG(strncmp(x.bwd_kernel, "sel_bwd_dkdv_", 13) == 0, "the backward query names %s, not the dK/dV pass",
            x.bwd_kernel);
  if (!run_sel(&x, &x.params, RUN_FWD | RUN_BWD, &base, "base run")) goto done;
  /* Determinism: the backward again, on re-poisoned gradients and workspace. */
  if (!run_sel(&x, &x.params, RUN_BWD, &repeat, "backward again")) goto done;
  compare_runs(&x, &base, &repeat, RUN_BWD, true, "the backward run twice");
  if (!compute_reference(&x)) goto done;
  compare_with_reference(&x, &base, RUN_FWD | RUN_BWD, true, "base run");
  if (aotk_test_state.case_failures > 0) goto done; /* the identities would only repeat the failure */
  identity_no_lse(&x, &base);
  identity_permuted(&x, &base);
  if (c->with_count) identity_padding(&x, &base);
  if (c->varlen) identity_separate_calls(&x, &base);
  if (c->selection == SELECT_EVERY_BLOCK) identity_dense(&x, &base);
done:
  results_destroy(&base);
  results_destroy(&repeat);
  sel_run_destroy(&x);
}

/* ---- the matrix ------------------------------------------------------------------------------ */

/* Sequence sets: one sequence of length L (no cu_seqlens), and two varlen mixes. The first holds an
 * empty sequence (no rows, 40 keys), one with no keys, len_q < len_k, len_q > len_k (rows 0..59 see
 * nothing), sequences shorter than every block size, and 63/64/65 around the block sizes. */
static const int64_t mix_short[][2] = {{63, 63}, {0, 40}, {17, 200}, {65, 65}, {1, 1}, {100, 40}, {64, 130}, {30, 0}};
static const int64_t mix_long[][2] = {{1000, 1000}, {5, 300}, {0, 0}, {31, 31}};
enum { SEQS_SINGLE, SEQS_SHORT_MIX, SEQS_LONG_MIX };

static void set_sequences(sel_case *c, int which, int64_t length) {
  c->varlen = which != SEQS_SINGLE;
  if (which == SEQS_SINGLE) {
    c->num_seqs = 1;
    c->len_q[0] = c->len_k[0] = length;
    return;
  }
  const int64_t(*mix)[2] = which == SEQS_SHORT_MIX ? mix_short : mix_long;
  c->num_seqs = which == SEQS_SHORT_MIX ? 8 : 4;
  for (int n = 0; n < c->num_seqs; n++) {
    c->len_q[n] = mix[n][0];
    c->len_k[n] = mix[n][1];
  }
}

static void name_case(sel_case *c) {
  char lengths[200];
  size_t used = 0;
  if (!c->varlen) {
    snprintf(lengths, sizeof lengths, "L=%lld", (long long)c->len_q[0]);
  } else {
    used = (size_t)snprintf(lengths, sizeof lengths, "varlen[");
    for (int n = 0; n < c->num_seqs && used < sizeof lengths; n++) {
      int written = snprintf(lengths + used, sizeof lengths - used, "%s%lldx%lld", n ? "," : "", (long long)c->len_q[n],
                             (long long)c->len_k[n]);
      if (written > 0) used += (size_t)written;
    }
    if (used < sizeof lengths) snprintf(lengths + used, sizeof lengths - used, "]");
  }
  snprintf(c->name, sizeof c->name, "sel %s d=%lld/%lld bs=%lld hkv=%lld G=%lld slots=%lld %s %s %s%s%s%s",
           aotk_gpu_test_dtype_label(c->dtype), (long long)c->head_dim_qk, (long long)c->head_dim_v,
           (long long)c->block_size, (long long)c->heads_kv, (long long)c->group, (long long)c->slots, lengths,
           selection_names[c->selection], layout_names[c->layout], c->with_count ? " cnt" : "",
           c->empty_percent ? " +empty rows" : "", c->softmax_scale != 0.0f ? " scale=0.3" : "");
}

typedef struct case_row {
  int bf16;
  int64_t head_dim_qk, head_dim_v, block_size, heads_kv, group, slots;
  int sequences;
  int64_t length;
  int with_count;
  selection_kind selection;
  int empty_percent;
  layout_kind layout;
  int scaled;
} case_row;

/* Every (dtype, head dims, block size) once with random selections, then the identities' and the long
 * cases. Slots beyond the available blocks are common (short sequences, 1 slot, ...). */
static const case_row case_rows[] = {
    {1, 64, 64, 32, 2, 1, 4, SEQS_SINGLE, 1, 0, SELECT_RANDOM, 0, LAYOUT_CONTIGUOUS, 0},
    {1, 64, 64, 64, 2, 4, 8, SEQS_SHORT_MIX, 0, 1, SELECT_RANDOM, 10, LAYOUT_PADDED, 0},
    {1, 64, 64, 128, 1, 16, 4, SEQS_LONG_MIX, 0, 0, SELECT_RANDOM, 0, LAYOUT_CONTIGUOUS, 1},
    {1, 128, 128, 32, 2, 4, 16, SEQS_SINGLE, 63, 1, SELECT_RANDOM, 0, LAYOUT_QKV, 0},
    {1, 128, 128, 64, 4, 1, 16, SEQS_SINGLE, 1000, 0, SELECT_RANDOM, 0, LAYOUT_PADDED, 0},
    {1, 128, 128, 128, 1, 64, 4, SEQS_SHORT_MIX, 0, 1, SELECT_RANDOM, 10, LAYOUT_CONTIGUOUS, 0},
    {1, 192, 128, 32, 1, 16, 32, SEQS_SINGLE, 65, 0, SELECT_RANDOM, 0, LAYOUT_QKV, 0},
    {1, 192, 128, 64, 1, 4, 16, SEQS_LONG_MIX, 0, 1, SELECT_RANDOM, 0, LAYOUT_PADDED, 0},
    {1, 192, 128, 128, 2, 1, 2, SEQS_SHORT_MIX, 0, 0, SELECT_RANDOM, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 64, 64, 32, 2, 4, 32, SEQS_LONG_MIX, 0, 1, SELECT_RANDOM, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 64, 64, 64, 1, 64, 4, SEQS_SINGLE, 64, 0, SELECT_RANDOM, 0, LAYOUT_QKV, 0},
    {0, 64, 64, 128, 3, 1, 8, SEQS_SHORT_MIX, 0, 1, SELECT_RANDOM, 0, LAYOUT_PADDED, 0},
    {0, 128, 128, 32, 1, 16, 16, SEQS_SHORT_MIX, 0, 0, SELECT_RANDOM, 10, LAYOUT_PADDED, 0},
    {0, 128, 128, 64, 2, 4, 1, SEQS_SINGLE, 65, 1, SELECT_RANDOM, 0, LAYOUT_QKV, 0},
    {0, 128, 128, 128, 2, 1, 16, SEQS_LONG_MIX, 0, 0, SELECT_RANDOM, 0, LAYOUT_CONTIGUOUS, 1},
    {0, 192, 128, 32, 2, 4, 8, SEQS_SHORT_MIX, 0, 1, SELECT_RANDOM, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 192, 128, 64, 1, 16, 8, SEQS_SINGLE, 1000, 0, SELECT_RANDOM, 0, LAYOUT_PADDED, 0},
    {0, 192, 128, 128, 1, 64, 4, SEQS_SINGLE, 63, 1, SELECT_RANDOM, 0, LAYOUT_QKV, 0},
    /* Every block: the dense identity (slots: the longest sequence's blocks, or more). */
    {1, 64, 64, 32, 2, 4, 8, SEQS_SHORT_MIX, 0, 1, SELECT_EVERY_BLOCK, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 128, 128, 64, 2, 1, 16, SEQS_SINGLE, 1000, 0, SELECT_EVERY_BLOCK, 0, LAYOUT_QKV, 0},
    {1, 192, 128, 128, 1, 16, 8, SEQS_LONG_MIX, 0, 0, SELECT_EVERY_BLOCK, 0, LAYOUT_PADDED, 0},
    {0, 64, 64, 64, 1, 64, 4, SEQS_SHORT_MIX, 0, 0, SELECT_EVERY_BLOCK, 0, LAYOUT_PADDED, 0},
    {0, 192, 128, 128, 1, 2, 33, SEQS_SINGLE, 4097, 1, SELECT_EVERY_BLOCK, 0, LAYOUT_CONTIGUOUS, 0},
    /* 4097 tokens with random selections. */
    {1, 128, 128, 64, 1, 4, 16, SEQS_SINGLE, 4097, 1, SELECT_RANDOM, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 64, 64, 32, 1, 16, 32, SEQS_SINGLE, 4097, 0, SELECT_RANDOM, 5, LAYOUT_PADDED, 0},
    /* Nothing selected anywhere: every output 0 (lse -inf); with block_cnt 0 over readable ids. */
    {0, 64, 64, 64, 2, 4, 4, SEQS_SHORT_MIX, 0, 0, SELECT_NOTHING, 0, LAYOUT_CONTIGUOUS, 0},
    {1, 128, 128, 32, 1, 4, 8, SEQS_SINGLE, 300, 1, SELECT_NOTHING, 0, LAYOUT_PADDED, 0},
    /* Blocks listed twice (the caller's error, but the header defines it: counted twice). */
    {1, 64, 64, 64, 2, 4, 8, SEQS_SHORT_MIX, 0, 1, SELECT_DUPLICATES, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 128, 128, 32, 1, 16, 16, SEQS_SINGLE, 1000, 0, SELECT_DUPLICATES, 0, LAYOUT_PADDED, 0},
    /* Hot blocks (NSA's fixed picks: block 0's list holds every token, past the index's sort tile of
     * 8192 and past 65536 tokens: split across dK/dV programs), every dtype and head-dim pair. */
    {1, 64, 64, 64, 2, 4, 3, SEQS_SINGLE, 8200, 0, SELECT_HOT, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 64, 64, 32, 1, 1, 3, SEQS_SINGLE, 65600, 1, SELECT_HOT, 0, LAYOUT_PADDED, 0},
    {0, 128, 128, 128, 1, 8, 4, SEQS_SINGLE, 8200, 1, SELECT_HOT, 0, LAYOUT_QKV, 0},
    {1, 128, 128, 64, 1, 1, 3, SEQS_SINGLE, 65600, 0, SELECT_HOT, 0, LAYOUT_CONTIGUOUS, 0},
    {1, 192, 128, 32, 1, 4, 4, SEQS_SINGLE, 8200, 0, SELECT_HOT, 0, LAYOUT_PADDED, 0},
    {0, 192, 128, 64, 1, 1, 3, SEQS_SINGLE, 65600, 0, SELECT_HOT, 0, LAYOUT_CONTIGUOUS, 0},
    /* Mostly empty rows (about a quarter of the slots valid), every dtype and head-dim pair. */
    {1, 64, 64, 32, 2, 16, 16, SEQS_SINGLE, 2000, 1, SELECT_SPARSE, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 64, 64, 128, 1, 4, 8, SEQS_LONG_MIX, 0, 0, SELECT_SPARSE, 0, LAYOUT_PADDED, 0},
    {1, 128, 128, 64, 1, 16, 16, SEQS_SINGLE, 2000, 0, SELECT_SPARSE, 0, LAYOUT_QKV, 0},
    {0, 128, 128, 32, 2, 4, 32, SEQS_SHORT_MIX, 0, 1, SELECT_SPARSE, 0, LAYOUT_CONTIGUOUS, 0},
    {1, 192, 128, 128, 1, 8, 16, SEQS_LONG_MIX, 0, 1, SELECT_SPARSE, 0, LAYOUT_CONTIGUOUS, 0},
    {0, 192, 128, 64, 2, 4, 16, SEQS_SINGLE, 2000, 0, SELECT_SPARSE, 0, LAYOUT_PADDED, 0},
    /* A group of 64 with two kv heads (128 query heads). */
    {1, 128, 128, 64, 2, 64, 8, SEQS_SHORT_MIX, 0, 1, SELECT_RANDOM, 5, LAYOUT_PADDED, 0},
};

static void make_case(sel_case *c, const case_row *row, int index) {
  memset(c, 0, sizeof *c);
  c->dtype = row->bf16 ? AOTK_DTYPE_BFLOAT16 : AOTK_DTYPE_FLOAT16;
  c->head_dim_qk = row->head_dim_qk;
  c->head_dim_v = row->head_dim_v;
  c->block_size = row->block_size;
  c->heads_kv = row->heads_kv;
  c->group = row->group;
  c->slots = row->slots;
  set_sequences(c, row->sequences, row->length);
  c->with_count = row->with_count;
  c->selection = row->selection;
  c->empty_percent = row->empty_percent;
  c->layout = row->layout;
  c->softmax_scale = row->scaled ? 0.3f : 0.0f;
  c->max_seqlen_slack = index % 3 == 1 ? 7 : 0;
  c->seed = seed + (uint64_t)index * 1000003u;
  name_case(c);
}

int main(void) {
  if (!aotk_gpu_test_setup()) return aotk_gpu_test_skip_all();
  static sel_case cases[sizeof case_rows / sizeof case_rows[0]];
  for (size_t i = 0; i < sizeof case_rows / sizeof case_rows[0]; i++) {
    make_case(&cases[i], &case_rows[i], (int)i);
    aotk_test_run_with(cases[i].name, run_case, &cases[i]);
  }
  printf("worst error as a fraction of its bound: bf16 %.3f, fp16 %.3f\n", worst_fraction[AOTK_DTYPE_BFLOAT16],
         worst_fraction[AOTK_DTYPE_FLOAT16]);
  printf("    bf16: %s\n    fp16: %s\n", worst_case[AOTK_DTYPE_BFLOAT16], worst_case[AOTK_DTYPE_FLOAT16]);
  driver->cuStreamDestroy(stream);
  return aotk_test_finish();
}
