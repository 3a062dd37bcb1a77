/* A region of the cuda detector alone, entered and left in one call each.
 *
 * What regions/region.py's fused path asks for a region whose detectors resolved to ``cuda``
 * alone (``registry.CUDA_ALONE``), through detector.py's ``Cuda.arm_alone``/``disarm_alone``: the
 * hub's acquire() and release() (hub.py) and the region's scope bookkeeping (the regions context
 * variable, scopes_changed()) in the hub's steady state: subscribed with this module's callback,
 * CUPTI not lent, host memory told by pointer (no activity records), no sync-debug stand-in.
 * Anywhere else each returns False with nothing changed, and the region takes the usual Python
 * path, which handles every state.
 *
 * Same bookkeeping as the Python path, under the hub's lock: the region listed in ``hub.regions``
 * (the first one installs the backward engine proxy, the last one restores it and forgets the
 * regions the callback remembers), its thread counted in ``routing.threads`` and in this module's
 * routing table (routing.c), the thread kept in ``region.state["cuda_thread"]`` (a hand-over
 * unroutes it from there). leave_alone() also declines where the region has something to say
 * that the Python path writes (calls on autograd threads not attributed, callback errors), or
 * where the region is not the innermost of its context. Everything that can fail is done before
 * anything changes, so a False or an exception leaves the hub and the region as they were. */
#include "cuptifast.h"

static PyObject *s_lock, *s_acquire, *s_release, *s_subscribed, *s_with, *s_fast, *s_handed,
                *s_debug, *s_activity, *s_on, *s_regions, *s_backward, *s_install, *s_restore,
                *s_state, *s_cuda_thread, *s_ambiguous, *s_errors, *s_records, *s_clear, *s_saved,
                *s_proxy, *s_variable, *s_engine, *s_execution_engine, *s_hostmem, *s_pointer;

static int strings(void) {
    if (s_lock) return 0;
#define INTERN(v, text) if (!(v = PyUnicode_InternFromString(text))) return -1
    INTERN(s_acquire, "acquire"); INTERN(s_release, "release"); INTERN(s_subscribed, "subscribed");
    INTERN(s_with, "_with"); INTERN(s_fast, "fast"); INTERN(s_handed, "handed");
    INTERN(s_debug, "_debug"); INTERN(s_activity, "activity"); INTERN(s_on, "on");
    INTERN(s_regions, "regions"); INTERN(s_backward, "backward"); INTERN(s_install, "install");
    INTERN(s_restore, "restore"); INTERN(s_state, "state"); INTERN(s_cuda_thread, "cuda_thread");
    INTERN(s_ambiguous, "ambiguous"); INTERN(s_errors, "errors"); INTERN(s_records, "records");
    INTERN(s_clear, "clear"); INTERN(s_saved, "_saved"); INTERN(s_proxy, "_proxy");
    INTERN(s_variable, "_variable"); INTERN(s_engine, "_engine");
    INTERN(s_execution_engine, "_execution_engine"); INTERN(s_hostmem, "hostmem");
    INTERN(s_pointer, "pointer");
    INTERN(s_lock, "lock"); /* last: the others are made once this one is */
#undef INTERN
    return 0;
}

/* obj.name, read from obj's instance dict (the hub's and its parts' fields are plain instance
 * attributes, and a dict lookup is a fraction of a getattr), else through getattr: a new
 * reference, or NULL with an exception */
static PyObject *field(PyObject *obj, PyObject *name) {
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    if (!d) { PyErr_Clear(); return PyObject_GetAttr(obj, name); }
    PyObject *v = PyDict_Check(d) ? PyDict_GetItemWithError(d, name) : NULL; /* borrowed */
    Py_DECREF(d);
    if (v) return Py_NewRef(v);
    if (PyErr_Occurred()) return NULL;
    return PyObject_GetAttr(obj, name);
}

