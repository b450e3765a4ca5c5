-- Seed 004: Yxanul 197M. Per curriculum stage, the largest batch that fits
-- an RTX 4090, an H100 80GB and an H200 in BF16 and FP8, found by searching
-- the simulator, next to the seed's claim; throughput from FLOPs at a stated
-- MFU.
--   vramlua run recipes/yxanul_batches.lua [--mfu 0.4] [--curriculum FILE]
local vram = require("vram")
local spec = require("stdlib.spec")
local fit = require("stdlib.fit")
local gpus = require("stdlib.gpus")
local args = require("stdlib.args").parse({ ... }, { mfu = 0.4,
  curriculum = "examples/yxanul_curriculum.yaml" })

local registry = require("models.registry")
local here = vram.share_dir .. "/scripts/recipes/yxanul_batches.lua"
local _, cur = spec.resolve(args.curriculum, vram.share_dir)

-- Dense peak tensor-core throughput (FLOP/s, no sparsity), from the vendors'
-- data sheets: RTX 4090 (Ada) bf16 165 T / fp8 330 T (FP32 accumulate);
-- H100 SXM bf16 989 T / fp8 1979 T; H200 the same chip as H100.
local PEAK = { rtx4090 = { bf16 = 165e12, fp8 = 330e12 },
  ["h100-80gb"] = { bf16 = 989e12, fp8 = 1979e12 },
  h200 = { bf16 = 989e12, fp8 = 1979e12 } }

local function run_for(seq, precision)
  local prec = precision == "fp8" and { params = "bf16", forward_weights = "fp8_e4m3" }
    or { params = "bf16" }
  return spec.normalize({ model = { preset = cur.model }, run = { mode = "train", batch = 1,
    seq = seq, precision = prec, attention = "sdpa",
    optimizer = { name = "adamw", state_dtype = "fp32" } } }, here, registry)
end

local base = run_for(8, "bf16")
local params = require("stdlib.params").count(registry.find(base.hf_config, cur.model),
  base.hf_config).total
local text = base.text
print(("Yxanul 197M: %d parameters, vocab %d, %d layers, hidden %d; AdamW fp32 states, sdpa")
  :format(params, text.vocab, text.layers, text.hidden))
print("FP8 = fp8 forward copies of the Linear weights over bf16 masters (activations bf16)")
print(("throughput assumes MFU %.0f%%: tokens/s = MFU x peak FLOP/s / (6 N + 12 L d T)")
  :format(args.mfu * 100))
print()
print(("%5s %6s %10s | %-24s | %-24s | %-24s"):format("stage", "seq", "seed 4090",
  "RTX 4090 bf16/fp8", "H100 80GB bf16/fp8", "H200 bf16/fp8"))
for _, s in ipairs(cur.stages) do
  local cells = {}
  for _, g in ipairs({ "rtx4090", "h100-80gb", "h200" }) do
    local gpu = gpus.find(g)
    local b16 = fit.largest(run_for(s.seq_len, "bf16"), "batch", gpu.bytes)
    local b8 = fit.largest(run_for(s.seq_len, "fp8"), "batch", gpu.bytes)
    cells[#cells + 1] = ("%10d / %-10d"):format(b16, b8)
  end
  print(("%5d %6d %10d | %-24s | %-24s | %-24s"):format(s.stage, s.seq_len, s.seed_batch,
    cells[1], cells[2], cells[3]))
end
print()
print("tokens per second from FLOPs (an estimate: MFU is an assumption, not a measurement)")
print(("%6s %12s %12s %12s %12s"):format("seq", "4090 bf16", "4090 fp8", "H100 bf16", "H100 fp8"))
for _, s in ipairs(cur.stages) do
  local per_token = 6 * params + 12 * text.layers * text.hidden * s.seq_len
  local function tps(g, p) return args.mfu * PEAK[g][p] / per_token end
  print(("%6d %12.0f %12.0f %12.0f %12.0f"):format(s.seq_len, tps("rtx4090", "bf16"),
    tps("rtx4090", "fp8"), tps("h100-80gb", "bf16"), tps("h100-80gb", "fp8")))
end
print()
print("Where the seed's figures differ:")
local bf16 = params * 2
print(("- BF16 weights: %d x 2 B = %.1f MiB (%.1f MB); the seed's 374.5 MB is MiB."):format(
  params, bf16 / (1 << 20), bf16 / 1e6))
print(("- its optimizer figure, 1872.6 MB, is 5x its BF16 weights (10 B/param); AdamW with")
  .. "")
print(("  fp32 moments is 8 B/param = %.1f MiB, or 12 B/param = %.1f MiB with an fp32 master.")
  :format(params * 8 / (1 << 20), params * 12 / (1 << 20)))
print("- its batches ignore the logits: with a ~200k vocabulary the loss holds three fp32")
print("  B x T x V buffers at the start of backward, which caps the batch far below its table")
print("  at every stage (compare the columns above).")
print("- its tokens/s do not follow from any stated FLOP rate; the table above derives them.")
