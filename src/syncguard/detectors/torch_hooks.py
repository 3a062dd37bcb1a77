"""The detectors that ride on torch's own hooks, behind the seam: debug, trace, gpu_trace,
profile, and the fake detector used to test plumbing on machines without a GPU.

The machinery is in :mod:`syncguard.detectors.hooks` (process-global hubs) and
:mod:`syncguard.detectors.profiler` (the profiler's classification); each class here says what one
detector does for one region.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
import weakref

from syncguard.attribution.frames import site_from_profiler_stack
from syncguard.detectors import hooks as detect
from syncguard.detectors import routing
from syncguard.detectors.hooks import HUBS
from syncguard.detectors.profiler import MARKER, classify
from syncguard.detectors.seam import DetectorUnavailable
from syncguard.records.events import (BLOCKING_COPY_D2H, BLOCKING_COPY_H2D, IMPLICIT_FREE, STREAM_SYNC,
                                      SyncEvent)

_STREAM_CLASS = (STREAM_SYNC, BLOCKING_COPY_D2H, BLOCKING_COPY_H2D)


def event(o: routing.Observation, api, kind, detectors, blocked=None) -> SyncEvent:
    return SyncEvent(api=api or "unknown", kind=kind or STREAM_SYNC, op=o.op,
                     ops=(o.op,) if o.op else (), filename=o.site.filename,
                     lineno=o.site.lineno, function=o.site.function, stack=o.site.stack,
                     thread=o.thread, host_blocked_us=o.blocked_us if blocked is None else blocked,
                     detectors=detectors, phase=o.phase)


def _mine(region, source):
    return [o for o in region.observations if o.source == source]


class ThreadStarts(detect._SharedState):
    """Counts ``threading.Thread.start`` calls while a region needs to know whether it ran alone.

    A thread that starts and ends inside a region is invisible to ``threading.active_count()`` at
    both ends; its syncs (a profile record with no host op, a cudaFree counted by the allocator)
    must not be charged to the region. Reversible: the original ``start`` is put back after.
    """

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self._original = None

    def _install(self) -> None:
        self._original = original = threading.Thread.start
        hub = self

        def start(thread, *args, **kwargs):
            hub.count += 1
            return original(thread, *args, **kwargs)

        start.__wrapped__ = original
        threading.Thread.start = start

    def _restore(self) -> None:
        if self._original is not None:
            threading.Thread.start = self._original
            self._original = None


THREAD_STARTS = ThreadStarts()


def watch_threads(region) -> None:
    THREAD_STARTS.arm()
    region.state["thread_starts"] = THREAD_STARTS.count
    # read here, not by every region's entry: only these detectors ask (Region.single_threaded)
    region.state["threads_at_entry"] = threading.active_count()


def unwatch_threads(region) -> None:
    region.state["ran_alone"] = (region.single_threaded()
                                 and THREAD_STARTS.count == region.state.get("thread_starts"))
    THREAD_STARTS.disarm()


def merge_with_cuda(found: list, items: list) -> list:
    """Add a torch-hook detector's events to ``found``; one that the cuda detector also reported
    (same line, same class of sync, in order) becomes one event seen by both.

    The cuda detector's events are indexed by (file, line, class of sync) first: scanning the
    whole list per event grows with the square of a region's syncs (bench/bench_merge_hooks.py)."""
    out = list(found)
    waiting: dict[tuple, collections.deque] = {}  # key -> indices of cuda events not yet taken
    for i, (other, _, _) in enumerate(out):
        if "cuda" in other.detectors:
            key = (other.filename, other.lineno, _klass(other.kind))
            waiting.setdefault(key, collections.deque()).append(i)
    for ev, allows, marker in items:
        mine = waiting.get((ev.filename, ev.lineno, _klass(ev.kind))) if waiting else None
        if mine:
            i = mine.popleft()
            other, a2, m2 = out[i]
            seen = tuple(dict.fromkeys(other.detectors + ev.detectors))
            out[i] = (dataclasses.replace(other, detectors=seen), a2, m2)
        else:
            out.append((ev, allows, marker))
    return out


class _Base:
    order, lasting = 50, False

    def unavailable(self) -> str | None:
        return None

    def arm(self, region) -> None:
        pass

    def disarm(self, region) -> None:
        pass

    def finish(self, region, found: list) -> list:
        return merge_with_cuda(found, [(event(o, o.api, o.kind, (self.name,)), o.allows, o.marker)
                                       for o in _mine(region, self.name)])


