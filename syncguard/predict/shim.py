"""A ``torch.cuda`` stand-in for CPU builds: the names CUDA code calls, answering as one GPU
would, and reporting the calls that make the host wait.

Streams, events and ``synchronize`` are plain Python in torch.cuda, never tensor ops, so no
torch mode sees them; like ``syncguard.cpupath`` the shim swaps the module's names for the
block's duration and restores them on every exit path. Code that bound a name before the block
(``from torch.cuda import Stream``) keeps the real one and is not seen.
"""
from __future__ import annotations

import contextlib
import os
import threading
from types import SimpleNamespace
from typing import Any

import torch

from .engine import active
from .tensors import FREES

__all__ = ["install", "uninstall", "FakeStream", "FakeEvent", "SHIMMED"]


def _decide(op: str, facts: dict | None = None) -> None:
    p = active()
    if p is not None:
        p.decide(op, facts or {})


class FakeStream:
    """A CUDA stream that exists only as a label; work on it runs eagerly on the CPU."""

    _ids = iter(range(1, 1 << 62))

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any):
        self.stream_id = next(FakeStream._ids)
        self.device = SimpleNamespace(type="cuda", index=0)
        self.priority = priority

    def synchronize(self) -> None:
        _decide("torch.cuda.Stream.synchronize")

    def query(self) -> bool:
        return True

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
    _decide("torch.cuda.synchronize")


def _empty_cache() -> None:
    _decide("torch.cuda.empty_cache", {"cached_free": FREES.take() > 0})


def _get_rng_state(device: Any = "cuda") -> Any:
    """The state comes back as a host ByteTensor, as on a GPU; whether reading it waits is the
    table's answer (a run measured it)."""
    _decide("torch.cuda.get_rng_state")
    return torch.get_rng_state()


_PROPS = SimpleNamespace(name="predicted CUDA device (syncguard)", major=9, minor=0,
                         total_memory=80 << 30, multi_processor_count=132)

#: name in torch.cuda -> stand-in; everything else in torch.cuda is left as it is.
SHIMMED: dict[str, Any] = {
    "is_available": lambda: True,
    "is_initialized": lambda: True,
    "_lazy_init": lambda: None,
    "init": lambda: None,
    "device_count": lambda: 1,
    "current_device": lambda: 0,
    "set_device": lambda device: None,
    "synchronize": _synchronize,
    "empty_cache": _empty_cache,
    "Stream": FakeStream,
    "Event": FakeEvent,
    "current_stream": lambda device=None: _current(),
    "default_stream": lambda device=None: _DEFAULT,
    "stream": _stream,
    "get_device_name": lambda device=None: _PROPS.name,
    "get_device_capability": lambda device=None: (_PROPS.major, _PROPS.minor),
    "get_device_properties": lambda device=None: _PROPS,
    "is_bf16_supported": lambda *a, **k: True,
    "manual_seed": lambda seed: None,
    "get_rng_state": _get_rng_state,
    "set_rng_state": lambda new_state, device="cuda": _decide("torch.cuda.set_rng_state"),
    "manual_seed_all": lambda seed: None,
    "memory_allocated": lambda device=None: 0,
    "max_memory_allocated": lambda device=None: 0,
    "reset_peak_memory_stats": lambda device=None: None,
}

def _generator_class():
    """``torch.Generator`` that gives a CPU generator for ``device="cuda"``; instances stay real
    ``torch.Generator`` objects and ``isinstance`` keeps working."""
    import torch

    orig = torch._C.Generator

    class _Meta(type(orig)):
        def __call__(cls, device: Any = "cpu"):
            kind = getattr(device, "type", device)
            is_cuda = isinstance(kind, int) or str(kind).startswith("cuda")
            return orig("cpu") if is_cuda else orig(device)

        def __instancecheck__(cls, obj):
            return isinstance(obj, orig)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, orig)

    return _Meta("Generator", (orig,), {"__module__": "torch", "__doc__": orig.__doc__})


_lock = threading.Lock()
_depth = 0
_saved: dict[str, Any] = {}
_saved_torch: dict[str, Any] = {}
_saved_state: dict[str, Any] = {}  # process-wide settings other than names (install())
INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"
_MISSING = object()


def _grouping(original):
    """``torch._C._group_tensors_by_device_and_dtype`` (how optimizers and clip_grad_norm_
    split their tensors) reads the C++ device, the CPU for a stand-in: the groups of stand-ins
    are keyed by the CUDA device they stand for, or the caller's ``.to(device)`` would be
    predicted as a copy to the host that a GPU never makes."""
    from .tensors import is_standin

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


def install() -> None:
    """Swap the names in (reference-counted: nested and concurrent blocks share one swap)."""
    global _depth
    import torch.cuda as tc

    with _lock:
        _depth += 1
        if _depth > 1:
            return
        for name, value in SHIMMED.items():
            _saved[name] = tc.__dict__.get(name, _MISSING)
            setattr(tc, name, value)
        import torch

        # Process-wide state, saved with the names (first install) and put back with them (last
        # uninstall): per block, one thread's exit undid it under another thread's open block.
        # Module.cuda()/.to("cuda") must give modules new Parameters that are stand-ins (the
        # default swaps the data under the old Parameter, which a wrapper subclass cannot take);
        # torch sets INDUCTOR_CACHE while a function mode first imports torch._dynamo, and
        # every subprocess the program starts afterwards would inherit it.
        _saved_state["overwrite"] = torch.__future__.get_overwrite_module_params_on_conversion()
        _saved_state["env"] = os.environ.get(INDUCTOR_CACHE)
        torch.__future__.set_overwrite_module_params_on_conversion(True)
        _saved_torch["Generator"] = torch.Generator
        torch.Generator = _generator_class()
        _saved_torch["_C._group_tensors_by_device_and_dtype"] = \
            torch._C._group_tensors_by_device_and_dtype
        torch._C._group_tensors_by_device_and_dtype = _grouping(
            torch._C._group_tensors_by_device_and_dtype)


def uninstall() -> None:
    global _depth
    import torch.cuda as tc

    with _lock:
        _depth -= 1
        if _depth > 0:
            return
        for name, value in _saved.items():
            if value is _MISSING:
                tc.__dict__.pop(name, None)
            else:
                setattr(tc, name, value)
        _saved.clear()
        import torch

        for name, value in _saved_torch.items():
            owner, _, attr = name.rpartition(".")
            setattr(torch._C if owner == "_C" else torch, attr, value)
        _saved_torch.clear()
        torch.__future__.set_overwrite_module_params_on_conversion(_saved_state.pop("overwrite"))
        env = _saved_state.pop("env")
        if env is None:
            os.environ.pop(INDUCTOR_CACHE, None)
        else:
            os.environ[INDUCTOR_CACHE] = env
