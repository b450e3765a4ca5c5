/* Compiled estimates: a tape run in trace mode records its accounting as a
 * flat program (every live-bytes change, phase, and the composed layers'
 * measurements). Traces of the same run at a grid of probes of a few
 * sizes (batch, seq, and what the caller makes symbolic: a LoRA rank, an
 * image's tokens) have the same shape; each change is then an integer
 * polynomial in those sizes, of a degree per size (batch 1, seq 2:
 * activations, logits, attention), and the program re-evaluates a step's
 * peak for any sizes in C, without Lua. No Lua here. */
#ifndef VRAM_TRACE_H
#define VRAM_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checked.h"
#include "mem.h"
#include "tape.h" /* the categories, vr_cat */

enum {
  VR_OP_DELTA, VR_OP_PHASE, VR_OP_MARK, VR_OP_BULK_FWD, VR_OP_MEASURE, VR_OP_BULK_BWD,
  VR_OP_CONST, /* a fitted DELTA that does not depend on the sizes, already rounded */
  VR_OP_GRAD,  /* traces only: after a BULK_BWD, one per layer parameter (value: its
                  gradient's bytes), so a program rounds them to its own block */
  VR_OP_INPUT  /* value x input `slot`'s bytes, given at evaluation (an allocation when
                  value > 0, a free when < 0): bytes no polynomial gives, such as a
                  pipeline stage's in-flight micro-batches, a sum of rounded tensors that
                  another program measures. Device programs only (vr_trace_device). */
};

#define VR_MAXINPUTS 4 /* a device program's inputs */

/* vr_op's coef: unused since programs keep their coefficients in their own
 * table (coefs, any number of sizes); the tape's initializers still name it. */
#define VR_MONOMIALS 6
#define VR_MAXVARS 4  /* sizes a program is a polynomial in */
#define VR_MAXDEG 4   /* highest degree in one size */
#define VR_MAXMONO 64 /* monomials: the product of (degree + 1) over the sizes */

/* A program's sizes: size v is probed at base[v], base[v] + 1, ...,
 * base[v] + degree[v]; degree 0 holds it at base[v] (the program answers
 * only there: batch 1, where the op structure differs). */
typedef struct {
  int32_t nvars;
  int32_t degree[VR_MAXVARS];
  int64_t base[VR_MAXVARS];
} vr_grid;

typedef struct {
  int32_t kind, cat, label, slot; /* slot: mark (MARK) or bulk (BULK_*, MEASURE) index */
  int64_t value;                  /* recorded bytes (DELTA) or iterations (BULK_*) */
  int64_t extra, extra_rounded;   /* BULK_FWD: first of its two marks; BULK_BWD: gradient
                                     bytes per layer (raw; in a program also rounded to
                                     the program's block) */
  int64_t coef[VR_MONOMIALS];     /* unused (above) */
} vr_op;

/* A program's composed-layer slots (BULK_*, MEASURE: the tape's bulk
 * index) are below this; its MARK slots are 0 and 1 (a BULK_FWD reads the
 * two marks recorded just before it: extra, the first one's, and extra ^ 1). */
#define VR_TRACE_SLOTS 64

/* A composed layer's slot of op (BULK_*, MEASURE), as every evaluator
 * reads it: out of range, slot 0. */
static inline int vr_op_slot(const vr_op *op) {
  return op->slot >= 0 && op->slot < VR_TRACE_SLOTS ? op->slot : 0;
}

typedef struct vr_plan vr_plan; /* a program's peak-only evaluation (trace_peak.c) */

/* A device program's term: coef x monomial `mono`. */
typedef struct {
  int64_t coef, mono;
} vr_term;

/* A device program's distinct tensor sizes: a step allocates and frees a
 * few dozen sizes thousands of times, so vr_trace_device evaluates each
 * once (terms [first, first + n), exact when every coefficient is a
 * multiple of the block) and its DELTA and GRAD ops name one (extra: the
 * size, extra_rounded: +1 or -1, an allocation or a free). */
