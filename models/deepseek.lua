-- The deepseek family: DeepSeek-V2 and V3.
-- Its decoder (the model_types below) is read, counted and simulated by
-- models/decoder.lua from this description (models/decoder_lm.lua has the
-- fields; contract in models/README.md). Follows transformers'
-- modeling_<model_type>.py.

local vram = require("vram")

-- multi-head latent attention (q_lora_rank absent or null: a plain q_proj),
-- dense MLPs in the first first_k_dense_replace layers, shared experts, fp32
-- routing. V3's multi-token-prediction layers (num_nextn_predict_layers)
-- are in the checkpoint but transformers does not load them: not counted,
-- reported as a note.
local function read(c, m, v3)
  m.qkv_bias = c:bool("attention_bias", false)
  m.o_bias = m.qkv_bias
  m.mla = { q_lora = c:int("q_lora_rank", nil, true), kv_lora = c:int("kv_lora_rank"),
    nope = c:int("qk_nope_head_dim"), rope = c:int("qk_rope_head_dim"),
    v_dim = c:int("v_head_dim") }
  m.head_dim = m.mla.nope + m.mla.rope
  local routed = c:int("n_routed_experts", nil, true)
  m.moe = { experts = routed, top_k = c:int("num_experts_per_tok", routed and nil or 1),
    inter = c:int("moe_intermediate_size"), norm_topk = c:bool("norm_topk_prob", v3),
    router_fp32 = true, weights_dtype = "fp32", acc_fp32 = true,
    scaling = c:num("routed_scaling_factor", 1.0) ~= 1.0, score_bias = v3 }
  local shared = c:int("n_shared_experts", nil, true, 0)
  if shared and shared > 0 then m.moe.shared_inter = vram.mul(shared, m.moe.inter) end
  local first = c:int("first_k_dense_replace", 0, false, 0)
  local freq = c:int("moe_layer_freq", 1)
  m.moe_layers = {}
  for i = 0, m.layers - 1 do
    m.moe_layers[i + 1] = routed ~= nil and i >= first and (v3 or i % freq == 0)
  end
  m.mtp = c:int("num_nextn_predict_layers", 0, false, 0)
end

local KEYS = { "n_routed_experts", "moe_intermediate_size", "n_shared_experts",
  "kv_lora_rank", "q_lora_rank", "first_k_dense_replace", "moe_layer_freq",
  "num_nextn_predict_layers", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim" }

return require("models.decoder_lm").variant("deepseek",
  "DeepSeek-V2/V3: MLA, first-k dense layers, shared + routed experts (models/deepseek.lua)", {
  deepseek_v2 = { tie = false, models = KEYS, per_layer = true,
    read = function(c, m) read(c, m, false) end },
  deepseek_v3 = { tie = false, models = KEYS, per_layer = true,
    read = function(c, m) read(c, m, true) end },
})
