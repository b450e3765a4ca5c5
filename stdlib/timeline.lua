-- A step's memory timeline: live bytes per category after every change the
-- tape kept (vr_tape_timeline in runtime/core/tape.h), reduced to a fixed
-- number of samples. Each sample is the highest point of its stretch of
-- events, so the step's peak is one of them, exactly.
local vram = require("vram")

local M = {}

M.SAMPLES = 480

-- The timeline the tape kept, as
-- { events = n,
--   at = { i }, live = { bytes }, phase = { name },   (sample j's event, live bytes, phase)
--   runs = { j },   (the first sample of each run of samples of one phase)
--   samples = { {i, live, by = {cat = bytes}, phase, op, recompute} },
--   spans = { {phase, first, last, recompute} },   (event indices)
--   peak = { i, live, by, phase, op } }
-- or nil when the tape kept nothing (the tape's timeline_collect walks the events in C).
-- lean: without samples (a sparkline draws at, live and phase; tables of
-- categories for 480 samples cost as much as the rest of a text
-- estimate's timeline, a table a sample a third of the rest).
function M.collect(tape, samples, lean)
  return tape:timeline_collect(samples or M.SAMPLES, lean)
end

-- The spans merged into the step's parts as a reader names them: each
-- phase once per contiguous stretch, recomputation as its own part.
function M.parts(tl)
  local parts = {}
  for _, s in ipairs(tl.spans) do
    local name = s.recompute and "recompute" or s.phase
    local p = parts[#parts]
    if p and p.name == name then p.last = s.last
    else parts[#parts + 1] = { name = name, first = s.first, last = s.last } end
  end
  return parts
end

local BLOCKS = { "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█" }

-- One letter per part name, unique within the step: the first letter of
-- the name that is still free (lower case first, then upper case).
function M.letters(parts)
  local used, of = {}, {}
  for _, p in ipairs(parts) do
    if not of[p.name] then
      local pick = "?"
      for _, cand in ipairs({ p.name:lower(), p.name:upper() }) do
        for ch in cand:gmatch("%w") do
          if not used[ch] then pick = ch break end
        end
        if pick ~= "?" then break end
      end
      used[pick], of[p.name] = true, pick
    end
  end
  return of
end

-- The samples each of `width` columns covers, column c from lo[c] to
-- hi[c]: every run of samples of one phase (runs: each one's first sample,
-- of ns) keeps a column of its own (an optimizer step of a few events among
-- thousands is still drawn), the rest go in proportion to the samples,
-- largest remainder first. Runs outnumbering the columns: by samples alone.
-- (Numeric loops and flat lists: with ipairs, math.min and a table per
-- column the PPO step's sparkline cost 1.3M instructions.)
local function columns(runs, ns, width)
  local ng = #runs
  local lo, hi = {}, {}
  if ng > width then
    for c = 1, width do lo[c], hi[c] = (c - 1) * ns // width + 1, c * ns // width end
    return lo, hi
  end
  local spare = width - ng
  local left, n, cols, order = spare, {}, {}, {}
  for k = 1, ng do
    local nk = (runs[k + 1] or ns + 1) - runs[k]
    n[k], cols[k] = nk, 1 + spare * nk // ns
    left = left - (cols[k] - 1)
    -- largest remainder first, the earlier run on a tie: one number each,
    -- sorted without a Lua comparator (k is the key modulo ng + 1)
    order[k] = -(spare * nk % ns) * (ng + 1) + k
  end
  table.sort(order)
  for i = 1, ng do order[i] = order[i] % (ng + 1) end
  while left > 0 do -- width <= ns: some run has a sample to spare
    for i = 1, ng do
      local k = order[i]
      if left > 0 and cols[k] < n[k] then cols[k], left = cols[k] + 1, left - 1 end
    end
  end
  local c = 0
  for k = 1, ng do
    local f, nk, ck = runs[k], n[k], cols[k]
    for x = 1, ck do
      c = c + 1
      lo[c], hi[c] = f + (x - 1) * nk // ck, f + x * nk // ck - 1
    end
  end
  return lo, hi
end

-- A text sparkline of live bytes, `width` columns, each the highest point
-- of its stretch of events; below it, one letter per column for the part
-- of the step that takes most of the column's events, and the legend.
function M.sparkline(tl, width)
  local live, at = tl.live, tl.at
  local ns = #live
  width = math.min(width or 64, ns)
  local top = tl.peak.live
  local cols, marks = {}, {}
  local parts = M.parts(tl)
  local np = #parts
  local letter = M.letters(parts)
  local los, his = columns(tl.runs, ns, width)
  local first = 1 -- the first part that may meet this column
  for c = 1, #los do
    local lo, hi = los[c], his[c]
    local m = -1
    for j = lo, hi do
      local v = live[j]
      if v > m then m = v end
    end
    local level = 1
    if top > 0 then
      level = (m * 8 + top - 1) // top
      if level > 8 then level = 8 elseif level < 1 then level = 1 end
    end
    cols[c] = BLOCKS[level]
    local a = lo > 1 and at[lo - 1] + 1 or 1
    local b = at[hi]
    -- the part holding most of events a..b, the first on a tie: the parts
    -- tile the events in order and the columns follow them, so only the
    -- parts from the one holding a to the one holding b can hold any (each
    -- column measured against every part cost the PPO step's text 4.0M of
    -- its 32M instructions)
    while parts[first].last < a do first = first + 1 end
    local most, name = -1, "?"
    for k = first, np do
      local p = parts[k]
      local pf, pl = p.first, p.last
      if pf > b then break end
      local o = (b < pl and b or pl) - (a > pf and a or pf)
      if o > most then most, name = o, p.name end
    end
    marks[c] = letter[name]
  end
  local legend, listed = {}, {}
  for k = 1, np do
    local name = parts[k].name
    if not listed[name] then -- (a letter is one name's)
      listed[name] = true
      legend[#legend + 1] = letter[name] .. "=" .. name
    end
  end
  return table.concat(cols), table.concat(marks), table.concat(legend, " ")
end

-- Lines for the terminal, under the breakdown.
function M.text(tl, width)
  local line, marks, legend = M.sparkline(tl, width)
  return {
    ("timeline (live tensors over %d allocator events; full height = the peak, %s%s):"):format(
      tl.events, vram.fmt(tl.peak.live, "GiB"), tl.skipped_decode and (("; %d decode "
      .. "steps not drawn: they cannot peak higher than the last"):format(tl.skipped_decode)) or ""),
    "  " .. line,
    "  " .. marks,
    "  " .. legend,
  }
end

return M
