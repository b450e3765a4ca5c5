/* Unit tests of runtime/core/tape.c, the allocation simulator.
 *
 * Every scenario is small enough to follow by hand: the comments walk
 * through each allocation and release, and the expected live bytes, peak,
 * peak phase and peak op are the sums written there. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tape.h"

#define OK(expr) ck_assert_int_eq((expr), VR_OK)
#define NOEDGE (-1)

static vr_tape *t;

static void setup(void) {
  t = vr_tape_new(NULL);
  ck_assert_ptr_nonnull(t);
}

static void teardown(void) {
  vr_tape_free(t);
  t = NULL;
}

static int64_t alloc(int64_t bytes, int cat) {
  int64_t id = -1;
  OK(vr_tape_alloc(t, bytes, cat, -1, false, &id));
  ck_assert_int_ge(id, 0);
  return id;
}

static int64_t param(int64_t bytes) {
  int64_t id = -1;
  OK(vr_tape_alloc(t, bytes, VR_CAT_WEIGHTS, -1, true, &id));
  return id;
}

static vr_tape_stats stats(void) {
  vr_tape_stats s;
  vr_tape_stats_get(t, &s);
  return s;
}

static int64_t live(void) { return stats().live; }
static int64_t peak(void) { return stats().peak; }
static const char *peak_phase(void) { return vr_tape_string(t, stats().peak_phase); }
static const char *peak_label(void) { return vr_tape_string(t, stats().peak_label); }

static int64_t phase_peak(const char *phase) {
  for (int i = 0; i < vr_tape_nstrings(t); i++)
    if (strcmp(vr_tape_string(t, i), phase) == 0) return vr_tape_phase_peak(t, i);
  return 0;
}

/* The interned index of s (interning must succeed). */
static int intern(const char *s) {
  int k = -1;
  OK(vr_tape_intern(t, s, &k));
  return k;
}

/* Sum of the by-category arrays must always equal the total. */
static void check_category_sums(void) {
  vr_tape_stats s = stats();
  int64_t a = 0, b = 0;
  for (int i = 0; i < VR_NCAT; i++) {
    ck_assert_int_ge(s.live_by_cat[i], 0);
    a += s.live_by_cat[i];
    b += s.peak_by_cat[i];
  }
  ck_assert_int_eq(a, s.live);
  ck_assert_int_eq(b, s.peak);
}

/* ---------------------------------------------------------------- names */

START_TEST(category_names_should_round_trip) {
  for (int i = 0; i < VR_NCAT; i++) ck_assert_int_eq(vr_cat_find(vr_cat_name(i)), i);
  ck_assert_str_eq(vr_cat_name(VR_CAT_WEIGHTS), "weights");
  ck_assert_str_eq(vr_cat_name(VR_CAT_GRADS), "gradients");
  ck_assert_str_eq(vr_cat_name(VR_CAT_TEMP), "temporaries");
  ck_assert_str_eq(vr_cat_name(-1), "?");
  ck_assert_str_eq(vr_cat_name(VR_NCAT), "?");
  ck_assert_int_eq(vr_cat_find("weight"), -1);
  ck_assert_int_eq(vr_cat_find(""), -1);
}
END_TEST

START_TEST(every_status_should_have_its_own_message) {
  for (int a = VR_OK; a <= VR_ETOOMANY; a++) {
    const char *m = vr_tape_error((vr_status)a);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_gt((int)strlen(m), 0);
    ck_assert_str_ne(m, "unknown error");
    for (int b = a + 1; b <= VR_ETOOMANY; b++) ck_assert_str_ne(m, vr_tape_error((vr_status)b));
  }
  ck_assert_str_eq(vr_tape_error((vr_status)999), "unknown error");
}
END_TEST

START_TEST(interned_strings_should_keep_their_index) {
  int a = intern("attention"), b = intern("mlp");
  ck_assert_int_ge(a, 0);
  ck_assert_int_ne(a, b);
  ck_assert_int_eq(intern("attention"), a);
  ck_assert_str_eq(vr_tape_string(t, a), "attention");
  ck_assert_ptr_null(vr_tape_string(t, -1));
  ck_assert_ptr_null(vr_tape_string(t, 100000));
}
END_TEST

/* The strings share one growing buffer: every one keeps its text and index
 * as the buffer moves, and a string interned from inside it (a tail of an
 * interned one, read while the buffer grows) is copied whole. */
START_TEST(interned_strings_should_keep_their_text_as_the_table_grows) {
  char name[32];
  int first = -1;
  for (int i = 0; i < 3000; i++) {
    snprintf(name, sizeof name, "layer.%d.mlp", i);
    int k = intern(name);
    if (i == 0) first = k;
    ck_assert_int_eq(k, first + i);
  }
  for (int i = 0; i < 3000; i++) {
    snprintf(name, sizeof name, "layer.%d.mlp", i);
    ck_assert_str_eq(vr_tape_string(t, first + i), name);
    ck_assert_int_eq(intern(name), first + i);
  }
  /* tails: "<i>.mlp" are new strings, copied out of the buffer they lie in */
  for (int i = 0; i < 300; i++) {
    const char *tail = vr_tape_string(t, first + i) + strlen("layer.");
    snprintf(name, sizeof name, "%d.mlp", i);
    int k = -1;
    ck_assert_int_eq(vr_tape_intern(t, tail, &k), VR_OK);
    ck_assert_int_eq(k, first + 3000 + i);
    ck_assert_str_eq(vr_tape_string(t, k), name);
  }
  ck_assert_int_eq(vr_tape_nstrings(t), first + 3300);
  /* reset keeps the strings */
  vr_tape_reset(t);
  ck_assert_str_eq(vr_tape_string(t, first + 2999), "layer.2999.mlp");
  ck_assert_str_eq(vr_tape_string(t, 0), "setup");
}
END_TEST

/* ---------------------------------------------------------------- accounting */

START_TEST(a_new_tape_should_be_empty_in_phase_setup) {
  vr_tape_stats s = stats();
  ck_assert_int_eq(s.live, 0);
  ck_assert_int_eq(s.peak, 0);
  ck_assert_int_eq(s.peak_label, -1);
  ck_assert_str_eq(peak_phase(), "setup");
}
END_TEST

START_TEST(alloc_and_drop_should_track_live_bytes_and_peak) {
  OK(vr_tape_phase(t, "forward"));
  int64_t a = alloc(100, VR_CAT_WEIGHTS); /* live 100 */
  int64_t b = alloc(50, VR_CAT_ACTIV);    /* live 150, peak 150 */
  ck_assert_int_ne(a, b);
  ck_assert_int_eq(live(), 150);
  OK(vr_tape_drop(t, a)); /* live 50 */
  ck_assert_int_eq(live(), 50);
  int64_t c = alloc(30, VR_CAT_ACTIV); /* live 80; peak stays 150 */
  ck_assert_int_eq(live(), 80);
  ck_assert_int_eq(peak(), 150);
  ck_assert_str_eq(peak_phase(), "forward");
  vr_tape_stats s = stats();
  /* the peak's snapshot: 100 weights + 50 activations */
  ck_assert_int_eq(s.peak_by_cat[VR_CAT_WEIGHTS], 100);
  ck_assert_int_eq(s.peak_by_cat[VR_CAT_ACTIV], 50);
  /* now: 50 + 30 activations, no weights */
  ck_assert_int_eq(s.live_by_cat[VR_CAT_WEIGHTS], 0);
  ck_assert_int_eq(s.live_by_cat[VR_CAT_ACTIV], 80);
  check_category_sums();
  OK(vr_tape_drop(t, b));
  OK(vr_tape_drop(t, c));
  ck_assert_int_eq(live(), 0);
  ck_assert_int_eq(peak(), 150);
}
END_TEST

START_TEST(bytes_and_grad_should_describe_live_tensors_only) {
  int64_t a = alloc(123, VR_CAT_ACTIV);
  ck_assert_int_eq(vr_tape_bytes(t, a), 123);
  ck_assert_int_eq(vr_tape_grad(t, a), -1);
  OK(vr_tape_drop(t, a));
  ck_assert_int_eq(vr_tape_bytes(t, a), -1);
  ck_assert_int_eq(vr_tape_bytes(t, 99), -1);
  ck_assert_int_eq(vr_tape_bytes(t, -1), -1);
  ck_assert_int_eq(vr_tape_grad(t, 99), -1);
}
END_TEST

START_TEST(zero_byte_tensors_should_be_allowed_and_cost_nothing) {
  int64_t a = alloc(0, VR_CAT_ACTIV);
  ck_assert_int_eq(live(), 0);
  ck_assert_int_eq(vr_tape_bytes(t, a), 0);
  OK(vr_tape_drop(t, a));
}
END_TEST

START_TEST(a_temporary_should_raise_the_peak_but_not_live_bytes) {
  int op = intern("softmax");
  alloc(100, VR_CAT_ACTIV);           /* live 100 */
  OK(vr_tape_phase(t, "forward"));
  OK(vr_tape_temp(t, 1000, VR_CAT_TEMP, op)); /* 100 + 1000 for one instant */
  ck_assert_int_eq(live(), 100);
  ck_assert_int_eq(peak(), 1100);
  ck_assert_str_eq(peak_label(), "softmax");
  ck_assert_str_eq(peak_phase(), "forward");
  vr_tape_stats s = stats();
  ck_assert_int_eq(s.peak_by_cat[VR_CAT_TEMP], 1000);
  ck_assert_int_eq(s.live_by_cat[VR_CAT_TEMP], 0);
  check_category_sums();
  /* a smaller temp later changes nothing */
  OK(vr_tape_temp(t, 999, VR_CAT_TEMP, -1));
  ck_assert_int_eq(peak(), 1100);
  ck_assert_str_eq(peak_label(), "softmax");
}
END_TEST

START_TEST(each_phase_should_keep_its_own_peak) {
  OK(vr_tape_phase(t, "forward"));
  int64_t a = alloc(300, VR_CAT_ACTIV); /* forward peak 300 */
  OK(vr_tape_phase(t, "backward"));
  OK(vr_tape_drop(t, a));
  alloc(100, VR_CAT_GRADS); /* backward: 0 after the drop, then 100 */
  OK(vr_tape_phase(t, "optimizer"));
  OK(vr_tape_temp(t, 50, VR_CAT_TEMP, -1)); /* 150 */
  ck_assert_int_eq(phase_peak("forward"), 300);
  ck_assert_int_eq(phase_peak("backward"), 100);
  ck_assert_int_eq(phase_peak("optimizer"), 150);
  ck_assert_int_eq(peak(), 300);
  ck_assert_str_eq(peak_phase(), "forward");
  /* phases with nothing live are left out */
  ck_assert_int_eq(phase_peak("setup"), 0);
  ck_assert_int_eq(vr_tape_nstrings(t), 4); /* setup, forward, backward, optimizer */
}
END_TEST

/* ---------------------------------------------------------------- backward */

