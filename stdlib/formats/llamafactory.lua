-- LLaMA-Factory training YAML (`llamafactory-cli train FILE`): its model,
-- data, finetuning and generating arguments on top of the Trainer's.
-- Behaviour read from LLaMA-Factory's source (src/llamafactory/): gradient
-- checkpointing is on unless disable_gradient_checkpointing; trainable
-- parameters are upcast to fp32 unless pure_bf16 (model/adapter.py,
-- init_adapter); lora_target "all" means every linear layer; cutoff_len
-- defaults to 2048 and lora_rank to 8 (hparams/).
local word_set = require("stdlib.formats").word_set
local hf = require("stdlib.formats.hf_trainer")

local M = {}

local FLASH = { auto = "sdpa", sdpa = "sdpa", fa2 = "flash", disabled = "eager" }

local H = setmetatable({}, { __index = hf.HANDLERS })
H.stage = function(c, v, k) c.stage = c:str(k, v) end
H.finetuning_type = function(c, v, k) c.ftype = c:str(k, v) end
H.lora_rank = function(c, v, k) c.lora_rank = c:int(k, v) end
H.lora_alpha = function(c, v, k) c.lora_alpha = c:num(k, v) end
H.lora_target = function(c, v, k) c.lora_target = c:lora_targets(k, v) end
H.cutoff_len = function(c, v, k) c.run.seq = c:int(k, v) end
H.pure_bf16 = function(c, v, k) c.pure_bf16 = c:bool(k, v) end
H.quantization_bit = function(c, v, k) c.qbit = c:int(k, v) end
-- ModelArguments.compute_dtype is init=False, derived from bf16/fp16 (its
-- help: "Do not specify it"): the parser refuses it, so it is no input here
H.compute_dtype = function(c, v, k)
  c:fail(k, "LLaMA-Factory derives compute_dtype from bf16/fp16 (ModelArguments: \"Do not "
    .. "specify it\"); set bf16: true or fp16: true instead")
end
H.quantization_type = function(c, v, k) c.qtype = c:str(k, v) end
H.double_quantization = function(c, v, k) c.double_quant = c:bool(k, v) end
H.quantization_method = function(c, v, k)
  if c:str(k, v) ~= "bnb" and c:str(k, v) ~= "bitsandbytes" then c:unknown(k, v) end
end
H.disable_gradient_checkpointing = function(c, v, k) c.no_gc = c:bool(k, v) end
H.flash_attn = function(c, v, k)
  local a = FLASH[c:str(k, v)]
  if a then c.run.attention = a else c:unknown(k, v) end
end
H.enable_liger_kernel = hf.HANDLERS.use_liger_kernel
H.image_max_pixels = function(c, v, k) c.image_max_pixels = c:int(k, v) end
H.max_new_tokens = function(c, v, k) c.max_new_tokens = c:int(k, v) end
H.ref_model = function(c, v, k) c.ref_model = c:str(k, v) end
H.reward_model = function(c, v, k) c.reward_model = c:str(k, v) end
H.pref_loss = function(c, v, k) c.pref_loss = c:str(k, v) end
H.freeze_vision_tower = function(c, v, k) c.freeze_vision = c:bool(k, v) end
H.freeze_multi_modal_projector = function(c, v, k) c.freeze_proj = c:bool(k, v) end
H.freeze_language_model = function(c, v, k) c.freeze_llm = c:bool(k, v) end
H.packing = function(c, v, k) c.packing = c:bool(k, v) end
H.neat_packing = H.packing
local not_modelled = require("stdlib.formats").not_modelled
H.use_dora = function(c, v, k) c.dora = c:bool(k, v) end
H.lora_dropout = function(c, v, k) c.lora_dropout = c:num(k, v) end
H.use_galore = not_modelled("GaLore (projected optimizer states)")
H.use_apollo = not_modelled("APOLLO (projected optimizer states)")
H.use_badam = not_modelled("BAdam (block-wise updates)")
H.use_unsloth = not_modelled("Unsloth's kernels")
H.use_unsloth_gc = not_modelled("Unsloth's offloaded gradient checkpointing")
H.shift_attn = not_modelled("shift short attention")
H.mixture_of_depths = not_modelled("mixture of depths")
H.use_llama_pro = not_modelled("LLaMA Pro block expansion")
H.additional_target = not_modelled("training additional full modules beside LoRA")
H.train_mm_proj_only = not_modelled("training the projector alone")
H.freeze_trainable_layers = function(c, v, k) c.freeze_layers = c:int(k, v, -100000) end
H.fp8 = not_modelled("fp8 training (torchao / Transformer Engine)")
H.fp8_backend = function() end
H.fp8_enable_fsdp_float8_all_gather = function() end
H.use_kt = not_modelled("KTransformers offloading")
H.enable_liger_kernel_ = nil
H.infer_backend = function(c, v, k) c.infer_backend = c:str(k, v) end
H.vllm_maxlen = function(c, v, k) c.vllm_maxlen = c:int(k, v) end
H.vllm_gpu_util = function(c, v, k) c.vllm_util = c:num(k, v) end
H.vllm_enforce_eager = function(c, v, k) c.vllm_eager = c:bool(k, v) end
H.upcast_layernorm = not_modelled("fp32 layer norms")
H.upcast_lmhead_output = not_modelled("an fp32 LM-head output")

