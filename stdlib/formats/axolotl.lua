-- axolotl training YAML (`axolotl train FILE`). Its own key names; the model
-- is loaded in bf16/fp16 when those are set ("auto" follows the GPU: bf16
-- here) and trained in that dtype; QLoRA is `adapter: qlora` with
-- `load_in_4bit`.
local vram = require("vram")
local word_set = require("stdlib.formats").word_set
local M = {}

local not_modelled = require("stdlib.formats").not_modelled

local H = {
  base_model = function(c, v, k) c:model(v, k) end,
  base_model_config = function(c, v, k) c:model(v, k) end,
  adapter = function(c, v, k) c.adapter = c:str(k, v) end,
  load_in_4bit = function(c, v, k) c.in4 = c:bool(k, v) end,
  load_in_8bit = function(c, v, k) c.in8 = c:bool(k, v) end,
  -- overrides of axolotl's BitsAndBytesConfig (nf4, double quantization,
  -- compute dtype = the model dtype); quant_storage keeps the same bytes
  bnb_config_kwargs = function(c, v, k)
    if type(v) ~= "table" then c:unknown(k, v) return end
    c:walk(v, {
      bnb_4bit_compute_dtype = function(cc, x, kk) cc.bnb_compute = cc:str(kk, x) end,
      bnb_4bit_use_double_quant = function(cc, x, kk) cc.bnb_dq = cc:bool(kk, x) end,
      bnb_4bit_quant_type = function(cc, x, kk)
        if cc:str(kk, x) ~= "nf4" then cc:unknown(kk, x) end
      end,
      llm_int8_has_fp16_weight = function(cc, x, kk)
        if cc:bool(kk, x) then cc:unknown(kk, x) end
      end,
    }, { bnb_4bit_quant_storage = true, llm_int8_threshold = true }, k .. ".")
  end,
  lora_r = function(c, v, k) c.lora_r = c:int(k, v) end,
  lora_alpha = function(c, v, k) c.lora_alpha = c:num(k, v) end,
  lora_target_linear = function(c, v, k) c.target_linear = c:bool(k, v) end,
  lora_target_modules = function(c, v, k) c.target_modules = c:lora_targets(k, v) end,
  sequence_len = function(c, v, k) c.run.seq = c:int(k, v) end,
  sample_packing = function(c, v, k) c.packing = c:bool(k, v) end,
  micro_batch_size = function(c, v, k) c.run.batch = c:int(k, v) end,
  gradient_accumulation_steps = function(c, v, k) c.run.grad_accum = c:int(k, v) end,
  optimizer = function(c, v, k) c:optimizer(k, v) end,
  gradient_checkpointing = function(c, v, k)
    if v == "unsloth" or v == "offload" then
      c:warn(k .. ": offloaded checkpoints are not modelled; priced as full checkpointing")
      c.run.grad_checkpointing = "full"
    else
      c.run.grad_checkpointing = c:bool(k, v) and "full" or "none"
    end
  end,
  flash_attention = function(c, v, k) if c:bool(k, v) then c.run.attention = "flash" end end,
  sdp_attention = function(c, v, k) if c:bool(k, v) then c.run.attention = "sdpa" end end,
  xformers_attention = function(c, v, k)
    if c:bool(k, v) then
      c.run.attention = "flash"
      c:assume(k .. ": xformers memory-efficient attention priced as flash attention")
    end
  end,
  eager_attention = function(c, v, k) if c:bool(k, v) then c.run.attention = "eager" end end,
  bf16 = function(c, v, k)
    if v == "auto" or v == "full" then c.half = "bf16" elseif c:bool(k, v) then c.half = "bf16" end
  end,
  fp16 = function(c, v, k) if c:bool(k, v) then c.half = "fp16" end end,
  tf32 = function() end,
  fsdp = function(c, v, k)
    if type(v) == "table" then v = table.concat(v, " ") end
    require("stdlib.formats.hf_trainer").HANDLERS.fsdp(c, v, k)
  end,
  fsdp_config = function(c, v, k)
    if type(v) ~= "table" then c:unknown(k, v) return end
    require("stdlib.formats.accelerate").fsdp_keys(c, v, k .. ".")
    -- axolotl turns FSDP on by fsdp_config alone; full sharding by default
    if not c.parallel.fsdp then c.parallel.fsdp = "full_shard" end
  end,
  fsdp_version = function(c, v, k) c.parallel.fsdp_version = c:int(k, v) end,
  deepspeed = function(c, v, k) c:deepspeed(k, v) end,
  torch_compile = require("stdlib.formats.hf_trainer").HANDLERS.torch_compile,
  liger_fused_linear_cross_entropy = function(c, v, k)
    if c:bool(k, v) then
      c.run.loss = { impl = "liger_fused" }
      c:assume(k .. ": Liger's fused linear cross-entropy, its chunks as Liger sizes them")
    end
  end,
  cut_cross_entropy = function(c, v, k)
    if c:bool(k, v) then
      c.run.loss = { impl = "chunked", chunk_rows = 1024 }
      c:assume(k .. ": Cut Cross-Entropy priced as a chunked loss of 1024 rows")
    end
  end,
  rl = function(c, v, k) c.rl = c:str(k, v) end,
  trl = function(c, v, k)
    if type(v) ~= "table" then c:unknown(k, v) return end
    c.trl = v
    c:walk(v, {
      num_generations = function(cc, x, kk) cc.num_generations = cc:int(kk, x) end,
      max_completion_length = function(cc, x, kk) cc.max_completion = cc:int(kk, x) end,
      beta = function(cc, x, kk) cc.beta = cc:num(kk, x) end,
      use_vllm = function(cc, x, kk) cc.use_vllm = cc:bool(kk, x) end,
      vllm_mode = function(cc, x, kk) cc.vllm_mode = cc:str(kk, x) end,
      vllm_gpu_memory_utilization = function(cc, x, kk) cc.vllm_util = cc:num(kk, x) end,
    }, { reward_funcs = true, reward_weights = true, log_completions = true,
      num_iterations = true, epsilon = true, epsilon_high = true, scale_rewards = true,
      loss_type = true, mask_truncated_completions = true, temperature = true, top_p = true,
      top_k = true, vllm_server_host = true, vllm_server_port = true,
      vllm_server_timeout = true, sync_ref_model = true, generation_kwargs = true,
      chat_template_kwargs = true, vllm_enable_sleep_mode = true, num_completions_to_print = true,
      importance_sampling_level = true, delta = true, use_liger_loss = true,
      rollout_func = true, repetition_penalty = true, min_p = true }, k .. ".")
  end,
  unfrozen_parameters = not_modelled("training a subset of parameters"),
  peft_use_dora = function(c, v, k) c.dora = c:bool(k, v) end,
  lora_dropout = function(c, v, k) c.lora_dropout = c:num(k, v) end,
  relora_steps = not_modelled("ReLoRA"),
  lora_modules_to_save = function(c, v, k) c.modules_to_save = v end,
  gpu_memory_limit = not_modelled("a memory cap"),
  lora_on_cpu = not_modelled("LoRA on the CPU"),
  eval_sample_packing = function() end,
  attn_implementation = require("stdlib.formats.hf_trainer").HANDLERS.attn_implementation,
  float16 = function(c, v, k) if c:bool(k, v) then c.half = "fp16" end end,
  gptq = function(c, v, k) c.gptq = c:bool(k, v) end,
  gptq_groupsize = function() end,
  gptq_model_v1 = function() end,
  max_packed_sequence_len = function(c, v, k) c.packed_len = c:int(k, v) end,
  batch_size = function(c, v, k) c.total_batch = c:int(k, v) end,
  dp_shard_size = function(c, v, k) c.parallel.dp_shard = c:int(k, v) end,
  dp_replicate_size = function(c, v, k) c.parallel.dp_replicate = c:int(k, v) end,
  expert_parallel_size = function(c, v, k) c.parallel.ep = c:int(k, v) end,
  qat = not_modelled("quantization-aware training (fake-quantized copies)"),
  model_config = not_modelled("overrides of the model's config.json"),
  model_quantization_config = not_modelled("a quantization config for the base"),
  model_quantization_config_kwargs = function() end,
  use_kernels = not_modelled("hub kernels (MoE / fused layers)"),
  quantize_moe_experts = not_modelled("quantized MoE experts"),
  use_scattermoe = not_modelled("ScatterMoE kernels"),
  use_sonicmoe = not_modelled("SonicMoE kernels"),
  experts_implementation = not_modelled("a custom MoE experts implementation"),
  llama4_linearized_experts = not_modelled("linearized Llama-4 experts"),
  fused_attn_kernel = not_modelled("a fused attention kernel"),
  flash_optimum = not_modelled("BetterTransformer attention"),
  fp8 = not_modelled("fp8 training"),
  sequence_parallel_degree = function(c, v, k) c.parallel.cp = c:int(k, v) end,
  context_parallel_size = function(c, v, k) c.parallel.cp = c:int(k, v) end,
  tensor_parallel_size = function(c, v, k) c.parallel.tp = c:int(k, v) end,
  activation_offloading = not_modelled("activation offloading to the host"),
}

