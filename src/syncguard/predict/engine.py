"""The predictor: two torch modes that let CUDA code run on the CPU and ask the rules table,
for every op that touches a CUDA stand-in, whether a GPU would have made the host wait.

Why two modes:

* a ``TorchFunctionMode`` sees calls as the user wrote them, before the Python bindings check
  devices. It rewrites ``device="cuda"`` / ``pin_memory=True`` to what a CPU build accepts, and
  implements the host<->device moves (``.to``, ``.cuda``, ``.cpu``, ``.tolist``,
  ``pin_memory``): on a stand-in whose C++ device is the CPU, C++ would treat ``.cpu()`` as a
  no-op and never dispatch it;
* a ``TorchDispatchMode`` sees every aten op (also those torch's own Python code issues while
  the function mode is paused), unwraps stand-ins, runs the CPU kernel and wraps outputs again.
  Rules are keyed by these aten ops, the names the profile detector records on the GPU.
"""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_map

from syncguard.records.events import SyncEvent
from syncguard.predict.facts import op_name
from syncguard.predict.rules import RuleTable, Verdict
from syncguard.predict.site import user_site
from syncguard.predict.tensors import is_standin, unwrap, wrap

__all__ = ["Predictor", "Unmodelled", "Observation", "dispatch_unobserved", "active"]

DETECTOR = "predict"


@dataclass(frozen=True)
class Unmodelled:
    """Something the predictor ran but cannot predict: never to be read as clean."""

    what: str
    why: str
    filename: str | None = None
    lineno: int | None = None

    @property
    def where(self) -> str:
        return f"{self.filename}:{self.lineno}" if self.filename else "<unknown>"

    def __str__(self) -> str:
        return f"not predicted ({self.why}) at {self.where}"


@dataclass(frozen=True)
class Observation:
    """One call that touched the device, with its facts and verdict (for deriving rules)."""

    op: str
    facts: tuple[tuple[str, Any], ...]
    filename: str | None
    lineno: int | None
    status: str
    device_kernel: bool = False
    #: ``file:line in function`` frames above the user's line: a call made inside the user's
    #: own helpers (cases/merge.py under a library-corpus snippet) is still at the snippet's line
    stack: tuple[str, ...] = field(default=(), compare=False)


@dataclass
class Predictor:
    """Collects predicted events for one ``predicting()`` block on one thread."""

    table: RuleTable
    target: str  # the torch version whose behaviour is predicted
    syncs: list[SyncEvent] = field(default_factory=list)
    unmodelled: list[Unmodelled] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    thread: int = field(default_factory=threading.get_ident)
    #: called with each predicted event, in the caller's context; its return value is kept
    #: beside the event (the integrator delivers events to scope's regions from here, so
    #: allow() applies to predicted syncs as to measured ones)
    on_event: Any = None
    contexts: list = field(default_factory=list)
    #: CUDA index of each call the function mode is forwarding with stand-in arguments: a
    #: factory op reached inside one takes its device from a stand-in's C++ device (the CPU),
    #: where on a GPU it would be the device (pad_sequence's output, then filled by d2d copies)
    forwarding: list = field(default_factory=list)

    def decide(self, op: str, facts: dict, *, device_kernel: bool = False) -> Verdict | None:
        if _called_by_syncguard():
            return None  # syncguard's own calls (warm-up, set-up) are not the user's syncs
        verdict = self.table.lookup(op, facts, self.target, device_kernel=device_kernel)
        site = user_site(depth=8)
        self.observations.append(Observation(op, tuple(sorted(facts.items())), site.filename,
                                             site.lineno, verdict.status, device_kernel,
                                             site.stack))
        if verdict.status == "unmodelled":
            self.unmodelled.append(Unmodelled(op, verdict.why or op, site.filename, site.lineno))
            return verdict
        for sync in verdict.syncs:
            via = sync.get("via")
            note = (f"predicted from the rules of torch {verdict.torch} measured on a GPU "
                    f"({verdict.status}: {', '.join(verdict.evidence[:2])})")
            event = SyncEvent(
                api=sync["api"], kind=sync["kind"], op=op,
                ops=(op,) if not via or via == op else (op, via),
                filename=site.filename, lineno=site.lineno, function=site.function,
                stack=site.stack, thread=threading.current_thread().name,
                detectors=(DETECTOR,), note=note)
            self.syncs.append(event)
            self.contexts.append(self.on_event(event) if self.on_event is not None else None)
        return verdict

    def cannot(self, what: str, why: str) -> None:
        site = user_site(depth=8)
        self.unmodelled.append(Unmodelled(what, why, site.filename, site.lineno))


