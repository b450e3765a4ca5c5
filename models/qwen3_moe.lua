-- The qwen3_moe family: read, counted and simulated by models/decoder.lua's
-- variant for its model_type (models/decoder_lm.lua; contract in models/README.md).
return require("models.decoder_lm").variant("qwen3_moe",
  "Qwen3-MoE: routed experts, per-head q/k norms (models/decoder.lua)")
