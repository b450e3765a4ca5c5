-- Yxanul 197M (seed 004): a GQA decoder with factorized embeddings and no
-- separate output head. There is no Hugging Face repository; the model is
-- yxanul/yxanul_0.6B on GitHub, and this file follows its src/model.py and
-- configs/model_config.yaml at commit 9dca5d13 (the commit that added the
-- analysis seed 004 was taken from, analysis/VRAM_OPTIMIZATION.md):
--
--   FactorizedEmbedding: embed nn.Embedding(vocab, r) + proj
--                        nn.Linear(r, hidden, bias=False)
--   TransformerLayer x num_layers:
--     ln_1, ln_2         RMSNorm(hidden) (weight)
--     attention.q_proj   Linear(hidden, hidden, bias=False)
--     attention.kv_proj  Linear(hidden, 2 * kv_heads * head_dim, bias=False)
--     attention.o_proj   Linear(hidden, hidden, bias=False)
--     feed_forward.ffn   SwiGLU: w1, w2 Linear(hidden, intermediate), w3
--                        Linear(intermediate, hidden), no biases
--   ln_f                 RMSNorm(hidden)
--   lm_head              none: logits = (h @ proj.weight) @ embed.weight^T,
--                        the factorized embedding used backwards
-- Buffers (not parameters, but memory): a causal mask of
-- max_position_embeddings^2 fp32 (4096^2 x 4 B = 64 MiB) and, in every
-- layer's RotaryEmbedding, inv_freq plus fp32 cos/sin caches of
-- max_position_embeddings x head_dim each (2 MiB per layer at 4096 x 64).
--
-- Yxanul 197M: 25,698,944 embedding + 28 x 6,096,384 + 768 = 196,398,464
-- parameters. Seed 004's figures follow: BF16 2 B x 196,398,464 =
-- 374.6 MiB (seed: "374.5 MB"), FP8 187.3 MiB ("187.3 MB"), and the
-- factorization saves 200,005 x 768 - 25,698,944 = 127,904,896 ("saves
-- 127.9M params").
local vram = require("vram")
local cfgutil = require("stdlib.config")
local decoder = require("models.decoder")
local causal = require("models.causal_lm")

local F = { name = "yxanul",
  about = "Yxanul: GQA decoder with factorized embeddings (models/yxanul.lua)" }

-- The defaults of configs/model_config.yaml that this reader and the
-- simulator's decoder (models/decoder.lua) both need.
local DEFAULTS = { use_factorized_embeddings = true, factorization_dim = 128 }

-- The simulator's decoder: Llama layers (models/decoder_lm.lua), with the
-- factorized embeddings models/decoder.lua reads for every variant.
F.decoders = { yxanul = require("models.decoder_lm").decoders.llama }

function F.read(cfg, where)
  local c = cfgutil.reader(cfg, where)
  local H = c:int("hidden_size")
  local heads = c:int("num_attention_heads")
  local m = {
    hidden = H,
    layers = c:int("num_hidden_layers"),
    heads = heads,
    kv_heads = c:int("num_key_value_heads", heads),
    intermediate = c:int("intermediate_size"),
    vocab = c:int("vocab_size"),
    factorized = c:bool("use_factorized_embeddings", true),
    rank = c:int("factorization_dim", 128),
    max_positions = c:int("max_position_embeddings", 4096),
    -- src/model.py reuses the factorized embedding as the output; the FP8
    -- model file (src/model_fp8_optimized.py) has its own bf16 lm_head
    tie = c:bool("tie_word_embeddings", true),
  }
  if H % heads ~= 0 then c:fail("num_attention_heads", "must divide hidden_size") end
  if heads % m.kv_heads ~= 0 then
    c:fail("num_key_value_heads", "must divide num_attention_heads")
  end
  m.head_dim = H // heads -- Attention: head_dim = hidden_size // num_heads
  -- the simulator runs it as a decoder whose tied output is the factorized
  -- embedding used backwards
  m.text = decoder.read_nested(cfg, where, "", {}, DEFAULTS)
  return m
end

function F.params(m)
  local H, I = m.hidden, m.intermediate
  local embed, tied, head = 0, 0, 0
  if m.factorized then
    embed = vram.embedding_params(m.vocab, m.rank) + vram.linear_params(m.rank, H, false)
    if not m.tie then head = vram.linear_params(H, m.vocab, false) end
  else
    -- nn.Embedding + lm_head tied to it (YxanulForCausalLM.tie_weights)
    embed = vram.embedding_params(m.vocab, H)
    tied = embed
  end
  local attn = 2 * vram.linear_params(H, H, false)
    + vram.linear_params(H, 2 * m.kv_heads * m.head_dim, false)
  local ffn = 2 * vram.linear_params(H, I, false) + vram.linear_params(I, H, false)
  local norms = 2 * vram.norm_params(H, "rms")
  return {
    parts = {
      { name = "embed_tokens", params = embed, tower = "llm",
        note = m.factorized and ("factorized: vocab x " .. m.rank .. " + " .. m.rank .. " x hidden")
          or nil },
      { name = "layers.attention", params = attn * m.layers, tower = "llm" },
      { name = "layers.feed_forward", params = ffn * m.layers, tower = "llm" },
      { name = "layers.norms", params = norms * m.layers, tower = "llm" },
      { name = "ln_f", params = vram.norm_params(H, "rms"), tower = "llm" },
      { name = "lm_head", params = head, tower = "llm",
        note = head > 0 and "untied nn.Linear(hidden, vocab)" or (m.factorized
          and "reuses the factorized embedding" or "tied to embed_tokens") },
    },
    tied_duplicate = tied,
    -- what the factorization saves against a full vocab x hidden table
    factorization_saves = m.factorized and (vram.embedding_params(m.vocab, H) - embed) or 0,
  }
end

function F.simulator(m)
  return { sim = causal, text = m.text }
end

return F
