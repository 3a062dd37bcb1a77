"""Weaker-detector marks: which tests were judged by less than they asked for, and why.

A test's region can run with weaker detectors than its session (or its marker) asked for: ``auto``
or ``cuda`` asked, and the cuda detector could not subscribe (a profiler or another CUPTI tool
held CUPTI), so the region fell back to ``debug,trace``, which miss C++-issued syncs and guess
copy directions. A clean result from such a region proves less than it reads. The test's record
then carries ``weaker``, ``{"detectors": what ran, "reason": why}``, and the terminal summary and
every ``syncguard report`` format mark it (:func:`mark`).
"""
from __future__ import annotations

from typing import Iterable, Mapping

from syncguard.detectors import AUTO, FALLBACK
from syncguard.records.events import RegionReport

#: detectors that are modes of their own rather than a strength: a region that ran them ran
#: what it asked for (a prediction, the plumbing tests' fake)
_MODES = ("predict", "fake")


def expected(asked: Iterable[str]) -> tuple[str, ...]:
    """The detectors ``asked`` stands for where every one can run: ``auto`` is the cuda
    detector, or beside ``profile`` (which holds CUPTI itself) the fallback, as
    :func:`syncguard.detectors.resolve` chooses when CUPTI is free."""
    asked = tuple(asked)
    if AUTO not in asked:
        return asked
    rest = tuple(n for n in asked if n != AUTO)
    return tuple(dict.fromkeys((FALLBACK if "profile" in rest else ("cuda",)) + rest))


def weaker_mark(asked: Iterable[str], report: RegionReport, lent: str | None = None
                ) -> dict[str, str] | None:
    """``{"detectors": ..., "reason": ...}`` when ``report``'s region ran without a detector
    that ``asked`` stands for, else None. The reason is the region's own: its note for a
    detector that failed to arm, else its detector reason without the names it starts with.
    ``lent``: the cuda detector's ``weaker`` when the region exited (None: CUPTI was its own);
    a region that armed the cuda detector and then lent CUPTI to a profiler started inside it
    ran the rest with sync-debug mode only, and is marked with that reason."""
    ran = tuple(n for n in report.detectors if n != "races")
    if not ran or any(n in _MODES for n in ran):
        return None
    if lent and "cuda" in ran and "cuda" in expected(asked):
        return {"detectors": f"{','.join(ran)}, then debug", "reason": lent}
    # the cuda detector sees every sync the fallback's detectors see: it stands in for them
    missing = [n for n in expected(asked) if n not in ran and n not in _MODES
               and not (n in FALLBACK and "cuda" in ran)]
    if not missing:
        return None
    names = ",".join(ran)
    reasons = []
    for n in missing:
        note = next((x for x in report.notes if x.startswith(f"{n} detector not used: ")), None)
        if note is not None:
            reasons.append(note)
    if not reasons:
        why = report.detector_reason or f"{', '.join(missing)} not run"
        reasons.append(why[len(names) + 2:] if why.startswith(f"{names}: ") else why)
    return {"detectors": names, "reason": "; ".join(reasons)}


def mark(weaker: Mapping[str, str] | None) -> str:
    """The mark a marked test's row carries, or "" (e.g. ``[weaker: debug,trace]``)."""
    return f"[weaker: {weaker['detectors']}]" if weaker else ""


def summary_line(weakers: Iterable[Mapping[str, str] | None]) -> str | None:
    """The terminal summary's one line for the marked tests: how many, and each reason with
    how many tests gave it; None when no test is marked."""
    counts: dict[str, int] = {}
    for w in weakers:
        if w:
            key = f"{w['detectors']} ({w['reason']})"
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return None
    n = sum(counts.values())
    whys = "; ".join(f"{k} x{c}" if c > 1 else k for k, c in sorted(counts.items()))
    return (f"WEAKER DETECTORS: {n} test(s) judged by weaker detectors than asked for, "
            f"marked [weaker: ...]: {whys}")
