-- Reconciles a figure someone observed with the estimate: which measure it
-- is comparable to, and the likeliest causes of the difference, each sized
-- by running the simulator again on the run spec with one knob flipped
-- (never a rule of thumb). What the simulator does not model is named as
-- such and gets only the remainder, labelled.
local vram = require("vram")
local errors = require("stdlib.errors")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local report = require("stdlib.report")

local M = {}

-- Which of the budget's three peaks each observed kind is comparable to.
M.KINDS = {
  allocated = { field = "peak_bytes", what = "tensors allocated (torch.cuda.max_memory_allocated)" },
  reserved = { field = "reserved_bytes", what = "allocator reserved (torch.cuda.max_memory_reserved)" },
  ["nvidia-smi"] = { field = "device_total_bytes",
    what = "device total: reserved + framework context (what nvidia-smi shows)" },
}

local UNITS = { B = 1, KB = 1000, MB = 1000 ^ 2, GB = 1000 ^ 3, TB = 1000 ^ 4,
  KiB = 1 << 10, MiB = 1 << 20, GiB = 1 << 30, TiB = 1 << 40 }

-- "80GB", "80 GB", "74.5GiB", "123456789" (bytes) -> integer bytes.
function M.parse_size(s, flag)
  local num, unit = tostring(s):match("^%s*([%d%.]+)%s*(%a*)%s*$")
  local n = num and tonumber(num)
  if not n or n <= 0 then
    errors.usage((flag or "--observed") .. " needs a size like 80GB or 74.5GiB, got '"
      .. tostring(s) .. "'")
  end
  unit = unit ~= "" and unit or "B"
  local mult = UNITS[unit] or UNITS[unit:upper()]
    or errors.usage((flag or "--observed") .. ": unknown unit '" .. unit
      .. "' (B, KB, MB, GB, TB = powers of 10; KiB, MiB, GiB, TiB = powers of 2)")
  return math.floor(n * mult + 0.5)
end

local function copy(t)
  if type(t) ~= "table" then return t end
  local c = {}
  for k, v in pairs(t) do c[k] = copy(v) end
  return c
end

-- The causes, each a flip of the run spec document (the schema users
-- write, so the flip means what the spec says). applies(doc, run) says
-- whether the flip changes anything; flip(doc, run) edits the copy.
M.CAUSES = {
  { id = "optimizer_defaults", short = "optimizer state dtype defaults",
    label = function(_, run) return ("optimizer state dtype left at its default (the parameter's, "
      .. "%s) instead of %s"):format(run.param_dtype, run.optimizer.state_dtype or "?") end,
    applies = function(doc, run)
      local o = (doc.run or {}).optimizer
      return type(o) == "table" and (o.state_dtype ~= nil or o.name == "adam8bit")
        and (run.optimizer.state_dtype or run.param_dtype) ~= run.param_dtype
    end,
    flip = function(doc)
      local o = doc.run.optimizer
      o.state_dtype = nil
      if o.name == "adam8bit" then o.name = "adamw" end
    end },
  { id = "fp32_masters", short = "fp32 masters (the run's masters are fp32 already)",
    label = function(_, run) return ("fp32 master weights instead of %s (and everything kept in "
      .. "the parameters' dtype with them: gradients, default optimizer states)")
      :format(run.param_dtype) end,
    applies = function(_, run) return run.param_dtype ~= "fp32" end,
    flip = function(doc, run)
      local p = doc.run.precision or {}
      doc.run.precision = p
      if p.master and p.master ~= "none" then p.master = "fp32"
      else p.compute = p.compute or run.dtype; p.params = "fp32" end
    end },
  { id = "no_checkpointing", short = "missing checkpointing (the run does not checkpoint)",
    label = function() return "gradient checkpointing not in effect" end,
    applies = function(_, run) return run.ckpt end,
    flip = function(doc)
      doc.run.grad_checkpointing = nil
      doc.run.checkpoint_segment = nil
    end },
  { id = "untied_head", short = "an untied head (the head is untied already)",
    label = function() return "an untied lm_head (the output projection trained as its own "
      .. "parameter, with its gradient and optimizer state)" end,
    applies = function(_, run) return run.text ~= nil and run.text.tie == true end,
    flip = function(doc)
      doc.model.overrides = doc.model.overrides or {}
      doc.model.overrides.tie_word_embeddings = false
    end },
  { id = "undisposed_temporaries",
    short = "undisposed temporaries (a TorchSharp cause: Python frees them by reference count)",
    label = function() return "temporaries not disposed until the step ends (TorchSharp without "
      .. "`using`/Dispose): the optimizer's per-parameter temporaries all live at once "
      .. "(run.undisposed_steps: 1)" end,
    applies = function(_, run)
      return require("stdlib.frameworks").of(run).undisposed_temporaries
        and not run.optimizer.foreach
        and (run.optimizer.name == "adam" or run.optimizer.name == "adamw")
    end,
    flip = function(doc) doc.run.undisposed_steps = 1 end },
}

