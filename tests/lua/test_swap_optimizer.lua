-- A training step priced under another optimizer from a recorded step
-- (stdlib/swap_optimizer.lua) gives what simulating the step under that
-- optimizer gives, to the byte: the allocated and reserved peaks, every
-- category at the peak and the paged states. Each case below is simulated
-- under one optimizer and priced under all the others; the peak falls in
-- the load (a transient of the fp32 checkpoint), the forward, the backward
-- and the optimizer step across them, and the cases cover micro-batches,
-- checkpointing, LoRA, QLoRA, master weights, MoE, a VLM, the fused and
-- chunked losses, CPU kernels (no block rounding) and TorchSharp's
-- undisposed Adam temporaries. A step recorded lean (without its own
-- optimizer) prices every optimizer, its own included, the same.
local vram = require("vram")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local runs = require("stdlib.run")
local swap = require("stdlib.swap_optimizer")
local registry = require("models.registry")

local where = vram.share_dir .. "/tests/lua/spec.yaml"

local function run_of(preset, over, fields, opt)
  local r = { batch = 2, seq = 16, precision = { params = "bf16" }, framework = "pytorch",
    mode = "train", optimizer = opt }
  for k, v in pairs(fields) do r[k] = v end
  return spec.normalize({ model = { preset = preset, overrides = over }, run = r }, where,
    registry)
end

local OPTIMIZERS = {
  { name = "adamw" }, { name = "adamw", foreach = false }, { name = "adamw", foreach = true },
  { name = "adamw", foreach = "torch2" }, { name = "adam", weight_decay = 0.1 },
  { name = "adam", weight_decay = 0.1, foreach = "torch2" },
  { name = "adam", weight_decay = 0.1, foreach = true }, { name = "sgd" },
  { name = "sgd", weight_decay = 0.01, foreach = true }, { name = "sgd_momentum",
    weight_decay = 0.01 }, { name = "momentum" }, { name = "adafactor" }, { name = "lion" },
  { name = "adam8bit" }, { name = "adam8bit", paged = true }, { name = "adamw", paged = true },
  { name = "adamw", state_dtype = "bf16" }, { name = "adamw", state_dtype = "fp32" },
  { name = "none" },
}

local MEMO = {}

local function peaks(st)
  return { peak = st.peak, peak_reserved = st.peak_reserved, at_peak = st.at_peak,
    paged = st.paged_state_bytes }
end

