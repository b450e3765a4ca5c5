-- Benchmark (not a test): CPU time of one in-process estimate of a run spec,
-- for the side-by-side with llm-analysis (tests/bench/run.sh).
--   vramlua run tests/bench/peer.lua SPEC [SECONDS]
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local path, secs = ..., tonumber((select(2, ...))) or 0.5

local run = spec.load(path, require("models.registry"))
local n, t0, dt = 0, os.clock(), 0
repeat
  step.run(run)
  n = n + 1
  dt = os.clock() - t0
until dt >= secs
print(("%.1f"):format(dt / n * 1e6))
