-- Idefics3 and SmolVLM (model_types idefics3, smolvlm) parameter counts and
-- image-token rule, read off transformers' modeling_idefics3.py /
-- processing_idefics3.py:
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
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")
local P = require("stdlib.params")
local vt = require("stdlib.vision_tokens")
local decoder = require("models.decoder")
local llava = require("models.llava")
local siq = require("models.siq_vlm")

local F = { name = "idefics3",
  about = "Idefics3 / SmolVLM: SigLIP-style tower + pixel shuffle + linear projection + "
    .. "Llama, image splitting (models/idefics3.lua)" }

-- Idefics3VisionConfig defaults.
local VISION_DEFAULTS = { hidden_size = 1152, intermediate_size = 3072, num_hidden_layers = 12,
  num_attention_heads = 16, image_size = 224, patch_size = 32, num_channels = 3 }

local function read_vision(vc, where)
  if vc ~= nil and type(vc) ~= "table" then
    errors.input(where, "vision_config", "must be a mapping")
  end
  local t = {}
  for k, v in pairs(VISION_DEFAULTS) do t[k] = v end
  for k, v in pairs(vc or {}) do t[k] = v end
  local c = cfgutil.reader(t, where, "vision_config.")
  local v = { hidden = c:int("hidden_size"), intermediate = c:int("intermediate_size"),
    layers = c:int("num_hidden_layers"), heads = c:int("num_attention_heads"),
    image = c:int("image_size"), patch = c:int("patch_size"), channels = c:int("num_channels") }
  -- the patch Conv2d floors: SmolVLM-Instruct's SigLIP at 384 with patch
  -- 14 sees 27 x 27 patches (Idefics3VisionEmbeddings: image_size // patch_size)
  if v.image < v.patch then
    c:fail("image_size", ("must be at least patch_size (%d), got %d"):format(v.patch, v.image))
  end
  if v.hidden % v.heads ~= 0 then
    c:fail("num_attention_heads", ("must divide hidden_size (%d)"):format(v.hidden))
  end
  v.grid = v.image // v.patch
  return v
end

-- Idefics3Config: scale_factor 2, tie_word_embeddings False, a LlamaConfig
-- text_config.
function F.read(cfg, where)
  local c = cfgutil.reader(cfg, where)
  local m = { where = where, vision = read_vision(cfg.vision_config, where),
    scale = c:int("scale_factor", 2) }
  if m.vision.grid % m.scale ~= 0 then
    c:fail("scale_factor", ("must divide the %dx%d patch grid, got %d"):format(m.vision.grid,
      m.vision.grid, m.scale))
  end
  m.text = llava.read_text(cfg, where, false)
  return m
end

function F.params(m)
  local v = m.vision
  local D, I = v.hidden, v.intermediate
  local lp, np = vram.linear_params, vram.norm_params
  local layer = vram.add(2 * np(D, "layer"), 4 * lp(D, D, true), lp(D, I, true), lp(I, D, true))
  local parts = {
    { name = "model.vision_model.embeddings", tower = "vision",
      params = vram.add(vram.conv_params(v.channels, D, v.patch * v.patch, true),
        vram.embedding_params(v.grid * v.grid, D)) },
    { name = "model.vision_model.encoder.layers", tower = "vision",
      params = vram.mul(layer, v.layers) },
    { name = "model.vision_model.post_layernorm", tower = "vision", params = np(D, "layer") },
    { name = "model.connector.modality_projection", tower = "projector",
      params = lp(vram.mul(D, m.scale, m.scale), m.text.hidden, false) },
  }
  -- the text model's lm_head sits at the top level: "lm_head"
  local text = decoder.params(m.text, "model.text_model.")
  for _, p in ipairs(text.parts) do
    if p.name == "model.text_model.lm_head" then p.name = "lm_head" end
  end
  return P.followed_by(parts, text)
end

-- The processor's settings: size {"longest_edge": 4 x tile} and
-- max_image_size {"longest_edge": tile}, with tile the tower's image_size
-- (Idefics3ImageProcessor's defaults are 4 x 364 and 364 for Idefics3's
-- 364-pixel tower; SmolVLM-256M's preprocessor_config.json gives 2048 and
-- 512 for its 512-pixel tower). MAX_IMAGE_SIZE is 4096.
F.PROCESSOR = { edge_tiles = 4, max_image_size = 4096 }

-- Idefics3Processor's prompt per image (processing_idefics3.py,
-- _prompt_split_image / _prompt_single_image), image_seq_len =
-- (image/patch)^2 / scale^2 <image> tokens per tile:
--   split:  per tile <fake_token_around_image> <row_r_col_c> + image_seq_len,
--           a "\n" after each row, then "\n" <fake_token_around_image>
--           <global-img> + image_seq_len + <fake_token_around_image>
--   single: <fake_token_around_image> <global-img> + image_seq_len +
--           <fake_token_around_image>
-- Each "\n" is counted as one token (a tokenizer may merge the last row's
-- with the next one).
-- image = {height, width, longest_edge (optional, the processor's setting)}
function F.image_tokens(m, image)
  local tile = m.vision.image
  local t = vt.longest_edge_split(image.height, image.width, { tile = tile,
    longest_edge = image.longest_edge or F.PROCESSOR.edge_tiles * tile,
    max_image_size = F.PROCESSOR.max_image_size })
  local g = m.vision.grid // m.scale
  t.per_tile = g * g
  t.image_tokens = t.per_tile * t.tiles
  if t.rows > 0 then
    t.tokens = t.rows * t.cols * (t.per_tile + 2) + t.rows + t.per_tile + 4
  else
    t.tokens = t.per_tile + 3
  end
  return t
end

-- Every tile (and the global image) is one image of the tower's side (the
-- patches its Conv2d covers: 384 at patch 14 is 27 x 27).
function F.simulator(m, images)
  local v, t = m.vision, F.image_tokens(m, images)
  return siq.describe({ where = m.where, text = m.text, hidden = v.hidden, layers = v.layers,
    heads = v.heads, intermediate = v.intermediate, patch = v.patch, side = v.patch * v.grid,
    merge = m.scale, images = images.count * t.tiles, tokens = t.tokens * images.count })
end

return F
