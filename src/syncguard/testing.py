"""A fake detector for testing syncguard's plumbing on machines without a GPU.

Regions opened with ``detectors=("fake",)`` behave as if CUDA were present; ``fake_sync()``
inside one records a sync at the caller's line exactly as a real detector's observation would
travel (same routing to regions, same allow() handling). It proves plumbing, never GPU behaviour.
"""
from __future__ import annotations

import threading

from syncguard.attribution.frames import PHASES
from syncguard.attribution.frames import user_site
from syncguard.detectors.routing import Observation
from syncguard.records.events import STREAM_SYNC, SYNC_KINDS
from syncguard.regions.region import _deliver


def marked_line(path: str, marker: str) -> int:
    """The line of ``path`` that ends with the comment ``# marker``: tests name lines by marker so
    that an expected ``file:line`` survives edits above it."""
    with open(path) as f:
        for i, text in enumerate(f, 1):
            if text.rstrip().endswith(f"# {marker}"):
                return i
    raise AssertionError(f"marker {marker!r} not in {path}")


def fake_sync(kind: str = STREAM_SYNC, api: str = "cudaStreamSynchronize",
              op: str | None = None, phase: str | None = None) -> bool:
    """Pretend the calling line synced; returns whether a region received it. ``phase`` stands in
    for the phase a real detector reads from the stack (None: read it as they do)."""
    if kind not in SYNC_KINDS:
        raise ValueError(f"fake_sync(kind=...) must be one of {', '.join(SYNC_KINDS)}, got {kind!r}")
    if phase is not None and phase not in PHASES:
        raise ValueError(f"fake_sync(phase=...) must be one of {', '.join(PHASES)}, got {phase!r}")
    return _deliver(Observation("fake", user_site(), threading.current_thread().name,
                                api=api, kind=kind, op=op, phase=phase))
