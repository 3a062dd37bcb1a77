"""Region API plumbing on the CPU, driven by the fake detector (syncguard.testing): routing,
allow() rules, threads and tasks, nesting, forbid(), and the no-CUDA path."""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import sys
import threading
import types

import pytest

import syncguard
from syncguard.detectors import hooks as detect
from syncguard.attribution.frames import Site
from syncguard.records.frame import Frame
from syncguard.records.events import Report, SyncEvent
from syncguard.regions.region import parse_detectors
from syncguard.testing import fake_sync, marked_line

FAKE = ("fake",)


def line_of(marker: str) -> int:
    return marked_line(__file__, marker)


def test_sync_is_attributed_to_the_calling_line():
    with syncguard.audit(FAKE) as report:
        fake_sync(op="aten::nonzero")  # L-ATTR
    (e,) = report.syncs
    assert e.filename == __file__ and e.lineno == line_of("L-ATTR")
    assert e.function == "test_sync_is_attributed_to_the_calling_line"
    assert e.op == "aten::nonzero" and e.thread == threading.current_thread().name
    assert not report.clean


def test_no_region_no_delivery():
    assert fake_sync() is False


def test_allow_with_reason_max_api_and_kind():
    with syncguard.audit(FAKE) as report:
        with syncguard.allow("token count", max=2):
            fake_sync()
            fake_sync()
            fake_sync()
        with syncguard.allow("only device syncs", kind="device_sync"):
            fake_sync()
            fake_sync(kind="device_sync", api="cudaDeviceSynchronize")
        with syncguard.allow("only frees", api="cudaFree"):
            fake_sync(kind="implicit_free", api="cudaFree")
    assert [e.reason for e in report.allowed] == ["token count", "token count", "only device syncs",
                                                 "only frees"]
    assert [e.note for e in report.syncs] == ["exceeds allow(max=2): token count", None]


def test_inner_allow_is_used_before_outer():
    with syncguard.audit(FAKE) as report:
        with syncguard.allow("outer"):
            with syncguard.allow("inner", max=1):
                fake_sync()
                fake_sync()
    assert [e.reason for e in report.allowed] == ["inner", "outer"]


@pytest.mark.parametrize("kwargs,match", [
    ({"reason": ""}, "non-empty reason"),
    ({"reason": "x", "max": -1}, "non-negative"),
    ({"reason": "x", "kind": "nap"}, "must be one of"),
])
def test_allow_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        syncguard.allow(**kwargs)


def test_allow_as_decorator_counts_per_call():
    @syncguard.allow("one per call", max=1)
    def step():
        fake_sync()

    with syncguard.audit(FAKE) as report:
        step()
        step()
    assert len(report.allowed) == 2 and report.syncs == []


def test_allow_decorates_coroutines():
    @syncguard.allow("async step")
    async def step():
        fake_sync()

    async def main():
        with syncguard.audit(FAKE) as report:
            await step()
        return report

    assert len(asyncio.run(main()).allowed) == 1


def test_forbid_raises_with_the_report_and_does_not_mask_exceptions():
    with pytest.raises(syncguard.SyncError) as info:
        with syncguard.forbid(FAKE):
            fake_sync(kind="device_sync", api="cudaDeviceSynchronize")
    assert info.value.report.syncs[0].kind == "device_sync"
    assert "device_sync" in str(info.value)
    with pytest.raises(KeyError):
        with syncguard.forbid(FAKE):
            fake_sync()
            raise KeyError("original")
    with syncguard.forbid(FAKE):
        with syncguard.allow("fine"):
            fake_sync()


def test_other_threads_syncs_are_not_ours_and_their_allows_do_not_cover_us():
    inside, release = threading.Event(), threading.Event()
    theirs = {}

    def other():
        with syncguard.audit(FAKE) as r, syncguard.allow("theirs"):
            inside.set()
            fake_sync()
            release.wait()
        theirs["r"] = r

    t = threading.Thread(target=other, name="other")
    with syncguard.audit(FAKE) as mine:
        t.start()
        inside.wait()
        fake_sync()
        release.set()
        t.join()
    assert len(mine.syncs) == 1 and mine.allowed == [] and mine.syncs[0].thread == "MainThread"
    assert len(theirs["r"].allowed) == 1 and theirs["r"].allowed[0].thread == "other"


