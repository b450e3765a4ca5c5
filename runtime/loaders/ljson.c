/* vram.json: a strict RFC 8259 decoder of our own (exact int64, line:col
 * errors) and an encoder that builds a cJSON tree.
 *
 *   vram.json.decode(text [, chunkname]) -> value
 *   vram.json.load(path)                 -> value (chunkname = path)
 *   vram.json.encode(value [, indent])   -> string
 *   vram.json.null                       -> the null sentinel
 *
 * JSON null decodes to vram.json.null, a light userdata, so that object
 * members and array slots holding null survive in Lua tables; encode turns
 * it (and a top-level nil) back into null. vram.yaml uses the same value.
 *
 * Decoding: numbers without fraction or exponent that fit int64 become Lua
 * integers exactly, every other number a float; a float that overflows is an
 * error. Objects become tables with string keys (duplicate keys: the last
 * wins), arrays 1-based sequences. A leading UTF-8 byte order mark is
 * skipped. Strings must be valid UTF-8; \u escapes must pair surrogates.
 * Errors in the data read "CHUNK:LINE:COL: json: <what>" (column in
 * characters, both 1-based) and carry no Lua position, since the location
 * that matters is in the data.
 *
 * Encoding: a table whose keys are exactly 1..n (n >= 1) is an array, any
 * other table (the empty one included) an object whose keys must be strings
 * and are written sorted bytewise, so output is stable. Integers are written
 * exactly, floats as the shortest "%.15g".."%.17g" that reads back to the
 * same double, always with a '.' or exponent so they decode as floats.
 * Strings must be valid UTF-8. Errors (cycles, nesting deeper than 200,
 * NaN/inf, bad keys, functions...) carry the calling script's position.
 *
 * Resources held while a Lua error may be raised (the cJSON tree, the printed
 * text, an open FILE and its buffer) live in userdata with __close and __gc,
 * marked to-be-closed, so errors never leak them. */
#define _POSIX_C_SOURCE 200809L /* fileno, fstat */

#include <cjson/cJSON.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../bind/bind.h"

/* Shared with lyaml.c, declared in bind.h. */

#define JSON_MAX_DEPTH 200
#define FILE_MAX_BYTES ((size_t)64 << 20)

static const char null_sentinel = 0;

void *vb_json_null(void) { return (void *)&null_sentinel; }

/* Length (1..4) of the valid UTF-8 sequence at s (n > 0 bytes available), 0
 * when it is invalid: overlong forms, surrogates and > U+10FFFF rejected. */
