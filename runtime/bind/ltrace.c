/* Compiled estimates for Lua: traces taken from tapes, fitted into a
 * program, evaluated for any sizes (batch, seq, and what stdlib/compiled.lua
 * makes symbolic). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../core/tape.h"
#include "../core/trace.h"
#include "bind.h"

#define TRACE "vram.trace"
#define PROGRAM "vram.program"

typedef struct {
  vr_trace *tr;
} box;

static int box_gc(lua_State *L) {
  box *b = (box *)lua_touserdata(L, 1);
  vr_trace_free(b->tr);
  b->tr = NULL;
  return 0;
}

/* The trace or program at idx. A finalized box can still be reached (Lua
 * clears a weak table's keys only in the cycle after their finalizer ran),
 * so its emptiness is an error, never a NULL to follow. */
static vr_trace *checkbox(lua_State *L, int idx, const char *meta, int arg) {
  box *b = (box *)luaL_checkudata(L, idx, meta);
  if (!b->tr)
    luaL_argerror(L, arg, lua_pushfstring(L, "%s was finalized by the garbage collector "
                                             "(reached through a weak table?)", meta));
  return b->tr;
}

static box *newbox(lua_State *L, const char *meta, vr_trace *tr) {
  box *b = (box *)lua_newuserdatauv(L, sizeof *b, 1);
  b->tr = tr;
  luaL_setmetatable(L, meta);
  return b;
}

vr_trace **vb_push_trace_box(lua_State *L) { return &newbox(L, TRACE, NULL)->tr; }

/* The integer at t[i] (a table at idx), >= lo. */
static int64_t field_min(lua_State *L, int idx, lua_Integer i, int arg, const char *what,
                         int64_t lo) {
  lua_rawgeti(L, idx, i);
  int ok = 0;
  lua_Integer v = lua_tointegerx(L, -1, &ok);
  lua_pop(L, 1);
  if (!ok || v < lo)
    luaL_argerror(L, arg, lua_pushfstring(L, "%s[%I] must be an integer >= %I", what, i,
                                          (lua_Integer)lo));
  return (int64_t)v;
}

/* The integer at t[i] (a table at idx), >= 0. */
static int64_t field(lua_State *L, int idx, int i, int arg, const char *what) {
  return field_min(L, idx, i, arg, what, 0);
}

/* The integer field k of the table at idx, >= 0. */
static int64_t named(lua_State *L, int idx, const char *k, int arg) {
  lua_getfield(L, idx, k);
  int ok = 0;
  lua_Integer v = lua_tointegerx(L, -1, &ok);
  lua_pop(L, 1);
  if (!ok || v < 0) luaL_argerror(L, arg, lua_pushfstring(L, "%s must be an integer >= 0", k));
  return (int64_t)v;
}

/* vram.fit_program(traces, names, round, probes, degrees [, blocks]) ->
 * program | nil, reason
 * probes: each trace's sizes ({batch, seq, ...}); degrees: each size's
 * degree. The first prod(degree + 1) traces are the grid (trace.h), the
 * rest confirm. blocks ({small_max = B, large_round = B}, the tape's
 * rounding): a device program (prog:device), which counts reserved bytes
 * and reads the traces' inputs. */
