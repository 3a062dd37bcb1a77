"""``syncguard atlas``: which operations make the host wait, in which torch version, and how.

It renders committed corpus runs (:mod:`syncguard.atlas.runs` defines them; tools/corpus_report.py
writes them on a GPU machine):
one row per sync pattern (every snippet of the corpus, the library corpus and the cases), one
column per run (torch version, GPU, driver). A cell is the run's ground truth for that snippet:
what waits, as kind × count with copy direction and pageable/pinned memory, the runtime API and
the aten op. A cell whose waits differ from the previous measured column is marked, and the
opening lines say each such transition in words. Rows that sync show the sync-free alternative
from ``syncguard.records.alternatives`` with what the same runs measured for it.

Everything comes from the run files; nothing is typed by hand, and the output depends only on
their content (no clock, no absolute paths), so a committed atlas can be checked byte for byte.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Iterable

from syncguard.atlas.runs import BENCH_KIND, load_run, wait_text
from syncguard.records.alternatives import Alternative, for_snippet
from syncguard.reporting.matrix import parse_version

ATLAS_SCHEMA_VERSION = 1
DEFAULT_RUNS = "reports/atlas-runs/*.json"
CORPORA = ("corpus", "library", "cases")
CHANGED = "◆"


@dataclass(frozen=True)
class Column:
    """One run: a torch build on one GPU, and where its numbers came from."""

    file: str
    torch: str
    cuda: str | None
    gpu: str | None
    driver: str | None
    commit: str | None
    sources: str | None
    created: str | None
    truth: str
    agreement: str  # the default detectors against the ground truth, in one phrase

    @property
    def label(self) -> str:
        return self.torch


@dataclass(frozen=True)
class Cell:
    measured: bool
    waits: str = ""  # wait_text of the ground truth
    via: str = ""  # runtime APIs and aten ops
    error: str | None = None
    changed: bool = False

    @property
    def syncs(self) -> bool:
        return self.measured and self.error is None and self.waits != "clean"

    def text(self, mark: bool = True) -> str:
        if not self.measured:
            return "–"
        if self.error:
            return f"not run: {self.error}"
        body = self.waits + (f" · {self.via}" if self.via else "")
        return f"{CHANGED} {body}" if mark and self.changed else body


@dataclass(frozen=True)
class Row:
    id: str
    label: str
    cells: tuple[Cell, ...]
    alternative: Alternative | None = None
    alternative_status: str = ""


@dataclass(frozen=True)
class MergeRow:
    """One merge variant at one size: per bench run, sync + device time × copy + host time."""

    variant: str
    size: str
    cells: tuple[str, ...]


@dataclass(frozen=True)
class Atlas:
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    transitions: tuple[str, ...]
    bench_columns: tuple[str, ...] = ()  # "torch · GPU · file" of each merge benchmark run
    merges: tuple[MergeRow, ...] = ()
    unstable: tuple[Row, ...] = ()  # rows whose value returns after changing: not transitions


def _agreement(summary: dict[str, Any]) -> str:
    f = summary.get("default")
    if not f:
        return "–"

    def pct(n, d):
        return f"{100 * n / d:.0f}%" if d else "–"
    return (f"syncs {pct(f['syncs_agree'], f['judged'])}, kind "
            f"{pct(f['kind_agree'], f['kind_judged'])}, line "
            f"{pct(f['events_on_line'], f['events'])}, other threads {f['other_threads']}")


def _column(path: str, doc: dict[str, Any]) -> Column:
    p = doc["provenance"]
    return Column(os.path.basename(path), str(p.get("torch")), p.get("cuda_runtime"), p.get("gpu"),
                  p.get("driver"), p.get("git_commit"), p.get("source_sha256"), p.get("created"),
                  p.get("truth_source") or "runtime trace + sync-debug mode, same run",
                  _agreement(doc["summary"]))


def _cell(snippet: dict[str, Any] | None) -> Cell:
    if snippet is None:
        return Cell(False)
    truth = snippet.get("truth") or {}
    if snippet.get("error") or not truth.get("ok"):
        return Cell(True, error=snippet.get("error") or truth.get("why") or "no ground truth")
    waits = truth.get("waits", [])
    via = sorted({w["api"] + (f" ({w['op']})" if w.get("op") else "") for w in waits})
    return Cell(True, wait_text(waits), "; ".join(via))


# ---------------------------------------------------------------------------------------------
# Building

_DETAIL = re.compile(r"\[[^\]]*\]")


def _differ(a: str, b: str) -> bool:
    """Two cells' waits differ. Where one run could not tell a copy's direction or host memory
    (no "[...]", or "/?": e.g. a converted run whose ground truth named neither), only what both
    know is compared, so a change in what was *measured* never reads as a change torch made."""
    if _DETAIL.sub("", a) != _DETAIL.sub("", b):
        return True  # other kinds or counts
    if "/?]" in a or "/?]" in b or a.count("[") != b.count("["):
        return False
    return a != b


def _mark_changes(cells: list[Cell]) -> list[Cell]:
    out, prev = [], None
    for c in cells:
        comparable = c.measured and c.error is None
        if comparable and prev is not None and _differ(c.waits, prev.waits):
            c = Cell(c.measured, c.waits, c.via, c.error, changed=True)
        out.append(c)
        if comparable:
            prev = c
    return out


def _words(waits: str) -> str:
    """A cell's waits as the transitions say them: "clean" reads "sync-free"."""
    return "sync-free" if waits == "clean" else waits