typedef struct {
  int32_t first, n;
  bool exact;
} vr_size;

#define VR_MAXSIZES 2048 /* distinct sizes of a device program */

/* A device program's evaluation order: its ops, with each run of
 * consecutive changes that ends at a moment to check folded into one, its
 * constant bytes and blocks summed (a, b) and its sizes listed (items
 * [first, first + 2n): n pairs of a size's index x 2, + 1 for a free, and
 * how many times it changes so: a layer's gradients are a few sizes many
 * times over). Every other
 * moment of a run is no higher than a checked one, for every size
 * (trace_device.c dominated, dominated_before), so a run's end is the only
 * moment of it that can be a peak. Any other op is op index a of the
 * program. */
typedef struct {
  int32_t run, n;
  int64_t a, b;
  size_t first;
} vr_dop;

typedef struct vr_trace {
  vr_op *ops;
  size_t n, cap;
  int64_t batch, seq;             /* traces: the tape's (batch, seq) when recorded */
  int64_t round;                  /* programs: the allocator block every tensor rounds to */
  int64_t mark0;                  /* traces: the tape's marks made before it began */
  /* device programs (vr_trace_fit with blocks): a request above small_max reserves a
   * block rounded to large_round instead of round (the tape's rounding, tape.h) */
  bool device;
  int64_t small_max, large_round;
  int32_t ninputs;                /* device programs: the inputs VR_OP_INPUT reads */
  vr_term *terms;                 /* device programs: the distinct sizes' terms */
  size_t nterms, terms_cap;
  vr_size *sizes;                 /* device programs: the distinct sizes */
  size_t nsizes, sizes_cap;
  vr_dop *dops;                   /* device programs: the evaluation order */
  size_t ndops, dops_cap;
  int32_t *items;                 /* device programs: the runs' sizes */
  size_t nitems, items_cap;
  /* device programs: the most items of one run, and the largest magnitude
   * of a run's constants (INT64_MAX standing for INT64_MIN): when a point's
   * sizes are small enough, no partial sum of a run can overflow */
  int64_t run_items_max;
  int64_t run_const_max;
  int32_t nslots;                 /* device programs: the composed layers' slots in use */
  vr_mem mem;                     /* where ops (and the trace itself, if new) live */
  /* programs: */
  vr_grid grid;                   /* the sizes, their degrees and fixed values */
  int32_t nmono;                  /* monomials: x^e for every e <= degree, the last
                                     size's exponent varying fastest */
  int64_t *coefs;                 /* n x nmono: the DELTA and CONST ops' polynomials */
  size_t coefs_cap;               /* rows allocated */
  bool used[VR_MAXMONO];          /* monomials some op needs */
  uint8_t from[VR_MAXMONO], var[VR_MAXMONO]; /* monomial i = monomial from[i] x size var[i] */
  vr_plan *plan;                  /* built by vr_trace_fit */
} vr_trace;

/* An empty trace allocated through mem (NULL: the C library). */
vr_trace *vr_trace_new(const vr_mem *mem);
bool vr_trace_push(vr_trace *tr, vr_op op);
/* Frees a trace from vr_trace_new or vr_trace_fit; NULL is fine. */
void vr_trace_free(vr_trace *tr);
/* Frees the ops of a trace that lives elsewhere (on the stack). */
void vr_trace_release(vr_trace *tr);

/* Fits a program from k traces of one run: the first G = prod(degree + 1)
 * at the grid's probes in order (the last size varying fastest), the
 * others (at least one) further probes that must confirm the fit. sizes:
 * k x grid->nvars, each trace's sizes. The traces must agree op by op;
 * every DELTA value must be an integer polynomial of those degrees.
 * Returns NULL (and a reason) otherwise. The program is allocated through
 * the first trace's allocator. */
/* The caching allocator's blocks (tape.h vr_tape_rounding): a device
 * program counts reserved bytes as the tape does. */
