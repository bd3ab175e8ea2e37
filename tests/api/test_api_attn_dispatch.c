/*
 * CPU tests of the public API, which attention kernel runs: the target per compute
 * capability, the alignment and tuning choices (windows included), and on sm_90 the TMA forward and the
 * Gluon (warp-specialized) forward and backward: which calls take them, the tensor maps they encode
 * (through a fake cuTensorMapEncodeTiled that checks the driver's rules) and pass, their grids, the
 * non-deterministic backward's accumulator, and failing encodes.
 * The fake driver and the shared models are tests/api/api_*.h; see api_fake_driver.h.
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

static void expected_bwd_rows(int arch, const problem *p, int aligned, const aotk__kernel_entry *rows[3]) {
  expected_bwd_rows_extras(arch, p, aligned, 0, rows);
}

/* ---- dispatch ------------------------------------------------------------------------------- */

static void test_arch_choice(void) {
  static const gpu gpus[] = {
      {80, SHARED_SM80, 80, 0},  {86, SHARED_SM86, 80, 0},  {89, SHARED_SM86, 80, 0},
      {90, SHARED_SM90, 90, 0},  {100, SHARED_SM100, 80, 1}, {120, SHARED_SM120, 80, 1},
  };
  for (size_t i = 0; i < sizeof gpus / sizeof gpus[0]; i++) {
    install_fake_gpu(gpus[i].compute_capability, gpus[i].max_shared_bytes);
    for (int head_dim = 64; head_dim <= 128; head_dim += 64) {
      problem p = default_problem;
      p.head_dim = head_dim;
      aotk_attn_params params = params_for(p);
      aotk_kernel_info info;
      poison_info(&info);
      aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
      CHECK_MSG(status == AOTK_OK, "cc %d: %s (%s)", gpus[i].compute_capability, aotk_status_name(status),
                aotk_last_error());
      CHECK_MSG(info.arch == gpus[i].arch && info.from_ptx == gpus[i].from_ptx,
                "cc %d d%d: arch %d from_ptx %d, expected arch %d from_ptx %d", gpus[i].compute_capability, head_dim,
                info.arch, info.from_ptx, gpus[i].arch, gpus[i].from_ptx);
      char sm[32];
      snprintf(sm, sizeof sm, "cc %d d%d", gpus[i].compute_capability, head_dim);
      check_launch(sm, &params, &p);
    }
    CHECK_MSG(gpus[i].from_ptx ? fake.loaded_elf == 0 : fake.loaded_ptx == 0,
              "cc %d: loaded %d ELF and %d PTX images", gpus[i].compute_capability, fake.loaded_elf, fake.loaded_ptx);
  }
  uninstall_fake_gpu();
}

static bool query_aligned(const char *what, const aotk_attn_params *params, int expected_aligned) {
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, params, &info);
  CHECK_MSG(status == AOTK_OK, "%s: %s (%s)", what, aotk_status_name(status), aotk_last_error());
  const char *tag = expected_aligned ? "_aligned_" : "_any_";
  bool ok = status == AOTK_OK && info.aligned == expected_aligned && strstr(info.kernel_name, tag) != NULL;
  CHECK_MSG(ok, "%s: picked %s (aligned %d), expected a%s kernel", what, info.kernel_name, info.aligned, tag);
  return ok;
}

static void test_alignment_choice(void) {
  install_fake_gpu(90, SHARED_SM90);
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};
  for (int d = 0; d < 2; d++) {
    for (int head_dim = 64; head_dim <= 128; head_dim += 64) {
      problem p = default_problem;
      p.dtype = dtypes[d];
      p.head_dim = head_dim;
      aotk_attn_params params = params_for(p);
      query_aligned("16-byte aligned, strides multiples of 16", &params, 1);

      params = params_for(p);
      params.q.data = byte_offset(FAKE_Q, 2); /* one element in */
      query_aligned("q one element past 16-byte alignment", &params, 0);

      params = params_for(p);
      params.k.data = byte_offset(FAKE_K, 8); /* 8-byte aligned only */
      query_aligned("k 8-byte aligned", &params, 0);

      params = params_for(p);
      params.out.strides[1] = p.heads_q * p.head_dim + 1; /* rows padded by one element */
      params.out.strides[0] = p.seqlen_q * params.out.strides[1];
      query_aligned("out rows padded to an odd stride", &params, 0);

      params = params_for(p);
      params.v.strides[2] = p.head_dim + 8; /* heads padded by 8 elements */
      params.v.strides[1] = p.heads_kv * params.v.strides[2];
      params.v.strides[0] = p.seqlen_k * params.v.strides[1];
      query_aligned("v heads padded by 8 elements", &params, 0);

      params = params_for(p);
      params.lse.data = byte_offset(FAKE_LSE, 4); /* lse is not read by the aligned loads */
      query_aligned("lse only 4-byte aligned", &params, 1);
    }
  }
  uninstall_fake_gpu();
}

/* The forward's tuning, checked at every bound of every variant and on either side of it, with the
 * expectation read from the table rows (expected_row) rather than written down here: the pointer kernel's
 * with q laid out heads-outer (which TMA cannot read, so sm_90 runs it too), and on sm_90 the TMA
 * kernel's with contiguous tensors. */

/* The sizes at which to probe a variant's tuning choice: 1, each row's bound and its neighbours, and
 * one far beyond the largest bound. Returns how many were written (at most 31) and sets *bounds to
 * the number of table rows of the variant. */
static int tuning_probe_sizes(int family, int arch, aotk_dtype dtype, int head_dim, int aligned, int extras,
                              int64_t sizes[32], int *bounds) {
  int qk, v;
  compiled_dims(family, head_dim, head_dim, &qk, &v);
  int count = 0;
  int32_t largest_bound = 1;
  sizes[count++] = 1;
  *bounds = 0;
  for (int i = 0; i < aotk__kernel_count && count < 28; i++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[i];
    if (!row_is_variant(e, family, arch, dtype, qk, v, aligned, extras)) continue;
    (*bounds)++;
    if (e->min_seqlen > largest_bound) largest_bound = e->min_seqlen;
    if (e->min_seqlen > 1) sizes[count++] = e->min_seqlen - 1;
    sizes[count++] = e->min_seqlen;
    sizes[count++] = e->min_seqlen + 1;
  }
  sizes[count++] = (int64_t)largest_bound * 8 + 3;
  return count;
}

