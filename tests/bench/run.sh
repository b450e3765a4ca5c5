#!/usr/bin/env bash
# Benchmark (not a test): tests/bench/run.sh /path/to/vramlua [SECONDS]
#   1. start-up: `vramlua run` on an empty script
#   2. evaluations per second of primitives (tests/bench/primitives.lua)
#   3. full and compiled estimates per second (tests/bench/estimates.lua), and
#      for every knob of the Qwen3-VL-4B step, beside llm-analysis's time;
#      one simulated step's CPU time and garbage (tests/bench/step.lua)
#   4. side by side with llm-analysis (tests/bench/peer/, Debian's
#      /usr/bin/python3) on the decoder of examples/specs/qwen2_5_1_5b_full.yaml:
#      one estimate in-process and one whole process each, as a ratio
#   5. `vramlua estimate` on every example spec; fit --knobs (also under a
#      layout, tp2 pp2 dp2), fit --gpus 8 (also
#      on the 128-expert MoE spec and the fp32-master FSDP spec), a 64 x 64
#      sweep, and one of each multi-GPU spec (compiled per layout)
# SECONDS: CPU seconds per in-process figure (default 0.5). Process times
# are the median and the minimum wall time of RUNS runs (default 20). The
# load average is printed first and last: on a shared machine, compare runs
# made under the same load only.
set -eu

if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 /path/to/vramlua [SECONDS]" >&2
  exit 2
fi
V=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
SECS=${2:-0.5}
RUNS=${RUNS:-20}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
D=$(mktemp -d "${TMPDIR:-/tmp}/vramlua-bench.XXXXXX")
trap 'rm -rf "$D"' EXIT
: >"$D/empty.lua"
cd "$ROOT"

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"

# Median and minimum wall time of RUNS runs of a command, and its mean CPU
# time (user + system, which a loaded machine inflates less), in ms. The
# clock is bash's $EPOCHREALTIME (microseconds, read without a process):
# `$(date +%s%N)` costs a fork and an exec inside the interval, about
# 1.8 ms on this 2-core machine, which every figure here used to include.
wall() {
  local f="$D/wall" c="$D/cpu" t0 t1 TIMEFORMAT='%3U %3S'
  : >"$f"
  : >"$c"
  "$@" >/dev/null 2>&1 || { echo "failed: $*"; return 0; }
  for _ in $(seq "$RUNS"); do
    t0=$EPOCHREALTIME
    { time "$@" >/dev/null 2>&1; } 2>>"$c"
    t1=$EPOCHREALTIME
    echo $((${t1/[.,]/} - ${t0/[.,]/})) >>"$f" # microseconds
  done
  sort -n "$f" | awk '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "median %.2f ms, min %.2f ms wall", m / 1e3, v[1] / 1e3 }'
  awk '{ s += $1 + $2 } END { printf "; %.2f ms CPU", s / NR * 1000 }' "$c"
}

echo "startup (vramlua run empty.lua): $(wall "$V" run "$D/empty.lua")"
echo "  the built-in Lua parsed as text (VRAMLUA_SOURCE_ONLY=1): estimate" \
  "qwen2_5_1_5b_full.yaml $(VRAMLUA_SOURCE_ONLY=1 wall "$V" estimate \
  examples/specs/qwen2_5_1_5b_full.yaml --json), precompiled: $(wall "$V" estimate \
  examples/specs/qwen2_5_1_5b_full.yaml --json)"
# issue 18's lever that a flag can switch back: the instruction hook (every
# sandboxed run counted instructions before; now only --max-instructions or
# --stats does)
echo "  with the instruction hook (--max-instructions 1000000000, the old default): $(wall \
  "$V" --max-instructions 1000000000 estimate examples/specs/qwen2_5_1_5b_full.yaml --json)"

# the in-process figures take SECONDS each, past the default 10 s budget
"$V" --max-seconds 3600 run "$HERE/primitives.lua" "$SECS"

# llm-analysis on the Qwen3-VL-4B step's text decoder (36 layers, 32 heads,
# 8 KV heads, hidden 2560, FFN 9728, vocab 151936; batch 4 x 708 = 512 text
# + 196 image tokens, no recomputation; it has no vision tower), timed in
# this run: estimates.lua reports each knob's rate as a ratio to it
VLM_US=
if [ -x /usr/bin/python3 ]; then
  VLM_US=$(/usr/bin/python3 "$HERE/peer/peer.py" "$SECS" qwen3-vl-4b-text 36 32 8 2560 9728 \
    151936 4 708 0 2>/dev/null | sed -n 's/.*: \([0-9.]*\) us per estimate.*/\1/p' || true)
