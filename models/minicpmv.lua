-- MiniCPM-V (model_type minicpmv; remote code, openbmb/MiniCPM-V-2_6
-- modeling_minicpmv.py and resampler.py) parameter counts and image-token
-- rule:
--
--   vpm        SigLIP-style vision transformer (Idefics2VisionTransformer):
--              patch_embedding Conv2d(3, D, patch, bias=True),
--              position_embedding Embedding((image/patch)^2, D), layers
--              (two LayerNorms, q/k/v/out_proj and fc1/fc2, all biased),
--              post_layernorm; the last layer dropped when
--              drop_vision_last_layer is true
--   resampler  Resampler(num_queries = query_num, embed_dim = LLM hidden E,
--              kv_dim = D): query (query_num, E), kv_proj Linear(D, E,
--              bias=False) when D != E, nn.MultiheadAttention(E) (in_proj
--              3E x E + 3E, out_proj E x E + E), ln_q, ln_kv, ln_post
--              LayerNorm(E), proj Parameter(E, E); its 2-D sin-cos pos_embed
--              is a buffer
--   llm        the top-level LLM config: Llama 3 for version 2.5, Qwen2 for
--              2.6, Qwen3 for 4.5
--
-- MiniCPM-V-2_6: 417,792,240 vpm + 68,619,264 resampler + 7,612,763,648
-- Qwen2-7B (151,666 tokens, untied) = 8,099,175,152.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")
local P = require("stdlib.params")
local decoder = require("models.decoder")
local siq = require("models.siq_vlm")

local F = { name = "minicpmv",
  about = "MiniCPM-V 2.5/2.6/4.5 (remote code): SigLIP-style tower + resampler + "
    .. "Llama 3 / Qwen2 / Qwen3, image slices (models/minicpmv.lua)" }

local LLM_BY_VERSION = { ["2.5"] = "llama", ["2.6"] = "qwen2", ["4.5"] = "qwen3" }

