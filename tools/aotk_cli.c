/* The aotk command line. Uses only the public API (include/aotk.h), like zstd's programs/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotk.h"

static int usage(FILE *to) {
  fprintf(to,
          "usage: aotk <command>\n"
          "  info               version, the Triton and ptxas that compiled the kernels, kernels per target\n"
          "  check [--device N] a GPU self-test (attention forward and backward, selection, decoding and the merge)\n"
          "                     against float64 references: pass or fail\n"
          "  version            the library version\n");
  return to == stdout ? 0 : 2;
}

static int command_info(void) {
  aotk_build_info info = AOTK_BUILD_INFO_INIT;
  aotk_status status = aotk_get_build_info(&info);
  if (status != AOTK_OK) {
    fprintf(stderr, "aotk info: %s: %s\n", aotk_status_name(status), aotk_last_error());
    return 1;
  }
  printf("aotk %s\n", aotk_version_string());
  printf("triton %s, ptxas %s\n", info.triton_version, info.ptxas_version);
  printf("sm_90: %d kernels, %lld bytes\n", info.kernels_sm90, (long long)info.image_bytes_sm90);
  printf("sm_80: %d kernels, %lld bytes (cubin for sm_80/86/89, PTX for newer GPUs)\n", info.kernels_sm80,
         (long long)info.image_bytes_sm80);
  int built = info.kernels_sm80 + info.kernels_sm90;
  if (built != info.catalog_kernels) {
    printf("filtered build: %d of the catalog's %d kernels\n", built, info.catalog_kernels);
  }
  printf("attention forward and backward: fp16, bf16; head dims 8-256 (multiples of 8; q/k and v may differ;\n"
         "  compiled 32, 64, 128, 256, 256/128); causal and sliding windows, bottom-right or top-left; varlen;\n"
         "  softcap, ALiBi, sinks, dropout (Philox); GQA/MQA; any strides\n"
         "  sm_90 forward: TMA loads and FlashAttention-3's warp-specialized schedule, persistent (every\n"
         "  feature but dropout, dense or varlen, d 64/128/256 and 192/128); sm_90 backward: the dK/dV\n"
         "  pass warp-specialized (every feature but dropout, dense or varlen, d 64/128/256), with dQ fused\n"
         "  in unless deterministic (d 64/128) or in a warp-specialized dQ pass (d 256)\n");
  printf("selection attention (NSA's selected blocks) forward and backward: fp16, bf16; head dims 64, 128,\n"
         "  192/128; block sizes 32, 64, 128; packed varlen; any group size; deterministic backward\n");
  printf("decoding: 1-16 new tokens per request over a contiguous or paged KV cache (any page size), lengths\n"
         "  read on the device; GQA groups in one program; split-KV; windows, softcap, ALiBi, sinks; packed\n"
         "  prefills over the cache (on sm_90 over pages of 16, 32, ... keys through the warp-specialized\n"
         "  forward, d 64/128/256 and 192/128); and the merge of partial attentions (fp32/fp16/bf16, in\n"
         "  place)\n");
  return 0;
}

static int command_check(int argc, char **argv) {
  int device = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      char *end;
      device = (int)strtol(argv[++i], &end, 10);
      if (*end != '\0') return usage(stderr);
    } else {
      return usage(stderr);
    }
  }
  static char report[16384];
  aotk_status status = aotk_self_test(device, report, sizeof report);
  fputs(report, stdout);
  if (status != AOTK_OK) {
    printf("aotk check: FAIL: %s: %s\n", aotk_status_name(status), aotk_last_error());
    return 1;
  }
  printf("aotk check: PASS\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage(stderr);
  if (strcmp(argv[1], "info") == 0 && argc == 2) return command_info();
  if (strcmp(argv[1], "check") == 0) return command_check(argc - 2, argv + 2);
  if (strcmp(argv[1], "version") == 0 && argc == 2) {
    printf("%s\n", aotk_version_string());
    return 0;
  }
  if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    return usage(stdout);
  }
  return usage(stderr);
}
