"""A ``torch.cuda`` stand-in for CPU builds: the names CUDA code calls, answering as one GPU
would, and reporting the calls that make the host wait.

Streams, events and ``synchronize`` are plain Python in torch.cuda, never tensor ops, so no
torch mode sees them; like ``syncguard.cpupath`` the shim swaps the module's names for the
block's duration and restores them on every exit path. Code that bound a name before the block
(``from torch.cuda import Stream``) keeps the real one and is not seen.

Beside ``torch.cuda``, the shim answers for what asks the same question elsewhere:
``torch.accelerator`` (the DataLoader decides whether to pin by it), the names torch.cuda's own
submodules look up in themselves (``torch.cuda.memory``, ``torch.cuda.nvtx``), the DataLoader's
pin-memory thread, and ``torch.compile``'s CUDA-graph modes. What a CPU build cannot run as on a
GPU (CUDA graphs, ``mem_get_info``) runs as best it can and is reported "not predicted".

The names are swapped process-wide, but each swapped name answers per thread (``_inside``): a
thread that is not inside a block gets torch's own function, as if syncguard were absent.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import os
import sys
import threading
from types import SimpleNamespace
from typing import Any

import torch

from syncguard.predict import rng
from syncguard.predict.devices import DEVICE_COUNT, check_ordinal
from syncguard.predict.predictor import _active, active
from syncguard.predict.predictor import cannot as _cannot, decide as _decide
from syncguard.predict.tensors import FREES, moving, rebuilding, restoring, saving, swapping

__all__ = ["install", "uninstall", "FakeStream", "FakeEvent", "FakeCUDAGraph", "SHIMMED",
           "ACCELERATOR_SHIMMED", "GRAPHS_WHY", "AUTOCAST_WHY"]


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


def _index(device: Any) -> int:
    """The CUDA index ``device`` names (None: the current device, 0), by torch's own parser,
    which also raises torch's errors for a device of another type."""
    if device is None:
        return 0
    from torch.cuda._utils import _get_device_index

    return _get_device_index(device, optional=True)


def _ordinal(device: Any) -> int:
    """For calls that select a device: cuda:N beyond the count raises as torch does."""
    return check_ordinal(_index(device))


def _device_id(device: Any) -> int:
    """For the device queries (get_device_properties and kin): torch asserts."""
    index = _index(device)
    if index < 0 or index >= DEVICE_COUNT:
        raise AssertionError("Invalid device id")
    return index


def _stream_device(device: Any) -> int:
    index = _index(device)
    if index >= DEVICE_COUNT:
        raise RuntimeError(f"Device index value {index} is out of index range "
                           f"[0, {DEVICE_COUNT})")
    return index


def _stats_device(device: Any) -> int:
    index = _index(device)
    if index >= DEVICE_COUNT:
        raise RuntimeError(f"Invalid device argument {index}: did you call init?")
    return index


class FakeStream:
    """A CUDA stream that exists only as a label; work on it runs eagerly on the CPU."""

    _ids = iter(range(1, 1 << 62))

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any):
        self.stream_id = next(FakeStream._ids)
        self.device = SimpleNamespace(type="cuda", index=_ordinal(device))
        self.priority = priority
        self.capturing = False  # inside ``with torch.cuda.graph(g, stream=this)``

    def synchronize(self) -> None:
        _decide("torch.cuda.Stream.synchronize")

    def query(self) -> bool:
        return True

    def is_capturing(self) -> bool:
        """Whether a ``torch.cuda.graph`` block is capturing on this stream (the optimizers'
        capture check asks this)."""
        return self.capturing

    @property
    def device_type(self) -> str:
        return "cuda"

    @property
    def device_index(self) -> int:
        return self.device.index

    @property
    def cuda_stream(self) -> int:
        return self.stream_id

    def __enter__(self) -> "FakeStream":  # torch.Stream: ``with stream:`` makes it current
        entered = _local.__dict__.setdefault("entered", [])
        entered.append(_stream(self))
        entered[-1].__enter__()
        return self

    def __exit__(self, *exc: object) -> bool:
        _local.entered.pop().__exit__(*exc)
        return False

    def wait_stream(self, stream: "FakeStream") -> None:
        return None

    def wait_event(self, event: "FakeEvent") -> None:
        return None

    def record_event(self, event: "FakeEvent | None" = None) -> "FakeEvent":
        event = event or FakeEvent()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeStream) and other.stream_id == self.stream_id

    def __hash__(self) -> int:
        return hash(self.stream_id)


