/*
 * CPU tests of the public API, the sm_90 forward kernels: which calls take the TMA forward and the Gluon
 * (warp-specialized) forward, the tensor maps they encode (through a fake cuTensorMapEncodeTiled that
 * checks the driver's rules) and pass, their grids (persistent or one program a tile), and failing
 * encodes. The fake driver and the shared models are tests/api/api_*.h; see api_fake_driver.h.
 */
#include <math.h>

#include "api_launch_checks.h"

/* q, k and v as views of one packed qkv tensor [batch, seqlen, 3, heads, d] at FAKE_Q (MHA,
 * seqlen_q == seqlen_k): a token stride of 3 * heads * d. */
static aotk_attn_params packed_qkv_params(problem p) {
  aotk_attn_params params = params_for(p);
  const int64_t token = 3 * p.heads_q * p.head_dim, part_bytes = 2 * p.heads_q * p.head_dim;
  aotk_tensor *parts[3] = {&params.q, &params.k, &params.v};
  for (int i = 0; i < 3; i++) {
    parts[i]->data = byte_offset(FAKE_Q, (uintptr_t)(i * part_bytes));
    parts[i]->strides[0] = p.seqlen_q * token, parts[i]->strides[1] = token, parts[i]->strides[2] = p.head_dim;
  }
  return params;
}

/* ---- the sm_90 TMA forward ------------------------------------------------------------------ */

/* aotk_query and aotk_attn_fwd agree on which forward family runs `params` (`family`), and so does the
 * rule check_launch expects by (expected_fwd_family): the name, the feature bits, the launched .entry,
 * and the three encodes (none for the pointer kernel). */
static void check_fwd_family(const char *what, const aotk_attn_params *params, int family) {
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  reset_calls();
  aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
  if (status != AOTK_OK) return;
  const aotk__kernel_entry *row = table_row_named(info.kernel_name, info.arch);
  const uint32_t bits = AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED;
  CHECK_MSG(row != NULL && row->family == family && (info.features & bits) == fwd_family_features(family) &&
                fwd_family_of_name(info.kernel_name) == family,
            "%s: aotk_query names %s with features %#x; expected a %s kernel", what, info.kernel_name, info.features,
            kernel_signatures[fwd_kernel_id(family)].function);
  /* Softcap, ALiBi and dropout run in an EXTRAS row (the Gluon kernel's too), but for the Gluon forward's
   * dropout form, which carries dropout alone; anything else never does. */
  const bool extras = params->softcap > 0.0f || params->alibi_slopes.data != NULL ||
                      (params->dropout_p > 0.0f && family != AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT);
  CHECK_MSG(row == NULL || (bool)row->extras == extras, "%s: aotk_query names %s, expected %s EXTRAS row", what,
            info.kernel_name, extras ? "an" : "no");
  const int modelled = expected_fwd_family(params, info.arch, info.from_ptx, fake.max_shared_bytes);
  CHECK_MSG(modelled == family, "%s: the test's own rule says %s", what,
            kernel_signatures[fwd_kernel_id(modelled)].function);
  CHECK_MSG(fake.calls[CALL_cuTensorMapEncodeTiled] == 0, "%s: aotk_query encoded tensor maps", what);
  const int launches_before = fake.launches;
  reset_launch_log();
  status = aotk_attn_fwd(params, FAKE_STREAM);
  CHECK_MSG(status == AOTK_OK, "%s: aotk_attn_fwd %s (%s)", what, aotk_status_name(status), aotk_last_error());
  CHECK_MSG(fake.launches == launches_before + info.launches && fake.logged_launches >= 1 &&
                fake.launch_log[0].kernel == fwd_kernel_id(family),
            "%s: %d launches, the first of %s", what, fake.launches - launches_before,
            fake.logged_launches >= 1 ? kernel_signatures[fake.launch_log[0].kernel].function : "(none)");
  /* Q, K and V; the Gluon forward O's too (over v where out is not TMA-writable). */
  const int encodes = family == AOTK__FAMILY_ATTN_FWD ? 0 : TMA_DESCRIPTORS + family_is_hopper_fwd(family);
  CHECK_MSG(fake.encode_count == encodes, "%s: %d tensor maps encoded, expected %d", what, fake.encode_count, encodes);
}

/* Which calls take a TMA kernel (include/aotk.h, AOTK_FEATURE_TMA): on an sm_90 GPU running its cubins,
 * dense or varlen, aligned, each token's heads contiguous, head dims that have TMA kernels exactly. The
 * warp-specialized kernel ((64, 64), (128, 128), (192, 128) or (256, 256)) takes every call but dropout:
 * any window, sinks, and softcap and ALiBi in its EXTRAS rows; with three consumer warpgroups at d64 for
 * the plain forward without a mask. Dropout without softcap or ALiBi takes its dropout form at d64 and
 * d128 (dense or varlen); other dropout calls the Triton TMA kernel (dense, 128 or 256); any other call
 * the pointer kernel. */
