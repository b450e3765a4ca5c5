-- What the equality checks share (tests/lua/test_fit.lua, test_parallel.lua
-- and the fuzzers tests/fuzz/compose_eq.lua, knobs_eq.lua): deep equality,
-- a random pick, and fit.knobs' and parallel.fit's answers as one table
-- each, with the layers kept across their simulations (stdlib/compose.lua
-- M.keeping), the models built once (stdlib/shared_setup.lua) and
-- the steps simulated lean (fit.LEAN_STEPS), or every layer walked, every
-- model built and every optimizer simulated.
local fit = require("stdlib.fit")
local par = require("stdlib.parallel")
local compose = require("stdlib.compose")
local shared_setup = require("stdlib.shared_setup")

local M = {}

M.BIG = 1 << 50 -- a budget every combination fits: all of them are listed

function M.same(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  for k, v in pairs(a) do if not M.same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

function M.pick(t) return t[math.random(#t)] end

-- Every combination of up to `depth` levers fit.knobs lists for run under
-- M.BIG: its need and categories at the peak, with the base and the lever
-- count.
function M.knobs(run, depth)
  local list, base, levers = fit.knobs(run, M.BIG, depth)
  local out = { base = base, levers = #levers }
  for _, e in ipairs(list) do out[e.knobs] = { need = e.need, at = e.at_peak } end
  return out
end

-- The layouts of `gpus` GPUs parallel.fit lists for run within `budget`
-- bytes (default M.BIG: every one it can price), each by name: its need,
-- communication and host bytes, with how many it tried.
function M.layouts(run, gpus, budget)
  local fits, tried = par.fit(run, gpus, budget or M.BIG, "compare.layouts")
  local out = { tried = tried }
  for _, e in ipairs(fits) do
    out[par.layout_name(e.layout)] = { need = e.need, comm = e.comm, host = e.host }
  end
  return out
end

-- f(...) with no layer kept across simulations, no model shared and no
-- step simulated lean: every layer walked, every model built, every step's
-- optimizer simulated with it, every layout's pass run (no search replays
-- a recorded one, parallel.LEAN_SEARCH).
function M.walked(f, ...)
  local keep, share, lean = compose.keeping, shared_setup.sharing, fit.LEAN_STEPS
  local replays = par.LEAN_SEARCH
  compose.keeping = function(_, _, g, ...) return g(...) end
  shared_setup.sharing = function(_, _, _, g, ...) return g(...) end
  fit.LEAN_STEPS, par.LEAN_SEARCH = false, false
  local out = table.pack(pcall(f, ...))
  compose.keeping, shared_setup.sharing, fit.LEAN_STEPS = keep, share, lean
  par.LEAN_SEARCH = replays
  if not out[1] then error(out[2], 0) end
  return table.unpack(out, 2, out.n)
end

return M
