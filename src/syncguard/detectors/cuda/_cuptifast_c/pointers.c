/* Host memory by pointer: asking the runtime (cudaPointerGetAttributes) what memory each host
 * pointer a region's copies used is, each pointer once, in one C loop with the GIL released; and
 * passing over, at a region's exit, the pinned copies that can make no event. */
#include "cuptifast.h"

/* cudaPointerGetAttributes(&a, p).type for each of ptrs[0..n) into types, -1 where it failed (the
 * error then cleared with cudaGetLastError, so that torch's next launch check finds none), with
 * the GIL released around the runtime's calls (they may wait for a lock that a thread inside a
 * CUDA call holds, whose callback may be waiting for the GIL) */
void query_types(PointerAttributesFn get, GetLastErrorFn clear, const uint64_t *ptrs,
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

/* ---- host memory by pointer, in C ------------------------------------------------------------
 *
 * hostmem.ByPointer's answers for by_pointer(): the CUPTI memory kind of each host pointer a
 * region's copies used, asked of the runtime (cudaPointerGetAttributes) the first time a copy
 * needs it, never twice. Asked through Python (ByPointer, pointer_kinds' ask, a batch call back
 * into C) this was a large part of a region's exit; here the question is one C loop.
 * functions() says what to call it with: (cudaPointerGetAttributes, cudaGetLastError) addresses, or None while nothing
 * may be asked (the thread's stream captures a graph, no runtime); it is called once, at the first
 * question, as pointer_kinds checks the capture once. */
void pointers_free(Pointers *p) { PyMem_Free(p->key); PyMem_Free(p->kind); }

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
int pointers_ask(Pointers *p, const uint64_t *ptrs, Py_ssize_t n) {
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
int pointer_kind(Pointers *p, uint64_t ptr) {
    if (!ptr) return -1;
    if (p->cap) { /* known: no question, no allocation */
        size_t h = pointers_slot(p, ptr);
        if (p->key[h]) return p->kind[h];
    }
    if (pointers_ask(p, &ptr, 1) < 0) return -2;
    return p->kind[pointers_slot(p, ptr)];
}

/* The async host<->device copies that cannot become an event (drop[i] = 1), so that the
 * combining loop passes over them: a loop of sync-free copies leaves one pinned copy per
 * iteration, each costly to pass over in Python with caches cold. Such a copy is one whose next cuda observation is a copy
 * too (combine pairs an async copy only with the call right after it, and a copy ends the
 * pairing) and whose host memory is pinned (an unpaired pinned copy made the host wait for
 * nothing). Anything else is kept, and an observation of another detector ends a candidate's
 * run. The candidates' distinct host pointers are asked in one question. 1: a call of the
 * Python callback is among them (by_pointer answers NotImplemented); -1: error. */
int pinned_copies(PyObject *obs, Pointers *p, char *drop) {
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
