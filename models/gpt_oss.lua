-- The gpt_oss family: read, counted and simulated by models/decoder.lua's
-- variant for its model_type (models/decoder_lm.lua; contract in models/README.md).
return require("models.decoder_lm").variant("gpt_oss",
  "gpt-oss: attention sinks, fused biased experts, mxfp4 (models/decoder.lua)")
