/* vram.yaml: one YAML document into Lua values, over libyaml's event parser.
 *
 *   vram.yaml.decode(text [, chunkname]) -> value   (chunkname: "yaml")
 *   vram.yaml.load(path)                 -> value   (chunkname = path)
 *   vram.yaml.null                       -> the null sentinel (= vram.json.null)
 *
 * Mappings become tables, sequences 1-based tables. Plain (unquoted)
 * scalars are typed by the YAML 1.2 core schema: null/Null/NULL/~/empty ->
 * vram.json.null; true/True/TRUE/false/False/FALSE -> booleans; decimal
 * integers (optionally signed), 0x hex and 0o octal -> Lua integers, exactly
 * (out of int64 range is an error); core-schema floats -> floats
 * (.inf/.nan are errors: "non-finite number"); anything else a string.
 * Quoted scalars, and scalars tagged !!str or "!", are always strings; other
 * tags are ignored. Mapping keys must be scalars and are always strings
 * (their text: `1: x` gives the key "1"); a duplicate key is an error.
 *
 * Anchors and aliases are supported; an alias yields a deep copy of the
 * anchored value. Every node counts, alias expansions included, and a
 * document of more than 1000000 nodes is refused (billion laughs); nesting
 * deeper than 200 is refused too. Only one document per stream; merge keys
 * (<<) are not special. Errors read "CHUNK:LINE:COL: yaml: <problem>"
 * (1-based) and carry no Lua position.
 *
 * The parser and its current event live in a to-be-closed userdata (also
 * __gc), so raising errors mid-parse frees them. */
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "../bind/bind.h"

#define YAML_MAX_DEPTH 200
#define YAML_MAX_NODES 1000000L

typedef struct {
  yaml_parser_t parser;
  yaml_event_t ev;
  int parser_ok, have_ev;
} yaml_box;

static int yaml_box_close(lua_State *L) {
  yaml_box *b = (yaml_box *)lua_touserdata(L, 1);
  if (b) {
    if (b->have_ev) yaml_event_delete(&b->ev);
    if (b->parser_ok) yaml_parser_delete(&b->parser);
    b->have_ev = 0;
    b->parser_ok = 0;
  }
  return 0;
}

typedef struct {
  lua_State *L;
  yaml_box *b;
  const char *chunk;
  const char *text;
  size_t len;
  long nodes;
  int anchors; /* stack index: name -> {value, node count, key text|nil} */
  int lines;   /* stack index: mapping table -> {key -> line of the key (1-based)} */
  /* the text's characters, its last line and column (fix_mark), counted
   * once: every key's line asks (a scan of the text each cost ~2 % of an
   * estimate) */
  int end_known;
  size_t end_chars, end_line, end_col;
} ystate;

/* libyaml puts marks at the end of a text lacking a final newline on a line
 * of their own; report the real end of the text instead. */
static yaml_mark_t fix_mark(ystate *st, yaml_mark_t m) {
  if (!st->end_known) {
    size_t chars = 0, line = 0, col = 0;
    for (size_t i = 0; i < st->len; i++) {
      unsigned char c = (unsigned char)st->text[i];
      if ((c & 0xC0) == 0x80) continue;
      chars++;
      if (c == '\n') {
        line++;
        col = 0;
      } else {
        col++;
      }
    }
    st->end_chars = chars;
    st->end_line = line;
    st->end_col = col;
    st->end_known = 1;
  }
  if (m.index >= st->end_chars && st->len > 0 && st->text[st->len - 1] != '\n') {
    m.line = st->end_line;
    m.column = st->end_col;
  }
  return m;
}

/* lines[t][key] = the line of a mapping key or a sequence item (key: its
 * index), the key on top of the stack: where a spec's reader finds a field
 * it refuses (stdlib/errors.lua locate). */
