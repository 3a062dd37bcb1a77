"""Classification and the debug hub, on the CPU.

Classification is fed profiler records shaped like those recorded on the H200 (reports/
probe-2.11.0.json and reports/trace-records-*.json); the debug hub is driven by a fake
``set_sync_debug_mode`` and a warning raised by hand: that proves the plumbing, not the GPU.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import threading
import time
import sys
import types
import warnings
from pathlib import Path

import hypothesis
import pytest
from hypothesis import strategies as st

from syncguard.detectors import hooks as detect
from syncguard import detectors
from syncguard.detectors import profiler
from syncguard.detectors.seam import DetectorUnavailable
from syncguard.attribution.frames import site_from_profiler_stack
from syncguard.detectors.profiler import TraceRecord, classify

REGION = "syncguard::region#1"


def rec(name, *ancestors, parent=None, copies=(), start=0.0, end=1.0):
    return TraceRecord(name, start, end, tuple(ancestors) + (REGION,), parent, tuple(copies))


def kinds(records):
    return [(s.kind, s.op, s.dropped) for s in classify(records)]


def test_item_is_a_blocking_d2h_copy():
    r = [rec("cudaMemcpyAsync", "aten::_local_scalar_dense", "aten::item", parent=1,
             copies=["Memcpy DtoH (Device -> Pinned)"], start=1),
         rec("cudaStreamSynchronize", "aten::_local_scalar_dense", "aten::item", parent=1, start=2)]
    out = classify(r)
    assert [(s.kind, s.op, s.ops) for s in out] == [
        ("blocking_copy_d2h", "aten::_local_scalar_dense", ("aten::item", "aten::_local_scalar_dense"))]
    assert out[0].debug_visible and out[0].linked


def test_pageable_non_blocking_copy_is_flagged_and_pinned_is_not():
    pageable = rec("cudaMemcpyAsync", "aten::copy_", "aten::_to_copy", parent=1,
                   copies=["Memcpy HtoD (Pageable -> Device)"])
    pinned = rec("cudaMemcpyAsync", "aten::copy_", parent=2, copies=["Memcpy HtoD (Pinned -> Device)"])
    d2d = rec("cudaMemcpyAsync", "aten::copy_", parent=3, copies=["Memcpy DtoD (Device -> Device)"])
    assert kinds([pageable, pinned, d2d]) == [("pageable_copy", "aten::copy_", None)]


def test_blocking_pageable_copy_is_one_blocking_copy():
    r = [rec("cudaMemcpyAsync", "aten::copy_", parent=1, copies=["Memcpy HtoD (Pageable -> Device)"]),
         rec("cudaStreamSynchronize", "aten::copy_", parent=1, start=2)]
    out = [s for s in classify(r) if not s.dropped]
    assert [(s.kind, s.api) for s in out] == [("blocking_copy_h2d", "cudaStreamSynchronize")]


def test_python_api_syncs_and_frees():
    r = [rec("cudaDeviceSynchronize", "syncguard::api#3"),
         rec("cudaEventSynchronize", "syncguard::api#4"),
         rec("cudaStreamSynchronize", "syncguard::api#5"),
         rec("cudaFree", "syncguard::api#6", start=5), rec("cudaFree", "syncguard::api#6", start=6, end=9)]
    out = classify(r)
    assert [s.kind for s in out] == ["device_sync", "event_sync", "stream_sync", "implicit_free"]
    assert out[-1].duration_us == 4  # two segment frees of one call, reported once
    assert not any(s.linked for s in out)


def test_lazy_library_init_free_is_dropped():
    assert kinds([rec("cudaFree", "aten::mm", "aten::matmul", parent=1)]) == [
        ("implicit_free", "aten::mm", "library lazy initialisation")]


def test_profilers_own_stop_sync_is_outside_every_region():
    stop = TraceRecord("cudaDeviceSynchronize", 10, 11, (), None, ())
    stop_214 = TraceRecord("cudaDeviceSynchronize", 10, 11, ("aten::_cuda_synchronize",), 7, ())
    assert all(REGION not in s.markers for s in classify([stop, stop_214]))


def test_python_call_events_are_not_ops_but_give_the_line():
    """torch 2.14 puts the profiler's Python-call events between ops (reports/probes/
    trace-records-2.14.1.json): they must not pose as the op, and they name the user's line."""
    r = [rec("cudaMemcpyAsync", "aten::copy_", "aten::to", "<built-in method to of Tensor object>",
             "/u/model.py(41): step", parent=1, copies=["Memcpy HtoD (Pageable -> Device)"])]
    (s,) = classify(r)
    assert (s.kind, s.ops) == ("pageable_copy", ("aten::to", "aten::copy_"))
    site = site_from_profiler_stack(s.stack)
    assert (site.filename, site.lineno) == ("/u/model.py", 41)


def test_non_sync_calls_are_ignored():
    r = [rec("cudaMemcpyAsync", "aten::copy_", parent=1, copies=["Memcpy HtoD (Pinned -> Device)"])]
    assert classify(r) == []


def test_record_json_round_trip():
    r = rec("cudaFree", "aten::empty", parent=4, copies=["x"])
    assert TraceRecord.from_dict(json.loads(json.dumps(r.to_dict()))) == r


RECORDED = sorted(Path(__file__).parent.parent.joinpath("reports", "probes").glob("trace-records-*.json"))


@pytest.mark.skipif(not RECORDED, reason="no recorded GPU trace committed yet")
@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_recorded_gpu_traces_classify_as_the_corpus_expects(path):
    """Replays traces recorded on the H200 by tools/corpus_report.py (plumbing check only)."""
    from tests.gpu.corpus import SNIPPETS

    doc = json.loads(path.read_text())
    data = doc["records"]
    for snip in SNIPPETS:
        recs = [TraceRecord.from_dict(d) for d in data[snip.name]]
        got = {s.kind for s in classify(recs) if not s.dropped and "syncguard::region#0" in s.markers}
        assert got == set(snip.expected(doc["torch"])), (path.name, snip.name, got)


# --- the debug hub, with torch's mode switch faked ---------------------------------------
@pytest.fixture
def fake_mode(monkeypatch):
    torch = pytest.importorskip("torch")
    state = {"mode": 0}
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: state["mode"])

    def set_mode(m):
        state["mode"] = {"warn": 1, "error": 2, "default": 0}.get(m, m)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", set_mode)
    return state


def _emit():
    warnings.warn("called a synchronizing CUDA operation", UserWarning)  # fake of torch's warning


def test_debug_hub_catches_the_warning_under_W_error_and_restores(fake_mode):
    hub = detect.DebugHub()
    seen = []
    before = (warnings._showwarnmsg, list(warnings.filters))
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("error")
        hub.arm(lambda o: seen.append(o) or True)
        assert fake_mode["mode"] == 1
        _emit()
        _emit()
        hub.disarm()
    assert fake_mode["mode"] == 0
    assert len(seen) == 2 and seen[0].site.function == "_emit"
    assert log == []  # nothing leaked into pytest's record
    assert (warnings._showwarnmsg, list(warnings.filters)) == before


@pytest.mark.parametrize("mine", [
    [("always", "called a synchronizing CUDA operation", UserWarning)],
    [("ignore", "Synchronization debug mode is a prototype feature", Warning)],
    [("always", "called a synchronizing CUDA operation", UserWarning),
     ("ignore", "Synchronization debug mode is a prototype feature", Warning)],
])
def test_a_users_filter_like_the_hubs_own_stays_where_it_was(fake_mode, mine):
    """Found by a reviewer: a user's filter identical to one the hub adds for a region was taken
    out of its place by warnings.filterwarnings (which moves an identical filter to the front),
    not counted as the hub's, and so left at the front of warnings.filters after the region."""
    hub = detect.DebugHub()
    with warnings.catch_warnings():
        for action, message, category in mine:  # the user's (the literal text, escaped)
            warnings.filterwarnings(action, message=re.escape(message), category=category)
        warnings.simplefilter("default", DeprecationWarning)  # and one in front of them
        filters = warnings.filters
        before = list(filters)
        for _ in range(2):  # every region, not only the first
            hub.arm(lambda o: True)
            _emit()
            hub.disarm()
            assert warnings.filters is filters and warnings.filters == before


def test_debug_hub_passes_other_warnings_through(fake_mode):
    hub = detect.DebugHub()
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        hub.arm(lambda o: True)
        try:
            warnings.warn("something else", DeprecationWarning)
        finally:
            hub.disarm()
    assert [str(w.message) for w in log] == ["something else"]


def test_debug_hub_keeps_previous_error_mode_for_syncs_outside_regions(fake_mode):
    fake_mode["mode"] = 2
    hub = detect.DebugHub()
    hub.arm(lambda o: False)  # no region wanted it
    try:
        with pytest.raises(RuntimeError, match="synchronizing"):
            _emit()
    finally:
        hub.disarm()
    assert fake_mode["mode"] == 2


def test_debug_hub_is_refcounted(fake_mode):
    hub = detect.DebugHub()
    hub.arm(lambda o: True)
    hub.arm(lambda o: True)
    hub.disarm()
    assert fake_mode["mode"] == 1
    hub.disarm()
    hub.disarm()  # one too many is harmless
    assert fake_mode["mode"] == 0


def test_profiler_stack_attribution_skips_torch_frames():
    import os

    import torch

    tfile = os.path.join(os.path.dirname(torch.__file__), "cuda", "__init__.py")
    site = site_from_profiler_stack([f"{tfile}(12): synchronize", "/u/model.py(41): step"])
    assert (site.filename, site.lineno, site.function) == ("/u/model.py", 41, "step")


# ---------------------------------------------------------------------------------------------
# The cuda detector's plumbing on the CPU. These tests use a FAKE libcupti object and fake
# callback data built with ctypes: they prove the bookkeeping (subscription refcount, runtime/
# driver de-duplication, routing, pairing copies with syncs), never GPU behaviour, which
# tests/gpu/test_real_programs.py checks on the H200 against the profiler's runtime trace.

import ctypes  # noqa: E402

from syncguard.detectors import routing  # noqa: E402
from syncguard.attribution.frames import Site  # noqa: E402
from syncguard.detectors.cuda import cupti as C  # noqa: E402
from syncguard.testing import marked_line  # noqa: E402
from syncguard.detectors.cuda.detector import (DRIVER_APIS, RUNTIME_APIS, CudaCall, CuptiHub,  # noqa: E402
                                      canonical, combine)
from syncguard.detectors.cuda.hostmem import ByCorrelation, ByPointer  # noqa: E402
from syncguard.detectors.cuda import detector as cuda  # noqa: E402
from syncguard.records.events import SyncEvent  # noqa: E402


class FakeLib:
    """Stands in for libcupti: records calls, returns CUPTI_SUCCESS (or a chosen error).
    ``c_functions``: the subscription's three entry points are C function pointers (ctypes
    callbacks into this object), as a real library's are, so the C module calls them itself."""

    _TYPES = {
        "cuptiSubscribe": ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                           ctypes.c_void_p, ctypes.c_void_p),
        "cuptiEnableCallback": ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                                                ctypes.c_int, ctypes.c_uint32),
        "cuptiUnsubscribe": ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)}

    def __init__(self, subscribe_error=0, c_functions=False):
        self.calls, self.subscribe_error, self.enabled = [], subscribe_error, {}
        if c_functions:
            for name, ftype in self._TYPES.items():
                setattr(self, name, ftype(self._c(name)))  # kept alive here, as CUPTI's are

    def _c(self, name):
        record = self.__getattr__(name)

        def fn(*args):
            if name == "cuptiSubscribe":
                code = record(*args)
                if not code:
                    args[0][0] = 0x5ca1ab1e  # the subscriber handle CUPTI writes back
                return code
            return record(*args)
        return fn

    def __getattr__(self, name):
        def fn(*args):
            self.calls.append(name)
            if name == "cuptiEnableCallback":
                on, _, domain, cbid = args
                self.enabled[(domain, cbid)] = on
            return self.subscribe_error if name == "cuptiSubscribe" else 0
        return fn


