/* stdlib/run.lua's run.key in C: vram.run_key (the fields that differ,
 * compared as run.lua's same() compares them) and vram.canonical (a plain
 * table written out as run.key writes it). fit --knobs makes a key per
 * lever combination and per simulation (~330 of them); in Lua those cost
 * 18M of its 148M instructions (issue 18). run.lua keeps the Lua key, the
 * reference, for what these refuse (nil): anything whose answer could
 * depend on a metamethod or on tostring(). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "bind.h"

#define CANON_DEPTH 64    /* nested tables written (deeper: nil) */
#define CANON_TABLES 256  /* tables in one write (more: nil) */

/* One key of a table with its value. Both are copied to the stack first
 * and every string is read there: a pointer lua_tolstring gives stays
 * valid while the stack holds its string, whatever a finalizer run by an
 * allocation meanwhile (a trusted script's __gc) does to the table. */
typedef struct {
  const char *ks, *vs;
  size_t klen, vlen;
  lua_Integer ki, vi;
  lua_Number vf;
  int vt;   /* LUA_TSTRING, LUA_TNUMBER, LUA_TBOOLEAN or LUA_TTABLE */
  int vidx; /* the value's stack slot */
  bool kstr, vint;
} entry;

/* The text is written into `small` until it outgrows it, then into a
 * userdata in stack slot `slot` (replaced as it grows): a key allocates
 * nothing of its own (each allocation pays the collector's debt). */
typedef struct {
  lua_State *L;
  int slot;
  char *p;
  size_t n, cap;
  const void *seen[CANON_TABLES]; /* tables met, in order: back-reference i + 1 */
  int nseen;
  char small[1024];
} writer;

/* Room for n more bytes: the buffer moved to a larger userdata. */
static void __attribute__((noinline)) grow(writer *w, size_t n) {
  size_t cap = w->cap;
  while (n > cap - w->n) {
    if (cap > SIZE_MAX / 2) luaL_error(w->L, "vram.canonical: the text is too long");
    cap *= 2;
  }
  char *p = (char *)lua_newuserdatauv(w->L, cap, 0);
  memcpy(p, w->p, w->n);
  lua_replace(w->L, w->slot);
  w->p = p;
  w->cap = cap;
}

/* (a key is written a few bytes at a time: the copy inline) */
static inline void put(writer *w, const char *s, size_t n) {
  if (n > w->cap - w->n) grow(w, n);
  char *d = w->p + w->n;
  if (n <= 16)
    for (size_t i = 0; i < n; i++) d[i] = s[i];
  else
    memcpy(d, s, n);
  w->n += n;
}

static void put_str(writer *w, const char *s) { put(w, s, strlen(s)); }

/* Decimal digits as Lua writes an integer (LUA_INTEGER_FMT, "%lld"). */
static void put_uint(writer *w, unsigned long long u, bool minus) {
  char buf[24], *end = buf + sizeof buf, *p = vb_digits(end, u);
  if (minus) *--p = '-';
  put(w, p, (size_t)(end - p));
}

static void put_int(writer *w, lua_Integer i) {
  /* the magnitude in unsigned arithmetic: -LUA_MININTEGER does not exist */
  unsigned long long u = i < 0 ? 0ull - (unsigned long long)i : (unsigned long long)i;
  put_uint(w, u, i < 0);
}

/* tostring's text of a float, lua_tolstring's own, remembered by the
 * float's bits for the few floats a search's keys repeat (a weight decay,
 * an alpha): Lua writes one with snprintf, ~3,000 instructions. The text
 * depends on the float alone (the sandbox cannot change the locale). */
#define FLOAT_TEXTS 16
static struct {
  uint64_t bits;
  uint8_t len; /* 0: empty slot */
  char text[32]; /* %.14g of a double: 22 at most */
} float_texts[FLOAT_TEXTS];

