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
/* An fp32 vector of one value per query head, [heads_q] or (allow_batch) [batch, heads_q]: ALiBi
 * slopes, sinks. *batch_stride is 0 for [heads_q]. */
aotk_status aotk__check_fp32_vector(const aotk_tensor *t, const char *name, int64_t heads_q, int64_t batch,
                                    int allow_batch, int64_t *batch_stride);
/* An output's strides may not make two elements share memory (stride 0 on a dimension > 1). */
aotk_status aotk__check_output_strides(const aotk_tensor *t, const char *name);
aotk_status aotk__check_cu_seqlens(const aotk_tensor *t, const char *name);
/* The window of attention and decoding: each bound -1 (unbounded) or >= 0, and window_right 0 (or
 * unbounded) under causal = 1, which means window_right = 0. */
aotk_status aotk__check_window(int32_t causal, int32_t window_left, int32_t window_right);
/* Pointer 16-byte aligned and every stride but the last a multiple of 16 elements. */
bool aotk__tensor_aligned16(const aotk_tensor *t);

#endif /* AOTK_TENSOR_VALIDATE_H */
