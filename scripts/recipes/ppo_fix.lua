-- Seed 000: a PPO update of Qwen3-VL-4B on JAX that runs out of an 80 GB
-- H100. What the seed's code does (vlmrl: core/ppo.py, models/qwen3vl/
-- model.py, core/batching.py), each of its own knobs alone, and the
-- cheapest set of them that fits, found by simulation (stdlib/answer.lua).
--   vramlua run recipes/ppo_fix.lua [--pixels N] [--minibatch N] [--image 2048x1024]
--                                    [--batch 16] [--text 100] [--new 64]
--
-- The update is `_ppo_step`, one jax.jit call per minibatch (no
-- donate_argnums) that runs forward_vlm on vision embeddings staged in the
-- batch: the vision tower does not run in the update, its parameters are
-- in the train state (optimizer state, new copies) but get no gradient
-- buffer. The step follows the JAX profile (stdlib/frameworks/jax.lua).
local vram = require("vram")
local spec = require("stdlib.spec")
local step = require("stdlib.step")
local layers = require("stdlib.layers")
local gpus = require("stdlib.gpus")
local frameworks = require("stdlib.frameworks")
local answer = require("stdlib.answer")
local xla = require("stdlib.xla")
local errors = require("stdlib.errors")
local registry = require("models.registry")
local causal = require("models.causal_lm")
local args = require("stdlib.args").parse({ ... }, { pixels = 12845056, minibatch = 64,
  image = "2048x1024", batch = 16, text = 100, new = 64 })

local GiB, GB = 1 << 30, 1e9
local here = vram.share_dir .. "/scripts/recipes/ppo_fix.lua"
local W, H = args.image:match("^(%d+)x(%d+)$")
if not W then errors.usage("--image needs WIDTHxHEIGHT, got '" .. args.image .. "'") end
W, H = math.tointeger(tonumber(W)), math.tointeger(tonumber(H))
local cfg_path, cfg = spec.resolve("qwen3_vl_4b_instruct.json", vram.share_dir)
local family = registry.find(cfg, cfg_path)
local model = family.read(cfg, cfg_path)
local v = model.vision
local N = args.batch
local OUT = v.out_hidden -- staged vision embeddings are out_hidden_size wide