/* y = x @ W (linear), loss = f(y). Sizes: W 400, x 100, y 200, loss 4.
 *
 * forward:  W 400 + x 100 + y 200 + L 4                      = 704 (peak 704)
 *   (the front end drops x and y; node 1 keeps x, node 2 keeps y)
 * backward(L):
 *   dL 4 (root)                                    704 + 4   = 708
 *   loss node: dy 200                              708 + 200 = 908
 *              frees dL                                        904
 *              releases y (saved, last reference)              704
 *   linear:    dW 400 (param -> "gradients")       704 + 400 = 1104  <- peak
 *              frees dy                                        904
 *              releases x                                      804
 * after: W 400 + L 4 + dW 400 = 804; dW persists until zero_grad. */
static void linear_then_loss(int64_t *W, int64_t *L) {
  int lin = intern("linear"), loss = intern("loss");
  OK(vr_tape_phase(t, "forward"));
  *W = param(400);
  int64_t x = alloc(100, VR_CAT_INPUTS);
  int64_t y = alloc(200, VR_CAT_ACTIV);
  OK(vr_tape_node(t, (int64_t[]){x, *W}, 2, (vr_edge[]){{*W, 400, NOEDGE}}, 1,
                  (int64_t[]){y}, 1, 0, lin));
  *L = alloc(4, VR_CAT_LOGITS);
  OK(vr_tape_node(t, (int64_t[]){y}, 1, (vr_edge[]){{y, 200, NOEDGE}}, 1, (int64_t[]){*L}, 1,
                  0, loss));
  OK(vr_tape_drop(t, x));
  OK(vr_tape_drop(t, y));
}

START_TEST(linear_then_loss_should_peak_in_backward_at_the_weight_gradient) {
  int64_t W, L;
  linear_then_loss(&W, &L);
  ck_assert_int_eq(live(), 704);
  ck_assert_int_eq(peak(), 704);
  OK(vr_tape_phase(t, "backward"));
  OK(vr_tape_backward(t, L));
  ck_assert_int_eq(peak(), 1104);
  ck_assert_str_eq(peak_phase(), "backward");
  ck_assert_str_eq(peak_label(), "linear");
  ck_assert_int_eq(phase_peak("forward"), 704);
  ck_assert_int_eq(phase_peak("backward"), 1104);
  vr_tape_stats s = stats();
  /* at the peak: W 400, x 100, dy 200, L 4, dW 400 (y already released) */
  ck_assert_int_eq(s.peak_by_cat[VR_CAT_WEIGHTS], 400);
  ck_assert_int_eq(s.peak_by_cat[VR_CAT_INPUTS], 100);
  ck_assert_int_eq(s.peak_by_cat[VR_CAT_ACTIV], 200);
  ck_assert_int_eq(s.peak_by_cat[VR_CAT_LOGITS], 4);
  ck_assert_int_eq(s.peak_by_cat[VR_CAT_GRADS], 400);
  check_category_sums();
}
END_TEST

START_TEST(parameter_gradients_should_persist_until_zero_grad) {
  int64_t W, L;
  linear_then_loss(&W, &L);
  OK(vr_tape_backward(t, L));
  /* W 400 + L 4 + dW 400 */
  ck_assert_int_eq(live(), 804);
  ck_assert_int_eq(stats().live_by_cat[VR_CAT_GRADS], 400);
  int64_t g = vr_tape_grad(t, W);
  ck_assert_int_ge(g, 0);
  ck_assert_int_eq(vr_tape_bytes(t, g), 400);
  ck_assert_int_eq(vr_tape_grad(t, L), -1); /* dL freed by the loss node */
  OK(vr_tape_drop(t, L));
  ck_assert_int_eq(live(), 800);
  OK(vr_tape_zero_grad(t));
  ck_assert_int_eq(live(), 400);
  ck_assert_int_eq(vr_tape_grad(t, W), -1);
  OK(vr_tape_zero_grad(t)); /* idempotent */
  ck_assert_int_eq(live(), 400);
  check_category_sums();
}
END_TEST

/* The same tape twice without zero_grad (gradient accumulation over micro
 * batches): the second step's dW is added into the first and freed.
 *   step 1: W 400, x 100, y 200 -> 700; backward(y):
 *           dy 200 -> 900, dW 400 -> 1300, -dy -> 1100, -x -> 1000; drop y -> 800
 *   step 2: x 100, y 200 -> 1100; backward(y):
 *           dy 200 -> 1300, dW' 400 -> 1700 (peak), -dy -> 1500, -x -> 1400,
 *           -dW' (accumulated) -> 1000; drop y -> 800 */
START_TEST(a_second_backward_should_accumulate_into_existing_parameter_gradients) {
  int64_t W = param(400);
  for (int step = 0; step < 2; step++) {
    int64_t x = alloc(100, VR_CAT_INPUTS), y = alloc(200, VR_CAT_ACTIV);
    OK(vr_tape_node(t, (int64_t[]){x}, 1, (vr_edge[]){{W, 400, NOEDGE}}, 1, (int64_t[]){y}, 1,
                    0, -1));
    OK(vr_tape_drop(t, x));
    OK(vr_tape_backward(t, y));
    ck_assert_int_eq(live(), 1000);
    OK(vr_tape_drop(t, y));
    ck_assert_int_eq(live(), 800);
  }
  ck_assert_int_eq(peak(), 1700);
  OK(vr_tape_zero_grad(t));
  ck_assert_int_eq(live(), 400);
}
END_TEST

/* h feeds two ops, a = f(h) and b = g(h); loss = a + b.
 * h 100 (param), a 10, b 10, L 4: forward 124.
 * backward(L): dL 4 -> 128; loss: da 10 -> 138, db 10 -> 148, -dL -> 144
 *   g (ran last, so first back): dh 100 -> 244, -db -> 234
 *   f: dh' 100 -> 334 (peak), accumulated into dh: -da -> 324, -dh' -> 224
 * after: h 100 + a 10 + b 10 + L 4 + dh 100 = 224 */
START_TEST(a_second_gradient_into_the_same_tensor_should_be_transient) {
  int64_t h = param(100);
  int64_t a = alloc(10, VR_CAT_ACTIV);
  OK(vr_tape_node(t, NULL, 0, (vr_edge[]){{h, 100, NOEDGE}}, 1, (int64_t[]){a}, 1, 0, -1));
  int64_t b = alloc(10, VR_CAT_ACTIV);
  OK(vr_tape_node(t, NULL, 0, (vr_edge[]){{h, 100, NOEDGE}}, 1, (int64_t[]){b}, 1, 0, -1));
  int64_t L = alloc(4, VR_CAT_LOGITS);
  OK(vr_tape_node(t, NULL, 0, (vr_edge[]){{a, 10, NOEDGE}, {b, 10, NOEDGE}}, 2,
                  (int64_t[]){L}, 1, 0, -1));
  ck_assert_int_eq(live(), 124);
  OK(vr_tape_backward(t, L));
  ck_assert_int_eq(peak(), 334);
  ck_assert_int_eq(live(), 224);
  ck_assert_int_eq(stats().live_by_cat[VR_CAT_GRADS], 100);
  ck_assert_int_eq(vr_tape_bytes(t, vr_tape_grad(t, h)), 100);
  check_category_sums();
}
END_TEST

/* v = x.view(...): no new memory, and backward passes dv through as dx.
 * x 100, v 0, L 4: forward 104.
 * backward(L): dL 4 -> 108; loss: dv 100 -> 208 (peak), -dL -> 204
 *   view: dv becomes dx, nothing allocated or freed -> 204 */
START_TEST(a_view_should_pass_its_gradient_through_without_new_memory) {
  int64_t x = alloc(100, VR_CAT_ACTIV);
  int64_t v = alloc(0, VR_CAT_ACTIV);
  OK(vr_tape_node(t, NULL, 0, (vr_edge[]){{x, 0, 0}}, 1, (int64_t[]){v}, 1, 0, -1));
  int64_t L = alloc(4, VR_CAT_LOGITS);
  OK(vr_tape_node(t, NULL, 0, (vr_edge[]){{v, 100, NOEDGE}}, 1, (int64_t[]){L}, 1, 0, -1));
  ck_assert_int_eq(live(), 104);
  OK(vr_tape_backward(t, L));
  ck_assert_int_eq(peak(), 208);
  ck_assert_int_eq(live(), 204);
  int64_t dx = vr_tape_grad(t, x);
  ck_assert_int_ge(dx, 0);
  ck_assert_int_eq(vr_tape_bytes(t, dx), 100);
  ck_assert_int_eq(vr_tape_grad(t, v), -1);
  check_category_sums();
}
END_TEST

/* x is used directly and through a view: the view's gradient is added into
 * dx in place and then freed.
 * x 100, v 0, L 4: 104. backward(L): dL -> 108; loss: dv 100 -> 208,
 * dx 100 -> 308 (peak), -dL -> 304; view: dx exists, dv freed -> 204 */
START_TEST(a_view_gradient_should_be_freed_when_the_base_already_has_one) {
  int64_t x = alloc(100, VR_CAT_ACTIV);
  int64_t v = alloc(0, VR_CAT_ACTIV);
  OK(vr_tape_node(t, NULL, 0, (vr_edge[]){{x, 0, 0}}, 1, (int64_t[]){v}, 1, 0, -1));
  int64_t L = alloc(4, VR_CAT_LOGITS);
  OK(vr_tape_node(t, NULL, 0, (vr_edge[]){{v, 100, NOEDGE}, {x, 100, NOEDGE}}, 2,
                  (int64_t[]){L}, 1, 0, -1));
  OK(vr_tape_backward(t, L));
  ck_assert_int_eq(peak(), 308);
  ck_assert_int_eq(live(), 204);
  check_category_sums();
}
END_TEST

/* a is saved by the node; the front end's drop leaves it alive until the
 * node has run. a 100, o 10 -> 110; drop a -> still 110;
 * backward() without a root: no gradients, a released -> 10 */
START_TEST(saved_tensors_should_be_released_after_their_node_runs) {
  int64_t a = alloc(100, VR_CAT_ACTIV), o = alloc(10, VR_CAT_ACTIV);
  OK(vr_tape_node(t, (int64_t[]){a}, 1, (vr_edge[]){{a, 100, NOEDGE}}, 1, (int64_t[]){o}, 1, 0,
                  -1));
  OK(vr_tape_drop(t, a));
  ck_assert_int_eq(live(), 110);
  ck_assert_int_eq(vr_tape_bytes(t, a), 100);
  OK(vr_tape_backward(t, -1));
  ck_assert_int_eq(live(), 10);
  ck_assert_int_eq(peak(), 110);
  ck_assert_int_eq(vr_tape_bytes(t, a), -1);
  ck_assert_int_eq(vr_tape_grad(t, a), -1);
}
END_TEST

