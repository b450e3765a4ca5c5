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

# a parallel: layout draws one timeline per rank role, each at the height
# of that role's own peak, and keeps them out of --json
P2="$S/examples/specs/qwen2_5_7b_tp2_pp2_dp2.yaml"
export P2
t "a layout draws one timeline per rank role" 0 "roles ok" \
  '"$V" estimate "$P2" > p.txt || exit 1
   roles=$(grep -c "^== " p.txt); tls=$(grep -c "^timeline (live tensors" p.txt)
   [ "$roles" -eq 2 ] && [ "$tls" -eq "$roles" ] || exit 2
   grep "^== " p.txt | sed -n "s/^== \(.*\) (ranks \([0-9-]*\)): peak \([0-9.]* GiB\) .*/\1 (ranks \2):|\3/p" > want.txt
   while IFS="|" read -r head peak; do
     grep -A1 -xF "$head" p.txt | tail -n 1 | grep -qF "full height = the peak, $peak)" || exit 3
   done < want.txt
   [ "$(wc -l < want.txt)" -eq 2 ] || exit 4
   "$V" estimate "$P2" --json | grep -q timeline && exit 5
   echo roles ok'

# ---------------------------------------------------------------- writing
echo 'vram.write_file(arg[1], "x")' >"$D/writer.lua"
t "a sandboxed script cannot write, even a named file" 1 "writes only files named on the command line of a built-in command" \
  '"$V" run writer.lua w.txt; rc=$?; [ ! -e w.txt ] && exit $rc'
t "--html into a missing directory is a clean input error" 1 "--html: $D/no/such/p.html: cannot write" \
  '"$V" estimate small.yaml --json --html "$D/no/such/p.html" 2>&1 | grep -v "^ *[{}\"]"; exit "${PIPESTATUS[0]}"'
t "--html keeps --json parseable" 0 '"peak_bytes"' \
  '"$V" estimate small.yaml --json --html j.html > j.json && [ -s j.html ] && ! grep -q "html:" j.json && cat j.json'

# ---------------------------------------------------------------- diff
TH="$S/examples/specs/qwen3_4b_nvfp4_theory.yaml"
AL="$S/examples/specs/qwen3_4b_nvfp4_as_launched.yaml"
export TH AL
# a Lua checker reads JSON with the tool's own loader (no python needed)
cat >"$D/check_diff.lua" <<'LUA'
-- arg: diff.json estimate_a.json estimate_b.json
local d = vram.json.load(arg[1])
local ea, eb = vram.json.load(arg[2]), vram.json.load(arg[3])
local bad = 0
for _, r in ipairs(d.components) do
  if r.b - r.a ~= r.delta then bad = bad + 1; print("delta wrong: " .. r.what) end
end
local p = d.components[1]
if p.what ~= "peak (tensors allocated)" or p.a ~= ea.peak_bytes or p.b ~= eb.peak_bytes then
  bad = bad + 1; print("peak row differs from estimate --json")
end
if d.peak.a.phase ~= ea.peak_phase or d.peak.b.phase ~= eb.peak_phase then
  bad = bad + 1; print("peak phase differs from estimate")
end
print(bad == 0 and "diff json ok" or "diff json BAD")
LUA
# the two seed specs differ in exactly what their YAML differs in: fp32
# params (compute stays bf16), fp32 optimizer states, no checkpoint segments
t "diff names the knobs the seed's flags set" 0 "knobs ok" \
  '"$V" diff "$TH" "$AL" > d.txt || exit 1
   grep -q "^knobs that differ (4):" d.txt || exit 2
   grep -qE "^  param_dtype +bf16 -> fp32$" d.txt || exit 3
   grep -qE "^  optimizer.state_dtype +int8 -> fp32$" d.txt || exit 4
   grep -qE "^  ckpt +true -> false$" d.txt || exit 5
   grep -qE "^  ckpt_segment +8 -> \(unset\)$" d.txt || exit 6
   grep -qE "^peak of A: [a-z_]+( at .+)?$" d.txt && grep -qE "^peak of B: " d.txt || exit 7
   echo knobs ok'
t "diff --json: every change is B - A, and the peaks are estimate's" 0 "diff json ok" \
  '"$V" diff "$TH" "$AL" --json > d.json && "$V" estimate "$TH" --json > a.json &&
   "$V" estimate "$AL" --json > b.json && "$V" run check_diff.lua d.json a.json b.json'
