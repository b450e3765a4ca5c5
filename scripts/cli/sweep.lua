-- vramlua sweep SPEC [--batch LIST] [--seq LIST] [--gpu NAME] [--html FILE]
-- peaks over batch x seq as CSV (compiled estimates)
local vram = require("vram")
local errors = require("stdlib.errors")
local spec = require("stdlib.spec")
local compiled = require("stdlib.compiled")

local HELP = [[
usage: vramlua sweep SPEC [--batch LIST] [--seq LIST] [--gpu NAME] [--html FILE]

Peak tensors allocated for every (batch, seq) of the lists, as CSV. A LIST is
values separated by commas, or FROM:TO:STEP. The run is compiled once
(stdlib/compiled.lua) and each point answered in microseconds, byte-identical
to `vramlua estimate`. With --gpu, a column says whether the point fits
(tensors allocated plus the framework's overhead, no reserved margin).
--html FILE also writes a page with one bar per point.]]

local function list(s, flag)
  local out = {}
  local a, b, c = s:match("^(%d+):(%d+):(%d+)$")
  if a then
    a, b, c = math.tointeger(tonumber(a)), math.tointeger(tonumber(b)), math.tointeger(tonumber(c))
    if c < 1 or a < 1 or b < a then errors.usage(flag .. " needs FROM:TO:STEP with FROM <= TO") end
    if (b - a) // c > 100000 then errors.usage(flag .. " has more than 100000 values") end
    for v = a, b, c do out[#out + 1] = v end
    return out
  end
  for v in s:gmatch("[^,]+") do
    local n = math.tointeger(tonumber(v))
    if not n or n < 1 then errors.usage(flag .. " needs positive integers, got '" .. v .. "'") end
    out[#out + 1] = n
  end
  if #out == 0 then errors.usage(flag .. " needs values") end
  return out
end

local defaults, metavar = require("stdlib.formats").options({ help = false, batch = "",
  seq = "", gpu = "", html = "" },
  { gpu = "a NAME", batch = "a LIST", seq = "a LIST", html = "a FILE" })
local a = require("stdlib.args").parse({ ... }, defaults,
  { positional = 1, noun = "SPEC", metavar = metavar })
if a.help then print(HELP .. "\n\n" .. require("stdlib.formats").HELP) return end
local path, gpu_name = a[1], a.gpu
local batches = a.batch and list(a.batch, "--batch")
local seqs = a.seq and list(a.seq, "--seq")
if not path then errors.usage("sweep needs a SPEC file") end
local gpu = gpu_name and require("stdlib.gpus").get(gpu_name, nil, "--gpu")
-- the translation's notes as comment lines above the CSV
local run = require("stdlib.formats").command_run(path, a, require("models.registry"), "# ")
if not run then return end
batches, seqs = batches or { run.batch }, seqs or { run.seq }
-- every point within the spec's own size limits, checked before any line
-- is printed (the compiled program would otherwise be asked for sizes the
-- spec refuses)
local function check(b, t)
  for flag, v in pairs({ ["--batch"] = b, ["--seq"] = t }) do
    local limit = spec.LIMITS[flag:sub(3)]
    if v > limit then
      errors.usage(("%s %d is too large: sizes stay within %d so that no product of them "
        .. "can overflow int64"):format(flag, v, limit))
    end
  end
  spec.check_sizes(require("stdlib.run").with(run, { batch = b, seq = t }),
    ("%s at batch %d, seq %d"):format(path, b, t))
end
-- the checks only grow with batch and seq: when the largest of both pass,
-- every point does; otherwise the first point that fails says which
local bmax, tmax = 0, 0
for _, b in ipairs(batches) do bmax = math.max(bmax, b) end
for _, t in ipairs(seqs) do tmax = math.max(tmax, t) end
if not pcall(check, bmax, tmax) then
  for _, b in ipairs(batches) do
    for _, t in ipairs(seqs) do check(b, t) end
  end
end
local est = compiled.compile(run, path)
local frameworks = require("stdlib.frameworks")
local fw = frameworks.of(run)
local usable = gpu and frameworks.usable(fw, gpu, run)
print("batch,seq,peak_bytes,peak_gib" .. (gpu and ",fits" or ""))
local bars = {}
for _, b in ipairs(batches) do
  for _, t in ipairs(seqs) do
    local p = est:peak(b, t)
    if a.html then bars[#bars + 1] = { label = ("batch %d, seq %d"):format(b, t), bytes = p } end
    local line = ("%d,%d,%d,%.4f"):format(b, t, p, vram.to(p, "GiB"))
    if gpu then line = line .. "," .. tostring(p + (fw.context or 0) <= usable) end
    print(line)
  end
end
if a.html then
  if #bars > 2000 then errors.usage("--html draws at most 2000 bars; this sweep has " .. #bars) end
  -- the bars are tensors allocated, so the line is the GPU less the overhead
  local line = gpu and usable - (fw.context or 0)
  local html = require("stdlib.html")
  html.write(a.html, html.bars(path, bars, line,
    "peak of tensors allocated at each (batch, seq)",
    gpu and (gpu.name .. " less framework overhead")))
end
