-- The largest value of one knob that fits a GPU, found by searching the
-- simulator (never by extrapolation), and cheap knob combinations that fit.
local step = require("stdlib.step")
local frameworks = require("stdlib.frameworks")
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

-- The levers, each with what it costs. applies(run) says whether the knob
-- changes the run at all (sdpa when the run already uses sdpa does not);
-- whether it saves memory is measured, never assumed.
local function trains(r) return r.mode == "train" end
local function adam_like(r)
  return r.optimizer.name == "adam" or r.optimizer.name == "adamw"
end
M.MENU = {
  { name = "sdpa attention", cost = 0, note = "same math, no T^2 attention buffers",
    applies = function(r) return r.attention == "eager" end,
    edit = function(r) r.attention = "sdpa" end },
  { name = "chunked cross-entropy (1024 rows)", cost = 0,
    note = "logits and their fp32 log-softmax one chunk at a time (CCE, chunked-loss kernels)",
    applies = function(r) return trains(r) and r.loss ~= "chunked" end,
    edit = function(r) r.loss = "chunked"; r.loss_chunk = 1024 end },
  { name = "gradient checkpointing (every layer)", cost = 2,
    refines = "gradient checkpointing (every 2nd layer)",
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
  { name = "8-bit AdamW", cost = 1, note = "bitsandbytes block-wise states; near-lossless",
    applies = adam_like,
    edit = function(r) r.optimizer.name = "adam8bit"; r.optimizer.state_dtype = nil end },
  { name = "Adafactor (no momentum)", cost = 2, note = "factored second moment; tuning needed",
    applies = function(r) return trains(r) and r.optimizer.name ~= "adafactor"
      and r.optimizer.name ~= "none" and r.optimizer.name ~= "sgd" end,
    edit = function(r) r.optimizer.name = "adafactor"; r.optimizer.state_dtype = "fp32" end },
  { name = "LoRA r=16 (q,k,v,o)", cost = 3, note = "adapters only: less capacity than full fine-tuning",
    applies = function(r) return trains(r) and not r.lora end,
    edit = function(r) r.lora = step.default_lora(16, 32) end },
  { name = "QLoRA r=16 (q,k,v,o) on nf4 weights", cost = 4, refines = "LoRA r=16 (q,k,v,o)",
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

-- A lever must save at least this share of what the run needs without it:
-- below 1 % a budget cannot tell it from nothing.
M.MIN_SAVING = 0.01
M.SEARCH_SECONDS = 4

-- Combinations of up to `depth` levers that apply to the run and fit the
-- budget, cheapest first. Every lever in a combination must save memory
-- in it (need with it at least MIN_SAVING below need without it, both
-- simulated), and a costlier
-- variant (`refines`: QLoRA over LoRA, every layer over every 2nd) must
-- save more than the variant it refines, so a knob that changes nothing is
-- never listed. Each entry: knobs, cost, need, saving (against the run as
-- given), notes, at_peak. Without `depth`: 3, or fewer when that many
-- simulations of this run would take over SEARCH_SECONDS of CPU (the
-- sandbox's default budget is 10 s); returned as the fourth value.
function M.knobs(run, budget, depth)
  local items, index = {}, {}
  for _, m in ipairs(M.MENU) do
    if m.applies(run) then items[#items + 1] = m; index[m.name] = #items end
  end
  local memo = {}
  local function need_of(mask)
    if not memo[mask] then
      local r = copy(run)
      for k, m in ipairs(items) do if mask & (1 << (k - 1)) ~= 0 then m.edit(r) end end
      local need, st = M.need(r)
      memo[mask] = { need = need, st = st }
    end
    return memo[mask].need, memo[mask].st
  end
  local t0 = os.clock()
  local base = need_of(0)
  local each = os.clock() - t0
  if not depth then -- as deep as about M.SEARCH_SECONDS of simulation allows
    depth = 1
    for d = 3, 2, -1 do
      local n, c, combos = #items, 1, 0
      for k = 1, d do c = c * (n - k + 1) // k; combos = combos + c end
      if combos * each <= M.SEARCH_SECONDS then depth = d break end
    end
  end
  local out = {}
  local function consider(mask)
    local need, st = need_of(mask)
    if need > budget then return end
    local names, notes, cost = {}, {}, 0
    for k, m in ipairs(items) do
      if mask & (1 << (k - 1)) ~= 0 then
        local bit = 1 << (k - 1)
        local without = need_of(mask & ~bit)
        if without - need < without * M.MIN_SAVING then return end -- k saves (next to) nothing
        local plain = m.refines and index[m.refines]
        if plain then -- the simpler variant in its place must need more
          local pbit = 1 << (plain - 1)
          local simpler = mask & pbit == 0 and need_of((mask & ~bit) | pbit)
          if not simpler or simpler - need < simpler * M.MIN_SAVING then return end
        end
        names[#names + 1] = m.name
        notes[#notes + 1] = m.note
        cost = cost + m.cost
      end
    end
    out[#out + 1] = { knobs = #names > 0 and table.concat(names, " + ") or "as given",
      cost = cost, need = need, saving = base - need, notes = table.concat(notes, "; "),
      at_peak = st.at_peak }
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
  return out, base, items, depth, memo[0].st.at_peak
end

return M