t "diff of a spec with itself changes nothing" 0 "same ok" \
  '"$V" diff "$TH" "$TH" > s.txt || exit 1
   grep -q "^knobs that differ (0):" s.txt || exit 2
   rows=$(grep -cE "^(peak \(|  [a-z_]+ |allocator|device|phase peak)" s.txt)
   zero=$(grep -cE " 0  \[0 B\]$" s.txt)
   [ "$rows" -ge 8 ] && [ "$rows" -eq "$zero" ] || exit 3
   echo same ok'
# two families: the family's simulator (a table of functions) is no knob;
# it printed each function's address, different on every run
t "diff of two families names knobs, not the families' code" 0 "families ok" \
  '"$V" diff "$S/examples/specs/qwen3_vl_4b_ppo.yaml" "$TH" > f.txt || exit 1
   grep -qE "^  framework +jax -> torchsharp$" f.txt || exit 3
   grep -qE "^  sim\.|function: 0x" f.txt && exit 4
   echo families ok'
t "diff needs two inputs" 2 "diff needs two inputs" '"$V" diff "$TH"'

# ---------------------------------------------------------------- observed
cat >"$D/check_observed.lua" <<'LUA'
-- arg: estimate_with_observed.json params.json flipped_estimate.json base_estimate.json
local e, p = vram.json.load(arg[1]), vram.json.load(arg[2])
local flipped, base = vram.json.load(arg[3]), vram.json.load(arg[4])
local o, bad = e.observed, 0
local by = {}
for _, c in ipairs(o.causes) do by[c.id] = c end
local function check(ok, what) if not ok then bad = bad + 1; print("FAILED: " .. what) end end
check(o.observed_bytes == 80 * 1000000000, "80GB is 80e9 bytes")
check(o.estimate_bytes == e.device_total_bytes, "nvidia-smi compares with the device total")
check(o.difference_bytes == o.observed_bytes - o.estimate_bytes, "difference")
-- the raw checkpoint map: every parameter once, in bf16 (config torch_dtype)
check(by.load_time_copy and by.load_time_copy.bytes == 2 * p.total, "load-time copy = 2 B x params")
-- fp32 masters = the spec written with fp32 params, estimated on its own
check(by.fp32_masters and by.fp32_masters.bytes ==
  flipped.device_total_bytes - base.device_total_bytes, "fp32 masters = a separate estimate")
-- ranked largest first; a flip that adds nothing is named apart, never ranked
for k = 2, #o.causes do check(o.causes[k - 1].bytes >= o.causes[k].bytes, "ranking") end
for _, c in ipairs(o.causes) do check(c.bytes > 0, c.id .. " ranked with no increase") end
for _, c in ipairs(o.no_effect) do check(c.bytes <= 0, c.id .. " set apart but adds") end
-- the peak of the spec is in the optimizer step, after the activations are
-- freed: dropping its checkpointing cannot raise the device total
local noc
for _, c in ipairs(o.no_effect) do if c.id == "no_checkpointing" then noc = c end end
if e.peak_phase == "optimizer" then
  check(noc and noc.bytes == 0, "checkpointing at an optimizer peak")
end
-- seed 002's own explanation: stock Adam's default states over fp32
-- masters; the closest combination holds both and leaves a remainder
-- (fragmentation) that is not negative
local best = o.closest_combinations[1]
local ids = {}
for _, r in ipairs(best and best.causes or {}) do ids[o.causes[r].id] = true end
check(ids.fp32_masters and ids.optimizer_defaults, "closest combination names the seed's causes")
check(best and best.remainder_bytes >= 0 and best.bytes + best.remainder_bytes == o.observed_bytes,
  "remainder")
print(bad == 0 and "observed json ok" or "observed json BAD")
LUA
sed -e 's/precision: { params: bf16, forward_weights: nvfp4 }/precision: { params: fp32, compute: bf16, forward_weights: nvfp4 }/' \
  "$TH" >"$D/theory_fp32.yaml"
t "--observed sizes each cause with the simulator (seed 002)" 0 "observed json ok" \
  '"$V" estimate "$TH" --observed 80GB --observed-kind nvidia-smi --json > o.json &&
   "$V" params qwen3_4b_instruct_2507 --json > p.json &&
   "$V" estimate theory_fp32.yaml --json > f.json && "$V" estimate "$TH" --json > t.json &&
   "$V" run check_observed.lua o.json p.json f.json t.json'
