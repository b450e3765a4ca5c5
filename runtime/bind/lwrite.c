/* vram.write_file(path, text): how a built-in command writes the report a
 * user asked for (`estimate --html FILE`). A sandboxed script has no io; the
 * host allows writing exactly the paths typed on the command line of a
 * built-in command (scripts/cli/ of the share directory), compared as
 * typed. A state without a sandbox rule (--trust, the tests) may write any
 * path. */
#define _POSIX_C_SOURCE 200809L /* open flags, fdopen */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bind.h"
#include "lfiles.h"

#define WRITE_KEY "vramlua.write_rule" /* registry: {path = true} */

void vb_files_allow_write(lua_State *L, const char *path) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, WRITE_KEY) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, WRITE_KEY);
  }
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, path);
  lua_pop(L, 1);
}

static int allowed(lua_State *L, const char *path) {
  if (!vb_files_restricted(L)) return 1;
  int ok = 0;
  if (lua_getfield(L, LUA_REGISTRYINDEX, WRITE_KEY) == LUA_TTABLE)
    ok = lua_getfield(L, -1, path) == LUA_TBOOLEAN;
  lua_settop(L, 2);
  return ok;
}

static int l_write_file(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  size_t n = 0;
  const char *text = luaL_checklstring(L, 2, &n);
  lua_settop(L, 2);
  /* messages without a position: the caller names its option */
  if (!allowed(L, path)) {
    lua_pushfstring(L,
                    "%s: a sandboxed script writes only files named on the command line of "
                    "a built-in command (--trust lifts this)",
                    path);
    return lua_error(L);
  }
  /* only a regular file is written: O_NONBLOCK keeps a FIFO from waiting
   * for a reader, and it is refused before anything is truncated */
  int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0666);
  struct stat st;
  const char *why = NULL;
  if (fd < 0) why = strerror(errno);
  else if (fstat(fd, &st) != 0) why = strerror(errno);
  else if (!S_ISREG(st.st_mode)) why = "not a regular file (a FIFO, device or socket)";
  else if (ftruncate(fd, 0) != 0) why = strerror(errno);
  FILE *f = why ? NULL : fdopen(fd, "wb");
  if (!f) {
    if (!why) why = strerror(errno);
    if (fd >= 0) close(fd);
    lua_pushfstring(L, "%s: cannot write: %s", path, why);
    return lua_error(L);
  }
  size_t w = fwrite(text, 1, n, f);
  int e = errno;
  if (fclose(f) != 0 && w == n) e = errno, w = 0;
  if (w != n) {
    lua_pushfstring(L, "%s: cannot write: %s", path, strerror(e));
    return lua_error(L);
  }
  return 0;
}

void vb_open_write(lua_State *L) {
  lua_pushcfunction(L, l_write_file);
  lua_setfield(L, -2, "write_file");
}
