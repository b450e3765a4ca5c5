-- vramlua diff A B [--gpu NAME] [--case-a ID] [--case-b ID] [--json]
-- what differs between two runs, what it moves, and where each peaks
local errors = require("stdlib.errors")
local inputs = require("stdlib.inputs")
local step = require("stdlib.step")
local report = require("stdlib.report")
local diff = require("stdlib.diff")
local vram = require("vram")

local HELP = [[
usage: vramlua diff A B [--gpu NAME] [--case-a ID] [--case-b ID] [--json]

A and B are anything `estimate` accepts (run specs, truth cases; a file of
several cases needs --case-a / --case-b). Prints the knobs that differ in
the normalized runs, every component of the peak in A and in B with the
change in exact bytes, each phase's peak, and the phase and op of each
peak, with both timelines. --json prints the same as one object.]]

local a = require("stdlib.args").parse({ ... }, { help = false, gpu = "", case_a = "",
  case_b = "", json = false },
  { positional = 2, noun = "A B", metavar = { gpu = "a NAME", case_a = "an ID",
    case_b = "an ID" } })
if a.help then print(HELP) return end
if not a[1] or not a[2] then errors.usage("diff needs two inputs: A and B") end
if a.gpu then require("stdlib.gpus").get(a.gpu, nil, "--gpu") end

local function side(path, case_id, flag)
  local run = inputs.load(path, case_id, flag, require("models.registry"))
  run.timeline = not a.json and "sparkline" -- two sparklines and the parts
  local b, tl
  if run.parallel then -- the largest rank's budget, as estimate prints it
    local tls
    b, tls = require("stdlib.parallel").budget(run, a.gpu)
    tl = tls.largest
  else
    local st = step.run(run)
    b, tl = report.budget(st, run, a.gpu), st.timeline
  end
  return { name = path .. (case_id and (" [" .. case_id .. "]") or ""), run = run,
    budget = b, timeline = tl }
end
local A = side(a[1], a.case_a, "--case-a")
local B = side(a[2], a.case_b, "--case-b")
if a.json then
  print(vram.json.encode({ a = A.name, b = B.name, knobs = diff.knobs(A.run, B.run),
    components = diff.components(A.budget, B.budget),
    peak = { a = { phase = A.budget.peak_phase, op = A.budget.peak_op },
             b = { phase = B.budget.peak_phase, op = B.budget.peak_op } } }, true))
else
  print(table.concat(diff.text(A, B), "\n"))
end
