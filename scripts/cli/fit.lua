-- vramlua fit SPEC --gpu NAME (--vary KNOB [--margin P%] | --knobs | --gpus N)
-- the largest batch/seq/rank that fits a device, knobs that do, or GPU layouts
local vram = require("vram")
local errors = require("stdlib.errors")
local gpus = require("stdlib.gpus")
local fit = require("stdlib.fit")

local HELP = [[
usage: vramlua fit SPEC --gpu NAME --vary batch|seq|lora_rank [--margin 5%] [--max N]
       vramlua fit SPEC --gpu NAME --knobs [--gpus N] [--depth N] [--json] [--html FILE]
       vramlua fit SPEC --gpu NAME --gpus N [--margin 5%]

--vary: the largest value of the knob whose device total (allocator reserved
plus framework overhead) fits the GPU less the margin, found by searching the
simulator; prints the need at that value and at the next one.
--knobs: combinations of up to three levers (attention kernel, fused linear
or chunked cross-entropy, checkpointing policies, optimizer states, LoRA, QLoRA,
micro-batching; ZeRO stages, FSDP and CPU offload over the run's
data-parallel ranks, or ZeRO-Offload on one GPU) that fit, cheapest first,
each with its cost and the memory it saves; every saving is simulated, a
lever the run already uses is not offered, and a lever that saves nothing
in a combination is never listed. With --gpus N a spec without a parallel:
table is taken as DDP over N GPUs, so sharding is offered. --json prints
the same with exact bytes; --html FILE also writes one bar per combination.
--depth N: at most N levers at once (1-3); without it, 3, or 2 or 1 where
combinations of 3 (then 2) levers would number over 600.

--gpus N (without --vary or --knobs): the layouts of N GPUs (dp x tp x pp x cp
x ep, with DDP, ZeRO 1-3 or FSDP over the data-parallel ranks) whose every
rank fits, least communication per rank first; the spec's own parallel:
table is replaced. With --vary or --knobs, a parallel: run is searched with
its largest rank.]]

local defaults, metavar = require("stdlib.formats").options({ help = false, gpu = "",
  vary = "", knobs = false, max = "", margin = "", seq = 0, batch = 0, html = "", json = false,
  depth = 0 },
  { gpu = "a NAME", vary = "a KNOB", margin = "a percentage", html = "a FILE" })
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
local layouts = not knob and not knobs and (a.gpus or 0) > 0
if not knob and not knobs and not layouts then
  errors.usage("fit needs --vary KNOB, --knobs or --gpus N")
end
if a.json and not knobs then errors.usage("fit --json goes with --knobs") end
if knob and (a.gpus or 0) > 0 then errors.usage("fit --vary prices the spec's own layout: "
  .. "give it a parallel: table instead of --gpus") end
-- --json keeps stdout one JSON document: the translation's notes go to it
local say = a.json and function() end or print
a.gpus_layout = true -- --gpus is fit's own option on a run spec (--knobs, layouts)
local run, tr = require("stdlib.formats").command_run(path, a, require("models.registry"),
  nil, a.json)
if not run then return end
if knobs and (a.gpus or 0) > 0 then -- the run as DDP over N GPUs, unless it says its layout
  local par = require("stdlib.parallel")
  if not run.parallel then
    local where = path .. " (--gpus " .. a.gpus .. ")"
    run.parallel = par.check(par.read({ dp = a.gpus }, where, run), run, where)
  elseif run.parallel.world ~= a.gpus then
    errors.usage(("--gpus %d differs from the spec's parallel: layout (world %d)"):format(a.gpus,
      run.parallel.world))
  end
end
local budget = math.floor(gpu.bytes * (1 - margin))
say(("%s on %s: budget %s (%s less %.1f%% margin)"):format(path, gpu.name,
  vram.fmt(budget, "GiB"), vram.fmt(gpu.bytes, "GiB"), margin * 100))
