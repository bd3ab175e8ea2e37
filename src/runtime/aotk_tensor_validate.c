/* The checks every operation family makes of its tensor arguments: a tensor on its own (data, rank,
 * sizes, strides, alignment, byte span), an fp32 per-head vector, cu_seqlens, output strides. */
#include <stdbool.h>
#include <stdint.h>

#include "aotk_error.h"
#include "aotk_tensor_validate.h"

int aotk__dtype_bytes(aotk_dtype dtype) {
  switch (dtype) {
    case AOTK_DTYPE_FLOAT16:
    case AOTK_DTYPE_BFLOAT16:
      return 2;
    case AOTK_DTYPE_FLOAT32:
    case AOTK_DTYPE_INT32:
      return 4;
    case AOTK_DTYPE_INT64:
      return 8;
    case AOTK_DTYPE_UINT8:
      return 1;
  }
  return 0;
}

const char *aotk__dtype_name(aotk_dtype dtype) {
  switch (dtype) {
    case AOTK_DTYPE_FLOAT16:
      return "float16";
    case AOTK_DTYPE_BFLOAT16:
      return "bfloat16";
    case AOTK_DTYPE_FLOAT32:
      return "float32";
    case AOTK_DTYPE_INT32:
      return "int32";
    case AOTK_DTYPE_INT64:
      return "int64";
    case AOTK_DTYPE_UINT8:
      return "uint8";
  }
  return "unknown";
}

/* Checks what a tensor must satisfy on its own: data, rank, positive sizes, a contiguous last
 * dimension, non-negative strides, element alignment, and a byte span that fits in int64 and in the
 * address space after data, its one-past-the-end address included (fuzz_api found a uint8 mask at
 * 0xffffffffffffffff accepted, then, once spans past the end were refused, the same mask with one
 * byte: its end wraps to 0, which no caller's allocation can have). */
aotk_status aotk__check_tensor(const aotk_tensor *t, const char *name, int rank, const char *layout) {
  if (t->data == NULL) return aotk__fail(AOTK_ERROR_NULL_POINTER, "%s.data is NULL", name);
  int element_bytes = aotk__dtype_bytes(t->dtype);
  if (element_bytes == 0) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_DTYPE, "%s.dtype = %d is not an aotk_dtype", name, (int)t->dtype);
  }
  if (t->rank != rank) {
    return aotk__fail(AOTK_ERROR_RANK, "%s.rank = %d, expected %d (%s)", name, (int)t->rank, rank, layout);
  }
  for (int i = 0; i < rank; i++) {
    if (t->shape[i] <= 0) {
      return aotk__fail(AOTK_ERROR_NONPOSITIVE_SIZE, "%s.shape[%d] = %lld (%s): sizes must be >= 1", name, i,
                        (long long)t->shape[i], layout);
    }
  }
  if (t->strides[rank - 1] != 1) {
    return aotk__fail(AOTK_ERROR_NONCONTIGUOUS_LAST_DIM, "%s.strides[%d] = %lld: the last dimension must be contiguous",
                      name, rank - 1, (long long)t->strides[rank - 1]);
  }
  int64_t last_offset = 0;
  for (int i = 0; i < rank; i++) {
    if (t->strides[i] < 0) {
      return aotk__fail(AOTK_ERROR_NEGATIVE_STRIDE, "%s.strides[%d] = %lld is negative", name, i,
                        (long long)t->strides[i]);
    }
    int64_t term;
    if (__builtin_mul_overflow(t->shape[i] - 1, t->strides[i], &term) ||
        __builtin_add_overflow(last_offset, term, &last_offset)) {
      return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "%s: the offset of its last element overflows int64", name);
    }
  }
  int64_t span_bytes;
  if (__builtin_add_overflow(last_offset, 1, &span_bytes) ||
      __builtin_mul_overflow(span_bytes, (int64_t)element_bytes, &span_bytes)) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "%s: its byte span overflows int64", name);
  }
  if ((uint64_t)span_bytes > (uint64_t)(UINTPTR_MAX - (uintptr_t)t->data)) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "%s.data = %p: its %lld bytes run past the end of the address space",
                      name, t->data, (long long)span_bytes);
  }
  if ((uintptr_t)t->data % (uintptr_t)element_bytes != 0) {
    return aotk__fail(AOTK_ERROR_MISALIGNED_POINTER, "%s.data = %p is not aligned to its %d-byte elements", name,
                      t->data, element_bytes);
  }
  return AOTK_OK;
}

aotk_status aotk__check_output_strides(const aotk_tensor *t, const char *name) {
  for (int i = 0; i < t->rank; i++) {
    if (t->shape[i] > 1 && t->strides[i] == 0) {
      return aotk__fail(AOTK_ERROR_INVALID_VALUE,
                        "%s.strides[%d] = 0 with shape[%d] = %lld: output elements would overwrite each other", name,
                        i, i, (long long)t->shape[i]);
    }
  }
  return AOTK_OK;
}

