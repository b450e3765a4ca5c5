-- Tests of the `vram` module as scripts see it: exact bytes, terms, units,
-- versions, the tape userdata, and the error messages of each.
-- Convention: returns a table of test functions named as sentences (see run.lua).
local vram = require("vram")

local function cdiv(a, b) return (a + b - 1) // b end

-- Each format's cost, written independently of the program.
local FORMULA = {
  fp32 = function(n) return 4 * n end,
  tf32 = function(n) return 4 * n end,
  fp16 = function(n) return 2 * n end,
  bf16 = function(n) return 2 * n end,
  fp8_e4m3 = function(n) return n end,
  fp8_e5m2 = function(n) return n end,
  int64 = function(n) return 8 * n end,
  int32 = function(n) return 4 * n end,
  int8 = function(n) return n end,
  uint8 = function(n) return n end,
  int4 = function(n) return cdiv(n, 2) end,
  nf4 = function(n) return cdiv(n, 2) + 4 * cdiv(n, 64) end,
  nf4_dq = function(n) return cdiv(n, 2) + cdiv(n, 64) + 4 * cdiv(cdiv(n, 64), 256) + 4 end,
  nvfp4 = function(n) return cdiv(n, 2) + cdiv(n, 16) + 4 end,
  mxfp4 = function(n) return cdiv(n, 2) + cdiv(n, 32) end,
}

-- Calls fn through a Lua function so that error positions name this file.
local function err_of(fn, ...)
  local args = table.pack(...)
  local ok, err = pcall(function() return fn(table.unpack(args, 1, args.n)) end)
  T.ok(not ok, "expected an error")
  return tostring(err)
end

local CATS = { "weights", "master_weights", "gradients", "optimizer_state", "activations",
               "logits_loss", "temporaries", "inputs", "kv_cache", "buffers", "overhead" }

-- y = x @ W then a loss; see tests/unit/check_tape.c for the walk-through:
-- forward 704; backward peak 1104 at "linear"; 804 after.
local function linear_then_loss(t)
  t:phase("forward")
  local W = t:param(400, "weights", "W")
  local x = t:alloc(100, "inputs")
  local y = t:alloc(200, "activations")
  t:node({ x, W }, { W, 400 }, { y }, 0, "linear")
  local L = t:alloc(4, "logits_loss")
  t:node({ y }, { y, 200 }, { L }, 0, "loss")
  t:drop(x, y)
  return W, L
end

local tests = {}

-- ------------------------------------------------------------ bytes

