/* Where scripts and Lua modules are found, in one documented order:
 *   1. the path as given (scripts only; modules: the main script's directory)
 *   2. each directory of VRAMLUA_PATH (colon-separated)
 *   3. the share directory: <exe>/../share/vramlua when installed, else the
 *      source tree the binary was built from.
 * In each root a script NAME is tried as ROOT/NAME, then ROOT/scripts/NAME,
 * so `vramlua run recipes/ppo_fix.lua` works from any directory. */
#ifndef VRAM_SEARCH_H
#define VRAM_SEARCH_H

#include <stdbool.h>
#include <stddef.h>

#define VH_MAX_ROOTS 32
#define VH_PATH_MAX 4096

typedef struct {
  char roots[VH_MAX_ROOTS][VH_PATH_MAX];
  int nroots;
  char share[VH_PATH_MAX];
} vh_search;

void vh_search_init(vh_search *s, const char *argv0);
bool vh_is_file(const char *path);
bool vh_is_dir(const char *path);
/* Finds a script; false when not found. */
bool vh_find_script(const vh_search *s, const char *name, char *out, size_t outsz);
/* Finds a module file for a dotted name, first in `first_dir` (may be NULL).
 * stable: nothing in this process can make a folder (a sandboxed state):
 * folders found missing are remembered and not looked in again. */
bool vh_find_module(const vh_search *s, const char *first_dir, const char *modname, char *out,
                    size_t outsz, bool stable);
/* Directory part of a path ("." when none). */
void vh_dirname(const char *path, char *out, size_t outsz);

#endif