/* The node's backward workspace is a spike while it runs.
 * W 400, x 100, y 200 -> 700; backward(y): dy 200 -> 900, dW 400 -> 1300,
 * workspace 1000 -> 2300 (peak, "matmul"), back to 1300, -dy -> 1100,
 * -x -> 1000 */
START_TEST(a_node_workspace_should_spike_during_its_backward) {
  int mm = intern("matmul");
  int64_t W = param(400), x = alloc(100, VR_CAT_INPUTS), y = alloc(200, VR_CAT_ACTIV);
  OK(vr_tape_node(t, (int64_t[]){x}, 1, (vr_edge[]){{W, 400, NOEDGE}}, 1, (int64_t[]){y}, 1,
                  1000, mm));
  OK(vr_tape_drop(t, x));
  ck_assert_int_eq(peak(), 700); /* the workspace is a backward cost only */
  OK(vr_tape_phase(t, "backward"));
  OK(vr_tape_backward(t, y));
  ck_assert_int_eq(peak(), 2300);
  ck_assert_str_eq(peak_label(), "matmul");
  ck_assert_int_eq(stats().peak_by_cat[VR_CAT_TEMP], 1000);
  ck_assert_int_eq(live(), 1000);
  check_category_sums();
}
END_TEST

/* c = a + b: both inputs receive dc itself (alias edges), no new memory.
 * x 100 (param); a = f(x) 100; b = g(x) 100; c = a + b 100: forward 400.
 * backward(c): dc 100 -> 500; add: da = db = dc (shared), nothing allocated
 *   g: dx 100 -> 600; b lets go of dc (still held by a)        600
 *   f: dx' 100 -> 700 (peak); a lets go of dc: freed -> 600; dx' added -> 500
 * after: x + a + b + c 400 + dx 100 = 500 */
START_TEST(one_gradient_shared_by_two_alias_edges_should_be_freed_once_both_are_done) {
  int64_t x = param(100);
  int64_t a = alloc(100, VR_CAT_ACTIV);
  OK(vr_tape_node(t, NULL, 0, (vr_edge[]){{x, 100, NOEDGE}}, 1, (int64_t[]){a}, 1, 0, -1));
  int64_t b = alloc(100, VR_CAT_ACTIV);
  OK(vr_tape_node(t, NULL, 0, (vr_edge[]){{x, 100, NOEDGE}}, 1, (int64_t[]){b}, 1, 0, -1));
  int64_t c = alloc(100, VR_CAT_ACTIV);
  OK(vr_tape_node(t, NULL, 0, (vr_edge[]){{a, 0, 0}, {b, 0, 0}}, 2, (int64_t[]){c}, 1, 0, -1));
  ck_assert_int_eq(live(), 400);
  OK(vr_tape_backward(t, c));
  ck_assert_int_eq(peak(), 700);
  ck_assert_int_eq(live(), 500);
  ck_assert_int_eq(stats().live_by_cat[VR_CAT_GRADS], 100);
  OK(vr_tape_zero_grad(t));
  ck_assert_int_eq(live(), 400);
  check_category_sums();
}
END_TEST

/* A view that retains its base keeps the storage alive after the front end
 * drops the base: a 100; retain; drop -> 100; drop -> 0. */
START_TEST(retain_should_add_a_reference_that_needs_its_own_drop) {
  int64_t a = alloc(100, VR_CAT_ACTIV);
  OK(vr_tape_retain(t, a));
  OK(vr_tape_drop(t, a));
  ck_assert_int_eq(live(), 100);
  ck_assert_int_eq(vr_tape_bytes(t, a), 100);
  OK(vr_tape_drop(t, a));
  ck_assert_int_eq(live(), 0);
  ck_assert_int_eq(vr_tape_drop(t, a), VR_EBADID);
  ck_assert_int_eq(vr_tape_retain(t, a), VR_EBADID);
  ck_assert_int_eq(vr_tape_retain(t, 99), VR_EBADID);
  ck_assert_int_eq(vr_tape_retain(t, -1), VR_EBADID);
}
END_TEST

/* ---------------------------------------------------------------- checkpoint */

/* Two ops inside a checkpointed segment, then a loss outside it.
 *   W 400 (param), x 100 (segment input)                           500
 *   ckpt_begin
 *     h 300 = op1(x, W)                                            800
 *     y 200 = op2(h)                                               1000 <- forward peak
 *     drop h (nothing is saved inside the segment)                 700
 *   ckpt_end(inputs {x}, outputs {y})
 *   L 4 = loss(y), saves y                                         704
 *   drop x (the checkpoint keeps it), drop y (the loss keeps it)   704
 * backward(L):
 *   dL 4                                                           708
 *   loss: dy 200 -> 908, -dL -> 904, releases y -> 704
 *   checkpoint: recompute
 *     h' 300                                                       1004
 *     y' 200                                                       1204
 *     drop h' (op2 saved it: still alive)                          1204
 *     dy handed to y'; y' is saved by nothing: freed               1004
 *   op2: dh 300                                                    1304 <- peak
 *        -dy -> 1104, releases h' -> 804
 *   op1: dW 400 -> 1204, -dh -> 904, releases x (last ref) -> 804
 * after: W 400 + L 4 + dW 400 = 804 */
static void checkpointed_model(int64_t *W, int64_t *L) {
  int op1 = intern("op1"), op2 = intern("op2");
  int ck = intern("ckpt"), loss = intern("loss");
  OK(vr_tape_phase(t, "forward"));
  *W = param(400);
  int64_t x = alloc(100, VR_CAT_INPUTS);
  OK(vr_tape_ckpt_begin(t));
  int64_t h = alloc(300, VR_CAT_ACTIV);
  OK(vr_tape_node(t, (int64_t[]){x, *W}, 2, (vr_edge[]){{*W, 400, NOEDGE}}, 1, (int64_t[]){h},
                  1, 0, op1));
  int64_t y = alloc(200, VR_CAT_ACTIV);
  OK(vr_tape_node(t, (int64_t[]){h}, 1, (vr_edge[]){{h, 300, NOEDGE}}, 1, (int64_t[]){y}, 1, 0,
                  op2));
  OK(vr_tape_drop(t, h));
  OK(vr_tape_ckpt_end(t, (int64_t[]){x}, 1, (int64_t[]){y}, 1, ck));
  ck_assert_int_eq(live(), 700);
  *L = alloc(4, VR_CAT_LOGITS);
  OK(vr_tape_node(t, (int64_t[]){y}, 1, (vr_edge[]){{y, 200, NOEDGE}}, 1, (int64_t[]){*L}, 1,
                  0, loss));
  OK(vr_tape_drop(t, x));
  OK(vr_tape_drop(t, y));
}

START_TEST(a_checkpointed_segment_should_keep_only_its_inputs_and_outputs) {
  int64_t W, L;
  checkpointed_model(&W, &L);
  ck_assert_int_eq(live(), 704);
  ck_assert_int_eq(peak(), 1000);
  ck_assert_str_eq(peak_phase(), "forward");
  check_category_sums();
}
END_TEST

START_TEST(backward_should_recompute_a_checkpointed_segment) {
  int64_t W, L;
  checkpointed_model(&W, &L);
  OK(vr_tape_phase(t, "backward"));
  OK(vr_tape_backward(t, L));
  ck_assert_int_eq(peak(), 1304);
  ck_assert_str_eq(peak_phase(), "backward");
  ck_assert_str_eq(peak_label(), "op2");
  vr_tape_stats s = stats();
  /* at the peak: W 400, x 100, h' 300 + dy 200 + dh 300, L 4 */
  ck_assert_int_eq(s.peak_by_cat[VR_CAT_WEIGHTS], 400);
  ck_assert_int_eq(s.peak_by_cat[VR_CAT_INPUTS], 100);
  ck_assert_int_eq(s.peak_by_cat[VR_CAT_ACTIV], 800);
  ck_assert_int_eq(s.peak_by_cat[VR_CAT_LOGITS], 4);
  ck_assert_int_eq(s.peak_by_cat[VR_CAT_GRADS], 0);
  ck_assert_int_eq(phase_peak("forward"), 1000);
  ck_assert_int_eq(phase_peak("backward"), 1304);
  /* only the parameter's gradient (and the loss the front end holds) remain */
  ck_assert_int_eq(live(), 804);
  ck_assert_int_eq(s.live_by_cat[VR_CAT_GRADS], 400);
  ck_assert_int_eq(s.live_by_cat[VR_CAT_ACTIV], 0);
  ck_assert_int_eq(s.live_by_cat[VR_CAT_INPUTS], 0);
  ck_assert_int_eq(vr_tape_bytes(t, vr_tape_grad(t, W)), 400);
  OK(vr_tape_drop(t, L));
  OK(vr_tape_zero_grad(t));
  ck_assert_int_eq(live(), 400);
  check_category_sums();
}
END_TEST

/* No root: no gradient reaches the segment, so nothing is recomputed; the
 * checkpoint and the loss release what they hold. 704 -> W 400 + L 4 = 404 */
START_TEST(backward_without_gradients_should_not_recompute_a_segment) {
  int64_t W, L;
  checkpointed_model(&W, &L);
  OK(vr_tape_backward(t, -1));
  ck_assert_int_eq(peak(), 1000);
  ck_assert_int_eq(live(), 404);
  ck_assert_int_eq(vr_tape_grad(t, W), -1);
}
END_TEST

/* Two consecutive segments, each op 100 -> 100 bytes with a param of 50.
 *   W1 50, W2 50, x 100                                      200
 *   seg 1: a 100 = op(x, W1) [saves x]                       300
 *   seg 2: b 100 = op(a, W2) [saves a]                       400
 *   front end drops x and a (checkpoints hold them)          400
 * backward(b): db 100                                        500
 *   seg 2: recompute b' 100 -> 600; db to b'; b' freed (saved by nothing) -> 500
 *          op: dW2 50 -> 550, da 100 -> 650 (peak), -db -> 550, releases a -> 550
 *          the checkpoint releases a (last reference) -> 450
 *   seg 1: recompute a' 100 -> 550; da to a'; a' freed -> 450
 *          op: dW1 50 -> 500, -da -> 400, releases x -> 400
 *          the checkpoint releases x (last reference) -> 300
 * after: W1 50 + W2 50 + b 100 + dW1 50 + dW2 50 = 300 */