static int l_fit(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  int64_t round = lua_isnoneornil(L, 3) ? 0 : vb_checkint(L, 3, 0, "rounding");
  luaL_checktype(L, 4, LUA_TTABLE);
  luaL_checktype(L, 5, LUA_TTABLE);
  vr_blocks blocks = {0, 0};
  bool device = !lua_isnoneornil(L, 6);
  if (device) {
    luaL_checktype(L, 6, LUA_TTABLE);
    blocks.small_max = named(L, 6, "small_max", 6);
    blocks.large_round = named(L, 6, "large_round", 6);
  }
  lua_settop(L, 5);
  lua_Integer k = luaL_len(L, 1), nv = luaL_len(L, 5);
  if (k < 2 || k > 512) return luaL_argerror(L, 1, "expected 2 to 512 probe traces");
  if (luaL_len(L, 4) != k) return luaL_argerror(L, 4, "expected one size list per trace");
  if (nv < 1 || nv > VR_MAXVARS) return luaL_argerror(L, 5, "expected 1 to 4 degrees");
  vr_grid g;
  memset(&g, 0, sizeof g);
  g.nvars = (int32_t)nv;
  for (int v = 0; v < g.nvars; v++) {
    int64_t d = field(L, 5, v + 1, 5, "degrees");
    if (d > VR_MAXDEG) return luaL_argerror(L, 5, "a degree is at most 4");
    g.degree[v] = (int32_t)d;
  }
  /* the traces and their sizes, on the stack and in userdata: a raise
   * below frees nothing of ours */
  const vr_trace **trs = (const vr_trace **)lua_newuserdatauv(L, (size_t)k * sizeof *trs, 0);
  int64_t *sizes = (int64_t *)lua_newuserdatauv(L, (size_t)(k * nv) * sizeof *sizes, 0);
  lua_createtable(L, (int)k, 0); /* each trace stays referenced: a weak list cannot lose one */
  for (int i = 0; i < (int)k; i++) {
    lua_rawgeti(L, 1, i + 1);
    trs[i] = checkbox(L, -1, TRACE, 1);
    lua_rawseti(L, -2, i + 1);
    lua_rawgeti(L, 4, i + 1);
    if (!lua_istable(L, -1) || luaL_len(L, -1) != nv)
      return luaL_argerror(L, 4, "each probe lists one value per size");
    for (int v = 0; v < g.nvars; v++) sizes[i * nv + v] = field(L, lua_gettop(L), v + 1, 4, "probe");
    lua_pop(L, 1);
  }
  for (int v = 0; v < g.nvars; v++) g.base[v] = sizes[v];
  const char *why = NULL;
  box *b = newbox(L, PROGRAM, NULL); /* first: raising later would leak the program */
  b->tr = vr_trace_fit(trs, (int)k, &g, sizes, round, device ? &blocks : NULL, &why);
  if (!b->tr) {
    luaL_pushfail(L);
    lua_pushstring(L, why && *why ? why : "out of memory");
    return 2;
  }
  lua_pushvalue(L, 2); /* label and phase names, by interned index */
  lua_setiuservalue(L, -2, 1);
  return 1;
}

static void push_name(lua_State *L, int index) {
  if (index < 0) {
    lua_pushnil(L);
    return;
  }
  lua_getiuservalue(L, 1, 1);
  lua_rawgeti(L, -1, index + 1);
  lua_remove(L, -2);
}

/* Size v of program g at x: a size of degree 0 only at the program's own
 * value (arg: the argument to blame). */
static void size_here(lua_State *L, const vr_grid *g, int v, int64_t x, int arg) {
  if (g->degree[v] == 0 && x != g->base[v])
    luaL_argerror(L, arg, lua_pushfstring(L, "this program answers only %I here (the op "
                                             "structure differs elsewhere)",
                                          (lua_Integer)g->base[v]));
}

/* The program at 1 and its sizes from the arguments 2.., checked: one per
 * size, >= 1, a size of degree 0 at the program's own value; then `more`
 * arguments. A device program answers only prog:device, the others all
 * but it. */
static const vr_trace *arguments(lua_State *L, int64_t sizes[VR_MAXVARS], bool device, int more) {
  const vr_trace *prog = checkbox(L, 1, PROGRAM, 1);
  const vr_grid *g = &prog->grid;
  if (prog->device != device)
    luaL_error(L, device ? "this program counts allocated bytes only: use peak or eval"
                         : "a device program answers only prog:device");
  if (lua_gettop(L) != 1 + g->nvars + more)
    luaL_error(L, "this program takes %d sizes%s, got %d arguments", (int)g->nvars,
               more ? lua_pushfstring(L, " and %d inputs", more) : "", lua_gettop(L) - 1);
  for (int v = 0; v < g->nvars; v++) {
    sizes[v] = vb_checkint(L, v + 2, 1, "size");
    size_here(L, g, v, sizes[v], v + 2);
  }
  return prog;
}