def _c_callback_built() -> bool:
    try:
        from syncguard.detectors.cuda import _cuptifast  # noqa: F401
    except ImportError:
        return False
    return True


#: the two callbacks CUPTI may be given: tests that fire callbacks run through both
PATHS = ["python", pytest.param("c", marks=pytest.mark.skipif(
    not _c_callback_built(), reason="the C callback (_cuptifast) is not built here"))]


class FakeHub(CuptiHub):
    """A hub over a fake libcupti. ``path="c"`` configures the C callback (``_cuptifast``) with
    this hub's table, and :func:`_fire` then calls it as CUPTI would (GIL released); the fake's
    subscription entry points are then C function pointers, which the C module calls itself."""

    def __init__(self, subscribe_error=0, path="python"):
        super().__init__()
        _HUBS.append(self)
        fake = FakeLib(subscribe_error, c_functions=path == "c")
        self.lib = types.SimpleNamespace(lib=fake, path="fake",
                                         error_name=lambda c: f"err{c}",
                                         check=lambda code, what: None)
        self.table = {(2, 41): ("cudaMemcpyAsync",) + RUNTIME_APIS["cudaMemcpyAsync"],
                      (2, 131): ("cudaStreamSynchronize",) + RUNTIME_APIS["cudaStreamSynchronize"],
                      (1, 126): ("cuStreamSynchronize",) + DRIVER_APIS["cuStreamSynchronize"]}
        if path == "c":
            self.use_fast()
            assert self.fast is not None, self.callback

    def unavailable(self):
        return None


class FakeRegion:
    def __init__(self):
        self.observations, self.state = [], {}
        self.report = types.SimpleNamespace(notes=[])


_HUBS: list = []  # every FakeHub made by the running test, closed after it


@pytest.fixture(autouse=True)
def _close_fake_hubs():
    yield
    while _HUBS:
        _HUBS.pop().close()


@contextlib.contextmanager
def _inside(hub, *regions):
    """This thread inside ``regions`` as a region's entry on it puts it there: the regions
    context variable set and the thread routed in the hub's routing table."""
    token = routing.regions.set(regions)
    me = threading.get_ident()
    hub._route(me, 1)
    try:
        yield
    finally:
        hub._route(me, -1)
        routing.regions.reset(token)


def _fire(hub, domain, cbid, site, corr, params=None):
    data = C.CallbackData(callbackSite=site, correlationId=corr,
                          functionParams=ctypes.addressof(params) if params is not None else None)
    addr, fast = ctypes.addressof(data), hub.fast
    fast.fire(domain, cbid, addr) if fast else hub._callback(None, domain, cbid, addr)  # L-FIRE


def test_canonical_names_drop_version_suffixes():
    assert canonical("cudaMemcpyAsync_ptsz_v7000") == "cudaMemcpyAsync_ptsz"
    assert canonical("cuMemcpyHtoD_v2") == "cuMemcpyHtoD"
    assert canonical("cudaStreamSynchronize_v3020") == "cudaStreamSynchronize"


def test_every_version_of_a_watched_api_gets_its_callback_enabled():
    """A fake CUPTI name table shaped like CUDA 13's (ids made up): CUDA keeps a driver API's
    old entry point beside the new one, and cuda.h compiles a call to the newest, so a C++
    extension calling cuMemcpyDtoH or cuCtxSynchronize reaches the _v2 id. Both must be watched
    (0133499 kept only the first id per name and saw no direct driver copy or device sync)."""
    from syncguard.detectors.cuda.calls import callback_table

    names = {(1, 17): "cuCtxSynchronize", (1, 600): "cuCtxSynchronize_v2",
             (1, 30): "cuMemcpyDtoH", (1, 290): "cuMemcpyDtoH_v2", (1, 31): "cuLaunchKernel",
             (1, 128): "cuStreamSynchronize", (2, 41): "cudaMemcpyAsync_v3020",
             (2, 165): "cudaDeviceSynchronize_v3020", (2, 22): "cudaGetDevice_v3020"}
    lib = types.SimpleNamespace(callback_name=lambda d, i: names.get((d, i)))
    table = callback_table(lib)
    assert sorted(table) == [(1, 17), (1, 30), (1, 128), (1, 290), (1, 600), (2, 41), (2, 165)]
    assert table[(1, 600)][:2] == ("cuCtxSynchronize", "sync")
    assert table[(1, 290)][:3] == ("cuMemcpyDtoH", "copy", "d2h")


@pytest.mark.parametrize("path", PATHS)
def test_one_subscription_for_the_process_and_a_region_is_a_route(path):
    """Fake libcupti: the first region subscribes, every later one only routes its thread (the
    routing table), and the last one's exit leaves CUPTI subscribed. With the C callback every id
    stays on; with the Python one (a ctypes call per callback) they are on only while a region
    is open. close() undoes everything, torch's profiler functions included."""
    ap = pytest.importorskip("torch.autograd.profiler")
    before = ap._prepare_profiler, ap._disable_profiler
    hub, a, b = FakeHub(path=path), FakeRegion(), FakeRegion()
    me = threading.get_ident()
    hub.acquire(a)
    hub.acquire(b)
    assert ap._prepare_profiler.__wrapped__ is before[0]  # a starting profiler is lent CUPTI
    assert ap._disable_profiler.__wrapped__ is before[1]  # and a stopping one gives it back
    calls = hub.lib.lib.calls
    assert calls.count("cuptiSubscribe") == 1 and calls.count("cuptiEnableCallback") == 3
    assert "cuptiEnableDomain" not in calls  # never a whole domain: launches must not call Python
    assert routing.threads.get(me) == 2
    if hub.fast is not None:
        assert hub.fast.routes()[0].get(me) == 2
    hub.release(a)
    hub.release(b)
    hub.release(b)  # releasing twice is harmless
    assert hub.subscribed and "cuptiUnsubscribe" not in calls and me not in routing.threads
    assert set(hub.lib.lib.enabled.values()) == ({1} if path == "c" else {0})
    if hub.fast is not None:
        assert me not in hub.fast.routes()[0]
    hub.acquire(a)  # again: no new subscription
    assert calls.count("cuptiSubscribe") == 1 and set(hub.lib.lib.enabled.values()) == {1}
    hub.release(a)
    hub.close()
    assert not hub.subscribed and calls.count("cuptiUnsubscribe") == 1
    assert set(hub.lib.lib.enabled.values()) == {0}  # switched off before unsubscribing
    assert calls.index("cuptiUnsubscribe") > max(
        i for i, c in enumerate(calls) if c == "cuptiEnableCallback")
    assert (ap._prepare_profiler, ap._disable_profiler) == before


@pytest.mark.parametrize("path", PATHS)
def test_a_region_ending_beside_a_live_thread_keeps_cupti_and_that_thread_is_not_routed(path):
    """Fake libcupti, real threads. Unsubscribing beside a syncing thread crashed it on the H200
    (reports/probes/cupti-threads-2.11.0/, reports/probes/stress-e8a2950/): nothing is
    unsubscribed at a region's exit now, whoever lives. Another thread's calls, while this
    thread's region is open, reach no region (its thread has no route)."""
    hub, a = FakeHub(path=path), FakeRegion()
    lib = hub.lib.lib
    hub.acquire(a)
    sync = C.StreamParams(stream=0)

    def other():  # even with the region in its context: it was not entered on this thread
        token = routing.regions.set((a,))
        try:
            _fire(hub, 2, 131, C.API_ENTER, 9, sync)
            _fire(hub, 2, 131, C.API_EXIT, 9, sync)
        finally:
            routing.regions.reset(token)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    hub.release(a)
    assert a.observations == [] and hub.subscribed and "cuptiUnsubscribe" not in lib.calls
    assert not any("thread(s) alive" in n for n in a.report.notes)


def _armed_debug(monkeypatch):
    """sync-debug mode's hub replaced by a recorder (the CPU build has no sync-debug mode)."""
    armed = []
    monkeypatch.setattr(detect.HUBS.debug, "arm", lambda *a: armed.append(True))
    monkeypatch.setattr(detect.HUBS.debug, "disarm", lambda: armed.append(False))
    return armed


@pytest.mark.parametrize("path", PATHS)
def test_a_profiler_is_lent_cupti_cleanly_and_it_is_taken_back_at_its_stop(path, monkeypatch):
    """Fake libcupti. At a profiler's start (hand_over): every id off before unsubscribing, the
    C callback's gate shut; the region open goes on with sync-debug mode and says so, a region
    entered meanwhile runs without the detector, saying why (``weaker``). At its stop
    (take_back, no region open): subscribed again, nothing weaker."""
    armed = _armed_debug(monkeypatch)
    hub, a = FakeHub(path=path), FakeRegion()
    lib = hub.lib.lib
    hub.acquire(a)
    hub.hand_over(Site("train.py", 12, "step"))
    assert hub.handed and hub.hand_overs == 1 and not hub.subscribed and not hub.shared
    calls = lib.calls
    assert calls.count("cuptiUnsubscribe") == 1 and set(lib.enabled.values()) == {0}
    assert calls.index("cuptiUnsubscribe") > max(
        i for i, c in enumerate(calls) if c == "cuptiEnableCallback")
    assert hub.weaker.startswith("torch.profiler started at train.py:12 and took CUPTI")
    assert armed == [True] and any(hub.weaker in n and "'debug'" in n for n in a.report.notes)
    if hub.fast is not None:
        assert not hub.fast.gate()
    with pytest.raises(DetectorUnavailable, match="train.py:12"):
        hub.acquire(FakeRegion())
    hub.hand_over(Site("train.py", 13, "step"))  # the profiler's start after its prepare: once
    assert hub.hand_overs == 1
    hub.release(a)
    assert armed == [True, False]
    hub.take_back()
    assert hub.subscribed and not hub.handed and hub.weaker is None
    assert calls.count("cuptiSubscribe") == 2 and set(lib.enabled.values()) == {1}
    if hub.fast is not None:
        assert hub.fast.gate()
    with hub.lent():  # the same, as a context manager
        assert hub.handed and not hub.subscribed
    assert hub.subscribed and hub.hand_overs == 2


@pytest.mark.parametrize("path", PATHS)
def test_cupti_not_taken_back_says_why_and_each_later_region_tries_again(path):
    """Fake libcupti refusing the second subscription, as CUPTI does while Kineto keeps its
    subscriber (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED): the region's reason names it;
    once the fake lets go (as Kineto does after its teardown, TEARDOWN_CUPTI=1), the next
    region subscribes."""
    hub = FakeHub(path=path)
    lib = hub.lib.lib
    hub.acquire(a := FakeRegion())
    hub.release(a)
    hub.hand_over(Site())
    lib.subscribe_error = 39
    hub.take_back()
    assert not hub.handed and not hub.subscribed
    assert hub.weaker.startswith("CUPTI not taken back after torch.profiler (cuptiSubscribe failed: err39")
    with pytest.raises(DetectorUnavailable, match="not taken back"):
        hub.acquire(FakeRegion())
    lib.subscribe_error = 0
    hub.acquire(b := FakeRegion())
    assert hub.subscribed and hub.weaker is None and lib.calls.count("cuptiSubscribe") == 4
    hub.release(b)


