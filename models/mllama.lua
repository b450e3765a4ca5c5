-- Llama 3.2 Vision (mllama) parameter counts, read off transformers'
-- modeling_mllama.py:
--
--   vision_model   patch_embedding Conv2d(channels, D, patch, bias=False);
--                  class_embedding (D); gated_positional_embedding:
--                  embedding (patches + 1, D), gate (1), tile_embedding
--                  Embedding(max_aspect_ratio_id + 1, max_num_tiles x
--                  (patches + 1) x D); pre_ and post_tile_positional_embedding:
--                  Embedding(max_aspect_ratio_id + 1, max_num_tiles x D) and a
--                  gate each; layernorm_pre, layernorm_post (LayerNorm);
--                  transformer: num_hidden_layers layers (q/k/v/o without
--                  bias, fc1/fc2 with, two LayerNorms); global_transformer:
--                  num_global_layers such layers plus gate_attn and gate_ffn
--                  max_aspect_ratio_id = len(supported_aspect_ratios)
--   multi_modal_projector  Linear(vision_output_dim, text hidden, bias)
--   language_model embed_tokens (vocab + 8 rows); Llama layers, of which
--                  cross_attention_layers are cross-attention layers (q/k/v/o,
--                  q_norm and k_norm RMSNorm(head_dim), cross_attn_attn_gate
--                  and cross_attn_mlp_gate, the MLP and two norms); norm;
--                  lm_head (vocab rows)
--
-- Llama-3.2-11B-Vision-Instruct: 863,567,379 vision + 31,461,376 projector
-- + 9,775,192,080 text = 10,670,220,835, the Hub count. The simulator has
-- no cross-attention layers yet: `estimate` refuses mllama.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")

local F = {}

local function list(c, t, key)
  local v = t[key]
  if type(v) ~= "table" then c:fail(key, "must be a list") end
  return v
end

function F.count(cfg, where)
  local vc = cfg.vision_config or errors.input(where, "vision_config", "is required but missing")
  local tc = cfg.text_config or errors.input(where, "text_config", "is required but missing")
  local add, mul, lp, np = vram.add, vram.mul, vram.linear_params, vram.norm_params
  local v = cfgutil.reader(vc, where, "vision_config.")
  local D, I = v:int("hidden_size"), v:int("intermediate_size")
  local patch, side = v:int("patch_size"), v:int("image_size")
  local tiles, ch = v:int("max_num_tiles"), v:int("num_channels", 3)
  local ratios = #list(v, vc, "supported_aspect_ratios") + 1
  local P = (side // patch) * (side // patch) + 1
  local layer = add(mul(4, lp(D, D, false)), lp(D, I, true), lp(I, D, true),
    mul(2, np(D, "layer")))
  local n_local, n_global = v:int("num_hidden_layers"), v:int("num_global_layers")
  local out_dim = v:int("vision_output_dim")
  local t = cfgutil.reader(tc, where, "text_config.")
  local H, TI = t:int("hidden_size"), t:int("intermediate_size")
  local L, heads = t:int("num_hidden_layers"), t:int("num_attention_heads")
  local kv = t:int("num_key_value_heads", heads)
  local vocab, hd = t:int("vocab_size"), H // heads
  local cross = list(t, tc, "cross_attention_layers")
  for i, x in ipairs(cross) do
    if math.type(x) ~= "integer" or x < 0 or x >= L then
      t:fail("cross_attention_layers[" .. i .. "]", ("must be a layer index 0..%d"):format(L - 1))
    end
  end
  local attn = add(mul(2, lp(H, mul(heads, hd), false)), mul(2, lp(H, mul(kv, hd), false)))
  local mlp_norms = add(mul(3, lp(H, TI, false)), mul(2, np(H, "rms")))
  local self_l = add(attn, mlp_norms)
  local cross_l = add(attn, mul(2, np(hd, "rms")), 2, mlp_norms)
  local tie = t:bool("tie_word_embeddings", cfg.tie_word_embeddings or false)
  return { parts = {
    { name = "vision_model.embeddings", tower = "vision", params = add(
      vram.conv_params(ch, D, patch * patch, false), D, mul(P, D), 1, mul(ratios, tiles, P, D),
      mul(2, add(mul(ratios, tiles, D), 1))) },
    { name = "vision_model.layernorms", tower = "vision", params = mul(2, np(D, "layer")) },
    { name = "vision_model.transformer", tower = "vision", params = mul(n_local, layer) },
    { name = "vision_model.global_transformer", tower = "vision",
      params = mul(n_global, add(layer, 2)) },
    { name = "multi_modal_projector", tower = "projector", params = lp(out_dim, H, true) },
    { name = "language_model.embed_tokens", params = vram.embedding_params(vocab + 8, H),
      note = "vocab_size + 8 rows" },
    { name = "language_model.layers", params = add(mul(L - #cross, self_l), mul(#cross, cross_l)),
      note = ("%d self-attention + %d cross-attention layers"):format(L - #cross, #cross) },
    { name = "language_model.norm", params = np(H, "rms") },
    { name = "lm_head", params = tie and 0 or lp(H, vocab, false) },
  } }
end

return F