-- The layout's own causes: a ZeRO/FSDP or offload setting that did not
-- take (a DeepSpeed config the launcher never read is the usual story).
-- The flip keeps the layout and drops the sharding knobs with it.
local LAYOUT_KEYS = { dp = 1, tp = 1, pp = 1, cp = 1, ep = 1, sequence_parallel = 1,
  pp_schedule = 1, virtual_stages = 1, microbatches = 1, world_size = 1, gpus_per_node = 1 }
M.CAUSES[#M.CAUSES + 1] = { id = "sharding_not_applied",
  short = "sharding that did not take (this run shards nothing)",
  label = function(_, run) return ("%s not in effect: every rank holds whole gradients, "
    .. "optimizer states and parameters (plain DDP)"):format(run.parallel.zero > 0
      and ("ZeRO-" .. run.parallel.zero) or ("FSDP " .. run.parallel.fsdp)) end,
  applies = function(_, run) local L = run.parallel
    return L ~= nil and (L.zero > 0 or (L.fsdp ~= nil and L.fsdp ~= "no_shard")) end,
  flip = function(doc)
    local p, kept = doc.parallel, {}
    for k, v in pairs(p) do if LAYOUT_KEYS[k] then kept[k] = v end end
    if p.dp_shard or p.dp_replicate then kept.dp = (p.dp_shard or 1) * (p.dp_replicate or 1) end
    doc.parallel = kept
  end }
M.CAUSES[#M.CAUSES + 1] = { id = "offload_not_applied",
  short = "offload that did not take (this run offloads nothing)",
  label = function(_, run) local o = run.parallel.offload
    return ("CPU offload not in effect (optimizer: %s, parameters: %s as configured): their "
      .. "states stay on the GPU"):format(o.optimizer, o.params) end,
  applies = function(_, run) local L = run.parallel
    return L ~= nil and (L.offload.optimizer ~= "none" or L.offload.params ~= "none") end,
  flip = function(doc) doc.parallel.offload = nil end }

-- The figure of `kind` for the spec: one device's, or under a layout the
-- largest over the ranks (the GPU that runs out first), with that rank.
local function measure(doc, path, kind, gpu, families)
  local run = spec.normalize(doc, path, families)
  local field = M.KINDS[kind].field
  if run.parallel then
    local top
    for _, e in ipairs(require("stdlib.parallel").budget(run, gpu).per_rank) do
      if not top or e[field] > top[field] then top = e end
    end
    return top[field], { param_count = top.param_count, rank = top }, run
  end
  local st = step.run(run)
  return report.budget(st, run, gpu)[field], st, run
end

-- The checkpoint's dtype (config torch_dtype), for the load-time copy.
local TORCH_DTYPES = { bfloat16 = "bf16", float16 = "fp16", float32 = "fp32" }

