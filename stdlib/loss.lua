-- Losses as Hugging Face computes them (loss_utils.ForCausalLMLoss).
local L = {}
local layers = require("stdlib.layers")

-- logits: (rows, V) in the model dtype. Returns the scalar loss tensor.
-- impl: "cross_entropy" | "one_hot" (seed 000's log_softmax * one_hot).
function L.causal_lm(S, logits, rows, vocab, batch, seq, impl)
  local lf = S:to(logits, "fp32", "loss.logits_float")
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
    local s = S:op("loss.sum", rows, "fp32", { prod }, {}, { { prod, alias = 1 } })
    S:drop(prod)
    local nll = S:op("loss.neg", rows, "fp32", { s }, {}, { { s } })
    S:drop(s)
    local masked = S:op("loss.mask", rows, "fp32", { nll }, { valid }, { { nll } })
    S:drop(nll)
    local num = S:op("loss.sum_all", 1, "fp32", { masked }, {}, { { masked, alias = 1 } })
    S:drop(masked)
    local den = S:new_tensor(1, "int64", "loss.count", false)
    loss = S:op("loss.div", 1, "fp32", { num }, { den }, { { num, 4 } })
    S:drop(num, den, valid, safe)
  else
    local logp = S:new_tensor(lf.n, "fp32", "loss.log_softmax", S:rg(lf))
    S:node("loss.log_softmax", { logp }, { { lf, logp.b } }, { logp })
    loss = S:new_tensor(1, "fp32", "loss.nll", S:rg(logp))
    local total_weight = S:new_tensor(1, "fp32", "loss.total_weight", false)
    S:node("loss.nll", { logp, shift, total_weight }, { { logp, logp.b } }, { loss })
    S:drop(logp, total_weight)
  end
  S:drop(lf, padded, shift)
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
  local labels = S:new_tensor(n, "int64", "loss.shift_labels", false)
  local logp = S:new_tensor(shift.n, "fp32", "loss.log_softmax", S:rg(shift))
  S:node("loss.log_softmax", { logp }, { { shift, logp.b } }, { logp })
  S:drop(shift)
  local loss = S:new_tensor(1, "fp32", "loss.nll", S:rg(logp))
  local total_weight = S:new_tensor(1, "fp32", "loss.total_weight", false)
  S:node("loss.nll", { logp, labels, total_weight }, { { logp, logp.b } }, { loss })
  S:drop(logp, total_weight, labels, lf)
  return loss
end

-- A model's own loss that shifts before it upcasts (Yxanul's FP8 model file,
-- src/model_fp8_optimized.py): shift_logits = logits[..., :-1, :]
-- .contiguous() in the model dtype (its backward a zero-filled full-size
-- gradient), then .float() and CrossEntropyLoss. The caller keeps `logits`.
function L.causal_lm_shift_float(S, logits, batch, seq, vocab)
  local n = batch * (seq - 1)
  local shift = S:new_tensor(n * vocab, logits.dt, "loss.shift_logits", S:rg(logits))
  S:node("loss.shift_logits", {}, { { logits, logits.b } }, { shift })
  local lf = S:to(shift, "fp32", "loss.shift_float")
  S:drop(shift)
  local labels = S:new_tensor(n, "int64", "loss.shift_labels", false)
  local logp = S:new_tensor(lf.n, "fp32", "loss.log_softmax", S:rg(lf))
  S:node("loss.log_softmax", { logp }, { { lf, logp.b } }, { logp })
  S:drop(lf)
  local loss = S:new_tensor(1, "fp32", "loss.nll", S:rg(logp))
  local total_weight = S:new_tensor(1, "fp32", "loss.total_weight", false)
  S:node("loss.nll", { logp, labels, total_weight }, { { logp, logp.b } }, { loss })
  S:drop(logp, total_weight, labels)
  return loss
end

-- Chunked cross entropy over the LM head (Apple's CCE, chunked-loss
-- kernels): `chunk` rows at a time the head's logits, their fp32
-- log-softmax and gradient exist, never the whole rows x V; backward
-- recomputes each chunk. (Liger's fused variant, which keeps the input
-- gradient from forward, is not modelled.) h: (rows, H); w: the head weight.
function L.chunked(S, h, w, rows, vocab, chunk)
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
