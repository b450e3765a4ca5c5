-- One simulated training step priced again under another optimizer,
-- without simulating the model again (fit --knobs: 8-bit AdamW, bf16
-- states, Adafactor over the same model, loss and batch).
--
-- Why it is exact. A step (stdlib/step.lua simulate) runs: A, the model
-- built and loaded; B, the optimizer states allocated; C, inputs, forward
-- and backward (every micro-batch); D, the optimizer step; E, zero_grad and
-- the inputs dropped. Only B and D read the optimizer, and the tensors B
-- allocates stay alive to the end. Live and reserved bytes are sums over
-- the tensors alive (the reserved counter sums each block,
-- vr_tape_rounding), so under another optimizer C and E see the same
-- changes from a start higher or lower by what B allocated: their peaks
-- move by that difference, at the same moments. The tape measures C and E
-- on the simulated step (a window, tape:window) and B and D under the
-- other optimizer on a tape of their own; the step's peaks are then the
-- highest of A's, B's, C's, D's and E's, the first to reach it giving the
-- categories at the peak (the tape keeps the first moment live bytes are
-- highest). tests/lua/test_swap_optimizer.lua compares with the step
-- simulated under each optimizer.
--
--   local rec = swap.recorder()
--   local st = step.run(run, rec)     -- the step, recorded when it can be
--   if swap.ready(rec) then st2 = swap.price(rec, run2) end
--       -- run2: run with another run.optimizer, nothing else changed
--
-- Not recorded (swap.ready false): anything but a training step, an RL
-- update, a jitted framework (its optimizer is fused into the step's
-- outputs, stdlib/xla.lua), a timeline or a compiled-estimate probe.
local step = require("stdlib.step")
local optim = require("stdlib.optim")

local M = {}

-- Calls step.simulate makes at its seams (step.lua's `rec` argument).
local Recorder = {}
Recorder.__index = Recorder

function M.recorder() return setmetatable({}, Recorder) end

local function now(tape)
  local live, reserved = tape:live()
  return { live = live, reserved = reserved, cat = tape:live_by_category() }
end

-- A ends: the model built and loaded, adapters made, before the states.
-- (step.simulate calls these only for a step that can be recorded.)
function Recorder:setup_done(S, trainable)
  self.trainable = trainable
  self.a = now(S.tape)
  local st = S.tape:stats()
  self.a.peak, self.a.peak_reserved, self.a.at_peak = st.peak, st.peak_reserved, st.at_peak
end

-- B ends: the states allocated; C opens.
function Recorder:states_done(S)
  self.b = now(S.tape)
  S.tape:window()
end

-- C ends: every backward done.
function Recorder:backward_done(S)
  self.c = S.tape:window_peaks()
  self.c_end = now(S.tape)
end

-- D ends: the optimizer stepped; E opens.
function Recorder:step_done(S)
  self.d_end = now(S.tape)
  S.tape:window()
end

-- E ends: the step is over.
function Recorder:finished(S)
  self.e = S.tape:window_peaks()
  self.done = true
end

-- Whether rec recorded a step that other optimizers can be priced on.
function M.ready(rec) return rec.done == true end

local CATS = nil -- the category names, from the first table met
local function plus(a, b, c, d) -- a + b - c + d per category (c, d optional)
  CATS = CATS or (function()
    local k = {}
    for name in pairs(a) do k[#k + 1] = name end
    return k
  end)()
  local out = {}
  for _, k in ipairs(CATS) do
    out[k] = a[k] + b[k] - (c and c[k] or 0) + (d and d[k] or 0)
  end
  return out
end

-- The peaks of rec's step under run.optimizer: { peak, peak_reserved,
-- at_peak, paged_state_bytes } (only these: no phase, op or phase ends).
-- run: the recorded run with another optimizer, nothing else changed.
function M.price(rec, run)
  assert(M.ready(rec), "swap_optimizer.price: the step was not recorded")
  local S = step.new_sim(run) -- the run's allocator rounding
  local tape = S.tape
  -- B under this optimizer, from nothing
  tape:window()
  optim.init_state(S, rec.trainable, run.optimizer)
  local b = tape:window_peaks()
  local s = now(tape)
  -- D under this optimizer, from the states
  tape:window()
  optim.step(S, rec.trainable, run.optimizer)
  local d = tape:window_peaks()
  local d_end = now(tape)
  -- what this optimizer's states hold beyond the recorded one's
  local a, b0 = rec.a, rec.b
  local shift = s.live - (b0.live - a.live)
  local rshift = s.reserved - (b0.reserved - a.reserved)
  local c, c_end = rec.c, rec.c_end
  local cshift = plus(s.cat, a.cat, b0.cat) -- s.cat - (b0.cat - a.cat)
  -- E starts after D's net change, this optimizer's and the recorded one's
  local dnet, rdnet = d_end.live - s.live, d_end.reserved - s.reserved
  local dnet0 = rec.d_end.live - c_end.live
  local rdnet0 = rec.d_end.reserved - c_end.reserved
  local peak, at, rpeak = a.peak, a.at_peak, a.peak_reserved
  local function at_moment(live, reserved, cats)
    if live > peak then peak, at = live, cats() end
    if reserved > rpeak then rpeak = reserved end
  end
  at_moment(a.live + b.peak, a.reserved + b.rpeak, function() return plus(a.cat, b.at_peak) end)
  at_moment(c.peak + shift, c.rpeak + rshift, function() return plus(c.at_peak, cshift) end)
  at_moment(c_end.live + shift + d.peak - s.live, c_end.reserved + rshift + d.rpeak - s.reserved,
    function() return plus(plus(c_end.cat, cshift), d.at_peak, s.cat) end)
  at_moment(rec.e.peak + shift + dnet - dnet0, rec.e.rpeak + rshift + rdnet - rdnet0,
    function()
      return plus(plus(plus(rec.e.at_peak, cshift), d_end.cat, s.cat), c_end.cat, rec.d_end.cat)
    end)
  return { peak = peak, peak_reserved = rpeak, at_peak = at,
           paged_state_bytes = S.paged_state_bytes }
end

return M
