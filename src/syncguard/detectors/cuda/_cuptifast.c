/* The cuda detector's CUPTI callback in C: what syncguard/detectors/cudacalls.py does in Python,
 * without a ctypes thunk per callback and without Python bytecode on the hot path.
 *
 * Why it exists: on the H200 host one copy cost ~20 us of Python work (four callbacks: the
 * runtime call and the driver call under it, ENTER and EXIT), against ~100 us for the whole
 * sync-free merge it sits in (reports/gpu/2.11.0/overhead-*.md). Here a nested driver callback
 * costs a table lookup and a thread-local counter, without the GIL; a kept call takes the GIL
 * once, at ENTER, where it is built and handed to its region(s); its EXIT only stamps the
 * call's duration into it, without the GIL (taking it again there was ~0.25 us per kept call
 * on the H200's host: reports/probes/callback-pieces-384ab15/).
 *
 * Same rules as the Python callback (which stays, as the fallback where this module did not
 * build): only the outermost call of a thread is kept (a runtime call and the driver calls under
 * it are one observation; a stream sync completing the copy just before it, a copy like the one
 * just before it, and a copy repeating the pair just before it, are kept on that copy's Call:
 * pair_with, fold_into, fold_pair); only threads whose
 * context has a region (the ``regions`` ContextVar)
 * keep anything; a thread with no region while a backward pass of a region runs is handed to the
 * Python callback whole (its owner logic lives there); the user's frame is found with the same
 * per-code-object classification (attribution._code_cache / _code_class) and the Site is built
 * by attribution's own function on a cache miss. Nothing here calls CUDA.
 *
 * A call that one of those three rules would fold or pair into the thread's last call, made from
 * where that call was made with nothing changed since, is kept without the GIL (repeat(): a
 * loop's copies, and torch 2.8's copy-and-sync per merge); the answers it skips are the ones the
 * last call got.
 *
 * Built by setup.py as an optional extension; CPython >= 3.11 (PyFrame_GetLasti); the GIL-free
 * repeat on 3.11 to 3.13 (see REPEAT).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <math.h>
#include <string.h>
#include <time.h>

#if PY_VERSION_HEX < 0x030B0000
#error "_cuptifast needs CPython 3.11 or newer"
#endif

/* The GIL-free repeat (repeat()) reads this thread's own interpreter frames and context, which
 * CPython keeps in internal structures: built for CPython 3.11 to 3.13 with the GIL, the layouts
 * it was written and tested against. Elsewhere every kept call takes the GIL, as before. */
#if PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define REPEAT 1
#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE 1
#endif
#include "internal/pycore_frame.h"
#include "internal/pycore_context.h"
#else
#define REPEAT 0
#endif

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

typedef struct { int8_t used, role, dir, is_async, spec, stream_sync; int16_t index; } Entry;
static Entry entries[3][MAXCB];
/* the configured ids as a list, for switching them on and off: scanning entries[][] (64 KB) for
 * them cost as much as the 45 cuptiEnableCallback calls themselves */
#define MAXIDS 512
static struct { int domain; int cbid; } ids[MAXIDS];
static int nids;

/* configuration (configure()); strong references held until the next configure() */
static PyObject *regions_var, *allows_var;
static PyObject *backward_active; /* dict, non-empty while a region's backward pass runs */
static PyObject *thread_active;   /* threading._active (None: unknown), for engine_owner() */
static PyObject *dummy_thread;    /* threading._DummyThread */
static PyObject *py_callback;    /* callable(userdata, domain, cbid, cbdata): the Python path */
static PyObject *compiling;      /* callable() -> None/False unless torch.compile is compiling */
static PyObject *compile_tls;    /* torch._guards._TLS (a threading.local), or None: then call
                                    ``compiling`` (see attribution.compile_context_tls) */
static PyObject *code_cache;     /* dict id(code) -> (class, code): attribution._code_cache */
static PyObject *code_class;     /* callable(code) -> int: attribution._code_class */
static PyObject *site_cache;     /* dict: 64-bit stack hash -> (Site, codes) */
static PyObject *make_site;      /* callable(key, ((code, line), ...)) -> Site, caches it */
static PyObject *thread_name;    /* callable() -> str */
static PyObject *call_type;      /* CudaCall (a tuple subclass) */
static PyObject *no_site;        /* Site() */
static PyObject *s_cuda;
static PyObject *s_dir[5], *s_phase[3], *s_observations, *s_empty, *s_nothread, *s_dict,
                *s_compile_context;
static int stack_depth = 32;
static volatile long generation = 1;
static long errors;

/* Where a callback's time goes, for tools/probe_callback_pieces.py: off unless timing(True) was
 * called (then a clock read per piece; two reads cost ~40 ns, so the pieces' sum is above the
 * untimed cost). Summed by the thread that ran the piece, without a lock: a probe times one
 * thread. */
enum { P_CALLBACK, P_NESTED, P_ENTER_GIL, P_ENTER, P_REGIONS, P_COMPILING, P_SITE, P_BUILD,
       P_DELIVER, P_ENTER_RELEASE, P_LEAVE, P_REPEAT, NPIECES };
static const char *piece_names[NPIECES] = {
    "callback (every invocation, whole)", "nested driver callback (no GIL)",
    "ENTER: take the GIL",
    "ENTER: keep the call (regions, phase, thread, site, allows; build it, hand it over)",
    "ENTER: the regions (context variable; inside the above)",
    "ENTER: is torch compiling (inside the above)", "ENTER: the user's site (inside the above)",
    "ENTER: build the call (inside the above)",
    "ENTER: hand it to the region(s) (inside the above)", "ENTER: release the GIL",
    "EXIT: stamp the call's duration (no GIL)",
    "ENTER: a repeat, folded or paired without the GIL (repeat())"};
static int timing_on;
static int64_t piece_ns[NPIECES];
static long piece_n[NPIECES];
static int64_t now_ns(void);
#define T0() (timing_on ? now_ns() : 0)
#define TADD(i, t0) do { if (timing_on) { piece_ns[i] += now_ns() - (t0); piece_n[i]++; } } while (0)

struct Call;
typedef struct {
    long gen;
    int depth, mode;
    /* the thread's last kept call (owned): in flight while MODE_KEPT, when EXIT stamps its
     * duration into it without the GIL; after that, only held until this thread next takes the
     * GIL in a callback, or forget(), since letting it go needs the GIL (a thread that ends
     * first never lets go of it: one small object per such thread, holding no region) */
    struct Call *call;
    PyObject *name; /* the thread's name, read once per subscription (a rename inside one
                       region is seen from the next region on) */
    long name_gen;
    /* compile_tls's dict for this thread (owned), read once per configure(): a threading.local
     * keeps one dict per thread for the thread's life, and looking it up cost ~120 ns per kept
     * call on the H200's host (reports/probes/callback-pieces-3ce5363/). A thread that ends
     * keeps it, as it keeps its last call: one small dict per such thread. */
    PyObject *tls_dict;
    long tls_epoch;
} ThreadState;
static long config_epoch = 1; /* bumped by configure(): every thread's tls_dict is stale */
static __thread ThreadState T;

/* Where this thread's last kept call was made, for repeat() (see there): bumped whenever a
 * region or allow is entered or left on any thread (scopes_changed(), from scope.py), and when
 * the callbacks go off (forget()) or the module is configured again. */
static volatile long scopes_epoch = 1;
#if REPEAT
#define POS_LISTS 8
#define POS_FRAMES 1024
typedef struct {
    int valid, nlists;
    long epoch;
    uint64_t frames, ctx_ver;
    const void *ctx, *vars;
    PyObject *lists[POS_LISTS]; /* borrowed: alive while the scopes are unchanged */
    Py_ssize_t sizes[POS_LISTS];
} Position;
static __thread Position P;
#endif

static int64_t now_ns(void) {
    struct timespec ts; /* time.perf_counter_ns() reads the same clock on Linux */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int memcpy_dir(int kind) {
    switch (kind) { /* cudaMemcpyKind; 4 = cudaMemcpyDefault: the pointers say, not the call */
    case 0: return DIR_H2H; case 1: return DIR_H2D; case 2: return DIR_D2H; case 3: return DIR_D2D;
    default: return DIR_NONE;
    }
}

static void clear_kept(ThreadState *t) { /* with the GIL */
    Py_CLEAR(t->call);
    t->mode = MODE_IDLE;
}

/* A code object's class, kept in C once attribution has cached it: the Python dict lookup needs
 * an int key made per frame, for every torch frame above the user's. This table, the site table
 * below, the direct compile-context read and the in-place CudaCall together took a copy from
 * 0.59 to 0.22 us per callback under one torch frame, 0.88 to 0.38 under twelve, on the CPU
 * (reports/cpu/callback-c-fast.md). Open addressing keyed by the code's address; each slot holds
 * its code object alive, so the address cannot be reused while the slot lives. Read and written
 * with the GIL held; emptied when half full and by configure(). */
#define CLASS_SLOTS 8192
static struct { PyObject *code; int cls; } class_slots[CLASS_SLOTS];
static int class_used;

static void class_clear(void) {
    for (int i = 0; i < CLASS_SLOTS; i++) Py_CLEAR(class_slots[i].code);
    class_used = 0;
}

static inline size_t class_slot(const void *code) {
    return (size_t)((((uintptr_t)code >> 4) * 0x9e3779b97f4a7c15ULL) >> 51) & (CLASS_SLOTS - 1);
}

/* 0 user, 1 internal, 2 CUDA-graph capture set-up, -1 error (attribution._code_class) */
static int classify(PyCodeObject *code) {
    size_t i = class_slot(code);
    while (class_slots[i].code) {
        if (class_slots[i].code == (PyObject *)code) return class_slots[i].cls;
        i = (i + 1) & (CLASS_SLOTS - 1);
    }
    PyObject *key = PyLong_FromVoidPtr(code);
    if (!key) return -1;
    PyObject *hit = PyDict_GetItemWithError(code_cache, key); /* borrowed */
    int cls = -1;
    if (!hit && !PyErr_Occurred()) { /* attribution decides (and caches where its answer is final) */
        PyObject *r = PyObject_CallOneArg(code_class, (PyObject *)code);
        if (!r) { Py_DECREF(key); return -1; }
        cls = (int)PyLong_AsLong(r);
        Py_DECREF(r);
        hit = PyDict_GetItemWithError(code_cache, key);
    }
    Py_DECREF(key);
    if (PyErr_Occurred()) return -1;
    if (!hit) return cls; /* not cached by attribution: its answer may still change */
    if (!PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) < 1) return -1;
    cls = (int)PyLong_AsLong(PyTuple_GET_ITEM(hit, 0));
    if (class_used >= CLASS_SLOTS / 2) { class_clear(); i = class_slot(code); }
    while (class_slots[i].code) i = (i + 1) & (CLASS_SLOTS - 1);
    class_slots[i].code = Py_NewRef((PyObject *)code);
    class_slots[i].cls = cls;
    class_used++;
    return cls;
}

#if PY_VERSION_HEX >= 0x030D0000
#define LOOKUP_ATTR PyObject_GetOptionalAttr
#else
#define LOOKUP_ATTR _PyObject_LookupAttr
#endif

/* Whether this thread is inside a torch.compile compilation: attribution.compiling(), which is
 * torch's CompileContext.try_get() is not None. Where torch's try_get is the read of its
 * thread-local that it was on every version checked, the thread-local is read here directly
 * (no call into Python, with a frame of its own, per copy);
 * a failing check means not compiling, as in attribution.compiling(). */
static int is_compiling(void) {
    PyObject *v = NULL;
    int found;
    if (compile_tls != Py_None) {
        ThreadState *t = &T;
        if (!t->tls_dict || t->tls_epoch != config_epoch) {
            PyObject *d = NULL; /* the calling thread's dict of the threading.local */
            found = LOOKUP_ATTR(compile_tls, s_dict, &d);
            if (found <= 0 || !PyDict_Check(d)) { Py_XDECREF(d); PyErr_Clear(); return 0; }
            Py_XSETREF(t->tls_dict, d);
            t->tls_epoch = config_epoch;
        }
        v = PyDict_GetItemWithError(t->tls_dict, s_compile_context);
        Py_XINCREF(v);
    } else {
        v = PyObject_CallNoArgs(compiling);
    }
    if (!v) { PyErr_Clear(); return 0; }
    found = v != Py_None && v != Py_False;
    Py_DECREF(v);
    return found;
}

/* attribution.c_site_cache's entries, (Site, codes), by their 64-bit key, held here so a hit
 * needs no int key made per copy; emptied when half full and by configure(). */
#define SITE_SLOTS 4096
static struct { uint64_t key; PyObject *entry; } site_slots[SITE_SLOTS];
static int site_used;

static void site_clear(void) {
    for (int i = 0; i < SITE_SLOTS; i++) Py_CLEAR(site_slots[i].entry);
    site_used = 0;
}

static inline uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdULL;
}

/* The Site of the innermost user frame with stack_depth frames of stack (new reference), and the
 * phase raised to graph capture when a capture set-up frame lies between it and the call. The
 * stack is keyed by (code address, instruction offset) pairs hashed to 64 bits; the cache entry
 * holds its code objects, so no address in a live key can be reused. */
