/* Unit tests of runtime/core/trace.c: fitting probe traces into a program
 * and evaluating it. Expected values are the polynomials written out. */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "trace.h"

static const int64_t PB[7] = {1, 1, 1, 2, 2, 2, 3};
static const int64_t PT[7] = {1, 2, 3, 1, 2, 3, 5};

/* Seven probe traces of one program: an allocation of f(B, T) activations,
 * a constant weight, and the free of the activation. */
typedef int64_t (*size_fn)(int64_t b, int64_t t);

static void probes(vr_trace tr[7], size_fn act, int64_t weight) {
  for (int i = 0; i < 7; i++) {
    tr[i] = (vr_trace){0};
    tr[i].batch = PB[i];
    tr[i].seq = PT[i];
    ck_assert(vr_trace_push(&tr[i], (vr_op){VR_OP_PHASE, 0, 0, 0, 0, 0, 0, {0}}));
    ck_assert(vr_trace_push(&tr[i], (vr_op){VR_OP_DELTA, 0, 1, 0, weight, 0, 0, {0}}));
    ck_assert(vr_trace_push(&tr[i], (vr_op){VR_OP_DELTA, 4, 2, 0, act(PB[i], PT[i]), 0, 0, {0}}));
    ck_assert(vr_trace_push(&tr[i], (vr_op){VR_OP_DELTA, 4, 3, 0, -act(PB[i], PT[i]), 0, 0, {0}}));
  }
}

static void release(vr_trace tr[7]) {
  for (int i = 0; i < 7; i++) vr_trace_release(&tr[i]);
}

/* (batch, seq) of degrees (1, 2) from 1: the six grid probes, then (3, 5). */
static const vr_grid BT = {2, {1, 2}, {1, 1}};

/* Fits the seven probe traces; NULL (with a reason) when refused. */
static vr_trace *fit(vr_trace tr[7], int64_t round, const char **why) {
  const vr_trace *p[7] = {&tr[0], &tr[1], &tr[2], &tr[3], &tr[4], &tr[5], &tr[6]};
  int64_t sizes[14];
  for (int i = 0; i < 7; i++) sizes[2 * i] = PB[i], sizes[2 * i + 1] = PT[i];
  *why = NULL;
  return vr_trace_fit(p, 7, &BT, sizes, round, NULL, why);
}

static bool eval2(const vr_trace *prog, int64_t b, int64_t t, vr_trace_result *r) {
  int64_t sizes[2] = {b, t};
  return vr_trace_eval(prog, sizes, r);
}

static bool peak2(const vr_trace *prog, int64_t b, int64_t t, int64_t *peak) {
  int64_t sizes[2] = {b, t};
  return vr_trace_peak(prog, sizes, peak);
}

static int64_t attention(int64_t b, int64_t t) { return 32 * b * t * t + 512 * b * t + 100; }
static int64_t not_polynomial(int64_t b, int64_t t) { return b * (t < 4 ? t : 4); }

START_TEST(a_fitted_program_should_reproduce_its_polynomial_at_any_size) {
  vr_trace tr[7];
  probes(tr, attention, 1000);
  const char *why = NULL;
  vr_trace *prog = fit(tr, 0, &why);
  ck_assert_ptr_nonnull(prog);
  vr_trace_result r;
  ck_assert(eval2(prog, 8, 4096, &r));
  ck_assert_int_eq(r.peak, 1000 + attention(8, 4096));
  ck_assert_int_eq(r.peak_label, 2);            /* the activation's allocation */
  ck_assert_int_eq(r.at_peak[4], attention(8, 4096));
  ck_assert_int_eq(r.at_peak[0], 1000);
  vr_trace_free(prog);
  release(tr);
}
END_TEST

START_TEST(rounding_should_apply_to_every_tensor_of_the_program) {
  vr_trace tr[7];
  probes(tr, attention, 1000);
  const char *why = NULL;
  vr_trace *prog = fit(tr, 512, &why);
  ck_assert_ptr_nonnull(prog);
  vr_trace_result r;
  ck_assert(eval2(prog, 3, 7, &r));
  int64_t a = attention(3, 7), ra = (a + 511) / 512 * 512;
  ck_assert_int_eq(r.peak, 1024 + ra);
  vr_trace_free(prog);
  release(tr);
}
END_TEST

START_TEST(a_size_that_is_not_a_polynomial_should_be_refused) {
  vr_trace tr[7];
  probes(tr, not_polynomial, 0);
  const char *why = NULL;
  ck_assert_ptr_null(fit(tr, 0, &why));
  ck_assert_ptr_nonnull(why);
  ck_assert(why[0] != '\0');
  release(tr);
}
END_TEST

