/* The `vram` module: dtypes, exact bytes, units, version; submodules are
 * attached from their own files. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "../core/checked.h"
#include "../core/tape.h"
#include "../core/terms.h"
#include "bind.h"

int64_t vb_checkint(lua_State *L, int arg, int64_t min, const char *what) {
  lua_Integer v = luaL_checkinteger(L, arg);
  if (v < min) {
    const char *msg = lua_pushfstring(L, "%s must be >= %I, got %I", what, (lua_Integer)min, v);
    luaL_argerror(L, arg, msg);
  }
  return (int64_t)v;
}

const vr_dtype *vb_checkdtype(lua_State *L, int arg) {
  const char *name = luaL_checkstring(L, arg);
  const vr_dtype *dt = vr_dtype_find(name);
  if (!dt) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, "unknown dtype '");
    luaL_addstring(&b, name);
    luaL_addstring(&b, "' (known:");
    for (int i = 0; vr_dtype_at(i); i++) {
      luaL_addchar(&b, ' ');
      luaL_addstring(&b, vr_dtype_at(i)->name);
    }
    luaL_addchar(&b, ')');
    luaL_pushresult(&b);
    luaL_argerror(L, arg, lua_tostring(L, -1));
  }
  return dt;
}

int vb_overflow(lua_State *L, const char *fn, const char *what) {
  return luaL_error(L, "%s: %s overflows int64", fn, what);
}

/* vram.bytes(dtype, d1, d2, ...) -> exact bytes of a d1*d2*... tensor */
static int l_bytes(lua_State *L) {
  const vr_dtype *dt = vb_checkdtype(L, 1);
  int n = lua_gettop(L);
  int64_t elems = 1, res = 0;
  for (int i = 2; i <= n; i++) {
    int64_t d = vb_checkint(L, i, 0, "dimension");
    if (!vr_mul(elems, d, &elems))
      return luaL_error(L, "vram.bytes: element count overflows int64 at dimension %d (%I)",
                        i - 1, (lua_Integer)d);
  }
  if (!vr_dtype_bytes(dt, elems, &res))
    return luaL_error(L, "vram.bytes: %I elements of %s overflow int64", (lua_Integer)elems,
                      dt->name);
  lua_pushinteger(L, (lua_Integer)res);
  return 1;
}

/* vram.dtype(name) -> canonical name, bits, block (nil if unknown) */
static int l_dtype(lua_State *L) {
  const vr_dtype *dt = vr_dtype_find(luaL_checkstring(L, 1));
  if (!dt) return 0;
  lua_pushstring(L, dt->name);
  lua_pushinteger(L, dt->bits);
  lua_pushinteger(L, dt->block);
  return 3;
}

/* vram.dtypes() -> { {name=, bits=, block=, note=}, ... }, {alias = name} */
static int l_dtypes(lua_State *L) {
  lua_newtable(L);
  for (int i = 0; vr_dtype_at(i); i++) {
    const vr_dtype *dt = vr_dtype_at(i);
    lua_createtable(L, 0, 4);
    lua_pushstring(L, dt->name);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, dt->bits);
    lua_setfield(L, -2, "bits");
    lua_pushinteger(L, dt->block);
    lua_setfield(L, -2, "block");
    lua_pushstring(L, dt->note);
    lua_setfield(L, -2, "note");
    lua_rawseti(L, -2, i + 1);
  }
  lua_newtable(L);
  const char *canon = NULL, *alias = NULL;
  for (int i = 0; (alias = vr_alias_at(i, &canon)) != NULL; i++) {
    lua_pushstring(L, canon);
    lua_setfield(L, -2, alias);
  }
  return 2;
}

/* Units, their one home: GiB = 2^30, GB = 10^9, MiB = 2^20, MB = 10^6,
 * KiB = 2^10 bytes. Lua sees them as vram.units (exact integers); rounding
 * is for display only, the bytes stay exact integers. */
typedef struct {
  const char *name;
  int64_t bytes;
  int shift; /* bytes = 2^shift for a binary unit; -1 for a decimal one */
} unit;

static const unit UNITS[] = {{"GiB", INT64_C(1) << 30, 30}, {"GB", 1000000000, -1},
                             {"MiB", INT64_C(1) << 20, 20}, {"MB", 1000000, -1},
                             {"KiB", 1024, 10},             {"B", 1, 0}};

static const unit *unit_arg(lua_State *L, int arg, const char *def) {
  const char *u = luaL_optstring(L, arg, def);
  for (size_t i = 0; i < sizeof UNITS / sizeof UNITS[0]; i++)
    if (strcmp(UNITS[i].name, u) == 0) return &UNITS[i];
  luaL_argerror(L, arg, "unit must be GiB, GB, MiB, MB, KiB or B");
  return NULL; /* (not reached) */
}

