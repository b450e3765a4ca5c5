-- Frameworks as data: what the stack a step runs on adds around the tensors
-- the simulator counts. One profile per file under stdlib/frameworks/,
-- chosen by run.framework; every figure here is read from a profile, never
-- from a branch on a framework's name elsewhere. A profile is a table:
--
--   name         the run.framework value
--   label        what the stack is, in words (printed)
--   allocator    block rounding of the tensor allocator, or nil (exact bytes):
--                { round = B, small_max = B, large_round = B } -- requests
--                over small_max get their own large_round-rounded segment
--   cpu_kernels  the CPU kernels' own buffers (stdlib/layers.lua) apply
--   context      bytes outside the allocator (driver context, workspaces)
--   prealloc     fraction of the device the framework takes at start-up and
--                allocates from (the step must fit that pool)
--   working_set  fraction of unified memory the device may keep resident
--                (Apple's recommendedMaxWorkingSetSize): the step must fit it
--   high_watermark_ratio  the allocator's hard limit, x the working set
--   device       the GPU kind (stdlib/gpus.lua) the profile runs on
--   fp8_linear   te.Linear's FP8 state (stdlib/layers.lua)
--   adam_step_bytes  bytes of each Adam step counter on the device (0: host)
--   assumptions  lines printed with every estimate on this framework
--   undisposed_temporaries  temporaries outlive their use unless disposed
--                (observed.lua names it as a cause of an excess)
--   libraries    the training libraries a `fit --knobs` lever may name on
--                this stack: sdpa (PyTorch's scaled_dot_product_attention,
--                in libtorch), deepspeed, fsdp, bitsandbytes, liger (Triton
--                kernels, CUDA only); levers that need none are offered anywhere
local errors = require("stdlib.errors")

local M = {}

M.NAMES = { "pytorch", "pytorch-cpu", "jax", "torchsharp", "mps", "te-fp8" }
M.DEFAULT = "pytorch"      -- a run spec that names none
M.EXACT = "pytorch-cpu"    -- a compiled estimate's probes: exact bytes

local FILES = { pytorch = "pytorch", ["pytorch-cpu"] = "pytorch_cpu", jax = "jax",
  torchsharp = "torchsharp", mps = "mps", ["te-fp8"] = "te_fp8" }

local cache = {}

-- The profile called name; an unknown name is an error naming the known ones.
function M.get(name)
  local p = cache[name]
  if p then return p end
  local file = FILES[name]
  if not file then
    errors.input(nil, "run.framework", ("unknown framework '%s' (known: %s)")
      :format(tostring(name), table.concat(M.NAMES, ", ")))
  end
  p = require("stdlib.frameworks." .. file)
  cache[name] = p
  return p
end

-- The profile of a run (stdlib/run.lua gives every run its framework).
function M.of(run) return M.get(run.framework) end

-- Bytes of the device the step may allocate from: the whole device, or the
-- pool a preallocating framework takes (run.xla.mem_fraction overrides the
-- profile's fraction: stdlib/xla.lua).
function M.usable(p, gpu, run)
  local f = p.prealloc and (run and run.xla and run.xla.mem_fraction or p.prealloc)
    or p.working_set
  return f and math.floor(gpu.bytes * f) or gpu.bytes
end

-- Lines a budget prints about this framework on this device: the profile's
-- assumptions, the pool it sizes, and a warning when the device is of
-- another kind than the profile runs on.
function M.notes(p, gpu)
  local out = {}
  for i, a in ipairs(p.assumptions) do out[i] = a end
  if gpu and p.working_set then
    local ws = M.usable(p, gpu)
    out[#out + 1] = ("%s: working set %.2f GiB of %.2f GiB unified; hard limit %.2f GiB")
      :format(gpu.name, ws / (1 << 30), gpu.bytes / (1 << 30),
        ws * p.high_watermark_ratio / (1 << 30))
  end
  if gpu and p.device and gpu.kind ~= p.device then
    out[#out + 1] = ("WARNING: framework %s runs on %s devices, not on %s (%s)")
      :format(p.name, p.device, gpu.name, gpu.kind)
  end
  return out
end

-- Bytes the run needs on the device beyond the pool's own size: the
-- allocator's reserved peak plus what the framework keeps outside it.
function M.need(p, reserved) return reserved + (p.context or 0) end

-- What the device shows in use (nvidia-smi): the need, or the whole pool
-- when the framework preallocates one and the step fits inside it.
function M.device_total(p, st, gpu, run)
  local grows = run and run.xla and run.xla.preallocate == false -- allocates on demand
  if gpu and p.prealloc and not grows then return math.max(st.peak, M.usable(p, gpu, run)) end
  return M.need(p, st.peak_reserved)
end

return M