aotk_status aotk__check_dim(const aotk_tensor *t, const char *name, int dim, int64_t expected, const char *source,
                            const char *note, aotk_status status) {
  if (t->shape[dim] == expected) return AOTK_OK;
  return aotk__fail(status, "%s.shape[%d] = %lld but %s = %lld%s%s%s", name, dim, (long long)t->shape[dim], source,
                    (long long)expected, note != NULL ? " (" : "", note != NULL ? note : "", note != NULL ? ")" : "");
}

aotk_status aotk__check_same_dtype(const aotk_tensor *t, const char *name, aotk_dtype dtype, const char *source) {
  if (t->dtype == dtype) return AOTK_OK;
  return aotk__fail(AOTK_ERROR_DTYPE_MISMATCH, "%s.dtype = %s but %s.dtype = %s", name, aotk__dtype_name(t->dtype),
                    source, aotk__dtype_name(dtype));
}

aotk_status aotk__check_dtype_is(const aotk_tensor *t, const char *name, aotk_dtype dtype, const char *why) {
  if (t->dtype == dtype) return AOTK_OK;
  return aotk__fail(AOTK_ERROR_UNSUPPORTED_DTYPE, "%s.dtype = %s; %s", name, aotk__dtype_name(t->dtype), why);
}

bool aotk__tensor_aligned16(const aotk_tensor *t) {
  if ((uintptr_t)t->data % 16 != 0) return false;
  for (int i = 0; i < t->rank - 1; i++) {
    if (t->strides[i] % 16 != 0) return false;
  }
  return true;
}

aotk_status aotk__check_fp32_vector(const aotk_tensor *t, const char *name, int64_t heads_q, int64_t batch,
                                     int allow_batch, int64_t *batch_stride) {
  aotk_status status;
  if (allow_batch && t->rank == 2) {
    if ((status = aotk__check_tensor(t, name, 2, "[batch, heads_q]")) != AOTK_OK) return status;
    if ((status = aotk__check_dim(t, name, 0, batch, "batch", NULL, AOTK_ERROR_SHAPE_MISMATCH)) != AOTK_OK) {
      return status;
    }
    *batch_stride = t->strides[0];
  } else {
    if ((status = aotk__check_tensor(t, name, 1, allow_batch ? "[heads_q] or [batch, heads_q]" : "[heads_q]")) != AOTK_OK) {
      return status;
    }
    *batch_stride = 0;
  }
  if ((status = aotk__check_dtype_is(t, name, AOTK_DTYPE_FLOAT32, "it is float32")) != AOTK_OK) return status;
  const int last = t->rank - 1;
  if ((status = aotk__check_dim(t, name, last, heads_q, "heads_q", NULL, AOTK_ERROR_SHAPE_MISMATCH)) != AOTK_OK) {
    return status;
  }
  if ((*batch_stride > 0 ? (batch - 1) * *batch_stride : 0) + heads_q > AOTK__INT32_SPAN_LIMIT) {
    return aotk__fail(AOTK_ERROR_SIZE_OVERFLOW, "%s spans more than 2^31 elements", name);
  }
  return AOTK_OK;
}

aotk_status aotk__check_cu_seqlens(const aotk_tensor *t, const char *name) {
  aotk_status status = aotk__check_tensor(t, name, 1, "[num_seqs + 1]");
  if (status != AOTK_OK) return status;
  if ((status = aotk__check_dtype_is(t, name, AOTK_DTYPE_INT32, "cu_seqlens are int32")) != AOTK_OK) return status;
  if (t->shape[0] < 2) {
    return aotk__fail(AOTK_ERROR_NONPOSITIVE_SIZE, "%s.shape[0] = %lld: it holds num_seqs + 1 >= 2 offsets", name,
                      (long long)t->shape[0]);
  }
  return AOTK_OK;
}

aotk_status aotk__check_cu_seqlens_pair(const aotk_tensor *cu_seqlens_q, const aotk_tensor *cu_seqlens_k) {
  aotk_status status;
  if ((status = aotk__check_cu_seqlens(cu_seqlens_q, "cu_seqlens_q")) != AOTK_OK) return status;
  if ((status = aotk__check_cu_seqlens(cu_seqlens_k, "cu_seqlens_k")) != AOTK_OK) return status;
  return aotk__check_dim(cu_seqlens_k, "cu_seqlens_k", 0, cu_seqlens_q->shape[0], "cu_seqlens_q.shape[0]", NULL,
                         AOTK_ERROR_SHAPE_MISMATCH);
}

aotk_status aotk__check_window(int32_t causal, int32_t window_left, int32_t window_right) {
  if (window_left < -1 || window_right < -1) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "window_left = %d, window_right = %d; each is -1 (unbounded) or >= 0",
                      (int)window_left, (int)window_right);
  }
  if (causal && window_right > 0) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "window_right = %d with causal = 1; causal means window_right = 0",
                      (int)window_right);
  }
  return AOTK_OK;
}
