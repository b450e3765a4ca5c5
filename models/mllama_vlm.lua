-- Llama 3.2 Vision (mllama) on the simulator, following transformers'
-- modeling_mllama.py. The family's description is models/mllama.lua's.
--
-- Vision: pixel_values are padded to max_num_tiles tiles per image and the
-- encoder runs on all of them. Each tile is (image/patch)^2 patches + CLS,
-- padded to a multiple of 8 (1601 -> 1608 at 560/14); the local layers and
-- then the global layers attend over all tiles of an image at once
-- (tiles x 1608 tokens). The local transformer runs with
-- output_hidden_states=True, so without autograd its hidden states stay
-- live until the encoder returns. The final state (padding stripped) is
-- concatenated with intermediate_layers_indices' states (vision_output_dim
-- wide) and projected to the text width: the cross-attention states, tiles
-- x 1601 rows per image, which every cross-attention layer's k/v read.
-- Simulated as a SigLIP ViT of the tower's width, depth (local + global),
-- heads and MLP over the padded tokens (q/k/v/o biases, the gated
-- positional and tile embeddings' shapes differ: a few MB).
-- Text: a Llama decoder whose cross_attention_layers are cross-attention
-- layers (models/decoder.lua, cross_forward); each image is one <|image|>
-- token in the sequence; the cross-attention mask (B, T, images x tiles x
-- 1601) is built from the processor's int64 mask by repeat_interleave,
-- cast, inverted and filled in the model dtype.
local siglip = require("models.siglip")
local decoder = require("models.decoder")
local causal = require("models.causal_lm")
local layers = require("stdlib.layers")
local loss = require("stdlib.loss")
local with = require("stdlib.run").with

local F = { takes_text = true }

function F.build(S, run, pol)
  local g = run.vlm
  local vm = siglip.normalize(run.vision, "vision_config")
  local dt = run.param_dtype
  local P = { g = g }
  local vtr, vlo = pol("vision")
  P.vision = siglip.build(S, vm, dt, vtr, vlo)
  local ptr, plo = pol("projector")
  P.proj = layers.new_linear(S, { label = "multi_modal_projector", inn = g.out_dim,
    out = run.text.hidden, bias = true, dt = dt, trainable = ptr("multi_modal_projector"),
    lora = plo("multi_modal_projector") })
  local ttr, tlo = pol("llm")
  P.lm = decoder.build(S, run.text, { dt = dt, trainable = ttr, lora = tlo, quant = run.quant })
  P.media = g.images -- images per sample
  P.n_img = g.images -- one <|image|> token each
  P.vis = g.images * g.tiles * g.positions -- cross-attention states per sample
  return P
end

function F.inputs(S, run, P)
  local g, B = P.g, run.batch
  local T = run.seq + P.n_img
  local ids = S:new_tensor(B * T, "int64", "input_ids", false, "inputs")
  local labels = run.mode == "train" and S:new_tensor(B * T, "int64", "labels", false, "inputs")
    or nil
  P.pixels = S:new_tensor(B * g.images * g.tiles * g.channels * g.image * g.image, "fp32",
    "pixel_values", false, "inputs")
  local ar = S:new_tensor(B * g.images, "int64", "aspect_ratio_ids", false, "inputs")
  local arm = S:new_tensor(B * g.images * g.tiles, "int64", "aspect_ratio_mask", false, "inputs")
  P.xmask = S:new_tensor(B * T * g.images * g.tiles, "int64", "cross_attention_mask", false,
    "inputs")
  return { ids, labels, P.pixels, ar, arm, P.xmask }
end

-- A second model over the same batch (an RL reference, stdlib/rl.lua)
-- reads the policy's pixel_values and cross-attention mask.
function F.share_inputs(to, from)
  to.pixels, to.xmask = from.pixels, from.xmask
end

-- The encoder, the concatenated layer states and the projector: the
-- cross-attention states (B x vis rows, text hidden).
local function vision_states(S, P, run)
  local g, B = P.g, run.batch
  local vm = P.vision.m
  local h, kept = siglip.forward(S, P.vision, P.pixels, { batch = B * g.images,
    ckpt = run.ckpt, attention = run.attention, compose = false, keep = g.local_layers })
  local rows = B * P.vis
  -- torch.cat([final, stack(intermediate)], -1) over the unpadded patches
  local cat = S:op("vision.hidden_states_cat", rows * g.out_dim, h.dt, { h }, {}, { { h } })
  S:drop(h)
  for _, x in ipairs(kept or {}) do S:drop(x) end
  local states = layers.linear(S, cat, P.proj, rows)
  S:drop(cat)
  assert(vm.hidden * (g.intermediate_layers + 1) == g.out_dim)
  return states
end

-- _prepare_cross_attention_mask: repeat_interleave (int64), .to(dtype),
-- 1.0 - mask, masked_fill, times full_text_row_masked_out_mask
local function cross_mask(S, P, run, T, dt)
  local n = run.batch * T * P.vis
  local rep = S:new_tensor(n, "int64", "cross_attention_mask.repeat_interleave", false)
  local f = S:new_tensor(n, dt, "cross_attention_mask.to", false)
  S:drop(rep)
  local inv = S:new_tensor(n, dt, "cross_attention_mask.invert", false)
  S:drop(f)
  local filled = S:new_tensor(n, dt, "cross_attention_mask.masked_fill", false)
  S:drop(inv)
  local rowm = S:new_tensor(run.batch * T, dt, "full_text_row_masked_out_mask", false)
  local mask = S:new_tensor(n, dt, "cross_attention_mask", false)
  S:drop(filled)
  return mask, rowm
end

local function prepare(S, P, run)
  local T = run.seq + P.n_img
  local states = vision_states(S, P, run)
  local mask, rowm = cross_mask(S, P, run, T, states.dt)
  P.lm.cross = { states = states, rows = run.batch * P.vis, tokens = P.vis, mask = mask,
    last = P.g.last_cross }
  local emb = decoder.embed(S, P.lm, run.batch * T)
  return emb, with(run, { seq = T }), rowm
end

-- what the forward left of the cross-attention inputs
local function finish(S, P, rowm)
  local cr = P.lm.cross
  if cr.states then S:drop(cr.states, cr.mask) end
  S:drop(rowm)
  P.lm.cross = nil
end

function F.forward_loss(S, P, run)
  local emb, r, rowm = prepare(S, P, run)
  local B, T = run.batch, r.seq
  local h = decoder.forward(S, P.lm, emb, r)
  S:drop(emb)
  S:set_category("logits_loss")
  local logits = decoder.logits(S, P.lm, h, r)
  S:drop(h)
  local l = loss.causal_lm(S, logits, { batch = B, seq = T, impl = run.loss })
  S:drop(logits)
  finish(S, P, rowm)
  S:set_category("activations")
  return l
end

function F.forward_logits(S, P, run)
  local emb, r, rowm = prepare(S, P, run)
  local h = decoder.forward(S, P.lm, emb, r)
  S:drop(emb)
  local logits = decoder.logits(S, P.lm, h, r)
  S:drop(h)
  finish(S, P, rowm)
  return logits
end

-- Prefill computes every cross-attention layer's vision K/V once and
-- caches them; the decode steps read the cache (no pixel_values).
function F.generate(S, P, run)
  S.tape:phase("prefill")
  local emb, r, rowm = prepare(S, P, run)
  P.lm.cross.cache = {}
  local cache = P.lm.cross.cache
  causal.generate(S, P.lm, r, emb)
  for _, c in pairs(cache) do S:drop(c.k, c.v) end
  finish(S, P, rowm)
end

F.build_critic, F.values = causal.build_critic, causal.values

-- The language model alone (a run spec's model.text_only): its
-- cross-attention layers are skipped without images (transformers skips a
-- cross-attention layer when there are no cross_attention_states).
F.text_only = causal

return F
