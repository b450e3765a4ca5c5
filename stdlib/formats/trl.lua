-- TRL configs (`trl sft|dpo|grpo|ppo --config FILE`, or SFTConfig /
-- DPOConfig / GRPOConfig / PPOConfig as YAML or JSON): TrainingArguments
-- plus the trainer's own keys and TRL's ModelConfig (model, dtype, PEFT,
-- bitsandbytes). The trainer is the command, not a key: --format
-- trl-sft|trl-dpo|trl-grpo|trl-ppo names it, else it is guessed from the keys.
-- Defaults from TRL's config classes (recent releases): model dtype "auto"
-- (the checkpoint's), bf16 on, SFT max_length 1024, DPO max_length 1024,
-- GRPO max_prompt_length 512, max_completion_length 256, num_generations 8,
-- beta 0.0 (no reference model), vllm_gpu_memory_utilization 0.3.
local vram = require("vram")
local word_set = require("stdlib.formats").word_set
local hf = require("stdlib.formats.hf_trainer")

local M = {}

local not_modelled = require("stdlib.formats").not_modelled

local function keep(field, kind)
  return function(c, v, k) c.t[field] = c[kind](c, k, v) end
end

local H = setmetatable({
  max_length = keep("max_length", "int"),
  max_seq_length = keep("max_length", "int"),
  max_prompt_length = keep("max_prompt_length", "int"),
  max_completion_length = keep("max_completion_length", "int"),
  response_length = keep("max_completion_length", "int"),
  num_generations = keep("num_generations", "int"),
  steps_per_generation = keep("steps_per_generation", "int"),
  generation_batch_size = keep("generation_batch_size", "int"),
  beta = keep("beta", "num"),
  kl_coef = keep("beta", "num"),
  use_vllm = keep("use_vllm", "bool"),
  vllm_mode = keep("vllm_mode", "str"),
  vllm_gpu_memory_utilization = keep("vllm_util", "num"),
  vllm_tensor_parallel_size = keep("vllm_tp", "int"),
  precompute_ref_log_probs = keep("precompute_ref", "bool"),
  reference_free = keep("reference_free", "bool"),
  packing = keep("packing", "bool"),
  padding_free = keep("padding_free", "bool"),
  use_peft = keep("use_peft", "bool"),
  lora_r = keep("lora_r", "int"),
  lora_alpha = keep("lora_alpha", "num"),
  lora_target_modules = function(c, v, k) c.t.lora_targets = c:lora_targets(k, v) end,
  load_in_4bit = keep("in4", "bool"),
  load_in_8bit = keep("in8", "bool"),
  bnb_4bit_quant_type = keep("quant_type", "str"),
  use_bnb_nested_quant = keep("nested", "bool"),
  -- the dtype Linear4bit dequantizes to and multiplies in (TRL's own CLI
  -- passes the model dtype; a script's ModelConfig may carry the key)
  bnb_4bit_compute_dtype = keep("bnb_compute", "str"),
  model_init_kwargs = function(c, v, k)
    if type(v) ~= "table" then c:unknown(k, v) return end
    c:walk(v, { torch_dtype = hf.HANDLERS.torch_dtype, dtype = hf.HANDLERS.dtype,
      attn_implementation = hf.HANDLERS.attn_implementation },
      { trust_remote_code = true, revision = true, device_map = true, use_cache = true,
        low_cpu_mem_usage = true }, k .. ".")
  end,
  activation_offloading = not_modelled("activation offloading to the host"),
  use_dora = keep("dora", "bool"),
  lora_dropout = keep("lora_dropout", "num"),
  lora_modules_to_save = function(c, v) c.t.modules_to_save = v end,
  sync_ref_model = not_modelled("a synced reference model"),
  num_mini_batches = keep("num_mini_batches", "int"),
  local_rollout_forward_batch_size = keep("rollout_batch", "int"),
  reward_model_path = keep("reward_model", "str"),
}, { __index = hf.HANDLERS })

local IGNORED = word_set([[
  dataset_text_field dataset_kwargs dataset_num_proc dataset_train_split
  dataset_test_split dataset_streaming dataset_mixture eos_token pad_token completion_only_loss
  assistant_only_loss chat_template_path shuffle_dataset eval_packing packing_strategy
  padding_value label_pad_token_id truncation_mode loss_type label_smoothing rpo_alpha
  ld_alpha discopop_tau use_weighting f_divergence_type f_alpha_divergence_coef
  force_use_ref_model ref_adapter_name model_adapter_name generate_during_eval
  is_encoder_decoder ref_model_init_kwargs ref_model_mixup_alpha ref_model_sync_steps
  tools use_logits_to_keep reward_funcs reward_weights reward_model_name_or_path
  num_iterations epsilon epsilon_high delta temperature top_p top_k min_p repetition_penalty
  generation_kwargs cache_implementation scale_rewards mask_truncated_completions
  log_completions num_completions_to_print wandb_log_unique_prompts vllm_server_base_url
  vllm_server_host vllm_server_port vllm_server_timeout vllm_guided_decoding_regex
  vllm_model_impl vllm_enable_sleep_mode vllm_importance_sampling_correction
  vllm_importance_sampling_cap ds3_gather_for_generation shuffle_dataset
  use_transformers_paged disable_dropout top_entropy_quantile importance_sampling_level
  num_ppo_epochs whiten_rewards cliprange vf_coef cliprange_value gamma lam stop_token
  stop_token_id missing_eos_penalty total_episodes sft_model_path exp_name
  num_sample_generations lora_task_type use_rslora model_revision
  trust_remote_code bnb_4bit_quant_storage lora_target_parameters
  dataset_name dataset_config dataset_path script_name env chat_template system_prompt
  dataset_prompt_column dataset_mixer dataset_splits dataset_configs dataset_columns
  callbacks benchmarks code_language code_eval_test_batch_size code_eval_scoring_mode
  e2b_router_url morph_router_url code_provider enforce_same_language parallel_code_exec_per_proc
  max_completion_len num_completions_to_print log_completions_steps
  preprocessing_num_workers auto_insert_empty_system_msg truncation_side]], hf.IGNORED)

-- Which trainer: the variant of --format, else guessed from its keys.
local function trainer(c, doc)
  if c.variant then return c.variant end
  if doc.num_generations or doc.use_vllm ~= nil or doc.vllm_mode or doc.max_completion_length
      and not doc.max_prompt_length and not doc.beta then
    c:assume("trainer: GRPO (guessed from its keys; --format trl-sft|trl-dpo|trl-grpo|trl-ppo "
      .. "names it)")
    return "grpo"
  end
  if doc.response_length or doc.num_ppo_epochs or doc.sft_model_path then
    c:assume("trainer: PPO (guessed from its keys)")
    return "ppo"
  end
  if doc.beta ~= nil or doc.max_prompt_length or doc.precompute_ref_log_probs ~= nil
      or doc.loss_type == "sigmoid" then
    c:assume("trainer: DPO (guessed from its keys)")
    return "dpo"
  end
  c:assume("trainer: SFT (no GRPO, PPO or DPO keys; --format trl-dpo etc. names it)")
  return "sft"
end

-- GRPO's rollout and update as the run spec's RL update; vLLM generation
-- colocated on the training GPU becomes a serve table beside it. t holds
-- TRL's GRPO keys (shared with axolotl's `trl:` block).
function M.grpo(c, t)
  local run = c.run
  local B = run.batch or 8
  local gen = t.generation_batch_size
  local rows = gen and gen // (c.world_size or 1) or B * (t.steps_per_generation or run.grad_accum
    or 1)
  run.mode = "grpo"
  run.seq = t.max_prompt_length or 512
  local new = t.max_completion_length or 256
  local beta = t.beta or 0.0
  run.batch = rows
  run.rl = { new_tokens = new, minibatch = B, reference = beta > 0 and not run.lora,
    value = false }
  if not t.max_prompt_length then c:assume("max_prompt_length: 512 (TRL's default)") end
  if not t.max_completion_length then c:assume("max_completion_length: 256 (TRL's default)") end
  if t.beta == nil then c:assume("beta: 0.0 (TRL's default: no reference model)") end
  c:assume(("rollout: %d completions per device per generation (per_device_train_batch_size x "
    .. "steps_per_generation), updated in micro-batches of %d; log-probs priced as a full fp32 "
    .. "log_softmax over the vocabulary (TRL's selective_log_softmax keeps less: an upper "
    .. "bound)"):format(rows, B))
  if t.use_vllm then
    -- vLLM generates: the training GPU scores prompt + completion rows
    -- (one-token rollout from a prefill of both), no per-token decode loop
    -- TRL scores the generation batch in chunks of per_device_train_batch_size
    -- (_get_per_token_logps), so one chunk of B rows is what the GPU holds
    run.seq = math.max(1, run.seq + new - 1)
    run.batch = B
    run.rl.new_tokens = 1
    c:assume("use_vllm: the training GPU scores prompt + completion (" .. (run.seq + 1)
      .. " tokens per row) in chunks of per_device_train_batch_size = " .. B .. " rows; the "
      .. "prefill KV cache the spec's one-token rollout keeps is not held by TRL (an upper "
      .. "bound)")
    local mode = t.vllm_mode or "server"
    if mode == "colocate" then
      c.serve = { engine = "vllm", colocate = true,
        gpu_memory_utilization = t.vllm_util or 0.3,
        max_model_len = run.seq + 1, tensor_parallel_size = t.vllm_tp or 1,
        max_num_seqs = rows }
      -- vLLM generates the whole generation batch: rows sequences at a time
      if not t.vllm_util then c:assume("vllm_gpu_memory_utilization: 0.3 (TRL's default)") end
      c:assume("use_vllm colocate: vLLM reserves gpu_memory_utilization of the GPU beside "
        .. "training (subtracted from the headroom)")
    else
      c:assume("use_vllm " .. mode .. ": generation runs in a vLLM server on other GPUs")
    end
  end
