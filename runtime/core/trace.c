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
  vr_mem_free(&tr->mem, tr->coefs, tr->coefs_cap * (size_t)tr->nmono * sizeof *tr->coefs);
  vr_mem_free(&tr->mem, tr->terms, tr->terms_cap * sizeof *tr->terms);
  vr_mem_free(&tr->mem, tr->sizes, tr->sizes_cap * sizeof *tr->sizes);
  vr_mem_free(&tr->mem, tr->dops, tr->dops_cap * sizeof *tr->dops);
  vr_mem_free(&tr->mem, tr->items, tr->items_cap * sizeof *tr->items);
  tr->ops = NULL;
  tr->coefs = NULL;
  tr->terms = NULL;
  tr->sizes = NULL;
  tr->dops = NULL;
  tr->items = NULL;
  tr->n = tr->cap = tr->coefs_cap = tr->nterms = tr->terms_cap = tr->nsizes = tr->sizes_cap = 0;
  tr->ndops = tr->dops_cap = tr->nitems = tr->items_cap = 0;
}

void vr_trace_free(vr_trace *tr) {
  if (!tr) return;
  vr_mem m = tr->mem;
  vr_plan_free(tr->plan, &m);
  tr->plan = NULL;
  vr_trace_release(tr);
  vr_mem_free(&m, tr, sizeof *tr);
}

int vr_coef_sign(const int64_t *c, int n) {
  bool pos = false, neg = false;
  for (int i = 0; i < n; i++) {
    pos |= c[i] > 0;
    neg |= c[i] < 0;
  }
  return pos && !neg ? 1 : (neg && !pos ? -1 : 0);
}

bool vr_coef_exact(const int64_t *c, int n, int64_t round) {
  if (round <= 0) return true;
  for (int i = 0; i < n; i++)
    if (c[i] % round != 0) return false;
  return true;
}

/* Size v's stride in the monomials (the last size fastest), and monomial
 * i's exponent of it. */
static int64_t stride(const vr_grid *g, int v) {
  int64_t s = 1;
  for (int w = g->nvars - 1; w > v; w--) s *= g->degree[w] + 1;
  return s;
}

static int exponent(const vr_grid *g, int i, int v) {
  return (int)((i / stride(g, v)) % (g->degree[v] + 1));
}

/* How each monomial i > 0 is made: monomial from[i] (one exponent less)
 * times size var[i]. */
static void recipe(const vr_grid *g, int nmono, uint8_t *from, uint8_t *var) {
  for (int i = 1; i < nmono; i++) {
    int v = g->nvars - 1;
    while (exponent(g, i, v) == 0) v--;
    from[i] = (uint8_t)(i - stride(g, v));
    var[i] = (uint8_t)v;
  }
}

/* Every monomial of sizes (used NULL) or those used, the others 0; false
 * when one that counts overflows. One product each. */
static bool monomials(int nmono, const uint8_t *from, const uint8_t *var, const bool *used,
                      const int64_t *sizes, int64_t *m) {
  bool over[VR_MAXMONO], any = false;
  m[0] = 1;
  over[0] = false;
  for (int i = 1; i < nmono; i++) {
    over[i] = over[from[i]] || !vr_mul(m[from[i]], sizes[var[i]], &m[i]);
    any |= over[i];
  }
  if (!any && !used) return true;
  for (int i = 0; i < nmono; i++) {
    bool counts = !used || used[i];
    if (over[i] && counts) return false;
    if (over[i]) m[i] = 0;
  }
  return true;
}

bool vr_trace_monomials(const vr_trace *prog, const int64_t *sizes, int64_t m[VR_MAXMONO]) {
  return monomials(prog->nmono, prog->from, prog->var, prog->used, sizes, m);
}

/* Checked value of row c at monomials m; false on overflow. */
static bool poly(const int64_t *c, int n, const int64_t *m, int64_t *out) {
  int64_t s = 0, x = 0;
  for (int i = 0; i < n; i++) {
    if (c[i] == 0) continue;
    if (!vr_mul(c[i], m[i], &x) || !vr_add(s, x, &s)) return false;
  }
  *out = s;
  return true;
}

/* Values y_0..y_d at x = base, base + 1, ..., base + d (every step-th entry
 * of v) to the coefficients of 1, x, ..., x^d, in place: Newton's forward
 * differences (the k-th of an integer polynomial divides by k!), expanded.
 * False when not an integer polynomial, or on overflow. */
