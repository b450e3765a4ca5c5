-- SigLIP / SigLIP2 vision transformer (transformers modeling_siglip.py):
-- conv patch embedding, learned position embedding, pre-norm encoder
-- layers with LayerNorm, eager attention and a GELU MLP, post LayerNorm.
local vram = require("vram")
local layers = require("stdlib.layers")
local cfgutil = require("stdlib.config")
local compose = require("stdlib.compose")

local V = {}

-- A SigLIP vision config (nested at `prefix`, e.g. "vision_config.").
function V.normalize(cfg, where, prefix)
  local c = cfgutil.reader(cfg, where, prefix)
  local m = {
    hidden = c:int("hidden_size"),
    layers = c:int("num_hidden_layers"),
    heads = c:int("num_attention_heads"),
    intermediate = c:int("intermediate_size"),
    patch = c:int("patch_size"),
    image = c:int("image_size"),
    channels = c:int("num_channels", 3),
    -- SiglipVisionModel builds the attention-pooling head unless told not to
    use_head = c:bool("vision_use_head", true),
  }
  if m.image < m.patch then
    c:fail("image_size", ("must be at least patch_size (%d), got %d"):format(m.patch, m.image))
  end
  -- dynamic-resolution towers (Qwen-VL) see a resized H x W image: an
  -- explicit grid overrides the square one
  m.grid_h = c:int("grid_h", nil, true)
  m.grid_w = c:int("grid_w", nil, true)
  if m.hidden % m.heads ~= 0 then
    c:fail("num_attention_heads", ("must divide hidden_size (%d)"):format(m.hidden))
  end
  m.grid = m.image // m.patch
  m.grid_h, m.grid_w = m.grid_h or m.grid, m.grid_w or m.grid
  m.patches = m.grid_h * m.grid_w
  m.head_dim = m.hidden // m.heads
  -- set by a family's simulator description (models/siq_vlm.lua), not a
  -- config key: Qwen2.5-VL's attention windows and full-attention layers
  m.windows, m.full_layers = cfg.windows, cfg.full_layers
  -- likewise Qwen3-VL's tower: a Conv3d patch embedding over `temporal`
  -- frames (the processor repeats an image temporal_patch_size times) and
  -- `positions` learned positions bilinearly interpolated to the grid
  m.temporal, m.positions = cfg.temporal, cfg.positions
  return m
end

function V.params(m)
  local D, I = m.hidden, m.intermediate
  local embed = vram.conv_params(m.channels, D, m.patch * m.patch, true) + m.patches * D
  local attn = 4 * vram.linear_params(D, D, true)
  local mlp = vram.linear_params(D, I, true) + vram.linear_params(I, D, true)
  local norms = 2 * vram.norm_params(D, "layer")
  local parts = {
    { name = "vision.embeddings", params = embed },
    { name = "vision.layers", params = (attn + mlp + norms) * m.layers },
    { name = "vision.post_layernorm", params = vram.norm_params(D, "layer") },
  }
  if m.use_head then
    -- MAP head: probe, MultiheadAttention (in_proj 3DxD + out), LayerNorm, MLP
    parts[#parts + 1] = { name = "vision.head", params = D + 3 * D * D + 3 * D
      + vram.linear_params(D, D, true) + vram.norm_params(D, "layer") + mlp }
  end
  return parts
end

-- A SigLIP vision config as a checkpoint's config.json gives it, with the
-- defaults of SiglipVisionConfig / SiglipVisionModel made explicit.
function V.read_config(vc, where, prefix)
  local c = {}
  for k, v in pairs(vc) do c[k] = v end
  if c.image_size == nil then c.image_size = 224 end
  if c.patch_size == nil then c.patch_size = 16 end
  if c.vision_use_head == nil then c.vision_use_head = true end
  return V.normalize(c, where, prefix)
end

-- The SigLIP vision tower's parts, names prefixed.
function V.parts(m, pre)
  local parts = {}
  for _, p in ipairs(V.params(m)) do
    parts[#parts + 1] = { name = pre .. p.name:gsub("^vision%.", ""), params = p.params,
      tower = "vision" }
  end
  return parts
end

