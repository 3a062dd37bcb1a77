/* CPython's internals, read by frames.c alone: supported on CPython 3.11, 3.12 and 3.13 built
 * with the GIL (REPEAT in cuptifast.h is 1 on exactly those), the versions whose layouts this
 * was written and tested against.
 *
 * position() reads the calling thread's interpreter frame chain and its context object from the
 * thread state, without the GIL: only that thread changes them, and it is inside a CUDA call.
 * Reading them takes no reference and allocates nothing.
 */
#ifndef SYNCGUARD_CPYTHON_INTERNALS_H
#define SYNCGUARD_CPYTHON_INTERNALS_H

#include "cuptifast.h"

#if !REPEAT || PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error "cpython_internals.h knows CPython 3.11 to 3.13 with the GIL only"
#endif

#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE 1
#endif
#include "internal/pycore_frame.h"
#include "internal/pycore_context.h"

/* This thread's frames, hashed (each frame's code object and instruction, and their number),
 * its context, the context's variables mapping and the thread's context version; 0 where it has
 * none to compare (no context yet, or a stack deeper than ``max_frames``). */
static inline int read_position(PyThreadState *ts, int max_frames, uint64_t *frames,
                                const void **ctx, const void **vars, uint64_t *ver) {
#if PY_VERSION_HEX >= 0x030D0000
    const _PyInterpreterFrame *f = ts->current_frame;
#else
    const _PyInterpreterFrame *f = ts->cframe ? ts->cframe->current_frame : NULL;
#endif
    uint64_t h = 1469598103934665603ULL;
    int n = 0;
    for (; f; f = f->previous) {
        if (++n > max_frames) return 0;
#if PY_VERSION_HEX >= 0x030D0000
        h = mix(mix(h, (uint64_t)(uintptr_t)f->f_executable), (uint64_t)(uintptr_t)f->instr_ptr);
#else
        h = mix(mix(h, (uint64_t)(uintptr_t)f->f_code), (uint64_t)(uintptr_t)f->prev_instr);
#endif
    }
    const PyContext *c = (const PyContext *)ts->context;
    if (!c) return 0;
    *frames = mix(h, (uint64_t)n);
    *ctx = c; *vars = c->ctx_vars; *ver = ts->context_ver;
    return 1;
}

#endif
