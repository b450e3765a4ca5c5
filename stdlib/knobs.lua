-- Compiled estimates over every knob of a run spec: the same bytes as
-- normalizing the spec with the knobs applied and simulating it
-- (stdlib/step.lua), in microseconds once compiled.
--
--   local K = require("stdlib.knobs").new(spec_table, where, families)
--   K:peak{ batch = 8, seq = 1024, lora_rank = 32, image = { width = 640, height = 480 },
--           images = 2, layers = 24, vision_layers = 18, ckpt = "full", ckpt_segment = 2,
--           grad_accum = 4 }
--   K:eval{...} -> {peak, peak_phase, peak_op, at_peak}
--
-- batch, seq, the LoRA rank and an image's pixels (through the family's
-- processor, to merged tokens) are symbolic sizes of one program
-- (stdlib/compiled.lua). The others change the op structure: one program
-- per combination, compiled on first use (one spec normalization and a grid
-- of traced probes) and kept. A knob left out keeps the spec's value. A size
-- the program cannot be a polynomial in (K.refused says why) is compiled
-- per value instead.
--
-- A spec with a `parallel:` table takes every field of that table as a knob
-- too (K:peak{tp = 2, pp = 4, dp = 1, zero = 3, batch = 2, seq = 8192}; the
-- value knobs.UNSET removes a field), and K:peak answers the largest rank's
-- device total, the figure `vramlua estimate` reports for the spec edited
-- by hand (stdlib/parallel.lua budget). batch and seq are sizes of one
-- compiled budget per layout (stdlib/compiled_parallel.lua; every other
-- knob is its structure: the spec's own layout is compiled at once,
-- another once simulating it has cost as much, K:layout); a layout whose
-- budget does not compile (K.failed, and K.refused.parallel for the spec's
-- own, say why), K:eval, and the points no program answers are simulated,
-- each distinct knob set once and kept, the measuring passes of equal
-- rank-local runs shared (parallel.search).
local compiled = require("stdlib.compiled")
local errors = require("stdlib.errors")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local par = require("stdlib.parallel")
local compiled_parallel = require("stdlib.compiled_parallel")
local runs = require("stdlib.run")

local M = {}

local deep = require("stdlib.run").copy -- a deep copy of a table (a spec, a config)

local function sub(t, k)
  t[k] = t[k] or {}
  return t[k]
end

