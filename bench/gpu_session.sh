#!/usr/bin/env bash
# One call on the GPU machine (the lease is short: build here, test and time there in one go).
#   here:  bench/gpu_session.sh --bundle      copies the binaries built by `make` into .gpu/
#   there: bench/gpu_session.sh [--no-bench] [--no-tests] [--sanitize]
# runs `aotk info` and `aotk check`, the GPU test binaries (optionally under compute-sanitizer), the
# torch cross-check bench/check_features.py, the CPU tests, and the benchmark; logs and the
# benchmark JSON go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=.gpu
if [ "${1:-}" = "--bundle" ]; then
  rm -rf "$bundle" && mkdir -p "$bundle"
  # The GPU binaries only (the carry is limited to 64 MiB; the CPU tests run on the build machine).
  cp -a build/aotk build/tests/test_attn_fwd_gpu build/tests/test_attn_bwd_gpu "$bundle"/
  cp -L build/libaotk.so "$bundle"/libaotk.so
  du -sh "$bundle"
  exit 0
fi
bench=1 sanitize=0 tests=1
for arg in "$@"; do
  case "$arg" in
    --no-bench) bench=0 ;;
    --no-tests) tests=0 ;;
    --sanitize) sanitize=1 ;;
  esac
done
out=${OUT:-/tmp/aotk-gpu-session}
mkdir -p "$out"
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$bundle"/aotk info | tee "$out/info.txt"
if [ "$tests" = 1 ]; then
"$bundle"/aotk check > "$out/check.txt" 2>&1 || status=1
tail -n 3 "$out/check.txt"
for t in test_attn_fwd_gpu test_attn_bwd_gpu; do
  "$bundle/$t" > "$out/$t.txt" 2>&1 || status=1
  grep -v '^ok  ' "$out/$t.txt" | tail -n 12
done
# The torch-autograd cross-check of every feature (shares no code with the C reference).
python3 bench/check_features.py --lib "$bundle/libaotk.so" > "$out/check_features.txt" 2>&1 || status=1
grep -v '^ok  ' "$out/check_features.txt" | tail -n 12
for t in test_reference test_api test_images; do
  [ -x "$bundle/$t" ] || continue
  "$bundle/$t" > "$out/$t.txt" 2>&1 || status=1
  echo "$t: $(tail -n 1 "$out/$t.txt")"
done
fi
if [ "$sanitize" = 1 ]; then
  # The whole GPU suite under memcheck (Triton issue #10573 reports an illegal access in an attention
  # backward on 3.6.0).
  for t in test_attn_fwd_gpu test_attn_bwd_gpu; do
    compute-sanitizer --tool memcheck --error-exitcode 3 "$bundle/$t" > "$out/memcheck_$t.txt" 2>&1 || status=1
    echo "memcheck $t: $(grep -E 'ERROR SUMMARY|passed,' "$out/memcheck_$t.txt" | tail -n 2 | tr '\n' ' ')"
  done
fi
if [ "$bench" = 1 ]; then
  PYTHONUNBUFFERED=1 python3 bench/bench_attn.py --lib "$bundle/libaotk.so" --out-dir "$out" > "$out/bench.txt" 2>&1 || status=1
  tail -n 60 "$out/bench.txt"
fi
exit $status
