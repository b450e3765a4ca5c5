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
for _, c in ipairs(KNOBS) do
  local name, sp, values = c[1], c[2], c[3]
  local tc = os.clock()
  local K = made[sp] or knobs.new(sp, here, registry)
  local new_s = made[sp] and 0 or os.clock() - tc
  made[sp] = K
  local p0, c0 = K.programs, K.compile_s
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
  print(("  %s: %d values first in %.0f ms (%d programs compiled, %.0f ms)%s; then %.0f "
    .. "estimates per second (%.2f us each)%s"):format(name, nv, first * 1000,
    K.programs - p0, (K.compile_s - c0) * 1000,
    new_s > 0 and (", set-up %.0f ms"):format(new_s * 1000) or "", m / dc, us,
    peer_us and (", %.0fx llm-analysis"):format(peer_us / us) or ""))
end
