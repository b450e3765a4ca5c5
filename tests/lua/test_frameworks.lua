-- Frameworks as data (stdlib/frameworks/): every profile complete, and the
-- figures a budget reads from one computed here from the profile's sources.
local frameworks = require("stdlib.frameworks")
local report = require("stdlib.report")
local gpus = require("stdlib.gpus")
local MiB = 1 << 20

local tests = {}

function tests.every_named_framework_has_a_complete_profile()
  for _, name in ipairs(frameworks.NAMES) do
    local p = frameworks.get(name)
    T.eq(p.name, name)
    T.ok(type(p.label) == "string", name .. ": label")
    T.ok(type(p.assumptions) == "table" and #p.assumptions >= 1, name .. ": assumptions printed")
    T.int(p.adam_step_bytes, name .. ": adam_step_bytes")
    if p.allocator then
      T.int(p.allocator.round, name .. ": round")
      T.int(p.allocator.large_round, name .. ": large_round")
    end
  end
end

function tests.an_unknown_framework_is_an_error_naming_the_known_ones()
  T.raises(function() frameworks.get("tensorflow") end, "unknown framework 'tensorflow'")
  T.raises(function() frameworks.get("tensorflow") end, "pytorch-cpu")
end

-- CUDA's caching allocator: 512 B blocks, 2 MiB segments over 10 MiB
-- (c10/cuda/CUDACachingAllocator.cpp kMinBlockSize, kLargeBuffer, kRoundLarge).
function tests.pytorch_on_cuda_rounds_like_the_caching_allocator()
  local a = frameworks.get("pytorch").allocator
  T.eq(a.round, 512)
  T.eq(a.small_max, 10 * MiB)
  T.eq(a.large_round, 2 * MiB)
  T.eq(frameworks.get("pytorch-cpu").allocator, nil, "the CPU counts exact bytes")
end

-- The device total on CUDA: reserved plus the 500 MiB context.
function tests.a_cuda_budget_adds_the_context_to_the_reserved_peak()
  local fake = { peak = 1000, peak_reserved = 2048, at_peak = {}, phase_peaks = {} }
  local b = report.budget(fake, { framework = "pytorch" }, "h100-80gb")
  T.eq(b.device_total_bytes, 2048 + 500 * MiB)
  T.eq(b.headroom_bytes, 81559 * MiB - 2048 - 500 * MiB)
  T.eq(b.assumptions[1], "CUDA context + cuBLAS workspace ~500 MiB (assumed)")
  local cpu = report.budget(fake, { framework = "pytorch-cpu" }, nil)
  T.eq(cpu.device_total_bytes, 2048)
end

function tests.usable_bytes_are_the_pool_of_a_preallocating_framework()
  local h100 = gpus.find("h100-80gb")
  T.eq(frameworks.usable(frameworks.get("pytorch"), h100), 81559 * MiB)
  T.eq(frameworks.usable(frameworks.get("jax"), h100), 81559 * MiB * 3 // 4)
end

return tests
