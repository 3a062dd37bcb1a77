"""Per-site records: one per (site, kind, API, op) of a test, instead of one per sync event.

Why: a test that calls ``.item()`` in a loop syncs thousands of times from one line; storing each
event with its stack made a report of a modest suite weigh megabytes. A :class:`SiteRecord` keeps
what a reader needs from all of them (how often, how long the host was blocked in total and at
worst, in which phases) and the first stack, so a report grows with distinct sites, not events.

The site is the frame the sync *counts at* under the code scope (codescope.py): for a sync inside
a library called from the user's package, the package's line, with the library's entry frame and
the innermost user frame kept beside it. The terminal summary, the failure table and the matrix
all read these records, so every view counts the same way.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from syncguard.attribution.codescope import EVERYWHERE, Attribution, CodeScope, attribute, frames_of
from syncguard.records.events import SyncEvent
from syncguard.records.frame import Frame, frame_text, parse_stack
from syncguard.records.schema import SchemaError, check_fields

#: frames kept of each record's first stack (the detectors collect this many today)
STACK_FRAMES = 8


@dataclass(frozen=True)
class SiteRecord:
    """Every sync of one test at one site of one kind through one API (and aten op)."""

    kind: str
    api: str
    op: str | None = None
    ops: tuple[str, ...] = ()
    filename: str | None = None  # the site: where the sync counts (see the module docstring)
    lineno: int | None = None
    function: str | None = None
    count: int = 0
    blocked_us_total: float | None = None  # None: no detector measured the wait
    blocked_us_max: float | None = None
    phases: Mapping[str, int] = field(default_factory=dict, hash=False)  # phase -> count
    stack: tuple[Frame | str, ...] = ()  # the first event's stack; () when over the session's cap
    user_frame: Frame | str | None = None  # innermost frame of the user's own code
    entry_frame: Frame | str | None = None  # where the program entered the library that synced
    thread: str = ""  # the first event's thread
    detectors: tuple[str, ...] = ()
    reason: str | None = None  # the allow() reason, for allowed syncs
    note: str | None = None

    def __post_init__(self) -> None:
        # frames given as text (a report read back, a record built by hand): parsed once, here
        if any(type(f) is str for f in self.stack):
            object.__setattr__(self, "stack", parse_stack(self.stack))
        for key in ("user_frame", "entry_frame"):
            if type(getattr(self, key)) is str:
                object.__setattr__(self, key, parse_stack((getattr(self, key),))[0])

    @property
    def where(self) -> str:
        return f"{self.filename}:{self.lineno}" if self.filename else "<unknown>"

    @property
    def phase(self) -> str:
        """"run" when every sync was made running; else the first other phase seen
        (compile, graph_capture), as SyncEvent.phase names it."""
        return next((p for p in self.phases if p != "run"), "run")

    @property
    def host_blocked_us(self) -> float | None:
        """The worst single wait: what the failure table shows as "blocked"."""
        return self.blocked_us_max

    def without_stack(self) -> "SiteRecord":
        return dataclasses.replace(self, stack=())

    def to_dict(self) -> dict[str, Any]:
        """Lists for tuples; each frame as the text a report holds."""
        out = {f: getattr(self, f) for f in RECORD_FIELDS}
        out.update({k: list(v) for k, v in out.items() if isinstance(v, tuple)})
        out["stack"] = [str(f) for f in self.stack]
        out["user_frame"], out["entry_frame"] = (frame_text(self.user_frame),
                                                 frame_text(self.entry_frame))
        out["phases"] = dict(self.phases)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> "SiteRecord":
        if not isinstance(data, dict):
            raise SchemaError("site record is not a JSON object")
        unknown = set(data) - set(RECORD_FIELDS)
        if unknown:
            raise SchemaError(f"site record has unknown fields {sorted(unknown)}")
        if not isinstance(data.get("count"), int) or not isinstance(data.get("kind"), str):
            raise SchemaError(f"site record without an integer count and a kind: {str(data)[:80]}")
        check_fields(cls, data, "site record")
        phases = data.get("phases") or {}
        if phases and sum(phases.values()) != data["count"]:  # each sync has one phase
            raise SchemaError(f"site record: phases add up to {sum(phases.values())}, not its "
                              f"count {data['count']}")
        kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**kwargs)  # frame text is parsed once, by __post_init__


RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(SiteRecord))


class _Builder:
    """Accumulates the events of one site (mutable while counting; frozen when done)."""

    def __init__(self, e: SyncEvent, how: Attribution):
        site = how.counted
        self.first, self.how = e, how
        self.where = ((site.filename, site.lineno, site.function) if site is not None
                      else (e.filename, e.lineno, e.function))
        self.count, self.total, self.worst = 0, None, None
        self.phases: dict[str, int] = {}
        self.detectors: dict[str, None] = {}

    def add(self, e: SyncEvent) -> None:
        self.count += 1
        if e.host_blocked_us is not None:
            self.total = (self.total or 0.0) + e.host_blocked_us
            self.worst = max(self.worst or 0.0, e.host_blocked_us)
        self.phases[e.phase] = self.phases.get(e.phase, 0) + 1
        self.detectors.update(dict.fromkeys(e.detectors))

    def record(self) -> SiteRecord:
        e, how = self.first, self.how
        return SiteRecord(
            kind=e.kind, api=e.api, op=e.op, ops=tuple(e.ops), filename=self.where[0],
            lineno=self.where[1], function=self.where[2], count=self.count,
            blocked_us_total=None if self.total is None else round(self.total, 3),
            blocked_us_max=None if self.worst is None else round(self.worst, 3),
            phases=self.phases, stack=tuple(e.stack[:STACK_FRAMES]),
            user_frame=how.user, entry_frame=how.entry, thread=e.thread,
            detectors=tuple(self.detectors), reason=e.reason, note=e.note)


class ScopeJudge:
    """The code scope's decision for each sync event, made once and kept.

    One test's events are read by several views (the failure table, the judging of the test,
    the hypothesis examples, the session report's records); each asks this judge, so an event's
    frames are attributed once per test however many views read it. Events with the same frames
    share one decision (a line that syncs in a loop is judged once)."""

    __slots__ = ("scope", "_made")

    def __init__(self, scope: CodeScope = EVERYWHERE):
        self.scope = scope
        self._made: dict[tuple, Attribution] = {}

    def __call__(self, e: SyncEvent) -> Attribution:
        key = (e.filename, e.lineno, e.function, e.stack)
        how = self._made.get(key)
        if how is None:
            how = self._made[key] = attribute(frames_of(e.filename, e.lineno, e.function,
                                                        e.stack), self.scope)
        return how


def judge_for(scope: "CodeScope | ScopeJudge") -> ScopeJudge:
    """``scope``'s judge: the one given, or a new one for a bare scope."""
    return scope if isinstance(scope, ScopeJudge) else ScopeJudge(scope)


