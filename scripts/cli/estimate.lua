-- vramlua estimate SPEC [--json|--markdown|--csv] [--gpu NAME] [--case ID] [--html FILE]
local errors = require("stdlib.errors")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local report = require("stdlib.report")

local HELP = [[
usage: vramlua estimate SPEC [--json|--markdown|--csv] [--gpu NAME] [--case ID]
                        [--html FILE]

SPEC is a run spec (YAML or JSON, see README) or a measured truth case
({"id","family","config","run"}); a file holding a list of cases needs
--case ID. Prints the peak of tensors allocated with its breakdown, the
phase and op where it happens, the fit on --gpu, and the step's memory
timeline as a sparkline. --html FILE also writes one self-contained page:
the timeline stacked by category with the peak annotated, and the breakdown.]]

local a = require("stdlib.args").parse({ ... }, { help = false, json = false,
  markdown = false, csv = false, gpu = "", case = "", html = "" },
  { positional = 1, noun = "SPEC", metavar = { gpu = "a NAME", case = "an ID", html = "a FILE" } })
if a.help then print(HELP) return end
local path, gpu, case_id = a[1], a.gpu, a.case
local fmt = (a.json and "json") or (a.markdown and "markdown") or (a.csv and "csv") or nil
if not path then errors.usage("estimate needs a SPEC file") end
if gpu then require("stdlib.gpus").get(gpu, nil, "--gpu") end

local doc = spec.load_file(path)
if type(doc) == "table" and doc[1] ~= nil then
  if not case_id then errors.usage(path .. " holds several cases: pick one with --case ID") end
  local found
  for _, c in ipairs(doc) do if c.id == case_id then found = c end end
  doc = found or errors.input(path, "--case", "no case with id '" .. case_id .. "'")
elseif case_id and doc.id ~= case_id then
  errors.input(path, "--case", "the file holds case '" .. tostring(doc.id) .. "'")
end
local run = spec.normalize(doc, path)
run.timeline = fmt == nil or fmt == "markdown" or a.html ~= nil -- drawn, not in JSON/CSV
local st = step.run(run)
local b = report.budget(st, run, gpu)
if fmt == "json" then print(report.json(b))
elseif fmt == "markdown" then print(report.markdown(b, path))
elseif fmt == "csv" then print(report.csv(b))
else
  print(report.text(b, path))
  if st.timeline then print(table.concat(require("stdlib.timeline").text(st.timeline), "\n")) end
end
if a.html then
  local html = require("stdlib.html")
  html.write(a.html, html.page(path, b, st.timeline))
  if not fmt then print("html: wrote " .. a.html) end -- JSON and CSV stay parseable
end
