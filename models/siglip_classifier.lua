-- SiglipForImageClassification: mean over patches, a linear classifier,
-- cross entropy. A simulator family (the truth set's "vit" cases). The
-- tower is SigLIP's, or with model_type qwen2_5_vl_vision Qwen2.5-VL's
-- (models/qwen2_5_vl_vision.lua; ref.py ImageClassifier: the mean then runs
-- over its merged tokens).
local siglip = require("models.siglip")
local qwen_vision = require("models.qwen2_5_vl_vision")
local layers = require("stdlib.layers")
local loss = require("stdlib.loss")

local F = {}

-- A measured case's config (tests/truth, family "vit") is a vision config;
-- the classifier sees no text.
F.takes_text = false
function F.case(cfg)
  return { vision = cfg }
end

local function is_qwen(cfg) return cfg.model_type == "qwen2_5_vl_vision" end

-- Whether a measured case's vision config is a tower modelled here.
function F.supports(cfg)
  return (cfg.model_type or "siglip_vision_model") == "siglip_vision_model" or is_qwen(cfg)
end

local function normalize(vc)
  if is_qwen(vc) then return qwen_vision.normalize(vc, "vision config") end
  local m = siglip.normalize(vc, "vision config")
  m.width = m.hidden
  return m
end

function F.build(S, run, pol)
  local m = normalize(run.vision)
  local tr, lo = pol("vision")
  local P = (is_qwen(run.vision) and qwen_vision or siglip).build(S, m, run.param_dtype, tr, lo)
  local htr = pol("head")
  P.labels = run.vision.num_labels or 1000
  P.classifier = layers.new_linear(S, { label = "classifier", inn = m.width, out = P.labels,
    bias = true, dt = run.param_dtype, trainable = htr("classifier") })
  return P
end

function F.inputs(S, run, P)
  local m = normalize(run.vision)
  local n = is_qwen(run.vision) and qwen_vision.pixels(m, run.batch)
    or run.batch * m.channels * m.image * m.image
  local px = S:new_tensor(n, "fp32", "pixel_values", false, "inputs")
  local labels = run.mode == "train" and S:new_tensor(run.batch, "int64", "labels", false,
    "inputs") or nil
  P.pixels = px
  return { px, labels }
end

local function logits(S, P, run)
  local B, m = run.batch, P.m
  local tower = is_qwen(run.vision) and qwen_vision or siglip
  local h = tower.forward(S, P, P.pixels, { batch = B, ckpt = run.ckpt, compose = run.compose })
  -- the mean saves only sizes; rebinding frees the tower output
  local pooled = S:op("vision.mean_pool", B * m.width, h.dt, { h }, {}, { { h } })
  S:drop(h)
  local lg = layers.linear(S, pooled, P.classifier, B)
  S:drop(pooled)
  return lg
end

function F.forward_loss(S, P, run)
  S:set_category("activations")
  local lg = logits(S, P, run)
  S:set_category("logits_loss")
  local lf = S:to(lg, "fp32", "loss.logits_float")
  S:drop(lg)
  local l = loss.classification(S, lf, run.batch)
  S:drop(lf)
  S:set_category("activations")
  return l
end

F.forward_logits = logits

return F
