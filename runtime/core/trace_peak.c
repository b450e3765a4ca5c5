/* The peak-only evaluation of a fitted program (trace.h, vr_trace_peak):
 * what a sweep or a search asks millions of times. It keeps no categories,
 * phases or labels (vr_trace_eval has them), and its plan folds further
 * than the program may:
 *   - the peak is the largest live total after any op; checking a point
 *     that cannot be a maximum changes nothing, so the plan checks after
 *     every one of its ops, and consecutive changes (of any categories)
 *     are one plan op while each point left unchecked is below a checked
 *     one for every size (take());
 *   - a size whose block rounding is exact for every size joins its
 *     neighbours' polynomial; one that must be rounded is kept as its own
 *     term list, rounded at evaluation as vr_trace_eval does.
 *   - a block of ops repeated back to back is evaluated once (repeats()).
 * The plan adds without overflow checks, after proving once per
 * evaluation that none can happen: the sum over the program's ops of
 * |coef| x monomial (plus one block per rounded size) bounds every delta
 * and every partial sum; the few composed-layer ops are checked. Where the
 * proof fails the checked evaluator answers, so both give the same bytes
 * or the same overflow. */
#include <string.h>

#include "checked.h"
#include "trace.h"

enum {
  PK_ONE,    /* x = c * m[mono], rounded when rnd (a constant: mono 0) -- most ops */
  PK_POLY,   /* x = sum of n exact terms from c + round(sum of the nround terms after) */
  PK_REPEAT, /* the n ops that follow, c times over (identical layers not composed) */
  PK_MARK, PK_FWD, PK_MEASURE, PK_BWD /* the program's op c */
};

/* 16 bytes. PK_BWD: rnd 1 when its layer's gradients do not depend on the
 * sizes, their bytes then gvals[n]. PK_POLY: poly, its polynomial's index
 * among the plan's distinct ones (vr_plan.poly_op). */
typedef struct {
  uint8_t kind, mono, rnd, nround;
  uint16_t n, pad;
  int32_t poly;
  int64_t c;
} pk_op;

typedef struct {
  int64_t coef;
  int32_t mono, pad;
} pk_term;

struct vr_plan {
  pk_op *ops;
  size_t n, cap;
  pk_term *terms;
  size_t nterms, tcap;
  int64_t abs[VR_MAXMONO]; /* sum of |coef| over the program's sizes; INT64_MAX: too large */
  int64_t rounded;           /* sizes rounded at evaluation */
  int64_t *gvals;            /* constant gradients of composed layers, rounded */
  size_t ng, gcap;
  /* the distinct PK_POLY polynomials, each by the first op that has it: a
   * step changes live bytes by a few dozen polynomials hundreds of times
   * over (a 3-size VLM program: 278 ops, 849 terms, 109 distinct), so an
   * evaluation computes each once; npolys 0: each op computes its own */
  int32_t *poly_op;
  size_t npolys, pcap;
};

#define PK_POLYS 1024 /* distinct polynomials an evaluation keeps (on its stack) */

/* Every live total and delta stays within this when the proof holds: two
 * of them add without overflow. */
#define SAFE (INT64_C(1) << 61)

/* The op being built. */
typedef struct {
  bool open, has_round;
  int n;                   /* the program's monomials */
  int64_t exact[VR_MAXMONO], round[VR_MAXMONO];
} building;

static bool push_op(vr_plan *p, const vr_mem *mem, pk_op op) {
  if (!vr_mem_grow(mem, (void **)&p->ops, &p->cap, p->n + 1, sizeof *p->ops, 64)) return false;
  p->ops[p->n++] = op;
  return true;
}

static bool push_terms(vr_plan *p, const vr_mem *mem, const int64_t *c, int nmono, int *n) {
  *n = 0;
  for (int i = 0; i < nmono; i++) {
    if (c[i] == 0) continue;
    if (!vr_mem_grow(mem, (void **)&p->terms, &p->tcap, p->nterms + 1, sizeof *p->terms, 64))
      return false;
    p->terms[p->nterms++] = (pk_term){c[i], i, 0};
    ++*n;
  }
  return true;
}

