-- The deepseek family: DeepSeek-V2 and V3.
-- Its decoder (the model_types below) is read, counted and simulated by
-- models/decoder.lua from this description (models/decoder_lm.lua has the
-- fields; contract in models/README.md). Follows transformers'
-- modeling_<model_type>.py.

local vram = require("vram")

-- DeepSeek's MoE layout, also GLM-4.5's (models/glm4_moe.lua) and
-- DeepSeek-MoE's (models/deepseek_moe.lua): dense MLPs in the first
-- first_k_dense_replace layers, then routed experts of
-- moe_intermediate_size plus n_shared_experts fused into one shared MLP.
-- o.sigmoid: V3's router (sigmoid scores, the fp32
-- e_score_correction_bias buffer picking, norm_topk_prob true by default);
-- else V2's softmax. o.freq: the layer rule reads moe_layer_freq (V1/V2's
-- `layer_idx % moe_layer_freq == 0`; V3 and GLM-4.5 ignore it). The router
-- runs in fp32 (F.linear(x.float(), w.float())) unless o.router_fp32 is
-- false. n_group/topk_group (group-limited choice) only mask scores of
-- rows x experts: transients the simulator does not price.
local function experts(c, m, o)
  local routed = c:int("n_routed_experts", o.routed, true)
  local fp32 = o.router_fp32 ~= false
  m.moe = { experts = routed, top_k = c:int("num_experts_per_tok", routed and o.top_k or 1),
    inter = c:int("moe_intermediate_size", o.inter),
    norm_topk = c:bool("norm_topk_prob", o.sigmoid or o.norm_topk or false),
    router_fp32 = fp32, weights_dtype = fp32 and "fp32" or "model", acc_fp32 = fp32,
    scaling = c:num("routed_scaling_factor", 1.0) ~= 1.0, score_bias = o.sigmoid }
  local shared = c:int("n_shared_experts", o.shared, true, 0)
  if shared and shared > 0 then m.moe.shared_inter = vram.mul(shared, m.moe.inter) end
  local first = c:int("first_k_dense_replace", o.first or 0, false, 0)
  local freq = o.freq and c:int("moe_layer_freq", 1, false, 1) or 1
  m.moe_layers = {}
  for i = 0, m.layers - 1 do
    m.moe_layers[i + 1] = routed ~= nil and i >= first and i % freq == 0
  end
end

-- multi-head latent attention (q_lora_rank absent or null: a plain q_proj),
-- also GLM-4.7-Flash's (models/glm4_moe.lua). d: the config class's
-- defaults of the widths where a family has them (V2/V3: required).
local function mla(c, m, d)
  d = d or {}
  m.qkv_bias = c:bool("attention_bias", false)
  m.o_bias = m.qkv_bias
  m.mla = { q_lora = c:int("q_lora_rank", nil, true), kv_lora = c:int("kv_lora_rank", d.kv_lora),
    nope = c:int("qk_nope_head_dim", d.nope), rope = c:int("qk_rope_head_dim", d.rope),
    v_dim = c:int("v_head_dim", d.v_dim) }
  m.head_dim = m.mla.nope + m.mla.rope
end

-- V3's multi-token-prediction layers (num_nextn_predict_layers) are in the
-- checkpoint but transformers does not load them: not counted, reported as
-- a note.
local function read(c, m, v3)
  mla(c, m)
  experts(c, m, { sigmoid = v3, freq = not v3 })
  m.mtp = c:int("num_nextn_predict_layers", 0, false, 0)
end

local KEYS = { "n_routed_experts", "moe_intermediate_size", "n_shared_experts",
  "kv_lora_rank", "q_lora_rank", "first_k_dense_replace", "moe_layer_freq",
  "num_nextn_predict_layers", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim" }

local F = require("models.decoder_lm").variant("deepseek",
  "DeepSeek-V2/V3: MLA, first-k dense layers, shared + routed experts (models/deepseek.lua)", {
  deepseek_v2 = { tie = false, models = KEYS, per_layer = true,
    read = function(c, m) read(c, m, false) end },
  deepseek_v3 = { tie = false, models = KEYS, per_layer = true,
    read = function(c, m) read(c, m, true) end },
})
F.experts, F.mla = experts, mla
return F
