-- The answer search (stdlib/answer.lua): cheapest first, then fewest
-- changes; knobs that only move the budget share a simulation; the block
-- says what fits and judges the seed's statements. The "simulator" here is
-- arithmetic written in the test, so every expected figure is the test's.
local answer = require("stdlib.answer")

local tests = {}

local GiB = 1 << 30
-- base need 100 GiB in an 80 GiB budget; A saves 10 (cost 1), B saves 30
-- (cost 2) or 45 (cost 4), C raises the budget by 5 (cost 1)
local KNOBS = {
  { name = "A", values = { { label = "on", cost = 1, saves = 10 } } },
  { name = "B", values = { { label = "half", cost = 2, saves = 30, note = "slower" },
    { label = "quarter", cost = 4, saves = 45 } } },
  { name = "C", values = { { label = "0.95", cost = 1, raises = 5 } } },
}

local function search(extra)
  local sims = {}
  local opts = {
    knobs = KNOBS,
    need = function(s)
      local n = 100
      for _, k in ipairs({ "A", "B" }) do if s[k] then n = n - s[k].saves end end
      sims[#sims + 1] = n
      return n * GiB
    end,
    budget = function(s) return (80 + (s.C and s.C.raises or 0)) * GiB end,
    key = function(s) return (s.A and "A" or "-") .. (s.B and s.B.label or "-") end,
  }
  for k, v in pairs(extra or {}) do opts[k] = v end
  return answer.search(opts), sims
end

function tests.the_cheapest_set_wins_and_fewer_changes_break_a_tie()
  local r = search()
  -- cost 1: A (90 > 80), C (100 > 85); cost 2: B alone (70 <= 80) before A+C (90 > 85)
  T.eq(answer.describe(r.fit.changes), "B half")
  T.eq(r.fit.cost, 2)
  T.eq(r.fit.need, 70 * GiB)
  T.eq(r.base.need, 100 * GiB)
  -- each knob unchanged or one of its values: (1 + 1) x (1 + 2) x (1 + 1)
  T.eq(r.candidates, 2 * 3 * 2)
end

function tests.equal_cost_and_count_go_in_declaration_order()
  local r = search({ budget = function() return 95 * GiB end })
  -- A (cost 1, 90 GiB) and C (cost 1, 100 GiB) tie on cost and count: A is declared first
  T.eq(answer.describe(r.fit.changes), "A on")
  -- declared C before A, with both fitting alone (A: 90 <= 95, C: 100 <= 105): C wins
  local r2 = search({ knobs = { KNOBS[3], KNOBS[1] }, budget = function(s)
    return (s.C and 105 or 95) * GiB end })
  T.eq(answer.describe(r2.fit.changes), "C 0.95")
end

function tests.a_budget_only_knob_costs_no_simulation()
  local _, sims = search()
  -- as given, A, C (same key as as-given: no new simulation), B
  T.eq(#sims, 3)
end

function tests.max_changes_and_max_tries_bound_the_search()
  local r = search({ max_changes = 1, knobs = { KNOBS[1], KNOBS[3] } })
  T.eq(r.fit, nil, "A alone and C alone do not fit")
  T.eq(r.candidates, 3)
  local r2 = search({ max_tries = 1 })
  T.ok(r2.exhausted, "stopped by max_tries")
  T.eq(r2.fit, nil)
  T.raises(function() answer.search({ knobs = { { name = "x", values = { { cost = 0.5 } } } },
    need = function() return 0 end, budget = function() return 0 end }) end,
    "needs an integer cost")
end

function tests.the_block_says_what_fits_and_judges_statements()
  local r = search()
  local text = table.concat(answer.lines({ result = r, question = "toy", cost_unit = "points",
    statements = { { claim = "A alone fits", right = false, figure = "90 GiB > 80 GiB" } } }), "\n")
  T.ok(text:find("^Answer:\n") ~= nil, "headed Answer:")
  T.ok(text:find("as given: needs 100.00 GiB of 80.00 GiB: does not fit, short by 20.00 GiB",
    1, true) ~= nil, text)
  T.ok(text:find("cheapest change set that fits (cost 2, points): B half", 1, true) ~= nil, text)
  T.ok(text:find("needs 70.00 GiB of 80.00 GiB, headroom 10.00 GiB", 1, true) ~= nil, text)
  T.ok(text:find("- B half: cost 2, slower", 1, true) ~= nil, text)
  T.ok(text:find("WRONG A alone fits — 90 GiB > 80 GiB", 1, true) ~= nil, text)
end

return tests