/* Emits the op being built, in its cheapest form. */
static bool close_op(vr_plan *p, const vr_mem *mem, building *b) {
  if (!b->open) return true;
  b->open = false;
  int ne = 0, nr = 0, last = 0;
  for (int i = 0; i < b->n; i++) {
    if (b->exact[i] != 0) ne++, last = i;
    if (b->round[i] != 0) nr++;
  }
  if (!b->has_round || nr == 0) {
    if (ne == 0) return true; /* nothing changes */
    if (ne == 1) return push_op(p, mem, (pk_op){PK_ONE, (uint8_t)last, 0, 0, 0, 0, 0, b->exact[last]});
  }
  if (ne == 0 && nr == 1)
    for (int i = 0; i < b->n; i++)
      if (b->round[i] != 0)
        return push_op(p, mem, (pk_op){PK_ONE, (uint8_t)i, 1, 0, 0, 0, 0, b->round[i]});
  int64_t at = (int64_t)p->nterms;
  int n1 = 0, n2 = 0;
  if (!push_terms(p, mem, b->exact, b->n, &n1)) return false;
  if (b->has_round && !push_terms(p, mem, b->round, b->n, &n2)) return false;
  return push_op(p, mem, (pk_op){PK_POLY, 0, 0, (uint8_t)n2, (uint16_t)n1, 0, 0, at});
}

/* c += d term by term; false (c unchanged) on overflow */
static bool add_into(int64_t *c, const int64_t *d, int n) {
  int64_t s[VR_MAXMONO];
  for (int i = 0; i < n; i++)
    if (!vr_add(c[i], d[i], &s[i])) return false;
  memcpy(c, s, (size_t)n * sizeof *s);
  return true;
}

/* One size change into the op being built, or into a new one. */
static bool nonneg(const int64_t *c, int n) {
  for (int i = 0; i < n; i++)
    if (c[i] < 0) return false;
  return true;
}

static bool nonpos(const int64_t *c, int n) {
  for (int i = 0; i < n; i++)
    if (c[i] > 0) return false;
  return true;
}

/* One size change c into the op being built, or into a new one. The point
 * before c (the end of the op so far) needs no check when c never lowers
 * the live bytes (the point after it is as high), or when the op so far
 * never raised them (the last checked point is as high); the points it
 * already leaves unchecked are each below a later or an earlier checked
 * one, so the peak over checked points is the peak. Sizes are >= 0, so a
 * polynomial with no negative coefficient is >= 0, rounded or not. */
static bool take(vr_plan *p, const vr_mem *mem, building *b, const int64_t *c, bool exact) {
  int n = b->n;
  bool fits = b->open && (exact || !b->has_round) &&
              (nonneg(c, n) || (nonpos(b->exact, n) && nonpos(b->round, n)));
  if (fits && !add_into(exact ? b->exact : b->round, c, n)) fits = false;
  if (!fits) {
    if (!close_op(p, mem, b)) return false;
    memset(b, 0, sizeof *b);
    b->n = n;
    b->open = true;
    memcpy(exact ? b->exact : b->round, c, (size_t)n * sizeof *c);
  }
  b->has_round |= !exact;
  return true;
}

/* |a| + |b| saturating at INT64_MAX */
static int64_t sat_abs_add(int64_t a, int64_t b) {
  int64_t s = 0;
  if (b == INT64_MIN || !vr_add(a, b < 0 ? -b : b, &s)) return INT64_MAX;
  return s;
}

/* Whether plan ops a and b change live bytes alike for every size, from
 * the same state: the same polynomial, or the same composed op (a layer's
 * gradients the same constant). */