START_TEST(consecutive_segments_should_recompute_one_at_a_time) {
  int64_t W1 = param(50), W2 = param(50), x = alloc(100, VR_CAT_INPUTS);
  OK(vr_tape_ckpt_begin(t));
  int64_t a = alloc(100, VR_CAT_ACTIV);
  OK(vr_tape_node(t, (int64_t[]){x}, 1, (vr_edge[]){{W1, 50, NOEDGE}}, 1,
                  (int64_t[]){a}, 1, 0, -1));
  OK(vr_tape_ckpt_end(t, (int64_t[]){x}, 1, (int64_t[]){a}, 1, -1));
  OK(vr_tape_ckpt_begin(t));
  int64_t b = alloc(100, VR_CAT_ACTIV);
  OK(vr_tape_node(t, (int64_t[]){a}, 1, (vr_edge[]){{W2, 50, NOEDGE}, {a, 100, NOEDGE}}, 2,
                  (int64_t[]){b}, 1, 0, -1));
  OK(vr_tape_ckpt_end(t, (int64_t[]){a}, 1, (int64_t[]){b}, 1, -1));
  OK(vr_tape_drop(t, x));
  OK(vr_tape_drop(t, a));
  ck_assert_int_eq(live(), 400);
  OK(vr_tape_backward(t, b));
  ck_assert_int_eq(peak(), 650);
  ck_assert_int_eq(stats().live_by_cat[VR_CAT_GRADS], 100);
  ck_assert_int_eq(live(), 300);
  check_category_sums();
}
END_TEST

/* The checkpointed model again, but h is also viewed inside the segment
 * (retain, then the view is dropped after op2): the recompute must replay
 * the retain, giving the same numbers (forward peak 1000, backward peak
 * 1304, 804 after). */
START_TEST(a_retain_inside_a_segment_should_be_replayed) {
  int64_t W = param(400);
  int64_t x = alloc(100, VR_CAT_INPUTS);
  OK(vr_tape_ckpt_begin(t));
  int64_t h = alloc(300, VR_CAT_ACTIV);
  OK(vr_tape_node(t, (int64_t[]){x, W}, 2, (vr_edge[]){{W, 400, NOEDGE}}, 1, (int64_t[]){h}, 1,
                  0, -1));
  OK(vr_tape_retain(t, h)); /* a view of h */
  OK(vr_tape_drop(t, h));   /* the front end's own reference */
  int64_t y = alloc(200, VR_CAT_ACTIV);
  OK(vr_tape_node(t, (int64_t[]){h}, 1, (vr_edge[]){{h, 300, NOEDGE}}, 1, (int64_t[]){y}, 1, 0,
                  -1));
  OK(vr_tape_drop(t, h)); /* the view goes */
  OK(vr_tape_ckpt_end(t, (int64_t[]){x}, 1, (int64_t[]){y}, 1, -1));
  int64_t L = alloc(4, VR_CAT_LOGITS);
  OK(vr_tape_node(t, (int64_t[]){y}, 1, (vr_edge[]){{y, 200, NOEDGE}}, 1, (int64_t[]){L}, 1, 0,
                  -1));
  OK(vr_tape_drop(t, x));
  OK(vr_tape_drop(t, y));
  ck_assert_int_eq(peak(), 1000);
  ck_assert_int_eq(live(), 704);
  OK(vr_tape_backward(t, L));
  ck_assert_int_eq(peak(), 1304);
  ck_assert_int_eq(live(), 804);
  check_category_sums();
}
END_TEST

/* ---------------------------------------------------------------- errors */

START_TEST(unknown_ids_should_be_rejected) {
  int64_t a = alloc(10, VR_CAT_ACTIV), o = alloc(1, VR_CAT_ACTIV);
  ck_assert_int_eq(vr_tape_drop(t, 99), VR_EBADID);
  ck_assert_int_eq(vr_tape_drop(t, -1), VR_EBADID);
  ck_assert_int_eq(vr_tape_node(t, (int64_t[]){99}, 1, NULL, 0, (int64_t[]){o}, 1, 0, -1),
                   VR_EBADID);
  ck_assert_int_eq(vr_tape_node(t, NULL, 0, (vr_edge[]){{99, 1, NOEDGE}}, 1, (int64_t[]){o}, 1,
                                0, -1),
                   VR_EBADID);
  ck_assert_int_eq(vr_tape_node(t, NULL, 0, NULL, 0, (int64_t[]){-5}, 1, 0, -1), VR_EBADID);
  ck_assert_int_eq(vr_tape_backward(t, 99), VR_EBADID);
  OK(vr_tape_ckpt_begin(t));
  ck_assert_int_eq(vr_tape_ckpt_end(t, (int64_t[]){99}, 1, (int64_t[]){a}, 1, -1), VR_EBADID);
  ck_assert_int_eq(live(), 11);
}
END_TEST

START_TEST(dropping_a_freed_tensor_should_fail) {
  int64_t a = alloc(10, VR_CAT_ACTIV);
  OK(vr_tape_drop(t, a));
  ck_assert_int_eq(vr_tape_drop(t, a), VR_EBADID);
  ck_assert_int_eq(live(), 0);
  ck_assert_int_eq(vr_tape_backward(t, a), VR_EBADID);
}
END_TEST

START_TEST(negative_sizes_should_be_rejected) {
  int64_t id = -7, a = alloc(10, VR_CAT_ACTIV), o = alloc(1, VR_CAT_ACTIV);
  ck_assert_int_eq(vr_tape_alloc(t, -1, VR_CAT_ACTIV, -1, false, &id), VR_EBYTES);
  ck_assert_int_eq(vr_tape_temp(t, -1, VR_CAT_TEMP, -1), VR_EBYTES);
  ck_assert_int_eq(vr_tape_node(t, NULL, 0, NULL, 0, (int64_t[]){o}, 1, -1, -1), VR_EBYTES);
  ck_assert_int_eq(vr_tape_node(t, NULL, 0, (vr_edge[]){{a, -5, NOEDGE}}, 1, (int64_t[]){o}, 1,
                                0, -1),
                   VR_EBYTES);
  ck_assert_int_eq(live(), 11);
  ck_assert_int_eq(peak(), 11);
}
END_TEST

START_TEST(unknown_categories_should_be_rejected) {
  int64_t id = -1;
  ck_assert_int_eq(vr_tape_alloc(t, 1, VR_NCAT, -1, false, &id), VR_ECAT);
  ck_assert_int_eq(vr_tape_alloc(t, 1, -1, -1, false, &id), VR_ECAT);
  ck_assert_int_eq(vr_tape_temp(t, 1, VR_NCAT, -1), VR_ECAT);
  ck_assert_int_eq(live(), 0);
}
END_TEST

START_TEST(an_alias_past_the_outputs_should_be_rejected) {
  int64_t x = alloc(10, VR_CAT_ACTIV), v = alloc(0, VR_CAT_ACTIV);
  ck_assert_int_eq(vr_tape_node(t, NULL, 0, (vr_edge[]){{x, 0, 1}}, 1, (int64_t[]){v}, 1, 0, -1),
                   VR_EALIAS);
  ck_assert_int_eq(vr_tape_node(t, NULL, 0, (vr_edge[]){{x, 0, 0}}, 1, NULL, 0, 0, -1),
                   VR_EALIAS);
  OK(vr_tape_ckpt_begin(t));
  ck_assert_int_eq(vr_tape_node(t, NULL, 0, (vr_edge[]){{x, 0, 3}}, 1, (int64_t[]){v}, 1, 0, -1),
                   VR_EALIAS);
}
END_TEST

START_TEST(more_than_64_edges_should_be_rejected) {
  int64_t o = alloc(1, VR_CAT_ACTIV), x = alloc(1, VR_CAT_ACTIV);
  vr_edge e[VR_MAX_EDGES + 1];
  int64_t outs[VR_MAX_EDGES + 1];
  for (int i = 0; i <= VR_MAX_EDGES; i++) {
    e[i] = (vr_edge){x, 1, NOEDGE};
    outs[i] = o;
  }
  ck_assert_int_eq(vr_tape_node(t, NULL, 0, e, VR_MAX_EDGES + 1, &o, 1, 0, -1), VR_ETOOMANY);
  ck_assert_int_eq(vr_tape_node(t, NULL, 0, e, 1, outs, VR_MAX_EDGES + 1, 0, -1), VR_ETOOMANY);
  OK(vr_tape_node(t, NULL, 0, e, VR_MAX_EDGES, &o, 1, 0, -1));
}
END_TEST

START_TEST(checkpoint_segments_should_not_nest) {
  OK(vr_tape_ckpt_begin(t));
  ck_assert_int_eq(vr_tape_ckpt_begin(t), VR_ENESTED);
  ck_assert_int_eq(vr_tape_backward(t, -1), VR_ENESTED); /* no backward mid-segment */
  int64_t y = alloc(8, VR_CAT_ACTIV);
  OK(vr_tape_ckpt_end(t, NULL, 0, (int64_t[]){y}, 1, -1));
  OK(vr_tape_ckpt_begin(t)); /* a new segment after the end is fine */
}
END_TEST

START_TEST(ckpt_end_without_begin_should_fail) {
  ck_assert_int_eq(vr_tape_ckpt_end(t, NULL, 0, NULL, 0, -1), VR_ENOTRECORD);
  OK(vr_tape_ckpt_begin(t));
  OK(vr_tape_ckpt_end(t, NULL, 0, NULL, 0, -1));
  ck_assert_int_eq(vr_tape_ckpt_end(t, NULL, 0, NULL, 0, -1), VR_ENOTRECORD);
}
END_TEST

START_TEST(live_bytes_past_int64_should_overflow) {
  int64_t id = -1;
  OK(vr_tape_alloc(t, INT64_MAX, VR_CAT_WEIGHTS, -1, false, &id));
  ck_assert_int_eq(vr_tape_alloc(t, 1, VR_CAT_ACTIV, -1, false, &id), VR_EOVERFLOW);
}
END_TEST

START_TEST(a_temporary_past_int64_should_overflow) {
  int64_t id = -1;
  OK(vr_tape_alloc(t, INT64_MAX - 10, VR_CAT_WEIGHTS, -1, false, &id));
  OK(vr_tape_temp(t, 10, VR_CAT_TEMP, -1));
  ck_assert(peak() == INT64_MAX);
  ck_assert_int_eq(vr_tape_temp(t, 11, VR_CAT_TEMP, -1), VR_EOVERFLOW);
}
END_TEST

/* ---------------------------------------------------------------- reset */

START_TEST(reset_should_empty_the_tape_for_reuse) {
  int64_t W, L;
  linear_then_loss(&W, &L);
  OK(vr_tape_backward(t, L));
  OK(vr_tape_ckpt_begin(t)); /* reset also ends a segment being recorded */
  vr_tape_reset(t);
  vr_tape_stats s = stats();
  ck_assert_int_eq(s.live, 0);
  ck_assert_int_eq(s.peak, 0);
  ck_assert_int_eq(s.peak_label, -1);
  ck_assert_str_eq(peak_phase(), "setup");
  ck_assert_int_eq(phase_peak("forward"), 0);
  ck_assert_int_eq(phase_peak("backward"), 0);
  for (int i = 0; i < VR_NCAT; i++) ck_assert_int_eq(s.live_by_cat[i], 0);
  ck_assert_int_eq(vr_tape_bytes(t, W), -1);
  /* the same step again gives the same numbers, from id 0 */
  int64_t W2, L2;
  linear_then_loss(&W2, &L2);
  ck_assert_int_eq(W2, 0);
  ck_assert_int_eq(live(), 704);
  OK(vr_tape_phase(t, "backward"));
  OK(vr_tape_backward(t, L2));
  ck_assert_int_eq(peak(), 1104);
  ck_assert_str_eq(peak_phase(), "backward");
  ck_assert_int_eq(live(), 804);
}
END_TEST

