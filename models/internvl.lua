-- InternVL 1.5 / 2 / 2.5 / 3 (the remote-code checkpoints, model_type
-- "internvl_chat") and InternLM2. Counts read off the model repositories'
-- remote code (OpenGVLab/InternVL, internvl_chat/internvl/model/):
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
-- internlm2/modeling_internlm2.py, InternLM2ForCausalLM:
--   model.tok_embeddings  Embedding(vocab, H)
--   layers: attention.wqkv Linear(H, (heads + 2*kv_heads) * head_dim,
--           bias=config.bias), attention.wo Linear(heads*head_dim, H,
--           bias=config.bias), feed_forward.w1/w3 Linear(H, I), w2 Linear(I, H)
--           (no bias), attention_norm, ffn_norm RMSNorm(H)
--   model.norm RMSNorm(H); output Linear(H, vocab, bias=False) (untied)
--
-- InternVL2-2B (InternViT-300M-448px + internlm2-chat-1_8b):
-- 304,012,288 + 12,595,200 + 1,889,146,880 = 2,205,754,368.
-- InternVL3-2B (InternViT-300M-448px-V2_5 + Qwen2.5-1.5B, untied head):
-- 304,012,288 + 8,662,016 + 1,776,283,136 = 2,088,957,440.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")
local P = require("stdlib.params")

local F = {}

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

local function vision_read(vc, where, keys)
  local c = cfgutil.reader(vc, where, "vision_config.")
  local v = {
    hidden = c:int("hidden_size"),
    layers = c:int("num_hidden_layers"),
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

function F.vision_normalize(vc, where) return vision_read(vc, where, REMOTE) end

function F.vision_parts(v)
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

-- An InternLM2 text config to its parts (tower "llm").
function F.internlm2_parts(t, where, prefix)
  local c = cfgutil.reader(t, where, prefix or "")
  local H = c:int("hidden_size")
  local heads = c:int("num_attention_heads")
  local kv = c:int("num_key_value_heads", heads)
  local hd = H // heads
  local I = c:int("intermediate_size")
  local V = c:int("vocab_size")
  local L = c:int("num_hidden_layers")
  local bias = c:bool("bias", true) -- InternLM2Config default
  local tie = c:bool("tie_word_embeddings", false)
  if heads % kv ~= 0 then
    c:fail("num_key_value_heads", ("must divide num_attention_heads (%d)"):format(heads))
  end
  local attn = vram.linear_params(H, (heads + 2 * kv) * hd, bias)
    + vram.linear_params(heads * hd, H, bias)
  local mlp = 2 * vram.linear_params(H, I, false) + vram.linear_params(I, H, false)
  local embed = vram.embedding_params(V, H)
  local parts = {
    { name = "model.tok_embeddings", params = embed, tower = "llm" },
    { name = "model.layers.attention", params = attn * L, tower = "llm" },
    { name = "model.layers.feed_forward", params = mlp * L, tower = "llm" },
    { name = "model.layers.norms", params = 2 * vram.norm_params(H, "rms") * L, tower = "llm" },
    { name = "model.norm", params = vram.norm_params(H, "rms"), tower = "llm" },
    { name = "output", params = tie and 0 or vram.linear_params(H, V, false), tower = "llm",
      note = tie and "tied to tok_embeddings" or nil },
  }
  return parts, H, tie and embed or 0
end

function F.count_internlm2(cfg, where)
  local parts, _, tied = F.internlm2_parts(cfg, where)
  return { parts = parts, tied_duplicate = tied }
end

local function prefixed(parts, pre)
  for _, p in ipairs(parts) do p.name = pre .. p.name end
  return parts
end

function F.llm_parts(lc, where)
  local mt = lc.model_type
  if mt == nil and type(lc.architectures) == "table" then
    local a = lc.architectures[1]
    mt = ({ InternLM2ForCausalLM = "internlm2", Qwen2ForCausalLM = "qwen2",
      LlamaForCausalLM = "llama", Qwen3ForCausalLM = "qwen3" })[a]
  end
  if mt == "internlm2" then
    local parts, H, tied = F.internlm2_parts(lc, where, "llm_config.")
    return prefixed(parts, "language_model."), H, tied
  elseif mt == "qwen2" or mt == "llama" or mt == "qwen3" then
    local parts, m, tied = P.text_parts(lc, where, { model_type = mt }, nil, "language_model.")
    return parts, m.hidden, tied
  end
  errors.input(where, "llm_config.model_type", ("InternVL with a '%s' language model is not "
    .. "counted (known: internlm2, qwen2, qwen3, llama)"):format(tostring(mt)))
end

-- Vision parts, the projector (LayerNorm(D r^2), Linear, GELU, Linear,
-- r = 1 / downsample_ratio) under `proj`, and the language model.
local function assemble(cfg, where, v, lc, proj)
  local llm, H, tied = F.llm_parts(lc, where)
  local c = cfgutil.reader(cfg, where)
  local ds = c:num("downsample_ratio", 0.5)
  local r = math.tointeger(math.floor(1 / ds))
  if not r or r < 1 then c:fail("downsample_ratio", "must be in (0, 1]") end
  local Din = v.hidden * r * r
  local parts = F.vision_parts(v)
  parts[#parts + 1] = { name = proj, tower = "projector", params = vram.norm_params(Din, "layer")
    + vram.linear_params(Din, H, true) + vram.linear_params(H, H, true) }
  return { parts = P.append(parts, llm), tied_duplicate = tied }
end

function F.count(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local lc = cfg.llm_config or errors.input(where, "llm_config", "is required but missing")
  return assemble(cfg, where, F.vision_normalize(vc, where), lc, "mlp1")
end

-- The transformers-native format (model_type "internvl", the -hf
-- repositories; modeling_internvl.py): the same weights under other names
-- (q/k/v_proj with bias=attention_bias, projection_layer, lambda_1/2 layer
-- scales, layernorm_before/after; multi_modal_projector = mlp1) and a
-- text_config.
function F.count_hf(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local tc = cfg.text_config or errors.input(where, "text_config", "is required but missing")
  return assemble(cfg, where, vision_read(vc, where, HF), tc, "multi_modal_projector")
end

-- Tokens per 448 x 448 tile: (image/patch)^2 * downsample_ratio^2
-- (InternVLChatModel.num_image_token).
function F.tokens_per_tile(cfg)
  local v = cfg.vision_config
  local img = cfg.force_image_size or v.image_size
  local g = img // v.patch_size
  local ds = cfg.downsample_ratio or 0.5
  return math.tointeger(math.floor(g * g * ds * ds))
end

return F