static bool same_op(const vr_trace *prog, const vr_plan *p, const pk_op *a, const pk_op *b) {
  if (a->kind != b->kind) return false;
  if (a->kind == PK_ONE) return a->mono == b->mono && a->rnd == b->rnd && a->c == b->c;
  if (a->kind == PK_POLY) {
    if (a->n != b->n || a->nround != b->nround) return false;
    for (int i = 0; i < a->n + a->nround; i++) {
      const pk_term *x = &p->terms[a->c + i], *y = &p->terms[b->c + i];
      if (x->coef != y->coef || x->mono != y->mono) return false;
    }
    return true;
  }
  const vr_op *x = &prog->ops[a->c], *y = &prog->ops[b->c];
  if (x->kind != y->kind || x->cat != y->cat || x->slot != y->slot || x->value != y->value ||
      x->extra != y->extra)
    return false;
  return x->kind != VR_OP_BULK_BWD ||
         (a->rnd && b->rnd && p->gvals[a->n] == p->gvals[b->n]);
}

static bool same_block(const vr_trace *prog, const vr_plan *p, size_t a, size_t b, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (!same_op(prog, p, &p->ops[a + i], &p->ops[b + i])) return false;
  return true;
}

/* Whether the composed ops of block [i, i + len) read only what the block
 * wrote before them (its marks, its layers' measurements): then every
 * repetition does the same relative to where it starts. *composed: it has
 * some. */
static bool contained(const vr_trace *prog, const vr_plan *p, size_t i, size_t len,
                      bool *has) {
  bool mark[2] = {false, false}, left[VR_TRACE_SLOTS] = {false},
       start[VR_TRACE_SLOTS] = {false};
  *has = false;
  for (size_t k = i; k < i + len; k++) {
    if (p->ops[k].kind <= PK_POLY) continue;
    const vr_op *op = &prog->ops[p->ops[k].c];
    int slot = vr_op_slot(op);
    *has = true;
    switch (op->kind) {
      case VR_OP_MARK: mark[op->slot & 1] = true; break;
      case VR_OP_BULK_FWD:
        if (!mark[0] || !mark[1]) return false;
        left[slot] = true;
        break;
      case VR_OP_MEASURE: start[slot] = true; break;
      case VR_OP_BULK_BWD:
        if (!start[slot] || !left[slot]) return false;
        break;
      default: return false;
    }
  }
  return true;
}

#define REPEAT_MAX_LEN 4096 /* ops in a repeated block */
#define REPEAT_TRIES 8      /* block lengths tried from each op */

/* Runs of a block of ops repeated back to back (a model's identical layers
 * where they are not composed: every-n-th checkpointing; micro-batches)
 * become one PK_REPEAT and the block once: each repetition does the same
 * from a start its net change higher, so the highest point of all is in
 * the first or the last (a block with composed ops is run as both; rnd 1).
 * Greedy from the first op, the length that saves most among the next few
 * ops like it. */
static bool repeats(const vr_trace *prog, vr_plan *p, const vr_mem *mem) {
  size_t n = p->n, w = 0;
  if (n < 4) return true;
  pk_op *out = (pk_op *)vr_mem_array(mem, n, sizeof *out);
  if (!out) return false;
  for (size_t i = 0; i < n;) {
    size_t best_len = 0, best_r = 0, tries = 0;
    bool best_has = false;
    for (size_t j = i + 1; j < n && j - i <= REPEAT_MAX_LEN && tries < REPEAT_TRIES; j++) {
      if (!same_op(prog, p, &p->ops[i], &p->ops[j])) continue;
      tries++;
      size_t len = j - i, r = 1;
      bool has = false;
      while (i + (r + 1) * len <= n && same_block(prog, p, i, i + r * len, len)) r++;
      if (r < 2 || len > UINT16_MAX || !contained(prog, p, i, len, &has)) continue;
      /* ops saved: a block with composed ops runs twice */
      size_t saved = (r - (has ? 2 : 1)) * len, best = best_r ? (best_r - (best_has ? 2 : 1)) * best_len : 1;
      if (saved > best) best_len = len, best_r = r, best_has = has;
    }
    if (!best_r) {
      out[w++] = p->ops[i++];
      continue;
    }
    out[w++] = (pk_op){PK_REPEAT, 0, best_has, 0, (uint16_t)best_len, 0, 0, (int64_t)best_r};
    memcpy(out + w, p->ops + i, best_len * sizeof *out);
    w += best_len;
    i += best_r * best_len;
  }
  memcpy(p->ops, out, w * sizeof *out); /* w <= n: a repeat saves at least one op */
  vr_mem_free(mem, out, n * sizeof *out);
  p->n = w;
  return true;
}