static void test_tuning_choice(void) {
  static const gpu gpus[] = {{80, SHARED_SM80, 80, 0}, {90, SHARED_SM90, 90, 0}};
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};
  int queries = 0;
  for (int g = 0; g < 2; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (int d = 0; d < 2; d++)
      for (int head_dim = 64; head_dim <= 128; head_dim += 64)
        for (int aligned = 0; aligned <= 1; aligned++)
        for (int extras = 0; extras <= 1; extras++) { /* the EXTRAS variant: softcap on */
          /* The seqlens to try: 1, each bound and its neighbours, and one far beyond the last. */
          int64_t seqlens[32];
          int bounds = 0;
          int count = tuning_probe_sizes(AOTK__FAMILY_ATTN_FWD, gpus[g].arch, dtypes[d], head_dim, aligned, extras,
                                         seqlens, &bounds);
          /* The catalog tunes every variant by size: a second config must exist, or this proves nothing. */
          CHECK_MSG(bounds >= 2, "sm_%d dtype %d d%d aligned %d extras %d: %d configs", gpus[g].arch, (int)dtypes[d],
                    head_dim, aligned, extras, bounds);

          const aotk__kernel_entry *previous = NULL;
          int changes = 0;
          for (int s = 0; s < count; s++) {
            problem p = default_problem;
            p.dtype = dtypes[d];
            p.head_dim = head_dim;
            p.seqlen_q = seqlens[s];
            aotk_attn_params params = params_for(p);
            make_heads_outer(&params.q);
            if (!aligned) params.q.data = byte_offset(FAKE_Q, 2);
            if (extras) params.softcap = 30.0f;
            const aotk__kernel_entry *expected = expected_row(AOTK__FAMILY_ATTN_FWD, gpus[g].arch, dtypes[d], head_dim,
                                                              head_dim, aligned, extras, seqlens[s]);
            aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
            aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
            queries++;
            CHECK_MSG(status == AOTK_OK && expected != NULL && strcmp(info.kernel_name, expected->name) == 0 &&
                          info.arch == gpus[g].arch && info.block_m == expected->block_m,
                      "sm_%d seqlen_q %lld: %s picked %s (block_m %d), expected %s", gpus[g].arch,
                      (long long)seqlens[s], aotk_status_name(status), info.kernel_name, info.block_m,
                      expected ? expected->name : "(none)");
            CHECK_MSG(info.grid == (seqlens[s] + info.block_m - 1) / info.block_m * p.batch * p.heads_q,
                      "seqlen_q %lld: grid %lld", (long long)seqlens[s], (long long)info.grid);
            changes += previous != NULL && expected != previous;
            previous = expected;
          }
          CHECK_MSG(changes >= 1, "sm_%d d%d: the config never changes with seqlen_q", gpus[g].arch, head_dim);
        }
  }
  /* The TMA kernel (sm_90, aligned, exact head dims), the same rule over its own rows. They are all
   * EXTRAS: the warp-specialized kernel takes every call but dropout, so dropout is what reaches this one
   * (no window, so the size key is seqlen_q, src/attn/aotk_attn.c fwd_size_key), and a row without EXTRAS
   * would be dead weight in the library. */
  install_fake_gpu(90, SHARED_SM90);
  int tma_variants_tuned_by_size = 0;
  for (int d = 0; d < 2; d++)
    for (int head_dim = 128; head_dim <= 256; head_dim += 128) {
      int64_t seqlens[32];
      int bounds = 0;
      tuning_probe_sizes(AOTK__FAMILY_ATTN_FWD_TMA, 90, dtypes[d], head_dim, 1, 0, seqlens, &bounds);
      CHECK_MSG(bounds == 0, "TMA dtype %d d%d: %d rows without EXTRAS, which no call reaches", (int)dtypes[d],
                head_dim, bounds);
      int count = tuning_probe_sizes(AOTK__FAMILY_ATTN_FWD_TMA, 90, dtypes[d], head_dim, 1, 1, seqlens, &bounds);
      CHECK_MSG(bounds >= 1, "TMA dtype %d d%d: no EXTRAS row", (int)dtypes[d], head_dim);
      tma_variants_tuned_by_size += bounds >= 2;
      const aotk__kernel_entry *previous = NULL;
      int changes = 0;
      for (int s = 0; s < count; s++) {
        problem p = default_problem;
        p.dtype = dtypes[d];
        p.head_dim = head_dim;
        p.seqlen_q = seqlens[s];
        aotk_attn_params params = params_for(p);
        set_dropout(&params);
        const aotk__kernel_entry *expected =
            expected_row(AOTK__FAMILY_ATTN_FWD_TMA, 90, dtypes[d], head_dim, head_dim, 1, 1, seqlens[s]);
        aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
        aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
        queries++;
        CHECK_MSG(status == AOTK_OK && expected != NULL && strcmp(info.kernel_name, expected->name) == 0 &&
                      info.block_m == expected->block_m && (info.features & AOTK_FEATURE_TMA) != 0,
                  "TMA d%d seqlen_q %lld: %s picked %s (block_m %d), expected %s", head_dim, (long long)seqlens[s],
                  aotk_status_name(status), info.kernel_name, info.block_m, expected ? expected->name : "(none)");
        CHECK_MSG(info.grid == (seqlens[s] + info.block_m - 1) / info.block_m * p.batch * p.heads_q,
                  "TMA seqlen_q %lld: grid %lld", (long long)seqlens[s], (long long)info.grid);
        changes += previous != NULL && expected != previous;
        previous = expected;
        /* Without dropout, a left window bound or softcap takes the warp-specialized kernel's row for the
         * same size (its EXTRAS one with softcap). */
        for (int extras = 0; extras <= 1; extras++) {
          aotk_attn_params without_dropout = params_for(p);
          if (extras) {
            without_dropout.softcap = 30.0f;
          } else {
            without_dropout.window_left = 64;
          }
          const aotk__kernel_entry *gluon =
              expected_row(AOTK__FAMILY_ATTN_FWD_HOPPER, 90, dtypes[d], head_dim, head_dim, 1, extras, seqlens[s]);
          aotk_kernel_info gluon_info = AOTK_KERNEL_INFO_INIT;
          status = aotk_query(AOTK_OP_ATTN_FWD, &without_dropout, &gluon_info);
          queries++;
          CHECK_MSG(status == AOTK_OK && gluon != NULL && strcmp(gluon_info.kernel_name, gluon->name) == 0,
                    "d%d seqlen_q %lld %s: %s picked %s, expected %s", head_dim, (long long)seqlens[s],
                    extras ? "softcap" : "window_left 64", aotk_status_name(status), gluon_info.kernel_name,
                    gluon ? gluon->name : "(none)");
        }
      }
      CHECK_MSG(bounds < 2 || changes >= 1, "TMA d%d: the config never changes with seqlen_q", head_dim);
    }
  CHECK_MSG(tma_variants_tuned_by_size > 0 || aotk__kernel_filter[0] != '\0', "no TMA variant is tuned by size");
  printf("    %d queries\n", queries);
  /* The catalog's tuning table in words: up to 1024 query rows, a smaller tile than beyond. */
  for (int g = 0; g < 2; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (int head_dim = 64; head_dim <= 128; head_dim += 64) {
      int32_t block_m[2] = {0, 0};
      for (int longer = 0; longer <= 1; longer++) {
        problem p = default_problem;
        p.head_dim = head_dim;
        p.seqlen_q = longer ? 1025 : 1024;
        aotk_attn_params params = params_for(p);
        make_heads_outer(&params.q);
        aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
        CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK);
        block_m[longer] = info.block_m;
      }
      CHECK_MSG(block_m[0] < block_m[1], "sm_%d d%d: block_m %d at seqlen_q 1024, %d at 1025", gpus[g].arch,
                head_dim, block_m[0], block_m[1]);
    }
  }
  /* The TMA kernel's at d128 (only EXTRAS rows, reached with dropout: the Gluon forward takes every
   * other call): 4 warps from 1 query row up to 4095 (the row of min_seqlen 1), 8 from 4096 (the row of
   * min_seqlen 4096). */
  install_fake_gpu(90, SHARED_SM90);
  int32_t num_warps[2] = {0, 0};
  for (int longer = 0; longer <= 1; longer++) {
    problem p = default_problem;
    p.head_dim = 128;
    p.seqlen_q = longer ? 4096 : 4095;
    aotk_attn_params params = params_for(p);
    set_dropout(&params);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK(aotk_query(AOTK_OP_ATTN_FWD, &params, &info) == AOTK_OK && (info.features & AOTK_FEATURE_TMA) != 0);
    const aotk__kernel_entry *row = table_row_named(info.kernel_name, info.arch);
    const int32_t min_seqlen = longer ? 4096 : 1;
    CHECK_MSG(row != NULL && row->family == AOTK__FAMILY_ATTN_FWD_TMA && row->extras && row->min_seqlen == min_seqlen,
              "TMA d128 at seqlen_q %lld: %s, expected the attn_fwd_tma EXTRAS row of min_seqlen %d",
              (long long)p.seqlen_q, info.kernel_name, min_seqlen);
    num_warps[longer] = info.num_warps;
  }
  CHECK_MSG(num_warps[0] < num_warps[1], "TMA d128: %d warps at seqlen_q 4095, %d at 4096", num_warps[0], num_warps[1]);
  uninstall_fake_gpu();
}

/* A window bounded on both sides is tuned by the keys a row sees (window_left + window_right), not by
 * seqlen_q: at seqlen 16384, a causal window of 1024 (or 512 each side) takes the short-sequence tile,
 * one of 1025 or an unbounded side the long one; the EXTRAS kernels keep seqlen_q's. */
