/* The user's frame: the class of each code object on the stack (user, internal, CUDA-graph
 * capture set-up), the Site of the innermost user frame, and, for the GIL-free repeat, a hash of
 * where the thread is. The only part that reads CPython's internals (position(), through
 * cpython_internals.h); the rest is public API. */
#include "cuptifast.h"
#if REPEAT
#include "cpython_internals.h"
#endif

/* A code object's class, kept in C once attribution has cached it: the Python dict lookup needs
 * an int key made per frame, for every torch frame above the user's. Open addressing keyed by
 * the code's address; each slot holds its code object alive, so the address cannot be reused
 * while the slot lives. Read and written with the GIL held; emptied when half full and by
 * configure(). */
#define CLASS_SLOTS 8192
static struct { PyObject *code; int cls; } class_slots[CLASS_SLOTS];
static int class_used;

void class_clear(void) {
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

/* attribution.c_site_cache's entries, (Site, codes), by their 64-bit key, held here so a hit
 * needs no int key made per copy; emptied when half full and by configure(). */
#define SITE_SLOTS 4096
static struct { uint64_t key; PyObject *entry; } site_slots[SITE_SLOTS];
static int site_used;

void site_clear(void) {
    for (int i = 0; i < SITE_SLOTS; i++) Py_CLEAR(site_slots[i].entry);
    site_used = 0;
}

/* The Site of the innermost user frame with stack_depth frames of stack (new reference), and the
 * phase raised to graph capture when a capture set-up frame lies between it and the call. The
 * stack is keyed by (code address, instruction offset) pairs hashed to 64 bits; the cache entry
 * holds its code objects, so no address in a live key can be reused. */
PyObject *user_site(int *phase) {
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

#if REPEAT
int position(PyThreadState *ts, uint64_t *frames, const void **ctx, const void **vars,
             uint64_t *ver) {
    return read_position(ts, POS_FRAMES, frames, ctx, vars, ver);
}
#endif
