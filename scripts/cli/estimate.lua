-- vramlua estimate SPEC [--json|--markdown|--csv] [--gpu NAME] [--case ID] [--html FILE]
-- peak memory of a run spec (YAML/JSON), another tool's config or a truth case
local vram = require("vram")
local errors = require("stdlib.errors")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local report = require("stdlib.report")
local formats = require("stdlib.formats")

local HELP = [==[
usage: vramlua estimate SPEC [--json|--markdown|--csv] [--gpu NAME] [--case ID]
                        [--html FILE]
                        [--observed SIZE [--observed-kind allocated|reserved|nvidia-smi]]
       vramlua estimate FILE [--format NAME] [--model CONFIG.json] [--gpus N]
                             [--seq N] [--batch N] [--explain]

SPEC is a run spec (YAML or JSON, see README) or a measured truth case
({"id","family","config","run"}); a file holding a list of cases needs
--case ID. Prints the peak of tensors allocated with its breakdown, the
phase and op where it happens, the fit on --gpu, and the step's memory
timeline as a sparkline. --html FILE also writes one self-contained page:
the timeline stacked by category with the peak annotated, and the breakdown.
--observed SIZE (80GB, 74.5GiB, bytes) reconciles a figure you measured with
the estimate of the same kind (--observed-kind, default nvidia-smi): the
likeliest causes of the difference, each sized by the simulator with one
knob of the spec flipped.
]==] .. formats.HELP .. [[

A vLLM config prints what vLLM reports at start-up on --gpu: weights per
rank, activation profile, CUDA graphs, KV cache tokens and concurrency.]]

local defaults, metavar = formats.options({ help = false, json = false,
  markdown = false, csv = false, gpu = "", case = "", html = "", seq = 0, batch = 0,
  observed = "", observed_kind = "" },
  { gpu = "a NAME", case = "an ID", html = "a FILE", seq = "a length", batch = "a size",
    observed = "a SIZE", observed_kind = "a KIND" })
local a = require("stdlib.args").parse({ ... }, defaults,
  { positional = 1, noun = "SPEC", metavar = metavar })
if a.help then print(HELP) return end
local path, gpu, case_id = a[1], a.gpu, a.case
local fmt = (a.json and "json") or (a.markdown and "markdown") or (a.csv and "csv") or nil
if not path then errors.usage("estimate needs a SPEC file") end
if gpu then require("stdlib.gpus").get(gpu, nil, "--gpu") end
if a.observed_kind and not a.observed then errors.usage("--observed-kind needs --observed SIZE") end
-- only --observed needs the reconciliation (not loaded otherwise)
local observed = a.observed and require("stdlib.observed")
local seen = observed and observed.parse_size(a.observed)

-- another tool's config is translated (stdlib/formats.lua); a run spec is
-- read as it stands
local run, tr, doc = formats.load_run(path, a, require("models.registry"))
if tr and a.explain then print(formats.explain(tr)) return end
local serving = tr and tr.spec.serve and require("stdlib.serving")
local sv = serving and serving.estimate(tr.spec.serve, run,
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
else
  doc = require("stdlib.inputs").pick_case(doc, path, case_id, "--case")
end
run = run or spec.normalize(doc, path, require("models.registry"))
-- the reconciliation flips knobs of the run spec as written; under a
-- layout it compares with the rank whose figure is largest
local rec = seen and observed.reconcile({ doc = not tr and doc or nil, path = path,
  observed = seen, kind = a.observed_kind, gpu = gpu, families = require("models.registry") })
-- drawn, not in JSON/CSV; the page stacks the categories, a sparkline does not
run.timeline = a.html ~= nil or ((fmt == nil or fmt == "markdown") and "sparkline")
run.draw_decode = a.html ~= nil or nil -- the page draws every decode step (stdlib/step.lua)
local b, st, tls
if run.parallel then -- per-rank budgets; the top level is the largest rank's
  b, tls = require("stdlib.parallel").budget(run, gpu)
  st = { timeline = tls.largest } -- the page and the Markdown draw the largest rank's
else
  st = step.run(run)
  b = report.budget(st, run, gpu)
end
if tr then b.translation = formats.json_notes(tr) end
if rec and fmt == "json" then b.observed = observed.data(rec) end
if sv then
  -- vLLM colocated with training (TRL use_vllm, vllm_mode colocate)
  b.colocated_vllm = { reserved_bytes = sv.figures.requested_bytes, figures = sv.figures,
    warnings = sv.warnings, assumptions = sv.assumptions }
  if b.gpu then
    b.headroom_bytes = b.headroom_bytes - sv.figures.requested_bytes
    b.fits = b.headroom_bytes >= 0
  end
end
-- the timeline lines the terminal and the Markdown share: one per rank
-- role under a layout, each under its role's name
local function timeline_lines()
  local timeline, out = require("stdlib.timeline"), {}
  if tls then
    for k, r in ipairs(b.per_rank) do
      if k > 1 then out[#out + 1] = "" end
      out[#out + 1] = ("%s (ranks %s):"):format(r.role, r.ranks)
      for _, l in ipairs(timeline.text(tls[k])) do out[#out + 1] = l end
    end
  elseif st and st.timeline then out = timeline.text(st.timeline) end
  return #out > 0 and out or nil
end
if fmt == "json" then print(report.json(b))
elseif fmt == "markdown" then
  -- the spec as written; a case picked from a list, as JSON
  local text = (not tr and doc.id and case_id) and vram.json.encode(doc, true)
    or vram.text.load(path)
  print(require("stdlib.markdown").estimate({ budget = b, title = path,
    timeline_lines = timeline_lines(),
    observed_lines = rec and observed.text(rec), spec_text = text,
    spec_lang = path:match("%.ya?ml$") and "yaml" or "json" }))
elseif fmt == "csv" then print(report.csv(b))
else
  print(run.parallel and require("stdlib.parallel").text(b, path) or report.text(b, path))
  local lines = timeline_lines()
  if lines then print((tls and "\n" or "") .. table.concat(lines, "\n")) end
  if rec then print(table.concat(observed.text(rec), "\n")) end
  if sv then
    print("colocated vLLM (reserved beside training; the fit above subtracts it):")
    print(serving.text(sv))
  end
end
if a.html then
  local html = require("stdlib.html")
  html.write(a.html, html.page(path, b, st and st.timeline,
    rec and html.section("Observed vs estimated", observed.text(rec))))
  if not fmt then print("html: wrote " .. a.html) end -- JSON and CSV stay parseable
end
