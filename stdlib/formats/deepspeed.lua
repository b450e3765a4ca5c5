-- DeepSpeed JSON, alone or referenced by a training config. "auto" values
-- are filled as transformers' HfTrainerDeepSpeedConfig does
-- (integrations/deepspeed.py, trainer_config_process and
-- trainer_config_finalize): batch sizes and accumulation from the Trainer,
-- fp16/bf16 from its flags, and once the model is known
-- reduce_bucket_size = hidden^2, stage3_prefetch_bucket_size =
-- 0.9 * hidden^2, stage3_param_persistence_threshold = 10 * hidden.
local word_set = require("stdlib.formats").word_set
local M = {}

local function auto(v) return v == "auto" end

local ZERO_IGNORED = word_set([[
  allgather_partitions reduce_scatter
  round_robin_gradients stage3_gather_16bit_weights_on_model_save
  stage3_gather_fp16_weights_on_model_save load_from_fp32_weights elastic_checkpoint
  ignore_unused_parameters legacy_stage1 memory_efficient_linear use_multi_rank_bucket_allreduce
  cpu_offload_use_pin_memory log_trace_cache_warnings gather_16bit_weights_on_model_save
  module_granularity_threshold]])

local OFFLOAD_IGNORED = { pin_memory = true, buffer_count = true, fast_init = true,
  ratio = true, nvme_path = true, buffer_size = true, max_in_cpu = true, pipeline_read = true,
  pipeline_write = true }

-- a ZeRO switch that decides how the buckets behave
local function bucket_flag(name)
  return function(c, v, k)
    c.parallel.buckets = c.parallel.buckets or {}
    c.parallel.buckets[name] = c:bool(k, v)
  end
end

local function bucket(name)
  return function(c, v, k)
    c.parallel.buckets = c.parallel.buckets or {}
    if auto(v) then
      c.parallel.buckets[name] = "auto"
    else
      c.parallel.buckets[name] = c:int(k, math.tointeger(v) or v, 0)
    end
  end
end

local function offload(field)
  return function(c, v, k)
    if type(v) ~= "table" then c:unknown(k, v) return end
    c:walk(v, { device = function(cc, d, kk)
      local dev = cc:str(kk, d)
      if dev ~= "none" then
        cc.parallel.offload = cc.parallel.offload or {}
        cc.parallel.offload[field] = dev
      end
    end }, OFFLOAD_IGNORED, k .. ".")
  end
end

local ZERO = {
  stage = function(c, v, k) c.parallel.zero = c:int(k, v, 0) end,
  offload_optimizer = offload("optimizer"),
  offload_param = offload("params"),
  cpu_offload = function(c, v, k)
    if c:bool(k, v) then
      c.parallel.offload = c.parallel.offload or {}
      c.parallel.offload.optimizer = "cpu"
    end
  end,
  -- overlap_comm doubles stage 1/2's gradient bucket; contiguous_gradients
  -- decides whether it exists (stdlib/parallel.lua prices both)
  overlap_comm = bucket_flag("overlap_comm"),
  contiguous_gradients = bucket_flag("contiguous_gradients"),
  reduce_bucket_size = bucket("reduce_bucket_size"),
  allgather_bucket_size = bucket("allgather_bucket_size"),
  stage3_prefetch_bucket_size = bucket("stage3_prefetch_bucket_size"),
  stage3_param_persistence_threshold = bucket("stage3_param_persistence_threshold"),
  stage3_max_live_parameters = bucket("stage3_max_live_parameters"),
  stage3_max_reuse_distance = bucket("stage3_max_reuse_distance"),
  -- the spellings DeepSpeed also accepts without the stage3_ prefix
  max_live_parameters = bucket("stage3_max_live_parameters"),
  max_reuse_distance = bucket("stage3_max_reuse_distance"),
  prefetch_bucket_size = bucket("stage3_prefetch_bucket_size"),
  param_persistence_threshold = bucket("stage3_param_persistence_threshold"),
  sub_group_size = bucket("sub_group_size"),
  zero_hpz_partition_size = function(c, v, k)
    if c:int(k, v) > 1 then c:warn(k .. ": ZeRO++ hierarchical partitioning is not modelled") end
  end,
  zero_quantized_weights = function(c, v, k)
    if c:bool(k, v) then c:warn(k .. ": ZeRO++ quantized weights are not modelled") end
  end,
  zero_quantized_gradients = function(c, v, k)
    if c:bool(k, v) then c:warn(k .. ": ZeRO++ quantized gradients are not modelled") end
  end,
}

local IGNORED = word_set([[
  scheduler gradient_clipping steps_per_print wall_clock_breakdown
  zero_allow_untested_optimizer flops_profiler tensorboard wandb csv_monitor comet
  comms_logger checkpoint prescale_gradients gradient_predivide_factor
  communication_data_type dump_state memory_breakdown zero_force_ds_cpu_optimizer
  sparse_gradients aio elasticity autotuning compression_training
  data_efficiency seq_parallel_communication_data_type timers comms_config monitor_config
  train_batch_size_auto zero_optimization_auto gradient_clipping_auto]])

