-- An estimate for an issue or a pull request: what the terminal shows
-- (breakdown, the three peaks and their assumptions, the verdict, the
-- timeline, the reconciliation with an observed figure) as Markdown, with
-- the run spec folded in below it so a reader can re-run it.
local vram = require("vram")
local report = require("stdlib.report")

local M = {}

-- A fence longer than any run of backticks in the text.
local function fenced(lang, text)
  local longest = 2
  for run in text:gmatch("`+") do longest = math.max(longest, #run) end
  local f = string.rep("`", longest + 1)
  return f .. lang .. "\n" .. text:gsub("\n$", "") .. "\n" .. f
end
M.fenced = fenced

-- o: { budget, title, timeline_lines, observed_lines, spec_text, spec_lang }
function M.estimate(o)
  local b = o.budget
  local out = { report.markdown(b, o.title), "" }
  if b.per_rank then -- a layout: the table above is the largest rank's
    local L = b.layout
    out[#out + 1] = ("Layout %s (world %d); the breakdown above is the largest rank's (ranks %s)."):
      format(require("stdlib.parallel").layout_name(L), L.world, b.largest_rank)
    out[#out + 1] = ""
    out[#out + 1] = "| rank role | ranks | peak (tensors allocated) | device total | host (offload) |"
    out[#out + 1] = "|---|---|---:|---:|---:|"
    for _, r in ipairs(b.per_rank) do
      out[#out + 1] = ("| %s | %s | %d B (%s) | %s | %s |"):format(r.role, r.ranks, r.peak_bytes,
        vram.fmt(r.peak_bytes, "GiB"), vram.fmt(r.device_total_bytes, "GiB"),
        vram.fmt(r.host_bytes, "GiB"))
    end
    out[#out + 1] = ""
  end
  out[#out + 1] = ("- reached in `%s`%s"):format(b.peak_phase,
    b.peak_op and (" at `" .. b.peak_op .. "`") or "")
  out[#out + 1] = ("- allocator reserved: %s; device total (with framework overhead): %s"):format(
    vram.fmt(b.reserved_bytes, "GiB"), vram.fmt(b.device_total_bytes, "GiB"))
  for _, a in ipairs(b.assumptions) do out[#out + 1] = "- assumption: " .. a end
  if b.gpu then
    out[#out + 1] = ("- **%s** on %s (%s): headroom %s"):format(
      b.fits and "FITS" or "DOES NOT FIT", b.gpu.name, vram.fmt(b.gpu.bytes, "GiB"),
      vram.fmt(b.headroom_bytes, "GiB"))
  end
  -- a block of terminal lines, under its heading when it has one
  local function block(lines, heading)
    if not lines then return end
    out[#out + 1] = ""
    if heading then out[#out + 1] = heading; out[#out + 1] = "" end
    out[#out + 1] = fenced("text", table.concat(lines, "\n"))
  end
  block(o.timeline_lines)
  block(o.observed_lines, "#### Observed vs estimated")
  if o.spec_text then
    out[#out + 1] = ""
    out[#out + 1] = "<details><summary>run spec</summary>"
    out[#out + 1] = ""
    out[#out + 1] = fenced(o.spec_lang or "", o.spec_text)
    out[#out + 1] = ""
    out[#out + 1] = "</details>"
  end
  return table.concat(out, "\n")
end

return M