def _transitions(row: Row, columns: tuple[Column, ...]) -> list[str]:
    said, prev_i = [], None
    for i, c in enumerate(row.cells):
        if not (c.measured and c.error is None):
            continue
        if c.changed and prev_i is not None:
            before, after = _words(row.cells[prev_i].waits), _words(c.waits)
            said.append(f"{row.label}: {before} up to {columns[prev_i].label} → {after} "
                        f"from {columns[i].label}")
        prev_i = i
    return said


def _returns(row: Row) -> bool:
    """Whether a row's measured value comes back after changing (A, B, A across versions).

    torch does not undo a change one release later and redo it the next; such a row varies from
    run to run (each version is another process with its own allocator history: the cudaFree
    count of a CUDA graph capture), so its changes are not transitions."""
    seen, last = [], None
    for c in row.cells:
        if not (c.measured and c.error is None) or c.waits == last:
            continue
        if c.waits in seen:
            return True
        seen.append(c.waits)
        last = c.waits
    return False


def unstable_text(row: Row, columns: tuple[Column, ...]) -> str:
    """An unstable row in words: every measured value with its version."""
    return f"{row.label}: " + "; ".join(
        f"{_words(c.waits)} on {col.label}"
        for col, c in zip(columns, row.cells) if c.measured and c.error is None)


def _alternative_status(alt: Alternative, by_id: dict[str, tuple[Cell, ...]],
                        columns: tuple[Column, ...]) -> str:
    cells = by_id.get(alt.checked_by)
    if cells is None:
        return "not measured yet"
    clean = [col.label for col, c in zip(columns, cells) if c.measured and not c.error
             and not c.syncs]
    waits = [col.label for col, c in zip(columns, cells) if c.syncs]
    parts = ([f"sync-free on {', '.join(clean)}"] if clean else []) + (
        [f"still waits on {', '.join(waits)}"] if waits else [])
    return "; ".join(parts) or "not measured yet"


def _by_version(runs, env_key):
    return sorted(runs, key=lambda r: (parse_version(r[1][env_key].get("torch")),
                                       str(r[1][env_key].get("torch")), r[0]))


def _merge_rows(benches, columns: tuple[Column, ...], rows: tuple[Row, ...]):
    """The seed's question as data: per variant and size, sync (from the corpus run of the
    same torch), device time × copy with its band, host µs per call, peak extra memory."""
    sync = {(col.torch, r.id): c for r in rows for col, c in zip(columns, r.cells)}
    keys: dict[tuple[str, str], None] = {}
    for _, doc in benches:
        for m in doc["results"]:
            keys.setdefault((m["variant"], f"{m['tokens']}x{m['hidden']}"), None)
    out = []
    for variant, size in keys:
        cells = []
        for _, doc in benches:
            m = next((m for m in doc["results"] if m["variant"] == variant
                      and f"{m['tokens']}x{m['hidden']}" == size), None)
            if m is None:
                cells.append("–")
                continue
            s = sync.get((doc["environment"].get("torch"), f"cases/merge_{variant}"))
            waits = "sync ?" if s is None or not s.measured or s.error else (
                _words(s.waits))
            x, h = m["device_x_copy"], m["host_us"]
            cells.append(f"{waits} · {x['median']:.2f}× copy [{x['min']:.2f}–{x['max']:.2f}] · "
                         f"host {h['median']:.0f} µs [{h['min']:.0f}–{h['max']:.0f}] · "
                         f"+{m['peak_extra_bytes'] / 2**20:.0f} MiB")
        out.append(MergeRow(variant, size, tuple(cells)))
    out.sort(key=lambda r: (int(r.size.split("x")[0]) * int(r.size.split("x")[1]), r.variant))
    return tuple(out)