function tests.bytes_should_match_each_dtype_formula_around_block_boundaries()
  local sizes = { 1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000, 16383, 16384, 16385,
                  4096 * 4096, 7 * 1024 * 1024 + 1 }
  local list = vram.dtypes()
  T.eq(#list, 15, "number of canonical dtypes")
  for _, d in ipairs(list) do
    local f = FORMULA[d.name]
    T.ok(f, "dtype " .. d.name .. " has a formula in this test")
    if f then
      for _, n in ipairs(sizes) do
        local got = vram.bytes(d.name, n)
        T.int(got, d.name)
        T.eq(got, f(n), d.name .. " x " .. n)
      end
    end
  end
end

function tests.nvfp4_of_a_4096_square_should_be_payload_plus_scales_plus_4()
  T.eq(vram.bytes("nvfp4", 4096, 4096), 8388608 + 1048576 + 4)
end

function tests.bytes_should_multiply_all_dimensions()
  T.eq(vram.bytes("bf16", 2, 3, 4), 2 * 3 * 4 * 2)
  T.eq(vram.bytes("fp32"), 4, "no dimensions is a scalar")
  T.eq(vram.bytes("fp32", 0), 0)
  T.eq(vram.bytes("nvfp4", 0), 0, "an empty tensor owns no scales")
  T.eq(vram.bytes("nf4", 64, 0, 9), 0)
  T.eq(vram.bytes("int8", math.maxinteger), math.maxinteger)
end

function tests.aliases_should_cost_the_same_as_their_canonical_dtype()
  local _, aliases = vram.dtypes()
  local count = 0
  for alias, canon in pairs(aliases) do
    count = count + 1
    T.eq(vram.dtype(alias), canon, alias)
    T.eq(vram.bytes(alias, 4097), vram.bytes(canon, 4097), alias)
    T.eq(vram.bytes(alias, 4097), FORMULA[canon](4097), alias)
  end
  T.ok(count >= 10, "aliases listed")
  T.eq(aliases.bfloat16, "bf16")
  T.eq(aliases.half, "fp16")
  T.eq(aliases.float32, "fp32")
end

function tests.dtype_should_describe_a_format_or_return_nil()
  local name, bits, block = vram.dtype("bfloat16")
  T.eq({ name, bits, block }, { "bf16", 16, 0 })
  name, bits, block = vram.dtype("nvfp4")
  T.eq({ name, bits, block }, { "nvfp4", 4, 16 })
  T.eq(select("#", vram.dtype("nope")), 0)
  for _, d in ipairs(vram.dtypes()) do
    T.eq(type(d.note), "string", d.name)
    T.eq(vram.dtype(d.name), d.name)
  end
end

function tests.a_fractional_dimension_should_be_rejected()
  local e = err_of(vram.bytes, "fp32", 1.5)
  T.ok(e:find("number has no integer representation", 1, true), e)
  T.ok(e:find("bad argument #2", 1, true), e)
end

function tests.a_negative_dimension_should_be_rejected_with_its_value()
  local e = err_of(vram.bytes, "fp32", 4, -1)
  T.ok(e:find("bad argument #3", 1, true), e)
  T.ok(e:find("dimension must be >= 0, got -1", 1, true), e)
end

function tests.errors_should_carry_this_file_and_line()
  local e = err_of(vram.bytes, "fp32", -1)
  T.ok(e:find("bad argument", 1, true), e)
  T.ok(e:find("test_vram%.lua:%d+:"), e)
  local ok, direct = pcall(vram.bytes, "fp32", -1)
  T.eq(ok, false)
  T.ok(tostring(direct):find("bad argument #2", 1, true), direct)
end

function tests.an_unknown_dtype_should_list_the_known_ones()
  local e = err_of(vram.bytes, "fp9", 1)
  T.ok(e:find("unknown dtype 'fp9'", 1, true), e)
  for name in pairs(FORMULA) do T.ok(e:find(" " .. name, 1, true), "lists " .. name) end
  e = err_of(vram.bytes, nil, 1)
  T.ok(e:find("bad argument #1", 1, true), e)
end

function tests.bytes_should_report_int64_overflow()
  T.raises(function() return vram.bytes("fp32", 1 << 62, 4) end,
           "element count overflows int64 at dimension 2")
  T.raises(function() return vram.bytes("fp32", 1 << 62) end, "elements of fp32 overflow int64")
  T.raises(function() return vram.bytes("int64", math.maxinteger // 8 + 1) end, "overflow int64")
  T.eq(vram.bytes("int64", math.maxinteger // 8), (math.maxinteger // 8) * 8)
  T.raises(function() return vram.bytes("fp32", 2 ^ 63) end, "number has no integer representation")
end

-- ------------------------------------------------------------ units

function tests.fmt_should_label_binary_and_decimal_units()
  T.eq(vram.fmt(1 << 30), "1.00 GiB")
  T.eq(vram.fmt(1 << 30, "GB"), "1.07 GB")
  T.eq(vram.fmt(1000000000, "GB"), "1.00 GB")
  T.eq(vram.fmt(1000000000, "GiB"), "0.93 GiB")
  T.eq(vram.fmt(3 << 20, "MiB", 0), "3 MiB")
  T.eq(vram.fmt(2500000, "MB", 1), "2.5 MB")
  T.eq(vram.fmt(1536, "KiB", 1), "1.5 KiB")
  T.eq(vram.fmt(12345, "B"), "12345 B")
  T.eq(vram.fmt(0), "0.00 GiB")
  T.raises(function() return vram.fmt(1, "TB") end, "unit must be GiB, GB, MiB, MB, KiB or B")
  T.raises(function() return vram.fmt(1, "GiB", 10) end, "decimals must be 0..9")
  T.raises(function() return vram.fmt(1.5) end, "number has no integer representation")
end

-- vram.fixed writes binary units without printf (runtime/bind/lvram.c
-- fixed_binary): it must write what string.format("%.Nf") writes of
-- vram.to's float, halves rounded to even. Every KiB count from -20000 to
-- 20000 at 0-4 decimals (each tie among them), ~2^53 and past it, GiB's
-- own ties (2^25 B = 0.03125 GiB -> 0.0312 at 4 decimals), and a seeded
-- spread of magnitudes in every unit.
function tests.fixed_should_write_what_format_writes_of_the_float()
  local function check(b, u, d)
    local want = ("%." .. d .. "f"):format(vram.to(b, u))
    local got = vram.fixed(b, u, d)
    if got ~= want then T.eq(got, want, ("vram.fixed(%d, %s, %d)"):format(b, u, d)) end
    return got == want
  end
  local ok = true
  for b = -20000, 20000 do
    for d = 0, 4 do ok = check(b, "KiB", d) and ok end
  end
  for _, b in ipairs({ 0, 1, -1, 1 << 25, 3 << 25, -(1 << 25), (1 << 53) - 1, -(1 << 53) + 1,
    1 << 53, -(1 << 53), math.maxinteger, math.mininteger }) do
    for d = 0, 9 do
      for _, u in ipairs({ "GiB", "MiB", "KiB", "B", "GB", "MB" }) do ok = check(b, u, d) and ok end
    end
  end
  T.eq(vram.fixed(1 << 25, "GiB", 4), "0.0312")
  T.eq(vram.fixed(3 << 25, "GiB", 4), "0.0938")
  local x = 12345
  for _ = 1, 20000 do
    x = (x * 6364136223846793005 + 1442695040888963407) & math.maxinteger
    local b = (x >> (x % 50)) * ((x & 1) == 0 and 1 or -1)
    for _, u in ipairs({ "GiB", "MiB", "GB", "MB" }) do ok = check(b, u, x % 10) and ok end
  end
  T.ok(ok, "vram.fixed wrote what string.format writes")
  T.eq(vram.fixed(3 << 30), "3.00")
  T.raises(function() return vram.fixed(1, "GiB", 10) end, "decimals must be 0..9")
  T.raises(function() return vram.fixed(1, "TB") end, "unit must be GiB, GB, MiB, MB, KiB or B")
end

-- vram.clone: a shallow copy (the same values, nested tables shared), a
-- new table without a metatable; a table with one is refused (pairs would
-- honour its __pairs), and stdlib/run.lua shallow copies those by pairs.
function tests.clone_should_copy_a_plain_table_shallowly()
  local inner = { 1 }
  local t = { a = 1, b = "x", 10, 20, 30, c = inner, [2.5] = true }
  local c = vram.clone(t)
  T.ok(c ~= t)
  for k, v in pairs(t) do T.eq(c[k], v, tostring(k)) end
  for k in pairs(c) do T.ok(t[k] ~= nil, tostring(k)) end
  T.ok(c.c == inner, "nested tables are shared")
  T.eq(#c, 3)
  c.a = 2
  T.eq(t.a, 1)
  T.eq(next(vram.clone({})), nil)
  -- past the 64 pairs it copies from the stack, and with an array part
  for _, n in ipairs({ 63, 64, 65, 200 }) do
    local big = {}
    for i = 1, n do big["k" .. i] = i; big[i] = -i end
    local cb = vram.clone(big)
    local count = 0
    for k, v in pairs(cb) do count = count + 1; T.eq(big[k], v, n .. ": " .. tostring(k)) end
    T.eq(count, 2 * n, n .. " pairs each way")
    T.eq(#cb, n)
  end
  T.raises(function() vram.clone(setmetatable({}, {})) end, "a table without a metatable")
  T.raises(function() vram.clone(3) end, "table expected")
  local runs = require("stdlib.run")
  local proxy = setmetatable({}, { __index = t, __pairs = function() return next, { z = 26 } end })
  T.eq(runs.shallow(proxy).z, 26)
  T.eq(runs.shallow(t).b, "x")
end

function tests.to_should_convert_bytes_to_a_float_in_the_unit()
  T.eq(vram.to(3 << 30), 3.0)
  T.eq(math.type(vram.to(3 << 30)), "float")
  T.eq(vram.to(1500000000, "GB"), 1.5)
  T.eq(vram.to(5 << 20, "MiB"), 5.0)
  T.eq(vram.to(2048, "KiB"), 2.0)
  T.eq(vram.to(7, "B"), 7.0)
  T.near(vram.to(1000000000, "GiB"), 1e9 / 2 ^ 30)
  T.raises(function() return vram.to(1, "gib") end, "unit must be")
end

-- ------------------------------------------------------------ terms

function tests.parameter_counts_should_follow_the_layer_shapes()
  T.eq(vram.linear_params(4096, 11008), 4096 * 11008)
  T.eq(vram.linear_params(4096, 11008, true), 4096 * 11008 + 11008)
  T.eq(vram.linear_params(4096, 11008, false), 4096 * 11008)
  T.eq(vram.embedding_params(32000, 4096), 32000 * 4096)
  T.eq(vram.norm_params(4096), 4096, "rms by default")
  T.eq(vram.norm_params(4096, "rms"), 4096)
  T.eq(vram.norm_params(4096, "layer"), 2 * 4096)
  T.eq(vram.conv_params(3, 1024, 14 * 14), 3 * 1024 * 196)
  T.eq(vram.conv_params(3, 1024, 14 * 14, true), 3 * 1024 * 196 + 1024)
end

function tests.parameter_counts_should_reject_bad_shapes()
  local e = err_of(vram.linear_params, 0, 10)
  T.ok(e:find("in_features must be >= 1, got 0", 1, true), e)
  e = err_of(vram.linear_params, 10, -3)
  T.ok(e:find("out_features must be >= 1, got -3", 1, true), e)
  T.raises(function() return vram.embedding_params(0, 8) end, "vocab must be >= 1")
  T.raises(function() return vram.norm_params(8, "batch") end, "invalid option 'batch'")
  T.raises(function() return vram.conv_params(3, 8, 0) end, "kernel elements must be >= 1")
  T.raises(function() return vram.linear_params(1 << 62, 4) end,
           "vram.linear_params: result overflows int64")
  T.raises(function() return vram.linear_params(math.maxinteger, 1, true) end, "overflows int64")
end

function tests.optimizer_state_should_follow_each_optimizer()
  local n = 4096 * 4096
  T.eq(vram.optimizer_state("sgd", 4096, 4096, "fp32"), 0)
  T.eq(vram.optimizer_state("momentum", 4096, 4096, "fp32"), 4 * n)
  T.eq(vram.optimizer_state("sgd_momentum", 4096, 4096, "bf16"), 2 * n)
  T.eq(vram.optimizer_state("adam", 4096, 4096, "fp32"), 2 * 4 * n)
  T.eq(vram.optimizer_state("adamw", 4096, 4096, "bf16"), 2 * 2 * n)
  T.eq(vram.optimizer_state("lion", 4096, 4096, "bf16"), 2 * n)
  -- 8-bit Adam: fp32 moments below 4096 elements, else 1 byte + fp32 absmax per 256
  T.eq(vram.optimizer_state("adam8bit", 4095, 1, "fp32"), 8 * 4095)
  T.eq(vram.optimizer_state("adam8bit", 64, 64, "fp32"), 2 * (4096 + 4 * 16))
  T.eq(vram.optimizer_state("adamw8bit", 4097, 1, "fp32"), 2 * (4097 + 4 * 17))
  T.eq(vram.optimizer_state("paged_adamw_8bit", 4096, 4096, "fp32"), 2 * (n + 4 * (n // 256)))
  -- Adafactor: factored fp32 second moment, optional first moment
  T.eq(vram.optimizer_state("adafactor", 1024, 4096, "fp32"), (1024 + 4096) * 4)
  T.eq(vram.optimizer_state("adafactor", 1024, 4096, "fp32", "bf16"),
       (1024 + 4096) * 4 + 1024 * 4096 * 2)
  T.eq(vram.optimizer_state("adafactor", 4096, 1, "fp32"), 4096 * 4)
  T.eq(vram.optimizer_state("adafactor", 4096, 1, "fp32", nil), 4096 * 4)
end

function tests.optimizer_state_should_reject_unknown_names_and_shapes()
  local e = err_of(vram.optimizer_state, "rmsprop", 4, 4, "fp32")
  T.ok(e:find("unknown optimizer 'rmsprop'", 1, true), e)
  T.ok(e:find("adam8bit", 1, true), e)
  T.raises(function() return vram.optimizer_state("adam", 0, 4, "fp32") end,
           "rows must be >= 1, got 0")
  T.raises(function() return vram.optimizer_state("adam", 4, 4, "fp128") end, "unknown dtype")
  T.raises(function() return vram.optimizer_state("adafactor", 4, 4, "fp32", "x") end,
           "unknown dtype 'x'")
  T.raises(function() return vram.optimizer_state("adam", 1 << 31, 1 << 31, "fp32") end,
           "vram.optimizer_state: result overflows int64")
end

function tests.attention_scores_should_be_quadratic_only_when_eager()
  T.eq(vram.attention_scores(1, 32, 4096, 4096, "bf16"), 32 * 4096 * 4096 * 2)
  T.eq(vram.attention_scores(1, 32, 4096, 4096, "bf16", "eager"), 32 * 4096 * 4096 * 2)
  T.eq(vram.attention_scores(2, 32, 4096, 4096, "bf16", "flash"), 2 * 32 * 4096 * 4)
  T.eq(vram.attention_scores(2, 32, 4096, 4096, "bf16", "sdpa"), 2 * 32 * 4096 * 4)
  T.eq(vram.attention_scores(3, 5, 7, 11, "fp32"), 3 * 5 * 7 * 11 * 4)
  T.raises(function() return vram.attention_scores(1, 1, 1, 1, "bf16", "xformers") end,
           "invalid option 'xformers'")
  T.raises(function() return vram.attention_scores(1, 1, 1, 0, "bf16") end,
           "key length must be >= 1, got 0")
  T.raises(function() return vram.attention_scores(1, 1, 1 << 31, 1 << 31, "bf16") end,
           "overflows int64")
end

function tests.kv_cache_should_hold_k_and_v_of_every_layer()
  T.eq(vram.kv_cache(32, 1, 4096, 8, 128, "bf16"), 2 * 32 * 4096 * 8 * 128 * 2)
  T.eq(vram.kv_cache(2, 3, 5, 7, 11, "fp8"), 2 * 2 * 3 * 5 * 7 * 11)
  T.eq(vram.kv_cache(32, 1, 0, 8, 128, "bf16"), 0, "no tokens yet")
  T.raises(function() return vram.kv_cache(0, 1, 1, 1, 1, "bf16") end, "layers must be >= 1")
  T.raises(function() return vram.kv_cache(1 << 20, 1 << 20, 1 << 21, 1, 1, "fp32") end,
           "vram.kv_cache: result overflows int64")
end

function tests.mul_and_add_should_be_checked()
  T.eq(vram.mul(2, 3, 7), 42)
  T.eq(vram.mul(), 1)
  T.eq(vram.mul(5, 0), 0)
  T.eq(vram.add(1, 2, 3), 6)
  T.eq(vram.add(), 0)
  T.eq(vram.add(-5, 3), -2)
  T.eq(vram.add(math.maxinteger, 0), math.maxinteger)
  T.raises(function() return vram.mul(1 << 62, 2) end,
           "vram.mul: product overflows int64 at factor 2 (2)")
  T.raises(function() return vram.mul(-1, 2) end, "factor must be >= 0")
  T.raises(function() return vram.mul(2.5) end, "number has no integer representation")
  T.raises(function() return vram.add(math.maxinteger, 1) end,
           "vram.add: sum overflows int64 at term 2 (1)")
  T.raises(function() return vram.add(math.mininteger, -1) end, "sum overflows int64")
end

-- ------------------------------------------------------------ versions

function tests.version_should_be_semantic()
  T.eq(type(vram.version), "string")
  T.ok(vram.version:match("^%d+%.%d+%.%d+$"), vram.version)
  T.eq(vram.version, "0.1.0")
end

function tests.require_version_should_accept_this_version_and_older()
  T.eq(vram.require_version("0.1"), true)
  T.eq(vram.require_version("0.0"), true)
  T.eq(vram.require_version("0"), true)
end

function tests.require_version_should_refuse_newer_versions()
  local e = T.raises(function() vram.require_version("9.0") end, "needs vramlua 9.0 or newer")
  T.ok(e and e:find(vram.version, 1, true), e)
  T.raises(function() vram.require_version("0.2") end, "needs vramlua")
  T.raises(function() vram.require_version("1") end, "needs vramlua")
  T.raises(function() vram.require_version("abc") end, "expected a version like")
end

-- ------------------------------------------------------------ tape

function tests.a_tape_should_be_a_locked_userdata()
  local t = vram.tape()
  T.eq(type(t), "userdata")
  T.eq(getmetatable(t), "locked")
  T.ok(tostring(t):find("vram.tape", 1, true), tostring(t))
  T.eq(tostring(t), "vram.tape (live 0 B, peak 0 B in setup)")
  T.raises(function() setmetatable(t, {}) end, "table expected")
end

function tests.tape_methods_on_a_wrong_type_should_say_vram_tape_expected()
  local t = vram.tape()
  for _, m in ipairs({ "alloc", "param", "drop", "temp", "node", "ckpt_begin", "ckpt_end",
                       "backward", "zero_grad", "phase", "grad", "bytes", "live", "stats",
                       "reset", "retain", "replay_drop" }) do
    T.eq(type(t[m]), "function", m)
    if t[m] then T.raises(function() t[m]({}, 1) end, "vram.tape expected") end
  end
end

function tests.alloc_and_drop_should_track_live_bytes_and_peak()
  local t = vram.tape()
  t:phase("forward")
  local a = t:alloc(100, "weights")
  local b = t:alloc(50, "activations", "act")
  T.int(a)
  T.ok(a ~= b)
  T.eq(t:live(), 150)
  t:drop(a)
  local c = t:alloc(30, "activations")
  local s = t:stats()
  T.eq(s.live, 80)
  T.eq(s.peak, 150)
  T.eq(s.peak_phase, "forward")
  T.eq(s.peak_op, "act")
  T.eq(s.at_peak.weights, 100)
  T.eq(s.at_peak.activations, 50)
  T.eq(s.live_by_category.activations, 80)
  T.eq(s.live_by_category.weights, 0)
  for _, cat in ipairs(CATS) do
    T.int(s.at_peak[cat], cat)
    T.int(s.live_by_category[cat], cat)
  end
  T.eq(t:bytes(c), 30)
  t:drop(b, c)
  T.eq(t:live(), 0)
  T.eq(t:bytes(c), nil, "a freed tensor has no size")
end

-- The binding remembers labels by the address of their Lua string; a label
-- made, collected, and another made (often at the same address) must still
-- be named by its own text, on every call that takes a label.
function tests.labels_should_keep_their_text_when_strings_are_collected_and_made_again()
  local t = vram.tape()
  t:timeline(true)
  local want = {}
  for i = 1, 400 do
    local label = string.format("op%d", i) -- a new short string each time
    local k = i % 3
    if k == 0 then
      t:drop(t:alloc(i, "activations", label))
    elseif k == 1 then
      t:temp(i, "temporaries", label)
    else
      t:drop(t:param(i, "weights", label))
    end
    want[#want + 1] = label
    label = nil -- luacheck: ignore (the string may now be collected)
    if i % 7 == 0 then collectgarbage() end
  end
  local names = t:names()
  T.eq(#names, 1 + 400 + 0, "setup, then each label once")
  for i = 1, 400 do T.eq(names[i + 1], want[i], "label " .. i) end
  -- the label of each event is the op that made it
  local n = t:timeline_len()
  local seen = {}
  for i = 1, n do
    local _, _, _, _, op = t:timeline_event(i)
    if op then seen[op] = (seen[op] or 0) + 1 end
  end
  for i = 1, 400 do T.ok(seen[want[i]], "op" .. i .. " labels its events") end
  -- an embedded NUL ends a label, as the tape's own lookup reads it
  t:alloc(1, "activations", "op5\0tail")
  T.eq(#t:names(), 401, "op5\\0tail is op5")
end

-- The binding knows a category by its string's address once met; strings
-- made at run time, before and after, name the same categories, and an
-- unknown one is still refused after the known ones were met.
function tests.categories_should_be_found_however_their_strings_are_made()
  local t = vram.tape()
  for round = 1, 3 do
    for _, cat in ipairs(CATS) do
      local made = cat:sub(1, 3) .. cat:sub(4) -- a string built now
      t:drop(t:alloc(round, made))
      t:temp(round, cat)
    end
  end
  local by = t:live_by_category()
  for _, cat in ipairs(CATS) do T.eq(by[cat], 0, cat) end
  local a = t:alloc(7, ("kv_" .. "cache"))
  T.eq(t:live_by_category().kv_cache, 7)
  t:drop(a)
  T.raises(function() t:alloc(1, "weight") end, "unknown category 'weight'")
end

function tests.a_temporary_should_raise_the_peak_but_not_live_bytes()
  local t = vram.tape()
  t:alloc(100, "activations")
  t:temp(1000, "temporaries", "softmax")
  local s = t:stats()
  T.eq(s.live, 100)
  T.eq(s.peak, 1100)
  T.eq(s.peak_op, "softmax")
  T.eq(s.at_peak.temporaries, 1000)
end

function tests.backward_should_peak_at_the_weight_gradient_and_keep_it()
  local t = vram.tape()
  local W, L = linear_then_loss(t)
  T.eq(t:live(), 704)
  t:phase("backward")
  t:backward(L)
  local s = t:stats()
  T.eq(s.peak, 1104)
  T.eq(s.peak_phase, "backward")
  T.eq(s.peak_op, "linear")
  T.eq(s.phase_peaks, { forward = 704, backward = 1104 })
  T.eq(s.at_peak.gradients, 400)
  T.eq(s.live, 804)
  T.eq(s.live_by_category.gradients, 400)
  local g = t:grad(W)
  T.int(g)
  T.eq(t:bytes(g), 400)
  T.eq(t:grad(L), nil)
  t:drop(L)
  t:zero_grad()
  T.eq(t:live(), 400)
  T.eq(t:grad(W), nil)
  T.ok(tostring(t):find("peak 1104 B in backward", 1, true), tostring(t))
end

-- x 100, v = view(x) 0, L 4; backward: dv 100 becomes dx (peak 208, 204 after)
function tests.a_view_edge_should_pass_the_gradient_through()
  local t = vram.tape()
  local x = t:alloc(100, "activations")
  local v = t:alloc(0, "activations")
  t:node({}, { x, -1 }, { v }) -- bytes -1: output 1's gradient passes through
  local L = t:alloc(4, "logits_loss")
  t:node({}, { v, 100 }, { L })
  t:backward(L)
  T.eq(t:stats().peak, 208)
  T.eq(t:live(), 204)
  T.eq(t:bytes(t:grad(x)), 100)
end

function tests.retain_should_keep_a_tensor_until_each_reference_is_dropped()
  local t = vram.tape()
  local a = t:alloc(100, "activations")
  t:retain(a)
  t:drop(a)
  T.eq(t:live(), 100)
  t:drop(a)
  T.eq(t:live(), 0)
  T.raises(function() t:retain(a) end, "tape:retain: unknown or already freed tensor id")
end

-- The checkpointed model of check_tape.c: forward peak 1000, live 704;
-- backward recomputes the segment: peak 1304 at op2; 804 after.
function tests.a_checkpointed_segment_should_be_recomputed_in_backward()
  local t = vram.tape()
  t:phase("forward")
  local W = t:param(400, "weights")
  local x = t:alloc(100, "inputs")
  t:ckpt_begin()
  local h = t:alloc(300, "activations")
  t:node({ x, W }, { W, 400 }, { h }, 0, "op1")
  local y = t:alloc(200, "activations")
  t:node({ h }, { h, 300 }, { y }, 0, "op2")
  t:drop(h)
  t:ckpt_end({ x }, { y }, "block")
  local L = t:alloc(4, "logits_loss")
  t:node({ y }, { y, 200 }, { L }, 0, "loss")
  t:drop(x, y)
  T.eq(t:live(), 704)
  T.eq(t:stats().peak, 1000)
  t:phase("backward")
  t:backward(L)
  local s = t:stats()
  T.eq(s.peak, 1304)
  T.eq(s.peak_phase, "backward")
  T.eq(s.peak_op, "op2")
  T.eq(s.live, 804)
  T.eq(s.live_by_category.gradients, 400)
end

-- The checkpointed model with replay_drop(h) instead of drop(h): the forward
-- keeps h (a cache holds it), only the recomputation drops its twin
-- (walk-through in check_tape.c): forward peak 1004, backward peak 1604,
-- 1104 after.
function tests.replay_drop_should_drop_only_in_the_recomputation()
  local t = vram.tape()
  local W = t:param(400, "weights")
  local x = t:alloc(100, "inputs")
  T.raises(function() t:replay_drop(x) end, "tape:replay_drop: ckpt_end without ckpt_begin")
  t:ckpt_begin()
  local h = t:alloc(300, "activations")
  t:node({ x, W }, { W, 400 }, { h })
  local y = t:alloc(200, "activations")
  t:node({ h }, { h, 300 }, { y })
  t:replay_drop(h)
  T.eq(t:live(), 1000)
  t:ckpt_end({ x }, { y })
  local L = t:alloc(4, "logits_loss")
  t:node({ y }, { y, 200 }, { L })
  t:drop(x, y)
  T.eq(t:stats().peak, 1004)
  t:backward(L)
  T.eq(t:stats().peak, 1604)
  T.eq(t:live(), 1104)
  T.eq(t:bytes(h), 300)
end

function tests.reset_should_empty_the_tape_for_reuse()
  local t = vram.tape()
  local _, L = linear_then_loss(t)
  t:backward(L)
  t:reset()
  local s = t:stats()
  T.eq(s.live, 0)
  T.eq(s.peak, 0)
  T.eq(s.peak_phase, "setup")
  T.eq(s.peak_op, nil)
  T.eq(s.phase_peaks, {})
  local W2, L2 = linear_then_loss(t)
  T.eq(W2, 0, "ids start again at 0")
  t:phase("backward")
  t:backward(L2)
  T.eq(t:stats().peak, 1104)
  T.eq(t:live(), 804)
end

function tests.tape_errors_should_name_the_method_and_the_problem()
  local t = vram.tape()
  local a = t:alloc(10, "activations")
  T.raises(function() t:drop(999) end, "tape:drop: unknown or already freed tensor id")
  t:drop(a)
  T.raises(function() t:drop(a) end, "tape:drop: unknown or already freed tensor id")
  T.raises(function() t:alloc(-1, "activations") end, "bytes must be >= 0, got -1")
  T.raises(function() t:temp(-1, "temporaries") end, "bytes must be >= 0")
  local e = T.raises(function() t:alloc(1, "nope") end, "unknown category 'nope'")
  for _, cat in ipairs(CATS) do T.ok(e and e:find(cat, 1, true), cat) end
  T.raises(function() t:ckpt_end({}, {}) end, "tape:ckpt_end: ckpt_end without ckpt_begin")
  t:ckpt_begin()
  T.raises(function() t:ckpt_begin() end, "tape:ckpt_begin: checkpoint segments cannot nest")
  T.raises(function() t:backward() end, "tape:backward: checkpoint segments cannot nest")
  t:ckpt_end({}, {})
  local x, v = t:alloc(1, "activations"), t:alloc(0, "activations")
  T.raises(function() t:node({}, { x, -2 }, { v }) end,
           "tape:node: gradient alias names an output the node does not have")
  T.raises(function() t:node({}, { x }, { v }) end, "gradient edges come in {id, bytes} pairs")
  T.raises(function() t:node({ 1.5 }, {}, { v }) end, "saved tensors[1] is not an integer id")
  T.raises(function() t:node({}, {}, { v }, -1) end, "temp bytes must be >= 0")
  local many = {}
  for i = 1, 65 do many[i] = x end
  T.raises(function() t:node(many, {}, { v }) end, "more than 64 saved tensors")
  T.raises(function() t:node("x", {}, { v }) end, "table expected")
  T.raises(function() t:backward(12345) end, "tape:backward: unknown or already freed tensor id")
  T.raises(function() t:param(1, "weights", {}) end, "bad argument #3 to 'param' (string expected")
  T.eq(t:grad(12345), nil)
  T.eq(t:bytes(-1), nil)
end

-- A negative edge size -b names output b as an alias; sizes far below any
-- output (which once wrapped when cast to int, and math.mininteger, whose
-- negation is undefined in C) must be refused as aliases past the outputs.
function tests.huge_negative_edge_sizes_should_be_refused_not_wrapped()
  local t = vram.tape()
  local x, v = t:alloc(1, "activations"), t:alloc(0, "activations")
  for _, b in ipairs({ -((1 << 32) + 1), -(1 << 40), math.mininteger }) do
    T.raises(function() t:node({}, { x, b }, { v }) end, "gradient alias", tostring(b))
  end
end

function tests.tape_errors_should_carry_this_file_and_line()
  local t = vram.tape()
  local e = T.raises(function() t:drop(5) end, "tape:drop")
  T.ok(e and e:find("test_vram%.lua:%d+:"), e)
end

function tests.a_closed_tape_should_refuse_methods()
  local outer
  do
    local t <close> = vram.tape()
    t:alloc(8, "activations")
    outer = t
  end
  T.eq(tostring(outer), "vram.tape (closed)")
  T.raises(function() outer:live() end, "tape is closed")
  T.raises(function() outer:alloc(1, "weights") end, "tape is closed")
end

-- A recycled tape is closed; the next vram.tape() is a fresh tape in its
-- memory (its numbers those of a new one, its labels its own), however the
-- recycled one was left; recycling more than the spares hold frees the rest.
function tests.a_recycled_tape_should_close_and_the_next_be_fresh()
  local function step(t)
    local w = t:param(400, "weights", "w")
    local x = t:alloc(100, "inputs", "x")
    local y = t:alloc(200, "activations", "linear")
    t:node({ x, w }, { w, 400 }, { y }, 0, "linear")
    t:drop(x)
    t:phase("backward")
    t:backward(y)
    return t:stats()
  end
  local want = step(vram.tape())
  local used = vram.tape()
  used:rounding(512, 1 << 20, 2 << 20)
  used:timeline(true)
  used:alloc(1000, "temporaries", "left.over")
  used:ckpt_begin()
  used:recycle()
  T.eq(tostring(used), "vram.tape (closed)")
  T.raises(function() used:live() end, "tape is closed")
  T.raises(function() used:recycle() end, "tape is closed")
  local again = vram.tape()
  local got = step(again)
  for _, k in ipairs({ "live", "peak", "reserved", "peak_reserved", "peak_phase", "peak_label" }) do
    T.eq(got[k], want[k], k)
  end
  T.eq(again:timeline_len(), 0)
  local many = {}
  for i = 1, 12 do many[i] = vram.tape() end
  for i = 1, 12 do many[i]:recycle() end
  for i = 1, 12 do T.eq(vram.tape():live(), 0) end
end

-- t:assign(src): t goes on as src would (its numbers, its labels, its
-- tensors), src untouched by what t does next; a source at work, a closed
-- one or another kind of value is refused with the method's name.
function tests.an_assigned_tape_should_go_on_as_its_source()
  local function built(t)
    t:rounding(512, 1 << 20, 2 << 20)
    local w = t:param(400, "weights", "w")
    local x = t:alloc(100, "inputs", "x")
    return w, x
  end
  local function step(t, w, x)
    local y = t:alloc(200, "activations", "linear")
    t:node({ x, w }, { w, 400 }, { y }, 0, "linear")
    t:phase("backward")
    t:backward(y)
    return t:stats()
  end
  local src = vram.tape()
  local w, x = built(src)
  local dst = vram.tape()
  dst:alloc(12345, "temporaries", "its.own")
  dst:phase("elsewhere")
  dst:assign(src)
  T.eq(dst:live(), src:live())
  local fresh = vram.tape()
  local want = step(fresh, built(fresh))
  local got = step(dst, w, x)
  for _, k in ipairs({ "live", "peak", "reserved", "peak_reserved", "peak_phase", "peak_label" }) do
    T.eq(got[k], want[k], k)
  end
  T.eq(src:live(), 400 + 100, "the source as it was built")
  src:window()
  T.raises(function() dst:assign(src) end, "tape:assign: the tape to copy is recording")
  T.raises(function() dst:assign({}) end, "vram.tape expected")
  local closed = vram.tape()
  closed:recycle()
  T.raises(function() dst:assign(closed) end, "tape is closed")
  T.eq(dst:stats().peak, got.peak, "a refused copy leaves the tape as it was")
end

-- ------------------------------------------------------------ hostile lists (issue 10)

-- A list whose __len closes the tape through a to-be-closed variable.
local function closing_list(t, n, items)
  return setmetatable(items or {}, { __len = function()
    do local c <close> = t end
    return n
  end })
end

function tests.a_list_whose_length_closes_the_tape_should_give_tape_is_closed()
  for _, call in ipairs({
    function(t, id) t:node(closing_list(t, 0), {}, { id }) end,
    function(t, id) t:node({ id }, {}, closing_list(t, 0)) end,
    function(t, id) t:ckpt_begin() t:ckpt_end({ id }, closing_list(t, 0)) end,
    function(t, id) t:bulk(16, 16, 1, closing_list(t, 2, { id, 8 }), 1) end,
  }) do
    local t = vram.tape()
    local id = t:alloc(16, "activations")
    T.raises(function() call(t, id) end, "tape is closed")
    T.eq(tostring(t), "vram.tape (closed)")
  end
end

-- A kept echo (tape:echo_keep / echo_take, fit --knobs) under hostile
-- calls: a pairs list that closes the tape, one too long or odd, shifted
-- ids past 2^63, ids the other tape does not hold or freed, a closed or
-- reset tape, the same echo taken many times, a foreign userdata: each is
-- an error naming the argument or a refusal (false), never a crash (the
-- suite runs under ASan).
function tests.kept_echoes_should_refuse_hostile_arguments()
  local a = vram.tape()
  local w = a:param(64, "weights", "w")
  local x = a:alloc(100, "activations", "x")
  a:echo()
  local y = a:alloc(100, "activations", "y")
  a:node({ x, w }, { x, 100, w, 64 }, { y }, 8, "mm")
  a:drop(x)
  T.eq(a:echo_end(), true, "echoed")
  local kept = a:echo_keep()
  T.ok(kept ~= nil, "kept")
  local t = vram.tape()
  local w2 = t:param(64, "weights", "w")
  local x2 = t:alloc(100, "activations", "x")
  T.raises(function() t:echo_take(kept, closing_list(t, 2, { x, x2 }), w, w + 1, w2 - w) end,
    "tape is closed")
  t = vram.tape()
  w2, x2 = t:param(64, "weights", "w"), t:alloc(100, "activations", "x")
  local function len(n) return setmetatable({}, { __len = function() return n end }) end
  T.raises(function() t:echo_take(kept, len(1 << 40), 0, 0, 0) end, "id pairs")
  T.raises(function() t:echo_take(kept, { x, x2, w }, 0, 0, 0) end, "pairs")
  T.raises(function() t:echo_take(kept, { x, x2 }, 5, 2, 0) end, "0 .. 2^63")
  T.raises(function() t:echo_take(kept, { x, x2 }, 0, 1, math.maxinteger) end, "0 .. 2^63")
  T.raises(function() t:echo_take(kept, { x, x2 }, 3, 4, -4) end, "0 .. 2^63")
  T.raises(function() t:echo_take(t, { x, x2 }, 0, 0, 0) end, "vram.echo expected")
  T.raises(function() t:echo_take(io and io.stdout or {}, {}, 0, 0, 0) end, "vram.echo expected")
  T.eq(t:echo_take(kept, { x, 999999 }, w, w + 1, w2 - w), false, "an input it does not hold")
  T.eq(t:echo_take(kept, { x, x2 }, w, w + 1, 1 << 30), false, "parameters it does not hold")
  T.eq(t:echo_take(kept, { x, x2 }, 0, 0, 0), false, "parameters left out")
  local freed = t:alloc(100, "activations", "gone")
  t:drop(freed)
  T.eq(t:echo_take(kept, { x, freed }, w, w + 1, w2 - w), false, "a freed input")
  for _ = 1, 100 do -- taken and replayed again and again, each on the last output
    T.eq(t:echo_take(kept, { x, x2 }, w, w + 1, w2 - w), true, "taken")
    local out = t:echo_replay({ x, x2 }, w, w + 1, w2 - w, y)
    x2 = out
  end
  -- each replay made its output; every input stays, saved by its node
  T.eq(t:live(), 64 + 100 + 100 * 100, "100 replays, each on the last output")
  t:reset()
  T.eq(t:echo_take(kept, { x, x2 }, w, w + 1, w2 - w), false, "a reset tape holds none of them")
  t:echo()
  T.eq(t:echo_take(kept, {}, 0, 0, 0), false, "refused while an echo is open")
  do local c <close> = t end
  T.raises(function() t:echo_take(kept, {}, 0, 0, 0) end, "tape is closed")
  T.raises(function() t:echo_keep() end, "tape is closed")
  a:reset()
  T.eq(a:echo_keep(), nil, "a reset tape has no echo to keep")
end

function tests.list_lengths_outside_their_range_should_be_refused_with_the_length()
  local t = vram.tape()
  local id = t:alloc(16, "activations")
  local function len(n) return setmetatable({}, { __len = function() return n end }) end
  T.raises(function() t:node(len((1 << 32) - 2), {}, { id }) end,
           "more than 64 saved tensors (length 4294967294)")
  T.raises(function() t:node({}, len(-5), { id }) end, "gradient edges: length -5 is negative")
  T.raises(function() t:node({}, {}, len(math.maxinteger)) end, "more than 64 outputs")
  T.raises(function() t:bulk(16, 16, 2, len(math.mininteger), 1) end,
           "gradient edge entries: length " .. math.mininteger .. " is negative")
  T.raises(function() t:bulk(16, 16, 1 << 20, {}, 1 << 20) end, "more than 4194304 gradient edges")
  T.raises(function() t:bulk(16, 16, 2, { id, 8 }, 1) end, "2 {param, bytes} pairs, got 2 entries")
  T.eq(t:live(), 16) -- nothing of the refused calls reached the tape
end

function tests.lists_should_be_read_through_their_metamethods()
  local t = vram.tape()
  local x = t:alloc(100, "inputs")
  local y = t:alloc(200, "activations")
  local ids = { x }
  local proxy = setmetatable({}, { __len = function() return #ids end,
                                   __index = function(_, i) return ids[i] end })
  t:node(proxy, { x, 100 }, { y }, 0, "op")
  t:drop(x)
  T.eq(t:live(), 300) -- x is held by the node it was saved for
end

function tests.bulk_should_work_without_its_optional_label()
  local t = vram.tape()
  local w = t:param(64, "weights")
  T.eq(t:bulk(16, 512, 2, { w, 64, w, 64 }, 1), 0)
  T.eq(t:bulk(16, 512, 1, { w, 64 }, 1, "named"), 1)
  T.eq(t:live(), 64 + 2 * 16 + 16)
end

function tests.labels_and_phases_past_511_should_all_be_kept()
  local t = vram.tape()
  for i = 1, 3000 do t:alloc(1, "activations", "label" .. i) end
  for i = 1, 200 do
    t:phase("phase" .. i)
    t:alloc(1, "activations")
  end
  local names = t:names()
  T.eq(#names, 1 + 3000 + 200) -- "setup", the labels, the phases
  T.eq(names[3001], "label3000")
  local n = 0
  local peaks = t:stats().phase_peaks
  T.eq(peaks.setup, 3000)
  for phase, peak in pairs(peaks) do
    n = n + 1
    if phase ~= "setup" then T.eq(peak, 3000 + tonumber(phase:match("%d+"))) end
  end
  T.eq(n, 1 + 200)
end

-- The seven probes of a one-tensor program: 4*B*T bytes of activations.
local function tiny_program()
  local probes = { { 1, 1 }, { 1, 2 }, { 1, 3 }, { 2, 1 }, { 2, 2 }, { 2, 3 }, { 3, 5 } }
  local traces, names = {}, nil
  for i, p in ipairs(probes) do
    local t = vram.tape()
    t:trace(p[1], p[2])
    t:drop(t:alloc(p[1] * p[2] * 4, "activations", "x"))
    traces[i] = t:take_trace()
    names = t:names()
  end
  return traces, names, probes
end

function tests.a_finalized_program_reached_through_a_weak_table_should_raise()
  local traces, names, probes = tiny_program()
  local prog = assert(vram.fit_program(traces, names, nil, probes, { 1, 2 }))
  T.eq(prog:peak(4, 8), 4 * 4 * 8)
  -- Lua clears a weak key whose finalizer ran only in the next cycle
  local weak = setmetatable({}, { __mode = "k" })
  weak[prog] = true
  prog = nil
  collectgarbage()
  local seen = 0
  for p in pairs(weak) do
    seen = seen + 1
    T.raises(function() p:peak(1, 1) end, "vram.program was finalized")
    T.raises(function() p:eval(1, 1) end, "vram.program was finalized")
  end
  T.eq(seen, 1)
end

function tests.a_program_should_raise_when_its_bytes_overflow()
  local traces, names, probes = tiny_program()
  local prog = assert(vram.fit_program(traces, names, nil, probes, { 1, 2 }))
  T.eq(prog:peak(1 << 20, 1 << 20), 4 << 40)
  T.raises(function() prog:peak(1 << 31, 1 << 31) end, "sizes overflow int64 at 2147483648, 2147483648")
  -- 4 * B * T with B * T = 2^62: the product fits, the bytes do not
  T.raises(function() prog:peak(1 << 40, 1 << 22) end, "sizes overflow int64")
  T.raises(function() prog:peak(4) end, "this program takes 2 sizes, got 1")
  -- a third size of degree 1: 4 B T + 64 B R
  local r3 = {}
  for _, p in ipairs(probes) do r3[#r3 + 1] = p end
  local grid = {}
  for _, b in ipairs({ 1, 2 }) do
    for _, t in ipairs({ 1, 2, 3 }) do
      for _, r in ipairs({ 8, 9 }) do grid[#grid + 1] = { b, t, r } end
    end
  end
  grid[#grid + 1] = { 3, 5, 16 }
  local tr3, nm3 = {}, nil
  for i, p in ipairs(grid) do
    local t = vram.tape()
    t:trace(p[1], p[2])
    t:drop(t:alloc(p[1] * p[2] * 4 + 64 * p[1] * p[3], "activations", "x"))
    tr3[i], nm3 = t:take_trace(), t:names()
  end
  local p3 = assert(vram.fit_program(tr3, nm3, nil, grid, { 1, 2, 1 }))
  T.eq(p3:peak(7, 1000, 64), 4 * 7 * 1000 + 64 * 7 * 64)
  T.eq(select(2, vram.fit_program(tr3, nm3, nil, grid, { 1, 2, 2 })),
    "needs the grid's probes and at least one more to confirm")
end

-- A device program (stdlib/compiled_parallel.lua): allocated and reserved
-- bytes as the caching allocator counts them, and an input's bytes given at
-- evaluation. Per probe: 4 B T bytes, 2 x the input, then B x (10 MiB + 1)
-- bytes (a request above 10 MiB: its own 2 MiB-rounded segment), all freed.
local MiB = 1 << 20
local BLOCKS = { round = 512, small_max = 10 * MiB, large_round = 2 * MiB }

local function device_traces(before)
  local probes = { { 1, 1 }, { 1, 2 }, { 1, 3 }, { 2, 1 }, { 2, 2 }, { 2, 3 }, { 3, 5 } }
  local traces, names = {}, nil
  for i, p in ipairs(probes) do
    local t = vram.tape()
    before(t)
    t:trace(p[1], p[2])
    t:mark() -- numbered from the trace's start, whatever the tape made before
    local a = t:alloc(p[1] * p[2] * 4, "activations", "a")
    t:trace_input(1, 2, "activations", "held")
    local b = t:alloc(p[1] * (10 * MiB + 1), "activations", "b")
    t:drop(b)
    t:trace_input(1, -2, "activations", "held")
    t:drop(a)
    traces[i], names = t:take_trace(), t:names()
  end
  return traces, names, probes
end

function tests.a_device_program_should_count_blocks_and_inputs()
  local traces, names, probes = device_traces(function(t) t:mark(); t:mark() end)
  local prog = assert(vram.fit_program(traces, names, 512, probes, { 1, 2 }, BLOCKS))
  -- B 4, T 8, input 1000: 128 B -> 512; the input's 2000 B as the tape
  -- holds them, reserved as 2048; 4 x (10 MiB + 1) = 41943044 B -> 41943552,
  -- reserved as 42 MiB = 44040192
  local reserved, peak, live = prog:device(4, 8, 1000)
  T.eq(peak, 512 + 2000 + 41943552)
  T.eq(reserved, 512 + 2048 + 44040192)
  T.eq(live, 0)
  -- B 1, T 1, input 0: 512 + 0 + 10 MiB + 512 (small: 512-rounded)
  T.eq(select(2, prog:device(1, 1, 0)), 512 + 10 * MiB + 512)
  T.eq(prog:device(1, 1, 0), 512 + 12 * MiB)
  -- misuse: each an error naming what is wrong
  T.raises(function() prog:peak(4, 8) end, "a device program answers only prog:device")
  T.raises(function() prog:device(4, 8) end, "this program takes 2 sizes and 1 inputs, got 2")
  T.raises(function() prog:device(4, 8, -1) end, "input")
  T.raises(function() prog:device(1 << 40, 1 << 40, 0) end, "sizes overflow int64")
  -- inputs need a device program; blocks must be integers
  T.eq(select(2, vram.fit_program(traces, names, 512, probes, { 1, 2 })),
    "a trace's inputs fit only a device program, 4 inputs at most")
  T.raises(function() vram.fit_program(traces, names, 512, probes, { 1, 2 }, { small_max = "x" }) end,
    "small_max must be an integer")
  local tt, tn, tp = tiny_program()
  local plain = assert(vram.fit_program(tt, tn, nil, tp, { 1, 2 }))
  T.raises(function() plain:device(4, 8) end, "counts allocated bytes only")
  -- a row at once: prog:device at each seq, false where the sizes overflow
  local seqs, inputs = { 8, 1, 3, 1 << 40, 1000 }, { 1000, 0, 7, 0, 123456 }
  for _, b in ipairs({ 4, 1, 1 << 40 }) do
    local reserved_row, live_row = prog:device_line(b, seqs, inputs)
    for i, n in ipairs(seqs) do
      local ok, r, _, l = pcall(prog.device, prog, b, n, inputs[i])
      T.eq(reserved_row[i], ok and r, ("reserved at %d x %d"):format(b, n))
      T.eq(live_row[i], ok and l, ("live at %d x %d"):format(b, n))
    end
  end
  T.eq(prog:device_line(1 << 40, { 1 << 40 }, { 0 })[1], false, "overflow: false, device raises")
  T.eq(#prog:device_line(3, {}, {}), 0)
  T.raises(function() prog:device_line(4, { 8 }) end, "table expected")
  T.raises(function() prog:device_line(4, { 8, 9 }, { 1 }) end, "one input for each seq")
  T.raises(function() prog:device_line(4, { 8, 0 }, { 1, 1 }) end, "seqs[2] must be an integer >= 1")
  T.raises(function() prog:device_line(4, { 8 }, { -1 }) end, "inputs[1] must be an integer >= 0")
  T.raises(function() prog:device_line(0, { 8 }, { 1 }) end, "batch")
  T.raises(function() plain:device_line(4, { 8 }) end, "counts allocated bytes only")
end

-- A stack of layers whose backward frees more than it allocates, each
-- layer's pattern the one before's (runtime/core/trace_device.c
-- dominated_before: only the first layer's moments are checked), fitted as
-- a device program: at every size it answers what the tape itself counts,
-- in allocated and in reserved bytes, small sizes and sizes of 2^58 bytes
-- whose runs' sums are checked for overflow (none overflows here).
local function layers(t, round, B, T, unit)
  local function alloc(bytes, cat, label) return t:alloc(round(bytes), cat, label) end
  local n, act = 5, {}
  local x = alloc(B * T * unit, "activations", "x")
  for i = 1, n do
    act[i] = alloc(B * T * 6 * unit + 100, "activations", "act")
    t:drop(alloc(B * T * 3 * unit, "activations", "tmp"))
  end
  local g = {}
  for i = n, 1, -1 do
    local w = alloc(B * T * 5 * unit + 7, "activations", "work")
    g[i] = alloc(B * T * 2 * unit, "gradients", "g")
    local w2 = alloc(T * 4 * unit, "activations", "work2")
    t:drop(w)
    t:drop(act[i])
    t:drop(w2)
  end
  for i = 1, n do t:drop(g[i]) end
  t:drop(x)
end

-- A tensor of ~2^62 bytes and three small ones freed in a row, then one
-- allocated: four such items could overflow for all the run's bound knows
-- (trace_device.c: 4 x 2^62 > INT64_MAX), so each addition is checked.
local function seesaw(t, round, B, T, unit)
  local function alloc(bytes, cat, label) return t:alloc(round(bytes), cat, label) end
  local held = { alloc((1 << 62) + B * T * 512, "activations", "held") }
  for k = 2, 4 do held[k] = alloc(B * T * 512 * k + 100, "activations", "held") end
  for k = 1, 4 do t:drop(held[k]) end
  t:drop(alloc(B * T * unit, "activations", "after"))
end

-- Six layers, three of them composed (a bulk between layers 2 and 6, as
-- stdlib/compose.lua M.layers puts it): the program's BULK_FWD and
-- BULK_BWD ops (trace_device.c dbulk_bwd, its loop in closed form) against
-- the tape's own bulk. Each layer's backward leaves more than it frees (its
-- weight's gradient is 10 activations) and layer 6, whose backward the
-- bulk replays, needs a temporary of 30 that layers 1 and 2 do not: the
-- peak is the last composed layer's.
local function composed(t, round, B, T, unit)
  local S = B * T * unit * 6 + 100
  local sb, wb = round(S), round(10 * S)
  local w = {}
  for i = 1, 6 do w[i] = t:param(4096, "weights", "w") end
  local function layer(x, i)
    local h = t:alloc(sb, "activations", "h")
    t:node({ x, w[i] }, { x, sb, w[i], wb }, { h }, i == 6 and round(30 * S) or 0, "lin")
    t:drop(t:alloc(round(B * T * unit * 9), "activations", "tmp"))
    return h
  end
  local x0 = t:alloc(sb, "activations", "x")
  local x1 = layer(x0, 1)
  local before, rbefore = t:mark()
  local x2 = layer(x1, 2)
  local after, rafter = t:mark()
  local bulk = t:bulk(after - before, rafter - rbefore, 3, { w[3], wb, w[4], wb, w[5], wb }, 1,
    "layers")
  local x6 = layer(x2, 6)
  t:bulk_end(bulk)
  local L = t:alloc(round(4), "logits_loss", "loss")
  t:node({ x6 }, { x6, sb }, { L }, 0, "loss")
  t:drop(x0, x1, x2, x6)
  t:backward(L)
end

-- Two tensors of `each` bytes allocated, both freed, then one of `one`
-- allocated and freed: whether the moment after the second is checked is
-- what the walks below test (trace_device.c outweighed).
local function pair_for_one(t, round, each, one)
  local x = t:alloc(round(each), "activations", "x")
  local y = t:alloc(round(each), "activations", "y")
  t:drop(x)
  t:drop(y)
  t:drop(t:alloc(round(one), "activations", "one"))
end

-- Two tensors of just over 10 MiB a unit freed for one of twice that and
-- a block more (trace_device.c outweighed): allocated, the later moment is
-- higher; reserved, each of the two took its own 2 MiB-rounded segment
-- (12 MiB at one unit) and the wide one 22 MiB, so the earlier moment is
-- the reserved peak and must stay checked. Then a narrower pair freed for
-- a wider one, where the later moment is higher in both.
local function wide(t, round, B, T)
  local c1 = 10 * MiB + 512
  pair_for_one(t, round, B * T * c1, B * T * (2 * c1 + 512))
  pair_for_one(t, round, B * T * 1024, B * T * 4096)
end

-- Two tensors of 600 B a unit freed for one of 1500: 300 B a unit more
-- before rounding, but each of the two rounds up to its 512 B block on its
-- own (1024 + 1024 against 1536 at one unit), so the earlier moment is the
-- peak (trace_device.c outweighed: a negative count's rounding slack).
local function rounded_pair(t, round, B, T) pair_for_one(t, round, B * T * 600, B * T * 1500) end

-- Two tensors of 100000 B a token plus 5120 B a token per sample freed for
-- one of 250000 B a token: by tokens alone the later moment is higher, but
-- at 64 x 4096 the earlier one is (1.75 GB each): a size of two terms is
-- never outweighed (trace_device.c).
local function two_terms(t, round, B, T)
  pair_for_one(t, round, T * 100000 + B * T * 5120, T * 250000)
end

function tests.a_device_program_should_answer_what_the_tape_counts_at_every_size()
  local probes = { { 1, 1 }, { 1, 2 }, { 1, 3 }, { 2, 1 }, { 2, 2 }, { 2, 3 }, { 3, 5 } }
  -- {walk, unit, the most batch x seq the tape can hold}: composed at 2^46
  -- and 5 x 17 has terms past 2^58, so dbulk_bwd runs its loop
  local huge = math.maxinteger
  for _, case in ipairs({ { layers, 1, huge }, { layers, 1 << 40, 1 << 12 }, { seesaw, 3, huge },
    { composed, 1, huge }, { composed, 1 << 40, 1 << 12 }, { composed, 1 << 46, 85 },
    { wide, 1, 1 << 14 }, { rounded_pair, 1, huge }, { two_terms, 1, huge } }) do
    local walk, unit, most = case[1], case[2], case[3]
    local traces, names = {}, nil
    for i, p in ipairs(probes) do
      local t = vram.tape()
      t:trace(p[1], p[2])
      walk(t, function(x) return x end, p[1], p[2], unit)
      traces[i], names = t:take_trace(), t:names()
    end
    local prog = assert(vram.fit_program(traces, names, 512, probes, { 1, 2 }, BLOCKS))
    for _, at in ipairs({ { 1, 1 }, { 4, 8 }, { 7, 1000 }, { 64, 4096 }, { 3, 333 }, { 5, 17 } }) do
      local b, n = at[1], at[2]
      if b * n <= most then
        local t = vram.tape() -- bytes rounded as the program rounds them
        t:rounding(BLOCKS.round, BLOCKS.small_max, BLOCKS.large_round)
        walk(t, function(x) return cdiv(x, 512) * 512 end, b, n, unit)
        local s = t:stats()
        local reserved, peak, live = prog:device(b, n)
        local where = ("unit %d at %d x %d"):format(unit, b, n)
        T.eq(peak, s.peak, where)
        T.eq(reserved, s.peak_reserved, where)
        T.eq(live, t:live(), where)
      end
    end
  end
end

function tests.trace_input_should_refuse_a_tape_that_does_not_trace()
  local t = vram.tape()
  T.raises(function() t:trace_input(1, 1, "activations") end, "trace_input")
  t:trace(1, 1)
  T.raises(function() t:trace_input(0, 1, "activations") end, "an input slot is 1 to 4")
  T.raises(function() t:trace_input(5, 1, "activations") end, "an input slot is 1 to 4")
  T.raises(function() t:trace_input(1, 1, "no such category") end, "category")
  t:trace_input(4, math.mininteger, "activations") -- any multiple: checked at evaluation
end

-- ------------------------------------------------------------ units and rounding (issue 11)

function tests.units_should_be_exact_integers()
  T.eq(vram.units.GiB, 1 << 30)
  T.eq(vram.units.GB, 1000000000)
  T.eq(vram.units.MiB, 1 << 20)
  T.eq(vram.units.MB, 1000000)
  T.eq(vram.units.KiB, 1024)
  T.eq(vram.units.B, 1)
  T.eq(math.type(vram.units.GiB), "integer")
end

function tests.categories_should_list_the_tapes_categories_in_order()
  local cats = vram.categories()
  T.eq(#cats, 11)
  T.eq(cats[1], "weights")
  T.eq(cats[#cats], "overhead")
  local t = vram.tape()
  for _, c in ipairs(cats) do t:alloc(1, c) end -- each is a category the tape knows
  T.eq(t:live(), 11)
  cats[1] = "changed"
  T.eq(vram.categories()[1], "weights") -- a fresh list each call
end

function tests.round_up_should_round_to_the_block_and_refuse_overflow()
  T.eq(vram.round_up(0, 512), 0)
  T.eq(vram.round_up(1, 512), 512)
  T.eq(vram.round_up(512, 512), 512)
  T.eq(vram.round_up(513, 512), 1024)
  T.eq(vram.round_up(513, 0), 513)
  T.eq(vram.round_up(math.maxinteger - 511, 512), math.maxinteger - 511) -- a multiple of 512
  T.raises(function() vram.round_up(math.maxinteger, 512) end, "vram.round_up")
  T.raises(function() vram.round_up(-1, 512) end, "bytes must be >= 0")
end

function tests.reserved_rounding_should_overflow_as_an_error_not_a_zero_peak()
  local t = vram.tape()
  t:rounding(512, 10 << 20, 2 << 20)
  T.raises(function() t:alloc(math.maxinteger, "activations") end, "overflow")
  T.eq(t:live(), 0)
  local s = t:stats()
  T.eq(s.peak, 0)
  T.eq(s.peak_reserved, 0)
end

-- A collection step inside stats()/names() (they allocate per phase and
-- label) may run a finalizer that closes the tape; trusted scripts may set
-- __gc. Both then raise "tape is closed" instead of reading freed memory
-- (ASan saw the read in names() before).
function tests.a_finalizer_closing_the_tape_mid_call_should_give_tape_is_closed()
  local hits = 0
  collectgarbage("incremental", 1, 1000) -- a collection step at nearly every allocation
  -- whether a cycle ends inside a call depends on the heap earlier tests
  -- left: rounds until two calls were hit (the tenth was enough in the
  -- full suite, not always in a subset)
  for _ = 1, 200 do
    if hits >= 2 then break end
    local t = vram.tape()
    for i = 1, 3000 do
      t:phase("phase" .. i)
      t:alloc(1, "activations")
    end
    setmetatable({}, { __gc = function() local c <close> = t end })
    for _, method in ipairs({ "stats", "names" }) do
      local ok, err = pcall(t[method], t)
      if not ok then
        T.ok(tostring(err):find("tape is closed", 1, true), err)
        hits = hits + 1
      end
    end
  end
  collectgarbage("incremental", 200, 100) -- Lua 5.4's defaults
  T.ok(hits > 0, "no finalizer ran inside a call: the test proves nothing")
end

-- Captures and echoes share the checkpoint's nesting statuses: their errors
-- name the recording the script misused, not a checkpoint.
function tests.a_capture_or_echo_misused_should_name_itself()
  T.raises(function() vram.tape():capture_end() end, "tape:capture_end: no capture is open")
  T.raises(function() vram.tape():echo_end() end, "tape:echo_end: no echo is open")
  local t = vram.tape()
  t:echo()
  T.raises(function() t:capture() end, "tape:capture: a checkpoint segment, capture or echo "
    .. "is already open (they cannot nest)")
  for _ = 2, 4 do t:echo() end -- echoes nest, 4 deep
  T.raises(function() t:echo() end, "tape:echo: a capture is open, or 4 echoes are")
  local c0 = vram.tape()
  c0:capture()
  T.raises(function() c0:echo() end, "tape:echo: a capture is open")
  -- a chain of replays: a count >= 1, answers for every pair, ids in range
  local e = vram.tape()
  local x = e:alloc(10, "activations")
  e:echo()
  local y = e:alloc(10, "activations")
  e:drop(x)
  T.ok(e:echo_end(), "an echo of an alloc and a drop")
  T.raises(function() e:echo_replay({ x, y }, 0, 0, 0, y, 0) end, "times must be >= 1")
  T.raises(function() e:echo_replay({ x, y, y, x }, 0, 0, 0, y, 2) end, "answers every pair")
  T.raises(function() e:echo_replay({}, 0, 1, math.maxinteger // 2, y, 3) end, "leave 0 .. 2^63")
  local z = e:echo_replay({ x, y }, 0, 0, 0, y, 3) -- y's copy drops y, its copy drops that
  T.eq(e:live(), 10, "three replays in a chain: each lets go of the one before")
  T.eq(z, y + 3, "the last replay's tensor")
  local c = vram.tape()
  c:capture()
  c:alloc(10, "activations")
  c:capture_end()
  T.raises(function() c:capture_repeat(math.maxinteger) end, "more than 2^26 operations")
  T.raises(function() c:capture_repeat(-1) end, "times must be >= 0")
end

-- A bulk's activations dropped by id before the backward reached them were
-- released twice (fuzz_hostile found live bytes at -15 after 635,785
-- executions).
function tests.a_bulk_dropped_before_backward_should_never_free_twice()
  local t = vram.tape()
  local first = t:bulk(5, 4, 3, {}, 0, "b")
  t:bulk_end(first)
  -- its node owns the bulk's activations: a script can neither drop nor
  -- retain them (a retain then two drops freed them twice)
  T.raises(function() t:drop(0) end, "unknown or already freed")
  T.raises(function() t:retain(0) end, "unknown or already freed")
  T.eq(t:live(), 15)
  local second = t:bulk(5, 4, 3, {}, 0, "b")
  t:bulk_end(second)
  T.eq(t:live(), 30)
  t:backward()
  local live, reserved = t:live()
  T.eq(live, 0)
  T.eq(reserved, 0)
end

-- A traced bulk of zero layers with parameters per layer: the backward read
-- nper edges from an empty list (fuzz_hostile, UBSan: pointer overflow).
function tests.a_traced_bulk_of_zero_layers_should_read_no_edges()
  local t = vram.tape()
  t:trace(1, 1)
  t:mark()
  t:mark()
  local b = t:bulk(209, 209, 0, {}, 3)
  t:bulk_end(b)
  local ok, err = pcall(t.backward, t)
  T.ok(ok or tostring(err):find("pattern", 1, true), err)
  T.ok(t:live() >= 0)
end

return tests
