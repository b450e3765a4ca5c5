/* Build tool: compiles the built-in Lua files to bytecode and writes them as
 * C arrays (runtime/bind/builtin.h says how the runtime uses them).
 *   vramlua_precompile OUT.c FILE.lua...
 * A file that does not compile fails the build with Lua's message. */
#define _POSIX_C_SOURCE 200809L /* st_mtim, clock_gettime */
#include <lauxlib.h>
#include <lua.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../bind/builtin.h"

typedef struct {
  unsigned char *p;
  size_t n, cap;
} buffer;

static int collect(lua_State *L, const void *p, size_t sz, void *ud) {
  buffer *b = (buffer *)ud;
  (void)L;
  if (b->n + sz > b->cap) {
    size_t cap = (b->n + sz) * 2;
    unsigned char *q = realloc(b->p, cap);
    if (!q) return 1;
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->n, p, sz);
  b->n += sz;
  return 0;
}

static char *slurp(const char *path, size_t *len) {
  char *s = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (s = malloc((size_t)n + 1)) != NULL) {
      *len = fread(s, 1, (size_t)n, f);
      if (*len != (size_t)n) {
        free(s);
        s = NULL;
      }
    }
  }
  fclose(f);
  return s;
}

/* The dump without its local variables' names (the debug section's
 * locvars) and its upvalues' names but _ENV's: a third of the strings a
 * process interned when it loaded the built-in Lua (issue 18), read by
 * nothing but debug.getlocal/getupvalue and the "(local 'x')" or
 * "(upvalue 'x')" of a message about a bug in that Lua. Lines, the source
 * name and _ENV's name stay: errors keep their file:line, and a global
 * stays "global 'x'" (Lua names _ENV by its upvalue's name). The layout
 * is Lua 5.4's (ldump.c); anything else fails the build. */
typedef struct {
  const unsigned char *p;
  size_t n, at;
  buffer *out;
  int bad;
} rewrite;

static void put(rewrite *w, const unsigned char *p, size_t n) {
  if (!w->bad && collect(NULL, p, n, w->out) != 0) w->bad = 1;
}

/* Copies n bytes from the dump to the output (keep) or skips them. */
static void take(rewrite *w, size_t n, int keep) {
  if (w->bad || n > w->n - w->at) {
    w->bad = 1;
    return;
  }
  if (keep) put(w, w->p + w->at, n);
  w->at += n;
}

/* A size or int (ldump.c dumpSize: 7 bits a byte, the last one's high bit set). */
static size_t size_of(rewrite *w, int keep) {
  size_t x = 0, start = w->at;
  for (;;) {
    if (w->bad || w->at >= w->n || x > (SIZE_MAX >> 7)) {
      w->bad = 1;
      return 0;
    }
    unsigned char c = w->p[w->at++];
    x = (x << 7) | (c & 0x7fu);
    if (c & 0x80u) break;
  }
  if (keep) put(w, w->p + start, w->at - start);
  return x;
}

static void string_of(rewrite *w, int keep) {
  size_t n = size_of(w, keep);
  if (n > 0) take(w, n - 1, keep);
}

/* An upvalue's name: "_ENV" copied, any other written as none (size 0,
 * which the loader reads as NULL: a message then says "upvalue '?'"). */
static void env_name_of(rewrite *w) {
  size_t start = w->at, n = size_of(w, 0);
  int env = n == 5 && w->n - w->at >= 4 && memcmp(w->p + w->at, "_ENV", 4) == 0;
  if (env) put(w, w->p + start, w->at - start);
  else put(w, (const unsigned char *)"\x80", 1);
  if (n > 0) take(w, n - 1, env);
}

