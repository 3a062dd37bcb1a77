"""The region API: ``audit()``, ``forbid()`` and ``allow(reason)``.

The detectors are process-global; regions are not. Each region belongs to the context (thread or
asyncio task) that entered it, through ``contextvars`` (:mod:`syncguard.detectors.routing`): a sync is
delivered to the regions of the context that made it, so a region never fails on, or swallows,
another thread's sync, and an ``allow`` on one thread disarms nothing elsewhere.

A region knows detectors only through the seam in :mod:`syncguard.detectors`: it arms the ones
asked for, disarms them in reverse, and lets each add its events. Under ``torch.compile`` every
region and allow is a no-op while Dynamo traces (a compiled graph cannot sync; graph breaks run
eagerly and are covered by the region around the call), so code with ``fullgraph=True`` compiles
unchanged.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import operator
import sys
import threading
from typing import Any, Callable, Iterable

from syncguard import detectors as registry
from syncguard.detectors import CUDA_ALONE as _CUDA_ALONE, routing
from syncguard.attribution.frames import is_tracing
from syncguard.attribution.codescope import split_names
from syncguard.detectors.seam import DetectorUnavailable
from syncguard.detectors.torch_hooks import allow_entered, allow_exited
from syncguard.records.events import ALL_DETECTORS, DETECTORS, SYNC_KINDS, Report, SyncError, SyncEvent
from syncguard.detectors.routing import allows as _allows, deliver as _deliver, ids as _ids, regions as _regions  # noqa: F401
from syncguard.detectors.profiler import MARKER, SYNC_APIS
from syncguard.detectors.cuda.calls import DRIVER_APIS, RUNTIME_APIS
from syncguard.attribution.phases import RUN, fails, not_failing_reason, parse_phases

KNOWN_DETECTORS = ALL_DETECTORS + ("fake", "predict")
#: every API name an event can carry: what allow(api=...) and the allow_sync marker accept (a
#: misspelt name taken silently would make an allow that matches nothing)
KNOWN_APIS = tuple(dict.fromkeys((*SYNC_APIS, *RUNTIME_APIS, *DRIVER_APIS)))
_NAME = operator.attrgetter("name")


def parse_detectors(value: str | Iterable[str], where: str = "detectors") -> tuple[str, ...]:
    names = split_names(value, where)
    bad = [n for n in names if n not in KNOWN_DETECTORS]
    if bad or not names:
        raise ValueError(f"{where}: unknown detector(s) {bad or names!r}; "
                         f"choose from {', '.join(ALL_DETECTORS)}")
    return tuple(dict.fromkeys(names))


def no_cuda() -> str | None:
    """Why this process has no CUDA to audit, or None; never imports torch nor sets CUDA up.

    Why not import torch: a process that has not imported it has used no CUDA, and importing it
    for the asking changed the program audited (sys.modules, warnings, what the first import
    pays): a numpy test that walks sys.modules failed under the plugin."""
    torch = sys.modules.get("torch")
    if torch is None:
        return "torch is not imported (nothing has used CUDA)"
    return None if torch.cuda.is_available() else f"CUDA is not available (torch {torch.__version__})"


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
        if api is not None and api not in KNOWN_APIS:
            raise ValueError(f"allow(api=...) must be one of {', '.join(KNOWN_APIS)}, got {api!r}")
        if kind is not None and kind not in SYNC_KINDS:
            raise ValueError(f"allow(kind=...) must be one of {', '.join(SYNC_KINDS)}, got {kind!r}")
        self.reason, self.max, self.api, self.kind = reason, max, api, kind

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
        if is_tracing():
            return self  # Dynamo is tracing: nothing here can sync, and contextvars do not trace
        entry = AllowEntry(self)
        _allows.set(_allows.get() + (entry,))
        routing.scopes_changed()
        entry.marker = allow_entered(entry)
        return self

    def __exit__(self, *exc):
        if is_tracing():
            return False
        entry = _leave(_allows, lambda e: e.allow is self)
        if entry is not None:
            allow_exited(entry.marker)
        return False

    def __repr__(self) -> str:
        return f"allow({self.reason!r}, max={self.max!r}, api={self.api!r}, kind={self.kind!r})"


class AllowEntry:
    """One entry of an ``allow`` block, as the allow scopes of its context hold it.

    Why an object per entry, not the allow itself: one allow object entered by two threads or
    tasks at once (a module-level ``ALLOW``) kept one stack of tokens for both, and leaving
    popped the other's (ValueError: token created in a different Context); and ``max`` is per
    entry, where a reused object's entries had shared one budget."""

    __slots__ = ("allow", "marker", "__weakref__")

    def __init__(self, a: allow):
        self.allow = a
        self.marker: str | None = None  # its profiler marker, where a profiled region is open

    def __repr__(self) -> str:
        return repr(self.allow)


