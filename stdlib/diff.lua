-- Two runs side by side: which knobs differ (in the normalized run, so a
-- default written out and one left implicit are the same), which
-- components of the peak moved and by how much, and where each peak is.
local vram = require("vram")
local report = require("stdlib.report")

local M = {}

-- Keys that are bookkeeping, not knobs: where the config came from, its
-- provenance notes, what a report asked the simulator to record, and the
-- family's simulator (its code: the description's fields say what differs).
local SKIP = { config_path = true, hf_config = true, timeline = true, draw_decode = true,
  trace = true, loss_where = true, sim = true }

local function flatten(t, prefix, out)
  for k, v in pairs(t) do
    local key = prefix .. tostring(k)
    -- `where` at any depth (parallel, lora) names the file a field came from
    if not (prefix == "" and SKIP[k]) and not tostring(k):match("^_") and k ~= "where" then
      if type(v) == "table" then flatten(v, key .. ".", out) else out[key] = v end
    end
  end
  return out
end

local function show(v)
  if v == nil then return "(unset)" end
  return tostring(v)
end

-- A layout on one side only is one knob, its name, not its thirty fields.
local function layout_as_name(r, other)
  if not r.parallel or other.parallel then return r end
  local c = {}
  for k, v in pairs(r) do c[k] = v end
  c.parallel = require("stdlib.parallel").layout_name(r.parallel)
  return c
end

-- { {knob, a, b} } sorted by knob name.
function M.knobs(ra, rb)
  ra, rb = layout_as_name(ra, rb), layout_as_name(rb, ra)
  local fa, fb = flatten(ra, "", {}), flatten(rb, "", {})
  local keys, seen = {}, {}
  for k in pairs(fa) do keys[#keys + 1] = k; seen[k] = true end
  for k in pairs(fb) do if not seen[k] then keys[#keys + 1] = k end end
  table.sort(keys)
  local out = {}
  for _, k in ipairs(keys) do
    if fa[k] ~= fb[k] then out[#out + 1] = { knob = k, a = show(fa[k]), b = show(fb[k]) } end
  end
  return out
end

-- Budgets a and b (report.budget) -> { {what, a, b, delta} } for the peak,
-- each category at the peak, reserved, device total, and each phase's peak
-- (in step order when the timelines are given, else by name).
function M.components(ba, bb, tla, tlb)
  local rows = {}
  local function row(what, x, y) rows[#rows + 1] = { what = what, a = x or 0, b = y or 0,
    delta = (y or 0) - (x or 0) } end
  row("peak (tensors allocated)", ba.peak_bytes, bb.peak_bytes)
  local ca, cb = {}, {}
  for _, it in ipairs(ba.breakdown) do ca[it.category] = it.bytes end
  for _, it in ipairs(bb.breakdown) do cb[it.category] = it.bytes end
  for _, c in ipairs(report.ORDER) do
    if ca[c] or cb[c] then row("  " .. c, ca[c], cb[c]) end
  end
  row("allocator reserved", ba.reserved_bytes, bb.reserved_bytes)
  row("device total", ba.device_total_bytes, bb.device_total_bytes)
  local phases, seen = {}, {}
  for _, pp in ipairs({ ba.phase_peaks or {}, bb.phase_peaks or {} }) do
    for ph in pairs(pp) do if not seen[ph] then seen[ph] = true; phases[#phases + 1] = ph end end
  end
  local order, n = {}, 0 -- first seen in A's step, then in B's
  for _, tl in ipairs({ tla or { spans = {} }, tlb or { spans = {} } }) do
    for _, sp in ipairs(tl.spans) do
      if not order[sp.phase] then n = n + 1; order[sp.phase] = n end
    end
  end
  table.sort(phases, function(x, y)
    if (order[x] or math.huge) ~= (order[y] or math.huge) then
      return (order[x] or math.huge) < (order[y] or math.huge)
    end
    return x < y
  end)
  for _, ph in ipairs(phases) do
    row("phase peak: " .. ph, (ba.phase_peaks or {})[ph], (bb.phase_peaks or {})[ph])
  end
  return rows
end

local function gib(b) return ("%.2f"):format(vram.to(b, "GiB")) end
local function signed(b)
  if b == 0 then return "0" end
  return (b > 0 and "+" or "-") .. gib(math.abs(b))
end

local function where(b)
  return b.peak_phase .. (b.peak_op and (" at " .. b.peak_op) or "")
    .. (b.largest_rank and (" on the largest rank (ranks " .. b.largest_rank .. ")") or "")
end

-- The comparison as lines of text. a, b: { name, run, budget, timeline|nil }.
function M.text(a, b)
  local out = {}
  local function add(s) out[#out + 1] = s end
  add("A: " .. a.name)
  add("B: " .. b.name)
  local ks = M.knobs(a.run, b.run)
  add(("knobs that differ (%d):"):format(#ks))
  if #ks == 0 then add("  (none: the two runs are the same)") end
  local w = 10
  for _, k in ipairs(ks) do w = math.max(w, #k.knob) end
  for _, k in ipairs(ks) do add(("  %-" .. w .. "s  %s -> %s"):format(k.knob, k.a, k.b)) end
  add("")
  add(("%-30s %12s %12s %12s"):format("component (GiB = 2^30 B)", "A GiB", "B GiB", "B - A"))
  for _, r in ipairs(M.components(a.budget, b.budget, a.timeline, b.timeline)) do
    if r.a ~= 0 or r.b ~= 0 then
      add(("%-30s %12s %12s %12s  [%d B]"):format(r.what, gib(r.a), gib(r.b), signed(r.delta),
        r.delta))
    end
  end
  add("")
  add("peak of A: " .. where(a.budget))
  add("peak of B: " .. where(b.budget))
  if a.timeline and b.timeline then
    local tl = require("stdlib.timeline")
    local la, ma = tl.sparkline(a.timeline, 48)
    local lb, mb = tl.sparkline(b.timeline, 48)
    add("timelines (each at its own peak's height):")
    add("  A " .. la .. "  " .. ma)
    add("  B " .. lb .. "  " .. mb)
  end
  return out
end

return M
