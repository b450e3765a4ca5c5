-- Benchmark (not a test): full-model estimates per second in a Lua loop.
--   vramlua run tests/bench/estimates.lua [SECONDS]
local vram = require("vram")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local secs = tonumber((...)) or 1.0

local here = vram.share_dir .. "/tests/bench/estimates.lua"
local CASES = {
  { "Qwen3-VL-4B training step (36 text + 24 vision layers), bf16, batch 4, 512 text + 1 image",
    { model = { preset = "qwen3_vl_4b_instruct" }, run = { mode = "train", batch = 4, seq = 512,
      precision = { params = "bf16" }, attention = "sdpa",
      images = { width = 448, height = 448 } } } },
  { "Qwen2.5-7B training step (28 layers), bf16, batch 4 x 2048",
    { model = { preset = "qwen2_5_7b_instruct" }, run = { mode = "train", batch = 4,
      seq = 2048, precision = { params = "bf16" }, attention = "sdpa" } } },
  { "Llama-3-8B QLoRA step (32 layers), nf4 + LoRA r=16",
    { model = { preset = "llama_3_8b" }, run = { mode = "train", batch = 2, seq = 1024,
      precision = { params = "bf16", weights = "nf4" }, lora = { rank = 16 } } } },
}

local compiled = require("stdlib.compiled")
for _, c in ipairs(CASES) do
  local run = spec.normalize(c[2], here, require("models.registry"))
  local fam = run.sim
  local n, t0 = 0, os.clock()
  repeat
    step.simulate(fam, run)
    n = n + 1
  until os.clock() - t0 >= secs
  local dt = os.clock() - t0
  print(("%s: %.0f estimates per second (%.3f ms each)"):format(c[1], n / dt, dt / n * 1000))
  -- the same run compiled once, then answered for varying (batch, seq)
  local tc = os.clock()
  local est = compiled.compile(run, here)
  local compile_ms = (os.clock() - tc) * 1000
  local m, t1, b = 0, os.clock(), run.batch
  repeat
    est:peak(b, run.seq + m % 512)
    m = m + 1
  until os.clock() - t1 >= secs
  local dc = os.clock() - t1
  print(("  compiled (%.0f ms once, %d ops, %d in its peak plan): %.0f estimates per second "
    .. "(%.2f us each)"):format(compile_ms, #est.prog, est.prog:plan_len(), m / dc, dc / m * 1e6))
end

-- Every knob of the Qwen3-VL-4B step compiled (stdlib/knobs.lua): for each
-- knob, its values answered once (the first use of a structure compiles
-- it), then cycled for SECONDS: the steady rate. PEER_US (tests/bench/run.sh
-- passes llm-analysis's time per estimate, measured in the same run) gives
-- the ratio.
local knobs = require("stdlib.knobs")
local peer_us = tonumber((select(2, ...)))
local function range(a, b, step, f)
  local out = {}
  for v = a, b, step do out[#out + 1] = f(v) end
  return out
end
local vlm = CASES[1][2]
local lora = { model = vlm.model, run = {} }
for k, v in pairs(vlm.run) do lora.run[k] = v end
lora.run.lora = { rank = 16 }
local KNOBS = {
  { "batch 1..64", vlm, range(1, 64, 1, function(v) return { batch = v } end) },
  { "seq 64..4096", vlm, range(64, 4096, 64, function(v) return { seq = v } end) },
  { "image pixels (60 sizes, 256..2048 x 4 heights)", vlm, (function()
    local out = {}
    for w = 256, 2048, 128 do
      for _, h in ipairs({ 336, 448, 672, 1024 }) do
        out[#out + 1] = { image = { width = w, height = h } }
      end
    end
    return out
  end)() },
  { "image count 1..4", vlm, range(1, 4, 1, function(v) return { images = v } end) },
  { "LoRA rank 4..256 (LoRA spec)", lora, range(4, 256, 4, function(v) return { lora_rank = v } end) },
  { "grad accumulation 1, 2, 4, 8, 16, 32", vlm,
    range(0, 5, 1, function(v) return { grad_accum = 1 << v } end) },
  { "micro-batch x accumulation (16 pairs)", vlm, (function()
    local out = {}
    for _, b in ipairs({ 1, 2, 4, 8 }) do
      for _, a in ipairs({ 1, 2, 4, 8 }) do
        if a <= 4 then out[#out + 1] = { batch = b, grad_accum = a } end
      end
    end
    return out
  end)() },
  { "text layers 9, 18, 27, 36", vlm, range(9, 36, 9, function(v) return { layers = v } end) },
  { "vision layers 18, 24", vlm, { { vision_layers = 18 }, { vision_layers = 24 } } },
  { "checkpointing none, full, every 2nd layer, segments of 3", vlm,
    { { ckpt = "none" }, { ckpt = "full" }, { ckpt = 2 }, { ckpt_segment = 3 } } },
}
print("Qwen3-VL-4B training step, every knob compiled (stdlib/knobs.lua)"
  .. (peer_us and (", llm-analysis %.1f us per estimate in this run"):format(peer_us) or ""))
local registry = require("models.registry")
local made = {}
-- values answered once (first use: compiles, or simulates), then cycled
-- for SECONDS; new_s: the set-up's own time, if it was made for this line
local function bench(K, name, values, new_s)
  local p0, c0 = K.programs, K.compile_s
  -- an expert loop's programs, one per remainder (stdlib/compiled.lua)
  local sets = K.base_entry and K.base_entry.sets
  local function remainders()
    local n = 0
    for _, set in pairs(sets or {}) do n = n + (set.prog and 1 or 0) end
    return n
  end
  local r0 = remainders()
  local s0, ss0 = K.simulated or 0, K.simulate_s or 0
  local t0 = os.clock()
  for _, k in ipairs(values) do K:peak(k) end
  local first = os.clock() - t0
  local m, t1, nv = 0, os.clock(), #values
  repeat
    for i = 1, nv do K:peak(values[i]) end
    m = m + nv
  until os.clock() - t1 >= secs
  local dc = os.clock() - t1
  local us = dc / m * 1e6
  local what = K.parallel and ("%d simulated, %.1f ms each, %d layouts compiled, %.0f ms; then "
    .. "kept or compiled"):format(K.simulated - s0,
    (K.simulate_s - ss0) * 1000 / math.max(1, K.simulated - s0), K.programs - p0,
    (K.compile_s - c0) * 1000)
    or ("%d programs compiled, %.0f ms%s"):format(K.programs - p0, (K.compile_s - c0) * 1000,
      sets and (", %d more remainders' programs, counted in the first pass"):format(
        remainders() - r0) or "")
  print(("  %s: %d values first in %.0f ms (%s)%s; then %.0f "
    .. "%s per second (%.2f us each)%s"):format(name, nv, first * 1000, what,
    new_s > 0 and (", set-up %.0f ms"):format(new_s * 1000) or "", m / dc,
    K.parallel and "answers" or "estimates", us,
    peer_us and not K.parallel and (", %.0fx llm-analysis"):format(peer_us / us) or ""))
end
for _, c in ipairs(KNOBS) do
  local name, sp, values = c[1], c[2], c[3]
  local tc = os.clock()
  local K = made[sp] or knobs.new(sp, here, registry)
  local new_s = made[sp] and 0 or os.clock() - tc
  made[sp] = K
  bench(K, name, values, new_s)
end

-- Mixture-of-experts training steps, transformers' expert loop (a program
-- per remainder of batch x seq x top_k by the experts, stdlib/compiled.lua),
-- and parallel layouts (stdlib/compiled_parallel.lua: the spec's own layout
-- compiled over batch and seq; another layout simulated when first asked,
-- compiled at its second size; the rate after the first pass is of kept
-- and compiled answers).
local function moe(preset)
  return { model = { preset = preset }, run = { mode = "train", batch = 1, seq = 512,
    precision = { params = "bf16" }, attention = "sdpa" } }
end
local function example(name)
  local path = vram.share_dir .. "/examples/specs/" .. name .. ".yaml"
  return vram.yaml.load(path), path
end
local EXTRA = {
  { "Mixtral-8x7B step (32 layers, 8 experts, top-2), batch 1: seq 100..163 (all 4 remainders)",
    moe("mixtral_8x7b_v0_1"), range(100, 163, 1, function(v) return { seq = v } end) },
  { "Qwen3-30B-A3B step (48 layers, 128 experts, top-8), batch 4: seq 64..4096 step 64 (remainder 0)",
    moe("qwen3_30b_a3b"), range(64, 4096, 64, function(v) return { batch = 4, seq = v } end) },
  { "Qwen2.5-7B tp2 pp2 dp2 spec, 8 GPUs: tp 1, 2, 4 x pp 1, 2, 4 x batch 1, 2 (largest rank's "
    .. "device total)",
    "qwen2_5_7b_tp2_pp2_dp2", (function()
    local out = {}
    for _, tp in ipairs({ 1, 2, 4 }) do
      for _, pp in ipairs(tp * 4 <= 8 and { 1, 2, 4 } or { 1, 2 }) do
        for _, b in ipairs({ 1, 2 }) do
          out[#out + 1] = { tp = tp, pp = pp, batch = b, dp = 8 // (tp * pp),
            sequence_parallel = tp > 1 or knobs.UNSET }
        end
      end
    end
    return out
  end)() },
  { "Qwen2.5-7B tp2 pp2 dp2 spec, its own layout: batch 1..64 x seq 256..16384 step 256 "
    .. "(largest rank's device total, compiled)",
    "qwen2_5_7b_tp2_pp2_dp2", (function()
    local out = {}
    for b = 1, 64 do
      for t = 256, 16384, 256 do out[#out + 1] = { batch = b, seq = t } end
    end
    return out
  end)() },
  { "Mistral-Small-24B ZeRO-3 spec: dp 2, 4, 8, 16 x seq 1024, 2048, 4096, 8192",
    "mistral_small_24b_zero3_8gpu", (function()
    local out = {}
    for _, dp in ipairs({ 2, 4, 8, 16 }) do
      for _, t in ipairs({ 1024, 2048, 4096, 8192 }) do out[#out + 1] = { dp = dp, seq = t } end
    end
    return out
  end)() },
}
-- the set-ups above let go: Qwen3-30B-A3B's probes trace ~98,000 ops each, and
-- a set-up that runs out of the sandbox's memory is simulated instead
made = nil
collectgarbage("collect")
print("Mixture of experts and parallel layouts, through stdlib/knobs.lua")
for _, c in ipairs(EXTRA) do
  local tc = os.clock()
  local sp, path = c[2], here
  if type(sp) == "string" then sp, path = example(sp) end
  local K = knobs.new(sp, path, registry)
  bench(K, c[1], c[3], os.clock() - tc)
end