local IGNORED = word_set([[
  template dataset dataset_dir eval_dataset media_dir image_dir train_on_prompt
  mask_history buffer_size mix_strategy interleave_probs preprocessing_batch_size max_samples
  eval_num_beams ignore_pad_token_for_loss val_size tool_format tokenized_path plot_loss
  compute_accuracy include_effective_tokens_per_second use_rslora pissa_init
  pissa_iter pissa_convert create_new_adapter adapter_name_or_path adapter_folder
  hf_hub_token ms_hub_token om_hub_token print_param_status export_dir export_size
  export_device export_quantization_bit export_quantization_dataset export_legacy_format
  export_hub_model_id infer_dtype
  vllm_max_lora_rank vllm_config do_sample temperature top_p top_k num_beams length_penalty
  repetition_penalty default_system skip_special_tokens enable_thinking pref_beta pref_ftx
  dpo_label_smoothing simpo_gamma kto_chosen_weight kto_rejected_weight ppo_buffer_size
  ppo_epochs ppo_score_norm ppo_target ppo_whiten_rewards ppo_logger reward_model_type
  reward_model_adapters reward_model_quantization_bit ref_model_adapters
  ref_model_quantization_bit freeze_trainable_modules freeze_extra_modules
  use_reentrant_gc rope_scaling moe_aux_loss_coef split_special_tokens new_special_tokens
  resize_vocab offload_folder use_cache image_min_pixels video_max_pixels video_min_pixels
  video_fps video_maxlen audio_sampling_rate disable_shuffling train_from_scratch
  image_do_pan_and_scan crop_to_patches use_audio_in_video enable_liger_kernel_disabled
  galore_rank galore_target galore_update_interval galore_scale galore_proj_type
  galore_layerwise apollo_rank apollo_target apollo_update_interval apollo_scale
  apollo_proj apollo_proj_type apollo_scale_type apollo_layerwise apollo_scale_front
  badam_mode badam_start_block badam_switch_mode badam_switch_interval badam_update_ratio
  badam_mask_mode badam_verbose swanlab_project swanlab_workspace swanlab_run_name
  swanlab_mode swanlab_api_key swanlab_logdir use_swanlab ray_run_name ray_storage_path
  ray_num_workers resources_per_worker placement_strategy ray_init_kwargs
  quantization_device_map model_max_length block_diag_attn use_mca
  disable_gradient_checkpointing_disabled streaming loraplus_lr_ratio loraplus_lr_embedding
  fsdp_transformer_layer_cls_to_wrap oft_block_size oft_rank oft_target module_dropout
  use_adam_mini use_muon device_map model_max_length
  mm_proj_lr freeze_vision_tower_lr dataloader_persistent_workers]], hf.IGNORED)

-- `llamafactory-cli chat|api|webchat FILE`: an inference config (a backend,
-- no stage). vLLM's engine takes vllm_maxlen (4096), vllm_gpu_util (0.7) and
-- vllm_enforce_eager from LLaMA-Factory's model arguments.
local function inference(c)
  local run = c.run
  run.mode, run.batch, run.grad_accum = "inference", 1, nil
  if c.infer_backend == "vllm" then
    run.seq = 1
    c.serve = { engine = "vllm", max_model_len = c.vllm_maxlen or 4096,
      gpu_memory_utilization = c.vllm_util or 0.7, enforce_eager = c.vllm_eager or nil }
    if not c.vllm_maxlen then c:assume("vllm_maxlen: 4096 (LLaMA-Factory's default)") end
    if not c.vllm_util then c:assume("vllm_gpu_util: 0.7 (LLaMA-Factory's default)") end
  else
    run.mode, run.seq = "generate", run.seq or 1024
    run.generate_tokens = c.max_new_tokens or 1024
    c:assume(("%s backend: one prompt of %d tokens generating %d"):format(
      c.infer_backend, run.seq, run.generate_tokens))
  end
end

