"""GPU scenarios for the cuda detector and the region API inside real programs (issues 12, 13).

Each scenario runs in its own process (``python -m tests.gpu.scenarios NAME OUT.json``) so one
failure cannot mask another, and writes what it measured as JSON; tests/gpu/test_real_programs.py
judges it. Ground truth for kinds is the PyTorch profiler's runtime trace taken in the same
process (after the cuda audits: once the profiler has run, CUPTI cannot be subscribed again).
"""
from __future__ import annotations

import contextlib
import json
import sys
import threading
import traceback
import warnings


def _torch():
    import torch

    torch.cuda.init()
    x = torch.ones(8, device="cuda")
    (x @ x).item()  # warm up: lazy library initialisation is not what we audit
    torch.cuda.synchronize()
    return torch


def _events(report):
    return [dict(kind=e.kind, api=e.api, line=e.lineno, file=e.filename, thread=e.thread,
                 phase=e.phase, detectors=list(e.detectors)) for e in report.syncs + report.allowed]


def _lasting_state():
    """What syncguard could have left behind: compared before the first region and after the last.
    Not the CUPTI subscription, nor the wrapper around torch's profiler start and stop: the cuda
    detector keeps both from its first region on, by design (src/syncguard/detectors/cuda/hub.py);
    torch's own function must still be the one behind the wrapper."""
    import warnings as w

    import torch
    import torch.autograd.profiler as ap

    from syncguard.detectors.cuda.detector import HUB

    return {"synchronize": id(torch.cuda.synchronize), "to": "to" in vars(torch.Tensor) and id(vars(torch.Tensor)["to"]),
            "showwarnmsg": id(w._showwarnmsg), "filters": len(w.filters),
            "prepare_profiler": id(_unwrapped(getattr(ap, "_prepare_profiler", None))),
            "disable_profiler": id(_unwrapped(getattr(ap, "_disable_profiler", None))),
            "sync_debug_mode": torch.cuda.get_sync_debug_mode(), "cupti_lent": HUB.handed,
            "autograd_engine": id(torch.autograd.variable.Variable.__dict__["_execution_engine"])}


def _unwrapped(fn):
    return getattr(fn, "__wrapped__", fn)


def _raises(fn):
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - the type is what we measure
        return type(e).__module__ + "." + type(e).__qualname__
    return None


def error_mode(out):
    torch = _torch()
    import syncguard

    before = _lasting_state()
    x = torch.ones(4, device="cuda")
    with syncguard.audit() as rep:
        x.sum().item()
    out["detectors"] = list(rep.detectors)
    out["events"] = _events(rep)
    out["state_equal_after"] = _lasting_state() == before
    out["state_after"] = _lasting_state()
    out["state_before"] = before
    torch.cuda.set_sync_debug_mode("error")
    try:
        out["after_audit"] = _raises(lambda: x.sum().item())
        with syncguard.audit() as rep2:
            out["inside_audit"] = _raises(lambda: x.sum().item())
        out["inside_detectors"] = list(rep2.detectors)
    finally:
        torch.cuda.set_sync_debug_mode(0)


def exception_types(out):
    torch = _torch()
    import syncguard
    from torch.nn.utils.rnn import pack_padded_sequence

    def oom():
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")

    def argcheck():
        pack_padded_sequence(torch.ones(3, 2, 4, device="cuda"), torch.tensor([3, 2], device="cuda"))

    out["oom_bare"], out["arg_bare"] = _raises(oom), _raises(argcheck)
    with syncguard.audit():
        out["oom_inside"], out["arg_inside"] = _raises(oom), _raises(argcheck)
    out["oom_after"], out["arg_after"] = _raises(oom), _raises(argcheck)


def _free_then_empty_cache(t):
    """A freed 64 MiB block is cached; empty_cache() then returns it with cudaFree (a sync).
    (Run 2 had the tensor still alive during empty_cache, so both detectors saw nothing.)"""
    x = t.empty(1 << 26, dtype=t.uint8, device="cuda")
    del x
    t.cuda.empty_cache()


