/* What every operation family launches through: the image target a device runs, the choice of a
 * kernel table row (variant, head dims, tuning rule), loading rows and launching one, and the
 * aotk_kernel_info that a query reports; with the library-wide calls over the whole table
 * (aotk_set_image_policy, aotk_preload, aotk_get_build_info). */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "aotk_driver.h"
#include "aotk_error.h"
#include "aotk_image.h"
#include "aotk_kernel_table.h"
#include "aotk_launch.h"
#include "aotk_tensor_validate.h"

static _Atomic int image_policy = AOTK_IMAGE_POLICY_AUTO;

aotk_status aotk_set_image_policy(aotk_image_policy policy) {
  aotk__clear_error();
  if (policy != AOTK_IMAGE_POLICY_AUTO && policy != AOTK_IMAGE_POLICY_SM80_PTX) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "policy = %d is not an aotk_image_policy", (int)policy);
  }
  atomic_store(&image_policy, (int)policy);
  return AOTK_OK;
}

/* Which image a device runs: the sm_90a cubins only on sm_90 itself (arch-specific code), the sm_80
 * cubins on sm_8x, and the sm_80 PTX, JIT-compiled by the driver, on anything newer. */
aotk_status aotk__choose_target(const aotk__device_info *device, int *arch, aotk__image_kind *kind) {
  int cc = device->compute_capability;
  *arch = 0;
  *kind = AOTK__IMAGE_CUBIN;
  if (cc < 80) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_ARCH, "the GPU is sm_%d; aotk's kernels need sm_80 or newer", cc);
  }
  if (atomic_load(&image_policy) == AOTK_IMAGE_POLICY_SM80_PTX) {
    *arch = 80;
    *kind = AOTK__IMAGE_PTX;
  } else if (cc == 90) {
    *arch = 90;
    *kind = AOTK__IMAGE_CUBIN;
  } else if (cc < 90) {
    *arch = 80;
    *kind = AOTK__IMAGE_CUBIN;
  } else {
    *arch = 80;
    *kind = AOTK__IMAGE_PTX;
  }
  return AOTK_OK;
}

const char *aotk__family_name(int family) {
  return family > 0 && family < AOTK__FAMILY_COUNT ? aotk__family_names[family] : aotk__family_names[0];
}

/* Whether table row e is a variant of `family` for this problem, ignoring its tile config and head
 * dims. The helper families have no dtype, head dim, alignment or EXTRAS axis. */
bool aotk__variant_matches(const aotk__kernel_entry *e, int family, int arch, const aotk__variant_key *key) {
  if (e->family != family || e->arch != arch) return false;
  if (family == AOTK__FAMILY_ATTN_DROPOUT_MASK || family == AOTK__FAMILY_ATTN_BWD_SINK_REDUCE) return true;
  if (e->dtype != (int)key->dtype || e->aligned != key->aligned) return false;
  /* The pre-pass and the fused backward's dQ cast see no scores: one variant serves every feature. */
  if (family == AOTK__FAMILY_ATTN_BWD_PREPROCESS || family == AOTK__FAMILY_ATTN_BWD_DQ_CONVERT) return true;
  return e->extras == key->extras;
}

/* Whether e's compiled head dims hold the problem's (0: the family has no such axis). */
static bool dims_hold(const aotk__kernel_entry *e, const aotk__variant_key *key) {
  return (e->head_dim_qk == 0 || e->head_dim_qk >= key->head_dim_qk) &&
         (e->head_dim_v == 0 || e->head_dim_v >= key->head_dim_v);
}

aotk_status aotk__check_row_runs(int row, aotk__image_kind kind, const aotk__device_info *device) {
  const aotk__kernel_entry *e = &aotk__kernel_table[row];
  if ((kind == AOTK__IMAGE_PTX ? e->ptx.raw_bytes : e->cubin.raw_bytes) == 0) {
    return aotk__fail(AOTK_ERROR_KERNEL_NOT_BUILT, "sm_%d %s has no %s image in this build", e->arch, e->name,
                      kind == AOTK__IMAGE_PTX ? "PTX" : "cubin");
  }
  if (e->shared_bytes > device->max_shared_bytes) {
    return aotk__fail(AOTK_ERROR_UNSUPPORTED_ARCH, "%s needs %d bytes of shared memory; the GPU (sm_%d) allows %d",
                      e->name, e->shared_bytes, device->compute_capability, device->max_shared_bytes);
  }
  return AOTK_OK;
}