def _leave(var: contextvars.ContextVar, mine: Callable[[Any], bool]) -> Any:
    """Take the innermost item ``mine`` picks out of the tuple ``var`` holds in this context, and
    return it (None where this context holds none: left from another task, as an async
    generator's finaliser does; there is nothing of its own to take there).

    Why not ``var.reset(token)``: a token only resets in the context that made it and only in
    order, so a region or allow left out of order, or from another context, raised ValueError
    or stayed registered and went on collecting."""
    held = var.get()
    for i in range(len(held) - 1, -1, -1):
        if mine(held[i]):
            var.set(held[:i] + held[i + 1:])
            routing.scopes_changed()
            return held[i]
    return None


class Region:
    """One audited block. ``audit()`` and ``forbid()`` return one of these.

    ``fail_on_phases`` names the phases besides "run" whose syncs count against the region
    (``"compile"``, ``"graph_capture"``); by default those are recorded as allowed, with a reason
    saying why, because they happen once (compilation, capture set-up), not in steady state.
    """

    # slots: a region is made, entered and left on the audited program's path (one per test or
    # step), with caches cold there; fixed slots are less to allocate and touch than a __dict__
    __slots__ = ("detectors", "fail_on_phases", "races", "report", "observations",
                 "profile_syncs", "state", "_id", "_armed", "_finishers", "_registered",
                 "_race_detector", "_entered", "_traced", "_alone")

    raise_on_exit = False  # forbid(): raise SyncError on exit for a sync not allowed

    def __init__(self, detectors: str | Iterable[str] = DETECTORS, *, races: bool = False,
                 fail_on_phases: str | Iterable[str] = (), predict: bool = False):
        # predict: the region predicts syncs on CPU stand-ins instead of measuring them
        # (detectors/predicted.py); no race detection there (it needs CUDA's sanitizer). Inside
        # an open predicting() block (pytest --syncguard-predict) every region predicts: the
        # tensors there are stand-ins that no GPU detector could see.
        # (sys.modules first: the module is never imported where nothing predicts)
        predict = predict or ("syncguard.predict" in sys.modules and _inside_prediction())
        # (predicting, the detectors asked for are not parsed: none of them runs)
        if (predict or detectors is DETECTORS) and fail_on_phases == ():
            parsed, self.fail_on_phases = DETECTORS, ()  # the defaults, as _parse gives them
        else:
            key = (DETECTORS if predict else detectors, fail_on_phases)
            try:  # as parsed before: one region per test or step, on the program's path
                parsed, self.fail_on_phases = _PARSED[key]
            except (KeyError, TypeError):  # TypeError: a list, not hashable; parsed each time
                parsed, self.fail_on_phases = _parse(*key)
        self.detectors = ("predict",) if predict else parsed
        self.races = bool(races) and not predict
        self.report = Report.fresh()
        self.observations: list = []
        self.profile_syncs: list = []
        self.state: dict = {}  # per-detector scratch space for this region
        self._id = next(_ids)
        self._armed: list = []
        self._finishers: tuple | list = ()
        self._registered = False
        self._race_detector = None
        self._entered = False
        self._traced = False
        self._alone = False  # armed through the cuda detector's fused arm_alone

    @property
    def marker(self) -> str:
        """This region's name in torch's profiler records (the profile detector's only)."""
        return f"{MARKER}region#{self._id}"

    # -- entering -------------------------------------------------------------------------------
    def __enter__(self) -> Report:
        if self._entered:
            raise RuntimeError("a syncguard region cannot be entered twice; make a new one")
        self._entered = True
        if is_tracing():
            self._traced = True  # inside a compiled graph: no syncs to see, nothing to arm
            return self.report
        # CUDA set up already, the usual case: nothing more to ask (is_available() is not free,
        # and a region is opened per test or per example)
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            reason = _cuda_unavailable(self.detectors)
            if reason:
                self.report.cuda_available, self.report.reason = False, reason
                return self.report
        # the cuda detector alone, as resolved for this request before: armed and scoped in one
        # call (False where the hub is not in its steady state, and the seam's way runs)
        alone = None if self.races else _CUDA_ALONE.get(self.detectors)
        if alone is not None and alone[0][0].arm_alone(self):
            report = self.report
            self._armed, report.detectors, report.detector_reason = alone
            self._alone = True
            self._registered = True
            return report
        try:
            self._arm()
        except BaseException:
            self._disarm()
            raise
        _regions.set(_regions.get() + (self,))
        routing.scopes_changed()
        self._registered = True
        return self.report

    def _arm(self) -> None:
        names, why = registry.resolve(self.detectors)
        if names == ("predict",):
            why = "predict: syncs predicted on the CPU from rules measured on a GPU, not measured"
        fell_back = False
        for det in registry.ordered(names):
            try:
                det.arm(self)
            except DetectorUnavailable as e:
                self.report.notes.append(f"{det.name} detector not used: {e}")
                if det.name == "cuda":  # the most complete one failed: the reversible fallback
                    fallback = [n for n in registry.FALLBACK if n not in names]
                    for fb in registry.ordered(fallback):
                        fb.arm(self)
                        self._armed.append(fb)
                    fell_back = True
                    why = f"{','.join(registry.FALLBACK)}: cuda detector not used ({e})"
                continue
            self._armed.append(det)
        if fell_back:
            self._armed.sort(key=lambda d: d.order)  # finish() runs in detector order
        if self.races:
            from syncguard.detectors.races import RaceDetector

            self._race_detector = RaceDetector()
            self._race_detector.start()
        ran = tuple(map(_NAME, self._armed))
        self.report.detectors = ran + (("races",) if self.races else ())
        self.report.detector_reason = why
        if ran == ("cuda",) and not self.races and names == ("cuda",) and len(_CUDA_ALONE) < 64:
            # the next region of this request enters through the detector's fused arm_alone
            _CUDA_ALONE[self.detectors] = ((self._armed[0],), ran, why)

    # -- leaving --------------------------------------------------------------------------------
    def __exit__(self, exc_type, exc, tb):
        __tracebackhide__ = True  # a forbid() failure points at the user's with-line
        if self._traced or not self.report.cuda_available:
            return False
        interrupted = exc_type is not None and not issubclass(exc_type, Exception)
        if self._alone and self._armed[0].disarm_alone(self):  # left in one call, as entered
            self._registered = self._alone = False
            self._finishers, self._armed = self._armed, ()
            if self.observations:
                self._finish(exc_type, interrupted)
            return False
        try:
            if self._registered:
                self._registered = False
                held = _regions.get()
                if held and held[-1] is self:  # the innermost, as nearly always
                    _regions.set(held[:-1])
                    routing.scopes_changed()
                else:
                    _leave(_regions, lambda r: r is self)
        finally:
            self._alone = False
            self._disarm()
        self._finish(exc_type, interrupted)
        return False

    def _finish(self, exc_type, interrupted: bool) -> None:
        """The report made from what the detectors saw; SyncError for forbid()."""
        __tracebackhide__ = True
        if not interrupted:
            self._finalize()
        else:  # KeyboardInterrupt, SystemExit, GeneratorExit: what was seen is still reported
            # (dropping it would read "clean"); nothing may replace the exit
            try:
                self._finalize()
            except Exception as e:
                self.report.notes.append(f"not analysed after {exc_type.__name__}: {e!r}")
        if self.raise_on_exit and exc_type is None and not self.report.clean:
            raise SyncError(self.report)

    def _disarm(self) -> None:
        """Undo _arm in reverse; every step runs even if an earlier one fails."""
        errors = []
        if self._race_detector is not None:
            try:
                det, self._race_detector = self._race_detector, None
                self.report.races.extend(det.stop())
                self.report.notes.extend(det.notes)
                if det.reason:
                    self.report.notes.append(f"races not checked: {det.reason}")
            except BaseException as e:  # keep restoring; re-raise the first failure after
                errors.append(e)
        armed, self._armed = self._armed, ()
        self._finishers = armed  # finish() runs in detector order, as armed
        for det in reversed(armed):
            try:
                det.disarm(self)
            except BaseException as e:
                errors.append(e)
        if errors:
            raise errors[0]

    # -- merging --------------------------------------------------------------------------------
    def _finalize(self) -> None:
        events: list = []
        for det in self._finishers:  # in detector order, as armed
            events = det.finish(self, events)
        if events:  # (a sync-free region, the usual one, has nothing to judge)
            judge(events, self.report, self.fail_on_phases)

    def single_threaded(self) -> bool:
        """No other Python thread at entry (as the thread-watching detectors saw it when they
        armed) nor now."""
        return self.state.get("threads_at_entry", 1) == 1 and threading.active_count() == 1


