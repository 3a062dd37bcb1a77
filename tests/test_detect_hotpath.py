"""The cuda detector's hot-path caches and fast constructors (CPU only, no CUDA, no libcupti).

The caches in syncguard.attribution.frames never need invalidating: a code object's co_filename,
co_name and co_firstlineno are immutable, so "is this frame internal" (a function of co_filename
and torch's directory) and the Site built from a chain of (code, lineno) pairs cannot change for
the same key. What these tests check is that the cached answers equal what the frames say,
computed here by hand, that a different line gives a different site, and that the caches stay
bounded.
"""
from __future__ import annotations

import dataclasses
import os
import sys

import pytest

from syncguard.attribution import frames as attribution
from syncguard.detectors import routing
from syncguard.attribution.frames import Site
from syncguard.records.frame import Frame
from syncguard.testing import marked_line


def _expected_site(frame, depth=attribution.STACK_DEPTH) -> Site:
    """Built from the frames directly, without syncguard's walk or caches."""
    frames = []
    f = frame
    while f is not None and len(frames) < depth:
        frames.append(f)
        f = f.f_back
    top = frames[0]
    return Site(top.f_code.co_filename, top.f_lineno, top.f_code.co_name,
                tuple(Frame(g.f_code.co_filename, g.f_lineno, g.f_code.co_name) for g in frames))


def _here():
    return attribution.user_site(), _expected_site(sys._getframe())


def test_user_site_equals_the_frames_and_is_reused_for_the_same_line():
    sites = [_here() for _ in range(3)]  # the same line three times: one cached Site
    for got, want in sites:
        assert got == want
    assert sites[0][0] is sites[1][0] is sites[2][0]
    other = _here()  # called from another line of this test: another site
    assert other[0] == other[1] and other[0].stack[1] != sites[0][0].stack[1]


def test_site_and_phase_matches_user_site_from_inside_a_callback_like_call():
    def callback():  # a frame of the user's (tests/ is not internal): it is the site
        return attribution.site_and_phase(sys._getframe()), _expected_site(sys._getframe())
    (site, phase), want = callback()
    assert site == want and site.function == "callback" and phase == attribution.RUN


def test_internal_frames_are_skipped_and_classified_once_per_code_object():
    torch = pytest.importorskip("torch")
    import os

    src = "def f(fn):\n    return fn()\n"
    ns: dict = {}
    fake_torch_file = os.path.join(os.path.dirname(torch.__file__), "fake_hotpath_frame.py")
    exec(compile(src, fake_torch_file, "exec"), ns)
    # starting at the "torch" frame f, the walk skips it and stops at this test's line
    (site, _), want = ns["f"](lambda: (attribution.site_and_phase(sys._getframe(1)),
                                       _expected_site(sys._getframe(2))))
    assert site == want and site.function.startswith("test_internal_frames")
    code = ns["f"].__code__
    assert attribution._code_cache[id(code)] == (1, code)  # internal, not a graph set-up frame
    assert attribution.is_internal(code.co_filename)  # the uncached answer agrees


def test_equal_code_objects_from_different_files_get_their_own_sites():
    """CPython's code equality ignores co_filename: the cache must not confuse them."""
    src = "import sys\ndef f():\n    return sys._getframe()\n"
    frames = []
    for name in ("test_m.py", "test_h.py"):
        ns: dict = {}
        exec(compile(src, name, "exec"), ns)
        frames.append(ns["f"]())
    assert frames[0].f_code == frames[1].f_code  # the trap itself
    sites = [attribution._site_at(f, 1) for f in frames]
    assert [s.filename for s in sites] == ["test_m.py", "test_h.py"]


def test_caches_are_bounded(monkeypatch):
    monkeypatch.setattr(attribution, "_CACHE_MAX", 4)
    attribution._site_cache.clear()
    codes = [compile(f"import sys\nx{i} = sys._getframe()", f"gen{i}.py", "exec") for i in range(10)]
    for c in codes:
        ns: dict = {}
        exec(c, ns)
        attribution._site_at(ns[f"x{codes.index(c)}"], 8)
        assert len(attribution._site_cache) <= 4


