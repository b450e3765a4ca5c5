-- A SigLIP -> pixel shuffle -> 2-layer MLP projector -> decoder VLM (SiQ-VL,
-- Idefics3-style connector, LLaVA projector): image tokens are concatenated
-- in front of the text and the LM computes logits for every position.
local siglip = require("models.siglip")
local decoder = require("models.decoder")
local causal = require("models.causal_lm")
local layers = require("stdlib.layers")
local loss = require("stdlib.loss")
local errors = require("stdlib.errors")
local with = require("stdlib.run").with

local F = {}

-- A measured case's config (tests/truth, family "vlm"): {text_config,
-- vision_config (SigLIP keys), pixel_shuffle_factor, projector fields}.
F.takes_text = true
function F.case(cfg, where)
  local tc = cfg.text_config or errors.input(where, "config.text_config", "is required but missing")
  local vc = cfg.vision_config or
    errors.input(where, "config.vision_config", "is required but missing")
  local text = decoder.read(tc, where, "config.text_config.")
  -- mllama-style: the image states are read by the text's cross-attention
  -- layers (0-based indices) through a one-layer projector, no image tokens
  local xl = tc.cross_attention_layers
  if type(xl) == "table" and #xl > 0 then
    text.cross_layers, text.uniform = {}, false
    for i, x in ipairs(xl) do
      if math.type(x) ~= "integer" or x < 0 or x >= text.layers then
        errors.input(where, "config.text_config.cross_attention_layers[" .. i .. "]",
          ("must be a layer index 0..%d"):format(text.layers - 1))
      end
      text.cross_layers[x + 1] = true
      text.last_cross = math.max(text.last_cross or 0, x + 1)
    end
  end
  return { text = text, vision = vc, vlm = cfg }
end

-- Whether a measured case's towers are ones the simulator models (a text
-- config with cross-attention layers included). The classifier's module
-- (and the Qwen2.5-VL tower it requires) loads only here: an estimate of a
-- run spec never asks.
function F.supports(cfg)
  local classifier = require("models.siglip_classifier")
  local tc = {}
  for k, v in pairs(cfg.text_config or {}) do tc[k] = v end
  tc.cross_attention_layers = nil
  return causal.supports(tc) and classifier.supports(cfg.vision_config or {})
end

-- How a registered VLM family describes itself to this simulator (its
-- `simulator(m, images)`, models/README.md): its vision tower as a pre-norm
-- ViT of the tower's own width, depth, heads and MLP size over the patches
-- of one image, the token merge as a pixel shuffle of the patch grid, a
-- two-layer projector, and its text decoder. Exact: token counts, the
-- decoder, the ViT's big matrices. Approximated and said so in every
-- recipe: norms (RMSNorm vs LayerNorm), Pixtral's gated MLP, fused qkv
-- projections and PaliGemma's one-layer projector, which shift the vision
-- tower's activations by a few percent.
--   d = { where, text = decoder model, hidden, layers, heads, intermediate,
--         patch, side (square image side in pixels), grid_h, grid_w
--         (optional: a dynamic-resolution patch grid), merge, deepstack,
--         images (tower images per sample), tokens (optional: the positions
--         a sample's images occupy in the sequence by the family's
--         image_tokens, when they are not the merged grids: special tokens
--         around or between the features are embedded as text, features a
--         family's packing drops (LLaVA-NeXT's unpadding) are copied out),
--         windows, full_layers (optional: attention split into windows of
--         { {count, size}, ... } patches per image except in the layers
--         full_layers[i] (1-based), models/siglip.lua), temporal,
--         positions (optional: a Conv3d patch embedding over `temporal`
--         frames, `positions` interpolated learned positions, Qwen3-VL),
--         merger_hidden (optional: the projector's inner width when it is not
--         the text's), deepstack_norm (optional: a LayerNorm of the shuffled
--         width in front of each DeepStack merger) }
function F.describe(d)
  if d.side % d.patch ~= 0 then
    errors.input(d.where, "image side", ("%d is not a multiple of the patch size %d"):format(
      d.side, d.patch))
  end
  return {
    sim = F,
    text = d.text,
    vision = { hidden_size = d.hidden, num_hidden_layers = d.layers,
      num_attention_heads = d.heads, intermediate_size = d.intermediate, patch_size = d.patch,
      image_size = d.side, num_channels = d.channels or 3, grid_h = d.grid_h, grid_w = d.grid_w,
      windows = d.windows, full_layers = d.full_layers, temporal = d.temporal,
      positions = d.positions },
    vlm = { pixel_shuffle_factor = d.merge, projector_hidden_act = "gelu",
      multimodal_projector_bias = true, deepstack = d.deepstack, images = d.images,
      tokens = d.tokens, merger_hidden = d.merger_hidden, deepstack_norm = d.deepstack_norm },
  }
