-- One self-contained HTML page per report: inline SVG and CSS, no script,
-- nothing fetched. `page` draws a step's memory timeline (stacked by
-- category, the step's parts shaded, the peak annotated with what is live)
-- above the breakdown table; `bars` draws one bar per configuration (sweep,
-- fit --knobs) against the GPU.
local vram = require("vram")
local report = require("stdlib.report")
local timeline = require("stdlib.timeline")
local errors = require("stdlib.errors")

local M = {}

-- One colour per category, in report order (colour-blind-safe palette
-- first, then greys for the small ones).
M.COLORS = {
  weights = "#4477aa", master_weights = "#66ccee", gradients = "#228833",
  optimizer_state = "#ccbb44", activations = "#ee6677", logits_loss = "#aa3377",
  temporaries = "#ff9f40", kv_cache = "#117733", inputs = "#999999", buffers = "#bbbbbb",
  overhead = "#dddddd",
}

local function esc(s)
  return (tostring(s):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;",
    ['"'] = "&quot;" }))
end
M.escape = esc

local function gib(b) return vram.fmt(b, "GiB") end

local STYLE = [[
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1060px}
h1{font-size:20px;margin:0 0 8px} h2{font-size:16px;margin:24px 0 8px}
table{border-collapse:collapse} td,th{padding:3px 10px;border-bottom:1px solid #ddd}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.fit{color:#1a7f37;font-weight:600} .nofit{color:#c62828;font-weight:600}
.sw{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:middle}
svg text{font:12px system-ui,sans-serif;fill:#333} .note{color:#555;font-size:13px}
details{margin-top:16px} pre{white-space:pre-wrap;font-size:12px}]]

local function head(title)
  return { "<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
    "<title>" .. esc(title) .. "</title><style>" .. STYLE .. "</style></head><body>",
    "<h1>" .. esc(title) .. "</h1>" }
end

-- Round axis steps: 1, 2, 5 x 10^k GiB, about five of them.
local function step_gib(top)
  local raw = top / (1 << 30) / 5
  local p = 10 ^ math.floor(math.log(raw > 0 and raw or 1, 10))
  for _, m in ipairs({ 1, 2, 5, 10 }) do
    if raw <= m * p then return m * p end
  end
  return 10 * p
end

local function yaxis(out, top, x0, x1, y0, y1)
  local s = step_gib(top)
  local v = 0
  while v * (1 << 30) <= top * 1.0001 do
    local y = y1 - (v * (1 << 30)) / top * (y1 - y0)
    out[#out + 1] = ('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e4e4e4"/>'):format(
      x0, x1, y, y)
    out[#out + 1] = ('<text x="%d" y="%.1f" text-anchor="end">%g GiB</text>'):format(
      x0 - 6, y + 4, v)
    v = v + s
  end
end

local PART_FILL = { recompute = "#fde2c8" }

-- Event index -> x. Each phase gets its share of the events but at least
-- MIN_PART of the width, so that a short forward (composed layers are one
-- event each) stays visible and named; within a phase the scale is linear.
M.MIN_PART = 0.12
-- The step's phases, each one contiguous stretch (recomputation inside
-- backward stays backward here).
local function phases_of(tl)
  local phases = {}
  for _, s in ipairs(tl.spans) do
    local p = phases[#phases]
    if p and p.phase == s.phase then p.last = s.last
    else phases[#phases + 1] = { phase = s.phase, first = s.first, last = s.last } end
  end
  return phases
end

function M.xscale(tl, x0, x1)
  local phases = phases_of(tl)
  local n, total = tl.events, 0
  for _, p in ipairs(phases) do
    p.w = math.max((p.last - p.first + 1) / n, M.MIN_PART)
    total = total + p.w
  end
  local at = x0
  for _, p in ipairs(phases) do
    p.x = at
    p.w = p.w / total * (x1 - x0)
    at = at + p.w
  end
  return function(i)
    local lo, hi = 1, #phases
    while lo < hi do -- the phase holding event i
      local mid = (lo + hi + 1) // 2
      if phases[mid].first <= i then lo = mid else hi = mid - 1 end
    end
    local p = phases[lo]
    local len = p.last - p.first + 1
    return p.x + (i - p.first + (len == 1 and 0.5 or 0)) / (len > 1 and len - 1 or 1) * p.w
  end
end

-- The timeline as SVG: width w, height h (pixels).
function M.timeline_svg(tl, w, h)
  w, h = w or 1000, h or 420
  local x0, x1, y0, y1 = 70, w - 250, 40, h - 50
  local n, top = tl.events, tl.peak.live
  local X = M.xscale(tl, x0, x1)
  local function Y(b) return y1 - (top > 0 and b / top or 0) * (y1 - y0) end
  local out = { ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
    .. 'viewBox="0 0 %d %d" role="img" aria-label="memory timeline">'):format(w, h, w, h) }
  -- the phases as alternating bands, named where there is room, and the
  -- recomputations inside backward over them
  for k, p in ipairs(phases_of(tl)) do
    local a, b = X(p.first), X(p.last)
    out[#out + 1] = ('<rect class="part" data-part="%s" x="%.1f" y="%d" width="%.1f" '
      .. 'height="%d" fill="%s"><title>%s</title></rect>'):format(esc(p.phase), a, y0,
      math.max(b - a, 0.5), y1 - y0, k % 2 == 1 and "#f4f6fa" or "#ffffff", esc(p.phase))
    out[#out + 1] = ('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#c8cdd8"/>'):format(
      a, a, y0 - 4, y1)
    if b - a >= 6 * #p.phase then
      out[#out + 1] = ('<text x="%.1f" y="%d" text-anchor="middle" font-size="11">%s</text>'):format(
        (a + b) / 2, y0 - 8, esc(p.phase))
    end
  end
  for _, p in ipairs(timeline.parts(tl)) do
    if p.name == "recompute" then
      local a, b = X(p.first), X(p.last)
      out[#out + 1] = ('<rect class="part" data-part="recompute" x="%.1f" y="%d" width="%.1f" '
        .. 'height="%d" fill="%s"><title>recompute</title></rect>'):format(a, y0,
        math.max(b - a, 0.5), y1 - y0, PART_FILL.recompute)
    end
  end
  yaxis(out, top, x0, x1, y0, y1)
  -- stacked areas, bottom up in report order
  local below = {}
  for j = 1, #tl.samples do below[j] = 0 end
  for _, cat in ipairs(report.ORDER) do
    local any = false
    for _, s in ipairs(tl.samples) do if (s.by[cat] or 0) ~= 0 then any = true end end
    if any then
      local up, down = {}, {}
      for j, s in ipairs(tl.samples) do
        local lo = below[j]
        local hi = lo + (s.by[cat] or 0)
        up[#up + 1] = ("%.1f,%.1f"):format(X(s.i), Y(hi))
        down[#down + 1] = ("%.1f,%.1f"):format(X(s.i), Y(lo))
        below[j] = hi
      end
      local rev = {}
      for k = #down, 1, -1 do rev[#rev + 1] = down[k] end
      out[#out + 1] = ('<polygon class="area" data-category="%s" fill="%s" stroke="none" '
        .. 'points="%s %s"><title>%s</title></polygon>'):format(cat, M.COLORS[cat] or "#888",
        table.concat(up, " "), table.concat(rev, " "), cat)
    end
  end
  out[#out + 1] = ('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#333"/>'):format(x0, x1, y1, y1)
  out[#out + 1] = ('<text x="%.1f" y="%d" text-anchor="middle">allocator events in step order '
    .. '(%d in all; each phase at least %d%% of the width); height: live tensors</text>'):format((x0 + x1) / 2, y1 + 30, n,
    math.floor(M.MIN_PART * 100))
  -- the peak and what is live at that moment
  local pk = tl.peak
  local px, py = X(pk.i), Y(pk.live)
  out[#out + 1] = ('<line id="peak-line" x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#000" '
    .. 'stroke-dasharray="4 3"/>'):format(px, px, y0, y1)
  out[#out + 1] = ('<circle cx="%.1f" cy="%.1f" r="4" fill="#000"/>'):format(px, py)
  local bx = x1 + 16
  local lines = { ("peak %s"):format(gib(pk.live)),
    ("in %s%s"):format(pk.phase, pk.op and (" at " .. pk.op) or ""), "live at the peak:" }
  for _, cat in ipairs(report.ORDER) do
    local v = pk.by[cat] or 0
    if v ~= 0 then lines[#lines + 1] = { cat, ("%s %s"):format(cat, gib(v)) } end
  end
  out[#out + 1] = ('<g id="peak-note"><rect x="%d" y="%d" width="%d" height="%d" fill="#fff" '
    .. 'stroke="#999"/>'):format(bx - 6, y0, w - bx - 4, 18 * #lines + 10)
  out[#out + 1] = ('<line x1="%.1f" y1="%.1f" x2="%d" y2="%d" stroke="#999"/>'):format(px, py,
    bx - 6, y0 + 14)
  for k, l in ipairs(lines) do
    local y = y0 + 18 * k
    if type(l) == "table" then
      out[#out + 1] = ('<rect x="%d" y="%d" width="10" height="10" fill="%s"/>'):format(bx,
        y - 9, M.COLORS[l[1]] or "#888")
      out[#out + 1] = ('<text x="%d" y="%d">%s</text>'):format(bx + 16, y, esc(l[2]))
    else
      out[#out + 1] = ('<text x="%d" y="%d"%s>%s</text>'):format(bx, y,
        k == 1 and ' font-weight="bold"' or "", esc(l))
    end
  end
  out[#out + 1] = "</g></svg>"
  return table.concat(out, "\n")
end

local function breakdown_table(b)
  local out = { "<table id=\"breakdown\"><tr><th>component</th><th class=\"n\">bytes</th>"
    .. "<th class=\"n\">GiB</th><th class=\"n\">share</th></tr>" }
  for _, it in ipairs(b.breakdown) do
    out[#out + 1] = ('<tr><td><span class="sw" style="background:%s"></span>%s</td>'
      .. '<td class="n">%d</td><td class="n">%.3f</td><td class="n">%.1f%%</td></tr>'):format(
      M.COLORS[it.category] or "#888", esc(it.category), it.bytes, it.bytes / (1 << 30),
      it.bytes / b.peak_bytes * 100)
  end
  out[#out + 1] = ('<tr><th>peak (tensors allocated)</th><th class="n">%d</th>'
    .. '<th class="n">%.3f</th><th class="n">100%%</th></tr></table>'):format(b.peak_bytes,
    b.peak_bytes / (1 << 30))
  return table.concat(out, "\n")
end

local function summary(b)
  local out = {}
  out[#out + 1] = ("<p>Peak of tensors allocated: <b>%s</b> (%s, %d B), reached in <b>%s</b>%s."
    .. "<br>Allocator reserved: %s; device total with framework overhead: %s.</p>"):format(
    gib(b.peak_bytes), vram.fmt(b.peak_bytes, "GB"), b.peak_bytes, esc(b.peak_phase),
    b.peak_op and (" at <code>" .. esc(b.peak_op) .. "</code>") or "", gib(b.reserved_bytes),
    gib(b.device_total_bytes))
  if b.gpu then
    out[#out + 1] = ('<p class="%s">%s on %s (%s): headroom %s</p>'):format(
      b.fits and "fit" or "nofit", b.fits and "FITS" or "DOES NOT FIT", esc(b.gpu.name),
      gib(b.gpu.bytes), gib(b.headroom_bytes))
  end
  local as = {}
  for _, a in ipairs(b.assumptions) do as[#as + 1] = "<li>" .. esc(a) .. "</li>" end
  out[#out + 1] = '<ul class="note">' .. table.concat(as) .. "</ul>"
  return table.concat(out, "\n")
end

-- The page for one estimate. b: report.budget; tl: the step's timeline;
-- extra: more HTML (already escaped) appended at the end, or nil.
function M.page(title, b, tl, extra)
  local out = head(title)
  out[#out + 1] = summary(b)
  if tl then
    out[#out + 1] = "<h2>Memory timeline" .. (b.largest_rank and
      (" of the largest rank (ranks " .. esc(b.largest_rank) .. ")") or "") .. "</h2>"
    out[#out + 1] = M.timeline_svg(tl)
    local leg = {}
    for _, cat in ipairs(report.ORDER) do
      if (tl.peak.by[cat] or 0) ~= 0 then
        leg[#leg + 1] = ('<span><span class="sw" style="background:%s"></span>%s</span>')
          :format(M.COLORS[cat], cat)
      end
    end
    out[#out + 1] = '<p class="legend">' .. table.concat(leg, " &nbsp; ")
      .. ' &nbsp; <span class="sw" style="background:#fde2c8"></span>recompute (shaded)</p>'
  end
  out[#out + 1] = "<h2>Breakdown at the peak</h2>"
  out[#out + 1] = breakdown_table(b)
  if extra then out[#out + 1] = extra end
  out[#out + 1] = "</body></html>"
  return table.concat(out, "\n") .. "\n"
end

-- One bar per configuration. items: { {label, bytes, by = {cat = bytes}|nil} };
-- budget: the GPU's bytes or nil; what: the measure's name.
function M.bars(title, items, budget, what, gpu_name)
  local out = head(title)
  local top = budget or 0
  for _, it in ipairs(items) do top = math.max(top, it.bytes) end
  if top == 0 then top = 1 end
  local row, w = 40, 1000
  local x0, x1 = 20, w - 120
  local h = row * #items + 70
  local svg = { ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
    .. 'viewBox="0 0 %d %d" role="img" aria-label="%s">'):format(w, h, w, h, esc(what)) }
  local function X(b) return x0 + b / top * (x1 - x0) end
  local bh = row - 22 -- the label above, the bar below it
  for k, it in ipairs(items) do
    local y = 20 + (k - 1) * row
    svg[#svg + 1] = ('<g class="cfg"><text x="%d" y="%d">%s</text>'):format(x0, y + 12,
      esc(it.label))
    y = y + 16
    if it.by then
      local at = 0
      for _, cat in ipairs(report.ORDER) do
        local v = it.by[cat] or 0
        if v > 0 then
          svg[#svg + 1] = ('<rect class="bar" x="%.1f" y="%d" width="%.1f" height="%d" '
            .. 'fill="%s"><title>%s %s</title></rect>'):format(X(at), y, X(at + v) - X(at),
            bh, M.COLORS[cat] or "#888", cat, gib(v))
          at = at + v
        end
      end
      if it.bytes > at then -- what the breakdown does not hold (reserved, context)
        svg[#svg + 1] = ('<rect class="bar" x="%.1f" y="%d" width="%.1f" height="%d" '
          .. 'fill="#e0e0e0"><title>allocator rounding and framework overhead</title></rect>')
          :format(X(at), y, X(it.bytes) - X(at), bh)
      end
    else
      svg[#svg + 1] = ('<rect class="bar" x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>')
        :format(x0, y, X(it.bytes) - x0, bh,
          (budget and it.bytes > budget) and "#c62828" or "#4477aa")
    end
    svg[#svg + 1] = ('<text x="%.1f" y="%d">%s</text></g>'):format(X(it.bytes) + 6, y + bh - 4,
      gib(it.bytes))
  end
  local yb = 20 + #items * row
  if budget then
    svg[#svg + 1] = ('<line id="budget" x1="%.1f" x2="%.1f" y1="10" y2="%d" stroke="#c62828" '
      .. 'stroke-dasharray="5 3"/><text x="%.1f" y="%d" fill="#c62828" text-anchor="end">%s %s'
      .. '</text>'):format(
      X(budget), X(budget), yb, X(budget), yb + 16, esc(gpu_name or "GPU"), gib(budget))
  end
  svg[#svg + 1] = ('<text x="%d" y="%d">%s</text></svg>'):format(x0, yb + 36, esc(what))
  out[#out + 1] = table.concat(svg, "\n")
  local seen, leg = {}, {}
  for _, it in ipairs(items) do
    for cat, v in pairs(it.by or {}) do if v > 0 then seen[cat] = true end end
  end
  for _, cat in ipairs(report.ORDER) do
    if seen[cat] then
      leg[#leg + 1] = ('<span><span class="sw" style="background:%s"></span>%s</span>')
        :format(M.COLORS[cat], cat)
    end
  end
  if #leg > 0 then
    leg[#leg + 1] = '<span><span class="sw" style="background:#e0e0e0"></span>allocator rounding '
      .. "and framework context</span>"
    out[#out + 1] = '<p class="legend">' .. table.concat(leg, " &nbsp; ") .. "</p>"
  end
  out[#out + 1] = "<table id=\"configurations\"><tr><th>configuration</th>"
    .. "<th class=\"n\">bytes</th><th class=\"n\">GiB</th></tr>"
  for _, it in ipairs(items) do
    out[#out + 1] = ('<tr><td>%s</td><td class="n">%d</td><td class="n">%.3f</td></tr>')
      :format(esc(it.label), it.bytes, it.bytes / (1 << 30))
  end
  out[#out + 1] = "</table></body></html>"
  return table.concat(out, "\n") .. "\n"
end

-- A titled block of preformatted lines (the terminal's own text).
function M.section(title, lines)
  return "<h2>" .. esc(title) .. "</h2>\n<pre>" .. esc(table.concat(lines, "\n")) .. "</pre>"
end

-- Writes a page where the user asked (`option` names the flag in errors).
function M.write(path, page, option)
  local ok, err = pcall(vram.write_file, path, page)
  if not ok then errors.input(nil, option or "--html", tostring(err)) end
end

return M
