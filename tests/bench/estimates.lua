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
