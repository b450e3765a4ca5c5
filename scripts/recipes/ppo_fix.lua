-- Seed 000: a PPO update of Qwen3-VL-4B on JAX that runs out of an 80 GB
-- H100. The baseline, each of the seed's knobs alone and all together,
-- sorted by savings, with a fits / does-not-fit verdict and the headroom.
--   vramlua run recipes/ppo_fix.lua [--pixels N] [--minibatch N] [--image 2048x1024]
--                                    [--batch 16] [--text 100] [--new 64]
local vram = require("vram")
local spec = require("stdlib.spec")
local registry = require("models.registry")
local rl = require("stdlib.rl")
local gpus = require("stdlib.gpus")
local errors = require("stdlib.errors")
local args = require("stdlib.args").parse({ ... }, { pixels = 12845056, minibatch = 64,
  image = "2048x1024", batch = 16, text = 100, new = 64 })

local GiB = 1 << 30
local here = vram.share_dir .. "/scripts/recipes/ppo_fix.lua"
local W, H = args.image:match("^(%d+)x(%d+)$")
if not W then errors.usage("--image needs WIDTHxHEIGHT, got '" .. args.image .. "'") end
W, H = math.tointeger(tonumber(W)), math.tointeger(tonumber(H))
local cfg_path, cfg = spec.resolve("qwen3_vl_4b_instruct.json", vram.share_dir)
local family = registry.find(cfg, cfg_path)
local model = family.read(cfg, cfg_path)

-- The seed's trainer: fp32 params, AdamW, no checkpointing, one_hot loss,
-- DeepStack kept, ppo_minibatch a size (64 >= 16 -> one chunk of 16).
local BASE = { pixels = args.pixels, minibatch = args.minibatch, loss = "one_hot",
  deepstack = true, params = "fp32", optimizer = { name = "adamw", state_dtype = "fp32" } }

local function simulate(k, attention)
  local image = { count = 1, width = W, height = H, max_pixels = k.pixels }
  local t = family.image_tokens(model, image)
  local run = spec.normalize({ model = { preset = "qwen3_vl_4b_instruct" }, run = {
    mode = "train", batch = args.batch, seq = args.text, framework = "jax",
    precision = { params = k.params }, optimizer = k.optimizer, loss = k.loss,
    attention = attention, images = image } }, here, registry)
  if not k.deepstack then run.vlm.deepstack = 0 end
  run.rl = { new_tokens = args.new, minibatch = k.minibatch }
  local st = rl.simulate(run.sim, run)
  return st, t.tokens
end

local function with(changes)
  local k = {}
  for a, b in pairs(BASE) do k[a] = b end
  for a, b in pairs(changes) do k[a] = b end
  return k
end

local KNOBS = {
  { "--vlm_max_pixels 120000", { pixels = 120000 } },
  { "--vlm_max_pixels 65000", { pixels = 65000 } },
  { "--ppo_minibatch 2", { minibatch = 2 } },
  { "--ppo_minibatch 4", { minibatch = 4 } },
  { "take_along_axis instead of one_hot", { loss = "cross_entropy" } },
  { "VLMRL_SKIP_DEEPSTACK=1", { deepstack = false } },
  { "--optimizer adafactor (bf16 momentum)", { optimizer = { name = "adafactor",
    state_dtype = "fp32", momentum_dtype = "bf16" } } },
  { "bf16 params", { params = "bf16" } },
}

local gpu = gpus.find("h100-80gb")
local pool = math.floor(gpu.bytes * 0.75) -- XLA_PYTHON_CLIENT_MEM_FRACTION default
local base, base_tokens = simulate(BASE, "eager")
local base_f = simulate(BASE, "flash")
print(("Qwen3-VL-4B PPO update on JAX: batch %d, one %dx%d image, %d text tokens, %d new tokens")
  :format(args.batch, W, H, args.text, args.new))
print(("image tokens at the baseline pixel cap %d: %d (pixels / 1024)"):format(args.pixels,
  base_tokens))
print(("device: %s, %.2f GiB; XLA preallocates 75%% = %.2f GiB, the pool the step must fit in")
  :format(gpu.name, gpu.bytes / GiB, pool / GiB))
print("(the step follows the JAX profile, stdlib/frameworks/jax.lua: the loss's one_hot chain")
print(" fused, the optimizer update fused, no donation; other lifetimes as the simulator's ops.")
print(" 'einsum' = attention materialized as B x heads x T^2 scores, in the vision tower too;")
print(" 'flash' = a fused attention kernel without them)")
print()
local rows = {}
for _, k in ipairs(KNOBS) do
  local st, n = simulate(with(k[2]), "eager")
  local sf = simulate(with(k[2]), "flash")
  rows[#rows + 1] = { name = k[1], peak = st.peak, flash = sf.peak, tokens = n }
end
local all = {}
for _, k in ipairs(KNOBS) do
  if k[1] ~= "--vlm_max_pixels 65000" and k[1] ~= "--ppo_minibatch 4" then
    for a, b in pairs(k[2]) do all[a] = b end
  end
end
local st_all, n_all = simulate(with(all), "eager")
local sf_all = simulate(with(all), "flash")
table.sort(rows, function(a, b) return a.peak < b.peak end)
print(("%-40s %7s %11s %11s %11s   %s"):format("change", "img tok", "einsum GiB", "saves GiB",
  "flash GiB", "verdict einsum / flash (pool headroom GiB)"))
local function verdict(peak)
  return ("%s (%+.1f)"):format(peak <= pool and "fits" or "NO", (pool - peak) / GiB)
end
local function line(name, peak, flash, n)
  print(("%-40s %7d %11.2f %11.2f %11.2f   %s / %s"):format(name, n, peak / GiB,
    (base.peak - peak) / GiB, flash / GiB, verdict(peak), verdict(flash)))
end
line("baseline (as the seed runs it)", base.peak, base_f.peak, base_tokens)
for _, r in ipairs(rows) do line(r.name, r.peak, r.flash, r.tokens) end
line("all together (120000 px, minibatch 2)", st_all.peak, sf_all.peak, n_all)
print()
print("Where the seed's figures differ:")
print("- its parameter count (4,925,110,784) adds q/k/v biases Qwen3 does not have and counts")
local pc = require("stdlib.params").count(family, cfg, cfg_path)
print(("  the tied embedding twice (a Flax tree stores it twice); the checkpoint has %d")
  :format(pc.total))
print(("  parameters (%d more if stored twice). See `vramlua params %s`."):format(
  pc.tied_duplicate or 0, "examples/configs/qwen3_vl_4b_instruct.json"))
print("- it adds GB (params 19.7 GB = 10^9 B) to GiB (activations 19.7 GiB = 2^30 B) in one")
print("  total; every figure here is GiB = 2^30 B.")
print("- its activation rule of thumb (12 x B x T x d per layer) leaves out the attention")
print("  scores (B x heads x T^2, fp32 in the softmax) that dominate at T = 2100, and the")
print("  one_hot path holds an int64 B x T x V tensor — twice the fp32 log-probs it mentions.")
print("- it compares against 80 GB, but JAX's default pool is 75% of the device.")
