#!/usr/bin/env bash
# shellcheck disable=SC2016  # case commands are single-quoted, then eval'd
# Command-line tests: tests/cli/run.sh /path/to/vramlua
#
# Table-driven: each `t` line below is one case,
#     t NAME EXPECTED_EXIT FRAGMENT COMMAND
# COMMAND is a bash string run in a scratch directory ($D) with stdout and
# stderr together; FRAGMENT must occur in that output as a fixed string
# ("" = no check; a leading "!" means it must NOT occur). Every case must
# also end by exit, never by a signal (exit code < 128).
# `k` lines are the same for known bugs (they fail until the program is
# fixed); CK_EXCLUDE_TAGS=known_bug skips them, as in the C unit tests.
# Prints one line per failure and ends with "cli: N passed, M failed".
set -u

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 /path/to/vramlua" >&2
  exit 2
fi
V=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
export V

D=$(mktemp -d "${TMPDIR:-/tmp}/vramlua-cli.XXXXXX") || exit 2
trap 'rm -rf "$D"' EXIT
export D
unset VRAMLUA_PATH

# shellcheck source=tests/lib/verdict.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/verdict.sh"

t() {
  local out rc
  out=$(cd "$D" && eval "$4" 2>&1 </dev/null)
  rc=$?
  verdict "$1" "$2" "$3" "$out" "$rc"
}

k() {
  case ",${CK_EXCLUDE_TAGS:-}," in
    *,known_bug,*) skipped=$((skipped + 1)) ;;
    *) t "known bug: $1" "$2" "$3" "$4" ;;
  esac
}
skipped=0

# ---------------------------------------------------------------- scripts
mkdir -p "$D/lib/scripts" "$D/other" "$D/mods/pkg"
cat >"$D/error.lua" <<'EOF'
local x = 1
error("deliberate failure")
EOF
echo 'print(vram.bytes("nvfp4", 4096, 4096))' >"$D/nvfp4.lua"
echo 'print("n=" .. select("#", ...), arg[1], arg[2], arg[0], ...)' >"$D/args.lua"
echo 'local x = = 1' >"$D/syntax.lua"
echo 'while true do end' >"$D/loop.lua"
echo 'local t = {} for i = 1, 1e9 do t[i] = string.rep("x", 1024) .. i end' >"$D/bomb.lua"
echo 'print("heap under 1 MiB:", collectgarbage("count") < 1024)' >"$D/heap.lua"
echo 'local n = 0 for i = 1, 100000 do n = n + #(string.rep("x", 1024) .. i) end print(n >> 20)' \
  >"$D/garbage.lua"
echo 'local s = string.rep("x", 1 << 30)' >"$D/bigstring.lua"
echo 'print("execute:", os.execute == nil, "getenv:", os.getenv == nil, "remove:", os.remove == nil, "exit:", os.exit == nil)' >"$D/os.lua"
echo 'local g = rawget print("io:", g(_G, "io") == nil, "package:", g(_G, "package") == nil, "debug:", g(_G, "debug") == nil, "dofile:", g(_G, "dofile") == nil, "loadfile:", g(_G, "loadfile") == nil)' >"$D/globals.lua"
echo 'print("clock", type(os.clock()), type(os.time()), type(os.date("%Y")))' >"$D/clock.lua"
echo 'local f = io.open("/etc/passwd") print(f)' >"$D/io.lua"
echo 'print(rawget(_G, "io") ~= nil and "io-present" or "io-missing")' >"$D/trusted.lua"
echo 'local f, e = load("\27LuaT\0\25\147\r\n\26\n") print("binary:", f, e)' >"$D/bytecode.lua"
echo 'print(load("return 1 + 1")())' >"$D/loadtext.lua"
echo 'require("stdlib.step").simulate(nil, nil)' >"$D/stdlib_error.lua"
echo 'print("found in VRAMLUA_PATH")' >"$D/lib/name.lua"
echo 'print("found in scripts/")' >"$D/lib/scripts/tool.lua"
echo 'return { value = 42 }' >"$D/mods/pkg/mod.lua"
echo 'print("module value", require("pkg.mod").value, require("pkg.mod") == require("pkg.mod"))' >"$D/mods/usemod.lua"
echo 'print(pcall(require, "../error"))' >"$D/mods/climb.lua"
echo 'error({ msg = "bad input: x must be > 0", code = 3 })' >"$D/structured.lua"
echo 'error(setmetatable({}, { __tostring = function() return "custom object" end }))' >"$D/object.lua"
echo 'print(require("vram") == vram, vram.version)' >"$D/requirevram.lua"
echo 'error("x")' >"$D/at line1.lua"

