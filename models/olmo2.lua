-- The olmo2 family: OLMo 2 and OLMo 3.
-- Its decoder (the model_types below) is read, counted and simulated by
-- models/decoder.lua from this description (models/decoder_lm.lua has the
-- fields; contract in models/README.md). Follows transformers'
-- modeling_<model_type>.py.

-- no pre-norms; RMSNorm after attention and after the MLP, and q_norm/k_norm
-- over the whole projection (heads x head_dim)
local olmo2 = { tie = false, read = function(c, m)
  m.norms, m.norm_kind, m.qk_norm = "post", "fp32_weight", "full"
  m.qkv_bias = c:bool("attention_bias", false)
  m.o_bias = m.qkv_bias
end }

return require("models.decoder_lm").variant("olmo2",
  "OLMo 2/3: post-norms only, full-width q/k norms (models/olmo2.lua)", {
  olmo2 = olmo2,
  -- OLMo 3: three sliding-window layers in four
  olmo3 = { tie = false, sliding = function(_, i) return (i + 1) % 4 ~= 0 end,
    read = function(c, m)
    olmo2.read(c, m)
    m.sliding_window = c:int("sliding_window", 4096, true)
  end },
})
