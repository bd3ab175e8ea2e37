/*
 * Selection attention's calls that are not a numerics case, on the GPU: aotk_sel_query on the device
 * (kernels, grids, workspace), the refusals of aotk_sel_fwd and aotk_sel_bwd (a workspace too small, NULL
 * or misaligned, misaligned tensors, a missing lse: nothing written), and aotk_sel_check_indices on clean
 * indices and on each kind of bad index (the first offender named). The numerics are tests/test_sel_gpu.c.
 * Exits 77 (skipped) on a machine with no GPU.
 */
#include "sel_gpu_cases.h"

/* ---- the calls that are not a numerics case ------------------------------------------------ */

/* A small valid problem for the tests below: bf16, d=64, varlen (40 x 100, 0 x 10, 70 x 200) + 2 unused
 * rows, heads 4/2, block size 32, 6 slots, a clean random selection with block_cnt. */
static const sel_case small_case = {
    .dtype = AOTK_DTYPE_BFLOAT16, .head_dim_qk = 64, .head_dim_v = 64, .block_size = 32, .slots = 6,
    .heads_kv = 2, .group = 2, .varlen = 1, .num_seqs = 3, .len_q = {40, 0, 70}, .len_k = {100, 10, 200},
    .with_count = 1, .selection = SELECT_RANDOM, .layout = LAYOUT_CONTIGUOUS, .name = "small"};

/* Elements of the output storages and lse no longer holding the poison. */
static int64_t written_count(sel_run *x) {
  int64_t poisoned = 0, total = 0;
  for (int s = 0; s < x->storage_count; s++) {
    storage *st = &x->storages[s];
    if (!st->is_output || !aotk_gpu_test_download(st->host, st->device, (size_t)st->elements * 2)) continue;
    for (int64_t e = 0; e < st->elements; e++) poisoned += st->host[e] == 0xffff;
    total += st->elements;
  }
  if (aotk_gpu_test_download(x->lse_host, x->lse_device, (size_t)(x->rows_q * x->heads_q) * 4)) {
    for (int64_t e = 0; e < x->rows_q * x->heads_q; e++) {
      uint32_t bits;
      memcpy(&bits, &x->lse_host[e], 4);
      poisoned += bits == 0xffffffffu;
    }
    total += x->rows_q * x->heads_q;
  }
  return total - poisoned; /* elements written */
}

/* Bad workspaces, misaligned tensors and a missing lse are refused before anything is launched: no
 * output element is written. */
static void test_refusals(void) {
  sel_case c = small_case;
  c.seed = seed ^ 0x5e1ull;
  sel_run x;
  if (!sel_run_create(&x, &c)) {
    sel_run_destroy(&x);
    return;
  }
  for (int s = 0; s < x.storage_count; s++) {
    if (x.storages[s].is_output) aotk_gpu_test_poison(x.storages[s].device, (size_t)x.storages[s].elements * 2);
  }
  aotk_gpu_test_poison(x.lse_device, (size_t)(x.rows_q * x.heads_q) * 4);
  aotk_gpu_test_settle();
  void *workspace = (void *)(uintptr_t)x.workspace;
  aotk_status status = aotk_sel_bwd(&x.params, workspace, x.workspace_bytes - 4, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL, "4 bytes short: %s", aotk_status_name(status));
  status = aotk_sel_bwd(&x.params, NULL, 0, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL, "NULL workspace: %s", aotk_status_name(status));
  status = aotk_sel_bwd(&x.params, (char *)workspace + 4, x.workspace_bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "workspace + 4: %s", aotk_status_name(status));
  aotk_sel_params params = x.params;
  memset(&params.lse, 0, sizeof params.lse);
  status = aotk_sel_bwd(&params, workspace, x.workspace_bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_NULL_POINTER, "backward without lse: %s", aotk_status_name(status));
  /* q 8 bytes past an aligned address (refused before anything reads it). */
  params = x.params;
  params.q.data = (char *)params.q.data + 8;
  status = aotk_sel_fwd(&params, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "q + 8 bytes: %s", aotk_status_name(status));
  /* k's token stride 8 elements short of a multiple of 16 (rows overlap; nothing is read). */
  params = x.params;
  params.k.strides[0] -= 8;
  status = aotk_sel_fwd(&params, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "k's token stride %lld: %s", (long long)params.k.strides[0],
            aotk_status_name(status));
  params = x.params;
  params.dv.data = (char *)params.dv.data + 2;
  status = aotk_sel_bwd(&params, workspace, x.workspace_bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "dv + 2 bytes: %s", aotk_status_name(status));
  params = x.params;
  params.block_size = 16;
  status = aotk_sel_fwd(&params, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "block_size 16: %s", aotk_status_name(status));
  aotk_gpu_test_synchronize("refused calls");
  int64_t written = written_count(&x);
  CHECK_MSG(written == 0, "refused calls wrote %lld output elements", (long long)written);
  sel_run_destroy(&x);
}

