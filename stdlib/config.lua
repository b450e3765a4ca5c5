-- Typed reads of config tables with errors that name the field and file.
local errors = require("stdlib.errors")
local M = {}

local Reader = {}
Reader.__index = Reader

function M.reader(tbl, where, prefix)
  return setmetatable({ t = tbl, where = where or "config", prefix = prefix or "" }, Reader)
end

function Reader:fail(key, what) errors.input(self.where, self.prefix .. key, what) end

function Reader:raw(key) return self.t[key] end

-- Integer >= 1 (or >= min). default used when absent; optional allows nil.
function Reader:int(key, default, optional, min)
  local v = self.t[key]
  if v == nil then
    if default ~= nil or optional then return default end
    self:fail(key, "is required but missing")
  end
  if math.type(v) ~= "integer" then
    if type(v) == "number" and v == math.floor(v) and math.abs(v) < 2^53 then
      v = math.tointeger(v)
    else
      self:fail(key, ("must be an integer, got %s"):format(type(v) == "string" and
        ("'" .. v .. "'") or tostring(v)))
    end
  end
  if v < (min or 1) then self:fail(key, ("must be >= %d, got %d"):format(min or 1, v)) end
  return v
end

function Reader:bool(key, default)
  local v = self.t[key]
  if v == nil then return default end
  if type(v) ~= "boolean" then self:fail(key, "must be true or false, got " .. tostring(v)) end
  return v
end

function Reader:str(key, default)
  local v = self.t[key]
  if v == nil then
    if default ~= nil then return default end
    self:fail(key, "is required but missing")
  end
  if type(v) ~= "string" then self:fail(key, "must be a string, got " .. tostring(v)) end
  return v
end

function Reader:num(key, default)
  local v = self.t[key]
  if v == nil then return default end
  if type(v) ~= "number" then self:fail(key, "must be a number, got " .. tostring(v)) end
  return v
end

-- A copy of a decoded JSON/YAML value with null (vram.json.null) removed,
-- so absent and null read the same.
local null = require("vram").json.null
function M.strip_nulls(v)
  if type(v) ~= "table" then
    if v == null then return nil end
    return v
  end
  local out = {}
  for k, x in pairs(v) do
    if x ~= null then out[k] = M.strip_nulls(x) end
  end
  return out
end

return M
