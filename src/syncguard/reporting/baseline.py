"""The baseline: accepted outcomes per run and case, per-site sync budgets, timings with their
noise band; and the comparison of a matrix with it (the gate of ``--fail-on regression``).

Pure functions only: :mod:`syncguard.cli` reads and writes the file.

Baseline document (``schema_version`` 1), keyed by run label and nodeid so that a GPU run is
only ever compared with the GPU baseline; per run, a ``provenance`` record of what decides what the
run could see and of the detector code that made it::

    {"schema_version": 1, "kind": "syncguard-baseline",
     "provenance": {"torch 2.11.0+cu130 · NVIDIA H200": {
         "detectors": "cuda", "scope": "cases/ (default; ...)", "code": "<sha256>"}},
     "runs": {"torch 2.11.0+cu130 · NVIDIA H200": {
         "cases/test_merge.py::test_x[gpu_mask]": {
             "state": "allowed", "audited": true, "syncs": 0, "kinds": [], "allowed": 1,
             "allowed_kinds": ["blocking_copy_d2h"],
             "budget": {"cudaStreamSynchronize in merge_index_put_gpu_mask (merge.py)": 1},
             "sync_sites": {}, "detectors": ["cuda"],
             "timing": {"median_ms": {"median": 1.2, "band": 0.02, "processes": 2, "reps": 10}}}}}}

``state`` is the state the gate judges (an xfailed test is "failed": its audit stopped early);
``sync_sites`` counts unallowed syncs and races per site as ``budget`` counts allowed ones;
``detectors`` names the detectors that judged an audited case (``TestEntry.detectors``).
A run record's ``predicted: true`` says the run's syncs were predicted (CPU stand-ins, rules
measured on a GPU); absent, it was measured. The CLI compares a predicted run only with a
predicted baseline run of its label, unless ``--allow-predicted``
(:func:`predicted_against_measured`).
``provenance``, ``audited``, ``sync_sites`` and ``detectors`` are optional: a baseline written
before them is read, the checks that need them are skipped, and the comparison says so in its
notes; so does a report written before its tests named their detectors (session schema 4).

A gate without holes: under ``--fail-on regression`` each of these is a regression --

* a case now fails (xfailed counts as failed, xpassed as passed), has more unallowed syncs or
  races, a kind it never had, or an allowed kind it never had;
* more allowed syncs at a site than the site's budget, or more unallowed ones at a site than the
  baseline had there (a site the baseline never saw has 0: a sync that moved is seen);
* a case that was audited in the baseline (a failed one included) and is now skipped, not
  audited, off or missing;
* a case the baseline did not judge (skipped, off, not audited), or a new case, that is now
  audited with unallowed syncs (record and warn modes fail no test);
* a run whose detectors or code scope differ from the baseline run's (a fallback or a narrower
  scope sees fewer syncs, which would read as an improvement), and an incomplete run;
* a case judged, there and now, by other detectors than the baseline's for it: one test's region
  can fall back while the run's others do not, and the run's record still says ``cuda``;
* a run of the baseline that is not among the inputs;
* no case audited at all, in any input;
* a gated timing slower than its measured noise band allows, or no longer measured enough to
  gate (:mod:`syncguard.reporting.timing`).

Runs made by other detector code than the baseline's run (``code``) are not compared at all: the
CLI refuses them unless ``--allow-mixed-commits`` (:func:`other_code`).

Updating keeps the entries of runs that were not part of the update, so a partial set of reports
never drops a run; :func:`diff` lists what an update accepts.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping

from syncguard.reporting import provenance
from syncguard.records import schema
from syncguard.reporting import timing
from syncguard.records.schema import SCHEMA_VERSION, SchemaError, check_schema
from syncguard.reporting.matrix import AUDITED, STATES, UNJUDGED, Cell, Matrix, Run, audited_count, summary

BASELINE_KIND = "syncguard-baseline"
WHOLE_RUN = "(whole run)"
ALL_RUNS = "(all runs)"


@dataclass(frozen=True)
class Delta:
    """One case of one run compared with the baseline."""

    label: str
    nodeid: str
    before: str
    after: str
    why: str = ""


@dataclass(frozen=True)
class Comparison:
    regressions: tuple[Delta, ...] = ()
    improvements: tuple[Delta, ...] = ()
    new_runs: tuple[str, ...] = ()
    new_cases: tuple[Delta, ...] = ()
    missing: tuple[Delta, ...] = ()  # cases not audited in the baseline either: not judged
    timings: tuple[str, ...] = ()  # one sentence per gated timing, threshold included
    ungated_timings: int = 0  # timings shown but not gated (too few processes/repetitions)
    notes: tuple[str, ...] = ()  # what was not compared, and why


def gate_state(cell: Cell) -> str:
    """The state the gate judges: an xfailed test counts as failed (its audit stopped at the
    expected failure, so it saw less than a passing run); an xpassed one ran to its end."""
    return "failed" if cell.outcome == "xfailed" else cell.state


def entry(cell: Cell) -> dict[str, Any]:
    out: dict[str, Any] = {"state": gate_state(cell), "audited": cell.audited,
                           "syncs": cell.n_syncs, "kinds": list(cell.kinds),
                           "allowed": cell.n_allowed, "allowed_kinds": list(cell.allowed_kinds),
                           "budget": dict(sorted(cell.sites.items())),
                           "sync_sites": dict(sorted(cell.sync_sites.items()))}
    if cell.detectors is not None:
        out["detectors"] = list(cell.detectors)
    bands = {k: timing.band(v) for k, v in cell.samples.items()}
    gated = {k: b.to_dict() for k, b in sorted(bands.items()) if b.gateable}
    if gated:
        out["timing"] = gated
    return out


#: per run, what decides which syncs it could see: (Run attribute, words for the output)
VISIBILITY = (("detectors", "detectors"), ("scope", "code scope"))


def run_record(run: Run) -> dict[str, Any]:
    """The baseline's record of a run: what it could see (:data:`VISIBILITY`) and the detector
    code that made it (``code``, provenance.code_identity)."""
    return {**{key: getattr(run, key) for key, _ in VISIBILITY}, "code": run.code,
            **({"predicted": True} if run.predicted else {})}


def predicted_against_measured(matrix: Matrix, baseline: dict[str, Any]) -> list[str]:
    """The labels of predicted runs that the baseline would judge as measured ones: the baseline
    holds no predicted run of their label (it measured that run, or has none of it). The CLI
    refuses to compare them unless ``--allow-predicted``: a prediction is not a measurement."""
    records = baseline.get("provenance", {})
    return [run.label for run in matrix.runs
            if run.predicted and not (records.get(run.label) or {}).get("predicted")]


def make(matrix: Matrix, old: dict[str, Any] | None = None,
         drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """Baseline accepting every cell of ``matrix``; runs of ``old`` not in the matrix are kept,
    except the ``drop`` labels (a torch version no longer measured, removed on purpose: the
    gate counts a kept run that is absent from its inputs as a regression)."""
    runs = {k: v for k, v in (old or {}).get("runs", {}).items() if k not in drop}
    records = {k: v for k, v in (old or {}).get("provenance", {}).items() if k in runs}
    for run in matrix.runs:
        runs[run.label] = {n: entry(matrix.cell(run.label, n)) for n in matrix.nodeids
                           if matrix.cell(run.label, n).state != "missing"}
        records[run.label] = run_record(run)
    return {"schema_version": SCHEMA_VERSION, "kind": BASELINE_KIND,
            "provenance": {label: records[label] for label in sorted(records)},
            "runs": {label: runs[label] for label in sorted(runs)}}


def resolve_drops(names: list[str], baseline: dict[str, Any] | None,
                  given: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Baseline run labels for ``--drop-baseline-run`` arguments: a whole label, or a torch
    version (``2.8.0`` or ``2.8.0+cu128``) naming exactly one run. Anything else is a one-line
    ValueError, and so is a run among the ``given`` input runs: the update rewrites it from its
    report, so dropping it would silently do nothing."""
    labels = sorted((baseline or {}).get("runs", {}))
    out = []
    for name in names:
        hits = [lb for lb in labels if lb == name or lb.startswith(f"torch {name}+")
                or lb.startswith(f"torch {name} ")]
        if len(hits) != 1:
            raise ValueError(f"--drop-baseline-run {name!r}: "
                             + ("no baseline run matches" if not hits else
                                f"matches {len(hits)} runs ({'; '.join(hits)})")
                             + f"; baseline runs: {'; '.join(labels) or 'none'}")
        if hits[0] in given:
            raise ValueError(f"--drop-baseline-run {name!r}: run {hits[0]!r} is among the input "
                             "reports, which the update writes back; leave its report off the "
                             "inputs to drop it")
        out.append(hits[0])
    return tuple(out)


