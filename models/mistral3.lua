-- Mistral Small 3.1 / 3.2 (Mistral3ForConditionalGeneration): Pixtral
-- vision encoder + patch-merging projector + Mistral decoder. Counts read
-- off transformers:
--
-- models/pixtral/modeling_pixtral.py, PixtralVisionModel:
--   patch_conv   Conv2d(num_channels, hidden, patch, stride=patch, bias=False)
--   ln_pre       PixtralRMSNorm(hidden) (weight only)
--   transformer.layers x num_hidden_layers, PixtralAttentionLayer:
--     attention_norm, ffn_norm  PixtralRMSNorm(hidden)
--     attention.q/k/v/o_proj    Linear(hidden, hidden, bias=False)
--     feed_forward.gate/up_proj Linear(hidden, intermediate, bias=False),
--     feed_forward.down_proj    Linear(intermediate, hidden, bias=False)
--   patch_positional_embedding  PixtralRotaryEmbedding: 2D RoPE, buffers
--                               only, no parameters
-- models/mistral3/modeling_mistral3.py, Mistral3MultiModalProjector:
--   norm         Mistral3RMSNorm(vision hidden)
--   patch_merger.merging_layer  Linear(vision hidden * merge^2, vision
--                hidden, bias=False)
--   linear_1     Linear(vision hidden * feature layers, text hidden,
--                bias=multimodal_projector_bias)
--   linear_2     Linear(text hidden, text hidden, bias=multimodal_projector_bias)
--   (GELU between them)
-- language model: Mistral (models/decoder.lua), lm_head untied.
--
-- Mistral-Small-3.1-24B-Instruct-2503: 403,305,472 vision + 35,652,608
-- projector + 23,572,403,200 text = 24,011,361,280, the published count.
-- The checkpoint stores lm_head.weight apart from embed_tokens, and the
-- config leaves tie_word_embeddings out: the text model's MistralConfig
-- default (False) applies. Newer transformers give Mistral3Config a
-- top-level default of True; that describes a different model, so only
-- an explicit tie_word_embeddings in the file ties the head here.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")
local P = require("stdlib.params")
local vt = require("stdlib.vision_tokens")
local decoder = require("models.decoder")
local siq = require("models.siq_vlm")

local F = { name = "mistral3",
  about = "Mistral Small 3.x: Pixtral ViT + patch merger projector + Mistral "
    .. "(models/mistral3.lua)" }

-- PixtralVisionConfig defaults (configuration_pixtral.py): Pixtral-12B's
-- config.json (mistral-community/pixtral-12b) names only head_dim,
-- image_size, patch_size and rope_theta, so the sizes come from here.
local function read_vision(vc, where)
  local c = cfgutil.reader(vc, where, "vision_config.")
  return {
    hidden = c:int("hidden_size", 1024),
    layers = c:int("num_hidden_layers", 24),
    heads = c:int("num_attention_heads", 16),
    intermediate = c:int("intermediate_size", 4096),
    patch = c:int("patch_size", 16),
    channels = c:int("num_channels", 3),
    image = c:int("image_size", nil, true),
  }
end

-- The Pixtral tower alone (LLaVA with a Pixtral tower, models/llava.lua).
function F.vision_normalize(vc, where) return read_vision(vc, where) end

function F.read(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local tc = cfg.text_config or errors.input(where, "text_config", "is required but missing")
  local m = { where = where, vision = read_vision(vc, where) }
  local c = cfgutil.reader(cfg, where)
  -- Mistral3Config defaults: spatial_merge_size 2, multimodal_projector_bias
  -- False, vision_feature_layer -1 (one layer; a list concatenates several)
  m.merge = c:int("spatial_merge_size", 2)
  m.projector_bias = c:bool("multimodal_projector_bias", false)
  local vfl = cfg.vision_feature_layer
  m.feature_layers = type(vfl) == "table" and #vfl or 1
  local tie = tc.tie_word_embeddings
  if tie == nil then tie = cfg.tie_word_embeddings end
  m.text = decoder.read_nested(tc, where, "text_config.", { model_type = "mistral",
    tie_word_embeddings = tie or false })
  return m
end

local function vision_parts(v)
  local H, I = v.hidden, v.intermediate
  local layer = 2 * vram.norm_params(H, "rms") + 4 * vram.linear_params(H, H, false)
    + 2 * vram.linear_params(H, I, false) + vram.linear_params(I, H, false)
  return {
    { name = "vision_tower.patch_conv", tower = "vision",
      params = vram.conv_params(v.channels, H, v.patch * v.patch, false) },
    { name = "vision_tower.ln_pre", tower = "vision", params = vram.norm_params(H, "rms") },
    { name = "vision_tower.transformer.layers", tower = "vision", params = layer * v.layers },
  }
end

function F.vision_parts(v) return vision_parts(v) end

function F.params(m)
  local H, T, merge = m.vision.hidden, m.text.hidden, m.merge
  local parts = vision_parts(m.vision)
  parts[#parts + 1] = { name = "multi_modal_projector", tower = "projector",
    params = vram.norm_params(H, "rms") + vram.linear_params(H * merge * merge, H, false)
      + vram.linear_params(H * m.feature_layers, T, m.projector_bias)
      + vram.linear_params(T, T, m.projector_bias) }
  local text = decoder.params(m.text, "language_model.")
  return P.followed_by(parts, text)
end

-- The Pixtral processor's longest edge (Mistral Small 3.1's
-- preprocessor_config.json: size {"longest_edge": 1540}); the rule is
-- stdlib/vision_tokens.lua's longest_edge_grid. With patch 14 and
-- spatial_merge_size 2 a 1540 x 1540 image is 110 x 110 patches, merged 2 x 2 into 55 x 55 =
-- 3025 image tokens (seed 003's figure), and the sequence holds 55 rows of
-- 55 [IMG] + 1 separator: 3025 + 54 [IMG_BREAK] + 1 [IMG_END] = 3080.
F.PROCESSOR = { longest_edge = 1540 }

-- image = {height, width, longest_edge (optional, the processor's setting)}
function F.image_tokens(m, image)
  return vt.longest_edge_grid(image.height, image.width, { patch_size = m.vision.patch,
    merge_size = m.merge, longest_edge = image.longest_edge or F.PROCESSOR.longest_edge })
end

-- The patch grid is the merged grid times the merge each way; the gated
-- MLP and RMSNorms are simulated as SigLIP's (models/siq_vlm.lua). The
-- sequence holds the [IMG_BREAK] / [IMG_END] tokens too (embedded as text).
function F.simulator(m, images)
  local v, t = m.vision, F.image_tokens(m, images)
  return siq.describe({ where = m.where, text = m.text, hidden = v.hidden, layers = v.layers,
    heads = v.heads, intermediate = v.intermediate, patch = v.patch, side = v.patch,
    grid_h = m.merge * t.rows, grid_w = m.merge * t.cols, merge = m.merge,
    images = images.count, tokens = t.tokens * images.count })
end

return F
