-- Families of issue 12 (MoE, Gemma 2/3, Phi-3, OLMo 2, GLM, DeepSeek, gpt-oss):
-- exact counts against published figures, refusals of keys a family does
-- not model, and the MoE simulator's mechanisms checked with arithmetic
-- written here. Configs written out below carry the shapes of the published
-- config.json; the count each reaches is the published one, cited beside it.
local vram = require("vram")
local P = require("stdlib.params")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local moe = require("stdlib.moe")
local registry = require("models.registry")

-- The caller picks the family (models/registry.lua) and hands it to stdlib.
local function count_cfg(cfg, where)
  local family, typed = registry.find(cfg, where)
  return P.count(family, typed, where)
end

local function preset(name)
  return vram.json.load(vram.share_dir .. "/examples/configs/" .. name .. ".json")
end

local function cfg(t)
  local c = { tie_word_embeddings = false }
  for k, v in pairs(t) do c[k] = v end
  return c
end

-- Written out from the published config.json of each model.
local CONFIGS = {
  gemma_2_2b = cfg({ model_type = "gemma2", vocab_size = 256000, hidden_size = 2304,
    intermediate_size = 9216, num_hidden_layers = 26, num_attention_heads = 8,
    num_key_value_heads = 4, head_dim = 256, tie_word_embeddings = true }),
  gemma_3_1b = cfg({ model_type = "gemma3_text", vocab_size = 262144, hidden_size = 1152,
    intermediate_size = 6912, num_hidden_layers = 26, num_attention_heads = 4,
    num_key_value_heads = 1, head_dim = 256, tie_word_embeddings = true }),
  phi_3_mini = cfg({ model_type = "phi3", vocab_size = 32064, hidden_size = 3072,
    intermediate_size = 8192, num_hidden_layers = 32, num_attention_heads = 32,
    num_key_value_heads = 32 }),
  phi_4 = cfg({ model_type = "phi3", vocab_size = 100352, hidden_size = 5120,
    intermediate_size = 17920, num_hidden_layers = 40, num_attention_heads = 40,
    num_key_value_heads = 10 }),
  phi_4_mini = cfg({ model_type = "phi3", vocab_size = 200064, hidden_size = 3072,
    intermediate_size = 8192, num_hidden_layers = 32, num_attention_heads = 24,
    num_key_value_heads = 8, tie_word_embeddings = true, partial_rotary_factor = 0.75 }),
  olmo_2_7b = cfg({ model_type = "olmo2", vocab_size = 100352, hidden_size = 4096,
    intermediate_size = 11008, num_hidden_layers = 32, num_attention_heads = 32,
    num_key_value_heads = 32 }),
  glm_4_9b = cfg({ model_type = "glm", vocab_size = 151552, hidden_size = 4096,
    intermediate_size = 13696, num_hidden_layers = 40, num_attention_heads = 32,
    num_key_value_heads = 2, head_dim = 128, attention_bias = true,
    partial_rotary_factor = 0.5 }),
  qwen1_5_moe = cfg({ model_type = "qwen2_moe", vocab_size = 151936, hidden_size = 2048,
    intermediate_size = 5632, num_hidden_layers = 24, num_attention_heads = 16,
    num_key_value_heads = 16, num_experts = 60, num_experts_per_tok = 4,
    moe_intermediate_size = 1408, shared_expert_intermediate_size = 5632,
    decoder_sparse_step = 1, mlp_only_layers = {} }),
  olmoe_1b_7b = cfg({ model_type = "olmoe", vocab_size = 50304, hidden_size = 2048,
    intermediate_size = 1024, num_hidden_layers = 16, num_attention_heads = 16,
    num_key_value_heads = 16, num_experts = 64, num_experts_per_tok = 8 }),
  deepseek_v2_lite = cfg({ model_type = "deepseek_v2", vocab_size = 102400, hidden_size = 2048,
    intermediate_size = 10944, num_hidden_layers = 27, num_attention_heads = 16,
    num_key_value_heads = 16, kv_lora_rank = 512, qk_nope_head_dim = 128,
    qk_rope_head_dim = 64, v_head_dim = 128, moe_intermediate_size = 1408,
    n_routed_experts = 64, n_shared_experts = 2, num_experts_per_tok = 6,
    first_k_dense_replace = 1, moe_layer_freq = 1 }),
  -- zai-org/GLM-4.5-Air's config.json, every key, as ms-swift prints the
  -- Glm4MoeConfig it loads from it (index file 48221590695)
  glm_4_5_air = cfg({ model_type = "glm4_moe", architectures = { "Glm4MoeForCausalLM" },
    attention_bias = true, attention_dropout = 0.0, eos_token_id = { 151329, 151336, 151338 },
    first_k_dense_replace = 1, head_dim = 128, hidden_act = "silu", hidden_size = 4096,
    initializer_range = 0.02, intermediate_size = 10944, max_position_embeddings = 131072,
    moe_intermediate_size = 1408, n_group = 1, n_routed_experts = 128, n_shared_experts = 1,
    norm_topk_prob = true, num_attention_heads = 96, num_experts_per_tok = 8,
    num_hidden_layers = 46, num_key_value_heads = 8, num_nextn_predict_layers = 1,
    pad_token_id = 151329, partial_rotary_factor = 0.5, rms_norm_eps = 1e-05,
    rope_theta = 1000000, routed_scaling_factor = 1.0, topk_group = 1,
    torch_dtype = "bfloat16", transformers_version = "4.54.1", use_cache = true,
    use_qk_norm = false, vocab_size = 151552 }),
  -- deepseek-ai/deepseek-moe-16b-base's config.json (model_type deepseek,
  -- remote code), written out with its routing keys
  deepseek_moe_16b = cfg({ model_type = "deepseek", architectures = { "DeepseekForCausalLM" },
    attention_bias = false, aux_loss_alpha = 0.001, first_k_dense_replace = 1,
    hidden_size = 2048, intermediate_size = 10944, max_position_embeddings = 4096,
    moe_intermediate_size = 1408, moe_layer_freq = 1, n_routed_experts = 64,
    n_shared_experts = 2, norm_topk_prob = false, num_attention_heads = 16,
    num_experts_per_tok = 6, num_hidden_layers = 28, num_key_value_heads = 16,
    pretraining_tp = 1, rms_norm_eps = 1e-06, rope_theta = 10000, scoring_func = "softmax",
    seq_aux = true, torch_dtype = "bfloat16", vocab_size = 102400 }),
  -- microsoft/Phi-3.5-MoE-instruct's config.json, written out (the
  -- longrope short/long factor lists left out: nothing reads them)
  phi_3_5_moe = cfg({ model_type = "phimoe", architectures = { "PhiMoEForCausalLM" },
    attention_bias = true, attention_dropout = 0.0, hidden_act = "silu", hidden_dropout = 0.0,
    hidden_size = 4096, initializer_range = 0.02, input_jitter_noise = 0.01,
    intermediate_size = 6400, lm_head_bias = true, max_position_embeddings = 131072,
    num_attention_heads = 32, num_experts_per_tok = 2, num_hidden_layers = 32,
    num_key_value_heads = 8, num_local_experts = 16, original_max_position_embeddings = 4096,
    output_router_logits = false, rms_norm_eps = 1e-05, rope_theta = 10000.0,
    rope_scaling = { type = "longrope", long_mscale = 1.243163121016122,
      short_mscale = 1.243163121016122, original_max_position_embeddings = 4096 },
    router_aux_loss_coef = 0.0, router_jitter_noise = 0.01, sliding_window = 131072,
    torch_dtype = "bfloat16", vocab_size = 32064 }),
  -- zai-org/GLM-4.7-Flash (glm4_moe_lite): its config.json's shapes, MLA
  -- widths and routing keys, written out
  glm_4_7_flash = cfg({ model_type = "glm4_moe_lite",
    architectures = { "Glm4MoeLiteForCausalLM" }, attention_bias = false,
    first_k_dense_replace = 1, hidden_size = 2048, intermediate_size = 10240,
    kv_lora_rank = 512, max_position_embeddings = 202752, moe_intermediate_size = 1536,
    n_group = 1, n_routed_experts = 64, n_shared_experts = 1, norm_topk_prob = true,
    num_attention_heads = 20, num_experts_per_tok = 4, num_hidden_layers = 47,
    num_key_value_heads = 20, num_nextn_predict_layers = 1, q_lora_rank = 768,
    qk_nope_head_dim = 192, qk_rope_head_dim = 64, routed_scaling_factor = 1.8,
    topk_group = 1, v_head_dim = 256, vocab_size = 154880 }),
}
-- zai-org/GLM-4.5 (and GLM-4.6, GLM-4.7: the same shapes): -Air's keys
-- with its own shapes, q/k norms and routed scale (config.json, written out)
CONFIGS.glm_4_5 = {}
for k, v in pairs(CONFIGS.glm_4_5_air) do CONFIGS.glm_4_5[k] = v end
for k, v in pairs({ hidden_size = 5120, intermediate_size = 12288, moe_intermediate_size = 1536,
  num_hidden_layers = 92, n_routed_experts = 160, first_k_dense_replace = 3, use_qk_norm = true,
  routed_scaling_factor = 2.5 }) do CONFIGS.glm_4_5[k] = v end

local function count(name)
  return count_cfg(CONFIGS[name], name .. ".json")
end

local function part(r, name)
  for _, p in ipairs(r.parts) do
    if p.name == name then return p.params end
  end
end

T.test("dense variants match their published counts", function()
  -- Hugging Face Hub safetensors totals listed in index file 71142266638
  -- (an audit script's table of Hub API figures) unless stated otherwise
  T.eq(count("gemma_2_2b").total, 2614341888)  -- google/gemma-2-2b-it
  T.eq(count("gemma_3_1b").total, 999885952)   -- google/gemma-3-1b-it
  T.eq(count("phi_3_mini").total, 3821079552)  -- microsoft/Phi-3-mini-4k-instruct
  T.eq(count("phi_4").total, 14659507200)      -- microsoft/phi-4
  T.eq(count("phi_4_mini").total, 3836021760)  -- microsoft/Phi-4-mini-instruct (tied)
  T.eq(count("olmo_2_7b").total, 7298617344)   -- allenai/OLMo-2-1124-7B-Instruct
  -- THUDM/glm-4-9b-chat: 9,399,951,360 trainable parameters as printed by a
  -- loading script (index file 29151670186); the -hf conversion has the
  -- same tensors
  T.eq(count("glm_4_9b").total, 9399951360)
  -- llama.cpp's n-params of two GGUF language models (index file
  -- 37074310570): Gemma-3-27B's text model and GLM-4.6V-Flash's, a glm4
  -- (four norms per layer) with GLM-4-9B's shapes
  T.eq(count_cfg(cfg({ model_type = "gemma3_text", vocab_size = 262208, hidden_size = 5376,
    intermediate_size = 21504, num_hidden_layers = 62, num_attention_heads = 32,
    num_key_value_heads = 16, head_dim = 128, tie_word_embeddings = true }), "g").total,
    27009346304)
  local glm4 = {}
  for k, v in pairs(CONFIGS.glm_4_9b) do glm4[k] = v end
  glm4.model_type = "glm4"
  T.eq(count_cfg(glm4, "glm4").total, 9400279040)
end)

T.test("MoE variants match their published counts", function()
  -- Qwen/Qwen1.5-MoE-A2.7B: KerasHub preset metadata (index file 583820047)
  T.eq(count("qwen1_5_moe").total, 14315784192)
  -- allenai/OLMoE-1B-7B-0924: safetensors headers of the three shards
  -- (index file 65753564317)
  T.eq(count("olmoe_1b_7b").total, 6919161856)
  -- deepseek-ai/DeepSeek-V2-Lite: total_params in a model table (index file
  -- 69468411049)
  T.eq(count("deepseek_v2_lite").total, 15706484224)
end)

