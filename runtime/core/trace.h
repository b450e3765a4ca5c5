/* Compiled estimates: a tape run in trace mode records its accounting as a
 * flat program (every live-bytes change, phase, and the composed layers'
 * measurements). Traces of the same run at a few (batch, seq) probes have
 * the same shape; each change is then a polynomial in batch and seq
 * (monomials 1, B, T, BT, T^2, BT^2 — activations, logits, attention) and
 * the program re-evaluates a step's peak for any (batch, seq) in C, without
 * Lua. No Lua here. */
#ifndef VRAM_TRACE_H
#define VRAM_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mem.h"
#include "tape.h" /* the categories, vr_cat */

enum {
  VR_OP_DELTA, VR_OP_PHASE, VR_OP_MARK, VR_OP_BULK_FWD, VR_OP_MEASURE, VR_OP_BULK_BWD,
  VR_OP_CONST, /* a fitted DELTA that does not depend on the sizes, already rounded */
  VR_OP_GRAD   /* traces only: after a BULK_BWD, one per layer parameter (value: its
                  gradient's bytes), so a program rounds them to its own block */
};

#define VR_MONOMIALS 6

typedef struct {
  int32_t kind, cat, label, slot; /* slot: mark (MARK) or bulk (BULK_*, MEASURE) index */
  int64_t value;                  /* recorded bytes (DELTA) or iterations (BULK_*) */
  int64_t extra, extra_rounded;   /* BULK_FWD: first of its two marks; BULK_BWD: gradient
                                     bytes per layer (raw; in a program also rounded to
                                     the program's block) */
  int64_t coef[VR_MONOMIALS];     /* fitted DELTA polynomial */
} vr_op;

typedef struct vr_plan vr_plan; /* a program's peak-only evaluation (trace_peak.c) */

typedef struct vr_trace {
  vr_op *ops;
  size_t n, cap;
  int64_t batch, seq;             /* the probe this trace was recorded at; in a program,
                                     a size it holds fixed (a line program), else 0 */
  int64_t round;                  /* programs: the allocator block every tensor rounds to */
  vr_mem mem;                     /* where ops (and the trace itself, if new) live */
  vr_plan *plan;                  /* programs: built by vr_trace_fit */
} vr_trace;

/* An empty trace allocated through mem (NULL: the C library). */
vr_trace *vr_trace_new(const vr_mem *mem);
bool vr_trace_push(vr_trace *tr, vr_op op);
/* Frees a trace from vr_trace_new or vr_trace_fit; NULL is fine. */
void vr_trace_free(vr_trace *tr);
/* Frees the ops of a trace that lives elsewhere (on the stack). */
void vr_trace_release(vr_trace *tr);

/* Fits a program from k traces recorded at the probes' (batch, seq): they
 * must agree op by op; DELTA values must be an integer polynomial that the
 * last probe confirms exactly. Returns NULL (and a reason) otherwise. The
 * program is allocated through the first trace's allocator. k = 7: the
 * standard probes, any (batch, seq). k = 4: a line program, where batch 1
 * or seq 1 gives the ops another structure: (1, T) at T = 2, 3, 4, 5
 * answers batch 1 (its batch field is 1), (B, 1) at B = 2, 3, 4, 5 answers
 * seq 1 (seq field 1). */
vr_trace *vr_trace_fit(const vr_trace *const *traces, int k, int64_t round, const char **why);

typedef struct {
  int64_t peak;
  int32_t peak_phase, peak_label;
  int64_t at_peak[VR_NCAT];
} vr_trace_result;

/* Evaluates a fitted program (tensors rounded to the program's block);
 * false when a size or a sum of sizes overflows int64. */
bool vr_trace_eval(const vr_trace *prog, int64_t batch, int64_t seq, vr_trace_result *out);

/* The peak alone, the same bytes as vr_trace_eval's (and false where it
 * reports an overflow), several times faster: no categories, fewer ops
 * (trace_peak.c). */
bool vr_trace_peak(const vr_trace *prog, int64_t batch, int64_t seq, int64_t *peak);

/* A size polynomial's sign for every size >= 0: +1 when every term is
 * >= 0, -1 when every term is <= 0, 0 when mixed; and whether rounding to
 * the block leaves it as it is for every size. */
int vr_coef_sign(const int64_t c[VR_MONOMIALS]);
bool vr_coef_exact(const int64_t c[VR_MONOMIALS], int64_t round);

/* trace_peak.c: a program's plan (NULL when out of memory: vr_trace_peak
 * then evaluates checked), its length, and its release. */
vr_plan *vr_plan_build(const vr_trace *prog);
size_t vr_plan_len(const vr_plan *plan);
void vr_plan_free(vr_plan *plan, const vr_mem *mem);

#endif