/* the truth of obj.name: 1, 0, or -1 (an exception set) */
static int truth(PyObject *obj, PyObject *name) {
    PyObject *v = field(obj, name);
    if (!v) return -1;
    int t = v == Py_True ? 1 : v == Py_False || v == Py_None ? 0 : PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* d[name] for an instance dict ``d``: borrowed, or NULL (missing, or an exception set) */
static inline PyObject *get(PyObject *d, PyObject *name) { return PyDict_GetItemWithError(d, name); }

/* 1 in the steady state (see the top), 0 elsewhere, -1 on an exception; ``hub`` is the hub's
 * instance dict */
static int steady(PyObject *hub, PyObject *module) {
    PyObject *sub = get(hub, s_subscribed), *fast = get(hub, s_fast), *with = get(hub, s_with),
             *handed = get(hub, s_handed), *debug = get(hub, s_debug),
             *activity = get(hub, s_activity), *hostmem = get(hub, s_hostmem);
    if (PyErr_Occurred()) return -1;
    if (sub != Py_True || fast != module || with != module || handed != Py_False ||
        debug != Py_False || !activity || !hostmem)
        return 0;
    /* host memory told by pointer: with activity records (SYNCGUARD_CUDA_HOSTMEM=activity) each
     * region's first entry switches them on, which only the seam's path does */
    int by_pointer = PyUnicode_Check(hostmem) ? PyUnicode_Compare(hostmem, s_pointer) : -1;
    if (by_pointer == -1 && PyErr_Occurred()) return -1;
    if (by_pointer != 0) return 0;
    int on = truth(activity, s_on);
    return on < 0 ? -1 : !on;
}

/* calls.py's BackwardOwners.install() for the usual case, where its proxy stands for torch's
 * engine already and only needs putting in place: Variable._execution_engine = proxy, with what
 * it replaced kept in ``_saved``. Anything else (the first time, a new engine, the proxy in place
 * already) is the method's own: it is called. 0, or -1 with an exception. */
static int install(PyObject *backward) {
    PyObject *variable = NULL, *proxy = NULL, *engine = NULL, *proxied = NULL, *saved = NULL;
    int rc = -1, fast = 0;
    if (!(saved = field(backward, s_saved)) || !(variable = field(backward, s_variable)) ||
        !(proxy = field(backward, s_proxy)))
        goto done;
    if (saved == Py_None && PyType_Check(variable) && proxy != Py_None) {
        engine = PyDict_GetItemWithError(((PyTypeObject *)variable)->tp_dict, s_execution_engine);
        if (!engine && PyErr_Occurred()) goto done;
        Py_XINCREF(engine);
        if (engine && Py_TYPE(engine) != Py_TYPE(proxy)) {
            if (!(proxied = field(proxy, s_engine))) goto done;
            fast = proxied == engine;
        }
    }
    if (fast) {
        PyObject *kept = PyTuple_Pack(2, variable, engine);
        if (!kept) goto done;
        rc = PyObject_SetAttr(backward, s_saved, kept);
        Py_DECREF(kept);
        if (rc == 0 && (rc = PyObject_SetAttr(variable, s_execution_engine, proxy)) < 0)
            PyObject_SetAttr(backward, s_saved, Py_None);
    } else {
        PyObject *r = PyObject_CallMethodNoArgs(backward, s_install);
        rc = r ? 0 : -1;
        Py_XDECREF(r);
    }
done:
    Py_XDECREF(variable); Py_XDECREF(proxy); Py_XDECREF(engine); Py_XDECREF(proxied);
    Py_XDECREF(saved);
    return rc;
}

/* BackwardOwners.restore(): what install() replaced put back. 0, or -1 with an exception. */
static int restore(PyObject *backward) {
    PyObject *saved = field(backward, s_saved);
    if (!saved) return -1;
    int rc = 0;
    if (PyTuple_Check(saved) && PyTuple_GET_SIZE(saved) == 2) {
        rc = PyObject_SetAttr(PyTuple_GET_ITEM(saved, 0), s_execution_engine, PyTuple_GET_ITEM(saved, 1));
        if (rc == 0) rc = PyObject_SetAttr(backward, s_saved, Py_None);
    } else if (saved != Py_None) {
        PyObject *r = PyObject_CallMethodNoArgs(backward, s_restore);
        rc = r ? 0 : -1;
        Py_XDECREF(r);
    }
    Py_DECREF(saved);
    return rc;
}

/* threads[thread] += delta, the entry dropped at 0 (routing.route's rule); -1 on an exception */
static int count_thread(PyObject *threads, PyObject *key, long delta) {
    PyObject *old = PyDict_GetItemWithError(threads, key); /* borrowed */
    if (!old && PyErr_Occurred()) return -1;
    long n = old ? PyLong_AsLong(old) : 0;
    if (n == -1 && PyErr_Occurred()) return -1;
    n += delta;
    if (n > 0) {
        PyObject *v = PyLong_FromLong(n);
        if (!v) return -1;
        int rc = PyDict_SetItem(threads, key, v);
        Py_DECREF(v);
        return rc;
    }
    if (old && PyDict_DelItem(threads, key) < 0) return -1;
    return 0;
}

/* the hub's lock (borrowed from its dict ``hub``) taken: a new reference to it, or NULL with an
 * exception */
static PyObject *locked(PyObject *hub) {
    PyObject *lock = get(hub, s_lock);
    if (!lock) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "the hub has no lock");
        return NULL;
    }
    Py_INCREF(lock);
    if (Py_IS_TYPE(lock, &HubLockType)) { /* the usual case: lock.c's, taken without a call */
        hublock_acquire(lock);
        return lock;
    }
    PyObject *r = PyObject_CallMethodNoArgs(lock, s_acquire);
    if (!r) { Py_DECREF(lock); return NULL; }
    Py_DECREF(r);
    return lock;
}

