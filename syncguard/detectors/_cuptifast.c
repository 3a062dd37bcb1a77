/* The cuda detector's CUPTI callback in C: what syncguard/detectors/cudacalls.py does in Python,
 * without a ctypes thunk per callback and without Python bytecode on the hot path.
 *
 * Why it exists: on the H200 host one copy cost ~20 us of Python work (four callbacks: the
 * runtime call and the driver call under it, ENTER and EXIT), against ~100 us for the whole
 * sync-free merge it sits in (reports/gpu/2.11.0/overhead-*.md). Here a nested driver callback
 * costs a table lookup and a thread-local counter, without the GIL; a kept call takes the GIL
 * once at ENTER and once at EXIT.
 *
 * Same rules as the Python callback (which stays, as the fallback where this module did not
 * build): only the outermost call of a thread is kept (a runtime call and the driver calls under
 * it are one observation); only threads whose context has a region (the ``regions`` ContextVar)
 * keep anything; a thread with no region while a backward pass of a region runs is handed to the
 * Python callback whole (its owner logic lives there); the user's frame is found with the same
 * per-code-object classification (attribution._code_cache / _code_class) and the Site is built
 * by attribution's own function on a cache miss. Nothing here calls CUDA.
 *
 * Built by setup.py as an optional extension; CPython >= 3.11 (PyFrame_GetLasti).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
#include <string.h>
#include <time.h>

#if PY_VERSION_HEX < 0x030B0000
#error "_cuptifast needs CPython 3.11 or newer"
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
enum { MODE_IDLE = 0, MODE_KEPT = 1, MODE_PYTHON = 2 };
#define MAXCB 4096
#define MAXCORR 8

typedef struct { int8_t used, role, dir, is_async, spec; int16_t index; } Entry;
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
enum { P_CALLBACK, P_NESTED, P_ENTER_GIL, P_ENTER, P_SITE, P_ENTER_RELEASE, P_LEAVE_GIL, P_LEAVE,
       P_DELIVER, P_LEAVE_RELEASE, NPIECES };
static const char *piece_names[NPIECES] = {
    "callback (every invocation, whole)", "nested driver callback (no GIL)",
    "ENTER: take the GIL", "ENTER: keep the call (regions, phase, thread, site, allows)",
    "ENTER: the user's site (inside the above)", "ENTER: release the GIL", "EXIT: take the GIL",
    "EXIT: build the call and hand it over", "EXIT: hand it to the region(s) (inside the above)",
    "EXIT: release the GIL"};
static int timing_on;
static int64_t piece_ns[NPIECES];
static long piece_n[NPIECES];
static int64_t now_ns(void);
#define T0() (timing_on ? now_ns() : 0)
#define TADD(i, t0) do { if (timing_on) { piece_ns[i] += now_ns() - (t0); piece_n[i]++; } } while (0)

typedef struct {
    long gen;
    const Entry *entry; /* the kept call's table entry */
    int depth, mode, dir, ncorr, phase, has_stream, has_ptrs;
    uint32_t corr[MAXCORR];
    uint64_t stream, src, dst, nbytes;
    int64_t t0;
    PyObject *regions, *allows, *site, *thread; /* owned while MODE_KEPT */
    PyObject *name; /* the thread's name, read once per subscription (a rename inside one
                       region is seen from the next region on) */
    long name_gen;
} ThreadState;
static __thread ThreadState T;

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

