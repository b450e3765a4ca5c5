-- Quantized checkpoints: what a config.json's `quantization_config` makes
-- each quantized nn.Linear hold, in exact bytes, scales included.
--
--   fp8 (quant_method "fp8", DeepSeek-V3 / Qwen3-FP8): an e4m3 weight and an
--     fp32 weight_scale_inv per weight_block_size block (ceil(out/bo) x
--     ceil(in/bi)), or one fp32 scale per tensor without blocks
--   mxfp4 (gpt-oss): 4-bit blocks of 32 and one e8m0 scale byte per block
--     (blocks (out, in/32, 16) + scales (out, in/32) uint8)
--   gptq: qweight int32 (in*bits/32, out), qzeros int32 (groups, out*bits/32),
--     scales fp16 (groups, out), g_idx int32 (in); groups = ceil(in / group)
--     (group_size -1: one group)
--   awq: qweight int32 (in, out*bits/32), qzeros int32 (groups, out*bits/32),
--     scales fp16 (groups, out)
--   fbgemm_fp8 (transformers FbgemmFp8Linear): an e4m3 weight, an fp32
--     weight_scale per output row (out, 1) and an fp32 input_scale_ub (1)
--   compressed-tensors (llm-compressor / RedHatAI checkpoints): see ct() below
--   bitsandbytes 4-bit: the flattened weight in blocks of 64 (nf4 or fp4) with
--     an fp32 absmax per block, or int8 absmax + fp32 per 256 blocks with
--     double quantisation (runtime dtypes nf4 / nf4_dq); 8-bit: int8 weight +
--     an fp32 scale per output row (SCB)
-- Embeddings, norms and routers are never quantized; lm_head is not unless
-- the method says so (none of these does by default). modules_to_not_convert
-- names modules kept in the model dtype.
local vram = require("vram")
local errors = require("stdlib.errors")
local cfgutil = require("stdlib.config")

local Q = {}

local function ceil_div(a, b) return (a + b - 1) // b end

-- Projection leaves by group, as transformers names them.
Q.GROUPS = {
  self_attn = { q_proj = 1, k_proj = 1, v_proj = 1, o_proj = 1, qkv_proj = 1, q_a_proj = 1,
    q_b_proj = 1, kv_a_proj_with_mqa = 1, kv_b_proj = 1 },
  mlp = { gate_proj = 1, up_proj = 1, down_proj = 1, gate_up_proj = 1 },
}

local QUANTIZABLE = {}
for _, leaves in pairs(Q.GROUPS) do for k in pairs(leaves) do QUANTIZABLE[k] = true end end

-- modules_to_not_convert -> { [leaf or group] = true }. A pattern that
-- excepts a quantizable module in some layers only cannot be priced layer
-- by layer here: refused.
local function skips(list, c, field)
  local out = { lm_head = true }
  if list == nil then return out end
  if type(list) ~= "table" then c:fail(field, "must be a list of module names") end
  for i, pat in ipairs(list) do
    if type(pat) ~= "string" then c:fail(field .. "[" .. i .. "]", "must be a module name") end
    local leaf = pat:match("([^.]+)$")
    local per_layer = pat:match("layers%.%d+%.") ~= nil
    local names_group = Q.GROUPS[leaf] or leaf == "experts" or leaf == "mlp"
    if per_layer and (QUANTIZABLE[leaf] or names_group) then
      c:fail(field .. "[" .. i .. "]", ("'%s' keeps one layer's %s unquantized; per-layer "
        .. "exceptions are not modelled"):format(pat, leaf))
    end
    out[leaf] = true
  end
  return out
end

