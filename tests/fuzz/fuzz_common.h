/* Shared by the libFuzzer targets: one Lua state per process, reused for
 * every input (creating a state per input would dominate the time).
 *
 * fz_plain_state(): the `vram` module in a bare state (json, yaml).
 * fz_sandbox_state(): the state `vramlua estimate` runs in -- the sandbox,
 * its `require`, the read rule, the memory and instruction budgets -- with
 * the built-in commands' directory as the script directory. Before each
 * input fz_rearm() resets the instruction budget (and the hook, which the
 * sandbox leaves firing at every instruction once the budget is spent). */
#ifndef VRAM_FUZZ_COMMON_H
#define VRAM_FUZZ_COMMON_H

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/bind/bind.h"

#ifdef FZ_SANDBOX
#include "../../runtime/host/sandbox.h"
#include "../../runtime/host/search.h"

static vh_search fz_search;
static vh_limits fz_lim;
static char *fz_noargs[] = {NULL};

static inline int fz_open(lua_State *L) {
  vh_sandbox_open(L, (vh_limits *)lua_touserdata(L, 1));
  return 0;
}

static inline lua_State *fz_sandbox_state(int64_t max_instructions, int64_t max_memory) {
  vh_search_init(&fz_search, "fuzz");
  memset(&fz_lim, 0, sizeof fz_lim);
  fz_lim.search = &fz_search;
  fz_lim.max_instructions = max_instructions;
  fz_lim.max_memory = max_memory;
  fz_lim.argc = 0;
  fz_lim.argv = fz_noargs; /* nothing named on a command line */
  snprintf(fz_lim.script_dir, sizeof fz_lim.script_dir, "%s/scripts/cli", fz_search.share);
  lua_State *L = vh_newstate(&fz_lim);
  if (!L) abort();
  lua_pushcfunction(L, fz_open);
  lua_pushlightuserdata(L, &fz_lim);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    fprintf(stderr, "fuzz: sandbox: %s\n", lua_tostring(L, -1));
    abort();
  }
  return L;
}

static inline void fz_rearm(lua_State *L) {
  fz_lim.instructions = 0;
  if (lua_gethook(L)) lua_sethook(L, lua_gethook(L), LUA_MASKCOUNT, 10000);
}

/* require(name) through the sandbox's own require; aborts on failure. */
static inline void fz_require(lua_State *L, const char *name) {
  lua_getglobal(L, "require");
  lua_pushstring(L, name);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    fprintf(stderr, "fuzz: require %s: %s\n", name, lua_tostring(L, -1));
    abort();
  }
}
#endif

static inline lua_State *fz_plain_state(void) {
  lua_State *L = luaL_newstate();
  if (!L) abort();
  luaL_openlibs(L);
  luaL_requiref(L, "vram", luaopen_vram, 1);
  lua_pop(L, 1);
  return L;
}

/* Pushes vram.<sub>.<fn> (sub may be NULL). */
static inline void fz_getfn(lua_State *L, const char *sub, const char *fn) {
  lua_getglobal(L, "vram");
  if (sub) {
    lua_getfield(L, -1, sub);
    lua_remove(L, -2);
  }
  lua_getfield(L, -1, fn);
  lua_remove(L, -2);
  if (!lua_isfunction(L, -1)) abort();
}

/* A failed check: print and abort, so libFuzzer keeps the input. */
static inline void fz_fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz: check failed: %s: %s\n", what, detail ? detail : "");
  abort();
}

#ifdef FZ_SANDBOX
/* One input through a Lua driver that takes the bytes as its argument and
 * raises "INVARIANT: ..." when a checked property fails; other errors are the
 * API refusing bad calls, as it should. The state and the compiled driver
 * are made on the first input and kept. gc: what runs after each input
 * (LUA_GCSTEP, or LUA_GCCOLLECT to finalize what the input made). */
static inline void fz_run_driver(lua_State **Lp, const char *driver, size_t n,
                                 const uint8_t *data, size_t size, int gc) {
  if (!*Lp) {
    *Lp = fz_sandbox_state(20000000, (int64_t)256 << 20);
    if (luaL_loadbufferx(*Lp, driver, n, "=driver", "t") != LUA_OK)
      fz_fail("driver", lua_tostring(*Lp, -1));
    lua_setfield(*Lp, LUA_REGISTRYINDEX, "fuzz.driver");
  }
  lua_State *L = *Lp;
  fz_rearm(L);
  lua_settop(L, 0);
  lua_getfield(L, LUA_REGISTRYINDEX, "fuzz.driver");
  lua_pushlstring(L, (const char *)data, size);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    const char *e = lua_tostring(L, -1);
    if (e && strncmp(e, "INVARIANT", 9) == 0) fz_fail("driver", e);
  }
  lua_settop(L, 0);
  lua_gc(L, gc, 0);
}

/* Lua text for drivers: check() raises "INVARIANT: ..." (fz_run_driver
 * fails the run on it), check_tape(t) checks what a tape must always say
 * of itself: no negative live bytes or category, live within the peak,
 * the categories summing to live. */
#define FZ_LUA_CHECKS                                                                           \
  "local function check(cond, what, ...) if not cond then error('INVARIANT: ' .. what .. ' ' "   \
  ".. table.concat({ ... }, ' '), 0) end end\n"                                                 \
  "local function check_tape(t)\n"                                                              \
  "  if not t then return end\n"                                                                \
  "  local ok, s = pcall(t.stats, t)\n"                                                         \
  "  if not ok then return end\n"                                                               \
  "  check(s.live >= 0, 'live < 0', s.live)\n"                                                  \
  "  check(s.peak >= s.live, 'peak < live', s.peak, s.live)\n"                                  \
  "  local sum = 0\n"                                                                           \
  "  for k, v in pairs(s.live_by_category) do check(v >= 0, 'category < 0', k, v); sum = sum + v end\n" \
  "  for k, v in pairs(s.at_peak) do check(v >= 0, 'category at peak < 0', k, v) end\n"         \
  "  check(sum == s.live, 'live ~= sum of categories', s.live, sum)\n"                          \
  "end\n"

/* The entry point of a target that is one Lua driver (a string literal). */
#define FZ_DRIVER_TARGET(driver, gc)                                      \
  static lua_State *fz_driver_state;                                      \
  int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);           \
  int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {          \
    fz_run_driver(&fz_driver_state, driver, sizeof driver - 1, data, size, gc); \
    return 0;                                                             \
  }
#endif

#endif
