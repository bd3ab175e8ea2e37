/*
 * CPU tests of the public API, which attention kernel runs: the target per compute capability, and the
 * alignment and tuning choices of the forward and the backward (windows included). The sm_90 TMA and
 * Gluon kernels are test_api_attn_hopper_fwd.c's and test_api_attn_hopper_bwd.c's.
 * The fake driver and the shared models are tests/api/api_*.h; see api_fake_driver.h.
 */
#include <math.h>

#include "api_launch_checks.h"

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
   * EXTRAS: the warp-specialized kernel takes every call but dropout, and its dropout form dropout without
   * softcap or ALiBi at d64 and d128, so dropout with softcap is what reaches this one here (no window, so
   * the size key is seqlen_q, src/attn/aotk_attn.c fwd_size_key), and a row without EXTRAS would be dead
   * weight in the library. */
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
        params.softcap = 30.0f;
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
          const aotk__kernel_entry *gluon = expected_fwd_row(&without_dropout, AOTK__FAMILY_ATTN_FWD_HOPPER, 90, head_dim,
                                                             head_dim, 1, extras, seqlens[s]);
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
  /* The TMA kernel's at d128 (only EXTRAS rows, reached with dropout and softcap: the Gluon forward takes
   * every other call, dropout alone in its dropout form): 4 warps from 1 query row up to 4095 (the row of
   * min_seqlen 1), 8 from 4096 (the row of min_seqlen 4096). */
  install_fake_gpu(90, SHARED_SM90);
  int32_t num_warps[2] = {0, 0};
  for (int longer = 0; longer <= 1; longer++) {
    problem p = default_problem;
    p.head_dim = 128;
    p.seqlen_q = longer ? 4096 : 4095;
    aotk_attn_params params = params_for(p);
    set_dropout(&params);
    params.softcap = 30.0f;
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
        expected_fwd_row(&params, family, 90, 128, 128, 1, extras, extras ? 16384 : cases[i].key);
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
  RUN_TEST(test_bwd_tuning_choice);
  aotk__driver_set_for_testing(NULL);
  aotk_set_image_policy(AOTK_IMAGE_POLICY_AUTO);
  return aotk_test_finish();
}