def split(events: Iterable[SyncEvent], scope: "CodeScope | ScopeJudge" = EVERYWHERE
          ) -> tuple[list[tuple[SyncEvent, Attribution]], list[tuple[SyncEvent, Attribution]]]:
    """(inside the scope, outside it), each event with its attribution, in first-seen order.
    Pass the test's :class:`ScopeJudge` to reuse the decisions already made for its events."""
    judge = judge_for(scope)
    inside, outside = [], []
    for e in events:
        how = judge(e)
        (inside if how.in_scope else outside).append((e, how))
    return inside, outside


def records(attributed: Iterable[tuple[SyncEvent, Attribution]]) -> list[SiteRecord]:
    """One record per (site, kind, API, op, allow reason), in first-seen order: syncs allowed
    for different reasons (an allow(), a phase that does not fail) stay apart."""
    builders: dict[tuple, _Builder] = {}
    for e, how in attributed:
        site = how.counted
        where = (site.filename, site.lineno) if site is not None else (e.filename, e.lineno)
        key = (*where, e.kind, e.api, e.op, e.reason)
        b = builders.get(key)
        if b is None:
            b = builders[key] = _Builder(e, how)
        b.add(e)
    return [b.record() for b in builders.values()]


def aggregate(events: Iterable[SyncEvent], scope: "CodeScope | ScopeJudge" = EVERYWHERE
              ) -> tuple[list[SiteRecord], list[SiteRecord]]:
    """Records of the syncs inside ``scope`` and of those outside it."""
    inside, outside = split(events, scope)
    return records(inside), records(outside)


def total(recs: Iterable[SiteRecord]) -> int:
    """How many syncs the records stand for."""
    return sum(r.count for r in recs)
