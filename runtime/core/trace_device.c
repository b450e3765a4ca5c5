/* Device programs (trace.h vr_trace_fit with blocks): the reserved bytes
 * of the caching allocator as well as the allocated ones, for
 * stdlib/compiled_parallel.lua's multi-GPU budgets (a rank's device total
 * is its reserved peak). A fitted program is ordered once for evaluation
 * (vr_device_build): each distinct tensor size listed once, runs of
 * changes of one sign folded into one. Every addition is checked. No Lua
 * here. */
#include <string.h>

#include "checked.h"
#include "trace.h"

/* The size of row c (its sign taken out: a free's bytes are minus its
 * allocation's, and so is its block), found among the program's sizes or
 * added; -1 when out of memory or past VR_MAXSIZES. */
static int64_t size_of(vr_trace *prog, const int64_t *c, int *sign) {
  int n = prog->nmono, lead = 0;
  while (lead < n && c[lead] == 0) lead++;
  *sign = lead < n && c[lead] < 0 ? -1 : 1;
  int64_t t[VR_MAXMONO];
  int nt = 0;
  for (int i = 0; i < n; i++) {
    if (c[i] == 0) continue;
    if (c[i] == INT64_MIN) return -1;
    t[nt++] = *sign * c[i];
  }
  for (size_t k = 0; k < prog->nsizes; k++) { /* a few dozen: a scan */
    const vr_size *z = &prog->sizes[k];
    if (z->n != nt) continue;
    int i = 0, at = 0;
    for (; i < n; i++) {
      if (c[i] == 0) continue;
      const vr_term *u = &prog->terms[z->first + at++];
      if (u->mono != i || u->coef != *sign * c[i]) break;
    }
    if (i == n) return (int64_t)k;
  }
  if (prog->nsizes >= VR_MAXSIZES ||
      !vr_mem_grow(&prog->mem, (void **)&prog->sizes, &prog->sizes_cap, prog->nsizes + 1,
                   sizeof *prog->sizes, 64) ||
      !vr_mem_grow(&prog->mem, (void **)&prog->terms, &prog->terms_cap, prog->nterms + (size_t)nt,
                   sizeof *prog->terms, 256))
    return -1;
  prog->sizes[prog->nsizes] = (vr_size){(int32_t)prog->nterms, nt, vr_coef_exact(t, nt, prog->round)};
  for (int i = 0, at = 0; i < n; i++)
    if (c[i] != 0) prog->terms[prog->nterms++] = (vr_term){t[at++], i};
  return (int64_t)prog->nsizes++;
}

/* A device program's DELTA and GRAD ops to the distinct sizes they name
 * (trace.h vr_size); false when out of memory or past VR_MAXSIZES. */
static bool device_sizes(vr_trace *prog) {
  for (size_t j = 0; j < prog->n; j++) {
    vr_op *op = &prog->ops[j];
    if (op->kind != VR_OP_DELTA && op->kind != VR_OP_GRAD) continue;
    int sign = 1;
    int64_t k = size_of(prog, vr_trace_row(prog, j), &sign);
    if (k < 0) return false;
    op->extra = k;
    op->extra_rounded = sign;
  }
  return true;
}

/* The sign of op j's change for every size (+1, -1), or 0: not a change,
 * or one whose sign depends on the sizes. */
static int change_sign(const vr_trace *prog, const vr_op *op, size_t j) {
  if (op->kind == VR_OP_CONST) {
    int64_t c = vr_trace_row(prog, j)[0];
    return c > 0 ? 1 : (c < 0 ? -1 : 0);
  }
  if (op->kind != VR_OP_DELTA) return 0;
  const vr_size *z = &prog->sizes[op->extra];
  for (int i = 0; i < z->n; i++)
    if (prog->terms[z->first + i].coef < 0) return 0; /* mixed: the leading term is > 0 */
  return (int)op->extra_rounded;
}

static bool is_change(const vr_op *op) { return op->kind == VR_OP_DELTA || op->kind == VR_OP_CONST; }

