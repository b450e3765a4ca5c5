#define _XOPEN_SOURCE 700 /* realpath */
#include "sandbox.h"

#include <cjson/cJSON.h>
#include <lauxlib.h>
#include <stddef.h>
#include <stdint.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../bind/bind.h"
#include "../bind/lfiles.h"

#define LIMITS_KEY "vramlua.limits"
#define HOOK_STRIDE 10000
#define GC_PAUSE 400 /* percent: see vh_newstate */
#define GC_FIRST_KIB (16 * 1024) /* see vh_newstate */

/* The state's allocator, which lua_getallocf hands to C code too (the tape
 * allocates through it), so one budget and one count cover Lua and C. */
/* Small blocks (tables, strings, closures: most of what a step allocates)
 * come from free lists by size class, carved from 16 KiB chunks that the
 * process keeps to its end (the state is never closed, main.c): a block
 * costs a few instructions instead of malloc's and free's. (64 KiB chunks
 * took a small script's heap past main.c's first HEAP_SMALL_KIB into the
 * huge pages: a 2 MiB page zeroed, +0.15-0.2 ms CPU for an empty script.) Lua passes every
 * block's size when it frees or resizes it, so the class is known without
 * a header. Sanitizer builds (VRAMLUA_CLOSE_STATE) use malloc alone, so
 * that ASan sees every block. */
#ifndef VRAMLUA_CLOSE_STATE
#define POOL_STEP 16
#define POOL_MAX 256
#define POOL_CHUNK ((size_t)16 * 1024)
typedef struct pool_block {
  struct pool_block *next;
} pool_block;
static pool_block *pool_free_list[POOL_MAX / POOL_STEP + 1];
static char *pool_at, *pool_end;
static void *pool_chunks; /* the chunks, each pointing to the one before */

static size_t pool_class(size_t n) { return (n + POOL_STEP - 1) / POOL_STEP; }

static void *pool_get(size_t n) {
  size_t c = pool_class(n);
  pool_block *b = pool_free_list[c];
  if (b) {
    pool_free_list[c] = b->next;
    return b;
  }
  size_t size = c * POOL_STEP;
  if ((size_t)(pool_end - pool_at) < size) {
    char *chunk = (char *)malloc(POOL_CHUNK);
    if (!chunk) return NULL;
    *(void **)chunk = pool_chunks;
    pool_chunks = chunk;
    pool_at = chunk + POOL_STEP; /* the link, padded to the blocks' alignment */
    pool_end = chunk + POOL_CHUNK;
  }
  void *p = pool_at;
  pool_at += size;
  return p;
}

static void pool_put(void *p, size_t n) {
  pool_block *b = (pool_block *)p;
  size_t c = pool_class(n);
  b->next = pool_free_list[c];
  pool_free_list[c] = b;
}

/* realloc with the pool for blocks of at most POOL_MAX bytes (old: the
 * block's size, 0 for none). A shrink never fails (Lua relies on it). */
static void *pooled_realloc(void *ptr, size_t old, size_t nsize) {
  bool was = ptr && old <= POOL_MAX, small = nsize <= POOL_MAX;
  if (!was && !small) return realloc(ptr, nsize);
  if (was && small && pool_class(old) == pool_class(nsize)) return ptr;
  void *p = small ? pool_get(nsize) : malloc(nsize);
  if (!p) return nsize <= old ? ptr : NULL; /* a shrink keeps its block */
  if (ptr) {
    memcpy(p, ptr, old < nsize ? old : nsize);
    if (was) pool_put(ptr, old);
    else free(ptr);
  }
  return p;
}

static void pooled_free(void *ptr, size_t old) {
  if (ptr && old <= POOL_MAX) pool_put(ptr, old);
  else free(ptr);
}
#else
/* The pool relies on every caller passing a block's exact size: ASan's
 * malloc_usable_size is the size asked for, so sanitizer builds check it
 * at every free and resize (the whole suite runs under them). */
#include <malloc.h>
static void check_size(void *ptr, size_t old) {
  if (ptr && malloc_usable_size(ptr) != old) {
    fprintf(stderr, "vramlua: a block of %zu bytes freed or resized as %zu bytes\n",
            malloc_usable_size(ptr), old);
    abort();
  }
}
static void *pooled_realloc(void *ptr, size_t old, size_t nsize) {
  check_size(ptr, old);
  return realloc(ptr, nsize);
}
static void pooled_free(void *ptr, size_t old) {
  check_size(ptr, old);
  free(ptr);
}
#endif