function F.read(cfg, where)
  local c = cfgutil.reader(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  if type(vc) ~= "table" then c:fail("vision_config", "must be a mapping") end
  local vr = cfgutil.reader(vc, where, "vision_config.")
  local v = { hidden = vr:int("hidden_size"), intermediate = vr:int("intermediate_size"),
    image = vr:int("image_size"), patch = vr:int("patch_size"),
    layers = vr:int("num_hidden_layers"), heads = vr:int("num_attention_heads") }
  if v.hidden % v.heads ~= 0 then
    vr:fail("num_attention_heads", ("must divide hidden_size (%d)"):format(v.hidden))
  end
  v.grid = v.image // v.patch
  if c:bool("drop_vision_last_layer", false) then v.layers = v.layers - 1 end
  local ver = c:raw("version")
  local key = type(ver) == "number" and ("%.1f"):format(ver) or tostring(ver)
  local mt = LLM_BY_VERSION[key] or c:fail("version", ("MiniCPM-V version '%s' is not "
    .. "modelled (known: 2.5, 2.6, 4.5)"):format(key))
  local text = {}
  for k, x in pairs(cfg) do
    if k ~= "vision_config" and k ~= "slice_config" then text[k] = x end
  end
  local m = { where = where, vision = v, version = key,
    text = decoder.read_nested(text, where, "", { model_type = mt }),
    query = c:int("query_num", 64) }
  -- slice_config (the processor's settings, also at the top level in 2.5):
  -- max_slice_nums 9, scale_resolution 448
  local sc = c:raw("slice_config") or {}
  if type(sc) ~= "table" then c:fail("slice_config", "must be a mapping") end
  local s = cfgutil.reader(sc, where, "slice_config.")
  m.scale = s:int("scale_resolution", nil, true) or c:int("scale_resolution", 448)
  m.max_slices = s:int("max_slice_nums", nil, true) or c:int("max_slice_nums", 9)
  local k = math.tointeger(math.sqrt(m.query))
  if m.scale % v.patch ~= 0 or not k or k * k ~= m.query or (m.scale // v.patch) % k ~= 0 then
    c:fail("query_num", ("the simulator takes the resampler's %d queries as a square merge of "
      .. "the %d-pixel slice's patch grid"):format(m.query, m.scale))
  end
  m.merge = (m.scale // v.patch) // k
  return m
end

function F.params(m)
  local v, E, Q = m.vision, m.text.hidden, m.query
  local D, I = v.hidden, v.intermediate
  local lp, np = vram.linear_params, vram.norm_params
  local layer = vram.add(2 * np(D, "layer"), 4 * lp(D, D, true), lp(D, I, true), lp(I, D, true))
  local vision = {
    { name = "vpm.embeddings", tower = "vision", params = vram.add(
      vram.conv_params(3, D, v.patch * v.patch, true), vram.embedding_params(v.grid * v.grid, D)) },
    { name = "vpm.encoder.layers", tower = "vision", params = vram.mul(layer, v.layers) },
    { name = "vpm.post_layernorm", tower = "vision", params = np(D, "layer") },
    { name = "resampler", tower = "projector", params = vram.add(vram.mul(Q, E),
      D ~= E and lp(D, E, false) or 0, lp(E, 3 * E, true), lp(E, E, true),
      vram.mul(3, np(E, "layer")), vram.mul(E, E)) },
  }
  return P.followed_by(vision, decoder.params(m.text, "llm."))
end

-- get_sliced_grid (image_processing_minicpmv.py): when the image's area
-- exceeds scale_resolution^2, a grid of cols x rows slices chosen among the
-- factorizations of ceil(area ratio) - 1 .. + 1 (at most max_slice_nums)
-- whose aspect is closest to the image's. Returns cols, rows (0, 0: none).
local function sliced_grid(m, height, width)
  local ratio = width * height / (m.scale * m.scale)
  local multiple = math.min(math.ceil(ratio), m.max_slices)
  if multiple <= 1 then return 0, 0 end
  local log_ratio = math.log(width / height)
  local best, err = { 1, 1 }, math.huge
  for _, nums in ipairs({ multiple - 1, multiple, multiple + 1 }) do
    if nums ~= 1 and nums <= m.max_slices then
      for c = 1, nums do
        if nums % c == 0 then
          local e = math.abs(log_ratio - math.log(c / (nums // c)))
          if e < err then best, err = { c, nums // c }, e end
        end
      end
    end
  end
  return best[1], best[2]
end

-- The prompt (get_slice_image_placeholder): <image> + query_num <unk> +
-- </image> for the source image, then each slice as <slice> + query_num
-- <unk> + </slice>, rows joined by "\n"; 2.6 and later prefix
-- <image_id>N</image_id> (3 tokens for N < 10, counted once per image).
-- image = {height, width}
function F.image_tokens(m, image)
  local cols, rows = sliced_grid(m, image.height, image.width)
  local crops = 1 + cols * rows
  local tokens = crops * (m.query + 2) + math.max(rows - 1, 0)
    + (m.version ~= "2.5" and 3 or 0)
  return { tokens = tokens, image_tokens = crops * m.query, crops = crops, grid = { cols, rows } }
end

-- Every crop is simulated at scale_resolution square (the processor resizes
-- each to about that area, patch-aligned), the resampler as a pixel shuffle
-- to query_num tokens and a two-layer projector.
function F.simulator(m, images)
  local v, t = m.vision, F.image_tokens(m, images)
  local d = siq.describe({ where = m.where, text = m.text, hidden = v.hidden, layers = v.layers,
    heads = v.heads, intermediate = v.intermediate, patch = v.patch, side = m.scale,
    merge = m.merge, images = images.count * t.crops, tokens = t.tokens * images.count })
  d.assumptions = { ("minicpmv: each of the %d crops is a %dx%d image and the resampler's "
    .. "cross-attention is simulated as a pixel shuffle and a two-layer projector"):format(
    t.crops, m.scale, m.scale) }
  return d
end

return F
