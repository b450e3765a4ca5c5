-- SigLIP / SigLIP2 fixed-resolution contrastive models (SiglipModel) and
-- their vision tower alone (SiglipVisionModel). Counts read off transformers
-- models/siglip/modeling_siglip.py (the vision layers are models/siglip.lua):
--   SiglipTextTransformer: token_embedding(vocab, H), position_embedding(
--   max_position_embeddings, H), the same encoder layers, final_layer_norm,
--   head Linear(H, projection_size or H) (bias). SiglipModel adds
--   logit_scale and logit_bias (one parameter each).
-- SigLIP2-so400m-patch16-512: 428,772,800 vision + 707,782,896 text + 2 =
-- 1,136,555,698. Counted only: the simulator has no contrastive step.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")
local siglip = require("models.siglip")

local F = { name = "siglip",
  about = "SigLIP / SigLIP2 fixed-resolution, text + vision towers (models/siglip_model.lua)" }

-- SiglipTextConfig defaults (configuration_siglip.py).
local TEXT_DEFAULTS = { vocab_size = 32000, hidden_size = 768, intermediate_size = 3072,
  num_hidden_layers = 12, max_position_embeddings = 64 }

local function read_text(tc, where)
  local t = {}
  for k, v in pairs(TEXT_DEFAULTS) do t[k] = v end
  for k, v in pairs(tc) do t[k] = v end
  local c = cfgutil.reader(t, where, "text_config.")
  local m = { hidden = c:int("hidden_size"), intermediate = c:int("intermediate_size"),
    layers = c:int("num_hidden_layers"), vocab = c:int("vocab_size"),
    positions = c:int("max_position_embeddings") }
  m.projection = c:int("projection_size", m.hidden)
  return m
end

local function text_parts(t)
  local H, I = t.hidden, t.intermediate
  local layer = 4 * vram.linear_params(H, H, true) + vram.linear_params(H, I, true)
    + vram.linear_params(I, H, true) + 2 * vram.norm_params(H, "layer")
  return {
    { name = "text_model.embeddings", tower = "text",
      params = vram.embedding_params(t.vocab, H) + vram.embedding_params(t.positions, H) },
    { name = "text_model.encoder.layers", tower = "text", params = layer * t.layers },
    { name = "text_model.final_layer_norm", tower = "text",
      params = vram.norm_params(H, "layer") },
    { name = "text_model.head", tower = "text",
      params = vram.linear_params(H, t.projection, true) },
  }
end

-- A SiglipVisionModel config (the tower alone) or a SiglipModel config.
function F.read(cfg, where)
  if cfg.model_type == "siglip_vision_model" or
      (cfg.vision_config == nil and cfg.hidden_size ~= nil) then
    return { vision = siglip.read_config(cfg, where, "") }
  end
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  return { text_tower = read_text(cfg.text_config or {}, where),
    vision = siglip.read_config(vc, where, "vision_config.") }
end

function F.params(m)
  local vision = siglip.parts(m.vision, "vision_model.")
  if not m.text_tower then return { parts = vision, tied_duplicate = 0 } end
  local parts = text_parts(m.text_tower)
  for _, p in ipairs(vision) do parts[#parts + 1] = p end
  parts[#parts + 1] = { name = "logit_scale, logit_bias", tower = "text", params = 2 }
  return { parts = parts, tied_duplicate = 0 }
end

return F
