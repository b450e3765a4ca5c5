-- Idefics3 and SmolVLM (model_types idefics3, smolvlm) parameter counts and
-- image-token rule, read off transformers' modeling_idefics3.py /
-- image_processing_idefics3.py:
--
--   vision_model   Idefics3VisionTransformer: patch_embedding Conv2d(channels,
--                  D, patch, stride=patch, bias=True), position_embedding
--                  Embedding((image/patch)^2, D); layers (layer_norm1/2, q/k/v
--                  and out_proj, fc1/fc2, all with biases); post_layernorm
--   connector      pixel shuffle by scale_factor (no parameters), then
--                  modality_projection.proj Linear(D x scale^2, text hidden,
--                  bias=False)
--   text_model     LlamaModel of text_config; lm_head Linear(text hidden,
--                  vocab), tied only when tie_word_embeddings says so
--
-- SmolVLM-256M (SigLIP-B/16 at 512, scale 4, SmolLM2-135M with a 49,280
-- vocabulary, untied): 86,433,024 + 7,077,888 + 134,588,736 + 28,385,280 =
-- 256,484,928.
--
-- Images: resized so the longest edge is size.longest_edge (4 x image_size
-- unless the config says), each side then rounded up to a multiple of the
-- tower's image_size, and split into those tiles plus one global image
-- when there is more than one tile. Each tile gives (image/patch)^2 /
-- scale^2 tokens.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")
local P = require("stdlib.params")
local decoder = require("models.decoder")

local F = {}

-- Idefics3VisionConfig defaults.
local VISION_DEFAULTS = { hidden_size = 1152, intermediate_size = 3072, num_hidden_layers = 12,
  num_attention_heads = 16, image_size = 224, patch_size = 32, num_channels = 3 }

function F.vision_normalize(vc, where)
  local t = {}
  for k, v in pairs(VISION_DEFAULTS) do t[k] = v end
  for k, v in pairs(vc or {}) do t[k] = v end
  local c = cfgutil.reader(t, where, "vision_config.")
  local v = { hidden = c:int("hidden_size"), intermediate = c:int("intermediate_size"),
    layers = c:int("num_hidden_layers"), heads = c:int("num_attention_heads"),
    image = c:int("image_size"), patch = c:int("patch_size"), channels = c:int("num_channels") }
  if v.image % v.patch ~= 0 then
    c:fail("image_size", ("must be a multiple of patch_size (%d)"):format(v.patch))
  end
  return v, t
end

function F.count(cfg, where)
  local v = F.vision_normalize(cfg.vision_config, where)
  local c = cfgutil.reader(cfg, where)
  local scale = c:int("scale_factor", 2)
  local D, I = v.hidden, v.intermediate
  local n = (v.image // v.patch) * (v.image // v.patch)
  local layer = 2 * vram.norm_params(D, "layer") + 4 * vram.linear_params(D, D, true)
    + vram.linear_params(D, I, true) + vram.linear_params(I, D, true)
  local tc = require("models.llava").text_config(cfg, where)
  if tc.tie_word_embeddings == nil then tc.tie_word_embeddings = false end
  local text, m, tied = decoder.text_parts(tc, where, nil, nil, "model.text_model.")
  local parts = {
    { name = "model.vision_model.embeddings", tower = "vision",
      params = vram.conv_params(v.channels, D, v.patch * v.patch, true)
        + vram.embedding_params(n, D) },
    { name = "model.vision_model.encoder.layers", tower = "vision",
      params = vram.mul(layer, v.layers) },
    { name = "model.vision_model.post_layernorm", tower = "vision",
      params = vram.norm_params(D, "layer") },
    { name = "model.connector.modality_projection", tower = "projector",
      params = vram.linear_params(D * scale * scale, m.hidden, false) },
  }
  -- the text parts name their lm_head "lm_head" already
  return { parts = P.append(parts, text), tied_duplicate = tied }
end

-- Tiles one image becomes (the global image included).
function F.tiles(cfg, height, width, longest_edge)
  local v = F.vision_normalize(cfg.vision_config, "config")
  local side = v.image
  local L = longest_edge or 4 * side
  local big = math.max(height, width)
  local h = math.max(1, (height * L + big - 1) // big)
  local w = math.max(1, (width * L + big - 1) // big)
  local nh, nw = (h + side - 1) // side, (w + side - 1) // side
  local n = nh * nw
  return n > 1 and n + 1 or 1
end

return F
