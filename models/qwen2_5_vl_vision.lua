-- The Qwen2.5-VL vision tower as a simulator (transformers
-- modeling_qwen2_5_vl.py, Qwen2_5_VisionTransformerPretrainedModel; the
-- measured reference is tests/truth/harness/ref.py QwenVisionTower), for
-- one image grid per sample (t = 1): Conv3d patch embedding over the
-- processor's flat patch rows, 2-D vision RoPE in fp32, the window-index
-- gather, RMSNorm blocks with eager attention split per window (full
-- images in fullatt_block_indexes) and a biased gated MLP, ln_q + the
-- PatchMerger, and the argsort gather back to the patch order.
-- Parameter counts: models/qwen2_5_vl.lua.
local layers = require("stdlib.layers")
local cfgutil = require("stdlib.config")

local V = {}

-- Qwen2_5_VLVisionConfig (configuration_qwen2_5_vl.py), nested at `prefix`:
-- patch_size 14, temporal_patch_size 2, spatial_merge_size 2, in_channels 3
-- (the published configs spell it in_chans), window_size 112,
-- fullatt_block_indexes [7, 15, 23, 31] (full_blocks: 1-based, true).
function V.read(vc, where, prefix)
  local c = cfgutil.reader(vc, where, prefix)
  local v = {
    hidden = c:int("hidden_size"),
    depth = c:int("depth"),
    heads = c:int("num_heads"),
    intermediate = c:int("intermediate_size"),
    out_hidden = c:int("out_hidden_size"),
    patch = c:int("patch_size", 14),
    temporal = c:int("temporal_patch_size", 2),
    merge = c:int("spatial_merge_size", 2),
    channels = c:int("in_channels", nil, true) or c:int("in_chans", 3),
    window = c:int("window_size", 112),
  }
  local full = c:raw("fullatt_block_indexes") or { 7, 15, 23, 31 }
  if type(full) ~= "table" then c:fail("fullatt_block_indexes", "must be a list") end
  v.full_blocks = {}
  for i, b in ipairs(full) do
    if math.type(b) ~= "integer" or b < 0 or b >= v.depth then
      c:fail("fullatt_block_indexes[" .. i .. "]", ("must be a block index 0..%d"):format(v.depth - 1))
    end
    v.full_blocks[b + 1] = true
  end
  if v.window // v.merge // v.patch < 1 then
    c:fail("window_size", ("must be at least spatial_merge_size * patch_size (%d)"):format(
      v.merge * v.patch))
  end
  if v.hidden % v.heads ~= 0 then
    c:fail("num_heads", ("must divide hidden_size (%d)"):format(v.hidden))
  end
  return v, c
end

-- The measured cases' dialect (tests/truth, family "vit"): a flat vision
-- config with a square image_size, the grid image_size / patch_size a side,
-- and hidden_act.
function V.normalize(cfg, where)
  local m, c = V.read(cfg, where, "")
  m.image = c:int("image_size")
  local act = cfg.hidden_act or "silu"
  if act ~= "silu" then c:fail("hidden_act", "only silu is modelled, got " .. tostring(act)) end
  -- ref.py's Conv3d and the processor: RGB
  if m.channels ~= 3 then c:fail("in_channels", "only 3 (RGB) is modelled") end
  m.grid = m.image // m.patch
  if m.grid < 1 or m.grid % m.merge ~= 0 then
    c:fail("image_size", ("must be a multiple of patch_size * spatial_merge_size (%d)"):format(
      m.patch * m.merge))
  end
  m.win = m.window // m.merge // m.patch
  m.patches = m.grid * m.grid -- per image
  m.head_dim = m.hidden // m.heads
  m.unit = m.merge * m.merge
  m.pixel_row = m.channels * m.temporal * m.patch * m.patch
  m.width = m.out_hidden -- the classifier's input
  return m
end

