-- The largest value of one knob that fits a GPU, found by searching the
-- simulator (never by extrapolation), and cheap knob combinations that fit.
local step = require("stdlib.step")
local swap = require("stdlib.swap_optimizer")
local frameworks = require("stdlib.frameworks")
local errors = require("stdlib.errors")
local par = require("stdlib.parallel")
local compose = require("stdlib.compose")
local shared_setup = require("stdlib.shared_setup")

local M = {}

-- Bytes a run needs on the device: reserved peak plus framework overhead.
-- search (optional): parallel.search(run the runs are made from), shared by
-- the runs of a search that reads only the need and at_peak. rec
-- (optional, one GPU): a stdlib/swap_optimizer.lua recorder the step is
-- recorded into.
function M.need(run, search, rec)
  if run.parallel then -- the largest rank's device total (stdlib/parallel.lua)
    local b = par.budget(run, nil, search)
    local at = setmetatable({}, { __index = function() return 0 end })
    for _, it in ipairs(b.breakdown) do at[it.category] = it.bytes end
    return b.device_total_bytes, { at_peak = at, budget = b }
  end
  local st = step.run(run, rec)
  return frameworks.need(frameworks.of(run), st.peak_reserved), st
end

-- Where each knob lives in the normalized run.
M.KNOBS = {
  batch = function(run, v) run.batch = v end,
  seq = function(run, v) run.seq = v end,
  lora_rank = function(run, v)
    run.lora = run.lora or step.default_lora(v)
    run.lora.r = v
  end,
}

-- A run whose knobs can change without touching the original.
local runs = require("stdlib.run")
local copy = runs.copy

-- Largest v in [1, limit] with need(run with knob=v) <= budget. Peaks grow
-- with each knob, so doubling then bisection finds the exact boundary.
function M.largest(run, knob, budget, limit)
  local set = M.KNOBS[knob] or errors.usage("fit: cannot vary '" .. knob ..
    "' (batch, seq, lora_rank)")
  limit = limit or (1 << 24)
  local needs = {} -- v -> need: the boundary's two values are asked for again
  local function fits(v)
    if not needs[v] then
      local r = copy(run)
      set(r, v)
      needs[v] = M.need(r)
    end
    return needs[v] <= budget, needs[v]
  end
  local ok1, need1 = fits(1)
  if not ok1 then return 0, nil, need1 end
  local lo, hi = 1, 2
  while hi <= limit and fits(hi) do lo, hi = hi, hi * 2 end
  if hi > limit then hi = limit + 1 end
  while hi - lo > 1 do
    local mid = (lo + hi) // 2
    if fits(mid) then lo = mid else hi = mid end
  end
  local _, need_lo = fits(lo)
  local need_hi = hi <= limit and select(2, fits(hi)) or nil
  return lo, need_lo, need_hi
end

-- The levers, each with what it costs. applies(run) says whether the knob
-- changes the run at all (sdpa when the run already uses sdpa does not);
-- whether it saves memory is measured, never assumed.
local function trains(r) return r.mode == "train" end
local function adam_like(r)
  return r.optimizer.name == "adam" or r.optimizer.name == "adamw"