@pytest.mark.parametrize("teardown", [None, "0", "1"])
def test_cupti_not_taken_back_names_the_remedy_and_syncguard_never_sets_it(monkeypatch, teardown):
    """Fake libcupti refusing the second subscription (Kineto kept CUPTI after its trace): the
    reason (the hub's ``weaker``, what the refused region is told) names TEARDOWN_CUPTI=1 as the
    remedy (with Kineto's teardown a later region takes CUPTI back: measured on the H200 in
    reports/probes/routing-1bfd7e3/routing-2.11.0.md), or, where it is set already, says a later
    region takes it back. syncguard never sets the variable: torch.compile sets it to 0 with
    CUDA graphs, and setting it would change the user's program."""
    if teardown is None:
        monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    else:
        monkeypatch.setenv("TEARDOWN_CUPTI", teardown)
    hub = FakeHub()
    hub.acquire(a := FakeRegion())
    hub.release(a)
    hub.hand_over(Site())
    hub.lib.lib.subscribe_error = 39
    hub.take_back()
    with pytest.raises(DetectorUnavailable) as e:
        hub.acquire(FakeRegion())
    assert str(e.value) == hub.weaker
    if teardown == "1":
        assert hub.weaker.endswith("; TEARDOWN_CUPTI=1 is set: Kineto lets CUPTI go after a "
                                   "trace, at a later CUDA call, and a later region takes it back")
    else:
        assert hub.weaker.endswith("; Kineto keeps CUPTI after a trace; set TEARDOWN_CUPTI=1 "
                                   "(not with CUDA graphs) to let regions take it back")
    assert os.environ.get("TEARDOWN_CUPTI") == teardown  # left as the user set it, or unset


def test_wrapped_profiler_functions_call_the_hooks_around_torchs_own(monkeypatch):
    """Fake stand-ins for torch's profiler functions: the hand-over runs before the start, the
    take-back after the stop (even when the stop raises), a failing hook never reaches the
    profiler, and unwrap puts torch's functions back."""
    ap = pytest.importorskip("torch.autograd.profiler")
    from syncguard.detectors.cuda.lending import unwrap, wrap_profiler

    seen = []

    def prepare(*a):
        seen.append("prepare")

    def disable():
        seen.append("disable")
        raise RuntimeError("stop failed")

    monkeypatch.setattr(ap, "_prepare_profiler", prepare)
    monkeypatch.setattr(ap, "_disable_profiler", disable)

    def hand_over(site):
        seen.append("hand_over")
        raise ValueError("a hook that fails")

    saved = wrap_profiler(hand_over, lambda: seen.append("take_back"))
    try:
        ap._prepare_profiler(1)
        with pytest.raises(RuntimeError, match="stop failed"):
            ap._disable_profiler()
    finally:
        unwrap(saved)
    assert seen == ["hand_over", "prepare", "disable", "take_back"]
    assert ap._prepare_profiler is prepare and ap._disable_profiler is disable


@pytest.mark.parametrize("path", PATHS)
def test_torchs_own_profiler_is_lent_cupti_and_gives_it_back_through_the_wrappers(path):
    """This torch's real ``torch.profiler.profile`` (CPU activity: the CPU build has no CUDA),
    beside a hub over a fake libcupti: the profiler's own start and stop go through the
    wrapped ``torch.autograd.profiler`` functions, so CUPTI is lent at its start and taken back
    at its stop, and the profiler records as it does without syncguard."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    def profiled():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.ones(8).sum()
        return sorted({e.name for e in prof.events() if e.name.startswith("aten::")})

    bare = profiled()
    hub = FakeHub(path=path)
    hub.acquire(a := FakeRegion())
    hub.release(a)
    assert profiled() == bare
    calls = hub.lib.lib.calls
    assert hub.hand_overs == 1 and not hub.handed and hub.subscribed and hub.weaker is None
    assert calls.count("cuptiSubscribe") == 2 and calls.count("cuptiUnsubscribe") == 1  # lent, taken back
    assert calls.index("cuptiUnsubscribe") < len(calls) - 1 - calls[::-1].index("cuptiSubscribe")


@pytest.mark.skipif(not _c_callback_built(), reason="the C callback (_cuptifast) is not built here")
def test_a_full_routing_table_sends_every_thread_the_slow_way_and_results_stay_the_same():
    """The C routing table holds 1024 threads. Made-up thread idents fill it (no GPU, fake
    libcupti): a region routed past that is counted as overflow, and then a thread with no
    region takes the GIL again (the regions context variable decides: nothing is kept for it),
    while this thread's region still gets its call. Unrouting them empties the overflow."""
    from syncguard.detectors.cuda import _cuptifast

    hub, region = FakeHub(path="c"), FakeRegion()
    hub.acquire(region)
    sync = C.StreamParams(stream=0)

    def gil_takes_of_a_thread_with_no_region():
        _cuptifast.timing(True)

        def other():
            _fire(hub, 2, 131, C.API_ENTER, 5, sync)
            _fire(hub, 2, 131, C.API_EXIT, 5, sync)
        t = threading.Thread(target=other)
        t.start()
        t.join()
        return _cuptifast.timing(False)["ENTER: take the GIL"][1]

    fake = [0x7f0000000000 + 4096 * i for i in range(1100)]
    try:
        assert gil_takes_of_a_thread_with_no_region() == 0
        for ident in fake:
            _cuptifast.route(ident, 1)
        routes, overflow, _ = _cuptifast.routes()
        assert overflow == 1100 + 1 - 1024 and len(routes) == 1024  # this thread holds one slot
        assert routes[threading.get_ident()] == 1
        assert gil_takes_of_a_thread_with_no_region() == 1
        with _inside(hub, region):
            _fire(hub, 2, 131, C.API_ENTER, 6, sync)
            _fire(hub, 2, 131, C.API_EXIT, 6, sync)
        for ident in fake:
            _cuptifast.route(ident, -1)
        assert _cuptifast.routes()[1] == 0
        assert gil_takes_of_a_thread_with_no_region() == 0
    finally:
        hub.release(region)
        _cuptifast.clear_routes()
    assert [o.correlation for o in region.observations] == [(6,)]


@pytest.mark.skipif(not _c_callback_built(), reason="the C callback (_cuptifast) is not built here")
def test_a_hand_over_waits_for_a_callback_still_running_before_it_unsubscribes(monkeypatch):
    """Fake libcupti, real threads: a callback of the C module is still running on another
    thread (held inside the Python hand-over a backward pass's engine thread takes, until a
    timer lets it go); the hand-over shuts the gate, switches the ids off and waits, with the
    GIL released, for it to return before it unsubscribes."""
    _armed_debug(monkeypatch)
    hub = FakeHub(path="c")
    lib = hub.lib.lib
    inside, release = threading.Event(), threading.Event()

    def held(*args):
        inside.set()
        release.wait(10)
        lib.calls.append("callback returned")

    hub._callback = held
    hub.use_fast()
    hub.acquire(a := FakeRegion())
    hub.backward.active[1] = ((), (), Site(), "x")  # a backward pass in flight: engine threads
    hub.fast.route_backward(1)                     # go the Python way
    sync = C.StreamParams(stream=0)
    t = threading.Thread(target=lambda: _fire(hub, 2, 131, C.API_ENTER, 1, sync))
    t.start()
    assert inside.wait(10)
    threading.Timer(0.3, release.set).start()
    t0 = time.perf_counter()
    hub.hand_over(Site())
    waited = time.perf_counter() - t0
    t.join()
    hub.fast.route_backward(-1)
    hub.backward.active.clear()
    assert waited >= 0.25 and "callbacks still ran" not in hub.weaker
    assert lib.calls.index("callback returned") < lib.calls.index("cuptiUnsubscribe")
    hub.release(a)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("version", [130001, 130200])
def test_a_cupti_that_takes_several_subscribers_is_shared_and_never_handed_over(path, version):
    """Fake libcupti with a cuptiSubscribe_v2 (no GPU, no CUPTI 13.2 here: the device's 13.0
    lacks it): from version 13.2 on the hub subscribes with allowMultipleSubscribers and a
    profiler starting takes nothing from it; before 13.2 (13.0.1 exports the entry point but
    refuses it) the one-subscriber way, and the hand-over."""
    hub = FakeHub(path=path)
    lib = hub.lib.lib
    got = []
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                             ctypes.c_void_p, ctypes.POINTER(C.SubscriberParams))

    def subscribe_v2(handle, cb, userdata, params):
        lib.calls.append("cuptiSubscribe_v2")
        p = params.contents
        got.append((p.structSize, p.allowMultipleSubscribers, p.subscriberName))
        handle[0] = 0x5ca1ab1e
        return 0

    v2 = proto(subscribe_v2)
    hub.lib.shared_subscribe = lambda: v2 if version >= C.SHARED_SUBSCRIBE_VERSION else None
    hub.acquire(a := FakeRegion())
    hub.release(a)
    hub.hand_over(Site())
    if version >= C.SHARED_SUBSCRIBE_VERSION:
        assert hub.shared and hub.subscribed and not hub.handed and hub.hand_overs == 0
        assert got == [(ctypes.sizeof(C.SubscriberParams), 1, b"syncguard")]
        assert "cuptiSubscribe" not in lib.calls and "cuptiUnsubscribe" not in lib.calls
    else:
        assert not hub.shared and hub.handed and got == [] and lib.calls.count("cuptiSubscribe") == 1


def test_a_failure_after_subscribing_gives_the_subscription_back():
    """Fake libcupti whose cuptiEnableCallback raises (as a ctypes argument error would) after
    cuptiSubscribe succeeded: the region gets a one-line reason and CUPTI is not left held."""
    hub = FakeHub()
    lib = hub.lib.lib

    def enable(*args):
        lib.calls.append("cuptiEnableCallback")
        raise ctypes.ArgumentError("argument 2: wrong type")

    lib.cuptiEnableCallback = enable
    with pytest.raises(DetectorUnavailable, match="wrong type"):
        hub.acquire(FakeRegion())
    assert hub.users == 0 and not hub.subscribed and lib.calls.count("cuptiUnsubscribe") == 1
    assert not hub.handle.value


@pytest.mark.parametrize("path", PATHS)
def test_subscribe_failure_is_a_clear_unavailable_reason(path):
    hub = FakeHub(subscribe_error=39, path=path)
    with pytest.raises(DetectorUnavailable, match="cuptiSubscribe failed: err39"):
        hub.acquire(FakeRegion())
    assert hub.users == 0 and not hub.subscribed and hub.weaker.startswith("cuptiSubscribe failed: err39")
    hub.lib.lib.subscribe_error = 0
    hub.acquire(a := FakeRegion())
    assert hub.subscribed and hub.weaker is None
    hub.release(a)


@pytest.mark.parametrize("path", PATHS)
def test_runtime_and_driver_call_are_one_observation_and_copy_pairs_with_sync(path):
    """Fake callback data: a D2H copy then a stream sync whose driver call nests under it."""
    hub, region = FakeHub(path=path), FakeRegion()
    hub.acquire(region)
    token = routing.regions.set((region,))
    try:
        copy = C.MemcpyAsyncParams(dst=0x1000, src=0x2000, count=4, kind=2, stream=0)
        sync = C.StreamParams(stream=0)
        _fire(hub, 2, 41, C.API_ENTER, 1, copy); _fire(hub, 2, 41, C.API_EXIT, 1, copy)
        _fire(hub, 2, 131, C.API_ENTER, 2, sync)
        _fire(hub, 1, 126, C.API_ENTER, 3, sync)
        _fire(hub, 1, 126, C.API_EXIT, 3, sync)
        _fire(hub, 2, 131, C.API_EXIT, 2, sync)
    finally:
        routing.regions.reset(token)
    hub.release(region)
    assert hub.errors == 0
    assert [o.api for o in region.observations] == ["cudaMemcpyAsync", "cudaStreamSynchronize"]
    assert region.observations[1].correlation == (2, 3)
    events, notes = combine(region.observations, ByCorrelation({}))
    assert [e.kind for e, _, _ in events] == ["blocking_copy_d2h"] and notes == []
    assert events[0][0].lineno == marked_line(__file__, "L-FIRE")  # the innermost user frame


