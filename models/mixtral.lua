-- The mixtral family: read, counted and simulated by models/decoder.lua's
-- variant for its model_type (models/decoder_lm.lua; contract in models/README.md).
return require("models.decoder_lm").variant("mixtral",
  "Mixtral MoE: top-k of num_local_experts SwiGLU experts (models/decoder.lua)")
