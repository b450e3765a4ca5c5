-- The fast paths of the simulator give the full simulation's answer to the
-- byte, whatever the knobs: decode steps fast-forwarded between the first
-- and the last (models/causal_lm.lua), repeated micro-batches and RL
-- minibatches skipped once a step leaves the tape as it found it
-- (stdlib/step.lua repeat_steps), identical grad-free layers composed
-- (models/decoder.lua grad_free_layers), identical trained layers
-- composed. `compose = false` turns all of them off: every step and layer
-- simulated.
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

-- The fast answer equals the full one; and with a timeline recorded (what
-- `estimate` draws), the timelines are equal too, event for event.
local function same(preset, over, fields, what)
  local run = run_of(preset, over, fields)
  run.compose = false
  local full = answer(step.run(run))
  run.compose = nil
  local fast = answer(step.run(run))
  T.eq(fast, full, what)
  -- trained layers composed keep fewer events than every layer simulated,
  -- so the timeline is compared with only those composed ("layers"); a
  -- page's (draw_decode: every decode step drawn, as --html draws them)
  run.timeline, run.draw_decode = true, true
  local tl_fast = step.run(run)
  run.compose = "layers"
  local tl_full = step.run(run)
  T.eq(answer(tl_fast), full, what .. " (timeline on)")
  T.eq(tl_fast.timeline, tl_full.timeline, what .. " timeline")
  T.ok(tl_full.timeline.events > 0, what .. " timeline kept")
  return full
end

local tests = {}

function tests.fast_forwarded_decode_steps_equal_every_step()
  local qwen = { num_hidden_layers = 5 }
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
  same("qwen3_30b_a3b", { num_hidden_layers = 4 }, { mode = "generate", seq = 8,
    generate_tokens = 6 }, "qwen3 moe")
  -- MLA (DeepSeek-V3): the prefill's value cache is a view holding
  -- kv_b_proj's whole output, bigger than a decode step's cache; every
  -- layer MoE, or dense first layers then a composed MoE tail
  for _, first in ipairs({ 0, 2 }) do
    for _, n in ipairs({ 2, 3, 5 }) do
      same("deepseek_v3", { num_hidden_layers = 7, first_k_dense_replace = first,
        n_routed_experts = 8, num_experts_per_tok = 2, n_group = 1, topk_group = 1 },
        { mode = "generate", generate_tokens = n }, ("deepseek-v3 first %d dense, %d tokens")
        :format(first, n))
    end
  end
end

-- Past DRAWN_DECODE_STEPS a step drawn for a page (draw_decode)
-- fast-forwards the middle decode steps too (their events would outgrow
-- the memory budget on a large MoE), and a step drawn with its timeline
-- does at any count; a sparkline's (lean) draws the last step alone, as an
-- undrawn step runs it. The answer is still the full one, and the
-- timeline says how many steps it leaves out.
function tests.a_long_decode_is_drawn_with_its_middle_steps_left_out()
  local n = require("models.causal_lm").DRAWN_DECODE_STEPS + 6
  local run = run_of("qwen2_5_1_5b_instruct", { num_hidden_layers = 2 },
    { mode = "generate", seq = 4, generate_tokens = n, attention = "sdpa" })
  run.compose = false
  local full = answer(step.run(run))
  run.compose, run.timeline = nil, true
  local sparkline = step.run(run)
  T.eq(answer(sparkline), full, "a sparkline's decode")
  T.eq(sparkline.timeline.skipped_decode, n - 1 - 2, "its middle decode steps left out")
  run.draw_decode = true
  local drawn = step.run(run)
  T.eq(answer(drawn), full, "long decode with a timeline")
  T.eq(drawn.timeline.skipped_decode, n - 1 - 2, "middle decode steps left out")
  T.ok(require("stdlib.timeline").text(drawn.timeline)[1]:find(("%d decode steps not drawn")
    :format(n - 3), 1, true), "the terminal says so")
  run.draw_decode, run.timeline = nil, "sparkline"
  local lean = step.run(run)
  T.eq(answer(lean), full, "a lean sparkline's decode")
  T.eq(lean.timeline.skipped_decode, n - 1 - 1, "every decode step but the last left out")
  T.ok(lean.timeline.events < sparkline.timeline.events, "its first step's events not kept")
  run.draw_decode, run.timeline = true, true
  -- at the limit every step is drawn for a page, the first and last for a sparkline
  run.generate_tokens = n - 6 + 1
  T.eq(step.run(run).timeline.skipped_decode, nil, "every step drawn at the limit")
  run.draw_decode = nil
  T.eq(step.run(run).timeline.skipped_decode, n - 6 - 2, "not for a sparkline")
