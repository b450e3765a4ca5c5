/* Overflow-checked 64-bit size arithmetic. No Lua here: the bindings turn a
 * false return into a Lua error that names the operation and the operands. */
#ifndef VRAM_CHECKED_H
#define VRAM_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

static inline bool vr_add(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

static inline bool vr_sub(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_sub_overflow(a, b, out);
}

static inline bool vr_mul(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

/* ceil(a / b) for a >= 0, b > 0 */
static inline int64_t vr_ceil_div(int64_t a, int64_t b) {
  return a / b + (a % b != 0);
}

/* The one rounding of a byte count to an allocator block: |x| rounded up to
 * a multiple of `to`, sign kept (a free of a block is minus the block);
 * `to` <= 0 leaves x as it is. False when the block does not fit in int64. */
static inline bool vr_round_up(int64_t x, int64_t to, int64_t *out) {
  if (to <= 0 || x % to == 0) {
    *out = x;
    return true;
  }
  int64_t pad = to - (x < 0 ? -(x % to) : x % to);
  return x < 0 ? vr_sub(x, pad, out) : vr_add(x, pad, out);
}

#endif
