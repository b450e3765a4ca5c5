-- SiglipForImageClassification: mean over patches, a linear classifier,
-- cross entropy. A simulator family (the truth set's "vit" cases).
local siglip = require("models.siglip")
local layers = require("stdlib.layers")
local loss = require("stdlib.loss")

local F = {}

-- A measured case's config (tests/truth, family "vit") is a SigLIP vision
-- config; the classifier sees no text.
F.takes_text = false
function F.case(cfg)
  return { vision = cfg }
end

-- Whether a measured case's vision config is a SigLIP tower.
function F.supports(cfg)
  return (cfg.model_type or "siglip_vision_model") == "siglip_vision_model"
end

function F.build(S, run, pol)
  local m = siglip.normalize(run.vision, "vision config")
  local tr, lo = pol("vision")
  local P = siglip.build(S, m, run.param_dtype, tr, lo)
  local htr = pol("head")
  P.labels = run.vision.num_labels or 1000
  P.classifier = layers.new_linear(S, { label = "classifier", inn = m.hidden, out = P.labels,
    bias = true, dt = run.param_dtype, trainable = htr("classifier") })
  return P
end

function F.inputs(S, run, P)
  local m = siglip.normalize(run.vision, "vision config")
  local px = S:new_tensor(run.batch * m.channels * m.image * m.image, "fp32", "pixel_values",
    false, "inputs")
  local labels = run.mode == "train" and S:new_tensor(run.batch, "int64", "labels", false,
    "inputs") or nil
  P.pixels = px
  return { px, labels }
end

local function logits(S, P, run)
  local B, m = run.batch, P.m
  local h = siglip.forward(S, P, P.pixels, { batch = B, ckpt = run.ckpt, compose = run.compose })
  local pooled = S:op("vision.mean_pool", B * m.hidden, h.dt, { h }, {}, { { h } })
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
