-- REGRESSION LOCK, not a truth value. tests/lock/estimates.json holds what
-- the code computed at main 1fffd0a (before issue 11's refactor) for every
-- public truth case, every example spec, a VLM run of every VLM preset and
-- the parameter count of every preset. This test recomputes them and insists
-- on byte equality, so a refactor that is meant to change nothing changes
-- nothing. A change that is MEANT to move a number (a simulator mechanism
-- fixed against measured truth) re-records the file with
--   vramlua run tests/lock/regression.lua --record > tests/lock/estimates.json
-- and says so in its commit; accuracy against measurement is
-- tests/truth/accuracy.lua's job, not this file's.
--
-- The truth cases' device totals are not locked: at 33eefe1 they wrongly
-- added a 500 MiB CUDA context to a CPU measurement (issue 11); the run
-- table now says pytorch-cpu and tests/lua/test_run.lua checks that.
local vram = require("vram")
local lock = require("lock_cases")

local args = { ... }
local record = args[1] == "--record"
local got = lock.compute()
if record then
  print(vram.json.encode(got, true))
  return
end
local want = vram.json.load(lock.path)
local failed, checked = 0, 0
local function cmp(a, b, where)
  if type(a) == "table" and type(b) == "table" then
    for k, v in pairs(b) do cmp(a[k], v, where .. "." .. tostring(k)) end
    -- what did not exist at the time of locking (a preset added since) is
    -- not locked, and said so
    for k in pairs(a) do
      if b[k] == nil then print("not locked (new since): " .. where .. "." .. k) end
    end
  elseif a ~= b then
    failed = failed + 1
    print(("FAIL %s: now %s, locked %s"):format(where, tostring(a), tostring(b)))
  else
    checked = checked + 1
  end
end
cmp(got, want, "lock")
print(("regression lock: %d values equal, %d differ"):format(checked, failed))
if failed > 0 then error("regression lock differs", 0) end