-- compressed-tensors: one config_groups scheme over every Linear. Tensor
-- shapes and dtypes as compressed-tensors writes them (vllm-project/
-- compressed-tensors, src/compressed_tensors/...):
--   weight: float-quantized fp8 / int-quantized and naive-quantized int8,
--     one byte a value; pack-quantized int4/int8 packs 32/bits values per
--     int32 along the input (weight_packed (out, ceil(in*bits/32))) and adds
--     weight_shape int64[2] (compressors/quantized_compressors/pack_quantized.py)
--   weight_scale in the checkpoint dtype (quantization/lifecycle/initialize.py
--     initialize_qparams: scale_dtype =
--     the observed weight's dtype): tensor (1), channel (out, 1), group
--     (out, ceil(in/group_size)), block (ceil(out/bo), ceil(in/bi))
--   weight_zero_point when asymmetric: pack-quantized group/channel packs it
--     along the output (ceil(out*bits/32), groups) int32; otherwise one byte
--     per scale (zp_dtype int8)
--   weight_g_idx int32 (in) with actorder "group" (vLLM's
--     compressed_tensors_wNa16 registers it)
--   static per-tensor input activations: input_scale (1) (+ a zero point
--     byte when asymmetric); dynamic ones store nothing.
local CT_FORMATS = { ["float-quantized"] = true, ["int-quantized"] = true,
  ["naive-quantized"] = true, ["pack-quantized"] = true }

-- ignore entries -> modules_to_not_convert-style names; "re:" patterns are
-- accepted when they name one module leaf (re:.*mlp.gate$: the MoE router,
-- never quantized here anyway).
local function ct_ignore(list, c)
  if list == nil then return nil, false end
  if type(list) ~= "table" then c:fail("ignore", "must be a list of module names") end
  local names, head = {}, false
  for i, pat in ipairs(list) do
    if type(pat) ~= "string" then c:fail("ignore[" .. i .. "]", "must be a module name") end
    local name = pat:gsub("^re:", ""):gsub("%$$", ""):gsub("^%.%*", "")
    if not name:match("^[%w_.]+$") then
      c:fail("ignore[" .. i .. "]", ("'%s' is a pattern this reader cannot map to modules"):format(pat))
    end
    if name:match("([^.]+)$") == "lm_head" then head = true end
    names[#names + 1] = name
  end
  return names, head
end

local function ct(d, qc, c, dtype)
  qc = cfgutil.strip_nulls(qc)
  local fmt = c:str("format", nil)
  if not CT_FORMATS[fmt] then
    c:fail("format", ("'%s' is not modelled (known: float-quantized, int-quantized, "
      .. "naive-quantized, pack-quantized)"):format(tostring(fmt)))
  end
  for _, k in ipairs({ "sparsity_config", "kv_cache_scheme", "transform_config" }) do
    local v = qc[k]
    if v ~= nil and v ~= vram.json.null and not (type(v) == "table" and next(v) == nil) then
      c:fail(k, "is set; compressed-tensors " .. k .. " is not modelled")
    end
  end
  local status = qc.quantization_status
  if status ~= nil and status ~= "compressed" then
    c:fail("quantization_status", ("'%s': only compressed checkpoints are modelled")
      :format(tostring(status)))
  end
  local groups, key = qc.config_groups, nil
  if type(groups) ~= "table" then c:fail("config_groups", "must be an object of schemes") end
  for k in pairs(groups) do
    if key then c:fail("config_groups", "several schemes (per-module) are not modelled") end
    key = k
  end
  if not key then c:fail("config_groups", "is empty") end
  local g = cfgutil.reader(groups[key], c.where or "", "quantization_config.config_groups."
    .. key .. ".")
  local t = groups[key].targets
  if type(t) ~= "table" or #t ~= 1 or t[1] ~= "Linear" then
    g:fail("targets", "only [\"Linear\"] (every linear layer) is modelled")
  end
  local ignore, head = ct_ignore(qc.ignore, c)
  if not head then
    c:fail("ignore", "does not name lm_head, so lm_head is quantized: not modelled")
  end
  for k in pairs(skips(ignore, c, "ignore")) do d.skip[k] = true end
  for _, k in ipairs({ "output_activations" }) do
    if groups[key][k] ~= nil and groups[key][k] ~= vram.json.null then g:fail(k, "is not modelled") end
  end
  local w = groups[key].weights
  if type(w) ~= "table" then g:fail("weights", "must be set (activation-only schemes are not modelled)") end
  local wr = cfgutil.reader(w, c.where or "", "quantization_config.config_groups." .. key .. ".weights.")
  local bits, typ = wr:int("num_bits", nil), wr:str("type", "int")
  local strategy, sym = wr:str("strategy", "tensor"), wr:bool("symmetric", true)
  if w.dynamic ~= nil and w.dynamic ~= false then wr:fail("dynamic", "dynamic weights are not modelled") end
  local packed = fmt == "pack-quantized"
  if typ == "float" then
    if bits ~= 8 or not (fmt == "float-quantized" or fmt == "naive-quantized") then
      wr:fail("num_bits", ("float %d-bit in %s is not modelled (fp8 in float-quantized is)")
        :format(bits, fmt))
    end
    d.store = "fp8_e4m3"
  elseif typ == "int" then
    if bits ~= 8 and not (bits == 4 and packed) then
      wr:fail("num_bits", ("int %d-bit in %s is not modelled (int4 pack-quantized, int8 are)")
        :format(bits, fmt))
    end
    if fmt == "float-quantized" then wr:fail("type", "int weights in float-quantized format") end
    d.store = "int" .. bits
  else
    wr:fail("type", "must be int or float, got " .. typ)
  end
  if typ == "float" and not sym then wr:fail("symmetric", "asymmetric fp8 is not modelled") end
  local gs, bs = w.group_size, w.block_structure
  if strategy == "group" then
    if math.type(gs) ~= "integer" or gs < 1 then wr:fail("group_size", "must be a positive integer") end
  elseif strategy == "block" then
    if type(bs) ~= "table" or #bs ~= 2 or math.type(bs[1]) ~= "integer"
        or math.type(bs[2]) ~= "integer" or bs[1] < 1 or bs[2] < 1 or packed then
      wr:fail("block_structure", "must be two positive integers [out, in] (not pack-quantized)")
    end
  elseif strategy ~= "tensor" and strategy ~= "channel" then
    wr:fail("strategy", "'" .. strategy .. "' is not modelled (tensor, channel, group, block)")
  end
  local order = w.actorder
  if order ~= nil and order ~= vram.json.null and order ~= "group" and order ~= "weight"
      and order ~= "static" then
    wr:fail("actorder", "must be group, weight, static or null")
  end
  local a, in_scale = groups[key].input_activations, 0
  if a ~= nil and a ~= vram.json.null then
    local ar = cfgutil.reader(a, c.where or "", "quantization_config.config_groups." .. key
      .. ".input_activations.")
    if a.dynamic == false then
      if ar:str("strategy", "tensor") ~= "tensor" then ar:fail("strategy", "static "
        .. "input activations are modelled per tensor only") end
      in_scale = { vram.bytes(dtype, 1), ar:bool("symmetric", true) and 0 or 1 }
    elseif a.dynamic ~= true then
      ar:fail("dynamic", "must be true or false, got " .. tostring(a.dynamic))
    end
  end
  local sbytes = vram.bytes(dtype, 1)
  d.note = ("compressed-tensors %s (%s %d-bit, %s): weights priced as stored, scales in %s; "
    .. "transformers' CompressedLinear decompresses each layer to the model dtype on its "
    .. "first forward and keeps it (set run.precision.dequantize: true to price that)")
    :format(fmt, typ, bits, strategy, dtype)
  d.tensors = function(out, inn)
    local scales = strategy == "tensor" and 1 or strategy == "channel" and out
      or strategy == "group" and vram.mul(out, ceil_div(inn, gs))
      or vram.mul(ceil_div(out, bs[1]), ceil_div(inn, bs[2]))
    local r = { packed and vram.mul(4, out, ceil_div(vram.mul(inn, bits), 32)) or vram.mul(out, inn),
      vram.mul(sbytes, scales) }
    if packed then r[#r + 1] = 16 end -- weight_shape int64[2]
    if not sym then
      local cols = strategy == "group" and ceil_div(inn, gs) or 1
      r[#r + 1] = (packed and strategy ~= "tensor") and vram.mul(4, ceil_div(vram.mul(out, bits), 32), cols)
        or scales
    end
    if order == "group" then r[#r + 1] = vram.mul(4, inn) end
    if type(in_scale) == "table" then
      for _, b in ipairs(in_scale) do if b > 0 then r[#r + 1] = b end end
    end
    return r
  end
end

-- Reads a quantization_config. Returns a description
-- { method, tensors(out, in) -> {bytes...}, store (a dtype name for reports),
--   skip = {leaf/group = true} } or raises naming the field.
function Q.read(qc, where, dtype)
  local c = cfgutil.reader(qc, where, "quantization_config.")
  -- NVIDIA ModelOpt writes its own keys (producer, quant_algo) and no
  -- quant_method (nvidia/*-FP8-Static-PerTensor): say which format it is
  local producer = type(qc.producer) == "table" and qc.producer.name
  if qc.quant_method == nil and (producer == "modelopt" or qc.quant_algo ~= nil) then
    c:fail("quant_algo", ("NVIDIA ModelOpt quantization (quant_algo %s) is not modelled; set "
      .. "run.precision.dequantize: true to price the weights unquantized")
      :format(tostring(qc.quant_algo)))
  end
  local method = c:str("quant_method", nil)
  local d = { method = method, skip = skips(qc.modules_to_not_convert, c,
    "modules_to_not_convert") }
  if method == "fp8" then
    local fmt = c:str("fmt", "e4m3")
    if fmt ~= "e4m3" and fmt ~= "e5m2" then c:fail("fmt", "must be e4m3 or e5m2, got " .. fmt) end
    d.store = "fp8_" .. fmt
    local bs = qc.weight_block_size
    if bs ~= nil then
      if type(bs) ~= "table" or #bs ~= 2 or math.type(bs[1]) ~= "integer"
          or math.type(bs[2]) ~= "integer" or bs[1] < 1 or bs[2] < 1 then
        c:fail("weight_block_size", "must be two positive integers [out, in]")
      end
      d.tensors = function(out, inn)
        return { vram.mul(out, inn), vram.mul(4, ceil_div(out, bs[1]), ceil_div(inn, bs[2])) }
      end
    else -- one fp32 scale per tensor (and one per input with static activations)
      local static = c:str("activation_scheme", "dynamic") == "static"
      d.tensors = function(out, inn)
        return static and { vram.mul(out, inn), 4, 4 } or { vram.mul(out, inn), 4 }
      end
    end
  elseif method == "mxfp4" then
    d.store = "mxfp4"
    d.tensors = function(out, inn, label)
      if inn % 32 ~= 0 then
        errors.input(where, "quantization_config", ("mxfp4 packs rows of 32: %s has %d inputs")
          :format(label or "a weight", inn))
      end
      return { vram.mul(out, inn // 2), vram.mul(out, inn // 32) }
    end
  elseif method == "gptq" or method == "awq" then
    local bits = c:int("bits", 4)
    if bits ~= 2 and bits ~= 3 and bits ~= 4 and bits ~= 8 then
      c:fail("bits", "must be 2, 3, 4 or 8, got " .. bits)
    end
    local group = qc.group_size or qc.q_group_size or 128
    if math.type(group) ~= "integer" or (group < 1 and group ~= -1) then
      c:fail("group_size", "must be a positive integer or -1, got " .. tostring(group))
    end
    d.store = "int" .. bits
    local gptq = method == "gptq"
    if not gptq and c:bool("zero_point", true) == false then
      c:fail("zero_point", "AWQ without zero points is not modelled")
    end
    d.tensors = function(out, inn)
      local groups = group == -1 and 1 or ceil_div(inn, group)
      local qweight = 4 * ceil_div(vram.mul(inn, out, bits), 32)
      local qzeros = vram.mul(4, groups, ceil_div(vram.mul(out, bits), 32))
      local scales = vram.mul(2, groups, out)
      if gptq then return { qweight, qzeros, scales, vram.mul(4, inn) } end
      return { qweight, qzeros, scales }
    end
  elseif method == "fbgemm_fp8" then
    d.store = "fp8_e4m3"
    d.tensors = function(out, inn) return { vram.mul(out, inn), vram.mul(4, out), 4 } end
  elseif method == "compressed-tensors" then
    if dtype == nil then
      c:fail("quant_method", "compressed-tensors keeps its scales in the checkpoint dtype: "
        .. "config.json needs torch_dtype")
    end
    ct(d, qc, c, dtype)
  elseif method == "bitsandbytes" then
    if c:bool("load_in_4bit", false) then
      local qt = c:str("bnb_4bit_quant_type", "fp4")
      if qt ~= "nf4" and qt ~= "fp4" then c:fail("bnb_4bit_quant_type", "must be nf4 or fp4") end
      -- fp4 and nf4 share the layout: 4-bit codes in blocks of 64
      d.store = c:bool("bnb_4bit_use_double_quant", false) and "nf4_dq" or "nf4"
      d.tensors = function(out, inn) return { vram.bytes(d.store, vram.mul(out, inn)) } end
      -- the dtype Linear4bit dequantizes to and multiplies in (spec.lua)
      if type(qc.bnb_4bit_compute_dtype) == "string" then
        local cd = qc.bnb_4bit_compute_dtype
        d.compute = vram.dtype(cd) or c:fail("bnb_4bit_compute_dtype", "unknown dtype '" .. cd
          .. "'")
      end
    elseif c:bool("load_in_8bit", false) then
      d.store = "int8"
      d.tensors = function(out, inn) return { vram.mul(out, inn), vram.mul(4, out) } end
    else
      c:fail("load_in_4bit", "a bitsandbytes config needs load_in_4bit or load_in_8bit")
    end
    local extra = qc.llm_int8_skip_modules
    if extra ~= nil then
      for k in pairs(skips(extra, c, "llm_int8_skip_modules")) do d.skip[k] = true end
    end
  else
    c:fail("quant_method", ("'%s' is not modelled (known: fp8, fbgemm_fp8, "
      .. "compressed-tensors, mxfp4, gptq, awq, bitsandbytes)")
      :format(tostring(method)))
  end
  return d
end

-- Whether the module `leaf` of `group` (self_attn, mlp, experts) is
-- quantized under description d.
function Q.applies(d, group, leaf)
  if not d or d.skip[leaf] or d.skip[group] then return false end
  if group == "experts" and d.skip.mlp then return false end
  return QUANTIZABLE[leaf] or group == "experts"
end

-- Bytes of one quantized weight (out x in) as the allocator holds it: each
-- stored tensor rounded to the block size on its own.
function Q.weight_bytes(S, d, out, inn, label)
  local total = 0
  for _, b in ipairs(d.tensors(out, inn, label)) do total = vram.add(total, S:round_bytes(b)) end
  return total
end

return Q
