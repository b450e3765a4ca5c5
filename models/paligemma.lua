-- PaliGemma (SigLIP + linear projector + Gemma), the Gemma decoder alone,
-- and SigLIP / SigLIP2 fixed-resolution contrastive models. Counts read off
-- transformers:
--
-- models/paligemma/modeling_paligemma.py:
--   vision_tower            SiglipVisionModel(vision_config)
--   multi_modal_projector   PaliGemmaMultiModalProjector.linear:
--                           Linear(vision hidden, vision_config.projection_dim,
--                           bias=True)
--   language_model          GemmaModel; lm_head tied to embed_tokens
-- models/gemma/modeling_gemma.py: q/k/v/o Linear(bias=attention_bias),
--   gate/up/down without bias, GemmaRMSNorm(weight), head_dim from the
--   config (GemmaConfig default 256; Gemma-2B: 8 heads x 256 = hidden 2048,
--   one KV head: multi-query attention).
-- models/siglip/modeling_siglip.py (the vision layers are models/siglip.lua):
--   SiglipVisionModel: patch Conv2d (bias) + learned position embedding
--   (one per patch), encoder layers (LayerNorms, q/k/v/out_proj with bias,
--   fc1/fc2 with bias), post_layernorm, and the attention-pooling head when
--   vision_use_head (absent -> True: `True if not hasattr(config,
--   "vision_use_head") else config.vision_use_head`).
--   SiglipTextTransformer: token_embedding(vocab, H), position_embedding(
--   max_position_embeddings, H), the same encoder layers, final_layer_norm,
--   head Linear(H, projection_size or H) (bias). SiglipModel adds
--   logit_scale and logit_bias (one parameter each).
--
-- PaliGemma-3b-mix-224: 412,442,352 vision + 2,361,344 projector +
-- 2,508,662,784 Gemma (vocab 257,216) = 2,923,466,480. KerasHub lists
-- 2,923,335,408 for the same checkpoint: its vocabulary is 257,152, 64
-- rows x 2,048 = 131,072 fewer.
-- SigLIP2-so400m-patch16-512: 428,772,800 vision + 707,782,896 text + 2 =
-- 1,136,555,698.
local vram = require("vram")
local errors = require("stdlib.errors")
local siglip = require("models.siglip")
local P = require("stdlib.params")

local F = {}

-- GemmaConfig defaults (configuration_gemma.py) for the keys PaliGemma's
-- text_config leaves out.
F.GEMMA_DEFAULTS = { head_dim = 256, tie_word_embeddings = true, attention_bias = false }

function F.count_gemma(cfg, where)
  local parts, _, tied = P.text_parts(cfg, where, { model_type = "gemma" }, F.GEMMA_DEFAULTS)
  return { parts = parts, tied_duplicate = tied }
end

-- A SigLIP vision config with the defaults of SiglipVisionConfig /
-- SiglipVisionModel made explicit.
local function vision_model(vc, where)
  local c = {}
  for k, v in pairs(vc) do c[k] = v end
  if c.image_size == nil then c.image_size = 224 end
  if c.patch_size == nil then c.patch_size = 16 end
  if c.vision_use_head == nil then c.vision_use_head = true end
  return siglip.normalize(c, where .. ": vision_config")
end

local function vision_parts(m, pre)
  local parts = {}
  for _, p in ipairs(siglip.params(m)) do
    parts[#parts + 1] = { name = pre .. p.name:gsub("^vision%.", ""), params = p.params,
      tower = "vision" }
  end
  return parts
end

