#!/usr/bin/env bash
# One call on the GPU machine (the lease is short: build here, test and time there in one go).
#   here:  bench/gpu_session.sh --bundle      copies the binaries built by `make` into .gpu/
#   there: bench/gpu_session.sh [--no-bench] [--sanitize]
# runs `aotk info` and `aotk check`, the GPU test binary (optionally under compute-sanitizer), the
# CPU tests, and the benchmark; logs and the benchmark JSON go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=.gpu
if [ "${1:-}" = "--bundle" ]; then
  rm -rf "$bundle" && mkdir -p "$bundle"
  cp -a build/aotk build/libaotk.so* build/tests/test_* "$bundle"/
  rm -f "$bundle"/*.cmake
  du -sh "$bundle"
  exit 0
fi
bench=1 sanitize=0
for arg in "$@"; do
  case "$arg" in
    --no-bench) bench=0 ;;
    --sanitize) sanitize=1 ;;
  esac
done
out=${OUT:-/tmp/aotk-gpu-session}
mkdir -p "$out"
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$bundle"/aotk info | tee "$out/info.txt"
"$bundle"/aotk check > "$out/check.txt" 2>&1 || status=1
tail -n 3 "$out/check.txt"
"$bundle"/test_attn_fwd_gpu > "$out/test_attn_fwd_gpu.txt" 2>&1 || status=1
grep -v '^ok  ' "$out/test_attn_fwd_gpu.txt" | tail -n 40
for t in test_reference test_api test_images; do
  [ -x "$bundle/$t" ] || continue
  "$bundle/$t" > "$out/$t.txt" 2>&1 || status=1
  echo "$t: $(tail -n 1 "$out/$t.txt")"
done
if [ "$sanitize" = 1 ]; then
  compute-sanitizer --tool memcheck --error-exitcode 3 "$bundle"/test_attn_fwd_gpu > "$out/memcheck.txt" 2>&1 || status=1
  echo "memcheck: $(grep -E 'ERROR SUMMARY|passed,' "$out/memcheck.txt" | tail -n 2 | tr '\n' ' ')"
fi
if [ "$bench" = 1 ]; then
  PYTHONUNBUFFERED=1 python3 bench/bench_attn.py --lib "$bundle/libaotk.so" --out-dir "$out" > "$out/bench.txt" 2>&1 || status=1
  tail -n 45 "$out/bench.txt"
fi
exit $status