local IGNORED = word_set([[
  datasets test_datasets dataset_prepared_path val_set_size output_dir
  chat_template chat_template_jinja default_system_message tokenizer_type model_type
  tokenizer_config tokenizer_use_fast trust_remote_code strict pad_to_sequence_len
  lora_fan_in_fan_out lora_model_dir wandb_project wandb_entity wandb_watch
  wandb_name wandb_log_model wandb_mode wandb_run_id mlflow_tracking_uri
  mlflow_experiment_name use_tensorboard use_wandb comet_api_key comet_workspace
  comet_project_name num_epochs max_steps learning_rate lr_scheduler cosine_min_lr_ratio
  lr_scheduler_kwargs warmup_steps warmup_ratio weight_decay adam_beta1 adam_beta2
  adam_epsilon max_grad_norm train_on_inputs group_by_length logging_steps
  save_strategy save_steps saves_per_epoch save_total_limit save_safetensors save_only_model
  evals_per_epoch eval_steps eval_strategy eval_batch_size eval_max_new_tokens
  eval_table_size eval_causal_lm_metrics do_causal_lm_eval early_stopping_patience
  resume_from_checkpoint auto_resume_from_checkpoints local_rank seed special_tokens tokens
  added_tokens_overrides hub_model_id hub_strategy push_dataset_to_hub hf_use_auth_token
  dataset_processes dataset_keep_in_memory shuffle_merged_datasets debug
  gradient_checkpointing_kwargs loss_watchdog_threshold loss_watchdog_patience
  remove_unused_columns sample_packing_eff_est total_num_tokens
  sample_packing_group_size sample_packing_bin_size pretraining_dataset streaming
  is_preprocess dataloader_num_workers dataloader_prefetch_factor dataloader_pin_memory
  dataloader_drop_last skip_prepare_dataset is_llama_derived_model is_mistral_derived_model
  is_qwen_derived_model is_falcon_derived_model shuffle_before_merging_datasets
  flash_attn_cross_entropy flash_attn_rms_norm flash_attn_fuse_qkv flash_attn_fuse_mlp
  plugins liger_rope liger_rms_norm liger_glu_activation liger_layer_norm
  liger_swiglu special_tokens_pad group_by_length_eval include_tokens_per_second
  low_cpu_mem_usage ddp_timeout ddp_bucket_cap_mb ddp_broadcast_buffers
  ddp_find_unused_parameters neftune_noise_alpha max_memory lora_mlp_kernel
  lora_qkv_kernel lora_o_kernel embeddings_skip_upcast profiler_steps
  use_ray ray_num_workers ray_run_name dpo_beta rl_beta orpo_alpha kto_desirable_weight
  kto_undesirable_weight dpo_use_weighting dpo_label_smoothing
  dpo_norm_loss reward_model process_reward_model train_on_eos roles_to_train
  field_messages message_property_mappings resize_token_embeddings_to_32x
  mean_resizing_embeddings shrink_embeddings processor_type tokenizer_use_mistral_common
  tokenizer_legacy tokenizer_save_jinja_files chat_template_kwargs eot_tokens
  use_mlflow use_comet use_swanlab use_otel_metrics otel_metrics_host otel_metrics_port
  ds_type cloud gc_steps include_tkps dataset_exact_deduplication
  dataset_num_proc dataset_processes skip_move_to_device lora_target_parameters
  load_best_model_at_end metric_for_best_model greater_is_better
  save_first_step seed_data tokenizer_padding_side torchdistx_path experimental_skip_move_to_device
  liger_rms_norm_gated num_labels eta_min cosine_constant_lr_ratio flex_attn_compile_kwargs
  gemma4_hybrid_attn_impl vllm dsv4_fp4_grouped_mode
  rl_beta dpo_use_logits_to_keep dpo_padding_free]])

