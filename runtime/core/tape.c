#include "tape.h"

#include <string.h>

#include "checked.h"
#include "mem.h"
#include "trace.h"

static const char *CAT_NAMES[VR_NCAT] = {
    "weights",     "master_weights", "gradients", "optimizer_state",
    "activations", "logits_loss",    "temporaries", "kv_cache",
    "inputs",      "buffers",        "overhead"};

const char *vr_cat_name(int cat) {
  return (cat >= 0 && cat < VR_NCAT) ? CAT_NAMES[cat] : "?";
}

int vr_cat_find(const char *name) {
  /* asked on every alloc: the names' first letters pick one or two */
  for (int i = 0; i < VR_NCAT; i++)
    if (CAT_NAMES[i][0] == name[0] && strcmp(CAT_NAMES[i], name) == 0) return i;
  return -1;
}

typedef struct {
  int64_t bytes;
  int64_t grad;  /* gradient tensor id, -1 none */
  int32_t refs;   /* all references: Python-level and saved-by-node */
  int32_t py;     /* Python-level references (alloc, retain, drop) */
  int8_t cat;
  int8_t alive;
  int8_t param;
  int8_t bulk; /* a bulk's activations: its node owns them, no script drops them */
} tensor;

/* EV_CKPT_BEGIN, EV_CKPT_END (then its input and output items) and
 * EV_REPLAY_DROP only in an echo: a checkpointed segment inside the echoed
 * layer */
enum {
  EV_ALLOC, EV_DROP, EV_RETAIN, EV_TEMP, EV_NODE, EV_ITEM, EV_CKPT_BEGIN, EV_CKPT_END,
  EV_REPLAY_DROP
};

typedef struct {
  int64_t a, b;
  int32_t kind, label, cat, aux;
} event;

typedef struct {
  int64_t tensor;      /* the bulk's bytes */
  int64_t per_iter, per_iter_reserved, iters, reserved_left;
  vr_edge *edges;      /* iters * nper */
  int nper;
  size_t node, watch_hi;
  bool measuring;
  int64_t start, rstart;
  size_t nalloc;       /* edges allocated (freed with their count) */
} bulk;

#define VR_MAX_BULKS 8

/* A captured alloc (temp false) or temp (vr_tape_capture_begin). */
typedef struct {
  int64_t bytes;
  int32_t label;
  int8_t cat, temp, param;
} cap_op;

typedef struct {
  int64_t temp;
  int32_t label;
  int32_t bulk;        /* >= 0: a bulk node */
  int32_t nsaved, nin, nout;
  size_t off_saved, off_in, off_out; /* into the pools */
  /* checkpoint segments */
  int32_t ckpt;
  size_t ev_lo, ev_hi;
  int64_t id_lo, id_hi;
} node;

#define VEC(T)        \
  struct {            \
    T *v;             \
    size_t n, cap;    \
  }

struct vr_tape {
  vr_mem mem;          /* every allocation of the tape goes through it */
  VEC(tensor) tensors;
  VEC(node) nodes;
  VEC(int64_t) ids;    /* saved and output id pool */
  VEC(vr_edge) edges;  /* edge pool */
  VEC(event) events;   /* checkpoint recordings */
  VEC(size_t) strings; /* interned labels and phases, by index: offsets in chars */
  VEC(char) chars;     /* their text, one after another, each ending in NUL (one
                        * buffer: a step's ~60 labels cost a few reallocations,
                        * not a malloc and a free each) */
  VEC(int64_t) phase_peak; /* by string index, as long as strings.cap */
  int32_t *slot_of;    /* open-addressing hash: slot -> string index + 1 */
  size_t nslots;       /* a power of two, at least twice the strings */
  int phase;
  bool recording;
  int64_t small_round, small_max, large_round;
  size_t rec_ev_lo;
  int64_t rec_id_lo;
  vr_tape_stats st;
  bulk bulks[VR_MAX_BULKS];
  int nbulks;
  int64_t watch_peak, watch_rpeak;
  bool win_open;      /* a window is open (vr_tape_window_open) */
  vr_tape_window win;
  vr_trace *trace;    /* recording a compiled estimate, or NULL */
  bool quiet;         /* accounting that the trace records as a bulk op */
  int marks;          /* marks recorded so far */
  bool timeline;      /* recording the timeline (vr_tape_timeline) */
  bool recompute;     /* backward is recomputing a checkpointed segment */
  /* the events kept once each, and the timeline as pieces of them: a
   * stretch of tl, or one repeated (vr_tape_timeline_repeat: 40,034 of the
   * Qwen3-VL-4B PPO step's 47,071 events are composed layers' and steps'
   * copies, kept once); tl_n events in all */
  VEC(vr_tl_event) tl;
  VEC(vr_tl_piece) tlp;
  size_t tl_n;
  size_t tl_spans;     /* spans in the tl_n events (vr_tape_timeline_spans) */
  vr_tl_event tl_last; /* the last of them, when tl_n > 0 */
  /* a capture (vr_tape_capture_begin): its allocs and temps, whether it is
   * open, whether another call spoiled it, whether it ended ready to repeat,
   * the first tensor it created and the tensor count a repeat starts from */
  VEC(cap_op) cap;
  bool capturing, cap_bad, cap_ready;
  size_t cap_first, cap_next;
  /* echoes (vr_tape_echo_begin), nested: echo[0 .. echo_depth) are open,
   * the innermost last; each keeps what happens while it is open (an inner
   * echo's replays included, as the calls they make). echo_ready: the level
   * whose echo ended ready to replay (>= echo_depth), or -1 */
  struct echo_level {
    VEC(event) ev;     /* its events (the checkpoint recording's format) */
    bool bad, rec;     /* spoiled; a checkpoint segment was open at its begin */
    int64_t lo, hi;    /* the ids of the tensors it created */
  } echo[VR_ECHO_DEPTH];
  int echo_depth, echo_ready;
};

/* Any call but alloc and temp spoils an open capture; any but those and
 * drop, retain and node an open echo (vr_tape_echo_begin) too. */
static inline void spoil(vr_tape *t) { t->cap_bad = true; }
static inline void spoil_all(vr_tape *t) {
  t->cap_bad = true;
  for (int i = 0; i < t->echo_depth; i++) t->echo[i].bad = true;
}

/* Room for `need` items in vec (checked: never wraps). */
#define GROW(t, vec, need) \
  vr_mem_grow(&(t)->mem, (void **)&(vec).v, &(vec).cap, (need), sizeof *(vec).v, 64)
#define VEC_FREE(t, vec) vr_mem_free(&(t)->mem, (vec).v, (vec).cap * sizeof *(vec).v)

#define PUSH(t, vec, x, fail)                   \
  do {                                          \
    if (!GROW(t, vec, (vec).n + 1)) fail;       \
    (vec).v[(vec).n++] = (x);                   \
  } while (0)

const char *vr_tape_error(vr_status st) {
  switch (st) {
    case VR_OK: return "ok";
    case VR_EBADID: return "unknown or already freed tensor id";
    case VR_EBYTES: return "negative byte count";
    case VR_EOVERFLOW: return "live bytes overflow int64";
    case VR_ENOMEM: return "out of memory";
    case VR_ENESTED: return "checkpoint segments cannot nest";
    case VR_ENOTRECORD: return "ckpt_end without ckpt_begin";
    case VR_EREFS: return "tensor dropped more often than it was referenced";
    case VR_EALIAS: return "gradient alias names an output the node does not have";
    case VR_ECAT: return "unknown category";
    case VR_ETOOMANY: return "a node has more than 64 inputs or outputs";
    case VR_ECOMPOSE: return "composed layers did not repeat the simulated layer's pattern";
    case VR_ELABELS: return "more than 1048576 distinct labels and phases";
    case VR_EBUSY:
      return "the tape to copy is recording, capturing, echoing, tracing or drawing";
  }
  return "unknown error";
}

vr_tape *vr_tape_new(const vr_mem *mem) {
  vr_mem m = mem ? *mem : (vr_mem){NULL, NULL};
  vr_tape *t = (vr_tape *)vr_mem_array(&m, 1, sizeof *t);
  int setup = -1;
  if (!t) return NULL;
  memset(t, 0, sizeof *t);
  t->mem = m;
  /* "setup" is string 0, the phase every reset starts in */
  if (vr_tape_intern(t, "setup", &setup) != VR_OK) {
    vr_tape_free(t);
    return NULL;
  }
  vr_tape_reset(t);
  return t;
}

static void free_bulk(vr_tape *t, bulk *b) {
  vr_mem_free(&t->mem, b->edges, b->nalloc * sizeof *b->edges);
  b->edges = NULL;
}

static void free_bulks(vr_tape *t) {
  for (int i = 0; i < t->nbulks; i++) free_bulk(t, &t->bulks[i]);
  t->nbulks = 0;
}

void vr_tape_free(vr_tape *t) {
  if (!t) return;
  free_bulks(t);
  vr_trace_free(t->trace);
  VEC_FREE(t, t->tensors);
  VEC_FREE(t, t->nodes);
  VEC_FREE(t, t->ids);
  VEC_FREE(t, t->edges);
  VEC_FREE(t, t->events);
  VEC_FREE(t, t->tl);
  VEC_FREE(t, t->tlp);
  VEC_FREE(t, t->cap);
  for (int i = 0; i < VR_ECHO_DEPTH; i++) VEC_FREE(t, t->echo[i].ev);
  VEC_FREE(t, t->strings);
  VEC_FREE(t, t->chars);
  VEC_FREE(t, t->phase_peak);
  vr_mem_free(&t->mem, t->slot_of, t->nslots * sizeof *t->slot_of);
  vr_mem m = t->mem;
  vr_mem_free(&m, t, sizeof *t);
}

