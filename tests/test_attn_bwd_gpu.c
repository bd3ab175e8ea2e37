/* The backward on the GPU against the float64 reference, over every element of dq, dk and dv: every
 * shipped dtype and head dim, causal and not, sequence lengths {1, 17, 127, 128, 1000} for q and k,
 * batch 1-4, GQA ratios 1/4/8, the four memory layouts (and mixtures in which each gradient's strides
 * differ from its input's), default and explicit scales; 4097 in a few cases only (see below); bitwise
 * determinism over 5 runs; a workspace that is too small; CUDA graph capture; the sm_80 PTX.
 * Then the features of aotk_attn_params (the forward's matrix, tests/aotk_feature_matrix.h): head dims
 * from 8 to 256 with head_dim_qk != head_dim_v, variable length with empty sequences, sliding windows
 * of 0, 1, 63, 64, 65 and 1000 keys in both alignments, softcap, ALiBi, sinks (and dsinks) and dropout,
 * each alone over both dtypes, and all together. Exits 77 (skipped) on a machine with no GPU.
 *
 * The host reference costs ~1 us per (query row, visible key, query head) on one core and is spread
 * over the machine's cores (aotk__check_attn_bwd); the matrix is sized to keep the whole binary
 * within a few minutes on a 16-core machine. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotk.h"
#include "aotk_check.h"
#include "aotk_driver.h"
#include "aotk_half.h"
#include "aotk_test_harness.h"
#include "aotk_gpu_test.h"
#include "aotk_feature_matrix.h"


typedef struct bwd_case {
  aotk__bwd_check_case check;
  bool expect_aligned;
  bool expect_ptx;
  char name[320];
} bwd_case;

/* Worst error seen, as a fraction of its bound, per dtype, and the case it was seen in: reported at
 * the end. */
static double worst_error_fraction[4];
static char worst_case[4][sizeof(((aotk__bwd_check_result *)0)->detail) + 340];

/* The header's figure: delta and lse * log2(e), fp32 [batch * heads_q, round_up(seqlen_q, 128)] each
 * (varlen: num_seqs and max_seqlen_q). */
static size_t documented_workspace_bytes(int64_t batch, int64_t heads_q, int64_t seqlen_q) {
  return (size_t)(8 * batch * heads_q * ((seqlen_q + 127) / 128 * 128));
}

/* The case's batch and seqlen_q as the backward sees them: the number of sequences and max_seqlen_q
 * for varlen. */
static void case_batch_and_seqlen_q(const aotk__bwd_check_case *c, int64_t *batch, int64_t *seqlen_q) {
  *batch = c->features.num_seqs > 0 ? c->features.num_seqs : c->batch;
  *seqlen_q = aotk_gpu_test_max_seqlen_q(&c->features, c->seqlen_q);
}

/* Cases whose dK/dV pass was the warp-specialized Gluon kernel (each one's choice checked by the rule),
 * and those of them that ran its fused, non-deterministic form (deterministic = 0). */
static int hopper_cases, fused_cases;

/* The non-deterministic backward's workspace (include/aotk.h, AOTK_FEATURE_NONDETERMINISTIC): the rest,
 * rounded up to 256 bytes, then the fp32 dQ accumulator [batch * heads_q, round_up(seqlen_q, 128), d]. */
static size_t fused_workspace_bytes(size_t rest, int64_t batch, int64_t heads_q, int64_t seqlen_q, int64_t head_dim) {
  return (rest + 255) / 256 * 256 + (size_t)(4 * batch * heads_q * ((seqlen_q + 127) / 128 * 128) * head_dim);
}