size_t vb_utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  if (c < 0xE0) return (n >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
  if (c < 0xF0) {
    if (n < 3 || (s[2] & 0xC0) != 0x80) return 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    return (s[1] >= lo && s[1] <= hi) ? 3 : 0;
  }
  if (c < 0xF5) {
    if (n < 4 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    return (s[1] >= lo && s[1] <= hi) ? 4 : 0;
  }
  return 0;
}

/* ---- reading a file ---------------------------------------------------- */

typedef struct {
  FILE *f;
} file_box;

static int file_box_close(lua_State *L) {
  file_box *b = (file_box *)lua_touserdata(L, 1);
  if (b) {
    if (b->f) fclose(b->f);
    b->f = NULL;
  }
  return 0;
}

/* Raises a message with no Lua position prepended. */
static int raw_error(lua_State *L, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  return lua_error(L);
}

/* Opens path (a regular file only: vb_open_regular, since a FIFO or device
 * would block or never end) into a to-be-closed box pushed at *slot, so the
 * FILE is closed on every path, errors included; *size: its size when
 * opened. Raises "PATH: <why>". */
static FILE *open_boxed(lua_State *L, const char *path, int *slot, int64_t *size) {
  luaL_checkstack(L, 4, "reading a file");
  *slot = lua_gettop(L) + 1;
  file_box *b = (file_box *)lua_newuserdatauv(L, sizeof *b, 0);
  b->f = NULL;
  if (luaL_newmetatable(L, "vram.file_box")) {
    lua_pushcfunction(L, file_box_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, file_box_close);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  lua_toclose(L, *slot);

  const char *why = NULL;
  int fd = vb_open_regular(path, &why, size);
  if (fd < 0) raw_error(L, "%s: %s", path, why);
  b->f = fdopen(fd, "rb");
  if (!b->f) {
    int e = errno;
    close(fd);
    raw_error(L, "%s: cannot open: %s", path, strerror(e));
  }
  return b->f;
}

/* Reads f into a Lua buffer and pushes the string: to its end, raising
 * "PATH: larger than WHAT" past `limit` bytes (what == NULL: exactly `limit`
 * bytes or fewer at the end of the file). Raises on read errors. The bytes
 * go into a Lua buffer, so they count against the memory budget. hint: the
 * file's size when opened (< 0: unknown), asked for first with a byte more:
 * a short read is the end (fread), so a file that did not grow is read
 * into a buffer of its size, not a 64 KiB one (a spec is a few hundred
 * bytes). */
static size_t read_into(lua_State *L, FILE *f, size_t limit, const char *path,
                        const char *what, int64_t hint) {
  luaL_Buffer buf;
  luaL_buffinit(L, &buf);
  size_t len = 0;
  for (;;) {
    if (!what && len == limit) break;
    size_t left = limit - len + (what ? 1 : 0);
    size_t want = left < 65536 ? left : 65536;
    if (len == 0 && hint >= 0 && (uint64_t)hint < want) want = (size_t)hint + 1;
    char *p = luaL_prepbuffsize(&buf, want);
    errno = 0;
    size_t got = fread(p, 1, want, f);
    luaL_addsize(&buf, got);
    len += got;
    if (len > limit) raw_error(L, "%s: larger than %s", path, what);
    if (got < want) {
      if (ferror(f)) {
        int e = errno;
        raw_error(L, "%s: read error: %s", path, strerror(e ? e : EIO));
      }
      break;
    }
  }
  luaL_pushresult(&buf);
  return len;
}

/* Pushes the whole contents of path as a string. Errors "PATH: cannot open:
 * <why>", "PATH: is a directory", "PATH: not a regular file", "PATH: larger
 * than 64 MiB", "PATH: read error: <why>". */
void vb_read_file(lua_State *L, const char *path) {
  int slot = 0;
  int64_t size = -1;
  FILE *f = open_boxed(L, path, &slot, &size);
  read_into(L, f, FILE_MAX_BYTES, path, "64 MiB", size);
  lua_closeslot(L, slot); /* closes now; the slot holds nil */
  lua_remove(L, slot);
}

/* ---- decoding ------------------------------------------------------------ */

typedef struct {
  lua_State *L;
  const unsigned char *s;
  size_t n, pos;
  const char *chunk;
  int depth;
} jparser;

/* Raises "CHUNK:LINE:COL: json: <msg>" for byte offset at. */
static int jfail(jparser *p, size_t at, const char *fmt, ...) {
  char msg[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  long line = 1, col = 1;
  if (at > p->n) at = p->n;
  for (size_t i = 0; i < at; i++) {
    if (p->s[i] == '\n') {
      line++;
      col = 1;
    } else if ((p->s[i] & 0xC0) != 0x80) {
      col++;
    }
  }
  lua_pushfstring(p->L, "%s:%d:%d: json: %s", p->chunk, (int)line, (int)col, msg);
  return lua_error(p->L);
}

/* Describes what is at offset at: "'x'", "byte 0xNN" or "end of input". */
static const char *what_at(jparser *p, size_t at, char buf[32]) {
  if (at >= p->n) return "end of input";
  unsigned c = p->s[at];
  if (c > 0x20 && c < 0x7F)
    snprintf(buf, 32, "'%c'", (char)c);
  else if (c == ' ')
    snprintf(buf, 32, "' '");
  else
    snprintf(buf, 32, "byte 0x%02X", c);
  return buf;
}

static void skip_ws(jparser *p) {
  while (p->pos < p->n) {
    unsigned char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static int hexval(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Four hex digits at p->pos (just after "\u"); -1 if malformed. */
static long hex4(jparser *p) {
  if (p->n - p->pos < 4) return -1;
  long v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(p->s[p->pos + (size_t)i]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  p->pos += 4;
  return v;
}

static void add_utf8(luaL_Buffer *b, unsigned long cp) {
  char u[4];
  size_t k;
  if (cp < 0x80) {
    u[0] = (char)cp;
    k = 1;
  } else if (cp < 0x800) {
    u[0] = (char)(0xC0 | (cp >> 6));
    u[1] = (char)(0x80 | (cp & 0x3F));
    k = 2;
  } else if (cp < 0x10000) {
    u[0] = (char)(0xE0 | (cp >> 12));
    u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    u[2] = (char)(0x80 | (cp & 0x3F));
    k = 3;
  } else {
    u[0] = (char)(0xF0 | (cp >> 18));
    u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    u[3] = (char)(0x80 | (cp & 0x3F));
    k = 4;
  }
  luaL_addlstring(b, u, k);
}

/* p->s[p->pos] == '"'; pushes the decoded string. */
static void parse_string(jparser *p) {
  size_t open = p->pos++;
  size_t run = p->pos; /* start of the pending unescaped run */
  int buffered = 0;
  luaL_Buffer b;
  for (;;) {
    if (p->pos >= p->n) {
      jfail(p, open, "unterminated string");
      return;
    }
    unsigned char c = p->s[p->pos];
    if (c == '"') {
      if (!buffered) {
        lua_pushlstring(p->L, (const char *)p->s + run, p->pos - run);
      } else {
        luaL_addlstring(&b, (const char *)p->s + run, p->pos - run);
        luaL_pushresult(&b);
      }
      p->pos++;
      return;
    }
    if (c < 0x20) {
      if (c == '\n' || c == '\r')
        jfail(p, open, "unterminated string");
      else
        jfail(p, p->pos, "control character 0x%02X in string (escape it)", c);
      return;
    }
    if (c >= 0x80) {
      size_t k = vb_utf8_seq(p->s + p->pos, p->n - p->pos);
      if (!k) {
        jfail(p, p->pos, "invalid UTF-8 in string");
        return;
      }
      p->pos += k;
      continue;
    }
    if (c != '\\') {
      p->pos++;
      continue;
    }
    /* an escape: flush the run into the buffer */
    if (!buffered) {
      luaL_buffinit(p->L, &b);
      buffered = 1;
    }
    luaL_addlstring(&b, (const char *)p->s + run, p->pos - run);
    size_t esc = p->pos++;
    if (p->pos >= p->n) {
      jfail(p, open, "unterminated string");
      return;
    }
    unsigned char e = p->s[p->pos++];
    switch (e) {
      case '"': luaL_addchar(&b, '"'); break;
      case '\\': luaL_addchar(&b, '\\'); break;
      case '/': luaL_addchar(&b, '/'); break;
      case 'b': luaL_addchar(&b, '\b'); break;
      case 'f': luaL_addchar(&b, '\f'); break;
      case 'n': luaL_addchar(&b, '\n'); break;
      case 'r': luaL_addchar(&b, '\r'); break;
      case 't': luaL_addchar(&b, '\t'); break;
      case 'u': {
        long cp = hex4(p);
        if (cp < 0) {
          jfail(p, esc, "invalid \\u escape (needs 4 hex digits)");
          return;
        }
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
          jfail(p, esc, "unpaired surrogate in \\u escape");
          return;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          long lo = -1;
          if (p->n - p->pos >= 2 && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u') {
            p->pos += 2;
            lo = hex4(p);
          }
          if (lo < 0xDC00 || lo > 0xDFFF) {
            jfail(p, esc, "unpaired surrogate in \\u escape");
            return;
          }
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        add_utf8(&b, (unsigned long)cp);
        break;
      }
      default: {
        char buf[32];
        if (e > 0x20 && e < 0x7F)
          snprintf(buf, sizeof buf, "'\\%c'", (char)e);
        else
          snprintf(buf, sizeof buf, "(byte 0x%02X)", e);
        jfail(p, esc, "invalid escape %s", buf);
        return;
      }
    }
    run = p->pos;
  }
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* Python's json.dump writes float('inf') and float('nan') as Infinity,
 * -Infinity and NaN (allow_nan=True, its default), and such configs are
 * published (Nemotron-H's time_step_limit). They are not JSON, and no value
 * stands in for them safely, so they stay refused, but by name and with
 * what to do. Checks the bytes at `at` only, within n. */
static void refuse_non_finite(jparser *p, size_t at) {
  static const char *const words[] = {"-Infinity", "Infinity", "NaN"};
  for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
    size_t k = strlen(words[w]);
    if (p->n - at >= k && memcmp(p->s + at, words[w], k) == 0)
      jfail(p, at,
            "%s is not JSON (Python's json.dump writes it for a non-finite float): "
            "replace it with a finite number or null",
            words[w]);
  }
}

/* Pushes the number at p->pos: an integer when it has no fraction or
 * exponent and fits int64, a float otherwise. */
static void parse_number(jparser *p) {
  size_t start = p->pos, i = p->pos;
  const unsigned char *s = p->s;
  int neg = 0, isint = 1;
  if (s[i] == '-') {
    neg = 1;
    i++;
  }
  if (i < p->n && s[i] == '0') {
    i++;
    if (i < p->n && is_digit(s[i])) {
      jfail(p, start, "invalid number (leading zero)");
      return;
    }
  } else if (i < p->n && is_digit(s[i])) {
    while (i < p->n && is_digit(s[i])) i++;
  } else {
    refuse_non_finite(p, start);
    jfail(p, start, "invalid number");
    return;
  }
  size_t int_end = i;
  if (i < p->n && s[i] == '.') {
    i++;
    if (i >= p->n || !is_digit(s[i])) {
      jfail(p, start, "invalid number (digit expected after '.')");
      return;
    }
    while (i < p->n && is_digit(s[i])) i++;
    isint = 0;
  }
  if (i < p->n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < p->n && (s[i] == '+' || s[i] == '-')) i++;
    if (i >= p->n || !is_digit(s[i])) {
      jfail(p, start, "invalid number (digit expected in exponent)");
      return;
    }
    while (i < p->n && is_digit(s[i])) i++;
    isint = 0;
  }
  p->pos = i;

  if (isint) {
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX, v = 0;
    int ok = 1;
    for (size_t k = start + (size_t)neg; k < int_end; k++) {
      unsigned d = (unsigned)(s[k] - '0');
      if (v > (limit - d) / 10) {
        ok = 0;
        break;
      }
      v = v * 10 + d;
    }
    if (ok) {
      lua_Integer r;
      if (neg)
        r = v == (uint64_t)INT64_MAX + 1u ? (lua_Integer)INT64_MIN : -(lua_Integer)v;
      else
        r = (lua_Integer)v;
      lua_pushinteger(p->L, r);
      return;
    }
    /* beyond int64: falls through to a float */
  }

  size_t len = i - start;
  char small[128];
  char *buf = small;
  if (len >= sizeof small) buf = (char *)lua_newuserdatauv(p->L, len + 1, 0);
  memcpy(buf, s + start, len);
  buf[len] = '\0';
  char dp = localeconv()->decimal_point[0];
  if (dp != '.') {
    char *dot = strchr(buf, '.');
    if (dot) *dot = dp;
  }
  char *end = NULL;
  double d = strtod(buf, &end);
  int bad = end != buf + len;
  if (buf != small) lua_pop(p->L, 1);
  if (bad) {
    jfail(p, start, "invalid number");
    return;
  }
  if (isinf(d)) {
    jfail(p, start, "number out of range");
    return;
  }
  lua_pushnumber(p->L, (lua_Number)d);
}

static void parse_value(jparser *p);

static void parse_literal(jparser *p, const char *word) {
  size_t k = strlen(word);
  if (p->n - p->pos < k || memcmp(p->s + p->pos, word, k) != 0) {
    char buf[32];
    jfail(p, p->pos, "unexpected %s (did you mean '%s'?)", what_at(p, p->pos, buf), word);
  }
  p->pos += k;
}

static void enter(jparser *p) {
  if (++p->depth > JSON_MAX_DEPTH) jfail(p, p->pos, "nesting deeper than %d", JSON_MAX_DEPTH);
  luaL_checkstack(p->L, 8, "json nesting");
}

static void parse_array(jparser *p) {
  char buf[32];
  enter(p);
  p->pos++; /* '[' */
  lua_newtable(p->L);
  lua_Integer i = 0;
  skip_ws(p);
  if (p->pos < p->n && p->s[p->pos] == ']') {
    p->pos++;
    p->depth--;
    return;
  }
  for (;;) {
    skip_ws(p);
    parse_value(p);
    lua_rawseti(p->L, -2, ++i);
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == ',') {
      p->pos++;
      continue;
    }
    if (p->pos < p->n && p->s[p->pos] == ']') {
      p->pos++;
      break;
    }
    jfail(p, p->pos, "expected ',' or ']' but found %s", what_at(p, p->pos, buf));
  }
  p->depth--;
}

static void parse_object(jparser *p) {
  char buf[32];
  enter(p);
  p->pos++; /* '{' */
  lua_newtable(p->L);
  skip_ws(p);
  if (p->pos < p->n && p->s[p->pos] == '}') {
    p->pos++;
    p->depth--;
    return;
  }
  for (;;) {
    skip_ws(p);
    if (p->pos >= p->n || p->s[p->pos] != '"')
      jfail(p, p->pos, "expected a string key but found %s", what_at(p, p->pos, buf));
    parse_string(p);
    skip_ws(p);
    if (p->pos >= p->n || p->s[p->pos] != ':')
      jfail(p, p->pos, "expected ':' after key but found %s", what_at(p, p->pos, buf));
    p->pos++;
    skip_ws(p);
    parse_value(p);
    lua_rawset(p->L, -3); /* duplicate keys: the last wins */
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == ',') {
      p->pos++;
      continue;
    }
    if (p->pos < p->n && p->s[p->pos] == '}') {
      p->pos++;
      break;
    }
    jfail(p, p->pos, "expected ',' or '}' but found %s", what_at(p, p->pos, buf));
  }
  p->depth--;
}

/* Parses one value at p->pos (whitespace already skipped) and pushes it. */
static void parse_value(jparser *p) {
  char buf[32];
  if (p->pos >= p->n) {
    jfail(p, p->pos, "unexpected end of input");
    return;
  }
  unsigned char c = p->s[p->pos];
  switch (c) {
    case '{': parse_object(p); break;
    case '[': parse_array(p); break;
    case '"': parse_string(p); break;
    case 't':
      parse_literal(p, "true");
      lua_pushboolean(p->L, 1);
      break;
    case 'f':
      parse_literal(p, "false");
      lua_pushboolean(p->L, 0);
      break;
    case 'n':
      parse_literal(p, "null");
      lua_pushlightuserdata(p->L, vb_json_null());
      break;
    default:
      if (c == '-' || is_digit(c)) {
        parse_number(p);
      } else {
        refuse_non_finite(p, p->pos);
        jfail(p, p->pos, "unexpected %s", what_at(p, p->pos, buf));
      }
  }
}

/* Decodes s[0..n) and pushes the value. */
static int decode_text(lua_State *L, const char *s, size_t n, const char *chunk) {
  jparser p = {L, (const unsigned char *)s, n, 0, chunk, 0};
  char buf[32];
  if (n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) p.pos = 3;
  skip_ws(&p);
  if (p.pos >= p.n) return jfail(&p, p.pos, "empty input");
  parse_value(&p);
  skip_ws(&p);
  if (p.pos < p.n)
    return jfail(&p, p.pos, "trailing characters after the value (%s)", what_at(&p, p.pos, buf));
  return 1;
}

/* json.decode(text [, chunkname]) */
static int l_decode(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  const char *chunk = luaL_optstring(L, 2, "json");
  return decode_text(L, s, n, chunk);
}

/* json.load(path) */
static int l_load(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  vb_check_read(L, path);
  lua_settop(L, 1);
  vb_read_file(L, path);
  size_t n;
  const char *s = lua_tolstring(L, 2, &n);
  return decode_text(L, s, n, path);
}

/* The safetensors format caps its JSON header at 100 MB. */
#define ST_HEADER_MAX ((uint64_t)100000000)

/* json.safetensors_header(path): the JSON header of a .safetensors file
 * (every tensor's dtype, shape and offsets, and __metadata__), decoded. The
 * file starts with an unsigned 64-bit little-endian length N and N bytes of
 * JSON; only those bytes are read, never the tensors. */
static int l_st_header(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  vb_check_read(L, path);
  lua_settop(L, 1);
  int slot = 0;
  FILE *f = open_boxed(L, path, &slot, NULL);
  unsigned char len8[8];
  if (fread(len8, 1, 8, f) != 8)
    return raw_error(L, "%s: not a safetensors file (shorter than the 8-byte header length)",
                     path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | len8[i];
  char num[64]; /* lua_pushfstring has no 64-bit unsigned format */
  if (n < 2 || n > ST_HEADER_MAX) {
    snprintf(num, sizeof num, "%llu", (unsigned long long)n);
    return raw_error(L,
                     "%s: not a safetensors file (header length %s; the format allows "
                     "2 to 100000000 bytes)",
                     path, num);
  }
  size_t got = read_into(L, f, (size_t)n, path, NULL, -1);
  if (got != (size_t)n) {
    snprintf(num, sizeof num, "%zu of %llu", got, (unsigned long long)n);
    return raw_error(L, "%s: not a safetensors file (the header is cut short: %s bytes)", path,
                     num);
  }
  lua_closeslot(L, slot);
  lua_remove(L, slot);
  size_t len;
  const char *s = lua_tolstring(L, -1, &len);
  return decode_text(L, s, len, path);
}

/* ---- encoding ------------------------------------------------------------ */

typedef struct {
  cJSON *root;
  char *out;
} json_box;

static int json_box_close(lua_State *L) {
  json_box *b = (json_box *)lua_touserdata(L, 1);
  if (b) {
    if (b->root) cJSON_Delete(b->root);
    if (b->out) cJSON_free(b->out);
    b->root = NULL;
    b->out = NULL;
  }
  return 0;
}

typedef struct {
  lua_State *L;
  json_box *box;
  int visited; /* stack index of the set of tables being encoded */
} jenc;

/* Attaches a fresh item (NULL = allocation failed) under parent. */
static void attach(jenc *e, cJSON *parent, const char *key, cJSON *item) {
  if (!item) luaL_error(e->L, "json.encode: out of memory");
  if (!parent) {
    e->box->root = item;
    return;
  }
  cJSON_bool ok = key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item);
  if (!ok) {
    cJSON_Delete(item);
    luaL_error(e->L, "json.encode: out of memory");
  }
}

static void check_utf8(lua_State *L, const char *s, size_t n, const char *what) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    size_t k = vb_utf8_seq(u + i, n - i);
    if (!k) luaL_error(L, "json.encode: %s is not valid UTF-8 (byte %d)", what, (int)(i + 1));
    i += k;
  }
}

/* Pushes the JSON text (quotes included) of the Lua string s. */
static void push_quoted(lua_State *L, const char *s, size_t n) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '"');
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    switch (c) {
      case '"': luaL_addstring(&b, "\\\""); break;
      case '\\': luaL_addstring(&b, "\\\\"); break;
      case '\b': luaL_addstring(&b, "\\b"); break;
      case '\f': luaL_addstring(&b, "\\f"); break;
      case '\n': luaL_addstring(&b, "\\n"); break;
      case '\r': luaL_addstring(&b, "\\r"); break;
      case '\t': luaL_addstring(&b, "\\t"); break;
      default:
        if (c < 0x20) {
          char u[8];
          snprintf(u, sizeof u, "\\u%04X", c);
          luaL_addstring(&b, u);
        } else {
          luaL_addchar(&b, (char)c);
        }
    }
  }
  luaL_addchar(&b, '"');
  luaL_pushresult(&b);
}

