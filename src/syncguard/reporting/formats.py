"""Output formats of ``syncguard report``: the run matrix as a table, markdown or JSON.

Each format is one :class:`Format` in :data:`FORMATS`; the CLI takes its ``--format`` choices
from that mapping, so adding a format touches this file only.

The table and the markdown lead with what matters: one run opens with the summary pytest's
terminal prints (:func:`syncguard.reporting.explain.summary_lines`: counts and the sites that
synced most), and the rows follow in :func:`syncguard.reporting.matrix.order_cases`' order, the
clean, skipped and unaudited cases only counted unless ``everything`` (``--all``). JSON, read by
tools, always holds every case in node id order.
"""
from __future__ import annotations

import io
import json
import re
from dataclasses import asdict, dataclass
from typing import Any, Callable

from syncguard.records.events import SCHEMA_VERSION
from syncguard.reporting import timing
from syncguard.reporting.baseline import Comparison, Delta
from syncguard.reporting.explain import prediction_line, summary_lines
from syncguard.reporting.matrix import (MEASURES, OTHER_TITLE, CaseOrder, Cell, Matrix, changes,
                                        measurement_rows, mixed_runs, order_cases, phrases, plural,
                                        unallowed)
from syncguard.reporting.sessionfile import summarize
from syncguard.reporting.weaker import summary_line as weaker_summary

#: provenance rows shown per run: (key of syncguard.reporting.provenance.describe, title)
PROVENANCE_ROWS = (("commit", "project commit"), ("code", "detector code"),
                   ("detectors", "detectors"), ("torch", "torch"), ("gpu", "GPU"),
                   ("driver", "driver"), ("hypothesis", "hypothesis"))
MIXED_MARK = "†"
CPU_NOTE = ("A CPU run checks no sync: without CUDA every case is \"not audited\"; only the "
            "correctness properties ran. Sync behaviour is proven by the GPU columns.")
PREDICTED_NOTE = ("Predicted, not measured: in a predicted run CUDA code ran on CPU stand-ins "
                  "and each sync is predicted from rules measured on a GPU (its cells end "
                  "\"predicted\"; \"not predicted\" where a call could not be). Measured GPU "
                  "runs are the proof.")


def _column(matrix: Matrix, run) -> str:
    return run.label + (f" {MIXED_MARK}" if run in mixed_runs(matrix) else "")


def _notes(matrix: Matrix) -> list[str]:
    notes = []
    if mixed_runs(matrix):
        notes.append(f"{MIXED_MARK} made by other detector code than the other columns, or "
                     "without provenance (compared only because of --allow-mixed-commits): a "
                     "difference in such a column may come from the detector, not from torch.")
    if any(r.predicted for r in matrix.runs):
        notes.append(PREDICTED_NOTE)
    if any(r.device != "cuda" and not r.predicted for r in matrix.runs):
        notes.append(CPU_NOTE)
    if len(matrix.runs) > 1:  # one run's summary says it (explain.summary_lines)
        for run in matrix.runs:
            line = weaker_summary(matrix.cell(run.label, n).weaker for n in matrix.nodeids)
            if line:
                notes.append(f"{run.label}: {line}")
    return notes


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _totals(matrix: Matrix) -> str:
    n_bad = len({n for _, n in unallowed(matrix)})
    incomplete = [r.label for r in matrix.runs if not r.complete]
    text = (f"{plural(len(matrix.runs), 'run')}, {plural(len(matrix.nodeids), 'case')}; "
            f"{n_bad} with unallowed syncs or races")
    return text + (f"; incomplete: {', '.join(incomplete)}" if incomplete else "")


def _summary(matrix: Matrix) -> list[str]:
    """One run's session summary, as pytest's terminal summary prints it; none for several runs,
    whose lead is the cases that differ between them."""
    if len(matrix.runs) != 1 or matrix.runs[0].label not in matrix.tests:
        return []
    run = matrix.runs[0]
    tests = list(matrix.tests[run.label])
    prediction = prediction_line(tests, run.torch, run.predict_why) if run.predicted else None
    return summary_lines(tests, summarize(tests), scope=run.scope, predicted=run.predicted,
                         prediction=prediction)


