-- The gemma3_text family: read, counted and simulated by models/decoder.lua's
-- variant for its model_type (models/decoder_lm.lua; contract in models/README.md).
return require("models.decoder_lm").variant("gemma3_text",
  "Gemma 3 text: Gemma 2 layout plus per-head q/k norms (models/decoder.lua)")