T.test("DeepSeek-MoE 16B (model_type deepseek) matches its Hub total", function()
  local r = count("deepseek_moe_16b")
  -- deepseek-ai/deepseek-moe-16b-base and -chat: 16,375,728,128 (MoE table
  -- of Hub totals, index file 69468411049; num_params in 67161653560)
  T.eq(r.total, 16375728128)
  -- by hand: 1 dense layer, 27 MoE layers of 64 experts + a shared MLP of
  -- 2 x 1408, a bare 64 x 2048 MoEGate weight, no attention biases
  T.eq(part(r, "layers.mlp"), 3 * 2048 * 10944)
  T.eq(part(r, "layers.experts"), 27 * 64 * 3 * 2048 * 1408)
  T.eq(part(r, "layers.shared_experts"), 27 * 3 * 2048 * 2816)
  T.eq(part(r, "layers.router"), 27 * 64 * 2048)
  T.eq(part(r, "layers.attention"), 28 * 4 * 2048 * 2048)
  -- moe_layer_freq 2: layers 2, 4, ..., 26 are MoE (layer_idx % 2 == 0, >= 1), 15 dense
  local c = {}
  for k, v in pairs(CONFIGS.deepseek_moe_16b) do c[k] = v end
  c.moe_layer_freq = 2
  T.eq(part(count_cfg(c, "c"), "layers.mlp"), 15 * 3 * 2048 * 10944)
  c.moe_layer_freq, c.scoring_func = 1, "sigmoid"
  T.raises(function() count_cfg(c, "c.json") end, "c.json: scoring_func: is 'sigmoid'")
  c.scoring_func, c.kv_lora_rank = "softmax", 512 -- a V2 relabelled v1
  T.raises(function() count_cfg(c, "c.json") end, "c.json: kv_lora_rank:")
  -- n_routed_experts null (DeepseekConfig's default): a dense model
  c.kv_lora_rank, c.n_routed_experts, c.num_experts_per_tok = nil, nil, nil
  T.eq(part(count_cfg(c, "c"), "layers.mlp"), 28 * 3 * 2048 * 10944)
end)

T.test("Phi-3.5-MoE: LayerNorms with bias, biased attention and head", function()
  local r = count("phi_3_5_moe")
  -- microsoft/Phi-3.5-MoE-instruct: 41,873,153,344 parameters (a model
  -- comparison quoted in a news digest, index file 5536979741; the Hub
  -- lists 41.9B)
  T.eq(r.total, 41873153344)
  -- by hand from modeling_phimoe.py: q/k/v/o with biases (head_dim 4096/32)
  T.eq(part(r, "layers.attention"), 32 * (2 * (4096 * 4096 + 4096) + 2 * (4096 * 1024 + 1024)))
  T.eq(part(r, "layers.norms"), 32 * 2 * 2 * 4096) -- two nn.LayerNorm, weight + bias
  T.eq(part(r, "norm"), 2 * 4096)
  T.eq(part(r, "lm_head"), 4096 * 32064 + 32064)  -- lm_head_bias
  T.eq(part(r, "layers.experts"), 32 * 16 * 3 * 4096 * 6400)
  local c = {}
  for k, v in pairs(CONFIGS.phi_3_5_moe) do c[k] = v end
  c.num_experts_per_tok = 4
  T.raises(function() count_cfg(c, "p.json") end, "p.json: num_experts_per_tok: is 4, but "
    .. "sparsemixer routes exactly 2")
  -- (that the simulator builds the LayerNorm and head biases the count
  -- names: "every family runs train, LoRA, inference and generation")
end)

-- GLM-4.5's checkpoints hold one multi-token-prediction layer,
-- model.layers.<num_hidden_layers>, that transformers skips on load
-- (Glm4MoeModel._keys_to_ignore_on_load_unexpected): the Hub totals are
-- the count plus that layer, written out here from modeling_glm4_moe.py
-- and DeepSeek-V3's MTP module (a MoE decoder layer, eh_proj 2H -> H,
-- enorm, hnorm, shared_head.norm, and in GLM-4.5's and -Air's files its
-- own embed_tokens and shared_head.head).
T.test("GLM-4.5, -Air, 4.6 and 4.7-Flash match their published totals", function()
  local function mtp(H, heads, kv, hd, E, I, bias_qkv, qk_norm)
    local attn = H * heads * hd + 2 * H * kv * hd + heads * hd * H
      + (bias_qkv and (heads + 2 * kv) * hd or 0) + (qk_norm and 2 * hd or 0)
    local moe = (E + 1) * 3 * H * I + H * E + E -- experts, shared, router, correction bias
    return attn + moe + 2 * H + 2 * H * H + 3 * H
  end
  local air = count("glm_4_5_air")
  -- PrimeIntellect/INTELLECT-3, GLM-4.5-Air's architecture saved without
  -- the MTP layer: 106,852,251,264 (MoE table of Hub totals, index file
  -- 69468411049)
  T.eq(air.total, 106852251264)
  -- zai-org/GLM-4.5-Air: 110,468,824,832 (same table; also 70911651117)
  T.eq(air.total + mtp(4096, 96, 8, 128, 128, 1408, true, false) + 2 * 151552 * 4096,
    110468824832)
  local g = count("glm_4_5")
  -- zai-org/GLM-4.5 and GLM-4.7: 358,337,791,296 (same table)
  T.eq(g.total + mtp(5120, 96, 8, 128, 160, 1536, true, true) + 2 * 151552 * 5120,
    358337791296)
  -- zai-org/GLM-4.6: 356,785,898,816 (same table), GLM-4.5's shapes: its
  -- MTP layer is stored without the embed_tokens/shared_head.head copies
  T.eq(g.total + mtp(5120, 96, 8, 128, 160, 1536, true, true), 356785898816)
  -- the pieces: o_proj without bias, per-head q/k norms, the dense layers
  T.eq(part(g, "layers.attention") // 92, 5120 * 12288 + 12288 + 2 * (5120 * 1024 + 1024)
    + 12288 * 5120 + 2 * 128)
  T.eq(part(g, "layers.mlp"), 3 * 3 * 5120 * 12288)
  T.eq(part(g, "layers.shared_experts"), 89 * 3 * 5120 * 1536)
  T.eq(part(g, "layers.router.e_score_correction_bias"), 89 * 160)
  for _, p in ipairs(g.parts) do
    if p.name == "mtp" then
      T.eq(p.params, 0)
      T.ok(p.note:find(P.commas(mtp(5120, 96, 8, 128, 160, 1536, true, true)), 1, true), p.note)
    end
  end
  -- GLM-4.7-Flash: DeepSeek-V3's MLA with GLM-4.5's experts; llama.cpp's
  -- n_params of its GGUF, 29,943,393,920 (index file 60005726306: the MTP
  -- layer left out, the correction biases in)
  local f = count("glm_4_7_flash")
  T.eq(f.total, 29943393920)
  T.eq(part(f, "layers.attention") // 47, 2048 * 768 + 768 + 768 * 20 * 256 + 2048 * 576 + 512
    + 512 * 20 * (192 + 256) + 20 * 256 * 2048)
  T.eq(part(f, "layers.mlp"), 3 * 2048 * 10240)
  local lite = {}
  for k, v in pairs(CONFIGS.glm_4_7_flash) do lite[k] = v end
  lite.mlp_layer_types = {}
  for i = 1, 47 do lite.mlp_layer_types[i] = i <= 3 and "dense" or "sparse" end
  T.eq(part(count_cfg(lite, "l"), "layers.mlp"), 3 * 3 * 2048 * 10240)
  lite.mlp_layer_types[5] = "moe"
  T.raises(function() count_cfg(lite, "l.json") end, "l.json: mlp_layer_types[5]: must be")
  lite.mlp_layer_types, lite.first_k_dense_replace = nil, 2
  T.raises(function() count_cfg(lite, "l.json") end, "l.json: first_k_dense_replace: is not 1")
  lite.first_k_dense_replace, lite.q_lora_rank = 1, nil
  T.raises(function() count_cfg(lite, "l.json") end, "l.json: q_lora_rank: is absent or null")
  -- transformers 5 files keep partial_rotary_factor in rope_parameters
  local fam = registry.find(CONFIGS.glm_4_5_air)
  local v5 = {}
  for k, v in pairs(CONFIGS.glm_4_5_air) do v5[k] = v end
  v5.partial_rotary_factor, v5.rope_parameters = nil, { rope_type = "default",
    rope_theta = 1000000, partial_rotary_factor = 1.0 }
  T.eq(#fam.simulator(fam.read(v5, "v5")).assumptions, 0)
  T.ok(fam.simulator(fam.read(CONFIGS.glm_4_5_air, "a")).assumptions[1]:find("64 of 128", 1,
    true))
  -- keys GLM-4.5 does not read are refused, and the router's groups checked
  local bad = {}
  for k, v in pairs(CONFIGS.glm_4_5_air) do bad[k] = v end
  bad.moe_layer_freq = 2
  T.raises(function() count_cfg(bad, "air.json") end, "air.json: moe_layer_freq:")
  bad.moe_layer_freq, bad.n_group = nil, 3
  T.raises(function() count_cfg(bad, "air.json") end, "air.json: n_group: must divide")
end)

T.test("the pieces of a MoE count are the ones the modelling code builds", function()
  -- Mixtral: 32 layers x 8 experts x 3 x 4096 x 14336 and a 4096 x 8 router
  local r = count_cfg(preset("mixtral_8x7b_v0_1"), "mixtral")
  T.eq(part(r, "layers.experts"), 32 * 8 * 3 * 4096 * 14336)
  T.eq(part(r, "layers.router"), 32 * 4096 * 8)
  -- DeepSeek-V3: 3 dense layers, 58 MoE layers with one shared expert, the
  -- MTP layer not counted
  local d = count_cfg(preset("deepseek_v3"), "deepseek_v3")
  T.eq(part(d, "layers.mlp"), 3 * 3 * 7168 * 18432)
  T.eq(part(d, "layers.shared_experts"), 58 * 3 * 7168 * 2048)
  T.eq(part(d, "mtp"), 0)
  -- its note sizes the MTP layer: one MoE layer (MLA 187,107,328 with its
  -- norms + 256 experts and the shared expert 3 x 7168 x 2048 each + the
  -- 7168 x 256 router) + the 256 correction biases + eh_proj 14336 x 7168
  -- + three norms
  local mla = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256
    + 128 * 128 * 7168 + 2 * 7168
  local layer = mla + 257 * 3 * 7168 * 2048 + 7168 * 256 + 256 + 14336 * 7168 + 3 * 7168
  for _, p in ipairs(d.parts) do
    if p.name == "mtp" then
      T.ok(p.note:find(P.commas(layer) .. " parameters", 1, true), p.note)
      T.ok(p.note:find(P.commas(2 * 129280 * 7168), 1, true), p.note)
    end
  end
  -- gpt-oss-20b: fused experts with biases, a router with a bias, one sink
  -- per head in every layer
  local g = count_cfg(preset("gpt_oss_20b"), "gpt_oss_20b")
  T.eq(part(g, "layers.experts"), 24 * 32 * (2880 * 5760 + 5760 + 2880 * 2880 + 2880))
  T.eq(part(g, "layers.router"), 24 * (2880 * 32 + 32))
  -- Qwen1.5-MoE: the shared expert and its sigmoid gate
  T.eq(part(count("qwen1_5_moe"), "layers.shared_experts"), 24 * (3 * 2048 * 5632 + 2048))
end)

T.test("Gemma 2 has four norms per layer, Gemma 1 two", function()
  local r = count("gemma_2_2b")
  T.eq(part(r, "layers.norms"), 26 * 4 * 2304)
  local g1 = CONFIGS.gemma_2_2b
  local c = {}
  for k, v in pairs(g1) do c[k] = v end
  c.model_type = "gemma"
  T.eq(part(count_cfg(c, "gemma.json"), "layers.norms"), 26 * 2 * 2304)
end)

T.test("keys a family does not model are refused, never ignored", function()
  local mix = preset("mixtral_8x7b_v0_1")
  mix.model_type = "mistral"
  T.raises(function() count_cfg(mix, "mix.json") end,
    "mix.json: num_local_experts: changes the parameter count")
  local q = preset("qwen3_30b_a3b")
  q.model_type = "qwen3"
  T.raises(function() count_cfg(q, "q.json") end, "q.json: num_experts: changes the parameter count")
  local ds = preset("deepseek_v3")
  ds.model_type = "llama"
  ds.architectures = nil
  T.raises(function() count_cfg(ds, "ds.json") end, "ds.json: n_routed_experts:")
end)

T.test("a VLM relabelled as its decoder is refused, not counted without its tower", function()
  -- microsoft/Phi-3.5-vision-instruct's config.json (as vendored in
  -- mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py): a phi3 text model
  -- with embd_layer and img_processor naming its CLIP tower. Relabelled
  -- phi3 it would count 3,821,079,552 (the text model alone), not the
  -- 4.15 B of the checkpoint; and the did-you-mean to phi3 must not be given.
  local v = cfg({ model_type = "phi3_v", vocab_size = 32064, hidden_size = 3072,
    intermediate_size = 8192, num_hidden_layers = 32, num_attention_heads = 32,
    num_key_value_heads = 32,
    embd_layer = { embedding_cls = "image", projection_cls = "mlp", use_hd_transform = true },
    img_processor = { image_dim_out = 1024, model_name = "openai/clip-vit-large-patch14-336",
      name = "clip_vision_model", num_img_tokens = 144 } })
  local msg = T.raises(function() count_cfg(v, "v.json") end, "unknown model_type 'phi3_v'")
  T.ok(msg and not msg:find("did you mean", 1, true), "no hint to phi3")
  v.model_type = "phi3"
  T.raises(function() count_cfg(v, "v.json") end, "v.json: embd_layer: changes the parameter count")
  v.embd_layer = nil
  T.raises(function() count_cfg(v, "v.json") end, "v.json: img_processor: changes the parameter count")
  -- a transformers-style VLM config relabelled as its decoder
  local q = preset("qwen2_5_7b_instruct")
  q.vision_config = { depth = 32 }
  T.raises(function() count_cfg(q, "q.json") end, "q.json: vision_config: changes the parameter count")
  -- deepseek-ai/DeepSeek-V3.2-Exp: DeepSeek-V3's shapes plus a lightning
  -- indexer in every layer (index_n_heads 64, index_head_dim 128,
  -- index_topk 2048); 'did you mean deepseek_v2' would count it without
  local ds = preset("deepseek_v3")
  ds.model_type, ds.architectures = "deepseek_v32", { "DeepseekV32ForCausalLM" }
  ds.index_n_heads, ds.index_head_dim, ds.index_topk = 64, 128, 2048
  msg = T.raises(function() count_cfg(ds, "d.json") end, "unknown model_type 'deepseek_v32'")
  T.ok(msg and not msg:find("did you mean", 1, true), "no hint to deepseek_v2")
  ds.model_type, ds.architectures = "deepseek_v3", nil
  T.raises(function() count_cfg(ds, "d.json") end, "d.json: index_n_heads: changes the parameter count")
  -- openbmb/MiniCPM-o-2_6: MiniCPM-V 2.6 with a Whisper encoder and a TTS
  -- head (audio_config, tts_config); relabelled minicpmv they were dropped
  local o = { model_type = "minicpmo", version = 2.6, query_num = 64, hidden_size = 3584,
    intermediate_size = 18944, num_hidden_layers = 28, num_attention_heads = 28,
    num_key_value_heads = 4, vocab_size = 151700, tie_word_embeddings = false,
    init_audio = true, init_tts = true,
    audio_config = { d_model = 1024, encoder_layers = 24 }, tts_config = { llm_dim = 3584 },
    vision_config = { model_type = "siglip", hidden_size = 1152, intermediate_size = 4304,
      num_hidden_layers = 27, num_attention_heads = 16, image_size = 980, patch_size = 14 } }
  msg = T.raises(function() count_cfg(o, "o.json") end, "unknown model_type 'minicpmo'")
  T.ok(msg and not msg:find("did you mean", 1, true), "no hint to minicpmv")
  o.model_type = "minicpmv"
  T.raises(function() count_cfg(o, "o.json") end, "o.json: audio_config: changes the parameter count")
end)

