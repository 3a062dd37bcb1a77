"""Events and reports: small frozen records that survive a JSON round-trip.

Every file syncguard writes carries ``schema_version``; readers refuse versions they do not know
instead of guessing.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field

from syncguard.records.frame import Frame, parse_stack

# (SchemaError and parse_json were defined here: kept importable from here)
from syncguard.records.schema import (SCHEMA_VERSION, SchemaError, check_fields, check_schema,  # noqa: F401
                     parse_json)

#: Kinds of sync, in the words the reports use.
STREAM_SYNC = "stream_sync"
DEVICE_SYNC = "device_sync"
EVENT_SYNC = "event_sync"
BLOCKING_COPY_D2H = "blocking_copy_d2h"
BLOCKING_COPY_H2D = "blocking_copy_h2d"
PAGEABLE_COPY = "pageable_copy"
IMPLICIT_FREE = "implicit_free"
RACE = "race"
SYNC_KINDS = (STREAM_SYNC, DEVICE_SYNC, EVENT_SYNC, BLOCKING_COPY_D2H, BLOCKING_COPY_H2D,
              PAGEABLE_COPY, IMPLICIT_FREE)

#: the default: "auto", the most complete detector available (syncguard.detectors.resolve)
DETECTORS = ("auto",)
#: every detector a user may name; "gpu_trace" leaves torch's trace hook active for the process
ALL_DETECTORS = ("auto", "cuda", "debug", "trace", "gpu_trace", "profile")


class _Event:
    """What SyncEvent and RaceEvent share: a ``file:line`` and a JSON round-trip (lists <-> tuples)."""

    __slots__ = ()  # no __dict__ of its own: SyncEvent's instances are slots alone
    filename: str | None
    lineno: int | None

    @property
    def where(self) -> str:
        return f"{self.filename}:{self.lineno}" if self.filename else "<unknown>"

    def to_dict(self) -> dict:
        """Lists for tuples, each stack frame as its text; a wait that is not a finite number
        (JSON has no NaN) as None, what a wait no detector measured reads as."""
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            out[f.name] = ([str(x) if isinstance(x, Frame) else x for x in v]
                           if isinstance(v, tuple) else
                           None if isinstance(v, float) and not math.isfinite(v) else v)
        return out

    @classmethod
    def from_dict(cls, data: dict):
        if not isinstance(data, dict):
            raise SchemaError(f"{cls.__name__} is not a JSON object")
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = set(data) - names - {"schema_version"}
        if unknown:
            raise SchemaError(f"{cls.__name__} has unknown fields {sorted(unknown)}")
        check_fields(cls, data, cls.__name__)
        kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names}
        return cls(**kwargs)  # a stack's text is parsed once, by SyncEvent.__post_init__


@dataclass(frozen=True, slots=True)
class SyncEvent(_Event):
    """One time the host waited for the device, attributed to the user's line.

    Slots, not a ``__dict__``: a region's exit makes one per sync, and the next region's entry
    frees the last report's; slots take a fraction of the memory of a dict per event, touched
    with caches cold on both sides."""

    api: str
    kind: str
    op: str | None = None
    ops: tuple[str, ...] = ()  # the aten op chain, outermost first (op is the last)
    filename: str | None = None
    lineno: int | None = None
    function: str | None = None
    #: innermost first; a detector's frames are structured, text only in an event built by hand
    stack: tuple[Frame | str, ...] = ()
    thread: str = ""
    host_blocked_us: float | None = None
    detectors: tuple[str, ...] = ()
    reason: str | None = None  # the allow() reason, for allowed syncs
    note: str | None = None
    phase: str = "run"  # "run", or "compile"/"graph_capture" when torch was compiling/capturing

    def __post_init__(self) -> None:
        # an event built by hand may give its stack as text: parsed once, here (the detectors
        # build theirs with SyncEvent.at, structured already, which runs no __post_init__)
        if any(type(f) is str for f in self.stack):
            object.__setattr__(self, "stack", parse_stack(self.stack))

    @classmethod
    def at(cls, site, api: str, kind: str, thread: str, host_blocked_us: float | None,
           detectors: tuple[str, ...], phase: str, note: str | None = None) -> "SyncEvent":
        """The event of a call observed at ``site`` (an :class:`~syncguard.attribution.frames.Site`):
        the same as ``SyncEvent(api=api, kind=kind, filename=site.filename, lineno=site.lineno,
        function=site.function, stack=site.stack, thread=..., ...)``, built without ``__init__``,
        which sets each of the 14 fields of a frozen dataclass with ``object.__setattr__``, and
        without keyword arguments: a region's exit makes one per sync. Nothing here runs
        ``__post_init__``: ``site.stack`` is structured already. Each slot is set through its
        member descriptor (the class's own, so a frozen class's ``__setattr__`` is not in the
        way)."""
        ev = _new(cls)
        for setter, value in zip(_SETTERS, (
                api, kind, None, (), site.filename, site.lineno, site.function, site.stack, thread,
                host_blocked_us, detectors, None, note, phase)):
            setter(ev, value)
        return ev


_new = object.__new__
_SYNC_FIELDS = {f.name: (f.default if f.default is not dataclasses.MISSING else None)
                for f in dataclasses.fields(SyncEvent)}
#: each field's slot setter, in the declared order (SyncEvent.at's values follow it)
_SETTERS = tuple(SyncEvent.__dict__[name].__set__ for name in _SYNC_FIELDS)
assert tuple(_SYNC_FIELDS) == ("api", "kind", "op", "ops", "filename", "lineno", "function", "stack",
                               "thread", "host_blocked_us", "detectors", "reason", "note", "phase")


@dataclass(frozen=True)
class RaceEvent(_Event):
    """Two accesses to one tensor from different streams (or the host) with no ordering between them."""

    kind: str  # always RACE; kept so a mixed list of events reads the same way
    what: str  # e.g. "read on stream 7 after write on stream 0" or "host write to pinned buffer"
    tensor: str = ""  # shape, dtype, data pointer in words
    data_ptr: int | None = None
    streams: tuple[int, ...] = ()
    ops: tuple[str, ...] = ()
    sites: tuple[str, ...] = ()  # "file:line" of each access, current first
    filename: str | None = None
    lineno: int | None = None
    thread: str = ""
    detectors: tuple[str, ...] = ("races",)


@dataclass(slots=True)
class RegionReport:
    """What one audited region (``audit()``/``forbid()``, or one test's call phase) saw.

    Named for the region so it is not mistaken for the session report file (sessionfile.py) or
    the run matrix (matrix.py).
    """

    syncs: list[SyncEvent] = field(default_factory=list)
    allowed: list[SyncEvent] = field(default_factory=list)
    races: list[RaceEvent] = field(default_factory=list)
    detectors: tuple[str, ...] = ()
    cuda_available: bool = True
    reason: str | None = None  # why less than asked for was recorded (no CUDA, profiler busy…)
    notes: list[str] = field(default_factory=list)
    detector_reason: str | None = None  # which detectors ran and why (e.g. "auto" resolved)
    #: predict detector: calls it ran but cannot model, "not predicted (why) at file:line";
    #: such a region is never reported clean (it says what it could not see)
    not_predicted: list[str] = field(default_factory=list)

    @classmethod
    def fresh(cls) -> "RegionReport":
        """``cls()``, every field at its default, made without the dataclass ``__init__``: a
        region makes one at every entry, on the audited program's path. That it equals ``cls()``
        is checked at import."""
        report = object.__new__(cls)
        report.syncs = []
        report.allowed = []
        report.races = []
        report.detectors = ()
        report.cuda_available = True
        report.reason = None
        report.notes = []
        report.detector_reason = None
        report.not_predicted = []
        return report

    @property
    def clean(self) -> bool:
        return not self.syncs and not self.races

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "syncs": [e.to_dict() for e in self.syncs],
            "allowed": [e.to_dict() for e in self.allowed],
            "races": [e.to_dict() for e in self.races],
            "detectors": list(self.detectors),
            "cuda_available": self.cuda_available,
            "reason": self.reason,
            "notes": list(self.notes),
            "detector_reason": self.detector_reason,
            "not_predicted": list(self.not_predicted),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "RegionReport":
        check_schema(data, "report")
        check_fields(cls, data, "report")
        return cls(
            syncs=[SyncEvent.from_dict(e) for e in data.get("syncs", [])],
            allowed=[SyncEvent.from_dict(e) for e in data.get("allowed", [])],
            races=[RaceEvent.from_dict(e) for e in data.get("races", [])],
            detectors=tuple(data.get("detectors", ())),
            cuda_available=data.get("cuda_available", True),
            reason=data.get("reason"),
            notes=list(data.get("notes", [])),
            detector_reason=data.get("detector_reason"),
            not_predicted=list(data.get("not_predicted", [])),
        )

    def to_json(self, **kw) -> str:
        """Strict JSON: to_dict holds no NaN or Infinity (a wait is None instead), and
        ``allow_nan=False`` keeps it so; Python's default would write ``NaN``, which no JSON
        reader but Python's takes."""
        return json.dumps(self.to_dict(), **{"allow_nan": False, **kw})

    @classmethod
    def from_json(cls, text: str) -> "RegionReport":
        return cls.from_dict(parse_json(text, "report"))

    def summary(self) -> str:
        if not self.cuda_available:
            return f"not audited: {self.reason}"
        unseen = (f"; {len(self.not_predicted)} call(s) not predicted" if self.not_predicted
                  else "")
        if self.clean and self.not_predicted:
            return f"no sync predicted{unseen}" + (f" ({len(self.allowed)} allowed)"
                                                  if self.allowed else "")
        if self.clean:
            return "clean" + (f" ({len(self.allowed)} allowed)" if self.allowed else "")
        kinds = sorted({e.kind for e in self.syncs} | {e.kind for e in self.races})
        parts = [f"{len(self.syncs)} sync(s)"] + ([f"{len(self.races)} race(s)"] if self.races else [])
        return ", ".join(parts) + f" ({', '.join(kinds)})" + unseen


try:  # a field added without fresh() knowing it: unset (a slot raises) or not its default
    _fresh_whole = RegionReport.fresh() == RegionReport()
except AttributeError:
    _fresh_whole = False
if not _fresh_whole:
    raise ImportError("RegionReport.fresh does not set every field of RegionReport to its default")

#: The name before 0.2, kept so code written against it (and ``syncguard.Report``) keeps working.
Report = RegionReport


class SyncError(AssertionError):
    """Raised by forbid() when a region synced without an allow()."""

    def __init__(self, report: RegionReport, message: str | None = None):
        self.report = report
        super().__init__(message or format_report(report))

    def __reduce__(self):
        # pickle and copy call the class with self.args (the message alone) by default, which
        # took the message for the report: a forbid() failing in a process pool broke the pool
        return type(self), (self.report, str(self))


def format_report(report: RegionReport) -> str:
    """Plain-text explanation, one line per event; the plugin renders a richer table."""
    lines = [f"syncguard: {report.summary()}"]
    for e in report.syncs:
        op = f" via {e.op}" if e.op else ""
        blocked = f", blocked {e.host_blocked_us:.0f} us" if e.host_blocked_us is not None else ""
        note = f" [{e.note}]" if e.note else ""
        lines.append(f"  {e.kind}: {e.api}{op} at {e.where} in {e.function} "
                     f"(thread {e.thread}{blocked}; seen by {'+'.join(e.detectors)}){note}")
    for r in report.races:
        lines.append(f"  race: {r.what} on {r.tensor} at {r.where}")
    lines += [f"  {u}" for u in report.not_predicted]
    return "\n".join(lines)