# the terminal's answer, read back: the closest combination names fp32
# masters and the optimizer's default state dtype (the seed's two flags)
# and leaves a remainder that is not negative
t "--observed answers seed 002 in the terminal" 0 "seed answer ok" \
  '"$V" estimate "$TH" --observed 80GB --observed-kind nvidia-smi > ob.txt || exit 1
   grep -qE "^observed: [0-9.]+ GiB = 80.00 GB \(nvidia-smi\)" ob.txt || exit 2
   line=$(grep -A1 "^combinations closest to the observed figure" ob.txt | tail -n 1)
   members=$(printf %s "$line" | sed -n "s/^  causes \([0-9 +]*\) together: .*, leaving [0-9.]* GiB = [0-9.]* GB to .*/\1/p")
   [ -n "$members" ] || exit 3
   names=""
   for m in $(printf %s "$members" | tr -d +); do
     names="$names|$(grep -E "^ ?$m\. " ob.txt)"; done
   printf %s "$names" | grep -q "fp32 master weights instead of bf16" || exit 4
   printf %s "$names" | grep -q "optimizer state dtype left at its default" || exit 5
   echo seed answer ok'
# a layout: the observed figure is one GPU's, compared with the rank whose
# figure of that kind is largest; the layout's own causes (sharding or
# offload that did not take) are sized by estimating the spec without them
Z3="$S/examples/specs/mistral_small_24b_zero3_8gpu.yaml"
P3="$S/examples/specs/qwen2_5_7b_tp2_pp2_dp2.yaml"
FO="$S/examples/specs/qwen3_4b_fsdp_cpu_offload.yaml"
export Z3 P3 FO
grep -vE '^ *(zero|reduce_bucket_size|stage3_[a-z_]+): ' "$Z3" >"$D/z3_ddp.yaml"
grep -v '^ *offload: ' "$FO" >"$D/fsdp_no_offload.yaml"
cat >"$D/check_ranks.lua" <<'LUA'
-- arg: observed(z3).json z3.json z3_ddp.json observed(pp, allocated).json pp.json
--      observed(fsdp offload).json fsdp.json fsdp_no_offload.json
local oz, ez, ed = vram.json.load(arg[1]), vram.json.load(arg[2]), vram.json.load(arg[3])
local op, ep = vram.json.load(arg[4]), vram.json.load(arg[5])
local of, ef, en = vram.json.load(arg[6]), vram.json.load(arg[7]), vram.json.load(arg[8])
local bad = 0
local function check(ok, what) if not ok then bad = bad + 1; print("FAILED: " .. what) end end
local function cause(o, id)
  for _, c in ipairs(o.observed.causes) do if c.id == id then return c end end
  for _, c in ipairs(o.observed.no_effect) do if c.id == id then return c end end
end
check(oz.observed.estimate_bytes == ez.device_total_bytes, "zero-3: the largest rank's device total")
local s = cause(oz, "sharding_not_applied")
check(s and s.bytes == ed.device_total_bytes - ez.device_total_bytes,
  "sharding not applied = the spec without zero, estimated on its own")
-- pipeline stages differ: allocated is compared with the stage whose
-- tensors peak highest, named
local top
for _, r in ipairs(ep.per_rank) do if not top or r.peak_bytes > top.peak_bytes then top = r end end
check(op.observed.estimate_bytes == top.peak_bytes, "pp: the largest rank's tensors allocated")
check(op.observed.rank and op.observed.rank.ranks == top.ranks, "pp: names the rank")
check(#ep.per_rank == 2 and ep.per_rank[1].peak_bytes ~= ep.per_rank[2].peak_bytes,
  "the stages differ (the case is a real choice)")
local f = cause(of, "offload_not_applied")
check(f and f.bytes == en.device_total_bytes - ef.device_total_bytes,
  "offload not applied = the spec without offload, estimated on its own")
