-- Identical layers' parameter bookkeeping composed (stdlib/sim.lua
-- Sim:build_layers: layer 3 built once, the tape repeating its allocations
-- for layers 4 .. n-1; their parameters one group in S.params, read in one
-- go by the optimizer, the load, the counts and stdlib/compose.lua) gives
-- the answer of every layer built one by one (run.group_layers = false),
-- to the byte, and the same timeline, event for event.
local vram = require("vram")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local par = require("stdlib.parallel")
local registry = require("models.registry")

local where = vram.share_dir .. "/tests/lua/spec.yaml"

local function run_of(preset, over, fields, parallel)
  local r = { batch = 2, seq = 16, precision = { params = "bf16" }, framework = "pytorch",
    mode = "train" }
  for k, v in pairs(fields) do r[k] = v end
  return spec.normalize({ model = { preset = preset, overrides = over }, run = r,
    parallel = parallel }, where, registry)
end

-- Everything an estimate reports from the tape.
local function answer(st)
  return { peak = st.peak, peak_reserved = st.peak_reserved, peak_phase = st.peak_phase,
    peak_op = st.peak_op, at_peak = st.at_peak, phase_peaks = st.phase_peaks,
    live = st.live_by_category, phase_end = st.phase_end, params = st.param_count,
    trainable = st.trainable_count, paged = st.paged_state_bytes,
    xla = st.xla, timeline = st.timeline }
end