static size_t round_up16(size_t bytes) { return (bytes + 15) / 16 * 16; }

/* The queries on this GPU: kernel names, launches, workspace, and the forward's grid (one program
 * per (token, kv head) and group chunk). */
static void test_query_on_device(void) {
  const int64_t total_q = 8192, total_k = 8192, heads_q = 64, heads_kv = 4, slots = 16;
  aotk_sel_params params = AOTK_SEL_PARAMS_INIT;
  void *fake = (void *)(uintptr_t)0x100000;
  params.q = aotk_tensor_3d(fake, AOTK_DTYPE_BFLOAT16, total_q, heads_q, 128);
  params.k = aotk_tensor_3d(fake, AOTK_DTYPE_BFLOAT16, total_k, heads_kv, 128);
  params.v = params.k;
  params.out = params.q;
  params.lse = aotk_tensor_2d(fake, AOTK_DTYPE_FLOAT32, total_q, heads_q);
  params.dout = params.q;
  params.dq = params.q;
  params.dk = params.k;
  params.dv = params.k;
  params.block_size = 64;
  params.block_idx = aotk_tensor_3d(fake, AOTK_DTYPE_INT32, total_q, heads_kv, slots);
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_sel_query(AOTK_OP_SEL_FWD, &params, &info);
  CHECK_MSG(status == AOTK_OK, "forward: %s: %s", aotk_status_name(status), aotk_last_error());
  CHECK_MSG(strncmp(info.kernel_name, "sel_fwd_bf16_", 13) == 0, "forward kernel %s", info.kernel_name);
  CHECK(info.launches == 1 && info.workspace_bytes == 0);
  CHECK_MSG(info.grid >= total_q * heads_kv && info.grid % (total_q * heads_kv) == 0, "forward grid %lld",
            (long long)info.grid);
  printf("    forward: %s (sm_%d%s), %d warps, %d bytes shared, grid %lld\n", info.kernel_name, info.arch,
         info.from_ptx ? " PTX" : "", info.num_warps, info.shared_bytes, (long long)info.grid);
  info = (aotk_kernel_info)AOTK_KERNEL_INFO_INIT;
  status = aotk_sel_query(AOTK_OP_SEL_BWD, &params, &info);
  CHECK_MSG(status == AOTK_OK, "backward: %s: %s", aotk_status_name(status), aotk_last_error());
  CHECK_MSG(strncmp(info.kernel_name, "sel_bwd_dkdv_bf16_", 18) == 0, "backward kernel %s", info.kernel_name);
  /* The header's formula, each part rounded up to 16 bytes (one sequence: max_seqlen_k is total_k): delta,
   * list offsets, cursors and first records, the lists and the compacted rows, the partial records. */
  const size_t offsets_row = (size_t)((total_k + 63) / 64 + 1 + 3) / 4 * 4;
  const int64_t group = heads_q / heads_kv, by_pairs = (4096 + group - 1) / group,
                by_share = (heads_kv * total_q * slots + 511) / 512;
  const int64_t chunk_tokens = by_pairs > by_share ? by_pairs : by_share;
  int64_t max_chunks = (total_q + chunk_tokens - 1) / chunk_tokens;
  max_chunks = max_chunks < 1 ? 1 : max_chunks > 16 ? 16 : max_chunks;
  const int64_t records = max_chunks > 1 ? 2 * total_q * slots / chunk_tokens + 1 : 0;
  const size_t documented = round_up16((size_t)(4 * total_q * heads_q)) +
                            3 * round_up16(4 * (size_t)heads_kv * offsets_row) +
                            2 * round_up16((size_t)(4 * heads_kv * total_q * slots)) +
                            (size_t)(4 * heads_kv * records * 64 * (128 + 128));
  CHECK_MSG(info.launches == (max_chunks > 1 ? 8 : 7), "%d launches with at most %lld chunks per list",
            (int)info.launches, (long long)max_chunks);
  CHECK_MSG(info.workspace_bytes == documented, "workspace %zu bytes, the header's formula gives %zu",
            info.workspace_bytes, documented);
  printf("    backward: %s, %d warps, %d bytes shared, grid %lld, workspace %zu bytes\n", info.kernel_name,
         info.num_warps, info.shared_bytes, (long long)info.grid, info.workspace_bytes);
  status = aotk_sel_query(AOTK_OP_ATTN_FWD, &params, &info);
  CHECK_MSG(status == AOTK_ERROR_INVALID_VALUE, "aotk_sel_query(AOTK_OP_ATTN_FWD): %s", aotk_status_name(status));
}