static void *limited_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  vh_limits *lim = (vh_limits *)ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    pooled_free(ptr, old);
    lim->used_memory -= (int64_t)old;
    return NULL;
  }
  if (lim->max_memory > 0 && nsize > old &&
      (nsize - old > (size_t)lim->max_memory ||
       lim->used_memory + (int64_t)(nsize - old) > lim->max_memory)) {
    lim->memory_refused = true;
    return NULL; /* Lua raises "not enough memory"; the host names the budget */
  }
  void *p = pooled_realloc(ptr, old, nsize);
  if (p) {
    lim->used_memory += (int64_t)nsize - (int64_t)old;
    if (lim->used_memory > lim->peak_memory) lim->peak_memory = lim->used_memory;
  }
  return p;
}

/* vram.json.encode builds a cJSON tree and prints it, with malloc unless
 * told otherwise; cJSON's hooks take no user data, so the process's state
 * lends them its budget (vramlua runs one state). Each block carries its
 * size, which limited_alloc needs to free it. */
static vh_limits *cjson_budget;

typedef union {
  size_t n;
  max_align_t align;
} cj_head;

static void *cj_malloc(size_t n) {
  if (n > SIZE_MAX - sizeof(cj_head)) return NULL;
  cj_head *h = (cj_head *)limited_alloc(cjson_budget, NULL, 0, n + sizeof *h);
  if (!h) return NULL;
  h->n = n + sizeof *h;
  return h + 1;
}

static void cj_free(void *p) {
  if (!p) return;
  cj_head *h = (cj_head *)p - 1;
  limited_alloc(cjson_budget, h, h->n, 0);
}

lua_State *vh_newstate(vh_limits *lim) {
  cjson_budget = lim;
  cJSON_Hooks hooks = {cj_malloc, cj_free};
  cJSON_InitHooks(&hooks);
  lua_State *L = lua_newstate(limited_alloc, lim);
  if (!L) return NULL;
  /* A process runs one short state: a cycle when the heap reaches 4x what
   * the last one kept (Lua's default: 2x) costs ~0.3 ms less of a 5 ms
   * estimate and ~1-3 MB more at the peak (README, "Speed"). The memory
   * budget still holds: Lua collects in full before it reports an
   * allocation refused. */
  lua_gc(L, LUA_GCINC, GC_PAUSE, 0, 0);
  /* The first cycle waits until Lua has allocated GC_FIRST_KIB: an
   * estimate allocates 0.7-3 MiB in all and never collects (the cycles
   * that ran while its heap grew from nothing cost ~0.3M instructions of
   * 7.7M, and 3 % of a layout search); a search collects as before from its
   * first cycle on. Nothing public sets a threshold: a step of a negative
   * size takes that many KiB off the collector's debt (Lua 5.4's lua_gc
   * adds the size to the debt), which is what may be allocated before its
   * next step. The heap's count (collectgarbage("count")) is the heap's; a
   * script's collectgarbage("collect" or "step") acts at once; a budget
   * under the threshold collects in full when it is reached, as above
   * (tests/cli/run.sh). */
  lua_gc(L, LUA_GCSTEP, -GC_FIRST_KIB);
  return L;
}

static vh_limits *limits(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, LIMITS_KEY);
  vh_limits *lim = (vh_limits *)lua_touserdata(L, -1);
  lua_pop(L, 1);
  return lim;
}

#define STOPPED_KEY "vramlua.stopped" /* registry: weak set of threads stopped by the hook */

/* An error raised inside a hook leaves that thread with hooks off (Lua
 * restores them only in pcall), so code that later runs on a coroutine the
 * hook stopped -- its __close handlers, run by coroutine.close or by a
 * coroutine.wrap function -- would escape the budget. The hook records such
 * coroutines here and the sandbox's close and wrap skip their handlers. */
static void mark_stopped(lua_State *L) {
  if (lua_pushthread(L)) { /* the main thread: its pcalls restore hooks */
    lua_pop(L, 1);
    return;
  }
  if (lua_getfield(L, LUA_REGISTRYINDEX, STOPPED_KEY) == LUA_TTABLE) {
    lua_pushvalue(L, -2);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
  }
  lua_pop(L, 2);
}

