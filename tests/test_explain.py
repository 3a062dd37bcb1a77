"""The failure table, hints and summary lines. Events are built by hand (no GPU, no detector)."""
from __future__ import annotations

import pytest

from syncguard.attribution.aggregate import aggregate
from syncguard.records.events import RegionReport, SyncEvent
from syncguard.reporting.explain import HINTS, group_by_site, hint_for, failure_table, summary_lines
from syncguard.reporting.sessionfile import TestEntry


@pytest.fixture
def src(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the table shows paths relative to the working directory
    path = tmp_path / "model.py"
    path.write_text("def f(x, mask):\n    y = x[mask]\n    return y.sum().item()\n"
                    "    z = x.repeat_interleave(r)\n")
    return str(path)


def ev(src, line, kind="stream_sync", api="cudaStreamSynchronize", op=None, ops=(), **kw):
    return SyncEvent(api=api, kind=kind, op=op, ops=ops, filename=src, lineno=line, function="f",
                     thread="MainThread", **kw)


NONZERO_ALT = "sync-free alternative: torch.nonzero_static(mask, size=N) (the number of non-zeros"
REPEAT_ALT = "sync-free alternative: repeat_interleave(counts, output_size=total) (the output"


@pytest.mark.parametrize("kw, start", [
    # ops the alternatives table knows: its entry is the hint (one source of truth)
    (dict(op="aten::nonzero", ops=("aten::index", "aten::nonzero")), NONZERO_ALT),
    (dict(op="aten::masked_select"), "sync-free alternative: torch.where(mask, x, 0) (keeps the shape)"),
    (dict(op="aten::_local_scalar_dense", ops=("aten::repeat_interleave", "aten::_local_scalar_dense")),
     REPEAT_ALT),
    (dict(op="aten::one_hot"), "sync-free alternative: F.one_hot(labels, num_classes=C)"),
])
def test_hint_for_comes_from_the_alternatives_table_where_it_knows_the_op(src, kw, start):
    assert hint_for(ev(src, 1, **kw)).startswith(start)


@pytest.mark.parametrize("kw, hint", [
    (dict(op="aten::index_put_"), "mask"),
    (dict(kind="pageable_copy", api="cudaMemcpyAsync", op="aten::copy_"), "pin"),
    (dict(kind="blocking_copy_h2d", api="cudaMemcpyAsync", op="aten::copy_"), "pin"),
    (dict(op="aten::_local_scalar_dense"), "scalar"),
    (dict(kind="blocking_copy_d2h", api="cudaMemcpyAsync", op="aten::copy_"), "d2h"),
    (dict(kind="implicit_free", api="cudaFree"), "free"),
    (dict(kind="device_sync", api="cudaDeviceSynchronize"), "wait"),
    (dict(kind="event_sync", api="cudaEventSynchronize"), "wait"),
    (dict(), "default"),
])
def test_hint_for(src, kw, hint):
    assert hint_for(ev(src, 1, **kw)) == HINTS[hint]


def test_repeat_interleave_recognised_from_the_source_line(src):
    # the trace attributes the sync to _local_scalar_dense; the line says what called it
    assert hint_for(ev(src, 4, op="aten::_local_scalar_dense")).startswith(REPEAT_ALT)


def test_table_shows_site_source_thread_blocked_and_hint(src):
    rep = RegionReport(syncs=[ev(src, 2, op="aten::nonzero", host_blocked_us=812.4)] * 3
                 + [ev(src, 3, op="aten::_local_scalar_dense", note="exceeds allow(max=1): x")],
                 allowed=[ev(src, 3, reason="logged once per step")], detectors=("trace",),
                 notes=["trace detector not used: busy"])
    text = failure_table(rep, title="syncguard: t::x")
    assert text.splitlines()[0] == "syncguard: t::x"
    assert "model.py:2" in text and "y = x[mask]" in text and "return y.sum().item()" in text
    assert "stream_sync x3" in text and "812 us" in text and "MainThread" in text
    assert f"hint #1: {NONZERO_ALT}" in text
    assert f"hint #2: {HINTS['scalar']} [exceeds allow(max=1): x]" in text
    assert "1 allowed sync(s): " in text and "(logged once per step)" in text
    assert "note: trace detector not used: busy" in text
    assert all(line == line.rstrip() for line in text.splitlines())


def test_table_caps_rows(src):
    rep = RegionReport(syncs=[ev(src, i) for i in range(1, 31)])
    text = failure_table(rep, max_rows=5)
    assert "hint #5" in text and "hint #6" not in text and "... and 25 more call site(s)" in text


def test_group_by_site_counts_in_first_seen_order(src):
    a, b = ev(src, 2), ev(src, 3)
    assert group_by_site([a, b, a, a]) == [(a, 3), (b, 1)]


def _records(*events):
    """A session report's per-site records of these events (aggregate.py)."""
    return tuple(aggregate(events)[0])


def test_summary_lines(src):
    tests = [
        TestEntry("t::a", "passed", "syncs", syncs=_records(*(ev(src, 2, op="aten::nonzero"),) * 2)),
        TestEntry("t::b", "passed", "syncs", syncs=_records(ev(src, 2, op="aten::nonzero"),
                                                             ev(src, 3))),
        TestEntry("t::c", "passed", "not_audited", reason="CUDA is not available"),
        TestEntry("t::d", "passed", "off"),
    ]
    counts = {"tests": 4, "audited": 2, "clean": 0, "with_syncs": 2, "allowed": 0, "not_audited": 1}
    lines = summary_lines(tests, counts, top=1)
    assert lines[0] == ("2 test(s) audited: 0 clean, 2 with syncs, 0 allowed only; "
                        "1 not audited (no CUDA); 1 not audited (off/not run)")
    assert lines[1] == "top sync sites:"
    assert lines[2].split() == ["3x", f"{lines[2].split()[1]}", "stream_sync", "aten::nonzero",
                                "(2", "test(s))"] and lines[2].split()[1].endswith("model.py:2")
    assert lines[3] == "not audited because: CUDA is not available"