def _bench_column(path: str, env: dict[str, Any]) -> str:
    """torch · GPU · commit (where the file records one) · file name."""
    commit = (env.get("project") or {}).get("commit")
    return " · ".join([str(env.get("torch")), str(env.get("gpu"))]
                      + ([f"commit `{commit[:12]}`"] if commit else [])
                      + [f"`{os.path.basename(path)}`"])


def build(runs: Iterable[tuple[str, dict[str, Any]]]) -> Atlas:
    runs = list(runs)
    benches = _by_version([r for r in runs if r[1].get("kind") == BENCH_KIND], "environment")
    runs = _by_version([r for r in runs if r[1].get("kind") != BENCH_KIND], "provenance")
    columns = tuple(_column(path, doc) for path, doc in runs)
    order: dict[str, dict[str, Any]] = {}
    for _, doc in runs:
        for s in doc["snippets"]:
            order.setdefault(s["id"], s)
    ids = sorted(order, key=lambda i: (CORPORA.index(order[i]["corpus"])
                                       if order[i]["corpus"] in CORPORA else len(CORPORA)))
    per_run = [{s["id"]: s for s in doc["snippets"]} for _, doc in runs]
    cells = {i: tuple(_mark_changes([_cell(r.get(i)) for r in per_run])) for i in ids}
    rows = []
    for i in ids:
        doc = order[i].get("doc") or ""
        label = f"`{i}`" + (f" ({doc})" if doc else "")
        alt = for_snippet(i)
        status = _alternative_status(alt, cells, columns) if alt else ""
        rows.append(Row(i, label, cells[i], alt, status))
    rows_t = tuple(rows)
    unstable = tuple(r for r in rows_t if _returns(r))
    said = [t for r in rows_t if r not in unstable for t in _transitions(r, columns)]
    # transitions to or from sync-free first: those are the ones users ask about
    said.sort(key=lambda t: "sync-free" not in t)
    bench_columns = tuple(_bench_column(p, d["environment"]) for p, d in benches)
    return Atlas(columns, rows_t, tuple(said), bench_columns,
                 _merge_rows(benches, columns, rows_t), unstable)


# ---------------------------------------------------------------------------------------------
# Rendering

