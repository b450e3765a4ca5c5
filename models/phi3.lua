-- The phi3 family: read, counted and simulated by models/decoder.lua's
-- variant for its model_type (models/decoder_lm.lua; contract in models/README.md).
return require("models.decoder_lm").variant("phi3",
  "Phi-3/3.5/4: fused qkv_proj and gate_up_proj (models/decoder.lua)")
