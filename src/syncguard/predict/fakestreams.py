"""The stand-ins for CUDA streams and events, the current stream, and ``synchronize``: plain
Python in torch.cuda, never tensor ops, so the shim answers them and decides the waits."""
from __future__ import annotations

import contextlib
import threading
from types import SimpleNamespace
from typing import Any

from syncguard.predict.devices import DEVICE_COUNT, check_ordinal
from syncguard.predict.predictor import active
from syncguard.predict.predictor import decide as _decide


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