/* "token N" in the message, N not followed by another digit. */
static bool names_token(const char *message, int64_t token) {
  char needle[32];
  snprintf(needle, sizeof needle, "token %lld", (long long)token);
  for (const char *at = strstr(message, needle); at != NULL; at = strstr(at + 1, needle)) {
    char next = at[strlen(needle)];
    if (next < '0' || next > '9') return true;
  }
  return false;
}

static void expect_invalid(sel_run *x, const int32_t *idx, const int32_t *cnt, int64_t token, int64_t local,
                           const char *what) {
  const int64_t H = x->heads_kv, S = x->slots;
  CUdeviceptr idx_device = 0, cnt_device = 0;
  if (!aotk_gpu_test_upload(&idx_device, idx, (size_t)(x->rows_q * H * S) * 4)) return;
  aotk_sel_params params = x->params;
  params.block_idx.data = (void *)(uintptr_t)idx_device;
  if (cnt == NULL) {
    memset(&params.block_cnt, 0, sizeof params.block_cnt);
  } else if (aotk_gpu_test_upload(&cnt_device, cnt, (size_t)(x->rows_q * H) * 4)) {
    params.block_cnt.data = (void *)(uintptr_t)cnt_device;
  }
  if (aotk_gpu_test_settle()) {
    aotk_status status = aotk_sel_check_indices(&params, (void *)(uintptr_t)x->workspace, 16, (aotk_stream)stream);
    if (token < 0) {
      CHECK_MSG(status == AOTK_OK, "%s: %s: %s", what, aotk_status_name(status), aotk_last_error());
    } else {
      const char *message = aotk_last_error();
      CHECK_MSG(status == AOTK_ERROR_INVALID_INDICES, "%s: %s", what, aotk_status_name(status));
      CHECK_MSG(names_token(message, token) || names_token(message, local),
                "%s: the message does not name token %lld (local %lld): %s", what, (long long)token, (long long)local,
                message);
      printf("    %s: %s\n", what, message);
    }
  }
  aotk_gpu_test_free(&idx_device);
  aotk_gpu_test_free(&cnt_device);
}

/* The debug check: a clean index passes (with -1s, future blocks, duplicates and bad ids only past
 * the counts, and garbage in the unused rows); each kind of bad index fails naming its token; of two
 * bad rows, the first in token order is named. */
