-- The JAX/XLA profile's rules (stdlib/frameworks/jax.lua, stdlib/xla.lua):
-- BFC rounding, the fused loss, donation, the pool's fraction, and
-- memory_analysis()'s terms. Every expected figure is arithmetic written
-- here from the rule it checks.
local vram = require("vram")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local loss = require("stdlib.loss")
local report = require("stdlib.report")
local gpus = require("stdlib.gpus")

local tests = {}

local function run_of(fields)
  local r = { mode = "train", batch = 1, seq = 16, precision = { params = "bf16" },
    optimizer = { name = "adamw", state_dtype = "fp32" }, framework = "jax" }
  for k, v in pairs(fields or {}) do r[k] = v end
  return spec.normalize({ model = { preset = "qwen2_5_1_5b_instruct",
    overrides = { num_hidden_layers = 1 } }, run = r }, vram.share_dir .. "/tests/lua/spec.yaml",
    require("models.registry"))
end

-- xla/tsl/framework/bfc_allocator.h: kMinAllocationSize = 1 << 8
function tests.the_bfc_allocator_rounds_every_buffer_to_256_bytes()
  local S = step.new_sim({ framework = "jax" })
  T.eq(S:new_tensor(257, "fp32", "x", false).b, 1280, "1028 B -> 5 x 256")
  T.eq(S:new_tensor(64, "fp32", "x", false).b, 256, "256 B stays")
  local P = step.new_sim({ framework = "pytorch" })
  T.eq(P:new_tensor(257, "fp32", "x", false).b, 1536, "CUDA: 3 x 512")
end

-- log_softmax x one_hot (or a gather) fuses into row reductions: what is
-- left at the backward is the head's weight, the fp32 logits kept as the
-- residual and one gradient of them, plus the scalar loss and its seed
-- gradient (one 256 B block each). Eager PyTorch keeps far more.
function tests.a_jitted_loss_keeps_the_logits_and_one_gradient_of_them()
  local B, Tn, V = 2, 64, 1024
  local n = B * Tn * V
  local function peak(fw, impl)
    local S = step.new_sim({ framework = fw })
    local w = S:param(n, "fp32", true, "w")
    local logits = S:op("head", n, "fp32", { w }, {}, { { w } })
    local l = loss.causal_lm(S, logits, { batch = B, seq = Tn, impl = impl })
    S:drop(logits)
    S.tape:backward(l.id)
    return S.tape:stats().peak
  end
  T.eq(peak("jax", "one_hot"), 3 * n * 4 + 2 * 256)
  T.eq(peak("jax", "cross_entropy"), 3 * n * 4 + 2 * 256, "take_along_axis: the same fusion")
  T.ok(peak("pytorch-cpu", "one_hot") > 6 * n * 4, "eager one_hot: several B x T x V buffers")
end

-- Qwen2.5-1.5B's dimensions are multiples of 128 elements, so every bf16
-- parameter and fp32 state fills whole 256 B blocks: new parameters (2 B)
-- and AdamW's two fp32 states (8 B) are 10 B per parameter.
function tests.without_donation_the_new_state_coexists_with_the_old()
  local plain = step.run(run_of())
  local donated = step.run(run_of({ xla = { donate = true } }))
  local n = plain.param_count
  T.eq(plain.xla.state, n * 10)
  T.eq(plain.peak - donated.peak, n * 10)
  local t = require("stdlib.xla").terms(plain)
  T.eq(t.arguments + t.outputs - t.alias + t.temp, plain.peak)
  T.eq(t.arguments, plain.baseline, "arguments: what is live when the step is called")
  T.eq(require("stdlib.xla").terms(donated).alias, n * 10, "donated: outputs alias")
end

-- The pool: XLA_PYTHON_CLIENT_MEM_FRACTION of the device's total memory.
function tests.the_pool_is_the_fraction_of_the_device_and_a_run_can_raise_it()
  local h100 = gpus.find("h100-80gb")
  local st = { peak = 1 << 30, peak_reserved = 1 << 30, at_peak = {}, phase_peaks = {} }
  local b = report.budget(st, run_of(), "h100-80gb")
  T.eq(b.headroom_bytes, h100.bytes * 3 // 4 - (1 << 30))
  local b95 = report.budget(st, run_of({ xla = { mem_fraction = 0.95 } }), "h100-80gb")
  T.eq(b95.headroom_bytes, math.floor(h100.bytes * 0.95) - (1 << 30))
  T.eq(b95.device_total_bytes, math.floor(h100.bytes * 0.95), "nvidia-smi shows the pool")
  local grow = report.budget(st, run_of({ xla = { preallocate = false } }), "h100-80gb")
  T.eq(grow.device_total_bytes, 1 << 30, "PREALLOCATE=false: what was allocated")
  T.eq(grow.headroom_bytes, b.headroom_bytes, "the fraction still caps the BFC allocator")
end

function tests.a_jitted_budget_says_how_it_recomputes_and_donates()
  local st = { peak = 1 << 30, peak_reserved = 1 << 30, at_peak = {}, phase_peaks = {} }
  local text = table.concat(report.budget(st, run_of({ grad_checkpointing = "full" }),
    "h100-80gb").assumptions, "\n")
  T.ok(text:find("jax.checkpoint(policy=nothing_saveable)", 1, true) ~= nil, text)
  T.ok(text:find("jit without donate_argnums", 1, true) ~= nil, text)
  local plain = table.concat(report.budget(st, run_of(), "h100-80gb").assumptions, "\n")
  T.ok(plain:find("jax.checkpoint", 1, true) == nil, "no recompute, no remat line")
end

function tests.xla_settings_are_checked()
  T.raises(function() run_of({ framework = "pytorch", xla = { donate = true } }) end,
    "applies to a jitted framework")
  T.raises(function() run_of({ xla = { mem_fraction = 1.5 } }) end, "must be in (0, 1]")
  T.raises(function() run_of({ xla = { donated = true } }) end, "run.xla.donated")
end

return tests
