/* The checks of tensor arguments that every operation family (src/attn/, src/sel/, src/decode/)
 * makes. Each returns AOTK_OK, or a status with the message naming the tensor by `name`. */
#ifndef AOTK_TENSOR_VALIDATE_H
#define AOTK_TENSOR_VALIDATE_H

#include <stdbool.h>
#include <stdint.h>

#include "aotk.h"

/* Kernel offsets inside one batch entry are 32-bit (cheap address arithmetic in the inner loop). */
#define AOTK__INT32_SPAN_LIMIT ((int64_t)INT32_MAX)

/* An element's bytes (0: not an aotk_dtype), and the dtype's name for messages. */
int aotk__dtype_bytes(aotk_dtype dtype);
const char *aotk__dtype_name(aotk_dtype dtype);
/* A tensor on its own: data, rank, positive sizes, contiguous last dimension, non-negative strides,
 * element alignment, a byte span that fits in int64. `layout` names the dimensions in messages. */
aotk_status aotk__check_tensor(const aotk_tensor *t, const char *name, int rank, const char *layout);
/* One dimension against the size the problem gives it: t->shape[dim] must be `expected`, which the
 * caller's `source` gave ("q.shape[2]", "batch"); otherwise `status` and "<name>.shape[<dim>] = <got>
 * but <source> = <expected>", followed by " (<note>)" when `note` is not NULL. Every family's shape
 * rules end in this one message. */
aotk_status aotk__check_dim(const aotk_tensor *t, const char *name, int dim, int64_t expected, const char *source,
                            const char *note, aotk_status status);
/* t's dtype must be `dtype`, the one of the tensor named `source`: otherwise AOTK_ERROR_DTYPE_MISMATCH,
 * "<name>.dtype = <got> but <source>.dtype = <dtype>". */
aotk_status aotk__check_same_dtype(const aotk_tensor *t, const char *name, aotk_dtype dtype, const char *source);
/* t's dtype must be `dtype`, fixed by the API: otherwise AOTK_ERROR_UNSUPPORTED_DTYPE, "<name>.dtype =
 * <got>; <why>" (why: "it is int32"). */
aotk_status aotk__check_dtype_is(const aotk_tensor *t, const char *name, aotk_dtype dtype, const char *why);
/* An fp32 vector of one value per query head, [heads_q] or (allow_batch) [batch, heads_q]: ALiBi
 * slopes, sinks. *batch_stride is 0 for [heads_q]. */
aotk_status aotk__check_fp32_vector(const aotk_tensor *t, const char *name, int64_t heads_q, int64_t batch,
                                    int allow_batch, int64_t *batch_stride);
/* An output's strides may not make two elements share memory (stride 0 on a dimension > 1). */
aotk_status aotk__check_output_strides(const aotk_tensor *t, const char *name);
aotk_status aotk__check_cu_seqlens(const aotk_tensor *t, const char *name);
/* cu_seqlens_q and cu_seqlens_k of the varlen layout: each as above, and the same number of sequences. */
aotk_status aotk__check_cu_seqlens_pair(const aotk_tensor *cu_seqlens_q, const aotk_tensor *cu_seqlens_k);
/* The window of attention and decoding: each bound -1 (unbounded) or >= 0, and window_right 0 (or
 * unbounded) under causal = 1, which means window_right = 0. */
aotk_status aotk__check_window(int32_t causal, int32_t window_left, int32_t window_right);
/* Pointer 16-byte aligned and every stride but the last a multiple of 16 elements. */
bool aotk__tensor_aligned16(const aotk_tensor *t);

#endif /* AOTK_TENSOR_VALIDATE_H */