static void put_float(writer *w, lua_Number f) {
  uint64_t bits = 0;
  memcpy(&bits, &f, sizeof f < sizeof bits ? sizeof f : sizeof bits);
  unsigned slot = (unsigned)((bits * 0x9e3779b97f4a7c15u) >> 60) % FLOAT_TEXTS;
  if (float_texts[slot].len > 0 && float_texts[slot].bits == bits) {
    put(w, float_texts[slot].text, float_texts[slot].len);
    return;
  }
  lua_pushnumber(w->L, f);
  size_t len = 0;
  const char *s = lua_tolstring(w->L, -1, &len);
  put(w, s, len);
  if (len > 0 && len <= sizeof float_texts[slot].text) {
    float_texts[slot].bits = bits;
    float_texts[slot].len = (uint8_t)len;
    memcpy(float_texts[slot].text, s, len);
  }
  lua_pop(w->L, 1);
}

/* "5:batch" as run.key writes a string: its length in bytes, then itself. */
static void put_counted(writer *w, const char *s, size_t len) {
  put_uint(w, len, false);
  put(w, ":", 1);
  put(w, s, len);
}

/* Lua's order of the keys (table.sort with `<` within one type, numbers
 * before strings across them: run.lua's mixed_less by type name); keys
 * with a zero byte were refused. */
static int key_order(const void *pa, const void *pb) {
  const entry *a = (const entry *)pa, *b = (const entry *)pb;
  if (a->kstr != b->kstr) return a->kstr ? 1 : -1;
  if (!a->kstr) return a->ki < b->ki ? -1 : a->ki > b->ki;
  return vb_bytes_order(a->ks, a->klen, b->ks, b->klen);
}

/* Whether the value at idx is the string "sim" (the key whose tables are
 * compared and written by identity). */
static bool is_sim(lua_State *L, int idx) {
  size_t len = 0;
  const char *s = lua_type(L, idx) == LUA_TSTRING ? lua_tolstring(L, idx, &len) : NULL;
  return s && len == 3 && memcmp(s, "sim", 3) == 0;
}

/* The key at stack slot k and its value at k + 1, into x; false for a key
 * or value the Lua writer would write through tostring(). */
static bool read_one(lua_State *L, int k, entry *x) {
  memset(x, 0, sizeof *x);
  int kt = lua_type(L, k), vt = lua_type(L, k + 1);
  if (kt == LUA_TSTRING) {
    x->kstr = true;
    x->ks = lua_tolstring(L, k, &x->klen);
    if (memchr(x->ks, '\0', x->klen)) return false;
  } else if (kt == LUA_TNUMBER && lua_isinteger(L, k)) {
    x->ki = lua_tointeger(L, k);
  } else {
    return false;
  }
  x->vt = vt;
  x->vidx = k + 1;
  if (vt == LUA_TSTRING) {
    x->vs = lua_tolstring(L, k + 1, &x->vlen);
  } else if (vt == LUA_TNUMBER) {
    x->vint = lua_isinteger(L, k + 1);
    if (x->vint) x->vi = lua_tointeger(L, k + 1);
    else x->vf = lua_tonumber(L, k + 1);
  } else if (vt == LUA_TBOOLEAN) {
    x->vi = lua_toboolean(L, k + 1);
  } else if (vt != LUA_TTABLE || is_sim(L, k)) {
    return false; /* tostring(v): a function, userdata, or the table under sim */
  }
  return true;
}

/* e sorted by key_order: by insertion (a table written here has a handful
 * of keys, for which qsort's calls through a pointer cost more). */
#define SORT_INSERTION 16
static void sort_entries(entry *e, size_t n) {
  if (n > SORT_INSERTION) {
    qsort(e, n, sizeof *e, key_order);
    return;
  }
  for (size_t i = 1; i < n; i++) {
    entry x = e[i];
    size_t j = i;
    for (; j > 0 && key_order(&e[j - 1], &x) > 0; j--) e[j] = e[j - 1];
    e[j] = x;
  }
}

/* The n pairs the stack holds from slot `first` on (key, value, key, ...)
 * read into `local` (up to CANON_LOCAL of them) or an array pushed after
 * them, sorted; false where read_one refuses one. */
#define CANON_LOCAL 16
static bool read_pairs(lua_State *L, int first, size_t n, entry *local, entry **out) {
  entry *e = n <= CANON_LOCAL ? local : (entry *)lua_newuserdatauv(L, n * sizeof *e, 0);
  for (size_t i = 0; i < n; i++)
    if (!read_one(L, first + 2 * (int)i, &e[i])) return false;
  sort_entries(e, n);
  *out = e;
  return true;
}

