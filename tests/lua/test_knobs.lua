-- Compiled estimates over every knob (stdlib/knobs.lua, stdlib/compiled.lua)
-- against the simulator itself: for each knob, values that were probes and
-- values that were not, the spec with the knob applied by hand here,
-- normalized and simulated (stdlib/step.lua). The bytes must be the same.
local vram = require("vram")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local knobs = require("stdlib.knobs")
local compiled = require("stdlib.compiled")
local registry = require("models.registry")

local root = vram.share_dir
local where = root .. "/tests/lua/spec.yaml"

local tests = {}

local copy = require("stdlib.run").copy -- deep

-- Qwen3-VL-4B with 3 text layers (the vision tower keeps its 24: DeepStack
-- reads blocks 5, 11 and 17), LoRA r8, bf16, sdpa, the PyTorch CUDA
-- allocator's 512-byte blocks.
local BASE = { model = { preset = "qwen3_vl_4b_instruct", overrides = { num_hidden_layers = 3 } },
  run = { mode = "train", batch = 2, seq = 48, precision = { params = "bf16" },
    attention = "sdpa", images = { width = 320, height = 256 }, lora = { rank = 8 } } }

-- The simulator's answer with the knobs applied to the spec by hand.
local function simulated(base, k)
  local s = copy(base)
  local r = s.run
  r.batch, r.seq = k.batch or r.batch, k.seq or r.seq
  if k.lora_rank then r.lora.rank = k.lora_rank end
  if k.image then
    r.images.width, r.images.height = k.image.width, k.image.height
    r.images.max_pixels = k.image.max_pixels
  end
  if k.images then r.images.count = k.images end
  if k.grad_accum then r.grad_accum = k.grad_accum end
  if k.ckpt then r.grad_checkpointing = k.ckpt end
  if k.ckpt_segment then r.checkpoint_segment = k.ckpt_segment end
  if k.layers then s.model.overrides.num_hidden_layers = k.layers end
  if k.vision_layers then
    local cfg = spec.normalize(base, where, registry).hf_config
    local vc = copy(cfg.vision_config)
    vc.depth = k.vision_layers
    s.model.overrides.vision_config = vc
  end
  return step.run(spec.normalize(s, where, registry))
end

local function describe(k)
  local parts = {}
  for name, v in pairs(k) do
    parts[#parts + 1] = name .. "=" .. (type(v) == "table" and v.width and (v.width .. "x" .. v.height)
      or tostring(v))
  end
  table.sort(parts)
  return table.concat(parts, " ")
end

local function same(K, base, list)
  for _, k in ipairs(list) do
    local want = simulated(base, k)
    local what = describe(k)
    T.eq(K:peak(k), want.peak, what .. ": peak")
    local e = K:eval(k)
    T.eq(e.peak, want.peak, what .. ": eval peak")
    T.eq(e.peak_phase, want.peak_phase, what .. ": phase")
    T.eq(e.at_peak, want.at_peak, what .. ": breakdown")
  end
end

-- batch, seq, the LoRA rank and the image are sizes of one program: one
-- compiled set-up answers them all, probes or not (the probes: batch 1-4,
-- seq 1-7, rank 8, 9, 11, 16, tokens 64-66, 72, 90).
function tests.symbolic_knobs_equal_the_simulation()
  local K = knobs.new(BASE, where, registry)
  T.eq(K.symbolic, { "lora_rank", "image_tokens" }, "LoRA rank and image tokens are symbolic")
  same(K, BASE, {
    { batch = 7 }, { batch = 1 }, { batch = 2, seq = 1 }, { batch = 1, seq = 1 },
    { seq = 333 }, { seq = 5 }, { batch = 16, seq = 4096 },
    { lora_rank = 1 }, { lora_rank = 3 }, { lora_rank = 40 }, { lora_rank = 128 },
    { image = { width = 256, height = 256 } }, { image = { width = 1024, height = 768 } },
    { image = { width = 640, height = 480 } }, { image = { width = 300, height = 900 } },
    { image = { width = 1024, height = 768, max_pixels = 200000 } },
    { batch = 5, seq = 200, lora_rank = 24, image = { width = 800, height = 600 } },
    { batch = 1, seq = 64, lora_rank = 2, image = { width = 448, height = 448 } },
  })
  T.eq(K.programs, 1, "one program for all of them")
