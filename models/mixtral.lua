-- The mixtral family: Mixtral MoE.
-- Its decoder (the model_types below) is read, counted and simulated by
-- models/decoder.lua from this description (models/decoder_lm.lua has the
-- fields; contract in models/README.md). Follows transformers'
-- modeling_<model_type>.py.

return require("models.decoder_lm").variant("mixtral",
  "Mixtral MoE: top-k of num_local_experts SwiGLU experts (models/mixtral.lua)", {
  mixtral = { tie = false, models = { "num_local_experts" }, per_layer = true,
    read = function(c, m)
    m.moe = { experts = c:int("num_local_experts", 8), top_k = c:int("num_experts_per_tok", 2),
      inter = m.intermediate, norm_topk = true,
      router_linear = "gate" }
    m.moe_layers = "all"
    m.aux_loss = c:bool("output_router_logits", false)
  end },
})
