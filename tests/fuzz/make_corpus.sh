#!/usr/bin/env bash
# tests/fuzz/make_corpus.sh OUT_DIR [VRAMLUA_BIN]
# Builds the seed corpora OUT_DIR/{json,yaml,spec,lua_api,hostile} from examples/
# and tests/ (never committed: they live under a build directory). With
# VRAMLUA_BIN the spec seeds also include the YAML specs converted to JSON
# and the truth cases one per file.
set -euo pipefail
out=$1
bin=${2:-}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rm -rf "$out"
mkdir -p "$out/json" "$out/yaml" "$out/spec" "$out/lua_api" "$out/hostile"

n=0
seed() { # seed DIR FILE: copy FILE under a unique name
  n=$((n + 1))
  cp "$2" "$1/$(printf '%04d' "$n")_$(basename "$2")"
}
mapfile -t jsons < <(find "$src/examples" "$src/tests" -name '*.json' -size -64k -type f \
  ! -path '*/build*' | sort)
mapfile -t yamls < <(find "$src/examples" "$src/tests" \( -name '*.yaml' -o -name '*.yml' \) \
  -size -64k -type f ! -path '*/build*' | sort)
for f in "${jsons[@]}"; do seed "$out/json" "$f"; seed "$out/yaml" "$f"; done
# the alias bombs cost ~0.2 s each: tests/bad-inputs runs them; the fuzzer
# would spend its time re-expanding them
mapfile -t yamls < <(printf '%s\n' "${yamls[@]}" | grep -vE 'billion_laughs|alias_bomb')
for f in "${yamls[@]}"; do seed "$out/yaml" "$f"; done
for f in "${jsons[@]}"; do
  case "$f" in */tests/bad-inputs/spec/* | */tests/bad-inputs/case/* | */tests/bad-inputs/json/*) seed "$out/spec" "$f" ;; esac
done
if [ -n "$bin" ] && [ -x "$bin" ]; then
  "$bin" --trust run "$src/tests/fuzz/corpus.lua" "$out/spec" "${yamls[@]}" \
    "$src/tests/truth/cases_public.json" 2>/dev/null | tail -1
fi
# the API driver: the bad-input scripts and a few op sequences, as bytes
for f in "$src"/tests/bad-inputs/lua/*.lua; do seed "$out/lua_api" "$f"; done
printf '\x00\x00\x00\x03\x35\x08\x10\x00\x00\x01\x02\x0b\x03' >"$out/lua_api/ops_alloc"
printf '\x00\x00\x06\x02\x52\x48\x00\x00\x09\x00\x07\x00' >"$out/lua_api/ops_node_backward"
printf '\x03\x00\x03\x24\x11\x12\x03\x0d\x02\x13\x02' >"$out/lua_api/ops_terms"
printf '\x04\x0a{"a":[1,2]}\x05\xd0\x51' >"$out/lua_api/ops_json"
# the hostile-metatable driver (fuzz_hostile.c): op, tape slot, arguments
printf '\x00\x00\x01\x01\x00\x01\x00\x02\x00\x00\x05\x01\x01\x05\x03\x04\x02\x04\x01\x04\x00' >"$out/hostile/node_len_closes"
printf '\x00\x00\x00\x01\x01\x01\x00\x04\x00\x03\x00\x01\x02\x03\x02\x07\x03\x07\x00\x01\x02' >"$out/hostile/bulk_len_huge"
printf '\x00\x00\x00\x02\x02\x01\x01\x00\x02\x08\x00\x00\x09\x00\x00\x00\x00\x0a\x00\x00\x00\x00\x01\x01' >"$out/hostile/trace_weak_fit"
printf '\x00\x01\x01\x03\x01\x05\x01\x01\x06\x05\x02\x07\x01\x01\x0b\x00' >"$out/hostile/ckpt_reenter"
for d in json yaml spec lua_api hostile; do
  echo "corpus: $(find "$out/$d" -type f | wc -l) seeds for fuzz_$d"
done