typedef struct {
  int64_t small_max, large_round;
} vr_blocks;

/* blocks: NULL for a program of allocated bytes (vr_trace_eval,
 * vr_trace_peak); else a device program, which also counts the reserved
 * bytes and may read inputs (vr_trace_device only). */
vr_trace *vr_trace_fit(const vr_trace *const *traces, int k, const vr_grid *grid,
                       const int64_t *sizes, int64_t round, const vr_blocks *blocks,
                       const char **why);

typedef struct {
  int64_t peak;
  int32_t peak_phase, peak_label;
  int64_t at_peak[VR_NCAT];
} vr_trace_result;

/* Op j's coefficients in a program (nmono of them). */
static inline int64_t *vr_trace_row(const vr_trace *prog, size_t j) {
  return prog->coefs + j * (size_t)prog->nmono;
}

/* A DELTA's or CONST's bytes at monomials m (rounded to the block), and the
 * gradients of the composed layer whose BULK_BWD is op j (each rounded);
 * false on overflow. */
bool vr_trace_delta(const vr_trace *prog, size_t j, const int64_t *m, int64_t *out);
bool vr_trace_grads(const vr_trace *prog, size_t j, const int64_t *m, int64_t *out);

/* The monomials of sizes (grid.nvars of them, >= 0) that the program uses
 * (the others 0); false when one overflows int64. */
bool vr_trace_monomials(const vr_trace *prog, const int64_t *sizes, int64_t m[VR_MAXMONO]);

/* Evaluates a fitted program at sizes (grid.nvars of them, >= 0; a size of
 * degree 0 is the program's own), tensors rounded to the program's block;
 * false when a size or a sum of sizes overflows int64. */
bool vr_trace_eval(const vr_trace *prog, const int64_t *sizes, vr_trace_result *out);

/* The peak alone, the same bytes as vr_trace_eval's (and false where it
 * reports an overflow), several times faster: no categories, fewer ops
 * (trace_peak.c). */
bool vr_trace_peak(const vr_trace *prog, const int64_t *sizes, int64_t *peak);

typedef struct {
  int64_t peak, peak_reserved; /* allocated and reserved peaks */
  int64_t live, reserved;      /* at the end */
} vr_trace_device_result;

/* trace_device.c. Evaluates a device program at sizes (as vr_trace_eval)
 * and inputs (prog->ninputs of them, >= 0): the allocated and reserved
 * bytes the tape would count, rounded as it rounds; false on overflow. */
bool vr_trace_device(const vr_trace *prog, const int64_t *sizes, const int64_t *inputs,
                     vr_trace_device_result *out);
/* A fitted device program's order of evaluation (vr_dop, vr_size); false
 * when out of memory or past VR_MAXSIZES. */
bool vr_device_build(vr_trace *prog);
/* The block the tape reserves for a change of x bytes already rounded to
 * the program's block (tape.c block_size); false on overflow. */
static inline bool vr_trace_block(const vr_trace *prog, int64_t x, int64_t *out) {
  if (prog->round <= 0) return *out = x, true;
  if (x == INT64_MIN) return false;
  int64_t a = x < 0 ? -x : x;
  return vr_round_up(x, a <= prog->small_max ? prog->round : prog->large_round, out);
}

/* A size polynomial's (n coefficients) sign for every size >= 0: +1 when
 * every term is >= 0, -1 when every term is <= 0, 0 when mixed; and
 * whether rounding to the block leaves it as it is for every size. */
int vr_coef_sign(const int64_t *c, int n);
bool vr_coef_exact(const int64_t *c, int n, int64_t round);

/* trace_peak.c: a program's plan (NULL when out of memory: vr_trace_peak
 * then evaluates checked), its length, and its release. */
vr_plan *vr_plan_build(const vr_trace *prog);
size_t vr_plan_len(const vr_plan *plan);
void vr_plan_free(vr_plan *plan, const vr_mem *mem);

#endif
