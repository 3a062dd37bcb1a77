"""The stand-ins for CUDA graphs and for ``torch.compile``'s CUDA-graph modes."""
from __future__ import annotations

import functools
import itertools
from typing import Any

import torch

from syncguard.predict.fakedevice import _empty_cache
from syncguard.predict.fakestreams import FakeStream, _stream, _synchronize
from syncguard.predict.predictor import cannot as _cannot
from syncguard.predict.threads import _inside


# ---------------------------------------------------------------------------------------------
# CUDA graphs: a CPU build has none. The captured code runs eagerly once and a replay does
# nothing (its outputs keep the captured values), which is no prediction of a GPU's behaviour.

GRAPHS_WHY = ("CUDA graphs: a CPU build has no graphs to capture or replay; the code runs "
              "eagerly here (a replay does nothing), so the block's prediction does not cover "
              "it")
_pool_ids = itertools.count(1)


class FakeCUDAGraph:
    """``torch.cuda.CUDAGraph`` (and ``torch.accelerator.Graph``): capture and replay are
    reported "not predicted"; as a context manager (``with graph:``) it captures."""

    def __init__(self, keep_graph: bool = False, *args: Any, **kwargs: Any):
        self._pool = (0, next(_pool_ids))

    def capture_begin(self, *args: Any, **kwargs: Any) -> None:
        _cannot("torch.cuda.graph", GRAPHS_WHY)

    def capture_end(self) -> None:
        return None

    def instantiate(self) -> None:
        return None

    def replay(self) -> None:
        _cannot("torch.cuda.CUDAGraph.replay", GRAPHS_WHY)

    def reset(self) -> None:
        return None

    def pool(self) -> tuple[int, int]:
        return self._pool

    def enable_debug_mode(self) -> None:
        return None

    def debug_dump(self, debug_path: str) -> None:
        return None

    def __enter__(self) -> "FakeCUDAGraph":
        self.capture_begin()
        return self

    def __exit__(self, *exc: object) -> bool:
        self.capture_end()
        return False


class _GraphContext:
    """``with torch.cuda.graph(g):``. As torch's own, it synchronizes and empties the cache
    before capturing (a GPU waits there: predicted from the measured rules) and makes the
    capture stream current; the capture itself is "not predicted"."""

    default_capture_stream: FakeStream | None = None

    def __init__(self, cuda_graph: FakeCUDAGraph, pool: Any = None,
                 stream: FakeStream | None = None, *args: Any, **kwargs: Any):
        if stream is None:
            if _GraphContext.default_capture_stream is None:
                _GraphContext.default_capture_stream = FakeStream()
            stream = _GraphContext.default_capture_stream
        self.capture_stream = stream
        self.cuda_graph = cuda_graph
        self._ctx = _stream(stream)

    def __enter__(self) -> None:
        _synchronize()
        _empty_cache()
        self._ctx.__enter__()
        self.capture_stream.capturing = True
        self.cuda_graph.capture_begin()

    def __exit__(self, *exc: object) -> bool:
        try:
            self.cuda_graph.capture_end()
        finally:
            self.capture_stream.capturing = False
            self._ctx.__exit__(*exc)
        return False


def _not_covered(fn: Any, what: str, why: str) -> Any:
    """``fn`` as it is, reporting each call "not predicted" to the block it runs in."""

    if getattr(fn, "_sg_not_covered", False):  # torch.compile's decorator compiles again
        return fn

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        _cannot(what, why)
        return fn(*args, **kwargs)

    call._sg_not_covered = True  # type: ignore[attr-defined]
    return call


def _make_graphed_callables(callables: Any, sample_args: Any, *args: Any, **kwargs: Any) -> Any:
    """Graphed callables run eagerly here: each call of one is "not predicted". Modules get a
    new ``forward``, as torch's own does to them."""
    what = "torch.cuda.make_graphed_callables"
    single = not isinstance(callables, tuple)
    out = []
    for c in ((callables,) if single else callables):
        if isinstance(c, torch.nn.Module):
            c.forward = _not_covered(c.forward, what, GRAPHS_WHY)
            out.append(c)
        else:
            out.append(_not_covered(c, what, GRAPHS_WHY))
    return out[0] if single else tuple(out)


def _uses_cuda_graphs(backend: Any, mode: Any, options: Any) -> bool:
    """Whether ``torch.compile`` with these arguments replays CUDA graphs on a GPU (inductor's
    own mode table says which modes turn ``triton.cudagraphs`` on)."""
    if backend == "cudagraphs":
        return True
    if isinstance(options, dict) and "triton.cudagraphs" in options:
        return bool(options["triton.cudagraphs"])
    if not mode or backend not in (None, "inductor"):
        return False
    try:
        from torch._inductor import list_mode_options

        return bool(list_mode_options(mode).get("triton.cudagraphs"))
    except Exception:  # noqa: BLE001 - an unknown mode is torch.compile's to reject
        return mode in ("reduce-overhead", "max-autotune")


def _compile(original: Any) -> Any:
    """``torch.compile``: unchanged, except that what a CUDA-graph mode compiles (on a GPU:
    captured once, then replayed) reports each call "not predicted" (it runs eagerly here)."""

    @functools.wraps(original)
    def compile(model: Any = None, **kwargs: Any) -> Any:
        out = original(model, **kwargs)
        if not _inside() or not _uses_cuda_graphs(kwargs.get("backend"), kwargs.get("mode"),
                                 kwargs.get("options")):
            return out
        what = (f"torch.compile(mode={kwargs['mode']!r})" if kwargs.get("mode")
                else "torch.compile with CUDA graphs")
        why = GRAPHS_WHY.replace("CUDA graphs:", f"CUDA graphs ({what} replays them on a GPU):")

        def mark(compiled: Any) -> Any:
            if isinstance(compiled, torch.nn.Module):  # OptimizedModule: calls reach forward
                compiled.forward = _not_covered(compiled.forward, what, why)
                return compiled
            return _not_covered(compiled, what, why)

        if model is None:  # torch.compile(mode=...) is a decorator
            return lambda fn: mark(out(fn))
        return mark(out)

    return compile
