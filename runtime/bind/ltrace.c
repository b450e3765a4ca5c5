/* Compiled estimates for Lua: traces taken from tapes, fitted into a
 * program, evaluated for any (batch, seq). */
#include <stdlib.h>

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

/* vram.fit_program({trace x 7 | x 4}, {names} [, round]) -> program | nil, reason
 * (7: the standard probes; 4: a line at batch 1 or seq 1, trace.h) */
static int l_fit(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  const vr_trace *trs[7];
  int64_t round = lua_isnoneornil(L, 3) ? 0 : vb_checkint(L, 3, 0, "rounding");
  lua_Integer k = luaL_len(L, 1);
  if (k != 7 && k != 4) return luaL_argerror(L, 1, "expected the 7 (or 4) probe traces");
  lua_settop(L, 3);
  /* each trace stays on the stack: a weak list cannot lose one mid-fit */
  for (int i = 0; i < (int)k; i++) {
    lua_rawgeti(L, 1, i + 1);
    trs[i] = checkbox(L, -1, TRACE, 1);
  }
  const char *why = NULL;
  box *b = newbox(L, PROGRAM, NULL); /* first: raising later would leak the program */
  b->tr = vr_trace_fit(trs, (int)k, round, &why);
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

/* The program at 1 and its (batch, seq) arguments, checked. */
static const vr_trace *arguments(lua_State *L, int64_t *batch, int64_t *seq) {
  *batch = vb_checkint(L, 2, 1, "batch");
  *seq = vb_checkint(L, 3, 1, "seq");
  const vr_trace *prog = checkbox(L, 1, PROGRAM, 1);
  if (prog->batch > 0 && *batch != prog->batch)
    luaL_argerror(L, 2, "this program answers batch 1 only (a line program)");
  if (prog->seq > 0 && *seq != prog->seq)
    luaL_argerror(L, 3, "this program answers seq 1 only (a line program)");
  return prog;
}

static int overflow(lua_State *L, const char *method, int64_t batch, int64_t seq) {
  return luaL_error(L, "program:%s: sizes overflow int64 at batch %I, seq %I", method,
                    (lua_Integer)batch, (lua_Integer)seq);
}

/* Evaluates prog(batch, seq) from the arguments, or raises the overflow. */
static void evaluate(lua_State *L, const char *method, vr_trace_result *r) {
  int64_t batch = 0, seq = 0;
  const vr_trace *prog = arguments(L, &batch, &seq);
  if (!vr_trace_eval(prog, batch, seq, r)) overflow(L, method, batch, seq);
}

/* prog:eval(batch, seq) -> {peak, peak_phase, peak_op, at_peak} */
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

/* prog:peak(batch, seq) -> bytes: the hot path, no tables */
static int l_peak(lua_State *L) {
  int64_t batch = 0, seq = 0, peak = 0;
  const vr_trace *prog = arguments(L, &batch, &seq);
  if (!vr_trace_peak(prog, batch, seq, &peak)) overflow(L, "peak", batch, seq);
  lua_pushinteger(L, (lua_Integer)peak);
  return 1;
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
    {"eval", l_eval}, {"peak", l_peak}, {"plan_len", l_plan_len}, {NULL, NULL}};

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
