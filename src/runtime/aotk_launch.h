/* Choosing, loading and launching rows of the kernel table: what every operation family (src/attn/,
 * src/sel/, src/decode/) launches through. The families validate and pack; this picks the image target
 * and the row, loads it once and launches it. */
#ifndef AOTK_LAUNCH_H
#define AOTK_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aotk.h"
#include "aotk_driver.h"
#include "aotk_image.h"
#include "aotk_kernel_table.h"

/* What a kernel is chosen on beside its family and target: the table's variant axes. A family without
 * an axis leaves it 0 (its rows say 0). */
typedef struct aotk__variant_key {
  aotk_dtype dtype;
  int64_t head_dim_qk, head_dim_v; /* the problem's; a row is chosen whose compiled dims hold them */
  int aligned;                     /* the tensors meet aotk__tensor_aligned16 */
  int extras;                      /* softcap, ALiBi or dropout: the EXTRAS rows */
} aotk__variant_key;

/* The image target the current device runs (arch 80 or 90, cubin or PTX). */
aotk_status aotk__choose_target(const aotk__device_info *device, int *arch, aotk__image_kind *kind);
/* Whether table row e is a variant of `family` for `key` on `arch`, ignoring its tile config and head
 * dims. */
bool aotk__variant_matches(const aotk__kernel_entry *e, int family, int arch, const aotk__variant_key *key);
/* The table row and image kind that kernel `family` runs for `key` on `device`; `size_key` is the
 * length the family's tuning is keyed on (seqlen_k for the dK/dV pass, seqlen_q otherwise). */
aotk_status aotk__choose_kernel(int family, const aotk__variant_key *key, int64_t size_key,
                                const aotk__device_info *device, int *row, aotk__image_kind *kind);
/* Whether table row `row` can run here: its image of `kind` is embedded and the device has the shared
 * memory it needs (AOTK_ERROR_KERNEL_NOT_BUILT, AOTK_ERROR_UNSUPPORTED_ARCH otherwise). */
aotk_status aotk__check_row_runs(int row, aotk__image_kind kind, const aotk__device_info *device);
/* Loads the kernels of `rows` after checking each row's parameter kinds against the launcher's. */
aotk_status aotk__load_rows(const aotk__driver *driver, const int *rows, const char *const *param_kinds, int count,
                            aotk__image_kind kind, CUdevice device, CUkernel *kernels);
/* Launches row `row`'s kernel on a 1-d grid of `grid` programs with `args` (one per parameter). */
aotk_status aotk__launch_row(const aotk__driver *driver, int row, CUkernel kernel, size_t count, void **args,
                             int64_t grid, aotk_stream stream);
/* The catalog's name of a family ("attn_fwd"; "unknown" for an id it does not have), for messages. */
const char *aotk__family_name(int family);
/* A query's info argument: not NULL, and a struct_size that holds at least its first field. */
aotk_status aotk__check_query_info(const aotk_kernel_info *info);
/* AOTK_OK if `query` (a query function's name, e.g. "aotk_sel_query") answers op; else
 * AOTK_ERROR_INVALID_VALUE with a message naming the ops it answers and, for another family's op, the
 * query that answers it. */
aotk_status aotk__check_query_op(aotk_op op, const char *query);
/* A caller's workspace for `needed` bytes: at least that many (NULL only when none is needed) and
 * 16-byte aligned. The refusal reads "workspace_bytes = N[ (workspace NULL)] but this problem needs
 * <at_least>M (<hint>)", the hint naming the query that reports the size. */
aotk_status aotk__check_workspace(const void *workspace, size_t workspace_bytes, size_t needed, const char *at_least,
                                  const char *hint);
/* Fills *info (as much of it as info->struct_size holds) for table row e. */
void aotk__fill_info(const aotk__kernel_entry *e, aotk__image_kind kind, int64_t grid, size_t workspace_bytes,
                     int32_t launches, uint32_t features, aotk_kernel_info *info);

#endif /* AOTK_LAUNCH_H */