static void test_window_tuning_choice(void) {
  static const struct {
    int32_t causal, window_left, window_right;
    int64_t key; /* the size the choice must match */
  } cases[] = {
      {1, 1024, -1, 1024}, {0, 512, 512, 1024}, {0, 0, 0, 1}, {1, 1025, -1, 1025}, {0, 1024, -1, 16384},
      {0, -1, 0, 16384},   {1, -1, -1, 16384},  {0, 20000, 20000, 16384}, {0, 2048, 2047, 4095}, {0, 2048, 2048, 4096},
  };
  install_fake_gpu(90, SHARED_SM90);
  /* The pointer kernel (q heads-outer, which TMA cannot read), then the warp-specialized one
   * (contiguous), which takes every window and the EXTRAS cases (softcap, in its EXTRAS row) and has one
   * tile per head dim. */
  for (int tma = 0; tma <= 1; tma++)
  for (size_t c = 0; c < 2 * sizeof cases / sizeof cases[0]; c++) {
    const int extras = c >= sizeof cases / sizeof cases[0];
    const size_t i = extras ? c - sizeof cases / sizeof cases[0] : c;
    problem p = default_problem;
    p.head_dim = 128;
    p.seqlen_q = 16384;
    p.seqlen_k = 16384;
    aotk_attn_params params = params_for(p);
    if (!tma) make_heads_outer(&params.q);
    params.causal = cases[i].causal;
    params.window_left = cases[i].window_left;
    params.window_right = cases[i].window_right;
    if (extras) params.softcap = 30.0f;
    const int family = tma ? AOTK__FAMILY_ATTN_FWD_HOPPER : AOTK__FAMILY_ATTN_FWD;
    CHECK_MSG(expected_fwd_family(&params, 90, false, SHARED_SM90) == family,
              "causal %d window (%d, %d) extras %d: the test's own rule does not take %s", cases[i].causal,
              cases[i].window_left, cases[i].window_right, extras, kernel_signatures[fwd_kernel_id(family)].function);
    const aotk__kernel_entry *expected =
        expected_row(family, 90, p.dtype, 128, 128, 1, extras, extras ? 16384 : cases[i].key);
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_query(AOTK_OP_ATTN_FWD, &params, &info);
    CHECK_MSG(status == AOTK_OK && expected != NULL && strcmp(info.kernel_name, expected->name) == 0,
              "%s causal %d window (%d, %d) extras %d: %s picked %s, expected %s",
              kernel_signatures[fwd_kernel_id(family)].function, cases[i].causal, cases[i].window_left,
              cases[i].window_right, extras, aotk_status_name(status), info.kernel_name,
              expected ? expected->name : "(none)");
  }
  uninstall_fake_gpu();
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
  /* Softcap, ALiBi and dropout run in an EXTRAS row (the Gluon kernel's too); anything else never does. */
  const bool extras = params->softcap > 0.0f || params->alibi_slopes.data != NULL || params->dropout_p > 0.0f;
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
 * the plain forward without a mask. Dropout takes the Triton TMA kernel (dense, 128 or 256); any other
 * call the pointer kernel. */
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
  check_fwd_family("d128 window_left 64 and dropout", &params, AOTK__FAMILY_ATTN_FWD_TMA);
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
  check_fwd_family("d128 causal window sinks dropout", &params, AOTK__FAMILY_ATTN_FWD_TMA);
  params = params_for(d128);
  params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, d128.heads_q);
  check_fwd_family("d128 ALiBi", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);
  params.causal = 1;
  check_fwd_family("d128 causal ALiBi", &params, AOTK__FAMILY_ATTN_FWD_HOPPER);

  /* d64: the warp-specialized kernel with three consumer warpgroups for the plain forward (sinks or not)
   * without a mask from 2048 query rows on (max_seqlen_q for varlen), with two otherwise: under any
   * window (window_right 0 alone is the causal mask; a window wider than the sequence is a window still)
   * and with softcap or ALiBi (the EXTRAS rows). The Triton TMA kernel has no d64, so with dropout the
   * pointer kernel runs. */
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
  check_fwd_family("d64 dropout (the Triton TMA kernel has no d64)", &params, AOTK__FAMILY_ATTN_FWD);
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
  check_fwd_family("varlen d64 dropout", &params, AOTK__FAMILY_ATTN_FWD);
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
  check_fwd_family("d128 dropout with its mask", &params, AOTK__FAMILY_ATTN_FWD_TMA);
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
  check_fwd_family("varlen d128 causal dropout (the Triton TMA kernel is dense only)", &params,
                   AOTK__FAMILY_ATTN_FWD);
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
   * kernel's too, in natural tile order (no FLAG_REVERSE); with dropout the Triton TMA kernel runs it. */
  params.window_left = 2048;
  check_launch_of("warp-specialized bf16 d128 GQA causal, window_left 2048, sinks", &params, &gqa, hopper);
  dropout_on(&params, &gqa);
  check_launch_of("TMA bf16 d128 GQA causal, window_left 2048, sinks, dropout", &params, &gqa, tma);

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
  check_launch_of("TMA fp16 d128 at 4097 rows (the second config), v tokens padded, window_left 1024, sinks, dropout",
                  &params, &long_q, tma);

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

/* Which backward calls run the Gluon dK/dV pass (include/aotk.h, AOTK_FEATURE_TMA and
 * AOTK_FEATURE_WARP_SPECIALIZED for AOTK_OP_ATTN_BWD), and which its fused non-deterministic form
 * (AOTK_FEATURE_NONDETERMINISTIC) with the cast of its dQ: the calls the Gluon pass covers (every call but
 * dropout, at head dims 64, 128 and 256 that TMA can read; softcap and ALiBi in its EXTRAS rows, the cast's
 * one variant after either), when deterministic is 0 and the head dim 64 or 128; at 256 the deterministic
 * Gluon passes (dK/dV, then the Gluon dQ pass) either way. check_bwd_launch holds aotk_query, the launches,
 * their arguments, the clear and the tensor maps to expect_bwd_fused and expect_bwd_hopper; here the
 * rules' answers are also written out per case, so that every outcome is seen. */