end
M.MENU = {
  { name = "sdpa attention", cost = 0, needs = "sdpa", note = "same math, no T^2 attention buffers",
    applies = function(r) return r.attention == "eager" end,
    edit = function(r) r.attention = "sdpa" end },
  { name = "fused linear cross-entropy (Liger)", cost = 0, needs = "liger",
    note = "lm_head and the loss fused chunk by chunk (Liger-Kernel): the logits never exist whole",
    applies = function(r) return trains(r) and r.loss ~= "liger_fused" end,
    edit = function(r) r.loss = "liger_fused" end },
  { name = "chunked cross-entropy (1024 rows)", cost = 0,
    refines = { "fused linear cross-entropy (Liger)" }, -- listed where it beats Liger's
    note = "logits and their fp32 log-softmax one chunk at a time (CCE, chunked-loss kernels)",
    applies = function(r) return trains(r) and r.loss ~= "chunked" end,
    edit = function(r) r.loss = "chunked"; r.loss_chunk = 1024 end },
  { name = "gradient checkpointing (every layer)", cost = 2,
    refines = { "gradient checkpointing (every 2nd layer)" },
    note = "~33% more compute (one extra forward)",
    applies = function(r) return trains(r) and not (r.ckpt and not r.ckpt_every
      and not r.ckpt_segment) end,
    edit = function(r) r.ckpt = true; r.ckpt_every = nil; r.ckpt_segment = nil end },
  { name = "gradient checkpointing (every 2nd layer)", cost = 1,
    note = "~17% more compute (half the layers recomputed)",
    applies = function(r) return trains(r) and not r.ckpt end,
    edit = function(r) r.ckpt = true; r.ckpt_every = 2; r.ckpt_segment = nil end },
  { name = "bf16 optimizer states", cost = 1, note = "small quality risk on long runs",
    applies = function(r) return adam_like(r)
      and (r.optimizer.state_dtype or r.param_dtype) ~= "bf16" end,
    edit = function(r) r.optimizer.state_dtype = "bf16" end },
  { name = "8-bit AdamW", cost = 1, needs = "bitsandbytes", note = "bitsandbytes block-wise states; near-lossless",
    applies = adam_like,
    edit = function(r) r.optimizer.name = "adam8bit"; r.optimizer.state_dtype = nil end },
  { name = "Adafactor (no momentum)", cost = 2, note = "factored second moment; tuning needed",
    applies = function(r) return trains(r) and r.optimizer.name ~= "adafactor"
      and r.optimizer.name ~= "none" and r.optimizer.name ~= "sgd" end,
    edit = function(r) r.optimizer.name = "adafactor"; r.optimizer.state_dtype = "fp32" end },
  { name = "LoRA r=16 (q,k,v,o)", cost = 3, note = "adapters only: less capacity than full fine-tuning",
    -- LoRA over TransformerEngine's te.Linear is refused by the spec (not modelled)
    applies = function(r) return trains(r) and not r.lora and not frameworks.of(r).fp8_linear end,
    edit = function(r) r.lora = step.default_lora(16, 32) end },
  { name = "QLoRA r=16 (q,k,v,o) on nf4 weights", cost = 4, needs = "bitsandbytes", refines = { "LoRA r=16 (q,k,v,o)" },
    note = "adapters over 4-bit frozen weights: dequantized per matmul, slower",
    applies = function(r) return trains(r) and not r.lora and not r.quant end,
    edit = function(r)
      r.lora = step.default_lora(16, 32)
      r.quant = { store = "nf4", compute = r.dtype }
    end },
  { name = "half the batch, twice the accumulation", cost = 1,
    note = "same effective batch, ~same compute, more steps",
    applies = function(r) return trains(r) and r.batch > 1 end,
    edit = function(r) r.batch = r.batch // 2; r.grad_accum = (r.grad_accum or 1) * 2 end },
}

-- The data-parallel layout's levers, priced per rank by stdlib/parallel.lua:
-- ZeRO stages and FSDP over the ranks a layout has, CPU offload, and on one
-- GPU DeepSpeed's ZeRO-Offload. They edit the parallel: table as written
-- (L._spec), which is read again with all of parallel.read's checks: a
-- combination those refuse (ZeRO with FSDP, parameter offload below stage
-- 3, QLoRA under a layout) is not a run, so never a combination.
local function has_optimizer(r)
  return trains(r) and r.optimizer.name ~= "none"
end
local DDP_ONLY = { "bucket_cap_mb", "gradient_as_bucket_view" }
local function spec_of(r) return r.parallel._spec end
local function sharding(r, zero, fsdp)
  local s = spec_of(r)
  for _, k in ipairs(DDP_ONLY) do s[k] = nil end -- DDP's buckets go with DDP
  s.zero, s.fsdp, s.reshard_after_forward = zero, fsdp, nil
end
local function offload(r, what)
  local s = spec_of(r)
  s.offload = s.offload or {}
  for _, w in ipairs(what) do s.offload[w] = "cpu" end
end

function M.layout_levers(run)
  local L, out = run.parallel, {}
  local function add(t) out[#out + 1] = t end
  if not L then
    add({ name = "DeepSpeed ZeRO-Offload on one GPU (stage 2, optimizer on CPU)", cost = 2,
      needs = "deepspeed",
      layout = true, note = "fp32 master and Adam states on the host; CPU Adam step, PCIe each step",
      applies = has_optimizer,
      edit = function(r) r.parallel = { _spec = { dp = 1, zero = 2,
        offload = { optimizer = "cpu" } } } end })
    add({ name = "DeepSpeed ZeRO-3 offload on one GPU (parameters and optimizer on CPU)",
      cost = 3, layout = true, needs = "deepspeed",
      refines = { "DeepSpeed ZeRO-Offload on one GPU (stage 2, optimizer on CPU)" },
      note = "parameters fetched over PCIe per layer, forward and backward: slow",
      applies = has_optimizer,
      edit = function(r) r.parallel = { _spec = { dp = 1, zero = 3,
        offload = { optimizer = "cpu", params = "cpu" } } } end })
    return out
  end
  local n = L.dp * L.cp
  local zeros = {}
  if n > 1 and not L.fsdp then
    local what = { "optimizer states", "+ gradients", "+ parameters" }
    for k = 1, 3 do
      local name = ("ZeRO-%d (%s over %d ranks)"):format(k, what[k], n)
      if L.zero < k then
        add({ name = name, cost = k == 3 and 1 or 0, layout = true, needs = "deepspeed",
          refines = #zeros > 0 and { table.unpack(zeros) } or nil,
          note = k == 3 and "1.5x DDP's communication (parameters gathered per layer)"
            or "DDP's communication volume",
          applies = trains, edit = function(r) sharding(r, k, nil) end })
      end
      zeros[#zeros + 1] = name
    end
  end
  if n > 1 and L.zero == 0 and L.fsdp ~= "full_shard" then
    add({ name = ("FSDP full_shard over %d ranks"):format(n), cost = 1, layout = true,
      needs = "fsdp",
      note = "parameters gathered per wrapped layer, forward and backward",
      applies = trains, edit = function(r) sharding(r, nil, "full_shard") end })
  end
  if L.offload.optimizer == "none" then
    add({ name = L.fsdp and "FSDP CPU offload (parameters, gradients and optimizer)"
        or "optimizer offload to CPU", cost = 2, layout = true,
      needs = L.fsdp and "fsdp" or "deepspeed",
      note = "states and the optimizer step on the host; PCIe each step (FSDP moves "
        .. "parameters too)",
      applies = has_optimizer,
      edit = function(r) offload(r, spec_of(r).fsdp and { "optimizer", "params" }
        or { "optimizer" }) end })
  end
  if L.offload.params == "none" and not L.fsdp then
    add({ name = "parameter offload to CPU (ZeRO-3)", cost = 3, layout = true,
      needs = "deepspeed",
      note = "parameters fetched over PCIe per layer, forward and backward: slow",
      applies = trains, edit = function(r) offload(r, { "params" }) end })
  end
  return out
end

-- The levers that change this run: the menu's and the layout's, less
-- those naming a library the run's stack does not have (`needs`: Liger,
-- bitsandbytes, DeepSpeed, FSDP, sdpa are PyTorch's; frameworks' `libraries`).
function M.levers(run)
  local have = {}
  for _, l in ipairs(frameworks.of(run).libraries or {}) do have[l] = true end
  local out = {}
  for _, list in ipairs({ M.MENU, M.layout_levers(run) }) do
    for _, m in ipairs(list) do
      if m.applies(run) and (not m.needs or have[m.needs]) then out[#out + 1] = m end
    end
  end
  return out
end

-- The run with `levers` applied in order, its layout read again from the
-- edited parallel: table, and the set of the run's fields the edits read or
-- wrote (every other one is the run's own); nil and the reason when that is
-- no run (the layout's own checks refuse it).
-- The run's tables are shared with r until an edit reads one (then r gets
-- a copy to change): most edits touch a field or two of a run that holds
-- dozens of tables (a copy of each per combination cost more than the
-- rest of the bookkeeping). Nothing downstream writes into a run's tables
-- (tests/lua/test_fit.lua checks that fit.knobs leaves its run as it was).
-- reads (optional): the layouts read so far (par.read's tables, or its
-- refusals, by the layout as written and the micro-batch default it takes
-- from the run, run.grad_accum): a search applies a few layouts to dozens
-- of combinations, and nothing edits a layout once read. A layout lever
-- edits the layout as written (a copy of L._spec); the run's own layout is
-- not copied.
local NO_BASE = {}
local function apply(run, levers, reads)
  local r, touched = runs.shallow(run), {}
  local view = setmetatable({}, { -- the edits see r through it
    __index = function(_, k)
      touched[k] = true
      local v = r[k]
      if type(v) == "table" and v == run[k] and k ~= "sim" then
        if k == "parallel" then -- the edits write the layout as written, read again below
          v = runs.shallow(v)
          v._spec = copy(v._spec)
        else
          v = copy(v)
        end
        r[k] = v
      end
      return v
    end,
    __newindex = function(_, k, v) touched[k] = true r[k] = v end })
  for _, m in ipairs(levers) do m.edit(view) end
  if r.parallel then -- (the run's own layout unless an edit read or wrote it)
    touched.parallel = true
    local where = run.parallel and run.parallel.where or "fit"
    local spec = r.parallel._spec
    local key = reads and runs.key(spec, NO_BASE) .. "|" .. tostring(r.grad_accum)
    local read = key and reads[key] -- { ok, the layout or the refusal }
    if not read then
      read = table.pack(pcall(par.read, spec, where, r))
      if key then reads[key] = read end
    end
    local ok, L = read[1], read[2]
    if ok then ok, L = pcall(par.check, L, r, where) end
    if not ok then
      if type(L) ~= "table" then error(L, 0) end -- a bug, not a refusal
      return nil, L.msg
    end
    r.parallel = L
  end
  return r, touched
end

function M.apply(run, levers)
  local r, why = apply(run, levers)
  if not r then return nil, why end
  return r
end

local OPTIMIZER = { optimizer = true }
local TRUNK_SKIP = step.UNREAD_BY_LAYERS

-- A lever must save at least this share of what the run needs without it:
-- below 1 % a budget cannot tell it from nothing.
M.MIN_SAVING = 0.01
-- Whether a run's step on one GPU is simulated without its optimizer and
-- the optimizer priced on its own (swap.recorder's lean): the figures are
-- the same (tests/lib/compare.lua's walked turns it off to compare).
M.LEAN_STEPS = true
-- How many lever combinations a search may consider without being told a
-- depth. A count, not a time: the same spec lists the same combinations on
-- every machine (a CPU-time budget made the list depend on the load).
M.SEARCH_RUNS = 600

-- Combinations of up to `depth` levers that apply to the run and fit the
-- budget, cheapest first. Every lever in a combination must save memory
-- in it (need with it at least MIN_SAVING below need without it, both
-- simulated; a lever another one needs, ZeRO under optimizer offload, is
-- checked through that one), and a costlier variant (`refines`: QLoRA over
-- LoRA, every layer over every 2nd, ZeRO-3 over ZeRO-1 and 2) must save
-- more than each variant it refines, so a knob that changes nothing is
-- never listed. Each entry: knobs, levers (names), cost, need, saving
-- (against the run as given), notes, at_peak. Without `depth`: 3, or fewer
-- when combinations of that many levers number over SEARCH_RUNS; returned
-- as the fourth value.
function M.knobs(run, budget, depth)
  local items, index = {}, {}
  for _, m in ipairs(M.levers(run)) do items[#items + 1] = m; index[m.name] = #items end
  -- combinations that edit the run into the same run (QLoRA after LoRA,
  -- checkpointing policies over each other) are simulated once, and on one
  -- GPU those that differ only in the optimizer (8-bit AdamW, bf16 states,
  -- Adafactor) priced on one recorded step (stdlib/swap_optimizer.lua); the
  -- search is lean (it reads the need and at_peak only): a layout whose
  -- rank runs the forward and backward another one ran replays them
  -- (parallel.lua M.search)
  local memo, by_run, search, steps, states = {}, {}, par.search(run, nil, true), {}, {}
  local kept = {} -- layers kept from one simulation for the next (compose.keeping)
  local setups = {} -- models built, by the run less what no setup reads (shared_setup)
  local reads = {} -- layouts read (apply)
  -- key: the run's key (the body's too when no lever touched the optimizer)
  local function one_gpu(r, touched, key)
    local body = touched.optimizer and runs.key(r, run, OPTIMIZER, touched) or key
    local st = steps[body] and swap.price(steps[body], r, states)
    if st then return frameworks.need(frameworks.of(r), st.peak_reserved), st end
    -- layers walked and the model built as in a run that differed only in
    -- its loss or optimizer (stdlib/compose.lua M.keeping, stdlib/shared_setup.lua)
    local trunk = runs.key(r, run, TRUNK_SKIP, touched)
    local function simulate(rec)
      return compose.keeping(kept, trunk, shared_setup.sharing, setups, trunk, r, M.need, r, nil,
        rec)
    end
    -- a body met first is recorded lean (swap.recorder): its own optimizer
    -- is priced like the others
    local rec = swap.recorder(M.LEAN_STEPS and not steps[body])
    local need, st = simulate(rec)
    if not swap.ready(rec) then return need, st end
    steps[body] = steps[body] or rec
    if not rec.lean_done then return need, st end
    st = swap.price(rec, r, states)
    if st then return frameworks.need(frameworks.of(r), st.peak_reserved), st end
    return simulate(nil) -- a step of this optimizer keeps something: the whole step
  end
  local function priced(r, touched, key, kr)
    if r.parallel then
      local trunk = runs.key(kr, run, TRUNK_SKIP, touched)
      return compose.keeping(kept, trunk, shared_setup.sharing, setups, trunk, r, M.need, r,
        search)
    end
    return one_gpu(r, touched, key)
  end
  -- the levers that edit the optimizer and nothing else
  local optimizer_bits = 0
  for k, m in ipairs(items) do
    local r, touched = apply(run, { m }, reads)
    if r and touched.optimizer and next(touched, next(touched)) == nil then
      optimizer_bits = optimizer_bits | (1 << (k - 1))
    end
  end
  local function need_of(mask)
    if not memo[mask] then
      local chosen = {}
      for k, m in ipairs(items) do if mask & (1 << (k - 1)) ~= 0 then chosen[#chosen + 1] = m end end
      local r, touched = apply(run, chosen, reads)
      if r then
        -- what the levers changed, less what the device does not see
        -- a layout is read from its parallel: table as written (_spec) and
        -- the run, so that table keys it (a layout's 30 fields cost more)
        local kr = r.parallel and setmetatable({ parallel = r.parallel._spec or r.parallel },
          { __index = r })
        local key = runs.key(kr or r, run, r.parallel and par.device_ignores(r.parallel), touched)
        if not by_run[key] and not r.parallel and touched.optimizer then
          -- the run without its optimizer levers first (a combination
          -- consider() asks for anyway): its step prices this one
          local body = mask & ~optimizer_bits
          if body ~= mask then need_of(body) end
        end
        if not by_run[key] then
          -- a lever the model refuses (a fused loss under autocast or on a
          -- VLM's head) makes no run; the run as given is never refused here
          local ok, need, st
          if mask == 0 then ok, need, st = true, priced(r, touched, key, kr)
          else ok, need, st = pcall(priced, r, touched, key, kr) end
          if not ok and type(need) ~= "table" then error(need, 0) end -- a bug, not a refusal
          by_run[key] = ok and { need = need, st = st } or { invalid = true }
        end
        memo[mask] = by_run[key]
      else
        memo[mask] = { invalid = true }
      end
    end
    return memo[mask].need, memo[mask].st
  end
  local base = need_of(0)
  if not depth then -- as deep as SEARCH_RUNS combinations allow
    depth = 1
    for d = 3, 2, -1 do
      local n, c, combos = #items, 1, 0
      for k = 1, d do c = c * (n - k + 1) // k; combos = combos + c end
      if combos <= M.SEARCH_RUNS then depth = d break end
    end
  end
  local out = {}
  local function consider(mask)
    local need, st = need_of(mask)
    if not need or need > budget then return end
    local names, notes, cost = {}, {}, 0
    for k, m in ipairs(items) do
      if mask & (1 << (k - 1)) ~= 0 then
        local bit = 1 << (k - 1)
        local without = need_of(mask & ~bit)
        if without and without - need < without * M.MIN_SAVING then return end -- saves (next to) nothing
        for _, simpler_name in ipairs(m.refines or {}) do
          local plain = index[simpler_name]
          if plain then -- the simpler variant in its place must need more
            local pbit = 1 << (plain - 1)
            if mask & pbit ~= 0 then return end
            local simpler = need_of((mask & ~bit) | pbit)
            if simpler and simpler - need < simpler * M.MIN_SAVING then return end
          end
        end
        names[#names + 1] = m.name
        notes[#notes + 1] = m.note
        cost = cost + m.cost
      end
    end
    out[#out + 1] = { knobs = #names > 0 and table.concat(names, " + ") or "as given",
      levers = names, cost = cost, need = need, saving = base - need,
      notes = table.concat(notes, "; "), at_peak = st.at_peak }
  end
  local function rec(start, mask, n)
    if n > 0 then consider(mask) end
    if n == depth then return end
    for k = start, #items do rec(k + 1, mask | (1 << (k - 1)), n + 1) end
  end
  consider(0)
  rec(1, 0, 0)
  table.sort(out, function(a, b)
    if (a.knobs == "as given") ~= (b.knobs == "as given") then return a.knobs == "as given" end
    if a.cost ~= b.cost then return a.cost < b.cost end
    if a.need ~= b.need then return a.need < b.need end
    return a.knobs < b.knobs
  end)
  -- the levers that change this run: those that make a run, alone or with
  -- a partner (QLoRA under a layout never does)
  local used = {}
  for mask, m in pairs(memo) do
    if not m.invalid then
      for k = 1, #items do if mask & (1 << (k - 1)) ~= 0 then used[k] = true end end
    end
  end
  local levers = {}
  for k, m in ipairs(items) do if used[k] then levers[#levers + 1] = m end end
  return out, base, levers, depth, memo[0].st.at_peak
end

return M
