-- The answer a recipe ends with: the cheapest set of changes that makes a
-- run fit, found by simulating candidate change sets cheapest first, and a
-- block headed `Answer:` that says what fits, what it costs and which of the
-- seed's statements hold, each with its figure.
--
-- A recipe declares the knobs its seed's own code offers (command-line
-- flags, environment variables, the code changes the seed proposes), each
-- with the values it can take and what each value costs. Costs are the
-- recipe's judgement, in one unit it names (for instance: 0 same math,
-- 1 slower, 2 a quality risk); a set costs the sum of its values' costs.
-- Nothing here knows what a knob does: `need` and `budget` (the recipe's)
-- run the simulator. Unlike `vramlua fit --knobs` (stdlib/fit.lua: a fixed
-- menu of PyTorch levers applied to a run spec), the knobs are the seed's.
local vram = require("vram")
local errors = require("stdlib.errors")

local M = {}

-- Every change set: at most one value per knob, at most max_changes knobs.
-- A change set is a list of { knob = knob, value = value } in knob order.
-- order: the knob and value indexes, fixed width, so that comparing two
-- orders as strings compares the sets in declaration order.
local function enumerate(knobs, max_changes)
  local out = {}
  local function rec(k, set, cost, order)
    if k > #knobs then
      out[#out + 1] = { changes = set, cost = cost, n = #set, order = order }
      return
    end
    rec(k + 1, set, cost, order)
    if #set < max_changes then
      for j, v in ipairs(knobs[k].values) do
        local s = { table.unpack(set) }
        s[#s + 1] = { knob = knobs[k], value = v }
        rec(k + 1, s, cost + v.cost, order .. ("%04d.%04d|"):format(k, j))
      end
    end
  end
  rec(1, {}, 0, "")
  return out
end

-- "knob value + knob value", or `none` for the empty set.
function M.describe(changes, none)
  if #changes == 0 then return none or "as given" end
  local s = {}
  for i, c in ipairs(changes) do
    s[i] = c.value.label and (c.knob.name .. " " .. c.value.label) or c.knob.name
  end
  return table.concat(s, " + ")
end

-- The values a change set picks, by knob name: settings[name] = value.
function M.settings(changes)
  local s = {}
  for _, c in ipairs(changes) do s[c.knob.name] = c.value end
  return s
end

local function check(knobs)
  for i, k in ipairs(knobs) do
    if type(k.name) ~= "string" or type(k.values) ~= "table" or #k.values == 0 then
      errors.usage(("answer: knob %d needs a name and a list of values"):format(i))
    end
    for j, v in ipairs(k.values) do
      if math.type(v.cost) ~= "integer" or v.cost < 0 then
        errors.usage(("answer: knob '%s' value %d needs an integer cost >= 0"):format(k.name, j))
      end
    end
  end
end

-- Searches the change sets cheapest first (then fewest changes, then the
-- order the knobs and values are declared in) and returns the first that
-- fits: need(settings) <= budget(settings), both bytes. Search stops there,
-- so only sets up to the answer's cost are simulated.
--   opts.knobs        the declared knobs (see the top of this file)
--   opts.need         function(settings, changes) -> bytes[, detail]: simulates
--   opts.budget       function(settings, changes) -> bytes the run may use
--   opts.key          optional function(settings) -> string: change sets with
--                     the same key share one simulation (knobs that only move
--                     the budget, or that the simulation cannot tell apart)
--   opts.max_changes  at most this many knobs changed at once (default: all)
--   opts.max_tries    stop after simulating this many distinct keys
--                     (default 60): the result says so, never guesses
-- Returns { fit = {changes, cost, need, budget, detail} or nil, base = the
-- unchanged run's entry, tried = change sets looked at, candidates = how
-- many there were, simulations = distinct simulations run, exhausted = true
-- when max_tries stopped the search }.
function M.search(opts)
  check(opts.knobs)
  local cands = enumerate(opts.knobs, opts.max_changes or #opts.knobs)
  table.sort(cands, function(a, b)
    if a.cost ~= b.cost then return a.cost < b.cost end
    if a.n ~= b.n then return a.n < b.n end
    return a.order < b.order
  end)
  local memo, sims = {}, 0
  local max_tries = opts.max_tries or 60
  local function eval(c)
    local s = M.settings(c.changes)
    local key = opts.key and opts.key(s) or M.describe(c.changes)
    local m = memo[key]
    if not m then
      if sims >= max_tries then return nil end
      local need, detail = opts.need(s, c.changes)
      m = { need = need, detail = detail }
      memo[key] = m
      sims = sims + 1
    end
    return { changes = c.changes, cost = c.cost, need = m.need, detail = m.detail,
      budget = opts.budget(s, c.changes) }
  end
  local r = { candidates = #cands, tried = 0 }
  r.base = eval(cands[1]) -- the empty set sorts first: cost 0, no changes
  for _, c in ipairs(cands) do
    local e = eval(c)
    if not e then r.exhausted = true break end
    r.tried = r.tried + 1
    if e.need <= e.budget then r.fit = e break end
  end
  r.simulations = sims
  return r
end

local function gib(b) return vram.fmt(b, "GiB") end

-- The `Answer:` block as lines.
--   a.result      M.search's result
--   a.question    one line: what was asked (the seed's run, the device)
--   a.cost_unit   what the cost numbers mean
--   a.statements  list of { claim = "...", right = bool, figure = "..." }:
--                 the seed's statements, judged with the figure that decides
--   a.notes       further lines (assumptions, what was not modelled)
function M.lines(a)
  local r, out = a.result, { "Answer:" }
  local function add(s) out[#out + 1] = "  " .. s end
  if a.question then add(a.question) end
  local b = r.base
  add(("as given: needs %s of %s: %s"):format(gib(b.need), gib(b.budget),
    b.need <= b.budget and "fits" or ("does not fit, short by " .. gib(b.need - b.budget))))
  if r.fit and #r.fit.changes > 0 then
    local f = r.fit
    add(("cheapest change set that fits (cost %d%s): %s"):format(f.cost,
      a.cost_unit and (", " .. a.cost_unit) or "", M.describe(f.changes)))
    add(("  needs %s of %s, headroom %s"):format(gib(f.need), gib(f.budget),
      gib(f.budget - f.need)))
    for _, c in ipairs(f.changes) do
      add(("  - %s: cost %d%s"):format(M.describe({ c }), c.value.cost,
        c.value.note and (", " .. c.value.note) or ""))
    end
  elseif not r.fit then
    add(r.exhausted and "no change set fits among those simulated before the search "
      .. "limit (raise max_tries)" or "no change set of the declared knobs fits")
  end
  add(("searched %d of %d change sets cheapest first, %d simulations"):format(r.tried,
    r.candidates, r.simulations))
  if a.statements and #a.statements > 0 then
    add("the seed's statements:")
    for _, s in ipairs(a.statements) do
      add(("  %s %s — %s"):format(s.right and "RIGHT" or "WRONG", s.claim, s.figure))
    end
  end
  for _, n in ipairs(a.notes or {}) do add(n) end
  return out
end

-- Prints the block (print: the recipe's own, so a test can collect it).
function M.print(a, print_fn)
  for _, l in ipairs(M.lines(a)) do (print_fn or print)(l) end
end

return M
