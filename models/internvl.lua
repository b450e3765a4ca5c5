-- InternVL 1.5 / 2 / 2.5 / 3 (the remote-code checkpoints, model_type
-- "internvl_chat"). Counts read off the model repositories' remote code
-- (OpenGVLab/InternVL, internvl_chat/internvl/model/):
--
-- internvit/modeling_intern_vit.py, InternVisionModel:
--   embeddings.class_embedding      Parameter(1, 1, D)
--   embeddings.patch_embedding      Conv2d(3, D, patch, stride=patch) (bias)
--   embeddings.position_embedding   Parameter(1, (image/patch)^2 + 1, D)
--   encoder.layers x num_hidden_layers, InternVisionEncoderLayer:
--     attn.qkv   Linear(D, 3D, bias=qkv_bias)
--     attn.q_norm, attn.k_norm  InternRMSNorm(D), only if qk_normalization
--     attn.proj  Linear(D, D) (bias)
--     mlp.fc1 Linear(D, I), mlp.fc2 Linear(I, D) (biases)
--     norm1, norm2  NORM2FN[norm_type]: LayerNorm (weight + bias) or
--                   InternRMSNorm (weight)
--     ls1, ls2   layer scales, Parameter(D) each
--   (no final norm)
-- internvl_chat/modeling_internvl_chat.py, InternVLChatModel.mlp1:
--   LayerNorm(D * r^2), Linear(D * r^2, llm_hidden), GELU,
--   Linear(llm_hidden, llm_hidden), with r = int(1 / downsample_ratio)
-- language model: InternLM2 (models/internlm2.lua) or a Qwen2/Qwen3/Llama
-- decoder (models/decoder.lua).
--
-- InternVL2-2B (InternViT-300M-448px + internlm2-chat-1_8b):
-- 304,012,288 + 12,595,200 + 1,889,146,880 = 2,205,754,368.
-- InternVL3-2B (InternViT-300M-448px-V2_5 + Qwen2.5-1.5B, untied head):
-- 304,012,288 + 8,662,016 + 1,776,283,136 = 2,088,957,440.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")
local P = require("stdlib.params")
local vt = require("stdlib.vision_tokens")
local decoder = require("models.decoder")
local internlm2 = require("models.internlm2")
local siq = require("models.siq_vlm")

local F = { name = "internvl",
  about = "InternVL 1.5/2/2.5/3 remote code: InternViT + mlp1 + Qwen2/InternLM2/Llama "
    .. "(models/internvl.lua)" }

-- Square sizes may be written [h, w] (the -hf configs).
local function side(c, key)
  local x = c:raw(key)
  if type(x) == "table" then
    if math.type(x[1]) ~= "integer" or x[1] ~= x[2] then
      c:fail(key, "must be a square size, an integer or [n, n]")
    end
    return x[1]
  end
  return c:int(key)
end

-- The remote code's keys and InternVisionConfig defaults
-- (configuration_intern_vit.py: qkv_bias False, qk_normalization True,
-- norm_type "rms_norm"; the published configs spell them out), and the
-- -hf format's (InternVLVisionConfig: attention_bias False, use_qk_norm
-- False, norm_type "layer_norm").
local REMOTE = { bias = "qkv_bias", qk = "qk_normalization", qk_default = true,
  norm_default = "rms_norm" }
local HF = { bias = "attention_bias", qk = "use_qk_norm", qk_default = false,
  norm_default = "layer_norm" }

local function read_vision(vc, where, keys)
  local c = cfgutil.reader(vc, where, "vision_config.")
  local v = {
    hidden = c:int("hidden_size"),
    layers = c:int("num_hidden_layers"),
    heads = c:int("num_attention_heads"),
    intermediate = c:int("intermediate_size"),
    patch = side(c, "patch_size"),
    image = side(c, "image_size"),
    channels = c:int("num_channels", 3),
    qkv_bias = c:bool(keys.bias, false),
    qk_norm = c:bool(keys.qk, keys.qk_default),
    norm = c:str("norm_type", keys.norm_default),
  }
  if v.norm ~= "layer_norm" and v.norm ~= "rms_norm" then
    c:fail("norm_type", "must be 'layer_norm' or 'rms_norm', got '" .. v.norm .. "'")
  end
  if v.image % v.patch ~= 0 then
    c:fail("image_size", ("must be a multiple of patch_size (%d)"):format(v.patch))
  end
  v.grid = v.image // v.patch
  return v
end

local function vision_parts(v)
  local D, I = v.hidden, v.intermediate
  local nk = v.norm == "layer_norm" and "layer" or "rms"
  local layer = vram.linear_params(D, 3 * D, v.qkv_bias) + vram.linear_params(D, D, true)
    + (v.qk_norm and 2 * vram.norm_params(D, "rms") or 0)
    + vram.linear_params(D, I, true) + vram.linear_params(I, D, true)
    + 2 * vram.norm_params(D, nk) + 2 * D
  return {
    { name = "vision_model.embeddings", tower = "vision",
      params = D + vram.conv_params(v.channels, D, v.patch * v.patch, true)
        + (v.grid * v.grid + 1) * D },
    { name = "vision_model.encoder.layers", tower = "vision", params = layer * v.layers },
  }
end