static void run_bwd_case(const void *argument) {
  const bwd_case *bc = argument;
  const aotk__bwd_check_case *c = &bc->check;
  aotk__bwd_check_result r;
  aotk_status status = aotk__check_attn_bwd(driver, c, &r);
  CHECK_MSG(status == AOTK_OK, "%s: %s", aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(r.passed, "%s: %s", r.kernel_name, r.detail);
  const aotk_gpu_test_fwd_path path = aotk_gpu_test_expect_bwd_path(c->layout, c->mix_layouts, c->seqlen_k, c->heads_kv,
                                                                    c->head_dim, &c->features, bc->expect_ptx);
  /* deterministic = 0 lets the warp-specialized path fuse dQ (include/aotk.h) at head dims 64 and 128; at
   * 256 and (192, 128) the deterministic passes run (the Gluon dK/dV pass and the Gluon dQ pass) either
   * way. */
  const bool expect_fused = path == FWD_HOPPER && !c->deterministic && c->head_dim <= 128;
  const char *const prefix = expect_fused ? "attn_bwd_fused_hopper_" : "attn_bwd_dkdv_";
  CHECK_MSG(strncmp(r.kernel_name, prefix, strlen(prefix)) == 0, "deterministic = %d: the query names %s, not %s*",
            c->deterministic, r.kernel_name, prefix);
  CHECK_MSG(((r.features & AOTK_FEATURE_NONDETERMINISTIC) != 0) == expect_fused, "features 0x%x for %s",
            (unsigned)r.features, r.kernel_name);
  bool aligned = strstr(r.kernel_name, "_aligned_") != NULL;
  CHECK_MSG(aligned == bc->expect_aligned, "%s layout%s ran %s", aotk__check_layout_name(c->layout),
            c->mix_layouts ? " (mixed)" : "", r.kernel_name);
  CHECK_MSG(r.from_ptx == (int)bc->expect_ptx, "from_ptx = %d", r.from_ptx);
  aotk_gpu_test_check_kernel_choice(
      r.kernel_name, c->causal, c->head_dim, &c->features, r.kernel_head_dim_qk, r.kernel_head_dim_v,
      r.features & ~AOTK_FEATURE_NONDETERMINISTIC, path);
  if (path == FWD_HOPPER) hopper_cases++;
  if (expect_fused) fused_cases++;
  /* The pre-pass, dK/dV and dQ (fused: the cast of dQ); and the sink reduction, which the check asks
   * for with sinks (dsinks). */
  const int32_t launches = c->features.sinks ? 4 : 3;
  CHECK_MSG(r.launches == launches, "launches = %d, expected %d", (int)r.launches, (int)launches);
  int64_t batch, seqlen_q;
  case_batch_and_seqlen_q(c, &batch, &seqlen_q);
  size_t documented = documented_workspace_bytes(batch, c->heads_q, seqlen_q);
  /* dsinks adds the sink gradient's partial sums: 4 * heads_q * batch * round_up(seqlen_q, 128) / 64. */
  if (c->features.sinks) documented += (size_t)(4 * c->heads_q * batch * ((seqlen_q + 127) / 128 * 128) / 64);
  if (expect_fused) documented = fused_workspace_bytes(documented, batch, c->heads_q, seqlen_q, c->head_dim);
  CHECK_MSG(r.workspace_bytes == documented, "workspace_bytes = %zu, the header says %zu", r.workspace_bytes,
            documented);
  if (r.worst_fraction > worst_error_fraction[c->dtype]) {
    worst_error_fraction[c->dtype] = r.worst_fraction;
    snprintf(worst_case[c->dtype], sizeof worst_case[c->dtype], "%s: %s", bc->name, r.detail);
  }
}

static uint64_t next_random(uint64_t *state) { return aotk_gpu_test_random(state); }

static const char *dtype_label(aotk_dtype dtype) { return aotk_gpu_test_dtype_label(dtype); }

static void fill_case(bwd_case *bc, aotk_dtype dtype, int64_t head_dim, int causal, int64_t seqlen_q, int64_t seqlen_k,
                      int64_t batch, int64_t heads_q, int64_t heads_kv, aotk__check_layout layout, int mix_layouts,
                      float softmax_scale, int repeats, int index, bool ptx) {
  memset(bc, 0, sizeof *bc);
  aotk__bwd_check_case *c = &bc->check;
  c->dtype = dtype;
  c->head_dim = head_dim;
  c->causal = causal;
  c->seqlen_q = seqlen_q;
  c->seqlen_k = seqlen_k;
  c->batch = batch;
  c->heads_q = heads_q;
  c->heads_kv = heads_kv;
  c->layout = layout;
  c->mix_layouts = mix_layouts;
  c->softmax_scale = softmax_scale;
  /* A repeated case asks for determinism; the others alternate, in steps of two layout cycles, so that
   * the contiguous cases (the ones the sm_90 Gluon pass takes: index % 8 == 0 in the matrix) run both
   * the deterministic backward and, on sm_90, the fused non-deterministic one (include/aotk.h). */
  c->deterministic = repeats > 0 ? 1 : (index / (2 * AOTK__LAYOUT_COUNT)) % 2;
  c->repeats = repeats;
  c->seed = seed + (uint64_t)index * 1000003u + (ptx ? 17 : 0);
  c->stream = (aotk_stream)stream;
  bc->expect_aligned = layout == AOTK__LAYOUT_CONTIGUOUS || layout == AOTK__LAYOUT_PERMUTED;
  bc->expect_ptx = ptx;
  char runs[24] = "";
  if (repeats > 0) snprintf(runs, sizeof runs, " %d runs", repeats + 1);
  snprintf(bc->name, sizeof bc->name, "bwd %s%s d=%lld %s sq=%lld sk=%lld b=%lld hq=%lld hkv=%lld %s%s%s%s",
           ptx ? "ptx sm_80 " : "", dtype_label(dtype), (long long)head_dim, causal ? "causal" : "full",
           (long long)seqlen_q, (long long)seqlen_k, (long long)batch, (long long)heads_q, (long long)heads_kv,
           aotk__check_layout_name(layout), mix_layouts ? "+mixed" : "", softmax_scale != 0.0f ? " scale=0.3" : "",
           runs);
}

/* One case of the matrix: batch, heads and layout drawn from the index and the run's seed. Problems
 * with more than 1e5 (row, key) pairs per head get batch <= 2 and one kv head, to bound the
 * reference's time. */
static void make_case(bwd_case *bc, aotk_dtype dtype, int64_t head_dim, int causal, int64_t seqlen_q, int64_t seqlen_k,
                      int index, uint64_t *state, bool ptx) {
  static const int64_t group_sizes[] = {1, 4, 8};
  const bool large = seqlen_q * seqlen_k > 100000;
  int64_t batch = 1 + (int64_t)(next_random(state) % (large ? 2 : 4));
  int64_t heads_kv = large ? 1 : 1 + (int64_t)(next_random(state) % 2);
  int64_t heads_q = heads_kv * group_sizes[index % 3];
  fill_case(bc, dtype, head_dim, causal, seqlen_q, seqlen_k, batch, heads_q, heads_kv,
            (aotk__check_layout)(index % AOTK__LAYOUT_COUNT), (index / AOTK__LAYOUT_COUNT) % 2,
            index % 7 == 3 ? 0.3f : 0.0f, 0, index, ptx);
}

/* --- buffers of one contiguous problem, for the tests that are not a numerics case ------------- */

typedef struct bwd_buffers {
  aotk_attn_params params;
  CUdeviceptr q, k, v, out, lse, dout, dq, dk, dv, workspace;
  size_t q_bytes, kv_bytes, workspace_bytes;
} bwd_buffers;

/* The shape of bwd_buffers' problem: batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim. */
enum { B = 2, SQ = 300, SK = 257, HQ = 8, HKV = 2, D = 64 };

static void upload_random(CUdeviceptr *pointer, size_t bytes, uint64_t *state) {
  size_t count = bytes / 2;
  uint16_t *host = malloc(bytes);
  CHECK(host != NULL);
  if (host == NULL) return;
  for (size_t i = 0; i < count; i++) {
    /* Uniform in [-2, 2), in fp16. */
    double u = (double)(next_random(state) >> 11) * 0x1.0p-53;
    host[i] = aotk__float_to_fp16((float)(4.0 * u - 2.0));
  }
  CHECK(driver->cuMemAlloc(pointer, bytes) == CUDA_SUCCESS);
  CHECK(driver->cuMemcpyHtoD(*pointer, host, bytes) == CUDA_SUCCESS);
  free(host);
}

/* fp16, causal, GQA 4, seqlen_q > seqlen_k (rows that see no key); forward already run. */
static bool bwd_buffers_create(bwd_buffers *b) {
  memset(b, 0, sizeof *b);
  uint64_t state = seed ^ 0xb4dull;
  b->q_bytes = (size_t)B * SQ * HQ * D * 2;
  b->kv_bytes = (size_t)B * SK * HKV * D * 2;
  upload_random(&b->q, b->q_bytes, &state);
  upload_random(&b->k, b->kv_bytes, &state);
  upload_random(&b->v, b->kv_bytes, &state);
  upload_random(&b->dout, b->q_bytes, &state);
  CHECK(driver->cuMemAlloc(&b->out, b->q_bytes) == CUDA_SUCCESS);
  CHECK(driver->cuMemAlloc(&b->lse, (size_t)B * HQ * SQ * 4) == CUDA_SUCCESS);
  CHECK(driver->cuMemAlloc(&b->dq, b->q_bytes) == CUDA_SUCCESS);
  CHECK(driver->cuMemAlloc(&b->dk, b->kv_bytes) == CUDA_SUCCESS);
  CHECK(driver->cuMemAlloc(&b->dv, b->kv_bytes) == CUDA_SUCCESS);
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  params.q = aotk_tensor_4d((void *)(uintptr_t)b->q, AOTK_DTYPE_FLOAT16, B, SQ, HQ, D);
  params.k = aotk_tensor_4d((void *)(uintptr_t)b->k, AOTK_DTYPE_FLOAT16, B, SK, HKV, D);
  params.v = aotk_tensor_4d((void *)(uintptr_t)b->v, AOTK_DTYPE_FLOAT16, B, SK, HKV, D);
  params.out = aotk_tensor_4d((void *)(uintptr_t)b->out, AOTK_DTYPE_FLOAT16, B, SQ, HQ, D);
  params.lse = aotk_tensor_3d((void *)(uintptr_t)b->lse, AOTK_DTYPE_FLOAT32, B, HQ, SQ);
  params.dout = aotk_tensor_4d((void *)(uintptr_t)b->dout, AOTK_DTYPE_FLOAT16, B, SQ, HQ, D);
  params.dq = aotk_tensor_4d((void *)(uintptr_t)b->dq, AOTK_DTYPE_FLOAT16, B, SQ, HQ, D);
  params.dk = aotk_tensor_4d((void *)(uintptr_t)b->dk, AOTK_DTYPE_FLOAT16, B, SK, HKV, D);
  params.dv = aotk_tensor_4d((void *)(uintptr_t)b->dv, AOTK_DTYPE_FLOAT16, B, SK, HKV, D);
  params.causal = 1;
  params.deterministic = 1;
  b->params = params;
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &b->params, &info);
  CHECK_MSG(status == AOTK_OK, "query: %s: %s", aotk_status_name(status), aotk_last_error());
  b->workspace_bytes = info.workspace_bytes;
  /* 16 bytes more, for the misaligned-workspace call. */
  CHECK(driver->cuMemAlloc(&b->workspace, b->workspace_bytes + 16) == CUDA_SUCCESS);
  status = aotk_attn_fwd(&b->params, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_OK, "forward: %s: %s", aotk_status_name(status), aotk_last_error());
  CHECK(driver->cuStreamSynchronize(stream) == CUDA_SUCCESS);
  return aotk_test_state.case_failures == 0;
}