void vr_tape_reset(vr_tape *t) {
  free_bulks(t);
  vr_trace_free(t->trace);
  t->trace = NULL;
  t->marks = 0;
  t->tensors.n = t->nodes.n = t->ids.n = t->edges.n = t->events.n = t->cap.n = 0;
  t->tl.n = t->tlp.n = t->tl_n = t->tl_spans = 0;
  t->capturing = t->cap_bad = t->cap_ready = false;
  for (int i = 0; i < VR_ECHO_DEPTH; i++) t->echo[i].ev.n = 0;
  t->echo_depth = 0;
  t->echo_ready = -1;
  t->cap_first = t->cap_next = 0;
  t->timeline = t->recompute = false;
  memset(&t->st, 0, sizeof t->st);
  t->win_open = false;
  memset(&t->win, 0, sizeof t->win);
  memset(t->phase_peak.v, 0, t->phase_peak.cap * sizeof *t->phase_peak.v);
  t->st.peak_label = -1;
  t->recording = false;
  t->phase = 0; /* "setup", interned first by vr_tape_new */
  t->st.peak_phase = t->phase;
}

/* What a fresh tape is, in a used one's memory: every field as vr_tape_new
 * leaves it, the vectors empty at the capacity they reached, and the
 * interned strings kept at their indexes ("setup" still string 0). */
void vr_tape_recycle(vr_tape *t) {
  free_bulks(t);
  vr_trace_free(t->trace);
  vr_tape keep = *t;
  memset(t, 0, sizeof *t);
  t->mem = keep.mem;
#define KEEP_EMPTY(vec)       \
  do {                        \
    t->vec.v = keep.vec.v;    \
    t->vec.cap = keep.vec.cap; \
  } while (0)
  KEEP_EMPTY(tensors);
  KEEP_EMPTY(nodes);
  KEEP_EMPTY(ids);
  KEEP_EMPTY(edges);
  KEEP_EMPTY(events);
  KEEP_EMPTY(tl);
  KEEP_EMPTY(tlp);
  KEEP_EMPTY(cap);
  KEEP_EMPTY(phase_peak);
  for (int i = 0; i < VR_ECHO_DEPTH; i++) KEEP_EMPTY(echo[i].ev);
#undef KEEP_EMPTY
  t->strings = keep.strings;
  t->chars = keep.chars;
  t->slot_of = keep.slot_of;
  t->nslots = keep.nslots;
  vr_tape_reset(t);
}

vr_status vr_tape_assign(vr_tape *dst, const vr_tape *src) {
  if (dst == src) return VR_OK;
  if (src->recording || src->capturing || src->echo_depth > 0 || src->nbulks > 0 ||
      src->win_open || src->trace || src->timeline || src->tl_n > 0)
    return VR_EBUSY;
  /* room for everything first: a failure leaves dst as it was. (Every
   * tape holds "setup", so its string table has slots.) */
  int32_t *slots = NULL;
  if (src->nslots != dst->nslots) {
    slots = (int32_t *)vr_mem_array(&dst->mem, src->nslots, sizeof *slots);
    if (!slots) return VR_ENOMEM;
  }
  if (!GROW(dst, dst->tensors, src->tensors.n) || !GROW(dst, dst->nodes, src->nodes.n) ||
      !GROW(dst, dst->ids, src->ids.n) || !GROW(dst, dst->edges, src->edges.n) ||
      !GROW(dst, dst->events, src->events.n) || !GROW(dst, dst->cap, src->cap.n) ||
      !GROW(dst, dst->strings, src->strings.n) || !GROW(dst, dst->chars, src->chars.n) ||
      !GROW(dst, dst->phase_peak, src->phase_peak.cap)) {
    vr_mem_free(&dst->mem, slots, src->nslots * sizeof *slots);
    return VR_ENOMEM;
  }
  if (slots) {
    vr_mem_free(&dst->mem, dst->slot_of, dst->nslots * sizeof *dst->slot_of);
    dst->slot_of = slots;
    dst->nslots = src->nslots;
  }
  free_bulks(dst);
  vr_trace_free(dst->trace);
  /* src's fields, then dst's own memory back in place, holding src's items */
  vr_tape own = *dst;
  *dst = *src;
  dst->mem = own.mem;
  dst->trace = NULL;
  dst->slot_of = own.slot_of;
  memcpy(dst->slot_of, src->slot_of, src->nslots * sizeof *src->slot_of);
#define TAKE(vec)                                                                  \
  do {                                                                             \
    dst->vec.v = own.vec.v;                                                        \
    dst->vec.cap = own.vec.cap;                                                    \
    if (src->vec.n) memcpy(dst->vec.v, src->vec.v, src->vec.n * sizeof *src->vec.v); \
  } while (0)
  TAKE(tensors);
  TAKE(nodes);
  TAKE(ids);
  TAKE(edges);
  TAKE(events);
  TAKE(cap);
  TAKE(strings);
  TAKE(chars);
#undef TAKE
  dst->phase_peak.v = own.phase_peak.v;
  dst->phase_peak.cap = own.phase_peak.cap;
  memcpy(dst->phase_peak.v, src->phase_peak.v, src->phase_peak.cap * sizeof *src->phase_peak.v);
  memset(dst->phase_peak.v + src->phase_peak.cap, 0,
         (own.phase_peak.cap - src->phase_peak.cap) * sizeof *src->phase_peak.v);
  /* what src holds none of (at rest): dst's buffers, empty */
  dst->tl = own.tl;
  dst->tlp = own.tlp;
  dst->tl.n = dst->tlp.n = 0;
  for (int i = 0; i < VR_ECHO_DEPTH; i++) {
    dst->echo[i].ev = own.echo[i].ev;
    dst->echo[i].ev.n = 0;
  }
  return VR_OK;
}

static uint32_t hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

#define VR_MAX_STRINGS (1 << 20)

/* Doubles the hash table and re-inserts every string. */
static bool rehash(vr_tape *t) {
  size_t n = t->nslots ? t->nslots * 2 : 64;
  int32_t *slots = (int32_t *)vr_mem_array(&t->mem, n, sizeof *slots);
  if (!slots) return false;
  memset(slots, 0, n * sizeof *slots);
  for (size_t k = 0; k < t->strings.n; k++) {
    size_t h = hash(t->chars.v + t->strings.v[k]) & (n - 1);
    while (slots[h]) h = (h + 1) & (n - 1);
    slots[h] = (int32_t)k + 1;
  }
  vr_mem_free(&t->mem, t->slot_of, t->nslots * sizeof *t->slot_of);
  t->slot_of = slots;
  t->nslots = n;
  return true;
}

vr_status vr_tape_intern(vr_tape *t, const char *s, int *index) {
  size_t h = 0, len = strlen(s);
  if (t->nslots > 0)
    for (h = hash(s) & (t->nslots - 1); t->slot_of[h]; h = (h + 1) & (t->nslots - 1))
      if (strcmp(t->chars.v + t->strings.v[t->slot_of[h] - 1], s) == 0) {
        *index = t->slot_of[h] - 1;
        return VR_OK;
      }
  if (t->strings.n >= VR_MAX_STRINGS) return VR_ELABELS;
  /* reserve everything first: a failure leaves the table as it was */
  size_t peaks = t->phase_peak.cap;
  if (!GROW(t, t->strings, t->strings.n + 1) || !GROW(t, t->phase_peak, t->strings.n + 1))
    return VR_ENOMEM;
  memset(t->phase_peak.v + peaks, 0, (t->phase_peak.cap - peaks) * sizeof *t->phase_peak.v);
  if (2 * (t->strings.n + 1) > t->nslots && !rehash(t)) return VR_ENOMEM;
  /* s may lie in chars itself (a tail of an interned string): growing the
   * buffer moves it */
  uintptr_t at = (uintptr_t)s, lo = (uintptr_t)t->chars.v;
  bool inside = t->chars.v && at >= lo && at < lo + t->chars.n;
  size_t off = t->chars.n;
  if (len >= SIZE_MAX - off || !GROW(t, t->chars, off + len + 1)) return VR_ENOMEM;
  memcpy(t->chars.v + off, inside ? t->chars.v + (at - lo) : s, len + 1);
  t->chars.n = off + len + 1;
  for (h = hash(t->chars.v + off) & (t->nslots - 1); t->slot_of[h];
       h = (h + 1) & (t->nslots - 1)) {
  }
  t->slot_of[h] = (int32_t)t->strings.n + 1;
  t->strings.v[t->strings.n] = off;
  *index = (int)t->strings.n++;
  return VR_OK;
}

const char *vr_tape_string(const vr_tape *t, int index) {
  return (index >= 0 && (size_t)index < t->strings.n) ? t->chars.v + t->strings.v[index] : NULL;
}

vr_status vr_tape_phase(vr_tape *t, const char *name) {
  int k = -1;
  vr_status st = vr_tape_intern(t, name, &k);
  if (st) return st;
  spoil_all(t);
  t->phase = k;
  if (t->trace && !vr_trace_push(t->trace, (vr_op){VR_OP_PHASE, 0, k, 0, 0, 0, 0, {0}}))
    return VR_ENOMEM;
  return VR_OK;
}

