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
-- spans on the simulated step (a window each, stdlib/spans.lua) and B and D
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
local spans = require("stdlib.spans")

local M = {}

-- Whether a delta ends where it began, in every category.
local function left_nothing(d)
  for _, v in pairs(d.net) do if v ~= 0 then return false end end
  return true
end

-- Calls the simulators make at their seams (step.lua's and rl.lua's `rec`
-- argument), only for a step that can be recorded: A's state, then every
-- span after B as it changes the tape (stdlib/spans.lua), the optimizer
-- steps marked.
local Recorder = {}
Recorder.__index = Recorder

-- lean (optional): the step leaves its own optimizer out as well (a
-- training step of stdlib/step.lua's simulate; the recorder's lean_done
-- says it did): its states and step are then priced here like any other
-- optimizer's, and only M.price's answer is that step's peaks -- the
-- step's own figures lack them.
function M.recorder(lean) return setmetatable({ spans = {}, lean = lean or nil }, Recorder) end

-- A ends: the model built and loaded, adapters made, before the states.
function Recorder:setup_done(S, trainable)
  local tape, st = S.tape, S.tape:stats()
  local live, reserved = tape:live()
  self.trainable = trainable
  self.a = { live = live, reserved = reserved, cats = tape:live_by_category(), peak = st.peak,
    rpeak = st.peak_reserved, at = st.at_peak }
end

local function open_span(self, S)
  self.c0 = S.tape:live_by_category()
  S.tape:window()
end

local function close_span(self, S)
  self.spans[#self.spans + 1] = { span = spans.delta(S.tape, self.c0) }
end

-- B ends: the states allocated; a span opens.
function Recorder:states_done(S) open_span(self, S) end

-- An optimizer step begins (the span before it closes) ...
function Recorder:step_begins(S)
  close_span(self, S)
  open_span(self, S)
end

-- ... and ends: whether it left what it found; the next span opens.
function Recorder:step_ends(S)
  self.spans[#self.spans + 1] = { step = true,
    kept = not left_nothing(spans.delta(S.tape, self.c0)) }
  open_span(self, S)
end

-- The step is over: the last span closes.
function Recorder:finished(S)
  close_span(self, S)
  self.done = true
end

-- Whether rec recorded a step that other optimizers can be priced on.
function M.ready(rec) return rec.done == true end

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

-- B and D under run.optimizer on a tape of their own, as spans (b: the
-- states from nothing, d: the step from the states), or false when the
-- step leaves something behind. A function of the trainable parameters'
-- shapes, the optimizer and the allocator only, so memo (optional: a
-- table) keeps it for steps with the same shapes (the losses and batches
-- of one model).
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
  local c0 = tape:live_by_category()
  tape:window()
  optim.init_state(S, rec.trainable, run.optimizer)
  local b = spans.delta(tape, c0)
  local c1 = tape:live_by_category()
  tape:window()
  optim.step(S, rec.trainable, run.optimizer)
  local d = spans.delta(tape, c1)
  local out = left_nothing(d) and { b = b, d = d, paged = S.paged_state_bytes } or false
  if memo then memo[key] = out end
  return out
end

-- The peaks of rec's step under run.optimizer: { peak, peak_reserved,
-- at_peak, paged_state_bytes } (only these: no phase, op or phase ends),
-- or nil when a step of this optimizer or the recorded one's leaves
-- something behind (then the spans after it would not be the recorded
-- ones). run: the recorded run with another optimizer, nothing else
-- changed. memo (optional): a table kept across calls (own above).
function M.price(rec, run, memo)
  assert(M.ready(rec), "swap_optimizer.price: the step was not recorded")
  local o = own(rec, run, memo)
  if not o then return nil end
  local a, cats = rec.a, {}
  for k, v in pairs(a.cats) do cats[k] = v end
  local P = spans.peaks({ live = a.live, reserved = a.reserved, cats = cats, peak = a.peak,
    rpeak = a.rpeak, at = a.at })
  P:window(o.b)
  for _, sp in ipairs(rec.spans) do
    if sp.step and sp.kept then return nil end
    P:window(sp.span or o.d)
  end
  return { peak = P.peak, peak_reserved = P.rpeak, at_peak = P.at, paged_state_bytes = o.paged }
end

return M
