-- Compiled budgets of a multi-GPU run (a spec's `parallel:` table): the
-- largest rank's device total, the figure stdlib/parallel.lua budget
-- reports, for any batch and seq of one layout, in microseconds.
--
--   local est, why = require("stdlib.compiled_parallel").compile(run)
--   est:device_total(batch, seq) -> bytes, or nil (then simulate)
--   est:device_line(batch, seqs) -> {bytes or nil, ...} (nil: ask device_total)
--
-- A rank's device total is the caching allocator's reserved peak plus what
-- the framework keeps outside it, so each pipeline role's step is traced at
-- stdlib/compiled.lua's probes, on exact bytes, and fitted as a device
-- program (runtime/core/trace.c vr_trace_device): each tensor's change
-- rounded to its block as the allocator rounds it, the reserved blocks
-- counted as the tape counts them (a tensor above 10 MiB its own segment
-- rounded to 2 MiB). A stage that holds micro-batches in flight holds them
-- as one block of a measured sum of rounded tensors, which no polynomial
-- gives: its program reads those bytes as an input, and the measuring
-- pass's forward, a device program of its own, gives them (its live bytes
-- at the end less the activation it sends). The layout's own buffers are
-- rounded as the run's allocator rounds them before they reach a probe's
-- trace (stdlib/parallel.lua probe_block).
--
-- Batch 1 and seq 1 fold attention operands without copies (another op
-- structure, stdlib/compiled.lua program()): each of those lines has
-- programs of its own, fitted on first use; (1, 1), and a line that does
-- not fit, answer nil. compile checks the programs against the simulator at
-- the run's own sizes and at a far larger seq, and refuses them when they
-- differ.
local vram = require("vram")
local compiled = require("stdlib.compiled")
local par = require("stdlib.parallel")
local frameworks = require("stdlib.frameworks")
local with = require("stdlib.run").with
local moe = require("stdlib.moe")

local M = {}

local NAMES = { "batch", "seq" }
-- transformers' expert loop (stdlib/compiled.lua expert_rows): each expert
-- gets floor or ceil of rows x top_k / experts tokens, so its programs take
-- the quotient q as a third size and are fitted per remainder r
local LOOP_NAMES = { "batch", "seq", "expert_rows" }

-- Why a run has no program before any probe, or nil.
local function refused(run)
  local fw = frameworks.of(run)
  if fw.prealloc then
    return "the framework preallocates its pool: a device total is the pool, not a peak"
  end
end

-- The tokens a sequence comes in: sequence parallelism splits each
-- activation's rows over tp (rows // tp, a polynomial only in whole
-- multiples), so its programs take seq in units of tp.
local function unit(L) return L.sp and L.tp or 1 end

-- One probe of a role: its rank-local run at sizes p (seq in units; an
-- expert loop's quotient third, the run's split holding the remainder),
-- traced.
local function probe(run, L, role, p, exact, measuring)
  local changes = { batch = p[1], seq = p[2] * unit(L) }
  if p[3] then changes.text = compiled.SIZES.expert_rows.set(run, p[3]).text end
  local lrun = par.local_run(with(run, changes), L, role)
  lrun = with(lrun, { kernels_of = lrun.framework, framework = frameworks.EXACT, trace = true,
    trace_exact = exact })
  return par.probe_role(lrun, L, role, measuring)
end

