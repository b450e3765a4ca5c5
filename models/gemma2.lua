-- The gemma2 family: read, counted and simulated by models/decoder.lua's
-- variant for its model_type (models/decoder_lm.lua; contract in models/README.md).
return require("models.decoder_lm").variant("gemma2",
  "Gemma 2: sandwich norms, (1+w) RMSNorm, soft-capping (models/decoder.lua)")