static int budget_error(lua_State *L, vh_limits *lim) {
  /* Sticky: from now on every instruction of this thread raises again, so a
   * pcall that swallows the error cannot loop on; the main thread too, so
   * the script cannot end normally (other coroutines follow at their next
   * stride, if they ever run again). */
  lua_sethook(L, lua_gethook(L), LUA_MASKCOUNT, 1);
  if (lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD) == LUA_TTHREAD) {
    lua_State *main_thread = lua_tothread(L, -1); /* it cannot finish normally now */
    lua_sethook(main_thread, lua_gethook(L), LUA_MASKCOUNT, 1);
  }
  lua_pop(L, 1);
  mark_stopped(L);
  return luaL_error(L, "script exceeded %I instructions (raise with --max-instructions)",
                    (lua_Integer)lim->max_instructions);
}

/* Adds n to the instruction count; raises once the budget is spent. */
static void charge(lua_State *L, vh_limits *lim, int64_t n) {
  lim->instructions = n > INT64_MAX - lim->instructions ? INT64_MAX : lim->instructions + n;
  if (lim->max_instructions > 0 && lim->instructions > lim->max_instructions)
    budget_error(L, lim);
}

/* The sandbox's depth limit, checked wherever a hook runs. */
static void check_depth(lua_State *L, const vh_limits *lim) {
  lua_Debug deep;
  if (!lim->trusted && lua_getstack(L, VH_MAX_DEPTH, &deep)) {
    mark_stopped(L);
    luaL_error(L, "stack overflow: calls nested more than %d deep (runaway recursion?)",
               VH_MAX_DEPTH);
  }
}

static void count_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  vh_limits *lim = limits(L);
  fflush(stdout); /* as tick_hook does */
  check_depth(L, lim);
  charge(L, lim, HOOK_STRIDE);
}

/* Without an instruction budget no hook runs between ticks: in Lua 5.4 any
 * count hook makes the VM stop at every instruction (about 16 % of an
 * estimate). The CPU-time timer's signal (vh_sandbox_tick, every
 * VH_TICK_MS of CPU time) arms this hook for one instruction of the
 * running state's main thread; it checks the depth limit and takes itself
 * off. lua_sethook may be called from a signal handler (lua.c does so for
 * SIGINT). */
static lua_State *volatile ticked_state;

static void tick_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  fflush(stdout); /* l_print: a budget's kill loses at most one tick's lines */
  check_depth(L, limits(L));
}

void vh_sandbox_tick(void) {
  lua_State *L = ticked_state;
  if (L) lua_sethook(L, tick_hook, LUA_MASKCOUNT, 1);
}

void vh_sandbox_release(lua_State *L) {
  if (ticked_state == L) ticked_state = NULL;
}

/* require(name): "vram" is built in; everything else is a .lua file found
 * by vh_find_module, loaded as text only. */
static int l_require(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  vh_limits *lim = limits(L);
  char path[VH_PATH_MAX];
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  if (lua_getfield(L, -1, name) != LUA_TNIL) return 1;
  lua_pop(L, 1);
  if (!vh_find_module(lim->search, lim->script_dir, name, path, sizeof path, !lim->trusted))
    return luaL_error(L, "module '%s' not found (looked beside the script, in VRAMLUA_PATH "
                         "and in %s)", name, lim->search->share);
  vb_check_read(L, path); /* a symbolic link must not lead out of the sandbox */
  vb_load_lua_file(L, path);
  lua_pushstring(L, name);
  lua_pushstring(L, path);
  lua_call(L, 2, 1);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
  }
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, name);
  return 1;
}

/* load() for sandboxed scripts: text chunks only, never bytecode. */
static int l_load_text(lua_State *L) {
  size_t len = 0;
  const char *s = luaL_checklstring(L, 1, &len);
  const char *chunkname = luaL_optstring(L, 2, s);
  int status = luaL_loadbufferx(L, s, len, chunkname, "t");
  if (status != LUA_OK) {
    luaL_pushfail(L);
    lua_insert(L, -2);
    return 2;
  }
  if (!lua_isnoneornil(L, 4)) {
    lua_pushvalue(L, 4);
    if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
  }
  return 1;
}

