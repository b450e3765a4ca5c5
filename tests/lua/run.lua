-- Lua test runner: vramlua run tests/lua/run.lua [MODULE...]
--
-- The sandbox cannot list directories, so the modules to run are listed in
-- MODULES below: each is a file tests/lua/<name>.lua, loaded with require
-- (found beside this script). A listed module that fails to load is a
-- failure, never skipped. Naming modules on the command line runs only those.
--
-- Conventions for a test module (all three may be mixed):
--   * Assertions at top level: the module just calls T.eq/T.ok/... while it
--     is being required.
--   * Returning a table of functions: { name_as_a_sentence = function() ... end }.
--     Each function is called in name order; an error it raises counts as a
--     failure of that test and the next one runs.
--   * Registering with T.test("name as a sentence", function() ... end) while
--     loading; registered tests run after the module has loaded, in order.
-- Known bugs: a test whose table key starts with "known_bug_", or one
-- registered with T.known_bug(name, fn), reproduces a defect of the program
-- and fails until it is fixed; `run.lua --skip-known-bugs` skips them (as
-- CK_EXCLUDE_TAGS=known_bug does for the C and CLI tests).
--
-- The global T:
--   T.eq(actual, expected [, msg])   equality; tables are compared deeply;
--                                    1 and 1.0 are equal (use T.int to insist
--                                    on an integer)
--   T.ok(cond [, msg])               truthy
--   T.int(x [, msg])                 math.type(x) == "integer"
--   T.near(a, b [, rel [, msg]])     |a - b| <= rel * max(|a|, |b|); rel 1e-9
--   T.raises(fn, fragment [, msg])   fn() must raise an error whose message
--                                    contains fragment (plain find); returns
--                                    the message. A structured error table
--                                    {msg=...} is matched on its msg.
--   T.test(name, fn)                 registers a test (see above)
--   T.tmpfile                        nil in the sandbox (no io): tests that
--                                    need files must check for nil. Only
--                                    under `vramlua --trust run` is it
--                                    T.tmpfile(content) -> path of a new
--                                    file holding content, removed at the end.
-- Assertions do not stop the test: each passing assertion counts one
-- "passed", each failing assertion or uncaught error one "failed", and a
-- failure prints the file and line of the assertion in the test module.
--
-- The last line printed is "lua: N passed, M failed"; on any failure the
-- script ends with an error so that vramlua exits 1.

local MODULES = {
  "test_vram",
  "test_json_yaml",
  "test_run",
  "test_simulator",
  "test_swap_optimizer",
  "test_adapters",
  "test_recipes",
  "test_models",
  "test_families",
  "test_vision_tokens",
  "test_resolve",
  "test_timeline",
  "test_formats",
  "test_serving",
  "test_parallel",
  "test_fit",
  "test_frameworks",
  "test_answer",
  "test_fastpath",
  "test_compose",
  "test_xla",
  "test_knobs",
}

local T = { passed = 0, failed = 0, tmpfile = nil }
_G.T = T