-- Runs the run with a timeline, keeping every simulator it makes: the
-- answer, and each tape's events written out one line each.
local function simulate(run, grouped)
  run.group_layers = grouped
  run.timeline = true
  local sims, new_sim = {}, step.new_sim
  step.new_sim = function(r)
    local S = new_sim(r)
    sims[#sims + 1] = S
    return S
  end
  local ok, st = pcall(function()
    if run.parallel then return (par.budget(run)) end
    return answer(step.run(run))
  end)
  step.new_sim = new_sim
  if not ok then error(st, 0) end
  local events, groups = {}, 0
  for k, S in ipairs(sims) do
    local lines = {}
    for i = 1, S.tape:timeline_len() do
      local delta, cat, phase, rec, op = S.tape:timeline_event(i)
      lines[i] = ("%d %s %s %s %s"):format(delta, cat, phase, tostring(rec), tostring(op))
    end
    events[k] = lines
    for _, p in ipairs(S.params) do if p.group then groups = groups + 1 end end
  end
  return st, events, groups
end

-- The first line where two event lists differ, or nil.
local function first_difference(a, b)
  for i = 1, math.max(#a, #b) do
    if a[i] ~= b[i] then return ("event %d: %s vs %s"):format(i, a[i], b[i]) end
  end
end

local function same(preset, over, fields, what, parallel)
  local run = run_of(preset, over, fields, parallel)
  local full, full_events, none = simulate(run, false)
  local fast, fast_events, groups = simulate(run, nil)
  T.eq(none, 0, what .. ": every layer built")
  T.ok(groups > 0, what .. ": layers built as a group")
  T.eq(fast, full, what)
  T.eq(#fast_events, #full_events, what .. ": simulators")
  for k = 1, #full_events do
    T.ok(#full_events[k] > 0, what .. ": events kept")
    T.eq(#fast_events[k], #full_events[k], what .. ": events")
    T.eq(first_difference(fast_events[k], full_events[k]), nil, what .. ": timeline")
  end
  return full
end

local tests = {}

local QWEN = { num_hidden_layers = 6 }

function tests.a_dense_decoder_full_fine_tune_under_every_optimizer()
  for _, opt in ipairs({ { name = "adamw", foreach = false }, { name = "adamw", foreach = true },
    { name = "adamw", foreach = "torch2" }, { name = "adam", weight_decay = 0.1 },
    { name = "adam", weight_decay = 0.1, foreach = "torch2" }, { name = "sgd_momentum",
      weight_decay = 0.01 }, { name = "adafactor" }, { name = "lion" },
    { name = "adam8bit", paged = true }, { name = "adamw", paged = true },
    { name = "adamw", state_dtype = "fp32" } }) do
    local st = same("qwen2_5_1_5b_instruct", QWEN, { optimizer = opt },
      ("full fine-tune, %s foreach %s"):format(opt.name, tostring(opt.foreach)))
    T.ok(st.phase_peaks.optimizer > 0, opt.name .. ": the optimizer step ran")
  end
  -- the exact count of the checkpoint (models/qwen2_5 preset), group or not
  local st = same("qwen2_5_1_5b_instruct", nil, { batch = 1, seq = 8 }, "28 layers")
  T.eq(st.params, 1543714304, "Qwen2.5-1.5B-Instruct parameters")
end

function tests.micro_batches_checkpointing_and_the_load()
  for k, f in ipairs({ { grad_accum = 3 }, { grad_checkpointing = "full" },
    { grad_checkpointing = 2 }, { checkpoint_segment = 2, grad_checkpointing = "full" },
    { grad_checkpointing = "full", precision = { master = "fp32", compute = "bf16" } },
    { grad_checkpointing = "full", precision = { master = "fp32", compute = "bf16" },
      lora = { rank = 4 } },
    { load = { from = "fp32", cast = "device" } }, { load = { from = "fp32", cast = "tensor" } },
    { precision = { params = "fp32", compute = "bf16" } }, { framework = "pytorch-cpu",
      precision = { params = "fp32" } }, { framework = "jax" }, { undisposed_steps = 3,
      framework = "torchsharp" } }) do
    same("qwen2_5_1_5b_instruct", QWEN, f, "variant " .. k)
  end
end

-- grad-free layers (models/decoder.lua grad_free_layers): layer n replays
-- layer 2 with its KV cache in place of layer 2's, at prefill and decode
function tests.inference_and_generation()
  for _, f in ipairs({ { mode = "inference" }, { mode = "generate", generate_tokens = 1 },
    { mode = "generate", generate_tokens = 5, attention = "eager" },
    { mode = "generate", generate_tokens = 3, batch = 3, lora = { rank = 4 } } }) do
    same("qwen2_5_1_5b_instruct", QWEN, f, f.mode .. " " .. tostring(f.generate_tokens))
  end
  same("qwen3_30b_a3b", QWEN, { mode = "generate", seq = 8, generate_tokens = 4 }, "moe generate")
end

function tests.lora_dora_and_modules_to_save()
  for k, lo in ipairs({ { rank = 4 }, { rank = 8, dora = true, dropout = 0.1 },
    { rank = 4, targets = "all-linear" }, { rank = 4, modules_to_save = { "lm_head", "q_proj" } } }) do
    same("llama_3_8b", QWEN, { lora = lo }, "lora " .. k)
  end
end

function tests.qlora()
  for _, w in ipairs({ "nf4", "nf4_dq" }) do
    same("llama_3_8b", QWEN, { precision = { params = "bf16", weights = w }, lora = { rank = 16 } },
      "qlora " .. w)
  end
end

function tests.moe()
  same("qwen3_30b_a3b", QWEN, { seq = 8 }, "qwen3 moe")
  same("qwen3_30b_a3b", QWEN, { seq = 8, moe = { impl = "grouped" }, lora = { rank = 4 } },
    "qwen3 moe grouped lora")
end

function tests.a_vlm_trained_and_generating()
  local img = { count = 1, width = 256, height = 192 }
  same("qwen3_vl_4b_instruct", QWEN, { seq = 12, images = img }, "qwen3-vl train")
  same("qwen3_vl_4b_instruct", QWEN, { seq = 12, images = img, freeze = { "vision" },
    lora = { rank = 4 } }, "qwen3-vl lora, frozen tower")
  same("qwen3_vl_4b_instruct", QWEN, { seq = 12, images = img, mode = "generate",
    generate_tokens = 3 }, "qwen3-vl generate")
  same("qwen3_vl_4b_instruct", QWEN, { seq = 12, images = img, mode = "inference" },
    "qwen3-vl inference")
end

function tests.parallel_layouts()
  same("qwen2_5_1_5b_instruct", QWEN, {}, "zero-3", { dp = 4, zero = 3 })
  same("qwen2_5_1_5b_instruct", QWEN, {}, "fsdp", { dp = 4, fsdp = "full_shard" })
  same("qwen2_5_1_5b_instruct", { num_hidden_layers = 12 }, {}, "tp2 pp2",
    { tp = 2, pp = 2, dp = 2 })
end

function tests.rl_with_a_reference_model()
  same("qwen2_5_1_5b_instruct", QWEN, { mode = "ppo", batch = 3, seq = 8, attention = "eager",
    rl = { new_tokens = 3, minibatch = 1, reference = true, value = true } }, "ppo")
end

-- Checkpointing every n-th layer or in segments composes whole periods of
-- layers as units (models/decoder.lua), the layers left over walked: the
-- answer of every layer walked (compose = false), with or without a tail,
-- and drawn too: the composed timeline keeps no more events than the walk's
-- and reaches the same peak, first at the same phase and op.
function tests.checkpoint_periods_compose_as_units()
  local compose = require("stdlib.compose")
  local calls, layers = 0, compose.layers
  compose.layers = function(...)
    calls = calls + 1
    return layers(...)
  end
  local ok, err = pcall(function()
    for _, c in ipairs({ { 9, 2, nil }, { 10, 3, nil }, { 12, nil, 2 }, { 13, nil, 3 },
      { 11, 2, 2 }, { 14, 2, 3 }, { 16, 3, 2 }, { 18, 2, 3 }, { 15, 3, 1 } }) do
      local n, every, segment = c[1], c[2], c[3]
      local f = { grad_checkpointing = every or "full", checkpoint_segment = segment }
      for k, extra in ipairs({ {}, { lora = { rank = 4 } }, { grad_accum = 2 },
        { precision = { params = "fp32", compute = "bf16" } } }) do
        for key, v in pairs(extra) do f[key] = v end
        local what = ("%d layers, every %s, segment %s, variant %d"):format(n, tostring(every),
          tostring(segment), k)
        local run = run_of("qwen2_5_1_5b_instruct", { num_hidden_layers = n }, f)
        run.compose = false
        local full = answer(step.run(run))
        run.compose = nil
        calls = 0
        T.eq(answer(step.run(run)), full, what)
        -- (period: one segment and plain layers to the next checkpointed one)
        local e = every or 1
        local period = e * (((segment or 1) + e - 1) // e)
        T.eq(calls > 0, n // period >= 4, what .. ": composed as units when 4 or more")
        run.timeline = true
        calls = 0
        local drawn = answer(step.run(run))
        T.eq(calls > 0, n // period >= 4, what .. ": composed when drawn")
        run.compose = false
        local walked = answer(step.run(run)).timeline
        run.compose = nil
        local tl = drawn.timeline
        T.ok(tl.events <= walked.events, what .. ": no more events than the walk")
        T.eq({ tl.peak.live, tl.peak.phase, tl.peak.op },
          { walked.peak.live, walked.peak.phase, walked.peak.op }, what .. ": the walk's peak")
        drawn.timeline = nil
        T.eq(drawn, full, what .. ": drawn")
        for key in pairs(extra) do f[key] = nil end
      end
    end
  end)
  compose.layers = layers
  if not ok then error(err, 0) end
end

-- Checkpointed layers (and units of layers) are echoed like plain ones: the
-- echo spans ckpt_begin .. ckpt_end and its replay records the segment
-- again with ids mapped. The answer (and with full checkpointing, which
-- composes when drawn, the timeline) of every layer walked (compose =
-- false) and of every layer built (group_layers = false); a segment walked
-- for units 1 and 2 at most, not n, and for the layers left over, under
-- autocast too (a replay puts its weight casts in autocast's cache).
function tests.checkpointed_layers_are_replayed()
  local Sim = require("stdlib.sim")
  local begins, begin = 0, Sim.checkpoint_begin
  Sim.checkpoint_begin = function(...)
    begins = begins + 1
    return begin(...)
  end
  local function counted(run)
    begins = 0
    local st = answer(step.run(run))
    return st, begins
  end
  local echoed = 0
  local ok, err = pcall(function()
    for _, m in ipairs({ { "qwen2_5_1_5b_instruct", 12 }, { "qwen2_5_1_5b_instruct", 36 },
      { "qwen3_30b_a3b", 9 } }) do
      local preset, n = m[1], m[2]
      for _, c in ipairs({ { "full" }, { 2 }, { "full", 2 }, { "full", 3 }, { 2, 3 },
        { "full", 8 } }) do
        for k, extra in ipairs({ {}, { lora = { rank = 4 } }, { precision = { params = "bf16",
          weights = "nf4" }, lora = { rank = 4 } }, { precision = { master = "fp32",
          compute = "bf16" } }, { precision = { master = "fp32", compute = "bf16" },
          lora = { rank = 4 } }, { grad_accum = 2 }, { timeline = true } }) do
          local f = { grad_checkpointing = c[1], checkpoint_segment = c[2], seq = 8 }
          for key, v in pairs(extra) do f[key] = key ~= "timeline" and v or nil end
          local what = ("%s, %d layers, checkpointing %s, segment %s, variant %d"):format(preset,
            n, tostring(c[1]), tostring(c[2]), k)
          local run = run_of(preset, { num_hidden_layers = n }, f)
          run.timeline = extra.timeline
          run.compose = false
          local walked, w = counted(run)
          run.compose, run.group_layers = nil, false
          local built = counted(run) -- composed, no echo: the same timeline
          run.group_layers = nil
          local fast, b = counted(run)
          T.eq(fast, built, what .. ": every layer built")
          -- (a composed timeline keeps fewer events than the walk)
          fast.timeline, walked.timeline = nil, nil
          T.eq(fast, walked, what)
          -- one segment per unit (a period, or a layer under full
          -- checkpointing), the units composed when 4 or more
          local every = c[1] == "full" and 1 or c[1]
          local period = every * (((c[2] or 1) + every - 1) // every)
          local units = n // period
          local drawn_units = run.timeline and period > 1
          if units >= 4 and not drawn_units then
            T.ok(b <= w - units + 2, ("%s: %d segments walked of %d"):format(what, b, w))
            echoed = echoed + 1
          end
        end
      end
    end
  end)
  Sim.checkpoint_begin = begin
  if not ok then error(err, 0) end
  T.ok(echoed >= 40, "checkpointed runs echoed: " .. echoed)
end

-- The layers of a checkpointed segment echo one another (compose.chain in
-- models/decoder.lua's walk: unit 1's segments, those left over after the
-- units, every segment when a timeline is drawn): the answer of every layer
-- walked (compose = false), and of every layer built (group_layers = false:
-- no group, nothing echoed) with the timeline event for event. A segment
-- runs one layer, or two where the first reads the embedding's view of a
-- frozen embedding (its input not alike to the next's), a tail's dense
-- layers before it all; under autocast every layer runs.
function tests.the_layers_of_a_segment_echo_one_another()
  local compose = require("stdlib.compose")
  local chain = compose.chain
  local ran, echoed, most = 0, 0, 0 -- layers run, chains given a group, most run in one
  compose.chain = function(S, G, c0, n, one, x)
    local k = 0
    local out = chain(S, G, c0, n, function(...) k = k + 1; return one(...) end, x)
    ran = ran + k
    if G then echoed, most = echoed + 1, math.max(most, k) end
    return out
  end
  local deq = { params = "bf16", dequantize = true } -- (deepseek_v3's checkpoint is fp8)
  local ok, err = pcall(function()
    for _, m in ipairs({ { "qwen2_5_1_5b_instruct", { num_hidden_layers = 11 } },
      { "qwen2_5_1_5b_instruct", { num_hidden_layers = 36 } },
      { "qwen3_30b_a3b", { num_hidden_layers = 9 }, { seq = 8 } },
      { "deepseek_v3", { num_hidden_layers = 13, first_k_dense_replace = 3, n_routed_experts = 8,
        num_experts_per_tok = 2, n_group = 1, topk_group = 1 }, { precision = deq } } }) do
      for _, c in ipairs({ { "full", 2 }, { "full", 3 }, { "full", 8 }, { 2, 3 } }) do
        for k, extra in ipairs({ {}, { lora = { rank = 4 } }, { precision = { params = "bf16",
          weights = "nf4" }, lora = { rank = 4 } }, { freeze = { "embeddings" } },
          { grad_accum = 2 }, { precision = { master = "fp32", compute = "bf16" } } }) do
          local f = { grad_checkpointing = c[1], checkpoint_segment = c[2], mode = "train" }
          for key, v in pairs(m[3] or {}) do f[key] = v end
          for key, v in pairs(extra) do f[key] = v end
          if m[3] and m[3].precision and extra.precision then -- both: dequantized, autocast
            f.precision = { dequantize = true, master = extra.precision.master,
              compute = extra.precision.compute, weights = extra.precision.weights }
          end
          local what = ("%s, %d layers, checkpointing %s, segment %d, variant %d"):format(m[1],
            m[2].num_hidden_layers, tostring(c[1]), c[2], k)
          if not (f.precision and f.precision.weights and m[1] == "deepseek_v3") then
            local run = run_of(m[1], m[2], f)
            run.compose = false
            local walked = answer(step.run(run))
            run.compose = nil
            ran, echoed, most = 0, 0, 0
            T.eq(answer(step.run(run)), walked, what)
            local autocast = run.autocast
            ran, echoed, most = 0, 0, 0
            local drawn = same(m[1], m[2], f, what .. ", drawn")
            drawn.timeline = nil
            T.eq(drawn, walked, what .. ": drawn")
            if autocast then
              T.eq(echoed, 0, what .. ": every layer run under autocast")
            else
              -- (same: the run with the group last, its chains counted)
              T.ok(echoed > 0 and most <= 2, ("%s: %d segments echoed, at most %d layers run")
                :format(what, echoed, most))
              T.ok(most == 1 or f.freeze or f.lora,
                what .. ": one layer run where the embedding trains")
            end
          end
        end
      end
    end
  end)
  compose.chain = chain
  if not ok then error(err, 0) end
end

-- A capture spoiled by anything but allocs and temps is not repeated: the
-- layers are then built one by one.
function tests.a_spoiled_capture_is_not_repeated()
  local tape = vram.tape()
  local a = tape:alloc(512, "weights")
  tape:capture()
  tape:param(1024, "weights", "w")
  tape:temp(64, "temporaries", "t")
  T.eq(tape:capture_end(), 1, "one tensor per copy")
  tape:capture_repeat(3)
  T.eq(tape:live(), 512 + 4 * 1024, "three more copies")
  T.eq(tape:bytes(a + 4), 1024, "the last copy's id")
  tape:capture()
  tape:param(8, "weights")
  tape:drop(a)
  T.eq(tape:capture_end(), nil, "a drop spoils it")
  T.raises(function() tape:capture_repeat(1) end, "composed layers", "nothing to repeat")
  -- a C loop no hook can stop is bounded (temps only: no memory runs out)
  tape:capture()
  tape:temp(8, "temporaries")
  tape:capture_end()
  T.raises(function() tape:capture_repeat(math.maxinteger) end, "more than 2^26")
end

-- An echo replays a layer's events with its tensors new, the pairs and the
-- shifted range mapped and every other id kept; anything but alloc, drop,
-- retain, temp and node spoils it.
function tests.an_echo_replays_a_layer_with_its_ids_mapped()
  local tape = vram.tape()
  local w1 = tape:param(64, "weights", "w") -- layer 1's and layer 2's weights
  local w2 = tape:param(64, "weights", "w")
  local mask = tape:alloc(8, "activations", "mask")
  local x = tape:alloc(100, "activations", "x")
  tape:echo()
  local y = tape:alloc(100, "activations", "y")
  tape:node({ x, w1, mask }, { x, 100, w1, 64 }, { y }, 32, "mm")
  tape:temp(16, "temporaries", "t")
  tape:drop(x)
  T.eq(tape:echo_end(), true, "an echo of allocs, nodes, temps and drops")
  local live = tape:live()
  local z = tape:echo_replay({ x, y }, w1, w1 + 1, w2 - w1, y)
  T.eq(z, y + 1, "the output is the next tensor")
  T.eq(tape:live(), live + 100 - 0, "y stays saved, z is new")
  tape:backward(z)
  T.ok(tape:grad(w2) ~= nil, "layer 2's weight got the replayed node's gradient")
  T.ok(tape:grad(w1) ~= nil, "and through y, the replay's input, layer 1's")
  local again = tape:echo_replay({ x, z }, w1, w1 + 1, w2 - w1, y)
  T.ok(again > z, "replayed again: an output of its own")
  T.eq(tape:bytes(again), 100, "of y's size")
  tape:echo()
  tape:alloc(8, "activations")
  tape:phase("backward")
  T.eq(tape:echo_end(), false, "a phase spoils it")
  T.raises(function() tape:echo_replay({}, 0, 0, 0, 0) end, "composed layers", "spoiled")
end

-- A checkpointed layer on tape: x (s.x bytes) and weight w (s.w) through
-- a hidden tensor (s.h) to an output of x's size, reading mask; s.temp the
-- first node's backward scratch, s.scratch a forward temporary. Drops x;
-- returns the output.
local function ckpt_layer(tape, x, w, mask, s)
  tape:ckpt_begin()
  local h = tape:alloc(s.h, "activations", "layer.h")
  tape:node({ x, w, mask }, { x, s.x, w, s.w }, { h }, s.temp, "layer.mm")
  local y = tape:alloc(s.x, "activations", "layer.y")
  tape:node({ h }, { h, s.h }, { y }, 0, "layer.act")
  if s.scratch then tape:temp(s.scratch, "temporaries", "layer.scratch") end
  tape:drop(h)
  tape:ckpt_end({ x, w, mask }, { y }, "checkpoint")
  tape:drop(x)
  return y
end

-- An echo of a checkpointed layer replays its segment as a segment: the
-- same live bytes, peaks and gradients as the layer built twice; an echo
-- ended with its segment open is not replayed.
function tests.an_echo_spans_a_checkpointed_segment()
  local function layer(tape, x, w, mask)
    return ckpt_layer(tape, x, w, mask, { x = 100, h = 100, w = 64, temp = 32 })
  end
  local function two(echo)
    local tape = vram.tape()
    local w1 = tape:param(64, "weights", "w")
    local w2 = tape:param(64, "weights", "w")
    local mask = tape:alloc(8, "activations", "mask")
    local x = tape:alloc(100, "activations", "x")
    if echo then tape:echo() end
    local y = layer(tape, x, w1, mask)
    if echo then T.eq(tape:echo_end(), true, "a whole segment echoes") end
    local z = echo and tape:echo_replay({ x, y }, w1, w1 + 1, w2 - w1, y)
      or layer(tape, y, w2, mask)
    local live = tape:live()
    tape:backward(z)
    return { live = live, peak = tape:stats().peak, g1 = tape:grad(w1) ~= nil,
      g2 = tape:grad(w2) ~= nil }
  end
  local built = two(false)
  T.eq(built.g1 and built.g2, true, "both weights get gradients")
  T.eq(two(true), built, "replayed as built")
  local tape = vram.tape()
  tape:echo()
  tape:ckpt_begin()
  tape:alloc(8, "activations")
  T.eq(tape:echo_end(), false, "an open segment spoils it")
end

-- An echo kept apart from its tape (tape:echo_keep) is taken by another
-- tape with its ids mapped (input, externals, parameters), wherever that
-- tape stands; replayed there, it does what walking the layer there does:
-- the same live, reserved and peak bytes, op at peak, categories and
-- gradients. A tape refuses it when the echo names a tensor the mapping
-- leaves out, or a checkpoint segment is open on one side only.
function tests.a_kept_echo_replays_on_another_tape_with_its_ids_mapped()
  -- extra: tensors before the layer (another optimizer's states)
  local function prefix(tape, extra)
    tape:rounding(512, 1 << 20, 2 << 20)
    for _ = 1, extra do tape:alloc(3 << 20, "optimizer_state", "state") end
    local w = tape:param(4096, "weights", "w")
    local mask = tape:alloc(8, "activations", "mask")
    return w, mask, tape:alloc(1000, "activations", "x")
  end
  local function layer(tape, x, w, mask)
    return ckpt_layer(tape, x, w, mask, { x = 1000, h = 3000, w = 4096, temp = 64,
      scratch = 5000 })
  end
  local function finish(tape, y, w)
    local l = tape:alloc(4, "activations", "loss")
    tape:node({ y }, { y, 1000 }, { l }, 0, "loss")
    tape:backward(l)
    local st = tape:stats()
    return { peak = st.peak, reserved = st.peak_reserved, op = st.peak_op,
      at = st.at_peak, live = tape:live(), grad = tape:grad(w) ~= nil }
  end
  local a = vram.tape()
  local wa, ma, xa = prefix(a, 0)
  a:echo()
  local ya = layer(a, xa, wa, ma)
  T.eq(a:echo_end(), true, "the layer echoes")
  local kept = a:echo_keep()
  T.eq(type(kept), "userdata", "and is kept")
  T.eq(getmetatable(kept), "locked", "opaque, its metatable locked")
  for extra = 0, 2 do
    local walked = vram.tape()
    local w, m, x = prefix(walked, extra)
    local want = finish(walked, layer(walked, x, w, m), w)
    local b = vram.tape()
    local wb, mb, xb = prefix(b, extra)
    T.eq(b:echo_take(kept, { xa, xb, ma, mb }, wa, wa + 1, wb - wa), true,
      extra .. " tensors more before: taken")
    local yb = b:echo_replay({ xa, xb, ma, mb }, wa, wa + 1, wb - wa, ya)
    T.eq(finish(b, yb, wb), want, extra .. " tensors more before: replayed as walked")
  end
  local c = vram.tape()
  local wc, _, xc = prefix(c, 1)
  T.eq(c:echo_take(kept, { xa, xc }, wa, wa + 1, wc - wa), false, "the mask left out: refused")
  T.raises(function() c:echo_replay({}, 0, 0, 0, 0) end, "composed layers", "nothing to replay")
  local d = vram.tape()
  local wd, md, xd = prefix(d, 0)
  d:ckpt_begin()
  T.eq(d:echo_take(kept, { xa, xd, ma, md }, wa, wa + 1, wd - wa), false,
    "a segment open here, not there: refused")
  local e = vram.tape()
  e:echo()
  e:alloc(8, "activations")
  e:echo()
  e:alloc(8, "activations")
  T.eq(e:echo_end(), true, "an inner echo")
  T.eq(e:echo_keep(), nil, "is not kept")
  T.raises(function() a:echo_take({}, {}, 0, 0, 0) end, "vram.echo expected", "a kept echo only")
end

-- tape:node_of and tape:drop_of read the tensors themselves (Sim:node,
-- Sim:drop): edges without rg are left out, a node without any is not
-- recorded, bytes default to the tensor's, and bad lists are argument
-- errors naming the entry.
function tests.node_of_reads_the_tensors_as_sim_node_did()
  local tape = vram.tape()
  local function t(b, rg) return { id = tape:alloc(b, "activations"), b = b, rg = rg } end
  local x, w, frozen = t(100, true), t(200, true), t(1, false)
  local out = t(100, true)
  T.eq(tape:node_of({ x }, { { frozen } }, { out }), false, "no edge requires grad")
  T.eq(tape:node_of({ x, w }, { { x }, { w, 64 }, { frozen } }, { out }, false, "mm"), true,
    "recorded")
  tape:drop_of(x, nil, false, w, frozen)
  T.eq(tape:live(), 100 + 200 + 100, "the saved x and w stay, the frozen one goes")
  tape:backward(out.id)
  -- out's gradient (100), then x's (its b, 100) and w's (64, as given)
  T.eq(tape:stats().peak, 100 + 200 + 100 + 100 + 100 + 64, "gradients of x's b and w's 64")
  T.raises(function() tape:node_of({}, { 5 }, {}) end, "gradient edges[1] is not a table")
  T.raises(function() tape:node_of({}, { { { rg = true } } }, {}) end, "gradient edges[1].id")
  T.raises(function() tape:node_of({ 7 }, { { out } }, {}) end, "saved tensors[1] is not")
  T.raises(function() tape:node_of({}, { { out, alias = 70 } }, {}) end, "alias")
  T.raises(function() tape:drop_of({ id = "x" }) end, "tensor[1].id is not an integer")
end

return tests
