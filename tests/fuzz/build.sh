#!/usr/bin/env bash
# tests/fuzz/build.sh BUILD_DIR
# Configures BUILD_DIR with clang and -DVRAMLUA_FUZZ=ON and builds the five
# libFuzzer targets. Exits 77 (with the reason on stdout) when there is no
# clang with libFuzzer, so callers can report a skip.
set -uo pipefail
out=$1
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cc=${VRAMLUA_FUZZ_CC:-clang}
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "fuzz: skipped: '$cc' not found (apt-get install clang; VRAMLUA_FUZZ_CC names another)"
  exit 77
fi
probe=$(mktemp -d "${TMPDIR:-/tmp}/vramlua-fuzzprobe.XXXXXX")
trap 'rm -rf "$probe"' EXIT
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\nint LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' >"$probe/p.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
  echo "fuzz: skipped: $cc cannot link -fsanitize=fuzzer (no libFuzzer runtime)"
  exit 77
fi
cmake -S "$src" -B "$out" -DCMAKE_C_COMPILER="$cc" -DVRAMLUA_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVRAMLUA_WERROR=ON >/dev/null || exit 1
cmake --build "$out" -j"$(nproc)" --target fuzz_json fuzz_yaml fuzz_spec fuzz_lua_api fuzz_hostile \
  >"$out/fuzz-build.log" 2>&1 || { cat "$out/fuzz-build.log"; exit 1; }