static bool newton(int64_t *v, int64_t step, int d, int64_t base) {
  int64_t a[VR_MAXDEG + 1], c[VR_MAXDEG + 1] = {0}, fact = 1, t = 0, shift = 0;
  for (int i = 0; i <= d; i++) a[i] = v[i * step];
  for (int k = 1; k <= d; k++) /* a[i], i >= k: the k-th difference at base + i - k */
    for (int i = d; i >= k; i--)
      if (!vr_sub(a[i], a[i - 1], &a[i])) return false;
  for (int k = 1; k <= d; k++) {
    fact *= k;
    if (a[k] % fact != 0) return false;
    a[k] /= fact;
  }
  /* sum of a_k (x - base)(x - base - 1)...(x - base - k + 1), by Horner */
  c[0] = a[d];
  for (int k = d - 1; k >= 0; k--) {
    if (!vr_add(base, k, &shift)) return false;
    for (int i = d; i >= 0; i--) { /* c = c (x - shift) */
      if (!vr_mul(c[i], shift, &t) || !vr_sub(i > 0 ? c[i - 1] : 0, t, &c[i])) return false;
    }
    if (!vr_add(c[0], a[k], &c[0])) return false;
  }
  for (int i = 0; i <= d; i++) v[i * step] = c[i];
  return true;
}

/* Op j's coefficients (row c) from its values at the grid's probes,
 * confirmed at the further ones; NULL or the reason. */
static const char *fit_values(const vr_trace *const *tr, int k, const vr_grid *g,
                              const int64_t *sizes, int nmono, size_t j, int64_t *c) {
  for (int i = 0; i < nmono; i++) c[i] = tr[i]->ops[j].value;
  for (int v = 0; v < g->nvars; v++) {
    int64_t st = stride(g, v), span = st * (g->degree[v] + 1);
    if (g->degree[v] == 0) continue;
    for (int i = 0; i < nmono; i++) /* each line along v, from its first probe */
      if (i % span < st && !newton(c + i, st, g->degree[v], g->base[v]))
        return "a size is not an integer polynomial in the traced sizes";
  }
  uint8_t from[VR_MAXMONO], var[VR_MAXMONO];
  recipe(g, nmono, from, var);
  for (int p = nmono; p < k; p++) {
    int64_t m[VR_MAXMONO], x = 0;
    if (!monomials(nmono, from, var, NULL, sizes + (size_t)p * (size_t)g->nvars, m) ||
        !poly(c, nmono, m, &x) || x != tr[p]->ops[j].value)
      return "a size is not a polynomial of the traced degrees (a further probe disagrees)";
  }
  return NULL;
}

/* Row prev += row op; false (prev unchanged) on overflow. */
static bool merge(int64_t *prev, const int64_t *op, int n) {
  int64_t sum[VR_MAXMONO];
  for (int i = 0; i < n; i++)
    if (!vr_add(prev[i], op[i], &sum[i])) return false;
  memcpy(prev, sum, (size_t)n * sizeof *sum);
  return true;
}

/* Consecutive size-independent changes of one category and one sign
 * (weights, optimizer states, gradients of the set-up) fold into one, and so
 * do size-dependent ones that the block rounding leaves exact: the peak of a
 * run of allocations is at its end, frees never make a peak. Changes whose
 * sum would overflow stay apart (evaluation then reports the overflow).
 * False when a constant overflows once rounded to the block. */

/* A device program folds only constants: two tensors' blocks are not one
 * block of their sum, so each constant keeps its reserved bytes (extra) and
 * a size-dependent change stays one tensor. */
static bool fold_constants(vr_trace *prog) {
  int n = prog->nmono;
  size_t w = 0;
  for (size_t j = 0; j < prog->n; j++) {
    vr_op op = prog->ops[j];
    int64_t *c = vr_trace_row(prog, j), *pc = w > 0 ? vr_trace_row(prog, w - 1) : NULL;
    vr_op *prev = w > 0 ? &prog->ops[w - 1] : NULL;
    if (op.kind == VR_OP_DELTA && !prog->device && prev && prev->kind == VR_OP_DELTA &&
        prev->cat == op.cat) {
      int sg = vr_coef_sign(c, n);
      if (sg != 0 && vr_coef_sign(pc, n) == sg && vr_coef_exact(pc, n, prog->round) &&
          vr_coef_exact(c, n, prog->round) && merge(pc, c, n)) {
        prev->label = op.label;
        continue;
      }
    }
    bool constant = op.kind == VR_OP_DELTA;
    for (int i = 1; constant && i < n; i++) constant = c[i] == 0;
    if (constant) {
      op.kind = VR_OP_CONST;
      if (!vr_round_up(c[0], prog->round, &c[0])) return false;
      if (prog->device && !vr_trace_block(prog, c[0], &op.extra)) return false;
      int64_t rsum = 0;
      if (prev && prev->kind == VR_OP_CONST && prev->cat == op.cat &&
          (pc[0] > 0) == (c[0] > 0) && vr_add(prev->extra, op.extra, &rsum) &&
          merge(pc, c, n)) {
        prev->label = op.label;
        prev->extra = rsum;
        continue;
      }
    }
    if (w != j) memcpy(vr_trace_row(prog, w), c, (size_t)n * sizeof *c);
    prog->ops[w++] = op;
  }
  prog->n = w;
  return true;
}

