-- Per-rank budgets (stdlib/parallel.lua): the `parallel:` reader, model
-- states against DeepSpeed's own estimators, per-layer activations under
-- tensor / sequence parallelism against Korthikanti et al. 2022, pipeline
-- roles and offload host bytes. Expected values are written out here from
-- the published shapes and formulas, never taken from the tool's output.
local vram = require("vram")
local spec = require("stdlib.spec")
local par = require("stdlib.parallel")

local root = vram.share_dir
local WHERE = root .. "/tests/lua/spec.yaml"

local function normalize(parallel, run_over, model_over, preset)
  local r = { mode = "train", batch = 1, seq = 2048, precision = { params = "bf16" },
    optimizer = "adamw", attention = "flash" }
  for k, v in pairs(run_over or {}) do r[k] = v end
  return spec.normalize({ model = { preset = preset or "qwen2_5_1_5b_instruct",
    overrides = model_over }, run = r, parallel = parallel }, WHERE, require("models.registry"))
end

-- Model states of the one role of a pp=1 layout.
local function states(parallel, run_over, preset)
  local run = normalize(parallel, run_over, nil, preset)
  local _, info = par.simulate_role(run, run.parallel, par.roles(run.parallel, run)[1])
  local sum = 0
  for _, v in pairs(info.states) do sum = sum + v end
  return sum, info
end

local tests = {}

function tests.unknown_keys_and_bad_values_are_errors_with_the_field()
  T.raises(function() normalize({ dp = 2, zer = 3 }) end,
    "parallel.zer: unknown field; did you mean 'zero'?")
  T.raises(function() normalize({ zero = 4 }) end, "parallel.zero: must be 0, 1, 2 or 3")
  T.raises(function() normalize({ zero = 2, fsdp = "full_shard" }) end,
    "parallel.fsdp: cannot be combined with zero")
  T.raises(function() normalize({ fsdp = "full_shrad" }) end, "did you mean 'full_shard'?")
  T.raises(function() normalize({ tp = 1, sequence_parallel = true }) end,
    "parallel.sequence_parallel: needs tp > 1")
  T.raises(function() normalize({ zero = 2, offload = { params = "cpu", optimizer = "cpu" } }) end,
    "parallel.offload.params: parameter offload needs zero: 3")
  T.raises(function() normalize({ zero = 2, offload = { optimiser = "cpu" } }) end,
    "parallel.offload.optimiser: unknown field; did you mean 'optimizer'?")
  T.raises(function() normalize({ dp = 4, ep = 3 }) end, "parallel.ep: must divide dp (4)")
  T.raises(function() normalize({ dp = 4, ep = 2 }) end,
    "parallel.ep: expert parallelism needs a mixture-of-experts model")
  -- Qwen2.5-1.5B: 12 heads, 2 kv heads, 28 layers
  T.raises(function() normalize({ tp = 8 }) end, "parallel.tp: must divide num_attention_heads (12)")
  T.raises(function() normalize({ pp = 3 }) end, "must divide num_hidden_layers (28)")
  T.raises(function() normalize({ cp = 2 }, { attention = "eager" }) end,
    "parallel.cp: context parallelism (ring attention) needs run.attention sdpa or flash")
  T.raises(function() normalize({ dp = 2, stage3_max_live_parameters = 1 }) end,
    "is a ZeRO-3 knob: needs zero: 3")
  T.raises(function() normalize({ zero = 3, bucket_cap_mb = 50 }) end, "is a DDP knob")
  T.raises(function() normalize({ dp = 2 }, { mode = "inference" }) end,
    "modelled for training steps")
end

-- Qwen2.5-1.5B: P = 1,543,714,304 (tests/test_models.lua); every parameter
-- and P itself divide by 16, so no padding enters below. Largest module:
-- the (tied) embedding, 151936 x 1536.
local P = 1543714304
local LARGEST = 151936 * 1536

-- deepspeed/runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs
local function ds_zero2(total, gpus, offload)
  if offload then
    return 2 * total, total * math.max(4 * gpus, 16) * 1.5 -- gpu, cpu (per node)
  end
  return 4 * total + 16 * total // gpus
end

-- deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs
-- (zero_init, one node)
local function ds_zero3(total, largest, gpus, offload, offload_params)
  local llm = 4 * largest
  if offload then
    if offload_params then return llm, total * 18 * 1.5 end
    return llm + 2 * total // gpus, total * 16 * 1.5
  end
  return llm + 18 * total // gpus
end