/* The shortest of %.15g..%.17g that reads back to d, in C-locale form and
 * with a '.' or exponent so that it decodes as a float. */
static void format_float(double d, char out[40]) {
  char dp = localeconv()->decimal_point[0];
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(out, 40, "%.*g", prec, d);
    if (strtod(out, NULL) == d) break;
  }
  if (dp != '.') {
    char *q = strchr(out, dp);
    if (q) *q = '.';
  }
  if (!strpbrk(out, ".eE")) strcat(out, ".0");
}

static void encode_value(jenc *e, int idx, cJSON *parent, const char *key, int depth);

static void encode_table(jenc *e, int t, cJSON *parent, const char *key, int depth) {
  lua_State *L = e->L;
  if (depth > JSON_MAX_DEPTH) luaL_error(L, "json.encode: nesting deeper than %d", JSON_MAX_DEPTH);
  luaL_checkstack(L, 8, "json.encode nesting");
  lua_pushvalue(L, t);
  if (lua_rawget(L, e->visited) != LUA_TNIL)
    luaL_error(L, "json.encode: cycle detected (a table contains itself)");
  lua_pop(L, 1);
  lua_pushvalue(L, t);
  lua_pushboolean(L, 1);
  lua_rawset(L, e->visited);

  /* classify the keys */
  size_t nstr = 0, nint = 0;
  lua_Integer imin = 0, imax = 0;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    int kt = lua_type(L, -1);
    if (kt == LUA_TSTRING) {
      nstr++;
    } else if (kt == LUA_TNUMBER && lua_isinteger(L, -1)) {
      lua_Integer k = lua_tointeger(L, -1);
      if (nint == 0 || k < imin) imin = k;
      if (nint == 0 || k > imax) imax = k;
      nint++;
    } else if (kt == LUA_TNUMBER) {
      luaL_error(L, "json.encode: table key %s is not an integer or a string",
                 lua_tostring(L, -1));
    } else {
      luaL_error(L, "json.encode: table key of type %s is not allowed (strings and 1..n only)",
                 luaL_typename(L, -1));
    }
  }
  if (nstr && nint) luaL_error(L, "json.encode: table mixes array and object keys");

  if (nint) {
    if (imin != 1 || (uint64_t)imax != (uint64_t)nint)
      luaL_error(L, "json.encode: integer keys are not 1..n (sparse array: %d keys, max %I)",
                 (int)nint, imax);
    cJSON *arr = cJSON_CreateArray();
    attach(e, parent, key, arr);
    for (lua_Integer i = 1; i <= imax; i++) {
      lua_rawgeti(L, t, i);
      encode_value(e, lua_gettop(L), arr, NULL, depth);
      lua_pop(L, 1);
    }
  } else {
    cJSON *obj = cJSON_CreateObject();
    attach(e, parent, key, obj);
    if (nstr) {
      if (nstr > ((size_t)-1) / sizeof(vb_bytes)) luaL_error(L, "json.encode: out of memory");
      vb_bytes *keys = (vb_bytes *)lua_newuserdatauv(L, nstr * sizeof(vb_bytes), 0);
      int kidx = lua_gettop(L);
      size_t k = 0;
      lua_pushnil(L);
      while (lua_next(L, t)) {
        lua_pop(L, 1);
        keys[k].s = lua_tolstring(L, -1, &keys[k].n); /* alive: a key of t */
        k++;
      }
      qsort(keys, nstr, sizeof(vb_bytes), vb_bytes_cmp); /* keys in bytewise order */
      for (k = 0; k < nstr; k++) {
        if (memchr(keys[k].s, '\0', keys[k].n))
          luaL_error(L, "json.encode: object key contains a NUL byte");
        check_utf8(L, keys[k].s, keys[k].n, "object key");
        lua_pushlstring(L, keys[k].s, keys[k].n);
        lua_rawget(L, t);
        encode_value(e, lua_gettop(L), obj, keys[k].s, depth);
        lua_pop(L, 1);
      }
      lua_remove(L, kidx);
    }
  }

  lua_pushvalue(L, t);
  lua_pushnil(L);
  lua_rawset(L, e->visited);
}