/* Changes looked ahead for a moment at least as high (dominated below). */
#define LOOKAHEAD 48

/* Counts of each size over a stretch of changes: cnt[size] allocations
 * less frees, `bad` the sizes whose count is below 0, or not 0 with bytes
 * whose sign depends on the sizes; touched: the sizes counted, each once
 * (listed[size]), to zero after. */
typedef struct {
  int32_t *cnt, *touched, *mixed, *listed;
  size_t nt;
  int bad;
} tally;

static bool bad_count(const tally *t, int64_t z) {
  return t->cnt[z] < 0 || (t->cnt[z] != 0 && t->mixed[z]);
}

static void count(tally *t, int64_t z, int s) {
  if (!t->listed[z]) t->listed[z] = 1, t->touched[t->nt++] = (int32_t)z;
  t->bad -= bad_count(t, z);
  t->cnt[z] += s;
  t->bad += bad_count(t, z);
}

static void clear(tally *t) {
  for (size_t i = 0; i < t->nt; i++) t->cnt[t->touched[i]] = t->listed[t->touched[i]] = 0;
  t->nt = 0;
  t->bad = 0;
}

/* Whether the counted changes (t: each size's count, allocations less
 * frees, or the reverse for dominated_before) and constants a (bytes) and
 * b (blocks) add up to >= 0 at every point although some size's count is
 * below 0: every size counted is one term of one monomial (the same for
 * all), and the counts weigh the coefficients to D >= 0. At a point the
 * monomial is mu >= 1 (every size >= 1), a size of coefficient c holds c x
 * mu bytes rounded up to the block (less than one block more; none when c
 * is a multiple of it) and its block is those bytes, or past small_max at
 * most large_round - 1 more. So the sum is at least D x mu less the
 * negative counts' slack: checked at mu = 1 and, for the reserved bytes
 * once a negative size can pass small_max, at the first mu where one can.
 * Activations of one layer shape (batch x seq times a width) freed for a
 * wider one are the usual case. */
static bool outweighed(const vr_trace *prog, const tally *t, int64_t a, int64_t b) {
  int32_t mono = -1;
  int64_t d = 0, slack = 0, nneg = 0, widest = 0, r1 = prog->round > 1 ? prog->round - 1 : 0;
  int64_t l1 = prog->large_round > 1 ? prog->large_round - 1 : 0;
  for (size_t i = 0; i < t->nt; i++) {
    int32_t z = t->touched[i], c = t->cnt[z];
    if (c == 0) continue;
    const vr_size *sz = &prog->sizes[z];
    if (t->mixed[z] || sz->n != 1) return false;
    const vr_term *u = &prog->terms[sz->first];
    if (mono >= 0 && u->mono != mono) return false;
    mono = u->mono;
    int64_t w = 0;
    if (!vr_mul(c, u->coef, &w) || !vr_add(d, w, &d)) return false;
    if (c < 0) {
      nneg -= c;
      if (!sz->exact && !vr_add(slack, -(int64_t)c * r1, &slack)) return false;
      if (u->coef > widest) widest = u->coef;
    }
  }
  int64_t live = 0, res = 0;
  if (d < 0 || !vr_sub(d, slack, &live) || !vr_add(live, a, &live) || live < 0 ||
      !vr_sub(d, slack, &res) || !vr_add(res, b, &res) || res < 0)
    return false;
  if (nneg == 0 || widest <= 0) return true;
  /* the first mu at which a negative size's bytes can pass small_max */
  int64_t room = prog->small_max - r1, mu = room < 0 ? 1 : room / widest + 1, x = 0;
  return vr_mul(d, mu, &x) && vr_sub(x, slack, &x) && vr_mul(nneg, l1, &res) &&
         vr_sub(x, res, &x) && vr_add(x, b, &x) && x >= 0;
}

/* Whether the moment after change k (of the stretch of changes that ends
 * before `end`) is no higher than the moment after a later allocation j,
 * for every size, in allocated and in reserved bytes: the changes in
 * (k, j] free no size more often than they allocate it (a size's bytes and
 * block are the same at each use), leave only sizes of bytes >= 0, and
 * their constants add up to >= 0. Then only j's moment need be checked
 * (j's in turn checked or no higher than a later one's). */
