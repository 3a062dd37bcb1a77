"""What a person reads in pytest's output: the failure table, fix hints, the session summary lines.

Rendered to plain text (rich, no colour) so it fits pytest's longrepr, report sections and logs.
"""
from __future__ import annotations

import io
import linecache
from collections import Counter
from typing import Iterable

from syncguard.records import alternatives
from syncguard.detectors.predicted import label as _predicted
from syncguard.attribution.aggregate import ScopeJudge, SiteRecord, aggregate, total
from syncguard.attribution.codescope import EVERYWHERE, CodeScope
from syncguard.records.frame import Frame
from syncguard.records.events import (BLOCKING_COPY_D2H, BLOCKING_COPY_H2D, DEVICE_SYNC, EVENT_SYNC, IMPLICIT_FREE,
                     PAGEABLE_COPY, RegionReport, SyncEvent)
from syncguard.reporting.sessionfile import TestEntry, session_detectors
from syncguard.reporting.weaker import summary_line as weaker_summary

_MASK_OPS = ("aten::nonzero", "aten::index", "aten::index_put_", "aten::_index_put_impl_",
             "aten::masked_select", "aten::argwhere", "aten::nonzero_static")
HINTS = {
    "mask": "keep the mask on the CPU (torch>=2.9 indexes without a sync) or precompute indices",
    "pin": "pin the host tensor and use non_blocking=True",
    "d2h": "copy into pinned memory with non_blocking=True and wait on an event when needed",
    "scalar": "keep the value on the device, or allow(...) it with a reason",
    "free": "avoid torch.cuda.empty_cache() in the hot path",
    "wait": "wait on an event/stream instead of the whole device",
    "default": "remove the sync, or allow(...) it with a reason",
    "compile": "torch.compile syncs while it traces and compiles (first call only): warm the "
               "model up before the audited part, e.g. in pytest_syncguard_warmup",
    "graph_capture": "CUDA-graph capture syncs while it warms up and records (once): capture "
                     "before the audited part; replays do not sync",
}


def source_line(event: SyncEvent | SiteRecord) -> str:
    if not event.filename or not event.lineno:
        return ""
    return linecache.getline(event.filename, event.lineno).strip()


def hint_for(event: SyncEvent | SiteRecord) -> str:
    """One line saying how such a sync is usually removed; the default names allow().

    Where the alternatives table (alternatives.py) knows the op, its entry is the hint: one
    source of truth, each alternative checked sync-free on the GPU by a corpus snippet. HINTS
    covers what the table does not (phases, copies, scalars, waits)."""
    if event.phase in HINTS:  # compile / graph_capture: the phase, not the op, explains it
        return HINTS[event.phase]
    ops = tuple(event.ops) + ((event.op,) if event.op else ())
    if "repeat_interleave" in source_line(event):  # a detector may name only the inner op
        ops += ("aten::repeat_interleave",)
    alternative = alternatives.hint(ops)
    if alternative:
        return alternative
    if any(o in _MASK_OPS for o in ops):
        return HINTS["mask"]
    if event.kind in (PAGEABLE_COPY, BLOCKING_COPY_H2D):
        return HINTS["pin"]
    if "aten::_local_scalar_dense" in ops or "aten::item" in ops:
        return HINTS["scalar"]
    if event.kind == BLOCKING_COPY_D2H:
        return HINTS["d2h"]
    if event.kind == IMPLICIT_FREE:
        return HINTS["free"]
    if event.kind in (DEVICE_SYNC, EVENT_SYNC):
        return HINTS["wait"]
    return HINTS["default"]


def site_key(e: SyncEvent) -> tuple:
    return (e.kind, e.api, e.op, e.filename, e.lineno)


def group_by_site(events: Iterable[SyncEvent]) -> list[tuple[SyncEvent, int]]:
    """Distinct call sites in first-seen order with how often each synced."""
    first: dict[tuple, SyncEvent] = {}
    counts: Counter = Counter()
    for e in events:
        k = site_key(e)
        first.setdefault(k, e)
        counts[k] += 1
    return [(e, counts[k]) for k, e in first.items()]


def _short(path: str | None, lineno: int | None) -> str:
    if not path:
        return "<unknown>"
    import os
    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = path
    return f"{rel if not rel.startswith('..' + os.sep + '..') else path}:{lineno}"


