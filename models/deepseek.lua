-- The deepseek family: read, counted and simulated by models/decoder.lua's
-- variant for its model_type (models/decoder_lm.lua; contract in models/README.md).
return require("models.decoder_lm").variant("deepseek",
  "DeepSeek-V2/V3: MLA, first-k dense layers, shared + routed experts (models/decoder.lua)")
