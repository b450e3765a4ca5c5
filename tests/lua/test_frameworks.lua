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

local spec = require("stdlib.spec")
local step = require("stdlib.step")
local vram = require("vram")
local GiB = 1 << 30

local function run_of(fields, preset, over)
  local r = { mode = "train", batch = 2, seq = 16, precision = { params = "bf16" },
    optimizer = { name = "adam" }, framework = "pytorch", attention = "sdpa" }
  for k, v in pairs(fields or {}) do r[k] = v end
  local o = { num_hidden_layers = 2 }
  for k, v in pairs(over or {}) do o[k] = v end
  return spec.normalize({ model = { preset = preset or "qwen2_5_1_5b_instruct", overrides = o },
    run = r }, vram.share_dir .. "/tests/lua/spec.yaml", require("models.registry"))
end

-- Apple MPS: no context; the step must fit 75 % of unified memory (the
-- working set), here 16 GiB x 3/4 = 12 GiB on the 16 GB M2.
function tests.mps_fits_against_three_quarters_of_unified_memory()
  local pool = 12 * GiB
  local fake = { peak = pool, peak_reserved = pool, at_peak = {}, phase_peaks = {} }
  local b = report.budget(fake, { framework = "mps" }, "m2-16gb")
  T.ok(b.fits, "exactly the working set fits")
  T.eq(b.device_total_bytes, pool, "no CUDA context on MPS")
  T.eq(b.headroom_bytes, 0)
  fake.peak, fake.peak_reserved = pool + 1, pool + 1
  T.ok(not report.budget(fake, { framework = "mps" }, "m2-16gb").fits, "one byte more does not")
  local notes = table.concat(b.assumptions, "\n")
  -- the hard limit: PYTORCH_MPS_HIGH_WATERMARK_RATIO 1.7 x 12 GiB = 20.40 GiB
  T.ok(notes:find("hard limit 20.40 GiB", 1, true), notes)
  local cuda = report.budget(fake, { framework = "mps" }, "h100-80gb")
  T.ok(table.concat(cuda.assumptions, "\n"):find("WARNING: framework mps runs on mps devices",
    1, true), "an MPS run on a CUDA device is flagged")
end

-- Metal heap buffers: every tensor a multiple of 16 KiB under the MPS profile.
function tests.mps_tensors_are_whole_16_kib_blocks()
  local st = step.run(run_of({ framework = "mps" }))
  T.ok(st.at_peak.inputs > 0)
  T.eq(st.at_peak.inputs % 16384, 0, "inputs rounded to 16 KiB")
end

-- TorchSharp without Dispose: with k steps' optimizer temporaries alive the
-- peak (the optimizer step) grows by (k - 1) x 2 x the parameters' bytes
-- (sqrt and denom per parameter, as the weights category holds them).
function tests.undisposed_steps_add_two_parameter_copies_per_earlier_step()
  local one = step.run(run_of({ framework = "torchsharp", undisposed_steps = 1 }))
  local three = step.run(run_of({ framework = "torchsharp", undisposed_steps = 3 }))
  T.eq(one.peak_phase, "optimizer")
  T.eq(three.peak - one.peak, 2 * 2 * one.at_peak.weights)
  T.raises(function() run_of({ undisposed_steps = 2 }) end, "only TorchSharp")
end

-- TransformerEngine: per te.Linear, fp32 scale[3] + amax_history[len, 3]
-- forward and scale[2] + amax_history[len, 2] backward, each its own 512 B
-- block on CUDA: with len 16, 4 x 512 B; 7 te.Linear per layer, 2 layers.
function tests.te_fp8_keeps_delayed_scaling_state_per_linear()
  local te = step.run(run_of({ framework = "te-fp8", fp8 = { amax_history_len = 16 } }))
  local base = step.run(run_of({}))
  T.eq(te.at_peak.buffers - base.at_peak.buffers, 2 * 7 * 4 * 512)
  -- amax_history_len 1024: 3 x 1024 x 4 = 12288 B and 2 x 1024 x 4 = 8192 B, scales 512 each
  local long = step.run(run_of({ framework = "te-fp8" }))
  T.eq(long.at_peak.buffers - base.at_peak.buffers, 2 * 7 * (12288 + 8192 + 2 * 512))
  T.raises(function() run_of({ fp8 = { amax_history_len = 16 } }) end, "needs run.framework te-fp8")
end

-- Yxanul's FP8 model file has its own bf16 lm_head: 768 x 200005 more
-- parameters than the tied factorized model's 196,398,464.
function tests.an_untied_factorized_head_is_its_own_linear()
  local over = { num_hidden_layers = 28 }
  local tied = step.run(run_of({ mode = "inference", optimizer = "none", batch = 1, seq = 4 },
    "yxanul_197m", over))
  over.tie_word_embeddings = false
  local untied = step.run(run_of({ mode = "inference", optimizer = "none", batch = 1, seq = 4 },
    "yxanul_197m", over))
  T.eq(tied.param_count, 196398464)
  T.eq(untied.param_count, 196398464 + 768 * 200005)
end

return tests
