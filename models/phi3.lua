-- The phi3 family: Phi-3/3.5/4.
-- Its decoder (the model_types below) is read, counted and simulated by
-- models/decoder.lua from this description (models/decoder_lm.lua has the
-- fields; contract in models/README.md). Follows transformers'
-- modeling_<model_type>.py.

return require("models.decoder_lm").variant("phi3",
  "Phi-3/3.5/4: fused qkv_proj and gate_up_proj (models/phi3.lua)", {
  -- fused qkv_proj and gate_up_proj, no biases
  phi3 = { tie = false, read = function(c, m) m.fused_qkv, m.fused_gate_up = true, true end },
})
