-- What a checkpoint holds, from its safetensors headers alone: every
-- tensor's dtype and shape (the 8-byte-length-prefixed JSON at the start of
-- each shard, vram.json.safetensors_header), so counts and dtypes are exact
-- for any checkpoint, quantized ones included, without the modelling code.
--
--   local st = require("stdlib.safetensors")
--   local c = st.read("path/model.safetensors.index.json")  -- or a shard, or a folder
--   c.tensors, c.elements, c.bytes, c.by_dtype = {{dtype=, elements=, bytes=}...},
--   c.files (shards read), c.missing (shards the index names that are absent)
local vram = require("vram")
local errors = require("stdlib.errors")

local M = {}

local function dirname(p) return p:match("^(.*)/[^/]*$") or "." end

-- Sums one decoded header into acc. Bytes come from data_offsets, so they
-- hold for packed formats whose dtype has no element size.
local function add_header(acc, h, where)
  for name, t in pairs(h) do
    if name ~= "__metadata__" then
      if type(t) ~= "table" or type(t.dtype) ~= "string" or type(t.shape) ~= "table"
          or type(t.data_offsets) ~= "table" then
        errors.input(where, name, "is not a safetensors tensor entry (dtype, shape, data_offsets)")
      end
      local n = 1
      for i, d in ipairs(t.shape) do
        if math.type(d) ~= "integer" or d < 0 then
          errors.input(where, name .. ".shape[" .. i .. "]", "must be an integer >= 0")
        end
        n = vram.mul(n, d)
      end
      local a, b = t.data_offsets[1], t.data_offsets[2]
      if math.type(a) ~= "integer" or math.type(b) ~= "integer" or b < a or a < 0 then
        errors.input(where, name .. ".data_offsets", "must be two integers 0 <= begin <= end")
      end
      local d = acc.dt[t.dtype]
      if not d then
        d = { dtype = t.dtype, elements = 0, bytes = 0, tensors = 0 }
        acc.dt[t.dtype] = d
        acc.by_dtype[#acc.by_dtype + 1] = d
      end
      d.elements = vram.add(d.elements, n)
      d.bytes = vram.add(d.bytes, b - a)
      d.tensors = d.tensors + 1
      acc.tensors = acc.tensors + 1
      acc.elements = vram.add(acc.elements, n)
      acc.bytes = vram.add(acc.bytes, b - a)
    end
  end
end

local function new_acc()
  return { tensors = 0, elements = 0, bytes = 0, by_dtype = {}, dt = {}, files = {}, missing = {} }
end

local function finish(acc)
  table.sort(acc.by_dtype, function(x, y) return x.bytes > y.bytes end)
  acc.dt = nil
  return acc
end

-- A model.safetensors.index.json: the shards its weight_map names, each
-- header read; shards that are not there are listed in `missing`, and the
-- index's metadata.total_size is kept.
local function read_index(path)
  local idx = vram.json.load(path)
  if type(idx) ~= "table" or type(idx.weight_map) ~= "table" then
    errors.input(path, "weight_map", "is required in a safetensors index")
  end
  local acc = new_acc()
  acc.index_total_size = type(idx.metadata) == "table" and
    math.tointeger(idx.metadata.total_size) or nil
  local seen, shards = {}, {}
  for _, f in pairs(idx.weight_map) do
    if type(f) ~= "string" or f:find("/", 1, true) or f:find("..", 1, true) then
      errors.input(path, "weight_map", "names a shard that is not a file beside the index: "
        .. tostring(f))
    end
    if not seen[f] then
      seen[f] = true
      shards[#shards + 1] = f
    end
  end
  table.sort(shards)
  for _, f in ipairs(shards) do
    local p = dirname(path) .. "/" .. f
    local ok, h = pcall(vram.json.safetensors_header, p)
    if ok then
      add_header(acc, h, p)
      acc.files[#acc.files + 1] = p
    else
      local msg = type(h) == "table" and h.msg or tostring(h)
      if not msg:find("cannot open", 1, true) then error(h, 0) end
      acc.missing[#acc.missing + 1] = p
    end
  end
  return finish(acc)
end

-- The checkpoint at path: a .safetensors file, an index, or a folder
-- holding model.safetensors.index.json or model.safetensors. Returns nil
-- when a folder holds neither.
function M.read(path)
  if path:match("%.safetensors$") then
    local acc = new_acc()
    add_header(acc, vram.json.safetensors_header(path), path)
    acc.files[1] = path
    return finish(acc)
  end
  if path:match("%.json$") then return read_index(path) end
  local idx = path .. "/model.safetensors.index.json"
  local ok, r = pcall(read_index, idx)
  if ok then return r end
  local msg = type(r) == "table" and r.msg or tostring(r)
  if not msg:find("cannot open", 1, true) then error(r, 0) end
  local single = path .. "/model.safetensors"
  local ok2, h = pcall(vram.json.safetensors_header, single)
  if ok2 then
    local acc = new_acc()
    add_header(acc, h, single)
    acc.files[1] = single
    return finish(acc)
  end
  local msg2 = type(h) == "table" and h.msg or tostring(h)
  if not msg2:find("cannot open", 1, true) then error(h, 0) end
  return nil
end

-- Floating dtypes whose elements are parameters one for one.
M.PLAIN = { F64 = true, F32 = true, F16 = true, BF16 = true }

-- Whether every tensor is a plain float (no packed or scale tensors).
function M.plain(c)
  for _, d in ipairs(c.by_dtype) do
    if not M.PLAIN[d.dtype] then return false end
  end
  return true
end

-- One line comparing checkpoint k with the config count r (stdlib/params)
-- and, for a packed checkpoint, with `priced`: the bytes vramlua holds its
-- weights in. Says which applies and flags a difference.
function M.compare(k, r, priced)
  local commas = require("stdlib.params").commas
  if M.plain(k) then
    if k.elements == r.total then
      return ("config count equals the checkpoint's: %s"):format(commas(r.total))
    end
    if r.tied_duplicate > 0 and k.elements == r.total + r.tied_duplicate then
      return ("config count %s equals the checkpoint's once its second copy of the tied "
        .. "embedding (%s) is added"):format(commas(r.total), commas(r.tied_duplicate))
    end
    return ("DIFFERENT: the config counts %s, the checkpoint holds %s (%s%s)"):format(
      commas(r.total), commas(k.elements), k.elements > r.total and "+" or "",
      commas(k.elements - r.total))
  end
  if priced == nil then
    return ("packed or quantized tensors: the checkpoint's %s elements are not parameters one "
      .. "for one; the config counts %s"):format(commas(k.elements), commas(r.total))
  end
  if priced == k.bytes then
    return ("quantized: the weights vramlua prices, %s bytes, equal the checkpoint's"):format(
      commas(priced))
  end
  return ("DIFFERENT: vramlua prices the weights at %s bytes, the checkpoint holds %s (%s%s)")
    :format(commas(priced), commas(k.bytes), k.bytes > priced and "+" or "",
      commas(k.bytes - priced))
end

return M
