-- PaliGemma (SigLIP + linear projector + Gemma). Counts read off
-- transformers:
--
-- models/paligemma/modeling_paligemma.py:
--   vision_tower            SiglipVisionModel(vision_config)
--   multi_modal_projector   PaliGemmaMultiModalProjector.linear:
--                           Linear(vision hidden, vision_config.projection_dim,
--                           bias=True)
--   language_model          GemmaModel (models/gemma.lua); lm_head tied to
--                           embed_tokens
-- models/siglip/modeling_siglip.py (the vision layers are models/siglip.lua):
--   SiglipVisionModel: patch Conv2d (bias) + learned position embedding
--   (one per patch), encoder layers (LayerNorms, q/k/v/out_proj with bias,
--   fc1/fc2 with bias), post_layernorm, and the attention-pooling head when
--   vision_use_head (absent -> True: `True if not hasattr(config,
--   "vision_use_head") else config.vision_use_head`).
--
-- PaliGemma-3b-mix-224: 412,442,352 vision + 2,361,344 projector +
-- 2,508,662,784 Gemma (vocab 257,216) = 2,923,466,480. KerasHub lists
-- 2,923,335,408 for the same checkpoint: its vocabulary is 257,152, 64
-- rows x 2,048 = 131,072 fewer.
local vram = require("vram")
local errors = require("stdlib.errors")
local P = require("stdlib.params")
local vt = require("stdlib.vision_tokens")
local siglip = require("models.siglip")
local gemma = require("models.gemma")
local siq = require("models.siq_vlm")

local F = { name = "paligemma",
  about = "PaliGemma: SigLIP + linear projector + Gemma (models/paligemma.lua)" }

function F.read(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local tc = cfg.text_config or errors.input(where, "text_config", "is required but missing")
  local m = { where = where, vision = siglip.read_config(vc, where, "vision_config."),
    text = gemma.read_text(tc, where, "text_config.") }
  m.projection = vc.projection_dim or cfg.projection_dim or 2048 -- PaliGemmaConfig default
  if m.projection ~= m.text.hidden then
    errors.input(where, "vision_config.projection_dim", ("must equal the text hidden_size (%d), "
      .. "got %d"):format(m.text.hidden, m.projection))
  end
  return m
end

function F.params(m)
  local parts = siglip.parts(m.vision, "vision_tower.vision_model.")
  parts[#parts + 1] = { name = "multi_modal_projector.linear", tower = "projector",
    params = vram.linear_params(m.vision.hidden, m.projection, true) }
  local text = gemma.params(m, "language_model.")
  return P.followed_by(parts, text)
end

-- Every image is resized to image_size x image_size: (image_size //
-- patch_size)^2 tokens (stdlib/vision_tokens.lua, fixed).
function F.image_tokens(m)
  return vt.fixed(m.vision.image, m.vision.patch)
end

-- The one-layer projector is simulated as the two-layer one (models/siq_vlm.lua).
function F.simulator(m, images)
  local v = m.vision
  return siq.describe({ where = m.where, text = m.text, hidden = v.hidden, layers = v.layers,
    heads = v.heads, intermediate = v.intermediate, patch = v.patch, side = v.image, merge = 1,
    images = images.count })
end

return F
