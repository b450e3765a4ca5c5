/* Read permission for sandboxed scripts: see lfiles.h. */
#define _XOPEN_SOURCE 700 /* realpath */

#include "lfiles.h"

#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bind.h"
#include "builtin.h"

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

#define RULE_KEY "vramlua.read_rule" /* registry: {trees = {dir...}, files = {path = true}} */

/* realpath of a directory, remembered: every module a process requires
 * sits in one of a few directories, and realpath asks the kernel about each
 * component of a path (~7 readlink calls a module, issue 18). A process
 * resolves a directory once; one lstat tells whether the file itself is a
 * link, which the full realpath then follows. A folder in a remembered
 * folder is that one's realpath and its name when one lstat says it is a
 * folder and no link (the sandbox's trees are remembered first: the
 * modules' folders lie in them). */
#define DIR_CACHE 32 /* (a process meets ~7: the trees, stdlib/, models/, a spec's folders) */
static struct {
  char *given, *real;
} dir_cache[DIR_CACHE];

/* out = a folder's realpath `real` and `name` joined (no second slash
 * after "/"); 0 when that is longer than PATH_MAX. */
static int join(char *out, const char *real, const char *name) {
  size_t rl = strcmp(real, "/") == 0 ? 0 : strlen(real), nl = strlen(name);
  if (rl + 1 + nl + 1 > PATH_MAX) return 0;
  memcpy(out, real, rl);
  out[rl] = '/';
  memcpy(out + rl + 1, name, nl + 1);
  return 1;
}

static const char *cached_dir(const char *dir, size_t len) {
  for (int i = 0; i < DIR_CACHE && dir_cache[i].given; i++)
    if (strncmp(dir_cache[i].given, dir, len) == 0 && dir_cache[i].given[len] == '\0')
      return dir_cache[i].real;
  return NULL;
}

/* dir's realpath into res through its parent's, remembered; 0 when that
 * does not apply. */
static int under_cached(const char *dir, char *res) {
  const char *slash = strrchr(dir, '/'), *name = slash ? slash + 1 : NULL;
  if (!slash || slash == dir || !*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
    return 0;
  const char *parent = cached_dir(dir, (size_t)(slash - dir));
  struct stat st;
  if (!parent || lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
  return join(res, parent, name);
}

static const char *real_dir(const char *dir) {
  const char *known = cached_dir(dir, strlen(dir));
  if (known) return known;
  int i = 0;
  while (i < DIR_CACHE && dir_cache[i].given) i++;
  char res[PATH_MAX];
  if (i == DIR_CACHE || (!under_cached(dir, res) && !realpath(dir, res))) return NULL;
  char *g = strdup(dir), *r = strdup(res);
  if (!g || !r) {
    free(g);
    free(r);
    return NULL;
  }
  dir_cache[i].given = g;
  dir_cache[i].real = r;
  return r;
}

/* The regular file the last resolve_cached looked at, and its lstat: a
 * require checks a module's path (vb_check_read) and at once loads it
 * (vb_load_lua_file), whose stamp check reads this instead of asking the
 * kernel again (a stat is ~2.5 us on the build machine, a module's third;
 * an estimate requires ~25). Every resolve_cached forgets it first and the
 * stamp check takes it once, so it never outlives the require that made it. */
static struct {
  bool set;
  struct stat st;
  char path[PATH_MAX];
} last_file;

/* realpath(path, out) for an existing file that is not itself a link,
 * through real_dir; 0 when it does not apply (the caller then asks
 * realpath). *missing: the file does not exist (lstat: ENOENT), which a
 * realpath would walk the whole path to find out. */
static int resolve_cached(const char *path, char *out, int *missing) {
  last_file.set = false;
  *missing = 0;
  const char *slash = strrchr(path, '/');
  size_t dl = slash ? (size_t)(slash - path) : 0;
  if (!slash || dl == 0 || dl >= PATH_MAX) return 0;
  const char *base = slash + 1;
  if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) return 0;
  struct stat st;
  if (lstat(path, &st) != 0) {
    *missing = errno == ENOENT;
    return 0;
  }
  if (S_ISLNK(st.st_mode)) return 0;
  last_file.set = S_ISREG(st.st_mode) && strlen(path) < PATH_MAX;
  if (last_file.set) {
    last_file.st = st;
    strcpy(last_file.path, path);
  }
  char dir[PATH_MAX];
  memcpy(dir, path, dl);
  dir[dl] = '\0';
  const char *real = real_dir(dir);
  return real && join(out, real, base);
}

/* Resolves path into out (PATH_MAX bytes). A name that does not exist yet is
 * resolved through its parent directory. Returns 0, or an errno value. */
static int resolve(const char *path, char *out) {
  int missing, e = ENOENT;
  if (resolve_cached(path, out, &missing)) return 0;
  if (!missing) {
    if (realpath(path, out)) return 0;
    e = errno;
    if (e != ENOENT && e != ENOTDIR) return e;
  }
  size_t n = strlen(path);
  if (n == 0 || n >= PATH_MAX) return e;
  char buf[PATH_MAX];
  memcpy(buf, path, n + 1);
  while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
  char *slash = strrchr(buf, '/');
  const char *dir = ".", *base = buf;
  if (slash) {
    *slash = '\0';
    dir = slash == buf ? "/" : buf;
    base = slash + 1;
  }
  if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) return e;
  char resolved[PATH_MAX];
  const char *parent = real_dir(dir); /* (remembered: a search tries a few directories) */
  if (!parent) parent = realpath(dir, resolved); /* (the cache full) */
  if (!parent) return e;
  return join(out, parent, base) ? 0 : ENAMETOOLONG;
}