function tests.zero1_model_states_equal_deepspeeds_estimate()
  -- 16-bit weights and gradients whole (2P + 2P); fp32 master, Adam m and v
  -- and the fp32 gradient partition (16P/N): DeepSpeed's stage-1/2 formula
  for _, n in ipairs({ 2, 4, 8 }) do
    local got, info = states({ dp = n, zero = 1 })
    T.eq(info.param_count, P)
    T.eq(got, ds_zero2(P, n), "ZeRO-1 on " .. n .. " GPUs")
  end
end

function tests.zero2_keeps_only_the_gradient_partition_which_the_estimator_does_not()
  -- The estimator counts full 16-bit gradients (4P); stage 2 reduces each
  -- bucket and keeps only this rank's partition: 2P - 2P/N less.
  for _, n in ipairs({ 2, 8 }) do
    local got = states({ dp = n, zero = 2 })
    T.eq(ds_zero2(P, n) - got, 2 * P - 2 * P // n, "ZeRO-2 on " .. n .. " GPUs")
  end
  -- offloaded optimizer: the GPU keeps the 16-bit weights alone, as estimated
  local got, info = states({ dp = 8, zero = 2, offload = { optimizer = "cpu" } })
  local gpu, cpu = ds_zero2(P, 8, true)
  T.eq(got, gpu)
  -- host, per rank: fp32 master, m, v and gradient of the partition (16P/N).
  -- The estimator's node figure adds a 1.5 buffer factor and, for 8 GPUs,
  -- max(4 x 8, 16) = 32 bytes/param: every rank loading fp32 weights.
  T.eq(info.host, 16 * P // 8)
  T.eq(cpu, 32 * P * 1.5)
end

function tests.zero3_model_states_and_the_grad_partition_the_estimator_leaves_out()
  -- no persistent parameters, so that every parameter is partitioned as in
  -- the estimator
  local got = states({ dp = 8, zero = 3, stage3_param_persistence_threshold = 0 })
  -- the estimator: 4 x largest layer (its gathered 16-bit weights and
  -- gradients) + 18P/N (16-bit partition 2, fp32 master 4, m 4, v 4,
  -- fp32 gradient 4). Stage 3 also keeps the reduce-scattered 16-bit
  -- gradient partition (grad_partitions_flat_buffer): 2P/N more.
  T.eq(got - ds_zero3(P, LARGEST, 8), 2 * P // 8)
  local off = states({ dp = 8, zero = 3, stage3_param_persistence_threshold = 0,
    offload = { optimizer = "cpu" } })
  T.eq(off, ds_zero3(P, LARGEST, 8, true, false))
  local all, info = states({ dp = 8, zero = 3, stage3_param_persistence_threshold = 0,
    offload = { optimizer = "cpu", params = "cpu" } })
  T.eq(all, ds_zero3(P, LARGEST, 8, true, true))
  -- host per rank 18P/N; the estimator's node figure is 18P x 1.5 (buffer)
  local _, cpu = ds_zero3(P, LARGEST, 8, true, true)
  T.eq(info.host * 8 * 1.5, cpu)
end

function tests.fsdp_cpu_offload_puts_shards_grads_and_adam_on_the_host()
  -- Qwen3-4B, 4,022,468,096 parameters (tests/lua/test_recipes.lua); the
  -- root unit (embedding 151936 x 2560 + final norm) and every layer unit
  -- divide by 4: fp32 shard, fp32 gradient and Adam m, v = 16 B per element
  local Q3 = 4022468096
  local _, info = states({ dp = 4, fsdp = "full_shard", offload = { optimizer = "cpu",
    params = "cpu" } }, { precision = { master = "fp32", compute = "bf16" } },
    "qwen3_4b_instruct_2507")
  T.eq(info.param_count, Q3)
  T.eq(info.host, 16 * Q3 // 4)
  -- on the GPU only the unsharded bf16 unit remains of the model states
  local layer = 2560 * 4096 + 2 * 2560 * 1024 + 4096 * 2560 + 2 * 128
    + 3 * 2560 * 9728 + 2 * 2560
  T.eq(info.states.unsharded_unit, 2 * layer)
  T.eq(info.states.gradients, nil)
end

-- One decoder layer's activations held from forward to backward: the
-- difference between 3 and 2 layers (no checkpointing).
local function per_layer(parallel, seq, attention)
  local function held(layers)
    local run = normalize(parallel, { seq = seq, attention = attention, optimizer = "sgd" },
      { num_hidden_layers = layers }, "qwen2_5_7b_instruct")
    local st = par.simulate_role(run, run.parallel, par.roles(run.parallel, run)[1])
    return st.phase_end.forward_end - st.baseline
  end
  return held(3) - held(2)
end

function tests.per_layer_activations_follow_korthikanti_under_tp_and_sp()
  -- Qwen2.5-7B: h = 3584, 28 heads, kv dim 512, intermediate I = 18944;
  -- bf16, flash attention, b = 1, s = 2048. Korthikanti et al. 2022 split a
  -- layer's activations into a part replicated on every tensor-parallel rank
  -- (GPT: 10sbh, the layer-norm and linear inputs and dropout masks) and a
  -- part split t ways (GPT: 24sbh + 5as^2b), and with sequence parallelism
  -- everything is split: sbh(34 + 5as/h)/t.
  local s, b, h, a, I, kv = 2048, 1, 3584, 28, 18944, 512
  local sbh = s * b * h
  -- replicated, written out for HF's RMSNorm: per norm an fp32 copy of the
  -- input (4sbh), the bf16 normalized tensor the weight multiply saves
  -- (2sbh), the fp32 1/rms per row (4sb), and the output the next linear
  -- saves (2sbh); two norms. GPT's LayerNorm keeps 2sbh per norm, so this is
  -- 6sbh + 8sb more than Korthikanti's 10sbh (and there is no dropout).
  local R = 2 * (8 * sbh + 4 * s * b)
  -- split: rotary q and k, v and the output flash attention saves, its fp32
  -- log-sum-exp; SwiGLU's gate, activation, up and product (no as^2 term:
  -- flash recomputes the attention core, as selective recompute does)
  local Ssplit = 2 * s * b * (2 * h + 2 * kv) + 4 * b * a * s + 4 * 2 * s * b * I
  local one = per_layer({ tp = 1 }, s, "flash")
  T.eq(one, R + Ssplit)
  T.eq(R - 10 * sbh, 6 * sbh + 8 * s * b)
  -- tp = 2 without SP: the replicated part stays, the rest halves
  T.eq(per_layer({ tp = 2 }, s, "flash"), R + Ssplit // 2)
  -- with SP: everything divides by t (Korthikanti eq. 4)
  T.eq(per_layer({ tp = 2, sequence_parallel = true }, s, "flash"), one // 2)
  T.eq(per_layer({ tp = 4, sequence_parallel = true }, s, "flash"), one // 4)
  -- no as^2 term with flash: doubling s doubles the layer's activations
  T.eq(per_layer({ tp = 1 }, 2 * s, "flash"), 2 * one)
  -- context parallelism: each rank keeps its s/cp tokens' activations (the
  -- ring's K/V blocks come and go within the layer)
  T.eq(per_layer({ cp = 2 }, s, "flash"), one // 2)
end

function tests.pipeline_roles_hold_the_1f1b_and_interleaved_in_flight_counts()
  local run = normalize({ pp = 4, microbatches = 8 })
  local r = par.roles(run.parallel, run)
  T.eq(#r, 4)
  T.eq({ r[1].inflight, r[2].inflight, r[3].inflight, r[4].inflight }, { 4, 3, 2, 1 })
  T.eq({ r[1].first, r[4].last, r[1].layers }, { true, true, 7 })
  -- Megatron interleaved, p = 2, v = 2: first stage (2-0-1)*2 + (2-1)*2 + 1 = 5
  -- chunk-forwards, last 0 + 2 + 1 = 3
  run = normalize({ pp = 2, pp_schedule = "interleaved", virtual_stages = 2, microbatches = 8 })
  r = par.roles(run.parallel, run)
  T.eq({ r[1].inflight, r[2].inflight, r[1].chunk_layers }, { 5, 3, 7 })
end

function tests.budget_has_one_entry_per_stage_and_the_largest_on_top()
  local run = normalize({ dp = 2, tp = 2, pp = 2, sequence_parallel = true, zero = 1,
    microbatches = 4 }, nil, { num_hidden_layers = 4 })
  local b = par.budget(run, "h100-80gb")
  T.eq(#b.per_rank, 2)
  T.eq({ b.per_rank[1].ranks, b.per_rank[2].ranks }, { "0-3", "4-7" })
  local big = math.max(b.per_rank[1].device_total_bytes, b.per_rank[2].device_total_bytes)
  T.eq(b.device_total_bytes, big)
  T.eq(b.layout.world, 8)
  -- the first stage holds 2 micro-batches, so its activations exceed one's
  T.eq(b.per_rank[1].inflight_microbatches, 2)
  -- each stage's parameters on one tp rank: 2 layers (q, k, v columns and
  -- their biases, o rows, SwiGLU split, both norms whole; 12/2 heads of 128,
  -- 2/2 kv heads), the embedding first (vocab 151936 padded to a multiple of
  -- 128 x 2 = 152064, half each), the final norm and the tied head's own
  -- copy of the embedding last
  local H, hd, I = 1536, 128, 8960
  local layer = H * 6 * hd + 6 * hd + 2 * (H * hd + hd) + 6 * hd * H + 3 * H * I // 2 + 2 * H
  local emb = 152064 // 2 * H
  T.eq(b.per_rank[1].param_count, emb + 2 * layer)
  T.eq(b.per_rank[2].param_count, emb + 2 * layer + H)
  for _, e in ipairs(b.per_rank) do T.eq(e.host_bytes, 0) end
  -- interleaved: the chunks in flight are measured as a middle chunk (no
  -- embedding, no head) on every stage, 5 on the first and 3 on the last
  run = normalize({ dp = 2, pp = 2, pp_schedule = "interleaved", virtual_stages = 2,
    microbatches = 4 }, nil, { num_hidden_layers = 8 })
  b = par.budget(run)
  T.eq({ b.per_rank[1].inflight_microbatches, b.per_rank[2].inflight_microbatches }, { 5, 3 })
  T.ok(b.per_rank[1].microbatch_held_bytes > 0)
  T.eq(b.per_rank[1].microbatch_held_bytes, b.per_rank[2].microbatch_held_bytes)
end

-- The model states read identical layers' parameters as one group (each
-- parameter once, for all its copies, stdlib/sim.lua): every scheme's
-- budget is the one with every layer built alone (run.group_layers =
-- false), to the byte, assumptions and per-rank figures included.
function tests.grouped_layers_give_the_budget_of_every_layer_built_alone()
  local function both(parallel, run_over, model_over, preset)
    local a = normalize(parallel, run_over, model_over, preset)
    local b = normalize(parallel, run_over, model_over, preset)
    b.group_layers = false
    return par.budget(a), par.budget(b)
  end
  local dense = { num_hidden_layers = 6 }
  for _, p in ipairs({ { dp = 4 }, { dp = 4, zero = 1 }, { dp = 4, zero = 2 },
    { dp = 4, zero = 2, offload = { optimizer = "cpu" } }, { dp = 4, zero = 3 },
    { dp = 4, zero = 3, stage3_param_persistence_threshold = 2000000 },
    { dp = 4, fsdp = "full_shard" }, { dp = 4, fsdp = "full_shard", fsdp_version = 2 },
    { dp = 2, tp = 2, pp = 2 } }) do
    local got, alone = both(p, { seq = 256 }, dense)
    T.eq(got, alone, par.layout_name(p))
  end
  -- LoRA: a group of frozen weights and trainable adapters
  local got, alone = both({ dp = 4, zero = 2 }, { seq = 256, lora = { rank = 8 } }, dense)
  T.eq(got, alone, "lora under zero-2")
  -- experts partitioned over dp/ep ranks: ZeRO-1 and -3
  for _, p in ipairs({ { dp = 4, ep = 2, zero = 1 }, { dp = 4, ep = 4, zero = 3 } }) do
    got, alone = both(p, { seq = 64, moe = { impl = "grouped" } }, { num_hidden_layers = 4 },
      "qwen3_30b_a3b")
    T.eq(got, alone, "qwen3-30b-a3b " .. par.layout_name(p))
  end
end

-- A lean search prices a layout whose forward and backward an earlier one
-- ran from that pass's recorded windows: every figure it keeps (peaks,
-- reserved, the categories at the peak, device total, host bytes, counts)
-- is the layout's own budget simulated alone. check prices each layout
-- (under each of `variants`, run fields over base_over; default: none)
-- in one search, compares, and counts the replays.
local LEAN_KEEP = { "device_total_bytes", "peak_bytes", "reserved_bytes", "breakdown",
  "host_bytes", "nvme_bytes", "param_count", "trainable_param_count", "rank_count",
  "microbatch_held_bytes", "fits", "headroom_bytes" }
-- b's figures, its roles by stage; only those of `stages` (optional): a
-- search leaves out a middle stage an earlier one stands for (M.budget)
local function lean_kept(b, stages)
  local out = { device_total_bytes = b.device_total_bytes, host_bytes = b.host_bytes,
    per_rank = {} }
  for _, e in ipairs(b.per_rank) do
    if not stages or stages[e.stage] then
      local k = {}
      for _, f in ipairs(LEAN_KEEP) do k[f] = e[f] end
      out.per_rank[e.stage] = k
    end
  end
  return out
end
local function lean_check(base_over, model_over, preset, layouts, gpu, variants)
  local base = normalize(nil, base_over, model_over, preset)
  local search, replayed = par.search(base, nil, true), 0
  for _, v in ipairs(variants or { {} }) do
    local over = {}
    for k, x in pairs(base_over) do over[k] = x end
    for k, x in pairs(v) do over[k] = x end
    for _, t in ipairs(layouts) do
      local r = normalize(t, over, model_over, preset)
      local before = 0
      for _ in pairs(search.replays) do before = before + 1 end
      local lean = par.budget(r, gpu, search)
      local after = 0
      for _ in pairs(search.replays) do after = after + 1 end
      if after == before then replayed = replayed + 1 end
      local stages = {}
      for _, e in ipairs(lean.per_rank) do stages[e.stage] = true end
      local alone = par.budget(r, gpu)
      local what = (preset or "qwen2.5-1.5b") .. " " .. par.layout_name(t) .. " "
        .. require("stdlib.run").canonical_text(v)
      T.eq(lean_kept(lean), lean_kept(alone, stages), what)
      -- every role but such middle stages
      T.ok(#lean.per_rank == #alone.per_rank or t.pp > 2, what .. ": roles")
    end
  end
  return replayed
end

-- The layouts below share their passes in several ways (ZeRO stages and
-- FSDP over one rank run, offloads, pipeline stages, two micro-batches,
-- ring buffers, experts).
function tests.a_lean_search_prices_each_layout_as_simulated_alone()
  local check = lean_check
  local dense = { num_hidden_layers = 4 }
  local zero = { { dp = 4 }, { dp = 4, zero = 1 }, { dp = 4, zero = 2 }, { dp = 4, zero = 3 },
    { dp = 4, fsdp = "full_shard" }, { dp = 4, fsdp = "shard_grad_op" },
    { dp = 4, fsdp = "full_shard", fsdp_version = 2 },
    { dp = 4, zero = 2, offload = { optimizer = "cpu" } },
    { dp = 4, zero = 3, offload = { optimizer = "cpu", params = "cpu" } },
    { dp = 4, fsdp = "full_shard", offload = { optimizer = "cpu", params = "cpu" } },
    { dp = 2, tp = 2, sequence_parallel = true }, { dp = 2, tp = 2, zero = 3 },
    { dp = 2, pp = 2, zero = 1 }, { dp = 2, pp = 2, zero = 2 }, { dp = 2, cp = 2, zero = 2 },
    { dp = 2, cp = 2, fsdp = "full_shard" } }
  local n = check({ seq = 256 }, dense, nil, zero)
  -- the other way round (M.fit prices the most sharded first): less
  -- sharded layouts replay the records of more sharded ones
  local back = {}
  for i = #zero, 1, -1 do back[#back + 1] = zero[i] end
  n = n + check({ seq = 256, grad_accum = 2 }, dense, nil, back, "h100")
  n = n + check({ seq = 256, grad_accum = 2 }, dense, nil, zero, "h100")
  -- one GPU under ZeRO-Offload (fit --knobs), LoRA and QLoRA-free adapters
  n = n + check({ seq = 256, grad_accum = 2, lora = { rank = 8 } }, dense, nil,
    { { zero = 2, offload = { optimizer = "cpu" } },
      { zero = 3, offload = { optimizer = "cpu", params = "cpu" } },
      { zero = 3, offload = { optimizer = "cpu" } } }, "rtx4090")
  n = n + check({ seq = 64, moe = { impl = "grouped" } }, { num_hidden_layers = 2 },
    "qwen3_30b_a3b", { { dp = 4, ep = 2, zero = 1 }, { dp = 4, ep = 2, zero = 2 },
      { dp = 4, ep = 2, zero = 3 }, { dp = 4, ep = 4, zero = 3 } })
  T.ok(n >= 28, "most layouts replayed a recorded pass (" .. n .. ")")
end

-- Runs that differ in their optimizer alone (fit --knobs' 8-bit AdamW, bf16
-- states, Adafactor), or in their loss on a stage without the head, replay
-- one record: each one's states and optimizer step its own, every figure
-- its budget's alone.
function tests.a_lean_search_replays_across_optimizers_and_headless_losses()
  local layouts = { { dp = 2, zero = 1 }, { dp = 2 }, { dp = 2, zero = 2 }, { dp = 2, zero = 3 },
    { dp = 2, fsdp = "full_shard" }, { dp = 2, zero = 2, offload = { optimizer = "cpu" } },
    { pp = 2, dp = 2, zero = 1 }, { pp = 4, microbatches = 4 }, { tp = 2, pp = 2, zero = 2 } }
  local variants = { {}, { optimizer = "adam8bit" }, { optimizer = "adafactor" },
    { optimizer = { name = "adamw", state_dtype = "bf16" } }, { optimizer = "sgd_momentum" },
    { loss = "liger_fused" }, { loss = { impl = "chunked", chunk_rows = 512 } },
    { loss = "chunked", optimizer = "adam8bit" } }
  local n = lean_check({ seq = 256 }, { num_hidden_layers = 4 }, nil, layouts, "h100", variants)
  -- pp = 1 replays across optimizers (the layouts of one variant share
  -- their passes as above); a headless stage across losses too
  T.ok(n >= 50, "most runs replayed a recorded pass (" .. n .. " of " .. #layouts * #variants
    .. ")")
end

-- M.budget remembers a rank-local run's measuring key (run.key less the
-- layout and master_dtype) by the run's key and M.local_inputs: wherever
-- two roles of the layouts of 8 GPUs (made as M.fit makes them) have equal
-- inputs, their rank-local runs have equal keys -- dense and MoE, pure
-- bf16 and fp32 master weights under autocast, per-layer lists sliced by
-- stage (gpt-oss's sliding and full attention layers).
function tests.local_inputs_name_the_rank_local_run()
  local key, with = require("stdlib.run").key, require("stdlib.run").with
  local SKIP = { parallel = true, master_dtype = true }
  local shared = 0
  for _, c in ipairs({ { { seq = 1024 } },
    { { seq = 1024, precision = { master = "fp32", compute = "bf16" } } },
    { { seq = 256, moe = { impl = "grouped" } }, { num_hidden_layers = 8 }, "qwen3_30b_a3b" },
    { { seq = 256, precision = { params = "bf16", dequantize = true } },
      { num_hidden_layers = 8 }, "gpt_oss_20b" } }) do
    local run = normalize(nil, c[1], c[2], c[3])
    local seen = {}
    for _, t in ipairs(par.layouts(run, 8)) do
      local r = with(run, {})
      r.parallel = par.check(par.read(t, WHERE, r), r, WHERE)
      for _, role in ipairs(par.roles(r.parallel, r)) do
        local from = key(r, run, SKIP) .. "#" .. par.local_inputs(r, r.parallel, role)
        local k = key(par.local_run(r, r.parallel, role), run, SKIP)
        if seen[from] then shared = shared + 1 end
        seen[from] = seen[from] or k
        T.eq(k, seen[from], (c[3] or "qwen2.5-1.5b") .. " " .. par.layout_name(t) .. " stage "
          .. role.stage)
      end
    end
  end
  T.ok(shared > 100, "most roles' keys remembered (" .. shared .. ")")
end

-- Qwen3-30B-A3B (examples/configs/qwen3_30b_a3b.json): 48 layers, hidden
-- 2048, 128 experts of width 768 (SwiGLU: 3 matrices), 30,532,122,624
-- parameters (test_models.lua's published count).
local Q30 = 30532122624
local Q30_EXPERTS = 48 * 128 * 3 * 2048 * 768

function tests.expert_parallelism_divides_the_experts_and_keeps_their_tokens()
  local function role(parallel, layers)
    local run = normalize(parallel, { seq = 256, moe = { impl = "grouped" } },
      layers and { num_hidden_layers = layers } or nil, "qwen3_30b_a3b")
    local st, info = par.simulate_role(run, run.parallel, par.roles(run.parallel, run)[1])
    return st, info
  end
  local _, i1 = role({ dp = 8 })
  local _, i8 = role({ dp = 8, ep = 8 })
  T.eq(i1.param_count, Q30)
  T.eq(i8.param_count, Q30 - Q30_EXPERTS * 7 // 8, "EP=8: 16 of 128 experts per layer")
  -- ZeRO-1 partitions the dense states over the 8 data-parallel ranks and
  -- the expert states over dp/ep = 1 (each expert lives on one rank):
  -- fp32 master = 4 B x (dense/8 + local experts)
  local _, z = role({ dp = 8, ep = 8, zero = 1 })
  T.eq(z.states.master_weights, 4 * ((Q30 - Q30_EXPERTS) // 8 + Q30_EXPERTS // 8))
  -- every token still visits top_k experts: the activations one layer keeps
  -- are the same with the experts spread over 8 ranks (the all-to-all
  -- receive buffers replace the permuted rows autograd saves)
  local function held(parallel, layers)
    local st = role(parallel, layers)
    return st.phase_end.forward_end - st.baseline
  end
  T.eq(held({ dp = 8, ep = 8 }, 3) - held({ dp = 8, ep = 8 }, 2),
    held({ dp = 8 }, 3) - held({ dp = 8 }, 2))
  -- a pipeline's first stage (no head) runs the run's grouped experts as
  -- the last does: a layer it keeps is one layer of the whole model's
  -- rank (it ran transformers' expert loop over the grouped weights)
  T.eq(held({ dp = 4, pp = 2 }, 6) - held({ dp = 4, pp = 2 }, 4),
    held({ dp = 8 }, 3) - held({ dp = 8 }, 2))
  T.raises(function() normalize({ dp = 8, ep = 3 }, nil, nil, "qwen3_30b_a3b") end,
    "parallel.ep: must divide dp (8), got 3")
  T.raises(function() normalize({ dp = 8, ep = 8, fsdp = "full_shard" }, nil, nil,
    "qwen3_30b_a3b") end, "expert parallelism with FSDP is not modelled")
  T.raises(function() normalize({ dp = 8, ep = 8 }, { moe = { impl = "loop" } }, nil,
    "qwen3_30b_a3b") end, "expert parallelism is modelled with run.moe.impl: grouped")
end

function tests.layouts_of_8_gpus_respect_the_model_and_sort_by_communication()
  -- Qwen2.5-1.5B: 12 heads (tp 8 impossible), 28 layers (pp 8 impossible)
  local run = normalize(nil, { seq = 1024 })
  local list = par.layouts(run, 8)
  for _, t in ipairs(list) do
    T.eq(t.dp * t.tp * t.pp * t.cp, 8)
    T.ok(t.tp ~= 8 and t.pp ~= 8, "tp and pp divide heads and layers")
  end
  -- each layout's run and its ranks' runs share the run's tables (shallow
  -- copies): pricing them all leaves the run as it was
  local key_of = require("stdlib.run").key
  local before = key_of(run, {})
  local fits, tried = par.fit(run, 8, 80 * 1000000000, WHERE)
  T.eq(key_of(run, {}), before, "the run priced is left as it was")
  T.eq(tried, #list)
  for i = 2, #fits do T.ok(fits[i - 1].comm <= fits[i].comm, "least communication first") end
  -- the search shares measuring passes between layouts, skips dominated
  -- pipeline stages and stops pricing a layout once it cannot fit: each
  -- need listed is still the layout's own budget priced alone, and the
  -- layouts that fit are exactly those whose need is within the budget
  local alone, pp = {}, 0
  for _, t in ipairs(list) do
    alone[par.layout_name(t)] = par.budget(normalize(t, { seq = 1024 })).device_total_bytes
    if t.pp > 1 then pp = pp + 1 end
  end
  T.ok(pp > 4, "pipelined layouts (measuring passes) among them")
  local needs = {}
  for _, v in pairs(alone) do needs[#needs + 1] = v end
  table.sort(needs)
  for _, budget in ipairs({ 80 * 1000000000, needs[#needs // 2], needs[1] - 1 }) do
    local got = par.fit(run, 8, budget, WHERE)
    local within = 0
    for _, v in pairs(alone) do if v <= budget then within = within + 1 end end
    T.eq(#got, within, "the layouts within " .. budget .. " B")
    for _, e in ipairs(got) do
      T.eq(e.need, alone[par.layout_name(e.layout)], par.layout_name(e.layout))
    end
  end
  T.ok(needs[#needs // 2] < needs[#needs], "the middle budget leaves some out")
  -- DDP on 8 ranks: a ring all-reduce of the bf16 gradients, 2 x 7/8 x 2P bytes
  local ddp = normalize({ dp = 8 }, { seq = 1024 })
  T.eq(par.comm_bytes(ddp, ddp.parallel, P), 2 * 7 * P * 2 // 8)
  -- ZeRO-3: two all-gathers and a reduce-scatter, 3 x 7/8 x 2P
  local z3 = normalize({ dp = 8, zero = 3 }, { seq = 1024 })
  T.eq(par.comm_bytes(z3, z3.parallel, P), 3 * 7 * P * 2 // 8)
end

-- A pipeline's budget keeps its passes' layers for one another (a stage's
-- measuring pass walks what its step walks again): the whole budget --
-- every rank's figures, peak phase and op, breakdown, assumptions -- is
-- the one with every layer walked, for dense (checkpointed or not), MoE,
-- interleaved stages, two micro-batches of accumulation, sequence and
-- context parallelism, and its stages' layers are taken, not walked.
function tests.a_pipeline_budgets_passes_share_their_layers()
  local compare = require("tests.lib.compare")
  local compose = require("stdlib.compose")
  local dense = { num_hidden_layers = 8 }
  local cases = {
    { { pp = 2 }, { seq = 512 }, dense },
    { { pp = 4, microbatches = 8 }, { seq = 256, grad_checkpointing = "full" }, dense },
    { { pp = 2, tp = 2, sequence_parallel = true, dp = 2, zero = 1 }, { seq = 512 }, dense },
    { { pp = 2, cp = 2, zero = 2, dp = 2 }, { seq = 512, grad_accum = 2 }, dense },
    { { pp = 2, virtual_stages = 2, pp_schedule = "interleaved", microbatches = 4 }, { seq = 256 },
      dense },
    { { pp = 2, dp = 2, ep = 2, zero = 1 }, { seq = 128, moe = { impl = "grouped" } },
      dense, "qwen3_30b_a3b" },
    { { pp = 2, fsdp = "full_shard", dp = 2 }, { seq = 256,
      precision = { master = "fp32", compute = "bf16" } }, dense },
  }
  local taken = 0
  local take = require("stdlib.compose").kept
  for _, c in ipairs(cases) do
    local r = normalize(c[1], c[2], c[3], c[4])
    local name = par.layout_name(c[1]) .. " " .. require("stdlib.run").canonical_text(c[2])
    local kept = {}
    compose.kept = function(identity)
      local K = take(identity)
      if K then kept[#kept + 1] = K end
      return K
    end
    local b = par.budget(r, "h100")
    compose.kept = take
    T.eq(b, compare.walked(par.budget, r, "h100"), name)
    local slots = 0
    for _, K in ipairs(kept) do for _ in pairs(K.cache) do slots = slots + 1 end end
    if slots > 0 then taken = taken + 1 end
  end
  T.ok(taken >= 5, "budgets whose passes kept layers (" .. taken .. " of " .. #cases .. ")")
end

-- Layers kept from one layout's pass for another's (fit --gpus:
-- stdlib/compose.lua M.keeping, named by what the layers read) change no
-- figure: every layout's need, communication and host bytes with them and
-- with every layer walked, dense (checkpointed or not), MoE and MoE after
-- a dense layer (pipeline stages with different slices of the model), every
-- layout priced and under a budget that cuts passes off midway.
function tests.layers_kept_across_layouts_change_no_figure()
  local compare = require("tests.lib.compare")
  local cases = {
    { "dense", normalize(nil, { seq = 512 }, { num_hidden_layers = 8 }) },
    { "dense, every layer checkpointed, eager", normalize(nil, { seq = 256, batch = 2,
      grad_checkpointing = "full", attention = "eager" }, { num_hidden_layers = 8 }) },
    { "MoE", normalize(nil, { seq = 256 }, { num_hidden_layers = 8 }, "qwen3_30b_a3b") },
    -- a dense first layer, then MoE ones: stages hold different slices
    { "MoE after a dense layer (MLA)", normalize(nil, { seq = 128, precision = { params = "bf16",
      dequantize = true } }, { num_hidden_layers = 8, first_k_dense_replace = 1,
      n_routed_experts = 8, num_experts_per_tok = 2, n_group = 1, topk_group = 1 },
      "deepseek_v3") },
  }
  for _, c in ipairs(cases) do
    local all = compare.layouts(c[2], 8)
    T.eq(all, compare.walked(compare.layouts, c[2], 8), c[1])
    local needs = {}
    for name, e in pairs(all) do if name ~= "tried" then needs[#needs + 1] = e.need end end
    table.sort(needs)
    T.ok(#needs > 10, c[1] .. ": layouts priced")
    local mid = needs[#needs // 2]
    local some = compare.layouts(c[2], 8, mid)
    T.eq(some, compare.walked(compare.layouts, c[2], 8, mid), c[1] .. " within " .. mid .. " B")
  end
end

return tests