function M.translate(c, doc)
  c:walk(doc, H, IGNORED)
  local run = c.run
  if not run.seq and c.packed_len then run.seq = c.packed_len end
  if c.total_batch and run.batch then
    run.grad_accum = run.grad_accum or math.max(1, c.total_batch // run.batch)
  end
  if not run.seq then
    run.seq = 2048
    c:assume("sequence_len: 2048 (axolotl's default)")
  end
  if c.packing then
    c:assume("sample_packing: each row packed to sequence_len tokens")
  else
    c:assume("every row padded to sequence_len (the worst batch)")
  end
  run.batch = run.batch or 1
  run.attention = run.attention or "eager"
  local adapter = c.adapter
  if adapter == "lora" or adapter == "qlora" then
    local rank = c.lora_r or 8
    local targets = c.target_linear and "all-linear" or c.target_modules
    if not targets then
      targets = { "q_proj", "v_proj" }
      c:assume("lora targets: q_proj, v_proj (PEFT's default when none are given)")
    end
    run.lora = { rank = rank, alpha = c.lora_alpha or rank, targets = targets,
      dora = c.dora, dropout = c.lora_dropout, modules_to_save = c.modules_to_save }
    if not c.lora_alpha then c:assume("lora_alpha: lora_r (none given)") end
  elseif adapter ~= nil then
    c:unknown("adapter", adapter)
  end
  local half = c.half
  run.precision = { params = half or "fp32" }
  if adapter == "qlora" or c.in4 then
    run.precision.weights = c.bnb_dq == false and "nf4" or "nf4_dq"
    run.precision.params = half or "bf16"
    run.precision.kbit_prepare = true
    if c.bnb_compute then
      local dt = vram.dtype(c.bnb_compute)
      if not dt then c:unknown("bnb_config_kwargs.bnb_4bit_compute_dtype", c.bnb_compute) end
      run.precision.weights_compute = dt
    end
    c:assume("4-bit weights: bitsandbytes NF4" .. (c.bnb_dq == false and "" or " with double "
      .. "quantization") .. " (axolotl's QLoRA), prepared by peft's "
      .. "prepare_model_for_kbit_training (unquantized parameters fp32)")
  elseif c.in8 then
    run.precision.weights = "int8"
  elseif c.gptq then
    run.precision.weights = "int4"
    c:assume("gptq: int4 weights; GPTQ group scales and zeros not counted")
  end
  if c.bnb_compute and not run.precision.weights_compute then
    c:warn("bnb_config_kwargs.bnb_4bit_compute_dtype: ignored without 4-bit weights")
  end
  run.optimizer = run.optimizer or { name = "adamw", foreach = "torch2" }
  if c.rl == "gdpo" then
    c:assume("rl gdpo: priced as GRPO (the same rollout and update; only the advantage "
      .. "normalization differs)")
  end
  if c.rl == "grpo" or c.rl == "gdpo" then
    require("stdlib.formats.trl").grpo(c, {
      num_generations = c.num_generations, max_completion_length = c.max_completion,
      beta = c.beta, use_vllm = c.use_vllm, vllm_mode = c.vllm_mode,
      vllm_gpu_memory_utilization = c.vllm_util })
  elseif c.rl == "dpo" or c.rl == "ipo" or c.rl == "kto" or c.rl == "orpo" or c.rl == "simpo" then
    run.mode = "train"
    if c.rl ~= "kto" then
      run.batch = run.batch * 2
      c:assume("rl " .. c.rl .. ": chosen and rejected rows concatenated (2 x micro_batch_size)")
    end
    if not run.lora and c.rl ~= "orpo" and c.rl ~= "simpo" then
      c:warn("rl " .. c.rl .. ": the reference model (a frozen copy of the weights) is not priced")
    end
  elseif c.rl ~= nil then
    c:unknown("rl", c.rl)
    run.mode = "train"
  else
    run.mode = "train"
  end
end

return M
