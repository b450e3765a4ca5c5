-- Gemma 1 decoders (and PaliGemma's language model, models/paligemma.lua).
-- transformers models/gemma/modeling_gemma.py: q/k/v/o Linear(bias=
-- attention_bias), gate/up/down without bias, GemmaRMSNorm(weight),
-- head_dim from the config (GemmaConfig default 256; Gemma-2B: 8 heads x 256
-- = hidden 2048, one KV head: multi-query attention). Counted and simulated
-- through models/decoder.lua from F.decoders.gemma below.
local decoder = require("models.decoder")
local causal = require("models.causal_lm")

local F = { name = "gemma", about = "Gemma 1 decoder, PaliGemma's LLM (models/gemma.lua)" }

-- GemmaConfig defaults (configuration_gemma.py) for the keys a config
-- (PaliGemma's text_config) leaves out.
F.DEFAULTS = { head_dim = 256, tie_word_embeddings = true, attention_bias = false }

-- The decoder (models/decoder_lm.lua has the fields): (1 + w) fp32 RMSNorm,
-- sqrt(H) embedding scale, tied head.
F.decoders = { gemma = { tie = true, head_dim = 256, read = function(c, m)
  m.norm_kind, m.embed_scale = "gemma", true
  m.qkv_bias = c:bool("attention_bias", false)
  m.o_bias = m.qkv_bias
end } }

-- A Gemma text config nested at `prefix` ("" when it is the whole file);
-- PaliGemma 2 carries a Gemma 2 text model (four norms per layer).
function F.read_text(tcfg, where, prefix)
  local mt = tcfg.model_type == "gemma2" and "gemma2" or "gemma"
  return decoder.read_nested(tcfg, where, prefix, { model_type = mt }, F.DEFAULTS)
end

function F.read(cfg, where)
  return { text = F.read_text(cfg, where, "") }
end

-- prefix: where the model sits in a bigger checkpoint ("language_model.").
function F.params(m, prefix)
  return decoder.params(m.text, prefix)
end

function F.simulator(m)
  return { sim = causal, text = m.text }
end

return F
