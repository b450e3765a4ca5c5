-- tape:timeline_collect (runtime/bind/ltape.c) written out over the raw
-- events, one by one (tape:timeline_event): each of k stretches' first
-- highest event with the categories met so far, the runs of samples of one
-- phase, the spans of phase and recomputation, the peak. The C collect
-- walks repeated pieces its own ways (lean: each piece's running sums
-- once); tests/lua/test_fastpath.lua and tests/fuzz/timeline_eq.lua hold
-- it to this.
--   reduce(tape, k) -> what tape:timeline_collect(k) returns (lean: less
--   its samples)
local function reduce(tape, k)
  local n = tape:timeline_len()
  k = math.min(k, n)
  local function copy(t) local c = {} for a, b in pairs(t) do c[a] = b end return c end
  local best, best_live, spans, live = {}, {}, {}, 0
  for i = 1, n do
    local delta, _, phase, rec = tape:timeline_event(i)
    live = live + delta
    local b = (i - 1) * k // n + 1
    if best[b] == nil or live > best_live[b] then best[b], best_live[b] = i, live end
    local sp = spans[#spans]
    if not sp or sp.phase ~= phase or sp.recompute ~= rec then
      spans[#spans + 1] = { phase = phase, first = i, last = i, recompute = rec }
    else
      sp.last = i
    end
  end
  local by, out, peak, want = {}, {}, { live = 0, i = 0 }, 1
  live = 0
  for i = 1, n do
    local delta, cat, phase, rec, op = tape:timeline_event(i)
    live = live + delta
    by[cat] = (by[cat] or 0) + delta
    if live > peak.live then peak = { i = i, live = live, by = copy(by), phase = phase, op = op } end
    if best[want] == i then
      out[want] = { i = i, live = live, by = copy(by), phase = phase, op = op, recompute = rec }
      want = want + 1
    end
  end
  local at, lives, phases, runs = {}, {}, {}, {}
  for j, x in ipairs(out) do
    at[j], lives[j], phases[j] = x.i, x.live, x.phase
    if j == 1 or x.phase ~= phases[j - 1] then runs[#runs + 1] = j end
  end
  return { events = n, at = at, live = lives, phase = phases, runs = runs, samples = out,
    spans = spans, peak = peak }
end

return reduce