end

function M.translate(c, doc)
  c.t = {}
  c:walk(doc, H, IGNORED)
  local t, run = c.t, c.run
  local kind = trainer(c, doc)
  run.batch = run.batch or 8
  if doc.per_device_train_batch_size == nil then
    c:assume("per_device_train_batch_size: 8 (TrainingArguments' default)")
  end
  if c.half == nil and doc.bf16 == nil and doc.fp16 == nil then
    c.half = "bf16"
    c:assume("bf16: true (TRL's default when fp16 is not set)")
  end
  if not c.model_dtype then
    c.model_dtype = "auto"
    c:assume("model dtype: auto, the checkpoint's torch_dtype (TRL's default)")
  end
  c.deferred_precision = function(cc, cfg_dtype)
    hf.precision(cc, cfg_dtype)
    if t.in4 then
      cc.run.precision.weights = (t.quant_type == "fp4") and "int4" or (t.nested and "nf4_dq"
        or "nf4")
      -- SFTTrainer prepares a k-bit model for its adapters (peft's
      -- prepare_model_for_kbit_training: the unquantized parameters in fp32)
      cc.run.precision.kbit_prepare = t.quant_type ~= "fp4" or nil
      if t.bnb_compute and t.quant_type == "fp4" then
        cc:warn("bnb_4bit_compute_dtype with fp4 weights: not modelled (fp4 is priced as packed "
          .. "int4 in the run's compute dtype)")
      elseif t.bnb_compute then
        local dt = vram.dtype(t.bnb_compute)
        if not dt then cc:unknown("bnb_4bit_compute_dtype", t.bnb_compute) end
        cc.run.precision.weights_compute = dt
      end
    elseif t.bnb_compute then
      cc:warn("bnb_4bit_compute_dtype: ignored without load_in_4bit (bitsandbytes reads it for "
        .. "4-bit weights only)")
    elseif t.in8 then
      cc.run.precision.weights = "int8"
    end
  end
  if t.use_peft or t.in4 or t.in8 then
    local r = t.lora_r or 16
    run.lora = { rank = r, alpha = t.lora_alpha or 32, targets = t.lora_targets or "all-linear",
      dora = t.dora, dropout = t.lora_dropout, modules_to_save = t.modules_to_save }
    if not t.lora_targets then
      c:assume("lora_target_modules: all linear layers (TRL's ModelConfig leaves it to PEFT's "
        .. "per-architecture default; all-linear is an upper bound)")
    end
  end
  if kind == "sft" then
    run.mode = "train"
    run.seq = t.max_length or 1024
    if not t.max_length then c:assume("max_length: 1024 (TRL SFT's default)") end
    c:assume((t.packing or t.padding_free) and "packed rows of max_length tokens"
      or "every row padded to max_length (the worst batch)")
  elseif kind == "dpo" then
    run.mode = "train"
    run.seq = t.max_length or 1024
    if not t.max_length then c:assume("max_length: 1024 (TRL DPO's default)") end
    run.batch = run.batch * 2
    c:assume("chosen and rejected concatenated: 2 x per_device_train_batch_size rows of max_length")
    if not run.lora and not t.precompute_ref and not t.reference_free then
      c:warn("DPO reference model: a frozen copy of the weights on the GPU is not priced; add "
        .. "its weight bytes (or set precompute_ref_log_probs)")
    end
  elseif kind == "grpo" then
    M.grpo(c, t)
  elseif kind == "ppo" then
    run.mode = "ppo"
    local mb = run.batch
    run.batch = mb * (run.grad_accum or 1) * (t.num_mini_batches or 1)
    run.seq = t.max_length or 512
    run.rl = { new_tokens = t.max_completion_length or 53, minibatch = mb,
      reference = not run.lora, value = true }
    if not t.max_completion_length then c:assume("response_length: 53 (TRL PPO's default)") end
    c:assume("ppo: prompts of " .. run.seq .. " tokens; a separate value model (critic)")
    c:warn("ppo: the reward model (" .. tostring(t.reward_model) .. ") is not priced")
  else
    c:unknown("--format", "trl-" .. tostring(kind))
  end
end

return M
