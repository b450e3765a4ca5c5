-- Knob advice (stdlib/fit.lua): a lever is offered only where it changes
-- the run, and every saving it shows is the simulator's, checked here
-- against separate estimates of runs written out by hand.
local vram = require("vram")
local spec = require("stdlib.spec")
local fit = require("stdlib.fit")
local compare = require("tests.lib.compare")

local root = vram.share_dir
local tests = {}

local function run_of(fields, parallel)
  local r = { mode = "train", batch = 4, seq = 512, precision = { params = "bf16" },
    optimizer = { name = "adamw", state_dtype = "fp32" }, framework = "pytorch" }
  for k, v in pairs(fields or {}) do r[k] = v end
  return spec.normalize({ model = { preset = "qwen2_5_1_5b_instruct",
    overrides = { num_hidden_layers = 4 } }, run = r, parallel = parallel },
    root .. "/tests/lua/spec.yaml", require("models.registry"))
end

local function names(list)
  local s = {}
  for _, e in ipairs(list) do s[#s + 1] = e.knobs end
  return table.concat(s, "\n")
end

local BIG = 1 << 50 -- every combination fits: the advice itself is under test

function tests.a_lever_the_run_already_uses_is_never_offered()
  local list = fit.knobs(run_of({ attention = "sdpa", grad_checkpointing = "full",
    loss = { impl = "chunked" } }), BIG)
  local all = names(list)
  T.ok(not all:find("sdpa", 1, true), "sdpa is already on")
  T.ok(not all:find("checkpointing", 1, true), "checkpointing is already on")
  T.ok(not all:find("chunked cross-entropy", 1, true), "the loss is already chunked")
  T.ok(#list > 1, "other levers remain")
  local _, _, levers = fit.knobs(run_of({ loss = { impl = "liger_fused" } }), BIG, 1)
  for _, m in ipairs(levers) do
    T.ok(m.name ~= "fused linear cross-entropy (Liger)", "the loss is Liger's already")
  end
end

function tests.inference_gets_no_training_levers()
  local list = fit.knobs(run_of({ mode = "inference", optimizer = "none" }), BIG)
  local all = names(list)
  for _, w in ipairs({ "AdamW", "LoRA", "checkpointing", "accumulation", "cross-entropy" }) do
    T.ok(not all:find(w, 1, true), w .. " is not a lever for inference")
  end
end

-- The spec's own largest movable component: with eager attention off and
-- the logits' fp32 log-softmax whole, fusing the head with the loss
-- (Liger) is offered alone, and its saving is exactly what a run written
-- with that loss needs less. The generic chunked loss is listed only where
-- it beats Liger's in its place: under autocast, where the fused loss is
-- refused (not modelled), it is the lever.
function tests.fused_linear_cross_entropy_is_offered_with_the_saving_of_a_fused_run()
  local base = run_of({ attention = "sdpa" })
  local list, base_need = fit.knobs(base, BIG)
  local got = {}
  for _, e in ipairs(list) do got[e.knobs] = e end
  local entry = got["fused linear cross-entropy (Liger)"]
  T.ok(entry, "Liger's fused linear cross-entropy is offered on its own")
  local fused = run_of({ attention = "sdpa", loss = { impl = "liger_fused" } })
  T.eq(entry and entry.need, fit.need(fused))
  T.eq(entry and entry.saving, base_need - fit.need(fused))
  T.ok(fit.need(fused) < base_need, "it saves memory")
  T.eq(base_need, fit.need(base))
  local chunked = fit.need(run_of({ attention = "sdpa", loss = { impl = "chunked" } }))
  if not got["chunked cross-entropy (1024 rows)"] then
    T.ok(chunked - fit.need(fused) > -chunked * fit.MIN_SAVING,
      "chunked left out only where Liger's needs no more")
  end
end

function tests.chunked_cross_entropy_is_the_loss_lever_under_autocast()
  local amp = { attention = "sdpa", precision = { master = "fp32", compute = "bf16" } }
  local list, base_need = fit.knobs(run_of(amp), BIG, 1)
  local got = {}
  for _, e in ipairs(list) do got[e.knobs] = e end
  T.ok(not got["fused linear cross-entropy (Liger)"], "the fused loss under autocast is refused")
  local entry = got["chunked cross-entropy (1024 rows)"]
  local c = {}
  for k, v in pairs(amp) do c[k] = v end
  c.loss = { impl = "chunked", chunk_rows = 1024 }
  T.eq(entry and entry.need, fit.need(run_of(c)), "chunked is offered with a chunked run's need")
  T.ok(entry and entry.need < base_need)
end

-- Every member of every listed combination saves at least MIN_SAVING of
-- what the combination needs without it: recomputed from scratch here by
-- applying the menu's edits to copies of the run.
local function every_lever_saves(base)
  local by_name = {}
  for _, m in ipairs(fit.levers(base)) do by_name[m.name] = m end
  local list = fit.knobs(base, BIG, 2)
  T.ok(#list > 5)
  local enablers = 0
  for _, e in ipairs(list) do
    T.eq(e.need, fit.need(fit.apply(base, (function()
      local ms = {}
      for k, p in ipairs(e.levers) do ms[k] = by_name[p] end
      return ms
    end)())), e.knobs)
    for skip = 1, #e.levers do
      local rest = {}
      for k, p in ipairs(e.levers) do if k ~= skip then rest[#rest + 1] = by_name[p] end end
      local r = fit.apply(base, rest)
      if r then
        local without = fit.need(r)
        T.ok(without - e.need >= without * fit.MIN_SAVING, e.knobs .. ": " .. e.levers[skip])
      else -- the others are no run without it: ZeRO under optimizer offload
        enablers = enablers + 1
      end
    end
  end
  return enablers
end

function tests.every_lever_in_a_combination_saves_memory_in_it()
  T.eq(every_lever_saves(run_of({})), 0, "on one GPU every lever stands alone")
end

function tests.every_lever_of_a_layout_combination_saves_memory_in_it()
  T.ok(every_lever_saves(run_of({ attention = "sdpa" }, { dp = 4 })) > 0,
    "offload needs a ZeRO stage beside it under DDP")
  -- pipelined: the search shares measuring passes between its runs, each
  -- need above is still priced alone
  T.ok(every_lever_saves(run_of({ attention = "sdpa", grad_accum = 4 }, { dp = 2, pp = 2 })) > 0,
    "offload needs a ZeRO stage beside it under a pipeline")
end

function tests.qlora_is_offered_only_where_it_saves_more_than_lora()
  local list = fit.knobs(run_of({}), BIG, 1)
  local lora, qlora
  for _, e in ipairs(list) do
    if e.knobs == "LoRA r=16 (q,k,v,o)" then lora = e.need end
    if e.knobs == "QLoRA r=16 (q,k,v,o) on nf4 weights" then qlora = e.need end
  end
  T.ok(lora and qlora and qlora < lora, "nf4 weights save on top of LoRA in a decoder")
end

-- A lever that names a PyTorch library (Liger, bitsandbytes, DeepSpeed,
-- FSDP) is offered only on a stack that has it (frameworks' libraries).
function tests.library_levers_are_offered_only_where_the_stack_has_the_library()
  local function lever_names(fields)
    local t = {}
    for _, m in ipairs(fit.levers(run_of(fields))) do t[#t + 1] = m.name end
    return table.concat(t, "\n")
  end
  local libs = { "Liger", "8-bit AdamW", "QLoRA", "DeepSpeed" }
  local torch = lever_names({})
  for _, w in ipairs(libs) do T.ok(torch:find(w, 1, true), w .. " on PyTorch") end
  for _, fw in ipairs({ "torchsharp", "jax" }) do
    local other = lever_names({ framework = fw })
    for _, w in ipairs(libs) do T.ok(not other:find(w, 1, true), w .. " is not on " .. fw) end
    T.ok(other:find("LoRA r=16", 1, true) and other:find("Adafactor", 1, true),
      "techniques any stack can use remain on " .. fw)
  end
end

-- sdpa is PyTorch's kernel (libtorch's scaled_dot_product_attention): an
-- eager-attention run is offered it on the libtorch stacks, never on JAX.
function tests.sdpa_is_offered_only_on_libtorch_stacks()
  local function offers_sdpa(fw)
    for _, m in ipairs(fit.levers(run_of({ framework = fw, attention = "eager" }))) do
      if m.name == "sdpa attention" then return true end
    end
    return false
  end
  for _, fw in ipairs({ "pytorch", "pytorch-cpu", "torchsharp", "te-fp8" }) do
    T.ok(offers_sdpa(fw), "sdpa on " .. fw)
  end
  T.ok(not offers_sdpa("jax"), "no sdpa lever on jax")
  T.ok(not names(fit.knobs(run_of({ framework = "jax", attention = "eager" }), BIG, 1))
    :find("sdpa", 1, true), "fit --knobs names no sdpa on jax")
end

-- The spec refuses LoRA over TransformerEngine's te.Linear: not offered.
function tests.no_lora_lever_under_te_fp8()
  for _, m in ipairs(fit.levers(run_of({ framework = "te-fp8" }))) do
    T.ok(not m.name:find("LoRA", 1, true), m.name .. " under te-fp8")
  end
  local ok, err = pcall(run_of, { framework = "te-fp8", lora = { rank = 16 } })
  T.ok(not ok and tostring(err.msg):find("LoRA over TransformerEngine", 1, true),
    "the spec refuses what the lever would have written")
end

-- Layers kept from one simulation of the search for the next
-- (stdlib/compose.lua M.keeping) change no figure: every combination's
-- need and categories at the peak, with and without, on one GPU and under
-- layouts, dense and MoE, checkpointed or not.
function tests.layers_kept_across_the_search_change_no_figure()
  local cases = {
    { "dense, every layer checkpointed", run_of({ grad_checkpointing = "full" }) },
    { "dense, eager attention, LoRA", run_of({ attention = "eager",
      lora = { rank = 8, targets = { "q_proj", "v_proj" } } }) },
    { "dense under dp 2", run_of({}, { dp = 2 }) },
    { "dense under tp 2 pp 2", run_of({ batch = 2 }, { tp = 2, pp = 2 }) },
  }
  local moe = spec.normalize({ model = { preset = "qwen3_30b_a3b",
    overrides = { num_hidden_layers = 5 } }, run = { mode = "train", batch = 2, seq = 64,
    precision = { params = "bf16" }, optimizer = { name = "adamw" } } },
    root .. "/tests/lua/spec.yaml", require("models.registry"))
  cases[#cases + 1] = { "MoE", moe }
  for _, c in ipairs(cases) do
    local kept = compare.knobs(c[2], 2)
    local walked = compare.walked(compare.knobs, c[2], 2)
    T.ok(next(walked) ~= nil, c[1] .. ": combinations")
    T.eq(kept, walked, c[1])
  end
end

-- A step recorded lean whose own optimizer cannot be priced from it (a
-- step that keeps something, swap.price's nil) is simulated whole: the
-- figures are the walked ones all the same.
function tests.a_lean_step_its_optimizer_refuses_is_simulated_whole()
  local swap = require("stdlib.swap_optimizer")
  local price = swap.price
  local refused = 0
  swap.price = function(rec, ...)
    if rec.lean_done then refused = refused + 1 return nil end
    return price(rec, ...)
  end
  local ok, err = pcall(function()
    local r = run_of({ lora = { rank = 8 } })
    T.eq(compare.knobs(r, 2), compare.walked(compare.knobs, r, 2), "lean prices refused")
  end)
  swap.price = price
  if not ok then error(err, 0) end
  T.ok(refused > 0, "lean recordings met")
end

-- A model built for one run serves every run that differs from it only in
-- its loss or its optimizer (stdlib/shared_setup.lua, which
-- fit.knobs keys by the run less step.UNREAD_BY_LAYERS): the step of each
-- such variant, started from the shared model, is the step simulated from
-- scratch, figure for figure (or the same refusal), for every example
-- spec and every measured truth case a step simulates (the families'
-- builds: dense, MoE, VLMs, quantized, LoRA).
function tests.a_model_built_once_serves_runs_that_differ_in_loss_or_optimizer()
  local step, runs, truth = require("stdlib.step"), require("stdlib.run"), require("stdlib.truth")
  local sharing = require("stdlib.shared_setup").sharing
  local registry = require("models.registry")
  local list = {}
  for _, name in ipairs({ "qwen2_5_1_5b_full.yaml", "yxanul.yaml", "llama_3_8b_qlora.json",
    "qwen3_4b_nvfp4_as_launched.yaml", "qwen3_4b_nvfp4_theory.yaml" }) do
    local path = root .. "/examples/specs/" .. name
    local doc = name:find("%.json$") and vram.json.load(path) or vram.yaml.load(path)
    list[#list + 1] = { name, spec.normalize(doc, path, registry) }
  end
  for _, c in ipairs(vram.json.load(root .. "/tests/truth/cases_public.json")) do
    if truth.supported(c, registry) then
      local r = truth.normalize(c, nil, registry)
      if not r.rl and not r.parallel then list[#list + 1] = { c.id, r } end
    end
  end
  local function variants(run)
    local out = {}
    for _, l in ipairs({ "cross_entropy", "liger_fused", "chunked" }) do
      if run.loss ~= l then
        local r = runs.copy(run)
        r.loss, r.loss_chunk = l, l == "chunked" and 1024 or r.loss_chunk
        out[#out + 1] = r
      end
    end
    if run.optimizer and run.mode == "train" then
      for _, o in ipairs({ "adam8bit", "adafactor" }) do
        if run.optimizer.name ~= o then
          local r = runs.copy(run)
          r.optimizer.name, r.optimizer.state_dtype = o, o == "adafactor" and "fp32" or nil
          out[#out + 1] = r
        end
      end
    end
    return out
  end
  local function outcome(ok, st)
    if not ok then return { refused = type(st) == "table" and st.msg or tostring(st) } end
    return st
  end
  local shared = 0
  for _, c in ipairs(list) do
    local cache = {}
    sharing(cache, "run", c[2], step.run, c[2])
    T.ok(cache.run ~= nil, c[1] .. ": its model kept")
    for i, v in ipairs(variants(c[2])) do
      local from_kept = outcome(pcall(sharing, cache, "run", v, step.run, v))
      local built = outcome(pcall(step.run, v))
      T.eq(from_kept, built, c[1] .. " variant " .. i)
      shared = shared + 1
    end
  end
  T.ok(shared >= 50, "variants compared: " .. shared)
end

-- The data-parallel levers (issue 17): what a layout written out by hand
-- needs, estimated on its own, is what the advice says the lever needs.
local function by_knobs(list)
  local t = {}
  for _, e in ipairs(list) do t[e.knobs] = e end
  return t
end

function tests.sharding_levers_need_what_the_layout_written_out_needs()
  local fields = { attention = "sdpa" }
  local list, base_need = fit.knobs(run_of(fields, { dp = 4 }), BIG)
  T.eq(base_need, fit.need(run_of(fields, { dp = 4 })))
  local got = by_knobs(list)
  local want = {
    ["ZeRO-1 (optimizer states over 4 ranks)"] = { dp = 4, zero = 1 },
    ["ZeRO-3 (+ parameters over 4 ranks)"] = { dp = 4, zero = 3 },
    ["FSDP full_shard over 4 ranks"] = { dp = 4, fsdp = "full_shard" },
    ["ZeRO-1 (optimizer states over 4 ranks) + optimizer offload to CPU"] =
      { dp = 4, zero = 1, offload = { optimizer = "cpu" } },
    ["ZeRO-3 (+ parameters over 4 ranks) + optimizer offload to CPU + parameter offload to CPU (ZeRO-3)"] =
      { dp = 4, zero = 3, offload = { optimizer = "cpu", params = "cpu" } },
    ["FSDP full_shard over 4 ranks + optimizer offload to CPU"] =
      { dp = 4, fsdp = "full_shard", offload = { optimizer = "cpu", params = "cpu" } },
  }
  local required = { ["ZeRO-1 (optimizer states over 4 ranks)"] = true,
    ["FSDP full_shard over 4 ranks"] = true,
    ["ZeRO-1 (optimizer states over 4 ranks) + optimizer offload to CPU"] = true }
  local needs = {}
  for name, par in pairs(want) do
    local need = fit.need(run_of(fields, par))
    needs[name] = need
    if got[name] or required[name] then
      T.eq(got[name] and got[name].need, need, name)
      T.eq(got[name] and got[name].saving, base_need - need, name .. ": saving")
      T.ok(need < base_need, name .. " saves memory")
    end
  end
  -- ZeRO-3 alone is left out only where ZeRO-1 needs no more (the
  -- gathered-parameter window outweighs the parameter shards in a
  -- four-layer model): a costlier stage must beat a cheaper one
  local z1, z3 = "ZeRO-1 (optimizer states over 4 ranks)", "ZeRO-3 (+ parameters over 4 ranks)"
  if not got[z3] then
    T.ok(needs[z1] - needs[z3] < needs[z1] * fit.MIN_SAVING, "ZeRO-3 left out: ZeRO-1 is as good")
  end
  T.ok(not got["optimizer offload to CPU"], "DDP offloads nothing without a ZeRO stage")
end

-- In the whole 28-layer model the parameter shards outweigh ZeRO-3's
-- gathered window, and ZeRO-3 is offered on its own.
function tests.zero3_is_offered_where_it_beats_the_cheaper_stages()
  local function run28(parallel)
    return spec.normalize({ model = { preset = "qwen2_5_1_5b_instruct" }, run = { mode = "train",
      batch = 1, seq = 256, precision = { params = "bf16" }, attention = "sdpa",
      optimizer = { name = "adamw", state_dtype = "fp32" } }, parallel = parallel },
      root .. "/tests/lua/spec.yaml", require("models.registry"))
  end
  local got = by_knobs(fit.knobs(run28({ dp = 8 }), BIG, 1))
  local name = "ZeRO-3 (+ parameters over 8 ranks)"
  local z3 = fit.need(run28({ dp = 8, zero = 3 }))
  T.eq(got[name] and got[name].need, z3, name)
  for _, z in ipairs({ 1, 2 }) do
    T.ok(fit.need(run28({ dp = 8, zero = z })) * (1 - fit.MIN_SAVING) > z3, "beats ZeRO-" .. z)
  end
end

function tests.a_layout_lever_the_run_already_uses_is_never_offered()
  local par = { dp = 4, zero = 3, offload = { optimizer = "cpu", params = "cpu" } }
  local list = fit.knobs(run_of({ attention = "sdpa" }, par), BIG)
  local all = names(list)
  for _, w in ipairs({ "ZeRO", "FSDP", "offload" }) do
    T.ok(not all:find(w, 1, true), w .. " is in effect already")
  end
  T.ok(#list > 1, "other levers remain")
  local fsdp = fit.knobs(run_of({ attention = "sdpa" }, { dp = 4, fsdp = "full_shard" }), BIG)
  all = names(fsdp)
  T.ok(not all:find("ZeRO", 1, true) and not all:find("full_shard", 1, true), "FSDP already")
  T.ok(all:find("FSDP CPU offload (parameters, gradients and optimizer)", 1, true),
    "FSDP's own offload is offered")
end

function tests.one_gpu_gets_zero_offload_with_the_saving_of_that_layout()
  local fields = { attention = "sdpa" }
  local list, base_need = fit.knobs(run_of(fields), BIG, 1)
  local got = by_knobs(list)
  local name = "DeepSpeed ZeRO-Offload on one GPU (stage 2, optimizer on CPU)"
  local need = fit.need(run_of(fields, { dp = 1, zero = 2, offload = { optimizer = "cpu" } }))
  T.eq(got[name] and got[name].need, need, name)
  T.ok(need < base_need, "offloading the optimizer saves on one GPU")
  T.ok(not names(list):find("ZeRO-1", 1, true), "no sharding over one rank")
end

-- With the optimizer offloaded, its states and its step live on the host:
-- the optimizer levers change no device byte there, which is why the
-- search prices such runs once (parallel.device_ignores). Written out
-- here lever by lever, each priced alone, stage 2 and 3, with FSDP's own.
function tests.under_optimizer_offload_the_optimizer_changes_no_device_byte()
  for _, layout in ipairs({ { dp = 4, zero = 2, offload = { optimizer = "cpu" } },
    { dp = 4, zero = 3, offload = { optimizer = "cpu", params = "cpu" } },
    { dp = 4, fsdp = "full_shard", offload = { optimizer = "cpu", params = "cpu" } } }) do
    local base = run_of({ attention = "sdpa" }, layout)
    T.ok(require("stdlib.parallel").device_ignores(base.parallel).optimizer, "ignored")
    local need, st = fit.need(base)
    local tried = 0
    for _, m in ipairs(fit.MENU) do
      if m.name:find("optimizer states", 1, true) or m.name:find("AdamW", 1, true)
          or m.name:find("Adafactor", 1, true) then
        local r = fit.apply(base, { m })
        T.ok(r.optimizer.name ~= base.optimizer.name
          or r.optimizer.state_dtype ~= base.optimizer.state_dtype, m.name .. " edits")
        local n, s = fit.need(r)
        T.eq(n, need, m.name)
        T.eq(s.at_peak, st.at_peak, m.name)
        tried = tried + 1
      end
    end
    T.eq(tried, 3)
  end
  T.eq(require("stdlib.parallel").device_ignores(run_of({}, { dp = 4, zero = 2 }).parallel), nil)
end

-- A layout cannot hold every-N-th checkpointing (stdlib/parallel.lua
-- refuses it): no layout lever is offered to such a run, and no lever that
-- the layout refuses is offered under a layout.
function tests.levers_a_layout_refuses_are_not_offered()
  local _, _, levers = fit.knobs(run_of({ grad_checkpointing = 2 }), BIG, 1)
  for _, m in ipairs(levers) do T.ok(not m.layout, m.name .. " under every-2nd checkpointing") end
  local _, _, under = fit.knobs(run_of({}, { dp = 2 }), BIG, 1)
  for _, m in ipairs(under) do
    T.ok(not m.name:find("QLoRA", 1, true) and not m.name:find("every 2nd", 1, true),
      m.name .. " under a layout")
  end
end

-- fit.knobs shares the run's tables with the combinations it makes until a
-- lever edits one (stdlib/fit.lua apply): nothing it prices may write into
-- them. The run after the search equals a copy taken before, for one GPU
-- (LoRA, QLoRA, optimizers, the one-GPU offload layouts), a data-parallel
-- layout and a VLM.
function tests.the_search_leaves_its_run_as_it_was()
  local runs = require("stdlib.run")
  local vlm = spec.normalize({ model = { preset = "qwen3_vl_4b_instruct",
    overrides = { num_hidden_layers = 4 } }, run = { mode = "train", batch = 1, seq = 64,
    precision = { params = "bf16" }, images = { width = 224, height = 224 } } },
    root .. "/tests/lua/spec.yaml", require("models.registry"))
  for k, run in ipairs({ run_of({ attention = "sdpa", grad_checkpointing = "full" }),
    run_of({ attention = "sdpa" }, { dp = 4 }), vlm }) do
    local before = runs.copy(run)
    local list = fit.knobs(run, BIG, 2)
    T.ok(#list > 2, "run " .. k .. ": combinations priced")
    T.eq(runs.key(run, before), runs.key(before, before), "run " .. k .. ": unchanged")
  end
end

return tests
