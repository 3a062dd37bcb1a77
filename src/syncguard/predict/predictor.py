"""The predictor of one ``predicting()`` block, and the stack of active predictors per thread.

A :class:`Predictor` asks the rules table about each op a stand-in took part in and keeps what
it predicted (events), what it could not (unmodelled) and every call it saw (observations, from
which rules are derived). ``decide``/``cannot`` reach the calling thread's innermost block.
"""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from syncguard.predict.rules import RuleTable, Verdict
from syncguard.predict.site import user_site
from syncguard.records.events import SyncEvent

__all__ = ["Predictor", "Unmodelled", "Observation", "active", "decide", "cannot", "push", "pop",
           "everyone"]

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


def everyone() -> list[Predictor]:
    """Every open predictor, on every thread."""
    with _lock:
        return [p for stack in _active.values() for p in stack]


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
