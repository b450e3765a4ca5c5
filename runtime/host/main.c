/* vramlua: the command line. `run` executes a script; every other command
 * is a Lua script scripts/cli/COMMAND.lua of the share directory, which
 * also gives its help: adding a command needs no recompiling. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* sbrk, madvise */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <sys/mman.h>
#include <limits.h>
#include <signal.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>
#include <lauxlib.h>
#include <lua.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bind/bind.h"
#include "../bind/builtin.h"
#include "sandbox.h"
#include "search.h"

#define EXIT_USAGE 2

/* The default budgets of a sandboxed run: a stranger's runaway script is
 * stopped within about ten CPU seconds and a few hundred MiB, while every
 * built-in command and recipe stays inside them (README, "The sandbox", has
 * the measured figures). Each message names the flag that raises its limit.
 * Instructions are counted only under --max-instructions (or --stats): a
 * count hook makes Lua 5.4 stop at every instruction, and CPU time already
 * ends a runaway. --trust (your own scripts) has no default budgets; flags
 * still apply. */
#define DEFAULT_MAX_MEMORY_MIB 256
#define DEFAULT_MAX_SECONDS 10
/* The built-in commands are our code on the user's data; the heaviest
 * measured (fit of examples/specs/qwen3_vl_4b_ppo.yaml) takes 8.3 CPU s on
 * the shared 2-core build machine, too close to a stranger's 10 s. */
#define DEFAULT_MAX_SECONDS_BUILTIN 60
/* and the largest models' steps need more than a script's 256 MiB: a
 * GLM-4.5-sized MoE (92 layers, 160 experts, first layers dense, so not
 * composed) under ZeRO-3 on 8 GPUs holds ~300 MiB of tape */
#define DEFAULT_MAX_MEMORY_MIB_BUILTIN 2048
#define STR_(x) #x
#define STR(x) STR_(x)

static const char *progname = "vramlua";

static const char USAGE_HEAD[] =
    "usage: vramlua [options] COMMAND [args...]\n"
    "\n"
    "Commands:\n"
    "  run SCRIPT [args...]       run a Lua budget script (sandboxed)\n";

static const char USAGE_TAIL[] =
    "  help [COMMAND]             this text, or a command's own help\n"
    "\n"
    "Options (before COMMAND):\n"
    "  --trust                    lift the sandbox for your own scripts\n"
    "  --debug                    a Lua traceback under an error's message\n"
    "  --max-instructions N       Lua instruction budget (default: not counted)\n"
    "  --max-memory MIB           memory budget, Lua and C, in MiB (default " STR(DEFAULT_MAX_MEMORY_MIB) ", built-in\n"
    "                             commands " STR(DEFAULT_MAX_MEMORY_MIB_BUILTIN) ")\n"
    "  --max-seconds S            CPU-time budget in seconds (default " STR(DEFAULT_MAX_SECONDS) "; built-in\n"
    "                             commands " STR(DEFAULT_MAX_SECONDS_BUILTIN) ")\n"
    "                             (defaults of a sandboxed run; --trust: none unless\n"
    "                             given; 0: no limit)\n"
    "  --stats                    print instructions, peak memory and CPU time used\n"
    "  --version                  print the version\n"
    "\n"
    "Scripts and modules are looked up as given, then in each directory of\n"
    "VRAMLUA_PATH, then in the share directory (ROOT/NAME, ROOT/scripts/NAME).\n";

static const vh_search *search_dirs; /* for the command list */

/* The other commands are the scripts SHARE/scripts/cli/NAME.lua of the share
 * directory (never the working directory or VRAMLUA_PATH, so a folder a
 * stranger sent cannot stand in for one). A script's first two lines give
 * the list its synopsis and summary:
 *     -- vramlua NAME ARGS...
 *     -- what it does
 * and `vramlua help NAME` runs it with --help. */