static void key_line(ystate *st, int t, yaml_mark_t m) {
  lua_State *L = st->L;
  luaL_checkstack(L, 4, "yaml");
  lua_pushvalue(L, t);
  if (lua_rawget(L, st->lines) == LUA_TNIL) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, t);
    lua_pushvalue(L, -2);
    lua_rawset(L, st->lines);
  }
  lua_pushvalue(L, -2);
  lua_pushinteger(L, (lua_Integer)fix_mark(st, m).line + 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

/* Raises "CHUNK:LINE:COL: yaml: <msg>" at a libyaml mark. */
static int yfail(ystate *st, yaml_mark_t m, const char *fmt, ...) {
  char msg[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  m = fix_mark(st, m);
  lua_pushfstring(st->L, "%s:%d:%d: yaml: %s", st->chunk, (int)m.line + 1, (int)m.column + 1,
                  msg);
  return lua_error(st->L);
}

static int parser_fail(ystate *st) {
  yaml_parser_t *p = &st->b->parser;
  lua_State *L = st->L;
  const char *problem = p->problem ? p->problem : "unknown error";
  switch (p->error) {
    case YAML_MEMORY_ERROR:
      lua_pushfstring(L, "%s: yaml: out of memory", st->chunk);
      break;
    case YAML_READER_ERROR: {
      /* no mark: count lines up to the byte offset */
      int line = 1, col = 1;
      for (size_t i = 0; i < p->problem_offset && i < st->len; i++) {
        unsigned char c = (unsigned char)st->text[i];
        if (c == '\n') {
          line++;
          col = 1;
        } else if ((c & 0xC0) != 0x80) {
          col++;
        }
      }
      if (p->problem_value != -1) {
        char v[16];
        snprintf(v, sizeof v, "0x%02X", (unsigned)p->problem_value);
        lua_pushfstring(L, "%s:%d:%d: yaml: %s (%s)", st->chunk, line, col, problem, v);
      } else {
        lua_pushfstring(L, "%s:%d:%d: yaml: %s", st->chunk, line, col, problem);
      }
      break;
    }
    default:
      p->problem_mark = fix_mark(st, p->problem_mark);
      p->context_mark = fix_mark(st, p->context_mark);
      if (p->context)
        lua_pushfstring(L, "%s:%d:%d: yaml: %s (%s at line %d)", st->chunk,
                        (int)p->problem_mark.line + 1, (int)p->problem_mark.column + 1, problem,
                        p->context, (int)p->context_mark.line + 1);
      else
        lua_pushfstring(L, "%s:%d:%d: yaml: %s", st->chunk, (int)p->problem_mark.line + 1,
                        (int)p->problem_mark.column + 1, problem);
  }
  return lua_error(L);
}

/* Replaces the current event with the next one. */
static yaml_event_t *next_event(ystate *st) {
  yaml_box *b = st->b;
  if (b->have_ev) {
    yaml_event_delete(&b->ev);
    b->have_ev = 0;
  }
  if (!yaml_parser_parse(&b->parser, &b->ev)) parser_fail(st);
  b->have_ev = 1;
  return &b->ev;
}

static void count_nodes(ystate *st, long n, yaml_mark_t m) {
  if (n > YAML_MAX_NODES - st->nodes)
    yfail(st, m, "document expands to more than %ld nodes (alias bomb?)", YAML_MAX_NODES);
  st->nodes += n;
}

/* ---- scalars ------------------------------------------------------------- */

static int is_dec(char c) { return c >= '0' && c <= '9'; }

static int is_one_of(const char *v, size_t n, const char *const *words) {
  for (; *words; words++)
    if (strlen(*words) == n && memcmp(v, *words, n) == 0) return 1;
  return 0;
}

/* Digits of v[0..n) in base (10, 16 or 8) into *out, with sign; 0 on
 * overflow. The caller has checked the digits. */
static int to_int(const char *v, size_t n, int base, int neg, lua_Integer *out) {
  uint64_t limit = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX, acc = 0;
  for (size_t i = 0; i < n; i++) {
    char c = v[i];
    unsigned d = is_dec(c) ? (unsigned)(c - '0')
                           : (unsigned)((c | 0x20) - 'a' + 10); /* hex letters */
    if (acc > (limit - d) / (unsigned)base) return 0;
    acc = acc * (unsigned)base + d;
  }
  if (neg)
    *out = acc == (uint64_t)INT64_MAX + 1u ? (lua_Integer)INT64_MIN : -(lua_Integer)acc;
  else
    *out = (lua_Integer)acc;
  return 1;
}

/* Whether v[0..n) matches the core schema float:
 * [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )? */
static int is_core_float(const char *v, size_t n) {
  size_t i = 0;
  if (i < n && (v[i] == '+' || v[i] == '-')) i++;
  if (i < n && v[i] == '.') {
    i++;
    if (i >= n || !is_dec(v[i])) return 0;
    while (i < n && is_dec(v[i])) i++;
  } else {
    if (i >= n || !is_dec(v[i])) return 0;
    while (i < n && is_dec(v[i])) i++;
    if (i < n && v[i] == '.') {
      i++;
      while (i < n && is_dec(v[i])) i++;
    }
  }
  if (i < n && (v[i] == 'e' || v[i] == 'E')) {
    i++;
    if (i < n && (v[i] == '+' || v[i] == '-')) i++;
    if (i >= n || !is_dec(v[i])) return 0;
    while (i < n && is_dec(v[i])) i++;
  }
  return i == n;
}

static int all_digits(const char *v, size_t n, int base) {
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = v[i];
    int ok = base == 8    ? (c >= '0' && c <= '7')
             : base == 10 ? is_dec(c)
                          : (is_dec(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'));
    if (!ok) return 0;
  }
  return 1;
}

static void push_plain(ystate *st, const char *v, size_t n, yaml_mark_t m) {
  static const char *const nulls[] = {"~", "null", "Null", "NULL", NULL};
  static const char *const trues[] = {"true", "True", "TRUE", NULL};
  static const char *const falses[] = {"false", "False", "FALSE", NULL};
  static const char *const nonfinite[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF",
                                          "-.inf", "-.Inf", "-.INF", ".nan", ".NaN", ".NAN",
                                          NULL};
  lua_State *L = st->L;
  if (n == 0 || is_one_of(v, n, nulls)) {
    lua_pushlightuserdata(L, vb_json_null());
    return;
  }
  if (is_one_of(v, n, trues)) {
    lua_pushboolean(L, 1);
    return;
  }
  if (is_one_of(v, n, falses)) {
    lua_pushboolean(L, 0);
    return;
  }
  if (is_one_of(v, n, nonfinite)) {
    yfail(st, m, "non-finite number '%.*s' is not supported", (int)n, v);
    return;
  }
  /* integers */
  int base = 0, neg = 0;
  const char *d = v;
  size_t dn = n;
  if (n > 2 && v[0] == '0' && v[1] == 'x' && all_digits(v + 2, n - 2, 16)) {
    base = 16;
    d = v + 2;
    dn = n - 2;
  } else if (n > 2 && v[0] == '0' && v[1] == 'o' && all_digits(v + 2, n - 2, 8)) {
    base = 8;
    d = v + 2;
    dn = n - 2;
  } else {
    size_t s = (v[0] == '+' || v[0] == '-') ? 1 : 0;
    if (all_digits(v + s, n - s, 10)) {
      base = 10;
      neg = v[0] == '-';
      d = v + s;
      dn = n - s;
    }
  }
  if (base) {
    lua_Integer r = 0;
    if (!to_int(d, dn, base, neg, &r))
      yfail(st, m, "integer out of range: %.*s", (int)(n > 60 ? 60 : n), v);
    lua_pushinteger(L, r);
    return;
  }
  if (is_core_float(v, n)) {
    char small[128];
    char *buf = small;
    if (n >= sizeof small) buf = (char *)lua_newuserdatauv(L, n + 1, 0);
    memcpy(buf, v, n);
    buf[n] = '\0';
    char dp = localeconv()->decimal_point[0];
    if (dp != '.') {
      char *q = strchr(buf, '.');
      if (q) *q = dp;
    }
    char *end = NULL;
    double x = strtod(buf, &end);
    int bad = end != buf + n;
    if (buf != small) lua_pop(L, 1);
    if (!bad) {
      if (isinf(x)) yfail(st, m, "number out of range: %.*s", (int)(n > 60 ? 60 : n), v);
      lua_pushnumber(L, (lua_Number)x);
      return;
    }
  }
  lua_pushlstring(L, v, n);
}

/* Pushes the value of the scalar event ev. */
static void push_scalar(ystate *st, yaml_event_t *ev) {
  const char *v = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  const char *tag = (const char *)ev->data.scalar.tag;
  int as_string = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
                  (tag && (strcmp(tag, YAML_STR_TAG) == 0 || strcmp(tag, "!") == 0));
  if (as_string)
    lua_pushlstring(st->L, v, n);
  else
    push_plain(st, v, n, ev->start_mark);
}

/* ---- anchors ------------------------------------------------------------- */

/* anchors[name] = {value at vidx, count, key text at kidx (0: none)} */
static void set_anchor(ystate *st, int name, int vidx, long count, int kidx) {
  lua_State *L = st->L;
  luaL_checkstack(L, 4, "yaml anchors");
  lua_pushvalue(L, name);
  lua_createtable(L, 3, 0);
  lua_pushvalue(L, vidx);
  lua_rawseti(L, -2, 1);
  lua_pushinteger(L, (lua_Integer)count);
  lua_rawseti(L, -2, 2);
  if (kidx) {
    lua_pushvalue(L, kidx);
    lua_rawseti(L, -2, 3);
  }
  lua_rawset(L, st->anchors);
}

/* Pushes the record of the alias event's anchor, or raises. */
static void get_anchor(ystate *st, yaml_event_t *ev) {
  lua_State *L = st->L;
  const char *name = (const char *)ev->data.alias.anchor;
  luaL_checkstack(L, 4, "yaml anchors");
  if (lua_getfield(L, st->anchors, name) != LUA_TTABLE)
    yfail(st, ev->start_mark, "unknown anchor '%s'", name);
}

/* Pushes a deep copy of the table at src, which will sit at depth. */
static void deep_copy(ystate *st, int src, int depth, yaml_mark_t m) {
  lua_State *L = st->L;
  if (depth > YAML_MAX_DEPTH) yfail(st, m, "nesting deeper than %d", YAML_MAX_DEPTH);
  luaL_checkstack(L, 8, "yaml nesting");
  lua_Unsigned len = lua_rawlen(L, src);
  lua_createtable(L, len > 1000000 ? 1000000 : (int)len, 0);
  int dst = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, src)) {
    if (lua_type(L, -1) == LUA_TTABLE) {
      deep_copy(st, lua_gettop(L), depth + 1, m);
      lua_remove(L, -2);
    }
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, dst);
  }
}

