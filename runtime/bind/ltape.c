/* vram.tape(): the allocation simulator as a Lua userdata.
 *
 * A script's code can run in the middle of a method: luaL_len calls a
 * list's __len, lua_geti its __index, and either may close the tape (a
 * to-be-closed variable) or reset it. So every method reads all of its
 * Lua-side values first, into C buffers, and only then looks the tape up
 * (check) and touches its memory; no tape pointer is held across a call
 * that can run Lua code. Every count from Lua is range-checked before it
 * becomes a C size. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../core/checked.h"
#include "../core/tape.h"
#include "bind.h"

#define TAPE "vram.tape"

/* The labels met last, by the address of their text. Scripts pass the
 * same few Lua strings over and over (Lua keeps one copy of each short
 * string), so the address finds the interned index without the tape's
 * strlen, hash and probe. The address is only a hint: a collected string's
 * address may be reused by another, so a hit is confirmed by comparing the
 * text with the interned one (as the tape's own lookup compares). */
#define SEEN 128 /* a power of two */
typedef struct {
  const char *s;
  int index;
} seen_label;

/* cats[c]: the text of the methods' upvalue UP_CAT + c once a call met it
 * (NULL before). Those strings live as long as the state and Lua keeps one
 * copy of each short string, so a category argument at the same address is
 * that category: no strcmp. */
typedef struct {
  vr_tape *t;
  seen_label seen[SEEN];
  const char *cats[VR_NCAT];
} ltape;

/* The methods' upvalues: the tape metatable, then the field names the
 * tensor-reading methods look up and the category names the stats tables
 * are keyed by (pushed once, not made from C strings on every call). */
enum { UP_META = 1, UP_ID, UP_RG, UP_B, UP_ALIAS, UP_CAT, UP_N = UP_CAT + VR_NCAT - 1 };

/* Argument 1 as a tape box: a metatable compare against the methods' own
 * upvalue (luaL_checkudata finds the metatable by name on every call, and
 * raises the usual message when it is not a tape). Each method asks once,
 * first (so a wrong self is named as such): the box is argument 1, so it
 * stays alive and in place for the whole call; only its tape may change
 * (a script's code closing it), which tape() checks. */
static ltape *box(lua_State *L) {
  void *p = lua_touserdata(L, 1);
  if (p && lua_getmetatable(L, 1)) {
    int same = lua_rawequal(L, -1, lua_upvalueindex(UP_META));
    lua_pop(L, 1);
    if (same) return (ltape *)p;
  }
  return (ltape *)luaL_checkudata(L, 1, TAPE);
}

/* The box's tape; raises when it is closed. Call it after the last call
 * that can run Lua code. */
static vr_tape *tape(lua_State *L, const ltape *u) {
  if (!u->t) luaL_error(L, "tape is closed");
  return u->t;
}

/* The tape of argument 1, for a method that runs no Lua code before it. */
static vr_tape *check(lua_State *L) { return tape(L, box(L)); }

static int fail(lua_State *L, const char *method, vr_status st) {
  if (st == VR_ENOMEM) /* the tape allocates from the state's budget */
    return luaL_error(L, "tape:%s: out of memory (the tape counts against --max-memory)", method);
  /* the core's nesting statuses are shared by the three recordings (a
   * checkpoint segment, a capture, an echo); its text names the first */
  bool recording = strncmp(method, "capture", 7) == 0 || strncmp(method, "echo", 4) == 0;
  if (recording && st == VR_ENESTED)
    return luaL_error(L, "tape:%s: a checkpoint segment, capture or echo is already open "
                         "(they cannot nest)", method);
  if (recording && st == VR_ENOTRECORD)
    return luaL_error(L, "tape:%s: no %s is open", method,
                      method[0] == 'c' ? "capture" : "echo");
  return luaL_error(L, "tape:%s: %s", method, vr_tape_error(st));
}

static int checkcat(lua_State *L, ltape *u, int arg) {
  const char *name = luaL_checkstring(L, arg);
  for (int i = 0; i < VR_NCAT; i++)
    if (u->cats[i] == name) return i;
  int c = vr_cat_find(name);
  if (c >= 0) {
    u->cats[c] = lua_tostring(L, lua_upvalueindex(UP_CAT + c));
  } else {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    lua_pushfstring(L, "unknown category '%s' (known:", name);
    luaL_addvalue(&b);
    for (int i = 0; i < VR_NCAT; i++) {
      luaL_addchar(&b, ' ');
      luaL_addstring(&b, vr_cat_name(i));
    }
    luaL_addchar(&b, ')');
    luaL_pushresult(&b);
    luaL_argerror(L, arg, lua_tostring(L, -1));
  }
  return c;
}

/* An optional label argument, read before the tape is looked up. */
static const char *optname(lua_State *L, int arg) {
  return lua_isnoneornil(L, arg) ? NULL : luaL_checkstring(L, arg);
}

/* The interned index of a label (-1 for none); raises when the table is full. */
static int intern(lua_State *L, ltape *u, vr_tape *t, const char *name, const char *method) {
  if (!name) return -1;
  /* Lua allocates strings 8- or 16-byte aligned: drop the low bits */
  seen_label *e = &u->seen[((uintptr_t)name >> 4) & (SEEN - 1)];
  if (e->s == name) {
    const char *have = vr_tape_string(t, e->index);
    if (have && strcmp(have, name) == 0) return e->index;
  }
  int k = -1;
  vr_status st = vr_tape_intern(t, name, &k);
  if (st) fail(L, method, st);
  *e = (seen_label){name, k};
  return k;
}

/* Tapes given back by t:recycle(), each with its box's labels (a
 * simulation's tape is done once its stats are read, and the next one
 * would grow the same vectors again, copying each at every doubling, and
 * intern the same labels): vram.tape() takes the last one. A userdata in
 * the registry under SPARES_KEY, whose __gc frees those left. */
#define SPARES 4
#define SPARES_KEY "vramlua.tape_spares"
typedef struct {
  int n;
  vr_tape *t[SPARES];
  seen_label seen[SPARES][SEEN];
} spares;

static int l_spares_gc(lua_State *L) {
  spares *sp = (spares *)lua_touserdata(L, 1);
  while (sp->n > 0) vr_tape_free(sp->t[--sp->n]);
  return 0;
}

/* The state's spares (made on first use when `make`), or NULL; pushes nothing. */
static spares *get_spares(lua_State *L, bool make) {
  spares *sp = NULL;
  if (lua_getfield(L, LUA_REGISTRYINDEX, SPARES_KEY) == LUA_TUSERDATA)
    sp = (spares *)lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (sp || !make) return sp;
  sp = (spares *)lua_newuserdatauv(L, sizeof *sp, 0);
  sp->n = 0;
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, l_spares_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, SPARES_KEY);
  return sp;
}

static int l_new(lua_State *L) {
  spares *sp = get_spares(L, false);
  ltape *u = (ltape *)lua_newuserdatauv(L, sizeof *u, 0);
  vr_mem mem;
  memset(u, 0, sizeof *u);
  luaL_setmetatable(L, TAPE);
  if (sp && sp->n > 0) {
    sp->n--;
    u->t = sp->t[sp->n];
    memcpy(u->seen, sp->seen[sp->n], sizeof u->seen);
    return 1;
  }
  /* the state's allocator: the host's memory budget covers the tape */
  mem.fn = lua_getallocf(L, &mem.ud);
  u->t = vr_tape_new(&mem);
  if (!u->t) return luaL_error(L, "vram.tape: out of memory");
  return 1;
}

static int alloc_common(lua_State *L, bool param) {
  ltape *u = box(L);
  const char *method = param ? "param" : "alloc";
  int64_t bytes = vb_checkint(L, 2, 0, "bytes");
  int cat = checkcat(L, u, 3);
  const char *label = optname(L, 4);
  vr_tape *t = tape(L, u);
  int64_t id = 0;
  vr_status st = vr_tape_alloc(t, bytes, cat, intern(L, u, t, label, method), param, &id);
  if (st) return fail(L, method, st);
  lua_pushinteger(L, (lua_Integer)id);
  return 1;
}