static int overflow(lua_State *L, const char *method, const vr_trace *prog, const int64_t *sizes) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  lua_pushfstring(L, "program:%s: sizes overflow int64 at ", method);
  luaL_addvalue(&b);
  for (int v = 0; v < prog->grid.nvars; v++) {
    lua_pushfstring(L, v ? ", %I" : "%I", (lua_Integer)sizes[v]);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  return lua_error(L);
}

/* Evaluates the program at the arguments' sizes, or raises the overflow. */
static void evaluate(lua_State *L, const char *method, vr_trace_result *r) {
  int64_t sizes[VR_MAXVARS];
  const vr_trace *prog = arguments(L, sizes, false, 0);
  if (!vr_trace_eval(prog, sizes, r)) overflow(L, method, prog, sizes);
}

/* prog:eval(batch, seq, ...) -> {peak, peak_phase, peak_op, at_peak} */
static int l_eval(lua_State *L) {
  vr_trace_result r;
  evaluate(L, "eval", &r);
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, (lua_Integer)r.peak);
  lua_setfield(L, -2, "peak");
  push_name(L, r.peak_phase);
  lua_setfield(L, -2, "peak_phase");
  push_name(L, r.peak_label);
  lua_setfield(L, -2, "peak_op");
  lua_createtable(L, 0, VR_NCAT);
  for (int i = 0; i < VR_NCAT; i++) {
    lua_pushinteger(L, (lua_Integer)r.at_peak[i]);
    lua_setfield(L, -2, vr_cat_name(i));
  }
  lua_setfield(L, -2, "at_peak");
  return 1;
}

/* prog:peak(batch, seq, ...) -> bytes: the hot path, no tables */
static int l_peak(lua_State *L) {
  int64_t sizes[VR_MAXVARS], peak = 0;
  const vr_trace *prog = arguments(L, sizes, false, 0);
  if (!vr_trace_peak(prog, sizes, &peak)) overflow(L, "peak", prog, sizes);
  lua_pushinteger(L, (lua_Integer)peak);
  return 1;
}

/* prog:device(batch, seq, ..., input...) -> reserved peak, allocated peak,
 * live bytes at the end (a device program: the tape's allocator counts) */
static int l_device(lua_State *L) {
  int64_t sizes[VR_MAXVARS], inputs[VR_MAXINPUTS] = {0};
  const vr_trace *dprog = checkbox(L, 1, PROGRAM, 1);
  const vr_trace *prog = arguments(L, sizes, true, dprog->ninputs);
  for (int i = 0; i < prog->ninputs; i++)
    inputs[i] = vb_checkint(L, 2 + prog->grid.nvars + i, 0, "input");
  vr_trace_device_result r;
  if (!vr_trace_device(prog, sizes, inputs, &r)) overflow(L, "device", prog, sizes);
  lua_pushinteger(L, (lua_Integer)r.peak_reserved);
  lua_pushinteger(L, (lua_Integer)r.peak);
  lua_pushinteger(L, (lua_Integer)r.live);
  return 3;
}

/* The integers of the array at idx, each >= lo (n of them: its length),
 * in a userdata pushed on the stack. */
static int64_t *int_array(lua_State *L, int idx, lua_Integer n, int64_t lo, const char *what) {
  int64_t *v = (int64_t *)lua_newuserdatauv(L, (size_t)n * sizeof *v + 1, 0);
  for (lua_Integer i = 1; i <= n; i++) v[i - 1] = field_min(L, idx, i, idx, what, lo);
  return v;
}

/* prog:device_line(batch, seqs [, inputs]) -> reserved, live: prog:device
 * at batch and each seq of the array seqs (the program's one input, if it
 * has one, inputs[i] at seqs[i]), one call for a sweep's row; reserved[i]
 * and live[i] its reserved peak and live bytes at the end, false where the
 * sizes overflow (prog:device there says so). A program of two sizes and
 * at most one input. */
