-- Compiled budgets of a multi-GPU run (a spec's `parallel:` table): the
-- largest rank's device total, the figure stdlib/parallel.lua budget
-- reports, for any batch and seq of one layout, in microseconds.
--
--   local est, why = require("stdlib.compiled_parallel").compile(run)
--   est:device_total(batch, seq) -> bytes, or nil (then simulate)
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

local M = {}

local NAMES = { "batch", "seq" }

-- Why a run has no program before any probe, or nil.
local function refused(run)
  local fw = frameworks.of(run)
  if fw.prealloc then
    return "the framework preallocates its pool: a device total is the pool, not a peak"
  end
  -- a loss computed in chunks: their count and size depend on the rows
  -- (stdlib/loss.lua), past every probe
  if run.loss == "chunked" or run.loss == "litgpt_chunked" or run.loss == "liger_fused" then
    return ("the %s loss's chunks depend on batch x seq: no polynomial"):format(run.loss)
  end
  if run.parallel.cp > 1 then
    return "ring attention's K/V buffers (cp > 1) are 4 x a rounded size and seq is split "
      .. "over cp: no polynomial in batch and seq"
  end
end

-- The tokens a sequence comes in: sequence parallelism splits each
-- activation's rows over tp (rows // tp, a polynomial only in whole
-- multiples), so its programs take seq in units of tp.
local function unit(L) return L.sp and L.tp or 1 end

-- One probe of a role: its rank-local run at sizes p (seq in units),
-- traced.
local function probe(run, L, role, p, exact, measuring)
  local lrun = par.local_run(with(run, { batch = p[1], seq = p[2] * unit(L) }), L, role)
  lrun = with(lrun, { kernels_of = lrun.framework, framework = frameworks.EXACT, trace = true,
    trace_exact = exact })
  return par.probe_role(lrun, L, role, measuring)
end

-- A role's device program (its measuring pass's when measuring) over batch
-- and seq, held: stdlib/compiled.lua's line sizes; nil and the reason when
-- refused. Also the sent bytes of a measuring pass.
local function fit(run, L, role, held, measuring)
  local ps, deg = compiled.probes(NAMES, held, 1)
  local traces, sent = {}, nil
  for i, p in ipairs(ps) do
    local ok, out = pcall(probe, run, L, role, p, next(held) ~= nil or nil, measuring)
    if not ok then
      return nil, type(out) == "table" and out.msg or (tostring(out):gsub("^" .. par.NOT_COMPILED, ""))
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

-- The programs answering (batch, seq): the grid's, or a line's (fitted on
-- first use; false when it does not fit); nil at (1, 1).
function Est:set(batch, seq)
  if batch ~= 1 and seq ~= 1 then return self.main end
  if batch == 1 and seq == 1 then return nil end
  local line = batch == 1 and "batch" or "seq"
  if self.lines[line] == nil then
    self.lines[line] = programs(self.run, line == "batch" and { 1 } or { nil, 1 }) or false
  end
  return self.lines[line] or nil
end

-- The largest rank's device total at (batch, seq); nil where no program
-- answers (the caller simulates).
function Est:device_total(batch, seq)
  local u = self.unit
  if seq % u ~= 0 then return nil end
  seq = seq // u
  local set = self:set(batch, seq)
  if not set then return nil end
  local top
  for i = 1, #set do
    local e, reserved = set[i], nil
    if e.measure then
      local _, _, live = e.measure:device(batch, seq)
      reserved = e.step:device(batch, seq, live - e.sent)
    else
      reserved = e.step:device(batch, seq)
    end
    -- frameworks.device_total: the need (refused() leaves out preallocated pools)
    local total = frameworks.need(self.fw, reserved) + self.nccl
    if not top or total > top then top = total end
  end
  return top
end

-- The run's programs, or nil and why not.
function M.compile(run)
  local why = refused(run)
  if why then return nil, why end
  local main
  main, why = programs(run, {})
  if not main then return nil, why end
  local self = setmetatable({ run = run, main = main, lines = {}, fw = frameworks.of(run),
    nccl = par.nccl_bytes(run.parallel), unit = unit(run.parallel) }, Est)
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
