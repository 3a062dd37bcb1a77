/* The routing table and the gate: which threads the callback works for, read without the GIL.
 *
 * CUPTI is subscribed once, at the first region, and stays subscribed with every id on; a region
 * is an entry here, never a subscribe or an unsubscribe. The table is keyed by thread (the
 * ident threading.get_ident() gives, pthread_self() on POSIX): how many regions entered on that
 * thread are open. A callback on a thread with no entry returns at once, before it touches
 * anything of Python's, unless a backward pass of a region is in flight (its engine threads have
 * no region of their own and are counted here as ``backward``: they take the usual path, whose
 * owner logic decides) or a region found the table full (``overflow``: every thread takes the
 * usual path, where the regions context variable decides, as before the table).
 *
 * Writers hold the GIL (the hub routes a region at its entry and unroutes it at its exit, from
 * any thread), so there is one writer at a time; readers are every thread's callbacks. A slot,
 * once claimed by a thread, stays that thread's (its count goes back to 0, never the key): a
 * probe chain is never broken under a reader. Thread idents are reused by the system, so a
 * program that keeps starting threads reuses slots; one that runs regions on more distinct
 * threads than there are slots overflows, which costs speed, not results.
 *
 * The gate: every callback counts itself in ``inflight`` while it runs, and returns at once while
 * ``closing`` is set. Lending CUPTI (a profiler starting) sets ``closing``, switches every id off,
 * waits, with the GIL released, until no callback of ours is running, and only then unsubscribes
 * (detector.py: CuptiHub._close, through module.c: shut(), drain()). */
#include "cuptifast.h"
#include <stdatomic.h>
#include <sched.h>

#define ROUTES 1024 /* a power of two */

typedef struct {
    _Atomic uint64_t thread; /* 0: free */
    _Atomic int regions;
} Route;

static Route routes[ROUTES];
static _Atomic int overflow;    /* regions routed while the table was full */
static _Atomic int backward;    /* backward passes of regions in flight */
static _Atomic int closing;     /* CUPTI being lent out: every callback returns at once */
static _Atomic long inflight;   /* callbacks of ours running now */

static inline size_t first_slot(uint64_t thread) {
    return (size_t)(mix(0, thread) >> 17) & (ROUTES - 1);
}

/* this thread's slot, or NULL; ``claim``: a free slot is taken for it (writers only) */
static Route *find(uint64_t thread, int claim) {
    size_t i = first_slot(thread);
    for (size_t n = 0; n < ROUTES; n++, i = (i + 1) & (ROUTES - 1)) {
        uint64_t key = atomic_load_explicit(&routes[i].thread, memory_order_acquire);
        if (key == thread) return &routes[i];
        if (key == 0) {
            if (!claim) return NULL;
            atomic_store_explicit(&routes[i].regions, 0, memory_order_relaxed);
            atomic_store_explicit(&routes[i].thread, thread, memory_order_release);
            return &routes[i];
        }
    }
    return NULL;
}

int route(uint64_t thread, int delta) {
    if (!thread) return 0;
    Route *r = find(thread, delta > 0);
    if (!r) { /* the table is full (delta > 0), or a thread routed while it was (delta < 0) */
        if (delta > 0 || (delta < 0 && atomic_load(&overflow) > 0)) atomic_fetch_add(&overflow, delta);
        return 0;
    }
    int now = atomic_load(&r->regions) + delta;
    if (now < 0) now = 0; /* unrouting what was never routed: nothing to take */
    atomic_store(&r->regions, now);
    return now;
}

void route_backward(int delta) {
    int now = atomic_fetch_add(&backward, delta) + delta;
    if (now < 0) atomic_store(&backward, 0);
}

int routed(void) {
    if (atomic_load_explicit(&backward, memory_order_relaxed) ||
        atomic_load_explicit(&overflow, memory_order_relaxed))
        return 1;
    Route *r = find((uint64_t)PyThread_get_thread_ident(), 0);
    return r && atomic_load_explicit(&r->regions, memory_order_relaxed) > 0;
}

PyObject *routes_dict(void) {
    PyObject *out = PyDict_New();
    for (size_t i = 0; out && i < ROUTES; i++) {
        uint64_t key = atomic_load(&routes[i].thread);
        int n = atomic_load(&routes[i].regions);
        if (!key || !n) continue;
        PyObject *k = PyLong_FromUnsignedLongLong(key), *v = PyLong_FromLong(n);
        if (!k || !v || PyDict_SetItem(out, k, v) < 0) Py_CLEAR(out);
        Py_XDECREF(k); Py_XDECREF(v);
    }
    if (!out) return NULL;
    PyObject *r = Py_BuildValue("(Nii)", out, atomic_load(&overflow), atomic_load(&backward));
    return r;
}

/* every slot freed: only where no callback of ours can run (configure(), before the hub
 * subscribes; tests), since a probe chain is broken under a reader */
void routes_clear(void) {
    for (size_t i = 0; i < ROUTES; i++) {
        atomic_store(&routes[i].regions, 0);
        atomic_store(&routes[i].thread, 0);
    }
    atomic_store(&overflow, 0);
    atomic_store(&backward, 0);
}

int gate_enter(void) {
    atomic_fetch_add(&inflight, 1);
    if (atomic_load(&closing)) {
        atomic_fetch_sub(&inflight, 1);
        return 0;
    }
    return 1;
}

void gate_leave(void) { atomic_fetch_sub(&inflight, 1); }

void gate_close(void) { atomic_store(&closing, 1); }

void gate_open(void) { atomic_store(&closing, 0); }

int gate_closed(void) { return atomic_load(&closing); }

/* Without the GIL: wait until no callback of ours runs (one waiting for the GIL runs once the
 * caller released it, and returns at once: the gate is closed). 0 when drained, -1 after
 * ``timeout_ns`` with callbacks still running. */
int gate_drain(int64_t timeout_ns) {
    int64_t until = now_ns() + timeout_ns;
    while (atomic_load(&inflight) > 0) {
        if (now_ns() > until) return -1;
        sched_yield();
    }
    return 0;
}