/* A composed layer's gradients, when no size changes them: their bytes
 * once (po->rnd 1, gvals[po->n]); false when out of memory. */
static bool constant_grads(const vr_trace *prog, vr_plan *p, size_t j, pk_op *po) {
  int64_t m[VR_MAXMONO] = {1}, g = 0;
  for (size_t k = j + 1; k < prog->n && prog->ops[k].kind == VR_OP_GRAD; k++)
    for (int i = 1; i < prog->nmono; i++)
      if (vr_trace_row(prog, k)[i] != 0) return true; /* evaluated each time */
  if (!vr_trace_grads(prog, j, m, &g) || p->ng >= UINT16_MAX) return true;
  if (!vr_mem_grow(&prog->mem, (void **)&p->gvals, &p->gcap, p->ng + 1, sizeof *p->gvals, 8))
    return false;
  p->gvals[p->ng] = g;
  po->rnd = 1;
  po->n = (uint16_t)p->ng++;
  return true;
}

void vr_plan_free(vr_plan *p, const vr_mem *mem) {
  if (!p) return;
  vr_mem_free(mem, p->poly_op, p->pcap * sizeof *p->poly_op);
  vr_mem_free(mem, p->gvals, p->gcap * sizeof *p->gvals);
  vr_mem_free(mem, p->ops, p->cap * sizeof *p->ops);
  vr_mem_free(mem, p->terms, p->tcap * sizeof *p->terms);
  vr_mem_free(mem, p, sizeof *p);
}

/* A PK_POLY's polynomial hashed (its terms, in order), for distinct_polys. */
static uint64_t poly_hash(const vr_plan *p, const pk_op *op) {
  uint64_t h = 1469598103934665603u ^ ((uint64_t)op->n << 8 | op->nround);
  for (int i = 0; i < op->n + op->nround; i++) {
    const pk_term *t = &p->terms[op->c + i];
    h = (h ^ (uint64_t)t->coef) * 1099511628211u;
    h = (h ^ (uint64_t)t->mono) * 1099511628211u;
  }
  return h ^ (h >> 29);
}

/* Numbers the plan's distinct PK_POLY polynomials (same_op) into op->poly
 * and poly_op; more than PK_POLYS of them: none numbered (npolys 0), each
 * op computes its own. False when out of memory. */
static bool distinct_polys(const vr_trace *prog, vr_plan *p, const vr_mem *mem) {
  size_t size = 64;
  while (size < 2 * p->n) size *= 2;
  int32_t *slot = (int32_t *)vr_mem_array(mem, size, sizeof *slot);
  if (!slot) return false;
  for (size_t i = 0; i < size; i++) slot[i] = -1;
  bool ok = true;
  p->npolys = 0;
  for (size_t i = 0; i < p->n && ok; i++) {
    pk_op *op = &p->ops[i];
    if (op->kind != PK_POLY) continue;
    size_t at = (size_t)poly_hash(p, op) & (size - 1);
    while (slot[at] >= 0 && !same_op(prog, p, &p->ops[slot[at]], op)) at = (at + 1) & (size - 1);
    if (slot[at] >= 0) {
      op->poly = p->ops[slot[at]].poly;
      continue;
    }
    if (p->npolys == PK_POLYS) { /* too many to keep: each op its own */
      p->npolys = 0;
      break;
    }
    ok = vr_mem_grow(mem, (void **)&p->poly_op, &p->pcap, p->npolys + 1, sizeof *p->poly_op, 64);
    if (ok) {
      slot[at] = (int32_t)i;
      op->poly = (int32_t)p->npolys;
      p->poly_op[p->npolys++] = (int32_t)i;
    }
  }
  vr_mem_free(mem, slot, size * sizeof *slot);
  return ok;
}

