/* The module _cuptifast: the cuda detector's CUPTI callback in C, what calls.py's callback
 * does in Python, without a ctypes thunk per callback and without Python bytecode on the hot
 * path. Same rules as the Python callback (which stays, as the fallback where this module did
 * not build); see callback.c for the recording, pairing.c for what rides on the thread's last
 * call, combine.c for a region's exit. This file holds the configuration, the Python-facing
 * functions and the module's definition.
 *
 * Built by setup.py as an optional extension, for CPython >= 3.11 (PyFrame_GetLasti); the
 * GIL-free repeat on 3.11 to 3.13 (see REPEAT in cuptifast.h). SYNCGUARD_SOURCE_DIGEST, set by
 * setup.py, is the digest of these sources (detectors/cuda/csources.py), exposed as
 * SOURCE_DIGEST so that provenance can name the C that was built where no source is present.
 */
#include "cuptifast.h"

#ifndef SYNCGUARD_SOURCE_DIGEST
#define SYNCGUARD_SOURCE_DIGEST ""
#endif

PyObject *regions_var, *allows_var, *backward_active, *thread_active, *dummy_thread, *py_callback,
         *compiling, *compile_tls, *code_cache, *code_class, *site_cache, *make_site, *thread_name,
         *call_type, *no_site;
PyObject *s_cuda, *s_dir[5], *s_phase[3], *s_observations, *s_empty, *s_nothread, *s_dict,
         *s_compile_context, *s_filename, *s_lineno, *s_function, *s_stack, *s_source, *s_pinned,
         *s_pageable;
int stack_depth = 32;
volatile long generation = 1;
long config_epoch = 1;
volatile long scopes_epoch = 1;

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
    PyObject *name_tuple = table_load(table);
    if (!name_tuple) return NULL;
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
}

typedef int (*SubscribeFn)(void **subscriber, void *callback, void *userdata);
/* CUpti_SubscriberParams (cupti_callbacks.h, CUPTI >= 13.2), cuptiSubscribe_v2's 4th argument */
typedef struct {
    size_t structSize;
    const char *subscriberName;
    const char *oldSubscriberName;
    size_t oldSubscriberSize;
    uint8_t allowMultipleSubscribers;
    uint8_t padding[7];
} SubscriberParams;
typedef int (*SubscribeV2Fn)(void **subscriber, void *callback, void *userdata, SubscriberParams *p);
typedef int (*UnsubscribeFn)(void *subscriber);

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
     * subscribes this module's callback when handle is 0 (with cuptiSubscribe_v2 and
     * allowMultipleSubscribers where its address is given), makes every thread's call state stale,
     * then enables every id; a region's whole entry into CUPTI in one call (ctypes calls and
     * their argument objects were most of it on a cold host) */
    unsigned long long sub_fn, enable_fn, handle, shared_fn = 0;
    int sub_rc = 0, enable_rc = 0;
    if (!PyArg_ParseTuple(args, "KKK|K", &sub_fn, &enable_fn, &handle, &shared_fn)) return NULL;
    void *h = (void *)(uintptr_t)handle;
    generation++; /* under the GIL, as every other writer; nothing of ours fires before enabling */
    Py_BEGIN_ALLOW_THREADS
    if (!h && shared_fn) { /* cuptiSubscribe_v2, beside other subscribers (CUPTI >= 13.2) */
        SubscriberParams p = {.structSize = sizeof p, .subscriberName = "syncguard",
                              .allowMultipleSubscribers = 1};
        sub_rc = ((SubscribeV2Fn)(uintptr_t)shared_fn)(&h, (void *)callback, NULL, &p);
    } else if (!h) sub_rc = ((SubscribeFn)(uintptr_t)sub_fn)(&h, (void *)callback, NULL);
    if (!sub_rc) {
        gate_open(); /* shut by a hand-over (shut()): ours again */
        enable_rc = switch_all((EnableFn)(uintptr_t)enable_fn, h, 1);
    }
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

static PyObject *fn_shut(PyObject *self, PyObject *noargs) {
    /* the gate closed: every callback returns at once from now on, until on() subscribes again.
     * The first step of giving CUPTI back (detector.py: CuptiHub._close): then every id off, then
     * drain(), then unsubscribe. */
    gate_close();
    Py_RETURN_NONE;
}

static PyObject *fn_open(PyObject *self, PyObject *noargs) {
    gate_open(); /* on() does it too: for a subscription made through ctypes */
    Py_RETURN_NONE;
}

static PyObject *fn_drain(PyObject *self, PyObject *arg) {
    /* drain(timeout_s) -> True once no callback of ours runs, False after timeout_s: waited with
     * the GIL released (a callback may be waiting for it, and returns at once once it has it:
     * the gate is shut). Then every thread's call in flight is over for us (no EXIT will come
     * once unsubscribed) and the regions remembered are let go. */
    double timeout_s = PyFloat_AsDouble(arg);
    int drained;
    if (timeout_s == -1.0 && PyErr_Occurred()) return NULL;
    Py_BEGIN_ALLOW_THREADS
    drained = gate_drain((int64_t)(timeout_s * 1e9)) == 0;
    Py_END_ALLOW_THREADS
    generation++;
    forget();
    return PyBool_FromLong(drained);
}

