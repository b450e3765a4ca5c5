-- Llama 3.2 Vision (mllama) parameter counts, read off transformers'
-- modeling_mllama.py:
--
--   vision_model   patch_embedding Conv2d(channels, D, patch, bias=False);
--                  class_embedding (D); gated_positional_embedding:
--                  embedding (patches + 1, D), gate (1), tile_embedding
--                  Embedding(max_aspect_ratio_id + 1, max_num_tiles x
--                  (patches + 1) x D); pre_ and post_tile_positional_embedding:
--                  Embedding(max_aspect_ratio_id + 1, max_num_tiles x D) and a
--                  gate each; layernorm_pre, layernorm_post (LayerNorm);
--                  transformer: num_hidden_layers layers (q/k/v/o without
--                  bias, fc1/fc2 with, two LayerNorms); global_transformer:
--                  num_global_layers such layers plus gate_attn and gate_ffn
--                  max_aspect_ratio_id = len(supported_aspect_ratios)
--   multi_modal_projector  Linear(vision_output_dim, text hidden, bias)
--   language_model embed_tokens (vocab + 8 rows); Llama layers, of which
--                  cross_attention_layers are cross-attention layers (q/k/v/o,
--                  q_norm and k_norm RMSNorm(head_dim), cross_attn_attn_gate
--                  and cross_attn_mlp_gate, the MLP and two norms); norm;
--                  lm_head (vocab rows)
--
-- Llama-3.2-11B-Vision-Instruct: 863,567,379 vision + 31,461,376 projector
-- + 9,775,192,080 text = 10,670,220,835, the Hub count. Simulated by
-- models/mllama_vlm.lua.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")
local decoder = require("models.decoder")

local F = { name = "mllama",
  about = "Llama 3.2 Vision: tiled ViT with global layers + projector + Llama with "
    .. "cross-attention layers (models/mllama.lua)" }

local function list(c, key, default)
  local v = c:raw(key)
  if v == nil then return default end
  if type(v) ~= "table" then c:fail(key, "must be a list") end
  return v
end

-- MllamaVisionConfig defaults (configuration_mllama.py).
local RATIOS = { { 1, 1 }, { 1, 2 }, { 1, 3 }, { 1, 4 }, { 2, 1 }, { 2, 2 }, { 3, 1 }, { 4, 1 } }

local function read_vision(vc, where)
  local c = cfgutil.reader(vc, where, "vision_config.")
  local v = { hidden = c:int("hidden_size", 1280), intermediate = c:int("intermediate_size", 5120),
    patch = c:int("patch_size", 14), image = c:int("image_size", 448),
    tiles = c:int("max_num_tiles", 4), channels = c:int("num_channels", 3),
    layers = c:int("num_hidden_layers", 32), global_layers = c:int("num_global_layers", 8),
    heads = c:int("attention_heads", 16), out_dim = c:int("vision_output_dim", 7680) }
  v.ratios = list(c, "supported_aspect_ratios", RATIOS)
  for i, r in ipairs(v.ratios) do
    if type(r) ~= "table" or math.type(r[1]) ~= "integer" or math.type(r[2]) ~= "integer"
      or r[1] < 1 or r[2] < 1 or r[1] * r[2] > v.tiles then
      c:fail("supported_aspect_ratios[" .. i .. "]", ("must be [h, w] tiles, at most "
        .. "max_num_tiles (%d) in all"):format(v.tiles))
    end
  end
  v.intermediate_layers = #list(c, "intermediate_layers_indices", { 3, 7, 15, 23, 30 })
  if v.out_dim ~= v.hidden * (v.intermediate_layers + 1) then
    c:fail("vision_output_dim", ("must be hidden_size x (1 + intermediate layers) = %d, got %d")
      :format(v.hidden * (v.intermediate_layers + 1), v.out_dim))
  end
  if v.image % v.patch ~= 0 then
    c:fail("image_size", ("must be a multiple of patch_size (%d)"):format(v.patch))
  end
  if v.hidden % v.heads ~= 0 then
    c:fail("attention_heads", ("must divide hidden_size (%d)"):format(v.hidden))
  end
  v.grid = v.image // v.patch
  v.positions = v.grid * v.grid + 1 -- patches + CLS
  return v
end

-- MllamaTextConfig defaults.
local function read_text(tc, where, top_tie)
  local c = cfgutil.reader(tc, where, "text_config.")
  local t = { hidden = c:int("hidden_size", 4096), intermediate = c:int("intermediate_size", 14336),
    layers = c:int("num_hidden_layers", 40), heads = c:int("num_attention_heads", 32),
    vocab = c:int("vocab_size", 128256) }
  t.kv_heads = c:int("num_key_value_heads", 8)
  t.tie = c:bool("tie_word_embeddings", top_tie or false)
  if t.hidden % t.heads ~= 0 or t.heads % t.kv_heads ~= 0 then
    c:fail("num_key_value_heads", "must divide num_attention_heads, which must divide "
      .. "hidden_size")
  end
  t.head_dim = t.hidden // t.heads
  local cross = list(c, "cross_attention_layers", { 3, 8, 13, 18, 23, 28, 33, 38 })
  t.cross = {}
  for i, x in ipairs(cross) do
    if math.type(x) ~= "integer" or x < 0 or x >= t.layers then
      c:fail("cross_attention_layers[" .. i .. "]", ("must be a layer index 0..%d")
        :format(t.layers - 1))
    end
    t.cross[x + 1] = true
  end
  t.n_cross = #cross
  return t