def test_asyncio_tasks_have_their_own_regions_and_allows():
    async def task(allowed: bool):
        with syncguard.audit(FAKE) as r:
            if allowed:
                with syncguard.allow("task A"):
                    await asyncio.sleep(0)
                    fake_sync()
            else:
                await asyncio.sleep(0)
                fake_sync()
                await asyncio.sleep(0)
        return r

    async def main():
        return await asyncio.gather(task(True), task(False))

    a, b = asyncio.run(main())
    assert (len(a.allowed), len(a.syncs), len(b.allowed), len(b.syncs)) == (1, 0, 0, 1)


def test_nested_regions_both_see_inner_syncs():
    with syncguard.audit(FAKE) as outer:
        fake_sync()
        with syncguard.audit(FAKE) as inner:
            fake_sync(kind="event_sync", api="cudaEventSynchronize")
    assert [e.kind for e in inner.syncs] == ["event_sync"]
    assert [e.kind for e in outer.syncs] == ["stream_sync", "event_sync"]


def test_region_cannot_be_reentered():
    region = syncguard.audit(FAKE)
    with region:
        pass
    with pytest.raises(RuntimeError, match="twice"):
        with region:
            pass


def test_without_cuda_nothing_is_recorded_and_forbid_passes():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with syncguard.forbid() as report:
        fake_sync()
    assert report.cuda_available is False and "CUDA is not available" in report.reason
    assert report.clean and report.syncs == []
    assert "not audited" in report.summary()