aotk_status aotk__choose_kernel(int family, const aotk__variant_key *key, int64_t size_key,
                                const aotk__device_info *device, int *row, aotk__image_kind *kind) {
  int arch;
  aotk_status status = aotk__choose_target(device, &arch, kind);
  if (status != AOTK_OK) return status;
  /* First the smallest compiled head-dim pair that holds the problem's; then, among that pair's
   * configs, the tuning rule: the one with the largest min_seqlen that the size key reaches. */
  int dims = -1;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (!aotk__variant_matches(e, family, arch, key) || !dims_hold(e, key)) continue;
    const aotk__kernel_entry *d = dims < 0 ? NULL : &aotk__kernel_table[dims];
    if (d == NULL || e->head_dim_qk + e->head_dim_v < d->head_dim_qk + d->head_dim_v) dims = i;
  }
  int best = -1;
  for (int i = 0; dims >= 0 && i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (!aotk__variant_matches(e, family, arch, key) || e->head_dim_qk != aotk__kernel_table[dims].head_dim_qk ||
        e->head_dim_v != aotk__kernel_table[dims].head_dim_v || e->min_seqlen > size_key) {
      continue;
    }
    if (best < 0 || e->min_seqlen > aotk__kernel_table[best].min_seqlen) best = i;
  }
  if (best < 0) {
    return aotk__fail(AOTK_ERROR_KERNEL_NOT_BUILT,
                      "no sm_%d %s kernel for %s, head dims %lld/%lld, %s inputs%s in this build%s%s%s", arch,
                      aotk__family_name(family), aotk__dtype_name(key->dtype), (long long)key->head_dim_qk,
                      (long long)key->head_dim_v, key->aligned ? "16-byte-aligned" : "unaligned",
                      key->extras ? " with softcap/ALiBi/dropout" : "",
                      aotk__kernel_filter[0] ? " (built with the filter " : "", aotk__kernel_filter,
                      aotk__kernel_filter[0] ? ")" : "");
  }
  if ((status = aotk__check_row_runs(best, *kind, device)) != AOTK_OK) return status;
  *row = best;
  return AOTK_OK;
}

aotk_status aotk__check_query_info(const aotk_kernel_info *info) {
  if (info == NULL) return aotk__fail(AOTK_ERROR_NULL_POINTER, "info is NULL");
  if (info->struct_size < sizeof(size_t)) {
    return aotk__fail(AOTK_ERROR_STRUCT_SIZE, "info->struct_size = %zu (use AOTK_KERNEL_INFO_INIT)", info->struct_size);
  }
  return AOTK_OK;
}

/* The public ops (include/aotk.h's aotk_op) and the query that answers each: a family's ops are listed
 * here, and each query refuses the others by naming theirs, so no family names another's ops. */
static const struct {
  aotk_op op;
  const char *name, *query;
} op_queries[] = {
    {AOTK_OP_ATTN_FWD, "AOTK_OP_ATTN_FWD", "aotk_query"},    {AOTK_OP_ATTN_BWD, "AOTK_OP_ATTN_BWD", "aotk_query"},
    {AOTK_OP_SEL_FWD, "AOTK_OP_SEL_FWD", "aotk_sel_query"},  {AOTK_OP_SEL_BWD, "AOTK_OP_SEL_BWD", "aotk_sel_query"},
    {AOTK_OP_DECODE, "AOTK_OP_DECODE", "aotk_decode_query"}, {AOTK_OP_MERGE, "AOTK_OP_MERGE", "aotk_merge_query"},
};

aotk_status aotk__check_query_op(aotk_op op, const char *query) {
  const char *owner = NULL, *name = NULL;
  for (size_t i = 0; i < sizeof op_queries / sizeof op_queries[0]; i++) {
    if ((int)op_queries[i].op == (int)op) owner = op_queries[i].query, name = op_queries[i].name;
  }
  if (owner != NULL && strcmp(owner, query) == 0) return AOTK_OK;
  /* Refused: the message lists the ops this query answers. */
  char answers[128] = "";
  for (size_t i = 0; i < sizeof op_queries / sizeof op_queries[0]; i++) {
    if (strcmp(op_queries[i].query, query) != 0) continue;
    size_t used = strlen(answers);
    snprintf(answers + used, sizeof answers - used, "%s%s", used > 0 ? " and " : "", op_queries[i].name);
  }
  if (owner != NULL) {
    return aotk__fail(AOTK_ERROR_INVALID_VALUE, "op = %d (%s) is %s's; %s answers %s", (int)op, name, owner, query,
                      answers);
  }
  return aotk__fail(AOTK_ERROR_INVALID_VALUE, "op = %d is not an aotk_op; %s answers %s", (int)op, query, answers);
}

aotk_status aotk__check_workspace(const void *workspace, size_t workspace_bytes, size_t needed, const char *at_least,
                                  const char *hint) {
  if (workspace_bytes < needed || (workspace == NULL && needed > 0)) {
    return aotk__fail(AOTK_ERROR_WORKSPACE_TOO_SMALL, "workspace_bytes = %zu%s but this problem needs %s%zu (%s)",
                      workspace_bytes, workspace == NULL ? " (workspace NULL)" : "", at_least, needed, hint);
  }
  if ((uintptr_t)workspace % 16 != 0) {
    return aotk__fail(AOTK_ERROR_MISALIGNED_POINTER, "workspace = %p is not 16-byte aligned", workspace);
  }
  return AOTK_OK;
}

