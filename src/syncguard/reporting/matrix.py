"""The run matrix: session reports of several runs side by side, compared with each other and a baseline.

Pure functions only (no argv, no exit codes, no writing): :mod:`syncguard.cli` does the IO and
:mod:`syncguard.reporting.formats` turns a matrix into text.

A *run* is one session report (torch version × device, named by :func:`sessionfile.run_label`); a
*case* is one test nodeid. Runs sort by torch version (numeric, local part such as ``+cu130``
ignored), GPU runs before CPU runs of the same version. Adjacent versions are compared within one
*series* (same device and GPU model), so a CPU run never reads as a GPU case "getting cleaner".

The baseline (accepted outcomes, per-site budgets, timings) and the comparison with it live in
:mod:`syncguard.reporting.baseline`; the provenance each run carries in :mod:`syncguard.reporting.provenance`.
"""
from __future__ import annotations

from collections import Counter

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from syncguard.records.events import RACE, RaceEvent, SchemaError, SyncEvent
from syncguard.reporting import provenance
from syncguard.reporting import timing
from syncguard.detectors.predicted import label as predicted_label
from syncguard.reporting.sessionfile import TestEntry, is_predicted, run_label
from syncguard.reporting.weaker import mark

#: Cell states. "missing": the run has no such test. "off"/"not_audited"/"skipped": nothing to judge.
STATES = ("clean", "syncs", "allowed", "failed", "skipped", "not_audited", "off", "missing")
UNJUDGED = ("skipped", "not_audited", "off", "missing")
#: what a judged cell of a predicted run ends with: its syncs were predicted, not measured
PREDICTED = ", predicted"
AUDITED = ("clean", "syncs", "allowed")
FAILED_OUTCOMES = ("failed", "error")
#: Measurement keys with their own column in tables: (key, column title). Every other value a test
#: recorded (``syncguard.record()``) is listed in one more column, ``OTHER_TITLE``.
MEASURES = (("median_ms", "time"), ("ratio_to_copy", "× copy"), ("peak_extra_bytes", "peak extra"))
OTHER_TITLE = "also recorded"


def parse_version(text: str | None) -> tuple[int, ...]:
    """'2.11.0+cu130' -> (2, 11, 0); the local part and any pre-release suffix are ignored."""
    parts = []
    for piece in (text or "").split("+", 1)[0].split("."):
        digits = re.match(r"\d+", piece)
        if not digits:
            break
        parts.append(int(digits.group()))
        if digits.end() != len(piece):  # '0a0', '0rc1': keep the number, stop there
            break
    return tuple(parts)


@dataclass(frozen=True)
class Run:
    """One session report: a column of the matrix."""

    label: str
    path: str
    torch: str
    device: str
    gpu: str | None
    complete: bool = True
    #: identity of the detector code that made the run (syncguard.reporting.provenance.code_identity);
    #: None for reports written before provenance existed
    code: str | None = None
    #: display strings per provenance field (syncguard.reporting.provenance.describe)
    provenance: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    #: what decides which syncs the run could see: the detectors that ran and the code scope
    #: (syncguard.reporting.provenance.detectors_used, code_scope); None where the report does not say
    detectors: str | None = None
    scope: str | None = None
    #: its syncs were predicted on CPU stand-ins, not measured (sessionfile.is_predicted)
    predicted: bool = False
    #: why the run predicted (its ``options.predict_why``), where the report says
    predict_why: str | None = None

    @property
    def version(self) -> tuple[int, ...]:
        return parse_version(self.torch)

    @property
    def series(self) -> str:
        """Runs whose versions are compared with each other: same device and GPU model."""
        return (self.gpu or "cuda") if self.device == "cuda" else "cpu"

    @property
    def sort_key(self) -> tuple:
        return (self.version, self.device != "cuda", self.series, self.label)


@dataclass(frozen=True)
class Tally:
    """Syncs of one cell that read the same: the phrase (API, op, phase, line) and how many."""

    phrase: str
    count: int


def count(tallies: Iterable[Tally]) -> int:
    """How many syncs the tallies stand for."""
    return sum(t.count for t in tallies)


def phrases(tallies: Iterable[Tally]) -> list[str]:
    """One phrase per sync, in order: the matrix JSON's ``syncs``/``allowed`` lists."""
    return [t.phrase for t in tallies for _ in range(t.count)]


