"""Events and reports: small frozen records that survive a JSON round-trip.

Every file syncguard writes carries ``schema_version``; readers refuse versions they do not know
instead of guessing.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

SCHEMA_VERSION = 1

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


class SchemaError(ValueError):
    """A JSON document is not one syncguard can read."""


def parse_json(text: str, where: str) -> Any:
    """``json.loads`` with the one message syncguard gives for text that is not JSON.

    Besides JSONDecodeError, json.loads raises a plain ValueError for an integer of more than
    4300 digits and RecursionError for arrays nested past the recursion limit: both are input
    that is not a document, said the same way."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SchemaError(f"{where}: not valid JSON (truncated?): {e.msg} at line {e.lineno}") from None
    except (ValueError, RecursionError) as e:
        raise SchemaError(f"{where}: not a JSON document syncguard can read "
                          f"({str(e).split(';')[0]})") from None


def check_schema(data: Any, what: str = "document", reads: Iterable[int] = (SCHEMA_VERSION,)
                 ) -> None:
    """``data`` is an object whose ``schema_version`` is one of ``reads``: an integer, since
    ``true == 1`` and ``1.0 == 1`` in Python would pass a plain comparison."""
    if not isinstance(data, dict):
        raise SchemaError(f"{what} is not a JSON object")
    version, reads = data.get("schema_version"), tuple(reads)
    if type(version) is not int or version not in reads:
        raise SchemaError(f"{what} has schema_version {version!r}; this syncguard reads "
                          f"{', '.join(map(str, reads))}")


# -- field types --------------------------------------------------------------------------------
# Why: a from_dict that passes a value on unchecked fails only where it is used (a matrix cell,
# a phrase, a sum), as a traceback far from the file. Checked where a document is read, the one
# line names the file and the field.

def _finite(v: Any) -> bool:
    """A JSON number that is a float with a finite value (an integer past 1e308 is not)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _whole(v: Any, low: int = -2**63) -> bool:
    """An integer a C int64 holds (no bool); ``low=0`` for counts."""
    return type(v) is int and low <= v < 2**63


def _json_numbers_finite(v: Any) -> bool:
    """Every number at any depth is :func:`_finite` (iterative: a document nested as deep as
    the JSON reader allows must not overflow the stack here)."""
    todo = [v]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            todo += x.values()
        elif isinstance(x, list):
            todo += x
        elif isinstance(x, (int, float)) and not isinstance(x, bool) and not _finite(x):
            return False
    return True


def _each(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(map(test, v))


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _list(v: Any) -> bool:
    return isinstance(v, list)


def _dict(v: Any) -> bool:
    return isinstance(v, dict)


def _or_null(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or test(v)


#: (test, words) for each field type, keyed by the annotation as written (``from __future__
#: import annotations`` keeps it as text); a list of nested records is checked to be a list
#: here and record by record by its own from_dict. A field whose annotation is missing here
#: fails the first test that reads one (KeyError), so no new field goes unchecked.
VALUE_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (_str, "a string"),
    "str | None": (_or_null(_str), "a string or null"),
    "int": (functools.partial(_whole, low=0), "a count (a whole number from 0)"),
    "int | None": (_or_null(_whole), "an integer or null"),
    "float": (_finite, "a finite number"),
    "float | None": (_or_null(_finite), "a finite number or null"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "tuple[str, ...]": (_each(_str), "a list of strings"),
    "list[str]": (_each(_str), "a list of strings"),
    "tuple[int, ...]": (_each(_whole), "a list of integers"),
    "Mapping[str, int]": (lambda v: _dict(v) and all(_whole(n, low=0) for n in v.values()),
                          "an object of counts"),
    "Mapping[str, Any]": (lambda v: _dict(v) and _json_numbers_finite(v),
                          "an object (of finite numbers)"),
    "dict": (_dict, "an object"),
    "dict | None": (_or_null(_dict), "an object or null"),
    "list": (_list, "a list"),
    **dict.fromkeys(("list[SyncEvent]", "list[RaceEvent]", "tuple[SiteRecord, ...]",
                     "tuple[RaceEvent, ...]", "tuple[SyncEvent, ...]"), (_list, "a list")),
}


def check_types(data: Mapping[str, Any], types: Mapping[str, str], what: str,
                required: Iterable[str] = ()) -> None:
    """SchemaError naming the first of ``required`` that ``data`` lacks, or the first field of
    ``types`` (name -> annotation text, :data:`VALUE_TYPES`) whose value is not of that type."""
    if not _dict(data):
        raise SchemaError(f"{what} is {_shown(data)}, not an object")
    for name in required:
        if name not in data:
            raise SchemaError(f"{what} has no {name!r}")
    for name, annotation in types.items():
        test, words = VALUE_TYPES[annotation]
        if name in data and not test(data[name]):
            raise SchemaError(f"{what}: {name} is {_shown(data[name])}, not {words}")


def _shown(value: Any) -> str:
    """A value as an error quotes it: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@functools.cache