/* ---- nodes --------------------------------------------------------------- */

/* Pushes the node whose first event is current; on return the current event
 * is the node's last. depth: the depth a collection here would have. */
static void parse_node(ystate *st, int depth) {
  lua_State *L = st->L;
  yaml_event_t *ev = &st->b->ev;
  luaL_checkstack(L, 8, "yaml nesting");
  switch (ev->type) {
    case YAML_ALIAS_EVENT: {
      yaml_mark_t m = ev->start_mark;
      get_anchor(st, ev);
      int rec = lua_gettop(L);
      lua_rawgeti(L, rec, 2);
      long n = (long)lua_tointeger(L, -1);
      lua_pop(L, 1);
      count_nodes(st, n, m);
      if (lua_rawgeti(L, rec, 1) == LUA_TTABLE) {
        deep_copy(st, lua_gettop(L), depth, m);
        lua_remove(L, -2);
      }
      lua_remove(L, rec);
      return;
    }
    case YAML_SCALAR_EVENT: {
      count_nodes(st, 1, ev->start_mark);
      push_scalar(st, ev);
      if (ev->data.scalar.anchor) {
        int v = lua_gettop(L);
        lua_pushstring(L, (const char *)ev->data.scalar.anchor);
        lua_pushlstring(L, (const char *)ev->data.scalar.value, ev->data.scalar.length);
        set_anchor(st, v + 1, v, 1, v + 2);
        lua_pop(L, 2);
      }
      return;
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
      yaml_mark_t m = ev->start_mark;
      int is_map = ev->type == YAML_MAPPING_START_EVENT;
      const char *anchor = (const char *)(is_map ? ev->data.mapping_start.anchor
                                                 : ev->data.sequence_start.anchor);
      if (depth > YAML_MAX_DEPTH) yfail(st, m, "nesting deeper than %d", YAML_MAX_DEPTH);
      long before = st->nodes;
      count_nodes(st, 1, m);
      if (anchor)
        lua_pushstring(L, anchor);
      else
        lua_pushnil(L);
      int name = lua_gettop(L);
      lua_newtable(L);
      int t = name + 1;
      if (!is_map) {
        lua_Integer i = 0;
        while (next_event(st)->type != YAML_SEQUENCE_END_EVENT) {
          lua_pushinteger(L, i + 1); /* an item's line, keyed by its index */
          key_line(st, t, st->b->ev.start_mark);
          lua_pop(L, 1);
          parse_node(st, depth + 1);
          lua_rawseti(L, t, ++i);
        }
      } else {
        while (next_event(st)->type != YAML_MAPPING_END_EVENT) {
          yaml_event_t *k = &st->b->ev;
          yaml_mark_t km = k->start_mark;
          if (k->type == YAML_SCALAR_EVENT) {
            count_nodes(st, 1, km);
            if (k->data.scalar.anchor) { /* an anchored key: record its value too */
              push_scalar(st, k);
              lua_pushstring(L, (const char *)k->data.scalar.anchor);
              lua_pushlstring(L, (const char *)k->data.scalar.value, k->data.scalar.length);
              int top = lua_gettop(L);
              set_anchor(st, top - 1, top - 2, 1, top);
              lua_replace(L, top - 2);
              lua_pop(L, 1);
            } else {
              lua_pushlstring(L, (const char *)k->data.scalar.value, k->data.scalar.length);
            }
          } else if (k->type == YAML_ALIAS_EVENT) {
            get_anchor(st, k);
            count_nodes(st, 1, km);
            if (lua_rawgeti(L, -1, 3) != LUA_TSTRING)
              yfail(st, km, "mapping keys must be scalars (alias '%s' is a collection)",
                    (const char *)k->data.alias.anchor);
            lua_remove(L, -2);
          } else {
            yfail(st, km, "mapping keys must be scalars");
          }
          lua_pushvalue(L, -1);
          if (lua_rawget(L, t) != LUA_TNIL) yfail(st, km, "duplicate key '%s'", lua_tostring(L, -2));
          lua_pop(L, 1);
          key_line(st, t, km);
          next_event(st);
          parse_node(st, depth + 1);
          lua_rawset(L, t);
        }
      }
      if (anchor) set_anchor(st, name, t, st->nodes - before, 0);
      lua_remove(L, name);
      return;
    }
    default:
      yfail(st, ev->start_mark, "unexpected event %d", (int)ev->type);
  }
}

