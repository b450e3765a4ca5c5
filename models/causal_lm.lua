-- A decoder-only causal LM as a simulator family (text in, logits/loss out).
local decoder = require("models.decoder")
local registry = require("models.registry")
local layers = require("stdlib.layers")
local loss = require("stdlib.loss")
local with = require("stdlib.run").with

local F = {}

-- Decode steps a page's timeline draws one by one (more are fast-forwarded,
-- and every middle one for a sparkline: stdlib/step.lua S.draw_decode).
F.DRAWN_DECODE_STEPS = 64

-- A measured case's config (tests/truth, family "decoder") is a text config.
F.takes_text = true
function F.case(cfg, where)
  return { text = decoder.read(cfg, where, "config.") }
end

-- Whether a measured case's text config is an architecture the simulator
-- models: a decoder the registry describes, without mllama's
-- cross-attention layers.
function F.supports(cfg)
  if not registry.decoder(cfg.model_type or "llama") then return false end
  return not cfg.cross_attention_layers
end

-- How the experts of an MoE run: what the run asks for, else what
-- transformers does (a loop over the experts; gpt-oss's fused experts run
-- every expert on every token outside training on a GPU).
function F.moe_impl(run, m)
  if not m.moe then return nil end
  if run.moe and run.moe.impl then return run.moe.impl end
  if m.moe.fused and run.mode ~= "train" and run.framework ~= "pytorch-cpu" then
    return "dense"
  end
  return "loop"
end

-- The run as the decoder sees it: the MoE implementation, and a list that
-- collects every layer's router logits when the auxiliary loss is on.
local function decoder_run(run, m, train)
  local aux = m.moe and train and (run.moe and run.moe.aux_loss)
  if aux == nil then aux = m.moe and train and m.aux_loss end
  local impl, logits = F.moe_impl(run, m), aux and {} or nil
  -- nothing to change (a dense model): the run itself, which the decoder
  -- only reads, not a copy of its every field
  if impl == run.moe_impl and logits == nil and run.router_logits == nil then return run end
  return with(run, { moe_impl = impl, router_logits = logits })
end
F.decoder_run = decoder_run -- a VLM's language model runs its decoder the same way

function F.build(S, run, pol)
  local m = run.text
  local trainable, lora = pol("llm")
  return decoder.build(S, m, { dt = run.param_dtype, trainable = trainable, lora = lora,
    quant = run.quant, moe_impl = F.moe_impl(run, m), stage = run.stage })
end

function F.inputs(S, run)
  local ids = S:new_tensor(run.batch * run.seq, "int64", "input_ids", false, "inputs")
  local labels = run.mode == "train"
    and S:new_tensor(run.batch * run.seq, "int64", "labels", false, "inputs") or nil
  return { ids, labels }
end

-- Embedding, decoder and head; logits count as `cat`.
local function logits(S, P, run, cat)
  run = decoder_run(run, P.m, cat == "logits_loss")
  local emb = decoder.embed(S, P, run.batch * run.seq)
  local h = decoder.forward(S, P, emb, run)
  S:drop(emb)
  S:set_category(cat)
  local lg = decoder.logits(S, P, h, run)
  S:drop(h)
  return lg, run.router_logits
end

-- loss + router_aux_loss_coef * load_balancing_loss(all router logits)
local function add_aux(S, P, run, l, kept)
  if not kept or #kept == 0 then return l end
  -- required here: a dense model's process never loads stdlib/moe.lua
  local aux = require("stdlib.moe").aux_loss(S, kept, run.batch * run.seq, P.m.moe, "aux_loss")
  for _, lg in ipairs(kept) do S:drop(lg) end
  local scaled = S:op1("aux_loss.coef", 1, aux.dt, aux)
  S:drop(aux)
  local total = S:op2("loss.add_aux", 1, "fp32", l, scaled, "alias", "alias")
  S:drop(l, scaled)
  return total
end
F.add_aux = add_aux