static bool dominated(const vr_trace *prog, size_t k, size_t end, tally *t) {
  int64_t a = 0, b = 0;
  bool found = false;
  for (size_t j = k + 1; j < end && j <= k + LOOKAHEAD && !found; j++) {
    const vr_op *op = &prog->ops[j];
    if (op->kind == VR_OP_CONST) {
      if (!vr_add(a, vr_trace_row(prog, j)[0], &a) || !vr_add(b, op->extra, &b)) break;
    } else {
      count(t, op->extra, (int)op->extra_rounded);
    }
    found = change_sign(prog, op, j) > 0 &&
            ((t->bad == 0 && a >= 0 && b >= 0) || outweighed(prog, t, a, b));
  }
  clear(t);
  return found;
}

/* Changes looked back for a moment at least as high (dominated_before). */
#define LOOKBACK 96

/* Whether the moment after change k is no higher than the moment after an
 * earlier change i of the stretch that begins at `begin`, for every size,
 * in allocated and in reserved bytes: the changes in (i, k] allocate no
 * size more often than they free it, leave only sizes of bytes >= 0, and
 * their constants add up to <= 0. i must be a moment that is checked or
 * itself so dominated (may[i]): dominance that only points back ends at a
 * checked moment, and one pointing forward (dominated) never leads to a
 * moment that points back to it. The backward layers of a pipeline stage
 * repeat one pattern whose net change frees (activations give way to
 * gradients): each layer's moments are no higher than the layer's before.
 * A stretch of changes holds no MEASURE, so the excursion a composed
 * layer's backward reads (dstate's watch) sees the same highs. */
static bool dominated_before(const vr_trace *prog, size_t begin, size_t k, const uint8_t *may,
                             tally *t) {
  int64_t a = 0, b = 0; /* the constants in (i, k], negated */
  bool found = false;
  for (size_t j = k; j > begin && j + LOOKBACK > k && !found; j--) {
    const vr_op *op = &prog->ops[j];
    if (op->kind == VR_OP_CONST) {
      if (!vr_sub(a, vr_trace_row(prog, j)[0], &a) || !vr_sub(b, op->extra, &b)) break;
    } else {
      count(t, op->extra, -(int)op->extra_rounded); /* negated: a net allocation is bad */
    }
    found = may[j - 1] && ((t->bad == 0 && a >= 0 && b >= 0) || outweighed(prog, t, a, b));
  }
  clear(t);
  return found;
}

/* Appends the group [lo, hi) of changes to the order: its constants
 * summed, its sizes with the frees of a size allocated in it cancelled
 * (the same bytes, the same block). False when out of memory or when the
 * constants overflow. */
static bool group(vr_trace *prog, size_t lo, size_t hi, tally *t) {
  vr_dop d = {1, 0, 0, 0, prog->nitems};
  bool ok = true;
  for (size_t j = lo; j < hi && ok; j++) {
    const vr_op *op = &prog->ops[j];
    if (op->kind == VR_OP_CONST)
      ok = vr_add(d.a, vr_trace_row(prog, j)[0], &d.a) && vr_add(d.b, op->extra, &d.b);
    else
      count(t, op->extra, (int)op->extra_rounded);
  }
  for (size_t i = 0; i < t->nt && ok; i++) {
    int32_t z = t->touched[i], c = t->cnt[z];
    if (c == 0) continue;
    ok = vr_mem_grow(&prog->mem, (void **)&prog->items, &prog->items_cap, prog->nitems + 2,
                     sizeof *prog->items, 256);
    if (ok) {
      prog->items[prog->nitems++] = z * 2 + (c < 0);
      prog->items[prog->nitems++] = c < 0 ? -c : c;
      d.n++;
    }
  }
  clear(t);
  ok = ok && vr_mem_grow(&prog->mem, (void **)&prog->dops, &prog->dops_cap, prog->ndops + 1,
                         sizeof *prog->dops, 256);
  if (ok) prog->dops[prog->ndops++] = d;
  return ok;
}