/* Recycled (vr_tape_recycle), a tape that was left in every state a
 * front end can leave one in -- rounding set, a timeline on, a checkpoint
 * segment, an echo and a window open, a capture ready -- is a fresh one:
 * the same step gives the same numbers from id 0, with no rounding, no
 * timeline and nothing open; only its interned strings are kept. */
START_TEST(a_recycled_tape_should_be_a_fresh_one) {
  int64_t W, L;
  linear_then_loss(&W, &L);
  OK(vr_tape_phase(t, "backward"));
  OK(vr_tape_backward(t, L));
  vr_tape_stats fresh = stats();
  int extra = intern("left.over");
  vr_tape_rounding(t, 512, 1 << 20, 2 << 20);
  vr_tape_timeline(t, true);
  vr_tape_window_open(t);
  OK(vr_tape_capture_begin(t));
  alloc(1000, VR_CAT_TEMP);
  int64_t stride = 0, first = 0;
  OK(vr_tape_capture_end(t, &stride, &first));
  OK(vr_tape_ckpt_begin(t));
  OK(vr_tape_echo_begin(t));
  alloc(3, VR_CAT_ACTIV);
  vr_tape_recycle(t);
  vr_tape_stats s = stats();
  ck_assert_int_eq(s.live, 0);
  ck_assert_int_eq(s.peak, 0);
  ck_assert_int_eq(s.reserved, 0);
  ck_assert_int_eq(s.peak_label, -1);
  ck_assert_str_eq(peak_phase(), "setup");
  ck_assert_str_eq(vr_tape_string(t, extra), "left.over");
  ck_assert_int_eq(vr_tape_capture_repeat(t, 1), VR_ECOMPOSE); /* no capture ready */
  ck_assert_int_eq(vr_tape_echo_end(t, &(bool){false}), VR_ENOTRECORD);
  int64_t W2, L2;
  linear_then_loss(&W2, &L2);
  ck_assert_int_eq(W2, 0);
  ck_assert_uint_eq(vr_tape_timeline_len(t), 0);
  OK(vr_tape_phase(t, "backward"));
  OK(vr_tape_backward(t, L2)); /* (would refuse inside a segment) */
  s = stats();
  ck_assert_int_eq(s.live, fresh.live);
  ck_assert_int_eq(s.peak, fresh.peak);
  ck_assert_int_eq(s.reserved, fresh.reserved); /* unrounded */
  ck_assert_int_eq(s.peak_reserved, fresh.peak_reserved);
  ck_assert_int_eq(s.peak_label, fresh.peak_label);
  ck_assert_str_eq(peak_phase(), "backward");
  ck_assert_int_eq(phase_peak("backward"), 1104);
}
END_TEST

/* A tape assigned from another goes on as that one would: its stats, its
 * labels at their indexes, its tensors and its gradients; the source is
 * not touched by what the copy does next. A source at work (a window open)
 * is refused, the destination left as it was. */
START_TEST(an_assigned_tape_should_go_on_as_its_source) {
  vr_tape *src = t, *dst = vr_tape_new(NULL);
  ck_assert_ptr_nonnull(dst);
  vr_tape_rounding(src, 512, 1 << 20, 2 << 20);
  int64_t W, L;
  linear_then_loss(&W, &L);
  int lin = intern("linear");
  /* dst had labels, tensors and a phase of its own */
  int other = -1, spare = -1;
  OK(vr_tape_intern(dst, "other.label", &other));
  OK(vr_tape_intern(dst, "another.one", &spare));
  for (int i = 0; i < 100; i++) {
    int64_t id = -1;
    OK(vr_tape_alloc(dst, 10 + i, VR_CAT_TEMP, other, false, &id));
  }
  OK(vr_tape_phase(dst, "elsewhere"));
  OK(vr_tape_assign(dst, src));
  OK(vr_tape_assign(dst, dst)); /* itself: nothing happens */
  vr_tape_stats a = stats(), b;
  vr_tape_stats_get(dst, &b);
  ck_assert_int_eq(b.live, a.live);
  ck_assert_int_eq(b.peak, a.peak);
  ck_assert_int_eq(b.reserved, a.reserved);
  ck_assert_int_eq(b.peak_reserved, a.peak_reserved);
  ck_assert_int_eq(b.peak_label, a.peak_label);
  ck_assert_str_eq(vr_tape_string(dst, lin), "linear");
  ck_assert_int_eq(vr_tape_nstrings(dst), vr_tape_nstrings(src));
  ck_assert_str_eq(vr_tape_string(dst, b.peak_phase), "forward");
  /* the copy's backward is the source's, and the source stays as it was */
  OK(vr_tape_phase(dst, "backward"));
  OK(vr_tape_backward(dst, L));
  int added = -1;
  OK(vr_tape_intern(dst, "only.in.the.copy", &added));
  ck_assert_int_eq(live(), a.live);
  OK(vr_tape_phase(src, "backward"));
  ck_assert_int_eq(vr_tape_nstrings(src), vr_tape_nstrings(dst) - 1);
  OK(vr_tape_backward(src, L));
  a = stats();
  vr_tape_stats_get(dst, &b);
  ck_assert_int_eq(b.live, a.live);
  ck_assert_int_eq(b.peak, a.peak);
  ck_assert_int_eq(b.peak_reserved, a.peak_reserved);
  ck_assert_int_eq(b.peak_label, a.peak_label);
  ck_assert_int_eq(phase_peak("backward"), 1104);
  /* a source at work is refused; the destination keeps what it had */
  vr_tape_window_open(src);
  ck_assert_int_eq(vr_tape_assign(dst, src), VR_EBUSY);
  vr_tape_stats c;
  vr_tape_stats_get(dst, &c);
  ck_assert_int_eq(c.live, b.live);
  ck_assert_str_eq(vr_tape_string(dst, added), "only.in.the.copy");
  vr_tape_free(dst);
}
END_TEST

START_TEST(many_tensors_and_nodes_should_grow_the_tape) {
  /* a chain of 10000 ops, each 8 bytes, every output saved by the next op
   * and dropped by the front end: forward keeps 10000 * 8 */
  int64_t prev = alloc(8, VR_CAT_ACTIV);
  for (int i = 0; i < 10000; i++) {
    int64_t y = alloc(8, VR_CAT_ACTIV);
    OK(vr_tape_node(t, (int64_t[]){prev}, 1, (vr_edge[]){{prev, 8, NOEDGE}}, 1, (int64_t[]){y},
                    1, 0, -1));
    OK(vr_tape_drop(t, prev));
    prev = y;
  }
  ck_assert_int_eq(live(), 10001 * 8);
  /* backward: each node holds one 8-byte gradient briefly, then the first
   * input's gradient remains with the last output. */
  OK(vr_tape_backward(t, prev));
  ck_assert_int_eq(live(), 8 + 8);
  ck_assert_int_eq(peak(), 10001 * 8 + 8 + 8);
}
END_TEST

/* replay_drop: a tensor a cache holds in the forward is dropped only when
 * the segment is recomputed. The checkpointed model with replay_drop(h)
 * instead of drop(h):
 *   forward: W 400, x 100, h 300 (kept), y 200 = 1000; L 4 -> 1004 (peak)
 * backward(L): dL -> 1008; loss: dy 200 -> 1208, -dL -> 1204, -y -> 1004
 *   recompute: h' 300 -> 1304, y' 200 -> 1504, replayed drop of h' (op2
 *   saved it) -> 1504, dy handed to y', y' freed -> 1304
 *   op2: dh 300 -> 1604 (peak), -dy -> 1404, -h' -> 1104
 *   op1: dW 400 -> 1504, -dh -> 1204; the checkpoint releases x -> 1104
 * after: W 400 + h 300 (still cached) + L 4 + dW 400 = 1104 */
START_TEST(a_replay_drop_should_happen_only_in_the_recomputation) {
  int64_t W = param(400);
  int64_t x = alloc(100, VR_CAT_INPUTS);
  OK(vr_tape_ckpt_begin(t));
  int64_t h = alloc(300, VR_CAT_ACTIV);
  OK(vr_tape_node(t, (int64_t[]){x, W}, 2, (vr_edge[]){{W, 400, NOEDGE}}, 1, (int64_t[]){h}, 1,
                  0, -1));
  int64_t y = alloc(200, VR_CAT_ACTIV);
  OK(vr_tape_node(t, (int64_t[]){h}, 1, (vr_edge[]){{h, 300, NOEDGE}}, 1, (int64_t[]){y}, 1, 0,
                  -1));
  OK(vr_tape_replay_drop(t, h));
  ck_assert_int_eq(live(), 1000); /* nothing dropped now */
  OK(vr_tape_ckpt_end(t, (int64_t[]){x}, 1, (int64_t[]){y}, 1, -1));
  int64_t L = alloc(4, VR_CAT_LOGITS);
  OK(vr_tape_node(t, (int64_t[]){y}, 1, (vr_edge[]){{y, 200, NOEDGE}}, 1, (int64_t[]){L}, 1, 0,
                  -1));
  OK(vr_tape_drop(t, x));
  OK(vr_tape_drop(t, y));
  ck_assert_int_eq(peak(), 1004);
  OK(vr_tape_backward(t, L));
  ck_assert_int_eq(peak(), 1604);
  ck_assert_int_eq(live(), 1104);
  ck_assert_int_eq(vr_tape_bytes(t, h), 300);
  check_category_sums();
}
END_TEST

START_TEST(replay_drop_should_need_a_recording_and_a_live_tensor) {
  int64_t a = alloc(10, VR_CAT_ACTIV);
  ck_assert_int_eq(vr_tape_replay_drop(t, a), VR_ENOTRECORD);
  OK(vr_tape_ckpt_begin(t));
  ck_assert_int_eq(vr_tape_replay_drop(t, 99), VR_EBADID);
  OK(vr_tape_replay_drop(t, a));
  ck_assert_int_eq(live(), 10);
}
END_TEST

/* ---------------------------------------------------------------- failed calls */

/* On overflow the tape must stay as it was: live still INT64_MAX. */
START_TEST(a_failed_alloc_should_leave_live_bytes_unchanged) {
  int64_t id = -1;
  OK(vr_tape_alloc(t, INT64_MAX, VR_CAT_WEIGHTS, -1, false, &id));
  ck_assert_int_eq(vr_tape_alloc(t, 1, VR_CAT_ACTIV, -1, false, &id), VR_EOVERFLOW);
  ck_assert_msg(live() == INT64_MAX, "live is %lld after a failed alloc", (long long)live());
}
END_TEST

