/* What the parts of the cuda detector's C callback share: CUPTI's structs as read here, the
 * callback table's entries, the per-thread state, the Call object kept for a region, and the
 * configuration every part reads. Public CPython API only; the interpreter's internals are read
 * in frames.c alone, through cpython_internals.h.
 *
 * The parts, bottom to top: table.c (the callback ids and what each call's parameters say),
 * routing.c (which threads the callback works for; the gate a hand-over closes), frames.c (the user's frame and site; where the thread is), call.c (the Call type),
 * pairing.c (pairing and folding a call into the thread's last one), callback.c (the CUPTI
 * callback and the recording), pointers.c and combine.c (a region's calls into events at its
 * exit), lock.c (the hub's lock), regions.c (a region of the cuda detector alone, entered and
 * left in one call each), module.c (the Python-facing functions and the module).
 */
#ifndef SYNCGUARD_CUPTIFAST_H
#define SYNCGUARD_CUPTIFAST_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if PY_VERSION_HEX < 0x030B0000
#error "_cuptifast needs CPython 3.11 or newer"
#endif

/* The GIL-free repeat (pairing.c: repeat()) reads this thread's own interpreter frames and
 * context, kept in CPython's internal structures: only where cpython_internals.h knows their
 * layout (CPython 3.11 to 3.13 with the GIL). Elsewhere every kept call takes the GIL. */
#if PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define REPEAT 1
#else
#define REPEAT 0
#endif

/* Nothing but the module's init function leaves the shared object. */
#pragma GCC visibility push(hidden)

/* CUpti_CallbackData (cupti_callbacks.h) and the parameter structs read, as in cupti.py */
typedef struct {
    int callbackSite;
    const char *functionName;
    const void *functionParams;
    void *functionReturnValue;
    const char *symbolName;
    void *context;
    uint32_t contextUid;
    uint64_t *correlationData;
    uint32_t correlationId;
} CallbackData;
typedef struct { void *dst; const void *src; size_t count; int kind; void *stream; } MemcpyParams;
/* cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2 (+ the stream for the Async ones): dst, src, bytes */
typedef struct { uint64_t dst; uint64_t src; size_t count; void *stream; } DriverCopyParams;
typedef struct {
    void *dst; size_t dpitch; const void *src; size_t spitch; size_t width; size_t height;
    int kind; void *stream;
} Memcpy2DParams;

enum { ROLE_SYNC = 1, ROLE_COPY = 2, ROLE_FREE = 3 };
enum { SPEC_NONE = 0, SPEC_STREAM = 1, SPEC_MEMCPY = 2, SPEC_MEMCPY2D = 3, SPEC_DRV_COPY = 4,
       SPEC_DRV_COPY_ASYNC = 5 };
enum { DIR_NONE = 0, DIR_H2D = 1, DIR_D2H = 2, DIR_D2D = 3, DIR_H2H = 4 };
/* MODE_PAIRED: the thread's stream sync in flight rides on its kept copy (see pair_with()) */
enum { MODE_IDLE = 0, MODE_KEPT = 1, MODE_PYTHON = 2, MODE_PAIRED = 3 };
#define MAXCB 4096
#define MAXCORR 8
#define MAXIDS 512

/* ---- table.c: the callback table ---------------------------------------------------------- */
typedef struct { int8_t used, role, dir, is_async, spec, stream_sync; int16_t index; } Entry;
extern Entry entries[3][MAXCB];
/* A call's own parameters, read from CUPTI's callback data: plain reads, no Python. */
typedef struct { int dir, has_stream, has_ptrs; uint64_t stream, src, dst, nbytes; } Params;
void read_params(const Entry *e, const CallbackData *d, Params *q);
/* The names tuple (apis, roles, kinds) of a table {(domain, cbid): (api, role, kind, is_async,
 * spec, dir)}, its entries in force from then on; NULL with an exception and nothing changed
 * where the table is not one. */
PyObject *table_load(PyObject *table);
typedef int (*EnableFn)(uint32_t enable, void *subscriber, int domain, int cbid);
int switch_all(EnableFn enable, void *handle, int on);

