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
local vt = require("stdlib.vision_tokens")
local decoder = require("models.decoder")
local siglip = require("models.siglip")
local mistral3 = require("models.mistral3")
local siq = require("models.siq_vlm")

local F = { name = "llava",
  about = "LLaVA / LLaVA-NeXT / OneVision: CLIP, SigLIP or Pixtral tower + MLP projector + "
    .. "any decoder, any-resolution tiling (models/llava.lua)" }

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

-- The text model of a VLM whose text_config may name little beyond its
-- model_type (default_type when absent): the class defaults fill the rest,
-- tie_word_embeddings from the text_config, else the top level, else the
-- class default (tie when that is nil).
function F.read_text(cfg, where, tie, default_type)
  local tc = cfg.text_config or {}
  if type(tc) ~= "table" then errors.input(where, "text_config", "must be a mapping") end
  local mt = tc.model_type or default_type or "llama"
  local t = tc.tie_word_embeddings
  if t == nil then t = cfg.tie_word_embeddings end
  if t == nil then t = tie end
  return decoder.read_nested(tc, where, "text_config.", { model_type = mt,
    tie_word_embeddings = t }, F.TEXT_DEFAULTS[mt])
end

-- CLIPVisionConfig defaults.
local CLIP_DEFAULTS = { hidden_size = 768, intermediate_size = 3072, num_hidden_layers = 12,
  num_attention_heads = 12, image_size = 224, patch_size = 32, num_channels = 3 }

local function read_clip(vc, where)
  local t = {}
  for k, v in pairs(CLIP_DEFAULTS) do t[k] = v end
  for k, v in pairs(vc) do t[k] = v end
  local c = cfgutil.reader(t, where, "vision_config.")
  local v = { kind = "clip", hidden = c:int("hidden_size"), intermediate = c:int("intermediate_size"),
    layers = c:int("num_hidden_layers"), heads = c:int("num_attention_heads"),
    patch = c:int("patch_size"), image = c:int("image_size"), channels = c:int("num_channels"),
    cls = 1 }
  if v.image < v.patch then
    c:fail("image_size", ("must be at least patch_size (%d), got %d"):format(v.patch, v.image))
  end
  v.grid = v.image // v.patch
  return v
end

-- The vision tower by vision_config.model_type.
local function read_tower(vc, where, default_type)
  local mt = vc.model_type or default_type
  if mt == "clip_vision_model" then return read_clip(vc, where) end
  if mt == "siglip_vision_model" then
    local v = siglip.read_config(vc, where, "vision_config.")
    v.kind, v.cls, v.siglip = "siglip", 0, v
    return v
  end
  if mt == "pixtral" then
    local v = mistral3.vision_normalize(vc, where)
    v.kind, v.cls = "pixtral", 0
    v.image = v.image or 1024 -- PixtralVisionConfig: image_size 1024
    return v
  end
  errors.input(where, "vision_config.model_type", ("'%s' is not modelled as a LLaVA tower "
    .. "(known: clip_vision_model, siglip_vision_model, pixtral)"):format(tostring(mt)))
end