end

-- Layer counts, checkpointing, accumulation and the image count change the
-- op structure: a program each, compiled on first use, kept.
function tests.structural_knobs_equal_the_simulation()
  local K = knobs.new(BASE, where, registry)
  same(K, BASE, {
    { layers = 2 }, { layers = 5, batch = 3 }, { vision_layers = 18 },
    { vision_layers = 20, image = { width = 512, height = 384 } },
    { images = 2 }, { images = 3, seq = 100, lora_rank = 20 },
    { ckpt = "full" }, { ckpt = 2, batch = 4 }, { ckpt = "full", seq = 1 }, { ckpt_segment = 2 },
    { grad_accum = 2 }, { grad_accum = 3, batch = 1 },
    { layers = 4, images = 2, ckpt = "full", grad_accum = 2, batch = 3, seq = 70,
      lora_rank = 12, image = { width = 700, height = 500 } },
  })
  local before = K.programs
  T.eq(K:peak({ layers = 2 }), simulated(BASE, { layers = 2 }).peak, "again")
  T.eq(K.programs, before, "a structure is compiled once")
end

-- Without LoRA the rank is no size of the program: a knob that adds
-- adapters is a structure of its own.
function tests.a_rank_without_lora_in_the_spec_is_a_structure()
  local base = copy(BASE)
  base.run.lora = nil
  local K = knobs.new(base, where, registry)
  T.eq(K.symbolic, { "image_tokens" })
  local s = copy(base)
  s.run.lora = { rank = 4 }
  T.eq(K:peak({ lora_rank = 4 }), step.run(spec.normalize(s, where, registry)).peak, "rank 4")
  -- 20 micro-batches record 80 marks (was a wrong answer past 64: the
  -- program kept 64 mark slots and clamped)
  same(K, base, { { grad_accum = 20, seq = 30 } })
end

-- Pixtral (Mistral Small 3.1) places an [IMG_BREAK] token after each row of
-- patches: its image's tokens are not the merged grid's area, so the image
-- is a structure of its own (was a wrong answer with the image a size).
function tests.an_image_whose_tokens_follow_its_rows_is_a_structure()
  local base = { model = { preset = "mistral_small_3_1_24b_instruct_2503",
    overrides = { num_hidden_layers = 2 } }, run = { batch = 2, seq = 40, attention = "sdpa",
    precision = { params = "bf16" }, lora = { rank = 8 } } }
  local K = knobs.new(base, where, registry)
  T.eq(K.symbolic, { "lora_rank" })
  local s = copy(base)
  s.run.batch, s.run.images = 3, { width = 700, height = 500 }
  T.eq(K:peak({ batch = 3, image = { width = 700, height = 500 } }),
    step.run(spec.normalize(s, where, registry)).peak, "700 x 500")
end