static int under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  if (n == 1 && dir[0] == '/') return 1;
  return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

void vb_files_restrict(lua_State *L) {
  lua_createtable(L, 0, 2);
  lua_newtable(L);
  lua_setfield(L, -2, "trees");
  lua_newtable(L);
  lua_setfield(L, -2, "files");
  lua_setfield(L, LUA_REGISTRYINDEX, RULE_KEY);
}

int vb_files_restricted(lua_State *L) {
  int t = lua_getfield(L, LUA_REGISTRYINDEX, RULE_KEY);
  lua_pop(L, 1);
  return t == LUA_TTABLE;
}

static int allow(lua_State *L, const char *path, const char *field, int tree) {
  char res[PATH_MAX];
  int missing;
  const char *dir = tree ? real_dir(path) : NULL; /* (a tree is remembered; < PATH_MAX) */
  if (dir) strcpy(res, dir);
  else if (!resolve_cached(path, res, &missing) && (missing || !realpath(path, res))) return 0;
  if (lua_getfield(L, LUA_REGISTRYINDEX, RULE_KEY) != LUA_TTABLE) {
    lua_pop(L, 1);
    return 0;
  }
  lua_getfield(L, -1, field);
  if (tree) {
    lua_pushstring(L, res);
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
  } else {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, res);
  }
  lua_pop(L, 2);
  return 1;
}

int vb_files_allow_tree(lua_State *L, const char *dir) { return allow(L, dir, "trees", 1); }

int vb_files_allow_file(lua_State *L, const char *path) { return allow(L, path, "files", 0); }

/* vram.allow_named(path, from): the built-in commands read the user's data,
 * and a file the user names inside a file given on the command line (a spec's
 * model.config) is the user's own too. `from` must be a file named on the
 * command line; then `path`, if it is a .json file, may be read, and so may
 * its folder (a checkpoint's safetensors headers lie beside its config.json),
 * or the folder it names.
 * The host registers this for built-in commands only (sandbox.c). */