@pytest.mark.parametrize("path", ["python", "c"])
def test_device_to_device_copy_is_recorded_without_a_stack_walk_and_still_ends_pairing(path):
    """Fake libcupti (tests/test_detect.py's FakeHub), fake callback data: an async pinned H2D
    copy, a D2D copy, then a stream sync on the same line. The D2D copy sits between them, so the
    H2D copy is judged alone (pinned: no wait) and the sync is a plain stream sync."""
    import ctypes

    from syncguard.detectors.cuda import cupti as C
    from syncguard.detectors.cuda.detector import combine
    from syncguard.detectors.cuda.hostmem import ByCorrelation
    from tests.test_detect import FakeHub, FakeRegion, _c_callback_built

    if path == "c" and not _c_callback_built():
        pytest.skip("the C callback (_cuptifast) is not built here")
    hub, region = FakeHub(path=path), FakeRegion()
    hub.acquire(region)
    h2d = C.MemcpyAsyncParams(dst=0x1000, src=0x2000, count=4, kind=1, stream=0)
    d2d = C.MemcpyAsyncParams(dst=0x1000, src=0x3000, count=4, kind=3, stream=0)
    sync = C.StreamParams(stream=0)

    def fire(cbid, site, corr, params):
        data = C.CallbackData(callbackSite=site, correlationId=corr,
                              functionParams=ctypes.addressof(params))
        if hub.fast is not None:
            hub.fast.fire(2, cbid, ctypes.addressof(data))
        else:
            hub._callback(None, 2, cbid, ctypes.addressof(data))

    token = routing.regions.set((region,))
    try:
        for cbid, corr, params in ((41, 1, h2d), (41, 2, d2d), (131, 3, sync)):
            fire(cbid, C.API_ENTER, corr, params)
            fire(cbid, C.API_EXIT, corr, params)
    finally:
        routing.regions.reset(token)
    hub.release(region)
    assert hub.errors == 0 and (hub.fast is None or hub.fast.errors() == 0)
    obs = region.observations
    assert [o.direction for o in obs[:2]] == ["h2d", "d2d"]
    assert [(o.src, o.dst, o.nbytes, o.stream, o.correlation) for o in obs] == [
        (0x2000, 0x1000, 4, 0, (1,)), (0x3000, 0x1000, 4, 0, (2,)), (None, None, None, 0, (3,))]
    assert obs[1].site == Site() and obs[0].site.filename == __file__
    pinned = ByCorrelation({1: (1, 2, 3)})  # the H2D copy's host memory: pinned
    events, notes = combine(obs, pinned)
    assert [e.kind for e, _, _ in events] == ["stream_sync"] and notes == []
    events, _ = combine([obs[0], obs[2]], pinned)  # without the D2D copy they pair
    assert [e.kind for e, _, _ in events] == ["blocking_copy_h2d"]


