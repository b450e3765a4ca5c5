-- What a translation of another tool's config is made of (stdlib/formats.lua
-- detects the format and loads this module only then: a run spec needs none
-- of it, issue 18): the context a translator (stdlib/formats/*.lua) fills
-- in, the typed reads and maps the formats share, the spec assembled and
-- its model resolved, and how a translation is shown (--explain, the
-- report's notes, --json). stdlib/formats.lua hands out every field of this
-- module as its own (formats.word_set, formats.notes, ...).
local vram = require("vram")
local errors = require("stdlib.errors")
local resolve = require("stdlib.resolve")

local M = {}

local MODULES = { llamafactory = "stdlib.formats.llamafactory", axolotl = "stdlib.formats.axolotl",
  trl = "stdlib.formats.trl", hf = "stdlib.formats.hf_trainer",
  deepspeed = "stdlib.formats.deepspeed", accelerate = "stdlib.formats.accelerate",
  vllm = "stdlib.formats.vllm" }

---------------------------------------------------------------------------
-- Translation context: what a translator fills in.
local Ctx = {}
Ctx.__index = Ctx

function M.context(file, format)
  return setmetatable({ file = file, format = format, run = {}, parallel = {},
    not_understood = {}, warnings = {}, assumptions = {}, ignored = 0, after_model = {} }, Ctx)
end

function Ctx:warn(msg) self.warnings[#self.warnings + 1] = msg end
function Ctx:assume(msg) self.assumptions[#self.assumptions + 1] = msg end

local function show(v)
  if type(v) == "table" then
    local ok, s = pcall(vram.json.encode, v)
    return ok and s or "{...}"
  end
  return tostring(v)
end
M.show = show

function Ctx:unknown(key, v)
  self.not_understood[#self.not_understood + 1] = { key = key, value = show(v) }
end

function Ctx:fail(key, what) errors.input(self.file, key, what) end

-- Typed reads of a value found under key; YAML and command lines give
-- strings for numbers and booleans at times ("true", "1e-5"), read here.
-- Python and YAML 1.1 write 500_000 for 500000.
local function number(v)
  if type(v) ~= "string" then return v end
  return tonumber((v:match("^%d[%d_]*$") and v:gsub("_", "")) or v)
end

function Ctx:int(key, v, min)
  local n = math.tointeger(number(v))
  if not n then self:fail(key, "must be an integer, got " .. show(v)) end
  if n < (min or 1) then self:fail(key, ("must be >= %d, got %d"):format(min or 1, n)) end
  return n
end

function Ctx:num(key, v)
  local n = number(v)
  if type(n) ~= "number" then self:fail(key, "must be a number, got " .. show(v)) end
  return n
end

local TRUE = { ["true"] = true, ["True"] = true, ["1"] = true, yes = true }
local FALSE = { ["false"] = false, ["False"] = false, ["0"] = false, no = false, [""] = false }
function Ctx:bool(key, v)
  if type(v) == "boolean" then return v end
  if type(v) == "string" and TRUE[v] ~= nil then return true end
  if type(v) == "string" and FALSE[v] ~= nil then return false end
  if v == 1 then return true end
  if v == 0 then return false end
  self:fail(key, "must be true or false, got " .. show(v))
end

function Ctx:str(key, v)
  if type(v) ~= "string" then self:fail(key, "must be a string, got " .. show(v)) end
  return v
end

-- Key prefixes of experiment tracking and hub bookkeeping, known not to
-- change memory in every format.
M.IGNORED_PREFIXES = { "wandb_", "swanlab_", "mlflow_", "comet_", "hub_", "neptune_",
  "clearml_", "trackio_" }

local function ignored_prefix(k)
  if type(k) ~= "string" then return false end
  for _, p in ipairs(M.IGNORED_PREFIXES) do
    if k:sub(1, #p) == p then return true end
  end
  return false
end

-- The set of the whitespace-separated words of text (a format's keys known
-- not to change memory), falling back to base's.
function M.word_set(text, base)
  local set = setmetatable({}, base and { __index = base } or nil)
  for k in text:gmatch("%S+") do set[k] = true end
  return set
end

-- A handler for a key whose feature is not modelled: a labelled warning
-- when it is switched on.
function M.not_modelled(what)
  return function(c, v, k)
    if v ~= false and v ~= 0 and v ~= "false" and v ~= "none" then
      c:warn(("%s: %s is not modelled; priced without it"):format(k, what))
    end
  end
end

-- Walks every key of tbl: handlers[k](ctx, v, k) for mapped keys, nothing
-- for ignored ones, "not understood" for the rest. prefix names nested keys.
function Ctx:walk(tbl, handlers, ignored, prefix)
  prefix = prefix or ""
  local keys = {}
  for k in pairs(tbl) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    local v = tbl[k]
    if v == vram.json.null or v == vram.yaml.null then v = nil end
    local h = handlers[k]
    if h then
      if v ~= nil then h(self, v, prefix .. k) end
    elseif ignored[k] or ignored_prefix(k) then
      self.ignored = self.ignored + 1
    else
      self:unknown(prefix .. tostring(k), tbl[k])
    end
  end
end

-- Sets the model reference (a path or a hub id), with the key it came from.
function Ctx:model(ref, key)
  self.model_ref, self.model_key = self:str(key, ref), key
end

-- The training dtype flags every HF-Trainer-based format shares.
-- mode: "mixed" (fp32 master weights, autocast), "pure" (weights in the
-- compute dtype) -- the format decides which one its loader produces.
function Ctx:precision(compute, mode)
  if mode == "pure" then
    self.run.precision = { params = compute }
  else
    self.run.precision = { master = "fp32", compute = compute }
  end
end

---------------------------------------------------------------------------
-- Shared maps

-- Optimizer names (transformers' OptimizerNames, axolotl's, TRL's) to the
-- simulator's optimizers. A name not here is a labelled warning, priced as
-- AdamW.
M.OPTIMIZERS = {
  adamw_torch = { name = "adamw", foreach = "torch2" },
  adamw_hf = { name = "adamw" },
  adamw_torch_fused = { name = "adamw",
    note = "fused AdamW allocates no per-step temporaries; priced as the single-tensor "
      .. "implementation (one parameter's temporaries at a time, an upper bound)" },
  adamw_torch_xla = { name = "adamw" },
  adamw_apex_fused = { name = "adamw" },
  adamw = { name = "adamw", foreach = "torch2" },
  adam = { name = "adam" },
  adamw_8bit = { name = "adam8bit" },
  adamw_bnb_8bit = { name = "adam8bit" },
  adam8bit = { name = "adam8bit" },
  -- bitsandbytes' paged optimizers: large states in unified memory
  -- (stdlib/optim.lua); its 32-bit ones keep fp32 states for any parameter
  paged_adamw_8bit = { name = "adam8bit", paged = true },
  paged_adamw_32bit = { name = "adamw", paged = true, state_dtype = "fp32" },
  paged_adamw = { name = "adamw", paged = true, state_dtype = "fp32" },
  adafactor = { name = "adafactor" },
  sgd = { name = "sgd" },
  lion_32bit = { name = "lion" },
  paged_lion_32bit = { name = "lion", paged = true, state_dtype = "fp32" },
  lion = { name = "lion" },
  rmsprop = { name = "sgd_momentum",
    note = "RMSprop keeps one state per parameter (square_avg), priced as momentum SGD's one "
      .. "state" },
}

function Ctx:optimizer(key, v)
  local name = self:str(key, v)
  local o = M.OPTIMIZERS[name]
  if not o then
    self:warn(("%s: optimizer '%s' is not modelled; priced as AdamW with fp32 states"):format(
      key, name))
    o = { name = "adamw" }
  end
  -- no state dtype: torch's optimizers keep their states in the parameter
  -- dtype, which is the simulator's default
  self.run.optimizer = { name = o.name, foreach = o.foreach, paged = o.paged,
    state_dtype = o.state_dtype }
  if o.note then self:assume(key .. ": " .. o.note) end
end

-- LoRA target lists as the formats spell them: "all" / "all-linear" / a
-- comma-separated string / a list.
function Ctx:lora_targets(key, v)
  if v == "all" or v == "all-linear" then return "all-linear" end
  if type(v) == "string" then
    local out = {}
    for s in v:gmatch("[^,%s]+") do out[#out + 1] = s end
    return out
  end
  if type(v) ~= "table" then self:fail(key, "must be a list of module names, got " .. show(v)) end
  for i, s in ipairs(v) do
    if type(s) ~= "string" then self:fail(key .. "[" .. i .. "]", "must be a name, got " .. show(s)) end
  end
  return v
end

-- Files a config names (a DeepSpeed JSON): beside the naming file, then
-- from the working directory.
function M.find_file(ref, file)
  local tries = {}
  if ref:sub(1, 1) ~= "/" then tries[#tries + 1] = resolve.dirname(file) .. "/" .. ref end
  tries[#tries + 1] = ref
  for _, p in ipairs(tries) do
    local ok, v = pcall(p:match("%.ya?ml$") and vram.yaml.load or vram.json.load, p)
    if ok then return p, v end
    if type(v) == "string" and (v:find(": json: ", 1, true) or v:find(": yaml: ", 1, true)) then
      error(v, 0)
    end
  end
  return nil, table.concat(tries, ", ")
end

-- A DeepSpeed config referenced by a training config: a path or an inline
-- table; translated into ctx (its "auto" values filled from ctx.run).
function Ctx:deepspeed(key, v)
  local ds, where = v, self.file .. ": " .. key
  if type(v) == "string" then
    local path, loaded = M.find_file(v, self.file)
    if not path then
      -- a missing file is said loudly, not fatal: the rest still prices
      self:warn(("%s: cannot find DeepSpeed config '%s' (looked at %s); its ZeRO stage, "
        .. "offload and precision are NOT priced"):format(key, v, loaded))
      return
    end
    ds, where = loaded, path
  elseif type(v) ~= "table" then
    self:fail(key, "must be a path to a DeepSpeed JSON or a mapping, got " .. show(v))
  end
  self.deepspeed_config = { table = ds, where = where, key = key }
end

---------------------------------------------------------------------------
-- Translating

local function base_format(name)
  if name and name:match("^trl%-") then return "trl", name:match("^trl%-(.*)$") end
  return name
end

-- Translates the config at path, decoded as doc (text: its text), of
-- format `name` (stdlib/formats.lua M.translate detected or checked it).
-- Returns the translation (stdlib/formats.lua M.translate says what it holds).
function M.translate_as(path, name, doc, text, opts)
  local fmt, variant = base_format(name)
  local ctx = M.context(path, name)
  ctx.variant = variant
  ctx.opts = opts
  local tr = require(MODULES[fmt])
  if type(doc) ~= "table" and fmt ~= "vllm" then
    errors.input(path, "", ("a %s config must be a mapping"):format(name))
  end
  tr.translate(ctx, doc, text)
  if ctx.deepspeed_config then
    require("stdlib.formats.deepspeed").apply(ctx, ctx.deepspeed_config)
  end
  return M.finish(ctx)
end

-- World size, parallel warning, and the spec assembled.
function M.finish(ctx)
  local opts = ctx.opts or {}
  if not ctx.world_size and opts.gpus then ctx.world_size = opts.gpus end
  local par = ctx.parallel
  if ctx.world_size then par.world_size = ctx.world_size end
  local sharded = (par.zero or 0) > 0 or (par.fsdp and par.fsdp ~= "no_shard") or par.tp
    or par.pp or par.cp or par.ep or par.dp_shard or par.offload
  local multi = sharded or (ctx.world_size or 1) > 1
  -- training steps get per-rank budgets (stdlib/parallel.lua: DDP's buckets
  -- included); other modes are priced on one GPU, with a warning
  local per_rank = multi and (ctx.run.mode or "train") == "train"
  if per_rank then
    ctx:assume("parallel: per-rank budgets for " .. M.describe_parallel(par)
      .. " (stdlib/parallel.lua)")
  elseif multi then
    ctx:warn("parallel: per-rank sharding (" .. M.describe_parallel(par) .. ") is not modelled "
      .. "for this mode; the figures below are ONE GPU holding the whole model, optimizer and "
      .. "activations, not the per-rank budget")
  end
  if not per_rank and ctx.zero_precision_note then ctx:assume(ctx.zero_precision_note) end
  local spec = { model = {}, run = ctx.run }
  if next(par) ~= nil then spec.parallel = par end
  if ctx.serve then spec.serve = ctx.serve end
  return { ctx = ctx, format = ctx.format, spec = spec, per_rank = per_rank,
    model_ref = ctx.model_ref,
    model_key = ctx.model_key, not_understood = ctx.not_understood, warnings = ctx.warnings,
    assumptions = ctx.assumptions, world_size = ctx.world_size, ignored = ctx.ignored,
    file = ctx.file }
end

function M.describe_parallel(par)
  local out = {}
  for _, k in ipairs({ "world_size", "dp", "dp_replicate", "dp_shard", "tp", "pp", "cp", "ep",
    "zero", "fsdp", "offload" }) do
    if par[k] ~= nil then out[#out + 1] = k .. "=" .. show(par[k]) end
  end
  return table.concat(out, ", ")
end

-- Resolves the translation's model into spec.model and returns the run
-- table stdlib/spec.lua normalizes. opts.model: --model CONFIG.json;
-- presets/preset_path: models/registry.lua's (the caller passes them).
function M.resolve_model(tr, opts)
  opts = opts or {}
  local ref, field = opts.model, "--model"
  if not ref then
    ref, field = tr.model_ref, tr.model_key
    if not ref then
      errors.input(tr.file, "", "names no model; pass --model CONFIG.json (or a hub id)")
    end
  end
  local r = resolve.model(ref, { where = opts.model and nil or tr.file, field = field,
    base_dir = not opts.model and resolve.dirname(tr.file) or nil, presets = opts.presets,
    preset_path = opts.preset_path })
  tr.model = r
  tr.model_label = opts.model and (opts.model .. " (--model)") or tostring(ref)
  -- precision that depends on the checkpoint's own dtype ("auto")
  local ctx = tr.ctx
  local cfg = r.config
  local text = type(cfg.text_config) == "table" and cfg.text_config or cfg
  if ctx and ctx.deferred_precision then
    local dt = cfg.torch_dtype or cfg.dtype or text.torch_dtype or text.dtype
    ctx.deferred_precision(ctx, type(dt) == "string" and dt or nil)
    ctx.deferred_precision = nil
  end
  -- what a config leaves to the model ("auto" bucket sizes of DeepSpeed)
  for _, fn in ipairs(ctx and ctx.after_model or {}) do fn(ctx, cfg, text) end
  if ctx then ctx.after_model = {} end
  -- LLaMA-Factory-style tower freezing applies to VLMs only
  if ctx and ctx.vlm_freeze and cfg.vision_config and #ctx.vlm_freeze > 0 then
    tr.spec.run.freeze = ctx.vlm_freeze
  end
  if r.source == "preset" then
    tr.spec.model = { preset = r.preset }
  else
    tr.spec.model = { config = r.path }
  end
  return r
end

---------------------------------------------------------------------------
-- --explain: the run spec as YAML, with what was not understood as comments

local ORDER = { model = 1, run = 2, parallel = 3, serve = 4, mode = 1, batch = 2, seq = 3,
  grad_accum = 4, precision = 5, optimizer = 6, grad_checkpointing = 7, attention = 8, lora = 9 }

local function scalar(v)
  if type(v) == "string" then
    if v == "" or v:match("^[%s\"'{}%[%],&*#?|<>=!%%@`-]") or v:find(": ", 1, true)
        or v:find(" #", 1, true) or tonumber(v) or v == "true" or v == "false" or v == "null"
        or v:match("[\n\r\t]") then
      return vram.json.encode(v)
    end
    return v
  end
  if math.type(v) == "float" then return vram.json.encode(v) end
  return tostring(v)
end

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b)
    local oa, ob = ORDER[a] or 100, ORDER[b] or 100
    if oa ~= ob then return oa < ob end
    return tostring(a) < tostring(b)
  end)
  return ks
end

local function emit(out, t, indent)
  for _, k in ipairs(sorted_keys(t)) do
    local v = t[k]
    local pad = string.rep("  ", indent)
    if type(v) == "table" and v[1] ~= nil then
      local items = {}
      for i, x in ipairs(v) do items[i] = scalar(x) end
      out[#out + 1] = ("%s%s: [%s]"):format(pad, k, table.concat(items, ", "))
    elseif type(v) == "table" then
      if next(v) == nil then
        out[#out + 1] = ("%s%s: {}"):format(pad, k)
      else
        out[#out + 1] = ("%s%s:"):format(pad, k)
        emit(out, v, indent + 1)
      end
    else
      out[#out + 1] = ("%s%s: %s"):format(pad, k, scalar(v))
    end
  end
end

-- The translation's warnings, then its assumptions, one line each.
local function caveats(out, tr, warning, assumption)
  for _, w in ipairs(tr.warnings) do out[#out + 1] = warning .. w end
  for _, a in ipairs(tr.assumptions) do out[#out + 1] = assumption .. a end
end

function M.explain(tr)
  local out = { ("# translated from %s (%s) by vramlua; save and edit as a run spec"):format(
    tr.file, tr.format) }
  if tr.model then
    out[#out + 1] = ("# model '%s' resolved as %s: %s"):format(tr.model_label or tostring(tr.model_ref),
      tr.model.source, tr.model.path)
  end
  if tr.spec.parallel and not tr.per_rank then
    out[#out + 1] = "# parallel: not priced per rank for this run (see warnings)"
  end
  emit(out, tr.spec, 0)
  caveats(out, tr, "# warning: ", "# assumption: ")
  for _, n in ipairs(tr.not_understood) do
    out[#out + 1] = ("# not understood: %s = %s"):format(n.key, n.value)
  end
  return table.concat(out, "\n")
end

-- Lines for the human report: warnings, assumptions, not understood.
function M.notes(tr)
  local out = { ("translated from %s config (%d keys ignored as not changing memory)"):format(
    tr.format, tr.ignored) }
  if tr.model then
    out[#out + 1] = ("  model: %s -> %s (%s)"):format(tr.model_label or tostring(tr.model_ref),
      tr.model.path, tr.model.source)
  end
  caveats(out, tr, "  WARNING: ", "  assumption: ")
  if #tr.not_understood > 0 then
    local keys = {}
    for i, n in ipairs(tr.not_understood) do keys[i] = n.key .. "=" .. n.value end
    out[#out + 1] = "  not understood (not priced): " .. table.concat(keys, ", ")
  end
  return table.concat(out, "\n")
end

-- The part of the spec stdlib/spec.lua reads (model, run, and parallel
-- where per-rank budgets apply); serve travels beside it.
function M.run_spec(tr)
  return { model = tr.spec.model, run = tr.spec.run,
    parallel = tr.per_rank and tr.spec.parallel or nil }
end

-- The translation's notes for --json.
function M.json_notes(tr)
  local nu = {}
  for i, n in ipairs(tr.not_understood) do nu[i] = { key = n.key, value = n.value } end
  return { format = tr.format, model = tr.model and { path = tr.model.path,
      source = tr.model.source, ref = tr.model_ref } or nil,
    warnings = tr.warnings, assumptions = tr.assumptions, not_understood = nu,
    ignored_keys = tr.ignored, world_size = tr.world_size, parallel = tr.spec.parallel,
    serve = tr.spec.serve }
end

return M