-- Reads a DeepSpeed config table into ctx. standalone: the DeepSpeed JSON is
-- the whole input (no Trainer values to fill "auto" from).
function M.read(c, ds, prefix, standalone)
  local run = c.run
  local vals = {}
  local function batch_key(field)
    return function(cc, v, k)
      if auto(v) then
        if standalone then cc:fail(k, "is \"auto\" but no training config fills it in") end
        return
      end
      vals[field] = cc:int(k, v)
    end
  end
  local function half(name)
    return function(cc, v, k)
      if type(v) ~= "table" then cc:unknown(k, v) return end
      local en = v.enabled
      if auto(en) then return end -- follows the Trainer's flag, already read
      if en ~= nil and cc:bool(k .. ".enabled", en) then
        if not standalone and cc.half ~= name then
          cc:warn(("%s.enabled is true but the training config does not set %s; DeepSpeed's "
            .. "setting is priced"):format(k, name))
        end
        if cc.half ~= name then cc.ds_half = name end
        cc.half = name
      end
    end
  end
  c:walk(ds, {
    train_micro_batch_size_per_gpu = batch_key("micro"),
    gradient_accumulation_steps = batch_key("gas"),
    train_batch_size = batch_key("global"),
    fp16 = half("fp16"),
    bf16 = half("bf16"),
    zero_optimization = function(cc, v, k)
      if type(v) ~= "table" then cc:unknown(k, v) return end
      cc:walk(v, ZERO, ZERO_IGNORED, k .. ".")
    end,
    optimizer = function(cc, v, k)
      if type(v) ~= "table" then cc:unknown(k, v) return end
      local t = type(v.type) == "string" and v.type:lower() or ""
      local map = { adam = "adamw_torch", adamw = "adamw_torch", cpuadam = "adamw_torch",
        fusedadam = "adamw_torch_fused", adafactor = "adafactor", sgd = "sgd" }
      if map[t] then
        cc:optimizer(k .. ".type", map[t])
      else
        cc:warn(("%s.type: '%s' is not modelled; priced as AdamW"):format(k, tostring(v.type)))
        cc:optimizer(k .. ".type", "adamw_torch")
      end
    end,
    activation_checkpointing = function(cc, v, k)
      if type(v) == "table" and (v.cpu_checkpointing or v.partition_activations) then
        cc:warn(k .. ": DeepSpeed's activation partitioning / CPU checkpointing applies to "
          .. "deepspeed.checkpointing users (Megatron-style); not modelled")
      end
    end,
    data_types = function(cc, v, k)
      if type(v) == "table" and v.grad_accum_dtype then
        cc:warn(k .. ".grad_accum_dtype: not modelled (gradients priced in the parameter dtype)")
      end
    end,
    amp = function(cc, v, k)
      if type(v) == "table" and v.enabled then
        cc:warn(k .. ": apex AMP is not modelled; priced as fp16 autocast")
        cc.half = "fp16"
      end
    end,
  }, IGNORED, prefix)
  -- batch: the Trainer's values win where DeepSpeed says "auto"; a number
  -- that contradicts the Trainer is what the HF integration refuses
  if vals.micro then
    if run.batch and run.batch ~= vals.micro and not standalone then
      c:warn(("train_micro_batch_size_per_gpu %d differs from the training config's %d; the "
        .. "HF integration refuses this mismatch"):format(vals.micro, run.batch))
    end
    run.batch = run.batch or vals.micro
  end
  if vals.gas then run.grad_accum = run.grad_accum or vals.gas end
  if vals.global and run.batch then
    local per = run.batch * (run.grad_accum or 1)
    if vals.global % per == 0 then
      c.world_size = c.world_size or vals.global // per
    else
      c:warn(("train_batch_size %d is not a multiple of micro-batch x accumulation (%d)"):format(
        vals.global, per))
    end
  end
  -- "auto" buckets from the model, once it is resolved
  local b = c.parallel.buckets
  if b then
    c.after_model[#c.after_model + 1] = function(cc, _, text)
      local h = math.tointeger(text.hidden_size)
      if not h then return end
      local fill = { reduce_bucket_size = h * h, stage3_prefetch_bucket_size = (9 * h * h) // 10,
        stage3_param_persistence_threshold = 10 * h }
      for name, v in pairs(b) do
        if v == "auto" then
          if fill[name] then
            b[name] = fill[name]
          else
            cc:unknown("zero_optimization." .. name, "auto")
            b[name] = nil
          end
        end
      end
    end
  end
  if c.parallel.zero and c.parallel.zero >= 1 and c.half then
    -- (stated only where the run is priced on one GPU: per-rank budgets
    -- model DeepSpeed's 16-bit module and fp32 partitions themselves)
    c.zero_precision_note = ("DeepSpeed keeps " .. c.half .. " weights and fp32 master copies in the optimizer; "
      .. "priced as fp32 weights under " .. c.half .. " autocast (2 bytes per parameter fewer "
      .. "than DeepSpeed, before sharding)")
  end
end

-- A DeepSpeed JSON referenced by a training config (formats.Ctx:deepspeed).
function M.apply(c, ref)
  c:assume("DeepSpeed config from " .. ref.where)
  M.read(c, ref.table, ref.key .. ".", false)
  -- a precision DeepSpeed turns on that the training config did not
  if c.ds_half and not c.deferred_precision then c:precision(c.ds_half, "mixed") end
end

-- A DeepSpeed JSON on its own: the model (--model) and sequence length
-- (--seq) come from the command line.
function M.translate(c, doc)
  M.read(c, doc, "", true)
  local run = c.run
  run.mode = "train"
  run.batch = run.batch or 1
  local seq = c.opts and c.opts.seq
  if not seq then
    require("stdlib.errors").usage(c.file .. ": a DeepSpeed config gives no sequence length or model: pass "
      .. "--seq N and --model CONFIG.json (or a hub id)")
  end
  run.seq = seq
  c:precision(c.half or "fp32", c.half and "mixed" or "pure")
end

return M
