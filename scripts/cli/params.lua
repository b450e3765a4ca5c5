-- vramlua params CONFIG.json [--json] [--freeze TOWER[,TOWER]]
-- exact parameter counts of a Hugging Face config
local vram = require("vram")
local errors = require("stdlib.errors")
local spec = require("stdlib.spec")
local P = require("stdlib.params")

local HELP = [==[
usage: vramlua params CONFIG.json [--json] [--freeze TOWER[,TOWER...]]

Exact parameter counts of a Hugging Face config.json: each part of the
model (vision tower, projector, language model) and the total, counted as
PyTorch holds the model (a tied lm_head once). CONFIG is a path, or the
name of a preset in examples/configs/ (`vramlua models` lists them).
The family is picked by the config's model_type (see models/registry.lua).

  --json            {"family", "total", "trainable", "tied_duplicate",
                     "parts": [{"name", "params", "tower"}]}, exact integers
  --freeze TOWERS   count llm, vision, projector or text as not trainable

tied_duplicate is what a format that stores tied weights twice (a Flax
tree, some exports) adds on top of the total.]==]

local a = require("stdlib.args").parse({ ... }, { help = false, json = false, freeze = "" },
  { positional = 1, noun = "CONFIG", metavar = { freeze = "TOWER[,TOWER...]" } })
if a.help then print(HELP) return end
local path, as_json = a[1], a.json
local freeze = {}
for t in (a.freeze or ""):gmatch("[^,]+") do
  if t ~= "llm" and t ~= "vision" and t ~= "projector" and t ~= "text" then
    errors.input(nil, "--freeze", ("unknown tower '%s' (known: llm, vision, projector, text)")
      :format(t))
  end
  freeze[#freeze + 1] = t
end
if not path then errors.usage("params needs a CONFIG.json (or a preset name)") end

local where, cfg
do
  local name = path
  if not name:find("%.[jJyY][sSaA]?[oOmM]?[nNlL]?$") and not name:find("/") then
    name = name .. ".json" -- a bare preset name
  end
  local ok, p, c = pcall(spec.resolve, name, ".")
  if not ok then
    local msg = type(p) == "table" and p.msg or tostring(p)
    if msg:find("cannot find", 1, true) then
      errors.input(path, "", "cannot open the config (not a file, nor a preset in "
        .. "examples/configs/; `vramlua models` lists the presets)")
    end
    error(p, 0)
  end
  where = p:gsub("^%./", "")
  cfg = c or spec.load_file(p)
end

local r = P.count(cfg, where, { freeze = freeze })

if as_json then
  local parts = {}
  for k, p in ipairs(r.parts) do
    parts[k] = { name = p.name, params = p.params, tower = p.tower or "llm", note = p.note }
  end
  print(vram.json.encode({ family = r.family, total = r.total, trainable = r.trainable,
    tied_duplicate = r.tied_duplicate, parts = parts }, true))
  return
end

local c = P.commas
print(("%s  (family %s)"):format(where, r.family))
print(("%-44s %-10s %16s"):format("part", "tower", "parameters"))
for _, p in ipairs(r.parts) do
  print(("%-44s %-10s %16s%s"):format(p.name, p.tower or "llm", c(p.params),
    p.note and ("  " .. p.note) or ""))
end
for _, t in ipairs(P.towers(r)) do
  print(("%-44s %-10s %16s"):format("  subtotal", t.tower, c(t.params)))
end
print(("%-55s %16s"):format("total", c(r.total)))
if r.trainable ~= r.total then print(("%-55s %16s"):format("trainable", c(r.trainable))) end
if r.tied_duplicate > 0 then
  print(("tied embedding: %s parameters held once; a format that stores it twice holds %s")
    :format(c(r.tied_duplicate), c(r.total + r.tied_duplicate)))
end