static void test_tma_eligibility(void) {
  install_fake_gpu(90, SHARED_SM90);
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 2, 300, 400, 8, 2, 128, true, 0};
  aotk_attn_params params = params_for(d128);
  check_fwd_family("bf16 d128, dense, aligned, not causal (three warpgroups are d64 only)", &params,
                   AOTK__FAMILY_ATTN_FWD_HOPPER);
  problem p = d128;
  p.dtype = AOTK_DTYPE_FLOAT16, p.head_dim = 256, p.with_lse = false;
  params = params_for(p);
  check_fwd_family("fp16 d256, no lse", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p.heads_q);
  check_fwd_family("fp16 d256, no lse, ALiBi (the EXTRAS variant)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  dropout_on(&params, &p);
  check_fwd_family("fp16 d256, no lse, ALiBi and dropout", &params, AOTK__FAMILY_ATTN_FWD_TMA);
  params = params_for(p);
  dropout_on(&params, &p);
  check_fwd_family("fp16 d256, no lse, dropout", &params, AOTK__FAMILY_ATTN_FWD_TMA);
  params = params_for(d128);
  params.softcap = 30.0f;
  check_fwd_family("d128 softcap (the EXTRAS variant)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  dropout_on(&params, &d128);
  check_fwd_family("d128 softcap and dropout", &params, AOTK__FAMILY_ATTN_FWD_TMA);
  params = params_for(d128);
  params.causal = 1;
  check_fwd_family("d128 causal", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.causal_align = AOTK_ALIGN_TOP_LEFT;
  check_fwd_family("d128 causal top-left", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params = params_for(d128);
  params.window_right = 0;
  check_fwd_family("d128 window_right 0 alone (causal)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.window_right = 5;
  check_fwd_family("d128 window_right 5 alone", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.window_left = 16;
  check_fwd_family("d128 window (16, 5)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.causal_align = AOTK_ALIGN_TOP_LEFT;
  check_fwd_family("d128 window (16, 5) top-left", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params = params_for(d128);
  params.window_left = 64;
  check_fwd_family("d128 window_left 64 alone", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  dropout_on(&params, &d128);
  check_fwd_family("d128 window_left 64 and dropout (the Gluon forward's dropout form)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT);
  params = params_for(d128);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, d128.heads_q);
  check_fwd_family("d128 sinks (the warp-specialized kernel's epilogue)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.causal = 1;
  check_fwd_family("d128 causal sinks", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.softcap = 30.0f;
  check_fwd_family("d128 causal sinks and softcap (the EXTRAS variant)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.softcap = 0.0f, params.window_left = 64;
  check_fwd_family("d128 causal window sinks", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  dropout_on(&params, &d128);
  check_fwd_family("d128 causal window sinks dropout", &params, AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT);
  params = params_for(d128);
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, d128.heads_q);
  check_fwd_family("d128 ALiBi", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.causal = 1;
  check_fwd_family("d128 causal ALiBi", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);

  /* d64: the warp-specialized kernel with three consumer warpgroups for the plain forward (sinks or not)
   * without a mask from 2048 query rows on (max_seqlen_q for varlen), with two otherwise: under any
   * window (window_right 0 alone is the causal mask; a window wider than the sequence is a window still)
   * and with softcap or ALiBi (the EXTRAS rows). Dropout alone takes the Gluon forward's dropout form; the
   * Triton TMA kernel has no d64, so with dropout and softcap or ALiBi the pointer kernel runs. */
  const int wg3 = AOTK__FAMILY_ATTN_FWD_HOPPER_WG3, hopper = AOTK__FAMILY_ATTN_FWD_HOPPER;
  const problem d64 = {AOTK_DTYPE_BFLOAT16, 2, 2048, 2100, 8, 2, 64, true, 0};
  params = params_for(d64);
  check_fwd_family("d64 plain at 2048 rows, not causal (three warpgroups)", &params, wg3);
  params.causal_align = AOTK_ALIGN_TOP_LEFT;
  check_fwd_family("d64 not causal, causal_align top-left (no mask to align)", &params, wg3);
  p = d64;
  p.seqlen_q = 2047;
  params = params_for(p);
  check_fwd_family("d64 plain at 2047 rows, not causal (two warpgroups)", &params, hopper);
  p.seqlen_q = 300, p.seqlen_k = 400;
  params = params_for(p);
  check_fwd_family("d64 plain at 300 rows, not causal", &params, hopper);
  p = d64;
  p.seqlen_q = 16384, p.seqlen_k = 16384;
  params = params_for(p);
  check_fwd_family("d64 plain at 16384 rows, not causal", &params, wg3);
  params = params_for(d64);
  params.causal = 1;
  check_fwd_family("d64 causal (two warpgroups)", &params, hopper);
  params.causal_align = AOTK_ALIGN_TOP_LEFT;
  check_fwd_family("d64 causal top-left", &params, hopper);
  params = params_for(d64);
  params.window_right = 0;
  check_fwd_family("d64 window_right 0 alone (causal)", &params, hopper);
  params.causal = 1;
  check_fwd_family("d64 causal and window_right 0", &params, hopper);
  params = params_for(d64);
  params.softcap = 30.0f;
  check_fwd_family("d64 softcap at 2048 rows (two warpgroups, the EXTRAS variant)", &params, hopper);
  params.causal = 1;
  check_fwd_family("d64 causal softcap", &params, hopper);
  params = params_for(d64);
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, d64.heads_q);
  check_fwd_family("d64 ALiBi at 2048 rows", &params, hopper);
  params = params_for(d64);
  dropout_on(&params, &d64);
  check_fwd_family("d64 dropout (the Gluon forward's dropout form)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT);
  params.softcap = 30.0f;
  check_fwd_family("d64 dropout and softcap (the Triton TMA kernel has no d64)", &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(d64);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, d64.heads_q);
  check_fwd_family("d64 sinks at 2048 rows, not causal (three warpgroups)", &params, wg3);
  params.causal = 1;
  check_fwd_family("d64 causal sinks (two warpgroups)", &params, hopper);
  params.causal = 0, params.softcap = 30.0f;
  check_fwd_family("d64 sinks and softcap", &params, hopper);
  params = params_for(d64);
  params.window_left = 64;
  check_fwd_family("d64 window_left 64 alone at 2048 rows (two warpgroups)", &params, hopper);
  params = params_for(d64);
  params.window_right = 5;
  check_fwd_family("d64 window_right 5 alone", &params, hopper);
  params = params_for(d64);
  params.window_left = 20000, params.window_right = 20000;
  check_fwd_family("d64 window (20000, 20000), wider than the sequence", &params, hopper);
  params.causal_align = AOTK_ALIGN_TOP_LEFT;
  check_fwd_family("d64 window (20000, 20000) top-left", &params, hopper);
  p = d64;
  p.dtype = AOTK_DTYPE_FLOAT16, p.with_lse = false, p.heads_kv = p.heads_q, p.seqlen_k = p.seqlen_q;
  params = packed_qkv_params(p);
  check_fwd_family("fp16 d64 packed qkv, no lse", &params, wg3);
  params = varlen_params_for(d64, 3000, 3500, false);
  check_fwd_family("varlen d64 at max_seqlen_q 2048, not causal", &params, wg3);
  params.causal = 1;
  check_fwd_family("varlen d64 causal", &params, hopper);
  params = varlen_params_for(d64, 3000, 3500, false);
  params.window_right = 0;
  check_fwd_family("varlen d64 window_right 0 alone", &params, hopper);
  params = varlen_params_for(d64, 3000, 3500, false);
  params.max_seqlen_q = 2047;
  check_fwd_family("varlen d64 at max_seqlen_q 2047, not causal", &params, hopper);
  params = varlen_params_for(d64, 3000, 3500, false);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, d64.heads_q);
  check_fwd_family("varlen d64 sinks at max_seqlen_q 2048, not causal", &params, wg3);
  params.softcap = 30.0f;
  check_fwd_family("varlen d64 sinks and softcap", &params, hopper);
  params = varlen_params_for(d64, 3000, 3500, false);
  params.window_left = 128, params.window_right = 0;
  check_fwd_family("varlen d64 causal window", &params, hopper);
  params = varlen_params_for(d64, 3000, 3500, false);
  dropout_on(&params, &d64);
  check_fwd_family("varlen d64 dropout", &params, AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT);
  /* A GPU whose shared memory holds the two-warpgroup kernel's tile and not the three's. */
  const aotk__kernel_entry *wg3_row = expected_row(wg3, 90, d64.dtype, 64, 64, 1, 0, d64.seqlen_q);
  const aotk__kernel_entry *hopper_row = expected_row(hopper, 90, d64.dtype, 64, 64, 1, 0, d64.seqlen_q);
  CHECK_MSG(wg3_row != NULL && hopper_row != NULL && hopper_row->shared_bytes < wg3_row->shared_bytes,
            "d64: the three-warpgroup row %s, the two-warpgroup row %s", wg3_row ? wg3_row->name : "(none)",
            hopper_row ? hopper_row->name : "(none)");
  if (wg3_row != NULL && hopper_row != NULL) {
    install_fake_gpu(90, wg3_row->shared_bytes - 1);
    params = params_for(d64);
    check_fwd_family("d64 not causal, one byte short of three warpgroups' shared memory", &params, hopper);
    install_fake_gpu(90, SHARED_SM90);
  }
  params = params_for(d128);
  params.causal = 1, params.window_left = 64;
  check_fwd_family("d128 causal window", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params = params_for(d128);
  dropout_on(&params, &d128);
  params.dropout_mask = mask_for(&params);
  check_fwd_family("d128 dropout with its mask", &params, AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT);
  CHECK_MSG(fake.logged_launches == 2 && fake.launch_log[1].kernel == KERNEL_DROPOUT_MASK,
            "d128 dropout with its mask: %d launches", fake.logged_launches);
  params = params_for(d128);
  params.v.strides[1] = d128.heads_kv * d128.head_dim + 64, params.v.strides[0] = d128.seqlen_k * params.v.strides[1];
  check_fwd_family("v tokens 64 elements apart beyond their heads", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  p = d128;
  p.heads_kv = p.heads_q, p.seqlen_k = p.seqlen_q;
  params = packed_qkv_params(p);
  check_fwd_family("packed qkv", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  p = d128;
  p.batch = 1;
  params = params_for(p);
  params.q.strides[0] = 16; /* the one batch's stride is not used */
  check_fwd_family("batch 1, batch stride 16", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);

  /* (192, 128), DeepSeek's pair: a Gluon tile of its own, reached as its other pairs are. Q and K come
   * in three 64-column boxes each (the row's layout, which check_launch holds the encodes to; written
   * out here): [batch, seqlen, heads * 192] in boxes of 64 rows (one consumer warpgroup's) or 128 keys
   * by 64 columns; V [batch, seqlen_k, heads_kv * 128] in boxes of 128 keys by 64 columns; O [batch,
   * seqlen, heads * 128] in boxes of 64 rows by 64 columns (the kernel stores O by masked stores at this
   * pair, but the descriptor is there). */
  p = d128;
  p.head_dim = 192, p.head_dim_v = 128;
  params = params_for(p);
  check_fwd_family("head dims 192/128 (the Gluon kernel's own pair)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  {
    const encode_call *q_map = &fake.encodes[0], *k_map = &fake.encodes[1], *v_map = &fake.encodes[2];
    const encode_call *o_map = &fake.encodes[3];
    CHECK_MSG(fake.encode_count == 4 && q_map->dims[0] == 8 * 192 && q_map->box[0] == 64 && q_map->box[1] == 64 &&
                  k_map->dims[0] == 2 * 192 && k_map->box[0] == 64 && k_map->box[1] == 128 &&
                  v_map->dims[0] == 2 * 128 && v_map->box[0] == 64 && v_map->box[1] == 128 &&
                  o_map->dims[0] == 8 * 128 && o_map->box[0] == 64 && o_map->box[1] == 64,
              "head dims 192/128: %d maps; q {%llu, ...} box {%u, %u}, k {%llu, ...} box {%u, %u}, v {%llu, ...} "
              "box {%u, %u}",
              fake.encode_count, (unsigned long long)q_map->dims[0], q_map->box[0], q_map->box[1],
              (unsigned long long)k_map->dims[0], k_map->box[0], k_map->box[1], (unsigned long long)v_map->dims[0],
              v_map->box[0], v_map->box[1]);
  }
  check_launch("head dims 192/128", &params, &p);
  params.causal = 1, params.window_left = 100;
  check_fwd_family("head dims 192/128, causal window", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.softcap = 30.0f;
  check_fwd_family("head dims 192/128, causal window and softcap (the EXTRAS variant)", &params,
                   AOTK__FAMILY_ATTN_FWD_HOPPER);
  check_launch("head dims 192/128, causal window and softcap", &params, &p);
  params = params_for(p);
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p.heads_q);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
  check_fwd_family("head dims 192/128, ALiBi and sinks", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  dropout_on(&params, &p);
  check_fwd_family("head dims 192/128, ALiBi, sinks and dropout (the pointer kernel's 256/128: the Triton TMA "
                   "kernel has no 192)",
                   &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(p);
  make_heads_outer(&params.k);
  check_fwd_family("head dims 192/128, k heads outer", &params, AOTK__FAMILY_ATTN_FWD);
  params = varlen_params_for(p, 500, 700, false);
  check_fwd_family("varlen head dims 192/128", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  dropout_on(&params, &p);
  check_fwd_family("varlen head dims 192/128, dropout", &params, AOTK__FAMILY_ATTN_FWD);
  p.head_dim = 192, p.head_dim_v = 192;
  params = params_for(p);
  check_fwd_family("head dims 192/192 (no Gluon pair: the pointer kernel's 256)", &params, AOTK__FAMILY_ATTN_FWD);

  static const int64_t other_dims[][2] = {{32, 32}, {96, 96}, {120, 120}, {128, 64}, {256, 128}, {64, 128},
                                          {56, 56},  {184, 128}, {192, 120}};
  for (size_t i = 0; i < sizeof other_dims / sizeof other_dims[0]; i++) {
    p = d128;
    p.head_dim = other_dims[i][0], p.head_dim_v = other_dims[i][1];
    params = params_for(p);
    char what[64];
    snprintf(what, sizeof what, "head dims %lld/%lld", (long long)other_dims[i][0], (long long)other_dims[i][1]);
    check_fwd_family(what, &params, AOTK__FAMILY_ATTN_FWD);
  }
  params = varlen_params_for(d128, 500, 700, false);
  check_fwd_family("varlen d128 (the Gluon kernel takes the packed layout)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.causal = 1;
  check_fwd_family("varlen d128 causal", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.softcap = 30.0f;
  check_fwd_family("varlen d128 causal softcap (the EXTRAS variant)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.softcap = 0.0f;
  dropout_on(&params, &d128);
  check_fwd_family("varlen d128 causal dropout (the Gluon forward's dropout form takes varlen)", &params, AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT);
  params = varlen_params_for(d128, 500, 700, false);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, d128.heads_q);
  check_fwd_family("varlen d128 sinks", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.causal = 1;
  check_fwd_family("varlen d128 causal sinks", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.softcap = 30.0f;
  check_fwd_family("varlen d128 causal sinks and softcap", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.window_left = 100;
  check_fwd_family("varlen d128 causal window, sinks and softcap", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  dropout_on(&params, &d128);
  check_fwd_family("varlen d128 causal window, sinks, softcap and dropout (dense only)", &params,
                   AOTK__FAMILY_ATTN_FWD);
  params = varlen_params_for(d128, 500, 700, false);
  params.q.strides[1] = 3 * 128, params.q.strides[0] = 8 * 3 * 128; /* heads 3 * 128 apart: not one row */
  check_fwd_family("varlen d128, q's heads not contiguous", &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(d128);
  params.q.data = byte_offset(FAKE_Q, 2);
  check_fwd_family("q 2-byte aligned", &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(d128);
  params.out.data = byte_offset(FAKE_OUT, 8);
  check_fwd_family("out 8-byte aligned (the aligned kernels need all four)", &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(d128);
  make_heads_outer(&params.q);
  check_fwd_family("q heads outer (head stride != head_dim)", &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(d128);
  params.k.strides[2] = d128.head_dim + 16, params.k.strides[1] = d128.heads_kv * params.k.strides[2];
  params.k.strides[0] = d128.seqlen_k * params.k.strides[1];
  check_fwd_family("k heads 16 elements apart beyond head_dim", &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(d128);
  params.v.strides[1] = d128.head_dim; /* tokens overlap: a token's heads run into the next tokens */
  params.v.strides[0] = d128.seqlen_k * d128.heads_kv * d128.head_dim;
  check_fwd_family("v tokens overlapping", &params, AOTK__FAMILY_ATTN_FWD);
  params = params_for(d128);
  params.q.strides[0] = 16;
  check_fwd_family("batch 2, batches overlapping (batch stride 16)", &params, AOTK__FAMILY_ATTN_FWD);
  /* A single batch's stride is not used, but the alignment of every stride decides the kernel variant:
   * an odd one makes the problem unaligned, and unaligned problems take the pointer kernel. */
  p = d128;
  p.batch = 1;
  params = params_for(p);
  params.q.strides[0] = 7;
  check_fwd_family("batch 1, batch stride 7", &params, AOTK__FAMILY_ATTN_FWD);

  /* (The backward's dK/dV pass has its own rule: test_bwd_hopper_choice.) */

  /* sm_90 images only: the PTX policy, and any other GPU, run the pointer kernel. */
  CHECK(aotk_set_image_policy(AOTK_IMAGE_POLICY_SM80_PTX) == AOTK_OK);
  params = params_for(d128);
  check_fwd_family("sm_90 with AOTK_IMAGE_POLICY_SM80_PTX", &params, AOTK__FAMILY_ATTN_FWD);
  CHECK(aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO) == AOTK_OK);
  check_fwd_family("sm_90 again with AOTK_IMAGE_POLICY_AUTO", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  static const gpu others[] = {{80, SHARED_SM80, 80, 0}, {86, SHARED_SM86, 80, 0}, {100, SHARED_SM100, 80, 1},
                               {120, SHARED_SM120, 80, 1}};
  for (size_t g = 0; g < sizeof others / sizeof others[0]; g++) {
    install_fake_gpu(others[g].compute_capability, others[g].max_shared_bytes);
    char what[64];
    snprintf(what, sizeof what, "sm_%d, d128 dense aligned", others[g].compute_capability);
    params = params_for(d128);
    check_fwd_family(what, &params, AOTK__FAMILY_ATTN_FWD);
  }
  uninstall_fake_gpu();
}

/* The TMA forwards' arguments: the pointer kernel's forty, then each descriptor as encoded for q, k and
 * v (check_launch, check_tma_descriptors), for strided, packed and single-batch layouts, for the Triton
 * TMA kernel and the warp-specialized one. */
static void check_launch_of(const char *what, const aotk_attn_params *params, const problem *p, int family) {
  CHECK_MSG(expected_fwd_family(params, 90, false, fake.max_shared_bytes) == family, "%s: the case does not take %s",
            what, kernel_signatures[fwd_kernel_id(family)].function);
  check_launch(what, params, p);
}

static void test_tma_launch_arguments(void) {
  install_fake_gpu(90, SHARED_SM90);
  const int tma = AOTK__FAMILY_ATTN_FWD_TMA, hopper = AOTK__FAMILY_ATTN_FWD_HOPPER;
  const int wg3 = AOTK__FAMILY_ATTN_FWD_HOPPER_WG3;
  problem gqa = {AOTK_DTYPE_BFLOAT16, 3, 1500, 777, 12, 4, 128, true, 0};
  aotk_attn_params params = params_for(gqa);
  params.causal = 1;
  check_launch_of("warp-specialized bf16 d128 GQA causal, lse", &params, &gqa, hopper);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, gqa.heads_q);
  check_launch_of("warp-specialized bf16 d128 GQA causal, sinks", &params, &gqa, hopper);
  /* The sinks written out: FLAG_SINKS (32, kernels/attn_fwd_hopper.py) with the causal mask's bits, and
   * the pointer in attn_fwd's Sinks slot, which the Gluon kernel's arguments keep. */
  reset_launch_log();
  CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK && fake.logged_launches == 1);
  CHECK_MSG(fake.launch_log[0].kernel == KERNEL_ATTN_FWD_HOPPER &&
                arg_i32(&fake.launch_log[0], ARG_FLAGS) == (FLAG_WRITE_LSE | FLAG_SINKS | FLAG_REVERSE | FLAG_O_TMA) &&
                arg_pointer(&fake.launch_log[0], ARG_SINKS) == (uint64_t)(uintptr_t)FAKE_SINKS,
            "warp-specialized d128 sinks: %s, flags %#x, sinks %#llx; expected attn_fwd_hopper, %#x, %#llx",
            kernel_signatures[fake.launch_log[0].kernel].function, (unsigned)arg_i32(&fake.launch_log[0], ARG_FLAGS),
            (unsigned long long)arg_pointer(&fake.launch_log[0], ARG_SINKS),
            (unsigned)(FLAG_WRITE_LSE | FLAG_SINKS | FLAG_REVERSE | FLAG_O_TMA), (unsigned long long)(uintptr_t)FAKE_SINKS);
  /* A left window bound (wider than the query rows, so the size key stays seqlen_q) is the warp-specialized
   * kernel's too, in natural tile order (no FLAG_REVERSE); with dropout its dropout form runs it. */
  params.window_left = 2048;
  check_launch_of("warp-specialized bf16 d128 GQA causal, window_left 2048, sinks", &params, &gqa, hopper);
  dropout_on(&params, &gqa);
  check_launch_of("warp-specialized dropout bf16 d128 GQA causal, window_left 2048, sinks, dropout", &params, &gqa,
                  AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT);
  params.softcap = 30.0f;
  check_launch_of("TMA bf16 d128 GQA causal, window_left 2048, sinks, softcap, dropout", &params, &gqa, tma);

  problem long_q = {AOTK_DTYPE_FLOAT16, 2, 4097, 5000, 4, 4, 128, true, 0};
  params = params_for(long_q);
  params.v.strides[1] = long_q.heads_kv * long_q.head_dim + 32;
  params.v.strides[0] = long_q.seqlen_k * params.v.strides[1] + 1024;
  check_launch_of("warp-specialized fp16 d128 at 4097 rows, v tokens padded", &params, &long_q, hopper);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, long_q.heads_q);
  check_launch_of("warp-specialized fp16 d128 at 4097 rows, v tokens padded, sinks", &params, &long_q, hopper);
  /* Not causal: with window_right unbounded the size key is seqlen_q, whatever window_left is. */
  params.window_left = 1024;
  check_launch_of("warp-specialized fp16 d128 at 4097 rows, v tokens padded, window_left 1024, sinks", &params,
                  &long_q, hopper);
  dropout_on(&params, &long_q);
  check_launch_of("warp-specialized dropout fp16 d128 at 4097 rows, v tokens padded, window_left 1024, sinks, "
                  "dropout", &params, &long_q, AOTK__FAMILY_ATTN_FWD_HOPPER_DROPOUT);
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, long_q.heads_q);
  check_launch_of("TMA fp16 d128 at 4097 rows (the second config), v tokens padded, window_left 1024, sinks, ALiBi, "
                  "dropout", &params, &long_q, tma);

  problem d256 = {AOTK_DTYPE_BFLOAT16, 2, 333, 333, 4, 4, 256, false, 0};
  params = packed_qkv_params(d256);
  check_launch_of("warp-specialized bf16 d256 packed qkv, no lse", &params, &d256, hopper);
  params.softcap = 10.0f;
  check_launch_of("warp-specialized bf16 d256 packed qkv, no lse, softcap (the EXTRAS variant)", &params, &d256,
                  hopper);
  dropout_on(&params, &d256);
  check_launch_of("TMA bf16 d256 packed qkv, no lse, softcap, dropout", &params, &d256, tma);
  problem d64 = {AOTK_DTYPE_FLOAT16, 2, 333, 333, 4, 4, 64, true, 0};
  params = packed_qkv_params(d64);
  check_launch_of("two-warpgroup fp16 d64 packed qkv at 333 rows", &params, &d64, hopper);
  d64.seqlen_q = d64.seqlen_k = 2333;
  params = packed_qkv_params(d64);
  check_launch_of("three-warpgroup fp16 d64 packed qkv at 2333 rows", &params, &d64, wg3);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, d64.heads_q);
  check_launch_of("three-warpgroup fp16 d64 packed qkv at 2333 rows, sinks", &params, &d64, wg3);
  params.softcap = 30.0f;
  check_launch_of("two-warpgroup fp16 d64 packed qkv at 2333 rows, sinks and softcap (the EXTRAS variant)", &params,
                  &d64, hopper);
  dropout_on(&params, &d64);
  check_launch_of("pointer fp16 d64 packed qkv at 2333 rows, sinks, softcap and dropout", &params, &d64,
                  AOTK__FAMILY_ATTN_FWD);
  params = packed_qkv_params(d64);
  params.causal = 1;
  check_launch_of("two-warpgroup fp16 d64 packed qkv at 2333 rows, causal", &params, &d64, hopper);

  problem single = {AOTK_DTYPE_BFLOAT16, 1, 100, 130, 8, 2, 128, true, 0};
  params = params_for(single);
  params.q.strides[0] = 16, params.k.strides[0] = 48, params.v.strides[0] = 1u << 20;
  check_launch_of("warp-specialized batch 1 with batch strides 16, 48 and 2^20", &params, &single, hopper);
  params.softcap = 20.0f;
  check_launch_of("warp-specialized batch 1 with batch strides 16, 48 and 2^20, softcap", &params, &single, hopper);
  dropout_on(&params, &single);
  check_launch_of("TMA batch 1 with batch strides 16, 48 and 2^20, softcap, dropout", &params, &single, tma);

  params = params_for(gqa);
  params.softcap = 30.0f;
  dropout_on(&params, &gqa);
  params.dropout_mask = mask_for(&params);
  check_launch_of("TMA d128 softcap and dropout with its mask", &params, &gqa, tma);

  /* Varlen: the packed tensors as [1, total, heads * d] (batch 1, the whole packing as rows). */
  problem packed = {AOTK_DTYPE_BFLOAT16, 3, 200, 300, 8, 2, 128, true, 0};
  params = varlen_params_for(packed, 450, 700, false);
  check_launch_of("warp-specialized varlen", &params, &packed, hopper);
  params.causal = 1;
  params.causal_align = AOTK_ALIGN_TOP_LEFT;
  check_launch_of("warp-specialized varlen causal top-left", &params, &packed, hopper);
  params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, packed.heads_q);
  check_launch_of("warp-specialized varlen causal top-left, sinks", &params, &packed, hopper);
  packed.head_dim = 64, packed.seqlen_q = 2100, packed.seqlen_k = 2200;
  params = varlen_params_for(packed, 5000, 6000, false);
  check_launch_of("three-warpgroup varlen d64", &params, &packed, wg3);

  /* The three-warpgroup kernel's launch written out (the checks above hold it to the test's rules):
   * 192-row tiles, ceil(seqlen_q / 192) a head, so 11 for 2048 rows (the two-warpgroup kernel's would be
   * 16) and 22 for 4096 (32); one program per tile up to the 132 SMs, then 132 walking them all; 16 warps
   * (3 consumer warpgroups and the producer's, padded); Q's box one consumer warpgroup's 64 rows, K's
   * and V's the 128-key block, one batch deep. */
  static const struct {
    problem p;
    int64_t m_blocks, tiles, grid;
  } written[] = {
      {{AOTK_DTYPE_BFLOAT16, 1, 2048, 2048, 8, 8, 64, true, 0}, 11, 88, 88},
      {{AOTK_DTYPE_FLOAT16, 4, 4096, 4096, 16, 4, 64, false, 0}, 22, 1408, 132},
  };
  for (size_t i = 0; i < sizeof written / sizeof written[0]; i++) {
    const problem *w = &written[i].p;
    char what[96];
    snprintf(what, sizeof what, "three-warpgroup launch %zu (seqlen_q %lld)", i, (long long)w->seqlen_q);
    params = params_for(*w);
    check_launch_of(what, &params, w, wg3);
    reset_launch_log();
    CHECK_MSG(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK && fake.logged_launches == 1, "%s: %s", what,
              aotk_last_error());
    if (fake.logged_launches != 1) continue;
    const recorded_launch *launch = &fake.launch_log[0];
    CHECK_MSG(launch->kernel == KERNEL_ATTN_FWD_HOPPER_WG3 && launch->grid[0] == (unsigned)written[i].grid &&
                  launch->block[0] == 16 * 32 && arg_i32(launch, ARG_NUM_M_BLOCKS) == written[i].m_blocks &&
                  arg_i32(launch, HOPPER_ARG_NUM_TILES) == written[i].tiles,
              "%s: %s, grid %u, block %u, num_m_blocks %d, num_tiles %d; expected attn_fwd_hopper_wg3, %lld, 512, "
              "%lld, %lld",
              what, kernel_signatures[launch->kernel].function, launch->grid[0], launch->block[0],
              arg_i32(launch, ARG_NUM_M_BLOCKS), arg_i32(launch, HOPPER_ARG_NUM_TILES), (long long)written[i].grid,
              (long long)written[i].m_blocks, (long long)written[i].tiles);
    CHECK_MSG(fake.encode_count == TMA_DESCRIPTORS + 1 && fake.encodes[0].box[1] == 64 &&
                  fake.encodes[1].box[1] == 128 && fake.encodes[2].box[1] == 128 && fake.encodes[3].box[1] == 64 &&
                  fake.encodes[0].box[2] == 1 && fake.encodes[1].box[2] == 1 && fake.encodes[2].box[2] == 1 &&
                  fake.encodes[3].box[2] == 1,
              "%s: %d maps, boxes of %u, %u, %u and %u rows (expected 64, 128, 128, 64)", what, fake.encode_count,
              fake.encodes[0].box[1], fake.encodes[1].box[1], fake.encodes[2].box[1], fake.encodes[3].box[1]);
  }
  uninstall_fake_gpu();
}

/* The persistent forward's grid, on shapes of the benchmark's grid (16k tokens, 2048 channels) and
 * others: check_launch holds aotk_query's grid and the launch to expected_hopper_grid, and here the
 * figures are written out (from a separate model of the rule) so that both branches are seen taken. */
static void test_hopper_grid(void) {
  install_fake_gpu(90, SHARED_SM90);
  enum { TWO = AOTK__FAMILY_ATTN_FWD_HOPPER, THREE = AOTK__FAMILY_ATTN_FWD_HOPPER_WG3 }; /* warpgroups */
  static const struct {
    problem p;
    int causal;
    int64_t grid;
    int family;
  } cases[] = {
      {{AOTK_DTYPE_BFLOAT16, 4, 4096, 4096, 16, 16, 128, true, 0}, 0, 132, TWO},    /* 2048 tiles */
      {{AOTK_DTYPE_BFLOAT16, 4, 4096, 4096, 16, 16, 128, true, 0}, 1, 132, TWO},    /* balanced enough */
      {{AOTK_DTYPE_BFLOAT16, 1, 8192, 8192, 16, 16, 128, true, 0}, 1, 1024, TWO},   /* too unequal: per tile */
      {{AOTK_DTYPE_BFLOAT16, 1, 16384, 16384, 16, 16, 128, true, 0}, 1, 2048, TWO}, /* too unequal: per tile */
      {{AOTK_DTYPE_BFLOAT16, 1, 16384, 16384, 16, 16, 128, true, 0}, 0, 132, TWO},  /* not causal */
      {{AOTK_DTYPE_FLOAT16, 1, 16384, 16384, 32, 32, 64, true, 0}, 1, 132, TWO},    /* 4096 tiles */
      {{AOTK_DTYPE_FLOAT16, 1, 16384, 16384, 32, 32, 64, true, 0}, 0, 132, THREE},  /* 86 * 32 = 2752 tiles */
      {{AOTK_DTYPE_BFLOAT16, 1, 2048, 2048, 8, 8, 64, true, 0}, 0, 88, THREE},      /* 11 * 8 (two: 16 * 8) */
      {{AOTK_DTYPE_BFLOAT16, 1, 2048, 2048, 8, 8, 64, true, 0}, 1, 128, TWO},       /* causal: 16 * 8 */
      {{AOTK_DTYPE_BFLOAT16, 1, 2047, 2047, 8, 8, 64, true, 0}, 0, 128, TWO},       /* short of 2048 rows */
      {{AOTK_DTYPE_BFLOAT16, 2, 8192, 8192, 8, 8, 256, true, 0}, 1, 1024, TWO},     /* 64-key blocks */
      {{AOTK_DTYPE_BFLOAT16, 1, 200, 200, 8, 8, 128, true, 0}, 1, 16, TWO},         /* fewer tiles than SMs */
      {{AOTK_DTYPE_BFLOAT16, 32, 8192, 8192, 32, 8, 128, false, 0}, 1, 132, TWO},   /* 65536 tiles: rounds average */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aotk_attn_params params = params_for(cases[i].p);
    params.causal = cases[i].causal;
    char what[96];
    snprintf(what, sizeof what, "persistent grid case %zu (causal %d)", i, cases[i].causal);
    check_launch_of(what, &params, &cases[i].p, cases[i].family);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
    CHECK_MSG(info.grid == cases[i].grid, "%s: grid %lld, expected %lld", what, (long long)info.grid,
              (long long)cases[i].grid);
  }
  /* Windows make tiles unequal too: a tile costs the key blocks some row of it sees, counted from its
   * first key in the plain rows, from the block boundary at or below it in the EXTRAS rows
   * (src/attn/aotk_attn.c tile_key_blocks). A right bound alone
   * runs a head's last query block first, as causal does; any other window runs the tiles in order. */
  static const struct {
    problem p;
    int32_t window_left, window_right;
    aotk_align causal_align;
    int64_t grid;
    int softcap; /* 1: softcap 30 (the EXTRAS rows) */
  } windows[] = {
      /* A sliding causal window: the first 8 query blocks see fewer keys, 9% over the mean. */
      {{AOTK_DTYPE_BFLOAT16, 1, 8192, 8192, 16, 16, 128, true, 0}, 1024, 0, AOTK_ALIGN_BOTTOM_RIGHT, 1024, 0},
      /* A left bound alone: the early query blocks see every key, the late ones 9 blocks. */
      {{AOTK_DTYPE_BFLOAT16, 1, 8192, 8192, 16, 16, 128, true, 0}, 1024, -1, AOTK_ALIGN_BOTTOM_RIGHT, 1024, 0},
      /* A band: only the tiles at either end are shorter, 3% over. */
      {{AOTK_DTYPE_BFLOAT16, 1, 16384, 16384, 16, 16, 128, true, 0}, 2048, 2048, AOTK_ALIGN_BOTTOM_RIGHT, 132, 0},
      /* Wider than the sequence: every tile walks every key. */
      {{AOTK_DTYPE_BFLOAT16, 1, 8192, 8192, 16, 16, 128, true, 0}, 100000, -1, AOTK_ALIGN_BOTTOM_RIGHT, 132, 0},
      /* The diagonal: one key block a tile. */
      {{AOTK_DTYPE_BFLOAT16, 1, 8192, 8192, 16, 16, 128, true, 0}, 0, 0, AOTK_ALIGN_BOTTOM_RIGHT, 132, 0},
      /* Top-left with twice as many keys as query rows: no row sees the keys past 5120, 10% over. */
      {{AOTK_DTYPE_BFLOAT16, 1, 4096, 8192, 16, 16, 128, true, 0}, 1024, 1024, AOTK_ALIGN_TOP_LEFT, 512, 0},
      /* Causal as window_right 0: the last query block first balances 2592 tiles on 132 programs (in order
       * they would take one program each). */
      {{AOTK_DTYPE_BFLOAT16, 3, 3333, 3333, 32, 32, 128, true, 0}, -1, 0, AOTK_ALIGN_BOTTOM_RIGHT, 132, 0},
      /* A right bound alone, top-left: causal-like, the last query block first. */
      {{AOTK_DTYPE_BFLOAT16, 1, 3000, 3000, 16, 16, 128, true, 0}, -1, 700, AOTK_ALIGN_TOP_LEFT, 384, 0},
      /* A left bound alone runs in order, the first query blocks (which see every key) first: too
       * unequal, one program per tile; the same tiles last block first would balance on 132. */
      {{AOTK_DTYPE_BFLOAT16, 1, 4096, 4096, 24, 24, 128, true, 0}, 1000, -1, AOTK_ALIGN_BOTTOM_RIGHT, 768, 0},
      /* A narrow band: a tile's keys [m0 - 64, m0 + 191] span 2 blocks counted from the first key (3 from
       * the boundary below it, where the middle tiles would cost 4 and the first and last 3, and one
       * program per tile would run): every tile costs 3, and 132 programs do. */
      {{AOTK_DTYPE_BFLOAT16, 1, 1000, 1000, 32, 32, 128, true, 0}, 64, 64, AOTK_ALIGN_BOTTOM_RIGHT, 132, 0},
      /* The same band with softcap: the EXTRAS rows count from the block boundary, one program per tile. */
      {{AOTK_DTYPE_BFLOAT16, 1, 1000, 1000, 32, 32, 128, true, 0}, 64, 64, AOTK_ALIGN_BOTTOM_RIGHT, 256, 1},
  };
  for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
    aotk_attn_params params = params_for(windows[i].p);
    params.window_left = windows[i].window_left, params.window_right = windows[i].window_right;
    params.causal_align = windows[i].causal_align;
    if (windows[i].softcap) params.softcap = 30.0f;
    char what[96];
    snprintf(what, sizeof what, "persistent grid, window (%d, %d)%s%s", windows[i].window_left,
             windows[i].window_right, windows[i].causal_align == AOTK_ALIGN_TOP_LEFT ? " top-left" : "",
             windows[i].softcap ? " softcap" : "");
    check_launch_of(what, &params, &windows[i].p, TWO);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
    CHECK_MSG(info.grid == windows[i].grid, "%s: grid %lld, expected %lld", what, (long long)info.grid,
              (long long)windows[i].grid);
  }
  uninstall_fake_gpu();
}

/* A tensor map that fails to encode fails the call with AOTK_ERROR_CUDA naming the tensor, before
 * anything is launched (the dropout-mask kernel neither); the next call, with the driver well again,
 * runs whole. For the Triton TMA kernel (with softcap, dropout and its mask) and the warp-specialized one. */
static void test_tma_encode_failure(void) {
  static const char *const names[4] = {"cuTensorMapEncodeTiled(q)", "cuTensorMapEncodeTiled(k)",
                                       "cuTensorMapEncodeTiled(v)", "cuTensorMapEncodeTiled(out)"};
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 2, 300, 400, 8, 2, 128, true, 0};
  for (int hopper = 0; hopper <= 1; hopper++)
    for (int failing = 1; failing <= 3 + hopper; failing++) { /* the Gluon forward encodes out's too */
      install_fake_gpu(90, SHARED_SM90);
      aotk_attn_params params = params_for(d128);
      if (!hopper) { /* softcap and dropout: the Triton TMA kernel (dropout alone takes the Gluon one) */
        params.softcap = 30.0f;
        dropout_on(&params, &d128);
        params.dropout_mask = mask_for(&params);
      }
      const int family = hopper ? AOTK__FAMILY_ATTN_FWD_HOPPER : AOTK__FAMILY_ATTN_FWD_TMA;
      CHECK(expected_fwd_family(&params, 90, false, fake.max_shared_bytes) == family);
      fake.encode_result = CUDA_ERROR_INVALID_VALUE;
      fake.fail_encode_call = failing;
      reset_calls();
      reset_launch_log();
      aotk_status status = aotk_attn_fwd(&params, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA, "%s, encode %d failing: %s, expected AOTK_ERROR_CUDA",
                hopper ? "hopper" : "tma", failing, aotk_status_name(status));
      CHECK_MSG(message_mentions(names[failing - 1]) && message_mentions(injected_error_name),
                "encode %d failing: the message \"%s\" does not name %s and the error", failing, aotk_last_error(),
                names[failing - 1]);
      CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 0 && fake.launches == 0, "encode %d failing: %d launches", failing,
                fake.calls[CALL_cuLaunchKernel]);
      CHECK_MSG(fake.calls[CALL_cuTensorMapEncodeTiled] == failing, "encode %d failing: %d encodes tried", failing,
                fake.calls[CALL_cuTensorMapEncodeTiled]);
      fake.encode_result = CUDA_SUCCESS;
      reset_launch_log();
      CHECK(aotk_attn_fwd(&params, FAKE_STREAM) == AOTK_OK);
      CHECK_MSG(fake.launches == 2 - hopper && fake.launch_log[0].kernel == fwd_kernel_id(family) &&
                    fake.encode_count == TMA_DESCRIPTORS + hopper,
                "after encode %d failed: %d launches, %d encodes", failing, fake.launches, fake.encode_count);
      CHECK(aotk_last_error()[0] == '\0');
    }
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_tma_eligibility);
  RUN_TEST(test_tma_launch_arguments);
  RUN_TEST(test_hopper_grid);
  RUN_TEST(test_tma_encode_failure);
  aotk__driver_set_for_testing(NULL);
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);
  return aotk_test_finish();
}
