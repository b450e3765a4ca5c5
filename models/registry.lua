-- Which family module reads a Hugging Face config.json, found by its
-- `model_type` (then its `architectures`), the simulator modules of the
-- measured-case dialect (tests/truth), and the presets shipped in
-- examples/configs/ (the sandbox cannot list directories, so they are
-- listed here). This file only lists modules: what a family exports is the
-- contract in models/README.md, and nothing outside a family's own module
-- branches on its name. Callers (scripts/cli, recipes) resolve a family
-- here and hand it, or this registry, to stdlib, which never requires
-- models/.
local errors = require("stdlib.errors")

local R = {}

R.FAMILIES = {
  { module = "models.decoder_lm", model_types = { "llama", "mistral", "qwen2", "qwen3" },
    architectures = { "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
      "Qwen3ForCausalLM" } },
  { module = "models.phi3", model_types = { "phi3" },
    architectures = { "Phi3ForCausalLM" } },
  { module = "models.gemma2", model_types = { "gemma2" },
    architectures = { "Gemma2ForCausalLM" } },
  { module = "models.gemma3_text", model_types = { "gemma3_text" },
    architectures = { "Gemma3ForCausalLM" } },
  { module = "models.olmo2", model_types = { "olmo2", "olmo3" },
    architectures = { "Olmo2ForCausalLM", "Olmo3ForCausalLM" } },
  { module = "models.glm", model_types = { "glm", "glm4" },
    architectures = { "GlmForCausalLM", "Glm4ForCausalLM" } },
  { module = "models.mixtral", model_types = { "mixtral" },
    architectures = { "MixtralForCausalLM" } },
  { module = "models.qwen2_moe", model_types = { "qwen2_moe" },
    architectures = { "Qwen2MoeForCausalLM" } },
  { module = "models.qwen3_moe", model_types = { "qwen3_moe" },
    architectures = { "Qwen3MoeForCausalLM" } },
  { module = "models.olmoe", model_types = { "olmoe" },
    architectures = { "OlmoeForCausalLM" } },
  { module = "models.deepseek", model_types = { "deepseek_v2", "deepseek_v3" },
    architectures = { "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM" } },
  { module = "models.deepseek_moe", model_types = { "deepseek" },
    architectures = { "DeepseekForCausalLM" } },
  { module = "models.glm4_moe", model_types = { "glm4_moe", "glm4_moe_lite" },
    architectures = { "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM" } },
  { module = "models.phimoe", model_types = { "phimoe" },
    architectures = { "PhimoeForCausalLM", "PhiMoEForCausalLM" } },
  { module = "models.gpt_oss", model_types = { "gpt_oss" },
    architectures = { "GptOssForCausalLM" } },
  { module = "models.internlm2", model_types = { "internlm2" },
    architectures = { "InternLM2ForCausalLM" } },
  { module = "models.gemma", model_types = { "gemma" }, architectures = { "GemmaForCausalLM" } },
  { module = "models.qwen2_vl", model_types = { "qwen2_vl" },
    architectures = { "Qwen2VLForConditionalGeneration" } },
  { module = "models.qwen3_vl", model_types = { "qwen3_vl", "qwen3_vl_moe" },
    architectures = { "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration" } },
  { module = "models.internvl_hf", model_types = { "internvl" },
    architectures = { "InternVLForConditionalGeneration" } },
  { module = "models.qwen2_5_vl", model_types = { "qwen2_5_vl" },
    architectures = { "Qwen2_5_VLForConditionalGeneration" } },
  { module = "models.gemma3", model_types = { "gemma3" },
    architectures = { "Gemma3ForConditionalGeneration" } },
  { module = "models.llava", model_types = { "llava", "llava_next", "llava_onevision" },
    architectures = { "LlavaForConditionalGeneration", "LlavaNextForConditionalGeneration",
      "LlavaOnevisionForConditionalGeneration" } },
  { module = "models.idefics3", model_types = { "idefics3", "smolvlm" },
    architectures = { "Idefics3ForConditionalGeneration", "SmolVLMForConditionalGeneration" } },
  { module = "models.minicpmv", model_types = { "minicpmv" }, architectures = { "MiniCPMV" } },
  { module = "models.mllama", model_types = { "mllama" },
    architectures = { "MllamaForConditionalGeneration" } },
  { module = "models.internvl", model_types = { "internvl_chat" },
    architectures = { "InternVLChatModel" } },
  { module = "models.paligemma", model_types = { "paligemma" },
    architectures = { "PaliGemmaForConditionalGeneration" } },
  { module = "models.siglip_model", model_types = { "siglip", "siglip_vision_model" },
    architectures = { "SiglipModel", "SiglipVisionModel" } },
  { module = "models.mistral3", model_types = { "mistral3" },
    architectures = { "Mistral3ForConditionalGeneration" } },
  { module = "models.yxanul", model_types = { "yxanul" }, architectures = { "YxanulForCausalLM" } },
}

