#define _POSIX_C_SOURCE 200809L
#include "search.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef VRAMLUA_SOURCE_DIR
#define VRAMLUA_SOURCE_DIR "."
#endif

bool vh_is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool vh_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

void vh_dirname(const char *path, char *out, size_t outsz) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(out, outsz, ".");
  } else if (slash == path) {
    snprintf(out, outsz, "/");
  } else {
    snprintf(out, outsz, "%.*s", (int)(slash - path), path);
  }
}

static void add_root(vh_search *s, const char *dir, size_t len) {
  if (len == 0 || len >= VH_PATH_MAX || s->nroots >= VH_MAX_ROOTS) return;
  memcpy(s->roots[s->nroots], dir, len);
  s->roots[s->nroots][len] = '\0';
  s->nroots++;
}

/* The installed layout wins over the build tree, so an installed binary
 * never reads a stale checkout. */
static void find_share(vh_search *s) {
  char exe[VH_PATH_MAX], dir[VH_PATH_MAX], cand[VH_PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    vh_dirname(exe, dir, sizeof dir);
    int len = snprintf(cand, sizeof cand, "%s/../share/vramlua/stdlib", dir);
    if (len > 0 && len < (int)sizeof cand && vh_is_dir(cand)) {
      cand[len - (int)strlen("/stdlib")] = '\0';
      memcpy(s->share, cand, sizeof s->share);
      return;
    }
  }
  snprintf(s->share, sizeof s->share, "%s", VRAMLUA_SOURCE_DIR);
}

void vh_search_init(vh_search *s, const char *argv0) {
  (void)argv0;
  /* not a memset of the whole struct: its 33 path buffers are 132 KiB of
   * stack, and touching each page cost a page fault (~0.1 ms a process,
   * issue 18); only the first nroots roots are ever read */
  s->nroots = 0;
  s->share[0] = '\0';
  const char *env = getenv("VRAMLUA_PATH");
  while (env && *env) {
    const char *colon = strchr(env, ':');
    size_t len = colon ? (size_t)(colon - env) : strlen(env);
    add_root(s, env, len);
    env = colon ? colon + 1 : NULL;
  }
  find_share(s);
  add_root(s, s->share, strlen(s->share));
}

static bool try_path(char *out, size_t outsz, const char *a, const char *b, const char *c) {
  int n = snprintf(out, outsz, "%s%s%s", a, b, c);
  return n > 0 && (size_t)n < outsz && vh_is_file(out);
}

bool vh_find_script(const vh_search *s, const char *name, char *out, size_t outsz) {
  if (try_path(out, outsz, name, "", "")) return true;
  if (name[0] == '/') return false;
  for (int i = 0; i < s->nroots; i++) {
    if (try_path(out, outsz, s->roots[i], "/", name)) return true;
    if (try_path(out, outsz, s->roots[i], "/scripts/", name)) return true;
  }
  return false;
}

/* Folders a module search found missing where nothing in the process can
 * make one (`stable`: a sandboxed state has no io and no os.execute, and
 * the host makes no folder): a module under one is not looked for there
 * again. A built-in command looks for each of its ~25 modules beside its
 * own script first (scripts/cli/stdlib/...), a stat each, ~2.5 us on the
 * build machine; once the folder is known missing, none. */
#define MISSING_MAX 16
static char *missing[MISSING_MAX];
static int nmissing;

static bool under_missing(const char *path, size_t len) {
  for (int i = 0; i < nmissing; i++) {
    size_t m = strlen(missing[i]);
    if (m <= len && strncmp(path, missing[i], m) == 0 && (path[m] == '/' || m == len))
      return true;
  }
  return false;
}

/* root/rel, a module's candidate file, into out. */
static bool try_module(char *out, size_t outsz, const char *root, const char *rel, bool stable) {
  const char *slash = strrchr(rel, '/');
  if (!stable || !slash) return try_path(out, outsz, root, "/", rel);
  char dir[VH_PATH_MAX]; /* its folder */
  int n = snprintf(dir, sizeof dir, "%s/%.*s", root, (int)(slash - rel), rel);
  if (n <= 0 || (size_t)n >= sizeof dir || under_missing(dir, (size_t)n)) return false;
  if (try_path(out, outsz, root, "/", rel)) return true;
  if (nmissing < MISSING_MAX && !vh_is_dir(dir) && (missing[nmissing] = strdup(dir)) != NULL)
    nmissing++;
  return false;
}

bool vh_find_module(const vh_search *s, const char *first_dir, const char *modname, char *out,
                    size_t outsz, bool stable) {
  char rel[VH_PATH_MAX];
  size_t n = strlen(modname);
  if (n == 0 || n + 5 >= sizeof rel) return false;
  for (size_t i = 0; i < n; i++) {
    char c = modname[i];
    /* module names are identifiers joined by dots: nothing that climbs out */
    if (!(c == '.' || c == '_' || c == '-' || (c >= 'a' && c <= 'z') ||
          (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
      return false;
    rel[i] = c == '.' ? '/' : c;
  }
  if (modname[0] == '.' || strstr(modname, "..")) return false;
  memcpy(rel + n, ".lua", 5);
  if (first_dir && try_module(out, outsz, first_dir, rel, stable)) return true;
  for (int i = 0; i < s->nroots; i++)
    if (try_module(out, outsz, s->roots[i], rel, stable)) return true;
  return false;
}