local tmpfiles = {}
if io and io.open and os.tmpname and os.remove then -- only with --trust
  function T.tmpfile(content)
    local path = os.tmpname()
    local f = assert(io.open(path, "wb"))
    f:write(content or "")
    f:close()
    tmpfiles[#tmpfiles + 1] = path
    return path
  end
end

local current = "?" -- module or test being run, for failure messages
local registered = nil

-- "file:line:" of the first stack level outside this runner.
local function where()
  for level = 2, 40 do
    local ok, msg = pcall(error, "", level)
    if not ok and type(msg) == "string" and msg ~= "" and not msg:find("^run%.lua:%d+:")
        and not msg:find("[/.]run%.lua:%d+:") then
      return msg:gsub("%s+$", "")
    end
  end
  return "?:"
end

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  if math.type(v) == "float" then return string.format("%.17g (float)", v) end
  return tostring(v)
end

local function pass()
  T.passed = T.passed + 1
  return true
end

local function fail(msg, detail)
  T.failed = T.failed + 1
  local line = where() .. " [" .. current .. "] " .. (msg or "assertion failed")
  if detail then line = line .. ": " .. detail end
  print("FAIL " .. line)
  return false
end

-- Deep equality; returns nil when equal, else a description of the first
-- difference.
local function diff(a, b, path, seen)
  if a == b then return nil end
  if type(a) ~= "table" or type(b) ~= "table" then
    return string.format("%sexpected %s, got %s", path == "" and "" or path .. ": ", show(b),
                         show(a))
  end
  seen = seen or {}
  if seen[a] == b then return nil end
  seen[a] = b
  for k, v in pairs(b) do
    local d = diff(a[k], v, path .. "[" .. show(k) .. "]", seen)
    if d then return d end
  end
  for k, v in pairs(a) do
    if b[k] == nil then
      return string.format("%s[%s]: unexpected %s", path, show(k), show(v))
    end
  end
  return nil
end

function T.eq(actual, expected, msg)
  local d = diff(actual, expected, "")
  if d then return fail(msg, d) end
  return pass()
end

function T.ok(cond, msg)
  if cond then return pass() end
  return fail(msg, "expected a true value, got " .. show(cond))
end

function T.int(x, msg)
  if math.type(x) == "integer" then return pass() end
  return fail(msg, "expected an integer, got " .. show(x))
end

function T.near(a, b, rel, msg)
  rel = rel or 1e-9
  if type(a) ~= "number" or type(b) ~= "number" then
    return fail(msg, "near needs numbers, got " .. show(a) .. " and " .. show(b))
  end
  local scale = math.max(math.abs(a), math.abs(b))
  if a == b or math.abs(a - b) <= rel * scale then return pass() end
  return fail(msg, string.format("expected %s within %g relative, got %s", show(b), rel, show(a)))
end

local function message_of(err)
  if type(err) == "table" then return tostring(err.msg) end
  return tostring(err)
end

function T.raises(fn, fragment, msg)
  local ok, err = pcall(fn)
  if ok then
    fail(msg, "expected an error" .. (fragment and (" containing " .. show(fragment)) or ""))
    return nil
  end
  local text = message_of(err)
  if fragment and not text:find(fragment, 1, true) then
    fail(msg, "error " .. show(text) .. " does not contain " .. show(fragment))
    return text
  end
  pass()
  return text
end

local function register(name, fn, known_bug)
  if type(name) ~= "string" or type(fn) ~= "function" then
    error("T.test(name, fn) needs a string and a function", 3)
  end
  if not registered then
    error("T.test called outside a test module's loading", 3)
  end
  registered[#registered + 1] = { name = name, fn = fn, known_bug = known_bug }
end

function T.test(name, fn) register(name, fn, false) end
function T.known_bug(name, fn) register(name, fn, true) end

local skip_known_bugs = false
local skipped = 0

local function run_one(module, name, fn, known_bug)
  if known_bug and skip_known_bugs then
    skipped = skipped + 1
    return
  end
  current = module .. ": " .. (known_bug and "known bug: " or "") .. name
  local ok, err = pcall(fn)
  if not ok then
    T.failed = T.failed + 1
    print("FAIL [" .. current .. "] error: " .. message_of(err))
  end
end

local function run_module(name)
  local before_p, before_f = T.passed, T.failed
  current = name
  registered = {}
  local ok, result = pcall(require, name)
  local tests = registered
  registered = nil
  if not ok then
    T.failed = T.failed + 1
    print("FAIL [" .. name .. "] cannot load: " .. message_of(result))
  else
    for _, t in ipairs(tests) do run_one(name, t.name, t.fn, t.known_bug) end
    if type(result) == "table" then
      local names = {}
      for k, v in pairs(result) do
        if type(k) == "string" and type(v) == "function" then names[#names + 1] = k end
      end
      table.sort(names)
      for _, k in ipairs(names) do
        run_one(name, k, result[k], k:sub(1, 10) == "known_bug_")
      end
    end
  end
  print(string.format("%s: %d passed, %d failed", name, T.passed - before_p,
                      T.failed - before_f))
end

local selected = {}
for _, a in ipairs({ ... }) do
  if a == "--skip-known-bugs" then
    skip_known_bugs = true
  else
    selected[#selected + 1] = a
  end
end
if #selected == 0 then selected = MODULES end
for _, name in ipairs(selected) do run_module(name) end
if skipped > 0 then print(string.format("(%d known-bug test(s) skipped)", skipped)) end

for _, path in ipairs(tmpfiles) do os.remove(path) end
print(string.format("lua: %d passed, %d failed", T.passed, T.failed))
if T.failed > 0 or T.passed == 0 then
  error({ msg = string.format("%d Lua test failure(s)", T.failed), code = 1 })
end