static void test_bwd_hopper_choice(void) {
  install_fake_gpu(90, SHARED_SM90);
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 2, 300, 400, 8, 2, 128, true, 0};
  const problem d64 = {AOTK_DTYPE_FLOAT16, 3, 1000, 1000, 4, 4, 64, true, 0};
  enum {
    PLAIN, CAUSAL, CAUSAL_TOP_LEFT, WINDOW_RIGHT_0, SINKS, D64, SOFTCAP, ALIBI, DROPOUT, WINDOW_LEFT, DOUT_HEADS_OUTER,
    D96, D256, VARLEN, DOUT_STRIDE_ODD, WINDOW_BOTH, WINDOW_RIGHT_5, CAUSAL_WINDOW, WINDOW_TOP_LEFT, EVERYTHING,
    D64_SOFTCAP, ALIBI_PER_SEQUENCE, CAUSAL_DROPOUT, SOFTCAP_DROPOUT, WINDOW_DROPOUT, D256_SOFTCAP, D192_128,
    D192_128_CAUSAL_ALIBI, D192_192, CASE_COUNT
  };
  static const struct {
    const char *what;
    bool gluon;  /* the Gluon passes run (the fused one and the cast where deterministic is 0) */
    bool extras; /* in their EXTRAS rows (or, for the Triton passes, theirs) */
    bool d256;   /* head dims 256 or (192, 128): never fused; the Gluon dQ pass beside the Gluon dK/dV pass */
  } cases[CASE_COUNT] = {
      [PLAIN] = {"bf16 d128 GQA", true, false},
      [CAUSAL] = {"causal", true, false},
      [CAUSAL_TOP_LEFT] = {"causal top-left", true, false},
      [WINDOW_RIGHT_0] = {"window_right 0 alone", true, false},
      [SINKS] = {"sinks and dsinks", true, false},
      [D64] = {"fp16 d64", true, false},
      [SOFTCAP] = {"softcap", true, true},
      [ALIBI] = {"ALiBi", true, true},
      [DROPOUT] = {"dropout (the Triton passes)", false, true},
      [WINDOW_LEFT] = {"a left window", true, false},
      [DOUT_HEADS_OUTER] = {"dout's heads outermost", false, false},
      [D96] = {"d96 (padded)", false, false},
      [D256] = {"d256", true, false, true},
      [VARLEN] = {"varlen (read as [1, total, heads * d])", true, false},
      [DOUT_STRIDE_ODD] = {"dout's token stride not a multiple of 16 bytes", false, false},
      [WINDOW_BOTH] = {"window (16, 5)", true, false},
      [WINDOW_RIGHT_5] = {"window_right 5 alone", true, false},
      [CAUSAL_WINDOW] = {"causal, window_left 64 (sliding)", true, false},
      [WINDOW_TOP_LEFT] = {"window (16, 5) top-left", true, false},
      [EVERYTHING] = {"causal window, softcap, ALiBi, sinks and dsinks", true, true},
      [D64_SOFTCAP] = {"fp16 d64 softcap", true, true},
      [ALIBI_PER_SEQUENCE] = {"ALiBi per sequence", true, true},
      [CAUSAL_DROPOUT] = {"causal dropout", false, true},
      [SOFTCAP_DROPOUT] = {"softcap and dropout", false, true},
      [WINDOW_DROPOUT] = {"window (16, 5) and dropout", false, true},
      [D256_SOFTCAP] = {"d256 softcap", true, true, true},
      [D192_128] = {"(192, 128)", true, false, true},
      [D192_128_CAUSAL_ALIBI] = {"(192, 128) causal ALiBi", true, true, true},
      [D192_192] = {"(192, 192) (padded)", false, false, false},
  };
  int fused_cases = 0, extras_cases = 0;
  for (size_t c = 0; c < 2 * (size_t)CASE_COUNT; c++) {
    const size_t i = c / 2;
    const int deterministic = (int)(c % 2);
    const bool expect_hopper = cases[i].gluon, expect_fused = expect_hopper && !deterministic && !cases[i].d256;
    fused_cases += expect_fused;
    extras_cases += expect_hopper && cases[i].extras;
    problem p = i == D64 || i == D64_SOFTCAP ? d64 : d128;
    if (i == D96) p.head_dim = 96;
    if (i == D256 || i == D256_SOFTCAP) p.head_dim = 256;
    if (i == D192_128 || i == D192_128_CAUSAL_ALIBI || i == D192_192) p.head_dim = 192;
    if (i == D192_128 || i == D192_128_CAUSAL_ALIBI) p.head_dim_v = 128;
    aotk_attn_params params = bwd_params_for(p);
    switch (i) {
      case CAUSAL: params.causal = 1; break;
      case CAUSAL_TOP_LEFT: params.causal = 1, params.causal_align = AOTK_ALIGN_TOP_LEFT; break;
      case WINDOW_RIGHT_0: params.window_right = 0; break;
      case SINKS:
        params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
        params.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
        break;
      case SOFTCAP:
      case D64_SOFTCAP:
      case D256_SOFTCAP: params.softcap = 30.0f; break;
      case D192_128_CAUSAL_ALIBI:
        params.causal = 1, params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p.heads_q);
        break;
      case ALIBI: params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p.heads_q); break;
      case DROPOUT: dropout_on(&params, &p); break;
      case WINDOW_LEFT: params.window_left = 64; break;
      case DOUT_HEADS_OUTER: make_heads_outer(&params.dout); break;
      case VARLEN: params = varlen_params_for(p, p.batch * p.seqlen_q, p.batch * p.seqlen_k, true); break;
      case DOUT_STRIDE_ODD:
        params.dout.strides[1] += 4, params.dout.strides[0] = params.dout.strides[1] * p.seqlen_q;
        break;
      case WINDOW_BOTH: params.window_left = 16, params.window_right = 5; break;
      case WINDOW_RIGHT_5: params.window_right = 5; break;
      case CAUSAL_WINDOW: params.causal = 1, params.window_left = 64; break;
      case WINDOW_TOP_LEFT:
        params.window_left = 16, params.window_right = 5, params.causal_align = AOTK_ALIGN_TOP_LEFT;
        break;
      case EVERYTHING:
        params.causal = 1, params.window_left = 100, params.softcap = 30.0f;
        params.alibi_slopes = aotk_tensor_1d(FAKE_ALIBI, AOTK_DTYPE_FLOAT32, p.heads_q);
        params.sinks = aotk_tensor_1d(FAKE_SINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
        params.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
        break;
      case ALIBI_PER_SEQUENCE: alibi_per_sequence(&params, &p); break;
      case CAUSAL_DROPOUT: params.causal = 1, dropout_on(&params, &p); break;
      case SOFTCAP_DROPOUT: params.softcap = 30.0f, dropout_on(&params, &p); break;
      case WINDOW_DROPOUT: params.window_left = 16, params.window_right = 5, dropout_on(&params, &p); break;
      default: break;
    }
    params.deterministic = deterministic;
    char what_of_case[96];
    snprintf(what_of_case, sizeof what_of_case, "%s, deterministic %d", cases[i].what, deterministic);
    CHECK_MSG(expect_bwd_hopper(&params, 90, false, SHARED_SM90) == expect_hopper, "%s: the rule says %d",
              what_of_case, (int)expect_bwd_hopper(&params, 90, false, SHARED_SM90));
    CHECK_MSG(expect_bwd_fused(&params, 90, false, SHARED_SM90) == expect_fused, "%s: the fused rule says %d",
              what_of_case, (int)expect_bwd_fused(&params, 90, false, SHARED_SM90));
    CHECK_MSG(expect_bwd_dq_hopper(&params, 90, false, SHARED_SM90) == (expect_hopper && cases[i].d256),
              "%s: the Gluon dQ rule says %d", what_of_case, (int)expect_bwd_dq_hopper(&params, 90, false, SHARED_SM90));
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    CHECK_MSG(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK, "%s: %s", what_of_case, aotk_last_error());
    const bool hopper = strncmp(info.kernel_name, "attn_bwd_dkdv_hopper_", 21) == 0;
    const bool fused = strncmp(info.kernel_name, "attn_bwd_fused_hopper_", 22) == 0;
    CHECK_MSG(hopper == (expect_hopper && !expect_fused) && fused == expect_fused &&
                  ((info.features & (AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED)) != 0) == expect_hopper &&
                  ((info.features & AOTK_FEATURE_NONDETERMINISTIC) != 0) == expect_fused,
              "%s: aotk_query names %s with features %#x", what_of_case, info.kernel_name, info.features);
    /* The EXTRAS row exactly where softcap, ALiBi (or, in the Triton passes, dropout) are on. */
    const aotk__kernel_entry *named = table_row_named(info.kernel_name, 90);
    CHECK_MSG(named != NULL && (bool)named->extras == cases[i].extras &&
                  ((info.features & AOTK_FEATURE_EXTRAS_KERNEL) != 0) == cases[i].extras,
              "%s: aotk_query names %s with features %#x, expected %s EXTRAS row", what_of_case, info.kernel_name,
              info.features, cases[i].extras ? "an" : "no");
    check_bwd_launch(what_of_case, &params, &p);
    /* The launches, written out: the Gluon pass, then the cast (fused), the Gluon dQ pass (d256) or the
     * Triton dQ pass. */
    const int second = expect_fused    ? KERNEL_BWD_FUSED_HOPPER
                       : expect_hopper ? KERNEL_BWD_DKDV_HOPPER
                                       : KERNEL_BWD_DKDV;
    const int third = expect_fused                      ? KERNEL_BWD_DQ_CONVERT
                      : expect_hopper && cases[i].d256 ? KERNEL_BWD_DQ_HOPPER
                                                        : KERNEL_BWD_DQ;
    CHECK_MSG(fake.logged_launches >= 3 && fake.launch_log[1].kernel == second && fake.launch_log[2].kernel == third,
              "%s: launched %s and %s, expected %s and %s", what_of_case,
              fake.logged_launches >= 3 ? kernel_signatures[fake.launch_log[1].kernel].function : "(none)",
              fake.logged_launches >= 3 ? kernel_signatures[fake.launch_log[2].kernel].function : "(none)",
              kernel_signatures[second].function, kernel_signatures[third].function);
  }
  printf("    %d cases, %d of them non-deterministic, %d in the Gluon passes' EXTRAS rows\n", 2 * (int)CASE_COUNT,
         fused_cases, extras_cases);
  /* Too little shared memory for the Gluon pass (but enough for the Triton one): the Triton pass. */
  aotk_attn_params params = bwd_params_for(d128);
  const aotk__kernel_entry *gluon = expected_row(AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER, 90, d128.dtype, 128, 128, 1, 0,
                                                 d128.seqlen_k);
  CHECK(gluon != NULL);
  if (gluon != NULL) {
    install_fake_gpu(90, gluon->shared_bytes - 1);
    CHECK(!expect_bwd_hopper(&params, 90, false, gluon->shared_bytes - 1));
    aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
    aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info);
    CHECK_MSG(status != AOTK_OK || (strncmp(info.kernel_name, "attn_bwd_dkdv_hopper_", 21) != 0 &&
                                    strncmp(info.kernel_name, "attn_bwd_fused_hopper_", 22) != 0),
              "%d bytes of shared memory: %s", gluon->shared_bytes - 1, info.kernel_name);
  }
  /* Too little for the fused pass but enough for the Gluon dK/dV pass (the fused pass holds dQ's tiles
   * too): a non-deterministic call runs the deterministic plan, with its smaller workspace, no clear,
   * and dQ's own pass; with exactly enough it runs the fused one. */
  const aotk__kernel_entry *fused = fused_row(&params);
  CHECK_MSG(fused != NULL && gluon != NULL && fused->shared_bytes > gluon->shared_bytes,
            "the fused pass (%d bytes) should need more shared memory than the dK/dV pass (%d)",
            fused ? fused->shared_bytes : -1, gluon ? gluon->shared_bytes : -1);
  if (fused != NULL && gluon != NULL && fused->shared_bytes > gluon->shared_bytes) {
    for (int short_by = 0; short_by <= 1; short_by++) {
      install_fake_gpu(90, fused->shared_bytes - short_by);
      char what_of_case[96];
      snprintf(what_of_case, sizeof what_of_case, "bf16 d128, %d bytes of shared memory",
               fused->shared_bytes - short_by);
      CHECK_MSG(expect_bwd_fused(&params, 90, false, fused->shared_bytes - short_by) == !short_by &&
                    expect_bwd_hopper(&params, 90, false, fused->shared_bytes - short_by),
                "%s: the rules say fused %d, Gluon dK/dV %d", what_of_case,
                (int)expect_bwd_fused(&params, 90, false, fused->shared_bytes - short_by),
                (int)expect_bwd_hopper(&params, 90, false, fused->shared_bytes - short_by));
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK);
      CHECK_MSG(strcmp(info.kernel_name, short_by ? gluon->name : fused->name) == 0 &&
                    info.workspace_bytes ==
                        (short_by ? bwd_workspace_bytes(&d128) : bwd_fused_workspace_bytes_for(&d128, false)),
                "%s: aotk_query names %s, %zu bytes of workspace", what_of_case, info.kernel_name,
                info.workspace_bytes);
      check_bwd_launch(what_of_case, &params, &d128);
    }
  }
  uninstall_fake_gpu();
}