vr_status vr_tape_trace(vr_tape *t, int64_t batch, int64_t seq) {
  spoil_all(t);
  vr_trace_free(t->trace);
  t->trace = vr_trace_new(&t->mem);
  if (!t->trace) return VR_ENOMEM;
  t->trace->batch = batch;
  t->trace->seq = seq;
  t->trace->mark0 = t->marks; /* its marks are numbered from here */
  /* the phase already set belongs to the trace too */
  if (!vr_trace_push(t->trace, (vr_op){VR_OP_PHASE, 0, t->phase, 0, 0, 0, 0, {0}}))
    return VR_ENOMEM;
  return VR_OK;
}

vr_status vr_tape_trace_input(vr_tape *t, int slot, int64_t times, int cat, int label) {
  if (!t->trace) return VR_ENOTRECORD;
  if (slot < 0 || slot >= VR_MAXINPUTS) return VR_EBADID;
  if (cat < 0 || cat >= VR_NCAT) return VR_ECAT;
  spoil_all(t);
  return vr_trace_push(t->trace, (vr_op){VR_OP_INPUT, cat, label, slot, times, 0, 0, {0}})
             ? VR_OK
             : VR_ENOMEM;
}

vr_trace *vr_tape_take_trace(vr_tape *t) {
  vr_trace *tr = t->trace;
  t->trace = NULL;
  return tr;
}

vr_status vr_tape_mark(vr_tape *t, int64_t *live) {
  spoil_all(t);
  *live = t->st.live;
  if (t->trace &&
      !vr_trace_push(t->trace,
                     (vr_op){VR_OP_MARK, 0, -1, t->marks - t->trace->mark0, 0, 0, 0, {0}}))
    return VR_ENOMEM;
  t->marks++;
  return VR_OK;
}

void vr_tape_rounding(vr_tape *t, int64_t small_round, int64_t small_max, int64_t large_round) {
  spoil_all(t);
  t->small_round = small_round > 0 ? small_round : 0;
  t->small_max = small_max > 0 ? small_max : 0;
  t->large_round = large_round > 0 ? large_round : 0;
}

/* Block size the caching allocator hands out for a request of b bytes (a
 * free: minus the block); false when the block overflows int64. */
static bool block_size(const vr_tape *t, int64_t b, int64_t *out) {
  int64_t a = b < 0 ? -b : b; /* b > INT64_MIN: account() negates sizes >= 0 */
  if (t->small_round == 0) {
    *out = b;
    return true;
  }
  return vr_round_up(b, a <= t->small_max ? t->small_round : t->large_round, out);
}

bool vr_tape_block(const vr_tape *t, int64_t bytes, int64_t *block) {
  return bytes >= 0 && block_size(t, bytes, block);
}

/* A change of live bytes kept by the trace and the timeline, when either
 * records: out of line, so that account_r (every alloc, drop and temp)
 * stays small when neither does (estimates). */
__attribute__((noinline)) static vr_status log_delta(vr_tape *t, int64_t delta, int cat,
                                                     int label) {
  if (t->trace && !t->quiet &&
      !vr_trace_push(t->trace, (vr_op){VR_OP_DELTA, cat, label, 0, delta, 0, 0, {0}}))
    return VR_ENOMEM;
  if (t->timeline) {
    vr_tl_event e = {delta, label, t->phase, (int8_t)cat, (int8_t)t->recompute, 1};
    if (t->tl.n) e.starts = vr_tl_new_span(&t->tl.v[t->tl.n - 1], &e);
    vr_tl_piece *last = t->tlp.n ? &t->tlp.v[t->tlp.n - 1] : NULL;
    if (last && last->times == 1 && last->src + last->len == t->tl.n) {
      last->len++; /* the stretch the last events began */
    } else {
      vr_tl_piece p = {t->tl_n, t->tl.n, 1, 1};
      PUSH(t, t->tlp, p, return VR_ENOMEM);
    }
    PUSH(t, t->tl, e, return VR_ENOMEM); /* (a piece too many on failure: the tape fails) */
    if (t->tl_n == 0 || vr_tl_new_span(&t->tl_last, &e)) t->tl_spans++;
    t->tl_last = e;
    t->tl_n++;
  }
  return VR_OK;
}

/* Live bytes change by delta and reserved bytes by block. */
static vr_status account_r(vr_tape *t, int64_t delta, int64_t block, int cat, int label) {
  int64_t live = 0, by_cat = 0, reserved = 0;
  if (!vr_add(t->st.live, delta, &live) || !vr_add(t->st.live_by_cat[cat], delta, &by_cat) ||
      !vr_add(t->st.reserved, block, &reserved))
    return VR_EOVERFLOW; /* nothing changed */
  if ((t->trace || t->timeline) && delta != 0) {
    vr_status st = log_delta(t, delta, cat, label);
    if (st) return st;
  }
  t->st.live = live;
  t->st.live_by_cat[cat] = by_cat;
  t->st.reserved = reserved;
  if (reserved > t->st.peak_reserved) t->st.peak_reserved = reserved;
  if (live > t->watch_peak) t->watch_peak = live;
  if (reserved > t->watch_rpeak) t->watch_rpeak = reserved;
  if (t->st.live > t->phase_peak.v[t->phase]) t->phase_peak.v[t->phase] = t->st.live;
  if (t->st.live > t->st.peak) {
    t->st.peak = t->st.live;
    t->st.peak_phase = t->phase;
    t->st.peak_label = label;
    memcpy(t->st.peak_by_cat, t->st.live_by_cat, sizeof t->st.peak_by_cat);
  }
  if (t->win_open) {
    if (live > t->win.peak) {
      t->win.peak = live;
      memcpy(t->win.peak_by_cat, t->st.live_by_cat, sizeof t->win.peak_by_cat);
    }
    if (reserved > t->win.rpeak) t->win.rpeak = reserved;
  }
  return VR_OK;
}

static vr_status account(vr_tape *t, int64_t delta, int cat, int label) {
  int64_t block = 0;
  if (delta == INT64_MIN || !block_size(t, delta, &block)) return VR_EOVERFLOW;
  return account_r(t, delta, block, cat, label);
}

static bool valid(const vr_tape *t, int64_t id) {
  return id >= 0 && (size_t)id < t->tensors.n && t->tensors.v[id].alive;
}

static vr_status new_tensor(vr_tape *t, int64_t bytes, int cat, int label, bool param,
                            int64_t *id) {
  if (bytes < 0) return VR_EBYTES;
  if (cat < 0 || cat >= VR_NCAT) return VR_ECAT;
  vr_status st = account(t, bytes, cat, label);
  if (st) return st;
  tensor x = {bytes, -1, 1, 1, (int8_t)cat, 1, (int8_t)param, 0};
  PUSH(t, t->tensors, x, return VR_ENOMEM);
  *id = (int64_t)t->tensors.n - 1;
  return VR_OK;
}

static vr_status release(vr_tape *t, int64_t id) {
  tensor *x = &t->tensors.v[id];
  if (x->refs <= 0) return VR_EREFS;
  if (--x->refs == 0) {
    x->alive = 0;
    return account(t, -x->bytes, x->cat, -1);
  }
  return VR_OK;
}

static vr_status record(vr_tape *t, event e) {
  PUSH(t, t->events, e, return VR_ENOMEM);
  return VR_OK;
}

/* Room for k more echoed events in every open echo. */
static bool echo_room(vr_tape *t, size_t k) {
  for (int i = 0; i < t->echo_depth; i++)
    if (!GROW(t, t->echo[i].ev, t->echo[i].ev.n + k)) return false;
  return true;
}

/* An event of the open echoes (room reserved by echo_room). */
static void echoed(vr_tape *t, event e) {
  for (int i = 0; i < t->echo_depth; i++) t->echo[i].ev.v[t->echo[i].ev.n++] = e;
}

/* Room for one more captured op, when a capture is open. */
static bool cap_room(vr_tape *t) { return !t->capturing || GROW(t, t->cap, t->cap.n + 1); }

vr_status vr_tape_alloc(vr_tape *t, int64_t bytes, int cat, int label, bool param,
                        int64_t *id) {
  if (!cap_room(t) || !echo_room(t, 1)) return VR_ENOMEM;
  vr_status st = new_tensor(t, bytes, cat, label, param, id);
  if (st == VR_OK) echoed(t, (event){bytes, *id, EV_ALLOC, label, cat, param});
  if (st == VR_OK && t->recording)
    st = record(t, (event){bytes, *id, EV_ALLOC, label, cat, param});
  if (st == VR_OK && t->capturing)
    t->cap.v[t->cap.n++] = (cap_op){bytes, label, (int8_t)cat, 0, (int8_t)param};
  return st;
}

/* A Python-level reference goes away. */
static vr_status py_release(vr_tape *t, int64_t id) {
  if (t->tensors.v[id].py <= 0) return VR_EREFS;
  t->tensors.v[id].py--;
  return release(t, id);
}

vr_status vr_tape_drop(vr_tape *t, int64_t id) {
  spoil(t);
  if (!valid(t, id) || t->tensors.v[id].bulk) return VR_EBADID;
  if (t->tensors.v[id].py <= 0) return VR_EREFS;
  if (!echo_room(t, 1)) return VR_ENOMEM;
  if (t->recording) {
    vr_status st = record(t, (event){id, 0, EV_DROP, -1, 0, 0});
    if (st) return st;
  }
  echoed(t, (event){id, 0, EV_DROP, -1, 0, 0});
  return py_release(t, id);
}