/* the lock let go; ``out`` returned as it is (an exception raised in between is kept) */
static PyObject *unlocked(PyObject *lock, PyObject *out) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *r = Py_IS_TYPE(lock, &HubLockType)
                      ? (hublock_release(lock) < 0 ? NULL : Py_NewRef(Py_None))
                      : PyObject_CallMethodNoArgs(lock, s_release);
    Py_DECREF(lock);
    if (!r) { Py_XDECREF(out); Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb); return NULL; }
    Py_DECREF(r);
    if (type) { Py_XDECREF(out); PyErr_Restore(type, value, tb); return NULL; }
    return out;
}

/* The start of both calls: the arguments checked, the hub's instance dict read (``*hub``) and
 * its lock taken (``*lock``; NULL, with ``*hub`` let go, where any of that raised); 1 in the
 * steady state, 0 elsewhere, -1 with an exception set. */
static int begin(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject **lock,
                 PyObject **hub) {
    *lock = *hub = NULL;
    if (nargs != 3 || !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "expected (hub, region, routing.threads)");
        return -1;
    }
    if (strings() < 0 || !(*hub = PyObject_GenericGetDict(args[0], NULL))) return -1;
    if (!PyDict_Check(*hub) || !(*lock = locked(*hub))) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "the hub has no instance dict");
        Py_CLEAR(*hub);
        return -1;
    }
    return steady(*hub, module);
}

/* enter_alone(hub, region, threads) -> True (entered: listed, routed, scoped), or False */
PyObject *fn_enter_alone(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *lock, *hub, *regions, *state = NULL, *key = NULL, *held = NULL, *scoped = NULL,
             *out = NULL;
    int t = begin(module, args, nargs, &lock, &hub);
    if (!lock) return NULL;
    PyObject *region = args[1], *threads = args[2];
    if (t <= 0) { out = t < 0 ? NULL : Py_NewRef(Py_False); goto done; }
    regions = get(hub, s_regions); /* borrowed */
    state = PyObject_GetAttr(region, s_state);
    if (!regions || !state) { if (!PyErr_Occurred()) out = Py_NewRef(Py_False); goto done; }
    if (!PyList_Check(regions) || !PyDict_Check(state)) { out = Py_NewRef(Py_False); goto done; }
    uint64_t thread = (uint64_t)PyThread_get_thread_ident();
    key = PyLong_FromUnsignedLongLong(thread);
    if (!key || PyContextVar_Get(regions_var, NULL, &held) < 0) goto done;
    if (!held || !PyTuple_Check(held)) { out = Py_NewRef(Py_False); goto done; }
    Py_ssize_t n = PyTuple_GET_SIZE(held);
    if (!(scoped = PyTuple_New(n + 1))) goto done;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(scoped, i, Py_NewRef(PyTuple_GET_ITEM(held, i)));
    PyTuple_SET_ITEM(scoped, n, Py_NewRef(region));
    if (PyList_GET_SIZE(regions) == 0) { /* the first region: the backward engine proxy */
        PyObject *backward = get(hub, s_backward); /* borrowed */
        int rc = backward ? install(backward) : -1;
        if (rc < 0) { PyErr_Clear(); out = Py_NewRef(Py_False); goto done; } /* acquire() says why */
    }
    /* from here on nothing is left half done: each step that can fail undoes those before it */
    if (PyList_Append(regions, region) < 0) goto done;
    if (PyDict_SetItem(state, s_cuda_thread, key) < 0) goto unlist;
    if (count_thread(threads, key, 1) < 0) goto unstate;
    PyObject *token = PyContextVar_Set(regions_var, scoped);
    if (!token) { count_thread(threads, key, -1); goto unstate; }
    Py_DECREF(token);
    route(thread, 1);
    scopes_epoch++;
    out = Py_NewRef(Py_True);
    goto done;
unstate:
    PyDict_DelItem(state, s_cuda_thread);
unlist:
    PyList_SetSlice(regions, PyList_GET_SIZE(regions) - 1, PyList_GET_SIZE(regions), NULL);
done:
    Py_XDECREF(hub); Py_XDECREF(state); Py_XDECREF(key); Py_XDECREF(held); Py_XDECREF(scoped);
    return unlocked(lock, out);
}

