-- The seed recipes run and print the figures that arithmetic written here
-- (from the models' published shapes) says they must.
local vram = require("vram")

local tests = {}

-- Runs a recipe, returning its printed text.
local function run(name, ...)
  local out = {}
  local env = setmetatable({ print = function(...)
    local parts = {}
    for i = 1, select("#", ...) do parts[i] = tostring(select(i, ...)) end
    out[#out + 1] = table.concat(parts, "\t")
  end }, { __index = _G })
  local chunk = assert(loadfile(vram.share_dir .. "/scripts/recipes/" .. name, "t", env))
  chunk(...)
  return table.concat(out, "\n")
end

local function has(text, fragment, msg)
  T.ok(text:find(fragment, 1, true) ~= nil, (msg or "output") .. " contains '" .. fragment .. "'")
end

function tests.pixel_shuffle_prints_tokens_and_the_projector_growing_with_f_squared()
  local out = run("pixel_shuffle.lua", "--stage", "1")
  for _, f in ipairs({ 1, 2, 4, 8, 16, 32 }) do
    local tokens = (32 // f) * (32 // f)
    -- linear_1: 1152 f^2 -> 1536 with bias; linear_2: 1536 -> 1536 with bias
    local proj = 1152 * f * f * 1536 + 1536 + 1536 * 1536 + 1536
    local pat = ("\n%6d %7d %7d"):format(f, tokens, 2048 + tokens)
    has(out, pat, "factor " .. f)
    has(out, tostring(proj), "projector at f=" .. f)
  end
  -- B x T x V fp32 at factor 4: 4 x 2112 x 151936 x 4 B
  has(out, ("%.2f GiB each"):format(4 * 2112 * 151936 * 4 / (1 << 30)))
end

-- The fix for the largest term: one B x T x V fp32 buffer, one 1024-row
-- chunk of the chunked loss, and the Answer that the cheapest fix is the
-- loss (a same-math change), not the attention.
function tests.pixel_shuffle_sizes_the_loss_fix_and_ends_in_the_answer()
  local out = run("pixel_shuffle.lua")
  local V = 151936
  has(out, ("4 x 2112 x 151936 x 4 B = %.2f GiB"):format(4 * 2112 * V * 4 / 2^30))
  has(out, ("1024 x 151936 x 10 B = %.2f GiB"):format(1024 * V * 10 / 2^30))
  -- at factor 1: 2048 + 1024 tokens; one layer's eager scores, 12 heads, fp32
  has(out, ("one layer's scores are %.2f GiB, one B x T x V fp32 loss buffer %.2f GiB")
    :format(4 * 12 * 3072 * 3072 * 4 / 2^30, 4 * 3072 * V * 4 / 2^30))
  local _, answers = out:gsub("\nAnswer:\n", "")
  T.eq(answers, 2, "one Answer per stage")
  local _, chunked = out:gsub("cheapest change set that fits %(cost 0, points%): chunked "
    .. "cross%-entropy\n", "")
  T.eq(chunked, 2, "the loss fix alone fits in both stages")
  has(out, "RIGHT the auto factor (largest divisor of 32) leaves 1 image token — 32 x 32 "
    .. "patches / 32^2 = 1")
end

function tests.nvfp4_recipe_counts_qwen3_4b_and_the_static_bytes()
  local out = run("nvfp4_fullparam.lua")
  has(out, "parameters: 4022468096")
  -- 6.5 B/param of the seed at the exact count, in GiB and GB
  has(out, ("%.2f GiB (%.2f GB)"):format(4022468096 * 6.5 / (1 << 30), 4022468096 * 6.5 / 1e9))
  -- load-time overlap: bf16 raw + fp32 parameters
  has(out, ("%.2f GiB at once"):format(4022468096 * 6 / (1 << 30)))
  -- the lmHead the seed says the code added: 151936 x 2560 more parameters
  local untied = 4022468096 + 151936 * 2560
  has(out, ("lmHead a parameter of its own (the seed's code)          %d"):format(untied))
  has(out, ("adds %d parameters"):format(151936 * 2560))
  has(out, ("%d x 6.5 B = %.2f GB"):format(untied, untied * 6.5 / 1e9))
  -- the raw tensor map on unified memory: bf16, or NVFP4 (4 bits + an fp8 scale per 16
  -- values + one fp32 tensor scale)
  has(out, ("(%.2f GB of tensors)"):format(untied * 2 / 1e9))
  has(out, ("(%.2f GB of tensors)"):format((untied // 2 + untied // 16 + 4) / 1e9))
  has(out, ("2 x 4 B x %d = %.2f GB"):format(untied, 8 * untied / 1e9))
  has(out, "\nAnswer:\n")
  T.ok(out:find("as given: needs [%d.]+ GiB of 23.99 GiB: does not fit") ~= nil,
    "the seed's flags do not fit 24 GB with the untied head")
  T.ok(out:find("cheapest change set that fits") ~= nil, "some of its flags do")
end

-- Seed 003: tokens from the processors' rules, the seed's refusal rules
-- beside the simulated verdicts, and the answer to its 16 GB Mac floor.
function tests.vl_budget_answers_the_seeds_floors_with_its_own_rules_first()
  local out = run("vl_budget.lua")
  -- side, [IMG]-like tokens, what the language model holds
  for _, row in ipairs({
    { "paligemma-3b-mix-224", 224, (224 // 14) ^ 2, (224 // 14) ^ 2 },
    { "qwen2-vl-2b-instruct", 672, (672 // 28) ^ 2, (672 // 28) ^ 2 },
    -- InternVL: (448 / 14)^2 patches, pixel shuffle 0.5 each way, <img> </img>
    { "internvl2-2b", 448, (448 // 14) ^ 2 // 4, (448 // 14) ^ 2 // 4 + 2 },
    -- Mistral Small 3.1: patch 14, merge 2: 55 x 55 [IMG], 54 [IMG_BREAK] + [IMG_END]
    { "mistral-small-3.1-24b", 1540, 55 * 55, 55 * 55 + 55 } }) do
    has(out, ("%-24s %6d %8d %8d"):format(row[1], row[2], math.tointeger(row[3]),
      math.tointeger(row[4])), row[1])
  end
  -- 3 x 224 x 224 fp32 = 602,112 B; Qwen2-VL 48^2 patches x 1176 values fp32
  has(out, ("%12.2f"):format(3 * 224 * 224 * 4 / 1e6))
  has(out, ("%12.2f"):format(48 * 48 * 1176 * 4 / 1e6))
  -- the seed's rules: CPU refused for good; the 24B base refused on MPS unless --force
  T.ok(out:find("\nmistral%-small%-3%.1%-24b +REFUSED / %- +ok / NO [%d.]+ +ok / NO [%d.]+ +"
    .. "force / NO [%d.]+ +force / fits [%d.]+ +ok / fits") ~= nil, "the 24B row of the matrix")
  -- Metal's working set on the 16 GB M2: 16 GiB x 3 / 4
  has(out, ("working set %.2f GB"):format(16 * (1 << 30) * 3 / 4 / 1e9))
  has(out, "\nAnswer:\n")
  -- Mistral-Small-3.1-24B's published parameter count, fp16
  has(out, ("24011361280 parameters x 2 B = %.2f GB"):format(24011361280 * 2 / 1e9))
  has(out, "WRONG 'CUDA 48 GB+ for serious LoRA work'")
  has(out, "WRONG 'Qwen2-VL caches ~4.5 MB per 672^2 image'")
  has(out, "RIGHT '3025 image tokens per image'")
end

-- Seed 004: the FP8 path's model (src/model_fp8_optimized.py) is the
-- factorized model plus an untied 768 x 200005 bf16 head; AdamW states in
-- bf16; FP8 speeds up the te.Linear GEMMs only.
function tests.yxanul_recipe_answers_with_the_fp8_files_model()
  local out = run("yxanul_batches.lua")
  local tied = 25698944 + 28 * 6096384 + 768 -- models/yxanul.lua's breakdown
  local params = tied + 768 * 200005
  has(out, ("%d parameters"):format(params))
  -- te.Linear: q, o 768 x 768; k, v 768 x 128 (2 kv heads x 64); gate, up, down 768 x 2048
  local n_te = 28 * (2 * 768 * 768 + 2 * 768 * 128 + 3 * 768 * 2048)
  has(out, ("te.Linear (fp8 GEMMs): %d"):format(n_te))
  has(out, ("%.1f MiB; fp8 copies are per step"):format(params * 2 / (1 << 20)))
  has(out, ("%.1f MiB is src/model.py's tied model"):format(tied * 2 / (1 << 20)))
  has(out, ("%d x 4 B = %.1f MiB"):format(params, params * 4 / (1 << 20)))
  -- tokens/s ratio at seq 8 on the RTX 4090 (165 / 330 TFLOP/s): the head,
  -- the embedding projection and attention stay bf16
  local bf = 6 * (768 * 200005 + 128 * 768) + 12 * 28 * 768 * 8
  local te = 6 * n_te
  local ratio = ((te + bf) / 165e12) / (te / 330e12 + bf / 165e12)
  has(out, ("FP8 gives %.2fx at seq 8"):format(ratio))
  -- the run train_fp8.py makes of the ultra curriculum's 4096 at seq 8: x 1.3
  has(out, ("batch 4096 x 1.3 = %d, FP8"):format(4096 * 13 // 10))
  has(out, "\nAnswer:\n")
  T.ok(out:find("as given: needs [%d.]+ GiB of 23.99 GiB: does not fit") ~= nil, "5324 does not fit")
  -- the trainer's logits + probs (B x 8 x V) and shifted_logits (B x 7 x V), bf16, at the
  -- micro-batch gradient accumulation 8 leaves: ceil(5324 / 8) = 666
  local mb = (5324 + 7) // 8
  has(out, ("%.2f GiB more at micro-batch %d"):format((2 * mb * 8 * 200005 * 2
    + mb * 7 * 200005 * 2) / (1 << 30), mb))
  T.ok(out:find("cheapest change set that fits") ~= nil, "a change set fits")
  for _, claim in ipairs({ "Model (FP8): 187.3 MB", "Optimizer (Adam): 1,872.6 MB",
    "FP8 training (half the memory of FP16)", "'2x throughput" }) do
    T.ok(out:find("WRONG " .. (claim:sub(1, 1) == "'" and "" or "'") .. claim, 1, true) ~= nil,
      claim .. " judged wrong")
  end
end

-- Seed 000's Flax tree (vlmrl models/qwen3vl/model.py), counted here by
-- hand from Qwen3-VL-4B's config: the checkpoint's text model, plus the
-- q/k/v biases the Flax attention declares, plus an lm_head leaf copied
-- from the tied embedding; the code's own vision tower.
local function flax_counts()
  local text = 4022468096 + 36 * (4096 + 1024 + 1024) + 151936 * 2560
  local block = 2 * 1024 + (1024 * 3072 + 3072) + (1024 * 1024 + 1024)
    + 2 * (1024 * 4096 + 4096) + (4096 * 1024 + 1024)
  local merger = (4096 * 4096 + 4096) + (4096 * 2560 + 2560)
  local vision = 1536 * 1024 + 24 * block + (1024 + merger) + 3 * (4096 + merger)
  return text, vision
end

function tests.ppo_fix_simulates_the_flax_tree_and_judges_the_seed()
  local out = run("ppo_fix.lua")
  local text, vision = flax_counts()
  local total = text + vision
  has(out, "image tokens at the pixel cap 12845056: 2048")
  has(out, ("text %d "):format(text))
  has(out, ("vision %d "):format(vision))
  has(out, ("total %d = %.2f GB in fp32"):format(total, total * 4 / 1e9))
  has(out, "the checkpoint's tensors: 4437815808")
  -- params.pkl: 19.7 GB is the tree in fp32
  has(out, ("RIGHT params.pkl (19.7 GB) means fp32 parameters — the Flax tree's %d parameters "
    .. "x 4 B = 19.70 GB"):format(total))
  has(out, ("biases (%d) are left out"):format(24 * (4096 + 4096 + 1024)))
  -- DeepStack: three staged fp32 arrays of 16 x 2048 x 2560, not merger weights
  has(out, ("3 x 16 x 2048 x 2560 x 4 B = %.2f GiB staged"):format(3 * 16 * 2048 * 2560 * 4 / 2^30))
  -- AdamW fp32: 4 B params + 8 B states per parameter, held twice without donation
  has(out, ("%.2f GB of state, twice"):format(total * 12 / 1e9))
  -- XLA's pools: 75 % and 95 % of the H100's 81559 MiB
  local dev = 81559 * 2^20
  has(out, ("75%% of %.2f GiB = %.2f GiB"):format(dev / 2^30, math.floor(dev * 0.75) / 2^30))
  T.ok(out:find("does not fit in the .75 pool %(" .. ("%.2f"):format(math.floor(dev * 0.75) / 2^30)
    .. " GiB%), fits at .95 %(" .. ("%.2f"):format(math.floor(dev * 0.95) / 2^30)
    .. " GiB%): the fraction alone changes the verdict") ~= nil, "the fraction alone")
  T.ok(out:find("\nAnswer:\n  [^\n]*\n  as given: needs [%d.]+ GiB of 59.74 GiB: does not fit")
    ~= nil, "the Answer block judges the run as given")
  has(out, "cheapest change set that fits")
  has(out, "WRONG take_along_axis avoids materialising the [B,T,V] one_hot — under jit the "
    .. "one_hot chain is fused already: saves 0.00 GiB")
end

return tests
