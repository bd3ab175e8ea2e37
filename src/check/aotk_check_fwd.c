/* One GPU correctness case for the forward: see aotk_check.h. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotk_check.h"
#include "aotk_check_case.h"
#include "aotk_error.h"
#include "aotk_half.h"
#include "aotk_random.h"
#include "aotk_reference.h"

/* aotk__check_count_coverage's count for lse (float32, poison 0xffffffff): every row's value written (a
 * NaN counts as not), everything else left alone. */
static aotk_status count_lse_coverage(const aotk__check_shape *s, const float *lse, int64_t *unwritten,
                                      int64_t *clobbered) {
  unsigned char *covered = calloc((size_t)s->lse_elements, 1);
  if (covered == NULL) return aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
  for (int64_t b = 0; b < s->seqs; b++)
    for (int64_t h = 0; h < s->heads_q; h++)
      for (int64_t row = 0; row < s->len_q[b]; row++) {
        int64_t i = aotk__check_lse_index(s, b, h, row);
        covered[i] = 1;
        if (isnan(lse[i])) (*unwritten)++;
      }
  for (int64_t i = 0; i < s->lse_elements; i++) {
    uint32_t word;
    memcpy(&word, &lse[i], sizeof word);
    if (!covered[i] && word != 0xffffffffu) (*clobbered)++;
  }
  free(covered);
  return AOTK_OK;
}

/* --- the forward ------------------------------------------------------------------------------- */

enum { FWD_Q, FWD_K, FWD_V, FWD_OUT, FWD_LSE, FWD_BUFFERS };