T.test("a Pixtral tower with PixtralVisionConfig's defaults is counted, not refused", function()
  -- mistral-community/pixtral-12b's config.json names only head_dim,
  -- image_size 1024, patch_size 16 and rope_theta in its vision_config:
  -- the sizes are PixtralVisionConfig's defaults (hidden 1024, 24 layers,
  -- 16 heads, intermediate 4096, 3 channels)
  local function pixtral(vc)
    return { model_type = "llava", projector_hidden_act = "gelu",
      vision_feature_layer = -1, vision_feature_select_strategy = "full",
      text_config = { model_type = "mistral", head_dim = 128, hidden_size = 5120,
        intermediate_size = 14336, num_attention_heads = 32, num_hidden_layers = 40,
        num_key_value_heads = 8, vocab_size = 131072 },
      vision_config = vc }
  end
  local r = count_cfg(pixtral({ model_type = "pixtral", head_dim = 64, image_size = 1024,
    patch_size = 16, rope_theta = 10000.0, hidden_act = "gelu" }), "p.json")
  local full = count_cfg(pixtral({ model_type = "pixtral", image_size = 1024, patch_size = 16,
    hidden_size = 1024, num_hidden_layers = 24, num_attention_heads = 16,
    intermediate_size = 4096, num_channels = 3 }), "p.json")
  T.eq(r.total, full.total)
  -- the tower written out: a bias-free 3 x 16 x 16 conv, ln_pre, and 24
  -- layers of two RMSNorms, q/k/v/o 1024 x 1024 and a 1024/4096 gated MLP
  T.eq(part(r, "vision_tower.patch_conv"), 3 * 16 * 16 * 1024)
  T.eq(part(r, "vision_tower.transformer.layers"),
    24 * (2 * 1024 + 4 * 1024 * 1024 + 3 * 1024 * 4096))
end)