/* ---- routing.c: the routing table and the gate ---------------------------------------------- */
/* with the GIL: the regions open on ``thread`` changed by ``delta``; the count now */
int route(uint64_t thread, int delta);
void route_backward(int delta);
/* without the GIL: whether a callback on this thread must look at the call (see routing.c) */
int routed(void);
PyObject *routes_dict(void); /* ({thread: regions}, overflow, backward) */
void routes_clear(void);
int gate_enter(void);  /* 0: closed, return at once (nothing counted) */
void gate_leave(void);
void gate_close(void);
void gate_open(void);
int gate_closed(void);
int gate_drain(int64_t timeout_ns);

/* ---- module.c: the configuration (configure()), strong references held until the next ---- */
extern PyObject *regions_var, *allows_var;
extern PyObject *backward_active; /* dict, non-empty while a region's backward pass runs */
extern PyObject *thread_active;   /* threading._active (None: unknown), for engine_owner() */
extern PyObject *dummy_thread;    /* threading._DummyThread */
extern PyObject *py_callback;     /* callable(userdata, domain, cbid, cbdata): the Python path */
extern PyObject *compiling;       /* callable() -> None/False unless torch.compile is compiling */
extern PyObject *compile_tls;     /* torch._guards._TLS (a threading.local), or None: then call
                                     ``compiling`` (see attribution.compile_context_tls) */
extern PyObject *code_cache;      /* dict id(code) -> (class, code): attribution._code_cache */
extern PyObject *code_class;      /* callable(code) -> int: attribution._code_class */
extern PyObject *site_cache;      /* dict: 64-bit stack hash -> (Site, codes) */
extern PyObject *make_site;       /* callable(key, ((code, line), ...)) -> Site, caches it */
extern PyObject *thread_name;     /* callable() -> str */
extern PyObject *call_type;       /* CudaCall (a tuple subclass) */
extern PyObject *no_site;         /* Site() */
/* interned strings and constants, made by the module's init */
extern PyObject *s_cuda, *s_dir[5], *s_phase[3], *s_observations, *s_empty, *s_nothread, *s_dict,
                *s_compile_context, *s_filename, *s_lineno, *s_function, *s_stack, *s_source,
                *s_pinned, *s_pageable;
extern int stack_depth;
extern volatile long generation;  /* bumped: every thread's depth and call in flight are stale */
extern long config_epoch;         /* bumped by configure(): every thread's tls_dict is stale */
/* Bumped whenever a region or allow is entered or left on any thread (scopes_changed(), from
 * regions/region.py), when the callbacks go off (forget()) and by configure(): no thread's next call is
 * then a repeat of its last (pairing.c). */
extern volatile long scopes_epoch;
extern int folding;               /* fold runs of like copies (host memory told by pointer) */
extern long errors;               /* exceptions swallowed inside the callback */

/* ---- callback.c: where a callback's time goes, for bench/bench_overhead.py ----------------
 * Off unless timing(True) was called; then a clock read per piece (so the pieces' sum is above
 * the untimed cost). Summed by the thread that ran the piece, without a lock: one thread is
 * timed at a time. */
enum { P_CALLBACK, P_NESTED, P_ENTER_GIL, P_ENTER, P_REGIONS, P_COMPILING, P_SITE, P_BUILD,
       P_DELIVER, P_ENTER_RELEASE, P_LEAVE, P_REPEAT, NPIECES };
extern const char *piece_names[NPIECES];
extern int timing_on;
extern int64_t piece_ns[NPIECES];
extern long piece_n[NPIECES];

static inline int64_t now_ns(void) {
    struct timespec ts; /* time.perf_counter_ns() reads the same clock on Linux */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
#define T0() (timing_on ? now_ns() : 0)
#define TADD(i, t0) do { if (timing_on) { piece_ns[i] += now_ns() - (t0); piece_n[i]++; } } while (0)

static inline uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdULL;
}

static inline int same(PyObject *a, PyObject *b) {
    return a == b ? 1 : PyObject_RichCompareBool(a, b, Py_EQ);
}

/* ---- call.c: a kept call ---------------------------------------------------------------------
 * A kept call as the C callback hands it to the region: calls.CudaCall's fields under the same
 * names, read as attributes, with the numbers kept as C values until one is read (a CudaCall,
 * a tuple of 16 Python objects, is nine objects made per copy). A copy that by_pointer passes
 * over is read without making any. The Python callback still makes CudaCalls; combine's Python
 * loop and hostmem read both by attribute, _cuptifast.combine and by_pointer read Calls raw. */
