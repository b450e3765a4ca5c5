-- The phimoe family: Phi-3.5-MoE.
-- Its decoder (the model_types below) is read, counted and simulated by
-- models/decoder.lua from this description (models/decoder_lm.lua has the
-- fields; contract in models/README.md). Follows transformers'
-- modeling_phimoe.py and PhimoeConfig's defaults.
local decoder_lm = require("models.decoder_lm")
local causal = require("models.causal_lm")

-- PhimoeAttention: head_dim is hidden_size // num_attention_heads (a
-- head_dim key is not read), q/k/v/o_proj all with bias=attention_bias.
-- nn.LayerNorm (weight and bias) for both layer norms and the final norm,
-- lm_head with bias=lm_head_bias. PhimoeSparseMoeBlock: Mixtral's experts
-- (w1/w3/w2 of intermediate_size) and `gate` Linear without bias, routed
-- by sparsemixer, which takes exactly two experts.
local function read(c, m)
  if m.hidden % m.heads ~= 0 then
    c:fail("num_attention_heads", ("must divide hidden_size (%d), got %d"):format(m.hidden,
      m.heads))
  end
  m.head_dim = m.hidden // m.heads
  m.qkv_bias = c:bool("attention_bias", false)
  m.o_bias = m.qkv_bias
  m.norm_kind = "layer"
  m.head_bias = c:bool("lm_head_bias", false)
  local k = c:int("num_experts_per_tok", 2)
  if k ~= 2 then
    c:fail("num_experts_per_tok", ("is %d, but sparsemixer routes exactly 2 experts "
      .. "(modeling_phimoe.py raises for any other top_k)"):format(k))
  end
  -- input_jitter_noise: in training the block multiplies its input in place
  -- by a uniform random tensor (stdlib/moe.lua prices it)
  m.moe = { experts = c:int("num_local_experts", 16), top_k = k, inter = m.intermediate,
    norm_topk = false, router_linear = "gate",
    expert_leaves = { gate = "w1", up = "w3", down = "w2" },
    input_jitter = c:num("input_jitter_noise", 0.0) }
  m.moe_layers = "all"
  m.aux_loss = c:bool("output_router_logits", false)
end

local F = decoder_lm.variant("phimoe",
  "Phi-3.5-MoE: LayerNorms, biases everywhere, sparsemixer top-2 (models/phimoe.lua)", {
  phimoe = { tie = false, per_layer = true, read = read, models = { "num_local_experts" } },
})

-- sliding_window and longrope change neither shapes nor the eager path's
-- tensors (the mask is (T, T) either way); what sparsemixer adds is said as
-- an assumption.
function F.simulator(m)
  return { sim = causal, text = m.text, assumptions = {
    "Phi-MoE's sparsemixer priced as softmax top-2 routing in fp32; its masked gates, "
      .. "Gumbel samples and MultiplierProcessor (tensors of rows x experts) are not priced" } }
end

return F