START_TEST(traces_of_different_shapes_should_be_refused) {
  vr_trace tr[7];
  probes(tr, attention, 1000);
  ck_assert(vr_trace_push(&tr[3], (vr_op){VR_OP_DELTA, 4, 5, 0, 64, 0, 0, {0}}));
  const char *why = NULL;
  ck_assert_ptr_null(fit(tr, 0, &why));
  release(tr);
}
END_TEST

START_TEST(evaluation_should_report_overflow_instead_of_wrapping) {
  vr_trace tr[7];
  probes(tr, attention, 1000);
  const char *why = NULL;
  vr_trace *prog = fit(tr, 0, &why);
  ck_assert_ptr_nonnull(prog);
  vr_trace_result r;
  ck_assert(!eval2(prog, INT64_MAX / 4, 1 << 20, &r));
  int64_t peak = 0;
  ck_assert(!peak2(prog, INT64_MAX / 4, 1 << 20, &peak));
  vr_trace_free(prog);
  release(tr);
}
END_TEST

/* Four probe traces along a line: batch held at 1 (seq 2..5) or seq held
 * at 1 (batch 2..5), as stdlib/compiled.lua records them. */
static void line_probes(vr_trace tr[4], bool batch_one, size_fn act) {
  for (int i = 0; i < 4; i++) {
    int64_t x = i + 2, b = batch_one ? 1 : x, t = batch_one ? x : 1;
    tr[i] = (vr_trace){0};
    tr[i].batch = b;
    tr[i].seq = t;
    ck_assert(vr_trace_push(&tr[i], (vr_op){VR_OP_DELTA, 0, 1, 0, 1000, 0, 0, {0}}));
    ck_assert(vr_trace_push(&tr[i], (vr_op){VR_OP_DELTA, 4, 2, 0, act(b, t), 0, 0, {0}}));
    ck_assert(vr_trace_push(&tr[i], (vr_op){VR_OP_DELTA, 4, 3, 0, -act(b, t), 0, 0, {0}}));
  }
}

/* A line: the held size of degree 0 at 1, the other of degree 2 from 2. */
static vr_trace *fit_line(vr_trace tr[4], const char **why) {
  const vr_trace *p[4] = {&tr[0], &tr[1], &tr[2], &tr[3]};
  bool batch_one = tr[0].batch == 1;
  vr_grid g = {2, {batch_one ? 0 : 2, batch_one ? 2 : 0}, {batch_one ? 1 : 2, batch_one ? 2 : 1}};
  int64_t sizes[8];
  for (int i = 0; i < 4; i++) sizes[2 * i] = tr[i].batch, sizes[2 * i + 1] = tr[i].seq;
  *why = NULL;
  return vr_trace_fit(p, 4, &g, sizes, 0, NULL, why);
}

START_TEST(a_line_program_should_reproduce_its_polynomial_along_its_line) {
  vr_trace tr[4];
  const char *why = NULL;
  vr_trace_result r;
  line_probes(tr, true, attention);
  vr_trace *prog = fit_line(tr, &why);
  ck_assert_ptr_nonnull(prog);
  ck_assert_int_eq(prog->grid.degree[0], 0); /* batch held at 1 */
  ck_assert_int_eq(prog->grid.base[0], 1);
  ck_assert(eval2(prog, 1, 4096, &r));
  ck_assert_int_eq(r.peak, 1000 + attention(1, 4096));
  vr_trace_free(prog);
  for (int i = 0; i < 4; i++) vr_trace_release(&tr[i]);
  line_probes(tr, false, attention);
  prog = fit_line(tr, &why);
  ck_assert_ptr_nonnull(prog);
  ck_assert_int_eq(prog->grid.degree[1], 0); /* seq held at 1 */
  ck_assert(eval2(prog, 77, 1, &r));
  ck_assert_int_eq(r.peak, 1000 + attention(77, 1));
  vr_trace_free(prog);
  for (int i = 0; i < 4; i++) vr_trace_release(&tr[i]);
}
END_TEST

static int64_t batch_squared(int64_t b, int64_t t) { return b * b * t; }

