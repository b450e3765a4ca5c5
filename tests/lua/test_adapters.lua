-- Adapters on every module peft can wrap: trainable counts derived here from
-- the shapes (r * (in + out) per LoRA pair), never from the simulator.
local vram = require("vram")
local step = require("stdlib.step")
local spec = require("stdlib.spec")

local root = vram.share_dir
local tests = {}

-- TinyLlama-1.1B's shapes (TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T
-- config.json: hidden 2048, intermediate 5632, 22 layers, 32 heads, 4 KV
-- heads, vocab 32000, untied head) over the Llama-3-8B preset.
local TINY = { hidden_size = 2048, intermediate_size = 5632, num_hidden_layers = 22,
  num_attention_heads = 32, num_key_value_heads = 4, vocab_size = 32000 }

local function tiny_run(lora, over)
  local o = {}
  for k, v in pairs(TINY) do o[k] = v end
  for k, v in pairs(over or {}) do o[k] = v end
  return spec.normalize({ model = { preset = "llama_3_8b", overrides = o },
    run = { mode = "train", batch = 1, seq = 16, precision = { params = "bf16" },
      framework = "pytorch", lora = lora } }, root .. "/tests/lua/spec.yaml",
    require("models.registry"))
end

local function trainable(run) return step.simulate(run.sim, run).trainable_count end

local QKVOGUD = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj" }
local H, I, KV, L, V, R = 2048, 5632, 4 * 64, 22, 32000, 32
local PER_LAYER = R * ((H + H) + 2 * (H + KV) + (H + H) + 2 * (H + I) + (I + H))

function tests.lora_on_every_llama_linear_counts_r_times_in_plus_out()
  T.eq(trainable(tiny_run({ rank = R, targets = QKVOGUD })), L * PER_LAYER)
end

-- issue 19: lm_head was accepted and dropped (25,231,360 instead of 26,320,896)
function tests.lm_head_in_targets_gets_its_adapter()
  local t = {}
  for i, n in ipairs(QKVOGUD) do t[i] = n end
  t[#t + 1] = "lm_head"
  local n = trainable(tiny_run({ rank = R, targets = t }))
  T.eq(n, L * PER_LAYER + R * (H + V))
  T.eq(n, 26320896) -- the figure issue 19 expects
end

-- a tied head is wrapped too (peft wraps the lm_head Linear over the shared weight)
function tests.lm_head_adapter_on_a_tied_head()
  local n = trainable(tiny_run({ rank = 8, targets = { "lm_head" } },
    { tie_word_embeddings = true }))
  T.eq(n, 8 * (H + V))
end

-- peft lora.Embedding: lora_embedding_A (r x vocab), lora_embedding_B (dim x r)
function tests.embedding_adapter_counts_r_times_vocab_plus_dim()
  local run = tiny_run({ rank = 16, targets = { "embed_tokens", "q_proj" } })
  local st = step.simulate(run.sim, run)
  T.eq(st.trainable_count, 16 * (V + H) + L * 16 * (H + H))
  T.ok(st.peak > 0)
end

function tests.unknown_target_is_an_error_with_a_hint()
  local run = tiny_run({ rank = 8, targets = { "q_proj", "q_prj", "v_proj" } })
  T.raises(function() trainable(run) end, "run.lora.targets[2]: no module named 'q_prj'")
  T.raises(function() trainable(run) end, "did you mean 'q_proj'?")
  local fused = tiny_run({ rank = 8, targets = { "qkv_proj" } })
  T.raises(function() trainable(fused) end, "no module named 'qkv_proj'")
end

-- Phi-3's fused projections: qkv_proj (H -> H + 2 kv) and gate_up_proj
-- (H -> 2 I) take adapters by name and under all-linear.
function tests.fused_projections_take_adapters()
  local over = { model_type = "phi3", tie_word_embeddings = false }
  local per = 8 * ((H + H + 2 * KV) + (H + H) + (H + 2 * I) + (I + H))
  T.eq(trainable(tiny_run({ rank = 8, targets = { "qkv_proj", "o_proj", "gate_up_proj",
    "down_proj" } }, over)), L * per)
  T.eq(trainable(tiny_run({ rank = 8, targets = "all-linear" }, over)), L * per)
  -- no targets: the attention projections, the fused one where it exists
  T.eq(trainable(tiny_run({ rank = 8 }, over)), L * 8 * ((H + H + 2 * KV) + (H + H)))
  T.eq(trainable(tiny_run({ rank = 8 })), L * 8 * ((H + H) + 2 * (H + KV) + (H + H)))
end

-- A QLoRA estimate says what it assumes of bitsandbytes (the head unquantized)
function tests.qlora_budget_names_the_bitsandbytes_assumptions()
  local run = tiny_run({ rank = 8 })
  run.quant = { store = "nf4", compute = "bf16" }
  local b = require("stdlib.report").budget(step.simulate(run.sim, run), run)
  local said = table.concat(b.assumptions, "\n")
  T.ok(said:find("lm_head, embeddings and norms stay bf16", 1, true), said)
  T.ok(said:find("Linear4bit computing in bf16", 1, true), said)
end

-- LLM.int8 (bitsandbytes Linear8bitLt) under LoRA, TinyLlama shapes, 16
-- tokens: MatMul8bitLt quantizes x per row in forward (16 x 5632 int8 plus
-- row stats and a 16 x 5632 x 4-byte int32 accumulator: well under 1 MiB)
-- and dequantizes the weight only in backward (CB.to(A.dtype): the
-- 2048 x 5632 bf16 MLP weight, 23,068,672 bytes). Before, the forward was
-- priced with that whole-weight temporary too.
tests.llm_int8_dequantizes_only_in_backward = function()
  -- one layer and a 256-token vocabulary, so activations and logits stay
  -- near 2 MB and a whole-weight temporary would stand out
  local o = { num_hidden_layers = 1, vocab_size = 256 }
  for k, v in pairs(TINY) do o[k] = o[k] or v end
  local run = spec.normalize({ model = { preset = "llama_3_8b", overrides = o },
    run = { mode = "train", batch = 1, seq = 16, precision = { params = "bf16",
      weights = "int8" }, framework = "pytorch", lora = { rank = 8 } } },
    root .. "/tests/lua/spec.yaml", require("models.registry"))
  local st = step.simulate(run.sim, run)
  local setup, W = st.phase_peaks.setup, H * I * 2
  T.ok(st.phase_peaks.forward - setup < W // 4, "no whole-weight temporary in forward: "
    .. (st.phase_peaks.forward - setup))
  T.ok(st.phase_peaks.backward - setup >= W, "CB copied into bf16 in backward")
  local said = false
  for _, a in ipairs(run.model_assumptions) do said = said or a:find("LLM.int8", 1, true) end
  T.ok(said, "the outlier columns' omission is a labelled assumption")
end

return tests
