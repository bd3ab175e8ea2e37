/* Host-side TMA descriptors (aotk_tma.h). */
#include <stdio.h>
#include <string.h>

#include "aotk_error.h"
#include "aotk_tensor_validate.h"
#include "aotk_tma.h"

bool aotk__tma_view_ok(const aotk_tensor *t) {
  const int64_t heads = t->shape[2], head_dim = t->shape[3], limit = (int64_t)1 << 39; /* elements: 2^40 bytes */
  if (t->strides[2] != head_dim || t->strides[1] < heads * head_dim || t->strides[1] % 8 != 0 ||
      t->strides[1] >= limit) {
    return false;
  }
  if (t->shape[0] == 1) return true; /* the batch stride is not used */
  return t->strides[0] % 8 == 0 && t->strides[0] >= t->shape[1] * t->strides[1] && t->strides[0] < limit;
}

/* Encodes t ([batch, seqlen, heads, head_dim], checked by aotk__tma_view_ok) as the 3-d view
 * [batch, seqlen, heads * head_dim] with the box and swizzle the compiler chose. A host-side call of
 * the driver: no device work, no allocation, safe inside stream capture. */
static aotk_status encode_descriptor(const aotk__driver *driver, const aotk_tensor *t, const aotk__tma_layout *layout,
                                     const char *name, aotk__packed_descriptor *d) {
  memset(d, 0, sizeof *d);
  const int64_t element_bytes = aotk__dtype_bytes(t->dtype);
  const int64_t row_elements = t->shape[2] * t->shape[3];
  /* A batch of one (a varlen or packed view, a cache of one page) never steps its stride, but the driver
   * checks it all the same: the span of the rows, kept under TMA's 2^40 bytes (the row stride itself is,
   * aotk__tma_view_ok) and a multiple of 16 bytes. */
  const int64_t stride_limit = (((int64_t)1 << 40) - 16) / element_bytes;
  int64_t batch_stride = t->strides[0];
  if (t->shape[0] == 1) {
    batch_stride = t->strides[1] > 0 && t->shape[1] <= stride_limit / t->strides[1] ? t->shape[1] * t->strides[1]
                                                                                   : stride_limit;
  }
  d->shape[0] = (int32_t)t->shape[0], d->shape[1] = (int32_t)t->shape[1], d->shape[2] = (int32_t)row_elements;
  d->strides[0] = batch_stride, d->strides[1] = t->strides[1], d->strides[2] = 1;
  /* cuTensorMapEncodeTiled takes the innermost dimension first, and strides in bytes for all but it. */
  const uint64_t dims[3] = {(uint64_t)row_elements, (uint64_t)t->shape[1], (uint64_t)t->shape[0]};
  const uint64_t strides_bytes[2] = {(uint64_t)(t->strides[1] * element_bytes), (uint64_t)(batch_stride * element_bytes)};
  const unsigned box[3] = {(unsigned)layout->box[2], (unsigned)layout->box[1], (unsigned)layout->box[0]};
  const unsigned element_strides[3] = {1, 1, 1};
  const int data_type = t->dtype == AOTK_DTYPE_BFLOAT16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                        : t->dtype == AOTK_DTYPE_FLOAT32  ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                                          : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  char what[64];
  snprintf(what, sizeof what, "cuTensorMapEncodeTiled(%s)", name);
  AOTK__CU_TRY(driver,
               driver->cuTensorMapEncodeTiled(&d->map, data_type, 3, t->data, dims, strides_bytes, box, element_strides,
                                              CU_TENSOR_MAP_INTERLEAVE_NONE, layout->swizzle,
                                              CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
               what);
  return AOTK_OK;
}

aotk_status aotk__encode_descriptors(const aotk__driver *driver, const aotk__kernel_entry *e,
                                     const aotk_tensor *const *tensors, const char *const *names, int count,
                                     aotk__packed_descriptor *out) {
  if (e->descriptor_count != count) {
    return aotk__fail(AOTK_ERROR_INTERNAL, "%s records %d TMA descriptors; the launcher packs %d", e->name,
                      (int)e->descriptor_count, count);
  }
  for (int i = 0; i < count; i++) {
    aotk_status status = encode_descriptor(driver, tensors[i], &e->descriptors[i], names[i], &out[i]);
    if (status != AOTK_OK) return status;
  }
  return AOTK_OK;
}