/* What the last call of test_bwd_hopper_varlen's plain case (3 sequences of at most 300 / 400 rows, 700
 * and 1000 in all, bf16 d128, heads 8 / 2) launched, written out: stats_stride round_up(300, 128) = 384;
 * the statistics 8 * 3 * 8 * 384 bytes, and for the fused plan the accumulator after them, 3 * 8 * 384 *
 * 128 words; the Gluon pass over ceil(400 / block_n) * 3 * 2 programs, told FLAG_VARLEN and the
 * cu_seqlens, with maps over [1, total, heads * 128]; the cast over ceil(300 / 64) * 3 * 8 programs. */
static void check_bwd_varlen_literals(const char *what, const aotk_attn_params *params, bool fused) {
  enum { STATS_STRIDE = 384, STATISTICS_BYTES = 8 * 3 * 8 * STATS_STRIDE, ACCUMULATOR_WORDS = 3 * 8 * 384 * 128 };
  aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
  CHECK(aotk_query(AOTK_OP_ATTN_BWD, params, &info) == AOTK_OK);
  const size_t workspace_bytes = STATISTICS_BYTES + (fused ? 4 * (size_t)ACCUMULATOR_WORDS : 0);
  CHECK_MSG(info.workspace_bytes == workspace_bytes, "%s: workspace_bytes %zu, expected %zu", what,
            info.workspace_bytes, workspace_bytes);
  CHECK_MSG(fake.logged_launches == 3, "%s: %d launches", what, fake.logged_launches);
  if (fake.logged_launches != 3) return;
  const recorded_launch *pass = &fake.launch_log[1], *dq = &fake.launch_log[2];
  CHECK_MSG(pass->kernel == (fused ? KERNEL_BWD_FUSED_HOPPER : KERNEL_BWD_DKDV_HOPPER) &&
                dq->kernel == (fused ? KERNEL_BWD_DQ_CONVERT : KERNEL_BWD_DQ),
            "%s: launched %s and %s", what, kernel_signatures[pass->kernel].function,
            kernel_signatures[dq->kernel].function);
  const aotk__kernel_entry *row = fused ? fused_row(params) : expected_row(AOTK__FAMILY_ATTN_BWD_DKDV_HOPPER, 90,
                                                                           AOTK_DTYPE_BFLOAT16, 128, 128, 1, 0, 400);
  CHECK(row != NULL);
  if (row == NULL) return;
  CHECK_MSG(pass->grid[0] == (unsigned)(ceil_div(400, row->block_n) * 3 * 2) && info.grid == (int64_t)pass->grid[0],
            "%s: the dK/dV pass's grid %u (aotk_query %lld) with block_n %d", what, pass->grid[0],
            (long long)info.grid, row->block_n);
  CHECK_MSG(arg_i32(pass, DKDV_FLAGS) == (FLAG_WRITE_LSE | FLAG_VARLEN) && arg_i32(pass, DKDV_SEQLEN_Q) == 300 &&
                arg_i32(pass, DKDV_SEQLEN_K) == 400 && arg_i32(pass, DKDV_STATS_STRIDE) == STATS_STRIDE &&
                arg_pointer(pass, DKDV_CU_SEQLENS_Q) == (uint64_t)(uintptr_t)FAKE_CU_SEQLENS_Q &&
                arg_pointer(pass, DKDV_CU_SEQLENS_K) == (uint64_t)(uintptr_t)FAKE_CU_SEQLENS_K,
            "%s: the Gluon pass's flags %#x, lengths %d / %d, stats_stride %d, or cu_seqlens", what,
            (unsigned)arg_i32(pass, DKDV_FLAGS), arg_i32(pass, DKDV_SEQLEN_Q), arg_i32(pass, DKDV_SEQLEN_K),
            arg_i32(pass, DKDV_STATS_STRIDE));
  /* q's and k's maps: [1, 700, 8 * 128] and [1, 1000, 2 * 128] bf16, the single batch's stride spanning
   * the total; in the launch the same shapes and element strides. */
  const encode_call *q_map = &fake.encodes[0], *k_map = &fake.encodes[1];
  CHECK_MSG(fake.encode_count == (fused ? 5 : 4) && q_map->dims[0] == 1024 && q_map->dims[1] == 700 &&
                q_map->dims[2] == 1 && q_map->strides_bytes[0] == 2048 && q_map->strides_bytes[1] == 2048 * 700 &&
                k_map->dims[0] == 256 && k_map->dims[1] == 1000 && k_map->dims[2] == 1 &&
                k_map->strides_bytes[0] == 512 && k_map->strides_bytes[1] == 512 * 1000,
            "%s: %d maps; q's dims {%llu, %llu, %llu} byte strides {%llu, %llu}, k's dims {%llu, %llu, %llu}", what,
            fake.encode_count, (unsigned long long)q_map->dims[0], (unsigned long long)q_map->dims[1],
            (unsigned long long)q_map->dims[2], (unsigned long long)q_map->strides_bytes[0],
            (unsigned long long)q_map->strides_bytes[1], (unsigned long long)k_map->dims[0],
            (unsigned long long)k_map->dims[1], (unsigned long long)k_map->dims[2]);
  const int q_desc = DKDV_GLOBAL_SCRATCH;
  CHECK_MSG(arg_i32(pass, q_desc + TMA_SLOT_SHAPE) == 1 && arg_i32(pass, q_desc + TMA_SLOT_SHAPE + 1) == 700 &&
                arg_i32(pass, q_desc + TMA_SLOT_SHAPE + 2) == 1024 &&
                arg_i64(pass, q_desc + TMA_SLOT_STRIDES) == 700 * 1024 &&
                arg_i64(pass, q_desc + TMA_SLOT_STRIDES + 1) == 1024,
            "%s: q's descriptor (%d, %d, %d) strides (%lld, %lld)", what, arg_i32(pass, q_desc + TMA_SLOT_SHAPE),
            arg_i32(pass, q_desc + TMA_SLOT_SHAPE + 1), arg_i32(pass, q_desc + TMA_SLOT_SHAPE + 2),
            (long long)arg_i64(pass, q_desc + TMA_SLOT_STRIDES),
            (long long)arg_i64(pass, q_desc + TMA_SLOT_STRIDES + 1));
  if (!fused) {
    CHECK_MSG(fake.memsets == 0 && arg_i32(dq, DQ_FLAGS) == (FLAG_WRITE_LSE | FLAG_VARLEN),
              "%s: %d clears; the Triton dQ pass's flags %#x", what, fake.memsets, (unsigned)arg_i32(dq, DQ_FLAGS));
    return;
  }
  /* The fused plan: the accumulator [24, 384, 128] fp32 cleared and mapped after the statistics. */
  const encode_call *acc_map = &fake.encodes[4];
  CHECK_MSG(fake.memsets == 1 && fake.memset_count == ACCUMULATOR_WORDS &&
                fake.memset_destination == (CUdeviceptr)(uintptr_t)byte_offset(FAKE_WORKSPACE, STATISTICS_BYTES) &&
                acc_map->dims[0] == 128 && acc_map->dims[1] == STATS_STRIDE && acc_map->dims[2] == 24,
            "%s: %d clears of %zu words; the accumulator's map {%llu, %llu, %llu}", what, fake.memsets,
            fake.memset_count, (unsigned long long)acc_map->dims[0], (unsigned long long)acc_map->dims[1],
            (unsigned long long)acc_map->dims[2]);
  /* The cast: cu_seqlens_q and FLAG_VARLEN, the packed dq's strides (0, 8 * 128, 128), the max_seqlen's
   * 5 blocks of 64 rows for each of 3 sequences and 8 heads. */
  CHECK_MSG(dq->grid[0] == 5 * 3 * 8 &&
                arg_pointer(dq, CONVERT_CU_SEQLENS_Q) == (uint64_t)(uintptr_t)FAKE_CU_SEQLENS_Q &&
                arg_i32(dq, CONVERT_FLAGS) == FLAG_VARLEN && arg_i64(dq, CONVERT_STRIDE_DQB) == 0 &&
                arg_i32(dq, CONVERT_STRIDE_DQS) == 1024 && arg_i32(dq, CONVERT_STRIDE_DQH) == 128 &&
                arg_i32(dq, CONVERT_SEQLEN_Q) == 300 && arg_i32(dq, CONVERT_HEADS_Q) == 8 &&
                arg_i32(dq, CONVERT_NUM_M_BLOCKS) == 5 && arg_i32(dq, CONVERT_STATS_STRIDE) == STATS_STRIDE,
            "%s: the cast's grid %u, cu_seqlens_q %#llx, flags %#x, strides (%lld, %d, %d), seqlen_q %d, heads_q %d, "
            "num_m_blocks %d, stats_stride %d",
            what, dq->grid[0], (unsigned long long)arg_pointer(dq, CONVERT_CU_SEQLENS_Q),
            (unsigned)arg_i32(dq, CONVERT_FLAGS), (long long)arg_i64(dq, CONVERT_STRIDE_DQB),
            arg_i32(dq, CONVERT_STRIDE_DQS), arg_i32(dq, CONVERT_STRIDE_DQH), arg_i32(dq, CONVERT_SEQLEN_Q),
            arg_i32(dq, CONVERT_HEADS_Q), arg_i32(dq, CONVERT_NUM_M_BLOCKS), arg_i32(dq, CONVERT_STATS_STRIDE));
}

