-- Seed 004: Yxanul "197M" trained with FP8 on an RTX 4090, curriculum from
-- seq 8 to 2048. The FP8 path of the seed's repository (train_fp8.py at
-- yxanul/yxanul_0.6B 9dca5d13, the seed's commit) does not train the 197M
-- model of src/model.py: it builds src/model_fp8_optimized.py, whose
-- YxanulFP8Model has the factorized bf16 embedding, 28 layers of
-- te.Linear q/k/v/o and SwiGLU gate/up/down with bf16 parameters
-- (params_dtype=torch.bfloat16), bf16 RMSNorms and its own untied bf16
-- lm_head nn.Linear(768, 200005); its loss shifts the bf16 logits, then
-- .float() and CrossEntropyLoss. trainer_fp8.py runs it under
-- te.fp8_autocast with DelayedScaling(HYBRID, amax_history_len=16, margin 2)
-- and AdamW (torch or apex FusedAdam: states zeros_like the bf16 params).
-- That is what is simulated here (framework te-fp8, stdlib/frameworks/);
-- BF16 is the same file with --disable-fp8 (nn.Linear in bf16).
--   vramlua run recipes/yxanul_batches.lua [--mfu 0.4] [--curriculum FILE]
local vram = require("vram")
local spec = require("stdlib.spec")
local fit = require("stdlib.fit")
local gpus = require("stdlib.gpus")
local answer = require("stdlib.answer")
local args = require("stdlib.args").parse({ ... }, { mfu = 0.4,
  curriculum = "examples/yxanul_curriculum.yaml" })

local registry = require("models.registry")
local here = vram.share_dir .. "/scripts/recipes/yxanul_batches.lua"
local _, cur = spec.resolve(args.curriculum, vram.share_dir)
local MiB = 1 << 20

-- Dense peak tensor-core throughput (FLOP/s, no sparsity), from the vendors'
-- data sheets: RTX 4090 (Ada) bf16 165 T / fp8 330 T (FP32 accumulate);
-- H100 SXM bf16 989 T / fp8 1979 T; H200 the same chip as H100.
local PEAK = { rtx4090 = { bf16 = 165e12, fp8 = 330e12 },
  ["h100-80gb"] = { bf16 = 989e12, fp8 = 1979e12 },
  h200 = { bf16 = 989e12, fp8 = 1979e12 } }

-- The run train_fp8.py makes: fp8 = false is --disable-fp8; s.accum is the
-- stage's gradient_accumulation_steps (micro-batch = batch / accum);
-- s.adam8bit is optimization.yaml's optimizer.use_8bit (bitsandbytes).
local function run_for(seq, batch, s)
  s = s or {}
  return spec.normalize({ model = { preset = cur.model,
      overrides = { tie_word_embeddings = false } },
    run = { mode = "train", batch = batch, seq = seq, precision = { params = "bf16" },
      attention = "sdpa", loss = "shift_float",
      framework = s.fp8 == false and "pytorch" or "te-fp8",
      fp8 = s.fp8 ~= false and { amax_history_len = 16 } or nil,
      grad_accum = s.accum or 1,
      optimizer = { name = s.adam8bit and "adam8bit" or "adamw" } } }, here, registry)
end

local base = run_for(8, 1)
local fam = registry.find(base.hf_config, cur.model)
local counts = require("stdlib.params").count(fam, base.hf_config)
local params = counts.total
local t = base.text
local H, L, I, V = t.hidden, t.layers, t.intermediate, t.vocab
local qdim, kvdim = t.heads * t.head_dim, t.kv_heads * t.head_dim
-- parameters in te.Linear (fp8 GEMMs) and in the bf16 GEMMs (embedding
-- projection and lm_head); the tied model of src/model.py for comparison
local n_te = L * (H * qdim + 2 * H * kvdim + qdim * H + 3 * H * I)
local n_head, n_proj = H * V, t.factor * H
local tied_cfg = {}
for k, v in pairs(base.hf_config) do tied_cfg[k] = v end
tied_cfg.tie_word_embeddings = true
local tied = require("stdlib.params").count(fam, tied_cfg).total

print(("Yxanul, the FP8 path's model (src/model_fp8_optimized.py): %d parameters"):format(params))
print(("  = %d (src/model.py, lm_head reusing the embedding) + %d x %d untied bf16 lm_head")
  :format(tied, H, V))
print(("  te.Linear (fp8 GEMMs): %d; bf16 GEMMs: lm_head %d + embedding projection %d")
  :format(n_te, n_head, n_proj))
print("AdamW states in the parameters' dtype (bf16), sdpa attention in bf16, loss: bf16 shift")
print("then fp32 log-softmax; TransformerEngine DelayedScaling, amax_history_len 16")
print(("throughput assumes MFU %.0f%%; only te.Linear FLOPs run at the fp8 rate")
  :format(args.mfu * 100))