vr_plan *vr_plan_build(const vr_trace *prog) {
  const vr_mem *mem = &prog->mem;
  vr_plan *p = (vr_plan *)vr_mem_array(mem, 1, sizeof *p);
  if (!p) return NULL;
  memset(p, 0, sizeof *p);
  building b;
  int n = prog->nmono;
  memset(&b, 0, sizeof b);
  b.n = n;
  for (size_t j = 0; j < prog->n; j++) {
    const vr_op *op = &prog->ops[j];
    const int64_t *c = vr_trace_row(prog, j);
    bool ok = true;
    switch (op->kind) {
      case VR_OP_PHASE:
      case VR_OP_GRAD: /* read by its BULK_BWD */
        break;
      case VR_OP_CONST:
      case VR_OP_DELTA: {
        bool exact = op->kind == VR_OP_CONST || vr_coef_exact(c, n, prog->round);
        for (int i = 0; i < n; i++) p->abs[i] = sat_abs_add(p->abs[i], c[i]);
        if (op->kind == VR_OP_DELTA) p->rounded++;
        ok = take(p, mem, &b, c, exact);
        break;
      }
      default: {
        int kind = op->kind == VR_OP_MARK ? PK_MARK : op->kind == VR_OP_BULK_FWD ? PK_FWD
                   : op->kind == VR_OP_MEASURE ? PK_MEASURE : op->kind == VR_OP_BULK_BWD ? PK_BWD
                   : -1;
        pk_op po = {(uint8_t)kind, 0, 0, 0, 0, 0, 0, (int64_t)j};
        if (kind < 0) ok = false; /* a program holds no other kinds */
        else if (kind == PK_BWD) ok = constant_grads(prog, p, j, &po);
        if (ok) ok = close_op(p, mem, &b) && push_op(p, mem, po);
        memset(&b, 0, sizeof b);
        b.n = n;
      }
    }
    if (!ok) {
      vr_plan_free(p, mem);
      return NULL;
    }
  }
  if (!close_op(p, mem, &b) || !repeats(prog, p, mem) || !distinct_polys(prog, p, mem)) {
    vr_plan_free(p, mem);
    return NULL;
  }
  return p;
}

size_t vr_plan_len(const vr_plan *p) { return p ? p->n : 0; }


typedef struct {
  int64_t live, peak, before; /* peak: since the last MEASURE (vr_trace_eval's watch);
                                 before: the largest until then */
  int64_t flow;               /* |changes| of the composed ops, for the proof */
  int64_t marks[2], start[VR_TRACE_SLOTS], left[VR_TRACE_SLOTS];
} pk_state;

static inline void seen(pk_state *s) {
  if (s->live > s->peak) s->peak = s->live;
}

/* live += x for a composed op's change, checked, its size counted in flow */
static bool step(pk_state *s, int64_t x) {
  if (x == INT64_MIN || !vr_add(s->live, x, &s->live) || !vr_add(s->flow, x < 0 ? -x : x, &s->flow))
    return false;
  seen(s);
  return true;
}

static int64_t max3(int64_t a, int64_t b, int64_t c) {
  int64_t m = a > b ? a : b;
  return m > c ? m : c;
}

/* The composed ops, as vr_trace_eval runs them; a layer's n backward
 * iterations in closed form: each moves live by the same net amount, so
 * the highest point is in the first or the last. */
