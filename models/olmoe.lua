-- The olmoe family: OLMoE.
-- Its decoder (the model_types below) is read, counted and simulated by
-- models/decoder.lua from this description (models/decoder_lm.lua has the
-- fields; contract in models/README.md). Follows transformers'
-- modeling_<model_type>.py.

return require("models.decoder_lm").variant("olmoe",
  "OLMoE: routed experts, full-width q/k norms (models/olmoe.lua)", {
  -- q_norm/k_norm over the whole projection, experts of intermediate_size,
  -- pre-norm layers
  olmoe = { tie = false, models = { "num_experts" }, per_layer = true, read = function(c, m)
    m.qk_norm = "full"
    m.qkv_bias = c:bool("attention_bias", false)
    m.o_bias = m.qkv_bias
    m.moe = { experts = c:int("num_experts", 64), top_k = c:int("num_experts_per_tok", 8),
      inter = m.intermediate, norm_topk = c:bool("norm_topk_prob", false),
      router_linear = "gate" }
    m.moe_layers = "all"
    m.aux_loss = c:bool("output_router_logits", false)
  end },
})