/* A device program's evaluation order (trace.h vr_dop): each stretch of
 * consecutive changes cut into groups that end where a moment must be
 * checked (an allocation no later moment of the stretch is sure to reach,
 * or a change whose sign depends on the sizes); any other op as it is.
 * False when out of memory or when a group's constants overflow. */
static bool device_order(vr_trace *prog) {
  size_t ns = prog->nsizes ? prog->nsizes : 1;
  int32_t *buf = (int32_t *)vr_mem_array(&prog->mem, 4 * ns, sizeof *buf);
  if (!buf) return false;
  /* may[k]: the moment after change k is checked, or no higher than one
   * that is (dominated_before) */
  uint8_t *may = (uint8_t *)vr_mem_array(&prog->mem, prog->n ? prog->n : 1, 1);
  if (!may) {
    vr_mem_free(&prog->mem, buf, 4 * ns * sizeof *buf);
    return false;
  }
  memset(may, 0, prog->n ? prog->n : 1);
  memset(buf, 0, 4 * ns * sizeof *buf);
  tally t = {buf, buf + ns, buf + 2 * ns, buf + 3 * ns, 0, 0};
  for (size_t z = 0; z < prog->nsizes; z++)
    for (int i = 0; i < prog->sizes[z].n; i++)
      t.mixed[z] |= prog->terms[prog->sizes[z].first + i].coef < 0;
  bool ok = true;
  for (size_t j = 0; j < prog->n && ok;) {
    if (!is_change(&prog->ops[j])) {
      ok = vr_mem_grow(&prog->mem, (void **)&prog->dops, &prog->dops_cap, prog->ndops + 1,
                       sizeof *prog->dops, 256);
      if (ok) prog->dops[prog->ndops++] = (vr_dop){0, 0, (int64_t)j, 0, 0};
      j++;
      continue;
    }
    size_t end = j;
    while (end < prog->n && is_change(&prog->ops[end])) end++;
    size_t lo = j;
    for (size_t k = j; k < end && ok; k++) {
      int sg = change_sign(prog, &prog->ops[k], k);
      bool check = sg == 0 || (sg > 0 && !dominated(prog, k, end, &t));
      if (check && k + 1 < end && dominated_before(prog, j, k, may, &t)) check = false, may[k] = 1;
      if (check || k + 1 == end) {
        may[k] = 1;
        ok = group(prog, lo, k + 1, &t);
        lo = k + 1;
      }
    }
    j = end;
  }
  vr_mem_free(&prog->mem, may, prog->n ? prog->n : 1);
  vr_mem_free(&prog->mem, buf, 4 * ns * sizeof *buf);
  return ok;
}

static int64_t magnitude(int64_t x) { return x == INT64_MIN ? INT64_MAX : (x < 0 ? -x : x); }

/* The bounds on a run's partial sums that vr_trace_device reads. */
static void run_bounds(vr_trace *prog) {
  prog->run_items_max = 0;
  prog->run_const_max = 0;
  prog->nslots = 1; /* the slots vr_op_slot reads: 0 at least */
  for (size_t j = 0; j < prog->n; j++) {
    const vr_op *op = &prog->ops[j];
    bool slotted = op->kind == VR_OP_BULK_FWD || op->kind == VR_OP_MEASURE ||
                   op->kind == VR_OP_BULK_BWD;
    if (slotted && vr_op_slot(op) >= prog->nslots) prog->nslots = vr_op_slot(op) + 1;
  }
  for (size_t i = 0; i < prog->ndops; i++) {
    const vr_dop *d = &prog->dops[i];
    if (!d->run) continue;
    int64_t items = 0; /* the run's sizes, each as often as it changes */
    for (int32_t k = 0; k < d->n; k++) items += prog->items[d->first + 2 * k + 1];
    if (items > prog->run_items_max) prog->run_items_max = items;
    int64_t c = magnitude(d->a) > magnitude(d->b) ? magnitude(d->a) : magnitude(d->b);
    if (c > prog->run_const_max) prog->run_const_max = c;
  }
}