print(bad == 0 and "ranks ok" or "ranks BAD")
LUA
t "--observed on a layout compares with the rank that sets the peak" 0 "ranks ok" \
  '"$V" estimate "$Z3" --observed 78GB --json > oz.json && "$V" estimate "$Z3" --json > ez.json &&
   "$V" estimate z3_ddp.yaml --json > ed.json &&
   "$V" estimate "$P3" --observed 70GB --observed-kind allocated --json > op.json &&
   "$V" estimate "$P3" --json > ep.json &&
   "$V" estimate "$FO" --observed 20GB --json > of.json && "$V" estimate "$FO" --json > ef.json &&
   "$V" estimate fsdp_no_offload.yaml --json > en.json &&
   "$V" run check_ranks.lua oz.json ez.json ed.json op.json ep.json of.json ef.json en.json'
# diff of two layouts compares the largest ranks, as estimate prints them
# (it once priced a parallel: spec as one GPU holding the whole model)
t "diff of two layouts: every figure is estimate's largest rank" 0 "diff json ok" \
  '"$V" diff "$Z3" z3_ddp.yaml --json > dz.json && "$V" estimate "$Z3" --json > za.json &&
   "$V" estimate z3_ddp.yaml --json > zb.json && "$V" run check_diff.lua dz.json za.json zb.json'
t "diff names the layout knob and the largest rank" 0 "layout ok" \
  '"$V" diff "$Z3" z3_ddp.yaml > dz.txt && "$V" diff "$Z3" small.yaml > ds.txt || exit 1
   grep -qE "^  parallel.zero +3 -> 0$" dz.txt || exit 2
   grep -q "where" dz.txt && exit 3
   grep -qE "^  parallel +dp8 zero-3 -> \(unset\)$" ds.txt || exit 4
   [ "$(grep -c "^  parallel\." ds.txt)" -eq 0 ] || exit 5
   grep -qE "^peak of A: .* on the largest rank \(ranks 0-7\)$" dz.txt || exit 6
   echo layout ok'
t "--observed on a layout says which rank in the terminal" 0 "on the rank that sets it (first stage, ranks 0-3)" \
  '"$V" estimate "$P3" --observed 70GB --observed-kind allocated'
t "--observed needs a run spec" 1 "needs a run spec" \
  '"$V" estimate "$S/tests/truth/cases_public.json" --case p01_qwen3_fp32_adamw --observed 1GB'
t "--observed needs a size" 2 "needs a size like 80GB" '"$V" estimate small.yaml --observed lots'
t "--observed knows its units" 2 "unknown unit 'GX'" '"$V" estimate small.yaml --observed 3GX'
t "--observed-kind alone" 2 "--observed-kind needs --observed" \
  '"$V" estimate small.yaml --observed-kind reserved'
t "--observed-kind is checked" 2 "must be allocated, reserved or nvidia-smi" \
  '"$V" estimate small.yaml --observed 9GB --observed-kind smi'
t "an observed figure below the estimate" 0 "nothing to explain" \
  '"$V" estimate small.yaml --observed 1000B --observed-kind allocated'

# ---------------------------------------------------------------- knobs
# fit --knobs --gpus 4 (the spec as DDP over 4 GPUs): every figure it prints
# is checked against `estimate` of a spec written out by hand with that
# lever, so the advice's savings are separate simulator runs (--depth 2: the
# default depth follows the CPU time one simulation takes, slower under ASan)
K='model: { preset: qwen2_5_1_5b_instruct, overrides: { num_hidden_layers: 4 } }
run: { batch: 4, seq: 512, attention: sdpa, optimizer: { name: adamw, state_dtype: fp32 } }'
printf '%s\n' "$K" >"$D/knobs.yaml"
printf '%s\nparallel: { dp: 4 }\n' "$K" >"$D/k_ddp.yaml"
printf '%s\nparallel: { dp: 4, zero: 1 }\n' "$K" >"$D/k_z1.yaml"
printf '%s\nparallel: { dp: 4, fsdp: full_shard }\n' "$K" >"$D/k_fsdp.yaml"
printf '%s\nparallel: { dp: 4, zero: 1, offload: { optimizer: cpu } }\n' "$K" >"$D/k_z1off.yaml"
sed 's/attention: sdpa,/attention: sdpa, loss: liger_fused,/' "$D/knobs.yaml" >"$D/k_liger1.yaml"
{ cat "$D/k_liger1.yaml"; echo 'parallel: { dp: 4 }'; } >"$D/k_liger.yaml"
{ cat "$D/k_liger1.yaml"; echo 'parallel: { dp: 4, zero: 1 }'; } >"$D/k_liger_z1.yaml"
cat >"$D/check_knobs.lua" <<'LUA'
-- arg: knobs.json knobs.txt, then the estimates (--json) of the hand-written specs
local k, txt = vram.json.load(arg[1]), vram.text.load(arg[2])
local est = {}
for i = 3, #arg do est[arg[i]:match("([%w_]+)%.json$")] = vram.json.load(arg[i]) end
local bad = 0
local function check(ok, what) if not ok then bad = bad + 1; print("FAILED: " .. what) end end
local want = { ["fused linear cross-entropy (Liger)"] = "k_liger",
  ["ZeRO-1 (optimizer states over 4 ranks)"] = "k_z1",
  ["FSDP full_shard over 4 ranks"] = "k_fsdp",
  ["ZeRO-1 (optimizer states over 4 ranks) + optimizer offload to CPU"] = "k_z1off",
  ["fused linear cross-entropy (Liger) + ZeRO-1 (optimizer states over 4 ranks)"] = "k_liger_z1" }