START_TEST(a_failed_temp_should_leave_live_bytes_unchanged) {
  int64_t id = -1;
  OK(vr_tape_alloc(t, INT64_MAX - 10, VR_CAT_WEIGHTS, -1, false, &id));
  ck_assert_int_eq(vr_tape_temp(t, 11, VR_CAT_TEMP, -1), VR_EOVERFLOW);
  ck_assert_msg(live() == INT64_MAX - 10, "live is %lld after a failed temp",
                (long long)live());
}
END_TEST

/* A node rejected for a bad output id must not keep a reference to the
 * tensors it would have saved: a 100 saved, output 99 unknown -> EBADID;
 * dropping a must then free it. */
START_TEST(a_rejected_node_should_not_hold_its_saved_tensors) {
  int64_t a = alloc(100, VR_CAT_ACTIV);
  ck_assert_int_eq(vr_tape_node(t, (int64_t[]){a}, 1, NULL, 0, (int64_t[]){99}, 1, 0, -1),
                   VR_EBADID);
  OK(vr_tape_drop(t, a));
  ck_assert_int_eq(live(), 0);
}
END_TEST

/* A node rejected inside a segment must leave the recording as if it had
 * never been called: the checkpointed model with one extra failing call
 * gives the same numbers as without it (peak 1304, live 804). */
START_TEST(a_rejected_node_inside_a_segment_should_not_corrupt_the_recording) {
  int op1 = intern("op1");
  int64_t W = param(400);
  int64_t x = alloc(100, VR_CAT_INPUTS);
  OK(vr_tape_ckpt_begin(t));
  int64_t h = alloc(300, VR_CAT_ACTIV);
  /* saved x is fine, the edge names an unknown tensor: rejected */
  ck_assert_int_eq(vr_tape_node(t, (int64_t[]){x}, 1, (vr_edge[]){{99, 4, NOEDGE}}, 1,
                                (int64_t[]){h}, 1, 0, op1),
                   VR_EBADID);
  OK(vr_tape_node(t, (int64_t[]){x, W}, 2, (vr_edge[]){{W, 400, NOEDGE}}, 1, (int64_t[]){h}, 1,
                  0, op1));
  int64_t y = alloc(200, VR_CAT_ACTIV);
  OK(vr_tape_node(t, (int64_t[]){h}, 1, (vr_edge[]){{h, 300, NOEDGE}}, 1, (int64_t[]){y}, 1, 0,
                  -1));
  OK(vr_tape_drop(t, h));
  OK(vr_tape_ckpt_end(t, (int64_t[]){x}, 1, (int64_t[]){y}, 1, -1));
  int64_t L = alloc(4, VR_CAT_LOGITS);
  OK(vr_tape_node(t, (int64_t[]){y}, 1, (vr_edge[]){{y, 200, NOEDGE}}, 1, (int64_t[]){L}, 1, 0,
                  -1));
  OK(vr_tape_drop(t, x));
  OK(vr_tape_drop(t, y));
  OK(vr_tape_backward(t, L));
  ck_assert_int_eq(peak(), 1304);
  ck_assert_int_eq(live(), 804);
}
END_TEST

/* The front end owns one reference; a second drop while a node still holds
 * the tensor must be refused (VR_EREFS), not take the node's reference:
 * a 100 saved by a node, o 10 -> 110; drop a -> 110; drop a again -> error,
 * still 110. */
START_TEST(a_second_drop_of_a_saved_tensor_should_be_refused) {
  int64_t a = alloc(100, VR_CAT_ACTIV), o = alloc(10, VR_CAT_ACTIV);
  OK(vr_tape_node(t, (int64_t[]){a}, 1, NULL, 0, (int64_t[]){o}, 1, 0, -1));
  OK(vr_tape_drop(t, a));
  ck_assert_int_ne(vr_tape_drop(t, a), VR_OK);
  ck_assert_int_eq(live(), 110);
  OK(vr_tape_backward(t, -1));
  ck_assert_int_eq(live(), 10);
}
END_TEST

/* Dropping a parameter that holds a gradient, then zero_grad, must leave
 * nothing: W 400 with dW 400 -> drop W, zero_grad -> 0 (y dropped too). */
START_TEST(zero_grad_should_free_the_gradient_of_a_dropped_parameter) {
  int64_t W = param(400), y = alloc(10, VR_CAT_ACTIV);
  OK(vr_tape_node(t, NULL, 0, (vr_edge[]){{W, 400, NOEDGE}}, 1, (int64_t[]){y}, 1, 0, -1));
  OK(vr_tape_backward(t, y)); /* dy 10 (freed by the node), dW 400 */
  ck_assert_int_eq(live(), 400 + 10 + 400);
  OK(vr_tape_drop(t, y));
  OK(vr_tape_drop(t, W));
  OK(vr_tape_zero_grad(t));
  ck_assert_int_eq(live(), 0);
}
END_TEST

/* Identical layers composed (stdlib/sim.lua, stdlib/compose.lua): a layer's
 * parameters captured once and repeated, and a layer's forward echoed for
 * the next ones, leave the tape as building and walking every layer does:
 * the same ids, live bytes, peaks and timeline, event for event. */

/* One layer's parameters: W 64 (its arrival transient 32), a buffer 8. */
static void build_layer(vr_tape *tp) {
  int64_t id = -1;
  OK(vr_tape_alloc(tp, 64, VR_CAT_WEIGHTS, -1, true, &id));
  OK(vr_tape_temp(tp, 32, VR_CAT_TEMP, -1));
  OK(vr_tape_alloc(tp, 8, VR_CAT_BUFFERS, -1, false, &id));
}

/* One layer's forward on x with weight W: y 100 saves x and W, a 16-byte
 * temporary, then x goes (the caller's reference). Returns y. */
static int64_t layer_forward(vr_tape *tp, int64_t x, int64_t W) {
  int64_t y = -1;
  OK(vr_tape_alloc(tp, 100, VR_CAT_ACTIV, -1, false, &y));
  OK(vr_tape_node(tp, (int64_t[]){x, W}, 2, (vr_edge[]){{x, 100, NOEDGE}, {W, 64, NOEDGE}}, 2,
                  (int64_t[]){y}, 1, 8, -1));
  OK(vr_tape_temp(tp, 16, VR_CAT_TEMP, -1));
  OK(vr_tape_drop(tp, x));
  return y;
}

static void same_tapes(vr_tape *a, vr_tape *b) {
  vr_tape_stats sa, sb;
  vr_tape_stats_get(a, &sa);
  vr_tape_stats_get(b, &sb);
  ck_assert_int_eq(sa.live, sb.live);
  ck_assert_int_eq(sa.peak, sb.peak);
  ck_assert_int_eq(sa.peak_phase, sb.peak_phase);
  for (int c = 0; c < VR_NCAT; c++) ck_assert_int_eq(sa.peak_by_cat[c], sb.peak_by_cat[c]);
  ck_assert_uint_eq(vr_tape_timeline_len(a), vr_tape_timeline_len(b));
  ck_assert_uint_gt(vr_tape_timeline_len(a), 0);
  for (size_t i = 0; i < vr_tape_timeline_len(a); i++) {
    const vr_tl_event *ea = vr_tape_timeline_at(a, i), *eb = vr_tape_timeline_at(b, i);
    ck_assert_int_eq(ea->delta, eb->delta);
    ck_assert_int_eq(ea->cat, eb->cat);
    ck_assert_int_eq(ea->phase, eb->phase);
  }
}

START_TEST(captured_layers_should_equal_layers_built_one_by_one) {
  vr_tape *full = vr_tape_new(NULL);
  vr_tape_timeline(full, true);
  vr_tape_timeline(t, true);
  for (int i = 0; i < 4; i++) build_layer(full);
  int64_t stride = 0, first = -1;
  OK(vr_tape_capture_begin(t));
  build_layer(t);
  OK(vr_tape_capture_end(t, &stride, &first));
  ck_assert_int_eq(stride, 2); /* W and the buffer */
  ck_assert_int_eq(first, 0);
  OK(vr_tape_capture_repeat(t, 3));
  ck_assert_int_eq(vr_tape_bytes(t, first + 3 * stride), 64); /* layer 4's W */
  ck_assert_int_eq(vr_tape_capture_repeat(t, 1), VR_ECOMPOSE); /* one repeat per capture */
  same_tapes(full, t);
  vr_tape_free(full);
}
END_TEST

START_TEST(an_echoed_layer_should_equal_the_layer_walked) {
  vr_tape *full = vr_tape_new(NULL);
  vr_tape *tapes[2] = {full, t};
  int64_t W[2][3], x[2] = {-1, -1};
  bool ok = false;
  for (int k = 0; k < 2; k++) {
    vr_tape_timeline(tapes[k], true);
    for (int i = 0; i < 3; i++) OK(vr_tape_alloc(tapes[k], 64, VR_CAT_WEIGHTS, -1, true, &W[k][i]));
    OK(vr_tape_alloc(tapes[k], 100, VR_CAT_ACTIV, -1, false, &x[k]));
  }
  int64_t h = layer_forward(full, x[0], W[0][0]);
  h = layer_forward(full, h, W[0][1]);
  h = layer_forward(full, h, W[0][2]);
  OK(vr_tape_backward(full, h));
  /* the echoed tape: layer 1 walked under an echo, layers 2 and 3 replayed
   * with the input, the weight (the next parameter) and y mapped */
  OK(vr_tape_echo_begin(t));
  int64_t in = x[1], y = layer_forward(t, in, W[1][0]);
  OK(vr_tape_echo_end(t, &ok));
  ck_assert(ok);
  int64_t y2 = -1, y3 = -1;
  OK(vr_tape_echo_replay(t, &in, &y, 1, W[1][0], W[1][0] + 1, 1, &y, 1, &y2));
  OK(vr_tape_echo_replay(t, &in, &y2, 1, W[1][0], W[1][0] + 1, 2, &y, 1, &y3));
  ck_assert_int_eq(vr_tape_bytes(t, y3), 100);
  OK(vr_tape_backward(t, y3));
  ck_assert_int_ge(vr_tape_grad(t, W[1][1]), 0); /* the replays' nodes reach W2 and W3 */
  ck_assert_int_ge(vr_tape_grad(t, W[1][2]), 0);
  same_tapes(full, t);
  /* a phase spoils an echo */
  OK(vr_tape_echo_begin(t));
  OK(vr_tape_phase(t, "optimizer"));
  OK(vr_tape_echo_end(t, &ok));
  ck_assert(!ok);
  ck_assert_int_eq(vr_tape_echo_replay(t, &in, &y, 1, 0, 0, 0, &y, 1, &y2), VR_ECOMPOSE);
  vr_tape_free(full);
}
END_TEST

/* An MoE layer's expert loop (stdlib/moe.lua): expert e on x with weight
 * W: y 10 saves x and W, a zero-byte version of the accumulator chained to
 * prev (alias), prev and y let go. Returns the version. */
