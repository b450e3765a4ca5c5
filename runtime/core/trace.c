#include "trace.h"

#include <string.h>

#include "checked.h"

vr_trace *vr_trace_new(const vr_mem *mem) {
  vr_mem m = mem ? *mem : (vr_mem){NULL, NULL};
  vr_trace *tr = (vr_trace *)vr_mem_array(&m, 1, sizeof *tr);
  if (!tr) return NULL;
  memset(tr, 0, sizeof *tr);
  tr->mem = m;
  return tr;
}

bool vr_trace_push(vr_trace *tr, vr_op op) {
  if (!vr_mem_grow(&tr->mem, (void **)&tr->ops, &tr->cap, tr->n + 1, sizeof *tr->ops, 256))
    return false;
  tr->ops[tr->n++] = op;
  return true;
}

void vr_trace_release(vr_trace *tr) {
  vr_mem_free(&tr->mem, tr->ops, tr->cap * sizeof *tr->ops);
  tr->ops = NULL;
  tr->n = tr->cap = 0;
}

void vr_trace_free(vr_trace *tr) {
  if (!tr) return;
  vr_mem m = tr->mem;
  vr_plan_free(tr->plan, &m);
  tr->plan = NULL;
  vr_trace_release(tr);
  vr_mem_free(&m, tr, sizeof *tr);
}

/* Checked evaluation; false on overflow. */
static bool poly(const int64_t c[VR_MONOMIALS], int64_t b, int64_t t, int64_t *out) {
  int64_t m[VR_MONOMIALS], s = 0, x = 0, bt = 0, tt = 0;
  if (!vr_mul(b, t, &bt) || !vr_mul(t, t, &tt)) return false;
  m[0] = 1;
  m[1] = b;
  m[2] = t;
  m[3] = bt;
  m[4] = tt;
  if (!vr_mul(b, tt, &m[5])) return false;
  for (int i = 0; i < VR_MONOMIALS; i++) {
    if (!vr_mul(c[i], m[i], &x) || !vr_add(s, x, &s)) return false;
  }
  *out = s;
  return true;
}

/* The probes: B in {1, 2} times T in {1, 2, 3}, then (3, 5) to confirm. */
static const int64_t PROBE_B[] = {1, 1, 1, 2, 2, 2, 3};
static const int64_t PROBE_T[] = {1, 2, 3, 1, 2, 3, 5};

/* The probes of a line program (one size held at 1, where the op
 * structure differs from the general case): the other size at 2, 3, 4,
 * then 5 to confirm. */
static const int64_t LINE_X[] = {2, 3, 4, 5};

/* v(T) = a + b T + c T^2 through T = 1, 2, 3; false when the second
 * difference is odd (not an integer polynomial) or a step overflows. */
static bool quad(const int64_t v[3], int64_t q[3]) {
  int64_t twice = 0, d2 = 0, d1 = 0, thrice = 0;
  if (!vr_mul(v[1], 2, &twice) || !vr_sub(v[2], twice, &d2) || !vr_add(d2, v[0], &d2))
    return false;
  if (d2 % 2) return false;
  q[2] = d2 / 2;
  if (!vr_sub(v[1], v[0], &d1) || !vr_mul(q[2], 3, &thrice) || !vr_sub(d1, thrice, &q[1]))
    return false;
  return vr_sub(v[0], q[1], &q[0]) && vr_sub(q[0], q[2], &q[0]);
}

int vr_coef_sign(const int64_t c[VR_MONOMIALS]) {
  bool pos = false, neg = false;
  for (int i = 0; i < VR_MONOMIALS; i++) {
    pos |= c[i] > 0;
    neg |= c[i] < 0;
  }
  return pos && !neg ? 1 : (neg && !pos ? -1 : 0);
}

bool vr_coef_exact(const int64_t c[VR_MONOMIALS], int64_t round) {
  if (round <= 0) return true;
  for (int i = 0; i < VR_MONOMIALS; i++)
    if (c[i] % round != 0) return false;
  return true;
}

static int sign_of(const vr_op *op) { return vr_coef_sign(op->coef); }

static bool block_exact(const vr_op *op, int64_t round) { return vr_coef_exact(op->coef, round); }

/* prev += op term by term; false (prev unchanged) on overflow. */
static bool merge(vr_op *prev, const vr_op *op) {
  int64_t sum[VR_MONOMIALS];
  for (int i = 0; i < VR_MONOMIALS; i++)
    if (!vr_add(prev->coef[i], op->coef[i], &sum[i])) return false;
  memcpy(prev->coef, sum, sizeof sum);
  prev->label = op->label;
  return true;
}