static PyObject *user_site(int *phase) {
    PyFrameObject *f = PyThreadState_GetFrame(PyThreadState_Get()); /* new ref or NULL */
    while (f) {
        PyCodeObject *code = PyFrame_GetCode(f);
        int cls = classify(code);
        Py_DECREF(code);
        if (cls < 0) { Py_DECREF(f); return NULL; }
        if (cls == 0) break;
        if (cls == 2 && *phase == 0) *phase = 2;
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    if (!f) return Py_NewRef(no_site);
    uint64_t h = 1469598103934665603ULL;
    int n = 0;
    PyFrameObject *g = (PyFrameObject *)Py_NewRef(f);
    while (g && n < stack_depth) {
        PyCodeObject *code = PyFrame_GetCode(g);
        h = mix(mix(h, (uint64_t)(uintptr_t)code), (uint64_t)PyFrame_GetLasti(g));
        Py_DECREF(code);
        PyFrameObject *back = PyFrame_GetBack(g);
        Py_DECREF(g);
        g = back;
        n++;
    }
    Py_XDECREF(g);
    size_t slot = (size_t)(h >> 52) & (SITE_SLOTS - 1);
    while (site_slots[slot].entry) {
        if (site_slots[slot].key == h) {
            Py_DECREF(f);
            return Py_NewRef(PyTuple_GET_ITEM(site_slots[slot].entry, 0));
        }
        slot = (slot + 1) & (SITE_SLOTS - 1);
    }
    PyObject *key = PyLong_FromUnsignedLongLong(h), *site = NULL;
    if (!key) goto done;
    PyObject *hit = PyDict_GetItemWithError(site_cache, key);
    if (hit) {
        site = Py_NewRef(PyTuple_GET_ITEM(hit, 0));
    } else if (!PyErr_Occurred()) {
        PyObject *frames = PyTuple_New(n);
        g = (PyFrameObject *)Py_NewRef(f);
        for (int i = 0; frames && g && i < n; i++) {
            PyCodeObject *code = PyFrame_GetCode(g);
            PyObject *pair = Py_BuildValue("(Ni)", (PyObject *)code, PyFrame_GetLineNumber(g));
            if (!pair) { Py_CLEAR(frames); break; }
            PyTuple_SET_ITEM(frames, i, pair);
            PyFrameObject *back = PyFrame_GetBack(g);
            Py_DECREF(g);
            g = back;
        }
        Py_XDECREF(g);
        if (frames) site = PyObject_CallFunctionObjArgs(make_site, key, frames, NULL);
        Py_XDECREF(frames);
        hit = site ? PyDict_GetItemWithError(site_cache, key) : NULL; /* what make_site stored */
    }
    if (hit && PyTuple_Check(hit) && PyTuple_GET_SIZE(hit) == 2) {
        if (site_used >= SITE_SLOTS / 2) {
            site_clear();
            slot = (size_t)(h >> 52) & (SITE_SLOTS - 1);
        }
        site_slots[slot].key = h;
        site_slots[slot].entry = Py_NewRef(hit);
        site_used++;
    }
    PyErr_Clear(); /* a failed lookup only costs the next call a miss */
    Py_DECREF(key);
done:
    Py_DECREF(f);
    return site;
}

#define CALL_FIELDS 16 /* len(cudacalls.CudaCall._fields), checked by configure() */

/* A kept call as the C callback hands it to the region: cudacalls.CudaCall's fields under the
 * same names, read as attributes, with the numbers kept as C values until one is read. A
 * CudaCall (a tuple of 16 Python objects) made nine objects per copy: ~0.8 us of the
 * ~3.2 us a sync-free merge spent in the callback on the H200's host
 * (reports/probes/callback-pieces-384ab15/). A copy that by_pointer passes over is now read
 * without making any. The Python callback still makes CudaCalls; combine's Python loop and
 * hostmem read both by attribute, _cuptifast.combine and by_pointer read Calls raw. */
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

/* (apis, roles, kinds): tuples by entry index of each call's api name, role and sync kind (or
 * None); rebuilt by configure() */
static PyObject *names_table;

enum { F_API, F_ROLE, F_KIND, F_DIRECTION, F_IS_ASYNC, F_CORRELATION, F_STREAM, F_SITE, F_PHASE,
       F_THREAD, F_ALLOWS, F_BLOCKED, F_NBYTES, F_SRC, F_DST, F_T_NS, F_SOURCE, F_HOST_PTR,
       F_PAIRED_API, F_PAIRED_BLOCKED, F_FOLDED, F_PAIRS };

/* the call's api name, role or sync kind (F_API, F_ROLE, F_KIND), from the name table it was
 * made under (borrowed) */
static inline PyObject *call_name(const Call *c, int field) {
    return PyTuple_GET_ITEM(PyTuple_GET_ITEM(c->names, field - F_API), c->index);
}

static PyObject *call_get(PyObject *self, void *closure) {
    Call *c = (Call *)self;
    switch ((int)(intptr_t)closure) {
    case F_API: case F_ROLE: case F_KIND: /* names: (apis, roles, kinds), in that order */
        return Py_NewRef(call_name(c, (int)(intptr_t)closure));
    case F_DIRECTION: return Py_NewRef(s_dir[c->dir]);
    case F_IS_ASYNC: return PyBool_FromLong(c->is_async);
    case F_CORRELATION: {
        PyObject *t = PyTuple_New(c->ncorr);
        for (int i = 0; t && i < c->ncorr; i++) {
            PyObject *v = PyLong_FromUnsignedLong(c->corr[i]);
            if (!v) { Py_CLEAR(t); break; }
            PyTuple_SET_ITEM(t, i, v);
        }
        return t;
    }
    case F_STREAM: return c->has_stream ? PyLong_FromUnsignedLongLong(c->stream) : Py_NewRef(Py_None);
    case F_SITE: return Py_NewRef(c->site);
    case F_PHASE: return Py_NewRef(s_phase[c->phase]);
    case F_THREAD: return Py_NewRef(c->thread);
    case F_ALLOWS: return Py_NewRef(c->allows);
    case F_BLOCKED: return c->has_blocked ? PyFloat_FromDouble(c->blocked) : Py_NewRef(Py_None);
    case F_NBYTES: return c->has_nbytes ? PyLong_FromUnsignedLongLong(c->nbytes) : Py_NewRef(Py_None);
    case F_SRC: return c->has_src ? PyLong_FromUnsignedLongLong(c->src) : Py_NewRef(Py_None);
    case F_DST: return c->has_dst ? PyLong_FromUnsignedLongLong(c->dst) : Py_NewRef(Py_None);
    case F_T_NS: return PyLong_FromLongLong((long long)c->t0);
    case F_SOURCE: return Py_NewRef(s_cuda);
    case F_HOST_PTR: /* as CudaCall.host_ptr */
        if (c->dir == DIR_H2D) return call_get(self, (void *)(intptr_t)F_SRC);
        if (c->dir == DIR_D2H) return call_get(self, (void *)(intptr_t)F_DST);
        return Py_NewRef(Py_None);
    case F_PAIRED_API: /* the stream sync riding on this copy (pair_with()), or None */
        return c->has_pair ? Py_NewRef(PyTuple_GET_ITEM(PyTuple_GET_ITEM(c->names, 0), c->pair))
                           : Py_NewRef(Py_None);
    case F_PAIRED_BLOCKED:
        return c->has_pair_blocked ? PyFloat_FromDouble(c->pair_blocked) : Py_NewRef(Py_None);
    case F_PAIRS: { /* the folded pairs, in order: (the sync's api, copy us, sync us) each */
        PyObject *t = PyTuple_New(c->npairs);
        for (Py_ssize_t i = 0; t && i < c->npairs; i++) {
            const struct FoldedPair *f = &c->pairs[i];
            PyObject *v = Py_BuildValue("(Odd)", PyTuple_GET_ITEM(PyTuple_GET_ITEM(c->names, 0),
                                                                  f->pair), f->copy_us, f->sync_us);
            if (!v) { Py_CLEAR(t); break; }
            PyTuple_SET_ITEM(t, i, v);
        }
        return t;
    }
    case F_FOLDED: { /* the folded copies' durations, in order */
        PyObject *t = PyTuple_New(c->nfolded);
        for (Py_ssize_t i = 0; t && i < c->nfolded; i++) {
            PyObject *v = PyFloat_FromDouble(c->folded[i]);
            if (!v) { Py_CLEAR(t); break; }
            PyTuple_SET_ITEM(t, i, v);
        }
        return t;
    }
    }
    Py_RETURN_NONE;
}

#define GET(name, f) {name, call_get, NULL, NULL, (void *)(intptr_t)(f)}
static PyGetSetDef call_getset[] = {
    GET("api", F_API), GET("role", F_ROLE), GET("kind", F_KIND), GET("direction", F_DIRECTION),
    GET("is_async", F_IS_ASYNC), GET("correlation", F_CORRELATION), GET("stream", F_STREAM),
    GET("site", F_SITE), GET("phase", F_PHASE), GET("thread", F_THREAD), GET("allows", F_ALLOWS),
    GET("blocked_us", F_BLOCKED), GET("nbytes", F_NBYTES), GET("src", F_SRC), GET("dst", F_DST),
    GET("t_ns", F_T_NS), GET("source", F_SOURCE), GET("host_ptr", F_HOST_PTR),
    GET("paired_api", F_PAIRED_API), GET("paired_blocked_us", F_PAIRED_BLOCKED),
    GET("folded_blocked_us", F_FOLDED), GET("folded_pairs", F_PAIRS), {NULL}};
#undef GET

static int call_traverse(PyObject *self, visitproc visit, void *arg) {
    Call *c = (Call *)self;
    Py_VISIT(c->names); Py_VISIT(c->site); Py_VISIT(c->allows); Py_VISIT(c->thread);
    return 0;
}

static int call_clear(PyObject *self) {
    Call *c = (Call *)self;
    Py_CLEAR(c->names); Py_CLEAR(c->site); Py_CLEAR(c->allows); Py_CLEAR(c->thread);
    return 0;
}

static void call_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    call_clear(self);
    PyMem_Free(((Call *)self)->folded);
    PyMem_Free(((Call *)self)->pairs);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *call_repr(PyObject *self) {
    PyObject *parts = PyList_New(0), *out = NULL;
    for (PyGetSetDef *g = call_getset; parts && g->name && (intptr_t)g->closure <= F_T_NS; g++) {
        PyObject *v = call_get(self, g->closure);
        PyObject *item = v ? PyUnicode_FromFormat("%s=%R", g->name, v) : NULL;
        Py_XDECREF(v);
        if (!item || PyList_Append(parts, item) < 0) Py_CLEAR(parts);
        Py_XDECREF(item);
    }
    if (parts) {
        PyObject *sep = PyUnicode_FromString(", ");
        PyObject *body = sep ? PyUnicode_Join(sep, parts) : NULL;
        out = body ? PyUnicode_FromFormat("Call(%U)", body) : NULL;
        Py_XDECREF(sep); Py_XDECREF(body);
    }
    Py_XDECREF(parts);
    return out;
}

static PyTypeObject CallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "syncguard.detectors._cuptifast.Call",
    .tp_doc = "A call the C callback kept: cudacalls.CudaCall's fields, read as attributes.",
    .tp_basicsize = sizeof(Call),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = call_traverse, .tp_clear = call_clear, .tp_dealloc = call_dealloc,
    .tp_repr = call_repr, .tp_getset = call_getset,
};

/* A Call of table entry ``e`` (its api, role and async-ness) from the thread's kept state or a
 * no-wait copy's values; takes its own references to site, thread and allows. */
static PyObject *new_call(const Entry *e, int dir, const uint32_t *corr, int ncorr, int has_stream,
                          uint64_t stream, PyObject *site, int phase, PyObject *thread,
                          PyObject *allows, int has_blocked, double blocked, int has_ptrs,
                          uint64_t nbytes, uint64_t src, uint64_t dst, int64_t t0) {
    if (!names_table) { PyErr_SetString(PyExc_RuntimeError, "_cuptifast is not configured"); return NULL; }
    Call *c = PyObject_GC_New(Call, &CallType);
    if (!c) return NULL;
    c->names = Py_NewRef(names_table);
    c->site = Py_NewRef(site); c->allows = Py_NewRef(allows); c->thread = Py_NewRef(thread);
    c->index = e->index; c->role = e->role; c->dir = (int8_t)dir;
    c->is_async = e->is_async; c->phase = (int8_t)phase;
    c->ncorr = (int8_t)ncorr;
    memcpy(c->corr, corr, sizeof(uint32_t) * (size_t)ncorr);
    c->has_stream = (int8_t)has_stream; c->stream = stream;
    c->has_blocked = (int8_t)has_blocked; c->blocked = blocked;
    c->has_nbytes = (int8_t)has_ptrs; c->nbytes = nbytes;
    c->has_src = (int8_t)(has_ptrs && src); c->src = src;
    c->has_dst = (int8_t)(has_ptrs && dst); c->dst = dst;
    c->t0 = t0;
    c->has_pair = c->has_pair_blocked = 0; c->pair = 0; c->pair_t0 = 0; c->pair_blocked = 0.0;
    c->nfolded = c->folded_cap = 0; c->folded = NULL;
    c->npairs = c->pairs_cap = 0; c->pairs = NULL;
    PyObject_GC_Track((PyObject *)c);
    return (PyObject *)c;
}