vr_status vr_tape_replay_drop(vr_tape *t, int64_t id) {
  spoil(t);
  if (!valid(t, id) || t->tensors.v[id].bulk) return VR_EBADID;
  if (!t->recording) return VR_ENOTRECORD;
  if (!echo_room(t, 1)) return VR_ENOMEM;
  echoed(t, (event){id, 0, EV_REPLAY_DROP, -1, 0, 0});
  return record(t, (event){id, 0, EV_DROP, -1, 0, 0});
}

vr_status vr_tape_retain(vr_tape *t, int64_t id) {
  spoil(t);
  if (!valid(t, id) || t->tensors.v[id].bulk) return VR_EBADID;
  if (!echo_room(t, 1)) return VR_ENOMEM;
  if (t->recording) {
    vr_status st = record(t, (event){id, 0, EV_RETAIN, -1, 0, 0});
    if (st) return st;
  }
  echoed(t, (event){id, 0, EV_RETAIN, -1, 0, 0});
  t->tensors.v[id].refs++;
  t->tensors.v[id].py++;
  return VR_OK;
}

vr_status vr_tape_temp(vr_tape *t, int64_t bytes, int cat, int label) {
  if (bytes < 0) return VR_EBYTES;
  if (cat < 0 || cat >= VR_NCAT) return VR_ECAT;
  if (!cap_room(t) || !echo_room(t, 1)) return VR_ENOMEM;
  vr_status st = account(t, bytes, cat, label);
  if (st) return st;
  st = account(t, -bytes, cat, label);
  if (st == VR_OK) echoed(t, (event){bytes, 0, EV_TEMP, label, cat, 0});
  if (st == VR_OK && t->recording) st = record(t, (event){bytes, 0, EV_TEMP, label, cat, 0});
  if (st == VR_OK && t->capturing)
    t->cap.v[t->cap.n++] = (cap_op){bytes, label, (int8_t)cat, 1, 0};
  return st;
}

vr_status vr_tape_capture_begin(vr_tape *t) {
  if (t->recording || t->capturing || t->echo_depth > 0) return VR_ENESTED;
  t->capturing = true;
  t->cap_bad = false;
  t->cap.n = 0;
  t->cap_first = t->tensors.n;
  t->cap_ready = false;
  return VR_OK;
}

vr_status vr_tape_capture_end(vr_tape *t, int64_t *stride, int64_t *first) {
  if (!t->capturing) return VR_ENOTRECORD;
  *first = (int64_t)t->cap_first;
  t->capturing = false;
  size_t allocs = 0;
  for (size_t i = 0; i < t->cap.n; i++) allocs += !t->cap.v[i].temp;
  /* every tensor of the span came from a captured alloc, in order */
  if (t->cap_bad || allocs != t->tensors.n - t->cap_first) {
    *stride = -1;
    t->cap.n = 0;
    return VR_OK;
  }
  *stride = (int64_t)allocs;
  t->cap_next = t->tensors.n;
  t->cap_ready = true;
  return VR_OK;
}

vr_status vr_tape_capture_repeat(vr_tape *t, int64_t times) {
  spoil_all(t); /* its tensors are no echoed allocs */
  /* right after its capture: the copies' ids follow the captured ones */
  if (t->capturing || !t->cap_ready || t->cap_next != t->tensors.n) return VR_ECOMPOSE;
  if (times < 0) return VR_EBYTES;
  /* a C loop no hook interrupts: bounded (a 1000-layer model of 1000
   * parameters is 2^20 operations) */
  if (t->cap.n > 0 && (uint64_t)times > VR_MAX_REPEAT / t->cap.n) return VR_EOVERFLOW;
  vr_status st = VR_OK;
  for (int64_t k = 0; k < times && st == VR_OK; k++)
    for (size_t i = 0; i < t->cap.n && st == VR_OK; i++) {
      cap_op op = t->cap.v[i];
      if (op.temp) {
        st = account(t, op.bytes, op.cat, op.label);
        if (st == VR_OK) st = account(t, -op.bytes, op.cat, op.label);
      } else {
        int64_t id = 0;
        st = new_tensor(t, op.bytes, op.cat, op.label, op.param, &id);
      }
    }
  t->cap_ready = false; /* one repeat per capture */
  t->cap.n = 0;
  return st;
}

static vr_status check_node(const vr_tape *t, const int64_t *saved, int nsaved,
                            const vr_edge *in, int nin, const int64_t *out, int nout) {
  if (nsaved < 0 || nin < 0 || nout < 0) return VR_EBYTES;
  if (nsaved > VR_MAX_EDGES || nin > VR_MAX_EDGES || nout > VR_MAX_EDGES) return VR_ETOOMANY;
  for (int i = 0; i < nsaved; i++)
    if (!valid(t, saved[i])) return VR_EBADID;
  for (int i = 0; i < nout; i++)
    if (!valid(t, out[i])) return VR_EBADID;
  for (int i = 0; i < nin; i++) {
    if (!valid(t, in[i].tensor)) return VR_EBADID;
    if (in[i].alias >= nout) return VR_EALIAS;
    if (in[i].alias < 0 && in[i].bytes < 0) return VR_EBYTES;
  }
  return VR_OK;
}

/* Pushes a node; saved tensors gain a reference unless keep is false. */
static vr_status push_node(vr_tape *t, const int64_t *saved, int nsaved, const vr_edge *in,
                           int nin, const int64_t *out, int nout, int64_t temp, int label,
                           bool keep) {
  node nd = {temp, label, -1, nsaved, nin, nout, t->ids.n, t->edges.n, 0, 0, 0, 0, 0, 0};
  vr_status st = check_node(t, saved, nsaved, in, nin, out, nout);
  if (st) return st;
  /* reserve first so that a failure leaves the tape as it was */
  if (!GROW(t, t->ids, t->ids.n + (size_t)nsaved + (size_t)nout) ||
      !GROW(t, t->edges, t->edges.n + (size_t)nin) || !GROW(t, t->nodes, t->nodes.n + 1))
    return VR_ENOMEM;
  for (int i = 0; i < nsaved; i++) {
    t->ids.v[t->ids.n++] = saved[i];
    if (keep) t->tensors.v[saved[i]].refs++;
  }
  nd.off_out = t->ids.n;
  for (int i = 0; i < nout; i++) t->ids.v[t->ids.n++] = out[i];
  for (int i = 0; i < nin; i++) t->edges.v[t->edges.n++] = in[i];
  t->nodes.v[t->nodes.n++] = nd;
  return VR_OK;
}

/* An echoed event and its items (room reserved): a node's saved, edge and
 * output ids, a checkpoint's inputs (as saved) and outputs. */
static void echo_items(vr_tape *t, event e, const int64_t *saved, int nsaved, const vr_edge *in,
                       int nin, const int64_t *out, int nout) {
  echoed(t, e);
  for (int i = 0; i < nsaved; i++) echoed(t, (event){saved[i], 0, EV_ITEM, 0, 0, 0});
  for (int i = 0; i < nin; i++)
    echoed(t, (event){in[i].tensor, in[i].bytes, EV_ITEM, 0, 0, in[i].alias});
  for (int i = 0; i < nout; i++) echoed(t, (event){out[i], 0, EV_ITEM, 0, 0, 0});
}

/* A node while an echo is open: pushed as usual and echoed in the
 * recording's format (EV_NODE, then its saved, edge and output items). */
static vr_status echo_node(vr_tape *t, const int64_t *saved, int nsaved, const vr_edge *in,
                           int nin, const int64_t *out, int nout, int64_t temp, int label) {
  if (!echo_room(t, 1 + (size_t)nsaved + (size_t)nin + (size_t)nout)) return VR_ENOMEM;
  vr_status st = push_node(t, saved, nsaved, in, nin, out, nout, temp, label, true);
  if (st) return st;
  echo_items(t, (event){temp, 0, EV_NODE, label, nsaved, nin * 65536 + nout}, saved, nsaved, in,
             nin, out, nout);
  return VR_OK;
}

vr_status vr_tape_echo_begin(vr_tape *t) {
  if (t->capturing || t->echo_depth >= VR_ECHO_DEPTH) return VR_ENESTED;
  struct echo_level *l = &t->echo[t->echo_depth];
  if (t->echo_ready >= t->echo_depth) t->echo_ready = -1; /* its buffer is this one's */
  l->bad = false;
  l->rec = t->recording;
  l->ev.n = 0;
  l->lo = (int64_t)t->tensors.n;
  t->echo_depth++;
  return VR_OK;
}

vr_status vr_tape_echo_end(vr_tape *t, bool *ok) {
  if (t->echo_depth == 0) return VR_ENOTRECORD;
  struct echo_level *l = &t->echo[--t->echo_depth];
  l->hi = (int64_t)t->tensors.n;
  /* a checkpointed segment opened or closed inside it (still open, or one
   * that was open at its begin closed) is no echo to replay */
  *ok = !l->bad && t->recording == l->rec;
  t->echo_ready = *ok ? t->echo_depth : -1;
  if (!*ok) l->ev.n = 0;
  return VR_OK;
}

/* An echoed id as the replay sees it: a tensor the echo created becomes
 * its replayed twin (map), one of the pairs its counterpart, one in
 * [lo, hi) itself + delta, any other itself. */
typedef struct {
  const int64_t *map, *from, *to;
  int npairs;
  int64_t lo, hi, delta, echo_lo, echo_hi;
} echo_map;

