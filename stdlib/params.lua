-- Exact parameter counts of a Hugging Face config.json, whatever its family:
-- the caller picks the family module (models/registry.lua: find), the
-- family reads the config and counts its parts (models/README.md).
--
--   local P = require("stdlib.params")
--   local fam = registry.find(cfg, "config.json")   -- models/registry.lua
--   local r = P.count(fam, cfg, "config.json")
--   r.total, r.trainable, r.parts = {{name=, params=, tower=}...}
--   r.tied_duplicate: parameters a checkpoint format that stores tied
--   weights twice (a Flax/JAX tree, some exports) adds on top of r.total.
local vram = require("vram")
local cfgutil = require("stdlib.config")
local errors = require("stdlib.errors")

local M = {}

-- opts.freeze: list of towers ("llm", "vision", "projector") whose
-- parameters do not train; trainable = total minus those.
function M.count(family, cfg, where, opts)
  where = where or "config"
  opts = opts or {}
  if type(cfg) ~= "table" then errors.input(where, "", "a config must be a JSON object") end
  cfg = cfgutil.strip_nulls(cfg)
  local p = family.params(family.read(cfg, where))
  local r = { family = family.name, parts = {}, tied_duplicate = p.tied_duplicate or 0 }
  local frozen = {}
  for _, t in ipairs(opts.freeze or {}) do frozen[t] = true end
  r.total, r.trainable = 0, 0
  for i, x in ipairs(p.parts) do
    r.parts[i] = { name = x.name, params = x.params, note = x.note, tower = x.tower or "llm" }
    r.total = vram.add(r.total, x.params)
    if not frozen[r.parts[i].tower] then r.trainable = r.trainable + x.params end
  end
  return r
end

-- A family's params(m) result from its own parts followed by those of a
-- counted sub-model (a VLM's language model: {parts, tied_duplicate}).
function M.followed_by(parts, sub)
  for _, p in ipairs(sub.parts) do parts[#parts + 1] = p end
  return { parts = parts, tied_duplicate = sub.tied_duplicate }
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