fi
"$V" --max-seconds 3600 run "$HERE/estimates.lua" "$SECS" $VLM_US
# one simulated step's CPU time and Lua garbage, plain, LoRA, accumulation, VLM
"$V" --max-seconds 3600 run "$HERE/step.lua" "$SECS"

# 4. the same decoder, the same run: Qwen2.5-1.5B (28 layers, 12 heads, 2 KV
# heads, hidden 1536, FFN 8960, vocab 151936), batch 4 x 1024, bf16, flash
# attention, full recomputation
SPEC=examples/specs/qwen2_5_1_5b_full.yaml
PEER=(/usr/bin/python3 "$HERE/peer/peer.py")
PEER_ARGS=(qwen2.5-1.5b 28 12 2 1536 8960 151936 4 1024 4)
if [ ! -x /usr/bin/python3 ]; then
  echo "llm-analysis: skipped (no /usr/bin/python3)"
elif ! "${PEER[@]}" --once 0 "${PEER_ARGS[@]}" >/dev/null 2>"$D/peer.err"; then
  echo "llm-analysis: skipped, it failed: $(tail -1 "$D/peer.err")"
else
  ours=$("$V" --max-seconds 3600 run "$HERE/peer.lua" "$SPEC" "$SECS")
  line=$("${PEER[@]}" "$SECS" "${PEER_ARGS[@]}" 2>/dev/null | tail -1)
  theirs=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) us per estimate.*/\1/p')
  echo "one estimate in-process, $SPEC: vramlua $ours us (simulated op by op)," \
    "llm-analysis $theirs us (closed form): vramlua takes $(awk -v a="$ours" -v b="$theirs" \
    'BEGIN { printf "%.2f", a / b }')x llm-analysis's time"
  ours=$(wall "$V" estimate "$SPEC" --json)
  theirs=$(wall "${PEER[@]}" --once 0 "${PEER_ARGS[@]}")
  echo "one whole process: vramlua estimate $ours; llm-analysis (python3) $theirs"
  c1=$(echo "$ours" | sed -n 's/.*; \([0-9.]*\) ms CPU.*/\1/p')
  c2=$(echo "$theirs" | sed -n 's/.*; \([0-9.]*\) ms CPU.*/\1/p')
  echo "  ratio of CPU times: llm-analysis takes $(awk -v a="$c2" -v b="$c1" \
    'BEGIN { printf "%.1f", a / b }')x vramlua's time"
fi

# 5. whole commands
for s in examples/specs/*.yaml examples/specs/*.json; do
  echo "vramlua estimate $s --json: $(wall "$V" estimate "$s" --json)"
done
PPO=examples/specs/qwen3_vl_4b_ppo.yaml
echo "vramlua estimate $PPO (text, with its timeline): $(wall "$V" estimate "$PPO")"
echo "vramlua fit $SPEC --gpu rtx4090 --knobs: $(wall "$V" fit "$SPEC" --gpu rtx4090 --knobs)"
# the same search under a layout (tp2 pp2 dp2, ZeRO-1): 10 levers, each
# combination priced per pipeline stage
TP=examples/specs/qwen2_5_7b_tp2_pp2_dp2.yaml
echo "vramlua fit $TP --gpu h100 --knobs: $(wall "$V" fit "$TP" --gpu h100 --knobs)"
echo "vramlua fit $SPEC --gpu h100 --gpus 8: $(wall "$V" fit "$SPEC" --gpu h100 --gpus 8)"
# the two slowest layout searches: 128 experts, and fp32 master weights
# under autocast (every DDP layout walks its layers under autocast)
MOE=examples/specs/qwen3_30b_a3b_ep8_8gpu.yaml
echo "vramlua fit $MOE --gpu h100 --gpus 8: $(wall "$V" fit "$MOE" --gpu h100 --gpus 8)"
FSDP=examples/specs/qwen3_4b_fsdp_cpu_offload.yaml
echo "vramlua fit $FSDP --gpu h100 --gpus 8: $(wall "$V" fit "$FSDP" --gpu h100 --gpus 8)"
echo "vramlua sweep $SPEC, 64 batches x 64 seqs: $(wall "$V" sweep "$SPEC" --batch 1:64:1 \
  --seq 64:4096:64 --gpu h100)"
# multi-GPU layouts: the largest rank's device total, compiled per layout
for s in qwen2_5_7b_tp2_pp2_dp2 mistral_small_24b_zero3_8gpu qwen3_4b_fsdp_cpu_offload \
  qwen3_30b_a3b_ep8_8gpu; do
  echo "vramlua sweep $s, 64 batches x 64 seqs: $(wall "$V" sweep examples/specs/$s.yaml \
    --batch 1:64:1 --seq 256:16384:256)"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
