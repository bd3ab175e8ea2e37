/* One GPU correctness case for the backward: see aotk_check.h. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aotk_check.h"
#include "aotk_check_case.h"
#include "aotk_error.h"
#include "aotk_half.h"
#include "aotk_random.h"
#include "aotk_reference.h"

/* --- the backward ------------------------------------------------------------------------------ */

enum { BWD_Q, BWD_K, BWD_V, BWD_OUT, BWD_DOUT, BWD_DQ, BWD_DK, BWD_DV, BWD_TENSORS };

/* The backward's references cost 12 dot products of head_dim per (query row, visible key, query
 * head), both together: ~1 us at head_dim 128, so one 1000 x 1000 case with 8 query heads takes ~8 s
 * on one core. They are spread over the machine's cores, up to this many threads. */
#define AOTK__CHECK_MAX_THREADS 64

/* The layout of the same alignment class with other strides: see aotk__bwd_check_case.mix_layouts. */
static aotk__check_layout partner_layout(aotk__check_layout layout) {
  switch (layout) {
    case AOTK__LAYOUT_CONTIGUOUS:
      return AOTK__LAYOUT_PERMUTED;
    case AOTK__LAYOUT_PERMUTED:
      return AOTK__LAYOUT_CONTIGUOUS;
    case AOTK__LAYOUT_PADDED:
      return AOTK__LAYOUT_OFFSET;
    case AOTK__LAYOUT_OFFSET:
    default:
      return AOTK__LAYOUT_PADDED;
  }
}

/* Maxima of one comparison (per gradient tensor), kept per worker thread and merged. */
typedef struct bwd_comparison {
  double max_error[AOTK__CHECK_GRADIENTS];
  double lowp_max_error[AOTK__CHECK_GRADIENTS];
  double max_magnitude[AOTK__CHECK_GRADIENTS];
  int64_t elements_checked;
  int64_t bad_empty_rows;
  int out_of_memory;
} bwd_comparison;

/* One row of dq ((sequence, query head, row)) or key row of dk and dv ((sequence, kv head, key)). */
typedef struct bwd_item {
  int32_t seq, head;
  int64_t row;
} bwd_item;

/* The host reference of one case, shared by its worker threads. Phase 0 computes each (sequence,
 * head_q, row)'s statistics, item i being the statistics' own index; phase 1 computes the dq rows of
 * dq_items, then the dk/dv key rows of kv_items, both references, and compares them with the GPU's
 * bits. Items are handed out one at a time through next_item. */
typedef struct bwd_reference_job {
  const aotk__attn_reference_problem *problems; /* [seqs] */
  const aotk__check_shape *shape;
  aotk_dtype dtype;
  const aotk__placed_tensor *placed;  /* [BWD_TENSORS] */
  const uint16_t *gradient_bits[3];
  const uint16_t *out_bits; /* the forward's out, when the emulation's delta reads it (stored_out_delta) */
  double *lse_f64, *delta_f64;  /* at aotk__check_shape.stats_offset[seq] + head * len_q[seq] + row */
  float *lse_lowp, *delta_lowp;
  const bwd_item *dq_items, *kv_items;
  int64_t dq_count, kv_count;
  int phase;
  int64_t item_count;
  _Atomic int64_t next_item;
  bwd_comparison *per_worker;
} bwd_reference_job;

typedef struct bwd_worker {
  bwd_reference_job *job;
  int index;
} bwd_worker;

static void record(bwd_comparison *c, int tensor, double got, double exact, float lowp) {
  double error = fabs(got - exact);
  if (!(error <= c->max_error[tensor])) c->max_error[tensor] = isnan(error) ? INFINITY : error;
  double lowp_error = fabs((double)lowp - exact);
  if (!(lowp_error <= c->lowp_max_error[tensor])) c->lowp_max_error[tensor] = isnan(lowp_error) ? INFINITY : lowp_error;
  if (fabs(exact) > c->max_magnitude[tensor]) c->max_magnitude[tensor] = fabs(exact);
  c->elements_checked++;
}