/* setmetatable without __gc: Lua runs finalizers with hooks off, so a
 * finalizer could loop outside the instruction budget (also at lua_close).
 * Otherwise the same as the base library's. */
static int l_setmetatable(lua_State *L) {
  int t = lua_type(L, 2);
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
  if (t == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    if (lua_rawget(L, 2) != LUA_TNIL)
      return luaL_error(L, "setmetatable: __gc metamethods are not allowed in the sandbox "
                           "(finalizers run outside the instruction budget)");
    lua_pop(L, 1);
  }
  if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL)
    return luaL_error(L, "cannot change a protected metatable");
  lua_settop(L, 2);
  lua_setmetatable(L, 1);
  return 1;
}

/* table.move(a1, f, e, t [, a2]): on plain tables it loops in C without
 * reaching the instruction hook, so its element count is charged first. */
static int l_table_move(lua_State *L) {
  lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);
  luaL_checkinteger(L, 4);
  if (e >= f) {
    lua_Unsigned n = (lua_Unsigned)e - (lua_Unsigned)f + 1u;
    charge(L, limits(L), n > (lua_Unsigned)INT64_MAX ? INT64_MAX : (int64_t)n);
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

static bool budget_spent(const vh_limits *lim) {
  return lim->max_instructions > 0 && lim->instructions > lim->max_instructions;
}

/* Continuation: the results of the call are the whole stack. */
static int all_results(lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  (void)ctx;
  return lua_gettop(L);
}

/* The message handler of a sandboxed xpcall. For an error the hook raised
 * (budget spent, calls nested too deep) Lua runs the handler with hooks off,
 * so the script's handler is skipped and the error passes unchanged. */
static int guarded_handler(lua_State *L) {
  lua_Debug deep;
  if (budget_spent(limits(L)) || lua_getstack(L, VH_MAX_DEPTH, &deep)) return 1;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* xpcall(f, msgh, ...): the base library's, with msgh guarded. */
static int l_xpcall(lua_State *L) {
  int n = lua_gettop(L);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, guarded_handler, 1);
  lua_replace(L, 2);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_callk(L, n, LUA_MULTRET, 0, all_results);
  return all_results(L, LUA_OK, 0);
}

static bool is_stopped(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (lua_getfield(L, LUA_REGISTRYINDEX, STOPPED_KEY) != LUA_TTABLE) {
    lua_pop(L, 1);
    return false;
  }
  lua_pushvalue(L, idx);
  bool s = lua_rawget(L, -2) != LUA_TNIL;
  lua_pop(L, 2);
  return s;
}

static int close_thread(lua_State *co, lua_State *L) {
#if LUA_VERSION_RELEASE_NUM >= 50406
  return lua_closethread(co, L);
#else
  (void)L;
  return lua_resetthread(co);
#endif
}

/* coroutine.close(co): a coroutine the hook stopped is not closed (its
 * __close handlers would run without the hook). */
static int l_co_close(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  luaL_argexpected(L, co, 1, "coroutine");
  int st = lua_status(co);
  if (st != LUA_OK && st != LUA_YIELD && is_stopped(L, 1)) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "coroutine stopped by the sandbox (its to-be-closed variables stay open)");
    return 2;
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* The function coroutine.wrap returns: lcorolib's auxwrap, except that a
 * coroutine the hook stopped is not closed. */
static int wrapped_resume(lua_State *L) {
  lua_State *co = lua_tothread(L, lua_upvalueindex(1));
  int narg = lua_gettop(L), nres = 0;
  if (!lua_checkstack(co, narg)) return luaL_error(L, "too many arguments to resume");
  lua_xmove(L, co, narg);
  int st = lua_resume(co, L, narg, &nres);
  if (st == LUA_OK || st == LUA_YIELD) {
    if (!lua_checkstack(L, nres + 1)) {
      lua_pop(co, nres);
      return luaL_error(L, "too many results to resume");
    }
    lua_xmove(co, L, nres);
    return nres;
  }
  lua_xmove(co, L, 1); /* the error */
  st = lua_status(co);
  if (st != LUA_OK && st != LUA_YIELD && !is_stopped(L, lua_upvalueindex(1))) {
    st = close_thread(co, L); /* close its to-be-closed variables */
    lua_xmove(co, L, 1);
  }
  if (st != LUA_ERRMEM && lua_type(L, -1) == LUA_TSTRING) {
    luaL_where(L, 1);
    lua_insert(L, -2);
    lua_concat(L, 2);
  }
  return lua_error(L);
}

static int l_co_wrap(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_State *co = lua_newthread(L);
  lua_pushvalue(L, 1);
  lua_xmove(L, co, 1);
  lua_pushcclosure(L, wrapped_resume, 1);
  return 1;
}

/* ---- the allow-list --------------------------------------------------
 * Everything a sandboxed script can reach is listed here; nothing else of
 * the standard libraries exists in its state. Each library is opened into a
 * scratch table that nothing keeps, and only the listed names are copied
 * into the tables the script sees; package.loaded (what `require` returns
 * for a built-in name) holds these same tables. tests/sandbox/reach.c walks
 * everything reachable and compares it with tests/sandbox/reachable.txt. */
static const char *const BASE_NAMES[] = {
    "assert",   "collectgarbage", "error",  "getmetatable", "ipairs", "next",
    "pairs",    "pcall",          "rawequal",     "rawget", "rawlen",
    "rawset",   "select",         "tonumber", "tostring",   "type",   "_VERSION",
    NULL}; /* print, load, setmetatable, xpcall and require: the sandbox's own */
static const char *const STRING_NAMES[] = {
    "byte", "char",     "find", "format", "gmatch",  "gsub", "len",   "lower",
    "match", "pack",    "packsize", "rep", "reverse", "sub",  "unpack", "upper",
    NULL}; /* no dump: load refuses binary chunks anyway */
static const char *const TABLE_NAMES[] = {"concat", "insert", "pack", "remove",
                                          "sort",   "unpack", NULL}; /* + move, charged */
static const char *const MATH_NAMES[] = {
    "abs", "acos", "asin",  "atan",       "ceil",     "cos",  "deg",  "exp",
    "floor", "fmod", "huge", "log",       "max",      "maxinteger", "min", "mininteger",
    "modf", "pi",   "rad",  "random",     "randomseed", "sin", "sqrt", "tan",
    "tointeger", "type", "ult", NULL};
static const char *const UTF8_NAMES[] = {"char", "charpattern", "codepoint", "codes",
                                         "len",  "offset",      NULL};
static const char *const COROUTINE_NAMES[] = {"create", "isyieldable", "resume", "running",
                                              "status", "yield",       NULL}; /* + close, wrap */
static const char *const OS_NAMES[] = {"clock", "date", "time", NULL};

/* Opens a library into a table nothing registers and pushes a new table
 * holding only `names` of it. */
static void push_subset(lua_State *L, lua_CFunction open, const char *const *names) {
  lua_pushcfunction(L, open);
  lua_call(L, 0, 1);
  lua_newtable(L);
  for (int i = 0; names[i]; i++) {
    lua_getfield(L, -2, names[i]);
    lua_setfield(L, -2, names[i]);
  }
  lua_remove(L, -2);
}

/* __index of the globals: reading a global nobody set is an error naming
 * it, as in redis, so a typo does not run on with nil. rawget(_G, k) still
 * tests for one. */
static int undefined_global(lua_State *L) {
  if (lua_type(L, 2) != LUA_TSTRING) return 0; /* not a variable name: nil */
  return luaL_error(L, "undefined global '%s'", lua_tostring(L, 2));
}

/* Sets t[name] to f, a C closure over the library's own function of that
 * name (from a fresh copy of the library), which f calls after its check. */
static void guard(lua_State *L, int t, lua_CFunction open, const char *name, lua_CFunction f) {
  t = lua_absindex(L, t);
  lua_pushcfunction(L, open);
  lua_call(L, 0, 1);
  lua_getfield(L, -1, name);
  lua_pushcclosure(L, f, 1);
  lua_setfield(L, t, name);
  lua_pop(L, 1);
}

/* Adds lib (on top) as globals[name] and loaded[name]; pops it. */
static void publish(lua_State *L, int globals, int loaded, const char *name) {
  lua_pushvalue(L, -1);
  lua_setfield(L, loaded, name);
  lua_setfield(L, globals, name);
}

/* print as the base library's, less its fflush after every line: a 64 x 64
 * sweep prints 4,096 lines, each then a write(2) of its own (~3 ms of a
 * ~45 ms sweep). stdout keeps stdio's buffering (line by line on a
 * terminal), and the host flushes it before it writes to stderr (main.c),
 * so the two streams still come out in the order they were written; the
 * hooks flush it too (tick_hook, count_hook), so a script the CPU-time
 * budget stops (main.c's timer exits at once) loses at most the lines of
 * its last tick. */
static int l_print(lua_State *L) {
  int n = lua_gettop(L);
  for (int i = 1; i <= n; i++) {
    size_t len = 0;
    const char *s = luaL_tolstring(L, i, &len);
    if (i > 1) fputc('\t', stdout);
    fwrite(s, 1, len, stdout);
    lua_pop(L, 1);
  }
  fputc('\n', stdout);
  return 0;
}

static void open_sandboxed(lua_State *L) {
  lua_newtable(L); /* the script's globals */
  int globals = lua_gettop(L);
  lua_newtable(L); /* package.loaded, as `require` sees it */
  int loaded = lua_gettop(L);

  /* base: luaopen_base fills the state's first globals table, which is
   * replaced below and then unreachable */
  push_subset(L, luaopen_base, BASE_NAMES);
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, globals);
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_print);
  lua_setfield(L, globals, "print");
  lua_pushcfunction(L, l_load_text);
  lua_setfield(L, globals, "load");
  lua_pushcfunction(L, l_setmetatable);
  lua_setfield(L, globals, "setmetatable");
  guard(L, globals, luaopen_base, "xpcall", l_xpcall);
  lua_pushvalue(L, globals);
  publish(L, globals, loaded, LUA_GNAME);

  /* string: its metatable (made by luaopen_string for every string) is
   * pointed at the subset and locked: getmetatable("") gives "locked" and
   * it cannot be changed, so a script cannot redirect the methods of every
   * string */
  push_subset(L, luaopen_string, STRING_NAMES);
  lua_pushliteral(L, "");
  if (lua_getmetatable(L, -1)) {
    lua_pushvalue(L, -3);
    lua_setfield(L, -2, "__index");
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  publish(L, globals, loaded, LUA_STRLIBNAME);

  push_subset(L, luaopen_table, TABLE_NAMES);
  guard(L, -1, luaopen_table, "move", l_table_move);
  publish(L, globals, loaded, LUA_TABLIBNAME);

  push_subset(L, luaopen_math, MATH_NAMES);
  publish(L, globals, loaded, LUA_MATHLIBNAME);
  push_subset(L, luaopen_utf8, UTF8_NAMES);
  publish(L, globals, loaded, LUA_UTF8LIBNAME);

  /* coroutine.close and coroutine.wrap, aware of stopped coroutines */
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, STOPPED_KEY);
  push_subset(L, luaopen_coroutine, COROUTINE_NAMES);
  guard(L, -1, luaopen_coroutine, "close", l_co_close);
  lua_pushcfunction(L, l_co_wrap);
  lua_setfield(L, -2, "wrap");
  publish(L, globals, loaded, LUA_COLIBNAME);

  push_subset(L, luaopen_os, OS_NAMES); /* only the clock and calendar */
  publish(L, globals, loaded, LUA_OSLIBNAME);

  lua_createtable(L, 0, 2);
  lua_pushcfunction(L, undefined_global);
  lua_setfield(L, -2, "__index");
  lua_pushliteral(L, "locked");
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, globals);

  lua_pushvalue(L, loaded);
  lua_setfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_pushvalue(L, globals);
  lua_rawseti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  lua_pop(L, 2);
}

