-- One simulated training step priced again under another optimizer,
-- without simulating the model again (fit --knobs: 8-bit AdamW, bf16
-- states, Adafactor over the same model, loss and batch).
--
-- Why it is exact. A step (stdlib/step.lua simulate, stdlib/rl.lua's
-- update) runs: A, the model built and loaded; B, the optimizer states
-- allocated; then spans that do not read the optimizer (inputs, forward and
-- backward of each micro-batch, an RL rollout, zero_grad) around its steps
-- D (one, or one per RL minibatch). The tensors B allocates stay alive to
-- the end, and a step D leaves what it found (its temporaries freed; a
-- step that does not is not priced here). Live and reserved bytes are sums
-- over the tensors alive (the reserved counter sums each block,
-- vr_tape_rounding), so under another optimizer every other span sees the
-- same changes from a start higher or lower by what B allocated: its peaks
-- move by that difference, at the same moments. The tape measures those
-- spans on the simulated step (a window each, tape:window) and B and D
-- under the other optimizer on a tape of their own; the step's peaks are
-- then the highest of all, the first to reach it giving the categories at
-- the peak (the tape keeps the first moment live bytes are highest).
-- tests/lua/test_swap_optimizer.lua compares with the step simulated under
-- each optimizer.
--
--   local rec = swap.recorder()
--   local st = step.run(run, rec)     -- the step, recorded when it can be
--   if swap.ready(rec) then st2 = swap.price(rec, run2) end
--       -- run2: run with another run.optimizer, nothing else changed;
--       -- nil when that optimizer's step keeps something (then simulate)
--
-- Not recorded (swap.ready false): inference and generation, a jitted
-- framework (its optimizer is fused into the step's outputs,
-- stdlib/xla.lua), a timeline or a compiled-estimate probe.
local step = require("stdlib.step")
local optim = require("stdlib.optim")

local M = {}

-- Calls the simulators make at their seams (step.lua's and rl.lua's `rec`
-- argument), only for a step that can be recorded.
local Recorder = {}
Recorder.__index = Recorder

function M.recorder() return setmetatable({ spans = {} }, Recorder) end

local function now(tape)
  local live, reserved = tape:live()
  return { live = live, reserved = reserved, cat = tape:live_by_category() }
end

-- A ends: the model built and loaded, adapters made, before the states.
function Recorder:setup_done(S, trainable)
  self.trainable = trainable
  self.a = now(S.tape)
  local st = S.tape:stats()
  self.a.peak, self.a.peak_reserved, self.a.at_peak = st.peak, st.peak_reserved, st.at_peak
end

-- B ends: the states allocated; a span opens.
function Recorder:states_done(S)
  self.b = now(S.tape)
  S.tape:window()
end

local function close_span(self, S)
  self.spans[#self.spans + 1] = { window = S.tape:window_peaks() }
end

-- An optimizer step begins (the span before it closes) ...
function Recorder:step_begins(S)
  close_span(self, S)
  self.spans[#self.spans + 1] = { step = now(S.tape) }
end

-- ... and ends: what it left, and the next span opens.
function Recorder:step_ends(S)
  self.spans[#self.spans].left = now(S.tape)
  S.tape:window()
end

-- The step is over: the last span closes.
function Recorder:finished(S)
  close_span(self, S)
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

-- Whether two category tables hold the same bytes.
local function same_cats(a, b)
  for k, v in pairs(a) do if b[k] ~= v then return false end end
  return true
end

-- The parameters' shapes as the optimizer reads them (optim.lua: n, rows,
-- dtype, bytes; a group's copies), as a string.
local function shape(list)
  local out = {}
  local function one(p) out[#out + 1] = ("%d,%s,%s,%d;"):format(p.n, p.rows, p.dt, p.b) end
  for _, p in ipairs(list) do
    if p.group then
      out[#out + 1] = "g" .. p.count .. "("
      for _, q in ipairs(p.params) do one(q) end
      out[#out + 1] = ")"
    else
      one(p)
    end
  end
  return table.concat(out)
end

-- B and D under run.optimizer on a tape of their own: what the states
-- allocate (b: the window; s: where they end) and the step's window d,
-- or false when the step leaves something behind. A function of the
-- trainable parameters' shapes, the optimizer and the allocator only, so
-- memo (optional: a table) keeps it for steps with the same shapes (the
-- losses and batches of one model).
local function own(rec, run, memo)
  local key
  if memo then
    rec.shape = rec.shape or shape(rec.trainable)
    key = require("stdlib.run").key({ optimizer = run.optimizer, framework = run.framework },
      {}) .. rec.shape
    if memo[key] ~= nil then return memo[key] end
  end
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
  local out = same_cats(now(tape).cat, s.cat) and
    { b = b, s = s, d = d, paged = S.paged_state_bytes } or false
  if memo then memo[key] = out end
  return out
end

-- The peaks of rec's step under run.optimizer: { peak, peak_reserved,
-- at_peak, paged_state_bytes } (only these: no phase, op or phase ends),
-- or nil when a step of this optimizer or the recorded one's leaves
-- something behind (then the spans after it would not be the recorded
-- ones). run: the recorded run with another optimizer, nothing else
-- changed.
-- memo (optional): a table kept across calls (own above).
function M.price(rec, run, memo)
  assert(M.ready(rec), "swap_optimizer.price: the step was not recorded")
  local o = own(rec, run, memo)
  if not o then return nil end
  local b, s, d = o.b, o.s, o.d
  -- what this optimizer's states hold beyond the recorded one's
  local a, b0 = rec.a, rec.b
  local shift = s.live - (b0.live - a.live)
  local rshift = s.reserved - (b0.reserved - a.reserved)
  local cshift = plus(s.cat, a.cat, b0.cat) -- s.cat - (b0.cat - a.cat)
  local peak, at, rpeak = a.peak, a.at_peak, a.peak_reserved
  local function moment(live, reserved, cats)
    if live > peak then peak, at = live, cats() end
    if reserved > rpeak then rpeak = reserved end
  end
  moment(a.live + b.peak, a.reserved + b.rpeak, function() return plus(a.cat, b.at_peak) end)
  for _, sp in ipairs(rec.spans) do
    local w, at0 = sp.window, sp.step
    if w then
      moment(w.peak + shift, w.rpeak + rshift, function() return plus(w.at_peak, cshift) end)
    else
      if not same_cats(sp.left.cat, at0.cat) then return nil end
      moment(at0.live + shift + d.peak - s.live, at0.reserved + rshift + d.rpeak - s.reserved,
        function() return plus(plus(at0.cat, cshift), d.at_peak, s.cat) end)
    end
  end
  return { peak = peak, peak_reserved = rpeak, at_peak = at, paged_state_bytes = o.paged }
end

return M