-- The trainers' losses that take the final hidden states instead of logits
-- (stdlib/loss.lua): litgpt's chunked head and loss, Liger's fused linear
-- cross-entropy. Neither is modelled with a factored or soft-capped head, an
-- adapter on the head, or under autocast: those runs are refused.
local function hidden_loss(S, P, run)
  local what = run.loss == "litgpt_chunked" and "litgpt's chunked cross-entropy"
    or "Liger's fused linear cross-entropy"
  local why = (P.m.factor and "a factored embedding head")
    or (P.m.final_softcap and "final-logit soft-capping")
    or (P.head.lora and "LoRA on lm_head") or (P.head.dequant and "a quantized lm_head")
    or (run.autocast and "mixed precision (autocast)")
  if why then
    require("stdlib.errors").input(run.loss_where or run.id, "run.loss.impl",
      ("%s with %s is not modelled"):format(what, why))
  end
  local prev = run.loss == "litgpt_chunked"
    and loss.litgpt_carry(S, run.batch, run.seq, P.m.vocab, run.dtype, run.loss_chunk_tokens)
  local r = decoder_run(run, P.m, true)
  local emb = decoder.embed(S, P, run.batch * run.seq)
  local h = decoder.forward(S, P, emb, r)
  S:drop(emb)
  S:set_category("logits_loss")
  local l
  if prev then
    l = loss.litgpt_chunked(S, h, P.head, run.batch, run.seq, P.m.vocab,
      run.loss_chunk_tokens, prev)
  else
    l = loss.liger_fused(S, h, P.head.w, run.batch, run.seq, P.m.vocab)
  end
  S:drop(h)
  S:set_category("activations")
  return add_aux(S, P, run, l, r.router_logits)
end

function F.forward_loss(S, P, run)
  if run.loss == "litgpt_chunked" or run.loss == "liger_fused" then
    return hidden_loss(S, P, run)
  end
  if run.loss == "chunked" and not P.m.factor and not P.m.final_softcap then
    local r = decoder_run(run, P.m, true)
    local emb = decoder.embed(S, P, run.batch * run.seq)
    local h = decoder.forward(S, P, emb, r)
    S:drop(emb)
    S:set_category("logits_loss")
    local l = loss.chunked(S, h, P.head.w, run.batch * run.seq, P.m.vocab, run.loss_chunk)
    S:drop(h)
    S:set_category("activations")
    return add_aux(S, P, run, l, r.router_logits)
  end
  local opt = loss.logits_options(S, run, run.batch, run.seq)
  local lg, kept = logits(S, P, run, "logits_loss")
  local l
  if run.loss == "hf_legacy" then -- takes over lg
    l = loss.causal_lm_legacy(S, lg, run.batch, run.seq, P.m.vocab)
  elseif run.loss == "shift_float" then
    l = loss.causal_lm_shift_float(S, lg, run.batch, run.seq, P.m.vocab)
    S:drop(lg)
  else
    l = loss.causal_lm(S, lg, opt)
    S:drop(lg)
  end
  S:set_category("activations")
  return add_aux(S, P, run, l, kept)
end

-- One pipeline stage (stdlib/parallel.lua): its input is the embedding on
-- the first stage, else `recv`, the activation the previous stage sent; it
-- returns the loss on the last stage, else the activation it sends on.
function F.forward_stage(S, P, run, recv)
  P.recv = recv
  local out
  if P.head then
    out = F.forward_loss(S, P, run)
  else
    local x = decoder.embed(S, P, run.batch * run.seq)
    -- the run's MoE implementation, as on the last stage (without it the
    -- decoder ran transformers' expert loop over the grouped weights); no
    -- router logits kept: the auxiliary loss is the last stage's, as before
    out = decoder.forward(S, P, x, decoder_run(run, P.m, false))
    S:drop(x)
  end
  P.recv = nil
  return out
end

function F.forward_logits(S, P, run)
  local lg = logits(S, P, run, "activations")
  return lg
end

