#!/usr/bin/env bash
# shellcheck disable=SC2016  # case commands are single-quoted, then eval'd
# Reports people act on (issue 17): the terminal timeline, diff, --observed,
# knob advice and Markdown, each parsed from the command's output.
#   tests/cli/reports.sh /path/to/vramlua
# Same table as tests/cli/run.sh: t NAME EXPECTED_EXIT FRAGMENT COMMAND.
set -u
if [ $# -ne 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 /path/to/vramlua" >&2
  exit 2
fi
V=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
S=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export V S
D=$(mktemp -d "${TMPDIR:-/tmp}/vramlua-reports.XXXXXX") || exit 2
trap 'rm -rf "$D"' EXIT
export D
unset VRAMLUA_PATH
export LC_ALL=C.UTF-8 # the sparkline is counted in characters
# shellcheck source=tests/lib/verdict.sh
. "$S/tests/lib/verdict.sh"

t() {
  local out rc
  out=$(cd "$D" && eval "$4" 2>&1 </dev/null)
  rc=$?
  verdict "$1" "$2" "$3" "$out" "$rc"
}

printf 'model: { preset: qwen2_5_1_5b_instruct, overrides: { num_hidden_layers: 2 } }\nrun: { batch: 1, seq: 64, grad_checkpointing: full }\n' >"$D/small.yaml"

# ---------------------------------------------------------------- timeline
# the sparkline's columns, its letters and the legend agree with each other
t "estimate draws the timeline under the breakdown" 0 "timeline ok" \
  '"$V" estimate "$D/small.yaml" > out.txt || exit 1
   n=$(grep -n "^timeline (live tensors" out.txt | cut -d: -f1); [ -n "$n" ] || exit 3
   line=$(sed -n "$((n + 1))p" out.txt | sed "s/^  //"); marks=$(sed -n "$((n + 2))p" out.txt | sed "s/^  //")
   legend=$(sed -n "$((n + 3))p" out.txt)
   [ "$(printf %s "$line" | wc -m)" -eq "${#marks}" ] || exit 4
   for l in $(printf %s "$marks" | grep -o . | sort -u); do
     printf %s "$legend" | grep -q " $l=" || exit 5; done
   printf %s "$legend" | grep -q "=recompute" || exit 6
   grep -n "^component" out.txt | cut -d: -f1 | { read -r c; [ "$c" -lt "$n" ]; } || exit 7
   echo timeline ok'

# ---------------------------------------------------------------- writing
echo 'vram.write_file(arg[1], "x")' >"$D/writer.lua"
t "a sandboxed script cannot write, even a named file" 1 "writes only files named on the command line of a built-in command" \
  '"$V" run writer.lua w.txt; rc=$?; [ ! -e w.txt ] && exit $rc'
t "--html into a missing directory is a clean input error" 1 "--html: $D/no/such/p.html: cannot write" \
  '"$V" estimate small.yaml --json --html "$D/no/such/p.html" 2>&1 | grep -v "^ *[{}\"]"; exit "${PIPESTATUS[0]}"'
t "--html keeps --json parseable" 0 '"peak_bytes"' \
  '"$V" estimate small.yaml --json --html j.html > j.json && [ -s j.html ] && ! grep -q "html:" j.json && cat j.json'

echo "reports: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