/* The sm_90 backward's Gluon passes take the varlen layout too, under the dense conditions: the packed
 * tensors [total, heads, d] are read as [1, total, heads * d] (batch stride 0: each sequence's rows
 * start at its cu_seqlens entry), and the problem is num_seqs sequences of max_seqlen_q / max_seqlen_k
 * rows, so the grids, stats_stride and the fused plan's workspace follow from those, never from the
 * totals. deterministic 1 runs the Gluon dK/dV pass and the Triton dQ pass; 0 the clear, the fused pass
 * and the cast, which is told cu_seqlens_q and FLAG_VARLEN. Masks and windows of either alignment, sinks,
 * and softcap and ALiBi (in the EXTRAS rows) run there too; dropout or a padded head dim keep the Triton
 * passes. check_bwd_launch checks each call against the model; here the model's answers and the numbers
 * that matter are also written out. */
static void test_bwd_hopper_varlen(void) {
  install_fake_gpu(90, SHARED_SM90);
  /* 3 sequences of at most 300 query and 400 key rows, 700 and 1000 rows in all; GQA 8 / 2. */
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 3, 300, 400, 8, 2, 128, true, 0};
  enum { TOTAL_Q = 700, TOTAL_K = 1000 };
  enum {
    PLAIN, CAUSAL, CAUSAL_TOP_LEFT, SINKS, D64, SOFTCAP, D96, ALIBI, WINDOW, WINDOW_TOP_LEFT, DROPOUT, SOFTCAP_DROPOUT,
    CASE_COUNT
  };
  static const struct {
    const char *what;
    bool gluon;  /* the Gluon passes run (the fused one where deterministic is 0) */
    bool extras; /* the dK/dV (or fused) row is EXTRAS */
  } cases[CASE_COUNT] = {
      [PLAIN] = {"varlen bf16 d128 GQA", true, false},
      [CAUSAL] = {"varlen causal", true, false},
      [CAUSAL_TOP_LEFT] = {"varlen causal top-left", true, false},
      [SINKS] = {"varlen sinks and dsinks", true, false},
      [D64] = {"varlen fp16 d64", true, false},
      [SOFTCAP] = {"varlen softcap (the Gluon passes' EXTRAS rows)", true, true},
      [D96] = {"varlen d96 (padded: the Triton passes)", false, false},
      [ALIBI] = {"varlen ALiBi per sequence, causal", true, true},
      [WINDOW] = {"varlen window (64, 8)", true, false},
      [WINDOW_TOP_LEFT] = {"varlen causal window_left 32, top-left", true, false},
      [DROPOUT] = {"varlen dropout (the Triton passes)", false, true},
      [SOFTCAP_DROPOUT] = {"varlen softcap and dropout (the Triton passes)", false, true},
  };
  int calls = 0;
  for (int c = 0; c < CASE_COUNT; c++) {
    for (int deterministic = 0; deterministic <= 1; deterministic++) {
      problem p = d128;
      if (c == D64) p.dtype = AOTK_DTYPE_FLOAT16, p.head_dim = 64;
      if (c == D96) p.head_dim = 96;
      aotk_attn_params params = varlen_params_for(p, TOTAL_Q, TOTAL_K, true);
      params.deterministic = deterministic;
      if (c == CAUSAL || c == CAUSAL_TOP_LEFT) params.causal = 1;
      if (c == CAUSAL_TOP_LEFT) params.causal_align = AOTK_ALIGN_TOP_LEFT;
      if (c == SINKS) {
        sinks_on(&params, &p);
        params.dsinks = aotk_tensor_1d(FAKE_DSINKS, AOTK_DTYPE_FLOAT32, p.heads_q);
      }
      if (c == SOFTCAP || c == SOFTCAP_DROPOUT) params.softcap = 30.0f;
      if (c == ALIBI) alibi_per_sequence(&params, &p), params.causal = 1;
      if (c == WINDOW) params.window_left = 64, params.window_right = 8;
      if (c == WINDOW_TOP_LEFT) {
        params.causal = 1, params.window_left = 32, params.causal_align = AOTK_ALIGN_TOP_LEFT;
      }
      if (c == DROPOUT || c == SOFTCAP_DROPOUT) dropout_on(&params, &p);
      const bool fused = cases[c].gluon && deterministic == 0;
      char what[128];
      snprintf(what, sizeof what, "%s, deterministic %d", cases[c].what, deterministic);
      CHECK_MSG(expect_bwd_hopper(&params, 90, false, SHARED_SM90) == cases[c].gluon &&
                    expect_bwd_fused(&params, 90, false, SHARED_SM90) == fused,
                "%s: the rules say Gluon %d, fused %d", what, (int)expect_bwd_hopper(&params, 90, false, SHARED_SM90),
                (int)expect_bwd_fused(&params, 90, false, SHARED_SM90));
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info);
      CHECK_MSG(status == AOTK_OK, "%s: aotk_query %s (%s)", what, aotk_status_name(status), aotk_last_error());
      if (status != AOTK_OK) continue;
      const char *prefix = fused            ? "attn_bwd_fused_hopper_"
                           : cases[c].gluon ? "attn_bwd_dkdv_hopper_"
                                            : "attn_bwd_dkdv_";
      const uint32_t gluon_bits = AOTK_FEATURE_TMA | AOTK_FEATURE_WARP_SPECIALIZED;
      /* ("attn_bwd_dkdv_" is also the start of the Gluon pass's names.) */
      const bool named_gluon_dkdv = strncmp(info.kernel_name, "attn_bwd_dkdv_hopper_", 21) == 0;
      CHECK_MSG(strncmp(info.kernel_name, prefix, strlen(prefix)) == 0 &&
                    named_gluon_dkdv == (cases[c].gluon && !fused),
                "%s: aotk_query names %s, expected a %s row", what, info.kernel_name, prefix);
      const aotk__kernel_entry *named = table_row_named(info.kernel_name, 90);
      CHECK_MSG((info.features & AOTK_FEATURE_VARLEN) != 0 &&
                    ((info.features & gluon_bits) == gluon_bits) == cases[c].gluon &&
                    ((info.features & AOTK_FEATURE_NONDETERMINISTIC) != 0) == fused &&
                    ((info.features & AOTK_FEATURE_EXTRAS_KERNEL) != 0) == cases[c].extras && named != NULL &&
                    (bool)named->extras == cases[c].extras,
                "%s: %s, features %#x", what, info.kernel_name, info.features);
      check_bwd_launch(what, &params, &p);
      calls++;
      if (c == PLAIN) check_bwd_varlen_literals(what, &params, fused);
    }
  }
  printf("    %d varlen backward calls\n", calls);
  uninstall_fake_gpu();
}