-- SigLIP vision parts under `prefix` (other families' towers).
function F.siglip_vision_parts(vc, where, prefix)
  local m = vision_model(vc, where)
  return vision_parts(m, prefix), m
end

-- Gemma3TextConfig defaults (configuration_gemma3.py) for keys a
-- text_config leaves out.
F.GEMMA3_DEFAULTS = { vocab_size = 262208, hidden_size = 2304, intermediate_size = 9216,
  num_hidden_layers = 26, num_attention_heads = 8, num_key_value_heads = 4, head_dim = 256,
  tie_word_embeddings = true }

-- Gemma 3 multimodal (modeling_gemma3.py): a SigLIP vision tower,
-- Gemma3MultiModalProjector (mm_input_projection_weight: a (vision hidden,
-- text hidden) Parameter; mm_soft_emb_norm: Gemma3RMSNorm(vision hidden);
-- an average pool to mm_tokens_per_image, no parameters) and a Gemma 3
-- text model whose lm_head is tied.
-- gemma-3-4b-it: 416,866,032 vision + 2,950,272 projector + 3,880,263,168
-- text = 4,300,079,472.
function F.count_gemma3(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local tc = cfg.text_config or errors.input(where, "text_config", "is required but missing")
  local parts, v = F.siglip_vision_parts(vc, where, "vision_tower.vision_model.")
  local tie = tc.tie_word_embeddings
  if tie == nil then tie = cfg.tie_word_embeddings end
  if tie == nil then tie = true end
  local text, m, tied = P.text_parts(tc, where, { model_type = "gemma3_text",
    tie_word_embeddings = tie }, F.GEMMA3_DEFAULTS, "language_model.")
  parts[#parts + 1] = { name = "multi_modal_projector", tower = "projector",
    params = vram.add(vram.mul(v.hidden, m.hidden), vram.norm_params(v.hidden, "rms")) }
  return { parts = P.append(parts, text), tied_duplicate = tied }
end

function F.count(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local tc = cfg.text_config or errors.input(where, "text_config", "is required but missing")
  local v = vision_model(vc, where)
  local proj = vc.projection_dim or cfg.projection_dim or 2048 -- PaliGemmaConfig default
  local parts = vision_parts(v, "vision_tower.vision_model.")
  parts[#parts + 1] = { name = "multi_modal_projector.linear", tower = "projector",
    params = vram.linear_params(v.hidden, proj, true) }
  -- PaliGemma 2 carries a Gemma 2 text model (four norms per layer)
  local tmt = tc.model_type == "gemma2" and "gemma2" or "gemma"
  local text, m, tied = P.text_parts(tc, where, { model_type = tmt }, F.GEMMA_DEFAULTS,
    "language_model.")
  if proj ~= m.hidden then
    errors.input(where, "vision_config.projection_dim", ("must equal the text hidden_size (%d), "
      .. "got %d"):format(m.hidden, proj))
  end
  return { parts = P.append(parts, text), tied_duplicate = tied }
end

-- SiglipTextConfig defaults (configuration_siglip.py).
local TEXT_DEFAULTS = { vocab_size = 32000, hidden_size = 768, intermediate_size = 3072,
  num_hidden_layers = 12, max_position_embeddings = 64 }

local function text_tower(tc, where)
  local t = {}
  for k, v in pairs(TEXT_DEFAULTS) do t[k] = v end
  for k, v in pairs(tc) do t[k] = v end
  local c = require("stdlib.config").reader(t, where, "text_config.")
  local H, I = c:int("hidden_size"), c:int("intermediate_size")
  local L = c:int("num_hidden_layers")
  local proj = c:int("projection_size", H)
  local layer = 4 * vram.linear_params(H, H, true) + vram.linear_params(H, I, true)
    + vram.linear_params(I, H, true) + 2 * vram.norm_params(H, "layer")
  return {
    { name = "text_model.embeddings", tower = "text",
      params = vram.embedding_params(c:int("vocab_size"), H)
        + vram.embedding_params(c:int("max_position_embeddings"), H) },
    { name = "text_model.encoder.layers", tower = "text", params = layer * L },
    { name = "text_model.final_layer_norm", tower = "text", params = vram.norm_params(H, "layer") },
    { name = "text_model.head", tower = "text", params = vram.linear_params(H, proj, true) },
  }
end

function F.count_siglip(cfg, where)
  if cfg.model_type == "siglip_vision_model" or
      (cfg.vision_config == nil and cfg.hidden_size ~= nil) then
    return { parts = vision_parts(vision_model(cfg, where), "vision_model.") }
  end
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local parts = text_tower(cfg.text_config or {}, where)
  P.append(parts, vision_parts(vision_model(vc, where), "vision_model."))
  parts[#parts + 1] = { name = "logit_scale, logit_bias", tower = "text", params = 2 }
  return { parts = parts }
end

return F