/* The last regions tuple handed a call and its regions' observation lists (a Region's list is
 * made once, in its __init__): the attribute lookup per call cost ~0.27 us with caches cold on
 * the H200's host (reports/probes/callback-pieces-384ab15/). Read and written with the GIL held;
 * emptied by forget() when the hub switches every callback off, so that no region outlives its
 * last region's exit here. */
static PyObject *last_regions, *last_lists;

static void forget(void) {
    Py_CLEAR(last_regions);
    Py_CLEAR(last_lists);
#if REPEAT
    P.valid = 0;
    scopes_epoch++; /* every other thread's position too: its regions are gone */
#endif
    /* and this thread's last call (the one that switches callbacks off has none in flight);
     * another thread's stays held until that thread's next callback (it holds no region) */
    if (T.mode != MODE_KEPT && T.mode != MODE_PAIRED) Py_CLEAR(T.call);
}

static int deliver(PyObject *regions, PyObject *call) {
    if (regions != last_regions) {
        Py_ssize_t n = PyTuple_GET_SIZE(regions);
        PyObject *lists = PyTuple_New(n);
        for (Py_ssize_t i = 0; lists && i < n; i++) {
            PyObject *obs = PyObject_GetAttr(PyTuple_GET_ITEM(regions, i), s_observations);
            if (!obs || !PyList_Check(obs)) {
                if (obs) PyErr_SetString(PyExc_TypeError, "a region's observations must be a list");
                Py_XDECREF(obs);
                Py_CLEAR(lists);
                break;
            }
            PyTuple_SET_ITEM(lists, i, obs);
        }
        if (!lists) return -1;
        Py_XSETREF(last_lists, lists);
        Py_XSETREF(last_regions, Py_NewRef(regions));
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(last_lists); i++)
        if (PyList_Append(PyTuple_GET_ITEM(last_lists, i), call) < 0) return -1;
    return 0;
}

static void forward(void *userdata, int domain, uint32_t cbid, const CallbackData *d) {
    PyObject *r = PyObject_CallFunction(py_callback, "OiIK", Py_None, domain, cbid,
                                        (unsigned long long)(uintptr_t)d);
    if (!r) { errors++; PyErr_Clear(); }
    Py_XDECREF(r);
}

/* The region(s) of the one backward pass in flight, for a call on a thread with no region of its
 * own (borrowed, or NULL: then the Python callback decides). As BackwardOwners.owner(): exactly
 * one backward running, and this thread not one the program started with ``threading`` (its
 * calls are its own). Any other case goes to Python, which also counts the ambiguous ones. */
static PyObject *engine_owner(void) {
    if (!backward_active || PyDict_GET_SIZE(backward_active) != 1 || !thread_active) return NULL;
    PyObject *ident = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    if (!ident) return NULL;
    PyObject *known = PyDict_GetItemWithError(thread_active, ident); /* borrowed */
    Py_DECREF(ident);
    if (!known && PyErr_Occurred()) return NULL;
    if (known && !PyObject_TypeCheck(known, (PyTypeObject *)dummy_thread)) return NULL;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    if (!PyDict_Next(backward_active, &pos, &key, &value) || !PyTuple_Check(value) ||
        PyTuple_GET_SIZE(value) < 1)
        return NULL;
    PyObject *regions = PyTuple_GET_ITEM(value, 0);
    return PyTuple_Check(regions) && PyTuple_GET_SIZE(regions) ? regions : NULL;
}

static int same_context(const Call *prev, PyObject *regions, PyObject *site, PyObject *allows,
                        int phase, PyObject *thread);

/* The rules below are split in two: what the new call and ``prev`` must share as C values
 * (*_fields: the call's own parameters against prev's), and the context they must share
 * (same_context with the GIL; the position without it, see repeat()). */

/* A stream sync may complete prev: prev an async host<->device copy, done, not paired yet, on the
 * sync's stream (or either stream unknown or the legacy 0). */
static int pair_fields(const Call *prev, int has_stream, uint64_t stream) {
    if (prev->role != ROLE_COPY || !prev->is_async || prev->has_pair || !prev->has_blocked ||
        (prev->dir != DIR_H2D && prev->dir != DIR_D2H))
        return 0;
    return !(prev->has_stream && prev->stream && has_stream && stream && prev->stream != stream);
}

/* Whether the stream sync about to be kept completes ``prev``, this thread's last kept call, as
 * combine would pair the two at the region's exit: pair_fields, and made from the same
 * Site object (the same stack) on the same thread under the same allows and phase, and the last
 * observation of every region the sync goes to (nothing came between them there). Then the sync
 * rides on the copy (MODE_PAIRED): no call is built or handed over, and combine makes the pair's
 * one blocking copy from the copy alone. Anything less and the sync is kept on its own, for
 * combine's rules to decide; so the events are the same either way. Torch 2.8's 100 merges made
 * 100 such pairs, each a call built and handed over for nothing. */
static int pair_with(const Call *prev, PyObject *regions, PyObject *site, PyObject *allows,
                     int phase, PyObject *thread, int has_stream, uint64_t stream) {
    return pair_fields(prev, has_stream, stream) &&
           same_context(prev, regions, site, allows, phase, thread);
}

/* What pair_with and fold_into both ask of ``prev``: made from the same Site object (the same
 * stack) on the same thread under the same allows and phase, and the last observation of every
 * region of ``regions``, the regions it was handed to (nothing came between it and the call now
 * beginning there). */
static int same_context(const Call *prev, PyObject *regions, PyObject *site, PyObject *allows,
                        int phase, PyObject *thread) {
    if (prev->site != site || prev->thread != thread || prev->allows != allows ||
        prev->phase != phase || regions != last_regions || !last_lists)
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(last_lists); i++) {
        PyObject *list = PyTuple_GET_ITEM(last_lists, i);
        Py_ssize_t n = PyList_GET_SIZE(list);
        if (!n || PyList_GET_ITEM(list, n - 1) != (PyObject *)prev) return 0;
    }
    return 1;
}

/* A call's own parameters, read from CUPTI's callback data: plain reads, no Python. */
typedef struct { int dir, has_stream, has_ptrs; uint64_t stream, src, dst, nbytes; } Params;

static void read_params(const Entry *e, const CallbackData *d, Params *q) {
    const void *p = d->functionParams;
    memset(q, 0, sizeof *q);
    q->dir = e->dir;
    if (!p) return;
    if (e->spec == SPEC_STREAM) {
        q->stream = (uint64_t)(uintptr_t)(*(void *const *)p); q->has_stream = 1;
    } else if (e->spec == SPEC_MEMCPY) {
        const MemcpyParams *m = p;
        if (!q->dir) q->dir = memcpy_dir(m->kind);
        q->stream = (uint64_t)(uintptr_t)m->stream; q->src = (uint64_t)(uintptr_t)m->src;
        q->dst = (uint64_t)(uintptr_t)m->dst; q->nbytes = m->count; q->has_stream = q->has_ptrs = 1;
    } else if (e->spec == SPEC_MEMCPY2D) {
        const Memcpy2DParams *m = p;
        if (!q->dir) q->dir = memcpy_dir(m->kind);
        q->stream = (uint64_t)(uintptr_t)m->stream; q->src = (uint64_t)(uintptr_t)m->src;
        q->dst = (uint64_t)(uintptr_t)m->dst; q->nbytes = (uint64_t)m->width * m->height;
        q->has_stream = q->has_ptrs = 1;
    } else if (e->spec == SPEC_DRV_COPY || e->spec == SPEC_DRV_COPY_ASYNC) {
        const DriverCopyParams *m = p; /* the sync variants have no stream field: not read */
        q->src = m->src; q->dst = m->dst; q->nbytes = m->count; q->has_ptrs = 1;
        if (e->spec == SPEC_DRV_COPY_ASYNC) { q->stream = (uint64_t)(uintptr_t)m->stream; q->has_stream = 1; }
    }
}

/* Whether the async copy about to be kept is ``prev`` again, this thread's last kept call: the
 * same api, direction, stream, pointers and size (fold_fields), from the same Site object,
 * thread, allows and phase, right after it in every region it goes to. Combine judges such a run
 * of copies one by one by the same rule: each but the last is followed by a copy, so it made the
 * host wait only if its (shared) host memory is pageable, and the last one goes on as any copy.
 * So the new copy folds into prev (its duration kept, in order) and prev stands for it from then
 * on: no call is built or handed over. The 100 sync-free merges of torch >= 2.9 are such a run
 * (one pinned block). Only while the host memory is told by pointer (folding): activity records
 * are per copy. */
static int folding = 1;

static int fold_fields(const Call *prev, const Entry *e, const Params *q) {
    if (!folding || prev->index != e->index || prev->role != ROLE_COPY || !prev->is_async ||
        prev->has_pair || !prev->has_blocked || prev->dir != q->dir ||
        (q->dir != DIR_H2D && q->dir != DIR_D2H))
        return 0;
    return prev->has_stream == q->has_stream && prev->stream == q->stream && prev->has_nbytes &&
           prev->nbytes == q->nbytes && prev->src == q->src && prev->dst == q->dst &&
           prev->has_src == (q->src != 0) && prev->has_dst == (q->dst != 0);
}

static int fold_into(const Call *prev, const Entry *e, const Params *q, PyObject *regions,
                     PyObject *site, PyObject *allows, int phase, PyObject *thread) {
    return fold_fields(prev, e, q) && same_context(prev, regions, site, allows, phase, thread);
}

/* Whether the async copy about to be kept repeats ``prev``, this thread's last kept call, where
 * prev is a copy completed by the stream sync riding on it (pair_with): the same api and
 * direction (fold_pair_fields), from the same Site object, thread, allows and phase, right after
 * it in every region it goes to, and nothing folded into prev as unpaired (those come after the
 * pairs). Combine judges each such pair the same way whatever its pointers: one blocking copy,
 * named for its sync, of both durations. So prev's pair is folded (its durations and sync kept,
 * in order) and prev stands for the new copy from then on: no call is built or handed over.
 * Torch 2.8's 100 merges are such a run (a pageable H2D copy and cudaStreamSynchronize each). */
static int fold_pair_fields(const Call *prev, const Entry *e, int dir) {
    return folding && prev->index == e->index && prev->role == ROLE_COPY && prev->is_async &&
           prev->has_pair && prev->has_pair_blocked && prev->has_blocked && !prev->nfolded &&
           prev->dir == dir && (dir == DIR_H2D || dir == DIR_D2H);
}

static int fold_pair(const Call *prev, const Entry *e, PyObject *regions, PyObject *site,
                     PyObject *allows, int phase, PyObject *thread, int dir) {
    return fold_pair_fields(prev, e, dir) && same_context(prev, regions, site, allows, phase, thread);
}

/* Grow an array of ``size``-byte items kept on a Call to hold one more (doubling from 16); 0, or
 * -1 with MemoryError set. With the GIL: a Call's arrays only move while the GIL is held, so
 * that an exit reading them (with the GIL) never reads a moved one; repeat() only fills room
 * already there. */
static int grow(void **items, Py_ssize_t n, Py_ssize_t *cap, size_t size) {
    if (n < *cap) return 0;
    Py_ssize_t want = *cap ? 2 * *cap : 16;
    void *grown = PyMem_Realloc(*items, size * (size_t)want);
    if (!grown) { PyErr_NoMemory(); return -1; }
    *items = grown;
    *cap = want;
    return 0;
}

/* What each rule does to prev, with the GIL (enter()) or without it (repeat()): only C fields
 * of the call this thread holds, in room already grown; the caller sets the thread's mode. */
static void fold_pair_apply(Call *prev, const Params *q, uint32_t corr) {
    prev->pairs[prev->npairs++] = (struct FoldedPair){prev->blocked, prev->pair_blocked, prev->pair};
    /* prev is the new copy now, not paired yet: its own stream, pointers and size */
    prev->has_pair = prev->has_pair_blocked = 0;
    prev->has_blocked = 0;
    prev->has_stream = (int8_t)q->has_stream; prev->stream = q->stream;
    prev->has_nbytes = 1; prev->nbytes = q->nbytes;
    prev->has_src = (int8_t)(q->src != 0); prev->src = q->src;
    prev->has_dst = (int8_t)(q->dst != 0); prev->dst = q->dst;
    prev->ncorr = 1;
    prev->corr[0] = corr;
}

static void fold_apply(Call *prev, uint32_t corr) {
    prev->folded[prev->nfolded++] = prev->blocked;
    prev->has_blocked = 0;
    prev->ncorr = 1;
    prev->corr[0] = corr;
}

static void pair_apply(Call *prev, const Entry *e) {
    prev->has_pair = 1; prev->pair = e->index;
}

/* when the call now kept began: stamped last, so that its duration holds none of our work */
static inline void stamp(Call *c, int mode) {
    if (mode == MODE_PAIRED) c->pair_t0 = now_ns();
    else c->t0 = now_ns();
}

