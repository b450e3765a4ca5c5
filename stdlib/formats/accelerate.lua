-- accelerate config YAML (`accelerate launch --config_file FILE`): the
-- world size, mixed precision and the FSDP or DeepSpeed plugin. It names no
-- model, batch or sequence: those come from --model and --seq (batch 1
-- unless --batch).
local word_set = require("stdlib.formats").word_set
local M = {}

local SHARDING = { ["1"] = "full_shard", ["2"] = "shard_grad_op", ["3"] = "no_shard",
  ["4"] = "hybrid_shard", ["5"] = "hybrid_shard",
  FULL_SHARD = "full_shard", SHARD_GRAD_OP = "shard_grad_op", NO_SHARD = "no_shard",
  HYBRID_SHARD = "hybrid_shard", HYBRID_SHARD_ZERO2 = "hybrid_shard" }

-- deepspeed_config's offload_*_device: where that state lives ("none": the GPU)
local function offload_to(what)
  return function(c, d, k)
    if c:str(k, d) ~= "none" then
      c.parallel.offload = c.parallel.offload or {}
      c.parallel.offload[what] = d
    end
  end
end

local FSDP_IGNORED = word_set([[
  auto_wrap_policy transformer_layer_cls_to_wrap min_num_params state_dict_type
  sync_module_states use_orig_params cpu_ram_efficient_loading backward_prefetch
  backward_prefetch_policy forward_prefetch xla xla_fsdp_settings xla_fsdp_grad_ckpt
  xla_fsdp_v2 cpu_offload_pin_memory]])

-- FSDP options as accelerate (fsdp_*) and TrainingArguments.fsdp_config
-- (with or without the prefix) spell them.
function M.fsdp_keys(c, tbl, prefix)
  local stripped = {}
  for k, v in pairs(tbl) do
    stripped[type(k) == "string" and k:gsub("^fsdp_", "") or k] = v
  end
  c:walk(stripped, {
    sharding_strategy = function(cc, v, k)
      local s = SHARDING[tostring(v)]
      if s then cc.parallel.fsdp = s else cc:unknown(k, v) end
    end,
    offload_params = function(cc, v, k)
      if cc:bool(k, v) then cc.parallel.offload = { params = "cpu", optimizer = "cpu" } end
    end,
    reshard_after_forward = function(cc, v, k)
      if type(v) == "string" and SHARDING[v] then
        cc.parallel.fsdp = SHARDING[v]
      else
        cc.parallel.reshard_after_forward = cc:bool(k, v)
      end
    end,
    limit_all_gathers = function(cc, v, k) cc.parallel.limit_all_gathers = cc:bool(k, v) end,
    activation_checkpointing = function(cc, v, k)
      if cc:bool(k, v) then cc.run.grad_checkpointing = "full" end
    end,
    version = function(cc, v, k) cc.parallel.fsdp_version = cc:int(k, v) end,
  }, FSDP_IGNORED, prefix)
end

local IGNORED = word_set([[
  compute_environment debug enable_cpu_affinity gpu_ids machine_rank
  main_training_function rdzv_backend same_network tpu_env tpu_use_cluster tpu_use_sudo
  main_process_ip main_process_port downcast_bf16 dynamo_backend
  ipex_config mpirun_config commands command_file tpu_name tpu_zone]])

local DS_IGNORED = { deepspeed_multinode_launcher = true, zero3_save_16bit_model = true,
  gradient_clipping = true, deepspeed_hostfile = true, deepspeed_exclusion_filter = true,
  deepspeed_inclusion_filter = true, zero3_init_flag = true,
  seq_parallel_communication_data_type = true, deepspeed_moe_layer_cls_names = true }

function M.translate(c, doc)
  local run = c.run
  local nproc, nmach
  c:walk(doc, {
    num_processes = function(cc, v, k) nproc = cc:int(k, v) end,
    num_machines = function(cc, v, k) nmach = cc:int(k, v) end,
    use_cpu = function(cc, v, k)
      if cc:bool(k, v) then run.framework = "pytorch-cpu" end
    end,
    distributed_type = function(cc, v, k)
      local d = cc:str(k, v)
      if d == "MEGATRON_LM" or d == "XLA" or d == "TPU" then
        cc:warn(k .. ": " .. d .. " is not modelled")
      end
    end,
    mixed_precision = function(cc, v, k)
      local m = cc:str(k, v)
      if m == "bf16" or m == "fp16" then cc.half = m
      elseif m == "fp8" then
        cc.half = "bf16"
        cc:warn(k .. ": fp8 (Transformer Engine / torchao) is not modelled; priced as bf16")
      elseif m ~= "no" then cc:unknown(k, v) end
    end,
    fsdp_config = function(cc, v, k)
      if type(v) == "table" and next(v) ~= nil then M.fsdp_keys(cc, v, k .. ".") end
    end,
    deepspeed_config = function(cc, v, k)
      if type(v) ~= "table" then cc:unknown(k, v) return end
      cc:walk(v, {
        deepspeed_config_file = function(c2, f, k2) c2:deepspeed(k2, f) end,
        zero_stage = function(c2, s, k2) c2.parallel.zero = c2:int(k2, s, 0) end,
        offload_optimizer_device = offload_to("optimizer"),
        offload_param_device = offload_to("params"),
        gradient_accumulation_steps = function(c2, g, k2) run.grad_accum = c2:int(k2, g) end,
      }, DS_IGNORED, k .. ".")
    end,
    dynamo_config = function(cc, v, k)
      if type(v) == "table" and v.dynamo_backend and v.dynamo_backend ~= "NO" then
        cc:warn(k .. ": torch.compile is not modelled (the eager step is priced)")
      end
    end,
    fp8_config = function(cc, v, k)
      if type(v) == "table" and next(v) then cc:warn(k .. ": fp8 training is not modelled") end
    end,
    parallelism_config = function(cc, v, k)
      if type(v) ~= "table" then cc:unknown(k, v) return end
      cc:walk(v, {
        parallelism_config_dp_replicate_size = function(c2, n, k2)
          c2.parallel.dp_replicate = c2:int(k2, n)
        end,
        parallelism_config_dp_shard_size = function(c2, n, k2)
          c2.parallel.dp_shard = c2:int(k2, n)
        end,
        parallelism_config_tp_size = function(c2, n, k2) c2.parallel.tp = c2:int(k2, n) end,
        parallelism_config_cp_size = function(c2, n, k2) c2.parallel.cp = c2:int(k2, n) end,
      }, {}, k .. ".")
    end,
  }, IGNORED)
  -- FSDP's default sharding strategy
  if doc.distributed_type == "FSDP" and not c.parallel.fsdp then c.parallel.fsdp = "full_shard" end
  -- distributed_type NO launches one process whatever num_processes says
  if nproc and doc.distributed_type ~= "NO" then c.world_size = nproc end
  if nmach and nmach > 1 then c:assume("num_processes counts every process on all machines") end
  run.mode = "train"
  local opts = c.opts or {}
  run.batch = opts.batch or 1
  if not opts.batch then c:assume("batch: 1 per GPU (an accelerate config does not say; --batch N)") end
  if not opts.seq then
    require("stdlib.errors").usage(c.file .. ": an accelerate config gives no model or sequence "
      .. "length: pass --seq N and --model CONFIG.json (or a hub id)")
  end
  run.seq = opts.seq
  c.deferred_precision = function(cc) cc:precision(cc.half or "fp32", cc.half and "mixed" or "pure") end
  c:assume("model loaded in fp32, " .. (c.half and (c.half .. " autocast") or "no autocast")
    .. " (accelerate's mixed_precision)")
end

return M
