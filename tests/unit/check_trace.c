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

/* Fits the seven probe traces; NULL (with a reason) when refused. */
static vr_trace *fit(vr_trace tr[7], int64_t round, const char **why) {
  const vr_trace *p[7] = {&tr[0], &tr[1], &tr[2], &tr[3], &tr[4], &tr[5], &tr[6]};
  *why = NULL;
  return vr_trace_fit(p, 7, round, why);
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
  ck_assert(vr_trace_eval(prog, 8, 4096, &r));
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
  ck_assert(vr_trace_eval(prog, 3, 7, &r));
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
  ck_assert(!vr_trace_eval(prog, INT64_MAX / 4, 1 << 20, &r));
  int64_t peak = 0;
  ck_assert(!vr_trace_peak(prog, INT64_MAX / 4, 1 << 20, &peak));
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

static vr_trace *fit_line(vr_trace tr[4], const char **why) {
  const vr_trace *p[4] = {&tr[0], &tr[1], &tr[2], &tr[3]};
  *why = NULL;
  return vr_trace_fit(p, 4, 0, why);
}

START_TEST(a_line_program_should_reproduce_its_polynomial_along_its_line) {
  vr_trace tr[4];
  const char *why = NULL;
  vr_trace_result r;
  line_probes(tr, true, attention);
  vr_trace *prog = fit_line(tr, &why);
  ck_assert_ptr_nonnull(prog);
  ck_assert_int_eq(prog->batch, 1);
  ck_assert_int_eq(prog->seq, 0);
  ck_assert(vr_trace_eval(prog, 1, 4096, &r));
  ck_assert_int_eq(r.peak, 1000 + attention(1, 4096));
  vr_trace_free(prog);
  for (int i = 0; i < 4; i++) vr_trace_release(&tr[i]);
  line_probes(tr, false, attention);
  prog = fit_line(tr, &why);
  ck_assert_ptr_nonnull(prog);
  ck_assert_int_eq(prog->seq, 1);
  ck_assert(vr_trace_eval(prog, 77, 1, &r));
  ck_assert_int_eq(r.peak, 1000 + attention(77, 1));
  vr_trace_free(prog);
  for (int i = 0; i < 4; i++) vr_trace_release(&tr[i]);
}
END_TEST

static int64_t batch_squared(int64_t b, int64_t t) { return b * b * t; }

START_TEST(a_line_that_no_monomial_can_hold_should_be_refused) {
  vr_trace tr[4];
  const char *why = NULL;
  line_probes(tr, false, batch_squared); /* seq 1: B^2 has no monomial */
  ck_assert_ptr_null(fit_line(tr, &why));
  ck_assert_str_eq(why, "a size grows with the square of the batch");
  for (int i = 0; i < 4; i++) vr_trace_release(&tr[i]);
  line_probes(tr, true, not_polynomial); /* 2, 3, 4 then 4: the check at 5 fails */
  ck_assert_ptr_null(fit_line(tr, &why));
  ck_assert_str_eq(why, "a size is not a polynomial of degree 2");
  for (int i = 0; i < 4; i++) vr_trace_release(&tr[i]);
}
END_TEST

/* A program of many kinds of ops (sizes of every monomial and both signs,
 * several categories, a composed layer forward and backward), the same
 * shape at every probe. */
static uint64_t rng = 88172645463325252u;
static int64_t draw(int64_t n) { /* xorshift: a fixed sequence */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (int64_t)(rng % (uint64_t)n);
}

static void mixed_probes(vr_trace tr[7]) {
  int64_t coef[40][VR_MONOMIALS];
  for (int k = 0; k < 40; k++)
    for (int i = 0; i < VR_MONOMIALS; i++) coef[k][i] = draw(3) == 0 ? draw(5000) : 0;
  for (int i = 0; i < 7; i++) {
    int64_t b = PB[i], t = PT[i], m[VR_MONOMIALS] = {1, b, t, b * t, t * t, b * t * t};
    int64_t v[40];
    for (int k = 0; k < 40; k++) {
      v[k] = 0;
      for (int j = 0; j < VR_MONOMIALS; j++) v[k] += coef[k][j] * m[j];
    }
    tr[i] = (vr_trace){0};
    tr[i].batch = b;
    tr[i].seq = t;
    vr_trace *x = &tr[i];
    ck_assert(vr_trace_push(x, (vr_op){VR_OP_PHASE, 0, 0, 0, 0, 0, 0, {0}}));
    for (int k = 0; k < 10; k++) /* weights, states: allocations */
      ck_assert(vr_trace_push(x, (vr_op){VR_OP_DELTA, k % 3, k, 0, v[k] + 1, 0, 0, {0}}));
    /* a layer between two marks, composed 5 more times */
    ck_assert(vr_trace_push(x, (vr_op){VR_OP_MARK, 0, -1, 0, 0, 0, 0, {0}}));
    for (int k = 10; k < 20; k++) {
      ck_assert(vr_trace_push(x, (vr_op){VR_OP_DELTA, 4, k, 0, v[k] + 7, 0, 0, {0}}));
      if (k % 3 == 0) /* a temporary freed again */
        ck_assert(vr_trace_push(x, (vr_op){VR_OP_DELTA, 4, k, 0, -(v[k] + 7), 0, 0, {0}}));
    }
    ck_assert(vr_trace_push(x, (vr_op){VR_OP_MARK, 0, -1, 1, 0, 0, 0, {0}}));
    ck_assert(vr_trace_push(x, (vr_op){VR_OP_BULK_FWD, 4, 30, 0, 5, 0, 0, {0}}));
    ck_assert(vr_trace_push(x, (vr_op){VR_OP_PHASE, 0, 1, 0, 0, 0, 0, {0}}));
    for (int k = 20; k < 30; k++) /* logits and loss: up and down */
      ck_assert(vr_trace_push(x, (vr_op){VR_OP_DELTA, 3 + k % 2, k, 0,
                                         (k % 2 ? -1 : 1) * (v[k] + 3), 0, 0, {0}}));
    /* the layer's backward, measured once and composed 5 times */
    ck_assert(vr_trace_push(x, (vr_op){VR_OP_MEASURE, 0, -1, 0, 0, 0, 0, {0}}));
    for (int k = 30; k < 40; k++)
      ck_assert(vr_trace_push(x, (vr_op){VR_OP_DELTA, 4 + k % 2, k, 0,
                                         (k % 3 ? 1 : -1) * (v[k] + 5), 0, 0, {0}}));
    ck_assert(vr_trace_push(x, (vr_op){VR_OP_BULK_BWD, 4, 31, 0, 5, 640, 0, {0}}));
    ck_assert(vr_trace_push(x, (vr_op){VR_OP_GRAD, VR_CAT_GRADS, -1, 0, 600, 0, 0, {0}}));
    ck_assert(vr_trace_push(x, (vr_op){VR_OP_GRAD, VR_CAT_GRADS, -1, 0, 40, 0, 0, {0}}));
  }
}

START_TEST(the_peak_alone_should_equal_the_full_evaluation) {
  for (int round = 0; round <= 512; round += 512) {
    for (int rep = 0; rep < 20; rep++) {
      vr_trace tr[7];
      mixed_probes(tr);
      const char *why = NULL;
      vr_trace *prog = fit(tr, round, &why);
      ck_assert_msg(prog != NULL, "%s", why);
      ck_assert(vr_plan_len(prog->plan) < prog->n); /* it folds */
      for (int64_t b = 1; b < 40; b += 3)
        for (int64_t t = 1; t < 9000; t += 331) {
          vr_trace_result r;
          int64_t peak = -1;
          ck_assert(vr_trace_eval(prog, b, t, &r));
          ck_assert(vr_trace_peak(prog, b, t, &peak));
          ck_assert_int_eq(peak, r.peak);
        }
      /* near the limits: both report the overflow, or both the same bytes */
      for (int64_t b = INT64_C(1) << 20; b < (INT64_C(1) << 40); b <<= 2) {
        vr_trace_result r;
        int64_t peak = -1;
        bool full = vr_trace_eval(prog, b, 1 << 12, &r);
        ck_assert(vr_trace_peak(prog, b, 1 << 12, &peak) == full);
        if (full) ck_assert_int_eq(peak, r.peak);
      }
      vr_trace_free(prog);
      release(tr);
    }
  }
}
END_TEST

static Suite *trace_suite(void) {
  Suite *s = suite_create("trace");
  TCase *tc = tcase_create("fit");
  tcase_add_test(tc, a_fitted_program_should_reproduce_its_polynomial_at_any_size);
  tcase_add_test(tc, rounding_should_apply_to_every_tensor_of_the_program);
  tcase_add_test(tc, a_size_that_is_not_a_polynomial_should_be_refused);
  tcase_add_test(tc, traces_of_different_shapes_should_be_refused);
  tcase_add_test(tc, evaluation_should_report_overflow_instead_of_wrapping);
  tcase_add_test(tc, a_line_program_should_reproduce_its_polynomial_along_its_line);
  tcase_add_test(tc, a_line_that_no_monomial_can_hold_should_be_refused);
  tcase_add_test(tc, the_peak_alone_should_equal_the_full_evaluation);
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