static bool composed(const vr_trace *prog, const pk_op *po, const int64_t *m, pk_state *s) {
  size_t j = (size_t)po->c;
  const vr_op *op = &prog->ops[j];
  int slot = vr_op_slot(op);
  int64_t x = 0;
  switch (op->kind) {
    case VR_OP_MARK: s->marks[op->slot & 1] = s->live; return true;
    case VR_OP_MEASURE:
      s->start[slot] = s->live;
      if (s->peak > s->before) s->before = s->peak;
      s->peak = s->live;
      return true;
    case VR_OP_BULK_FWD: {
      int mk = (int)(op->extra & 1);
      if (!vr_sub(s->marks[mk ^ 1], s->marks[mk], &x) || !vr_mul(x, op->value, &x) || !step(s, x))
        return false;
      s->left[slot] = x;
      return true;
    }
    case VR_OP_BULK_BWD: {
      int64_t exc = 0, net = 0, rel = 0, n = op->value, g = 0;
      if (po->rnd) g = prog->plan->gvals[po->n];
      else if (!vr_trace_grads(prog, j, m, &g)) return false;
      if (!vr_sub(s->peak, s->start[slot], &exc) || !vr_sub(s->live, s->start[slot], &net) ||
          !vr_sub(g, net, &rel))
        return false;
      if (n > 0) {
        int64_t last = 0, hi = 0, top = 0, moved = 0, f = 0;
        /* the first and the last iteration's highest points */
        if (!vr_mul(net, n - 1, &last) || !vr_add(s->live, last, &last)) return false;
        hi = last > s->live ? last : s->live;
        /* an iteration releases its share before making its gradients
         * (tape.c run_bulk_body): it rises to exc, ends at net */
        if (!vr_add(hi, max3(exc, 0, net), &top)) return false;
        if (top > s->peak) s->peak = top;
        /* flow: n x (2 |exc| + |g| + |rel|) */
        if (exc == INT64_MIN || g == INT64_MIN || rel == INT64_MIN) return false;
        if (!vr_add(exc < 0 ? -exc : exc, exc < 0 ? -exc : exc, &f) ||
            !vr_add(f, g < 0 ? -g : g, &f) || !vr_add(f, rel < 0 ? -rel : rel, &f) ||
            !vr_mul(f, n, &f) || !vr_add(s->flow, f, &s->flow))
          return false;
        if (!vr_mul(net, n, &moved) || !vr_add(s->live, moved, &s->live)) return false;
        if (!vr_mul(rel, n, &moved) || !vr_sub(s->left[slot], moved, &s->left[slot])) return false;
      }
      return vr_sub(0, s->left[slot], &x) && step(s, x);
    }
    default: return false;
  }
}

/* The proof's bound: sum over monomials of abs x m, plus a block per
 * rounded size; false when it is not below SAFE. */
static bool bounded(const vr_plan *p, const int64_t *m, int nmono, int64_t round) {
  int64_t sum = 0, t = 0;
  for (int i = 0; i < nmono; i++)
    if (!vr_mul(p->abs[i], m[i], &t) || !vr_add(sum, t, &sum)) return false;
  if (round > 0 && (!vr_mul(p->rounded, round, &t) || !vr_add(sum, t, &sum))) return false;
  return sum < SAFE;
}

/* round up away from zero; |x| < SAFE, so no overflow */
static inline int64_t round_to(int64_t x, int64_t r) {
  if (r <= 0) return x;
  int64_t q = x % r;
  if (q == 0) return x;
  return x < 0 ? x - (r + q) : x + (r - q);
}

/* the same for a power-of-two block (mask = block - 1; 0: none), without
 * a division or a branch */
static inline int64_t round_mask(int64_t x, int64_t mask) {
  int64_t sg = -(int64_t)(x < 0), a = (x ^ sg) - sg;
  a = (a + mask) & ~mask;
  return (a ^ sg) - sg;
}

/* A PK_POLY's change at monomials m. */
static inline int64_t poly_change(const pk_op *op, const pk_term *terms, const int64_t *m,
                                  int64_t round, int64_t mask, bool pow2) {
  int64_t x = 0, y = 0;
  const pk_term *t = terms + op->c;
  for (int i = 0; i < op->n; i++) x += t[i].coef * m[t[i].mono];
  for (int i = op->n; i < op->n + op->nround; i++) y += t[i].coef * m[t[i].mono];
  return x + (pow2 ? round_mask(y, mask) : round_to(y, round));
}

/* A PK_ONE's or PK_POLY's change at monomials m; pv: the distinct
 * polynomials' values (vr_plan.poly_op), or NULL. */
static inline int64_t change(const pk_op *op, const pk_term *terms, const int64_t *m,
                             int64_t round, int64_t mask, bool pow2, const int64_t *pv) {
  if (op->kind == PK_ONE) {
    int64_t x = op->c * m[op->mono];
    int64_t r = pow2 ? round_mask(x, mask) : round_to(x, round);
    return op->rnd ? r : x;
  }
  return pv ? pv[op->poly] : poly_change(op, terms, m, round, mask, pow2);
}