static bool command_path(const char *name, char *out, size_t outsz) {
  if (!name[0]) return false;
  for (const char *c = name; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == '-'))
      return false;
  int n = snprintf(out, outsz, "%s/scripts/cli/%s.lua", search_dirs->share, name);
  return n > 0 && (size_t)n < outsz && vh_is_file(out);
}

/* One header line of a command script, its "-- " (and "vramlua ") prefix
 * removed; "" when the line is not such a comment. */
static void header_line(FILE *f, const char *prefix, char *out, size_t outsz) {
  char line[512];
  out[0] = '\0';
  if (!fgets(line, sizeof line, f)) return;
  line[strcspn(line, "\r\n")] = '\0';
  size_t n = strlen(prefix);
  if (strncmp(line, prefix, n) != 0) return;
  size_t len = strlen(line + n);          /* a longer header is cut, not an error */
  if (len >= outsz) len = outsz - 1;
  memcpy(out, line + n, len);
  out[len] = '\0';
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void print_commands(FILE *out) {
  char dir[VH_PATH_MAX + 16];
  snprintf(dir, sizeof dir, "%s/scripts/cli", search_dirs->share);
  DIR *d = opendir(dir);
  char *names[128];
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d)) && n < 128;) {
    size_t len = strlen(e->d_name);
    if (len > 4 && strcmp(e->d_name + len - 4, ".lua") == 0 && (names[n] = strdup(e->d_name)))
      names[n++][len - 4] = '\0';
  }
  if (d) closedir(d);
  qsort(names, (size_t)n, sizeof *names, cmp_names);
  for (int k = 0; k < n; k++) {
    char path[VH_PATH_MAX + 64], syn[256], sum[256];
    const char *why = NULL;
    int fd = command_path(names[k], path, sizeof path) ? vb_open_regular(path, &why, NULL) : -1;
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (f) {
      header_line(f, "-- vramlua ", syn, sizeof syn);
      header_line(f, "-- ", sum, sizeof sum);
      fclose(f);
    } else {
      if (fd >= 0) close(fd);
      syn[0] = sum[0] = '\0';
    }
    if (!syn[0]) snprintf(syn, sizeof syn, "%s", names[k]);
    if (strlen(syn) <= 26)
      fprintf(out, "  %-26s %s\n", syn, sum);
    else
      fprintf(out, "  %s\n  %-26s %s\n", syn, "", sum);
    free(names[k]);
  }
}

static void print_usage(FILE *out) {
  fputs(USAGE_HEAD, out);
  print_commands(out);
  fputs(USAGE_TAIL, out);
}

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "%s: ", progname);
  fprintf(stderr, fmt, arg);
  fputs("\n\n", stderr);
  print_usage(stderr);
  return EXIT_USAGE;
}

/* --debug: a traceback under the message of an error that is not a
 * structured input error. Off by default: a user sees "file:line: message". */
static bool show_traceback;
/* --stats: what a run used, on stderr, to choose budgets from measurements */
static bool show_stats;

/* Message handler: runs while the failed call's frames still exist, so it
 * is the only place a traceback can be taken. It reads nothing of an error
 * object but its type and leaves every non-string object unchanged: report()
 * reads those, in a protected call. */
static int msghandler(lua_State *L) {
  if (show_traceback && lua_type(L, 1) == LUA_TSTRING)
    luaL_traceback(L, L, lua_tostring(L, 1), 1);
  return 1;
}

/* describe(err) -> message, exit code. Runs under lua_pcall: whatever the
 * object is (a table whose __index raises or loops, a __tostring that
 * fails), reading it cannot panic the state. Structured input errors
 * ({msg = STRING, code = N}, stdlib/errors.lua) are read raw, so no
 * metamethod of the script runs for them. A script's code becomes an exit
 * status only when it is an integer in 1..125: a failure, below the
 * statuses the shell uses for signals. */