#if REPEAT
/* ---- a repeat kept without the GIL ------------------------------------------------------------
 * A loop makes the same call from the same place again and again: torch 2.8's merge loop a copy
 * and its stream sync per merge, torch >= 2.9's a copy per merge. Kept with the GIL, each costs
 * the GIL, the regions, the user's site and the allows; on the H200 the detector's work inside a
 * 100-merge region was ~3 points over CUPTI's own dispatch, timed without either's set-up
 * (reports/probes/noop-inside-92f6432/). But where the thread is where it was when it kept its
 * last call, every one of those answers is the one it got then. So a call that one of the rules
 * above would fold or pair into that call is kept by them without the GIL, when:
 *  - its own parameters pass the rule's *_fields check against prev, and prev's arrays have room;
 *  - no region or allow was entered or left anywhere since (scopes_epoch, bumped from scope.py:
 *    so the regions and allows are the same objects, and their lists are alive);
 *  - the thread's interpreter frames are the same, each frame's code and instruction (the hash
 *    of the whole chain: so the user's site is the same Site, and so is the capture phase);
 *  - its context is the same object, entered no other since (context_ver), holding the same
 *    variables mapping (a ContextVar set makes a new one);
 *  - nothing was handed to the regions prev went to since (their lists' lengths);
 *  - prev was kept in the "run" phase. Torch's compile context is a thread-local that only
 *    Dynamo sets, around compilations whose own frames sit above any call they make; a repeat
 *    is never judged a compile-phase call, so at worst it fails where a compile-phase one would
 *    be allowed, never the other way.
 * Reading the thread's own frames and context without the GIL is safe: only this thread changes
 * them, and it is inside the CUDA call. Nothing Python is touched: no reference is taken or
 * dropped, nothing allocated. */

/* This thread's frames (hashed), context, its variables and its context version; 0 where it has
 * none to compare (no context yet, or a stack deeper than POS_FRAMES). */
static int position(PyThreadState *ts, uint64_t *frames, const void **ctx, const void **vars,
                    uint64_t *ver) {
#if PY_VERSION_HEX >= 0x030D0000
    const _PyInterpreterFrame *f = ts->current_frame;
#else
    const _PyInterpreterFrame *f = ts->cframe ? ts->cframe->current_frame : NULL;
#endif
    uint64_t h = 1469598103934665603ULL;
    int n = 0;
    for (; f; f = f->previous) {
        if (++n > POS_FRAMES) return 0;
#if PY_VERSION_HEX >= 0x030D0000
        h = mix(mix(h, (uint64_t)(uintptr_t)f->f_executable), (uint64_t)(uintptr_t)f->instr_ptr);
#else
        h = mix(mix(h, (uint64_t)(uintptr_t)f->f_code), (uint64_t)(uintptr_t)f->prev_instr);
#endif
    }
    const PyContext *c = (const PyContext *)ts->context;
    if (!c) return 0;
    *frames = mix(h, (uint64_t)n);
    *ctx = c; *vars = c->ctx_vars; *ver = ts->context_ver;
    return 1;
}

/* With the GIL, after enter() kept, folded or paired a call: where the thread is now, if its call
 * is one a repeat could fold or pair into (an async host<->device copy, kept in the run phase,
 * handed to the regions of its own context: ``lists``); else nothing to compare with. */
static void note_position(ThreadState *t, PyObject *lists) {
    Position *q = &P;
    Call *c = t->call;
    q->valid = 0;
    if (!c || !lists || c->role != ROLE_COPY || !c->is_async || c->phase != 0 ||
        (c->dir != DIR_H2D && c->dir != DIR_D2H) || PyTuple_GET_SIZE(lists) > POS_LISTS)
        return;
    PyThreadState *ts = PyGILState_GetThisThreadState();
    if (!ts || !position(ts, &q->frames, &q->ctx, &q->vars, &q->ctx_ver)) return;
    q->nlists = (int)PyTuple_GET_SIZE(lists);
    for (int i = 0; i < q->nlists; i++) {
        q->lists[i] = PyTuple_GET_ITEM(lists, i);
        q->sizes[i] = PyList_GET_SIZE(q->lists[i]);
    }
    q->epoch = scopes_epoch;
    q->valid = 1;
}

enum { R_NONE, R_FOLD_PAIR, R_FOLD, R_PAIR };

/* An outermost call's ENTER without the GIL: 1 where it was kept as a repeat of the thread's
 * last call (see above), 0 where enter() must decide, with the GIL. */
static int repeat(ThreadState *t, const Entry *e, const CallbackData *d) {
    Position *q = &P;
    Call *prev = t->call;
    if (!q->valid || !prev || t->mode != MODE_IDLE || q->epoch != scopes_epoch) return 0;
    Params k;
    int rule = R_NONE;
    if (e->stream_sync) {
        read_params(e, d, &k);
        if (pair_fields(prev, k.has_stream, k.stream)) rule = R_PAIR;
    } else if (e->role == ROLE_COPY && e->is_async) {
        read_params(e, d, &k);
        if (!k.has_ptrs) return 0;
        if (fold_pair_fields(prev, e, k.dir)) rule = prev->npairs < prev->pairs_cap ? R_FOLD_PAIR : 0;
        else if (fold_fields(prev, e, &k)) rule = prev->nfolded < prev->folded_cap ? R_FOLD : 0;
    }
    if (rule == R_NONE) return 0;
    PyThreadState *ts = PyGILState_GetThisThreadState();
    uint64_t frames, ver;
    const void *ctx, *vars;
    if (!ts || !position(ts, &frames, &ctx, &vars, &ver) || frames != q->frames ||
        ctx != q->ctx || vars != q->vars || ver != q->ctx_ver)
        return 0;
    for (int i = 0; i < q->nlists; i++)
        if (PyList_GET_SIZE(q->lists[i]) != q->sizes[i]) return 0;
    if (rule == R_PAIR) pair_apply(prev, e);
    else if (rule == R_FOLD_PAIR) fold_pair_apply(prev, &k, d->correlationId);
    else fold_apply(prev, d->correlationId);
    t->mode = rule == R_PAIR ? MODE_PAIRED : MODE_KEPT;
    stamp(prev, t->mode);
    return 1;
}
#endif

/* An outermost call's ENTER, with the GIL: keep it (or hand it to Python). ``prev``: this
 * thread's last kept call, done (borrowed), which a stream sync may complete (pair_with). */
static void enter(ThreadState *t, const Entry *e, int domain, uint32_t cbid, const CallbackData *d,
                  Call *prev) {
    if (e->role == ROLE_FREE && d->functionParams && *(void *const *)d->functionParams == NULL)
        return; /* cudaFree(NULL) frees nothing */
    Params k;
    read_params(e, d, &k);
    int dir = k.dir;
    /* a device-to-device or host-to-host copy never makes the host wait; it is kept in order only
     * to end a pending copy's pairing (combine), so it needs no site, thread or duration */
    int no_wait = e->role == ROLE_COPY && (dir == DIR_D2D || dir == DIR_H2H);
    PyObject *regions = NULL;
    int64_t tr = T0();
    if (PyContextVar_Get(regions_var, s_empty, &regions) < 0) goto error;
    TADD(P_REGIONS, tr);
    if (!PyTuple_Check(regions) || PyTuple_GET_SIZE(regions) == 0) {
        Py_CLEAR(regions);
        if (!backward_active || !PyDict_GET_SIZE(backward_active)) return;
        /* an autograd engine thread, maybe working for a region: its no-wait copies are kept
         * here when the owner is plain (handing each to Python cost ~4% of a training step:
         * reports/probes/backward-f2eb2d2/); everything else goes to the Python callback */
        PyObject *owner = no_wait ? engine_owner() : NULL;
        if (PyErr_Occurred()) goto error;
        if (!owner) {
            t->mode = MODE_PYTHON;
            forward(NULL, domain, cbid, d);
            return;
        }
        regions = Py_NewRef(owner);
    }
    if (no_wait) {
        uint32_t corr = d->correlationId;
        PyObject *call = new_call(e, dir, &corr, 1, k.has_stream, k.stream, no_site, 0, s_nothread,
                                  s_empty, 0, 0.0, k.has_ptrs, k.nbytes, k.src, k.dst, 0);
        int rc = call ? deliver(regions, call) : -1;
        Py_XDECREF(call); Py_DECREF(regions);
        if (rc < 0) goto error;
        return;
    }
    int64_t tc = T0();
    int phase = is_compiling();
    TADD(P_COMPILING, tc);
    if (!t->name || t->name_gen != generation) {
        PyObject *name = PyObject_CallNoArgs(thread_name);
        if (!name) { Py_DECREF(regions); goto error; }
        Py_XSETREF(t->name, name);
        t->name_gen = generation;
    }
    int64_t ts = T0();
    PyObject *site = user_site(&phase), *allows = NULL, *thread = Py_NewRef(t->name);
    TADD(P_SITE, ts);
    if (!site || PyContextVar_Get(allows_var, s_empty, &allows) < 0) {
        Py_DECREF(regions); Py_XDECREF(site); Py_XDECREF(allows); Py_DECREF(thread);
        goto error;
    }
    int rule = 0, mode = MODE_KEPT;
    if (prev && e->role == ROLE_COPY && e->is_async && k.has_ptrs &&
        fold_pair(prev, e, regions, site, allows, phase, thread, dir))
        rule = grow((void **)&prev->pairs, prev->npairs, &prev->pairs_cap, sizeof *prev->pairs) < 0
               ? -1 : R_FOLD_PAIR;
    else if (prev && e->role == ROLE_COPY && e->is_async && k.has_ptrs &&
             fold_into(prev, e, &k, regions, site, allows, phase, thread))
        rule = grow((void **)&prev->folded, prev->nfolded, &prev->folded_cap, sizeof *prev->folded) < 0
               ? -1 : R_FOLD;
    else if (prev && e->stream_sync &&
             pair_with(prev, regions, site, allows, phase, thread, k.has_stream, k.stream))
        rule = R_PAIR;
    if (rule) {
        Py_DECREF(site); Py_DECREF(allows); Py_DECREF(thread); Py_DECREF(regions);
        if (rule < 0) goto error;
        if (rule == R_FOLD_PAIR) fold_pair_apply(prev, &k, d->correlationId);
        else if (rule == R_FOLD) fold_apply(prev, d->correlationId);
        else { pair_apply(prev, e); mode = MODE_PAIRED; }
        t->call = (Call *)Py_NewRef((PyObject *)prev);
        t->mode = mode;
#if REPEAT
        note_position(t, last_lists); /* same_context passed: prev is last in last_lists */
#endif
        stamp(prev, mode);
        return;
    }
    /* handed over now, in the order this thread's calls begin (the only calls kept are the
     * outermost, so that is the order they end in too); EXIT stamps the duration */
    uint32_t corr = d->correlationId;
    int64_t tb = T0();
    PyObject *call = new_call(e, dir, &corr, 1, k.has_stream, k.stream, site, phase, thread, allows,
                              0, 0.0, k.has_ptrs, k.nbytes, k.src, k.dst, 0);
    TADD(P_BUILD, tb);
    Py_DECREF(site); Py_DECREF(allows); Py_DECREF(thread);
    int64_t td = T0();
    int rc = call ? deliver(regions, call) : -1;
    TADD(P_DELIVER, td);
    Py_DECREF(regions);
    if (rc < 0) { Py_XDECREF(call); goto error; }
    t->call = (Call *)call;
    t->mode = MODE_KEPT;
#if REPEAT
    note_position(t, last_lists); /* deliver() left the regions' lists there */
#endif
    stamp(t->call, MODE_KEPT);
    return;
error:
    errors++;
    PyErr_Clear();
}

/* The kept call's EXIT, or that of the stream sync riding on it (MODE_PAIRED), without the
 * GIL: only C fields of the call this thread holds are written. The call is already in its
 * regions' lists; nothing there reads it before the region's exit, which comes after the call
 * returned (the same thread), or while another thread's region would see it unfinished
 * (blocked_us None) either way. */
static void leave(ThreadState *t) {
    Call *c = t->call;
    int64_t t1 = now_ns();
    /* microseconds to one decimal, as the Python callback's round((t1 - t0) / 1000, 1) */
    if (t->mode == MODE_PAIRED) { /* the sync riding on the copy: its own duration */
        c->pair_blocked = (double)llround((double)(t1 - c->pair_t0) / 100.0) / 10.0;
        c->has_pair_blocked = 1;
    } else {
        c->blocked = (double)llround((double)(t1 - c->t0) / 100.0) / 10.0;
        c->has_blocked = 1;
    }
    t->mode = MODE_IDLE;
}

#if PY_VERSION_HEX >= 0x030D0000
#define FINALIZING() Py_IsFinalizing()
#else
#define FINALIZING() _Py_IsFinalizing()
#endif

/* The GIL, with the garbage collector held off while the callback has it: a collection here
 * (run by an allocation on CPython 3.11, by the next bytecode of a Python call on 3.12) could
 * free a tensor whose release calls CUDA from within the CUDA call this callback belongs to, and
 * a CUDA call in a callback hung the process (NOTES). Collections due then run after the
 * callback, at the program's next allocation; a collector the program disabled stays disabled.
 * One race is left: where the callback runs Python (a cache miss), the interpreter may switch to
 * another thread, and a gc.disable() made there and then is undone when the callback ends. */
typedef struct { PyGILState_STATE gil; int gc; } Held;

static inline Held hold(void) {
    Held h;
    h.gil = PyGILState_Ensure();
    h.gc = PyGC_Disable();
    return h;
}

static inline void unhold(Held h) {
    if (h.gc) PyGC_Enable();
    PyGILState_Release(h.gil);
}

