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
--              bias=False), nn.MultiheadAttention(E) (in_proj 3E x E + 3E,
--              out_proj E x E + E), ln_q, ln_kv, ln_post LayerNorm(E), proj
--              Parameter(E, E); its 2-D sin-cos pos_embed is a buffer
--   llm        the top-level LLM config: Llama 3 for version 2.5, Qwen2 for
--              2.6, Qwen3 for 4.5
--
-- MiniCPM-V-2_6: 417,792,240 vpm + 68,619,264 resampler + 7,612,763,648
-- Qwen2-7B (151,666 tokens, untied) = 8,099,175,152.
--
-- Images: the source image plus, when its area exceeds scale_resolution^2
-- (448^2), a grid of slices chosen among the factorizations of
-- ceil(area ratio) - 1 .. + 1 (at most max_slice_nums) whose aspect is
-- closest to the image's (get_sliced_grid); query_num tokens each.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")
local P = require("stdlib.params")
local decoder = require("models.decoder")

local F = {}

F.LLM_BY_VERSION = { ["2.5"] = "llama", ["2.6"] = "qwen2", ["4.5"] = "qwen3" }

local function llm_type(cfg, where)
  local v = cfg.version
  local key = type(v) == "number" and ("%.1f"):format(v) or tostring(v)
  local mt = F.LLM_BY_VERSION[key]
  if not mt then
    errors.input(where, "version", ("MiniCPM-V version '%s' is not modelled (known: 2.5, 2.6, "
      .. "4.5)"):format(key))
  end
  return mt
end

function F.count(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local v = cfgutil.reader(vc, where, "vision_config.")
  local D, I = v:int("hidden_size"), v:int("intermediate_size")
  local side, patch = v:int("image_size"), v:int("patch_size")
  local layers = v:int("num_hidden_layers")
  local c = cfgutil.reader(cfg, where)
  if c:bool("drop_vision_last_layer", false) then layers = layers - 1 end
  local text = {}
  for k, x in pairs(cfg) do
    if k ~= "vision_config" and k ~= "slice_config" then text[k] = x end
  end
  local parts, m, tied = decoder.text_parts(text, where, { model_type = llm_type(cfg, where) }, nil,
    "llm.")
  local E, Q = m.hidden, c:int("query_num", 64)
  local n = (side // patch) * (side // patch)
  local layer = 2 * vram.norm_params(D, "layer") + 4 * vram.linear_params(D, D, true)
    + vram.linear_params(D, I, true) + vram.linear_params(I, D, true)
  local vision = {
    { name = "vpm.embeddings", tower = "vision", params = vram.conv_params(3, D, patch * patch, true)
      + vram.embedding_params(n, D) },
    { name = "vpm.encoder.layers", tower = "vision", params = vram.mul(layer, layers) },
    { name = "vpm.post_layernorm", tower = "vision", params = vram.norm_params(D, "layer") },
    { name = "resampler", tower = "projector", params = vram.add(vram.mul(Q, E),
      D ~= E and vram.linear_params(D, E, false) or 0, vram.linear_params(E, 3 * E, true),
      vram.linear_params(E, E, true), vram.mul(3, vram.norm_params(E, "layer")), vram.mul(E, E)) },
  }
  return { parts = P.append(vision, parts), tied_duplicate = tied }
end

-- Crops one image becomes: the source plus its slices.
function F.crops(cfg, height, width)
  local sc = cfg.slice_config or {}
  local scale = sc.scale_resolution or cfg.scale_resolution or 448
  local max_slices = sc.max_slice_nums or cfg.max_slice_nums or 9
  local ratio = width * height / (scale * scale)
  local multiple = math.min(math.ceil(ratio), max_slices)
  if multiple <= 1 then return 1 end
  local log_ratio = math.log(width / height)
  local best, err = { 1, 1 }, math.huge
  for _, nums in ipairs({ multiple - 1, multiple, multiple + 1 }) do
    if nums ~= 1 and nums <= max_slices then
      for m = 1, nums do
        if nums % m == 0 then
          local e = math.abs(log_ratio - math.log(m / (nums // m)))
          if e < err then best, err = { m, nums // m }, e end
        end
      end
    end
  end
  return 1 + best[1] * best[2]
end

return F
