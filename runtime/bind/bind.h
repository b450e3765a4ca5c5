/* Shared helpers of the thin Lua bindings over runtime/core. */
#ifndef VRAM_BIND_H
#define VRAM_BIND_H

#include <lauxlib.h>
#include <lua.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../core/dtype.h"

#define VRAM_VERSION "0.1.0"
#define VRAM_VERSION_MAJOR 0
#define VRAM_VERSION_MINOR 1

/* An integer argument >= min; names the argument and the value otherwise. */
int64_t vb_checkint(lua_State *L, int arg, int64_t min, const char *what);
const vr_dtype *vb_checkdtype(lua_State *L, int arg);
/* Raises "<fn>: <what> overflows int64" at the caller's line. */
int vb_overflow(lua_State *L, const char *fn, const char *what);

int luaopen_vram(lua_State *L);
void vb_open_tape(lua_State *L);   /* adds vram.tape to the table on top */
void vb_open_terms(lua_State *L);  /* adds the closed-form terms */
void vb_open_canon(lua_State *L);  /* adds vram.canonical (lcanon.c) */
void vb_open_trace(lua_State *L);  /* adds vram.fit_program (compiled estimates) */
void vb_open_write(lua_State *L);  /* adds vram.write_file (lwrite.c) */
struct vr_trace;
/* Pushes an empty vram.trace and returns its slot (ltape.c fills it: the
 * box exists before the trace leaves the tape, so no error can leak it). */
struct vr_trace **vb_push_trace_box(lua_State *L);
int vb_open_json(lua_State *L);    /* pushes the vram.json table */
int vb_open_yaml(lua_State *L);    /* pushes the vram.yaml table */
int vb_open_text(lua_State *L);    /* pushes the vram.text table (lfiles.c) */

/* Shared by the loaders (runtime/loaders/ljson.c). */
void *vb_json_null(void);                       /* the null sentinel */
/* Opens path read-only if it is a regular file (never blocks on a FIFO or
 * device): a descriptor, or -1 with *why a message ("cannot open: <errno
 * text>", "is a directory", "not a regular file (a FIFO, device or
 * socket)"). Every file a script's data or code comes from is opened here
 * (lfiles.c). */
int vb_open_regular(const char *path, const char **why, int64_t *size);
void vb_read_file(lua_State *L, const char *path); /* pushes the contents */
/* Loads a Lua text chunk from a regular file (a leading #! line skipped,
 * as luaL_loadfilex does); pushes the function, or raises. */
void vb_load_lua_file(lua_State *L, const char *path);
size_t vb_utf8_seq(const unsigned char *s, size_t n);

/* A string by its bytes (the stack holds it), and Lua's `<` on two such
 * without zero bytes: bytewise, the C locale's strcoll (vramlua sets no
 * locale), the shorter first on a common prefix. vb_bytes_cmp: qsort's. */
typedef struct {
  const char *s;
  size_t n;
} vb_bytes;
static inline int vb_bytes_order(const char *a, size_t la, const char *b, size_t lb) {
  int c = memcmp(a, b, la < lb ? la : lb);
  return c ? c : (la > lb) - (la < lb);
}
static inline int vb_bytes_cmp(const void *pa, const void *pb) {
  const vb_bytes *a = (const vb_bytes *)pa, *b = (const vb_bytes *)pb;
  return vb_bytes_order(a->s, a->n, b->s, b->n);
}

/* u's decimal digits written backward ending just before `end`; returns
 * where they begin (at most 20 characters). printf took ~700 instructions
 * a number where a key or a figure writes thousands of them. */
static inline char *vb_digits(char *end, uint64_t u) {
  do *--end = (char)('0' + u % 10); while ((u /= 10) > 0);
  return end;
}
/* Raises unless a sandboxed script may read path (lfiles.c, lfiles.h). */
void vb_check_read(lua_State *L, const char *path);

#endif
