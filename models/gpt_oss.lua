-- The gpt_oss family: gpt-oss.
-- Its decoder (the model_types below) is read, counted and simulated by
-- models/decoder.lua from this description (models/decoder_lm.lua has the
-- fields; contract in models/README.md). Follows transformers'
-- modeling_<model_type>.py.

return require("models.decoder_lm").variant("gpt_oss",
  "gpt-oss: attention sinks, fused biased experts, mxfp4 (models/gpt_oss.lua)", {
  -- biases everywhere, a learned attention sink per head, fused (E, H, 2I)
  -- experts with biases and a clamped GLU, a router with a bias
  gpt_oss = { tie = false, head_dim = 64, models = { "num_local_experts" }, per_layer = true,
    sliding = function(_, i) return i % 2 == 0 end,
    read = function(c, m)
    m.qkv_bias = c:bool("attention_bias", true)
    m.o_bias = m.qkv_bias
    m.sinks = true
    local k = c:int("num_experts_per_tok", nil, true) or c:int("experts_per_token", 4)
    m.moe = { experts = c:int("num_local_experts", 128), top_k = k, inter = m.intermediate,
      router_bias = true, fused = true, expert_bias = true, norm_topk = false }
    m.moe_layers = "all"
    m.aux_loss = c:bool("output_router_logits", false)
    m.sliding_window = c:int("sliding_window", 128, true)
  end },
})