/* A program's slots (VR_TRACE_SLOTS): the tape numbers its marks 0, 1, 2,
 * ... over the whole run and a BULK_FWD reads the last two, so a program
 * keeps two (a mark's number's parity), whatever the number of layers and
 * micro-batches; bulk slots are the tape's few. NULL or the reason. */
static const char *renumber(vr_op *op, int64_t *marks) {
  switch (op->kind) {
    case VR_OP_MARK:
      if (op->slot != *marks) return "a trace's marks are out of order";
      op->slot = (int32_t)(*marks & 1);
      ++*marks;
      return NULL;
    case VR_OP_BULK_FWD:
      if (*marks < 2 || op->extra != *marks - 2)
        return "a composed layer does not follow its two marks";
      op->extra = (*marks - 2) & 1;
      break;
    default: break;
  }
  if ((op->kind == VR_OP_BULK_FWD || op->kind == VR_OP_MEASURE || op->kind == VR_OP_BULK_BWD) &&
      (op->slot < 0 || op->slot >= VR_TRACE_SLOTS))
    return "a composed layer's slot is out of range";
  return NULL;
}

/* Which probes the grid asks for: trace i < nmono at base + the digits of
 * i; false (with the reason) when the sizes say otherwise. */
static const char *check_grid(const vr_grid *g, int k, const int64_t *sizes, int *nmono) {
  int64_t n = 1;
  if (g->nvars < 1 || g->nvars > VR_MAXVARS) return "a program has 1 to 4 sizes";
  for (int v = 0; v < g->nvars; v++) {
    if (g->degree[v] < 0 || g->degree[v] > VR_MAXDEG) return "a size's degree is 0 to 4";
    if (g->base[v] < 0) return "sizes are >= 0";
    n *= g->degree[v] + 1;
  }
  if (n > VR_MAXMONO) return "more than 64 monomials";
  *nmono = (int)n;
  if (k <= n) return "needs the grid's probes and at least one more to confirm";
  for (int i = 0; i < k; i++)
    for (int v = 0; v < g->nvars; v++) {
      int64_t x = sizes[(size_t)i * (size_t)g->nvars + (size_t)v];
      if (x < 0) return "sizes are >= 0";
      if (i < n ? x != g->base[v] + exponent(g, i, v) : g->degree[v] == 0 && x != g->base[v])
        return "the probes' sizes are not the grid's";
    }
  return NULL;
}