@pytest.mark.parametrize("path", PATHS)
def test_a_copy_made_while_torch_compiles_has_the_compile_phase(path):
    """torch's own per-thread CompileContext says "compiling" (Dynamo holds it for a frame's
    whole compilation): a copy made inside ``torch._guards.compile_context`` is phase
    "compile", the same copy before and after it "run", and another thread's copy meanwhile
    "run" too (the context is per thread). The C callback reads torch's thread-local itself
    (attribution.compile_context_tls); the Python one calls CompileContext.try_get."""
    guards = pytest.importorskip("torch._guards")
    from syncguard.attribution import frames as attribution

    assert attribution.compile_context_tls() is guards._TLS  # this torch's try_get is that read
    hub, region = FakeHub(path=path), FakeRegion()
    hub.acquire(region)
    copy = C.MemcpyAsyncParams(dst=0x1000, src=0x2000, count=4, kind=1, stream=0)

    def one_copy(corr):
        _fire(hub, 2, 41, C.API_ENTER, corr, copy); _fire(hub, 2, 41, C.API_EXIT, corr, copy)

    def elsewhere():
        with _inside(hub, region):
            one_copy(3)

    token = routing.regions.set((region,))
    try:
        one_copy(1)
        with guards.compile_context(guards.CompileContext(None)):
            one_copy(2)
            t = threading.Thread(target=elsewhere)
            t.start(); t.join()
        one_copy(4)
    finally:
        routing.regions.reset(token)
    hub.release(region)
    assert hub.errors == 0 and (hub.fast is None or hub.fast.errors() == 0)
    phases = {o.correlation[0]: o.phase for o in region.observations}
    assert phases == {1: "run", 2: "compile", 3: "run", 4: "run"}


@pytest.mark.parametrize("path", PATHS)
def test_a_driver_copy_made_directly_reads_its_own_parameters(path):
    """Fake callback data for cuMemcpyHtoDAsync_v2 and cuMemcpyDtoH_v2 as an extension calls
    them (no runtime call around them): direction from the API, pointers, size and stream from
    the driver's parameter structs, so pageable or pinned can be asked of the host pointer."""
    hub = FakeHub(path=path)
    hub.table[(1, 300)] = ("cuMemcpyHtoDAsync",) + DRIVER_APIS["cuMemcpyHtoDAsync"]
    hub.table[(1, 301)] = ("cuMemcpyDtoH",) + DRIVER_APIS["cuMemcpyDtoH"]
    if path == "c":
        hub.use_fast()  # again: the C callback reads the table when configured
    region = FakeRegion()
    hub.acquire(region)
    token = routing.regions.set((region,))
    try:
        h2d = C.DriverCopyAsyncParams(dst=0xd000, src=0x7000, count=256, stream=0x55)
        d2h = C.DriverCopyParams(dst=0x8000, src=0xe000, count=64)
        _fire(hub, 1, 300, C.API_ENTER, 11, h2d); _fire(hub, 1, 300, C.API_EXIT, 11, h2d)
        _fire(hub, 1, 301, C.API_ENTER, 12, d2h); _fire(hub, 1, 301, C.API_EXIT, 12, d2h)
    finally:
        routing.regions.reset(token)
    hub.release(region)
    got = [(o.api, o.direction, o.is_async, o.src, o.dst, o.nbytes, o.stream, o.host_ptr)
           for o in region.observations]
    assert got == [("cuMemcpyHtoDAsync", "h2d", True, 0x7000, 0xd000, 256, 0x55, 0x7000),
                   ("cuMemcpyDtoH", "d2h", False, 0xe000, 0x8000, 64, None, 0x8000)]
    events, _ = combine(region.observations, ByCorrelation({11: (1, 1, 3)}))  # H2D source: pageable
    assert [e.kind for e, _, _ in events] == ["pageable_copy", "blocking_copy_d2h"]


@pytest.mark.parametrize("path", PATHS)
def test_threads_without_a_region_are_dropped(path):
    hub, region = FakeHub(path=path), FakeRegion()
    hub.acquire(region)
    sync = C.StreamParams(stream=0)
    _fire(hub, 2, 131, C.API_ENTER, 1, sync)
    _fire(hub, 2, 131, C.API_EXIT, 1, sync)
    hub.release(region)
    assert region.observations == [] and hub.errors == 0


def _obs(api, role, direction=None, is_async=False, kind=None, line=1, corr=1, stream=0,
         src=0x7000, dst=0xd000):
    return CudaCall(api, role, kind, direction, is_async, [corr], stream, Site("f.py", line, "f"),
                    thread="MainThread", blocked_us=1.0, src=src, dst=dst)


#: what is known of a copy's host memory, written once and given to combine() both ways it is
#: told in a real region: CUPTI activity records by correlation id ((copy kind, source memory
#: kind, destination memory kind), cupti_activity.h numbers: 1 pageable, 2 pinned, 3 device) or
#: the memory kind of each pointer (pointer queries at exit). _obs's host side: src 0x7000 for
#: H2D, dst 0xd000 for D2H; the device side is the other.
_MEMORY = {
    "h2d pageable": ({1: (1, 1, 3)}, {0x7000: 1, 0xd000: 3}),
    "h2d pinned": ({1: (1, 2, 3)}, {0x7000: 2, 0xd000: 3}),
    "d2h pinned": ({1: (2, 3, 2)}, {0x7000: 3, 0xd000: 2}),
    "nothing": ({}, {}),
}


def _memory(how, facts):
    by_corr, by_ptr = _MEMORY[facts]
    return ByCorrelation(by_corr) if how == "records" else ByPointer(by_ptr)


@pytest.mark.parametrize("how", ["records", "pointers"])
@pytest.mark.parametrize("obs,facts,expected", [
    # async pageable H2D with nothing after it: the host waited for the staging copy
    ([_obs("cudaMemcpyAsync", "copy", "h2d", True)], "h2d pageable", ["pageable_copy"]),
    # the same copy from pinned memory: no wait
    ([_obs("cudaMemcpyAsync", "copy", "h2d", True)], "h2d pinned", []),
    # a pageable H2D copy then a stream sync on the same line: one blocking H2D copy
    ([_obs("cudaMemcpyAsync", "copy", "h2d", True),
      _obs("cudaStreamSynchronize", "sync", kind="stream_sync", corr=2, src=None, dst=None)],
     "h2d pageable", ["blocking_copy_h2d"]),
    # a sync on another line stays a plain stream sync; the copy is judged alone
    ([_obs("cudaMemcpyAsync", "copy", "d2h", True, src=0x7000, dst=0xd000),
      _obs("cudaStreamSynchronize", "sync", kind="stream_sync", line=2, corr=2, src=None, dst=None)],
     "d2h pinned", ["stream_sync"]),
    # two pageable async copies, then a third copy: each of the first two waited
    ([_obs("cudaMemcpyAsync", "copy", "h2d", True), _obs("cudaMemcpyAsync", "copy", "h2d", True),
      _obs("cudaMemcpyAsync", "copy", "d2d", True, src=0xd000, dst=0xd000)],
     "h2d pageable", ["pageable_copy", "pageable_copy"]),
    # device-to-device copies never make the host wait
    ([_obs("cudaMemcpyAsync", "copy", "d2d", True)], "nothing", []),
    # a synchronous cudaMemcpy D2H is a blocking copy by itself
    ([_obs("cudaMemcpy", "copy", "d2h")], "nothing", ["blocking_copy_d2h"]),
    # two frees from one line (empty_cache) are one wait
    ([_obs("cudaFree", "free", kind="implicit_free"), _obs("cudaFree", "free", kind="implicit_free")],
     "nothing", ["implicit_free"]),
])
def test_combine_kinds(obs, facts, expected, how):
    """Recorded-style observations (hand-built, no GPU): the pairing rules only, with the host
    memory told as activity records or as pointer kinds (the same facts)."""
    events, _ = combine(obs, _memory(how, facts))
    assert [e.kind for e, _, _ in events] == expected


@pytest.mark.parametrize("how", ["records", "pointers"])
def test_combine_passes_over_other_detectors_observations(how):
    """A region's observation list holds every detector's (sync-debug mode's while a profiler has
    CUPTI); combine reads only the cuda detector's, in one pass: a debug observation between a
    copy and its stream sync neither breaks the pair nor becomes an event here."""
    debug = routing.Observation(source="debug", site=Site("f.py", 1, "f"), thread="MainThread",
                                kind="stream_sync")
    obs = [_obs("cudaMemcpyAsync", "copy", "h2d", True), debug,
           _obs("cudaStreamSynchronize", "sync", kind="stream_sync", corr=2, src=None, dst=None)]
    events, _ = combine(obs, _memory(how, "h2d pageable"))
    assert [e.kind for e, _, _ in events] == ["blocking_copy_h2d"]


@pytest.mark.parametrize("how", ["records", "pointers"])
def test_copy_with_unknown_host_memory_is_noted_not_guessed(how):
    events, notes = combine([_obs("cudaMemcpyAsync", "copy", "h2d", True)], _memory(how, "nothing"))
    assert events == [] and "pageable or pinned is unknown" in notes[0]


@pytest.mark.parametrize("memory", [ByCorrelation({4: (2, 3, 1)}), ByPointer({0x7000: 3, 0xd000: 1})],
                         ids=["records", "pointers"])
def test_copy_whose_direction_nothing_says_is_noted_and_one_a_record_names_is_judged(memory):
    """cudaMemcpyDefault / cuMemcpy: the call names no direction. With a record (activity) or the
    pointers' kinds (queried at exit), a blocking device-to-pageable copy is a blocking D2H copy;
    without either it is not guessed, and the note says how many (it was dropped silently
    before)."""
    copy = _obs("cudaMemcpy", "copy", None, False, corr=4)
    events, notes = combine([copy], memory)
    assert [e.kind for e, _, _ in events] == ["blocking_copy_d2h"] and notes == []
    unnamed = _obs("cuMemcpyAsync", "copy", None, True, corr=5, src=0x9100, dst=0x9200)
    events, notes = combine([copy, unnamed], ByCorrelation({}))
    assert events == [] and len(notes) == 1 and notes[0].startswith("cuda detector: 2 copy(ies)")
    events, notes = combine([copy, unnamed], memory)  # the second's pointers were not asked
    assert [e.kind for e, _, _ in events] == ["blocking_copy_d2h"]
    assert notes[0].startswith("cuda detector: 1 copy(ies)")


@pytest.mark.parametrize("path", PATHS)
def test_backward_engine_is_proxied_while_subscribed_and_engine_thread_syncs_reach_the_caller(path):
    """Fake libcupti; a plain thread with no region stands in for torch's C++ autograd device
    thread (on the GPU a CUDA backward runs there). While the region's thread waits in
    run_backward, a sync on that thread goes to the region; after release the engine is restored."""
    torch = pytest.importorskip("torch")
    from torch.autograd.variable import Variable

    engine = Variable.__dict__["_execution_engine"]
    hub, region = FakeHub(path=path), FakeRegion()
    handed = []  # (domain, cbid) of each callback the C callback gave the Python one
    if path == "c":
        # a counting hand-over, compiled as if it were torch's file so that attribution skips its
        # frame as it skips the callback's own
        ns = {"handed": handed, "python_callback": hub._callback}
        src = ("def counting(u, domain, cbid, data):\n    handed.append((domain, cbid))\n"
               "    return python_callback(u, domain, cbid, data)\n")
        exec(compile(src, os.path.join(os.path.dirname(torch.__file__), "fake_handover.py"), "exec"), ns)
        hub._callback = ns["counting"]
        hub.use_fast()  # configured again, with the counting hand-over
    hub.acquire(region)
    seen = {}

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            def engine_thread():
                d2d = C.MemcpyAsyncParams(dst=0x1000, src=0x3000, count=4, kind=3, stream=0)
                _fire(hub, 2, 41, C.API_ENTER, 6, d2d)
                _fire(hub, 2, 41, C.API_EXIT, 6, d2d)
                sync = C.StreamParams(stream=0)
                _fire(hub, 2, 131, C.API_ENTER, 7, sync)
                _fire(hub, 2, 131, C.API_EXIT, 7, sync)
            # a bare OS thread, like torch's C++ engine thread (threading never started it)
            import _thread
            done = threading.Event()
            _thread.start_new_thread(lambda: (engine_thread(), done.set()), ())
            done.wait(10)
            # a thread the program started itself keeps its syncs: not the backward's
            t = threading.Thread(target=engine_thread)
            t.start()
            t.join()
            seen["active"] = len(hub.backward.active)
            return g * 2

    token = routing.regions.set((region,))
    try:
        assert type(Variable.__dict__["_execution_engine"]).__name__ == "_EngineProxy"
        x = torch.ones(3, requires_grad=True)
        Probe.apply(x).sum().backward()  # L-BACKWARD
    finally:
        routing.regions.reset(token)
    hub.release(region)
    assert Variable.__dict__["_execution_engine"] is engine
    assert torch.equal(x.grad, torch.full((3,), 2.0))  # the proxy changed nothing
    assert seen["active"] == 1 and hub.backward.active == {}
    copy, obs = region.observations  # the engine thread's; the program's own thread kept nothing
    assert (copy.api, copy.direction, copy.correlation) == ("cudaMemcpyAsync", "d2d", (6,))
    if path == "c":
        # the engine thread's no-wait copy stayed in C, its sync went to Python (ENTER, EXIT);
        # the program's own thread is Python's to judge whole (it finds no owner: nothing kept)
        assert handed == [(2, 131)] * 2 + [(2, 41)] * 2 + [(2, 131)] * 2
    assert obs.api == "cudaStreamSynchronize" and obs.thread.startswith("autograd engine")
    # the fake "engine thread" runs Python here, so its own frame is the site (L-FIRE); a C++
    # engine thread has none, and the backward() line is used instead
    assert obs.site.lineno in (marked_line(__file__, "L-FIRE"), marked_line(__file__, "L-BACKWARD"))


