"""The snippet corpus on a real GPU: every sync flagged with the right kind and line, nothing
flagged for the clean ones, by the default (cuda) detector, by the torch-hook fallback, and by
each hook alone.

The cuda detector cannot subscribe once torch.profiler has run in a process (one CUPTI subscriber
per process), so the profile-detector test is separate (``-k profile``, run in its own pytest
invocation); here a default-detector test that finds cuda unavailable skips and says why."""
from __future__ import annotations

import threading
import warnings

import pytest

import syncguard
from tests.gpu.corpus import SNIPPETS

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def s():
    import torch

    st = __import__("tests.gpu.corpus", fromlist=["state"]).state()
    for snip in SNIPPETS:  # warm every path once: lazy init is not what we audit
        snip.fn(st)
    (st.a @ st.a).sum().item()
    torch.cuda.synchronize()
    return st


TORCH = __import__("torch").__version__


def _run(snip, st, detectors=("auto",)):
    import torch

    torch.cuda.synchronize()
    with syncguard.audit(detectors) as report:
        snip.fn(st)
    return report


@pytest.mark.parametrize("snip", SNIPPETS, ids=[x.name for x in SNIPPETS])
def test_default_detector(snip, s):
    report = _run(snip, s)
    if "cuda" not in report.detectors:
        pytest.skip(f"cuda detector not used in this process: {report.detector_reason}")
    assert report.allowed == []
    expect = snip.expected(TORCH)
    if not expect:
        assert report.syncs == [], syncguard.records.events.format_report(report)
        return
    assert report.syncs, f"{snip.name}: nothing flagged"
    assert {e.kind for e in report.syncs} == set(expect), syncguard.records.events.format_report(report)
    for e in report.syncs:
        assert e.filename and e.filename.endswith("corpus.py"), e
        assert e.lineno == snip.sync_line, (e.lineno, snip.sync_line, e)
        assert e.thread == threading.current_thread().name
        assert e.detectors == ("cuda",)
        assert e.host_blocked_us is not None and e.host_blocked_us >= 0


@pytest.mark.parametrize("snip", SNIPPETS, ids=[x.name for x in SNIPPETS])
def test_torch_hook_detectors_merged(snip, s):
    """debug + trace + the opt-in gpu_trace hook (lasting: fine in a test worker)."""
    report = _run(snip, s, ("debug", "trace", "gpu_trace"))
    expect = snip.hook_expected(TORCH)
    if not expect:
        assert report.syncs == [], syncguard.records.events.format_report(report)
        return
    assert {e.kind for e in report.syncs} == set(expect), syncguard.records.events.format_report(report)
    for e in report.syncs:
        assert e.lineno == snip.sync_line, (e.lineno, snip.sync_line, e)
        assert ("debug" in e.detectors) == snip.debug_expected(TORCH), e


@pytest.mark.parametrize("snip", SNIPPETS, ids=[x.name for x in SNIPPETS])
def test_debug_detector_alone(snip, s):
    report = _run(snip, s, ("debug",))
    if snip.debug_expected(TORCH):
        assert report.syncs and all(e.lineno == snip.sync_line for e in report.syncs)
    else:
        assert report.syncs == []  # its known blind spots, and the clean snippets


@pytest.mark.parametrize("snip", [x for x in SNIPPETS if x.expected(TORCH)], ids=lambda x: x.name)
def test_trace_hooks_alone(snip, s):
    report = _run(snip, s, ("trace", "gpu_trace"))
    assert {e.kind for e in report.syncs} == set(snip.hook_expected(TORCH)), syncguard.records.events.format_report(report)
    assert all(e.lineno == snip.sync_line for e in report.syncs), syncguard.records.events.format_report(report)


