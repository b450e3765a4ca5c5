-- Input errors: one line naming the file, the field and what was wrong, a
-- chosen exit code and no traceback (the host prints `msg` alone).
local M = {}

local function raise(code, msg) error({ code = code, msg = msg }, 0) end

-- M.input("spec.yaml", "run.batch", "must be a positive integer, got -3")
function M.input(file, field, what)
  local parts = {}
  if file then parts[#parts + 1] = file end
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
