-- Qwen3-VL parameter counts, read off transformers
-- src/transformers/models/qwen3_vl/modeling_qwen3_vl.py:
--
--   Qwen3VLVisionPatchEmbed.proj  nn.Conv3d(in_channels, hidden,
--                 kernel=(temporal_patch_size, patch, patch), bias=True)
--   pos_embed     nn.Embedding(num_position_embeddings, hidden) (learned,
--                 bilinearly interpolated to the image's grid)
--   Qwen3VLVisionBlock x depth
--                 norm1, norm2: LayerNorm(hidden, eps=1e-6) (weight + bias)
--                 attn.qkv: Linear(hidden, 3*hidden, bias=True)
--                 attn.proj: Linear(hidden, hidden) (bias)
--                 mlp.linear_fc1: Linear(hidden, intermediate, bias=True)
--                 mlp.linear_fc2: Linear(intermediate, hidden, bias=True)
--   merger        Qwen3VLVisionPatchMerger(use_postshuffle_norm=False):
--                 norm: LayerNorm(hidden); linear_fc1: Linear(4h, 4h) (bias);
--                 GELU; linear_fc2: Linear(4h, out_hidden_size) (bias),
--                 with 4h = hidden * spatial_merge_size^2
--   deepstack_merger_list: one merger per deepstack_visual_indexes entry,
--                 use_postshuffle_norm=True: the same but LayerNorm(4h)
--   rotary_pos_emb: a buffer, no parameters.
--   language model: Qwen3 (no attention biases: attention_bias false;
--                 q_norm/k_norm RMSNorm(head_dim)), models/decoder.lua.
--
-- Qwen3-VL-4B-Instruct: 415,347,712 vision + 4,022,468,096 text =
-- 4,437,815,808, which is the checkpoint's metadata.total_size
-- (8,875,631,616 bytes, all BF16) / 2; its 315 visual tensors are
-- 830,695,424 bytes = 415,347,712 parameters.
--
-- Seed 000's hand count, 4,925,110,784, is 487,294,976 higher:
--   + 388,956,160  lm_head counted a second time: the embedding is tied
--                  (tie_word_embeddings true), PyTorch holds one tensor;
--                  a Flax tree that stores both pays it twice -- reported
--                  here as tied_duplicate, not in the total;
--   +     221,184  q/k/v biases (6,144 per layer x 36) Qwen3 does not have;
--   + 100,491,264  vision blocks counted with a gated 3-matrix MLP without
--                  biases and weight-only LayerNorms (16,783,360 per block
--                  instead of 12,596,224);
--   -   2,359,296  the learned pos_embed (2304 x 1024) left out;
--   -      14,336  biases left out: patch embed (1,024), merger LayerNorm
--                  (1,024), deepstack LayerNorms (3 x 4,096).
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")
local P = require("stdlib.params")
local decoder = require("models.decoder")
local qwen2_vl = require("models.qwen2_vl")
local siq = require("models.siq_vlm")

local F = { name = "qwen3_vl",
  about = "Qwen3-VL: ViT (patch 16) + merger + DeepStack mergers + Qwen3 (models/qwen3_vl.lua)" }

local function read_vision(vc, where)
  local c = cfgutil.reader(vc, where, "vision_config.")
  local v = {
    hidden = c:int("hidden_size"),
    depth = c:int("depth"),
    heads = c:int("num_heads"),
    intermediate = c:int("intermediate_size"),
    out_hidden = c:int("out_hidden_size"),
    patch = c:int("patch_size"),
    temporal = c:int("temporal_patch_size", 2),
    merge = c:int("spatial_merge_size", 2),
    channels = c:int("in_channels", 3),
    positions = c:int("num_position_embeddings"),
  }
  local ds = vc.deepstack_visual_indexes or {}
  if type(ds) ~= "table" then c:fail("deepstack_visual_indexes", "must be a list") end
  v.deepstack = #ds
  for _, i in ipairs(ds) do
    if math.type(i) ~= "integer" or i < 0 or i >= v.depth then
      c:fail("deepstack_visual_indexes", ("entries must be block indexes 0..%d, got %s")
        :format(v.depth - 1, tostring(i)))
    end
  end
  return v
end

-- The decoder model_type of a Qwen3-VL config's text model:
-- qwen3_vl_text is Qwen3's attention (q_norm/k_norm, attention_bias);
-- qwen3_vl_moe_text adds Qwen3-MoE's experts.
function F.text_model_type(cfg)
  local t = type(cfg.text_config) == "table" and cfg.text_config.model_type or nil
  if cfg.model_type == "qwen3_vl_moe" or t == "qwen3_vl_moe_text" then return "qwen3_moe" end
  return "qwen3"
end

function F.read(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local tcfg = cfg.text_config or errors.input(where, "text_config", "is required but missing")
  local v = read_vision(vc, where)
  local tie = tcfg.tie_word_embeddings
  if tie == nil then tie = cfg.tie_word_embeddings end
  return { where = where, vision = v, text = decoder.read_nested(tcfg, where, "text_config.",
    { model_type = F.text_model_type(cfg), tie_word_embeddings = tie or false }) }
end

local function merger(v, postshuffle)
  local H4 = v.hidden * v.merge * v.merge
  return vram.norm_params(postshuffle and H4 or v.hidden, "layer")
    + vram.linear_params(H4, H4, true) + vram.linear_params(H4, v.out_hidden, true)
end

local function vision_parts(v)
  local H, I = v.hidden, v.intermediate
  local block = 2 * vram.norm_params(H, "layer")
    + vram.linear_params(H, 3 * H, true) + vram.linear_params(H, H, true)
    + vram.linear_params(H, I, true) + vram.linear_params(I, H, true)
  return {
    { name = "visual.patch_embed", tower = "vision",
      params = vram.conv_params(v.channels, H, v.temporal * v.patch * v.patch, true) },
    { name = "visual.pos_embed", tower = "vision", params = vram.embedding_params(v.positions, H) },
    { name = "visual.blocks", tower = "vision", params = block * v.depth },
    { name = "visual.merger", tower = "projector", params = merger(v, false) },
    { name = "visual.deepstack_merger_list", tower = "projector",
      params = merger(v, true) * v.deepstack,
      note = v.deepstack .. " mergers (deepstack_visual_indexes)" },
  }
end

function F.params(m)
  return P.followed_by(vision_parts(m.vision), decoder.params(m.text, "model.language_model."))
end

-- Qwen3-VL's preprocessor_config.json (Qwen/Qwen3-VL-4B-Instruct;
-- image_processor_type Qwen2VLImageProcessorFast) sets size
-- {"shortest_edge": 65536, "longest_edge": 16777216}: 256^2 to 4096^2
-- pixels. With patch 16 and merge 2 one token covers 32 x 32 = 1024
-- pixels, so tokens ~ pixels / 1024 (Qwen2-VL's processor,
-- models/qwen2_vl.lua).
F.PROCESSOR = { min_pixels = 65536, max_pixels = 16777216 }

-- image = {height, width, max_pixels (optional, the processor's setting)}
function F.image_tokens(m, image)
  return qwen2_vl.processor_tokens(m.vision, image, F.PROCESSOR)
end

-- The tower simulated with the checkpoint's weights (models/siq_vlm.lua,
-- models/siglip.lua): a Conv3d patch embedding over temporal_patch_size
-- frames, num_position_embeddings learned positions interpolated to the
-- grid (with the interpolation's temporaries), q/k/v of 3 x (h x h + h) as
-- the fused qkv, the merger's LayerNorm(hidden) as the post-LayerNorm,
-- merger 4h -> 4h -> out and DeepStack mergers with LayerNorm(4h): its
-- parameter count is F.params' (tests/lua/test_models.lua). What is
-- approximated is said in the estimate.
function F.simulator(m, images)
  local v, t = m.vision, F.image_tokens(m, images)
  if v.out_hidden ~= m.text.hidden then
    errors.input(m.where, "vision_config.out_hidden_size", ("must equal the text hidden_size "
      .. "(%d), got %d"):format(m.text.hidden, v.out_hidden))
  end
  local d = siq.describe({ where = m.where, text = m.text, hidden = v.hidden, layers = v.depth,
    heads = v.heads, intermediate = v.intermediate, patch = v.patch, side = t.factor,
    grid_h = t.grid[2], grid_w = t.grid[3], merge = v.merge, deepstack = v.deepstack,
    images = images.count, temporal = v.temporal, positions = v.positions, channels = v.channels,
    merger_hidden = v.hidden * v.merge * v.merge, deepstack_norm = true })
  d.assumptions = { "qwen3_vl: the vision blocks' activations are simulated with separate "
    .. "q/k/v projections instead of the fused qkv and without the 2-D rotary embedding's "
    .. "fp32 q/k copies; the DeepStack mergers read the last block's output (the model reads "
    .. "blocks deepstack_visual_indexes, of the same size); the merge is priced as a pixel "
    .. "shuffle's two copies (the model's patches already come in merge order, a view); the "
    .. "weights are the checkpoint's" }
  return d
end

return F