-- get_window_index: the merged grid cut into win x win windows, the last
-- row and column cut short; the patch count of each window, in order.
local function window_sizes(m)
  local l = m.grid // m.merge
  local function sides(n)
    local t = {}
    for _ = 1, n // m.win do t[#t + 1] = m.win end
    if n % m.win > 0 then t[#t + 1] = n % m.win end
    return t
  end
  local out = {}
  for _, rh in ipairs(sides(l)) do
    for _, rw in ipairs(sides(l)) do out[#out + 1] = rh * rw * m.unit end
  end
  return out
end

-- Parameters and buffers in registration order. tr(name), lo(name) as in
-- models/decoder.
function V.build(S, m, dt, tr, lo)
  local D, I, M = m.hidden, m.intermediate, m.hidden * m.unit
  local P = { m = m, blocks = {} }
  P.patch_w = S:param(D * m.pixel_row, dt, tr("patch_embed"), "visual.patch_embed")
  -- inv_freq (hd/4 values), cast with the model
  S.tape:alloc(S:bytes(dt, m.head_dim // 4), "buffers", "visual.rotary.inv_freq")
  local function lin(name, inn, out)
    return layers.new_linear(S, { label = name, inn = inn, out = out, bias = true, dt = dt,
      trainable = tr(name), lora = lo(name) })
  end
  for i = 1, m.depth do
    local b = {}
    b.norm1 = S:param(D, dt, tr("norm1"), "norm1")
    b.norm2 = S:param(D, dt, tr("norm2"), "norm2")
    b.qkv = lin("qkv", D, 3 * D)
    b.proj = lin("proj", D, D)
    b.mlp = { gate = lin("gate_proj", D, I), up = lin("up_proj", D, I), down = lin("down_proj", I, D) }
    P.blocks[i] = b
  end
  P.ln_q = S:param(D, dt, tr("ln_q"), "ln_q")
  P.merger = { fc1 = lin("merger.0", M, M), fc2 = lin("merger.2", M, m.out_hidden) }
  return P
end

-- A view of n elements of x (a slice, an unbind part).
local function part(S, x, n)
  S.tape:retain(x.id)
  return { id = x.id, n = n, dt = x.dt, b = S:bytes(x.dt, n), rg = x.rg }
end

-- x[index] along the rows: a new tensor; IndexBackward keeps the index and
-- scatters the gradient into a zero tensor of the input's size.
local function gather(S, x, index, label)
  return S:op(label, x.n, x.dt, { x }, { index }, { { x } })
end

-- Qwen2_5_VLVisionAttention, eager: qkv, the rotation of q and k in fp32
-- (apply_rotary_pos_emb_vision: .float() in, .to(dtype) out), then eager
-- attention for each span separately (one window, or one whole image),
-- the span outputs concatenated, proj.
local function attention(S, b, x, m, ctx, spans)
  local N, D = ctx.rows, m.hidden
  local qkv = layers.linear(S, x, b.qkv, N)
  local q, k, v = part(S, qkv, N * D), part(S, qkv, N * D), part(S, qkv, N * D)
  S:drop(qkv)
  local qf, kf = S:to(q, "fp32", "vision.rope.q_float"), S:to(k, "fp32", "vision.rope.k_float")
  S:drop(q, k)
  local function rotate(xf, dt, label)
    local r = layers.rope(S, xf, ctx.cos, ctx.sin, label)
    S:drop(xf)
    local out = S:to(r, dt, label .. ".to_dtype")
    S:drop(r)
    return out
  end
  q = rotate(qf, v.dt, "vision.rope.q")
  k = rotate(kf, v.dt, "vision.rope.k")
  local outs = {}
  for _, n in ipairs(spans) do
    local nn = n * D
    local qs, ks, vs = part(S, q, nn), part(S, k, nn), part(S, v, nn)
    -- q and k after the rotation are contiguous (n, heads, hd), v a strided
    -- view of qkv: seen as (1, heads, n, hd) all merge without a copy
    local o, w = layers.eager_attention(S, qs, ks, vs, nil, {
      batch = 1, heads = m.heads, kv_heads = m.heads, tq = n, tk = n,
      head_dim = m.head_dim, impl = "eager" }, "vision.attn")
    S:drop(qs, ks, vs, w) -- the weights are discarded at once ([0])
    outs[#outs + 1] = o
  end
  local ins = {}
  for i, o in ipairs(outs) do ins[i] = { o, alias = 1 } end
  local cat = S:op("vision.attn.cat", N * D, outs[1].dt, outs, {}, ins)
  S:drop(table.unpack(outs))
  S:drop(q, k, v)
  local out = layers.linear(S, cat, b.proj, N)
  S:drop(cat)
  return out
end

local function block(S, b, h, m, ctx, spans)
  local N = ctx.rows
  local n1 = layers.rmsnorm(S, h, b.norm1, N, "vision.norm1")
  local a = attention(S, b, n1, m, ctx, spans)
  S:drop(n1)
  local h1 = layers.add(S, h, a, "vision.residual")
  S:drop(a)
  local n2 = layers.rmsnorm(S, h1, b.norm2, N, "vision.norm2")
  local mm = layers.swiglu(S, n2, b.mlp, N, "vision.mlp")
  S:drop(n2)
  local out = layers.add(S, h1, mm, "vision.residual")
  S:drop(mm, h1)
  return out
end

-- The tower's forward: pixels (fp32, batch*patches rows of pixel_row) to
-- the merged tokens in patch order (batch*tokens x out_hidden). o: { batch,
-- ckpt (checkpoint every block) }.
function V.forward(S, P, pixels, o)
  local m, B = P.m, o.batch
  local N, D = B * m.patches, m.hidden
  -- x = pixels.view(...).to(weight dtype): a local until the forward returns
  local x = S:to(pixels, P.patch_w.dt, "vision.pixel_cast")
  local xin, w = x, P.patch_w
  if S.autocast then xin, w = S:autocast_arg(x), S:autocast_arg(w) end
  -- unlike SigLIP's Conv2d (layers.patch_conv_cpu_bf16), this Conv3d in
  -- bf16 on CPU allocates no oneDNN buffers as tensors: a torch 1.13.0a0
  -- profile of Conv3d(3, 256, (2, 14, 14)) over 2048 patch rows under bf16
  -- autocast shows only the output and, in backward, the weight gradient
  local conv = S:new_tensor(N * D, w.dt, "vision.patch_embed", S:rg(w))
  -- ConvolutionBackward0 saves input and weight (under autocast: the cast)
  if conv.rg then S:node("vision.patch_embed", { xin, w }, { { w } }, { conv }) end
  if S.autocast then S:drop(xin, w) end
  -- rot_pos_emb + get_window_index (no autograd): the (h, w) position ids
  -- (int64) die on return; rot (fp32, hd/2 per patch) and the window index
  -- (int64, one per merged token) come back
  local ids = S:new_tensor(N * 2, "int64", "vision.rope.pos_ids", false)
  local rot = S:new_tensor(N * m.head_dim // 2, "fp32", "vision.rope.rot", false)
  S:drop(ids)
  local index = S:new_tensor(N // m.unit, "int64", "vision.window_index", false)
  local h = gather(S, conv, index, "vision.window_gather")
  S:drop(conv)
  local rot2 = S:new_tensor(rot.n, "fp32", "vision.rope.rot_gather", false)
  S:drop(rot)
  local emb = S:new_tensor(N * m.head_dim, "fp32", "vision.rope.emb", false)
  local cos = S:new_tensor(emb.n, "fp32", "vision.rope.cos", false)
  local sin = S:new_tensor(emb.n, "fp32", "vision.rope.sin", false)
  local ctx = { rows = N, cos = cos, sin = sin }
  local windows, full = {}, {}
  for _ = 1, B do
    for _, n in ipairs(window_sizes(m)) do windows[#windows + 1] = n end
    full[#full + 1] = m.patches
  end
  for i = 1, m.depth do
    local spans = m.full_blocks[i] and full or windows
    local out
    if o.ckpt and S.grad then
      S:checkpoint_begin()
      out = block(S, P.blocks[i], h, m, ctx, spans)
      -- the rope tables are read from outside the segment
      S:checkpoint_end({ h, cos, sin }, { out }, "vision.checkpoint")
    else
      out = block(S, P.blocks[i], h, m, ctx, spans)
    end
    S:drop(h)
    h = out
  end
  local nq = layers.rmsnorm(S, h, P.ln_q, N, "vision.ln_q")
  S:drop(h)
  local merged = layers.gelu_mlp(S, nq, P.merger, N // m.unit, "vision.merger")
  S:drop(nq)
  -- h[torch.argsort(index)]: the argsort (int64) lives in IndexBackward
  local order = S:new_tensor(index.n, "int64", "vision.argsort", false)
  local out = gather(S, merged, order, "vision.reverse_gather")
  S:drop(merged, order)
  S:drop(x, rot2, emb, cos, sin, index)
  return out
end

-- Pixel values (fp32) for `batch` images: the processor's flat patch rows.
function V.pixels(m, batch)
  return batch * m.patches * m.pixel_row
end

return V
