-- The olmoe family: read, counted and simulated by models/decoder.lua's
-- variant for its model_type (models/decoder_lm.lua; contract in models/README.md).
return require("models.decoder_lm").variant("olmoe",
  "OLMoE: routed experts, full-width q/k norms (models/decoder.lua)")
