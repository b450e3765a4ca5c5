-- Losses as Hugging Face computes them (loss_utils.ForCausalLMLoss).
local L = {}
local layers = require("stdlib.layers")

-- The run's fields that say which loss it computes (stdlib/spec.lua
-- read_loss sets them): read by the loss alone, after the model's layers,
-- so runs differing only in them walk the same layers (fit --knobs keeps
-- those, stdlib/compose.lua M.keeping).
L.FIELDS = { loss = true, loss_chunk = true, loss_chunk_tokens = true, loss_upcast = true,
  loss_num_items = true, loss_where = true }

-- logits: (batch * seq, vocab) in the model dtype. Returns the scalar loss
-- tensor. o (L.logits_options): { batch, seq, impl = "cross_entropy" |
-- "one_hot" (seed 000's log_softmax * one_hot), upcast, count }.
-- o.upcast == false: no logits.float(), the log-softmax in the logits'
-- dtype. o.count: L.num_items's tensor (fixed_cross_entropy: reduction
-- "sum", then divided by it); the loss takes it over.
function L.causal_lm(S, logits, o)
  if S.jit and S.jit.fused_loss then
    S:drop(o.count)
    return L.fused_xla(S, logits)
  end
  local batch, seq, impl, count = o.batch, o.seq, o.impl, o.count
  local rows = batch * seq
  local lf = o.upcast == false and S:view(logits) or S:to(logits, "fp32", "loss.logits_float")
  -- labels padded by one and shifted; the logits are not sliced
  local padded = S:new_tensor(batch * (seq + 1), "int64", "loss.pad_labels", false)
  local shift = S:new_tensor(batch * seq, "int64", "loss.shift_labels", false)
  local loss
  if impl == "one_hot" then
    local valid = S:new_tensor(rows, "uint8", "loss.valid", false)
    S:temp(rows, "loss.not_valid")
    local safe = S:new_tensor(rows, "int64", "loss.safe_labels", false)
    local logp = S:new_tensor(lf.n, "fp32", "loss.log_softmax", S:rg(lf))
    S:node("loss.log_softmax", { logp }, { { lf, logp.b } }, { logp })
    local oh = S:new_tensor(lf.n, "int64", "loss.one_hot", false)
    -- fp32 * int64 on CPU: TensorIterator casts the int64 operand to a
    -- temporary fp32 copy first (forward and backward alike)
    local cast = S:new_tensor(lf.n, "fp32", "loss.one_hot_cast", false)
    local prod = S:new_tensor(lf.n, "fp32", "loss.mul_one_hot", S:rg(logp))
    S:node("loss.mul_one_hot", { oh }, { { logp, logp.b } }, { prod }, cast.b)
    S:drop(cast, oh, logp)
    local s = S:op1("loss.sum", rows, "fp32", prod, nil, "alias")
    S:drop(prod)
    local nll = S:op1("loss.neg", rows, "fp32", s)
    S:drop(s)
    local masked = S:op1("loss.mask", rows, "fp32", nll, valid)
    S:drop(nll)
    local num = S:op1("loss.sum_all", 1, "fp32", masked, nil, "alias")
    S:drop(masked)
    local den = S:new_tensor(1, "int64", "loss.count", false)
    loss = S:op1("loss.div", 1, "fp32", num, den, 4)
    S:drop(num, den, valid, safe)
  else
    local logp = S:new_tensor(lf.n, lf.dt, "loss.log_softmax", S:rg(lf))
    S:node("loss.log_softmax", { logp }, { { lf, logp.b } }, { logp })
    loss = S:new_tensor(1, lf.dt, "loss.nll", S:rg(logp))
    local total_weight = S:new_tensor(1, lf.dt, "loss.total_weight", false)
    S:node("loss.nll", { logp, shift, total_weight }, { { logp, logp.b } }, { loss })
    S:drop(logp, total_weight)
    if count then -- loss / num_items_in_batch (DivBackward keeps the count)
      local q = S:op1("loss.div_num_items", 1, loss.dt, loss, count, 4)
      S:drop(loss, count)
      loss = q
    end
  end
  S:drop(lf, padded, shift)
  return loss
end

-- A jitted loss (stdlib/frameworks/jax.lua, fused_loss): log_softmax and
-- its one_hot product or take_along_axis gather are elementwise chains XLA
-- fuses into row reductions, so no B x T x V one_hot, product or
-- log_softmax exists. The fp32 logits stay as the backward's residual
-- (softmax is recomputed from them inside the backward fusion), and the
-- backward writes one B x T x V gradient of them. Labels are int32 [B, T]
-- inputs (negligible).
function L.fused_xla(S, logits)
  local lf = S:to(logits, "fp32", "loss.logits_float")
  local loss = S:new_tensor(1, "fp32", "loss.fused", S:rg(lf))
  S:node("loss.fused", { lf }, { { lf, lf.b } }, { loss })
  S:drop(lf)
  return loss
end

-- The options of L.causal_lm a run asks for (batch and seq: the rows the
-- loss sees, a VLM's image tokens included); call before the forward (the
-- Trainer counts num_items_in_batch first: labels.ne(-100), a bool
-- temporary, summed into an int64 scalar). A family that computes its loss
-- from logits refuses the losses that take the hidden states.
function L.logits_options(S, run, batch, seq)
  if run.loss == "litgpt_chunked" or run.loss == "liger_fused" then
    require("stdlib.errors").input(run.loss_where or run.id, "run.loss.impl",
      run.loss .. " is modelled for decoder-only language models only")
  end
  local count
  if run.loss_num_items then
    S:temp(S:bytes("uint8", batch * seq), "loss.num_items_mask")
    count = S:new_tensor(1, "int64", "loss.num_items_in_batch", false)
  end
  return { batch = batch, seq = seq, impl = run.loss, upcast = run.loss_upcast, count = count }
end

-- A tensor that shares another's storage and holds no bytes of its own on
-- the tape, but receives a gradient of `n` elements (split chunks, slices).
local function part(S, n, dt, rg, label)
  return { id = S.tape:alloc(0, S.cat, label), n = n, dt = dt, b = S:bytes(dt, n), rg = rg }
end

-- litgpt's fit loop keeps its logits list bound until the next step's model
-- call returns: the previous step's chunks are live through this step's
-- forward (call before the decoder runs; L.litgpt_chunked lets them go).
function L.litgpt_carry(S, batch, seq, vocab, dt, chunk)
  S:sized("litgpt's chunked loss makes ceil(seq / chunk_tokens) chunks")
  local prev = {}
  for s = 0, seq - 1, chunk do
    local len = math.min(chunk, seq - s)
    prev[#prev + 1] = S:new_tensor(batch * len * vocab, dt, "loss.previous_step_logits", false)
  end
  return prev
end

-- litgpt (finetune/lora.py, full.py; utils.chunked_cross_entropy): the head
-- runs on h.split(chunk, dim=1) (a contiguous copy of each chunk when
-- batch > 1, inside matmul), the last chunk is sliced to T - 1 positions
-- (and copied by reshape when batch > 1), each chunk's cross-entropy
-- (reduction "none", no upcast) saves its log-softmax, the chunk losses are
-- concatenated, summed and divided by the label count. Autograd runs every
-- chunk's loss backward before any head chunk's, so all the logits
-- gradients coexist; the saving is only in the log-softmax gradients. The
-- logits list stays bound (the fit loop's variable) after the step: its
-- tensors are never dropped here. head: a dense lm_head (layers' linear
-- table); prev: L.litgpt_carry's tensors.
function L.litgpt_chunked(S, h, head, batch, seq, vocab, chunk, prev)
  S:sized("litgpt's chunked loss makes ceil(seq / chunk_tokens) chunks")
  local H, dt, w = head.inn, h.dt, head.w
  -- x.split(chunk, dim=1): SplitBackward cats the chunk gradients into a
  -- full-size one; with batch 1 the chunks are views the head's matmul
  -- saves (h's storage stays until the last of them is released)
  local views, lens = {}, {}
  for s = 0, seq - 1, chunk do
    lens[#lens + 1] = math.min(chunk, seq - s)
    views[#views + 1] = part(S, batch * lens[#lens] * H, dt, h.rg, "lm_head.split")
  end
  S:node("lm_head.split", {}, { { h, h.b } }, views)
  local logits = {}
  for i, v in ipairs(views) do
    local rows = batch * lens[i]
    local x = v
    if batch > 1 then -- matmul folds (B, c, H) into rows: expect_contiguous copies
      x = S:op1("lm_head.contiguous", rows * H, dt, v, nil, "alias")
    end
    local lg = S:new_tensor(rows * vocab, dt, "lm_head", S:rg(x, w))
    if lg.rg then
      local saved = {}
      if w.rg then saved[1] = batch > 1 and x or h end
      if x.rg then saved[#saved + 1] = w end
      -- every chunk but the last (whose backward runs first) adds to the
      -- weight's gradient: out of place on torch < 2.0 (layers.embedding),
      -- after the node has let go of the logits' gradient and of its
      -- saved copy of the input
      local sum = S.sum_out_of_place and w.rg and i < #views
        and w.b - lg.b - (batch > 1 and x.b or 0) or 0
      sum = sum > 0 and sum or nil
      S:node("lm_head", saved, { { x, x.b }, { w, w.b } }, { lg }, sum)
    end
    if batch > 1 then S:drop(x) end
    logits[i] = lg
  end
  for _, p in ipairs(prev) do S:drop(p) end -- the fit loop rebinds `logits`
  -- logits[-1] = logits[-1][..., :-1, :]; reshape(-1, V) of every chunk
  -- (views, but a copy of the sliced last chunk when batch > 1); the
  -- targets' chunks likewise (int64 copies when batch > 1, saved by nll)
  local n = #logits
  local last = logits[n]
  local sl_rows = batch * (lens[n] - 1)
  local sl = part(S, sl_rows * vocab, dt, last.rg, "loss.slice_last")
  S:node("loss.slice_last", {}, { { last, last.b } }, { sl })
  local xs, tgts, copy = {}, {}, nil
  for i = 1, n - 1 do xs[i] = logits[i] end
  xs[n] = sl
  if batch > 1 then
    copy = S:op1("loss.reshape_last", sl.n, dt, sl, nil, "alias")
    xs[n] = copy
  end
  for i = 1, n do
    local rows = xs[i].n // vocab
    tgts[i] = batch > 1 and S:new_tensor(rows, "int64", "loss.target_chunk", false) or nil
  end
  local parts = {}
  for i, x in ipairs(xs) do
    local rows = x.n // vocab
    local logp = S:new_tensor(x.n, dt, "loss.log_softmax", S:rg(x))
    S:node("loss.log_softmax", { logp }, { { x, logp.b } }, { logp })
    local tw = S:new_tensor(1, dt, "loss.total_weight", false)
    local nll = S:new_tensor(rows, dt, "loss.nll", S:rg(logp))
    S:node("loss.nll", { logp, tw, tgts[i] }, { { logp, logp.b } }, { nll })
    S:drop(logp, tw)
    parts[i] = nll
  end
  local rows_all = 0
  for _, p in ipairs(parts) do rows_all = rows_all + p.n end
  local edges = {}
  for i, p in ipairs(parts) do edges[i] = { p, alias = 1 } end
  local cat = S:new_tensor(rows_all, dt, "loss.cat", S:rg(table.unpack(parts)))
  S:node("loss.cat", {}, edges, { cat })
  for _, p in ipairs(parts) do S:drop(p) end
  local sum = S:op1("loss.sum", 1, dt, cat, nil, "alias")
  S:drop(cat)
  S:temp(S:bytes("uint8", rows_all), "loss.non_masked")
  local count = S:new_tensor(1, "int64", "loss.non_masked_sum", false)
  local loss = S:op1("loss.div", 1, dt, sum, count, 4)
  S:drop(sum, count, copy)
  for i = 1, n do S:drop(tgts[i]) end
  return loss
end

local function next_pow2(n)
  local p = 1
  while p < n do p = p * 2 end
  return p
end

-- Liger-Kernel's fused linear cross-entropy (ops/fused_linear_cross_entropy.py,
-- LigerFusedLinearCrossEntropyFunction; reduction "mean", no bias,
-- accum_dtype None) under transformers' labels (padded and shifted, as
-- L.causal_lm): the B*T x V logits never exist. Forward allocates
-- grad_input (rows x H, input dtype) and grad_weight (V x H, weight dtype,
-- only when the head trains), an fp32 loss per row and the label mask, then
-- per chunk of next_pow2(ceil(rows / ceil(V / H))) rows (at most rows) the
-- chunk's logits, which the Triton kernel turns into their own gradient in
-- place, a chunk x H product copied into grad_input, and the weight
-- gradient: addmm into grad_weight for bf16/fp16 (CUDA sm80+), `+= mm().float()`
-- (a V x H temporary) for fp32. Backward hands those gradients on.
-- Modelled as a forward excursion plus gradients created when backward
-- starts: the live bytes between the end of forward and the start of
-- backward are low by grad_input + grad_weight, every peak is the same.
function L.liger_fused(S, h, w, batch, seq, vocab)
  S:sized("Liger's fused loss takes chunks of a power of two rows, at most the rows")
  local rows = batch * seq
  local H = h.n // rows
  local padded = S:new_tensor(batch * (seq + 1), "int64", "loss.pad_labels", false)
  local shift = S:new_tensor(rows, "int64", "loss.shift_labels", false)
  local chunk = math.min(next_pow2((rows + (vocab + H - 1) // H - 1) // ((vocab + H - 1) // H)),
    rows)
  local gi = S:bytes(h.dt, rows * H)
  local gw = w.rg and S:bytes(w.dt, vocab * H) or 0
  local per_chunk = S:bytes(h.dt, chunk * vocab) + math.max(S:bytes(h.dt, chunk * H),
    (w.rg and w.dt == "fp32") and S:bytes("fp32", vocab * H) or 0)
  local held = gi + gw + S:bytes("fp32", rows)
  S:temp(held + math.max(S:bytes("uint8", rows) + S:bytes("int64", 1), per_chunk),
    "loss.liger_fused")
  local loss = S:new_tensor(1, "fp32", "loss.liger_fused", S:rg(h, w))
  S:node("loss.liger_fused", {}, { { h, gi }, { w, gw } }, { loss })
  S:drop(padded, shift)
  return loss
end

-- CrossEntropyLoss over n shifted rows of fp32 logits x (taken over):
-- shifted labels, log_softmax (x goes once it is taken), then nll_loss
-- with its total_weight. The two shifting losses below end in it.
local function shifted_nll(S, x, n)
  local labels = S:new_tensor(n, "int64", "loss.shift_labels", false)
  local logp = S:new_tensor(x.n, "fp32", "loss.log_softmax", S:rg(x))
  S:node("loss.log_softmax", { logp }, { { x, logp.b } }, { logp })
  S:drop(x)
  local loss = S:new_tensor(1, "fp32", "loss.nll", S:rg(logp))
  local total_weight = S:new_tensor(1, "fp32", "loss.total_weight", false)
  S:node("loss.nll", { logp, labels, total_weight }, { { logp, logp.b } }, { loss })
  S:drop(logp, total_weight, labels)
  return loss
end

-- transformers 4.36-4.44 (LlamaForCausalLM.forward and its copies):
-- logits = logits.float() in the model's forward (the model-dtype logits go
-- at once), shift_logits = logits[..., :-1, :].contiguous() (an fp32 copy of
-- B x (T-1) x V; its backward, SliceBackward, a zero-filled full-size fp32
-- gradient), CrossEntropyLoss. Takes over the caller's `logits`.
function L.causal_lm_legacy(S, logits, batch, seq, vocab)
  local lf = S:to(logits, "fp32", "loss.logits_float")
  S:drop(logits)
  local n = batch * (seq - 1)
  local shift = S:new_tensor(n * vocab, "fp32", "loss.shift_logits", S:rg(lf))
  S:node("loss.shift_logits", {}, { { lf, lf.b } }, { shift })
  local loss = shifted_nll(S, shift, n)
  S:drop(lf)
  return loss
end

-- A model's own loss that shifts before it upcasts (Yxanul's FP8 model file,
-- src/model_fp8_optimized.py): shift_logits = logits[..., :-1, :]
-- .contiguous() in the model dtype (its backward a zero-filled full-size
-- gradient), then .float() and CrossEntropyLoss. The caller lets go of
-- `logits` after the loss (tests/truth l14, l15); a trainer that keeps them
-- through backward adds B x T x V in the model dtype.
function L.causal_lm_shift_float(S, logits, batch, seq, vocab)
  local n = batch * (seq - 1)
  local shift = S:new_tensor(n * vocab, logits.dt, "loss.shift_logits", S:rg(logits))
  S:node("loss.shift_logits", {}, { { logits, logits.b } }, { shift })
  local lf = S:to(shift, "fp32", "loss.shift_float")
  S:drop(shift)
  return shifted_nll(S, lf, n)
end

-- Chunked cross entropy over the LM head (Apple's CCE, chunked-loss
-- kernels): `chunk` rows at a time the head's logits, their fp32
-- log-softmax and gradient exist, never the whole rows x V; backward
-- recomputes each chunk. (Liger's fused variant, which keeps the input
-- gradient from forward, is not modelled.) h: (rows, H); w: the head weight.
function L.chunked(S, h, w, rows, vocab, chunk)
  S:sized("a chunked loss's chunk is min(chunk_rows, rows)")
  local c = math.min(chunk or 1024, rows)
  local per_chunk = S:bytes(h.dt, c * vocab) + 2 * S:bytes("fp32", c * vocab)
  S:temp(per_chunk, "loss.chunk")
  local loss = S:new_tensor(1, "fp32", "loss.chunked", S:rg(h, w))
  if loss.rg then
    local saved = { w }
    if w.rg then saved[2] = h end
    S:node("loss.chunked", saved, { { h }, { w } }, { loss }, per_chunk)
  end
  return loss
end

-- Single-label classification cross entropy on (batch, classes) logits.
function L.classification(S, logits, batch)
  local logp = S:new_tensor(logits.n, "fp32", "loss.log_softmax", S:rg(logits))
  S:node("loss.log_softmax", { logp }, { { logits, logp.b } }, { logp })
  local loss = S:new_tensor(1, "fp32", "loss.nll", S:rg(logp))
  local total_weight = S:new_tensor(1, "fp32", "loss.total_weight", false)
  S:node("loss.nll", { logp, total_weight }, { { logp, logp.b } }, { loss })
  S:drop(logp, total_weight)
  return loss
end

L.layers = layers
return L