void aotk__fill_info(const aotk__kernel_entry *e, aotk__image_kind kind, int64_t grid, size_t workspace_bytes,
                     int32_t launches, uint32_t features, aotk_kernel_info *info) {
  size_t size = info->struct_size < sizeof *info ? info->struct_size : sizeof *info;
  aotk_kernel_info full;
  memset(&full, 0, sizeof full);
  full.struct_size = info->struct_size;
  snprintf(full.kernel_name, sizeof full.kernel_name, "%s", e->name);
  full.arch = e->arch;
  full.from_ptx = kind == AOTK__IMAGE_PTX;
  full.num_warps = e->num_warps;
  full.shared_bytes = e->shared_bytes;
  full.block_m = e->block_m;
  full.block_n = e->block_n;
  full.aligned = e->aligned;
  full.grid = grid;
  full.workspace_bytes = workspace_bytes;
  full.launches = launches;
  full.head_dim_qk = e->head_dim_qk;
  full.head_dim_v = e->head_dim_v;
  full.features = features;
  full.num_splits = 1;
  memcpy(info, &full, size);
}

/* Loads the kernels of `rows` (checking each row's parameter kinds against what its launcher packs)
 * before anything is launched, so that a call that fails to load launches nothing. */
aotk_status aotk__load_rows(const aotk__driver *driver, const int *rows, const char *const *param_kinds, int count,
                             aotk__image_kind kind, CUdevice device, CUkernel *kernels) {
  for (int i = 0; i < count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[rows[i]];
    if (strcmp(e->param_kinds, param_kinds[i]) != 0) {
      return aotk__fail(AOTK_ERROR_INTERNAL, "%s takes parameters \"%s\"; the launcher packs \"%s\"", e->name,
                        e->param_kinds, param_kinds[i]);
    }
    aotk_status status = aotk__kernel_get(driver, rows[i], kind, device, &kernels[i]);
    if (status != AOTK_OK) return status;
  }
  return AOTK_OK;
}

/* Launches table row `row`'s loaded `kernel` with `args`, one per parameter kind, followed by
 * Triton's two scratch pointers (NULL: the generator admits no kernel that needs them). */
aotk_status aotk__launch_row(const aotk__driver *driver, int row, CUkernel kernel, size_t count, void **args,
                              int64_t grid, aotk_stream stream) {
  enum { MAX_ARGS = 128 };
  const aotk__kernel_entry *e = &aotk__kernel_table[row];
  if (count + 2 > MAX_ARGS) return aotk__fail(AOTK_ERROR_INTERNAL, "%s: too many parameters", e->name);
  CUdeviceptr global_scratch = 0, profile_scratch = 0;
  void *all_args[MAX_ARGS];
  memcpy(all_args, args, count * sizeof *args);
  all_args[count] = &global_scratch;
  all_args[count + 1] = &profile_scratch;
  CUresult result = driver->cuLaunchKernel((CUfunction)(void *)kernel, (unsigned)grid, 1, 1,
                                           32u * (unsigned)e->num_warps, 1, 1, (unsigned)e->shared_bytes,
                                           (CUstream)stream, all_args, NULL);
  if (result != CUDA_SUCCESS) {
    char what[160];
    snprintf(what, sizeof what, "cuLaunchKernel(%s)", e->name);
    return aotk__cuda_failure(driver, result, what);
  }
  return AOTK_OK;
}

aotk_status aotk_preload(void) {
  aotk__clear_error();
  const aotk__driver *driver;
  aotk__device_info device;
  aotk_status status = aotk__driver_get(&driver);
  if (status != AOTK_OK || (status = aotk__current_device(driver, &device)) != AOTK_OK) return status;
  int arch;
  aotk__image_kind kind;
  if ((status = aotk__choose_target(&device, &arch, &kind)) != AOTK_OK) return status;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (e->arch != arch || e->shared_bytes > device.max_shared_bytes) continue;
    CUkernel kernel;
    if ((status = aotk__kernel_get(driver, i, kind, device.device, &kernel)) != AOTK_OK) return status;
  }
  return AOTK_OK;
}

aotk_status aotk_get_build_info(aotk_build_info *info) {
  aotk__clear_error();
  if (info == NULL) return aotk__fail(AOTK_ERROR_NULL_POINTER, "info is NULL");
  if (info->struct_size < sizeof(size_t)) {
    return aotk__fail(AOTK_ERROR_STRUCT_SIZE, "info->struct_size = %zu (use AOTK_BUILD_INFO_INIT)", info->struct_size);
  }
  aotk_build_info full;
  memset(&full, 0, sizeof full);
  full.struct_size = info->struct_size;
  full.triton_version = aotk__triton_version;
  full.ptxas_version = aotk__ptxas_version;
  full.catalog_kernels = aotk__catalog_kernel_count;
  for (int i = 0; i < aotk__kernel_count; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    int64_t bytes = (int64_t)e->cubin.compressed_bytes + (int64_t)e->ptx.compressed_bytes;
    if (e->arch == 80) {
      full.kernels_sm80++;
      full.image_bytes_sm80 += bytes;
    } else if (e->arch == 90) {
      full.kernels_sm90++;
      full.image_bytes_sm90 += bytes;
    }
  }
  size_t size = info->struct_size < sizeof full ? info->struct_size : sizeof full;
  memcpy(info, &full, size);
  return AOTK_OK;
}