end

function tests.grad_free_layers_equal_every_layer()
  for _, f in ipairs({ { attention = "eager" }, { attention = "sdpa", batch = 3 },
    { framework = "pytorch-cpu", precision = { params = "fp32" } },
    { lora = { rank = 4 } }, { precision = { params = "bf16", weights = "nf4" } } }) do
    f.mode = "inference"
    same("qwen2_5_1_5b_instruct", { num_hidden_layers = 6 }, f, "inference " .. (f.attention
      or f.framework or "variant"))
  end
  same("qwen3_30b_a3b", { num_hidden_layers = 5 }, { mode = "inference", seq = 8 }, "moe")
  -- a vision tower under no_grad (compose.grad_free) before the decoder
  for _, f in ipairs({ { attention = "eager" }, { attention = "sdpa", batch = 3 },
    { precision = { params = "fp32" }, framework = "pytorch-cpu" } }) do
    f.mode, f.seq, f.images = "inference", 12, { count = 1, width = 256, height = 192 }
    same("qwen3_vl_4b_instruct", { num_hidden_layers = 5 }, f, "qwen3-vl inference "
      .. (f.attention or f.framework))
    f.mode, f.generate_tokens = "generate", 4
    same("qwen3_vl_4b_instruct", { num_hidden_layers = 5 }, f, "qwen3-vl generate "
      .. (f.attention or f.framework))
  end
end