print()

-- the largest micro-batch per stage, by simulation (never extrapolated)
print(("%5s %6s %7s %7s | %-21s | %-21s | %-21s"):format("stage", "seq", "seed", "run",
  "RTX 4090 bf16/fp8", "H100 80GB bf16/fp8", "H200 bf16/fp8"))
local largest = {}
for _, s in ipairs(cur.stages) do
  local cells = {}
  for _, g in ipairs({ "rtx4090", "h100-80gb", "h200" }) do
    local gpu = gpus.find(g)
    local b16 = fit.largest(run_for(s.seq_len, 1, { fp8 = false }), "batch", gpu.bytes)
    local b8 = fit.largest(run_for(s.seq_len, 1), "batch", gpu.bytes)
    cells[#cells + 1] = ("%8d / %-10d"):format(b16, b8)
    if g == "rtx4090" then largest[s.stage] = { bf16 = b16, fp8 = b8 } end
  end
  print(("%5d %6d %7d %7d | %-21s | %-21s | %-21s"):format(s.stage, s.seq_len, s.seed_batch,
    s.config_batch * 13 // 10, cells[1], cells[2], cells[3]))
end
print("seed: the seed's table (RTX 4090, FP8); run: the ultra-curriculum config's batch x 1.3,")
print("what train_fp8.py runs under FP8 ('FP8 bonus')")
print()

-- tokens/s from FLOPs: 6 N per token for the GEMMs, + 12 L d T for
-- attention (bf16); the fp8 rate applies to te.Linear only
print("tokens per second from FLOPs (MFU is an assumption, not a measurement)")
print(("%6s %12s %12s %12s %12s %9s"):format("seq", "4090 bf16", "4090 fp8", "H100 bf16",
  "H100 fp8", "fp8/bf16"))
local function seconds_per_token(g, seq, fp8)
  local attn = 12 * L * H * seq
  local bf16_flops = 6 * (n_head + n_proj) + attn
  local te_flops = 6 * n_te
  local p = PEAK[g]
  return (te_flops / (fp8 and p.fp8 or p.bf16) + bf16_flops / p.bf16) / args.mfu
end
local speedup = {}
for _, s in ipairs(cur.stages) do
  local function tps(g, fp8) return 1 / seconds_per_token(g, s.seq_len, fp8) end
  speedup[s.seq_len] = tps("rtx4090", true) / tps("rtx4090", false)
  print(("%6d %12.0f %12.0f %12.0f %12.0f %8.2fx"):format(s.seq_len, tps("rtx4090", false),
    tps("rtx4090", true), tps("h100-80gb", false), tps("h100-80gb", true), speedup[s.seq_len]))
end
print()

-- The seed's run: each stage's config batch x 1.3 under FP8 on the RTX 4090.
-- The knobs its own code offers: the stage's gradient_accumulation_steps
-- (the micro-batch divided, same tokens per optimizer step), --disable-fp8
-- (no 1.3 bonus, nn.Linear in bf16), optimization.yaml's use_8bit.
-- Costs (one unit, "throughput or numerics lost"): accumulation log2(k)
-- (smaller GEMMs, more steps), --disable-fp8 2 (the GEMM rate halved),
-- use_8bit 3 (different optimizer numerics).
local rtx = gpus.find("rtx4090")
local ACCUM = {}
for i = 1, 8 do ACCUM[i] = { label = tostring(1 << i), k = 1 << i, cost = i } end
local KNOBS = {
  { name = "gradient_accumulation_steps", values = ACCUM },
  { name = "--disable-fp8", values = { { cost = 2, note = "nn.Linear in bf16, no 1.3 bonus" } } },
  { name = "use_8bit", values = { { cost = 3, note = "bitsandbytes Adam8bit states" } } },
}
local function stage_search(s)
  local accum0 = s.config_accum or 1
  local function batch_of(st)
    local b = st["--disable-fp8"] and s.config_batch or s.config_batch * 13 // 10
    local k = accum0 * (st.gradient_accumulation_steps and st.gradient_accumulation_steps.k or 1)
    return (b + k - 1) // k, k
  end
  return answer.search({ knobs = KNOBS, max_changes = 2,
    need = function(st)
      local b, k = batch_of(st)
      return fit.need(run_for(s.seq_len, b, { fp8 = not st["--disable-fp8"], accum = k,
        adam8bit = st.use_8bit ~= nil }))
    end,
    budget = function() return rtx.bytes end }), batch_of
end

local per_stage, headline = {}, nil
for _, s in ipairs(cur.stages) do
  local r = stage_search(s)
  per_stage[#per_stage + 1] = { s = s, r = r }
  if s.stage == 1 then headline = r end
end

local s1 = cur.stages[1]
local b1 = largest[1]
local at_seed = fit.need(run_for(s1.seq_len, s1.seed_batch))
local fp8_128 = fit.need(run_for(128, 64))
local bf16_128 = fit.need(run_for(128, 64, { fp8 = false }))
local notes = { "every stage on the RTX 4090, the cheapest change set of those knobs "
  .. "(micro-batch x accumulation):" }
for _, e in ipairs(per_stage) do
  local f = e.r.fit
  notes[#notes + 1] = ("  stage %2d seq %4d run batch %5d%s: %s"):format(e.s.stage, e.s.seq_len,
    e.s.config_batch * 13 // 10, e.s.config_accum and (" (config accumulates "
      .. e.s.config_accum .. ", x that)") or "", f and (#f.changes == 0 and ("fits as given, %s"):format(
      vram.fmt(f.need, "GiB")) or ("%s (cost %d), %s"):format(answer.describe(f.changes), f.cost,
      vram.fmt(f.need, "GiB"))) or "nothing of these fits")
end
-- EnhancedTrainer.train_step (src/enhanced_trainer.py) computes accuracy,
-- entropy and top-5 under no_grad after forward and keeps its locals
-- `logits` (B x T x V), `shifted_logits` (B x (T-1) x V) and `probs`
-- (B x T x V), all bf16, through backward: not simulated, sized here.
local hf = headline.fit
if hf then
  local k = hf.changes[1] and hf.changes[1].value.k or 1
  local b = (s1.config_batch * 13 // 10 + k - 1) // k
  local rows, shifted = b * s1.seq_len, b * (s1.seq_len - 1)
  local held = vram.add(vram.bytes("bf16", vram.mul(2, rows, V)), vram.bytes("bf16",
    vram.mul(shifted, V)))
  local total = vram.add(hf.need, held)
  notes[#notes + 1] = ("not simulated: the trainer's metrics keep logits, shifted_logits and "
    .. "probs (bf16) through backward: %s more at micro-batch %d of stage 1, %s in all: %s")
    :format(vram.fmt(held, "GiB"), b, vram.fmt(total, "GiB"), total <= rtx.bytes
      and "still fits" or "no longer fits: the batches above are upper bounds")
end

answer.print({
  result = headline,
  question = ("stage 1 as train_fp8.py runs it: seq %d, batch %d x 1.3 = %d, FP8, RTX 4090 (%s)")
    :format(s1.seq_len, s1.config_batch, s1.config_batch * 13 // 10, vram.fmt(rtx.bytes, "GiB")),
  cost_unit = "log2 of the accumulation, 2 for bf16 GEMMs, 3 for 8-bit states",
  statements = {
    { claim = "'Model (FP8): 187.3 MB'", right = false,
      figure = ("the FP8 path keeps bf16 parameters: %d x 2 B = %.1f MiB; fp8 copies are per step")
        :format(params, params * 2 / MiB) },
    { claim = "'Model (BF16): 374.5 MB'", right = false,
      figure = ("%d x 2 B = %.1f MiB is src/model.py's tied model; the FP8 path's is %.1f MiB")
        :format(tied, tied * 2 / MiB, params * 2 / MiB) },
    { claim = "'Optimizer (Adam): 1,872.6 MB'", right = false,
      figure = ("AdamW states zeros_like the bf16 parameters: %d x 4 B = %.1f MiB")
        :format(params, params * 4 / MiB) },
    { claim = "'batch 8192 at seq 8 with FP8' on an RTX 4090", right = false,
      figure = ("needs %s; the largest FP8 batch at seq 8 is %d (bf16: %d)")
        :format(vram.fmt(at_seed, "GiB"), b1.fp8, b1.bf16) },
    { claim = "'FP8 training (half the memory of FP16)'", right = false,
      figure = ("at seq 128, batch 64: FP8 %s vs BF16 %s (te.Linear saves fp8 inputs and "
        .. "weight copies besides the bf16 tensors norms, attention and loss keep)")
        :format(vram.fmt(fp8_128, "GiB"), vram.fmt(bf16_128, "GiB")) },
    { claim = "'2x throughput improvement over BF16' (trainer_fp8.py)", right = false,
      figure = ("te.Linear holds %.0f%% of the GEMM parameters; at MFU %.0f%% FP8 gives "
        .. "%.2fx at seq 8 and %.2fx at seq 2048"):format(100 * n_te / (n_te + n_head + n_proj),
        args.mfu * 100, speedup[8], speedup[2048] or speedup[cur.stages[#cur.stages].seq_len]) },
  },
  notes = notes,
}, print) -- this recipe's print, so a caller can collect the block