/* The backward's tensor maps are encoded before anything is cleared or launched: a failing encode (of
 * q, k, v or dout, and for the non-deterministic plan its dQ accumulator) fails the call naming the
 * tensor, with nothing cleared or launched; the next call runs whole. */
static void test_bwd_encode_failure(void) {
  static const char *const names[FUSED_DESCRIPTORS] = {
      "cuTensorMapEncodeTiled(q)", "cuTensorMapEncodeTiled(k)", "cuTensorMapEncodeTiled(v)",
      "cuTensorMapEncodeTiled(dout)", "cuTensorMapEncodeTiled(the dq accumulator)"};
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 2, 300, 400, 8, 2, 128, true, 0};
  for (int deterministic = 0; deterministic <= 1; deterministic++) {
    const int encodes = deterministic ? 4 : FUSED_DESCRIPTORS;
    for (int failing = 1; failing <= encodes; failing++) {
      install_fake_gpu(90, SHARED_SM90);
      aotk_attn_params params = bwd_params_for(d128);
      params.deterministic = deterministic;
      CHECK(expect_bwd_hopper(&params, 90, false, SHARED_SM90) &&
            expect_bwd_fused(&params, 90, false, SHARED_SM90) == !deterministic);
      const size_t workspace_bytes =
          deterministic ? bwd_workspace_bytes(&d128) : bwd_fused_workspace_bytes_for(&d128, false);
      fake.encode_result = CUDA_ERROR_INVALID_VALUE;
      fake.fail_encode_call = failing;
      reset_calls();
      reset_launch_log();
      aotk_status status = aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM);
      CHECK_MSG(status == AOTK_ERROR_CUDA && message_mentions(names[failing - 1]),
                "deterministic %d, encode %d failing: %s (\"%s\")", deterministic, failing, aotk_status_name(status),
                aotk_last_error());
      CHECK_MSG(fake.calls[CALL_cuLaunchKernel] == 0 && fake.calls[CALL_cuMemsetD32Async] == 0 &&
                    fake.calls[CALL_cuTensorMapEncodeTiled] == failing,
                "deterministic %d, encode %d failing: %s", deterministic, failing, called_functions());
      fake.encode_result = CUDA_SUCCESS;
      reset_launch_log();
      CHECK(aotk_attn_bwd(&params, FAKE_WORKSPACE, workspace_bytes, FAKE_STREAM) == AOTK_OK);
      CHECK_MSG(fake.launches == 3 &&
                    fake.launch_log[1].kernel == (deterministic ? KERNEL_BWD_DKDV_HOPPER : KERNEL_BWD_FUSED_HOPPER) &&
                    fake.encode_count == encodes && fake.memsets == !deterministic,
                "deterministic %d, after encode %d failed: %d launches, %d encodes, %d clears", deterministic, failing,
                fake.launches, fake.encode_count, fake.memsets);
    }
  }
  uninstall_fake_gpu();
}

/* A tensor map that fails to encode fails the call with AOTK_ERROR_CUDA naming the tensor, before
 * anything is launched (the dropout-mask kernel neither); the next call, with the driver well again,
 * runs whole. For the Triton TMA kernel (with dropout and its mask) and the warp-specialized one. */