class FakeEvent:
    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False):
        self.enable_timing = enable_timing
        self.recorded = False

    def record(self, stream: FakeStream | None = None) -> None:
        self.recorded = True

    def synchronize(self) -> None:
        _decide("torch.cuda.Event.synchronize")

    def wait(self, stream: FakeStream | None = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: "FakeEvent") -> float:
        """GPU time cannot be predicted on a CPU: refuse rather than invent a number."""
        p = active()
        if p is not None:
            p.cannot("torch.cuda.Event.elapsed_time", "GPU timing cannot be predicted on a CPU")
        raise RuntimeError("syncguard.predict: Event.elapsed_time() needs a GPU (GPU timing "
                           "cannot be predicted on a CPU)")


_local = threading.local()


def _current() -> FakeStream:
    if getattr(_local, "stream", None) is None:
        _local.stream = _DEFAULT
    return _local.stream


_DEFAULT = FakeStream()


@contextlib.contextmanager
def _stream(stream: FakeStream | None):
    before = _current()
    _local.stream = stream if stream is not None else before
    try:
        yield stream
    finally:
        _local.stream = before


def _synchronize(device: Any = None) -> None:
    _ordinal(device)
    _decide("torch.cuda.synchronize")


def _current_stream(device: Any = None) -> FakeStream:
    _stream_device(device)
    return _current()


def _default_stream(device: Any = None) -> FakeStream:
    _stream_device(device)
    return _DEFAULT


def _set_stream(stream: FakeStream) -> None:
    _local.stream = stream


def _empty_cache() -> None:
    _decide("torch.cuda.empty_cache", {"cached_free": FREES.take() > 0})


def _get_rng_state(device: Any = "cuda") -> Any:
    """The state comes back as a host ByteTensor, as on a GPU (but the stand-ins' CPU
    generator's, see rng.py); whether reading it waits is the table's answer (a run measured
    it)."""
    _decide("torch.cuda.get_rng_state")
    return rng.GENERATOR.get_state()


def _set_rng_state(new_state: Any, device: Any = "cuda") -> None:
    _decide("torch.cuda.set_rng_state")
    rng.GENERATOR.set_state(new_state)


def _manual_seed(seed: Any) -> None:
    """Seeds the stand-ins' generator (rng.py): the same seed, the same "cuda" draws here,
    though not a GPU's values."""
    rng.GENERATOR.manual_seed(int(seed))


_PROPS = SimpleNamespace(name="predicted CUDA device (syncguard)", major=9, minor=0,
                         total_memory=80 << 30, multi_processor_count=132)


def _get_device_properties(device: Any = None) -> SimpleNamespace:
    _device_id(device)
    return _PROPS


def _get_device_name(device: Any = None) -> str:
    return _get_device_properties(device).name


def _get_device_capability(device: Any = None) -> tuple[int, int]:
    props = _get_device_properties(device)
    return props.major, props.minor


def _set_device(device: Any) -> None:
    _ordinal(device)  # negative: a no-op, as in torch


def _exchange_device(device: int) -> int:
    """What ``torch.cuda.device(i)`` / ``device_of(t)`` call on entry: device 0 is the only
    one, so selecting it changes nothing; -1 is torch's "no device"; beyond: torch's error."""
    if device is None or device < 0:
        return -1
    check_ordinal(device)
    return 0


def _maybe_exchange_device(device: int) -> int:
    return -1 if device is None or device < 0 else 0


def _mem_get_info(device: Any = None) -> tuple[int, int]:
    """cudaMemGetInfo, a CUDA runtime call no committed run measured: the table answers "not
    predicted" (unless a later run measures it); the answer is a plausible idle device."""
    _ordinal(device)
    _decide("torch.cuda.mem_get_info")
    return _PROPS.total_memory, _PROPS.total_memory


def _memory_stats(device: Any = None) -> dict:
    """The caching allocator's counters (host-side bookkeeping, no CUDA call): nothing is
    allocated on a device here, so every statistic reads 0 (torch.cuda.memory's own
    memory_allocated and kin read them from here)."""
    _stats_device(device)
    return collections.defaultdict(int)


