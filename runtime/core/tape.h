/* The allocation simulator ("tape"). A front end (the Lua stdlib) describes a
 * step op by op: tensors allocated and dropped, tensors an op saves for
 * backward, and the gradient each op sends to its inputs. The tape keeps live
 * bytes per category and replays backward itself: nodes run in reverse
 * creation order (the order PyTorch's engine uses for a single stream), saved
 * tensors are released as their node finishes, gradients are accumulated in
 * place, parameter gradients persist until zero_grad, and checkpointed
 * segments are recomputed when backward reaches them.
 *
 * No Lua here; errors are returned as codes and described by vr_tape_error. */
#ifndef VRAM_TAPE_H
#define VRAM_TAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mem.h"

/* Memory categories, in the order reports list them (vram.categories());
 * their names (vr_cat_name) live in tape.c only. */
typedef enum {
  VR_CAT_WEIGHTS,
  VR_CAT_MASTER,
  VR_CAT_GRADS,
  VR_CAT_OPTIM,
  VR_CAT_ACTIV,
  VR_CAT_LOGITS,
  VR_CAT_TEMP,
  VR_CAT_KV,
  VR_CAT_INPUTS,
  VR_CAT_BUFFERS,
  VR_CAT_OVERHEAD,
  VR_NCAT
} vr_cat;

const char *vr_cat_name(int cat);
int vr_cat_find(const char *name); /* -1 if unknown */

typedef struct vr_tape vr_tape;

#define VR_MAX_EDGES 64

/* One gradient edge of a node: the forward input that receives a gradient,
 * its size, or alias >= 0 to pass output `alias`'s gradient through
 * unchanged (views, reshapes, identity backward). */
typedef struct {
  int64_t tensor;
  int64_t bytes;
  int alias;
} vr_edge;

typedef enum {
  VR_OK = 0,
  VR_EBADID,      /* tensor id unknown or already freed */
  VR_EBYTES,      /* negative size */
  VR_EOVERFLOW,   /* live bytes overflowed int64 */
  VR_ENOMEM,
  VR_ENESTED,     /* checkpoint inside checkpoint */
  VR_ENOTRECORD,  /* ckpt_end without ckpt_begin */
  VR_EREFS,       /* drop of a tensor with no reference left */
  VR_EALIAS,      /* alias names an output that does not exist */
  VR_ECAT,        /* category out of range */
  VR_ETOOMANY,    /* more than VR_MAX_EDGES inputs or outputs */
  VR_ECOMPOSE,    /* composed layers did not repeat the measured pattern */
  VR_ELABELS,     /* more distinct labels and phases than the table holds (2^20) */
  VR_EBUSY        /* a tape to copy is recording, capturing, echoing, tracing or drawing */
} vr_status;

const char *vr_tape_error(vr_status st);

/* A tape allocating through mem (NULL: the C library); the bindings pass
 * the Lua state's allocator so the host's memory budget counts the tape. */
vr_tape *vr_tape_new(const vr_mem *mem);
void vr_tape_free(vr_tape *t);
void vr_tape_reset(vr_tape *t);
/* Makes t what vr_tape_new returns, reusing its memory: its vectors keep
 * their capacity (a tape grows them by doublings, each a copy) and its
 * interned strings their indexes. */
void vr_tape_recycle(vr_tape *t);
/* Makes dst a copy of src, in dst's memory: its tensors, parameters,
 * statistics, phase and interned strings (the same indexes), as if dst had
 * made src's calls. src must be at rest -- no checkpoint segment, capture,
 * echo, bulk or window open, no trace and no timeline -- or VR_EBUSY; out
 * of memory, VR_ENOMEM. Either failure leaves dst as it was. A search that
 * simulates many runs of one model keeps a tape as it stands once the
 * model is built and starts each run from a copy (stdlib/step.lua). */
vr_status vr_tape_assign(vr_tape *dst, const vr_tape *src);

/* Labels and phases are interned; the index is stable. The table grows;
 * past 2^20 distinct strings it is full (VR_ELABELS), never a silent drop. */
vr_status vr_tape_intern(vr_tape *t, const char *s, int *index);
vr_status vr_tape_phase(vr_tape *t, const char *name);

