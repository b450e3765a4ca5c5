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
  an_fp8_block_checkpoint_is_priced_as_stored_and_frees_kv_cache = function()
    -- Llama-3-8B shapes cut to 2 layers; quantization_config as
    -- Qwen3-FP8 / DeepSeek-V3 write it (e4m3, 128 x 128 blocks, fp32 scales)
    local function run2(qc)
      return spec.normalize({ model = { preset = "llama_3_8b", overrides = {
        num_hidden_layers = 2, quantization_config = qc } },
        run = { mode = "inference", batch = 1, seq = 1 } }, root .. "/examples/specs/x.yaml",
        require("models.registry"))
    end
    local fp8 = run2({ quant_method = "fp8", fmt = "e4m3", activation_scheme = "dynamic",
      weight_block_size = { 128, 128 } })
    local plain = run2(nil)
    local s = { max_model_len = 8192, max_num_seqs = 64, max_num_batched_tokens = 4096,
      enforce_eager = true }
    local g = gpus.get("h100")
    local q, u = serving.estimate(s, fp8, g, "x"), serving.estimate(s, plain, g, "x")
    -- per layer, out x in: q and o 4096 x 4096, k and v 1024 x 4096, gate
    -- and up 14336 x 4096, down 4096 x 14336; one byte per weight plus an
    -- fp32 scale per 128 x 128 block (ceil(out/128) x ceil(in/128))
    local fp8_lin = 2 * (4096 * 4096 + 4 * 32 * 32) + 2 * (1024 * 4096 + 4 * 8 * 32)
      + 2 * (14336 * 4096 + 4 * 112 * 32) + (4096 * 14336 + 4 * 32 * 112)
    local bf16_lin = 2 * (2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096)
    -- two bf16 norms per layer; embedding and LM head 128256 x 4096 bf16
    -- (128256 is a multiple of 64); the final norm
    local rest = 2 * 4096 * 2
    local outer = 2 * 128256 * 4096 * 2 + 4096 * 2
    T.eq(q.figures.weights_bytes, 2 * (fp8_lin + rest) + outer)
    T.eq(u.figures.weights_bytes, 2 * (bf16_lin + rest) + outer)
    -- the KV budget gains exactly the bytes the weights shed
    T.eq(q.figures.available_kv_bytes - u.figures.available_kv_bytes, 2 * (bf16_lin - fp8_lin))
    T.eq(q.figures.num_blocks, q.figures.available_kv_bytes // (2 * 16 * 8 * 128 * 2 * 2))
    for _, w in ipairs(q.warnings) do T.ok(not w:find("quantization"), w) end
    T.ok(table.concat(q.assumptions, "\n"):find("quantization fp8 %(the checkpoint's"))
    -- a --quantization that contradicts the checkpoint is refused, as vLLM does
    T.raises(function() serving.estimate({ quantization = "awq", max_model_len = 8192 }, fp8, g,
      "x") end, "does not match the checkpoint's quantization_config (fp8)")
    -- a method stdlib/quant does not model is refused, not priced in bf16
    T.raises(function() run2({ quant_method = "hqq" }) end, "'hqq' is not modelled")
  end,
  a_gptq_checkpoint_is_priced_per_rank_shard = function()
    local r = spec.normalize({ model = { preset = "llama_3_8b", overrides = {
      num_hidden_layers = 2, quantization_config = { quant_method = "gptq", bits = 4,
        group_size = 128, desc_act = false } } },
      run = { mode = "inference", batch = 1, seq = 1 } }, root .. "/examples/specs/x.yaml",
      require("models.registry"))
    local e = serving.estimate({ quantization = "gptq_marlin", tensor_parallel_size = 2,
      max_model_len = 8192, enforce_eager = true }, r, gpus.get("h100"), "x")
    -- GPTQ 4-bit, group 128, out x in per rank: qweight in*out/2, qzeros
    -- 4 * groups * out/8, fp16 scales 2 * groups * out, g_idx 4 * in
    local function g(out, inn)
      return inn * out // 2 + 4 * (inn // 128) * (out // 8) + 2 * (inn // 128) * out + 4 * inn
    end
    -- column-parallel q 2048 x 4096, k/v 512 x 4096, gate/up 7168 x 4096;
    -- row-parallel o 4096 x 2048, down 4096 x 7168
    local lin = g(2048, 4096) + 2 * g(512, 4096) + g(4096, 2048) + 2 * g(7168, 4096)
      + g(4096, 7168)
    T.eq(e.figures.weights_bytes, 2 * (lin + 2 * 4096 * 2) + 2 * (128256 // 2) * 4096 * 2
      + 4096 * 2)
  end,
  a_serving_estimate_needs_a_gpu = function()
    local r = run_of("llama_3_8b")
    T.raises(function() serving.estimate({}, r, nil, "x") end, "--gpu NAME")
  end,
}