def _memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    index = _stats_device(device)
    rule = "=" * 75
    return (f"|{rule}|\n| PyTorch CUDA memory summary, device ID {index}: predicted by syncguard "
            f"on a CPU, no device memory is allocated |\n|{rule}|\n")


def _zero(device: Any = None) -> int:
    _stats_device(device)
    return 0


def _reset(device: Any = None) -> None:
    _stats_device(device)


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


# ---------------------------------------------------------------------------------------------
# NVTX: host-side markers for a profiler, no device work. What torch answers on a GPU with no
# profiler attached (seen on an H200, torch 2.11): push/pop -2, range_start 0, mark None.

_NVTX = SimpleNamespace(
    rangePushA=lambda msg: -2, rangePop=lambda: -2, markA=lambda msg: None,
    rangeStartA=lambda msg: 0, rangeEnd=lambda range_id: None,
    deviceRangeStart=lambda msg, stream=0: None,
    deviceRangeEnd=lambda handle, stream=0: None)


def _seed() -> None:
    rng.GENERATOR.seed()


#: name in torch.cuda -> stand-in; everything else in torch.cuda is left as it is.
SHIMMED: dict[str, Any] = {
    "is_available": lambda: True,
    "is_initialized": lambda: True,
    "_lazy_init": lambda: None,
    "init": lambda: None,
    "device_count": lambda: DEVICE_COUNT,
    "current_device": lambda: 0,
    "set_device": _set_device,
    "_exchange_device": _exchange_device,
    "_maybe_exchange_device": _maybe_exchange_device,
    "synchronize": _synchronize,
    "empty_cache": _empty_cache,
    "Stream": FakeStream,
    "Event": FakeEvent,
    "current_stream": _current_stream,
    "default_stream": _default_stream,
    "set_stream": _set_stream,
    "stream": _stream,
    "get_device_name": _get_device_name,
    "get_device_capability": _get_device_capability,
    "get_device_properties": _get_device_properties,
    "is_bf16_supported": lambda *a, **k: True,
    "manual_seed": _manual_seed,
    "manual_seed_all": _manual_seed,
    "seed": _seed,
    "seed_all": _seed,
    "initial_seed": lambda: rng.GENERATOR.initial_seed(),  # the stand-ins' generator
    "get_rng_state": _get_rng_state,
    "set_rng_state": _set_rng_state,
    "get_rng_state_all": lambda: [_get_rng_state(i) for i in range(DEVICE_COUNT)],
    "set_rng_state_all": lambda new_states: [_set_rng_state(s) for s in new_states] and None,
    "mem_get_info": _mem_get_info,
    "memory_stats": _memory_stats,
    "memory_summary": _memory_summary,
    "memory_allocated": _zero,
    "max_memory_allocated": _zero,
    "memory_reserved": _zero,
    "max_memory_reserved": _zero,
    "reset_peak_memory_stats": _reset,
    "reset_accumulated_memory_stats": _reset,
    "CUDAGraph": FakeCUDAGraph,
    "graph": _GraphContext,
    "graph_pool_handle": lambda: (0, next(_pool_ids)),
    "is_current_stream_capturing": lambda: _current().capturing,
    "make_graphed_callables": _make_graphed_callables,
}

#: the same stand-ins in torch.cuda.memory, where torch.cuda's own functions (memory_allocated
#: and kin read memory_stats) and code calling the module directly look them up
MEMORY_SHIMMED: dict[str, Any] = {
    "memory_stats": _memory_stats,
    "memory_summary": _memory_summary,
    "mem_get_info": _mem_get_info,
}


class _DeviceIndex:
    """``torch.accelerator.device_index(i)``: device 0 is the only one."""

    def __init__(self, device: int | None, /) -> None:
        self.idx = device

    def __enter__(self) -> None:
        if self.idx is not None:
            _exchange_device(self.idx)

    def __exit__(self, *exc: object) -> bool:
        return False


def _acc_synchronize(device: Any = None, /) -> None:
    """torch.accelerator.synchronize on CUDA is the device synchronize torch.cuda.synchronize
    makes (cudaDeviceSynchronize): the same measured rule answers."""
    _synchronize(device)


def _acc_empty_host_cache() -> None:
    _decide("torch.accelerator.empty_host_cache")  # cudaFreeHost of cached blocks: unmeasured