/* Decodes the single document in text[0..n) and pushes its value and the
 * line of every mapping key (key_line). */
static int decode_text(lua_State *L, const char *text, size_t n, const char *chunk,
                       int want_lines) {
  luaL_checkstack(L, 8, "yaml");
  lua_newtable(L);
  int lines = lua_gettop(L);
  lua_newtable(L);
  int anchors = lua_gettop(L);
  yaml_box *b = (yaml_box *)lua_newuserdatauv(L, sizeof *b, 0);
  int slot = lua_gettop(L);
  b->parser_ok = 0;
  b->have_ev = 0;
  if (luaL_newmetatable(L, "vram.yaml_box")) {
    lua_pushcfunction(L, yaml_box_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, yaml_box_close);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, slot);
  lua_toclose(L, slot);
  if (!yaml_parser_initialize(&b->parser)) return luaL_error(L, "%s: yaml: out of memory", chunk);
  b->parser_ok = 1;
  yaml_parser_set_input_string(&b->parser, (const unsigned char *)text, n);

  ystate st = {L, b, chunk, text, n, 0, anchors, lines, 0, 0, 0, 0};
  yaml_event_t *ev = next_event(&st); /* STREAM_START */
  ev = next_event(&st);
  if (ev->type == YAML_STREAM_END_EVENT) return yfail(&st, ev->start_mark, "empty document");
  next_event(&st); /* past DOCUMENT_START */
  parse_node(&st, 1);
  next_event(&st); /* DOCUMENT_END */
  ev = next_event(&st);
  if (ev->type == YAML_DOCUMENT_START_EVENT) {
    lua_pushfstring(L, "%s:%d: yaml: multiple documents are not supported", chunk,
                    (int)ev->start_mark.line + 1);
    return lua_error(L);
  }
  lua_closeslot(L, slot);
  if (!want_lines) return 1;
  lua_pushvalue(L, lines);
  return 2;
}

/* yaml.decode(text [, chunkname [, lines]]) -> value [, lines: with lines
 * true, {table -> key or item index -> line} for the value's tables] */
static int l_decode(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  const char *chunk = luaL_optstring(L, 2, "yaml");
  int want = lua_toboolean(L, 3);
  lua_settop(L, 2);
  return decode_text(L, s, n, chunk, want);
}

/* yaml.load(path [, lines]) -> value [, lines] (as yaml.decode) */
static int l_load(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  int want = lua_toboolean(L, 2);
  vb_check_read(L, path);
  lua_settop(L, 1);
  vb_read_file(L, path);
  size_t n;
  const char *s = lua_tolstring(L, 2, &n);
  return decode_text(L, s, n, path, want);
}

int vb_open_yaml(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"decode", l_decode},
      {"load", l_load},
      {NULL, NULL},
  };
  luaL_newlib(L, fns);
  lua_pushlightuserdata(L, vb_json_null());
  lua_setfield(L, -2, "null");
  return 1;
}