/* t:alloc(bytes, category [, label]) -> id */
static int l_alloc(lua_State *L) { return alloc_common(L, false); }
/* t:param(bytes, category [, label]) -> id; a leaf whose gradient persists */
static int l_param(lua_State *L) { return alloc_common(L, true); }

/* t:drop(id, ...) releases the caller's reference to each tensor */
static int l_drop(lua_State *L) {
  vr_tape *t = check(L);
  int n = lua_gettop(L);
  for (int i = 2; i <= n; i++) {
    vr_status st = vr_tape_drop(t, (int64_t)luaL_checkinteger(L, i));
    if (st) return fail(L, "drop", st);
  }
  return 0;
}

/* t:retain(id): a view keeps its base's storage alive */
static int l_retain(lua_State *L) {
  vr_tape *t = check(L);
  vr_status st = vr_tape_retain(t, (int64_t)luaL_checkinteger(L, 2));
  return st ? fail(L, "retain", st) : 0;
}

/* t:replay_drop(id): inside a checkpoint segment, a drop that only the
 * recomputation performs */
static int l_replay_drop(lua_State *L) {
  vr_tape *t = check(L);
  vr_status st = vr_tape_replay_drop(t, (int64_t)luaL_checkinteger(L, 2));
  return st ? fail(L, "replay_drop", st) : 0;
}

/* t:temp(bytes, category [, label]): a transient inside one op */
static int l_temp(lua_State *L) {
  ltape *u = box(L);
  int64_t bytes = vb_checkint(L, 2, 0, "bytes");
  int cat = checkcat(L, u, 3);
  const char *label = optname(L, 4);
  vr_tape *t = tape(L, u);
  vr_status st = vr_tape_temp(t, bytes, cat, intern(L, u, t, label, "temp"));
  return st ? fail(L, "temp", st) : 0;
}

/* The length of a list argument (its __len, if any), checked to be in
 * 0..max before it becomes a C count. */
static lua_Integer checklen(lua_State *L, int arg, lua_Integer max, const char *what) {
  lua_Integer n = luaL_len(L, arg);
  if (n < 0)
    luaL_argerror(L, arg, lua_pushfstring(L, "%s: length %I is negative", what, n));
  if (n > max)
    luaL_argerror(L, arg, lua_pushfstring(L, "more than %I %s (length %I)", max, what, n));
  return n;
}

/* A list of integers (read through __len and __index, as Lua code would). */
static int read_ids(lua_State *L, int arg, int64_t *buf, int max, const char *what) {
  if (lua_isnoneornil(L, arg)) return 0;
  luaL_checktype(L, arg, LUA_TTABLE);
  int n = (int)checklen(L, arg, max, what);
  for (int i = 0; i < n; i++) {
    lua_geti(L, arg, i + 1);
    int ok = 0;
    buf[i] = (int64_t)lua_tointegerx(L, -1, &ok);
    if (!ok) luaL_argerror(L, arg, lua_pushfstring(L, "%s[%d] is not an integer id", what, i + 1));
    lua_pop(L, 1);
  }
  return n;
}

/* Gradient edges as a flat list {id, bytes, id, bytes, ...}; bytes < 0 means
 * "pass output -bytes's gradient through" (1-based), for views. */
static int read_edges(lua_State *L, int arg, vr_edge *buf) {
  int64_t flat[2 * VR_MAX_EDGES];
  int n = read_ids(L, arg, flat, 2 * VR_MAX_EDGES, "gradient edges");
  if (n % 2) luaL_argerror(L, arg, "gradient edges come in {id, bytes} pairs");
  for (int i = 0; i < n / 2; i++) {
    int64_t b = flat[2 * i + 1];
    if (b < -VR_MAX_EDGES)
      luaL_argerror(L, arg, lua_pushfstring(L, "edge %d: gradient alias %I names an output the node does not have", i + 1,
                                            (lua_Integer)b));
    buf[i] = (vr_edge){flat[2 * i], b < 0 ? 0 : b, b < 0 ? (int)(-b - 1) : -1};
  }
  return n / 2;
}

/* t:node(saved, edges, outputs [, temp_bytes [, label]]) */
static int l_node(lua_State *L) {
  ltape *u = box(L);
  int64_t saved[VR_MAX_EDGES], outs[VR_MAX_EDGES];
  vr_edge edges[VR_MAX_EDGES];
  int ns = read_ids(L, 2, saved, VR_MAX_EDGES, "saved tensors");
  int ne = read_edges(L, 3, edges);
  int no = read_ids(L, 4, outs, VR_MAX_EDGES, "outputs");
  int64_t temp = lua_isnoneornil(L, 5) ? 0 : vb_checkint(L, 5, 0, "temp bytes");
  const char *label = optname(L, 6);
  vr_tape *t = tape(L, u); /* after the lists: their metamethods may have closed it */
  vr_status st = vr_tape_node(t, saved, ns, edges, ne, outs, no, temp, intern(L, u, t, label, "node"));
  return st ? fail(L, "node", st) : 0;
}

/* Pushes field `up` (UP_ID, UP_RG, UP_B, UP_ALIAS) of the table at absolute
 * index idx. */
static void get_key(lua_State *L, int idx, int up) {
  lua_pushvalue(L, lua_upvalueindex(up));
  lua_gettable(L, idx);
}

/* Field `up` of the table at absolute index idx as an integer, or raises
 * naming what (the list and its 1-based entry). Leaves the stack as it was. */
static int64_t field_id(lua_State *L, int idx, int up, int arg, const char *what,
                        lua_Integer i) {
  int ok = 0;
  if (lua_type(L, idx) != LUA_TTABLE)
    luaL_argerror(L, arg, lua_pushfstring(L, "%s[%I] is not a tensor", what, i));
  get_key(L, idx, up);
  int64_t v = (int64_t)lua_tointegerx(L, -1, &ok);
  if (!ok)
    luaL_argerror(L, arg, lua_pushfstring(L, "%s[%I].%s is not an integer", what, i,
                                          up == UP_ID ? "id" : "b"));
  lua_pop(L, 1);
  return v;
}

/* The ids of a list of tensors (tables with an integer id), up to its
 * first nil, as ipairs reads it. */
static int read_tensor_ids(lua_State *L, int arg, int64_t *buf, const char *what) {
  int n = 0;
  luaL_checktype(L, arg, LUA_TTABLE);
  for (lua_Integer i = 1;; i++) {
    if (lua_geti(L, arg, i) == LUA_TNIL) {
      lua_pop(L, 1);
      return n;
    }
    if (n >= VR_MAX_EDGES)
      luaL_argerror(L, arg, lua_pushfstring(L, "more than %d %s", VR_MAX_EDGES, what));
    buf[n++] = field_id(L, lua_gettop(L), UP_ID, arg, what, i);
    lua_pop(L, 1);
  }
}

/* t:node_of(saved, edges, outputs [, temp_bytes [, label]]): stdlib/sim.lua's
 * Sim:node with the tensors themselves. saved and outputs: lists of tensors
 * ({id = ...}); edges: a list of {tensor, bytes} or {tensor, alias = k},
 * bytes defaulting to the tensor's b; only edges whose tensor has rg reach
 * the node, and with none the node is not recorded. temp_bytes nil or false:
 * none. Returns whether it was recorded. */