-- The case simulated under its own optimizer (the first of OPTIMIZERS
-- unless `own` names another), then priced under each optimizer.
-- still: the peak is the load's under every optimizer (else some optimizer
-- must move it).
local function case(what, preset, over, fields, own, still)
  local base = run_of(preset, over, fields, own or OPTIMIZERS[1])
  local rec = swap.recorder()
  local st = step.run(base, rec)
  T.ok(swap.ready(rec), what .. ": recorded")
  if not swap.ready(rec) then return end
  T.eq(peaks(swap.price(rec, base)), peaks(st), what .. ": its own optimizer")
  -- recorded lean (the step without its optimizer, fit.knobs' way): every
  -- optimizer, its own too, priced to the same figures
  local lean = swap.recorder(true)
  step.run(base, lean)
  T.eq(lean.lean_done, not base.rl or nil, what .. ": lean where a step simulates")
  T.eq(peaks(swap.price(lean, base)), peaks(st), what .. ": its own optimizer, lean")
  local moved = 0
  for k, opt in ipairs(OPTIMIZERS) do
    local made, other = pcall(run_of, preset, over, fields, opt)
    if not made then -- the spec refuses the pair (paged states in an RL update)
      T.eq(type(other), "table", what .. ": optimizer " .. k .. " refused as input")
      goto next
    end
    -- the runs differ in their optimizer alone
    T.eq(runs.key(other, base, { optimizer = true }), runs.key(base, base, { optimizer = true }),
      what .. ": optimizer " .. k .. " changes nothing else")
    local want = peaks(step.run(other))
    T.eq(peaks(swap.price(rec, other)), want, ("%s: optimizer %d (%s)"):format(what, k,
      opt.name))
    -- and with the states and steps remembered across every case of this
    -- file (keyed by the parameters' shapes, the optimizer and framework)
    T.eq(peaks(swap.price(rec, other, MEMO)), want, ("%s: optimizer %d (%s), remembered")
      :format(what, k, opt.name))
    T.eq(peaks(swap.price(lean, other)), want, ("%s: optimizer %d (%s), lean")
      :format(what, k, opt.name))
    if want.peak_reserved ~= st.peak_reserved then moved = moved + 1 end
    ::next::
  end
  if still then
    T.eq(moved, 0, what .. ": the load's peak under every optimizer")
  else
    T.ok(moved > 0, what .. ": some optimizer moves the peak")
  end
end

local SIX = { num_hidden_layers = 6 }
local tests = {}

function tests.a_dense_decoder_under_every_optimizer()
  case("full fine-tune", "qwen2_5_1_5b_instruct", SIX, {})
  case("from sgd", "qwen2_5_1_5b_instruct", SIX, {}, { name = "sgd" })
  case("from paged 8-bit", "qwen2_5_1_5b_instruct", SIX, {}, { name = "adam8bit", paged = true })
  -- one token: the optimizer step's lists are the peak
  case("peak at the step", "qwen2_5_1_5b_instruct", SIX, { batch = 1, seq = 1 },
    { name = "adamw", foreach = true })
  -- LoRA, one token, an fp32 checkpoint cast on the device: the load's
  -- transient stays the peak
  case("peak at the load", "qwen2_5_1_5b_instruct", SIX, { batch = 1, seq = 1,
    lora = { rank = 4 }, load = { from = "fp32", cast = "device" } }, { name = "sgd" }, true)
  -- the example spec's own model and sizes (examples/specs/qwen2_5_1_5b_full.yaml)
  case("28 layers, full checkpointing", "qwen2_5_1_5b_instruct", nil, { batch = 4, seq = 1024,
    grad_checkpointing = "full", attention = "sdpa", optimizer = nil })
end

function tests.micro_batches_checkpointing_losses_and_the_load()
  for k, f in ipairs({ { grad_accum = 3 }, { grad_checkpointing = "full" },
    { grad_checkpointing = 2 }, { checkpoint_segment = 2, grad_checkpointing = "full" },
    { precision = { master = "fp32", compute = "bf16" } },
    { load = { from = "fp32", cast = "device" } },
    { precision = { params = "fp32", compute = "bf16" } },
    { framework = "pytorch-cpu", precision = { params = "fp32" } },
    { loss = "liger_fused" }, { loss = { impl = "chunked", chunk_rows = 8 } },
    { undisposed_steps = 3, framework = "torchsharp" } }) do
    case("variant " .. k, "qwen2_5_1_5b_instruct", SIX, f)
  end
end

function tests.adapters()
  case("lora", "llama_3_8b", SIX, { lora = { rank = 4 } })
  case("dora", "llama_3_8b", SIX, { lora = { rank = 8, dora = true, dropout = 0.1 } })
  case("qlora", "llama_3_8b", SIX, { precision = { params = "bf16", weights = "nf4" },
    lora = { rank = 16 } })
end

function tests.moe_and_a_vlm()
  case("moe", "qwen3_30b_a3b", SIX, { seq = 8 })
  case("qwen3-vl", "qwen3_vl_4b_instruct", SIX, { seq = 12,
    images = { count = 1, width = 256, height = 192 } })
end

-- An RL update steps the optimizer once per minibatch (stdlib/rl.lua), the
-- rollout, reference and critic passes before: PPO and GRPO, one or more
-- minibatches (the later ones skipped when they repeat), LoRA.
function tests.rl_updates()
  for _, mode in ipairs({ "ppo", "grpo" }) do
    for _, mb in ipairs({ 1, 2, 3 }) do
      case(("%s minibatch %d"):format(mode, mb), "qwen2_5_1_5b_instruct", SIX, { mode = mode,
        batch = 3, seq = 8, attention = "eager", rl = { new_tokens = 3, minibatch = mb,
        reference = mb ~= 2, value = mode == "ppo" } })
    end
  end
  case("ppo lora", "qwen2_5_1_5b_instruct", SIX, { mode = "ppo", batch = 2, seq = 8,
    lora = { rank = 4 }, rl = { new_tokens = 2, minibatch = 1, reference = true, value = true } })
end

-- What cannot be priced this way is not recorded.
function tests.steps_not_recorded()
  for _, f in ipairs({ { mode = "inference" }, { framework = "jax" }, { timeline = true } }) do
    local rec = swap.recorder()
    local r = run_of("qwen2_5_1_5b_instruct", SIX, f.timeline and {} or f)
    r.timeline = f.timeline -- a report's run (stdlib/report.lua)
    step.run(r, rec)
    T.eq(swap.ready(rec), false, "not recorded: " .. next(f))
  end
  T.raises(function() swap.price(swap.recorder(), run_of("qwen2_5_1_5b_instruct", SIX, {})) end,
    "not recorded")
end

return tests