class Fake(_Base):
    """Detector ``fake``: syncs announced by ``syncguard.testing.fake_sync`` (CPU plumbing tests)."""

    name, order = "fake", 0


class Debug(_Base):
    """Detector ``debug``: stream syncs flagged by torch's sync-debug mode (reversible)."""

    name, order = "debug", 10

    def arm(self, region) -> None:
        HUBS.debug.arm(routing.deliver)

    def disarm(self, region) -> None:
        HUBS.debug.disarm()


class Trace(_Base):
    """Detector ``trace``: wrappers on torch's Python copy/synchronize/empty_cache entry points
    (reversible), plus the allocator's free count to notice ``cudaFree`` inside ops."""

    name, order = "trace", 20

    def arm(self, region) -> None:
        HUBS.trace.arm(routing.deliver, routing.in_region, around)
        watch_threads(region)
        region.state["frees_at_entry"] = detect._num_frees()

    def disarm(self, region) -> None:
        try:
            at_entry = region.state.get("frees_at_entry")
            if at_entry is not None:
                region.state["frees"] = detect._num_frees() - at_entry
        finally:
            try:
                unwatch_threads(region)
            finally:
                HUBS.trace.disarm()

    def finish(self, region, found: list) -> list:
        mine = _mine(region, "trace")
        # detail names the hooks that saw the same sync inside the wrapped call (sync-debug mode)
        out = merge_with_cuda(found, [(event(o, o.api, o.kind, tuple(o.detail or ()) + ("trace",)),
                                       o.allows, o.marker) for o in mine])
        frees = region.state.get("frees")
        explained = sum(o.count for o in mine if o.kind == IMPLICIT_FREE)
        if frees is not None and frees > explained:
            if region.state.get("ran_alone"):
                out.append((SyncEvent(
                    api="cudaFree", kind=IMPLICIT_FREE, thread=threading.current_thread().name,
                    detectors=("trace",),
                    note=f"{frees - explained} cudaFree inside ops (the allocator released cached "
                         "blocks); audit with the 'cuda' or 'profile' detector to find the op"),
                    routing.allows.get(), None))
            else:
                region.report.notes.append(f"{frees - explained} cudaFree in this process during "
                                           "the region, not attributed: other threads were running")
        return out


class GpuTrace(_Base):
    """Detector ``gpu_trace`` (opt-in): torch's CUDA trace callbacks. LEAVES A LASTING HOOK in the
    process (see ``detect.GpuTraceHub``); it names syncs sync-debug mode sees and merges with it."""

    name, order, lasting = "gpu_trace", 30, True

    def unavailable(self) -> str | None:
        return None

    def arm(self, region) -> None:
        HUBS.gpu_trace.arm(routing.deliver)

    def disarm(self, region) -> None:
        HUBS.gpu_trace.disarm()

    def finish(self, region, found: list) -> list:
        out = list(found)
        debug_only = [i for i, (ev, _, _) in enumerate(out) if ev.detectors == ("debug",)]
        extra = []
        for o in _mine(region, "gpu_trace"):
            if o.kind in _STREAM_CLASS and debug_only:
                i = debug_only.pop(0)  # the same stream sync, seen by both: one event
                ev, allows, m = out[i]
                out[i] = (dataclasses.replace(ev, api=o.api, kind=o.kind,
                                              detectors=("debug", "gpu_trace")), allows, m)
            else:
                extra.append((event(o, o.api, o.kind, ("gpu_trace",)), o.allows, None))
        return merge_with_cuda(out, extra)


# ---------------------------------------------------------------------------------------------
# profile: the PyTorch profiler's runtime trace, with markers naming regions and allow scopes

_lock = threading.RLock()
_profile_regions: list = []  # regions whose marker is open on the running profiler
_allow_by_marker: "weakref.WeakValueDictionary[str, object]" = weakref.WeakValueDictionary()


def profile_owned_here() -> bool:
    return HUBS.profile.prof is not None and HUBS.profile.owner == threading.get_ident()


@contextlib.contextmanager
def around(label: str):
    """A profiler marker around a wrapped call, so the profile can be tied to it exactly."""
    if not profile_owned_here():
        yield None
        return
    marker = f"{MARKER}api#{next(routing.ids)}"
    HUBS.profile.push(marker)
    try:
        yield marker
    finally:
        HUBS.profile.pop(marker)