static void callback_body(void *userdata, int domain, uint32_t cbid, const CallbackData *d) {
    if (domain < 1 || domain > 2 || cbid >= MAXCB || !d) return;
    if (FINALIZING()) return; /* no thread state may be taken while the interpreter shuts down */
    const Entry *e = &entries[domain][cbid];
    if (!e->used) return;
    ThreadState *t = &T;
    if (t->gen != generation) { /* state from before a park or a new subscription: stale */
        if (t->call) {
            Held h = hold();
            clear_kept(t);
            unhold(h);
        }
        t->gen = generation; t->depth = 0; t->mode = MODE_IDLE;
#if REPEAT
        P.valid = 0;
#endif
    }
    int64_t t0 = T0();
    if (d->callbackSite == 0) { /* CUPTI_API_ENTER */
        int depth = t->depth++;
        if (depth) { /* a driver call under the runtime call: the same wait, the same event */
            if (t->mode == MODE_KEPT) {
                Call *c = t->call; /* a C field of the call this thread holds: no GIL needed */
                if (c->ncorr < MAXCORR) c->corr[c->ncorr++] = d->correlationId;
            } else if (t->mode == MODE_PYTHON) {
                Held h = hold();
                forward(userdata, domain, cbid, d);
                unhold(h);
            }
            TADD(P_NESTED, t0);
            return;
        }
#if REPEAT
        if (P.valid && repeat(t, e, d)) {
            TADD(P_REPEAT, t0);
            return;
        }
#endif
        Held h = hold();
        TADD(P_ENTER_GIL, t0);
        int64_t t1 = T0();
        Call *prev = t->call; /* the last call, done: let go of now that the GIL is held, once */
        t->call = NULL;       /* a stream sync has seen whether it completes it */
        t->mode = MODE_IDLE;
        enter(t, e, domain, cbid, d, prev);
        Py_XDECREF(prev);
        TADD(P_ENTER, t1);
        int64_t t2 = T0();
        unhold(h);
        TADD(P_ENTER_RELEASE, t2);
    } else {
        int depth = t->depth > 0 ? t->depth - 1 : 0;
        t->depth = depth;
        if (t->mode == MODE_PYTHON) {
            Held h = hold();
            forward(userdata, domain, cbid, d);
            unhold(h);
            if (!depth) t->mode = MODE_IDLE;
            return;
        }
        if (depth || (t->mode != MODE_KEPT && t->mode != MODE_PAIRED)) {
            if (depth) TADD(P_NESTED, t0);
            return;
        }
        leave(t);
        TADD(P_LEAVE, t0);
    }
}

static void callback(void *userdata, int domain, uint32_t cbid, const CallbackData *d) {
    int64_t t0 = T0();
    callback_body(userdata, domain, cbid, d);
    TADD(P_CALLBACK, t0);
}

/* ---- the module ---------------------------------------------------------------------------- */

static PyObject *fn_configure(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"table", "regions", "allows", "backward_active", "py_callback",
                            "compiling", "code_cache", "code_class", "site_cache", "make_site",
                            "thread_name", "call_type", "no_site", "stack_depth", "compile_tls",
                            "thread_active", "dummy_thread", NULL};
    PyObject *table, *o[15];
    int depth;
    o[12] = o[13] = o[14] = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OOO!OOO!OO!OOOOi|OOO", names, &PyDict_Type,
                                     &table, &o[0], &o[1], &PyDict_Type, &o[2], &o[3], &o[4],
                                     &PyDict_Type, &o[5], &o[6], &PyDict_Type, &o[7], &o[8], &o[9],
                                     &o[10], &o[11], &depth, &o[12], &o[13], &o[14]))
        return NULL;
    if ((o[13] != Py_None && !PyDict_Check(o[13])) || (o[14] != Py_None && !PyType_Check(o[14]))) {
        PyErr_SetString(PyExc_TypeError, "thread_active must be a dict and dummy_thread a type");
        return NULL;
    }
    if (!PyType_Check(o[10]) || !PyType_IsSubtype((PyTypeObject *)o[10], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "call_type must be a tuple subclass");
        return NULL;
    }
    PyObject *fields = PyObject_GetAttrString(o[10], "_fields");
    Py_ssize_t nfields = fields && PyTuple_Check(fields) ? PyTuple_GET_SIZE(fields) : -1;
    Py_XDECREF(fields);
    if (nfields != CALL_FIELDS) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "call_type must have %d _fields, not %zd", CALL_FIELDS, nfields);
        return NULL;
    }
    Py_ssize_t n = PyDict_GET_SIZE(table), pos = 0, i = 0;
    PyObject *apis = PyTuple_New(n), *kinds = PyTuple_New(n), *roles = PyTuple_New(n), *key, *val;
    if (!apis || !kinds || !roles) goto fail;
    if (n > MAXIDS) {
        PyErr_Format(PyExc_ValueError, "%zd callback ids, more than %d", n, MAXIDS);
        goto fail;
    }
    static Entry fresh[3][MAXCB];
    static struct { int domain; int cbid; } fresh_ids[MAXIDS];
    memset(fresh, 0, sizeof fresh);
    while (PyDict_Next(table, &pos, &key, &val)) {
        int domain, cbid, is_async, spec, dir;
        PyObject *api, *role, *kind;
        /* (domain, cbid) -> (api, role, kind, is_async, spec_code, dir_code) */
        if (!PyArg_ParseTuple(key, "ii", &domain, &cbid) ||
            !PyArg_ParseTuple(val, "UUOpii", &api, &role, &kind, &is_async, &spec, &dir))
            goto fail;
        if (domain < 1 || domain > 2 || cbid < 0 || cbid >= MAXCB || spec < 0 || spec > 5 ||
            dir < 0 || dir > 4) {
            PyErr_Format(PyExc_ValueError, "bad table entry for (%d, %d)", domain, cbid);
            goto fail;
        }
        int role_code = PyUnicode_CompareWithASCIIString(role, "sync") == 0 ? ROLE_SYNC
                      : PyUnicode_CompareWithASCIIString(role, "copy") == 0 ? ROLE_COPY
                      : PyUnicode_CompareWithASCIIString(role, "free") == 0 ? ROLE_FREE : 0;
        if (!role_code) { PyErr_Format(PyExc_ValueError, "unknown role %R", role); goto fail; }
        Entry *e = &fresh[domain][cbid];
        e->used = 1; e->role = (int8_t)role_code; e->dir = (int8_t)dir;
        e->is_async = (int8_t)is_async; e->spec = (int8_t)spec; e->index = (int16_t)i;
        e->stream_sync = (int8_t)(role_code == ROLE_SYNC && PyUnicode_Check(kind) &&
                                  PyUnicode_CompareWithASCIIString(kind, "stream_sync") == 0);
        fresh_ids[i].domain = domain; fresh_ids[i].cbid = cbid;
        PyTuple_SET_ITEM(apis, i, Py_NewRef(api));
        PyTuple_SET_ITEM(roles, i, Py_NewRef(role));
        PyTuple_SET_ITEM(kinds, i, Py_NewRef(kind));
        i++;
    }
    PyObject *name_tuple = PyTuple_Pack(3, apis, roles, kinds);
    if (!name_tuple) goto fail;
    Py_DECREF(apis); Py_DECREF(roles); Py_DECREF(kinds);
    memcpy(entries, fresh, sizeof entries);
    memcpy(ids, fresh_ids, sizeof ids);
    nids = (int)i;
    Py_XSETREF(names_table, name_tuple); /* calls made before keep the table they were made under */
    PyObject **slots[15] = {&regions_var, &allows_var, &backward_active, &py_callback, &compiling,
                            &code_cache, &code_class, &site_cache, &make_site, &thread_name,
                            &call_type, &no_site, &compile_tls, &thread_active, &dummy_thread};
    for (int k = 0; k < 15; k++) Py_XSETREF(*slots[k], Py_NewRef(o[k]));
    if (thread_active == Py_None || dummy_thread == Py_None) Py_CLEAR(thread_active);
    class_clear(); /* the classes were attribution's answers for the previous configuration */
    site_clear();
    stack_depth = depth;
    generation++;
    config_epoch++; /* compile_tls may be another object now */
    scopes_epoch++;
    Py_RETURN_NONE;
fail:
    Py_XDECREF(apis); Py_XDECREF(kinds); Py_XDECREF(roles);
    return NULL;
}

typedef int (*EnableFn)(uint32_t enable, void *subscriber, int domain, int cbid);
typedef int (*SubscribeFn)(void **subscriber, void *callback, void *userdata);
typedef int (*UnsubscribeFn)(void *subscriber);

/* cuptiEnableCallback(on, handle, domain, cbid) for every configured id; the first error */
static int switch_all(EnableFn enable, void *handle, int on) {
    int first_error = 0;
    for (int k = 0; k < nids; k++) {
        int rc = enable((uint32_t)on, handle, ids[k].domain, ids[k].cbid);
        if (rc && !first_error) first_error = rc;
    }
    return first_error;
}

/* Every CUPTI call below runs with the GIL released, as ctypes made them: CUPTI may wait for a
 * callback in flight on another thread, and that callback may be waiting for the GIL. */