#define CALL_FIELDS 16 /* len(calls.CudaCall._fields), checked by configure() */
typedef struct Call {
    PyObject_HEAD
    /* first, within the object's first 48 bytes: what pinned_copies reads of each of a region's
     * calls at its exit, with caches cold (one cache line per call where the object starts on
     * one) */
    int16_t index;
    int8_t role, dir, is_async, phase, ncorr, has_stream, has_nbytes, has_src, has_dst, has_blocked;
    uint64_t src, dst, stream;
    PyObject *names;                 /* (apis, roles, kinds) of the table it was made under */
    PyObject *site, *allows, *thread;
    uint64_t nbytes;
    int64_t t0;
    double blocked;                  /* us; has_blocked == 0: None */
    uint32_t corr[MAXCORR];
    /* a stream sync that this async copy's thread made right after it from the same site
     * (pair_with()): its table index, when it began, and its duration (us) */
    int8_t has_pair, has_pair_blocked;
    int16_t pair;
    int64_t pair_t0;
    double pair_blocked;
    /* the durations (us) of the copies just like this one that came right before it, folded
     * into it (fold_into()), in order: each of them one combine judges as unpaired */
    Py_ssize_t nfolded, folded_cap;
    double *folded;
    /* the copies like this one, each completed by its own stream sync, that came right before
     * it, folded into it (fold_pair()), in order and before any of ``folded``: each of them one
     * combine judges as the blocking copy of a pair */
    Py_ssize_t npairs, pairs_cap;
    struct FoldedPair { double copy_us, sync_us; int16_t pair; } *pairs;
} Call;
extern PyTypeObject CallType;
/* (apis, roles, kinds): tuples by entry index of each call's api name, role and sync kind (or
 * None); rebuilt by configure() */
extern PyObject *names_table;

enum { F_API, F_ROLE, F_KIND, F_DIRECTION, F_IS_ASYNC, F_CORRELATION, F_STREAM, F_SITE, F_PHASE,
       F_THREAD, F_ALLOWS, F_BLOCKED, F_NBYTES, F_SRC, F_DST, F_T_NS, F_SOURCE, F_HOST_PTR,
       F_PAIRED_API, F_PAIRED_BLOCKED, F_FOLDED, F_PAIRS };

/* the call's api name, role or sync kind (F_API, F_ROLE, F_KIND), from the name table it was
 * made under (borrowed) */
static inline PyObject *call_name(const Call *c, int field) {
    return PyTuple_GET_ITEM(PyTuple_GET_ITEM(c->names, field - F_API), c->index);
}

PyObject *new_call(const Entry *e, int dir, const uint32_t *corr, int ncorr, int has_stream,
                   uint64_t stream, PyObject *site, int phase, PyObject *thread, PyObject *allows,
                   int has_blocked, double blocked, int has_ptrs, uint64_t nbytes, uint64_t src,
                   uint64_t dst, int64_t t0);

/* ---- callback.c: the per-thread state ------------------------------------------------------ */
typedef struct {
    long gen;
    int depth, mode;
    /* the thread's last kept call (owned): in flight while MODE_KEPT, when EXIT stamps its
     * duration into it without the GIL; after that, only held until this thread next takes the
     * GIL in a callback, or forget(), since letting it go needs the GIL (a thread that ends
     * first never lets go of it: one small object per such thread, holding no region) */
    Call *call;
    PyObject *name; /* the thread's name, read once per subscription (a rename inside one
                       region is seen from the next region on) */
    long name_gen;
    /* compile_tls's dict for this thread (owned), read once per configure(): a threading.local
     * keeps one dict per thread for the thread's life, so it need not be looked up per kept
     * call. A thread that ends keeps it, as it keeps its last call: one small dict per such
     * thread. */
    PyObject *tls_dict;
    long tls_epoch;
} ThreadState;
extern __thread ThreadState T;

/* The last regions tuple handed a call and its regions' observation lists (a Region's list is
 * made once, in its __init__, so it need not be looked up per call). Read and written with the
 * GIL held; emptied by forget() when the hub switches every callback off, so that no region
 * outlives its last region's exit here. */