static int l_node_of(lua_State *L) {
  ltape *u = box(L);
  int64_t saved[VR_MAX_EDGES], outs[VR_MAX_EDGES];
  vr_edge edges[VR_MAX_EDGES];
  int ne = 0;
  luaL_checktype(L, 3, LUA_TTABLE);
  for (lua_Integer i = 1;; i++) {
    if (lua_geti(L, 3, i) == LUA_TNIL) {
      lua_pop(L, 1);
      break;
    }
    int e = lua_gettop(L);
    if (lua_type(L, e) != LUA_TTABLE)
      luaL_argerror(L, 3, lua_pushfstring(L, "gradient edges[%I] is not a table", i));
    lua_geti(L, e, 1); /* the tensor */
    int x = lua_gettop(L);
    if (lua_type(L, x) != LUA_TTABLE)
      luaL_argerror(L, 3, lua_pushfstring(L, "gradient edges[%I][1] is not a tensor", i));
    get_key(L, x, UP_RG);
    bool rg = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (rg) {
      if (ne >= VR_MAX_EDGES)
        luaL_argerror(L, 3, lua_pushfstring(L, "more than %d gradient edges", VR_MAX_EDGES));
      int64_t id = field_id(L, x, UP_ID, 3, "gradient edges", i);
      get_key(L, e, UP_ALIAS);
      if (lua_toboolean(L, -1)) {
        int ok = 0;
        lua_Integer a = lua_tointegerx(L, -1, &ok);
        if (!ok || a < 1 || a > VR_MAX_EDGES)
          luaL_argerror(L, 3, lua_pushfstring(L, "edge %I: gradient alias names an output the "
                                                 "node does not have", i));
        edges[ne++] = (vr_edge){id, 0, (int)(a - 1)};
      } else {
        int64_t b = 0;
        lua_geti(L, e, 2);
        if (lua_toboolean(L, -1)) {
          int ok = 0;
          b = (int64_t)lua_tointegerx(L, -1, &ok);
          if (!ok)
            luaL_argerror(L, 3, lua_pushfstring(L, "gradient edges[%I][2] is not an integer", i));
        } else {
          b = field_id(L, x, UP_B, 3, "gradient edges", i);
        }
        lua_pop(L, 1);
        if (b < 0) luaL_argerror(L, 3, lua_pushfstring(L, "edge %I: negative bytes", i));
        edges[ne++] = (vr_edge){id, b, -1};
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 2);
  }
  if (ne == 0) { /* no input requires grad: nothing recorded */
    lua_pushboolean(L, 0);
    return 1;
  }
  int ns = read_tensor_ids(L, 2, saved, "saved tensors");
  int no = read_tensor_ids(L, 4, outs, "outputs");
  int64_t temp = lua_toboolean(L, 5) ? vb_checkint(L, 5, 0, "temp bytes") : 0; /* temp or 0 */
  const char *label = optname(L, 6);
  vr_tape *t = tape(L, u); /* after the lists: their metamethods may have closed it */
  vr_status st = vr_tape_node(t, saved, ns, edges, ne, outs, no, temp, intern(L, u, t, label, "node"));
  if (st) return fail(L, "node", st);
  lua_pushboolean(L, 1);
  return 1;
}

/* t:drop_of(x, ...): drop each tensor given ({id = ...}); nil and false are
 * skipped (stdlib/sim.lua's Sim:drop) */
static int l_drop_of(lua_State *L) {
  ltape *u = box(L);
  int64_t ids[VR_MAX_EDGES];
  int n = 0, top = lua_gettop(L);
  for (int i = 2; i <= top; i++) {
    if (!lua_toboolean(L, i)) continue;
    if (n >= VR_MAX_EDGES) return luaL_error(L, "tape:drop_of: more than %d tensors", VR_MAX_EDGES);
    ids[n++] = field_id(L, i, UP_ID, i, "tensor", i - 1);
  }
  vr_tape *t = tape(L, u); /* after the fields: their metamethods may have closed it */
  for (int i = 0; i < n; i++) {
    vr_status st = vr_tape_drop(t, ids[i]);
    if (st) return fail(L, "drop", st);
  }
  return 0;
}

/* Layers and parameters per layer of a bulk; their product bounds the edge
 * list a bulk copies (2^22 edges, 96 MiB: far above any model). */
#define MAX_BULK_SIDE 1000000
#define MAX_BULK_EDGES (1 << 22)

/* t:bulk(per_iter_bytes, per_iter_reserved, iters, {param, bytes, ...}, nper
 *        [, label [, stride]]) -> index. With stride the list holds the first
 * layer's nper pairs only: layer j's parameters are theirs + j * stride
 * (layers whose parameters the tape made as copies, tape:capture_repeat). */
static int l_bulk(lua_State *L) {
  ltape *u = box(L);
  int64_t per = vb_checkint(L, 2, 0, "bytes per layer");
  int64_t rper = vb_checkint(L, 3, 0, "reserved bytes per layer");
  int64_t iters = vb_checkint(L, 4, 0, "layers");
  luaL_checktype(L, 5, LUA_TTABLE);
  int64_t nper = vb_checkint(L, 6, 0, "parameters per layer");
  const char *label = optname(L, 7);
  bool strided = !lua_isnoneornil(L, 8);
  int64_t stride = strided ? vb_checkint(L, 8, 0, "stride") : 0;
  lua_settop(L, 8); /* the edge buffer goes above the arguments */
  if (iters > MAX_BULK_SIDE || nper > MAX_BULK_SIDE || iters * nper > MAX_BULK_EDGES)
    return luaL_error(L, "tape:bulk: %I layers of %I parameters: more than %d gradient edges",
                      (lua_Integer)iters, (lua_Integer)nper, MAX_BULK_EDGES);
  lua_Integer pairs = (lua_Integer)(iters * nper), given = strided ? (lua_Integer)nper : pairs;
  lua_Integer len = checklen(L, 5, 2 * MAX_BULK_EDGES, "gradient edge entries");
  if (len != 2 * given)
    return luaL_argerror(L, 5, lua_pushfstring(L, "expected %s = %I {param, bytes} pairs, got %I "
                                                  "entries", strided ? "parameters-per-layer" :
                                                  "layers * parameters-per-layer", given, len));
  /* a Lua-owned buffer: an error while reading leaves nothing to free */
  vr_edge *e = (vr_edge *)lua_newuserdatauv(L, (size_t)(pairs + 1) * sizeof *e, 0);
  for (lua_Integer i = 0; i < given; i++) {
    int ok1 = 0, ok2 = 0;
    lua_geti(L, 5, 2 * i + 1);
    lua_geti(L, 5, 2 * i + 2);
    e[i] = (vr_edge){(int64_t)lua_tointegerx(L, -2, &ok1), (int64_t)lua_tointegerx(L, -1, &ok2),
                     -1};
    if (!ok1 || !ok2)
      return luaL_argerror(L, 5, lua_pushfstring(L, "entry %I is not an integer",
                                                 2 * i + (ok1 ? 2 : 1)));
    lua_pop(L, 2);
  }
  /* the other layers' edges: ids a stride further per layer (checked: the
   * tape refuses ids it does not hold, so only the sum can overflow) */
  for (lua_Integer i = given; i < pairs; i++) {
    vr_edge p = e[i - nper];
    if (p.tensor > INT64_MAX - stride)
      return luaL_argerror(L, 8, "stride: parameter ids overflow");
    e[i] = (vr_edge){p.tensor + stride, p.bytes, -1};
  }
  vr_tape *t = tape(L, u); /* after the list: its metamethods may have closed it */
  int index = 0;
  vr_status st =
      vr_tape_bulk(t, per, rper, iters, e, (int)nper, intern(L, u, t, label, "bulk"), &index);
  if (st) return fail(L, "bulk", st);
  lua_pushinteger(L, index);
  return 1;
}

static int l_bulk_end(lua_State *L) {
  vr_tape *t = check(L);
  vr_status st = vr_tape_bulk_end(t, (int)luaL_checkinteger(L, 2));
  return st ? fail(L, "bulk_end", st) : 0;
}

/* t:capture(): from now on keep the allocs and temps (tape.h) */
static int l_capture(lua_State *L) {
  vr_status st = vr_tape_capture_begin(check(L));
  return st ? fail(L, "capture", st) : 0;
}

/* t:capture_end() -> tensors the capture created and the first one's id,
 * or nil when another call spoiled it */
static int l_capture_end(lua_State *L) {
  int64_t stride = -1, first = -1;
  vr_status st = vr_tape_capture_end(check(L), &stride, &first);
  if (st) return fail(L, "capture_end", st);
  if (stride < 0) return 0;
  lua_pushinteger(L, (lua_Integer)stride);
  lua_pushinteger(L, (lua_Integer)first);
  return 2;
}

/* t:capture_repeat(times): the captured allocs and temps again, times times */
static int l_capture_repeat(lua_State *L) {
  int64_t times = vb_checkint(L, 2, 0, "times");
  vr_status st = vr_tape_capture_repeat(check(L), times);
  if (st == VR_EOVERFLOW)
    return luaL_error(L, "tape:capture_repeat: %I copies: more than 2^26 operations in all",
                      (lua_Integer)times);
  return st ? fail(L, "capture_repeat", st) : 0;
}

/* t:echo(): from now on keep what the tape does (tape.h vr_tape_echo_begin) */
static int l_echo(lua_State *L) {
  vr_status st = vr_tape_echo_begin(check(L));
  if (st == VR_ENESTED) /* echoes nest (not in a capture), VR_ECHO_DEPTH deep */
    return luaL_error(L, "tape:echo: a capture is open, or %d echoes are (they nest %d deep)",
                      VR_ECHO_DEPTH, VR_ECHO_DEPTH);
  return st ? fail(L, "echo", st) : 0;
}

/* t:echo_end() -> whether the echo can be replayed */
static int l_echo_end(lua_State *L) {
  bool ok = false;
  vr_status st = vr_tape_echo_end(check(L), &ok);
  if (st) return fail(L, "echo_end", st);
  lua_pushboolean(L, ok);
  return 1;
}

/* The {from, to, ...} list at arg as two arrays (VR_MAX_EDGES pairs at
 * most); returns the pair count. */
static int read_pairs(lua_State *L, int arg, int64_t *from, int64_t *to) {
  int64_t flat[2 * VR_MAX_EDGES];
  int n = read_ids(L, arg, flat, 2 * VR_MAX_EDGES, "id pairs");
  if (n % 2) luaL_argerror(L, arg, "ids come in {from, to} pairs");
  for (int i = 0; i < n / 2; i++) {
    from[i] = flat[2 * i];
    to[i] = flat[2 * i + 1];
  }
  return n / 2;
}

/* t:echo_replay({from, to, ...}, lo, hi, delta, query [, times]) -> query's
 * new id; query a list of ids (at most ECHO_QUERIES: a layer's output and
 * its weight casts under autocast, stdlib/compose.lua): their new ids, in
 * order. times (default 1, at most 2^20): replayed that many times in a
 * chain, the j-th with [lo, hi) shifted by j * delta and each pair's `to`
 * the previous replay's answer to the query at the pair's place (experts
 * one after another, each on the last one's output, stdlib/moe.lua); the
 * answers are the last replay's */
#define ECHO_QUERIES 1024
#define ECHO_CHAIN (1 << 20)
static int l_echo_replay(lua_State *L) {
  ltape *u = box(L);
  int64_t from[VR_MAX_EDGES], to[VR_MAX_EDGES];
  int64_t query[ECHO_QUERIES], answer[ECHO_QUERIES]; /* 16 KiB of stack */
  int n = 2 * read_pairs(L, 2, from, to);
  int64_t lo = (int64_t)luaL_checkinteger(L, 3), hi = (int64_t)luaL_checkinteger(L, 4);
  int64_t delta = (int64_t)luaL_checkinteger(L, 5);
  int nq = 1;
  if (lua_istable(L, 6))
    nq = read_ids(L, 6, query, ECHO_QUERIES, "queried ids");
  else
    query[0] = (int64_t)luaL_checkinteger(L, 6);
  int64_t times = lua_isnoneornil(L, 7) ? 1 : vb_checkint(L, 7, 1, "times"), far = 0;
  if (times > ECHO_CHAIN) return luaL_argerror(L, 7, "at most 2^20 replays in a chain");
  if (times > 1 && n / 2 > nq) return luaL_argerror(L, 6, "a chain answers every pair");
  if (lo < 0 || hi < lo ||
      (hi > lo && (!vr_mul(delta, times, &far) || far > INT64_MAX - hi || far < -lo)))
    return luaL_argerror(L, 5, "the shifted ids leave 0 .. 2^63");
  vr_tape *t = tape(L, u);
  for (int64_t j = 1; j <= times; j++) {
    vr_status st = vr_tape_echo_replay(t, from, to, n / 2, lo, hi, j * delta, query, nq, answer);
    if (st) return fail(L, "echo_replay", st);
    for (int i = 0; i < n / 2; i++) to[i] = answer[i];
  }
  luaL_checkstack(L, nq, "echo_replay");
  for (int i = 0; i < nq; i++) lua_pushinteger(L, (lua_Integer)answer[i]);
  return nq;
}

/* t:echo_keep() -> the outermost echo that ended last, kept apart from
 * the tape (an opaque vram.echo), or nil when there is none to keep
 * (tape.h vr_tape_echo_keep) */
#define ECHO "vram.echo"
static int l_echo_keep(lua_State *L) {
  ltape *u = box(L);
  size_t need = 0, got = 0;
  vr_status st = vr_tape_echo_keep(tape(L, u), NULL, 0, &need);
  if (st) return fail(L, "echo_keep", st);
  if (need == 0) return 0;
  void *buf = lua_newuserdatauv(L, need, 0); /* may collect: the tape is looked up again */
  st = vr_tape_echo_keep(tape(L, u), buf, need, &got);
  if (st) return fail(L, "echo_keep", st);
  if (got != need) return luaL_error(L, "tape:echo_keep: the tape changed while it was kept");
  luaL_setmetatable(L, ECHO);
  return 1;
}

/* t:echo_take(kept, {from, to, ...}, lo, hi, delta) -> whether the kept
 * echo (t:echo_keep on this or another tape) is now ready to replay, its
 * ids mapped as the arguments say (those of t:echo_replay): only where
 * every id it names but did not create maps to a live tensor here
 * (tape.h vr_tape_echo_take) */
static int l_echo_take(lua_State *L) {
  ltape *u = box(L);
  const void *buf = luaL_checkudata(L, 2, ECHO);
  size_t size = lua_rawlen(L, 2);
  int64_t from[VR_MAX_EDGES], to[VR_MAX_EDGES];
  int npairs = read_pairs(L, 3, from, to);
  int64_t lo = (int64_t)luaL_checkinteger(L, 4), hi = (int64_t)luaL_checkinteger(L, 5);
  int64_t delta = (int64_t)luaL_checkinteger(L, 6);
  if (lo < 0 || hi < lo || (hi > lo && (delta > INT64_MAX - hi || delta < -lo)))
    return luaL_argerror(L, 6, "the shifted ids leave 0 .. 2^63");
  bool ok = false;
  vr_status st = vr_tape_echo_take(tape(L, u), buf, size, from, to, npairs, lo, hi, delta, &ok);
  if (st) return fail(L, "echo_take", st);
  lua_pushboolean(L, ok);
  return 1;
}

static int l_ckpt_begin(lua_State *L) {
  vr_status st = vr_tape_ckpt_begin(check(L));
  return st ? fail(L, "ckpt_begin", st) : 0;
}

/* t:ckpt_end(inputs, outputs [, label]) */
static int l_ckpt_end(lua_State *L) {
  ltape *u = box(L);
  int64_t ins[VR_MAX_EDGES], outs[VR_MAX_EDGES];
  int ni = read_ids(L, 2, ins, VR_MAX_EDGES, "inputs");
  int no = read_ids(L, 3, outs, VR_MAX_EDGES, "outputs");
  const char *label = optname(L, 4);
  vr_tape *t = tape(L, u); /* after the lists: their metamethods may have closed it */
  vr_status st = vr_tape_ckpt_end(t, ins, ni, outs, no, intern(L, u, t, label, "ckpt_end"));
  return st ? fail(L, "ckpt_end", st) : 0;
}

/* t:backward([root]) */
static int l_backward(lua_State *L) {
  vr_tape *t = check(L);
  vr_status st = vr_tape_backward(t, (int64_t)luaL_optinteger(L, 2, -1));
  return st ? fail(L, "backward", st) : 0;
}

static int l_zero_grad(lua_State *L) {
  vr_status st = vr_tape_zero_grad(check(L));
  return st ? fail(L, "zero_grad", st) : 0;
}

static int l_phase(lua_State *L) {
  ltape *u = box(L);
  const char *name = luaL_checkstring(L, 2);
  vr_status st = vr_tape_phase(tape(L, u), name);
  return st ? fail(L, "phase", st) : 0;
}

/* t:grad(id) -> gradient tensor id or nil */
static int l_grad(lua_State *L) {
  int64_t g = vr_tape_grad(check(L), (int64_t)luaL_checkinteger(L, 2));
  if (g < 0) return 0;
  lua_pushinteger(L, (lua_Integer)g);
  return 1;
}

/* t:bytes(id) -> bytes, references (views, saved by nodes); nil when dead */
static int l_bytes(lua_State *L) {
  vr_tape *t = check(L);
  int64_t id = (int64_t)luaL_checkinteger(L, 2);
  int64_t b = vr_tape_bytes(t, id);
  if (b < 0) return 0;
  lua_pushinteger(L, (lua_Integer)b);
  lua_pushinteger(L, (lua_Integer)vr_tape_refs(t, id));
  return 2;
}

/* t:live() -> live bytes, allocator-reserved bytes */
static int l_live(lua_State *L) {
  vr_tape_stats s;
  vr_tape_stats_get(check(L), &s);
  lua_pushinteger(L, (lua_Integer)s.live);
  lua_pushinteger(L, (lua_Integer)s.reserved);
  return 2;
}

/* t[k] = v for the table on top of the stack */
static void set_int(lua_State *L, const char *k, int64_t v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, k);
}

