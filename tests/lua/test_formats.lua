-- stdlib/formats: each example in examples/formats/ translated to a run
-- spec, checked field by field against what the file says (the expected
-- values are read off the example files and the tools' documented
-- defaults, not off vramlua's output).
local vram = require("vram")
local formats = require("stdlib.formats")
local registry = require("models.registry")

local dir = vram.share_dir .. "/examples/formats/"
local opts = { presets = registry.PRESETS, preset_path = registry.preset_path }

local function tr(name, extra)
  local o = { presets = opts.presets, preset_path = opts.preset_path }
  for k, v in pairs(extra or {}) do o[k] = v end
  local t = formats.translate(dir .. name, o)
  formats.resolve_model(t, o)
  return t
end

local function keys(list)
  local out = {}
  for _, n in ipairs(list) do out[n.key] = n.value end
  return out
end

local function has(list, fragment)
  for _, s in ipairs(list) do if s:find(fragment, 1, true) then return true end end
  return false
end

return {
  llamafactory_lora_sft_maps_every_memory_key = function()
    local t = tr("llamafactory_qwen2_5_7b_lora_sft.yaml")
    T.eq(t.format, "llamafactory")
    T.eq(t.model.source, "preset")
    T.eq(t.spec.model, { preset = "qwen2_5_7b_instruct" })
    local r = t.spec.run
    T.eq(r.mode, "train")
    T.eq(r.batch, 2, "per_device_train_batch_size")
    T.eq(r.grad_accum, 8, "gradient_accumulation_steps")
    T.eq(r.seq, 4096, "cutoff_len")
    T.eq(r.lora, { rank = 16, alpha = 32, targets = "all-linear" }, "lora_rank/alpha/target all")
    T.eq(r.precision, { params = "bf16" }, "bf16 LoRA: base weights in bf16")
    T.eq(r.attention, "flash", "flash_attn: fa2")
    T.eq(r.grad_checkpointing, "full", "LLaMA-Factory checkpoints unless disabled")
    T.eq(r.optimizer, nil, "no optim key: the Trainer's default AdamW")
    T.eq(#t.not_understood, 0, "every key known")
    T.eq(t.spec.parallel, nil)
  end,
  llamafactory_dpo_reads_the_deepspeed_file_beside_it = function()
    local t = tr("llamafactory_llama3_full_dpo_ds3.yaml")
    local r = t.spec.run
    T.eq(t.spec.model, { preset = "llama_3_8b" }, "the Instruct hub id resolves to the preset")
    T.eq(r.batch, 2, "chosen + rejected of per_device_train_batch_size 1")
    T.eq(r.grad_accum, 4)
    T.eq(r.seq, 2048)
    T.eq(r.precision, { master = "fp32", compute = "bf16" }, "full: trainable upcast to fp32")
    T.eq(r.lora, nil)
    T.eq(t.spec.parallel.zero, 3, "zero_optimization.stage")
    -- "auto" buckets filled from hidden_size 4096 as the HF integration does
    T.eq(t.spec.parallel.buckets.reduce_bucket_size, 4096 * 4096)
    T.eq(t.spec.parallel.buckets.stage3_prefetch_bucket_size, 4096 * 4096 * 9 // 10)
    T.eq(t.spec.parallel.buckets.stage3_param_persistence_threshold, 40960)
    T.eq(t.spec.parallel.buckets.stage3_max_live_parameters, 1000000000)
    T.ok(has(t.assumptions, "per-rank budgets for zero=3"), "ZeRO-3 gets per-rank budgets")
    T.ok(has(t.warnings, "reference model"), "DPO's reference copy is a labelled warning")
    T.eq(#t.not_understood, 0)
  end,
  axolotl_qlora = function()
    local t = tr("axolotl_mistral_qlora.yml")
    T.eq(t.format, "axolotl")
    T.eq(t.spec.model, { preset = "mistral_7b_v0_1" })
    local r = t.spec.run
    T.eq(r.batch, 2, "micro_batch_size")
    T.eq(r.grad_accum, 4)
    T.eq(r.seq, 4096, "sequence_len")
    T.eq(r.precision, { params = "bf16", weights = "nf4_dq", kbit_prepare = true },
      "bf16 auto + load_in_4bit, prepared for k-bit training")
    T.eq(r.lora, { rank = 32, alpha = 16, targets = "all-linear", dropout = 0.05 },
      "lora_r, lora_target_linear, lora_dropout")
    T.eq(r.optimizer, { name = "adam8bit", paged = true }, "paged_adamw_8bit")
    T.eq(r.grad_checkpointing, "full")
    T.eq(r.attention, "flash", "flash_attention: true")
    T.eq(#t.not_understood, 0)
  end,
  trl_sft = function()
    local t = tr("trl_sft_qwen2_5_1_5b.yaml")
    T.eq(t.format, "trl")
    T.eq(t.spec.model, { preset = "qwen2_5_1_5b_instruct" }, "the base hub id shares the preset")
    local r = t.spec.run
    T.eq(r.mode, "train")
    T.eq(r.batch, 4)
    T.eq(r.grad_accum, 8)
    T.eq(r.seq, 2048, "max_length")
    T.eq(r.grad_checkpointing, "full")
    -- dtype auto: the preset's torch_dtype bfloat16, bf16 on by default
    T.eq(r.precision, { params = "bf16" })
    T.ok(has(t.assumptions, "SFT"), "the guessed trainer is said")
  end,
  trl_dpo_doubles_the_rows = function()
    local t = tr("trl_dpo_qwen2_5_1_5b.yaml")
    local r = t.spec.run
    T.eq(r.batch, 4, "2 x per_device_train_batch_size")
    T.eq(r.seq, 1024)
    T.eq(r.precision, { params = "bf16" })
    T.ok(has(t.warnings, "reference model"))
  end,
  trl_grpo_with_colocated_vllm = function()
    local t = tr("trl_grpo_colocate.yaml")
    local r = t.spec.run
    T.eq(r.mode, "grpo")
    T.eq(r.batch, 8, "scored in chunks of per_device_train_batch_size")
    -- vLLM generates: the training GPU scores prompt + completion rows
    -- (max_prompt_length 512 + max_completion_length 1024), one token past
    -- a prefill of 1535
    T.eq(r.seq, 512 + 1024 - 1)
    T.eq(r.rl, { new_tokens = 1, minibatch = 8, reference = true, value = false }, "beta 0.04")
    T.eq(r.precision, { params = "bf16" }, "dtype bfloat16 with bf16")
    T.eq(t.spec.serve, { engine = "vllm", colocate = true, gpu_memory_utilization = 0.3,
      max_model_len = 1536, tensor_parallel_size = 1, max_num_seqs = 32 })
    T.eq(#t.not_understood, 0)
  end,
  trl_format_variant_names_the_trainer = function()
    local t = tr("trl_sft_qwen2_5_1_5b.yaml", { format = "trl-dpo" })
    T.eq(t.spec.run.batch, 8, "DPO: 2 x 4 rows")
  end,
  hf_training_arguments_json = function()
    local t = tr("hf_training_args_llama3.json")
    T.eq(t.format, "hf")
    local r = t.spec.run
    T.eq(r.batch, 1)
    T.eq(r.grad_accum, 16)
    T.eq(r.seq, 2048, "block_size")
    T.eq(r.precision, { params = "bf16" }, "torch_dtype bfloat16 + bf16")
    T.eq(r.optimizer, { name = "adafactor" })
    T.eq(r.grad_checkpointing, "full")
    T.eq(#t.not_understood, 0)
  end,
  deepspeed_alone_needs_model_and_seq_and_gives_world_size = function()
    T.raises(function() tr("deepspeed_zero2_offload.json") end, "--seq N")
    local t = tr("deepspeed_zero2_offload.json", { seq = 1024, model = "Qwen/Qwen2.5-1.5B" })
    local r = t.spec.run
    T.eq(r.batch, 4)
    T.eq(r.grad_accum, 4)
    T.eq(r.seq, 1024)
    T.eq(t.world_size, 4, "train_batch_size 64 / (4 x 4)")
    T.eq(r.precision, { master = "fp32", compute = "bf16" })
    T.eq(r.optimizer.name, "adamw")
    T.eq(t.spec.parallel.zero, 2)
    T.eq(t.spec.parallel.offload, { optimizer = "cpu" })
    T.eq(t.spec.parallel.world_size, 4)
    T.eq(t.spec.parallel.buckets, { allgather_bucket_size = 200000000,
      reduce_bucket_size = 200000000, overlap_comm = true, contiguous_gradients = true })
  end,
  accelerate_fsdp = function()
    local t = tr("accelerate_fsdp.yaml", { seq = 512, model = "Qwen/Qwen2.5-1.5B" })
    T.eq(t.format, "accelerate")
    T.eq(t.world_size, 4, "num_processes")
    T.eq(t.spec.parallel.fsdp, "full_shard")
    T.eq(t.spec.run.grad_checkpointing, "full", "fsdp_activation_checkpointing")
    T.eq(t.spec.run.precision, { master = "fp32", compute = "bf16" })
    T.eq(t.spec.run.batch, 1)
    T.eq(#t.not_understood, 0)
    T.ok(has(t.assumptions, "per-rank budgets for world_size=4, fsdp=full_shard"))
  end,
  vllm_command_line = function()
    local t = tr("vllm_serve_qwen2_5_7b.sh")
    T.eq(t.format, "vllm")
    T.eq(t.spec.model, { preset = "qwen2_5_7b_instruct" })
    T.eq(t.spec.serve, { engine = "vllm", gpu_memory_utilization = 0.9, max_model_len = 32768,
      max_num_seqs = 128, max_num_batched_tokens = 8192, kv_cache_dtype = "fp8",
      block_size = 16 })
    T.eq(#t.not_understood, 0)
  end,
  vllm_engine_yaml = function()
    local t = tr("vllm_engine_llama3_tp2.yaml")
    T.eq(t.spec.serve, { engine = "vllm", tensor_parallel_size = 2, gpu_memory_utilization = 0.85,
      max_model_len = 8192, max_num_seqs = 64, max_num_batched_tokens = 4096,
      enforce_eager = true, dtype = "bfloat16" })
  end,
  unknown_keys_are_listed_never_dropped_or_fatal = function()
    if not T.tmpfile then return end
    local p = T.tmpfile("stage: sft\nmodel_name_or_path: Qwen/Qwen2.5-1.5B\nfrobnicate: 3\n"
      .. "per_device_train_batch_size: 1\nmystery_knob: {a: 1}\n")
    local t = formats.translate(p, { format = "llamafactory" })
    local nu = keys(t.not_understood)
    T.eq(nu.frobnicate, "3")
    T.eq(nu.mystery_knob, '{"a":1}')
  end,
  explain_prints_a_run_spec_that_loads = function()
    local t = tr("axolotl_mistral_qlora.yml")
    local text = formats.explain(t)
    T.ok(text:find("\nrun:\n  mode: train\n  batch: 2\n  seq: 4096\n", 1, true), text)
    local back = vram.yaml.decode(text)
    T.eq(back.run, t.spec.run, "the YAML reads back as the same run")
    T.eq(back.model, t.spec.model)
  end,
  bad_values_name_the_file_and_key = function()
    if not T.tmpfile then return end
    local p = T.tmpfile("stage: sft\nper_device_train_batch_size: two\n")
    T.raises(function() formats.translate(p, { format = "llamafactory" }) end,
      p .. ":2: per_device_train_batch_size: must be an integer, got two")
  end,
  axolotl_keys_of_older_and_newer_configs = function()
    if not T.tmpfile then return end
    local p = T.tmpfile("base_model: Qwen/Qwen2.5-1.5B\nmicro_batch_size: 2\nbatch_size: 16\n"
      .. "max_packed_sequence_len: 500_000\ngptq: true\nadapter: lora\nlora_r: 8\n"
      .. "attn_implementation: kernels-community/vllm-flash-attn3\nwandb_project: x\n"
      .. "swanlab_mode: cloud\n")
    local t = formats.translate(p, { format = "axolotl" })
    local r = t.spec.run
    T.eq(r.grad_accum, 8, "batch_size 16 / micro_batch_size 2")
    T.eq(r.seq, 500000, "500_000 as Python and YAML 1.1 read it")
    T.eq(r.precision.weights, "int4", "gptq")
    T.eq(r.attention, "flash", "a hub flash kernel")
    T.eq(#t.not_understood, 0, "tracking prefixes are ignored")
  end,
  ddp_is_said_apart_from_sharding = function()
    if not T.tmpfile then return end
    local p = T.tmpfile("distributed_type: MULTI_GPU\nnum_processes: 4\nmixed_precision: bf16\n")
    local t = formats.translate(p, { format = "accelerate", seq = 256 })
    T.eq(t.world_size, 4)
    T.ok(has(t.assumptions, "per-rank budgets for world_size=4"), "DDP: per-rank, buckets priced")
    T.ok(not has(t.warnings, "per-rank sharding"))
    local one = T.tmpfile("distributed_type: 'NO'\nnum_processes: 8\n")
    T.eq(formats.translate(one, { format = "accelerate", seq = 256 }).world_size, nil,
      "distributed_type NO runs one process")
  end,
  an_unmodelled_adapter_method_is_a_labelled_lora_stand_in = function()
    if not T.tmpfile then return end
    local p = T.tmpfile("stage: sft\nfinetuning_type: oft\ncutoff_len: 512\n")
    local t = formats.translate(p, { format = "llamafactory" })
    T.eq(t.spec.run.lora, { rank = 8, alpha = 16, targets = "all-linear" })
    T.ok(has(t.warnings, "finetuning_type oft: not modelled"))
  end,
  a_missing_deepspeed_file_is_a_loud_warning_not_fatal = function()
    if not T.tmpfile then return end
    local p = T.tmpfile("stage: sft\nfinetuning_type: full\ndeepspeed: nowhere/ds_z3.json\n")
    local t = formats.translate(p, { format = "llamafactory" })
    T.ok(has(t.warnings, "cannot find DeepSpeed config 'nowhere/ds_z3.json'"))
    T.ok(has(t.warnings, "NOT priced"))
    T.eq(t.spec.parallel, nil)
  end,
  fsdp_config_alone_does_not_turn_fsdp_on_in_the_trainer = function()
    if not T.tmpfile then return end
    local p = T.tmpfile('{"per_device_train_batch_size": 1, "block_size": 64, '
      .. '"fsdp_config": {"min_num_params": 0}}')
    T.eq(formats.translate(p, { format = "hf" }).spec.parallel, nil)
    local q = T.tmpfile('{"per_device_train_batch_size": 1, "block_size": 64, '
      .. '"fsdp": "shard_grad_op auto_wrap", "fsdp_config": {"activation_checkpointing": true}}')
    local t = formats.translate(q, { format = "hf" })
    T.eq(t.spec.parallel.fsdp, "shard_grad_op")
    T.eq(t.spec.run.grad_checkpointing, "full")
  end,
  llamafactory_inference_configs_serve_or_generate = function()
    if not T.tmpfile then return end
    local p = T.tmpfile("model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\n"
      .. "template: llama3\ninfer_backend: vllm\nvllm_maxlen: 8192\n")
    local t = formats.translate(p, { format = "llamafactory" })
    T.eq(t.spec.serve, { engine = "vllm", max_model_len = 8192, gpu_memory_utilization = 0.7 })
    T.eq(t.spec.run.mode, "inference")
    local q = T.tmpfile("model_name_or_path: x\ntemplate: llama3\ninfer_backend: huggingface\n"
      .. "max_new_tokens: 256\ncutoff_len: 512\n")
    local r = formats.translate(q, { format = "llamafactory" }).spec.run
    T.eq({ r.mode, r.seq, r.generate_tokens, r.batch }, { "generate", 512, 256, 1 })
  end,
  vllm_words_follow_the_shell = function()
    local vllm = require("stdlib.formats.vllm")
    T.eq(vllm.words("vllm serve m \\\n  --a 'x y' # note\n--b=\"z\""),
      { "vllm", "serve", "m", "--a", "x y", "--b=z" })
    T.eq(vllm.parse_command(vllm.words("docker run --gpus all -p 8000:8000 --ipc=host "
      .. "vllm/vllm-openai:latest --model org/m -tp 2")),
      { model = "org/m", ["tensor-parallel-size"] = "2" }, "docker's own flags are not vLLM's")
    T.eq(vllm.parse_command(vllm.words("python -m vllm.entrypoints.openai.api_server "
      .. "--model org/m --enforce-eager --max-model-len 4k")),
      { model = "org/m", ["enforce-eager"] = true, ["max-model-len"] = "4k" })
  end,
  -- bnb_4bit_compute_dtype (issue #19): the dtype Linear4bit dequantizes to
  -- and multiplies in, as the spec's run.precision.weights_compute. Expected
  -- values read off the files: dtype bfloat16, nf4 without nested quant, fp32.
  trl_bnb_compute_dtype_is_the_dequantize_dtype = function()
    local t = tr("trl_qlora_compute_fp32.yaml")
    T.eq(t.spec.run.precision, { params = "bf16", weights = "nf4", kbit_prepare = true,
      weights_compute = "fp32" })
    T.eq(#t.not_understood, 0)
    -- the run built from the file equals the run built from the same spec
    -- written by hand, and differs from the one without the key
    local spec = require("stdlib.spec")
    local step = require("stdlib.step")
    local where = dir .. "trl_qlora_compute_fp32.yaml"
    local from_file = spec.normalize(t.spec, where, registry)
    local function hand(prec, seq)
      return spec.normalize({ model = { preset = "qwen2_5_1_5b_instruct" }, run = {
        mode = "train", batch = 1, seq = seq or 512, grad_checkpointing = "full",
        precision = prec, lora = { rank = 16, alpha = 32, targets = "all-linear" },
        framework = "pytorch" } }, where, registry)
    end
    local FP32 = { params = "bf16", weights = "nf4", kbit_prepare = true,
      weights_compute = "fp32" }
    local BF16 = { params = "bf16", weights = "nf4", kbit_prepare = true }
    local fp32 = hand(FP32)
    T.eq(from_file.quant.compute, "fp32")
    T.eq(fp32.quant.compute, "fp32")
    T.eq(hand(BF16).quant.compute, "bf16")
    local a = step.simulate(from_file.sim, from_file)
    local b = step.simulate(fp32.sim, fp32)
    T.eq(a.peak, b.peak, "file vs hand-written spec")
    -- at 512 tokens the fp32 logits set the peak; at 16 the dequantized
    -- weight does. Qwen2.5-1.5B's largest quantized linear (the head is the
    -- embedding's tie, unquantized) is gate/up/down, 1536 x 8960: its fp32
    -- temporary is 2 bytes an element larger than bf16's
    local s32, s16 = hand(FP32, 16), hand(BF16, 16)
    b, c = step.simulate(s32.sim, s32), step.simulate(s16.sim, s16)
    T.ok(b.peak - c.peak >= 1536 * 8960 * 2, ("fp32 %d vs bf16 %d"):format(b.peak, c.peak))
  end,
  axolotl_bnb_config_kwargs_are_read = function()
    local t = tr("axolotl_qlora_bnb_kwargs.yml")
    T.eq(t.spec.run.precision, { params = "bf16", weights = "nf4", kbit_prepare = true,
      weights_compute = "fp32" }, "double quant off, fp32 compute")
    T.eq(#t.not_understood, 0)
  end,
  llamafactory_compute_dtype_is_refused = function()
    T.raises(function() tr("llamafactory_compute_dtype.yaml") end, "compute_dtype")
  end,
  spec_weights_compute_needs_bnb_4bit = function()
    local spec = require("stdlib.spec")
    T.raises(function()
      spec.normalize({ model = { preset = "qwen2_5_1_5b_instruct" }, run = { mode = "train", batch = 1,
        seq = 16, precision = { params = "bf16", weights_compute = "fp32" },
        lora = { rank = 8 } } }, dir .. "x.yaml", registry)
    end, "weights_compute")
  end,
}
