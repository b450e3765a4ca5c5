-- vramlua sweep SPEC [--batch LIST] [--seq LIST] [--rank LIST] [--image LIST] ...
-- peaks over batch x seq (x other knobs) as CSV (compiled estimates)
local vram = require("vram")
local errors = require("stdlib.errors")
local spec = require("stdlib.spec")
local compiled = require("stdlib.compiled")

local HELP = [[
usage: vramlua sweep SPEC [--batch LIST] [--seq LIST] [--gpu NAME] [--html FILE]
                          [--rank LIST] [--image LIST] [--images LIST] [--layers LIST]
                          [--vision-layers LIST] [--accum LIST] [--ckpt LIST]
                          [--tp LIST] [--pp LIST] [--dp LIST] [--cp LIST] [--ep LIST]
                          [--zero LIST]

Peak tensors allocated for every (batch, seq) of the lists, as CSV (a spec
with a parallel: table: the largest rank's device total, compiled per
layout by stdlib/compiled_parallel.lua). A LIST is
values separated by commas, or FROM:TO:STEP. The run is compiled once
(stdlib/compiled.lua) and each point answered in microseconds, byte-identical
to `vramlua estimate`; a run that cannot be compiled (a size-dependent
branch: a chunked loss, an RL update's minibatches, an expert capacity) is
simulated at each point, and a first '# not compiled' line says why. With
--gpu, a column says whether the point fits
(tensors allocated plus the framework's overhead, no reserved margin).
--html FILE also writes a page with one bar per point.

The other knobs add a column each and sweep their product too
(stdlib/knobs.lua): --rank (LoRA rank), --image (WIDTHxHEIGHT pixels, e.g.
448x448,1024x768), --images (images per sample), --layers, --vision-layers,
--accum (gradient accumulation), --ckpt (none, full, or every N-th layer).
The LoRA rank and the image's pixels are sizes of one program; each value of
the others is compiled on first use (tens of milliseconds). A spec with a
parallel: table also sweeps its degrees: --tp, --pp, --dp, --cp, --ep and
--zero (0-3) replace the table's values (each layout compiled on first
use; a layout that does not compile, cp > 1 among them, and sizes no
program answers are simulated).]]

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
  seq = "", gpu = "", html = "", rank = "", image = "", images = "", layers = "",
  vision_layers = "", accum = "", ckpt = "", tp = "", pp = "", dp = "", cp = "", ep = "",
  zero = "" },
  { gpu = "a NAME", batch = "a LIST", seq = "a LIST", html = "a FILE", rank = "a LIST",
    image = "a LIST of WIDTHxHEIGHT", images = "a LIST", layers = "a LIST",
    vision_layers = "a LIST", accum = "a LIST", ckpt = "a LIST (none, full, N)", tp = "a LIST",
    pp = "a LIST", dp = "a LIST", cp = "a LIST", ep = "a LIST", zero = "a LIST (0-3)" })
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
-- the other knobs' lists (column, knob, values), in the columns' order
local others = {}
local function image(v)
  local w, h = v:match("^(%d+)x(%d+)$")
  w, h = math.tointeger(tonumber(w)), math.tointeger(tonumber(h))
  if not w or w < 1 or h < 1 then errors.usage("--image needs WIDTHxHEIGHT values, got '" .. v .. "'") end
  return { width = w, height = h }