@dataclass(frozen=True)
class Cell:
    """What one case did in one run. ``syncs`` holds unallowed syncs and races, ``allowed`` the
    allowed syncs, each as tallies: one phrase per site and phase with its count."""

    state: str
    outcome: str | None = None
    syncs: tuple[Tally, ...] = ()
    kinds: tuple[str, ...] = ()
    allowed: tuple[Tally, ...] = ()
    allowed_kinds: tuple[str, ...] = ()
    reason: str | None = None
    measurements: Mapping[str, Any] = field(default_factory=dict)  # numbers as float
    #: allowed syncs per site (:func:`site`): what a baseline's per-site budget is checked on
    sites: Mapping[str, int] = field(default_factory=dict)
    #: timing samples per measurement key, one list of repetitions per process
    #: (syncguard.reporting.timing); only these are ever gated
    samples: Mapping[str, tuple[tuple[float, ...], ...]] = field(default_factory=dict)
    #: unallowed syncs and races per site, as ``sites``: a sync that moves to another site with
    #: the same count and kind is still a change the gate sees
    sync_sites: Mapping[str, int] = field(default_factory=dict)
    audit: str | None = None  # the test's own audit state (a failed test keeps it)
    #: names of the detectors that judged the case (TestEntry.detectors); None where not
    #: audited or its report predates them. One test's region can fall back (fewer syncs seen)
    #: while the run's others do not: the baseline compares them per case
    detectors: tuple[str, ...] | None = None
    #: the test's ``weaker`` mark (reporting/weaker.py): judged by weaker detectors than asked
    weaker: Mapping[str, str] | None = None
    #: the case's run was predicted (Run.predicted): its text says so
    predicted: bool = False

    @property
    def n_syncs(self) -> int:
        """Unallowed syncs and races."""
        return count(self.syncs)

    @property
    def n_allowed(self) -> int:
        return count(self.allowed)

    @property
    def audited(self) -> bool:
        """Its syncs were judged: an audited state, or a failure after its audit ran (a failed
        case that was audited loses what its audit saw when it is later skipped)."""
        return self.state in AUDITED or (self.state == "failed" and self.audit in AUDITED)

    @property
    def text(self) -> str:
        """Short cell text: 'clean', '2 syncs (stream_sync)', 'allowed 1 (blocking_copy_h2d)'…;
        in a predicted run '1 sync (blocking_copy_h2d), predicted', and 'not predicted (why)'."""
        if self.state in UNJUDGED:
            unseen = "not predicted" if self.predicted else "not audited"
            return {"missing": "missing", "skipped": "skipped", "off": "not audited (audit off)",
                    "not_audited": f"{unseen} ({self.reason or 'no reason given'})"}[self.state]
        text = summary(self.state, self.n_syncs, self.kinds, self.n_allowed, self.allowed_kinds)
        text = f"{text} {mark(self.weaker)}" if self.weaker else text
        return text + PREDICTED if self.predicted else text

    @property
    def detail(self) -> str:
        """Longer text for the changes list: names the API, op and line of each sync."""
        if self.state in UNJUDGED or self.state == "clean":
            return self.text
        parts = ["failed"] if self.state == "failed" else []
        if self.syncs:
            parts.append(f"{plural(self.n_syncs, 'sync')} ({_few(t.phrase for t in self.syncs)})")
        if self.allowed:
            parts.append(f"allowed {self.n_allowed} ({_few(t.phrase for t in self.allowed)})")
        return " + ".join(parts) + (PREDICTED if self.predicted else "")

    @property
    def signature(self) -> tuple:
        """Two cells with the same signature count as the same outcome."""
        return (self.state, self.n_syncs, self.kinds, self.n_allowed, self.allowed_kinds)


@dataclass(frozen=True)
class Matrix:
    runs: tuple[Run, ...]
    nodeids: tuple[str, ...]
    cells: Mapping[tuple[str, str], Cell]  # (run label, nodeid) -> Cell
    #: each run's test entries as read (run label -> entries): what a one-run report's summary
    #: ranks its sites from, the per-site records a cell keeps only as phrases
    tests: Mapping[str, tuple[TestEntry, ...]] = field(default_factory=dict)

    def cell(self, label: str, nodeid: str) -> Cell:
        return self.cells.get((label, nodeid), MISSING)

    def series(self) -> dict[str, list[Run]]:
        out: dict[str, list[Run]] = {}
        for run in self.runs:
            out.setdefault(run.series, []).append(run)
        return out


MISSING = Cell("missing")


@dataclass(frozen=True)
class Change:
    """A case whose outcome differs between adjacent versions of one series."""

    nodeid: str
    series: str
    text: str  # "syncs on 2.8.0 (…), clean from 2.11.0"


# -- building -----------------------------------------------------------------------------------

