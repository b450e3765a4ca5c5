#!/usr/bin/env bash
# shellcheck disable=SC2016  # case commands are single-quoted, then eval'd
# Sandbox tests: tests/sandbox/run.sh /path/to/vramlua
#
# What a sandboxed script may read (vram.json.load, vram.yaml.load,
# require): below its own directory, below VRAMLUA_PATH and the share
# directory, and the files named on the command line -- resolved with
# realpath, so "..", symbolic links and the current directory do not widen
# it -- and, for the built-in commands only, the directories of the named
# files. --trust lifts the rule. Cases need directory layouts the
# bad-inputs table cannot express. Same format as tests/cli/run.sh:
#     t NAME EXPECTED_EXIT FRAGMENT COMMAND
# Ends with "sandbox: N passed, M failed".
set -u

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 /path/to/vramlua" >&2
  exit 2
fi
V=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
export V
D=$(mktemp -d "${TMPDIR:-/tmp}/vramlua-sandbox.XXXXXX") || exit 2
D=$(cd "$D" && pwd -P)
trap 'rm -rf "$D"' EXIT
export D
unset VRAMLUA_PATH

# shellcheck source=tests/lib/verdict.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/verdict.sh"

t() {
  local out rc
  out=$(cd "$D/cwd" && eval "$4" 2>&1 </dev/null)
  rc=$?
  verdict "$1" "$2" "$3" "$out" "$rc"
}

# ---------------------------------------------------------------- layout
#   proj/main.lua  proj/data/a.json  proj/lib/util.lua  proj/up.lua
#   proj/link_out.json -> ../outside/secret.json   proj/link_in.json -> data/a.json
#   outside/secret.json  outside/mod.lua  outside/spec.json (+ cfg.json)
#   path/extra.json  path/pmod.lua (a VRAMLUA_PATH root)  cwd/ (the working dir)
mkdir -p "$D/proj/data" "$D/proj/lib" "$D/outside" "$D/path" "$D/cwd" "$D/linked"
echo '{"v": "in"}' >"$D/proj/data/a.json"
echo '{"v": "secret"}' >"$D/outside/secret.json"
echo 'v: yaml' >"$D/outside/secret.yaml"
echo '{"v": "path"}' >"$D/path/extra.json"
echo '{"v": "cwd"}' >"$D/cwd/here.json"
echo 'return { v = "util" }' >"$D/proj/lib/util.lua"
echo 'return { v = "outside" }' >"$D/outside/mod.lua"
echo 'return { v = "pmod" }' >"$D/path/pmod.lua"
ln -s ../outside/secret.json "$D/proj/link_out.json"
ln -s data/a.json "$D/proj/link_in.json"
ln -s ../outside/mod.lua "$D/proj/evil.lua"
ln -s "$D/proj" "$D/linked/proj"
cp "$(dirname "$0")/../bad-inputs/spec/beside_config.json" "$D/outside/cfg.json"
printf 'model:\n  config: cfg.json\nrun:\n  batch: 1\n  seq: 16\n' >"$D/outside/spec.yaml"
printf 'model:\n  config: ../proj/data/a.json\nrun:\n  batch: 1\n  seq: 16\n' >"$D/outside/climb.yaml"
# main.lua: loads arg[1] with json (or yaml for .yaml), prints v
cat >"$D/proj/main.lua" <<'EOF'
local p = arg[1]
local load = p:match("%.ya?ml$") and vram.yaml.load or vram.json.load
print("v=" .. tostring(load(p).v))
EOF
echo 'print("v=" .. require(arg[1]).v)' >"$D/proj/req.lua"

# ---------------------------------------------------------------- cases
t "own tree: a file below the script"      0 "v=in"      '"$V" run ../proj/main.lua ../proj/data/a.json'
t "own tree: absolute path"                0 "v=in"      '"$V" run "$D/proj/main.lua" "$D/proj/data/a.json"'
t "own tree: a link that stays inside"     0 "v=in"      '"$V" run ../proj/main.lua ../proj/link_in.json'
t "own tree: reached through a linked dir" 0 "v=in"      '"$V" run ../linked/proj/main.lua ../proj/data/a.json'
t "named file outside the tree"            0 "v=secret"  '"$V" run ../proj/main.lua ../outside/secret.json'
t "named file via a link out of the tree"  0 "v=secret"  '"$V" run ../proj/main.lua ../proj/link_out.json'
t "link out of the tree, not named"        1 "outside the sandbox (resolves to $D/outside/secret.json" \
  'echo "print(vram.json.load(\"../proj/link_out.json\"))" >../proj/lo.lua; "$V" run ../proj/lo.lua'
t "climbing out with .."                   1 "../proj/../outside/secret.json: outside the sandbox" \
  'echo "print(vram.json.load(\"../proj/../outside/secret.json\"))" >../proj/climb.lua; "$V" run ../proj/climb.lua'
t "the working directory is not allowed"   1 "here.json: outside the sandbox" \
  'echo "print(vram.json.load(\"here.json\"))" >../proj/cwd.lua; "$V" run ../proj/cwd.lua'