bool vr_device_build(vr_trace *prog) {
  if (!device_sizes(prog) || !device_order(prog)) return false;
  run_bounds(prog);
  return true;
}

/* reserve() for x already rounded to the program's block: only a large
 * request rounds again. */
static inline bool reserve_rounded(const vr_trace *prog, int64_t x, int64_t *out) {
  if (prog->round <= 0 || (x <= prog->small_max && x >= -prog->small_max)) return *out = x, true;
  return vr_trace_block(prog, x, out);
}

/* Each distinct size's bytes (rounded to the block) and block at
 * monomials m, signed as the items name them: sv[2k] = {bytes, block} of
 * size k, sv[2k + 1] the same negated (never INT64_MIN, so negated
 * exactly); *most: the largest magnitude among them. False on overflow. */
static bool dsizes(const vr_trace *prog, const int64_t *m, int64_t (*sv)[2], int64_t *most) {
  *most = 0;
  for (size_t k = 0; k < prog->nsizes; k++) {
    const vr_size *z = &prog->sizes[k];
    const vr_term *t = prog->terms + z->first;
    int64_t x = 0, y = 0, b = 0;
    for (int i = 0; i < z->n; i++)
      if (!vr_mul(t[i].coef, m[t[i].mono], &y) || !vr_add(x, y, &x)) return false;
    if ((!z->exact && !vr_round_up(x, prog->round, &x)) || x == INT64_MIN ||
        !reserve_rounded(prog, x, &b) || b == INT64_MIN) /* negated by a free */
      return false;
    sv[2 * k][0] = x, sv[2 * k + 1][0] = -x;
    sv[2 * k][1] = b, sv[2 * k + 1][1] = -b;
    if (magnitude(x) > *most) *most = magnitude(x);
    if (magnitude(b) > *most) *most = magnitude(b);
  }
  return true;
}

/* A device program's evaluation: the allocated and the reserved bytes the
 * tape counts, each change of the one with its block in the other. */
typedef struct { /* by value, nothing through pointers: kept in registers */
  int64_t live, res, watch, rwatch, peak, rpeak;
} dstate;

static inline __attribute__((always_inline)) bool dadd(dstate *s, int64_t x, int64_t rx) {
  int64_t live = 0, res = 0;
  if (!vr_add(s->live, x, &live) || !vr_add(s->res, rx, &res)) return false;
  s->live = live;
  s->res = res;
  if (live > s->watch) s->watch = live;
  if (res > s->rwatch) s->rwatch = res;
  if (live > s->peak) s->peak = live;
  if (res > s->rpeak) s->rpeak = res;
  return true;
}

static bool dsub(dstate *s, int64_t x, int64_t rx) {
  int64_t nx = 0, nrx = 0;
  return vr_sub(0, x, &nx) && vr_sub(0, rx, &nrx) && dadd(s, nx, nrx);
}

/* The gradients of the composed layer whose BULK_BWD is op j: their bytes
 * and their blocks. */
static bool dgrads(const vr_trace *prog, size_t j, const int64_t (*sv)[2], int64_t *g,
                   int64_t *rg) {
  *g = *rg = 0;
  for (size_t k = j + 1; k < prog->n && prog->ops[k].kind == VR_OP_GRAD; k++) {
    const vr_op *op = &prog->ops[k];
    int64_t x = op->extra_rounded * sv[2 * op->extra][0],
            b = op->extra_rounded * sv[2 * op->extra][1];
    if (!vr_add(*g, x, g) || !vr_add(*rg, b, rg)) return false;
  }
  return true;
}

/* The highest of the bytes dbulk_bwd's loop passes through, n >= 1 layers
 * from `live`: each layer's moments (its excursion, after its release,
 * after its gradients) grow by d = gradients - rel a layer, so the highest
 * is the first layer's or the last's. */