if layouts then
  local par = require("stdlib.parallel")
  if run.parallel then print("(the spec's parallel: table is replaced by each layout below)") end
  local list, tried = par.fit(run, a.gpus, budget, path)
  print(("%d of %d layouts of %d GPUs fit; least communication per rank first"):format(#list,
    tried, a.gpus))
  print(("%3s  %-30s %12s %14s %7s"):format("", "layout", "largest rank", "comm/step",
    "bubble"))
  for k, e in ipairs(list) do
    if k > 15 then break end
    print(("%3d. %-30s %12s %11.2f GB %6.1f%%"):format(k, par.layout_name(e.layout),
      vram.fmt(e.need, "GiB"), e.comm / 1e9, e.bubble * 100))
  end
  if run.param_dtype == run.dtype and vram.bytes(run.dtype, 1) < 4 then
    print(("DDP and FSDP keep the spec's precision (pure %s, %s optimizer states); DeepSpeed "
      .. "ZeRO keeps fp32 master and optimizer partitions"):format(run.dtype,
        run.optimizer.state_dtype or run.dtype))
  end
  print(("every layout steps the same global batch (batch x grad_accum x %d = %d sequences): "
    .. "a replica of tp x pp x cp ranks runs that many more micro-batches"):format(a.gpus,
      run.batch * (run.grad_accum or 1) * a.gpus))
  print("comm/step: modelled bytes each rank sends per step (all-reduce, all-gather, "
    .. "reduce-scatter, pipeline and ring sends), an ordering key rather than a time")
  if #list == 0 then error({ code = 1, msg = "no layout of " .. a.gpus .. " GPUs fits" }, 0) end
elseif knob then
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
  local want = (a.depth or 0) > 0 and a.depth or nil
  if want and want > 3 then errors.usage("--depth must be 1, 2 or 3") end
  local list, base, levers, depth, base_at_peak = fit.knobs(run, budget, want)
  local names = {}
  for _, m in ipairs(levers) do names[#names + 1] = m.name end
  local L = run.parallel
  local layout = L and require("stdlib.parallel").layout_name(L)
  if a.json then
    local combos = {}
    for k, e in ipairs(list) do
      -- levers: absent for the run as given (an empty table encodes as {})
      combos[k] = { knobs = e.knobs, levers = #e.levers > 0 and e.levers or nil, need_bytes = e.need, saving_bytes = e.saving, cost = e.cost,
        notes = e.notes }
    end
    print(vram.json.encode({ spec = path, gpu = gpu.name, budget_bytes = budget,
      layout = layout, need_bytes = base, levers = names, depth = depth,
      combinations = combos,
      translation = tr and require("stdlib.formats").json_notes(tr) or nil }, true))
  else
    print(("as given%s: needs %s = %d B; %d levers change this run (listed below)"):format(
      layout and (" (" .. layout .. ", largest rank)") or "", vram.fmt(base, "GiB"), base,
      #levers))
    print(("combinations of up to %d levers, each simulated%s"):format(depth,
      (depth < 3 and not want) and (" (fewer than 3: more than %d combinations; --depth 3 to"
      .. " try them all)"):format(fit.SEARCH_RUNS) or ""))
    if #list == 0 then print("no combination of these levers fits") end
    -- the knobs last (their names are long), what each costs once below
    print(("%3s %11s %11s %4s  %s"):format("", "needs", "saves", "cost", "knobs"))
    for k, e in ipairs(list) do
      if k > 12 then print(("... and %d more that fit"):format(#list - 12)) break end
      print(("%2d. %11s %11s %4d  %s"):format(k, vram.fmt(e.need, "GiB"),
        vram.fmt(e.saving, "GiB"), e.cost, e.knobs))
    end
    print("levers that change this run (cost: what it costs)")
    for _, m in ipairs(levers) do print(("  %s (%d: %s)"):format(m.name, m.cost, m.note)) end
  end
  if a.html then
    local bars = {}
    if base > budget then -- as given does not fit: drawn first, over the line
      bars[1] = { label = "as given (does not fit)", bytes = base, by = base_at_peak }
    end
    for k, e in ipairs(list) do
      if k > 12 then break end -- the ones printed
      bars[#bars + 1] = { label = e.knobs, bytes = e.need, by = e.at_peak }
    end
    local html = require("stdlib.html")
    html.write(a.html, html.bars(path .. ": knobs that fit " .. gpu.name
      .. (layout and (" (" .. layout .. ", largest rank)") or ""), bars, budget,
      "device total (tensors at the peak by category; grey: allocator rounding and context)",
      gpu.name .. " budget"))
    say("html: wrote " .. a.html)
  end
end