static void encode_value(jenc *e, int idx, cJSON *parent, const char *key, int depth) {
  lua_State *L = e->L;
  switch (lua_type(L, idx)) {
    case LUA_TNIL: attach(e, parent, key, cJSON_CreateNull()); break;
    case LUA_TBOOLEAN: attach(e, parent, key, cJSON_CreateBool(lua_toboolean(L, idx))); break;
    case LUA_TNUMBER: {
      char num[40];
      if (lua_isinteger(L, idx)) {
        snprintf(num, sizeof num, LUA_INTEGER_FMT, (LUAI_UACINT)lua_tointeger(L, idx));
      } else {
        double d = (double)lua_tonumber(L, idx);
        if (isnan(d) || isinf(d))
          luaL_error(L, "json.encode: cannot encode a non-finite number (%s)",
                     isnan(d) ? "nan" : (d > 0 ? "inf" : "-inf"));
        format_float(d, num);
      }
      attach(e, parent, key, cJSON_CreateRaw(num));
      break;
    }
    case LUA_TSTRING: {
      size_t n;
      const char *s = lua_tolstring(L, idx, &n);
      check_utf8(L, s, n, "string");
      luaL_checkstack(L, 4, "json.encode");
      push_quoted(L, s, n);
      attach(e, parent, key, cJSON_CreateRaw(lua_tostring(L, -1)));
      lua_pop(L, 1);
      break;
    }
    case LUA_TTABLE: encode_table(e, lua_absindex(L, idx), parent, key, depth + 1); break;
    default:
      if (lua_islightuserdata(L, idx) && lua_touserdata(L, idx) == vb_json_null())
        attach(e, parent, key, cJSON_CreateNull());
      else
        luaL_error(L, "json.encode: cannot encode a %s", luaL_typename(L, idx));
  }
}

