-- Hugging Face eager building blocks, op for op, as memory events: what each
-- op allocates, what autograd saves, where gradients flow and when Python
-- lets go of a tensor. Shapes are element counts; `rows` is tokens (B*T).
local vram = require("vram")
local errors = require("stdlib.errors")
local L = {}

local FP32 = "fp32"
local matmul

-- What a product's backward saves of its operands: a for b's gradient,
-- then b for a's (as two values, nil where none: Sim:node_own's s1, s2).
local function product_saved(a, b)
  local s1, s2 = b.rg and a or nil, a.rg and b or nil
  return s1 or s2, s1 and s2
end

-- A binary elementwise op on operands of different float dtypes: torch's CPU
-- TensorIterator first copies the narrower operand (n elements) into the
-- common dtype, a temporary as long as the op runs (trace: aten::empty_strided
-- under aten::add / aten::mul); CUDA kernels cast as they read.
function L.mixed_dtype_temp(S, a_dt, b_dt, n)
  if not S.cpu or a_dt == b_dt then return nil end
  return S:bytes(S.promote(a_dt, b_dt), n)
end
local mixed = L.mixed_dtype_temp

-- A linear layer's parameters; lora = {r=, scaling=} adds fp32 adapters.
-- quant: {store = dtype, compute = dtype} keeps the weight in a packed
-- format (QLoRA's nf4, NVFP4, fp8) that each matmul dequantizes into a
-- temporary in the compute dtype, in forward and again in backward.
-- With quant.master the parameter itself stays in `dt` (the master copy that
-- trains) and the packed copy is an extra persistent forward weight (seed
-- 002: NVFP4 forward weights over bf16 masters, straight-through grads).
-- quant.ckpt: a quantized checkpoint's format (stdlib/quant.lua): the weight
-- holds its exact stored bytes, scales included; only bitsandbytes
-- dequantizes the whole weight per matmul (fp8, GPTQ/AWQ and mxfp4 kernels
-- read the packed weight).
-- bitsandbytes 4-bit (nf4, nf4_dq; stdlib/quant.lua's "bitsandbytes"
-- checkpoints): MatMul4Bit saves its input whenever it requires grad (for a
-- weight gradient it never computes), and with double quantisation
-- dequantize_4bit first rebuilds the fp32 absmax (n/64 values) as a further
-- temporary; peft's LoRA over it clones the base output and casts the
-- adapter output before the add (peft/tuners/lora/bnb.py Linear4bit).
local BNB4 = { nf4 = true, nf4_dq = true }
L.BNB4 = BNB4
-- nn.Linear(inn, out) as the parameters it creates. o: { label, inn, out,
-- dt (the parameter dtype), bias (default false), trainable (default false),
-- lora ({ r } from the run's policy), quant (run.quant, see above) }.
function L.new_linear(S, o)
  local inn, out, dt, label, quant = o.inn, o.out, o.dt, o.label, o.quant
  if quant and quant.te then return L.new_te_linear(S, o, quant.te) end
  local trainable = o.trainable
  local lin = { inn = inn, out = out, label = label }
  local packed = quant and not quant.master
  local bytes = quant and quant.ckpt
    and require("stdlib.quant").weight_bytes(S, quant.ckpt, out, inn, label) or nil
  lin.w = S:param(inn * out, packed and quant.store or dt, trainable, label,
    quant and { cat = quant.master and "master_weights" or nil, bytes = bytes } or nil)
  lin.w.rows = out
  if quant and (not quant.ckpt or quant.dequant) then
    lin.dequant = S:bytes(quant.compute, inn * out)
    lin.compute = quant.compute
    if BNB4[quant.store] and not quant.master then
      lin.bnb = true
      if quant.store == "nf4_dq" then -- dequantize_blockwise's fp32 absmax
        lin.absmax = S:bytes(FP32, (inn * out + 63) // 64)
      end
    end
    -- bitsandbytes LLM.int8 (Linear8bitLt, load_in_8bit): MatMul8bitLt
    -- quantizes x per row instead of dequantizing W in forward (below)
    if quant.store == "int8" and not quant.master then lin.int8 = true end
    if quant.master then
      S.tape:alloc(S:bytes(quant.store, inn * out), "weights", label .. ".packed_forward")
    end
  end
  if o.bias then lin.b = S:param(out, dt, trainable, label .. ".bias") end
  if o.lora then lin.lora = L.new_lora(S, inn, out, o.lora.r, label, o.lora) end
  return lin
end

-- TransformerEngine's te.Linear (stdlib/frameworks/te_fp8.lua has the
-- sources): the parameter in the model dtype, and per module the
-- DelayedScaling state, fp32 scale[n] and amax_history[len, n] for n = 3
-- forward and 2 backward quantizers, each its own tensor.
function L.new_te_linear(S, o, te)
  local inn, out, dt, trainable, label = o.inn, o.out, o.dt, o.trainable, o.label
  if o.lora then
    errors.input(nil, "run.lora", "LoRA over a TransformerEngine te.Linear is not modelled")
  end
  local lin = { inn = inn, out = out, label = label, te = te }
  lin.w = S:param(inn * out, dt, trainable, label)
  lin.w.rows = out
  if o.bias then lin.b = S:param(out, dt, trainable, label .. ".bias") end
  for _, n in ipairs({ te.fwd_tensors, te.bwd_tensors }) do
    S.tape:alloc(S:bytes(FP32, n), "buffers", label .. ".fp8_scale")
    S.tape:alloc(S:bytes(FP32, vram.mul(te.amax_history_len, n)), "buffers",
      label .. ".fp8_amax_history")
  end
  return lin
end

-- An fp8 tensor as TE holds it: the data (1 B per element) and, when
-- `both`, its transpose, with one fp32 scale_inv.
local function fp8_tensor(S, n, both, label, cat)
  local b = S:round_bytes(n) * (both and 2 or 1) + S:bytes(FP32, 1)
  return { id = S.tape:alloc(b, cat or S.cat, label), n = n, dt = "fp8_e4m3", b = b, rg = false }
end

-- te.Linear forward under fp8_autocast: the input quantized row-wise (for
-- the GEMM) and column-wise (kept for the weight gradient; the row-wise
-- copy goes after the GEMM), the weight quantized both ways (the transpose
-- for dgrad) and saved, the output in the input's dtype. Backward quantizes
-- grad_output both ways (e5m2 under the HYBRID format) around its GEMMs.
function L.te_linear(S, x, lin, rows)
  local label = lin.label
  local needs_input = S.grad and lin.w.rg
  local xq_row = fp8_tensor(S, rows * lin.inn, false, label .. ".input_fp8")
  local xq_col = needs_input and fp8_tensor(S, rows * lin.inn, false, label .. ".input_fp8_t")
  local wq = fp8_tensor(S, lin.inn * lin.out, S.grad and x.rg, label .. ".weight_fp8", "weights")
  local out = S:new_tensor(rows * lin.out, x.dt, label, S:rg(x, lin.w, lin.b))
  S:drop(xq_row)
  if out.rg then
    local edges = { { x, x.b }, { lin.w, lin.w.b } }
    if lin.b then edges[3] = { lin.b, lin.b.b } end
    local saved = { wq }
    if xq_col then saved[2] = xq_col end
    S:node(label, saved, edges, { out }, 2 * S:round_bytes(rows * lin.out) + S:bytes(FP32, 1))
  end
  S:drop(wq, xq_col or nil)
  return out
end

-- peft's adapter pair on a linear of inn -> out: lora_A (r x inn) and
-- lora_B (out x r), fp32 (get_peft_model's autocast_adapter_dtype).
-- opts.dora: DoRA's magnitude vector (out, fp32, trains); opts.dropout: the
-- lora_dropout probability (L.linear).
function L.new_lora(S, inn, out, r, label, opts)
  opts = opts or {}
  local lo = { a = S:adapter_param(inn * r, FP32, label .. ".lora_A"),
    b = S:adapter_param(r * out, FP32, label .. ".lora_B"), r = r,
    dropout = opts.dropout and opts.dropout > 0 and opts.dropout or nil }
  if opts.dora then
    lo.m = S:adapter_param(out, FP32, label .. ".lora_magnitude_vector")
  end
  return lo
end

-- peft's LoRA on an nn.Embedding (vocab x dim): lora_embedding_A (r x vocab)
-- and lora_embedding_B (dim x r), fp32.
function L.new_embedding_lora(S, vocab, dim, r, label, opts)
  if opts and (opts.dora or opts.dropout and opts.dropout > 0) then
    require("stdlib.errors").input(nil, "run.lora", "DoRA or dropout on an embedding's "
      .. "adapter is not modelled")
  end
  return { a = S:adapter_param(vocab * r, FP32, label .. ".lora_embedding_A"),
    b = S:adapter_param(dim * r, FP32, label .. ".lora_embedding_B"), r = r, vocab = vocab }
end

-- peft lora.Embedding.forward after the base lookup `e` (rows x dim):
-- after_A = F.embedding(ids, A.T) (fp32, rows x r; its backward a dense
-- vocab x r gradient), then (after_A @ B.T) * scaling added as in L.linear.
function L.embedding_lora(S, e, lo, rows, label)
  local dim = e.n // rows
  local after_a = S:op1(label .. ".lora_embedding_A", rows * lo.r, FP32, lo.a)
  local ab = matmul(S, after_a, lo.b, nil, rows, dim, label .. ".lora_embedding_B")
  S:drop(after_a)
  return L.lora_add(S, e, ab, label)
end

-- x @ W^T (+ b) over `rows` rows. MmBackward saves the input only when the
-- weight needs a gradient, and the weight only when the input does.
function matmul(S, x, w, b, rows, out_features, label)
  if S.autocast then
    local xc, wc = S:autocast_arg(x, label .. ".cast_input"), S:autocast_arg(w)
    local bc = b and S:autocast_arg(b)
    local ac = S:autocast_pause() -- the operands are cast already
    local out = matmul(S, xc, wc, bc, rows, out_features, label)
    S:autocast_resume(ac)
    S:drop(xc, wc, bc)
    return out
  end
  local out = S:new_tensor(rows * out_features, x.dt, label, S:rg(x, w, b))
  if out.rg then
    local s1, s2 = product_saved(x, w)
    S:node_own(label, out, nil, s1, s2, x, w, b)
  end
  return out
end

-- peft LoRA: base(x) + lora_B(lora_A(x.to(fp32))) * scaling, cast back.
function L.linear(S, x, lin, rows)
  if lin.te then return L.te_linear(S, x, lin, rows) end
  local label = lin.label
  local base
  if lin.dequant then
    -- the dequantized weight lives until the matmul has written its output;
    -- the rebuilt absmax only while the weight is dequantized.
    -- Linear4bit.forward casts x to its compute dtype and the output back to
    -- x's (fp32 after prepare_model_for_kbit_training); the adapters below
    -- read the uncast x
    local x0 = x
    if lin.bnb and x.dt ~= lin.compute then x = S:to(x, lin.compute, label .. ".cast_compute") end
    if lin.absmax then S:temp(lin.absmax + lin.dequant, label .. ".dequantize_absmax") end
    if lin.int8 then
      -- MatMul8bitLt.forward as in bitsandbytes >= 0.45 (autograd/
      -- _functions.py; frozen weight: the int8_vectorwise_quant fast path;
      -- older releases, e.g. bitsandbytes-foundation/bitsandbytes@60a0d8a5,
      -- ran double_quant and also saved CAt, not priced): int8_vectorwise_quant
      -- of A.to(float16) gives CA (int8, rows x in) and SCA (fp32 row
      -- stats) from a transient fp16 copy of x; int8_linear_matmul's int32
      -- accumulator (rows x out) is dequantized into the output. The fp16
      -- outlier columns subA (rows x outliers, saved for backward) depend on
      -- the data and are not priced (labelled in stdlib/spec.lua).
      local ca = S:bytes("int8", rows * lin.inn) + S:bytes(FP32, rows)
      S:temp(ca + (x.dt == "fp16" and 0 or S:bytes("fp16", rows * lin.inn)),
        label .. ".int8_quant_x")
      base = S:new_tensor(rows * lin.out, x.dt, label, S:rg(x, lin.w, lin.b))
      S:temp(ca + S:bytes("int32", rows * lin.out), label .. ".int8_matmul")
    else
      base = S:new_tensor(rows * lin.out, x.dt, label, S:rg(x, lin.w, lin.b))
      S:temp(lin.dequant, label .. ".dequantize")
    end
    if base.rg then
      -- MatMul8bitLt saves A (ctx.tensors) and in backward copies CB into
      -- A's dtype: the full dequantized weight, as Linear4bit
      local keeps_x = lin.w.rg or (lin.bnb or lin.int8) and x.rg
      S:node_own(label, base, lin.dequant, keeps_x and x or lin.w, keeps_x and lin.w or nil,
        x, lin.w, lin.b)
    end
    if x ~= x0 then
      S:drop(x)
      x = x0
      local back = S:to(base, x.dt, label .. ".cast_back")
      S:drop(base)
      base = back
    end
  else
    base = matmul(S, x, lin.w, lin.b, rows, lin.out, label)
  end
  local lo = lin.lora
  if not lo then return base end
  if lin.bnb then -- peft: result = result.clone()
    local c = L.copy(S, base, label .. ".clone")
    S:drop(base)
    base = c
  end
  local x32 = S:to(x, FP32, label .. ".lora_cast")
  if lo.dropout then
    local d = L.lora_dropout(S, x32, label)
    S:drop(x32)
    x32 = d
  end
  if lo.m then
    if lin.bnb or S.autocast then
      require("stdlib.errors").input(nil, "run.lora.dora", "DoRA over a quantized base or "
        .. "under autocast is not modelled")
    end
    local rd = L.dora(S, x32, lin, rows)
    S:drop(x32)
    return L.lora_add(S, base, rd, label, false, true)
  end
  local a = matmul(S, x32, lo.a, nil, rows, lo.r, label .. ".lora_A")
  S:drop(x32)
  local bb = matmul(S, a, lo.b, nil, rows, lin.out, label .. ".lora_B")
  S:drop(a)
  return L.lora_add(S, base, bb, label, lin.bnb and not S.autocast)
end

-- peft's lora_dropout (nn.Dropout, training) on the cast input: CUDA's fused
-- kernel keeps a bool mask for backward; on CPU torch draws a noise tensor
-- of the input's dtype (bernoulli_, div_) that the product keeps.
function L.lora_dropout(S, x, label)
  local mask = S:new_tensor(x.n, S.cpu and x.dt or "uint8", label .. ".lora_dropout_mask", false)
  local out = S:new_tensor(x.n, x.dt, label .. ".lora_dropout", S:rg(x))
  S:node(label .. ".lora_dropout", { mask }, { { x, x.b } }, { out })
  S:drop(mask)
  return out
end

-- peft's DoRA (tuners/lora/dora.py DoraLinearLayer.forward, 0.11-0.12) on
-- the cast input x (rows x inn, fp32): lora_result = B(A(x)); lora_weight =
-- B(A(eye(inn))).T (its graph dies with it, no gradient reaches it); the
-- base weight cast to x's dtype (a copy unless fp32); weight_norm =
-- ||W + s * lora_weight|| per row, detached; scale = magnitude / norm;
-- (scale - 1) * F.linear(x, W) + scale * lora_result * s. F.linear keeps
-- the cast weight for backward, the products keep their operands; the
-- broadcast products' backward sums a rows x out product into the vector's
-- gradient. Returns the DoRA term (rows x out, fp32).
function L.dora(S, x, lin, rows)
  local lo, label, inn, out = lin.lora, lin.label, lin.inn, lin.out
  local a = matmul(S, x, lo.a, nil, rows, lo.r, label .. ".lora_A")
  local lora_result = matmul(S, a, lo.b, nil, rows, out, label .. ".lora_B")
  S:drop(a)
  local g = S.grad
  S.grad = false
  local eye = S:new_tensor(inn * inn, FP32, label .. ".dora_eye", false)
  local ea = S:new_tensor(inn * lo.r, FP32, label .. ".dora_eye_A", false)
  local lw = S:new_tensor(inn * out, FP32, label .. ".dora_lora_weight", false)
  local w = lin.w.dt == FP32 and S:view(lin.w)
    or S:new_tensor(inn * out, FP32, label .. ".dora_weight_cast", false)
  local scaled = S:new_tensor(inn * out, FP32, label .. ".dora_scaled", false)
  local sum = S:new_tensor(inn * out, FP32, label .. ".dora_weight_sum", false)
  S:drop(scaled)
  local norm = S:new_tensor(out, FP32, label .. ".dora_norm", false)
  S:drop(sum)
  S.grad = g
  local scale = S:op1(label .. ".dora_scale", out, FP32, lo.m, norm)
  S:drop(norm)
  local lin_out = S:new_tensor(rows * out, FP32, label .. ".dora_linear", S:rg(x))
  S:node(label .. ".dora_linear", { w }, { { x, x.b } }, { lin_out })
  local bcast = S:bytes(FP32, rows * out)
  local m1 = S:op1(label .. ".dora_scale_minus_1", out, FP32, scale, nil, "alias")
  local p1 = S:op(label .. ".dora_mul_base", rows * out, FP32, { m1, lin_out }, { m1, lin_out },
    { { m1, m1.b }, { lin_out, lin_out.b } }, nil, bcast)
  S:drop(m1, lin_out)
  local p2 = S:op(label .. ".dora_mul_lora", rows * out, FP32, { scale, lora_result },
    { scale, lora_result }, { { scale, scale.b }, { lora_result, lora_result.b } }, nil, bcast)
  S:drop(lora_result)
  local p3 = S:op1(label .. ".dora_scaling", rows * out, FP32, p2)
  S:drop(p2)
  local rd = S:op2(label .. ".dora_add", rows * out, FP32, p1, p3, "alias", "alias")
  S:drop(p1, p3, eye, ea, lw, w, scale)
  return rd
end

-- base + adapter_out * scaling, cast back to base's dtype; lets go of both.
-- An fp32 adapter output promotes a bf16 base to fp32; under autocast the
-- adapter's linears run in bf16 and the sum stays bf16. cast_first: the
-- scaled adapter output is cast to base's dtype before the add (peft's bnb
-- layers outside autocast). unscaled: bb is added as it is (DoRA's term).
function L.lora_add(S, base, bb, label, cast_first, unscaled)
  local scaled = bb
  if not unscaled then
    scaled = S:op1(label .. ".lora_scale", bb.n, bb.dt, bb)
    S:drop(bb)
  end
  if cast_first then
    local c = S:to(scaled, base.dt, label .. ".lora_cast")
    S:drop(scaled)
    scaled = c
  end
  local sum_dt = S.promote(base.dt, scaled.dt)
  local sum = S:op2(label .. ".lora_add", base.n, sum_dt, base, scaled, "alias", "alias",
    mixed(S, base.dt, scaled.dt, base.n))
  local base_dt = base.dt
  S:drop(base, scaled)
  local res = S:to(sum, base_dt, label .. ".lora_cast_back")
  S:drop(sum)
  return res
end

-- x * rsqrt(mean(x^2) + eps) in fp32: the part of every RMSNorm before the
-- weight. Returns the fp32 product (rows x dim).
local function rms_normalized(S, x, rows, label)
  local h = S:to(x, FP32, label .. ".to_fp32")
  local p = S:op1(label .. ".pow", h.n, FP32, h, h, nil, nil, 2 * h.b)
  local var = S:op1(label .. ".mean", rows, FP32, p)
  S:drop(p)
  local v2 = S:op1(label .. ".add_eps", rows, FP32, var, nil, "alias")
  S:drop(var)
  local r = S:new_tensor(rows, FP32, label .. ".rsqrt", S:rg(v2))
  S:node_own(label .. ".rsqrt", r, nil, r, nil, v2)
  S:drop(v2)
  local h2 = S:new_tensor(h.n, FP32, label .. ".mul", S:rg(h, r))
  S:node_own(label .. ".mul", h2, h.b, h, r, h, r)
  S:drop(h, r)
  return h2
end

-- Qwen/Llama RMSNorm: fp32 math, cast back, times the weight.
function L.rmsnorm(S, x, w, rows, label)
  local h2 = rms_normalized(S, x, rows, label)
  local h3 = S:to(h2, x.dt, label .. ".to_dtype")
  S:drop(h2)
  local out = S:new_tensor(h3.n, S.promote(h3.dt, w.dt), label .. ".weight_mul", S:rg(w, h3))
  local tmp = mixed(S, h3.dt, w.dt, h3.n)
  if tmp then S:temp(tmp, label .. ".weight_mul_cast") end
  if out.rg then
    local s1, s2 = product_saved(w, h3)
    S:node_own(label .. ".weight_mul", out, h3.b, s1, s2, w, h3)
  end
  S:drop(h3)
  return out
end

-- RMSNorm whose weight product is taken in fp32 before the cast back:
-- Gemma's x * (1 + w.float()) and OLMo 2's (w * x).to(dtype).
function L.rmsnorm_fp32_weight(S, x, w, rows, label)
  local h2 = rms_normalized(S, x, rows, label)
  local w32 = S:to(w, FP32, label .. ".weight_float")
  local out32 = S:new_tensor(h2.n, FP32, label .. ".weight_mul", S:rg(w32, h2))
  if out32.rg then
    S:node_own(label .. ".weight_mul", out32, h2.b, w32, h2, w32, h2)
  end
  S:drop(w32, h2)
  local out = S:to(out32, x.dt, label .. ".to_dtype")
  S:drop(out32)
  return out
end

-- cap * tanh(x / cap) (Gemma 2's soft-capping): three tensors of x's size,
-- tanh saving its output.
function L.softcap(S, x, label)
  local d = S:op1(label .. ".div", x.n, x.dt, x)
  S:drop(x)
  local t = S:new_tensor(d.n, d.dt, label .. ".tanh", S:rg(d))
  S:node_own(label .. ".tanh", t, nil, t, nil, d)
  S:drop(d)
  local out = S:op1(label .. ".mul", t.n, t.dt, t)
  S:drop(t)
  return out
end

-- nn.LayerNorm: native_layer_norm saves input, mean and rstd (fp32 rows).
function L.layernorm(S, x, w, b, rows, label)
  if S.autocast and x.dt ~= FP32 then -- layer_norm is on autocast's fp32 list
    local x32 = S:to(x, FP32, label .. ".autocast_fp32")
    local ac = S:autocast_pause()
    local out = L.layernorm(S, x32, w, b, rows, label)
    S:autocast_resume(ac)
    S:drop(x32)
    return out
  end
  local out = S:new_tensor(x.n, S.promote(x.dt, w.dt), label, S:rg(x, w, b))
  -- torch 1.13's CPU kernel also allocates an input-sized buffer that it
  -- frees before returning (trace: two aten::empty under native_layer_norm)
  local scratch = S.cpu and x.b or 0
  if out.rg then
    if scratch > 0 then S:temp(scratch + 2 * rows * 4, label .. ".cpu_scratch") end
    local mean = S:new_tensor(rows, FP32, label .. ".mean", false)
    local rstd = S:new_tensor(rows, FP32, label .. ".rstd", false)
    -- backward on CPU: again an input-sized buffer beside the input's gradient
    S:node(label, { x, mean, rstd, w }, { { x }, { w }, { b } }, { out }, scratch)
    S:drop(mean, rstd)
  else
    S:temp(scratch + 2 * rows * 4, label)
  end
  return out
end

-- apply_rotary_pos_emb for one of q/k: (x*cos) + (rotate_half(x)*sin).
function L.rope(S, x, cos, sin, label)
  local dt = S.promote(x.dt, cos.dt)
  local a = S:op1(label .. ".mul_cos", x.n, dt, x, cos, nil, mixed(S, x.dt, cos.dt, x.n))
  -- rotate_half: cat(-x2, x1); -x2 is a half-size transient. Backward sends
  -- two zero-padded full-size slice gradients to x.
  local rot = S:op(label .. ".rotate_half", x.n, x.dt, { x }, {}, { { x }, { x } },
    { fwd = x.b // 2, bwd = x.b // 2 })
  local b = S:op1(label .. ".mul_sin", x.n, dt, rot, sin, nil, mixed(S, rot.dt, sin.dt, x.n))
  S:drop(rot)
  local out = S:op2(label .. ".add", x.n, dt, a, b, "alias", "alias")
  S:drop(a, b)
  return out
end

-- A contiguous copy whose gradient passes straight through.
function L.copy(S, x, label)
  return S:op1(label, x.n, x.dt, x, nil, "alias")
end

-- bmm(a, b): saves both operands (those the other side's gradient needs).
local function bmm(S, a, b, n_out, label)
  local out = S:new_tensor(n_out, a.dt, label, S:rg(a, b))
  if out.rg then
    local s1, s2 = product_saved(a, b)
    S:node_own(label, out, nil, s1, s2, a, b)
  end
  return out
end

-- eager_attention_forward. q: (B,H,Tq,D) laid out (B,Tq,H,D) (from a
-- transpose), k/v: (B,Hkv,Tk,D). Returns the transposed contiguous output
-- (B,Tq,H*D). `mask` may be nil (SigLIP).
function L.eager_attention(S, q, k, v, mask, a, label)
  local B, H, Hkv, Tq, Tk, D = a.batch, a.heads, a.kv_heads, a.tq, a.tk, a.head_dim
  local Dv = a.v_dim or D
  if a.impl == "sdpa" or a.impl == "flash" then return L.flash_attention(S, q, k, v, a, label) end
  local groups = H // Hkv
  -- A bmm operand: autocast casts fp32 to the lower precision (keeping the
  -- layout), then matmul copies a non-contiguous operand.
  local function operand(x, contiguous, what)
    local c = S:autocast_arg(x, label .. "." .. what .. "_cast")
    if contiguous then return c end
    local cc = L.copy(S, c, label .. "." .. what .. "_contiguous")
    S:drop(c)
    return cc
  end
  -- repeat_kv's outputs (key_states, value_states) are locals of
  -- eager_attention_forward and live to its end; matmul's autocast casts and
  -- contiguous copies are its own temporaries (kept only when autograd saves
  -- them), made when that matmul runs.
  -- matmul folds (B, H) into one batch dim and copies an operand only when
  -- those two dims do not merge: a (B,T,H,D) layout seen as (B,H,T,D) merges
  -- when B = 1 or T = 1; a stride-0 head expansion (repeat_kv of a single KV
  -- head is a view) only when B = 1; a contiguous tensor always.
  local function merges(layout, t)
    if layout == "contiguous" then return true end
    -- a compiled-estimate probe traces the general case (B > 1, T > 1);
    -- stdlib/compiled.lua simulates batch 1 and seq 1 directly
    if S.general_sizes then return false end
    if layout == "broadcast" then return B == 1 end
    return B == 1 or t == 1
  end
  local kr, vr
  local k_in, v_in = k, v
  local kv_layout = a.k_contiguous and "contiguous" or "bthd"
  if groups > 1 and Hkv == 1 then -- expand + reshape of one head: a view
    kr, vr = S:view(k), S:view(v)
    k_in, v_in, kv_layout = kr, vr, "broadcast"
  elseif groups > 1 then -- repeat_kv: expand + reshape = a contiguous copy
    kr = S:op1(label .. ".repeat_kv", B * H * Tk * D, k.dt, k)
    vr = S:op1(label .. ".repeat_kv", B * H * Tk * Dv, v.dt, v)
    k_in, v_in, kv_layout = kr, vr, "contiguous"
  end
  local contig = merges(kv_layout, Tk)
  -- an operand expanded from one head: a cast (autocast) or a copy
  -- materialises all H heads, and its backward sums them back into x
  local function expanded(x, what, dim)
    if S.autocast and x.dt == FP32 then
      return S:op1(label .. "." .. what .. "_cast", B * H * Tk * dim, S.autocast, x)
    end
    -- (a compiled-estimate probe traces the general case, as merges() does)
    if B == 1 and not S.general_sizes then -- a view, whose gradient arrives at the expanded size
      S.tape:retain(x.id)
      return { id = x.id, n = B * H * Tk * dim, dt = x.dt, b = S:bytes(x.dt, B * H * Tk * dim),
        rg = x.rg }
    end
    return S:op1(label .. "." .. what .. "_contiguous", B * H * Tk * dim, x.dt, x)
  end
  local function v_operand()
    return kv_layout == "broadcast" and expanded(v, "v", Dv) or operand(v_in, contig, "v")
  end
  local k_op = kv_layout == "broadcast" and expanded(k, "k", D) or operand(k_in, contig, "k")
  local q_op = operand(q, merges(a.q_contiguous and "contiguous" or "bthd", Tq), "q")
  local scores = bmm(S, q_op, k_op, B * H * Tq * Tk, label .. ".qk")
  S:drop(q_op, k_op)
  local scaled = S:op1(label .. ".scale", scores.n, scores.dt, scores)
  S:drop(scores)
  if a.softcap then -- Gemma 2: scores / cap, tanh, * cap
    scaled = L.softcap(S, scaled, label .. ".softcap")
  end
  if mask then
    local masked = S:op1(label .. ".mask", scaled.n, S.promote(scaled.dt, mask.dt), scaled, nil,
      "alias", mixed(S, scaled.dt, mask.dt, scaled.n))
    S:drop(scaled)
    scaled = masked
  end
  if a.sinks then
    -- gpt-oss: cat([scores, sinks]) -> minus its max -> softmax in the
    -- model dtype -> drop the sink column (a strided view, copied for bmm)
    local n1 = B * H * Tq * (Tk + 1)
    local cat = S:new_tensor(n1, scaled.dt, label .. ".sinks_cat", S:rg(scaled, a.sinks))
    S:node(label .. ".sinks_cat", {}, { { scaled, scaled.b }, { a.sinks, a.sinks.b } }, { cat })
    S:drop(scaled)
    local mx = S:new_tensor(B * H * Tq, cat.dt, label .. ".sinks_max", false)
    local sub = S:op1(label .. ".sinks_sub", n1, cat.dt, cat, nil, "alias")
    S:drop(cat, mx)
    local sm = S:new_tensor(n1, sub.dt, label .. ".softmax", S:rg(sub))
    S:node(label .. ".softmax", { sm }, { { sub, sm.b } }, { sm })
    S:drop(sub)
    local p = L.copy(S, { id = sm.id, n = B * H * Tq * Tk, dt = sm.dt,
      b = S:bytes(sm.dt, B * H * Tq * Tk), rg = sm.rg }, label .. ".drop_sink")
    S:drop(sm)
    local v_op = v_operand()
    local out = bmm(S, p, v_op, B * H * Tq * Dv, label .. ".pv")
    S:drop(v_op, kr, vr)
    local t = L.copy(S, out, label .. ".transpose_contiguous")
    S:drop(out)
    return t, p
  end
  -- F.softmax(w, dtype=fp32).to(dtype): `w` stays bound until the chain
  -- returns, so it coexists with the fp32 copy, the result and its cast.
  local up = S:to(scaled, FP32, label .. ".softmax_upcast")
  local sm = S:new_tensor(up.n, FP32, label .. ".softmax", S:rg(up))
  S:node(label .. ".softmax", { sm }, { { up, sm.b } }, { sm })
  S:drop(up)
  local p = S:to(sm, q.dt, label .. ".softmax_cast")
  S:drop(sm, scaled)
  local p_op = operand(p, true, "p")
  local v_op = v_operand()
  local out = bmm(S, p_op, v_op, B * H * Tq * Dv, label .. ".pv")
  S:drop(p_op, v_op, kr, vr)
  local t = L.copy(S, out, label .. ".transpose_contiguous")
  S:drop(out)
  -- attn_weights go back to the layer, which binds them to `_` until it returns
  return t, p
end

-- scaled_dot_product_attention on CUDA with the flash / memory-efficient
-- kernels (GQA native, causal without a mask tensor): no Tq x Tk tensor.
-- The kernel saves q, k, v, its output and the fp32 log-sum-exp; backward
-- adds an fp32 dq accumulator. The output is laid out (B,Tq,H,D) already,
-- so the transpose + contiguous that follows is free.
function L.flash_attention(S, q, k, v, a, label)
  local B, H, Tq, D = a.batch, a.heads, a.tq, a.head_dim
  -- (MLA with flash: transformers pads v to the q/k head size, so the
  -- kernel's output is head_dim wide before the slice)
  -- a.sinks (gpt-oss): the kernel reads the per-head sinks and, in
  -- backward, gives them their gradient (spec.lua names the kernel)
  local sinks = a.sinks
  local out = S:new_tensor(B * H * Tq * D, q.dt, label .. ".sdpa", S:rg(q, k, v, sinks))
  local lse = S:new_tensor(B * H * Tq, FP32, label .. ".lse", false)
  local saved, edges = { q, k, v, out, lse }, { { q }, { k }, { v } }
  if sinks then saved[#saved + 1], edges[#edges + 1] = sinks, { sinks } end
  S:node(label .. ".sdpa", saved, edges, { out }, B * H * Tq * (D + 1) * 4)
  S:drop(lse)
  return out, nil
end

-- SwiGLU MLP: down(act(gate(x)) * up(x)).
function L.swiglu(S, x, m, rows, label)
  local g = L.linear(S, x, m.gate, rows)
  local act = S:op1(label .. ".act", g.n, g.dt, g, g)
  S:drop(g)
  local u = L.linear(S, x, m.up, rows)
  local prod = S:new_tensor(act.n, act.dt, label .. ".mul", S:rg(act, u))
  if prod.rg then
    local s1, s2 = product_saved(act, u)
    S:node_own(label .. ".mul", prod, nil, s1, s2, act, u)
  end
  S:drop(act, u)
  local d = L.linear(S, prod, m.down, rows)
  S:drop(prod)
  return d
end

-- fc2(gelu(fc1(x))): SigLIP MLP and the LLaVA projector.
function L.gelu_mlp(S, x, m, rows, label)
  local h = L.linear(S, x, m.fc1, rows)
  local act = S:op1(label .. ".act", h.n, h.dt, h, h)
  S:drop(h)
  local out = L.linear(S, act, m.fc2, rows)
  S:drop(act)
  return out
end

-- a + b: AddBackward hands the same gradient to both inputs.
function L.add(S, a, b, label)
  local dt = S.promote(a.dt, b.dt)
  -- an input of another dtype gets the gradient cast to its own dtype (a new
  -- tensor); the others share the output's gradient
  return S:op2(label, a.n, dt, a, b, a.dt == dt and "alias" or nil,
    b.dt == dt and "alias" or nil, mixed(S, a.dt, b.dt, math.min(a.n, b.n)))
end

-- A patch-embedding Conv2d (c: kernel = stride = patch P, channels C, an
-- image x image picture S, filters D, patches N, batch B) computed in bf16
-- on CPU goes through
-- oneDNN, whose buffers come back as tensors. Fitted to torch 1.13 CPU
-- traces of such convs (B 1/2/4, D 192/384, P 14/16, S 160/224), to the
-- byte except the forward's last ~25 KB; C is padded to 16 channels:
-- forward: blocked bf16 weights D*16*P*P*2 (+ the image and the weight
-- reordered), freed when the conv returns; backward: a contiguous copy of
-- the output gradient and a reordered one, an image-sized input gradient,
-- fp32 blocked weight gradients D*16*P*P*4, and a scratchpad of
-- D*(16*P*P + N + 1)*4 + 2048*S*P + 8832 bytes. nil when not on CPU in bf16.
function L.patch_conv_cpu_bf16(S, dt, c)
  if not S.cpu or dt ~= "bf16" then return nil end
  local B, C, img, P, D, N = c.batch, c.channels, c.image, c.patch, c.filters, c.patches
  local c16 = (C + 15) // 16 * 16
  local image, weight, out = B * C * img * img * 2, D * C * P * P * 2, B * D * N * 2
  return {
    forward = D * c16 * P * P * 2 + image + weight,
    backward = 2 * out + image + D * c16 * P * P * 4
      + D * (c16 * P * P + N + 1) * 4 + 2048 * img * P + 8832,
  }
end

-- nn.Embedding: output rows*dim; the dense backward allocates a full-size
-- weight gradient. tied: the weight is also the output layer's, whose
-- gradient reached it first; torch 1.13's engine sums the two out of place
-- (trace: aten::add under EmbeddingBackward0, in fp32, bf16 and autocast
-- alike), a third weight-sized tensor at the end of backward; torch >= 2.0
-- adds in place. The sum runs after the node has let go of its output's
-- gradient.
function L.embedding(S, w, rows, dim, label, tied)
  local sum = tied and S.sum_out_of_place and w.rg and S.grad
    and w.b - S:bytes(w.dt, rows * dim) or nil
  return S:op1(label, rows * dim, w.dt, w, nil, nil, nil, sum and sum > 0 and sum or nil)
end

return L