def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _differing(cell: "Cell", other: "Cell") -> list[str]:
    """The sync sites of ``cell`` that ``other`` lacks, with a count when repeated."""
    left = _counter(cell.syncs + cell.allowed) - _counter(other.syncs + other.allowed)
    return [f"{n}× {site}" if n > 1 else site for site, n in left.items()]


def _counter(tallies: Iterable[Tally]) -> Counter:
    """Syncs per phrase (one phrase may have several tallies: two sites in files of one name)."""
    out: Counter = Counter()
    for t in tallies:
        out[t.phrase] += t.count
    return out


def _few(items: Iterable[str], limit: int = 2) -> str:
    uniq = list(dict.fromkeys(items))
    more = f"; +{len(uniq) - limit} more" if len(uniq) > limit else ""
    return "; ".join(uniq[:limit]) + more


def summary(state: str, n_syncs: int, kinds: Iterable[str], n_allowed: int,
            allowed_kinds: Iterable[str]) -> str:
    parts = ["failed"] if state == "failed" else []
    if n_syncs:
        parts.append(f"{plural(n_syncs, 'sync')} ({', '.join(kinds)})")
    if n_allowed:
        parts.append(f"allowed {n_allowed} ({', '.join(allowed_kinds)})")
    return " + ".join(parts) or state


def _by_phase(r: Any) -> list[tuple[str, int]]:
    """(phase, count) of an event (one sync) or a per-site record (``count`` syncs, split by
    ``phases``): compile / graph_capture syncs are counted apart from run-phase ones."""
    phases = getattr(r, "phases", None)
    if phases:
        return list(phases.items())
    return [(getattr(r, "phase", "run") or "run", getattr(r, "count", 1))]


def _phrase(e: SyncEvent | RaceEvent, phase: str | None = None) -> str:
    where = f"{os.path.basename(e.filename)}:{e.lineno}" if e.filename else None
    if isinstance(e, RaceEvent) or e.kind == RACE:
        text = f"race: {getattr(e, 'what', None) or '?'}"
    else:
        text = predicted_label(e) + (e.api or e.kind or "?")
        outer = e.ops[0] if e.ops and e.ops[0] != e.op else None
        text += f" via {outer + ' → ' if outer else ''}{e.op}" if e.op else ""
        phase = phase or e.phase
        text += f" while {phase}" if phase != "run" else ""  # compile / graph_capture
    return text + (f" at {where}" if where else "")


def tallies(records: Iterable[Any]) -> tuple[Tally, ...]:
    """A session report stores one record per site with a ``count`` (aggregate.py), split by
    phase; a cell keeps one tally per record and phase, in the records' order. Syncs outside the
    code scope (``TestEntry.outside``) never reach a cell: they never fail."""
    return tuple(Tally(_phrase(r, phase), n) for r in records for phase, n in _by_phase(r) if n)


def site(e: SyncEvent | RaceEvent, phase: str | None = None) -> str:
    """Where a sync is counted (an allowed one budgeted): the CUDA call (or kind) and the
    function and file that made it, and its phase when not "run" (a compile-time sync has its own
    budget). Not the line, so that an edit above a sync does not move its budget."""
    function = getattr(e, "function", None)
    where = f"{function or '?'} ({os.path.basename(e.filename)})" if e.filename else "?"
    phase = phase or getattr(e, "phase", "run")
    return (f"{getattr(e, 'api', None) or e.kind or '?'} in {where}"
            + (f" while {phase}" if phase != "run" else ""))


def per_site(records: Iterable[Any]) -> dict[str, int]:
    """Syncs per :func:`site`: a record stands for ``count`` syncs at its site, split by phase."""
    counts: Counter = Counter()
    for r in records:
        for phase, n in _by_phase(r):
            counts[site(r, phase)] += n
    return dict(counts)


def make_cell(test: TestEntry, run: Run) -> Cell:
    events = list(test.syncs) + list(test.races)
    allowed = list(test.allowed)
    outcome, audit = test.outcome, test.audit
    if outcome in FAILED_OUTCOMES:
        state = "failed"
    elif outcome == "skipped":
        state = "skipped"
    elif audit in ("not_audited", "off"):
        state = audit
    else:
        state = "syncs" if events else "allowed" if allowed else "clean"
    reason = ("no CUDA" if state == "not_audited" and run.device == "cpu" and not run.predicted
              else test.reason)
    numbers = {k: float(v) if _is_number(v) else v for k, v in test.measurements.items()
               if k != timing.SAMPLES_KEY}  # the raw samples are summarised, not listed
    return Cell(state, outcome, tallies(events),
                tuple(sorted({e.kind or "?" for e in events})), tallies(allowed),
                tuple(sorted({e.kind or "?" for e in allowed})), reason, numbers,
                per_site(allowed), timing.samples(test.measurements), per_site(events), audit,
                test.detectors, test.weaker, run.predicted)