KIND_OPS = {
    "item": lambda t, s: s["d"].sum().item(),
    "cpu_int_index": lambda t, s: s["d"][s["idx"]],
    "mask_put_accumulate": lambda t, s: s["d"].index_put_((s["mask"],), s["v"], accumulate=True),
    "pageable_nonblocking_h2d": lambda t, s: s["h"].to("cuda", non_blocking=True),
    "pinned_nonblocking_h2d": lambda t, s: s["p"].to("cuda", non_blocking=True),
    "blocking_h2d": lambda t, s: s["h"].to("cuda"),
    "d2h_cpu": lambda t, s: s["d"].cpu(),
    "synchronize": lambda t, s: t.cuda.synchronize(),
    "event_sync": lambda t, s: s["ev"].synchronize(),
    "empty_cache": lambda t, s: _free_then_empty_cache(t),
    "isin": lambda t, s: t.isin(s["d"], s["d2"]),
    "unique": lambda t, s: t.unique(s["d"]),
    "masked_select": lambda t, s: s["d"].masked_select(s["d"] > 3),
    "nonzero": lambda t, s: s["d"].nonzero(),
    "clean_add": lambda t, s: s["d"].add_(1),
    "d2d_copy": lambda t, s: s["d2"].copy_(s["d"][: s["d2"].numel()]),
}


def kinds(out):
    torch = _torch()
    import syncguard
    from syncguard.detectors import hooks as detect

    s = {"d": torch.arange(64.0, device="cuda"), "d2": torch.arange(8.0, device="cuda"),
         "idx": torch.tensor([1, 3, 5]), "mask": torch.zeros(64, dtype=torch.bool),
         "v": torch.ones(1, device="cuda"), "h": torch.ones(1 << 16),
         "p": torch.ones(1 << 16).pin_memory(), "ev": torch.cuda.Event()}
    s["mask"][::3] = True
    s["ev"].record()
    for fn in KIND_OPS.values():
        fn(torch, s)
    torch.cuda.synchronize()
    res = {}
    for name, fn in KIND_OPS.items():
        torch.cuda.synchronize()
        s["ev"].record()
        with syncguard.audit() as rep:
            fn(torch, s)
        res[name] = {"cuda": sorted(e.kind for e in rep.syncs), "detectors": list(rep.detectors),
                     "lines_ok": all(e.filename == __file__ for e in rep.syncs),
                     "notes": rep.notes}
    # the profiler's rows, kept for an op where the two detectors disagree
    with _harvested_rows(markers=True) as harvests:
        for name, fn in KIND_OPS.items():  # ground truth: the profiler's runtime trace, same process
            torch.cuda.synchronize()
            s["ev"].record()
            with syncguard.audit("profile") as rep:
                fn(torch, s)
            res[name]["profile"] = sorted(e.kind for e in rep.syncs)
            if res[name]["profile"] != res[name]["cuda"]:
                res[name]["profile_events"] = _events(rep)
                res[name]["profiler_rows"] = harvests[-1]
    out["ops"] = res
    out["pinned_pool"] = detect.__name__
    out["callback"] = syncguard.detectors.get("cuda").callback


def threads(out):
    torch = _torch()
    import syncguard

    x = torch.ones(4, device="cuda")
    started, done = threading.Event(), threading.Event()
    seen = {}

    def worker():
        with syncguard.audit() as r:
            started.set()
            for _ in range(20):
                x.sum().item()
        seen["worker"] = _events(r)
        done.set()

    with syncguard.audit() as main:
        t = threading.Thread(target=worker, name="bg")
        t.start()
        started.wait()
        done.wait()
        t.join()
    out["main_events"] = _events(main)
    out["worker_events"] = seen["worker"]
    # a thread with no region at all while main's region is open
    with syncguard.audit() as main2:
        t = threading.Thread(target=lambda: [x.sum().item() for _ in range(20)], name="bare")
        t.start()
        t.join()
    out["main2_events"] = _events(main2)