static PyObject *fn_switch(PyObject *self, PyObject *args) {
    unsigned long long fn, handle;
    int on, rc;
    if (!PyArg_ParseTuple(args, "KKi", &fn, &handle, &on)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = switch_all((EnableFn)(uintptr_t)fn, (void *)(uintptr_t)handle, on);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

static PyObject *fn_on(PyObject *self, PyObject *args) {
    /* on(cuptiSubscribe, cuptiEnableCallback, handle) -> (subscribe error, handle, enable error):
     * subscribes this module's callback when handle is 0, makes every thread's call state stale,
     * then enables every id; a region's whole entry into CUPTI in one call (ctypes calls and
     * their argument objects were most of it on a cold host) */
    unsigned long long sub_fn, enable_fn, handle;
    int sub_rc = 0, enable_rc = 0;
    if (!PyArg_ParseTuple(args, "KKK", &sub_fn, &enable_fn, &handle)) return NULL;
    void *h = (void *)(uintptr_t)handle;
    generation++; /* under the GIL, as every other writer; nothing of ours fires before enabling */
    Py_BEGIN_ALLOW_THREADS
    if (!h) sub_rc = ((SubscribeFn)(uintptr_t)sub_fn)(&h, (void *)callback, NULL);
    if (!sub_rc) enable_rc = switch_all((EnableFn)(uintptr_t)enable_fn, h, 1);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(iKi)", sub_rc, sub_rc ? 0ULL : (unsigned long long)(uintptr_t)h, enable_rc);
}

static PyObject *fn_off(PyObject *self, PyObject *args) {
    /* off(cuptiEnableCallback, cuptiUnsubscribe or 0, handle) -> first error: every id disabled
     * (before unsubscribing: unsubscribing with callbacks on crashed a syncing thread), then
     * unsubscribed unless the unsubscribe address is 0 (the hub parks) */
    unsigned long long enable_fn, unsub_fn, handle;
    int rc;
    if (!PyArg_ParseTuple(args, "KKK", &enable_fn, &unsub_fn, &handle)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = switch_all((EnableFn)(uintptr_t)enable_fn, (void *)(uintptr_t)handle, 0);
    if (unsub_fn) {
        int urc = ((UnsubscribeFn)(uintptr_t)unsub_fn)((void *)(uintptr_t)handle);
        if (!rc) rc = urc;
    }
    Py_END_ALLOW_THREADS
    forget();
    return PyLong_FromLong(rc);
}

static PyObject *fn_forget(PyObject *self, PyObject *noargs) {
    forget();
    Py_RETURN_NONE;
}

static PyObject *fn_address(PyObject *self, PyObject *noargs) {
    return PyLong_FromVoidPtr((void *)callback);
}

static PyObject *fn_folding(PyObject *self, PyObject *arg) {
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    folding = on;
    Py_RETURN_NONE;
}

static PyObject *fn_scopes_changed(PyObject *self, PyObject *noargs) {
    scopes_epoch++; /* with the GIL, as every writer; repeat() reads it without */
    Py_RETURN_NONE;
}

static PyObject *fn_repeats(PyObject *self, PyObject *noargs) {
    return PyBool_FromLong(REPEAT);
}

static PyObject *fn_new_generation(PyObject *self, PyObject *noargs) {
    generation++; /* every thread's depth and in-flight call from before are stale */
    Py_RETURN_NONE;
}

static PyObject *fn_timing(PyObject *self, PyObject *args) {
    /* timing(on) -> {piece: (ns summed, times)} so far, then zeroed; on: keep timing after */
    int on;
    if (!PyArg_ParseTuple(args, "p", &on)) return NULL;
    PyObject *out = PyDict_New();
    for (int i = 0; out && i < NPIECES; i++) {
        PyObject *v = Py_BuildValue("(Ll)", (long long)piece_ns[i], piece_n[i]);
        if (!v || PyDict_SetItemString(out, piece_names[i], v) < 0) Py_CLEAR(out);
        Py_XDECREF(v);
    }
    memset(piece_ns, 0, sizeof piece_ns);
    memset(piece_n, 0, sizeof piece_n);
    timing_on = on;
    return out;
}

static PyObject *fn_errors(PyObject *self, PyObject *noargs) {
    return PyLong_FromLong(errors);
}

static PyObject *fn_fire(PyObject *self, PyObject *args) {
    /* tests: call the callback as CUPTI would, with the GIL released around it */
    int domain;
    unsigned int cbid;
    unsigned long long data;
    if (!PyArg_ParseTuple(args, "iIK", &domain, &cbid, &data)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    callback(NULL, domain, cbid, (const CallbackData *)(uintptr_t)data);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

typedef int (*PointerAttributesFn)(void *attributes, const void *ptr);
typedef int (*GetLastErrorFn)(void);

/* cudaPointerGetAttributes(&a, p).type for each of ptrs[0..n) into types, -1 where it failed (the
 * error then cleared with cudaGetLastError, so that torch's next launch check finds none), with
 * the GIL released around the runtime's calls (they may wait for a lock that a thread inside a
 * CUDA call holds, whose callback may be waiting for the GIL) */
static void query_types(PointerAttributesFn get, GetLastErrorFn clear, const uint64_t *ptrs,
                        int *types, Py_ssize_t n) {
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        /* cudaPointerAttributes: type, device, devicePointer, hostPointer; room for more */
        struct { int type; int device; void *dev; void *host; long reserved[16]; } a;
        memset(&a, 0, sizeof a);
        if (get(&a, (const void *)(uintptr_t)ptrs[i]) != 0) { clear(); types[i] = -1; }
        else types[i] = a.type;
    }
    Py_END_ALLOW_THREADS
}

static PyObject *fn_pointer_types(PyObject *self, PyObject *args) {
    /* cudaPointerGetAttributes(&a, p).type for each pointer, -1 where it failed (the error is
     * then cleared with cudaGetLastError, as hostmem.pointer_kinds does), without a ctypes call
     * per pointer, with the GIL released around them (pointer_kinds asks one pointer at a time,
     * the first time a copy needs it) */
    unsigned long long attr_fn, last_error_fn;
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "KKO", &attr_fn, &last_error_fn, &seq)) return NULL;
    PyObject *fast = PySequence_Fast(seq, "pointer_types: a sequence of addresses");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    uint64_t *ptrs = PyMem_Malloc(sizeof(uint64_t) * (n ? n : 1));
    int *types = PyMem_Malloc(sizeof(int) * (n ? n : 1));
    if (!ptrs || !types) { PyMem_Free(ptrs); PyMem_Free(types); Py_DECREF(fast); return PyErr_NoMemory(); }
    for (Py_ssize_t i = 0; i < n; i++) {
        ptrs[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (PyErr_Occurred()) { PyMem_Free(ptrs); PyMem_Free(types); Py_DECREF(fast); return NULL; }
    }
    Py_DECREF(fast);
    query_types((PointerAttributesFn)(uintptr_t)attr_fn, (GetLastErrorFn)(uintptr_t)last_error_fn,
                ptrs, types, n);
    PyObject *out = PyTuple_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *v = PyLong_FromLong(types[i]);
        if (!v) { Py_CLEAR(out); break; }
        PyTuple_SET_ITEM(out, i, v);
    }
    PyMem_Free(ptrs); PyMem_Free(types);
    return out;
}

/* ---- host memory by pointer, in C ------------------------------------------------------------
 *
 * hostmem.ByPointer's answers for by_pointer(): the CUPTI memory kind of each host pointer a
 * region's copies used, asked of the runtime (cudaPointerGetAttributes) the first time a copy
 * needs it, never twice. A 100-merge region's exit spent ~19 us cold on the H200's host asking
 * its one pointer through Python (ByPointer, pointer_kinds' ask, a batch call back into C:
 * reports/probes/region-exit-8b316a8/); here the question is one C loop. functions() says what
 * to call it with: (cudaPointerGetAttributes, cudaGetLastError) addresses, or None while nothing
 * may be asked (the thread's stream captures a graph, no runtime); it is called once, at the first
 * question, as pointer_kinds checks the capture once. */
typedef struct {
    uint64_t *key;     /* open addressing; 0: empty (a null pointer is never asked) */
    int *kind;         /* CUPTI memory kind, -1: asked and nothing said */
    size_t cap, n;     /* cap: a power of two */
    PyObject *functions;
    int state;         /* 0: functions() not called yet; 1: may ask; 2: never ask */
    PointerAttributesFn get;
    GetLastErrorFn clear;
} Pointers;

static void pointers_free(Pointers *p) { PyMem_Free(p->key); PyMem_Free(p->kind); }

static size_t pointers_slot(const Pointers *p, uint64_t k) {
    size_t h = (size_t)((k >> 4) * 0x9e3779b97f4a7c15ULL >> 32) & (p->cap - 1);
    while (p->key[h] && p->key[h] != k) h = (h + 1) & (p->cap - 1);
    return h;
}

static int pointers_grow(Pointers *p, size_t more) {
    if (p->cap && 2 * (p->n + more) <= p->cap) return 0;
    size_t cap = p->cap ? p->cap : 16;
    while (cap < 2 * (p->n + more)) cap *= 2;
    Pointers q = *p;
    q.cap = cap; q.n = 0;
    q.key = PyMem_Calloc(cap, sizeof *q.key);
    q.kind = PyMem_Calloc(cap, sizeof *q.kind);
    if (!q.key || !q.kind) { pointers_free(&q); PyErr_NoMemory(); return -1; }
    for (size_t i = 0; i < p->cap; i++)
        if (p->key[i]) { size_t h = pointers_slot(&q, p->key[i]); q.key[h] = p->key[i]; q.kind[h] = p->kind[i]; q.n++; }
    pointers_free(p);
    *p = q;
    return 0;
}

/* cudaPointerGetAttributes' memory type -> CUPTI's memory kind (hostmem._KIND_OF_TYPE: host memory
 * not registered is pageable, registered pinned); -1 (the query failed): nothing says */
static int kind_of_type(int t) { return t < 0 ? -1 : t == 0 ? 1 : t == 1 ? 2 : t == 2 ? 3 : t == 3 ? 5 : 0; }

/* ask every pointer of ptrs[0..n) not known yet (nulls skipped, each once, through the table
 * itself: a region's copies may use thousands of pointers), with the GIL released around the
 * runtime's calls */
static int pointers_ask(Pointers *p, const uint64_t *ptrs, Py_ssize_t n) {
    if (pointers_grow(p, (size_t)n) < 0) return -1;
    uint64_t *ask = NULL;
    int *types = NULL;
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++) { /* each pointer not known yet, once: entered now */
        if (!ptrs[i]) continue;
        size_t h = pointers_slot(p, ptrs[i]);
        if (p->key[h]) continue;
        if (!ask) {
            ask = PyMem_Malloc(sizeof *ask * (size_t)n);
            types = PyMem_Malloc(sizeof *types * (size_t)n);
            if (!ask || !types) { PyMem_Free(ask); PyMem_Free(types); PyErr_NoMemory(); return -1; }
        }
        p->key[h] = ptrs[i]; p->kind[h] = -1; p->n++;
        ask[m++] = ptrs[i];
    }
    if (!m) return 0;
    int rc = 0;
    if (p->state == 0) { /* the first question: may the runtime be asked at all? */
        p->state = 2;
        PyObject *r = PyObject_CallNoArgs(p->functions);
        unsigned long long a = 0, b = 0;
        if (r && r != Py_None && !PyTuple_Check(r))
            PyErr_Format(PyExc_TypeError, "functions() must return None or two addresses, not %R", r);
        if (!r || (r != Py_None && (!PyTuple_Check(r) || !PyArg_ParseTuple(r, "KK", &a, &b)))) rc = -1;
        else if (r != Py_None) {
            p->get = (PointerAttributesFn)(uintptr_t)a;
            p->clear = (GetLastErrorFn)(uintptr_t)b;
            p->state = 1;
        }
        Py_XDECREF(r);
    }
    if (rc == 0 && p->state == 1) {
        query_types(p->get, p->clear, ask, types, m);
        for (Py_ssize_t i = 0; i < m; i++) p->kind[pointers_slot(p, ask[i])] = kind_of_type(types[i]);
    }
    PyMem_Free(ask); PyMem_Free(types);
    return rc;
}

/* the CUPTI memory kind of ptr, asked if need be; -1: nothing says; -2: error */
static int pointer_kind(Pointers *p, uint64_t ptr) {
    if (!ptr) return -1;
    if (p->cap) { /* known: no question, no allocation */
        size_t h = pointers_slot(p, ptr);
        if (p->key[h]) return p->kind[h];
    }
    if (pointers_ask(p, &ptr, 1) < 0) return -2;
    return p->kind[pointers_slot(p, ptr)];
}

/* The async host<->device copies that cannot become an event (drop[i] = 1), so that the
 * combining loop passes over them: 100 merges leave 100 pinned copies, each ~1 us in Python
 * with caches cold on the H200's host. Such a copy is one whose next cuda observation is a copy
 * too (combine pairs an async copy only with the call right after it, and a copy ends the
 * pairing) and whose host memory is pinned (an unpaired pinned copy made the host wait for
 * nothing). Anything else is kept, and an observation of another detector ends a candidate's
 * run. The candidates' distinct host pointers are asked in one question. 1: a call of the
 * Python callback is among them (by_pointer answers NotImplemented); -1: error. */
static int pinned_copies(PyObject *obs, Pointers *p, char *drop) {
    /* one pass over the calls (each read once, with caches cold at region exit): host[i] is
     * candidate i's host pointer, ask the pointers of those followed by a copy */
    Py_ssize_t n = PyList_GET_SIZE(obs), cand = -1, nptr = 0;
    uint64_t *host = PyMem_Malloc(sizeof *host * (size_t)(n ? 2 * n : 1)), *ask = host + n;
    if (!host) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(obs, i);
        if (!Py_IS_TYPE(o, &CallType)) {
            if (call_type && PyObject_TypeCheck(o, (PyTypeObject *)call_type)) { PyMem_Free(host); return 1; }
            cand = -1; /* another detector's: ends a candidate's run (combine decides the rest) */
            continue;
        }
        const Call *k = (const Call *)o;
        int is_copy = k->role == ROLE_COPY;
        if (is_copy && cand >= 0) { drop[cand] = 1; ask[nptr++] = host[cand]; }
        int async_host = is_copy && k->is_async && !k->has_pair && !k->npairs &&
                         ((k->dir == DIR_H2D && k->has_src) ||
                                                    (k->dir == DIR_D2H && k->has_dst));
        cand = async_host ? i : -1;
        if (async_host) host[i] = k->dir == DIR_H2D ? k->src : k->dst;
    }
    int rc = nptr ? pointers_ask(p, ask, nptr) : 0;
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++)  /* every pointer known now: no question */
        if (drop[i]) drop[i] = pointer_kind(p, host[i]) == 2;
    PyMem_Free(host);
    return rc;
}

/* ---- combine: a region's calls into events, in C ----------------------------------------------
 *
 * A SyncEvent is a frozen dataclass with __slots__: an event is its object and one pointer per
 * field, written here at the offsets its member descriptors name (read once per event type:
 * Layout). A __dict__ per event (14 keys) was four times the memory to fill at exit and to free
 * at the next region's entry, with caches cold. */
#define EVENT_FIELDS 32
typedef struct {
    PyObject *type;                    /* the event type the offsets are of (owned) */
    Py_ssize_t n, off[EVENT_FIELDS];   /* fields in the defaults' order, and each one's offset */
    int api, kind, filename, lineno, function, stack, thread, blocked, detectors, phase;
} Layout;
static Layout layout;

static int field_index(PyObject *names, const char *name) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(names); i++)
        if (PyUnicode_CompareWithASCIIString(PyList_GET_ITEM(names, i), name) == 0) return (int)i;
    PyErr_Format(PyExc_TypeError, "the event type has no field %s", name);
    return -1;
}

