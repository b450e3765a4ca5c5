-- Randomized check of fit --knobs' layers kept across simulations (not a
-- ctest; run by hand): random models (Qwen2.5, Qwen3-MoE, Mixtral,
-- DeepSeek-V3, Qwen3-VL; 4-10 layers), checkpointing, LoRA, accumulation,
-- attention kernels, losses, optimizers, and a layout (dp, tp, pp, ZeRO)
-- or one GPU: every combination fit.knobs lists (need, categories at the
-- peak, levers) must be the same with the layers kept (stdlib/compose.lua
-- M.keeping), the models built once (stdlib/shared_setup.lua) and
-- the steps simulated lean (fit.LEAN_STEPS) as with every layer walked,
-- every model built and every optimizer simulated; and so must every layout of 2,
-- 4 or 8 GPUs parallel.fit lists (fit --gpus) for the text models, with
-- every layout priced or under a budget that cuts some off midway.
--   vramlua --max-seconds 0 --max-memory 4000 run tests/fuzz/knobs_eq.lua SEED SECONDS
local vram = require("vram")
local spec = require("stdlib.spec")
local registry = require("models.registry")
local compare = require("tests.lib.compare")
local pick = compare.pick

local seed, secs = tonumber((...)) or 1, tonumber((select(2, ...))) or 60
math.randomseed(seed)

local n, bad, refused, layouts = 0, 0, 0, 0
local t0 = os.clock()
while os.clock() - t0 < secs do
  local preset = pick({ "qwen2_5_1_5b_instruct", "qwen2_5_1_5b_instruct", "qwen3_30b_a3b",
    "mixtral_8x7b_v0_1", "deepseek_v3", "qwen3_vl_4b_instruct" })
  local over = { num_hidden_layers = math.random(4, 10) }
  if preset == "deepseek_v3" then
    over.first_k_dense_replace, over.n_routed_experts = math.random(0, 3), pick({ 4, 8 })
    over.num_experts_per_tok, over.n_group, over.topk_group = 2, 1, 1
  end
  local f = { mode = "train", batch = math.random(1, 4), seq = pick({ 16, 64, 256 }),
    attention = pick({ "eager", "sdpa" }),
    grad_checkpointing = pick({ "none", "full", 2 }),
    optimizer = { name = pick({ "adamw", "adam8bit", "sgd" }) },
    loss = { impl = pick({ "cross_entropy", "chunked", "liger_fused" }) },
    precision = pick({ { params = "bf16" }, { master = "fp32", compute = "bf16" } }) }
  if math.random() < 0.3 then f.lora = { rank = 4 } end
  if math.random() < 0.3 then f.grad_accum = math.random(2, 3) end
  if preset == "deepseek_v3" and not f.lora then f.precision.dequantize = true end
  if preset == "qwen3_vl_4b_instruct" then f.images = { count = 1, width = 224, height = 224 } end
  local parallel = math.random() < 0.5 and pick({ { dp = 2 }, { dp = 2, zero = 1 },
    { tp = 2 }, { tp = 2, pp = 2 }, { dp = 2, zero = 3 } }) or nil
  local doc = { model = { preset = preset, overrides = over }, run = f, parallel = parallel }
  local ok, r = pcall(spec.normalize, doc, "knobs_eq.yaml", registry)
  local kept
  if ok then
    ok, kept = pcall(compare.knobs, r, 2) -- a run the simulator refuses (Liger under autocast)
    if not ok and type(kept) ~= "table" then error(kept, 0) end
  end
  if ok then
    if not compare.same(kept, compare.walked(compare.knobs, r, 2)) then
      bad = bad + 1
      print("MISMATCH " .. vram.json.encode(doc))
    end
    if preset ~= "qwen3_vl_4b_instruct" then
      local gpus = pick({ 2, 4, 8 })
      local budget = math.random() < 0.5 and math.random(1, 40) * (1 << 30) or nil
      local lok, all = pcall(compare.layouts, r, gpus, budget)
      if not lok and type(all) ~= "table" then error(all, 0) end
      if lok then
        layouts = layouts + all.tried
        if not compare.same(all, compare.walked(compare.layouts, r, gpus, budget)) then
          bad = bad + 1
          print(("MISMATCH fit --gpus %d within %s: %s"):format(gpus, tostring(budget),
            vram.json.encode(doc)))
        end
      end
    end
  else
    refused = refused + 1 -- a combination the spec or the simulator refuses as input
  end
  n = n + 1
end
print(("cases %d, layouts %d, mismatches %d, refused as input %d (seed %d)"):format(n, layouts,
  bad, refused, seed))
if bad > 0 then error(("%d mismatches"):format(bad), 0) end
