-- A step's peaks put together from spans measured on a tape (tape:window)
-- instead of simulated again: a span that allocates and frees the same
-- tensors from a higher or lower start moves its peaks by that difference,
-- at the same moments, because live and reserved bytes are sums over the
-- tensors alive (each rounded on its own). Used where runs differ only in
-- allocations alive across spans: the optimizer's states
-- (stdlib/swap_optimizer.lua), a layout's model states
-- (stdlib/parallel.lua's lean searches).
local M = {}

-- What the tape saw since tape:window() (c0: its categories then), as
-- changes from that moment: the highest live and reserved bytes, each
-- category when live first peaked, and where each ended (net: only the
-- categories that moved; a span is added to peaks once per window and most
-- of the tape's categories stand still in it).
function M.delta(tape, c0)
  local w = tape:window_peaks()
  local live, reserved = tape:live()
  local c1, at, net = tape:live_by_category(), {}, {}
  local wat = w.at_peak
  for k, v in pairs(c0) do
    at[k] = wat[k] - v
    local d = c1[k] - v
    if d ~= 0 then net[k] = d end
  end
  return { peak = w.peak - w.start, rpeak = w.rpeak - w.rstart, at = at,
    live = live - w.start, reserved = reserved - w.rstart, net = net }
end

-- Peaks followed as the tape keeps them: live's first highest moment (with
-- its categories), reserved's highest. The state: live, reserved, cats
-- (bytes by category now), peak, rpeak, at (categories at the peak).
local Peaks = {}
Peaks.__index = Peaks
M.Peaks = Peaks

function M.peaks(state) return setmetatable(state, Peaks) end

-- a moment dl and dr bytes above now, the categories now plus dcats
function Peaks:moment(dl, dr, dcats)
  if self.live + dl > self.peak then
    local at = {}
    for k, v in pairs(self.cats) do at[k] = v + (dcats and dcats[k] or 0) end
    self.peak, self.at = self.live + dl, at
  end
  if self.reserved + dr > self.rpeak then self.rpeak = self.reserved + dr end
end

function Peaks:add(d) -- d: a delta, or a tensor's { live, reserved, cat }
  self.live, self.reserved = self.live + d.live, self.reserved + d.reserved
  if d.cat then self.cats[d.cat] = self.cats[d.cat] + d.live end
  local net = d.net
  if net then
    local cats = self.cats
    for k, v in pairs(net) do cats[k] = cats[k] + v end
  end
end

-- a measured span (M.delta) from where the state is now
function Peaks:window(d)
  self:moment(d.peak, d.rpeak, d.at)
  self:add(d)
end

return M