def test_a_sync_seen_by_cuda_and_a_torch_hook_is_one_event():
    """Hand-built events (no GPU): detectors=('cuda','debug') merge on line and sync class."""
    from syncguard.detectors.torch_hooks import merge_with_cuda
    from syncguard.records.events import SyncEvent

    cu = SyncEvent(api="cudaStreamSynchronize", kind="blocking_copy_d2h", filename="m.py", lineno=3,
                   detectors=("cuda",))
    dbg = SyncEvent(api="cudaStreamSynchronize", kind="stream_sync", filename="m.py", lineno=3,
                    detectors=("debug",))
    other = dataclasses.replace(dbg, lineno=4)
    out = merge_with_cuda([(cu, (), None)], [(dbg, (), None), (other, (), None)])
    assert [(e.kind, e.detectors) for e, _, _ in out] == [
        ("blocking_copy_d2h", ("cuda", "debug")), ("stream_sync", ("debug",))]


_KINDS = ("blocking_copy_d2h", "blocking_copy_h2d", "stream_sync", "device_sync", "pageable_copy")


@hypothesis.settings(max_examples=400)  # pure Python, ~1 ms each: the profile's 12 miss collisions
@hypothesis.given(st.lists(st.tuples(st.sampled_from(("cuda", "debug", "trace")),
                                     st.integers(1, 3), st.sampled_from(_KINDS)), max_size=30),
                  st.lists(st.tuples(st.sampled_from(("debug", "trace")), st.integers(1, 3),
                                     st.sampled_from(_KINDS)), max_size=30))
def test_merging_hook_events_into_cuda_ones_keeps_the_scan_rule(found, items):
    """merge_with_cuda indexes the cuda events (the scan per event was quadratic: 21 s for 32,000
    syncs in one region); what it returns is what the plain scan returned, in the same order."""
    from bench.bench_merge_hooks import scan  # the plain scan it was: the rule, written out
    from syncguard.detectors.torch_hooks import merge_with_cuda
    from syncguard.records.events import SyncEvent

    def events(rows):
        # (each its own host time, so that taking another event of the same line shows)
        return [(SyncEvent(api="cudaStreamSynchronize", kind=k, filename="m.py", lineno=n,
                           detectors=(d,), host_blocked_us=float(i)), (), None)
                for i, (d, n, k) in enumerate(rows)]

    assert merge_with_cuda(events(found), events(items)) == scan(events(found), events(items))


def _pev(name, start, end, parent=None, thread=1):
    return types.SimpleNamespace(name=name, device_type="DeviceType.CPU", cpu_parent=parent,
                                 thread=thread, time_range=types.SimpleNamespace(start=start, end=end),
                                 kernels=[], stack=[])


def test_markers_count_by_thread_and_time_where_the_event_tree_cut_them():
    """Shaped like the profiler's rows on torch 2.14.1 (reports/probes/profile-links-5ead7bd/): a
    marker opened inside one Python call is cut from the event tree where that call returns, so
    a sync below it lacks the outer marker, and a later sync lacks every marker. Fake events:
    plumbing only; the GPU scenario profile_links proves it on the device."""
    region = _pev("syncguard::region#1", 0, 100)
    allow = _pev("syncguard::allow#2", 10, 50)  # cut: no parent
    py = _pev("<built-in method cpu of Tensor object at 0x1>", 20, 30, allow)
    to = _pev("aten::to", 21, 29, py)
    item = _pev("aten::_local_scalar_dense", 60, 62)  # cut: no marker above it at all
    bg_op = _pev("aten::_local_scalar_dense", 70, 76, thread=2)  # another thread's op
    events = [region, allow, py, to, item, bg_op,
              _pev("cudaStreamSynchronize", 25, 26, to),
              _pev("cudaStreamSynchronize", 61, 62, item),
              _pev("cudaStreamSynchronize", 71, 72, bg_op),
              _pev("cudaDeviceSynchronize", 200, 201)]  # the profiler stopping, after the region
    got = [(r.start_us, tuple(a for a in r.ancestors if a.startswith(profiler.MARKER)))
           for r in profiler.records_from_profiler(events)]
    assert got == [(25, ("syncguard::allow#2", "syncguard::region#1")),
                   (61, ("syncguard::region#1",)), (71, ()), (200, ())]
    (first, *_) = classify(profiler.records_from_profiler(events))
    assert first.ops == ("aten::to",) and first.markers == ("syncguard::allow#2", "syncguard::region#1")


def test_a_markers_gpu_side_range_claims_no_host_call():
    """Shaped like the rows kept on torch 2.14.1 (reports/gpu/lease-d83369b/2.14.1/programs/
    kinds-pointer-c.json, cpu_int_index): the region's marker on the host, then a range of the same
    name on the GPU's timeline that outlasts it, over the profiler's own cudaDeviceSynchronize.
    Fake events: plumbing only; the GPU scenario profile_async_tail proves it on the device."""
    region = _pev("syncguard::region#18", 0, 2601)
    gpu_side = _pev("syncguard::region#18", 2226, 2823)
    gpu_side.device_type = "DeviceType.CUDA"
    index = _pev("aten::index", 1800, 2300, region)
    events = [region, gpu_side, index,
              _pev("cudaMemcpyAsync", 1894, 1931, index),
              _pev("cudaStreamSynchronize", 1932, 2236, index),
              _pev("cudaDeviceSynchronize", 2811, 2827)]  # the profiler stopping
    got = [(r.name, tuple(a for a in r.ancestors if a.startswith(profiler.MARKER)))
           for r in profiler.records_from_profiler(events)]
    assert got == [("cudaMemcpyAsync", ("syncguard::region#18",)),
                   ("cudaStreamSynchronize", ("syncguard::region#18",)),
                   ("cudaDeviceSynchronize", ())]


def test_named_counts_turn_callback_counts_into_calls_per_api():
    """The census's and the overhead bench's naming: ENTER and EXIT are one call; a driver id
    reads "drv", a runtime id "rt", an id CUPTI cannot name "cbid N" (fake name table)."""
    from syncguard.detectors.cuda.cupti import named_counts

    names = {(1, 300): "cuMemcpyHtoDAsync_v2", (2, 41): "cudaMemcpyAsync_v3020"}
    lib = types.SimpleNamespace(callback_name=lambda d, i: names.get((d, i)))
    got = named_counts(lib, {2 * 100000 + 41: 200, 1 * 100000 + 300: 200, 1 * 100000 + 7: 2})
    assert got == {"drv cbid 7": 1, "drv cuMemcpyHtoDAsync_v2": 100, "rt cudaMemcpyAsync_v3020": 100}


# -- _cuptifast.by_pointer: the exit's path in C, host memory asked by pointer there ------------
_PTRS = {0x7000: 1, 0x7100: 2, 0xd000: 3, 0xd100: 2}  # pointer -> memory kind (1 pageable, 2 pinned, 3 device)


def _any_obs():
    from hypothesis import strategies as st

    copies = st.builds(
        lambda api, d, a, line, stream, src, dst: _obs(api, "copy", d, a, line=line, stream=stream,
                                                        src=src, dst=dst),
        st.sampled_from(["cudaMemcpyAsync", "cuMemcpyHtoDAsync_v2", "cudaMemcpy"]),
        st.sampled_from(["h2d", "d2h", "d2d", "h2h", None]), st.booleans(), st.integers(1, 2),
        st.sampled_from([0, 7]), st.sampled_from([*_PTRS, 0x9999, None]),
        st.sampled_from([*_PTRS, 0x9999, None]))
    syncs = st.builds(lambda line, stream: _obs("cudaStreamSynchronize", "sync", kind="stream_sync",
                                                line=line, stream=stream, src=None, dst=None),
                      st.integers(1, 2), st.sampled_from([0, 7, None]))
    frees = st.builds(lambda line: _obs("cudaFree", "free", kind="implicit_free", line=line),
                      st.integers(1, 2))
    debug = st.just(routing.Observation(source="debug", site=Site("f.py", 1, "f"),
                                        thread="MainThread", kind="stream_sync"))
    return st.lists(st.one_of(copies, copies, syncs, frees, debug), max_size=12)


def _fake_runtime(types: dict):
    """A C-callable stand-in for the runtime's cudaPointerGetAttributes (and cudaGetLastError),
    answering the memory type ``types`` gives each pointer (0 unregistered host, 1 registered host,
    2 device, 3 managed), failing for any other. Its ``functions()`` gives their addresses as
    ``hostmem.pointer_functions`` does; ``asked`` lists each pointer asked, and "functions" each
    time ``functions()`` ran; ``cleared``, each cudaGetLastError."""
    import types as pytypes

    fake = pytypes.SimpleNamespace(asked=[], cleared=[])

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    def get_attributes(attr, ptr):
        fake.asked.append(ptr)
        if ptr not in types:
            return 1  # cudaErrorInvalidValue
        ctypes.c_int.from_address(attr).value = types[ptr]
        return 0

    @ctypes.CFUNCTYPE(ctypes.c_int)
    def get_last_error():
        fake.cleared.append(1)
        return 0

    addresses = (ctypes.cast(get_attributes, ctypes.c_void_p).value,
                 ctypes.cast(get_last_error, ctypes.c_void_p).value)
    fake.cudaPointerGetAttributes, fake.cudaGetLastError = get_attributes, get_last_error
    fake.functions = lambda: (fake.asked.append("functions"), addresses)[1]
    return fake


#: _PTRS as the runtime's memory types
_PTR_TYPES = {ptr: {1: 0, 2: 1, 3: 2}[kind] for ptr, kind in _PTRS.items()}


def _c_hub_for_calls():
    """A hub with the C module configured, its table holding every api the random sequences use,
    so that ``hub.fast.as_call`` makes the C callback's Call for any of them."""
    hub = FakeHub(path="c")
    hub.table.update({(1, 17): ("cuMemcpyHtoDAsync_v2",) + DRIVER_APIS["cuMemcpyHtoDAsync"],
                      (2, 7): ("cudaMemcpy",) + RUNTIME_APIS["cudaMemcpy"],
                      (2, 5): ("cudaFree",) + RUNTIME_APIS["cudaFree"],
                      (2, 165): ("cudaDeviceSynchronize",) + RUNTIME_APIS["cudaDeviceSynchronize"]})
    hub.use_fast()
    return hub


