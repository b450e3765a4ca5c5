-- Decoder-only transformers, the block every decoder family shares: the
-- config reader, parameter counts and the eager forward pass, as
-- transformers' modeling_<model_type>.py define them. What one model_type
-- does differently (its variant: biases, norms, MoE, MLA, sliding windows)
-- is in its family module (models/decoder_lm.lua lists the fields), found
-- through models/registry.lua.
local vram = require("vram")
local layers = require("stdlib.layers")
local cfgutil = require("stdlib.config")
local compose = require("stdlib.compose")
local errors = require("stdlib.errors")
local registry = require("models.registry")
local commas = require("stdlib.params").commas

local D = {}

-- Config keys that change the parameter count or the shapes of a decoder.
-- A variant lists those it reads (`models`); any other one present with a
-- non-empty value is refused, so that a Mixtral config relabelled `mistral`
-- is an error, never a dense 7B count.
D.COUNT_KEYS = { "num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size",
  "n_shared_experts", "shared_expert_intermediate_size", "kv_lora_rank", "q_lora_rank",
  "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step", "mlp_only_layers",
  "num_nextn_predict_layers", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
  "use_factorized_embeddings", "factorization_dim",
  -- a vision tower beside the text model: a VLM relabelled as its decoder
  -- (Phi-3.5-vision's phi3_v as phi3, as a did-you-mean would suggest, or
  -- an original-format LLaVA as llama) would be counted without its tower
  "vision_config", "embd_layer", "img_processor", "mm_vision_tower",
  -- an audio encoder or a speech head beside it (MiniCPM-o as minicpmv)
  "audio_config", "tts_config",
  -- DeepSeek-V3.2's lightning indexer (its q/k projections, k norm and head
  -- weights in every layer): deepseek_v32 relabelled deepseek_v3
  "index_n_heads", "index_head_dim", "index_topk",
  -- Qwen3-Next's Gated DeltaNet layers (qwen3_next relabelled qwen2_moe)
  -- and Gemma 3n's AltUp, Laurel and per-layer inputs (gemma3n_text
  -- relabelled a Gemma): neither is modelled (models/registry.lua)
  "linear_num_value_heads", "linear_num_key_heads", "linear_key_head_dim",
  "linear_value_head_dim", "linear_conv_kernel_dim",
  "altup_num_inputs", "laurel_rank", "hidden_size_per_layer_input" }

-- Factorized embeddings (read below for every variant that lists them).
D.FACTOR_KEYS = { "use_factorized_embeddings", "factorization_dim" }

local function benign(v)
  return v == nil or v == false or v == 0 or (type(v) == "table" and next(v) == nil)
end

-- Each model_type's variant (HF config-class defaults for keys a file may
-- leave out, the count keys it models, and `read(c, m)` for what is
-- particular to it) lives in its family module (models/decoder_lm.lua
-- describes the fields); the registry finds it by model_type.