-- Greedy decoding: prefill, then one token at a time with the cache.
function F.generate(S, P, run, prefix_embeds)
  local tape = S.tape
  local B, T = run.batch, run.seq
  local cache = {}
  tape:phase("prefill")
  local emb = prefix_embeds or decoder.embed(S, P, B * T)
  local impl = F.moe_impl(run, P.m)
  local r = { batch = B, seq = T, past = 0, cache = cache, moe_impl = impl }
  local h = decoder.forward(S, P, emb, r)
  S:drop(emb)
  local logits = decoder.logits(S, P, h, r, 1)
  S:drop(h)
  local function pick(lg)
    local f = S:new_tensor(B * P.m.vocab, "fp32", "next_token_logits", false)
    S:drop(lg)
    local tok = S:new_tensor(B, "int64", "argmax", false)
    S:drop(f)
    return tok
  end
  local tok = pick(logits)
  local ids = S:new_tensor(B * (T + 1), "int64", "input_ids.cat", false, "inputs")
  tape:phase("decode")
  local past = T
  local function decode_step()
    local e = decoder.embed(S, P, B)
    local rr = { batch = B, seq = 1, past = past, cache = cache, moe_impl = impl }
    local hh = decoder.forward(S, P, e, rr)
    S:drop(e)
    local lg = decoder.logits(S, P, hh, rr, 1)
    S:drop(hh)
    local nt = pick(lg)
    S:drop(tok)
    tok = nt
    past = past + 1
    local nids = S:new_tensor(B * (past + 1), "int64", "input_ids.cat", false, "inputs")
    S:drop(ids)
    ids = nids
  end
  local steps = run.generate_tokens - 1
  -- A step drawn for a page runs every decode step, unless there are so
  -- many that their events would outgrow the memory budget (a 94-layer MoE
  -- keeps ~1 MB of timeline per step): then the first and the last. One
  -- drawn as a sparkline, whose columns cannot show them (a PPO spec's 63
  -- steps were 3/4 of its process's time; its first step 1.5M of a 22.5M
  -- estimate), runs the last alone, as an undrawn step does. The others are
  -- fast-forwarded and the timeline says how many it does not draw.
  local draw_all = S.draw_decode and steps <= F.DRAWN_DECODE_STEPS
  -- a prefill cache entry holding more than its elements (a view: MLA's
  -- value states keep kv_b_proj's whole output) is bigger than what a
  -- decode step leaves in its place: then the first step runs in full
  local whole = true
  for _, c in pairs(cache) do
    whole = whole and c.k.b == S:bytes(c.k.dt, c.k.n) and c.v.b == S:bytes(c.v.dt, c.v.n)
  end
  if steps >= 2 and S.composable and (not S.timeline or S.sparkline) and whole then
    -- Undrawn, the first step is no different: the prefill leaves the
    -- state a decode step leaves (caches, ids, the sampled token), each
    -- smaller, so only the last step can reach the decode's peak.
    if S.timeline then S.timeline_skipped = (S.timeline_skipped or 0) + steps - 1 end
    decoder.advance_cache(S, P, cache, T, 0, steps - 1)
    past = past + steps - 1
    S:drop(ids)
    ids = S:new_tensor(B * (past + 1), "int64", "input_ids.cat", false, "inputs")
    decode_step()
  elseif steps >= 3 and S.composable and not draw_all then
    if S.timeline then S.timeline_skipped = (S.timeline_skipped or 0) + steps - 2 end
    -- Decode steps differ only in `past`, and every size in one is a
    -- nondecreasing function of it (caches, mask, scores), so each step's
    -- live bytes, event by event, are at least the step before's: the
    -- steps between the first and the last cannot reach a higher peak.
    -- The first and last run in full; in between only the caches and the
    -- ids grow (tests/lua/test_simulator.lua compares with every step).
    decode_step()
    decoder.advance_cache(S, P, cache, T, 1, steps - 2)
    past = past + steps - 2
    S:drop(ids)
    ids = S:new_tensor(B * (past + 1), "int64", "input_ids.cat", false, "inputs")
    decode_step()
  else
    for _ = 1, steps do decode_step() end
  end
  tape:phase("cleanup")
  for _, c in pairs(cache) do S:drop(c.k, c.v) end
  S:drop(ids, tok)
end

-- PPO's critic (stdlib/rl.lua): the text decoder without its LM head, plus
-- a Linear(H, 1). pol: the run's policies (stdlib/step.lua).
function F.build_critic(S, run, pol)
  local m = setmetatable({ tie = true }, { __index = run.text })
  local trainable, lora = pol("llm")
  local V = decoder.build(S, m, { dt = run.param_dtype, trainable = trainable, lora = lora })
  V.value_head = layers.new_linear(S, { label = "value_head", inn = run.text.hidden, out = 1,
    bias = true, dt = run.param_dtype, trainable = true })
  return V
end

-- The critic's values of every position: (rows) in the parameter dtype.
function F.values(S, V, r)
  local rows = r.batch * r.seq
  local emb = decoder.embed(S, V, rows)
  local h = decoder.forward(S, V, emb, r)
  S:drop(emb)
  local v = layers.linear(S, h, V.value_head, rows)
  S:drop(h)
  return v
end

return F