def failure_table(report: RegionReport, title: str | None = None, width: int = 110,
                  max_rows: int = 20, scope: CodeScope | ScopeJudge = EVERYWHERE) -> str:
    """The failure table: one row per call site, a numbered hint under it, then races and notes.
    ``scope``: the test's :class:`ScopeJudge` where it has one, whose decisions are reused."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text  # cells are Text: source like x[mask] is not rich markup

    table = Table(box=box.SIMPLE_HEAD, show_lines=True, pad_edge=False)
    table.add_column("#", justify="right")
    table.add_column("where / source", overflow="fold", ratio=3)
    table.add_column("sync (kind, API, aten op)", overflow="fold", ratio=2)
    table.add_column("thread", overflow="fold")
    table.add_column("blocked", justify="right", no_wrap=True)
    rows = aggregate(report.syncs, scope)[0]  # sites where they count, as the session report
    hints = []
    for i, e in enumerate(rows[:max_rows], 1):
        n = e.count
        blocked = _blocked(e)
        what = "\n".join(x for x in (_predicted(e) + e.kind + (f" x{n}" if n > 1 else ""),
                                     e.api, e.op) if x)
        where = _short(e.filename, e.lineno) + (f"\n{source_line(e)}" if source_line(e) else "")
        where += "".join(f"\n{label} {_frame(f)}" for label, f in _library_frames(e))
        table.add_row(str(i), Text(where), Text(what), Text(e.thread or "-"), blocked)
        hints.append(f"hint #{i}: {hint_for(e)}" + (f" [{e.note}]" if e.note else ""))
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False,
                      no_color=True, highlight=False, soft_wrap=True)
    console.print(title or f"syncguard: {report.summary()}", markup=False)
    if rows:
        console.print(table)
        for h in hints:
            console.print(h, markup=False)
    if len(rows) > max_rows:
        console.print(f"... and {len(rows) - max_rows} more call site(s)")
    for r in report.races:
        console.print(f"race: {r.what} on {r.tensor or '?'} at {_short(r.filename, r.lineno)}",
                      markup=False)
    for u in report.not_predicted:
        console.print(u, markup=False)
    if report.allowed:
        console.print(f"{len(report.allowed)} allowed sync(s): " + "; ".join(
            f"{_short(e.filename, e.lineno)} ({e.reason})" for e in
            aggregate(report.allowed)[0][:5]), markup=False)
    for note in report.notes:
        console.print(f"note: {note}", markup=False)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()).strip("\n") + "\n"


def _blocked(r: SiteRecord) -> str:
    if r.blocked_us_max is None:
        return "-"
    if r.count == 1:
        return f"{r.blocked_us_max:.0f} us"
    return f"max {r.blocked_us_max:.0f} us\ntotal {r.blocked_us_total:.0f} us"


def _frame(frame: Frame | str) -> str:
    """``/abs/path/file.py:12 in f`` shortened like the sites are; a frame given as text (an
    event built by hand) is split where it is shown."""
    if isinstance(frame, Frame):
        return f"{_short(frame.filename, frame.lineno)} in {frame.function}"
    path, _, rest = frame.rpartition(":")
    line, _, func = rest.partition(" in ")
    return f"{_short(path, int(line) if line.isdigit() else None)} in {func}"


def _is_at(frame: Frame | str, filename: str | None, lineno: int | None) -> bool:
    if isinstance(frame, Frame):
        return frame.at(filename, lineno)
    return frame.startswith(f"{filename}:{lineno} ")


def _library_frames(r: SiteRecord) -> list[tuple[str, str]]:
    """For a sync that counts at another frame than the one that synced (inside a library): the
    syncing frame, where the program entered the library, and the user's frame, each unless it
    is the site itself."""
    inner = r.stack[0] if r.stack else None
    out = [("synced at", inner)] if inner and not _is_at(inner, r.filename, r.lineno) else []
    if r.entry_frame and r.entry_frame != inner:
        out.append(("entered library at", r.entry_frame))
    if r.user_frame and not _is_at(r.user_frame, r.filename, r.lineno):
        out.append(("user frame", r.user_frame))
    return out


def _top_sites(tests: list[TestEntry], which: str, top: int) -> list[str]:
    """The sites of ``which`` records (syncs, outside) that synced most across the session."""
    sites: Counter = Counter()
    tests_at: dict[tuple, set] = {}
    label: dict[tuple, str] = {}
    for t in tests:
        for r in getattr(t, which):
            k = (r.kind, r.api, r.op, r.filename, r.lineno)
            sites[k] += r.count
            tests_at.setdefault(k, set()).add(t.nodeid)
            label[k] = f"{_short(r.filename, r.lineno)}  {_predicted(r)}{r.kind} {r.op or r.api}"
    return [f"  {n:>4}x  {label[k]}  ({len(tests_at[k])} test(s))"
            for k, n in sites.most_common(top)]


def nothing_predicted(tests: list[TestEntry]) -> bool:
    """Under ``--syncguard-predict``: whether no test that ran under prediction made a call the
    predictor reported, i.e. none has a predicted sync (in or outside the code scope, allowed or
    not) nor a call it could not predict (its ``not_audited`` state). Tests that were off or did
    not reach their call phase (skipped ones included) ran nothing under prediction. Such a run
    judged no CUDA code at all: a suite that skipped its CUDA tests, or never ran them on the
    stand-ins, reads this way (as does one whose CUDA code truly never syncs)."""
    return not any(t.syncs or t.allowed or t.outside or t.races or t.audit == "not_audited"
                   for t in tests if t.audit != "off")


def rules_used(tests: list[TestEntry]) -> list[str]:
    """The measured torch versions whose rules predicted the session's syncs (each predicted
    record's note names one), in the order first seen."""
    seen: list[str] = []
    for t in tests:
        for r in (*t.syncs, *t.allowed, *t.outside):
            note = (r.note or "") if _predicted(r) else ""
            v = note.partition("rules of torch ")[2].split(" ")[0]
            if v and v not in seen:
                seen.append(v)
    return seen


