-- vramlua fit SPEC --gpu NAME (--vary KNOB [--margin P%] | --knobs)
-- the largest batch/seq/rank that fits a device, or knobs that do
local vram = require("vram")
local errors = require("stdlib.errors")
local gpus = require("stdlib.gpus")
local fit = require("stdlib.fit")

local HELP = [[
usage: vramlua fit SPEC --gpu NAME --vary batch|seq|lora_rank [--margin 5%] [--max N]
       vramlua fit SPEC --gpu NAME --knobs

--vary: the largest value of the knob whose device total (allocator reserved
plus framework overhead) fits the GPU less the margin, found by searching the
simulator; prints the need at that value and at the next one.
--knobs: combinations of checkpointing, attention, optimizer, LoRA and
micro-batching that fit, cheapest first, each with its cost.]]

local defaults, metavar = require("stdlib.formats").options({ help = false, gpu = "",
  vary = "", knobs = false, max = "", margin = "", seq = 0, batch = 0 },
  { gpu = "a NAME", vary = "a KNOB", margin = "a percentage" })
local a = require("stdlib.args").parse({ ... }, defaults,
  { positional = 1, noun = "SPEC", metavar = metavar })
if a.help then print(HELP .. "\n\n" .. require("stdlib.formats").HELP) return end
local path, gpu_name, knob, knobs = a[1], a.gpu, a.vary, a.knobs
local max = a.max and (math.tointeger(tonumber(a.max)) or errors.usage("--max needs an integer"))
local margin = 0
if a.margin then
  local m = a.margin:match("^(%d+%.?%d*)%%?$")
  margin = m and tonumber(m) / 100 or errors.usage("--margin needs a percentage like 5%")
  if margin >= 1 then errors.usage("--margin must be below 100%") end
end
if not path then errors.usage("fit needs a SPEC file") end
if not gpu_name then errors.usage("fit needs --gpu NAME") end
local gpu = gpus.get(gpu_name, nil, "--gpu")
if not knob and not knobs then errors.usage("fit needs --vary KNOB or --knobs") end
local run = require("stdlib.formats").command_run(path, a, require("models.registry"))
if not run then return end
local budget = math.floor(gpu.bytes * (1 - margin))
print(("%s on %s: budget %s (%s less %.1f%% margin)"):format(path, gpu.name,
  vram.fmt(budget, "GiB"), vram.fmt(gpu.bytes, "GiB"), margin * 100))
if knob then
  local v, need, need_next = fit.largest(run, knob, budget, max)
  if v == 0 then
    print(("does not fit even at %s = 1 (needs %s)"):format(knob, vram.fmt(need_next, "GiB")))
    error({ code = 1, msg = "no value of " .. knob .. " fits" }, 0)
  end
  print(("largest %s that fits: %d (needs %s = %d B)"):format(knob, v, vram.fmt(need, "GiB"), need))
  if need_next then
    print(("%s = %d needs %s = %d B: does not fit"):format(knob, v + 1,
      vram.fmt(need_next, "GiB"), need_next))
  end
else
  local list = fit.knobs(run, budget)
  if #list == 0 then print("no combination of the listed knobs fits") end
  for k, e in ipairs(list) do
    if k > 12 then break end
    print(("%2d. %-60s %10s  cost %d  %s"):format(k, e.knobs, vram.fmt(e.need, "GiB"), e.cost,
      e.notes))
  end
end