static int64_t echo_id(const echo_map *m, int64_t x) {
  if (x >= m->echo_lo && x < m->echo_hi) return m->map[x - m->echo_lo];
  for (int k = 0; k < m->npairs; k++)
    if (x == m->from[k]) return m->to[k];
  return (x >= m->lo && x < m->hi) ? x + m->delta : x;
}

/* The items of the node event evs[e], mapped: its saved ids then its
 * outputs into tmp, its edges into etmp. Returns the index of its last. */
static size_t node_items(const event *evs, size_t e, const echo_map *m, int64_t *tmp,
                         vr_edge *etmp) {
  int nsaved = evs[e].cat, nin = evs[e].aux / 65536, nout = evs[e].aux % 65536;
  size_t k = e + 1;
  for (int i = 0; i < nsaved; i++) tmp[i] = echo_id(m, evs[k++].a);
  for (int i = 0; i < nin; i++, k++)
    etmp[i] = (vr_edge){echo_id(m, evs[k].a), evs[k].b, evs[k].aux};
  for (int i = 0; i < nout; i++) tmp[nsaved + i] = echo_id(m, evs[k++].a);
  return k - 1;
}

/* Event *e of an echo inside its checkpointed segment (and the segment's
 * ends), done again through the calls that made it, so that the replayed
 * segment is recorded as the echoed one was, with ids mapped; *e moves to
 * the event's last item. */
static vr_status replay_recorded(vr_tape *t, const event *evs, size_t *e, const echo_map *m,
                                 int64_t *map, int64_t *tmp, vr_edge *etmp) {
  event ev = evs[*e];
  size_t k = *e + 1;
  vr_status st = VR_OK;
  switch (ev.kind) {
    case EV_CKPT_BEGIN:
      return vr_tape_ckpt_begin(t);
    case EV_CKPT_END: {
      int nin = ev.cat, nout = ev.aux;
      for (int i = 0; i < nin + nout; i++) tmp[i] = echo_id(m, evs[k++].a);
      *e = k - 1;
      return vr_tape_ckpt_end(t, tmp, nin, tmp + nin, nout, ev.label);
    }
    case EV_ALLOC: {
      int64_t id = 0;
      st = vr_tape_alloc(t, ev.a, ev.cat, ev.label, ev.aux, &id);
      if (st == VR_OK) map[ev.b - m->echo_lo] = id;
      return st;
    }
    case EV_DROP:
      return vr_tape_drop(t, echo_id(m, ev.a));
    case EV_REPLAY_DROP:
      return vr_tape_replay_drop(t, echo_id(m, ev.a));
    case EV_RETAIN:
      return vr_tape_retain(t, echo_id(m, ev.a));
    case EV_TEMP:
      return vr_tape_temp(t, ev.a, ev.cat, ev.label);
    case EV_NODE: {
      int nsaved = ev.cat, nin = ev.aux / 65536, nout = ev.aux % 65536;
      *e = node_items(evs, *e, m, tmp, etmp);
      return vr_tape_node(t, tmp, nsaved, etmp, nin, tmp + nsaved, nout, ev.a, ev.label);
    }
    default:
      return VR_OK;
  }
}

/* Replays n recorded events (a checkpoint's recording, an echo) with ids
 * mapped by m; map receives the new ids of the tensors they created. tmp
 * and etmp: room for a node's ids and edges (VR_MAX_EDGES each). */
static vr_status replay_events(vr_tape *t, const event *evs, size_t n, const echo_map *m,
                               int64_t *map, int64_t *tmp, vr_edge *etmp) {
  vr_status st = VR_OK;
  for (size_t e = 0; st == VR_OK && e < n; e++) {
    event ev = evs[e];
    int64_t x = ev.kind == EV_DROP || ev.kind == EV_RETAIN ? echo_id(m, ev.a) : -1;
    /* through the calls themselves where they must be recorded: into a
     * checkpoint segment, or into the echoes still open */
    if (t->recording || t->echo_depth > 0 || ev.kind == EV_CKPT_BEGIN ||
        ev.kind == EV_CKPT_END) {
      st = replay_recorded(t, evs, &e, m, map, tmp, etmp);
      continue;
    }
    switch (ev.kind) {
      case EV_ALLOC: {
        int64_t id = 0;
        st = new_tensor(t, ev.a, ev.cat, ev.label, ev.aux, &id);
        if (st == VR_OK) map[ev.b - m->echo_lo] = id;
        break;
      }
      case EV_DROP:
        if (!valid(t, x) || t->tensors.v[x].bulk) st = VR_EBADID;
        else st = py_release(t, x);
        break;
      case EV_RETAIN:
        if (!valid(t, x) || t->tensors.v[x].bulk) {
          st = VR_EBADID;
        } else {
          t->tensors.v[x].refs++;
          t->tensors.v[x].py++;
        }
        break;
      case EV_TEMP:
        st = account(t, ev.a, ev.cat, ev.label);
        if (st == VR_OK) st = account(t, -ev.a, ev.cat, ev.label);
        break;
      case EV_NODE: {
        int nsaved = ev.cat, nin = ev.aux / 65536, nout = ev.aux % 65536;
        e = node_items(evs, e, m, tmp, etmp);
        st = push_node(t, tmp, nsaved, etmp, nin, tmp + nsaved, nout, ev.a, ev.label, true);
        break;
      }
      default:
        break;
    }
  }
  return st;
}

#define ECHO_SMALL 128
vr_status vr_tape_echo_replay(vr_tape *t, const int64_t *from, const int64_t *to, int npairs,
                              int64_t lo, int64_t hi, int64_t delta, const int64_t *query,
                              int nquery, int64_t *answer) {
  /* (an echo replays as often as asked, until the next echo_begin at its
   * level); inside the segment or not, as it was echoed */
  if (t->capturing || t->echo_ready < t->echo_depth) return VR_ECOMPOSE;
  const struct echo_level *l = &t->echo[t->echo_ready];
  if (t->recording != l->rec) return VR_ECOMPOSE;
  int64_t span = l->hi - l->lo;
  /* on the stack unless the echo made many tensors (an expert's dozen is
   * replayed thousands of times in a layout search, stdlib/moe.lua) */
  int64_t small[ECHO_SMALL], tmp[2 * VR_MAX_EDGES];
  vr_edge etmp[VR_MAX_EDGES];
  size_t nmap = (size_t)(span > 0 ? span : 1);
  int64_t *map = nmap <= ECHO_SMALL ? small : (int64_t *)vr_mem_array(&t->mem, nmap, sizeof *map);
  vr_status st = map ? VR_OK : VR_ENOMEM;
  for (int64_t i = 0; st == VR_OK && i < span; i++) map[i] = -1;
  echo_map m = {map, from, to, npairs, lo, hi, delta, l->lo, l->hi};
  /* (an open echo grows its own buffer, never this one: levels below) */
  if (st == VR_OK) st = replay_events(t, l->ev.v, l->ev.n, &m, map, tmp, etmp);
  for (int i = 0; st == VR_OK && i < nquery; i++) answer[i] = echo_id(&m, query[i]);
  if (map != small) vr_mem_free(&t->mem, map, nmap * sizeof *map);
  return st;
}

/* A kept echo, one block: this head, its events (each label the index of
 * one of its texts, -1 for none), the offsets of those texts in chars, the
 * texts (each ending in NUL). */
typedef struct {
  uint64_t magic;
  int64_t lo, hi;
  size_t nev, nlabels, nchars;
  bool rec;
} kept_head;
#define KEPT_MAGIC UINT64_C(0x7672616d6563686f) /* "vramecho" */

/* The events that carry a label (their items do not: they carry 0). */
static bool labelled(const event *e) {
  return (e->kind == EV_ALLOC || e->kind == EV_TEMP || e->kind == EV_NODE ||
          e->kind == EV_CKPT_END) && e->label >= 0;
}

vr_status vr_tape_echo_keep(vr_tape *t, void *buf, size_t cap, size_t *need) {
  *need = 0;
  /* the outermost echo, ended last and still ready; not in a trace or a timeline (their own
   * records follow the calls) */
  if (t->echo_depth != 0 || t->echo_ready != 0 || t->capturing || t->trace || t->timeline)
    return VR_OK;
  const struct echo_level *l = &t->echo[0];
  /* the strings the events name, numbered in the order this tape interned
   * them (the order take interns them in): local index + 1 by string index */
  size_t ns = t->strings.n;
  int32_t *local = (int32_t *)vr_mem_array(&t->mem, ns + 1, sizeof *local);
  if (!local) return VR_ENOMEM;
  memset(local, 0, (ns + 1) * sizeof *local);
  for (size_t e = 0; e < l->ev.n; e++)
    if (labelled(&l->ev.v[e]) && (size_t)l->ev.v[e].label < ns) local[l->ev.v[e].label] = 1;
  size_t nlabels = 0, nchars = 0;
  for (size_t i = 0; i < ns; i++)
    if (local[i]) {
      local[i] = (int32_t)++nlabels;
      nchars += strlen(t->chars.v + t->strings.v[i]) + 1;
    }
  size_t size = sizeof(kept_head) + l->ev.n * sizeof(event) + nlabels * sizeof(size_t) + nchars;
  *need = size;
  if (buf && cap >= size) {
    kept_head *h = (kept_head *)buf;
    event *evs = (event *)(h + 1);
    size_t *offs = (size_t *)(evs + l->ev.n);
    char *chars = (char *)(offs + nlabels);
    *h = (kept_head){KEPT_MAGIC, l->lo, l->hi, l->ev.n, nlabels, nchars, l->rec};
    for (size_t i = 0, at = 0; i < ns; i++)
      if (local[i]) {
        const char *text = t->chars.v + t->strings.v[i];
        size_t len = strlen(text) + 1;
        offs[local[i] - 1] = at;
        memcpy(chars + at, text, len);
        at += len;
      }
    for (size_t e = 0; e < l->ev.n; e++) {
      evs[e] = l->ev.v[e];
      if (labelled(&evs[e])) evs[e].label = (size_t)evs[e].label < ns ? local[evs[e].label] - 1 : -1;
    }
  }
  vr_mem_free(&t->mem, local, (ns + 1) * sizeof *local);
  return VR_OK;
}

