"""Which syncs fail, by the phase of torch's work they happened in: the option's parsing and the
reason a not-failing phase's sync carries.

Why: ``torch.compile`` and CUDA-graph capture sync while they trace, compile or warm up. That cost
is paid once, on the first call, and says nothing about the steady state a region guards. So by
default a sync whose event carries ``phase="compile"`` or ``phase="graph_capture"`` is shown (with
the user's line and a hint) but does not fail; ``fail_on_phases=`` (the library) and
``--syncguard-fail-on-phase`` (the plugin, which passes it to the regions it opens) name the
phases that should fail too. Syncs in the ``run`` phase always count. The judging itself happens
in one place, the region (:func:`syncguard.regions.region.judge`).
"""
from __future__ import annotations

from typing import Any

from syncguard.attribution.frames import PHASES, RUN
from syncguard.attribution.codescope import split_names

OPTIONAL = tuple(p for p in PHASES if p != RUN)  # the phases fail_on_phases may name


def parse_phases(value: Any, where: str = "fail_on_phases") -> tuple[str, ...]:
    """'compile,graph_capture' (or a sequence; 'none' or '' for no phase) -> a tuple."""
    items = list(dict.fromkeys(split_names(value, where)))
    if items == ["none"]:
        return ()
    bad = [x for x in items if x not in OPTIONAL]
    if bad:
        raise ValueError(f"{where}: unknown phase(s) {bad}; choose from {', '.join(OPTIONAL)} "
                         f"(syncs in the {RUN!r} phase always fail)")
    return tuple(items)


def fails(phase: str, fail_on: tuple[str, ...]) -> bool:
    return phase == RUN or phase in fail_on


def not_failing_reason(phase: str) -> str:
    return (f"made during {phase.replace('_', ' ')}, not in steady state: shown, not failing "
            f"(fail_on_phases=('{phase}',) or --syncguard-fail-on-phase={phase} makes it fail)")
