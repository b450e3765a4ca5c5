-- vLLM engine arguments: a command line (`vllm serve MODEL --flag value`,
-- `python -m vllm.entrypoints.openai.api_server --model MODEL ...`, with
-- shell continuations) in a text file, or a YAML/JSON of engine arguments
-- (`vllm serve --config FILE`: the flags without their dashes, '-' or '_').
-- Translated to a serve table that stdlib/serving.lua prices.
local word_set = require("stdlib.formats").word_set
local M = {}

-- Shell-like words: quotes, backslash-newline continuations, # comments.
function M.words(text)
  local out, cur, i, n = {}, nil, 1, #text
  local quote
  while i <= n do
    local ch = text:sub(i, i)
    if quote then
      if ch == quote then quote = nil else cur = (cur or "") .. ch end
    elseif ch == "\\" and text:sub(i + 1, i + 1) == "\n" then
      i = i + 1
    elseif ch == "\\" then
      cur = (cur or "") .. text:sub(i + 1, i + 1)
      i = i + 1
    elseif ch == "'" or ch == '"' then
      quote, cur = ch, cur or ""
    elseif ch == "#" and not cur then
      while i <= n and text:sub(i, i) ~= "\n" do i = i + 1 end
    elseif ch:match("%s") then
      if cur then out[#out + 1] = cur cur = nil end
    else
      cur = (cur or "") .. ch
    end
    i = i + 1
  end
  if cur then out[#out + 1] = cur end
  return out
end

-- Flags that take no value.
local SWITCHES = { ["enforce-eager"] = true, ["trust-remote-code"] = true,
  ["enable-prefix-caching"] = true, ["no-enable-prefix-caching"] = true,
  ["enable-chunked-prefill"] = true, ["no-enable-chunked-prefill"] = true,
  ["disable-log-requests"] = true, ["disable-log-stats"] = true, ["enable-lora"] = true,
  ["enable-auto-tool-choice"] = true, ["disable-custom-all-reduce"] = true,
  ["enable-expert-parallel"] = true, ["disable-sliding-window"] = true,
  ["skip-tokenizer-init"] = true, ["enable-sleep-mode"] = true, ["async-scheduling"] = true,
  ["disable-frontend-multiprocessing"] = true, ["enable-log-requests"] = true,
  ["headless"] = true, ["disable-fastapi-docs"] = true, ["enable-prompt-tokens-details"] = true,
  ["enable-server-load-tracking"] = true, ["disable-uvicorn-access-log"] = true }

-- Engine arguments from a command line: {key=value} with '-' spelling and
-- the model (first word after `serve`, or --model).
function M.parse_command(words, c)
  local args, i, model = {}, 1, nil
  -- skip environment assignments and the launcher up to `serve`, the
  -- module, or the image of `docker run ... vllm/vllm-openai[:tag]`
  local start
  for j, w in ipairs(words) do
    if w == "serve" or w:match("api_server$") or w:match("vllm%-openai") then start = j + 1 break end
  end
  if not start then
    for j, w in ipairs(words) do if w:match("^%-%-") then start = j break end end
  end
  i = start or 1
  while i <= #words do
    local w = words[i]
    local key, val = w:match("^%-%-([%w%-_.]+)=(.*)$")
    if not key then key = w:match("^%-%-([%w%-_.]+)$") end
    if key then
      key = key:gsub("_", "-")
      if val == nil then
        local nxt = words[i + 1]
        if SWITCHES[key] or nxt == nil or nxt:match("^%-%-") then
          val = true
        else
          val, i = nxt, i + 1
        end
      end
      args[key] = val
    elseif w:match("^%-%a[%w]*$") then
      -- short options (-tp 2, -O3): keep as themselves
      local nxt = words[i + 1]
      if nxt and not nxt:match("^%-") then args[w] = nxt i = i + 1 else args[w] = true end
    elseif not model and not w:find("=", 1, true) and w ~= "python" and w ~= "python3"
        and w ~= "-m" and not w:match("^vllm") then
      model = w
    end
    i = i + 1
  end
  if args["-tp"] then args["tensor-parallel-size"], args["-tp"] = args["-tp"], nil end
  if model and not args.model then args.model = model end
  return args
end

local IGNORED = word_set([[
  served-model-name host port api-key uvicorn-log-level allowed-origins
  allowed-methods allowed-headers ssl-keyfile ssl-certfile chat-template
  response-role tool-call-parser enable-auto-tool-choice reasoning-parser tokenizer
  tokenizer-mode trust-remote-code download-dir load-format revision code-revision
  tokenizer-revision seed disable-log-stats disable-log-requests enable-log-requests
  enable-prefix-caching no-enable-prefix-caching enable-chunked-prefill
  no-enable-chunked-prefill max-logprobs generation-config override-generation-config
  disable-custom-all-reduce distributed-executor-backend worker-cls
  root-path middleware return-tokens-as-token-ids disable-frontend-multiprocessing
  enable-request-id-headers enable-prompt-tokens-details enable-server-load-tracking
  disable-uvicorn-access-log disable-fastapi-docs lora-modules prompt-adapters
  swap-space preemption-mode scheduling-policy scheduler-delay-factor
  guided-decoding-backend structured-outputs-config hf-overrides hf-token
  config-format skip-tokenizer-init async-scheduling api-server-count headless
  data-parallel-address data-parallel-rpc-port data-parallel-start-rank
  data-parallel-size-local data-parallel-backend num-scheduler-steps
  max-parallel-loading-workers ray-workers-use-nsight log-level
  ignore-patterns otlp-traces-endpoint collect-detailed-traces show-hidden-metrics-for-version
  kv-transfer-config kv-events-config long-prefill-token-threshold max-num-partial-prefills
  max-long-partial-prefills stream-interval tool-server tool-parser-plugin
  config model-impl enable-sleep-mode]])

local QUANT = { fp8 = "fp8", awq = "int4", awq_marlin = "int4", gptq = "int4",
  gptq_marlin = "int4", bitsandbytes = "nf4", ["compressed-tensors"] = "from-config",
  modelopt = "from-config", mxfp4 = "mxfp4", fbgemm_fp8 = "fp8", experts_int8 = "int8" }

local not_modelled = require("stdlib.formats").not_modelled

-- The serve table from engine arguments (keys spelled with '-').
function M.read(c, args)
  local s = { engine = "vllm" }
  c.serve = s
  c:walk(args, {
    model = function(cc, v, k) cc:model(v, k) end,
    ["gpu-memory-utilization"] = function(cc, v, k)
      s.gpu_memory_utilization = cc:num(k, v)
      if s.gpu_memory_utilization <= 0 or s.gpu_memory_utilization > 1 then
        cc:fail(k, "must be in (0, 1], got " .. tostring(v))
      end
    end,
    ["max-model-len"] = function(cc, v, k)
      local n = type(v) == "string" and v:lower() or v
      local mult = 1
      if type(n) == "string" and n:match("^%d+k$") then n, mult = n:sub(1, -2), 1024 end
      if type(n) == "string" and n:match("^%d+m$") then n, mult = n:sub(1, -2), 1048576 end
      s.max_model_len = cc:int(k, n) * mult
    end,
    ["max-num-seqs"] = function(cc, v, k) s.max_num_seqs = cc:int(k, v) end,
    ["max-num-batched-tokens"] = function(cc, v, k) s.max_num_batched_tokens = cc:int(k, v) end,
    ["kv-cache-dtype"] = function(cc, v, k) s.kv_cache_dtype = cc:str(k, v) end,
    ["block-size"] = function(cc, v, k) s.block_size = cc:int(k, v) end,
    ["tensor-parallel-size"] = function(cc, v, k) s.tensor_parallel_size = cc:int(k, v) end,
    ["pipeline-parallel-size"] = function(cc, v, k)
      s.pipeline_parallel_size = cc:int(k, v)
      if s.pipeline_parallel_size > 1 then
        cc:warn(k .. ": pipeline stages are not modelled; every rank priced with all layers")
      end
    end,
    ["data-parallel-size"] = function(cc, v, k)
      s.data_parallel_size = cc:int(k, v)
    end,
    ["enforce-eager"] = function(cc, v, k) s.enforce_eager = cc:bool(k, v) end,
    quantization = function(cc, v, k)
      local q = cc:str(k, v)
      if not QUANT[q] then cc:unknown(k, v) return end
      s.quantization = q
    end,
    ["-q"] = function(cc, v, k) cc:unknown(k, v) end,
    dtype = function(cc, v, k) s.dtype = cc:str(k, v) end,
    ["kv-cache-memory-bytes"] = function(cc, v, k) s.kv_cache_memory_bytes = cc:int(k, v) end,
    ["num-gpu-blocks-override"] = function(cc, v, k) s.num_gpu_blocks_override = cc:int(k, v) end,
    ["cpu-offload-gb"] = function(cc, v, k) s.cpu_offload_gb = cc:num(k, v) end,
    ["calculate-kv-scales"] = function() end,
    ["enable-lora"] = not_modelled("LoRA adapter slots (max-loras x max-lora-rank buffers)"),
    ["max-lora-rank"] = function() end,
    ["max-loras"] = function() end,
    ["max-cpu-loras"] = function() end,
    ["fully-sharded-loras"] = function() end,
    ["speculative-config"] = not_modelled("a speculative-decoding draft model"),
    ["limit-mm-per-prompt"] = not_modelled("the multimodal encoder's profile"),
    ["mm-processor-kwargs"] = function() end,
    ["compilation-config"] = not_modelled("a custom compilation config (capture sizes)"),
    ["-O"] = not_modelled("a custom compilation level"),
    ["cuda-graph-sizes"] = function(cc, v, k)
      s.cuda_graph_max = cc:int(k, type(v) == "table" and v[#v] or v)
    end,
    ["max-seq-len-to-capture"] = function() end,
    ["enable-expert-parallel"] = not_modelled("expert parallelism"),
    ["rope-scaling"] = function() end,
    ["rope-theta"] = function() end,
    ["disable-sliding-window"] = function(cc, v, k) s.disable_sliding_window = cc:bool(k, v) end,
  }, IGNORED)
  return s
end

local function dashed(doc)
  local args = {}
  for k, v in pairs(doc) do args[type(k) == "string" and k:gsub("_", "-") or k] = v end
  return args
end

function M.translate(c, doc, text)
  local args
  if type(doc) == "table" then
    args = dashed(doc)
  else
    args = M.parse_command(M.words(text or ""), c)
    -- `vllm serve --config FILE`: the file's arguments, the command line's win
    if type(args.config) == "string" then
      local path, loaded = require("stdlib.formats").find_file(args.config, c.file)
      if path and type(loaded) == "table" then
        for k, v in pairs(dashed(loaded)) do if args[k] == nil then args[k] = v end end
      else
        c:warn(("--config: cannot read '%s' (looked at %s); its arguments are NOT "
          .. "priced"):format(args.config, tostring(loaded)))
      end
    end
  end
  M.read(c, args)
  c.run.mode = "inference"
  c.run.batch = 1
  c.run.seq = 1
end

return M