/* Plan ops [from, to) from state s; pow2: the block is a power of two (or
 * none). Most ops are one term, evaluated without a branch on their kind.
 * false: the proof's margin would not hold. */
static bool span(const vr_trace *prog, const int64_t *m, size_t from, size_t to, pk_state *s,
                 bool pow2, const int64_t *pv) {
  const vr_plan *p = prog->plan;
  const pk_term *terms = p->terms;
  int64_t round = prog->round, mask = round > 0 ? round - 1 : 0;
  int64_t live = s->live, top = s->peak; /* in registers */
  for (size_t j = from; j < to; j++) {
    const pk_op *op = &p->ops[j];
    if (op->kind <= PK_POLY) {
      live += change(op, terms, m, round, mask, pow2, pv);
      top = live > top ? live : top;
      continue;
    }
    s->live = live;
    s->peak = top;
    if (op->kind == PK_REPEAT && !op->rnd) {
      /* the block once from here; repetition i is i x its net change higher */
      int64_t start = live, high = live;
      for (size_t k = j + 1; k <= j + op->n; k++) {
        live += change(&p->ops[k], terms, m, round, mask, pow2, pv);
        high = live > high ? live : high;
      }
      int64_t net = live - start;
      if (net > 0) high += (op->c - 1) * net;
      top = high > top ? high : top;
      live = start + op->c * net;
      j += op->n;
      continue;
    }
    if (op->kind == PK_REPEAT) {
      /* the first repetition, then the last: its state is the first's
       * moved by (c - 1) x the net change (what the block reads it wrote) */
      int64_t start = live, flow = s->flow, shift = 0, more = 0;
      if (!span(prog, m, j + 1, j + 1 + op->n, s, pow2, pv)) return false;
      if (!vr_mul(s->live - start, op->c - 2, &shift) || !vr_add(s->live, shift, &s->live) ||
          !vr_mul(s->flow - flow, op->c - 2, &more) || !vr_add(s->flow, more, &s->flow) ||
          s->flow >= SAFE || !span(prog, m, j + 1, j + 1 + op->n, s, pow2, pv))
        return false;
      j += op->n;
    } else if (!composed(prog, op, m, s) || s->flow >= SAFE) {
      return false; /* what the composed ops moved keeps the proof's margin */
    }
    live = s->live;
    top = s->peak;
  }
  s->live = live;
  s->peak = top;
  return true;
}

static inline bool run(const vr_trace *prog, const int64_t *m, int64_t *peak, bool pow2) {
  const vr_plan *p = prog->plan;
  int64_t pv[PK_POLYS], round = prog->round, mask = round > 0 ? round - 1 : 0;
  for (size_t k = 0; k < p->npolys; k++)
    pv[k] = poly_change(&p->ops[p->poly_op[k]], p->terms, m, round, mask, pow2);
  pk_state s;
  s.live = s.peak = s.before = s.flow = 0;
  if (!span(prog, m, 0, p->n, &s, pow2, p->npolys ? pv : NULL)) return false;
  *peak = s.peak > s.before ? s.peak : s.before;
  return true;
}

/* The fast path; false: the proof did not hold (the caller evaluates checked). */
static bool fast(const vr_trace *prog, const int64_t *m, int64_t *peak) {
  int64_t round = prog->round;
  if (!bounded(prog->plan, m, prog->nmono, round)) return false;
  if (round <= 0 || (round & (round - 1)) == 0) return run(prog, m, peak, true);
  return run(prog, m, peak, false);
}

bool vr_trace_peak(const vr_trace *prog, const int64_t *sizes, int64_t *peak) {
  int64_t m[VR_MAXMONO];
  bool natural = true; /* the plan's signs hold for sizes >= 0 */
  for (int v = 0; v < prog->grid.nvars; v++) natural = natural && sizes[v] >= 0;
  if (natural && prog->plan && vr_trace_monomials(prog, sizes, m) && fast(prog, m, peak))
    return true;
  vr_trace_result r;
  if (!vr_trace_eval(prog, sizes, &r)) return false;
  *peak = r.peak;
  return true;
}
