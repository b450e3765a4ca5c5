-- The run table: what stdlib/step.lua simulates, defined here once. Run
-- specs (stdlib/spec.lua), measured cases (stdlib/truth.lua) and recipes
-- (through spec.normalize) all build it with run.new; the schemas' own
-- defaults (a spec's `params: bf16`, a case's `dtype: float32`) belong to
-- their readers, the defaults below to every run. A derived run (one rank's
-- share, an RL reference pass, a VLM's longer sequence) is run.with(run,
-- changes) or run.copy(run): a plain table, never an __index chain.
local frameworks = require("stdlib.frameworks")

local R = {}

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
  hf_config = { "the model config as read (observed.lua reads its torch_dtype)" },
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
  timeline = { "record the step's timeline (a report draws it)" },
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
  local r = {}
  for k, v in pairs(run) do r[k] = v end
  for k, v in pairs(changes) do r[k] = v end
  return r
end

-- A deep copy to change nested fields in (r.text.heads, r.optimizer.name);
-- the simulator module is shared, not copied.
local function deep(t)
  local c = {}
  for k, v in pairs(t) do c[k] = type(v) == "table" and deep(v) or v end
  return c
end
function R.copy(run)
  local r = {}
  for k, v in pairs(run) do r[k] = (type(v) == "table" and k ~= "sim") and deep(v) or v end
  return r
end

-- A run as a string that equal runs share: keys sorted, the simulator
-- module (sim) and functions by identity, a table met again (shared or a
-- cycle) by the order it was first met in.
local function mixed_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return ta < tb end
  if ta == "number" or ta == "string" then return a < b end
  return tostring(a) < tostring(b)
end
local function canonical(t, out, seen)
  seen.n = seen.n + 1
  seen[t] = seen.n
  local keys, plain = {}, true
  for k in pairs(t) do
    keys[#keys + 1] = k
    plain = plain and type(k) == "string"
  end
  table.sort(keys, not plain and mixed_less or nil) -- strings alone: the same order
  local n = #out + 1
  out[n] = "{"
  for _, k in ipairs(keys) do
    local v = t[k]
    -- strings by length and bytes (a comma or brace inside one is not one)
    n = n + 1
    out[n] = type(k) == "string" and (#k .. ":" .. k .. "=") or ("[" .. tostring(k) .. "]=")
    if type(v) == "table" and k ~= "sim" then
      if seen[v] then
        n = n + 1
        out[n] = "@" .. seen[v]
      else
        canonical(v, out, seen)
        n = #out
      end
    elseif type(v) == "string" then
      n = n + 1
      out[n] = #v .. ":" .. v
    else
      n = n + 1
      out[n] = type(v) .. ":" .. tostring(v)
    end
    n = n + 1
    out[n] = ","
  end
  out[n + 1] = "}"
  return out
end

-- Whether a and b write out the same (canonical above), found without
-- writing them: numbers of one subtype (1 is not 1.0), tables by content
-- except under the key sim. For tables shared nowhere (a run.copy and its
-- edits): a table met twice would be written as a back-reference.
local function same(a, b, key)
  if a == b then
    local ma = math.type(a)
    return ma == math.type(b) and (ma ~= "float" or tostring(a) == tostring(b))
  end
  if type(a) ~= "table" or type(b) ~= "table" or key == "sim" then return false end
  for k, v in pairs(a) do
    if not same(v, b[k], k) then return false end
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
function R.key(r, base, skip, only)
  local diff, gone = {}, {}
  for k in pairs(only or r) do
    local v = r[k]
    if not (skip and skip[k]) and v ~= nil and not same(v, base[k], k) then diff[k] = v end
  end
  for k in pairs(only or base) do
    if r[k] == nil and base[k] ~= nil and not (skip and skip[k]) then gone[#gone + 1] = k end
  end
  table.sort(gone)
  return table.concat(canonical(diff, {}, { n = 0 })) .. "-" .. table.concat(gone, ",")
end

return R
