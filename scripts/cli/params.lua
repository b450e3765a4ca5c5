-- vramlua params CONFIG.json [--json] [--freeze TOWER[,TOWER]]
-- exact parameter counts of a Hugging Face config, beside its safetensors headers
local vram = require("vram")
local st = require("stdlib.safetensors")
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
tree, some exports) adds on top of the total.

When the config's folder holds safetensors (model.safetensors.index.json
and its shards, or model.safetensors), their headers are read (never the
tensors) and the checkpoint's count, dtypes and bytes are printed beside
the config's count, with any difference flagged; for a quantized checkpoint
the bytes are compared with what vramlua prices its weights at. CONFIG may
also be a .safetensors file or an index: then the headers alone are
reported. JSON: "checkpoint": {"files", "tensors", "elements", "bytes",
"by_dtype", "verdict"}.]==]

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

-- A checkpoint named directly: its headers, and the config beside it if any.
local ckpt_only = path:match("%.safetensors$") or path:match("safetensors%.index%.json$")

local function dirname(p) return p:match("^(.*)/[^/]*$") or "." end

local c = P.commas

local function ckpt_json(k)
  if not k then return nil end
  local by = {}
  for i, d in ipairs(k.by_dtype) do
    by[i] = { dtype = d.dtype, tensors = d.tensors, elements = d.elements, bytes = d.bytes }
  end
  return { files = k.files, missing = #k.missing > 0 and k.missing or nil, tensors = k.tensors, elements = k.elements,
    bytes = k.bytes, by_dtype = by, index_total_size = k.index_total_size, verdict = k.verdict }
end

local function print_ckpt(k)
  print(("checkpoint (safetensors headers, %d file(s)%s): %s tensors, %s elements, %s bytes")
    :format(#k.files, #k.missing > 0 and (", " .. #k.missing .. " named but absent") or "",
      c(k.tensors), c(k.elements), c(k.bytes)))
  for _, d in ipairs(k.by_dtype) do
    print(("  %-10s %6d tensors %18s elements %18s bytes"):format(d.dtype, d.tensors,
      c(d.elements), c(d.bytes)))
  end
  if k.verdict then print(k.verdict) end
end

if ckpt_only then
  local k = st.read(path)
  local beside = dirname(path) .. "/config.json"
  local ok, bcfg = pcall(vram.json.load, beside)
  local shard = path:match("%-%d+%-of%-%d+%.safetensors$")
  if shard then
    k.verdict = "one shard of several: name the index (model.safetensors.index.json) "
      .. "to compare the whole checkpoint with its config"
  elseif ok and type(bcfg) == "table" then
    local okc, r = pcall(function()
      local family, typed = require("models.registry").find(bcfg, beside)
      return P.count(family, typed, beside)
    end)
    if okc then
      k.verdict = st.compare(k, r, nil)
    end
  end
  if as_json then print(vram.json.encode({ checkpoint = ckpt_json(k) }, true)) return end
  print_ckpt(k)
  return
end

local where, cfg
do
  local name = path
  if not name:find("%.[jJyY][sSaA]?[oOmM]?[nNlL]?$") and not name:find("/") then
    name = name .. ".json" -- a bare preset name
  end
  local ok, p, c = pcall(spec.resolve, name, ".", nil, require("models.registry"))
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

local family, typed = require("models.registry").find(cfg, where)
local r = P.count(family, typed, where, { freeze = freeze })

-- The checkpoint beside the config, when there is one (and it may be read).
local ckpt
do
  local ok, k = pcall(st.read, dirname(where))
  if ok and k then
    local priced
    if cfg.quantization_config ~= nil or not st.plain(k) then
      -- what vramlua prices the stored weights at (inference, exact bytes)
      local okp, stp = pcall(function()
        return require("stdlib.step").run(spec.normalize({ model = { config = where },
          run = { mode = "inference", batch = 1, seq = 1, framework = "pytorch-cpu" } },
          where, require("models.registry")))
      end)
      priced = okp and stp.live_by_category.weights or nil
    end
    k.verdict = st.compare(k, r, priced)
    ckpt = k
  elseif not ok then
    local msg = type(k) == "table" and k.msg or tostring(k)
    if not msg:find("outside the sandbox", 1, true) then error(k, 0) end
  end
end

if as_json then
  local parts = {}
  for k, p in ipairs(r.parts) do
    parts[k] = { name = p.name, params = p.params, tower = p.tower or "llm", note = p.note }
  end
  print(vram.json.encode({ family = r.family, total = r.total, trainable = r.trainable,
    tied_duplicate = r.tied_duplicate, parts = parts, checkpoint = ckpt_json(ckpt) }, true))
  return
end

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
if ckpt then print_ckpt(ckpt) end
