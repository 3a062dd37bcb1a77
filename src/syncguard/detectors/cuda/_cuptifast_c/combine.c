/* A region's calls into events at its exit, in C: detectors.cuda.combine's loop read from the
 * Calls' C fields, the events built straight into their slots. */
#include "cuptifast.h"
#include <math.h>
#include <structmember.h>

/* ---- combine: a region's calls into events, in C ----------------------------------------------
 *
 * A SyncEvent is a frozen dataclass with __slots__: an event is its object and one pointer per
 * field, written here at the offsets its member descriptors name (read once per event type:
 * Layout). A __dict__ per event would be several times the memory to fill at exit and to free
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
 * defaults, then the event's own values), without a Python frame per event: a loop of a pageable
 * copy and a stream sync per iteration leaves one event per iteration to build at exit.
 * host_kind(call, direction) and
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

PyObject *combine_events(PyObject *obs, PyObject *host_kind, PyObject *direction, PyObject *type,
                         PyObject *defaults, PyObject *detectors, PyObject *kinds,
                         PyObject *functions) {
    Combine m = {0};
    m.host_kind = host_kind; m.direction = direction; m.type = type; m.defaults = defaults;
    m.detectors = detectors;
    if (!functions) return combine_run(&m, NULL, obs, kinds, "combine");
    Pointers p = {0};
    p.functions = functions;
    PyObject *out = combine_run(&m, &p, obs, kinds, "by_pointer");
    pointers_free(&p);
    return out;
}
