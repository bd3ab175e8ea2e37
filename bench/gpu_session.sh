#!/usr/bin/env bash
# One call on the GPU machine (the lease is short: build here, test and time there in one go).
#   here:  bench/gpu_session.sh --bundle SET     copies binaries built by `make` into .gpu/
#   there: bench/gpu_session.sh [--no-bench] [--no-tests] [--sanitize] [--bench-args "..."]
# The carry to the GPU machine is limited to 64 MiB and every binary embeds all the kernel images
# (~21 MiB each), so the binaries travel in sets, one set per call:
#   sel    libaotk.so, test_sel_gpu and test_sel_calls_gpu (selection tests, check_selection.py, the benchmark; with
#          the public NSA kernel copied from its mirror, when fetched, as the selection rows' anchor)
#   dense  test_attn_fwd_gpu, test_attn_bwd_gpu
#   tools  aotk and libaotk.so                (aotk info / check, check_features.py, the benchmark)
#   fwd    libaotk.so and test_attn_fwd_gpu   (the forward's tests, the cross-checks, the benchmark)
# There it runs what the set holds: `aotk info` and `aotk check`, the GPU test binaries (optionally
# under compute-sanitizer), the torch cross-checks (bench/crosscheck/check_features.py and
# check_selection.py), and the benchmark, whose JSON merges into a copy of the committed results; logs and JSON go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=.gpu
if [ "${1:-}" = "--bundle" ]; then
  rm -rf "$bundle" && mkdir -p "$bundle"
  case "${2:-}" in
    sel) cp -L build/libaotk.so "$bundle"/libaotk.so && cp -a build/tests/test_sel_gpu build/tests/test_sel_calls_gpu "$bundle"/
         # Issue 12's anchor, the public NSA Triton kernel, where its mirror is on this machine (fetch
         # github:XunhaoLai/native-sparse-attention-triton): a copy in the ignored bundle, never committed.
         nsa_git=/work/.mirror/XunhaoLai+native-sparse-attention-triton/repo
         if [ -d "$nsa_git" ]; then
           mkdir -p "$bundle"/nsa && git --git-dir="$nsa_git" archive HEAD native_sparse_attention | tar -x -C "$bundle"/nsa
         fi ;;
    dense) cp -a build/tests/test_attn_fwd_gpu build/tests/test_attn_bwd_gpu "$bundle"/ ;;
    tools) cp -L build/libaotk.so "$bundle"/libaotk.so && cp -a build/aotk "$bundle"/ ;;
    fwd) cp -L build/libaotk.so "$bundle"/libaotk.so && cp -a build/tests/test_attn_fwd_gpu "$bundle"/ ;;
    *) echo "usage: $0 --bundle sel|dense|tools|fwd" >&2; exit 2 ;;
  esac
  du -sh "$bundle"
  exit 0
fi
bench=1 sanitize=0 tests=1 bench_args=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) bench=0 ;;
    --no-tests) tests=0 ;;
    --sanitize) sanitize=1 ;;
    --bench-args) bench_args="$2"; shift ;;
  esac
  shift
done
out=${OUT:-/tmp/aotk-gpu-session}
mkdir -p "$out"
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
gpu_tests=""
for t in test_attn_fwd_gpu test_attn_bwd_gpu test_sel_gpu test_sel_calls_gpu; do
  [ -x "$bundle/$t" ] && gpu_tests="$gpu_tests $t"
done
if [ -x "$bundle/aotk" ]; then
  "$bundle"/aotk info | tee "$out/info.txt"
fi
if [ "$tests" = 1 ]; then
  if [ -x "$bundle/aotk" ]; then
    "$bundle"/aotk check > "$out/check.txt" 2>&1 || status=1
    tail -n 3 "$out/check.txt"
  fi
  for t in $gpu_tests; do
    "$bundle/$t" > "$out/$t.txt" 2>&1 || status=1
    grep -v '^ok  ' "$out/$t.txt" | tail -n 12
  done
  if [ -f "$bundle/libaotk.so" ]; then
    # The torch-autograd cross-checks (they share no code with the C reference).
    python3 bench/crosscheck/check_features.py --lib "$bundle/libaotk.so" > "$out/check_features.txt" 2>&1 || status=1
    grep -v '^ok  ' "$out/check_features.txt" | tail -n 12
    python3 bench/crosscheck/check_selection.py --lib "$bundle/libaotk.so" > "$out/check_selection.txt" 2>&1 || status=1
    grep -v '^ok  ' "$out/check_selection.txt" | tail -n 12
  fi
fi
if [ "$sanitize" = 1 ]; then
  # The GPU suites under memcheck (Triton issue #10573 reports an illegal access in an attention
  # backward on 3.6.0).
  for t in $gpu_tests; do
    compute-sanitizer --tool memcheck --error-exitcode 3 "$bundle/$t" > "$out/memcheck_$t.txt" 2>&1 || status=1
    echo "memcheck $t: $(grep -E 'ERROR SUMMARY|passed,' "$out/memcheck_$t.txt" | tail -n 2 | tr '\n' ' ')"
  done
fi
if [ "$bench" = 1 ] && [ -f "$bundle/libaotk.so" ]; then
  cp bench/results/*.json "$out"/ 2>/dev/null  # rows of other ops are kept; this run's replace theirs
  # shellcheck disable=SC2086
  nsa_args=""
  [ -d "$bundle/nsa/native_sparse_attention" ] && nsa_args="--nsa-path $bundle/nsa"
  PYTHONUNBUFFERED=1 python3 bench/bench_attn.py --lib "$bundle/libaotk.so" --out-dir "$out" $nsa_args $bench_args \
    > "$out/bench.txt" 2>&1 || status=1
  tail -n 60 "$out/bench.txt"
fi
exit $status
