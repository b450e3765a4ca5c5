-- Run specs (YAML or JSON, DESIGN.md) to the run table that stdlib/step.lua
-- simulates. Every field is checked; unknown fields are errors with a
-- "did you mean" hint. Truth cases ({id, family, config, run}) are the same
-- schema's measured dialect and go through stdlib/truth.lua.
--
-- `families` is the model registry (models/registry.lua), handed in by the
-- caller: stdlib never requires models/. It is asked once per spec:
-- families.find(cfg, where) gives the family module (models/README.md),
-- families.truth(name) a measured case's simulator module.
local vram = require("vram")
local errors = require("stdlib.errors")
local cfgutil = require("stdlib.config")

local M = {}

local check_keys = errors.keys

local function dtype(where, field, v, default)
  if v == nil then return default end
  local name = type(v) == "string" and vram.dtype(v)
  if not name then
    errors.input(where, field, ("unknown dtype '%s'"):format(tostring(v)))
  end
  return name
end

local function one_of(where, field, v, list, default)
  if v == nil then return default end
  for _, x in ipairs(list) do if x == v then return v end end
  errors.input(where, field, ("must be one of %s, got '%s'"):format(table.concat(list, ", "),
    tostring(v)))
end

-- Loads a JSON or YAML file by extension.
function M.load_file(path)
  if path:match("%.ya?ml$") then
    local doc, lines = vram.yaml.load(path, true)
    errors.locate(path, doc, lines) -- an error naming a field of the file gives its line
    return doc
  end
  return vram.json.load(path)
end

local function dirname(p) return p:match("^(.*)/[^/]*$") or "." end

