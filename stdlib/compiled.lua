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
-- sizes are simulated rather than evaluated from the fit.
local function direct(self, batch, seq)
  local r = setmetatable({}, { __index = self.run })
  for k, v in pairs(self.run) do r[k] = v end
  r.batch, r.seq = batch, seq
  return step.run(r)
end

function Est:peak(batch, seq)
  if batch == 1 or seq == 1 then return direct(self, batch, seq).peak end
  return self.prog:peak(batch, seq)
end

function Est:eval(batch, seq)
  if batch == 1 or seq == 1 then
    local st = direct(self, batch, seq)
    return { peak = st.peak, peak_phase = st.peak_phase, peak_op = st.peak_op,
      at_peak = st.at_peak }
  end
  return self.prog:eval(batch, seq)
end

function M.compile(run, where)
  local traces, names = {}, nil
  for i, p in ipairs(PROBES) do
    -- exact bytes (the block rounding is applied at eval), the run's own
    -- kernels' buffers
    local r = with(run, { batch = p[1], seq = p[2], kernels_of = run.framework,
      framework = frameworks.EXACT, trace = true })
    local st = step.run(r)
    traces[i], names = st.trace, names or st.names
  end
  local alloc = frameworks.of(run).allocator
  local prog, why = vram.fit_program(traces, names, alloc and alloc.round or 0)
  if not prog then errors.input(where, "", "this run cannot be compiled: " .. why) end
  return setmetatable({ prog = prog, run = run }, Est)
end

return M