def _acc_get_device_capability(device: Any = None, /) -> dict:
    """``torch.accelerator.get_device_capability`` (a dict of supported dtypes, not
    torch.cuda's (major, minor)). On CUDA it reaches the device guard's getDeviceCapability,
    which CUDA's guard does not override (c10/cuda/impl/CUDAGuardImpl.h), so a GPU raises c10's
    default error, for device 1 of a one-GPU machine too (measured on the H200 with torch 2.11.0
    and 2.14.1: reports/gpu/<v>/device-apis-<v>.log). The device is parsed first, by
    torch.accelerator's own parser, as torch does (a "cpu" device raises its ValueError)."""
    from torch.accelerator._utils import _get_device_index

    _get_device_index(device, optional=True)
    raise RuntimeError("Backend doesn't support getting device capabilities.")


#: name in torch.accelerator -> stand-in, agreeing with the shimmed torch.cuda (only the names
#: this torch has are swapped)
ACCELERATOR_SHIMMED: dict[str, Any] = {
    "is_available": lambda: True,
    "current_accelerator": lambda check_available=False: torch.device("cuda"),
    "device_count": lambda: DEVICE_COUNT,
    "current_device_index": lambda: 0,
    "current_device_idx": lambda: 0,
    "set_device_index": lambda device, /: _set_device(device),
    "set_device_idx": lambda device, /: _set_device(device),
    "device_index": _DeviceIndex,
    "current_stream": lambda device=None, /: _current_stream(device),
    "set_stream": _set_stream,
    "synchronize": _acc_synchronize,
    "empty_cache": _empty_cache,
    "empty_host_cache": _acc_empty_host_cache,
    "get_device_capability": _acc_get_device_capability,
    "get_memory_info": lambda device=None, /: _mem_get_info(device),
    "memory_stats": lambda device=None, /: _memory_stats(device),
    "memory_allocated": lambda device=None, /: _zero(device),
    "max_memory_allocated": lambda device=None, /: _zero(device),
    "memory_reserved": lambda device=None, /: _zero(device),
    "max_memory_reserved": lambda device=None, /: _zero(device),
    "reset_peak_memory_stats": lambda device=None, /: _reset(device),
    "reset_accumulated_memory_stats": lambda device=None, /: _reset(device),
    "Graph": FakeCUDAGraph,
}


def _pinning(original: Any) -> Any:
    """The DataLoader's pin-memory thread (started by a loader made while the shim is
    installed): pinned as inside a block, where a CPU build cannot pin at all, and inside for
    the swapped names too (the loop selects the device with ``torch.accelerator``)."""
    from syncguard.predict.modes import PinningMode

    @functools.wraps(original)
    def loop(*args: Any, **kwargs: Any) -> Any:
        ident = threading.get_ident()
        _pin_threads.add(ident)
        try:
            with PinningMode():
                return original(*args, **kwargs)
        finally:
            _pin_threads.discard(ident)

    return loop


def _generator_class():
    """``torch.Generator`` that gives a CPU generator for ``device="cuda"`` inside a block;
    instances stay real ``torch.Generator`` objects and ``isinstance`` keeps working."""
    import torch

    orig = torch._C.Generator

    class _Meta(type(orig)):
        def __call__(cls, device: Any = "cpu"):
            if not _inside():
                return orig(device)
            kind = getattr(device, "type", device)
            is_cuda = isinstance(kind, int) or str(kind).startswith("cuda")
            return orig("cpu") if is_cuda else orig(device)

        def __instancecheck__(cls, obj):
            return isinstance(obj, orig)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, orig)

    return _Meta("Generator", (orig,), {"__module__": "torch", "__doc__": orig.__doc__})


def _grouping(original):
    """``torch._C._group_tensors_by_device_and_dtype`` (how optimizers and clip_grad_norm_
    split their tensors) reads the C++ device, the CPU for a stand-in: the groups of stand-ins
    are keyed by the CUDA device they stand for, or the caller's ``.to(device)`` would be
    predicted as a copy to the host that a GPU never makes."""
    from syncguard.predict.tensors import is_standin

    def group(tensorlistlist, with_indices=False):
        out = original(tensorlistlist, with_indices)
        fixed = {}
        for (device, dtype), value in out.items():
            first = next((t for t in value[0][0] if t is not None), None) if value[0] else None
            if first is not None and is_standin(first):
                device = torch.device("cuda", first._sg_index)
            fixed[(device, dtype)] = value
        return fixed

    return group