static void clear_kept(ThreadState *t) {
    Py_CLEAR(t->regions); Py_CLEAR(t->allows); Py_CLEAR(t->site); Py_CLEAR(t->thread);
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
        PyObject *d = NULL; /* the calling thread's dict of the threading.local */
        found = LOOKUP_ATTR(compile_tls, s_dict, &d);
        if (found > 0) {
            v = PyDict_Check(d) ? PyDict_GetItemWithError(d, s_compile_context) : NULL;
            Py_XINCREF(v);
            Py_DECREF(d);
        }
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
 * CudaCall (a tuple of 16 Python objects) made nine objects per copy at EXIT: ~0.8 us of the
 * ~3.2 us a sync-free merge spent in the callback on the H200's host
 * (reports/probes/callback-pieces-384ab15/). A copy that drop_pinned leaves out is now read
 * without making any. The Python callback still makes CudaCalls; combine and hostmem read both
 * by attribute. */
typedef struct {
    PyObject_HEAD
    PyObject *names;                 /* (apis, roles, kinds) of the table it was made under */
    PyObject *site, *allows, *thread;
    uint64_t stream, src, dst, nbytes;
    int64_t t0;
    double blocked;                  /* us; has_blocked == 0: None */
    uint32_t corr[MAXCORR];
    int16_t index;
    int8_t role, dir, is_async, phase, ncorr, has_stream, has_nbytes, has_src, has_dst, has_blocked;
} Call;

/* (apis, roles, kinds): tuples by entry index of each call's api name, role and sync kind (or
 * None); rebuilt by configure() */
static PyObject *names_table;

enum { F_API, F_ROLE, F_KIND, F_DIRECTION, F_IS_ASYNC, F_CORRELATION, F_STREAM, F_SITE, F_PHASE,
       F_THREAD, F_ALLOWS, F_BLOCKED, F_NBYTES, F_SRC, F_DST, F_T_NS, F_SOURCE, F_HOST_PTR };

static PyObject *call_get(PyObject *self, void *closure) {
    Call *c = (Call *)self;
    switch ((int)(intptr_t)closure) {
    case F_API: case F_ROLE: case F_KIND: /* names: (apis, roles, kinds), in that order */
        return Py_NewRef(PyTuple_GET_ITEM(PyTuple_GET_ITEM(c->names, (intptr_t)closure - F_API),
                                          c->index));
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
    }
    Py_RETURN_NONE;
}

#define GET(name, f) {name, call_get, NULL, NULL, (void *)(intptr_t)(f)}
static PyGetSetDef call_getset[] = {
    GET("api", F_API), GET("role", F_ROLE), GET("kind", F_KIND), GET("direction", F_DIRECTION),
    GET("is_async", F_IS_ASYNC), GET("correlation", F_CORRELATION), GET("stream", F_STREAM),
    GET("site", F_SITE), GET("phase", F_PHASE), GET("thread", F_THREAD), GET("allows", F_ALLOWS),
    GET("blocked_us", F_BLOCKED), GET("nbytes", F_NBYTES), GET("src", F_SRC), GET("dst", F_DST),
    GET("t_ns", F_T_NS), GET("source", F_SOURCE), GET("host_ptr", F_HOST_PTR), {NULL}};
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

static void enter(ThreadState *t, const Entry *e, int domain, uint32_t cbid, const CallbackData *d) {
    /* the call's own parameters first: plain reads, no Python */
    int dir = e->dir;
    uint64_t stream = 0, src = 0, dst = 0, nbytes = 0;
    int has_stream = 0, has_ptrs = 0;
    const void *p = d->functionParams;
    if (e->role == ROLE_FREE) {
        if (p && *(void *const *)p == NULL) return; /* cudaFree(NULL) frees nothing */
    } else if (p && e->spec == SPEC_STREAM) {
        stream = (uint64_t)(uintptr_t)(*(void *const *)p); has_stream = 1;
    } else if (p && e->spec == SPEC_MEMCPY) {
        const MemcpyParams *m = p;
        if (!dir) dir = memcpy_dir(m->kind);
        stream = (uint64_t)(uintptr_t)m->stream; src = (uint64_t)(uintptr_t)m->src;
        dst = (uint64_t)(uintptr_t)m->dst; nbytes = m->count; has_stream = has_ptrs = 1;
    } else if (p && e->spec == SPEC_MEMCPY2D) {
        const Memcpy2DParams *m = p;
        if (!dir) dir = memcpy_dir(m->kind);
        stream = (uint64_t)(uintptr_t)m->stream; src = (uint64_t)(uintptr_t)m->src;
        dst = (uint64_t)(uintptr_t)m->dst; nbytes = (uint64_t)m->width * m->height;
        has_stream = has_ptrs = 1;
    } else if (p && (e->spec == SPEC_DRV_COPY || e->spec == SPEC_DRV_COPY_ASYNC)) {
        const DriverCopyParams *m = p; /* the sync variants have no stream field: not read */
        src = m->src; dst = m->dst; nbytes = m->count; has_ptrs = 1;
        if (e->spec == SPEC_DRV_COPY_ASYNC) { stream = (uint64_t)(uintptr_t)m->stream; has_stream = 1; }
    }
    /* a device-to-device or host-to-host copy never makes the host wait; it is kept in order only
     * to end a pending copy's pairing (combine), so it needs no site, thread or duration */
    int no_wait = e->role == ROLE_COPY && (dir == DIR_D2D || dir == DIR_H2H);
    PyObject *regions = NULL;
    if (PyContextVar_Get(regions_var, s_empty, &regions) < 0) goto error;
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
        PyObject *call = new_call(e, dir, &corr, 1, has_stream, stream, no_site, 0, s_nothread,
                                  s_empty, 0, 0.0, has_ptrs, nbytes, src, dst, 0);
        int rc = call ? deliver(regions, call) : -1;
        Py_XDECREF(call); Py_DECREF(regions);
        if (rc < 0) goto error;
        return;
    }
    int phase = is_compiling();
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
    t->regions = regions; t->site = site; t->allows = allows; t->thread = thread;
    t->entry = e; t->dir = dir; t->phase = phase;
    t->has_stream = has_stream; t->has_ptrs = has_ptrs;
    t->stream = stream; t->src = src; t->dst = dst; t->nbytes = nbytes;
    t->corr[0] = d->correlationId; t->ncorr = 1;
    t->mode = MODE_KEPT;
    t->t0 = now_ns();
    return;
error:
    errors++;
    PyErr_Clear();
}

