-- Input errors: one line naming the file, the field and what was wrong, a
-- chosen exit code and no traceback (the host prints `msg` alone).
local M = {}

local function raise(code, msg) error({ code = code, msg = msg }, 0) end

-- file -> { field path as errors name it ("run.lora.targets[2].rank") -> line }
local located = {}

-- Remembers where each key of a decoded YAML file stands (lines: mapping
-- table -> key -> line, from vram.yaml.load), so that M.input can give the
-- line of the field it names.
function M.locate(file, doc, lines)
  local at = {}
  local function walk(t, prefix)
    local own = lines[t]
    for k, v in pairs(t) do
      local path = math.type(k) == "integer" and ("%s[%d]"):format(prefix, k)
        or (prefix == "" and tostring(k) or prefix .. "." .. tostring(k))
      if own and own[k] then at[path] = own[k] end
      if type(v) == "table" then walk(v, path) end
    end
  end
  if type(doc) == "table" then walk(doc, "") end
  located[file] = at
end

-- M.input("spec.yaml", "run.batch", "must be a positive integer, got -3"):
-- "spec.yaml:7: run.batch: ..." when the file was located and has the field
function M.input(file, field, what)
  local parts = {}
  local line = file and field and located[file] and located[file][field]
  if file then parts[#parts + 1] = line and file .. ":" .. line or file end
  if field and field ~= "" then parts[#parts + 1] = field end
  parts[#parts + 1] = what
  raise(1, table.concat(parts, ": "))
end

function M.usage(msg) raise(2, msg .. "\n(see `vramlua help`)") end

-- Closest name in `known` to `name`, for "did you mean" hints.
function M.suggest(name, known)
  local function dist(a, b)
    local prev = {}
    for j = 0, #b do prev[j] = j end
    for i = 1, #a do
      local cur = { [0] = i }
      for j = 1, #b do
        local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
        cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
      end
      prev = cur
    end
    return prev[#b]
  end
  local best, bestd
  for _, k in ipairs(known) do
    local d = dist(name, k)
    if not bestd or d < bestd then best, bestd = k, d end
  end
  if best and bestd <= math.max(2, #name // 3) then return best end
end

-- A mapping whose keys must all be in `allowed` (a set); an unknown key is
-- an error naming prefix..key with the closest known name as a hint.
function M.keys(tbl, allowed, where, prefix)
  if type(tbl) ~= "table" or tbl[1] ~= nil then
    M.input(where, prefix:gsub("%.$", ""), "must be a mapping, got " ..
      (type(tbl) == "table" and "a list" or type(tbl) .. " " .. tostring(tbl)))
  end
  for k in pairs(tbl) do
    if not allowed[k] then
      local known = {} -- sorted only for the message
      for a in pairs(allowed) do known[#known + 1] = a end
      table.sort(known)
      local hint = type(k) == "string" and M.suggest(k, known)
      M.input(where, prefix .. tostring(k), "unknown field" ..
        (hint and ("; did you mean '" .. hint .. "'?") or
          (" (known: " .. table.concat(known, ", ") .. ")")))
    end
  end
end

return M
