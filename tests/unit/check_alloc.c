/* Every allocation failure of the tape and the compiled programs, one by
 * one: an allocator that fails on its N-th call (as Lua's own test suite
 * does with its "memory control"), for N = 1, 2, ... until a run needs no
 * more. Each run must end in VR_OK or VR_ENOMEM (a fit: NULL), keep its
 * counters consistent, and give back every byte: the allocator counts the
 * bytes outstanding from the sizes the tape passes on free, so a leak or a
 * wrong size shows as a non-zero balance (and ASan's leak check agrees). */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "tape.h"
#include "trace.h"

typedef struct {
  long calls, fail_at; /* fail_at <= 0: never fail */
  long failed;
  int64_t outstanding; /* bytes handed out and not given back */
} failing;

static void *failing_alloc(void *ud, void *p, size_t osize, size_t nsize) {
  failing *f = (failing *)ud;
  size_t old = p ? osize : 0;
  if (nsize == 0) {
    f->outstanding -= (int64_t)old;
    free(p);
    return NULL;
  }
  if (++f->calls == f->fail_at) {
    f->failed++;
    return NULL;
  }
  void *q = realloc(p, nsize);
  if (q) f->outstanding += (int64_t)nsize - (int64_t)old;
  return q;
}

#define TRY(expr)                  \
  do {                             \
    vr_status st_ = (expr);        \
    if (st_ != VR_OK) return st_;  \
  } while (0)

static int label(vr_tape *t, const char *s) {
  int k = -1;
  return vr_tape_intern(t, s, &k) == VR_OK ? k : -1;
}

/* One layer: y = f(x, W), saving both; the caller's x goes away. */
static vr_status layer(vr_tape *t, int64_t *x, int64_t w, int64_t act, int lab) {
  int64_t y = -1, saved[2] = {*x, w}, out[1];
  vr_edge in[2] = {{*x, vr_tape_bytes(t, *x), -1}, {w, vr_tape_bytes(t, w), -1}};
  TRY(vr_tape_alloc(t, act, VR_CAT_ACTIV, lab, false, &y));
  out[0] = y;
  TRY(vr_tape_node(t, saved, 2, in, 2, out, 1, act / 2, lab));
  TRY(vr_tape_drop(t, *x));
  *x = y;
  return VR_OK;
}

/* A training step at (b, s): six layers of which two are composed, one
 * checkpointed layer, a loss, backward, zero_grad; enough labels to grow
 * the string table several times. */
static vr_status step(vr_tape *t, int64_t b, int64_t s) {
  enum { L = 6 };
  /* multiples of 512: a program rounded to 512-byte blocks stays exact */
  int64_t w[L + 1], x = -1, act = 512 * b * s, loss = -1;
  char name[32];
  for (int i = 0; i < 300; i++) {
    snprintf(name, sizeof name, "label.%d", i);
    if (label(t, name) < 0) return VR_ENOMEM;
  }
  TRY(vr_tape_phase(t, "forward"));
  int lab = label(t, "layer"), loss_label = label(t, "loss");
  if (lab < 0 || loss_label < 0) return VR_ENOMEM;
  for (int i = 0; i <= L; i++)
    TRY(vr_tape_alloc(t, 512, VR_CAT_WEIGHTS, -1, true, &w[i]));
  TRY(vr_tape_alloc(t, act, VR_CAT_INPUTS, -1, false, &x));
  TRY(layer(t, &x, w[0], act, lab));
  /* as stdlib/compose.lua: layer 2 between two marks, layers 3..L-1 composed */
  int64_t before = 0, after = 0, rbefore = 0;
  vr_tape_stats st;
  TRY(vr_tape_mark(t, &before));
  vr_tape_stats_get(t, &st);
  rbefore = st.reserved;
  TRY(layer(t, &x, w[1], act, lab));
  TRY(vr_tape_mark(t, &after));
  vr_tape_stats_get(t, &st);
  vr_edge edges[L - 3];
  for (int i = 2; i < L - 1; i++) edges[i - 2] = (vr_edge){w[i], 512, -1};
  int bulk = -1;
  TRY(vr_tape_bulk(t, after - before, st.reserved - rbefore, L - 3, edges, 1, lab, &bulk));
  TRY(layer(t, &x, w[L - 1], act, lab));
  TRY(vr_tape_bulk_end(t, bulk));
  /* a checkpointed layer */
  int64_t in = x, out = -1;
  TRY(vr_tape_ckpt_begin(t));
  TRY(vr_tape_retain(t, x));
  TRY(layer(t, &x, w[L], act, lab));
  out = x;
  TRY(vr_tape_ckpt_end(t, &in, 1, &out, 1, lab));
  TRY(vr_tape_drop(t, in));
  TRY(vr_tape_alloc(t, 512, VR_CAT_LOGITS, -1, false, &loss));
  vr_edge le = {x, act, -1};
  TRY(vr_tape_node(t, &x, 1, &le, 1, &loss, 1, 0, loss_label));
  TRY(vr_tape_drop(t, x));
  TRY(vr_tape_phase(t, "backward"));
  TRY(vr_tape_backward(t, loss));
  TRY(vr_tape_drop(t, loss));
  TRY(vr_tape_phase(t, "optimizer"));
  return vr_tape_zero_grad(t);
}