end

-- Image tokens per image after a pixel shuffle of factor f on the grid.
function F.image_tokens(vm, f)
  return vm.patches // (f * f)
end

F.deepstack_note = "DeepStack mergers run on the last vision layer's output (the same size "
  .. "as the intermediate layers they read in the model)"

function F.build(S, run, pol)
  local cfg = run.vlm
  local vm = siglip.normalize(run.vision, "vision_config")
  local f = cfg.pixel_shuffle_factor or 1
  if vm.grid_h % f ~= 0 or vm.grid_w % f ~= 0 then
    require("stdlib.errors").input("config", "pixel_shuffle_factor",
      ("must divide the %dx%d patch grid, got %d"):format(vm.grid_h, vm.grid_w, f))
  end
  local dt = run.param_dtype
  local vtr, vlo = pol("vision")
  local P = { f = f }
  P.vision = siglip.build(S, vm, dt, vtr, vlo)
  local ptr, plo = pol("projector")
  local bias = cfg.multimodal_projector_bias ~= false
  local H = run.text.hidden
  P.xattn = run.text.cross_layers ~= nil
  if P.xattn then -- MllamaForConditionalGeneration's multi_modal_projector
    P.proj = layers.new_linear(S, { label = "multi_modal_projector", inn = vm.hidden * f * f,
      out = H, bias = true, dt = dt, trainable = ptr("multi_modal_projector"),
      lora = plo("multi_modal_projector") })
  else
    local mid = cfg.merger_hidden or H
    P.proj = {
      fc1 = layers.new_linear(S, { label = "linear_1", inn = vm.hidden * f * f, out = mid,
        bias = bias, dt = dt, trainable = ptr("linear_1"), lora = plo("linear_1") }),
      fc2 = layers.new_linear(S, { label = "linear_2", inn = mid, out = H, bias = bias, dt = dt,
        trainable = ptr("linear_2"), lora = plo("linear_2") }),
    }
  end
  -- DeepStack (Qwen3-VL): extra mergers whose outputs join the first LLM
  -- layers; their fp32 outputs are kept with the batch (seed 000)
  P.deepstack = {}
  for i = 1, cfg.deepstack or 0 do
    local W = vm.hidden * f * f
    local norm = cfg.deepstack_norm and { w = S:param(W, dt, ptr("deepstack"), "deepstack.norm"),
      b = S:param(W, dt, ptr("deepstack"), "deepstack.norm.bias") } or nil
    P.deepstack[i] = { norm = norm,
      fc1 = layers.new_linear(S, { label = "deepstack.fc1", inn = vm.hidden * f * f,
        out = vm.hidden * f * f, bias = bias, dt = dt, trainable = ptr("deepstack") }),
      fc2 = layers.new_linear(S, { label = "deepstack.fc2", inn = vm.hidden * f * f, out = H,
        bias = bias, dt = dt, trainable = ptr("deepstack") }) }
  end
  local ttr, tlo = pol("llm")
  -- a quantized checkpoint quantizes the language model's projections (the
  -- vision tower stays in the model dtype; stdlib/spec.lua refuses formats
  -- that would quantize it)
  P.lm = decoder.build(S, run.text, { dt = dt, trainable = ttr, lora = tlo, quant = run.quant,
    moe_impl = causal.moe_impl(run, run.text) })
  P.images = cfg.images or 1 -- images per sample, all of the same size
  -- n_feat: projector rows; n_img: the sequence positions the images take
  P.n_feat = F.image_tokens(vm, f) * P.images
  P.n_img = P.xattn and 0 or cfg.tokens or P.n_feat
  return P