static void function_of(rewrite *w, int depth) {
  if (depth > 200) w->bad = 1;
  string_of(w, 1);                 /* source */
  size_of(w, 1);                   /* linedefined */
  size_of(w, 1);                   /* lastlinedefined */
  take(w, 3, 1);                   /* numparams, is_vararg, maxstacksize */
  size_t n = size_of(w, 1);        /* code */
  take(w, n > SIZE_MAX / 4 ? SIZE_MAX : n * 4, 1);
  n = size_of(w, 1);               /* constants */
  for (size_t k = 0; k < n && !w->bad; k++) {
    unsigned char tag = w->at < w->n ? w->p[w->at] : 0xff;
    take(w, 1, 1);
    if (tag == 0x03 || tag == 0x13) take(w, 8, 1); /* integer, float */
    else if (tag == 0x04 || tag == 0x14) string_of(w, 1); /* short, long string */
    else if (tag != 0x00 && tag != 0x01 && tag != 0x11) w->bad = 1; /* nil, false, true */
  }
  n = size_of(w, 1);               /* upvalues: instack, idx, kind */
  take(w, n > SIZE_MAX / 3 ? SIZE_MAX : n * 3, 1);
  n = size_of(w, 1);               /* nested functions */
  for (size_t k = 0; k < n && !w->bad; k++) function_of(w, depth + 1);
  n = size_of(w, 1);               /* lineinfo */
  take(w, n, 1);
  n = size_of(w, 1);               /* abslineinfo: pc, line */
  for (size_t k = 0; k < n && !w->bad; k++) {
    size_of(w, 1);
    size_of(w, 1);
  }
  n = size_of(w, 0);               /* locvars: name, startpc, endpc -- left out */
  for (size_t k = 0; k < n && !w->bad; k++) {
    string_of(w, 0);
    size_of(w, 0);
    size_of(w, 0);
  }
  put(w, (const unsigned char *)"\x80", 1); /* none */
  n = size_of(w, 1);               /* upvalue names: _ENV's alone kept */
  for (size_t k = 0; k < n && !w->bad; k++) env_name_of(w);
}

/* in: a whole dump; out: the same without those names. 0, or 1. */
static int drop_names(const buffer *in, buffer *out) {
  rewrite w = {in->p, in->n, 0, out, 0};
  take(&w, VB_NAME_AT, 1); /* header and the main function's upvalue count */
  function_of(&w, 0);
  return w.bad || w.at != w.n;
}

/* A file's stamp (builtin.h): its modification time, or -1 when it may
 * not tell a later change (it changed while read, or in the racy window
 * before this run began). */
#define RACY_SECONDS 2
typedef struct {
  int64_t sec, nsec;
} stamp;

static stamp stamp_of(const struct stat *before, const struct stat *after, size_t len,
                      time_t started) {
  stamp none = {-1, 0};
  if (before->st_size != after->st_size || before->st_size < 0 ||
      (size_t)before->st_size != len || before->st_mtim.tv_sec != after->st_mtim.tv_sec ||
      before->st_mtim.tv_nsec != after->st_mtim.tv_nsec ||
      before->st_mtim.tv_sec >= started - RACY_SECONDS)
    return none;
  return (stamp){(int64_t)before->st_mtim.tv_sec, (int64_t)before->st_mtim.tv_nsec};
}

/* path as a C string literal: quotes, backslashes and any byte outside
 * printable ASCII escaped (three octal digits, so no digit follows one) */
static void put_c_string(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
    else if (*p < 0x20 || *p >= 0x7f || *p == '?') fprintf(out, "\\%03o", *p);
    else fputc(*p, out);
  }
  fputc('"', out);
}

