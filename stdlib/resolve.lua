-- Where a model's config.json comes from, given what a user wrote: a path
-- (a config.json or a directory holding one), a Hugging Face hub id found in
-- the local hub cache, or a hub id that a preset records. One resolver for
-- run specs, training configs and `params`; stdlib never requires models, so
-- the presets are passed in (models/registry.lua PRESETS: {name=, hf=...}).
local vram = require("vram")
local errors = require("stdlib.errors")

local M = {}

local function dirname(p) return p:match("^(.*)/[^/]*$") or "." end
M.dirname = dirname

local function is_parse_error(msg)
  return type(msg) == "string" and (msg:find(": json: ", 1, true) or msg:find(": yaml: ", 1, true))
end

-- Loads the JSON at path: the table, or nil and why not. A file that exists
-- but does not parse raises its own error (that file is the answer).
local function try_json(path)
  local ok, v = pcall(vram.json.load, path)
  if ok then return v end
  if is_parse_error(v) then error(v, 0) end
  return nil, type(v) == "table" and v.msg or tostring(v)
end

-- A hub id as the cache spells its folder: "Qwen/Qwen2.5-7B" ->
-- "models--Qwen--Qwen2.5-7B" (huggingface_hub's repo_folder_name).
function M.hub_folder(id) return "models--" .. id:gsub("/", "--") end

-- "ORG/NAME" or "NAME", with the characters hub ids allow.
function M.is_hub_id(s)
  return type(s) == "string" and s:match("^[%w][%w._%-]*/?[%w._%-]*$") ~= nil
    and not s:find("..", 1, true) and not s:match("%.json$")
end

-- The config.json of id in the hub cache: the snapshot refs/main names
-- (the sandbox lists no directories, so the ref is read, not globbed), or
-- the revision given. Returns path, cfg, or nil and the path looked at.
function M.hub_cache(id, revision)
  local root = vram.hf_hub_cache
  if not root or not M.is_hub_id(id) then return nil, nil end
  local base = root .. "/" .. M.hub_folder(id)
  local rev = revision
  if not rev or not rev:match("^%x+$") or #rev ~= 40 then
    local ok, ref = pcall(vram.text.load, base .. "/refs/" .. (rev or "main"))
    if not ok then return nil, base .. "/refs/" .. (rev or "main") end
    rev = ref:match("^%s*(%x+)%s*$")
    if not rev then return nil, base .. "/refs/" .. (revision or "main") end
  end
  local path = base .. "/snapshots/" .. rev .. "/config.json"
  local cfg = try_json(path)
  if cfg then return path, cfg end
  return nil, path
end

-- The preset whose hub ids include id (case-insensitively, as the Hub
-- matches names), from presets = {{name=, hf=ID or {ID...}}...}.
function M.preset_for(id, presets)
  local want = id:lower()
  for _, p in ipairs(presets or {}) do
    local ids = type(p.hf) == "table" and p.hf or { p.hf }
    for _, h in ipairs(ids) do
      if type(h) == "string" and h:lower() == want then return p end
    end
  end
end

-- A file shipped with vramlua (a preset): VRAMLUA_PATH roots, then the share
-- directory.
function M.shipped(rel)
  for _, root in ipairs(vram.search_roots or { vram.share_dir }) do
    local cfg = try_json(root .. "/" .. rel)
    if cfg then return root .. "/" .. rel, cfg end
  end
end

-- Resolves ref to {path=, config=, source=, preset=} where source is
-- "file", "hf-cache" or "preset". opts: base_dir (directory of the file that
-- names the model; tried before the working directory), presets,
-- preset_path(name) -> path relative to the share dir, revision, where and
-- field (for the error).
function M.model(ref, opts)
  opts = opts or {}
  local where, field = opts.where, opts.field or "model"
  if type(ref) ~= "string" or ref == "" then
    errors.input(where, field, "must name a model (a path or a hub id), got " .. tostring(ref))
  end
  local tried, refusal = {}, nil
  local function local_try(p)
    for _, cand in ipairs({ p, p .. "/config.json" }) do
      local cfg, why = try_json(cand)
      if cfg then return cand, cfg end
      tried[#tried + 1] = cand
      if why and why:find("outside the sandbox", 1, true) and not refusal then refusal = why end
    end
  end
  local bases = {}
  if ref:sub(1, 1) == "/" then
    bases[1] = ref
  else
    if opts.base_dir and opts.base_dir ~= "." then bases[#bases + 1] = opts.base_dir .. "/" .. ref end
    bases[#bases + 1] = ref
  end
  for _, p in ipairs(bases) do
    local path, cfg = local_try(p)
    if path then return { path = path, config = cfg, source = "file" } end
  end
  local cache_path
  if M.is_hub_id(ref) then
    local path, cfg = M.hub_cache(ref, opts.revision)
    if path then return { path = path, config = cfg, source = "hf-cache" } end
    cache_path = cfg
    local p = M.preset_for(ref, opts.presets)
    if p and opts.preset_path then
      local ppath, pcfg = M.shipped(opts.preset_path(p.name))
      if ppath then return { path = ppath, config = pcfg, source = "preset", preset = p.name } end
    end
  end
  local looked = ("looked for %s"):format(table.concat(tried, ", "))
  if cache_path then
    looked = looked .. ("; not in the Hugging Face cache (%s)"):format(cache_path)
  elseif M.is_hub_id(ref) then
    looked = looked .. "; no Hugging Face cache directory (set HF_HOME or HF_HUB_CACHE)"
  end
  if refusal then looked = looked .. "; " .. refusal end
  errors.input(where, field, ("cannot resolve model '%s' (%s; no preset records this hub id). "
    .. "Fix it one of three ways: pass --model CONFIG.json (the model's config.json); "
    .. "download it into the Hugging Face cache (huggingface-cli download %s config.json); "
    .. "or add the hub id to a preset's hf list in models/registry.lua (`vramlua models` lists "
    .. "the presets)"):format(ref, looked, ref))
end

return M
