/* A run spec (JSON) through the real sandbox and require path: decode with
 * vram.json.decode, then stdlib/spec.lua normalize, as `vramlua estimate`
 * does. Input errors are expected; crashes, sanitizer reports and escapes
 * from the budgets are not. FUZZ_SPEC_SIMULATE=1 also simulates every spec
 * that normalizes (stdlib/step.lua), under the same budgets. */
#define FZ_SANDBOX
#include "fuzz_common.h"

#include <stdint.h>

static lua_State *L;
static int simulate;

static int run_one(lua_State *S) {
  size_t n;
  const char *text = lua_tolstring(S, 1, &n);
  fz_getfn(S, "json", "decode");
  lua_pushlstring(S, text, n);
  lua_pushliteral(S, "fuzz.json");
  lua_call(S, 2, 1);
  lua_getglobal(S, "require");
  lua_pushliteral(S, "stdlib.spec");
  lua_call(S, 1, 1);
  lua_getfield(S, -1, "normalize");
  lua_pushvalue(S, -3);
  lua_pushliteral(S, "fuzz.json");
  lua_getglobal(S, "require"); /* the caller hands stdlib the model registry */
  lua_pushliteral(S, "models.registry");
  lua_call(S, 1, 1);
  lua_call(S, 3, 1);
  if (simulate) {
    int run = lua_gettop(S);
    lua_getglobal(S, "require");
    lua_pushliteral(S, "stdlib.step");
    lua_call(S, 1, 1);
    lua_getfield(S, -1, "run");
    lua_pushvalue(S, run);
    lua_call(S, 1, 1);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!L) {
    const char *sim = getenv("FUZZ_SPEC_SIMULATE");
    simulate = sim && *sim == '1';
    L = fz_sandbox_state(50000000, (int64_t)512 << 20);
    fz_require(L, "stdlib.spec"); /* loads the stdlib once */
    lua_pop(L, 1);
    fz_require(L, "models.registry");
    lua_pop(L, 1);
  }
  fz_rearm(L);
  lua_settop(L, 0);
  lua_pushcfunction(L, run_one);
  lua_pushlstring(L, (const char *)data, size);
  (void)lua_pcall(L, 1, 0, 0); /* errors are the normal outcome */
  lua_settop(L, 0);
  lua_gc(L, LUA_GCSTEP, 0);
  return 0;
}
