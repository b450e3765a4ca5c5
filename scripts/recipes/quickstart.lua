-- The default recipe: Qwen2.5-1.5B-Instruct fine-tuning budgets, one knob at
-- a time, against an H100 80GB and an RTX 4090.
--   vramlua run recipes/quickstart.lua [--batch N] [--seq N]
local vram = require("vram")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local gpus = require("stdlib.gpus")
local args = require("stdlib.args").parse({ ... }, { batch = 4, seq = 1024 })

local base = {
  model = { preset = "qwen2_5_1_5b_instruct" },
  run = { mode = "train", batch = args.batch, seq = args.seq, attention = "eager",
    precision = { params = "bf16" }, optimizer = { name = "adamw", state_dtype = "fp32" } },
}

local function variant(name, edit)
  local s = { model = base.model, run = {} }
  for k, v in pairs(base.run) do s.run[k] = v end
  edit(s.run)
  return name, s
end

local rows = {
  { variant("full bf16, AdamW fp32 states", function() end) },
  { variant("+ gradient checkpointing", function(r) r.grad_checkpointing = "full" end) },
  { variant("sdpa attention", function(r) r.attention = "sdpa" end) },
  { variant("sdpa attention + checkpointing", function(r)
    r.grad_checkpointing = "full"; r.attention = "sdpa" end) },
  { variant("8-bit AdamW + sdpa + checkpointing", function(r)
    r.grad_checkpointing = "full"; r.attention = "sdpa"; r.optimizer = { name = "adam8bit" } end) },
  { variant("LoRA r=16 (q,k,v,o), frozen base", function(r)
    r.lora = { rank = 16, alpha = 32 } end) },
  { variant("inference (forward only)", function(r) r.mode = "inference" end) },
}

local h100, r4090 = gpus.find("h100-80gb"), gpus.find("rtx4090")
print(("Qwen2.5-1.5B-Instruct, batch %d, seq %d (peak = tensors allocated; GiB = 2^30 B)")
  :format(args.batch, args.seq))
print(("%-36s %12s  %-10s %-22s %-8s %-8s"):format("variant", "peak GiB", "phase", "op",
  "H100-80", "4090"))
for _, r in ipairs(rows) do
  local name, s = r[1], r[2]
  local run = spec.normalize(s, vram.share_dir .. "/scripts/recipes/quickstart.lua",
    require("models.registry"))
  local st = step.simulate(run.sim, run)
  local ctx = require("stdlib.frameworks").get("pytorch").context
  print(("%-36s %12.2f  %-10s %-22s %-8s %-8s"):format(name, st.peak / (1 << 30), st.peak_phase,
    st.peak_op or "", st.peak_reserved + ctx <= h100.bytes and "fits" or "NO",
    st.peak_reserved + ctx <= r4090.bytes and "fits" or "NO"))
end
print("fit columns: allocator reserved (lower bound) + " .. require("stdlib.frameworks").get("pytorch").assumptions[1])
