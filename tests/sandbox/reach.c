/* tests/sandbox/reach.c: everything a sandboxed script can reach, compared
 * with the allow-list written down in tests/sandbox/reachable.txt.
 *
 *   sandbox_reach EXPECTED.txt    exit 0 when both lists are equal, else
 *                                 print each difference and exit 1
 *   sandbox_reach --print         print the reachable list
 *
 * It builds the state `vramlua run` builds (vh_newstate, vh_sandbox_open)
 * and walks, with raw access, from every root a script has:
 *   _G                  the globals
 *   require('NAME')     each entry of package.loaded, which the sandbox's
 *                       `require` returns for a built-in name
 *   <TYPE metatable>    the metatables Lua applies per type (strings: the
 *                       methods of every string), and those of the `vram`
 *                       userdata types (registry names "vram.*"; the
 *                       "*_box" ones hold C resources on the C stack only
 *                       and never reach a script, so they are left out)
 * following table keys and values and every metatable, even locked ones (a
 * locked metatable's __index still answers). Function upvalues are not
 * followed: without `debug` no script can read them. One line per place:
 * "PATH TYPE", and "PATH TYPE = FIRST_PATH" for a table or userdata already
 * met, so the list shows that package.loaded holds the script's own tables,
 * not the full libraries. */
#define _POSIX_C_SOURCE 200809L
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/host/sandbox.h"
#include "../../runtime/host/search.h"

static char **lines;
static size_t nlines, caplines;

static void add_line(const char *s) {
  if (nlines == caplines) {
    caplines = caplines ? caplines * 2 : 256;
    lines = (char **)realloc(lines, caplines * sizeof *lines);
    if (!lines) abort();
  }
  lines[nlines] = strdup(s);
  if (!lines[nlines]) abort();
  nlines++;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static const char *type_of(lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TFUNCTION) return lua_iscfunction(L, idx) ? "cfunction" : "luafunction";
  if (lua_type(L, idx) == LUA_TNUMBER) return lua_isinteger(L, idx) ? "integer" : "float";
  return luaL_typename(L, idx);
}

static bool is_ident(const char *s) {
  if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z'))) return false;
  for (; *s; s++)
    if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9')))
      return false;
  return true;
}

/* The key at idx as a path step. */
static void key_step(lua_State *L, int idx, char *out, size_t outsz) {
  if (lua_type(L, idx) == LUA_TSTRING) {
    const char *k = lua_tostring(L, idx);
    snprintf(out, outsz, is_ident(k) ? ".%s" : "[\"%s\"]", k);
  } else if (lua_isinteger(L, idx)) {
    snprintf(out, outsz, "[%lld]", (long long)lua_tointeger(L, idx));
  } else {
    snprintf(out, outsz, "[<%s key>]", type_of(L, idx));
  }
}

typedef struct {
  char step[512];
  int slot; /* index in the key array */
} keyed;

static int cmp_keyed(const void *a, const void *b) {
  return strcmp(((const keyed *)a)->step, ((const keyed *)b)->step);
}

/* Walks the value on top (popped); seen: a table value -> first path. */
static void walk(lua_State *L, const char *path, int seen) {
  char line[2048];
  int v = lua_gettop(L);
  int t = lua_type(L, v);
  luaL_checkstack(L, 8, "walk");
  if (t == LUA_TTABLE || t == LUA_TUSERDATA) {
    lua_pushvalue(L, v);
    if (lua_rawget(L, seen) == LUA_TSTRING) {
      snprintf(line, sizeof line, "%s %s = %s", path, type_of(L, v), lua_tostring(L, -1));
      add_line(line);
      lua_settop(L, v - 1);
      return;
    }
    lua_pop(L, 1);
    lua_pushvalue(L, v);
    lua_pushstring(L, path);
    lua_rawset(L, seen);
  }
  snprintf(line, sizeof line, "%s %s", path, type_of(L, v));
  add_line(line);
  if (t == LUA_TTABLE) {
    lua_newtable(L); /* the keys, in an array */
    int keys = lua_gettop(L);
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, v)) {
      lua_pop(L, 1);
      lua_pushvalue(L, -1);
      lua_rawseti(L, keys, ++n);
    }
    keyed *ks = (keyed *)calloc((size_t)n + 1, sizeof *ks);
    if (!ks) abort();
    for (int i = 0; i < n; i++) {
      lua_rawgeti(L, keys, i + 1);
      key_step(L, -1, ks[i].step, sizeof ks[i].step);
      ks[i].slot = i + 1;
      lua_pop(L, 1);
    }
    qsort(ks, (size_t)n, sizeof *ks, cmp_keyed);
    for (int i = 0; i < n; i++) {
      char child[2048];
      snprintf(child, sizeof child, "%s%s", path, ks[i].step);
      lua_rawgeti(L, keys, ks[i].slot);
      lua_rawget(L, v);
      walk(L, child, seen);
    }
    free(ks);
  }
  if ((t == LUA_TTABLE || t == LUA_TUSERDATA) && lua_getmetatable(L, v)) {
    char child[2048];
    snprintf(child, sizeof child, "%s<metatable>", path);
    walk(L, child, seen);
  }
  lua_settop(L, v - 1);
}

