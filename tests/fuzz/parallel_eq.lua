-- Randomized check of compiled multi-GPU budgets (not a ctest; run by
-- hand): random models (Qwen2.5, Llama 3, Qwen3-MoE, Mixtral; 4-8 layers),
-- layouts (dp, tp with and without sequence parallelism, pp 1F1B and
-- interleaved, ep, ZeRO 0-3, FSDP, optimizer and parameter offload to the
-- host or NVMe), checkpointing, LoRA, losses,
-- optimizers and precisions: the largest rank's device total a layout's
-- compiled budget gives (stdlib/compiled_parallel.lua) must equal the
-- spec edited and simulated (stdlib/parallel.lua budget) at random sizes.
--   vramlua --max-seconds 0 --max-memory 4000 run tests/fuzz/parallel_eq.lua SEED SECONDS
local vram = require("vram")
local spec = require("stdlib.spec")
local par = require("stdlib.parallel")
local registry = require("models.registry")
local compiled_parallel = require("stdlib.compiled_parallel")
local with = require("stdlib.run").with
local pick = require("tests.lib.compare").pick

local seed, secs = tonumber((...)) or 1, tonumber((select(2, ...))) or 60
math.randomseed(seed)

local n, points, bad, refused, simulated = 0, 0, 0, 0, 0
local reasons = {}
local t0 = os.clock()
while os.clock() - t0 < secs do
  local preset = pick({ "qwen2_5_1_5b_instruct", "llama_3_8b", "qwen3_30b_a3b",
    "mixtral_8x7b_v0_1" })
  local moe = preset == "qwen3_30b_a3b" or preset == "mixtral_8x7b_v0_1"
  local over = { num_hidden_layers = pick({ 4, 8 }) }
  local f = { mode = "train", batch = math.random(1, 3), seq = pick({ 64, 256 }),
    attention = pick({ "eager", "sdpa", "flash" }),
    grad_checkpointing = pick({ "none", "full" }),
    optimizer = { name = pick({ "adamw", "adam8bit", "sgd" }) },
    loss = { impl = pick({ "cross_entropy", "cross_entropy", "chunked" }) },
    precision = pick({ { params = "bf16" }, { master = "fp32", compute = "bf16" },
      { params = "fp32" } }) }
  if math.random() < 0.25 then f.lora = { rank = 8 } end
  local L = { dp = pick({ 1, 2, 4 }), tp = pick({ 1, 2 }), pp = pick({ 1, 2 }) }
  if L.tp > 1 and math.random() < 0.5 then L.sequence_parallel = true end
  if L.pp > 1 then
    L.microbatches = pick({ 2, 4, 8 })
    if math.random() < 0.3 then L.pp_schedule, L.virtual_stages = "interleaved", 2 end
  end
  if moe and math.random() < 0.5 then L.ep = 2 end
  local scheme = pick({ "ddp", "zero", "zero", "fsdp" })
  if scheme == "zero" then
    L.zero = pick({ 1, 2, 3 })
    if math.random() < 0.3 then L.offload = { optimizer = pick({ "cpu", "nvme" }) } end
    if L.zero == 3 and math.random() < 0.3 then
      L.offload = { optimizer = pick({ "cpu", "none" }), params = pick({ "cpu", "nvme" }) }
    end
  elseif scheme == "fsdp" and L.tp == 1 and L.pp == 1 then
    L.fsdp = pick({ "full_shard", "shard_grad_op", "hybrid_shard" })
    if math.random() < 0.3 then L.offload = { optimizer = "cpu", params = "cpu" } end
  end
  local doc = { model = { preset = preset, overrides = over }, run = f, parallel = L }
  local ok, run = pcall(spec.normalize, doc, "parallel_eq.yaml", registry)
  if ok then
    local est, why = compiled_parallel.compile(run)
    if not est then
      reasons[why] = (reasons[why] or 0) + 1
    else
      for _ = 1, 4 do
        local b = math.random(1, 6)
        local t = pick({ 2, 8, 62, 256, 1000, 2048, 4094 })
        local got = est:device_total(b, t)
        if got then
          local okw, want = pcall(function()
            return par.budget(with(run, { batch = b, seq = t })).device_total_bytes
          end)
          if okw then
            points = points + 1
            if got ~= want then
              bad = bad + 1
              print(("MISMATCH batch %d seq %d: compiled %d, simulated %d: %s"):format(b, t, got,
                want, vram.json.encode(doc)))
            end
          end
        else
          simulated = simulated + 1
        end
        -- a sweep's row (est:device_line): device_total's answers
        local row = est:device_line(b, { t, 2 * t, 1 })
        for i, s in ipairs({ t, 2 * t, 1 }) do
          if row[i] ~= nil and row[i] ~= est:device_total(b, s) then
            bad = bad + 1
            print(("ROW MISMATCH batch %d seq %d: %s"):format(b, s, vram.json.encode(doc)))
          end
        end
      end
    end
  else
    refused = refused + 1 -- a layout the spec refuses as input
  end
  n = n + 1
end
for why, k in pairs(reasons) do print(("not compiled x%d: %s"):format(k, why)) end
print(("cases %d, points compared %d, mismatches %d, points without a program %d, "
  .. "refused as input %d (seed %d)"):format(n, points, bad, simulated, refused, seed))
if bad > 0 then error(("%d mismatches"):format(bad), 0) end
