"""The random numbers of CUDA stand-ins: a CPU generator of their own, standing for the CUDA
default generator.

Why: the stand-ins run CPU kernels, which draw from the CPU default generator, so
``torch.cuda.manual_seed(s)`` (a no-op stand-in before) did not make "cuda" draws repeat, and
CPU draws in between shifted them. Here every draw for a stand-in runs with this generator's
state, which ``torch.cuda.manual_seed``/``manual_seed_all``/``seed``/``set_rng_state`` (and
``torch.manual_seed``, which seeds CUDA too) set: the same seed gives the same draws within
prediction mode. Its default seed is torch's default for every generator (67280421310721), so
an unseeded program draws alike from run to run, as on a GPU.

The values are NOT a GPU's: CUDA draws with Philox in its own kernels, this is the CPU's
Mersenne Twister; and its state (``torch.cuda.get_rng_state()``) is a CPU generator's, not the
16 bytes of CUDA's.

The CPU kernels offer no generator argument for many seeded ops (``randn`` without one,
dropout, attention), so the draw runs with the CPU default generator holding this state, which
is swapped in and back out around it. A CPU draw on another thread at that instant would
consume from the wrong stream; the swap is locked against other stand-in draws only.
"""
from __future__ import annotations

import contextlib
import functools
import threading

import torch

__all__ = ["GENERATOR", "drawing", "seeded_draw"]

#: the stand-ins' "CUDA default generator" (process-wide, like the device's)
GENERATOR = torch.Generator()
_lock = threading.RLock()
_local = threading.local()


@contextlib.contextmanager
def drawing():
    """Run the block's CPU draws from ``GENERATOR`` (nested blocks share the outer swap)."""
    if getattr(_local, "depth", 0):
        _local.depth += 1
        try:
            yield
        finally:
            _local.depth -= 1
        return
    with _lock:
        cpu = torch.default_generator
        saved = cpu.get_state()
        cpu.set_state(GENERATOR.get_state())
        _local.depth = 1
        try:
            yield
        finally:
            _local.depth = 0
            GENERATOR.set_state(cpu.get_state())
            cpu.set_state(saved)


@functools.lru_cache(maxsize=None)
def _seeded_name(name: str) -> bool:
    """Whether an aten op of this name draws random numbers (torch tags such overloads)."""
    packet = getattr(torch.ops.aten, name, None) if name else None
    try:
        overloads = [getattr(packet, o) for o in packet.overloads()] if packet else []
    except (AttributeError, RuntimeError):
        return False
    return any(torch.Tag.nondeterministic_seeded in o.tags for o in overloads)


def seeded_draw(func, kwargs: dict):
    """``drawing()`` for a call that draws random numbers without an explicit generator (an aten
    op by its tags, a Python-level call such as ``torch.randn`` by its aten namesake), else a
    no-op context."""
    tags = getattr(func, "tags", None)
    if tags is not None:
        seeded = torch.Tag.nondeterministic_seeded in tags
    else:
        seeded = _seeded_name(getattr(func, "__name__", "") or "")
    if seeded and kwargs.get("generator") is None:
        return drawing()
    return contextlib.nullcontext()
