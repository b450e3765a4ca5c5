-- The gemma2 family: Gemma 2.
-- Its decoder (the model_types below) is read, counted and simulated by
-- models/decoder.lua from this description (models/decoder_lm.lua has the
-- fields; contract in models/README.md). Follows transformers'
-- modeling_<model_type>.py.

return require("models.decoder_lm").variant("gemma2",
  "Gemma 2: sandwich norms, (1+w) RMSNorm, soft-capping (models/gemma2.lua)", {
  -- four norms per layer (sandwich), (1 + w) fp32 RMSNorm, sqrt(H) embedding
  -- scale, tanh soft-capping of attention scores and final logits
  gemma2 = { tie = true, head_dim = 256,
    sliding = function(_, i) return i % 2 == 0 end, -- Gemma2: not bool(layer_idx % 2)
    read = function(c, m)
    m.norms, m.norm_kind, m.embed_scale = "sandwich", "gemma", true
    m.qkv_bias = c:bool("attention_bias", false)
    m.o_bias = m.qkv_bias
    -- (a cap of 0 or null means none; absent is the class default)
    local fc, ac = c:num("final_logit_softcapping", 30.0), c:num("attn_logit_softcapping", 50.0)
    m.final_softcap = fc > 0 and fc or nil
    m.attn_softcap = ac > 0 and ac or nil
    m.sliding_window = c:int("sliding_window", 4096, true)
  end },
})