/* Whether the echo's id x (one it did not create) is one the mapping
 * names, and its counterpart a live tensor of t. */
static bool covered(const vr_tape *t, const echo_map *m, int64_t x) {
  for (int k = 0; k < m->npairs; k++)
    if (x == m->from[k]) return valid(t, m->to[k]);
  return x >= m->lo && x < m->hi && valid(t, x + m->delta);
}

vr_status vr_tape_echo_take(vr_tape *t, const void *buf, size_t size, const int64_t *from,
                            const int64_t *to, int npairs, int64_t lo, int64_t hi, int64_t delta,
                            bool *ok) {
  *ok = false;
  const kept_head *h = (const kept_head *)buf;
  if (size < sizeof *h || h->magic != KEPT_MAGIC ||
      size != sizeof *h + h->nev * sizeof(event) + h->nlabels * sizeof(size_t) + h->nchars)
    return VR_ECOMPOSE;
  if (t->echo_depth != 0 || t->capturing || t->trace || t->timeline || t->recording != h->rec)
    return VR_OK;
  const event *evs = (const event *)(h + 1);
  const size_t *offs = (const size_t *)(evs + h->nev);
  const char *chars = (const char *)(offs + h->nlabels);
  /* every id the echo names but did not create must be mapped to a live
   * tensor here: a pair's, or one of the range's */
  echo_map m = {NULL, from, to, npairs, lo, hi, delta, h->lo, h->hi};
  for (size_t e = 0; e < h->nev; e++) {
    const event *ev = &evs[e];
    bool names = ev->kind == EV_DROP || ev->kind == EV_RETAIN || ev->kind == EV_REPLAY_DROP ||
                 ev->kind == EV_ITEM;
    if (names && (ev->a < h->lo || ev->a >= h->hi) && !covered(t, &m, ev->a)) return VR_OK;
  }
  struct echo_level *l = &t->echo[0];
  /* the texts' indices on this tape, interned in the order the echo's
   * tape interned them */
  int *index = (int *)vr_mem_array(&t->mem, h->nlabels + 1, sizeof *index);
  vr_status st = index ? VR_OK : VR_ENOMEM;
  for (size_t k = 0; st == VR_OK && k < h->nlabels; k++) st = vr_tape_intern(t, chars + offs[k], &index[k]);
  if (st == VR_OK && !GROW(t, l->ev, h->nev)) st = VR_ENOMEM;
  if (st == VR_OK) {
    for (size_t e = 0; e < h->nev; e++) {
      event ev = evs[e];
      if (labelled(&ev)) ev.label = index[ev.label];
      l->ev.v[e] = ev;
    }
    l->ev.n = h->nev;
    l->bad = false;
    l->rec = h->rec;
    l->lo = h->lo;
    l->hi = h->hi;
    t->echo_ready = 0;
    *ok = true;
  }
  if (index) vr_mem_free(&t->mem, index, (h->nlabels + 1) * sizeof *index);
  return st;
}

vr_status vr_tape_node(vr_tape *t, const int64_t *saved, int nsaved, const vr_edge *in,
                       int nin, const int64_t *out, int nout, int64_t temp, int label) {
  if (temp < 0) return VR_EBYTES;
  spoil(t);
  if (!t->recording && t->echo_depth > 0) return echo_node(t, saved, nsaved, in, nin, out, nout, temp, label);
  if (!t->recording)
    return push_node(t, saved, nsaved, in, nin, out, nout, temp, label, true);
  vr_status chk = check_node(t, saved, nsaved, in, nin, out, nout);
  if (chk) return chk;
  if (!echo_room(t, 1 + (size_t)nsaved + (size_t)nin + (size_t)nout)) return VR_ENOMEM;
  echo_items(t, (event){temp, 0, EV_NODE, label, nsaved, nin * 65536 + nout}, saved, nsaved, in,
             nin, out, nout);
  /* Inside a checkpointed segment nothing is saved now: the node is only
   * recorded, and recreated when backward recomputes the segment. */
  vr_status st = record(t, (event){temp, 0, EV_NODE, label, nsaved, nin * 65536 + nout});
  for (int i = 0; st == VR_OK && i < nsaved; i++)
    st = record(t, (event){saved[i], 0, EV_ITEM, 0, 0, 0});
  for (int i = 0; st == VR_OK && i < nin; i++)
    st = record(t, (event){in[i].tensor, in[i].bytes, EV_ITEM, 0, 0, in[i].alias});
  for (int i = 0; st == VR_OK && i < nout; i++)
    st = record(t, (event){out[i], 0, EV_ITEM, 0, 0, 0});
  return st;
}

vr_status vr_tape_bulk(vr_tape *t, int64_t per_iter, int64_t per_iter_reserved, int64_t iters,
                       const vr_edge *edges, int nper, int label, int *index) {
  int64_t total = 0, rtotal = 0, n = 0;
  vr_edge *copy = NULL;
  vr_status st = VR_OK;
  int slot = 0; /* a finished bulk's slot is reused */
  spoil_all(t);
  if (t->recording) return VR_ENESTED;
  if (per_iter < 0 || iters < 0 || nper < 0) return VR_EBYTES;
  if (iters == 0) nper = 0; /* no layers: no edges to read, whatever nper says */
  while (slot < t->nbulks && t->bulks[slot].edges) slot++;
  if (slot >= VR_MAX_BULKS) return VR_ETOOMANY;
  /* the layer's two marks are missing */
  if (t->trace && t->marks - t->trace->mark0 < 2) return VR_ECOMPOSE;
  if (!vr_mul(per_iter, iters, &total) || !vr_mul(iters, nper, &n) ||
      !vr_mul(per_iter_reserved < 0 ? 0 : per_iter_reserved, iters, &rtotal) ||
      (uint64_t)n > SIZE_MAX / sizeof *copy)
    return VR_EOVERFLOW;
  for (int64_t i = 0; i < n; i++)
    if (!valid(t, edges[i].tensor) || edges[i].bytes < 0) return VR_EBADID;
  /* room for the tensor, the node and the trace's op first: once the copy
   * exists the only failure left is an overflow, through `out` */
  if (!GROW(t, t->tensors, t->tensors.n + 1) || !GROW(t, t->nodes, t->nodes.n + 1) ||
      (t->trace && !vr_mem_grow(&t->trace->mem, (void **)&t->trace->ops, &t->trace->cap,
                                t->trace->n + 1, sizeof *t->trace->ops, 256)))
    return VR_ENOMEM;
  copy = (vr_edge *)vr_mem_array(&t->mem, (size_t)(n > 0 ? n : 1), sizeof *copy);
  if (!copy) return VR_ENOMEM;
  if (n > 0) memcpy(copy, edges, (size_t)n * sizeof *copy);
  t->quiet = true;
  st = account_r(t, total, rtotal, VR_CAT_ACTIV, label);
  t->quiet = false;
  if (st) goto out;
  /* cannot fail: reserved above */
  if (t->trace)
    vr_trace_push(t->trace, (vr_op){VR_OP_BULK_FWD, VR_CAT_ACTIV, label, slot, iters,
                                    t->marks - 2 - t->trace->mark0, 0, {0}});
  /* cannot fail: room for the tensor and the node was reserved above */
  t->tensors.v[t->tensors.n++] = (tensor){total, -1, 1, 1, VR_CAT_ACTIV, 1, 0, 1};
  bulk *b = &t->bulks[slot];
  *b = (bulk){(int64_t)t->tensors.n - 1, per_iter, per_iter_reserved, iters, rtotal, copy, nper,
              t->nodes.n, 0, false, 0, 0, (size_t)(n > 0 ? n : 1)};
  copy = NULL; /* the bulk owns it now */
  node nd = {0, label, slot, 0, 0, 0, t->ids.n, t->edges.n, t->ids.n, 0, 0, 0, 0, 0};
  t->nodes.v[t->nodes.n++] = nd;
  *index = slot;
  if (slot == t->nbulks) t->nbulks++;
out:
  if (copy) vr_mem_free(&t->mem, copy, (size_t)(n > 0 ? n : 1) * sizeof *copy);
  return st;
}

vr_status vr_tape_bulk_end(vr_tape *t, int index) {
  spoil_all(t);
  if (index < 0 || index >= t->nbulks) return VR_EBADID;
  t->bulks[index].watch_hi = t->nodes.n;
  return VR_OK;
}

vr_status vr_tape_ckpt_begin(vr_tape *t) {
  spoil(t);
  if (t->recording) return VR_ENESTED;
  if (!echo_room(t, 1)) return VR_ENOMEM;
  echoed(t, (event){0, 0, EV_CKPT_BEGIN, -1, 0, 0});
  t->recording = true;
  t->rec_ev_lo = t->events.n;
  t->rec_id_lo = (int64_t)t->tensors.n;
  return VR_OK;
}

