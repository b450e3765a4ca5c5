-- Decoder-only LM families whose config models/decoder.lua reads (its
-- variants, by model_type: Llama, Mistral, Qwen2/2.5, Qwen3, Phi-3, Gemma
-- 2/3, OLMo 2/3, GLM, the MoE decoders, DeepSeek, gpt-oss), simulated as a
-- causal LM (models/causal_lm.lua). The family contract is in
-- models/README.md; a family of this kind is one line in its own file:
--   return require("models.decoder_lm").variant(NAME, ABOUT)
local decoder = require("models.decoder")
local causal = require("models.causal_lm")

local F = {}

function F.variant(name, about)
  return {
    name = name,
    about = about,
    read = function(cfg, where) return { text = decoder.read(cfg, where) } end,
    params = function(m) return decoder.params(m.text) end,
    simulator = function(m) return { sim = causal, text = m.text } end,
  }
end

local base = F.variant("decoder",
  "decoder-only LMs: Llama, Mistral, Qwen2/2.5, Qwen3 (models/decoder.lua)")
for k, v in pairs(base) do F[k] = v end

return F
