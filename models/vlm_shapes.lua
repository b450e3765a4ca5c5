-- LEGACY, for the VLM families not yet on the family contract
-- (models/legacy.lua lists them; models/README.md says how to port one).
-- The memory shape of a VLM for the simulator (models/siq_vlm.lua):
-- its vision tower as a pre-norm ViT of the tower's own width, depth, heads
-- and MLP size over the patches of one image, the token merge as a pixel
-- shuffle of the patch grid, a two-layer projector, and the text decoder.
-- Exact: token counts, the decoder, the ViT's big matrices. Approximated and
-- said so in every recipe: norms (RMSNorm vs LayerNorm), Pixtral's gated
-- MLP, fused qkv projections and PaliGemma's one-layer projector, which
-- shift the vision tower's activations by a few percent.
local errors = require("stdlib.errors")

local M = {}

local function text_of(cfg, tc, defaults)
  local t = {}
  for k, v in pairs(defaults or {}) do t[k] = v end
  for k, v in pairs(tc) do t[k] = v end
  return t
end

-- A tower whose config already uses SigLIP's key names.
local function vit(v, side, default_patch)
  return { hidden_size = v.hidden_size, num_hidden_layers = v.num_hidden_layers,
    num_attention_heads = v.num_attention_heads, intermediate_size = v.intermediate_size,
    patch_size = v.patch_size or default_patch, image_size = side }
end

-- cfg: a loaded config.json; side: the square image side in pixels.
-- Returns { vision = SigLIP-style vision config, vlm = connector fields,
--           text = an HF text config, family = registry name }.
-- fam: the family name (models/legacy.lua).
function M.shape(cfg, where, side, fam)
  local v = cfg.vision_config or errors.input(where, "vision_config", "is required for a VLM")
  local out = { family = fam }
  if fam == "qwen2_5_vl" then
    out.vision = { hidden_size = v.hidden_size, num_hidden_layers = v.depth,
      num_attention_heads = v.num_heads, intermediate_size = v.intermediate_size,
      patch_size = v.patch_size or 14, image_size = side }
    out.merge = v.spatial_merge_size or 2
    out.text = text_of(cfg, cfg.text_config or cfg)
    out.text.model_type = "qwen2"
    out.text.vision_config, out.text.text_config = nil, nil
  elseif fam == "gemma3" then
    -- 64 x 64 patches average-pooled to mm_tokens_per_image (256): a 4 x 4 merge
    out.vision = vit(v, side, 14)
    local per_side = side // out.vision.patch_size
    local tokens = cfg.mm_tokens_per_image or 256
    local k = math.tointeger(math.sqrt(tokens))
    out.merge = (k and k > 0 and per_side % k == 0) and per_side // k or 1
    out.text = text_of(cfg, cfg.text_config or {}, require("models.paligemma").GEMMA3_DEFAULTS)
    out.text.model_type = "gemma3_text"
  elseif fam == "llava" then
    local llava = require("models.llava")
    out.vision = vit(v, side, 14)
    out.merge = 1
    out.text = llava.text_config(cfg)
  elseif fam == "idefics3" then
    local _, t = require("models.idefics3").vision_normalize(v, where)
    out.vision = vit(t, side)
    out.merge = cfg.scale_factor or 2
    out.text = require("models.llava").text_config(cfg)
  elseif fam == "minicpmv" then
    -- crops of scale_resolution (448) through the tower; the resampler's
    -- query_num (64) tokens per crop taken as a merge of the patch grid
    out.vision = { hidden_size = v.hidden_size, num_hidden_layers = v.num_hidden_layers,
      num_attention_heads = v.num_attention_heads, intermediate_size = v.intermediate_size,
      patch_size = v.patch_size, image_size = side }
    local per_side = side // v.patch_size
    local k = math.tointeger(math.sqrt(cfg.query_num or 64))
    out.merge = (k and per_side % k == 0) and per_side // k or 1
    out.text = {}
    for key, x in pairs(cfg) do
      if key ~= "vision_config" and key ~= "slice_config" then out.text[key] = x end
    end
    out.text.model_type = require("models.minicpmv").LLM_BY_VERSION[
      type(cfg.version) == "number" and ("%.1f"):format(cfg.version) or tostring(cfg.version)]
  else
    errors.input(where, "model_type", "family '" .. fam .. "' has no simulator shape yet")
  end
  out.vision.num_channels = 3
  if side % out.vision.patch_size ~= 0 then
    errors.input(where, "image side", ("%d is not a multiple of the patch size %d"):format(side,
      out.vision.patch_size))
  end
  return out
end

return M