vr_status vr_tape_alloc(vr_tape *t, int64_t bytes, int cat, int label, bool param,
                        int64_t *id);
vr_status vr_tape_drop(vr_tape *t, int64_t id);
/* Inside a checkpoint recording: a drop that happens only when the segment
 * is recomputed (a cache that held the tensor in the original forward). */
vr_status vr_tape_replay_drop(vr_tape *t, int64_t id);
/* One more reference to a live tensor (a view sharing its storage). */
vr_status vr_tape_retain(vr_tape *t, int64_t id);
vr_status vr_tape_temp(vr_tape *t, int64_t bytes, int cat, int label);
vr_status vr_tape_node(vr_tape *t, const int64_t *saved, int nsaved, const vr_edge *in,
                       int nin, const int64_t *out, int nout, int64_t temp, int label);
vr_status vr_tape_ckpt_begin(vr_tape *t);
vr_status vr_tape_ckpt_end(vr_tape *t, const int64_t *inputs, int nin, const int64_t *out,
                           int nout, int label);
/* Runs every pending node; root >= 0 first receives a gradient of its own
 * size (loss.backward()'s implicit ones). */
vr_status vr_tape_backward(vr_tape *t, int64_t root);
vr_status vr_tape_zero_grad(vr_tape *t);

/* Identical layers, composed instead of simulated (DESIGN: "simulated once
 * and scaled"). The front end simulates the first layers and the last one
 * in full and puts a bulk between them: `iters` layers whose forward each
 * kept `per_iter` bytes (measured on a simulated layer). vr_tape_bulk_end
 * marks where the last simulated layer's nodes end. In backward the bulk
 * measures that last layer's excursion and net change, then replays them
 * `iters` times: a peak check, the gradients of each layer's parameters
 * (edges: iters * nper {param, bytes} pairs, layer by layer), and the
 * release of that layer's share of the bulk. */
vr_status vr_tape_bulk(vr_tape *t, int64_t per_iter, int64_t per_iter_reserved, int64_t iters,
                       const vr_edge *edges, int nper, int label, int *bulk);
vr_status vr_tape_bulk_end(vr_tape *t, int bulk);

/* Identical layers' parameters built once and repeated (stdlib/sim.lua
 * Sim:build_layers). Between capture_begin and capture_end the tape keeps
 * every alloc and temp as it happens; any other call (drop, node, phase,
 * backward, ...) spoils the capture. capture_end gives the number of
 * tensors the captured span created (its id stride), or -1 when it was
 * spoiled, and the id of the first tensor captured; capture_repeat then performs the same allocs and temps `times`
 * more times, in order, through the same accounting (peaks, timeline,
 * trace): exactly what building those layers one by one would have done. */
vr_status vr_tape_capture_begin(vr_tape *t);
vr_status vr_tape_capture_end(vr_tape *t, int64_t *stride, int64_t *first);
vr_status vr_tape_capture_repeat(vr_tape *t, int64_t times); /* VR_EOVERFLOW: over VR_MAX_REPEAT */
#define VR_MAX_REPEAT (UINT64_C(1) << 26) /* operations one capture_repeat may do */

/* A layer's forward simulated once and echoed for another identical layer
 * (stdlib/compose.lua). Between echo_begin and echo_end the tape keeps its
 * allocs, drops, retains, temps and nodes (in the checkpoint recording's
 * form) while doing them, and checkpointed segments whole (ckpt_begin ..
 * ckpt_end: the replay records its own segment, ids mapped, for backward
 * to recompute); any other call, or a segment still open at echo_end,
 * spoils the echo (ok false).
 * echo_replay then does them again (as often as asked) with ids mapped: a tensor the echo
 * created becomes a new one, from[k] becomes to[k], an id in [lo, hi)
 * becomes id + delta (the next layer's parameters), any other id stays
 * (masks, rotary tables); answer[i] is query[i] mapped (the layer's output,
 * its KV cache). */
/* Echoes nest (VR_ECHO_DEPTH deep): an echo begun while another is open
 * keeps its own events, and the outer ones keep what actually happens,
 * an inner replay's allocs, drops and nodes included (the experts of a
 * layer composed inside the echoed layer, stdlib/moe.lua). echo_replay
 * replays the echo that ended last, while echoes outside it are open; an
 * echo begun inside a checkpointed segment is one as long as the segment
 * stays open to its end, and replays inside a segment (recorded again). */