def _per_thread_function(stand_in: Any, original: Any) -> Any:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if _inside():
            return stand_in(*args, **kwargs)
        return original(*args, **kwargs)

    return call


def _per_thread_class(stand_in: type, original: type) -> type:
    """A subclass of ``stand_in`` whose calls make a stand-in inside a block and torch's own
    object outside; ``isinstance``/``issubclass`` hold for both (code outside may be handed a
    stand-in stream, and code inside checks ``isinstance(g, torch.cuda.CUDAGraph)``). A user's
    subclass of it is left to the usual rules."""

    class PerThread(type(stand_in)):
        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            if cls is not swapped:
                return super().__call__(*args, **kwargs)
            return (stand_in if _inside() else original)(*args, **kwargs)

        def __instancecheck__(cls, obj: Any) -> bool:
            if cls is not swapped:
                return super().__instancecheck__(obj)
            return isinstance(obj, stand_in) or isinstance(obj, original)

        def __subclasscheck__(cls, sub: type) -> bool:
            if cls is not swapped:
                return super().__subclasscheck__(sub)
            return issubclass(sub, stand_in) or issubclass(sub, original)

    swapped = PerThread(stand_in.__name__, (stand_in,),
                        {"__module__": stand_in.__module__, "__doc__": stand_in.__doc__,
                         "__qualname__": stand_in.__qualname__})
    return swapped


def _per_thread(stand_in: Any, original: Any) -> Any:
    """``stand_in`` for the threads inside a block, ``original`` (torch's own) for the others
    (see ``_inside``): a function, a class, or a namespace of functions (torch.cuda.nvtx's
    ``_nvtx``). A name torch lacks has no answer of its own to give: the stand-in stays."""
    if original is _MISSING:
        return stand_in
    if isinstance(stand_in, type):
        return _per_thread_class(stand_in, original)
    if callable(stand_in):
        return _per_thread_function(stand_in, original)
    return SimpleNamespace(**{
        name: _per_thread(fn, getattr(original, name, _MISSING))
        for name, fn in vars(stand_in).items()})


