#!/usr/bin/env bash
# tests/fuzz/run_long.sh [SECONDS [BUILD_DIR [VRAMLUA_BIN]]]
# Builds the libFuzzer targets (default BUILD_DIR: build-fuzz) and runs each
# for SECONDS (default 60) in fork mode, going on after crashes, with a
# corpus kept in BUILD_DIR/work/ between runs. Prints per target: executions,
# crashes (distinct inputs kept under BUILD_DIR/artifacts/<target>/, each with
# its first report line) and coverage: the edges of our C code (runtime/,
# every file linked into the target) the final corpus reaches, out of those
# instrumented.
set -uo pipefail
secs=${1:-60}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${2:-$src/build-fuzz}
bin=${3:-$src/build/vramlua}
here=$src/tests/fuzz
bash "$here/build.sh" "$out" || exit $?
bash "$here/make_corpus.sh" "$out/corpus" "$bin" >/dev/null || exit 1
printf '%-14s %12s %8s %10s %12s\n' target executions crashes "cov" "edges"
for t in json yaml spec lua_api hostile; do
  mkdir -p "$out/work/$t" "$out/artifacts/$t"
  log="$out/work/$t.log"
  "$out/tests/fuzz/fuzz_$t" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$out/artifacts/$t/" "$out/work/$t" "$out/corpus/$t" >"$log" 2>&1
  last=$(grep -E '^#[0-9]+: cov:' "$log" | tail -1)
  execs=$(sed -E 's/^#([0-9]+):.*/\1/' <<<"$last")
  # coverage of the corpus as it stands: edges its inputs reach
  "$out/tests/fuzz/fuzz_$t" -runs=0 -max_len=4096 -timeout=10 "$out/work/$t" \
    >"$out/work/$t.cov.log" 2>&1
  cov=$(grep -E 'INITED cov: [0-9]+' "$out/work/$t.cov.log" | tail -1 | grep -oE 'cov: [0-9]+' | grep -oE '[0-9]+')
  total=$(grep -oE 'Loaded 1 modules +\([0-9]+ inline 8-bit counters' "$out/work/$t.cov.log" | head -1 | grep -oE '\([0-9]+' | tr -d '(')
  crashes=$(find "$out/artifacts/$t" -type f | wc -l)
  pct="?"
  [ -n "$cov" ] && [ -n "$total" ] && pct=$(awk -v c="$cov" -v t="$total" 'BEGIN { printf "%.1f%%", 100 * c / t }')
  printf '%-14s %12s %8s %10s %12s\n' "fuzz_$t" "${execs:-?}" "$crashes" "${cov:-?} ($pct)" "${total:-?}"
  for a in $(find "$out/artifacts/$t" -type f | sort | head -20); do
    first=$("$out/tests/fuzz/fuzz_$t" "$a" 2>&1 | grep -m1 -E 'runtime error|ERROR: AddressSanitizer|check failed|ERROR: libFuzzer')
    echo "    $(basename "$a"): $first"
  done
done