/* {category = bytes} (a new table: a raw set is what setfield does) */
static void push_cats(lua_State *L, const int64_t *by) {
  lua_createtable(L, 0, VR_NCAT);
  for (int i = 0; i < VR_NCAT; i++) {
    lua_pushvalue(L, lua_upvalueindex(UP_CAT + i));
    lua_pushinteger(L, (lua_Integer)by[i]);
    lua_rawset(L, -3);
  }
}

/* t:live_by_category() -> {cat = bytes}: stats().live_by_category alone
 * (the composed paths compare it before and after a layer or step) */
static int l_live_by_category(lua_State *L) {
  vr_tape_stats s;
  vr_tape_stats_get(check(L), &s);
  push_cats(L, s.live_by_cat);
  return 1;
}

/* t:stats() -> {live, peak, peak_phase, peak_op, at_peak = {cat = bytes},
 *               live_by_category, phase_peaks = {phase = bytes}} */
static int l_stats(lua_State *L) {
  ltape *u = box(L);
  vr_tape_stats s;
  vr_tape_stats_get(tape(L, u), &s);
  /* Lua allocates from here on, and a collection step may run a finalizer
   * that closes this tape: every read from it goes through check again */
  lua_createtable(L, 0, 7);
  set_int(L, "live", s.live);
  set_int(L, "peak", s.peak);
  set_int(L, "peak_reserved", s.peak_reserved);
  lua_pushstring(L, vr_tape_string(tape(L, u), s.peak_phase));
  lua_setfield(L, -2, "peak_phase");
  if (s.peak_label >= 0) {
    lua_pushstring(L, vr_tape_string(tape(L, u), s.peak_label));
    lua_setfield(L, -2, "peak_op");
  }
  push_cats(L, s.peak_by_cat);
  lua_setfield(L, -2, "at_peak");
  push_cats(L, s.live_by_cat);
  lua_setfield(L, -2, "live_by_category");
  /* every phase reached (the string table holds no more than 2^20) */
  lua_newtable(L);
  for (int i = 0; i < vr_tape_nstrings(tape(L, u)); i++) {
    int64_t peak = vr_tape_phase_peak(tape(L, u), i);
    if (peak <= 0) continue;
    lua_pushinteger(L, (lua_Integer)peak);
    lua_setfield(L, -2, vr_tape_string(tape(L, u), i));
  }
  lua_setfield(L, -2, "phase_peaks");
  return 1;
}

