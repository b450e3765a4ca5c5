-- One measured step, composed from a model family and a run: baseline
-- (weights, optimizer state, buffers, inputs), then training (forward,
-- backward, optimizer, zero_grad), inference (forward under no_grad) or
-- generation (prefill + decode with a KV cache).
local Sim = require("stdlib.sim")
local optim = require("stdlib.optim")
local loss = require("stdlib.loss")
local errors = require("stdlib.errors")
local frameworks = require("stdlib.frameworks")
local xla = require("stdlib.xla")
local compose = require("stdlib.compose")

local M = {}

-- peft's "all-linear": every nn.Linear but the output layer (lm_head, a
-- classifier), fused and latent-attention projections included.
local LINEAR_LEAVES = { q_proj = true, k_proj = true, v_proj = true, o_proj = true,
  gate_proj = true, up_proj = true, down_proj = true, out_proj = true, fc1 = true, fc2 = true,
  linear_1 = true, linear_2 = true, qkv_proj = true, gate_up_proj = true, q_a_proj = true,
  q_b_proj = true, kv_a_proj_with_mqa = true, kv_b_proj = true,
  -- an MoE router that is an nn.Linear (stdlib/moe.lua's router_linear),
  -- Qwen2-MoE's shared_expert_gate (Linear(H, 1))
  gate = true, shared_expert_gate = true }

-- lora.targets when a run names none: the attention projections, fused
-- qkv_proj where the family has it (Phi-3); the names a model lacks are
-- skipped, but at least one must match.
M.DEFAULT_LORA_TARGETS = { "q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj" }
function M.default_lora(r, alpha)
  return { r = r, alpha = alpha or 2 * r, targets = M.DEFAULT_LORA_TARGETS, default = true }
end

-- trainable(name) and lora(name) for a module leaf name under a run.
-- part: which tower the module belongs to ("llm", "vision", "projector").
-- The second value, check(), raises when a name in lora.targets matched no
-- module the family built: a target is never dropped silently.
local function policies(run)
  local frozen = {}
  for _, f in ipairs(run.frozen or {}) do frozen[f] = true end
  local lo = run.lora
  local save = {}
  for _, m in ipairs(lo and lo.modules_to_save or {}) do save[m] = true end
  local targets, seen = {}, {}
  if lo and lo.targets ~= "all-linear" then
    for _, t in ipairs(lo.targets) do targets[t] = true end
  end
  local function lora_for(name, part)
    seen[name] = true
    if not lo or frozen[part] then return nil end -- a frozen tower gets no adapters
    if lo.targets == "all-linear" then
      -- embed_tokens and lm_head are queried too; all-linear skips both
      return LINEAR_LEAVES[name] and { r = lo.r, dora = lo.dora, dropout = lo.dropout } or nil
    end
    if targets[name] then
      if name == "classifier" then
        errors.input(lo.where, "run.lora.targets", "'classifier' trains in full "
          .. "(peft's modules_to_save), it takes no adapter")
      end
      return { r = lo.r, dora = lo.dora, dropout = lo.dropout }
    end
  end
  local function check()
    if not lo or lo.targets == "all-linear" then return end
    local known = {}
    for k in pairs(seen) do known[#known + 1] = k end
    table.sort(known)
    local any = false
    for _, t in ipairs(lo.targets) do any = any or seen[t] end
    for i, t in ipairs(lo.targets) do
      if not seen[t] and not (lo.default and any) then
        local fused = M.holding(t, known)
        local hint = not fused and errors.suggest(t, known)
        errors.input(lo.where, "run.lora.targets[" .. i .. "]", ("no module named '%s' in "
          .. "this model%s"):format(t, fused and ("; this model holds it in " .. fused)
          or hint and ("; did you mean '" .. hint .. "'?")
          or (" (modules: " .. table.concat(known, ", ") .. ")")))
      end
    end
  end
  return function(part)
    local function trainable(name)
      if lo and save[name] then return true end -- peft's trainable copy (modules_to_save)
      if lo and not (part == "head" and name == "classifier") then return false end
      if frozen[part] then return false end
      if name == "embed_tokens" and frozen.embeddings then return false end
      return true
    end
    return trainable, function(name) return lora_for(name, part) end
  end, check
end
M.policies = policies

-- The modules that hold a projection another layout splits out: q_proj
-- lives in Phi-3's qkv_proj or MLA's q_a_proj/q_b_proj, up_proj in
-- gate_up_proj. A spelling hint would name a different projection
-- (q_proj -> o_proj), and LoRA on it is not what was asked.
function M.holding(target, known)
  local stem = target:match("^(%a+)_proj$")
  if not stem then return nil end
  local out = {}
  for _, k in ipairs(known) do
    local head = k:match("^(.-)_proj")
    for tok in (head or ""):gmatch("[^_]+") do
      if tok == stem or (#stem == 1 and tok:match("^[qkv]+$") and tok:find(stem, 1, true)) then
        out[#out + 1] = "'" .. k .. "'"
        break
      end
    end
  end
  return #out > 0 and table.concat(out, ", ") or nil
end

-- peft's modules_to_save: the named module trains as a copy (its parameters
-- here, made trainable by policies) while the original stays beside it,
-- frozen: one more copy of its bytes. A tied embedding/head pair is not
-- modelled (peft unties them).
function M.modules_to_save(S, run, all)
  local lo = run.lora
  for i, name in ipairs(lo and lo.modules_to_save or {}) do
    local field = "run.lora.modules_to_save[" .. i .. "]"
    if run.text and run.text.tie and (name == "embed_tokens" or name == "lm_head") then
      errors.input(lo.where or run.id, field, "'" .. name .. "' of a model with tied "
        .. "embeddings is not modelled (peft's copy unties them)")
    end
    local found, known = false, {}
    for _, p in ipairs(Sim.expand(all)) do
      if p.label then known[#known + 1] = p.label end
      if p.label == name or (p.label or ""):sub(1, #name + 1) == name .. "." then
        found = true
        if p.b > 0 then S.tape:alloc(p.b, "weights", p.label .. ".original_module") end
      end
    end
    if not found then
      local hint = errors.suggest(name, known)
      errors.input(lo.where or run.id, field, ("no module named '%s' in this model%s"):format(
        name, hint and ("; did you mean '" .. hint .. "'?") or ""))
    end
  end
end

-- Every parameter tensor the tape knows, in creation order, that trains
-- (of a group of identical layers' parameters, a group of those that train).
local function trainable_params(S, all)
  local out = {}
  for _, p in ipairs(all) do
    if p.group then
      local tr = {}
      for _, q in ipairs(p.params) do if q.rg then tr[#tr + 1] = q end end
      if #tr > 0 then out[#out + 1] = Sim.subgroup(p, tr) end
    elseif p.rg then
      out[#out + 1] = p
    end
  end
  return out
end
M.trainable = trainable_params


-- What a model's layers never read: the loss (stdlib/loss.lua) and the
-- optimizer (its states and step come before and after them). Runs that
-- differ only there walk their layers alike, where the tape stands alike
-- (stdlib/compose.lua M.keeping checks that): run.key skips them.
M.UNREAD_BY_LAYERS = { optimizer = true }
for k in pairs(loss.FIELDS) do M.UNREAD_BY_LAYERS[k] = true end

-- family: a table with build(S, run, pol) -> model and
-- forward_loss / forward_logits / generate functions.

-- A simulator with the run's allocator profile (stdlib/frameworks/).
-- identity (optional): what tells this simulator from the others the run
-- makes, for layers kept across simulations (stdlib/compose.lua M.kept).
function M.new_sim(run, identity)
  local alloc = frameworks.of(run).allocator
  local S = Sim.new({ round = alloc and alloc.round })
  -- CPU kernels' own buffers follow the run's framework, also in a
  -- compiled-estimate probe (which counts exact bytes as pytorch-cpu)
  S.cpu = frameworks.get(run.kernels_of or run.framework).cpu_kernels or false
  S.general_sizes = (run.trace and not run.trace_exact) and true or nil
  S.probe = run.trace and true or nil -- Sim:sized refuses what is no polynomial
  -- identical layers and steps may be composed (models/decoder.lua's
  -- grad-free layers, repeat_steps below), not in a compiled-estimate
  -- probe; a timeline then gets the composed events copied (timeline_repeat)
  S.composable = (run.compose == nil or run.compose == true) and not run.trace
  S.timeline = run.timeline and true or nil
  S.sparkline = run.timeline == "sparkline" or nil -- lean samples (stdlib/timeline.lua collect)
  -- a drawn generation draws every decode step (up to causal_lm's
  -- DRAWN_DECODE_STEPS) for a page (estimate --html); a sparkline's columns
  -- cannot show them, so it draws the last alone
  S.draw_decode = S.timeline and run.draw_decode and true or nil
  -- layers kept from an earlier simulation of a search (stdlib/compose.lua)
  S.kept = S.composable and not S.timeline and compose.kept(identity) or nil
  -- identical layers' parameters built once and repeated by the tape
  -- (Sim:build_layers), unless compose is off (or run.group_layers is
  -- false: tests/lua/test_compose.lua's reference, every layer built)
  S.group_layers = run.compose ~= false and run.group_layers ~= false
  S.sum_out_of_place = run.grad_sum == "out_of_place" -- torch < 2.0 (stdlib/truth.lua)
  if alloc then S.tape:rounding(alloc.round, alloc.small_max, alloc.large_round) end
  if run.trace then S.tape:trace(run.batch, run.seq) end -- a compiled-estimate probe
  if run.timeline then S.tape:timeline(true) end -- a report draws the step
  S.jit = xla.rules(run) -- a jitted framework's rules (stdlib/frameworks/jax.lua), or nil
  -- once the simulation is over its tape goes to the next one
  -- (tape:recycle), unless it drew a timeline or traced a program: those
  -- stay readable (a caller may read the events, tests/lua/test_compose.lua)
  S.recycle = not (run.timeline or run.trace)
  return S
end

-- The timeline S's tape recorded, collected (lean for a sparkline), or nil
-- when it recorded none (stdlib.timeline loads only then).
function M.timeline(S)
  if S.tape:timeline_len() == 0 then return nil end
  return require("stdlib.timeline").collect(S.tape, nil, S.sparkline)
end

-- A probe's trace and the names its ops refer to (stdlib/compiled.lua).
-- The simulation is over: its tape goes to the next one (S.recycle).
function M.finish_trace(S, st)
  st.trace = S.tape:take_trace()
  if st.trace then st.names = S.tape:names() end
  st.timeline = M.timeline(S)
  if st.timeline then st.timeline.skipped_decode = S.timeline_skipped end
  if S.recycle then S.tape:recycle() end
  return st
end

-- What stdlib/xla.lua's terms need of a jitted training step: the
-- arguments live when it is called and the state it returns.
function M.xla_record(S, trainable, state_bytes, arguments)
  local pb = Sim.sum(trainable, "b")
  return { arguments = arguments, state = pb + state_bytes, donate = S.jit.donate }
end

-- Parameter and trainable counts of every parameter created.
function M.counts(st, all)
  local n, tr = 0, 0
  for _, p in ipairs(all) do
    if p.group then
      for _, q in ipairs(p.params) do
        n = n + q.n * p.count
        if q.rg then tr = tr + q.n * p.count end
      end
    else
      n = n + p.n
      if p.rg then tr = tr + p.n end
    end
  end
  st.param_count, st.trainable_count = n, tr
  return st
end

-- Runs step() n times (micro-batches, RL minibatches). Once a step leaves
-- every category's live bytes as it found them, the next would replay the
-- same events from the same state and reach no higher peak (the tape keeps
-- the first), so the rest are skipped, a timeline getting that step's
-- events again -- unless compose is off or the tape is traced
-- (tests/lua/test_fastpath.lua compares).
function M.repeat_steps(S, n, step)
  local tape = S.tape
  local fast = n > 1 and S.composable
  local before = fast and tape:live_by_category()
  for i = 1, n do
    local first = S.timeline and tape:timeline_len() + 1
    step()
    if fast and i < n then
      local now, same = tape:live_by_category(), true
      for cat, b in pairs(now) do same = same and before[cat] == b end
      if same then
        if first then tape:timeline_repeat(first, tape:timeline_len(), n - i) end
        return
      end
      before = now
    end
  end
end

-- The model built and loaded on S, its adapters made (the load phase, then
-- the setup's first part). Returns the model.
local function setup(S, family, run)
  local pol, check = policies(run)
  local tape = S.tape
  tape:phase("load") -- the weights arriving (stdlib/load.lua)
  local load = require("stdlib.load")
  load.begin(S, run)
  local model = family.build(S, run, pol)
  load.finish(S, run)
  tape:phase("setup") -- adapters, optimizer state, inputs
  S:flush_adapters()
  M.modules_to_save(S, run, S.params)
  check()
  return model
end

-- While a search shares its models (stdlib/shared_setup.lua), its setup in
-- place of the one above: setup_override(S, family, run, setup [, tag]) ->
-- model (tag: a layout's pass, stdlib/parallel.lua).
M.setup_override = nil

-- make(S, family, run) -> model, or the override's model while there is one.
function M.built(S, family, run, make, tag)
  local override = M.setup_override
  if override then return override(S, family, run, make, tag) end
  return make(S, family, run)
end

-- rec (optional): stdlib/swap_optimizer.lua's recorder, told the seams of
-- a training step so that other optimizers can be priced on it (not
-- under a jitted framework, a timeline or a compiled-estimate probe).
function M.simulate(family, run, rec)
  local S = M.new_sim(run, "step")
  local tape = S.tape
  local model = M.built(S, family, run, setup)
  local all = S.params -- every parameter, in creation order (tied weights once)
  local train = run.mode == "train"
  local trainable = trainable_params(S, all)
  if not train or S.jit or run.timeline or run.trace then rec = nil end
  -- a lean recording (stdlib/swap_optimizer.lua) leaves the optimizer's
  -- states and step out: the recorder prices them on a tape of their own
  local lean = rec and rec.lean
  if lean then rec.lean_done = true end
  if rec then rec:setup_done(S, trainable) end
  local before_state = S.tape:live()
  if train and not lean then optim.init_state(S, trainable, run.optimizer) end
  local state_bytes = S.tape:live() - before_state
  if rec then rec:states_done(S) end
  local inputs = family.inputs(S, run, model)
  local ends, base = {}, tape:live()
  local outs
  if train then
    ends.baseline = base
    M.repeat_steps(S, run.grad_accum or 1, function() -- gradients accumulate
      tape:phase("forward")
      -- a jitted step's own output buffers, unless donated (stdlib/xla.lua)
      outs = outs or xla.begin_outputs(S, trainable, state_bytes) or {}
      if run.autocast then S:autocast_enter(run.autocast) end
      local l = family.forward_loss(S, model, run)
      S:autocast_exit()
      ends.forward_end = ends.forward_end or tape:live()
      tape:phase("backward")
      tape:backward(l.id)
      S:drop(l)
    end)
    ends.backward_end = tape:live()
    if rec then rec:step_begins(S) end
    tape:phase("optimizer")
    if not lean then optim.step(S, trainable, run.optimizer) end
    ends.optimizer_end = tape:live()
    if rec then rec:step_ends(S) end
    tape:phase("zero_grad")
    tape:zero_grad()
    xla.end_outputs(S, outs)
  elseif run.mode == "generate" then
    S.grad = false
    if run.autocast then S:autocast_enter(run.autocast) end
    family.generate(S, model, run)
    S:autocast_exit()
  else
    S.grad = false
    tape:phase("forward")
    if run.autocast then S:autocast_enter(run.autocast) end
    local logits = family.forward_logits(S, model, run)
    S:autocast_exit()
    S:drop(logits)
  end
  for _, x in ipairs(inputs) do S:drop(x) end
  if rec then rec:finished(S) end
  local st = tape:stats()
  st.baseline, st.phase_end = base, ends
  st.paged_state_bytes = S.paged_state_bytes -- bitsandbytes' paged states (stdlib/optim.lua)
  if S.jit and train then
    st.xla = M.xla_record(S, trainable, state_bytes, base)
  end
  return M.finish_trace(S, M.counts(st, all))
end

-- The simulation a run asks for: an RL update or one ordinary step, of the
-- run's simulator module (run.sim, put there by stdlib/spec.lua).
-- rec (optional): as in M.simulate.
function M.run(run, rec)
  if run.rl then return require("stdlib.rl").simulate(run.sim, run, rec) end
  return M.simulate(run.sim, run, rec)
end

M.loss = loss
return M