/* The sequence whose statistics hold item `item` (stats_offset or key_offset as `offsets`): the one
 * with offsets[b] <= item < offsets[b + 1] (so never an empty one). */
static int64_t sequence_of(const int64_t *offsets, int64_t seqs, int64_t item) {
  int64_t lo = 0, hi = seqs - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= item) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

static void *bwd_reference_worker(void *argument) {
  const bwd_worker *worker = argument;
  bwd_reference_job *job = worker->job;
  bwd_comparison *c = &job->per_worker[worker->index];
  const aotk__check_shape *s = job->shape;
  const int64_t DQK = s->dim_qk, DV = s->dim_v;
  double *exact = malloc(sizeof(double) * (size_t)(DQK + DV));
  float *lowp = malloc(sizeof(float) * (size_t)(DQK + DV));
  if (exact == NULL || lowp == NULL) {
    c->out_of_memory = 1;
    free(exact);
    free(lowp);
    return NULL;
  }
  for (;;) {
    int64_t item = atomic_fetch_add(&job->next_item, 1);
    if (item >= job->item_count) break;
    if (job->phase == 0) {
      const int64_t b = sequence_of(s->stats_offset, s->seqs, item);
      const int64_t local = item - s->stats_offset[b];
      const int64_t h = local / s->len_q[b], row = local % s->len_q[b];
      const aotk__attn_reference_problem *p = &job->problems[b];
      aotk__attn_reference_bwd_row_stats_f64(p, 0, h, row, exact, &job->lse_f64[item], &job->delta_f64[item]);
      aotk__attn_reference_bwd_row_stats_lowp(p, (int)job->dtype, 0, h, row, lowp, &job->lse_lowp[item],
                                              &job->delta_lowp[item]);
      if (job->out_bits != NULL && !isinf(job->lse_lowp[item])) {
        for (int64_t d = 0; d < DV; d++) {
          lowp[d] = (float)aotk__dtype_value(
              job->out_bits[aotk__check_seq_element(&job->placed[BWD_OUT], s, true, b, row, h, d)], job->dtype);
        }
        job->delta_lowp[item] = aotk__attn_reference_bwd_delta_lowp(p, 0, h, row, lowp);
      }
    } else if (item < job->dq_count) {
      const bwd_item *it = &job->dq_items[item];
      const int64_t b = it->seq, h = it->head, row = it->row;
      const int64_t stat = s->stats_offset[b] + h * s->len_q[b] + row;
      const aotk__attn_reference_problem *p = &job->problems[b];
      aotk__attn_reference_bwd_dq_row_f64(p, 0, h, row, job->lse_f64[stat], job->delta_f64[stat], exact);
      aotk__attn_reference_bwd_dq_row_lowp(p, (int)job->dtype, 0, h, row, job->lse_lowp[stat], job->delta_lowp[stat],
                                           lowp);
      bool empty = isinf(job->lse_f64[stat]) && job->lse_f64[stat] < 0;
      bool nonzero = false;
      for (int64_t d = 0; d < DQK; d++) {
        double got = aotk__dtype_value(
            job->gradient_bits[0][aotk__check_seq_element(&job->placed[BWD_DQ], s, true, b, row, h, d)], job->dtype);
        record(c, AOTK__CHECK_DQ, got, exact[d], lowp[d]);
        if (got != 0.0) nonzero = true;
      }
      if (empty && nonzero) c->bad_empty_rows++;
    } else {
      const bwd_item *it = &job->kv_items[item - job->dq_count];
      const int64_t b = it->seq, h = it->head, j = it->row;
      const int64_t stats = s->stats_offset[b];
      const aotk__attn_reference_problem *p = &job->problems[b];
      aotk__attn_reference_bwd_dkdv_row_f64(p, 0, h, j, job->lse_f64 + stats, job->delta_f64 + stats, exact,
                                            exact + DQK);
      aotk__attn_reference_bwd_dkdv_row_lowp(p, (int)job->dtype, 0, h, j, job->lse_lowp + stats,
                                             job->delta_lowp + stats, lowp, lowp + DQK);
      for (int64_t d = 0; d < DQK; d++) {
        double got = aotk__dtype_value(
            job->gradient_bits[1][aotk__check_seq_element(&job->placed[BWD_DK], s, false, b, j, h, d)], job->dtype);
        record(c, AOTK__CHECK_DK, got, exact[d], lowp[d]);
      }
      for (int64_t d = 0; d < DV; d++) {
        double got = aotk__dtype_value(
            job->gradient_bits[2][aotk__check_seq_element(&job->placed[BWD_DV], s, false, b, j, h, d)], job->dtype);
        record(c, AOTK__CHECK_DV, got, exact[DQK + d], lowp[DQK + d]);
      }
    }
  }
  free(exact);
  free(lowp);
  return NULL;
}