-- reconcile{doc, path, observed, kind, gpu, families} -> a table the text
-- renders (families: the model registry, which stdlib never requires).
function M.reconcile(o)
  local kind = o.kind or "nvidia-smi"
  if not M.KINDS[kind] then
    errors.usage("--observed-kind must be allocated, reserved or nvidia-smi, got '" .. kind .. "'")
  end
  local doc = o.doc
  if type(doc) ~= "table" or type(doc.run) ~= "table" or type(doc.model) ~= "table" then
    errors.input(o.path, "--observed",
      "needs a run spec (model: and run:), not a truth case or another tool's config")
  end
  local base, st, run = measure(copy(doc), o.path, kind, o.gpu, o.families)
  local r = { observed = o.observed, kind = kind, what = M.KINDS[kind].what, estimate = base,
    gap = o.observed - base, causes = {}, not_applicable = {}, framework = run.framework,
    rank = st.rank and { role = st.rank.role, ranks = st.rank.ranks } }
  for _, c in ipairs(M.CAUSES) do
    if c.applies(doc, run) then
      local d = copy(doc)
      c.flip(d, run)
      local v = measure(d, o.path, kind, o.gpu, o.families)
      r.causes[#r.causes + 1] = { id = c.id, label = c.label(doc, run), bytes = v - base,
        flip = c.flip }
    else
      r.not_applicable[#r.not_applicable + 1] = c.short
    end
  end
  -- load-time double copy: the checkpoint's tensors read whole, then the
  -- parameters built from them; if the raw map is never released it stays
  -- under the whole step (a constant added to every point of the timeline)
  local ckdt = TORCH_DTYPES[(run.hf_config or {}).torch_dtype or ""]
  if ckdt then
    r.causes[#r.causes + 1] = { id = "load_time_copy", bytes = vram.bytes(ckdt, st.param_count),
      label = ("the checkpoint's raw tensors (%d parameters in %s%s) kept after the parameters "
        .. "were built from them (a load-time double copy never released)")
        :format(st.param_count, ckdt, st.rank and ", the model this rank holds" or "") }
  end
  if require("stdlib.frameworks").of(run).prealloc then
    r.not_applicable[#r.not_applicable + 1] = "preallocation (already in the device total: XLA's 75%)"
  else
    r.not_applicable[#r.not_applicable + 1] = "preallocation (" .. run.framework
      .. " allocates on demand)"
  end
  -- a flip that adds nothing cannot explain an excess: named, not ranked
  local ranked = {}
  r.no_effect = {}
  for _, c in ipairs(r.causes) do
    if c.bytes > 0 then ranked[#ranked + 1] = c else r.no_effect[#r.no_effect + 1] = c end
  end
  r.causes = ranked
  table.sort(r.causes, function(x, y)
    if x.bytes ~= y.bytes then return x.bytes > y.bytes end
    return x.id < y.id
  end)
  -- combinations: every subset of the causes, simulated at once (flips
  -- interact: fp32 masters also widen default optimizer states), the
  -- constant ones added. Fragmentation can only add to a combination, so
  -- one above the observed figure cannot be the explanation; the closest
  -- below it are.
  local sim, const = {}, {}
  for k, c in ipairs(r.causes) do
    c.rank = k
    if c.bytes > 0 then
      if c.flip then sim[#sim + 1] = c else const[#const + 1] = c end
    end
  end
  -- as many causes at once as SEARCH_RUNS simulations allow (a count, so
  -- the answer does not depend on the machine's load)
  local most = #sim
  local function subsets(k) -- simulations for every subset of up to k causes
    local c, total = 1, 0
    for j = 1, k do c = c * (#sim - j + 1) // j; total = total + c end
    return total
  end
  while most > 1 and subsets(most) > require("stdlib.fit").SEARCH_RUNS do
    most = most - 1
  end
  r.most_at_once = most < #sim and most or nil
  local sims, combos = { [0] = base }, {}
  for mask = 1, (1 << (#sim + #const)) - 1 do
    local smask, n = mask & ((1 << #sim) - 1), 0
    for k = 1, #sim do if smask & (1 << (k - 1)) ~= 0 then n = n + 1 end end
    if n <= most then
      local members, extra = {}, 0
      if not sims[smask] then
        local d = copy(doc)
        for k, c in ipairs(sim) do if smask & (1 << (k - 1)) ~= 0 then c.flip(d, run) end end
        sims[smask] = measure(d, o.path, kind, o.gpu, o.families)
      end
      for k, c in ipairs(sim) do
        if smask & (1 << (k - 1)) ~= 0 then members[#members + 1] = c.rank end
      end
      for k, c in ipairs(const) do
        if mask & (1 << (#sim + k - 1)) ~= 0 then
          extra = extra + c.bytes
          members[#members + 1] = c.rank
        end
      end
      table.sort(members)
      local v = sims[smask] + extra
      combos[#combos + 1] = { members = members, bytes = v, remainder = o.observed - v }
    end
  end
  table.sort(combos, function(x, y)
    local ox, oy = x.remainder >= 0, y.remainder >= 0
    if ox ~= oy then return ox end
    if math.abs(x.remainder) ~= math.abs(y.remainder) then
      return math.abs(x.remainder) < math.abs(y.remainder)
    end
    return #x.members < #y.members
  end)
  r.combos = combos
  return r
end

-- The reconciliation as plain data for JSON (exact integer bytes).
function M.data(r)
  local causes, combos = {}, {}
  for _, c in ipairs(r.causes) do
    causes[#causes + 1] = { rank = c.rank, id = c.id, label = c.label, bytes = c.bytes }
  end
  for _, c in ipairs(r.combos or {}) do
    if c.remainder >= 0 and #combos < 3 then
      combos[#combos + 1] = { causes = c.members, bytes = c.bytes, remainder_bytes = c.remainder }
    end
  end
  return { observed_bytes = r.observed, kind = r.kind, compared_with = r.what, rank = r.rank,
    estimate_bytes = r.estimate, difference_bytes = r.gap, causes = causes,
    closest_combinations = combos, not_applicable = r.not_applicable,
    no_effect = (function()
      local l = {}
      for _, c in ipairs(r.no_effect) do l[#l + 1] = { id = c.id, bytes = c.bytes } end
      return l
    end)() }
end

local function both(b)
  return ("%s = %s"):format(vram.fmt(b, "GiB"), vram.fmt(b, "GB"))
end

function M.text(r)
  local out = {}
  local function add(s) out[#out + 1] = s end
  add(("observed: %s (%s), compared with the estimate's %s%s"):format(both(r.observed), r.kind,
    r.what, r.rank and (" on the rank that sets it (%s, ranks %s)"):format(r.rank.role,
      r.rank.ranks) or ""))
  local sign = r.gap >= 0 and "+" or "-"
  add(("estimate: %s; difference: %s%s = %s%s [%d B]"):format(both(r.estimate), sign,
    vram.fmt(math.abs(r.gap), "GiB"), sign, vram.fmt(math.abs(r.gap), "GB"), r.gap))
  if r.gap <= 0 then
    add("the observed figure is not above the estimate: nothing to explain (check that the "
      .. "kind matches how it was measured)")
    return out
  end
  add("likeliest causes, largest first; each size is the simulator run again with that one "
    .. "knob flipped:")
  for k, c in ipairs(r.causes) do
    local share = c.bytes > 0 and (" (%.0f%% of the difference)"):format(100 * c.bytes / r.gap) or ""
    add(("%2d. %+10.2f GiB%s  %s"):format(k, vram.to(c.bytes, "GiB"), share, c.label))
  end
  local shown = 0
  for _, c in ipairs(r.combos) do
    if c.remainder < 0 or shown == 3 then break end
    if shown == 0 then
      add("combinations closest to the observed figure (simulated at once, not summed; "
        .. "fragmentation only adds, so none above it):")
      if r.most_at_once then
        add(("  (up to %d simulated causes at once: one simulation of this run is slow)")
          :format(r.most_at_once))
      end
    end
    shown = shown + 1
    add(("  causes %s together: %s, leaving %s to allocator fragmentation (not modelled) "
      .. "or other processes"):format(table.concat(c.members, " + "), both(c.bytes),
      both(c.remainder)))
  end
  if shown == 0 then
    add("every combination of these causes stays above the observed figure: the spec "
      .. "itself may not be what ran")
  end
  if #r.no_effect > 0 then
    local l = {}
    for _, c in ipairs(r.no_effect) do
      l[#l + 1] = ("%s (%+d B)"):format(c.id:gsub("_", " "), c.bytes)
    end
    add("simulated, no increase at the peak: " .. table.concat(l, "; "))
  end
  if #r.not_applicable > 0 then
    add("not applicable to this run: " .. table.concat(r.not_applicable, "; "))
  end
  return out
end

return M
