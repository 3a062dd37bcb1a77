/* The Call type: a call the C callback kept, calls.CudaCall's fields read as attributes from
 * its C values (see cuptifast.h), and new_call() that makes one. */
#include "cuptifast.h"

PyObject *names_table;

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

PyTypeObject CallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "syncguard.detectors.cuda._cuptifast.Call",
    .tp_doc = "A call the C callback kept: calls.CudaCall's fields, read as attributes.",
    .tp_basicsize = sizeof(Call),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = call_traverse, .tp_clear = call_clear, .tp_dealloc = call_dealloc,
    .tp_repr = call_repr, .tp_getset = call_getset,
};

/* A Call of table entry ``e`` (its api, role and async-ness) from the thread's kept state or a
 * no-wait copy's values; takes its own references to site, thread and allows. */
PyObject *new_call(const Entry *e, int dir, const uint32_t *corr, int ncorr, int has_stream,
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