-- A size that is not a polynomial of the program's sizes is refused with the
-- reason: a chunked loss's chunk is min(chunk_rows, rows).
function tests.a_size_that_is_no_polynomial_is_refused()
  local run = spec.normalize({ model = { preset = "qwen2_5_1_5b_instruct",
    overrides = { num_hidden_layers = 2 } }, run = { batch = 2, seq = 64, lora = { rank = 8 },
    loss = { impl = "chunked", chunk_rows = 4 } } }, where, registry)
  local est, why = compiled.try(run, { "lora_rank" })
  T.eq(est, nil)
  T.ok(why:find("cannot be compiled", 1, true), why)
  T.raises(function() compiled.compile(run, where, { sizes = { "image_tokens" } }) end,
    "this run has no image_tokens to compile over")
  local K0 = knobs.new(BASE, where, registry)
  T.raises(function() K0:peak({ nlayers = 3 }) end, "nlayers: is not a knob")
  T.raises(function() K0:peak(8) end, "test_knobs.lua:152: K:peak takes a table of knobs")
  T.raises(function() K0:eval("batch") end, "K:eval takes a table of knobs (K:eval{ batch = 8 }), got string")
  T.raises(function() K0:peak({ layers = 2, nlayers = 3 }) end, "nlayers: is not a knob")
  T.raises(function() K0:peak({ seq = 1 << 30 }) end, "seq: must be an integer from 1 to 16777216")
  T.raises(function() K0:peak({ lora_rank = 0 }) end, "lora_rank: must be an integer from 1")
  T.raises(function() K0:peak({ image = { width = 640 } }) end, "image.height: must be an integer")
  -- such a run still answers every knob, simulated, with the reason kept
  local chunked = { model = { preset = "qwen2_5_1_5b_instruct", overrides = { num_hidden_layers = 2 } },
    run = { batch = 2, seq = 64, lora = { rank = 8 }, loss = { impl = "chunked", chunk_rows = 4 } } }
  local K = knobs.new(chunked, where, registry)
  T.ok(K.refused.lora_rank and K.refused.lora_rank:find("cannot be compiled", 1, true))
  local s = copy(chunked)
  s.run.seq, s.run.lora.rank = 40, 16
  T.eq(K:peak({ seq = 40, lora_rank = 16 }), step.run(spec.normalize(s, where, registry)).peak)
end

-- A size-dependent branch past every probe (the probes never exceed 21
-- rows): a chunk of 128 rows, Liger's power-of-two chunks, litgpt's chunks
-- of 128 tokens, an expert capacity. Each is refused where it is computed
-- (Sim:sized), with the reason, and K answers as the simulator at sizes
-- far past the probes. (A compiled program took the one-chunk structure of
-- the probes: 6,318,864,896 B against the simulator's 3,549,295,104 at
-- seq 1024 for the first.)
function tests.a_branch_past_the_probes_is_refused_where_it_is_made()
  local cases = {
    { { impl = "chunked", chunk_rows = 128 }, "chunk is min(chunk_rows, rows)" },
    { { impl = "liger_fused" }, "power of two rows" },
    { { impl = "litgpt_chunked", chunk_tokens = 128 }, "ceil(seq / chunk_tokens)" },
  }
  for _, c in ipairs(cases) do
    local sp = { model = { preset = "qwen2_5_1_5b_instruct", overrides = { num_hidden_layers = 2 } },
      run = { batch = 2, seq = 64, loss = c[1] } }
    local est, why = compiled.try(spec.normalize(sp, where, registry), {})
    T.eq(est, nil, c[1].impl)
    T.ok(why and why:find(c[2], 1, true), why)
    local K = knobs.new(sp, where, registry)
    for _, t in ipairs({ 1024, 4096 }) do
      local s = copy(sp)
      s.run.seq = t
      T.eq(K:peak({ seq = t }), step.run(spec.normalize(s, where, registry)).peak,
        c[1].impl .. ", seq " .. t)
    end
  end
  -- an RL update: ceil(batch / minibatch) minibatch steps (the probes'
  -- batches never exceed a minibatch of 8: a PPO spec with minibatch 8
  -- swept at batch 16 said 74.0 GB where the simulator says 62.4)
  local ppo = { model = { preset = "qwen2_5_1_5b_instruct", overrides = { num_hidden_layers = 2 } },
    run = { mode = "ppo", batch = 4, seq = 32, rl = { new_tokens = 4, minibatch = 8 } } }
  local rest, rwhy = compiled.try(spec.normalize(ppo, where, registry), {})
  T.eq(rest, nil)
  T.ok(rwhy and rwhy:find("ceil(batch / minibatch) minibatches", 1, true), rwhy)
  local KR = knobs.new(ppo, where, registry)
  for _, b in ipairs({ 2, 16 }) do
    local s = copy(ppo)
    s.run.batch = b
    T.eq(KR:peak({ batch = b }), step.run(spec.normalize(s, where, registry)).peak, "ppo batch " .. b)
  end
  local moe = { model = { preset = "mixtral_8x7b_v0_1", overrides = { num_hidden_layers = 2 } },
    run = { mode = "train", batch = 2, seq = 64, precision = { params = "bf16" },
      attention = "sdpa", moe = { impl = "grouped", capacity_factor = 1.25 } } }
  local est, why = compiled.try(spec.normalize(moe, where, registry), {})
  T.eq(est, nil)
  T.ok(why:find("no polynomial in the sizes: an expert's capacity", 1, true), why)
  -- a multi-GPU layout's budget says the same (stdlib/compiled_parallel.lua)
  local lay = copy(moe)
  lay.parallel = { dp = 2, zero = 1 }
  local K = knobs.new(lay, where, registry)
  T.ok(K.refused.parallel and K.refused.parallel:find("an expert's capacity", 1, true),
    K.refused.parallel)
