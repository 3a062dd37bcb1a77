"""The region API: ``audit()``, ``forbid()`` and ``allow(reason)``.

The detectors are process-global; regions are not. Each region belongs to the context (thread or
asyncio task) that entered it, through ``contextvars``: a sync is delivered to the regions of the
context that made it, so a region never fails on, or swallows, another thread's sync, and an
``allow`` on one thread disarms nothing elsewhere.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import itertools
import threading
import weakref
from typing import Iterable

from . import detect
from .detect import HUBS, MARKER, Observation, TraceSync, site_from_profiler_stack
from .events import (ALL_DETECTORS, BLOCKING_COPY_D2H, BLOCKING_COPY_H2D, DETECTORS, IMPLICIT_FREE,
                     STREAM_SYNC, SYNC_KINDS, Report, SyncError, SyncEvent)

_regions: contextvars.ContextVar[tuple["Region", ...]] = contextvars.ContextVar(
    "syncguard_regions", default=())
_allows: contextvars.ContextVar[tuple["allow", ...]] = contextvars.ContextVar(
    "syncguard_allows", default=())
_ids = itertools.count(1)
_lock = threading.RLock()
_profile_regions: list["Region"] = []  # regions whose marker is open on the running profiler
_allow_by_marker: "weakref.WeakValueDictionary[str, allow]" = weakref.WeakValueDictionary()

KNOWN_DETECTORS = ALL_DETECTORS + ("fake",)
_STREAM_CLASS = (STREAM_SYNC, BLOCKING_COPY_D2H, BLOCKING_COPY_H2D)


def parse_detectors(value: str | Iterable[str], where: str = "detectors") -> tuple[str, ...]:
    names = [v.strip() for v in value.split(",")] if isinstance(value, str) else list(value)
    names = [n for n in names if n]
    bad = [n for n in names if n not in KNOWN_DETECTORS]
    if bad or not names:
        raise ValueError(f"{where}: unknown detector(s) {bad or names!r}; "
                         f"choose from {', '.join(ALL_DETECTORS)}")
    return tuple(dict.fromkeys(names))


class allow(contextlib.ContextDecorator):
    """Accept syncs in a block (or a decorated function) for a stated reason.

    ``max`` bounds how many syncs one entry of the block may make; ``api`` and ``kind`` narrow
    what it accepts. Anything beyond stays a sync, with a note saying which allow it exceeded.
    """

    def __init__(self, reason: str, *, max: int | None = None, api: str | None = None,
                 kind: str | None = None):
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError("allow() needs a non-empty reason: say why this sync is acceptable")
        if max is not None and (not isinstance(max, int) or isinstance(max, bool) or max < 0):
            raise ValueError(f"allow(max=...) must be a non-negative int or None, got {max!r}")
        if kind is not None and kind not in SYNC_KINDS:
            raise ValueError(f"allow(kind=...) must be one of {', '.join(SYNC_KINDS)}, got {kind!r}")
        self.reason, self.max, self.api, self.kind = reason, max, api, kind
        self._tokens: list = []
        self._markers: list[str | None] = []

    def _recreate_cm(self):
        return allow(self.reason, max=self.max, api=self.api, kind=self.kind)

    def __call__(self, fn):
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def inner(*args, **kwargs):
                with self._recreate_cm():
                    return await fn(*args, **kwargs)
            return inner
        return super().__call__(fn)

    def matches(self, event: SyncEvent) -> bool:
        return (self.api is None or self.api == event.api) and (
            self.kind is None or self.kind == event.kind)

    def __enter__(self):
        self._tokens.append(_allows.set(_allows.get() + (self,)))
        marker = None
        if _regions.get() and _profile_owned_here():
            marker = f"{MARKER}allow#{next(_ids)}"
            _allow_by_marker[marker] = self
            HUBS.profile.push(marker)
        self._markers.append(marker)
        return self

    def __exit__(self, *exc):
        marker = self._markers.pop()
        if marker is not None:
            HUBS.profile.pop(marker)
        _allows.reset(self._tokens.pop())
        return False

    def __repr__(self) -> str:
        return f"allow({self.reason!r}, max={self.max!r}, api={self.api!r}, kind={self.kind!r})"


def _profile_owned_here() -> bool:
    return HUBS.profile.prof is not None and HUBS.profile.owner == threading.get_ident()


def _in_region() -> bool:
    return bool(_regions.get())


def _deliver(obs: Observation) -> bool:
    """Give an observation to every region of the context that made it."""
    regions = _regions.get()
    if not regions:
        return False
    obs = dataclasses.replace(obs, allows=_allows.get())
    for r in regions:
        r.observations.append(obs)
    return True


@contextlib.contextmanager
def _around(label: str):
    """A profiler marker around a wrapped call, so the profile can be tied to it exactly."""
    if not _profile_owned_here():
        yield None
        return
    marker = f"{MARKER}api#{next(_ids)}"
    HUBS.profile.push(marker)
    try:
        yield marker
    finally:
        HUBS.profile.pop(marker)


def _klass(kind: str) -> str:
    return "stream" if kind in _STREAM_CLASS else kind


class Region:
    """One audited block. ``audit()`` and ``forbid()`` return one of these."""

    def __init__(self, detectors: str | Iterable[str] = DETECTORS, races: bool = False,
                 raise_on_exit: bool = False):
        self.detectors = parse_detectors(detectors)
        self.races = bool(races)
        self.raise_on_exit = raise_on_exit
        self.report = Report(detectors=())
        self.observations: list[Observation] = []
        self.profile_syncs: list[TraceSync] = []
        self.marker = f"{MARKER}region#{next(_ids)}"
        self._armed: list[str] = []
        self._token = None
        self._race_detector = None
        self._threads_at_entry = 1
        self._frees_at_entry: int | None = None
        self._entered = False

    # -- entering -------------------------------------------------------------------------------
    def __enter__(self) -> Report:
        if self._entered:
            raise RuntimeError("a syncguard region cannot be entered twice; make a new one")
        self._entered = True
        reason = self._cuda_unavailable()
        if reason:
            self.report.cuda_available, self.report.reason = False, reason
            return self.report
        self._threads_at_entry = threading.active_count()
        try:
            self._arm()
        except BaseException:
            self._disarm()
            raise
        self._token = _regions.set(_regions.get() + (self,))
        return self.report

    def _cuda_unavailable(self) -> str | None:
        if "fake" in self.detectors:
            return None
        try:
            import torch
        except ImportError:
            return "torch is not installed"
        if not torch.cuda.is_available():
            return f"CUDA is not available (torch {torch.__version__})"
        torch.cuda.init()  # context set-up belongs before the region, not in it
        return None

    def _arm(self) -> None:
        active = [d for d in self.detectors if d in ("debug", "trace", "fake")]
        if "debug" in self.detectors:
            HUBS.debug.arm(_deliver)
            self._armed.append("debug")
        if "trace" in self.detectors or "profile" in self.detectors:
            HUBS.trace.arm(_deliver, _in_region, _around)
            self._armed.append("trace")
            if "trace" in self.detectors:
                self._frees_at_entry = detect._num_frees()
        if "profile" in self.detectors:
            with _lock:
                ok, why = HUBS.profile.available()
                if ok:
                    if HUBS.profile.prof is None:
                        HUBS.profile.start()
                        # allow() scopes entered before the profiler started still count
                        for a in _allows.get():
                            marker = f"{MARKER}allow#{next(_ids)}"
                            _allow_by_marker[marker] = a
                            a._markers[-1] = marker
                            HUBS.profile.push(marker)
                    HUBS.profile.push(self.marker)
                    _profile_regions.append(self)
                    self._armed.append("profile")
                    active.append("profile")
                else:
                    self.report.notes.append(f"profile detector not used: {why}")
        if self.races:
            from .races import RaceDetector

            self._race_detector = RaceDetector()
            self._race_detector.start()
            self._armed.append("races")
            active.append("races")
        self.report.detectors = tuple(active)

    # -- leaving --------------------------------------------------------------------------------
    def __exit__(self, exc_type, exc, tb):
        __tracebackhide__ = True  # a forbid() failure points at the user's with-line
        if not self.report.cuda_available:
            return False
        analyse = exc_type is None or issubclass(exc_type, Exception)
        frees = None
        try:
            if self._token is not None:
                _regions.reset(self._token)
                self._token = None
            if self._frees_at_entry is not None and analyse:
                frees = detect._num_frees() - self._frees_at_entry
        finally:
            self._disarm()
        if analyse:
            self._finalize(frees)
        if self.raise_on_exit and exc_type is None and not self.report.clean:
            raise SyncError(self.report)
        return False

    def _disarm(self) -> None:
        """Undo _arm in reverse; every step runs even if an earlier one fails."""
        errors = []
        for name in reversed(self._armed):
            try:
                if name == "races":
                    det = self._race_detector
                    self.report.races.extend(det.stop())
                    self.report.notes.extend(det.notes)
                    if det.reason:
                        self.report.notes.append(f"races not checked: {det.reason}")
                elif name == "profile":
                    with _lock:
                        HUBS.profile.pop(self.marker)
                        _profile_regions.remove(self)
                        records = HUBS.profile.harvest(keep=bool(_profile_regions))
                        syncs = detect.classify(records)
                        for r in _profile_regions + [self]:
                            r.profile_syncs.extend(s for s in syncs if r.marker in s.markers)
                elif name == "trace":
                    HUBS.trace.disarm()
                elif name == "debug":
                    HUBS.debug.disarm()
            except BaseException as e:  # keep restoring; re-raise the first failure after
                errors.append(e)
        self._armed.clear()
        if errors:
            raise errors[0]

    # -- merging --------------------------------------------------------------------------------
    def _finalize(self, frees: int | None) -> None:
        thread = threading.current_thread().name
        mine = [o for o in self.observations if o.source in self.detectors]
        debug = [o for o in mine if o.source == "debug"]
        trace = [o for o in mine if o.source == "trace"]
        # sync-debug flags exactly the stream syncs, on the same thread: pair them in order.
        stream = [i for i, o in enumerate(trace) if o.kind in _STREAM_CLASS]
        paired = dict(zip(stream, debug))
        events: list[tuple[SyncEvent, tuple, str | None]] = []
        for i, o in enumerate(trace):
            d = paired.get(i)
            blocked = o.blocked_us
            if blocked is None and d is not None and d.t_ns >= o.t_ns:
                blocked = round((d.t_ns - o.t_ns) / 1000, 1)  # from the wait's start to the op's end
            events.append((self._event(o, o.api, o.kind, ("debug", "trace") if d else ("trace",),
                                       blocked), o.allows, o.marker))
        for d in debug[len(stream):]:
            events.append((self._event(d, "cudaStreamSynchronize", STREAM_SYNC, ("debug",)),
                           d.allows, None))
        for o in mine:
            if o.source == "fake":
                events.append((self._event(o, o.api, o.kind, ("fake",)), o.allows, None))
        if "profile" in self.report.detectors:
            events = self._with_profile(events, thread)
        explained = sum(o.count for o in trace if o.kind == IMPLICIT_FREE)
        if frees is not None and frees > explained:
            if self._single_threaded():
                events.append((SyncEvent(
                    api="cudaFree", kind=IMPLICIT_FREE, thread=thread, detectors=("trace",),
                    note=f"{frees - explained} cudaFree inside ops (the allocator released cached "
                         "blocks); audit with detectors including 'profile' to find the op"),
                    _allows.get(), None))
            else:
                self.report.notes.append(f"{frees - explained} cudaFree in this process during the "
                                         "region, not attributed: other threads were running")
        self._judge(events)

    def _single_threaded(self) -> bool:
        return self._threads_at_entry == 1 and threading.active_count() == 1

    def _with_profile(self, events, thread):
        """Pair the profiler's syncs with the observed ones: op names, exact calls and times."""
        kept, lazy, unconfirmed = [], 0, 0
        known_markers = {m for _, _, m in events if m}
        for s in self.profile_syncs:
            if s.dropped:
                lazy += s.dropped.startswith("library")
                continue
            marker = next((m for m in s.markers if m.startswith(f"{MARKER}api#")), None)
            if s.linked or marker in known_markers or self._single_threaded():
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
            self.report.notes.append(f"{lazy} cudaFree from library lazy initialisation ignored; "
                                     "warm up before auditing")
        if unconfirmed:
            self.report.notes.append(f"{unconfirmed} profiled sync call(s) with no host op were "
                                     "not attributed: other threads were running")
        return out

    @staticmethod
    def _event(o: Observation, api, kind, detectors, blocked=None) -> SyncEvent:
        return SyncEvent(api=api or "unknown", kind=kind or STREAM_SYNC, op=o.op,
                         ops=(o.op,) if o.op else (), filename=o.site.filename,
                         lineno=o.site.lineno, function=o.site.function, stack=o.site.stack,
                         thread=o.thread, host_blocked_us=blocked, detectors=detectors)

    def _judge(self, events) -> None:
        """Split events into allowed and not, honouring each allow's max/api/kind."""
        used: dict[int, int] = {}
        for ev, allows, _ in events:
            chosen = exhausted = None
            for a in reversed(allows):
                if not a.matches(ev):
                    continue
                if a.max is not None and used.get(id(a), 0) >= a.max:
                    exhausted = exhausted or a
                    continue
                chosen = a
                break
            if chosen is not None:
                used[id(chosen)] = used.get(id(chosen), 0) + 1
                self.report.allowed.append(dataclasses.replace(ev, reason=chosen.reason))
            elif exhausted is not None:
                self.report.syncs.append(dataclasses.replace(
                    ev, note=f"exceeds allow(max={exhausted.max}): {exhausted.reason}"))
            else:
                self.report.syncs.append(ev)

def audit(detectors: str | Iterable[str] = DETECTORS, *, races: bool = False) -> Region:
    """Record every sync in the block; never raises for one. ``as report`` gives the Report."""
    return Region(detectors, races=races)


def forbid(detectors: str | Iterable[str] = DETECTORS, *, races: bool = False) -> Region:
    """Like audit(), but raise SyncError on exit if any sync (or race) was not allowed."""
    return Region(detectors, races=races, raise_on_exit=True)
