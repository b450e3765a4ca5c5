#!/usr/bin/env bash
# tests/fuzz/smoke.sh BUILD_DIR SECONDS [VRAMLUA_BIN [--prebuilt]]
# The ctest `fuzz.smoke`: builds the libFuzzer targets in BUILD_DIR with
# clang (tests/fuzz/build.sh; --prebuilt: BUILD_DIR is a VRAMLUA_FUZZ build
# that has them already), builds the seed corpora, and runs each target
# for SECONDS with a fixed seed. Fails on any crash, sanitizer report or
# failed check (the input is kept under BUILD_DIR/artifacts/), and replays
# the inputs under tests/fuzz/regressions/TARGET/; exits 77,
# which ctest reports as skipped, when clang with libFuzzer is missing.
set -uo pipefail
out=$1
secs=$2
bin=${3:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ "${4:-}" != "--prebuilt" ]; then
  bash "$here/build.sh" "$out"
  rc=$?
  [ $rc -ne 0 ] && exit $rc
fi
bash "$here/make_corpus.sh" "$out/corpus" "$bin" >/dev/null || exit 1
failed=0
for t in json yaml spec lua_api hostile; do
  rm -rf "$out/smoke/$t"
  mkdir -p "$out/smoke/$t" "$out/artifacts"
  log="$out/smoke/$t.log"
  "$out/tests/fuzz/fuzz_$t" -seed=1 -max_total_time="$secs" -max_len=4096 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$out/artifacts/$t-" \
    "$out/smoke/$t" "$out/corpus/$t" >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  if [ $rc -ne 0 ]; then
    failed=$((failed + 1))
    echo "FAIL fuzz_$t (exit $rc):"
    grep -E 'ERROR|SUMMARY|check failed|runtime error|Test unit written' "$log" | head -8
  else
    echo "fuzz_$t: ${execs:-?} executions, cov ${cov:-?}, no crash"
  fi
done
# inputs that once failed (tests/fuzz/regressions/TARGET/), replayed
for dir in "$here"/regressions/*/; do
  [ -d "$dir" ] || continue
  t=$(basename "$dir")
  for f in "$dir"*; do
    if ! "$out/tests/fuzz/fuzz_$t" "$f" >"$out/smoke/regression.log" 2>&1; then
      failed=$((failed + 1))
      echo "FAIL fuzz_$t on regression input $(basename "$f"):"
      grep -E 'ERROR|SUMMARY|runtime error' "$out/smoke/regression.log" | head -4
    else
      echo "fuzz_$t: regression input $(basename "$f") replayed"
    fi
  done
done
echo "fuzz: $((5 - failed)) passed, $failed failed (${secs}s per target)"
[ $failed -eq 0 ]