static void leave(ThreadState *t) {
    int64_t t1 = now_ns();
    /* microseconds to one decimal, as the Python callback's round((t1 - t0) / 1000, 1) */
    double blocked = (double)llround((double)(t1 - t->t0) / 100.0) / 10.0;
    PyObject *call = new_call(t->entry, t->dir, t->corr, t->ncorr, t->has_stream, t->stream,
                              t->site, t->phase, t->thread, t->allows, 1, blocked, t->has_ptrs,
                              t->nbytes, t->src, t->dst, t->t0);
    int64_t td = T0();
    int rc = call ? deliver(t->regions, call) : -1;
    TADD(P_DELIVER, td);
    Py_XDECREF(call);
    clear_kept(t);
    if (rc < 0) { errors++; PyErr_Clear(); }
}

#if PY_VERSION_HEX >= 0x030D0000
#define FINALIZING() Py_IsFinalizing()
#else
#define FINALIZING() _Py_IsFinalizing()
#endif

static void callback_body(void *userdata, int domain, uint32_t cbid, const CallbackData *d) {
    if (domain < 1 || domain > 2 || cbid >= MAXCB || !d) return;
    if (FINALIZING()) return; /* no thread state may be taken while the interpreter shuts down */
    const Entry *e = &entries[domain][cbid];
    if (!e->used) return;
    ThreadState *t = &T;
    if (t->gen != generation) { /* state from before a park or a new subscription: stale */
        if (t->mode == MODE_KEPT) {
            PyGILState_STATE g = PyGILState_Ensure();
            clear_kept(t);
            PyGILState_Release(g);
        }
        t->gen = generation; t->depth = 0; t->mode = MODE_IDLE;
    }
    int64_t t0 = T0();
    if (d->callbackSite == 0) { /* CUPTI_API_ENTER */
        int depth = t->depth++;
        if (depth) { /* a driver call under the runtime call: the same wait, the same event */
            if (t->mode == MODE_KEPT && t->ncorr < MAXCORR) t->corr[t->ncorr++] = d->correlationId;
            else if (t->mode == MODE_PYTHON) {
                PyGILState_STATE g = PyGILState_Ensure();
                forward(userdata, domain, cbid, d);
                PyGILState_Release(g);
            }
            TADD(P_NESTED, t0);
            return;
        }
        t->mode = MODE_IDLE;
        PyGILState_STATE g = PyGILState_Ensure();
        TADD(P_ENTER_GIL, t0);
        int64_t t1 = T0();
        enter(t, e, domain, cbid, d);
        TADD(P_ENTER, t1);
        int64_t t2 = T0();
        PyGILState_Release(g);
        TADD(P_ENTER_RELEASE, t2);
    } else {
        int depth = t->depth > 0 ? t->depth - 1 : 0;
        t->depth = depth;
        if (t->mode == MODE_PYTHON) {
            PyGILState_STATE g = PyGILState_Ensure();
            forward(userdata, domain, cbid, d);
            PyGILState_Release(g);
            if (!depth) t->mode = MODE_IDLE;
            return;
        }
        if (depth || t->mode != MODE_KEPT) {
            if (depth) TADD(P_NESTED, t0);
            return;
        }
        t->mode = MODE_IDLE;
        PyGILState_STATE g = PyGILState_Ensure();
        TADD(P_LEAVE_GIL, t0);
        int64_t t1 = T0();
        leave(t);
        TADD(P_LEAVE, t1);
        int64_t t2 = T0();
        PyGILState_Release(g);
        TADD(P_LEAVE_RELEASE, t2);
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
    PointerAttributesFn get = (PointerAttributesFn)(uintptr_t)attr_fn;
    GetLastErrorFn clear = (GetLastErrorFn)(uintptr_t)last_error_fn;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        /* cudaPointerAttributes: type, device, devicePointer, hostPointer; room for more */
        struct { int type; int device; void *dev; void *host; long reserved[16]; } a;
        memset(&a, 0, sizeof a);
        if (get(&a, (const void *)(uintptr_t)ptrs[i]) != 0) { clear(); types[i] = -1; }
        else types[i] = a.type;
    }
    Py_END_ALLOW_THREADS
    PyObject *out = PyTuple_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *v = PyLong_FromLong(types[i]);
        if (!v) { Py_CLEAR(out); break; }
        PyTuple_SET_ITEM(out, i, v);
    }
    PyMem_Free(ptrs); PyMem_Free(types);
    return out;
}

