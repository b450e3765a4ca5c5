-- What vLLM prints at start-up, before renting the GPU: weights per rank,
-- the activation peak of its profile run, CUDA-graph memory and the KV
-- cache it can hold (tokens, and concurrent sequences of max_model_len).
--
-- The accounting follows vLLM V1 (vllm/v1/worker/gpu_worker.py
-- determine_available_memory; vllm/v1/core/kv_cache_utils.py;
-- vllm/v1/kv_cache_interface.py):
--   requested = ceil(total * gpu_memory_utilization)
--   available_kv = requested - (weights + torch activation peak of the
--                  profile run + non-torch increase)
--   page (one block of one layer) = 2 * block_size * kv_heads_per_rank *
--                  head_size * kv dtype bytes      (FullAttentionSpec)
--   num_blocks = available_kv // (page * layers)
--   tokens = num_blocks * block_size
--   max concurrency = num_blocks / ceil(max_model_len / block_size)
-- Weights, pages and blocks are exact for a dense decoder, unquantized or
-- with a quantization_config stdlib/quant.lua reads (stored bytes); the
-- activation peak and CUDA-graph pool are estimates from the op shapes
-- (labelled), since vLLM measures them on the device.
local vram = require("vram")
local errors = require("stdlib.errors")

local M = {}

local DTYPE = { auto = nil, bfloat16 = "bf16", bf16 = "bf16", float16 = "fp16", half = "fp16",
  fp16 = "fp16", float32 = "fp32", float = "fp32", fp32 = "fp32" }
local KV = { fp8 = "fp8_e4m3", fp8_e4m3 = "fp8_e4m3", fp8_e5m2 = "fp8_e5m2", fp8_inc = "fp8_e4m3",
  bfloat16 = "bf16", float16 = "fp16", half = "fp16" }

local function cdiv(a, b) return (a + b - 1) // b end