static void test_check_indices(void) {
  sel_case c = small_case;
  c.seed = seed ^ 0xc4eull;
  sel_run x;
  if (!sel_run_create(&x, &c)) {
    sel_run_destroy(&x);
    return;
  }
  const int64_t H = x.heads_kv, S = x.slots;
  int32_t *idx = host_alloc(x.rows_q * H * S, sizeof(int32_t));
  int32_t *cnt = host_alloc(x.rows_q * H, sizeof(int32_t));
  int32_t *bad_idx = host_alloc(x.rows_q * H * S, sizeof(int32_t));
  int32_t *bad_cnt = host_alloc(x.rows_q * H, sizeof(int32_t));
  if (idx == NULL || cnt == NULL || bad_idx == NULL || bad_cnt == NULL) goto done;
  /* Clean: per row, distinct blocks below ceil(len_k / BS) (future ones included) in the counted slots,
   * then -1s; past the count, repeats and ids out of range. Unused rows keep their garbage. */
  memcpy(idx, x.idx, (size_t)(x.rows_q * H * S) * 4);
  memcpy(cnt, x.cnt, (size_t)(x.rows_q * H) * 4);
  for (int64_t token = 0; token < x.total_q; token++) {
    const aotk__sel_reference_token where = aotk__sel_reference_locate(&x.problem, token);
    for (int64_t h = 0; h < H; h++) {
      int32_t *row = idx + (token * H + h) * S;
      const int64_t count = aotk__random_int(&x.state, 1, S - 1);
      for (int64_t s = 0; s < S; s++) row[s] = s < count ? -1 : (int32_t)aotk__random_int(&x.state, -5, where.num_blocks + 3);
      int64_t first = aotk__random_int(&x.state, 0, where.num_blocks - 1);
      for (int64_t s = 0; s < count && s < where.num_blocks; s += 2) row[s] = (int32_t)((first + s) % where.num_blocks);
      row[S - 1] = row[0]; /* a repeat past the count */
      cnt[token * H + h] = (int32_t)count;
    }
  }
  expect_invalid(&x, idx, cnt, -1, -1, "clean index with block_cnt");

  /* Row (token 45 = sequence 2's row 5, kv head 1). */
  const int64_t token = 45, local = 5, h = 1, num_blocks = (200 + 31) / 32;
  int32_t *row;
#define RESET()                                                     \
  do {                                                              \
    memcpy(bad_idx, idx, (size_t)(x.rows_q * H * S) * 4);            \
    memcpy(bad_cnt, cnt, (size_t)(x.rows_q * H) * 4);                \
    row = bad_idx + (token * H + h) * S;                            \
    bad_cnt[token * H + h] = (int32_t)S;                            \
    for (int64_t s = 0; s < S; s++) row[s] = -1;                     \
  } while (0)
  RESET();
  row[2] = -2;
  expect_invalid(&x, bad_idx, bad_cnt, token, local, "block id -2");
  RESET();
  row[3] = (int32_t)num_blocks;
  expect_invalid(&x, bad_idx, bad_cnt, token, local, "block id ceil(len_k / block_size)");
  RESET();
  row[0] = 3;
  row[4] = 3;
  expect_invalid(&x, bad_idx, bad_cnt, token, local, "a block listed twice");
  RESET();
  bad_cnt[token * H + h] = -1;
  expect_invalid(&x, bad_idx, bad_cnt, token, local, "block_cnt -1");
  RESET();
  bad_cnt[token * H + h] = (int32_t)S + 1;
  expect_invalid(&x, bad_idx, bad_cnt, token, local, "block_cnt slots + 1");
  /* Not errors: future blocks (token 40 = sequence 2's row 0, position 130: blocks 5 and 6 start at 160
   * and 192) and repeated -1s, all counted. */
  RESET();
  {
    static const int32_t future_row[6] = {6, -1, -1, 5, -1, 2};
    memcpy(bad_idx + (40 * H + 0) * S, future_row, sizeof future_row);
    bad_cnt[40 * H + 0] = 6;
  }
  expect_invalid(&x, bad_idx, bad_cnt, -1, -1, "future blocks and repeated -1s");
  /* Two bad rows: the first in token order is named (sequence 0's token 7, then token 45). */
  RESET();
  row[1] = 99;
  bad_idx[(7 * H + 0) * S + bad_cnt[7 * H + 0] - 1] = 4; /* 4 = ceil(100 / 32): out of range in sequence 0 */
  expect_invalid(&x, bad_idx, bad_cnt, 7, 7, "two bad rows");
  /* Without block_cnt every slot counts: the clean index's repeats and out-of-range ids past the
   * counts are now errors. */
  expect_invalid(&x, idx, NULL, 0, 0, "the clean index without block_cnt");
#undef RESET
  /* The check needs 16 bytes of workspace. */
  aotk_status status = aotk_sel_check_indices(&x.params, (void *)(uintptr_t)x.workspace, 8, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL, "8 bytes of workspace: %s", aotk_status_name(status));
done:
  free(idx);
  free(cnt);
  free(bad_idx);
  free(bad_cnt);
  sel_run_destroy(&x);
}

int main(void) {
  if (!aotk_gpu_test_setup()) return aotk_gpu_test_skip_all();
  RUN_TEST(test_query_on_device);
  RUN_TEST(test_refusals);
  RUN_TEST(test_check_indices);
  driver->cuStreamDestroy(stream);
  return aotk_test_finish();
}