end
for _, o in ipairs({ { "rank", "lora_rank" }, { "image", "image" }, { "images", "images" },
  { "layers", "layers" }, { "vision_layers", "vision_layers" }, { "accum", "grad_accum" },
  { "ckpt", "ckpt" }, { "tp", "tp" }, { "pp", "pp" }, { "dp", "dp" }, { "cp", "cp" },
  { "ep", "ep" }, { "zero", "zero" } }) do
  local v = a[o[1]]
  if v then
    local flag = "--" .. o[1]:gsub("_", "-")
    local values = {}
    if o[1] == "image" then
      for item in v:gmatch("[^,]+") do values[#values + 1] = image(item) end
    elseif o[1] == "ckpt" then
      for item in v:gmatch("[^,]+") do
        local n = math.tointeger(tonumber(item))
        if not n and item ~= "none" and item ~= "full" then
          errors.usage("--ckpt needs none, full or a layer interval, got '" .. item .. "'")
        end
        values[#values + 1] = n or item
      end
    elseif o[1] == "zero" then
      for item in v:gmatch("[^,]+") do
        local n = math.tointeger(tonumber(item))
        if not n or n < 0 or n > 3 then errors.usage("--zero needs 0, 1, 2 or 3, got '" .. item .. "'") end
        values[#values + 1] = n
      end
    else
      values = list(v, flag)
    end
    others[#others + 1] = { o[1], o[2], values }
  end
end
local function text(v) return type(v) == "table" and (v.width .. "x" .. v.height) or tostring(v) end
-- every combination of the other knobs (one empty one when there are none)
local combos = { {} }
for _, o in ipairs(others) do
  local nxt = {}
  for _, c in ipairs(combos) do
    for _, v in ipairs(o[3]) do
      local k = { table.unpack(c) }
      k[#k + 1] = v
      nxt[#nxt + 1] = k
    end
  end
  combos = nxt
end
if #batches * #seqs * #combos > 1000000 then errors.usage("this sweep has over 1,000,000 points") end
local peak, row
-- a multi-GPU layout: the largest rank's device total at each point
-- (stdlib/knobs.lua: a compiled budget per layout; was the whole model on
-- one GPU)
local est, why = nil, nil
if #others == 0 and not run.parallel then est, why = compiled.try(run, {}) end
if est then
  peak = function(b, t) return est:peak(b, t) end
else
  -- a run that does not compile (a size-dependent branch) is simulated at
  -- each point, and says why first
  if why then print("# not compiled (each point simulated): " .. why) end
  local formats = require("stdlib.formats")
  local _, tr, doc = formats.load_run(path, a, require("models.registry"))
  local K = require("stdlib.knobs").new(tr and tr.spec or doc, path, require("models.registry"))
  peak = function(b, t, c)
    local k = { batch = b, seq = t }
    for i, o in ipairs(others) do k[o[2]] = c[i] end
    return K:peak(k)
  end
  -- the spec's own layout over batch and seq: its compiled budget at once
  -- (K:peak's, without a knob table per point), K:peak where it has none
  local layout = #others == 0 and run.parallel and K:layout({}, true)
  if layout then
    local slow = peak
    peak = function(b, t, c) return layout:device_total(b, t) or slow(b, t, c) end
    -- a row of seqs in one call per program, device_total where it has no answer
    row = function(b) return layout:device_line(b, seqs) end
  end
end
local frameworks = require("stdlib.frameworks")
local fw = frameworks.of(run)
local usable = gpu and frameworks.usable(fw, gpu, run)
peak(batches[1], seqs[1], combos[1]) -- a knob's error before any line is printed
local head = { "batch", "seq" }
for _, o in ipairs(others) do head[#head + 1] = o[1] end
local what = run.parallel and "largest_rank_device_total" or "peak"
print(table.concat(head, ",") .. "," .. what .. "_bytes," .. what .. "_gib"
  .. (gpu and ",fits" or ""))
local bars = {}
-- each seq's column written once, not once a row (formatting was ~8 % of a
-- 64 x 64 sweep of a compiled layout)
local seq_col = {}
for i, t in ipairs(seqs) do seq_col[i] = ("%d"):format(t) end
for _, c in ipairs(combos) do
  local cols = ""
  for _, v in ipairs(c) do cols = cols .. "," .. text(v) end
  for _, b in ipairs(batches) do
    local head = ("%d"):format(b) .. ","
    local known = row and row(b) or {}
    for i, t in ipairs(seqs) do
      local p = known[i] or peak(b, t, c)
      if a.html then
        local label = ("batch %d, seq %d"):format(b, t)
        for j, o in ipairs(others) do label = label .. (", %s %s"):format(o[1], text(c[j])) end
        bars[#bars + 1] = { label = label, bytes = p }
      end
      local line = head .. seq_col[i] .. cols .. "," .. p .. "," .. vram.fixed(p, "GiB", 4)
      -- a device total already counts the framework's own bytes
      local need = run.parallel and p or p + (fw.context or 0)
      if gpu then line = line .. "," .. tostring(need <= usable) end
      print(line)
    end
  end
end
if a.html then
  if #bars > 2000 then errors.usage("--html draws at most 2000 bars; this sweep has " .. #bars) end
  -- the bars are tensors allocated, so the line is the GPU less the overhead
  local line = gpu and usable - (run.parallel and 0 or fw.context or 0)
  local html = require("stdlib.html")
  html.write(a.html, html.bars(path, bars, line, run.parallel and
    "the largest rank's device total at each (batch, seq)" or
    "peak of tensors allocated at each (batch, seq)",
    gpu and (gpu.name .. (run.parallel and "" or " less framework overhead"))))
end