end

function F.inputs(S, run, P)
  local vm = P.vision.m
  local ids = S:new_tensor(run.batch * run.seq, "int64", "input_ids", false, "inputs")
  local labels = run.mode == "train"
    and S:new_tensor(run.batch * run.seq, "int64", "labels", false, "inputs") or nil
  -- a Conv3d tower's processor repeats the image over its temporal frames
  local pixels = vm.channels * (vm.temporal or 1) * vm.grid_h * vm.patch * vm.grid_w * vm.patch
  P.pixels = S:new_tensor(run.batch * P.images * pixels, "fp32", "pixel_values",
    false, "inputs")
  return { ids, labels, P.pixels }
end

-- A second model over the same batch (an RL reference, stdlib/rl.lua)
-- reads the policy's pixel_values: the same tensor, not a copy.
function F.share_inputs(to, from)
  to.pixels = from.pixels
end

-- vision tower, pixel shuffle (two reshape copies), projector
local function image_features(S, P, run)
  local B = run.batch
  local h = siglip.forward(S, P.vision, P.pixels, { batch = B * P.images, ckpt = run.ckpt,
    attention = run.attention, compose = run.compose })
  if P.f > 1 then
    for i = 1, 2 do
      local c = S:op("pixel_shuffle.reshape", h.n, h.dt, { h }, {}, { { h } })
      S:drop(h)
      h = c
    end
  end
  local out
  if P.xattn then
    out = layers.linear(S, h, P.proj, B * P.n_feat)
  else
    out = layers.gelu_mlp(S, h, P.proj, B * P.n_feat, "projector")
  end
  P.side = {}
  for i, m in ipairs(P.deepstack) do
    local x = m.norm and layers.layernorm(S, h, m.norm.w, m.norm.b, B * P.n_feat,
      "deepstack.norm") or h
    P.side[i] = layers.gelu_mlp(S, x, m, B * P.n_feat, "deepstack")
    if x ~= h then S:drop(x) end
  end
  S:drop(h)
  if P.n_img < P.n_feat then -- the kept features, gathered into a new tensor
    local kept = S:op("image_features.pack", B * P.n_img * run.text.hidden, out.dt, { out },
      {}, { { out } })
    S:drop(out)
    out = kept
  end
  return out
end

local function embeds(S, P, run, text_dt)
  local B, T = run.batch, run.seq
  if P.xattn then -- the states go to the cross-attention layers, the text alone in
    local states = image_features(S, P, run)
    P.lm.cross = { states = states, rows = B * P.n_feat, tokens = P.n_feat, row_mask = false,
      last = run.text.last_cross }
    return decoder.embed(S, P.lm, B * T)
  end
  -- positions beyond the image features (special tokens) are text
  local text = decoder.embed(S, P.lm, B * (T + math.max(0, P.n_img - P.n_feat)))
  local img = image_features(S, P, run)
  local img2 = S:to(img, text.dt, "image_features.to")
  S:drop(img)
  local all = S:op("inputs_embeds.cat", img2.n + text.n, text.dt, { img2, text }, {},
    { { img2, alias = 1 }, { text, alias = 1 } })
  S:drop(img2, text)
  return all
end