def _c_exit(hub, calls, functions):
    """The C exit's whole step (``_cuptifast.by_pointer``) over ``calls``, with the arguments
    cuda.combine_by_pointer passes it (its fields dict copied): (events, unknown, undirected), or
    NotImplemented."""
    return hub.fast.by_pointer(calls, functions, SyncEvent, dict(cuda._SYNC_FIELDS), ("cuda",),
                               cuda._C_KINDS)


@pytest.mark.skipif(not _c_callback_built(), reason="the C callback (_cuptifast) is not built here")
def test_by_pointer_reports_what_combine_reports_with_pointers_asked():
    """Random observation sequences (hand-built calls, no GPU, a C stand-in for the runtime's
    pointer query): ``_cuptifast.by_pointer`` over the C callback's Calls gives the events and
    notes that combine's Python loop gives over the same calls as CudaCalls with the pointers'
    kinds known (ByPointer); each pointer is asked at most once, and whether it may be asked at
    most once, only when a pointer must be asked. Told that nothing may be asked (a capturing
    stream), it reports as combine does knowing nothing. The sequences include a copy and a sync
    from one line (``_any_calls``' pairs): a pinned copy a sync follows is never passed over.
    Expected values come from combine."""
    from hypothesis import given, settings, strategies as st

    hub = _c_hub_for_calls()

    def by_pointer(calls, functions):
        events, unknown, undirected = _c_exit(hub, calls, functions)
        return events, cuda._notes(unknown, undirected)

    @settings(max_examples=500, deadline=None)
    @given(st.one_of(_any_obs(), _any_calls()))
    def check(obs):
        calls = [hub.fast.as_call(o) if isinstance(o, CudaCall) else o for o in obs]
        fake = _fake_runtime(_PTR_TYPES)
        assert by_pointer(calls, fake.functions) == combine(obs, ByPointer(_PTRS))
        pointers = [a for a in fake.asked if a != "functions"]
        assert len(pointers) == len(set(pointers))
        assert fake.asked.count("functions") == (1 if fake.asked else 0)
        assert len(fake.cleared) == pointers.count(0x9999)  # a failed query leaves no error behind
        assert by_pointer(calls, lambda: None) == combine(obs, ByPointer({}))

    check()
    copy = lambda ptr: _obs("cudaMemcpyAsync", "copy", "h2d", True, src=ptr)  # noqa: E731
    run = [copy(0x7100) for _ in range(100)] + [copy(0x7000)]
    fake = _fake_runtime(_PTR_TYPES)
    events, notes = by_pointer([hub.fast.as_call(o) for o in run], fake.functions)
    # 100 pinned copies passed over (their pointer asked once), the last one pageable
    assert [e.kind for e, _, _ in events] == ["pageable_copy"] and notes == []
    assert fake.asked == ["functions", 0x7100, 0x7000]
    # a Python callback's CudaCall among them: NotImplemented, nothing asked
    fake = _fake_runtime(_PTR_TYPES)
    assert _c_exit(hub, run, fake.functions) is NotImplemented and fake.asked == []
    calls = [hub.fast.as_call(o) for o in run]
    with pytest.raises(ZeroDivisionError):
        _c_exit(hub, calls, lambda: 1 / 0)
    with pytest.raises(TypeError):
        _c_exit(hub, calls, lambda: "no addresses")
    # functions() runs Python: the calls as they were when the exit began are judged
    fake = _fake_runtime(_PTR_TYPES)
    mutable = list(calls)
    got = _c_exit(hub, mutable, lambda: mutable.clear() or fake.functions())
    assert [e.kind for e, _, _ in got[0]] == ["pageable_copy"] and mutable == []


def _c_hub_with_a_copy():
    """A hub with the C callback over the fake libcupti, the driver's cuMemcpyHtoDAsync_v2 in its
    table, subscribed for a new region; and an async H2D copy's parameters: (hub, region, copy)."""
    hub, region = FakeHub(path="c"), FakeRegion()
    hub.table[(1, 17)] = ("cuMemcpyHtoDAsync_v2",) + DRIVER_APIS["cuMemcpyHtoDAsync"]
    hub.use_fast()
    hub.acquire(region)
    return hub, region, C.MemcpyAsyncParams(dst=0xd000, src=0x7000, count=4, kind=1, stream=0)


@pytest.mark.skipif(not _c_callback_built(), reason="the C callback (_cuptifast) is not built here")
def test_the_c_callback_times_its_pieces_only_when_asked():
    """Plumbing for tools/probe_callback_pieces.py (fake libcupti, no GPU): one kept copy and one
    nested driver call are counted piece by piece while timing is on, nothing while it is off,
    and each read zeroes the counts."""
    hub, region, copy = _c_hub_with_a_copy()
    token = routing.regions.set((region,))
    try:
        def one_copy(corr):
            _fire(hub, 2, 41, C.API_ENTER, corr, copy)
            _fire(hub, 1, 17, C.API_ENTER, corr + 1)
            _fire(hub, 1, 17, C.API_EXIT, corr + 1)
            _fire(hub, 2, 41, C.API_EXIT, corr, copy)

        hub.fast.timing(False)
        one_copy(1)
        assert all(n == 0 for _, n in hub.fast.timing(True).values())
        one_copy(3)
        counts = {p: n for p, (_, n) in hub.fast.timing(False).items()}
        one_copy(5)
    finally:
        routing.regions.reset(token)
        hub.fast.timing(False)
        hub.release(region)
    assert counts == {
        "callback (every invocation, whole)": 4, "nested driver callback (no GIL)": 2,
        "ENTER: take the GIL": 1,
        "ENTER: keep the call (regions, phase, thread, site, allows; build it, hand it over)": 1,
        "ENTER: the regions (context variable; inside the above)": 1,
        "ENTER: is torch compiling (inside the above)": 1,
        "ENTER: the user's site (inside the above)": 1, "ENTER: build the call (inside the above)": 1,
        "ENTER: hand it to the region(s) (inside the above)": 1, "ENTER: release the GIL": 1,
        "EXIT: stamp the call's duration (no GIL)": 1,
        "ENTER: a repeat, folded or paired without the GIL (repeat())": 0}
    assert all(n == 0 for _, n in hub.fast.timing(False).values())
    assert len(region.observations) == 3 and [o.correlation for o in region.observations] == [
        (1, 2), (3, 4), (5, 6)]


@pytest.mark.skipif(not _c_callback_built(), reason="the C callback (_cuptifast) is not built here")
def test_the_c_callbacks_calls_read_as_the_python_callbacks_cudacalls():
    """The same CUDA calls fired at both callbacks (fake libcupti, no GPU): the C one hands the
    region ``_cuptifast.Call`` objects, the Python one ``CudaCall`` tuples; every field, and
    ``source`` and ``host_ptr``, reads the same (but the timing fields, which measure each run)."""
    seen = {}
    for path in ("python", "c"):
        hub, region = FakeHub(path=path), FakeRegion()
        hub.table[(2, 7)] = ("cudaMemcpy",) + RUNTIME_APIS["cudaMemcpy"]
        hub.use_fast() if path == "c" else None
        hub.acquire(region)
        token = routing.regions.set((region,))
        try:
            for cbid, corr, params in (
                    (41, 1, C.MemcpyAsyncParams(dst=0x1000, src=0x2000, count=4, kind=1, stream=7)),
                    (41, 2, C.MemcpyAsyncParams(dst=0x3000, src=0x1000, count=8, kind=3, stream=0)),
                    (7, 3, C.MemcpyAsyncParams(dst=0x9000, src=0x1000, count=2, kind=2)),
                    (131, 4, C.StreamParams(stream=7))):
                _fire(hub, 2, cbid, C.API_ENTER, corr, params)
                if cbid == 131:  # a driver call nested under the runtime one
                    _fire(hub, 1, 126, C.API_ENTER, 5, params)
                    _fire(hub, 1, 126, C.API_EXIT, 5, params)
                _fire(hub, 2, cbid, C.API_EXIT, corr, params)
        finally:
            routing.regions.reset(token)
            hub.release(region)
        assert hub.errors == 0 and (hub.fast is None or hub.fast.errors() == 0)
        seen[path] = region.observations
    names = [f for f in CudaCall._fields if f not in ("blocked_us", "t_ns")] + ["source", "host_ptr"]
    assert [type(o).__name__ for o in seen["c"]] == ["Call"] * 4
    assert [[getattr(o, f) for f in names] for o in seen["c"]] == [
        [getattr(o, f) for f in names] for o in seen["python"]]
    assert [o.blocked_us is None for o in seen["c"]] == [False, True, False, False]
    assert all(isinstance(o.t_ns, int) for o in seen["c"]) and "api='cudaMemcpyAsync'" in repr(seen["c"][0])


def _fire_from(hub, line, domain, cbid, site, corr, params=None):
    """_fire from one of two lines of this function (``line`` 1 or 2): two user sites."""
    data = C.CallbackData(callbackSite=site, correlationId=corr,
                          functionParams=ctypes.addressof(params) if params is not None else None)
    addr, fast = ctypes.addressof(data), hub.fast
    if line == 1:
        fast.fire(domain, cbid, addr) if fast else hub._callback(None, domain, cbid, addr)
    else:
        fast.fire(domain, cbid, addr) if fast else hub._callback(None, domain, cbid, addr)


def _run_program(path, program):
    """Fire ``program`` (steps of _any_program) at one callback over the fake libcupti, in one
    region: each copy or sync its ENTER, a nested driver call for a sync, then its EXIT; "allow"
    steps enter or leave an allow between calls. The region's observations."""
    hub, region = FakeHub(path=path), FakeRegion()
    hub.table[(2, 7)] = ("cudaMemcpy",) + RUNTIME_APIS["cudaMemcpy"]
    hub.table[(1, 17)] = ("cuMemcpyHtoDAsync_v2",) + DRIVER_APIS["cuMemcpyHtoDAsync"]
    hub.use_fast() if path == "c" else None
    hub.acquire(region)
    token, allow_tokens = routing.regions.set((region,)), []
    try:
        for i, step in enumerate(program, start=1):
            what, line = step[0], step[1]
            if what == "foreign":  # another thread's call, handed over by the Python callback
                region.observations.append(
                    _obs("cudaMemcpyAsync", "copy", "d2d", True) if line == 0 else
                    _obs("cudaStreamSynchronize", "sync", kind="stream_sync", src=None, dst=None))
                continue
            if what == "allow":
                if allow_tokens:
                    routing.allows.reset(allow_tokens.pop())
                else:
                    allow_tokens.append(routing.allows.set(("an allow",)))
                continue
            domain = 2
            if what == "copy" and step[2] == 17:  # the driver's async H2D copy, made directly
                _, _, cbid, _, stream, host = step
                domain, params = 1, C.DriverCopyAsyncParams(dst=0xd000, src=host, count=4, stream=stream)
            elif what == "copy":
                _, _, cbid, kind, stream, host = step
                params = C.MemcpyAsyncParams(dst=0xd000 if kind == 1 else host,
                                             src=host if kind == 1 else 0xd000, count=4,
                                             kind=kind, stream=stream)
            else:
                cbid, params = 131, C.StreamParams(stream=step[2])
            _fire_from(hub, line, domain, cbid, C.API_ENTER, i, params)
            if cbid == 131:
                _fire_from(hub, line, 1, 126, C.API_ENTER, 1000 + i, params)
                _fire_from(hub, line, 1, 126, C.API_EXIT, 1000 + i, params)
            _fire_from(hub, line, domain, cbid, C.API_EXIT, i, params)
    finally:
        while allow_tokens:
            routing.allows.reset(allow_tokens.pop())
        routing.regions.reset(token)
        hub.release(region)
    assert hub.errors == 0 and (hub.fast is None or hub.fast.errors() == 0)
    return hub, region.observations


