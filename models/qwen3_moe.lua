-- The qwen3_moe family: Qwen3-MoE.
-- Its decoder (the model_types below) is read, counted and simulated by
-- models/decoder.lua from this description (models/decoder_lm.lua has the
-- fields; contract in models/README.md). Follows transformers'
-- modeling_<model_type>.py.

local qwen3 = require("models.decoder_lm").decoders.qwen3
local qwen2_moe = require("models.qwen2_moe")

return require("models.decoder_lm").variant("qwen3_moe",
  "Qwen3-MoE: routed experts, per-head q/k norms (models/qwen3_moe.lua)", {
  -- Qwen3's attention, Qwen2-MoE's layer rule, no shared expert
  qwen3_moe = { tie = false, models = { "num_experts", "num_experts_per_tok",
    "moe_intermediate_size", "decoder_sparse_step", "mlp_only_layers" }, per_layer = true,
    read = function(c, m)
    qwen3.read(c, m)
    m.moe = { experts = c:int("num_experts", 128), top_k = c:int("num_experts_per_tok", 8),
      inter = c:int("moe_intermediate_size", 768), norm_topk = c:bool("norm_topk_prob", false),
      router_linear = "gate" }
    m.moe_layers = qwen2_moe.moe_layers(c, m)
    m.aux_loss = c:bool("output_router_logits", false)
  end },
})