static void check_sums(const vr_tape *t) {
  vr_tape_stats s;
  vr_tape_stats_get(t, &s);
  int64_t sum = 0;
  for (int i = 0; i < VR_NCAT; i++) sum += s.live_by_cat[i];
  ck_assert_int_eq(sum, s.live);
}

/* One step on a fresh tape; returns its status and peak. */
static vr_status run_step(failing *f, int64_t *peak) {
  vr_mem mem = {failing_alloc, f};
  vr_tape *t = vr_tape_new(&mem);
  if (!t) return VR_ENOMEM;
  vr_tape_rounding(t, 512, 10 << 20, 2 << 20);
  vr_status st = step(t, 2, 3);
  check_sums(t);
  vr_tape_stats s;
  vr_tape_stats_get(t, &s);
  *peak = s.peak;
  vr_tape_free(t);
  return st;
}

/* Runs `run` once with no failure (its peak and its allocation count),
 * then once per allocation call with that call failing: each run must
 * report VR_ENOMEM and give every byte back. Returns the peak. */
static int64_t fail_each_call(vr_status (*run)(failing *, int64_t *), long *calls) {
  failing f = {0, 0, 0, 0};
  int64_t want = 0, got = 0;
  ck_assert_int_eq(run(&f, &want), VR_OK);
  ck_assert_int_eq(f.outstanding, 0);
  long needed = f.calls;
  for (long n = 1; n <= needed; n++) {
    f = (failing){0, n, 0, 0};
    vr_status st = run(&f, &got);
    ck_assert_int_eq(f.failed, 1);
    ck_assert_msg(st == VR_ENOMEM, "failing call %ld of %ld gave status %d", n, needed, st);
    ck_assert_msg(f.outstanding == 0, "failing call %ld: %lld bytes not given back", n,
                  (long long)f.outstanding);
  }
  *calls = needed;
  return want;
}

START_TEST(every_allocation_failure_of_a_step_should_be_clean) {
  long needed = 0;
  int64_t want = fail_each_call(run_step, &needed), got = 0;
  ck_assert_int_gt(needed, 10);
  failing f = {0, needed + 1, 0, 0};
  ck_assert_int_eq(run_step(&f, &got), VR_OK);
  ck_assert_int_eq(got, want);
}
END_TEST

static const int64_t PB[7] = {1, 1, 1, 2, 2, 2, 3};
static const int64_t PT[7] = {1, 2, 3, 1, 2, 3, 5};

/* Traces the step at the seven probes, fits and evaluates a program:
 * VR_OK with the peak at (4, 9), or VR_ENOMEM. */
