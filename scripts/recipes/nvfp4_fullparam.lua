-- Seed 002: full-parameter training of Qwen3-4B-Instruct-2507 in TorchSharp
-- with NVFP4 forward weights. "Theory says ~28 GB, why do we see 80 GB?" —
-- answered component by component, flag by flag; then what the seed's
-- description implies (its code added lmHead to the parameters: an untied
-- head), the TorchSharp and unified-memory causes (the launcher's
-- runner-arm64-fp4 and --gpu-limit-gb 108 suggest a GB10-class host, whose
-- host tensors share the GPU's memory), and the cheapest set of the seed's
-- own flags that fits.
--   vramlua run recipes/nvfp4_fullparam.lua [--rows 8] [--seq 96]
local vram = require("vram")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local fit = require("stdlib.fit")
local answer = require("stdlib.answer")
local gpus = require("stdlib.gpus")
local args = require("stdlib.args").parse({ ... }, { rows = 8, seq = 96 })

local GiB, GB = 1 << 30, 1e9
local here = vram.share_dir .. "/scripts/recipes/nvfp4_fullparam.lua"

-- One row per launch; `flags` says what differs from the command in the
-- seed. The launch as run and the run the theory assumed are the example
-- specs (`vramlua diff` and `estimate --observed` read the same files); the
-- other rows edit one of them.
local function scenario(name, flags, file, edit)
  local doc = vram.yaml.load(vram.share_dir .. "/examples/specs/" .. file)
  doc.run.batch, doc.run.seq = args.rows, args.seq
  if edit then edit(doc.run) end
  return { name = name, flags = flags, spec = doc }
end

local LAUNCHED, THEORY = "qwen3_4b_nvfp4_as_launched.yaml", "qwen3_4b_nvfp4_theory.yaml"
local rows = {
  scenario("as launched (no flags), fp32 master", "(none)", LAUNCHED),
  scenario("as launched, if the master is bf16", "(none)", LAUNCHED, function(r)
    r.precision = { params = "bf16", forward_weights = "nvfp4" }
    r.optimizer = { name = "adam" }
  end),
  scenario("+ bf16 master, packed int8 optimizer states", "master bf16, int8 states", THEORY,
    function(r) r.checkpoint_segment = nil end),
  scenario("+ --grad-ckpt-chunk 8 (all the seed's flags)", "all", THEORY),
  scenario("all flags, NVFP4 optimizer states", "all, nvfp4 states", THEORY,
    function(r) r.optimizer.state_dtype = "nvfp4" end),
}

print(("Qwen3-4B-Instruct-2507, %d rows x %d tokens, TorchSharp (libtorch CUDA allocator)")
  :format(args.rows, args.seq))
print("GiB = 2^30 B. static = weights + masters + optimizer states before the step; activ. =")
print("what the forward keeps for backward (with the loss buffers);")
print("fwd/bwd and optimizer = the peaks of those phases; device = reserved + CUDA context")
print(("%-48s %8s %8s %8s %8s %9s %8s %8s"):format("launch", "static", "activ.", "grads",
  "fwd/bwd", "optimizer", "device", "device"))
print(("%-48s %8s %8s %8s %8s %9s %8s %8s"):format("", "GiB", "GiB", "GiB", "GiB", "GiB", "GiB",
  "GB"))
local results = {}
local ctx = require("stdlib.frameworks").get("torchsharp").context
for _, r in ipairs(rows) do
  local run = spec.normalize(r.spec, here, require("models.registry"))
  local st = step.simulate(run.sim, run)
  local pp = st.phase_peaks
  local fb = math.max(pp.forward or 0, pp.backward or 0)
  local grads = (st.phase_end.backward_end or 0) - st.baseline
  local device = st.peak_reserved + ctx
  local saved = (st.phase_end.forward_end or st.baseline) - st.baseline
  print(("%-48s %8.2f %8.2f %8.2f %8.2f %9.2f %8.2f %8.2f"):format(r.name, st.baseline / GiB,
    saved / GiB, grads / GiB, fb / GiB, (pp.optimizer or 0) / GiB, device / GiB, device / GB))
  results[#results + 1] = { r = r, st = st, run = run }
end

-- Load-time overlap: the raw tensor map and the parameters built from it
-- live together until the raw map is released.
local params = results[1].st.param_count
print()
print(("parameters: %d (tied embedding counted once)"):format(params))
print(("load-time overlap: raw bf16 tensors %.2f GiB + fp32 parameters %.2f GiB = %.2f GiB at once")
  :format(params * 2 / GiB, params * 4 / GiB, params * 6 / GiB))
print()
print("Where the seed's figures differ:")
print(("- '4B x 6.5 B = 26e9 B ~ 24.2 GB': 26e9 B is 24.2 GiB, not GB; with the exact %d")
  :format(params))
print(("  parameters the static part is %.2f GiB (%.2f GB)."):format(params * 6.5 / GiB,
  params * 6.5 / GB))
print("- stock torch Adam keeps its moments in the parameter's dtype: with bf16 masters they are")
print("  bf16 (2 x 2 B/param), not 'two fp32 matrices'; fp32 moments need fp32 masters, and then")
print("  master + grads + moments are 16 B/param (first row) — that is the 80 GB class.")
print("- int8 states are counted at 1 B/value; the packed format's block scales are not")
print("  known from the seed and are not counted (use optimizer adam8bit for bitsandbytes').")
print(("- activations: %.1f GiB without checkpointing, %.1f GiB with --grad-ckpt-chunk 8 —")
  :format(((results[3].st.phase_end.forward_end or 0) - results[3].st.baseline) / GiB,
    ((results[4].st.phase_end.forward_end or 0) - results[4].st.baseline) / GiB))
print("  not the seed's '15~20 GB', and they are freed before the peak: the optimizer step is")
print("  the peak, where single-tensor Adam holds two temporaries the size of the largest")
print("  parameter (the embedding, 151936 x 2560) on top of all gradients.")
print("- what remains between the first row's device total and an observed 80 GB is outside the")
print("  tensors: allocator fragmentation (not modelled), the load-time overlap above if the raw")
print("  map outlives loading, and the CUDA context.")
print()
print("Each of those causes sized by the simulator, and the combinations closest to 80 GB:")
print("  vramlua estimate examples/specs/qwen3_4b_nvfp4_theory.yaml --observed 80GB --observed-kind nvidia-smi")
print()

-- What the seed's description implies: "the code added embedTokens,
-- finalNorm and lmHead" to the parameters — an lmHead of its own, untied
-- from embedTokens (Qwen3-4B-Instruct-2507 ties them: tie_word_embeddings
-- true), trained with its gradient and optimizer state.
local function untie(r, doc) doc.model.overrides = { tie_word_embeddings = false } end
local function variant(file, edit)
  local doc = vram.yaml.load(vram.share_dir .. "/examples/specs/" .. file)
  doc.run.batch, doc.run.seq = args.rows, args.seq
  if edit then edit(doc.run, doc) end
  local run = spec.normalize(doc, here, require("models.registry"))
  local n, st = fit.need(run)
  return n, st, run
end
local tied_launch, tied_st = variant(LAUNCHED)
local untied_launch, untied_st = variant(LAUNCHED, untie)
local tied_theory = variant(THEORY)
local untied_theory = variant(THEORY, untie)
print("What the seed's description implies (device total = reserved + 500 MiB context):")
print(("%-52s %14s %9s %9s"):format("", "parameters", "launch GB", "flags GB"))
print(("%-52s %14d %9.2f %9.2f"):format("lm_head tied to embed_tokens (the checkpoint's)",
  tied_st.param_count, tied_launch / GB, tied_theory / GB))
print(("%-52s %14d %9.2f %9.2f"):format("lmHead a parameter of its own (the seed's code)",
  untied_st.param_count, untied_launch / GB, untied_theory / GB))
print(("the untied head adds %d parameters (151936 x 2560) and %.2f GB to the launch as run")
  :format(untied_st.param_count - tied_st.param_count, (untied_launch - tied_launch) / GB))
print()

-- TorchSharp and unified memory. Tensors TorchSharp does not Dispose live
-- until the .NET collector finalizes them: run.undisposed_steps k keeps k
-- steps' Adam temporaries (sqrt, denom per parameter). On a GB10-class
-- host (unified memory) the raw tensor map the loader read stays in the
-- same memory as the GPU's tensors until it is released.
local undisposed1 = variant(LAUNCHED, function(r, d) untie(r, d); r.undisposed_steps = 1 end)
local undisposed2 = variant(LAUNCHED, function(r, d) untie(r, d); r.undisposed_steps = 2 end)
local raw_bf16 = vram.bytes("bf16", untied_st.param_count)
local raw_nvfp4 = vram.bytes("nvfp4", untied_st.param_count)
print("TorchSharp and unified-memory causes, on the launch as run with the untied lmHead:")
print(("  Adam temporaries not disposed, this step's:         %9.2f GB"):format(undisposed1 / GB))
print(("  ... and the previous step's still unfinalized:      %9.2f GB"):format(undisposed2 / GB))
print(("  + the raw tensor map kept in unified memory, bf16:  %9.2f GB (%.2f GB of tensors)")
  :format(vram.add(untied_launch, raw_bf16) / GB, raw_bf16 / GB))
print(("  + the raw map if the .dat holds NVFP4 (0.5625 B):   %9.2f GB (%.2f GB of tensors)")
  :format(vram.add(untied_launch, raw_nvfp4) / GB, raw_nvfp4 / GB))
print("  (the launcher's --gpu-limit-gb 108 is a guard, not the memory: a GB10 shares 128 GB")
print("   with the CPU, the OS and the .NET runtime; undisposed temporaries would have passed")
print("   80 GB, so the seed's run disposed most of them)")
print()

-- The answer. The seed's recommended launch (all its flags) on the
-- smallest GPU it names (24 GB, "may overflow slightly"), with the lmHead
-- its code has. The knobs are the seed's own flags and one code change:
-- --optimizer-state-mode nvfp4 (cost 1: 4-bit moments), --step-chunk-rows
-- (rows per chunk, the step's rows accumulated: cost log2 of the chunks),
-- --grad-ckpt-chunk (layers per recomputed segment: cost 0, the same one
-- extra forward), tying lmHead back to embedTokens (cost 1, a code change
-- that restores the checkpoint's model).
local rtx = gpus.find("rtx4090")
local CHUNKS = {}
for i, rows in ipairs({ args.rows // 2, args.rows // 4, args.rows // 8 }) do
  if rows >= 1 then CHUNKS[#CHUNKS + 1] = { label = tostring(rows), rows = rows, cost = i } end
end
local KNOBS = {
  { name = "--optimizer-state-mode", values = { { label = "nvfp4", cost = 1,
    note = "4-bit moments (block scales unknown, not counted)" } } },
  { name = "--step-chunk-rows", values = CHUNKS },
  { name = "--grad-ckpt-chunk", values = { { label = "4", layers = 4, cost = 0 },
    { label = "2", layers = 2, cost = 0 }, { label = "1", layers = 1, cost = 0 } } },
  { name = "tie lmHead to embedTokens", values = { { cost = 1,
    note = "a code change: the checkpoint's tied head" } } },
}
local result = answer.search({ knobs = KNOBS,
  need = function(s)
    return (variant(THEORY, function(r, d)
      if not s["tie lmHead to embedTokens"] then untie(r, d) end
      if s["--optimizer-state-mode"] then r.optimizer.state_dtype = "nvfp4" end
      local c = s["--step-chunk-rows"]
      if c then r.batch, r.grad_accum = c.rows, args.rows // c.rows end
      local k = s["--grad-ckpt-chunk"]
      if k then r.checkpoint_segment = k.layers end
    end))
  end,
  budget = function() return rtx.bytes end })

local function gb(x) return ("%.2f GB"):format(x / GB) end
answer.print({
  result = result,
  question = ("the seed's recommended launch (bf16 master, int8 states, --grad-ckpt-chunk 8, "
    .. "%d rows x %d), its untied lmHead, on a 24 GB RTX 4090 (%s)"):format(args.rows, args.seq,
    gb(rtx.bytes)),
  cost_unit = "1 per numerics or code change, log2 of the row chunks",
  statements = {
    { claim = "'4B x 6.5 B = 26e9 B ~ 24.2 GB'", right = false,
      figure = ("26e9 B is 24.2 GiB; %d x 6.5 B = %.2f GB"):format(untied_st.param_count,
        untied_st.param_count * 6.5 / GB) },
    { claim = "'Qwen3-4B: about 4B parameters' for the code it reviewed", right = false,
      figure = ("with the lmHead it says the code added, %d (%d tied)")
        :format(untied_st.param_count, tied_st.param_count) },
    { claim = "'~28 GB peak with all the flags'", right = math.abs(untied_theory - 28 * GB) < 2 * GB,
      figure = ("%s with the untied lmHead (%s tied)"):format(gb(untied_theory), gb(tied_theory)) },
    { claim = "'stock Adam: two fp32 matrices, 32 GB' (the launch as run)", right = true,
      figure = ("moments in the parameters' dtype, fp32 without --master-dtype bf16: 2 x 4 B x "
        .. "%d = %.2f GB (bf16 with the flag)"):format(untied_st.param_count,
        8 * untied_st.param_count / GB) },
    { claim = "'activations without checkpointing 15~20 GB'", right = false,
      figure = ("%s forward-saved at %d x %d, and freed before the optimizer-step peak")
        :format(gb((untied_st.phase_end.forward_end or 0) - untied_st.baseline), args.rows,
          args.seq) },
    { claim = "'80 GB observed' explained by the launch's flags", right = untied_launch > 70 * GB,
      figure = ("the launch as run needs %s with the untied lmHead (%s tied); the rest is the "
        .. "raw map on unified memory or undisposed temporaries (above)"):format(
        gb(untied_launch), gb(tied_launch)) },
  },
  notes = { "fragmentation of the caching allocator is not modelled: reserved is a lower bound" },
}, print) -- this recipe's print, so a caller can collect the block