/* leave_alone(hub, region, threads) -> True (left: unscoped, unrouted, unlisted), or False */
PyObject *fn_leave_alone(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *lock, *hub, *regions, *state = NULL, *held = NULL, *scoped = NULL, *backward = NULL,
             *activity = NULL, *out = NULL;
    int t = begin(module, args, nargs, &lock, &hub);
    if (!lock) return NULL;
    PyObject *region = args[1], *threads = args[2];
    if (t <= 0) { out = t < 0 ? NULL : Py_NewRef(Py_False); goto done; }
    backward = Py_XNewRef(get(hub, s_backward));
    activity = Py_XNewRef(get(hub, s_activity));
    regions = get(hub, s_regions); /* borrowed: the hub keeps its list for its life */
    state = PyObject_GetAttr(region, s_state);
    if (!backward || !activity || !regions || !state) {
        if (!PyErr_Occurred()) out = Py_NewRef(Py_False);
        goto done;
    }
    /* what the Python path notes in the report: left to it */
    PyObject *hub_errors = get(hub, s_errors); /* borrowed */
    int a = truth(backward, s_ambiguous), e2 = truth(activity, s_errors),
        e1 = hub_errors ? PyObject_IsTrue(hub_errors) : PyErr_Occurred() ? -1 : 0;
    if (a < 0 || e1 < 0 || e2 < 0) goto done;
    if (a || e1 || e2 || errors) { out = Py_NewRef(Py_False); goto done; }
    if (!PyList_Check(regions) || !PyDict_Check(state)) { out = Py_NewRef(Py_False); goto done; }
    if (PyContextVar_Get(regions_var, NULL, &held) < 0) goto done;
    Py_ssize_t n = held && PyTuple_Check(held) ? PyTuple_GET_SIZE(held) : 0;
    if (n == 0 || PyTuple_GET_ITEM(held, n - 1) != region) { out = Py_NewRef(Py_False); goto done; }
    Py_ssize_t at = PyList_GET_SIZE(regions) - 1; /* the last entered, as nearly always */
    while (at >= 0 && PyList_GET_ITEM(regions, at) != region) at--;
    if (at < 0) { out = Py_NewRef(Py_False); goto done; } /* released already (close()) */
    if (!(scoped = PyTuple_GetSlice(held, 0, n - 1))) goto done;
    PyObject *key = PyDict_GetItemWithError(state, s_cuda_thread); /* borrowed */
    if (!key && PyErr_Occurred()) goto done;
    uint64_t thread = key ? PyLong_AsUnsignedLongLong(key) : 0;
    if (thread == (uint64_t)-1 && PyErr_Occurred()) goto done;
    PyObject *token = PyContextVar_Set(regions_var, scoped);
    if (!token) goto done;
    Py_DECREF(token);
    scopes_epoch++;
    /* the context no longer holds it: the rest cannot fail in a way that keeps it half listed */
    Py_XINCREF(key);
    if (PyList_SetSlice(regions, at, at + 1, NULL) < 0 ||
        (key && (PyDict_DelItem(state, s_cuda_thread) < 0 || count_thread(threads, key, -1) < 0))) {
        Py_XDECREF(key);
        goto done;
    }
    Py_XDECREF(key);
    if (thread) route(thread, -1);
    if (PyList_GET_SIZE(regions) == 0) { /* the last region: the hub's _last_region(), steady */
        if (restore(backward) < 0) goto done;
        forget();
        PyObject *records = field(activity, s_records);
        if (!records) goto done;
        int any = PyObject_IsTrue(records);
        PyObject *r = any > 0 ? PyObject_CallMethodNoArgs(records, s_clear) : NULL;
        Py_DECREF(records);
        if (any < 0 || (any > 0 && !r)) goto done;
        Py_XDECREF(r);
    }
    out = Py_NewRef(Py_True);
done:
    Py_XDECREF(hub); Py_XDECREF(state); Py_XDECREF(held); Py_XDECREF(scoped);
    Py_XDECREF(backward); Py_XDECREF(activity);
    return unlocked(lock, out);
}