static void test_tma_encode_failure(void) {
  static const char *const names[4] = {"cuTensorMapEncodeTiled(q)", "cuTensorMapEncodeTiled(k)",
                                       "cuTensorMapEncodeTiled(v)", "cuTensorMapEncodeTiled(out)"};
  const problem d128 = {AOTK_DTYPE_BFLOAT16, 2, 300, 400, 8, 2, 128, true, 0};
  for (int hopper = 0; hopper <= 1; hopper++)
    for (int failing = 1; failing <= 3 + hopper; failing++) { /* the Gluon forward encodes out's too */
      install_fake_gpu(90, SHARED_SM90);
      aotk_attn_params params = params_for(d128);
      if (!hopper) {
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

/* The backward's tuning: each family's config is chosen by its own size key, seqlen_k for the dK/dV
 * pass and seqlen_q for the preprocess and dQ passes, at every bound of every variant and on either
 * side of it, with the expectation read from the table rows. aotk_query names the dK/dV kernel; the
 * other two are recognised by their launch (tile rows, warps, shared memory). */
static void test_bwd_tuning_choice(void) {
  static const struct {
    int compute_capability, max_shared_bytes, arch;
  } gpus[] = {{80, SHARED_SM80, 80}, {90, SHARED_SM90, 90}};
  static const aotk_dtype dtypes[] = {AOTK_DTYPE_FLOAT16, AOTK_DTYPE_BFLOAT16};
  static const int families[] = {AOTK__FAMILY_ATTN_BWD_PREPROCESS, AOTK__FAMILY_ATTN_BWD_DKDV, AOTK__FAMILY_ATTN_BWD_DQ};
  const int64_t other_length = 100; /* the length that is not the family's key */
  int queries = 0, launches = 0, dkdv_variants_tuned_by_size = 0;
  for (int g = 0; g < 2; g++) {
    install_fake_gpu(gpus[g].compute_capability, gpus[g].max_shared_bytes);
    for (int d = 0; d < 2; d++)
      for (int head_dim = 64; head_dim <= 128; head_dim += 64)
        for (int aligned = 0; aligned <= 1; aligned++)
          for (int f = 0; f < 3; f++) {
            const int family = families[f];
            int64_t sizes[32];
            int bounds = 0;
            int count = tuning_probe_sizes(family, gpus[g].arch, dtypes[d], head_dim, aligned, 0, sizes, &bounds);
            CHECK_MSG(bounds >= 1, "family %d sm_%d dtype %d d%d aligned %d: no row", family, gpus[g].arch,
                      (int)dtypes[d], head_dim, aligned);
            if (bounds == 0) continue;

            const aotk__kernel_entry *previous = NULL;
            int changes = 0;
            for (int s = 0; s < count; s++) {
              problem p = default_problem;
              p.dtype = dtypes[d];
              p.head_dim = head_dim;
              p.seqlen_q = family == AOTK__FAMILY_ATTN_BWD_DKDV ? other_length : sizes[s];
              p.seqlen_k = family == AOTK__FAMILY_ATTN_BWD_DKDV ? sizes[s] : other_length;
              aotk_attn_params params = bwd_params_for(p);
              /* q's heads outermost: TMA cannot read it, so sm_90 runs the Triton dK/dV pass, whose
               * tuning this is (the Gluon one has a single config; test_bwd_hopper_launch covers it). */
              make_heads_outer(&params.q);
              if (!aligned) params.q.data = byte_offset(FAKE_Q, 2);
              const aotk__kernel_entry *rows[3];
              expected_bwd_rows(gpus[g].arch, &p, aligned, rows);
              const aotk__kernel_entry *expected = rows[f];
              changes += previous != NULL && expected != previous;
              previous = expected;

              aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
              aotk_status status = aotk_query(AOTK_OP_ATTN_BWD, &params, &info);
              queries++;
              CHECK_MSG(status == AOTK_OK && rows[1] != NULL && strcmp(info.kernel_name, rows[1]->name) == 0,
                        "sm_%d seqlen_q %lld seqlen_k %lld: %s picked %s for dK/dV, expected %s", gpus[g].arch,
                        (long long)p.seqlen_q, (long long)p.seqlen_k, aotk_status_name(status), info.kernel_name,
                        rows[1] ? rows[1]->name : "(none)");
              if (family == AOTK__FAMILY_ATTN_BWD_DKDV) {
                CHECK_MSG(info.grid == ceil_div(p.seqlen_k, info.block_n) * p.batch * p.heads_kv,
                          "seqlen_k %lld: grid %lld with block_n %d", (long long)p.seqlen_k, (long long)info.grid,
                          info.block_n);
                /* The same lengths the other way round: dK/dV follows seqlen_k, not seqlen_q. */
                problem swapped = p;
                swapped.seqlen_q = p.seqlen_k;
                swapped.seqlen_k = p.seqlen_q;
                aotk_attn_params swapped_params = bwd_params_for(swapped);
                make_heads_outer(&swapped_params.q);
                if (!aligned) swapped_params.q.data = byte_offset(FAKE_Q, 2);
                const aotk__kernel_entry *swapped_expected = expected_row(AOTK__FAMILY_ATTN_BWD_DKDV, gpus[g].arch, dtypes[d], head_dim,
                                                                          head_dim, aligned, 0, swapped.seqlen_k);
                status = aotk_query(AOTK_OP_ATTN_BWD, &swapped_params, &info);
                queries++;
                CHECK_MSG(status == AOTK_OK && swapped_expected != NULL &&
                              strcmp(info.kernel_name, swapped_expected->name) == 0,
                          "sm_%d seqlen_q %lld seqlen_k %lld: %s picked %s for dK/dV, expected %s", gpus[g].arch,
                          (long long)swapped.seqlen_q, (long long)swapped.seqlen_k, aotk_status_name(status),
                          info.kernel_name, swapped_expected ? swapped_expected->name : "(none)");
                continue;
              }
              /* Preprocess or dQ: launch, and recognise the row by how it was launched. */
              if (expected == NULL) continue;
              reset_launch_log();
              status = aotk_attn_bwd(&params, FAKE_WORKSPACE, bwd_workspace_bytes(&p), FAKE_STREAM);
              launches++;
              CHECK_MSG(status == AOTK_OK && fake.logged_launches == 3, "sm_%d seqlen_q %lld: %s (%s), %d launches",
                        gpus[g].arch, (long long)p.seqlen_q, aotk_status_name(status), aotk_last_error(),
                        fake.logged_launches);
              if (status != AOTK_OK || fake.logged_launches != 3) continue;
              const recorded_launch *launch = &fake.launch_log[f];
              int num_m_blocks_index = family == AOTK__FAMILY_ATTN_BWD_PREPROCESS ? PRE_NUM_M_BLOCKS : DQ_NUM_M_BLOCKS;
              /* The pre-pass runs over the statistics' padded rows, dQ over seqlen_q. */
              int64_t m_blocks = ceil_div(family == AOTK__FAMILY_ATTN_BWD_PREPROCESS ? stats_stride(&p) : p.seqlen_q,
                                          expected->block_m);
              CHECK_MSG(launch->kernel == (family == AOTK__FAMILY_ATTN_BWD_PREPROCESS ? KERNEL_BWD_PREPROCESS
                                                                                     : KERNEL_BWD_DQ) &&
                            arg_i32(launch, num_m_blocks_index) == m_blocks &&
                            launch->grid[0] == (unsigned)(m_blocks * p.batch * p.heads_q) &&
                            launch->block[0] == 32u * (unsigned)expected->num_warps &&
                            launch->shared_bytes == (unsigned)expected->shared_bytes,
                        "sm_%d seqlen_q %lld: launched %s with %d blocks of rows, grid %u, block %u, %u bytes; "
                        "expected %s (block_m %d, %d warps, %d bytes)",
                        gpus[g].arch, (long long)p.seqlen_q, kernel_signatures[launch->kernel].function,
                        arg_i32(launch, num_m_blocks_index), launch->grid[0], launch->block[0], launch->shared_bytes,
                        expected->name, expected->block_m, expected->num_warps, expected->shared_bytes);
            }
            if (bounds >= 2) {
              CHECK_MSG(changes >= 1, "family %d sm_%d d%d: %d configs, but the choice never changes with its key",
                        family, gpus[g].arch, head_dim, bounds);
              dkdv_variants_tuned_by_size += family == AOTK__FAMILY_ATTN_BWD_DKDV;
            }
          }
  }
  printf("    %d queries, %d backward calls\n", queries, launches);
  /* Otherwise the checks above never saw the dK/dV choice change, and prove nothing about its key. */
  CHECK_MSG(dkdv_variants_tuned_by_size > 0, "no dK/dV variant has two configs");

  /* The catalog's dK/dV tuning in words: on sm_90 with head_dim 128, a wider key tile from seqlen_k
   * 4096 on, whatever seqlen_q is (the Triton pass: q's heads outermost keep TMA out). */
  install_fake_gpu(90, SHARED_SM90);
  for (int64_t seqlen_q = 100; seqlen_q <= 8192; seqlen_q *= 82) {
    int32_t block_n[2] = {0, 0};
    for (int longer = 0; longer <= 1; longer++) {
      problem p = default_problem;
      p.head_dim = 128;
      p.seqlen_q = seqlen_q;
      p.seqlen_k = longer ? 4096 : 4095;
      aotk_attn_params params = bwd_params_for(p);
      make_heads_outer(&params.q);
      aotk_kernel_info info = AOTK_KERNEL_INFO_INIT;
      CHECK(aotk_query(AOTK_OP_ATTN_BWD, &params, &info) == AOTK_OK);
      block_n[longer] = info.block_n;
    }
    CHECK_MSG(block_n[0] < block_n[1], "sm_90 d128 seqlen_q %lld: dK/dV block_n %d at seqlen_k 4095, %d at 4096",
              (long long)seqlen_q, block_n[0], block_n[1]);
  }
  uninstall_fake_gpu();
}

int main(void) {
  RUN_TEST(test_arch_choice);
  RUN_TEST(test_alignment_choice);
  RUN_TEST(test_tuning_choice);
  RUN_TEST(test_window_tuning_choice);
  RUN_TEST(test_tma_eligibility);
  RUN_TEST(test_tma_launch_arguments);
  RUN_TEST(test_hopper_grid);
  RUN_TEST(test_bwd_hopper_choice);
  RUN_TEST(test_bwd_hopper_varlen);
  RUN_TEST(test_bwd_encode_failure);
  RUN_TEST(test_tma_encode_failure);
  RUN_TEST(test_bwd_tuning_choice);
  aotk__driver_set_for_testing(NULL);
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);
  return aotk_test_finish();
}
