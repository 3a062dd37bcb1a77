"""Syncs by phase (run / compile / graph_capture): parsing, judging, hints, the summary.

Events are built by hand or announced through the FAKE detector with the phase given (no GPU):
the phase is the detector's to set; here only what syncguard does with it is proven. The judging
is the region's (one place); the plugin passes its option to the regions it opens.
"""
from __future__ import annotations

import dataclasses

import pytest

from syncguard.attribution.aggregate import aggregate
from syncguard.records.events import SyncEvent
from syncguard.reporting.explain import HINTS, hint_for, summary_lines
import syncguard
from syncguard.attribution.phases import not_failing_reason, parse_phases
from syncguard.testing import fake_sync
from syncguard.reporting.sessionfile import TestEntry


def ev(phase="run", line=1, op="aten::nonzero"):
    return SyncEvent(api="cudaStreamSynchronize", kind="stream_sync", op=op, filename="model.py",
                     lineno=line, phase=phase)


@pytest.mark.parametrize("value, expected", [
    ("compile", ("compile",)), ("compile, graph_capture", ("compile", "graph_capture")),
    ("compile,compile", ("compile",)), ("none", ()), ("", ()), (["graph_capture"], ("graph_capture",)),
])
def test_parse_phases(value, expected):
    assert parse_phases(value, "x") == expected


@pytest.mark.parametrize("value", ["run", "compiling", "compile,sideways"])
def test_parse_phases_refuses_unknown_and_run(value):
    with pytest.raises(ValueError, match=r"^x: unknown phase\(s\) .*; choose from compile, "
                                         r"graph_capture \(syncs in the 'run' phase always fail\)$"):
        parse_phases(value, "x")


def judged(phases, fail_on=()):
    """The region's verdict on FAKE syncs announced in these phases."""
    with syncguard.audit(("fake",), fail_on_phases=fail_on) as rep:
        for p in phases:
            fake_sync(phase=p)
    return rep


def test_the_region_moves_only_the_phases_that_do_not_fail():
    out = judged(["run", "compile", "graph_capture"])
    assert [e.phase for e in out.syncs] == ["run"]
    assert [e.phase for e in out.allowed] == ["compile", "graph_capture"]
    assert "--syncguard-fail-on-phase=compile" in out.allowed[0].reason
    assert "fail_on_phases=('compile',)" in out.allowed[0].reason
    assert [e.phase for e in judged(["run", "compile"], ("compile",)).syncs] == ["run", "compile"]
    both = judged(["compile", "graph_capture"], ("compile", "graph_capture"))
    assert len(both.syncs) == 2 and not both.allowed


def test_fake_sync_refuses_an_unknown_phase():
    with pytest.raises(ValueError, match="phase"):
        fake_sync(phase="linking")


def test_hint_names_the_phase():
    assert hint_for(ev("compile")) == HINTS["compile"]
    assert hint_for(ev("graph_capture")) == HINTS["graph_capture"]
    assert hint_for(ev("run")).startswith("sync-free alternative: torch.nonzero_static")


def test_summary_lists_not_failing_phase_sites_with_line_and_hint():
    moved = [dataclasses.replace(ev("compile", 7), reason=not_failing_reason("compile"))] * 2
    tests = [TestEntry("t::a", "passed", "allowed", allowed=tuple(aggregate(moved)[0]))]
    lines = summary_lines(tests, {"tests": 1, "audited": 1, "allowed": 1})
    i = next(i for i, x in enumerate(lines) if "while compiling or capturing CUDA graphs" in x)
    assert lines[i].startswith("1 sync site(s)")
    assert lines[i + 1].split()[:3] == ["2x", "model.py:7", "[compile]"]
    assert lines[i + 1].endswith(f"hint: {HINTS['compile']}")


def test_matrix_names_the_phase_of_a_sync():
    from syncguard.reporting import matrix as mx

    run = mx.Run("torch 2.11.0 · H200", "r.json", "2.11.0", "cuda", "H200")
    moved = [dataclasses.replace(ev("compile", 7), reason=not_failing_reason("compile"))]
    cell = mx.make_cell(TestEntry("t::a", "passed", "allowed", allowed=tuple(moved)), run)
    assert cell.allowed == (
        mx.Tally("cudaStreamSynchronize via aten::nonzero while compile at model.py:7", 1),)
    assert mx.make_cell(TestEntry("t::b", "failed", "syncs", syncs=(ev("run", 3),)), run).syncs == (
        mx.Tally("cudaStreamSynchronize via aten::nonzero at model.py:3", 1),)


def test_matrix_and_gate_count_compile_syncs_apart_from_run_syncs():
    """One per-site record holding 3 run-phase and 2 compile-phase syncs: the cell lists each
    phase's syncs with their phase, and the gate budgets them as two sites."""
    from syncguard.reporting import matrix as mx

    run = mx.Run("torch 2.11.0 · H200", "r.json", "2.11.0", "cuda", "H200")
    events = [ev("run", 7)] * 3 + [ev("compile", 7)] * 2
    records = aggregate(events)[0]
    assert len(records) == 1 and dict(records[0].phases) == {"run": 3, "compile": 2}
    cell = mx.make_cell(TestEntry("t::a", "passed", "allowed", allowed=tuple(records)), run)
    assert cell.allowed == (
        mx.Tally("cudaStreamSynchronize via aten::nonzero at model.py:7", 3),
        mx.Tally("cudaStreamSynchronize via aten::nonzero while compile at model.py:7", 2))
    assert cell.n_allowed == 5 and sorted(mx.phrases(cell.allowed)) == sorted(
        ["cudaStreamSynchronize via aten::nonzero at model.py:7"] * 3
        + ["cudaStreamSynchronize via aten::nonzero while compile at model.py:7"] * 2)
    where = "cudaStreamSynchronize in ? (model.py)"
    assert cell.sites == {where: 3, f"{where} while compile": 2}
