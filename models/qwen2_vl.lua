-- Qwen2-VL parameter counts, read off transformers
-- src/transformers/models/qwen2_vl/modeling_qwen2_vl.py:
--
--   PatchEmbed.proj      nn.Conv3d(in_channels, embed_dim,
--                        kernel=(temporal_patch_size, patch, patch), bias=False)
--   Qwen2VLVisionBlock   norm1, norm2: LayerNorm(embed_dim) (weight + bias)
--                        attn.qkv: Linear(embed_dim, 3*embed_dim, bias=True)
--                        attn.proj: Linear(embed_dim, embed_dim) (bias)
--                        mlp.fc1: Linear(embed_dim, embed_dim*mlp_ratio) (bias)
--                        mlp.fc2: Linear(embed_dim*mlp_ratio, embed_dim) (bias)
--   PatchMerger(dim=vision hidden_size, context_dim=embed_dim)
--                        ln_q: LayerNorm(embed_dim)
--                        mlp: Linear(embed_dim*merge^2, embed_dim*merge^2) (bias),
--                             GELU, Linear(embed_dim*merge^2, dim) (bias)
--   VisionRotaryEmbedding: a buffer, no parameters.
--   language model: Qwen2 (q/k/v bias, o without), models/decoder.lua.
--
-- Qwen2-VL-2B-Instruct: 665,271,296 vision + 1,543,714,304 text =
-- 2,208,985,600, the count the Hub reports for the checkpoint.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")
local vt = require("stdlib.vision_tokens")
local P = require("stdlib.params")
local decoder = require("models.decoder")
local siq = require("models.siq_vlm")

local F = { name = "qwen2_vl",
  about = "Qwen2-VL: ViT (Conv3d patch 14) + PatchMerger + Qwen2 (models/qwen2_vl.lua)" }

-- Qwen2VLVisionConfig (configuration_qwen2_vl.py): in_channels 3 (older
-- files spell it in_chans), temporal_patch_size 2, spatial_merge_size 2.
local function read_vision(vc, where)
  local c = cfgutil.reader(vc, where, "vision_config.")
  local v = {
    embed_dim = c:int("embed_dim"),
    depth = c:int("depth"),
    heads = c:int("num_heads"),
    mlp_ratio = c:num("mlp_ratio", 4),
    hidden = c:int("hidden_size"),
    patch = c:int("patch_size", 14),
    temporal = c:int("temporal_patch_size", 2),
    merge = c:int("spatial_merge_size", 2),
    channels = c:int("in_channels", nil, true) or c:int("in_chans", 3),
  }
  v.mlp = math.tointeger(math.floor(v.embed_dim * v.mlp_ratio)) -- int(embed_dim * mlp_ratio)
  return v
end

-- The text fields are top-level in the original (flat) layout and under
-- text_config in the layout transformers >= 4.52 saves.
function F.read(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local tcfg = cfg.text_config
  if not tcfg then -- flat: the text model's keys, less the tower's
    tcfg = {}
    for k, x in pairs(cfg) do
      if k ~= "vision_config" then tcfg[k] = x end
    end
  end
  local tie = tcfg.tie_word_embeddings
  if tie == nil then tie = cfg.tie_word_embeddings end
  return { where = where, vision = read_vision(vc, where),
    text = decoder.read_nested(tcfg, where, cfg.text_config and "text_config." or "",
      { model_type = "qwen2", tie_word_embeddings = tie or false }) }
end

local function vision_parts(v)
  local D = v.embed_dim
  local block = 2 * vram.norm_params(D, "layer")
    + vram.linear_params(D, 3 * D, true) + vram.linear_params(D, D, true)
    + vram.linear_params(D, v.mlp, true) + vram.linear_params(v.mlp, D, true)
  local M = D * v.merge * v.merge
  return {
    { name = "visual.patch_embed", tower = "vision",
      params = vram.conv_params(v.channels, D, v.temporal * v.patch * v.patch, false) },
    { name = "visual.blocks", tower = "vision", params = block * v.depth },
    { name = "visual.merger", tower = "projector", params = vram.norm_params(D, "layer")
      + vram.linear_params(M, M, true) + vram.linear_params(M, v.hidden, true) },
  }
end

function F.params(m)
  return P.followed_by(vision_parts(m.vision), decoder.params(m.text, "model."))
end

-- Qwen2VLImageProcessor.__init__: size = {"shortest_edge": 56 * 56,
-- "longest_edge": 28 * 28 * 1280}, i.e. min_pixels 3,136 and max_pixels
-- 1,003,520 (the rule is stdlib/vision_tokens.lua's dynamic_grid, with the
-- factor patch_size x spatial_merge_size = 28).
F.PROCESSOR = { min_pixels = 56 * 56, max_pixels = 28 * 28 * 1280 }

-- The Qwen2-VL image processor (Qwen2.5-VL and Qwen3-VL reuse it) for a
-- tower v = {patch, merge} and the processor's defaults p = {min_pixels,
-- max_pixels}. image = {height, width, max_pixels (optional)}
function F.processor_tokens(v, image, p)
  return vt.dynamic_grid(image.height, image.width, { patch_size = v.patch,
    merge_size = v.merge, min_pixels = p.min_pixels,
    max_pixels = image.max_pixels or p.max_pixels })
end

function F.image_tokens(m, image)
  return F.processor_tokens(m.vision, image, F.PROCESSOR)
end

-- Elements of the processor's pixel_values for one image: the patches
-- flattened with their temporal copies, grid_h x grid_w rows of
-- channels x temporal_patch_size x patch x patch.
function F.pixel_values(m, image)
  return F.pixel_count(m.vision, F.image_tokens(m, image))
end

-- The same for a tower v = {channels, temporal, patch} (Qwen2.5-VL's too)
-- and the processor's result t.
function F.pixel_count(v, t)
  return t.patches * v.channels * v.temporal * v.patch * v.patch
end

-- images = {count, height, width, max_pixels}: every image of a sample the
-- same size.
function F.simulator(m, images)
  local v, t = m.vision, F.image_tokens(m, images)
  return siq.describe({ where = m.where, text = m.text, hidden = v.embed_dim, layers = v.depth,
    heads = v.heads, intermediate = v.mlp, patch = v.patch, side = t.factor,
    grid_h = t.grid[2], grid_w = t.grid[3], merge = v.merge, images = images.count })
end

return F