-- The Flax tree models/qwen3vl/model.py builds: its vision blocks are
-- Qwen2.5-VL style (RMSNorm, gated gate/up/down MLP with biases, patch
-- embed without bias, no learned pos_embed), so the tree is not the
-- checkpoint's tower (models/qwen3_vl.lua: LayerNorm, fc1/fc2, pos_embed).
-- { name, in, out, bias } matrices; { name, n } vectors.
local function flax_vision()
  local Hd, I, M4 = v.hidden, v.intermediate, v.hidden * v.merge * v.merge
  local t = { { "visual.patch_embed", v.channels * v.temporal * v.patch * v.patch, Hd, false } }
  for b = 1, v.depth do
    local p = "visual.blocks_" .. (b - 1)
    t[#t + 1] = { p .. ".norm1", n = Hd }
    t[#t + 1] = { p .. ".norm2", n = Hd }
    t[#t + 1] = { p .. ".attn.qkv", Hd, 3 * Hd, true }
    t[#t + 1] = { p .. ".attn.proj", Hd, Hd, true }
    t[#t + 1] = { p .. ".mlp.gate_proj", Hd, I, true }
    t[#t + 1] = { p .. ".mlp.up_proj", Hd, I, true }
    t[#t + 1] = { p .. ".mlp.down_proj", I, Hd, true }
  end
  local function merger(p, norm)
    t[#t + 1] = { p .. ".norm", n = norm }
    t[#t + 1] = { p .. ".linear1", M4, M4, true }
    t[#t + 1] = { p .. ".linear2", M4, OUT, true }
  end
  merger("visual.merger", Hd)
  for i = 1, v.deepstack do merger("visual.deepstack_mergers_" .. (i - 1), M4) end
  return t
end
local VISION = flax_vision()
local flax_vision_params = 0
for _, m in ipairs(VISION) do
  flax_vision_params = flax_vision_params + (m.n or (m[2] * m[3] + (m[4] and m[3] or 0)))
end

-- The update as a simulator module (models/README.md): the text decoder
-- of the Flax tree (q/k/v Dense with use_bias=True; lm_head a leaf of its
-- own, copied from the tied embedding), the vision leaves, and the batch
-- arrays core/ppo.py's update() holds while it calls _ppo_step.
local function update_module(k, n_img, seq)
  local M = {}
  function M.build(S, run, pol)
    local P = causal.build(S, run, pol)
    local trainable = pol("vision")
    for _, m in ipairs(VISION) do
      if m.n then S:param(m.n, run.param_dtype, trainable(m[1]), m[1])
      else
        layers.new_linear(S, { label = m[1], inn = m[2], out = m[3], bias = m[4],
          dt = run.param_dtype, trainable = trainable(m[1]) })
      end
    end
    return P
  end
  function M.inputs(S, run)
    local ins = {}
    local function arr(rows, n, dt, label)
      ins[#ins + 1] = S:new_tensor(rows * n, dt, label, false, "inputs")
    end
    -- the whole batch, then (a smaller minibatch) each call's slices:
    -- pad_vision keeps the vision tower's fp32 and stages DeepStack's 3
    -- levels unless VLMRL_SKIP_DEEPSTACK; cos/sin: build_mrope's bf16
    -- [3, B, T, 128] tables; tokens and masks int32, old log-probs fp32
    for _, rows in ipairs(run.batch < N and { N, run.batch } or { N }) do
      arr(rows, n_img * OUT, "fp32", "batch.vision.tokens")
      for _ = 1, k.deepstack and v.deepstack or 0 do
        arr(rows, n_img * OUT, "fp32", "batch.vision.deepstack")
      end
      arr(rows, 2 * 3 * seq * model.text.head_dim, "bf16", "batch.cos_sin")
      arr(rows, seq + 1, "int32", "batch.tokens")
      arr(rows, 2 * seq, "int32", "batch.masks")
      arr(rows, seq, "fp32", "rollout.old_logprobs")
    end
    return ins
  end
  M.forward_loss = causal.forward_loss
  return M
end

-- The seed's trainer as it runs: fp32 parameters (params.pkl; Flax Dense
-- param_dtype defaults to float32) computing in bf16 (dtype=jnp.bfloat16:
-- each kernel cast to bf16 at use, kept for the backward as autocast's
-- weight cache is), AdamW with states in the parameters' dtype (optax),
-- the one_hot loss, DeepStack staged, ppo_minibatch 64 (a size: one chunk
-- of min(64, 16) = 16), XLA's default 75 % pool, no donation.
local BASE = { pixels = args.pixels, minibatch = args.minibatch, loss = "one_hot",
  deepstack = true, params = "fp32", optimizer = "adamw", fraction = 0.75, donate = false }

local function image_tokens(pixels)
  return family.image_tokens(model, { count = 1, width = W, height = H, max_pixels = pixels }).tokens
end

local memo = {}
local function simulate(k)
  local key = ("%d/%d/%s/%s/%s/%s/%s"):format(k.pixels, k.minibatch, k.loss, k.deepstack,
    k.params, k.optimizer, k.donate)
  if memo[key] then return memo[key] end
  local n_img = image_tokens(k.pixels)
  local seq = n_img + args.text + args.new - 1 -- tokens[:, :-1]
  local rows = math.min(k.minibatch, N)
  local opt = k.optimizer == "adafactor"
    and { name = "adafactor", state_dtype = "fp32", momentum_dtype = "bf16" }
    or { name = "adamw", state_dtype = k.params }
  local run = spec.normalize({ model = { preset = "qwen3_vl_4b_instruct", text_only = true },
    run = { mode = "train", batch = rows, seq = seq, framework = "jax",
      precision = k.params == "fp32" and { params = "bf16", master = "fp32" } or { params = "bf16" },
      optimizer = opt, loss = k.loss, attention = "eager", xla = { donate = k.donate } } },
    here, registry)
  local text = {}
  for a, b in pairs(run.text) do text[a] = b end
  text.qkv_bias, text.tie = true, false
  run.text = text
  local st = step.simulate(update_module(k, n_img, seq), run)
  st.n_img, st.seq, st.rows = n_img, seq, rows
  memo[key] = st
  return st
end

local gpu = gpus.find("h100-80gb")
local jax = frameworks.get("jax")
local function pool(fraction) return frameworks.usable(jax, gpu, { xla = { mem_fraction = fraction } }) end
local function with(changes)
  local k = {}
  for a, b in pairs(BASE) do k[a] = b end
  for a, b in pairs(changes) do k[a] = b end
  return k
end
local function fits(k) local st = simulate(k) return st.peak <= pool(k.fraction), st end

-- The seed's own knobs (command-line flags, environment, the code change
-- it proposes), each value with its cost: 0 same math, 1 a risk outside
-- the step, 2 changes the training, 3 changes what the model sees.
local KNOBS = {
  { name = "take_along_axis", values = { { cost = 0, set = { loss = "cross_entropy" },
    note = "same math (core/ppo.py:148-151 rewritten)" } } },
  { name = "XLA_PYTHON_CLIENT_MEM_FRACTION", values = {
    { label = ".90", cost = 1, set = { fraction = 0.90 }, note = "less left for cuDNN/NCCL outside XLA" },
    { label = ".95", cost = 2, set = { fraction = 0.95 }, note = "little left outside XLA" } } },
  { name = "--ppo_minibatch", values = {
    { label = "8", cost = 2, set = { minibatch = 8 }, note = "2 optimizer steps per batch" },
    { label = "4", cost = 2, set = { minibatch = 4 }, note = "4 optimizer steps per batch" },
    { label = "2", cost = 2, set = { minibatch = 2 }, note = "8 optimizer steps per batch" },
    { label = "1", cost = 2, set = { minibatch = 1 }, note = "16 optimizer steps per batch" } } },
  { name = "--optimizer adafactor", values = { { cost = 2, set = { optimizer = "adafactor" },
    note = "factored second moment, bf16 momentum" } } },
  { name = "bf16 params", values = { { cost = 2, set = { params = "bf16" },
    note = "params.pkl cast on load; AdamW states follow (small updates lost)" } } },
  { name = "--vlm_max_pixels", values = {
    { label = "120000", cost = 3, set = { pixels = 120000 }, note = "image detail" },
    { label = "65000", cost = 3, set = { pixels = 65000 }, note = "image detail" } } },
  { name = "VLMRL_SKIP_DEEPSTACK=1", values = { { cost = 3, set = { deepstack = false },
    note = "the model loses the DeepStack features it was trained with" } } },
}
local function settings_run(s)
  local ch = {}
  for _, val in pairs(s) do for a, b in pairs(val.set) do ch[a] = b end end
  return with(ch)
end

local base = simulate(BASE)
local base_pool = pool(BASE.fraction)
print(("Qwen3-VL-4B PPO update on JAX: batch %d, one %dx%d image, %d text tokens, %d new tokens")
  :format(N, W, H, args.text, args.new))
print(("image tokens at the pixel cap %d: %d (pixels / 1024); update sequence %d (tokens[:, :-1])")
  :format(args.pixels, base.n_img, base.seq))
print(("device: %s, %.2f GiB; XLA's pool at %s=.75: %.2f GiB")
  :format(gpu.name, gpu.bytes / GiB, jax.env.fraction, base_pool / GiB))
print()
-- the checkpoint's own count (models/qwen3_vl.lua): its vision tower is
-- every part outside the language model
local pc = require("stdlib.params").count(family, cfg, cfg_path)
local ckpt, ckpt_vision = pc.total, 0
for _, part in ipairs(pc.parts) do
  if part.tower ~= "llm" then ckpt_vision = ckpt_vision + part.params end
end
local flax_total = base.param_count
print("parameters on the device (the Flax tree, simulated):")
print(("  text %d (q/k/v biases: use_bias=True; lm_head a copy of the tied embedding)")
  :format(flax_total - flax_vision_params))
print(("  vision %d (the code's own tower: gated MLP with biases, RMSNorm; not run in the update)")
  :format(flax_vision_params))
print(("  total %d = %.2f GB in fp32; the checkpoint's tensors: %d = %.2f GB in fp32,")
  :format(flax_total, flax_total * 4 / GB, ckpt, ckpt * 4 / GB))
print(("  its Qwen3-VL vision tower %d (LayerNorm, fc1/fc2 MLP, pos_embed; the code's key")
  :format(ckpt_vision))
print("  rules for the blocks' MLP and the merger use Qwen2.5-VL names this checkpoint lacks)")
print()
print("assumptions (the JAX profile's, and the seed's code):")
for _, a in ipairs(jax.assumptions) do print("  " .. a) end
print("  " .. xla.donation_note({ donate = false }) .. " (core/ppo.py: @jax.jit, no donate_argnums)")
print("  eager attention as the simulator's ops (the code computes B x heads x T^2 fp32 scores)")
print("  staged vision arrays in the batch; their in-program bf16 casts are not modelled")
print("  the rollout (sampling) is another jitted program and is not simulated here")
print()
print(("%-48s %7s %10s %10s   %s"):format("change (alone)", "img tok", "needs GiB",
  "saves GiB", "verdict in its pool (headroom GiB)"))
local function line(name, k)
  local st = simulate(k)
  local p = pool(k.fraction)
  print(("%-48s %7d %10.2f %10.2f   %s (%+.2f)"):format(name, st.n_img, st.peak / GiB,
    (base.peak - st.peak) / GiB, st.peak <= p and "fits" or "NO", (p - st.peak) / GiB))
end
line("as the code runs it (fp32 params, bf16 compute)", BASE)
line("as the seed says it runs (bf16 model)", with({ params = "bf16" }))
for _, kn in ipairs(KNOBS) do
  for _, val in ipairs(kn.values) do
    line(answer.describe({ { knob = kn, value = val } }), with(val.set))
  end
end
print()
for _, l in ipairs(xla.lines(xla.terms(base))) do print("as the code runs it: " .. l) end
print()

local result = answer.search({
  knobs = KNOBS,
  need = function(s) return simulate(settings_run(s)).peak end,
  budget = function(s) return pool(settings_run(s).fraction) end,
  key = function(s)
    local k = settings_run(s)
    k.fraction = nil
    local parts = {}
    for _, a in ipairs({ "pixels", "minibatch", "loss", "deepstack", "params", "optimizer" }) do
      parts[#parts + 1] = tostring(k[a])
    end
    return table.concat(parts, "/")
  end,
  max_tries = 400,
})

-- The seed's statements, each judged by a simulation or its arithmetic.
local statements = {}
local function judge(claim, right, figure)
  statements[#statements + 1] = { claim = claim, right = right, figure = figure }
end
judge("params.pkl (19.7 GB) means fp32 parameters", true,
  ("the Flax tree's %d parameters x 4 B = %.2f GB"):format(flax_total, flax_total * 4 / GB))
judge("the parameter count is 4,925,110,784", flax_total == 4925110784,
  ("the tree holds %d: its text part (%d) is exact, the vision MLP's gate/up/down "
    .. "biases (%d) are left out"):format(flax_total, flax_total - flax_vision_params,
    flax_total - 4925110784))
local seed_all = with({ pixels = 120000, minibatch = 2, loss = "cross_entropy", deepstack = false,
  optimizer = "adafactor", params = "bf16" })
local sa = simulate(seed_all)
judge("with all its tweaks the peak is typically < 35 GB", sa.peak < 35 * GB,
  ("%.2f GB (%.2f GiB)"):format(sa.peak / GB, sa.peak / GiB))
local ta = simulate(with({ loss = "cross_entropy" }))
judge("take_along_axis avoids materialising the [B,T,V] one_hot", ta.peak < base.peak,
  ("under jit the one_hot chain is fused already: saves %.2f GiB"):format(
    (base.peak - ta.peak) / GiB))
local ds = simulate(with({ deepstack = false }))
judge("VLMRL_SKIP_DEEPSTACK drops 3 fp32 copies in Batch.vision", true,
  ("3 x %d x %d x %d x 4 B = %.2f GiB staged; simulated saving %.2f GiB"):format(N, base.n_img,
    OUT, 3 * N * base.n_img * OUT * 4 / GiB, (base.peak - ds.peak) / GiB))
judge("ppo_minibatch 64 with 16 samples is one chunk of 16", base.rows == 16,
  ("chunks = max(1, 16 // 64) = 1, rows [:64] of 16 = %d"):format(base.rows))
judge("params + AdamW + grads (~78.8 GB) alone edge an 80 GB H100", false,
  ("without donation the step also holds new params and states: %.2f GB of state, "
    .. "twice, plus gradients"):format(base.xla.state / GB))
judge("it has 80 GB to fit in", false, ("JAX's pool is 75%% of %.2f GiB = %.2f GiB")
  :format(gpu.bytes / GiB, base_pool / GiB))

-- Two findings outside the search: the fp32-kept set the issue computed by
-- hand, with and without the pool raised and with donation.
local kept = with({ pixels = 120000, minibatch = 2, loss = "cross_entropy", optimizer = "adafactor" })
local ok75, sk = fits(kept)
local ok95 = fits(with({ pixels = 120000, minibatch = 2, loss = "cross_entropy",
  optimizer = "adafactor", fraction = 0.95 }))
local sd = simulate(with({ pixels = 120000, minibatch = 2, loss = "cross_entropy",
  optimizer = "adafactor", donate = true }))
local notes = {
  ("fp32 kept + 120000 px + minibatch 2 + take_along_axis + Adafactor: %.2f GiB; %s in the .75 "
    .. "pool (%.2f GiB), %s at .95 (%.2f GiB): the fraction alone changes the verdict")
    :format(sk.peak / GiB, ok75 and "fits" or "does not fit", pool(0.75) / GiB,
      ok95 and "fits" or "does not fit", pool(0.95) / GiB),
  ("not one of the seed's knobs: jax.jit(_ppo_step, donate_argnums=0) updates the state in "
    .. "place; the same set then needs %.2f GiB"):format(sd.peak / GiB),
}
table.insert(notes, 1, "cost points: 0 same math, 1 a risk outside the step, 2 changes the "
  .. "training, 3 changes what the model sees")
answer.print({ result = result, cost_unit = "points",
  question = ("the seed's PPO update on one %s, in XLA's pool"):format(gpu.name),
  statements = statements, notes = notes }, print)
