/* Where runtime/core gets its memory. A vr_mem is an allocator with Lua's
 * lua_Alloc signature, so a binding hands over the Lua state's own
 * allocator (lua_getallocf) and the host's memory budget counts the tape's
 * and the programs' C memory with the Lua heap. fn NULL: the C library.
 * Every free passes the block's exact size, which budgets rely on. */
#ifndef VRAM_MEM_H
#define VRAM_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef void *(*vr_allocf)(void *ud, void *ptr, size_t osize, size_t nsize);

typedef struct {
  vr_allocf fn;
  void *ud;
} vr_mem;

static inline void *vr_mem_resize(const vr_mem *m, void *p, size_t old, size_t size) {
  if (m->fn) return m->fn(m->ud, p, p ? old : 0, size);
  if (size == 0) {
    free(p);
    return NULL;
  }
  return realloc(p, size);
}

/* n >= 1 elements of `elem` bytes (freed with n * elem); NULL when out of
 * memory or when n * elem wraps. */
static inline void *vr_mem_array(const vr_mem *m, size_t n, size_t elem) {
  size_t size = 0;
  if (n == 0 || __builtin_mul_overflow(n, elem, &size) || size > (size_t)PTRDIFF_MAX)
    return NULL;
  return vr_mem_resize(m, NULL, 0, size);
}

static inline void vr_mem_free(const vr_mem *m, void *p, size_t size) {
  if (p) vr_mem_resize(m, p, size, 0);
}

/* Grows an array of `elem`-byte items to hold `need`, doubling from
 * `first`; false (array unchanged) when out of memory or when a capacity
 * or its byte size would not fit (never wraps to a smaller array). */
static inline int vr_mem_grow(const vr_mem *m, void **v, size_t *cap, size_t need, size_t elem,
                              size_t first) {
  size_t nc = *cap ? *cap : first, bytes = 0;
  if (need <= *cap) return 1;
  while (nc < need) {
    if (nc > SIZE_MAX / 2) return 0;
    nc *= 2;
  }
  if (__builtin_mul_overflow(nc, elem, &bytes) || bytes > (size_t)PTRDIFF_MAX) return 0;
  void *p = vr_mem_resize(m, *v, *cap * elem, bytes);
  if (!p) return 0;
  *v = p;
  *cap = nc;
  return 1;
}

#endif