START_TEST(a_line_should_fit_the_square_of_its_size_and_refuse_what_is_not_a_polynomial) {
  vr_trace tr[4];
  const char *why = NULL;
  vr_trace_result r;
  line_probes(tr, false, batch_squared); /* seq 1: B^2 */
  vr_trace *prog = fit_line(tr, &why);
  ck_assert_ptr_nonnull(prog);
  ck_assert(eval2(prog, 300, 1, &r));
  ck_assert_int_eq(r.peak, 1000 + 300 * 300);
  vr_trace_free(prog);
  for (int i = 0; i < 4; i++) vr_trace_release(&tr[i]);
  line_probes(tr, true, not_polynomial); /* 2, 3, 4 then 4: the check at 5 fails */
  ck_assert_ptr_null(fit_line(tr, &why));
  ck_assert_str_eq(why, "a size is not a polynomial of the traced degrees (a further probe disagrees)");
  for (int i = 0; i < 4; i++) vr_trace_release(&tr[i]);
}
END_TEST

/* A program of many kinds of ops (sizes of every monomial of batch, seq
 * and a rank, both signs, several categories, a composed layer forward and
 * backward whose gradients grow with the rank), the same shape at every
 * probe: the 12 of the grid, then two more. */
static const vr_grid BTR = {3, {1, 2, 1}, {1, 1, 8}};
#define NPROBE 14
static const int64_t EXTRA[2][3] = {{3, 5, 16}, {4, 7, 9}};

static void probe_sizes(int i, int64_t x[3]) {
  if (i < 12) {
    x[0] = 1 + i / 6, x[1] = 1 + (i / 2) % 3, x[2] = 8 + i % 2;
  } else {
    for (int v = 0; v < 3; v++) x[v] = EXTRA[i - 12][v];
  }
}

static uint64_t rng = 88172645463325252u;
static int64_t draw(int64_t n) { /* xorshift: a fixed sequence */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (int64_t)(rng % (uint64_t)n);
}

static void mixed_probes(vr_trace tr[NPROBE]) {
  int64_t coef[40][12];
  for (int k = 0; k < 40; k++)
    for (int i = 0; i < 12; i++) coef[k][i] = draw(4) == 0 ? draw(5000) : 0;
  for (int i = 0; i < NPROBE; i++) {
    int64_t x[3], v[40];
    probe_sizes(i, x);
    for (int k = 0; k < 40; k++) {
      v[k] = 0;
      for (int e = 0; e < 12; e++) { /* B^(e/6) T^((e/2)%3) R^(e%2) */
        int64_t mono = (e / 6 ? x[0] : 1) * ((e / 2) % 3 == 2 ? x[1] * x[1] : (e / 2) % 3 ? x[1] : 1) *
                       (e % 2 ? x[2] : 1);
        v[k] += coef[k][e] * mono;
      }
    }
    tr[i] = (vr_trace){0};
    vr_trace *t = &tr[i];
    ck_assert(vr_trace_push(t, (vr_op){VR_OP_PHASE, 0, 0, 0, 0, 0, 0, {0}}));
    for (int k = 0; k < 10; k++) /* weights, states: allocations */
      ck_assert(vr_trace_push(t, (vr_op){VR_OP_DELTA, k % 3, k, 0, v[k] + 1, 0, 0, {0}}));
    /* four micro-batches: the first's adapter gradients grow with the rank,
     * the other three are alike (a repeated block with composed ops) */
    for (int mb = 0; mb < 4; mb++) {
      /* a layer between two marks, composed 5 more times */
      ck_assert(vr_trace_push(t, (vr_op){VR_OP_MARK, 0, -1, 2 * mb, 0, 0, 0, {0}}));
      for (int k = 10; k < 20; k++) {
        ck_assert(vr_trace_push(t, (vr_op){VR_OP_DELTA, 4, k, 0, v[k] + 7, 0, 0, {0}}));
        if (k % 3 == 0) /* a temporary freed again */
          ck_assert(vr_trace_push(t, (vr_op){VR_OP_DELTA, 4, k, 0, -(v[k] + 7), 0, 0, {0}}));
      }
      ck_assert(vr_trace_push(t, (vr_op){VR_OP_MARK, 0, -1, 2 * mb + 1, 0, 0, 0, {0}}));
      ck_assert(vr_trace_push(t, (vr_op){VR_OP_BULK_FWD, 4, 30, 0, 5, 2 * mb, 0, {0}}));
      ck_assert(vr_trace_push(t, (vr_op){VR_OP_PHASE, 0, 1, 0, 0, 0, 0, {0}}));
      for (int k = 20; k < 30; k++) /* logits and loss: up and down */
        ck_assert(vr_trace_push(t, (vr_op){VR_OP_DELTA, 3 + k % 2, k, 0,
                                           (k % 2 ? -1 : 1) * (v[k] + 3), 0, 0, {0}}));
      for (int rep = 0; rep < 4; rep++) /* a block repeated back to back (layers not composed) */
        for (int k = 0; k < 6; k++)
          ck_assert(vr_trace_push(t, (vr_op){VR_OP_DELTA, 4, 60 + k, 0,
                                             (k % 2 ? -1 : 1) * (v[30 + k] + 11) + (k == 5) * v[36],
                                             0, 0, {0}}));
      for (int k = 0; k < 8; k++) /* changes whose sign depends on the sizes, and back */
        ck_assert(vr_trace_push(t, (vr_op){VR_OP_DELTA, 4, 50 + k, 0,
                                           (k < 4 ? 1 : -1) * (v[10 + k % 4] - v[20 + k % 4]), 0, 0,
                                           {0}}));
      /* the layer's backward, measured once and composed 5 times */
      ck_assert(vr_trace_push(t, (vr_op){VR_OP_MEASURE, 0, -1, 0, 0, 0, 0, {0}}));
      for (int k = 30; k < 40; k++)
        ck_assert(vr_trace_push(t, (vr_op){VR_OP_DELTA, 4 + k % 2, k, 0,
                                           (k % 3 ? 1 : -1) * (v[k] + 5), 0, 0, {0}}));
      int64_t g1 = 600, g2 = mb ? 40 : 48 * x[2] + 40; /* a weight's and an adapter's gradients */
      ck_assert(vr_trace_push(t, (vr_op){VR_OP_BULK_BWD, 4, 31, 0, 5, g1 + g2, 0, {0}}));
      ck_assert(vr_trace_push(t, (vr_op){VR_OP_GRAD, VR_CAT_GRADS, -1, 0, g1, 0, 0, {0}}));
      ck_assert(vr_trace_push(t, (vr_op){VR_OP_GRAD, VR_CAT_GRADS, -1, 0, g2, 0, 0, {0}}));
    }
  }
}

