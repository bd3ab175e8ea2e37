#!/usr/bin/env bash
# Every GPU test binary under compute-sanitizer's tools, in one call on the GPU machine.
#   here:  bench/gpu_sanitize.sh --bundle
#          copies libaotk.a (stripped of debug sections), liblzma.a and the generated aotk_families.h into
#          build/gpu-main/archive/ (~34 MB; carry that folder).
#   there: [RUNS="tool:suite[:filter] ..."] bench/gpu_sanitize.sh [SECONDS] [JOBS]
#          links each tests/test_*_gpu.c against that archive (one 34 MB archive travels instead of one
#          33 MB static binary per suite, so every suite fits in one carry), then runs each suite under
#          each tool, JOBS processes at a time (default 12), each stopped after SECONDS (default 500).
#          RUNS picks the runs (default: every tool below over every suite; a filter is the suite's
#          AOTK_TEST_FILTER; the tool "none" runs the suite bare). The table of cases passed and errors
#          reported, and each run's reports grouped by the kernel line or host frame they name, go to
#          $OUT/sanitize/summary.txt; the logs, compressed, to $OUT/sanitize/logs.tar.xz.
# Tools: memcheck, synccheck and initcheck over every suite; racecheck over the suites whose kernels are
# not warp-specialized (selection, decoding but its sm_90 paged prefill): on the Gluon kernels racecheck
# reports the gl.warp_specialize hand-off (docs/design.md, "Sanitizers and the warp-specialized kernels").
set -uo pipefail
cd "$(dirname "$0")/.."
archive=build/gpu-main/archive
if [ "${1:-}" = "--bundle" ]; then
  mkdir -p "$archive"
  lzma=$(sed -n 's/^LZMA_STATIC_LIBRARY:FILEPATH=//p' build/CMakeCache.txt)
  cp build/libaotk.a "$archive"/ && strip -g "$archive"/libaotk.a && cp "$lzma" "$archive"/liblzma.a
  cp build/generated/aotk_families.h "$archive"/  # the family ids the internal headers include
  du -sh "$archive"
  exit 0
fi
seconds=${1:-500}
jobs=${2:-12}
out=${OUT:-/tmp/aotk-sanitize}/sanitize
bin=/tmp/aotk-sanitize-bin
mkdir -p "$out" "$bin"
includes="-Iinclude -Isrc/runtime -Isrc/attn -Isrc/decode -Isrc/check -Itests -I$archive"
suites=""
for source in tests/test_*_gpu.c; do
  # test_long_gpu (35 GB a process) was run under memcheck, synccheck and initcheck on its own.
  [ "$source" = tests/test_long_gpu.c ] && continue
  name=$(basename "$source" .c)
  if cc -O2 -std=gnu11 $includes "$source" "$archive"/libaotk.a "$archive"/liblzma.a -ldl -lm -lpthread \
        -o "$bin/$name" 2> "$out/link-$name.log"; then
    suites="$suites $name"
  else
    echo "link failed: $name (see link-$name.log)"
  fi
done
runs=${RUNS:-}
if [ -z "$runs" ]; then
  for suite in $suites; do
    for tool in memcheck synccheck initcheck; do runs="$runs $tool:$suite"; done
  done
  for suite in test_sel_gpu test_sel_calls_gpu test_decode_gpu test_merge_gpu; do runs="$runs racecheck:$suite"; done
fi
run_one() {
  IFS=: read -r tool suite filter <<< "$1"
  extra="" sanitizer="compute-sanitizer --tool $tool --print-limit 100000"
  [ "$suite" = test_stress_gpu ] && extra=20
  [ "$tool" = none ] && sanitizer=""
  name=$(log_name "$1")
  # Line-buffered, so that a suite stopped by the time limit still shows the cases it passed.
  AOTK_TEST_FILTER="$filter" timeout "$seconds" $sanitizer stdbuf -oL "$bin/$suite" $extra > "$out/$name.log" 2>&1
  echo "$?" > "$out/$name.rc"
}
log_name() { echo "$1" | tr ':' '-' | tr -c 'A-Za-z0-9_.\n-' '_'; }
export -f run_one log_name
export seconds bin out
printf '%s\n' $runs | xargs -P "$jobs" -I{} bash -c 'run_one {}'
{
  printf '%-10s %-20s %4s %6s %6s  %s\n' tool suite rc ok fail sanitizer
  for run in $runs; do
    IFS=: read -r tool suite filter <<< "$run"
    log="$out/$(log_name "$run").log"
    ok=$(grep -c '^ok ' "$log")
    failed=$(grep -c '^FAIL ' "$log")
    summary=$(grep -o -E '(ERROR|RACECHECK) SUMMARY: .*' "$log" | tail -n 1)
    [ -n "$summary" ] || summary="(stopped: $(grep -c '^========= [A-Z]' "$log") report lines)"
    printf '%-10s %-20s %4s %6s %6s  %s\n' "$tool" "$suite${filter:+:$filter}" "$(cat "${log%.log}.rc")" "$ok" "$failed" "$summary"
  done
  # Each report's first kernel location ("at kernel+0x... in file.py:line") or, for host API reports,
  # its innermost test frame: where the reports come from, counted.
  for run in $runs; do
    log="$out/$(log_name "$run").log"
    grep -q '^========= [A-Z]' "$log" || continue
    echo "== $run"
    awk '/^========= [A-Z]/ && !/SUMMARY/ {kind=$0; sub(/ at .*/, "", kind); sub(/0x[0-9a-f]+/, "X", kind); want=1; next}
         want && /^=========     at / {loc=$3; sub(/\+0x[0-9a-f]+/, "", loc); print kind " | " loc " " $5; want=0; next}
         want && /Host Frame: test_/ {print kind " | " $4; want=0}' "$log" | sort | uniq -c | sort -rn | head -n 15
  done
} | tee "$out/summary.txt"
tar -C "$out" -cJf "$out/logs.tar.xz" $(cd "$out" && ls *.log) && rm -f "$out"/*.log "$out"/*.rc