def test_the_c_callback_is_built_where_a_compiler_and_cpython_3_11_are():
    """setup.py builds it as an optional extension: on a machine that can build it (CI's, the
    GPU machine's) a missing module means the build broke, not that it was optional."""
    import shutil
    import sysconfig

    can = (sys.implementation.name == "cpython" and sys.version_info >= (3, 11)
           and shutil.which(sysconfig.get_config_var("CC").split()[0] or "cc") is not None
           and os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
    if not can:
        pytest.skip("no C compiler or Python headers here: the Python callback runs")
    from syncguard.detectors.cuda import _cuptifast

    assert callable(_cuptifast.configure) and _cuptifast.callback_address()


def _fake_torch_fire():
    """fire(callback, args list, n): calls ``callback(*a)`` for each ``a`` from under ``n`` frames
    whose file lies in torch's directory (internal), as torch's Python wrappers sit between the
    user's line and the CUDA call."""
    torch = pytest.importorskip("torch")
    src = ("def fire(cb, calls, n):\n    if n > 1:\n        return fire(cb, calls, n - 1)\n"
           "    for a in calls:\n        cb(*a)\n")
    ns: dict = {}
    exec(compile(src, os.path.join(os.path.dirname(torch.__file__), "fake_c_site.py"), "exec"), ns)
    return ns["fire"]


@pytest.mark.parametrize("internal", [1, 5])
def test_the_c_callback_attributes_like_the_frames_say(internal):
    """The C callback's Site (its own walk, hash and cache) against the frames read by hand, for
    a sync made under torch-like frames, twice from the same line (the second from the cache) and
    once from another line."""
    import ctypes

    from syncguard.detectors.cuda import cupti as C
    from tests.test_detect import FakeHub, FakeRegion, _c_callback_built

    if not _c_callback_built():
        pytest.skip("the C callback (_cuptifast) is not built here")
    hub, region = FakeHub(path="c"), FakeRegion()
    hub.acquire(region)
    sync = C.StreamParams(stream=0)
    datas = [C.CallbackData(callbackSite=s, correlationId=1, functionParams=ctypes.addressof(sync))
             for s in (C.API_ENTER, C.API_EXIT)]
    calls = [(2, 131, ctypes.addressof(d)) for d in datas]
    fire = _fake_torch_fire()

    def user_line():
        return fire(hub.fast.fire, calls, internal), _expected_site(sys._getframe())

    token = routing.regions.set((region,))
    want = []
    try:
        for _ in range(2):
            want.append(user_line()[1])
        fire(hub.fast.fire, calls, internal)  # L-OTHER
        want.append(_expected_site(sys._getframe()))
    finally:
        routing.regions.reset(token)
    hub.release(region)
    assert hub.fast.errors() == 0
    got = [o.site for o in region.observations]
    assert len(got) == 3 and got[0] is got[1]  # the second from the cache
    # want[0] was read by hand on the call's own line, in the same frames
    assert got[:2] == want[:2] and got[0].function == "user_line"
    assert got[2].stack[1:] == want[2].stack[1:] and got[2].lineno == marked_line(__file__, "L-OTHER")


def test_pointer_functions_say_none_while_the_stream_captures(monkeypatch):
    """What ``_cuptifast.by_pointer`` calls at a region's first pointer question (fake libcudart,
    no GPU): the runtime's two functions' addresses, or None while the thread's current stream
    captures a graph, or when asking whether it does fails (then nothing may be asked)."""
    import ctypes

    from syncguard.detectors.cuda import hostmem
    from tests.test_detect import _fake_runtime

    torch = pytest.importorskip("torch")
    fake = _fake_runtime({})
    monkeypatch.setattr(hostmem, "_load_cudart", lambda: fake)
    want = tuple(ctypes.cast(f, ctypes.c_void_p).value
                 for f in (fake.cudaPointerGetAttributes, fake.cudaGetLastError))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert hostmem.pointer_functions() == want
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert hostmem.pointer_functions() is None

    def no_context():
        raise RuntimeError("no CUDA context")

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", no_context)
    assert hostmem.pointer_functions() is None


@pytest.mark.parametrize("path", ["python", "c"])
def test_pointer_kinds_ask_once_per_pointer_and_skip_failed_queries(path, monkeypatch):
    """A fake libcudart (ctypes functions, callable from C too): 0x1000 is pinned host memory
    (type 1), 0x2000 pageable (0: unregistered), 0x3000 managed (3), 0x9000 device memory (2),
    0x4000 makes the query fail. Each distinct pointer is asked once; a failed query leaves its
    pointer without a kind and the error cleared. Kinds are CUPTI's memory kinds (1 pageable,
    2 pinned, 3 device, 5 managed: cupti_activity.h). Copies whose call names no direction
    (cudaMemcpyDefault) get it from both pointers; a device-to-device copy's pointers are not
    asked."""
    from syncguard.detectors.cuda import hostmem
    from syncguard.detectors.cuda.calls import CudaCall
    from tests.test_detect import _c_callback_built, _fake_runtime

    if path == "c" and not _c_callback_built():
        pytest.skip("the C callback (_cuptifast) is not built here")
    torch = pytest.importorskip("torch")
    fake = _fake_runtime({0x1000: 1, 0x2000: 0, 0x3000: 3, 0x9000: 2})  # memory types
    asked, cleared = fake.asked, fake.cleared
    monkeypatch.setattr(hostmem, "_load_cudart", lambda: fake)
    capture_checks = []
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing",
                        lambda: capture_checks.append(1) or False)
    calls = [CudaCall("cudaMemcpyAsync", "copy", None, d, True, (corr,), 0, src=s, dst=t)
             for corr, d, s, t in ((1, "h2d", 0x1000, 0xd0), (2, "h2d", 0x2000, 0xd0),
                                   (3, "d2h", 0xd0, 0x3000), (4, "h2d", 0x4000, 0xd0),
                                   (5, "h2d", 0x1000, 0xd8), (6, "d2d", 0xd0, 0xd8))]
    calls += [CudaCall("cudaMemcpy", "copy", None, None, False, (corr,), 0, src=s, dst=t)
              for corr, s, t in ((7, 0x9000, 0x2000), (8, 0x1000, 0x9000), (9, 0x9000, 0x9000),
                                 (10, 0x4000, 0x9000))]
    fast = None
    if path == "c":
        from syncguard.detectors.cuda import _cuptifast as fast
    got = hostmem.pointer_kinds(fast)
    assert asked == []  # nothing is asked before a copy needs it
    # what each copy is judged to be, written by hand from the pointers above
    judged = [(d, got.host_kind(c, d) if d in ("h2d", "d2h") else None)
              for c in calls for d in [got.direction(c)]]
    # CUPTI memory kinds: 1 pageable, 2 pinned, 3 device, 5 managed; 0x4000's query failed
    assert got.kinds == {0x1000: 2, 0x2000: 1, 0x3000: 5, 0x9000: 3}
    assert sorted(asked) == [0x1000, 0x2000, 0x3000, 0x4000, 0x9000] and cleared == [1]
    assert capture_checks == [1]  # asked once, at the first question
    assert judged == [
        ("h2d", "pinned"), ("h2d", "pageable"), ("d2h", "managed"), ("h2d", None),
        ("h2d", "pinned"), ("d2d", None), ("d2h", "pageable"), ("h2d", "pinned"),
        ("d2d", None), (None, None)]


