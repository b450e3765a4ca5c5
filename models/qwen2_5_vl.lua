-- Qwen2.5-VL parameter counts, read off transformers
-- src/transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py. Against
-- Qwen2-VL (models/qwen2_vl.lua) the vision blocks change to
--   norm1, norm2         Qwen2RMSNorm(hidden_size) (weight only)
--   attn.qkv, attn.proj  as Qwen2-VL (biases)
--   mlp                  gate_proj, up_proj: Linear(hidden, intermediate_size),
--                        down_proj: Linear(intermediate_size, hidden), all biased
--   merger               ln_q: RMSNorm(hidden); mlp as Qwen2-VL, to out_hidden_size
-- Windowed attention (window_size, full attention in the blocks of
-- fullatt_block_indexes) changes no parameter.
-- Qwen2.5-VL-3B: 668,684,288 vision + 3,085,938,688 text (Qwen2.5-3B, tied)
-- = 3,754,622,976; 7B: 676,550,144 + 7,615,616,512 = 8,292,166,656.
local vram = require("vram")
local errors = require("stdlib.errors")
local P = require("stdlib.params")
local decoder = require("models.decoder")
local qwen2_vl = require("models.qwen2_vl")
local siq = require("models.siq_vlm")
local vision = require("models.qwen2_5_vl_vision")

local F = { name = "qwen2_5_vl",
  about = "Qwen2.5-VL: ViT (RMSNorm, gated MLP, windowed attention) + PatchMerger + Qwen2 "
    .. "(models/qwen2_5_vl.lua)" }

-- The text fields are top-level in the original (flat) layout and under
-- text_config in the layout transformers >= 4.52 saves.
function F.read(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local nested = type(cfg.text_config) == "table"
  local tcfg = nested and cfg.text_config or {}
  if not nested then
    for k, x in pairs(cfg) do
      if k ~= "vision_config" and k ~= "text_config" then tcfg[k] = x end
    end
  end
  local tie = tcfg.tie_word_embeddings
  if tie == nil then tie = cfg.tie_word_embeddings end
  local m = { where = where, vision = vision.read(vc, where, "vision_config."),
    text = decoder.read_nested(tcfg, where, nested and "text_config." or "",
      { model_type = "qwen2", tie_word_embeddings = tie or false }) }
  if m.text.hidden ~= m.vision.out_hidden then
    errors.input(where, "vision_config.out_hidden_size", ("must equal the text hidden_size (%d), "
      .. "got %d"):format(m.text.hidden, m.vision.out_hidden))
  end
  return m
end

function F.params(m)
  local v = m.vision
  local D, I = v.hidden, v.intermediate
  local lp, np = vram.linear_params, vram.norm_params
  local block = vram.add(2 * np(D, "rms"), lp(D, 3 * D, true), lp(D, D, true),
    2 * lp(D, I, true), lp(I, D, true))
  local M = vram.mul(D, v.merge, v.merge)
  local vision = {
    { name = "visual.patch_embed", tower = "vision",
      params = vram.conv_params(v.channels, D, v.temporal * v.patch * v.patch, false) },
    { name = "visual.blocks", tower = "vision", params = vram.mul(block, v.depth) },
    { name = "visual.merger", tower = "projector",
      params = vram.add(np(D, "rms"), lp(M, M, true), lp(M, v.out_hidden, true)) },
  }
  return P.followed_by(vision, decoder.params(m.text, "model."))
end

-- Qwen2.5-VL's preprocessor_config.json (Qwen/Qwen2.5-VL-7B-Instruct:
-- min_pixels 3136, max_pixels 12845056, patch 14, merge 2) with Qwen2-VL's
-- processor rule (models/qwen2_vl.lua, processor_tokens).
F.PROCESSOR = { min_pixels = 3136, max_pixels = 12845056 }

function F.image_tokens(m, image)
  return qwen2_vl.processor_tokens(m.vision, image, F.PROCESSOR)
end

function F.pixel_values(m, image)
  return qwen2_vl.pixel_count(m.vision, F.image_tokens(m, image))
end

-- get_window_index (modeling_qwen2_5_vl.py): the merged grid (grid /
-- merge) cut into windows of window_size / merge / patch merged tokens a
-- side, the last row and column of windows cut short; a window holds
-- merge^2 patches per merged token. Returns { {count, size}, ... } per image.
local function windows(v, grid_h, grid_w)
  local win = v.window // v.merge // v.patch
  local function spans(n) -- window sides along one axis: {side = count}
    local t = {}
    if n // win > 0 then t[win] = n // win end
    if n % win > 0 then t[n % win] = (t[n % win] or 0) + 1 end
    return t
  end
  local by = {}
  for rh, ch in pairs(spans(grid_h // v.merge)) do
    for rw, cw in pairs(spans(grid_w // v.merge)) do
      local size = rh * rw * v.merge * v.merge
      by[size] = (by[size] or 0) + ch * cw
    end
  end
  local out = {}
  for size, count in pairs(by) do out[#out + 1] = { count = count, size = size } end
  table.sort(out, function(a, b) return a.size > b.size end)
  return out
end

-- The vision tower's attention is split as the model splits it: windows in
-- the windowed blocks, whole images in the fullatt_block_indexes ones
-- (eager scores per span); the gated MLP and RMSNorms are simulated as
-- SigLIP's LayerNorm MLP.
function F.simulator(m, images)
  local v, t = m.vision, F.image_tokens(m, images)
  local d = siq.describe({ where = m.where, text = m.text, hidden = v.hidden, layers = v.depth,
    heads = v.heads, intermediate = v.intermediate, patch = v.patch, side = t.factor,
    grid_h = t.grid[2], grid_w = t.grid[3], merge = v.merge, images = images.count,
    windows = windows(v, t.grid[2], t.grid[3]), full_layers = v.full_blocks })
  d.assumptions = { "qwen2_5_vl: the vision tower's gated MLP and RMSNorms are simulated as a "
    .. "LayerNorm GELU MLP of the same width" }
  return d
end

return F