-- How each knob edits a copy of the spec (base: the spec's normalized run).
local EDIT = {
  batch = function(s, v) s.run.batch = v end,
  seq = function(s, v) s.run.seq = v end,
  lora_rank = function(s, v) sub(s.run, "lora").rank = v end,
  image = function(s, v)
    local im = sub(s.run, "images")
    im.width, im.height, im.max_pixels = v.width, v.height, v.max_pixels
  end,
  images = function(s, v) sub(s.run, "images").count = v end,
  grad_accum = function(s, v) s.run.grad_accum = v end,
  ckpt = function(s, v) s.run.grad_checkpointing = v end, -- "none", "full" or every n-th layer
  ckpt_segment = function(s, v) s.run.checkpoint_segment = v end, -- layers per segment
  layers = function(s, v) sub(s.model, "overrides").num_hidden_layers = v end,
  vision_layers = function(s, v, base)
    local vc = base.hf_config.vision_config
    if type(vc) ~= "table" then errors.input(nil, "vision_layers", "the model has no vision tower") end
    vc = deep(vc)
    vc.depth, vc.num_hidden_layers = vc.depth and v, vc.num_hidden_layers and v
    sub(s.model, "overrides").vision_config = vc
  end,
}
M.KNOBS = {}
for name in pairs(EDIT) do M.KNOBS[#M.KNOBS + 1] = name end
table.sort(M.KNOBS)

-- The parallel table's fields (stdlib/parallel.lua KEYS), knobs of a spec
-- that has one; UNSET as a value removes the field (its default applies).
M.UNSET = setmetatable({}, { __tostring = function() return "knobs.UNSET" end })
M.PARALLEL = {}
for name in pairs(par.KEYS) do
  M.PARALLEL[#M.PARALLEL + 1] = name
  EDIT[name] = function(s, v, _, where)
    if type(s.parallel) ~= "table" then
      errors.input(where, name, "is a parallel knob: the spec has no parallel: table")
    end
    if v == M.UNSET then v = nil end
    s.parallel[name] = v
  end
end
table.sort(M.PARALLEL)

-- The knobs that change the op structure, in the cache's order; lora_rank
-- and image join them when they cannot be symbolic.
local STRUCTURAL = { "layers", "vision_layers", "images", "ckpt", "ckpt_segment", "grad_accum" }

local K = {}
K.__index = K

-- The spec with knobs k applied (every knob of k, symbolic or not).
function K:spec_with(k)
  local s = deep(self.spec)
  s.run, s.model = s.run or {}, s.model or {}
  for name, v in pairs(k) do
    local edit = EDIT[name] or errors.input(self.where, name, ("is not a knob (knobs: %s; "
      .. "with a parallel: table, %s)"):format(table.concat(M.KNOBS, ", "),
      table.concat(M.PARALLEL, ", ")))
    edit(s, v, self.base, self.where)
  end
  return s
end

-- The simulator's own answer for knobs k (what the programs must equal).
function K:simulate(k)
  return step.run(spec.normalize(self:spec_with(k), self.where, self.families))
end

-- The family's description of the run's vision side for image = {width,
-- height, max_pixels} (its processor's grid, models/README.md).
function K:describe(image)
  local d = self.family.simulator(self.model, { count = 1, width = image.width,
    height = image.height, max_pixels = image.max_pixels })
  return d.vision, d.vlm
end

-- Whether two descriptions differ only in the patch grid (shallow: a
-- nested table, such as attention windows, counts as a difference).
local function only_grid(a, b)
  for _, pair in ipairs({ { a, b }, { b, a } }) do
    for k, v in pairs(pair[1]) do
      if k ~= "grid_h" and k ~= "grid_w" and pair[2][k] ~= v then return false end
    end
  end
  return true
end

-- Merged tokens per image for image = {width, height, max_pixels}, or
-- false when the image changes more than the grid (special tokens placed
-- by rows, windows): such an image is simulated.
function K:tokens(image)
  local byw = self.token_memo[image.width] or {}
  self.token_memo[image.width] = byw
  local byh = byw[image.height] or {}
  byw[image.height] = byh
  local u = byh[image.max_pixels or 0]
  if u ~= nil then return u end
  local v, vlm = self:describe(image)
  local f = vlm.pixel_shuffle_factor or 1
  u = only_grid(v, self.base_vision) and only_grid(vlm, self.base_vlm)
    and v.grid_h * v.grid_w // (f * f)
  byh[image.max_pixels or 0] = u
  return u
end

-- The sizes a program takes, within the spec's own limits (stdlib/spec.lua).
local LIMIT = { batch = spec.LIMITS.batch, seq = spec.LIMITS.seq, lora_rank = spec.LIMITS.rank }

local function positive(where, field, v, limit)
  if math.type(v) ~= "integer" or v < 1 or (limit and v > limit) then
    errors.input(where, field, ("must be an integer from 1%s, got %s"):format(
      limit and (" to %d"):format(limit) or "", tostring(v)))
  end
end

-- k's knobs are knobs and its sizes sizes; raises otherwise.
function K:check(name, v)
  -- raises: not a knob, or a parallel one (this spec has no parallel table)
  if not EDIT[name] or par.KEYS[name] then self:spec_with({ [name] = v }) end
  if LIMIT[name] then positive(self.where, name, v, LIMIT[name]) end
  if name == "image" then
    if type(v) ~= "table" then errors.input(self.where, "image", "must be {width, height}") end
    positive(self.where, "image.width", v.width)
    positive(self.where, "image.height", v.height)
    if v.max_pixels ~= nil then positive(self.where, "image.max_pixels", v.max_pixels) end
  end
end

-- A program's own sizes, their count and whether an image is one of them.
local function prepare(est)
  est.own, est.n = est:own(), #est.sizes
  for _, name in ipairs(est.sizes) do est.image = est.image or name == "image_tokens" end
end

-- The program (or nil: simulated) for the structure of k.
function K:entry(k)
  local structural, found = self.is_structural, false
  for name, v in next, k do
    found = found or structural[name]
    if name ~= "batch" and name ~= "seq" or math.type(v) ~= "integer" or v < 1 or v > LIMIT[name] then
      self:check(name, v)
    end
  end
  if found then return self:find(k) end
  return self.base_entry -- the spec's own structure: most calls
end

function K:find(k)
  local node = self.cache
  for _, name in ipairs(self.structural) do
    local v = k[name]
    if v == nil then v = false end
    if name == "image" and v then v = ("%dx%d/%s"):format(v.width, v.height, v.max_pixels or "") end
    local nx = node[v]
    if not nx then
      nx = {}
      node[v] = nx
    end
    node = nx
  end
  local e = node[true]
  if e == nil then
    local ks = {} -- the structure's knobs; the symbolic ones at the spec's values
    for _, name in ipairs(self.structural) do ks[name] = k[name] end
    local t0 = os.clock()
    local run = spec.normalize(self:spec_with(ks), self.where, self.families)
    local est, why = nil, self.failed[1]
    if self.compilable then est, why = compiled.try(run, self.symbolic) end
    self.compile_s = self.compile_s + (os.clock() - t0)
    self.programs = self.programs + 1
    e = est or false
    if est then prepare(est) else self.failed[#self.failed + 1] = why end
    node[true] = e
  end
  return e or nil
end

-- Symbolic size i of program e for knobs k.
local function size_of(self, k, e, i)
  local name = e.sizes[i]
  if name == "lora_rank" then return k.lora_rank or e.own[i] end
  return k.image and self:tokens(k.image) or e.own[i]
end

-- e's answer at the sizes of k (method: e.peak or e.eval).
local function answer(self, e, k, method)
  local own, n = e.own, e.n
  local b, t = k.batch or own[1], k.seq or own[2]
  if n == 2 then return method(e, b, t) end
  if n == 3 then return method(e, b, t, size_of(self, k, e, 3)) end
  return method(e, b, t, size_of(self, k, e, 3), size_of(self, k, e, 4))
end

-- A parallel spec's budget for knobs k (stdlib/parallel.lua), once per
-- distinct k.
function K:budget(k)
  local key = runs.key(k, {})
  local b = self.budgets[key]
  if not b then
    local t0 = os.clock()
    b = par.budget(spec.normalize(self:spec_with(k), self.where, self.families), nil, self.search)
    self.budgets[key] = b
    self.simulated, self.simulate_s = self.simulated + 1, self.simulate_s + (os.clock() - t0)
  end
  return b
end

-- The caller's misuse, raised at the caller's line.
local function table_of_knobs(k, method)
  if type(k) ~= "table" then
    error(("K:%s takes a table of knobs (K:%s{ batch = 8 }), got %s"):format(method, method,
      type(k)), 3)
  end
end

-- The compiled budget (stdlib/compiled_parallel.lua) of the layout k
-- names with every knob but batch and seq; nil when it does not compile
-- (K.failed says why). Unless eager, a layout is compiled only once the
-- time spent simulating it (K.rent, by K:peak) reaches what the spec's
-- own layout took to compile (K.buy): a compile costs several
-- simulations, so a layout asked at a size or two is simulated, and one
-- asked at many costs at most twice its compile. Also the layout's key.
function K:layout(k, eager)
  local rest, key = {}, ""
  for name, v in pairs(k) do
    if name ~= "batch" and name ~= "seq" then
      rest[name] = v
      key = nil
    elseif math.type(v) ~= "integer" or v < 1 or v > LIMIT[name] then
      self:check(name, v)
    end
  end
  key = key or runs.key(rest, {})
  local e = self.layouts[key]
  if e == nil and not eager and (self.rent[key] or 0) < self.buy then return nil, key end
  if e == nil then
    local t0 = os.clock()
    local why
    e, why = compiled_parallel.compile(spec.normalize(self:spec_with(rest), self.where,
      self.families))
    self.compile_s, self.programs = self.compile_s + (os.clock() - t0), self.programs + 1
    if not e then self.failed[#self.failed + 1] = why end
    self.layouts[key] = e or false
  end
  return e or nil, key
end

function K:peak(k)
  table_of_knobs(k, "peak")
  if self.parallel then
    local e, key = self:layout(k)
    local v = e and e:device_total(k.batch or e.run.batch, k.seq or e.run.seq)
    if v then return v end
    local t0 = os.clock()
    v = self:budget(k).device_total_bytes
    self.rent[key] = (self.rent[key] or 0) + (os.clock() - t0)
    return v
  end
  local e = self:entry(k)
  if not e or (k.image and e.image and not self:tokens(k.image)) then
    return self:simulate(k).peak
  end
  return answer(self, e, k, e.peak)
end

function K:eval(k)
  table_of_knobs(k, "eval")
  if self.parallel then -- the largest rank's figures
    local b = self:budget(k)
    return { peak = b.peak_bytes, peak_phase = b.peak_phase, peak_op = b.peak_op,
      device_total = b.device_total_bytes, largest_rank = b.largest_rank, budget = b }
  end
  local e = self:entry(k)
  if not e or (k.image and e.image and not self:tokens(k.image)) then
    local st = self:simulate(k)
    return { peak = st.peak, peak_phase = st.peak_phase, peak_op = st.peak_op,
      at_peak = st.at_peak }
  end
  return answer(self, e, k, e.eval)
end

-- The symbolic sizes for the base run: all it has, else the largest subset
-- a program takes (each size left out refused, with the reason); and the
-- base structure's program.
local function symbolic(self, base, want)
  -- batch and seq alone first: a run that fails there fails for no size's
  -- doing, and is refused after one try (an RL update's probes are slow)
  local plain, why0 = compiled.try(base, {})
  if not plain then
    for _, name in ipairs(want) do self.refused[name] = why0 end
    return {}, nil, why0
  end
  if #want == 0 then return want, plain end
  local est, why = compiled.try(base, want)
  if est then return want, est end
  local keep = {}
  for _, name in ipairs(want) do
    local e1, w1 = compiled.try(base, { name })
    if e1 then keep[#keep + 1] = name else self.refused[name] = w1 end
  end
  if #keep == #want then -- each alone but not together
    for i = 2, #keep do self.refused[keep[i]] = why end
    keep = { keep[1] }
  end
  if #keep == 0 then return keep, plain end
  return keep, compiled.try(base, keep)
end

-- spec_table: a run spec ({model, run}); families: the model registry.
function M.new(spec_table, where, families)
  local base = spec.normalize(spec_table, where, families)
  local self = setmetatable({ spec = deep(spec_table), where = where, families = families,
    base = base, cache = {}, token_memo = {}, programs = 0, compile_s = 0, failed = {},
    refused = {} }, K)
  if base.parallel then
    self.parallel, self.budgets, self.search = true, {}, par.search(base)
    self.simulated, self.simulate_s, self.layouts, self.rent = 0, 0, {}, {}
    if not self:layout({}, true) then self.refused.parallel = self.failed[#self.failed] end
    self.buy = self.compile_s
    return self
  end
  -- the symbolic sizes: those the base run has and a program can take
  local want = {}
  if compiled.SIZES.lora_rank.applies(base) then want[#want + 1] = "lora_rank" end
  if compiled.SIZES.image_tokens.applies(base) then
    local family, typed = families.find(base.hf_config, base.config_path)
    self.family, self.model = family, family.read(typed, base.config_path)
    self.base_vision, self.base_vlm = base.vision, base.vlm -- the spec's image's
    want[#want + 1] = "image_tokens"
  end
  local t0 = os.clock()
  local est, why
  self.symbolic, est, why = symbolic(self, base, want)
  -- a run that does not compile as the spec gives it is simulated, every
  -- structure (K.failed says why)
  self.compilable = est ~= nil
  if not est then self.failed[1] = why end
  self.structural = { table.unpack(STRUCTURAL) }
  local has = {}
  for _, n in ipairs(self.symbolic) do has[n] = true end
  if not has.lora_rank then self.structural[#self.structural + 1] = "lora_rank" end
  if not has.image_tokens then self.structural[#self.structural + 1] = "image" end
  -- the spec's own structure: every structural knob left out
  local node = self.cache
  for _ in ipairs(self.structural) do node = sub(node, false) end
  node[true] = est or false
  if est then prepare(est) end
  self.base_entry = est or nil
  self.is_structural = {}
  for _, n in ipairs(self.structural) do self.is_structural[n] = true end
  self.programs, self.compile_s = 1, os.clock() - t0
  return self
end

return M
