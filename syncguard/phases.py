"""Which syncs fail a test, by the phase of torch's work they happened in.

Why: ``torch.compile`` and CUDA-graph capture sync while they trace, compile or warm up. That cost
is paid once, on the first call, and says nothing about the steady state a test guards. So by
default a sync whose event carries ``phase="compile"`` or ``phase="graph_capture"`` is shown (with
the user's line and a hint) but does not fail the test; ``--syncguard-fail-on-phase`` names the
phases that should fail too. Syncs in the ``run`` phase always count.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .events import RegionReport

RUN = "run"
PHASES = (RUN, "compile", "graph_capture")
OPTIONAL = PHASES[1:]  # the phases --syncguard-fail-on-phase may name


def parse_phases(value: Any, where: str) -> tuple[str, ...]:
    """'compile,graph_capture' (or a sequence; 'none' or '' for no phase) -> a tuple."""
    items = [x.strip() for x in value.split(",")] if isinstance(value, str) else list(value)
    items = [x for x in dict.fromkeys(items) if x]
    if items == ["none"]:
        return ()
    bad = [x for x in items if x not in OPTIONAL]
    if bad:
        raise ValueError(f"{where}: unknown phase(s) {bad}; choose from {', '.join(OPTIONAL)} "
                         f"(syncs in the {RUN!r} phase always fail)")
    return tuple(items)


def not_failing_reason(phase: str) -> str:
    return (f"{phase} phase: shown, not failing (--syncguard-fail-on-phase={phase} makes it fail)")


def judged(report: RegionReport, fail_on: tuple[str, ...]) -> RegionReport:
    """``report`` with the syncs of phases that do not fail moved to ``allowed``, with a reason.

    Moved, not dropped: the session report, the matrix and the terminal summary still show them,
    and a baseline counts them like any allowed sync.
    """
    keep = [e for e in report.syncs if e.phase == RUN or e.phase in fail_on]
    if len(keep) == len(report.syncs):
        return report
    moved = [dataclasses.replace(e, reason=not_failing_reason(e.phase))
             for e in report.syncs if not (e.phase == RUN or e.phase in fail_on)]
    return dataclasses.replace(report, syncs=keep, allowed=list(report.allowed) + moved)
