-- An RL update (PPO / GRPO) on a policy: rollout with a KV cache, stored
-- old log-probs (and reference log-probs when a frozen reference model is
-- kept), then gradient steps over minibatches. Seed 000's semantics: the
-- minibatch is a size, not a count, so it is capped at the batch.
--
-- run.rl = { new_tokens = N, minibatch = M, reference = bool, value = bool }
-- value: PPO's critic, a copy of the text decoder with a scalar head, trained
-- with the policy (one backward of policy loss + value loss); the simulator
-- family builds it (build_critic, values: models/causal_lm.lua).
local optim = require("stdlib.optim")
local step = require("stdlib.step")
local errors = require("stdlib.errors")
local xla = require("stdlib.xla")

local M = {}

local with = require("stdlib.run").with

-- log-probs of the sampled tokens for a whole batch, without grad: logits,
-- their fp32 log_softmax, the gathered (B, T) result kept.
local function logprobs(S, family, P, r)
  local logits = family.forward_logits(S, P, r)
  local lf = S:to(logits, "fp32", "logprobs.float")
  S:drop(logits)
  local lsm = S:new_tensor(lf.n, "fp32", "logprobs.log_softmax", false)
  S:drop(lf)
  local kept = S:new_tensor(r.batch * r.seq, "fp32", "logprobs.kept", false, "logits_loss")
  S:drop(lsm)
  return kept
end

-- 0.5 * mean((v - returns)^2): the squared error keeps the difference.
local function value_loss(S, v, rows)
  local diff = S:op("value.sub", rows, v.dt, { v }, {}, { { v, alias = 1 } })
  local sq = S:op("value.pow", rows, v.dt, { diff }, { diff }, { { diff } })
  S:drop(diff)
  local l = S:op("value.mean", 1, "fp32", { sq }, {}, { { sq } })
  S:drop(sq)
  return l
end

-- rec (optional): stdlib/swap_optimizer.lua's recorder, told the seams of
-- the update (not under a jitted framework, a timeline or a probe).
function M.simulate(family, run, rec)
  local rl = run.rl or {}
  local S = step.new_sim(run, "rl")
  local params = S.params
  local pol, check = step.policies(run)
  local P = family.build(S, run, pol)
  check()
  local trainable = step.trainable(S, params)
  local ref
  if rl.reference then
    local frozen = with(run, { frozen = { "llm", "vision", "projector" }, lora = false })
    ref = family.build(S, frozen, step.policies(frozen))
  end
  if rl.value and not family.build_critic then
    errors.input(run.config_path, "run.rl.value", "this model has no critic to train")
  end
  local critic = rl.value and family.build_critic(S, run, step.policies(run))
  trainable = step.trainable(S, params)
  if S.jit or run.timeline or run.trace then rec = nil end
  if rec then rec:setup_done(S, trainable) end
  local before_state = S.tape:live()
  optim.init_state(S, trainable, run.optimizer)
  local state_bytes = S.tape:live() - before_state
  if rec then rec:states_done(S) end
  local inputs = family.inputs(S, run, P)
  -- the reference model reads the policy's very inputs (pixel_values of a
  -- VLM); a family that keeps inputs on the model hands them over
  if ref and family.share_inputs then family.share_inputs(ref, P) end
  local tape = S.tape
  local N = rl.new_tokens or 0
  local full = with(run, { seq = run.seq + N })

  -- rollout: greedy/sampled generation under no_grad
  S.grad = false
  if N > 0 then
    family.generate(S, P, with(run, { generate_tokens = N }))
  end
  tape:phase("old_logprobs")
  local old = logprobs(S, family, P, full)
  local ref_lp
  if ref then
    tape:phase("ref_logprobs")
    ref_lp = logprobs(S, family, ref, full)
  end
  local old_v
  if critic then
    tape:phase("old_values")
    old_v = family.values(S, critic, full)
  end
  S.grad = true

  -- update: one optimizer step per minibatch
  if rl.minibatch then S:sized("an RL update takes ceil(batch / minibatch) minibatches") end
  local mb = math.min(rl.minibatch or run.batch, run.batch)
  local steps = (run.batch + mb - 1) // mb
  local part = with(full, { batch = mb })
  local arguments = tape:live()
  -- each minibatch step is one jitted call on a jitted framework: its
  -- outputs are buffers of their own unless donated (stdlib/xla.lua)
  step.repeat_steps(S, steps, function()
    tape:phase("update_forward")
    local outs = xla.begin_outputs(S, trainable, state_bytes)
    if run.autocast then S:autocast_enter(run.autocast) end
    local l = family.forward_loss(S, P, part)
    if critic then
      local v = family.values(S, critic, with(part, { seq = part.seq + (P.n_img or 0) }))
      local vl = value_loss(S, v, v.n)
      S:drop(v)
      local total = S:op("loss.total", 1, "fp32", { l, vl }, {},
        { { l, alias = 1 }, { vl, alias = 1 } })
      S:drop(l, vl)
      l = total
    end
    S:autocast_exit()
    tape:phase("update_backward")
    tape:backward(l.id)
    S:drop(l)
    tape:phase("optimizer")
    if rec then rec:step_begins(S) end
    optim.step(S, trainable, run.optimizer)
    if rec then rec:step_ends(S) end
    tape:zero_grad()
    xla.end_outputs(S, outs)
  end)
  S:drop(old, ref_lp, old_v)
  for _, x in ipairs(inputs) do S:drop(x) end
  if rec then rec:finished(S) end
  local st = step.finish_trace(S, step.counts(tape:stats(), params))
  st.minibatch, st.minibatch_steps = mb, steps
  if S.jit then st.xla = step.xla_record(S, trainable, state_bytes, arguments) end
  return st
end

return M
