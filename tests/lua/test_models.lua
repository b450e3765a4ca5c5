-- Exact parameter counts from config.json, against published figures (not
-- this program's output): model cards, Hub safetensors metadata, and
-- counts printed by transformers, each cited beside its number.
local vram = require("vram")
local P = require("stdlib.params")
local registry = require("models.registry")

local function preset(name)
  return vram.json.load(vram.share_dir .. "/examples/configs/" .. name .. ".json")
end

-- The caller picks the family (models/registry.lua) and hands it to stdlib.
local function count_cfg(cfg, where, opts)
  local family, typed = registry.find(cfg, where)
  return P.count(family, typed, where, opts)
end

local function count(name, opts)
  return count_cfg(preset(name), name .. ".json", opts)
end

local function part(r, name)
  for _, p in ipairs(r.parts) do
    if p.name == name then return p.params end
  end
end

local function tower(r, t)
  for _, x in ipairs(P.towers(r)) do
    if x.tower == t then return x.params end
  end
  return 0
end

T.test("text decoders match their published parameter counts", function()
  T.eq(count("qwen2_5_1_5b_instruct").total, 1543714304)   -- Qwen2.5-1.5B
  T.eq(count("qwen3_4b_instruct_2507").total, 4022468096)  -- Qwen3-4B
  T.eq(count("llama_3_8b").total, 8030261248)              -- Llama-3-8B
  T.eq(count("qwen2_5_7b_instruct").total, 7615616512)     -- Qwen2.5-7B
  T.eq(count("mistral_7b_v0_1").total, 7241732096)         -- Mistral-7B-v0.1
end)

T.test("tied embeddings count once and are reported as the duplicate", function()
  local r = count("qwen2_5_1_5b_instruct")
  T.eq(r.tied_duplicate, 151936 * 1536)
  T.eq(part(r, "lm_head"), 0)
  T.eq(count("llama_3_8b").tied_duplicate, 0)
end)

T.test("Qwen3-VL-4B: text + vision tower, as the checkpoint holds it", function()
  local r = count("qwen3_vl_4b_instruct")
  -- model.safetensors.index.json metadata.total_size 8,875,631,616 bytes,
  -- all BF16; the 315 model.visual.* tensors are 830,695,424 bytes
  T.eq(r.total, 8875631616 // 2)
  T.eq(tower(r, "vision") + tower(r, "projector"), 830695424 // 2)
  T.eq(tower(r, "llm"), 4022468096) -- the Qwen3-4B text model
  T.eq(r.tied_duplicate, 151936 * 2560)
  -- by hand from modeling_qwen3_vl.py (hidden 1024, 24 blocks, merge 2)
  T.eq(part(r, "visual.patch_embed"), 3 * 2 * 16 * 16 * 1024 + 1024)
  T.eq(part(r, "visual.pos_embed"), 2304 * 1024)
  T.eq(part(r, "visual.merger"), 2 * 1024 + 4096 * 4096 + 4096 + 4096 * 2560 + 2560)
  T.eq(part(r, "visual.deepstack_merger_list"), 3 * (2 * 4096 + 4096 * 4096 + 4096
    + 4096 * 2560 + 2560))
end)

T.test("seed 000's 4,925,110,784 is this count plus four named mistakes", function()
  local r = count("qwen3_vl_4b_instruct")
  local block = part(r, "visual.blocks") // 24
  local seed_block = 16783360 -- seed 000: "each ~ 16,783,360"
  local text_qkv_bias = 36 * (4096 + 1024 + 1024)
  local missed = 2304 * 1024 + 1024 + 1024 + 3 * 4096 -- pos_embed, LayerNorm/conv biases
  T.eq(r.total + r.tied_duplicate + text_qkv_bias + 24 * (seed_block - block) - missed,
    4925110784)
end)

T.test("Qwen2-VL-2B matches the Hub count, flat or nested text config", function()
  local r = count("qwen2_vl_2b_instruct")
  T.eq(r.total, 2208985600)
  T.eq(tower(r, "llm"), 1543714304) -- the Qwen2-1.5B text model
  T.eq(part(r, "visual.patch_embed"), 3 * 2 * 14 * 14 * 1280) -- Conv3d, bias=False
  -- transformers >= 4.52 saves the text fields under text_config
  local flat = preset("qwen2_vl_2b_instruct")
  local nested = { model_type = "qwen2_vl", vision_config = flat.vision_config,
    tie_word_embeddings = flat.tie_word_embeddings, text_config = {} }
  for _, k in ipairs({ "hidden_size", "intermediate_size", "num_attention_heads",
    "num_hidden_layers", "num_key_value_heads", "vocab_size" }) do
    nested.text_config[k] = flat[k]
  end
  T.eq(count_cfg(nested, "nested").total, 2208985600)
end)

T.test("InternVL2-2B and InternVL3-2B", function()
  local r2 = count("internvl2_2b")
  -- Hub safetensors count of OpenGVLab/InternVL2_5-2B, the same shapes
  -- (InternViT-300M + mlp1 + InternLM2-1.8B with vocab 92553)
  T.eq(r2.total, 2205754368)
  T.eq(tower(r2, "projector"), 12595200) -- trainable "connector only" count
  T.eq(part(r2, "language_model.output"), 92553 * 2048)
  local r3 = count("internvl3_2b")
  T.eq(r3.total, 2088957440) -- InternVL3-2B model.safetensors header
  local internvl = require("models.internvl")
  local m3 = internvl.read(preset("internvl3_2b"), "internvl3_2b.json")
  T.eq(internvl.image_tokens(m3, { height = 448, width = 448 }).per_tile, 256)
end)

T.test("InternLM2 alone counts its fused wqkv", function()
  local c = { model_type = "internlm2", hidden_size = 2048, intermediate_size = 8192,
    num_attention_heads = 16, num_key_value_heads = 8, num_hidden_layers = 24,
    vocab_size = 92544, bias = false }
  -- Hub count of internlm/internlm2_5-1_8b-chat
  T.eq(count_cfg(c, "internlm2").total, 1889110016)
end)

T.test("PaliGemma-3b-mix-224 and its published breakdown", function()
  local r = count("paligemma_3b_mix_224")
  T.eq(r.total, 2923466480)
  T.eq(tower(r, "vision"), 412442352)
  T.eq(tower(r, "projector"), 2361344)
  T.eq(tower(r, "llm"), 2508662784)
  T.eq(r.tied_duplicate, 257216 * 2048) -- lm_head tied to embed_tokens
end)

T.test("SigLIP2-so400m-patch16-512: both towers, and the vision tower alone", function()
  local r = count("siglip2_so400m_patch16_512")
  T.eq(r.total, 1136555698)
  T.eq(tower(r, "vision"), 428772800)
  local v = preset("siglip2_so400m_patch16_512").vision_config
  T.eq(count_cfg(v, "vision_config").total, 428772800)
end)

T.test("Mistral Small 3.1: Pixtral + projector + Mistral, untied head", function()
  local r = count("mistral_small_3_1_24b_instruct_2503")
  T.eq(r.total, 24011361280)
  T.eq(r.tied_duplicate, 0)
  -- projector by hand: RMSNorm 1024, merging_layer 4096 -> 1024 (no bias),
  -- linear_1 1024 -> 5120, linear_2 5120 -> 5120 (multimodal_projector_bias false)
  T.eq(part(r, "multi_modal_projector"), 1024 + 4096 * 1024 + 1024 * 5120 + 5120 * 5120)
end)

T.test("Yxanul 197M matches seed 004's figures", function()
  local r = count("yxanul_197m")
  T.eq(r.total, 196398464)
  T.eq(part(r, "embed_tokens"), 200005 * 128 + 128 * 768)
  local m = require("models.yxanul")
  local p = m.params(m.read(preset("yxanul_197m"), "yxanul"))
  T.near(p.factorization_saves / 1e6, 127.9, 0.0005)     -- "saves 127.9M params"
  T.near(r.total / 2 ^ 20, 187.3, 0.0003)                -- "Model (FP8): 187.3 MB"
  T.ok(math.abs(2 * r.total / 2 ^ 20 - 374.5) < 0.15)    -- "Model (BF16): 374.5 MB"
end)

T.test("every listed preset loads and equals its published count", function()
  for _, p in ipairs(registry.PRESETS) do
    local r = count(p.name)
    T.ok(r.total > 0, p.name)
    if p.published then T.eq(r.total, p.published, p.name) end
  end
end)

T.test("freezing a tower leaves it out of trainable", function()
  local r = count("qwen2_vl_2b_instruct", { freeze = { "vision" } })
  T.eq(r.trainable, r.total - tower(r, "vision"))
  T.eq(count("qwen2_vl_2b_instruct").trainable, 2208985600)
end)

T.test("the registry picks families by model_type, then architectures", function()
  local c = preset("llama_3_8b")
  c.model_type = nil
  T.eq(count_cfg(c, "llama").family, "decoder")
  T.eq(registry.find({ model_type = "mistral3" }).name, "mistral3")
end)

T.test("unknown model types say how to add a family", function()
  local msg = T.raises(function() count_cfg({ model_type = "mamba2" }, "cfg.json") end,
    "cfg.json: model_type: unknown model_type 'mamba2'")
  T.ok(msg and msg:find("add models/<name>.lua and register it in models/registry.lua", 1, true))
  T.ok(msg and msg:find("qwen3_vl", 1, true), "lists the known families")
  T.raises(function() count_cfg({ model_type = "qwen3_v" }, "c") end, "did you mean 'qwen3_vl'?")
  T.raises(function() count_cfg({}, "c") end, "no model_type or architectures")
end)

T.test("known model_types that are not modelled say which layers are missing", function()
  T.raises(function() count_cfg({ model_type = "qwen3_next" }, "q.json") end,
    "q.json: model_type: 'qwen3_next' is known but not modelled: Qwen3-Next's Gated DeltaNet")
  local msg = T.raises(function() count_cfg({ model_type = "gemma3n" }, "g.json") end,
    "g.json: model_type: 'gemma3n' is known but not modelled: Gemma 3n's MatFormer decoder")
  T.ok(msg and not msg:find("did you mean", 1, true), "no did-you-mean toward gemma3")
  T.raises(function() count_cfg({ model_type = "minicpm" }, "m.json") end,
    "'minicpm' is known but not modelled")
  -- relabelled as a family that would ignore their layers: refused by key
  T.raises(function() count_cfg({ model_type = "qwen2_moe", hidden_size = 64,
    intermediate_size = 64, num_hidden_layers = 2, num_attention_heads = 4, vocab_size = 8,
    linear_num_value_heads = 32 }, "r.json") end, "r.json: linear_num_value_heads: changes")
  T.raises(function() count_cfg({ model_type = "gemma3_text", hidden_size = 64,
    intermediate_size = 64, num_hidden_layers = 2, num_attention_heads = 4, vocab_size = 8,
    laurel_rank = 64 }, "r.json") end, "r.json: laurel_rank: changes")
end)

-- transformers' MistralAttention and MistralMLP build no biases whatever
-- the config says (modeling_mistral.py): a true attention_bias or mlp_bias
-- is refused by name, never counted as biases the checkpoint lacks.
T.test("mistral refuses attention_bias and mlp_bias it never builds", function()
  local c = preset("mistral_7b_v0_1")
  c.attention_bias, c.mlp_bias = false, false
  T.eq(count_cfg(c, "m.json").total, 7241732096)           -- Mistral-7B-v0.1, as without them
  for _, k in ipairs({ "attention_bias", "mlp_bias" }) do
    local b = preset("mistral_7b_v0_1")
    b[k] = true
    T.raises(function() count_cfg(b, "m.json") end,
      "m.json: " .. k .. ": is true, but transformers' Mistral builds its projections without bias")
  end
  local v = preset("mistral_small_3_1_24b_instruct_2503")
  v.text_config.attention_bias = true
  T.raises(function() count_cfg(v, "v.json") end, "v.json: text_config.attention_bias: is true")
  -- Llama reads the key (LlamaAttention's bias=config.attention_bias)
  local l = preset("mistral_7b_v0_1")
  l.model_type, l.architectures, l.attention_bias = "llama", nil, true
  local H, kv = 4096, 1024 -- q,o: 4096 biases each, k,v: 1024 each, per layer
  T.eq(count_cfg(l, "l.json").total, 7241732096 + 32 * (2 * H + 2 * kv))
end)

T.test("missing or bad fields name the field", function()
  T.raises(function() count_cfg({ model_type = "qwen3_vl", text_config = {} }, "c.json") end,
    "c.json: vision_config: is required but missing")
  local bad = preset("qwen3_vl_4b_instruct")
  bad.vision_config.deepstack_visual_indexes = { 5, 99 }
  T.raises(function() count_cfg(bad, "c.json") end, "vision_config.deepstack_visual_indexes")
  local v = preset("internvl3_2b")
  v.vision_config.norm_type = "batch_norm"
  T.raises(function() count_cfg(v, "c.json") end, "vision_config.norm_type")
end)

T.test("a Qwen2-VL config without embed_dim names the field for params and estimate", function()
  local bad = preset("qwen2_vl_2b_instruct")
  bad.vision_config.embed_dim = nil
  T.raises(function() count_cfg(bad, "c.json") end, "c.json: vision_config.embed_dim: is required")
  -- the simulator reads the same validated model, never the raw config
  local fam = registry.find(bad, "c.json")
  T.raises(function() fam.simulator(fam.read(bad, "c.json"), { count = 1, width = 448,
    height = 448 }) end, "c.json: vision_config.embed_dim: is required")
end)

-- The family contract (models/README.md), checked for every registered
-- family: what each module exports and that it answers for its preset.
T.test("every registered family keeps the contract", function()
  local seen = {}
  for _, f in ipairs(registry.list()) do
    local mod = f.family
    T.eq(type(mod.name), "string", f.module .. ".name")
    T.ok(not seen[mod.name], f.module .. ": family names are unique")
    seen[mod.name] = true
    T.eq(type(mod.about), "string", f.module .. ".about")
    T.eq(type(mod.read), "function", f.module .. ".read")
    T.eq(type(mod.params), "function", f.module .. ".params")
    T.ok(mod.simulator == nil or type(mod.simulator) == "function", f.module .. ".simulator")
    T.ok(mod.image_tokens == nil or type(mod.image_tokens) == "function",
      f.module .. ".image_tokens")
    for _, k in ipairs(f.model_types) do
      T.eq(registry.find({ model_type = k }), mod, k .. " -> " .. f.module)
    end
  end
  for _, p in ipairs(registry.PRESETS) do
    local cfg = preset(p.name)
    local fam = registry.find(cfg, p.name)
    local m = fam.read(cfg, p.name)
    local r = fam.params(m)
    T.eq(type(r.parts), "table", p.name .. ": params(m).parts")
    T.int(r.tied_duplicate, p.name .. ": params(m).tied_duplicate")
    if fam.simulator then
      local image = fam.image_tokens and { count = 1, width = 448, height = 448 } or nil
      local d = fam.simulator(m, image)
      for _, k in ipairs({ "build", "inputs", "forward_loss", "forward_logits" }) do
        T.eq(type(d.sim[k]), "function", p.name .. ": simulator(m).sim." .. k)
      end
      T.eq(type(d.text), "table", p.name .. ": simulator(m).text")
      if image then T.ok(fam.image_tokens(m, image).tokens > 0, p.name .. ": image_tokens") end
    end
  end
end)