def _any_program():
    """Random call sequences for the two callbacks (no GPU): async copies (cudaMemcpyAsync, H2D,
    D2H or D2D; the driver's cuMemcpyHtoDAsync, H2D; from pinned 0x7100, pageable 0x7000 or
    unknown 0x9999 host memory) and blocking ones (cudaMemcpy), stream syncs, on streams 0, 7 and 9, from two lines, an allow entered or left
    between any two, another thread's copy or stream sync handed over between any two; often a
    copy with a stream sync right after it from its line, as a blocking copy makes them, and a
    run of like copies, as a loop makes them."""
    from hypothesis import strategies as st

    line, stream = st.sampled_from([1, 2]), st.sampled_from([0, 7, 9])
    copy = st.tuples(st.just("copy"), line, st.sampled_from([41, 41, 7, 17]),
                     st.sampled_from([1, 2, 3]), stream, st.sampled_from([0x7000, 0x7000, 0x7100, 0x9999]))
    sync = st.tuples(st.just("sync"), line, stream)
    allow = st.tuples(st.just("allow"), st.just(0))
    foreign = st.tuples(st.just("foreign"), st.sampled_from([0, 1]))  # a copy, a stream sync
    pair = st.builds(lambda c, same: [c, ("sync", c[1], c[4] if same else 9)], copy, st.booleans())
    one = st.one_of(copy, sync, allow, foreign).map(lambda x: [x])
    # a run of like copies, as a loop makes them; or one whose last copy is the other api's
    run = st.builds(lambda c, n, other: [c] * n + ([c[:2] + ({41: 17, 17: 41}.get(c[2], 7),) + c[3:]]
                                                   if other else []),
                    copy, st.integers(2, 3), st.booleans())
    return st.lists(st.one_of(one, pair, pair, run), max_size=8).map(lambda xs: sum(xs, []))


@pytest.mark.skipif(not _c_callback_built(), reason="the C callback (_cuptifast) is not built here")
def test_a_stream_sync_riding_on_its_copy_gives_the_events_of_both_kept_apart():
    """Random call sequences fired at both callbacks (fake libcupti, no GPU): where a stream sync
    comes right after an async host<->device copy from the same stack, stream, thread and allows,
    the C callback keeps no call of its own for it (the copy's Call carries it: ``paired_api``,
    ``paired_blocked_us``); where a copy comes right after a like one (same api, pointers, size,
    stream, stack, thread, allows), it keeps none either (``folded_blocked_us``: the earlier
    copies' durations); the Python callback keeps every call. The events are the same, through the C
    exit (``by_pointer``) and combine's Python loop, but for the measured durations and the stacks
    below the firing function: each paired
    event's is the sum of the copy's and the sync's. Expected values come from the Python
    callback's calls through combine's Python loop."""
    from hypothesis import given, settings

    ptrs = {0x7000: 1, 0x7100: 2, 0xd000: 3}
    fake = _fake_runtime({p: {1: 0, 2: 1, 3: 2}[k] for p, k in ptrs.items()})

    def events(evs):
        # (the stacks differ below _run_program: each callback's run is called from its own line)
        return [(dataclasses.replace(e, host_blocked_us=None, stack=()), allows) for e, allows, _ in evs]

    @settings(max_examples=300, deadline=None)
    @given(_any_program())
    def check(program):
        _, by_python = _run_program("python", program)
        hub, by_c = _run_program("c", program)
        want, want_notes = combine(by_python, ByPointer(ptrs))
        got = _c_exit(hub, by_c, fake.functions)
        # (another thread's CudaCall among them: the Python loop decides, as at a real exit)
        got, notes = (combine(by_c, ByPointer(ptrs)) if got is NotImplemented
                      else (got[0], cuda._notes(*got[1:])))
        assert (events(got), notes) == (events(want), want_notes)
        in_python = combine(by_c, ByPointer(ptrs))  # the Python loop on Calls
        assert (events(in_python[0]), in_python[1]) == (events(want), want_notes)
        assert all(e.host_blocked_us is not None for e, _, _ in got)
        paired = [o for o in by_c if getattr(o, "paired_api", None) is not None]
        folded = sum(len(getattr(o, "folded_blocked_us", ())) for o in by_c)
        pairs = [p for o in by_c for p in getattr(o, "folded_pairs", ())]  # a copy and a sync each
        assert len(by_c) == len(by_python) - len(paired) - folded - 2 * len(pairs)
        assert all(api == "cudaStreamSynchronize" for api, _, _ in pairs)
        assert all(o.paired_api == "cudaStreamSynchronize" and o.paired_blocked_us is not None
                   for o in paired)

    check()
    # pairs from pinned memory folded into a copy that a copy from another line then follows:
    # the exit passes over pinned copies that make no event, never the pairs folded into one
    program = [("copy", 1, 41, 1, 7, 0x7100), ("sync", 1, 7)] * 2 + [
        ("copy", 1, 41, 1, 7, 0x7100), ("copy", 2, 41, 1, 7, 0x7100)]
    _, by_python = _run_program("python", program)
    hub, by_c = _run_program("c", program)
    want = combine(by_python, ByPointer(ptrs))
    got = _c_exit(hub, by_c, fake.functions)
    assert len(by_c) == 2 and [e.kind for e, _, _ in got[0]] == ["blocking_copy_h2d"] * 2
    assert (events(got[0]), cuda._notes(*got[1:])) == (events(want[0]), want[1])
    # the pair as a blocking copy makes it: one Call, one event, its duration the sum of both
    program = [("copy", 1, 41, 1, 7, 0x7000), ("sync", 1, 7)]
    hub, (call,) = _run_program("c", program)
    (ev, _, _), = _c_exit(hub, [call], fake.functions)[0]
    assert (ev.kind, ev.api) == ("blocking_copy_h2d", "cudaStreamSynchronize")
    assert ev.host_blocked_us == (round(call.blocked_us * 10) + round(call.paired_blocked_us * 10)) / 10
    # a run of such pairs from one line (torch 2.8's merge loop), then one copy left unpaired:
    # one Call, standing for the last copy, with the pairs folded in; each pair's event has its
    # own two durations, in order, then the copy's own
    program = [("copy", 1, 41, 1, 7, 0x7000), ("sync", 1, 7)] * 3 + [("copy", 1, 41, 1, 7, 0x7000)]
    hub, (call,) = _run_program("c", program)
    assert len(call.folded_pairs) == 3 and call.paired_api is None
    evs = _c_exit(hub, [call], fake.functions)[0]
    sums = [(round(c * 10) + round(s * 10)) / 10 for _, c, s in call.folded_pairs]
    assert [(e.kind, e.api, e.host_blocked_us) for e, _, _ in evs] == (
        [("blocking_copy_h2d", "cudaStreamSynchronize", b) for b in sums]
        + [("pageable_copy", "cudaMemcpyAsync", call.blocked_us)])
    # a run of like copies: one Call, each copy's event with its own duration (each copy lasts
    # 2, 4 and 6 ms or more here: a sleep between its ENTER and EXIT)
    hub, region = FakeHub(path="c"), FakeRegion()
    hub.acquire(region)
    token, copy = routing.regions.set((region,)), C.MemcpyAsyncParams(dst=0xd000, src=0x7000,
                                                                     count=4, kind=1, stream=7)
    try:
        for i in range(3):
            _fire(hub, 2, 41, C.API_ENTER, i, copy)
            time.sleep(0.002 * (i + 1))
            _fire(hub, 2, 41, C.API_EXIT, i, copy)
    finally:
        routing.regions.reset(token)
        hub.release(region)
    (call,) = region.observations
    evs, unknown, _ = _c_exit(hub, [call], fake.functions)
    assert [e.kind for e, _, _ in evs] == ["pageable_copy"] * 3 and unknown == 0
    durations = [*call.folded_blocked_us, call.blocked_us]
    assert [e.host_blocked_us for e, _, _ in evs] == durations
    assert all(2000 * (i + 1) <= b for i, b in enumerate(durations)), durations
    # nothing says what host memory a run has: each copy counted unknown
    hub, (call,) = _run_program("c", [("copy", 1, 41, 1, 7, 0x9999)] * 3)
    assert _c_exit(hub, [call], fake.functions)[1:] == (3, 0)
    assert combine([call], ByPointer(ptrs))[1] == cuda._notes(3, 0)
    # the same copy through the driver's API, then the runtime's: two calls
    obs = _run_program("c", [("copy", 1, 17, 1, 7, 0x7000), ("copy", 1, 41, 1, 7, 0x7000)])[1]
    assert [o.api for o in obs] == ["cuMemcpyHtoDAsync_v2", "cudaMemcpyAsync"]
    # not from the same line, another stream, an allow between, another thread's copy between:
    # kept apart
    for program in ([("copy", 1, 41, 1, 7, 0x7000), ("sync", 2, 7)],
                    [("copy", 1, 41, 1, 7, 0x7000), ("sync", 1, 9)],
                    [("copy", 1, 41, 1, 7, 0x7000), ("allow", 0), ("sync", 1, 7)],
                    [("copy", 1, 41, 1, 7, 0x7000), ("foreign", 0), ("sync", 1, 7)]):
        obs = _run_program("c", program)[1]
        assert [getattr(o, "paired_api", None) for o in obs] == [None] * len(obs)
        # and two like copies so (the sync a copy from its line and stream): not folded
        copies = [("copy", s[1], 41, 1, s[2], 0x7000) if s[0] == "sync" else s for s in program]
        obs = _run_program("c", copies)[1]
        assert [len(getattr(o, "folded_blocked_us", ())) for o in obs] == [0] * len(obs)
    # nor copies from another host block
    obs = _run_program("c", [("copy", 1, 41, 1, 7, 0x7000), ("copy", 1, 41, 1, 7, 0x7100)])[1]
    assert [len(o.folded_blocked_us) for o in obs] == [0, 0]


def _repeats_and_gil_takes(fast) -> tuple[int, int]:
    """(calls kept as repeats without the GIL, ENTERs that took the GIL) since the last read of
    the C callback's piece timing (which this read zeroes)."""
    counts = {p: n for p, (_, n) in fast.timing(False).items()}
    return (counts["ENTER: a repeat, folded or paired without the GIL (repeat())"],
            counts["ENTER: take the GIL"])


@pytest.mark.skipif(not _c_callback_built(), reason="the C callback (_cuptifast) is not built here")
def test_a_loops_repeats_are_kept_without_the_gil_and_give_the_python_callbacks_events():
    """Fake libcupti, no GPU. Torch 2.8's merge loop (an async copy from pageable memory and the
    stream sync that completes it, five times from one line) and torch >= 2.9's (six like
    copies): the first copy takes the GIL and is handed over; the second folds into it with the
    GIL, which grows the Call's room; every later call repeats the last from the same place and
    is kept without the GIL: 8 of 10 ENTERs, then 4 of 6. The events are the Python callback's
    (which keeps every call), through the C exit."""
    from syncguard.detectors.cuda import _cuptifast

    if not _cuptifast.repeats():
        pytest.skip("this CPython has no GIL-free repeat (see REPEAT in _cuptifast_c/cuptifast.h)")
    ptrs = {0x7000: 1, 0x7100: 2, 0xd000: 3}
    fake = _fake_runtime({p: {1: 0, 2: 1, 3: 2}[k] for p, k in ptrs.items()})
    for program, want_counts in (([("copy", 1, 41, 1, 7, 0x7000), ("sync", 1, 7)] * 5, (8, 2)),
                                 ([("copy", 1, 41, 1, 7, 0x7100)] * 6, (4, 2))):
        _, by_python = _run_program("python", program)
        _cuptifast.timing(True)
        try:
            hub, by_c = _run_program("c", program)
        finally:
            counts = _repeats_and_gil_takes(_cuptifast)
        assert counts == want_counts and len(by_c) == 1
        got = _c_exit(hub, by_c, fake.functions)[0]
        want = combine(by_python, ByPointer(ptrs))[0]
        assert [(e.kind, e.api, e.lineno) for e, _, _ in got] == [
            (e.kind, e.api, e.lineno) for e, _, _ in want]
        assert all(e.host_blocked_us is not None for e, _, _ in got)


