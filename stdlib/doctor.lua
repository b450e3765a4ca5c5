-- Seed 003's refusal matrix for VL training, plus the estimate itself: a
-- run is refused when the host class cannot train it at all, or when the
-- simulated device total does not fit.
local M = {}

local GiB = require("vram").units.GiB

-- Rules in order; each returns a reason when it refuses. `force` lifts the
-- ones marked overridable, never the CPU rule.
M.RULES = {
  { id = "cpu-only", overridable = false, check = function(gpu)
      if gpu.kind == "cpu" then
        return "CPU-only host: VL training is impractical (minutes per generation step)"
      end
    end },
  { id = "cuda-under-12gb", overridable = true, check = function(gpu)
      if gpu.kind == "cuda" and gpu.bytes < 12 * GiB then
        return ("CUDA device with %.1f GiB < 12 GiB: even LoRA at batch 1 runs out")
          :format(gpu.bytes / GiB)
      end
    end },
  { id = "mps-under-16gb", overridable = true, check = function(gpu)
      if gpu.kind == "mps" and gpu.bytes < 16 * GiB then
        return ("Apple unified memory %.1f GiB < 16 GiB"):format(gpu.bytes / GiB)
      end
    end },
  { id = "oversized-mps-base", overridable = true, check = function(gpu, weights)
      if gpu.kind == "mps" and weights > gpu.bytes // 2 then
        return ("base weights (%.1f GiB) take more than half of the unified memory")
          :format(weights / GiB)
      end
    end },
}

-- gpu: stdlib/gpus entry; weights: bytes of the base weights; need: the
-- simulated device total; usable: what the framework lets a step use there
-- (stdlib/frameworks.lua usable: Metal's working set on MPS), default the
-- whole device. Returns ok, list of {id, reason, overridable}.
function M.check(gpu, weights, need, force, usable)
  local out = {}
  local ok = true
  for _, r in ipairs(M.RULES) do
    local why = r.check(gpu, weights)
    if why then
      out[#out + 1] = { id = r.id, reason = why, overridable = r.overridable }
      if not (force and r.overridable) then ok = false end
    end
  end
  usable = usable or gpu.bytes
  if gpu.kind ~= "cpu" and need > usable then
    out[#out + 1] = { id = "does-not-fit", reason = ("needs %.2f GiB, the device lets a step use "
      .. "%.2f GiB of %.2f GiB"):format(need / GiB, usable / GiB, gpu.bytes / GiB),
      overridable = false }
    ok = false
  end
  return ok, out
end

return M
