-- The qwen2_moe family: read, counted and simulated by models/decoder.lua's
-- variant for its model_type (models/decoder_lm.lua; contract in models/README.md).
return require("models.decoder_lm").variant("qwen2_moe",
  "Qwen1.5/2-MoE: routed + gated shared expert (models/decoder.lua)")
