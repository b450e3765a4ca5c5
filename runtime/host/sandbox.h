/* The Lua state a script runs in: which libraries it sees, how `require`
 * resolves, and the instruction and memory budgets.
 *
 * Sandboxed (the default): built from an allow-list (sandbox.c), never by
 * removing things from full libraries: the safe part of base (no dofile,
 * loadfile, warn; load takes text chunks only; setmetatable refuses __gc,
 * since finalizers run outside the instruction budget), string without dump
 * (its metatable is locked), table (table.move is charged to the
 * instruction budget), math, utf8, coroutine, os.clock/time/date, the
 * `vram` module and `require`. package.loaded holds these same tables and
 * nothing else (no io, debug, package, full os). Reading a global nobody
 * set raises "undefined global 'NAME'". Calls nest at most VH_MAX_DEPTH
 * deep (checked by the instruction hook, or at each CPU-time tick when no
 * instructions are counted; Lua's own "stack overflow" bounds a recursion
 * between two ticks). tests/sandbox/reach.c checks everything reachable against
 * tests/sandbox/reachable.txt. vram.json.load, vram.yaml.load and require
 * read only below the main script's directory, below the search roots
 * (VRAMLUA_PATH and the share directory) and files named on the command
 * line (for the built-in commands in the share directory's scripts/cli/,
 * also the directory trees of those files: a spec's config sits beside it);
 * anything else is refused with "PATH: outside the sandbox" (lfiles.h). The
 * `vram` table carries share_dir and search_roots (VRAMLUA_PATH, then the
 * share directory) in both modes.
 *
 * Trusted (--trust): all standard libraries and no read rule, depth limit
 * or metatable changes. Both modes keep the CPU-time budget (main.c), the
 * instruction budget when one is given and the memory budget; once the
 * instruction budget is spent the error is raised again at every
 * instruction, so pcall cannot swallow it and carry on. */
#ifndef VRAM_SANDBOX_H
#define VRAM_SANDBOX_H

#include <lua.h>
#include <stdbool.h>
#include <stdint.h>

#include "search.h"

typedef struct {
  bool trusted;            /* --trust: all standard libraries */
  int64_t max_instructions;/* 0 = unlimited */
  bool count_instructions; /* count without a budget (--stats) */
  int64_t max_memory;      /* bytes, 0 = unlimited */
  /* runtime bookkeeping */
  int64_t used_memory;     /* bytes: Lua and the C allocations made through
                              lua_getallocf (the tape), one count */
  int64_t peak_memory;     /* the most used_memory reached */
  bool memory_refused;     /* the budget refused an allocation */
  int64_t instructions;
  const vh_search *search;
  char script_dir[VH_PATH_MAX];
  /* the command line, whose existing files a sandboxed script may read
   * (argv == NULL: none) */
  int argc;
  char **argv;
} vh_limits;

/* Lua call depth allowed in the sandbox (Lua's own limit is about 200000
 * to 500000 frames, with its own "stack overflow"). */
#define VH_MAX_DEPTH 100000

/* A fresh state whose allocator enforces lim->max_memory. */
lua_State *vh_newstate(vh_limits *lim);
/* Opens the libraries and `require`; installs the instruction hook when
 * instructions are counted (a budget or count_instructions). */
void vh_sandbox_open(lua_State *L, vh_limits *lim);
/* The CPU-time timer's tick (every VH_TICK_MS of CPU time; safe in a signal
 * handler): a sandboxed state that counts no instructions has its depth
 * limit checked at the next instruction of its main thread. */
#define VH_TICK_MS 10
void vh_sandbox_tick(void);
/* Before lua_close: no tick touches L any more. */
void vh_sandbox_release(lua_State *L);

#endif