/* t:window(): peaks are measured from here on (vr_tape_window_open) */
static int l_window(lua_State *L) {
  vr_tape_window_open(check(L));
  return 0;
}

/* t:window_peaks() -> {start, rstart, peak, rpeak, at_peak = {cat = bytes}}:
 * live and reserved bytes when the window opened, the highest of each
 * since, and each category when live first reached its highest */
static int l_window_peaks(lua_State *L) {
  vr_tape_window w;
  vr_tape_window_get(check(L), &w);
  lua_createtable(L, 0, 5);
  set_int(L, "start", w.start);
  set_int(L, "rstart", w.rstart);
  set_int(L, "peak", w.peak);
  set_int(L, "rpeak", w.rpeak);
  push_cats(L, w.peak_by_cat);
  lua_setfield(L, -2, "at_peak");
  return 1;
}

/* t:rounding(small_round, small_max, large_round): the caching allocator's
 * block sizes for the reserved counter (0, 0, 0 turns it off) */
static int l_rounding(lua_State *L) {
  vr_tape *t = check(L);
  vr_tape_rounding(t, vb_checkint(L, 2, 0, "small rounding"), vb_checkint(L, 3, 0, "small max"),
                   vb_checkint(L, 4, 0, "large rounding"));
  return 0;
}

/* t:trace(batch, seq): record a compiled-estimate trace from here on */
static int l_trace(lua_State *L) {
  vr_tape *t = check(L);
  vr_status st = vr_tape_trace(t, vb_checkint(L, 2, 1, "batch"), vb_checkint(L, 3, 1, "seq"));
  return st ? fail(L, "trace", st) : 0;
}

/* t:trace_input(slot, times, category [, label]): in a trace, times x input
 * slot's bytes (1..4) allocated here (times < 0: freed), given when the
 * program is evaluated (prog:device) */
static int l_trace_input(lua_State *L) {
  ltape *u = box(L);
  lua_Integer slot = luaL_checkinteger(L, 2);
  lua_Integer times = luaL_checkinteger(L, 3);
  int cat = checkcat(L, u, 4);
  const char *label = optname(L, 5);
  if (slot < 1 || slot > 4) return luaL_argerror(L, 2, "an input slot is 1 to 4");
  vr_tape *t = tape(L, u);
  vr_status st = vr_tape_trace_input(t, (int)slot - 1, (int64_t)times, cat,
                                     intern(L, u, t, label, "trace_input"));
  return st ? fail(L, "trace_input", st) : 0;
}

/* t:take_trace() -> vram.trace (nil when the tape was not tracing) */
static int l_take_trace(lua_State *L) {
  ltape *u = box(L);
  tape(L, u);
  /* the box first (raising later would leak the trace); creating it may
   * run a finalizer, so the tape is looked up again after */
  struct vr_trace **slot = vb_push_trace_box(L);
  *slot = vr_tape_take_trace(tape(L, u));
  return *slot ? 1 : 0;
}

/* t:mark() -> live, reserved bytes; in a trace, a point composed layers
 * measure from */
static int l_mark(lua_State *L) {
  vr_tape *t = check(L);
  int64_t live = 0;
  vr_status st = vr_tape_mark(t, &live);
  if (st) return fail(L, "mark", st);
  vr_tape_stats s;
  vr_tape_stats_get(t, &s);
  lua_pushinteger(L, (lua_Integer)live);
  lua_pushinteger(L, (lua_Integer)s.reserved);
  return 2;
}

/* t:names() -> {interned strings by index}: labels and phases */
static int l_names(lua_State *L) {
  ltape *u = box(L);
  tape(L, u);
  lua_newtable(L);
  for (int i = 0;; i++) {
    const char *s = vr_tape_string(tape(L, u), i); /* (a finalizer may close it) */
    if (!s) break;
    lua_pushstring(L, s);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* t:timeline(on): keep every change of live bytes (reports) */
static int l_timeline(lua_State *L) {
  vr_tape *t = check(L);
  luaL_checktype(L, 2, LUA_TBOOLEAN);
  vr_tape_timeline(t, lua_toboolean(L, 2));
  return 0;
}

/* t:timeline_len() -> number of events kept */
static int l_timeline_len(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)vr_tape_timeline_len(check(L)));
  return 1;
}