def _declared(cls: type) -> tuple[dict[str, str], tuple[str, ...]]:
    """(field -> annotation, fields without a default) of a dataclass."""
    fields = dataclasses.fields(cls)
    return ({f.name: f.type for f in fields},  # type: ignore[misc]
            tuple(f.name for f in fields if f.default is dataclasses.MISSING
                  and f.default_factory is dataclasses.MISSING))


def check_fields(cls: type, data: Mapping[str, Any], what: str) -> None:
    """:func:`check_types` with the fields a dataclass declares: the typed from_dict
    constructors call it before building, so a wrong type never reaches ``cls(**data)``."""
    types, required = _declared(cls)
    check_types(data, types, what, required)


class _Event:
    """What SyncEvent and RaceEvent share: a ``file:line`` and a JSON round-trip (lists <-> tuples)."""

    __slots__ = ()  # no __dict__ of its own: SyncEvent's instances are slots alone
    filename: str | None
    lineno: int | None

    @property
    def where(self) -> str:
        return f"{self.filename}:{self.lineno}" if self.filename else "<unknown>"

    def to_dict(self) -> dict:
        """Lists for tuples; a wait that is not a finite number (JSON has no NaN) as None, what
        a wait no detector measured reads as."""
        return {k: list(v) if isinstance(v, tuple) else
                None if isinstance(v, float) and not math.isfinite(v) else v
                for k, v in dataclasses.asdict(self).items()}  # type: ignore[call-overload]

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
        return cls(**kwargs)


@dataclass(frozen=True, slots=True)
class SyncEvent(_Event):
    """One time the host waited for the device, attributed to the user's line.

    Slots, not a ``__dict__``: a region's exit makes one per sync (2.8.0's 100 merges: 100), and
    the next region's entry frees the last report's; 14 slots are a quarter of the memory a
    14-key dict per event took, touched with caches cold on both sides."""

    api: str
    kind: str
    op: str | None = None
    ops: tuple[str, ...] = ()  # the aten op chain, outermost first (op is the last)
    filename: str | None = None
    lineno: int | None = None
    function: str | None = None
    stack: tuple[str, ...] = ()
    thread: str = ""
    host_blocked_us: float | None = None
    detectors: tuple[str, ...] = ()
    reason: str | None = None  # the allow() reason, for allowed syncs
    note: str | None = None
    phase: str = "run"  # "run", or "compile"/"graph_capture" when torch was compiling/capturing

    @classmethod
    def at(cls, site, api: str, kind: str, thread: str, host_blocked_us: float | None,
           detectors: tuple[str, ...], phase: str, note: str | None = None) -> "SyncEvent":
        """The event of a call observed at ``site`` (an :class:`~syncguard.attribution.Site`):
        the same as ``SyncEvent(api=api, kind=kind, filename=site.filename, lineno=site.lineno,
        function=site.function, stack=site.stack, thread=..., ...)``, built without ``__init__``,
        which sets each of the 14 fields of a frozen dataclass with ``object.__setattr__``, and
        without keyword arguments. A region's exit makes one per sync: 2.7 -> 2.3 us per sync
        event on the CPU with keywords (reports/cpu/callback-events.md), a keyword call and
        its check ~0.8 us of that. Nothing here runs ``__post_init__``: SyncEvent has none.
        Each slot is set through its member descriptor (the class's own, so a frozen class's
        ``__setattr__`` is not in the way)."""
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


@dataclass
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