-- vLLM's default capture sizes (config/compilation.py): 1, 2, 4, then every
-- 8 up to 256, then every 16, up to min(2 * max_num_seqs, 512).
function M.capture_sizes(max_num_seqs, cap)
  local top = cap or math.min(2 * max_num_seqs, 512)
  local out = {}
  for _, s in ipairs({ 1, 2, 4 }) do if s <= top then out[#out + 1] = s end end
  for s = 8, math.min(248, top), 8 do out[#out + 1] = s end
  for s = 256, top, 16 do out[#out + 1] = s end
  return out
end

-- Weight bytes of one tensor-parallel rank (vLLM's column/row-parallel
-- linears, vocab-parallel embedding padded to 64 rows per shard, replicated
-- norms, K/V heads replicated when fewer than the ranks). quant: a dtype
-- for every projection (--quantization on an unquantized checkpoint);
-- ckpt: a stdlib/quant description of the checkpoint's quantization_config,
-- whose projections vLLM keeps as stored (each tensor of the rank's shard,
-- scales included; embeddings, norms and skipped modules in dt).
function M.weights(t, tp, dt, quant, ckpt)
  local H, hd, L = t.hidden, t.head_dim, t.layers
  local heads_r = t.heads // tp
  local kv_r = math.max(1, t.kv_heads // tp)
  local I_r = t.intermediate // tp
  local lin_dt = quant or dt
  local Q = ckpt and require("stdlib.quant")
  local function lin(i, o, group, leaf)
    if not (ckpt and Q.applies(ckpt, group, leaf)) then return vram.bytes(lin_dt, i, o) end
    local sum = 0
    for _, b in ipairs(ckpt.tensors(o, i, leaf)) do sum = vram.add(sum, b) end
    return sum
  end
  local function vec(n) return vram.bytes(dt, n) end
  local per = lin(H, heads_r * hd, "self_attn", "q_proj") + lin(H, kv_r * hd, "self_attn",
    "k_proj") + lin(H, kv_r * hd, "self_attn", "v_proj") + lin(heads_r * hd, H, "self_attn",
    "o_proj") + lin(H, I_r, "mlp", "gate_proj") + lin(H, I_r, "mlp", "up_proj")
    + lin(I_r, H, "mlp", "down_proj") + (t.norms == "sandwich" and 4 or 2) * vec(H)
  if t.qkv_bias then per = per + vec((heads_r + 2 * kv_r) * hd) end
  if t.o_bias then per = per + vec(H) end
  if t.qk_norm == "full" then per = per + vec((heads_r + kv_r) * hd)
  elseif t.qk_norm then per = per + 2 * vec(hd) end
  if t.sinks then per = per + vec(heads_r) end
  if t.mlp_bias then per = per + 2 * vec(I_r) + vec(H) end
  local vocab_pad = cdiv(t.vocab, 64 * tp) * 64 * tp
  local embed = vram.bytes(dt, vocab_pad // tp, H)
  local head = t.tie and 0 or embed
  return per * L + embed + head + vec(H), vocab_pad
end

-- Torch activation peak of one forward of `tokens` tokens (the profile run)
-- on one rank: the residual stream and the layer input, plus the larger of
-- the attention block (qkv, attention output) and the MLP block (gate_up,
-- activation output), each a tokens x width tensor in the compute dtype.
-- Assumption: vLLM's fused kernels keep no other tensor of that size live.
function M.activations(t, tp, dt, tokens)
  local hd = t.head_dim
  local heads_r, kv_r = t.heads // tp, math.max(1, t.kv_heads // tp)
  local stream = 2 * vram.bytes(dt, tokens, t.hidden)
  local attn = vram.bytes(dt, tokens, (heads_r + 2 * kv_r) * hd) + vram.bytes(dt, tokens,
    heads_r * hd)
  local I_r = t.intermediate // tp
  local mlp = vram.bytes(dt, tokens, 2 * I_r) + vram.bytes(dt, tokens, I_r)
  return stream + math.max(attn, mlp)
end

-- The sampler's warm-up on max_num_seqs rows: fp32 logits over the padded
-- vocabulary and one probability tensor of the same size (assumed).
function M.sampler(rows, vocab_pad)
  return 2 * vram.bytes("fp32", rows, vocab_pad)
end

-- s: the serve table; run: a normalized run (the family's description of
-- the model in run.text, a quantized checkpoint in run.quant.ckpt); gpu: a
-- stdlib/gpus entry. Returns the figures and notes.
function M.estimate(s, run, gpu, where)
  local t = run.text or errors.input(where, "model", "serving is priced for decoder models")
  local out = { assumptions = {}, warnings = {} }
  local function assume(m) out.assumptions[#out.assumptions + 1] = m end
  local function warn(m) out.warnings[#out.warnings + 1] = m end
  if not gpu then errors.usage("a vLLM estimate needs --gpu NAME (vLLM sizes its KV cache to it)") end
  -- the shapes M.weights and M.activations know; others are refused rather
  -- than priced as a dense decoder
  local unmodelled = (t.moe and "mixture-of-experts layers") or (t.mla and "multi-head latent "
    .. "attention") or (t.factor and "factorized embeddings")
    or ((run.vlm or run.vision) and "a vision tower (its weights and encoder profile)")
  if unmodelled then
    errors.input(where, "model", ("vLLM serving is priced for dense decoders so far; this %s "
      .. "model has %s"):format(tostring(t.model_type), unmodelled))
  end
  local tp = s.tensor_parallel_size or 1
  if t.heads % tp ~= 0 then
    errors.input(where, "tensor-parallel-size", ("%d does not divide the %d attention heads"):format(
      tp, t.heads))
  end
  if t.intermediate % tp ~= 0 then
    errors.input(where, "tensor-parallel-size", ("%d does not divide intermediate_size %d"):format(
      tp, t.intermediate))
  end
  local dt = DTYPE[s.dtype or "auto"]
  if not dt then
    local c = t.torch_dtype
    dt = DTYPE[c or "bfloat16"] or "bf16"
    if dt == "fp32" then
      dt = "bf16"
      assume("dtype auto: an fp32 checkpoint is served in bf16 (vLLM casts fp32 to the "
        .. "half type)")
    end
    if not c then assume("dtype auto: the config names no torch_dtype; bf16 assumed") end
  end
  local quant, ckpt = nil, run.quant and run.quant.ckpt
  if ckpt then
    -- vLLM reads the method from the checkpoint; --quantization may only
    -- name it or its Marlin kernel (ModelConfig._verify_quantization)
    local ok = { [ckpt.method] = true, [ckpt.method .. "_marlin"] = true }
    if s.quantization and not ok[s.quantization] then
      errors.input(where, "quantization", ("'%s' does not match the checkpoint's "
        .. "quantization_config (%s); vLLM refuses to start"):format(s.quantization, ckpt.method))
    end
    assume(("quantization %s (the checkpoint's quantization_config): projections priced as "
      .. "stored (%s, scales, zero points and g_idx per tensor, each rank's shard), embeddings "
      .. "and norms in %s; a repacking after load (Marlin kernels) is not modelled"):format(ckpt.method, tostring(ckpt.store), dt))
  elseif s.quantization then
    local q = ({ fp8 = "fp8_e4m3", fbgemm_fp8 = "fp8_e4m3", awq = "int4", awq_marlin = "int4",
      gptq = "int4", gptq_marlin = "int4", bitsandbytes = "nf4", mxfp4 = "mxfp4",
      experts_int8 = "int8" })[s.quantization]
    if q then
      quant = q
      assume(("quantization %s: linear weights priced as %s; group scales and zeros not "
        .. "counted"):format(s.quantization, q))
    else
      warn("quantization " .. s.quantization .. ": read from the checkpoint's "
        .. "quantization_config, which is not modelled here; priced unquantized")
    end
  end
  local weights, vocab_pad = M.weights(t, tp, dt, quant, ckpt)
  if s.cpu_offload_gb then
    local off = math.floor(s.cpu_offload_gb * (1 << 30))
    weights = math.max(0, weights - off)
    assume("cpu-offload-gb: that many GiB of weights live on the host")
  end
  local big = gpu.bytes >= 70 * (1 << 30)
  local seqs = s.max_num_seqs or (big and 1024 or 256)
  local btok = s.max_num_batched_tokens or (big and 8192 or 2048)
  local defaulted = {}
  if not s.max_num_seqs then defaulted[#defaulted + 1] = "max-num-seqs " .. seqs end
  if not s.max_num_batched_tokens then
    defaulted[#defaulted + 1] = "max-num-batched-tokens " .. btok
  end
  if #defaulted > 0 then
    assume(("vLLM V1's default for `vllm serve` on a GPU %s 70 GiB: %s (engine/arg_utils.py)")
      :format(big and "of at least" or "under", table.concat(defaulted, ", ")))
  end
  local mml = s.max_model_len
  if not mml then
    mml = t.max_positions
    if not mml then errors.input(where, "max-model-len", "is not set and the config has no "
      .. "max_position_embeddings") end
    assume("max-model-len: the config's max_position_embeddings (" .. mml .. ")")
  end
  local block = s.block_size or 16
  if not s.block_size then assume("block-size: 16 (vLLM's default on CUDA)") end
  local kvdt = KV[s.kv_cache_dtype or "auto"] or dt
  if s.kv_cache_dtype and s.kv_cache_dtype ~= "auto" and not KV[s.kv_cache_dtype] then
    errors.input(where, "kv-cache-dtype", "unknown '" .. s.kv_cache_dtype .. "' (auto, fp8, "
      .. "fp8_e4m3, fp8_e5m2)")
  end
  if t.window_declared and not s.disable_sliding_window then
    warn("the model declares a sliding window: vLLM may keep only the window for those layers "
      .. "(SlidingWindowSpec); priced as full attention (fewer tokens than vLLM may report)")
  end
  local act = M.activations(t, tp, dt, btok)
  local samp = M.sampler(math.min(seqs, btok), vocab_pad)
  local profile = act + samp
  assume(("activation profile: a forward of max-num-batched-tokens = %d tokens (residual, "
    .. "layer input and the larger of the attention and MLP intermediates) plus the sampler on "
    .. "%d rows (fp32 logits and probabilities); an estimate, vLLM measures it"):format(btok,
      math.min(seqs, btok)))
  assume("non-torch allocations after start-up (cuBLAS workspaces, NCCL buffers with TP) are "
    .. "not included; vLLM measures and subtracts them")
  local graphs, sizes = 0, {}
  if not s.enforce_eager then
    sizes = M.capture_sizes(seqs, s.cuda_graph_max)
    graphs = M.activations(t, tp, dt, sizes[#sizes])
    assume(("CUDA graphs: %d capture sizes (1 .. %d); their shared pool estimated as the "
      .. "intermediates of the largest (vLLM logs the measured figure after capture)"):format(
        #sizes, sizes[#sizes]))
  end
  local total = gpu.bytes
  local requested = math.ceil(total * (s.gpu_memory_utilization or 0.9))
  if not s.gpu_memory_utilization then assume("gpu-memory-utilization: 0.9 (vLLM's default)") end
  local available = s.kv_cache_memory_bytes or (requested - weights - profile)
  local kvh = math.max(1, t.kv_heads // tp)
  local page = 2 * block * kvh * t.head_dim * vram.bytes(kvdt, 1)
  local per_block = page * t.layers
  local blocks = available > 0 and available // per_block or 0
  if s.num_gpu_blocks_override then blocks = s.num_gpu_blocks_override end
  local per_req = cdiv(mml, block)
  out.figures = {
    gpu_bytes = total, requested_bytes = requested, tensor_parallel_size = tp,
    weights_bytes = weights, activation_bytes = act, sampler_bytes = samp,
    profile_peak_bytes = profile, cuda_graph_bytes = graphs, cuda_graph_sizes = #sizes,
    available_kv_bytes = available, kv_dtype = kvdt, block_size = block,
    page_bytes = page, bytes_per_token = page // block * t.layers, num_blocks = blocks,
    kv_tokens = blocks * block, max_model_len = mml,
    max_concurrency = blocks / per_req, max_num_seqs = seqs, max_num_batched_tokens = btok,
    headroom_bytes = total - requested,
  }
  if available <= 0 or blocks < per_req then
    out.fits = false
    warn(("not enough KV cache for one request of max-model-len %d: vLLM refuses to start "
      .. "(raise gpu-memory-utilization or lower max-model-len)"):format(mml))
  else
    out.fits = true
  end
  if graphs > total - requested then
    warn("the CUDA-graph pool estimate exceeds the memory gpu-memory-utilization leaves free")
  end
  return out
end

function M.text(e)
  local f = e.figures
  local G = function(b) return vram.fmt(b, "GiB") end
  local out = {
    ("vLLM on %d GPU(s) per replica, per rank (tensor-parallel-size %d):"):format(
      f.tensor_parallel_size, f.tensor_parallel_size),
    ("  memory requested (gpu-memory-utilization): %s of %s"):format(G(f.requested_bytes),
      G(f.gpu_bytes)),
    ("  model weights:            %s  [%d B]"):format(G(f.weights_bytes), f.weights_bytes),
    ("  activation profile peak:  %s  (activations %s + sampler %s)"):format(
      G(f.profile_peak_bytes), G(f.activation_bytes), G(f.sampler_bytes)),
    ("  CUDA graphs (%d sizes):   %s  (outside the requested share, as vLLM V1 <= 0.11)"):format(
      f.cuda_graph_sizes, G(f.cuda_graph_bytes)),
    ("  Available KV cache memory: %s"):format(G(math.max(0, f.available_kv_bytes))),
    ("  KV cache: %s, block %d tokens, %d bytes per token, %d blocks"):format(f.kv_dtype,
      f.block_size, f.bytes_per_token, f.num_blocks),
    ("  GPU KV cache size: %d tokens"):format(f.kv_tokens),
    ("  Maximum concurrency for %d tokens per request: %.2fx"):format(f.max_model_len,
      f.max_concurrency),
  }
  for _, w in ipairs(e.warnings) do out[#out + 1] = "  WARNING: " .. w end
  for _, a in ipairs(e.assumptions) do out[#out + 1] = "  assumption: " .. a end
  return table.concat(out, "\n")
end

return M
