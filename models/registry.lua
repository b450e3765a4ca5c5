-- Which family file counts a Hugging Face config.json, found by its
-- `model_type` (then its `architectures`), and the presets shipped in
-- examples/configs/ (the sandbox cannot list directories, so they are
-- listed here).
--
-- A family is a module in models/ that exports `count(cfg, where)`
-- returning { parts = {{name=, params=, tower=, note=}...}, tied_duplicate= }
-- (entry.fn names another function of the module), or, like
-- models/decoder.lua, `normalize(cfg, where)` + `params(m)`.
-- To add a family: add models/<name>.lua and register it in FAMILIES below.
local errors = require("stdlib.errors")

local R = {}

R.FAMILIES = {
  { name = "decoder", module = "models.decoder",
    model_types = { "llama", "mistral", "qwen2", "qwen3" },
    architectures = { "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
      "Qwen3ForCausalLM" },
    about = "decoder-only LMs: Llama, Mistral, Qwen2/2.5, Qwen3 (models/decoder.lua)" },
  { name = "phi3", module = "models.decoder", model_types = { "phi3" },
    architectures = { "Phi3ForCausalLM" },
    about = "Phi-3/3.5/4: fused qkv_proj and gate_up_proj (models/decoder.lua)" },
  { name = "gemma2", module = "models.decoder", model_types = { "gemma2" },
    architectures = { "Gemma2ForCausalLM" },
    about = "Gemma 2: sandwich norms, (1+w) RMSNorm, soft-capping (models/decoder.lua)" },
  { name = "gemma3_text", module = "models.decoder", model_types = { "gemma3_text" },
    architectures = { "Gemma3ForCausalLM" },
    about = "Gemma 3 text: Gemma 2 layout plus per-head q/k norms (models/decoder.lua)" },
  { name = "olmo2", module = "models.decoder", model_types = { "olmo2", "olmo3" },
    architectures = { "Olmo2ForCausalLM", "Olmo3ForCausalLM" },
    about = "OLMo 2/3: post-norms only, full-width q/k norms (models/decoder.lua)" },
  { name = "glm", module = "models.decoder", model_types = { "glm", "glm4" },
    architectures = { "GlmForCausalLM", "Glm4ForCausalLM" },
    about = "GLM-4 (-hf): q/k/v bias, fused gate_up; glm4 with four norms (models/decoder.lua)" },
  { name = "mixtral", module = "models.decoder", model_types = { "mixtral" },
    architectures = { "MixtralForCausalLM" },
    about = "Mixtral MoE: top-k of num_local_experts SwiGLU experts (models/decoder.lua)" },
  { name = "qwen2_moe", module = "models.decoder", model_types = { "qwen2_moe" },
    architectures = { "Qwen2MoeForCausalLM" },
    about = "Qwen1.5/2-MoE: routed + gated shared expert (models/decoder.lua)" },
  { name = "qwen3_moe", module = "models.decoder", model_types = { "qwen3_moe" },
    architectures = { "Qwen3MoeForCausalLM" },
    about = "Qwen3-MoE: routed experts, per-head q/k norms (models/decoder.lua)" },
  { name = "olmoe", module = "models.decoder", model_types = { "olmoe" },
    architectures = { "OlmoeForCausalLM" },
    about = "OLMoE: routed experts, full-width q/k norms (models/decoder.lua)" },
  { name = "deepseek", module = "models.decoder", model_types = { "deepseek_v2", "deepseek_v3" },
    architectures = { "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM" },
    about = "DeepSeek-V2/V3: MLA, first-k dense layers, shared + routed experts "
      .. "(models/decoder.lua)" },
  { name = "gpt_oss", module = "models.decoder", model_types = { "gpt_oss" },
    architectures = { "GptOssForCausalLM" },
    about = "gpt-oss: attention sinks, fused biased experts, mxfp4 (models/decoder.lua)" },
  { name = "internlm2", module = "models.internvl", fn = "count_internlm2",
    model_types = { "internlm2" }, architectures = { "InternLM2ForCausalLM" },
    about = "InternLM2 (fused wqkv), the LLM of InternVL2 (models/internvl.lua)" },
  { name = "gemma", module = "models.paligemma", fn = "count_gemma",
    model_types = { "gemma" }, architectures = { "GemmaForCausalLM" },
    about = "Gemma 1 decoder, PaliGemma's LLM (models/paligemma.lua)" },
  { name = "qwen2_vl", module = "models.qwen2_vl",
    model_types = { "qwen2_vl" }, architectures = { "Qwen2VLForConditionalGeneration" },
    about = "Qwen2-VL: ViT (Conv3d patch 14) + PatchMerger + Qwen2 (models/qwen2_vl.lua)" },
  { name = "qwen3_vl", module = "models.qwen3_vl",
    model_types = { "qwen3_vl", "qwen3_vl_moe" },
    architectures = { "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration" },
    about = "Qwen3-VL: ViT (patch 16) + merger + DeepStack mergers + Qwen3 (models/qwen3_vl.lua)" },
  { name = "qwen2_5_vl", module = "models.qwen2_vl", fn = "count_2_5",
    model_types = { "qwen2_5_vl" }, architectures = { "Qwen2_5_VLForConditionalGeneration" },
    about = "Qwen2.5-VL: ViT (RMSNorm, gated MLP, windowed attention) + PatchMerger + Qwen2 "
      .. "(models/qwen2_vl.lua)" },
  { name = "gemma3", module = "models.paligemma", fn = "count_gemma3",
    model_types = { "gemma3" }, architectures = { "Gemma3ForConditionalGeneration" },
    about = "Gemma 3 multimodal: SigLIP + pooled projector + Gemma 3 text (models/paligemma.lua)" },
  { name = "llava", module = "models.llava",
    model_types = { "llava", "llava_next", "llava_onevision" },
    architectures = { "LlavaForConditionalGeneration", "LlavaNextForConditionalGeneration",
      "LlavaOnevisionForConditionalGeneration" },
    about = "LLaVA / LLaVA-NeXT / OneVision: CLIP, SigLIP or Pixtral tower + MLP projector + "
      .. "any decoder (models/llava.lua)" },
  { name = "internvl_hf", module = "models.internvl", fn = "count_hf",
    model_types = { "internvl" }, architectures = { "InternVLForConditionalGeneration" },
    about = "InternVL 2.5/3 in transformers' own format (-hf): InternViT + projector + "
      .. "Qwen2/Qwen3/Llama (models/internvl.lua)" },
  { name = "idefics3", module = "models.idefics3",
    model_types = { "idefics3", "smolvlm" },
    architectures = { "Idefics3ForConditionalGeneration", "SmolVLMForConditionalGeneration" },
    about = "Idefics3 / SmolVLM: SigLIP-style tower + pixel shuffle + linear projection + "
      .. "Llama, image splitting (models/idefics3.lua)" },
  { name = "minicpmv", module = "models.minicpmv",
    model_types = { "minicpmv" }, architectures = { "MiniCPMV" },
    about = "MiniCPM-V 2.5/2.6/4.5 (remote code): SigLIP-style tower + resampler + "
      .. "Llama 3 / Qwen2 / Qwen3, image slices (models/minicpmv.lua)" },
  { name = "mllama", module = "models.mllama",
    model_types = { "mllama" }, architectures = { "MllamaForConditionalGeneration" },
    about = "Llama 3.2 Vision: tiled ViT with global layers + projector + Llama with "
      .. "cross-attention layers (models/mllama.lua; counts only)" },
  { name = "internvl", module = "models.internvl",
    model_types = { "internvl_chat" }, architectures = { "InternVLChatModel" },
    about = "InternVL 1.5/2/2.5/3 remote code: InternViT + mlp1 + Qwen2/InternLM2/Llama "
      .. "(models/internvl.lua)" },
  { name = "paligemma", module = "models.paligemma",
    model_types = { "paligemma" }, architectures = { "PaliGemmaForConditionalGeneration" },
    about = "PaliGemma: SigLIP + linear projector + Gemma (models/paligemma.lua)" },
  { name = "siglip", module = "models.paligemma", fn = "count_siglip",
    model_types = { "siglip", "siglip_vision_model" },
    architectures = { "SiglipModel", "SiglipVisionModel" },
    about = "SigLIP / SigLIP2 fixed-resolution, text + vision towers (models/paligemma.lua)" },
  { name = "mistral3", module = "models.mistral3",
    model_types = { "mistral3" }, architectures = { "Mistral3ForConditionalGeneration" },
    about = "Mistral Small 3.x: Pixtral ViT + patch merger projector + Mistral "
      .. "(models/mistral3.lua)" },
  { name = "yxanul", module = "models.yxanul",
    model_types = { "yxanul" }, architectures = { "YxanulForCausalLM" },
    about = "Yxanul: GQA decoder with factorized embeddings (models/yxanul.lua)" },
}

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