def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(atlas: Atlas) -> str:
    cols = atlas.columns
    out = ["# The sync atlas: which operations make the host wait, per torch version", "",
           f"Generated by `nox -s atlas` (`syncguard atlas`) from {len(cols)} corpus run(s) "
           "(`reports/atlas-runs/`, written by `tools/corpus_report.py`); nothing here is typed "
           f"by hand. A cell is the run's ground truth: kind × count [direction/memory] · "
           f"runtime API (aten op). {CHANGED} marks a cell that differs from the previous "
           "measured version.", "", "## Transitions", ""]
    out += [f"- {_md(t)}" for t in atlas.transitions] or ["- none between the measured versions"]
    if atlas.unstable:
        out += ["", "## Not transitions: values that return after changing", "",
                "A value that changes and later comes back varies from run to run (each version "
                "is another process); torch did not make these changes:", ""]
        out += [f"- {_md(unstable_text(r, cols))}" for r in atlas.unstable]
    out += ["", "## Runs", "",
            "| torch | CUDA | GPU | driver | commit | sources | measured | ground truth | "
            "default detectors vs ground truth | file |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in cols:
        out.append(" | ".join(["", c.torch, str(c.cuda), str(c.gpu), str(c.driver),
                               f"`{(c.commit or '–')[:12]}`", f"`{c.sources or '–'}`",
                               str(c.created or "–"), _md(c.truth), c.agreement, f"`{c.file}`", ""]
                              ).strip())
    for corpus in CORPORA:
        rows = [r for r in atlas.rows if r.id.split("/", 1)[0] == corpus]
        if not rows:
            continue
        out += ["", f"## {corpus} ({len(rows)} patterns)", "",
                "| pattern | " + " | ".join(f"{c.label}<br>{_md(str(c.gpu))} · {c.driver}"
                                            for c in cols) + " | sync-free alternative |",
                "|---|" + "---|" * len(cols) + "---|"]
        for r in rows:
            alt = ""
            if r.alternative and any(c.syncs for c in r.cells):
                alt = f"{r.alternative.instead} — {r.alternative_status}"
            out.append(f"| {_md(r.label)} | " + " | ".join(_md(c.text()) for c in r.cells) +
                       f" | {_md(alt)} |")
    if atlas.merges:
        out += ["", "## Merge variants: sync, device time, host time, memory", "",
                "Device time: the merge's span on a stream kept busy ahead of it, × a plain copy "
                "of the same bytes, [band of the round medians]; host: CPU µs per call; peak "
                "extra device memory (`bench/bench_merge.py --split`). Sync: the corpus run of "
                "the same torch.", "",
                "| variant | size | " + " | ".join(_md(c) for c in atlas.bench_columns) + " |",
                "|---|---|" + "---|" * len(atlas.bench_columns)]
        for m in atlas.merges:
            out.append(f"| {m.variant} | {m.size} | " + " | ".join(_md(c) for c in m.cells) + " |")
    return "\n".join(out) + "\n"


def to_json(atlas: Atlas) -> dict[str, Any]:
    return {
        "schema": "syncguard-atlas", "schema_version": ATLAS_SCHEMA_VERSION,
        "transitions": list(atlas.transitions),
        "unstable": [unstable_text(r, atlas.columns) for r in atlas.unstable],
        "columns": [c.__dict__ | {"label": c.label} for c in atlas.columns],
        "rows": [{"id": r.id, "label": r.label,
                  "cells": [{"measured": c.measured, "waits": c.waits, "via": c.via,
                             "error": c.error, "changed": c.changed, "syncs": c.syncs}
                            for c in r.cells],
                  "alternative": None if r.alternative is None else {
                      "instead": r.alternative.instead, "checked_by": r.alternative.checked_by,
                      "status": r.alternative_status}} for r in atlas.rows],
        "merge_benchmarks": list(atlas.bench_columns),
        "merges": [{"variant": m.variant, "size": m.size, "cells": list(m.cells)}
                   for m in atlas.merges],
    }


def render_json(atlas: Atlas) -> str:
    return json.dumps(to_json(atlas), indent=1, ensure_ascii=False) + "\n"


def render_table(atlas: Atlas):
    from rich.table import Table

    table = Table(title="syncguard atlas: what waits, per torch version", show_lines=False)
    table.add_column("pattern", overflow="fold")
    for c in atlas.columns:
        table.add_column(f"{c.torch}\n{c.gpu or '?'} · {c.driver or '?'}", overflow="fold")
    table.add_column("sync-free alternative", overflow="fold")
    for r in atlas.rows:
        alt = r.alternative.instead if r.alternative and any(c.syncs for c in r.cells) else ""
        table.add_row(r.id, *[("[bold yellow]" + c.text() + "[/]") if c.changed else c.text()
                              for c in r.cells], alt)
    return table


def render(atlas: Atlas, fmt: str, to_terminal: bool) -> str | None:
    if fmt == "markdown":
        return render_markdown(atlas)
    if fmt == "json":
        return render_json(atlas)
    from rich.console import Console

    lines = "\n".join(["Transitions:"] + [f"  {t}" for t in atlas.transitions]
                      + (["Not transitions (values return after changing):"]
                         + [f"  {unstable_text(r, atlas.columns)}" for r in atlas.unstable]
                         if atlas.unstable else [])) + "\n"
    if to_terminal:
        console = Console()
        console.print(lines, markup=False)
        console.print(render_table(atlas))
        return None
    buffer = io.StringIO()
    Console(file=buffer, width=200, color_system=None).print(render_table(atlas))
    return lines + buffer.getvalue()


# ---------------------------------------------------------------------------------------------
# Command line: ``syncguard atlas`` (syncguard/cli.py registers these)

def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("runs", nargs="*", metavar="RUN", default=[DEFAULT_RUNS],
                        help=f"corpus run JSON files or glob patterns (default {DEFAULT_RUNS!r})")
    parser.add_argument("--format", choices=("table", "markdown", "json"), default="table",
                        help="table: for a terminal; markdown: for a README or a CI job summary; "
                             "json: for tools (default: table)")
    parser.add_argument("--output", metavar="FILE",
                        help="write the rendered atlas here, atomically (default: standard output)")
    return parser


def command(args: argparse.Namespace, paths: list[str]) -> int:
    """Read and check every run, then render and write; SchemaError/OSError go to the caller."""
    from syncguard.reporting.sessionfile import write_atomic

    atlas = build((p, load_run(p)) for p in paths)
    text = render(atlas, args.format, to_terminal=args.output is None)
    if args.output:
        write_atomic(args.output, text)
    elif text is not None:
        sys.stdout.write(text)
    return 0