extern PyObject *last_regions, *last_lists;
void forget(void);

/* ---- lock.c: the hub's re-entrant lock, taken from C without a Python call ------------------ */
extern PyTypeObject HubLockType;
int hublock_acquire(PyObject *lock); /* blocks with the GIL released while another thread holds it */
int hublock_release(PyObject *lock); /* -1 (RuntimeError) where this thread does not hold it */

/* ---- regions.c: a region of the cuda detector alone, entered and left in one call each ---- */
PyObject *fn_enter_alone(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *fn_leave_alone(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
void callback(void *userdata, int domain, uint32_t cbid, const CallbackData *d);

/* ---- frames.c: the user's frame and site --------------------------------------------------- */
void class_clear(void);
void site_clear(void);
PyObject *user_site(int *phase);
#if REPEAT
/* This thread's frames (hashed), context, its variables and its context version; 0 where it has
 * none to compare (no context yet, or a stack deeper than POS_FRAMES). */
#define POS_FRAMES 1024
int position(PyThreadState *ts, uint64_t *frames, const void **ctx, const void **vars,
             uint64_t *ver);
#endif

/* ---- pairing.c: pairing and folding into the thread's last call ---------------------------- */
enum { R_NONE, R_FOLD_PAIR, R_FOLD, R_PAIR };
/* the rule enter() applies to ``prev`` for the call about to be kept: R_NONE, one of the rules
 * (prev's room for it grown), or -1 with an exception set */
int pair_or_fold(Call *prev, const Entry *e, const Params *k, PyObject *regions, PyObject *site,
                 PyObject *allows, int phase, PyObject *thread);
/* prev changed by rule (with the GIL); returns the thread's mode from then on */
int apply_rule(Call *prev, int rule, const Entry *e, const Params *k, uint32_t corr);

/* when the call now kept began: stamped last, so that its duration holds none of our work */
static inline void stamp(Call *c, int mode) {
    if (mode == MODE_PAIRED) c->pair_t0 = now_ns();
    else c->t0 = now_ns();
}
#if REPEAT
/* Where this thread's last kept call was made, for repeat() */
#define POS_LISTS 8
typedef struct {
    int valid, nlists;
    long epoch;
    uint64_t frames, ctx_ver;
    const void *ctx, *vars;
    PyObject *lists[POS_LISTS]; /* borrowed: alive while the scopes are unchanged */
    Py_ssize_t sizes[POS_LISTS];
} Position;
extern __thread Position P;
void note_position(ThreadState *t, PyObject *lists);
int repeat(ThreadState *t, const Entry *e, const CallbackData *d);
#endif

/* ---- pointers.c: host memory by pointer ----------------------------------------------------- */
typedef int (*PointerAttributesFn)(void *attributes, const void *ptr);
typedef int (*GetLastErrorFn)(void);
void query_types(PointerAttributesFn get, GetLastErrorFn clear, const uint64_t *ptrs, int *types,
                 Py_ssize_t n);
/* hostmem.ByPointer's answers for by_pointer(): see pointers.c */
typedef struct {
    uint64_t *key;     /* open addressing; 0: empty (a null pointer is never asked) */
    int *kind;         /* CUPTI memory kind, -1: asked and nothing said */
    size_t cap, n;     /* cap: a power of two */
    PyObject *functions;
    int state;         /* 0: functions() not called yet; 1: may ask; 2: never ask */
    PointerAttributesFn get;
    GetLastErrorFn clear;
} Pointers;
void pointers_free(Pointers *p);
int pointers_ask(Pointers *p, const uint64_t *ptrs, Py_ssize_t n);
int pointer_kind(Pointers *p, uint64_t ptr);
int pinned_copies(PyObject *obs, Pointers *p, char *drop);

/* ---- combine.c: a region's calls into events ------------------------------------------------ */
/* (events, unknown, undirected), or NotImplemented where a call is not this module's; functions
 * NULL: combine() (host memory from host_kind and direction), else by_pointer() */
PyObject *combine_events(PyObject *obs, PyObject *host_kind, PyObject *direction, PyObject *type,
                         PyObject *defaults, PyObject *detectors, PyObject *kinds,
                         PyObject *functions);

#pragma GCC visibility pop
#endif