t "a missing file inside: cannot open"     1 "cannot open"   '"$V" run ../proj/main.lua ../proj/data/none.json; echo "print(vram.json.load(\"../proj/data/none.json\"))" >../proj/m.lua; "$V" run ../proj/m.lua'
t "a missing file outside: refused"        1 "outside the sandbox" \
  'echo "print(vram.json.load(\"../outside/none.json\"))" >../proj/mo.lua; "$V" run ../proj/mo.lua'
t "yaml.load obeys the same rule"          1 "secret.yaml: outside the sandbox" \
  'echo "print(vram.yaml.load(\"../outside/secret.yaml\"))" >../proj/y.lua; "$V" run ../proj/y.lua'
t "sibling of a named file (run): refused" 1 "outside the sandbox" \
  'echo "print(vram.json.load((arg[1]:gsub(\"secret\", \"cfg\"))))" >../proj/sib.lua; "$V" run ../proj/sib.lua ../outside/secret.json'
t "VRAMLUA_PATH root may be read"          0 "v=path"    'VRAMLUA_PATH="$D/path" "$V" run ../proj/main.lua "$D/path/extra.json" && echo "print(vram.json.load(\"$D/path/extra.json\").v)" >../proj/p.lua && VRAMLUA_PATH="$D/path" "$V" run ../proj/p.lua'
t "without it, refused"                    1 "extra.json: outside the sandbox" \
  'echo "print(vram.json.load(\"$D/path/extra.json\").v)" >../proj/p2.lua; "$V" run ../proj/p2.lua'
t "share dir may be read"                  0 "ok"        'echo "assert(vram.json.load(vram.share_dir .. \"/tests/truth/cases_public.json\")) print(\"ok\")" >../proj/s.lua; "$V" run ../proj/s.lua'
t "search_roots lists VRAMLUA_PATH first"  0 "$D/path"   'echo "print(vram.search_roots[1])" >../proj/r.lua; VRAMLUA_PATH="$D/path" "$V" run ../proj/r.lua'
t "require beside the script"              0 "v=util"    '"$V" run ../proj/req.lua lib.util'
t "require from VRAMLUA_PATH"              0 "v=pmod"    'VRAMLUA_PATH="$D/path" "$V" run ../proj/req.lua pmod'
t "require through a link out: refused"    1 "evil.lua: outside the sandbox" '"$V" run ../proj/req.lua evil'
t "estimate: a config beside the spec"     0 "peak (tensors allocated)" '"$V" estimate ../outside/spec.yaml'
t "estimate: a config climbing out"        1 "" '"$V" estimate ../outside/climb.yaml'
t "estimate: the climb reads nothing"      1 "!v=in" '"$V" estimate ../outside/climb.yaml'
t "--trust lifts the rule"                 0 "v=secret"  'echo "print(\"v=\" .. vram.json.load(\"../outside/secret.json\").v)" >../proj/tr.lua; "$V" --trust run ../proj/tr.lua'
t "--trust says so"                        0 "--trust: sandbox lifted" '"$V" --trust run ../proj/tr.lua'
t "arg cannot be rewritten to widen it"    1 "outside the sandbox" \
  'echo "arg[1] = \"../outside/secret.json\" print(vram.json.load(arg[1]))" >../proj/a.lua; "$V" run ../proj/a.lua ../proj/data/a.json'

# budgets with no instruction count (the default): the CPU-time timer's
# ticks check the depth limit; a recursion that busy-loops past 100000 calls
# never meets Lua's own stack limit, only the tick
cat >"$D/proj/deep_busy.lua" <<'EOF'
local function f(n)
  if n > 100005 then while true do end end
  return 1 + f(n + 1)
end
print(f(1))
EOF
t "depth limit without an instruction count" 1 "calls nested more than 100000 deep" \
  '"$V" --max-seconds 5 run ../proj/deep_busy.lua'
t "a busy loop ends at the CPU budget"     1 "CPU time budget of 1 s" \
  'echo "while true do end" >../proj/busy.lua; "$V" --max-seconds 1 run ../proj/busy.lua'
# print keeps its lines in stdio's buffer (no flush per line, sandbox.c
# l_print): they still come before the error that follows them, and before
# the CPU or instruction budget's message when a loop runs away after them
printf 'print("first", 1, nil)\nprint("second")\nerror("third")\n' >"$D/proj/order.lua"
t "printed lines come before the error"     1 "$(printf 'first\t1\tnil\nsecond\nvramlua: ')" \
  '"$V" run ../proj/order.lua'
printf 'for i = 1, 3 do print("line " .. i) end\nwhile true do end\n' >"$D/proj/busy_after.lua"
t "printed lines survive the CPU budget"    1 "$(printf 'line 3\nvramlua: script exceeded its CPU')" \
  '"$V" --max-seconds 1 run ../proj/busy_after.lua'
t "printed lines survive the instruction budget" 1 "$(printf 'line 3\nvramlua: script exceeded 1000000')" \
  '"$V" --max-instructions 1000000 run ../proj/busy_after.lua'
t "--stats counts instructions"            0 "!stats: 0 instructions" \
  'echo "local x = 0 for i = 1, 100000 do x = x + i end" >../proj/count.lua; "$V" --stats run ../proj/count.lua'

echo "sandbox: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
