"""Calibration: predictions made on the CPU against syncs measured on the H200.

Agreement is counted per snippet of the GPU runner's suites (corpus, library corpus, cases
corpus; the runs' ground truth) or per merge variant of a cases/ session report: whether it
syncs, the exact kinds (as a multiset), the line of every sync, crashes of code that runs on
the CPU, and calls the predictor could not model. The reference run is the committed one of the
torch version nearest to the predicted one that measured the suite; every disagreement is
listed with what each side saw.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from rulelearn.derive import CAPTURE_WHY, CorpusRun, at_call, measured_events
from syncguard.predict.rules import RuleTable

__all__ = ["Row", "Calibration", "calibrate_suite", "calibrate_cases", "calibrate_held_out",
           "nearest_run", "SUITE_TITLES"]


@dataclass
class Row:
    suite: str
    name: str
    measured: list[tuple[str, int | None]]  # (kind, line)
    predicted: list[tuple[str, int | None]]
    crashed: str | None = None
    unmodelled: list[str] = field(default_factory=list)
    expected_line: int | None = None
    runnable_on_cpu: bool = True

    @property
    def whether_ok(self) -> bool:
        """A call the predictor could not model makes the answer "unknown": never agreement."""
        return (bool(self.measured) == bool(self.predicted) and not self.crashed
                and not self.unmodelled)

    @property
    def kind_ok(self) -> bool:
        return (Counter(k for k, _ in self.measured) == Counter(k for k, _ in self.predicted)
                and not self.crashed and not self.unmodelled)

    @property
    def line_ok(self) -> bool | None:
        """None when neither side has a sync (no line to compare)."""
        if not self.measured or not self.predicted:
            return None
        lines = {ln for _, ln in self.measured}
        return {ln for _, ln in self.predicted} <= lines

    def disagreement(self) -> str | None:
        bits = []
        if self.crashed:
            bits.append(f"raised on the CPU: {self.crashed}")
        if Counter(k for k, _ in self.measured) != Counter(k for k, _ in self.predicted) \
                and not self.crashed:
            bits.append(f"measured {self.measured or 'clean'}, predicted {self.predicted or 'clean'}")
        if self.line_ok is False:
            bits.append(f"lines differ: measured {self.measured}, predicted {self.predicted}")
        if self.unmodelled:
            bits.append("not predicted: " + "; ".join(self.unmodelled[:3]))
        return "; ".join(bits) or None


@dataclass
class Calibration:
    suite: str
    target: str  # the torch predicted for
    reference: str  # the committed run compared with
    rows: list[Row] = field(default_factory=list)

    def _pct(self, ok: int, n: int) -> str:
        return f"{ok}/{n} ({100.0 * ok / n:.1f}%)" if n else "n/a"

    def stats(self) -> dict[str, Any]:
        rows = [r for r in self.rows if r.runnable_on_cpu]
        lines = [r.line_ok for r in rows if r.line_ok is not None]
        return {
            "suite": self.suite, "target": self.target, "reference": self.reference,
            "items": len(self.rows), "runnable_on_cpu": len(rows),
            "whether": [sum(r.whether_ok for r in rows), len(rows)],
            "kind": [sum(r.kind_ok for r in rows), len(rows)],
            "line": [sum(lines), len(lines)],
            "crashes": sum(1 for r in rows if r.crashed),
            "not_runnable_on_cpu": [r.name for r in self.rows if not r.runnable_on_cpu],
            "with_unmodelled_calls": [r.name for r in rows if r.unmodelled],
        }

    def to_dict(self) -> dict:
        return {"stats": self.stats(), "rows": [{
            "name": r.name, "measured": r.measured, "predicted": r.predicted,
            "crashed": r.crashed, "unmodelled": r.unmodelled,
            "runnable_on_cpu": r.runnable_on_cpu, "whether_ok": r.whether_ok,
            "kind_ok": r.kind_ok, "line_ok": r.line_ok} for r in self.rows]}

    def markdown_row(self) -> str:
        s = self.stats()
        return (f"| {self.suite} | {self.target} | {self.reference} | {s['runnable_on_cpu']}"
                f"/{s['items']} | {self._pct(*s['whether'])} | {self._pct(*s['kind'])} | "
                f"{self._pct(*s['line'])} | {s['crashes']} | {len(s['with_unmodelled_calls'])} |")


def nearest_run(runs: list, target: str, table: RuleTable) -> Any:
    by_version = {r.torch: r for r in runs}
    return by_version[table.nearest(list(by_version), target)]


def _describe(u, root: str) -> str:
    where = (f"{os.path.relpath(u.filename, root)}:{u.lineno}" if u.filename else "<unknown>")
    return f"{u.why} at {where}"


def _code(text: str) -> str:
    return text.split("#", 1)[0].strip()


def _line_mapper(root: str, report_rel: str, source_rel: str,
                 prov: dict[str, Any] | None = None):
    """Line of ``source_rel`` as the run saw it -> its line now, matched by code text
    (comments dropped). The run saw the source of the parent of the commit that added the
    report (results and source edits were committed together); a line that cannot be matched
    to exactly one line now stays as recorded, and then counts as a line disagreement.
    ``prov``: the report's provenance, where the caller has read the report already (it is
    read from ``report_rel`` otherwise)."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True,
                              check=True).stdout

    try:
        if prov is None:
            with open(os.path.join(root, report_rel), encoding="utf-8") as f:
                prov = json.load(f).get("provenance") or {}
        named = prov.get("git_commit") or (prov.get("project") or {}).get("commit")
        if prov.get("converted_from") and not named:  # a converted run: the original's history
            report_rel = prov["converted_from"]
        if named:  # a report with provenance names the exact source it ran
            source = f"{named}:{source_rel}"
        else:  # older reports: the parent of the last commit that added or changed the report,
            # under the path it was recorded at (reports/archive/ holds moved, unedited runs)
            history_rel = report_rel.replace("reports/archive/", "reports/", 1)
            commit = git("log", "--diff-filter=AM", "--format=%H", "-1", "--",
                         history_rel).strip()
            source = f"{commit}^:{source_rel}" if commit else None
        old = git("show", source).splitlines() if source else None
        with open(os.path.join(root, source_rel), encoding="utf-8") as f:
            now = f.read().splitlines()
    except (OSError, ValueError, subprocess.CalledProcessError):
        old = None

    def remap(line):
        if old is None or line is None or not 0 < line <= len(old):
            return line
        want = _code(old[line - 1])
        hits = [i + 1 for i, text in enumerate(now) if want and _code(text) == want]
        return hits[0] if len(hits) == 1 else line

    return remap