/* Consecutive size-independent changes of one category and one sign
 * (weights, optimizer states, gradients of the set-up) fold into one, and so
 * do size-dependent ones that the block rounding leaves exact: the peak of a
 * run of allocations is at its end, frees never make a peak. Changes whose
 * sum would overflow stay apart (evaluation then reports the overflow).
 * False when a constant overflows once rounded to the block. */
static bool fold_constants(vr_trace *prog) {
  size_t w = 0;
  for (size_t j = 0; j < prog->n; j++) {
    vr_op op = prog->ops[j];
    if (op.kind == VR_OP_DELTA && w > 0) {
      vr_op *prev = &prog->ops[w - 1];
      int sg = sign_of(&op);
      if (prev->kind == VR_OP_DELTA && prev->cat == op.cat && sg != 0 &&
          sign_of(prev) == sg && block_exact(prev, prog->round) &&
          block_exact(&op, prog->round) && merge(prev, &op))
        continue;
    }
    bool constant = op.kind == VR_OP_DELTA;
    for (int i = 1; constant && i < VR_MONOMIALS; i++) constant = op.coef[i] == 0;
    if (constant) {
      op.kind = VR_OP_CONST;
      if (!vr_round_up(op.coef[0], prog->round, &op.coef[0])) return false;
      vr_op *prev = w > 0 ? &prog->ops[w - 1] : NULL;
      if (prev && prev->kind == VR_OP_CONST && prev->cat == op.cat &&
          (prev->coef[0] > 0) == (op.coef[0] > 0) && merge(prev, &op))
        continue;
    }
    prog->ops[w++] = op;
  }
  prog->n = w;
  for (size_t j = 0; j < prog->n; j++) { /* slot: the only non-zero term, or -1 */
    vr_op *op = &prog->ops[j];
    if (op->kind != VR_OP_DELTA) continue;
    int nz = 0;
    op->slot = -1;
    for (int i = 0; i < VR_MONOMIALS; i++)
      if (op->coef[i] != 0) {
        nz++;
        op->slot = i;
      }
    if (nz != 1) op->slot = -1;
  }
  return true;
}

/* A DELTA's coefficients from its seven probe values; NULL or the reason. */
static const char *fit_delta(const vr_trace *const *tr, size_t j, vr_op *op) {
  int64_t v1[3] = {tr[0]->ops[j].value, tr[1]->ops[j].value, tr[2]->ops[j].value};
  int64_t v2[3] = {tr[3]->ops[j].value, tr[4]->ops[j].value, tr[5]->ops[j].value};
  int64_t q1[3], q2[3], check = 0;
  if (!quad(v1, q1) || !quad(v2, q2)) return "a size is not an integer polynomial in batch and seq";
  /* each coefficient is linear in B: c(B) = c0 + c1 B through B = 1, 2 */
  for (int d = 0; d < 3; d++) {
    int64_t c1 = 0, c0 = 0;
    if (!vr_sub(q2[d], q1[d], &c1) || !vr_sub(q1[d], c1, &c0))
      return "a size's polynomial in batch and seq overflows int64";
    op->coef[d == 0 ? 0 : (d == 1 ? 2 : 4)] = c0;
    op->coef[d == 0 ? 1 : (d == 1 ? 3 : 5)] = c1;
  }
  if (!poly(op->coef, PROBE_B[6], PROBE_T[6], &check) || check != tr[6]->ops[j].value)
    return "a size is not a polynomial in batch and seq of degree (1, 2)";
  return NULL;
}

/* A DELTA's polynomial in x from its values at x = 2, 3, 4, confirmed at
 * 5: p(x) = q0 + q1 (x - 1) + q2 (x - 1)^2. Coefficients of 1, x, x^2 in
 * c; NULL or the reason. */
static const char *fit_line(const vr_trace *const *tr, size_t j, int64_t c[3]) {
  int64_t v[3] = {tr[0]->ops[j].value, tr[1]->ops[j].value, tr[2]->ops[j].value};
  int64_t q[3], t = 0, x = LINE_X[3], check = 0;
  if (!quad(v, q)) return "a size is not an integer polynomial of degree 2";
  if (!vr_sub(q[0], q[1], &c[0]) || !vr_add(c[0], q[2], &c[0]) || !vr_mul(q[2], 2, &t) ||
      !vr_sub(q[1], t, &c[1]))
    return "a size's polynomial overflows int64";
  c[2] = q[2];
  if (!vr_mul(c[2], x, &check) || !vr_add(check, c[1], &check) || !vr_mul(check, x, &check) ||
      !vr_add(check, c[0], &check) || check != tr[3]->ops[j].value)
    return "a size is not a polynomial of degree 2";
  return NULL;
}