static vr_status run_program(failing *f, int64_t *peak) {
  vr_mem mem = {failing_alloc, f};
  vr_trace *tr[7] = {NULL};
  vr_status st = VR_OK;
  for (int i = 0; i < 7 && st == VR_OK; i++) {
    vr_tape *t = vr_tape_new(&mem);
    if (!t) {
      st = VR_ENOMEM;
      break;
    }
    st = vr_tape_trace(t, PB[i], PT[i]);
    if (st == VR_OK) st = step(t, PB[i], PT[i]);
    tr[i] = vr_tape_take_trace(t);
    vr_tape_free(t);
  }
  if (st == VR_OK) {
    const char *why = NULL;
    const vr_trace *p[7] = {tr[0], tr[1], tr[2], tr[3], tr[4], tr[5], tr[6]};
    const vr_grid g = {2, {1, 2}, {1, 1}};
    int64_t sizes[14], at[2] = {4, 9};
    for (int i = 0; i < 7; i++) sizes[2 * i] = PB[i], sizes[2 * i + 1] = PT[i];
    vr_trace *prog = vr_trace_fit(p, 7, &g, sizes, 512, NULL, &why);
    vr_trace_result r;
    if (!prog) {
      ck_assert_str_eq(why, "out of memory");
      st = VR_ENOMEM;
    } else {
      ck_assert(vr_trace_eval(prog, at, &r));
      *peak = r.peak;
    }
    vr_trace_free(prog);
  }
  for (int i = 0; i < 7; i++) vr_trace_free(tr[i]);
  return st;
}

START_TEST(every_allocation_failure_of_a_compiled_estimate_should_be_clean) {
  long needed = 0;
  int64_t want = fail_each_call(run_program, &needed);
  ck_assert_int_gt(needed, 0);
  /* the program agrees with the simulator at a size it was not fitted on */
  failing g = {0, 0, 0, 0};
  vr_mem mem = {failing_alloc, &g};
  vr_tape *t = vr_tape_new(&mem);
  ck_assert_ptr_nonnull(t);
  vr_tape_rounding(t, 512, 10 << 20, 2 << 20);
  ck_assert_int_eq(step(t, 4, 9), VR_OK);
  vr_tape_stats s;
  vr_tape_stats_get(t, &s);
  vr_tape_free(t);
  ck_assert_int_eq(want, s.peak);
  ck_assert_int_eq(g.outstanding, 0);
}
END_TEST

/* The error paths no failing allocation reaches: refusals after the bulk
 * copied its edges (an overflow of live bytes) give the copy back. */
START_TEST(a_refused_bulk_should_give_its_copy_back) {
  failing f = {0, 0, 0, 0};
  vr_mem mem = {failing_alloc, &f};
  vr_tape *t = vr_tape_new(&mem);
  ck_assert_ptr_nonnull(t);
  int64_t w = -1, big = -1, marks = 0;
  int bulk = -1;
  ck_assert_int_eq(vr_tape_alloc(t, 512, VR_CAT_WEIGHTS, -1, true, &w), VR_OK);
  ck_assert_int_eq(vr_tape_alloc(t, INT64_MAX - 1000, VR_CAT_ACTIV, -1, false, &big), VR_OK);
  vr_edge e[2] = {{w, 512, -1}, {w, 512, -1}};
  ck_assert_int_eq(vr_tape_bulk(t, 1000, 1000, 2, e, 1, -1, &bulk), VR_EOVERFLOW);
  /* in a trace: without the layer's two marks */
  ck_assert_int_eq(vr_tape_trace(t, 1, 1), VR_OK);
  ck_assert_int_eq(vr_tape_bulk(t, 1, 1, 2, e, 1, -1, &bulk), VR_ECOMPOSE);
  ck_assert_int_eq(vr_tape_mark(t, &marks), VR_OK);
  ck_assert_int_eq(vr_tape_mark(t, &marks), VR_OK);
  ck_assert_int_eq(vr_tape_bulk(t, 1000, 1000, 2, e, 1, -1, &bulk), VR_EOVERFLOW);
  vr_edge dead = {12345, 512, -1};
  ck_assert_int_eq(vr_tape_bulk(t, 1, 1, 1, &dead, 1, -1, &bulk), VR_EBADID);
  vr_tape_free(t);
  ck_assert_int_eq(f.outstanding, 0); /* a copy not given back stays outstanding */
}
END_TEST

int main(void) {
  Suite *s = suite_create("alloc");
  TCase *tc = tcase_create("failing allocator");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, every_allocation_failure_of_a_step_should_be_clean);
  tcase_add_test(tc, every_allocation_failure_of_a_compiled_estimate_should_be_clean);
  tcase_add_test(tc, a_refused_bulk_should_give_its_copy_back);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