static void bwd_buffers_destroy(bwd_buffers *b) {
  CUdeviceptr all[] = {b->q, b->k, b->v, b->out, b->lse, b->dout, b->dq, b->dk, b->dv, b->workspace};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) driver->cuMemFree(all[i]);
}

/* The memsets run on the legacy stream, which the test's non-blocking stream does not wait for: wait
 * for them here, before anything is launched on it. */
static void poison_gradients(const bwd_buffers *b) {
  CHECK(driver->cuMemsetD8(b->dq, 0xff, b->q_bytes) == CUDA_SUCCESS);
  CHECK(driver->cuMemsetD8(b->dk, 0xff, b->kv_bytes) == CUDA_SUCCESS);
  CHECK(driver->cuMemsetD8(b->dv, 0xff, b->kv_bytes) == CUDA_SUCCESS);
  CHECK(driver->cuCtxSynchronize() == CUDA_SUCCESS);
}

/* Elements of a device fp16 buffer that hold the poison (0xffff). */
static int64_t count_poisoned(CUdeviceptr pointer, size_t bytes) {
  uint16_t *host = malloc(bytes);
  int64_t poisoned = 0;
  CHECK(host != NULL && driver->cuMemcpyDtoH(host, pointer, bytes) == CUDA_SUCCESS);
  for (size_t i = 0; host != NULL && i < bytes / 2; i++) poisoned += host[i] == 0xffff;
  free(host);
  return poisoned;
}

/* A workspace smaller than the query's figure, a NULL one and a misaligned one are refused with their
 * statuses and nothing is launched: on the GPU, dq, dk and dv still hold the poison afterwards. */