def _answering_per_thread(module: Any, table: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    return module, {name: _per_thread(value, vars(module).get(name, _MISSING))
                    for name, value in table.items()}


AUTOCAST_WHY = ("CUDA autocast: the stand-ins run CPU kernels, which CUDA autocast does not "
                "reach, so ops inside keep the dtypes they would have without it where a GPU "
                "runs them in {dtype}; the region's dtypes, and what depends on them, differ "
                "from a GPU run")


def _autocast_enter(original: Any) -> Any:
    """``torch.autocast("cuda")`` (and ``torch.cuda.amp.autocast``, a subclass) entered: runs
    as it is, reported "not predicted". Mapping it to CPU autocast would not be CUDA's
    behaviour either: the two cast different op lists (and CPU autocast knows no float16 for
    some ops), so the dtypes would still differ from a GPU's, only less visibly."""

    @functools.wraps(original)
    def enter(self: Any) -> Any:
        if getattr(self, "device", None) == "cuda" and getattr(self, "_enabled", False):
            dtype = str(getattr(self, "fast_dtype", None)).replace("torch.", "")
            _cannot("torch.autocast", AUTOCAST_WHY.format(dtype=dtype))
        return original(self)

    return enter


_AUTOCAST_MODE = os.path.join("torch", "amp", "autocast_mode.py")


def _set_autocast_enabled(original: Any) -> Any:
    """``torch.set_autocast_enabled`` called directly: turning CUDA autocast on does to the
    stand-ins what ``torch.autocast("cuda")`` does (nothing, where a GPU changes dtypes), so a
    thread inside a block is told the same "not predicted" (``AUTOCAST_WHY``). This torch takes
    ``(device_type, enabled)`` and the legacy ``(enabled)``, which means CUDA. Calls from
    torch's autocast class are left to ``_autocast_enter`` (its ``__enter__`` sets the flag, and
    its ``__exit__`` restores a state already reported), CPU autocast and turning it off are no
    CUDA autocast, and other threads get torch's own function unchanged."""

    @functools.wraps(original)
    def set_enabled(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)  # torch's own checks and errors first
        if _inside() and not sys._getframe(1).f_code.co_filename.endswith(_AUTOCAST_MODE):
            if args and isinstance(args[0], str):
                device, rest = args[0], args[1:]
            else:
                device, rest = kwargs.get("device_type", "cuda"), args
            enabled = rest[0] if rest else kwargs.get("enabled")
            if device == "cuda" and enabled:
                dtype = str(torch.get_autocast_dtype("cuda")).replace("torch.", "")
                _cannot("torch.set_autocast_enabled", AUTOCAST_WHY.format(dtype=dtype))
        return out

    return set_enabled


def _targets() -> list[tuple[Any, dict[str, Any]]]:
    """Each module the shim swaps names in, with its stand-ins (built at install: some wrap
    what they replace). The device APIs answer per thread (``_per_thread``); the pin loop runs
    on a thread of its own, inside by its own rule; ``torch.Generator``, ``torch.compile``,
    ``torch.load``'s restore location and a storage's move to CUDA ask ``_inside`` themselves
    (``torch._utils._rebuild_tensor`` changes only tensors on storages a block's ``torch.load``
    restored to CUDA); the grouping
    only relabels stand-ins, which torch's own grouping cannot tell from CPU tensors, and
    ``Module._apply``'s subclass question answers differently only for stand-ins, so both are
    the same for every thread."""
    import torch.cuda.memory
    import torch.cuda.nvtx
    import torch.utils.data._utils.pin_memory as pin

    out = [_answering_per_thread(torch.cuda, SHIMMED),
           _answering_per_thread(torch.cuda.memory, MEMORY_SHIMMED),
           _answering_per_thread(torch.cuda.nvtx, {"_nvtx": _NVTX})]
    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        out.append(_answering_per_thread(
            acc, {k: v for k, v in ACCELERATOR_SHIMMED.items() if hasattr(acc, k)}))
    out.append((pin, {"_pin_memory_loop": _pinning(pin._pin_memory_loop)}))
    import torch.serialization as serialization

    out.append((torch, {"Generator": _generator_class(), "compile": _compile(torch.compile),
                        "save": saving(torch.save)}))
    out.append((serialization, {"default_restore_location": restoring(
        serialization.default_restore_location, _inside)}))
    out.append((torch._utils, {"_rebuild_tensor": rebuilding(torch._utils._rebuild_tensor)}))
    out.append((torch.storage, {"_to": moving(torch.storage._to, _inside)}))
    import torch.nn.modules.module as module

    out.append((module, {"is_traceable_wrapper_subclass": swapping(
        module.is_traceable_wrapper_subclass)}))
    autocast = torch.amp.autocast_mode.autocast
    out.append((autocast, {"__enter__": _autocast_enter(autocast.__enter__)}))
    out.append((torch, {"set_autocast_enabled": _set_autocast_enabled(
        torch.set_autocast_enabled)}))
    out.append((torch._C, {"_group_tensors_by_device_and_dtype": _grouping(
        torch._C._group_tensors_by_device_and_dtype)}))
    return out


_lock = threading.Lock()
_depth = 0
_saved: list[tuple[Any, str, Any]] = []  # (module, name, what it held or _MISSING)
_saved_state: dict[str, Any] = {}  # process-wide settings other than names (install())
INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"
_MISSING = object()


def install() -> None:
    """Swap the names in (reference-counted: nested and concurrent blocks share one swap)."""
    global _depth

    with _lock:
        _depth += 1
        if _depth > 1:
            return
        try:
            for module, table in _targets():
                for name, value in table.items():
                    _saved.append((module, name, vars(module).get(name, _MISSING)))
                    setattr(module, name, value)
        except BaseException:
            _restore_names()
            _depth -= 1
            raise
        # Process-wide state, saved with the names (first install) and put back with them (last
        # uninstall): per block, one thread's exit undid it under another thread's open block.
        # torch sets INDUCTOR_CACHE while a function mode first imports torch._dynamo, and every
        # subprocess the program starts afterwards would inherit it.
        _saved_state["env"] = os.environ.get(INDUCTOR_CACHE)


def _restore_names() -> None:
    """Put every swapped name back, last swapped first (a name absent before is removed)."""
    while _saved:
        module, name, value = _saved.pop()
        if value is _MISSING:
            vars(module).pop(name, None)
        else:
            setattr(module, name, value)


def uninstall() -> None:
    global _depth

    with _lock:
        _depth -= 1
        if _depth > 0:
            return
        _restore_names()
        env = _saved_state.pop("env")
        if env is None:
            os.environ.pop(INDUCTOR_CACHE, None)
        else:
            os.environ[INDUCTOR_CACHE] = env