/* The table at idx, its pairs pushed on the stack in one lua_next pass and
 * read as read_pairs reads them; false where read_one refuses (or the
 * stack cannot hold them). */
static bool read_entries(lua_State *L, int idx, entry *local, entry **out, size_t *count) {
  int base = lua_gettop(L);
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (!lua_checkstack(L, 3)) return false;
    lua_pushvalue(L, -2); /* the key again, for lua_next: the pair stays below */
    n++;
  }
  *count = n;
  return read_pairs(L, base + 1, n, local, out);
}

static bool write_entries(writer *w, const entry *e, size_t n, int depth);

/* Writes the table at the top of the stack ("{" and its entries; the caller
 * closes it), run.lua's canonical(); false where that one is needed. */
static bool write_table(writer *w, int depth) {
  lua_State *L = w->L;
  int t = lua_gettop(L);
  if (depth > CANON_DEPTH || w->nseen == CANON_TABLES || !lua_checkstack(L, 8)) return false;
  if (lua_getmetatable(L, t)) return false; /* pairs and t[k] would see what next does not */
  w->seen[w->nseen++] = lua_topointer(L, t);
  entry local[CANON_LOCAL], *e = NULL;
  size_t n = 0;
  if (!read_entries(L, t, local, &e, &n) || !write_entries(w, e, n, depth)) return false;
  lua_settop(L, t); /* the pairs and the entries */
  return true;
}

/* "{" and the entries e[0 .. n) (sorted, their values on the stack), as
 * write_table writes a table's; false where the Lua writer is needed. */
static bool write_entries(writer *w, const entry *e, size_t n, int depth) {
  lua_State *L = w->L;
  put(w, "{", 1);
  for (size_t i = 0; i < n; i++) {
    const entry *x = &e[i];
    if (x->kstr) {
      put_counted(w, x->ks, x->klen);
      put(w, "=", 1);
    } else {
      put(w, "[", 1);
      put_int(w, x->ki);
      put(w, "]=", 2);
    }
    switch (x->vt) {
      case LUA_TSTRING:
        put_counted(w, x->vs, x->vlen);
        put(w, ",", 1);
        break;
      case LUA_TNUMBER:
        put_str(w, "number:");
        if (x->vint) {
          put_int(w, x->vi);
        } else {
          put_float(w, x->vf);
        }
        put(w, ",", 1);
        break;
      case LUA_TBOOLEAN:
        put_str(w, x->vi ? "boolean:true," : "boolean:false,");
        break;
      default: { /* a table: written once, then named by the order it was met in */
        lua_pushvalue(L, x->vidx);
        const void *p = lua_topointer(L, -1);
        int id = 0;
        for (int j = 0; j < w->nseen && !id; j++)
          if (w->seen[j] == p) id = j + 1;
        if (id) {
          put(w, "@", 1);
          put_int(w, id);
          put(w, ",", 1);
        } else {
          if (!write_table(w, depth + 1)) return false;
          put(w, "},", 2);
        }
        lua_pop(L, 1);
      }
    }
  }
  return true;
}

/* Whether numbers write alike: tostring(1.5) would call their metatable's
 * __tostring and __name. */
static bool numbers_plain(lua_State *L) {
  lua_pushinteger(L, 0);
  bool plain = !lua_getmetatable(L, -1);
  lua_pop(L, plain ? 1 : 2);
  return plain;
}

/* The table at the top written out (canonical()'s text without its closing
 * brace) into w, whose buffer slot is `slot`; false where the Lua writer is
 * needed. The table stays on the stack. */
static void writer_init(lua_State *L, writer *w, int slot) {
  w->L = L;
  w->slot = slot;
  w->p = w->small;
  w->n = 0;
  w->cap = sizeof w->small;
  w->nseen = 0;
}

static bool write_top(lua_State *L, writer *w, int slot) {
  writer_init(L, w, slot);
  return write_table(w, 0);
}