local base = est.k_ddp.device_total_bytes
check(k.need_bytes == base, "as given = estimate of the spec with parallel: { dp: 4 }")
check(k.layout == "dp4 ddp", "layout " .. tostring(k.layout))
local seen = 0
for _, c in ipairs(k.combinations) do
  local e = want[c.knobs] and est[want[c.knobs]]
  if e then
    seen = seen + 1
    check(c.need_bytes == e.device_total_bytes, c.knobs .. ": need")
    check(c.saving_bytes == base - e.device_total_bytes, c.knobs .. ": saving")
  end
  check(c.knobs == "as given" or c.saving_bytes > 0, c.knobs .. " saves nothing")
end
check(seen == 5, "combinations checked: " .. seen)
-- the terminal prints the same rows, in the same order, rounded
check(txt:find(("needs [%%d.]+ GiB = %d B"):format(base)) ~= nil, "terminal: as given in bytes")
local rows = 0
for need, saves, cost, knobs in txt:gmatch("\n *%d+%. +([%d.]+) GiB +([%d.]+) GiB +(%d+)  ([^\n]+)") do
  rows = rows + 1
  local c = k.combinations[rows]
  check(c and c.knobs == knobs and tonumber(cost) == c.cost, "row " .. rows .. ": " .. knobs)
  check(c and ("%.2f"):format(c.need_bytes / 2^30) == need, "row " .. rows .. ": needs " .. need)
  check(c and ("%.2f"):format(c.saving_bytes / 2^30) == saves, "row " .. rows .. ": saves " .. saves)