aotk_status aotk__check_attn_fwd(const aotk__driver *driver, const aotk__fwd_check_case *c,
                                 aotk__fwd_check_result *r) {
  memset(r, 0, sizeof *r);
  uint64_t state = c->seed;
  const aotk__check_features *f = &c->features;
  aotk__check_shape s;
  aotk_status status = aotk__check_resolve_shape(c->batch, c->seqlen_q, c->seqlen_k, c->heads_q, c->heads_kv,
                                                 c->head_dim, c->layout, f, &s);
  if (status != AOTK_OK) return status;
  const int64_t HQ = s.heads_q, HKV = s.heads_kv, DQK = s.dim_qk, DV = s.dim_v;
  const int64_t placed_batch = s.varlen ? 1 : s.seqs;
  const bool dropout = f->dropout_p > 0.0f;
  aotk__placed_tensor tq = aotk__check_place(c->layout, placed_batch, s.rows_q, HQ, DQK);
  aotk__placed_tensor tk = aotk__check_place(c->layout, placed_batch, s.rows_k, HKV, DQK);
  aotk__placed_tensor tv = aotk__check_place(c->layout, placed_batch, s.rows_k, HKV, DV);
  const aotk__check_layout out_layout = c->out_permuted && !s.varlen ? AOTK__LAYOUT_PERMUTED : c->layout;
  aotk__placed_tensor to = aotk__check_place(out_layout, placed_batch, s.rows_q, HQ, DV);

  float *hq = malloc(sizeof(float) * (size_t)tq.storage_elements);
  float *hk = malloc(sizeof(float) * (size_t)tk.storage_elements);
  float *hv = malloc(sizeof(float) * (size_t)tv.storage_elements);
  int64_t max_bits = tq.storage_elements > tk.storage_elements ? tq.storage_elements : tk.storage_elements;
  if (tv.storage_elements > max_bits) max_bits = tv.storage_elements;
  uint16_t *bits = malloc(sizeof(uint16_t) * (size_t)max_bits);
  uint16_t *out_bits = malloc(sizeof(uint16_t) * (size_t)to.storage_elements);
  float *lse_host = malloc(sizeof(float) * (size_t)s.lse_elements);
  /* The second run's outputs, for dropout's same-state-same-bits check. */
  uint16_t *out_again = dropout ? malloc(sizeof(uint16_t) * (size_t)to.storage_elements) : NULL;
  float *lse_again = dropout ? malloc(sizeof(float) * (size_t)s.lse_elements) : NULL;
  uint8_t *mask_again = dropout ? malloc((size_t)s.mask_elements) : NULL;
  const int64_t rows_per_head = c->rows_per_head < 2 ? 2 : c->rows_per_head;
  int64_t *rows = malloc(sizeof(int64_t) * (size_t)rows_per_head);
  double *ref = malloc(sizeof(double) * (size_t)DV);
  float *lowp = malloc(sizeof(float) * (size_t)DV);
  CUdeviceptr dev[FWD_BUFFERS] = {0};
  aotk__check_feature_buffers fb;
  memset(&fb, 0, sizeof fb);
  if (!hq || !hk || !hv || !bits || !out_bits || !lse_host || !rows || !ref || !lowp ||
      (dropout && (!out_again || !lse_again || !mask_again))) {
    status = aotk__fail(AOTK_ERROR_OUT_OF_MEMORY, "check: host allocation failed");
    goto done;
  }

  aotk__check_fill_random(hq, bits, tq.storage_elements, c->dtype, &state);
  if ((status = aotk__check_upload(driver, &dev[FWD_Q], bits, 2 * (size_t)tq.storage_elements)) != AOTK_OK) goto done;
  aotk__check_fill_random(hk, bits, tk.storage_elements, c->dtype, &state);
  if ((status = aotk__check_upload(driver, &dev[FWD_K], bits, 2 * (size_t)tk.storage_elements)) != AOTK_OK) goto done;
  aotk__check_fill_random(hv, bits, tv.storage_elements, c->dtype, &state);
  if ((status = aotk__check_upload(driver, &dev[FWD_V], bits, 2 * (size_t)tv.storage_elements)) != AOTK_OK) goto done;
  /* Poison: 0xffff is a NaN in both fp16 and bf16, 0xffffffff in fp32. */
  if ((status = aotk__check_alloc_poisoned(driver, &dev[FWD_OUT], 2 * (size_t)to.storage_elements, 0xff)) != AOTK_OK) goto done;
  if (c->with_lse &&
      (status = aotk__check_alloc_poisoned(driver, &dev[FWD_LSE], 4 * (size_t)s.lse_elements, 0xff)) != AOTK_OK) {
    goto done;
  }

  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = aotk__check_as_aotk_tensor(&tq, dev[FWD_Q], c->dtype, 2, s.varlen);
  params.k = aotk__check_as_aotk_tensor(&tk, dev[FWD_K], c->dtype, 2, s.varlen);
  params.v = aotk__check_as_aotk_tensor(&tv, dev[FWD_V], c->dtype, 2, s.varlen);
  params.out = aotk__check_as_aotk_tensor(&to, dev[FWD_OUT], c->dtype, 2, s.varlen);
  if (c->with_lse) params.lse = aotk__check_lse_tensor(&s, dev[FWD_LSE]);
  params.softmax_scale = c->softmax_scale;
  params.causal = c->causal;
  if ((status = aotk__check_setup_features(driver, &s, f, &state, &fb, &params)) != AOTK_OK) goto done;

  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  if ((status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info)) != AOTK_OK) goto done;
  aotk__check_copy_info(&info, r->kernel_name, sizeof r->kernel_name, &r->from_ptx, &r->kernel_head_dim_qk,
                        &r->kernel_head_dim_v, &r->features, &r->launches);
  if ((status = aotk__check_settle(driver)) != AOTK_OK) goto done;
  if ((status = aotk_attn_fwd(&params, c->stream)) != AOTK_OK) goto done;
  if ((status = aotk__check_synchronize(driver, c->stream, "aotk_attn_fwd")) != AOTK_OK) goto done;
  AOTK__CHECK_CU(driver->cuMemcpyDtoH(out_bits, dev[FWD_OUT], 2 * (size_t)to.storage_elements), "cuMemcpyDtoH");
  if (c->with_lse) AOTK__CHECK_CU(driver->cuMemcpyDtoH(lse_host, dev[FWD_LSE], 4 * (size_t)s.lse_elements), "cuMemcpyDtoH");

  if (dropout) {
    AOTK__CHECK_CU(driver->cuMemcpyDtoH(fb.mask, fb.mask_device, (size_t)s.mask_elements), "cuMemcpyDtoH");
    aotk__check_mask_comparison m;
    aotk__check_compare_mask(&s, fb.mask, f->rng_seed, f->rng_offset, f->dropout_p, &m);
    r->mask_elements = m.elements;
    r->mask_kept = m.kept;
    r->mask_mismatches = m.mismatches;
    r->mask_clobbered = m.clobbered;
    /* Bernoulli(keep probability) per element; the probability is the threshold's, exactly. */
    const double keep = 1.0 - aotk__check_dropout_effective_p(f->dropout_p);
    const double n = (double)m.elements;
    r->mask_keep_z = n > 0 ? ((double)m.kept - n * keep) / sqrt(n * keep * (1.0 - keep)) : 0.0;

    /* The same state again, on re-poisoned outputs: the same bits. */
    AOTK__CHECK_CU(driver->cuMemsetD8(dev[FWD_OUT], 0xff, 2 * (size_t)to.storage_elements), "cuMemsetD8");
    if (c->with_lse) AOTK__CHECK_CU(driver->cuMemsetD8(dev[FWD_LSE], 0xff, 4 * (size_t)s.lse_elements), "cuMemsetD8");
    AOTK__CHECK_CU(driver->cuMemsetD8(fb.mask_device, 0xaa, (size_t)s.mask_elements), "cuMemsetD8");
    if ((status = aotk__check_settle(driver)) != AOTK_OK) goto done;
    if ((status = aotk_attn_fwd(&params, c->stream)) != AOTK_OK) goto done;
    if ((status = aotk__check_synchronize(driver, c->stream, "aotk_attn_fwd")) != AOTK_OK) goto done;
    AOTK__CHECK_CU(driver->cuMemcpyDtoH(out_again, dev[FWD_OUT], 2 * (size_t)to.storage_elements), "cuMemcpyDtoH");
    if (c->with_lse) AOTK__CHECK_CU(driver->cuMemcpyDtoH(lse_again, dev[FWD_LSE], 4 * (size_t)s.lse_elements), "cuMemcpyDtoH");
    AOTK__CHECK_CU(driver->cuMemcpyDtoH(mask_again, fb.mask_device, (size_t)s.mask_elements), "cuMemcpyDtoH");
    r->rerun_differs = memcmp(out_again, out_bits, 2 * (size_t)to.storage_elements) != 0 ||
                       (c->with_lse && memcmp(lse_again, lse_host, 4 * (size_t)s.lse_elements) != 0) ||
                       memcmp(mask_again, fb.mask, (size_t)s.mask_elements) != 0;

    /* The next offset: another mask, still the model's. */
    if ((status = aotk__check_set_rng_state(driver, &fb, f->rng_seed, f->rng_offset + 1)) != AOTK_OK) goto done;
    AOTK__CHECK_CU(driver->cuMemsetD8(fb.mask_device, 0xaa, (size_t)s.mask_elements), "cuMemsetD8");
    if ((status = aotk__check_settle(driver)) != AOTK_OK) goto done;
    if ((status = aotk_attn_fwd(&params, c->stream)) != AOTK_OK) goto done;
    if ((status = aotk__check_synchronize(driver, c->stream, "aotk_attn_fwd")) != AOTK_OK) goto done;
    AOTK__CHECK_CU(driver->cuMemcpyDtoH(mask_again, fb.mask_device, (size_t)s.mask_elements), "cuMemcpyDtoH");
    aotk__check_mask_comparison next;
    aotk__check_compare_mask(&s, mask_again, f->rng_seed, f->rng_offset + 1, f->dropout_p, &next);
    r->mask_mismatches += next.mismatches;
    r->mask_clobbered += next.clobbered;
    r->new_offset_same_mask = m.elements >= 256 && memcmp(mask_again, fb.mask, (size_t)s.mask_elements) == 0;
  }

  /* Every output element written; every padding element and unused row left alone. */
  if ((status = aotk__check_count_coverage(&to, &s, true, out_bits, c->dtype, &r->unwritten, &r->clobbered)) !=
      AOTK_OK) {
    goto done;
  }
  if (c->with_lse && (status = count_lse_coverage(&s, lse_host, &r->unwritten, &r->clobbered)) != AOTK_OK) goto done;

  const double scale = aotk__check_resolved_scale(c->softmax_scale, DQK);
  const aotk__check_host_inputs inputs = {hq, hk, hv, NULL, &tq, &tk, &tv, NULL,
                                          fb.alibi, fb.sinks, dropout ? fb.mask : NULL};
  for (int64_t b = 0; b < s.seqs; b++) {
    aotk__attn_reference_problem problem;
    aotk__check_reference_problem(&problem, &s, b, c->causal, scale, f, &inputs);
    for (int64_t h = 0; h < HQ; h++) {
      int64_t count = aotk__check_choose_rows(s.len_q[b], rows_per_head, rows, &state);
      for (int64_t i = 0; i < count; i++) {
        int64_t row = rows[i];
        double ref_lse;
        aotk__attn_reference_row_f64(&problem, 0, h, row, ref, &ref_lse);
        aotk__attn_reference_row_lowp(&problem, c->dtype, 0, h, row, lowp);
        bool empty = isinf(ref_lse) && ref_lse < 0;
        for (int64_t d = 0; d < DV; d++) {
          double got = aotk__dtype_value(out_bits[aotk__check_seq_element(&to, &s, true, b, row, h, d)], c->dtype);
          double error = fabs(got - ref[d]);
          if (!(error <= r->max_error)) r->max_error = isnan(error) ? INFINITY : error;
          double lowp_error = fabs((double)lowp[d] - ref[d]);
          if (lowp_error > r->lowp_max_error) r->lowp_max_error = lowp_error;
          if (empty && got != 0.0) r->bad_empty_rows++;
        }
        if (c->with_lse) {
          double got_lse = lse_host[aotk__check_lse_index(&s, b, h, row)];
          if (empty) {
            if (!(isinf(got_lse) && got_lse < 0)) r->bad_empty_rows++;
          } else {
            double error = fabs(got_lse - ref_lse) / (AOTK__CHECK_LSE_ABS + AOTK__CHECK_LSE_REL * fabs(ref_lse));
            if (!(error <= r->lse_max_error)) r->lse_max_error = isnan(error) ? INFINITY : error;
          }
        }
        r->rows_checked++;
      }
    }
  }
  /* lse_max_error is kept in units of its tolerance. */
  const double bound = 2.0 * r->lowp_max_error + AOTK__CHECK_ERROR_FLOOR;
  bool numbers_ok = r->max_error <= bound;
  bool lse_ok = r->lse_max_error <= 1.0;
  bool dropout_ok = !dropout ||
                    (r->mask_mismatches == 0 && r->mask_clobbered == 0 && !r->rerun_differs &&
                     !r->new_offset_same_mask &&
                     (r->mask_elements < AOTK__CHECK_KEEP_RATE_MIN_ELEMENTS ||
                      fabs(r->mask_keep_z) <= AOTK__CHECK_KEEP_RATE_SIGMAS));
  r->passed = numbers_ok && lse_ok && dropout_ok && r->unwritten == 0 && r->clobbered == 0 && r->bad_empty_rows == 0;
  int used = snprintf(r->detail, sizeof r->detail,
                      "err %.3g (bound %.3g = 2 x same-precision %.3g + %.0e), lse err %.3g of tolerance, rows %lld, "
                      "unwritten %lld, clobbered %lld, bad empty rows %lld",
                      r->max_error, bound, r->lowp_max_error, AOTK__CHECK_ERROR_FLOOR, r->lse_max_error,
                      (long long)r->rows_checked, (long long)r->unwritten, (long long)r->clobbered,
                      (long long)r->bad_empty_rows);
  if (dropout && used > 0 && (size_t)used < sizeof r->detail) {
    snprintf(r->detail + used, sizeof r->detail - (size_t)used,
             "; mask: %lld elements, keep %.5f (z %.2f), mismatches %lld, clobbered %lld%s%s", (long long)r->mask_elements,
             r->mask_elements > 0 ? (double)r->mask_kept / (double)r->mask_elements : 0.0, r->mask_keep_z,
             (long long)r->mask_mismatches, (long long)r->mask_clobbered,
             r->rerun_differs ? ", the same rng_state gave other bits" : "",
             r->new_offset_same_mask ? ", offset + 1 gave the same mask" : "");
  }

done:
  for (int i = 0; i < FWD_BUFFERS; i++) {
    if (dev[i]) driver->cuMemFree(dev[i]);
  }
  aotk__check_free_features(driver, &fb);
  free(hq);
  free(hk);
  free(hv);
  free(bits);
  free(out_bits);
  free(lse_host);
  free(out_again);
  free(lse_again);
  free(mask_again);
  free(rows);
  free(ref);
  free(lowp);
  return status;
}