#: suite names as the GPU runner spells them (tools/corpus_report.py ``corpus``)
SUITE_TITLES = {"corpus": "corpus (tests/gpu/corpus.py)",
                "library": "library corpus (tests/gpu/library_corpus.py LIBRARY)",
                "cases": "cases corpus (merge variants x deterministic, CPU-path batching)"}


def _row(suite: str, snip: dict, record: dict, remap, predicted, unmodelled, crashed,
         root: str, runnable: bool) -> Row:
    measured = [(e["kind"], remap(e["line"])) for e in measured_events(record) or []]
    return Row(suite, snip["name"], measured, predicted, crashed,
               [_describe(u, root) for u in unmodelled], snip["line"], runnable)


def _predicted_line(e, snip: dict) -> int | None:
    """A predicted event made by the snippet's call (on its line, or below it on the stack)
    is at the snippet's line, as the GPU run records every wait of the call there."""
    return snip["line"] if at_call(e.filename, e.lineno, e.stack, snip) else e.lineno


def calibrate_suite(suite: str, snippets: list[dict], ran: dict, run: CorpusRun, target: str,
                    root: str = ".", not_runnable=lambda snip, crashed: False) -> Calibration:
    """Rows of one suite: each snippet's predictions (``ran``: run_snippets) against what
    ``run`` measured; snippets the run did not measure are left out. ``not_runnable`` says
    when a crash is the CPU build's limit (e.g. Triton), not a failure of the predictor."""
    cal = Calibration(SUITE_TITLES.get(suite, suite), target, run.path)
    remaps: dict[str, Callable] = {}
    for snip in snippets:
        record = run.snippets.get(snip["id"])
        if snip["corpus"] != suite or record is None or measured_events(record) is None:
            continue
        remap = remaps.setdefault(snip["file"], _line_mapper(root, run.path, snip["file"]))
        r = ran[snip["id"]]
        cal.rows.append(_row(cal.suite, snip, record, remap,
                             [(e.kind, _predicted_line(e, snip)) for e in r.syncs],
                             r.unmodelled, r.crashed, root,
                             not (r.crashed and not_runnable(snip, r.crashed))))
    return cal