T.test("SmolVLM-Instruct's SigLIP at 384 with patch 14 sees 27 x 27 patches", function()
  -- HuggingFaceTB/SmolVLM-Instruct's config.json: a 384-pixel tower with
  -- 14-pixel patches (the Conv2d floors: Idefics3VisionEmbeddings has
  -- image_size // patch_size = 27 per side), scale_factor 3, and the
  -- config's own image_seq_len 81 = (27 / 3)^2 tokens per tile
  local c = { model_type = "idefics3", scale_factor = 3, image_seq_len = 81,
    vision_config = { model_type = "idefics3", hidden_size = 1152, intermediate_size = 4304,
      num_hidden_layers = 27, num_attention_heads = 16, image_size = 384, patch_size = 14 },
    text_config = { model_type = "llama", vocab_size = 49155, hidden_size = 2048,
      intermediate_size = 8192, num_hidden_layers = 24, num_attention_heads = 32,
      num_key_value_heads = 32, head_dim = 64, tie_word_embeddings = false },
    tie_word_embeddings = false }
  local fam, typed = registry.find(c, "s.json")
  local r = P.count(fam, typed, "s.json")
  T.eq(part(r, "model.vision_model.embeddings"), 3 * 14 * 14 * 1152 + 1152 + 27 * 27 * 1152)
  local m = fam.read(typed, "s.json")
  T.eq(fam.image_tokens(m, { height = 384, width = 384 }).per_tile, 81)
  local sim = fam.simulator(m, { count = 1, height = 384, width = 384 })
  T.eq(sim.vision.image_size, 27 * 14)
end)

T.test("a LoRA target a fused layout holds is pointed to its module, not a lookalike", function()
  -- Phi-3 fuses q/k/v into qkv_proj and gate/up into gate_up_proj;
  -- DeepSeek's MLA splits q into q_a_proj/q_b_proj. The spelling hint named
  -- o_proj for q_proj, an adapter on a different projection.
  local function err(c, targets)
    local path = T.tmpfile(vram.json.encode(c))
    local ok, e = pcall(function()
      return step.run(spec.normalize({ model = { config = path }, run = { mode = "train",
        batch = 1, seq = 8, lora = { rank = 4, targets = targets } } }, "s.yaml", registry))
    end)
    return not ok and (type(e) == "table" and e.msg or tostring(e)) or ""
  end
  local small = cfg({ model_type = "phi3", vocab_size = 64, hidden_size = 32,
    intermediate_size = 64, num_hidden_layers = 2, num_attention_heads = 4,
    num_key_value_heads = 4 })
  local e = err(small, { "q_proj", "v_proj" })
  T.ok(e:find("no module named 'q_proj' in this model; this model holds it in 'qkv_proj'", 1,
    true), e)
  e = err(small, { "qkv_proj", "up_proj" })
  T.ok(e:find("'up_proj' in this model; this model holds it in 'gate_up_proj'", 1, true), e)
  local ds = {}
  for k, v in pairs(CONFIGS.deepseek_v2_lite) do ds[k] = v end
  ds.num_hidden_layers, ds.n_routed_experts, ds.num_experts_per_tok = 2, 4, 2
  ds.vocab_size = 64
  -- DeepSeek-V2-Lite has no q_lora_rank: its q_proj exists; v sits in kv_b_proj
  T.eq(err(ds, { "q_proj" }), "")
  e = err(ds, { "q_proj", "v_proj" })
  T.ok(e:find("'v_proj' in this model; this model holds it in 'kv_a_proj_with_mqa', "
    .. "'kv_b_proj'", 1, true), e)
end)

T.test("a did-you-mean never points to a family that would refuse the config", function()
  local mix = preset("mixtral_8x7b_v0_1")
  mix.architectures = nil
  mix.model_type = "mixtrel"
  T.raises(function() count_cfg(mix, "m.json") end, "did you mean 'mixtral'?")
  mix.model_type = "mistrall" -- close to mistral, which would refuse the experts
  local msg = T.raises(function() count_cfg(mix, "m.json") end, "unknown model_type 'mistrall'")
  T.ok(msg and not msg:find("did you mean", 1, true), "no hint")
end)

T.test("a known architecture fixes an unknown model_type", function()
  local mix = preset("mixtral_8x7b_v0_1")
  mix.model_type = "mixtral-custom"
  T.eq(count_cfg(mix, "m.json").total, 46702792704)
end)

T.test("tokens per expert: dropless sums to rows x top_k, capacity drops", function()
  local c = moe.tokens_per_expert(10, 2, 8)
  local sum = 0
  for _, n in ipairs(c) do sum = sum + n end
  T.eq(sum, 20)
  T.eq(c[1], 3)
  T.eq(c[8], 2)
  -- capacity factor 1.0 over 20 assignments and 8 experts: ceil(2.5) = 3
  local _, cap = moe.tokens_per_expert(10, 2, 8, 1.0)
  T.eq(cap, 3)
  local d = moe.tokens_per_expert(100, 2, 8, 0.5) -- cap ceil(12.5) = 13 < 25
  T.eq(d[1], 13)
  -- imbalance 2: the busiest expert takes ceil(2 x 20 / 8) = 5, the other
  -- 7 share 15; at 100 it takes every row (10), the others share 10
  T.eq(moe.tokens_per_expert(10, 2, 8, nil, 2.0), { 5, 3, 2, 2, 2, 2, 2, 2 })
  T.eq(moe.tokens_per_expert(10, 2, 8, nil, 100), { 10, 2, 2, 2, 1, 1, 1, 1 })
  -- and a capacity still caps it
  T.eq(moe.tokens_per_expert(10, 2, 8, 1.0, 2.0)[1], 3)
end)


-- A run of config (a table) cut to `layers` layers, through a run spec.
-- The config goes to a temporary file (the suite runs with --trust).
-- Quantized presets run dequantized here unless keep_quant says otherwise.
local function run_of(config, layers, run, keep_quant)
  assert(T.tmpfile, "test_families needs `vramlua --trust run`")
  if not keep_quant then config.quantization_config = nil end
  local path = T.tmpfile(vram.json.encode(config))
  return spec.normalize({ model = { config = path, overrides = { num_hidden_layers = layers } },
    run = run }, "spec.yaml", registry)
end

T.test("run.moe.imbalance: the busiest expert's transients grow in the loop, not the grouped GEMM", function()
  local c = { model_type = "mixtral", vocab_size = 128, hidden_size = 64,
    intermediate_size = 4096, num_hidden_layers = 1, num_attention_heads = 4,
    num_key_value_heads = 2, num_local_experts = 8, num_experts_per_tok = 2,
    tie_word_embeddings = false }
  local function peak(moe_run)
    return step.run(run_of(c, 1, { mode = "inference", batch = 1, seq = 256,
      framework = "pytorch-cpu", moe = moe_run })).peak
  end
  local base, skew = peak({ impl = "loop" }), peak({ impl = "loop", imbalance = 4 })
  -- balanced: 64 rows per expert; skewed: ceil(4 x 512 / 8) = 256 rows, so
  -- the busiest expert's gate/up outputs (rows x 4096) grow: at least one
  -- bf16 (rows x 4096) tensor's extra rows
  T.ok(skew - base >= (256 - 64) * 4096 * 2, ("%d -> %d"):format(base, skew))
  T.eq(peak({ impl = "grouped" }), peak({ impl = "grouped", imbalance = 4 }))
  T.raises(function() peak({ imbalance = 0.5 }) end, "run.moe.imbalance: must be in [1, 1024]")
end)

T.test("every family runs train, LoRA, inference and generation", function()
  local all = { "gemma_2_2b", "gemma_3_1b", "phi_3_mini", "olmo_2_7b", "glm_4_9b",
    "qwen1_5_moe", "olmoe_1b_7b", "deepseek_v2_lite", "glm_4_5_air", "deepseek_moe_16b",
    "phi_3_5_moe", "glm_4_7_flash" }
  local configs = {}
  for _, n in ipairs(all) do configs[n] = CONFIGS[n] end
  for _, n in ipairs({ "mixtral_8x7b_v0_1", "qwen3_30b_a3b", "deepseek_v3", "gpt_oss_20b" }) do
    configs[n] = preset(n)
  end
  for name, c in pairs(configs) do
    for _, r in ipairs({ { mode = "train", batch = 1, seq = 32 },
      { mode = "train", batch = 1, seq = 32, lora = { rank = 4, targets = "all-linear" } },
      { mode = "inference", batch = 1, seq = 32 },
      { mode = "generate", batch = 1, seq = 16, generate_tokens = 2 } }) do
      local run = run_of(c, 4, r)
      local ok, st = pcall(step.run, run)
      T.ok(ok, name .. " " .. r.mode .. (r.lora and " lora" or "") .. ": " .. tostring(
        not ok and (type(st) == "table" and st.msg or st) or ""))
      if ok then
        -- the simulator creates exactly the parameters the count names
        local cc = {}
        for k, v in pairs(c) do cc[k] = v end
        cc.num_hidden_layers = 4
        local want = count_cfg(cc, name).total
        local buffers = 0
        if cc.model_type == "deepseek_v3" then buffers = 1 * 256 end -- layer 4 is MoE
        if cc.model_type == "glm4_moe" then buffers = 3 * 128 end -- layers 2-4 are MoE
        if cc.model_type == "glm4_moe_lite" then buffers = 3 * 64 end
        if not r.lora then T.eq(st.param_count + buffers, want, name .. " parameters") end
        T.ok(st.peak > 0, name)
      end
    end
  end
end)

T.test("composed MoE layers equal the full simulation", function()
  for _, variant in ipairs({ {}, { moe = { impl = "grouped" } },
    { lora = { rank = 4, targets = "all-linear" } }, { grad_checkpointing = "full" } }) do
    local r = { mode = "train", batch = 2, seq = 24 }
    for k, v in pairs(variant) do r[k] = v end
    for _, name in ipairs({ "qwen3_30b_a3b", "gpt_oss_20b" }) do
      local run = run_of(preset(name), 5, r)
      run.compose = false
      local full = step.run(run)
      run.compose = nil
      local comp = step.run(run)
      T.eq(comp.peak, full.peak, name .. " peak")
      T.eq(comp.peak_reserved, full.peak_reserved, name .. " reserved")
    end
  end
end)

T.test("the auxiliary loss keeps every layer's router logits to the end of forward", function()
  local base = { mode = "train", batch = 1, seq = 64, framework = "pytorch-cpu" }
  local with = { mode = "train", batch = 1, seq = 64, framework = "pytorch-cpu",
    moe = { aux_loss = true } }
  local a = step.run(run_of(preset("qwen3_30b_a3b"), 3, base))
  local b = step.run(run_of(preset("qwen3_30b_a3b"), 3, with))
  -- at least the softmax of the concatenated logits (3 layers x 64 rows x
  -- 128 experts, bf16) stays saved for backward
  T.ok(b.phase_end.forward_end - a.phase_end.forward_end >= 3 * 64 * 128 * 2)
end)

T.test("gpt-oss inference runs every expert on every token", function()
  local r = { mode = "inference", batch = 1, seq = 128 }
  local dense = step.run(run_of(preset("gpt_oss_20b"), 2, r))
  r.moe = { impl = "loop" }
  local loop = step.run(run_of(preset("gpt_oss_20b"), 2, r))
  -- the (32 experts, 128 rows, 2 x 2880) bf16 gate_up product of the dense
  -- path alone exceeds the loop's largest per-expert tensors
  T.ok(dense.peak - loop.peak >= 32 * 128 * 2 * 2880 * 2 - 128 * 4 * 2 * 2880 * 2)
end)

-- gpt-oss's attention sinks: transformers has no sdpa path for them
-- (_supports_sdpa = False), so sdpa is refused, naming the field; flash (its
-- vllm-flash-attn3 kernel) trains them, their gradient in the kernel's
-- backward, with the layers composed as walked (the sinks once had no
-- gradient under flash, and composing their layers failed inside the tape).
T.test("gpt-oss: sdpa is refused, flash trains the sinks", function()
  local r = { mode = "train", batch = 1, seq = 16, attention = "sdpa" }
  T.raises(function() run_of(preset("gpt_oss_20b"), 6, r) end, "run.attention")
  r.attention = "flash"
  local run = run_of(preset("gpt_oss_20b"), 6, r)
  local found = false
  for _, a in ipairs(run.model_assumptions or {}) do found = found or a:find("sinks", 1, true) ~= nil end
  T.ok(found, "the kernel named as an assumption")
  local composed = step.run(run)
  run.compose = false
  local walked = step.run(run)
  T.eq(composed.peak, walked.peak, "composed as walked")
  T.eq(composed.at_peak, walked.at_peak, "categories")
end)

T.test("Gemma 2's final soft-capping adds logits-sized tensors", function()
  local c = {}
  for k, v in pairs(CONFIGS.gemma_2_2b) do c[k] = v end
  local r = { mode = "inference", batch = 1, seq = 256 }
  local capped = step.run(run_of(c, 2, r))
  c.final_logit_softcapping = 0 -- falsy cap: none
  local plain = step.run(run_of(c, 2, r))
  -- logits / cap and tanh live together: one more bf16 (256 x 256000)
  T.ok(capped.peak - plain.peak >= 256 * 256000 * 2)
end)

T.test("run.moe is checked", function()
  T.raises(function() run_of(preset("qwen3_30b_a3b"), 2, { batch = 1, seq = 8,
    moe = { impl = "magic" } }) end, "run.moe.impl: must be one of loop, grouped, dense")
  T.raises(function() run_of(preset("llama_3_8b"), 2, { batch = 1, seq = 8,
    moe = { impl = "loop" } }) end, "run.moe: the model has no mixture-of-experts layers")
  T.raises(function() run_of(preset("qwen3_30b_a3b"), 2, { batch = 1, seq = 8,
    moe = { capacity_factor = -1 } }) end, "run.moe.capacity_factor: must be in (0, 64]")
end)

T.test("quantized checkpoints: each format's bytes, scales included", function()
  local Q = require("stdlib.quant")
  local S = require("stdlib.sim").new({})
  local function bytes(qc, out, inn) return Q.weight_bytes(S, Q.read(qc, "q.json"), out, inn) end
  -- fp8, 128 x 128 blocks: one byte per weight + an fp32 scale per block
  T.eq(bytes({ quant_method = "fp8", weight_block_size = { 128, 128 } }, 4096, 4096),
    4096 * 4096 + 4 * 32 * 32)
  T.eq(bytes({ quant_method = "fp8", weight_block_size = { 128, 128 } }, 1000, 300),
    1000 * 300 + 4 * 8 * 3) -- partial blocks round up
  -- mxfp4: half a byte per weight + one scale byte per 32
  T.eq(bytes({ quant_method = "mxfp4" }, 64, 2880), 64 * 1440 + 64 * 90)
  -- GPTQ 4-bit, group 128: qweight, qzeros, fp16 scales, g_idx
  T.eq(bytes({ quant_method = "gptq", bits = 4, group_size = 128 }, 4096, 4096),
    4096 * 4096 // 2 + 4 * 32 * (4096 * 4 // 32) + 2 * 32 * 4096 + 4 * 4096)
  -- AWQ 4-bit, group 128: no g_idx
  T.eq(bytes({ quant_method = "awq", bits = 4, group_size = 128 }, 4096, 4096),
    4096 * 4096 // 2 + 4 * 32 * 512 + 2 * 32 * 4096)
  -- bitsandbytes nf4: an fp32 absmax per 64 weights; 8-bit: an fp32 per row
  T.eq(bytes({ quant_method = "bitsandbytes", load_in_4bit = true,
    bnb_4bit_quant_type = "nf4" }, 4096, 4096), 4096 * 4096 // 2 + 4 * 4096 * 4096 // 64)
  T.eq(bytes({ quant_method = "bitsandbytes", load_in_8bit = true }, 4096, 4096),
    4096 * 4096 + 4 * 4096)
  T.raises(function() Q.read({ quant_method = "hqq" }, "q.json") end,
    "q.json: quantization_config.quant_method: 'hqq' is not modelled")
  T.raises(function() Q.read({ quant_method = "fp8", weight_block_size = { 128 } }, "q.json") end,
    "quantization_config.weight_block_size: must be two positive integers")
  T.raises(function() Q.read({ quant_method = "fp8",
    modules_to_not_convert = { "model.layers.3.self_attn.q_proj" } }, "q.json") end,
    "per-layer exceptions are not modelled")
end)

T.test("compressed-tensors and fbgemm_fp8 checkpoints: weights, scales, zero points", function()
  local Q = require("stdlib.quant")
  local S = require("stdlib.sim").new({})
  local function bytes(qc, out, inn) return Q.weight_bytes(S, Q.read(qc, "q.json", "bfloat16"),
    out, inn) end
  local function scheme(fmt, w, a, ignore)
    return { quant_method = "compressed-tensors", format = fmt, quantization_status = "compressed",
      ignore = ignore or { "lm_head" }, kv_cache_scheme = vram.json.null,
      config_groups = { group_0 = { targets = { "Linear" }, weights = w,
        input_activations = a or vram.json.null, output_activations = vram.json.null } } }
  end
  -- the schemes of RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16 (int4
  -- symmetric, group 128, pack-quantized), -FP8-dynamic (fp8 per channel,
  -- dynamic per-token fp8 inputs, float-quantized) and -quantized.w8a8 (int8
  -- per channel, dynamic per-token int8 inputs, int-quantized), lm_head ignored
  -- (config.json's quantization_config as published, keys this reader uses).
  -- Shapes: q_proj 4096 x 4096, down_proj 4096 x 14336; bf16 scales.
  local w4a16 = scheme("pack-quantized", { num_bits = 4, type = "int", symmetric = true,
    strategy = "group", group_size = 128, dynamic = false, actorder = vram.json.null })
  -- weight_packed int32 (4096, 4096 / 8), weight_scale bf16 (4096, 32), weight_shape int64[2]
  T.eq(bytes(w4a16, 4096, 4096), 4 * 4096 * 512 + 2 * 4096 * 32 + 16)
  T.eq(bytes(w4a16, 4096, 14336), 4 * 4096 * 1792 + 2 * 4096 * 112 + 16)
  local fp8 = scheme("float-quantized", { num_bits = 8, type = "float", symmetric = true,
    strategy = "channel", dynamic = false }, { num_bits = 8, type = "float", symmetric = true,
    strategy = "token", dynamic = true })
  -- e4m3 weight + a bf16 scale per output row; dynamic inputs store nothing
  T.eq(bytes(fp8, 14336, 4096), 14336 * 4096 + 2 * 14336)
  local w8a8 = scheme("int-quantized", { num_bits = 8, type = "int", symmetric = true,
    strategy = "channel", dynamic = false }, { num_bits = 8, type = "int", symmetric = true,
    strategy = "token", dynamic = true })
  T.eq(bytes(w8a8, 4096, 14336), 4096 * 14336 + 2 * 4096)
  T.eq(Q.read(w8a8, "q.json", "bfloat16").store, "int8")
  -- asymmetric int4, group 64, actorder group: zero points packed 8 per int32
  -- along the output (1000 -> 125 rows x 5 groups), g_idx int32 per input;
  -- 300 inputs pack into ceil(300 / 8) = 38 int32 per row
  T.eq(bytes(scheme("pack-quantized", { num_bits = 4, type = "int", symmetric = false,
    strategy = "group", group_size = 64, actorder = "group" }), 1000, 300),
    4 * 1000 * 38 + 2 * 1000 * 5 + 16 + 4 * 125 * 5 + 4 * 300)
  -- static per-tensor fp8: one bf16 weight scale, one bf16 input scale
  T.eq(bytes(scheme("float-quantized", { num_bits = 8, type = "float", strategy = "tensor" },
    { num_bits = 8, type = "float", strategy = "tensor", dynamic = false }), 4096, 4096),
    4096 * 4096 + 2 + 2)
  -- fp8 blocks of 128 x 128: a bf16 scale per block
  T.eq(bytes(scheme("float-quantized", { num_bits = 8, type = "float", strategy = "block",
    block_structure = { 128, 128 } }), 1000, 300), 1000 * 300 + 2 * 8 * 3)
  -- fbgemm_fp8 (transformers FbgemmFp8Linear): e4m3 weight, fp32 scale per
  -- row, fp32 input_scale_ub
  T.eq(bytes({ quant_method = "fbgemm_fp8", activation_scale_ub = 1200.0 }, 4096, 4096),
    4096 * 4096 + 4 * 4096 + 4)
  local function refused(qc, what, dtype)
    T.raises(function() Q.read(qc, "q.json", dtype == nil and "bfloat16" or dtype or nil) end, what)
  end
  refused(scheme("marlin-24", w4a16.config_groups.group_0.weights), "format: 'marlin-24' is not modelled")
  refused(scheme("pack-quantized", w4a16.config_groups.group_0.weights, nil, {}),
    "lm_head is quantized: not modelled")
  local two = scheme("pack-quantized", w4a16.config_groups.group_0.weights)
  two.config_groups.group_1 = two.config_groups.group_0
  refused(two, "config_groups: several schemes")
  local sparse = scheme("pack-quantized", w4a16.config_groups.group_0.weights)
  sparse.sparsity_config = { format = "sparse-24-bitmask" }
  refused(sparse, "sparsity_config: is set")
  refused(scheme("pack-quantized", { num_bits = 2, type = "int", strategy = "channel" }),
    "int 2-bit in pack-quantized is not modelled")
  refused(scheme("int-quantized", { num_bits = 4, type = "float", strategy = "channel" }),
    "float 4-bit in int-quantized is not modelled")
  refused(w4a16, "config.json needs torch_dtype", false)
end)

T.test("a compressed-tensors w4a16 Llama holds its packed weights end to end", function()
  -- Llama-3-8B shapes, 2 layers, with the w4a16 scheme above: by hand,
  -- bf16 embedding and (untied) lm_head 128256 x 4096, bf16 norms, and per
  -- projection weight_packed int32 (out, in / 8) + bf16 scales (out, in / 128)
  -- + weight_shape int64[2]
  local function proj(out, inn) return 4 * out * inn // 8 + 2 * out * inn // 128 + 16 end
  local layer = 2 * 4096 * 2 + 2 * proj(4096, 4096) + 2 * proj(1024, 4096)
    + 2 * proj(14336, 4096) + proj(4096, 14336)
  local want = 2 * 128256 * 4096 * 2 + 4096 * 2 + 2 * layer
  local run = spec.normalize({ model = { preset = "llama_3_8b", overrides = {
    num_hidden_layers = 2, torch_dtype = "bfloat16", quantization_config = {
      quant_method = "compressed-tensors", format = "pack-quantized", ignore = { "lm_head" },
      config_groups = { group_0 = { targets = { "Linear" }, weights = { num_bits = 4,
        type = "int", symmetric = true, strategy = "group", group_size = 128 } } } } } },
    run = { mode = "inference", batch = 1, seq = 1, framework = "pytorch-cpu" } },
    "s.yaml", registry)
  T.eq(step.run(run).live_by_category.weights, want)
end)

T.test("gpt-oss weights as stored: mxfp4 experts, the rest bf16", function()
  -- model.safetensors.index.json metadata.total_size: gpt-oss-20b
  -- 13,761,264,768 bytes (a verbatim copy in index file 31112482743),
  -- gpt-oss-120b 65,248,815,744 (tensor_bytes in index file 59724567210)
  for name, total in pairs({ gpt_oss_20b = 13761264768, gpt_oss_120b = 65248815744 }) do
    local run = spec.normalize({ model = { preset = name }, run = { mode = "inference",
      batch = 1, seq = 1, framework = "pytorch-cpu" } }, "s.yaml", registry)
    T.eq(step.run(run).live_by_category.weights, total, name)
  end
end)

T.test("a quantized checkpoint trains through adapters, or dequantized", function()
  local function norm(r) return spec.normalize({ model = { preset = "qwen3_30b_a3b_fp8",
    overrides = { num_hidden_layers = 2 } }, run = r }, "s.yaml", registry) end
  T.raises(function() norm({ mode = "train", batch = 1, seq = 8 }) end,
    "s.yaml: run.lora: a quantized checkpoint trains only through adapters")
  T.eq(norm({ mode = "train", batch = 1, seq = 8, precision = { dequantize = true } }).quant, nil)
  local q = norm({ mode = "train", batch = 1, seq = 8, lora = { rank = 8 } }).quant
  T.eq(q.store, "fp8_e4m3")
  T.raises(function() norm({ mode = "inference", batch = 1, seq = 8,
    precision = { weights = "nf4" } }) end, "run.precision.weights: the checkpoint is quantized")
end)

-- Checkpoints in tests/lua/fixtures: safetensors headers (no tensor bytes)
-- with the tensor names, dtypes and shapes transformers saves.
local FIX = vram.share_dir .. "/tests/lua/fixtures/"

T.test("safetensors headers give every tensor's count, dtype and bytes", function()
  local st = require("stdlib.safetensors")
  -- a two-layer Qwen2, hidden 64, MLP 128, 4 heads of 16, 2 KV heads,
  -- vocabulary 100, tied: written out by hand
  local layer = (64 * 64 + 64) + 2 * (32 * 64 + 32) + 64 * 64 + 3 * 64 * 128 + 2 * 64
  local want = 100 * 64 + 2 * layer + 64
  local k = st.read(FIX .. "ckpt_qwen2_tiny/model.safetensors.index.json")
  T.eq(k.elements, want)
  T.eq(k.bytes, 2 * want)
  T.eq(k.index_total_size, 2 * want)
  T.eq(#k.files, 2)
  T.eq(k.tensors, 1 + 2 * 12 + 1)
  T.eq(st.read(FIX .. "ckpt_qwen2_tiny").elements, want) -- the folder
  local r = count_cfg(vram.json.load(FIX .. "ckpt_qwen2_tiny/config.json"), "c")
  T.eq(st.compare(k, r), "config count equals the checkpoint's: " .. P.commas(want))
  -- a checkpoint that stores the tied embedding twice is recognised
  local twice = { elements = want + 6400, bytes = 0, by_dtype = { { dtype = "BF16" } } }
  T.ok(st.compare(twice, r):find("second copy of the tied embedding", 1, true))
  local off = { elements = want + 1, bytes = 0, by_dtype = { { dtype = "BF16" } } }
  T.ok(st.compare(off, r):find("^DIFFERENT"))
end)

T.test("a quantized checkpoint's bytes equal what vramlua prices", function()
  local st = require("stdlib.safetensors")
  local k = st.read(FIX .. "ckpt_gpt_oss_tiny")
  -- mxfp4 experts: blocks (E, out, in/32, 16) + scales (E, out, in/32), U8
  local E, H, I = 4, 64, 64
  local u8 = 2 * (E * 2 * I * H // 2 + E * 2 * I * H // 32 + E * H * I // 2 + E * H * I // 32)
  local u8_seen = 0
  for _, d in ipairs(k.by_dtype) do if d.dtype == "U8" then u8_seen = d.bytes end end
  T.eq(u8_seen, u8)
  local path = FIX .. "ckpt_gpt_oss_tiny/config.json"
  local run = spec.normalize({ model = { config = path }, run = { mode = "inference", batch = 1,
    seq = 1, framework = "pytorch-cpu" } }, path, registry)
  local priced = step.run(run).live_by_category.weights
  T.eq(priced, k.bytes)
  T.ok(st.compare(k, count_cfg(vram.json.load(path), path), priced):find("^quantized: "))
end)

T.test("real configs count as their checkpoints", function()
  -- verbatim config.json files (tests/lua/fixtures/hf_configs/README.md
  -- names where each file and each published count come from)
  local want = {
    ["Qwen--Qwen3-235B-A22B"] = 235093634560,
    ["Qwen--Qwen3-Coder-480B-A35B-Instruct"] = 480154875392,
    ["mistralai--Mixtral-8x22B-v0.1"] = 140620634112,
    ["moonshotai--Kimi-K2-Instruct"] = 1026408232448,
    ["Qwen--Qwen3-VL-8B-Instruct"] = 8767123696,
    ["Qwen--Qwen3-VL-235B-A22B-Instruct"] = 235670022896,
    ["Qwen--Qwen3-VL-2B-Instruct"] = 2127532032, -- tied: the embedding held once
  }
  for name, total in pairs(want) do
    local path = FIX .. "hf_configs/" .. name .. ".json"
    local ok, r = pcall(count_cfg, vram.json.load(path), path)
    T.eq(ok and r.total, total, name)
  end
  -- written out from published config.json files, with the keys real files
  -- carry beside the shapes (routing, rope scaling, sliding windows)
  -- deepseek-ai/DeepSeek-V2: q_lora_rank 1536, 160 routed + 2 shared
  -- experts, the first layer dense; Hub total in index file 69468411049
  T.eq(count_cfg(cfg({ model_type = "deepseek_v2", vocab_size = 102400, hidden_size = 5120,
    intermediate_size = 12288, num_hidden_layers = 60, num_attention_heads = 128,
    num_key_value_heads = 128, q_lora_rank = 1536, kv_lora_rank = 512, qk_nope_head_dim = 128,
    qk_rope_head_dim = 64, v_head_dim = 128, moe_intermediate_size = 1536,
    n_routed_experts = 160, n_shared_experts = 2, num_experts_per_tok = 6,
    first_k_dense_replace = 1, moe_layer_freq = 1, n_group = 8, topk_group = 3,
    topk_method = "group_limited_greedy", routed_scaling_factor = 16.0, scoring_func = "softmax",
    aux_loss_alpha = 0.001, seq_aux = true, norm_topk_prob = false,
    rope_scaling = { type = "yarn", factor = 40, beta_fast = 32, beta_slow = 1, mscale = 0.707,
      mscale_all_dim = 0.707, original_max_position_embeddings = 4096 } }), "d").total,
    235741434880)
  -- allenai/Olmo-3-1025-7B: OLMo 2's layout with three sliding layers in
  -- four and a 100,278-token vocabulary; num_params=7298011136 in a
  -- training log (index file 53361820686), the same figure in 53524487476
  local lt = {}
  for i = 1, 32 do lt[i] = i % 4 == 0 and "full_attention" or "sliding_attention" end
  T.eq(count_cfg(cfg({ model_type = "olmo3", vocab_size = 100278, hidden_size = 4096,
    intermediate_size = 11008, num_hidden_layers = 32, num_attention_heads = 32,
    num_key_value_heads = 32, sliding_window = 4096, layer_types = lt,
    rope_scaling = { rope_type = "yarn", factor = 8.0, attention_factor = 1.2079441541679836,
      beta_fast = 32, beta_slow = 1, original_max_position_embeddings = 8192 } }), "o").total,
    7298011136)
  -- google/gemma-3-27b-it and -12b-it: the multimodal files name little
  -- beyond the shapes (Gemma3TextConfig defaults fill the rest); Hub totals
  -- from safetensors metadata in index file 70911651117
  local function gemma3(t)
    t.model_type, t.rope_scaling, t.sliding_window = "gemma3_text",
      { factor = 8.0, rope_type = "linear" }, 1024
    return { model_type = "gemma3", mm_tokens_per_image = 256, text_config = t,
      vision_config = { model_type = "siglip_vision_model", hidden_size = 1152,
        intermediate_size = 4304, num_hidden_layers = 27, num_attention_heads = 16,
        patch_size = 14, image_size = 896, vision_use_head = false } }
  end
  T.eq(count_cfg(gemma3({ head_dim = 128, hidden_size = 5376, intermediate_size = 21504,
    num_attention_heads = 32, num_hidden_layers = 62, num_key_value_heads = 16,
    query_pre_attn_scalar = 168 }), "g27").total, 27432406640)
  T.eq(count_cfg(gemma3({ hidden_size = 3840, intermediate_size = 15360,
    num_attention_heads = 16, num_hidden_layers = 48, num_key_value_heads = 8 }), "g12").total,
    12187325040)
  -- Qwen/Qwen2.5-VL-7B-Instruct (flat layout, mrope): n_parameters pinned to
  -- a revision in index file 56724970731
  T.eq(count_cfg({ model_type = "qwen2_5_vl", vocab_size = 152064, hidden_size = 3584,
    intermediate_size = 18944, num_hidden_layers = 28, num_attention_heads = 28,
    num_key_value_heads = 4, tie_word_embeddings = false, sliding_window = 32768,
    use_sliding_window = false, max_window_layers = 28,
    rope_scaling = { type = "mrope", mrope_section = { 16, 24, 24 } },
    vision_config = { depth = 32, hidden_act = "silu", hidden_size = 1280,
      intermediate_size = 3420, num_heads = 16, in_chans = 3, out_hidden_size = 3584,
      patch_size = 14, spatial_merge_size = 2, spatial_patch_size = 14, window_size = 112,
      fullatt_block_indexes = { 7, 15, 23, 31 }, tokens_per_second = 2,
      temporal_patch_size = 2 } }, "q").total, 8292166656)
end)

T.test("a ModelOpt checkpoint's hf_quant_config.json is not priced as bf16", function()
  -- nvidia/Llama-3.1-70B-Instruct-FP8: config.json has no quantization_config,
  -- hf_quant_config.json beside it says FP8 (both files verbatim from
  -- ai-dynamo/aiconfigurator's model_configs, snapshot 095f58a5)
  local path = FIX .. "modelopt_fp8/config.json"
  local function run(prec)
    return spec.normalize({ model = { config = path }, run = { mode = "inference", batch = 1,
      seq = 8, precision = prec } }, "s.yaml", registry)
  end
  T.raises(function() run({}) end, "config.json: quantization_config: absent, but "
    .. "hf_quant_config.json beside it quantizes the checkpoint (NVIDIA ModelOpt, quant_algo FP8)")
  T.ok(run({ dequantize = true }), "dequantize prices it unquantized")
  -- ModelOpt keys inside config.json (Qwen/Qwen3-32B-FP8-Static-PerTensor as
  -- aiconfigurator copies it: producer modelopt, quant_algo FP8, no
  -- quant_method) name the format instead of "quant_method: is required"
  local q = preset("qwen2_5_1_5b_instruct")
  q.quantization_config = { quant_algo = "FP8", kv_cache_scheme = "FP8", ignore = { "lm_head" },
    producer = { name = "modelopt", version = "0.31.0" },
    config_groups = { group_0 = { weights = { dynamic = false, num_bits = 8, type = "float" },
      input_activations = { dynamic = false, num_bits = 8, type = "float" } } } }
  local qp = T.tmpfile(vram.json.encode(q))
  T.raises(function()
    spec.normalize({ model = { config = qp }, run = { mode = "inference", batch = 1, seq = 8 } },
      "s.yaml", registry)
  end, "quantization_config.quant_algo: NVIDIA ModelOpt quantization (quant_algo FP8) is not "
    .. "modelled")
end)

T.test("files that are not safetensors are refused with the reason", function()
  T.raises(function() vram.json.safetensors_header(FIX .. "ckpt_qwen2_tiny/config.json") end,
    "config.json: not a safetensors file (header length")
  T.raises(function() vram.json.safetensors_header(FIX .. "ckpt_qwen2_tiny") end,
    "is a directory")
end)

-- VLMs, written out from each model's published config.json.
local VLMS = {
  qwen2_5_vl_3b = { model_type = "qwen2_5_vl", vocab_size = 151936, hidden_size = 2048,
    intermediate_size = 11008, num_hidden_layers = 36, num_attention_heads = 16,
    num_key_value_heads = 2, tie_word_embeddings = true,
    vision_config = { depth = 32, hidden_size = 1280, intermediate_size = 3420, num_heads = 16,
      out_hidden_size = 2048, patch_size = 14, spatial_merge_size = 2, temporal_patch_size = 2,
      window_size = 112, fullatt_block_indexes = { 7, 15, 23, 31 }, in_chans = 3 } },
  gemma_3_4b = { model_type = "gemma3", mm_tokens_per_image = 256,
    text_config = { model_type = "gemma3_text", hidden_size = 2560, intermediate_size = 10240,
      num_hidden_layers = 34, num_attention_heads = 8, num_key_value_heads = 4, head_dim = 256,
      vocab_size = 262208 },
    vision_config = { model_type = "siglip_vision_model", hidden_size = 1152,
      intermediate_size = 4304, num_hidden_layers = 27, num_attention_heads = 16,
      patch_size = 14, image_size = 896, vision_use_head = false } },
  -- llava-hf's text_config names little beyond the vocabulary: LlamaConfig
  -- defaults fill the rest
  -- InternVL2.5-1B's shapes in transformers' own format (InternVL3-1B-hf
  -- has the same): InternViT-300M, a 0.5 downsample, a Qwen2.5-0.5B text
  -- model with InternVL's 151,674-token vocabulary and an untied head
  internvl_1b_hf = { model_type = "internvl", downsample_ratio = 0.5,
    vision_config = { model_type = "internvl_vision", hidden_size = 1024,
      intermediate_size = 4096, num_hidden_layers = 24, num_attention_heads = 16,
      image_size = { 448, 448 }, patch_size = { 14, 14 }, attention_bias = true,
      use_qk_norm = false, norm_type = "layer_norm" },
    text_config = { model_type = "qwen2", vocab_size = 151674, hidden_size = 896,
      intermediate_size = 4864, num_hidden_layers = 24, num_attention_heads = 14,
      num_key_value_heads = 2, tie_word_embeddings = false } },
  -- SmolVLM-256M: SigLIP-B/16 at 512, pixel shuffle 4, SmolLM2-135M text
  smolvlm_256m = { model_type = "idefics3", scale_factor = 4,
    vision_config = { hidden_size = 768, intermediate_size = 3072, num_hidden_layers = 12,
      num_attention_heads = 12, image_size = 512, patch_size = 16 },
    text_config = { model_type = "llama", vocab_size = 49280, hidden_size = 576,
      intermediate_size = 1536, num_hidden_layers = 30, num_attention_heads = 9,
      num_key_value_heads = 3, tie_word_embeddings = false } },
  -- MiniCPM-V-2_6: the LLM's (Qwen2-7B) keys at the top level
  minicpm_v_2_6 = { model_type = "minicpmv", version = 2.6, query_num = 64,
    hidden_size = 3584, intermediate_size = 18944, num_hidden_layers = 28,
    num_attention_heads = 28, num_key_value_heads = 4, vocab_size = 151666,
    tie_word_embeddings = false, drop_vision_last_layer = false,
    slice_config = { max_slice_nums = 9, scale_resolution = 448, patch_size = 14 },
    vision_config = { model_type = "siglip", hidden_size = 1152, intermediate_size = 4304,
      num_hidden_layers = 27, num_attention_heads = 16, image_size = 980, patch_size = 14 } },
  llava_1_5_7b = { model_type = "llava", vision_feature_layer = -2,
    text_config = { model_type = "llama", vocab_size = 32064, max_position_embeddings = 4096 },
    vision_config = { model_type = "clip_vision_model", hidden_size = 1024,
      intermediate_size = 4096, num_hidden_layers = 24, num_attention_heads = 16,
      image_size = 336, patch_size = 14, projection_dim = 768 } },
}

T.test("VLMs match their published counts", function()
  -- Qwen/Qwen2.5-VL-3B-Instruct: n_parameters in a model registry entry
  -- pinned to a revision (index file 56724970731)
  local q = count_cfg(VLMS.qwen2_5_vl_3b, "q")
  T.eq(q.total, 3754622976)
  T.eq(q.tied_duplicate, 151936 * 2048) -- the tied Qwen2.5-3B embedding, held once
  -- google/gemma-3-4b-it: Hub safetensors total (index file 71142266638)
  T.eq(count_cfg(VLMS.gemma_3_4b, "g").total, 4300079472)
  -- llava-hf/llava-1.5-7b-hf: count_parameters asserted after building
  -- LlavaForConditionalGeneration from the config (index file 4065502446)
  T.eq(count_cfg(VLMS.llava_1_5_7b, "l").total, 7063427072)
  -- HuggingFaceTB/SmolVLM-256M: "params 256484928" in a run log (index file
  -- 70239433783); docling-project/SmolDocling-256M-preview, the same
  -- architecture, pinned at that count with its revision (58494106586)
  T.eq(count_cfg(VLMS.smolvlm_256m, "s").total, 256484928)
  -- openbmb/MiniCPM-V-2_6: Hub safetensors metadata, as listed in index file
  -- 12439498600
  T.eq(count_cfg(VLMS.minicpm_v_2_6, "mc").total, 8099175152)
  -- OpenGVLab/InternVL2_5-1B: Hub safetensors metadata, as listed in index
  -- file 12439498600
  T.eq(count_cfg(VLMS.internvl_1b_hf, "i").total, 938193024)
  -- the -hf vision switches that change the count keep their defaults in
  -- the published files; another value is refused
  for key, v in pairs({ use_mask_token = true, use_absolute_position_embeddings = false,
      use_mean_pooling = false }) do
    local c = vram.json.decode(vram.json.encode(VLMS.internvl_1b_hf))
    c.vision_config[key] = v
    T.raises(function() count_cfg(c, "i.json") end, "i.json: vision_config." .. key
      .. ": changes the parameter count")
  end
  -- Qwen/Qwen3-VL-30B-A3B-Instruct is a preset (test_models checks it):
  -- 31,070,754,032, paramCount in a provider's catalogue (index file 66729435508)
  local r = count_cfg(preset("qwen3_vl_30b_a3b_instruct"), "q3")
  T.eq(r.total, 31070754032)
  T.eq(part(r, "model.language_model.layers.experts"), 48 * 128 * 3 * 2048 * 768)
end)

-- meta-llama/Llama-3.2-11B-Vision-Instruct's shapes (its 8 aspect ratios
-- written as [1, 1]: only their number counts)
local function mllama_11b()
  local ratios = {}
  for i = 1, 8 do ratios[i] = { 1, 1 } end
  return { model_type = "mllama",
    vision_config = { hidden_size = 1280, intermediate_size = 5120, num_hidden_layers = 32,
      num_global_layers = 8, attention_heads = 16, image_size = 560, patch_size = 14,
      max_num_tiles = 4, supported_aspect_ratios = ratios, vision_output_dim = 7680,
      intermediate_layers_indices = { 3, 7, 15, 23, 30 } },
    text_config = { model_type = "mllama_text_model", vocab_size = 128256, hidden_size = 4096,
      intermediate_size = 14336, num_hidden_layers = 40, num_attention_heads = 32,
      num_key_value_heads = 8, cross_attention_layers = { 3, 8, 13, 18, 23, 28, 33, 38 } } }
end

-- The same, shortened for simulations: 4 text layers (cross-attention at
-- 1 and 3), 2 local + 1 global vision layers.
local function mllama_short()
  local c = mllama_11b()
  c.text_config.num_hidden_layers, c.text_config.cross_attention_layers = 4, { 1, 3 }
  c.vision_config.num_hidden_layers, c.vision_config.num_global_layers = 2, 1
  c.vision_config.intermediate_layers_indices = { 0 }
  c.vision_config.vision_output_dim = 2 * 1280
  return c
end

T.test("Llama 3.2 Vision: tiles, global layers and cross-attention layers", function()
  local c = mllama_11b()
  -- meta-llama/Llama-3.2-11B-Vision-Instruct: Hub safetensors metadata, as
  -- listed in index file 12439498600
  T.eq(count_cfg(c, "m").total, 10670220835)
  -- one <|image|> token per image; the text attends to 4 tiles x (40^2 + 1)
  -- vision states through the cross-attention layers
  local fam, typed = registry.find(c, "m")
  local t = fam.image_tokens(fam.read(typed, "m"))
  T.eq({ t.tokens, t.vision_tokens }, { 1, 4 * 1601 })
  -- the simulator, on the shortened model
  local path = T.tmpfile(vram.json.encode(mllama_short()))
  local function run(r)
    return spec.normalize({ model = { config = path }, run = r }, "spec.yaml", registry)
  end
  local peaks = {}
  for _, r in ipairs({ { mode = "train", batch = 1, seq = 32 },
    { mode = "train", batch = 1, seq = 32, lora = { rank = 4 } },
    { mode = "inference", batch = 1, seq = 32 },
    { mode = "generate", batch = 1, seq = 16, generate_tokens = 4 } }) do
    local ok, st = pcall(function() return step.run(run(r)) end)
    T.ok(ok and st.peak > 0, r.mode .. (r.lora and " lora" or "") .. ": "
      .. tostring(not ok and (type(st) == "table" and st.msg or st) or ""))
    peaks[#peaks + 1] = ok and st or nil
  end
  -- the run sees tiles x (patches + 1) states per image and its sequence
  -- holds the <|image|> tokens
  local r1 = run({ mode = "inference", batch = 1, seq = 32, images = { count = 2 } })
  T.eq({ r1.vlm.images, r1.vlm.tiles, r1.vlm.positions }, { 2, 4, 1601 })
  T.ok(step.run(r1).peak > peaks[3].peak, "a second image's tiles cost memory")
  -- generation caches each cross-attention layer's vision K and V: at
  -- decode they hold 2 layers x (k, v) x 6404 states x 8 heads x 128 x 2 B
  T.ok(peaks[4].phase_peaks.decode >= 2 * 2 * 6404 * 8 * 128 * 2, "cached vision K/V")
  -- with every layer checkpointed the segments read the vision states from
  -- outside (a real 11B config's train run with grad_checkpointing: full
  -- failed with "tape:backward: unknown or already freed tensor id"); the
  -- recomputation keeps less live than storing every layer's activations
  local ck = {}
  for _, gc in ipairs({ "full", "none" }) do
    local ok, st = pcall(function()
      return step.run(run({ mode = "train", batch = 1, seq = 32, grad_checkpointing = gc }))
    end)
    T.ok(ok, "checkpointing " .. gc .. ": " .. tostring(not ok and (type(st) == "table"
      and st.msg or st) or ""))
    ck[gc] = ok and st.phase_peaks.forward or nil
  end
  T.ok(ck.full and ck.none and ck.full < ck.none, "checkpointed forward keeps less")
  -- the language model alone skips its cross-attention layers
  local text = spec.normalize({ model = { config = path, text_only = true },
    run = { mode = "inference", batch = 1, seq = 32 } }, "spec.yaml", registry)
  T.ok(step.run(text).peak < peaks[3].peak)
end)

T.test("Idefics3 splits an image into tiles plus a global image", function()
  local fam, c = registry.find(VLMS.smolvlm_256m, "s")
  local m = fam.read(c, "s")
  -- SmolVLM-256M: 512-pixel tiles, longest edge 2048 (4 x 512); 1024 x 768
  -- -> 2048 x 1536 -> 4 x 3 tiles + the global image; (512/16)^2 / 4^2 = 64
  -- tokens per tile; per tile <fake><row_r_col_c> + 64, a "\n" per row,
  -- then "\n"<fake><global-img> + 64 + <fake>
  local t = fam.image_tokens(m, { height = 768, width = 1024 })
  T.eq({ t.rows, t.cols, t.tiles }, { 3, 4, 13 })
  T.eq(t.tokens, 12 * (64 + 2) + 3 + 64 + 4)
  -- an odd size: 1000 x 333 -> 2048 x int(2048 / (1000/333)) = 681, rounded
  -- up to even 682 -> ceil to 2048 x 1024: 2 x 4 tiles
  t = fam.image_tokens(m, { height = 333, width = 1000 })
  T.eq({ t.rows, t.cols }, { 2, 4 })
  -- a small image with the longest edge kept at one tile: no splitting
  t = fam.image_tokens(m, { height = 512, width = 512, longest_edge = 512 })
  T.eq({ t.tiles, t.tokens }, { 1, 64 + 3 })
end)

T.test("MiniCPM-V slices an image by its area and aspect", function()
  local fam, c = registry.find(VLMS.minicpm_v_2_6, "mc")
  local m = fam.read(c, "mc")
  -- 448 x 448: no slices; 1344 x 896 (6 x 448^2): grids of 5, 6 or 7
  -- slices, 3 x 2 matches the 3:2 aspect best -> 1 + 6 crops of 64 queries,
  -- each wrapped in two tokens, two rows joined by one "\n", and the
  -- <image_id>0</image_id> prefix of 2.6
  T.eq(fam.image_tokens(m, { height = 448, width = 448 }).crops, 1)
  local t = fam.image_tokens(m, { height = 896, width = 1344 })
  T.eq({ t.crops, t.grid[1], t.grid[2] }, { 7, 3, 2 })
  T.eq(t.tokens, 7 * 66 + 1 + 3)
  T.raises(function() count_cfg({ model_type = "minicpmv", version = 3.0,
    vision_config = VLMS.minicpm_v_2_6.vision_config }, "m.json") end,
    "m.json: version: MiniCPM-V version '3.0' is not modelled")
end)

T.test("LLaVA with a Pixtral tower runs at Pixtral's resolution", function()
  local c = { model_type = "llava", multimodal_projector_bias = true,
    text_config = { model_type = "mistral", vocab_size = 131072, hidden_size = 5120,
      intermediate_size = 14336, num_hidden_layers = 40, num_attention_heads = 32,
      num_key_value_heads = 8, head_dim = 128 },
    vision_config = { model_type = "pixtral", hidden_size = 1024, intermediate_size = 4096,
      num_hidden_layers = 24, num_attention_heads = 16, image_size = 1024, patch_size = 16 } }
  local run = run_of(c, 2, { mode = "inference", batch = 1, seq = 16,
    images = { count = 1, width = 1024, height = 512 } })
  -- 1024 x 512 at patch 16, no merge: a 32 x 64 patch grid
  T.eq(run.vision.grid_h * run.vision.grid_w, 32 * 64)
  T.ok(step.run(run).peak > 0)
end)

T.test("LLaVA-NeXT adds image_newline; Qwen2.5-VL's vision is gated and RMS-normed", function()
  local n = {}
  for k, v in pairs(VLMS.llava_1_5_7b) do n[k] = v end
  n.model_type = "llava_next"
  T.eq(count_cfg(n, "n").total - count_cfg(VLMS.llava_1_5_7b, "l").total, 4096)
  -- 32 blocks: two RMSNorms, qkv and proj with biases, gate/up/down with biases
  local D, I = 1280, 3420
  T.eq(part(count_cfg(VLMS.qwen2_5_vl_3b, "q"), "visual.blocks"), 32 * (2 * D + (3 * D * D + 3 * D)
    + (D * D + D) + 2 * (D * I + I) + (I * D + D)))
end)

T.test("VLM families run train, LoRA and inference", function()
  local all = { VLMS.qwen2_5_vl_3b, VLMS.gemma_3_4b, VLMS.llava_1_5_7b, VLMS.internvl_1b_hf,
    VLMS.smolvlm_256m, VLMS.minicpm_v_2_6,
    preset("qwen3_vl_30b_a3b_instruct") }
  for i, c in ipairs(all) do
    for _, r in ipairs({ { mode = "train", batch = 1, seq = 32 },
      { mode = "train", batch = 1, seq = 32, lora = { rank = 4 } },
      { mode = "inference", batch = 1, seq = 32 } }) do
      local ok, st = pcall(function() return step.run(run_of(c, 2, r)) end)
      T.ok(ok and st.peak > 0, ("%d %s%s: %s"):format(i, r.mode, r.lora and " lora" or "",
        tostring(not ok and (type(st) == "table" and st.msg or st) or "")))
    end
  end
end)

-- llava-hf/llava-onevision-qwen2-0.5b-ov-hf's shapes: SigLIP so400m at 384
-- without its head, a Qwen2-0.5B text model (tied)
local ONEVISION = { model_type = "llava_onevision", vision_feature_layer = -1,
  vision_feature_select_strategy = "full", vision_aspect_ratio = "anyres_max_9",
  vision_config = { model_type = "siglip_vision_model", hidden_size = 1152,
    intermediate_size = 4304, num_hidden_layers = 26, num_attention_heads = 16,
    image_size = 384, patch_size = 14, vision_use_head = false },
  text_config = { model_type = "qwen2", vocab_size = 152000, hidden_size = 896,
    intermediate_size = 4864, num_hidden_layers = 24, num_attention_heads = 14,
    num_key_value_heads = 2, tie_word_embeddings = true } }

T.test("LLaVA-NeXT and OneVision tile an image at any resolution", function()
  local n = {}
  for k, v in pairs(VLMS.llava_1_5_7b) do n[k] = v end
  n.model_type = "llava_next"
  local fam, c = registry.find(n, "n")
  local m = fam.read(c, "n")
  -- 1024 x 768 against LlavaNextConfig's pinpoints: 672 x 672 keeps the
  -- most pixels (672 x 504), 2 x 2 tiles of 336; the 48 x 48 patch grid is
  -- unpadded to 48 x (768 * 48 // 1024 = 36 rows): 1728 features + 36
  -- newlines + the 576-patch base image (+1 CLS, -1 for "default")
  local t = fam.image_tokens(m, { height = 768, width = 1024 })
  T.eq({ t.tiles, t.unpadded, t.newlines, t.tokens }, { 5, 1728, 36, 2340 })
  -- OneVision: 768 x 1152 (2 x 3 tiles of 384) holds the whole image with
  -- the least waste; the 54 x 81 grid unpadded to 54 x (81 - 2 * 4) = 73
  -- columns (new width 1024 * 54 / 768 = 72); sqrt(54 * 73 / (9 * 27^2)) <
  -- 1.1, so no downsampling: 729 + 3942 + 54
  fam, c = registry.find(ONEVISION, "ov")
  m = fam.read(c, "ov")
  t = fam.image_tokens(m, { height = 768, width = 1024 })
  T.eq({ t.tiles, t.unpadded, t.newlines, t.tokens }, { 7, 3942, 54, 4725 })
  -- a 4000 x 3000 photo: every pinpoint shrinks it; 2304 x 1728 pixels is
  -- the most kept (at 2304 wide), 1920 x 2304 wastes the least of those:
  -- 5 x 6 tiles, a 135 x 162 grid unpadded to 121 rows (3000 * 162 / 4000
  -- = 121.5 -> 121, padding 7); ratio sqrt(121 * 162 / 6561) = 1.7285 >
  -- 1.1: int(121 // 1.7285) x int(162 // 1.7285) = 70 x 93 + 70 newlines
  t = fam.image_tokens(m, { height = 3000, width = 4000 })
  T.eq({ t.tiles, t.unpadded, t.newlines }, { 31, 70 * 93, 70 })
  -- image_newline is one text-width row
  T.eq(part(count_cfg(ONEVISION, "ov"), "image_newline"), 896)
  -- the tower runs on every tile; the sequence holds the packed features
  for _, mode in ipairs({ "train", "inference" }) do
    local run = run_of(ONEVISION, 2, { mode = mode, batch = 1, seq = 16,
      images = { count = 1, width = 1024, height = 768 } })
    T.eq(run.vlm.images, 7)
    T.eq(run.vlm.tokens, 4725)
    T.ok(step.run(run).peak > 0)
  end
end)

T.test("a GPTQ checkpoint's weights: packed projections, bf16 embeddings, norms and head", function()
  local c = { model_type = "llama", hidden_size = 64, intermediate_size = 128,
    num_hidden_layers = 2, num_attention_heads = 4, vocab_size = 100,
    tie_word_embeddings = false,
    quantization_config = { quant_method = "gptq", bits = 4, group_size = 32 } }
  local run = run_of(c, 2, { mode = "inference", batch = 1, seq = 1,
    framework = "pytorch-cpu" }, true)
  -- one projection: qweight in*out/2, qzeros 4 x groups x out/8, fp16
  -- scales 2 x groups x out, g_idx 4 x in, with groups = in / 32
  local function gptq(out, inn)
    local g = inn // 32
    return inn * out // 2 + 4 * g * (out // 8) + 2 * g * out + 4 * inn
  end
  local layer = 4 * gptq(64, 64) + 2 * gptq(128, 64) + gptq(64, 128) + 2 * 64 * 2
  T.eq(step.run(run).live_by_category.weights, 100 * 64 * 2 + 2 * layer + 64 * 2 + 100 * 64 * 2)
end)

T.test("a spec may name its model by hub id or by its folder", function()
  -- no Hugging Face cache here: the preset that records the hub id answers
  local r = spec.normalize({ model = { config = "openai/gpt-oss-20b" },
    run = { mode = "inference", batch = 1, seq = 8 } }, vram.share_dir .. "/spec.yaml", registry)
  T.ok(r.config_path:find("examples/configs/gpt_oss_20b.json", 1, true), r.config_path)
  local d = spec.normalize({ model = { config = FIX .. "ckpt_qwen2_tiny" },
    run = { mode = "inference", batch = 1, seq = 8 } }, vram.share_dir .. "/spec.yaml", registry)
  T.eq(d.config_path, FIX .. "ckpt_qwen2_tiny/config.json")
end)

T.test("a sliding-window layer's cache keeps the window, not the sequence", function()
  local c = preset("gpt_oss_20b")
  c.sliding_window = 16
  local r = { mode = "generate", batch = 1, seq = 256, generate_tokens = 64,
    framework = "pytorch-cpu" }
  local slide = step.run(run_of(c, 2, r)) -- layer 0 slides, layer 1 attends to all
  c.layer_types = { "full_attention", "full_attention" }
  local full = step.run(run_of(c, 2, r))
  -- by the last step the full layer 0 holds 256 + 63 tokens of K and V,
  -- the sliding one 15 (plus the step's own)
  T.ok(slide.phase_peaks.decode < full.phase_peaks.decode, "decode peaks")
  T.eq(slide.phase_peaks.prefill, full.phase_peaks.prefill) -- prefill keeps every token
end)

T.test("Qwen2.5-VL's windowed vision blocks price attention per window", function()
  local function copy(full)
    local c, vc = {}, {}
    for k, v in pairs(VLMS.qwen2_5_vl_3b) do c[k] = v end
    for k, v in pairs(c.vision_config) do vc[k] = v end
    vc.fullatt_block_indexes, c.vision_config = full, vc
    return c
  end
  -- 448 x 644 px: 32 x 46 patches, 16 x 23 merged tokens, windows of
  -- 112 / 2 / 14 = 4 merged tokens a side (get_window_index): 4 x 5 whole
  -- windows of 64 patches, a last column of 4 windows 4 x 3 (48 patches)
  local img = { count = 1, width = 644, height = 448 }
  local fam, c = registry.find(copy({ 7, 15, 23, 31 }), "q")
  local d = fam.simulator(fam.read(c, "q"), img)
  T.eq(d.vision.grid_h * d.vision.grid_w, 32 * 46)
  T.eq(d.vision.windows[1].count, 20)
  T.eq(d.vision.windows[1].size, 64)
  T.eq(d.vision.windows[2].count, 4)
  T.eq(d.vision.windows[2].size, 48)
  T.eq(#d.vision.windows, 2)
  -- training saves each layer's bf16 attention probabilities: the 28
  -- windowed blocks hold 16 heads x (64^2 x 20 + 48^2 x 4) scores instead
  -- of 16 x 1472^2, so making every block full attention costs at least
  -- that difference
  local r = { mode = "train", batch = 1, seq = 16, images = img }
  local all = {}
  for i = 0, 31 do all[#all + 1] = i end
  local win = step.run(run_of(copy({ 7, 15, 23, 31 }), 2, r)).peak
  local full = step.run(run_of(copy(all), 2, r)).peak
  T.ok(full - win >= 28 * 16 * (1472 ^ 2 - (64 ^ 2 * 20 + 48 ^ 2 * 4)) * 2,
    ("%d -> %d"):format(win, full))
  T.raises(function() run_of(copy({ 32 }), 2, r) end,
    "vision_config.fullatt_block_indexes[1]: must be a block index 0..31")
end)

T.test("a quantized VLM checkpoint prices its language model packed", function()
  local c = {}
  for k, v in pairs(VLMS.qwen2_5_vl_3b) do c[k] = v end
  local r = { mode = "inference", batch = 1, seq = 8, framework = "pytorch-cpu" }
  local plain = step.run(run_of(c, 2, r)).live_by_category.weights
  c.quantization_config = { quant_method = "awq", bits = 4, group_size = 128 }
  local packed = step.run(run_of(c, 2, r, true)).live_by_category.weights
  -- 2 layers of Qwen2.5-3B projections (q 2048x2048, k/v 256x2048, o,
  -- gate/up 11008x2048, down): bf16 vs AWQ's qweight, qzeros and scales
  local function awq(out, inn)
    local g = inn // 128
    return inn * out // 2 + 4 * g * (out // 8) + 2 * g * out
  end
  local shapes = { { 2048, 2048 }, { 256, 2048 }, { 256, 2048 }, { 2048, 2048 },
    { 11008, 2048 }, { 11008, 2048 }, { 2048, 11008 } }
  local saved = 0
  for _, s in ipairs(shapes) do saved = saved + 2 * s[1] * s[2] - awq(s[1], s[2]) end
  T.eq(plain - packed, 2 * saved)
  c.quantization_config = { quant_method = "bitsandbytes", load_in_4bit = true }
  T.raises(function() run_of(c, 2, r, true) end, "bitsandbytes quantizes the vision tower too")
end)

T.test("every registered model_type runs estimate in train, LoRA and inference", function()
  local function with_type(c, mt)
    local n = {}
    for k, v in pairs(c) do n[k] = v end
    n.model_type = mt
    return n
  end
  local configs = {}
  for _, p in ipairs(registry.PRESETS) do
    local c = preset(p.name)
    configs[c.model_type] = configs[c.model_type] or c
  end
  for _, c in pairs(CONFIGS) do configs[c.model_type] = configs[c.model_type] or c end
  for _, c in pairs(VLMS) do configs[c.model_type] = configs[c.model_type] or c end
  configs.llava_onevision, configs.mllama = ONEVISION, mllama_short()
  -- model_types read as a sibling's: the sibling's config relabelled, or
  -- the language model inside a VLM preset
  configs.olmo3 = with_type(CONFIGS.olmo_2_7b, "olmo3")
  configs.glm4 = with_type(CONFIGS.glm_4_9b, "glm4")
  configs.llava_next = with_type(VLMS.llava_1_5_7b, "llava_next")
  configs.smolvlm = with_type(VLMS.smolvlm_256m, "smolvlm")
  configs.internlm2 = preset("internvl2_2b").llm_config
  configs.gemma = preset("paligemma_3b_mix_224").text_config
  configs.siglip_vision_model = preset("siglip2_so400m_patch16_512").vision_config
  -- the one family counted only: SigLIP's contrastive text + vision model
  local counted_only = { siglip = true, siglip_vision_model = true }
  for _, f in ipairs(registry.FAMILIES) do
    for _, mt in ipairs(f.model_types) do
      local c = configs[mt]
      T.ok(c ~= nil, mt .. ": no config to run")
      if counted_only[mt] then
        T.raises(function() run_of(c, 2, { mode = "inference", batch = 1, seq = 16 }) end,
          "has no simulator yet")
        c = nil
      end
      for _, r in ipairs(c and { { mode = "train", batch = 1, seq = 16 },
        { mode = "train", batch = 1, seq = 16, lora = { rank = 4 } },
        { mode = "inference", batch = 1, seq = 16 } } or {}) do
        local ok, st = pcall(function()
          return step.run(run_of(c, mt == "mllama" and 4 or 2, r))
        end)
        T.ok(ok and st.peak > 0, ("%s %s%s: %s"):format(mt, r.mode, r.lora and " lora" or "",
          tostring(not ok and (type(st) == "table" and st.msg or st) or "")))
      end
    end
  end
end)

T.test("Phi-3.5-MoE's experts are w1/w3/w2, as LoRA targets name them", function()
  -- PhimoeBlockSparseTop2MLP's modules; 2 layers x 16 experts x rank 2 x
  -- (in + out) of w1, w3 (4096 -> 6400) and w2 (6400 -> 4096)
  local st = step.run(run_of(CONFIGS.phi_3_5_moe, 2, { mode = "train", batch = 1, seq = 8,
    lora = { rank = 2, targets = { "w1", "w2", "w3" } } }))
  T.eq(st.trainable_count, 2 * 16 * 2 * 3 * (4096 + 6400))
  T.raises(function() step.run(run_of(CONFIGS.phi_3_5_moe, 2, { mode = "train", batch = 1,
    seq = 8, lora = { rank = 2, targets = { "gate_proj" } } })) end, "no module named 'gate_proj'")
end)

T.test("Phi-3.5-MoE's input jitter keeps one random tensor per layer in training, none in inference", function()
  -- PhimoeSparseMoeBlock.forward, training: hidden_states *= empty_like(
  -- hidden_states).uniform_(...) in place; MulBackward saves the random
  -- tensor (its partner requires grad), nothing else is allocated. By hand:
  -- 4 layers x 8 rows x 4096 hidden x 2 bytes (bf16) = 262144 bytes, each
  -- 65536 a whole number of 512 B blocks
  local function step_of(mode, noise, tokens, ckpt)
    local c = {}
    for k, v in pairs(CONFIGS.phi_3_5_moe) do c[k] = v end
    c.input_jitter_noise = noise
    return step.run(run_of(c, 4, { mode = mode, batch = 1, seq = 8, generate_tokens = tokens,
      grad_checkpointing = ckpt, precision = { params = "bf16" } }))
  end
  local function gen(noise) return step_of("generate", noise, 2).peak end
  local on, off = step_of("train", 0.01), step_of("train", 0.0)
  T.eq(on.phase_end.forward_end - off.phase_end.forward_end, 4 * 8 * 4096 * 2)
  T.eq(on.phase_end.backward_end, off.phase_end.backward_end, "the backward lets the noise go")
  -- checkpointed layers: the forward runs under no_grad, the noise dies at once
  T.eq(step_of("train", 0.01, nil, "full").phase_end.forward_end,
    step_of("train", 0.0, nil, "full").phase_end.forward_end, "checkpointed: nothing kept")
  T.eq(step_of("inference", 0.01).peak, step_of("inference", 0.0).peak, "inference: no jitter")
  T.eq(gen(0.01), gen(0.0), "generation: no jitter")
end)

T.test("a VLM's MoE language model runs the experts and the aux loss the run asks for", function()
  -- Qwen3-VL-MoE was simulated with the expert loop whatever run.moe said
  -- (models/siq_vlm.lua never passed it on). The same decoder alone, over as
  -- many rows as the VLM's sequence (64 text + 64 image tokens: 256 px /
  -- 16 px patches = 16, merged 2 x 2 -> 8 x 8), must move by the same bytes
  -- at the end of the forward when the implementation or the aux loss changes.
  local c = preset("qwen3_vl_30b_a3b_instruct")
  c.text_config.num_hidden_layers, c.text_config.num_experts = 2, 8
  c.text_config.num_experts_per_tok = 2
  c.vision_config.depth, c.vision_config.deepstack_visual_indexes = 4, { 1, 2, 3 }
  local path = T.tmpfile(vram.json.encode(c))
  local function fwd_end(text_only, m)
    local run = { mode = "train", batch = 1, seq = text_only and 128 or 64, moe = m,
      precision = { params = "bf16" } }
    if not text_only then run.images = { count = 1, width = 256, height = 256 } end
    return step.run(spec.normalize({ model = { config = path, text_only = text_only },
      run = run }, "s.yaml", registry)).phase_end.forward_end
  end
  local vlm_grouped, vlm_aux
  for _, text_only in ipairs({ false, true }) do
    local loop = fwd_end(text_only, { impl = "loop" })
    local grouped = fwd_end(text_only, { impl = "grouped" }) - loop
    local aux = fwd_end(text_only, { impl = "loop", aux_loss = true }) - loop
    T.ok(grouped ~= 0 and aux > 0, (text_only and "decoder alone" or "VLM") .. ": the knobs change the step")
    if text_only then
      T.eq(grouped, vlm_grouped, "grouped experts: the VLM's change")
      T.eq(aux, vlm_aux, "aux loss: the VLM's change")
    end
    vlm_grouped, vlm_aux = grouped, aux
  end
end)

T.test("an MoE step whose expert loop leaves experts idle trains, as when every layer is walked", function()
  -- 1 x 3 rows x top-8 over 128 experts: 104 experts get no token, so their
  -- weights get no gradient; composing the layers raised "composed layers
  -- did not repeat the simulated layer's pattern" from the tape
  local c = preset("qwen3_30b_a3b")
  c.num_hidden_layers = 6
  local path = T.tmpfile(vram.json.encode(c))
  for _, r in ipairs({ { seq = 3 }, { seq = 3, grad_checkpointing = 2 }, { seq = 7, batch = 2 } }) do
    local function run(compose)
      local x = spec.normalize({ model = { config = path }, run = { mode = "train",
        batch = r.batch or 1, seq = r.seq, grad_checkpointing = r.grad_checkpointing } },
        "s.yaml", registry)
      x.compose = compose
      return step.run(x)
    end
    local walked, st = run(false), run(nil)
    T.eq(st.peak, walked.peak, "seq " .. r.seq)
    T.eq(st.phase_end.backward_end, walked.phase_end.backward_end, "seq " .. r.seq)
  end
end)