static int build(lua_State *L) {
  vh_sandbox_open(L, (vh_limits *)lua_touserdata(L, 1));
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s EXPECTED.txt | --print\n", argv[0]);
    return 2;
  }
  unsetenv("VRAMLUA_PATH");
  setenv("HF_HUB_CACHE", "/nonexistent/hub", 1); /* vram.hf_hub_cache: always set */
  static vh_search search;
  static vh_limits lim;
  vh_search_init(&search, argv[0]);
  lim.search = &search;
  lim.max_memory = (int64_t)256 << 20;
  snprintf(lim.script_dir, sizeof lim.script_dir, "%s", search.share);
  lua_State *L = vh_newstate(&lim);
  if (!L) return 1;
  lua_pushcfunction(L, build);
  lua_pushlightuserdata(L, &lim);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    fprintf(stderr, "sandbox_reach: %s\n", lua_tostring(L, -1));
    return 1;
  }
  lua_newtable(L);
  int seen = lua_gettop(L);

  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  walk(L, "_G", seen);

  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  int loaded = lua_gettop(L);
  lua_newtable(L);
  int names = lua_gettop(L), n = 0;
  lua_pushnil(L);
  while (lua_next(L, loaded)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) {
      lua_pushvalue(L, -1);
      lua_rawseti(L, names, ++n);
    }
  }
  for (int i = 1; i <= n; i++) {
    char path[600];
    lua_rawgeti(L, names, i);
    snprintf(path, sizeof path, "require('%s')", lua_tostring(L, -1));
    lua_rawget(L, loaded);
    walk(L, path, seen);
  }
  lua_settop(L, seen);

  /* per-type metatables: a value of each basic type */
  lua_pushnil(L);
  lua_pushboolean(L, 1);
  lua_pushinteger(L, 0);
  lua_pushliteral(L, "");
  lua_pushcfunction(L, build);
  lua_pushlightuserdata(L, &lim);
  lua_newthread(L);
  for (int i = seen + 1; i <= lua_gettop(L); i++) {
    if (lua_getmetatable(L, i)) {
      char path[128];
      snprintf(path, sizeof path, "<%s metatable>", luaL_typename(L, i));
      walk(L, path, seen);
    }
  }
  lua_settop(L, seen);

  /* the vram userdata types */
  lua_newtable(L);
  names = lua_gettop(L);
  n = 0;
  lua_pushnil(L);
  while (lua_next(L, LUA_REGISTRYINDEX)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) continue;
    const char *k = lua_tostring(L, -1);
    size_t len = strlen(k);
    if (strncmp(k, "vram.", 5) != 0 || (len > 4 && strcmp(k + len - 4, "_box") == 0)) continue;
    lua_pushvalue(L, -1);
    lua_rawseti(L, names, ++n);
  }
  for (int i = 1; i <= n; i++) {
    char path[600];
    lua_rawgeti(L, names, i);
    snprintf(path, sizeof path, "<%s metatable>", lua_tostring(L, -1));
    lua_rawget(L, LUA_REGISTRYINDEX);
    if (lua_istable(L, -1))
      walk(L, path, seen);
    else
      lua_pop(L, 1);
  }
  lua_close(L);
  qsort(lines, nlines, sizeof *lines, cmp_str);

  if (strcmp(argv[1], "--print") == 0) {
    for (size_t i = 0; i < nlines; i++) puts(lines[i]);
    return 0;
  }
  FILE *f = fopen(argv[1], "r");
  if (!f) {
    perror(argv[1]);
    return 2;
  }
  char **want = NULL;
  size_t nwant = 0, capwant = 0;
  char buf[2048];
  while (fgets(buf, sizeof buf, f)) {
    buf[strcspn(buf, "\n")] = '\0';
    if (!buf[0] || buf[0] == '#') continue;
    if (nwant == capwant) {
      capwant = capwant ? capwant * 2 : 256;
      want = (char **)realloc(want, capwant * sizeof *want);
      if (!want) abort();
    }
    want[nwant++] = strdup(buf);
  }
  fclose(f);
  qsort(want, nwant, sizeof *want, cmp_str);
  size_t i = 0, j = 0;
  int diffs = 0;
  while (i < nlines || j < nwant) {
    int c = i == nlines ? 1 : j == nwant ? -1 : strcmp(lines[i], want[j]);
    if (c < 0) {
      printf("reachable but not allowed: %s\n", lines[i++]);
      diffs++;
    } else if (c > 0) {
      printf("allowed but not reachable: %s\n", want[j++]);
      diffs++;
    } else {
      i++;
      j++;
    }
  }
  printf("sandbox_reach: %zu reachable, %zu allowed, %d difference(s)\n", nlines, nwant, diffs);
  for (size_t k = 0; k < nlines; k++) free(lines[k]);
  for (size_t k = 0; k < nwant; k++) free(want[k]);
  free(lines);
  free(want);
  return diffs ? 1 : 0;
}
