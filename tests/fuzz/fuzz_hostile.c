/* The vram API against hostile Lua objects (issue 10): the fuzz bytes drive
 * tapes, traces and programs inside the real sandbox, passing lists whose
 * __len and __index are the script's code -- returning 2^32-2, -1, floats,
 * strings or nil, raising, and, in the middle of the C method reading them,
 * closing the very tape (a to-be-closed variable), resetting it, calling
 * other methods on it (re-entry), or dropping the last reference and
 * collecting garbage. Traces and programs are kept in weak tables, their
 * strong references dropped and garbage collected in every order, and then
 * used through the weak table (finalized objects Lua has not yet cleared).
 *
 * Every call runs under pcall; errors are expected. Checked: no crash and
 * no sanitizer report (use after free, out-of-bounds read, leak, signed
 * overflow), no hang (libFuzzer's -timeout), and after each successful
 * call the tape's invariants (live >= 0, peak >= live, categories >= 0 and
 * summing to live). */
#define FZ_SANDBOX
#include "fuzz_common.h"

#include <stdint.h>

static const char DRIVER[] =
    "local data = ...\n"
    "local pos = 1\n"
    "local function byte() local b = data:byte(pos) or 0; pos = pos + 1; return b end\n"
    "local tapes, ids, traces, programs = {}, { 1, 2, 3 }, {}, {}\n"
    "local weak = setmetatable({}, { __mode = 'k' })\n"
    "local LEN = { 0, 1, 2, 7, 64, 65, 128, (1 << 32) - 2, (1 << 31), -1, -(1 << 31),\n"
    "  math.maxinteger, math.mininteger, 1.5, 0 / 0, '3', 'x' }\n"
    "local VAL = { 0, 1, -1, 2, 64, -65, 1 << 40, math.maxinteger, math.mininteger, 0.5, 'a', true }\n"
    "local CATS = { 'weights', 'activations', 'gradients', 'optimizer_state', 'temporaries' }\n"
    "local function pick(t) return t[byte() % #t + 1] end\n"
    "local function id() if byte() % 4 == 0 then return pick(VAL) end return ids[byte() % #ids + 1] end\n"
    "local function tape_at(i) return tapes[i % 3 + 1] end\n"
    "local function close(t) if t then local c <close> = t end end\n"
    "-- what a metamethod does to the tape in the middle of a C method\n"
    "local function meddle(t, how)\n"
    "  if how == 1 then close(t)\n"
    "  elseif how == 2 then pcall(t.reset, t)\n"
    "  elseif how == 3 then local ok, x = pcall(t.alloc, t, 4096, 'weights'); if ok then ids[#ids % 32 + 1] = x end\n"
    "  elseif how == 4 then pcall(t.drop, t, ids[1])\n"
    "  elseif how == 5 then pcall(t.ckpt_begin, t)\n"
    "  elseif how == 6 then pcall(t.phase, t, 'p' .. byte())\n"
    "  elseif how == 7 then for i = 1, 3 do if tapes[i] == t then tapes[i] = nil end end; collectgarbage()\n"
    "  elseif how == 8 then error('metamethod raised', 0)\n"
    "  end\n"
    "end\n"
    "-- a list argument: plain, or a proxy whose __len/__index are hostile\n"
    "local function list(t)\n"
    "  local n, mode = byte() % 9, byte()\n"
    "  local raw = {}\n"
    "  for i = 1, n do raw[i] = id() end\n"
    "  if mode % 4 == 0 then return raw end\n"
    "  local len = mode % 3 == 0 and pick(LEN) or n\n"
    "  local lenhow, idxhow, at = byte() % 10, byte() % 10, byte() % 8\n"
    "  local calls = 0\n"
    "  return setmetatable({}, {\n"
    "    __len = function() meddle(t, lenhow); return len end,\n"
    "    __index = function(_, k)\n"
    "      calls = calls + 1\n"
    "      if calls == at then meddle(t, idxhow) end\n"
    "      if calls > 4096 then error('too many reads', 0) end\n"
    "      local v = raw[k]; if v == nil and idxhow == 9 then return pick(VAL) end; return v\n"
    "    end })\n"
    "end\n"
    FZ_LUA_CHECKS
    "local function call(t, m, ...)\n"
    "  local ok, r = pcall(t[m], t, ...)\n"
    "  if ok and math.type(r) == 'integer' then ids[#ids % 32 + 1] = r end\n"
    "  check_tape(t)\n"
    "  return ok, r\n"
    "end\n"
    "local steps = 0\n"
    "while pos <= #data and steps < 300 do\n"
    "  steps = steps + 1\n"
    "  local op, i = byte() % 12, byte()\n"
    "  local t = tape_at(i)\n"
    "  if op == 0 or not t then\n"
    "    t = vram.tape(); tapes[i % 3 + 1] = t\n"
    "    if byte() % 2 == 0 then pcall(t.trace, t, byte() % 4 + 1, byte() % 4 + 1) end\n"
    "  elseif op == 1 then\n"
    "    call(t, byte() % 2 == 0 and 'alloc' or 'param', byte() * 977, pick(CATS), 'x')\n"
    "  elseif op == 2 then\n"
    "    call(t, 'node', list(t), list(t), list(t), byte() % 3 == 0 and pick(VAL) or nil, 'n')\n"
    "  elseif op == 3 then\n"
    "    call(t, 'ckpt_begin')\n"
    "    call(t, 'ckpt_end', list(t), list(t), byte() % 2 == 0 and 'c' or nil)\n"
    "  elseif op == 4 then\n"
    "    local it, np = byte() % 4, byte() % 4\n"
    "    local ok, idx = call(t, 'bulk', byte(), byte(), it, list(t), np, byte() % 2 == 0 and 'b' or nil)\n"
    "    if ok and byte() % 2 == 0 then call(t, 'bulk_end', idx) end\n"
    "  elseif op == 5 then\n"
    "    local m = pick({ 'drop', 'retain', 'replay_drop', 'grad', 'bytes', 'backward' })\n"
    "    call(t, m, id())\n"
    "  elseif op == 6 then\n"
    "    local m = pick({ 'zero_grad', 'live', 'stats', 'reset', 'mark', 'names', 'phase' })\n"
    "    call(t, m, 'ph')\n"
    "  elseif op == 7 then\n"
    "    local how = byte() % 3\n"
    "    if how == 0 then close(t) elseif how == 1 then tapes[i % 3 + 1] = nil; collectgarbage()\n"
    "    else pcall(tostring, t); close(t); pcall(t.alloc, t, 1, 'weights') end\n"
    "  elseif op == 8 then\n"
    "    local ok, tr = pcall(t.take_trace, t)\n"
    "    if ok and tr then traces[#traces % 16 + 1] = tr; weak[tr] = true end\n"
    "  elseif op == 9 then\n"
    "    -- fit: 7 traces, some held only weakly, in a list that may be a proxy\n"
    "    local seven = {}\n"
    "    for k = 1, 7 do seven[k] = traces[byte() % 16 + 1] or next(weak) end\n"
    "    local arg = seven\n"
    "    if byte() % 2 == 0 then arg = setmetatable({}, { __len = function() collectgarbage(); return 7 end,\n"
    "      __index = function(_, k) return seven[k] end }) end\n"
    "    local ok, p = pcall(vram.fit_program, arg, { 'a', 'b' }, byte() % 2 == 0 and 512 or nil)\n"
    "    if ok and p then programs[#programs % 4 + 1] = p; weak[p] = true end\n"
    "  elseif op == 10 then\n"
    "    -- drop strong references, collect, then use whatever the weak table still holds\n"
    "    if byte() % 2 == 0 then traces = {} end\n"
    "    if byte() % 2 == 0 then programs = {} end\n"
    "    collectgarbage(byte() % 2 == 0 and 'collect' or 'step')\n"
    "    for o in pairs(weak) do\n"
    "      pcall(function() return #o end)\n"
    "      pcall(function() return o:peak(byte() % 8 + 1, byte() % 8 + 1) end)\n"
    "      pcall(function() return o:eval(pick(VAL), pick(VAL)) end)\n"
    "    end\n"
    "  else\n"
    "    for _, p in ipairs(programs) do pcall(p.peak, p, pick(VAL), pick(VAL)) end\n"
    "  end\n"
    "end\n";

/* the objects this input made are finalized after it, in the collector's order */
FZ_DRIVER_TARGET(DRIVER, LUA_GCCOLLECT)