def test_importing_syncguard_does_not_initialise_cuda():
    import subprocess
    import sys

    code = ("import syncguard, syncguard.plugin, syncguard.strategies, sys; import torch; "
            "print(torch.cuda.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode != 0 and "No module named" in out.stderr:
        code = "import syncguard, torch; print(torch.cuda.is_initialized())"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("value,expected", [("debug", ("debug",)), ("trace, debug", ("trace", "debug")),
                                            (["debug", "debug"], ("debug",))])
def test_parse_detectors(value, expected):
    assert parse_detectors(value) == expected


@pytest.mark.parametrize("value", ["", "debug,profiler", ["cupti"]])
def test_parse_detectors_rejects_unknown(value):
    with pytest.raises(ValueError, match="unknown detector"):
        parse_detectors(value, where="--syncguard-detectors")


def test_report_and_event_json_round_trip():
    e = SyncEvent(api="cudaStreamSynchronize", kind="blocking_copy_d2h", op="aten::nonzero",
                  ops=("aten::index", "aten::nonzero"), filename="m.py", lineno=3, function="f",
                  stack=("m.py:3 in f",), thread="MainThread", host_blocked_us=12.5,
                  detectors=("debug", "trace"))
    r = Report(syncs=[e], allowed=[dataclasses.replace(e, phase="compile")], detectors=("cuda",),
               notes=["n"], detector_reason="cuda: CUPTI callbacks")
    back = Report.from_json(r.to_json())
    assert back == r and back.syncs[0] == e and hash(back.syncs[0]) == hash(e)


@pytest.mark.parametrize("text,match", [("{", "not valid JSON"), ('{"schema_version": 99}', "99"),
                                        ('{"schema_version": 1, "syncs": [{"api": "x", "kind": "y", "bogus": 1}]}',
                                         "unknown fields")])
def test_report_rejects_bad_json(text, match):
    with pytest.raises(syncguard.SchemaError, match=match):
        Report.from_json(text)


@pytest.mark.parametrize("text,match", [
    ('{"schema_version": 1, "syncs": [{"kind": "stream_sync"}]}', "SyncEvent has no 'api'"),
    ('{"schema_version": 1, "syncs": null}', "syncs is None, not a list"),
    ('{"schema_version": 1, "syncs": [{"api": "a", "kind": "k", "lineno": "3"}]}',
     "lineno is '3', not an integer or null"),
    ('{"schema_version": 1, "races": [{"kind": "race", "what": "w", "streams": "7"}]}',
     "streams is '7', not a list of integers"),
    ('{"schema_version": 1, "syncs": [{"api": "a", "kind": "k", "host_blocked_us": NaN}]}',
     "host_blocked_us is nan, not a finite number"),
    ('{"schema_version": 1, "cuda_available": "false"}', "cuda_available is 'false', not true"),
    ('{"schema_version": 1, "detectors": "cuda"}', "detectors is 'cuda', not a list of strings"),
    ('{"schema_version": 1, "notes": "abc"}', "notes is 'abc', not a list of strings"),
    ('{"schema_version": true}', "schema_version True"),
    ('{"schema_version": 1.0}', "schema_version 1.0"),
    ("1" * 5000, "not a JSON document syncguard can read"),
    ("[" * 100_000, "not a JSON document syncguard can read"),
])
def test_report_fields_of_the_wrong_type_are_one_schema_error(text, match):
    """Why: from_dict checked the schema version alone; a sync without its API was a TypeError,
    "false" read as True, "cuda" as four detectors and "abc" as three notes; ``true`` passed as
    version 1 (True == 1); a 5000-digit number (ValueError) or deep nesting (RecursionError)
    escaped parse_json."""
    with pytest.raises(syncguard.SchemaError, match=match) as caught:
        Report.from_json(text)
    assert len(str(caught.value).splitlines()) == 1


def test_report_json_has_no_nan_or_infinity():
    """Why: to_json wrote a wait of NaN or Infinity as Python's ``NaN``, which is not JSON; it
    is now null, as a wait no detector measured, and the text reads back."""
    e = SyncEvent(api="a", kind="stream_sync", host_blocked_us=float("nan"))
    r = Report(syncs=[e, dataclasses.replace(e, host_blocked_us=float("inf"))])
    text = r.to_json()
    assert "NaN" not in text and "Infinity" not in text
    assert [s.host_blocked_us for s in Report.from_json(text).syncs] == [None, None]


def test_trace_hooks_restore_what_they_wrapped():
    torch = pytest.importorskip("torch")
    hub = detect.TraceHub()  # wrappers only: torch's _gpu_trace belongs to the opt-in gpu_trace
    before = (torch.cuda.synchronize, torch.cuda.empty_cache, torch.tensor,
              torch.cuda.Event.__dict__["synchronize"], "to" in vars(torch.Tensor))

    @contextlib.contextmanager
    def around(label):
        yield None

    hub.arm(lambda o: True, lambda: True, around)
    try:
        assert torch.cuda.synchronize is not before[0]
        assert torch.cuda.synchronize.__wrapped__ is before[0]
        assert "to" in vars(torch.Tensor)
        assert torch.ones(2).to(torch.float64).dtype == torch.float64  # wrappers stay transparent
    finally:
        hub.disarm()
    assert (torch.cuda.synchronize, torch.cuda.empty_cache, torch.tensor,
            torch.cuda.Event.__dict__["synchronize"], "to" in vars(torch.Tensor)) == before


def _t(dev, pinned=False, numel=4):
    """A stand-in for a tensor: the copy classifier reads only .device, .numel(), .is_pinned()."""
    return types.SimpleNamespace(device=types.SimpleNamespace(type=dev), is_pinned=lambda: pinned,
                                 numel=lambda: numel)


@pytest.mark.parametrize("src,dst,nb,syncs,expected", [
    (_t("cpu"), _t("cuda"), True, [], ("pageable_copy", "cudaMemcpyAsync")),
    (_t("cpu", True), _t("cuda"), True, [], None),
    (_t("cuda"), _t("cpu"), True, [], ("pageable_copy", "cudaMemcpyAsync")),
    (_t("cuda"), _t("cpu", True), True, [], None),
    (_t("cpu", True), _t("cuda"), False, ["cudaStreamSynchronize"],
     ("blocking_copy_h2d", "cudaStreamSynchronize")),
    ([1, 2, 3], _t("cuda"), False, ["cudaStreamSynchronize"], ("blocking_copy_h2d", "cudaStreamSynchronize")),
    (_t("cuda"), _t("cpu"), False, ["cudaStreamSynchronize"], ("blocking_copy_d2h", "cudaStreamSynchronize")),
    (_t("cuda"), _t("cuda"), False, ["cudaStreamSynchronize"], ("stream_sync", "cudaStreamSynchronize")),
    (_t("cuda"), _t("cuda"), True, [], None),
    (_t("cpu", numel=0), _t("cuda"), True, [], None),  # seen on the H200: an empty row list
])
def test_copy_classification(src, dst, nb, syncs, expected):
    assert detect._copy_observation(src, dst, nb, syncs) == expected


# ---------------------------------------------------------------------------------------------
# The detector seam, phases, and torch.compile (CPU; the fake detector stands in for a GPU one)

from syncguard import detectors as registry  # noqa: E402


def test_registry_names_every_detector_and_marks_the_lasting_one():
    names = registry.names()
    assert {"cuda", "debug", "trace", "gpu_trace", "profile", "fake"} <= set(names)
    lasting = {n for n in names if registry.get(n).lasting}
    assert lasting == {"gpu_trace"}  # the only one that cannot be undone: never a default
    for n in names:
        assert isinstance(registry.get(n), registry.Detector)


def test_auto_resolves_to_cuda_or_says_why_it_fell_back(monkeypatch):
    monkeypatch.setattr(registry.get("cuda"), "unavailable", lambda: None)
    names, why = registry.resolve(("auto",))
    assert names == ("cuda",) and why.startswith("cuda")
    monkeypatch.setattr(registry.get("cuda"), "unavailable", lambda: "no libcupti for CUDA 12")
    names, why = registry.resolve(("auto",))
    assert names == ("debug", "trace") and "no libcupti for CUDA 12" in why
    # the profiler and CUPTI cannot both be held: a profile region never subscribes
    names, why = registry.resolve(("auto", "profile"))
    assert "cuda" not in names and "profile" in names and "profile detector holds CUPTI" in why


def test_auto_takes_cuda_while_another_thread_runs(monkeypatch):
    """A fake cuda availability; the thread is real. Another thread no longer keeps ``auto`` off
    the cuda detector: the crash it caused is fixed (reports/probes/cupti-threads-2.11.0/)."""
    import threading

    monkeypatch.setattr(registry.get("cuda"), "unavailable", lambda: None)
    go = threading.Event()
    t = threading.Thread(target=go.wait)
    t.start()
    try:
        assert registry.resolve(("auto",))[0] == ("cuda",)
    finally:
        go.set()
        t.join()


def test_parse_detectors_accepts_auto_and_cuda():
    assert parse_detectors("auto") == ("auto",)
    assert parse_detectors("cuda,profile") == ("cuda", "profile")
    assert syncguard.records.events.DETECTORS == ("auto",)


def test_phase_events_are_recorded_but_count_only_when_asked(monkeypatch):
    from syncguard.attribution import frames as attribution

    monkeypatch.setattr(attribution, "compiling", lambda: True)
    with syncguard.forbid(FAKE) as report:
        fake_sync()
    assert report.clean and report.allowed[0].phase == "compile"
    assert "fail_on_phases" in report.allowed[0].reason
    with pytest.raises(syncguard.SyncError):
        with syncguard.forbid(FAKE, fail_on_phases="compile") as report:
            fake_sync()
    assert report.syncs[0].phase == "compile"


def test_fail_on_phases_rejects_unknown():
    with pytest.raises(ValueError, match="unknown phase"):
        syncguard.audit(FAKE, fail_on_phases=("run",))


def test_graph_capture_setup_is_recognised_by_code_object_not_file_name():
    """A frame running torch.cuda.graph.__enter__'s code is capture set-up (no GPU needed to
    test the lookup: the code object is called through a stand-in, never executed by torch)."""
    torch = pytest.importorskip("torch")
    from syncguard.attribution import frames as attribution

    graphs = sys.modules.get("torch.cuda.graphs") or __import__("torch.cuda.graphs")
    code = torch.cuda.graphs.graph.__enter__.__code__
    frame = types.SimpleNamespace(f_code=code, f_back=None)
    assert attribution.current_phase(frame) == "graph_capture"
    assert attribution.current_phase(types.SimpleNamespace(f_code=test_fail_on_phases_rejects_unknown.__code__,
                                                           f_back=None)) == "run"
    assert graphs is not None


def test_allow_audit_forbid_compile_with_fullgraph():
    torch = pytest.importorskip("torch")

    def f(x):
        with syncguard.allow("inside compiled code"):
            y = x * 2
        with syncguard.audit(FAKE):
            y = y + 1
        with syncguard.forbid(FAKE):
            y = y.sin()
        return y

    torch._dynamo.reset()
    cf = torch.compile(f, fullgraph=True, backend="eager")
    x = torch.ones(3)
    assert torch.equal(cf(x), f(x))
    assert syncguard.regions.region._regions.get() == () and syncguard.regions.region._allows.get() == ()


def test_graph_break_runs_eagerly_and_stays_covered_by_allow():
    torch = pytest.importorskip("torch")

    def g(x):
        with syncguard.allow("token count"):
            y = x * 2
            torch._dynamo.graph_break()
            fake_sync()  # L-BREAK
        return y

    torch._dynamo.reset()
    cg = torch.compile(g, backend="eager")
    with syncguard.audit(FAKE) as report:
        cg(torch.ones(3))
    assert [e.reason for e in report.allowed] == ["token count"] and report.syncs == []
    assert report.allowed[0].lineno == line_of("L-BREAK")
    assert syncguard.regions.region._allows.get() == ()


def test_compile_phase_is_read_from_the_compilers_own_context():
    """A backend that "syncs" while Dynamo compiles: its event is phase compile, allowed by default."""
    torch = pytest.importorskip("torch")

    def backend(gm, inputs):
        fake_sync()  # L-BACKEND
        return gm

    torch._dynamo.reset()
    ch = torch.compile(lambda x: x + 1, backend=backend)
    with syncguard.audit(FAKE) as report:
        ch(torch.ones(3))
    assert report.syncs == [] and [e.phase for e in report.allowed] == ["compile"]
    assert report.allowed[0].lineno == line_of("L-BACKEND")


def test_nothing_stays_installed_after_the_last_region():
    """The reversible detectors restore every hook; no _gpu_trace activation without gpu_trace."""
    torch = pytest.importorskip("torch")
    import warnings

    before = (torch.cuda.synchronize, warnings._showwarnmsg, len(warnings.filters),
              "to" in vars(torch.Tensor))
    hub = detect.HUBS.trace
    hub.arm(lambda o: True, lambda: True, registry.torch_hooks.around)
    hub.disarm()
    assert (torch.cuda.synchronize, warnings._showwarnmsg, len(warnings.filters),
            "to" in vars(torch.Tensor)) == before
    assert not detect.HUBS.gpu_trace._registered


def test_a_thread_started_and_ended_inside_a_region_is_noticed_and_start_is_restored():
    """Why: such a thread is invisible to active_count() at both ends, and its profile records
    (no host op) or allocator frees must not be charged to the region."""
    from syncguard.detectors import torch_hooks

    original = threading.Thread.start

    class Quiet:
        state: dict = {}

        def single_threaded(self):
            return True

    alone, busy = Quiet(), Quiet()
    alone.state, busy.state = {}, {}
    torch_hooks.watch_threads(alone)
    torch_hooks.unwatch_threads(alone)
    torch_hooks.watch_threads(busy)
    assert threading.Thread.start is not original
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
    torch_hooks.unwatch_threads(busy)
    assert alone.state["ran_alone"] is True and busy.state["ran_alone"] is False
    assert threading.Thread.start is original


@pytest.mark.parametrize("fields", [
    dict(api="cudaStreamSynchronize", kind="stream_sync", thread="", host_blocked_us=None,
         detectors=(), phase="run"),
    dict(api="cudaMemcpyAsync", kind="pageable_copy", filename="u.py", lineno=3, function="f",
         stack=(Frame("u.py", 3, "f"),), thread="MainThread", host_blocked_us=4.5, detectors=("cuda",),
         phase="compile", note="n"),
])
def test_an_event_built_at_a_site_is_the_same_event(fields):
    """SyncEvent.at skips __init__ (the region's exit makes one per sync): the object must be
    indistinguishable from SyncEvent(**fields) in every way a report uses it."""
    site = Site(fields.get("filename"), fields.get("lineno"), fields.get("function"),
                fields.get("stack", ()))
    slow = SyncEvent(**fields)
    fast = SyncEvent.at(site, fields["api"], fields["kind"], fields["thread"],
                        fields["host_blocked_us"], fields["detectors"], fields["phase"],
                        fields.get("note"))
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert fast.to_dict() == slow.to_dict() and dataclasses.astuple(fast) == dataclasses.astuple(slow)
    assert not hasattr(fast, "__dict__") and not hasattr(slow, "__dict__")  # slots alone
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.kind = "x"


def test_region_arguments_parse_the_same_each_time_however_given():
    """A region's parsed arguments are remembered (a region per test or training step): a bad
    value still raises every time, and unhashable (list) values parse as tuples do."""
    for _ in range(2):
        with pytest.raises(ValueError, match="unknown detector"):
            syncguard.audit("bogus")
        with pytest.raises(ValueError, match="unknown phase"):
            syncguard.audit("fake", fail_on_phases="warmup")
    assert syncguard.audit(["fake", "fake"]).detectors == syncguard.audit(("fake",)).detectors == ("fake",)
    assert syncguard.audit("fake", fail_on_phases=["compile"]).fail_on_phases == ("compile",)
    assert syncguard.audit("bogus", predict=True).detectors == ("predict",)  # not parsed: not run


# -- found by trying the library as a new user would (each failed before its fix) -------------

def test_one_allow_object_entered_by_two_tasks_and_two_threads_at_once():
    """A module-level allow shared by concurrent tasks: leaving it in one task had popped the
    other task's token (ValueError: created in a different Context)."""
    from syncguard.detectors import routing
    shared = syncguard.allow("the same allow, entered concurrently")

    async def task(delay):
        with syncguard.audit(FAKE) as report:
            with shared:
                fake_sync()
                await asyncio.sleep(delay)
            fake_sync()  # after leaving it: not allowed
        return report

    async def both():
        return await asyncio.gather(task(0.01), task(0.02))  # the first in leaves first

    reports = asyncio.run(both())
    barrier, out = threading.Barrier(2), []

    def thread():
        with syncguard.audit(FAKE) as report:
            with shared:
                barrier.wait()
                fake_sync()
                barrier.wait()
            fake_sync()
        out.append(report)

    threads = [threading.Thread(target=thread) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [(len(r.allowed), len(r.syncs)) for r in reports + out] == [(1, 1)] * 4
    assert routing.allows.get() == () and routing.regions.get() == ()


def test_max_bounds_each_entry_of_a_reused_allow_object():
    """The docstring's "one entry of the block": three entries of one allow(max=1) object each
    allow one sync, as three calls of a function it decorates do."""
    once = syncguard.allow("one per entry", max=1)
    with syncguard.audit(FAKE) as report:
        for _ in range(3):
            with once:
                fake_sync()
    assert (len(report.allowed), len(report.syncs)) == (3, 0)
    with syncguard.audit(FAKE) as report:
        with once:
            fake_sync()
            fake_sync()
    assert (len(report.allowed), len(report.syncs)) == (1, 1)
    assert "exceeds allow(max=1)" in report.syncs[0].note


def test_regions_left_out_of_order_are_both_gone():
    from syncguard.detectors import routing
    outer, inner = syncguard.audit(FAKE), syncguard.audit(FAKE)
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)
    assert routing.regions.get() == (inner,)
    inner.__exit__(None, None, None)
    assert routing.regions.get() == () and fake_sync() is False


def test_a_region_an_async_generator_holds_is_left_by_its_finaliser_without_an_error():
    """Breaking out of ``async for`` leaves the generator to be closed by the loop's finaliser,
    in another task: leaving the region there had raised ValueError (a token from a different
    Context), logged as "Task exception was never retrieved"."""
    import gc
    errors = []

    async def gen():
        with syncguard.audit(FAKE):
            yield 1
            yield 2

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx))
        async for _ in gen():
            break
        gc.collect()
        await asyncio.sleep(0.01)

    asyncio.run(main())
    assert errors == []
    r = syncguard.audit(FAKE)
    contextvars.copy_context().run(r.__enter__)
    r.__exit__(None, None, None)  # this context never held it: nothing to take, no error


