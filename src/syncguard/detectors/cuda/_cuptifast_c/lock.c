/* The hub's lock: a re-entrant lock that Python holds with ``with hub.lock:`` and regions.c takes
 * with a C call, not a Python method call (taking and letting go of a threading.RLock from C was
 * a large part of a region's fused entry and exit).
 *
 * Semantics of threading.RLock for what the hub uses: acquire() (blocking, with the GIL released
 * while it waits), release() by the owner only, re-entrant on the owning thread, and the context
 * manager protocol. Where this module did not build, the hub uses threading.RLock. */
#include "cuptifast.h"

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    unsigned long owner; /* the thread holding it; meaningful while count > 0 */
    long count;
} HubLock;

/* Take the lock for this thread (again, where it holds it already); without ``wait``, only if
 * no other thread holds it. 1 when taken, 0 when not. */
static int take(HubLock *self, int wait) {
    unsigned long me = PyThread_get_thread_ident();
    if (self->count > 0 && self->owner == me) {
        self->count++;
        return 1;
    }
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        if (!wait) return 0;
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    self->owner = me;
    self->count = 1;
    return 1;
}

int hublock_acquire(PyObject *obj) {
    take((HubLock *)obj, 1);
    return 0;
}

int hublock_release(PyObject *obj) {
    HubLock *self = (HubLock *)obj;
    if (self->count <= 0 || self->owner != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError, "cannot release un-acquired lock");
        return -1;
    }
    if (--self->count == 0) {
        self->owner = 0;
        PyThread_release_lock(self->lock);
    }
    return 0;
}

static PyObject *lock_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "HubLock() takes no arguments");
        return NULL;
    }
    HubLock *self = (HubLock *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    if (!(self->lock = PyThread_allocate_lock())) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void lock_dealloc(HubLock *self) {
    if (self->lock) {
        if (self->count > 0) PyThread_release_lock(self->lock);
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *lock_acquire(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    /* acquire() and __enter__(); acquire(False) as threading's: without waiting, False if held */
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "acquire(blocking=True): one argument at most");
        return NULL;
    }
    int blocking = nargs ? PyObject_IsTrue(args[0]) : 1;
    if (blocking < 0) return NULL;
    return PyBool_FromLong(take((HubLock *)self, blocking));
}

static PyObject *lock_release(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (hublock_release(self) < 0) return NULL;
    if (nargs == 3) Py_RETURN_FALSE; /* __exit__: the exception, if any, goes on */
    Py_RETURN_NONE;
}

static PyObject *lock_held(PyObject *self, PyObject *noargs) {
    HubLock *l = (HubLock *)self;
    return PyBool_FromLong(l->count > 0 && l->owner == PyThread_get_thread_ident());
}

static PyMethodDef lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))lock_acquire, METH_FASTCALL,
     "acquire(blocking=True) -> True, or False where not blocking and held by another thread"},
    {"release", (PyCFunction)(void (*)(void))lock_release, METH_FASTCALL, "release()"},
    {"__enter__", (PyCFunction)(void (*)(void))lock_acquire, METH_FASTCALL, "acquire()"},
    {"__exit__", (PyCFunction)(void (*)(void))lock_release, METH_FASTCALL, "release()"},
    {"_is_owned", lock_held, METH_NOARGS, "Whether the calling thread holds it."},
    {NULL, NULL, 0, NULL}};

PyTypeObject HubLockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "syncguard.detectors.cuda._cuptifast.HubLock",
    .tp_basicsize = sizeof(HubLock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The hub's re-entrant lock, taken from C by regions.c without a Python call.",
    .tp_new = lock_new,
    .tp_dealloc = (destructor)lock_dealloc,
    .tp_methods = lock_methods,
};