static int64_t bulk_high(int64_t live, int64_t n, int64_t exc, int64_t rel, int64_t d) {
  int64_t hi = live;
  for (int k = 0; k < 2; k++) {
    int64_t at = live + (k ? n - 1 : 0) * d;
    int64_t m = at + exc > at - rel ? at + exc : at - rel;
    if (at + d > m) m = at + d;
    if (m > hi) hi = m;
  }
  return hi;
}

/* Whether every term is below 2^58 in magnitude and n below 16: then no
 * sum dbulk_bwd's loop or bulk_high makes can overflow (each is at most
 * 2^58 x 20). */
static bool bulk_small(int64_t n, const int64_t *v, int nv) {
  const int64_t LIM = INT64_C(1) << 58;
  if (n < 1 || n >= 16) return false;
  for (int i = 0; i < nv; i++)
    if (v[i] <= -LIM || v[i] >= LIM) return false;
  return true;
}

/* The composed layers' backward, as tape.c run_bulk_body does it: per
 * layer, its excursion, its share of the bulk released, its gradients. */
static bool dbulk_bwd(dstate *s, const vr_trace *prog, size_t j, const int64_t (*sv)[2],
                      int64_t start, int64_t rstart, int64_t *left, int64_t *rleft) {
  int64_t g = 0, rg = 0, exc = 0, rexc = 0, net = 0, rnet = 0, rel = 0, rrel = 0;
  if (!dgrads(prog, j, sv, &g, &rg) || !vr_sub(s->watch, start, &exc) ||
      !vr_sub(s->rwatch, rstart, &rexc) || !vr_sub(s->live, start, &net) ||
      !vr_sub(s->res, rstart, &rnet) || !vr_sub(g, net, &rel) || !vr_sub(rg, rnet, &rrel))
    return false;
  int64_t n = prog->ops[j].value, d = 0, rd = 0;
  bool diff = vr_sub(g, rel, &d) && vr_sub(rg, rrel, &rd);
  int64_t terms[] = {s->live, s->res, exc, rexc, rel, rrel, g, rg, d, rd, *left, *rleft};
  if (diff && bulk_small(n, terms, (int)(sizeof terms / sizeof terms[0]))) { /* the loop, at once */
    int64_t hi = bulk_high(s->live, n, exc, rel, d), rhi = bulk_high(s->res, n, rexc, rrel, rd);
    if (hi > s->watch) s->watch = hi;
    if (hi > s->peak) s->peak = hi;
    if (rhi > s->rwatch) s->rwatch = rhi;
    if (rhi > s->rpeak) s->rpeak = rhi;
    s->live += n * d;
    s->res += n * rd;
    *left -= n * rel;
    *rleft -= n * rrel;
    return dsub(s, *left, *rleft);
  }
  for (int64_t i = 0; i < n; i++)
    if (!dadd(s, exc, rexc) || !dsub(s, exc, rexc) || !dsub(s, rel, rrel) ||
        !dadd(s, g, rg) || !vr_sub(*left, rel, left) || !vr_sub(*rleft, rrel, rleft))
      return false;
  return dsub(s, *left, *rleft);
}