local function index(field)
  local t = {}
  for _, f in ipairs(R.FAMILIES) do
    for _, k in ipairs(f[field]) do t[k] = f end
  end
  return t
end

function R.family(name)
  for _, f in ipairs(R.FAMILIES) do
    if f.name == name then return f end
  end
end

-- "decoder (llama, mistral, qwen2, qwen3), internlm2 (internlm2), ..."
function R.known()
  local out = {}
  for _, f in ipairs(R.FAMILIES) do
    out[#out + 1] = f.name .. " (" .. table.concat(f.model_types, ", ") .. ")"
  end
  return table.concat(out, "; ")
end

-- Counts cfg with the family `entry` (its count() or normalize()+params()).
function R.count_with(entry, cfg, where)
  local fam = require(entry.module)
  local fn = fam[entry.fn or "count"]
  if fn then return fn(cfg, where) end
  return fam.params(fam.normalize(cfg, where))
end

-- cfg itself, or a copy whose model_type is the one its architecture names
-- when the family was found by architecture (the lists are parallel).
function R.with_model_type(entry, cfg)
  for _, t in ipairs(entry.model_types) do
    if cfg.model_type == t then return cfg end
  end
  local archs = type(cfg.architectures) == "table" and cfg.architectures or {}
  for _, a in ipairs(archs) do
    for i, x in ipairs(entry.architectures) do
      if x == a then
        local copy = {}
        for k, v in pairs(cfg) do copy[k] = v end
        copy.model_type = entry.model_types[i] or entry.model_types[1]
        return copy
      end
    end
  end
  return cfg
end

-- The family entry for a config table. where: the file, for errors.
function R.find(cfg, where)
  local by_type, by_arch = index("model_types"), index("architectures")
  local mt = cfg.model_type
  if type(mt) == "string" and by_type[mt] then return by_type[mt] end
  local archs = type(cfg.architectures) == "table" and cfg.architectures or {}
  for _, a in ipairs(archs) do
    if by_arch[a] then return by_arch[a] end
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
    local copy = {}
    for k, v in pairs(cfg) do copy[k] = v end
    copy.model_type = hint
    local ok, err = pcall(R.count_with, by_type[hint], copy, where)
    local msg = not ok and (type(err) == "table" and err.msg or tostring(err)) or ""
    if msg:find("changes the parameter count", 1, true) then hint = nil end
  end
  errors.input(where or "config", "model_type", what
    .. (hint and ("; did you mean '" .. hint .. "'?") or "")
    .. ". Known families: " .. R.known()
    .. ". To add one, add models/<name>.lua and register it in models/registry.lua")
end

return R