#define VR_ECHO_DEPTH 4
vr_status vr_tape_echo_begin(vr_tape *t);
vr_status vr_tape_echo_end(vr_tape *t, bool *ok);
vr_status vr_tape_echo_replay(vr_tape *t, const int64_t *from, const int64_t *to, int npairs,
                              int64_t lo, int64_t hi, int64_t delta, const int64_t *query,
                              int nquery, int64_t *answer);

/* An echo kept apart from its tape, to be replayed on another tape (a
 * layer that a search simulates in run after run: stdlib/compose.lua,
 * fit --knobs). vr_tape_echo_keep copies the outermost echo that ended
 * last into buf when cap is at least *need (its events, their labels as
 * text); *need 0: none to keep (an echo inside another, a spoiled one, a
 * trace or a timeline on). vr_tape_echo_take makes a kept echo this tape's
 * ready echo, to be replayed with ids mapped as echo_replay maps them (from
 * and to: pairs; an id in [lo, hi): + delta), when no echo is open, a
 * checkpoint segment is open here exactly when it was at the echo's begin,
 * and every id the echo names but did not create is mapped to a live
 * tensor here; *ok false otherwise, the tape as it was. Its labels are
 * interned here again, in the order the other tape interned them. */
vr_status vr_tape_echo_keep(vr_tape *t, void *buf, size_t cap, size_t *need);
vr_status vr_tape_echo_take(vr_tape *t, const void *buf, size_t size, const int64_t *from,
                            const int64_t *to, int npairs, int64_t lo, int64_t hi, int64_t delta,
                            bool *ok);

/* Compiled estimates (trace.h): from now on the tape records its
 * accounting as a program; the probe's (batch, seq) is stored with it. */
struct vr_trace;
vr_status vr_tape_trace(vr_tape *t, int64_t batch, int64_t seq);
struct vr_trace *vr_tape_take_trace(vr_tape *t);
/* In a trace: `times` x an input's bytes allocated (times > 0) or freed
 * (< 0) here, the bytes given when the program is evaluated (trace.h
 * VR_OP_INPUT); the tape itself counts nothing. VR_ENOTRECORD when not
 * tracing. */
vr_status vr_tape_trace_input(vr_tape *t, int slot, int64_t times, int cat, int label);
/* Live bytes now; in a trace, a mark the composed layers measure from. */
vr_status vr_tape_mark(vr_tape *t, int64_t *live);

/* A memory timeline for reports: while on, every change of live bytes is
 * kept as one event (its size, category, op label, phase, and whether it
 * belongs to a checkpointed segment's recomputation). Replaying the deltas
 * in order gives live bytes per category after every op; off by default,
 * so estimates pay nothing for it. */
typedef struct {
  int64_t delta;
  int32_t label;     /* interned index, -1 none */
  int32_t phase;     /* interned index */
  int8_t cat;
  int8_t recompute;  /* 1 while backward recomputes a checkpointed segment */
  /* 1 when it begins a span after the event kept before it in memory
   * (vr_tl_new_span; 1 for the first): inside a piece that is the event
   * before it in the timeline, so a collect tests a byte there and
   * compares events only where a piece begins */
  int8_t starts;
} vr_tl_event;

void vr_tape_timeline(vr_tape *t, bool on);
size_t vr_tape_timeline_len(const vr_tape *t);
/* Appends events [from, to) again `times` times: what a span of identical
 * layers or steps would have kept, when the front end composes them
 * (models/decoder.lua grad_free_layers, stdlib/step.lua repeat_steps).
 * The copies are one piece naming the events, not copies of them.
 * VR_EBADID for a range outside the timeline. */
vr_status vr_tape_timeline_repeat(vr_tape *t, size_t from, size_t to, int64_t times);
/* The timeline's events at most, repeats included (VR_EOVERFLOW past it):
 * a collect walks every one (2^26: ~2 s). */
#define VR_TL_MAX ((size_t)1 << 26)
/* Event i (0-based), NULL when out of range. */
const vr_tl_event *vr_tape_timeline_at(const vr_tape *t, size_t i);
/* The timeline as pieces: events first .. first + len * times - 1 are the
 * kept events src .. src + len - 1, times over (times 1: a stretch of them
 * in a row). The pieces follow each other, from event 0 to the last. */