@pytest.mark.skipif(not _c_callback_built(), reason="the C callback (_cuptifast) is not built here")
def test_a_repeat_takes_the_gil_again_once_a_scope_or_the_context_changed_in_between():
    """Fake libcupti, no GPU: four like pinned copies from one line. With nothing between them,
    the last two are kept without the GIL. With a region or allow entered or left anywhere
    between them (``routing.scopes_changed``, which regions/region.py calls), or the copy made in another
    context (``Context.run``), each takes the GIL again; it still folds there, since its regions,
    allows and site are the same: one Call either way."""
    import contextvars

    from syncguard.detectors.cuda import _cuptifast

    if not _cuptifast.repeats():
        pytest.skip("this CPython has no GIL-free repeat (see REPEAT in _cuptifast_c/cuptifast.h)")
    hub, region, _ = _c_hub_with_a_copy()
    copy = C.MemcpyAsyncParams(dst=0xd000, src=0x7100, count=4, kind=1, stream=7)

    def copies(between):
        token = routing.regions.set((region,))
        _cuptifast.timing(True)
        try:
            for i in range(4):
                if i:
                    between()
                _fire(hub, 2, 41, C.API_ENTER, i, copy)
                _fire(hub, 2, 41, C.API_EXIT, i, copy)
        finally:
            counts = _repeats_and_gil_takes(_cuptifast)
            routing.regions.reset(token)
        return counts

    try:
        assert copies(lambda: None) == (2, 2)
        assert copies(routing.scopes_changed) == (0, 4)
        ctx = contextvars.copy_context()
        assert copies(lambda: ctx.run(lambda: None)) == (0, 4)  # entered another context
    finally:
        hub.release(region)
    assert [len(o.folded_blocked_us) for o in region.observations] == [3, 3, 3]


@pytest.mark.skipif(not _c_callback_built(), reason="the C callback (_cuptifast) is not built here")
@pytest.mark.parametrize("calls", ["C module", "ctypes"])
def test_no_region_outlives_its_exit_in_the_c_callbacks_memory(calls):
    """The C callback remembers the last regions it handed a call to (their observation lists);
    switching every callback off forgets them, whichever way the hub talks to libcupti (fake
    libcupti, no GPU): the region is freed once the program drops it."""
    import gc
    import weakref

    hub = FakeHub(path="c")
    if calls == "ctypes":  # the fake's entry points as Python functions: the hub calls them itself
        hub.lib.lib = FakeLib(0)
        hub._c_addr = None
    region = FakeRegion()
    hub.acquire(region)
    token = routing.regions.set((region,))
    try:
        copy = C.MemcpyAsyncParams(dst=0x1000, src=0x2000, count=4, kind=1, stream=0)
        _fire(hub, 2, 41, C.API_ENTER, 1, copy)
        _fire(hub, 2, 41, C.API_EXIT, 1, copy)
    finally:
        routing.regions.reset(token)
    assert hub._c_entry() is None if calls == "ctypes" else hub._c_entry() is not None
    hub.release(region)
    assert len(region.observations) == 1
    gone = weakref.ref(region)
    del region, token
    gc.collect()
    assert gone() is None


@pytest.mark.skipif(not _c_callback_built(), reason="the C callback (_cuptifast) is not built here")
def test_the_c_callback_hands_a_call_over_at_enter_and_stamps_its_duration_at_exit():
    """The C callback builds a kept call at ENTER, hands it to the region then, and at EXIT only
    writes its duration into it, without the GIL (fake libcupti, no GPU): in flight, the call is
    already the region's with ``blocked_us`` None; a nested driver call adds its correlation id
    to it; after EXIT it has a duration; and the thread's own hold on it ends when the hub
    switches the callbacks off (its reference count drops by one)."""
    hub, region, copy = _c_hub_with_a_copy()
    token = routing.regions.set((region,))
    try:
        _fire(hub, 2, 41, C.API_ENTER, 1, copy)
        (call,) = region.observations
        in_flight = (call.blocked_us, call.correlation)
        _fire(hub, 1, 17, C.API_ENTER, 2)
        _fire(hub, 1, 17, C.API_EXIT, 2)
        _fire(hub, 2, 41, C.API_EXIT, 1, copy)
    finally:
        routing.regions.reset(token)
    held = sys.getrefcount(call)
    hub.release(region)
    assert in_flight == (None, (1,)) and hub.fast.errors() == 0
    assert region.observations == [call] and call.correlation == (1, 2)
    assert isinstance(call.blocked_us, float) and call.blocked_us >= 0
    assert sys.getrefcount(call) == held - 1


def _any_calls():
    """Random region observation sequences for combine (hand-built calls, no GPU): copies of
    every direction (None: the call does not say), async or not, syncs, frees, on two lines, two
    streams, two threads, with and without a duration, and other detectors' observations."""
    from hypothesis import strategies as st

    site = st.sampled_from([Site("f.py", 1, "f"), Site("f.py", 2, "f"), Site("g.py", 1, "g")])
    common = dict(site=site, thread=st.sampled_from(["MainThread", "T2"]),
                  blocked_us=st.sampled_from([None, 1.0, 2.5, 0.3]), corr=st.integers(1, 4),
                  allows=st.sampled_from([(), ("a",)]))

    def copy(api, direction, is_async, stream, src, dst, site, thread, blocked_us, corr, allows):
        return CudaCall(api, "copy", None, direction, is_async, (corr,), stream, site, "run",
                        thread, allows, blocked_us, 4, src, dst)

    def sync(api, kind, stream, site, thread, blocked_us, corr, allows):
        role = "free" if kind == "implicit_free" else "sync"
        return CudaCall(api, role, kind, None, False, (corr,), stream, site, "compile" if corr == 4
                        else "run", thread, allows, blocked_us)

    ptrs = st.sampled_from([*_PTRS, 0x9999, None])
    copies = st.builds(copy, st.sampled_from(["cudaMemcpyAsync", "cuMemcpyHtoDAsync_v2", "cudaMemcpy"]),
                       st.sampled_from(["h2d", "d2h", "d2d", "h2h", None]), st.booleans(),
                       st.sampled_from([0, 7, None]), ptrs, ptrs, **common)
    syncs = st.builds(sync, st.sampled_from(["cudaStreamSynchronize"]), st.just("stream_sync"),
                      st.sampled_from([0, 7, None]), **common)
    devices = st.builds(sync, st.just("cudaDeviceSynchronize"), st.just("device_sync"), st.none(),
                        **common)
    frees = st.builds(sync, st.just("cudaFree"), st.just("implicit_free"), st.none(), **common)
    debug = st.just(routing.Observation(source="debug", site=Site("f.py", 1, "f"),
                                        thread="MainThread", kind="stream_sync"))
    # an async host<->device copy and a sync from one line and thread, half the time on the same
    # stream, as a blocking copy makes them (the pair that random draws rarely line up)
    pair_copies = st.builds(copy, st.sampled_from(["cudaMemcpyAsync", "cuMemcpyHtoDAsync_v2"]),
                            st.sampled_from(["h2d", "d2h"]), st.just(True),
                            st.sampled_from([0, 7, None]), ptrs, ptrs, **common)
    pairs = st.builds(lambda c, s, same: [c, s._replace(site=c.site, thread=c.thread,
                                                        stream=c.stream if same else s.stream)],
                      pair_copies, syncs, st.booleans())
    one = st.one_of(copies, copies, syncs, devices, frees, debug).map(lambda o: [o])
    return st.lists(st.one_of(one, one, pairs), max_size=10).map(lambda xs: sum(xs, []))


@pytest.mark.skipif(not _c_callback_built(), reason="the C callback (_cuptifast) is not built here")
def test_the_c_combine_reports_what_the_python_loop_reports():
    """Random observation sequences (hand-built calls, no GPU), given to combine() as the C
    callback's Calls (``_cuptifast.as_call``) with the C module, and as the Python callback's
    CudaCalls without it: the same events, allows and notes, with host memory told by pointer
    and by activity record. Expected values come from combine's Python loop. A region holding a
    CudaCall (handed over by the Python callback) goes to the Python loop."""
    from hypothesis import given, settings

    hub = _c_hub_for_calls()
    records = {1: (1, 1, 3), 2: (2, 3, 2), 3: (1, 2, 3)}  # by correlation id; 4 has none

    @settings(max_examples=500, deadline=None)
    @given(_any_calls())
    def check(obs):
        calls = [hub.fast.as_call(o) if isinstance(o, CudaCall) else o for o in obs]
        for memory in (lambda: ByPointer(_PTRS), lambda: ByCorrelation(records)):
            want = combine(obs, memory())
            assert combine(calls, memory(), hub.fast) == want
            assert hub.fast.combine(calls, memory().host_kind, memory().direction, SyncEvent,
                                    dict(cuda._SYNC_FIELDS), ("cuda",), cuda._C_KINDS) is not NotImplemented

    check()
    mixed = [hub.fast.as_call(_obs("cudaMemcpyAsync", "copy", "h2d", True)),
             _obs("cudaStreamSynchronize", "sync", kind="stream_sync", corr=2, src=None, dst=None)]
    assert hub.fast.combine(mixed, None, None, SyncEvent, {}, ("cuda",), cuda._C_KINDS) is NotImplemented
    assert combine(mixed, ByPointer(_PTRS), hub.fast)[0][0][0].kind == "blocking_copy_h2d"


@pytest.mark.skipif(not _c_callback_built(), reason="the C callback (_cuptifast) is not built here")
def test_no_garbage_collection_runs_inside_the_c_callback(monkeypatch):
    """A collection run inside a CUPTI callback could free a tensor, whose release may call CUDA
    from within the CUDA call the callback belongs to (a CUDA call in a callback hung the process:
    NOTES). The C callback allocates (it builds the call) and may run Python (a site cache miss),
    where CPython collects (3.11: on allocation; 3.12: at the next bytecode), so it holds the
    collector off while it has the GIL and leaves it as it found it (fake libcupti, no GPU):
    the Python it runs sees the collector off; garbage due for collection when a call begins is
    collected after the callback, not in it; a collector the program disabled stays disabled."""
    import gc

    from syncguard.attribution import frames as attribution

    during = []
    make_site = attribution.site_from_frames

    def site_from_frames(key, frames):  # runs inside the callback, on a site cache miss
        during.append(gc.isenabled())
        return make_site(key, frames)

    monkeypatch.setattr(attribution, "site_from_frames", site_from_frames)
    monkeypatch.setattr(attribution, "c_site_cache", {})  # every site a miss (configure clears C's)
    hub, region, copy = _c_hub_with_a_copy()  # configures the C module with the wrapper above
    inside, seen = [False], []

    class Cycle:
        def __del__(self):
            seen.append(inside[0])

    data = [C.CallbackData(callbackSite=site, correlationId=corr, functionParams=ctypes.addressof(copy))
            for corr in (1, 3, 5) for site in (C.API_ENTER, C.API_EXIT)]
    fire = [(2, 41, ctypes.addressof(d)) for d in data]  # made before: no allocation in the loop
    token = routing.regions.set((region,))
    threshold = gc.get_threshold()
    try:
        gc.collect()
        gc.set_threshold(1)  # the next tracked allocation collects (3.11) or asks to (3.12)
        for k in (0, 2):
            a = Cycle()
            a.me = a
            del a
            inside[0] = True
            hub.fast.fire(*fire[k])
            hub.fast.fire(*fire[k + 1])
            inside[0] = False
            gc.collect()  # what was not collected inside, now
        enabled_after = gc.isenabled()
        gc.disable()
        hub.fast.fire(*fire[4])
        hub.fast.fire(*fire[5])
        disabled_after = not gc.isenabled()
    finally:
        gc.enable()
        gc.set_threshold(*threshold)
        routing.regions.reset(token)
        hub.release(region)
    # three copies kept (the second, from the first's line, folded into it: fold_into)
    assert hub.fast.errors() == 0 and [len(o.folded_blocked_us) for o in region.observations] == [1, 0]
    assert during and not any(during)  # the site was made inside, with the collector off
    assert seen == [False, False]  # both cycles collected, neither inside the callback
    assert enabled_after and disabled_after  # the collector left as it was found