static int64_t expert(vr_tape *tp, int64_t x, int64_t W, int64_t prev) {
  int64_t y = -1, ver = -1;
  OK(vr_tape_temp(tp, 4, VR_CAT_TEMP, -1));
  OK(vr_tape_alloc(tp, 10, VR_CAT_ACTIV, -1, false, &y));
  OK(vr_tape_node(tp, (int64_t[]){x, W}, 2, (vr_edge[]){{x, 100, NOEDGE}, {W, 64, NOEDGE}}, 2,
                  (int64_t[]){y}, 1, 0, -1));
  OK(vr_tape_alloc(tp, 0, VR_CAT_ACTIV, -1, false, &ver));
  vr_edge e[2] = {{y, 10, NOEDGE}, {prev, 0, 0}};
  OK(vr_tape_node(tp, (int64_t[]){y}, 1, e, prev >= 0 ? 2 : 1, (int64_t[]){ver}, 1, 0, -1));
  if (prev >= 0) OK(vr_tape_drop(tp, prev));
  OK(vr_tape_drop(tp, y));
  return ver;
}

/* The layer's output h 100 from the last version. nested: expert
 * 2 walked under an echo (nested in any open one), 3 and 4 replayed from it. */
static int64_t moe_layer(vr_tape *tp, int64_t x, const int64_t *W, bool nested) {
  int64_t prev = expert(tp, x, W[0], -1), h = -1;
  if (nested) {
    bool ok = false;
    int64_t in = prev;
    OK(vr_tape_echo_begin(tp));
    prev = expert(tp, x, W[1], prev);
    OK(vr_tape_echo_end(tp, &ok));
    ck_assert(ok);
    int64_t out = prev;
    for (int e = 2; e < 4; e++)
      OK(vr_tape_echo_replay(tp, &in, &prev, 1, W[1], W[1] + 1, e - 1, &out, 1, &prev));
  } else {
    for (int e = 1; e < 4; e++) prev = expert(tp, x, W[e], prev);
  }
  OK(vr_tape_alloc(tp, 100, VR_CAT_ACTIV, -1, false, &h));
  OK(vr_tape_node(tp, NULL, 0, (vr_edge[]){{prev, 100, NOEDGE}}, 1, (int64_t[]){h}, 1, 0, -1));
  OK(vr_tape_drop(tp, prev));
  return h;
}

/* Echoes nest: a layer echoed while its experts are composed by an inner
 * echo (its replays kept by the outer one as what they did), then replayed
 * for the next layers, equals every expert of every layer walked; and so
 * inside a checkpointed segment, the inner replays recorded for backward. */
START_TEST(a_nested_echo_should_equal_the_experts_walked) {
  for (int ckpt = 0; ckpt < 2; ckpt++) {
    vr_tape *full = vr_tape_new(NULL), *tp = vr_tape_new(NULL);
    vr_tape *tapes[2] = {full, tp};
    int64_t W[2][12], x[2] = {-1, -1}, h[2];
    bool ok = false;
    for (int k = 0; k < 2; k++) {
      vr_tape_timeline(tapes[k], true);
      for (int i = 0; i < 12; i++)
        OK(vr_tape_alloc(tapes[k], 64, VR_CAT_WEIGHTS, -1, true, &W[k][i]));
      OK(vr_tape_alloc(tapes[k], 100, VR_CAT_ACTIV, -1, false, &x[k]));
    }
    /* walked: three layers of four experts each */
    h[0] = x[0];
    for (int l = 0; l < 3; l++) {
      int64_t in = h[0];
      if (ckpt) OK(vr_tape_ckpt_begin(full));
      h[0] = moe_layer(full, h[0], W[0] + 4 * l, false);
      if (ckpt) OK(vr_tape_ckpt_end(full, &in, 1, &h[0], 1, -1));
      OK(vr_tape_drop(full, in));
    }
    /* composed: layer 1 echoed, its experts 3 and 4 replays of expert 2 */
    int64_t in = x[1];
    OK(vr_tape_echo_begin(tp));
    if (ckpt) OK(vr_tape_ckpt_begin(tp));
    h[1] = moe_layer(tp, in, W[1], true);
    if (ckpt) OK(vr_tape_ckpt_end(tp, &in, 1, &h[1], 1, -1));
    OK(vr_tape_drop(tp, in));
    OK(vr_tape_echo_end(tp, &ok));
    ck_assert(ok);
    int64_t out = h[1];
    for (int l = 1; l < 3; l++)
      OK(vr_tape_echo_replay(tp, &in, &h[1], 1, W[1][0], W[1][0] + 4, 4 * l, &out, 1, &h[1]));
    same_tapes(full, tp);
    OK(vr_tape_backward(full, h[0]));
    OK(vr_tape_backward(tp, h[1]));
    for (int i = 0; i < 12; i++) ck_assert_int_ge(vr_tape_grad(tp, W[1][i]), 0);
    same_tapes(full, tp);
    vr_tape_free(full);
    vr_tape_free(tp);
  }
  /* the replay is of the echo ended last; a fifth echo does not open */
  for (int i = 0; i < VR_ECHO_DEPTH; i++) OK(vr_tape_echo_begin(t));
  ck_assert_int_eq(vr_tape_echo_begin(t), VR_ENESTED);
  bool ok = false;
  OK(vr_tape_echo_end(t, &ok));
  ck_assert(ok);
  int64_t q = 0, a = -1;
  OK(vr_tape_echo_replay(t, NULL, NULL, 0, 0, 0, 0, &q, 1, &a));
  OK(vr_tape_echo_end(t, &ok));
  OK(vr_tape_echo_begin(t)); /* its buffer was the last one's: nothing to replay */
  ck_assert_int_eq(vr_tape_echo_replay(t, NULL, NULL, 0, 0, 0, 0, &q, 1, &a), VR_ECOMPOSE);
}
END_TEST

/* One layer: three ops in a chain, each saving its input (act bytes) and
 * its weight, whose gradient has grad bytes (fp32 gradients of bf16 casts
 * under autocast). In backward each op makes its weight's gradient and then
 * frees its saved input: with act == grad the layer rises by one gradient
 * at a time and ends where it began, below the sum of its gradients. */
static int64_t chain_layer(int64_t x, const int64_t *w, int64_t act, int64_t grad) {
  for (int k = 0; k < 3; k++) {
    int64_t y = alloc(act, VR_CAT_ACTIV), saved[2] = {x, w[k]}, out[1] = {y};
    vr_edge in[2] = {{x, 16, -1}, {w[k], grad, -1}}; /* a small gradient flows back */
    OK(vr_tape_node(t, saved, 2, in, 2, out, 1, 0, -1));
    OK(vr_tape_drop(t, x));
    x = y;
  }
  return x;
}

/* Six such layers, every one walked or (composed) 1, 2 and 6 walked and
 * 3..5 a bulk; a loss, backward. Returns the backward phase's peak. */
static int64_t six_layers(bool composed) {
  enum { L = 6 };
  const int64_t act = 4000, grad = 4000;
  int64_t w[L][3], x;
  for (int i = 0; i < L; i++)
    for (int k = 0; k < 3; k++) w[i][k] = param(2000);
  OK(vr_tape_phase(t, "forward"));
  x = alloc(act, VR_CAT_INPUTS);
  if (!composed) {
    for (int i = 0; i < L; i++) x = chain_layer(x, w[i], act, grad);
  } else {
    x = chain_layer(x, w[0], act, grad);
    int64_t before = 0, after = 0;
    OK(vr_tape_mark(t, &before));
    int64_t rbefore = stats().reserved;
    x = chain_layer(x, w[1], act, grad);
    OK(vr_tape_mark(t, &after));
    vr_edge edges[(L - 3) * 3];
    for (int i = 2; i < L - 1; i++)
      for (int k = 0; k < 3; k++) edges[(i - 2) * 3 + k] = (vr_edge){w[i][k], grad, -1};
    int bulk = -1;
    OK(vr_tape_bulk(t, after - before, stats().reserved - rbefore, L - 3, edges, 3, -1, &bulk));
    x = chain_layer(x, w[L - 1], act, grad);
    OK(vr_tape_bulk_end(t, bulk));
  }
  int64_t loss = alloc(4, VR_CAT_LOGITS), out[1] = {loss};
  vr_edge le = {x, 16, -1};
  OK(vr_tape_node(t, &x, 1, &le, 1, out, 1, 0, -1));
  OK(vr_tape_drop(t, x));
  OK(vr_tape_phase(t, "backward"));
  OK(vr_tape_backward(t, loss));
  OK(vr_tape_drop(t, loss));
  return phase_peak("backward");
}

/* A composed layer's backward releases its share of the bulk before it
 * makes its gradients: making them first rose by all of them at once,
 * above the walk, where they free the layer's saved tensors as they come. */
START_TEST(a_composed_layer_with_big_gradients_should_peak_as_walked) {
  int64_t walked = six_layers(false);
  vr_tape_stats w = stats();
  vr_tape_reset(t);
  int64_t composed = six_layers(true);
  vr_tape_stats c = stats();
  ck_assert_int_eq(composed, walked);
  ck_assert_int_eq(c.peak, w.peak);
  ck_assert_int_eq(c.live, w.live);
  ck_assert_int_eq(c.live_by_cat[VR_CAT_GRADS], w.live_by_cat[VR_CAT_GRADS]);
}
END_TEST

/* A window measures from where it opens: an earlier, higher peak is not
 * its own; its peak is the first moment live bytes were highest, with
 * each category's bytes then; reserved counts blocks (512 B here). */
START_TEST(a_window_should_measure_peaks_from_where_it_opens) {
  vr_tape_rounding(t, 512, 1 << 20, 2 << 20);
  int64_t big = alloc(1000, VR_CAT_ACTIV); /* live 1000, reserved 1024 */
  OK(vr_tape_drop(t, big));                /* 0 */
  (void)param(100);                        /* live 100, reserved 512 */
  vr_tape_window_open(t);
  vr_tape_window w;
  vr_tape_window_get(t, &w);
  ck_assert_int_eq(w.start, 100);
  ck_assert_int_eq(w.rstart, 512);
  ck_assert_int_eq(w.peak, 100);
  int64_t a = alloc(300, VR_CAT_ACTIV);    /* 400; reserved 1024 */
  OK(vr_tape_drop(t, a));                  /* 100 */
  int64_t g = alloc(300, VR_CAT_GRADS);    /* 400 again: not a new peak */
  OK(vr_tape_temp(t, 200, VR_CAT_TEMP, -1)); /* 600 - 200: reserved 1536 for a moment */
  (void)g;
  vr_tape_window_get(t, &w);
  ck_assert_int_eq(w.start, 100);
  ck_assert_int_eq(w.peak, 600);
  ck_assert_int_eq(w.rpeak, 1536);
  ck_assert_int_eq(w.peak_by_cat[VR_CAT_WEIGHTS], 100);
  ck_assert_int_eq(w.peak_by_cat[VR_CAT_GRADS], 300);
  ck_assert_int_eq(w.peak_by_cat[VR_CAT_TEMP], 200);
  ck_assert_int_eq(w.peak_by_cat[VR_CAT_ACTIV], 0);
  ck_assert_int_eq(peak(), 1000); /* the tape's own peak is the earlier one */
  /* reopening starts over at the live bytes now */
  vr_tape_window_open(t);
  vr_tape_window_get(t, &w);
  ck_assert_int_eq(w.start, 400);
  ck_assert_int_eq(w.peak, 400);
  ck_assert_int_eq(w.peak_by_cat[VR_CAT_GRADS], 300);
  ck_assert_int_eq(w.peak_by_cat[VR_CAT_TEMP], 0);
}
END_TEST