static void test_workspace_refused(void) {
  bwd_buffers b;
  if (!bwd_buffers_create(&b)) {
    bwd_buffers_destroy(&b);
    return;
  }
  CHECK_MSG(b.workspace_bytes == documented_workspace_bytes(B, HQ, SQ), "workspace_bytes = %zu", b.workspace_bytes);
  poison_gradients(&b);
  void *workspace = (void *)(uintptr_t)b.workspace;
  aotk_status status = aotk_attn_bwd(&b.params, workspace, b.workspace_bytes - 4, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL, "4 bytes short: %s", aotk_status_name(status));
  CHECK_MSG(strstr(aotk_last_error(), "workspace") != NULL, "message: %s", aotk_last_error());
  status = aotk_attn_bwd(&b.params, NULL, 0, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL, "NULL workspace: %s", aotk_status_name(status));
  status = aotk_attn_bwd(&b.params, (char *)workspace + 4, b.workspace_bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_ERROR_MISALIGNED_POINTER, "workspace + 4: %s", aotk_status_name(status));
  CHECK(driver->cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK_MSG(count_poisoned(b.dq, b.q_bytes) == (int64_t)(b.q_bytes / 2), "a refused call wrote dq");
  CHECK_MSG(count_poisoned(b.dk, b.kv_bytes) == (int64_t)(b.kv_bytes / 2), "a refused call wrote dk");
  CHECK_MSG(count_poisoned(b.dv, b.kv_bytes) == (int64_t)(b.kv_bytes / 2), "a refused call wrote dv");
  /* The exact size works. */
  status = aotk_attn_bwd(&b.params, workspace, b.workspace_bytes, (aotk_stream)stream);
  CHECK_MSG(status == AOTK_OK, "%s: %s", aotk_status_name(status), aotk_last_error());
  CHECK(driver->cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK_MSG(count_poisoned(b.dq, b.q_bytes) == 0, "dq not fully written");
  CHECK_MSG(count_poisoned(b.dk, b.kv_bytes) == 0, "dk not fully written");
  CHECK_MSG(count_poisoned(b.dv, b.kv_bytes) == 0, "dv not fully written");
  bwd_buffers_destroy(&b);
}

static bool download(CUdeviceptr pointer, size_t bytes, uint16_t **host) {
  *host = malloc(bytes);
  return *host != NULL && driver->cuMemcpyDtoH(*host, pointer, bytes) == CUDA_SUCCESS;
}

/* A backward captured in a CUDA graph and replayed gives the same bits as the call made directly
 * (its three kernels allocate nothing and synchronize nothing). */
static void test_graph_capture(void) {
  bwd_buffers b;
  uint16_t *eager[3] = {NULL, NULL, NULL}, *replayed[3] = {NULL, NULL, NULL};
  if (bwd_buffers_create(&b)) {
    CUdeviceptr gradients[3] = {b.dq, b.dk, b.dv};
    size_t bytes[3] = {b.q_bytes, b.kv_bytes, b.kv_bytes};
    void *workspace = (void *)(uintptr_t)b.workspace;
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    CHECK(aotk_preload() == AOTK_OK);
    CHECK(aotk_attn_bwd(&b.params, workspace, b.workspace_bytes, (aotk_stream)stream) == AOTK_OK);
    CHECK(driver->cuStreamSynchronize(stream) == CUDA_SUCCESS);
    for (int g = 0; g < 3; g++) CHECK(download(gradients[g], bytes[g], &eager[g]));
    poison_gradients(&b);
    CHECK(driver->cuMemsetD8(b.workspace, 0xff, b.workspace_bytes) == CUDA_SUCCESS);
    CHECK(driver->cuCtxSynchronize() == CUDA_SUCCESS);
    CHECK(driver->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS);
    aotk_status captured = aotk_attn_bwd(&b.params, workspace, b.workspace_bytes, (aotk_stream)stream);
    CHECK(driver->cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
    CHECK_MSG(captured == AOTK_OK, "%s: %s", aotk_status_name(captured), aotk_last_error());
    CHECK(graph != NULL && driver->cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
    for (int replay = 0; exec != NULL && replay < 3; replay++) {
      CHECK(driver->cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
    }
    CHECK(driver->cuStreamSynchronize(stream) == CUDA_SUCCESS);
    static const char *const names[3] = {"dq", "dk", "dv"};
    for (int g = 0; g < 3; g++) {
      CHECK(download(gradients[g], bytes[g], &replayed[g]));
      CHECK_MSG(eager[g] && replayed[g] && memcmp(eager[g], replayed[g], bytes[g]) == 0,
                "graph replay's %s differs from the direct call's", names[g]);
    }
    if (exec) driver->cuGraphExecDestroy(exec);
    if (graph) driver->cuGraphDestroy(graph);
  }
  for (int g = 0; g < 3; g++) {
    free(eager[g]);
    free(replayed[g]);
  }
  bwd_buffers_destroy(&b);
}

/* The backward's query on this GPU: sm_90 cubins on an H100, three launches, the documented
 * workspace, and the dK/dV kernel's grid (one program per key block per kv head). */
static void test_query_on_device(void) {
  const int64_t batch = 2, seqlen_q = 4096, seqlen_k = 4096, heads_q = 16, heads_kv = 4, head_dim = 128;
  aotk_attn_params params = AOTK_ATTN_PARAMS_INIT;
  void *fake_q = (void *)(uintptr_t)0x100000, *fake_kv = (void *)(uintptr_t)0x200000;
  params.q = aotk_tensor_4d(fake_q, AOTK_DTYPE_BFLOAT16, batch, seqlen_q, heads_q, head_dim);
  params.k = aotk_tensor_4d(fake_kv, AOTK_DTYPE_BFLOAT16, batch, seqlen_k, heads_kv, head_dim);
  params.v = params.k;
  params.out = params.q;
  params.lse = aotk_tensor_3d((void *)(uintptr_t)0x300000, AOTK_DTYPE_FLOAT32, batch, heads_q, seqlen_q);
  params.dout = params.q;
  params.dq = params.q;
  params.dk = params.k;
  params.dv = params.k;
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: %s", aotk_status_name(status), aotk_last_error());
  int major = 0;
  CUdevice device;
  driver->cuCtxGetDevice(&device);
  driver->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  if (major == 9) CHECK_MSG(info.arch == 90 && !info.from_ptx, "arch %d from_ptx %d", info.arch, info.from_ptx);
  /* sm_90 runs the Gluon pass here (dense, packed, plain, d128), fused with dQ by default
   * (deterministic = 0); other GPUs the Triton one. */
  const char *prefix = major == 9 ? "attn_bwd_fused_hopper_bf16_d128_aligned_" : "attn_bwd_dkdv_bf16_d128_aligned_";
  CHECK_MSG(strncmp(info.kernel_name, prefix, strlen(prefix)) == 0, "kernel %s", info.kernel_name);
  CHECK(info.launches == 3);
  const size_t base = documented_workspace_bytes(batch, heads_q, seqlen_q);
  CHECK_MSG(info.workspace_bytes == (major == 9 ? fused_workspace_bytes(base, batch, heads_q, seqlen_q, head_dim) : base),
            "workspace %zu", info.workspace_bytes);
  CHECK(((info.features & AOTK_FEATURE_NONDETERMINISTIC) != 0) == (major == 9));
  CHECK(info.block_n > 0 && info.grid == (seqlen_k + info.block_n - 1) / info.block_n * batch * heads_kv);
  printf("    query: %s (sm_%d%s), %d warps, %d bytes shared, grid %lld, workspace %zu bytes\n", info.kernel_name,
         info.arch, info.from_ptx ? " PTX" : "", info.num_warps, info.shared_bytes, (long long)info.grid,
         info.workspace_bytes);
  /* deterministic = 1: the dK/dV pass and the dQ pass, and the smaller workspace. */
  params.deterministic = 1;
  aotk_kernel_info det = AOTK_KERNEL_INFO_INIT;
  status = aotk_query(AOTK_OP_ATTN_BWD, &params, &det);
  CHECK_MSG(status == AOTK_OK, "%s: %s", aotk_status_name(status), aotk_last_error());
  prefix = major == 9 ? "attn_bwd_dkdv_hopper_bf16_d128_aligned_" : "attn_bwd_dkdv_bf16_d128_aligned_";
  CHECK_MSG(strncmp(det.kernel_name, prefix, strlen(prefix)) == 0, "deterministic: kernel %s", det.kernel_name);
  CHECK(det.launches == 3 && det.workspace_bytes == base && (det.features & AOTK_FEATURE_NONDETERMINISTIC) == 0);
}

/* The non-deterministic backward (sm_90: deterministic = 0 on bwd_buffers' problem, fp16 d64 causal GQA
 * with rows that see no key): dk and dv are bitwise the deterministic run's (the same dK/dV code, one
 * owner each); dq matches it to within fp32 summation-order rounding, with no poison left; a workspace of
 * the deterministic size is refused before anything is written; and a CUDA graph of the call (its
 * memset included) replays to dq within the same bound. */
static void test_nondeterministic(void) {
  if (compute_capability != 90) {
    TEST_SKIP("the fused non-deterministic backward runs on sm_90 only");
    return;
  }
  bwd_buffers b;
  uint16_t *det[3] = {NULL, NULL, NULL}, *fused[3] = {NULL, NULL, NULL};
  CUdeviceptr workspace = 0;
  CUgraph graph = NULL;
  CUgraphExec exec = NULL;
  if (bwd_buffers_create(&b)) {
    CUdeviceptr gradients[3] = {b.dq, b.dk, b.dv};
    size_t bytes[3] = {b.q_bytes, b.kv_bytes, b.kv_bytes};
    static const char *const names[3] = {"dq", "dk", "dv"};
    CHECK(aotk_attn_bwd(&b.params, (void *)(uintptr_t)b.workspace, b.workspace_bytes, (aotk_stream)stream) == AOTK_OK);
    CHECK(driver->cuStreamSynchronize(stream) == CUDA_SUCCESS);
    for (int g = 0; g < 3; g++) CHECK(download(gradients[g], bytes[g], &det[g]));

    aotk_attn_params params = b.params;
    params.deterministic = 0;
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info);
    CHECK_MSG(status == AOTK_OK, "%s: %s", aotk_status_name(status), aotk_last_error());
    CHECK_MSG(strncmp(info.kernel_name, "attn_bwd_fused_hopper_fp16_d64_aligned_", 39) == 0, "kernel %s",
              info.kernel_name);
    CHECK(info.features & AOTK_FEATURE_NONDETERMINISTIC);
    CHECK(info.workspace_bytes == fused_workspace_bytes(b.workspace_bytes, B, HQ, SQ, D));
    CHECK(driver->cuMemAlloc(&workspace, info.workspace_bytes) == CUDA_SUCCESS);
    CHECK(driver->cuMemsetD8(workspace, 0xff, info.workspace_bytes) == CUDA_SUCCESS);
    poison_gradients(&b);
    status = aotk_attn_bwd(&params, (void *)(uintptr_t)workspace, b.workspace_bytes, (aotk_stream)stream);
    CHECK_MSG(status == AOTK_ERROR_WORKSPACE_TOO_SMALL, "the deterministic size: %s", aotk_status_name(status));
    CHECK(driver->cuStreamSynchronize(stream) == CUDA_SUCCESS);
    CHECK_MSG(count_poisoned(b.dq, b.q_bytes) == (int64_t)(b.q_bytes / 2), "a refused call wrote dq");

    /* Twice on a workspace full of NaN: the accumulator is cleared by the call itself. */
    for (int run = 0; run < 2; run++) {
      status = aotk_attn_bwd(&params, (void *)(uintptr_t)workspace, info.workspace_bytes, (aotk_stream)stream);
      CHECK_MSG(status == AOTK_OK, "%s: %s", aotk_status_name(status), aotk_last_error());
    }
    CHECK(driver->cuStreamSynchronize(stream) == CUDA_SUCCESS);
    for (int pass = 0; pass < 2; pass++) {
      for (int g = 0; g < 3; g++) {
        free(fused[g]);
        fused[g] = NULL;
        CHECK(download(gradients[g], bytes[g], &fused[g]));
      }
      if (!det[0] || !fused[0] || !det[1] || !fused[1] || !det[2] || !fused[2]) break;
      for (int g = 1; g < 3; g++) {
        CHECK_MSG(memcmp(det[g], fused[g], bytes[g]) == 0, "%s: %s differs from the deterministic run's",
                  pass ? "graph replay" : "direct call", names[g]);
      }
      /* dq: each element within 4 fp16 ulps of the deterministic run's, plus 2^-10 of its largest
       * magnitude (the two compute dS from S and S^T tiles, whose fp32 roundings differ). */
      int64_t far = 0, poisoned = 0;
      double worst = 0.0, largest = 0.0;
      for (size_t i = 0; i < bytes[0] / 2; i++) {
        const double y = fabs((double)aotk__fp16_to_float(det[0][i]));
        if (y > largest) largest = y;
      }
      for (size_t i = 0; i < bytes[0] / 2; i++) {
        poisoned += fused[0][i] == 0xffff;
        const double x = aotk__fp16_to_float(fused[0][i]), y = aotk__fp16_to_float(det[0][i]);
        const double diff = fabs(x - y);
        if (diff > worst) worst = diff;
        if (!(diff <= 4.0 * 0x1.0p-10 * fabs(y) + 0x1.0p-10 * largest)) far++;
      }
      CHECK_MSG(poisoned == 0 && far == 0, "%s: dq %lld elements poisoned, %lld beyond the bound (worst %g)",
                pass ? "graph replay" : "direct call", (long long)poisoned, (long long)far, worst);
      printf("    %s: dk, dv bitwise the deterministic run's; dq within %g of it\n",
             pass ? "graph replay" : "direct call", worst);
      if (pass == 1) break;
      /* The same call captured in a graph (memset, four kernels), replayed three times. */
      poison_gradients(&b);
      CHECK(driver->cuMemsetD8(workspace, 0xff, info.workspace_bytes) == CUDA_SUCCESS);
      CHECK(driver->cuCtxSynchronize() == CUDA_SUCCESS);
      CHECK(driver->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS);
      aotk_status captured = aotk_attn_bwd(&params, (void *)(uintptr_t)workspace, info.workspace_bytes,
                                           (aotk_stream)stream);
      CHECK(driver->cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
      CHECK_MSG(captured == AOTK_OK, "%s: %s", aotk_status_name(captured), aotk_last_error());
      CHECK(graph != NULL && driver->cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
      for (int replay = 0; exec != NULL && replay < 3; replay++) CHECK(driver->cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
      CHECK(driver->cuStreamSynchronize(stream) == CUDA_SUCCESS);
    }
  }
  if (exec) driver->cuGraphExecDestroy(exec);
  if (graph) driver->cuGraphDestroy(graph);
  if (workspace) driver->cuMemFree(workspace);
  for (int g = 0; g < 3; g++) {
    free(det[g]);
    free(fused[g]);
  }
  bwd_buffers_destroy(&b);
}

/* --- the features ------------------------------------------------------------------------------ */

/* One feature case. Heads with more than 1e5 (row, key) pairs compare 24 sampled rows of dq and key
 * rows of dk/dv per (sequence, head) (the statistics still cover every row), the others every element. */
static void feature_case(bwd_case *bc, aotk_dtype dtype, int64_t head_dim, int causal, int64_t seqlen_q,
                         int64_t seqlen_k, int64_t batch, int64_t heads_q, int64_t heads_kv, aotk__check_layout layout,
                         int mix_layouts, float softmax_scale, const aotk__check_features *features, int repeats,
                         int index, bool ptx) {
  fill_case(bc, dtype, head_dim, causal, seqlen_q, seqlen_k, batch, heads_q, heads_kv, layout, mix_layouts,
            softmax_scale, repeats, index, ptx);
  aotk__bwd_check_case *c = &bc->check;
  c->features = *features;
  bc->expect_aligned = aotk_gpu_test_expect_aligned(layout, head_dim, features);
  int64_t longest_q = seqlen_q, longest_k = seqlen_k;
  if (features->num_seqs > 0) {
    longest_q = longest_k = 0;
    for (int i = 0; i < features->num_seqs; i++) {
      if (features->seqlens_q[i] > longest_q) longest_q = features->seqlens_q[i];
      if (features->seqlens_k[i] > longest_k) longest_k = features->seqlens_k[i];
    }
  }
  c->rows_per_head = longest_q * longest_k > 100000 ? 24 : 0;
  char label[200], runs[24] = "", lengths[64] = "";
  aotk_gpu_test_feature_label(label, sizeof label, head_dim, features);
  if (repeats > 0) snprintf(runs, sizeof runs, " %d runs", repeats + 1);
  if (features->num_seqs == 0) {
    snprintf(lengths, sizeof lengths, " sq=%lld sk=%lld b=%lld", (long long)seqlen_q, (long long)seqlen_k,
             (long long)batch);
  }
  snprintf(bc->name, sizeof bc->name, "bwd %s%s d=%lld %s%s hq=%lld hkv=%lld %s%s%s%s%s%s", ptx ? "ptx sm_80 " : "",
           dtype_label(dtype), (long long)head_dim, causal ? "causal" : "full", lengths, (long long)heads_q,
           (long long)heads_kv, aotk__check_layout_name(layout), mix_layouts ? "+mixed" : "",
           softmax_scale != 0.0f ? " scale" : "", c->rows_per_head ? " sampled" : "", runs, label);
}

static void run_feature_case(bwd_case *bc) { aotk_test_run_with(bc->name, run_bwd_case, bc); }

/* The feature matrix (tests/aotk_feature_matrix.h), each case as a backward case. */
static void run_feature_spec(const aotk_feature_spec *spec, int index) {
  bwd_case bc;
  feature_case(&bc, spec->dtype, spec->head_dim, spec->causal, spec->seqlen_q, spec->seqlen_k, spec->batch,
               spec->heads_q, spec->heads_kv, spec->layout, spec->mix_layouts, spec->softmax_scale, &spec->features,
               spec->repeats, index, spec->ptx);
  run_feature_case(&bc);
}

/* The warp-specialized dK/dV pass (sm_90) where the main matrix is thin: both causal alignments with
 * unequal lengths (top-left with more keys than queries leaves keys no row sees: their dK and dV are
 * 0; bottom-right with more queries leaves rows that see no key), GQA and MQA, sinks with dsinks, and
 * key blocks that end mid-block; every case is held to the rule by run_bwd_case. */
static void hopper_section(int *index) {
  static const struct {
    aotk_dtype dtype;
    int64_t head_dim, batch, seqlen_q, seqlen_k, heads_q, heads_kv;
    int causal, top_left, sinks;
    int64_t head_dim_v; /* 0: head_dim */
  } cases[] = {
      {AOTK_DTYPE_BFLOAT16, 128, 2, 1000, 1500, 8, 2, 1, 1, 0, 0},
      {AOTK_DTYPE_FLOAT16, 64, 3, 777, 333, 8, 1, 0, 0, 0, 0},
      {AOTK_DTYPE_BFLOAT16, 64, 1, 1500, 1000, 4, 4, 1, 0, 0, 0},
      {AOTK_DTYPE_FLOAT16, 128, 2, 1000, 1000, 4, 2, 1, 0, 1, 0},
      {AOTK_DTYPE_BFLOAT16, 128, 1, 129, 4100, 16, 4, 0, 0, 1, 0},
      /* d=256: 64-key programs whose two warpgroups split dK and dV along d */
      {AOTK_DTYPE_BFLOAT16, 256, 2, 1000, 1500, 8, 2, 1, 1, 0, 0},
      {AOTK_DTYPE_FLOAT16, 256, 1, 777, 333, 4, 1, 0, 0, 1, 0},
      {AOTK_DTYPE_BFLOAT16, 256, 1, 1500, 1000, 4, 4, 1, 0, 0, 0},
      /* (192, 128): the same split programs with Q and K in three 64-column boxes */
      {AOTK_DTYPE_BFLOAT16, 192, 2, 1000, 1500, 8, 2, 1, 1, 0, 128},
      {AOTK_DTYPE_FLOAT16, 192, 1, 777, 333, 4, 1, 0, 0, 1, 128},
      {AOTK_DTYPE_BFLOAT16, 192, 1, 1500, 1000, 4, 4, 1, 0, 0, 128},
  };
  bwd_case bc;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aotk__check_features f;
    memset(&f, 0, sizeof f);
    f.top_left = cases[i].top_left;
    f.sinks = cases[i].sinks;
    f.head_dim_v = cases[i].head_dim_v;
    feature_case(&bc, cases[i].dtype, cases[i].head_dim, cases[i].causal, cases[i].seqlen_q, cases[i].seqlen_k,
                 cases[i].batch, cases[i].heads_q, cases[i].heads_kv, AOTK__LAYOUT_CONTIGUOUS, 0, 0.0f, &f, 0,
                 (*index)++, false);
    run_feature_case(&bc);
  }
}

/* The warp-specialized passes on the varlen layout (the packed tensors read as [1, total, heads * d]):
 * sequences of every kind of length (empty ones, one row, longer than a key block, queries without keys
 * and keys without queries), causal of both alignments and not, GQA, sinks with dsinks, at d=64, 128, 256,
 * each in both modes (deterministic 1: the dK/dV pass and the Triton dQ pass, with two repeats that must
 * reproduce the bits; 0: the fused pass and the cast); run_bwd_case holds each to the rule. */
static const int64_t varlen_long[][2] = {{1000, 1500}, {129, 0}, {0, 77}, {300, 4100}, {64, 64}};

static void varlen_hopper_section(int *index) {
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_BFLOAT16, AOTK_DTYPE_FLOAT16};
  static const int64_t head_dims[] = {64, 128, 256};
  bwd_case bc;
  for (int which = 0; which < 4; which++)
    for (int h = 0; h < 3; h++)
      for (int deterministic = 0; deterministic < 2; deterministic++) {
        aotk__check_features f;
        memset(&f, 0, sizeof f);
        if (which < 3) {
          set_varlen(&f, which + h);
        } else {
          aotk_gpu_test_set_seqlens(&f, varlen_long, 5);
        }
        f.top_left = which == 1;
        f.sinks = which == 2 && h == 1;
        const int causal = (which + h) % 2 == 0 || which == 1;
        feature_case(&bc, dtypes[(which + h + deterministic) % 2], head_dims[h], causal, 0, 0, 0, 8, 2,
                     AOTK__LAYOUT_CONTIGUOUS, 0, 0.0f, &f, deterministic && which == 0 ? 2 : 0, (*index)++, false);
        bc.check.deterministic = deterministic;
        strncat(bc.name, deterministic ? " deterministic" : " non-deterministic", sizeof bc.name - strlen(bc.name) - 1);
        run_feature_case(&bc);
      }
}

/* The warp-specialized passes with the features they took over from the Triton kernels: windows of
 * either side or both (either alignment, under causal or not, wider and narrower than a key block),
 * softcap and ALiBi (the EXTRAS rows; slopes per head or per sequence), each with softcap and ALiBi
 * together once, at d=64, 128, 256 and (192, 128), dense and varlen, in both modes (deterministic: two repeats that
 * must reproduce the bits). */
static void hopper_feature_section(int *index) {
  static const struct {
    int64_t head_dim, seqlen_q, seqlen_k;
    int causal, top_left;
    int32_t window_left, window_right;
    float softcap;
    int alibi, varlen;
    int64_t head_dim_v; /* 0: head_dim */
  } cases[] = {
      {128, 1000, 1000, 1, 0, 300, -1, 0.0f, 0, 0, 0},   {64, 777, 1500, 0, 0, 100, 100, 0.0f, 0, 0, 0},
      {128, 1500, 1000, 0, 1, 0, 65, 0.0f, 0, 0, 0},     {64, 1000, 1000, 0, 0, -1, 0, 0.0f, 0, 1, 0},
      {128, 1000, 1000, 0, 0, -1, -1, 30.0f, 0, 0, 0},   {64, 1000, 700, 1, 0, -1, -1, 0.0f, 1, 0, 0},
      {128, 513, 1025, 0, 0, 200, 30, 10.0f, 2, 0, 0},   {64, 0, 0, 1, 0, 64, -1, 20.0f, 2, 1, 0},
      {128, 0, 0, 0, 1, -1, -1, 0.0f, 1, 1, 0},      {256, 1000, 1000, 1, 0, 300, -1, 0.0f, 0, 0, 0},
      {256, 513, 1025, 0, 0, 200, 30, 10.0f, 2, 0, 0}, {256, 0, 0, 0, 1, -1, -1, 0.0f, 1, 1, 0},
      {192, 1000, 1000, 1, 0, 300, -1, 0.0f, 0, 0, 128}, {192, 513, 1025, 0, 0, 200, 30, 10.0f, 2, 0, 128},
      {192, 0, 0, 1, 0, -1, -1, 0.0f, 1, 1, 128},
  };
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_BFLOAT16, AOTK_DTYPE_FLOAT16};
  bwd_case bc;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int deterministic = 0; deterministic < 2; deterministic++) {
      aotk__check_features f;
      memset(&f, 0, sizeof f);
      if (cases[i].varlen) set_varlen(&f, (int)(i % 2));
      f.top_left = cases[i].top_left;
      f.window = cases[i].window_left >= 0 || cases[i].window_right >= 0;
      f.window_left = cases[i].window_left;
      f.window_right = cases[i].window_right;
      f.softcap = cases[i].softcap;
      f.alibi = cases[i].alibi;
      f.head_dim_v = cases[i].head_dim_v;
      feature_case(&bc, dtypes[(i + deterministic) % 2], cases[i].head_dim, cases[i].causal, cases[i].seqlen_q,
                   cases[i].seqlen_k, cases[i].varlen ? 0 : 2, 8, 2, AOTK__LAYOUT_CONTIGUOUS, 0, 0.0f, &f,
                   deterministic ? 1 : 0, (*index)++, false);
      bc.check.deterministic = deterministic;
      strncat(bc.name, deterministic ? " deterministic" : " non-deterministic", sizeof bc.name - strlen(bc.name) - 1);
      run_feature_case(&bc);
    }
}

/* Each case's choice was checked against the rule; this catches a rule that never fires on an H100. */
static void test_hopper_was_used(void) {
  printf("    cases whose dK/dV pass was the warp-specialized kernel: %d, %d of them fused with dQ (GPU sm_%d)\n",
         hopper_cases, fused_cases, compute_capability);
  if (compute_capability != 90) {
    TEST_SKIP("the warp-specialized dK/dV pass runs on sm_90 only");
    return;
  }
  CHECK_MSG(hopper_cases >= 20, "only %d cases ran the warp-specialized dK/dV pass", hopper_cases);
  CHECK_MSG(fused_cases >= 10 && hopper_cases - fused_cases >= 10,
            "%d cases ran the fused (non-deterministic) pass, %d the deterministic one", fused_cases,
            hopper_cases - fused_cases);
}

int main(void) {
  if (!aotk_gpu_test_setup()) return aotk_gpu_test_skip_all();
  RUN_TEST(test_query_on_device);
  RUN_TEST(test_workspace_refused);
  RUN_TEST(test_graph_capture);
  RUN_TEST(test_nondeterministic);

  static const int64_t lengths[] = {1, 17, 127, 128, 1000};
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_BFLOAT16, AOTK_DTYPE_FLOAT16};
  static const int64_t head_dims[] = {64, 128};
  uint64_t state = seed;
  int index = 0;
  bwd_case bc;
  for (int t = 0; t < 2; t++)
    for (int h = 0; h < 2; h++)
      for (int causal = 0; causal < 2; causal++)
        for (int i = 0; i < 5; i++)
          for (int j = 0; j < 5; j++) {
            make_case(&bc, dtypes[t], head_dims[h], causal, lengths[i], lengths[j], index++, &state, false);
            aotk_test_run_with(bc.name, run_bwd_case, &bc);
          }

  /* 4097 (a tail of one row past a power of two, and seqlen_k >= 4096, where the sm_90 d128 dK/dV pass
   * switches tiles) only in these few cases: a full 4097 x 4097 matrix costs the reference ~17 s of
   * CPU time per query head. */
  fill_case(&bc, AOTK_DTYPE_BFLOAT16, 128, 1, 4097, 4097, 1, 4, 1, AOTK__LAYOUT_CONTIGUOUS, 0, 0.0f, 0, index++, false);
  aotk_test_run_with(bc.name, run_bwd_case, &bc);
  fill_case(&bc, AOTK_DTYPE_FLOAT16, 128, 0, 128, 4097, 2, 8, 2, AOTK__LAYOUT_PADDED, 1, 0.0f, 0, index++, false);
  aotk_test_run_with(bc.name, run_bwd_case, &bc);
  fill_case(&bc, AOTK_DTYPE_BFLOAT16, 64, 0, 4097, 17, 3, 4, 4, AOTK__LAYOUT_PERMUTED, 1, 0.3f, 0, index++, false);
  aotk_test_run_with(bc.name, run_bwd_case, &bc);
  fill_case(&bc, AOTK_DTYPE_FLOAT16, 64, 1, 4097, 1000, 1, 8, 1, AOTK__LAYOUT_OFFSET, 0, 0.0f, 0, index++, false);
  aotk_test_run_with(bc.name, run_bwd_case, &bc);
  fill_case(&bc, AOTK_DTYPE_FLOAT16, 128, 1, 1, 4097, 4, 16, 2, AOTK__LAYOUT_CONTIGUOUS, 1, 0.0f, 0, index++, false);
  aotk_test_run_with(bc.name, run_bwd_case, &bc);

  /* Determinism: 5 runs each, bit for bit, on re-poisoned outputs (and compared with the reference). */
  fill_case(&bc, AOTK_DTYPE_BFLOAT16, 128, 1, 2048, 2048, 2, 16, 16, AOTK__LAYOUT_CONTIGUOUS, 0, 0.0f, 4, index++,
            false);
  aotk_test_run_with(bc.name, run_bwd_case, &bc);
  fill_case(&bc, AOTK_DTYPE_FLOAT16, 64, 0, 1000, 1000, 1, 8, 1, AOTK__LAYOUT_PADDED, 0, 0.0f, 4, index++, false);
  aotk_test_run_with(bc.name, run_bwd_case, &bc);
  fill_case(&bc, AOTK_DTYPE_BFLOAT16, 64, 1, 127, 1000, 2, 8, 2, AOTK__LAYOUT_PERMUTED, 1, 0.3f, 4, index++, false);
  aotk_test_run_with(bc.name, run_bwd_case, &bc);
  fill_case(&bc, AOTK_DTYPE_FLOAT16, 128, 0, 1000, 17, 3, 8, 2, AOTK__LAYOUT_OFFSET, 1, 0.0f, 4, index++, false);
  aotk_test_run_with(bc.name, run_bwd_case, &bc);

  /* The path GPUs newer than sm_90 take: the sm_80 PTX, JIT-compiled by the driver. */
  CHECK(aotk_set_image_policy(AOTK_IMAGE_POLICY_SM80_PTX) == AOTK_OK);
  static const int64_t ptx_lengths[][2] = {{17, 127}, {1000, 128}};
  for (int t = 0; t < 2; t++)
    for (int h = 0; h < 2; h++)
      for (int i = 0; i < 2; i++) {
        make_case(&bc, dtypes[t], head_dims[h], (t + h + i) % 2, ptx_lengths[i][0], ptx_lengths[i][1], index++, &state,
                  true);
        aotk_test_run_with(bc.name, run_bwd_case, &bc);
      }
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);

  aotk_feature_matrix(AOTK_MATRIX_BWD, &index, &state, run_feature_spec);
  hopper_section(&index);
  varlen_hopper_section(&index);
  hopper_feature_section(&index);
  RUN_TEST(test_hopper_was_used);

  printf("worst error as a fraction of its bound: bf16 %.3f, fp16 %.3f\n", worst_error_fraction[AOTK_DTYPE_BFLOAT16],
         worst_error_fraction[AOTK_DTYPE_FLOAT16]);
  printf("    bf16: %s\n    fp16: %s\n", worst_case[AOTK_DTYPE_BFLOAT16], worst_case[AOTK_DTYPE_FLOAT16]);
  driver->cuStreamDestroy(stream);
  return aotk_test_finish();
}