static PyObject *fn_route(PyObject *self, PyObject *args) {
    unsigned long long thread;
    int delta;
    if (!PyArg_ParseTuple(args, "Ki", &thread, &delta)) return NULL;
    return PyLong_FromLong(route(thread, delta));
}

static PyObject *fn_route_backward(PyObject *self, PyObject *arg) {
    long delta = PyLong_AsLong(arg);
    if (delta == -1 && PyErr_Occurred()) return NULL;
    route_backward((int)delta);
    Py_RETURN_NONE;
}

static PyObject *fn_routes(PyObject *self, PyObject *noargs) { return routes_dict(); }

static PyObject *fn_clear_routes(PyObject *self, PyObject *noargs) {
    routes_clear();
    Py_RETURN_NONE;
}

static PyObject *fn_gate(PyObject *self, PyObject *noargs) {
    return PyBool_FromLong(!gate_closed());
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

static PyObject *fn_combine(PyObject *self, PyObject *args) {
    /* combine(observations, host_kind, direction, event_type, defaults, detectors, kinds) ->
     * (events, unknown, undirected), or NotImplemented; kinds: (blocking H2D copy, blocking D2H
     * copy, pageable copy, stream sync, implicit free) as events.py names them */
    PyObject *obs, *host_kind, *direction, *type, *defaults, *detectors, *kinds;
    if (!PyArg_ParseTuple(args, "O!OOO!O!O!O!", &PyList_Type, &obs, &host_kind, &direction,
                          &PyType_Type, &type, &PyDict_Type, &defaults, &PyTuple_Type,
                          &detectors, &PyTuple_Type, &kinds))
        return NULL;
    return combine_events(obs, host_kind, direction, type, defaults, detectors, kinds, NULL);
}

/* by_pointer(observations, functions, event_type, defaults, detectors, kinds) ->
 * (events, unknown, undirected), or NotImplemented: detectors.cuda.combine_by_pointer in one call,
 * the exit's path with this module: the pinned copies that can make no event passed over
 * (pinned_copies), the rest combined as combine() does, host memory asked by pointer
 * (pointers.c) as hostmem.ByPointer asks it. functions: see pointers.c. */
static PyObject *fn_by_pointer(PyObject *self, PyObject *args) {
    PyObject *obs, *functions, *type, *defaults, *detectors, *kinds;
    if (!PyArg_ParseTuple(args, "O!OO!O!O!O!", &PyList_Type, &obs, &functions, &PyType_Type,
                          &type, &PyDict_Type, &defaults, &PyTuple_Type, &detectors,
                          &PyTuple_Type, &kinds))
        return NULL;
    return combine_events(obs, NULL, NULL, type, defaults, detectors, kinds, functions);
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
     "on(cuptiSubscribe, cuptiEnableCallback, handle or 0[, cuptiSubscribe_v2]) -> (subscribe error, handle, enable error)"},
    {"off", fn_off, METH_VARARGS,
     "off(cuptiEnableCallback, cuptiUnsubscribe or 0, handle) -> first error"},
    {"shut", fn_shut, METH_NOARGS, "Shut the gate: every callback returns at once until on()."},
    {"open", fn_open, METH_NOARGS, "Open the gate again (on() does it when it subscribes)."},
    {"drain", fn_drain, METH_O,
     "drain(timeout_s) -> whether no callback of ours runs now (waited with the GIL released)"},
    {"route", fn_route, METH_VARARGS,
     "route(thread ident, delta) -> the regions open on that thread now (routing.c)"},
    {"route_backward", fn_route_backward, METH_O,
     "route_backward(delta): a backward pass of a region began (1) or ended (-1)"},
    {"routes", fn_routes, METH_NOARGS, "routes() -> ({thread: regions open}, overflow, backward)"},
    {"clear_routes", fn_clear_routes, METH_NOARGS,
     "Every slot of the routing table freed: only where no callback can run (configure, tests)."},
    {"gate", fn_gate, METH_NOARGS, "Whether callbacks are let through (False after shut(), until on())."},
    {"forget", fn_forget, METH_NOARGS,
     "Drop the regions remembered for handing calls over (off() does it too)."},
    {"enter_alone", (PyCFunction)(void (*)(void))fn_enter_alone, METH_FASTCALL,
     "enter_alone(hub, region, routing.threads) -> whether the region entered (regions.c)"},
    {"leave_alone", (PyCFunction)(void (*)(void))fn_leave_alone, METH_FASTCALL,
     "leave_alone(hub, region, routing.threads) -> whether the region left (regions.c)"},
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
    if (PyType_Ready(&HubLockType) < 0 ||
        PyModule_AddObjectRef(m, "HubLock", (PyObject *)&HubLockType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddStringConstant(m, "SOURCE_DIGEST", SYNCGUARD_SOURCE_DIGEST) < 0) {
        Py_DECREF(m);
        return NULL;
    }
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
