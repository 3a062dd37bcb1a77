"""Which threads get the stand-ins while the shim is installed (see :func:`inside`)."""
from __future__ import annotations

import threading

from syncguard.predict.predictor import _active


#: idents of the threads running a DataLoader's pin loop started while the shim is installed
_pin_threads: set[int] = set()


def _inside() -> bool:
    """Whether the calling thread is inside a prediction block, and so gets the stand-ins.

    Inside means: this thread has a ``predicting()`` block open (the per-thread stack
    of predictors, ``predictor._active``), or it runs the pin loop of a DataLoader (``_pinning``).
    The rule follows thread identity, not a contextvar, because what makes a CUDA factory work
    inside a block is the block's torch modes, and torch keeps its mode stacks per thread: a
    thread started inside a block (``threading.Thread``, a pool's worker, also one that runs in
    a ``contextvars.copy_context()``) has no modes, so if it saw ``torch.cuda.is_available()``
    true, its first ``torch.ones(2, device="cuda")`` would crash. It gets torch's own answers
    instead, exactly as without syncguard, and is not predicted; to be predicted it opens a
    block of its own. A stand-in handed to it still runs, reported "not predicted"
    (``tensors.dispatch_unobserved``).

    The pin loop is the block's own work: on a CPU build only a loader made inside a block
    starts one (outside, ``torch.accelerator`` says there is no accelerator and the loader does
    not pin). On a CUDA build a loader made outside while another thread's block is open also
    pins the block's way (a copy marked pinned, not page-locked memory); left as it is.

    Two set/dict look-ups by thread ident: the swapped names are on hot paths."""
    ident = threading.get_ident()
    return ident in _active or ident in _pin_threads