end

function F.read(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local tc = cfg.text_config or errors.input(where, "text_config", "is required but missing")
  if type(vc) ~= "table" then errors.input(where, "vision_config", "must be a mapping") end
  if type(tc) ~= "table" then errors.input(where, "text_config", "must be a mapping") end
  local top = cfgutil.reader(cfg, where):bool("tie_word_embeddings", false)
  local m = { where = where, vision = read_vision(vc, where), lm = read_text(tc, where, top) }
  -- the decoder the simulator runs: Llama layers, the cross-attention ones
  -- at their indices, an embedding of vocab + 8 rows
  local t = m.lm
  m.text = decoder.read({ model_type = "llama", hidden_size = t.hidden,
    intermediate_size = t.intermediate, num_hidden_layers = t.layers,
    num_attention_heads = t.heads, num_key_value_heads = t.kv_heads, vocab_size = t.vocab,
    tie_word_embeddings = t.tie }, where, "text_config.")
  m.text.cross_layers, m.text.embed_rows, m.text.uniform = t.cross, t.vocab + 8, false
  for i = t.layers, 1, -1 do
    if t.cross[i] then m.text.last_cross = i break end
  end
  return m
end

function F.params(m)
  local v, t = m.vision, m.lm
  local add, mul, lp, np = vram.add, vram.mul, vram.linear_params, vram.norm_params
  local D, I, Pn = v.hidden, v.intermediate, v.positions
  local ratios = #v.ratios + 1
  local layer = add(mul(4, lp(D, D, false)), lp(D, I, true), lp(I, D, true),
    mul(2, np(D, "layer")))
  local H, TI, hd = t.hidden, t.intermediate, t.head_dim
  local attn = add(mul(2, lp(H, mul(t.heads, hd), false)), mul(2, lp(H, mul(t.kv_heads, hd), false)))
  local mlp_norms = add(mul(3, lp(H, TI, false)), mul(2, np(H, "rms")))
  local self_l = add(attn, mlp_norms)
  local cross_l = add(attn, mul(2, np(hd, "rms")), 2, mlp_norms)
  return { parts = {
    { name = "vision_model.embeddings", tower = "vision", params = add(
      vram.conv_params(v.channels, D, v.patch * v.patch, false), D, mul(Pn, D), 1,
      mul(ratios, v.tiles, Pn, D), mul(2, add(mul(ratios, v.tiles, D), 1))) },
    { name = "vision_model.layernorms", tower = "vision", params = mul(2, np(D, "layer")) },
    { name = "vision_model.transformer", tower = "vision", params = mul(v.layers, layer) },
    { name = "vision_model.global_transformer", tower = "vision",
      params = mul(v.global_layers, add(layer, 2)) },
    { name = "multi_modal_projector", tower = "projector", params = lp(v.out_dim, H, true) },
    { name = "language_model.embed_tokens", tower = "llm",
      params = vram.embedding_params(t.vocab + 8, H), note = "vocab_size + 8 rows" },
    { name = "language_model.layers", tower = "llm",
      params = add(mul(t.layers - t.n_cross, self_l), mul(t.n_cross, cross_l)),
      note = ("%d self-attention + %d cross-attention layers"):format(t.layers - t.n_cross,
        t.n_cross) },
    { name = "language_model.norm", tower = "llm", params = np(H, "rms") },
    { name = "lm_head", tower = "llm", params = t.tie and 0 or lp(H, t.vocab, false) },
  }, tied_duplicate = t.tie and vram.embedding_params(t.vocab + 8, H) or 0 }
end

-- MllamaImageProcessor (image_processing_mllama.py) resizes an image onto
-- a canvas of up to max_image_tiles tiles of image_size and pads
-- pixel_values to max_image_tiles tiles; the model runs every tile. The
-- prompt holds one <|image|> token per image; the text reaches the image
-- through the cross-attention layers, over tiles x (patches + 1) states.
-- (The canvas the aspect ratio picks changes only which embeddings are
-- added, not a size.)
function F.image_tokens(m)
  local v = m.vision
  return { tokens = 1, tiles = v.tiles, vision_tokens = v.tiles * v.positions,
    grid = { v.grid, v.grid } }
end

function F.simulator(m, images)
  local v = m.vision
  local padded = (v.positions + 7) // 8 * 8 -- the encoder pads each tile to a multiple of 8
  return { sim = require("models.mllama_vlm"), text = m.text,
    vision = { hidden_size = v.hidden, num_hidden_layers = v.layers + v.global_layers,
      num_attention_heads = v.heads, intermediate_size = v.intermediate, patch_size = v.patch,
      image_size = v.patch, grid_h = v.tiles, grid_w = padded, num_channels = v.channels,
      vision_use_head = false },
    vlm = { images = images.count, tiles = v.tiles, positions = v.positions, image = v.image,
      channels = v.channels, out_dim = v.out_dim, intermediate_layers = v.intermediate_layers,
      local_layers = v.layers, last_cross = m.text.last_cross },
    assumptions = { "mllama: the vision encoder (local + global layers over all max_num_tiles "
      .. "tiles, padded to a multiple of 8 per tile) is simulated as a SigLIP ViT of its sizes; "
      .. "every image is padded to max_num_tiles tiles, as the processor does" } }
end

return F