vr_trace *vr_trace_fit(const vr_trace *const *tr, int k, const vr_grid *g,
                       const int64_t *sizes, int64_t round, const vr_blocks *blocks,
                       const char **why) {
  vr_trace *out = NULL;
  int nmono = 0;
  if ((*why = check_grid(g, k, sizes, &nmono)) != NULL) return NULL;
  for (int i = 1; i < k; i++)
    if (tr[i]->n != tr[0]->n) {
      *why = "the probes' traces differ in shape (a size-dependent branch)";
      return NULL;
    }
  int64_t marks = 0; /* MARKs so far */
  out = vr_trace_new(&tr[0]->mem);
  if (!out) goto nomem;
  out->round = round;
  if (blocks) {
    out->device = true;
    out->small_max = blocks->small_max;
    out->large_round = blocks->large_round;
  }
  out->grid = *g;
  out->nmono = nmono;
  recipe(g, nmono, out->from, out->var);
  out->coefs = (int64_t *)vr_mem_array(&out->mem, tr[0]->n ? tr[0]->n : 1,
                                       (size_t)nmono * sizeof *out->coefs);
  if (!out->coefs) goto nomem;
  out->coefs_cap = tr[0]->n ? tr[0]->n : 1;
  for (size_t j = 0; j < tr[0]->n; j++) {
    vr_op op = tr[0]->ops[j];
    for (int i = 1; i < k; i++) {
      const vr_op *o = &tr[i]->ops[j];
      bool sized = op.kind == VR_OP_DELTA || op.kind == VR_OP_GRAD || op.kind == VR_OP_BULK_BWD;
      bool same = o->kind == op.kind && o->cat == op.cat && o->slot == op.slot &&
                  (sized ? op.kind != VR_OP_BULK_BWD || o->value == op.value
                         : o->value == op.value && o->extra == op.extra);
      if (!same) {
        *why = "the probes' traces differ op by op (a size-dependent branch)";
        goto fail;
      }
    }
    if ((*why = renumber(&op, &marks)) != NULL) goto fail;
    if (op.kind == VR_OP_INPUT) {
      if (!out->device || op.slot < 0 || op.slot >= VR_MAXINPUTS) {
        *why = "a trace's inputs fit only a device program, 4 inputs at most";
        goto fail;
      }
      if (op.slot >= out->ninputs) out->ninputs = op.slot + 1;
    }
    int64_t *c = out->coefs + out->n * (size_t)nmono;
    memset(c, 0, (size_t)nmono * sizeof *c);
    if ((op.kind == VR_OP_DELTA || op.kind == VR_OP_GRAD) &&
        (*why = fit_values(tr, k, g, sizes, nmono, j, c)) != NULL)
      goto fail;
    if (!vr_trace_push(out, op)) goto nomem;
  }
  *why = "";
  if (!fold_constants(out)) {
    *why = "a constant size overflows int64 once rounded to the block";
    goto fail;
  }
  for (size_t j = 0; j < out->n; j++)
    for (int i = 0; i < nmono; i++) out->used[i] |= vr_trace_row(out, j)[i] != 0;
  if (out->device) { /* evaluated by vr_trace_device alone, from its sizes */
    if (!vr_device_build(out)) {
      *why = "out of memory, or more distinct tensor sizes than a device program holds";
      goto fail;
    }
    return out;
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

bool vr_trace_grads(const vr_trace *prog, size_t j, const int64_t *m, int64_t *out) {
  int64_t sum = 0, x = 0;
  for (size_t k = j + 1; k < prog->n && prog->ops[k].kind == VR_OP_GRAD; k++)
    if (!poly(vr_trace_row(prog, k), prog->nmono, m, &x) || !vr_round_up(x, prog->round, &x) ||
        !vr_add(sum, x, &sum))
      return false;
  *out = sum;
  return true;
}

bool vr_trace_delta(const vr_trace *prog, size_t j, const int64_t *m, int64_t *out) {
  int64_t x = 0;
  if (!poly(vr_trace_row(prog, j), prog->nmono, m, &x)) return false;
  if (prog->ops[j].kind == VR_OP_CONST) return *out = x, true; /* rounded when fitted */
  return vr_round_up(x, prog->round, out);
}


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

bool vr_trace_eval(const vr_trace *prog, const int64_t *sizes, vr_trace_result *out) {
  int64_t marks[2] = {0}, start[VR_TRACE_SLOTS] = {0}, left[VR_TRACE_SLOTS] = {0};
  int64_t m[VR_MAXMONO];
  memset(out, 0, sizeof *out);
  out->peak_label = -1;
  state s = {0, {0}, 0, out, 0};
  if (!vr_trace_monomials(prog, sizes, m)) return false;
  for (size_t j = 0; j < prog->n; j++) {
    const vr_op *op = &prog->ops[j];
    int slot = vr_op_slot(op);
    int64_t x = 0;
    switch (op->kind) {
      case VR_OP_DELTA:
      case VR_OP_CONST:
        if (!vr_trace_delta(prog, j, m, &x) || !add(&s, x, op->cat, op->label)) return false;
        break;
      case VR_OP_PHASE:
        s.phase = op->label;
        break;
      case VR_OP_MARK:
        marks[op->slot & 1] = s.live;
        break;
      case VR_OP_GRAD: /* read by its BULK_BWD */
        break;
      case VR_OP_BULK_FWD: { /* two marks bracket one simulated layer */
        int mk = (int)(op->extra & 1);
        if (!vr_sub(marks[mk ^ 1], marks[mk], &x) || !vr_mul(x, op->value, &x) ||
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
        int64_t exc = 0, net = 0, rel = 0, neg = 0, g = 0;
        if (!vr_trace_grads(prog, j, m, &g) || !vr_sub(s.watch, start[slot], &exc) ||
            !vr_sub(s.live, start[slot], &net) || !vr_sub(g, net, &rel) || !vr_sub(0, rel, &neg))
          return false;
        for (int64_t i = 0; i < op->value; i++) { /* the share released, then the grads (tape.c) */
          if (!add_free(&s, exc, VR_CAT_TEMP, op->label) || !add(&s, neg, op->cat, op->label) ||
              !add(&s, g, VR_CAT_GRADS, op->label) || !vr_sub(left[slot], rel, &left[slot]))
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
