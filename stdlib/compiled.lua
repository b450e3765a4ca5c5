-- Compiled estimates: the same run traced at a grid of small probes of its
-- sizes (batch, seq, and on request a LoRA rank and an image's tokens),
-- each live-bytes change fitted as an integer polynomial in them, and the
-- program answers any sizes in C -- the same peak the simulator gives, in
-- microseconds. Runs whose op structure depends on a size (generation's
-- logits_to_keep, chunk sizes, an expert's capacity) are refused with the
-- reason. A mixture-of-experts loop (each expert floor or ceil of rows x
-- top_k / experts tokens) has a program per remainder of that division,
-- fitted on first use (expert_rows below).
--
--   local est = require("stdlib.compiled").compile(run [, where, {sizes = {...}}])
--   est:peak(batch, seq, ...)     -> tensors allocated, exact bytes
--   est:eval(batch, seq, ...)     -> {peak, peak_phase, peak_op, at_peak}
--   (... : the extra sizes in est.sizes' order after batch and seq)
--
-- Every other knob (layer counts, checkpointing, accumulation, image count)
-- changes the op structure: M.knobs compiles one program per structure on
-- first use and keeps it.
local vram = require("vram")
local step = require("stdlib.step")
local errors = require("stdlib.errors")
local with = require("stdlib.run").with
local frameworks = require("stdlib.frameworks")
local moe = require("stdlib.moe")

local M = {}

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

-- The largest divisor of x not above its square root: an image grid of x
-- merged tokens as a x (x / a).
local function side(x)
  local a = math.floor(math.sqrt(x))
  while x % a ~= 0 do a = a - 1 end
  return a
end

local function shuffle(run)
  return (run.vlm and run.vlm.pixel_shuffle_factor) or 1
end

-- The sizes a program can be a polynomial in: each with its degree, its
-- first probe (the grid is base .. base + degree), the further probes that
-- confirm the fit, its value in a run and the run changes that set it.
-- image_tokens: merged tokens per image, with the patch grid taken as
-- f a x f b for a b = tokens (the further probes have other aspect ratios:
-- a size that depends on the grid's shape, not its area, is refused there).
local SIZES = {
  batch = { degree = 1, base = 1, further = { 3, 4 },
    get = function(run) return run.batch end,
    set = function(_, x) return { batch = x } end },
  seq = { degree = 2, base = 1, further = { 5, 7 },
    get = function(run) return run.seq end,
    set = function(_, x) return { seq = x } end },
  lora_rank = { degree = 1, base = 8, further = { 16, 11 },
    applies = function(run) return run.lora ~= nil end,
    get = function(run) return run.lora.r end,
    set = function(run, x)
      local l = copy(run.lora)
      l.r = x
      return { lora = l }
    end },
  image_tokens = { degree = 2, base = 64, further = { 72, 90 },
    applies = function(run) -- a dynamic grid whose tokens are the merged grid's
      local v = run.vision
      return v ~= nil and v.grid_h ~= nil and v.grid_w ~= nil and v.windows == nil and
        (run.vlm == nil or run.vlm.tokens == nil)
    end,
    get = function(run)
      local f = shuffle(run)
      return run.vision.grid_h * run.vision.grid_w // (f * f)
    end,
    set = function(run, x)
      local f, a = shuffle(run), side(x)
      local v = copy(run.vision)
      v.grid_h, v.grid_w = f * a, f * (x // a)
      return { vision = v }
    end },
  -- the expert loop's quotient q of rows x top_k by the experts (each
  -- expert gets q or q + 1 tokens, stdlib/moe.lua split), set apart from
  -- batch and seq, with the remainder r held: one program per r (Est
  -- below). Never asked for: added to a text-only training step whose MoE
  -- runs the loop, balanced and dropless (its run's own q is no size a
  -- caller gives: Est computes it from batch and seq).
  expert_rows = { degree = 1, base = 1, further = { 3, 5 },
    get = function(run) return (moe.split(run.batch * run.seq, run.text.moe.top_k,
      run.text.moe.experts)) end,
    set = function(run, x)
      local t, o = copy(run.text), copy(run.text.moe)
      o.split = { q = x, r = o.split.r } -- r: the program's (with_split)
      t.moe = o
      return { text = t }
    end },
}
M.SIZES = SIZES

-- The run at sizes (a list in names' order).
local function at(run, names, sizes)
  local changes = {}
  for i, name in ipairs(names) do
    for k, v in pairs(SIZES[name].set(run, sizes[i])) do changes[k] = v end
  end
  return with(run, changes)
end

local function trace(run, names, sizes, exact)
  -- exact bytes (the block rounding is applied at eval), the run's own
  -- kernels' buffers
  local r = at(run, names, sizes)
  local st = step.run(with(r, { kernels_of = run.framework, framework = frameworks.EXACT,
    trace = true, trace_exact = exact }))
  return st.trace, st.names
end

-- The probes of a grid: every size from its base to base + degree (the
-- last fastest), then the further ones (a size of degree 0 stays at its
-- base). held: {index = value} sizes fixed for a line program, whose
-- other size among batch and seq starts at 2 with degree 2.
local function probes(names, held, nfurther)
  local deg, base, further = {}, {}, {}
  for i, name in ipairs(names) do
    local s = SIZES[name]
    if held[i] then
      deg[i], base[i] = 0, held[i]
    elseif i <= 2 and next(held) then -- a line's free size among batch, seq
      deg[i], base[i] = 2, 2
    else
      deg[i], base[i] = s.degree, s.base
    end
    further[i] = held[i] or (i <= 2 and next(held) and { 5, 6 } or s.further)
  end
  local out = { {} }
  for i = 1, #names do
    local nxt = {}
    for _, p in ipairs(out) do
      for x = base[i], base[i] + deg[i] do
        local q = { table.unpack(p) }
        q[i] = x
        nxt[#nxt + 1] = q
      end
    end
    out = nxt
  end
  for f = 1, nfurther do
    local q = {}
    for i = 1, #names do q[i] = type(further[i]) == "table" and further[i][f] or further[i] end
    out[#out + 1] = q
  end
  return out, deg
end

M.probes = probes

-- Fits a program over names; nil and the reason when refused.
local function fit(run, names, held, exact)
  local ps, deg = probes(names, held, #names > 2 and 2 or 1)
  local traces, nm = {}, nil
  for i, p in ipairs(ps) do
    local ok, tr, n = pcall(trace, run, names, p, exact)
    if not ok then -- Sim:sized's refusal is the reason; any other error is raised
      if type(tr) == "table" and tr.not_polynomial then return nil, tr.msg end
      error(tr, 0)
    end
    traces[i], nm = tr, nm or n
    -- the probe's tape (C memory the collector does not see) let go now:
    -- a large step's tapes would otherwise pile up past the memory budget
    if #tr > 20000 then collectgarbage() end
    if #tr ~= #traces[1] then -- stop early: the fit would refuse
      return nil, "the probes' traces differ in shape (a size-dependent branch)"
    end
  end
  local alloc = frameworks.of(run).allocator
  return vram.fit_program(traces, nm, alloc and alloc.round or 0, ps, deg)
end

-- fit for a program fitted on first use, when the caller already has an
-- answer without it (the simulator): a fit that runs out of the memory
-- budget (a large MoE step's probes hold ~100,000 ops each) is no program,
-- and its traces are let go.
local function fit_later(run, names, held, exact)
  local ok, prog, why = pcall(fit, run, names, held, exact)
  if ok then return prog, why end
  collectgarbage() -- twice: the traces' finalizers run in the first cycle,
  collectgarbage() -- their memory is freed in the second
  return nil, type(prog) == "table" and prog.msg or tostring(prog)
end

local Est = {}
Est.__index = Est

local function direct(self, ...)
  return step.run(at(self.run, self.sizes, { ... }))
end

-- At batch 1 or seq 1 matmul folds attention operands without copying
-- (stdlib/layers.lua eager_attention): a different op structure, so those
-- sizes have programs of their own, fitted on first use along their line
-- (traced with that structure); a line that cannot be fitted, and (1, 1),
-- are simulated.
-- set: {prog, lines, run} (an Est, or one remainder's programs of an
-- MoeEst); names: its programs' sizes.
local function program(set, names, batch, seq)
  if batch ~= 1 and seq ~= 1 then return set.prog end
  if batch == 1 and seq == 1 then return nil end
  local line = batch == 1 and "batch" or "seq"
  if set.lines[line] == nil then
    local held = line == "batch" and { 1 } or { nil, 1 }
    set.lines[line] = fit_later(set.run, names, held, true) or false
  end
  return set.lines[line] or nil
end

local function simulated(st)
  return { peak = st.peak, peak_phase = st.peak_phase, peak_op = st.peak_op,
    at_peak = st.at_peak }
end

function Est:peak(batch, seq, ...)
  if batch ~= 1 and seq ~= 1 then return self.prog:peak(batch, seq, ...) end
  local prog = program(self, self.sizes, batch, seq)
  if prog then return prog:peak(batch, seq, ...) end
  return direct(self, batch, seq, ...).peak
end

function Est:eval(batch, seq, ...)
  local prog = program(self, self.sizes, batch, seq)
  if prog then return prog:eval(batch, seq, ...) end
  return simulated(direct(self, batch, seq, ...))
end

-- The expert loop's estimate (expert_rows above): per remainder r of
-- batch x seq x top_k by the experts, programs over the sizes and the
-- quotient q, fitted on first use; where q is 0 (experts without tokens
-- skip their ops) the step is simulated.
local MoeEst = setmetatable({}, { __index = Est })
MoeEst.__index = MoeEst

local function with_split(run, r)
  local t, o = copy(run.text), copy(run.text.moe)
  o.split = { q = 1, r = r }
  t.moe = o
  return with(run, { text = t })
end

M.with_split = with_split

-- (a fit that runs out of memory leaves the remainder simulated: Qwen3-
-- 30B-A3B's probes trace ~98,000 ops each, 14 of them held at once)
local function moe_set(self, r)
  local set = self.sets[r]
  if set == nil then
    set = { run = with_split(self.run, r), lines = {} }
    set.prog, set.why = fit_later(set.run, self.names, {}, nil)
    set.prog = set.prog or false
    self.sets[r] = set
  end
  return set
end

-- method of the program for (batch, seq) at the caller's sizes and q; nil
-- when there is none (simulated).
local function moe_call(self, method, batch, seq, a, b)
  local q, r = moe.split(batch * seq, self.top_k, self.experts)
  if q < 1 then return nil end
  local set = moe_set(self, r)
  local prog = set.prog and program(set, self.names, batch, seq)
  if not prog then return nil end
  local n = #self.sizes
  if n == 2 then return prog[method](prog, batch, seq, q) end
  if n == 3 then return prog[method](prog, batch, seq, a, q) end
  return prog[method](prog, batch, seq, a, b, q)
end

function MoeEst:peak(batch, seq, ...)
  return moe_call(self, "peak", batch, seq, ...) or direct(self, batch, seq, ...).peak
end

function MoeEst:eval(batch, seq, ...)
  return moe_call(self, "eval", batch, seq, ...) or simulated(direct(self, batch, seq, ...))
end

-- The run's own value of each size, in est.sizes' order.
function Est:own()
  local out = {}
  for i, name in ipairs(self.sizes) do out[i] = SIZES[name].get(self.run) end
  return out
end

-- The MoE implementation the family runs: its own choice
-- (models/causal_lm.lua), else the decoder's default, the loop (a family
-- that does not choose, a VLM's, passes none to stdlib/moe.lua).
local function moe_impl(run)
  local pick = run.sim and run.sim.moe_impl
  return pick and pick(run, run.text) or "loop"
end

-- Whether run's experts run the loop, balanced and dropless, over the
-- rows batch x seq of a text-only training step: then expert_rows is a
-- size of its programs.
local function expert_loop(run)
  local o = run.text and run.text.moe
  return o ~= nil and not o.capacity_factor and not o.imbalance and o.experts > 1
    and run.mode == "train" and not run.rl and not run.vision and not run.vlm
    and moe_impl(run) == "loop"
end

M.expert_loop = expert_loop

-- Why a mixture-of-experts step is no polynomial in its sizes, if it is
-- that (stdlib/moe.lua routes rows x top_k assignments over the experts as
-- evenly as the integers allow): added to a refusal's reason.
local function moe_why(run)
  local o = run.text and run.text.moe
  if not o then return "" end
  if o.capacity_factor then
    return "; an expert's capacity is ceil(capacity_factor x rows x top_k / experts) "
      .. "(stdlib/moe.lua): no polynomial in batch and seq"
  end
  if o.imbalance then
    return "; the busiest expert's tokens are min(rows, ceil(imbalance x rows x top_k / "
      .. "experts)) (stdlib/moe.lua): no polynomial in batch and seq"
  end
  if moe_impl(run) == "loop" then
    return "; the expert loop (run.moe.impl: loop, transformers' eager code) gives each "
      .. "expert floor or ceil of rows x top_k / experts tokens (stdlib/moe.lua), compiled "
      .. "per remainder only for a text-only training step"
  end
  return ""
end

-- opts.sizes: extra sizes (lora_rank, image_tokens) the program is a
-- polynomial in; one that does not apply to the run is an error.
function M.compile(run, where, opts)
  local names = { "batch", "seq" }
  for _, name in ipairs(opts and opts.sizes or {}) do
    local s = SIZES[name]
    if not s or name == "batch" or name == "seq" then
      error("stdlib.compiled: unknown extra size '" .. tostring(name) .. "'", 2)
    end
    if s.applies and not s.applies(run) then
      errors.input(where, "", ("this run has no %s to compile over"):format(name))
    end
    names[#names + 1] = name
  end
  if expert_loop(run) then return M.compile_loop(run, where, names) end
  local prog, why = fit(run, names, {}, nil)
  if not prog then
    errors.input(where, "", "this run cannot be compiled: " .. why .. moe_why(run))
  end
  local est = setmetatable({ prog = prog, run = run, lines = {}, sizes = names }, Est)
  -- the probes are small (seq up to 7): a branch on a size past them (a
  -- window, a threshold) would make the program answer wrongly beyond it,
  -- so at the run's own sizes the program must give the simulator's answer
  if run.batch > 1 and (run.seq or 0) > 1
      and prog:peak(table.unpack(est:own())) ~= step.run(run).peak then
    errors.input(where, "", "this run cannot be compiled: at its own sizes the program differs "
      .. "from the simulator (a size-dependent branch the probes do not reach)")
  end
  return est
end

-- The expert loop's estimate, its own remainder's programs fitted now and
-- checked against the simulator at the run's own sizes (the quotient and
-- remainder are of batch x seq x top_k: the decoder's rows for a text-only
-- training step).
function M.compile_loop(run, where, names)
  local o = run.text.moe
  local all = { table.unpack(names) }
  all[#all + 1] = "expert_rows"
  local self = setmetatable({ run = run, sizes = names, names = all, sets = {},
    top_k = o.top_k, experts = o.experts }, MoeEst)
  local q, r = moe.split(run.batch * run.seq, o.top_k, o.experts)
  local set = moe_set(self, r)
  if not set.prog then
    errors.input(where, "", "this run cannot be compiled: " .. set.why .. moe_why(run))
  end
  if q >= 1 and run.batch > 1 and run.seq > 1 then
    local own = self:own()
    local want = step.run(run).peak
    if self:peak(table.unpack(own)) ~= want then
      errors.input(where, "", "this run cannot be compiled: its expert loop's split is not "
        .. "batch x seq x top_k over the experts (the program differs from the simulator)")
    end
  end
  return self
end

-- Whether a program over names can be fitted for run (the reason if not).
function M.try(run, names)
  local ok, est = pcall(M.compile, run, nil, { sizes = names })
  if ok then return est end
  return nil, type(est) == "table" and est.msg or tostring(est)
end

return M