def make_run(doc: dict[str, Any], path: str = "") -> Run:
    env = doc.get("environment") or {}
    device = env.get("device") or "cpu"
    return Run(run_label(doc), str(path), env.get("torch") or "?", device,
               env.get("gpu") if device == "cuda" else None, bool(doc.get("complete", True)),
               provenance.code_identity(doc), provenance.describe(doc),
               provenance.detectors_used(doc), provenance.code_scope(doc), is_predicted(doc),
               _predict_why(doc))


def _predict_why(doc: dict[str, Any]) -> str | None:
    options = doc.get("options")
    why = options.get("predict_why") if isinstance(options, Mapping) else None
    return why if isinstance(why, str) else None


def build(docs: Iterable[tuple[str, dict[str, Any]]]) -> Matrix:
    """Matrix from (path, document from :func:`sessionfile.load_document`) pairs.

    Raises SchemaError for two reports of one run, and for a nodeid twice in one report (the
    second would silently replace the first, and with it whatever the first saw)."""
    runs: dict[str, Run] = {}
    cells: dict[tuple[str, str], Cell] = {}
    tests: dict[str, tuple[TestEntry, ...]] = {}
    for path, doc in docs:
        run = make_run(doc, path)
        if run.label in runs:
            raise SchemaError(f"{runs[run.label].path} and {path} are both reports of run "
                              f"'{run.label}'; pass one of them")
        runs[run.label] = run
        for test in doc["tests"]:
            if (run.label, test.nodeid) in cells:
                raise SchemaError(f"{path}: test {test.nodeid!r} appears twice; a report holds "
                                  "one entry per test")
            cells[(run.label, test.nodeid)] = make_cell(test, run)
        tests[run.label] = tuple(doc["tests"])
    ordered = tuple(sorted(runs.values(), key=lambda r: r.sort_key))
    nodeids = tuple(sorted({nodeid for _, nodeid in cells}))
    return Matrix(ordered, nodeids, cells, tests)


# -- comparing ----------------------------------------------------------------------------------

def _short_versions(runs: list[Run]) -> dict[str, str]:
    """'2.11.0' per run label, or the full version where two runs of a series share the short one."""
    short = {r.label: r.torch.split("+", 1)[0] for r in runs}
    dup = {v for v in short.values() if list(short.values()).count(v) > 1}
    return {r.label: (r.torch if short[r.label] in dup else short[r.label]) for r in runs}


def changes(matrix: Matrix) -> list[Change]:
    """Every case whose outcome differs between adjacent versions, in words."""
    out = []
    for series, runs in matrix.series().items():
        if len(runs) < 2:
            continue
        names = _short_versions(runs)
        for nodeid in matrix.nodeids:
            segments: list[tuple[Cell, list[str]]] = []
            for run in runs:
                cell = matrix.cell(run.label, nodeid)
                if segments and segments[-1][0].signature == cell.signature:
                    segments[-1][1].append(names[run.label])
                else:
                    segments.append((cell, [names[run.label]]))
            if len(segments) < 2:
                continue
            words = []
            for i, (cell, versions) in enumerate(segments):
                span = versions[0] if len(versions) == 1 else f"{versions[0]} to {versions[-1]}"
                when = f"from {versions[0]}" if i == len(segments) - 1 else f"on {span}"
                # name the sites that make the difference: for the first run, those gone in the
                # next; for later ones, those new since the previous
                other = segments[i + 1][0] if i == 0 else segments[i - 1][0]
                extra = _few(_differing(cell, other))
                words.append(f"{cell.text} {when}" + (f" ({extra})" if extra else ""))
            out.append(Change(nodeid, series, ", ".join(words)))
    return out


def mixed_runs(matrix: Matrix) -> list[Run]:
    """Runs made by other detector code than the rest: those whose code identity differs from
    the most common one, and every run without provenance (its code cannot be known). Empty for
    a single run, or when every run carries the same identity."""
    if len(matrix.runs) < 2:
        return []
    known = Counter(r.code for r in matrix.runs if r.code)
    common = known.most_common(1)[0][0] if known else None
    return [r for r in matrix.runs if r.code is None or r.code != common]


