-- Exact parameter counts of a Hugging Face config.json, whatever its family:
-- models/registry.lua picks the family file, the family counts its parts.
--
--   local P = require("stdlib.params")
--   local r = P.count(cfg, "config.json")   -- or P.load("path/config.json")
--   r.total, r.trainable, r.parts = {{name=, params=, tower=}...}
--   r.tied_duplicate: parameters a checkpoint format that stores tied
--   weights twice (a Flax/JAX tree, some exports) adds on top of r.total.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")
local registry = require("models.registry")

local M = {}

local function sum(parts)
  local t = 0
  for _, p in ipairs(parts) do t = vram.add(t, p.params) end
  return t
end

-- opts.freeze: list of towers ("llm", "vision", "projector") whose
-- parameters do not train; trainable = total minus those.
function M.count(cfg, where, opts)
  where = where or "config"
  opts = opts or {}
  if type(cfg) ~= "table" then errors.input(where, "", "a config must be a JSON object") end
  cfg = cfgutil.strip_nulls(cfg)
  local entry = registry.find(cfg, where)
  cfg = registry.with_model_type(entry, cfg)
  local fam = require(entry.module)
  local r
  local fn = fam[entry.fn or "count"]
  if fn then
    r = fn(cfg, where)
  elseif fam.normalize and fam.params then
    local p = fam.params(fam.normalize(cfg, where))
    r = { parts = {}, tied_duplicate = p.tied_extra or 0 }
    for i, x in ipairs(p.parts) do
      r.parts[i] = { name = x.name, params = x.params, note = x.note, tower = "llm" }
    end
  else
    errors.input(where, "model_type", ("family '%s' (%s) exports neither count() nor "
      .. "normalize()+params()"):format(entry.name, entry.module))
  end
  local frozen = {}
  for _, t in ipairs(opts.freeze or {}) do frozen[t] = true end
  r.family = entry.name
  r.total = sum(r.parts)
  r.trainable = 0
  for _, p in ipairs(r.parts) do
    if not frozen[p.tower or "llm"] then r.trainable = r.trainable + p.params end
  end
  r.tied_duplicate = r.tied_duplicate or 0
  return r
end

-- The language model of a VLM through models/decoder.lua. tcfg: its text
-- config; set: keys forced (e.g. model_type), defaults: keys used when the
-- config leaves them out (the transformers config class defaults).
-- Returns parts (tower "llm", names prefixed), the decoder's normalized
-- model and the tied embedding size (0 when untied).
function M.text_parts(tcfg, where, set, defaults, prefix)
  local c = {}
  for k, v in pairs(defaults or {}) do c[k] = v end
  for k, v in pairs(tcfg) do c[k] = v end
  for k, v in pairs(set or {}) do c[k] = v end
  local decoder = require("models.decoder")
  local m = decoder.normalize(c, where)
  local p = decoder.params(m)
  local parts = {}
  for i, x in ipairs(p.parts) do
    parts[i] = { name = (prefix or "") .. x.name, params = x.params, note = x.note,
      tower = "llm" }
  end
  return parts, m, p.tied_extra or 0
end

-- Appends the parts of `more` to `parts`.
function M.append(parts, more)
  for _, p in ipairs(more) do parts[#parts + 1] = p end
  return parts
end

function M.load(path, opts)
  return M.count(vram.json.load(path), path, opts)
end

-- Totals by tower, in first-seen order: {{tower=, params=}...}
function M.towers(r)
  local out, at = {}, {}
  for _, p in ipairs(r.parts) do
    local t = p.tower or "llm"
    if not at[t] then
      out[#out + 1] = { tower = t, params = 0 }
      at[t] = out[#out]
    end
    at[t].params = at[t].params + p.params
  end
  return out
end

-- 1234567 -> "1,234,567"
function M.commas(n)
  local s = tostring(math.tointeger(n) or n)
  local sign, digits = s:match("^(-?)(%d+)$")
  if not digits then return s end
  local out = digits:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  if out:sub(1, 1) == "," then out = out:sub(2) end
  return sign .. out
end

return M
