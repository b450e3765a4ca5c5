-- LLaVA (llava), LLaVA-NeXT (llava_next) and LLaVA-OneVision
-- (llava_onevision) parameter counts, read off transformers'
-- modeling_llava.py / modeling_llava_next.py / modeling_llava_onevision.py:
--
--   vision_tower   AutoModel of vision_config: CLIPVisionModel (llava,
--                  llava_next), SiglipVisionModel (onevision) or Pixtral's
--                  encoder (llava with a pixtral tower). The whole tower is
--                  built and loaded, whatever vision_feature_layer picks.
--   multi_modal_projector
--                  linear_1: Linear(vision hidden x feature layers, text
--                  hidden, bias=multimodal_projector_bias, default True),
--                  GELU, linear_2: Linear(text hidden, text hidden, bias)
--   image_newline  llava_next / onevision: a Parameter(text hidden)
--   language_model AutoModelForCausalLM of text_config (llama, mistral,
--                  qwen2, ...), models/decoder.lua, with the text config
--                  class's defaults for keys the file leaves out.
--
-- CLIPVisionModel (modeling_clip.py): embeddings (class_embedding (D),
-- patch_embedding Conv2d(channels, D, patch, patch, bias=False),
-- position_embedding (patches + 1, D)), pre_layrnorm, encoder layers
-- (layer_norm1/2, q/k/v/out_proj and fc1/fc2, all with biases),
-- post_layernorm; LayerNorms carry weight and bias.
--
-- llava-hf/llava-1.5-7b-hf: 303,507,456 CLIP ViT-L/14-336 + 20,979,712
-- projector + 6,738,939,904 Vicuna-7B (32,064 tokens) = 7,063,427,072.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")
local P = require("stdlib.params")
local decoder = require("models.decoder")

local F = {}

-- Text config class defaults by model_type (configuration_<type>.py), for
-- the keys llava-hf's text_config files leave out.
F.TEXT_DEFAULTS = {
  llama = { vocab_size = 32000, hidden_size = 4096, intermediate_size = 11008,
    num_hidden_layers = 32, num_attention_heads = 32, tie_word_embeddings = false },
  mistral = { vocab_size = 32000, hidden_size = 4096, intermediate_size = 14336,
    num_hidden_layers = 32, num_attention_heads = 32, num_key_value_heads = 8,
    tie_word_embeddings = false },
  qwen2 = { vocab_size = 151936, hidden_size = 4096, intermediate_size = 22016,
    num_hidden_layers = 32, num_attention_heads = 32, num_key_value_heads = 32,
    tie_word_embeddings = false },
}

-- CLIPVisionConfig defaults.
local CLIP_DEFAULTS = { hidden_size = 768, intermediate_size = 3072, num_hidden_layers = 12,
  num_attention_heads = 12, image_size = 224, patch_size = 32, num_channels = 3 }

-- The text config with its class defaults filled in (an HF text config for
-- models/decoder.lua).
function F.text_config(cfg, where)
  local tc = cfg.text_config or {}
  local mt = tc.model_type or "llama"
  local defaults = F.TEXT_DEFAULTS[mt]
  local t = {}
  for k, v in pairs(defaults or {}) do t[k] = v end
  for k, v in pairs(tc) do t[k] = v end
  t.model_type = mt
  if t.tie_word_embeddings == nil then t.tie_word_embeddings = cfg.tie_word_embeddings end
  return t
end

local function clip_parts(vc, where, pre)
  local t = {}
  for k, v in pairs(CLIP_DEFAULTS) do t[k] = v end
  for k, v in pairs(vc) do t[k] = v end
  local c = cfgutil.reader(t, where, "vision_config.")
  local D, I = c:int("hidden_size"), c:int("intermediate_size")
  local L, patch, side = c:int("num_hidden_layers"), c:int("patch_size"), c:int("image_size")
  local ch = c:int("num_channels")
  local n = (side // patch) * (side // patch)
  local layer = 2 * vram.norm_params(D, "layer") + 4 * vram.linear_params(D, D, true)
    + vram.linear_params(D, I, true) + vram.linear_params(I, D, true)
  return {
    { name = pre .. "embeddings", tower = "vision", params = D
      + vram.conv_params(ch, D, patch * patch, false) + vram.embedding_params(n + 1, D) },
    { name = pre .. "pre_layrnorm", tower = "vision", params = vram.norm_params(D, "layer") },
    { name = pre .. "encoder.layers", tower = "vision", params = vram.mul(layer, L) },
    { name = pre .. "post_layernorm", tower = "vision", params = vram.norm_params(D, "layer") },
  }, D
end

-- The vision tower's parts and width, by vision_config.model_type.
local function tower(vc, where)
  local mt = vc.model_type or "clip_vision_model"
  if mt == "clip_vision_model" then
    return clip_parts(vc, where, "vision_tower.vision_model.")
  elseif mt == "siglip_vision_model" then
    local parts, m = require("models.paligemma").siglip_vision_parts(vc, where,
      "vision_tower.vision_model.")
    return parts, m.hidden
  elseif mt == "pixtral" then
    local px = require("models.mistral3")
    local v = px.vision_normalize(vc, where)
    return px.vision_parts(v), v.hidden
  end
  errors.input(where, "vision_config.model_type", ("'%s' is not modelled as a LLaVA tower "
    .. "(known: clip_vision_model, siglip_vision_model, pixtral)"):format(tostring(mt)))
end

function F.count(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local parts, D = tower(vc, where)
  local c = cfgutil.reader(cfg, where)
  local bias = c:bool("multimodal_projector_bias", true)
  local vfl = cfg.vision_feature_layer
  local nfl = type(vfl) == "table" and #vfl or 1
  local text, m, tied = decoder.text_parts(F.text_config(cfg, where), where, nil, nil,
    "language_model.")
  parts[#parts + 1] = { name = "multi_modal_projector", tower = "projector",
    params = vram.add(vram.linear_params(vram.mul(D, nfl), m.hidden, bias),
      vram.linear_params(m.hidden, m.hidden, bias)) }
  if cfg.model_type == "llava_next" or cfg.model_type == "llava_onevision" then
    parts[#parts + 1] = { name = "image_newline", tower = "projector", params = m.hidden }
  end
  return { parts = P.append(parts, text), tied_duplicate = tied }
end

return F
