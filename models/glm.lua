-- The glm family: GLM-4 (-hf).
-- Its decoder (the model_types below) is read, counted and simulated by
-- models/decoder.lua from this description (models/decoder_lm.lua has the
-- fields; contract in models/README.md). Follows transformers'
-- modeling_<model_type>.py.

-- q/k/v bias, fused gate_up_proj
local glm = { tie = false, head_dim = 128, read = function(c, m)
  m.qkv_bias, m.o_bias = c:bool("attention_bias", true), false
  m.fused_gate_up = true
end }

return require("models.decoder_lm").variant("glm",
  "GLM-4 (-hf): q/k/v bias, fused gate_up; glm4 with four norms (models/glm.lua)", {
  glm = glm,
  -- glm4 adds post-attention and post-MLP norms (four per layer)
  glm4 = { tie = false, head_dim = 128, read = function(c, m)
    glm.read(c, m)
    m.norms = "sandwich"
  end },
})
