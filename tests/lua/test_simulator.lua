-- Simulator features checked against measurements (tests/truth) and
-- arithmetic written here, never against the simulator's own output.
local vram = require("vram")
local truth = require("stdlib.truth")
local step = require("stdlib.step")
local spec = require("stdlib.spec")
local rl = require("stdlib.rl")
local registry = require("models.registry")

local root = vram.share_dir
local cases = vram.json.load(root .. "/tests/truth/cases_public.json")
local measured = {}
for _, r in ipairs(vram.json.load(root .. "/tests/truth/results_public.json").results) do
  measured[r.id] = r.measured
end
local function case(id)
  for _, c in ipairs(cases) do if c.id == id then return c end end
end

local tests = {}

-- Qwen3 p01 (fp32, tied): 5,245,440 parameters; every one gets an fp32 grad.
function tests.second_micro_batch_peaks_higher_by_exactly_the_parameter_gradients()
  local run = truth.normalize(case("p01_qwen3_fp32_adamw"), nil, registry)
  run.grad_accum = 2
  local st = step.simulate(run.sim, run)
  local grads = 5245440 * 4
  T.near(st.peak, measured.p01_qwen3_fp32_adamw.peak_bytes + grads, 1e-4)
end

function tests.checkpointing_every_layer_is_the_measured_full_checkpoint_case()
  local run = truth.normalize(case("p08_qwen3_ckpt_fp32"), nil, registry)
  run.ckpt_every = 1
  local st = step.simulate(run.sim, run)
  T.near(st.peak, measured.p08_qwen3_ckpt_fp32.peak_bytes, 1e-4)
end

function tests.checkpointing_every_other_layer_lies_between_none_and_all()
  local run = truth.normalize(case("p08_qwen3_ckpt_fp32"), nil, registry)
  run.ckpt_every = 2
  local half = step.simulate(run.sim, run).peak
  run.ckpt = false
  local none = step.simulate(run.sim, run).peak
  T.ok(half > measured.p08_qwen3_ckpt_fp32.peak_bytes and half < none,
    ("every 2nd layer: %d, all: %d, none: %d"):format(half,
      measured.p08_qwen3_ckpt_fp32.peak_bytes, none))
end

-- A small Qwen2 config for spec-level features.
local function small(run_fields, model_over)
  local r = { mode = "train", batch = 2, seq = 64, precision = { params = "bf16" },
    framework = "pytorch-cpu" }
  for k, v in pairs(run_fields or {}) do r[k] = v end
  local over = { num_hidden_layers = 2 }
  for k, v in pairs(model_over or {}) do over[k] = v end
  return spec.normalize({ model = { preset = "qwen2_5_1_5b_instruct", overrides = over },
    run = r }, root .. "/tests/lua/spec.yaml", registry)
end

-- QLoRA: every decoder Linear (7 per layer) stored as nf4: 4 bits per weight
-- plus one fp32 absmax per 64; embeddings and norms stay bf16 (tied head).
function tests.qlora_weights_are_nf4_blocks_plus_bf16_embeddings_and_norms()
  local run = small({ precision = { params = "bf16", weights = "nf4" },
    lora = { rank = 8, alpha = 16 } })
  local st = step.simulate(run.sim, run)
  local H, I, V, L, kv = 1536, 8960, 151936, 2, 256
  local function nf4(n) return (n + 1) // 2 + 4 * ((n + 63) // 64) end
  local linear = nf4(H * H) + 2 * nf4(H * kv) + nf4(H * H) + 2 * nf4(H * I) + nf4(I * H)
  local bias = (H + 2 * kv) * 2 -- q,k,v biases in bf16
  local lora_tensors = 8 * (H + H) + 8 * (H + kv) * 2 + 8 * (H + H) -- r*(in+out) x q,k,v,o
  local expect = L * (linear + bias + 2 * H * 2) + V * H * 2 + H * 2 + L * lora_tensors * 4
  T.eq(st.at_peak.weights, expect)
end

