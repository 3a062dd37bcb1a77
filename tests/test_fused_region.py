"""A region of the cuda detector alone, entered and left through the fused path
(``registry.CUDA_ALONE``, ``Cuda.arm_alone``/``disarm_alone``, ``_cuptifast_c/regions.c``) and the
hub's lock (``_cuptifast_c/lock.c``).

CPU tests over the fake libcupti of tests/test_detect.py (no GPU): what they check is the
bookkeeping the fused path must leave exactly as the seam's path leaves it (the hub's regions,
both routing tables, the regions context variable, the backward engine proxy) and that it steps
aside wherever the hub is not in its steady state. The expected states are written out here, not
taken from the code under test; the syncs a region reports are judged from callbacks fired as
CUPTI would fire them.
"""
from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

import syncguard  # noqa: E402
from syncguard import detectors as registry  # noqa: E402
from syncguard.detectors import routing  # noqa: E402
from syncguard.detectors.cuda import cupti as C  # noqa: E402
from tests.test_detect import FakeHub, _c_callback_built, _fire  # noqa: E402

pytestmark = pytest.mark.skipif(not _c_callback_built(),
                                reason="the C callback (_cuptifast) is not built here")

Variable = pytest.importorskip("torch.autograd.variable").Variable


@pytest.fixture
def hub(monkeypatch):
    """The registry's cuda detector over a fake libcupti with the C callback, CUDA said to be set
    up (a CPU build), the fused-path cache empty before and after."""
    hub = FakeHub(path="c")
    monkeypatch.setattr(registry.get("cuda"), "hub", hub)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    registry.CUDA_ALONE.clear()
    yield hub
    registry.CUDA_ALONE.clear()


def _engine():
    return Variable.__dict__["_execution_engine"]


def _spy(monkeypatch, hub):
    """How often the seam's path took the hub (acquire) and gave it back (release)."""
    seen = {"acquire": 0, "release": 0}
    for name in seen:
        real = getattr(hub, name)

        def spy(region, real=real, name=name):
            seen[name] += 1
            return real(region)
        monkeypatch.setattr(hub, name, spy)
    return seen


def _quiet(hub):
    """Nothing of any region left: no listed region, no route in either table, no scope, torch's
    own engine in place."""
    me = threading.get_ident()
    return (hub.regions == [] and me not in routing.threads and me not in hub.fast.routes()[0]
            and routing.regions.get() == () and type(_engine()).__name__ != "_EngineProxy")


def test_the_second_region_of_a_request_enters_and_leaves_through_the_fused_path(hub, monkeypatch):
    engine = _engine()
    with syncguard.audit() as first:  # the seam's path: it resolves auto and subscribes
        pass
    assert first.detectors == ("cuda",) and ("auto",) in registry.CUDA_ALONE
    seen = _spy(monkeypatch, hub)
    me = threading.get_ident()
    region = syncguard.audit()
    with region as report:
        # inside: listed once, routed once in both tables, in this context's scopes, the
        # backward proxy standing in for torch's engine
        assert hub.regions == [region] and routing.regions.get() == (region,)
        assert routing.threads[me] == 1 and hub.fast.routes()[0][me] == 1
        assert region.state["cuda_thread"] == me
        assert type(_engine()).__name__ == "_EngineProxy" and _engine()._engine is engine
    assert seen == {"acquire": 0, "release": 0}  # neither was asked: the fused path ran
    assert _quiet(hub) and _engine() is engine and "cuda_thread" not in region.state
    assert report.detectors == first.detectors and report.detector_reason == first.detector_reason
    assert report.clean and report.notes == []


def _sync_in(region_factory, hub, corr):
    """A stream sync fired inside a region, as CUPTI calls the callback (entry and exit)."""
    sync = C.StreamParams(stream=0)
    with region_factory() as report:
        _fire(hub, 2, 131, C.API_ENTER, corr, sync)
        _fire(hub, 2, 131, C.API_EXIT, corr, sync)
    return report


def test_a_fused_region_reports_the_sync_the_seam_path_reports(hub):
    seam = _sync_in(syncguard.audit, hub, 1)  # the first region: the seam's path
    assert ("auto",) in registry.CUDA_ALONE
    fused = _sync_in(syncguard.audit, hub, 2)
    for report in (seam, fused):
        assert [(e.api, e.kind) for e in report.syncs] == [("cudaStreamSynchronize", "stream_sync")]
        assert report.syncs[0].filename.endswith("test_detect.py")  # _fire(), where CUPTI is called
    assert seam.syncs[0].lineno == fused.syncs[0].lineno
    with pytest.raises(syncguard.SyncError):
        _sync_in(syncguard.forbid, hub, 3)  # forbid() through the fused path raises as before
    assert _quiet(hub)


def test_a_default_region_is_made_as_its_arguments_parse():
    """Region() takes the default arguments without parsing them again: what parsing gives."""
    from syncguard.regions import region as module

    assert module._parse(module.DETECTORS, ()) == (("auto",), ())
    made = syncguard.audit()
    assert (made.detectors, made.fail_on_phases, made.races) == (("auto",), (), False)
    assert syncguard.audit("cuda", fail_on_phases="compile").fail_on_phases == ("compile",)


