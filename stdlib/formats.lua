-- The configs users already have (LLaMA-Factory, axolotl, TRL, Hugging Face
-- TrainingArguments, DeepSpeed, accelerate, vLLM engine arguments) translated
-- to a run spec (stdlib/spec.lua's schema) plus what the translation could
-- not carry. One translator per format in stdlib/formats/ (what they share:
-- stdlib/formats/translation.lua); each accounts for every key of its file:
-- mapped (changes memory), ignored (listed as known not to change memory)
-- or reported as "not understood" -- never dropped in silence, never fatal.
-- No model knowledge here: the model is a reference (path or hub id)
-- resolved by stdlib/resolve.lua.
local vram = require("vram")
local errors = require("stdlib.errors")

local M = {}

-- Detection order matters: the most specific markers first.
M.NAMES = { "llamafactory", "axolotl", "trl", "trl-sft", "trl-dpo", "trl-grpo", "trl-ppo", "hf",
  "deepspeed", "accelerate", "vllm", "spec" }

-- The rest (the translation's context, shared maps, the spec assembled,
-- --explain and the notes) is stdlib/formats/translation.lua, loaded on
-- the first field asked for that is not here: a run spec needs none of it
-- (its loading was ~0.5M instructions of a 10M-instruction estimate).
setmetatable(M, { __index = function(t, k)
  setmetatable(t, nil)
  for name, v in pairs(require("stdlib.formats.translation")) do
    if rawget(t, name) == nil then rawset(t, name, v) end
  end
  return rawget(t, k)
end })

---------------------------------------------------------------------------
-- Detection

local function has(doc, keys)
  for _, k in ipairs(keys) do if doc[k] ~= nil then return k end end
end

-- The format of a decoded document (or of text that is not YAML/JSON).
function M.detect(doc, text)
  if type(doc) ~= "table" then
    if type(text) == "string" and (text:find("vllm", 1, true) or text:find("%-%-[%w-]+")) then
      return "vllm"
    end
    return nil
  end
  if doc[1] ~= nil then return "spec" end -- a list of truth cases
  if (doc.model ~= nil and doc.run ~= nil) or doc.family ~= nil or doc.id ~= nil then
    return "spec"
  end
  if has(doc, { "stage", "finetuning_type", "cutoff_len", "lora_target", "template",
    "quantization_bit" }) then return "llamafactory" end
  if has(doc, { "base_model", "micro_batch_size", "sequence_len", "sample_packing",
    "lora_target_linear", "adapter" }) then return "axolotl" end
  if has(doc, { "compute_environment", "distributed_type", "num_processes", "fsdp_config",
    "deepspeed_config" }) and doc.per_device_train_batch_size == nil then return "accelerate" end
  if has(doc, { "zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size",
    "zero_allow_untested_optimizer" }) then return "deepspeed" end
  local vllm_keys = { "gpu-memory-utilization", "gpu_memory_utilization", "max-model-len",
    "max_model_len", "max-num-seqs", "max_num_seqs", "tensor-parallel-size",
    "tensor_parallel_size", "kv-cache-dtype", "kv_cache_dtype", "enforce-eager",
    "max-num-batched-tokens", "max_num_batched_tokens" }
  if has(doc, vllm_keys) and doc.per_device_train_batch_size == nil then return "vllm" end
  if has(doc, { "num_generations", "max_completion_length", "use_vllm", "beta",
    "max_prompt_length", "ref_model_init_kwargs", "max_seq_length", "max_length",
    "packing", "dataset_text_field", "completion_only_loss", "model_init_kwargs",
    "vllm_mode" }) then return "trl" end
  -- `trl sft --config`: a model and a dataset by name, the rest Trainer keys
  -- (the transformers example scripts name block_size or dataset_config_name)
  if doc.model_name_or_path ~= nil and doc.dataset_name ~= nil and not has(doc, { "block_size",
    "dataset_config_name", "train_file", "validation_file", "max_train_samples" }) then
    return "trl"
  end
  if has(doc, { "per_device_train_batch_size", "gradient_accumulation_steps", "output_dir" }) then
    return "hf"
  end
end

---------------------------------------------------------------------------
-- Loading and translating

local function decode(path)
  -- by extension, a YAML file's keys located for errors (stdlib/spec.lua)
  if path:match("%.ya?ml$") or path:match("%.json$") then
    return require("stdlib.spec").load_file(path)
  end
  -- anything else: YAML when it decodes to a mapping, else an engine
  -- command line (vLLM) kept as text
  local text = vram.text.load(path)
  local ok, doc, lines = pcall(vram.yaml.decode, text, path, true)
  if ok and type(doc) == "table" and doc[1] == nil then
    errors.locate(path, doc, lines)
    return doc, text
  end
  return nil, text
end

-- Translates the file at path. opts: format (a NAME of M.NAMES), gpus
-- (world size when the file does not say). Returns the translation:
-- {format=, spec={model=, run=, parallel=, serve=}, model_ref=, model_key=,
-- not_understood={{key=, value=}}, warnings={}, assumptions={}, world_size=}
-- or nil when the file is a run spec already.
function M.translate(path, opts)
  opts = opts or {}
  local doc, text = decode(path)
  local name = opts.format
  if name then
    local ok = false
    for _, n in ipairs(M.NAMES) do ok = ok or n == name end
    if not ok then
      local hint = errors.suggest(name, M.NAMES)
      errors.usage(("unknown --format '%s'%s (known: %s)"):format(name,
        hint and ("; did you mean '" .. hint .. "'?") or "", table.concat(M.NAMES, ", ")))
    end
  else
    name = M.detect(doc, text)
    -- nothing recognised: a run spec, whose own checks say what is wrong
    if not name then return nil, doc, true end
  end
  if name == "spec" then return nil, doc end
  return require("stdlib.formats.translation").translate_as(path, name, doc, text, opts)
end

---------------------------------------------------------------------------
-- The commands' side: options, loading, what to print

-- Options every command that reads a run accepts (stdlib/args defaults).
M.OPTIONS = { format = "", model = "", gpus = 0, explain = false }
M.METAVAR = { format = "a NAME", model = "a CONFIG.json or hub id", gpus = "a count" }
M.HELP = [[
FILE may also be a config of another tool, detected from its keys or named
with --format NAME: llamafactory, axolotl, trl (trl-sft, trl-dpo, trl-grpo,
trl-ppo), hf (TrainingArguments JSON), deepspeed, accelerate, vllm (engine
arguments: a command line or YAML). Its model (a path, a Hugging Face cache
entry, or a preset's hub id) can be replaced with --model CONFIG.json; --gpus N
gives the world size when the file does not; --explain prints the run spec it
was translated to (YAML) and stops.]]

-- Merges M.OPTIONS into a command's option defaults.
function M.options(defaults, metavar)
  for k, v in pairs(M.OPTIONS) do defaults[k] = v end
  for k, v in pairs(M.METAVAR) do metavar[k] = v end
  return defaults, metavar
end

-- --seq N, or the first value of a sweep's list ("512:8192:512", "1,2,4").
function M.first_int(v)
  if type(v) == "string" then v = math.tointeger(tonumber(v:match("^%d+"))) end
  return math.type(v) == "integer" and v > 0 and v or nil
end

-- Loads FILE as a run: a run spec as before, or a translated config.
-- a: the parsed options (format, model, gpus, seq, batch); registry:
-- models/registry.lua (presets by hub id). Returns run, tr (nil for a run
-- spec), doc (the decoded run spec).
function M.load_run(path, a, registry)
  local spec = require("stdlib.spec")
  local opts = { format = a.format, model = a.model,
    gpus = (a.gpus or 0) > 0 and a.gpus or nil,
    seq = M.first_int(a.seq), batch = M.first_int(a.batch),
    presets = registry and registry.PRESETS, preset_path = registry and registry.preset_path }
  local tr, doc, unsure = M.translate(path, opts)
  if unsure then
    local ok, run = pcall(spec.normalize, doc, path, registry)
    if ok then return run, nil, doc end
    if type(run) == "table" and run.msg then
      run.msg = run.msg .. " (read as a run spec; another tool's config is named with --format "
        .. "NAME: " .. table.concat(M.NAMES, ", ") .. ")"
    end
    error(run, 0)
  end
  if not tr then
    if a.model or a.explain then
      errors.usage(path .. " is a run spec already: --model and --explain apply to other "
        .. "tools' configs")
    end
    -- a run spec says its layout in parallel:; only fit reads --gpus as one
    if (a.gpus or 0) > 0 and not a.gpus_layout then
      errors.usage(path .. " is a run spec: --gpus gives another tool's config its world size; "
        .. "write the layout in parallel: (dp: " .. a.gpus .. "), or search layouts with "
        .. "`vramlua fit SPEC --gpu NAME --gpus " .. a.gpus .. "`")
    end
    return nil, nil, doc
  end
  M.resolve_model(tr, opts)
  if a.explain then return nil, tr end
  local run = spec.normalize(M.run_spec(tr), path, registry, tr.model)
  tr.run = run
  return run, tr
end

-- fit, doctor and sweep: the run of FILE with the translation's notes
-- printed first (each line after prefix: "# " above a CSV; not printed when
-- quiet: a --json caller carries them, M.json_notes); --explain prints the
-- spec and returns nil; a serving config is refused (estimate prices it).
function M.command_run(path, a, registry, prefix, quiet)
  local run, tr, doc = M.load_run(path, a, registry)
  if tr and a.explain then print(M.explain(tr)) return nil end
  if tr and tr.spec.serve and not tr.spec.serve.colocate then
    errors.usage(path .. " is a vLLM serving config: `vramlua estimate` prices it")
  end
  if tr and not quiet then
    print(prefix and (M.notes(tr):gsub("[^\n]+", prefix .. "%0")) or M.notes(tr))
  end
  return run or require("stdlib.spec").normalize(doc, path, registry), tr
end
return M
