-- GPU catalog: memory as nvidia-smi reports the total (MiB = 2^20 bytes).
-- Names are lower-case; aliases point at the canonical entry.
local MiB = require("vram").units.MiB
local G = {
  ["h100-80gb"] = { name = "NVIDIA H100 80GB HBM3", bytes = 81559 * MiB, kind = "cuda" },
  ["h200"] = { name = "NVIDIA H200", bytes = 143771 * MiB, kind = "cuda" },
  ["a100-80gb"] = { name = "NVIDIA A100 80GB", bytes = 81920 * MiB, kind = "cuda" },
  ["a100-40gb"] = { name = "NVIDIA A100 40GB", bytes = 40960 * MiB, kind = "cuda" },
  ["l40s"] = { name = "NVIDIA L40S", bytes = 46068 * MiB, kind = "cuda" },
  ["rtx4090"] = { name = "NVIDIA GeForce RTX 4090", bytes = 24564 * MiB, kind = "cuda" },
  ["rtx3090"] = { name = "NVIDIA GeForce RTX 3090", bytes = 24576 * MiB, kind = "cuda" },
  ["t4"] = { name = "NVIDIA T4", bytes = 15360 * MiB, kind = "cuda" },
  ["rtx3060-12gb"] = { name = "NVIDIA GeForce RTX 3060 12GB", bytes = 12288 * MiB, kind = "cuda" },
  ["m2-16gb"] = { name = "Apple M2 16 GB unified", bytes = 16 * 1024 * MiB, kind = "mps" },
  ["m3-max-128gb"] = { name = "Apple M3 Max 128 GB unified", bytes = 128 * 1024 * MiB,
    kind = "mps" },
  ["cpu"] = { name = "CPU only", bytes = 0, kind = "cpu" },
}
local ALIASES = { h100 = "h100-80gb", ["h100-sxm"] = "h100-80gb", ["h200-141gb"] = "h200",
  a100 = "a100-80gb", ["4090"] = "rtx4090", ["rtx-4090"] = "rtx4090" }

local M = {}

function M.find(name)
  if not name then return nil end
  local key = name:lower()
  key = ALIASES[key] or key
  local g = G[key]
  if g then return setmetatable({ id = key }, { __index = g }) end
end

-- The GPU called `name`, or an input error naming `field` with the known
-- names and the closest one.
function M.get(name, where, field)
  local g = M.find(name)
  if g then return g end
  local errors = require("stdlib.errors")
  local hint = type(name) == "string" and errors.suggest(name:lower(), M.names())
  errors.input(where, field, ("unknown GPU '%s'%s (known: %s)"):format(tostring(name),
    hint and ("; did you mean '" .. hint .. "'?") or "", table.concat(M.names(), ", ")))
end

function M.names()
  local out = {}
  for k in pairs(G) do out[#out + 1] = k end
  table.sort(out)
  return out
end

return M