-- What the forward held for the text model: DeepStack's outputs, the
-- cross-attention states (local to the model's forward, freed when it
-- returns) and their cached K/V.
local function release(S, P)
  for _, x in ipairs(P.side or {}) do S:drop(x) end
  P.side = nil
  local cr = P.lm.cross
  if cr then
    if cr.states then S:drop(cr.states) end
    for _, c in pairs(cr.cache or {}) do S:drop(c.k, c.v) end
    P.lm.cross = nil
  end
end

-- The head and loss over the decoder's output h (B x seq rows). The image
-- tokens come first and their labels are -100, so vlm.logits = "text"
-- (hidden_states[:, n_img:] into the head, as logits_to_keep does) is the
-- same loss over B x T rows; chunked and liger_fused never hold B x rows x V.
-- Takes over h.
local function head_loss(S, P, run, h, B, seq, opt)
  local V = P.lm.m.vocab
  local keep = (run.vlm or {}).logits == "text" and run.seq or seq
  local x = h
  if keep < seq then -- a view of the text rows; its gradient is h's full size
    x = { id = h.id, n = B * keep * P.lm.m.hidden, dt = h.dt, b = h.b, rg = h.rg }
  end
  local l
  if run.loss == "chunked" then
    l = loss.chunked(S, x, P.lm.head.w, B * keep, V, run.loss_chunk)
  elseif run.loss == "liger_fused" then
    l = loss.liger_fused(S, x, P.lm.head.w, B, keep, V)
  else
    local logits = decoder.logits(S, P.lm, h, with(run, { seq = seq }), keep < seq and keep or nil)
    S:drop(h)
    h = nil
    opt.seq = keep
    l = loss.causal_lm(S, logits, opt)
    S:drop(logits)
  end
  S:drop(h)
  return l
end

function F.forward_loss(S, P, run)
  local B, T = run.batch, run.seq
  local seq = T + P.n_img
  local fused = run.loss == "chunked" or run.loss == "liger_fused"
  local opt = not fused and loss.logits_options(S, run, B, seq) or nil
  local emb = embeds(S, P, run)
  local labels -- image tokens in front: their ignored labels, then the cat
  if not P.xattn then
    local img_labels = S:new_tensor(B * P.n_img, "int64", "labels.image", false)
    labels = S:new_tensor(B * seq, "int64", "labels.cat", false)
    S:drop(img_labels)
  end
  -- an MoE language model: the run's expert implementation, and its router
  -- logits kept for the auxiliary loss over every position, images included
  local r = causal.decoder_run(with(run, { seq = seq }), run.text, true)
  local h = decoder.forward(S, P.lm, emb, r)
  S:drop(emb)
  S:set_category("logits_loss")
  local l = head_loss(S, P, run, h, B, seq, opt)
  S:drop(labels)
  release(S, P)
  S:set_category("activations")
  return causal.add_aux(S, P.lm, r, l, r.router_logits)
end

function F.forward_logits(S, P, run)
  local seq = run.seq + P.n_img
  local emb = embeds(S, P, run)
  local r = causal.decoder_run(with(run, { seq = seq }), run.text, false)
  local h = decoder.forward(S, P.lm, emb, r)
  S:drop(emb)
  local logits = decoder.logits(S, P.lm, h, r)
  S:drop(h)
  release(S, P)
  return logits
end

function F.generate(S, P, run)
  S.tape:phase("prefill")
  local emb = embeds(S, P, run)
  local r = with(run, { seq = run.seq + P.n_img })
  for _, x in ipairs(P.side or {}) do S:drop(x) end
  P.side = nil
  if P.lm.cross then P.lm.cross.cache = {} end -- the vision K/V, computed at prefill
  causal.generate(S, P.lm, r, emb)
  release(S, P)
end

-- PPO's critic: the language model's (models/causal_lm.lua).
F.build_critic, F.values = causal.build_critic, causal.values

-- The language model alone (a run spec's model.text_only).
F.text_only = causal

return F
