"""CPU-path audit: flag CUDA-only requests made by code that is meant to run without CUDA.

On a machine without CUDA, batching code must not ask for pinned memory (``pin_memory=True``,
``Tensor.pin_memory()``), nor use CUDA streams and events (``torch.cuda.Stream``,
``torch.cuda.Event``, ``torch.cuda.stream()``, ``torch.cuda.current_stream()``,
``Tensor.record_stream``). On a CPU-only build those calls raise; on a CUDA machine running the
CPU path they silently waste page-locked memory or touch a device nobody asked for. Both are
bugs of the same line, and this audit names it (``file:line`` of the user's call) either way::

    from syncguard.cpupath import cpu_path_audit

    with cpu_path_audit() as report:
        batch = batch_fields(items, device="cpu")
    assert report.clean, report.format()

How it sees the calls:

* Tensor factories' ``pin_memory=True`` and ``Tensor.pin_memory`` / ``Tensor.record_stream``
  are torch functions, so a ``TorchFunctionMode`` sees them with their arguments as the user
  wrote them — and never sees pinning torch does internally (e.g. index_put's own pinned
  index copy on torch >= 2.9), which is not the user's request.
* ``torch.cuda.Stream``/``Event``/``stream``/``current_stream`` are plain Python classes and
  functions, not tensor operations: neither a function mode nor a dispatch mode ever sees them.
  So the audit temporarily replaces those names in ``torch.cuda`` with recording wrappers (the
  classes keep ``isinstance`` working) and restores the originals on every exit path. Code that
  bound the names before the audit (``from torch.cuda import Stream``) is not seen.

The audit observes; it never changes what a call does (a CPU-only build still raises, after the
finding is recorded). Audits nest: an outer audit also records what inner ones see. Like torch's
function modes, an audit sees the thread that opened it, not threads that thread starts.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

from syncguard.attribution.frames import user_frame

__all__ = ["CpuPathFinding", "CpuPathReport", "cpu_path_audit", "WRAPPED_NAMES"]

#: The ``torch.cuda`` names wrapped while an audit is active.
WRAPPED_NAMES = ("Stream", "Event", "stream", "current_stream")
_TENSOR_METHODS = {"pin_memory": "Tensor.pin_memory()", "record_stream": "Tensor.record_stream()"}



@dataclass(frozen=True)
class CpuPathFinding:
    """One CUDA-only request on the CPU path, at the user's line."""

    api: str  # e.g. "torch.empty(pin_memory=True)", "torch.cuda.Stream()"
    what: str  # why it is flagged, in words
    filename: str | None = None
    lineno: int | None = None
    function: str | None = None

    @property
    def where(self) -> str:
        return f"{self.filename}:{self.lineno}" if self.filename else "<unknown>"

    def __str__(self) -> str:
        return f"{self.api} at {self.where} in {self.function}: {self.what}"


@dataclass
class CpuPathReport:
    """What one ``cpu_path_audit()`` saw."""

    findings: list[CpuPathFinding] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.findings

    def format(self) -> str:
        if self.clean:
            return "cpu path: clean"
        return "\n".join([f"cpu path: {len(self.findings)} CUDA-only request(s)"]
                         + [f"  {f}" for f in self.findings])


# ---------------------------------------------------------------------------------------------
# Attribution

def _user_frame(start) -> tuple[str | None, int | None, str | None]:
    f = user_frame(start)  # one definition of "the user's frame" for all of syncguard
    return (f.f_code.co_filename, f.f_lineno, f.f_code.co_name) if f is not None else (None, None, None)


# ---------------------------------------------------------------------------------------------
# Active audits and the torch.cuda wrappers (process-global, reference-counted)

_lock = threading.RLock()
_active: list[tuple[int, CpuPathReport]] = []  # (thread id, report) per open audit
_saved: dict[str, Any] = {}  # original torch.cuda names while wrapped


_local = threading.local()  # .depth: wrapped calls in progress on this thread


@contextlib.contextmanager
def _outermost(api: str, what: str):
    """Record a wrapped call unless it comes from inside another one (``current_stream()``
    builds a ``Stream``: one request by the user, one finding)."""
    depth = getattr(_local, "depth", 0)
    if depth == 0:
        _record_global(api, what)
    _local.depth = depth + 1
    try:
        yield
    finally:
        _local.depth = depth


