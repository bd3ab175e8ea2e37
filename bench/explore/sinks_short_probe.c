/* bf16 backwards with sinks over sequences of 1 or 2 keys: is it the bound or the kernel?
 *
 * The stress test found such backwards over the float64 check's bound (dq 1.3-2x, dsinks up to 8x) in
 * 2-3% of random draws and runs them unchecked (tests/test_stress_gpu.c, bound_too_thin). There a row's
 * dP - delta nearly cancels (one key: dS = P (1 - P) dP with a sink), so its dq is a few rounding errors
 * of delta = sum(dout * out), and out enters delta as the forward stored it in bf16. The check's bound is
 * 2x the same-precision emulation's error, and the emulation rounds its own out: two independent draws
 * of the same rounding noise, over a handful of rows, compared one to one.
 *
 * The probe runs each draw twice on the same inputs (same seed, deterministic kernels, so the same
 * gradient bits), with the emulation's delta from its own out (the suites' check) and from the stored
 * out (aotk__bwd_check_case.stored_out_delta), and counts the draws over their bound each way. If the
 * kernel computed something other than the flash backward of its inputs, reading the stored out would
 * not bring it inside the bound; if the excess is the rounding of out, it would.
 *   cc -O2 -std=gnu11 -Iinclude -Isrc/runtime -Isrc/attn -Isrc/decode -Isrc/check -Itests -I<archive> \
 *      bench/explore/sinks_short_probe.c <archive>/libaotk.a <archive>/liblzma.a -ldl -lm -lpthread -o probe
 * with <archive> what `bench/gpu_sanitize.sh --bundle` fills (build/gpu-main/archive); ./probe [draws].
 */
#include <stdio.h>
#include <stdlib.h>

#include "aotk.h"
#include "aotk_check.h"
#include "aotk_driver.h"
#include "aotk_test_harness.h"
#include "aotk_gpu_test.h"

enum { MODES = 2 };

int main(int argc, char **argv) {
  const int draws = argc > 1 ? atoi(argv[1]) : 300;
  if (!aotk_gpu_test_setup()) return aotk_gpu_test_skip_all();
  static const char *const names[AOTK__CHECK_GRADIENTS] = {"dq", "dk", "dv", "dsinks"};
  static const char *const modes[MODES] = {"own out (the suites' check)", "stored out"};
  int over[MODES][AOTK__CHECK_GRADIENTS] = {{0}}, failed[MODES] = {0}, ran = 0;
  double worst[MODES][AOTK__CHECK_GRADIENTS] = {{0}};
  uint64_t state = seed;
  for (int i = 0; i < draws; i++) {
    aotk__bwd_check_case c = {0};
    c.dtype = AOTK_DTYPE_BFLOAT16;
    c.batch = aotk__random_int(&state, 1, 3);
    c.seqlen_q = aotk__random_int(&state, 1, 120);
    c.seqlen_k = aotk__random_int(&state, 1, 2);
    static const int64_t heads[][2] = {{1, 1}, {2, 1}, {4, 2}, {8, 2}, {4, 4}};
    const int pick = (int)aotk__random_int(&state, 0, 4);
    c.heads_q = heads[pick][0];
    c.heads_kv = heads[pick][1];
    static const int64_t dims[] = {64, 128, 256};
    c.head_dim = dims[aotk__random_int(&state, 0, 2)];
    c.causal = (int)aotk__random_int(&state, 0, 1);
    c.layout = (aotk__check_layout)aotk__random_int(&state, 0, AOTK__LAYOUT_COUNT - 1);
    c.deterministic = 1;
    c.rows_per_head = 8;
    c.seed = aotk__random_next(&state);
    c.stream = (aotk_stream)stream;
    c.features.sinks = 1;
    aotk__bwd_check_result r[MODES];
    aotk_status status = AOTK_OK;
    for (int m = 0; m < MODES && status == AOTK_OK; m++) {
      c.stored_out_delta = m;
      status = aotk__check_attn_bwd(driver, &c, &r[m]);
    }
    if (status != AOTK_OK) {
      printf("draw %d: %s: %s\n", i, aotk_status_name(status), aotk_last_error());
      continue;
    }
    ran++;
    for (int m = 0; m < MODES; m++) {
      if (!r[m].passed) failed[m]++;
      for (int g = 0; g < AOTK__CHECK_GRADIENTS; g++) {
        const double fraction = r[m].max_error[g] / r[m].bound[g];
        if (fraction > 1.0) over[m][g]++;
        if (fraction > worst[m][g]) worst[m][g] = fraction;
      }
    }
    if (!r[0].passed || !r[1].passed) {
      printf("draw %d: b=%lld sq=%lld sk=%lld h=%lld/%lld d=%lld causal %d layout %d: ", i, (long long)c.batch,
             (long long)c.seqlen_q, (long long)c.seqlen_k, (long long)c.heads_q, (long long)c.heads_kv,
             (long long)c.head_dim, c.causal, (int)c.layout);
      for (int g = 0; g < AOTK__CHECK_GRADIENTS; g++) {
        printf("%s err %.3g bound %.3g / %.3g (lowp %.3g / %.3g)%s", names[g], r[0].max_error[g], r[0].bound[g],
               r[1].bound[g], r[0].lowp_max_error[g], r[1].lowp_max_error[g], g + 1 < AOTK__CHECK_GRADIENTS ? "; " : "\n");
      }
    }
  }
  printf("%d draws (bf16, sinks, 1-2 keys, deterministic) on sm_%d\n", ran, compute_capability);
  for (int m = 0; m < MODES; m++) {
    printf("emulation's delta from its %s: %d over the bound;", modes[m], failed[m]);
    for (int g = 0; g < AOTK__CHECK_GRADIENTS; g++) {
      printf(" %s %d (worst %.2f)", names[g], over[m][g], worst[m][g]);
    }
    printf("\n");
  }
  return 0;
}
