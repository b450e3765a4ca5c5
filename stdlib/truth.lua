-- The measured-case dialect of the run spec (tests/truth/cases_public.json):
-- {id, family = decoder|vit|vlm, config, run}. `normalize` turns a case into
-- the run table stdlib/step.lua simulates.
local errors = require("stdlib.errors")
local decoder = require("models.decoder")

local M = {}

local DTYPES = { float32 = "fp32", bfloat16 = "bf16", float16 = "fp16" }
local FAMILIES = { decoder = "models.causal_lm", vit = "models.siglip_classifier",
  vlm = "models.siq_vlm" }

function M.normalize(case, where)
  case = require("stdlib.config").strip_nulls(case)
  where = where or ("case " .. tostring(case.id))
  local run = case.run or errors.input(where, "run", "is required but missing")
  local cfg = case.config or errors.input(where, "config", "is required but missing")
  local fam = case.family
  if not FAMILIES[fam] then
    errors.input(where, "family", ("unknown family '%s' (known: decoder, vit, vlm)"):format(
      tostring(fam)))
  end
  local rd = require("stdlib.config").reader(run, where, "run.")
  local batch = rd:int("batch")
  local seq = fam ~= "vit" and rd:int("seq") or nil
  local dt = DTYPES[run.dtype or "float32"] or
    errors.input(where, "run.dtype", "unknown dtype '" .. tostring(run.dtype) .. "'")
  local mixed = run.precision_mode == "mixed"
  local opt = run.optimizer or "adamw"
  local gen = run.generate_tokens or 0
  local r = {
    id = case.id,
    family = fam,
    module = FAMILIES[fam],
    batch = batch,
    seq = seq,
    dtype = dt,
    param_dtype = mixed and "fp32" or dt,
    autocast = mixed and dt or nil,
    mode = (opt ~= "none" and "train") or (gen > 0 and "generate") or "inference",
    generate_tokens = gen,
    ckpt = run.grad_ckpt and true or false,
    loss = run.loss_variant == "one_hot" and "one_hot" or "cross_entropy",
    frozen = run.frozen or {},
    optimizer = {
      name = opt,
      foreach = run.foreach,
      weight_decay = run.weight_decay or (opt == "adamw" and 0.01 or 0),
      step_bytes = 4, -- Adam's step counter is a 4-byte tensor per parameter
    },
    -- the cases were measured on torch 1.13, whose autograd engine sums a
    -- second gradient for the same tensor out of place; torch >= 2.0 adds in
    -- place when it holds the last reference
    grad_sum = "out_of_place",
  }
  if run.lora then
    r.lora = { r = run.lora.r, alpha = run.lora.alpha, targets = run.lora.targets }
  end
  -- QLoRA cases (tests/truth/cases_qlora.json): bitsandbytes nf4 linears
  -- computing in the model dtype, the head unquantized
  if run.quant then
    r.quant = { store = run.quant.double_quant and "nf4_dq" or "nf4", compute = dt }
  end
  if fam == "decoder" then
    r.text = decoder.normalize(cfg, where .. ": config")
  elseif fam == "vit" then
    r.vision = cfg
  else
    r.text = decoder.normalize(cfg.text_config, where .. ": config.text_config")
    r.vision = cfg.vision_config
    r.vlm = cfg
  end
  return r
end

-- Whether the simulator models the case yet: the family's model file exists,
-- the text model is one of the decoder's architectures (no MoE, Gemma-2 or
-- mllama cross-attention layers yet) and the vision tower is SigLIP.
function M.supported(case)
  local mod = FAMILIES[case.family]
  if not mod or not pcall(require, mod) then return false end
  local cfg = case.config or {}
  local text = case.family == "decoder" and cfg or cfg.text_config
  if text then
    local known = false
    for _, mt in ipairs(decoder.families) do known = known or mt == (text.model_type or "llama") end
    if not known or text.cross_attention_layers then return false end
  end
  local vision = case.family == "vit" and cfg or cfg.vision_config
  if vision and (vision.model_type or "siglip_vision_model") ~= "siglip_vision_model" then
    return false
  end
  return true
end

function M.simulate(case, where)
  local run = M.normalize(case, where)
  local family = require(run.module)
  return require("stdlib.step").simulate(family, run), run
end

return M