/* Repeated timeline events are kept once, as pieces (vr_tape_timeline_repeat):
 * event for event they must read as the copies they stand for. Events of
 * 1, 2, 3, ... bytes make each one recognisable; the expected sequence is
 * written out as the copies would have been. */
START_TEST(repeated_timeline_events_should_read_as_their_copies) {
  int64_t want[64];
  size_t n = 0;
  vr_tape_timeline(t, true);
  for (int64_t b = 1; b <= 4; b++) { /* events 0..3: 1 2 3 4 */
    alloc(b, VR_CAT_ACTIV);
    want[n++] = b;
  }
  /* events 1..2 twice more, from inside one stretch: 2 3 2 3 */
  OK(vr_tape_timeline_repeat(t, 1, 3, 2));
  for (int k = 0; k < 2; k++) want[n++] = 2, want[n++] = 3;
  alloc(5, VR_CAT_ACTIV); /* a new stretch after a piece */
  want[n++] = 5;
  /* events 3..8 (4 2 3 2 3 5) across pieces: kept again once, then once more */
  OK(vr_tape_timeline_repeat(t, 3, 9, 2));
  for (int k = 0; k < 2; k++)
    for (size_t i = 3; i < 9; i++) want[n++] = want[i];
  /* the last event once (times 1): then new events follow it in a row */
  OK(vr_tape_timeline_repeat(t, n - 1, n, 1));
  want[n] = want[n - 1];
  n++;
  alloc(6, VR_CAT_ACTIV);
  want[n++] = 6;
  OK(vr_tape_timeline_repeat(t, 0, 2, 0)); /* nothing */
  ck_assert_int_eq(vr_tape_timeline_repeat(t, 2, n + 1, 1), VR_EBADID);
  /* copies are cheap to keep but each is walked when collected: bounded */
  ck_assert_int_eq(vr_tape_timeline_repeat(t, 0, 2, (int64_t)VR_TL_MAX), VR_EOVERFLOW);
  ck_assert_uint_eq(vr_tape_timeline_len(t), n);
  for (size_t i = 0; i < n; i++) {
    const vr_tl_event *e = vr_tape_timeline_at(t, i);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->delta, want[i]);
  }
  ck_assert_ptr_null(vr_tape_timeline_at(t, n));
  /* the pieces tile the events in order */
  const vr_tl_piece *p = NULL;
  size_t np = 0, at = 0;
  const vr_tl_event *ev = vr_tape_timeline_pieces(t, &p, &np);
  ck_assert_ptr_nonnull(ev);
  for (size_t q = 0; q < np; q++) {
    ck_assert_uint_eq(p[q].first, at);
    for (int64_t c = 0; c < p[q].times; c++)
      for (size_t j = 0; j < p[q].len; j++) ck_assert_int_eq(ev[p[q].src + j].delta, want[at++]);
  }
  ck_assert_uint_eq(at, n);
}
END_TEST

/* The spans the tape counts (runs of one phase and recomputation) are the
 * runs its events hold, repeats included: phases a, b alternate, and
 * ranges that start, end and fall inside a run are repeated. */
START_TEST(timeline_spans_should_be_counted_as_the_events_hold_them) {
  vr_tape_timeline(t, true);
  const char *ph[] = {"a", "a", "b", "b", "a", "b"};
  for (int k = 0; k < 6; k++) {
    OK(vr_tape_phase(t, ph[k]));
    alloc(k + 1, VR_CAT_ACTIV);
  }
  OK(vr_tape_timeline_repeat(t, 1, 3, 3));  /* a b, three times */
  OK(vr_tape_timeline_repeat(t, 2, 4, 2));  /* b b: within a run */
  OK(vr_tape_phase(t, "b"));
  alloc(7, VR_CAT_ACTIV);                   /* continues the last run */
  OK(vr_tape_timeline_repeat(t, 0, 12, 1)); /* across pieces */
  OK(vr_tape_timeline_repeat(t, 5, 6, 4));  /* one event */
  size_t n = vr_tape_timeline_len(t), runs = 0;
  for (size_t i = 0; i < n; i++)
    runs += i == 0 || vr_tl_new_span(vr_tape_timeline_at(t, i - 1), vr_tape_timeline_at(t, i));
  ck_assert_uint_gt(runs, 6);
  ck_assert_uint_eq(vr_tape_timeline_spans(t), runs);
  /* each kept event marks whether it begins a span after the one kept
   * before it (copies across pieces included), as a collect reads it */
  const vr_tl_piece *p = NULL;
  size_t np = 0, kept = 0;
  const vr_tl_event *ev = vr_tape_timeline_pieces(t, &p, &np);
  for (size_t q = 0; q < np; q++)
    if (p[q].src + p[q].len > kept) kept = p[q].src + p[q].len;
  ck_assert_uint_gt(kept, 12); /* the copy across pieces is kept again */
  ck_assert_int_eq(ev[0].starts, 1);
  for (size_t i = 1; i < kept; i++)
    ck_assert_int_eq(ev[i].starts, vr_tl_new_span(&ev[i - 1], &ev[i]));
  vr_tape_reset(t);
  ck_assert_uint_eq(vr_tape_timeline_spans(t), 0);
}
END_TEST

static Suite *tape_suite(void) {
  Suite *s = suite_create("tape");
  TCase *tc = tcase_create("names");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, category_names_should_round_trip);
  tcase_add_test(tc, every_status_should_have_its_own_message);
  tcase_add_test(tc, interned_strings_should_keep_their_index);
  tcase_add_test(tc, interned_strings_should_keep_their_text_as_the_table_grows);
  suite_add_tcase(s, tc);

  tc = tcase_create("accounting");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, a_new_tape_should_be_empty_in_phase_setup);
  tcase_add_test(tc, alloc_and_drop_should_track_live_bytes_and_peak);
  tcase_add_test(tc, bytes_and_grad_should_describe_live_tensors_only);
  tcase_add_test(tc, zero_byte_tensors_should_be_allowed_and_cost_nothing);
  tcase_add_test(tc, a_temporary_should_raise_the_peak_but_not_live_bytes);
  tcase_add_test(tc, each_phase_should_keep_its_own_peak);
  suite_add_tcase(s, tc);

  tc = tcase_create("backward");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, linear_then_loss_should_peak_in_backward_at_the_weight_gradient);
  tcase_add_test(tc, parameter_gradients_should_persist_until_zero_grad);
  tcase_add_test(tc, a_second_backward_should_accumulate_into_existing_parameter_gradients);
  tcase_add_test(tc, a_second_gradient_into_the_same_tensor_should_be_transient);
  tcase_add_test(tc, a_view_should_pass_its_gradient_through_without_new_memory);
  tcase_add_test(tc, a_view_gradient_should_be_freed_when_the_base_already_has_one);
  tcase_add_test(tc, one_gradient_shared_by_two_alias_edges_should_be_freed_once_both_are_done);
  tcase_add_test(tc, retain_should_add_a_reference_that_needs_its_own_drop);
  tcase_add_test(tc, saved_tensors_should_be_released_after_their_node_runs);
  tcase_add_test(tc, a_node_workspace_should_spike_during_its_backward);
  tcase_add_test(tc, many_tensors_and_nodes_should_grow_the_tape);
  suite_add_tcase(s, tc);

  tc = tcase_create("checkpoint");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, a_checkpointed_segment_should_keep_only_its_inputs_and_outputs);
  tcase_add_test(tc, backward_should_recompute_a_checkpointed_segment);
  tcase_add_test(tc, backward_without_gradients_should_not_recompute_a_segment);
  tcase_add_test(tc, consecutive_segments_should_recompute_one_at_a_time);
  tcase_add_test(tc, a_retain_inside_a_segment_should_be_replayed);
  tcase_add_test(tc, a_replay_drop_should_happen_only_in_the_recomputation);
  suite_add_tcase(s, tc);

  tc = tcase_create("errors");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, unknown_ids_should_be_rejected);
  tcase_add_test(tc, dropping_a_freed_tensor_should_fail);
  tcase_add_test(tc, negative_sizes_should_be_rejected);
  tcase_add_test(tc, unknown_categories_should_be_rejected);
  tcase_add_test(tc, an_alias_past_the_outputs_should_be_rejected);
  tcase_add_test(tc, more_than_64_edges_should_be_rejected);
  tcase_add_test(tc, checkpoint_segments_should_not_nest);
  tcase_add_test(tc, ckpt_end_without_begin_should_fail);
  tcase_add_test(tc, live_bytes_past_int64_should_overflow);
  tcase_add_test(tc, a_temporary_past_int64_should_overflow);
  tcase_add_test(tc, replay_drop_should_need_a_recording_and_a_live_tensor);
  suite_add_tcase(s, tc);

  tc = tcase_create("failures");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, a_failed_alloc_should_leave_live_bytes_unchanged);
  tcase_add_test(tc, a_failed_temp_should_leave_live_bytes_unchanged);
  tcase_add_test(tc, a_rejected_node_should_not_hold_its_saved_tensors);
  tcase_add_test(tc, a_rejected_node_inside_a_segment_should_not_corrupt_the_recording);
  tcase_add_test(tc, a_second_drop_of_a_saved_tensor_should_be_refused);
  tcase_add_test(tc, zero_grad_should_free_the_gradient_of_a_dropped_parameter);
  suite_add_tcase(s, tc);

  tc = tcase_create("composed");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, captured_layers_should_equal_layers_built_one_by_one);
  tcase_add_test(tc, an_echoed_layer_should_equal_the_layer_walked);
  tcase_add_test(tc, a_composed_layer_with_big_gradients_should_peak_as_walked);
  tcase_add_test(tc, a_nested_echo_should_equal_the_experts_walked);
  suite_add_tcase(s, tc);

  tc = tcase_create("timeline");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, repeated_timeline_events_should_read_as_their_copies);
  tcase_add_test(tc, timeline_spans_should_be_counted_as_the_events_hold_them);
  suite_add_tcase(s, tc);

  tc = tcase_create("window");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, a_window_should_measure_peaks_from_where_it_opens);
  suite_add_tcase(s, tc);

  tc = tcase_create("reset");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, reset_should_empty_the_tape_for_reuse);
  tcase_add_test(tc, a_recycled_tape_should_be_a_fresh_one);
  tcase_add_test(tc, an_assigned_tape_should_go_on_as_its_source);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(tape_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