/* t:timeline_repeat(first, last, times): events first..last (1-based) kept
 * again `times` times, for identical layers or steps composed (tape.h) */
static int l_timeline_repeat(lua_State *L) {
  int64_t first = vb_checkint(L, 2, 1, "first"), last = vb_checkint(L, 3, 0, "last");
  int64_t times = vb_checkint(L, 4, 0, "times");
  vr_tape *t = check(L);
  vr_status st = vr_tape_timeline_repeat(t, (size_t)(first - 1), (size_t)last, times);
  if (st == VR_EBADID)
    return luaL_error(L, "tape:timeline_repeat: events %I..%I are not all kept (the tape "
                         "kept %I)", (lua_Integer)first, (lua_Integer)last,
                      (lua_Integer)vr_tape_timeline_len(t));
  if (st == VR_EOVERFLOW)
    return luaL_error(L, "tape:timeline_repeat: %I copies: more than 2^26 events in all",
                      (lua_Integer)times);
  if (st != VR_OK) return fail(L, "timeline_repeat", st);
  return 0;
}

/* One sample (or the peak) of a collected timeline, in C until the tables
 * are made. */
typedef struct {
  size_t i; /* 1-based event index */
  int64_t live, by[VR_NCAT];
  unsigned seen; /* categories met so far: the keys of `by` */
  int32_t phase, label;
  bool recompute;
} tl_point;

typedef struct {
  int32_t phase;
  bool recompute;
  size_t first, last;
} tl_span;

/* Pushes the tape's interned string idx, made once per collect: `names`
 * (a stack index) keeps each one met, so 480 samples of a few phases do not
 * hash and intern the same text 480 times. */
static void push_name(lua_State *L, const ltape *u, int names, int32_t idx) {
  if (lua_rawgeti(L, names, (lua_Integer)idx + 1) != LUA_TNIL) return;
  lua_pop(L, 1);
  lua_pushstring(L, vr_tape_string(tape(L, u), idx));
  lua_pushvalue(L, -1);
  lua_rawseti(L, names, (lua_Integer)idx + 1);
}

/* One point (the peak, or a sample unless the collect is lean): i, live,
 * phase, by (bytes per category met so far) and op, and recompute where
 * with_recompute. */
static void push_point(lua_State *L, const ltape *u, int names, const tl_point *p,
                       bool with_recompute) {
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, (lua_Integer)p->i);
  lua_setfield(L, -2, "i");
  lua_pushinteger(L, (lua_Integer)p->live);
  lua_setfield(L, -2, "live");
  push_name(L, u, names, p->phase);
  lua_setfield(L, -2, "phase");
  lua_createtable(L, 0, VR_NCAT);
  for (int c = 0; c < VR_NCAT; c++)
    if (p->seen & (1u << c)) { /* the category's name: the methods' upvalue */
      lua_pushvalue(L, lua_upvalueindex(UP_CAT + c));
      lua_pushinteger(L, (lua_Integer)p->by[c]);
      lua_rawset(L, -3);
    }
  lua_setfield(L, -2, "by");
  if (p->label >= 0) {
    push_name(L, u, names, p->label);
    lua_setfield(L, -2, "op");
  }
  if (with_recompute) {
    lua_pushboolean(L, p->recompute);
    lua_setfield(L, -2, "recompute");
  }
}

/* Event e added to the running sums: live bytes, by category, categories met. */
static inline void tl_add(const vr_tl_event *e, int64_t *live, int64_t *by, unsigned *seen) {
  *live += e->delta;
  by[e->cat] += e->delta;
  *seen |= 1u << e->cat;
}

/* Point p: the timeline after event i (0-based) e, live bytes live, by
 * category by (seen: the categories met). */
static inline void keep_point(tl_point *p, size_t i, int64_t live, const int64_t *by,
                              unsigned seen, const vr_tl_event *e) {
  p->i = i + 1;
  p->live = live;
  memcpy(p->by, by, sizeof p->by);
  p->seen = seen;
  p->phase = e->phase;
  p->label = e->label;
  p->recompute = e->recompute != 0;
}

/* A span of the timeline begins at event i (0-based) e, the one before it
 * ends there; false when the tape counted fewer spans (a bug). */
static inline bool begin_span(tl_span *spans, size_t *s, size_t nspans, const vr_tl_event *e,
                              size_t i) {
  if (*s == nspans) return false;
  if (*s > 0) spans[*s - 1].last = i;
  spans[(*s)++] = (tl_span){e->phase, e->recompute != 0, i + 1, 0};
  return true;
}

/* Stretch b of the k a timeline of n events is cut into holds the events
 * i with i * k / n == b: from ceil(b * n / k) to ceil((b + 1) * n / k)
 * (k <= n: each holds one at least; n < 2^32). Sets *b for event i, the
 * first of its stretch, and returns the event after its stretch. */
static inline size_t stretch_at(size_t i, size_t k, size_t n, size_t *b) {
  *b = (size_t)((uint64_t)i * k / n);
  return (size_t)((((uint64_t)*b + 1) * n + k - 1) / k);
}

/* The categories of a lean collect's samples: none (it draws the peak's). */
static const int64_t NO_CATEGORIES[VR_NCAT];

/* The lean collect's pass: the points, spans and peak the full pass finds,
 * piece by piece. A piece repeated `times` times is the same events each
 * time, live bytes shifted by its net change: its running sums (P) and the
 * positions of its own span starts (S) are made once, and each repetition
 * only compares the sums with its stretch's top (no category sums, no span
 * tests but at its first event). Stretches tile the events in order, so
 * the peak is the point of the first stretch that reaches the highest live
 * bytes; its categories are summed last, whole repetitions at a time (the
 * Qwen3-VL-4B PPO step's 42,337 events cost 0.9M instructions in the full
 * pass). P and S hold the longest piece. Returns false when the spans
 * miscount. */
static bool collect_lean(const vr_tl_event *ev, const vr_tl_piece *pc, size_t npc, size_t n,
                         size_t k, int64_t *P, size_t *S, tl_point *pts, tl_span *spans,
                         size_t nspans, tl_point *peak) {
  size_t i = 0, b = 0, end = 0, s = 0;
  int64_t live = 0, top = 0;
  const vr_tl_event *prev = NULL;
  for (size_t q = 0; q < npc; q++) {
    const vr_tl_event *src = ev + pc[q].src;
    const size_t len = pc[q].len;
    int64_t net = 0;
    size_t ns = 0;
    for (size_t j = 0; j < len; j++) {
      net += src[j].delta;
      P[j] = net;
      if (j > 0 && src[j].starts) S[ns++] = j;
    }
    for (int64_t c = 0; len > 0 && c < pc[q].times; c++) {
      const int64_t base = live;
      const size_t i0 = i;
      if ((!prev || vr_tl_new_span(prev, src)) && !begin_span(spans, &s, nspans, src, i0))
        return false;
      for (size_t x = 0; x < ns; x++)
        if (!begin_span(spans, &s, nspans, src + S[x], i0 + S[x])) return false;
      for (size_t j = 0; j < len;) {
        if (i == end) { /* stretch b begins (as in the full pass) */
          end = stretch_at(i, k, n, &b);
          top = base + P[j];
          keep_point(&pts[b], i, top, NO_CATEGORIES, 0, src + j);
          j++, i++;
          continue;
        }
        size_t run = len - j < end - i ? len - j : end - i, best = len;
        int64_t high = top - base;
        for (size_t x = j; x < j + run; x++)
          if (P[x] > high) high = P[best = x];
        if (best < len) {
          top = base + high;
          keep_point(&pts[b], i + (best - j), top, NO_CATEGORIES, 0, src + best);
        }
        i += run, j += run;
      }
      live = base + net;
      prev = src + len - 1;
    }
  }
  if (i != n || s != nspans) return false;
  spans[s - 1].last = n;
  const tl_point *high = NULL;
  for (size_t x = 0; x < k; x++)
    if (pts[x].live > (high ? high->live : 0)) high = &pts[x];
  if (!high) return true; /* no event rose above zero */
  /* the peak's bytes by category: events 0 .. at, whole repetitions summed once */
  const size_t at = high->i - 1;
  int64_t by[VR_NCAT] = {0}, sum = 0;
  unsigned seen = 0;
  for (size_t q = 0, first = 0; q < npc; q++) {
    const vr_tl_event *src = ev + pc[q].src;
    const size_t len = pc[q].len;
    if (len == 0) continue;
    uint64_t whole = (uint64_t)(at - first) / len; /* repetitions ending before the peak */
    if (whole > (uint64_t)pc[q].times) whole = (uint64_t)pc[q].times;
    if (whole > 0) {
      int64_t net[VR_NCAT] = {0};
      unsigned met = 0;
      for (size_t j = 0; j < len; j++) tl_add(src + j, &sum, net, &met);
      for (int c = 0; c < VR_NCAT; c++) by[c] += (int64_t)whole * net[c];
      seen |= met;
    }
    if (whole < (uint64_t)pc[q].times) { /* the peak's repetition */
      for (size_t j = 0; j <= at - first - whole * len; j++) tl_add(src + j, &sum, by, &seen);
      break;
    }
    first += len * (size_t)pc[q].times;
  }
  *peak = *high;
  memcpy(peak->by, by, sizeof peak->by);
  peak->seen = seen;
  return true;
}

