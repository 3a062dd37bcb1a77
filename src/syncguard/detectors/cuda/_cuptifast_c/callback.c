/* The CUPTI callback and the recording: every callback of a configured id comes here, on the
 * thread that made the CUDA call. Only the outermost call of a thread is kept (a runtime call
 * and the driver calls under it are one observation); only threads whose context has a region
 * (the ``regions`` ContextVar) keep anything; a thread with no region while a backward pass of a
 * region runs is handed to the Python callback whole (its owner logic lives there). A nested
 * driver callback costs a table lookup and a thread-local counter, without the GIL, and so does
 * any callback on a thread with no region open (routing.c: the routing table); a kept call
 * takes the GIL once, at ENTER, where it is built and handed to its region(s) (or folded or
 * paired into the thread's last call: pairing.c); its EXIT only stamps the call's duration into
 * it, without the GIL. Nothing here calls CUDA. */
#include "cuptifast.h"

const char *piece_names[NPIECES] = {
    "callback (every invocation, whole)", "nested driver callback (no GIL)",
    "ENTER: take the GIL",
    "ENTER: keep the call (regions, phase, thread, site, allows; build it, hand it over)",
    "ENTER: the regions (context variable; inside the above)",
    "ENTER: is torch compiling (inside the above)", "ENTER: the user's site (inside the above)",
    "ENTER: build the call (inside the above)",
    "ENTER: hand it to the region(s) (inside the above)", "ENTER: release the GIL",
    "EXIT: stamp the call's duration (no GIL)",
    "ENTER: a repeat, folded or paired without the GIL (repeat())"};
int timing_on;
int64_t piece_ns[NPIECES];
long piece_n[NPIECES];

__thread ThreadState T;
PyObject *last_regions, *last_lists;
long errors;

static void clear_kept(ThreadState *t) { /* with the GIL */
    Py_CLEAR(t->call);
    t->mode = MODE_IDLE;
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

void forget(void) {
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
         * here when the owner is plain (a backward pass makes many, and handing each to Python
         * is costly); everything else goes to the Python callback */
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
    int rule = pair_or_fold(prev, e, &k, regions, site, allows, phase, thread);
    if (rule) {
        Py_DECREF(site); Py_DECREF(allows); Py_DECREF(thread); Py_DECREF(regions);
        if (rule < 0) goto error;
        int mode = apply_rule(prev, rule, e, &k, d->correlationId);
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
    const Entry *e = &entries[domain][cbid];
    if (!e->used) return;
    ThreadState *t = &T;
    /* a thread with no region (and no call of its own in flight here): nothing to do, no GIL */
    if ((t->depth == 0 || t->gen != generation) && !routed()) return;
    if (FINALIZING()) return; /* no thread state may be taken while the interpreter shuts down */
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

void callback(void *userdata, int domain, uint32_t cbid, const CallbackData *d) {
    if (!gate_enter()) return; /* CUPTI is being lent out (routing.c) */
    int64_t t0 = T0();
    callback_body(userdata, domain, cbid, d);
    TADD(P_CALLBACK, t0);
    gate_leave();
}
