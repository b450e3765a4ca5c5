-- Compiled estimates: the same run at seven small (batch, seq) probes is
-- traced once, each live-bytes change fitted as a polynomial in batch and
-- seq, and the resulting program answers any (batch, seq) in C — the same
-- peak the simulator gives, in microseconds. Runs whose op structure
-- depends on the sizes (generation's logits_to_keep, chunk sizes) are
-- refused with the reason.
--
--   local est = require("stdlib.compiled").compile(run)
--   est:peak(batch, seq)          -> tensors allocated, exact bytes
--   est:eval(batch, seq)          -> {peak, peak_phase, peak_op, at_peak}
local vram = require("vram")
local step = require("stdlib.step")
local errors = require("stdlib.errors")
local with = require("stdlib.run").with
local frameworks = require("stdlib.frameworks")

local M = {}

local PROBES = { { 1, 1 }, { 1, 2 }, { 1, 3 }, { 2, 1 }, { 2, 2 }, { 2, 3 }, { 3, 5 } }

local Est = {}
Est.__index = Est

-- At batch 1 or seq 1 matmul folds attention operands without copying
-- (stdlib/layers.lua eager_attention): a different op structure, so those
-- sizes have programs of their own, each fitted on first use from four
-- probes along its line (traced with that structure, vram.fit_program); a
-- line that cannot be fitted, and (1, 1), are simulated.
local LINES = { batch = { 1, nil }, seq = { nil, 1 } }

local function direct(self, batch, seq)
  return step.run(with(self.run, { batch = batch, seq = seq }))
end

local function trace(run, batch, seq, exact)
  -- exact bytes (the block rounding is applied at eval), the run's own
  -- kernels' buffers
  local st = step.run(with(run, { batch = batch, seq = seq, kernels_of = run.framework,
    framework = frameworks.EXACT, trace = true, trace_exact = exact }))
  return st.trace, st.names
end

-- The program for (batch, seq): the general one, a line's, or nil.
local function program(self, batch, seq)
  if batch ~= 1 and seq ~= 1 then return self.prog end
  if batch == 1 and seq == 1 then return nil end
  local line = batch == 1 and "batch" or "seq"
  if self.lines[line] == nil then
    local traces, names = {}, nil
    for i, x in ipairs({ 2, 3, 4, 5 }) do
      traces[i], names = trace(self.run, LINES[line][1] or x, LINES[line][2] or x, true)
    end
    local alloc = frameworks.of(self.run).allocator
    self.lines[line] = vram.fit_program(traces, names, alloc and alloc.round or 0) or false
  end
  return self.lines[line] or nil
end

function Est:peak(batch, seq)
  local prog = program(self, batch, seq)
  if prog then return prog:peak(batch, seq) end
  return direct(self, batch, seq).peak
end

function Est:eval(batch, seq)
  local prog = program(self, batch, seq)
  if prog then return prog:eval(batch, seq) end
  local st = direct(self, batch, seq)
  return { peak = st.peak, peak_phase = st.peak_phase, peak_op = st.peak_op,
    at_peak = st.at_peak }
end

function M.compile(run, where)
  local traces, names = {}, nil
  for i, p in ipairs(PROBES) do
    local tr, nm = trace(run, p[1], p[2])
    traces[i], names = tr, names or nm
  end
  local alloc = frameworks.of(run).allocator
  local prog, why = vram.fit_program(traces, names, alloc and alloc.round or 0)
  if not prog then errors.input(where, "", "this run cannot be compiled: " .. why) end
  return setmetatable({ prog = prog, run = run, lines = {} }, Est)
end

return M