-- Parameters in registration order. tr(name), lo(name) as in models/decoder.
function V.build(S, m, dt, tr, lo)
  local D, I = m.hidden, m.intermediate
  local P = { m = m, layers = {} }
  P.patch_w = S:param(D * m.channels * (m.temporal or 1) * m.patch * m.patch, dt,
    tr("patch_embedding"), "vision.patch_embedding")
  P.patch_b = S:param(D, dt, tr("patch_embedding"), "vision.patch_embedding.bias")
  P.pos = S:param((m.positions or m.patches) * D, dt, tr("position_embedding"),
    "vision.position_embedding")
  P.pos.rows = m.positions or m.patches
  local function lin(name, inn, out)
    return layers.new_linear(S, { label = name, inn = inn, out = out, bias = true, dt = dt,
      trainable = tr(name), lora = lo(name) })
  end
  P.layers = S:build_layers(m.layers, function()
    local l = {}
    l.ln1_w = S:param(D, dt, tr("layer_norm1"), "layer_norm1")
    l.ln1_b = S:param(D, dt, tr("layer_norm1"), "layer_norm1.bias")
    l.k = lin("k_proj", D, D)
    l.v = lin("v_proj", D, D)
    l.q = lin("q_proj", D, D)
    l.o = lin("out_proj", D, D)
    l.ln2_w = S:param(D, dt, tr("layer_norm2"), "layer_norm2")
    l.ln2_b = S:param(D, dt, tr("layer_norm2"), "layer_norm2.bias")
    l.mlp = { fc1 = lin("fc1", D, I), fc2 = lin("fc2", I, D) }
    return l
  end, true) -- every block builds the same parameters (Sim:build_layers)
  P.post_w = S:param(D, dt, tr("post_layernorm"), "post_layernorm")
  P.post_b = S:param(D, dt, tr("post_layernorm"), "post_layernorm.bias")
  -- position_ids buffer (int64, not cast); Qwen3-VL's interpolated table has none
  if not m.positions then
    S.tape:alloc(S:bytes("int64", m.patches), "buffers", "vision.position_ids")
  end
  return P
end

