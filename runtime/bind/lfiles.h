/* Which files a sandboxed script may read (vram.json.load, vram.yaml.load,
 * require). The host sets a rule in the Lua registry; without one (--trust,
 * the unit tests, the fuzzers' plain states) every path is allowed.
 *
 *   vb_files_restrict(L)            start a rule that allows nothing
 *   vb_files_allow_tree(L, dir)     allow dir and everything below it
 *   vb_files_allow_file(L, path)    allow exactly this path
 *   vb_check_read(L, path)          (bind.h) raise unless path is allowed
 *
 * Paths are resolved with realpath(3) on both sides, so "..", "." and
 * symbolic links cannot leave an allowed tree. A path that does not exist is
 * judged by its resolved parent directory: a missing file inside the rule
 * reaches the loader (which says "cannot open"), one outside is refused. A
 * refusal reads "PATH: outside the sandbox (...)". Names that cannot be
 * resolved at all (a missing directory on the way) raise "PATH: cannot open:
 * <why>", the loaders' own wording, and nothing is opened. */
#ifndef VRAM_LFILES_H
#define VRAM_LFILES_H

#include <lua.h>

void vb_files_restrict(lua_State *L);
/* Both return 0 when the path does not resolve (nothing is added). */
int vb_files_allow_tree(lua_State *L, const char *dir);
int vb_files_allow_file(lua_State *L, const char *path);
/* Whether a rule is in force in this state. */
int vb_files_restricted(lua_State *L);
/* vram.allow_named(path, from): a built-in command's grant to read what a
 * file named on its command line names (lfiles.c). */
int vb_allow_named(lua_State *L);
/* vram.write_file may write this path, as typed (lwrite.c). */
void vb_files_allow_write(lua_State *L, const char *path);

#endif