-- A role's device program (its measuring pass's when measuring) over batch
-- and seq, held: stdlib/compiled.lua's line sizes; nil and the reason when
-- refused. Also the sent bytes of a measuring pass.
local function fit(run, L, role, held, measuring)
  local names = run.text.moe and run.text.moe.split and LOOP_NAMES or NAMES
  local ps, deg = compiled.probes(names, held, #names > 2 and 2 or 1)
  local traces, sent = {}, nil
  for i, p in ipairs(ps) do
    local ok, out = pcall(probe, run, L, role, p, next(held) ~= nil or nil, measuring)
    if not ok then
      return nil, type(out) == "table" and out.msg or tostring(out) -- (Sim:sized's, or an error)
    end
    if not out or not out.trace then return nil, "a probe of the step was cut short" end
    if measuring and sent and out.sent ~= sent then return nil, "the sent activation's bytes vary" end
    sent, traces[i] = out.sent, out.trace
    if #out.trace ~= #traces[1] then
      return nil, "the probes' traces differ in shape (a size-dependent branch)"
    end
  end
  local alloc = frameworks.of(run).allocator or { round = 0, small_max = 0, large_round = 0 }
  local prog, why = vram.fit_program(traces, {}, alloc.round, ps, deg, alloc)
  return prog, why, sent
end

-- Every role's programs for held sizes; nil and the reason when refused.
local function programs(run, held)
  local L, set = run.parallel, {}
  for _, role in ipairs(par.roles(L, run)) do
    local e, why = {}, nil
    if role.inflight > 1 then
      e.measure, why, e.sent = fit(run, L, role, held, true)
      if not e.measure then return nil, why end
    end
    e.step, why = fit(run, L, role, held, false)
    if not e.step then return nil, why end
    set[#set + 1] = e
  end
  return set
end

local Est = {}
Est.__index = Est

-- The programs answering (batch, seq) and, for an expert loop, remainder
-- r: the grid's, or a line's, each fitted on first use (false when it does
-- not fit); nil at (1, 1).
function Est:set(batch, seq, r)
  if batch == 1 and seq == 1 then return nil end
  local line = batch == 1 and "batch" or (seq == 1 and "seq" or "grid")
  local key = r and line .. r or line
  if self.sets[key] == nil then
    local run = r and compiled.with_split(self.run, r) or self.run
    local held = line == "batch" and { 1 } or (line == "seq" and { nil, 1 } or {})
    self.sets[key] = programs(run, held) or false
  end
  return self.sets[key] or nil
end

-- The largest rank's device total at (batch, seq); nil where no program
-- answers (the caller simulates).
function Est:device_total(batch, seq)
  local u, q, r = self.unit, nil, nil
  if seq % u ~= 0 then return nil end
  if self.loop then -- experts without tokens skip their ops: simulated
    q, r = moe.split(batch * seq, self.loop.top_k, self.loop.experts)
    if q < 1 then return nil end
  end
  seq = seq // u
  local set = self:set(batch, seq, r)
  if not set then return nil end
  local top
  for i = 1, #set do
    local e, reserved = set[i], nil
    if e.measure then
      local _, _, live
      if q then _, _, live = e.measure:device(batch, seq, q) else _, _, live = e.measure:device(batch, seq) end
      if q then reserved = e.step:device(batch, seq, q, live - e.sent)
      else reserved = e.step:device(batch, seq, live - e.sent) end
    elseif q then
      reserved = e.step:device(batch, seq, q)
    else
      reserved = e.step:device(batch, seq)
    end
    -- frameworks.device_total: the need (refused() leaves out preallocated pools)
    local total = frameworks.need(self.fw, reserved) + self.nccl
    if not top or total > top then top = total end
  end
  return top
end

-- Est:device_total at batch and each seq of the list seqs (a sweep's
-- row): each program evaluated along the row in one call
-- (prog:device_line) rather than once a point. A list with nil where
-- device_total must answer itself: a line's programs (batch or seq 1), an
-- expert loop's, a seq the unit does not divide, sizes that overflow or a
-- measured input below zero (device_total raises there as it would have).
function Est:device_line(batch, seqs)
  local out, u, set = {}, self.unit, self.sets.grid
  if self.loop or batch == 1 or not set then return out end
  local useqs, at = {}, {}
  for i, seq in ipairs(seqs) do
    if seq % u == 0 and seq // u ~= 1 then
      useqs[#useqs + 1] = seq // u
      at[#at + 1] = i
    end
  end
  local top = {} -- k -> the largest total so far, false once a point fails
  for i = 1, #set do
    local e, reserved = set[i], nil
    if e.measure then
      local _, live = e.measure:device_line(batch, useqs)
      local inputs = {}
      for k = 1, #useqs do
        local x = live[k] and live[k] - e.sent
        if not x or x < 0 then top[k], x = false, 0 end
        inputs[k] = x
      end
      reserved = e.step:device_line(batch, useqs, inputs)
    else
      reserved = e.step:device_line(batch, useqs)
    end
    for k = 1, #useqs do
      local r, t = reserved[k], top[k]
      if not r then
        top[k] = false
      elseif t ~= false then
        local total = frameworks.need(self.fw, r) + self.nccl
        if not t or total > t then top[k] = total end
      end
    end
  end
  for k, i in ipairs(at) do out[i] = top[k] or nil end
  return out
end

-- The run's programs, or nil and why not.
function M.compile(run)
  local why = refused(run)
  if why then return nil, why end
  local self = setmetatable({ run = run, sets = {}, fw = frameworks.of(run),
    nccl = par.nccl_bytes(run.parallel), unit = unit(run.parallel) }, Est)
  if run.parallel.ep == 1 and compiled.expert_loop(run) then
    self.loop = { top_k = run.text.moe.top_k, experts = run.text.moe.experts }
  end
  -- the grid's programs at the run's own remainder, first: a run that does
  -- not fit there is refused at once
  local own_r = self.loop and select(2, moe.split(run.batch * run.seq, self.loop.top_k,
    self.loop.experts))
  local ok
  ok, why = programs(self.loop and compiled.with_split(run, own_r) or run, {})
  if not ok then return nil, why end
  self.sets[own_r and "grid" .. own_r or "grid"] = ok
  -- checked against the simulator at the run's own sizes and far past the
  -- probes (a size-dependent branch the probes cannot see: a chunk count)
  local u = self.unit
  local far = math.max(8192, 2 * run.seq) // u * u
  for _, at in ipairs({ { run.batch, run.seq }, { run.batch + 1, far } }) do
    local got = self:device_total(at[1], at[2])
    if got then
      local want = par.budget(with(run, { batch = at[1], seq = at[2] })).device_total_bytes
      if got ~= want then
        return nil, ("the programs give %d B at batch %d, seq %d, the simulator %d B"):format(
          got, at[1], at[2], want)
      end
    end
  end
  return self
end

return M