function tests.adam8bit_states_are_one_byte_per_value_plus_block_absmax()
  local run = small({ optimizer = { name = "adam8bit" } })
  local st = step.simulate(run.sim, run)
  local H, I, V, kv = 1536, 8960, 151936, 256
  local per_layer = { H * H, H, H * kv, kv, H * kv, kv, H * H, H * I, H * I, I * H, H, H }
  local total = 0
  local function state(n)
    if n < 4096 then return 8 * n end
    return 2 * (n + 4 * ((n + 255) // 256))
  end
  total = state(V * H) + state(H)
  for _ = 1, 2 do for _, n in ipairs(per_layer) do total = total + state(n) end end
  T.eq(st.at_peak.optimizer_state, total)
end

-- The parameter shapes of small(): 2 Qwen2.5-1.5B layers, tied embedding.
local function small_shapes()
  local H, I, V, kv = 1536, 8960, 151936, 256
  local shapes = { { V, H }, { H, 1 } } -- embed (rows x cols), final norm
  for _ = 1, 2 do
    for _, sh in ipairs({ { H, H }, { H, 1 }, { kv, H }, { kv, 1 }, { kv, H }, { kv, 1 },
      { H, H }, { I, H }, { I, H }, { H, I }, { H, 1 }, { H, 1 } }) do
      shapes[#shapes + 1] = sh
    end
  end
  return shapes
end

-- Adafactor: factored second moment (rows + cols fp32) for matrices, full
-- for vectors, plus a bf16 first moment of every value.
function tests.adafactor_states_are_factored_with_a_bf16_momentum()
  local run = small({ optimizer = { name = "adafactor", state_dtype = "fp32",
    momentum_dtype = "bf16" } })
  local st = step.simulate(run.sim, run)
  local total = 0
  for _, sh in ipairs(small_shapes()) do
    local n = sh[1] * sh[2]
    local second = sh[2] > 1 and (sh[1] + sh[2]) * 4 or n * 4
    total = total + second + n * 2
  end
  T.eq(st.at_peak.optimizer_state, total)
end

function tests.lion_keeps_one_moment_in_the_state_dtype()
  local run = small({ optimizer = { name = "lion", state_dtype = "bf16" } })
  local st = step.simulate(run.sim, run)
  local total = 0
  for _, sh in ipairs(small_shapes()) do total = total + sh[1] * sh[2] * 2 end
  T.eq(st.at_peak.optimizer_state, total)
end

-- JAX preallocates 75 % of the device and allocates from that pool.
function tests.jax_runs_fit_against_three_quarters_of_the_device()
  local report = require("stdlib.report")
  local gpu = require("stdlib.gpus").find("h100-80gb")
  local pool = math.floor(gpu.bytes * 0.75)
  local fake = { peak = pool, peak_reserved = pool, at_peak = {}, phase_peaks = {} }
  local b = report.budget(fake, { framework = "jax" }, "h100-80gb")
  T.ok(b.fits, "exactly the pool fits")
  T.eq(b.device_total_bytes, pool)
  fake.peak_reserved, fake.peak = pool + 1, pool + 1
  T.ok(not report.budget(fake, { framework = "jax" }, "h100-80gb").fits, "one byte more does not")
end

-- Seed 002's chunked recompute: one segment over all layers keeps only the
-- first layer's input (and what the rotary/mask inputs hold) at forward end,
-- less than checkpointing every layer, which keeps every layer's input.
function tests.checkpoint_segments_keep_one_input_per_segment()
  local function fwd(fields)
    local run = small(fields, { num_hidden_layers = 4 })
    run.compose = false
    local st = step.simulate(run.sim, run)
    return st.phase_end.forward_end - st.baseline
  end
  local every = fwd({ grad_checkpointing = "full" })
  local seg = fwd({ checkpoint_segment = 4 })
  -- three fewer saved layer inputs: 2 x 64 tokens x 1536 bf16 each
  T.eq(every - seg, 3 * 2 * 64 * 1536 * 2)
end

function tests.cuda_allocator_counts_every_tensor_as_512_byte_blocks()
  local run = small({ framework = "pytorch" })
  local st = step.simulate(run.sim, run)
  T.eq(st.peak % 512, 0)
  T.ok(st.peak_reserved >= st.peak)
end

function tests.reserved_rounds_large_requests_to_2_mib_segments()
  local t = vram.tape()
  t:rounding(512, 10 << 20, 2 << 20)
  t:alloc(100, "activations")
  t:alloc((3 << 20) + 1, "activations")
  t:alloc((11 << 20) + 1, "activations")
  local st = t:stats()
  T.eq(st.peak, 100 + (3 << 20) + 1 + (11 << 20) + 1)
  T.eq(st.peak_reserved, 512 + ((3 << 20) + 512) + (12 << 20))
end

function tests.sdpa_drops_the_quadratic_attention_terms()
  local eager = small({ attention = "eager", seq = 512 })
  local sdpa = small({ attention = "sdpa", seq = 512 })
  local pe = step.simulate(eager.sim, eager)
  local ps = step.simulate(sdpa.sim, sdpa)
  -- eager keeps an fp32 softmax of B*H*T*T per layer until backward
  local softmax = 2 * 12 * 512 * 512 * 4
  T.ok(pe.peak - ps.peak >= 2 * softmax, ("eager %d sdpa %d"):format(pe.peak, ps.peak))
end

-- Seed 000: ppo_minibatch is a size: 64 with a batch of 16 is one chunk of
-- 16; 4 gives four steps of 4.
function tests.ppo_minibatch_is_a_size_capped_at_the_batch()
  local run = small({ batch = 16, seq = 32, loss = "one_hot" })
  run.rl = { new_tokens = 4, minibatch = 64 }
  local st = rl.simulate(run.sim, run)
  T.eq(st.minibatch, 16)
  T.eq(st.minibatch_steps, 1)
  run.rl.minibatch = 4
  st = rl.simulate(run.sim, run)
  T.eq(st.minibatch, 4)
  T.eq(st.minibatch_steps, 4)
end

-- Chunked CE never holds rows x V: at the start of backward the plain loss
-- holds three fp32 rows x V buffers (log-softmax, its gradient, the NLL
-- gradient) where the chunked one holds chunk-sized ones.
function tests.chunked_cross_entropy_removes_the_rows_by_vocab_buffers()
  local plain = small({ seq = 1024, attention = "sdpa" })
  local chunked = small({ seq = 1024, attention = "sdpa",
    loss = { impl = "chunked", chunk_rows = 256 } })
  local a = step.simulate(plain.sim, plain)
  local b = step.simulate(chunked.sim, chunked)
  local rows, V = 2 * 1024, 151936
  T.ok(a.peak - b.peak >= 2 * rows * V * 4, ("plain %d chunked %d"):format(a.peak, b.peak))
  T.ok(b.at_peak.logits_loss < 3 * 256 * V * 4 + rows * 1536 * 2,
    "chunked keeps at most chunk-sized loss buffers")
end

-- PPO's critic: a second Qwen2.5-1.5B body (1,543,714,304 parameters, tied
-- head not duplicated) plus a Linear(1536, 1) head, in bf16 with bf16 Adam
-- moments: 3 x 2 bytes per parameter more at set-up than GRPO without one,
-- plus its rotary inv_freq buffer (64 bf16) and, on CPU, a 4-byte Adam step
-- counter per parameter tensor (28 layers x 12 + embedding + norm + head 2).
function tests.ppo_critic_adds_its_weights_and_adam_moments()
  local function setup(mode)
    local run = small({ mode = mode, seq = 32, batch = 2, rl = { new_tokens = 2, minibatch = 2,
      reference = false } }, { num_hidden_layers = 28 })
    local st = step.run(run)
    return st.phase_peaks.setup
  end
  local critic = 1543714304 + 1536 + 1
  T.eq(setup("ppo") - setup("grpo"), critic * 2 * 3 + 64 * 2 + (28 * 12 + 4) * 4)
end

-- fit: the value found fits and the next one does not, for several budgets.
function tests.fit_finds_the_exact_boundary_of_each_knob()
  local fit = require("stdlib.fit")
  local run = small({ batch = 1, seq = 128 })
  for _, knob in ipairs({ "batch", "seq" }) do
    local base = fit.need(run)
    for _, extra in ipairs({ 1 << 28, 3 << 28 }) do
      local budget = base + extra
      local v = fit.largest(run, knob, budget)
      T.ok(v >= 1, knob .. " fits at least once")
      local function need(x)
        local r = small({ batch = knob == "batch" and x or 1, seq = knob == "seq" and x or 128 })
        return (fit.need(r))
      end
      T.ok(need(v) <= budget, ("%s=%d fits"):format(knob, v))
      T.ok(need(v + 1) > budget, ("%s=%d does not fit"):format(knob, v + 1))
    end
  end
end

-- Composing identical layers must give the byte-exact result of simulating
-- every layer (peak, reserved, phase), whatever the knobs.
function tests.composed_layers_equal_the_full_simulation()
  local variants = {
    { attention = "eager" }, { attention = "sdpa", grad_checkpointing = "full" },
    { lora = { rank = 8 }, grad_accum = 2 }, { framework = "pytorch", loss = "one_hot" },
    { precision = { params = "bf16", weights = "nf4" }, lora = { rank = 4 } },
  }
  for k, v in ipairs(variants) do
    local run = small(v, { num_hidden_layers = 6 })
    run.compose = false
    local full = step.simulate(run.sim, run)
    run.compose = nil
    local comp = step.simulate(run.sim, run)
    T.eq(comp.peak, full.peak, "variant " .. k .. " peak")
    T.eq(comp.peak_reserved, full.peak_reserved, "variant " .. k .. " reserved")
    T.eq(comp.peak_phase, full.peak_phase, "variant " .. k .. " phase")
  end
end

function tests.composed_vision_towers_equal_the_full_simulation()
  for _, id in ipairs({ "p17_vit_fp32_adamw", "p19_vit_mixed_ckpt", "p21_vlm_full_fp32_foreach2",
    "p23_vlm_lora_qkvo_fp32" }) do
    local run = truth.normalize(case(id), nil, registry)
    local deeper = { num_hidden_layers = 6 }
    for k, v in pairs(run.vision) do if k ~= "num_hidden_layers" then deeper[k] = v end end
    run.vision = deeper
    run.compose = false
    local full = step.simulate(run.sim, run)
    run.compose = nil
    local comp = step.simulate(run.sim, run)
    T.eq(comp.peak, full.peak, id .. " peak")
    T.eq(comp.peak_phase, full.peak_phase, id .. " phase")
  end
end

-- A compiled estimate (stdlib/compiled.lua) gives the simulator's own answer
-- for any (batch, seq): peak, phase and breakdown, to the byte.
function tests.compiled_estimates_equal_the_simulation_at_any_size()
  local compiled = require("stdlib.compiled")
  local variants = {
    small({ attention = "eager" }, { num_hidden_layers = 6 }),
    small({ attention = "sdpa", grad_checkpointing = "full", framework = "pytorch" },
      { num_hidden_layers = 5 }),
    small({ lora = { rank = 8 }, grad_accum = 2, loss = "one_hot" }),
    spec.normalize({ model = { preset = "qwen3_vl_4b_instruct", overrides =
      { num_hidden_layers = 4 } }, run = { batch = 1, seq = 8, attention = "sdpa",
      images = { width = 256, height = 256 } } }, root .. "/tests/lua/spec.yaml", registry),
  }
  for k, run in ipairs(variants) do
    local est = compiled.compile(run)
    -- batch 1 and seq 1 have line programs of their own (one structure each)
    for _, bt in ipairs({ { 1, 7 }, { 3, 64 }, { 2, 333 }, { 1, 2 }, { 1, 300 }, { 5, 1 },
      { 2, 1 }, { 1, 1 } }) do
      local r = {}
      for key, v in pairs(run) do r[key] = v end
      r.batch, r.seq = bt[1], bt[2]
      local st = step.run(r)
      local e = est:eval(bt[1], bt[2])
      local what = ("variant %d at batch %d seq %d"):format(k, bt[1], bt[2])
      T.eq(e.peak, st.peak, what .. " peak")
      T.eq(e.peak_phase, st.peak_phase, what .. " phase")
      T.eq(e.at_peak.activations, st.at_peak.activations, what .. " activations")
      T.eq(est:peak(bt[1], bt[2]), st.peak, what .. " peak()")
    end
    T.ok(est.lines.batch and est.lines.seq, "variant " .. k .. ": both lines were fitted")
  end
end

-- Generation compiles too (its op structure does not depend on the sizes).
function tests.compiled_generation_equals_the_simulation()
  local compiled = require("stdlib.compiled")
  local run = small({ mode = "generate", generate_tokens = 3 })
  local est = compiled.compile(run)
  for _, bt in ipairs({ { 1, 5 }, { 4, 100 } }) do
    local r = {}
    for key, v in pairs(run) do r[key] = v end
    r.batch, r.seq = bt[1], bt[2]
    T.eq(est:peak(bt[1], bt[2]), step.run(r).peak, "generate at " .. bt[1] .. "x" .. bt[2])
  end
end

-- A chunked loss whose chunk is min(chunk_rows, rows) is not a polynomial in
-- the sizes: refused with the reason, never answered wrongly.
function tests.runs_whose_sizes_are_not_polynomials_are_refused()
  local compiled = require("stdlib.compiled")
  local run = small({ loss = { impl = "chunked", chunk_rows = 4 } })
  T.raises(function() compiled.compile(run) end, "cannot be compiled")
end

-- A branch on a size past the probes (a window, a threshold) is caught at
-- the run's own sizes: refused, not answered wrongly beyond it. Here a
-- family whose step holds 1 GiB more once seq passes 100.
function tests.a_branch_past_the_probes_is_refused_at_the_runs_own_sizes()
  local compiled = require("stdlib.compiled")
  local run = small({ seq = 200 })
  local sim = {}
  for k, v in pairs(run.sim) do sim[k] = v end
  sim.forward_loss = function(S, P, r, ...)
    if r.seq > 100 then S.tape:alloc(1 << 30, "activations", "past_the_probes") end
    return run.sim.forward_loss(S, P, r, ...)
  end
  local r = {}
  for k, v in pairs(run) do r[k] = v end
  r.sim = sim
  T.ok(step.run(r).peak >= step.run(run).peak + (1 << 30), "the branch is taken at seq 200")
  T.raises(function() compiled.compile(r) end, "at its own sizes the program differs")
  r.seq = 50 -- below the branch: compiled, and right up to it
  local est = compiled.compile(r)
  local q = {}
  for k, v in pairs(r) do q[k] = v end
  q.seq = 100
  T.eq(est:peak(2, 100), step.run(q).peak, "at seq 100")
end

-- Sliding windows branch on seq past the probes' sizes in the models
-- (masks, a generation's window cache): the compiled answer across a window
-- of 64 is the simulator's, in training (Gemma 2: every other layer
-- windowed, eager) and in generation (Mistral: every layer, sdpa).
function tests.compiled_estimates_equal_the_simulation_across_a_sliding_window()
  local compiled = require("stdlib.compiled")
  local gemma2 = { model_type = "gemma2", vocab_size = 256000, hidden_size = 2304,
    intermediate_size = 9216, num_hidden_layers = 4, num_attention_heads = 8,
    num_key_value_heads = 4, head_dim = 256, tie_word_embeddings = true, sliding_window = 64,
    attn_logit_softcapping = 50.0, final_logit_softcapping = 30.0 }
  local cfg = os.tmpname()
  local f = assert(io.open(cfg, "w"))
  f:write(vram.json.encode(gemma2))
  f:close()
  local runs = {
    spec.normalize({ model = { config = cfg }, run = { mode = "train", batch = 2, seq = 16,
      attention = "eager", precision = { params = "bf16" } } }, root .. "/tests/lua/spec.yaml",
      registry),
    spec.normalize({ model = { preset = "mistral_7b_v0_1", overrides = { num_hidden_layers = 4,
      sliding_window = 64 } }, run = { mode = "generate", generate_tokens = 8, batch = 2,
      seq = 16, attention = "sdpa", precision = { params = "bf16" } } },
      root .. "/tests/lua/spec.yaml", registry),
  }
  os.remove(cfg)
  for k, run in ipairs(runs) do
    local est = compiled.compile(run)
    for _, seq in ipairs({ 60, 64, 65, 129, 300 }) do
      local r = {}
      for key, v in pairs(run) do r[key] = v end
      r.batch, r.seq = 3, seq
      T.eq(est:peak(3, seq), step.run(r).peak, ("run %d at seq %d"):format(k, seq))
    end
  end
end

-- A VLM run spec takes the image through the processor's rules: Qwen3-VL
-- with a 500,000-pixel cap resizes 1024 x 768 to multiples of 32 under the
-- cap; the inputs are then 3 x H x W fp32 per image, 2 images per sample.
function tests.vlm_spec_counts_pixel_inputs_from_the_processor_grid()
  local run = spec.normalize({ model = { preset = "qwen3_vl_4b_instruct" }, run = {
    mode = "inference", batch = 2, seq = 16, framework = "pytorch-cpu",
    images = { count = 2, width = 1024, height = 768, max_pixels = 500000 } } },
    root .. "/tests/lua/spec.yaml", registry)
  local fam = require("models.qwen3_vl")
  local t = fam.image_tokens(fam.read(run.hf_config, "qwen3_vl_4b_instruct"),
    { height = 768, width = 1024, max_pixels = 500000 })
  T.ok(t.resized[1] * t.resized[2] <= 500000, "resized under the cap")
  local st = step.simulate(run.sim, run)
  -- inputs: ids int64 (2 x 16) + pixels fp32 (2 samples x 2 images x 3 x H x W,
  -- twice: the processor repeats an image over temporal_patch_size 2 frames)
  T.eq(st.at_peak.inputs, 2 * 16 * 8 + 2 * 2 * 3 * 2 * t.resized[1] * t.resized[2] * 4)
end

-- Issue 12: the simulated Qwen3-VL tower holds the checkpoint's weights at
-- any image size (its learned positions are interpolated, not one per
-- patch). Totals: Qwen3-VL-4B's model.safetensors.index.json total_size
-- 8,875,631,616 bytes, all BF16 (tests/lua/test_models.lua); Qwen3-VL-2B's
-- published count (tests/lua/fixtures/hf_configs/README.md), tied embedding once.
function tests.qwen3_vl_simulated_parameters_are_the_checkpoints_at_any_image_size()
  local path = root .. "/tests/lua/fixtures/hf_configs/Qwen--Qwen3-VL-2B-Instruct.json"
  for _, c in ipairs({ { { preset = "qwen3_vl_4b_instruct" }, 8875631616 // 2 },
    { { config = path }, 2127532032 } }) do
    for _, img in ipairs({ { width = 256, height = 256 }, { width = 1024, height = 768 } }) do
      local run = spec.normalize({ model = c[1], run = { mode = "inference", batch = 1, seq = 8,
        framework = "pytorch-cpu", images = img } }, root .. "/tests/lua/spec.yaml", registry)
      local st = step.simulate(run.sim, run)
      T.eq(st.param_count, c[2], ("%s at %dx%d"):format(c[1].preset or "2B", img.width,
        img.height))
    end
  end
end

-- A measured case is a CPU run: its device total is the tensors' bytes, with
-- no CUDA context (issue 11: `estimate` on a truth case added 500 MiB).
function tests.a_truth_case_is_a_cpu_run_without_a_device_context()
  local run = truth.normalize(case("p05_qwen3_attn_dominant_T1024"), nil, registry)
  T.eq(run.framework, "pytorch-cpu")
  local b = require("stdlib.report").budget(step.run(run), run)
  T.eq(b.device_total_bytes, b.reserved_bytes)
  T.eq(b.reserved_bytes, b.peak_bytes) -- CPU: no block rounding either
end

return tests