-- Config class defaults by model_type (configuration_llava*.py): the
-- tower, the text model, the feature strategy, the any-resolution grid.
local CLASS = {
  llava = { tower = "clip_vision_model", text = "llama", strategy = "default" },
  llava_next = { tower = "clip_vision_model", text = "llama", strategy = "default",
    pinpoints = { { 336, 672 }, { 672, 336 }, { 672, 672 }, { 1008, 336 }, { 336, 1008 } } },
  llava_onevision = { tower = "siglip_vision_model", text = "qwen2", strategy = "full",
    aspect = "anyres_max_9" },
}
do -- LlavaOnevisionConfig: every (i, j) multiple of 384 for i, j in 1..6
  local p = {}
  for i = 1, 6 do for j = 1, 6 do p[#p + 1] = { 384 * i, 384 * j } end end
  CLASS.llava_onevision.pinpoints = p
end

function F.read(cfg, where)
  local c = cfgutil.reader(cfg, where)
  local mt = c:str("model_type", "llava")
  local class = CLASS[mt] or c:fail("model_type", "must be llava, llava_next or llava_onevision")
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  if type(vc) ~= "table" then c:fail("vision_config", "must be a mapping") end
  local m = { where = where, model_type = mt, vision = read_tower(vc, where, class.tower) }
  m.projector_bias = c:bool("multimodal_projector_bias", true)
  local vfl = c:raw("vision_feature_layer")
  m.feature_layers = type(vfl) == "table" and #vfl or 1
  m.strategy = c:str("vision_feature_select_strategy", class.strategy)
  if m.strategy ~= "default" and m.strategy ~= "full" then
    c:fail("vision_feature_select_strategy", "must be 'default' or 'full', got '"
      .. m.strategy .. "'")
  end
  m.text = F.read_text(cfg, where, nil, class.text)
  if class.pinpoints then
    if m.vision.kind == "pixtral" then
      c:fail("vision_config.model_type", "a Pixtral tower with any-resolution tiling is not "
        .. "modelled")
    end
    local pp = c:raw("image_grid_pinpoints") or class.pinpoints
    if type(pp) ~= "table" then c:fail("image_grid_pinpoints", "must be a list of [h, w]") end
    m.pinpoints = pp
    if class.aspect then
      local a = c:str("vision_aspect_ratio", class.aspect)
      m.max_tiles = math.tointeger(tonumber(a:match("^anyres_max_(%d+)$")))
      if not m.max_tiles then
        c:fail("vision_aspect_ratio", "must be 'anyres_max_N', got '" .. a .. "'")
      end
    end
  end
  return m
end

local function clip_parts(v, pre)
  local D, I = v.hidden, v.intermediate
  local lp, np = vram.linear_params, vram.norm_params
  local layer = vram.add(2 * np(D, "layer"), 4 * lp(D, D, true), lp(D, I, true), lp(I, D, true))
  return {
    { name = pre .. "embeddings", tower = "vision", params = vram.add(D,
      vram.conv_params(v.channels, D, v.patch * v.patch, false),
      vram.embedding_params(v.grid * v.grid + 1, D)) },
    { name = pre .. "pre_layrnorm", tower = "vision", params = np(D, "layer") },
    { name = pre .. "encoder.layers", tower = "vision", params = vram.mul(layer, v.layers) },
    { name = pre .. "post_layernorm", tower = "vision", params = np(D, "layer") },
  }
end

function F.params(m)
  local v, H = m.vision, m.text.hidden
  local parts
  if v.kind == "clip" then
    parts = clip_parts(v, "vision_tower.vision_model.")
  elseif v.kind == "siglip" then
    parts = siglip.parts(v.siglip, "vision_tower.vision_model.")
  else
    parts = mistral3.vision_parts(v)
  end
  parts[#parts + 1] = { name = "multi_modal_projector", tower = "projector",
    params = vram.add(vram.linear_params(vram.mul(v.hidden, m.feature_layers), H,
      m.projector_bias), vram.linear_params(H, H, m.projector_bias)) }
  if m.pinpoints then
    parts[#parts + 1] = { name = "image_newline", tower = "projector", params = H }
  end
  return P.followed_by(parts, decoder.params(m.text, "language_model."))
end

-- The processors' rules for one image (image = {height, width}):
--   llava (LlavaProcessor): (image/patch)^2 patches + the tower's CLS
--     (num_additional_image_tokens), minus one for the "default" strategy
--     (the model drops the first feature);
--   llava with a Pixtral tower (Pixtral-12B): PixtralProcessor's rows of
--     [IMG] closed by [IMG_BREAK] / [IMG_END] at the longest edge of the
--     tower's image_size (stdlib/vision_tokens.lua, longest_edge_grid);
--   llava_next / llava_onevision: the any-resolution tiling
--     (vision_tokens.anyres): the base image, the unpadded tiles and one
--     newline per row, plus the CLS and minus one for "default" as above.
function F.image_tokens(m, image)
  local v = m.vision
  if v.kind == "pixtral" then
    local t = vt.longest_edge_grid(image.height, image.width, { longest_edge = v.image,
      patch_size = v.patch, merge_size = 1 })
    t.tiles, t.grid = 1, { t.rows, t.cols }
    return t
  end
  local drop = m.strategy == "default" and 1 or 0
  if not m.pinpoints then
    local t = vt.fixed(v.image, v.patch)
    t.tiles, t.tokens = 1, t.tokens + v.cls - drop
    return t
  end
  local t = vt.anyres(image.height, image.width, { pinpoints = m.pinpoints, tile = v.image,
    grid = v.grid, max_tiles = m.max_tiles, rounded = m.max_tiles ~= nil })
  t.tokens = t.features + v.cls - drop
  return t
end

-- The tower runs once per tile (the base image included) at its own side
-- (the patches its Conv2d covers: SigLIP's 384 at patch 14 is 27 x 27);
-- its CLS token is not simulated (the tower is simulated as a SigLIP ViT).
function F.simulator(m, images)
  local v, t = m.vision, F.image_tokens(m, images)
  local d = { where = m.where, text = m.text, hidden = v.hidden, layers = v.layers,
    heads = v.heads, intermediate = v.intermediate, patch = v.patch, side = v.patch * (v.grid or 1),
    merge = 1,
    images = images.count * t.tiles, tokens = t.tokens * images.count }
  if v.kind == "pixtral" then
    d.side, d.grid_h, d.grid_w = v.patch, t.rows, t.cols
  end
  local out = siq.describe(d)
  if v.kind ~= "siglip" then
    out.assumptions = { ("llava: the %s tower is simulated as a SigLIP ViT of its width, depth "
      .. "and MLP size%s"):format(v.kind, v.kind == "pixtral" and " (Pixtral's gated MLP and "
      .. "RMSNorms as a GELU MLP and LayerNorms)" or " (without its CLS token)") }
  end
  return out
end

return F
