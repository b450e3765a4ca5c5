-- The glm family: read, counted and simulated by models/decoder.lua's
-- variant for its model_type (models/decoder_lm.lua; contract in models/README.md).
return require("models.decoder_lm").variant("glm",
  "GLM-4 (-hf): q/k/v bias, fused gate_up; glm4 with four norms (models/decoder.lua)")