int vb_allow_named(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  const char *from = luaL_checkstring(L, 2);
  char res[PATH_MAX];
  int ok = 0;
  if (!resolve(from, res) && lua_getfield(L, LUA_REGISTRYINDEX, RULE_KEY) == LUA_TTABLE &&
      lua_getfield(L, -1, "files") == LUA_TTABLE)
    ok = lua_getfield(L, -1, res) != LUA_TNIL;
  lua_settop(L, 2);
  if (!ok) return luaL_argerror(L, 2, "not a file named on the command line");
  struct stat st;
  if (stat(path, &st) != 0) return 0; /* the loader says "cannot open" */
  if (S_ISDIR(st.st_mode)) {
    allow(L, path, "trees", 1);
    return 0;
  }
  /* a model config is JSON: a shared spec cannot point the tool at any
   * other kind of file (/etc/passwd stays outside the sandbox) */
  size_t n = strlen(path);
  if (n < 5 || strcmp(path + n - 5, ".json") != 0 || n >= PATH_MAX) return 0;
  allow(L, path, "files", 0);
  char dir[PATH_MAX];
  memcpy(dir, path, n + 1);
  char *slash = strrchr(dir, '/');
  if (!slash) return 0; /* a bare name: beside the working directory */
  if (slash == dir) slash[1] = '\0';
  else *slash = '\0';
  allow(L, dir, "trees", 1);
  return 0;
}

void vb_check_read(lua_State *L, const char *path) {
  luaL_checkstack(L, 4, "checking a path");
  if (lua_getfield(L, LUA_REGISTRYINDEX, RULE_KEY) != LUA_TTABLE) {
    lua_pop(L, 1);
    return; /* no rule: --trust, or a state without the sandbox */
  }
  int rule = lua_gettop(L);
  char res[PATH_MAX];
  int e = resolve(path, res);
  if (e) {
    lua_pushfstring(L, "%s: cannot open: %s", path, strerror(e));
    lua_error(L);
  }
  int ok = 0;
  if (lua_getfield(L, rule, "files") == LUA_TTABLE) ok = lua_getfield(L, -1, res) != LUA_TNIL;
  lua_settop(L, rule);
  if (!ok && lua_getfield(L, rule, "trees") == LUA_TTABLE) {
    lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
    for (lua_Integer i = 1; i <= n && !ok; i++) {
      if (lua_rawgeti(L, -1, i) == LUA_TSTRING) ok = under(res, lua_tostring(L, -1));
      lua_pop(L, 1);
    }
  }
  lua_settop(L, rule - 1);
  if (ok) return;
  if (strcmp(res, path) != 0)
    luaL_error(L,
               "%s: outside the sandbox (resolves to %s; a sandboxed script reads only below "
               "its own directory, the VRAMLUA_PATH directories and the share directory, and "
               "files named on the command line; --trust lifts this)",
               path, res);
  luaL_error(L,
             "%s: outside the sandbox (a sandboxed script reads only below its own directory, "
             "the VRAMLUA_PATH directories and the share directory, and files named on the "
             "command line; --trust lifts this)",
             path);
}

/* text.load(path): the file's bytes as a string, under the same read rule as
 * the JSON and YAML loaders (engine command lines, Hugging Face cache refs). */
static int l_text_load(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  vb_check_read(L, path);
  lua_settop(L, 1);
  vb_read_file(L, path);
  return 1;
}

int vb_open_text(lua_State *L) {
  static const luaL_Reg funcs[] = {{"load", l_text_load}, {NULL, NULL}};
  luaL_newlib(L, funcs);
  return 1;
}

/* vb_open_regular, its fstat in *st; blocking: whether O_NONBLOCK is
 * cleared again (a FILE reader needs it; read() of a regular file never
 * blocks, so slurp keeps it and saves two system calls a module). */