-- Hugging Face model_types known and not modelled, each with what is
-- missing: `find` says so instead of a did-you-mean toward a family that
-- would miscount them.
R.UNMODELLED = {
  qwen3_next = "Qwen3-Next's Gated DeltaNet linear-attention layers (layer_types "
    .. "'linear_attention': in_proj_qkvz, in_proj_ba, a causal conv1d, dt_bias, A_log, a gated "
    .. "RMSNorm, out_proj, and their recurrent state in place of a KV cache) and its gated full "
    .. "attention (q_proj twice as wide, for an output gate) are not modelled",
  gemma3n = "Gemma 3n's MatFormer decoder (AltUp over altup_num_inputs streams, Laurel "
    .. "blocks, per-layer input embeddings of hidden_size_per_layer_input, KV sharing across "
    .. "layers) and its MobileNet-v5 vision and USM audio towers are not modelled",
  gemma3n_text = "Gemma 3n's MatFormer decoder (AltUp over altup_num_inputs streams, Laurel "
    .. "blocks, per-layer input embeddings of hidden_size_per_layer_input, KV sharing across "
    .. "layers) is not modelled",
  minicpm = "MiniCPM's (remote code) scaled embeddings and residuals (scale_emb, "
    .. "scale_depth, dim_model_base) and MiniCPM-MoE's experts (num_experts) are not modelled",
}

-- The measured-case dialect's `family` field (tests/truth: decoder, vit,
-- vlm) names a simulator module directly; each exports case(cfg, where).
R.TRUTH = { decoder = "models.causal_lm", vit = "models.siglip_classifier",
  vlm = "models.siq_vlm" }

-- Presets in examples/configs/<name>.json with the parameter count each
-- model's publisher (or its safetensors header) gives. `hf` lists every hub
-- id whose config.json has the same shapes (layers, widths, heads, vocabulary,
-- tying): the one the file came from first, then base/instruct/thinking
-- variants; stdlib/resolve.lua finds a preset by any of them. `verbatim` tells
-- whether the file is the published config.json unchanged; see
-- examples/configs/README.md.
R.PRESETS = {
  { name = "qwen2_5_1_5b_instruct", hf = { "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-1.5B" },
    verbatim = true,
    published = 1543714304 },
  { name = "qwen2_5_7b_instruct", hf = { "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B" },
    verbatim = true,
    published = 7615616512 },
  { name = "qwen3_4b_instruct_2507", hf = { "Qwen/Qwen3-4B-Instruct-2507",
    "Qwen/Qwen3-4B-Thinking-2507" }, verbatim = false,
    published = 4022468096 },
  { name = "llama_3_8b", hf = { "meta-llama/Meta-Llama-3-8B",
    "meta-llama/Meta-Llama-3-8B-Instruct", "NousResearch/Meta-Llama-3-8B" }, verbatim = true,
    published = 8030261248 },
  { name = "mistral_7b_v0_1", hf = { "mistralai/Mistral-7B-v0.1",
    "mistralai/Mistral-7B-Instruct-v0.1" }, verbatim = true,
    published = 7241732096 },
  { name = "qwen2_vl_2b_instruct", hf = { "Qwen/Qwen2-VL-2B-Instruct", "Qwen/Qwen2-VL-2B" },
    verbatim = true,
    published = 2208985600 },
  { name = "qwen3_vl_4b_instruct", hf = { "Qwen/Qwen3-VL-4B-Instruct",
    "Qwen/Qwen3-VL-4B-Thinking" }, verbatim = true,
    published = 4437815808 },
  { name = "internvl2_2b", hf = { "OpenGVLab/InternVL2-2B" }, verbatim = false,
    published = 2205754368 },
  { name = "internvl3_2b", hf = { "OpenGVLab/InternVL3-2B" }, verbatim = false,
    published = 2088957440 },
  { name = "paligemma_3b_mix_224", hf = { "google/paligemma-3b-mix-224",
    "google/paligemma-3b-pt-224" }, verbatim = false,
    published = 2923466480 },
  { name = "siglip2_so400m_patch16_512", hf = { "google/siglip2-so400m-patch16-512" },
    verbatim = false, published = 1136555698 },
  { name = "mistral_small_3_1_24b_instruct_2503",
    hf = { "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
      "mistralai/Mistral-Small-3.1-24B-Base-2503" }, verbatim = true,
    published = 24011361280 },
  -- MoE presets: published counts and their sources in examples/configs/README.md
  { name = "mixtral_8x7b_v0_1", hf = { "mistralai/Mixtral-8x7B-v0.1",
    "mistralai/Mixtral-8x7B-Instruct-v0.1" }, verbatim = true, published = 46702792704 },
  { name = "qwen3_30b_a3b", hf = { "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B-Base" },
    verbatim = true, published = 30532122624 },
  { name = "qwen3_30b_a3b_fp8", hf = { "Qwen/Qwen3-30B-A3B-FP8" }, verbatim = true,
    published = 30532122624 },
  { name = "deepseek_v3", hf = { "deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3-Base" },
    verbatim = true, published = 671026419200 },
  { name = "gpt_oss_20b", hf = { "openai/gpt-oss-20b" }, verbatim = true,
    published = 20914757184 },
  { name = "gpt_oss_120b", hf = { "openai/gpt-oss-120b" }, verbatim = true,
    published = 116829156672 },
  { name = "qwen3_vl_30b_a3b_instruct", hf = { "Qwen/Qwen3-VL-30B-A3B-Instruct",
    "Qwen/Qwen3-VL-30B-A3B-Thinking" }, verbatim = true, published = 31070754032 },
  { name = "yxanul_197m", hf = {} --[[ no Hub repository; yxanul/yxanul_0.6B on GitHub ]],
    verbatim = false, published = nil },
}