def _fenced(lines: list[str]) -> list[str]:
    """Lines as a markdown code block (the site lines are aligned in columns), fenced with more
    backticks than any run of them in the text, so that none ends the block early."""
    longest = max((len(m) for line in lines for m in re.findall("`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + "text", *lines, fence]


def _case_order(matrix: Matrix, cmp: Comparison | None, everything: bool) -> CaseOrder:
    flagged = ([d.nodeid for d in cmp.regressions + cmp.improvements + cmp.new_cases]
               if cmp is not None else [])
    return order_cases(matrix, flagged, everything)


def _hidden(order: CaseOrder) -> str | None:
    """The line that stands for the cases left out, and how to see them."""
    if not order.n_hidden:
        return None
    what = ", ".join(f"{n} {states}" for states, n in order.hidden.items())
    return f"{plural(order.n_hidden, 'case')} not shown ({what}); --all lists every case"


def _comparison_lines(cmp: Comparison | None) -> list[tuple[str, list[str]]]:
    if cmp is None:
        return []

    def fmt(d: Delta) -> str:
        return f"{d.nodeid} on {d.label}: {d.before} -> {d.after}" + (f" ({d.why})" if d.why else "")

    ungated = ([f"{cmp.ungated_timings} timing(s) shown but not gated: gating needs "
                f"{timing.MIN_PROCESSES}+ processes x {timing.MIN_REPS}+ repetitions in the run "
                "and in the baseline"] if cmp.ungated_timings else [])
    return [("Regressions", [fmt(d) for d in cmp.regressions]),
            ("Improvements", [fmt(d) for d in cmp.improvements]),
            ("New runs (not in baseline)", list(cmp.new_runs)),
            ("New cases (not in baseline)", [fmt(d) for d in cmp.new_cases]),
            ("Missing (in baseline, never audited there)", [fmt(d) for d in cmp.missing]),
            ("Timings (gated against their measured noise band)", list(cmp.timings) + ungated),
            ("Not compared", list(cmp.notes))]


def render_markdown(matrix: Matrix, cmp: Comparison | None = None, everything: bool = False) -> str:
    """A GitHub job summary: totals, one run's summary, the matrix table (the cases that matter
    first; every case with ``everything``), changes, baseline comparison, measurements."""
    out = ["## syncguard", "", _totals(matrix), ""]
    out += [f"> {_md(n)}" for n in _notes(matrix)] + ([""] if _notes(matrix) else [])
    summary = _summary(matrix)
    if summary:
        out += _fenced(summary) + [""]
    order = _case_order(matrix, cmp, everything)
    if order.shown:  # a table of no rows reads as a broken one: the line below says why
        out.append("| case | " + " | ".join(_md(_column(matrix, r)) for r in matrix.runs) + " |")
        out.append("|---" * (len(matrix.runs) + 1) + "|")
    for nodeid in order.shown:
        out.append(f"| `{_md(nodeid)}` | "
                   + " | ".join(_md(matrix.cell(r.label, nodeid).text) for r in matrix.runs) + " |")
    hidden = _hidden(order)
    if hidden:
        out += ["", _md(hidden)] if order.shown else [_md(hidden)]
    out += ["", "### Provenance", "", "| | " + " | ".join(_md(_column(matrix, r)) for r in matrix.runs)
            + " |", "|---" * (len(matrix.runs) + 1) + "|"]
    for key, title in PROVENANCE_ROWS:
        out.append(f"| {title} | " + " | ".join(_md(r.provenance.get(key, "?")) for r in matrix.runs)
                   + " |")
    found = changes(matrix)
    out += ["", "### Changes between versions", ""]
    out += [f"- `{_md(c.nodeid)}` ({_md(c.series)}): {_md(c.text)}" for c in found] or ["- none"]
    if cmp is not None:
        out += ["", "### Against the baseline", ""]
        for title, lines in _comparison_lines(cmp):
            if lines:
                out += [f"**{title}**", ""] + [f"- {_md(x)}" for x in lines] + [""]
        if not any(lines for _, lines in _comparison_lines(cmp)):
            out += ["- same as the baseline", ""]
    rows = measurement_rows(matrix)
    if rows:
        titles = [t for _, t in MEASURES] + [OTHER_TITLE]
        out += ["", "### Measurements", "", "| case | run | " + " | ".join(titles) + " |",
                "|---" * (len(titles) + 2) + "|"]
        out += [f"| `{_md(row[0])}` | " + " | ".join(_md(x) for x in row[1:]) + " |" for row in rows]
    return "\n".join(out).rstrip() + "\n"


def to_json(matrix: Matrix, cmp: Comparison | None = None) -> dict[str, Any]:
    """Machine-readable matrix (kind 'syncguard-matrix')."""
    def cell(c: Cell) -> dict[str, Any]:
        out = {"state": c.state, "text": c.text, "outcome": c.outcome, "syncs": phrases(c.syncs),
               "kinds": list(c.kinds), "allowed": phrases(c.allowed),
               "allowed_kinds": list(c.allowed_kinds), "reason": c.reason,
               "measurements": dict(c.measurements)}
        if c.weaker:  # judged by weaker detectors than asked (reporting/weaker.py)
            out["weaker"] = dict(c.weaker)
        return out

    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "kind": "syncguard-matrix",
        "runs": [{"label": r.label, "path": r.path, "torch": r.torch, "device": r.device,
                  "gpu": r.gpu, "complete": r.complete, "predicted": r.predicted,
                  "code": r.code,
                  "provenance": dict(r.provenance), "mixed": r in mixed_runs(matrix)}
                 for r in matrix.runs],
        "notes": _notes(matrix),
        "cases": [{"nodeid": n, "cells": {r.label: cell(matrix.cell(r.label, n)) for r in matrix.runs}}
                  for n in matrix.nodeids],
        "changes": [{"nodeid": c.nodeid, "series": c.series, "text": c.text} for c in changes(matrix)],
        "baseline": None,
    }
    if cmp is not None:
        doc["baseline"] = {"regressions": [asdict(d) for d in cmp.regressions],
                           "improvements": [asdict(d) for d in cmp.improvements],
                           "new_runs": list(cmp.new_runs),
                           "new_cases": [asdict(d) for d in cmp.new_cases],
                           "missing": [asdict(d) for d in cmp.missing],
                           "timings": list(cmp.timings), "ungated_timings": cmp.ungated_timings,
                           "notes": list(cmp.notes)}
    return doc


def render_json(matrix: Matrix, cmp: Comparison | None = None, everything: bool = True) -> str:
    """Every case whatever ``everything`` says: a tool filters for itself."""
    return json.dumps(to_json(matrix, cmp), indent=1, ensure_ascii=False) + "\n"


def render_table(matrix: Matrix, cmp: Comparison | None = None, everything: bool = False):
    """rich renderables for a terminal: one run's summary, the matrix (the cases that matter
    first; every case with ``everything``), then the same lists as the markdown."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    style = {"clean": "green", "syncs": "bold red", "failed": "bold red", "allowed": "yellow"}
    table = Table(title="syncguard", caption=_totals(matrix))
    table.add_column("case", overflow="fold")
    for run in matrix.runs:
        table.add_column(Text(_column(matrix, run)), overflow="fold")
    order = _case_order(matrix, cmp, everything)
    for nodeid in order.shown:  # Text, not str: '[param]' in a nodeid is not rich markup
        cells = [matrix.cell(r.label, nodeid) for r in matrix.runs]
        table.add_row(Text(nodeid), *(Text(c.text, style=style.get(c.state, "dim")) for c in cells))
    prov = Table(title="provenance")
    prov.add_column("")
    for run in matrix.runs:
        prov.add_column(Text(_column(matrix, run)), overflow="fold")
    for key, title in PROVENANCE_ROWS:
        prov.add_row(Text(title), *(Text(r.provenance.get(key, "?")) for r in matrix.runs))
    hidden = _hidden(order)
    parts: list[Any] = [*(Text(n, style="bold") for n in _notes(matrix)),
                        *(Text(line) for line in _summary(matrix)), table,
                        *([Text(hidden, style="dim")] if hidden else []), prov,
                        Text("Changes between versions", style="bold")]
    parts += [Text(f"  {c.nodeid} ({c.series}): {c.text}") for c in changes(matrix)] or [Text("  none")]
    for title, lines in _comparison_lines(cmp):
        if lines:
            parts += [Text(title, style="bold")] + [Text(f"  {x}") for x in lines]
    rows = measurement_rows(matrix)
    if rows:
        mt = Table(title="measurements")
        for title in ["case", "run"] + [t for _, t in MEASURES] + [OTHER_TITLE]:
            mt.add_column(title, overflow="fold")
        for row in rows:
            mt.add_row(*map(Text, row))
        parts.append(mt)
    return Group(*parts)


def render_table_text(matrix: Matrix, cmp: Comparison | None = None,
                      everything: bool = False) -> str:
    """The table without colour, for a file, a pipe or a CI log: as wide as its widest row, so
    that no node id is wrapped or folded (a log has no width to fit)."""
    from rich.console import Console

    buffer = io.StringIO()
    Console(file=buffer, width=100_000, color_system=None, highlight=False).print(
        render_table(matrix, cmp, everything))
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


@dataclass(frozen=True)
class Format:
    """One ``--format``: text for files and pipes, and optionally rich output for a terminal."""

    #: (matrix, comparison, everything): ``everything`` lists every case (``--all``)
    text: Callable[[Matrix, Comparison | None, bool], str]
    help: str
    rich: Callable[[Matrix, Comparison | None, bool], Any] | None = None


FORMATS: dict[str, Format] = {
    "table": Format(render_table_text, "a rich table (colour on a terminal)", render_table),
    "markdown": Format(render_markdown, "GitHub-flavoured markdown, e.g. for $GITHUB_STEP_SUMMARY"),
    "json": Format(render_json, "the matrix as JSON (kind 'syncguard-matrix')"),
}