/* A file named on the command line may be read. For the built-in commands
 * (scripts/cli/ of the share directory: our own code reading the user's
 * data) its directory tree may be read too, so that a spec's config beside
 * it resolves as stdlib/spec.lua documents; a script run with `vramlua run`
 * gets the named files alone. Only a built-in command may write, and only a
 * path typed on its command line (lwrite.c). */
static void allow_arg(lua_State *L, const char *arg, bool builtin) {
  if (builtin && arg[0]) vb_files_allow_write(L, arg); /* a report it asked for */
  if (!arg[0] || !vb_files_allow_file(L, arg) || !builtin || !vh_is_file(arg)) return;
  char dir[VH_PATH_MAX];
  vh_dirname(arg, dir, sizeof dir);
  vb_files_allow_tree(L, dir);
}

static bool same_dir(const char *a, const char *b) {
  char ra[VH_PATH_MAX], rb[VH_PATH_MAX];
  return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

/* The Hugging Face hub cache, in huggingface_hub's order: $HF_HUB_CACHE,
 * $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub.
 * Empty when none can be formed. */
static void hf_hub_cache(char *out, size_t n) {
  const char *v;
  int w = -1;
  out[0] = '\0';
  if ((v = getenv("HF_HUB_CACHE")) && v[0]) w = snprintf(out, n, "%s", v);
  else if ((v = getenv("HF_HOME")) && v[0]) w = snprintf(out, n, "%s/hub", v);
  else if ((v = getenv("XDG_CACHE_HOME")) && v[0]) w = snprintf(out, n, "%s/huggingface/hub", v);
  else if ((v = getenv("HOME")) && v[0]) w = snprintf(out, n, "%s/.cache/huggingface/hub", v);
  if (w < 0 || (size_t)w >= n) out[0] = '\0';
}

/* The read rule of the sandbox (lfiles.h). */
static bool restrict_reads(lua_State *L, const vh_limits *lim) {
  vb_files_restrict(L);
  if (lim->script_dir[0]) vb_files_allow_tree(L, lim->script_dir);
  for (int i = 0; i < lim->search->nroots; i++) vb_files_allow_tree(L, lim->search->roots[i]);
  vb_files_allow_tree(L, lim->search->share);
  char cli[VH_PATH_MAX];
  int n = snprintf(cli, sizeof cli, "%s/scripts/cli", lim->search->share);
  bool builtin = lim->script_dir[0] && n > 0 && (size_t)n < sizeof cli &&
                 same_dir(lim->script_dir, cli);
  /* the built-in commands also read what a training config names relative
   * to the directory it is run from (a DeepSpeed JSON) and model configs in
   * the Hugging Face cache (stdlib/resolve.lua) */
  if (builtin) {
    char dir[VH_PATH_MAX];
    if (getcwd(dir, sizeof dir)) vb_files_allow_tree(L, dir);
    hf_hub_cache(dir, sizeof dir);
    if (dir[0]) vb_files_allow_tree(L, dir);
  }
  for (int i = 1; lim->argv && i < lim->argc; i++)
    if (lim->argv[i]) allow_arg(L, lim->argv[i], builtin);
  return builtin;
}

void vh_sandbox_open(lua_State *L, vh_limits *lim) {
  lua_pushlightuserdata(L, lim);
  lua_setfield(L, LUA_REGISTRYINDEX, LIMITS_KEY);
  bool builtin = false;
  if (lim->trusted) {
    luaL_openlibs(L);
  } else {
    open_sandboxed(L);
    builtin = restrict_reads(L, lim);
  }
  luaL_requiref(L, "vram", luaopen_vram, 1);
  if (builtin) { /* what a spec on the command line names (lfiles.c) */
    lua_pushcfunction(L, vb_allow_named);
    lua_setfield(L, -2, "allow_named");
  }
  lua_pushstring(L, lim->search->share);
  lua_setfield(L, -2, "share_dir");
  lua_createtable(L, lim->search->nroots, 0); /* VRAMLUA_PATH, then the share dir */
  for (int i = 0; i < lim->search->nroots; i++) {
    lua_pushstring(L, lim->search->roots[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "search_roots");
  char hub[VH_PATH_MAX];
  hf_hub_cache(hub, sizeof hub);
  if (hub[0]) {
    lua_pushstring(L, hub);
    lua_setfield(L, -2, "hf_hub_cache");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_require);
  lua_setglobal(L, "require");
  /* instructions are counted only for a budget or --stats; the hook then
   * also carries the depth limit, which otherwise the CPU-time timer's
   * ticks check (tick_hook) */
  if (lim->max_instructions > 0 || lim->count_instructions)
    lua_sethook(L, count_hook, LUA_MASKCOUNT, HOOK_STRIDE);
  else if (!lim->trusted)
    ticked_state = L;
}