/* json.encode(value [, indent]) */
static int l_encode(lua_State *L) {
  luaL_checkany(L, 1);
  int pretty = lua_toboolean(L, 2);
  lua_settop(L, 1);
  lua_newtable(L); /* 2: visited */
  json_box *box = (json_box *)lua_newuserdatauv(L, sizeof *box, 0); /* 3 */
  box->root = NULL;
  box->out = NULL;
  if (luaL_newmetatable(L, "vram.json_box")) {
    lua_pushcfunction(L, json_box_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, json_box_close);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, 3);
  lua_toclose(L, 3);
  jenc e = {L, box, 2};
  encode_value(&e, 1, NULL, NULL, 0);
  box->out = pretty ? cJSON_Print(box->root) : cJSON_PrintUnformatted(box->root);
  if (!box->out) return luaL_error(L, "json.encode: out of memory");
  lua_pushstring(L, box->out);
  lua_closeslot(L, 3);
  return 1;
}

int vb_open_json(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"decode", l_decode},
      {"load", l_load},
      {"encode", l_encode},
      {"safetensors_header", l_st_header},
      {NULL, NULL},
  };
  luaL_newlib(L, fns);
  lua_pushlightuserdata(L, vb_json_null());
  lua_setfield(L, -2, "null");
  return 1;
}
