"""The profiler's runtime-call records and their classification into syncs.

The ``profile`` detector reads CUDA runtime calls from the PyTorch profiler; this module reduces
the profiler's events to :class:`TraceRecord` (only what classification needs, serialisable so
traces can be recorded and replayed) and turns them into :class:`TraceSync`: which calls made the
host wait, and why. Pure functions of the events: nothing here touches CUDA or starts a profiler
(:class:`syncguard.detectors.hooks.ProfileHub` does).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from syncguard.attribution.frames import _PROFILER_FRAME, is_profiler_frame as is_python_frame
from syncguard.records.events import (BLOCKING_COPY_D2H, BLOCKING_COPY_H2D, DEVICE_SYNC, EVENT_SYNC, IMPLICIT_FREE,
                                      PAGEABLE_COPY, STREAM_SYNC)

#: prefix of the profiler ranges (markers) syncguard opens for regions and allow scopes
MARKER = "syncguard::"

SYNC_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaFree",
             "cudaMemcpy", "cudaMemcpyAsync", "cudaMemcpy2D", "cudaMemcpy2DAsync")
#: (profile detector) ops whose first call initialises a library (cuBLAS, cuDNN) with a cudaFree that syncs nothing
#: worth reporting; warm up before auditing and these never show.
LAZY_INIT_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul",
                 "aten::linear", "aten::_scaled_mm", "aten::cudnn_convolution",
                 "aten::_cudnn_rnn", "aten::cudnn_batch_norm", "aten::convolution",
                 "aten::_convolution")


@dataclass(frozen=True)
class TraceRecord:
    """One CUDA runtime call from the profiler, with what surrounded it on the host."""

    name: str
    start_us: float
    end_us: float
    ancestors: tuple[str, ...] = ()  # host ranges around it, innermost first (ops and markers)
    parent_id: int | None = None  # identity of the innermost op, to pair a copy with its sync
    copies: tuple[str, ...] = ()  # device-side memcpy records of that op, in launch order
    stack: tuple[str, ...] = ()  # profiler Python stack of the nearest op that has one
    thread: int | None = None  # the profiler's thread id of the call

    def to_dict(self) -> dict:
        return {"name": self.name, "start_us": self.start_us, "end_us": self.end_us,
                "ancestors": list(self.ancestors), "parent_id": self.parent_id,
                "copies": list(self.copies), "stack": list(self.stack), "thread": self.thread}

    @classmethod
    def from_dict(cls, d: dict) -> "TraceRecord":
        return cls(d["name"], d["start_us"], d["end_us"], tuple(d.get("ancestors", ())),
                   d.get("parent_id"), tuple(d.get("copies", ())), tuple(d.get("stack", ())),
                   d.get("thread"))


@dataclass(frozen=True)
class TraceSync:
    """A classified sync from the trace, before it is merged with the other observations."""

    api: str
    kind: str
    start_us: float
    duration_us: float
    ops: tuple[str, ...] = ()  # outermost first
    markers: tuple[str, ...] = ()  # syncguard markers around it, innermost first
    stack: tuple[str, ...] = ()
    dropped: str | None = None  # why it is not a sync worth reporting

    @property
    def op(self) -> str | None:
        return self.ops[-1] if self.ops else None

    @property
    def linked(self) -> bool:
        return bool(self.ops)

    @property
    def debug_visible(self) -> bool:
        """sync-debug mode flags every cudaStreamSynchronize torch issues, and nothing else."""
        return self.api == "cudaStreamSynchronize"


def _host_thread(e):
    """The thread of the nearest host range around ``e`` (a runtime call's own thread id does not
    tell threads apart on some torch versions)."""
    return (e.cpu_parent if e.cpu_parent is not None else e).thread


def markers_around(calls, markers) -> dict[int, tuple]:
    """id(call) -> the ``markers`` (profiler events of syncguard's ranges) the call ran inside,
    innermost first: below the marker in the profiler's event tree, or else on its thread within
    its time. One sweep over time: a region may hold thousands of markers and calls.

    The tree alone is not enough on recent torch: with ``with_stack`` the tree also holds
    Python-call events, and a range opened inside one Python call and closed in another can be
    cut from the tree where the first call returns, so a region's later syncs would have no
    region marker among their ancestors."""
    given = {id(m) for m in markers}
    points = [(m.time_range.start, 0, i, m) for i, m in enumerate(markers)]
    points += [(m.time_range.end, 2, i, m) for i, m in enumerate(markers)]
    points += [(c.time_range.start, 1, i, c) for i, c in enumerate(calls)]
    points.sort(key=lambda p: p[:3])
    open_: dict = {}  # thread -> {marker index: marker}
    out: dict[int, tuple] = {}
    for _, what, i, x in points:
        if what == 0:
            open_.setdefault(x.thread, {})[i] = x
        elif what == 2:
            open_.get(x.thread, {}).pop(i, None)
        else:
            around = {id(m): m for m in open_.get(_host_thread(x), {}).values()}
            p = x.cpu_parent
            while p is not None:  # below a marker in the tree, whatever the clock says
                if id(p) in given:
                    around[id(p)] = p
                p = p.cpu_parent
            out[id(x)] = tuple(sorted(around.values(), key=lambda m: -m.time_range.start))
    return out


def _on_host(e) -> bool:
    """A host-side row. The trace also holds GPU-side rows: the device's own work, and a copy of
    each user annotation (syncguard's markers too) spanning the GPU work it enclosed, on the GPU's
    timeline. A marker's GPU copy can end after the region did (its kernels still running), and
    then it covers whatever the host does next, the profiler's own stop among it."""
    return not str(getattr(e, "device_type", "")).endswith("CUDA")


def records_from_profiler(events) -> list[TraceRecord]:
    """Reduce ``profile.events()`` to the runtime calls that may sync, innermost op first."""
    events = [e for e in events if _on_host(e)]
    calls = [e for e in events if e.name in SYNC_APIS]
    around = markers_around(calls, [e for e in events if e.name.startswith(MARKER)])
    out = []
    for e in calls:
        ancestors, p, stack = [], e.cpu_parent, ()
        while p is not None:
            if not p.name.startswith(MARKER):
                ancestors.append(p.name)
            if not stack and getattr(p, "stack", None):
                stack = tuple(p.stack)
            p = p.cpu_parent
        ancestors += [m.name for m in around[id(e)]]
        parent = e.cpu_parent
        while parent is not None and is_python_frame(parent.name):
            parent = parent.cpu_parent  # torch >= 2.14 nests ops under Python-call events
        copies = ()
        if parent is not None and not parent.name.startswith(MARKER):
            copies = tuple(k.name for k in getattr(parent, "kernels", ()) if "Memcpy" in k.name)
        thread = getattr(e, "thread", None)
        out.append(TraceRecord(e.name, e.time_range.start, e.time_range.end, tuple(ancestors),
                               id(parent) if parent is not None else None, copies, stack,
                               thread if isinstance(thread, int) else None))
    out.sort(key=lambda r: r.start_us)
    return out


def _direction(copy_name: str) -> str | None:
    if "DtoH" in copy_name:
        return "d2h"
    if "HtoD" in copy_name:
        return "h2d"
    return None


def classify(records: list[TraceRecord]) -> list[TraceSync]:
    """Turn runtime calls into syncs: which ones made the host wait, and why."""
    out: list[TraceSync] = []
    copies_seen: dict[Any, int] = {}  # parent_id -> memcpy calls seen so far under it
    pending_copy: dict[Any, str] = {}  # parent_id -> the last copy's device record name
    for r in records:
        ops = tuple(a for a in reversed(r.ancestors)
                    if not a.startswith(MARKER) and not is_python_frame(a))
        markers = tuple(a for a in r.ancestors if a.startswith(MARKER))
        frames = tuple(a for a in r.ancestors if _PROFILER_FRAME.match(a))
        stack = r.stack or frames  # both read "file.py(12): f", innermost first
        dur = r.end_us - r.start_us

        def sync(api: str, kind: str, dropped: str | None = None) -> None:
            out.append(TraceSync(api, kind, r.start_us, dur, ops, markers, stack, dropped))

        if r.name.startswith("cudaMemcpy"):
            i = copies_seen.get(r.parent_id, 0)
            copies_seen[r.parent_id] = i + 1
            name = r.copies[i] if i < len(r.copies) else ""
            pending_copy[r.parent_id] = name
            direction = _direction(name)
            if not r.name.endswith("Async") and direction:
                sync(r.name, BLOCKING_COPY_D2H if direction == "d2h" else BLOCKING_COPY_H2D)
                pending_copy.pop(r.parent_id, None)
            elif "Pageable" in name and direction:
                # Not yet known whether a stream sync follows (then it is a blocking copy);
                # decided when the op's next record arrives or at the end.
                out.append(TraceSync(r.name, PAGEABLE_COPY, r.start_us, dur, ops, markers, stack,
                                     dropped="pending"))
        elif r.name == "cudaStreamSynchronize":
            copy = pending_copy.pop(r.parent_id, None) if r.parent_id is not None and ops else None
            direction = _direction(copy) if copy else None
            if direction:
                # The stream sync completes a copy issued by the same op: a blocking copy.
                for j in range(len(out) - 1, -1, -1):
                    prev = out[j]
                    if prev.dropped == "pending" and prev.ops == ops and prev.start_us <= r.start_us:
                        out[j] = TraceSync(prev.api, prev.kind, prev.start_us, prev.duration_us,
                                           prev.ops, prev.markers, prev.stack,
                                           dropped="part of a blocking copy")
                        break
                sync(r.name, BLOCKING_COPY_D2H if direction == "d2h" else BLOCKING_COPY_H2D)
            else:
                sync(r.name, STREAM_SYNC)
        elif r.name == "cudaDeviceSynchronize":
            sync(r.name, DEVICE_SYNC)
        elif r.name == "cudaEventSynchronize":
            sync(r.name, EVENT_SYNC)
        elif r.name == "cudaFree":
            lazy = bool(ops) and ops[-1] in LAZY_INIT_OPS
            prev = out[-1] if out else None
            if (not lazy and prev is not None and prev.kind == IMPLICIT_FREE and not prev.dropped
                    and prev.markers == markers and prev.ops == ops):
                # one empty_cache() frees several segments: one wait, reported once
                out[-1] = TraceSync(prev.api, prev.kind, prev.start_us,
                                    r.end_us - prev.start_us, ops, markers, prev.stack)
                continue
            sync(r.name, IMPLICIT_FREE, dropped="library lazy initialisation" if lazy else None)
    return [s if s.dropped != "pending" else
            TraceSync(s.api, s.kind, s.start_us, s.duration_us, s.ops, s.markers, s.stack)
            for s in out]
