/* The callback table: which CUPTI callback ids are kept and what each one is (its api, role,
 * direction, async-ness and where its parameters say stream, pointers and size), from the table
 * cupti.py builds; switching those ids on and off; and reading a call's parameters by its
 * entry. */
#include "cuptifast.h"

Entry entries[3][MAXCB];
/* the configured ids as a list, for switching them on and off without scanning entries[][] */
static struct { int domain; int cbid; } ids[MAXIDS];
static int nids;

static int memcpy_dir(int kind) {
    switch (kind) { /* cudaMemcpyKind; 4 = cudaMemcpyDefault: the pointers say, not the call */
    case 0: return DIR_H2H; case 1: return DIR_H2D; case 2: return DIR_D2H; case 3: return DIR_D2D;
    default: return DIR_NONE;
    }
}

void read_params(const Entry *e, const CallbackData *d, Params *q) {
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

PyObject *table_load(PyObject *table) {
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
    return name_tuple;
fail:
    Py_XDECREF(apis); Py_XDECREF(kinds); Py_XDECREF(roles);
    return NULL;
}

/* cuptiEnableCallback(on, handle, domain, cbid) for every configured id; the first error */
int switch_all(EnableFn enable, void *handle, int on) {
    int first_error = 0;
    for (int k = 0; k < nids; k++) {
        int rc = enable((uint32_t)on, handle, ids[k].domain, ids[k].cbid);
        if (rc && !first_error) first_error = rc;
    }
    return first_error;
}
