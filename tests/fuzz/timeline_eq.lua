-- Randomized check of tape:timeline_collect (not a ctest; run by hand):
-- random tapes -- allocations of a few categories, drops, temporaries,
-- phase changes, and timeline_repeat over any range of the events so far,
-- 0 to 5 times (pieces that begin mid-span, repeat a phase change, or
-- repeat a repeat) -- collected lean and in full at 1 to n + 3 samples,
-- each against the events reduced one by one (tests/lib/timeline_reduce.lua).
--   vramlua --max-seconds 0 --max-memory 4000 run tests/fuzz/timeline_eq.lua SEED SECONDS
-- Prints each mismatch (tape, sample count, where the tables differ).
local vram = require("vram")
local reduce = require("tests.lib.timeline_reduce")

local seed, secs = tonumber((...)) or 1, tonumber((select(2, ...))) or 60
math.randomseed(seed)

local CATS = { "activations", "temporaries", "weights", "gradients" }
local PHASES = { "forward", "backward", "optimizer" }

-- The first path where a and b differ, or nil.
local function differs(a, b, path)
  if type(a) ~= "table" or type(b) ~= "table" then return a ~= b and path or nil end
  for k, v in pairs(a) do
    local p = differs(v, b[k], path .. "." .. tostring(k))
    if p then return p end
  end
  for k in pairs(b) do if a[k] == nil then return path .. "." .. tostring(k) end end
end

local tapes, checks, bad = 0, 0, 0
local t0 = os.clock()
while os.clock() - t0 < secs do
  local t = vram.tape()
  t:timeline(true)
  local live = {}
  for _ = 1, math.random(1, 60) do
    local x = math.random()
    if x < 0.1 then t:phase(PHASES[math.random(#PHASES)]) end
    if x < 0.45 or #live == 0 then
      local b = math.random(0, 50) * (math.random() < 0.1 and 1000 or 1)
      live[#live + 1] = t:alloc(b, CATS[math.random(#CATS)], "op" .. math.random(3))
    elseif x < 0.75 then
      t:drop(table.remove(live, math.random(#live)))
    elseif x < 0.85 then
      t:temp(math.random(1, 30), "temporaries", "scratch")
    elseif t:timeline_len() > 0 then
      local from = math.random(1, t:timeline_len())
      t:timeline_repeat(from, math.random(from, t:timeline_len()), math.random(0, 5))
    end
  end
  tapes = tapes + 1
  local n = t:timeline_len()
  if n > 0 then
    for _, k in ipairs({ 1, 2, 3, 5, 8, math.max(1, n // 2), n, n + 3 }) do
      checks = checks + 1
      local want = reduce(t, k)
      local full = t:timeline_collect(k)
      local p = differs(full, want, "full")
      want.samples = nil
      p = p or differs(t:timeline_collect(k, true), want, "lean")
      if p then
        bad = bad + 1
        print(("tape %d (%d events), %d samples: differs at %s"):format(tapes, n, k, p))
      end
    end
  end
  for _, id in ipairs(live) do t:drop(id) end
end
print(("timeline_eq: seed %d, %d tapes, %d collects, %d mismatches"):format(seed, tapes,
  checks, bad))
if bad > 0 then error({ code = 1, msg = bad .. " mismatches" }, 0) end
