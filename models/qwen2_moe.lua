-- The qwen2_moe family: Qwen1.5-MoE and Qwen2-MoE.
-- Its decoder (the model_types below) is read, counted and simulated by
-- models/decoder.lua from this description (models/decoder_lm.lua has the
-- fields; contract in models/README.md). Follows transformers'
-- modeling_<model_type>.py.

local F

-- MoE layers of Qwen2-MoE (and Qwen3-MoE, models/qwen3_moe.lua): (i+1) %
-- decoder_sparse_step == 0 and i not in mlp_only_layers.
local function moe_layers(c, m)
  local step = c:int("decoder_sparse_step", 1)
  local only = c:raw("mlp_only_layers") or {}
  if type(only) ~= "table" then c:fail("mlp_only_layers", "must be a list of layer indices") end
  local dense = {}
  for i, v in ipairs(only) do
    if math.type(v) ~= "integer" or v < 0 then
      c:fail("mlp_only_layers[" .. i .. "]", "must be a layer index >= 0, got " .. tostring(v))
    end
    dense[v] = true
  end
  local out = {}
  for i = 0, m.layers - 1 do out[i + 1] = not dense[i] and (i + 1) % step == 0 end
  return out
end

F = require("models.decoder_lm").variant("qwen2_moe",
  "Qwen1.5/2-MoE: routed + gated shared expert (models/qwen2_moe.lua)", {
  qwen2_moe = { tie = false, models = { "num_experts", "moe_intermediate_size",
    "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers" },
    per_layer = true, read = function(c, m)
    m.qkv_bias, m.o_bias = c:bool("qkv_bias", true), false
    m.moe = { experts = c:int("num_experts", 60), top_k = c:int("num_experts_per_tok", 4),
      inter = c:int("moe_intermediate_size", 1408),
      shared_inter = c:int("shared_expert_intermediate_size", 5632, false, 0),
      shared_gate = true, norm_topk = c:bool("norm_topk_prob", false),
      router_linear = "gate" }
    if m.moe.shared_inter == 0 then m.moe.shared_inter, m.moe.shared_gate = nil, nil end
    m.moe_layers = moe_layers(c, m)
    m.aux_loss = c:bool("output_router_logits", false)
  end },
})
F.moe_layers = moe_layers
return F