static int open_regular(const char *path, const char **why, struct stat *st, int blocking) {
  static char msg[160];
  /* O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    snprintf(msg, sizeof msg, "cannot open: %s", strerror(errno));
    *why = msg;
    return -1;
  }
  if (fstat(fd, st) != 0) {
    snprintf(msg, sizeof msg, "cannot open: %s", strerror(errno));
    *why = msg;
  } else if (S_ISDIR(st->st_mode)) {
    *why = "is a directory";
  } else if (!S_ISREG(st->st_mode)) {
    *why = "not a regular file (a FIFO, device or socket); give a file";
  } else {
    if (!blocking) return fd;
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != -1) return fd;
    snprintf(msg, sizeof msg, "cannot open: %s", strerror(errno));
    *why = msg;
  }
  close(fd);
  return -1;
}

int vb_open_regular(const char *path, const char **why, int64_t *size) {
  struct stat st;
  int fd = open_regular(path, why, &st, 1);
  if (fd >= 0 && size) *size = (int64_t)st.st_size;
  return fd;
}

typedef struct {
  const char *s;
  size_t n;
  int sent_newline; /* the line a skipped #! line leaves */
} chunk_reader;

static const char *read_chunk(lua_State *L, void *ud, size_t *size) {
  chunk_reader *r = (chunk_reader *)ud;
  (void)L;
  if (!r->sent_newline) {
    r->sent_newline = 1;
    *size = 1;
    return "\n";
  }
  *size = r->n;
  r->n = 0;
  return *size ? r->s : NULL;
}

static const vb_builtin_chunk *builtins;
static size_t nbuiltins;
static size_t nprecompiled, nstamped, ntext; /* files loaded each way, for --stats */

void vb_lua_file_counts(size_t *precompiled, size_t *stamped, size_t *text) {
  *precompiled = nprecompiled;
  *stamped = nstamped;
  *text = ntext;
}

void vb_use_builtin_chunks(const vb_builtin_chunk *chunks, size_t n) {
  builtins = chunks;
  nbuiltins = n;
}

static const vb_builtin_chunk *find_builtin(const char *s, size_t n) {
  if (nbuiltins == 0) return NULL;
  uint64_t h = vb_source_hash(s, n);
  for (size_t i = 0; i < nbuiltins; i++)
    if (builtins[i].hash == h && builtins[i].source_len == n) return &builtins[i];
  return NULL;
}

/* A built-in chunk in three pieces: the header, "@path" in place of the
 * placeholder name (a Lua 5.4 string: size + 1 as 7-bit groups, most
 * significant first, the last marked with 0x80), the rest. */
typedef struct {
  const vb_builtin_chunk *c;
  unsigned char name_size[16];
  size_t name_size_len;
  const char *name;
  size_t name_len;
  int piece;
} builtin_reader;

static const char *read_builtin(lua_State *L, void *ud, size_t *size) {
  builtin_reader *r = (builtin_reader *)ud;
  (void)L;
  switch (r->piece++) {
  case 0:
    *size = VB_NAME_AT;
    return (const char *)r->c->code;
  case 1:
    *size = r->name_size_len;
    return (const char *)r->name_size;
  case 2:
    *size = r->name_len;
    return r->name;
  case 3:
    *size = r->c->code_len - VB_NAME_AT - VB_NAME_LEN;
    return (const char *)r->c->code + VB_NAME_AT + VB_NAME_LEN;
  default:
    *size = 0;
    return NULL;
  }
}

static int load_builtin(lua_State *L, const vb_builtin_chunk *c, const char *name) {
  builtin_reader r = {c, {0}, 0, name, strlen(name), 0};
  unsigned char rev[16];
  size_t x = r.name_len + 1, k = 0;
  do {
    rev[k++] = (unsigned char)(x & 0x7f);
    x >>= 7;
  } while (x != 0);
  for (size_t i = 0; i < k; i++) r.name_size[i] = rev[k - 1 - i];
  r.name_size[k - 1] |= 0x80;
  r.name_size_len = k;
  return lua_load(L, read_builtin, &r, name, "b");
}

/* Pushes the function compiled from the n bytes s of path (precompiled when
 * they are a built-in file's), or an error message; returns the status. The
 * chunk name "@path" is on top of the stack and stays. Never raises. */
