/* What the dense-attention checkers share (aotk_check_fwd.c, aotk_check_bwd.c; defined in
 * aotk_check_case.c): a case's shape and its tensors placed in memory, the features' inputs, the
 * reference problem of one sequence, and the coverage and dropout-mask comparisons. Internal to
 * src/check/: the checkers' interface is aotk_check.h. */
#ifndef AOTK_CHECK_CASE_H
#define AOTK_CHECK_CASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aotk.h"
#include "aotk_check.h"
#include "aotk_driver.h"
#include "aotk_reference.h"

/* --- tensors placed in memory ----------------------------------------------------------------- */

/* A 4-d tensor [batch, seqlen, heads, dim] placed in host and device storage per the layout. The
 * varlen layout places its packed tensors as one batch entry of `total` rows. */
typedef struct aotk__placed_tensor {
  int64_t shape[4];
  int64_t strides[4];
  int64_t offset;         /* elements from the storage start to element 0 */
  int64_t storage_elements;
} aotk__placed_tensor;

aotk__placed_tensor aotk__check_place(aotk__check_layout layout, int64_t b, int64_t s, int64_t h, int64_t d);
/* The tensor as the API takes it: 4-d, or for the varlen layout 3-d [total, heads, dim]. */
aotk_tensor aotk__check_as_aotk_tensor(const aotk__placed_tensor *t, CUdeviceptr base, aotk_dtype dtype,
                                       int element_bytes, bool varlen);

/* --- a case's sequences ----------------------------------------------------------------------- */

/* The sizes of one case, dense or varlen, in one form: `seqs` batch entries or sequences, each with
 * its own lengths; the dense layout is the varlen one with every length equal and no packing. */
typedef struct aotk__check_shape {
  bool varlen;
  int64_t seqs;
  int64_t len_q[AOTK__CHECK_MAX_SEQS], len_k[AOTK__CHECK_MAX_SEQS];
  int64_t start_q[AOTK__CHECK_MAX_SEQS], start_k[AOTK__CHECK_MAX_SEQS]; /* varlen: packed first row; dense: 0 */
  /* Per-row statistics of a case are kept as one array, sequence after sequence, each [heads_q][len_q]:
   * sequence b's start there, and likewise b's first (kv head, key) item for dk/dv. */
  int64_t stats_offset[AOTK__CHECK_MAX_SEQS + 1];
  int64_t key_offset[AOTK__CHECK_MAX_SEQS + 1];
  int64_t max_q, max_k;   /* dense: seqlen_q, seqlen_k; varlen: max_seqlen_q, max_seqlen_k as passed */
  int64_t rows_q, rows_k; /* the tensors' sequence dimension: dense the lengths, varlen total_q, total_k */
  int64_t heads_q, heads_kv, dim_qk, dim_v;
  int64_t lse_row, lse_elements;     /* lse: rows of lse_row floats (> the row's length when padded) */
  int64_t mask_row, mask_elements;   /* dropout mask [seqs, heads_q, max_q, mask_row] */
  int64_t alibi_row;                 /* 2-d slopes: row stride */
} aotk__check_shape;

/* Fills *s from the case's sizes and features; AOTK_ERROR_INVALID_VALUE for a case it cannot describe. */
aotk_status aotk__check_resolve_shape(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q,
                                      int64_t heads_kv, int64_t head_dim, aotk__check_layout layout,
                                      const aotk__check_features *f, aotk__check_shape *s);
/* Element (sequence b, row, head, d) of a placed tensor; q_side: the tensor has query rows. */
int64_t aotk__check_seq_element(const aotk__placed_tensor *t, const aotk__check_shape *s, bool q_side, int64_t b,
                                int64_t row, int64_t h, int64_t d);
/* Element (sequence b, head h, row) of lse. */
int64_t aotk__check_lse_index(const aotk__check_shape *s, int64_t b, int64_t h, int64_t row);

/* A case's inputs on the host, with their placements, that aotk__check_reference_problem points one
 * sequence's reference problem at (dout NULL for the forward; alibi, sinks and mask NULL when off). */