typedef struct {
  size_t first, src, len;
  int64_t times;
} vr_tl_piece;
/* Whether event e, after event prev, begins a span of the timeline: its
 * phase or its recomputation differs. */
static inline bool vr_tl_new_span(const vr_tl_event *prev, const vr_tl_event *e) {
  return e->phase != prev->phase || (e->recompute != 0) != (prev->recompute != 0);
}
/* The spans of the timeline (events in a row of one phase and
 * recomputation), repeats included: counted as events are kept. */
size_t vr_tape_timeline_spans(const vr_tape *t);
/* The kept events (NULL when none) and *pieces, *npieces: good until the
 * next event is kept or repeated. */
const vr_tl_event *vr_tape_timeline_pieces(const vr_tape *t, const vr_tl_piece **pieces,
                                           size_t *npieces);

/* Gradient tensor of a forward tensor, -1 if none. */
int64_t vr_tape_grad(const vr_tape *t, int64_t id);
int64_t vr_tape_bytes(const vr_tape *t, int64_t id);
/* References a live tensor holds (views, saved-by-node), 0 if none. */
int vr_tape_refs(const vr_tape *t, int64_t id);

/* Caching-allocator block sizes: requests up to `small_max` round up to
 * `small_round`; larger ones to `large_round`. PyTorch CUDA
 * (c10/cuda/CUDACachingAllocator.cpp): every block is a multiple of
 * kMinBlockSize = 512 B; a request of kMinLargeAlloc = 10 MiB or more gets
 * a segment of its own rounded to kRoundLarge = 2 MiB, while smaller ones
 * are carved out of shared 2 MiB (kSmallBuffer, up to kSmallSize = 1 MiB)
 * or 20 MiB (kLargeBuffer) segments -- so 512 B, 10 MiB, 2 MiB. The
 * reserved counter is the peak of those block sizes: a lower bound of what
 * the allocator reserves (shared segments and fragmentation not modelled).
 * All zero (the default) turns the rounding off. */
void vr_tape_rounding(vr_tape *t, int64_t small_round, int64_t small_max, int64_t large_round);
/* The block the allocator reserves for a request of bytes >= 0 (bytes
 * itself when rounding is off); false when it overflows int64. */
bool vr_tape_block(const vr_tape *t, int64_t bytes, int64_t *block);

typedef struct {
  int64_t live;
  int64_t peak;
  int64_t reserved;      /* live rounded block sizes */
  int64_t peak_reserved;
  int peak_phase;              /* interned index */
  int peak_label;              /* interned index, -1 if none */
  int64_t peak_by_cat[VR_NCAT];
  int64_t live_by_cat[VR_NCAT];
} vr_tape_stats;

void vr_tape_stats_get(const vr_tape *t, vr_tape_stats *s);

/* A window: the peaks reached since vr_tape_window_open, both starting at
 * the live and reserved bytes it opened with. A front end that prices
 * several runs differing only in allocations alive from before the window
 * to after it (the optimizer states, stdlib/swap_optimizer.lua) shifts a window's
 * peaks by the difference: live and reserved are sums over allocations, so
 * the moment a window peaks does not move. Opening one spoils nothing; one
 * window at a time, reset by vr_tape_reset. */
typedef struct {
  int64_t start, rstart;         /* live and reserved bytes when it opened */
  int64_t peak, rpeak;           /* the highest since */
  int64_t peak_by_cat[VR_NCAT];  /* each category when live first reached peak */
} vr_tape_window;

void vr_tape_window_open(vr_tape *t);
void vr_tape_window_get(const vr_tape *t, vr_tape_window *w);
/* Interned string `index`, NULL when there is none; the strings share one
 * buffer, so the pointer is good until the next string is interned
 * (vr_tape_intern, vr_tape_phase). */
const char *vr_tape_string(const vr_tape *t, int index);
/* Interned strings: how many, and the peak reached while each was the
 * phase (0 for labels and phases never reached). */
int vr_tape_nstrings(const vr_tape *t);
int64_t vr_tape_phase_peak(const vr_tape *t, int index);

#endif