static vr_trace *fit3(vr_trace tr[NPROBE], int64_t round, const char **why) {
  const vr_trace *p[NPROBE];
  int64_t sizes[NPROBE * 3];
  for (int i = 0; i < NPROBE; i++) {
    p[i] = &tr[i];
    probe_sizes(i, sizes + 3 * i);
  }
  return vr_trace_fit(p, NPROBE, &BTR, sizes, round, NULL, why);
}

START_TEST(the_peak_alone_should_equal_the_full_evaluation) {
  for (int round = 0; round <= 512; round += 512) {
    for (int rep = 0; rep < 8; rep++) { /* light enough for a sanitizer build */
      vr_trace tr[NPROBE];
      mixed_probes(tr);
      const char *why = NULL;
      vr_trace *prog = fit3(tr, round, &why);
      ck_assert_msg(prog != NULL, "%s", why);
      ck_assert(vr_plan_len(prog->plan) < prog->n); /* it folds */
      for (int64_t b = 1; b < 40; b += 6)
        for (int64_t t = 1; t < 9000; t += 997)
          for (int64_t rank = 1; rank < 300; rank += 149) {
            vr_trace_result r;
            int64_t peak = -1, x[3] = {b, t, rank};
            ck_assert(vr_trace_eval(prog, x, &r));
            ck_assert(vr_trace_peak(prog, x, &peak));
            ck_assert_int_eq(peak, r.peak);
          }
      /* near the limits: both report the overflow, or both the same bytes */
      for (int64_t b = INT64_C(1) << 20; b < (INT64_C(1) << 40); b <<= 2) {
        vr_trace_result r;
        int64_t peak = -1, x[3] = {b, 1 << 12, 64};
        bool full = vr_trace_eval(prog, x, &r);
        ck_assert(vr_trace_peak(prog, x, &peak) == full);
        if (full) ck_assert_int_eq(peak, r.peak);
      }
      vr_trace_free(prog);
      for (int i = 0; i < NPROBE; i++) vr_trace_release(&tr[i]);
    }
  }
}
END_TEST

/* More distinct polynomials than the peak path keeps on its stack
 * (trace_peak.c PK_POLYS, 1024): each plan op then computes its own, and
 * the peak is still the full evaluation's. Each pair of changes (-(k + 2)
 * b + (k + 1) b t + k) is its own plan op and its own polynomial. */
