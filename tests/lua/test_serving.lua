-- stdlib/serving: vLLM's start-up accounting. Weights per rank and KV pages
-- are checked against sums written out by hand from the config shapes (and
-- the published parameter count); the block arithmetic against vLLM's
-- formulas (kv_cache_utils.py) applied to the figures.
local serving = require("stdlib.serving")
local gpus = require("stdlib.gpus")
local spec = require("stdlib.spec")
local vram = require("vram")

local root = vram.share_dir

local function run_of(preset)
  return spec.normalize({ model = { preset = preset }, run = { mode = "inference", batch = 1,
    seq = 1 } }, root .. "/examples/specs/x.yaml", require("models.registry"))
end

return {
  unquantized_tp1_weights_are_the_published_count_in_bf16 = function()
    local r = run_of("qwen2_5_7b_instruct")
    -- 7,615,616,512 parameters (Hub safetensors metadata) x 2 bytes; the
    -- vocabulary 152064 is already a multiple of 64
    T.eq(serving.weights(r.text, 1, "bf16"), 7615616512 * 2)
  end,
  tensor_parallel_weights_split_linears_and_replicate_norms = function()
    local r = run_of("llama_3_8b")
    -- per layer: q 4096x2048, k and v 4096x512 each, o 2048x4096, MLP
    -- 3 x 4096x7168, two norms of 4096 (replicated); embedding and LM head
    -- 128256/2 rows of 4096; the final norm
    local per = 4096 * 2048 + 2 * 4096 * 512 + 2048 * 4096 + 3 * 4096 * 7168 + 2 * 4096
    local params = 32 * per + 2 * (128256 // 2) * 4096 + 4096
    T.eq(serving.weights(r.text, 2, "bf16"), params * 2)
  end,
  kv_pages_and_blocks_follow_vllm = function()
    local r = run_of("llama_3_8b")
    local g = gpus.get("h100")
    local e = serving.estimate({ gpu_memory_utilization = 0.85, max_model_len = 8192,
      max_num_seqs = 64, max_num_batched_tokens = 4096, tensor_parallel_size = 2,
      enforce_eager = true }, r, g, "x")
    local f = e.figures
    -- 2 (K and V) x 16 tokens x 4 KV heads per rank x 128 x 2 bytes
    T.eq(f.page_bytes, 2 * 16 * 4 * 128 * 2)
    T.eq(f.bytes_per_token, 2 * 4 * 128 * 2 * 32)
    T.eq(f.requested_bytes, math.ceil(g.bytes * 0.85))
    T.eq(f.available_kv_bytes, f.requested_bytes - f.weights_bytes - f.profile_peak_bytes)
    T.eq(f.num_blocks, f.available_kv_bytes // (f.page_bytes * 32))
    T.eq(f.kv_tokens, f.num_blocks * 16)
    T.eq(f.max_concurrency, f.num_blocks / (8192 // 16))
    T.eq(f.cuda_graph_bytes, 0, "enforce-eager captures no graphs")
    T.ok(e.fits)
  end,
  fp8_kv_cache_halves_the_page = function()
    local r = run_of("qwen2_5_7b_instruct")
    local e = serving.estimate({ kv_cache_dtype = "fp8", max_model_len = 32768 }, r,
      gpus.get("h100"), "x")
    -- 28 layers x 4 KV heads x 128 x 2 (K, V) x 1 byte
    T.eq(e.figures.bytes_per_token, 28 * 4 * 128 * 2)
  end,
  capture_sizes_are_vllms_default_list = function()
    local s = serving.capture_sizes(128)
    T.eq(#s, 35)
    T.eq(s[1], 1)
    T.eq(s[4], 8)
    T.eq(s[#s], 256)
    local big = serving.capture_sizes(1024)
    T.eq(big[#big], 512)
    T.eq(#big, 3 + 31 + 17)
  end,
  too_long_a_context_is_refused_as_vllm_does = function()
    local r = run_of("llama_3_8b")
    local e = serving.estimate({ gpu_memory_utilization = 0.2, max_model_len = 1000000 }, r,
      gpus.get("rtx4090"), "x")
    T.eq(e.fits, false)
  end,
  a_mixture_of_experts_model_is_refused_not_priced_dense = function()
    local r = run_of("qwen3_30b_a3b")
    T.raises(function() serving.estimate({ max_model_len = 4096 }, r,
      gpus.get("h100"), "x") end, "priced for dense decoders so far")
  end,
  a_vlm_is_refused_not_priced_without_its_vision_tower = function()
    local r = run_of("qwen2_vl_2b_instruct")
    T.raises(function() serving.estimate({ max_model_len = 4096 }, r,
      gpus.get("h100"), "x") end, "a vision tower")
  end,
  a_serving_estimate_needs_a_gpu = function()
    local r = run_of("llama_3_8b")
    T.raises(function() serving.estimate({}, r, nil, "x") end, "--gpu NAME")
  end,
}