#define LINE_MAX ((lua_Integer)1 << 24)
static int l_device_line(lua_State *L) {
  const vr_trace *prog = checkbox(L, 1, PROGRAM, 1);
  const vr_grid *g = &prog->grid;
  if (!prog->device) return luaL_error(L, "this program counts allocated bytes only: use peak or eval");
  if (g->nvars != 2 || prog->ninputs > 1)
    return luaL_error(L, "device_line takes a program of batch and seq with at most one input "
                         "(this one: %d sizes, %d inputs)", (int)g->nvars, (int)prog->ninputs);
  int64_t sizes[VR_MAXVARS] = {0}, inputs[VR_MAXINPUTS] = {0};
  sizes[0] = vb_checkint(L, 2, 1, "batch");
  size_here(L, g, 0, sizes[0], 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  if (prog->ninputs == 1) luaL_checktype(L, 4, LUA_TTABLE);
  else luaL_argcheck(L, lua_isnoneornil(L, 4), 4, "this program takes no input");
  lua_settop(L, 4); /* the arrays' blocks go above */
  lua_Integer n = luaL_len(L, 3);
  luaL_argcheck(L, n <= LINE_MAX, 3, "at most 2^24 sizes");
  const int64_t *seqs = int_array(L, 3, n, 1, "seqs");
  for (lua_Integer i = 0; i < n; i++) size_here(L, g, 1, seqs[i], 3);
  const int64_t *in = NULL;
  if (prog->ninputs == 1) {
    luaL_argcheck(L, luaL_len(L, 4) == n, 4, "one input for each seq");
    in = int_array(L, 4, n, 0, "inputs");
  }
  lua_createtable(L, n < INT_MAX ? (int)n : INT_MAX, 0);
  lua_createtable(L, n < INT_MAX ? (int)n : INT_MAX, 0);
  int res = lua_gettop(L) - 1;
  for (lua_Integer i = 0; i < n; i++) {
    vr_trace_device_result r;
    sizes[1] = seqs[i];
    if (in) inputs[0] = in[i];
    if (vr_trace_device(prog, sizes, inputs, &r)) {
      lua_pushinteger(L, (lua_Integer)r.peak_reserved);
      lua_rawseti(L, res, i + 1);
      lua_pushinteger(L, (lua_Integer)r.live);
      lua_rawseti(L, res + 1, i + 1);
    } else {
      lua_pushboolean(L, 0);
      lua_rawseti(L, res, i + 1);
      lua_pushboolean(L, 0);
      lua_rawseti(L, res + 1, i + 1);
    }
  }
  return 2;
}

static int l_len(lua_State *L) {
  box *b = (box *)lua_touserdata(L, 1);
  lua_pushinteger(L, b->tr ? (lua_Integer)b->tr->n : 0);
  return 1;
}

/* prog:plan_len() -> the ops prog:peak runs (fewer than #prog: trace_peak.c) */
static int l_plan_len(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)vr_plan_len(checkbox(L, 1, PROGRAM, 1)->plan));
  return 1;
}

static const luaL_Reg program_methods[] = {
    {"eval", l_eval},         {"peak", l_peak}, {"device", l_device},
    {"device_line", l_device_line},
    {"plan_len", l_plan_len}, {NULL, NULL}};

static const luaL_Reg box_meta[] = {{"__gc", box_gc}, {"__len", l_len}, {NULL, NULL}};

/* A locked metatable for boxes; methods, when given, become __index. */
static void box_metatable(lua_State *L, const char *name, const luaL_Reg *methods) {
  luaL_newmetatable(L, name);
  luaL_setfuncs(L, box_meta, 0);
  if (methods) {
    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
  }
  lua_pushliteral(L, "locked");
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);
}

void vb_open_trace(lua_State *L) {
  box_metatable(L, TRACE, NULL);
  box_metatable(L, PROGRAM, program_methods);
  lua_pushcfunction(L, l_fit);
  lua_setfield(L, -2, "fit_program");
}