bool vr_trace_device(const vr_trace *prog, const int64_t *sizes, const int64_t *inputs,
                     vr_trace_device_result *out) {
  int64_t marks[2] = {0}, rmarks[2] = {0}, m[VR_MAXMONO];
  /* a composed layer's moments by slot: only the program's slots cleared */
  int64_t start[VR_TRACE_SLOTS], rstart[VR_TRACE_SLOTS];
  int64_t left[VR_TRACE_SLOTS], rleft[VR_TRACE_SLOTS];
  memset(out, 0, sizeof *out);
  int64_t sv[2 * VR_MAXSIZES][2]; /* each distinct size's bytes and block, signed (dsizes) */
  int64_t most = 0;               /* the largest magnitude among them */
  dstate s = {0, 0, 0, 0, 0, 0};
  if (!prog->device) return false;
  size_t nslots = (size_t)prog->nslots * sizeof start[0]; /* (vr_device_build's run_bounds) */
  memset(start, 0, nslots), memset(rstart, 0, nslots);
  memset(left, 0, nslots), memset(rleft, 0, nslots);
  for (int v = 0; v < prog->grid.nvars; v++)
    if (sizes[v] < 1) return false; /* every monomial >= 1: outweighed's bound */
  if (!vr_trace_monomials(prog, sizes, m) || !dsizes(prog, m, sv, &most)) return false;
  /* a run's partial sums stay within its constant's magnitude plus its items
   * times the largest size's: below INT64_MAX, no addition of a run can
   * overflow, and none is checked */
  bool unchecked = prog->run_items_max == 0 ||
                   most <= (INT64_MAX - prog->run_const_max) / prog->run_items_max;
  for (size_t dj = 0; dj < prog->ndops; dj++) {
    const vr_dop *d = &prog->dops[dj];
    int64_t x = 0, rx = 0;
    if (d->run) { /* changes between checked moments: one that can be a peak, its end */
      x = d->a;
      rx = d->b;
      const int32_t *it = prog->items + d->first;
      if (unchecked) {
        for (int32_t k = 0; k < d->n; k++, it += 2) {
          const int64_t *z = sv[it[0]];
          x += it[1] * z[0];
          rx += it[1] * z[1];
        }
        if (!dadd(&s, x, rx)) return false;
        continue;
      }
      unsigned over = 0; /* any addition out of range, one branch per run */
      for (int32_t k = 0; k < d->n; k++, it += 2)
        for (int32_t r = 0; r < it[1]; r++) { /* one at a time: the same partial sums */
          over |= (unsigned)!vr_add(x, sv[it[0]][0], &x);
          over |= (unsigned)!vr_add(rx, sv[it[0]][1], &rx);
        }
      if (over || !dadd(&s, x, rx)) return false;
      continue;
    }
    size_t j = (size_t)d->a;
    const vr_op *op = &prog->ops[j];
    int slot = vr_op_slot(op); /* a composed layer's (BULK_*, MEASURE) */
    switch (op->kind) {
      case VR_OP_CONST: /* rounded when fitted; extra: its blocks, summed */
        if (!dadd(&s, vr_trace_row(prog, j)[0], op->extra)) return false;
        break;
      case VR_OP_DELTA: /* (a size's sign, +1 or -1, cannot overflow) */
        if (!dadd(&s, op->extra_rounded * sv[2 * op->extra][0],
                  op->extra_rounded * sv[2 * op->extra][1]))
          return false;
        break;
      case VR_OP_INPUT: /* the tape's own bytes: not rounded, reserved as a block */
        if (op->slot < 0 || op->slot >= prog->ninputs || !vr_mul(op->value, inputs[op->slot], &x) ||
            !vr_trace_block(prog, x, &rx) || !dadd(&s, x, rx))
          return false;
        break;
      case VR_OP_PHASE:
      case VR_OP_GRAD: /* read by its BULK_BWD */
        break;
      case VR_OP_MARK:
        marks[op->slot & 1] = s.live;
        rmarks[op->slot & 1] = s.res;
        break;
      case VR_OP_BULK_FWD: { /* two marks bracket one simulated layer */
        int mk = (int)(op->extra & 1);
        if (!vr_sub(marks[mk ^ 1], marks[mk], &x) || !vr_mul(x, op->value, &x) ||
            !vr_sub(rmarks[mk ^ 1], rmarks[mk], &rx) || !vr_mul(rx < 0 ? 0 : rx, op->value, &rx) ||
            !dadd(&s, x, rx))
          return false;
        left[slot] = x;
        rleft[slot] = rx;
        break;
      }
      case VR_OP_MEASURE:
        start[slot] = s.watch = s.live;
        rstart[slot] = s.rwatch = s.res;
        break;
      case VR_OP_BULK_BWD:
        if (!dbulk_bwd(&s, prog, j, sv, start[slot], rstart[slot], &left[slot], &rleft[slot]))
          return false;
        break;
      default:
        return false;
    }
  }
  out->live = s.live;
  out->reserved = s.res;
  out->peak = s.peak;
  out->peak_reserved = s.rpeak;
  return true;
}
