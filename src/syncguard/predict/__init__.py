"""Sync prediction on a machine without a GPU.

CUDA code runs unchanged on the CPU: tensors created on (or moved to) ``"cuda"`` become CPU
tensors labelled as CUDA tensors, ``torch.cuda`` answers as one GPU would, and every call that
would make the host wait on a real GPU is reported as a *predicted* ``SyncEvent``
(``detectors=("predict",)``, the user's line, a note naming the torch version whose measured
rules were used)::

    from syncguard.predict import predicting

    with predicting() as prediction:
        x = torch.randn(8, device="cuda")
        x.sum().item()                      # predicted: blocking_copy_d2h at this line
    print(prediction.format())

What it cannot see is listed in ``prediction.unmodelled`` ("not predicted (why)"), never
counted as clean. See ``rules.py`` for how the table is keyed and versioned.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Iterator

import torch

from syncguard.records.events import Report, SyncError, SyncEvent
from syncguard.predict import shim
from syncguard.predict.predictor import DETECTOR, Observation, Predictor, Unmodelled, pop, push
from syncguard.predict.modes import PredictDispatchMode, PredictFunctionMode
from syncguard.predict.rules import RuleTable, load_rules
from syncguard.predict.tensors import CudaStandIn

__all__ = ["predicting", "predicted", "session_active", "Prediction", "Unmodelled", "CudaStandIn", "DETECTOR",
           "region_report"]


@dataclass
class Prediction:
    """What one ``predicting()`` block predicted (filled as it runs, complete on exit)."""

    target: str  # the torch version predicted for
    syncs: list[SyncEvent] = field(default_factory=list)
    unmodelled: list[Unmodelled] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    contexts: list = field(default_factory=list)  # on_event's return value per event

    @property
    def rules_versions(self) -> list[str]:
        """The measured torch versions whose rules the events used."""
        seen = []
        for e in self.syncs:
            v = (e.note or "").split("rules of torch ")[-1].split(" ")[0]
            if v and v not in seen:
                seen.append(v)
        return seen

    @property
    def clean(self) -> bool:
        """True only when nothing is predicted to sync AND everything was modelled."""
        return not self.syncs and not self.unmodelled

    def summary(self) -> str:
        parts = []
        if self.syncs:
            kinds = sorted({e.kind for e in self.syncs})
            parts.append(f"{len(self.syncs)} predicted sync(s) ({', '.join(kinds)})")
        if self.unmodelled:
            parts.append(f"{len(self.unmodelled)} call(s) not predicted")
        return "; ".join(parts) or "predicted clean"

    def format(self) -> str:
        lines = [f"syncguard predict (torch {self.target}): {self.summary()}"]
        for e in self.syncs:
            lines.append(f"  predicted {e.kind}: {e.op} at {e.where} in {e.function} [{e.note}]")
        for u in self.unmodelled:
            lines.append(f"  {u}")
        return "\n".join(lines)

    def raise_if_syncs(self) -> None:
        """Fail like ``syncguard.forbid()`` when a sync is predicted (what a CPU CI gate calls);
        calls that were not predicted are in the message, but alone they do not fail."""
        if self.syncs:
            raise SyncError(self.to_report(), self.format())

    def to_report(self) -> Report:
        """As a syncguard Report: events labelled ``predict``; the not-predicted calls are
        notes and the report's reason, so a reader never takes them for clean."""
        notes = [f"predicted on a CPU with rules measured on a GPU, for torch {self.target}"]
        notes += [str(u) for u in self.unmodelled]
        reason = (f"not predicted ({len(self.unmodelled)} call(s) the predictor cannot model)"
                  if self.unmodelled else None)
        return Report(syncs=list(self.syncs), detectors=(DETECTOR,), cuda_available=True,
                      reason=reason, notes=notes)


def _new(torch_version, rules, on_event) -> tuple[Predictor, Prediction]:
    table = rules if isinstance(rules, RuleTable) else load_rules(rules)
    predictor = Predictor(table, torch_version or torch.__version__, on_event=on_event)
    return predictor, Prediction(predictor.target, predictor.syncs, predictor.unmodelled,
                                 predictor.observations, predictor.contexts)


def session_active() -> bool:
    """Whether a ``predicting()`` block is open on this thread."""
    from syncguard.predict.predictor import active

    return active() is not None


@contextlib.contextmanager
def predicting(torch_version: str | None = None, *, rules: RuleTable | str | None = None,
               on_event=None) -> Iterator[Prediction]:
    """Run the block with CUDA stand-ins and predict its syncs.

    ``torch_version``: the torch whose GPU behaviour to predict (default: the running one); the
    rules of the nearest measured version are used and named on every event. ``rules``: a
    table or a path (default: the packaged table). ``on_event``: called with each predicted
    event as it happens (its return value is kept in ``Prediction.contexts``). Works on any build of torch; on a CUDA
    build it still predicts (tensors stay on the CPU), which is how it is calibrated.
    """
    from syncguard.predict.predictor import active

    predictor, prediction = _new(torch_version, rules, on_event)
    if active() is not None:
        # nested in an open block on this thread: its shim and modes already run this code;
        # a second pair would run every call twice over, so the inner block only collects
        push(predictor)
        try:
            yield prediction
        finally:
            pop(predictor)
        return
    push(predictor)
    # the torch.cuda names, and process-wide settings with them (shim.install), reference-
    # counted: overlapping blocks on other threads keep them until the last one closes
    shim.install()
    try:
        with PredictFunctionMode(predictor), PredictDispatchMode(predictor):
            yield prediction
    finally:
        shim.uninstall()
        pop(predictor)


@contextlib.contextmanager
def predicted(torch_version: str | None = None, *, rules: RuleTable | str | None = None,
              on_event=None) -> Iterator[Prediction]:
    """A region inside an open ``predicting()`` block on this thread: what runs inside is
    recorded here instead of in the block (the plugin opens the block for the whole session, so
    that collection already sees ``torch.cuda.is_available()``, and one region per test)."""
    from syncguard.predict.predictor import _active

    stack = _active.get(threading.get_ident())
    if not stack:
        raise RuntimeError("predicted() needs an enclosing predicting() block on this thread")
    # a region predicts for the torch its block predicts for (--syncguard-predict-torch)
    predictor, prediction = _new(torch_version or stack[0].target, rules, on_event)
    push(predictor)
    try:
        yield prediction
    finally:
        pop(predictor)


def region_report(fn, *args, torch_version: str | None = None, **kwargs) -> Report:
    """Call ``fn`` under prediction and return its Report (the integrator's entry point for
    ``syncguard.audit(predict=True)``-style use)."""
    with predicting(torch_version) as prediction:
        fn(*args, **kwargs)
    return prediction.to_report()