/* vram.canonical(t) -> string | nil: t written out as stdlib/run.lua's
 * canonical() writes it, without the closing brace ("{5:batch=number:2,"
 * ...): keys sorted, strings counted, tables met again as "@n". nil where
 * that text would depend on more than next() and the values: a metatable,
 * a key other than a string without zero bytes or an integer, a value
 * other than a string, number, boolean or table (or a table under "sim"),
 * numbers with a metatable, over 64 levels or 256 tables. */
static int l_canonical(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  writer w;
  lua_pushnil(L); /* slot 2: the buffer once it outgrows w.small */
  lua_pushvalue(L, 1);
  if (!numbers_plain(L) || !write_top(L, &w, 2)) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushlstring(L, w.p, w.n);
  return 1;
}

/* run.lua's same(a, b, key) for the values at stack slots a and b (sim:
 * their key is "sim"): 1 the same, 0 not, -1 where Lua's answer could
 * depend on a metamethod (__eq, __pairs, __index), or past 64 levels. */
static int same(lua_State *L, int a, int b, bool sim, int depth) {
  int ta = lua_type(L, a), tb = lua_type(L, b);
  if (ta != tb) return 0;
  if (ta == LUA_TNUMBER) { /* equal values of one subtype, -0.0 apart from 0.0 */
    bool ia = lua_isinteger(L, a);
    if (ia != (bool)lua_isinteger(L, b)) return 0;
    if (ia) return lua_tointeger(L, a) == lua_tointeger(L, b);
    lua_Number x = lua_tonumber(L, a), y = lua_tonumber(L, b);
    return x == y && (x != 0 || signbit(x) == signbit(y));
  }
  if (lua_rawequal(L, a, b)) return 1;
  if (ta == LUA_TUSERDATA) { /* Lua's == would call a __eq */
    if (lua_getmetatable(L, a) || lua_getmetatable(L, b)) return -1;
    return 0;
  }
  if (ta != LUA_TTABLE) return 0;
  if (lua_getmetatable(L, a) || lua_getmetatable(L, b)) return -1;
  if (sim) return 0;
  if (depth > CANON_DEPTH || !lua_checkstack(L, 6)) return -1;
  int r = 1;
  lua_pushnil(L);
  while (r == 1 && lua_next(L, a)) { /* each of a's in b, alike */
    lua_pushvalue(L, -2);
    lua_rawget(L, b);
    bool key_sim = is_sim(L, -3);
    r = same(L, lua_gettop(L) - 1, lua_gettop(L), key_sim, depth + 1);
    lua_pop(L, 2);
  }
  if (r != 1) {
    lua_pop(L, 1); /* the key lua_next left */
    return r;
  }
  lua_pushnil(L);
  while (lua_next(L, b)) { /* none of b's missing from a */
    lua_pop(L, 1);
    lua_pushvalue(L, -1);
    if (lua_rawget(L, a) == LUA_TNIL) {
      lua_pop(L, 2);
      return 0;
    }
    lua_pop(L, 1);
  }
  return 1;
}

/* vram.run_key(r, base [, skip [, only]]) -> string | nil: stdlib/run.lua's
 * run.key, in C: the fields of r (those `only` names, if given) that differ
 * from base's, written out, "}-", then the names base has and r lacks. nil
 * where run.lua's own loop is needed: a metatable on what is iterated, on
 * base or skip (r may have one: r[k] is read as Lua reads it), a
 * comparison a metamethod could answer, a gone name that is not a string
 * without zero bytes, what vram.canonical refuses. */