/* The layout of ``type`` (a class with __slots__), its fields those of ``defaults`` in order */
static const Layout *event_layout(PyObject *type, PyObject *defaults) {
    if (layout.type == type && layout.n == PyDict_GET_SIZE(defaults)) return &layout;
    Layout l = {0};
    PyObject *names = PyDict_Keys(defaults);
    if (!names) return NULL;
    l.n = PyList_GET_SIZE(names);
    if (l.n > EVENT_FIELDS) {
        PyErr_Format(PyExc_TypeError, "more than %d event fields", EVENT_FIELDS);
        goto fail;
    }
    for (Py_ssize_t i = 0; i < l.n; i++) {
        PyObject *d = PyDict_GetItemWithError(((PyTypeObject *)type)->tp_dict, PyList_GET_ITEM(names, i));
        if (!d || !Py_IS_TYPE(d, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%R: field %R is not an object slot", type,
                             PyList_GET_ITEM(names, i));
            goto fail;
        }
        l.off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    if ((l.api = field_index(names, "api")) < 0 || (l.kind = field_index(names, "kind")) < 0 ||
        (l.filename = field_index(names, "filename")) < 0 ||
        (l.lineno = field_index(names, "lineno")) < 0 ||
        (l.function = field_index(names, "function")) < 0 ||
        (l.stack = field_index(names, "stack")) < 0 || (l.thread = field_index(names, "thread")) < 0 ||
        (l.blocked = field_index(names, "host_blocked_us")) < 0 ||
        (l.detectors = field_index(names, "detectors")) < 0 || (l.phase = field_index(names, "phase")) < 0)
        goto fail;
    Py_DECREF(names);
    l.type = Py_NewRef(type);
    Py_XSETREF(layout.type, NULL);
    layout = l;
    return &layout;
fail:
    Py_DECREF(names);
    return NULL;
}

#define SLOT(ev, L, i) (*(PyObject **)((char *)(ev) + (L)->off[(i)]))

/* detectors.cuda.combine's loop, for a region whose cuda observations are all this module's
 * Calls (any other callback's, or an observation claiming source "cuda" that is neither, and it
 * answers NotImplemented: the Python loop decides). Same rules, read from the Calls' C fields; the
 * events are SyncEvents built as SyncEvent.at builds them (its slots filled from the fields'
 * defaults, then the event's own values), without a Python frame per event. On the H200's host
 * 2.8.0's 100 merges (each a pageable copy and a stream sync) left 100 events to build at exit:
 * ~2.5 us each in Python (reports/gpu/2.8.0/overhead-2.8.0.json). host_kind(call, direction) and
 * direction(call) are the memory's (hostmem.ByPointer or ByCorrelation), called only where the
 * Python loop calls them. */
typedef struct {
    PyObject *type, *defaults, *detectors, *kinds[5]; /* borrowed, from the arguments */
    PyObject *site, *filename, *lineno, *function, *stack; /* the last site read (owned) */
    PyObject *host_kind, *direction, *events;
    Pointers *ptrs;    /* by_pointer's: host memory asked here, not of host_kind and direction */
    const char *skip;  /* by_pointer's: observations passed over (pinned_copies) */
    long unknown, undirected;
    /* the last event's field values (owned; NULL: none yet), and what they were made from: a
     * loop's events differ in host_blocked_us alone (2.8.0's 100 merges, 100 events from one
     * line) */
    PyObject *tpl[EVENT_FIELDS];
    int has_tpl;
    const void *tpl_site, *tpl_api, *tpl_kind, *tpl_thread;
    int tpl_phase;
} Combine;
enum { K_COPY_H2D, K_COPY_D2H, K_PAGEABLE, K_STREAM_SYNC, K_FREE };
static PyObject *s_filename, *s_lineno, *s_function, *s_stack, *s_source, *s_pinned, *s_pageable;

static void combine_clear(Combine *m) {
    Py_CLEAR(m->site); Py_CLEAR(m->filename); Py_CLEAR(m->lineno); Py_CLEAR(m->function);
    Py_CLEAR(m->stack);
}

static void tpl_clear(Combine *m) {
    for (int i = 0; i < EVENT_FIELDS; i++) Py_CLEAR(m->tpl[i]);
    m->has_tpl = 0;
}

static int read_site(Combine *m, PyObject *site) {
    if (site == m->site) return 0;
    combine_clear(m);
    m->site = Py_NewRef(site);
    m->filename = PyObject_GetAttr(site, s_filename);
    m->lineno = m->filename ? PyObject_GetAttr(site, s_lineno) : NULL;
    m->function = m->lineno ? PyObject_GetAttr(site, s_function) : NULL;
    m->stack = m->function ? PyObject_GetAttr(site, s_stack) : NULL;
    if (!m->stack) { combine_clear(m); return -1; }
    return 0;
}

static int same(PyObject *a, PyObject *b) { return a == b ? 1 : PyObject_RichCompareBool(a, b, Py_EQ); }

/* (SyncEvent.at(c.site, api, kind, c.thread, blocked, detectors, c.phase), c.allows, None)
 * appended to the events; blocked NULL: the call's own. The event's slots are filled from a
 * template (the fields' defaults, then the event's values but host_blocked_us), made again only
 * when site, api, kind, thread or phase differ from the last event's. The pointers compared are
 * the observations' own objects, alive until the loop ends. */
static int add_event(Combine *m, const Call *c, PyObject *kind, PyObject *blocked, PyObject *api) {
    if (!api) api = call_name(c, F_API);
    const Layout *L = event_layout(m->type, m->defaults);
    if (!L) return -1;
    if (!m->has_tpl || m->tpl_site != c->site || m->tpl_api != api || m->tpl_kind != kind ||
        m->tpl_thread != c->thread || m->tpl_phase != c->phase) {
        tpl_clear(m);
        if (read_site(m, c->site) < 0) return -1;
        Py_ssize_t pos = 0, i = 0;
        PyObject *key, *value;
        while (PyDict_Next(m->defaults, &pos, &key, &value) && i < L->n) m->tpl[i++] = Py_NewRef(value);
        Py_SETREF(m->tpl[L->api], Py_NewRef(api));
        Py_SETREF(m->tpl[L->kind], Py_NewRef(kind));
        Py_SETREF(m->tpl[L->filename], Py_NewRef(m->filename));
        Py_SETREF(m->tpl[L->lineno], Py_NewRef(m->lineno));
        Py_SETREF(m->tpl[L->function], Py_NewRef(m->function));
        Py_SETREF(m->tpl[L->stack], Py_NewRef(m->stack));
        Py_SETREF(m->tpl[L->thread], Py_NewRef(c->thread));
        Py_SETREF(m->tpl[L->detectors], Py_NewRef(m->detectors));
        Py_SETREF(m->tpl[L->phase], Py_NewRef(s_phase[c->phase]));
        m->has_tpl = 1;
        m->tpl_site = c->site; m->tpl_api = api; m->tpl_kind = kind; m->tpl_thread = c->thread;
        m->tpl_phase = c->phase;
    }
    PyObject *own = NULL;
    if (!blocked) blocked = own = c->has_blocked ? PyFloat_FromDouble(c->blocked) : Py_NewRef(Py_None);
    if (!blocked) return -1;
    PyTypeObject *type = (PyTypeObject *)m->type;
    PyObject *ev = type->tp_alloc(type, 0); /* every slot NULL: filled before anyone sees it */
    if (!ev) { Py_XDECREF(own); return -1; }
    for (Py_ssize_t i = 0; i < L->n; i++)
        SLOT(ev, L, i) = Py_NewRef(i == L->blocked ? blocked : m->tpl[i]);
    Py_XDECREF(own);
    PyObject *item = PyTuple_Pack(3, ev, c->allows, Py_None);
    Py_DECREF(ev);
    if (!item) return -1;
    int rc = PyList_Append(m->events, item);
    Py_DECREF(item);
    return rc;
}

/* The blocking copy of an async copy and the stream sync that completed it, as the event of
 * ``c`` named ``api`` (NULL: c's own): both durations (us, 0 when unknown) summed in tenths of a
 * microsecond, as integers, as combine does */
static int add_blocking(Combine *m, const Call *c, int dir, double sync_us, double copy_us,
                        PyObject *api) {
    PyObject *blocked = PyFloat_FromDouble(
        (double)(llround(sync_us * 10) + llround(copy_us * 10)) / 10);
    if (!blocked) return -1;
    int rc = add_event(m, c, m->kinds[dir == DIR_H2D ? K_COPY_H2D : K_COPY_D2H], blocked, api);
    Py_DECREF(blocked);
    return rc;
}

/* A copy and the stream sync riding on it (pair_with): the sync's api named */
static int add_pair(Combine *m, const Call *c, int dir) {
    return add_blocking(m, c, dir, c->has_pair_blocked ? c->pair_blocked : 0,
                        c->has_blocked ? c->blocked : 0,
                        PyTuple_GET_ITEM(PyTuple_GET_ITEM(c->names, 0), c->pair));
}

/* The pairs folded into c (fold_pair), before anything else of c: each as add_pair makes it */
static int add_pairs(Combine *m, const Call *c, int dir) {
    for (Py_ssize_t i = 0; i < c->npairs; i++) {
        const struct FoldedPair *f = &c->pairs[i];
        if (add_blocking(m, c, dir, f->sync_us, f->copy_us,
                         PyTuple_GET_ITEM(PyTuple_GET_ITEM(c->names, 0), f->pair)) < 0)
            return -1;
    }
    return 0;
}

static int host_memory(Combine *m, const Call *c, int dir);

/* The copies folded into c (fold_into), before c itself: each an async copy the next copy
 * followed, so unpaired: a pageable copy event each (its own duration) where the host memory
 * they share is pageable, nothing where pinned, counted unknown where nothing says. */
static int add_folded(Combine *m, const Call *c, int dir) {
    int host = host_memory(m, c, dir);
    if (host < 0) return -1;
    if (host == 0) m->unknown += (long)c->nfolded;
    for (Py_ssize_t i = 0; host == 2 && i < c->nfolded; i++) {
        PyObject *blocked = PyFloat_FromDouble(c->folded[i]);
        int rc = blocked ? add_event(m, c, m->kinds[K_PAGEABLE], blocked, NULL) : -1;
        Py_XDECREF(blocked);
        if (rc < 0) return -1;
    }
    return 0;
}

/* 1 pinned, 2 pageable, 3 something else, 0 nothing says; -1 error */
static int host_memory(Combine *m, const Call *c, int dir) {
    if (m->ptrs) { /* as ByPointer.host_kind names the kind */
        int k = pointer_kind(m->ptrs, dir == DIR_H2D ? (c->has_src ? c->src : 0) : (c->has_dst ? c->dst : 0));
        return k == -2 ? -1 : k < 0 ? 0 : k == 2 ? 1 : k == 1 ? 2 : 3;
    }
    PyObject *name = PyObject_CallFunctionObjArgs(m->host_kind, (PyObject *)c, s_dir[dir], NULL);
    if (!name) return -1;
    int r = name == Py_None ? 0 : same(name, s_pinned) == 1 ? 1 : same(name, s_pageable) == 1 ? 2 : 3;
    Py_DECREF(name);
    return PyErr_Occurred() ? -1 : r;
}

/* combine's unpaired(): an async copy no stream sync completed waited only if pageable */
static int unpaired(Combine *m, const Call *c, int dir) {
    int host = host_memory(m, c, dir);
    if (host < 0) return -1;
    if (host == 2 && add_event(m, c, m->kinds[K_PAGEABLE], NULL, NULL) < 0) return -1;
    if (host == 0) m->unknown++;
    return 0;
}

static int is_kind(const Call *c, PyObject *kind) {
    PyObject *k = call_name(c, F_KIND);
    return k == kind || (PyUnicode_Check(k) && PyUnicode_Compare(k, kind) == 0);
}

static int combine_loop(Combine *m, PyObject *obs) {
    Py_ssize_t n = PyList_GET_SIZE(obs);
    const Call *pending = NULL;
    int pending_dir = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (m->skip && m->skip[i]) continue;
        PyObject *o = PyList_GET_ITEM(obs, i);
        if (!Py_IS_TYPE(o, &CallType)) {
            if (call_type && PyObject_TypeCheck(o, (PyTypeObject *)call_type)) return 1;
            PyObject *src = PyObject_GetAttr(o, s_source);
            if (!src) return -1;
            int cuda = same(src, s_cuda);
            Py_DECREF(src);
            if (cuda) return cuda < 0 ? -1 : 1; /* a cuda observation of a kind not known here */
            continue;
        }
        const Call *c = (const Call *)o;
        if (c->role == ROLE_COPY) {
            if (pending) {
                int host = host_memory(m, pending, pending_dir);
                if (host < 0 || (host != 1 && unpaired(m, pending, pending_dir) < 0)) return -1;
                pending = NULL;
            }
            int dir = c->dir;
            if (!dir && m->ptrs) { /* as ByPointer.direction: which side is the host's */
                uint64_t both[2] = {c->has_src ? c->src : 0, c->has_dst ? c->dst : 0};
                int ks = -1, kd = -1;
                if (both[0] && both[1]) {
                    if (pointers_ask(m->ptrs, both, 2) < 0) return -1;
                    ks = pointer_kind(m->ptrs, both[0]);
                    kd = pointer_kind(m->ptrs, both[1]);
                }
                if (ks < 0 || kd < 0) { m->undirected++; continue; }
                int from_host = ks == 1 || ks == 2, to_host = kd == 1 || kd == 2;
                dir = from_host ? (to_host ? DIR_H2H : DIR_H2D) : (to_host ? DIR_D2H : DIR_D2D);
            } else if (!dir) {
                PyObject *d = PyObject_CallOneArg(m->direction, o);
                if (!d) return -1;
                for (int k = 1; k < 5; k++) if (same(d, s_dir[k]) == 1) { dir = k; break; }
                int none = d == Py_None;
                Py_DECREF(d);
                if (PyErr_Occurred()) return -1;
                if (none) { m->undirected++; continue; }
            }
            if ((dir == DIR_H2D || dir == DIR_D2H) && c->npairs && add_pairs(m, c, dir) < 0)
                return -1;
            if ((dir == DIR_H2D || dir == DIR_D2H) && c->nfolded && add_folded(m, c, dir) < 0)
                return -1;
            if (dir == DIR_H2D || dir == DIR_D2H) {
                if (c->is_async && c->has_pair) { /* the stream sync that completed it rides on it */
                    if (add_pair(m, c, dir) < 0) return -1;
                } else if (c->is_async) { pending = c; pending_dir = dir; }
                else if (add_event(m, c, m->kinds[dir == DIR_H2D ? K_COPY_H2D : K_COPY_D2H], NULL, NULL) < 0)
                    return -1;
            }
            continue; /* d2d, h2h, p2p: the host does not wait for these */
        }
        if (pending) {
            const Call *p = pending;
            pending = NULL;
            int pair = is_kind(c, m->kinds[K_STREAM_SYNC]);
            if (pair) pair = !(p->has_stream && p->stream) || !(c->has_stream && c->stream) ||
                             p->stream == c->stream;
            if (pair && p->site != c->site) {
                if (read_site(m, p->site) < 0) return -1;
                PyObject *f = Py_NewRef(m->filename), *l = Py_NewRef(m->lineno);
                int ok = read_site(m, c->site);
                pair = ok < 0 ? -1 : same(f, m->filename);
                if (pair == 1) pair = same(l, m->lineno);
                Py_DECREF(f); Py_DECREF(l);
                if (pair < 0) return -1;
            }
            if (pair) pair = same(p->thread, c->thread);
            if (pair < 0) return -1;
            if (pair) {
                if (add_blocking(m, c, pending_dir, c->has_blocked ? c->blocked : 0,
                                 p->has_blocked ? p->blocked : 0, NULL) < 0)
                    return -1;
                continue;
            }
            if (unpaired(m, p, pending_dir) < 0) return -1;
        }
        PyObject *kind = call_name(c, F_KIND);
        Py_ssize_t ne = PyList_GET_SIZE(m->events);
        if (ne && is_kind(c, m->kinds[K_FREE])) { /* one empty_cache() frees several segments */
            PyObject *prev = PyList_GET_ITEM(m->events, ne - 1), *ev = PyTuple_GET_ITEM(prev, 0);
            const Layout *L = event_layout(m->type, m->defaults); /* made: an event exists */
            if (!L) return -1;
            PyObject *pk = SLOT(ev, L, L->kind), *pf = SLOT(ev, L, L->filename),
                     *pl = SLOT(ev, L, L->lineno), *pb = SLOT(ev, L, L->blocked);
            int merge = same(pk, m->kinds[K_FREE]) == 1 && read_site(m, c->site) == 0 &&
                        same(pf, m->filename) == 1 && same(pl, m->lineno) == 1 &&
                        same(PyTuple_GET_ITEM(prev, 1), c->allows) == 1;
            if (merge) { /* nobody holds the event but this list: updated in place */
                double total = (pb != Py_None ? PyFloat_AsDouble(pb) : 0) +
                               (c->has_blocked ? c->blocked : 0);
                PyObject *v = PyFloat_FromDouble((double)llround(total * 10) / 10);
                if (!v) return -1;
                Py_SETREF(SLOT(ev, L, L->blocked), v);
                continue;
            }
            if (PyErr_Occurred()) return -1;
        }
        if (add_event(m, c, kind, NULL, NULL) < 0) return -1;
    }
    if (pending && unpaired(m, pending, pending_dir) < 0) return -1;
    return 0;
}