/* vram.round_up(bytes, block) -> bytes as a multiple of block (block 0:
 * unchanged): the tape's own block rounding, checked, for Lua callers that
 * size tensors as the allocator hands them out. */
static int l_round_up(lua_State *L) {
  int64_t b = vb_checkint(L, 1, 0, "bytes"), to = vb_checkint(L, 2, 0, "block"), r = 0;
  if (!vr_round_up(b, to, &r))
    return luaL_error(L, "vram.round_up: %I bytes rounded up to a multiple of %I overflow int64",
                      (lua_Integer)b, (lua_Integer)to);
  lua_pushinteger(L, (lua_Integer)r);
  return 1;
}

/* vram.categories() -> {"weights", "master_weights", ...}: the tape's
 * categories in report order (a fresh list each call) */
static int l_categories(lua_State *L) {
  lua_createtable(L, VR_NCAT, 0);
  for (int i = 0; i < VR_NCAT; i++) {
    lua_pushstring(L, vr_cat_name(i));
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* bytes in a unit of 2^shift bytes (shift <= 30) to dec (0..9) decimals,
 * exactly as printf's %.*f prints the double bytes / 2^shift: that double
 * is the exact quotient while |bytes| < 2^53, and printf rounds its exact
 * value half to even. Written without printf, which was most of a 64 x 64
 * sweep's formatting. False (nothing written) outside those bounds. */
static bool fixed_binary(char *buf, int64_t b, int shift, int dec) {
  static const uint64_t P10[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000,
                                 100000000, 1000000000};
  const int64_t LIM = INT64_C(1) << 53;
  if (b <= -LIM || b >= LIM || shift < 0 || shift > 30 || dec < 0 || dec > 9) return false;
  uint64_t m = b < 0 ? (uint64_t)-b : (uint64_t)b, mask = (UINT64_C(1) << shift) - 1;
  uint64_t whole = m >> shift, scaled = (m & mask) * P10[dec]; /* < 2^30 x 10^9 < 2^60 */
  uint64_t q = scaled >> shift, r = scaled & mask, half = (mask + 1) >> 1;
  bool odd = dec > 0 ? (q & 1) != 0 : (whole & 1) != 0;
  if (shift > 0 && (r > half || (r == half && odd))) q++;
  if (q == P10[dec]) whole++, q = 0;
  char digits[32], *end = digits + sizeof digits, *p = end; /* written backward */
  for (int i = 0; i < dec; i++, q /= 10) *--p = (char)('0' + q % 10);
  if (dec > 0) *--p = '.';
  p = vb_digits(p, whole);
  if (b < 0) *--p = '-';
  memcpy(buf, p, (size_t)(end - p));
  buf[end - p] = '\0';
  return true;
}

/* The number text of bytes in unit u to dec decimals, as %.*f prints it. */
static void fixed(char *buf, size_t n, int64_t b, const unit *u, int dec) {
  if (u->shift < 0 || !fixed_binary(buf, b, u->shift, dec))
    snprintf(buf, n, "%.*f", dec, (double)b / (double)u->bytes);
}

/* vram.fixed(bytes [, unit [, decimals]]) -> "12.3456": the bytes in the
 * unit (default GiB) to that many decimals (default 2), as
 * string.format("%.Nf", vram.to(bytes, unit)) writes them */
static int l_fixed(lua_State *L) {
  lua_Integer b = luaL_checkinteger(L, 1);
  const unit *u = unit_arg(L, 2, "GiB");
  lua_Integer dec = luaL_optinteger(L, 3, 2);
  char buf[64]; /* %.9f of 2^63 bytes in B: 30 characters */
  luaL_argcheck(L, dec >= 0 && dec <= 9, 3, "decimals must be 0..9");
  fixed(buf, sizeof buf, (int64_t)b, u, (int)dec);
  lua_pushstring(L, buf);
  return 1;
}

/* vram.clone(t) -> a new table with t's keys and values (a shallow copy),
 * sized for them at once: a copy key by key grows its table by doublings,
 * each rehashing what it holds (fit --knobs copies its run per lever
 * combination, a composed layer's tensors per replay). t must have no
 * metatable: pairs() would honour a __pairs this does not. */
#define CLONE_STACKED 64
static int l_clone(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_argcheck(L, !lua_getmetatable(L, 1), 1, "a table without a metatable");
  lua_settop(L, 1);
  lua_Unsigned narr = lua_rawlen(L, 1);
  /* One lua_next pass (each step looks the previous key up again, half a
   * copy's cost) with the pairs left on the stack, up to CLONE_STACKED of
   * them: a table that small is then made at its size and filled from
   * the stack. A larger one is counted in a second pass instead. */
  int n = 0;
  bool stacked = true;
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    if (n < CLONE_STACKED && lua_checkstack(L, 3)) {
      lua_pushvalue(L, -2); /* the key again, for lua_next: the pair stays below */
      n++;
      continue;
    }
    lua_settop(L, 1); /* too many to hold: count them all */
    stacked = false;
    n = 0;
    lua_pushnil(L);
    while (lua_next(L, 1)) {
      lua_pop(L, 1);
      if (n < INT_MAX) n++;
    }
    break;
  }
  int nrec = narr < (lua_Unsigned)n ? n - (int)narr : 0;
  luaL_checkstack(L, 4, "vram.clone");
  lua_createtable(L, narr < INT_MAX ? (int)narr : INT_MAX, nrec);
  if (stacked) {
    /* pairs at 2, 3 (key, value), ...; each set from its own slots */
    for (int i = 0; i < n; i++) {
      lua_pushvalue(L, 2 + 2 * i);
      lua_pushvalue(L, 3 + 2 * i);
      lua_rawset(L, -3);
    }
    return 1;
  }
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -4);
  }
  return 1;
}

