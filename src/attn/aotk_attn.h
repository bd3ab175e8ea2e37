/* Internal interface of the attention entry points, shared with the self-test and the tests. */
#ifndef AOTK_ATTN_H
#define AOTK_ATTN_H

#include <stdbool.h>
#include <stdint.h>

#include "aotk.h"
#include "aotk_driver.h"
#include "aotk_image.h"
#include "aotk_kernel_table.h"

/* A validated attention problem: sizes and resolved scalars. */
typedef struct aotk__attn_problem {
  aotk_dtype dtype;
  int64_t batch;              /* dense: batch; varlen: the number of sequences */
  int64_t seqlen_q, seqlen_k; /* dense: the lengths; varlen: max_seqlen_q, max_seqlen_k */
  int64_t heads_q, heads_kv;
  int64_t head_dim_qk, head_dim_v; /* the caller's (multiples of 8); the kernels run padded sizes */
  float softmax_scale;        /* resolved: never 0 */
  int varlen;
  int causal;
  int top_left;               /* causal_align == AOTK_ALIGN_TOP_LEFT */
  int32_t window_left, window_right; /* resolved: causal makes window_right 0; -1 unbounded */
  float softcap;              /* 0: off */
  int alibi;
  int64_t alibi_batch_stride; /* 0 for slopes [heads_q] */
  int sinks;
  int dsinks;                 /* the backward writes dsinks */
  int deterministic;          /* the backward: params.deterministic */
  float dropout_p;
  int write_dropout_mask;
  int write_lse;
  int extras;                 /* softcap, ALiBi, sinks or dropout: the EXTRAS kernels */
  int aligned; /* q, k, v and out pointers 16-byte aligned and their strides multiples of 16 elements */
  /* Each tensor as the kernels see it, 4-d [batch, seqlen, heads, head_dim] (varlen: batch stride 0
   * and seqlen the max_seqlen), and lse as [batch, heads_q, seqlen_q]. */
  aotk_tensor q, k, v, out, lse, dout, dq, dk, dv;
} aotk__attn_problem;

/* Validates the caller's params (copying them into *params, zero-extended to the current struct) and
 * fills *problem. Touches no driver. */
aotk_status aotk__attn_validate(const aotk_attn_params *caller_params, aotk_attn_params *params,
                                aotk__attn_problem *problem);

/* The backward's validation: the forward's, plus dout, dq, dk, dv, a required lse and the flag. */
aotk_status aotk__attn_bwd_validate(const aotk_attn_params *caller_params, aotk_attn_params *params,
                                    aotk__attn_problem *problem);

/* What a kernel is chosen on beside its family and target: the table's variant axes. A family without
 * an axis leaves it 0 (its rows say 0). */
typedef struct aotk__variant_key {
  aotk_dtype dtype;
  int64_t head_dim_qk, head_dim_v; /* the problem's; a row is chosen whose compiled dims hold them */
  int aligned;                     /* the tensors meet aotk__tensor_aligned16 */
  int extras;                      /* softcap, ALiBi or dropout: the EXTRAS rows */
} aotk__variant_key;

/* The table row and image kind that kernel `family` runs for `key` on `device`; `size_key` is the
 * length the family's tuning is keyed on (seqlen_k for the dK/dV pass, seqlen_q otherwise). */
aotk_status aotk__choose_kernel(int family, const aotk__variant_key *key, int64_t size_key,
                                const aotk__device_info *device, int *row, aotk__image_kind *kind);

/* Pieces the selection-attention entry points (src/sel/aotk_sel.c) share with these. */
const char *aotk__dtype_name(aotk_dtype dtype);
/* A tensor on its own: data, rank, positive sizes, contiguous last dimension, non-negative strides,
 * element alignment, a byte span that fits in int64. `layout` names the dimensions in messages. */
aotk_status aotk__check_tensor(const aotk_tensor *t, const char *name, int rank, const char *layout);
/* An fp32 vector of one value per query head, [heads_q] or (allow_batch) [batch, heads_q]: ALiBi
 * slopes, sinks. *batch_stride is 0 for [heads_q]. */
aotk_status aotk__check_fp32_vector(const aotk_tensor *t, const char *name, int64_t heads_q, int64_t batch,
                                    int allow_batch, int64_t *batch_stride);
/* An output's strides may not make two elements share memory (stride 0 on a dimension > 1). */
aotk_status aotk__check_output_strides(const aotk_tensor *t, const char *name);
aotk_status aotk__check_cu_seqlens(const aotk_tensor *t, const char *name);
/* Pointer 16-byte aligned and every stride but the last a multiple of 16 elements. */
bool aotk__tensor_aligned16(const aotk_tensor *t);
/* The image target the current device runs (arch 80 or 90, cubin or PTX). */
aotk_status aotk__choose_target(const aotk__device_info *device, int *arch, aotk__image_kind *kind);
/* Whether table row `row` can run here: its image of `kind` is embedded and the device has the shared
 * memory it needs (AOTK_ERROR_KERNEL_NOT_BUILT, AOTK_ERROR_UNSUPPORTED_ARCH otherwise). */
aotk_status aotk__check_row_runs(int row, aotk__image_kind kind, const aotk__device_info *device);
/* Loads the kernels of `rows` after checking each row's parameter kinds against the launcher's. */
aotk_status aotk__load_rows(const aotk__driver *driver, const int *rows, const char *const *param_kinds, int count,
                            aotk__image_kind kind, CUdevice device, CUkernel *kernels);
/* Launches row `row`'s kernel on a 1-d grid of `grid` programs with `args` (one per parameter). */
aotk_status aotk__launch_row(const aotk__driver *driver, int row, CUkernel kernel, size_t count, void **args,
                             int64_t grid, aotk_stream stream);
/* Fills *info (as much of it as info->struct_size holds) for table row e. */
void aotk__fill_info(const aotk__kernel_entry *e, aotk__image_kind kind, int64_t grid, size_t workspace_bytes,
                     int32_t launches, uint32_t features, aotk_kernel_info *info);

#endif /* AOTK_ATTN_H */
