-- The run table: what stdlib/step.lua simulates, defined here once. Run
-- specs (stdlib/spec.lua), measured cases (stdlib/truth.lua) and recipes
-- (through spec.normalize) all build it with run.new; the schemas' own
-- defaults (a spec's `params: bf16`, a case's `dtype: float32`) belong to
-- their readers, the defaults below to every run. A derived run (one rank's
-- share, an RL reference pass, a VLM's longer sequence) is run.with(run,
-- changes) or run.copy(run): a plain table, never an __index chain.
local vram = require("vram")
local frameworks = require("stdlib.frameworks")

local R = {}

-- A shallow copy, sized for its keys at once (vram.clone) where the table
-- has no metatable; one with a metatable is copied through pairs(), as it
-- iterates. A copy key by key grows by doublings, each rehashing what it
-- holds: fit --knobs copies its run per lever combination, a composed
-- layer's replay its tensors.
function R.shallow(t)
  if getmetatable(t) == nil then return vram.clone(t) end
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end
local shallow = R.shallow

-- name = { doc, default }: the doc gives the unit; default is a value, a
-- function(run) of the fields given, or nil (absent means off / none).
-- `required` fields have no default.
R.FIELDS = {
  -- what runs
  sim = { "the simulator module (models/README.md): build, inputs, forward_loss, ...",
    required = true },
  text = { "the language model's description (models/decoder.lua's read), nil for a ViT" },
  vision = { "the vision tower's description, VLM and ViT simulators" },
  vlm = { "what a VLM simulator reads besides the towers (projector, image tokens)" },
  model_assumptions = { "what the family's simulator description approximates (strings, "
    .. "printed as assumptions)" },
  id = { "a measured case's id (tests/truth)" },
  config_path = { "the model config's path, for errors" },
  hf_config = { "the model config as read (observed.lua reads its torch_dtype); never "
    .. "edited: run.copy shares it" },
  -- the step's shape
  mode = { "train | inference | generate (an RL update is train with `rl`)", "train" },
  batch = { "sequences (images for a ViT) per micro-batch, per GPU", required = true },
  seq = { "text tokens per sequence; a VLM adds its image tokens (nil for a ViT)" },
  grad_accum = { "micro-batches per optimizer step", 1 },
  generate_tokens = { "tokens decoded after the prompt (mode generate)", 0 },
  -- precision
  param_dtype = { "dtype the parameters are held in (fp32 masters under autocast)",
    required = true },
  dtype = { "compute dtype of activations", required = true },
  autocast = { "autocast dtype when the parameters are fp32 masters, else nil" },
  quant = { "packed linear weights { store, compute, master, ckpt, dequant } "
    .. "(stdlib/quant.lua), or te = TransformerEngine's te.Linear state "
    .. "{ amax_history_len, fwd_tensors, bwd_tensors } (stdlib/layers.lua), else nil" },
  -- what the step keeps
  ckpt = { "activation checkpointing on", false },
  ckpt_every = { "checkpoint every N-th layer (layers), nil: every layer" },
  ckpt_segment = { "layers recomputed together per checkpoint segment, nil: one" },
  attention = { "eager | sdpa | flash", "eager" },
  loss = { "cross_entropy | one_hot | chunked | hf_legacy | shift_float | litgpt_chunked | "
    .. "liger_fused (stdlib/loss.lua)", "cross_entropy" },
  loss_chunk = { "rows per chunk of the chunked loss (rows)", 1024 },
  loss_chunk_tokens = { "tokens per sequence in each chunk of litgpt_chunked (tokens)", 128 },
  loss_upcast = { "cross_entropy: logits.float() before the loss", true },
  loss_num_items = { "cross_entropy: the Trainer's num_items_in_batch (sum / count)", false },
  loss_where = { "the spec file, for the loss's errors" },
  load = { "how the weights reach the device { from (dtype), cast = host | tensor | device } "
    .. "(stdlib/load.lua), else nil: each in its own dtype" },
  frozen = { "towers that do not train: vision, llm, projector, embeddings",
    function() return {} end },
  lora = { "adapters { r (rank), alpha, targets, where, default }, else nil" },
  optimizer = { "{ name, foreach, weight_decay, state_dtype, momentum_dtype, step_bytes "
    .. "(bytes of each Adam step counter on the device), undisposed_steps (TorchSharp: "
    .. "steps whose temporaries are alive) } (stdlib/optim.lua)" },
  rl = { "an RL update { new_tokens, minibatch, reference, value } (stdlib/rl.lua), else nil" },
  moe = { "experts { impl, capacity_factor, aux_loss, imbalance } (stdlib/moe.lua), else nil" },
  parallel = { "a multi-GPU layout (stdlib/parallel.lua), else nil: one GPU" },
  -- where it runs
  framework = { "the stack's profile (stdlib/frameworks/): block rounding, context, "
    .. "kernels' buffers", frameworks.DEFAULT },
  xla = { "a jitted framework's { donate, mem_fraction, preallocate } (stdlib/xla.lua), "
    .. "else nil: the profile's" },
  gpu = { "GPU id (stdlib/gpus.lua) the verdict is for, else nil" },
  grad_sum = { "out_of_place: torch < 2.0 sums a second gradient out of place; nil: in place" },
  -- set by the tools for one simulation, never by a spec
  timeline = { "record the step's timeline (a report draws it); \"sparkline\": its samples "
    .. "without their categories and ops (stdlib/timeline.lua collect)" },
  trace = { "trace the tape for a compiled estimate (stdlib/compiled.lua)" },
  trace_exact = { "a probe traced with the op structure of its own sizes, not the "
    .. "general one (a batch-1 or seq-1 line, stdlib/compiled.lua)" },
  kernels_of = { "framework whose CPU kernels' buffers a probe counts (compiled.lua)" },
  compose = { "false: simulate every layer, decode step and repeated micro-batch instead "
    .. "of composing identical ones; \"layers\": compose only trained layers "
    .. "(stdlib/compose.lua), not grad-free layers, decode steps or repeated steps" },
  -- set by simulator modules on the run they hand the decoder
  past = { "tokens already in the KV cache (tokens)" },
  cache = { "the KV cache being filled, nil without one" },
  moe_impl = { "loop | grouped | dense, the MoE implementation in effect" },
  router_logits = { "a list collecting each layer's router logits (auxiliary loss)" },
  stage = { "the pipeline stage a rank builds (stdlib/parallel.lua)" },
}

