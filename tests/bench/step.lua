-- Benchmark (not a test): the CPU time and the Lua garbage of one simulated
-- training step (stdlib/step.lua's run, in-process), for the runs that
-- differ in what a step walks.
--   vramlua run tests/bench/step.lua [SECONDS]
-- To compare two versions of the Lua side on one binary, run this twice in
-- turn with VRAMLUA_PATH naming the other tree's root (its stdlib/ and
-- models/ then load first); on a shared machine alternate the two a few
-- times and compare the minima, or count instructions (valgrind
-- --tool=cachegrind) at two step counts and take the difference.
local vram = require("vram")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local registry = require("models.registry")
local secs = tonumber((...)) or 0.5

local here = vram.share_dir .. "/tests/bench/step.lua"
local plain = vram.share_dir .. "/examples/specs/qwen2_5_1_5b_full.yaml"
local function edited(edit)
  local t = vram.yaml.load(plain)
  edit(t.run)
  return t
end
local CASES = {
  { "Qwen2.5-1.5B full training step (examples/specs/qwen2_5_1_5b_full.yaml)",
    vram.yaml.load(plain) },
  { "the same with LoRA r=16 (layer 2 walked too: layer 1's input needs no grad)",
    edited(function(r) r.lora = { rank = 16 } end) },
  { "the same at half the batch, 2 accumulation steps (two forward walks)",
    edited(function(r) r.batch, r.grad_accum = r.batch // 2, 2 end) },
  { "Qwen3-VL-4B training step (36 text + 24 vision layers), batch 4, 512 text + 1 image",
    { model = { preset = "qwen3_vl_4b_instruct" }, run = { mode = "train", batch = 4, seq = 512,
      precision = { params = "bf16" }, attention = "sdpa",
      images = { width = 448, height = 448 } } } },
  { "Qwen3-30B-A3B training step, transformers' eager expert loop (128 experts), full "
    .. "checkpointing, batch 1 x 4096 (experts of equal rows composed, stdlib/moe.lua)",
    { model = { preset = "qwen3_30b_a3b" }, run = { mode = "train", batch = 1, seq = 4096,
      precision = { params = "bf16" }, attention = "flash", grad_checkpointing = "full",
      moe = { impl = "loop" } } } },
}

for _, c in ipairs(CASES) do
  local run = spec.normalize(c[2], here, registry)
  for _ = 1, 20 do step.run(run) end -- warm: memos filled, the collector at its pace
  local n, t0 = 0, os.clock()
  repeat
    step.run(run)
    n = n + 1
  until os.clock() - t0 >= secs
  local dt = os.clock() - t0
  -- garbage per step: what ten steps allocate with the collector stopped
  collectgarbage("collect")
  collectgarbage("stop")
  local k0 = collectgarbage("count")
  for _ = 1, 10 do step.run(run) end
  local kib = (collectgarbage("count") - k0) / 10
  collectgarbage("restart")
  print(("%s: %.3f ms CPU per step (%d steps), %.1f KiB of Lua garbage per step"):format(
    c[1], dt / n * 1000, n, kib))
end