_PREDICT_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_SYNCGUARD_DIR = os.path.dirname(_PREDICT_DIR.rstrip(os.sep)) + os.sep
_GLUE = ("contextlib.py", "functools.py", "threading.py")


def _called_by_syncguard() -> bool:
    """Whether the first caller outside torch, this package and stdlib glue is syncguard."""
    tdir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    f = sys._getframe(2)
    while f is not None:
        path = os.path.abspath(f.f_code.co_filename)
        if not (path.startswith(_PREDICT_DIR) or path.startswith(tdir)
                or os.path.basename(path) in _GLUE or f.f_code.co_filename.startswith("<")):
            return path.startswith(_SYNCGUARD_DIR)
        f = f.f_back
    return False


# ---------------------------------------------------------------------------------------------
# The active predictors (one per thread that opened a block)

_lock = threading.Lock()
_active: dict[int, list[Predictor]] = {}


def active(thread: int | None = None) -> Predictor | None:
    stack = _active.get(threading.get_ident() if thread is None else thread)
    return stack[-1] if stack else None


def decide(op: str, facts: dict | None = None) -> None:
    """The calling thread's predictor decides ``op`` (nothing outside a block)."""
    p = active()
    if p is not None:
        p.decide(op, facts or {})


def cannot(what: str, why: str) -> None:
    """The calling thread's predictor reports ``what`` "not predicted" (nothing outside a block)."""
    p = active()
    if p is not None:
        p.cannot(what, why)


def push(p: Predictor) -> None:
    with _lock:
        _active.setdefault(p.thread, []).append(p)


def pop(p: Predictor) -> None:
    with _lock:
        stack = _active.get(p.thread, [])
        if p in stack:
            stack.remove(p)
        if not stack:
            _active.pop(p.thread, None)


def dispatch_unobserved(func, args, kwargs):
    """A stand-in used where no dispatch mode is active: compute it, keep it labelled, and
    tell every open predictor it ran unseen."""
    with _lock:
        everyone = [p for stack in _active.values() for p in stack]
    for p in everyone:
        p.cannot(op_name(func), f"{op_name(func)} ran on a CUDA tensor outside the predicting "
                                "thread or block; its syncs are not predicted")
    out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
    return _rewrap(out, args, kwargs, True, 0)


# ---------------------------------------------------------------------------------------------
# Shared helpers of both modes

#: how many CUDA devices the prediction models (torch.cuda.device_count() inside a block)
DEVICE_COUNT = 1


def invalid_ordinal(index: int) -> RuntimeError:
    """What torch raises on a machine with DEVICE_COUNT GPUs when ``cuda:<index>`` is used (a
    one-GPU H200 with torch 2.11 raised ``torch.AcceleratorError``, "CUDA error: invalid device
    ordinal", then "GPU device may be out of range, do you have enough GPUs?"), in one line."""
    error = getattr(torch, "AcceleratorError", RuntimeError)
    return error(f"CUDA error: invalid device ordinal: GPU device may be out of range, do you "
                 f"have enough GPUs? (cuda:{index}; the prediction is for {DEVICE_COUNT} CUDA "
                 f"device, torch.cuda.device_count() == {DEVICE_COUNT})")


def check_ordinal(index: int | None) -> int | None:
    """``index`` when it names a device the prediction has (None and negatives pass: torch
    treats them as "no device" or rejects them itself); else raise as torch does on a GPU."""
    if index is not None and index >= DEVICE_COUNT:
        raise invalid_ordinal(index)
    return index


def cuda_index(device) -> int | None:
    """The CUDA index ``device`` names, or None when it is not a CUDA device."""
    if device is None:
        return None
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    try:
        d = torch.device(device)
    except (TypeError, RuntimeError):
        return None
    return (d.index or 0) if d.type == "cuda" else None


def _first_index(args, kwargs) -> int:
    for a in list(args) + list(kwargs.values()):
        if is_standin(a):
            return a._sg_index
        if isinstance(a, (list, tuple)):
            for x in a:
                if is_standin(x):
                    return x._sg_index
    return 0


def _rewrap(out, args, kwargs, cuda: bool, index: int):
    """Outputs that are an input's data come back as that input (in-place ops return self);
    new tensors of a CUDA call become stand-ins."""
    by_id = {}
    for a in list(args) + list(kwargs.values()):
        for x in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(x, torch.Tensor):
                by_id[id(unwrap(x))] = x

    def back(o):
        if not isinstance(o, torch.Tensor):
            return o
        if id(o) in by_id:
            return by_id[id(o)]
        return wrap(o, index) if cuda else o

    return tree_map(back, out)
