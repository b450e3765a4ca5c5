-- The olmo2 family: read, counted and simulated by models/decoder.lua's
-- variant for its model_type (models/decoder_lm.lua; contract in models/README.md).
return require("models.decoder_lm").variant("olmo2",
  "OLMo 2/3: post-norms only, full-width q/k norms (models/decoder.lua)")