def test_a_sync_error_pickles_and_copies_with_its_report():
    """A forbid() failing in a process pool: unpickling had called SyncError(message) and taken
    the message for the report, and the pool broke (BrokenProcessPool) instead of raising it."""
    import copy
    import pickle
    with pytest.raises(syncguard.SyncError) as info:
        with syncguard.forbid(FAKE):
            fake_sync()
    for clone in (pickle.loads(pickle.dumps(info.value)), copy.copy(info.value),
                  copy.deepcopy(info.value)):
        assert type(clone) is syncguard.SyncError and str(clone) == str(info.value)
        assert clone.report.to_dict() == info.value.report.to_dict()


def test_the_first_regions_of_a_process_entered_by_many_threads_at_once(tmp_path):
    """In a fresh interpreter: the built-in detectors were registered by whichever threads came
    first, and the others raised "detector 'fake' is already registered"."""
    import subprocess
    code = (
        "import threading, syncguard\n"
        "from syncguard.testing import fake_sync\n"
        "barrier, errors, seen = threading.Barrier(8), [], []\n"
        "def run():\n"
        "    barrier.wait()\n"
        "    try:\n"
        "        with syncguard.audit('fake') as r:\n"
        "            fake_sync()\n"
        "        seen.append(len(r.syncs))\n"
        "    except Exception as e:\n"
        "        errors.append(repr(e))\n"
        "ts = [threading.Thread(target=run) for _ in range(8)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "print(errors, seen)\n")
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout
        assert out.strip() == "[] [1, 1, 1, 1, 1, 1, 1, 1]", out


def test_a_region_left_by_an_interrupt_still_reports_what_it_saw():
    with pytest.raises(KeyboardInterrupt):
        with syncguard.audit(FAKE) as report:
            fake_sync()
            raise KeyboardInterrupt
    assert len(report.syncs) == 1 and not report.clean

    def steps():
        with syncguard.forbid(FAKE) as report:
            fake_sync()
            yield report
            yield report

    gen = steps()
    report = next(gen)
    gen.close()  # GeneratorExit in the region: it ends, reports its sync, and raises nothing
    assert len(report.syncs) == 1 and not report.clean


@pytest.mark.parametrize("kw", [dict(detectors=None), dict(detectors=123), dict(detectors=b"fake"),
                                dict(fail_on_phases=None), dict(fail_on_phases=1)])
def test_an_argument_of_the_wrong_type_is_named_in_one_line(kw):
    name = next(iter(kw))
    with pytest.raises(TypeError, match=rf"^{name} must be a comma-separated str or an iterable "
                                        rf"of str, got {kw[name]!r}$".replace("(", r"\(")):
        syncguard.audit(**kw)


def test_allow_api_takes_every_name_an_event_can_carry_and_nothing_else():
    from syncguard.detectors.cuda.calls import DRIVER_APIS, RUNTIME_APIS
    for api in ("cudaStreamSynchronize", "cuStreamSynchronize", "cudaMemcpyAsync_ptsz",
                *RUNTIME_APIS, *DRIVER_APIS):
        assert syncguard.allow("r", api=api).api == api
    for api in ("cudaStreamSynchronise", 1, ""):
        with pytest.raises(ValueError, match=r"^allow\(api=\.\.\.\) must be one of "):
            syncguard.allow("r", api=api)


def test_a_debug_hub_that_fails_to_arm_leaves_the_warning_filters_as_they_were(monkeypatch):
    """Where reading the sync-debug mode raises (it starts CUDA; here a CPU build), the hub had
    added its two warning filters first and left them behind."""
    import torch
    import warnings

    def no_cuda():
        raise AssertionError("Torch not compiled with CUDA enabled")
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", no_cuda)
    before = list(warnings.filters)
    with pytest.raises(AssertionError):
        with syncguard.audit(("fake", "debug")):
            pass
    assert warnings.filters == before


def test_entering_or_leaving_a_region_or_an_allow_says_so_to_the_cuda_detectors_c_callback(
        monkeypatch):
    """routing.scopes_changed is told of every change to a context's regions or allows (the C
    callback keeps a call that repeats the last one without the GIL only while none happened:
    detectors/cuda/_cuptifast_c/pairing.c, repeat()); a region left out of order too."""
    from syncguard.detectors import routing

    told = []
    monkeypatch.setattr(routing, "scopes_changed", lambda: told.append(1))
    with syncguard.audit(FAKE):
        with syncguard.allow("x"):
            pass
    assert len(told) == 4
    outer, inner = syncguard.audit(FAKE), syncguard.audit(FAKE)
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # out of order (scope._leave)
    inner.__exit__(None, None, None)
    assert len(told) == 8