/* drop_pinned(observations, host_kind) -> list: the region's observations without the async
 * host<->device copies that cannot become an event in detectors.cuda.combine, so that its Python
 * loop, which runs once per observation with caches cold at region exit, skips them (100 merges:
 * 100 pinned copies, ~1 us each on the H200's host). Such a copy is one whose next cuda
 * observation is a copy too (combine pairs an async copy only with the call right after it, and a
 * copy ends the pairing) and whose host memory host_kind(call, direction) names "pinned" (an
 * unpaired pinned copy made the host wait for nothing). Anything else is kept, as is every
 * observation that neither callback made, which also ends a candidate's run (kept: combine decides).
 * host_kind is ByPointer's (an answer per pointer): it is asked once per pointer here. Returns
 * the same list when nothing is dropped. */
#define PIN_CACHE 16
static PyObject *fn_drop_pinned(PyObject *self, PyObject *args) {
    PyObject *given, *host_kind;
    if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &given, &host_kind)) return NULL;
    if (PyList_GET_SIZE(given) < 2) return Py_NewRef(given);
    /* a copy: host_kind is Python, and nothing it does to the given list may move what we read */
    PyObject *obs = PyList_GetSlice(given, 0, PY_SSIZE_T_MAX);
    if (!obs) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(obs), cand = -1, dropped = 0;
    char *drop = PyMem_Calloc((size_t)n, 1);
    if (!drop) { Py_DECREF(obs); return PyErr_NoMemory(); }
    struct { unsigned long long ptr; int pinned; } seen[PIN_CACHE];
    int nseen = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(obs, i);
        int is_copy, async_host = 0; /* a copy; an async host<->device one with its host pointer */
        if (Py_IS_TYPE(o, &CallType)) { /* the C callback's: read as C values */
            const Call *k = (const Call *)o;
            is_copy = k->role == ROLE_COPY;
            async_host = is_copy && k->is_async && ((k->dir == DIR_H2D && k->has_src) ||
                                                    (k->dir == DIR_D2H && k->has_dst));
        } else if (call_type && PyObject_TypeCheck(o, (PyTypeObject *)call_type)) { /* the Python callback's */
            PyObject *role = PyTuple_GET_ITEM(o, 1), *dir = PyTuple_GET_ITEM(o, 3);
            is_copy = PyUnicode_Check(role) && PyUnicode_CompareWithASCIIString(role, "copy") == 0;
            if (is_copy && PyTuple_GET_ITEM(o, 4) == Py_True && PyUnicode_Check(dir)) {
                int h2d = PyUnicode_CompareWithASCIIString(dir, "h2d") == 0;
                int d2h = !h2d && PyUnicode_CompareWithASCIIString(dir, "d2h") == 0;
                async_host = (h2d || d2h) && PyLong_Check(PyTuple_GET_ITEM(o, h2d ? 13 : 14));
            }
        } else { /* another detector's: ends a candidate's run, kept */
            cand = -1;
            continue;
        }
        if (is_copy && cand >= 0) { /* the candidate is not paired: pinned? */
            PyObject *c = PyList_GET_ITEM(obs, cand);
            unsigned long long key;
            PyObject *dir;
            if (Py_IS_TYPE(c, &CallType)) {
                const Call *k = (const Call *)c;
                key = k->dir == DIR_H2D ? k->src : k->dst;
                dir = s_dir[k->dir];
            } else {
                dir = PyTuple_GET_ITEM(c, 3);
                int h2d = PyUnicode_CompareWithASCIIString(dir, "h2d") == 0;
                key = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(c, h2d ? 13 : 14));
                if (PyErr_Occurred()) goto fail;
            }
            int pinned = -1;
            for (int k = 0; k < nseen; k++)
                if (seen[k].ptr == key) { pinned = seen[k].pinned; break; }
            if (pinned < 0) {
                PyObject *name = PyObject_CallFunctionObjArgs(host_kind, c, dir, NULL);
                if (!name) goto fail;
                pinned = PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "pinned") == 0;
                Py_DECREF(name);
                if (nseen < PIN_CACHE) { seen[nseen].ptr = key; seen[nseen].pinned = pinned; nseen++; }
            }
            if (pinned) { drop[cand] = 1; dropped++; }
        }
        cand = async_host ? i : -1;
    }
    PyObject *out;
    if (!dropped) {
        out = Py_NewRef(given);
    } else {
        out = PyList_New(n - dropped);
        for (Py_ssize_t i = 0, j = 0; out && i < n; i++)
            if (!drop[i]) PyList_SET_ITEM(out, j++, Py_NewRef(PyList_GET_ITEM(obs, i)));
    }
    PyMem_Free(drop);
    Py_DECREF(obs);
    return out;
fail:
    PyMem_Free(drop);
    Py_DECREF(obs);
    return NULL;
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
    {"timing", fn_timing, METH_VARARGS,
     "timing(on) -> {piece: (ns, count)} since the last call (then zeroed); on: time from now"},
    {"errors", fn_errors, METH_NOARGS, "Exceptions swallowed inside the callback so far."},
    {"fire", fn_fire, METH_VARARGS, "fire(domain, cbid, callback data address): as CUPTI would."},
    {"drop_pinned", fn_drop_pinned, METH_VARARGS,
     "drop_pinned(observations, host_kind) -> observations less the pinned copies no sync pairs"},
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
    compile_tls = Py_NewRef(Py_None);
    s_empty = PyTuple_New(0);
    return m;
}
