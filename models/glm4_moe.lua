-- The glm4_moe family: GLM-4.5, GLM-4.5-Air, GLM-4.6 and GLM-4.7
-- (glm4_moe), GLM-4.7-Flash (glm4_moe_lite).
-- Its decoder (the model_types below) is read, counted and simulated by
-- models/decoder.lua from this description (models/decoder_lm.lua has the
-- fields; contract in models/README.md). Follows transformers'
-- modeling_glm4_moe.py (Glm4MoeAttention, Glm4MoeMoE/Glm4MoeSparseMoeBlock,
-- Glm4MoeTopkRouter) and Glm4MoeConfig's defaults.
local decoder_lm = require("models.decoder_lm")
local deepseek = require("models.deepseek")
local causal = require("models.causal_lm")
local cfgutil = require("stdlib.config")

-- The router's groups (n_group, topk_group: which experts a token may pick,
-- priced as the plain top-k) and the MTP layers, noted by decoder.params.
local function groups(c, m)
  local n = c:int("n_group", 1, false, 1)
  c:int("topk_group", 1, false, 1)
  if m.moe.experts and m.moe.experts % n ~= 0 then
    c:fail("n_group", ("must divide n_routed_experts (%d), got %d"):format(m.moe.experts, n))
  end
  m.mtp = c:int("num_nextn_predict_layers", 0, false, 0)
end

-- GQA attention: q/k/v_proj with bias=attention_bias, o_proj always
-- without; per-head q_norm/k_norm when use_qk_norm (GLM-4.5, not -Air).
-- The MLP is DeepSeek-V3's (deepseek.experts): sigmoid router with the fp32
-- e_score_correction_bias buffer, routed_scaling_factor, one shared MLP of
-- n_shared_experts x moe_intermediate_size, dense layers below
-- first_k_dense_replace. The MTP layers (num_nextn_predict_layers:
-- model.layers.<num_hidden_layers>+ in the checkpoint) are skipped on load
-- (Glm4MoeModel._keys_to_ignore_on_load_unexpected): not counted, noted.
local function read(c, m)
  m.qkv_bias, m.o_bias = c:bool("attention_bias", false), false
  m.qk_norm = c:bool("use_qk_norm", false) and "head" or nil
  deepseek.experts(c, m, { sigmoid = true, routed = 128, top_k = 8, inter = 1408, shared = 1,
    first = 1 })
  groups(c, m)
  -- rotary over int(head_dim * partial_rotary_factor) of each head
  -- (transformers 5 files keep it in rope_parameters)
  local rp = c:raw("rope_parameters")
  local key = "partial_rotary_factor"
  if c:raw(key) == nil and type(rp) == "table" and rp[key] ~= nil then
    c = cfgutil.reader(rp, c.where, c.prefix .. "rope_parameters.")
  end
  m.partial_rotary = c:num(key, 0.5)
  if m.partial_rotary <= 0 or m.partial_rotary > 1 then
    c:fail(key, ("must be in (0, 1], got %s"):format(m.partial_rotary))
  end
end

-- GLM-4.7-Flash (glm4_moe_lite, modular_glm4_moe_lite.py): DeepSeek-V3's
-- multi-head latent attention with GLM-4.5's MoE; its dense layers come
-- from mlp_layer_types ('dense' or 'sparse' per layer; by default layer 0
-- dense), first_k_dense_replace is not read. Glm4MoeLiteConfig defaults a
-- missing q_lora_rank to 768 where null means a plain q_proj, and nulls
-- are gone by now: refused, never guessed.
local function read_lite(c, m)
  if c:raw("q_lora_rank") == nil then
    c:fail("q_lora_rank", "is absent or null: Glm4MoeLiteConfig reads absent as 768 and "
      .. "null as a plain q_proj; give the number")
  end
  deepseek.mla(c, m, { kv_lora = 512, nope = 192, rope = 64, v_dim = 256 })
  deepseek.experts(c, m, { sigmoid = true, routed = 64, top_k = 4, inter = 1536, shared = 1,
    first = 1 })
  local types = c:raw("mlp_layer_types")
  if types == nil then
    if c:int("first_k_dense_replace", 1) ~= 1 then
      c:fail("first_k_dense_replace", "is not 1, but Glm4MoeLite takes its dense layers "
        .. "from mlp_layer_types (by default layer 0 alone); give mlp_layer_types")
    end
  elseif type(types) ~= "table" or #types ~= m.layers then
    c:fail("mlp_layer_types", ("must list 'dense' or 'sparse' for each of the %d layers")
      :format(m.layers))
  else
    for i, v in ipairs(types) do
      if v ~= "dense" and v ~= "sparse" then
        c:fail(("mlp_layer_types[%d]"):format(i), ("must be 'dense' or 'sparse', got %s")
          :format(tostring(v)))
      end
      m.moe_layers[i] = v == "sparse"
    end
  end
  groups(c, m)
end

local F = decoder_lm.variant("glm4_moe",
  "GLM-4.5/4.6/4.7 (GQA), GLM-4.7-Flash (MLA): sigmoid-routed + shared experts "
    .. "(models/glm4_moe.lua)", {
  glm4_moe = { tie = false, head_dim = 128, per_layer = true, read = read,
    models = { "n_routed_experts", "moe_intermediate_size", "n_shared_experts",
      "first_k_dense_replace", "num_nextn_predict_layers" } },
  glm4_moe_lite = { tie = false, per_layer = true, read = read_lite,
    models = { "n_routed_experts", "moe_intermediate_size", "n_shared_experts",
      "first_k_dense_replace", "num_nextn_predict_layers", "kv_lora_rank", "q_lora_rank",
      "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim" } },
})

function F.simulator(m)
  local d = { sim = causal, text = m.text, assumptions = {} }
  if (m.text.partial_rotary or 1) < 1 then
    d.assumptions[1] = ("partial_rotary_factor %g: RoPE priced over the whole head; "
      .. "transformers rotates %d of %d dimensions and concatenates the rest (a slice and a "
      .. "cat per q and k, not priced)"):format(m.text.partial_rotary,
      math.floor(m.text.head_dim * m.text.partial_rotary), m.text.head_dim)
  end
  return d
end

return F
