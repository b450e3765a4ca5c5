-- The deepseek_moe family: DeepSeek-MoE (v1, model_type `deepseek`:
-- deepseek-moe-16b-base/-chat, DeepSeek-VL2's tiny language model).
-- Its decoder is read, counted and simulated by models/decoder.lua from
-- this description (models/decoder_lm.lua has the fields; contract in
-- models/README.md). transformers has no modeling file for it: it follows
-- the checkpoint's remote code, modeling_deepseek.py / DeepseekConfig
-- (trust_remote_code), whose defaults are cited below.
local decoder_lm = require("models.decoder_lm")
local deepseek = require("models.deepseek")
local causal = require("models.causal_lm")

-- Llama's attention (q/k/v/o bias=attention_bias), DeepseekMoE: MoEGate
-- (a bare (E, H) weight, F.linear in the model dtype, softmax scores,
-- top-k, norm_topk_prob default False), routed experts of
-- moe_intermediate_size (default 1407), one shared DeepseekMLP of
-- n_shared_experts x moe_intermediate_size, and a MoE layer where
-- layer_idx >= first_k_dense_replace and layer_idx % moe_layer_freq == 0.
-- n_routed_experts null (its default) is a dense model.
local function read(c, m)
  m.qkv_bias = c:bool("attention_bias", false)
  m.o_bias = m.qkv_bias
  local scoring = c:str("scoring_func", "softmax")
  if scoring ~= "softmax" then
    c:fail("scoring_func", ("is '%s', but DeepSeek-MoE's MoEGate implements softmax only "
      .. "(modeling_deepseek.py raises NotImplementedError)"):format(scoring))
  end
  deepseek.experts(c, m, { freq = true, router_fp32 = false, inter = 1407 })
  m.aux_alpha = c:num("aux_loss_alpha", 0.001)
end

local F = decoder_lm.variant("deepseek_moe",
  "DeepSeek-MoE (v1): softmax-routed + shared experts, first-k dense (models/deepseek_moe.lua)", {
  deepseek = { tie = false, per_layer = true, read = read,
    models = { "n_routed_experts", "moe_intermediate_size", "n_shared_experts",
      "first_k_dense_replace", "moe_layer_freq" } },
})

-- The simulator runs transformers' eager expert loop (stdlib/moe.lua); the
-- remote code differs in training, said as assumptions.
function F.simulator(m)
  local d = { sim = causal, text = m.text, assumptions = {} }
  if m.text.moe then
    d.assumptions[1] = "DeepSeek-MoE (remote code): experts priced as transformers' eager "
      .. "loop; in training modeling_deepseek.py repeat_interleaves the tokens top-k times "
      .. "and fills an empty_like output (rows x top_k x hidden each), not priced as such"
    if m.text.aux_alpha > 0 then
      d.assumptions[2] = ("aux_loss_alpha %g: in training MoEGate's per-layer auxiliary loss ("
        .. "tensors of rows x n_routed_experts) not priced"):format(m.text.aux_alpha)
    end
  end
  return d
end

return F
