"""Syncs by phase (run / compile / graph_capture): parsing, judging, hints, the summary.

Events are built by hand (no GPU, no detector): the phase is the detector's to set; here only
what syncguard does with it is proven.
"""
from __future__ import annotations

import pytest

from syncguard.events import RegionReport, SyncEvent
from syncguard.explain import HINTS, hint_for, summary_lines
from syncguard.phases import judged, parse_phases
from syncguard.sessionfile import TestEntry


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


def test_judged_moves_only_the_phases_that_do_not_fail():
    run, comp, cap = ev("run", 1), ev("compile", 2), ev("graph_capture", 3)
    rep = RegionReport(syncs=[run, comp, cap], allowed=[ev("run", 9)])
    out = judged(rep, ())
    assert out.syncs == [run]
    assert [(e.lineno, e.phase) for e in out.allowed] == [(9, "run"), (2, "compile"),
                                                          (3, "graph_capture")]
    assert "--syncguard-fail-on-phase=compile" in out.allowed[1].reason
    assert judged(rep, ("compile",)).syncs == [run, comp]
    assert judged(rep, ("compile", "graph_capture")) is rep  # nothing to move
    assert rep.syncs == [run, comp, cap]  # the input is not changed


def test_hint_names_the_phase():
    assert hint_for(ev("compile")) == HINTS["compile"]
    assert hint_for(ev("graph_capture")) == HINTS["graph_capture"]
    assert hint_for(ev("run")) == HINTS["mask"]  # aten::nonzero, as before


def test_summary_lists_not_failing_phase_sites_with_line_and_hint():
    moved = judged(RegionReport(syncs=[ev("compile", 7)] * 2), ()).allowed
    tests = [TestEntry("t::a", "passed", "allowed", allowed=tuple(moved))]
    lines = summary_lines(tests, {"tests": 1, "audited": 1, "allowed": 1})
    i = next(i for i, x in enumerate(lines) if "while compiling or capturing CUDA graphs" in x)
    assert lines[i].startswith("1 sync site(s)")
    assert lines[i + 1].split()[:3] == ["2x", "model.py:7", "[compile]"]
    assert lines[i + 1].endswith(f"hint: {HINTS['compile']}")


def test_matrix_names_the_phase_of_a_sync():
    from syncguard import matrix as mx

    run = mx.Run("torch 2.11.0 · H200", "r.json", "2.11.0", "cuda", "H200")
    moved = judged(RegionReport(syncs=[ev("compile", 7)]), ()).allowed
    cell = mx.make_cell(TestEntry("t::a", "passed", "allowed", allowed=tuple(moved)), run)
    assert cell.allowed == ("cudaStreamSynchronize via aten::nonzero while compile at model.py:7",)
    assert mx.make_cell(TestEntry("t::b", "failed", "syncs", syncs=(ev("run", 3),)), run).syncs == (
        "cudaStreamSynchronize via aten::nonzero at model.py:3",)
