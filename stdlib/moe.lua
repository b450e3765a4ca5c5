-- Mixture-of-experts blocks as memory events, following the eager code of
-- transformers' modeling_mixtral.py / modeling_qwen3_moe.py (router, softmax,
-- top-k, a Python loop over the experts that gathers each expert's tokens,
-- runs its MLP and index_add_s the weighted output back),
-- modeling_gpt_oss.py (fused 3-D expert weights; the loop in training, every
-- expert on every token in inference) and modeling_deepseek_v3.py (fp32
-- router scores and accumulator).
--
-- Routing. Which tokens an expert gets is data: the simulator assumes a
-- balanced router, rows*top_k assignments spread as evenly as the integers
-- allow (dropless), or at most `capacity` per expert (capacity factor:
-- ceil(cf * rows * top_k / experts); the rest are dropped); run.moe.imbalance
-- gives the busiest expert that many times its balanced share. For the loop the
-- activations autograd saves sum over the experts to rows*top_k rows
-- whatever the balance; only the one-expert transients follow the busiest
-- expert.
--
-- Implementations (moe.impl):
--   loop     per-expert nn.Linear modules, one gather + MLP + index_add_ per
--            expert (transformers eager)
--   grouped  fused (E, out, in) expert weights, tokens permuted once into
--            rows*top_k (or E*capacity) rows, one grouped GEMM per
--            projection (transformers' grouped_mm, megablocks, torchtitan)
--   dense    every expert on every token (gpt-oss inference in transformers)
local layers = require("stdlib.layers")
local compose = require("stdlib.compose")

local M = {}

local FP32 = "fp32"

-- integer ceil of f * total / E, f given in 1/1000 steps
local function share(f, total, experts)
  local milli = math.floor(f * 1000 + 0.5)
  return (milli * total + 1000 * experts - 1) // (1000 * experts)
end

-- The most assignments an expert takes (capacity_factor: its share of
-- rows * top_k over E, rounded up), nil without a capacity.
function M.capacity(rows, top_k, experts, capacity_factor)
  return capacity_factor and share(capacity_factor, rows * top_k, experts) or nil
end

-- Assignments per expert: a list of E counts summing to the routed rows
-- (less what a capacity drops). imbalance (>= 1, optional): the busiest
-- expert (the first) gets that many times the balanced share,
-- ceil(imbalance * rows * top_k / E), at most every row (a token picks an
-- expert once); the others share the rest as evenly as the integers allow.
function M.tokens_per_expert(rows, top_k, experts, capacity_factor, imbalance)
  local total = rows * top_k
  local cap = M.capacity(rows, top_k, experts, capacity_factor)
  local counts = {}
  local first, rest, others = nil, total, experts
  if imbalance and imbalance > 1 and experts > 1 then
    first = math.min(rows, share(imbalance, total, experts), total)
    rest, others = total - first, experts - 1
  end
  local base, extra = rest // others, rest % others
  for i = 1, others do
    local n = base + (i <= extra and 1 or 0)
    counts[#counts + 1] = n
  end
  -- (the busiest holds at least the balanced share, so the others hold at
  -- most it, never more than every row)
  if first then table.insert(counts, 1, first) end
  for e = 1, experts do
    if cap and counts[e] > cap then counts[e] = cap end
  end
  return counts, cap
end

-- M.tokens_per_expert's lists, remembered for the loop (read only there):
-- a layout search asks for the same few thousands of times. Started again
-- past COUNTS_MAX lists.
local COUNTS_MAX = 1000
local counted, ncounted = {}, 0
local function counts_of(rows, top_k, experts, cf, imbalance)
  local key = ("%d %d %d %s %s"):format(rows, top_k, experts, cf, imbalance)
  local c = counted[key]
  if not c then
    if ncounted >= COUNTS_MAX then counted, ncounted = {}, 0 end
    c = M.tokens_per_expert(rows, top_k, experts, cf, imbalance)
    counted[key], ncounted = c, ncounted + 1
  end
  return c
end

-- A balanced, dropless split as the quotient and remainder of rows x top_k
-- by the experts: expert i gets q + 1 for i <= r, else q. A compiled
-- estimate's probe (stdlib/compiled.lua expert_rows) sets o.split = {q, r}
-- apart from rows: the loop's sizes are then polynomials in q for each r.
function M.split(rows, top_k, experts)
  local total = rows * top_k
  return total // experts, total % experts
end

-- Whether every parameter under b (an expert's MLP) is the one under a
-- at the same keys, alike but for its id, delta ids on; the same tables
-- hold parameters in both. lo, hi: the least and past the largest id
-- under a so far.
local function shifted(a, b, delta, lo, hi)
  for k, v in pairs(a) do
    if type(v) == "table" then
      local w = b[k]
      if type(w) ~= "table" then return nil end
      if v.param then
        if w.id - v.id ~= delta or not compose.alike(v, w) then return nil end
        if v.id < lo then lo = v.id end
        if v.id >= hi then hi = v.id + 1 end
      else
        lo, hi = shifted(v, w, delta, lo, hi)
        if not lo then return nil end
      end
    end
  end
  for k, w in pairs(b) do
    if type(w) == "table" and a[k] == nil then return nil end
  end
  return lo, hi
end

-- Whether the experts are copies of the first, one stride of ids apart
-- (built one after another by the same code: every expert's parameters
-- alike but for their ids): {stride, lo, hi}, expert e's parameters then
-- lying in [lo, hi) + its gate weight's id; false otherwise. The loop
-- composes such experts (below), asking once per block (a layer copy's
-- block shares its template's answer: the ids are relative).
local function uniform_experts(experts)
  local a = experts[1]
  local base = a.gate.w.id
  local lo, hi = shifted(a, a, 0, math.maxinteger, 0)
  local stride = experts[2] and experts[2].gate.w.id - base or 0
  for e = 2, #experts do
    if not lo or not shifted(a, experts[e], (e - 1) * stride, lo, hi) then return false end
  end
  return lo and lo < hi and { stride = stride, lo = lo - base, hi = hi - base } or false
end

-- Parameters of one MoE block in model.parameters() order. o: the block
-- description (decoder.read's m.moe); opts as decoder.build's (dt,
-- trainable, lora, quant). Returns the block's parameter table.
function M.build(S, o, H, opts)
  local dt, tr, lo = opts.dt, opts.trainable, opts.lora
  local qf = opts.quant_for or function() return opts.quant end
  local quant = qf(opts.quant, "gate_proj", "experts")
  local shared_quant = qf(opts.quant, "gate_proj", "mlp")
  -- one SwiGLU MLP of width I (an expert, the shared expert); leaves: its
  -- modules' names, which LoRA targets name (o.expert_leaves: an expert's
  -- where the modelling code names them otherwise, Phi-MoE's w1/w3/w2)
  local function mlp(width, q, leaves)
    local function lin(name, inn, out)
      return layers.new_linear(S, { label = name, inn = inn, out = out, dt = dt,
        trainable = tr(name), lora = lo(name), quant = q })
    end
    leaves = leaves or { gate = "gate_proj", up = "up_proj", down = "down_proj" }
    local gate = lin(leaves.gate, H, width)
    local up = lin(leaves.up, H, width)
    return { gate = gate, up = up, down = lin(leaves.down, width, H) }
  end
  local B = { o = o, hidden = H }
  -- the router: Linear(H, E) (gpt-oss with a bias); DeepSeek's is a bare
  -- weight, the same bytes. o.router_linear: the module's leaf name where
  -- it is an nn.Linear (transformers 4.x Mixtral/Qwen-MoE/OLMoE `gate`),
  -- which LoRA targets (all-linear too) wrap; gpt-oss's and DeepSeek's
  -- routers are their own modules, never wrapped
  B.router = layers.new_linear(S, { label = "router", inn = H, out = o.experts,
    bias = o.router_bias, dt = dt, trainable = tr("router"),
    lora = o.router_linear and lo(o.router_linear) or nil })
  if o.score_bias then -- DeepSeek-V3 e_score_correction_bias: an fp32 buffer
    S.tape:alloc(S:bytes(FP32, o.experts), "buffers", "router.e_score_correction_bias")
  end
  local I = o.inter
  -- expert parallelism (stdlib/parallel.lua sets o.ep): this rank holds
  -- E/ep of the experts; the router still scores all E
  local E = o.experts // (o.ep or 1)
  if o.fused then
    -- (E, H, 2I) and (E, I, H) Parameters (+ biases): one tensor each
    -- a quantized checkpoint (gpt-oss: mxfp4) stores them packed, scales
    -- included, as (E x out) rows of `in`
    local ck = quant and quant.ckpt
    local Qm = ck and require("stdlib.quant")
    B.gate_up = S:param(E * H * 2 * I, ck and quant.store or dt, tr("experts"),
      "experts.gate_up_proj",
      { bytes = ck and Qm.weight_bytes(S, ck, E * 2 * I, H, "experts.gate_up_proj") or nil })
    B.gate_up.rows = E * 2 * I
    B.down = S:param(E * I * H, ck and quant.store or dt, tr("experts"),
      "experts.down_proj",
      { bytes = ck and Qm.weight_bytes(S, ck, E * H, I, "experts.down_proj") or nil })
    B.down.rows = E * H
    if o.expert_bias then
      B.gate_up_b = S:param(E * 2 * I, dt, tr("experts"), "experts.gate_up_proj_bias")
      B.down_b = S:param(E * H, dt, tr("experts"), "experts.down_proj_bias")
    end
    B.uniform = { stride = 0 } -- every expert's weights are the same parameters
  else
    B.experts = {}
    for e = 1, o.experts do B.experts[e] = mlp(I, quant, o.expert_leaves) end
  end
  if o.shared_inter then
    B.shared = mlp(o.shared_inter, shared_quant)
    if o.shared_gate then
      B.shared_gate = layers.new_linear(S, { label = "shared_expert_gate", inn = H, out = 1,
        dt = dt, trainable = tr("shared_expert_gate"), lora = lo("shared_expert_gate") })
    end
  end
  return B
end

-- router -> (top-k weights, their indices). Returns weights (rows, k) in
-- `wdt` (requires grad) and the router logits (kept for the aux loss).
local function route(S, x, B, rows, label)
  local o = B.o
  local E, k = o.experts, o.top_k
  local logits
  if o.router_fp32 then -- F.linear(x.float(), weight.float())
    local x32 = S:to(x, FP32, label .. ".router_input_fp32")
    local w32 = S:to(B.router.w, FP32, label .. ".router_weight_fp32")
    logits = S:new_tensor(rows * E, FP32, label .. ".router", S:rg(x32, w32))
    S:node(label .. ".router", { x32, w32 }, { { x32 }, { w32 } }, { logits })
    S:drop(x32, w32)
  else
    logits = layers.linear(S, x, B.router, rows)
  end
  -- softmax (or sigmoid) in fp32 over the experts: F.softmax(dtype=float)
  -- casts a lower-precision input to an fp32 copy first
  local l32 = S:to(logits, FP32, label .. ".router_logits_float")
  local probs = S:new_tensor(rows * E, FP32, label .. ".router_scores", S:rg(l32))
  S:node(label .. ".router_scores", { probs }, { { l32, l32.b } }, { probs })
  S:drop(l32)
  local sel_src = probs
  if o.score_bias then -- scores + e_score_correction_bias picks, scores weigh
    sel_src = S:new_tensor(rows * E, FP32, label .. ".scores_for_choice", false)
  end
  -- topk: values (rows, k) + int64 indices; its backward scatters into a
  -- zero (rows, E) gradient
  local idx = S:new_tensor(rows * k, "int64", label .. ".topk_indices", false)
  local w = S:new_tensor(rows * k, FP32, label .. ".topk", S:rg(probs))
  S:node(label .. ".topk", { idx }, { { probs, S:bytes(FP32, rows * E) } }, { w })
  if sel_src ~= probs then S:drop(sel_src) end
  S:drop(probs)
  if o.norm_topk then -- weights / weights.sum(-1)
    local s = S:op(label .. ".topk_sum", rows, FP32, { w }, {}, { { w } })
    local nw = S:new_tensor(rows * k, FP32, label .. ".topk_norm", S:rg(w, s))
    S:node(label .. ".topk_norm", { w, s }, { { w }, { s } }, { nw })
    S:drop(w, s)
    w = nw
  end
  if o.scaling then -- routed_scaling_factor
    local sw = S:op(label .. ".routed_scaling", rows * k, FP32, { w }, {}, { { w } })
    S:drop(w)
    w = sw
  end
  if o.weights_dtype ~= FP32 then
    local c = S:to(w, x.dt, label .. ".routing_weights_cast")
    S:drop(w)
    w = c
  end
  return w, idx, logits
end

-- One expert's SwiGLU (or gpt-oss's clamped GLU) on n gathered rows.
local function expert_mlp(S, xe, B, e, n, label)
  local o = B.o
  if not o.fused then return layers.swiglu(S, xe, B.experts[e], n, label) end
  -- gpt-oss: current_state @ gate_up_proj[e] + bias: the select of the
  -- fused parameter sends a full (E, H, 2I) zero-filled gradient back
  local I, H = o.inter, B.hidden
  local gu = S:new_tensor(n * 2 * I, xe.dt, label .. ".gate_up", S:rg(xe, B.gate_up))
  S:node(label .. ".gate_up", { xe, B.gate_up }, { { xe }, { B.gate_up, B.gate_up.b },
    B.gate_up_b and { B.gate_up_b, B.gate_up_b.b } or nil }, { gu })
  -- gate/up are strided views; clamp, sigmoid(gate*alpha), products
  local g = S:op(label .. ".clamp_gate", n * I, xe.dt, { gu }, { gu }, { { gu, gu.b } })
  local u = S:op(label .. ".clamp_up", n * I, xe.dt, { gu }, { gu }, { { gu, gu.b } })
  S:drop(gu)
  local ga = S:op(label .. ".gate_alpha", n * I, xe.dt, { g }, {}, { { g } })
  local sg = S:op(label .. ".sigmoid", n * I, xe.dt, { ga }, {}, { { ga } })
  S:drop(ga)
  local glu = S:op(label .. ".glu", n * I, xe.dt, { g, sg }, { g, sg }, { { g }, { sg } })
  S:drop(g, sg)
  local u1 = S:op(label .. ".up_plus_one", n * I, xe.dt, { u }, {}, { { u, alias = 1 } })
  S:drop(u)
  local prod = S:op(label .. ".gated", n * I, xe.dt, { u1, glu }, { u1, glu }, { { u1 }, { glu } })
  S:drop(u1, glu)
  local out = S:new_tensor(n * H, xe.dt, label .. ".down", S:rg(prod, B.down))
  S:node(label .. ".down", { prod, B.down }, { { prod }, { B.down, B.down.b },
    B.down_b and { B.down_b, B.down_b.b } or nil }, { out })
  S:drop(prod)
  return out
end

-- Expert e's turn in the eager loop on its n gathered rows; prev: the
-- accumulator's last index_add_ version (nil before the first). Returns
-- the version after it.
local function one_expert(S, x, B, w, e, n, rows, acc_dt, final, prev, label)
  local H, k = B.hidden, B.o.top_k
  local el = label .. ".expert"
  -- torch.where(expert_mask[e].squeeze(0)): the indexing copies the
  -- expert's (k, rows) int64 slice; where returns idx and top_x
  S:temp(S:bytes("int64", rows * k), el .. ".mask_slice")
  local slot = S:new_tensor(n, "int64", el .. ".where_idx", false)
  local top_x = S:new_tensor(n, "int64", el .. ".where_top_x", false)
  -- hidden_states[top_x]: IndexBackward scatters into a zero (rows, H)
  local xe = S:new_tensor(n * H, x.dt, el .. ".gather", S:rg(x))
  S:node(el .. ".gather", { top_x }, { { x, S:bytes(x.dt, rows * H) } }, { xe })
  local ye = expert_mlp(S, xe, B, e, n, el)
  S:drop(xe)
  -- routing_weights[top_x, idx, None]
  local we = S:new_tensor(n, w.dt, el .. ".weight", S:rg(w))
  S:node(el .. ".weight", { top_x, slot }, { { w, w.b } }, { we })
  local wy = S:new_tensor(n * H, S.promote(ye.dt, we.dt), el .. ".weighted", S:rg(ye, we))
  S:node(el .. ".weighted", { ye, we }, { { ye }, { we } }, { wy })
  S:drop(ye, we)
  local src = wy
  if wy.dt ~= acc_dt then
    src = S:to(wy, acc_dt, el .. ".to_dtype")
    S:drop(wy)
  end
  -- index_add_ in place: each call is a node whose backward hands the
  -- accumulator's gradient on unchanged and index_selects (n, H) for
  -- the source; versions of `final` are zero-byte handles. Its formula
  -- (derivatives.yaml: grad.index_select(dim, index).expand_as(source))
  -- names `source`, so autograd saves the (n, H) source itself: measured,
  -- the y * w products stay live until backward (tests/truth n01, n14, n18)
  if src.rg then
    local ver = S:new_tensor(0, acc_dt, el .. ".index_add", true)
    ver.b, ver.n = final.b, final.n
    local edges = { { src, S:bytes(acc_dt, n * H) } }
    if prev then edges[2] = { prev, alias = 1 } end
    S:node(el .. ".index_add", { top_x, src }, edges, { ver })
    if prev then S:drop(prev) end
    prev = ver
  end
  S:drop(src, slot, top_x)
  return prev
end

-- The routed experts, transformers' eager loop. Returns (rows, H) in the
-- accumulator dtype.
--
-- Experts with as many rows do the same events but for ids (their
-- parameters, the chained index_add_ version, their new tensors): an
-- expert is walked under an echo (nested in the layer's, when the layer is
-- echoed: stdlib/compose.lua) and the tape replays it for the next experts
-- of its count, its parameters shifted to theirs and the version before
-- it theirs (x, w, final and the mask stay), as walking them would. Not
-- under autocast (its weight casts are state outside the tape) nor where
-- the run composes nothing (S.composable).
local function loop(S, x, B, w, rows, label)
  local o = B.o
  local H, k = B.hidden, o.top_k
  local acc_dt = o.weights_dtype == FP32 and o.acc_fp32 and FP32 or x.dt
  local final = S:new_tensor(rows * H, acc_dt, label .. ".final_hidden_states", false)
  -- one_hot(selected, E).permute(...): int64 (E, k, rows), no grad
  local mask = S:new_tensor(rows * k * o.experts, "int64", label .. ".expert_mask", false)
  local counts
  if o.split then
    counts = {}
    for e = 1, o.experts do counts[e] = o.split.q + (e <= o.split.r and 1 or 0) end
  else
    if o.capacity_factor or o.imbalance then
      S:sized("an expert's tokens under a capacity or an imbalance are a ceiling of rows x "
        .. "top_k / experts")
    end
    counts = counts_of(rows, k, o.experts, o.capacity_factor, o.imbalance)
  end
  local tape = S.tape
  local U = S.composable and not S.autocast and B.uniform
  if U == nil then
    U = uniform_experts(B.experts)
    B.uniform = U
  end
  local E = o.experts
  local prev, e = nil, 1
  while e <= E do
    local n = counts[e]
    if n > 0 then
      -- (the first expert of a graph starts the chain: the next is no replay of it)
      local try = U and e < E and counts[e + 1] == n and (prev or not S.grad)
      if try then tape:echo() end
      local before = prev
      prev = one_expert(S, x, B, w, e, n, rows, acc_dt, final, prev, label)
      if try and tape:echo_end() and (before == nil) == (prev == nil) then
        -- experts e + 1 .. r of as many rows: e replayed once each, in C
        local r = e + 1
        while r < E and counts[r + 1] == n do r = r + 1 end
        local lo, hi = 0, 0
        if U.lo then
          local base = B.experts[e].gate.w.id
          lo, hi = base + U.lo, base + U.hi
        end
        local out = tape:echo_replay(before and { before.id, prev.id } or {}, lo, hi, U.stride,
          prev and prev.id or x.id, r - e)
        prev = prev and compose.moved(prev, out)
        S.experts_replayed = (S.experts_replayed or 0) + r - e -- (tests/lua/test_fastpath.lua)
        e = r
      end
    end
    e = e + 1
  end
  S:drop(mask)
  -- the block's output: `final`'s memory, carrying the chain's gradient
  if prev then return prev, final end
  return final, nil
end

-- An all-to-all's receive buffer: a copy whose gradient goes back the same way.
local function all_to_all(S, x, label)
  return S:op(label, x.n, x.dt, { x }, {}, { { x } })
end

-- Tokens permuted once, one grouped GEMM per projection over fused weights.
local function grouped(S, x, B, w, rows, label)
  local o = B.o
  local H, I, k = B.hidden, o.inter, o.top_k
  local ep = o.ep or 1
  if o.capacity_factor then
    S:sized("an expert's capacity is ceil(capacity_factor x rows x top_k / experts)")
  end
  local cap = M.capacity(rows * ep, k, o.experts, o.capacity_factor) -- (not the counts)
  local n = cap and cap * (o.experts // ep) or rows * k
  local perm = S:new_tensor(2 * rows * k, "int64", label .. ".permutation", false)
  local xp = S:new_tensor(n * H, x.dt, label .. ".permuted", S:rg(x))
  S:node(label .. ".permuted", { perm }, { { x, S:bytes(x.dt, rows * H) } }, { xp })
  if ep > 1 then
    -- all-to-all: each rank receives the rows routed to its E/ep experts
    -- (balanced: as many as it sends); backward sends their gradients back
    local got = all_to_all(S, xp, label .. ".all_to_all_dispatch")
    S:drop(xp)
    xp = got
  end
  local gu = S:new_tensor(n * 2 * I, x.dt, label .. ".grouped_gate_up", S:rg(xp, B.gate_up))
  S:node(label .. ".grouped_gate_up", { xp, B.gate_up }, { { xp }, { B.gate_up },
    B.gate_up_b and { B.gate_up_b } or nil }, { gu })
  S:drop(xp)
  local act = S:op(label .. ".act", n * I, x.dt, { gu }, { gu }, { { gu } })
  local prod = S:op(label .. ".mul", n * I, x.dt, { act, gu }, { act, gu },
    { { act }, { gu, gu.b } })
  S:drop(act, gu)
  local y = S:new_tensor(n * H, x.dt, label .. ".grouped_down", S:rg(prod, B.down))
  S:node(label .. ".grouped_down", { prod, B.down }, { { prod }, { B.down },
    B.down_b and { B.down_b } or nil }, { y })
  S:drop(prod)
  if ep > 1 then -- and the expert outputs go back to the ranks of their tokens
    local back = all_to_all(S, y, label .. ".all_to_all_combine")
    S:drop(y)
    y = back
  end
  -- unpermute: weight each row and sum the top-k copies per token
  local wy = S:new_tensor(n * H, x.dt, label .. ".weighted", S:rg(y, w))
  S:node(label .. ".weighted", { y, w, perm }, { { y }, { w, w.b } }, { wy })
  S:drop(y)
  local out = S:op(label .. ".unpermute", rows * H, x.dt, { wy }, { perm },
    { { wy, S:bytes(x.dt, n * H) } })
  S:drop(wy, perm)
  return out
end

-- Every expert on every token (gpt-oss inference): (E, rows, 2I) at once.
local function dense(S, x, B, w, rows, label)
  local o = B.o
  local H, I, E = B.hidden, o.inter, o.experts
  local rep = S:new_tensor(E * rows * H, x.dt, label .. ".repeat", false)
  local gu = S:new_tensor(E * rows * 2 * I, x.dt, label .. ".bmm_gate_up", false)
  S:drop(rep)
  local g = S:new_tensor(E * rows * I, x.dt, label .. ".clamp_gate", false)
  local u = S:new_tensor(E * rows * I, x.dt, label .. ".clamp_up", false)
  S:drop(gu)
  local glu = S:new_tensor(E * rows * I, x.dt, label .. ".glu", false)
  S:temp(S:bytes(x.dt, E * rows * I), label .. ".sigmoid")
  S:drop(g)
  local prod = S:new_tensor(E * rows * I, x.dt, label .. ".gated", false)
  S:drop(u, glu)
  local y = S:new_tensor(E * rows * H, x.dt, label .. ".bmm_down", false)
  S:drop(prod)
  local wy = S:new_tensor(E * rows * H, x.dt, label .. ".weighted", false)
  S:drop(y)
  local out = S:new_tensor(rows * H, x.dt, label .. ".sum_experts", false)
  S:drop(wy)
  return out
end

-- Input jitter (o.input_jitter > 0, in training: Phi-MoE's
-- PhimoeSparseMoeBlock.forward, `hidden_states *= torch.empty_like(
-- hidden_states).uniform_(1 - eps, 1 + eps)`). The random tensor has x's
-- size and dtype; the multiply is in place, so the router and the experts
-- read x's own storage and no product is allocated. MulBackward saves only
-- the operand whose partner requires grad: the random tensor (x's old value
-- is not needed, no copy). The result is a new version of x: a zero-byte
-- handle that carries the gradient back through the node, whose saved x
-- keeps x's storage, which the router Linear saves through the version,
-- until the node runs, right after the router's backward.
local function input_jitter(S, x, label)
  local r = S:new_tensor(x.n, x.dt, label .. ".input_jitter_noise", false)
  if not S:rg(x) then -- no graph: the noise dies with the statement
    S:drop(r)
    return S:view(x)
  end
  local ver = S:new_tensor(0, x.dt, label .. ".input_jitter", S:rg(x))
  ver.b, ver.n = x.b, x.n
  S:node(label .. ".input_jitter", { r, x }, { { x, x.b } }, { ver })
  S:drop(r)
  return ver
end

-- The whole block on x (rows, H). o: { label, impl (loop | grouped |
-- dense), keep_logits, train (module.training) }. Returns the output
-- (rows, H) and the router logits when the run keeps them for the
-- auxiliary loss.
function M.forward(S, x, B, rows, o)
  local label, impl, keep_logits = o.label, o.impl, o.keep_logits
  local jitter = o.train and B.o.input_jitter and B.o.input_jitter > 0
  local o = B.o
  if jitter then x = input_jitter(S, x, label) end
  local w, idx, logits = route(S, x, B, rows, label)
  local out, mem
  if impl == "dense" then
    out = dense(S, x, B, w, rows, label)
  elseif impl == "grouped" then
    out = grouped(S, x, B, w, rows, label)
  else
    out, mem = loop(S, x, B, w, rows, label)
  end
  S:drop(w, idx)
  if out.dt ~= x.dt then -- DeepSeek: final_hidden_states.type(dtype)
    local c = S:to(out, x.dt, label .. ".to_dtype")
    S:drop(out)
    if mem then S:drop(mem) end
    out, mem = c, nil
  end
  if B.shared then
    local sh = layers.swiglu(S, x, B.shared, rows, label .. ".shared_expert")
    if B.shared_gate then -- sigmoid(shared_expert_gate(x)) * shared
      local gl = layers.linear(S, x, B.shared_gate, rows)
      local sg = S:op(label .. ".shared_gate_sigmoid", rows, gl.dt, { gl }, {}, { { gl } })
      S:drop(gl)
      local m = S:op(label .. ".shared_gated", sh.n, sh.dt, { sh, sg }, { sh, sg },
        { { sh }, { sg } })
      S:drop(sh, sg)
      sh = m
    end
    local sum = layers.add(S, out, sh, label .. ".add_shared")
    S:drop(out, sh)
    if mem then S:drop(mem) end
    out, mem = sum, nil
  end
  local kept = nil
  if keep_logits then kept = logits else S:drop(logits) end
  if jitter then S:drop(x) end
  return out, mem, kept
end

-- load_balancing_loss_func over every layer's router logits: cat, softmax,
-- top-k, one_hot (int64) and its float mean. Returns the scalar loss.
function M.aux_loss(S, logits_list, rows, o, label)
  local E, k, L = o.experts, o.top_k, #logits_list
  local dt = logits_list[1].dt
  local cat = S:new_tensor(L * rows * E, dt, label .. ".cat_router_logits", true)
  -- torch.cat's backward slices one gradient per layer; a node holds at
  -- most 64 edges, so the slices hang off a chain of zero-byte handles
  -- whose nodes are created last-first (backward runs them first-first)
  local chunks = {}
  for i = 1, L, 60 do chunks[#chunks + 1] = { first = i, last = math.min(i + 59, L) } end
  local outs = { cat }
  for c = 2, #chunks do
    local v = S:new_tensor(0, dt, label .. ".cat_router_logits", true)
    v.b, v.n = cat.b, cat.n
    outs[c] = v
  end
  for c = #chunks, 1, -1 do
    local edges = {}
    for i = chunks[c].first, chunks[c].last do
      edges[#edges + 1] = { logits_list[i], logits_list[i].b }
    end
    if c < #chunks then edges[#edges + 1] = { outs[c + 1], alias = 1 } end
    S:node(label .. ".cat_router_logits", {}, edges, { outs[c] })
  end
  for c = 2, #chunks do S:drop(outs[c]) end
  local p = S:new_tensor(cat.n, dt, label .. ".softmax", S:rg(cat))
  S:node(label .. ".softmax", { p }, { { cat } }, { p })
  S:drop(cat)
  local sel = S:new_tensor(L * rows * k, "int64", label .. ".topk", false)
  local oh = S:new_tensor(L * rows * k * E, "int64", label .. ".one_hot", false)
  local ohf = S:new_tensor(L * rows * k * E, FP32, label .. ".one_hot_float", false)
  S:drop(oh)
  local tpe = S:new_tensor(k * E, FP32, label .. ".tokens_per_expert", false)
  S:drop(ohf, sel)
  local ppe = S:op(label .. ".router_prob_per_expert", E, FP32, { p }, {}, { { p } })
  S:drop(p)
  local loss = S:op(label .. ".aux_loss", 1, FP32, { ppe }, { tpe }, { { ppe } })
  S:drop(ppe, tpe)
  return loss
end

return M