/* Which probes the k traces are: 0 the standard seven, 1 a line at batch
 * 1, 2 a line at seq 1, -1 neither. */
static int probe_kind(const vr_trace *const *tr, int k) {
  bool std = k == 7, b1 = k == 4, t1 = k == 4;
  for (int i = 0; i < k; i++) {
    if (tr[i]->n != tr[0]->n) return -1;
    std = std && tr[i]->batch == PROBE_B[i] && tr[i]->seq == PROBE_T[i];
    b1 = b1 && tr[i]->batch == 1 && tr[i]->seq == LINE_X[i];
    t1 = t1 && tr[i]->seq == 1 && tr[i]->batch == LINE_X[i];
  }
  return std ? 0 : b1 ? 1 : t1 ? 2 : -1;
}

/* A DELTA's coefficients under probes of the given kind; NULL or the reason. */
static const char *fit_any(const vr_trace *const *tr, int kind, size_t j, vr_op *op) {
  int64_t c[3] = {0, 0, 0};
  const char *why = NULL;
  if (kind == 0) return fit_delta(tr, j, op);
  if ((why = fit_line(tr, j, c)) != NULL) return why;
  memset(op->coef, 0, sizeof op->coef);
  if (kind == 1) { /* batch 1: 1, T, T^2 */
    op->coef[0] = c[0];
    op->coef[2] = c[1];
    op->coef[4] = c[2];
  } else { /* seq 1: 1, B; a B^2 term has no monomial */
    if (c[2] != 0) return "a size grows with the square of the batch";
    op->coef[0] = c[0];
    op->coef[1] = c[1];
  }
  return NULL;
}

/* A composed layer's new gradients in the program's blocks: the GRAD ops
 * that follow its BULK_BWD at j. */
static bool bulk_grads(const vr_trace *tr, size_t j, int64_t round, int64_t *out) {
  int64_t sum = 0, r = 0;
  for (size_t k = j + 1; k < tr->n && tr->ops[k].kind == VR_OP_GRAD; k++)
    if (!vr_round_up(tr->ops[k].value, round, &r) || !vr_add(sum, r, &sum)) return false;
  *out = sum;
  return true;
}

vr_trace *vr_trace_fit(const vr_trace *const *tr, int k, int64_t round, const char **why) {
  vr_trace *out = NULL;
  *why = "";
  int kind = k == 7 || k == 4 ? probe_kind(tr, k) : -1;
  if (kind < 0) {
    bool shape = k == 7 || k == 4;
    for (int i = 0; shape && i < k; i++) shape = tr[i]->n == tr[0]->n;
    *why = !shape ? "the probes' traces differ in shape (a size-dependent branch)"
                  : "needs the 7 standard probes, or 4 of a line at batch 1 or seq 1";
    return NULL;
  }
  out = vr_trace_new(&tr[0]->mem);
  if (!out) goto nomem;
  out->round = round;
  out->batch = kind == 1 ? 1 : 0; /* a line program answers only there */
  out->seq = kind == 2 ? 1 : 0;
  for (size_t j = 0; j < tr[0]->n; j++) {
    vr_op op = tr[0]->ops[j];
    for (int i = 1; i < k; i++) {
      const vr_op *o = &tr[i]->ops[j];
      bool same = o->kind == op.kind && o->cat == op.cat && o->slot == op.slot &&
                  (op.kind == VR_OP_DELTA || (o->value == op.value && o->extra == op.extra));
      if (!same) {
        *why = "the probes' traces differ op by op (a size-dependent branch)";
        goto fail;
      }
    }
    if (op.kind == VR_OP_GRAD) continue; /* folded into its BULK_BWD */
    if (op.kind == VR_OP_DELTA && (*why = fit_any(tr, kind, j, &op)) != NULL) goto fail;
    if (op.kind == VR_OP_BULK_BWD && !bulk_grads(tr[0], j, round, &op.extra_rounded)) {
      *why = "a composed layer's gradient bytes overflow int64";
      goto fail;
    }
    if (!vr_trace_push(out, op)) goto nomem;
  }
  *why = "";
  if (!fold_constants(out)) {
    *why = "a constant size overflows int64 once rounded to the block";
    goto fail;
  }
  out->plan = vr_plan_build(out);
  if (!out->plan) goto nomem;
  return out;
nomem:
  *why = "out of memory";
fail:
  vr_trace_free(out);
  return NULL;
}