vr_status vr_tape_ckpt_end(vr_tape *t, const int64_t *inputs, int nin, const int64_t *out,
                           int nout, int label) {
  spoil(t);
  if (!t->recording) return VR_ENOTRECORD;
  if (!echo_room(t, 1 + (size_t)(nin > 0 ? nin : 0) + (size_t)(nout > 0 ? nout : 0)))
    return VR_ENOMEM;
  t->recording = false;
  vr_status st = push_node(t, inputs, nin, NULL, 0, out, nout, 0, label, true);
  if (st) return st;
  echo_items(t, (event){0, 0, EV_CKPT_END, label, nin, nout}, inputs, nin, NULL, 0, out, nout);
  node *nd = &t->nodes.v[t->nodes.n - 1];
  nd->ckpt = 1;
  nd->ev_lo = t->rec_ev_lo;
  nd->ev_hi = t->events.n;
  nd->id_lo = t->rec_id_lo;
  nd->id_hi = (int64_t)t->tensors.n;
  return VR_OK;
}

static vr_status free_grad(vr_tape *t, int64_t id) {
  int64_t g = t->tensors.v[id].grad;
  t->tensors.v[id].grad = -1;
  return g >= 0 ? release(t, g) : VR_OK;
}

static vr_status run_node(vr_tape *t);

/* Runs the top node; first starts any bulk measurement that begins here. */
static vr_status next_node(vr_tape *t) {
  for (int i = 0; i < t->nbulks; i++) {
    bulk *b = &t->bulks[i];
    if (!b->measuring && b->watch_hi > 0 && t->nodes.n == b->watch_hi) {
      b->measuring = true;
      if (t->trace && !vr_trace_push(t->trace, (vr_op){VR_OP_MEASURE, 0, -1, i, 0, 0, 0, {0}}))
        return VR_ENOMEM;
      b->start = t->st.live;
      b->rstart = t->st.reserved;
      t->watch_peak = t->st.live;
      t->watch_rpeak = t->st.reserved;
    }
  }
  return run_node(t);
}

/* Backward of a checkpoint node: recompute the segment with saving on, hand
 * the segment outputs' gradients to their recomputed twins, run the
 * recomputed nodes, then let the recomputed outputs go. */
static vr_status run_ckpt(vr_tape *t, node nd, const int64_t *outs) {
  vr_status st = VR_OK;
  int64_t span = nd.id_hi - nd.id_lo;
  size_t nmap = (size_t)(span > 0 ? span : 1);
  int64_t *map = (int64_t *)vr_mem_array(&t->mem, nmap, sizeof *map);
  /* a recorded node has at most 64 of each: room for the largest */
  int64_t *tmp = (int64_t *)vr_mem_array(&t->mem, 2 * VR_MAX_EDGES, sizeof *tmp);
  vr_edge *etmp = (vr_edge *)vr_mem_array(&t->mem, VR_MAX_EDGES, sizeof *etmp);
  size_t base = t->nodes.n;
  if (!map || !tmp || !etmp) st = VR_ENOMEM;
  for (int64_t i = 0; st == VR_OK && i < span; i++) map[i] = -1;
  echo_map m = {map, NULL, NULL, 0, 0, 0, 0, nd.id_lo, nd.id_hi}; /* the segment's own */
#define MAP(x) echo_id(&m, (x))
  t->recompute = true;
  if (st == VR_OK)
    /* (a segment that recorded nothing may have no event array at all) */
    st = replay_events(t, t->events.v ? t->events.v + nd.ev_lo : NULL, nd.ev_hi - nd.ev_lo, &m,
                       map, tmp, etmp);
  t->recompute = false;
  /* The recomputed outputs stand in for the originals in backward. */
  for (int i = 0; st == VR_OK && i < nd.nout; i++) {
    int64_t orig = outs[i], twin = MAP(orig);
    if (twin == orig || !valid(t, twin)) continue;
    t->tensors.v[twin].grad = t->tensors.v[orig].grad;
    t->tensors.v[orig].grad = -1;
    st = py_release(t, twin); /* the recompute's own reference to its output */
  }
#undef MAP
  while (st == VR_OK && t->nodes.n > base) st = next_node(t);
  vr_mem_free(&t->mem, map, nmap * sizeof *map);
  vr_mem_free(&t->mem, tmp, 2 * VR_MAX_EDGES * sizeof *tmp);
  vr_mem_free(&t->mem, etmp, VR_MAX_EDGES * sizeof *etmp);
  return st;
}

static vr_status run_bulk_body(vr_tape *t, bulk *b);

/* The bulk's backward: the measured layer's pattern, iters times. */
static vr_status run_bulk(vr_tape *t, bulk *b) {
  vr_status st = VR_OK;
  if (!b->measuring) return VR_ECOMPOSE; /* the last layer's nodes never ran */
  if (!t->tensors.v[b->tensor].alive) {
    /* its activations were dropped by id before the backward reached it:
     * releasing them again would make live bytes negative (fuzz_hostile) */
    free_bulk(t, b);
    b->watch_hi = 0;
    return VR_EBADID;
  }
  if (t->trace) {
    /* a layer's new gradients: their sum, and each one (GRAD) so that a
     * program rounds them to its own block */
    int64_t g = 0;
    for (int k = 0; k < b->nper; k++) {
      vr_edge e = b->edges[k];
      if (t->tensors.v[e.tensor].grad < 0 && !vr_add(g, e.bytes, &g)) return VR_EOVERFLOW;
    }
    if (!vr_trace_push(t->trace, (vr_op){VR_OP_BULK_BWD, t->tensors.v[b->tensor].cat, -1,
                                         (int32_t)(b - t->bulks), b->iters, g, 0, {0}}))
      return VR_ENOMEM;
    for (int k = 0; k < b->nper; k++) {
      vr_edge e = b->edges[k];
      if (t->tensors.v[e.tensor].grad < 0 &&
          !vr_trace_push(t->trace, (vr_op){VR_OP_GRAD, VR_CAT_GRADS, -1, 0, e.bytes, 0, 0, {0}}))
        return VR_ENOMEM;
    }
    t->quiet = true;
  }
  st = run_bulk_body(t, b);
  t->quiet = false;
  return st;
}

static vr_status run_bulk_body(vr_tape *t, bulk *b) {
  vr_status st = VR_OK;
  int64_t excursion = 0, net = 0, rexcursion = 0, rnet = 0;
  tensor *bt = &t->tensors.v[b->tensor];
  if (!vr_sub(t->watch_peak, b->start, &excursion) || !vr_sub(t->st.live, b->start, &net) ||
      !vr_sub(t->watch_rpeak, b->rstart, &rexcursion) ||
      !vr_sub(t->st.reserved, b->rstart, &rnet))
    st = VR_EOVERFLOW;
  for (int64_t j = 0; j < b->iters && st == VR_OK; j++) {
    st = account_r(t, excursion, rexcursion, VR_CAT_TEMP, -1);
    if (st == VR_OK) st = account_r(t, -excursion, -rexcursion, VR_CAT_TEMP, -1);
    /* The layer's new gradients (a parameter listed twice gets one) and
     * its share of the bulk, released before they are made: the walked
     * layer frees its saved tensors while it makes them, reaching no
     * higher than the excursion above, so the share goes first (making
     * every gradient first would rise by all of them at once: above the
     * walk when a layer's gradients outweigh its excursion, e.g. fp32
     * gradients of bf16 casts under autocast). */
    const vr_edge *es = b->edges + j * b->nper;
    int64_t grads = 0, rgrads = 0, block = 0, rel = 0, rrel = 0;
    for (int k = 0; k < b->nper && st == VR_OK; k++) {
      tensor *p = &t->tensors.v[es[k].tensor];
      if (p->grad != -1) continue; /* accumulates in place (or counted: -2) */
      p->grad = -2;
      if (!vr_add(grads, es[k].bytes, &grads) || !block_size(t, es[k].bytes, &block) ||
          !vr_add(rgrads, block, &rgrads))
        st = VR_EOVERFLOW;
    }
    for (int k = 0; k < b->nper; k++) /* the marks go before anything can fail */
      if (t->tensors.v[es[k].tensor].grad == -2) t->tensors.v[es[k].tensor].grad = -1;
    if (st == VR_OK && (!vr_sub(grads, net, &rel) || !vr_sub(rgrads, rnet, &rrel)))
      st = VR_EOVERFLOW;
    bt = &t->tensors.v[b->tensor];
    if (st == VR_OK && (rel < 0 || rel > bt->bytes || rrel < 0 || rrel > b->reserved_left))
      st = VR_ECOMPOSE;
    if (st == VR_OK) {
      st = account_r(t, -rel, -rrel, bt->cat, -1);
      bt->bytes -= rel;
      b->reserved_left -= rrel;
    }
    for (int k = 0; k < b->nper && st == VR_OK; k++) {
      vr_edge e = es[k];
      if (t->tensors.v[e.tensor].grad >= 0) continue; /* made above for a repeat */
      int64_t g = 0;
      st = new_tensor(t, e.bytes, VR_CAT_GRADS, -1, false, &g);
      if (st == VR_OK) t->tensors.v[e.tensor].grad = g;
    }
  }
  if (st == VR_OK) {
    /* what is left is rounding; the bulk goes with its reserved share */
    bt = &t->tensors.v[b->tensor];
    st = account_r(t, -bt->bytes, -b->reserved_left, bt->cat, -1);
    bt->bytes = 0;
    bt->alive = 0;
  }
  free_bulk(t, b); /* the slot is free again */
  b->watch_hi = 0;
  return st;
}

