"""How a sync travels through syncguard's layers: each step keeps its typed shape.

CPU only: every inner test run here uses the FAKE detector (``syncguard.testing.fake_sync()``),
which proves plumbing (attribution, judging, the session report), never GPU behaviour.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import syncguard.attribution.aggregate as aggregate_mod
import syncguard.pytest_plugin.session  # noqa: F401  (imported once, outside the inner runs)
import syncguard.reporting.explain  # noqa: F401
from syncguard.reporting import sessionfile
from syncguard.reporting.sessionfile import TestEntry

ROOT = Path(__file__).resolve().parents[1]
FAKE = "--syncguard-detectors=fake"

THREE_SITES = """
    from syncguard.testing import fake_sync  # FAKE detector: plumbing only

    def test_three_sites():
        fake_sync(op="aten::nonzero")
        fake_sync(op="aten::item")
        fake_sync(kind="device_sync", api="cudaDeviceSynchronize")

    def test_sync_then_assert():
        fake_sync(op="aten::nonzero")
        fake_sync(op="aten::item")
        assert False, "the test's own failure"

    def test_clean():
        pass
"""


@pytest.fixture
def run(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))

    def _run(*args, subprocess=False):
        args = ["-p", "no:cacheprovider", *args]
        if subprocess:
            return pytester.runpytest_subprocess(*args, timeout=180)
        return pytester.runpytest(*args)
    return _run


def test_each_event_is_judged_against_the_code_scope_once(pytester, run, monkeypatch):
    """A failing test's syncs are read by the judging, the failure table and the session
    report's records; the scope's decision for each event is made once and carried to all."""
    calls = []
    real = aggregate_mod.attribute

    def spy(frames, scope):
        calls.append(frames[0].lineno if frames else None)
        return real(frames, scope)

    monkeypatch.setattr(aggregate_mod, "attribute", spy)
    pytester.makepyfile(test_m=THREE_SITES)
    res = run("--syncguard", FAKE, "--syncguard-scope=*", "--syncguard-report=r.json")
    res.assert_outcomes(passed=1, failed=2)
    out = res.stdout.str()
    assert "aten::nonzero" in out and "cudaDeviceSynchronize" in out  # the table was drawn
    lines = [i for i, text in enumerate(pytester.path.joinpath("test_m.py").read_text()
                                        .splitlines(), 1) if "fake_sync(" in text]
    assert len(lines) == 5
    assert sorted(calls) == lines  # five events, one decision each
    tests = {t.nodeid.split("::")[-1]: t for t in
             sessionfile.load_document(pytester.path / "r.json")["tests"]}
    assert [r.lineno for r in tests["test_three_sites"].syncs] == lines[:3]
    assert [r.lineno for r in tests["test_sync_then_assert"].syncs] == lines[3:]


def test_a_new_scope_set_by_the_test_gets_its_own_decisions():
    """ItemState's judge follows the code scope (``syncguard.set_scope`` replaces it)."""
    from syncguard.attribution.codescope import EVERYWHERE, CodeScope
    from syncguard.pytest_plugin.session import ItemState

    state = ItemState(plan=None, codescope=EVERYWHERE)  # type: ignore[arg-type]
    first = state.judge
    assert state.judge is first
    state.codescope = CodeScope(include=("/nowhere",), text="/nowhere")
    assert state.judge is not first and state.judge.scope is state.codescope


def _counting(monkeypatch):
    """Spy on TestEntry's JSON round trip in this process."""
    counts = {"to_dict": 0, "from_dict": 0}
    to_dict, from_dict = TestEntry.to_dict, TestEntry.from_dict.__func__

    def spy_to(self):
        counts["to_dict"] += 1
        return to_dict(self)

    def spy_from(cls, data):
        counts["from_dict"] += 1
        return from_dict(cls, data)

    monkeypatch.setattr(TestEntry, "to_dict", spy_to)
    monkeypatch.setattr(TestEntry, "from_dict", classmethod(spy_from))
    return counts


def test_a_serial_run_never_round_trips_a_test_entry(pytester, run, monkeypatch):
    """In one process the entry the test's teardown builds is the entry the session keeps: no
    to_dict -> from_dict on the way (to_dict runs only where the report file is written)."""
    counts = _counting(monkeypatch)
    pytester.makepyfile(test_m=THREE_SITES)
    res = run("--syncguard", FAKE, "--syncguard-scope=*", "--syncguard-mode=record")
    res.assert_outcomes(passed=2, failed=1)
    assert counts == {"to_dict": 0, "from_dict": 0}  # no report file asked for: no JSON at all
    res = run("--syncguard", FAKE, "--syncguard-scope=*", "--syncguard-mode=record",
              "--syncguard-report=r.json")
    res.assert_outcomes(passed=2, failed=1)
    assert counts["from_dict"] == 0 and counts["to_dict"] > 0  # the file, and only the file
    doc = sessionfile.load_document(pytester.path / "r.json")
    assert sorted(t.audit for t in doc["tests"]) == ["clean", "syncs", "syncs"]


SPY_CONFTEST = """
    import os
    from syncguard.reporting.sessionfile import TestEntry

    _to, _from = TestEntry.to_dict, TestEntry.from_dict.__func__

    def _log(what):
        with open(os.path.join(os.path.dirname(__file__), "calls.txt"), "a") as f:
            f.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'controller')} {what}\\n")

    def to_dict(self):
        _log("to_dict")
        return _to(self)

    def from_dict(cls, data):
        _log("from_dict")
        return _from(cls, data)

    TestEntry.to_dict, TestEntry.from_dict = to_dict, classmethod(from_dict)
"""


