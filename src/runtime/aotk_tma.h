/* Host-side TMA descriptors for the sm_90 kernels (src/attn/ and src/decode/ launch them): which tensors
 * TMA can read, and the descriptor a kernel takes, encoded from the box and swizzle the compiler recorded
 * in the kernel's table row. */
#ifndef AOTK_TMA_H
#define AOTK_TMA_H

#include <stdbool.h>
#include <stdint.h>

#include "aotk.h"
#include "aotk_cuda_abi.h"
#include "aotk_driver.h"
#include "aotk_kernel_table.h"

/* Whether a tensor [batch, seqlen, heads, head_dim] can be read as the 3-d view
 * [batch, seqlen, heads * head_dim]: each token's heads contiguous, the token and batch strides
 * multiples of 16 bytes below 2^40 bytes (TMA's rules), and no rows overlapping. (A paged cache
 * [num_pages, page_size, heads, head_dim] is such a tensor, its pages the batch.) */
bool aotk__tma_view_ok(const aotk_tensor *t);

/* A host-side TMA descriptor as the kernel takes it: the map, then the view's shape (i32) and strides
 * (i64, in elements), outermost first, as Triton passes them. */
typedef struct aotk__packed_descriptor {
  CUtensorMap map;
  int32_t shape[3];
  int64_t strides[3];
} aotk__packed_descriptor;

#define AOTK__DESCRIPTOR_ARGS(d) &(d).map, &(d).shape[0], &(d).shape[1], &(d).shape[2], &(d).strides[0], \
                                 &(d).strides[1], &(d).strides[2]

/* Row e's descriptors, one per tensor (each checked by aotk__tma_view_ok), in the kernel's parameter
 * order: the count must be the row's (its compiled kernel takes exactly that many). Host-side calls of
 * the driver: no device work, no allocation, safe inside stream capture. Stops at the first failure,
 * naming its tensor. */
aotk_status aotk__encode_descriptors(const aotk__driver *driver, const aotk__kernel_entry *e,
                                     const aotk_tensor *const *tensors, const char *const *names, int count,
                                     aotk__packed_descriptor *out);

#endif /* AOTK_TMA_H */
