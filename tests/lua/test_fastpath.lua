-- The fast paths of the simulator give the full simulation's answer to the
-- byte, whatever the knobs: decode steps fast-forwarded between the first
-- and the last (models/causal_lm.lua), repeated micro-batches and RL
-- minibatches skipped once a step leaves the tape as it found it
-- (stdlib/step.lua repeat_steps), identical layers composed. `compose =
-- false` turns all of them off: every step and layer simulated.
local vram = require("vram")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local registry = require("models.registry")

local where = vram.share_dir .. "/tests/lua/spec.yaml"

local function run_of(preset, over, fields)
  local r = { batch = 2, seq = 16, precision = { params = "bf16" }, framework = "pytorch" }
  for k, v in pairs(fields) do r[k] = v end
  return spec.normalize({ model = { preset = preset, overrides = over }, run = r }, where, registry)
end

-- Everything an estimate reports from the tape.
local function answer(st)
  return { peak = st.peak, peak_reserved = st.peak_reserved, peak_phase = st.peak_phase,
    peak_op = st.peak_op, at_peak = st.at_peak, phase_peaks = st.phase_peaks,
    live = st.live_by_category, phase_end = st.phase_end, params = st.param_count,
    trainable = st.trainable_count, minibatch_steps = st.minibatch_steps }
end

local function same(preset, over, fields, what)
  local run = run_of(preset, over, fields)
  run.compose = false
  local full = answer(step.run(run))
  run.compose = nil
  local fast = answer(step.run(run))
  T.eq(fast, full, what)
  return full
end

local tests = {}

function tests.fast_forwarded_decode_steps_equal_every_step()
  local qwen = { num_hidden_layers = 3 }
  for _, n in ipairs({ 1, 2, 3, 4, 9 }) do
    for _, f in ipairs({ { attention = "eager", batch = 1 }, { attention = "sdpa", batch = 3 },
      { attention = "eager", framework = "pytorch-cpu", precision = { params = "fp32" } } }) do
      f.mode, f.generate_tokens = "generate", n
      same("qwen2_5_1_5b_instruct", qwen, f, ("qwen2.5 %d tokens %s"):format(n, f.attention))
    end
  end
  -- sliding-window layers whose caches stop growing inside the decode, MoE
  -- experts and attention sinks (gpt-oss)
  local st = same("gpt_oss_20b", { num_hidden_layers = 4, sliding_window = 6 },
    { mode = "generate", seq = 4, generate_tokens = 12, attention = "eager" }, "gpt-oss window 6")
  T.ok(st.phase_peaks.decode > 0, "decode simulated")
  same("qwen3_30b_a3b", { num_hidden_layers = 2 }, { mode = "generate", seq = 8,
    generate_tokens = 6 }, "qwen3 moe")
end

function tests.skipped_micro_batches_equal_every_micro_batch()
  for _, accum in ipairs({ 1, 2, 3, 5 }) do
    for k, f in ipairs({ {}, { lora = { rank = 4 } }, { grad_checkpointing = "full" },
      { loss = { impl = "chunked", chunk_rows = 8 }, attention = "eager" },
      { optimizer = { name = "adamw", foreach = true }, framework = "pytorch-cpu" } }) do
      f.mode, f.grad_accum = "train", accum
      same("qwen2_5_1_5b_instruct", { num_hidden_layers = 5 }, f,
        ("grad_accum %d variant %d"):format(accum, k))
    end
  end
end

function tests.skipped_rl_minibatches_equal_every_minibatch()
  for _, mode in ipairs({ "ppo", "grpo" }) do
    for _, mb in ipairs({ 1, 2, 5 }) do
      for _, n in ipairs({ 1, 2, 3, 6 }) do
        local rl = { new_tokens = n, minibatch = mb, reference = mb ~= 2, value = mode == "ppo" }
        same("qwen2_5_1_5b_instruct", { num_hidden_layers = 4 },
          { mode = mode, batch = 5, seq = 8, rl = rl, attention = "eager" },
          ("%s minibatch %d, %d new tokens"):format(mode, mb, n))
      end
    end
  end
  -- the PPO example spec's shape (examples/specs/qwen3_vl_4b_ppo.yaml), small
  same("qwen3_vl_4b_instruct", { num_hidden_layers = 4 }, { mode = "ppo", batch = 4, seq = 12,
    images = { count = 1, width = 256, height = 192 }, framework = "jax", attention = "eager",
    rl = { new_tokens = 5, minibatch = 2, reference = false, value = false }, optimizer = { name = "adafactor",
    state_dtype = "fp32", momentum_dtype = "bf16" } }, "qwen3-vl ppo")
end

return tests