@pytest.mark.parametrize("snip", SNIPPETS, ids=[x.name for x in SNIPPETS])
def test_with_profile_detector_ops_are_named(snip, s):
    report = _run(snip, s, ("debug", "trace", "profile"))
    assert {e.kind for e in report.syncs} == set(snip.expected(TORCH)), syncguard.records.events.format_report(report)
    for e in report.syncs:
        assert e.lineno == snip.sync_line and "profile" in e.detectors, e
        assert e.host_blocked_us is not None
    linked = [e for e in report.syncs if e.kind not in ("device_sync", "event_sync", "implicit_free")
              and "synchronize" not in snip.name]
    assert all(e.op and e.op.startswith("aten::") for e in linked), syncguard.records.events.format_report(report)


def test_warnings_as_errors_change_nothing(s):
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with syncguard.audit() as report:
            s.x.sum().item()
        torch.cuda.synchronize()
    assert [e.kind for e in report.syncs] == ["blocking_copy_d2h"]


def test_sync_in_background_thread_is_seen_by_its_region(s):
    out = {}

    def worker():
        with syncguard.audit() as r:
            s.x.sum().item()
            __import__("torch").cuda.synchronize()
        out["r"] = r

    t = threading.Thread(target=worker, name="bg-worker")
    t.start()
    t.join()
    kinds = sorted(e.kind for e in out["r"].syncs)
    assert kinds == ["blocking_copy_d2h", "device_sync"], syncguard.records.events.format_report(out["r"])
    assert {e.thread for e in out["r"].syncs} == {"bg-worker"}


def test_region_ignores_other_threads_syncs(s):
    import torch

    go, done = threading.Event(), threading.Event()

    def worker():
        go.wait()
        s.x.sum().item()
        torch.cuda.synchronize()
        s.event.record()
        s.event.synchronize()
        done.set()

    t = threading.Thread(target=worker, name="noisy")
    t.start()
    with syncguard.audit() as report:
        go.set()
        done.wait()
        s.x * 2
    t.join()
    assert report.syncs == [], syncguard.records.events.format_report(report)


def test_allow_in_one_thread_does_not_cover_another(s):
    import torch

    inside, release = threading.Event(), threading.Event()

    def allower():
        with syncguard.audit():
            with syncguard.allow("background thread only"):
                inside.set()
                release.wait()

    t = threading.Thread(target=allower)
    t.start()
    inside.wait()
    try:
        with syncguard.audit(("debug",)) as report:
            s.x.sum().item()
    finally:
        release.set()
        t.join()
    torch.cuda.synchronize()
    assert len(report.syncs) == 1 and report.allowed == []


def test_allow_max_and_forbid(s):
    with syncguard.audit() as report:
        with syncguard.allow("one scalar per step", max=1):
            s.x.sum().item()
            s.x.max().item()
    assert len(report.allowed) == 1 and len(report.syncs) == 1
    assert "exceeds allow(max=1)" in report.syncs[0].note
    with pytest.raises(syncguard.SyncError) as info:
        with syncguard.forbid():
            __import__("torch").cuda.synchronize()
    assert info.value.report.syncs[0].kind == "device_sync"


def test_nested_regions_each_see_their_syncs(s):
    import torch

    with syncguard.audit() as outer:
        s.x.sum().item()
        with syncguard.audit() as inner:
            torch.cuda.synchronize()
        s.x.cpu()
    assert [e.kind for e in inner.syncs] == ["device_sync"]
    assert sorted(e.kind for e in outer.syncs) == ["blocking_copy_d2h", "blocking_copy_d2h", "device_sync"]


def test_state_restored_after_exception(s):
    import torch

    before = (torch.cuda.get_sync_debug_mode(), warnings._showwarnmsg, list(warnings.filters),
              torch.cuda.synchronize)
    with pytest.raises(KeyError):
        with syncguard.audit():
            s.x.sum().item()
            raise KeyError("boom")
    after = (torch.cuda.get_sync_debug_mode(), warnings._showwarnmsg, list(warnings.filters),
             torch.cuda.synchronize)
    assert before == after
    assert not torch.autograd.profiler._is_profiler_enabled
