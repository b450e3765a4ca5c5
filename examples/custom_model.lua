-- A model that is not in models/: a small mixture-of-experts VLM, written
-- from the blocks in stdlib/layers.lua and simulated for one training step.
--   vramlua run examples/custom_model.lua [--batch N] [--seq N]
-- A family is a table with build / inputs / forward_loss (models/causal_lm.lua
-- is the reference); stdlib/step.lua replays forward, backward and AdamW.
local vram = require("vram")
local L = require("stdlib.layers")
local loss = require("stdlib.loss")
local step = require("stdlib.step")
local commas = require("stdlib.params").commas
local args = require("stdlib.args").parse({ ... }, { batch = 4, seq = 512 })

-- ViT 224/16 (196 patches) -> 2-layer projector -> 4-layer MoE decoder
local C = { image = 224, patch = 16, vd = 384, vlayers = 4, vheads = 6, vffn = 1536,
  d = 512, layers = 4, heads = 8, experts = 8, top_k = 2, effn = 1024, vocab = 32000 }
C.patches = (C.image // C.patch) ^ 2 // 1

local F = { takes_text = true }

function F.build(S, run, pol)
  local dt, P = run.param_dtype, { v = {}, t = {} }
  local function lin(part, name, i, o, bias)
    local tr, lo = pol(part)
    return L.new_linear(S, { label = name, inn = i, out = o, bias = bias, dt = dt,
      trainable = tr(name), lora = lo(name) })
  end
  local function norm(n, name) return S:param(n, dt, true, name) end
  P.patch = lin("vision", "patch_embed", 3 * C.patch * C.patch, C.vd, true)
  for i = 1, C.vlayers do
    P.v[i] = { ln1 = { norm(C.vd, "ln1"), norm(C.vd, "ln1.bias") },
      q = lin("vision", "q_proj", C.vd, C.vd, true), k = lin("vision", "k_proj", C.vd, C.vd, true),
      v = lin("vision", "v_proj", C.vd, C.vd, true), o = lin("vision", "out_proj", C.vd, C.vd, true),
      ln2 = { norm(C.vd, "ln2"), norm(C.vd, "ln2.bias") },
      mlp = { fc1 = lin("vision", "fc1", C.vd, C.vffn, true), fc2 = lin("vision", "fc2", C.vffn, C.vd, true) } }
  end
  P.proj = { fc1 = lin("projector", "linear_1", C.vd, C.d, true),
    fc2 = lin("projector", "linear_2", C.d, C.d, true) }
  P.embed = S:param(C.vocab * C.d, dt, true, "embed_tokens")
  for i = 1, C.layers do
    local l = { ln1 = norm(C.d, "input_layernorm"), ln2 = norm(C.d, "post_attention_layernorm"),
      q = lin("llm", "q_proj", C.d, C.d), k = lin("llm", "k_proj", C.d, C.d),
      v = lin("llm", "v_proj", C.d, C.d), o = lin("llm", "o_proj", C.d, C.d),
      router = lin("llm", "router", C.d, C.experts), experts = {} }
    for e = 1, C.experts do
      l.experts[e] = { gate = lin("llm", "gate_proj", C.d, C.effn),
        up = lin("llm", "up_proj", C.d, C.effn), down = lin("llm", "down_proj", C.effn, C.d) }
    end
    P.t[i] = l
  end
  P.norm = norm(C.d, "norm")
  P.head = lin("llm", "lm_head", C.d, C.vocab)
  return P
end

function F.inputs(S, run, P)
  P.pixels = S:new_tensor(run.batch * C.patches * 3 * C.patch * C.patch, "fp32", "pixels", false,
    "inputs")
  return { S:new_tensor(run.batch * run.seq, "int64", "input_ids", false, "inputs"),
    S:new_tensor(run.batch * run.seq, "int64", "labels", false, "inputs"), P.pixels }
end

-- pre-norm attention block; norm(x) -> q,k,v -> attention -> o, residual
local function attention(S, x, l, normed, rows, B, T, H, heads, mask)
  local q, k, v = L.linear(S, normed, l.q, rows), L.linear(S, normed, l.k, rows),
    L.linear(S, normed, l.v, rows)
  local a = L.eager_attention(S, q, k, v, mask, { batch = B, heads = heads, kv_heads = heads,
    tq = T, tk = T, head_dim = H // heads, impl = "eager" }, "attn")
  local o = L.linear(S, a, l.o, rows)
  S:drop(q, k, v, a, normed)
  local h = L.add(S, x, o, "residual")
  S:drop(o)
  return h
end

-- top-k routing, balanced: each expert sees rows * top_k / experts tokens
local function moe(S, x, l, rows)
  local logits = L.linear(S, x, l.router, rows)
  local probs = S:op("router.softmax", logits.n, "fp32", { logits }, {}, { { logits } })
  local w = S:op("router.topk", rows * C.top_k, "fp32", { probs }, {}, { { probs } })
  S:drop(logits, probs)
  local out = S:op("moe.zeros", x.n, x.dt, {}, {}, {})
  local n = rows * C.top_k // C.experts
  for e = 1, C.experts do
    local xe = S:op("moe.index_select", n * C.d, x.dt, { x }, {}, { { x } })
    local ye = L.swiglu(S, xe, l.experts[e], n, "expert")
    local ys = S:op("moe.scale", ye.n, ye.dt, { ye, w }, { w, ye }, { { ye }, { w } })
    local acc = S:op("moe.index_add", out.n, out.dt, { out, ys }, {},
      { { out, alias = 1 }, { ys } })
    S:drop(xe, ye, ys, out)
    out = acc
  end
  S:drop(w)
  return out
end

function F.forward_loss(S, P, run)
  local B, Tt = run.batch, run.seq
  local rows_v = B * C.patches
  local px = S:to(P.pixels, run.param_dtype, "pixels.to")
  local x = L.linear(S, px, P.patch, rows_v)
  S:drop(px)
  for _, l in ipairs(P.v) do
    local h = attention(S, x, l, L.layernorm(S, x, l.ln1[1], l.ln1[2], rows_v, "ln1"), rows_v,
      B, C.patches, C.vd, C.vheads, nil)
    local n2 = L.layernorm(S, h, l.ln2[1], l.ln2[2], rows_v, "ln2")
    local m = L.gelu_mlp(S, n2, l.mlp, rows_v, "mlp")
    S:drop(x, n2)
    x = L.add(S, h, m, "residual")
    S:drop(h, m)
  end
  local img = L.gelu_mlp(S, x, P.proj, rows_v, "projector")
  S:drop(x)
  local T = Tt + C.patches
  local rows = B * T
  local text = L.embedding(S, P.embed, B * Tt, C.d, "embed_tokens")
  x = S:op("inputs_embeds.cat", rows * C.d, text.dt, { img, text }, {},
    { { img, alias = 1 }, { text, alias = 1 } })
  S:drop(img, text)
  local mask = S:new_tensor(B * T * T, run.dtype, "causal_mask", false)
  for _, l in ipairs(P.t) do
    local h = attention(S, x, l, L.rmsnorm(S, x, l.ln1, rows, "input_layernorm"), rows, B, T,
      C.d, C.heads, mask)
    local n2 = L.rmsnorm(S, h, l.ln2, rows, "post_attention_layernorm")
    local m = moe(S, n2, l, rows)
    S:drop(x, n2)
    x = L.add(S, h, m, "residual")
    S:drop(h, m)
  end
  local n = L.rmsnorm(S, x, P.norm, rows, "norm")
  S:drop(x, mask)
  S:set_category("logits_loss")
  local logits = L.linear(S, n, P.head, rows)
  S:drop(n)
  local l = loss.causal_lm(S, logits, { batch = B, seq = T, impl = run.loss })
  S:drop(logits)
  S:set_category("activations")
  return l
end

-- the run table (stdlib/run.lua); its defaults: AdamW on PyTorch (CUDA),
-- cross-entropy, nothing frozen
local run = require("stdlib.run").new({ sim = F, batch = args.batch, seq = args.seq,
  param_dtype = "bf16", dtype = "bf16", optimizer = { state_dtype = "fp32" } })
local st = step.simulate(F, run)

-- closed form, to check the simulator's own parameter count
local lp = vram.linear_params
local vit = lp(3 * C.patch * C.patch, C.vd, true) + C.vlayers * (4 * lp(C.vd, C.vd, true)
  + lp(C.vd, C.vffn, true) + lp(C.vffn, C.vd, true) + 4 * C.vd)
local dec = C.layers * (4 * lp(C.d, C.d) + lp(C.d, C.experts)
  + C.experts * (2 * lp(C.d, C.effn) + lp(C.effn, C.d)) + 2 * C.d)
local total = vit + lp(C.vd, C.d, true) + lp(C.d, C.d, true) + C.vocab * C.d * 2 + dec + C.d
assert(total == st.param_count, ("closed form %d ~= simulated %d"):format(total, st.param_count))
print(("TinyMoE-VL: %d experts (top-%d), %d + %d layers, %s parameters (%s active per token)")
  :format(C.experts, C.top_k, C.vlayers, C.layers, commas(st.param_count),
    commas(total - C.layers * (C.experts - C.top_k) * (2 * lp(C.d, C.effn) + lp(C.effn, C.d)))))
print(("train step, batch %d x (%d text + %d image tokens), bf16 + AdamW fp32 states:")
  :format(run.batch, run.seq, C.patches))
print(("peak %s (%s), in %s at %s"):format(vram.fmt(st.peak, "GiB"), vram.fmt(st.peak, "MiB"),
  st.peak_phase, st.peak_op or "?"))