static vr_status run_node(vr_tape *t) {
  node nd = t->nodes.v[--t->nodes.n];
  if (nd.bulk >= 0) {
    t->ids.n = nd.off_saved;
    t->edges.n = nd.off_in;
    return run_bulk(t, &t->bulks[nd.bulk]);
  }
  /* (a node without saved tensors or edges may sit on empty pools) */
  const int64_t *saved = t->ids.v ? t->ids.v + nd.off_saved : NULL;
  const int64_t *outs = t->ids.v ? t->ids.v + nd.off_out : NULL;
  const vr_edge *in = t->edges.v ? t->edges.v + nd.off_in : NULL;
  vr_status st = VR_OK;
  bool any = false;
  for (int i = 0; i < nd.nout; i++) any |= t->tensors.v[outs[i]].grad >= 0;

  if (nd.ckpt) {
    size_t nkeep = (size_t)(nd.nsaved + nd.nout + 1);
    int64_t *keep = (int64_t *)vr_mem_array(&t->mem, nkeep, sizeof *keep);
    if (!keep) return VR_ENOMEM;
    if (nd.nsaved + nd.nout > 0) memcpy(keep, saved, (size_t)(nd.nsaved + nd.nout) * sizeof *keep);
    t->ids.n = nd.off_saved;
    t->edges.n = nd.off_in;
    if (any) st = run_ckpt(t, nd, keep + nd.nsaved);
    for (int i = 0; i < nd.nout && st == VR_OK; i++) st = free_grad(t, keep[nd.nsaved + i]);
    for (int i = 0; i < nd.nsaved && st == VR_OK; i++) st = release(t, keep[i]);
    t->events.n = nd.ev_lo;
    vr_mem_free(&t->mem, keep, nkeep * sizeof *keep);
    return st;
  }

  int64_t pending[VR_MAX_EDGES];
  int npending = 0;
  bool moved[VR_MAX_EDGES] = {false};
  if (any) {
    for (int i = 0; i < nd.nin && st == VR_OK; i++) {
      tensor *x = &t->tensors.v[in[i].tensor];
      if (in[i].alias >= 0) {
        int64_t g = t->tensors.v[outs[in[i].alias]].grad;
        if (g < 0 || x->grad == g) continue;
        if (x->grad < 0) {
          /* the same gradient tensor reaches several inputs (add, views) */
          if (moved[in[i].alias]) t->tensors.v[g].refs++;
          x->grad = g;
          moved[in[i].alias] = true;
        }
        continue; /* accumulated in place: the output grad is freed below */
      }
      int cat = x->param ? VR_CAT_GRADS : x->cat;
      int64_t g = 0;
      st = new_tensor(t, in[i].bytes, cat, nd.label, false, &g);
      if (st) break;
      x = &t->tensors.v[in[i].tensor]; /* new_tensor may move the array */
      if (x->grad < 0)
        x->grad = g;
      else
        pending[npending++] = g;
    }
    if (st == VR_OK && nd.temp > 0) {
      st = account(t, nd.temp, VR_CAT_TEMP, nd.label);
      if (st == VR_OK) st = account(t, -nd.temp, VR_CAT_TEMP, nd.label);
    }
  }
  for (int i = 0; i < nd.nout && st == VR_OK; i++) {
    if (moved[i])
      t->tensors.v[outs[i]].grad = -1;
    else
      st = free_grad(t, outs[i]);
  }
  for (int i = 0; i < nd.nsaved && st == VR_OK; i++) st = release(t, saved[i]);
  for (int i = 0; i < npending && st == VR_OK; i++) st = release(t, pending[i]);
  t->ids.n = nd.off_saved;
  t->edges.n = nd.off_in;
  return st;
}

vr_status vr_tape_backward(vr_tape *t, int64_t root) {
  vr_status st = VR_OK;
  spoil_all(t);
  if (t->recording) return VR_ENESTED;
  if (root >= 0) {
    if (!valid(t, root)) return VR_EBADID;
    if (t->tensors.v[root].grad < 0) {
      int64_t g = 0;
      st = new_tensor(t, t->tensors.v[root].bytes, t->tensors.v[root].cat, -1, false, &g);
      if (st) return st;
      t->tensors.v[root].grad = g;
    }
  }
  while (st == VR_OK && t->nodes.n > 0) st = next_node(t);
  return st;
}

vr_status vr_tape_zero_grad(vr_tape *t) {
  vr_status st = VR_OK;
  spoil_all(t);
  for (size_t i = 0; i < t->tensors.n && st == VR_OK; i++)
    if (t->tensors.v[i].param) st = free_grad(t, (int64_t)i);
  return st;
}

void vr_tape_timeline(vr_tape *t, bool on) {
  spoil_all(t);
  t->timeline = on;
}

size_t vr_tape_timeline_len(const vr_tape *t) { return t->tl_n; }

/* The piece holding event i (< tl_n): the last starting at or before it. */
static const vr_tl_piece *piece_of(const vr_tape *t, size_t i) {
  size_t lo = 0, hi = t->tlp.n; /* tlp.v[lo].first <= i < tlp.v[hi].first */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (t->tlp.v[mid].first <= i) lo = mid;
    else hi = mid;
  }
  return &t->tlp.v[lo];
}

vr_status vr_tape_timeline_repeat(vr_tape *t, size_t from, size_t to, int64_t times) {
  spoil_all(t);
  if (from > to || to > t->tl_n || times < 0) return VR_EBADID;
  size_t span = to - from;
  if (span == 0 || times == 0) return VR_OK;
  /* copies cost nothing to keep but every one is walked when collected:
   * at most VR_TL_MAX events in all (as copies, the memory budget bounded them) */
  if (t->tl_n >= VR_TL_MAX || (uint64_t)times > (VR_TL_MAX - t->tl_n) / span) return VR_EOVERFLOW;
  /* where the range's events are kept in a row: inside one stretch piece,
   * else (it spans pieces) kept again once, in a row, and repeated from there */
  const vr_tl_piece *p = piece_of(t, from);
  size_t src = 0;
  if (p->times == 1 && to <= p->first + p->len) {
    src = p->src + (from - p->first);
  } else {
    if (!GROW(t, t->tl, t->tl.n + span)) return VR_ENOMEM;
    src = t->tl.n;
    for (size_t i = from; i < to; i++) t->tl.v[t->tl.n++] = *vr_tape_timeline_at(t, i);
    for (size_t i = src; i < t->tl.n; i++) /* their marks, against their new neighbours */
      t->tl.v[i].starts = i == 0 || vr_tl_new_span(&t->tl.v[i - 1], &t->tl.v[i]);
  }
  /* the spans the copies add: the range's own boundaries in each copy, the
   * boundary into the first copy and the one between copies */
  const vr_tl_event *r = t->tl.v + src;
  size_t inner = 0;
  for (size_t j = 1; j < span; j++) inner += vr_tl_new_span(&r[j - 1], &r[j]);
  size_t add = vr_tl_new_span(&t->tl_last, &r[0]) + inner +
               (size_t)(times - 1) * (vr_tl_new_span(&r[span - 1], &r[0]) + inner);
  vr_tl_piece q = {t->tl_n, src, span, times};
  PUSH(t, t->tlp, q, return VR_ENOMEM);
  t->tl_n += span * (size_t)times;
  t->tl_spans += add;
  t->tl_last = r[span - 1];
  return VR_OK;
}

size_t vr_tape_timeline_spans(const vr_tape *t) { return t->tl_spans; }

const vr_tl_event *vr_tape_timeline_at(const vr_tape *t, size_t i) {
  if (i >= t->tl_n) return NULL;
  const vr_tl_piece *p = piece_of(t, i);
  return &t->tl.v[p->src + (i - p->first) % p->len];
}

const vr_tl_event *vr_tape_timeline_pieces(const vr_tape *t, const vr_tl_piece **pieces,
                                           size_t *npieces) {
  *pieces = t->tlp.v;
  *npieces = t->tlp.n;
  return t->tl.v;
}

int64_t vr_tape_grad(const vr_tape *t, int64_t id) {
  return valid(t, id) ? t->tensors.v[id].grad : -1;
}

int64_t vr_tape_bytes(const vr_tape *t, int64_t id) {
  return valid(t, id) ? t->tensors.v[id].bytes : -1;
}

int vr_tape_refs(const vr_tape *t, int64_t id) {
  return valid(t, id) ? t->tensors.v[id].refs : 0;
}

void vr_tape_stats_get(const vr_tape *t, vr_tape_stats *s) { *s = t->st; }

void vr_tape_window_open(vr_tape *t) {
  t->win_open = true;
  t->win.start = t->win.peak = t->st.live;
  t->win.rstart = t->win.rpeak = t->st.reserved;
  memcpy(t->win.peak_by_cat, t->st.live_by_cat, sizeof t->win.peak_by_cat);
}

void vr_tape_window_get(const vr_tape *t, vr_tape_window *w) { *w = t->win; }

int64_t vr_tape_phase_peak(const vr_tape *t, int index) {
  return (index >= 0 && (size_t)index < t->strings.n) ? t->phase_peak.v[index] : 0;
}

int vr_tape_nstrings(const vr_tape *t) { return (int)t->strings.n; }