function R.preset(name)
  for _, p in ipairs(R.PRESETS) do
    if p.name == name then return p end
  end
end

function R.preset_path(name)
  return "examples/configs/" .. name .. ".json"
end

local by_type, by_arch = {}, {}
for _, f in ipairs(R.FAMILIES) do
  for _, k in ipairs(f.model_types) do by_type[k] = f end
  for _, k in ipairs(f.architectures) do by_arch[k] = f end
end

-- Every family: {name, about, model_types, module} in registry order.
function R.list()
  local out = {}
  for i, f in ipairs(R.FAMILIES) do
    local mod = require(f.module)
    out[i] = { name = mod.name, about = mod.about, model_types = f.model_types,
      module = f.module, family = mod }
  end
  return out
end

-- "decoder (llama, mistral, qwen2, qwen3), internlm2 (internlm2), ..."
function R.known()
  local out = {}
  for _, f in ipairs(R.list()) do
    out[#out + 1] = f.name .. " (" .. table.concat(f.model_types, ", ") .. ")"
  end
  return table.concat(out, "; ")
end

-- A copy of cfg with model_type set.
local function typed(cfg, mt)
  local copy = {}
  for k, v in pairs(cfg) do copy[k] = v end
  copy.model_type = mt
  return copy
end

-- The family module for a config table, and the config as the family reads
-- it: found by architecture, a copy with the model_type that architecture
-- names (the lists are parallel). where: the file, for errors.
function R.find(cfg, where)
  if type(cfg) ~= "table" then errors.input(where, "", "a config must be a JSON object") end
  local mt = cfg.model_type
  if type(mt) == "string" and by_type[mt] then return require(by_type[mt].module), cfg end
  local archs = type(cfg.architectures) == "table" and cfg.architectures or {}
  for _, a in ipairs(archs) do
    local f = by_arch[a]
    if f then
      for i, x in ipairs(f.architectures) do
        if x == a then
          return require(f.module), typed(cfg, f.model_types[i] or f.model_types[1])
        end
      end
    end
  end
  if type(mt) == "string" and R.UNMODELLED[mt] then
    errors.input(where or "config", "model_type", ("'%s' is known but not modelled: %s")
      :format(mt, R.UNMODELLED[mt]))
  end
  local what
  if type(mt) == "string" then
    what = ("unknown model_type '%s'"):format(mt)
  elseif archs[1] then
    what = ("no model_type, and unknown architectures '%s'"):format(tostring(archs[1]))
  else
    what = "no model_type or architectures to pick a model family by"
  end
  local names = {}
  for _, f in ipairs(R.FAMILIES) do
    for _, k in ipairs(f.model_types) do names[#names + 1] = k end
  end
  local hint = type(mt) == "string" and errors.suggest(mt, names)
  if hint then
    -- never a hint to a family that does not model keys of this config that
    -- change the count (it would refuse them: a Mixtral config is no mistral)
    local fam = require(by_type[hint].module)
    local ok, err = pcall(function() return fam.params(fam.read(typed(cfg, hint), where)) end)
    local msg = not ok and (type(err) == "table" and err.msg or tostring(err)) or ""
    if msg:find("changes the parameter count", 1, true) then hint = nil end
  end
  errors.input(where or "config", "model_type", what
    .. (hint and ("; did you mean '" .. hint .. "'?") or "")
    .. ". Known families: " .. R.known()
    .. ". To add one, add models/<name>.lua and register it in models/registry.lua")
end

-- The decoder description of a text model_type (models/decoder_lm.lua
-- says what it holds), from the family module registered for it; nil when
-- that family has no decoder of this model_type.
function R.decoder(mt)
  local f = by_type[mt]
  local decoders = f and require(f.module).decoders
  return decoders and decoders[mt]
end

-- Every model_type with a decoder description, in registry order.
function R.decoder_types()
  local out = {}
  for _, f in ipairs(R.FAMILIES) do
    for _, mt in ipairs(f.model_types) do
      if R.decoder(mt) then out[#out + 1] = mt end
    end
  end
  return out
end

-- The simulator module of a measured case's family, or nil.
function R.truth(name)
  local mod = R.TRUTH[name]
  return mod and require(mod)
end

return R
