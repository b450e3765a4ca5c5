-- The run table (stdlib/run.lua): one constructor whose defaults every
-- reader shares. Expected values are the documented defaults and PyTorch's
-- (torch.optim.AdamW weight_decay=0.01; Adam's step counter a 4-byte float32
-- tensor on the device under CPU, a host scalar with CUDA's capturable=False).
local vram = require("vram")
local R = require("stdlib.run")
local spec = require("stdlib.spec")
local truth = require("stdlib.truth")
local registry = require("models.registry")

local root = vram.share_dir
local here = root .. "/tests/lua/spec.yaml"
local SIM = { takes_text = true }
local function bare(over)
  local f = { sim = SIM, batch = 2, seq = 8, param_dtype = "fp32", dtype = "fp32" }
  for k, v in pairs(over or {}) do f[k] = v end
  return R.new(f)
end

local tests = {}

-- A seeded linear congruential generator, rand(n) in 1..n: the same walk
-- everywhere.
local function lcg(seed)
  return function(n)
    seed = (seed * 1103515245 + 12345) % 2147483648
    return seed % n + 1
  end
end

function tests.every_field_has_a_description()
  for name, f in pairs(R.FIELDS) do
    T.ok(type(f[1]) == "string" and #f[1] > 0, name .. " is described")
  end
end

-- run.key: copies of one run share a key exactly when they are equal,
-- whatever order their fields were edited in (fit --knobs simulates each
-- distinct run once, keyed by it).
function tests.copies_share_a_key_exactly_when_equal()
  local base = bare({ optimizer = { name = "adamw", state_dtype = "fp32" } })
  local function edited(f)
    local r = R.copy(base)
    f(r)
    return R.key(r, base)
  end
  T.eq(edited(function() end), edited(function() end))
  local a = edited(function(r) r.ckpt = true; r.optimizer.state_dtype = "bf16" end)
  T.eq(a, edited(function(r) r.optimizer.state_dtype = "bf16"; r.ckpt = true end))
  T.ok(a ~= edited(function(r) r.ckpt = true end), "a nested field differs")
  T.ok(edited(function(r) r.batch = 2.0 end) ~= edited(function() end),
    "2.0 is not the integer 2")
  T.ok(edited(function(r) r.lora = { r = 8 } end) ~= edited(function(r) r.lora = { r = 16 } end),
    "a new table's contents count")
  T.eq(edited(function(r) r.lora = { r = 8 } end), edited(function(r) r.lora = { r = 8 } end))
  -- a field removed is not the field kept
  T.ok(edited(function(r) r.optimizer = nil end) ~= edited(function() end), "a removed field")
  T.ok(edited(function(r) r.optimizer = nil end) ~= edited(function(r) r.optimizer = {} end),
    "removed is not emptied")
  -- skipped fields are not compared
  T.eq(R.key(R.with(base, { ckpt = true }), base, { ckpt = true }), R.key(base, base))
  -- told which fields may differ (a superset of those that do), the same key
  local r = R.copy(base)
  r.ckpt, r.optimizer.state_dtype, r.lora = true, "bf16", nil
  r.batch = nil
  T.eq(R.key(r, base, nil, { ckpt = true, optimizer = true, batch = true, seq = true }),
    R.key(r, base))
end

-- The same contract over many edited copies (a random walk, seeded): the
-- keys of two copies are equal exactly when their fields are, compared here
-- by an independent writer (numbers by subtype and %a, which tells -0.0
-- from 0.0; tables by content). Nested tables of one size with different
-- key sets, and layouts met again, exercise the keys' remembered orders.
function tests.keys_are_equal_exactly_when_the_runs_are()
  local rand = lcg(12345)
  local VALUES = { 1, 1.0, 2, 0.0, -0.0, 0, "a", "b", "", true, false, 1.5, 2 ^ 60 }
  local NAMES = { "p", "q", "r", "s", "t" }
  local function nested()
    local t = {}
    for _ = 1, 3 do t[NAMES[rand(#NAMES)]] = VALUES[rand(#VALUES)] end
    if rand(3) == 1 then t[rand(3)] = VALUES[rand(#VALUES)] end -- a numeric key beside them
    return t
  end
  local base = bare({ optimizer = { name = "adamw", state_dtype = "fp32" },
    lora = { r = 8, targets = { "q_proj", "v_proj" } } })
  local variants = {}
  for i = 1, 200 do
    local r = R.copy(base)
    for _ = 1, rand(3) do
      local what = rand(6)
      if what == 1 then r.batch = VALUES[rand(#VALUES)]
      elseif what == 2 then r.optimizer[NAMES[rand(#NAMES)]] = VALUES[rand(#VALUES)]
      elseif what == 3 then r.lora = rand(4) == 1 and nil or nested()
      elseif what == 4 then r.parallel = nested()
      elseif what == 5 then r.ckpt = nil
      elseif r.lora and r.lora.targets then r.lora.targets[rand(3)] = NAMES[rand(#NAMES)] end
    end
    variants[i] = r
  end
  local function same(a, b)
    if type(a) ~= type(b) then return false end
    if type(a) == "number" then
      return math.type(a) == math.type(b) and ("%a"):format(a) == ("%a"):format(b)
    end
    if type(a) ~= "table" or a.takes_text then return a == b end -- the simulator by identity
    for k, v in pairs(a) do if not same(v, b[k]) then return false end end
    for k in pairs(b) do if a[k] == nil then return false end end
    return true
  end
  local keys, equal_pairs = {}, 0
  for i, r in ipairs(variants) do keys[i] = R.key(r, base) end
  for i = 1, #variants do
    for j = i + 1, #variants do
      local eq = same(variants[i], variants[j])
      if eq then equal_pairs = equal_pairs + 1 end
      if eq ~= (keys[i] == keys[j]) then
        T.ok(false, ("copies %d and %d: equal %s, keys equal %s"):format(i, j, tostring(eq),
          tostring(keys[i] == keys[j])))
      end
    end
  end
  T.ok(equal_pairs > 0, "the walk makes some equal copies")
  -- told the fields that may differ, the same keys
  for i, r in ipairs(variants) do
    T.eq(R.key(r, base, nil, { batch = true, optimizer = true, lora = true, parallel = true,
      ckpt = true }), keys[i])
  end
end

-- 0.0 and -0.0 are equal numbers written apart; integers and floats too.
function tests.a_key_tells_negative_zero_and_subtypes_apart()
  local base = bare({ optimizer = { name = "adamw", weight_decay = 0.0 } })
  local function with(v)
    local r = R.copy(base)
    r.optimizer.weight_decay = v
    return R.key(r, base)
  end
  T.eq(with(0.0), R.key(base, base))
  T.ok(with(-0.0) ~= with(0.0), "-0.0 is not 0.0")
  T.ok(with(0) ~= with(0.0), "0 is not 0.0")
  T.eq(with(-0.0), with(-0.0))
end

-- Writing a key is not spoilt by a key written inside it (a __tostring of
-- a value written by identity), nor by more distinct pieces than a key
-- remembers.
function tests.keys_survive_nesting_and_many_distinct_pieces()
  local base = bare()
  local inner
  local sim = setmetatable({}, { __tostring = function()
    inner = R.key(R.with(base, { batch = 7 }), base)
    return "the simulator"
  end })
  local plain = setmetatable({}, { __tostring = function() return "the simulator" end })
  local with_inner = R.key(R.with(base, { sim = sim, seq = 9 }), base)
  T.ok(inner ~= nil, "the inner key was written")
  T.eq(with_inner, R.key(R.with(base, { sim = plain, seq = 9 }), base))
  T.eq(inner, R.key(R.with(base, { batch = 7 }), base))
  local function many(offset)
    local t = {}
    for i = 1, 6000 do t[i] = i * 7 + offset; t["f" .. i] = "v" .. (i + offset) end
    return R.key(R.with(base, { hf_config = t }), base)
  end
  local a = many(0)
  T.eq(many(0), a)
  T.ok(many(1) ~= a, "different contents, different keys")
end

-- The runtime's writer (vram.canonical) writes what run.lua's Lua writer
-- writes, table for table (a seeded walk: mixed and integer keys, strings
-- that order differently as bytes and by length, floats, -0.0, shared and
-- cyclic tables), and refuses (nil) whatever the Lua one writes through
-- tostring() or a metamethod.
function tests.the_runtime_writes_a_key_as_the_lua_writer_does()
  local rand = lcg(4242)
  local KEYS = { "a", "B", "ab", "a b", "é", "zz", "", 1, 2, 3, 10, -1, math.maxinteger,
    math.mininteger, 0 }
  local VALUES = { 1, 1.0, -0.0, 0.0, 2 ^ 53, 1e300, 0 / 0, -1 / 0, math.mininteger, "", "x",
    ("long "):rep(80), true, false, 1 / 3 }
  local pool = {}
  local function make(depth)
    local t = {}
    for _ = 1, rand(6) - 1 do
      local k, roll = KEYS[rand(#KEYS)], rand(10)
      if roll <= 2 and depth < 4 then t[k] = make(depth + 1)
      elseif roll == 3 and #pool > 0 then t[k] = pool[rand(#pool)] -- shared, maybe a cycle
      else t[k] = VALUES[rand(#VALUES)] end
    end
    pool[#pool + 1] = t
    return t
  end
  for i = 1, 300 do
    local t = make(0)
    if i % 7 == 0 then t.self = t end
    T.eq(vram.canonical(t), R.canonical_text(t), "table " .. i)
  end
  local many = { sub = {} } -- past the 16 keys read in one pass
  for i = 1, 40 do many["k" .. i], many[i], many.sub["s" .. i] = i, "v" .. i, i / 7 end
  T.eq(vram.canonical(many), R.canonical_text(many), "80 keys, 40 nested")
  T.eq(vram.canonical({}), "{")
  T.eq(vram.canonical({ b = 1, a = "x", [2] = true, [1] = { c = 1.5 } }),
    "{[1]={1:c=number:1.5,},[2]=boolean:true,1:a=1:x,1:b=number:1,")
  local deep = {}
  for _ = 1, 70 do deep = { inner = deep } end
  local wide = {}
  for i = 1, 300 do wide[i] = {} end
  local refused = {
    { "a metatable", setmetatable({}, {}) },
    { "a nested metatable", { x = setmetatable({}, { __index = {} }) } },
    { "a float key", { [1.5] = 1 } },
    { "a boolean key", { [true] = 1 } },
    { "a zero byte in a key", { ["a\0b"] = 1 } },
    { "a function", { f = print } },
    { "a userdata", { t = vram.tape() } },
    { "a table under sim", { sim = {} } },
    { "over 64 levels", deep },
    { "over 256 tables", wide },
  }
  for _, c in ipairs(refused) do
    T.eq(vram.canonical(c[2]), nil, c[1])
    T.ok(#R.canonical_text(c[2]) > 0, c[1] .. ": the Lua writer writes it")
  end
  T.eq(vram.canonical({ sim = "a string" }), R.canonical_text({ sim = "a string" }))
end

-- The runtime's run.key (vram.run_key) gives the Lua one's text for every
-- edited copy of a seeded walk (fields changed, added and removed, nested
-- tables changed in place, numbers of each subtype, -0.0 and NaN, shared
-- tables, the simulator), with and without skip and only; and refuses (nil)
-- where a metamethod could answer.
function tests.the_runtime_keys_a_run_as_the_lua_key_does()
  local rand = lcg(777)
  local shared = { x = 1 }
  local VALUES = { 1, 1.0, 2, 0.0, -0.0, 0 / 0, "a", "", true, false, 1.5, shared,
    { x = 1 }, { 1, 2 }, { y = { z = -0.0 } } }
  local NAMES = { "batch", "seq", "optimizer", "lora", "extra", "ckpt", "sim" }
  local base = bare({ optimizer = { name = "adamw", state_dtype = "fp32" },
    lora = { r = 8, targets = { "q_proj", "v_proj" } } })
  local compared = 0
  for i = 1, 400 do
    local r = R.copy(base)
    for _ = 1, rand(4) do
      local name, roll = NAMES[rand(#NAMES)], rand(5)
      if name == "sim" then r.sim = roll == 1 and { takes_text = true } or base.sim
      elseif roll == 1 then r[name] = nil
      elseif roll == 2 and type(r[name]) == "table" then r[name][NAMES[rand(#NAMES)]] = VALUES[rand(#VALUES)]
      else r[name] = VALUES[rand(#VALUES)] end
    end
    local skip = rand(3) == 1 and { [NAMES[rand(#NAMES)]] = true } or nil
    local only = rand(3) == 1 and { batch = true, optimizer = true, lora = true, extra = true } or nil
    -- nil only where the Lua key writes a table by identity (under sim)
    local c, lua = vram.run_key(r, base, skip, only), R.key_lua(r, base, skip, only)
    if c ~= nil or not lua:find("table:", 1, true) then
      T.eq(c, lua, "copy " .. i)
      compared = compared + 1
    end
    T.eq(R.key(r, base, skip, only), lua, "copy " .. i .. ": run.key")
  end
  T.ok(compared > 300, compared .. " of 400 keyed in the runtime")
  -- what a metamethod could answer: the Lua key
  local eq = { __eq = function() return true end }
  local cases = {
    { "iterated with a metatable", setmetatable(R.copy(base), { __pairs = function(t) return next, t, nil end }), base },
    { "a base with a metatable", R.copy(base), setmetatable(R.copy(base), {}) },
    { "a field with a metatable", R.with(base, { lora = setmetatable({ r = 4 }, eq) }), base },
    { "a value written through tostring", R.with(base, { lora = { f = print } }), base },
  }
  for _, c in ipairs(cases) do
    T.eq(vram.run_key(c[2], c[3]), nil, c[1])
    T.eq(R.key(c[2], c[3]), R.key_lua(c[2], c[3]), c[1] .. ": run.key")
  end
  -- more fields changed and more gone than the runtime holds in place (16)
  local wide = R.copy(base)
  local gone = R.copy(base)
  for i = 1, 40 do
    wide["f" .. i] = i % 3 == 0 and { i, i / 2 } or i / 4
    gone["f" .. i] = i
  end
  for i = 1, 25 do gone["g" .. i] = true end
  T.eq(vram.run_key(wide, base), R.key_lua(wide, base))
  T.eq(vram.run_key(base, gone), R.key_lua(base, gone))
  T.eq(vram.run_key(wide, gone), R.key_lua(wide, gone))
  T.ok(#vram.run_key(base, gone) > 200, "the names written")
  -- r itself may have one: r[k] is read as Lua reads it
  local over = setmetatable({ batch = 3 }, { __index = base })
  T.eq(vram.run_key(over, base, nil, { batch = true, seq = true }),
    R.key_lua(over, base, nil, { batch = true, seq = true }))
end

function tests.a_bare_run_gets_the_documented_defaults()
  local r = bare()
  T.eq(r.mode, "train")
  T.eq(r.grad_accum, 1)
  T.eq(r.generate_tokens, 0)
  T.eq(r.ckpt, false)
  T.eq(r.attention, "eager")
  T.eq(r.loss, "cross_entropy")
  T.eq(r.loss_chunk, 1024)
  T.eq(r.frozen, {})
  T.eq(r.framework, "pytorch")
  T.eq(r.optimizer, { name = "adamw", weight_decay = 0.01, step_bytes = 0 })
  T.ok(bare().frozen ~= r.frozen, "each run gets its own frozen list")
end

function tests.the_optimizer_follows_the_mode_and_the_framework()
  T.eq(bare({ framework = "pytorch-cpu" }).optimizer.step_bytes, 4)
  T.eq(bare({ framework = "jax" }).optimizer.step_bytes, 0)
  T.eq(bare({ optimizer = { name = "sgd" } }).optimizer.weight_decay, 0)
  T.eq(bare({ optimizer = { name = "adamw", weight_decay = 0.1 } }).optimizer.weight_decay, 0.1)
  local inf = bare({ mode = "inference", optimizer = { name = "adamw" } })
  T.eq(inf.optimizer.name, "none")
end

function tests.unknown_and_missing_fields_are_the_callers_error()
  T.raises(function() bare({ batch_size = 4 }) end, "unknown field 'batch_size'")
  T.raises(function() R.new({ sim = SIM, seq = 8, param_dtype = "fp32", dtype = "fp32" }) end,
    "field 'batch' is required")
  T.raises(function() R.new({ sim = SIM, batch = 1, param_dtype = "fp32", dtype = "fp32" }) end,
    "field 'seq' is required")
  T.ok(R.new({ sim = { takes_text = false }, batch = 1, param_dtype = "fp32", dtype = "fp32" }),
    "a ViT runs without seq")
  T.raises(function() R.with(bare(), { sequence = 4 }) end, "unknown field 'sequence'")
end

function tests.a_derived_run_leaves_the_original_alone()
  local r = bare({ text = { heads = 8 } })
  local w = R.with(r, { seq = 16 })
  T.eq(w.seq, 16)
  T.eq(r.seq, 8)
  T.ok(w.text == r.text, "with: a shallow copy")
  local c = R.copy(r)
  c.text.heads = 4
  c.optimizer.name = "sgd"
  T.eq(r.text.heads, 8)
  T.eq(r.optimizer.name, "adamw")
  T.ok(c.sim == r.sim, "copy: the simulator module is shared")
  local h = R.copy(R.with(r, { hf_config = { num_hidden_layers = 2 } }))
  T.ok(h.hf_config ~= nil and R.copy(h).hf_config == h.hf_config,
    "copy: the model config as read is shared (never edited)")
end

-- One default for both dialects: a spec that names no framework is the
-- constructor's default; a measured case is a CPU run, and its Adam step
-- counters are the same 4-byte device tensors a spec on pytorch-cpu gets.
function tests.specs_and_truth_cases_share_the_constructor()
  local function s(fw)
    return spec.normalize({ model = { preset = "qwen2_5_1_5b_instruct",
      overrides = { num_hidden_layers = 1 } }, run = { batch = 1, seq = 8, framework = fw } },
      here, registry)
  end
  T.eq(s(nil).framework, R.FIELDS.framework[2])
  T.eq(s(nil).optimizer.step_bytes, 0)
  T.eq(s("pytorch-cpu").optimizer.step_bytes, 4)
  local cases = vram.json.load(root .. "/tests/truth/cases_public.json")
  for _, c in ipairs(cases) do
    if truth.supported(c, registry) then
      local r = truth.normalize(c, nil, registry)
      T.eq(r.framework, "pytorch-cpu", c.id)
      if r.optimizer.name == "adamw" then T.eq(r.optimizer.step_bytes, 4, c.id) end
      for k in pairs(r) do T.ok(R.FIELDS[k], c.id .. ": field " .. k .. " is documented") end
    end
  end
end

return tests