/* t:timeline_collect(k [, lean]) -> {events, at, live, phase, runs, samples,
 * spans, peak} | nil: the timeline reduced to k samples, each the first
 * event that reaches the highest live bytes of its stretch
 * (stdlib/timeline.lua documents the table). lean: without samples (their
 * categories and ops), at, live, phase and runs being what a sparkline
 * draws; the peak stays whole (collect_lean's pass, piece by piece; the
 * full pass goes event by event). Every buffer is allocated first; the pass
 * then runs in C without calling Lua, and the tables are made last. */
#define TL_MAX_SAMPLES (INT64_C(1) << 20)

static int l_timeline_collect(lua_State *L) {
  ltape *u = box(L);
  int64_t want = vb_checkint(L, 2, 1, "samples");
  /* a table per sample: a million is past any drawing, and asking for
   * more is a usage error, not an out-of-memory one on a long timeline */
  luaL_argcheck(L, want <= TL_MAX_SAMPLES, 2, "at most 1048576 samples");
  bool lean = lua_toboolean(L, 3);
  size_t n = vr_tape_timeline_len(tape(L, u));
  if (n == 0) {
    lua_pushnil(L);
    return 1;
  }
  size_t k = (uint64_t)want < (uint64_t)n ? (size_t)want : n;
  size_t nspans = vr_tape_timeline_spans(tape(L, u));
  if (n > UINT32_MAX || nspans == 0 || nspans > n)
    return luaL_error(L, "tape:timeline_collect: %I events in %I spans: not a timeline",
                      (lua_Integer)n, (lua_Integer)nspans);
  tl_point *pts = (tl_point *)lua_newuserdatauv(L, (k + 1) * sizeof *pts, 0);
  tl_span *spans = (tl_span *)lua_newuserdatauv(L, nspans * sizeof *spans, 0);
  const vr_tl_piece *pc = NULL;
  size_t npc = 0, longest = 0;
  const vr_tl_event *ev = vr_tape_timeline_pieces(tape(L, u), &pc, &npc);
  for (size_t q = 0; q < npc; q++)
    if (pc[q].len > longest) longest = pc[q].len;
  /* the lean pass's running sums and span starts, for the longest piece */
  int64_t *sums = lean ? (int64_t *)lua_newuserdatauv(L, longest * (sizeof *sums + sizeof(size_t)),
                                                      0) : NULL;
  /* (an allocation may run a finalizer, and it the tape's methods) */
  if (vr_tape_timeline_len(tape(L, u)) != n || vr_tape_timeline_spans(tape(L, u)) != nspans ||
      vr_tape_timeline_pieces(tape(L, u), &pc, &npc) != ev)
    return luaL_error(L, "tape:timeline_collect: the timeline changed while it was collected");
  tl_point *peak = &pts[k];
  *peak = (tl_point){0, 0, {0}, 0, -1, -1, false};
  if (lean) {
    if (!collect_lean(ev, pc, npc, n, k, sums, (size_t *)(sums + longest), pts, spans, nspans,
                      peak))
      goto miscounted;
    goto tables;
  }
  /* the full pass, one over the events, in C (no Lua runs until the
   * tables are made): the running sums, the spans, the peak, and each
   * stretch's first highest event, its point written out with its
   * categories at every new high of the stretch (stretch_at). */
  size_t i = 0, b = 0, end = 0, s = 0;
  const vr_tl_event *prev = NULL;
  int64_t live = 0, top = 0, by[VR_NCAT] = {0};
  unsigned seen = 0;
  for (size_t q = 0; q < npc; q++) {
    const vr_tl_event *src = ev + pc[q].src;
    const size_t len = pc[q].len;
    for (int64_t c = 0; c < pc[q].times; c++)
      for (size_t j = 0; j < len;) {
        /* a repetition's first event (its span found against the event
         * before it) or a stretch's first: every check */
        const vr_tl_event *e = src + j;
        tl_add(e, &live, by, &seen);
        if ((!prev || vr_tl_new_span(prev, e)) && !begin_span(spans, &s, nspans, e, i))
          goto miscounted;
        if (live > peak->live) keep_point(peak, i, live, by, seen, e);
        if (i == end) { /* stretch b begins */
          end = stretch_at(i, k, n, &b);
          top = live;
          keep_point(&pts[b], i, live, by, seen, e);
        } else if (live > top) {
          top = live;
          keep_point(&pts[b], i, live, by, seen, e);
        }
        prev = e;
        j++, i++;
        /* then, up to the next stretch or the piece's end, the events in a
         * row: each follows the one kept before it (its `starts` mark), and
         * the peak, never below the stretch's top, can rise only with it */
        /* (end >= i: a stretch's first event moved end past itself) */
        size_t run = len - j < end - i ? len - j : end - i;
        for (const vr_tl_event *f = src + j, *stop = f + run; f < stop; f++, i++) {
          tl_add(f, &live, by, &seen);
          if (f->starts && !begin_span(spans, &s, nspans, f, i)) goto miscounted;
          if (live > top) {
            top = live;
            keep_point(&pts[b], i, live, by, seen, f);
            if (live > peak->live) keep_point(peak, i, live, by, seen, f);
          }
        }
        if (run) prev = src + j + run - 1;
        j += run;
      }
  }
  if (i != n || s != nspans) goto miscounted;
  spans[s - 1].last = n;
tables:
  lua_newtable(L); /* the names pushed so far (push_name) */
  int names = lua_gettop(L);
  lua_createtable(L, 0, 8);
  lua_pushinteger(L, (lua_Integer)n);
  lua_setfield(L, -2, "events");
  /* each sample's event, live bytes and phase as three lists (what a
   * sparkline reads: a table per sample cost ~1,500 instructions) */
  for (int f = 0; f < 3; f++) {
    lua_createtable(L, (int)k, 0);
    for (size_t j = 0; j < k; j++) {
      if (f == 0) lua_pushinteger(L, (lua_Integer)pts[j].i);
      else if (f == 1) lua_pushinteger(L, (lua_Integer)pts[j].live);
      else push_name(L, u, names, pts[j].phase);
      lua_rawseti(L, -2, (lua_Integer)j + 1);
    }
    lua_setfield(L, -2, f == 0 ? "at" : f == 1 ? "live" : "phase");
  }
  /* the first sample of each run of samples of one phase (a sparkline
   * gives each run a column: in Lua, the runs of 480 phases cost ~0.2M
   * instructions) */
  lua_newtable(L);
  for (size_t j = 0, r = 0; j < k; j++)
    if (j == 0 || pts[j].phase != pts[j - 1].phase) {
      lua_pushinteger(L, (lua_Integer)j + 1);
      lua_rawseti(L, -2, (lua_Integer)++r);
    }
  lua_setfield(L, -2, "runs");
  if (!lean) {
    lua_createtable(L, (int)k, 0);
    for (size_t j = 0; j < k; j++) {
      push_point(L, u, names, &pts[j], true);
      lua_rawseti(L, -2, (lua_Integer)j + 1);
    }
    lua_setfield(L, -2, "samples");
  }
  lua_createtable(L, (int)nspans, 0);
  for (size_t j = 0; j < nspans; j++) {
    lua_createtable(L, 0, 4);
    push_name(L, u, names, spans[j].phase);
    lua_setfield(L, -2, "phase");
    lua_pushinteger(L, (lua_Integer)spans[j].first);
    lua_setfield(L, -2, "first");
    lua_pushinteger(L, (lua_Integer)spans[j].last);
    lua_setfield(L, -2, "last");
    lua_pushboolean(L, spans[j].recompute);
    lua_setfield(L, -2, "recompute");
    lua_rawseti(L, -2, (lua_Integer)j + 1);
  }
  lua_setfield(L, -2, "spans");
  if (peak->i > 0) {
    push_point(L, u, names, peak, false);
  } else { /* no event rose above zero */
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, 0);
    lua_setfield(L, -2, "live");
    lua_pushinteger(L, 0);
    lua_setfield(L, -2, "i");
  }
  lua_setfield(L, -2, "peak");
  return 1;