static int describe(lua_State *L) {
  lua_settop(L, 1);
  lua_Integer code = 1;
  if (lua_type(L, 1) == LUA_TTABLE) {
    lua_pushliteral(L, "msg");
    if (lua_rawget(L, 1) == LUA_TSTRING) {
      lua_pushliteral(L, "code");
      lua_rawget(L, 1);
      int isint = 0;
      lua_Integer c = lua_tointegerx(L, -1, &isint);
      if (isint && c >= 1 && c <= 125) code = c;
      lua_pop(L, 1);
      lua_pushinteger(L, code);
      return 2;
    }
    lua_pop(L, 1);
  }
  if (lua_type(L, 1) == LUA_TSTRING || lua_type(L, 1) == LUA_TNUMBER) {
    lua_pushvalue(L, 1);
    lua_tostring(L, -1);
  } else if (luaL_getmetafield(L, 1, "__tostring") != LUA_TNIL) {
    lua_pop(L, 1);
    luaL_tolstring(L, 1, NULL); /* raises unless __tostring gives a string */
  } else {
    lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  lua_pushinteger(L, code);
  return 2;
}

static int report(lua_State *L, int status, const vh_limits *lim) {
  if (status == LUA_OK) return 0;
  fflush(stdout); /* what the script printed comes before why it stopped */
  if (status == LUA_ERRMEM) {
    if (lim->max_memory > 0)
      fprintf(stderr, "%s: script exceeded %lld MiB of memory (raise with --max-memory)\n",
              progname, (long long)(lim->max_memory >> 20));
    else
      fprintf(stderr, "%s: out of memory\n", progname);
    lua_pop(L, 1);
    return 1;
  }
  lua_pushcfunction(L, describe);
  lua_insert(L, -2);
  int st = lua_pcall(L, 1, 2, 0);
  int code = 1;
  if (st == LUA_OK) {
    code = (int)lua_tointeger(L, -1);
    fprintf(stderr, "%s: %s\n", progname, lua_tostring(L, -2));
    lua_pop(L, 2);
  } else {
    /* the object could not be read: say why, if that is a string */
    const char *why = st == LUA_ERRMEM ? "out of memory" : lua_tostring(L, -1);
    fprintf(stderr, "%s: the script raised an error object that cannot be shown (%s)\n",
            progname, why ? why : "reading it failed");
    lua_pop(L, 1);
  }
  if (lim->memory_refused) /* a C allocation failed, or the script caught Lua's */
    fprintf(stderr, "%s: (the memory budget of %lld MiB was reached; raise with --max-memory)\n",
            progname, (long long)(lim->max_memory >> 20));
  return code;
}

/* Every call into Lua is protected; should one escape anyway, exit with a
 * message rather than let Lua abort(). */
static int panic(lua_State *L) {
  const char *msg = lua_tostring(L, -1);
  fflush(stdout);
  fprintf(stderr, "%s: internal error: unprotected Lua error: %s\n", progname,
          msg ? msg : "(not a string)");
  _exit(70);
}

typedef struct {
  int argc;
  char **argv;
  int script_at; /* argv index of the script name */
  const char *script;
  vh_limits *lim;
} run_args;

/* Runs inside lua_pcall, so even setting up is protected. */
static int pmain(lua_State *L) {
  run_args *ra = (run_args *)lua_touserdata(L, 1);
  vh_sandbox_open(L, ra->lim);
  lua_createtable(L, ra->argc - ra->script_at, 1);
  lua_pushstring(L, ra->script);
  lua_rawseti(L, -2, 0);
  for (int i = ra->script_at + 1; i < ra->argc; i++) {
    lua_pushstring(L, ra->argv[i]);
    lua_rawseti(L, -2, i - ra->script_at);
  }
  lua_setglobal(L, "arg");
  vb_load_lua_file(L, ra->script);
  int nargs = 0;
  for (int i = ra->script_at + 1; i < ra->argc; i++, nargs++) {
    luaL_checkstack(L, 1, "too many arguments");
    lua_pushstring(L, ra->argv[i]);
  }
  lua_call(L, nargs, 0); /* errors reach run_script's handler */
  return 0;
}

/* The process ends right after its one state: freeing every object of it
 * one by one (lua_close) cost ~0.25 ms of a 5 ms estimate, and exit() flushes
 * what stdio holds. The state stays reachable from here, so leak checkers
 * see no leak; sanitizer builds (VRAMLUA_CLOSE_STATE) do close it, so that
 * ASan's leak check still proves every C allocation is freed. */
#ifdef VRAMLUA_CLOSE_STATE
static void close_state(lua_State *L) { lua_close(L); }
#else
/* volatile: a store nothing reads would be optimised away. The pointer is
 * the state's block itself (its extra space opens it; L points inside), so
 * valgrind counts everything as still reachable, not lost. */
static void *volatile kept_state;
static void close_state(lua_State *L) { kept_state = lua_getextraspace(L); }
#endif

static int run_script(const char *path, int argc, char **argv, int script_at,
                      vh_limits *lim) {
  vh_dirname(path, lim->script_dir, sizeof lim->script_dir);
  lua_State *L = vh_newstate(lim);
  if (!L) {
    fprintf(stderr, "%s: cannot create a Lua state\n", progname);
    return 1;
  }
  lua_atpanic(L, panic);
  run_args ra = {argc, argv, script_at, path, lim};
  lua_pushcfunction(L, msghandler);
  lua_pushcfunction(L, pmain);
  lua_pushlightuserdata(L, &ra);
  int st = lua_pcall(L, 1, 0, 1);
  int code = report(L, st, lim);
  vh_sandbox_release(L);
  close_state(L);
  if (show_stats) {
    fflush(stdout);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    size_t precompiled = 0, stamped = 0, text = 0;
    vb_lua_file_counts(&precompiled, &stamped, &text);
    double cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                 (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    fprintf(stderr,
            "%s: stats: %lld instructions (counted every 10000), peak memory %lld bytes "
            "(Lua and C), %.2f CPU seconds, max RSS %ld KiB, Lua files: %zu precompiled "
            "(%zu by their stamp, not read), %zu as text\n",
            progname, (long long)lim->instructions, (long long)lim->peak_memory, cpu,
            ru.ru_maxrss, precompiled, stamped, text);
  }
  return code;
}

/* The CPU-time budget ends any runaway, in Lua or in one long C call (a
 * backtracking string.find) alike: the timer ticks every VH_TICK_MS of the
 * process's CPU time (ITIMER_PROF); a tick past the budget writes the
 * message and exits, which is async-signal-safe, and every other tick lets
 * the sandbox check its depth limit (vh_sandbox_tick). */
static char cpu_msg[160];
static size_t cpu_msg_len;
static long long cpu_ticks, cpu_max_ticks; /* 0: no budget, ticks for the sandbox only */

static void cpu_tick(int sig) {
  (void)sig;
  if (cpu_max_ticks > 0 && ++cpu_ticks >= cpu_max_ticks) {
    ssize_t w = write(STDERR_FILENO, cpu_msg, cpu_msg_len);
    (void)w;
    _exit(1);
  }
  vh_sandbox_tick();
}

/* seconds 0: no budget (the ticks still run for a sandboxed state). */
static void cpu_limit(long long seconds) {
  int n = snprintf(cpu_msg, sizeof cpu_msg,
                   "%s: script exceeded its CPU time budget of %lld s (raise with --max-seconds)\n",
                   progname, seconds);
  cpu_msg_len = n > 0 && (size_t)n < sizeof cpu_msg ? (size_t)n : 0;
  cpu_max_ticks = seconds > LLONG_MAX / (1000 / VH_TICK_MS) ? LLONG_MAX
                                                             : seconds * (1000 / VH_TICK_MS);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = cpu_tick;
  sa.sa_flags = SA_RESTART; /* a tick must not fail a read */
  sigaction(SIGPROF, &sa, NULL);
  struct itimerval it;
  memset(&it, 0, sizeof it);
  it.it_interval.tv_usec = VH_TICK_MS * 1000;
  it.it_value = it.it_interval;
  setitimer(ITIMER_PROF, &it, NULL);
}

static int parse_int_opt(const char *opt, const char *val, long long *out) {
  char *end = NULL;
  errno = 0;
  long long v = val ? strtoll(val, &end, 10) : 0;
  if (!val || errno || *end || v < 0) return usage_error("%s needs a non-negative integer", opt);
  *out = v;
  return 0;
}

/* The heap in transparent huge pages where the kernel allows them
 * (enabled = madvise or always). Every fresh 4 KiB page costs a fault,
 * ~1.7 us each on the build machine (a VM): an estimate touches 1.5-2.5 MiB
 * of heap, 400-550 faults, ~0.8 ms of a 5-7 ms process; one 2 MiB huge
 * page is one fault, though zeroed whole (~0.15 ms) (README, "Speed").
 * malloc has not run yet, so the program break is moved to HEAP_SMALL_KIB
 * before a 2 MiB boundary: the first allocations (all of a small script's,
 * ~25 KiB of Lua for an empty one) stay in small pages, and the heap from
 * the boundary on is madvised before anything touches it (a touched 2 MiB
 * range stays in small pages). HEAP_HUGE_MIB more of break are reserved
 * (M_TOP_PAD: address space, no memory until touched), and blocks below
 * that size come from the heap, not from mmap (the tape's vectors past
 * 128 KiB were mapped in small pages): a fit --knobs touches 8-20 MiB,
 * 1,000-2,800 faults with 4 MiB and mmap, ~140 now. The heap grows on past
 * it in small pages. Where the kernel says no, nothing changes. */
#define HEAP_HUGE_MIB 32
#define HEAP_SMALL_KIB 64
static void heap_huge_pages(void) {
  const uintptr_t huge = (uintptr_t)2 << 20, small = (uintptr_t)HEAP_SMALL_KIB << 10;
  uintptr_t cur = (uintptr_t)sbrk(0);
  if (cur == (uintptr_t)-1) return;
  uintptr_t at = (cur + small + huge - 1) & ~(huge - 1);
  if (sbrk((intptr_t)(at - small - cur)) == (void *)-1) return;
  mallopt(M_TOP_PAD, HEAP_HUGE_MIB << 20);
  mallopt(M_MMAP_THRESHOLD, HEAP_HUGE_MIB << 20);
  void *volatile first = malloc(1); /* the first sbrk, of HEAP_HUGE_MIB more */
  free(first);
  uintptr_t end = (uintptr_t)sbrk(0) & ~(huge - 1);
  if (end > at) madvise((void *)at, end - at, MADV_HUGEPAGE);
}

int main(int argc, char **argv) {
  heap_huge_pages();
  vh_search search;
  vh_limits lim;
  memset(&lim, 0, sizeof lim);
  lim.max_instructions = -1; /* -1: not given */
  lim.max_memory = -1;
  lim.argc = argc;
  lim.argv = argv;
  long long max_seconds = -1;
  vh_search_init(&search, argv[0]);
  lim.search = &search;
  /* VRAMLUA_SOURCE_ONLY=1 parses the built-in Lua as text (to compare) */
  const char *source_only = getenv("VRAMLUA_SOURCE_ONLY");
  if (!source_only || strcmp(source_only, "1") != 0)
    vb_use_builtin_chunks(vb_builtin_chunks, vb_builtin_count);
  search_dirs = &search;

  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    long long v = 0;
    if (strcmp(argv[i], "--trust") == 0) {
      lim.trusted = true;
    } else if (strcmp(argv[i], "--version") == 0) {
      printf("vramlua %s (Lua %s.%s)\n", VRAM_VERSION, LUA_VERSION_MAJOR, LUA_VERSION_MINOR);
      return 0;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      print_usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--debug") == 0) {
      show_traceback = true;
    } else if (strcmp(argv[i], "--stats") == 0) {
      show_stats = true;
    } else if (strcmp(argv[i], "--max-instructions") == 0) {
      if (parse_int_opt(argv[i], argv[i + 1], &v)) return EXIT_USAGE;
      lim.max_instructions = v;
      i++;
    } else if (strcmp(argv[i], "--max-seconds") == 0) {
      if (parse_int_opt(argv[i], argv[i + 1], &v)) return EXIT_USAGE;
      max_seconds = v;
      i++;
    } else if (strcmp(argv[i], "--max-memory") == 0) {
      if (parse_int_opt(argv[i], argv[i + 1], &v)) return EXIT_USAGE;
      if (v > (1LL << 40)) return usage_error("%s is too large", "--max-memory");
      lim.max_memory = v << 20;
      i++;
    } else {
      return usage_error("unknown option '%s'", argv[i]);
    }
  }
  if (i >= argc) return usage_error("%s", "no command given");
  if (lim.max_instructions < 0) lim.max_instructions = 0; /* not counted */
  lim.count_instructions = show_stats;
  /* the memory default follows the command (a script's, a built-in's) */
  bool default_memory = lim.max_memory < 0;
  if (default_memory) lim.max_memory = lim.trusted ? 0 : (int64_t)DEFAULT_MAX_MEMORY_MIB << 20;
  if (max_seconds < 0 && lim.trusted) max_seconds = 0;
  if (lim.trusted) fprintf(stderr, "%s: --trust: sandbox lifted for this run\n", progname);

  const char *cmd = argv[i];
  char path[VH_PATH_MAX];
  if (strcmp(cmd, "help") == 0) {
    if (i + 1 >= argc) {
      print_usage(stdout);
      return 0;
    }
    cmd = argv[i + 1];
    if (strcmp(cmd, "run") == 0) {
      puts("usage: vramlua run SCRIPT [args...]\n\nRuns a Lua script with the `vram` module. "
           "Arguments reach it as `...` and `arg`.");
      return 0;
    }
    if (!command_path(cmd, path, sizeof path)) return usage_error("unknown command '%s'", cmd);
    char *hargv[] = {argv[0], path, (char *)"--help"};
    if (max_seconds != 0 || !lim.trusted)
      cpu_limit(max_seconds < 0 ? DEFAULT_MAX_SECONDS_BUILTIN : max_seconds);
    return run_script(path, 3, hargv, 1, &lim);
  }
  if (strcmp(cmd, "run") == 0) {
    if (max_seconds != 0 || !lim.trusted)
      cpu_limit(max_seconds < 0 ? DEFAULT_MAX_SECONDS : max_seconds);
    if (i + 1 >= argc) return usage_error("%s", "run needs a SCRIPT");
    if (!vh_find_script(&search, argv[i + 1], path, sizeof path)) {
      fprintf(stderr, "%s: cannot find script '%s' (looked as given, in VRAMLUA_PATH and in %s)\n",
              progname, argv[i + 1], search.share);
      return 1;
    }
    return run_script(path, argc, argv, i + 1, &lim);
  }
  if (!command_path(cmd, path, sizeof path)) return usage_error("unknown command '%s'", cmd);
  if (max_seconds != 0 || !lim.trusted)
    cpu_limit(max_seconds < 0 ? DEFAULT_MAX_SECONDS_BUILTIN : max_seconds);
  if (default_memory && !lim.trusted) lim.max_memory = (int64_t)DEFAULT_MAX_MEMORY_MIB_BUILTIN << 20;
  return run_script(path, argc, argv, i, &lim);
}
