-- Decoder-only LM families whose decoder models/decoder.lua reads, counts
-- and simulates (as a causal LM, models/causal_lm.lua): this file's own
-- Llama, Mistral, Qwen2/2.5 and Qwen3, and every family made with
-- `variant` (Phi-3, Gemma 2/3, OLMo 2/3, GLM, the MoE decoders, DeepSeek,
-- gpt-oss). The family contract is in models/README.md. A family of this
-- kind is one file:
--   return require("models.decoder_lm").variant(NAME, ABOUT, { [model_type] = {
--     tie = B, head_dim = N,  -- the config class's defaults where they differ
--     models = { KEY... },    -- count keys (decoder.COUNT_KEYS) it reads
--     per_layer = true,       -- lists its layers one by one (MoE)
--     sliding = function(c, i) ... end, -- layer i slides (no layer_types)
--     read = function(c, m) ... end,    -- what is particular to it
--   } })
-- registry.lua lists the family under those model_types; decoder.lua finds
-- the description there (registry.decoder).
local decoder = require("models.decoder")
local causal = require("models.causal_lm")

local F = {}

function F.variant(name, about, decoders)
  return {
    name = name,
    about = about,
    decoders = decoders,
    read = function(cfg, where) return { text = decoder.read(cfg, where) } end,
    params = function(m) return decoder.params(m.text) end,
    simulator = function(m) return { sim = causal, text = m.text } end,
  }
end

local llama = { models = decoder.FACTOR_KEYS, read = function(c, m)
  m.qkv_bias = c:bool("attention_bias", false)
  m.o_bias = m.qkv_bias
end }

-- Mistral: transformers' MistralAttention builds q/k/v/o_proj and MistralMLP
-- gate/up/down_proj with bias=False whatever the config says
-- (modeling_mistral.py), so a true attention_bias or mlp_bias is a config of
-- another model (a biased Llama relabelled mistral): refused, as decoder.lua
-- refuses the count keys a model_type does not read, never counted.
local mistral = { models = decoder.FACTOR_KEYS, read = function(c, m)
  for _, k in ipairs({ "attention_bias", "mlp_bias" }) do
    if c:bool(k, false) then
      c:fail(k, "is true, but transformers' Mistral builds its projections without bias "
        .. "(modeling_mistral.py), so this is not a plain mistral config: a Llama with "
        .. "biases is model_type 'llama'")
    end
  end
  m.qkv_bias, m.o_bias, m.mlp_bias = false, false, false
end }

local base = F.variant("decoder",
  "decoder-only LMs: Llama, Mistral, Qwen2/2.5, Qwen3 (models/decoder_lm.lua)", {
  llama = llama,
  mistral = mistral,
  -- Qwen2/2.5: q/k/v bias, none on o_proj
  qwen2 = { models = decoder.FACTOR_KEYS,
    read = function(c, m) m.qkv_bias, m.o_bias = true, false end },
  -- Qwen3: q_norm/k_norm per head
  qwen3 = { models = decoder.FACTOR_KEYS, read = function(c, m)
    llama.read(c, m)
    m.qk_norm = c:bool("qk_norm", true) and "head" or nil
  end },
})
for k, v in pairs(base) do F[k] = v end

return F