# ---------------------------------------------------------------- cases
# Commands are single-quoted on purpose: they are eval'd inside t().
t "no arguments print usage"             2 "usage:"                 '"$V"'
t "no arguments name the problem"        2 "no command given"       '"$V"'
t "--help prints usage"                  0 "usage: vramlua"         '"$V" --help'
t "-h prints usage"                      0 "Commands:"              '"$V" -h'
t "--version prints the version"         0 "vramlua 0.1.0"          '"$V" --version'
t "--version names Lua"                  0 "(Lua 5.4)"              '"$V" --version'
t "unknown command"                      2 "unknown command"        '"$V" frobnicate'
t "unknown command is named"             2 "'frobnicate'"           '"$V" frobnicate'
t "unknown option"                       2 "unknown option '--frob'" '"$V" --frob run x.lua'
t "option value missing"                 2 "needs a non-negative integer" '"$V" --max-instructions'
t "option value negative"                2 "needs a non-negative integer" '"$V" --max-memory -1 run nvfp4.lua'
t "option value not a number"            2 "needs a non-negative integer" '"$V" --max-memory 12x run nvfp4.lua'
t "memory option too large"              2 "too large"              '"$V" --max-memory 99999999999999 run nvfp4.lua'
t "run without a script"                 2 "run needs a SCRIPT"     '"$V" run'
t "run a missing file"                   1 "cannot find script"     '"$V" run no_such_script.lua'
t "run a directory"                      1 "cannot find script"     '"$V" run lib'
t "script error names file and line"     1 "error.lua:2: deliberate failure" '"$V" run error.lua'
t "script error has no traceback"        1 "!stack traceback"       '"$V" run error.lua'
t "--debug: script error has a traceback" 1 "stack traceback"       '"$V" --debug run error.lua'
t "--debug: it has one traceback"        1 "!in ?"$'\n'"stack traceback" '"$V" --debug run error.lua'
t "script with a space in its name"      1 "at line1.lua:1: x"      '"$V" run "at line1.lua"'
t "structured error uses its code"       3 "vramlua: bad input: x must be > 0" '"$V" run structured.lua'
t "structured error has no traceback"    3 "!stack traceback"       '"$V" run structured.lua'
t "error object with __tostring"         1 "custom object"          '"$V" run object.lua'
t "nvfp4 bytes of a 4096 square"         0 "9437188"                '"$V" run nvfp4.lua'
t "vram is preloaded and requirable"     0 "true	0.1.0"             '"$V" run requirevram.lua'
t "args reach ... and arg"               0 "n=2	a	b c	args.lua	a	b c" '"$V" run args.lua a "b c"'
t "no args: ... is empty"                0 "n=0"                    '"$V" run args.lua'
t "syntax error exits 1"                 1 "syntax.lua:1:"          '"$V" run syntax.lua'
t "syntax error is described"            1 "unexpected symbol"      '"$V" run syntax.lua'
t "instruction budget stops a loop"      1 "exceeded"               '"$V" --max-instructions 100000 run loop.lua'
t "instruction budget names the option"  1 "--max-instructions"     '"$V" --max-instructions 100000 run loop.lua'
t "memory budget stops a table bomb"     1 "MiB"                    '"$V" --max-memory 16 run bomb.lua'
t "memory budget names the budget"       1 "exceeded 16 MiB"        '"$V" --max-memory 16 run bomb.lua'
t "memory budget stops a string bomb"    1 "MiB"                    '"$V" --max-memory 16 run bigstring.lua'
# the first collection waits for 16 MiB of allocation (runtime/host/sandbox.c
# vh_newstate): the heap a script counts is its own, and 98 MiB of garbage
# made under a budget of 8 MiB is collected when the budget is reached
t "collectgarbage counts the script's heap" 0 "heap under 1 MiB:	true" '"$V" run heap.lua'
t "garbage is collected under a budget"  0 "98"                     '"$V" --max-memory 8 run garbage.lua'
t "sandbox: os keeps only the clock"     0 "execute:	true	getenv:	true	remove:	true	exit:	true" '"$V" run os.lua'
t "sandbox: no io, package, debug, files" 0 "io:	true	package:	true	debug:	true	dofile:	true	loadfile:	true" '"$V" run globals.lua'
t "sandbox: clock, time and date work"   0 "clock	number	number	string" '"$V" run clock.lua'
t "sandbox: io.open fails"               1 "io"                     '"$V" run io.lua'
t "sandbox: io is an undefined global"  1 "undefined global 'io'"          '"$V" run io.lua'
t "sandbox: no bytecode"                 0 "binary:	nil"            '"$V" run bytecode.lua'
t "sandbox: text chunks load"            0 "2"                      '"$V" run loadtext.lua'
# The built-in Lua is loaded precompiled (runtime/bind/builtin.h); its
# errors and tracebacks name the same files and lines as the text would.
t "built-in Lua loads precompiled"       0 ", 0 as text" \
  '"$V" --stats estimate "$(dirname "$V")/../examples/specs/qwen2_5_1_5b_full.yaml" --json 2>&1 >/dev/null'