end

-- A spec with a parallel: table: every field of it is a knob, and the
-- answer is the largest rank's device total, the figure `vramlua estimate`
-- reports (parallel.budget on the spec normalized, no --gpu: the spec's
-- own) -- here for the example spec edited by hand at each knob set.
local par = require("stdlib.parallel")

local function estimated(path, edit)
  local s = vram.yaml.load(path)
  edit(s)
  return par.budget(spec.normalize(s, path, registry), nil).device_total_bytes
end

function tests.parallel_degrees_are_knobs()
  local path = root .. "/examples/specs/qwen2_5_7b_tp2_pp2_dp2.yaml"
  local sp = vram.yaml.load(path)
  local K = knobs.new(sp, path, registry)
  T.eq(K.refused.parallel, nil, "the spec's layout compiles")
  local cases = {
    {}, { batch = 2 }, { seq = 2048 }, { tp = 4 }, { pp = 4, microbatches = 4 },
    { pp = 1, dp = 4 }, { tp = 1, sequence_parallel = knobs.UNSET, dp = 4 },
    { dp = 1, zero = 0 }, { zero = 3 }, { tp = 4, pp = 1, dp = 2, batch = 2, seq = 1024 },
    { pp = 2, pp_schedule = "interleaved", virtual_stages = 2, seq = 3072 },
    { cp = 2, dp = 1, batch = 2 },
  }
  for _, k in ipairs(cases) do
    local want = estimated(path, function(s)
      for name, v in pairs(k) do
        if name == "batch" or name == "seq" then s.run[name] = v
        elseif v == knobs.UNSET then s.parallel[name] = nil
        else s.parallel[name] = v end
      end
    end)
    local what = describe(k)
    T.eq(K:peak(k), want, what)
    T.eq(K:eval(k).device_total, want, what .. ": eval")
  end
  T.eq(K.simulated, #cases, "each knob set simulated once")
  K:peak({ tp = 4 })
  T.eq(K.simulated, #cases, "and kept")
  -- a layout asked at many sizes is compiled once its simulations have
  -- cost what the spec's own compile did, and answers as simulated
  local programs, t = K.programs, 1024
  while K.programs == programs and t <= 64 * 1024 do
    t = t + 1024
    T.eq(K:peak({ tp = 4, seq = t }), estimated(path, function(s)
      s.run.seq, s.parallel.tp = t, 4 end), "tp 4, seq " .. t)
  end
  T.eq(K.programs, programs + 1, "compiled once its simulations cost a compile")
  T.ok(K.layouts[require("stdlib.run").key({ tp = 4 }, {})], "and kept")
  for _, t2 in ipairs({ t + 2048, 3 * t }) do
    T.eq(K:peak({ tp = 4, seq = t2 }), estimated(path, function(s)
      s.run.seq, s.parallel.tp = t2, 4 end), "tp 4 compiled, seq " .. t2)
  end
  -- ring attention's buffers have no program: that layout, once asked
  -- often enough, is simulated, and says why
  K.rent[require("stdlib.run").key({ cp = 2, dp = 1 }, {})] = math.huge
  T.eq(K:peak({ cp = 2, dp = 1, batch = 2, seq = 2048 }), estimated(path, function(s)
    s.run.batch, s.run.seq, s.parallel.cp, s.parallel.dp = 2, 2048, 2, 1 end))
  local found = false
  for _, why in ipairs(K.failed) do found = found or why:find("cp > 1", 1, true) ~= nil end
  T.ok(found, "the cp layout's refusal is reported")
  -- an estimate's own errors, named as the spec's fields
  T.raises(function() K:peak({ tp = 1 }) end, "parallel.sequence_parallel: needs tp > 1")
  T.raises(function() K:peak({ tp = 3 }) end, "parallel.tp: must divide num_attention_heads")
  T.raises(function() K:peak({ dpp = 2 }) end, "dpp: is not a knob")
  -- ZeRO-3 over 8 GPUs, with checkpointing: the degrees and the sizes
  local zpath = root .. "/examples/specs/mistral_small_24b_zero3_8gpu.yaml"
  local Z = knobs.new(vram.yaml.load(zpath), zpath, registry)
  for _, k in ipairs({ { dp = 4 }, { dp = 2, batch = 2 }, { offload = { optimizer = "cpu" } }, { seq = 8192, dp = 16 },
    { ckpt = "none", seq = 1024 } }) do
    T.eq(Z:peak(k), estimated(zpath, function(s)
      for name, v in pairs(k) do
        if name == "batch" or name == "seq" then s.run[name] = v
        elseif name == "ckpt" then s.run.grad_checkpointing = v
        else s.parallel[name] = v end
      end
    end), describe(k))
  end
  -- a one-GPU spec has no parallel knobs
  T.raises(function() knobs.new(BASE, where, registry):peak({ tp = 2 }) end,
    "tp: is a parallel knob: the spec has no parallel: table")
end

-- A layout's budget compiled over batch and seq (stdlib/compiled_parallel.lua):
-- the largest rank's device total equals the spec edited and simulated at
-- every point a program answers (the probes, past them, odd sizes, the
-- batch-1 line; seq in whole multiples of tp under sequence parallelism),
-- and a point no program answers is simulated.
function tests.parallel_budgets_should_compile_over_batch_and_seq()
  for _, name in ipairs({ "qwen2_5_7b_tp2_pp2_dp2", "mistral_small_24b_zero3_8gpu",
    "qwen3_4b_fsdp_cpu_offload", "qwen3_30b_a3b_ep8_8gpu" }) do
    local path = root .. "/examples/specs/" .. name .. ".yaml"
    local K = knobs.new(vram.yaml.load(path), path, registry)
    T.eq(K.refused.parallel, nil, name .. " compiles")
    local est = K:layout({}, true)
    local answered = 0
    for _, b in ipairs({ 1, 2, 3, 5 }) do
      for _, t in ipairs({ 2, 4, 6, 10, 512, 2050, 4096 }) do
        local got = est:device_total(b, t)
        if got then
          answered = answered + 1
          local want = estimated(path, function(s) s.run.batch, s.run.seq = b, t end)
          T.eq(got, want, ("%s batch %d seq %d"):format(name, b, t))
          T.eq(K:peak({ batch = b, seq = t }), want)
        end
      end
    end
    T.ok(answered >= 24, name .. ": " .. answered .. " points compiled")
    T.eq(K.simulated, 0, name .. ": no point simulated")
    -- a sweep's row in one call: device_total's answer at every seq it
    -- gives one for, nil where device_total must answer itself
    local seqs = { 1, 2, 3, 4, 6, 10, 512, 2050, 4096, 7 }
    for _, b in ipairs({ 1, 2, 3, 5 }) do
      local row = est:device_line(b, seqs)
      for i, t in ipairs(seqs) do
        if row[i] ~= nil then T.eq(row[i], est:device_total(b, t), ("%s row %d seq %d"):format(name, b, t)) end
      end
      if b > 1 then T.ok(row[7] ~= nil, name .. ": the row answers seq 512 at batch " .. b) end
    end
  end
  -- experts in transformers' loop (no ep): programs per remainder of rows x
  -- top_k by the experts; sizes of every remainder of Mixtral's (8 experts,
  -- top-2: 0, 2, 4, 6), as simulated
  local mix = { model = { preset = "mixtral_8x7b_v0_1", overrides = { num_hidden_layers = 2 } },
    run = { mode = "train", batch = 2, seq = 64, precision = { params = "bf16" },
      attention = "sdpa" }, parallel = { dp = 2, zero = 1 } }
  local KM = knobs.new(mix, where, registry)
  T.eq(KM.refused.parallel, nil, "an expert loop's layout compiles")
  for _, bt in ipairs({ { 2, 64 }, { 3, 5 }, { 1, 9 }, { 3, 7 }, { 2, 3 }, { 5, 333 } }) do
    local s = copy(mix)
    s.run.batch, s.run.seq = bt[1], bt[2]
    T.eq(KM:layout({}, true):device_total(bt[1], bt[2]),
      par.budget(spec.normalize(s, where, registry)).device_total_bytes,
      ("Mixtral dp2, batch %d, seq %d"):format(bt[1], bt[2]))
  end
  -- under sequence parallelism an odd seq has no program: simulated
  local path = root .. "/examples/specs/qwen2_5_7b_tp2_pp2_dp2.yaml"
  local K = knobs.new(vram.yaml.load(path), path, registry)
  T.eq(K:layout({}, true):device_total(2, 1001), nil)
  T.eq(K:peak({ batch = 2, seq = 1001 }), estimated(path, function(s) s.run.batch, s.run.seq = 2, 1001 end))
  T.eq(K.simulated, 1)
end

-- Mixture of experts, transformers' expert loop: each expert gets floor or
-- ceil of rows x top_k / experts tokens, so the programs are per remainder
-- of rows x top_k by the experts, in the quotient (stdlib/compiled.lua
-- expert_rows); below one token per expert the step is simulated. Sizes
-- on both sides of every remainder class, probes and not.
local function moe_spec(preset, run)
  local r = { mode = "train", batch = 2, seq = 64, precision = { params = "bf16" },
    attention = "sdpa" }
  for k, v in pairs(run or {}) do r[k] = v end
  return { model = { preset = preset, overrides = { num_hidden_layers = 2 } }, run = r }
end

function tests.an_expert_loop_compiles_per_remainder()
  local mix = moe_spec("mixtral_8x7b_v0_1", { lora = { rank = 8 } })
  local K = knobs.new(mix, where, registry)
  T.eq(K.symbolic, { "lora_rank" }, "the rank a size beside the experts' quotient")
  T.ok(getmetatable(K.base_entry).__index ~= nil and K.base_entry.sets ~= nil, "an expert loop")
  local ks = {
    { batch = 1, seq = 1 }, { batch = 1, seq = 3 }, { batch = 3, seq = 1 }, { batch = 1, seq = 9 },
    { batch = 1, seq = 7 }, { batch = 3, seq = 5 },
    { batch = 2, seq = 5 }, { batch = 3, seq = 7 }, { batch = 5, seq = 333 },
    { batch = 16, seq = 4096 }, { seq = 1001 }, { batch = 7, seq = 2, lora_rank = 40 },
    { lora_rank = 3, seq = 99 }, { grad_accum = 2, batch = 3, seq = 50 }, { ckpt = "full", seq = 77 },
  }
  local function check(Kx, base, list)
    for _, k in ipairs(list) do
      local s = copy(base)
      for name, v in pairs(k) do
        if name == "lora_rank" then s.run.lora.rank = v
        elseif name == "ckpt" then s.run.grad_checkpointing = v
        else s.run[name] = v end
      end
      local want = step.run(spec.normalize(s, where, registry))
      T.eq(Kx:peak(k), want.peak, describe(k))
      local e = Kx:eval(k)
      T.eq({ e.peak, e.peak_phase, e.at_peak }, { want.peak, want.peak_phase, want.at_peak },
        describe(k) .. ": eval")
    end
  end
  check(K, mix, ks)
  local n = 0
  for _, set in pairs(K.base_entry.sets) do n = n + (set.prog and 1 or 0) end
  T.eq(n, 4, "Mixtral's 8 experts, top-2: remainders 0, 2, 4, 6")
  -- Qwen3-30B-A3B: 128 experts, top-8, a shared-expert-free sparse block
  local q = moe_spec("qwen3_30b_a3b")
  check(knobs.new(q, where, registry), q, { { batch = 2, seq = 64 }, { batch = 3, seq = 5 },
    { batch = 1, seq = 17 }, { batch = 4, seq = 1000 }, { batch = 1, seq = 15 } })
end

-- One KV head under eager attention: the expanded K and V are views at
-- batch 1 and copies above it. A probe traces the general case (as it does
-- for the other operands), so the run compiles, and the batch-1 line has
-- programs of its own; every size as simulated. (It was refused: the
-- probes at batch 1 traced the views, those at batch 2 the copies.)
function tests.one_kv_head_under_eager_attention_should_compile()
  local sp = { model = { preset = "qwen2_5_1_5b_instruct",
    overrides = { num_hidden_layers = 2, num_key_value_heads = 1 } },
    run = { batch = 2, seq = 64, attention = "eager" } }
  local est, why = compiled.try(spec.normalize(sp, where, registry), {})
  T.ok(est, why)
  for _, k in ipairs({ { 1, 1 }, { 1, 64 }, { 2, 1 }, { 2, 64 }, { 3, 1000 }, { 1, 777 } }) do
    local s = copy(sp)
    s.run.batch, s.run.seq = k[1], k[2]
    T.eq(est:peak(k[1], k[2]), step.run(spec.normalize(s, where, registry)).peak,
      ("batch %d, seq %d"):format(k[1], k[2]))
  end
end

-- A capacity factor caps each expert at ceil(cf x rows x top_k / experts):
-- refused with the reason, and every knob still answered (simulated).
function tests.an_expert_capacity_is_refused_with_the_reason()
  local sp = moe_spec("mixtral_8x7b_v0_1", { moe = { impl = "grouped", capacity_factor = 1.25 } })
  local run = spec.normalize(sp, where, registry)
  local est, why = compiled.try(run, {})
  T.eq(est, nil)
  T.ok(why:find("capacity is ceil(capacity_factor x rows x top_k / experts)", 1, true), why)
  local K = knobs.new(sp, where, registry)
  local s = copy(sp)
  s.run.batch, s.run.seq = 3, 41
  T.eq(K:peak({ batch = 3, seq = 41 }), step.run(spec.normalize(s, where, registry)).peak)
  -- grouped and dropless: one permuted buffer of rows x top_k rows, a program
  local g = moe_spec("mixtral_8x7b_v0_1", { moe = { impl = "grouped" } })
  T.ok(compiled.try(spec.normalize(g, where, registry), {}), "grouped compiles")
  -- a VLM's decoder rows are not batch x seq: its expert loop is refused, said so
  local vlm = moe_spec("qwen3_vl_30b_a3b_instruct", { images = { width = 64, height = 64 } })
  local _, w = compiled.try(spec.normalize(vlm, where, registry), {})
  T.ok(w:find("compiled per remainder only for a text-only training step", 1, true), w)
end

return tests
