-- InternLM2 (the LLM of InternVL2), read off the remote code
-- internlm2/modeling_internlm2.py, InternLM2ForCausalLM:
--   model.tok_embeddings  Embedding(vocab, H)
--   layers: attention.wqkv Linear(H, (heads + 2*kv_heads) * head_dim,
--           bias=config.bias), attention.wo Linear(heads*head_dim, H,
--           bias=config.bias), feed_forward.w1/w3 Linear(H, I), w2 Linear(I, H)
--           (no bias), attention_norm, ffn_norm RMSNorm(H)
--   model.norm RMSNorm(H); output Linear(H, vocab, bias=False) (untied)
-- The simulator runs it as a Llama decoder with q/k/v/o biases = `bias`:
-- the fused wqkv is one matmul where the simulator does three, the same
-- weights and a few percent apart in transient activations.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local decoder = require("models.decoder")
local causal = require("models.causal_lm")

local F = { name = "internlm2",
  about = "InternLM2 (fused wqkv), the LLM of InternVL2 (models/internlm2.lua)" }

-- An InternLM2 config nested at `prefix` ("" when it is the whole file).
function F.read_text(t, where, prefix)
  local c = cfgutil.reader(t, where, prefix)
  local m = {
    hidden = c:int("hidden_size"),
    heads = c:int("num_attention_heads"),
    intermediate = c:int("intermediate_size"),
    vocab = c:int("vocab_size"),
    layers = c:int("num_hidden_layers"),
    bias = c:bool("bias", true), -- InternLM2Config default
    tie = c:bool("tie_word_embeddings", false),
  }
  m.kv_heads = c:int("num_key_value_heads", m.heads)
  m.head_dim = m.hidden // m.heads
  if m.heads % m.kv_heads ~= 0 then
    c:fail("num_key_value_heads", ("must divide num_attention_heads (%d)"):format(m.heads))
  end
  m.text = decoder.read_nested(t, where, prefix, { model_type = "llama",
    attention_bias = m.bias })
  return m
end

function F.read(cfg, where)
  return F.read_text(cfg, where, "")
end

-- prefix: where the model sits in a bigger checkpoint ("language_model.").
function F.params(m, prefix)
  local pre = prefix or ""
  local H, I, hd = m.hidden, m.intermediate, m.head_dim
  local attn = vram.linear_params(H, (m.heads + 2 * m.kv_heads) * hd, m.bias)
    + vram.linear_params(m.heads * hd, H, m.bias)
  local mlp = 2 * vram.linear_params(H, I, false) + vram.linear_params(I, H, false)
  local embed = vram.embedding_params(m.vocab, H)
  local L = m.layers
  return {
    parts = {
      { name = pre .. "model.tok_embeddings", params = embed, tower = "llm" },
      { name = pre .. "model.layers.attention", params = attn * L, tower = "llm" },
      { name = pre .. "model.layers.feed_forward", params = mlp * L, tower = "llm" },
      { name = pre .. "model.layers.norms", params = 2 * vram.norm_params(H, "rms") * L,
        tower = "llm" },
      { name = pre .. "model.norm", params = vram.norm_params(H, "rms"), tower = "llm" },
      { name = pre .. "output", params = m.tie and 0 or vram.linear_params(H, m.vocab, false),
        tower = "llm", note = m.tie and "tied to tok_embeddings" or nil },
    },
    tied_duplicate = m.tie and embed or 0,
  }
end

function F.simulator(m)
  return { sim = causal, text = m.text }
end

return F
