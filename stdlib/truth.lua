-- The measured-case dialect of the run spec (tests/truth/cases_public.json):
-- {id, family = decoder|vit|vlm, config, run}. `normalize` turns a case into
-- the run table (stdlib/run.lua) that stdlib/step.lua simulates. families: the model registry
-- (models/registry.lua), whose truth(name) gives the case's simulator module.
local errors = require("stdlib.errors")

local M = {}

local DTYPES = { float32 = "fp32", bfloat16 = "bf16", float16 = "fp16" }

local function known(families)
  local names = {}
  for k in pairs(families.TRUTH) do names[#names + 1] = k end
  table.sort(names)
  return table.concat(names, ", ")
end

function M.normalize(case, where, families)
  case = require("stdlib.config").strip_nulls(case)
  where = where or ("case " .. tostring(case.id))
  local run = case.run or errors.input(where, "run", "is required but missing")
  local cfg = case.config or errors.input(where, "config", "is required but missing")
  local fam = case.family
  local sim = type(fam) == "string" and families.truth(fam)
  if not sim then
    errors.input(where, "family", ("unknown family '%s' (known: %s)"):format(tostring(fam),
      known(families)))
  end
  local rd = require("stdlib.config").reader(run, where, "run.")
  local batch = rd:int("batch")
  local seq = sim.takes_text and rd:int("seq") or nil
  local dt = DTYPES[run.dtype or "float32"] or
    errors.input(where, "run.dtype", "unknown dtype '" .. tostring(run.dtype) .. "'")
  local mixed = run.precision_mode == "mixed"
  local opt = run.optimizer or "adamw"
  local gen = run.generate_tokens or 0
  local f = {
    id = case.id,
    sim = sim,
    -- measured with PyTorch on CPU: exact bytes, no device context
    framework = "pytorch-cpu",
    batch = batch,
    seq = seq,
    dtype = dt,
    param_dtype = mixed and "fp32" or dt,
    autocast = mixed and dt or nil,
    mode = (opt ~= "none" and "train") or (gen > 0 and "generate") or "inference",
    generate_tokens = gen,
    ckpt = run.grad_ckpt and true or false,
    loss = ({ one_hot = "one_hot", legacy_shift = "hf_legacy", litgpt_chunked = "litgpt_chunked",
      liger_fused = "liger_fused", shift_float = "shift_float" })[run.loss_variant]
      or "cross_entropy",
    loss_upcast = run.loss_variant ~= "ce_noupcast",
    loss_num_items = run.num_items_in_batch and true or false,
    loss_chunk_tokens = run.loss_chunk,
    frozen = run.frozen or {},
    optimizer = { name = opt, foreach = run.foreach, weight_decay = run.weight_decay },
    -- the cases were measured on torch 1.13, whose autograd engine sums a
    -- second gradient for the same tensor out of place; torch >= 2.0 adds in
    -- place when it holds the last reference
    grad_sum = "out_of_place",
  }
  if run.lora then
    f.lora = { r = run.lora.r, alpha = run.lora.alpha, targets = run.lora.targets,
      dora = run.lora.dora and true or false, dropout = run.lora.dropout or 0,
      modules_to_save = run.lora.modules_to_save }
  end
  -- QLoRA cases (tests/truth/cases_qlora.json): bitsandbytes nf4 linears
  -- computing in the model dtype, the head unquantized
  if run.quant then
    f.quant = { store = run.quant.double_quant and "nf4_dq" or "nf4", compute = dt,
      prepare = run.quant.prepare or nil }
  end
  -- load cases (tests/truth/cases_load.json): the checkpoint's dtype and cast
  if run.load then
    f.load = { from = DTYPES[run.load.from or "float32"], cast = run.load.cast or "host" }
  end
  local d = sim.case(cfg, where)
  f.text, f.vision, f.vlm = d.text, d.vision, d.vlm
  return require("stdlib.run").new(f)
end

-- Whether the simulator models the case yet: the registry has a simulator
-- module for its family, and that module takes the case's architectures
-- (its supports(config), when it has one: models/causal_lm.lua).
function M.supported(case, families)
  local sim = type(case.family) == "string" and families.truth(case.family)
  if not sim then return false end
  return not sim.supports or sim.supports(case.config or {})
end

function M.simulate(case, where, families)
  local run = M.normalize(case, where, families)
  return require("stdlib.step").simulate(run.sim, run), run
end

return M
