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

-- Reads a quantization_config. Returns a description
-- { method, tensors(out, in) -> {bytes...}, store (a dtype name for reports),
--   skip = {leaf/group = true} } or raises naming the field.
function Q.read(qc, where)
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
  elseif method == "bitsandbytes" then
    if c:bool("load_in_4bit", false) then
      local qt = c:str("bnb_4bit_quant_type", "fp4")
      if qt ~= "nf4" and qt ~= "fp4" then c:fail("bnb_4bit_quant_type", "must be nf4 or fp4") end
      -- fp4 and nf4 share the layout: 4-bit codes in blocks of 64
      d.store = c:bool("bnb_4bit_use_double_quant", false) and "nf4_dq" or "nf4"
      d.tensors = function(out, inn) return { vram.bytes(d.store, vram.mul(out, inn)) } end
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
    c:fail("quant_method", ("'%s' is not modelled (known: fp8, mxfp4, gptq, awq, bitsandbytes)")
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
