-- Compiled estimates: the same run traced at a grid of small probes of its
-- sizes (batch, seq, and on request a LoRA rank and an image's tokens),
-- each live-bytes change fitted as an integer polynomial in them, and the
-- program answers any sizes in C -- the same peak the simulator gives, in
-- microseconds. Runs whose op structure depends on a size (generation's
-- logits_to_keep, chunk sizes) are refused with the reason.
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

-- Fits a program over names; nil and the reason when refused.
local function fit(run, names, held, exact)
  local ps, deg = probes(names, held, #names > 2 and 2 or 1)
  local traces, nm = {}, nil
  for i, p in ipairs(ps) do
    local tr, n = trace(run, names, p, exact)
    traces[i], nm = tr, nm or n
    if #tr ~= #traces[1] then -- stop early: the fit would refuse
      return nil, "the probes' traces differ in shape (a size-dependent branch)"
    end
  end
  local alloc = frameworks.of(run).allocator
  return vram.fit_program(traces, nm, alloc and alloc.round or 0, ps, deg)
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
local function program(self, batch, seq)
  if batch ~= 1 and seq ~= 1 then return self.prog end
  if batch == 1 and seq == 1 then return nil end
  local line = batch == 1 and "batch" or "seq"
  if self.lines[line] == nil then
    local held = line == "batch" and { 1 } or { nil, 1 }
    self.lines[line] = fit(self.run, self.sizes, held, true) or false
  end
  return self.lines[line] or nil
end

function Est:peak(batch, seq, ...)
  if batch ~= 1 and seq ~= 1 then return self.prog:peak(batch, seq, ...) end
  local prog = program(self, batch, seq)
  if prog then return prog:peak(batch, seq, ...) end
  return direct(self, batch, seq, ...).peak
end

function Est:eval(batch, seq, ...)
  local prog = program(self, batch, seq)
  if prog then return prog:eval(batch, seq, ...) end
  local st = direct(self, batch, seq, ...)
  return { peak = st.peak, peak_phase = st.peak_phase, peak_op = st.peak_op,
    at_peak = st.at_peak }
end

-- The run's own value of each size, in est.sizes' order.
function Est:own()
  local out = {}
  for i, name in ipairs(self.sizes) do out[i] = SIZES[name].get(self.run) end
  return out
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
  local prog, why = fit(run, names, {}, nil)
  if not prog then errors.input(where, "", "this run cannot be compiled: " .. why) end
  return setmetatable({ prog = prog, run = run, lines = {}, sizes = names }, Est)
end

-- Whether a program over names can be fitted for run (the reason if not).
function M.try(run, names)
  local ok, est = pcall(M.compile, run, nil, { sizes = names })
  if ok then return est end
  return nil, type(est) == "table" and est.msg or tostring(est)
end

return M
