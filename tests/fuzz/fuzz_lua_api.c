/* The vram API driven from Lua by the fuzz bytes: each op byte picks a
 * function (vram.bytes, the closed-form terms, json/yaml, tape methods on up
 * to three tapes), the following bytes pick its arguments from a pool of odd
 * values (0, -1, int64 limits, NaN, inf, -0.0, huge floats, strings, bogus
 * dtypes and categories, tables, ids the tape handed out, lists whose
 * __len or __index closes a tape, raises or returns a length out of any
 * range). Every call runs
 * under pcall inside the sandbox; errors are expected. Checked: no crash or
 * sanitizer report, and after each successful call the tape's invariants
 * (live >= 0, peak >= live, categories >= 0, live = sum of categories) and
 * exact arithmetic where it can be recomputed (vram.bytes of whole-byte
 * dtypes, vram.mul, vram.add). */
#define FZ_SANDBOX
#include "fuzz_common.h"

#include <stdint.h>

static const char DRIVER[] =
    "local data = ...\n"
    "local NIL = {}\n"
    "local V = { 0, 1, -1, 2, 3, 7, 8, 16, 64, 1000, 4096, 65536, 1 << 20, (1 << 31) - 1,\n"
    "  1 << 31, 1 << 32, 1 << 53, 1 << 62, math.maxinteger, math.mininteger,\n"
    "  math.maxinteger - 1, -(1 << 32), 0.5, -0.0, 1.0, 1e308, -1e308, 1 / 0, -1 / 0, 0 / 0,\n"
    "  2.0 ^ 63, -(2.0 ^ 63), '', 'x', '1', '0x10', 'fp32', 'bf16', 'fp16', 'tf32', 'int4', 'int8',\n"
    "  'uint8', 'int64', 'nf4', 'nf4_dq', 'nvfp4', 'mxfp4', 'fp8_e4m3', 'bogus', 'weights',\n"
    "  'activations', 'gradients', 'optimizer_state', 'temporaries', 'kv_cache', 'inputs',\n"
    "  'logits_loss', 'master_weights', 'buffers', 'GiB', 'GB', 'MiB', 'B', 'KiB', 'adamw', 'sgd',\n"
    "  'adam8bit', 'adafactor', 'lion', 'momentum', 'eager', 'flash', 'sdpa', 'rms', 'layer',\n"
    "  'forward', 'backward', true, false, NIL, {}, { 1 }, { 1, 2 }, { -1, -2 }, { 1, 1, 1, 1 },\n"
    "  { 1, 4096, 2, -1 }, { 'a' }, vram.json.null, string.rep('y', 300) }\n"
    "local ids, tapes = { 1, 2, 3 }, {}\n"
    "local pos = 1\n"
    "local function byte() local b = data:byte(pos) or 0; pos = pos + 1; return b end\n"
    "-- lists with hostile metatables: a __len or __index that closes a tape\n"
    "-- (the one called, or another), lengths outside any range, metamethods\n"
    "-- that raise (issue 10: the tape must never be touched after Lua ran)\n"
    "local function hostile()\n"
    "  local k = byte() % 6\n"
    "  local victim = tapes[byte() % 3 + 1]\n"
    "  local function close() if victim then pcall(function() local c <close> = victim end) end end\n"
    "  if k == 0 then return setmetatable({ ids[1], 8, ids[2], 8 }, { __len = function() close(); return byte() % 5 end }) end\n"
    "  if k == 1 then return setmetatable({}, { __len = function() return (1 << 32) - 2 end }) end\n"
    "  if k == 2 then return setmetatable({}, { __len = function() return -byte() end }) end\n"
    "  if k == 3 then return setmetatable({}, { __len = function() return byte() % 5 end,\n"
    "    __index = function(_, i) close(); return ids[i % #ids + 1] end }) end\n"
    "  if k == 4 then return setmetatable({}, { __len = function() error('len raises') end }) end\n"
    "  return setmetatable({}, { __len = function() return byte() end, __index = function() error('index raises') end })\n"
    "end\n"
    "local function arg()\n"
    "  local b = byte()\n"
    "  if b < 200 then local v = V[b % #V + 1]; if v == NIL then return nil end; return v end\n"
    "  if b < 230 then return ids[(b - 200) % #ids + 1] end\n"
    "  if b < 245 then local t = {}; for i = 1, byte() % 8 do t[i] = ids[byte() % #ids + 1] end; return t end\n"
    "  if b < 250 then return hostile() end\n"
    "  return byte() - 128\n"
    "end\n"
    "local function args(max) local a = {}; local n = byte() % (max + 1); for i = 1, n do a[i] = arg() end; return a, n end\n"
    "local function check(cond, what, ...) if not cond then error('INVARIANT: ' .. what .. ' ' .. table.concat({...}, ' '), 0) end end\n"
    "local function check_tape(t)\n"
    "  local ok, s = pcall(t.stats, t)\n"
    "  if not ok then return end\n"
    "  check(s.live >= 0, 'live < 0', s.live)\n"
    "  check(s.peak >= s.live, 'peak < live', s.peak, s.live)\n"
    "  local sum = 0\n"
    "  for k, v in pairs(s.live_by_category) do check(v >= 0, 'category < 0', k, v); sum = sum + v end\n"
    "  for k, v in pairs(s.at_peak) do check(v >= 0, 'category at peak < 0', k, v) end\n"
    "  check(sum == s.live, 'live ~= sum of categories', s.live, sum)\n"
    "end\n"
    "local WHOLE = { fp32 = 4, tf32 = 4, fp16 = 2, bf16 = 2, int8 = 1, uint8 = 1, int64 = 8, int32 = 4,\n"
    "  fp8_e4m3 = 1, fp8_e5m2 = 1 }\n"
    "-- the product and the largest partial product (as floats: no wrapping)\n"
    "local function exact_product(list, first, n)\n"
    "  local p, fp, worst = 1, 1.0, 1.0\n"
    "  for i = first, n do\n"
    "    local d = list[i]\n"
    "    if math.type(d) ~= 'integer' or d < 0 then return nil end\n"
    "    p = p * d; fp = fp * d; worst = math.max(worst, fp)\n"
    "  end\n"
    "  return p, worst\n"
    "end\n"
    "local METHODS = { 'alloc', 'param', 'drop', 'retain', 'replay_drop', 'temp', 'node', 'ckpt_begin',\n"
    "  'ckpt_end', 'backward', 'zero_grad', 'phase', 'grad', 'bytes', 'live', 'stats', 'reset',\n"
    "  'bulk', 'bulk_end', 'rounding', 'reserved', 'trace', 'take_trace', 'mark', 'names', 'nope' }\n"
    "local FUNCS = { 'bytes', 'dtype', 'dtypes', 'to', 'fmt', 'require_version', 'linear_params',\n"
    "  'embedding_params', 'norm_params', 'conv_params', 'optimizer_state', 'attention_scores',\n"
    "  'kv_cache', 'mul', 'add' }\n"
    "local steps = 0\n"
    "while pos <= #data and steps < 400 do\n"
    "  steps = steps + 1\n"
    "  local op = byte() % 8\n"
    "  if op <= 2 then\n"
    "    local t = tapes[byte() % 3 + 1]\n"
    "    if not t then t = vram.tape(); tapes[#tapes + 1] = t end\n"
    "    local name = METHODS[byte() % #METHODS + 1]\n"
    "    local m = t[name]\n"
    "    if m then\n"
    "      local a, n = args(6)\n"
    "      local ok, r = pcall(m, t, table.unpack(a, 1, n))\n"
    "      if ok and math.type(r) == 'integer' then ids[#ids % 32 + 1] = r end\n"
    "      check_tape(t)\n"
    "    end\n"
    "  elseif op == 3 then\n"
    "    local name = FUNCS[byte() % #FUNCS + 1]\n"
    "    local a, n = args(7)\n"
    "    local ok, r = pcall(vram[name], table.unpack(a, 1, n))\n"
    "    if ok and name == 'bytes' and WHOLE[a[1]] and n >= 1 then\n"
    "      local p, fp = exact_product(a, 2, n)\n"
    "      if p and fp * WHOLE[a[1]] < 2.0 ^ 62 then check(r == p * WHOLE[a[1]], 'vram.bytes', a[1], r, p) end\n"
    "    elseif name == 'mul' and n >= 1 then\n"
    "      local p, fp = exact_product(a, 1, n)\n"
    "      if ok and p and fp < 2.0 ^ 62 then check(r == p, 'vram.mul', r, p) end\n"
    "      if not ok and p and fp < 2.0 ^ 62 then check(false, 'vram.mul refused', tostring(r)) end\n"
    "      if ok and p and fp >= 2.0 ^ 64 then check(false, 'vram.mul wrapped', r) end\n"
    "    elseif name == 'add' and ok then\n"
    "      local s = 0.0\n"
    "      for i = 1, n do s = s + a[i] end\n"
    "      check(math.abs(s - r) <= 2.0 ^ 12 + math.abs(s) * 1e-12, 'vram.add', r, s)\n"
    "    end\n"
    "  elseif op == 4 then\n"
    "    local len = byte()\n"
    "    local s = data:sub(pos, pos + len - 1); pos = pos + len\n"
    "    local ok, v = pcall(vram.json.decode, s)\n"
    "    if ok then\n"
    "      local eok, e = pcall(vram.json.encode, v)\n"
    "      check(eok or tostring(e):find('object key contains a NUL byte', 1, true), 'json value does not encode', tostring(e))\n"
    "    end\n"
    "    pcall(vram.yaml.decode, s)\n"
    "  elseif op == 5 then\n"
    "    pcall(vram.json.encode, arg(), arg())\n"
    "  elseif op == 6 then\n"
    "    local i = byte() % 3 + 1\n"
    "    local t = tapes[i]\n"
    "    if t then pcall(function() local c <close> = t end); pcall(tostring, t); pcall(t.alloc, t, 1, 'weights') end\n"
    "    if byte() % 4 == 0 then tapes[i] = nil; collectgarbage() end\n"
    "  else\n"
    "    local t = tapes[byte() % 3 + 1]\n"
    "    if t then pcall(tostring, t); check_tape(t) end\n"
    "  end\n"
    "end\n";

static lua_State *L;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!L) {
    L = fz_sandbox_state(20000000, (int64_t)256 << 20);
    if (luaL_loadbufferx(L, DRIVER, sizeof DRIVER - 1, "=driver", "t") != LUA_OK)
      fz_fail("driver", lua_tostring(L, -1));
    lua_setfield(L, LUA_REGISTRYINDEX, "fuzz.driver");
  }
  fz_rearm(L);
  lua_settop(L, 0);
  lua_getfield(L, LUA_REGISTRYINDEX, "fuzz.driver");
  lua_pushlstring(L, (const char *)data, size);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    const char *e = lua_tostring(L, -1);
    if (e && strncmp(e, "INVARIANT", 9) == 0) fz_fail("driver", e);
  }
  lua_settop(L, 0);
  lua_gc(L, LUA_GCSTEP, 0);
  return 0;
}
