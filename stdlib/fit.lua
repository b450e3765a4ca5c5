-- The largest value of one knob that fits a GPU, found by searching the
-- simulator (never by extrapolation), and cheap knob combinations that fit.
local step = require("stdlib.step")
local report = require("stdlib.report")
local errors = require("stdlib.errors")

local M = {}

-- Bytes a run needs on the device: reserved peak plus framework overhead.
function M.need(run)
  if run.parallel then -- the largest rank's device total (stdlib/parallel.lua)
    local b = require("stdlib.parallel").budget(run)
    local at = setmetatable({}, { __index = function() return 0 end })
    for _, it in ipairs(b.breakdown) do at[it.category] = it.bytes end
    return b.device_total_bytes, { at_peak = at, budget = b }
  end
  local st = step.run(run)
  local fw = report.FRAMEWORK[run.framework or "pytorch"] or report.FRAMEWORK.pytorch
  return st.peak_reserved + (fw.context or 0), st
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

-- A run whose knobs can change without touching the original; the
-- simulator module (sim) is shared, not copied.
local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = (type(v) == "table" and k ~= "sim") and copy(v) or v end
  return c
end

-- Largest v in [1, limit] with need(run with knob=v) <= budget. Peaks grow
-- with each knob, so doubling then bisection finds the exact boundary.
function M.largest(run, knob, budget, limit)
  local set = M.KNOBS[knob] or errors.usage("fit: cannot vary '" .. knob ..
    "' (batch, seq, lora_rank)")
  limit = limit or (1 << 24)
  local function fits(v)
    local r = copy(run)
    set(r, v)
    local need, st = M.need(r)
    return need <= budget, need, st
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

-- Knob combinations, cheapest first; each with what it costs.
M.MENU = {
  { name = "as given", cost = 0, edit = function() end },
  { name = "sdpa attention", cost = 0, note = "no cost: same math, no T^2 buffers",
    edit = function(r) r.attention = "sdpa" end },
  { name = "gradient checkpointing", cost = 2, note = "~33% more compute (one extra forward)",
    edit = function(r) r.ckpt = true end },
  { name = "bf16 optimizer states", cost = 1, note = "small quality risk on long runs",
    edit = function(r) r.optimizer.state_dtype = "bf16" end },
  { name = "8-bit AdamW", cost = 1, note = "bitsandbytes block-wise states; near-lossless",
    edit = function(r) r.optimizer.name = "adam8bit"; r.optimizer.state_dtype = nil end },
  { name = "Adafactor (no momentum)", cost = 2, note = "factored second moment; tuning needed",
    edit = function(r) r.optimizer.name = "adafactor"; r.optimizer.state_dtype = "fp32" end },
  { name = "LoRA r=16", cost = 3, note = "adapters only: lower capacity than full fine-tuning",
    edit = function(r)
      r.lora = step.default_lora(16, 32)
    end },
  { name = "half the batch, twice the accumulation", cost = 1,
    note = "same effective batch, ~same compute, more steps",
    edit = function(r)
      if r.batch > 1 then r.batch = r.batch // 2; r.grad_accum = (r.grad_accum or 1) * 2 end
    end },
}

-- Every combination of up to `depth` menu items; those that fit, sorted by
-- total cost then by memory.
function M.knobs(run, budget, depth)
  depth = depth or 3
  local out = {}
  local n = #M.MENU
  local function try(chosen)
    local r = copy(run)
    local names, notes, cost = {}, {}, 0
    for _, i in ipairs(chosen) do
      local m = M.MENU[i]
      m.edit(r)
      names[#names + 1] = m.name
      if m.note then notes[#notes + 1] = m.note end
      cost = cost + m.cost
    end
    local need = M.need(r)
    if need <= budget then
      out[#out + 1] = { knobs = table.concat(names, " + "), cost = cost, need = need,
        notes = table.concat(notes, "; ") }
    end
  end
  local function rec(start, chosen)
    if #chosen > 0 then try(chosen) end
    if #chosen == depth then return end
    for i = start, n do
      chosen[#chosen + 1] = i
      rec(i + 1, chosen)
      chosen[#chosen] = nil
    end
  end
  try({ 1 })
  rec(2, {})
  table.sort(out, function(a, b)
    if a.cost ~= b.cost then return a.cost < b.cost end
    return a.need < b.need
  end)
  return out
end

return M