-- The language model: InternLM2 (its own counts) or a decoder of
-- models/decoder.lua. Returns {kind, text = decoder model, internlm2 = ...}.
local ARCH_TYPES = { InternLM2ForCausalLM = "internlm2", Qwen2ForCausalLM = "qwen2",
  LlamaForCausalLM = "llama", Qwen3ForCausalLM = "qwen3" }

local function read_llm(lc, where, prefix)
  local mt = lc.model_type
  if mt == nil and type(lc.architectures) == "table" then mt = ARCH_TYPES[lc.architectures[1]] end
  if mt == "internlm2" then
    local m = internlm2.read_text(lc, where, prefix)
    return { internlm2 = m, text = m.text }
  elseif mt == "qwen2" or mt == "llama" or mt == "qwen3" then
    return { text = decoder.read_nested(lc, where, prefix, { model_type = mt }) }
  end
  errors.input(where, prefix .. "model_type", ("InternVL with a '%s' language model is not "
    .. "counted (known: internlm2, qwen2, qwen3, llama)"):format(tostring(mt)))
end

-- keys: the vision config's spelling; llm: where the language model's
-- config sits; proj: the projector's module name.
local function read_as(cfg, where, keys, llm, proj)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local lc = cfg[llm] or errors.input(where, llm, "is required but missing")
  local m = read_llm(lc, where, llm .. ".")
  m.where, m.vision, m.proj = where, read_vision(vc, where, keys), proj
  local c = cfgutil.reader(cfg, where)
  m.downsample = c:num("downsample_ratio", 0.5)
  m.shuffle = math.tointeger(math.floor(1 / m.downsample))
  if not m.shuffle or m.shuffle < 1 then c:fail("downsample_ratio", "must be in (0, 1]") end
  -- the processor's tile side (InternVLChatModel: config.force_image_size)
  m.tile = c:int("force_image_size", m.vision.image)
  return m
end

function F.read(cfg, where) return read_as(cfg, where, REMOTE, "llm_config", "mlp1") end

-- The transformers-native format (model_type "internvl", the -hf
-- repositories; modeling_internvl.py, models/internvl_hf.lua): the same
-- weights under other names (q/k/v_proj with bias=attention_bias,
-- projection_layer, lambda_1/2 layer scales, layernorm_before/after;
-- multi_modal_projector = mlp1) and a text_config.
-- InternVLVisionConfig switches that add or drop parameters (a mask token,
-- the absolute position embeddings, the final LayerNorm that mean pooling
-- replaces): the published -hf configs keep the defaults, which the count
-- above assumes; any other value is refused, never ignored.
local HF_LAYOUT = { { "use_mask_token", false }, { "use_absolute_position_embeddings", true },
  { "use_mean_pooling", true } }

function F.read_hf(cfg, where)
  if type(cfg.vision_config) == "table" then
    local c = cfgutil.reader(cfg.vision_config, where, "vision_config.")
    for _, kv in ipairs(HF_LAYOUT) do
      if c:bool(kv[1], kv[2]) ~= kv[2] then
        c:fail(kv[1], ("changes the parameter count and only %s (transformers' default) is "
          .. "modelled"):format(tostring(kv[2])))
      end
    end
  end
  return read_as(cfg, where, HF, "text_config", "multi_modal_projector")
end

function F.params(m)
  local v, H = m.vision, m.text.hidden
  local text = m.internlm2 and internlm2.params(m.internlm2, "language_model.")
    or decoder.params(m.text, "language_model.")
  local Din = v.hidden * m.shuffle * m.shuffle
  local parts = vision_parts(v)
  parts[#parts + 1] = { name = m.proj, tower = "projector",
    params = vram.norm_params(Din, "layer")
    + vram.linear_params(Din, H, true) + vram.linear_params(H, H, true) }
  return P.followed_by(parts, text)
end

-- The tiling of the model card's dynamic_preprocess (stdlib/vision_tokens.lua,
-- tiles): 1 to 12 tiles of the tile side, plus a thumbnail.
F.PROCESSOR = { min_num = 1, max_num = 12, use_thumbnail = true }

-- Each tile gives num_image_token = (image_size // patch_size)^2 *
-- downsample_ratio^2 = (448/14)^2 / 4 = 256 tokens after the pixel shuffle
-- (InternVLChatModel.num_image_token), and the prompt wraps them as
-- <img> + <IMG_CONTEXT> * 256 * tiles + </img>.
-- image = {height, width, max_num (optional, the processor's setting)}
function F.image_tokens(m, image)
  local t = vt.tiles(image.height, image.width, { image_size = m.tile,
    min_num = F.PROCESSOR.min_num, max_num = image.max_num or F.PROCESSOR.max_num,
    use_thumbnail = F.PROCESSOR.use_thumbnail })
  local g = m.tile // m.vision.patch
  t.per_tile = math.tointeger(math.floor(g * g * m.downsample * m.downsample))
  t.image_tokens = t.per_tile * t.tiles
  t.tokens = t.image_tokens + 2 -- <img> ... </img>
  return t
end

-- Every tile is one image of the tower's own side.
function F.simulator(m, images)
  local v = m.vision
  local tiles = F.image_tokens(m, images).tiles
  return siq.describe({ where = m.where, text = m.text, hidden = v.hidden, layers = v.layers,
    heads = v.heads, intermediate = v.intermediate, patch = v.patch, side = v.image,
    merge = m.shuffle, images = images.count * tiles })
end

return F
