-- vramlua models [--json]
-- the model families, and the presets in examples/configs/ with their exact parameter counts
local vram = require("vram")
local errors = require("stdlib.errors")
local registry = require("models.registry")
local P = require("stdlib.params")

local HELP = [==[
usage: vramlua models [--json]

Lists the model families (the model_type values each one reads, see
models/registry.lua) and the presets in examples/configs/ with the exact
parameter count of each, next to the figure the model's publisher (or its
checkpoint) gives. "config" says whether the preset is the published
config.json verbatim or rebuilt from cited values (examples/configs/README.md).
A preset name works wherever a config path does:
  vramlua params qwen3_vl_4b_instruct]==]

local as_json
for _, a in ipairs({ ... }) do
  if a == "--help" or a == "-h" then print(HELP) return
  elseif a == "--json" then as_json = true
  else errors.usage("models: unknown argument '" .. a .. "'") end
end

local function load(name)
  local rel = registry.preset_path(name)
  for _, root in ipairs(vram.search_roots or { vram.share_dir }) do
    local ok, cfg = pcall(vram.json.load, root .. "/" .. rel)
    if ok then return cfg, rel end
  end
  errors.input(rel, "", "preset listed in models/registry.lua but its file is missing")
end

local rows = {}
for _, p in ipairs(registry.PRESETS) do
  local cfg, rel = load(p.name)
  local family, typed = registry.find(cfg, rel)
  local r = P.count(family, typed, rel)
  rows[#rows + 1] = { name = p.name, hf = p.hf, family = r.family, total = r.total,
    published = p.published, matches = p.published == nil and vram.json.null
      or (p.published == r.total),
    verbatim = p.verbatim }
end

if as_json then
  local fams = {}
  for i, f in ipairs(registry.list()) do
    fams[i] = { name = f.name, model_types = f.model_types, about = f.about }
  end
  print(vram.json.encode({ families = fams, presets = rows }, true))
  return
end

print("Families (picked by config.json model_type):")
for _, f in ipairs(registry.list()) do
  print(("  %-10s %-28s %s"):format(f.name, table.concat(f.model_types, ","), f.about))
end
print("")
print("Presets (examples/configs/NAME.json; counts are exact, tied weights once):")
print(("  %-38s %-10s %16s %16s  %-5s %s"):format("name", "family", "parameters", "published",
  "equal", "config"))
for _, r in ipairs(rows) do
  print(("  %-38s %-10s %16s %16s  %-5s %s"):format(r.name, r.family, P.commas(r.total),
    r.published and P.commas(r.published) or "-",
    r.published and (r.matches and "yes" or "NO") or "-",
    r.verbatim and "verbatim" or "rebuilt"))
end