-- Finds a config named in a spec: relative to the spec, then the share dir.
function M.resolve(path, spec_dir, spec_file, families)
  local tries = { path:sub(1, 1) == "/" and path or spec_dir .. "/" .. path }
  -- a built-in command may read what a spec named on its command line names
  if vram.allow_named and spec_file then pcall(vram.allow_named, tries[1], spec_file) end
  if path:sub(1, 1) ~= "/" then
    for _, root in ipairs(vram.search_roots or { vram.share_dir }) do
      tries[#tries + 1] = root .. "/" .. path
      tries[#tries + 1] = root .. "/examples/configs/" .. path
    end
  end
  local refusal
  for _, p in ipairs(tries) do
    local ok, v = pcall(M.load_file, p)
    if ok then return p, v end
    -- a file that exists but does not parse is the answer, with its error
    if type(v) == "string" and (v:find(": json: ", 1, true) or v:find(": yaml: ", 1, true)) then
      error(v, 0)
    end
    -- a directory, or a refusal of a path that climbs out, says more than
    -- "not found"
    local climbs = path:sub(1, 1) == "/" or path:find("..", 1, true)
    if type(v) == "string" and not refusal and (v:find("is a directory", 1, true)
        or (climbs and v:find("outside the sandbox", 1, true))) then
      refusal = v
    end
  end
  local where = spec_file or spec_dir
  -- a folder holding config.json, or a Hugging Face hub id (the local hub
  -- cache, then a preset that records it): stdlib/resolve.lua
  local res = require("stdlib.resolve")
  local folder = refusal and refusal:find("is a directory", 1, true)
  if folder or res.is_hub_id(path) then
    -- families: the model registry, whose presets record hub ids
    local ok, r = pcall(res.model, path, { base_dir = spec_dir,
      presets = families and families.PRESETS, preset_path = families and families.preset_path,
      where = where, field = "model.config" })
    if ok then return r.path, r.config end
    -- a folder without config.json: say so, not that a hub id is unknown
    if not folder then error(r, 0) end
    errors.input(where, "model.config", refusal .. " holding no config.json")
  end
  if refusal then errors.input(where, "model.config", refusal) end
  errors.input(where, "model.config", ("cannot find '%s' (looked beside the spec and in %s)")
    :format(path, vram.share_dir))
end

local RUN_KEYS = { mode = 1, batch = 1, seq = 1, grad_accum = 1, precision = 1, optimizer = 1,
  grad_checkpointing = 1, attention = 1, loss = 1, lora = 1, freeze = 1, framework = 1, gpu = 1,
  generate_tokens = 1, images = 1, checkpoint_segment = 1, rl = 1, moe = 1, fp8 = 1,
  undisposed_steps = 1, xla = 1, load = 1 }

-- A list of strings (module leaf names, tower names).
function M.names(v, where, field)
  if type(v) ~= "table" or (next(v) ~= nil and v[1] == nil) then
    errors.input(where, field, "must be a list of names, got " .. tostring(v))
  end
  for i, x in ipairs(v) do
    if type(x) ~= "string" then
      errors.input(where, field .. "[" .. i .. "]", "must be a name, got " .. tostring(x))
    end
  end
  return v
end

M.TOWERS = { "vision", "llm", "projector", "embeddings" }

function M.towers(v, where, field)
  if v == nil then return {} end
  M.names(v, where, field)
  for i, x in ipairs(v) do
    local ok = false
    for _, t in ipairs(M.TOWERS) do ok = ok or t == x end
    if not ok then
      local hint = errors.suggest(x, M.TOWERS)
      errors.input(where, field .. "[" .. i .. "]", ("unknown part '%s'%s (known: %s)"):format(x,
        hint and ("; did you mean '" .. hint .. "'?") or "", table.concat(M.TOWERS, ", ")))
    end
  end
  return v
end

-- Sizes whose products the simulator forms must stay far inside int64 and
-- loops must stay bounded: checked here, with the field named, instead of
-- wrapping silently later.
M.LIMITS = { batch = 1 << 24, seq = 1 << 24, layers = 4096, generate_tokens = 1 << 16,
  hidden = 1 << 20, vocab = 1 << 31, rank = 1 << 20, images = 1 << 12 }

function M.check_sizes(r, where)
  local function cap(v, limit, field)
    if v and v > limit then
      errors.input(where, field, ("%d is too large: sizes stay within %d here so that no "
        .. "product of them can overflow int64"):format(v, limit))
    end
  end
  cap(r.batch, M.LIMITS.batch, "run.batch")
  cap(r.seq, M.LIMITS.seq, "run.seq")
  cap(r.generate_tokens, M.LIMITS.generate_tokens, "run.generate_tokens")
  cap(r.lora and r.lora.r, M.LIMITS.rank, "run.lora.rank")
  for _, m in ipairs({ r.text or false, r.vision or false }) do
    if m then
      cap(m.layers or m.num_hidden_layers, M.LIMITS.layers, "num_hidden_layers")
      cap(m.hidden or m.hidden_size, M.LIMITS.hidden, "hidden_size")
      cap(m.intermediate or m.intermediate_size, M.LIMITS.hidden * 16, "intermediate_size")
      cap(m.vocab, M.LIMITS.vocab, "vocab_size")
      cap(m.heads or m.num_attention_heads, M.LIMITS.hidden, "num_attention_heads")
    end
  end
  -- the largest tensors of a step, in checked arithmetic; an overflow
  -- names the product and the sizes in it
  local t = r.text
  if t then
    local seq = r.seq + (r.generate_tokens or 0) + 65536 -- room for image tokens
    local function product(fields, ...)
      local ok = pcall(vram.mul, ...)
      if not ok then
        local vals = { ... }
        local names = {}
        for i, f in ipairs(fields) do names[i] = ("%s (%d)"):format(f, vals[i]) end
        errors.input(where, fields[1], ("the %s of this run, %s x %d bytes, overflow int64")
          :format(fields.what, table.concat(names, " x "), vals[#vals]))
      end
    end
    local tokens = "run.seq + generated + 65536 image tokens"
    product({ "run.batch", tokens, "vocab_size", what = "logits" }, r.batch, seq, t.vocab, 8)
    product({ "run.batch", "num_attention_heads", tokens, tokens, what = "attention scores" },
      r.batch, t.heads, seq, seq, 4)
    product({ "vocab_size", "hidden_size", what = "embedding" }, t.vocab, t.hidden, 16)
    product({ "num_hidden_layers", "hidden_size", "intermediate_size", "3 projections",
      what = "MLP weights" }, t.layers, t.hidden, t.intermediate, 3, 16)
  end
  return r
end

-- The readers below each take one part of a spec's `run:` (field names as
-- the user writes them) to the run table's fields (stdlib/run.lua).

-- run.precision: parameters, compute dtype, fp32 masters under autocast.
-- The spec's default is bf16 parameters computing in bf16.
local function read_precision(prec, where)
  check_keys(prec, { params = 1, compute = 1, master = 1, grads = 1, weights = 1,
    forward_weights = 1, dequantize = 1, kbit_prepare = 1, weights_compute = 1 }, where,
    "run.precision.")
  local pdt = dtype(where, "run.precision.params", prec.params, "bf16")
  local mixed = prec.master ~= nil and prec.master ~= "none"
  local compute = dtype(where, "run.precision.compute", prec.compute, pdt)
  return { param_dtype = mixed and dtype(where, "run.precision.master", prec.master) or pdt,
    dtype = compute, autocast = mixed and compute or nil }
end

-- run.optimizer: a name or { name, state_dtype, foreach, weight_decay,
-- momentum_dtype }; stdlib/run.lua fills what follows from the run.
local function read_optimizer(opt, trains, where)
  -- (a name alone is the field run.optimizer, whose line errors give)
  local field = type(opt) == "string" and "run.optimizer" or "run.optimizer.name"
  if type(opt) == "string" then opt = { name = opt } end
  check_keys(opt, { name = 1, state_dtype = 1, foreach = 1, weight_decay = 1,
    momentum_dtype = 1, paged = 1 }, where, "run.optimizer.")
  local name = one_of(where, field, opt.name, require("stdlib.optim").names,
    trains and "adamw" or "none")
  -- bitsandbytes' paged optimizers (stdlib/optim.lua)
  local paged = cfgutil.reader(opt, where, "run.optimizer."):bool("paged", false)
  if paged and not (name == "adamw" or name == "adam" or name == "adam8bit" or name == "lion") then
    errors.input(where, "run.optimizer.paged", "bitsandbytes pages adam, adamw, adam8bit and "
      .. "lion, not " .. name)
  end
  return {
    paged = paged or nil,
    name = name,
    foreach = opt.foreach,
    weight_decay = opt.weight_decay,
    state_dtype = dtype(where, "run.optimizer.state_dtype", opt.state_dtype),
    momentum_dtype = dtype(where, "run.optimizer.momentum_dtype", opt.momentum_dtype),
  }
end

-- run.grad_checkpointing: none | full | N (every N-th layer), and
-- run.checkpoint_segment: segments of N layers recomputed together.
local function read_checkpointing(run, rd, where)
  local ckpt, every = run.grad_checkpointing or "none", nil
  if math.type(ckpt) == "integer" and ckpt >= 1 then
    ckpt, every = "full", ckpt
  elseif ckpt ~= "none" and ckpt ~= "full" then
    errors.input(where, "run.grad_checkpointing", ("must be none, full or an integer N >= 1 "
      .. "(every N-th layer), got '%s'"):format(tostring(ckpt)))
  end
  if run.checkpoint_segment then return true, every, rd:int("checkpoint_segment") end
  return ckpt == "full", every, nil
end

-- run.loss (stdlib/loss.lua): the implementation and its options; sets the
-- run's loss fields in f. upcast and num_items_in_batch change Hugging
-- Face's cross-entropy only (the other losses fix their own dtype and
-- reduction).
local function read_loss(loss, f, where)
  local field = type(loss) == "string" and "run.loss" or "run.loss.impl" -- (as the optimizer's)
  if type(loss) == "string" then loss = { impl = loss } end
  check_keys(loss, { impl = 1, chunk_rows = 1, chunk_tokens = 1, upcast = 1,
    num_items_in_batch = 1 }, where, "run.loss.")
  local lrd = cfgutil.reader(loss, where, "run.loss.")
  f.loss = one_of(where, field, loss.impl, { "cross_entropy", "one_hot", "chunked",
    "hf_legacy", "shift_float", "litgpt_chunked", "liger_fused" }, "cross_entropy")
  f.loss_chunk = lrd:int("chunk_rows", 1024)
  f.loss_chunk_tokens = lrd:int("chunk_tokens", 128) -- litgpt's lm_head_chunk_size
  f.loss_upcast = lrd:bool("upcast", true)
  f.loss_num_items = lrd:bool("num_items_in_batch", false)
  f.loss_where = where
  if (loss.upcast ~= nil or loss.num_items_in_batch ~= nil) and f.loss ~= "cross_entropy" then
    errors.input(where, loss.upcast ~= nil and "run.loss.upcast" or "run.loss.num_items_in_batch",
      "applies to impl cross_entropy only, not " .. f.loss)
  end
  if not f.loss_upcast and f.autocast then
    errors.input(where, "run.loss.upcast", "false under autocast is not modelled (autocast "
      .. "runs the log-softmax in fp32 itself)")
  end
end

-- run.load (stdlib/load.lua): how the weights reach the device.
-- low_cpu_mem_usage (transformers' meta-device loading) changes host memory
-- only: accepted, said so.
local function read_load(ld, f, where, parallel)
  if type(ld) ~= "table" then errors.input(where, "run.load", "must be a mapping") end
  check_keys(ld, { from = 1, cast = 1, low_cpu_mem_usage = 1 }, where, "run.load.")
  local r = { from = dtype(where, "run.load.from", ld.from),
    cast = one_of(where, "run.load.cast", ld.cast, { "host", "tensor", "device" }, "host") }
  cfgutil.reader(ld, where, "run.load."):bool("low_cpu_mem_usage", true)
  if ld.low_cpu_mem_usage ~= nil then
    r.note = "load.low_cpu_mem_usage changes host memory only (the model built on the meta "
      .. "device or on the CPU); the device sees the same tensors arrive"
  end
  if f.rl or parallel then
    errors.input(where, "run.load", "the load phase of an RL update or a multi-GPU layout "
      .. "(FSDP's rank-0 loading) is not modelled")
  end
  f.load = r
end

-- run.rl (modes ppo and grpo): rollout, stored log-probs, minibatch steps
-- (stdlib/rl.lua). The minibatch defaults to the whole batch; GRPO has no
-- critic.
local function read_rl(rl, mode, batch, where)
  rl = rl or {}
  check_keys(rl, { new_tokens = 1, minibatch = 1, reference = 1, value = 1 }, where, "run.rl.")
  local rr = cfgutil.reader(rl, where, "run.rl.")
  return { new_tokens = rr:int("new_tokens", 64), minibatch = rr:int("minibatch", batch),
    reference = rr:bool("reference", true), value = rr:bool("value", mode == "ppo") }
end

-- run.lora: { rank, alpha (default 2 x rank), targets (default: the
-- attention projections, stdlib/step.lua) }.
-- dora, dropout, rslora and modules_to_save as peft's LoraConfig has them
-- (use_dora, lora_dropout, use_rslora; stdlib/layers.lua).
local function read_lora(lo, where)
  check_keys(lo, { rank = 1, alpha = 1, targets = 1, dora = 1, dropout = 1, rslora = 1,
    modules_to_save = 1 }, where, "run.lora.")
  local lr = cfgutil.reader(lo, where, "run.lora.")
  if lo.targets ~= nil and lo.targets ~= "all-linear" then
    M.names(lo.targets, where, "run.lora.targets")
  end
  local r = lo.targets == nil and require("stdlib.step").default_lora(lr:int("rank"),
    lr:num("alpha", 2 * lr:int("rank"))) or { r = lr:int("rank"),
    alpha = lr:num("alpha", 2 * lr:int("rank")), targets = lo.targets }
  r.where = where
  r.dora = lr:bool("dora", false)
  r.dropout = lr:num("dropout", 0)
  if r.dropout < 0 or r.dropout >= 1 then
    errors.input(where, "run.lora.dropout", "must be in [0, 1), got " .. tostring(r.dropout))
  end
  lr:bool("rslora", false) -- scaling alpha / sqrt(rank): the same tensors, no bytes change
  if lo.modules_to_save ~= nil then
    M.names(lo.modules_to_save, where, "run.lora.modules_to_save")
    r.modules_to_save = lo.modules_to_save
  end
  return r
end

-- run.moe: how the experts run (stdlib/moe.lua), a capacity factor, and
-- whether the router logits are kept for the auxiliary loss.
local function read_moe(moe, where)
  check_keys(moe, { impl = 1, capacity_factor = 1, aux_loss = 1, imbalance = 1 }, where,
    "run.moe.")
  local mr = cfgutil.reader(moe, where, "run.moe.")
  local cf = mr:num("capacity_factor", nil)
  if cf and not (cf > 0 and cf <= 64) then
    errors.input(where, "run.moe.capacity_factor", "must be in (0, 64], got " .. tostring(cf))
  end
  -- the busiest expert's load over the balanced one (stdlib/moe.lua)
  local im = mr:num("imbalance", nil)
  if im and not (im >= 1 and im <= 1024) then
    errors.input(where, "run.moe.imbalance", "must be in [1, 1024], got " .. tostring(im))
  end
  return { impl = one_of(where, "run.moe.impl", moe.impl, { "loop", "grouped", "dense" }),
    capacity_factor = cf, aux_loss = mr:bool("aux_loss", nil), imbalance = im }
end

-- Packed weights: precision.weights (linear weights kept packed, nf4 for
-- QLoRA, nvfp4, fp8, dequantized per matmul into the compute dtype),
-- precision.forward_weights (a packed forward copy next to the trained
-- parameters: seed 002's master weights), or a quantized checkpoint
-- (config.json's quantization_config: its projections hold their stored
-- format and scales, stdlib/quant.lua).
local function read_quant(prec, r, cfg, path, where)
  local q
  if prec.weights then
    local store = dtype(where, "run.precision.weights", prec.weights)
    if store ~= r.param_dtype then q = { store = store, compute = r.dtype } end
  end
  if prec.forward_weights then
    if prec.weights then
      errors.input(where, "run.precision.forward_weights", "cannot be combined with weights")
    end
    q = { store = dtype(where, "run.precision.forward_weights", prec.forward_weights),
      compute = r.dtype, master = true }
  end
  local qc = cfg.quantization_config or (cfg.text_config or {}).quantization_config
  if qc == nil and not prec.dequantize and type(path) == "string" then
    -- NVIDIA ModelOpt checkpoints (nvidia/*-FP8, *-NVFP4) may keep their
    -- quantization in hf_quant_config.json beside a config.json without
    -- one: priced from config.json alone they would silently be bf16
    local ok, hq = pcall(vram.json.load, dirname(path) .. "/hf_quant_config.json")
    if ok and type(hq) == "table" then
      local algo = type(hq.quantization) == "table" and hq.quantization.quant_algo
      errors.input(path, "quantization_config", ("absent, but hf_quant_config.json beside it "
        .. "quantizes the checkpoint (NVIDIA ModelOpt, quant_algo %s), which is not "
        .. "modelled; set run.precision.dequantize: true to price its weights unquantized")
        :format(tostring(algo)))
    end
  end
  if qc ~= nil and not prec.dequantize then
    if prec.weights or prec.forward_weights then
      errors.input(where, "run.precision.weights", "the checkpoint is quantized "
        .. "(quantization_config); set run.precision.dequantize: true to replace its format")
    end
    if r.mode == "train" and not r.lora then
      errors.input(where, "run.lora", "a quantized checkpoint trains only through adapters in "
        .. "transformers: add run.lora, or set run.precision.dequantize: true to train "
        .. "dequantized weights")
    end
    local text = cfg.text_config or {}
    local d = require("stdlib.quant").read(qc, path,
      cfg.torch_dtype or cfg.dtype or text.torch_dtype or text.dtype)
    q = { ckpt = d, store = d.store, compute = r.dtype, dequant = d.method == "bitsandbytes" }
  end
  -- bitsandbytes' bnb_4bit_compute_dtype: the dtype Linear4bit dequantizes
  -- its weight to and multiplies in (x is cast to it, the output back), apart
  -- from the run's compute dtype; a prequantized checkpoint's config gives it
  local wc = prec.weights_compute or (q and q.ckpt and q.ckpt.compute)
  if wc ~= nil then
    if not (q and require("stdlib.layers").BNB4[q.store] and not q.master) then
      errors.input(where, "run.precision.weights_compute", "needs bitsandbytes 4-bit weights "
        .. "(precision.weights: nf4 or nf4_dq, or a bitsandbytes checkpoint)")
    end
    q.compute = dtype(where, "run.precision.weights_compute", wc)
  end
  -- peft's prepare_model_for_kbit_training (axolotl and TRL call it for
  -- QLoRA): the unquantized parameters in fp32 (models/decoder.lua)
  if cfgutil.reader(prec, where, "run.precision."):bool("kbit_prepare", false) then
    if not (q and require("stdlib.layers").BNB4[q.store] and not q.master) then
      errors.input(where, "run.precision.kbit_prepare", "needs bitsandbytes 4-bit weights "
        .. "(precision.weights: nf4 or nf4_dq, or a bitsandbytes checkpoint)")
    end
    q.prepare = true
  end
  return q
end

-- What the run's framework profile (stdlib/frameworks/) adds: te-fp8 makes
-- every projection a te.Linear over parameters in the model dtype
-- (stdlib/layers.lua; run.fp8.amax_history_len), torchsharp may keep
-- run.undisposed_steps steps' optimizer temporaries (stdlib/optim.lua).
local function read_framework_knobs(run, rd, f, where)
  local prof = require("stdlib.frameworks").get(f.framework)
  local fp8 = prof.fp8_linear
  if run.fp8 ~= nil and not fp8 then
    errors.input(where, "run.fp8", "needs run.framework te-fp8, got " .. f.framework)
  end
  if fp8 then
    if f.lora then
      errors.input(where, "run.lora", "LoRA over TransformerEngine's te.Linear is not modelled")
    end
    if f.quant then
      errors.input(where, "run.framework", "te-fp8 cannot be combined with run.precision "
        .. "weights or forward_weights, or a quantized checkpoint")
    end
    local c = run.fp8 or {}
    check_keys(c, { amax_history_len = 1 }, where, "run.fp8.")
    f.quant = { te = { amax_history_len = cfgutil.reader(c, where, "run.fp8."):int(
      "amax_history_len", fp8.amax_history_len), fwd_tensors = fp8.fwd_tensors,
      bwd_tensors = fp8.bwd_tensors }, store = "fp8_e4m3", compute = f.dtype }
  end
  if run.undisposed_steps ~= nil then
    if not prof.undisposed_temporaries then
      errors.input(where, "run.undisposed_steps", "only TorchSharp keeps undisposed "
        .. "temporaries; run.framework is " .. f.framework)
    end
    f.optimizer.undisposed_steps = rd:int("undisposed_steps", 1)
  end
  -- a jitted framework's donation and pool (stdlib/xla.lua)
  f.xla = require("stdlib.xla").read(run.xla, where, f.framework)
end

-- run.images (VLMs): { count, width, height, max_pixels }; the family's
-- processor rule (its image_tokens) turns them into tokens.
local function read_images(images, where)
  images = images or {}
  check_keys(images, { count = 1, width = 1, height = 1, max_pixels = 1 }, where, "run.images.")
  local ir = cfgutil.reader(images, where, "run.images.")
  return { count = ir:int("count", 1), width = ir:int("width", 448),
    height = ir:int("height", 448), max_pixels = ir:int("max_pixels", nil, true) }
end

-- spec.model: the config (a path, folder, hub id or preset) with its
-- overrides applied; text_only runs a VLM's language model alone.
local function read_model(model, where, families, loaded)
  check_keys(model, { config = 1, preset = 1, overrides = 1, text_only = 1 }, where, "model.")
  local src = model.config or (model.preset and (model.preset .. ".json"))
  if not src then errors.input(where, "model", "needs `config` (a path) or `preset` (a name)") end
  local path, cfg
  if loaded then
    path, cfg = loaded.path, loaded.config
  else
    path, cfg = M.resolve(src, dirname(where), where, families)
  end
  cfg = cfgutil.strip_nulls(cfg)
  if model.overrides ~= nil then
    check_keys(model.overrides, setmetatable({}, { __index = function() return 1 end }), where,
      "model.overrides.")
  end
  for k, v in pairs(model.overrides or {}) do
    if cfg.text_config and cfg.text_config[k] ~= nil then cfg.text_config[k] = v else cfg[k] = v end
  end
  return path, cfg
end

-- The family's model description for the simulator: sim, text, vision,
-- vlm. text_only: a VLM's language model alone, on the simulator module's
-- text_only counterpart.
local function describe_model(family, cfg, path, images, where, text_only)
  local m = family.read(cfg, path)
  if not family.simulator then
    errors.input(path, "model_type", ("family '%s' has no simulator yet (`vramlua params` "
      .. "counts it)"):format(family.name))
  end
  if text_only and not family.image_tokens then
    errors.input(where, "model.text_only", "the config is not a vision-language model")
  end
  local imgs
  if family.image_tokens then
    if text_only and images ~= nil then
      errors.input(where, "run.images", "model.text_only runs the language model alone")
    end
    imgs = read_images(images, where)
  elseif images ~= nil then
    errors.input(where, "run.images", ("family '%s' takes no images"):format(family.name))
  end
  local d = family.simulator(m, imgs)
  if text_only then return { sim = d.sim.text_only, text = d.text } end
  -- model_assumptions: what the family's simulator description
  -- approximates, printed as assumptions (stdlib/report.lua)
  return { sim = d.sim, text = d.text, vision = d.vision, vlm = d.vlm,
    model_assumptions = d.assumptions }
end

-- What the model allows of the run: bitsandbytes replaces every nn.Linear,
-- the vision tower's included, unless llm_int8_skip_modules names it (the
-- simulated towers are not quantized); run.moe needs experts, and its
-- capacity factor goes into the description the simulator reads.
local function check_model_run(f, path, where)
  -- attention sinks (gpt-oss): transformers has no sdpa path for them
  -- (GptOssPreTrainedModel._supports_sdpa = False); flash is the
  -- kernels-community/vllm-flash-attn3 kernel it names
  if f.text and f.text.sinks and f.attention == "sdpa" then
    errors.input(where, "run.attention", "sdpa with attention sinks (gpt-oss) is not what "
      .. "transformers runs (its GptOss has no sdpa path): use eager or flash")
  end
  if f.text and f.text.sinks and f.attention == "flash" then
    local a = { table.unpack(f.model_assumptions or {}) }
    a[#a + 1] = "flash attention with attention sinks: transformers' kernel for gpt-oss "
      .. "(kernels-community/vllm-flash-attn3); the sinks' gradient is priced as one per-head "
      .. "tensor per layer, the kernel's scratch as flash's (some kernel versions have no "
      .. "backward for sinks)"
    f.model_assumptions = a
  end
  if f.vision and f.quant and f.quant.ckpt and f.quant.ckpt.method == "bitsandbytes" then
    errors.input(path, "quantization_config", "bitsandbytes quantizes the vision tower too, "
      .. "which is not modelled; set run.precision.dequantize: true, or price the language "
      .. "model alone with model.text_only: true")
  end
  if f.moe then
    if not (f.text and f.text.moe) then
      errors.input(where, "run.moe", "the model has no mixture-of-experts layers")
    end
    if f.moe.capacity_factor or f.moe.imbalance then
      local o = {}
      for k, v in pairs(f.text.moe) do o[k] = v end
      o.capacity_factor, o.imbalance = f.moe.capacity_factor, f.moe.imbalance
      f.text.moe = o
    end
  end
end

-- A run spec ({model, run, parallel}, or a measured case) to the run table.
-- loaded: {path=, config=}, a model config already found (stdlib/resolve.lua)
function M.normalize(spec, where, families, loaded)
  if type(families) ~= "table" or not families.find then
    error("stdlib.spec: pass the model registry (models/registry.lua) as `families`", 2)
  end
  spec = cfgutil.strip_nulls(spec)
  if type(spec) ~= "table" then errors.input(where, "", "a run spec must be a mapping") end
  if spec.family ~= nil or spec.id ~= nil then -- the measured-case dialect
    return M.check_sizes(require("stdlib.truth").normalize(spec, where, families), where)
  end
  check_keys(spec, { model = 1, run = 1, parallel = 1 }, where, "")
  local model = spec.model or errors.input(where, "model", "is required but missing")
  local path, cfg = read_model(model, where, families, loaded)
  local run = spec.run or errors.input(where, "run", "is required but missing")
  check_keys(run, RUN_KEYS, where, "run.")
  local rd = cfgutil.reader(run, where, "run.")
  local mode = one_of(where, "run.mode", run.mode,
    { "train", "inference", "generate", "ppo", "grpo" }, "train")
  local rl_mode = mode == "ppo" or mode == "grpo"
  local prec = run.precision or {}
  local f = read_precision(prec, where)
  f.optimizer = read_optimizer(run.optimizer or {}, mode == "train" or rl_mode, where)
  f.ckpt, f.ckpt_every, f.ckpt_segment = read_checkpointing(run, rd, where)
  read_loss(run.loss or {}, f, where)
  local frameworks = require("stdlib.frameworks")
  f.framework = one_of(where, "run.framework", run.framework, frameworks.NAMES,
    frameworks.DEFAULT)
  f.batch, f.seq, f.grad_accum = rd:int("batch"), rd:int("seq"), rd:int("grad_accum", 1)
  f.mode = rl_mode and "train" or mode
  f.generate_tokens = rd:int("generate_tokens", mode == "generate" and 1 or 0, false, 0)
  f.attention = one_of(where, "run.attention", run.attention, { "eager", "sdpa", "flash" },
    "eager")
  f.frozen = M.towers(run.freeze, where, "run.freeze")
  f.gpu = run.gpu and require("stdlib.gpus").get(run.gpu, where, "run.gpu").id
  f.config_path, f.hf_config = path, cfg
  if rl_mode then f.rl = read_rl(run.rl, mode, f.batch, where) end
  if run.lora then f.lora = read_lora(run.lora, where) end
  if run.moe ~= nil then f.moe = read_moe(run.moe, where) end
  f.quant = read_quant(prec, f, cfg, path, where)
  if run.load ~= nil then read_load(run.load, f, where, spec.parallel ~= nil) end
  if f.optimizer.paged and (f.rl or spec.parallel ~= nil) then
    errors.input(where, "run.optimizer.paged", "a paged optimizer in an RL update or a "
      .. "multi-GPU layout is not modelled")
  end
  read_framework_knobs(run, rd, f, where)
  local text_only = cfgutil.reader(model, where, "model."):bool("text_only", false)
  local family, typed = families.find(cfg, path)
  for k, v in pairs(describe_model(family, typed, path, run.images, where, text_only)) do
    f[k] = v
  end
  if f.quant and f.quant.store == "int8" and not f.quant.master then
    local a = { table.unpack(f.model_assumptions or {}) }
    a[#a + 1] = "LLM.int8 (bitsandbytes Linear8bitLt): forward prices MatMul8bitLt's int8 "
      .. "row-quantized x (CA), its fp32 row stats (SCA), the transient fp16 copy of x and "
      .. "the int32 matmul accumulator, backward the weight dequantized into x's dtype; the "
      .. "fp16 outlier columns (|x| > llm_int8_threshold, data-dependent) are not priced, and "
      .. "this is read from bitsandbytes' source, not measured (its int8 kernels need CUDA)"
    f.model_assumptions = a
  end
  check_model_run(f, path, where)
  local r = require("stdlib.run").new(f)
  -- multi-GPU layouts (stdlib/parallel.lua)
  if spec.parallel ~= nil then
    local par = require("stdlib.parallel")
    r.parallel = par.check(par.read(spec.parallel, where, r), r, where)
  end
  return M.check_sizes(r, where)
end

function M.load(path, families)
  return M.normalize(M.load_file(path), path, families)
end

return M
