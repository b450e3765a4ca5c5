#!/usr/bin/env bash
# Bad inputs: tests/bad-inputs/run.sh /path/to/vramlua
#
# Runs every row of cases.tsv (tab-separated):
#     FILE  COMMAND  EXTRA_ARGS  EXPECTED_EXIT  FRAGMENT  [NOTE]
# FILE is relative to this directory; "-" passes no file, DIR a directory,
# MISSING a path that does not exist, FIFO (FIFO.yaml) a named pipe with no
# writer. COMMAND is estimate, run or params.
# EXTRA_ARGS ("-" = none) are split on spaces and follow FILE, except the
# global options --trust, --debug, --max-instructions N, --max-memory N and
# --max-seconds N, which go before COMMAND. FRAGMENT must occur in stdout+stderr as a fixed string
# ("-" = no check; a leading "!" means it must NOT occur). A NOTE starting
# with "known_bug" marks a defect of the program: the row fails until it is
# fixed, and CK_EXCLUDE_TAGS=known_bug skips it (as in the other suites).
#
# Every case must also end by exit, never by a signal (exit < 128) or the
# per-case timeout (BAD_INPUTS_TIMEOUT, default 60 s), and print no
# sanitizer report (ASan, LSan, UBSan builds). Every input file must be used
# by some row. The cases run in a scratch copy of this directory, with the
# symbolic links that point out of it (lua/gen_*) made there. Prints one
# line per failure and ends with "bad-inputs: N passed, M failed".
set -u

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 /path/to/vramlua" >&2
  exit 2
fi
V=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
limit=${BAD_INPUTS_TIMEOUT:-60}

W=$(mktemp -d "${TMPDIR:-/tmp}/vramlua-bad.XXXXXX") || exit 2
trap 'rm -rf "$W"' EXIT
cp -R "$here/." "$W/"
rm -f "$W/run.sh" "$W/cases.tsv" "$W/README.md"
mkdir -p "$W/adir"
ln -s /etc/passwd "$W/lua/gen_link.lua"
ln -s /etc/passwd "$W/lua/gen_passwd.yaml"
# FIFOs (git cannot hold them): opening one for reading would block forever
mkfifo "$W/fifo.json" "$W/fifo.yaml" "$W/lua/gen_fifo.json" "$W/lua/gen_fifo.yaml"
unset VRAMLUA_PATH

# shellcheck source=tests/lib/verdict.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/verdict.sh"
TIMEOUT_S=$limit
skipped=0
declare -A used=()
row=0

while IFS=$'\t' read -r file cmd extra want frag note || [ -n "${file:-}" ]; do
  row=$((row + 1))
  case "$file" in '' | '#'*) continue ;; esac
  name="$cmd $file${extra:+ $extra}"
  name=${name% -}
  [ -e "$W/$file" ] && used[$file]=1
  if [[ ${note:-} == known_bug* ]]; then
    case ",${CK_EXCLUDE_TAGS:-}," in
      *,known_bug,*) skipped=$((skipped + 1)); continue ;;
    esac
  fi
  args=()
  case "$file" in
    -) ;;
    DIR) args+=(adir) ;;
    MISSING) args+=(no/such/file.json) ;;
    FIFO) args+=(fifo.json) ;;
    FIFO.yaml) args+=(fifo.yaml) ;;
    *)
      if [ ! -e "$W/$file" ]; then
        failed=$((failed + 1))
        echo "FAIL row $row ($name): no input file '$file'"
        continue
      fi
      used[$file]=1
      args+=("$file")
      ;;
  esac
  globals=()
  if [ "${extra:--}" != "-" ]; then
    read -r -a words <<<"$extra"
    i=0
    while [ $i -lt ${#words[@]} ]; do
      w=${words[$i]}
      case "$w" in
        --trust | --debug) globals+=("$w") ;;
        --max-instructions | --max-memory | --max-seconds) globals+=("$w" "${words[$((i + 1))]:-}"); i=$((i + 1)) ;;
        *) args+=("$w"); [ -e "$W/$w" ] && used[$w]=1 ;;
      esac
      i=$((i + 1))
    done
  fi
  out=$(cd "$W" && timeout -k 5 "$limit" "$V" "${globals[@]}" "$cmd" "${args[@]}" 2>&1 </dev/null)
  rc=$?
  verdict "${note:+[$note] }$name" "$want" "$frag" "$out" "$rc"
done <"$here/cases.tsv"

# every input is exercised by some row (the generated links are not inputs)
while IFS= read -r f; do
  f=${f#./}
  if [ -z "${used[$f]:-}" ]; then
    failed=$((failed + 1))
    echo "FAIL unused input: $f has no row in cases.tsv"
  fi
done < <(cd "$here" && find . -type f ! -name run.sh ! -name cases.tsv ! -name README.md | sort)

[ "$skipped" -gt 0 ] && echo "($skipped known-bug case(s) skipped)"
echo "bad-inputs: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
