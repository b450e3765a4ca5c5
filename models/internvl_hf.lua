-- InternVL 2.5/3 in transformers' own format (model_type "internvl", the
-- -hf repositories): the remote-code family's model (models/internvl.lua)
-- read from the -hf key names.
local internvl = require("models.internvl")

return { name = "internvl_hf",
  about = "InternVL 2.5/3 in transformers' own format (-hf): InternViT + projector + "
    .. "Qwen2/Qwen3/Llama (models/internvl_hf.lua)",
  read = internvl.read_hf, params = internvl.params, image_tokens = internvl.image_tokens,
  simulator = internvl.simulator }