def test_nested_fused_regions_and_one_left_out_of_order(hub):
    with syncguard.audit():
        pass
    engine = _engine()
    outer, inner = syncguard.audit(), syncguard.audit()
    outer.__enter__()
    inner.__enter__()
    me = threading.get_ident()
    assert hub.regions == [outer, inner] and routing.regions.get() == (outer, inner)
    assert routing.threads[me] == 2 and hub.fast.routes()[0][me] == 2
    outer.__exit__(None, None, None)  # not the innermost: the seam's path takes it out
    assert hub.regions == [inner] and routing.regions.get() == (inner,)
    assert routing.threads[me] == 1 and hub.fast.routes()[0][me] == 1
    assert type(_engine()).__name__ == "_EngineProxy"  # inner still open
    inner.__exit__(None, None, None)
    assert _quiet(hub) and _engine() is engine


def test_an_exception_inside_a_fused_region_leaves_it_and_goes_on(hub):
    with syncguard.audit():
        pass
    with pytest.raises(KeyError):
        with syncguard.audit():
            raise KeyError("x")
    assert _quiet(hub)


def test_the_fused_path_steps_aside_while_cupti_is_lent(hub, monkeypatch):
    """A profiler starting inside a fused region: the hand-over finds the region listed and moves
    it to sync-debug mode; its exit, with the hub no longer steady, goes the seam's way, and the
    next region (CUPTI still lent) runs without the cuda detector and says why."""
    monkeypatch.setattr("syncguard.detectors.hooks.HUBS.debug.arm", lambda *a: None)
    monkeypatch.setattr("syncguard.detectors.hooks.HUBS.debug.disarm", lambda: None)
    with syncguard.audit():
        pass
    seen = _spy(monkeypatch, hub)
    with syncguard.audit() as lent:
        hub.hand_over(who="a test's profiler")
    assert seen == {"acquire": 0, "release": 1}
    assert any("a test's profiler" in n for n in lent.notes)
    with syncguard.audit() as later:
        pass
    assert "cuda" not in later.detectors and seen["acquire"] == 1
    hub.take_back()
    with syncguard.audit() as again:
        pass
    assert again.detectors == ("cuda",) and _quiet(hub)


def test_the_fused_path_steps_aside_where_host_memory_is_told_by_activity_records(hub, monkeypatch):
    """SYNCGUARD_CUDA_HOSTMEM=activity: a region's entry switches CUPTI's memcpy records on (the
    seam's path, _first_region) and its exit off; between regions they are off, which must not
    read as the steady state (found on the H200: the second region had no memcpy record)."""
    monkeypatch.setattr(hub, "hostmem", "activity")
    switched = []
    monkeypatch.setattr(hub.activity, "enable", lambda lib: switched.append("on"))
    with syncguard.audit():
        pass
    seen = _spy(monkeypatch, hub)
    with syncguard.audit():
        pass
    assert seen == {"acquire": 1, "release": 1} and switched == ["on", "on"]


def test_regions_on_many_threads_at_once_leave_nothing_behind(hub):
    with syncguard.audit():
        pass
    engine = _engine()
    errors, start = [], threading.Barrier(4)

    def work():
        try:
            start.wait()
            for _ in range(300):
                with syncguard.audit() as report:
                    pass
                assert report.detectors == ("cuda",), report.detectors
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert hub.regions == [] and routing.threads == {} and hub.fast.routes() == ({}, 0, 0)
    assert _engine() is engine


def test_the_fused_calls_refuse_bad_arguments(hub):
    with pytest.raises(TypeError, match=r"expected \(hub, region, routing.threads\)"):
        hub.fast.enter_alone(hub, object())
    with pytest.raises(TypeError, match=r"expected \(hub, region, routing.threads\)"):
        hub.fast.leave_alone(hub, object(), [])


# --- the hub's lock ------------------------------------------------------------------------------
def test_the_hub_lock_is_reentrant_owned_and_waits():
    from syncguard.detectors.cuda._cuptifast import HubLock

    lock = HubLock()
    with lock:
        with lock:  # re-entrant on its thread
            assert lock._is_owned()
        got = []
        t = threading.Thread(target=lambda: got.append(lock.acquire(False)))
        t.start()
        t.join()
        assert got == [False]  # held by this thread: another does not get it without waiting
    assert not lock._is_owned()
    with pytest.raises(RuntimeError, match="un-acquired"):
        lock.release()
    order = []
    lock.acquire()

    def waiter():
        with lock:
            order.append("waiter")
    t = threading.Thread(target=waiter)
    t.start()
    t.join(0.2)
    assert t.is_alive() and order == []  # it waits (with the GIL released: this thread runs)
    order.append("owner")
    lock.release()
    t.join(5)
    assert order == ["owner", "waiter"]
    with pytest.raises(TypeError):
        lock.acquire(True, 1.0)


def test_a_hub_without_the_c_module_uses_threadings_lock(monkeypatch):
    import sys

    from syncguard.detectors import cuda as package
    from syncguard.detectors.cuda import hub as hub_module

    monkeypatch.delattr(package, "_cuptifast")  # as where the extension did not build
    monkeypatch.setitem(sys.modules, "syncguard.detectors.cuda._cuptifast", None)
    assert type(hub_module._hub_lock()) is type(threading.RLock())