def calibrate_cases(session_json: str, root: str, target: str,
                    table: RuleTable | None = None) -> Calibration:
    """Merge variants: measured = the syncs the GPU run allowed as ``declared:`` inside
    ``test_declared_sync[variant]`` (the variant's own call, set-up excluded)."""
    from cases.merge import VARIANTS, representative_inputs

    from syncguard.predict import predicting
    from syncguard.reporting.sessionfile import load_document

    # read once, and checked as any report is: its counts, expanded below, are bounded
    data = load_document(session_json)
    cal = Calibration("cases/merge.py variants", target, os.path.relpath(session_json, root))
    tests = {t.nodeid: t for t in data["tests"]}
    remap = _line_mapper(root, os.path.relpath(session_json, root), "cases/merge.py",
                         data.get("provenance") or {})
    for name, v in VARIANTS.items():
        # the id gained its mode (``-default``) when declarations became per mode; session
        # reports from schema 2 on store one record per site with a ``count`` (a version 1
        # report's events come back from load_document aggregated the same way)
        test = (tests.get(f"cases/test_merge.py::test_declared_sync[{name}]")
                or tests.get(f"cases/test_merge.py::test_declared_sync[{name}-default]"))
        measured = [(e.kind, remap(e.lineno))
                    for e in ((test.allowed + test.syncs) if test else ())
                    if (e.reason or "").startswith("declared:")
                    and (e.filename or "").endswith("merge.py")
                    for _ in range(e.count)]
        with predicting(target, rules=table) as p:
            x, mask, mm = representative_inputs(name, 256, 64)
            s0, u0 = len(p.syncs), len(p.unmodelled)
            crashed = None
            try:
                v.fn(x, mask, mm)
            except Exception as e:  # noqa: BLE001
                crashed = f"{type(e).__name__}: {e}"
            predicted = [(e.kind, e.lineno) for e in p.syncs[s0:]]
            unmodelled = [_describe(u, root) for u in p.unmodelled[u0:]]
        runnable = not (v.needs_triton_on_cuda and crashed and "triton" in crashed)
        cal.rows.append(Row(cal.suite, name, measured, predicted, crashed, unmodelled,
                            runnable_on_cpu=runnable))
    return cal


def calibrate_held_out(snippets: list[dict], calls: dict, runs: list, run_of: Callable,
                       target: str, root: str = ".", not_runnable=lambda s, c: False,
                       crashed: dict | None = None) -> Calibration:
    """Leave one snippet out: the rules are derived from every other snippet's runs, then the
    snippet's own recorded calls (``calls``: observe) are looked up in that table, as the
    engine would. The plain calibration tests the table on the runs it was learned from; this
    one says how it does on code it has not seen. ``run_of(snip)``: the run compared with."""
    from rulelearn.derive import derive

    crashed = crashed or {}
    cal = Calibration("all suites, each snippet held out of the rules", target,
                      ", ".join(sorted({run_of(s).path for s in snippets if run_of(s)})))
    remaps: dict[tuple, Callable] = {}
    for snip in snippets:
        run = run_of(snip)
        record = run.snippets.get(snip["id"]) if run else None
        if record is None or measured_events(record) is None:
            continue
        remap = remaps.setdefault((run.path, snip["file"]),
                                  _line_mapper(root, run.path, snip["file"]))
        if snip["id"] not in calls:  # not run (graph capture) or raised: as the engine said
            cal.rows.append(_row(cal.suite, snip, record, remap, [], [], crashed.get(snip["id"]),
                                 root, not (snip["id"] in crashed
                                            and not_runnable(snip, crashed[snip["id"]]))))
            if not crashed.get(snip["id"]):
                cal.rows[-1].unmodelled.append(CAPTURE_WHY)
            continue
        table = derive(runs, [s for s in snippets if s is not snip], calls).table
        predicted, unmodelled = [], []
        for o in calls[snip["id"]]:
            v = table.lookup(o.op, dict(o.facts), target, device_kernel=o.device_kernel)
            if v.status == "unmodelled":
                unmodelled.append(f"{v.why} at {os.path.relpath(o.filename, root)}:{o.lineno}"
                                  if o.filename else v.why)
            line = snip["line"] if at_call(o.filename, o.lineno, o.stack, snip) else o.lineno
            predicted += [(sync["kind"], line) for sync in v.syncs]
        row = _row(cal.suite, snip, record, remap, predicted, [], None, root, True)
        row.unmodelled = unmodelled
        cal.rows.append(row)
    return cal