/* vram.to(bytes, unit) -> float */
static int l_to(lua_State *L) {
  const unit *u = unit_arg(L, 2, "GiB");
  lua_pushnumber(L, (double)luaL_checkinteger(L, 1) / (double)u->bytes);
  return 1;
}

/* vram.fmt(bytes [, unit [, decimals]]) -> "12.34 GiB" */
static int l_fmt(lua_State *L) {
  lua_Integer b = luaL_checkinteger(L, 1);
  const unit *u = unit_arg(L, 2, "GiB");
  lua_Integer dec = luaL_optinteger(L, 3, 2);
  char buf[64];
  luaL_argcheck(L, dec >= 0 && dec <= 9, 3, "decimals must be 0..9");
  if (u->bytes == 1) {
    snprintf(buf, sizeof buf, "%lld B", (long long)b);
  } else {
    fixed(buf, sizeof buf - 8, (int64_t)b, u, (int)dec); /* room for the unit */
    size_t len = strlen(buf);
    snprintf(buf + len, sizeof buf - len, " %s", u->name);
  }
  lua_pushstring(L, buf);
  return 1;
}

/* vram.require_version("X.Y") errors when this runtime is older. */
static int l_require_version(lua_State *L) {
  const char *want = luaL_checkstring(L, 1);
  int major = 0, minor = 0;
  if (sscanf(want, "%d.%d", &major, &minor) < 1)
    return luaL_argerror(L, 1, "expected a version like \"0.1\"");
  if (major > VRAM_VERSION_MAJOR || (major == VRAM_VERSION_MAJOR && minor > VRAM_VERSION_MINOR))
    return luaL_error(L, "this script needs vramlua %s or newer; this is %s", want,
                      VRAM_VERSION);
  lua_pushboolean(L, 1);
  return 1;
}

static const luaL_Reg vram_funcs[] = {{"bytes", l_bytes},
                                      {"dtype", l_dtype},
                                      {"dtypes", l_dtypes},
                                      {"to", l_to},
                                      {"fmt", l_fmt},
                                      {"fixed", l_fixed},
                                      {"clone", l_clone},
                                      {"require_version", l_require_version},
                                      {"round_up", l_round_up},
                                      {"categories", l_categories},
                                      {NULL, NULL}};

int luaopen_vram(lua_State *L) {
  luaL_newlib(L, vram_funcs);
  lua_pushliteral(L, VRAM_VERSION);
  lua_setfield(L, -2, "version");
  lua_createtable(L, 0, (int)(sizeof UNITS / sizeof UNITS[0]));
  for (size_t i = 0; i < sizeof UNITS / sizeof UNITS[0]; i++) {
    lua_pushinteger(L, (lua_Integer)UNITS[i].bytes);
    lua_setfield(L, -2, UNITS[i].name);
  }
  lua_setfield(L, -2, "units");
  vb_open_terms(L);
  vb_open_canon(L);
  vb_open_tape(L);
  vb_open_trace(L);
  vb_open_write(L);
  vb_open_json(L);
  lua_setfield(L, -2, "json");
  vb_open_yaml(L);
  lua_setfield(L, -2, "yaml");
  vb_open_text(L);
  lua_setfield(L, -2, "text");
  return 1;
}