-- Qwen2.5-VL's eager vision attention (modeling_qwen2_5_vl.py): q, k, v
-- split along the patches into the attention spans (cu_seqlens: whole
-- images in full blocks, the windows of m.windows = { {count, size}, ... }
-- patches per image in windowed blocks), eager attention per span, the
-- outputs concatenated: scores [heads, span, span] per span, not over all
-- patches. Spans of one size run as one batch.
local function split_attention(S, q, k, v, m, batch, attention, windowed)
  local groups = windowed and m.windows or { { count = 1, size = m.patches } }
  local outs, saved = {}, {}
  local function part(x, n) -- a view of the span group's rows
    S.tape:retain(x.id)
    return { id = x.id, n = n, dt = x.dt, b = S:bytes(x.dt, n), rg = x.rg }
  end
  for _, g in ipairs(groups) do
    local n = batch * g.count * g.size * m.hidden
    local qs, ks, vs = part(q, n), part(k, n), part(v, n)
    local o, w = layers.eager_attention(S, qs, ks, vs, nil, {
      batch = batch * g.count, heads = m.heads, kv_heads = m.heads, tq = g.size, tk = g.size,
      head_dim = m.head_dim, impl = attention }, "vision.attn")
    S:drop(qs, ks, vs)
    outs[#outs + 1], saved[#saved + 1] = o, w
  end
  local ins = {}
  for i, o in ipairs(outs) do ins[i] = { o, alias = 1 } end
  local attn = S:op("vision.attn.cat", q.n, outs[1].dt, outs, {}, ins)
  S:drop(table.unpack(outs))
  return attn, saved
end

local function layer_forward(S, l, x, m, batch, attention, windowed)
  local rows = batch * m.patches
  local n1 = layers.layernorm(S, x, l.ln1_w, l.ln1_b, rows, "layer_norm1")
  local q = layers.linear(S, n1, l.q, rows)
  local k = layers.linear(S, n1, l.k, rows)
  local v = layers.linear(S, n1, l.v, rows)
  local attn, weights
  if m.windows then
    attn, weights = split_attention(S, q, k, v, m, batch, attention, windowed)
  else
    attn, weights = layers.eager_attention(S, q, k, v, nil, {
      batch = batch, heads = m.heads, kv_heads = m.heads, tq = m.patches, tk = m.patches,
      head_dim = m.head_dim, impl = attention }, "vision.attn")
  end
  local o = layers.linear(S, attn, l.o, rows)
  S:drop(attn, q, k, v, n1)
  local h1 = layers.add(S, x, o, "vision.residual")
  S:drop(o)
  local n2 = layers.layernorm(S, h1, l.ln2_w, l.ln2_b, rows, "layer_norm2")
  local mm = layers.gelu_mlp(S, n2, l.mlp, rows, "vision.mlp")
  S:drop(n2)
  local out = layers.add(S, h1, mm, "vision.residual")
  S:drop(mm, h1)
  if m.windows then S:drop(table.unpack(weights)) else S:drop(weights) end
  return out
end

-- Qwen3-VL's fast_pos_embed_interpolate (modeling_qwen3_vl.py) for n
-- patches: the 4 corner indices (int64) and bilinear weights (the table's
-- dtype) per patch, pos_embed(idx) * weights (4n rows; EmbeddingBackward
-- keeps idx, MulBackward the weights), the sum of the 4 corners (two
-- partial sums live at once), then repeat(t = 1), the merge-order
-- permute().flatten() and torch.cat of the one image list: three copies.
local function interpolated_positions(S, w, n, D)
  local idx = S:new_tensor(4 * n, "int64", "vision.pos_interp.idx", false)
  local wts = S:new_tensor(4 * n, w.dt, "vision.pos_interp.weights", false)
  local e = S:op("vision.pos_embed", 4 * n * D, w.dt, { w }, { idx }, { { w } })
  local x = S:op("vision.pos_interp.mul", e.n, w.dt, { e, wts }, { wts }, { { e } })
  S:drop(e, idx, wts)
  local sum = S:op("vision.pos_interp.sum", n * D, w.dt, { x }, {}, { { x } },
    { fwd = S:bytes(w.dt, n * D) })
  S:drop(x)
  for _, label in ipairs({ "vision.pos_interp.repeat", "vision.pos_interp.permute",
    "vision.pos_interp.cat" }) do
    local c = S:op(label, sum.n, sum.dt, { sum }, {}, { { sum } })
    S:drop(sum)
    sum = c
  end
  return sum
end

-- SiglipVisionTransformer.forward: pixel_values (fp32 input) to the
-- post-LayerNorm hidden states (batch*patches, D). o: { batch (images),
-- ckpt (checkpoint every layer), attention (eager | sdpa | flash, default
-- eager), compose (false: simulate every layer, stdlib/compose.lua), keep
-- (optional: without autograd, the inputs of the first keep + 1 layers stay
-- live and are returned; a tower called with output_hidden_states=True
-- holds its hidden states until it returns, mllama's) }.
function V.forward(S, P, pixels, o)
  local batch, ckpt, attention, keep = o.batch, o.ckpt, o.attention, o.keep
  local compose_ok = o.compose
  local m = P.m
  local D = m.hidden
  local px = S:to(pixels, P.patch_w.dt, "vision.pixel_cast")
  local xin, w, b = px, P.patch_w, P.patch_b
  if S.autocast then -- conv2d runs in the lower precision under autocast
    xin, w, b = S:autocast_arg(px), S:autocast_arg(w), S:autocast_arg(b)
  end
  local conv = S:new_tensor(batch * m.patches * D, w.dt, "vision.patch_embedding", S:rg(w, b))
  -- a Conv3d (m.temporal) allocates no oneDNN buffers as tensors on CPU
  -- (models/qwen2_5_vl_vision.lua)
  local ws = not m.temporal and layers.patch_conv_cpu_bf16(S, w.dt, { batch = batch,
    channels = m.channels,
    image = m.grid_w * m.patch, patch = m.patch, filters = D, patches = m.patches })
  if ws then S:temp(ws.forward, "vision.patch_embedding.onednn") end
  -- the node's temporary comes after the weight and bias gradients, which the
  -- kernel allocates only once its buffers are gone. ConvolutionBackward0
  -- saves the weight it ran with too: under autocast the bf16 copy, live
  -- until the conv's backward (r096 trace: the bf16 input and weight copies,
  -- 2 tensors allocated by aten::conv2d, live at the conv-backward peak)
  if conv.rg then
    S:node("vision.patch_embedding", { xin, w }, { { w }, { b } }, { conv },
      ws and ws.backward - w.b - b.b)
  end
  if S.autocast then S:drop(xin, w, b) end
  S:drop(px)
  local pos = m.positions and interpolated_positions(S, P.pos, batch * m.patches, D)
    or layers.embedding(S, P.pos, m.patches, D, "vision.position_embedding")
  -- under autocast the conv output is in the lower precision and the position
  -- embedding (not an autocast op) in fp32: the sum is fp32
  -- AddBackward0 hands the sum's gradient on as it is to the addend of its
  -- dtype and casts a copy for the other (r096 trace: a bf16 conv-output
  -- gradient allocated by AddBackward0, the fp32 one passed to the embedding)
  local xdt = S.promote(conv.dt, pos.dt)
  local edges = { { conv, alias = 1 }, { pos } }
  if conv.dt ~= xdt then edges = { { conv }, { pos, alias = 1 } } end
  local x = S:op("vision.embeddings_add", conv.n, xdt, { conv, pos }, {}, edges,
    { fwd = layers.mixed_dtype_temp(S, conv.dt, pos.dt, conv.n) })
  S:drop(conv, pos)
  local kept = keep and not S.grad and {} or nil
  if kept then compose_ok = false end
  -- windowed and full-attention blocks differ: simulate every layer
  if m.windows then compose_ok = false end
  local function windowed(i) return m.windows ~= nil and not m.full_layers[i] end
  local function one(i, h)
    local out
    if ckpt and S.grad then
      S:checkpoint_begin()
      out = layer_forward(S, P.layers[i], h, m, batch, attention, windowed(i))
      S:checkpoint_end({ h }, { out }, "vision.checkpoint")
    else
      out = layer_forward(S, P.layers[i], h, m, batch, attention, windowed(i))
    end
    if kept and i <= keep + 1 then kept[#kept + 1] = h else S:drop(h) end
    return out
  end
  -- under autocast the composed tower differs from the full simulation (its
  -- fp32 residual stream beside cached bf16 weight casts): layer by layer
  if compose.enabled(S, m.layers, { compose = not S.autocast and compose_ok }) then
    x = compose.layers(S, P.layers, m.layers, one, x, "vision.layers.composed")
  elseif compose_ok ~= false and not kept then -- grad-free, when the layers keep nothing
    x = compose.grad_free(S, m.layers, one, x, P.layers)
  else
    for i = 1, m.layers do x = one(i, x) end
  end
  local post = layers.layernorm(S, x, P.post_w, P.post_b, batch * m.patches, "post_layernorm")
  S:drop(x)
  return post, kept
end

return V