end
check(rows == math.min(12, #k.combinations), "terminal rows: " .. rows)
print(bad == 0 and "knobs ok" or "knobs BAD")
LUA
t "fit --knobs: each saving is an estimate of the spec written with that lever" 0 "knobs ok" \
  '"$V" fit knobs.yaml --gpu h100 --knobs --gpus 4 --depth 2 --json > k.json &&
   "$V" fit knobs.yaml --gpu h100 --knobs --gpus 4 --depth 2 > k.txt || exit 1
   for s in k_ddp k_z1 k_fsdp k_z1off k_liger k_liger_z1; do
     "$V" estimate $s.yaml --json > $s.json || exit 2; done
   "$V" run check_knobs.lua k.json k.txt k_ddp.json k_z1.json k_fsdp.json k_z1off.json \
     k_liger.json k_liger_z1.json'
t "fit --knobs --gpus must match the spec's layout" 2 "differs from the spec's parallel: layout (world 4)" \
  '"$V" fit k_ddp.yaml --gpu h100 --knobs --gpus 8'
t "fit --depth is 1 to 3" 2 "--depth must be 1, 2 or 3" \
  '"$V" fit knobs.yaml --gpu h100 --knobs --depth 4'
t "fit --json needs --knobs" 2 "fit --json goes with --knobs" \
  '"$V" fit knobs.yaml --gpu h100 --vary batch --json'

# ---------------------------------------------------------------- markdown
cat >"$D/check_md.lua" <<'LUA'
-- arg: estimate.md estimate.json: every table row is the JSON breakdown
local md, e = vram.text.load(arg[1]), vram.json.load(arg[2])
local rows, bad = {}, 0
for cat, bytes in md:gmatch("\n| ([%w_]+) | (%d+) | [%d.]+ | [%d.]+%% |") do
  rows[#rows + 1] = { cat, math.tointeger(tonumber(bytes)) }
end
if #rows ~= #e.breakdown then bad = bad + 1; print("rows: " .. #rows .. " vs " .. #e.breakdown) end
for k, it in ipairs(e.breakdown) do
  if not rows[k] or rows[k][1] ~= it.category or rows[k][2] ~= it.bytes then
    bad = bad + 1; print("row " .. k .. " differs: " .. it.category)
  end
end
print(bad == 0 and "md table ok" or "md table BAD")
LUA
t "--markdown: the breakdown table is the JSON's, row by row" 0 "md table ok" \
  '"$V" estimate small.yaml --markdown > e.md && "$V" estimate small.yaml --json > e.json &&
   "$V" run check_md.lua e.md e.json'
t "--markdown folds the run spec in, as written" 0 "spec folded" \
  '"$V" estimate small.yaml --markdown > e.md || exit 1
   grep -q "^<details><summary>run spec</summary>$" e.md && grep -q "^</details>$" e.md || exit 2
   sed -n "/^\`\`\`yaml$/,/^\`\`\`$/p" e.md | sed "1d;\$d" > folded.yaml
   cmp -s folded.yaml small.yaml || exit 3
   echo spec folded'
t "--markdown has the terminal's timeline and reconciliation" 0 "same content" \
  '"$V" estimate "$TH" --markdown --observed 80GB > m.md && "$V" estimate "$TH" --observed 80GB > m.txt || exit 1
   sed -n "/^timeline (live/,/^  [a-z]=/p" m.txt > tl_term.txt
   sed -n "/^timeline (live/,/^  [a-z]=/p" m.md > tl_md.txt
   [ -s tl_term.txt ] && cmp -s tl_term.txt tl_md.txt || exit 2
   sed -n "/^observed: /,/^not applicable/p" m.txt > ob_term.txt
   sed -n "/^observed: /,/^not applicable/p" m.md > ob_md.txt
   [ -s ob_term.txt ] && cmp -s ob_term.txt ob_md.txt || exit 3
   echo same content'
cat >"$D/check_md_ranks.lua" <<'LUA'
-- arg: layout.md layout.json: one row per rank role, each the JSON's
local md, e = vram.text.load(arg[1]), vram.json.load(arg[2])
local rows, bad = {}, 0
for role, ranks, peak in md:gmatch("\n| ([%w ]+) | ([%d-]+) | (%d+) B %(") do
  rows[#rows + 1] = { role, ranks, math.tointeger(tonumber(peak)) }
end
if #rows ~= #e.per_rank then bad = bad + 1; print("rows: " .. #rows .. " vs " .. #e.per_rank) end
for k, r in ipairs(e.per_rank) do
  local m = rows[k]
  if not m or m[1] ~= r.role or m[2] ~= r.ranks or m[3] ~= r.peak_bytes then
    bad = bad + 1; print("row " .. k .. " differs: " .. r.role)
  end
end
if not md:find("the breakdown above is the largest rank's (ranks " .. e.largest_rank .. ")", 1, true) then
  bad = bad + 1; print("largest rank not named")
end
print(bad == 0 and "md ranks ok" or "md ranks BAD")
LUA
t "--markdown of a layout: one row per rank role, and the terminal's timelines" 0 "md ranks ok" \
  '"$V" estimate "$P2" --markdown > l.md && "$V" estimate "$P2" --json > l.json &&
   "$V" estimate "$P2" > l.txt || exit 1
   sed -n "/^first stage (ranks/,\$p" l.txt > tl_term.txt
   sed -n "/^first stage (ranks/,/^\`\`\`$/p" l.md | sed "\$d" > tl_md.txt
   [ "$(grep -c "^timeline (live" tl_term.txt)" -eq 2 ] && cmp -s tl_term.txt tl_md.txt || exit 2
   "$V" run check_md_ranks.lua l.md l.json'
t "--markdown of a case from a list folds that case in" 0 '"id":	"p01_qwen3_fp32_adamw"' \
  '"$V" estimate "$S/tests/truth/cases_public.json" --case p01_qwen3_fp32_adamw --markdown'

echo "reports: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