def _count_ok(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def _names_ok(names: Any) -> bool:
    return isinstance(names, list) and all(isinstance(x, str) for x in names)


def _budget_ok(budget: Any) -> bool:
    return isinstance(budget, dict) and all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in budget.items())


def _check_most(e: Any, nodeid: str, label: str) -> None:
    """SchemaError naming a count past :data:`~syncguard.records.schema.MAX_SYNCS` (why a maximum:
    there): an entry is one report's case, and a report holds no more. Other shapes are left to
    the checks after it."""
    if not isinstance(e, dict):
        return
    counts = [(f, e.get(f)) for f in ("syncs", "allowed")]
    counts += [(f"{f}[{k!r}]", v) for f in ("budget", "sync_sites")
               if isinstance(e.get(f), dict) for k, v in e[f].items()]
    for where, n in counts:
        if isinstance(n, int) and n > schema.MAX_SYNCS:
            raise SchemaError(f"entry for {nodeid!r} in run {label!r}: {where} is {n}, more than "
                              f"the {schema.MAX_SYNCS} syncs a report holds")


def check(data: Any) -> dict[str, Any]:
    """Validate a loaded baseline; raises SchemaError with the bad value named."""
    if isinstance(data, dict) and data.get("kind") == "syncguard-session":
        raise SchemaError("is a session report, not a baseline: pass it as a REPORT, or write a "
                          "baseline from it with --update-baseline")
    check_schema(data, "baseline")
    if data.get("kind") != BASELINE_KIND:
        raise SchemaError(f"kind is {data.get('kind')!r}, not {BASELINE_KIND!r}")
    if not isinstance(data.get("runs"), dict):
        raise SchemaError("'runs' is missing or not an object")
    records = data.get("provenance", {})
    if not isinstance(records, dict) or not all(
            isinstance(r, dict) and all(isinstance(r.get(k), (str, type(None)))
                                        for k in ("detectors", "scope", "code"))
            and isinstance(r.get("predicted", False), bool)
            for r in records.values()):
        raise SchemaError("'provenance' is not an object of run records (detectors, scope, "
                          "code: strings or null; predicted: true or false)")
    for label, cases in data["runs"].items():
        if not isinstance(cases, dict):
            raise SchemaError(f"run {label!r} is not an object")
        for nodeid, e in cases.items():
            _check_most(e, nodeid, label)
            if (not isinstance(e, dict) or e.get("state") not in STATES
                    or not _count_ok(e.get("syncs")) or not _count_ok(e.get("allowed", 0))
                    or not _names_ok(e.get("kinds")) or not _names_ok(e.get("allowed_kinds", []))):
                raise SchemaError(f"malformed entry for {nodeid!r} in run {label!r}")
            if not _budget_ok(e.get("budget")):
                raise SchemaError(f"entry for {nodeid!r} in run {label!r} has no valid per-site "
                                  "'budget' (a baseline older than budgets: rewrite it with "
                                  "--update-baseline)")
            if not _budget_ok(e.get("sync_sites", {})) or not isinstance(e.get("audited", True), bool):
                raise SchemaError(f"entry for {nodeid!r} in run {label!r}: 'sync_sites' or "
                                  "'audited' is malformed")
            if "detectors" in e and not _names_ok(e["detectors"]):
                raise SchemaError(f"entry for {nodeid!r} in run {label!r}: 'detectors' is "
                                  f"{repr(e['detectors'])[:40]}, not a list of detector names")
            if "timing" in e and not isinstance(e["timing"], dict):
                raise SchemaError(f"entry for {nodeid!r} in run {label!r}: 'timing' is not an object")
    return data