def test_a_fresh_region_report_is_the_dataclass_default_with_lists_of_its_own():
    """Region reports are made with RegionReport.fresh (no dataclass __init__): what it makes
    must equal RegionReport() field for field, and no two share a list."""
    from syncguard.records.events import RegionReport

    a, b = RegionReport.fresh(), RegionReport.fresh()
    want = RegionReport()
    names = [f.name for f in dataclasses.fields(RegionReport)]
    assert a == want and [getattr(a, n) for n in names] == [getattr(want, n) for n in names]
    assert not hasattr(a, "__dict__")  # slots: nothing set outside its fields
    for f in dataclasses.fields(RegionReport):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, list):
            assert x is not y and x == []
    a.syncs.append("x")
    assert b.syncs == [] and RegionReport.fresh().syncs == []


def test_auto_resolves_afresh_when_the_cuda_detector_changes(monkeypatch):
    """registry.resolve remembers its answer per request and callback: a changed callback or
    an unavailable cuda detector still gives the answer the detector says now."""
    from syncguard import detectors as registry

    cuda = registry.get("cuda")
    monkeypatch.setattr(type(cuda), "unavailable", lambda self: None)
    monkeypatch.setattr(cuda.hub, "callback", "C callback")
    got = registry.resolve(("auto", "races"))
    assert got == (("cuda", "races"), "cuda: CUPTI callbacks on the CUDA runtime and driver "
                                      "(C callback)")
    assert registry.resolve(("auto", "races")) is got  # remembered
    monkeypatch.setattr(cuda.hub, "callback", "Python callback (why)")
    assert registry.resolve(("auto", "races"))[1].endswith("(Python callback (why))")
    monkeypatch.setattr(type(cuda), "unavailable", lambda self: "no libcupti")
    assert registry.resolve(("auto", "races")) == (
        ("debug", "trace", "races"), "debug,trace: cuda detector unavailable (no libcupti)")
    assert registry.resolve(("auto", "profile"))[0] == ("debug", "trace", "profile")
    assert registry.resolve(("debug",)) == (("debug",), None)
