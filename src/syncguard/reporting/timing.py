"""Timings in the gate: a regression only beyond a noise band that was measured.

A test records repeated timings under ``measurements["samples"]``: for each key (``median_ms``...)
a list with one list of repetitions per process, e.g. ``{"median_ms": [[1.01, 0.99, ...],
[1.03, ...]]}``. Only samples from at least :data:`MIN_PROCESSES` processes with at least
:data:`MIN_REPS` repetitions each can be gated: a single process cannot show how much a fresh
process (allocator state, clocks, placement) moves the number. Anything less is shown in the
report and never gated.

The noise band of a set of samples is the largest relative distance of one process's median from
the median of the process medians, floored by the spread within a process: the median over the
processes of each one's median absolute deviation relative to its median. Why the floor: two
processes can land on the same median by chance (a band of 0) while each of their repetitions
moves by more; a band of 0 would then gate a change smaller than what one process's own
repetitions show to be noise. A timing regresses when its median exceeds the baseline's by
more than the threshold ``1 + 2 * (band_baseline + band_now)``, which the output states with
every comparison (the same idea as asv's ``--factor`` and pytest-benchmark's compare thresholds,
but measured instead of chosen).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

__all__ = ["MIN_PROCESSES", "MIN_REPS", "SAMPLES_KEY", "Band", "samples", "band", "threshold", "judge",
           "judge_case"]

MIN_PROCESSES = 2
MIN_REPS = 5
SAMPLES_KEY = "samples"


@dataclass(frozen=True)
class Band:
    """The median of the process medians, the measured noise band, and how it was measured."""

    median: float
    band: float  # relative to the median: a fraction, not a percentage
    processes: int
    reps: int  # the fewest repetitions of any process

    @property
    def gateable(self) -> bool:
        return self.processes >= MIN_PROCESSES and self.reps >= MIN_REPS

    def to_dict(self) -> dict[str, Any]:
        return {"median": self.median, "band": self.band, "processes": self.processes,
                "reps": self.reps}

    @classmethod
    def from_dict(cls, data: Any) -> "Band | None":
        try:
            b = cls(float(data["median"]), float(data["band"]), int(data["processes"]),
                    int(data["reps"]))
        except (TypeError, KeyError, ValueError, OverflowError):  # float(10**400): Overflow
            return None
        return b if _finite(b.median) and _finite(b.band) and b.median > 0 else None


def _finite(x: float) -> bool:
    return isinstance(x, float) and math.isfinite(x)


def samples(measurements: Mapping[str, Any]) -> dict[str, tuple[tuple[float, ...], ...]]:
    """The well-formed timing samples of a test's measurements (malformed ones are dropped:
    they are shown as recorded, and never gated)."""
    raw = measurements.get(SAMPLES_KEY) if isinstance(measurements, Mapping) else None
    out: dict[str, tuple[tuple[float, ...], ...]] = {}
    if not isinstance(raw, Mapping):
        return out
    for key, per_process in raw.items():
        if not isinstance(key, str) or not isinstance(per_process, list):
            continue
        procs = []
        for reps in per_process:
            if not isinstance(reps, list) or not reps:
                break
            values = [float(v) for v in reps if isinstance(v, (int, float))
                      and not isinstance(v, bool)]
            if len(values) != len(reps) or not all(map(math.isfinite, values)) \
                    or min(values) <= 0:
                break
            procs.append(tuple(values))
        else:
            if procs:
                out[key] = tuple(procs)
    return out


def _within(reps: tuple[float, ...]) -> float:
    """One process's spread: the median absolute deviation of its repetitions, relative to
    their median."""
    mid = statistics.median(reps)
    return statistics.median(abs(x - mid) for x in reps) / mid


def band(per_process: tuple[tuple[float, ...], ...]) -> Band:
    """The band between processes, floored by the typical spread within one (module docstring)."""
    medians = [statistics.median(reps) for reps in per_process]
    center = statistics.median(medians)
    between = max(abs(m - center) / center for m in medians)
    within = statistics.median(_within(reps) for reps in per_process)
    return Band(center, max(between, within), len(per_process), min(len(r) for r in per_process))


def threshold(base: Band, now: Band) -> float:
    """The factor beyond which ``now`` is slower than ``base``."""
    return 1.0 + 2.0 * (base.band + now.band)


def judge(key: str, base: Band, now: Band) -> tuple[bool, str]:
    """(regressed, the sentence the output prints with the numbers and the threshold)."""
    factor = threshold(base, now)
    ratio = now.median / base.median
    verdict = "slower beyond the noise band" if ratio > factor else "within the noise band"
    return ratio > factor, (
        f"{key} {now.median:.4g} vs baseline {base.median:.4g} (×{ratio:.3f}); threshold "
        f"×{factor:.3f} from measured noise ±{base.band * 100:.1f}% (baseline, "
        f"{base.processes} processes × {base.reps} reps) and ±{now.band * 100:.1f}% (now, "
        f"{now.processes} × {now.reps}): {verdict}")


def judge_case(samples: Mapping[str, tuple[tuple[float, ...], ...]], accepted: Mapping[str, Any],
               measured: Iterable[str]) -> tuple[list[str], list[str], int]:
    """(regressions, one sentence per gated timing, the count shown but not gated) of one case:
    its ``samples`` against the bands its baseline entry ``accepted``; ``measured`` names every
    value it recorded (a ``_ms`` one without samples is shown, never gated). A timing gated in
    the baseline that is no longer measured enough to gate is a regression: it must not stop
    being gated unnoticed."""
    worse, sentences, ungated = [], [], 0
    for key in sorted(set(samples) | set(accepted)):
        base = Band.from_dict(accepted.get(key))
        now = band(samples[key]) if key in samples else None
        if base is not None and base.gateable and (now is None or not now.gateable):
            worse.append(f"gated timing {key} no longer measured" + (
                "" if now is None else f" enough to gate (processes × reps: {now.processes} × "
                f"{now.reps}; gating needs {MIN_PROCESSES} × {MIN_REPS})"))
            ungated += now is not None
            continue
        if now is None:
            continue
        if base is None or not now.gateable:
            ungated += 1
            continue
        regressed, sentence = judge(key, base, now)
        sentences.append(sentence)
        if regressed:
            worse.append(f"{key} slower beyond the noise band (threshold ×{threshold(base, now):.3f})")
    ungated += sum(1 for k in measured if k.endswith("_ms") and k not in samples)
    return worse, sentences, ungated