function M.translate(c, doc)
  c:walk(doc, H, IGNORED)
  local run = c.run
  if c.infer_backend and doc.stage == nil and doc.do_train == nil then
    return inference(c)
  end
  local stage = c.stage or "sft"
  local ftype = c.ftype or "lora"
  if doc.finetuning_type == nil then c:assume("finetuning_type: lora (LLaMA-Factory's default)") end
  if not run.seq then
    run.seq = 2048
    c:assume("cutoff_len: 2048 (LLaMA-Factory's default)")
  end
  c:assume("every sequence padded or packed to cutoff_len (the worst batch)")
  run.batch = run.batch or 1
  run.grad_checkpointing = c.no_gc and "none" or "full"
  run.attention = run.attention or "sdpa"
  -- LoRA / QLoRA / freeze / full
  if ftype == "lora" then
    local rank = c.lora_rank or 8
    run.lora = { rank = rank, alpha = c.lora_alpha or 2 * rank,
      targets = c.lora_target or "all-linear", dora = c.dora, dropout = c.lora_dropout }
  elseif ftype == "freeze" then
    c:warn("finetuning_type freeze: only the last " .. tostring(c.freeze_layers or 2)
      .. " layers train; priced as full fine-tuning (an upper bound)")
  elseif ftype ~= "full" then
    -- another adapter method (OFT, ...): LoRA of rank 8 on every linear layer
    -- stands in for it, said as a warning
    run.lora = { rank = 8, alpha = 16, targets = "all-linear" }
    c:warn("finetuning_type " .. ftype .. ": not modelled; priced as a LoRA of rank 8 on every "
      .. "linear layer (a frozen base with a small adapter)")
  end
  local adapter = run.lora ~= nil
  -- dtypes: bf16/fp16 loads the model in that dtype; trainable parameters
  -- are upcast to fp32 unless pure_bf16
  local half = c.half
  if c.qbit then
    if not adapter then
      c:fail("quantization_bit", "LLaMA-Factory trains a quantized base through an adapter "
        .. "only, not with finetuning_type " .. ftype)
    end
    run.precision = { params = half or "bf16" }
    if c.qbit == 4 then
      run.precision.weights = (c.qtype == "fp4") and "int4" or (c.double_quant == false and "nf4"
        or "nf4_dq")
    elseif c.qbit == 8 then
      run.precision.weights = "int8"
    else
      c:unknown("quantization_bit", c.qbit)
    end
  elseif not half then
    run.precision = { params = "fp32" }
  elseif c.pure_bf16 or adapter then
    run.precision = { params = half }
    if adapter and not c.pure_bf16 then
      c:assume("LoRA adapter weights are upcast to fp32 by LLaMA-Factory; priced in " .. half
        .. " (adapters are small beside the base)")
    end
  else
    c:precision(half, "mixed")
  end
  if c.qbit and not c.pure_bf16 then
    c:assume("LoRA adapter weights are upcast to fp32 by LLaMA-Factory; priced in "
      .. run.precision.params)
  end
  -- VLM towers: LLaMA-Factory freezes the vision tower and projector by default
  local freeze = {}
  if c.freeze_vision ~= false then freeze[#freeze + 1] = "vision" end
  if c.freeze_proj ~= false then freeze[#freeze + 1] = "projector" end
  if c.freeze_llm then freeze[#freeze + 1] = "llm" end
  c.vlm_freeze = freeze
  if c.image_max_pixels then
    run.images = { count = 1, width = 2048, height = 2048, max_pixels = c.image_max_pixels }
    c:assume("images: one image per sample, as large as image_max_pixels allows")
  end
  -- stages
  if stage == "pt" or stage == "sft" then
    run.mode = "train"
  elseif stage == "rm" or stage == "dpo" or stage == "kto" then
    run.mode = "train"
    if stage ~= "kto" then
      run.batch = run.batch * 2
      c:assume("stage " .. stage .. ": chosen and rejected sequences concatenated, "
        .. "2 x per_device_train_batch_size rows per step")
    end
    local pref = c.pref_loss or "sigmoid"
    if stage ~= "rm" and pref ~= "orpo" and pref ~= "simpo" and not adapter then
      c:warn("stage " .. stage .. ": the reference model (a frozen copy of the weights) is not "
        .. "priced; add its weight bytes")
    end
  elseif stage == "ppo" then
    run.mode = "ppo"
    local mb = run.batch
    run.batch = mb * (run.grad_accum or 1)
    run.rl = { new_tokens = c.max_new_tokens or 1024, minibatch = mb,
      reference = not adapter, value = false }
    if not c.max_new_tokens then c:assume("max_new_tokens: 1024 (LLaMA-Factory's default)") end
    c:assume("ppo: the value head shares the policy's backbone (no separate critic)")
    c:warn("ppo: the reward model (" .. tostring(c.reward_model) .. ") is not priced")
  else
    c:unknown("stage", stage)
    run.mode = "train"
  end
end

return M