-- Reads an HF text config into the fields this file uses; errors name the
-- file and the key (prefix: where the text config sits, e.g. "text_config.").
function D.read(cfg, where, prefix)
  local c = cfgutil.reader(cfg, where, prefix)
  local mt = c:str("model_type", "llama")
  local var = registry.decoder(mt)
  if not var then
    c:fail("model_type", ("'%s' is not a decoder this file models (known: %s)"):format(mt,
      table.concat(registry.decoder_types(), ", ")))
  end
  local modelled = {}
  for _, k in ipairs(var.models or {}) do modelled[k] = true end
  for _, k in ipairs(D.COUNT_KEYS) do
    if not modelled[k] and not benign(cfg[k]) then
      local by = {}
      for _, name in ipairs(registry.decoder_types()) do
        for _, x in ipairs(registry.decoder(name).models or {}) do
          if x == k then by[#by + 1] = name end
        end
      end
      c:fail(k, ("changes the parameter count and model_type '%s' does not model it, so "
        .. "this is not a plain %s config%s"):format(mt, mt, #by > 0 and
        (" (model_types that read it: " .. table.concat(by, ", ") .. ")") or ""))
    end
  end
  local H = c:int("hidden_size")
  local heads = c:int("num_attention_heads")
  local m = {
    model_type = mt,
    hidden = H,
    layers = c:int("num_hidden_layers"),
    heads = heads,
    kv_heads = c:int("num_key_value_heads", heads),
    head_dim = c:int("head_dim", var.head_dim, true) or H // heads,
    intermediate = c:int("intermediate_size"),
    vocab = c:int("vocab_size"),
    tie = c:bool("tie_word_embeddings", var.tie == nil and false or var.tie),
    mlp_bias = c:bool("mlp_bias", false),
    norms = "pre",
    norm_kind = "rms",
  }
  -- factorized embeddings (Yxanul): vocab x r, then r -> hidden; the tied
  -- output runs them backwards, an untied one is its own hidden x vocab
  -- Linear (Yxanul's FP8 model file, src/model_fp8_optimized.py)
  if c:bool("use_factorized_embeddings", false) then
    m.factor = c:int("factorization_dim")
    m.tie = c:bool("tie_word_embeddings", true)
  end
  -- MoE and DeepSeek variants list their layers one by one: bound the loop
  if var.per_layer and m.layers > 65536 then
    c:fail("num_hidden_layers", ("%d layers: a model listed layer by layer stays within 65536")
      :format(m.layers))
  end
  var.read(c, m)
  if m.qk_norm == nil then m.qk_norm = c:bool("qk_norm", false) and "head" or nil end
  if m.heads % m.kv_heads ~= 0 then
    c:fail("num_key_value_heads", ("must divide num_attention_heads (%d), got %d"):format(
      m.heads, m.kv_heads))
  end
  if m.moe then
    local o = m.moe
    if o.experts then
      if o.top_k > o.experts then
        c:fail("num_experts_per_tok", ("must be <= the number of experts (%d), got %d"):format(
          o.experts, o.top_k))
      end
      o.weights_dtype = o.weights_dtype or "model"
    end
    if m.moe_layers == "all" then
      m.moe_layers = {}
      for i = 1, m.layers do m.moe_layers[i] = true end
    end
    if not o.experts then m.moe, m.moe_layers = nil, nil end
  end
  -- which layers slide (their KV cache keeps sliding_window - 1 tokens):
  -- layer_types when the config lists them, else the model's own pattern
  if m.sliding_window and var.sliding then
    local lt = cfg.layer_types
    m.sliding_layers = {}
    for i = 1, math.min(m.layers, 65536) do
      if type(lt) == "table" then
        m.sliding_layers[i] = lt[i] == "sliding_attention"
      else
        m.sliding_layers[i] = var.sliding(c, i - 1)
      end
    end
  end
  -- what a serving engine reads (stdlib/serving.lua): the dtype the
  -- checkpoint names, its context length, and whether it declares a
  -- sliding window in effect (Qwen2's use_sliding_window: false does not)
  local td = cfg.torch_dtype or cfg.dtype
  m.torch_dtype = type(td) == "string" and td or nil
  m.max_positions = math.tointeger(cfg.max_position_embeddings)
  m.window_declared = (m.sliding_window or cfg.sliding_window) ~= nil
    and cfg.use_sliding_window ~= false
  m.uniform = true
  for i = 2, m.moe_layers and m.layers or 0 do
    if m.moe_layers[i] ~= m.moe_layers[1] then m.uniform = false end
  end
  return m
end

-- A text model nested in another config (a VLM's text_config): set holds
-- keys forced (model_type), defaults the keys used when the config leaves
-- them out (the transformers config class defaults).
function D.read_nested(tcfg, where, prefix, set, defaults)
  if type(tcfg) ~= "table" then
    errors.input(where, prefix:gsub("%.$", ""), "must be a mapping")
  end
  local c = {}
  for k, v in pairs(defaults or {}) do c[k] = v end
  for k, v in pairs(tcfg) do c[k] = v end
  for k, v in pairs(set or {}) do c[k] = v end
  return D.read(c, where, prefix)
end

-- Exact parameter counts by component (tied embeddings counted once), in
-- the family contract's form (models/README.md): parts in the "llm" tower,
-- names prefixed with `prefix`; tied_duplicate is the tied embedding.
-- Checked arithmetic: a config with absurd sizes is an overflow error, never
-- a wrapped count.
function D.params(m, prefix)
  local H, hd = m.hidden, m.head_dim
  local add, mul = vram.add, vram.mul
  local lp, np = vram.linear_params, vram.norm_params
  local qdim, kvdim = mul(m.heads, hd), mul(m.kv_heads, hd)
  local attn
  if m.mla then
    local a = m.mla
    local q = a.q_lora and add(lp(H, a.q_lora, m.qkv_bias), np(a.q_lora, "rms"),
      lp(a.q_lora, qdim, false)) or lp(H, qdim, m.qkv_bias)
    attn = add(q, lp(H, a.kv_lora + a.rope, m.qkv_bias), np(a.kv_lora, "rms"),
      lp(a.kv_lora, mul(m.heads, a.nope + a.v_dim), false),
      lp(mul(m.heads, a.v_dim), H, m.o_bias))
  elseif m.fused_qkv then
    attn = add(lp(H, add(qdim, mul(2, kvdim)), m.qkv_bias), lp(qdim, H, m.o_bias))
  else
    attn = add(lp(H, qdim, m.qkv_bias), mul(2, lp(H, kvdim, m.qkv_bias)), lp(qdim, H, m.o_bias))
  end
  if m.qk_norm == "head" then attn = add(attn, mul(2, np(hd, "rms")))
  elseif m.qk_norm == "full" then attn = add(attn, np(qdim, "rms"), np(kvdim, "rms")) end
  local sinks = m.sinks and m.heads or 0
  attn = add(attn, sinks)
  local function swiglu(I) return add(mul(2, lp(H, I, m.mlp_bias)), lp(I, H, m.mlp_bias)) end
  local dense = swiglu(m.intermediate)
  local nk = m.norm_kind == "layer" and "layer" or "rms" -- nn.LayerNorm: weight and bias
  local norms = mul(m.norms == "sandwich" and 4 or 2, np(H, nk))
  local n_moe, experts, router, shared, bias = 0, 0, 0, 0, 0
  local o = m.moe
  if o then
    for i = 1, m.layers do if m.moe_layers[i] then n_moe = n_moe + 1 end end
    local per = swiglu(o.inter)
    if o.expert_bias then per = add(per, 2 * o.inter, H) end
    experts = mul(o.experts, per)
    router = lp(H, o.experts, o.router_bias)
    if o.shared_inter then
      shared = add(swiglu(o.shared_inter), o.shared_gate and lp(H, 1, false) or 0)
    end
    bias = o.score_bias and o.experts or 0
  end
  local n_dense = m.layers - n_moe
  local embed = vram.embedding_params(m.vocab, H)
  if m.factor then
    embed = add(vram.embedding_params(m.vocab, m.factor), lp(m.factor, H, false))
  end
  local head = m.tie and 0 or lp(H, m.vocab, m.head_bias)
  local parts = {
    { name = "embed_tokens", params = embed },
    { name = "layers.attention", params = mul(attn, m.layers),
      note = m.sinks and "with one attention sink per head" or nil },
  }
  if n_dense > 0 then
    parts[#parts + 1] = { name = "layers.mlp", params = mul(dense, n_dense),
      note = o and ("%d dense layers"):format(n_dense) or nil }
  end
  if o then
    parts[#parts + 1] = { name = "layers.experts", params = mul(experts, n_moe),
      note = ("%d layers x %d experts, top-%d"):format(n_moe, o.experts, o.top_k) }
    parts[#parts + 1] = { name = "layers.router", params = mul(router, n_moe) }
    if shared > 0 then
      parts[#parts + 1] = { name = "layers.shared_experts", params = mul(shared, n_moe) }
    end
    if bias > 0 then
      parts[#parts + 1] = { name = "layers.router.e_score_correction_bias",
        params = mul(bias, n_moe), note = "a buffer in transformers, a tensor in the checkpoint" }
    end
  end
  parts[#parts + 1] = { name = "layers.norms", params = mul(norms, m.layers) }
  parts[#parts + 1] = { name = "norm", params = np(H, nk) }
  parts[#parts + 1] = { name = "lm_head", params = head,
    note = m.tie and "tied to embed_tokens" or nil }
  local per_layer = add(attn, norms, o and experts or dense, router, shared)
  if (m.mtp or 0) > 0 then
    -- DeepSeek-V3's MTP module (its inference code, model.layers.<L>+): a
    -- MoE decoder layer plus eh_proj Linear(2H, H), enorm, hnorm and
    -- shared_head.norm; the checkpoint also stores the module's own
    -- embed_tokens and shared_head.head. transformers does not build it.
    local one = add(per_layer, bias, lp(mul(2, H), H, false), mul(3, np(H, "rms")))
    parts[#parts + 1] = { name = "mtp", params = 0, note = ("%d multi-token-prediction "
      .. "layer(s) in the checkpoint, not loaded by transformers: not counted, not simulated "
      .. "(each %s parameters, plus %s for its embed_tokens and shared_head.head copies)")
      :format(m.mtp, commas(one), commas(mul(2, embed))) }
  end
  for _, p in ipairs(parts) do p.name, p.tower = (prefix or "") .. p.name, "llm" end
  return { parts = parts, per_layer = per_layer, tied_duplicate = m.tie and embed or 0 }
end

-- The weight format of projection `leaf` (group: "experts" inside MoE
-- blocks): a checkpoint's quantization where it applies
-- (modules_to_not_convert honoured), else the run's packed format for
-- every projection but lm_head.
function D.quant_for(quant, leaf, group)
  if not quant then return nil end
  if quant.ckpt then
    local Q = require("stdlib.quant")
    group = group or ((Q.GROUPS.self_attn[leaf] and "self_attn") or "mlp")
    return Q.applies(quant.ckpt, group, leaf) and quant or nil
  end
  return leaf ~= "lm_head" and quant or nil
end

-- The MoE description a run simulates: a grouped implementation keeps its
-- experts as fused (E, out, in) weights.
-- Whether the expert loop leaves an expert of a layer without tokens (a
-- few rows over many experts); a compiled probe's split (stdlib/moe.lua)
-- answers for itself.
function D.idle_experts(m, ctx)
  if not m.moe or (ctx.moe_impl or "loop") ~= "loop" or m.moe.split then return false end
  local o = m.moe
  local counts = require("stdlib.moe").tokens_per_expert(ctx.rows, o.top_k, o.experts,
    o.capacity_factor, o.imbalance)
  for _, n in ipairs(counts) do
    if n == 0 then return true end
  end
  return false
end

-- The first layer of the uniform tail of a stack whose first layers
-- differ from the rest (first_k_dense_replace: DeepSeek-V3, Kimi-K2 and
-- GLM-4.5 open with dense-MLP layers, then every layer is MoE): layers f ..
-- n build the same parameters, so they are built once as a group and
-- composed as a stack of their own, the first f - 1 walked. nil when the
-- stack is uniform or has no such tail of 4 layers or more (MoE every
-- other layer, cross-attention layers). Read off the run's own layers (a
-- pipeline stage's slice of the list, stdlib/parallel.lua local_run): 1
-- when the slice is uniform though the model is not (the stages after the
-- dense layers).
function D.uniform_tail(m)
  if m.uniform or m.cross_layers or not m.moe_layers then return nil end
  local n = m.layers
  local f, kind = n, not m.moe_layers[n]
  while f > 1 and (not m.moe_layers[f - 1]) == kind do f = f - 1 end
  if n - f + 1 >= 4 then return f end
end

-- Layers 1 .. f - 1 built one by one, then layers f .. n as one group
-- (Sim:build_layers). Returns the stack (layer i at [i]: the tail's tables
-- are made when read, as a group's are) and the tail's own table, whose
-- metatable names the group (stdlib/compose.lua reads it).
local function build_split(S, n, build, f)
  local all = {}
  for i = 1, f - 1 do all[i] = build(i) end
  local tail = S:build_layers(n - f + 1, function(j) return build(f - 1 + j) end, true)
  all[f] = rawget(tail, 1)
  setmetatable(all, {
    __index = function(_, i)
      if math.type(i) == "integer" and i > f and i <= n then return tail[i - f + 1] end
    end,
    __len = function() return n end,
  })
  return all, tail
end

function D.moe_desc(m, impl)
  if impl ~= "grouped" or m.moe.fused then return m.moe end
  local o = {}
  for k, v in pairs(m.moe) do o[k] = v end
  o.fused = true
  return o
end

-- Parameters in model.parameters() order. opts: {dt, trainable(name) -> bool,
-- lora(name) -> {r=} or nil, quant, moe_impl, stage = {embed=, head=} (a pipeline stage
-- holds the embedding only first, the final norm and head only last; a tied
-- head keeps its own copy of the embedding there, as Megatron does)}
function D.build(S, m, opts)
  local dt, H, hd = opts.dt, m.hidden, m.head_dim
  local tr, lo, quant = opts.trainable, opts.lora, opts.quant
  -- peft's prepare_model_for_kbit_training casts every parameter that is not
  -- quantized (embeddings, norms, the head, biases) to fp32
  if quant and quant.prepare then dt = "fp32" end
  local stage = opts.stage or { embed = true, head = true }
  local P = { m = m, layers = {} }
  if stage.embed or (stage.head and m.tie) then
    -- embed_rows: an embedding larger than the head (mllama: vocab + 8)
    local erows = m.embed_rows or m.vocab
    P.embed = S:param(erows * (m.factor or H), dt, tr("embed_tokens"), "embed_tokens")
    P.embed.rows = erows -- a matrix, for factored optimizer states
    local elo = stage.embed and not m.factor and lo("embed_tokens")
    if elo then
      P.embed_lora = layers.new_embedding_lora(S, m.vocab, H, elo.r, "embed_tokens", elo)
    end
  end
  if m.factor then
    P.embed_proj = layers.new_linear(S, { label = "embed_proj", inn = m.factor, out = H,
      dt = dt, trainable = tr("embed_tokens") })
  end
  local function lin(name, inn, out, bias)
    return layers.new_linear(S, { label = name, inn = inn, out = out, bias = bias, dt = dt,
      trainable = tr(name), lora = lo(name), quant = D.quant_for(quant, name) })
  end
  local function norm(name, n)
    local w = S:param(n, dt, tr(name), name)
    if m.norm_kind == "layer" then w.bias = S:param(n, dt, tr(name), name .. ".bias") end
    return w
  end
  local qdim, kvdim = m.heads * hd, m.kv_heads * hd
  local moe_opts = { dt = dt, trainable = tr, lora = lo, quant = quant, quant_for = D.quant_for }
  local function build_layer(i)
    local l = {}
    if m.cross_layers and m.cross_layers[i] then
      -- mllama's cross-attention layer: q from the text, k/v from the
      -- vision states, per-head q/k norms, tanh gates on both branches
      l.cross = true
      l.q = lin("q_proj", H, qdim, false)
      l.k = lin("k_proj", H, kvdim, false)
      l.v = lin("v_proj", H, kvdim, false)
      l.o = lin("o_proj", qdim, H, false)
      l.q_norm, l.k_norm = norm("q_norm", hd), norm("k_norm", hd)
      -- registered as MllamaCrossAttentionDecoderLayer does: cross_attn,
      -- input_layernorm, the attention gate, mlp, post_attention_layernorm,
      -- the MLP gate
      l.ln1 = norm("input_layernorm", H)
      l.attn_gate = norm("cross_attn_attn_gate", 1)
    elseif m.mla then
      local a = m.mla
      if a.q_lora then
        l.q_a = lin("q_a_proj", H, a.q_lora, m.qkv_bias)
        l.q_a_norm = norm("q_a_layernorm", a.q_lora)
        l.q = lin("q_b_proj", a.q_lora, qdim, false)
      else
        l.q = lin("q_proj", H, qdim, m.qkv_bias)
      end
      l.kv_a = lin("kv_a_proj_with_mqa", H, a.kv_lora + a.rope, m.qkv_bias)
      l.kv_a_norm = norm("kv_a_layernorm", a.kv_lora)
      l.kv_b = lin("kv_b_proj", a.kv_lora, m.heads * (a.nope + a.v_dim), false)
      l.o = lin("o_proj", m.heads * a.v_dim, H, m.o_bias)
    elseif m.fused_qkv then
      l.qkv = lin("qkv_proj", H, qdim + 2 * kvdim, m.qkv_bias)
      l.o = lin("o_proj", qdim, H, m.o_bias)
    else
      l.q = lin("q_proj", H, qdim, m.qkv_bias)
      l.k = lin("k_proj", H, kvdim, m.qkv_bias)
      l.v = lin("v_proj", H, kvdim, m.qkv_bias)
      l.o = lin("o_proj", qdim, H, m.o_bias)
    end
    if l.cross then -- its norms are built above
    elseif m.qk_norm == "head" then
      l.q_norm, l.k_norm = norm("q_norm", hd), norm("k_norm", hd)
    elseif m.qk_norm == "full" then
      l.q_norm, l.k_norm = norm("q_norm", qdim), norm("k_norm", kvdim)
    end
    if m.sinks then l.sinks = norm("sinks", m.heads) end
    if m.moe_layers and m.moe_layers[i] then
      l.moe = require("stdlib.moe").build(S, D.moe_desc(m, opts.moe_impl), H, moe_opts)
    elseif m.fused_gate_up then
      l.mlp = { gate_up = lin("gate_up_proj", H, 2 * m.intermediate, m.mlp_bias),
                down = lin("down_proj", m.intermediate, H, m.mlp_bias) }
    else
      l.mlp = { gate = lin("gate_proj", H, m.intermediate, m.mlp_bias),
                up = lin("up_proj", H, m.intermediate, m.mlp_bias),
                down = lin("down_proj", m.intermediate, H, m.mlp_bias) }
    end
    if m.norms ~= "post" and not l.cross then l.ln1 = norm("input_layernorm", H) end
    l.ln2 = norm("post_attention_layernorm", H)
    if l.cross then l.mlp_gate = norm("cross_attn_mlp_gate", 1) end
    if m.norms == "sandwich" then
      l.ln3 = norm("pre_feedforward_layernorm", H)
      l.ln4 = norm("post_feedforward_layernorm", H)
    elseif m.norms == "post" then
      l.ln4 = norm("post_feedforward_layernorm", H)
    end
    return l
  end
  -- every layer builds the same parameters unless some are cross-attention
  -- or MoE layers and others not (Sim:build_layers then builds them once)
  local tail = D.uniform_tail(m)
  if tail then
    P.layers, P.tail = build_split(S, m.layers, build_layer, tail)
  else
    P.layers = S:build_layers(m.layers, build_layer, not m.cross_layers and m.uniform)
  end
  if stage.head then
    P.norm = norm("norm", H)
    if m.tie then
      -- peft wraps the tied lm_head Linear too: adapters over the shared weight
      local hlo = not m.factor and lo("lm_head")
      P.head = { w = P.embed, out = m.vocab, inn = H, label = "lm_head",
        lora = hlo and layers.new_lora(S, H, m.vocab, hlo.r, "lm_head", hlo) or nil }
    else
      P.head = lin("lm_head", H, m.vocab, m.head_bias)
    end
  end
  -- RotaryEmbedding.inv_freq is a buffer cast with the model
  S.tape:alloc(S:bytes(dt, (m.mla and m.mla.rope or hd) // 2), "buffers", "rotary.inv_freq")
  return P
end

-- The norm a variant uses: Llama's (cast back, times the weight), or the
-- fp32 weight product of Gemma ((1 + w) * x in fp32) and OLMo 2.
local function rms(S, m, x, w, rows, label)
  if m.norm_kind == "layer" then return layers.layernorm(S, x, w, w.bias, rows, label) end
  if m.norm_kind == "rms" then return layers.rmsnorm(S, x, w, rows, label) end
  return layers.rmsnorm_fp32_weight(S, x, w, rows, label)
end

-- The model's final norm: RMSNorm, or nn.LayerNorm where the layers' are
-- (Phi-MoE).
local function final_norm(S, m, h, w, rows)
  if m.norm_kind == "layer" then return layers.layernorm(S, h, w, w.bias, rows, "norm") end
  return layers.rmsnorm(S, h, w, rows, "norm")
end

-- q/k/v of a multi-head latent attention layer (DeepSeek): the latent
-- paths, the rope/nope split and the concatenated q and k. Returns q, k, v
-- and the tensors the layer holds until attention returns.
local function mla_qkv(S, m, l, x, ctx)
  local a, rows = m.mla, ctx.rows
  local q
  if l.q_a then
    local qa = layers.linear(S, x, l.q_a, rows)
    local qn = rms(S, m, qa, l.q_a_norm, rows, "q_a_layernorm")
    S:drop(qa)
    q = layers.linear(S, qn, l.q, rows)
    S:drop(qn)
  else
    q = layers.linear(S, x, l.q, rows)
  end
  local ckv = layers.linear(S, x, l.kv_a, rows)
  -- k_pass (a strided slice) -> kv_a_layernorm -> kv_b_proj
  local kpass = layers.copy(S, { id = ckv.id, n = rows * a.kv_lora, dt = ckv.dt,
    b = S:bytes(ckv.dt, rows * a.kv_lora), rg = ckv.rg }, "kv_a.k_pass")
  local kn = rms(S, m, kpass, l.kv_a_norm, rows, "kv_a_layernorm")
  S:drop(kpass)
  local kv = layers.linear(S, kn, l.kv_b, rows)
  S:drop(kn)
  -- rope on q_rot (heads x rope) and the shared k_rot (rope)
  local qrot = { id = q.id, n = rows * m.heads * a.rope, dt = q.dt,
    b = S:bytes(q.dt, rows * m.heads * a.rope), rg = q.rg }
  local krot = { id = ckv.id, n = rows * a.rope, dt = ckv.dt, b = S:bytes(ckv.dt, rows * a.rope),
    rg = ckv.rg }
  local cos, sin = ctx.cos, ctx.sin
  local qe = layers.rope(S, qrot, cos, sin, "rope.q")
  local ke = layers.rope(S, krot, cos, sin, "rope.k")
  -- torch.cat((q_pass, q_rot)) and cat((k_pass, k_rot.expand(...)))
  local qd = m.heads * m.head_dim
  local qc = S:new_tensor(rows * qd, q.dt, "attn.q_cat", S:rg(q, qe))
  S:node("attn.q_cat", {}, { { q, q.b }, { qe, qe.b } }, { qc })
  local kc = S:new_tensor(rows * qd, kv.dt, "attn.k_cat", S:rg(kv, ke))
  S:node("attn.k_cat", {}, { { kv, kv.b }, { ke, ke.b } }, { kc })
  S:drop(q, qe, ke, ckv)
  -- value_states: a strided view of kv_b's output
  local v = S:view(kv)
  v.n = rows * m.heads * a.v_dim
  S:drop(kv)
  return qc, kc, v
end

-- One decoder layer. x: residual stream (rows, H). ctx: {rows, batch, seq,
-- past (cached tokens), mask, cos, sin, cache (list per layer or nil)}.
-- Tokens layer idx's cache keeps of `held` before a decode step's cat: a
-- sliding-window layer's cache (DynamicSlidingWindowLayer) keeps the last
-- window - 1 tokens as a view of each step's cat.
local function cache_kept(m, idx, held)
  local win = m.sliding_layers and m.sliding_layers[idx] and m.sliding_window
  return win and math.min(held, win - 1) or held
end

-- Tokens held after n decode steps from t, n times t -> cache_kept(t) + 1
-- in closed form: a full cache grows by n, a sliding one up to its window.
local function cache_after(m, idx, t, n)
  if n <= 0 then return t end
  local win = m.sliding_layers and m.sliding_layers[idx] and m.sliding_window
  return win and math.min(t + n, win) or t + n
end

-- The caches as `steps` more decode steps leave them, without simulating
-- those steps (models/causal_lm.lua's generate): a prompt of `prompt`
-- tokens, `done` decode steps so far. Each cache is let go of before its
-- successor is allocated, so live bytes never exceed what the caches hold
-- after the steps.
function D.advance_cache(S, P, cache, prompt, done, steps)
  for idx, c in pairs(cache) do
    local held = cache_after(P.m, idx, prompt, done)
    local h = cache_after(P.m, idx, held, steps)
    assert(c.k.n % held == 0 and c.v.n % held == 0, "a KV cache of a size no token count explains")
    local kn, vn, kdt, vdt = c.k.n // held, c.v.n // held, c.k.dt, c.v.dt
    S:drop(c.k)
    c.k = S:new_tensor(h * kn, kdt, "kv_cache.cat", false, "kv_cache")
    S:drop(c.v)
    c.v = S:new_tensor(h * vn, vdt, "kv_cache.cat", false, "kv_cache")
  end
end

-- MllamaCrossAttentionDecoderLayer: the text attends to the vision states
-- (ctx.cross = {states (rows x H), rows, tokens (per sample), mask, cache,
-- last (the last cross layer: generation drops the states after it),
-- row_mask (false: no full_text_row_masked_out_mask)});
-- no rope; q/k norms per head; tanh gates on the attention and MLP
-- branches, the MLP output masked by full_text_row_masked_out_mask. The
-- vision K/V are computed at prefill and cached for the decode steps.
local function cross_forward(S, P, l, x, ctx, idx)
  local m, rows, cr = P.m, ctx.rows, ctx.cross
  -- without vision states (text alone) transformers skips the layer
  if not cr then return S:view(x) end
  local n1 = rms(S, m, x, l.ln1, rows, "input_layernorm")
  local q = layers.linear(S, n1, l.q, rows)
  local qn = rms(S, m, q, l.q_norm, rows * m.heads, "q_norm")
  S:drop(q)
  local k, v
  local cached = cr.cache and cr.cache[idx]
  if cached then
    k, v = S:view(cached.k), S:view(cached.v)
  else
    local k0 = layers.linear(S, cr.states, l.k, cr.rows)
    k = rms(S, m, k0, l.k_norm, cr.rows * m.kv_heads, "k_norm")
    S:drop(k0)
    v = layers.linear(S, cr.states, l.v, cr.rows)
    if cr.cache then cr.cache[idx] = { k = S:view(k), v = S:view(v) } end
  end
  local mask = ctx.past == 0 and cr.mask or nil
  if cr.cache and idx == cr.last then
    -- generation: the states and their mask are the prefill's only
    S:drop(cr.states)
    cr.states, cr.mask = nil, nil
  end
  local attn, weights = layers.eager_attention(S, qn, k, v, mask, {
    batch = ctx.batch, heads = m.heads, kv_heads = m.kv_heads, tq = ctx.seq, tk = cr.tokens,
    head_dim = m.head_dim, impl = ctx.attention }, "cross_attn")
  local o = layers.linear(S, attn, l.o, rows)
  S:drop(attn, qn, k, v, n1)
  -- tanh(gate) * o: the gate's gradient needs o
  local g = S:op1("cross_attn_attn_gate", o.n, o.dt, o, o)
  S:drop(o)
  local h1 = layers.add(S, x, g, "residual")
  S:drop(g)
  local n2 = rms(S, m, h1, l.ln2, rows, "post_attention_layernorm")
  local d = layers.swiglu(S, n2, l.mlp, rows, "mlp")
  S:drop(n2)
  if cr.row_mask ~= false then -- full_text_row_masked_out_mask * the MLP output
    local masked = S:op1("full_text_row_masked_out_mask", d.n, d.dt, d)
    S:drop(d)
    d = masked
  end
  local g2 = S:op1("cross_attn_mlp_gate", d.n, d.dt, d, d)
  S:drop(d)
  local out = layers.add(S, h1, g2, "residual")
  S:drop(g2, h1, weights)
  if mask and not cr.mask then S:drop(mask) end
  return out
end

local function layer_forward(S, P, l, x, ctx, idx)
  if l.cross then return cross_forward(S, P, l, x, ctx, idx) end
  local m, rows = P.m, ctx.rows
  local hd = m.head_dim
  local n1 = l.ln1 and rms(S, m, x, l.ln1, rows, "input_layernorm") or S:view(x)
  local qe, ke, v
  if m.mla then
    qe, ke, v = mla_qkv(S, m, l, n1, ctx)
  else
    local q, k
    if l.qkv then -- qkv_proj, then q/k/v are slices of one tensor
      local qkv = layers.linear(S, n1, l.qkv, rows)
      q, k, v = S:view(qkv), S:view(qkv), S:view(qkv)
      q.n, k.n, v.n = rows * m.heads * hd, rows * m.kv_heads * hd, rows * m.kv_heads * hd
      S:drop(qkv)
    else
      q = layers.linear(S, n1, l.q, rows)
      k = layers.linear(S, n1, l.k, rows)
    end
    if m.qk_norm then
      local head = m.qk_norm == "head"
      local qn = rms(S, m, q, l.q_norm, head and rows * m.heads or rows, "q_norm")
      S:drop(q)
      q = qn
      local kn = rms(S, m, k, l.k_norm, head and rows * m.kv_heads or rows, "k_norm")
      S:drop(k)
      k = kn
    end
    if not v then v = layers.linear(S, n1, l.v, rows) end
    qe = layers.rope(S, q, ctx.cos, ctx.sin, "rope.q")
    ke = layers.rope(S, k, ctx.cos, ctx.sin, "rope.k")
    S:drop(q, k)
  end
  local tk = ctx.seq
  local kk, vv = ke, v
  local k_contig = false
  if ctx.cache then
    local c = ctx.cache[idx]
    if c then -- DynamicCache: torch.cat([old, new]) per step
      local kept = cache_kept(m, idx, c.k.n // ke.n) -- tokens of one step's size held
      local nk = S:new_tensor((kept + 1) * ke.n, ke.dt, "kv_cache.cat", false, "kv_cache")
      local nv = S:new_tensor((kept + 1) * v.n, v.dt, "kv_cache.cat", false, "kv_cache")
      S:drop(c.k, c.v)
      c.k, c.v = nk, nv
      tk = kept + ctx.seq
    else
      c = { k = S:view(ke), v = S:view(v) }
      ctx.cache[idx] = c
      tk = ctx.past + ctx.seq
    end
    kk, vv = c.k, c.v
    k_contig = ctx.past > 0 -- cat output is contiguous
  end
  local attn, weights = layers.eager_attention(S, qe, kk, vv, ctx.mask, {
    batch = ctx.batch, heads = m.heads, kv_heads = m.mla and m.heads or m.kv_heads, tq = ctx.seq,
    tk = tk, head_dim = hd, v_dim = m.mla and m.mla.v_dim or hd, k_contiguous = k_contig,
    q_contiguous = m.mla ~= nil, impl = ctx.attention, softcap = m.attn_softcap,
    sinks = l.sinks }, "attn")
  local o = layers.linear(S, attn, l.o, rows)
  -- the normed input stays bound in DecoderLayer.forward until self_attn returns
  S:drop(attn, qe, ke, v, n1)
  if m.norms ~= "pre" then -- Gemma 2/3, GLM-4: post_attention_layernorm on the output
    local on = rms(S, m, o, l.ln2, rows, "post_attention_layernorm")
    S:drop(o)
    o = on
  end
  local h1 = layers.add(S, x, o, "residual")
  S:drop(o)
  local n2
  if m.norms == "pre" then n2 = rms(S, m, h1, l.ln2, rows, "post_attention_layernorm")
  elseif m.norms == "sandwich" then n2 = rms(S, m, h1, l.ln3, rows, "pre_feedforward_layernorm")
  else n2 = S:view(h1) end
  local d, mem
  if l.moe then
    local kept
    d, mem, kept = require("stdlib.moe").forward(S, n2, l.moe, rows, { label = "moe",
      impl = ctx.moe_impl, keep_logits = ctx.router_logits ~= nil, train = ctx.train })
    if kept then ctx.router_logits[#ctx.router_logits + 1] = kept end
  elseif l.mlp.gate_up then -- gate_up_proj, chunk(2), act(gate) * up
    local gu = layers.linear(S, n2, l.mlp.gate_up, rows)
    local half = { id = gu.id, n = gu.n // 2, dt = gu.dt, b = gu.b // 2, rg = gu.rg }
    local act = S:op1("mlp.act", half.n, gu.dt, gu, gu)
    local prod = S:new_tensor(half.n, gu.dt, "mlp.mul", S:rg(act, gu))
    S:node_own("mlp.mul", prod, nil, act, gu, act, gu)
    S:drop(act, gu)
    d = layers.linear(S, prod, l.mlp.down, rows)
    S:drop(prod)
  else
    d = layers.swiglu(S, n2, l.mlp, rows, "mlp")
  end
  S:drop(n2)
  if l.ln4 then -- post_feedforward_layernorm
    local dn = rms(S, m, d, l.ln4, rows, "post_feedforward_layernorm")
    S:drop(d, mem)
    d, mem = dn, nil
  end
  local out = layers.add(S, h1, d, "residual")
  S:drop(d, mem, h1, weights)
  return out
end

-- Grad-free layers (inference, log-probs, prefill, decode), identical ones:
-- each replays the events of the one before from where it left the tape,
-- higher by what it kept -- its KV cache, nothing else (checked on layer 2,
-- category by category). So the middle layers' peaks are all below the
-- last layer's: layers 1, 2 and n are simulated, and layers 3 .. n-1 only
-- make their caches as layer 2 did, out of the timeline, which gets layer
-- 2's events once for each of them instead (tests/lua/test_fastpath.lua
-- compares). A layer may also keep less than it found (the first decode
-- step after an MLA prefill: a view holding kv_b_proj's output gives way
-- to a cache of its elements): then each layer's peak is below the one
-- before's, layer 2's the highest, and the middle layers are skipped the
-- same way. Of layers 1, 2 and n one runs: the others replay its echo
-- where their input and cache entry are alike to its own. Returns the
-- last layer's output; runs every layer when layer 2 kept anything else.
-- ls, n, off (optional): the stack is ls[1 .. n], the model's layers off +
-- 1 .. off + n (a uniform tail, D.uniform_tail); else P.layers, all of them.
function D.grad_free_layers(S, P, h, ctx, ls, n, off)
  ls, n, off = ls or P.layers, n or P.m.layers, off or 0
  local tape, cache = S.tape, ctx.cache
  if cache and off > 0 then -- the stack's own view of the model's caches
    local all = cache
    cache = setmetatable({}, {
      __index = function(_, i) return all[off + i] end,
      __newindex = function(_, i, v) all[off + i] = v end })
  end
  local function run_layer(i)
    local out = layer_forward(S, P, ls[i], h, ctx, off + i)
    S:drop(h)
    h = out
  end
  -- layer i's cache entry as it stands (decode replaces its k and v)
  local function entry(i)
    local c = cache and cache[i]
    return c and { k = c.k, v = c.v }
  end
  -- layers 1 and 2 echoed (stdlib/compose.lua M.layers says when): e =
  -- {copy, input, output, old and new cache entry}, nil when spoiled
  local mt = getmetatable(ls)
  local G = mt and mt.group
  local echo = G and G.count == n and not S.autocast
  local function run_echoed(i)
    local e = { copy = i - 1, input = h, old = entry(i) }
    tape:echo()
    run_layer(i)
    if not tape:echo_end() then return nil end
    e.output, e.new = h, entry(i)
    return e
  end
  -- layer i replays echo e on h, its cache in place of e's (alike: the
  -- same sizes) and its parameters layer i's; false when h or the cache
  -- is not alike to e's
  local function replay(e, i)
    local old, c, new = e.old, cache and cache[i], e.new
    if not compose.alike(e.input, h) or not (old and c and compose.alike(old.k, c.k)
      and compose.alike(old.v, c.v) or not old and not c) then
      return false
    end
    local ids = { e.input.id, h.id }
    if old then
      ids[3], ids[4], ids[5], ids[6] = old.k.id, c.k.id, old.v.id, c.v.id
    end
    local lo = G.first + e.copy * G.stride
    local out, k, v = tape:echo_replay(ids, lo, lo + G.stride, (i - 1 - e.copy) * G.stride,
      { e.output.id, new and new.k.id or e.output.id, new and new.v.id or e.output.id })
    if new then
      c = c or {}
      cache[i] = c
      c.k, c.v = compose.moved(new.k, k), compose.moved(new.v, v)
    end
    h = compose.moved(e.output, out)
    return true
  end
  local e = echo and run_echoed(1)
  if not echo then run_layer(1) end
  local old = entry(2)
  local before = tape:live_by_category()
  local first = S.timeline and tape:timeline_len() + 1
  -- layer 2 replays layer 1 where alike (the embeddings' output is), else
  -- runs echoed itself
  if not (e and replay(e, 2)) then
    if echo then e = run_echoed(2) else run_layer(2) end
  end
  local after = tape:live_by_category()
  local last = S.timeline and tape:timeline_len()
  local new = cache and cache[2]
  -- what layer 2 kept, by category, and what its cache accounts for
  local kept, want = {}, {}
  for cat, b in pairs(after) do kept[cat] = b - before[cat]; want[cat] = 0 end
  local made_in = old and "kv_cache" or S.cat -- a prefill cache views the layer's own k, v
  if new then want[made_in] = new.k.b + new.v.b end
  if old then
    local from = "kv_cache" -- the category old caches were made in: where layer 2 freed
    for cat, b in pairs(kept) do if b < 0 and cat ~= "kv_cache" then from = cat end end
    want[from] = want[from] - old.k.b - old.v.b
  end
  for cat, b in pairs(kept) do
    if b ~= want[cat] then -- something else outlives a layer: simulate them all
      for i = 3, n do run_layer(i) end
      return h
    end
  end
  if first then tape:timeline(false) end
  -- a cache entry as layer 2's holds it: its bytes, not its elements' (a
  -- prefill cache is a view; MLA's value states keep kv_b_proj's whole
  -- output alive, k_nope beside v)
  local function like(x)
    return { id = tape:alloc(x.b, made_in, "kv_cache.composed"), n = x.n, dt = x.dt, b = x.b,
      rg = false }
  end
  for i = 3, n - 1 do
    local c = cache and cache[i]
    if c then S:drop(c.k, c.v) end
    if new then
      local k, v = like(new.k), like(new.v)
      if c then c.k, c.v = k, v else cache[i] = { k = k, v = v } end
    end
  end
  if first then
    tape:timeline(true)
    tape:timeline_repeat(first, last, n - 3)
  end
  -- layer n replays the echo on layer 2's output
  if not (e and replay(e, n)) then run_layer(n) end
  return h
end

-- What a checkpointed segment reads from outside it: its input, the mask
-- and rope tables, and (mllama's cross-attention layers) the vision states
-- and their mask, whose gradient the recomputation must still reach.
function D.ckpt_inputs(x, ctx)
  local ins = { x, ctx.mask or ctx.cos, ctx.cos, ctx.sin }
  local cr = ctx.cross
  if cr and cr.states then ins[#ins + 1] = cr.states end
  if cr and cr.mask then ins[#ins + 1] = cr.mask end
  return ins
end

-- ls, n, off (optional): as in D.grad_free_layers.
function D.composed_layers(S, P, h, ctx, run, ls, n, off)
  ls, n, off = ls or P.layers, n or P.m.layers, off or 0
  local function one(i, x)
    local out
    if run.ckpt then
      S:checkpoint_begin()
      out = layer_forward(S, P, ls[i], x, ctx, off + i)
      S:checkpoint_end(D.ckpt_inputs(x, ctx), { out }, "checkpoint")
    else
      out = layer_forward(S, P, ls[i], x, ctx, off + i)
    end
    S:drop(x)
    return out
  end
  return compose.layers(S, ls, n, one, h, "layers.composed", D.externals(ctx))
end

-- The tensors a layer reads besides its input and parameters (layers kept
-- across simulations map them, stdlib/compose.lua).
function D.externals(ctx)
  local out = {}
  for _, k in ipairs({ "mask", "cos", "sin" }) do
    if ctx[k] then out[#out + 1] = ctx[k] end
  end
  return out
end

-- DecoderModel.forward from input embeddings `emb` (rows, H) that the caller
-- owns. Returns the final-norm output. run: {batch, seq, past, cache, ckpt}
function D.forward(S, P, emb, run)
  local m = P.m
  local B, T, past = run.batch, run.seq, run.past or 0
  local rows, dt = B * T, emb.dt
  local kv = past + T
  local cache_pos = S:new_tensor(T, "int64", "cache_position", false)
  -- eager_mask: bool (1,1,T,KV) -> expanded contiguous (B,1,T,KV) -> where()
  -- (sdpa/flash: causal without a mask tensor)
  local mask
  if (run.attention or "eager") == "eager" then
    local small = S:new_tensor(T * kv, "uint8", "mask.compare", false)
    local boolm = S:new_tensor(B * T * kv, "uint8", "mask.bool", false)
    S:drop(small)
    mask = S:new_tensor(B * T * kv, dt, "mask.float", false)
    S:drop(boolm)
  end
  -- rotary: fp32 math under no_grad, cos/sin cast to the activation dtype
  local hd = m.mla and m.mla.rope or m.head_dim
  local pos_f = S:new_tensor(T, "fp32", "rotary.positions", false)
  local inv = dt ~= "fp32" and S:new_tensor(hd // 2, "fp32", "rotary.inv_freq_float", false)
  local freqs = S:new_tensor(T * hd // 2, "fp32", "rotary.freqs", false)
  local emb2 = S:new_tensor(T * hd, "fp32", "rotary.emb", false)
  local function trig(label)
    local raw = S:new_tensor(T * hd, "fp32", label, false)
    local scaled = S:new_tensor(T * hd, "fp32", label, false)
    S:drop(raw)
    if dt == "fp32" then return scaled end
    local c = S:new_tensor(T * hd, dt, label, false)
    S:drop(scaled)
    return c
  end
  local cos, sin = trig("rotary.cos"), trig("rotary.sin")
  S:drop(pos_f, inv or nil, freqs, emb2)
  local ctx = { rows = rows, batch = B, seq = T, past = past, mask = mask, cos = cos, sin = sin,
    cache = run.cache, attention = run.attention, moe_impl = run.moe_impl,
    router_logits = run.router_logits, cross = P.cross, train = run.mode == "train" }
  local h = S:view(emb)
  -- checkpointing: every layer (ckpt), every n-th layer (ckpt_every), or
  -- segments of k consecutive layers recomputed together (ckpt_segment)
  local seg = run.ckpt_segment or 1
  -- the expert loop skips an expert that got no token, and its weights then
  -- get no gradient in that layer: the composed layers' backward (every
  -- parameter's gradient, stdlib/compose.lua) would not repeat the walked
  -- layer's, so such steps walk every layer
  local composable = (m.uniform or P.tail) and not ctx.router_logits
    and not D.idle_experts(m, ctx)
  -- the stack that composes: every layer, or the uniform tail after the
  -- first layers (walked one by one first; D.uniform_tail)
  local off = P.tail and D.uniform_tail(m) - 1 or 0
  local ls, n = P.tail or P.layers, m.layers - off
  -- one step of the walk from layer i on h (dropped): a checkpointed
  -- segment (every ckpt_every-th layer, ckpt_segment layers long) or one
  -- layer; returns the next layer's index and the output
  local every = run.ckpt_every or 1
  -- a segment's layers of the stack's group (layer j its copy j - off - 1)
  -- echo one another (compose.chain); not under autocast (its casts are
  -- Lua state), nor with compose = false (the tests' walk)
  local gmt = composable and run.compose ~= false and not S.autocast and not ctx.cache
    and getmetatable(P.tail or P.layers)
  local G = gmt and gmt.group
  local function walk(i, x)
    local last = math.min(i + seg - 1, m.layers)
    if run.ckpt and S.grad and (i - 1) % every == 0 then
      local c0 = i - off - 1
      S:checkpoint_begin()
      local out = compose.chain(S, G and c0 >= 0 and c0 + last - i < G.count and G or nil, c0,
        last - i + 1, function(k, y) return layer_forward(S, P, P.layers[i + k - 1], y, ctx,
          i + k - 1) end, x)
      S:checkpoint_end(D.ckpt_inputs(x, ctx), { out }, "checkpoint")
      S:drop(x)
      return last + 1, out
    end
    local out = layer_forward(S, P, P.layers[i], x, ctx, i)
    S:drop(x)
    return i + 1, out
  end
  -- layers 1 .. off, before a composed tail (one layer a step there: the
  -- tail composes only without segments, or grad-free)
  local function walk_head(x)
    local i = 1
    while i <= off do i, x = walk(i, x) end
    return x
  end
  if composable and compose.enabled(S, n, run) then
    h = D.composed_layers(S, P, walk_head(h), ctx, run, ls, n, off)
    local normed = P.norm and final_norm(S, m, h, P.norm, rows) or S:view(h)
    S:drop(h, cache_pos, mask, cos, sin)
    return normed
  end
  if not S.grad and S.composable and (m.uniform or P.tail) and not m.sliding_layers
    and not ctx.router_logits and n >= 4 then
    h = D.grad_free_layers(S, P, walk_head(h), ctx, ls, n, off)
    local normed = P.norm and final_norm(S, m, h, P.norm, rows) or S:view(h)
    S:drop(h, cache_pos, mask, cos, sin)
    return normed
  end
  local i = 1
  -- checkpointing every n-th layer or in segments: the walk repeats every
  -- `period` layers (one segment, then plain layers up to the next
  -- checkpointed one), so whole periods compose as units of layers
  -- (stdlib/compose.lua), the layers left over walked after them. Drawn,
  -- the units' timeline is composed as plain layers' is (the middle units'
  -- forward one block, their backward one excursion each: fewer events than
  -- the walk, the same peak; tests/lua/test_compose.lua compares the answers
  -- with compose = false)
  local period = every * ((seg + every - 1) // every)
  -- the units start at the group's first layer (a uniform tail's: the
  -- layers before it walked), or at the next layer that starts a period
  local f = off + 1
  local a = f + (period - off % period) % period
  local units = (m.layers - a + 1) // period
  if run.ckpt and period > 1 and composable and compose.enabled(S, units, run, true) then
    while i < a do i, h = walk(i, h) end
    -- units 1, 2 and the last are walked, the others' gradients read off
    -- the layers' group (stdlib/compose.lua) or their tables (made on read)
    local mt = getmetatable(P.tail or P.layers)
    local ls = setmetatable({}, { group = mt and mt.group, per = period, skip = a - f,
      __index = function(t, u)
        local l = {}
        for j = a + (u - 1) * period, a + u * period - 1 do l[#l + 1] = P.layers[j] end
        rawset(t, u, l)
        return l
      end })
    h = compose.layers(S, ls, units, function(u, x)
      local j, stop = a + (u - 1) * period, a + u * period
      while j < stop do j, x = walk(j, x) end
      return x
    end, h, "layers.composed", D.externals(ctx))
    i = a + units * period
  end
  while i <= m.layers do i, h = walk(i, h) end
  local normed = P.norm and final_norm(S, m, h, P.norm, rows) or S:view(h)
  S:drop(h, cache_pos, mask, cos, sin)
  return normed
end

-- lm_head over the last `keep` positions (0 = all).
function D.logits(S, P, hidden, run, keep)
  local B, T = run.batch, run.seq
  local rows = (keep and keep > 0) and B * keep or B * T
  local x = hidden
  if keep and keep > 0 and keep < T then
    x = { id = hidden.id, n = rows * P.m.hidden, dt = hidden.dt, b = hidden.b, rg = hidden.rg }
  end
  if P.m.factor and P.m.tie then -- (h @ proj.weight) @ embed.weight^T
    local r = P.m.factor
    local small = layers.linear(S, x, { w = P.embed_proj.w, inn = P.m.hidden, out = r,
      label = "lm_head.unproject" }, rows)
    local logits = layers.linear(S, small, { w = P.embed, inn = r, out = P.m.vocab,
      label = "lm_head" }, rows)
    S:drop(small)
    return logits, rows
  end
  local logits = layers.linear(S, x, P.head, rows)
  if P.m.final_softcap then -- Gemma 2: logits / cap, tanh, * cap
    logits = layers.softcap(S, logits, "final_logit_softcapping")
  end
  return logits, rows
end

function D.embed(S, P, rows)
  if P.recv then return S:view(P.recv) end -- a later pipeline stage's input
  if P.m.factor then
    local small = layers.embedding(S, P.embed, rows, P.m.factor, "embed_tokens", P.m.tie)
    local out = layers.linear(S, small, P.embed_proj, rows)
    S:drop(small)
    return out
  end
  local e = layers.embedding(S, P.embed, rows, P.m.hidden, "embed_tokens", P.m.tie)
  if P.embed_lora then e = layers.embedding_lora(S, e, P.embed_lora, rows, "embed_tokens") end
  if P.m.embed_scale then -- Gemma: embeddings * sqrt(hidden_size) in the model dtype
    local sc = S:op1("embed_tokens.scale", e.n, e.dt, e)
    S:drop(e)
    e = sc
  end
  return e
end

return D