static int l_run_key(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  bool has_skip = !lua_isnoneornil(L, 3), has_only = !lua_isnoneornil(L, 4);
  if (has_skip) luaL_checktype(L, 3, LUA_TTABLE);
  if (has_only) luaL_checktype(L, 4, LUA_TTABLE);
  lua_settop(L, 4);
  int iter = has_only ? 4 : 1;
  if (lua_getmetatable(L, iter) || lua_getmetatable(L, 2) ||
      (has_skip && lua_getmetatable(L, 3)) || !numbers_plain(L)) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushnil(L); /* 5: the writer's buffer, once it outgrows its own */
  luaL_checkstack(L, 8, "run.key");
  /* the fields that differ, each left on the stack as a pair (its key,
   * then r's value) from slot 6 on: what canonical() writes of a table
   * holding them, without making that table */
  int first_pair = lua_gettop(L) + 1, npairs = 0;
  lua_pushnil(L);
  while (lua_next(L, iter)) {
    lua_pop(L, 1);
    int k = lua_gettop(L);
    if (!lua_checkstack(L, 8)) {
      lua_pushnil(L);
      return 1;
    }
    lua_pushvalue(L, k);
    if (lua_gettable(L, 1) == LUA_TNIL ||
        (has_skip && (lua_pushvalue(L, k), lua_rawget(L, 3), lua_toboolean(L, -1)))) {
      lua_settop(L, k);
      continue;
    }
    lua_settop(L, k + 1); /* r[k] at k + 1 */
    lua_pushvalue(L, k);
    lua_rawget(L, 2); /* base[k] at k + 2 */
    bool sim = is_sim(L, k);
    int r = same(L, k + 1, k + 2, sim, 0);
    if (r < 0) {
      lua_pushnil(L);
      return 1;
    }
    if (r == 0) {
      lua_settop(L, k + 1);
      lua_pushvalue(L, k); /* the key again, for lua_next: the pair stays below */
      npairs++;
    } else {
      lua_settop(L, k);
    }
  }
  /* the names base has and r lacks (not skipped), each left on the stack */
  int first = lua_gettop(L) + 1, ngone = 0;
  lua_pushnil(L);
  while (lua_next(L, has_only ? 4 : 2)) {
    lua_pop(L, 1);
    int k = lua_gettop(L);
    if (!lua_checkstack(L, 6)) {
      lua_pushnil(L);
      return 1;
    }
    lua_pushvalue(L, k);
    bool lacks = lua_gettable(L, 1) == LUA_TNIL;
    lua_pushvalue(L, k);
    bool has = lua_rawget(L, 2) != LUA_TNIL;
    bool skipped = false;
    if (has_skip) {
      lua_pushvalue(L, k);
      lua_rawget(L, 3);
      skipped = lua_toboolean(L, -1);
    }
    lua_settop(L, k);
    if (lacks && has && !skipped) {
      size_t len = 0;
      const char *name = lua_type(L, k) == LUA_TSTRING ? lua_tolstring(L, k, &len) : NULL;
      if (!name || memchr(name, '\0', len)) {
        lua_pushnil(L);
        return 1;
      }
      lua_pushvalue(L, k); /* kept below the iteration's key */
      lua_insert(L, k);
      ngone++;
    }
  }
  /* in table.sort's order (the stack holds the strings and the pairs) */
  vb_bytes local_names[CANON_LOCAL], *names = local_names;
  if (ngone > CANON_LOCAL)
    names = (vb_bytes *)lua_newuserdatauv(L, (size_t)ngone * sizeof *names, 0);
  for (int i = 0; i < ngone; i++) names[i].s = lua_tolstring(L, first + i, &names[i].n);
  qsort(names, (size_t)ngone, sizeof *names, vb_bytes_cmp);
  entry local[CANON_LOCAL], *e = NULL;
  if (!read_pairs(L, first_pair, (size_t)npairs, local, &e)) {
    lua_pushnil(L);
    return 1;
  }
  writer w;
  writer_init(L, &w, 5);
  /* the table canonical() would write is met first: back-reference 1 */
  w.seen[w.nseen++] = &w;
  if (!write_entries(&w, e, (size_t)npairs, 0)) {
    lua_pushnil(L);
    return 1;
  }
  put(&w, "}-", 2);
  for (int i = 0; i < ngone; i++) { /* (the stack holds the strings) */
    if (i > 0) put(&w, ",", 1);
    put(&w, names[i].s, names[i].n);
  }
  lua_pushlstring(L, w.p, w.n);
  return 1;
}

static const luaL_Reg canon_funcs[] = {{"canonical", l_canonical}, {"run_key", l_run_key},
                                       {NULL, NULL}};

void vb_open_canon(lua_State *L) { luaL_setfuncs(L, canon_funcs, 0); }