/* Runs one phase on up to `threads` threads, the calling thread among them. A thread that cannot be
 * started leaves its share to the others. */
static void run_bwd_reference_phase(bwd_reference_job *job, int phase, int64_t item_count, int threads,
                                    bwd_worker *workers, pthread_t *handles) {
  job->phase = phase;
  job->item_count = item_count;
  atomic_store(&job->next_item, 0);
  bool started[AOTK__CHECK_MAX_THREADS] = {false};
  for (int i = 1; i < threads; i++) {
    workers[i].job = job;
    workers[i].index = i;
    started[i] = pthread_create(&handles[i], NULL, bwd_reference_worker, &workers[i]) == 0;
  }
  workers[0].job = job;
  workers[0].index = 0;
  bwd_reference_worker(&workers[0]);
  for (int i = 1; i < threads; i++) {
    if (started[i]) pthread_join(handles[i], NULL);
  }
}

static int reference_threads(void) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online < 1) return 1;
  return online > AOTK__CHECK_MAX_THREADS ? AOTK__CHECK_MAX_THREADS : (int)online;
}

/* The rows compared: for each sequence and head (query heads for dq, kv heads for dk/dv), every row
 * or rows_per_head sampled ones. *items has room for every row. */
static int64_t choose_items(const aotk__check_shape *s, bool q_side, int64_t rows_per_head, int64_t *scratch,
                            uint64_t *state, bwd_item *items) {
  int64_t count = 0;
  const int64_t heads = q_side ? s->heads_q : s->heads_kv;
  for (int64_t b = 0; b < s->seqs; b++) {
    const int64_t length = q_side ? s->len_q[b] : s->len_k[b];
    for (int64_t h = 0; h < heads; h++) {
      /* At least 2 when sampling: the first row and the last. */
      const int64_t per_head = rows_per_head <= 0 ? length : rows_per_head < 2 ? 2 : rows_per_head;
      int64_t chosen = aotk__check_choose_rows(length, per_head, scratch, state);
      for (int64_t i = 0; i < chosen; i++) {
        items[count].seq = (int32_t)b;
        items[count].head = (int32_t)h;
        items[count].row = scratch[i];
        count++;
      }
    }
  }
  return count;
}