/* combine()'s and by_pointer()'s common part, once their arguments are parsed into m: the loop
 * over a copy of the observations (the memory's answers are Python, which may change the list),
 * with the pinned copies passed over first where p is given (by_pointer's host memory) ->
 * (events, unknown, undirected), or NotImplemented where a call is not this module's */
static PyObject *combine_run(Combine *m, Pointers *p, PyObject *obs, PyObject *kinds, const char *who) {
    if (PyTuple_GET_SIZE(kinds) != 5) {
        PyErr_Format(PyExc_ValueError, "%s: kinds must name 5 kinds", who);
        return NULL;
    }
    for (int k = 0; k < 5; k++) m->kinds[k] = PyTuple_GET_ITEM(kinds, k);
    PyObject *own = PyList_GetSlice(obs, 0, PY_SSIZE_T_MAX);
    char *skip = own && p ? PyMem_Calloc((size_t)PyList_GET_SIZE(own) + 1, 1) : NULL;
    int rc = own ? 0 : -1;
    if (own && p && !skip) { PyErr_NoMemory(); rc = -1; }
    if (rc == 0 && p) rc = pinned_copies(own, p, skip);
    if (rc == 0) {
        m->ptrs = p;
        m->skip = skip;
        m->events = PyList_New(0);
        rc = m->events ? combine_loop(m, own) : -1;
    }
    combine_clear(m);
    tpl_clear(m);
    PyMem_Free(skip);
    Py_XDECREF(own);
    if (rc != 0) {
        Py_XDECREF(m->events);
        return rc < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    }
    return Py_BuildValue("(Nll)", m->events, m->unknown, m->undirected);
}

static PyObject *fn_combine(PyObject *self, PyObject *args) {
    /* combine(observations, host_kind, direction, event_type, defaults, detectors, kinds) ->
     * (events, unknown, undirected), or NotImplemented; kinds: (blocking H2D copy, blocking D2H
     * copy, pageable copy, stream sync, implicit free) as events.py names them */
    Combine m = {0};
    PyObject *obs, *kinds;
    if (!PyArg_ParseTuple(args, "O!OOO!O!O!O!", &PyList_Type, &obs, &m.host_kind, &m.direction,
                          &PyType_Type, &m.type, &PyDict_Type, &m.defaults, &PyTuple_Type,
                          &m.detectors, &PyTuple_Type, &kinds))
        return NULL;
    return combine_run(&m, NULL, obs, kinds, "combine");
}

/* by_pointer(observations, functions, event_type, defaults, detectors, kinds) ->
 * (events, unknown, undirected), or NotImplemented: detectors.cuda.combine_by_pointer in one call,
 * the exit's path with this module: the pinned copies that can make no event passed over
 * (pinned_copies), the rest combined as combine() does, host memory asked by pointer here
 * (Pointers) as hostmem.ByPointer asks it. functions: see Pointers. */
static PyObject *fn_by_pointer(PyObject *self, PyObject *args) {
    Combine m = {0};
    Pointers p = {0};
    PyObject *obs, *kinds;
    if (!PyArg_ParseTuple(args, "O!OO!O!O!O!", &PyList_Type, &obs, &p.functions, &PyType_Type,
                          &m.type, &PyDict_Type, &m.defaults, &PyTuple_Type, &m.detectors,
                          &PyTuple_Type, &kinds))
        return NULL;
    PyObject *out = combine_run(&m, &p, obs, kinds, "by_pointer");
    pointers_free(&p);
    return out;
}

/* as_call(cudacall) -> Call: the Call the C callback makes for the call a CudaCall describes
 * (its api one of the configured table's, with that entry's role and kind), so that tests and
 * tools can hand combine and by_pointer the objects a real region holds. */
static PyObject *fn_as_call(PyObject *self, PyObject *arg) {
    if (!call_type || !PyObject_TypeCheck(arg, (PyTypeObject *)call_type) || !names_table) {
        PyErr_SetString(PyExc_TypeError, "as_call: a CudaCall, after configure()");
        return NULL;
    }
    PyObject *apis = PyTuple_GET_ITEM(names_table, 0), *roles = PyTuple_GET_ITEM(names_table, 1),
             *kinds = PyTuple_GET_ITEM(names_table, 2);
    Py_ssize_t index = -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(apis); i++) {
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(apis, i), PyTuple_GET_ITEM(arg, 0), Py_EQ);
        if (eq < 0) return NULL;
        if (eq && same(PyTuple_GET_ITEM(roles, i), PyTuple_GET_ITEM(arg, 1)) == 1 &&
            same(PyTuple_GET_ITEM(kinds, i), PyTuple_GET_ITEM(arg, 2)) == 1) { index = i; break; }
    }
    if (index < 0) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "as_call: no table entry for %R with that role and kind",
                         PyTuple_GET_ITEM(arg, 0));
        return NULL;
    }
    Entry e = {.used = 1, .index = (int16_t)index, .is_async = 0};
    PyObject *role = PyTuple_GET_ITEM(arg, 1);
    e.role = PyUnicode_CompareWithASCIIString(role, "sync") == 0 ? ROLE_SYNC
           : PyUnicode_CompareWithASCIIString(role, "copy") == 0 ? ROLE_COPY : ROLE_FREE;
    e.is_async = (int8_t)PyObject_IsTrue(PyTuple_GET_ITEM(arg, 4));
    int dir = 0;
    for (int k = 1; k < 5; k++) if (same(PyTuple_GET_ITEM(arg, 3), s_dir[k]) == 1) dir = k;
    PyObject *corr_seq = PySequence_Fast(PyTuple_GET_ITEM(arg, 5), "as_call: correlation ids");
    if (!corr_seq) return NULL;
    uint32_t corr[MAXCORR];
    int ncorr = (int)(PySequence_Fast_GET_SIZE(corr_seq) < MAXCORR ? PySequence_Fast_GET_SIZE(corr_seq) : MAXCORR);
    for (int k = 0; k < ncorr; k++) corr[k] = (uint32_t)PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(corr_seq, k));
    Py_DECREF(corr_seq);
    PyObject *stream = PyTuple_GET_ITEM(arg, 6), *phase = PyTuple_GET_ITEM(arg, 8),
             *blocked = PyTuple_GET_ITEM(arg, 11), *nbytes = PyTuple_GET_ITEM(arg, 12),
             *src = PyTuple_GET_ITEM(arg, 13), *dst = PyTuple_GET_ITEM(arg, 14);
    int ph = 0;
    for (int k = 0; k < 3; k++) if (same(phase, s_phase[k]) == 1) ph = k;
    #define U64(o) ((o) == Py_None ? 0ULL : PyLong_AsUnsignedLongLong(o))
    uint64_t st = U64(stream), nb = U64(nbytes), sp = U64(src), dp = U64(dst);
    #undef U64
    double b = blocked == Py_None ? 0.0 : PyFloat_AsDouble(blocked);
    if (PyErr_Occurred()) return NULL;
    Call *c = (Call *)new_call(&e, dir, corr, ncorr, stream != Py_None, st, PyTuple_GET_ITEM(arg, 7),
                               ph, PyTuple_GET_ITEM(arg, 9), PyTuple_GET_ITEM(arg, 10),
                               blocked != Py_None, b, nbytes != Py_None || src != Py_None || dst != Py_None,
                               nb, sp, dp, 0);
    if (c) { c->has_src = src != Py_None; c->has_dst = dst != Py_None; c->has_nbytes = nbytes != Py_None; }
    return (PyObject *)c;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))fn_configure, METH_VARARGS | METH_KEYWORDS,
     "Set the callback table and the Python objects the callback reads."},
    {"switch", fn_switch, METH_VARARGS, "switch(cuptiEnableCallback address, handle, on) -> first error"},
    {"on", fn_on, METH_VARARGS,
     "on(cuptiSubscribe, cuptiEnableCallback, handle or 0) -> (subscribe error, handle, enable error)"},
    {"off", fn_off, METH_VARARGS,
     "off(cuptiEnableCallback, cuptiUnsubscribe or 0, handle) -> first error"},
    {"forget", fn_forget, METH_NOARGS,
     "Drop the regions remembered for handing calls over (off() does it too)."},
    {"callback_address", fn_address, METH_NOARGS, "The C callback to give cuptiSubscribe."},
    {"new_generation", fn_new_generation, METH_NOARGS, "Make every thread's call state stale."},
    {"scopes_changed", fn_scopes_changed, METH_NOARGS,
     "A region or allow was entered or left: no thread's next call is kept as a repeat of its last."},
    {"repeats", fn_repeats, METH_NOARGS, "Whether this build keeps repeats without the GIL."},
    {"folding", fn_folding, METH_O,
     "folding(on): fold a run of like async copies into one Call (host memory told by pointer)"},
    {"timing", fn_timing, METH_VARARGS,
     "timing(on) -> {piece: (ns, count)} since the last call (then zeroed); on: time from now"},
    {"errors", fn_errors, METH_NOARGS, "Exceptions swallowed inside the callback so far."},
    {"fire", fn_fire, METH_VARARGS, "fire(domain, cbid, callback data address): as CUPTI would."},
    {"by_pointer", fn_by_pointer, METH_VARARGS,
     "by_pointer(observations, functions, event_type, defaults, detectors, kinds) -> (events, "
     "unknown, undirected), host memory asked by pointer; NotImplemented where a call is not this "
     "module's"},
    {"combine", fn_combine, METH_VARARGS,
     "combine(observations, host_kind, direction, event_type, defaults, detectors, kinds) -> "
     "(events, unknown, undirected), or NotImplemented where a call is not this module's"},
    {"as_call", fn_as_call, METH_O, "as_call(cudacall) -> the Call the C callback makes for it"},
    {"pointer_types", fn_pointer_types, METH_VARARGS,
     "pointer_types(cudaPointerGetAttributes, cudaGetLastError, addresses) -> types (-1: failed)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cuptifast",
                                    "The cuda detector's CUPTI callback in C.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__cuptifast(void) {
    if (PyType_Ready(&CallType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Call", (PyObject *)&CallType) < 0) { Py_DECREF(m); return NULL; }
    const char *dirs[5] = {NULL, "h2d", "d2h", "d2d", "h2h"};
    const char *phases[3] = {"run", "compile", "graph_capture"};
    s_dir[0] = Py_NewRef(Py_None);
    for (int i = 1; i < 5; i++) s_dir[i] = PyUnicode_InternFromString(dirs[i]);
    for (int i = 0; i < 3; i++) s_phase[i] = PyUnicode_InternFromString(phases[i]);
    s_observations = PyUnicode_InternFromString("observations");
    s_cuda = PyUnicode_InternFromString("cuda");
    s_nothread = PyUnicode_InternFromString("");
    s_dict = PyUnicode_InternFromString("__dict__");
    s_compile_context = PyUnicode_InternFromString("compile_context");
    s_filename = PyUnicode_InternFromString("filename");
    s_lineno = PyUnicode_InternFromString("lineno");
    s_function = PyUnicode_InternFromString("function");
    s_stack = PyUnicode_InternFromString("stack");
    s_source = PyUnicode_InternFromString("source");
    s_pinned = PyUnicode_InternFromString("pinned");
    s_pageable = PyUnicode_InternFromString("pageable");
    compile_tls = Py_NewRef(Py_None);
    s_empty = PyTuple_New(0);
    return m;
}