def _cuda_unavailable(detectors: tuple) -> str | None:
    """Why CUDA cannot be audited here, else None after setting it up; a region asks only while
    CUDA is not set up yet."""
    if "fake" in detectors or "predict" in detectors:
        return None
    why = no_cuda()
    if why is None:
        sys.modules["torch"].cuda.init()  # context set-up belongs before the region
    return why


def judge(events, report: Report, fail_on_phases) -> None:
    """Split a region's events into ``report``'s allowed and unallowed syncs, honouring each
    allow's max/api/kind and the phases that do not fail."""
    used: dict[int, int] = {}
    syncs = report.syncs
    for ev, allows, _ in events:
        if not allows and ev.phase == RUN:  # the common case: a plain sync, no allow()
            syncs.append(ev)
            continue
        chosen = exhausted = None
        for entry in reversed(allows) if allows else ():  # AllowEntry: max is per entry
            a = entry.allow
            if not a.matches(ev):
                continue
            if a.max is not None and used.get(id(entry), 0) >= a.max:
                exhausted = exhausted or a
                continue
            chosen = entry
            break
        if chosen is not None:
            used[id(chosen)] = used.get(id(chosen), 0) + 1
            report.allowed.append(dataclasses.replace(ev, reason=chosen.allow.reason))
        elif not fails(ev.phase, fail_on_phases):
            report.allowed.append(dataclasses.replace(
                ev, reason=not_failing_reason(ev.phase)))
        elif exhausted is not None:
            syncs.append(dataclasses.replace(
                ev, note=f"exceeds allow(max={exhausted.max}): {exhausted.reason}"))
        else:
            syncs.append(ev)


_PARSED: dict = {}  # (detectors, fail_on_phases) as given -> as parsed, for hashable ones


def _parse(detectors, phases) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """parse_detectors and parse_phases of a region's arguments, remembered when hashable (an
    error is raised each time)."""
    out = parse_detectors(detectors), parse_phases(phases, "fail_on_phases")
    if len(_PARSED) < 256:
        try:
            _PARSED[(detectors, phases)] = out
        except TypeError:
            pass
    return out


def _inside_prediction() -> bool:
    mod = sys.modules.get("syncguard.predict")  # never imported here: it needs torch
    return mod is not None and not is_tracing() and mod.session_active()


class audit(Region):
    """Record every sync in the block; never raises for one. ``as report`` gives the Report.
    ``predict=True``: predict the block's syncs on the CPU (syncguard.predict) instead.

    (A Region subclass rather than a function returning one: a region is made on the audited
    program's path, with caches cold there, and the extra call was a tenth of a cold entry.)"""

    __slots__ = ()


class forbid(Region):
    """Like audit(), but raise SyncError on exit if any sync (or race) was not allowed; with
    ``predict=True`` a predicted sync raises (calls not predicted are in the report, not raised)."""

    __slots__ = ()
    raise_on_exit = True