def test_an_xdist_run_serializes_each_entry_once_to_cross(pytester, run, monkeypatch):
    """Under xdist each worker turns each entry into a dict once (it crosses execnet) and the
    controller reads each back once; the controller's other to_dict calls write the file."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this run's own, under -n
    pytester.makepyfile(test_m=THREE_SITES)
    pytester.makeconftest(SPY_CONFTEST)
    res = run("--syncguard", FAKE, "--syncguard-scope=*", "--syncguard-mode=record",
              "--syncguard-report=r.json", "-n", "2", subprocess=True)
    res.assert_outcomes(passed=2, failed=1)
    calls = pytester.path.joinpath("calls.txt").read_text().split("\n")
    worker_to = [c for c in calls if c.startswith("gw") and c.endswith(" to_dict")]
    assert len(worker_to) == 3
    assert [c for c in calls if c.startswith("gw") and c.endswith("from_dict")] == []
    assert calls.count("controller from_dict") == 3


# -- counts stay counts: a per-site record's count reaches the gate as a number -----------------

def _record(count: int, lineno: int = 7, phases=None):
    from syncguard.attribution.aggregate import SiteRecord

    return SiteRecord(kind="stream_sync", api="cudaStreamSynchronize", op="aten::item",
                      filename="/p/model.py", lineno=lineno, function="step", count=count,
                      phases=phases or {"run": count})


def test_a_cell_carries_a_records_count_not_one_phrase_per_sync():
    from syncguard.reporting import matrix as mx

    run = mx.Run("torch 2.11.0 · H200", "r.json", "2.11.0", "cuda", "H200")
    entry = TestEntry("t::a", "passed", "syncs", syncs=(_record(100_000),))
    cell = mx.make_cell(entry, run)
    assert cell.syncs == (mx.Tally("cudaStreamSynchronize via aten::item at model.py:7", 100_000),)
    assert cell.n_syncs == 100_000 and cell.text == "100000 syncs (stream_sync)"
    assert cell.sync_sites == {"cudaStreamSynchronize in step (model.py)": 100_000}


def test_the_gate_counts_the_same_from_tallies(tmp_path):
    """Baseline of a cell with 3 syncs at one site; a run with 5 there is a regression, one
    with 3 is not (the numbers come from the records' counts, never from len() of a list)."""
    from syncguard.reporting import baseline as bl
    from syncguard.reporting import matrix as mx

    def matrix_of(n):
        run = mx.Run("torch 2.11.0 · H200", "r.json", "2.11.0", "cuda", "H200")
        cell = mx.make_cell(TestEntry("t::a", "passed", "syncs", syncs=(_record(n),)), run)
        return mx.Matrix((run,), ("t::a",), {(run.label, "t::a"): cell})

    base = bl.make(matrix_of(3))
    assert base["runs"]["torch 2.11.0 · H200"]["t::a"]["syncs"] == 3
    assert bl.compare(matrix_of(3), base).regressions == ()
    worse = bl.compare(matrix_of(5), base).regressions
    assert [(d.before, d.after) for d in worse] == [
        ("3 syncs (stream_sync)", "5 syncs (cudaStreamSynchronize via aten::item at model.py:7)")]


# -- frames stay structured: parsed once where text is read, never by the code scope -----------

def test_a_recorded_events_frames_reach_the_code_scope_without_a_parse(monkeypatch):
    """A recorded event (the JSON a report holds) is parsed once, where it is read; from there
    the code scope reads its structured frames: no regex runs while it is judged."""
    import syncguard.records.frame as frame_mod
    from syncguard.attribution.codescope import CodeScope
    from syncguard.records.events import SyncEvent
    from syncguard.records.frame import Frame

    recorded = {"api": "cudaStreamSynchronize", "kind": "stream_sync", "filename": "/lib/x.py",
                "lineno": 5, "function": "inner",
                "stack": ["/lib/x.py:5 in inner", "/proj/pkg/m.py:12 in step"]}
    e = SyncEvent.from_dict(recorded)
    assert e.stack == (Frame("/lib/x.py", 5, "inner"), Frame("/proj/pkg/m.py", 12, "step"))
    assert e.to_dict()["stack"] == recorded["stack"]  # written back as it was read

    def no_parse(*_):
        raise AssertionError("the code scope parsed frame text")

    monkeypatch.setattr(frame_mod, "parse_frame", no_parse)
    monkeypatch.setattr(frame_mod, "parse_stack", no_parse)
    monkeypatch.setattr(aggregate_mod, "parse_stack", no_parse)
    judge = aggregate_mod.ScopeJudge(CodeScope(include=("/proj/pkg",), text="pkg"))
    how = judge(e)
    assert how.in_scope and how.counted is e.stack[1]  # the very frame object the event holds
    (record,), outside = aggregate_mod.aggregate([e], judge)
    assert outside == [] and record.lineno == 12 and record.stack == e.stack


def test_a_detectors_site_holds_frames():
    from syncguard.attribution.frames import user_site
    from syncguard.records.frame import Frame

    site = user_site()
    assert isinstance(site.stack[0], Frame)
    assert (site.stack[0].filename, site.stack[0].function) == (__file__, site.function)


def test_frame_text_that_is_no_frame_round_trips_and_is_skipped():
    from syncguard.attribution.codescope import frames_of
    from syncguard.records.events import SyncEvent

    e = SyncEvent.from_dict({"api": "a", "kind": "stream_sync", "stack": ["not a frame"]})
    assert e.stack == ("not a frame",) and e.to_dict()["stack"] == ["not a frame"]
    assert frames_of(None, None, None, e.stack) == ()