aotk_status aotk__check_attn_bwd(const aotk__driver *driver, const aotk__bwd_check_case *c,
                                 aotk__bwd_check_result *r) {
  memset(r, 0, sizeof *r);
  uint64_t state = c->seed;
  const aotk__check_features *f = &c->features;
  aotk__check_shape s;
  aotk_status status = aotk__check_resolve_shape(c->batch, c->seqlen_q, c->seqlen_k, c->heads_q, c->heads_kv,
                                                 c->head_dim, c->layout, f, &s);
  if (status != AOTK_OK) return status;
  const int64_t HQ = s.heads_q, DQK = s.dim_qk;
  const int64_t placed_batch = s.varlen ? 1 : s.seqs;
  const bool dropout = f->dropout_p > 0.0f;
  aotk__placed_tensor placed[BWD_TENSORS];
  for (int t = 0; t < BWD_TENSORS; t++) {
    aotk__check_layout layout = c->mix_layouts && t % 2 == 1 ? partner_layout(c->layout) : c->layout;
    bool q_shaped = t == BWD_Q || t == BWD_OUT || t == BWD_DOUT || t == BWD_DQ;
    bool qk_dim = t == BWD_Q || t == BWD_K || t == BWD_DQ || t == BWD_DK;
    placed[t] = aotk__check_place(layout, placed_batch, q_shaped ? s.rows_q : s.rows_k, q_shaped ? HQ : s.heads_kv,
                                  qk_dim ? DQK : s.dim_v);
  }
  static const int inputs[] = {BWD_Q, BWD_K, BWD_V, BWD_DOUT};
  static const int gradients[] = {BWD_DQ, BWD_DK, BWD_DV};
  static const char *const gradient_names[AOTK__CHECK_GRADIENTS] = {"dq", "dk", "dv", "dsinks"};

  float *host[BWD_TENSORS] = {NULL};
  uint16_t *first_bits[3] = {NULL}, *repeat_bits = NULL, *bits = NULL, *out_bits = NULL;
  float *dsinks_first = NULL, *dsinks_repeat = NULL;
  double *lse_f64 = NULL, *delta_f64 = NULL;
  float *lse_lowp = NULL, *delta_lowp = NULL;
  bwd_item *dq_items = NULL, *kv_items = NULL;
  int64_t *scratch = NULL;
  aotk__attn_reference_problem *problems = NULL;
  bwd_comparison *per_worker = NULL;
  bwd_worker *workers = NULL;
  pthread_t *handles = NULL;
  CUdeviceptr dev[BWD_TENSORS] = {0}, dev_lse = 0, dev_workspace = 0, dev_dsinks = 0;
  aotk__check_feature_buffers fb;
  memset(&fb, 0, sizeof fb);

  int64_t max_storage = 0;
  for (int t = 0; t < BWD_TENSORS; t++) {
    if (placed[t].storage_elements > max_storage) max_storage = placed[t].storage_elements;
  }
  bool allocated = true;
  for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
    host[inputs[i]] = malloc(sizeof(float) * (size_t)placed[inputs[i]].storage_elements);
    allocated = allocated && host[inputs[i]] != NULL;
  }
  for (int g = 0; g < 3; g++) {
    first_bits[g] = malloc(sizeof(uint16_t) * (size_t)placed[gradients[g]].storage_elements);
    allocated = allocated && first_bits[g] != NULL;
  }
  bits = malloc(sizeof(uint16_t) * (size_t)max_storage);
  repeat_bits = malloc(sizeof(uint16_t) * (size_t)max_storage);
  dsinks_first = malloc(sizeof(float) * (size_t)HQ);
  dsinks_repeat = malloc(sizeof(float) * (size_t)HQ);
  const int64_t stats_count = s.stats_offset[s.seqs], kv_rows = s.key_offset[s.seqs];
  /* At least one element each, so that a case with no rows at all still allocates. */
  lse_f64 = malloc(sizeof(double) * (size_t)(stats_count + 1));
  delta_f64 = malloc(sizeof(double) * (size_t)(stats_count + 1));
  lse_lowp = malloc(sizeof(float) * (size_t)(stats_count + 1));
  delta_lowp = malloc(sizeof(float) * (size_t)(stats_count + 1));
  dq_items = malloc(sizeof(bwd_item) * (size_t)(stats_count + 1));
  kv_items = malloc(sizeof(bwd_item) * (size_t)(kv_rows + 1));
  scratch = malloc(sizeof(int64_t) * (size_t)((s.max_q > s.max_k ? s.max_q : s.max_k) + 2));
  problems = calloc((size_t)s.seqs, sizeof *problems);
  const int threads = reference_threads();
  per_worker = calloc((size_t)threads, sizeof *per_worker);
  workers = calloc((size_t)threads, sizeof *workers);
  handles = calloc((size_t)threads, sizeof *handles);
  if (!allocated || !bits || !repeat_bits || !dsinks_first || !dsinks_repeat || !lse_f64 || !delta_f64 || !lse_lowp ||
      !delta_lowp || !dq_items || !kv_items || !scratch || !problems || !per_worker || !workers || !handles) {
    status = aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
    goto done;
  }

  for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
    const aotk__placed_tensor *t = &placed[inputs[i]];
    aotk__check_fill_random(host[inputs[i]], bits, t->storage_elements, c->dtype, &state);
    if ((status = aotk__check_upload(driver, &dev[inputs[i]], bits, 2 * (size_t)t->storage_elements)) != AOTK_OK) goto done;
  }
  /* Poison: 0xffff is a NaN in both fp16 and bf16, 0xffffffff in fp32. */
  static const int outputs[] = {BWD_OUT, BWD_DQ, BWD_DK, BWD_DV};
  for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) {
    size_t bytes = 2 * (size_t)placed[outputs[i]].storage_elements;
    if ((status = aotk__check_alloc_poisoned(driver, &dev[outputs[i]], bytes, 0xff)) != AOTK_OK) goto done;
  }
  if ((status = aotk__check_alloc_poisoned(driver, &dev_lse, 4 * (size_t)s.lse_elements, 0xff)) != AOTK_OK) goto done;

  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = aotk__check_as_aotk_tensor(&placed[BWD_Q], dev[BWD_Q], c->dtype, 2, s.varlen);
  params.k = aotk__check_as_aotk_tensor(&placed[BWD_K], dev[BWD_K], c->dtype, 2, s.varlen);
  params.v = aotk__check_as_aotk_tensor(&placed[BWD_V], dev[BWD_V], c->dtype, 2, s.varlen);
  params.out = aotk__check_as_aotk_tensor(&placed[BWD_OUT], dev[BWD_OUT], c->dtype, 2, s.varlen);
  params.lse = aotk__check_lse_tensor(&s, dev_lse);
  params.softmax_scale = c->softmax_scale;
  params.causal = c->causal;
  params.dout = aotk__check_as_aotk_tensor(&placed[BWD_DOUT], dev[BWD_DOUT], c->dtype, 2, s.varlen);
  params.dq = aotk__check_as_aotk_tensor(&placed[BWD_DQ], dev[BWD_DQ], c->dtype, 2, s.varlen);
  params.dk = aotk__check_as_aotk_tensor(&placed[BWD_DK], dev[BWD_DK], c->dtype, 2, s.varlen);
  params.dv = aotk__check_as_aotk_tensor(&placed[BWD_DV], dev[BWD_DV], c->dtype, 2, s.varlen);
  params.deterministic = c->deterministic;
  if ((status = aotk__check_setup_features(driver, &s, f, &state, &fb, &params)) != AOTK_OK) goto done;
  if (f->sinks) {
    if ((status = aotk__check_alloc_poisoned(driver, &dev_dsinks, 4 * (size_t)HQ, 0xff)) != AOTK_OK) goto done;
    params.dsinks = aotk_tensor_1d((void *)(uintptr_t)dev_dsinks, AOTK_DTYPE_FLOAT32, HQ);
  }

  /* The forward (with its dropout mask: the reference's), then the backward, which takes no mask. */
  if ((status = aotk__check_settle(driver)) != AOTK_OK) goto done;
  if ((status = aotk_attn_fwd(&params, c->stream)) != AOTK_OK) goto done;
  if ((status = aotk__check_synchronize(driver, c->stream, "aotk_attn_fwd")) != AOTK_OK) goto done;
  if (c->stored_out_delta) {
    const size_t out_bytes = 2 * (size_t)placed[BWD_OUT].storage_elements;
    if ((out_bits = malloc(out_bytes)) == NULL) {
      status = aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
      goto done;
    }
    AOTK__CHECK_CU(driver->cuMemcpyDtoH(out_bits, dev[BWD_OUT], out_bytes), "cuMemcpyDtoH");
  }
  if (dropout) {
    AOTK__CHECK_CU(driver->cuMemcpyDtoH(fb.mask, fb.mask_device, (size_t)s.mask_elements), "cuMemcpyDtoH");
    aotk__check_mask_comparison m;
    aotk__check_compare_mask(&s, fb.mask, f->rng_seed, f->rng_offset, f->dropout_p, &m);
    r->mask_mismatches = m.mismatches + m.clobbered;
    memset(&params.dropout_mask, 0, sizeof params.dropout_mask);
  }
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  if ((status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info)) != AOTK_OK) goto done;
  aotk__check_copy_info(&info, r->kernel_name, sizeof r->kernel_name, &r->from_ptx, &r->kernel_head_dim_qk,
                        &r->kernel_head_dim_v, &r->features, &r->launches);
  r->workspace_bytes = info.workspace_bytes;
  /* Exactly the reported size (cuMemAlloc aligns to 256 bytes); at least one byte to allocate. */
  const size_t workspace_alloc = info.workspace_bytes > 0 ? info.workspace_bytes : 1;
  AOTK__CHECK_CU(driver->cuMemAlloc(&dev_workspace, workspace_alloc), "cuMemAlloc");

  for (int run = 0; run <= (c->repeats > 0 ? c->repeats : 0); run++) {
    if (run > 0) {
      /* Re-poisoned, so that a run that skips an element cannot pass on the previous run's value. */
      for (int g = 0; g < 3; g++) {
        AOTK__CHECK_CU(driver->cuMemsetD8(dev[gradients[g]], 0xff, 2 * (size_t)placed[gradients[g]].storage_elements),
                 "cuMemsetD8");
      }
      if (dev_dsinks) AOTK__CHECK_CU(driver->cuMemsetD8(dev_dsinks, 0xff, 4 * (size_t)HQ), "cuMemsetD8");
    }
    /* The workspace is documented as not read before it is written: poison it every time. */
    AOTK__CHECK_CU(driver->cuMemsetD8(dev_workspace, 0xff, workspace_alloc), "cuMemsetD8");
    if ((status = aotk__check_settle(driver)) != AOTK_OK) goto done;
    if ((status = aotk_attn_bwd(&params, (void *)(uintptr_t)dev_workspace, info.workspace_bytes, c->stream)) !=
        AOTK_OK) {
      goto done;
    }
    if ((status = aotk__check_synchronize(driver, c->stream, "aotk_attn_bwd")) != AOTK_OK) goto done;
    bool same = true;
    for (int g = 0; g < 3; g++) {
      size_t bytes = 2 * (size_t)placed[gradients[g]].storage_elements;
      uint16_t *into = run == 0 ? first_bits[g] : repeat_bits;
      AOTK__CHECK_CU(driver->cuMemcpyDtoH(into, dev[gradients[g]], bytes), "cuMemcpyDtoH");
      if (run > 0 && memcmp(into, first_bits[g], bytes) != 0) same = false;
    }
    if (dev_dsinks) {
      float *into = run == 0 ? dsinks_first : dsinks_repeat;
      AOTK__CHECK_CU(driver->cuMemcpyDtoH(into, dev_dsinks, 4 * (size_t)HQ), "cuMemcpyDtoH");
      if (run > 0 && memcmp(into, dsinks_first, 4 * (size_t)HQ) != 0) same = false;
    }
    if (!same) r->nondeterministic++;
  }

  for (int g = 0; g < 3; g++) {
    bool q_side = gradients[g] == BWD_DQ;
    if ((status = aotk__check_count_coverage(&placed[gradients[g]], &s, q_side, first_bits[g], c->dtype,
                                             &r->unwritten, &r->clobbered)) != AOTK_OK) {
      goto done;
    }
  }

  const double scale = aotk__check_resolved_scale(c->softmax_scale, DQK);
  const aotk__check_host_inputs in = {host[BWD_Q], host[BWD_K], host[BWD_V], host[BWD_DOUT], &placed[BWD_Q],
                                      &placed[BWD_K], &placed[BWD_V], &placed[BWD_DOUT], fb.alibi, fb.sinks,
                                      dropout ? fb.mask : NULL};
  for (int64_t b = 0; b < s.seqs; b++) aotk__check_reference_problem(&problems[b], &s, b, c->causal, scale, f, &in);
  const int64_t dq_count = choose_items(&s, true, c->rows_per_head, scratch, &state, dq_items);
  const int64_t kv_count = choose_items(&s, false, c->rows_per_head, scratch, &state, kv_items);
  bwd_reference_job job = {problems, &s, c->dtype, placed, {first_bits[0], first_bits[1], first_bits[2]}, out_bits,
                           lse_f64, delta_f64, lse_lowp, delta_lowp, dq_items, kv_items, dq_count, kv_count,
                           0, 0, 0, per_worker};
  run_bwd_reference_phase(&job, 0, stats_count, threads, workers, handles);
  run_bwd_reference_phase(&job, 1, dq_count + kv_count, threads, workers, handles);

  for (int w = 0; w < threads; w++) {
    const bwd_comparison *pw = &per_worker[w];
    if (pw->out_of_memory) {
      status = aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
      goto done;
    }
    for (int g = 0; g < AOTK__CHECK_GRADIENTS; g++) {
      if (!(pw->max_error[g] <= r->max_error[g])) r->max_error[g] = pw->max_error[g];
      if (!(pw->lowp_max_error[g] <= r->lowp_max_error[g])) r->lowp_max_error[g] = pw->lowp_max_error[g];
      if (pw->max_magnitude[g] > r->max_magnitude[g]) r->max_magnitude[g] = pw->max_magnitude[g];
    }
    r->elements_checked += pw->elements_checked;
    r->bad_empty_rows += pw->bad_empty_rows;
  }
  /* dsinks: each head's sum over every sequence of its rows' shares, from phase 0's statistics, with
   * its own bound (see AOTK__CHECK_DSINK_SIGMAS); the head nearest its bound is reported. */
  double dsink_fraction = 0.0;
  if (f->sinks) {
    for (int64_t h = 0; h < HQ; h++) {
      double exact = 0.0, spread = 0.0;
      float lowp = 0.0f;
      for (int64_t b = 0; b < s.seqs; b++) {
        const int64_t at = s.stats_offset[b] + h * s.len_q[b];
        exact += aotk__attn_reference_bwd_dsink_f64(&problems[b], h, lse_f64 + at, delta_f64 + at);
        lowp += aotk__attn_reference_bwd_dsink_lowp(&problems[b], h, lse_lowp + at, delta_lowp + at);
        for (int64_t row = 0; row < s.len_q[b]; row++) {
          if (isinf(lse_f64[at + row])) continue;
          double term = exp((double)fb.sinks[h] - lse_f64[at + row]) * ((double)delta_lowp[at + row] - delta_f64[at + row]);
          spread += term * term;
        }
      }
      const double got = (double)dsinks_first[h];
      /* A NaN (the poison) is an unwritten element, and an infinite error. */
      if (isnan(got)) r->unwritten++;
      double error = isnan(got) ? INFINITY : fabs(got - exact), lowp_error = fabs((double)lowp - exact);
      double bound = 2.0 * lowp_error + AOTK__CHECK_DSINK_SIGMAS * sqrt(spread) +
                     AOTK__CHECK_BWD_ERROR_FLOOR * (fabs(exact) > 1.0 ? fabs(exact) : 1.0);
      double fraction = error / bound;
      if (h == 0 || !(fraction <= dsink_fraction)) {
        dsink_fraction = fraction;
        r->max_error[AOTK__CHECK_DSINKS] = error;
        r->lowp_max_error[AOTK__CHECK_DSINKS] = lowp_error;
        r->bound[AOTK__CHECK_DSINKS] = bound;
      }
      if (fabs(exact) > r->max_magnitude[AOTK__CHECK_DSINKS]) r->max_magnitude[AOTK__CHECK_DSINKS] = fabs(exact);
      r->elements_checked++;
    }
  }
  bool numbers_ok = true;
  const int compared = f->sinks ? AOTK__CHECK_GRADIENTS : AOTK__CHECK_DSINKS;
  for (int g = 0; g < compared; g++) {
    double fraction;
    if (g == AOTK__CHECK_DSINKS) {
      fraction = dsink_fraction;
    } else {
      double magnitude_scale = r->max_magnitude[g] > 1.0 ? r->max_magnitude[g] : 1.0;
      r->bound[g] = 2.0 * r->lowp_max_error[g] + AOTK__CHECK_BWD_ERROR_FLOOR * magnitude_scale;
      fraction = r->max_error[g] / r->bound[g];
    }
    if (!(fraction <= r->worst_fraction)) r->worst_fraction = isnan(fraction) ? INFINITY : fraction;
    if (!(fraction <= 1.0)) numbers_ok = false;
  }
  r->passed = numbers_ok && r->unwritten == 0 && r->clobbered == 0 && r->bad_empty_rows == 0 &&
              r->nondeterministic == 0 && r->mask_mismatches == 0;
  int used = snprintf(r->detail, sizeof r->detail, "err/bound");
  for (int g = 0; g < compared && used > 0 && (size_t)used < sizeof r->detail; g++) {
    used += snprintf(r->detail + used, sizeof r->detail - (size_t)used, " %s %.3g/%.3g", gradient_names[g],
                     r->max_error[g], r->bound[g]);
  }
  for (int g = 0; g < compared && used > 0 && (size_t)used < sizeof r->detail; g++) {
    used += snprintf(r->detail + used, sizeof r->detail - (size_t)used, "%s%.3g", g == 0 ? " (same-precision " : " ",
                     r->lowp_max_error[g]);
  }
  for (int g = 0; g < compared && used > 0 && (size_t)used < sizeof r->detail; g++) {
    used += snprintf(r->detail + used, sizeof r->detail - (size_t)used, "%s%.3g", g == 0 ? ", max |ref| " : " ",
                     r->max_magnitude[g]);
  }
  if (used > 0 && (size_t)used < sizeof r->detail) {
    snprintf(r->detail + used, sizeof r->detail - (size_t)used,
             "; bound = 2 x same-precision + %.0e x max(1, max |ref|), dsinks + its spread), elements %lld, unwritten %lld, clobbered %lld, "
             "bad empty rows %lld, nondeterministic runs %lld of %d, mask mismatches %lld",
             AOTK__CHECK_BWD_ERROR_FLOOR, (long long)r->elements_checked, (long long)r->unwritten,
             (long long)r->clobbered, (long long)r->bad_empty_rows, (long long)r->nondeterministic,
             c->repeats > 0 ? c->repeats : 0, (long long)r->mask_mismatches);
  }

done:
  for (int t = 0; t < BWD_TENSORS; t++) {
    if (dev[t]) driver->cuMemFree(dev[t]);
    free(host[t]);
  }
  if (dev_lse) driver->cuMemFree(dev_lse);
  if (dev_workspace) driver->cuMemFree(dev_workspace);
  if (dev_dsinks) driver->cuMemFree(dev_dsinks);
  aotk__check_free_features(driver, &fb);
  for (int g = 0; g < 3; g++) free(first_bits[g]);
  free(out_bits);
  free(bits);
  free(repeat_bits);
  free(dsinks_first);
  free(dsinks_repeat);
  free(lse_f64);
  free(delta_f64);
  free(lse_lowp);
  free(delta_lowp);
  free(dq_items);
  free(kv_items);
  free(scratch);
  free(problems);
  free(per_worker);
  free(workers);
  free(handles);
  return status;
}