t "built-in Lua: some files precompiled" 0 "!Lua files: 0 precompiled" \
  '"$V" --stats estimate "$(dirname "$V")/../examples/specs/qwen2_5_1_5b_full.yaml" --json 2>&1 >/dev/null'
t "VRAMLUA_SOURCE_ONLY=1 parses as text" 0 "Lua files: 0 precompiled (0 by their stamp" \
  'VRAMLUA_SOURCE_ONLY=1 "$V" --stats run loadtext.lua'
# a built-in file's stamp (size and modification time, builtin.h) stands
# for its bytes only at the path the build read: a copy elsewhere of the
# same size and time, one byte changed, is read, hashed and parsed as text
t "a stamp holds at the build's path only" 0 ", 2 as text" \
  'R="$(dirname "$V")/.."; mkdir -p over/stdlib && cp -p "$R/stdlib/args.lua" over/stdlib/ &&
   sed -i "1s/arguments/argumentz/" over/stdlib/args.lua &&
   touch -r "$R/stdlib/args.lua" over/stdlib/args.lua && ! cmp -s over/stdlib/args.lua "$R/stdlib/args.lua" &&
   [ "$(stat -c %s.%Y over/stdlib/args.lua)" = "$(stat -c %s.%Y "$R/stdlib/args.lua")" ] &&
   echo "require(\"stdlib.args\")" >uses_args.lua &&
   VRAMLUA_PATH="$D/over" "$V" --stats run uses_args.lua 2>&1'
# Lua seeds its string hashes per process: nothing that reaches the output
# may follow pairs() order (composed layers' gradients did, issue 18)
t "the timeline page is the same every run" 0 "same page" \
  'S="$(dirname "$V")/../examples/specs/yxanul.yaml"; "$V" estimate "$S" --html p.html >/dev/null && cp p.html p1.html && "$V" estimate "$S" --html p.html >/dev/null && cmp -s p.html p1.html && echo "same page"'