miscounted: /* the tape's span count and its pieces disagree: a bug */
  return luaL_error(L, "tape:timeline_collect: the tape counted %I spans, its events hold "
                       "others", (lua_Integer)nspans);
}

/* t:timeline_event(i) -> delta, category, phase, recompute, label|nil
 * (i from 1 to timeline_len) */
static int l_timeline_event(lua_State *L) {
  ltape *u = box(L);
  lua_Integer i = luaL_checkinteger(L, 2);
  vr_tape *t = tape(L, u);
  const vr_tl_event *at = i >= 1 ? vr_tape_timeline_at(t, (size_t)(i - 1)) : NULL;
  if (!at)
    return luaL_argerror(L, 2, lua_pushfstring(L, "no timeline event %I (the tape kept %I)", i,
                                               (lua_Integer)vr_tape_timeline_len(t)));
  /* a copy: pushing may run a finalizer that closes the tape */
  vr_tl_event e = *at;
  lua_pushinteger(L, (lua_Integer)e.delta);
  lua_pushstring(L, vr_cat_name(e.cat));
  lua_pushstring(L, vr_tape_string(tape(L, u), e.phase));
  lua_pushboolean(L, e.recompute);
  if (e.label >= 0)
    lua_pushstring(L, vr_tape_string(tape(L, u), e.label));
  else
    lua_pushnil(L);
  return 5;
}

static int l_reset(lua_State *L) {
  vr_tape_reset(check(L));
  return 0;
}

/* t:assign(src): t becomes a copy of src (vr_tape_assign), which must be
 * at rest. Labels take src's indexes, and t src's cache of them. */
static int l_assign(lua_State *L) {
  ltape *u = box(L);
  ltape *from = (ltape *)luaL_checkudata(L, 2, TAPE);
  vr_tape *t = tape(L, u), *src = tape(L, from);
  vr_status st = vr_tape_assign(t, src);
  if (st) return fail(L, "assign", st);
  if (t != src) memcpy(u->seen, from->seen, sizeof u->seen);
  return 0;
}

/* t:recycle(): t is done with; its memory goes to the next vram.tape()
 * (what that returns is a fresh tape). t is closed from now on, as after
 * its __close. */
static int l_recycle(lua_State *L) {
  ltape *u = box(L);
  spares *sp = get_spares(L, true);
  vr_tape *t = tape(L, u); /* after the spares are made: a finalizer may close it */
  u->t = NULL;
  if (sp->n >= SPARES) {
    vr_tape_free(t);
    return 0;
  }
  vr_tape_recycle(t);
  sp->t[sp->n] = t;
  memcpy(sp->seen[sp->n], u->seen, sizeof u->seen);
  sp->n++;
  return 0;
}

static int l_gc(lua_State *L) {
  ltape *u = (ltape *)luaL_checkudata(L, 1, TAPE);
  vr_tape_free(u->t);
  u->t = NULL;
  return 0;
}

static int l_tostring(lua_State *L) {
  ltape *u = (ltape *)luaL_checkudata(L, 1, TAPE);
  if (!u->t) {
    lua_pushliteral(L, "vram.tape (closed)");
    return 1;
  }
  vr_tape_stats s;
  vr_tape_stats_get(u->t, &s);
  lua_pushstring(L, vr_tape_string(u->t, s.peak_phase)); /* copied before any collection */
  lua_pushfstring(L, "vram.tape (live %I B, peak %I B in %s)", (lua_Integer)s.live,
                  (lua_Integer)s.peak, lua_tostring(L, -1));
  return 1;
}

static const luaL_Reg methods[] = {
    {"alloc", l_alloc},       {"param", l_param},         {"drop", l_drop},       {"retain", l_retain},     {"replay_drop", l_replay_drop},
    {"temp", l_temp},         {"node", l_node},           {"ckpt_begin", l_ckpt_begin},
    {"ckpt_end", l_ckpt_end}, {"backward", l_backward},   {"zero_grad", l_zero_grad},
    {"phase", l_phase},       {"grad", l_grad},           {"bytes", l_bytes},
    {"live", l_live},         {"stats", l_stats},         {"reset", l_reset},
    {"rounding", l_rounding}, {"bulk", l_bulk},           {"bulk_end", l_bulk_end},
    {"trace", l_trace},       {"take_trace", l_take_trace}, {"trace_input", l_trace_input}, {"mark", l_mark},
    {"names", l_names},       {"timeline", l_timeline},   {"timeline_len", l_timeline_len},
    {"timeline_event", l_timeline_event}, {"timeline_repeat", l_timeline_repeat},
    {"timeline_collect", l_timeline_collect}, {"capture", l_capture},
    {"capture_end", l_capture_end}, {"capture_repeat", l_capture_repeat},
    {"node_of", l_node_of}, {"recycle", l_recycle}, {"assign", l_assign}, {"drop_of", l_drop_of}, {"echo", l_echo},
    {"echo_end", l_echo_end}, {"echo_replay", l_echo_replay}, {"echo_keep", l_echo_keep},
    {"echo_take", l_echo_take},
    {"live_by_category", l_live_by_category}, {"window", l_window},
    {"window_peaks", l_window_peaks},
    {NULL, NULL}};

static const luaL_Reg meta[] = {{"__gc", l_gc},
                                {"__close", l_gc},
                                {"__tostring", l_tostring},
                                {"__index", NULL},
                                {NULL, NULL}};

void vb_open_tape(lua_State *L) {
  luaL_newmetatable(L, TAPE);
  luaL_setfuncs(L, meta, 0);
  luaL_newlibtable(L, methods);
  luaL_checkstack(L, UP_N, "vram.tape");
  lua_pushvalue(L, -2); /* the upvalues: UP_META .. UP_N */
  lua_pushliteral(L, "id");
  lua_pushliteral(L, "rg");
  lua_pushliteral(L, "b");
  lua_pushliteral(L, "alias");
  for (int i = 0; i < VR_NCAT; i++) lua_pushstring(L, vr_cat_name(i));
  luaL_setfuncs(L, methods, UP_N);
  lua_setfield(L, -2, "__index");
  lua_pushliteral(L, "locked");
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);
  luaL_newmetatable(L, ECHO); /* a kept echo: opaque, its metatable locked */
  lua_pushliteral(L, "locked");
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);
  lua_pushcfunction(L, l_new);
  lua_setfield(L, -2, "tape");
}