def prediction_line(tests: list[TestEntry], target: str | None, why: str | None,
                    nearest: str | None = None) -> str:
    """The summary's line for a predicted run: predicted, not measured; for which torch; from
    which measured torch's rules (those the records name, else ``nearest``, the table's nearest
    to ``target``); and why the run predicted (``--syncguard-predict=on``, or what auto found)."""
    used = rules_used(tests) or ([nearest] if nearest else [])
    rules = f" with the rules measured on a GPU on torch {', '.join(used)}" if used else ""
    return (f"PREDICTED, not measured: CUDA code ran on CPU stand-ins for torch {target or '?'}"
            f"{rules}" + (f" ({why})" if why else ""))


def summary_lines(tests: list[TestEntry], counts: dict[str, int], top: int = 5,
                  scope: str | None = None, predicted: bool = False,
                  prediction: str | None = None) -> list[str]:
    """The terminal summary: counts, the scope, the call sites that synced most across the
    session, and those outside the scope (counted, never failing). ``predicted``: the session
    ran under prediction: a test that is not audited was not predicted (a call the predictor
    cannot model), not short of CUDA; a run that predicted nothing says so first, and
    ``prediction`` (:func:`prediction_line`) comes next. Not predicted, ``prediction`` says why
    not, beside the tests not audited for want of CUDA."""
    off = counts.get("tests", 0) - counts.get("audited", 0) - counts.get("not_audited", 0)
    n_unseen = counts.get("not_audited", 0)
    unseen = (f"{n_unseen} not predicted" if predicted
              else f"{n_unseen} not audited (no CUDA"
              + (f"; not predicted: {prediction})" if prediction and n_unseen else ")"))
    lines = []
    if predicted and nothing_predicted(tests):  # first: a green run that saw no CUDA call
        skipped = sum(t.outcome == "skipped" for t in tests)
        lines.append(f"NOTHING PREDICTED: --syncguard-predict was on and no test made a call "
                     f"the predictor reported (no predicted sync, no call it could not "
                     f"predict): {counts.get('audited', 0)} test(s) ran under prediction, "
                     f"{off} off/not run, {skipped} skipped"
                     + (" (did a skip condition read torch.cuda before the session?)"
                        if skipped else ""))
    if predicted and prediction:
        lines.append(prediction)
    done = "predicted" if predicted else "audited"
    if not counts.get("audited", 0):  # say it first: a green run that audited nothing proves nothing
        lines.append(f"NO TEST WAS {done.upper()}: {unseen}"
                     + (f", {off} off/not run" if off else ""))
    else:
        lines.append(f"{counts.get('audited', 0)} test(s) {done}: {counts.get('clean', 0)} clean, "
                     f"{counts.get('with_syncs', 0)} with syncs, {counts.get('allowed', 0)} "
                     f"allowed only; {unseen}"
                     + ("" if not off else f"; {off} off/not run" if predicted
                        else f"; {off} not audited (off/not run)"))
    if scope:
        lines.append(f"scope: {scope}")
    ran = session_detectors(tests)
    if ran:
        lines.append(f"detectors: {ran}")
    other = Counter(t.detector_reason for t in tests
                    if t.audited and t.detector_reason and t.detector_reason != ran)
    for why, n in sorted(other.items()):
        lines.append(f"  {n} test(s) under other detectors: {why}")
    weaker = weaker_summary(t.weaker for t in tests if t.audited)
    if weaker:
        lines.append(weaker)
    rows = _top_sites(tests, "syncs", top)
    if rows:
        lines.append("top sync sites:")
        lines += rows
    outside = _top_sites(tests, "outside", top)
    if outside:
        n = sum(total(t.outside) for t in tests)
        n_sites = len({(r.kind, r.api, r.op, r.filename, r.lineno) for t in tests for r in t.outside})
        lines.append(f"outside scope (not failing): {n} sync(s) at {n_sites} site(s); top:")
        lines += outside
    shown = [(t, r) for t in tests for r in t.allowed if r.phase != "run"]
    if shown:
        lines.append(f"{len(shown)} sync site(s) while compiling or capturing CUDA graphs "
                     "(shown, not failing; --syncguard-fail-on-phase makes them fail):")
        for _, r in shown[:top]:
            lines.append(f"  {r.count:>4}x  {_short(r.filename, r.lineno)}  [{r.phase}] {r.kind} "
                         f"{r.op or r.api}  hint: {hint_for(r)}")
    not_audited = sorted({t.reason for t in tests if t.audit == "not_audited"} - {None})
    if not_audited:
        lines.append(("not predicted because: " if predicted else "not audited because: ")
                     + "; ".join(not_audited))
    return lines
