-- vramlua estimate SPEC [--json|--markdown|--csv] [--gpu NAME] [--case ID] [--html FILE]
-- peak memory of a run spec (YAML/JSON), another tool's config or a truth case
local errors = require("stdlib.errors")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local report = require("stdlib.report")
local formats = require("stdlib.formats")

local HELP = [[
usage: vramlua estimate SPEC [--json|--markdown|--csv] [--gpu NAME] [--case ID]
                        [--html FILE]
       vramlua estimate FILE [--format NAME] [--model CONFIG.json] [--gpus N]
                             [--seq N] [--batch N] [--explain]

SPEC is a run spec (YAML or JSON, see README) or a measured truth case
({"id","family","config","run"}); a file holding a list of cases needs
--case ID. Prints the peak of tensors allocated with its breakdown, the
phase and op where it happens, the fit on --gpu, and the step's memory
timeline as a sparkline. --html FILE also writes one self-contained page:
the timeline stacked by category with the peak annotated, and the breakdown.
]] .. formats.HELP .. [[

A vLLM config prints what vLLM reports at start-up on --gpu: weights per
rank, activation profile, CUDA graphs, KV cache tokens and concurrency.]]

local defaults, metavar = formats.options({ help = false, json = false,
  markdown = false, csv = false, gpu = "", case = "", html = "", seq = 0, batch = 0 },
  { gpu = "a NAME", case = "an ID", html = "a FILE", seq = "a length", batch = "a size" })
local a = require("stdlib.args").parse({ ... }, defaults,
  { positional = 1, noun = "SPEC", metavar = metavar })
if a.help then print(HELP) return end
local path, gpu, case_id = a[1], a.gpu, a.case
local fmt = (a.json and "json") or (a.markdown and "markdown") or (a.csv and "csv") or nil
if not path then errors.usage("estimate needs a SPEC file") end
if gpu then require("stdlib.gpus").get(gpu, nil, "--gpu") end

-- another tool's config is translated (stdlib/formats.lua); a run spec is
-- read as it stands
local run, tr, doc = formats.load_run(path, a, require("models.registry"))
if tr and a.explain then print(formats.explain(tr)) return end
local serving = tr and tr.spec.serve and require("stdlib.serving")
local sv = serving and serving.estimate(tr.spec.serve, run, tr.model.config,
  require("stdlib.gpus").find(gpu or tr.spec.run.gpu), path)
if sv and not tr.spec.serve.colocate then
  -- a serving config: vLLM's start-up figures are the answer
  if fmt == "json" then
    print(require("vram").json.encode({ serving = sv.figures, fits = sv.fits,
      warnings = sv.warnings, assumptions = sv.assumptions,
      translation = formats.json_notes(tr) }, true))
  else
    print(formats.notes(tr))
    print(serving.text(sv))
  end
  if not sv.fits then error({ code = 1, msg = "vLLM would not start: " .. sv.warnings[1] }, 0) end
  return
end
if tr then
  -- notes first, so that no warning is lost in any output format
  if fmt == "csv" then print((formats.notes(tr):gsub("[^\n]+", "# %0")))
  elseif fmt ~= "json" then print(formats.notes(tr)) end
elseif type(doc) == "table" and doc[1] ~= nil then
  if not case_id then errors.usage(path .. " holds several cases: pick one with --case ID") end
  local found
  for _, c in ipairs(doc) do if c.id == case_id then found = c end end
  doc = found or errors.input(path, "--case", "no case with id '" .. case_id .. "'")
elseif case_id and doc.id ~= case_id then
  errors.input(path, "--case", "the file holds case '" .. tostring(doc.id) .. "'")
end
run = run or spec.normalize(doc, path, require("models.registry"))
run.timeline = fmt == nil or fmt == "markdown" or a.html ~= nil -- drawn, not in JSON/CSV
local b, st
if run.parallel then -- per-rank budgets; the top level is the largest rank's
  b = require("stdlib.parallel").budget(run, gpu)
else
  st = step.run(run)
  b = report.budget(st, run, gpu)
end
if tr then b.translation = formats.json_notes(tr) end
if sv then
  -- vLLM colocated with training (TRL use_vllm, vllm_mode colocate)
  b.colocated_vllm = { reserved_bytes = sv.figures.requested_bytes, figures = sv.figures,
    warnings = sv.warnings, assumptions = sv.assumptions }
  if b.gpu then
    b.headroom_bytes = b.headroom_bytes - sv.figures.requested_bytes
    b.fits = b.headroom_bytes >= 0
  end
end
if fmt == "json" then print(report.json(b))
elseif fmt == "markdown" then print(report.markdown(b, path))
elseif fmt == "csv" then print(report.csv(b))
else
  print(run.parallel and require("stdlib.parallel").text(b, path) or report.text(b, path))
  if st and st.timeline then print(table.concat(require("stdlib.timeline").text(st.timeline), "\n")) end
  if sv then
    print("colocated vLLM (reserved beside training; the fit above subtracts it):")
    print(serving.text(sv))
  end
end
if a.html then
  local html = require("stdlib.html")
  html.write(a.html, html.page(path, b, st and st.timeline))
  if not fmt then print("html: wrote " .. a.html) end -- JSON and CSV stay parseable
end
