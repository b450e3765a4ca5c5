-- Hugging Face TrainingArguments (and the Model/Data arguments of the
-- transformers example scripts, HfArgumentParser's JSON): the keys every
-- Trainer-based format (LLaMA-Factory, TRL) shares, and the translator for a
-- plain TrainingArguments JSON.
local word_set = require("stdlib.formats").word_set
local M = {}

local function set(ctx, field) return function(c, v, k) c.run[field] = c:int(k, v) end end

-- Keys that change the training step's memory.
M.HANDLERS = {
  per_device_train_batch_size = set(nil, "batch"),
  gradient_accumulation_steps = set(nil, "grad_accum"),
  bf16 = function(c, v, k) if c:bool(k, v) then c.half = "bf16" end end,
  fp16 = function(c, v, k) if c:bool(k, v) then c.half = "fp16" end end,
  gradient_checkpointing = function(c, v, k)
    c.run.grad_checkpointing = c:bool(k, v) and "full" or "none"
  end,
  optim = function(c, v, k) c:optimizer(k, v) end,
  deepspeed = function(c, v, k) c:deepspeed(k, v) end,
  fsdp = function(c, v, k)
    if type(v) == "table" then v = table.concat(v, " ") end
    if v == false or v == "" then return end
    local s = c:str(k, v)
    local mode = s:match("(full_shard)") or s:match("(shard_grad_op)") or s:match("(hybrid_shard)")
      or s:match("(no_shard)")
    if not mode then c:unknown(k, v) return end
    c.parallel.fsdp = mode
    if s:find("offload", 1, true) then c.parallel.offload = { params = "cpu", optimizer = "cpu" } end
  end,
  fsdp_config = function(c, v, k)
    if type(v) == "string" then
      local path, loaded = require("stdlib.formats").find_file(v, c.file)
      if not path then
        c:warn(("%s: cannot find '%s' (looked at %s); its FSDP options are NOT priced"):format(
          k, v, loaded))
        return
      end
      v = loaded
    end
    if type(v) ~= "table" then c:unknown(k, v) return end
    require("stdlib.formats.accelerate").fsdp_keys(c, v, k .. ".")
  end,
  torch_compile = function(c, v, k)
    if c:bool(k, v) then
      c:warn(k .. ": torch.compile fuses kernels and changes which activations are kept; "
        .. "not modelled (the eager step is priced)")
    end
  end,
  use_liger_kernel = function(c, v, k)
    if c:bool(k, v) then
      c.run.loss = { impl = "liger_fused" }
      c:warn(k .. ": Liger's fused linear cross-entropy is modelled; its RMSNorm, SwiGLU and "
        .. "RoPE kernels are not (priced as the eager ops)")
    end
  end,
  auto_find_batch_size = function(c, v, k)
    if c:bool(k, v) then
      c:warn(k .. ": the Trainer halves the batch on OOM; the batch as written is priced")
    end
  end,
  model_name_or_path = function(c, v, k) c:model(v, k) end,
  -- older spellings a TrainingArguments dump may still carry
  per_gpu_train_batch_size = function(c, v, k) c.run.batch = c.run.batch or c:int(k, v) end,
  adafactor = function(c, v, k) if c:bool(k, v) then c:optimizer(k, "adafactor") end end,
  tp_size = function(c, v, k)
    local n = c:int(k, v, 0)
    if n > 1 then c.parallel.tp = n end
  end,
  parallelism_config = function(c, v, k)
    if type(v) == "table" and next(v) ~= nil then c:unknown(k, v) end
  end,
  torch_dtype = function(c, v, k) c.model_dtype = c:str(k, v) end,
  dtype = function(c, v, k) c.model_dtype = c:str(k, v) end,
  block_size = function(c, v, k) c.run.seq = c:int(k, v) end,
  max_seq_length = function(c, v, k) c.run.seq = c:int(k, v) end,
  attn_implementation = function(c, v, k)
    local name = c:str(k, v)
    local a = ({ eager = "eager", sdpa = "sdpa", flash_attention_2 = "flash",
      flash_attention_3 = "flash", xformers = "flash", flex_attention = "flash" })[name]
    -- hub kernels ("kernels-community/vllm-flash-attn3") are flash kernels
    if not a and name:find("flash", 1, true) then a = "flash" end
    if a then
      c.run.attention = a
      if name == "xformers" or name == "flex_attention" then
        c:assume(k .. ": " .. name .. " priced as flash attention (no score matrix kept)")
      end
    else
      c:unknown(k, v)
    end
  end,
}

-- Keys known not to change the training step's memory: bookkeeping,
-- schedules, data loading on the host, evaluation (the training step's peak
-- is what is estimated), hub and logging.
M.IGNORED = word_set([[
  output_dir overwrite_output_dir do_train do_eval do_predict eval_strategy
  evaluation_strategy prediction_loss_only per_device_eval_batch_size eval_accumulation_steps
  eval_delay eval_steps eval_on_start eval_do_concat_batches torch_empty_cache_steps learning_rate
  weight_decay adam_beta1 adam_beta2 adam_epsilon max_grad_norm num_train_epochs max_steps
  lr_scheduler_type lr_scheduler_kwargs warmup_ratio warmup_steps log_level log_level_replica
  log_on_each_node logging_dir logging_strategy logging_first_step logging_steps
  logging_nan_inf_filter save_strategy save_steps save_total_limit save_safetensors
  save_on_each_node save_only_model restore_callback_states_from_checkpoint use_cpu seed
  data_seed jit_mode_eval bf16_full_eval fp16_full_eval fp16_opt_level half_precision_backend
  fp16_backend tf32 local_rank ddp_backend tpu_num_cores dataloader_drop_last
  dataloader_num_workers dataloader_prefetch_factor dataloader_pin_memory
  dataloader_persistent_workers past_index run_name disable_tqdm remove_unused_columns
  label_names load_best_model_at_end metric_for_best_model greater_is_better ignore_data_skip
  accelerator_config label_smoothing_factor group_by_length length_column_name report_to
  ddp_find_unused_parameters ddp_bucket_cap_mb ddp_broadcast_buffers ddp_timeout
  skip_memory_metrics push_to_hub resume_from_checkpoint hub_model_id hub_strategy hub_token
  hub_private_repo hub_always_push hub_revision gradient_checkpointing_kwargs
  include_inputs_for_metrics include_for_metrics include_num_input_tokens_seen
  include_tokens_per_second neftune_noise_alpha optim_target_modules batch_eval_metrics
  torch_compile_backend torch_compile_mode full_determinism ray_scope split_batches
  dispatch_batches average_tokens_across_devices use_legacy_prediction_loop
  predict_with_generate generation_max_length generation_num_beams generation_config
  sortish_sampler debug mp_parameters dataloader_sampler ddp_static_graph save_steps_ratio
  tokenizer_name config_name cache_dir use_fast_tokenizer model_revision token
  trust_remote_code low_cpu_mem_usage dataset_name dataset_config_name train_file
  validation_file max_train_samples max_eval_samples streaming overwrite_cache
  validation_split_percentage preprocessing_num_workers keep_linebreaks
  text_column summary_column pad_to_max_length max_source_length max_target_length
  use_auth_token model_type config_overrides train_sampling_strategy
  project trackio_space_id chat_template_path _n_gpu fsdp_min_num_params
  fsdp_transformer_layer_cls_to_wrap deepspeed_plugin torchdynamo use_mps_device no_cuda
  use_ipex xpu_backend eval_use_gather_object liger_kernel_config push_to_hub_model_id
  push_to_hub_organization push_to_hub_token per_gpu_eval_batch_size tpu_metrics_debug
  sharded_ddp ddp_broadcast_buffers eval_do_concat_batches hub_private_repo
  use_liger use_cache model_init_kwargs_disabled]])

-- Precision under the plain Trainer: from_pretrained loads fp32 unless a
-- dtype is given; bf16/fp16 then autocast over fp32 master weights.
function M.precision(c, cfg_dtype)
  local names = { bfloat16 = "bf16", float16 = "fp16", float32 = "fp32", bf16 = "bf16",
    fp16 = "fp16", fp32 = "fp32", half = "fp16", float = "fp32" }
  local md = c.model_dtype
  if md == "auto" then md = cfg_dtype end
  local loaded = md and names[md]
  if c.model_dtype and not loaded then c:unknown("torch_dtype", c.model_dtype) end
  if not loaded then
    loaded = "fp32"
    c:assume("model loaded in fp32 (from_pretrained's default without torch_dtype)")
  end
  if c.half and loaded == "fp32" then
    c:precision(c.half, "mixed")
  else
    c:precision(loaded, "pure")
    if c.half and c.half ~= loaded then
      c:warn(("weights loaded in %s with %s autocast: priced in %s"):format(loaded, c.half, loaded))
    end
  end
end

function M.translate(c, doc)
  c.run.mode = "train"
  c:walk(doc, M.HANDLERS, M.IGNORED)
  c.deferred_precision = M.precision
  if not c.run.seq then
    c:fail("block_size", "the file gives no sequence length (block_size or max_seq_length); "
      .. "add one to the file")
  end
  c.run.batch = c.run.batch or 8
  if doc.per_device_train_batch_size == nil then
    c:assume("per_device_train_batch_size: 8 (TrainingArguments' default)")
  end
end

return M