def audited_count(matrix: Matrix) -> int:
    """Cells whose sync behaviour was judged (clean, syncs or allowed), over all runs."""
    return sum(c.state in AUDITED for c in matrix.cells.values())


def unallowed(matrix: Matrix) -> list[tuple[str, str]]:
    """(run label, nodeid) of every cell with an unallowed sync or race."""
    return [key for key, cell in matrix.cells.items() if cell.syncs]


# -- what a reader sees first ------------------------------------------------------------------

#: how a case the report leaves out is described, per cell state
QUIET_WORDS = {"clean": "clean", "skipped": "skipped", "not_audited": "not audited",
               "off": "not audited (audit off)", "missing": "missing"}


@dataclass(frozen=True)
class CaseOrder:
    """The cases of a report in the order it shows them, and those it leaves out."""

    shown: tuple[str, ...]
    #: cases left out, per the states of their cells ("clean", "clean / skipped"), in order
    hidden: Mapping[str, int]

    @property
    def n_hidden(self) -> int:
        return sum(self.hidden.values())


def order_cases(matrix: Matrix, flagged: Iterable[str] = (), everything: bool = False) -> CaseOrder:
    """The cases that matter first: those the baseline comparison names (``flagged``: its
    regressions, improvements, new cases), then those whose outcome changes between versions
    (:func:`changes`), then those with an unallowed sync, a race or a failure in some run, then
    those with allowed syncs or judged by weaker detectors than asked (``weaker``); each group in
    node id order. The rest (clean, skipped or not
    audited in every run, the same across versions) follow with ``everything``, else they are
    only counted: on a real suite they are most rows, and the few that sync would be pages down."""
    flagged = set(flagged)
    changed = {c.nodeid for c in changes(matrix)}

    def rank(nodeid: str) -> int:
        states = {matrix.cell(r.label, nodeid).state for r in matrix.runs}
        if nodeid in flagged:
            return 0
        if nodeid in changed:
            return 1
        if states & {"syncs", "failed"}:
            return 2
        if "allowed" in states or any(matrix.cell(r.label, nodeid).weaker for r in matrix.runs):
            return 3  # a clean case judged by weaker detectors than asked is shown too
        return 4

    ranks = {n: rank(n) for n in matrix.nodeids}
    ranked = sorted(matrix.nodeids, key=lambda n: (ranks[n], n))
    quiet = [n for n in ranked if ranks[n] == 4]
    if everything or not quiet:
        return CaseOrder(tuple(ranked), {})
    hidden: Counter = Counter()
    for nodeid in quiet:
        words = (QUIET_WORDS[matrix.cell(r.label, nodeid).state] for r in matrix.runs)
        hidden[" / ".join(dict.fromkeys(words))] += 1
    return CaseOrder(tuple(n for n in ranked if ranks[n] < 4), dict(hidden.most_common()))


# -- measurements -------------------------------------------------------------------------------

def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fmt_other(key: str, value: Any) -> str:
    if _is_number(value):
        return f"{key}={value:g}"
    return f"{key}={value if isinstance(value, str) else json.dumps(value, separators=(',', ':'))}"


def _fmt_measure(key: str, value: float) -> str:
    if not _is_number(value):
        return str(value)
    if key == "peak_extra_bytes":
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if abs(value) >= size:
                return f"{value / size:.1f} {unit}"
        return f"{value:.0f} B"
    if key == "ratio_to_copy":
        return f"{value:.1f}×"
    return f"{value:.2f} ms" if key.endswith("_ms") else f"{value:g}"


def measurement_rows(matrix: Matrix) -> list[list[str]]:
    """[case, run, time, × copy, peak extra, also recorded]: the known measurements with the
    change in percent since the previous version of the same series that measured them, then
    every other recorded value as ``key=value``."""
    rows = []
    for nodeid in matrix.nodeids:
        for series, runs in matrix.series().items():
            prev: dict[str, float] = {}
            for run in runs:
                m = matrix.cell(run.label, nodeid).measurements
                if not m:
                    continue
                row = [nodeid, run.label]
                for key, _ in MEASURES:
                    if key not in m:
                        row.append("")
                        continue
                    text = _fmt_measure(key, m[key])
                    if prev.get(key) and _is_number(m[key]):
                        text += f" ({(m[key] - prev[key]) / prev[key] * 100:+.1f}%)"
                    row.append(text)
                    prev[key] = m[key] if _is_number(m[key]) else 0.0
                known = {k for k, _ in MEASURES}
                row.append(", ".join(_fmt_other(k, v) for k, v in sorted(m.items())
                                     if k not in known))
                rows.append(row)
    return rows