/* Writes one file's chunk as array chunk_<i>; returns 0, or 1 with a message. */
static int emit(lua_State *L, FILE *out, int i, const char *path, uint64_t *hash, size_t *len,
                stamp *st, time_t started) {
  int rc = 1;
  buffer b = {NULL, 0, 0}, lean = {NULL, 0, 0};
  struct stat before, after;
  int stated = stat(path, &before) == 0;
  char *src = slurp(path, len);
  if (src && stated && stat(path, &after) == 0) *st = stamp_of(&before, &after, *len, started);
  else *st = (stamp){-1, 0};
  if (!src) {
    fprintf(stderr, "precompile: cannot read %s\n", path);
    goto done;
  }
  /* the loader skips a BOM or a #! line first: such files stay text */
  if (*len && (src[0] == '#' || (unsigned char)src[0] == 0xEF)) {
    fprintf(stderr, "precompile: %s starts with a BOM or #!; not supported\n", path);
    goto done;
  }
  if (luaL_loadbufferx(L, src, *len, VB_PLACEHOLDER, "t") != LUA_OK) {
    fprintf(stderr, "precompile: %s\n", lua_tostring(L, -1));
    goto done;
  }
  if (lua_dump(L, collect, &b, 0) != 0 || b.n < VB_NAME_AT + VB_NAME_LEN ||
      b.p[VB_NAME_AT] != 0x82 || b.p[VB_NAME_AT + 1] != '=') {
    fprintf(stderr, "precompile: %s: unexpected dump layout (not Lua 5.4?)\n", path);
    goto done;
  }
  lua_pop(L, 1);
  /* and Lua's own loader must take what is left */
  if (drop_names(&b, &lean) != 0 ||
      luaL_loadbufferx(L, (const char *)lean.p, lean.n, VB_PLACEHOLDER, "b") != LUA_OK) {
    fprintf(stderr, "precompile: %s: unexpected dump layout (not Lua 5.4's ldump.c?)\n", path);
    goto done;
  }
  lua_pop(L, 1);
  *hash = vb_source_hash(src, *len);
  fprintf(out, "static const unsigned char chunk_%d[] = { /* %s */\n", i, path);
  for (size_t k = 0; k < lean.n; k++)
    fprintf(out, "%u,%s", lean.p[k], k % 24 == 23 ? "\n" : "");
  fprintf(out, "};\n");
  rc = 0;
done:
  free(b.p);
  free(lean.p);
  free(src);
  return rc;
}

int main(int argc, char **argv) {
  int rc = 1;
  FILE *out = NULL;
  uint64_t *hashes = NULL;
  size_t *lens = NULL;
  stamp *stamps = NULL;
  struct timespec now;
  time_t started = clock_gettime(CLOCK_REALTIME, &now) == 0 ? now.tv_sec : 0;
  lua_State *L = luaL_newstate();
  if (argc < 2 || !L) {
    fprintf(stderr, "usage: vramlua_precompile OUT.c FILE.lua...\n");
    goto done;
  }
  int n = argc - 2;
  hashes = calloc((size_t)n + 1, sizeof *hashes);
  lens = calloc((size_t)n + 1, sizeof *lens);
  stamps = calloc((size_t)n + 1, sizeof *stamps);
  out = fopen(argv[1], "w");
  if (!out || !hashes || !lens || !stamps) {
    fprintf(stderr, "precompile: cannot write %s\n", argv[1]);
    goto done;
  }
  fprintf(out, "/* Generated by vramlua_precompile: do not edit. */\n"
               "#include \"builtin.h\"\n\n");
  for (int i = 0; i < n; i++)
    if (emit(L, out, i, argv[i + 2], &hashes[i], &lens[i], &stamps[i], started) != 0)
      goto done;
  fprintf(out, "\nconst vb_builtin_chunk vb_builtin_chunks[] = {\n");
  for (int i = 0; i < n; i++) {
    fprintf(out, "  {%lluu, %zu, chunk_%d, sizeof chunk_%d, ", (unsigned long long)hashes[i],
            lens[i], i, i);
    put_c_string(out, argv[i + 2]);
    fprintf(out, ", %zu, %lld, %lld},\n", strlen(argv[i + 2]), (long long)stamps[i].sec,
            (long long)stamps[i].nsec);
  }
  if (n == 0) fprintf(out, "  {0, 0, NULL, 0, \"\", 0, -1, 0},\n");
  fprintf(out, "};\nconst size_t vb_builtin_count = %d;\n", n);
  rc = ferror(out) ? 1 : 0;
done:
  if (out && fclose(out) != 0) rc = 1;
  if (rc != 0 && argc >= 2) remove(argv[1]);
  free(hashes);
  free(lens);
  free(stamps);
  if (L) lua_close(L);
  return rc;
}