-- MoE experts with as many rows composed (stdlib/moe.lua loop: one walked
-- under an echo, nested in the echoed layer's, the next replayed from it)
-- equal every expert walked: the eager loop of Mixtral, Qwen3-MoE,
-- DeepSeek-V3 and gpt-oss (fused weights), trained, with LoRA, an
-- imbalanced router or a capacity factor, checkpointed, in inference and
-- generation. S.experts_replayed counts the replays: each case composes.
function tests.composed_experts_equal_every_expert_walked()
  local new_sim, sims = step.new_sim, {}
  step.new_sim = function(r)
    local S = new_sim(r)
    sims[#sims + 1] = S
    return S
  end
  local function composed(what)
    local n = 0
    for _, S in ipairs(sims) do n = n + (S.experts_replayed or 0) end
    sims = {}
    T.ok(n > 0, what .. ": experts replayed")
  end
  local qwen = { num_hidden_layers = 4, num_experts = 16 }
  -- 13 x 2 rows x 8 picks over 16 experts: 13 experts of 7 rows, 3 of 6
  for k, f in ipairs({ {}, { lora = { rank = 4 } }, { lora = { rank = 4, targets = "all-linear" } },
    { moe = { imbalance = 3 } }, { moe = { capacity_factor = 0.5 } },
    { moe = { capacity_factor = 1.25, imbalance = 2 } }, { grad_checkpointing = "full" },
    { grad_checkpointing = 2 }, { precision = { params = "fp32", compute = "bf16" } },
    { mode = "inference" }, { mode = "generate", generate_tokens = 3 },
    { precision = { params = "bf16", weights = "nf4" }, lora = { rank = 4, targets = "all-linear" } },
  }) do
    f.seq, f.mode = 13, f.mode or "train"
    same("qwen3_30b_a3b", qwen, f, "qwen3 moe experts " .. k)
    composed("qwen3 moe experts " .. k)
  end
  -- 1 x 1 rows x 8 picks over 16 experts: 8 of one row, 8 idle
  same("qwen3_30b_a3b", qwen, { mode = "train", batch = 1, seq = 1 }, "qwen3 moe idle experts")
  composed("qwen3 moe idle experts")
  same("mixtral_8x7b_v0_1", { num_hidden_layers = 4 }, { mode = "train", seq = 7 },
    "mixtral experts")
  composed("mixtral experts")
  same("mixtral_8x7b_v0_1", { num_hidden_layers = 4 }, { mode = "train", seq = 7,
    moe = { aux_loss = true } }, "mixtral experts, aux loss")
  composed("mixtral experts, aux loss")
  for _, mode in ipairs({ "train", "generate" }) do
    same("deepseek_v3", { num_hidden_layers = 5, first_k_dense_replace = 1, n_routed_experts = 16,
      num_experts_per_tok = 4, n_group = 1, topk_group = 1 }, { mode = mode, seq = 5,
      generate_tokens = mode == "generate" and 3 or nil,
      precision = { params = "bf16", dequantize = true } }, "deepseek-v3 experts " .. mode)
    composed("deepseek-v3 experts " .. mode)
  end
  same("gpt_oss_20b", { num_hidden_layers = 4 }, { mode = "train", seq = 6, attention = "eager",
    precision = { params = "bf16", dequantize = true } }, "gpt-oss experts")
  composed("gpt-oss experts")
  step.new_sim = new_sim
end

-- body(calls) with mod[name] counting its calls: calls() says how many
-- since the last calls(), then starts again; mod[name] is put back
-- whatever body does.
local function counting(mod, name, body)
  local f, n = mod[name], 0
  mod[name] = function(...) n = n + 1 return f(...) end
  local ok, err = pcall(body, function() local c = n; n = 0; return c end)
  mod[name] = f
  if not ok then error(err, 0) end
end

-- Identical grad-free layers run one layer a stack: layer 1 is echoed and
-- replayed for layer 2 and layer n where their inputs (and KV cache
-- entries) are alike to its own (models/decoder.lua grad_free_layers; a
-- vision tower's, stdlib/compose.lua grad_free), at prefill, decode and an
-- RL update's log-probs: every layer's answer and timeline, and one
-- attention per stack. Not under autocast (its weight casts are Lua
-- state): there each layer's casts outlive it in the cache, so every layer
-- runs.
function tests.grad_free_stacks_run_one_layer()
  local compose, decoder, layers = require("stdlib.compose"), require("models.decoder"),
    require("stdlib.layers")
  local attention, ran = layers.eager_attention, 0
  layers.eager_attention = function(...) ran = ran + 1 return attention(...) end
  local most, stacks = 0, 0
  local function watch(mod, name)
    local f = mod[name]
    mod[name] = function(S, ...)
      local before = ran
      local out = f(S, ...)
      if S.composable then -- (compose = false walks through compose.grad_free)
        most, stacks = math.max(most, ran - before), stacks + 1
      end
      return out
    end
    return function() mod[name] = f end
  end
  local undo1, undo2 = watch(decoder, "grad_free_layers"), watch(compose, "grad_free")
  local img = { count = 1, width = 256, height = 192 }
  local ds = { num_hidden_layers = 7, first_k_dense_replace = 2, n_routed_experts = 8,
    num_experts_per_tok = 2, n_group = 1, topk_group = 1 }
  local ok, err = pcall(function()
    for k, c in ipairs({
      { "qwen2_5_1_5b_instruct", { mode = "inference" } },
      { "qwen2_5_1_5b_instruct", { mode = "generate", generate_tokens = 5, attention = "eager" } },
      { "qwen2_5_1_5b_instruct", { mode = "generate", generate_tokens = 3, batch = 3,
        lora = { rank = 4 } } },
      { "qwen2_5_1_5b_instruct", { mode = "ppo", seq = 8, rl = { new_tokens = 3, minibatch = 1,
        reference = true, value = true }, attention = "eager" } },
      { "qwen3_30b_a3b", { mode = "generate", seq = 8, generate_tokens = 4 } },
      { "deepseek_v3", { mode = "generate", seq = 8, generate_tokens = 3 }, ds },
      { "qwen3_vl_4b_instruct", { mode = "inference", seq = 12, images = img } },
      { "qwen3_vl_4b_instruct", { mode = "generate", seq = 12, images = img,
        generate_tokens = 3 } },
      { "qwen2_5_1_5b_instruct", { mode = "inference", precision = { master = "fp32",
        compute = "bf16" } }, nil, 6 } }) do
      local what = ("%s, case %d"):format(c[1], k)
      most, stacks = 0, 0
      same(c[1], c[3] or { num_hidden_layers = 6 }, c[2], what)
      T.ok(stacks > 0, what .. ": grad-free stacks composed")
      T.eq(most, c[4] or 1, what .. ": layers run in a stack, at most")
    end
  end)
  undo1()
  undo2()
  layers.eager_attention = attention
  if not ok then error(err, 0) end
end

-- A stack whose first layers differ (DeepSeek-V3's first_k_dense_replace
-- dense layers, Qwen3-MoE's mlp_only_layers) walks those and composes the
-- uniform MoE tail after them (models/decoder.lua D.uniform_tail), trained
-- or grad-free: every layer's answer, and the tail composed.
function tests.a_uniform_tail_after_dense_layers_equals_every_layer()
  local compose, decoder = require("stdlib.compose"), require("models.decoder")
  counting(compose, "layers", function(composed) counting(decoder, "grad_free_layers",
  function(grad_free)
    local ds = { num_hidden_layers = 8, first_k_dense_replace = 2, n_routed_experts = 8,
      num_experts_per_tok = 2, n_group = 1, topk_group = 1 }
    local deq = { params = "bf16", dequantize = true } -- the checkpoint is fp8
    for k, f in ipairs({ { precision = deq }, { precision = deq, grad_checkpointing = "full" },
      { lora = { rank = 4 } }, { precision = deq, grad_accum = 2 },
      { precision = deq, grad_checkpointing = 2 }, { mode = "inference" } }) do
      f.mode = f.mode or "train"
      composed(); grad_free()
      same("deepseek_v3", ds, f, "deepseek-v3 tail, variant " .. k)
      if f.grad_checkpointing == 2 then
        T.eq(composed(), 0, "every 2nd layer, 3 periods in the tail: walked")
      else
        T.ok(composed() + grad_free() > 0, "deepseek-v3 variant " .. k .. ": the tail composed")
      end
    end
    -- checkpointing every n-th layer or in segments: whole periods of the
    -- tail compose as units, from the first layer that starts a period
    -- (the layers before it walked), the layers left over walked
    for k, c in ipairs({ { 14, 3, { grad_checkpointing = 2 } }, { 16, 2, { grad_checkpointing = 3 } },
      { 13, 1, { grad_checkpointing = "full", checkpoint_segment = 2 } },
      { 23, 2, { grad_checkpointing = 2, checkpoint_segment = 3 } },
      { 14, 3, { grad_checkpointing = 2, lora = { rank = 4 } } } }) do
      local f = c[3]
      f.mode, f.precision = "train", not f.lora and deq or nil
      composed()
      same("deepseek_v3", { num_hidden_layers = c[1], first_k_dense_replace = c[2],
        n_routed_experts = 8, num_experts_per_tok = 2, n_group = 1, topk_group = 1 }, f,
        "deepseek-v3 tail in periods, case " .. k)
      T.ok(composed() > 0, "deepseek-v3 tail in periods, case " .. k .. ": composed")
    end
    composed()
    same("qwen3_30b_a3b", { num_hidden_layers = 7, mlp_only_layers = { 0, 1 } },
      { mode = "train", seq = 8 }, "qwen3-moe after two dense layers")
    T.ok(composed() > 0, "qwen3-moe: the tail composed")
  end) end)
end

-- Pipeline stages slice the layer list (stdlib/parallel.lua local_run): a
-- stage holding the dense first layers composes its MoE tail, and the
-- stages after it, all MoE though the model is not uniform, compose whole.
-- Every rank's budget equals every layer walked.
function tests.pipeline_stages_of_a_model_with_dense_first_layers()
  local par = require("stdlib.parallel")
  counting(require("stdlib.compose"), "layers", function(composed)
    for _, L in ipairs({ { pp = 2, dp = 2, zero = 1 }, { pp = 4 } }) do
      local run = spec.normalize({ model = { preset = "deepseek_v3", overrides = {
        num_hidden_layers = 16, first_k_dense_replace = 3, n_routed_experts = 8,
        num_experts_per_tok = 2, n_group = 1, topk_group = 1 } }, run = { mode = "train",
        batch = 2, seq = 16, precision = { params = "bf16", dequantize = true },
        grad_checkpointing = "full" }, parallel = L }, where, registry)
      run.compose = false
      local full = par.budget(run)
      run.compose = nil
      composed()
      T.eq(par.budget(run), full, "pp " .. L.pp)
      -- pp 4: 4 layers a stage, the first 3 dense + 1 MoE (walked), 3 all MoE
      T.ok(composed() >= (L.pp == 4 and 3 or 2), "pp " .. L.pp .. ": stages composed")
    end
  end)
end

-- Under autocast (fp32 master weights, bf16 compute) layers compose too,
-- their weight casts held by autocast's cache made apart from the bulk
-- (stdlib/compose.lua middle_casts): checkpointed or not, in segments,
-- LoRA, micro-batches, MoE, a VLM, dense first layers. Every layer's answer.
function tests.layers_under_autocast_compose()
  counting(require("stdlib.compose"), "layers", function(composed)
    local amp = { master = "fp32", compute = "bf16" }
    local q = { num_hidden_layers = 12 }
    for k, c in ipairs({
      { "qwen2_5_1_5b_instruct", q, { grad_checkpointing = "full" } },
      { "qwen2_5_1_5b_instruct", q, {} },
      { "qwen2_5_1_5b_instruct", q, { grad_checkpointing = 2 } },
      { "qwen2_5_1_5b_instruct", { num_hidden_layers = 13 }, { grad_checkpointing = "full",
        checkpoint_segment = 2 } },
      { "qwen2_5_1_5b_instruct", q, { grad_checkpointing = "full", lora = { rank = 4 } } },
      { "qwen2_5_1_5b_instruct", q, { grad_checkpointing = "full", grad_accum = 3 } },
      { "qwen2_5_1_5b_instruct", q, { precision = { params = "fp32", compute = "bf16" } } },
      { "qwen3_30b_a3b", { num_hidden_layers = 6 }, { seq = 8, grad_checkpointing = "full" } },
      { "qwen3_vl_4b_instruct", { num_hidden_layers = 6 }, { seq = 12, grad_checkpointing = "full",
        images = { count = 1, width = 256, height = 192 } } },
      { "deepseek_v3", { num_hidden_layers = 8, first_k_dense_replace = 2, n_routed_experts = 8,
        num_experts_per_tok = 2, n_group = 1, topk_group = 1 }, { grad_checkpointing = "full",
        precision = { master = "fp32", compute = "bf16", dequantize = true } } } }) do
      local f = c[3]
      f.mode, f.precision = "train", f.precision or amp
      composed()
      same(c[1], c[2], f, "autocast case " .. k)
      T.ok(composed() > 0, "autocast case " .. k .. ": composed")
    end
    -- at a real step's sizes (2 x 1024): a dense model, MoE experts
    -- checkpointed, and not (a composed layer's backward releases its share
    -- before making its fp32 gradients: making them first rose above the
    -- walk, Mixtral 8 layers +101,203,968 B in the backward phase)
    composed()
    same("qwen2_5_1_5b_instruct", q, { mode = "train", seq = 1024, precision = amp },
      "autocast, 2 x 1024")
    same("qwen3_30b_a3b", { num_hidden_layers = 8 }, { mode = "train", seq = 1024,
      precision = amp, grad_checkpointing = "full" }, "autocast moe checkpointed, 2 x 1024")
    T.ok(composed() > 0, "autocast at 2 x 1024: composed")
    composed()
    same("mixtral_8x7b_v0_1", { num_hidden_layers = 8 }, { mode = "train", seq = 1024,
      precision = amp }, "autocast expert loop, not checkpointed")
    T.ok(composed() > 0, "autocast expert loop, not checkpointed: composed")
    composed()
    same("deepseek_v3", { num_hidden_layers = 14, first_k_dense_replace = 0,
      n_routed_experts = 8, num_experts_per_tok = 2, n_group = 1, topk_group = 1 },
      { mode = "train", seq = 1024, grad_checkpointing = 3, precision = { master = "fp32",
        compute = "bf16", dequantize = true } }, "autocast expert loop, every 3rd layer")
    T.ok(composed() > 0, "autocast expert loop, every 3rd layer: composed")
  end)
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

local reduce = require("tests.lib.timeline_reduce")

-- A VLM's reference model reads the policy's pixel_values (it raised
-- "attempt to index a nil value" before share_inputs): it holds a second
-- copy of the weights, bf16, for the whole update.
function tests.a_vlm_ppo_reference_model_runs_on_the_policys_inputs()
  local function ppo(reference)
    return step.run(run_of("qwen3_vl_4b_instruct", { num_hidden_layers = 4 }, { mode = "ppo",
      batch = 2, seq = 12, images = { count = 1, width = 256, height = 192 },
      rl = { new_tokens = 3, minibatch = 1, reference = reference, value = false } }))
  end
  local with, without = ppo(true), ppo(false)
  T.eq(with.param_count, 2 * without.param_count, "a second model")
  T.ok(with.peak - without.peak >= 2 * without.param_count, "its bf16 weights stay live")
  T.ok(with.phase_peaks.ref_logprobs > 0, "its log-probs pass")
  same("qwen3_vl_4b_instruct", { num_hidden_layers = 4 }, { mode = "ppo", batch = 2, seq = 12,
    images = { count = 1, width = 256, height = 192 }, attention = "eager",
    rl = { new_tokens = 4, minibatch = 1, reference = true, value = true } }, "qwen3-vl ppo, ref")
end

function tests.timeline_collect_equals_the_reduction_of_every_event()
  local run = run_of("qwen2_5_1_5b_instruct", { num_hidden_layers = 5 },
    { mode = "train", grad_checkpointing = "full", grad_accum = 2 })
  run.timeline = true
  local S = step.new_sim(run)
  local P = run.sim.build(S, run, step.policies(run))
  local inputs = run.sim.inputs(S, run, P)
  local l = run.sim.forward_loss(S, P, run)
  S.tape:phase("backward")
  S.tape:backward(l.id)
  S:drop(l)
  S:drop(table.unpack(inputs))
  for _, k in ipairs({ 1, 7, 480, 100000 }) do
    local full = reduce(S.tape, k)
    T.eq(S.tape:timeline_collect(k), full, "k = " .. k)
    -- lean: without the samples' tables (a sparkline reads at, live and
    -- phase), the peak all
    full.samples = nil
    T.eq(S.tape:timeline_collect(k, true), full, "lean, k = " .. k)
  end
  T.eq(vram.tape():timeline_collect(10), nil, "nothing kept")
  local t = vram.tape()
  t:timeline(true)
  local a = t:alloc(0, "activations") -- no event: a zero change
  t:drop(a)
  T.eq(t:timeline_collect(5), nil, "zero-byte changes are no events")
  t:alloc(100, "activations", "x")
  t:drop(t:alloc(50, "temporaries"))
  T.eq(t:timeline_collect(2), reduce(t, 2), "small tape")
  T.eq(#t:timeline_collect(1 << 20).samples, t:timeline_len(), "k past the events: one sample an event")
  T.raises(function() t:timeline_collect((1 << 20) + 1) end, "at most 1048576 samples")
end

-- The same where most events are repeats (tape:timeline_repeat: composed
-- micro-batches, grad-free layers and decode steps), which the lean pass
-- reads piece by piece: whole steps of several kinds, and a hand-made tape
-- whose repeated piece changes phase inside and rises only after the first
-- copy.
function tests.timeline_collect_of_repeated_pieces_equals_the_reduction()
  local tapes = {}
  for _, f in ipairs({ { grad_accum = 3 }, { mode = "generate", generate_tokens = 6 },
      { mode = "inference" }, { grad_checkpointing = 2, lora = { rank = 4 }, grad_accum = 2 } }) do
    local run = run_of("qwen2_5_1_5b_instruct", { num_hidden_layers = 5 }, f)
    run.timeline = true
    local new_sim, made = step.new_sim, nil
    step.new_sim = function(...)
      made = new_sim(...)
      return made
    end
    local ok, err = pcall(step.run, run)
    step.new_sim = new_sim
    if not ok then error(err, 0) end
    tapes[#tapes + 1] = { made.tape, f.mode or (f.lora and "lora" or "accumulation") }
  end
  local t = vram.tape()
  t:timeline(true)
  t:phase("a")
  t:drop(t:alloc(5, "activations", "x"))
  local first = t:timeline_len() + 1
  t:phase("b")
  local y = t:alloc(7, "activations", "y")
  t:phase("c")
  t:temp(3, "temporaries", "z")
  t:timeline_repeat(first, t:timeline_len(), 4)
  tapes[#tapes + 1] = { t, "hand-made" }
  for _, c in ipairs(tapes) do
    local tape, what = c[1], c[2]
    local n = tape:timeline_len()
    T.ok(n > 0, what .. ": events")
    for _, k in ipairs({ 1, 2, 7, 64, 480, n - 1, n, n + 5 }) do
      local full = reduce(tape, k)
      T.eq(tape:timeline_collect(k), full, ("%s, k = %d"):format(what, k))
      full.samples = nil
      T.eq(tape:timeline_collect(k, true), full, ("%s, lean, k = %d"):format(what, k))
    end
  end
  t:drop(y)
end

return tests
