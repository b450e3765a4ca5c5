-- Randomized check of the simulator's fast paths (not a ctest; run by hand):
-- random models (DeepSeek-V3 with dense first layers, Qwen3-MoE with
-- mlp_only_layers, Mixtral, Qwen2.5, Qwen3-VL; 4-14 layers), modes
-- (train, inference, generate), checkpointing (none, full, every 2nd/3rd,
-- segments), LoRA, accumulation, bf16 or fp32 master under autocast:
-- each step composed (layers, tails, experts, grad-free layers, decode
-- fast-forward) must equal every layer walked (run.compose = false), peaks,
-- phase peaks and ends, categories and counts.
--   vramlua --max-seconds 0 --max-memory 4000 run tests/fuzz/compose_eq.lua SEED SECONDS [large]
-- large: sequences of 256 and 1024 tokens (the sizes where a difference
-- once showed only), else 4-64. Prints each mismatch as its spec.
local vram = require("vram")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local registry = require("models.registry")

local seed, secs, large = tonumber((...)) or 1, tonumber((select(2, ...))) or 60,
  select(3, ...) == "large"
math.randomseed(seed)

local function answer(st)
  return { peak = st.peak, peak_reserved = st.peak_reserved, peak_phase = st.peak_phase,
    peak_op = st.peak_op, at_peak = st.at_peak, phase_peaks = st.phase_peaks,
    live = st.live_by_category, phase_end = st.phase_end, params = st.param_count }
end
local compare = require("tests.lib.compare")
local same, pick = compare.same, compare.pick

local n, bad, refused = 0, 0, 0
local t0 = os.clock()
while os.clock() - t0 < secs do
  local preset = pick({ "deepseek_v3", "qwen3_30b_a3b", "qwen2_5_1_5b_instruct",
    "mixtral_8x7b_v0_1", "qwen3_vl_4b_instruct" })
  local over = { num_hidden_layers = math.random(4, 14) }
  if preset == "deepseek_v3" then
    over.first_k_dense_replace, over.n_routed_experts = math.random(0, 5), pick({ 4, 8, 16 })
    over.num_experts_per_tok, over.n_group, over.topk_group = 2, 1, 1
  elseif preset == "qwen3_30b_a3b" and math.random() < 0.5 then
    local dense = {}
    for i = 0, math.random(0, 4) - 1 do dense[#dense + 1] = i end
    over.mlp_only_layers = dense
  end
  local f = { mode = pick({ "train", "train", "train", "inference", "generate" }),
    batch = math.random(1, 3), seq = large and pick({ 256, 1024 }) or pick({ 4, 8, 16, 64 }) }
  if f.mode == "generate" then f.generate_tokens = math.random(1, 5) end
  if f.mode == "train" then
    f.grad_checkpointing = pick({ "none", "full", 2, 3 })
    if math.random() < 0.3 and f.grad_checkpointing ~= "none" then
      f.checkpoint_segment = math.random(1, 3)
    end
    if math.random() < 0.3 then f.lora = { rank = 4 } end
    if math.random() < 0.3 then f.grad_accum = math.random(2, 3) end
  end
  f.precision = pick({ { params = "bf16" }, { master = "fp32", compute = "bf16" } })
  -- DeepSeek-V3's checkpoint is fp8: trained in full only dequantized
  if preset == "deepseek_v3" and not f.lora then f.precision.dequantize = true end
  if preset == "qwen3_vl_4b_instruct" then f.images = { count = 1, width = 224, height = 224 } end
  local doc = { model = { preset = preset, overrides = over }, run = f }
  local ok, r = pcall(spec.normalize, doc, "compose_eq.yaml", registry)
  if ok then
    local fast = answer(step.run(r))
    r.compose = false
    if not same(fast, answer(step.run(r))) then
      bad = bad + 1
      print("MISMATCH " .. vram.json.encode(doc))
    end
  else
    refused = refused + 1 -- a combination the spec refuses as input
  end
  n = n + 1
end
print(("cases %d, mismatches %d, refused as input %d (seed %d)"):format(n, bad, refused, seed))
if bad > 0 then error(("%d mismatches"):format(bad), 0) end