#define MAX_SLOTS 64

typedef struct {
  int64_t live, cat[VR_NCAT];
  int32_t phase;
  vr_trace_result *r;
  int64_t watch;
} state;

/* Live bytes change by x; false on overflow. */
static bool add(state *s, int64_t x, int cat, int label) {
  int64_t live = 0, c = 0;
  if (!vr_add(s->live, x, &live) || !vr_add(s->cat[cat], x, &c)) return false;
  s->live = live;
  s->cat[cat] = c;
  if (x <= 0) return true; /* a free never makes a peak */
  if (s->live > s->watch) s->watch = s->live;
  if (s->live > s->r->peak) {
    s->r->peak = s->live;
    s->r->peak_phase = s->phase;
    s->r->peak_label = label;
    memcpy(s->r->at_peak, s->cat, sizeof s->cat);
  }
  return true;
}

/* An allocation and its free (a layer's excursion). */
static bool add_free(state *s, int64_t x, int cat, int label) {
  int64_t neg = 0;
  return vr_sub(0, x, &neg) && add(s, x, cat, label) && add(s, neg, cat, label);
}

bool vr_trace_eval(const vr_trace *prog, int64_t batch, int64_t seq, vr_trace_result *out) {
  int64_t round = prog->round;
  int64_t marks[MAX_SLOTS] = {0}, start[MAX_SLOTS] = {0}, left[MAX_SLOTS] = {0};
  memset(out, 0, sizeof *out);
  out->peak_label = -1;
  state s = {0, {0}, 0, out, 0};
  int64_t m[VR_MONOMIALS] = {1, batch, seq, 0, 0, 0};
  if (!vr_mul(batch, seq, &m[3]) || !vr_mul(seq, seq, &m[4]) || !vr_mul(m[4], batch, &m[5]))
    return false;
  for (size_t j = 0; j < prog->n; j++) {
    const vr_op *op = &prog->ops[j];
    int slot = op->slot >= 0 && op->slot < MAX_SLOTS ? op->slot : 0;
    int64_t x = 0;
    switch (op->kind) {
      case VR_OP_DELTA: {
        if (op->slot >= 0) { /* most sizes are one term */
          if (!vr_mul(op->coef[op->slot], m[op->slot], &x)) return false;
        } else {
          for (int i = 0; i < VR_MONOMIALS; i++) {
            int64_t term = 0;
            if (op->coef[i] == 0) continue;
            if (!vr_mul(op->coef[i], m[i], &term) || !vr_add(x, term, &x)) return false;
          }
        }
        if (!vr_round_up(x, round, &x) || !add(&s, x, op->cat, op->label)) return false;
        break;
      }
      case VR_OP_CONST:
        if (!add(&s, op->coef[0], op->cat, op->label)) return false;
        break;
      case VR_OP_PHASE:
        s.phase = op->label;
        break;
      case VR_OP_MARK:
        marks[slot] = s.live;
        break;
      case VR_OP_BULK_FWD: { /* two marks bracket one simulated layer */
        int mk = (int)(op->extra >= 0 && op->extra + 1 < MAX_SLOTS ? op->extra : 0);
        if (!vr_sub(marks[mk + 1], marks[mk], &x) || !vr_mul(x, op->value, &x) ||
            !add(&s, x, op->cat, op->label))
          return false;
        left[slot] = x;
        break;
      }
      case VR_OP_MEASURE:
        start[slot] = s.live;
        s.watch = s.live;
        break;
      case VR_OP_BULK_BWD: {
        int64_t exc = 0, net = 0, rel = 0, neg = 0;
        int64_t g = round > 0 ? op->extra_rounded : op->extra;
        if (!vr_sub(s.watch, start[slot], &exc) || !vr_sub(s.live, start[slot], &net) ||
            !vr_sub(g, net, &rel) || !vr_sub(0, rel, &neg))
          return false;
        for (int64_t i = 0; i < op->value; i++) {
          if (!add_free(&s, exc, VR_CAT_TEMP, op->label) || !add(&s, g, VR_CAT_GRADS, op->label) ||
              !add(&s, neg, op->cat, op->label) || !vr_sub(left[slot], rel, &left[slot]))
            return false;
        }
        if (!vr_sub(0, left[slot], &neg) || !add(&s, neg, op->cat, op->label)) return false;
        break;
      }
      default:
        return false;
    }
  }
  return true;
}