def _text(e: dict[str, Any]) -> str:
    if e["state"] in UNJUDGED:
        return e["state"].replace("_", " ")
    return summary(e["state"], e["syncs"], e["kinds"], e.get("allowed", 0), e.get("allowed_kinds", []))


def _kinds(now: set[str], before: set[str], what: str = "") -> tuple[list[str], list[str]]:
    """(worse, better): kinds ``now`` has that ``before`` lacks, and the other way round."""
    new, gone = sorted(now - before), sorted(before - now)
    return ([f"new {what}kind {', '.join(new)}"] if new else [],
            [f"no more {what}{', '.join(gone)}"] if gone else [])


def _sites(now: Mapping[str, int], before: Mapping[str, int], noun: str,
           limit: str) -> tuple[list[str], list[str]]:
    """(worse, better): sites with more syncs than ``before`` allows (a site it never saw
    allows 0), and sites with fewer."""
    worse, better = [], []
    for where in sorted(set(now) | set(before)):
        n, b = now.get(where, 0), before.get(where, 0)
        if n != b:
            (worse if n > b else better).append(
                f"{noun} at {where}: {n} {'>' if n > b else '<'} {limit} {b}")
    return worse, better


def _judge_case(cell: Cell, b: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(worse, better) reasons for one case of one run. Fields an older baseline lacks are not
    judged: without ``audited`` an entry stored an xfailed case as passed and a failed one as
    never audited; without ``sync_sites`` it has no unallowed syncs per site."""
    worse, better = [], []
    now = gate_state(cell) if "audited" in b else cell.state
    if now == "failed" and b["state"] != "failed":
        worse.append("now fails")
    elif b["state"] == "failed" and now != "failed":
        better.append("no longer fails")
    if b.get("audited", b["state"] in AUDITED) and cell.state in UNJUDGED:
        worse.append(f"was audited, now {cell.state.replace('_', ' ')}")
    if b["state"] in UNJUDGED and cell.syncs:
        worse.append(f"not judged in the baseline ({b['state'].replace('_', ' ')}), now "
                     f"{cell.n_syncs} unallowed sync(s)")
    if cell.state in UNJUDGED or b["state"] in UNJUDGED:
        return worse, better
    n = cell.n_syncs
    if n != b["syncs"]:
        (worse if n > b["syncs"] else better).append(f"syncs {b['syncs']} -> {n}")
    for more, fewer in (_kinds(set(cell.kinds), set(b["kinds"])),
                        _kinds(set(cell.allowed_kinds), set(b.get("allowed_kinds", [])), "allowed "),
                        _sites(cell.sites, b["budget"], "allowed syncs", "budget")):
        worse += more
        better += fewer
    if "sync_sites" in b:  # fewer unallowed syncs are already said by the count
        worse += _sites(cell.sync_sites, b["sync_sites"], "unallowed syncs", "baseline")[0]
    return worse, better


def _judged(cell: Cell, b: dict[str, Any]) -> bool:
    """The case's syncs were judged now and in the baseline (a failed case's audit included)."""
    return cell.audited and b.get("audited", b["state"] in AUDITED)


def _names(detectors: list[str] | tuple[str, ...] | None) -> str:
    return ",".join(detectors) if detectors is not None else "unknown"


def _judge_detectors(cell: Cell, b: dict[str, Any]) -> tuple[list[str], tuple[str, ...]]:
    """(worse, sides that lack them) for the detectors that judged one case, there and now.

    Why per case and not only per run (:data:`VISIBILITY`): one test's region can fall back to
    the torch hooks, which see fewer syncs, while the run's others keep ``cuda``; the run's
    record still says ``cuda`` and the test's clean result read as no regression. Any other set
    is a change, as for a run. A side without them ("baseline": an older baseline; "report":
    a report before session schema 4) is named for the notes, never taken as equal."""
    if not _judged(cell, b):
        return [], ()
    before, now = b.get("detectors"), cell.detectors
    lacking = (("baseline",) if before is None else ()) + (("report",) if now is None else ())
    if lacking or set(before) == set(now):
        return [], lacking
    return [f"detectors {_names(before)} -> {_names(now)}"], ()


def _short(code: str | None) -> str:
    return code[:10] if code else "unknown"


def other_code(matrix: Matrix, baseline: dict[str, Any]) -> list[str]:
    """Runs made by other detector code than the baseline run of the same label (a run or a
    record without provenance counts as other code, as :func:`matrix.mixed_runs` counts it),
    in words; baseline runs without a record (older baselines) are not compared."""
    out = []
    for run in matrix.runs:
        record = baseline.get("provenance", {}).get(run.label)
        if record is not None and (run.code is None or run.code != record.get("code")):
            out.append(f"{run.label} (code {_short(run.code)}, the baseline's "
                       f"{_short(record.get('code'))})")
    return out


def _judge_run(run: Run, record: dict[str, Any] | None) -> list[Delta]:
    """Whole-run regressions: an incomplete run, and a change of what the run could see. Fewer
    detectors (a fallback) or a narrower scope see fewer syncs, which would otherwise pass as an
    improvement."""
    out = []
    if not run.complete:
        out.append(Delta(run.label, WHOLE_RUN, "complete", "incomplete",
                         "run incomplete: its report says complete: false (the session ended "
                         "before its tests did)"))
    for key, words in VISIBILITY if record is not None else ():
        before, now = record.get(key), getattr(run, key)
        if key == "scope" and isinstance(before, str):
            before = provenance.scope_key(before)  # written before the text named no source
        if before != now:
            out.append(Delta(run.label, WHOLE_RUN, str(before), str(now),
                             f"{words} {before} -> {now}"))
    return out


#: what a note says of cases whose detectors were not compared, by the side that lacks them
_NO_DETECTORS = {
    "baseline": ("baseline case(s) without per-test detectors (an older baseline)",
                 "rewrite it with --update-baseline"),
    "report": ("report(s) without per-test detectors (written before session schema 4)",
               "write the report again with this syncguard")}


def _notes(matrix: Matrix, baseline: dict[str, Any],
           uncompared: Counter[tuple[str, str]]) -> list[str]:
    """What was not compared, and why; ``uncompared`` counts judged cases whose detectors were
    not, by (side lacking them, run label)."""
    records = baseline.get("provenance", {})
    old = [r.label for r in matrix.runs if r.label in baseline["runs"] and r.label not in records]
    notes = [f"baseline run(s) without a provenance record (an older baseline): detectors, "
             f"code scope and detector code not compared for {'; '.join(old)}; rewrite it with "
             "--update-baseline"] if old else []
    other = other_code(matrix, baseline)
    if other:
        notes.append("made by other detector code than the baseline (compared only because of "
                     f"--allow-mixed-commits): {'; '.join(other)}")
    for side, (what, fix) in _NO_DETECTORS.items():
        runs = [f"{r.label} ({uncompared[side, r.label]} case(s))" for r in matrix.runs
                if uncompared[side, r.label]]
        if runs:
            notes.append(f"{what}: which detectors judged each test not compared for "
                         f"{'; '.join(runs)}; {fix}")
    return notes


def compare(matrix: Matrix, baseline: dict[str, Any]) -> Comparison:
    """Each run's cells against the baseline entries of the same run label (see the module
    docstring for what counts as a regression)."""
    reg: list[Delta] = []
    imp: list[Delta] = []
    new_cases: list[Delta] = []
    missing: list[Delta] = []
    new_runs: list[str] = []
    timing_lines: list[str] = []
    ungated = 0
    uncompared: Counter[tuple[str, str]] = Counter()
    given = {r.label for r in matrix.runs}
    for label in sorted(set(baseline["runs"]) - given):
        reg.append(Delta(label, WHOLE_RUN, "in the baseline", "absent from the inputs",
                         "a baseline run was not given"))
    if audited_count(matrix) == 0:
        reg.append(Delta(ALL_RUNS, "(all cases)", "", "no case audited",
                         "zero audited cases: nothing was checked (a CPU run checks no sync)"))
    for run in matrix.runs:
        accepted = baseline["runs"].get(run.label)
        reg += _judge_run(run, baseline.get("provenance", {}).get(run.label))
        if accepted is None:
            new_runs.append(run.label)
            continue
        for nodeid in sorted(set(matrix.nodeids) | set(accepted)):
            cell, b = matrix.cell(run.label, nodeid), accepted.get(nodeid)
            if b is None:
                if cell.syncs:  # a site the baseline never saw has a budget of 0
                    reg.append(Delta(run.label, nodeid, "not in baseline", cell.detail,
                                     f"a new case with {cell.n_syncs} unallowed sync(s)"))
                elif cell.state != "missing":
                    new_cases.append(Delta(run.label, nodeid, "not in baseline", cell.text))
                continue
            worse, better = _judge_case(cell, b)
            other, lacking = _judge_detectors(cell, b)
            worse += other
            uncompared.update((side, run.label) for side in lacking)
            slower, sentences, n = timing.judge_case(cell.samples, b.get("timing") or {},
                                                     cell.measurements)
            timing_lines += [f"{nodeid} on {run.label}: {x}" for x in sentences]
            worse += slower
            ungated += n
            before = _text(b)
            if worse:
                reg.append(Delta(run.label, nodeid, before, cell.detail, "; ".join(worse)))
            elif cell.state == "missing":
                missing.append(Delta(run.label, nodeid, before, "missing"))
            elif better:
                imp.append(Delta(run.label, nodeid, before, cell.detail, "; ".join(better)))
    return Comparison(tuple(reg), tuple(imp), tuple(new_runs), tuple(new_cases), tuple(missing),
                      tuple(timing_lines), ungated, tuple(_notes(matrix, baseline, uncompared)))


def diff(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """What replacing ``old`` by ``new`` accepts, one line per changed entry."""
    old_runs = (old or {}).get("runs", {})
    lines = []
    for label in sorted(set(old_runs) | set(new["runs"])):
        before, after = old_runs.get(label), new["runs"].get(label)
        was, now = ((old or {}).get("provenance", {}).get(label),
                    new.get("provenance", {}).get(label))
        if before is not None and after is not None and was != now:
            lines.append(f"~ run {label}: " + "; ".join(
                f"{key} {(was or {}).get(key)} -> {now.get(key)}" for key in now
                if (was or {}).get(key) != now.get(key)))
        if before is None:
            lines.append(f"+ run {label} ({len(after)} cases)")
            continue
        if after is None:  # make() keeps old runs unless told to drop them (--drop-baseline-run)
            lines.append(f"- run {label}")
            continue
        for nodeid in sorted(set(before) | set(after)):
            b, a = before.get(nodeid), after.get(nodeid)
            if b == a:
                continue
            if b is None:
                lines.append(f"+ {nodeid} on {label}: {_text(a)}")
            elif a is None:
                lines.append(f"- {nodeid} on {label}: was {_text(b)}")
            else:
                what = [f"{_text(b)} -> {_text(a)}"] if _text(b) != _text(a) else []
                for key in ("budget", "sync_sites"):
                    if b.get(key) != a.get(key):
                        what.append(f"{key.replace('_', ' ')} {b.get(key)} -> {a.get(key)}")
                if b.get("detectors") != a.get("detectors"):
                    what.append(f"detectors {_names(b.get('detectors'))} -> "
                                f"{_names(a.get('detectors'))}")
                if b.get("timing") != a.get("timing"):
                    what.append("timing")
                lines.append(f"~ {nodeid} on {label}: {'; '.join(what) or 'details'}")
    return lines
