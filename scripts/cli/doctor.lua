-- vramlua doctor SPEC --gpu NAME [--force]
-- accept or refuse a run on a device
local errors = require("stdlib.errors")
local gpus = require("stdlib.gpus")
local fit = require("stdlib.fit")
local doctor = require("stdlib.doctor")

local HELP = [[
usage: vramlua doctor SPEC --gpu NAME [--force]

Checks a run against a device: seed 003's refusal matrix (CPU-only hosts,
CUDA under 12 GiB, Apple unified memory under 16 GiB, bases too large for
Apple unified memory) and the simulated device total. --force lifts the
overridable refusals. Exit 0 when the run is accepted, 1 when refused.]]

local defaults, metavar = require("stdlib.formats").options({ help = false, gpu = "",
  force = false, seq = 0, batch = 0 },
  { gpu = "a NAME" })
local a = require("stdlib.args").parse({ ... }, defaults,
  { positional = 1, noun = "SPEC", metavar = metavar })
if a.help then print(HELP .. "\n\n" .. require("stdlib.formats").HELP) return end
local path, gpu_name, force = a[1], a.gpu, a.force
if not path then errors.usage("doctor needs a SPEC file") end
if not gpu_name then errors.usage("doctor needs --gpu NAME") end
local gpu = gpus.get(gpu_name, nil, "--gpu")
local run = require("stdlib.formats").command_run(path, a, require("models.registry"))
if not run then return end
-- Apple silicon runs PyTorch's MPS stack whatever CUDA framework the spec
-- names: Metal's buffers, no CUDA context, and Metal's working set as the
-- limit (stdlib/frameworks/mps.lua)
local frameworks = require("stdlib.frameworks")
if gpu.kind == "mps" and run.framework ~= "mps" then
  print(("%s is Apple silicon: simulated as framework mps, not %s"):format(gpu.name,
    run.framework))
  run = require("stdlib.run").with(run, { framework = "mps" })
end
local need, st = fit.need(run)
local usable = frameworks.usable(frameworks.of(run), gpu)
local weights = st.at_peak.weights + st.at_peak.master_weights
local ok, findings = doctor.check(gpu, weights, need, force, usable)
print(("%s on %s: needs %.2f GiB%s"):format(path, gpu.name, require("vram").to(need, "GiB"),
  usable ~= gpu.bytes and (" of the %.2f GiB it lets a step use"):format(
    require("vram").to(usable, "GiB")) or ""))
for _, f in ipairs(findings) do
  print(("  %s %s: %s"):format((force and f.overridable) and "overridden" or "REFUSED", f.id,
    f.reason))
end
if ok then
  print("accepted")
else
  error({ code = 1, msg = "refused: " .. findings[1].reason }, 0)
end