START_TEST(a_plan_of_more_distinct_polynomials_than_kept_should_still_peak_right) {
  enum { PAIRS = 1100 };
  vr_trace tr[NPROBE];
  for (int i = 0; i < NPROBE; i++) {
    int64_t x[3];
    probe_sizes(i, x);
    tr[i] = (vr_trace){0};
    for (int k = 0; k < PAIRS; k++) {
      ck_assert(vr_trace_push(&tr[i], (vr_op){VR_OP_DELTA, 4, 1, 0, (k + 1) * x[0] * x[1] + k,
                                              0, 0, {0}}));
      ck_assert(vr_trace_push(&tr[i], (vr_op){VR_OP_DELTA, 4, 2, 0, -(k + 2) * x[0], 0, 0, {0}}));
    }
  }
  for (int round = 0; round <= 512; round += 512) {
    const char *why = NULL;
    vr_trace *prog = fit3(tr, round, &why);
    ck_assert_msg(prog != NULL, "%s", why);
    ck_assert(vr_plan_len(prog->plan) > 1024);
    for (int64_t b = 1; b < 40; b += 13)
      for (int64_t t = 1; t < 9000; t += 2999) {
        vr_trace_result r;
        int64_t peak = -1, x[3] = {b, t, 8};
        ck_assert(vr_trace_eval(prog, x, &r));
        ck_assert(vr_trace_peak(prog, x, &peak));
        ck_assert_int_eq(peak, r.peak);
      }
    vr_trace_free(prog);
  }
  for (int i = 0; i < NPROBE; i++) vr_trace_release(&tr[i]);
}
END_TEST

/* Three sizes, one of degree 2 probed from 64 (an image's tokens): the
 * polynomial written out, at sizes far from the probes. */
static int64_t three(const int64_t x[3]) {
  int64_t b = x[0], t = x[1], u = x[2];
  return 7 * b * (t + u) * (t + u) + 3 * b * t * u + 512 * u + 99;
}

START_TEST(a_program_of_three_sizes_should_reproduce_its_polynomial) {
  static const vr_grid g = {3, {1, 2, 2}, {1, 1, 64}};
  enum { K = 18 + 1 };
  vr_trace tr[K];
  const vr_trace *p[K];
  int64_t sizes[K * 3];
  for (int i = 0; i < K; i++) {
    int64_t *x = sizes + 3 * i;
    if (i < 18) x[0] = 1 + i / 9, x[1] = 1 + (i / 3) % 3, x[2] = 64 + i % 3;
    else x[0] = 3, x[1] = 5, x[2] = 72;
    tr[i] = (vr_trace){0};
    ck_assert(vr_trace_push(&tr[i], (vr_op){VR_OP_DELTA, 4, 1, 0, three(x), 0, 0, {0}}));
    p[i] = &tr[i];
  }
  const char *why = NULL;
  vr_trace *prog = vr_trace_fit(p, K, &g, sizes, 0, NULL, &why);
  ck_assert_msg(prog != NULL, "%s", why);
  int64_t x[3] = {16, 4096, 1024}, peak = 0;
  ck_assert(vr_trace_peak(prog, x, &peak));
  ck_assert_int_eq(peak, three(x));
  vr_trace_free(prog);
  /* a value off the polynomial at the further probe: refused */
  tr[K - 1].ops[0].value += 1;
  ck_assert_ptr_null(vr_trace_fit(p, K, &g, sizes, 0, NULL, &why));
  ck_assert_str_eq(why, "a size is not a polynomial of the traced degrees (a further probe disagrees)");
  /* the grid's probes out of order: refused */
  sizes[2] = 65;
  ck_assert_ptr_null(vr_trace_fit(p, K, &g, sizes, 0, NULL, &why));
  ck_assert_str_eq(why, "the probes' sizes are not the grid's");
  for (int i = 0; i < K; i++) vr_trace_release(&tr[i]);
}
END_TEST

static Suite *trace_suite(void) {
  Suite *s = suite_create("trace");
  TCase *tc = tcase_create("fit");
  /* Check's default 4 s per test is a wall-clock limit: a sanitizer build
   * on a loaded 2-core machine once ran past it (the cases' work is fixed) */
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, a_fitted_program_should_reproduce_its_polynomial_at_any_size);
  tcase_add_test(tc, rounding_should_apply_to_every_tensor_of_the_program);
  tcase_add_test(tc, a_size_that_is_not_a_polynomial_should_be_refused);
  tcase_add_test(tc, traces_of_different_shapes_should_be_refused);
  tcase_add_test(tc, evaluation_should_report_overflow_instead_of_wrapping);
  tcase_add_test(tc, a_line_program_should_reproduce_its_polynomial_along_its_line);
  tcase_add_test(tc, a_line_should_fit_the_square_of_its_size_and_refuse_what_is_not_a_polynomial);
  tcase_add_test(tc, the_peak_alone_should_equal_the_full_evaluation);
  tcase_add_test(tc, a_program_of_three_sizes_should_reproduce_its_polynomial);
  tcase_add_test(tc, a_plan_of_more_distinct_polynomials_than_kept_should_still_peak_right);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(trace_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