typedef struct aotk__check_host_inputs {
  const float *q, *k, *v, *dout;
  const aotk__placed_tensor *tq, *tk, *tv, *tdout;
  const float *alibi, *sinks;
  const uint8_t *mask;
} aotk__check_host_inputs;

void aotk__check_reference_problem(aotk__attn_reference_problem *p, const aotk__check_shape *s, int64_t b,
                                   int causal, double softmax_scale, const aotk__check_features *f,
                                   const aotk__check_host_inputs *in);
/* softmax_scale, or 1 / sqrt(head_dim_qk) for 0. */
double aotk__check_resolved_scale(float softmax_scale, int64_t head_dim_qk);
/* N(0, 1) values representable in dtype, as floats and as the dtype's bits. */
void aotk__check_fill_random(float *values, uint16_t *bits, int64_t count, aotk_dtype dtype, uint64_t *state);
/* Waits for the poisoning and uploads (legacy default stream) before a launch on the case's stream. */
aotk_status aotk__check_settle(const aotk__driver *driver);
aotk_status aotk__check_synchronize(const aotk__driver *driver, aotk_stream stream, const char *after);
/* The rows compared of `length`: all, or rows_per_head of them including the first and the last. */
int64_t aotk__check_choose_rows(int64_t length, int64_t rows_per_head, int64_t *rows, uint64_t *state);

/* --- the features' buffers, shared by the forward and the backward ------------------------------ */

typedef struct aotk__check_feature_buffers {
  float *alibi;  /* host copies; NULL when the feature is off */
  float *sinks;
  uint8_t *mask; /* the forward's dropout mask, downloaded */
  CUdeviceptr alibi_device, sinks_device, cu_seqlens_q, cu_seqlens_k, rng_state, mask_device;
} aotk__check_feature_buffers;

void aotk__check_free_features(const aotk__driver *driver, aotk__check_feature_buffers *fb);
aotk_status aotk__check_set_rng_state(const aotk__driver *driver, const aotk__check_feature_buffers *fb, int64_t seed,
                                      int64_t offset);
/* Draws the features' inputs, uploads them and fills their fields of *params. */
aotk_status aotk__check_setup_features(const aotk__driver *driver, const aotk__check_shape *s,
                                       const aotk__check_features *f, uint64_t *state,
                                       aotk__check_feature_buffers *fb, aotk_attn_params *params);

/* --- comparisons ------------------------------------------------------------------------------ */

/* What a downloaded dropout mask says against the host's model under {seed, offset}. */
typedef struct aotk__check_mask_comparison {
  int64_t elements, kept, mismatches, clobbered;
} aotk__check_mask_comparison;

/* The library's dropout threshold: a random byte is kept when >= round(256 p), at most 255. */
uint32_t aotk__check_dropout_threshold(float dropout_p);
/* The probability that threshold drops (t / 256; 0 without dropout), whose 1 / (1 - p) scales kept weights. */
double aotk__check_dropout_effective_p(float dropout_p);
/* A downloaded dropout mask against the host's model; the poison left where it belongs counts. */
void aotk__check_compare_mask(const aotk__check_shape *s, const uint8_t *mask, int64_t seed, int64_t offset,
                              float dropout_p, aotk__check_mask_comparison *m);
/* Elements of a 16-bit output still holding the poison, and elements outside it no longer holding it. */
aotk_status aotk__check_count_coverage(const aotk__placed_tensor *t, const aotk__check_shape *s, bool q_side,
                                       const uint16_t *bits, aotk_dtype dtype, int64_t *unwritten,
                                       int64_t *clobbered);
/* lse's tensor over `data`: [heads_q, total_q] (varlen) or [batch, heads_q, seqlen_q], padded rows. */
aotk_tensor aotk__check_lse_tensor(const aotk__check_shape *s, CUdeviceptr data);
/* What a query reported, into a result's fields. */
void aotk__check_copy_info(const aotk_kernel_info *info, char *kernel_name, size_t name_bytes, int *from_ptx,
                           int32_t *head_dim_qk, int32_t *head_dim_v, uint32_t *features, int32_t *launches);

#endif /* AOTK_CHECK_CASE_H */