-- The optimizer's fields that follow from the run: AdamW's default weight
-- decay (torch.optim.AdamW: 0.01), no optimizer outside training, and where
-- Adam keeps its step counters (the framework's profile).
local function optimizer(r)
  local o = {}
  for k, v in pairs(r.optimizer or {}) do o[k] = v end
  o.name = o.name or (r.mode == "train" and "adamw" or "none")
  if o.weight_decay == nil then o.weight_decay = o.name == "adamw" and 0.01 or 0 end
  if r.mode ~= "train" then o.name = "none" end
  if o.step_bytes == nil then o.step_bytes = frameworks.get(r.framework).adam_step_bytes end
  return o
end

local function check_names(t, level)
  for k in pairs(t) do
    if not R.FIELDS[k] then error(("stdlib.run: unknown field '%s'"):format(tostring(k)), level) end
  end
end

-- A run from its fields: unknown names are a caller's error, required ones
-- must be there, the rest get the defaults above.
function R.new(fields)
  check_names(fields, 3)
  local r = {}
  for k, v in pairs(fields) do r[k] = v end
  for k, f in pairs(R.FIELDS) do
    if r[k] == nil then
      if f.required then error(("stdlib.run: field '%s' is required"):format(k), 2) end
      local d = f[2]
      if type(d) == "function" then d = d(r) end
      r[k] = d
    end
  end
  if r.seq == nil and r.sim.takes_text then
    error("stdlib.run: field 'seq' is required by this simulator", 2)
  end
  r.optimizer = optimizer(r)
  return r
end

-- The run with some fields changed (a shallow copy).
function R.with(run, changes)
  check_names(changes, 3)
  local r = shallow(run)
  for k, v in pairs(changes) do r[k] = v end
  return r
end

-- A deep copy to change nested fields in (r.text.heads, r.optimizer.name);
-- the simulator module and the model config as read are shared, not
-- copied: nothing edits them, and a search copies its run once per
-- candidate (the config was half of what a copy wrote, and shared, run.key
-- compares it at once).
local SHARED = { sim = true, hf_config = true }
local function deep(t)
  local c = shallow(t)
  for k, v in pairs(c) do -- (existing fields may be set while traversing)
    if type(v) == "table" then c[k] = deep(v) end
  end
  return c
end
function R.copy(run)
  local r = shallow(run)
  for k, v in pairs(r) do
    if type(v) == "table" and not SHARED[k] then r[k] = deep(v) end
  end
  return r
end

-- A run as a string that equal runs share: keys sorted, the simulator
-- module (sim) and functions by identity, a table met again (shared or a
-- cycle) by the order it was first met in.
local mtype = math.type
local function mixed_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return ta < tb end
  if ta == "number" or ta == "string" then return a < b end
  return tostring(a) < tostring(b)
end
-- t's keys in the writer's order: strings alone or numbers alone by `<`,
-- mixed ones by mixed_less.
local function sorted_keys(t)
  local keys, strings, numbers = {}, true, true
  for k in pairs(t) do
    keys[#keys + 1] = k
    strings = strings and type(k) == "string"
    numbers = numbers and type(k) == "number"
  end
  table.sort(keys, not (strings or numbers) and mixed_less or nil)
  return keys
end

-- Appends t to out, but its closing brace (the caller's: "}" or "},"). The
-- reference writer: vram.canonical writes the same text in C (run.key uses
-- it; tests/lua/test_run.lua compares the two), this one what that refuses.
local function canonical(t, out, seen)
  seen.n = seen.n + 1
  seen[t] = seen.n
  out[#out + 1] = "{"
  for _, k in ipairs(sorted_keys(t)) do
    local v, tk = t[k], type(k)
    if tk == "string" then out[#out + 1] = #k .. ":" .. k .. "="
    elseif mtype(k) == "integer" then out[#out + 1] = "[" .. k .. "]="
    else out[#out + 1] = "[" .. tostring(k) .. "]=" end
    local tv = type(v)
    if tv == "table" and k ~= "sim" then
      if seen[v] then
        out[#out + 1] = "@" .. seen[v] .. ","
      else
        canonical(v, out, seen)
        out[#out + 1] = "},"
      end
    elseif tv == "string" then out[#out + 1] = #v .. ":" .. v .. ","
    elseif mtype(v) == "integer" then out[#out + 1] = "number:" .. v .. ","
    elseif tv == "boolean" then out[#out + 1] = v and "boolean:true," or "boolean:false,"
    else out[#out + 1] = tv .. ":" .. tostring(v) .. "," end
  end
end

-- Whether a and b write out the same (canonical above), found without
-- writing them: numbers of one subtype (1 is not 1.0; equal floats write
-- the same but 0.0 and -0.0), tables by content except under the key sim.
-- For tables shared nowhere (a run.copy and its edits): a table met twice
-- would be written as a back-reference.
local function same(a, b, key)
  if a == b then
    local ma = mtype(a)
    if not ma then return true end
    return ma == mtype(b) and (ma == "integer" or a ~= 0 or 1 / a == 1 / b)
  end
  if type(a) ~= "table" or type(b) ~= "table" or key == "sim" then return false end
  for k, v in pairs(a) do
    local w = b[k]
    -- equal and not a number: the same (the call would say so)
    if (v ~= w or mtype(v)) and not same(v, w, k) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

-- A string that runs made from `base` (run.copy, then edited) share exactly
-- when they are equal: the fields that differ from base, written out, then
-- the names of those base has and the run lacks. Runs made from different
-- bases must not be compared by it. skip: field names left out (fields the
-- caller knows its result does not read). only (optional): the fields that
-- may differ (the rest are known to be base's; the string is the same).
-- run.key_lua is the reference, in Lua; vram.run_key answers the same in
-- C wherever no metamethod or tostring() could change the answer (nil
-- elsewhere: run.key then asks the reference).
function R.key_lua(r, base, skip, only)
  local diff = {}
  for k in pairs(only or r) do
    local v = r[k]
    if v ~= nil and not (skip and skip[k]) and not same(v, base[k], k) then diff[k] = v end
  end
  local out = {}
  canonical(diff, out, { n = 0 })
  out[#out + 1] = "}-"
  local gone = {}
  for k in pairs(only or base) do
    if r[k] == nil and base[k] ~= nil and not (skip and skip[k]) then gone[#gone + 1] = k end
  end
  table.sort(gone)
  return table.concat(out) .. table.concat(gone, ",")
end
local key_lua, key_c = R.key_lua, vram.run_key
function R.key(r, base, skip, only)
  return key_c(r, base, skip, only) or key_lua(r, base, skip, only)
end

-- The reference writer's text of t (vram.canonical's, where that one
-- writes it).
function R.canonical_text(t)
  local out = {}
  canonical(t, out, { n = 0 })
  return table.concat(out)
end

return R