def allow_entered(a) -> str | None:
    """Open a profiler marker for an allow scope entered inside a profiled region."""
    if not (routing.regions.get() and profile_owned_here()):
        return None
    marker = f"{MARKER}allow#{next(routing.ids)}"
    _allow_by_marker[marker] = a
    HUBS.profile.push(marker)
    return marker


def allow_exited(marker: str | None) -> None:
    if marker is not None:
        HUBS.profile.pop(marker)


def _klass(kind: str) -> str:
    return "stream" if kind in _STREAM_CLASS else kind


class Profile(_Base):
    """Detector ``profile`` (opt-in): the PyTorch profiler's CUDA runtime trace."""

    name, order = "profile", 40

    def unavailable(self) -> str | None:
        ok, why = HUBS.profile.available()
        return None if ok else why

    def arm(self, region) -> None:
        # one profile per process, and syncguard's markers are only recorded on its thread
        with _lock:
            ok, why = HUBS.profile.available()
            if not ok:
                raise DetectorUnavailable(why)
            if HUBS.profile.prof is None:
                HUBS.profile.start()
                # allow() scopes entered before the profiler started still count
                for a in routing.allows.get():
                    marker = f"{MARKER}allow#{next(routing.ids)}"
                    _allow_by_marker[marker] = a
                    a.marker = marker  # (an AllowEntry)
                    HUBS.profile.push(marker)
            HUBS.profile.push(region.marker)
            _profile_regions.append(region)
            region.profile_syncs = []
        watch_threads(region)

    def disarm(self, region) -> None:
        unwatch_threads(region)
        with _lock:
            HUBS.profile.pop(region.marker)
            _profile_regions.remove(region)
            # The profiler's thread ids do not tell threads apart (on some torch versions every
            # runtime call reads the same thread), so markers alone scope a profile.
            records = HUBS.profile.harvest(keep=bool(_profile_regions))
            syncs = classify(records)
            for r in _profile_regions + [region]:
                r.profile_syncs.extend(s for s in syncs if r.marker in s.markers)

    def finish(self, region, found: list) -> list:
        """Pair the profiler's syncs with the observed ones: op names, exact calls and times."""
        events = found
        thread = threading.current_thread().name
        kept, lazy, unconfirmed = [], 0, 0
        known_markers = {m for _, _, m in events if m}
        for s in region.profile_syncs:
            if s.dropped:
                lazy += s.dropped.startswith("library")
                continue
            marker = next((m for m in s.markers if m.startswith(f"{MARKER}api#")), None)
            # a record with no host op is ours only if no other thread ran during the region
            if s.linked or marker in known_markers or region.state.get("ran_alone"):
                kept.append((s, marker))
            else:
                unconfirmed += 1
        taken: set[int] = set()
        by_marker = {m: i for i, (_, _, m) in enumerate(events) if m}
        queues: dict[str, list[int]] = {}
        for i, (ev, _, _) in enumerate(events):
            queues.setdefault(_klass(ev.kind), []).append(i)
        out = list(events)
        for s, marker in kept:
            i = by_marker.get(marker) if marker else None
            if i is None or i in taken:
                q = [j for j in queues.get(_klass(s.kind), []) if j not in taken]
                i = q[0] if q else None
            if i is None:
                site = site_from_profiler_stack(s.stack)
                out.append((SyncEvent(api=s.api, kind=s.kind, op=s.op, ops=s.ops,
                                      filename=site.filename, lineno=site.lineno,
                                      function=site.function, stack=site.stack, thread=thread,
                                      host_blocked_us=round(s.duration_us, 1),
                                      detectors=("profile",)),
                            tuple(a for m in reversed(s.markers)
                                  if (a := _allow_by_marker.get(m)) is not None), None))
                continue
            taken.add(i)
            ev, allows, m = out[i]
            out[i] = (dataclasses.replace(ev, api=s.api, kind=s.kind, op=s.op, ops=s.ops,
                                          host_blocked_us=round(s.duration_us, 1),
                                          detectors=ev.detectors + ("profile",)), allows, m)
        if lazy:
            region.report.notes.append(f"{lazy} cudaFree from library lazy initialisation ignored; "
                                       "warm up before auditing")
        if unconfirmed:
            region.report.notes.append(f"{unconfirmed} profiled sync call(s) with no host op were "
                                       "not attributed: other threads were running")
        return out