# the same message and traceback, but the name of a local variable: the
# precompiled chunks leave those out (runtime/host/precompile.c)
t "precompiled errors name file and line" 0 "stdlib/step.lua:" \
  'a=$("$V" --debug run stdlib_error.lua 2>&1); b=$(VRAMLUA_SOURCE_ONLY=1 "$V" --debug run stdlib_error.lua 2>&1)
   echo "$b" | grep -q "(local '"'"'run'"'"')" || exit 2
   [ "$a" = "$(echo "$b" | sed "s/ (local '"'"'[A-Za-z_0-9]*'"'"')//")" ] && echo "$a"'
t "--trust gives io"                     0 "io-present"             '"$V" --trust run trusted.lua'
t "--trust prints a notice"              0 "--trust"                '"$V" --trust run trusted.lua'
t "without --trust there is no io"       0 "io-missing"             '"$V" run trusted.lua'
t "without --trust there is no notice"   0 "!--trust"               '"$V" run trusted.lua'
t "VRAMLUA_PATH finds a script"          0 "found in VRAMLUA_PATH"  'cd other && VRAMLUA_PATH="$D/lib" "$V" run name.lua'
t "VRAMLUA_PATH with several entries"    0 "found in VRAMLUA_PATH"  'cd other && VRAMLUA_PATH="/nonexistent:$D/lib" "$V" run name.lua'
t "VRAMLUA_PATH scripts/ directory"      0 "found in scripts/"      'cd other && VRAMLUA_PATH="$D/lib" "$V" run tool.lua'
t "no VRAMLUA_PATH, not found"           1 "cannot find script"     'cd other && "$V" run name.lua'
# a folder of modules missing beside the script is looked for once
# (runtime/host/search.c): the second module under it is still found in
# VRAMLUA_PATH, and one beside the script in a folder that exists still wins
mkdir -p "$D/lib/team" "$D/other/team"
echo 'return "a from VRAMLUA_PATH"' >"$D/lib/team/a.lua"
echo 'return "b from VRAMLUA_PATH"' >"$D/lib/team/b.lua"
echo 'return "c beside the script"' >"$D/other/team/c.lua"
echo 'return "c from VRAMLUA_PATH"' >"$D/lib/team/c.lua"
echo 'print(require("team.a"), require("team.b"))' >"$D/mods/twice.lua"
echo 'print(require("team.c"))' >"$D/other/beside.lua"
t "modules under a folder missing beside the script" 0 "a from VRAMLUA_PATH	b from VRAMLUA_PATH" \
  'VRAMLUA_PATH="$D/lib" "$V" run mods/twice.lua'
t "a module beside the script still wins" 0 "c beside the script" \
  'VRAMLUA_PATH="$D/lib" "$V" run other/beside.lua'
t "script by absolute path"              0 "9437188"                'cd other && "$V" run "$D/nvfp4.lua"'
t "modules found beside the script"      0 "module value	42	true" 'cd other && "$V" run "$D/mods/usemod.lua"'
t "module names cannot climb"            0 "not found"              '"$V" run mods/climb.lua'
t "help lists commands"                  0 "Commands:"              '"$V" help'
t "help run"                             0 "usage: vramlua run SCRIPT" '"$V" help run'
t "help of an unknown command"           2 "unknown command"        '"$V" help frobnicate'
t "a command name cannot be a path"      2 "unknown command '../cli/estimate'" '"$V" ../cli/estimate'
# every scripts/cli/NAME.lua is a command: listed by `help` with the
# synopsis and summary of its first two lines, and `help NAME` is its --help
for f in "$(dirname "${BASH_SOURCE[0]}")"/../../scripts/cli/*.lua; do
  name=$(basename "$f" .lua)
  syn=$(sed -n '1s/^-- vramlua //p' "$f")
  sum=$(sed -n '2s/^-- //p' "$f")
  t "cli/$name.lua starts with its synopsis and summary" 0 "$name" 'test -n "$sum" && echo "$syn"'
  t "help lists $name"                   0 "  $syn"                 '"$V" help'
  t "help lists what $name does"         0 "$sum"                   '"$V" help'
  t "help $name runs its --help"         0 "usage: vramlua $name"   '"$V" help "$name"'
done

# ---------------------------------------------------------------- commands
printf 'model: { preset: qwen2_5_1_5b_instruct }\nrun: { batch: 1, seq: 64 }\n' >"$D/spec.yaml"
printf 'model: { preset: qwen2_5_1_5b_instruct }\nrun: { batch: 1, seq: 64, bach: 2 }\n' \
  >"$D/typo.yaml"
printf '{"model_type": "frobnet", "hidden_size": 8}' >"$D/unknown.json"
t "params of a preset, exact"            0 "4437815808"  '"$V" params qwen3_vl_4b_instruct --json'
t "params of an unknown model_type"      1 "add models/" '"$V" params "$D/unknown.json"'
FIX=$(cd "$(dirname "${BASH_SOURCE[0]}")/../lua/fixtures" && pwd)
t "params beside safetensors shards"     0 "config count equals the checkpoint's: 80,704" \
  '"$V" params "$FIX/ckpt_qwen2_tiny/config.json"'
t "params of a quantized checkpoint"     0 "quantized: the weights vramlua prices, 139,680" \
  '"$V" params "$FIX/ckpt_gpt_oss_tiny/config.json"'
t "params of a safetensors file alone"   0 '95952' \
  '"$V" params "$FIX/ckpt_gpt_oss_tiny/model.safetensors" --json'
t "params of a file that is no checkpoint" 1 "not a safetensors file" \
  'printf "{\"a\": 1}" >"$D/x.safetensors" && "$V" params "$D/x.safetensors"'
mkdir -p "$D/abs/m" "$D/abs/s"
printf '{"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "num_local_experts": 4, "num_experts_per_tok": 2}' >"$D/abs/m/config.json"
printf 'model: { config: %s/abs/m/config.json }\nrun: { batch: 1, seq: 16 }\n' "$D" >"$D/abs/s/spec.yaml"
t "a spec names its config by absolute path, cwd above it" 0 "peak (tensors allocated)" \
  '"$V" estimate "$D/abs/s/spec.yaml"'
# from a working directory that holds neither: the spec named on the command
# line makes what it names the user's own (vram.allow_named)
mkdir -p "$D/elsewhere"
t "a spec names its config by absolute path, cwd elsewhere" 0 "peak (tensors allocated)" \
  'cd elsewhere && "$V" estimate "$D/abs/s/spec.yaml"'
printf 'model: { config: ../m }\nrun: { batch: 1, seq: 16 }\n' >"$D/abs/s/up.yaml"
t "a spec names a config folder above it"  0 "peak (tensors allocated)" \
  'cd elsewhere && "$V" estimate "$D/abs/s/up.yaml"'
t "a script cannot grant itself reads"     0 "nil" \
  'printf "print(vram.allow_named)" >"$D/grant.lua" && "$V" run "$D/grant.lua"'
t "--html onto a FIFO is refused, no hang" 1 "cannot write" \
  'mkfifo "$D/out.fifo" && "$V" estimate "$D/abs/s/spec.yaml" --html "$D/out.fifo"'
t "models lists the presets"             0 "qwen2_5_7b_instruct" '"$V" models'
t "estimate --json has peak_bytes"       0 '"peak_bytes"' '"$V" estimate "$D/spec.yaml" --json'
t "estimate on an unknown GPU"           1 "unknown GPU" '"$V" estimate "$D/spec.yaml" --gpu nope'
t "estimate suggests a misspelt field"   1 "did you mean 'batch'" '"$V" estimate "$D/typo.yaml"'
t "estimate of one truth case"           0 "peak_bytes" \
  '"$V" estimate "$(dirname "$V")/../tests/truth/cases_public.json" --case p01_qwen3_fp32_adamw --json'
t "fit finds a batch"                    0 "largest batch that fits" \
  '"$V" fit "$D/spec.yaml" --gpu rtx4090 --vary batch --max 64'
t "sweep agrees with estimate"           0 "agree" \
  'e=$("$V" estimate "$D/spec.yaml" --json | sed -n "s/.*\"peak_bytes\":[^0-9]*\([0-9]*\).*/\1/p");
   w=$("$V" sweep "$D/spec.yaml" --batch 1 --seq 64 | sed -n "2p" | cut -d, -f3);
   [ -n "$e" ] && [ "$e" = "$w" ] && echo agree || echo "differ: $e vs $w"'
t "sweep rejects a bad list"             2 "positive integers" '"$V" sweep "$D/spec.yaml" --seq 0,x'
# a loss in chunks of 4 rows has no program: each point simulated, said first
printf 'model: { preset: qwen2_5_1_5b_instruct, overrides: { num_hidden_layers: 2 } }\nrun: { batch: 2, seq: 64, loss: { impl: chunked, chunk_rows: 4 } }\n' \
  >"$D/chunk4.yaml"
t "sweep of a run that does not compile simulates" 0 "agree" \
  'e=$("$V" estimate "$D/chunk4.yaml" --json | sed -n "s/.*\"peak_bytes\":[^0-9]*\([0-9]*\).*/\1/p");
   out=$("$V" sweep "$D/chunk4.yaml" --batch 2 --seq 64); w=$(echo "$out" | grep "^2,64," | cut -d, -f3);
   echo "$out" | grep -q "^# not compiled (each point simulated)" &&
   [ -n "$e" ] && [ "$e" = "$w" ] && echo agree || echo "differ: $e vs $w"'
printf 'model: { preset: qwen2_5_1_5b_instruct }\nrun: { batch: 1, seq: 64, lora: { rank: 8 } }\n' \
  >"$D/lora8.yaml"
printf 'model: { preset: qwen2_5_1_5b_instruct }\nrun: { batch: 3, seq: 80, lora: { rank: 40 }, grad_accum: 2 }\n' \
  >"$D/lora40.yaml"
t "sweep over other knobs agrees with estimate" 0 "agree" \
  'e=$("$V" estimate "$D/lora40.yaml" --json | sed -n "s/.*\"peak_bytes\":[^0-9]*\([0-9]*\).*/\1/p");
   w=$("$V" sweep "$D/lora8.yaml" --batch 3 --seq 80 --rank 8,40 --accum 2 | grep "^3,80,40,2," | cut -d, -f5);
   [ -n "$e" ] && [ "$e" = "$w" ] && echo agree || echo "differ: $e vs $w"'
t "sweep --image of a text model"        1 "takes no images" \
  '"$V" sweep "$D/spec.yaml" --image 448x448'
t "sweep --image needs WIDTHxHEIGHT"     2 "WIDTHxHEIGHT" '"$V" sweep "$D/spec.yaml" --image 448'

t "doctor refuses a CPU host"            1 "cpu-only" '"$V" doctor "$D/spec.yaml" --gpu cpu'
t "doctor holds an Apple GPU to its working set" 1 "the device lets a step use 12.00 GiB of 16.00 GiB" \
  '"$V" doctor "$D/spec.yaml" --gpu m2-16gb'
t "recipes run from any directory"       0 "Qwen2.5-1.5B-Instruct" '"$V" run recipes/quickstart.lua'
# the example of a model outside models/ (its own closed-form parameter
# count is asserted inside it)
t "the custom model example runs"        0 "TinyMoE-VL: 8 experts" '"$V" run examples/custom_model.lua'
# a shared budget script travels as a folder: its require("team") resolves
# beside the script wherever the folder is copied
cp -r "$(dirname "$V")/../examples/shared" "$D/received"
printf 'local s = string.rep("a", 30000)\nprint(string.find(s, ".-.-.-.-x"))\n' >"$D/backtrack.lua"
t "a long C call stops at the CPU budget" 1 "CPU time" '"$V" --max-seconds 1 run "$D/backtrack.lua"'
t "a received shared script runs"        0 "largest batch" \
  '"$V" run "$D/received/lora_plan.lua" --preset qwen2_5_1_5b_instruct --seq 256'
t "a shared script states its version"   1 "needs vramlua 9.0" \
  'printf "local v = require(\"vram\")\nv.require_version(\"9.0\")\n" > "$D/newer.lua"; "$V" run "$D/newer.lua"'
# per-rank budgets (stdlib/parallel.lua) from the example specs
EX="$(dirname "$V")/../examples/specs"
export EX
t "estimate of a ZeRO-3 run has per_rank" 0 '"per_rank"' \
  '"$V" estimate "$EX/mistral_small_24b_zero3_8gpu.yaml" --json'
t "a pipeline run prints a table per stage" 0 "== last stage (ranks 4-7)" \
  '"$V" estimate "$EX/qwen2_5_7b_tp2_pp2_dp2.yaml"'
t "an FSDP offload run states host memory" 0 "host memory (offload, pinned)" \
  '"$V" estimate "$EX/qwen3_4b_fsdp_cpu_offload.yaml"'
t "an expert-parallel MoE run has per_rank" 0 '"inflight_microbatches"' \
  '"$V" estimate "$EX/qwen3_30b_a3b_ep8_8gpu.yaml" --json'
t "fit --gpus lists layouts"              0 "layouts of 8 GPUs fit" \
  '"$V" fit "$EX/qwen2_5_7b_tp2_pp2_dp2.yaml" --gpu h100-80gb --gpus 8'
t "estimate --gpus on a run spec is refused, not ignored" 2 "is a run spec: --gpus gives another tool's config its world size" \
  '"$V" estimate "$EX/qwen2_5_1_5b_full.yaml" --gpus 8'
t "sweep --gpus on a run spec is refused, not ignored" 2 "write the layout in parallel: (dp: 4)" \
  '"$V" sweep "$EX/qwen2_5_1_5b_full.yaml" --batch 1,2 --gpus 4'
t "sweep of a parallel spec is its largest rank, as estimate" 0 "agree" \
  'e=$("$V" estimate "$EX/qwen2_5_7b_tp2_pp2_dp2.yaml" --json | grep -o "\"device_total_bytes\":[^0-9]*[0-9]*" | head -1 | grep -o "[0-9]*$");
   w=$("$V" sweep "$EX/qwen2_5_7b_tp2_pp2_dp2.yaml" --seq 2048,4096 | grep "^1,4096," | cut -d, -f3);
   [ -n "$e" ] && [ "$e" = "$w" ] && echo agree || echo "differ: $e vs $w"'
sed 's/^  tp: 2$/  tp: 4/; s/^  zero: 1$/  zero: 3/' "$EX/qwen2_5_7b_tp2_pp2_dp2.yaml" >"$D/tp4.yaml"
t "sweep --tp --zero of a parallel spec agrees with estimate" 0 "agree" \
  'e=$("$V" estimate "$D/tp4.yaml" --json | grep -o "\"device_total_bytes\":[^0-9]*[0-9]*" | head -1 | grep -o "[0-9]*$");
   w=$("$V" sweep "$EX/qwen2_5_7b_tp2_pp2_dp2.yaml" --tp 2,4 --zero 1,3 | grep "^1,4096,4,3," | cut -d, -f5);
   [ -n "$e" ] && [ "$e" = "$w" ] && echo agree || echo "differ: $e vs $w"'
t "sweep --tp of a one-GPU spec"         1 "tp: is a parallel knob: the spec has no parallel: table" \
  '"$V" sweep "$EX/qwen2_5_1_5b_full.yaml" --tp 2'
t "fit needs a mode"                      2 "fit needs --vary KNOB, --knobs or --gpus N" \
  '"$V" fit "$EX/qwen2_5_7b_tp2_pp2_dp2.yaml" --gpu h100-80gb'
t "a misspelt parallel key is named"      1 "parallel.zer: unknown field; did you mean 'zero'?" \
  'sed "s/  zero: 3/  zer: 3/" "$EX/mistral_small_24b_zero3_8gpu.yaml" > "$D/zer.yaml";
   cp "$EX/../configs/mistral_small_3_1_24b_instruct_2503.json" "$D/";
   sed -i "s/preset: mistral_small_3_1_24b_instruct_2503/config: mistral_small_3_1_24b_instruct_2503.json/" "$D/zer.yaml";
   "$V" estimate "$D/zer.yaml"'

# ---------------------------------------------------------------- other tools' configs
F="$(dirname "$V")/../examples/formats"
t "LLaMA-Factory YAML estimates"         0 "translated from llamafactory config" \
  '"$V" estimate "$F/llamafactory_qwen2_5_7b_lora_sft.yaml" --gpu h100'
t "ZeRO-3 gets per-rank budgets"         0 "== all ranks (ranks 0)" \
  '"$V" estimate "$F/llamafactory_llama3_full_dpo_ds3.yaml"'
t "axolotl --explain prints a run spec"  0 "weights: nf4_dq" \
  '"$V" estimate "$F/axolotl_mistral_qlora.yml" --explain'
t "--explain output loads as a spec"     0 "peak (tensors allocated)" \
  '"$V" estimate "$F/trl_sft_qwen2_5_1_5b.yaml" --explain > "$D/explained.yaml" && "$V" estimate "$D/explained.yaml"'
t "vLLM prints its KV capacity"          0 "GPU KV cache size:" \
  '"$V" estimate "$F/vllm_serve_qwen2_5_7b.sh" --gpu h100'
t "vLLM needs a GPU"                     2 "needs --gpu NAME" '"$V" estimate "$F/vllm_engine_llama3_tp2.yaml"'
t "fit refuses a serving config"         2 "vLLM serving config" \
  '"$V" fit "$F/vllm_serve_qwen2_5_7b.sh" --gpu h100 --vary batch'
t "GRPO colocated vLLM is subtracted"    0 "colocated vLLM" '"$V" estimate "$F/trl_grpo_colocate.yaml" --gpu h200'
t "an unknown --format"                  2 "did you mean 'axolotl'" \
  '"$V" estimate "$F/axolotl_mistral_qlora.yml" --format axolotel'
t "accelerate needs --seq"               2 "pass --seq N" '"$V" estimate "$F/accelerate_fsdp.yaml"'
t "accelerate with --seq and --model"    0 "world_size=4, fsdp=full_shard" \
  '"$V" doctor "$F/accelerate_fsdp.yaml" --seq 512 --model Qwen/Qwen2.5-1.5B --gpu h100'
printf 'stage: sft\nmodel_name_or_path: Qwen/Qwen2.5-1.5B\nfrobnicate: 3\n' >"$D/lf_unknown.yaml"
t "unknown keys are listed, not fatal"   0 "not understood (not priced): frobnicate=3" \
  '"$V" estimate "$D/lf_unknown.yaml"'
printf 'stage: sft\nmodel_name_or_path: acme/unknown-7b\n' >"$D/lf_nomodel.yaml"
t "an unresolved model names 3 fixes"    1 "Fix it one of three ways: pass --model CONFIG.json" \
  'HF_HOME="$D/nohf" "$V" estimate "$D/lf_nomodel.yaml"'
t "--model overrides the file's model"   0 "qwen2_5_1_5b_instruct.json (file)" \
  'HF_HOME="$D/nohf" "$V" estimate "$D/lf_nomodel.yaml" --model "$(dirname "$V")/../examples/configs/qwen2_5_1_5b_instruct.json"'
# the Hugging Face cache layout: refs/main names the snapshot, whose
# config.json links into blobs/
H="$D/hf/hub/models--acme--tiny"
mkdir -p "$H/refs" "$H/blobs" "$H/snapshots/0123abcd0123abcd0123abcd0123abcd0123abcd"
printf '0123abcd0123abcd0123abcd0123abcd0123abcd' >"$H/refs/main"
cp "$(dirname "$V")/../tests/bad-inputs/spec/beside_config.json" "$H/blobs/5f1e"
ln -s ../../blobs/5f1e "$H/snapshots/0123abcd0123abcd0123abcd0123abcd0123abcd/config.json"
mkdir -p "$D/proj/cfg" "$D/proj/ds"
printf 'model_name_or_path: acme/tiny\nstage: sft\nfinetuning_type: full\ncutoff_len: 64\ndeepspeed: ds/z2.json\n' >"$D/proj/cfg/train.yaml"
printf '{"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}}' >"$D/proj/ds/z2.json"
t "a hub id from the HF cache (sandbox)" 0 "acme/tiny -> $H/snapshots" \
  'cd "$D/proj" && HF_HOME="$D/hf" "$V" estimate cfg/train.yaml'
t "DeepSpeed JSON from the working dir"  0 "DeepSpeed config from ds/z2.json" \
  'cd "$D/proj" && HF_HOME="$D/hf" "$V" estimate cfg/train.yaml'

# A built-in command's memory budget is 2048 MiB, a script's 256: a GLM-4.5-
# shaped MoE (92 layers, 160 experts, 3 dense first) under LoRA,
# checkpointing every 2nd layer, its timeline drawn (text output; the
# periods composed as units) holds ~80 MiB; a 48 MiB budget is reached. With
# every layer checkpointed and ZeRO-3 on 8 GPUs, not drawn (--json), the MoE
# tail composes: ~20 MiB.
mkdir -p "$D/glm45"
printf '%s' '{"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "attention_bias": true,
 "first_k_dense_replace": 3, "head_dim": 128, "hidden_size": 5120, "intermediate_size": 12288,
 "moe_intermediate_size": 1536, "n_group": 1, "n_routed_experts": 160, "n_shared_experts": 1,
 "norm_topk_prob": true, "num_attention_heads": 96, "num_experts_per_tok": 8, "num_hidden_layers": 92,
 "num_key_value_heads": 8, "num_nextn_predict_layers": 1, "partial_rotary_factor": 0.5,
 "rms_norm_eps": 1e-05, "rope_theta": 1000000, "routed_scaling_factor": 2.5, "tie_word_embeddings": false,
 "topk_group": 1, "torch_dtype": "bfloat16", "use_qk_norm": true, "vocab_size": 151552}' \
  >"$D/glm45/config.json"
printf 'model:\n  config: glm45/config.json\nrun:\n  mode: train\n  batch: 1\n  seq: 2048\n  lora: {rank: 8, targets: all-linear}\n  grad_checkpointing: full\nparallel: {dp: 8, zero: 3}\n' \
  >"$D/glm45.yaml"
printf 'model:\n  config: glm45/config.json\nrun:\n  mode: train\n  batch: 1\n  seq: 2048\n  lora: {rank: 8, targets: all-linear}\n  grad_checkpointing: 2\n' \
  >"$D/glm45_walked.yaml"
t "a built-in command's memory budget holds a 355B MoE" 0 "peak" \
  '"$V" estimate glm45_walked.yaml'
t "the same under a 48 MiB budget"                     1 "memory budget of 48 MiB was reached" \
  '"$V" --max-memory 48 estimate glm45_walked.yaml'
t "the MoE tail composed: ZeRO-3 x 8 in 32 MiB"        0 '"device_total_bytes"' \
  '"$V" --max-memory 32 estimate glm45.yaml --json'

[ "$skipped" -gt 0 ] && echo "($skipped known-bug case(s) skipped)"
echo "cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