def _record_global(api: str, what: str) -> None:
    filename, lineno, function = _user_frame(sys._getframe(1))
    finding = CpuPathFinding(api, what, filename, lineno, function)
    me = threading.get_ident()
    with _lock:
        for thread, report in _active:
            if thread == me:  # like the function mode: only the auditing thread's calls
                report.findings.append(finding)


def _wrap_class(orig: type, label: str, what: str) -> type:
    """A stand-in for ``orig`` whose calls are recorded; instances are ``orig`` instances and
    ``isinstance(x, stand_in)`` means ``isinstance(x, orig)``, so torch's own checks still work."""

    class _Meta(type(orig)):
        def __call__(cls, *args, **kwargs):
            with _outermost(label, what):
                return orig(*args, **kwargs)

        def __instancecheck__(cls, obj):
            return isinstance(obj, orig)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, orig)

    return _Meta(orig.__name__, (orig,), {"__module__": orig.__module__,
                                          "__qualname__": orig.__qualname__,
                                          "__doc__": orig.__doc__, "_syncguard_wraps": orig})


def _wrap_function(orig, label: str, what: str):
    import functools

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        with _outermost(label, what):
            return orig(*args, **kwargs)

    wrapper._syncguard_wraps = orig
    return wrapper


_WHY = {
    "Stream": "a CUDA stream on the CPU path",
    "Event": "a CUDA event on the CPU path",
    "stream": "a CUDA stream context on the CPU path",
    "current_stream": "asks CUDA for its current stream on the CPU path",
}


def _install() -> None:
    import torch.cuda as tc

    try:
        for name in WRAPPED_NAMES:
            orig = getattr(tc, name)
            label = f"torch.cuda.{name}()"
            wrapped = (_wrap_class(orig, label, _WHY[name]) if isinstance(orig, type)
                       else _wrap_function(orig, label, _WHY[name]))
            _saved[name] = orig
            setattr(tc, name, wrapped)
    except BaseException:
        _uninstall()
        raise


def _uninstall() -> None:
    import torch.cuda as tc

    for name, orig in _saved.items():
        setattr(tc, name, orig)
    _saved.clear()


def _enter(report: CpuPathReport) -> None:
    with _lock:
        if not _active:
            _install()
        _active.append((threading.get_ident(), report))


def _leave(report: CpuPathReport) -> None:
    with _lock:
        # remove this audit even if audits were left out of order
        for i in range(len(_active) - 1, -1, -1):
            if _active[i][1] is report:
                del _active[i]
                break
        if not _active:
            _uninstall()


def _function_mode(report: CpuPathReport):
    from torch.overrides import TorchFunctionMode

    class _CpuPathMode(TorchFunctionMode):
        """Sees pin_memory=True on any torch function, and the CUDA-only Tensor methods."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            api = None
            if kwargs.get("pin_memory") is True:
                api, what = (f"{_qualname(func)}(pin_memory=True)",
                             "asks for pinned (page-locked) memory on the CPU path")
            elif name in _TENSOR_METHODS and _is_tensor_method(func):
                api = _TENSOR_METHODS[name]
                what = ("pins memory on the CPU path" if name == "pin_memory"
                        else "records a CUDA stream use on the CPU path")
            if api is not None:
                filename, lineno, function = _user_frame(sys._getframe(1))
                report.findings.append(CpuPathFinding(api, what, filename, lineno, function))
            return func(*args, **kwargs)

    return _CpuPathMode()


def _qualname(func) -> str:
    name = getattr(func, "__name__", repr(func))
    return f"Tensor.{name}" if _is_tensor_method(func) else f"torch.{name}"


def _is_tensor_method(func) -> bool:
    import torch

    name = getattr(func, "__name__", None)
    return name is not None and getattr(torch.Tensor, name, None) is func


@contextlib.contextmanager
def cpu_path_audit() -> Iterator[CpuPathReport]:
    """Record CUDA-only requests made inside the block; yields the report (filled as it goes,
    complete on exit). Never raises for a finding; check ``report.clean``."""
    report = CpuPathReport()
    mode = _function_mode(report)
    _enter(report)
    try:
        with mode:
            yield report
    finally:
        _leave(report)