def profiler_inside(out):
    torch = _torch()
    import syncguard
    from torch.profiler import ProfilerActivity, profile

    x = torch.ones(4, device="cuda")
    with syncguard.audit() as rep:
        x.sum().item()  # L-BEFORE
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            x.sum().item()
        x.sum().item()  # L-AFTER
    names = [e.name for e in prof.events()]
    out["profiler_saw_sync"] = "cudaStreamSynchronize" in names
    out["profiler_cuda_events"] = sum(1 for e in prof.events() if "Memcpy" in e.name)
    out["detectors"] = list(rep.detectors)
    out["events"] = _events(rep)
    out["notes"] = rep.notes
    with syncguard.audit() as rep2:
        x.sum().item()
    out["later_detectors"], out["later_reason"] = list(rep2.detectors), rep2.detector_reason
    out["later_events"] = _events(rep2)


def profiler_first(out):
    torch = _torch()
    import syncguard
    from torch.profiler import ProfilerActivity, profile

    x = torch.ones(4, device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        x.sum().item()
    with syncguard.audit() as rep:
        x.sum().item()
    out["detectors"], out["reason"] = list(rep.detectors), rep.detector_reason
    out["events"], out["notes"] = _events(rep), rep.notes


def compile_phase(out):
    torch = _torch()
    import syncguard

    def f(x):
        with syncguard.allow("inside compiled code"):
            y = x * 2 + 1
        return y.sin()

    cf = torch.compile(f, fullgraph=True)
    x = torch.ones(64, device="cuda")
    with syncguard.audit() as rep:
        cf(x)
    out["first_call"] = _events(rep)
    out["first_clean"] = rep.clean
    with syncguard.audit() as rep2:
        cf(x)
    out["steady"] = _events(rep2)
    g = torch.compile(lambda x: (x + 3).cos(), fullgraph=True)
    with syncguard.audit(fail_on_phases=("compile",)) as rep3:
        g(x)
    out["counted"] = [e.phase for e in rep3.syncs]


def graph_capture(out):
    torch = _torch()
    import syncguard

    x = torch.ones(64, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y = x * 2
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with syncguard.audit() as rep:
        with torch.cuda.graph(g):
            y = x * 2
    out["capture"] = _events(rep)
    out["capture_clean"] = rep.clean
    with syncguard.audit() as rep2:
        g.replay()
    out["replay"] = _events(rep2)
    torch.cuda.synchronize()
    out["replay_ok"] = bool((y == 2).all().item())
    g2 = torch.cuda.CUDAGraph()

    def bad():
        with torch.cuda.graph(g2):
            (x * 2).sum().item()

    with syncguard.audit():
        out["item_in_capture"] = _raises(bad)


def backward(out):
    """A CUDA backward pass runs on torch's autograd device thread, not the caller's."""
    torch = _torch()
    import syncguard

    class SyncInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            g.sum().item()  # L-PY-BACKWARD
            return g * 2

    x = torch.ones(64, device="cuda", requires_grad=True)
    SyncInBackward.apply(x).sum().backward()  # warm up
    with syncguard.audit() as rep:
        SyncInBackward.apply(x).sum().backward()  # L-CALL-BACKWARD
    out["events"] = _events(rep)
    out["notes"] = rep.notes
    from syncguard.testing import marked_line

    out["py_backward_line"] = marked_line(__file__, "L-PY-BACKWARD")
    from torch.autograd.variable import Variable
    out["engine_restored"] = type(Variable.__dict__["_execution_engine"]).__name__ != "_EngineProxy"


def profile_threads(out):
    """Issue 13: with ``profile`` among the detectors, another thread's syncs made while this
    thread's region is open must not reach it (they once did, as thread MainThread)."""
    torch = _torch()
    import syncguard

    x = torch.ones(4, device="cuda")
    go, done = threading.Event(), threading.Event()

    def worker():
        go.wait()
        for _ in range(20):
            x.sum().item()
        torch.cuda.synchronize()
        done.set()

    t = threading.Thread(target=worker, name="bg-noise")
    t.start()
    with syncguard.audit(detectors="debug,trace,profile") as rep:
        go.set()
        done.wait()
        x.sum().item()  # L-MAIN-ITEM
    t.join()
    out["events"] = _events(rep)
    out["notes"] = rep.notes
    from syncguard.testing import marked_line

    out["main_line"] = marked_line(__file__, "L-MAIN-ITEM")


def _capture_and_replay(torch, x):
    """Capture ``y = x * 2 + 1`` into a graph and replay it twice with new input; the outputs."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y = x * 2 + 1
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2 + 1
    got = []
    for v in (3.0, 5.0):
        x.fill_(v)
        g.replay()
        got.append(y.clone())
    torch.cuda.synchronize()
    return [t.cpu().tolist() for t in got]


def graph_capture_all_detectors(out):
    """Issue 13: capture and replay under every detector at once (races included) give what
    they give without syncguard, and no CUDA call of syncguard's breaks the capture."""
    torch = _torch()
    import syncguard

    out["bare"] = _capture_and_replay(torch, torch.ones(64, device="cuda"))
    x = torch.ones(64, device="cuda")
    with syncguard.audit(detectors="cuda,debug,trace,profile", races=True) as rep:
        got = _capture_and_replay(torch, x)
    out["audited"] = got
    out["detectors"] = list(rep.detectors)
    out["events"] = _events(rep)
    out["notes"] = rep.notes
    out["races"] = [str(r) for r in rep.races]


_SYNC_NAMES = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync", "cudaMemcpy")


def _profiler_rows(events):
    """The profiler's own view of the runtime calls that may sync: thread, times, parent chain."""
    rows = []
    for e in events:
        if e.name not in _SYNC_NAMES or str(e.device_type).endswith("CUDA"):
            continue
        chain, p = [], e.cpu_parent
        while p is not None:
            chain.append(p.name[:80])
            p = p.cpu_parent
        rows.append(dict(name=e.name, thread=e.thread, start=e.time_range.start,
                         end=e.time_range.end, is_async=e.is_async, chain=chain))
    return rows


def _marker_rows(events):
    """syncguard's own ranges (region and allow markers) on the same clock as the rows above."""
    from syncguard.detectors.profiler import MARKER

    return [dict(name=e.name, thread=e.thread, start=e.time_range.start, end=e.time_range.end,
                 device=str(getattr(e, "device_type", ""))) for e in events if e.name.startswith(MARKER)]


def profile_async_tail(out):
    """A profiled region whose only work is a kernel still running when the region ends: no sync
    is in it. The profiler's stop then waits for the kernel (its own cudaDeviceSynchronize) while
    the GPU-side copy of the region's marker lasts until the kernel ends. The rows are kept, with
    each marker range's device type."""
    torch = _torch()
    import syncguard

    torch.cuda._sleep(1000)  # the sleep kernel loaded
    torch.cuda.synchronize()
    with _harvested_rows(markers=True) as harvests:
        with syncguard.audit("profile") as rep:
            torch.cuda._sleep(50_000_000)  # tens of milliseconds of GPU time, not waited for
    out["events"] = _events(rep)
    out["detectors"] = list(rep.detectors)
    out["notes"] = rep.notes
    out["rows"] = [r for rows in harvests for r in rows]


@contextlib.contextmanager
def _harvested_rows(markers: bool):
    """Each time a profile region's trace is read (``records_from_profiler``), that trace's
    sync-call rows, and with ``markers`` syncguard's marker rows, appended to the list yielded:
    one list per harvest, so a failure shows what the profile detector read."""
    from syncguard.detectors import hooks as detect

    harvests, original = [], detect.records_from_profiler

    def spy(events):
        events = list(events)
        harvests.append(_profiler_rows(events) + (_marker_rows(events) if markers else []))
        return original(events)

    detect.records_from_profiler = spy
    try:
        yield harvests
    finally:
        detect.records_from_profiler = original


def _kineto_rows(prof):
    """The same calls as Kineto handed them to torch (before the event tree is built)."""
    rows = []
    for k in prof.profiler.kineto_results.events():
        if k.name() in _SYNC_NAMES or k.name().startswith(("aten::_local_scalar", "aten::copy_")):
            rows.append(dict(name=k.name(), start_tid=k.start_thread_id(), end_tid=k.end_thread_id(),
                             device=str(k.device_type()), corr=k.correlation_id(),
                             linked=k.linked_correlation_id(), start_ns=k.start_ns(),
                             dur_ns=k.duration_ns()))
    return rows


def profile_links(out):
    """Every sync of one profiled region is linked to its op and line, not only the first (on
    torch 2.13.0 and 2.14.1 only a region's first sync was: the matrix's
    test_declared_sync[index_put_gpu_mask-default] at 973d48e). The profiler's own rows are kept
    so that a failure shows why."""
    torch = _torch()
    import syncguard
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(4096, device="cuda")
    x.cpu(), x.sum().item(), x[:100].cpu()
    torch.cuda.synchronize()
    with _harvested_rows(markers=False) as harvests:
        with syncguard.audit(detectors="debug,trace,profile") as rep:
            with syncguard.allow("a set-up scope, as the cases' _setup"):
                x.cpu()  # L-LINK-1
                x.sum().item()  # L-LINK-2
            x[:100].cpu()  # L-LINK-3
    out["events"] = [dict(ev, op=e.op) for ev, e in zip(_events(rep), rep.syncs + rep.allowed)]
    out["notes"] = rep.notes
    out["seen"] = [r for rows in harvests for r in rows]
    from syncguard.testing import marked_line

    out["lines"] = [marked_line(__file__, f"L-LINK-{k}") for k in (1, 2, 3)]
    for stack in (False, True):  # the bare profiler over the same three syncs, for comparison
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     with_stack=stack) as prof:
            x.cpu()
            x.sum().item()
            x[:100].cpu()
        out[f"bare_with_stack_{stack}"] = _profiler_rows(prof.events())
        out[f"kineto_with_stack_{stack}"] = _kineto_rows(prof)


def _driver():
    """libcuda as a C++ extension would call it: no runtime in between."""
    import ctypes

    lib = ctypes.CDLL("libcuda.so.1")
    v, sz = ctypes.c_void_p, ctypes.c_size_t
    for name, args in (("cuStreamSynchronize", [v]), ("cuCtxSynchronize", []),
                       ("cuCtxGetCurrent", [ctypes.POINTER(v)]), ("cuMemcpyDtoH_v2", [v, v, sz]),
                       ("cuMemcpyHtoD_v2", [v, v, sz]), ("cuMemcpyHtoDAsync_v2", [v, v, sz, v]),
                       ("cuMemcpy", [v, v, sz]), ("cuMemcpyAsync", [v, v, sz, v])):
        getattr(lib, name).argtypes = args
    if hasattr(lib, "cuCtxSynchronize_v2"):  # CUDA 13 drivers: cuCtxSynchronize(ctx)
        lib.cuCtxSynchronize_v2.argtypes = [v]
    return lib


def _current_ctx(lib):
    import ctypes

    ctx = ctypes.c_void_p()
    assert lib.cuCtxGetCurrent(ctypes.byref(ctx)) == 0 and ctx.value
    return ctx


#: driver calls a C++/CUDA extension makes directly -> the kind a host wait must be reported as
#: (None: no wait). Declared here; cross-checked in the same process by a CUPTI census of every
#: runtime and driver API each call made (the profiler lists no driver API) and, for copies, by the
#: profiler's GPU memcpy row (it names the direction and the host memory).
DRIVER_OPS = {
    "cuStreamSynchronize": ("stream_sync", lambda lib, s: lib.cuStreamSynchronize(s["stream"])),
    "cuCtxSynchronize": ("device_sync", lambda lib, s: lib.cuCtxSynchronize()),
    "cuCtxSynchronize_v2": ("device_sync", lambda lib, s: lib.cuCtxSynchronize_v2(s["ctx"])),
    "cuMemcpyDtoH_v2": ("blocking_copy_d2h",
                        lambda lib, s: lib.cuMemcpyDtoH_v2(s["h"], s["d"], s["n"])),
    "cuMemcpyHtoD_v2": ("blocking_copy_h2d",
                        lambda lib, s: lib.cuMemcpyHtoD_v2(s["d"], s["h"], s["n"])),
    "cuMemcpyHtoDAsync_v2/pageable": ("pageable_copy", lambda lib, s: lib.cuMemcpyHtoDAsync_v2(
        s["d"], s["h"], s["n"], s["stream"])),
    "cuMemcpyHtoDAsync_v2/pinned": (None, lambda lib, s: lib.cuMemcpyHtoDAsync_v2(
        s["d"], s["p"], s["n"], s["stream"])),
    # unified addressing: the call names no direction; the pointers say it
    "cuMemcpy/d2h": ("blocking_copy_d2h", lambda lib, s: lib.cuMemcpy(s["h"], s["d"], s["n"])),
    "cuMemcpyAsync/h2d pageable": ("pageable_copy", lambda lib, s: lib.cuMemcpyAsync(
        s["d"], s["h"], s["n"], s["stream"])),
}


def driver_calls(out):
    """Syncs and copies issued straight to the driver, as by an extension (issue 12: "sync and
    copy APIs at both the runtime and driver levels"). CUDA keeps old entry points beside new
    ones (``cuMemcpyDtoH`` / ``cuMemcpyDtoH_v2``) and cuda.h compiles a call to the newest."""
    torch = _torch()
    import syncguard
    from syncguard.detectors.cuda.detector import HUB
    from torch.profiler import ProfilerActivity, profile

    lib = _driver()
    n = 1 << 20
    d, h = torch.zeros(n // 4, device="cuda"), torch.ones(n // 4)
    p = torch.ones(n // 4).pin_memory()
    s = {"stream": torch.cuda.current_stream().cuda_stream, "ctx": _current_ctx(lib),
         "d": d.data_ptr(), "h": h.data_ptr(), "p": p.data_ptr(), "n": n}
    HUB.unavailable()  # loads libcupti and its name table
    names = {HUB.lib.callback_name(1, cbid) for (dom, cbid) in HUB.table if dom == 1}
    ops = {k: v for k, v in DRIVER_OPS.items()
           if k != "cuCtxSynchronize_v2" or (hasattr(lib, k) and k in names)}
    out["skipped"] = sorted(set(DRIVER_OPS) - set(ops))  # the driver or CUPTI has no _v2 sync
    out["watched_driver_ids"] = sorted(names)
    for _, fn in ops.values():
        assert fn(lib, s) == 0
    torch.cuda.synchronize()
    res = {}
    for name, (want, fn) in ops.items():
        torch.cuda.synchronize()
        with syncguard.audit() as rep:
            rc = fn(lib, s)
        res[name] = {"want": want, "rc": rc, "events": _events(rep), "detectors": list(rep.detectors),
                     "notes": rep.notes}
    from syncguard.detectors.cuda.cupti import api_census

    for name, (_, fn) in ops.items():  # every runtime and driver API the call made (ground truth)
        torch.cuda.synchronize()
        with HUB.lent(who="api_census"):  # the hub holds CUPTI since the regions above
            res[name]["census"] = api_census(HUB.lib, lambda: fn(lib, s))
    for name, (_, fn) in ops.items():  # the profiler's view of the same calls, same process
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn(lib, s)
            torch.cuda.synchronize()
        res[name]["profiler_memcpy"] = sorted({e.name for e in prof.events()
                                               if e.name.startswith("Memcpy")})
    out["ops"] = res
    out["file"] = __file__


SCENARIOS = {f.__name__: f for f in (error_mode, exception_types, kinds, threads, profiler_inside,
                                     profiler_first, compile_phase, graph_capture, backward,
                                     profile_threads, graph_capture_all_detectors,
                                     profile_links, driver_calls, profile_async_tail)}


def main(argv) -> int:
    name, path = argv[1], argv[2]
    out: dict = {"scenario": name}
    warnings.simplefilter("default")
    try:
        SCENARIOS[name](out)
        out["ok"] = True
    except BaseException:  # noqa: BLE001 - recorded, judged by the test
        out["ok"], out["error"] = False, traceback.format_exc()
    import torch

    out["torch"] = torch.__version__
    with open(path, "w") as f:
        json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
