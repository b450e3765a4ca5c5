-- The gemma3_text family: Gemma 3's text model.
-- Its decoder (the model_types below) is read, counted and simulated by
-- models/decoder.lua from this description (models/decoder_lm.lua has the
-- fields; contract in models/README.md). Follows transformers'
-- modeling_<model_type>.py.

return require("models.decoder_lm").variant("gemma3_text",
  "Gemma 3 text: Gemma 2 layout plus per-head q/k norms (models/gemma3_text.lua)", {
  -- Gemma 2 plus q_norm/k_norm per head, no soft-capping by default, a 262k
  -- vocabulary
  gemma3_text = { tie = true, head_dim = 256,
    sliding = function(c, i) return (i + 1) % c:int("sliding_window_pattern", 6) ~= 0 end,
    read = function(c, m)
    m.norms, m.norm_kind, m.embed_scale = "sandwich", "gemma", true
    m.qkv_bias = c:bool("attention_bias", false)
    m.o_bias = m.qkv_bias
    m.qk_norm = "head"
    m.final_softcap = c:num("final_logit_softcapping", nil)
    m.attn_softcap = c:num("attn_logit_softcapping", nil)
    m.sliding_window = c:int("sliding_window", 4096, true)
  end },
})