static int load_source(lua_State *L, const char *s, size_t n) {
  chunk_reader r = {s, n, 1};
  const vb_builtin_chunk *c = find_builtin(s, n);
  if (c) { /* the very text a built-in chunk was compiled from */
    int st = load_builtin(L, c, lua_tostring(L, -1));
    if (st == LUA_OK) nprecompiled++;
    return st;
  }
  ntext++;
  if (n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
    r.s += 3;
    r.n -= 3;
  }
  if (r.n && r.s[0] == '#') { /* a #! line: skipped, its line kept */
    const char *nl = memchr(r.s, '\n', r.n);
    r.n = nl ? r.n - (size_t)(nl + 1 - r.s) : 0;
    r.s = nl ? nl + 1 : r.s;
    r.sent_newline = 0;
  }
  return lua_load(L, read_chunk, &r, lua_tostring(L, -1), "t");
}

/* The chunk compiled from the file at path when that file is unchanged
 * since the build by its stamp (builtin.h): the same path, a regular file
 * of the same size and modification time. NULL otherwise. */
static const vb_builtin_chunk *stamped_builtin(const char *path) {
  size_t len = strlen(path);
  for (size_t i = 0; i < nbuiltins; i++) {
    const vb_builtin_chunk *c = &builtins[i];
    if (c->mtime_sec < 0 || c->path_len != len || memcmp(c->path, path, len) != 0) continue;
    struct stat st;
    bool seen = last_file.set && strcmp(last_file.path, path) == 0; /* (a regular file: no link) */
    last_file.set = false;
    if (seen) st = last_file.st;
    if ((!seen && stat(path, &st) != 0) || !S_ISREG(st.st_mode) || st.st_size < 0 ||
        (size_t)st.st_size != c->source_len || (int64_t)st.st_mtim.tv_sec != c->mtime_sec ||
        (int64_t)st.st_mtim.tv_nsec != c->mtime_nsec)
      return NULL;
    return c;
  }
  return NULL;
}

/* A regular file's bytes in one block of the state's allocator (the memory
 * budget counts it; *cap is its size), read with one read() of the size
 * fstat gives. Reading each module through a growing Lua buffer cost ~10
 * page faults a file (issue 18). NULL for anything else -- not a regular
 * file, larger than 64 MiB, changed while read -- which the caller then
 * reads the general way (vb_read_file), whose errors say why. */
static char *slurp(lua_State *L, const char *path, size_t *n, size_t *cap) {
  const char *why = NULL;
  struct stat st;
  int fd = open_regular(path, &why, &st, 0);
  if (fd < 0) return NULL;
  char *s = NULL;
  if (st.st_size >= 0 && st.st_size < ((off_t)64 << 20)) {
    size_t size = (size_t)st.st_size;
    void *ud = NULL;
    lua_Alloc alloc = lua_getallocf(L, &ud);
    *cap = size + 1; /* one byte more: a file that grew is not read short */
    s = (char *)alloc(ud, NULL, 0, *cap);
    /* a regular file reads short only at its end */
    if (s && read(fd, s, *cap) != (ssize_t)size) {
      alloc(ud, s, *cap, 0);
      s = NULL;
    }
    *n = size;
  }
  close(fd);
  return s;
}

void vb_load_lua_file(lua_State *L, const char *path) {
  lua_pushfstring(L, "@%s", path);
  const vb_builtin_chunk *c = stamped_builtin(path);
  if (c) {
    int loaded = load_builtin(L, c, lua_tostring(L, -1));
    lua_remove(L, -2); /* the chunk name */
    if (loaded != LUA_OK) lua_error(L);
    nprecompiled++, nstamped++;
    return;
  }
  size_t n = 0, cap = 0;
  char *s = slurp(L, path, &n, &cap);
  int st;
  if (s) {
    st = load_source(L, s, n);
    void *ud = NULL;
    lua_getallocf(L, &ud)(ud, s, cap, 0);
  } else {
    vb_read_file(L, path); /* raises what is wrong with the file */
    const char *text = lua_tolstring(L, -1, &n);
    lua_insert(L, -2); /* the text below the chunk name, kept while loading */
    st = load_source(L, text, n);
    lua_remove(L, -3); /* the text */
  }
  lua_remove(L, -2); /* the chunk name */
  if (st != LUA_OK) lua_error(L);
}
