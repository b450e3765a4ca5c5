/* The built-in Lua (stdlib/, models/, scripts/) precompiled at build time
 * (runtime/host/precompile.c), so a process does not parse it again. A chunk
 * is used only for a file whose bytes are exactly the source it was compiled
 * from (length and hash); any other file, a user's script included, is
 * loaded as text. The file at the very path the build read, whose size and
 * modification time are still those the build saw, is that source without
 * being read again (CPython trusts its .pyc files the same way): a process
 * then skips an open, a read and the hash of each module. The build leaves
 * the stamp out for a file modified in the two seconds before it ran (the
 * kernel's file clock ticks coarsely: a change in the same tick would keep
 * the time). No lua.h: the build tool shares this header. */
#ifndef VRAM_BUILTIN_H
#define VRAM_BUILTIN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
  uint64_t hash;              /* vb_source_hash of the source text */
  size_t source_len;          /* its length in bytes */
  const unsigned char *code;  /* lua_dump output, chunk name VB_PLACEHOLDER */
  size_t code_len;
  const char *path;           /* the file the build read, as the build named it */
  size_t path_len;
  int64_t mtime_sec, mtime_nsec; /* its modification time then; mtime_sec < 0: no stamp */
} vb_builtin_chunk;

/* The chunk name compiled in; the loader puts "@path" in its place. In a
 * Lua 5.4 dump the main function's source name follows the 31-byte header
 * and the upvalue count: "=" is stored there as size 2 (0x82) and '='. The
 * build tool checks that layout and fails the build on any other. */
#define VB_PLACEHOLDER "="
#define VB_NAME_AT 32
#define VB_NAME_LEN 2

/* FNV-1a over 64-bit words in four independent lanes (then the tail
 * words and bytes into the first), with a shift to mix high bits down, the
 * lanes folded at the end: four multiplications in flight rather than one
 * chain of them (each file a process loads is hashed whole). To recognise
 * unchanged built-in files, not to defend against anyone (what matches is
 * our own trusted bytecode either way). Built and run on one machine, so
 * the word order is the same for both. */
static inline uint64_t vb_source_hash(const char *s, size_t n) {
  const uint64_t prime = 1099511628211u;
  uint64_t h[4] = {14695981039346656037u ^ (uint64_t)n, 0x9e3779b97f4a7c15u,
                   0xc2b2ae3d27d4eb4fu, 0x165667b19e3779f9u};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 4; l++) {
      uint64_t w = 0;
      memcpy(&w, s + i + 8 * l, 8);
      h[l] = (h[l] ^ w) * prime;
      h[l] ^= h[l] >> 29;
    }
  for (; i + 8 <= n; i += 8) {
    uint64_t w = 0;
    memcpy(&w, s + i, 8);
    h[0] = (h[0] ^ w) * prime;
    h[0] ^= h[0] >> 29;
  }
  for (; i < n; i++) h[0] = (h[0] ^ (unsigned char)s[i]) * prime;
  for (int l = 1; l < 4; l++) {
    h[0] = (h[0] ^ h[l]) * prime;
    h[0] ^= h[0] >> 29;
  }
  return h[0];
}

/* The generated table (built into the vramlua executable only). */
extern const vb_builtin_chunk vb_builtin_chunks[];
extern const size_t vb_builtin_count;

/* Installs the table vb_load_lua_file consults (main.c, once, before any
 * state exists). Without it every file is loaded as text. */
void vb_use_builtin_chunks(const vb_builtin_chunk *chunks, size_t n);
/* How many Lua files this process loaded precompiled (of them, by their
 * stamp alone) and as text. */
void vb_lua_file_counts(size_t *precompiled, size_t *stamped, size_t *text);

#endif
